/* Tokenizer tests: llama.cpp's test vectors for the llama-spm and gpt-2 vocabs, stories260K, byte fallback, special tokens. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "core/tokenizer.h"
#include "tests/test_util.h"

struct loaded {
    struct mk_model *model;
    struct mk_tokenizer *tok;
};

static int load(const char *dir, const char *file, struct loaded *l) {
    char path[4096];
    struct mk_error err = { 0 };
    snprintf(path, sizeof path, "%s/%s", dir, file);
    memset(l, 0, sizeof *l);
    if (mk_model_load(path, &l->model, &err) != MK_OK) {
        mk_test_fail("FAIL loading %s: %s", path, err.msg);
        return -1;
    }
    if (mk_tokenizer_create_gguf(&l->model->vocab, l->model->gguf, &l->tok, &err) != MK_OK) {
        mk_test_fail("FAIL tokenizer for %s: %s", path, err.msg);
        mk_model_free(l->model);
        return -1;
    }
    return 0;
}

static void unload(struct loaded *l) {
    mk_tokenizer_free(l->tok);
    mk_model_free(l->model);
}

/* Encodes into a fresh array; *n gets the count. Checks the needed-count contract on the way. */
static int32_t *encode(const struct mk_tokenizer *t, const char *s, size_t len, bool bos, bool special, size_t *n) {
    int64_t need = mk_tokenizer_encode(t, s, len, bos, special, NULL, 0);
    MK_CHECK(need >= 0);
    if (need < 0) {
        *n = 0;
        return calloc(1, sizeof(int32_t));
    }
    int32_t *ids = calloc((size_t)need + 1, sizeof *ids);
    int64_t got = mk_tokenizer_encode(t, s, len, bos, special, ids, (size_t)need + 1);
    MK_CHECK(got == need);
    *n = (size_t)need;
    return ids;
}

static char *decode(const struct mk_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t need = mk_tokenizer_decode(t, ids, n, NULL, 0);
    char *out = malloc(need + 1);
    size_t got = mk_tokenizer_decode(t, ids, n, out, need + 1);
    MK_CHECK(got == need);
    out[need] = '\0';
    *len = need;
    return out;
}

