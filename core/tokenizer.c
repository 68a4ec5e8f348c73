/* Tokenizers from a GGUF vocab: SentencePiece-style `llama` and byte-level BPE `gpt2`, following llama.cpp. */
#include "core/tokenizer.h"

#include "core/unicode.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tokenizer.ggml.token_type values. */
enum {
    MK_TOK_NORMAL = 1,
    MK_TOK_UNKNOWN = 2,
    MK_TOK_CONTROL = 3,
    MK_TOK_USER_DEFINED = 4,
    MK_TOK_UNUSED = 5,
    MK_TOK_BYTE = 6,
};

enum mk_tok_kind { MK_TOK_SPM, MK_TOK_BPE };

/* The replacement character U+FFFD stands in for invalid bytes when classifying (as llama.cpp
 * does), while the bytes themselves are kept so that they still round-trip. */
#define MK_TOK_REPLACEMENT 0xFFFDu

/* ---- Pre-tokenizers: tokenizer.ggml.pre names and their split patterns, as llama.cpp lists them
 * (src/llama-vocab.cpp). Each pattern splits the words the one before it made. */

static const char *const mk_tok_rx_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
static const char *const mk_tok_rx_gpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const mk_tok_rx_llama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const mk_tok_rx_qwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const mk_tok_rx_qwen35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const mk_tok_rx_starcoder[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const mk_tok_rx_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};
/* clang-format off: long patterns kept whole */
static const char *const mk_tok_rx_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-"
    "\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D"
    "\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-"
    "\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113"
    "\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149"
    "\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B"
    "\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-"
    "\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0"
    "-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+",
    "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
    "\\s+$",
    "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
    "\\p{N}+",
};
/* clang-format on */
static const char *const mk_tok_rx_deepseek_coder[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", "\\p{N}",
};
static const char *const mk_tok_rx_deepseek3[] = {
    "\\p{N}{1,3}",
    "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const mk_tok_rx_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-"
    "z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const mk_tok_rx_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'["
    "lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'["
    "vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const mk_tok_rx_bloom[] = {
    " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+",
};

#define MK_TOK_RX(a) a, sizeof a / sizeof a[0]

/* A pre-tokenizer: its patterns, and the vocab defaults llama.cpp ties to it. */
struct mk_tok_pre {
    const char *name; /* the first tokenizer.ggml.pre value naming it */
    const char *const *regex;
    size_t n_regex;
    bool ignore_merges; /* a word that is itself a token is not merged up from bytes */
    bool add_bos;       /* add_bos_token's default */
};

static const struct mk_tok_pre mk_tok_pres[] = {
    { "default", MK_TOK_RX(mk_tok_rx_default), false, false },
    { "llama3", MK_TOK_RX(mk_tok_rx_llama3), true, true },
    { "dbrx", MK_TOK_RX(mk_tok_rx_llama3), false, false },
    { "gpt-2", MK_TOK_RX(mk_tok_rx_gpt2), false, false },
    { "qwen2", MK_TOK_RX(mk_tok_rx_qwen2), false, false },
    { "qwen35", MK_TOK_RX(mk_tok_rx_qwen35), false, false },
    { "starcoder", MK_TOK_RX(mk_tok_rx_starcoder), false, false },
    { "falcon", MK_TOK_RX(mk_tok_rx_falcon), false, false },
    { "deepseek-llm", MK_TOK_RX(mk_tok_rx_deepseek_llm), false, false },
    { "deepseek-coder", MK_TOK_RX(mk_tok_rx_deepseek_coder), false, false },
    { "deepseek-v3", MK_TOK_RX(mk_tok_rx_deepseek3), false, false },
    { "tekken", MK_TOK_RX(mk_tok_rx_tekken), true, true },
    { "gpt-4o", MK_TOK_RX(mk_tok_rx_gpt4o), false, false },
    { "bloom", MK_TOK_RX(mk_tok_rx_bloom), false, false },
};

/* Every tokenizer.ggml.pre value mk knows, and the pre-tokenizer (by first name) it means. */
static const struct {
    const char *name, *pre;
} mk_tok_pre_names[] = {
    { "default", "default" },
    { "llama3", "llama3" },
    { "llama-v3", "llama3" },
    { "llama-bpe", "llama3" },
    { "falcon3", "llama3" },
    { "falcon-h1", "llama3" },
    { "pixtral", "llama3" },
    { "midm-2.0", "llama3" },
    { "lfm2", "llama3" },
    { "jina-v5-nano", "llama3" },
    { "dbrx", "dbrx" },
    { "smaug-bpe", "dbrx" },
    { "gpt-2", "gpt-2" },
    { "phi-2", "gpt-2" },
    { "jina-es", "gpt-2" },
    { "jina-de", "gpt-2" },
    { "gigachat", "gpt-2" },
    { "jina-v2-es", "gpt-2" },
    { "jina-v2-de", "gpt-2" },
    { "a.x-4.0", "gpt-2" },
    { "mellum", "gpt-2" },
    { "modern-bert", "gpt-2" },
    { "mpt", "gpt-2" },
    { "olmo", "gpt-2" },
    { "jais", "gpt-2" },
    { "trillion", "gpt-2" },
    { "granite-docling", "gpt-2" },
    { "exaone4", "gpt-2" },
    { "qwen2", "qwen2" },
    { "deepseek-r1-qwen", "qwen2" },
    { "kormo", "qwen2" },
    { "f2llmv2", "qwen2" },
    { "megrez", "qwen2" },
    { "stablelm2", "qwen2" },
    { "hunyuan", "qwen2" },
    { "solar-open", "qwen2" },
    { "qwen35", "qwen35" },
    { "starcoder", "starcoder" },
    { "refact", "starcoder" },
    { "command-r", "starcoder" },
    { "smollm", "starcoder" },
    { "codeshell", "starcoder" },
    { "exaone", "starcoder" },
    { "minerva-7b", "starcoder" },
    { "mellum2", "starcoder" },
    { "falcon", "falcon" },
    { "deepseek-llm", "deepseek-llm" },
    { "deepseek-coder", "deepseek-coder" },
    { "deepseek-v3", "deepseek-v3" },
    { "tekken", "tekken" },
    { "gpt-4o", "gpt-4o" },
    { "llama4", "gpt-4o" },
    { "kanana2", "gpt-4o" },
    { "talkie", "gpt-4o" },
    { "bloom", "bloom" },
    { "poro-chat", "bloom" },
    { "gpt3-finnish", "bloom" },
};