/* Encodes s (without special tokens) and decodes the ids: true when that gives s back. */
static bool round_trips(const struct mk_tokenizer *t, const char *s, size_t len, bool bos) {
    size_t n, dlen;
    int32_t *ids = encode(t, s, len, bos, false, &n);
    char *text = decode(t, ids, n, &dlen);
    bool ok = dlen == len && memcmp(text, s, len) == 0;
    free(text);
    free(ids);
    return ok;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Runs llama.cpp's test-tokenizer-0 vectors for one vocab: ids must match exactly and decoding
 * must give the input back. */
static void test_vectors(const char *dir, const char *vocab) {
    struct loaded l;
    if (load(dir, vocab, &l) != 0) return;
    char path[4096];
    size_t inp_len, out_len;
    snprintf(path, sizeof path, "%s/%s.inp", dir, vocab);
    char *inp = mk_test_read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/%s.out", dir, vocab);
    char *outp = mk_test_read_file(path, &out_len);
    MK_CHECK(inp && outp);
    if (!inp || !outp) {
        free(inp);
        free(outp);
        unload(&l);
        return;
    }

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    size_t n_cases = 0, n_ids_ok = 0, n_text_ok = 0;
    const char *p = inp, *end = inp + inp_len;
    char *line = outp;
    while (p < end) {
        const char *s = memmem(p, (size_t)(end - p), sep, sep_len);
        if (!s) break; /* the file ends with a separator */
        size_t slen = (size_t)(s - p);

        char *nl = strchr(line, '\n');
        MK_CHECK(nl != NULL);
        if (!nl) break;
        *nl = '\0';
        int32_t want[1024];
        size_t n_want = 0;
        for (char *q = line; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            if (n_want < 1024) want[n_want++] = (int32_t)v;
            q = e;
        }
        line = nl + 1;

        size_t n_got;
        int32_t *got = encode(l.tok, p, slen, false, false, &n_got);
        bool ids_ok = n_got == n_want && memcmp(got, want, n_want * sizeof *want) == 0;
        size_t dlen;
        char *text = decode(l.tok, got, n_got, &dlen);
        bool text_ok = dlen == slen && memcmp(text, p, slen) == 0;
        if (!ids_ok || !text_ok) {
            mk_test_fail("FAIL %s case %zu: \"%.*s\" ids %s, text %s", vocab, n_cases, (int)slen, p,
                         ids_ok ? "ok" : "differ", text_ok ? "ok" : "differs");
            print_ids("want", want, n_want);
            print_ids("got ", got, n_got);
            if (!text_ok) fprintf(stderr, "  text: \"%s\"\n", text);
        }
        n_ids_ok += ids_ok;
        n_text_ok += text_ok;
        n_cases++;
        free(got);
        free(text);
        p = s + sep_len;
    }
    printf("%s: %zu cases, ids match %zu, decode round-trips %zu\n", vocab, n_cases, n_ids_ok, n_text_ok);

    /* Every piece, with and without a token before it: the size query agrees with the copy. */
    uint32_t nv = mk_tokenizer_n_vocab(l.tok);
    size_t piece_bad = 0;
    for (uint32_t id = 0; id < nv; id++) {
        /* Some vocabs hold long pieces (runs of spaces or dashes in code tokenizers): a piece
         * longer than buf must be reported with its full size and copied in part. */
        char buf[64];
        for (int32_t prev = -1; prev <= 0; prev++) {
            size_t need = mk_tokenizer_piece(l.tok, prev, (int32_t)id, NULL, 0);
            size_t got = mk_tokenizer_piece(l.tok, prev, (int32_t)id, buf, sizeof buf);
            piece_bad += need != got;
        }
    }
    MK_CHECK_MSG(piece_bad == 0, "%s: %zu pieces whose size query disagrees with the copy", vocab, piece_bad);
    MK_CHECK(mk_tokenizer_piece(l.tok, -1, -5, NULL, 0) == 0);
    MK_CHECK(mk_tokenizer_piece(l.tok, -1, (int32_t)nv, NULL, 0) == 0);
    MK_CHECK(n_cases > 0 && n_ids_ok == n_cases && n_text_ok == n_cases);
    MK_CHECK(*line == '\0'); /* every expected line was used */
    free(inp);
    free(outp);
    unload(&l);
}

/* Every ggml-vocab-*.gguf with its .inp and .out in the models directory. */
static void test_all_vectors(const char *dir) {
    DIR *d = opendir(dir);
    MK_CHECK(d != NULL);
    if (!d) return;
    size_t n_vocabs = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "ggml-vocab-", 11) != 0 || n < 5 || strcmp(e->d_name + n - 5, ".gguf") != 0) continue;
        test_vectors(dir, e->d_name);
        n_vocabs++;
    }
    closedir(d);
    MK_CHECK(n_vocabs >= 4); /* gpt-2, llama-bpe, llama-spm and qwen2 at least */
}

static void test_stories(const char *dir) {
    struct loaded l;
    if (load(dir, "stories260K-f32.gguf", &l) != 0) return;
    const struct mk_tokenizer *t = l.tok;
    MK_CHECK(mk_tokenizer_n_vocab(t) == 512);
    MK_CHECK(mk_tokenizer_bos(t) == 1);
    MK_CHECK(mk_tokenizer_eos(t) == 2);
    MK_CHECK(strcmp(mk_tokenizer_kind(t), "llama") == 0);

    const char *prompt = "Once upon a time";
    const int32_t want[] = { 1, 403, 407, 261, 378 };
    size_t n;
    int32_t *ids = encode(t, prompt, strlen(prompt), true, false, &n);
    MK_CHECK(n == 5 && memcmp(ids, want, sizeof want) == 0);
    print_ids("stories260K \"Once upon a time\"", ids, n);
    size_t dlen;
    char *text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == strlen(prompt) && memcmp(text, prompt, dlen) == 0);
    free(text);

    /* Pieces one by one: the dummy-prefix space goes only after BOS. */
    char piece[64];
    size_t pn = mk_tokenizer_piece(t, 1, 403, piece, sizeof piece);
    MK_CHECK(pn == 4 && memcmp(piece, "Once", 4) == 0);
    pn = mk_tokenizer_piece(t, 403, 407, piece, sizeof piece);
    MK_CHECK(pn == 5 && memcmp(piece, " upon", 5) == 0);
    pn = mk_tokenizer_piece(t, -1, 1, piece, sizeof piece);
    MK_CHECK(pn == 0);
    /* A short buffer gets a prefix; the return value is still the full size. */
    pn = mk_tokenizer_piece(t, 403, 407, piece, 2);
    MK_CHECK(pn == 5 && memcmp(piece, " u", 2) == 0);

    /* A capped encode writes only cap ids but reports the full count. */
    int32_t few[3] = { -7, -7, -7 };
    MK_CHECK(mk_tokenizer_encode(t, prompt, strlen(prompt), true, false, few, 2) == 5);
    MK_CHECK(few[0] == 1 && few[1] == 403 && few[2] == -7);

    /* The golden greedy continuation decodes to the documented text. */
    const int32_t gen[] = { 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426 };
    text = decode(t, gen, sizeof gen / sizeof gen[0], &dlen);
    const char *gen_text = "Once upon a time, there was a little girl named Lily.";
    MK_CHECK(dlen == strlen(gen_text) && memcmp(text, gen_text, dlen) == 0);
    free(text);

    /* Invalid UTF-8 goes through byte tokens and comes back unchanged. */
    const char bad[] = "\xff\xfe abc \xc3";
    size_t bad_len = sizeof bad - 1;
    free(ids);
    ids = encode(t, bad, bad_len, true, false, &n);
    bool has_ff = false, has_fe = false, has_c3 = false;
    for (size_t i = 0; i < n; i++) {
        has_ff |= ids[i] == 3 + 0xff;
        has_fe |= ids[i] == 3 + 0xfe;
        has_c3 |= ids[i] == 3 + 0xc3;
    }
    MK_CHECK(has_ff && has_fe && has_c3);
    text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == bad_len && memcmp(text, bad, bad_len) == 0);
    free(text);
    free(ids);
    unload(&l);
}

static bool contains(const int32_t *ids, size_t n, int32_t id) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static void test_llama_special(const char *dir) {
    struct loaded l;
    if (load(dir, "ggml-vocab-llama-spm.gguf", &l) != 0) return;
    const struct mk_tokenizer *t = l.tok;
    const char *s = "<s>Hello world</s>";
    size_t n, dlen;

    /* Parsed: BOS and EOS ids, and the text after <s> gets the dummy prefix again. */
    int32_t *ids = encode(t, s, strlen(s), false, true, &n);
    const int32_t want[] = { 1, 15043, 3186, 2 };
    MK_CHECK(n == 4 && memcmp(ids, want, sizeof want) == 0);
    print_ids("llama-spm parse_special \"<s>Hello world</s>\"", ids, n);
    char *text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == strlen("Hello world") && memcmp(text, "Hello world", dlen) == 0);
    free(text);
    free(ids);

    /* Not parsed: ordinary text, no control ids, and it decodes back. */
    ids = encode(t, s, strlen(s), false, false, &n);
    MK_CHECK(n > 4 && !contains(ids, n, 1) && !contains(ids, n, 2));
    print_ids("llama-spm plain \"<s>Hello world</s>\"", ids, n);
    text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == strlen(s) && memcmp(text, s, dlen) == 0);
    free(text);
    free(ids);

    /* BOS first, then the same tokens as without it. */
    ids = encode(t, "Hello world", 11, true, false, &n);
    const int32_t want_bos[] = { 1, 15043, 3186 };
    MK_CHECK(n == 3 && memcmp(ids, want_bos, sizeof want_bos) == 0);
    free(ids);

    /* Empty text: nothing, or just BOS; NULL with length 0 is fine. */
    MK_CHECK(mk_tokenizer_encode(t, NULL, 0, false, false, NULL, 0) == 0);
    MK_CHECK(mk_tokenizer_encode(t, "", 0, true, false, NULL, 0) == 1);
    MK_CHECK(mk_tokenizer_encode(t, NULL, 3, false, false, NULL, 0) == MK_ERR_INVALID_ARG);

    /* Invalid UTF-8 through the 32000-token vocab. */
    const char bad[] = "\xff\xfe abc \xc3";
    ids = encode(t, bad, sizeof bad - 1, false, false, &n);
    MK_CHECK(n >= 3 && ids[0] == 29871 && ids[1] == 3 + 0xff && ids[2] == 3 + 0xfe);
    text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == sizeof bad - 1 && memcmp(text, bad, dlen) == 0);
    free(text);
    free(ids);

    /* Random byte strings round-trip (U+2581 itself is the one thing that cannot: it decodes to a space). */
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int bad_rt = 0;
    for (int iter = 0; iter < 300; iter++) {
        char buf[64];
        size_t len = (size_t)(iter % 48);
        for (size_t i = 0; i < len; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(rng >> 56);
            buf[i] = (char)(iter % 3 == 0 ? r : iter % 3 == 1 ? (r % 96) + 32 : (r & 1 ? 0xe2 : r));
        }
        if (memmem(buf, len, "\xe2\x96\x81", 3)) continue;
        bad_rt += !round_trips(t, buf, len, iter & 1);
    }
    MK_CHECK(bad_rt == 0);
    unload(&l);
}