static const struct mk_tok_pre *mk_tok_find_pre(const char *name) {
    for (size_t i = 0; i < sizeof mk_tok_pre_names / sizeof mk_tok_pre_names[0]; i++) {
        if (strcmp(mk_tok_pre_names[i].name, name) != 0) continue;
        for (size_t k = 0; k < sizeof mk_tok_pres / sizeof mk_tok_pres[0]; k++)
            if (strcmp(mk_tok_pres[k].name, mk_tok_pre_names[i].pre) == 0) return &mk_tok_pres[k];
    }
    return NULL;
}

#define MK_TOK_MAX_REGEX 8

struct mk_tokenizer {
    enum mk_tok_kind kind;
    uint32_t n_vocab;
    char *text_blob;     /* every token's bytes, back to back */
    uint64_t *text_off;  /* (n_vocab) offset into text_blob */
    uint32_t *text_len;  /* (n_vocab) */
    float *scores;       /* (n_vocab) */
    int32_t *types;      /* (n_vocab) tokenizer.ggml.token_type */
    uint32_t *tok_slots; /* (tok_mask + 1) open addressing: id + 1, 0 when empty */
    uint64_t tok_mask;

    uint64_t n_merges;
    char *merge_blob;      /* merge strings "left right", back to back */
    uint64_t *merge_off;   /* (n_merges) offset of the left part */
    uint32_t *merge_llen;  /* (n_merges) left length; the right part starts one byte after it */
    uint32_t *merge_rlen;  /* (n_merges) right length; 0 marks an unusable entry */
    uint64_t *merge_slots; /* (merge_mask + 1): rank + 1, 0 when empty */
    uint64_t merge_mask;

    int32_t byte_token[256]; /* llama: "<0xXX>"; gpt2: the byte's mapped character; -1 when absent */
    int32_t *specials;       /* (n_specials) control, unknown and user-defined ids, longest text first */
    size_t n_specials;
    int32_t bos, eos, unk, eot, eom;
    bool add_bos, add_eos, add_space_prefix;
    bool rstrip_specials; /* see mk_tokenizer_meta */
    int32_t *eog;         /* (n_eog) end-of-generation ids */
    size_t n_eog;
    const struct mk_tok_pre *pre;                     /* BPE: the pre-tokenizer */
    struct mk_unicode_regex *regex[MK_TOK_MAX_REGEX]; /* its compiled patterns */
    uint16_t byte_to_cpt[256];                        /* GPT-2 byte-to-unicode map */
    int16_t cpt_to_byte[512];                         /* its inverse; -1 for codepoints it never produces */
};

static uint64_t mk_tok_hash(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define MK_TOK_HASH_SEED 0xcbf29ce484222325ull

static const char *mk_tok_text(const struct mk_tokenizer *t, int32_t id) { return t->text_blob + t->text_off[id]; }

static int32_t mk_tok_find(const struct mk_tokenizer *t, const char *s, size_t n) {
    if (n == 0) return -1;
    uint64_t i = mk_tok_hash(MK_TOK_HASH_SEED, s, n) & t->tok_mask;
    for (;;) {
        uint32_t slot = t->tok_slots[i];
        if (slot == 0) return -1;
        int32_t id = (int32_t)(slot - 1);
        if (t->text_len[id] == n && memcmp(mk_tok_text(t, id), s, n) == 0) return id;
        i = (i + 1) & t->tok_mask;
    }
}

/* A later token with the same text replaces an earlier one, as in llama.cpp's token_to_id. */
static void mk_tok_insert(struct mk_tokenizer *t, int32_t id) {
    const char *s = mk_tok_text(t, id);
    size_t n = t->text_len[id];
    uint64_t i = mk_tok_hash(MK_TOK_HASH_SEED, s, n) & t->tok_mask;
    for (;;) {
        uint32_t slot = t->tok_slots[i];
        if (slot == 0 || (t->text_len[slot - 1] == n && memcmp(mk_tok_text(t, (int32_t)(slot - 1)), s, n) == 0)) {
            t->tok_slots[i] = (uint32_t)id + 1;
            return;
        }
        i = (i + 1) & t->tok_mask;
    }
}

static uint64_t mk_tok_merge_hash(const char *l, size_t ln, const char *r, size_t rn) {
    uint64_t h = mk_tok_hash(MK_TOK_HASH_SEED, l, ln);
    h = (h ^ 0x1ffu) * 0x100000001b3ull;
    return mk_tok_hash(h, r, rn);
}

static bool mk_tok_merge_eq(const struct mk_tokenizer *t, uint64_t rank, const char *l, size_t ln, const char *r,
                            size_t rn) {
    const char *m = t->merge_blob + t->merge_off[rank];
    return t->merge_llen[rank] == ln && t->merge_rlen[rank] == rn && memcmp(m, l, ln) == 0 &&
           memcmp(m + ln + 1, r, rn) == 0;
}

/* Rank of the merge (l, r), or -1. */
static int64_t mk_tok_find_merge(const struct mk_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    if (t->n_merges == 0) return -1;
    uint64_t i = mk_tok_merge_hash(l, ln, r, rn) & t->merge_mask;
    for (;;) {
        uint64_t slot = t->merge_slots[i];
        if (slot == 0) return -1;
        if (mk_tok_merge_eq(t, slot - 1, l, ln, r, rn)) return (int64_t)(slot - 1);
        i = (i + 1) & t->merge_mask;
    }
}

/* The first of duplicate merges keeps its rank, as in llama.cpp's bpe_ranks.emplace. */
static void mk_tok_insert_merge(struct mk_tokenizer *t, uint64_t rank) {
    const char *l = t->merge_blob + t->merge_off[rank];
    size_t ln = t->merge_llen[rank], rn = t->merge_rlen[rank];
    const char *r = l + ln + 1;
    uint64_t i = mk_tok_merge_hash(l, ln, r, rn) & t->merge_mask;
    for (;;) {
        uint64_t slot = t->merge_slots[i];
        if (slot == 0) {
            t->merge_slots[i] = rank + 1;
            return;
        }
        if (mk_tok_merge_eq(t, slot - 1, l, ln, r, rn)) return;
        i = (i + 1) & t->merge_mask;
    }
}

static uint64_t mk_tok_table_size(uint64_t n) {
    uint64_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

void mk_tokenizer_free(struct mk_tokenizer *t) {
    if (!t) return;
    free(t->text_blob);
    free(t->text_off);
    free(t->text_len);
    free(t->scores);
    free(t->types);
    free(t->tok_slots);
    free(t->merge_blob);
    free(t->merge_off);
    free(t->merge_llen);
    free(t->merge_rlen);
    free(t->merge_slots);
    free(t->specials);
    free(t->eog);
    for (size_t i = 0; i < MK_TOK_MAX_REGEX; i++) mk_unicode_regex_free(t->regex[i]);
    free(t);
}

static int mk_tok_special_cmp(const void *a, const void *b, void *ctx) {
    const struct mk_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the rest are moved
 * to U+0100 upwards in byte order. */
static void mk_tok_build_byte_map(struct mk_tokenizer *t) {
    uint32_t next = 256;
    for (int i = 0; i < 512; i++) t->cpt_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_to_cpt[b] = (uint16_t)(self ? (uint32_t)b : next++);
        t->cpt_to_byte[t->byte_to_cpt[b]] = (int16_t)b;
    }
}

static enum mk_status mk_tok_check_id(const char *field, int32_t *id, uint32_t n, struct mk_error *err) {
    if (*id < 0) {
        *id = -1;
        return MK_OK;
    }
    if ((uint32_t)*id >= n)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: %s = %d is out of range (n_tokens %u)", field, *id, n);
    return MK_OK;
}

void mk_tokenizer_meta_init(struct mk_tokenizer_meta *m) {
    memset(m, 0, sizeof *m);
    m->add_bos = m->add_eos = m->add_space_prefix = -1;
    m->eot = m->eom = -1;
}

static enum mk_status mk_tok_read_bool(const struct mk_gguf *g, const char *key, int8_t *out, struct mk_error *err) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, key);
    if (!kv) return MK_OK;
    if (kv->type != MK_GGUF_BOOL)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: key %s has type %s, expected bool", mk_gguf_path(g), key,
                            mk_gguf_type_name(kv->type));
    *out = kv->v.u64 != 0;
    return MK_OK;
}