static void test_gpt2_special(const char *dir) {
    struct loaded l;
    if (load(dir, "ggml-vocab-gpt-2.gguf", &l) != 0) return;
    const struct mk_tokenizer *t = l.tok;
    MK_CHECK(strcmp(mk_tokenizer_kind(t), "gpt2") == 0);
    MK_CHECK(mk_tokenizer_bos(t) == 50256 && mk_tokenizer_eos(t) == 50256);
    const char *s = "Hello<|endoftext|> world";
    size_t n, dlen;
    int32_t *ids = encode(t, s, strlen(s), false, true, &n);
    const int32_t want[] = { 15496, 50256, 995 };
    MK_CHECK(n == 3 && memcmp(ids, want, sizeof want) == 0);
    print_ids("gpt-2 parse_special \"Hello<|endoftext|> world\"", ids, n);
    char *text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == strlen("Hello world") && memcmp(text, "Hello world", dlen) == 0);
    free(text);
    free(ids);

    ids = encode(t, s, strlen(s), false, false, &n);
    MK_CHECK(n > 3 && !contains(ids, n, 50256));
    text = decode(t, ids, n, &dlen);
    MK_CHECK(dlen == strlen(s) && memcmp(text, s, dlen) == 0);
    free(text);
    free(ids);

    /* Scripts, Unicode spaces and non-ASCII digits through the hand-written pre-tokenizer. The ids
     * come from an independent reference: Python's `regex` module running the GPT-2 pattern, then
     * the original rank-ordered GPT-2 BPE over this vocab's merges. */
    static const struct {
        const char *text;
        int32_t ids[40];
        size_t n;
    } uni[] = {
        { "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82\xe3\x80\x80\xe3\x80\x80\xd0\xbc\xd0\xb8\xd1\x80  123",
          { 140, 253, 21169, 18849, 38857, 16843, 20375, 5099, 222, 5099, 222, 43108, 18849, 21169, 220, 17031 },
          16 },
        { "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 "
          "\xe0\xa4\xa6\xe0\xa5\x81\xe0\xa4\xa8\xe0\xa4\xbf\xe0\xa4\xaf\xe0\xa4\xbe "
          "\xd9\xa3\xd9\xa4\xd9\xa5 x\xc2\xa0y",
          { 11976, 101, 11976, 106, 11976, 116, 24231, 235,   11976, 97,  24231, 229, 28225, 99,   24231, 223,
            11976, 101, 11976, 123, 11976, 107, 48077, 18923, 96,    149, 97,    149, 98,    2124, 1849,  88 },
          32 },
        { "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xe2\x80\x83\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
          "\xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93",
          { 47991, 250, 166, 113, 255, 168, 244, 112, 220, 447, 225, 33768, 98,  17312, 105, 45739, 252, 27332,
            120,   94,  171, 120, 95,  171, 120, 96,  171, 120, 239, 171,   120, 240,   171, 120,   241 },
          35 },
        { "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d 'll \xd7\xa2\xd7\x95\xd7\x9c\xd7\x9d\xe2\x80\xa8\xe2\x80\xa8"
          "a "
          "\xce\xa9\xe2\x89\x88 \xf0\x9d\x90\x80\xf0\x9d\x90\x81",
          { 50227, 40010, 27072, 147,  251, 705,   297, 14360, 95,    27072, 40010, 147,   251, 447, 101,
            447,   101,   64,    7377, 102, 35705, 230, 220,   47728, 238,   222,   47728, 238, 223 },
          29 },
        { "x\xd9\xa3'll \xef\xbc\x92's \xf0\x9d\x9f\xa4'd",
          { 87, 149, 96, 1183, 27332, 120, 240, 338, 220, 47728, 253, 97, 1549 },
          13 },
    };
    for (size_t c = 0; c < sizeof uni / sizeof uni[0]; c++) {
        ids = encode(t, uni[c].text, strlen(uni[c].text), false, false, &n);
        bool ok = n == uni[c].n && memcmp(ids, uni[c].ids, n * sizeof *ids) == 0;
        if (!ok) {
            mk_test_fail("FAIL gpt-2 unicode case %zu", c);
            print_ids("want", uni[c].ids, uni[c].n);
            print_ids("got ", ids, n);
        }
        text = decode(t, ids, n, &dlen);
        MK_CHECK(dlen == strlen(uni[c].text) && memcmp(text, uni[c].text, dlen) == 0);
        free(text);
        free(ids);
    }

    /* Byte-level BPE takes any bytes and gives them back. */
    uint64_t rng = 0x243f6a8885a308d3ull;
    int bad_rt = 0;
    for (int iter = 0; iter < 300; iter++) {
        char buf[64];
        size_t len = (size_t)(iter % 48);
        for (size_t i = 0; i < len; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(rng >> 56);
            buf[i] = (char)(iter % 2 ? r : (r % 96) + 32);
        }
        bad_rt += !round_trips(t, buf, len, false);
    }
    MK_CHECK(bad_rt == 0);
    unload(&l);
}

static void test_create_errors(void) {
    struct mk_vocab_data v;
    memset(&v, 0, sizeof v);
    struct mk_tokenizer *t = (struct mk_tokenizer *)1;
    struct mk_error err = { 0 };
    strcpy(v.model, "bert");
    struct mk_gguf_str toks[2] = { { 1, "a" }, { 1, "b" } };
    v.tokens = toks;
    v.n_tokens = 2;
    v.bos = v.eos = v.unk = -1;
    MK_CHECK(mk_tokenizer_create(&v, &t, &err) == MK_ERR_UNSUPPORTED && t == NULL);
    MK_CHECK(strstr(err.msg, "bert") != NULL);
    strcpy(v.model, "llama");
    v.bos = 5;
    MK_CHECK(mk_tokenizer_create(&v, &t, &err) == MK_ERR_FORMAT);
    MK_CHECK(strstr(err.msg, "bos_token_id") != NULL);
    v.bos = -1;
    v.n_tokens = 0;
    MK_CHECK(mk_tokenizer_create(&v, &t, &err) == MK_ERR_FORMAT);

    /* A tiny SPM vocab without byte tokens: unknown characters become unk. */
    struct mk_gguf_str small[] = { { 5, "<unk>" },
                                   { 3, "\xe2\x96\x81" },
                                   { 1, "a" },
                                   { 4, "\xe2\x96\x81"
                                        "a" } };
    float scores[] = { 0, -1, -2, -0.5f };
    int32_t types[] = { 2, 1, 1, 1 };
    v.tokens = small;
    v.scores = scores;
    v.types = types;
    v.n_tokens = 4;
    v.unk = 0;
    MK_CHECK(mk_tokenizer_create(&v, &t, &err) == MK_OK);
    int32_t ids[8];
    MK_CHECK(mk_tokenizer_encode(t, "aaz", 3, false, false, ids, 8) == 3);
    MK_CHECK(ids[0] == 3 && ids[1] == 2 && ids[2] == 0);
    mk_tokenizer_free(t);
}

/* Pre-tokenizer splits, expected words ('|' between them) worked out by hand from llama.cpp's
 * patterns for each name; tests/tokenizer_split_check.py checks them against Python's `regex`. */