static enum mk_status mk_tok_read_id(const struct mk_gguf *g, const char *key, int32_t *out, struct mk_error *err) {
    uint32_t v = UINT32_MAX;
    enum mk_status st = mk_gguf_get_u32_opt(g, key, &v, err);
    if (st == MK_OK && v != UINT32_MAX) *out = v > (uint32_t)INT32_MAX ? INT32_MAX : (int32_t)v;
    return st;
}

enum mk_status mk_tokenizer_read_meta(const struct mk_gguf *g, struct mk_tokenizer_meta *m, struct mk_error *err) {
    enum mk_status st;
    struct mk_gguf_str pre = { 0, NULL };
    mk_tokenizer_meta_init(m);
    if ((st = mk_gguf_get_str_opt(g, "tokenizer.ggml.pre", &pre, err)) != MK_OK) return st;
    size_t n = pre.len < sizeof m->pre - 1 ? (size_t)pre.len : sizeof m->pre - 1;
    if (n) memcpy(m->pre, pre.data, n);
    m->pre[n] = '\0';
    if ((st = mk_tok_read_bool(g, "tokenizer.ggml.add_bos_token", &m->add_bos, err)) != MK_OK ||
        (st = mk_tok_read_bool(g, "tokenizer.ggml.add_eos_token", &m->add_eos, err)) != MK_OK ||
        (st = mk_tok_read_bool(g, "tokenizer.ggml.add_space_prefix", &m->add_space_prefix, err)) != MK_OK ||
        (st = mk_tok_read_id(g, "tokenizer.ggml.eot_token_id", &m->eot, err)) != MK_OK ||
        (st = mk_tok_read_id(g, "tokenizer.ggml.eom_token_id", &m->eom, err)) != MK_OK)
        return st;
    struct mk_gguf_str name = { 0, NULL };
    if ((st = mk_gguf_get_str_opt(g, "general.name", &name, err)) != MK_OK) return st;
    char buf[256] = "";
    if (name.len) snprintf(buf, sizeof buf, "%.*s", (int)(name.len < sizeof buf ? name.len : sizeof buf), name.data);
    m->rstrip_specials = strcasestr(buf, "phi-3") || strcasestr(buf, "phi3");
    return MK_OK;
}

static enum mk_status mk_tok_check_vocab(const struct mk_vocab_data *v, enum mk_tok_kind *kind, struct mk_error *err) {
    if (strncmp(v->model, "llama", sizeof v->model) == 0)
        *kind = MK_TOK_SPM;
    else if (strncmp(v->model, "gpt2", sizeof v->model) == 0)
        *kind = MK_TOK_BPE;
    else
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "tokenizer: tokenizer.ggml.model = \"%.*s\" is not supported (want llama or gpt2)",
                            (int)strnlen(v->model, sizeof v->model), v->model);
    if (v->n_tokens == 0 || !v->tokens)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens is empty");
    if (v->n_tokens > (uint32_t)INT32_MAX)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens has %u entries (too many)",
                            v->n_tokens);
    if (v->n_merges > 0 && !v->merges)
        return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges has %llu entries but no data",
                            (unsigned long long)v->n_merges);
    return MK_OK;
}

static enum mk_status mk_tok_nomem(const struct mk_tokenizer *t, struct mk_error *err) {
    return mk_error_set(err, MK_ERR_NOMEM, "tokenizer: out of memory for %u tokens", t->n_vocab);
}

/* Token texts, scores and types copied in, and the text-to-id table. */
static enum mk_status mk_tok_copy_tokens(struct mk_tokenizer *t, const struct mk_vocab_data *v, struct mk_error *err) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const struct mk_gguf_str *s = &v->tokens[i];
        if (s->len > UINT32_MAX || (s->len > 0 && !s->data))
            return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens[%u] has bad length %llu", i,
                                (unsigned long long)s->len);
        total += s->len;
    }
    if (total > SIZE_MAX - 1) return mk_tok_nomem(t, err);
    t->text_blob = malloc((size_t)total + 1);
    t->text_off = malloc(t->n_vocab * sizeof *t->text_off);
    t->text_len = malloc(t->n_vocab * sizeof *t->text_len);
    t->scores = malloc(t->n_vocab * sizeof *t->scores);
    t->types = malloc(t->n_vocab * sizeof *t->types);
    t->tok_mask = mk_tok_table_size(t->n_vocab) - 1;
    t->tok_slots = calloc(t->tok_mask + 1, sizeof *t->tok_slots);
    if (!t->text_blob || !t->text_off || !t->text_len || !t->scores || !t->types || !t->tok_slots)
        return mk_tok_nomem(t, err);
    uint64_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const struct mk_gguf_str *s = &v->tokens[i];
        if (s->len) memcpy(t->text_blob + off, s->data, s->len);
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)s->len;
        off += s->len;
        t->scores[i] = v->scores ? v->scores[i] : 0.0f;
        t->types[i] = v->types ? v->types[i] : MK_TOK_NORMAL;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->text_len[i] > 0) mk_tok_insert(t, (int32_t)i);
    return MK_OK;
}