static const struct {
    const char *pre, *text, *want;
} split_cases[] = {
    { "llama-bpe", "abc 12345 x", "abc| |123|45| x" },
    { "qwen2", "abc 12345 x", "abc| |1|2|3|4|5| x" },
    { "gpt-2", "abc 12345 x", "abc| 12345| x" },
    { "starcoder", "abc 12345 x", "abc| |1|2|3|4|5| x" },
    { "smollm", "x 2024", "x| |2|0|2|4" },
    { "command-r", "x 2024", "x| |2|0|2|4" },
    { "refact", "x 2024", "x| |2|0|2|4" },
    { "dbrx", "abc 12345 x", "abc| |123|45| x" },
    { "llama-bpe", "I'LL don't", "I|'LL| don|'t" },
    { "gpt-2", "I'LL don't", "I|'|LL| don|'t" },
    { "gpt-2", "a   b", "a|  | b" },
    { "llama3", "a   b\n\n c", "a|  | b|\n\n| c" },
    { "qwen2", "x\t\n\ny", "x|\t\n\n|y" },
    { "llama-bpe", "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c",
      "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c" },
    { "deepseek-llm",
      "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
      "abc",
      "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c|abc" },
    { "gpt-2", "hi \xf0\x9f\x91\x8b\xf0\x9f\x91\x8b!", "hi| \xf0\x9f\x91\x8b\xf0\x9f\x91\x8b!" },
    { "llama3", "hi \xf0\x9f\x91\x8b\xf0\x9f\x91\x8b!", "hi| \xf0\x9f\x91\x8b\xf0\x9f\x91\x8b!" },
    { "default", "a+b=12345", "a|+|b|=|123|45" },
    { "falcon", "x = 1234;", "x| |=| |123|4|;" },
    { "tekken", "HelloWorld ABCdef", "Hello|World| ABCdef" },
    { "deepseek-coder", "ab, 12", "ab|,| |1|2" },
};

static void test_splits(void) {
    for (size_t c = 0; c < sizeof split_cases / sizeof split_cases[0]; c++) {
        const char *text = split_cases[c].text;
        size_t lens[64];
        int64_t n = mk_tokenizer_split(split_cases[c].pre, text, strlen(text), lens, 64);
        char got[256];
        size_t g = 0, off = 0;
        for (int64_t i = 0; i < n && i < 64; i++) {
            if (i > 0) got[g++] = '|';
            memcpy(got + g, text + off, lens[i]);
            g += lens[i];
            off += lens[i];
        }
        got[g] = '\0';
        bool ok = n > 0 && off == strlen(text) && strcmp(got, split_cases[c].want) == 0;
        if (!ok)
            mk_test_fail("FAIL split %s \"%s\": got \"%s\", want \"%s\"", split_cases[c].pre, text, got,
                         split_cases[c].want);
    }
    size_t lens[4];
    MK_CHECK(mk_tokenizer_split("no-such-pre", "abc", 3, lens, 4) == MK_ERR_INVALID_ARG);
    MK_CHECK(mk_tokenizer_split("gpt-2", "", 0, lens, 4) == 0);
    /* Invalid UTF-8 splits like U+FFFD (a symbol) but keeps its bytes. */
    MK_CHECK(mk_tokenizer_split("gpt-2", "a \xff\xfe", 4, lens, 4) == 2 && lens[0] == 1 && lens[1] == 3);
}

/* Returns the id of one special token's text (parsed as special), or -1. */
static int32_t special_id(const struct mk_tokenizer *t, const char *s) {
    int32_t ids[4];
    int64_t n = mk_tokenizer_encode(t, s, strlen(s), false, true, ids, 4);
    return n == 1 ? ids[0] : -1;
}

/* tokenizer.ggml.pre, add_bos_token, special-token text and the end-of-generation set on the
 * Llama 3 and Qwen2 vocabs. */