/* Ids whose text is cut out of the input before pre-tokenization, longest first. */
static enum mk_status mk_tok_collect_specials(struct mk_tokenizer *t, struct mk_error *err) {
    t->specials = malloc(t->n_vocab * sizeof *t->specials);
    if (!t->specials) return mk_tok_nomem(t, err);
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        int32_t ty = t->types[i];
        if (t->text_len[i] > 0 && (ty == MK_TOK_CONTROL || ty == MK_TOK_UNKNOWN || ty == MK_TOK_USER_DEFINED))
            t->specials[t->n_specials++] = (int32_t)i;
    }
    qsort_r(t->specials, t->n_specials, sizeof *t->specials, mk_tok_special_cmp, t);
    return MK_OK;
}

static void mk_tok_map_bytes(struct mk_tokenizer *t) {
    mk_tok_build_byte_map(t);
    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t n;
        if (t->kind == MK_TOK_SPM)
            n = (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
        else
            n = mk_unicode_utf8_encode(t->byte_to_cpt[b], buf);
        t->byte_token[b] = mk_tok_find(t, buf, n);
    }
}

static enum mk_status mk_tok_copy_merges(struct mk_tokenizer *t, const struct mk_vocab_data *v, struct mk_error *err) {
    if (t->kind != MK_TOK_BPE || v->n_merges == 0) return MK_OK;
    uint64_t mtotal = 0;
    for (uint64_t i = 0; i < v->n_merges; i++) {
        const struct mk_gguf_str *s = &v->merges[i];
        if (s->len > UINT32_MAX || (s->len > 0 && !s->data))
            return mk_error_set(err, MK_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges[%llu] has bad length %llu",
                                (unsigned long long)i, (unsigned long long)s->len);
        mtotal += s->len;
    }
    if (mtotal > SIZE_MAX - 1 || v->n_merges > SIZE_MAX / 16) return mk_tok_nomem(t, err);
    t->n_merges = v->n_merges;
    t->merge_blob = malloc((size_t)mtotal + 1);
    t->merge_off = malloc(t->n_merges * sizeof *t->merge_off);
    t->merge_llen = malloc(t->n_merges * sizeof *t->merge_llen);
    t->merge_rlen = malloc(t->n_merges * sizeof *t->merge_rlen);
    t->merge_mask = mk_tok_table_size(t->n_merges) - 1;
    t->merge_slots = calloc(t->merge_mask + 1, sizeof *t->merge_slots);
    if (!t->merge_blob || !t->merge_off || !t->merge_llen || !t->merge_rlen || !t->merge_slots)
        return mk_tok_nomem(t, err);
    uint64_t moff = 0;
    for (uint64_t i = 0; i < t->n_merges; i++) {
        const struct mk_gguf_str *s = &v->merges[i];
        if (s->len) memcpy(t->merge_blob + moff, s->data, s->len);
        /* llama.cpp splits at the first space after the first byte. */
        const char *sp = s->len > 1 ? memchr(s->data + 1, ' ', s->len - 1) : NULL;
        t->merge_off[i] = moff;
        t->merge_llen[i] = sp ? (uint32_t)(sp - s->data) : 0;
        t->merge_rlen[i] = sp ? (uint32_t)(s->len - (uint64_t)(sp - s->data) - 1) : 0;
        moff += s->len;
    }
    for (uint64_t i = 0; i < t->n_merges; i++)
        if (t->merge_rlen[i] > 0) mk_tok_insert_merge(t, i);
    return MK_OK;
}

/* The pre-tokenizer named by tokenizer.ggml.pre (BPE only), its patterns compiled, and the
 * add_* flags: the vocab's own keys over the defaults of its type and pre-tokenizer. */
static enum mk_status mk_tok_choose_pre(struct mk_tokenizer *t, const struct mk_tokenizer_meta *m,
                                        struct mk_error *err) {
    enum mk_status st;
    t->pre = mk_tok_find_pre("default");
    if (t->kind == MK_TOK_BPE && m->pre[0]) {
        const struct mk_tok_pre *p = mk_tok_find_pre(m->pre);
        if (p)
            t->pre = p;
        else /* older llama.cpp fell back the same way; newer ones refuse the file */
            fprintf(stderr, "mk: warning: unknown pre-tokenizer tokenizer.ggml.pre = \"%s\"; using \"default\"\n",
                    m->pre);
    }
    MK_ASSERT(t->pre && t->pre->n_regex <= MK_TOK_MAX_REGEX);
    for (size_t i = 0; t->kind == MK_TOK_BPE && i < t->pre->n_regex; i++)
        if ((st = mk_unicode_regex_compile(t->pre->regex[i], &t->regex[i], err)) != MK_OK) return st;
    bool spm = t->kind == MK_TOK_SPM;
    t->add_bos = m->add_bos >= 0 ? m->add_bos == 1 : spm || t->pre->add_bos;
    t->add_eos = m->add_eos == 1;
    t->add_space_prefix = m->add_space_prefix >= 0 ? m->add_space_prefix == 1 : spm;
    return MK_OK;
}

static bool mk_tok_text_is(const struct mk_tokenizer *t, int32_t id, const char *s) {
    size_t n = strlen(s);
    return t->text_len[id] == n && memcmp(mk_tok_text(t, id), s, n) == 0;
}

/* The end-of-generation ids, gathered as llama.cpp does: EOS, EOT and EOM by key, and every token
 * whose text is one of the known end-of-turn markers (such tokens become control tokens). */
static enum mk_status mk_tok_collect_eog(struct mk_tokenizer *t, struct mk_error *err) {
    static const char *const texts[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<\xef\xbd\x9c"
        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "[e~[",
        /* the fill-in-the-middle pad, repo and file-separator tokens end generation as well */
        "<|fim_pad|>",
        "<fim-pad>",
        "<fim_pad>",
        "<PAD>",
        "[PAD]",
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
        "<|file_sep|>",
    };
    t->eog = malloc((t->n_vocab + 3) * sizeof *t->eog);
    if (!t->eog) return mk_tok_nomem(t, err);
    const int32_t by_key[3] = { t->eos, t->eot, t->eom };
    for (int k = 0; k < 3; k++)
        if (by_key[k] >= 0) t->eog[t->n_eog++] = by_key[k];
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
            if (!mk_tok_text_is(t, (int32_t)id, texts[k])) continue;
            if (!mk_tokenizer_is_eog(t, (int32_t)id)) t->eog[t->n_eog++] = (int32_t)id;
            if (t->types[id] != MK_TOK_CONTROL) t->types[id] = MK_TOK_CONTROL;
            break;
        }
    }
    return MK_OK;
}

/* llama.cpp finds a missing EOT or EOM id by the token's text. */
static void mk_tok_find_turn_ids(struct mk_tokenizer *t) {
    static const char *const eot_texts[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "<\xef\xbd\x9c"
        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<end_of_utterance>",
    };
    for (size_t k = 0; t->eot < 0 && k < sizeof eot_texts / sizeof eot_texts[0]; k++)
        t->eot = mk_tok_find(t, eot_texts[k], strlen(eot_texts[k]));
    if (t->eom < 0) t->eom = mk_tok_find(t, "<|eom_id|>", 10);
}