static void test_bpe_meta(const char *dir) {
    struct loaded l;
    if (load(dir, "ggml-vocab-llama-bpe.gguf", &l) == 0) {
        const struct mk_tokenizer *t = l.tok;
        MK_CHECK(strcmp(mk_tokenizer_pre(t), "llama3") == 0);
        MK_CHECK(mk_tokenizer_add_bos(t) && !mk_tokenizer_add_eos(t));
        int32_t ids[8];
        MK_CHECK(mk_tokenizer_encode(t, "Hi", 2, true, false, ids, 8) == 2 && ids[0] == mk_tokenizer_bos(t));
        MK_CHECK(mk_tokenizer_encode(t, "Hi", 2, false, false, ids, 8) == 1 && ids[0] != mk_tokenizer_bos(t));
        int32_t eot = special_id(t, "<|eot_id|>"), start = special_id(t, "<|start_header_id|>");
        MK_CHECK(eot >= 0 && start >= 0 && mk_tokenizer_eot(t) == eot);
        MK_CHECK(mk_tokenizer_is_eog(t, eot) && mk_tokenizer_is_eog(t, mk_tokenizer_eos(t)));
        MK_CHECK(!mk_tokenizer_is_eog(t, start) && !mk_tokenizer_is_eog(t, ids[0]) && !mk_tokenizer_is_eog(t, -1));
        /* Without parse_special the marker is plain text. */
        MK_CHECK(mk_tokenizer_encode(t, "<|eot_id|>", 10, false, false, ids, 8) > 1);
        unload(&l);
    }
    if (load(dir, "ggml-vocab-qwen2.gguf", &l) == 0) {
        const struct mk_tokenizer *t = l.tok;
        MK_CHECK(strcmp(mk_tokenizer_pre(t), "qwen2") == 0);
        int32_t im_end = special_id(t, "<|im_end|>"), im_start = special_id(t, "<|im_start|>");
        int32_t eot_text = special_id(t, "<|endoftext|>");
        MK_CHECK(im_end >= 0 && im_start >= 0 && eot_text >= 0);
        MK_CHECK(mk_tokenizer_is_eog(t, im_end) && mk_tokenizer_is_eog(t, eot_text) &&
                 !mk_tokenizer_is_eog(t, im_start));
        int32_t ids[16];
        const char *chat = "<|im_start|>user\nHi<|im_end|>";
        int64_t n = mk_tokenizer_encode(t, chat, strlen(chat), false, true, ids, 16);
        MK_CHECK(n >= 4 && ids[0] == im_start && ids[n - 1] == im_end);
        if (!mk_tokenizer_add_bos(t)) MK_CHECK(mk_tokenizer_encode(t, "Hi", 2, true, false, ids, 16) == 1);
        unload(&l);
    }
    if (load(dir, "ggml-vocab-gpt-2.gguf", &l) == 0) {
        MK_CHECK(strcmp(mk_tokenizer_pre(l.tok), "gpt-2") == 0 && !mk_tokenizer_add_bos(l.tok));
        MK_CHECK(mk_tokenizer_is_eog(l.tok, 50256) && !mk_tokenizer_is_eog(l.tok, 995));
        unload(&l);
    }
}

/* Phi-3 files (general.name "Phi3" ...): llama.cpp drops the whitespace after special tokens but
 * <unk>, <s> and <|endoftext|>. The llama-spm vocab with the flag set behaves the same way. */
static void test_rstrip_specials(const char *dir) {
    struct loaded l;
    if (load(dir, "ggml-vocab-llama-spm.gguf", &l) != 0) return;
    struct mk_tokenizer_meta m;
    struct mk_error err = { 0 };
    MK_CHECK(mk_tokenizer_read_meta(l.model->gguf, &m, &err) == MK_OK);
    MK_CHECK(!m.rstrip_specials); /* general.name of this file is not a Phi-3 one */
    m.rstrip_specials = true;
    struct mk_tokenizer *phi = NULL;
    MK_CHECK(mk_tokenizer_create_meta(&l.model->vocab, &m, &phi, &err) == MK_OK);
    if (phi) {
        size_t n1, n2, n3;
        const char *spaced = "a</s> \n\t b", *tight = "a</s>b";
        int32_t *a = encode(phi, spaced, strlen(spaced), false, true, &n1);
        int32_t *b = encode(l.tok, tight, strlen(tight), false, true, &n2);
        int32_t *c = encode(l.tok, spaced, strlen(spaced), false, true, &n3);
        MK_CHECK_MSG(n1 == n2 && !memcmp(a, b, n1 * sizeof *a), "whitespace after </s> kept with rstrip");
        MK_CHECK(n3 > n2); /* without the flag the whitespace stays */
        free(a), free(b), free(c);
        const char *bos = "<s>  x";
        a = encode(phi, bos, strlen(bos), false, true, &n1);
        b = encode(l.tok, bos, strlen(bos), false, true, &n2);
        MK_CHECK_MSG(n1 == n2 && !memcmp(a, b, n1 * sizeof *a), "whitespace after <s> dropped");
        free(a), free(b);
        mk_tokenizer_free(phi);
    }
    unload(&l);
}

int main(void) {
    test_create_errors();
    test_splits();
    const char *dir = mk_test_models_dir("ggml-vocab-llama-spm.gguf");
    if (!dir) {
        printf("SKIP: models directory not found (set MK_MODELS_DIR); only the offline checks ran\n");
    } else {
        test_all_vectors(dir);
        test_bpe_meta(dir);
        test_stories(dir);
        test_llama_special(dir);
        test_rstrip_specials(dir);
        test_gpt2_special(dir);
    }
    return mk_test_finish("tokenizer_test");
}