enum mk_status mk_tokenizer_create_meta(const struct mk_vocab_data *v, const struct mk_tokenizer_meta *m,
                                        struct mk_tokenizer **out, struct mk_error *err) {
    enum mk_status st;
    enum mk_tok_kind kind = MK_TOK_SPM;
    if (!v || !m || !out) return mk_error_set(err, MK_ERR_INVALID_ARG, "tokenizer: vocab, meta or out is NULL");
    *out = NULL;
    if ((st = mk_tok_check_vocab(v, &kind, err)) != MK_OK) return st;
    struct mk_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return mk_error_set(err, MK_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    t->n_vocab = v->n_tokens;
    t->bos = v->bos;
    t->eos = v->eos;
    t->unk = v->unk;
    t->eot = m->eot;
    t->eom = m->eom;
    t->rstrip_specials = m->rstrip_specials;
    if ((st = mk_tok_check_id("tokenizer.ggml.bos_token_id", &t->bos, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_check_id("tokenizer.ggml.eos_token_id", &t->eos, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_check_id("tokenizer.ggml.unknown_token_id", &t->unk, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_check_id("tokenizer.ggml.eot_token_id", &t->eot, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_check_id("tokenizer.ggml.eom_token_id", &t->eom, t->n_vocab, err)) != MK_OK ||
        (st = mk_tok_copy_tokens(t, v, err)) != MK_OK || (st = mk_tok_copy_merges(t, v, err)) != MK_OK ||
        (st = mk_tok_choose_pre(t, m, err)) != MK_OK)
        goto fail;
    mk_tok_find_turn_ids(t);
    if ((st = mk_tok_collect_eog(t, err)) != MK_OK || (st = mk_tok_collect_specials(t, err)) != MK_OK) goto fail;
    mk_tok_map_bytes(t);
    *out = t;
    return MK_OK;
fail:
    mk_tokenizer_free(t);
    return st;
}

enum mk_status mk_tokenizer_create(const struct mk_vocab_data *v, struct mk_tokenizer **out, struct mk_error *err) {
    struct mk_tokenizer_meta m;
    mk_tokenizer_meta_init(&m);
    if (v) m.add_bos = v->add_bos;
    return mk_tokenizer_create_meta(v, &m, out, err);
}

enum mk_status mk_tokenizer_create_gguf(const struct mk_vocab_data *v, const struct mk_gguf *g,
                                        struct mk_tokenizer **out, struct mk_error *err) {
    struct mk_tokenizer_meta m;
    enum mk_status st;
    if (out) *out = NULL;
    if (!g) return mk_error_set(err, MK_ERR_INVALID_ARG, "tokenizer: gguf is NULL");
    if ((st = mk_tokenizer_read_meta(g, &m, err)) != MK_OK) return st;
    return mk_tokenizer_create_meta(v, &m, out, err);
}

bool mk_tokenizer_is_eog(const struct mk_tokenizer *t, int32_t id) {
    if (!t || id < 0) return false;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

size_t mk_tokenizer_eog_ids(const struct mk_tokenizer *t, int32_t *out, size_t cap) {
    if (!t) return 0;
    for (size_t i = 0; i < t->n_eog && i < cap; i++) out[i] = t->eog[i];
    return t->n_eog;
}

bool mk_tokenizer_add_bos(const struct mk_tokenizer *t) { return t->add_bos; }
bool mk_tokenizer_add_eos(const struct mk_tokenizer *t) { return t->add_eos; }
int32_t mk_tokenizer_eot(const struct mk_tokenizer *t) { return t->eot; }
const char *mk_tokenizer_pre(const struct mk_tokenizer *t) { return t->kind == MK_TOK_BPE ? t->pre->name : ""; }

const char *mk_tokenizer_token_text(const struct mk_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    *len = t->text_len[id];
    return mk_tok_text(t, id);
}

uint32_t mk_tokenizer_n_vocab(const struct mk_tokenizer *t) { return t->n_vocab; }
int32_t mk_tokenizer_bos(const struct mk_tokenizer *t) { return t->bos; }
int32_t mk_tokenizer_eos(const struct mk_tokenizer *t) { return t->eos; }
const char *mk_tokenizer_kind(const struct mk_tokenizer *t) { return t->kind == MK_TOK_SPM ? "llama" : "gpt2"; }

/* ---- Encoding ---- */

struct mk_tok_out {
    int32_t *ids; /* (cap) */
    size_t cap;
    size_t n; /* ids the text needs so far; may pass cap */
};

static void mk_tok_emit(struct mk_tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* A run of bytes in the working string; merged-away symbols have n == 0. */
struct mk_tok_sym {
    size_t off, n;
    ptrdiff_t prev, next; /* neighbours still alive, -1 at the ends */
};

/* A candidate merge of two adjacent symbols. key orders the queue: the SPM score, or minus the
 * BPE rank, so that in both cases the largest key wins and ties go to the leftmost pair. */
struct mk_tok_bigram {
    double key;
    ptrdiff_t left, right;
    size_t size;
};

struct mk_tok_work {
    struct mk_tok_sym *syms; /* (sym_cap) */
    size_t sym_cap;
    struct mk_tok_bigram *heap; /* (heap_cap) binary max-heap */
    size_t heap_n, heap_cap;
};

static bool mk_tok_before(const struct mk_tok_bigram *a, const struct mk_tok_bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static enum mk_status mk_tok_heap_push(struct mk_tok_work *w, struct mk_tok_bigram b) {
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
        struct mk_tok_bigram *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return MK_ERR_NOMEM;
        w->heap = h;
        w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!mk_tok_before(&b, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = b;
    return MK_OK;
}

static struct mk_tok_bigram mk_tok_heap_pop(struct mk_tok_work *w) {
    struct mk_tok_bigram top = w->heap[0];
    struct mk_tok_bigram last = w->heap[--w->heap_n];
    size_t n = w->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && mk_tok_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!mk_tok_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static enum mk_status mk_tok_reserve_syms(struct mk_tok_work *w, size_t n) {
    if (n <= w->sym_cap) return MK_OK;
    if (n > SIZE_MAX / sizeof *w->syms) return MK_ERR_NOMEM;
    struct mk_tok_sym *s = realloc(w->syms, n * sizeof *s);
    if (!s) return MK_ERR_NOMEM;
    w->syms = s;
    w->sym_cap = n;
    return MK_OK;
}

/* Candidate merge of symbols left and right of str, when their concatenation is a token (SPM)
 * or a listed merge (BPE). */
static enum mk_status mk_tok_try_bigram(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str,
                                        ptrdiff_t left, ptrdiff_t right) {
    if (left < 0 || right < 0) return MK_OK;
    const struct mk_tok_sym *l = &w->syms[left], *r = &w->syms[right];
    struct mk_tok_bigram b = { .left = left, .right = right, .size = l->n + r->n };
    if (t->kind == MK_TOK_SPM) {
        int32_t id = mk_tok_find(t, str + l->off, b.size);
        if (id < 0) return MK_OK;
        b.key = t->scores[id];
    } else {
        int64_t rank = mk_tok_find_merge(t, str + l->off, l->n, str + r->off, r->n);
        if (rank < 0) return MK_OK;
        b.key = -(double)rank;
    }
    return mk_tok_heap_push(w, b);
}

/* Merges the nsym symbols already in w->syms (chained in order) over str until no candidate is
 * left. A queued pair is stale once either side has changed, which shows in its size. */
static enum mk_status mk_tok_merge_all(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str,
                                       size_t nsym) {
    enum mk_status st;
    w->heap_n = 0;
    for (size_t i = 1; i < nsym; i++)
        if ((st = mk_tok_try_bigram(t, w, str, (ptrdiff_t)i - 1, (ptrdiff_t)i)) != MK_OK) return st;
    while (w->heap_n > 0) {
        struct mk_tok_bigram b = mk_tok_heap_pop(w);
        struct mk_tok_sym *l = &w->syms[b.left], *r = &w->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = b.left;
        if ((st = mk_tok_try_bigram(t, w, str, l->prev, b.left)) != MK_OK ||
            (st = mk_tok_try_bigram(t, w, str, b.left, l->next)) != MK_OK)
            return st;
    }
    return MK_OK;
}

static void mk_tok_link(struct mk_tok_work *w, size_t nsym) {
    for (size_t i = 0; i < nsym; i++) {
        w->syms[i].prev = (ptrdiff_t)i - 1;
        w->syms[i].next = i + 1 < nsym ? (ptrdiff_t)i + 1 : -1;
    }
}

/* SPM over one escaped fragment: UTF-8 characters (an invalid byte on its own), merged by score,
 * then pieces that are not tokens fall back to byte tokens. */
static enum mk_status mk_tok_spm(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str, size_t n,
                                 struct mk_tok_out *o) {
    enum mk_status st;
    if (n == 0) return MK_OK;
    if ((st = mk_tok_reserve_syms(w, n)) != MK_OK) return st;
    size_t nsym = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cpt;
        size_t len = mk_unicode_utf8_decode((const unsigned char *)str + off, n - off, &cpt);
        if (len == 0) len = 1;
        w->syms[nsym].off = off;
        w->syms[nsym].n = len;
        nsym++;
        off += len;
    }
    mk_tok_link(w, nsym);
    if ((st = mk_tok_merge_all(t, w, str, nsym)) != MK_OK) return st;
    for (ptrdiff_t i = 0; i >= 0; i = w->syms[i].next) {
        const struct mk_tok_sym *s = &w->syms[i];
        int32_t id = mk_tok_find(t, str + s->off, s->n);
        if (id >= 0) {
            mk_tok_emit(o, id);
            continue;
        }
        for (size_t j = 0; j < s->n; j++) {
            int32_t b = t->byte_token[(unsigned char)str[s->off + j]];
            if (b >= 0)
                mk_tok_emit(o, b);
            else if (t->unk >= 0)
                mk_tok_emit(o, t->unk);
        }
    }
    return MK_OK;
}

/* One pre-tokenized word of BPE: each byte becomes its mapped character, then merges by rank. */
static enum mk_status mk_tok_bpe_word(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *word, size_t n,
                                      char *enc, struct mk_tok_out *o) {
    enum mk_status st;
    size_t elen = 0;
    for (size_t i = 0; i < n; i++) {
        w->syms[i].off = elen;
        w->syms[i].n = mk_unicode_utf8_encode(t->byte_to_cpt[(unsigned char)word[i]], enc + elen);
        elen += w->syms[i].n;
    }
    if (t->pre->ignore_merges) { /* a word that is a token stays whole, merges or not */
        int32_t id = mk_tok_find(t, enc, elen);
        if (id >= 0) {
            mk_tok_emit(o, id);
            return MK_OK;
        }
    }
    mk_tok_link(w, n);
    if ((st = mk_tok_merge_all(t, w, enc, n)) != MK_OK) return st;
    for (ptrdiff_t i = 0; i >= 0; i = w->syms[i].next) {
        const struct mk_tok_sym *s = &w->syms[i];
        int32_t id = mk_tok_find(t, enc + s->off, s->n);
        if (id >= 0) {
            mk_tok_emit(o, id);
            continue;
        }
        /* As llama.cpp: try each byte of the mapped text alone. */
        for (size_t j = 0; j < s->n; j++) {
            int32_t b = mk_tok_find(t, enc + s->off + j, 1);
            if (b >= 0) mk_tok_emit(o, b);
        }
    }
    return MK_OK;
}

/* Splits n bytes of text into words with the patterns rx, one after the other (each splits the
 * words of the one before), as llama.cpp's unicode_regex_split. Leaves each word's byte length in
 * words. */
static enum mk_status mk_tok_split_words(struct mk_unicode_regex *const *rx, size_t n_rx, const char *str, size_t n,
                                         struct mk_unicode_spans *words) {
    enum mk_status st = MK_OK;
    words->n = 0;
    if (n == 0) return MK_OK;
    if (n > SIZE_MAX / 32) return MK_ERR_NOMEM;
    uint32_t *cpt = malloc(n * sizeof *cpt);         /* (ncp) */
    uint8_t *fl = malloc(n);                         /* (ncp) class bits */
    size_t *start = malloc((n + 1) * sizeof *start); /* (ncp + 1) byte offset of each codepoint */
    struct mk_unicode_spans b = { 0 };
    if (!cpt || !fl || !start) {
        st = MK_ERR_NOMEM;
        goto done;
    }
    size_t ncp = 0;
    for (size_t off = 0; off < n;) {
        uint32_t c;
        size_t len = mk_unicode_utf8_decode((const unsigned char *)str + off, n - off, &c);
        if (len == 0) {
            len = 1;
            c = MK_TOK_REPLACEMENT;
        }
        cpt[ncp] = c;
        fl[ncp] = mk_unicode_flags(c);
        start[ncp] = off;
        ncp++;
        off += len;
    }
    start[ncp] = n;
    if ((st = mk_unicode_spans_add(words, ncp)) != MK_OK) goto done;
    for (size_t r = 0; r < n_rx; r++) {
        b.n = 0;
        if ((st = mk_unicode_regex_split(rx[r], cpt, fl, words, &b)) != MK_OK) goto done;
        struct mk_unicode_spans tmp = *words;
        *words = b;
        b = tmp;
    }
    for (size_t i = 0, from = 0; i < words->n; i++) { /* codepoints to bytes */
        size_t to = from + words->len[i];
        words->len[i] = start[to] - start[from];
        from = to;
    }
done:
    free(cpt);
    free(fl);
    free(start);
    free(b.len);
    return st;
}

/* Byte-level BPE over one raw fragment: pre-tokenized into words, then BPE on each word. */
static enum mk_status mk_tok_bpe(const struct mk_tokenizer *t, struct mk_tok_work *w, const char *str, size_t n,
                                 struct mk_tok_out *o) {
    enum mk_status st;
    struct mk_unicode_spans words = { 0 };
    char *enc = malloc(2 * n + 1); /* mapped characters of one word, 2 bytes at most each */
    if (!enc || mk_tok_reserve_syms(w, n) != MK_OK) {
        st = MK_ERR_NOMEM;
        goto done;
    }
    if ((st = mk_tok_split_words(t->regex, t->pre->n_regex, str, n, &words)) != MK_OK) goto done;
    for (size_t i = 0, off = 0; i < words.n; off += words.len[i++])
        if ((st = mk_tok_bpe_word(t, w, str + off, words.len[i], enc, o)) != MK_OK) goto done;
done:
    free(enc);
    free(words.len);
    return st;
}

int64_t mk_tokenizer_split(const char *pre, const char *text, size_t len, size_t *lens, size_t cap) {
    const struct mk_tok_pre *p = pre ? mk_tok_find_pre(pre) : NULL;
    if (!p || (!text && len > 0) || (!lens && cap > 0)) return MK_ERR_INVALID_ARG;
    struct mk_unicode_regex *rx[MK_TOK_MAX_REGEX] = { 0 };
    struct mk_unicode_spans words = { 0 };
    enum mk_status st = MK_OK;
    for (size_t i = 0; i < p->n_regex && st == MK_OK; i++) st = mk_unicode_regex_compile(p->regex[i], &rx[i], NULL);
    if (st == MK_OK) st = mk_tok_split_words(rx, p->n_regex, text, len, &words);
    for (size_t i = 0; i < words.n && i < cap; i++) lens[i] = words.len[i];
    for (size_t i = 0; i < p->n_regex; i++) mk_unicode_regex_free(rx[i]);
    free(words.len);
    return st != MK_OK ? st : (int64_t)words.n;
}

/* A piece of the input: raw text [off, off + len), or a special token (id >= 0). */
struct mk_tok_frag {
    size_t off, len;
    int32_t id;
};

struct mk_tok_frags {
    struct mk_tok_frag *a;
    size_t n, cap;
};

static enum mk_status mk_tok_frag_add(struct mk_tok_frags *f, size_t off, size_t len, int32_t id) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct mk_tok_frag *a = realloc(f->a, cap * sizeof *a);
        if (!a) return MK_ERR_NOMEM;
        f->a = a;
        f->cap = cap;
    }
    f->a[f->n++] = (struct mk_tok_frag){ off, len, id };
    return MK_OK;
}

/* Whether the text after special token id loses its leading whitespace (llama.cpp's RSTRIP). */
static bool mk_tok_rstrip(const struct mk_tokenizer *t, int32_t id) {
    if (!t->rstrip_specials) return false;
    static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (t->text_len[id] == strlen(keep[i]) && !memcmp(mk_tok_text(t, id), keep[i], t->text_len[id])) return false;
    return true;
}

/* Cuts every occurrence of the special tokens (longest first, each left to right) out of the raw
 * fragments, as llama.cpp's tokenizer_st_partition does. User-defined tokens are always cut;
 * control and unknown ones only when parse_special. */
static enum mk_status mk_tok_partition(const struct mk_tokenizer *t, const char *text, size_t len, bool parse_special,
                                       struct mk_tok_frags *f) {
    enum mk_status st;
    struct mk_tok_frags next = { 0 };
    if (len == 0) return MK_OK;
    if ((st = mk_tok_frag_add(f, 0, len, -1)) != MK_OK) return st;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && t->types[id] != MK_TOK_USER_DEFINED) continue;
        const char *sp = mk_tok_text(t, id);
        size_t sn = t->text_len[id];
        const bool rstrip = mk_tok_rstrip(t, id);
        bool found = false;
        for (size_t i = 0; i < f->n && !found; i++)
            found = f->a[i].id < 0 && memmem(text + f->a[i].off, f->a[i].len, sp, sn) != NULL;
        if (!found) continue;
        next.n = 0;
        for (size_t i = 0; i < f->n; i++) {
            struct mk_tok_frag fr = f->a[i];
            if (fr.id >= 0) {
                if ((st = mk_tok_frag_add(&next, fr.off, fr.len, fr.id)) != MK_OK) goto fail;
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            while (pos < end) {
                const char *m = memmem(text + pos, end - pos, sp, sn);
                if (!m) break;
                size_t at = (size_t)(m - text);
                if (at > pos && (st = mk_tok_frag_add(&next, pos, at - pos, -1)) != MK_OK) goto fail;
                if ((st = mk_tok_frag_add(&next, at, sn, id)) != MK_OK) goto fail;
                pos = at + sn;
                if (rstrip)
                    while (pos < end && isspace((unsigned char)text[pos])) pos++;
            }
            if (pos < end && (st = mk_tok_frag_add(&next, pos, end - pos, -1)) != MK_OK) goto fail;
        }
        struct mk_tok_frags tmp = *f;
        *f = next;
        next = tmp;
    }
    free(next.a);
    return MK_OK;
fail:
    free(next.a);
    return st;
}

int64_t mk_tokenizer_encode(const struct mk_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t *ids, size_t cap) {
    if (!t || (!text && len > 0) || (!ids && cap > 0)) return MK_ERR_INVALID_ARG;
    if (len > SIZE_MAX / 64) return MK_ERR_NOMEM;
    enum mk_status st = MK_OK;
    struct mk_tok_out o = { ids, cap, 0 };
    struct mk_tok_frags f = { 0 };
    struct mk_tok_work w = { 0 };
    char *esc = NULL;
    if (add_special && t->add_bos && t->bos >= 0) mk_tok_emit(&o, t->bos);
    if ((st = mk_tok_partition(t, text, len, parse_special, &f)) != MK_OK) goto done;
    if (t->kind == MK_TOK_SPM) {
        /* Escaped text: a space grows to U+2581 (3 bytes), plus the dummy-prefix space. */
        esc = malloc(3 * len + 3);
        if (!esc) {
            st = MK_ERR_NOMEM;
            goto done;
        }
    }
    bool prev_special = true; /* SPM: the text after the start or a special token gets the dummy prefix */
    for (size_t i = 0; i < f.n; i++) {
        const struct mk_tok_frag *fr = &f.a[i];
        if (fr->id >= 0) {
            mk_tok_emit(&o, fr->id);
            prev_special = true;
            continue;
        }
        if (t->kind == MK_TOK_BPE) {
            if ((st = mk_tok_bpe(t, &w, text + fr->off, fr->len, &o)) != MK_OK) goto done;
            continue;
        }
        size_t n = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(esc, "\xe2\x96\x81", 3);
            n = 3;
        }
        for (size_t j = 0; j < fr->len; j++) {
            char c = text[fr->off + j];
            if (c == ' ') {
                memcpy(esc + n, "\xe2\x96\x81", 3);
                n += 3;
            } else {
                esc[n++] = c;
            }
        }
        prev_special = false;
        if ((st = mk_tok_spm(t, &w, esc, n, &o)) != MK_OK) goto done;
    }
    if (add_special && t->add_eos && t->eos >= 0) mk_tok_emit(&o, t->eos);
done:
    free(esc);
    free(f.a);
    free(w.syms);
    free(w.heap);
    if (st != MK_OK) return st;
    return o.n > (size_t)INT64_MAX ? MK_ERR_INTERNAL : (int64_t)o.n;
}

/* ---- Decoding ---- */

/* Output bytes, counted past cap; strip drops one leading space of the piece. */
struct mk_tok_sink {
    char *out;
    size_t cap;
    size_t n;
    bool strip;
};

static void mk_tok_put(struct mk_tok_sink *k, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (k->strip) {
            k->strip = false;
            if (b[i] == ' ') continue;
        }
        if (k->n < k->cap) k->out[k->n] = b[i];
        k->n++;
    }
}

static int mk_tok_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static void mk_tok_piece(const struct mk_tokenizer *t, int32_t prev_id, int32_t id, struct mk_tok_sink *k) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return;
    const char *s = mk_tok_text(t, id);
    size_t n = t->text_len[id];
    int32_t ty = t->types[id];
    if (ty == MK_TOK_CONTROL || ty == MK_TOK_UNKNOWN || ty == MK_TOK_UNUSED) return;
    /* The encoder put a dummy-prefix space before the text after the start (or BOS). */
    k->strip = t->kind == MK_TOK_SPM && t->add_space_prefix && (prev_id < 0 || prev_id == t->bos);
    if (ty == MK_TOK_USER_DEFINED) {
        mk_tok_put(k, s, n);
    } else if (t->kind == MK_TOK_SPM) {
        if (ty == MK_TOK_BYTE && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && mk_tok_hex(s[3]) >= 0 &&
            mk_tok_hex(s[4]) >= 0) {
            char b = (char)(mk_tok_hex(s[3]) * 16 + mk_tok_hex(s[4]));
            mk_tok_put(k, &b, 1);
        } else {
            for (size_t i = 0; i < n;) {
                if (n - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    mk_tok_put(k, " ", 1);
                    i += 3;
                } else {
                    mk_tok_put(k, s + i, 1);
                    i++;
                }
            }
        }
    } else {
        for (size_t i = 0; i < n;) {
            uint32_t c;
            size_t len = mk_unicode_utf8_decode((const unsigned char *)s + i, n - i, &c);
            if (len == 0) {
                mk_tok_put(k, s + i, 1);
                i++;
                continue;
            }
            if (c < 512 && t->cpt_to_byte[c] >= 0) {
                char b = (char)t->cpt_to_byte[c];
                mk_tok_put(k, &b, 1);
            } else {
                mk_tok_put(k, s + i, len);
            }
            i += len;
        }
    }
    k->strip = false;
}

size_t mk_tokenizer_piece(const struct mk_tokenizer *t, int32_t prev_id, int32_t id, char *out, size_t cap) {
    struct mk_tok_sink k = { out, out ? cap : 0, 0, false };
    if (!t) return 0;
    mk_tok_piece(t, prev_id, id, &k);
    return k.n;
}

size_t mk_tokenizer_decode(const struct mk_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap) {
    struct mk_tok_sink k = { out, out ? cap : 0, 0, false };
    if (!t || !ids) return 0;
    for (size_t i = 0; i < n; i++) mk_tok_piece(t, i > 0 ? ids[i - 1] : -1, ids[i], &k);
    return k.n;
}
