/* GGUF v2/v3 reader (zero-copy, every read bounded by the bytes left) and streaming v3 writer. */
#include "core/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"

/* Fields are decoded with memcpy, which is only right on a little-endian host. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "runtime/gguf.c assumes a little-endian host"
#endif

/* Limits no real model comes near; past them a file is hostile or broken. */
#define MK_GGUF_MAX_STRING      (1ull << 30)
#define MK_GGUF_MAX_ARRAY_BYTES (1ull << 30)
#define MK_GGUF_MAX_ALIGNMENT   (1ull << 20)
/* Real files hold tens of KVs and at most a few thousand tensors; the caps bound the index
 * allocations (about 100 bytes per entry) whatever the file size. */
#define MK_GGUF_MAX_KV      (1ull << 20)
#define MK_GGUF_MAX_TENSORS (1ull << 20)
/* llama.cpp keeps tensor names in char[GGML_MAX_NAME = 64], NUL included. */
#define MK_GGUF_MAX_NAME 63
/* magic, version, tensor_count, kv_count */
#define MK_GGUF_HEADER_BYTES 24
/* Smallest possible entries, used to bound counts before anything is allocated:
 * a KV is key length + 1 key byte + value type + a 1-byte value; a tensor info is name length +
 * 1 name byte + n_dims + one dimension + type + offset. */
#define MK_GGUF_MIN_KV_BYTES     (8 + 1 + 4 + 1)
#define MK_GGUF_MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)

/* ---- Shared helpers ---- */

/* Copies a file-supplied name into buf for a message: bounded, with non-printable bytes
 * escaped so hostile names cannot flood a log or drive a terminal. */
static const char *mk_gguf_show(char *buf, size_t cap, const char *s, uint64_t len) {
    size_t o = 0;
    uint64_t shown = len > 64 ? 64 : len;
    for (uint64_t i = 0; i < shown && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (shown < len && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o < cap ? o : cap - 1] = '\0';
    return buf;
}

const char *mk_gguf_type_name(enum mk_gguf_type t) {
    switch (t) {
    case MK_GGUF_UINT8: return "uint8";
    case MK_GGUF_INT8: return "int8";
    case MK_GGUF_UINT16: return "uint16";
    case MK_GGUF_INT16: return "int16";
    case MK_GGUF_UINT32: return "uint32";
    case MK_GGUF_INT32: return "int32";
    case MK_GGUF_FLOAT32: return "float32";
    case MK_GGUF_BOOL: return "bool";
    case MK_GGUF_STRING: return "string";
    case MK_GGUF_ARRAY: return "array";
    case MK_GGUF_UINT64: return "uint64";
    case MK_GGUF_INT64: return "int64";
    case MK_GGUF_FLOAT64: return "float64";
    }
    return "unknown";
}

/* Bytes of one scalar of type t; 0 for string, array and unknown types. */
static uint64_t mk_gguf_scalar_size(uint32_t t) {
    switch (t) {
    case MK_GGUF_UINT8:
    case MK_GGUF_INT8:
    case MK_GGUF_BOOL: return 1;
    case MK_GGUF_UINT16:
    case MK_GGUF_INT16: return 2;
    case MK_GGUF_UINT32:
    case MK_GGUF_INT32:
    case MK_GGUF_FLOAT32: return 4;
    case MK_GGUF_UINT64:
    case MK_GGUF_INT64:
    case MK_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static bool mk_gguf_is_int(uint32_t t) { return t <= MK_GGUF_INT32 || t == MK_GGUF_UINT64 || t == MK_GGUF_INT64; }

static bool mk_gguf_is_signed(uint32_t t) {
    return t == MK_GGUF_INT8 || t == MK_GGUF_INT16 || t == MK_GGUF_INT32 || t == MK_GGUF_INT64;
}

/* True when kv holds an integer whose value fits in uint32. */
static bool mk_gguf_int_to_u32(const struct mk_gguf_kv *kv, uint32_t *out) {
    if (!mk_gguf_is_int(kv->type)) return false;
    if (mk_gguf_is_signed(kv->type) ? (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX) : kv->v.u64 > UINT32_MAX)
        return false;
    *out = (uint32_t)kv->v.u64;
    return true;
}

/* "uint32" or "array of float32". */
static const char *mk_gguf_describe_type(const struct mk_gguf_kv *kv, char *buf, size_t cap) {
    if (kv->type == MK_GGUF_ARRAY)
        snprintf(buf, cap, "array of %s", mk_gguf_type_name(kv->v.arr.elem_type));
    else
        snprintf(buf, cap, "%s", mk_gguf_type_name(kv->type));
    return buf;
}

/* Integer value of kv as text, for messages. */
static const char *mk_gguf_int_text(const struct mk_gguf_kv *kv, char *buf, size_t cap) {
    if (mk_gguf_is_signed(kv->type))
        snprintf(buf, cap, "%lld", (long long)kv->v.i64);
    else
        snprintf(buf, cap, "%llu", (unsigned long long)kv->v.u64);
    return buf;
}

bool mk_gguf_str_eq(struct mk_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

/* Types that well-known keys must have. Being strict here means a model loader can read them
 * with the typed getters and never meet, say, a float where a count belongs. */
enum mk_gguf_want {
    MK_GGUF_WANT_STR,
    MK_GGUF_WANT_U32, /* any integer type holding a value that fits in uint32 */
    MK_GGUF_WANT_F32, /* float32 holding a finite value */
    MK_GGUF_WANT_BOOL,
    MK_GGUF_WANT_ARR_STR,
    MK_GGUF_WANT_ARR_F32,
    MK_GGUF_WANT_ARR_I32,
};

struct mk_gguf_key_rule {
    const char *key;
    enum mk_gguf_want want;
};

static const struct mk_gguf_key_rule mk_gguf_fixed_rules[] = {
    { "general.architecture", MK_GGUF_WANT_STR },
    { "general.alignment", MK_GGUF_WANT_U32 },
    { "general.name", MK_GGUF_WANT_STR },
    { "general.file_type", MK_GGUF_WANT_U32 },
    { "general.quantization_version", MK_GGUF_WANT_U32 },
    { "tokenizer.ggml.model", MK_GGUF_WANT_STR },
    { "tokenizer.ggml.pre", MK_GGUF_WANT_STR },
    { "tokenizer.ggml.tokens", MK_GGUF_WANT_ARR_STR },
    { "tokenizer.ggml.scores", MK_GGUF_WANT_ARR_F32 },
    { "tokenizer.ggml.token_type", MK_GGUF_WANT_ARR_I32 },
    { "tokenizer.ggml.merges", MK_GGUF_WANT_ARR_STR },
    { "tokenizer.ggml.bos_token_id", MK_GGUF_WANT_U32 },
    { "tokenizer.ggml.eos_token_id", MK_GGUF_WANT_U32 },
    { "tokenizer.ggml.unknown_token_id", MK_GGUF_WANT_U32 },
    { "tokenizer.ggml.padding_token_id", MK_GGUF_WANT_U32 },
    { "tokenizer.ggml.seperator_token_id", MK_GGUF_WANT_U32 },
    { "tokenizer.ggml.add_bos_token", MK_GGUF_WANT_BOOL },
    { "tokenizer.ggml.add_eos_token", MK_GGUF_WANT_BOOL },
};

/* Keys written as "<general.architecture>.<suffix>". */
static const struct mk_gguf_key_rule mk_gguf_arch_rules[] = {
    { "context_length", MK_GGUF_WANT_U32 },
    { "embedding_length", MK_GGUF_WANT_U32 },
    { "block_count", MK_GGUF_WANT_U32 },
    { "feed_forward_length", MK_GGUF_WANT_U32 },
    { "vocab_size", MK_GGUF_WANT_U32 },
    { "attention.head_count", MK_GGUF_WANT_U32 },
    { "attention.head_count_kv", MK_GGUF_WANT_U32 },
    { "attention.key_length", MK_GGUF_WANT_U32 },
    { "attention.value_length", MK_GGUF_WANT_U32 },
    { "rope.dimension_count", MK_GGUF_WANT_U32 },
    { "rope.freq_base", MK_GGUF_WANT_F32 },
    { "attention.layer_norm_rms_epsilon", MK_GGUF_WANT_F32 },
    { "attention.layer_norm_epsilon", MK_GGUF_WANT_F32 },
};

static const char *mk_gguf_want_name(enum mk_gguf_want w) {
    switch (w) {
    case MK_GGUF_WANT_STR: return "string";
    case MK_GGUF_WANT_U32: return "an integer that fits in uint32";
    case MK_GGUF_WANT_F32: return "float32";
    case MK_GGUF_WANT_BOOL: return "bool";
    case MK_GGUF_WANT_ARR_STR: return "array of string";
    case MK_GGUF_WANT_ARR_F32: return "array of float32";
    case MK_GGUF_WANT_ARR_I32: return "array of int32";
    }
    return "?";
}

/* The rule for key, or NULL when the key is not one mk knows. arch may be empty. */
static const struct mk_gguf_key_rule *mk_gguf_find_rule(struct mk_gguf_str key, struct mk_gguf_str arch) {
    for (size_t i = 0; i < sizeof mk_gguf_fixed_rules / sizeof mk_gguf_fixed_rules[0]; i++)
        if (mk_gguf_str_eq(key, mk_gguf_fixed_rules[i].key)) return &mk_gguf_fixed_rules[i];
    if (arch.len == 0 || key.len <= arch.len + 1 || memcmp(key.data, arch.data, arch.len) != 0 ||
        key.data[arch.len] != '.')
        return NULL;
    struct mk_gguf_str suffix = { key.len - arch.len - 1, key.data + arch.len + 1 };
    for (size_t i = 0; i < sizeof mk_gguf_arch_rules / sizeof mk_gguf_arch_rules[0]; i++)
        if (mk_gguf_str_eq(suffix, mk_gguf_arch_rules[i].key)) return &mk_gguf_arch_rules[i];
    return NULL;
}

/* Checks kv against the rule for its key; on a mismatch writes the reason (type and value). */
static bool mk_gguf_check_rule(const struct mk_gguf_kv *kv, struct mk_gguf_str arch, char *why, size_t cap) {
    const struct mk_gguf_key_rule *r = mk_gguf_find_rule(kv->key, arch);
    if (!r) return true;
    char tbuf[64], vbuf[64];
    bool type_ok;
    switch (r->want) {
    case MK_GGUF_WANT_STR: type_ok = kv->type == MK_GGUF_STRING; break;
    case MK_GGUF_WANT_U32: type_ok = mk_gguf_is_int(kv->type); break;
    case MK_GGUF_WANT_F32: type_ok = kv->type == MK_GGUF_FLOAT32; break;
    case MK_GGUF_WANT_BOOL: type_ok = kv->type == MK_GGUF_BOOL; break;
    case MK_GGUF_WANT_ARR_STR: type_ok = kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_STRING; break;
    case MK_GGUF_WANT_ARR_F32: type_ok = kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_FLOAT32; break;
    case MK_GGUF_WANT_ARR_I32: type_ok = kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_INT32; break;
    default: type_ok = false; break;
    }
    if (!type_ok) {
        snprintf(why, cap, "type is %s, must be %s", mk_gguf_describe_type(kv, tbuf, sizeof tbuf),
                 mk_gguf_want_name(r->want));
        return false;
    }
    uint32_t u;
    if (r->want == MK_GGUF_WANT_U32 && !mk_gguf_int_to_u32(kv, &u)) {
        snprintf(why, cap, "value %s (%s) does not fit in uint32", mk_gguf_int_text(kv, vbuf, sizeof vbuf),
                 mk_gguf_type_name(kv->type));
        return false;
    }
    if (r->want == MK_GGUF_WANT_F32 && !isfinite(kv->v.f64)) {
        snprintf(why, cap, "value %g is not finite", kv->v.f64);
        return false;
    }
    return true;
}

/* Validates a general.alignment value (already known to be an integer fitting uint32). */
static bool mk_gguf_check_alignment(uint64_t a, char *why, size_t cap) {
    if (a == 0 || (a & (a - 1)) != 0) {
        snprintf(why, cap, "value %llu is not a power of two", (unsigned long long)a);
        return false;
    }
    if (a > MK_GGUF_MAX_ALIGNMENT) {
        snprintf(why, cap, "value %llu is over the 1 MiB limit", (unsigned long long)a);
        return false;
    }
    return true;
}

/* Validates a tensor or key name; on failure writes the reason. */
static bool mk_gguf_check_name(const char *s, uint64_t len, bool is_tensor, char *why, size_t cap) {
    if (len == 0) {
        snprintf(why, cap, "name is empty");
        return false;
    }
    if (memchr(s, '\0', len)) {
        snprintf(why, cap, "name contains a NUL byte");
        return false;
    }
    if (is_tensor && len > MK_GGUF_MAX_NAME) {
        snprintf(why, cap, "name length = %llu (must be at most %d, as in llama.cpp)", (unsigned long long)len,
                 MK_GGUF_MAX_NAME);
        return false;
    }
    return true;
}

/* Validates a tensor's shape and type, and computes its element and byte counts. */
static enum mk_status mk_gguf_tensor_shape(uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t *n_elements,
                                           uint64_t *n_bytes, char *why, size_t cap) {
    if (n_dims < 1 || n_dims > MK_GGUF_MAX_DIMS) {
        snprintf(why, cap, "n_dims = %u (must be 1..%d)", n_dims, MK_GGUF_MAX_DIMS);
        return MK_ERR_FORMAT;
    }
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0) {
            snprintf(why, cap, "ne[%u] = 0 (dimensions must be at least 1)", d);
            return MK_ERR_FORMAT;
        }
        if (ne[d] > (uint64_t)INT64_MAX) {
            snprintf(why, cap, "ne[%u] = %llu (over INT64_MAX)", d, (unsigned long long)ne[d]);
            return MK_ERR_FORMAT;
        }
    }
    const struct mk_dtype_info *info = mk_dtype_get(type);
    if (!info) {
        const char *gname = mk_dtype_ggml_name(type);
        if (gname) {
            snprintf(why, cap, "type %s (%u) is not supported by mk", gname, type);
            return MK_ERR_UNSUPPORTED;
        }
        snprintf(why, cap, "type = %u (not a ggml type)", type);
        return MK_ERR_FORMAT;
    }
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (__builtin_mul_overflow(n, ne[d], &n) || n > (uint64_t)INT64_MAX) {
            char dims[128];
            size_t o = 0;
            for (uint32_t k = 0; k < n_dims; k++)
                o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%llu", k ? ", " : "", (unsigned long long)ne[k]);
            snprintf(why, cap, "element count overflows (ne = [%s])", dims);
            return MK_ERR_FORMAT;
        }
    }
    if (ne[0] % info->block_size != 0) {
        snprintf(why, cap, "ne[0] = %llu is not a multiple of the %s block size %u", (unsigned long long)ne[0],
                 info->name, info->block_size);
        return MK_ERR_FORMAT;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(n / info->block_size, (uint64_t)info->type_size, &bytes) ||
        bytes > (uint64_t)INT64_MAX) {
        snprintf(why, cap, "byte count overflows (%llu elements of %s)", (unsigned long long)n, info->name);
        return MK_ERR_FORMAT;
    }
    *n_elements = n;
    *n_bytes = bytes;
    return MK_OK;
}

/* ---- Name index: open addressing over item indices, so duplicate checks stay linear on
 * hostile files with millions of entries. Items start with their struct mk_gguf_str name. ---- */

struct mk_gguf_index {
    uint64_t *slots; /* (cap) item index + 1; 0 is empty */
    uint64_t mask;
    uint64_t seed; /* differs per open (ASLR), so precomputed colliding names do not chain */
};

_Static_assert(offsetof(struct mk_gguf_kv, key) == 0, "index reads names at offset 0");
_Static_assert(offsetof(struct mk_gguf_tensor, name) == 0, "index reads names at offset 0");

static uint64_t mk_gguf_hash(uint64_t seed, const char *s, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (uint64_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool mk_gguf_index_init(struct mk_gguf_index *ix, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    ix->seed = ((uint64_t)(uintptr_t)ix->slots ^ (uint64_t)(uintptr_t)mk_gguf_fixed_rules) * 0x9e3779b97f4a7c15ull;
    return ix->slots != NULL;
}

static const struct mk_gguf_str *mk_gguf_item_name(const void *items, size_t stride, uint64_t i) {
    return (const struct mk_gguf_str *)((const char *)items + i * stride);
}

/* Looks name up; returns the item index or UINT64_MAX. */
static uint64_t mk_gguf_index_find(const struct mk_gguf_index *ix, const void *items, size_t stride, const char *name,
                                   uint64_t len) {
    if (!ix->slots) return UINT64_MAX;
    for (uint64_t h = mk_gguf_hash(ix->seed, name, len) & ix->mask;; h = (h + 1) & ix->mask) {
        uint64_t s = ix->slots[h];
        if (s == 0) return UINT64_MAX;
        const struct mk_gguf_str *o = mk_gguf_item_name(items, stride, s - 1);
        if (o->len == len && memcmp(o->data, name, len) == 0) return s - 1;
    }
}

/* Inserts item i; returns the index of an item with the same name already there, or
 * UINT64_MAX. */
static uint64_t mk_gguf_index_insert(struct mk_gguf_index *ix, const void *items, size_t stride, uint64_t i) {
    const struct mk_gguf_str *n = mk_gguf_item_name(items, stride, i);
    uint64_t h = mk_gguf_hash(ix->seed, n->data, n->len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        uint64_t s = ix->slots[h];
        if (s == 0) break;
        const struct mk_gguf_str *o = mk_gguf_item_name(items, stride, s - 1);
        if (o->len == n->len && memcmp(o->data, n->data, n->len) == 0) return s - 1;
    }
    ix->slots[h] = i + 1;
    return UINT64_MAX;
}

/* ---- Reader ---- */

struct mk_gguf {
    const uint8_t *base; /* (size) the whole file */
    uint64_t size;
    void *map; /* non-NULL when mk_gguf_open read the file (into anonymous memory) */
    size_t map_size;
    char *path; /* path or memory name, for messages */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* may exceed size in files without tensors */
    uint64_t n_kv;
    struct mk_gguf_kv *kvs; /* (n_kv) */
    uint64_t n_tensors;
    struct mk_gguf_tensor *tensors; /* (n_tensors) */
    struct mk_gguf_index kv_index;
    struct mk_gguf_index tensor_index;
};

struct mk_gguf_parser {
    struct mk_gguf *g;
    uint64_t pos;
    struct mk_error *err;
    char where[256]; /* "key 'x'" or "tensor 3": what the next message is about */
};

static enum mk_status mk_gguf_fail(struct mk_gguf_parser *p, enum mk_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum mk_status mk_gguf_fail(struct mk_gguf_parser *p, enum mk_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mk_error_set(p->err, st, "%s: %s%s%s", p->g->path, p->where, p->where[0] ? ": " : "", msg);
}

static uint64_t mk_gguf_left(const struct mk_gguf_parser *p) { return p->g->size - p->pos; }

static enum mk_status mk_gguf_take(struct mk_gguf_parser *p, uint64_t n, const char *field, const uint8_t **out) {
    if (n > mk_gguf_left(p))
        return mk_gguf_fail(p, MK_ERR_FORMAT,
                            "%s needs %llu bytes at offset %llu but only %llu remain (truncated file?)", field,
                            (unsigned long long)n, (unsigned long long)p->pos, (unsigned long long)mk_gguf_left(p));
    *out = p->g->base + p->pos;
    p->pos += n;
    return MK_OK;
}

static enum mk_status mk_gguf_rd_u32(struct mk_gguf_parser *p, const char *field, uint32_t *v) {
    const uint8_t *q = NULL;
    enum mk_status st = mk_gguf_take(p, 4, field, &q);
    if (st == MK_OK) memcpy(v, q, 4);
    return st;
}

static enum mk_status mk_gguf_rd_u64(struct mk_gguf_parser *p, const char *field, uint64_t *v) {
    const uint8_t *q = NULL;
    enum mk_status st = mk_gguf_take(p, 8, field, &q);
    if (st == MK_OK) memcpy(v, q, 8);
    return st;
}

static enum mk_status mk_gguf_rd_str(struct mk_gguf_parser *p, const char *field, struct mk_gguf_str *s) {
    char lfield[96];
    snprintf(lfield, sizeof lfield, "%s length", field);
    uint64_t len = 0;
    enum mk_status st = mk_gguf_rd_u64(p, lfield, &len);
    if (st != MK_OK) return st;
    if (len > MK_GGUF_MAX_STRING)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "%s = %llu (over the 1 GiB string limit)", lfield,
                            (unsigned long long)len);
    if (len > mk_gguf_left(p))
        return mk_gguf_fail(p, MK_ERR_FORMAT,
                            "%s = %llu runs past the end of the file (%llu bytes remain at offset %llu)", lfield,
                            (unsigned long long)len, (unsigned long long)mk_gguf_left(p), (unsigned long long)p->pos);
    s->len = len;
    s->data = (const char *)p->g->base + p->pos;
    p->pos += len;
    return MK_OK;
}

static void mk_gguf_decode_scalar(uint32_t t, const uint8_t *q, struct mk_gguf_kv *kv) {
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    float f32;
    double f64;
    uint64_t u64;
    int64_t i64;
    switch (t) {
    case MK_GGUF_UINT8:
    case MK_GGUF_BOOL:
        memcpy(&u8, q, 1);
        kv->v.u64 = u8;
        break;
    case MK_GGUF_INT8:
        memcpy(&i8, q, 1);
        kv->v.i64 = i8;
        break;
    case MK_GGUF_UINT16:
        memcpy(&u16, q, 2);
        kv->v.u64 = u16;
        break;
    case MK_GGUF_INT16:
        memcpy(&i16, q, 2);
        kv->v.i64 = i16;
        break;
    case MK_GGUF_UINT32:
        memcpy(&u32, q, 4);
        kv->v.u64 = u32;
        break;
    case MK_GGUF_INT32:
        memcpy(&i32, q, 4);
        kv->v.i64 = i32;
        break;
    case MK_GGUF_FLOAT32:
        memcpy(&f32, q, 4);
        kv->v.f64 = f32;
        break;
    case MK_GGUF_UINT64:
        memcpy(&u64, q, 8);
        kv->v.u64 = u64;
        break;
    case MK_GGUF_INT64:
        memcpy(&i64, q, 8);
        kv->v.i64 = i64;
        break;
    case MK_GGUF_FLOAT64:
        memcpy(&f64, q, 8);
        kv->v.f64 = f64;
        break;
    default: break;
    }
}

/* Arrays hold scalars or strings. Arrays of arrays are rejected: llama.cpp's writers never emit
 * them and its reader refuses them, so supporting them would only widen the attack surface. */
static enum mk_status mk_gguf_parse_array(struct mk_gguf_parser *p, struct mk_gguf_kv *kv) {
    uint32_t et = 0;
    uint64_t n = 0;
    enum mk_status st = mk_gguf_rd_u32(p, "array element type", &et);
    if (st == MK_OK) st = mk_gguf_rd_u64(p, "array length", &n);
    if (st != MK_OK) return st;
    if (et == MK_GGUF_ARRAY)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "array element type = 9 (array of arrays is not supported)");
    if (et > MK_GGUF_FLOAT64)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "array element type = %u (unknown; known types are 0..12)", et);
    kv->v.arr.elem_type = (enum mk_gguf_type)et;
    kv->v.arr.n = 0;
    kv->v.arr.data = p->g->base + p->pos;
    kv->v.arr.strs = NULL;
    if (et == MK_GGUF_STRING) {
        /* Every string has at least its 8-byte length, which bounds n before we allocate. */
        if (n > MK_GGUF_MAX_ARRAY_BYTES / 8)
            return mk_gguf_fail(p, MK_ERR_FORMAT, "array length = %llu strings (over the limit of %llu)",
                                (unsigned long long)n, MK_GGUF_MAX_ARRAY_BYTES / 8);
        if (n > mk_gguf_left(p) / 8)
            return mk_gguf_fail(
                p, MK_ERR_FORMAT,
                "array length = %llu strings cannot fit in the %llu bytes that remain (each needs at least 8)",
                (unsigned long long)n, (unsigned long long)mk_gguf_left(p));
        if (n == 0) return MK_OK;
        struct mk_gguf_str *strs = malloc(n * sizeof *strs);
        if (!strs)
            return mk_gguf_fail(p, MK_ERR_NOMEM, "cannot allocate the index of %llu strings", (unsigned long long)n);
        kv->v.arr.strs = strs; /* owned by the kv from here, so close() frees it on any failure */
        for (uint64_t j = 0; j < n; j++) {
            char field[48];
            snprintf(field, sizeof field, "element %llu", (unsigned long long)j);
            st = mk_gguf_rd_str(p, field, &strs[j]);
            if (st != MK_OK) return st;
        }
        kv->v.arr.n = n;
        return MK_OK;
    }
    uint64_t esz = mk_gguf_scalar_size(et);
    if (n > MK_GGUF_MAX_ARRAY_BYTES / esz)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "array length = %llu of %llu-byte %s (over the 1 GiB array limit)",
                            (unsigned long long)n, (unsigned long long)esz, mk_gguf_type_name(et));
    if (n * esz > mk_gguf_left(p))
        return mk_gguf_fail(
            p, MK_ERR_FORMAT,
            "array length = %llu (%llu bytes of %s) runs past the end of the file (%llu bytes remain at offset %llu)",
            (unsigned long long)n, (unsigned long long)(n * esz), mk_gguf_type_name(et),
            (unsigned long long)mk_gguf_left(p), (unsigned long long)p->pos);
    const uint8_t *q = p->g->base + p->pos;
    if (et == MK_GGUF_BOOL) {
        for (uint64_t j = 0; j < n; j++)
            if (q[j] > 1)
                return mk_gguf_fail(p, MK_ERR_FORMAT, "element %llu: bool value = %u (must be 0 or 1)",
                                    (unsigned long long)j, q[j]);
    }
    p->pos += n * esz;
    kv->v.arr.n = n;
    return MK_OK;
}

static enum mk_status mk_gguf_parse_value(struct mk_gguf_parser *p, struct mk_gguf_kv *kv) {
    uint32_t t = 0;
    enum mk_status st = mk_gguf_rd_u32(p, "value type", &t);
    if (st != MK_OK) return st;
    if (t > MK_GGUF_FLOAT64)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "value type = %u (unknown; known types are 0..12)", t);
    kv->type = (enum mk_gguf_type)t;
    if (t == MK_GGUF_STRING) return mk_gguf_rd_str(p, "string value", &kv->v.str);
    if (t == MK_GGUF_ARRAY) return mk_gguf_parse_array(p, kv);
    const uint8_t *q = NULL;
    char field[32];
    snprintf(field, sizeof field, "%s value", mk_gguf_type_name(t));
    st = mk_gguf_take(p, mk_gguf_scalar_size(t), field, &q);
    if (st != MK_OK) return st;
    mk_gguf_decode_scalar(t, q, kv);
    if (t == MK_GGUF_BOOL && kv->v.u64 > 1)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "bool value = %llu (must be 0 or 1)", (unsigned long long)kv->v.u64);
    return MK_OK;
}

static void mk_gguf_where_key(struct mk_gguf_parser *p, struct mk_gguf_str key) {
    char shown[300];
    snprintf(p->where, sizeof p->where, "key '%s'", mk_gguf_show(shown, sizeof shown, key.data, key.len));
}

static void mk_gguf_where_tensor(struct mk_gguf_parser *p, struct mk_gguf_str name) {
    char shown[300];
    snprintf(p->where, sizeof p->where, "tensor '%s'", mk_gguf_show(shown, sizeof shown, name.data, name.len));
}

static enum mk_status mk_gguf_parse_header(struct mk_gguf_parser *p) {
    struct mk_gguf *g = p->g;
    if (g->size < MK_GGUF_HEADER_BYTES)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "file size = %llu bytes, too short for the %d-byte GGUF header",
                            (unsigned long long)g->size, MK_GGUF_HEADER_BYTES);
    if (memcmp(g->base, "GGUF", 4) != 0) {
        char shown[64];
        return mk_gguf_fail(p, MK_ERR_FORMAT, "magic = '%s' (not a GGUF file; expected 'GGUF')",
                            mk_gguf_show(shown, sizeof shown, (const char *)g->base, 4));
    }
    p->pos = 4;
    uint32_t version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    enum mk_status st = mk_gguf_rd_u32(p, "version", &version);
    if (st != MK_OK) return st;
    if (version == 1)
        return mk_gguf_fail(p, MK_ERR_UNSUPPORTED,
                            "version = 1 (GGUF v1 is not supported; re-convert the model with a current llama.cpp)");
    if ((version & 0xffff) == 0 && version != 0)
        return mk_gguf_fail(p, MK_ERR_UNSUPPORTED,
                            "version = 0x%08x (a big-endian GGUF; only little-endian is supported)", version);
    if (version != 2 && version != 3)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "version = %u (supported versions are 2 and 3)", version);
    g->version = version;
    if ((st = mk_gguf_rd_u64(p, "tensor_count", &n_tensors)) != MK_OK ||
        (st = mk_gguf_rd_u64(p, "kv_count", &n_kv)) != MK_OK)
        return st;
    /* Counts are checked against fixed caps and against the smallest possible entries before
     * anything is allocated. */
    if (n_kv > MK_GGUF_MAX_KV)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "kv_count = %llu (over the limit of %llu)", (unsigned long long)n_kv,
                            MK_GGUF_MAX_KV);
    if (n_tensors > MK_GGUF_MAX_TENSORS)
        return mk_gguf_fail(p, MK_ERR_FORMAT, "tensor_count = %llu (over the limit of %llu)",
                            (unsigned long long)n_tensors, MK_GGUF_MAX_TENSORS);
    uint64_t left = mk_gguf_left(p);
    if (n_kv > left / MK_GGUF_MIN_KV_BYTES)
        return mk_gguf_fail(p, MK_ERR_FORMAT,
                            "kv_count = %llu cannot fit in the %llu bytes after the header (each KV needs at least %d)",
                            (unsigned long long)n_kv, (unsigned long long)left, MK_GGUF_MIN_KV_BYTES);
    left -= n_kv * MK_GGUF_MIN_KV_BYTES;
    if (n_tensors > left / MK_GGUF_MIN_TENSOR_BYTES)
        return mk_gguf_fail(
            p, MK_ERR_FORMAT,
            "tensor_count = %llu cannot fit in the %llu bytes left after %llu KVs (each tensor info needs at least %d)",
            (unsigned long long)n_tensors, (unsigned long long)left, (unsigned long long)n_kv,
            MK_GGUF_MIN_TENSOR_BYTES);
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors || !mk_gguf_index_init(&g->kv_index, n_kv) ||
        !mk_gguf_index_init(&g->tensor_index, n_tensors))
        return mk_gguf_fail(p, MK_ERR_NOMEM, "cannot allocate %llu KVs and %llu tensor infos", (unsigned long long)n_kv,
                            (unsigned long long)n_tensors);
    g->n_kv = n_kv;
    g->n_tensors = n_tensors;
    return MK_OK;
}

static enum mk_status mk_gguf_parse_kvs(struct mk_gguf_parser *p) {
    struct mk_gguf *g = p->g;
    char why[256];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct mk_gguf_kv *kv = &g->kvs[i];
        snprintf(p->where, sizeof p->where, "kv %llu", (unsigned long long)i);
        enum mk_status st = mk_gguf_rd_str(p, "key", &kv->key);
        if (st != MK_OK) return st;
        if (!mk_gguf_check_name(kv->key.data, kv->key.len, false, why, sizeof why))
            return mk_gguf_fail(p, MK_ERR_FORMAT, "key %s", why);
        mk_gguf_where_key(p, kv->key);
        if ((st = mk_gguf_parse_value(p, kv)) != MK_OK) return st;
        uint64_t dup = mk_gguf_index_insert(&g->kv_index, g->kvs, sizeof *g->kvs, i);
        if (dup != UINT64_MAX)
            return mk_gguf_fail(p, MK_ERR_FORMAT, "duplicate key (kv %llu and kv %llu)", (unsigned long long)dup,
                                (unsigned long long)i);
    }
    /* Types of well-known keys; the architecture may come after its own keys, so this is a
     * second pass. */
    struct mk_gguf_str arch = { 0, "" };
    const struct mk_gguf_kv *akv = mk_gguf_find_kv(g, "general.architecture");
    if (akv && akv->type == MK_GGUF_STRING) arch = akv->v.str;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (!mk_gguf_check_rule(&g->kvs[i], arch, why, sizeof why)) {
            mk_gguf_where_key(p, g->kvs[i].key);
            return mk_gguf_fail(p, MK_ERR_FORMAT, "%s", why);
        }
    }
    const struct mk_gguf_kv *tokens = mk_gguf_find_kv(g, "tokenizer.ggml.tokens");
    static const char *const parallel[] = { "tokenizer.ggml.scores", "tokenizer.ggml.token_type" };
    for (size_t k = 0; k < 2; k++) {
        const struct mk_gguf_kv *other = mk_gguf_find_kv(g, parallel[k]);
        if (!other) continue;
        if (!tokens) {
            snprintf(p->where, sizeof p->where, "key '%s'", parallel[k]);
            return mk_gguf_fail(p, MK_ERR_FORMAT, "present (array length = %llu) without tokenizer.ggml.tokens",
                                (unsigned long long)other->v.arr.n);
        }
        if (other->v.arr.n != tokens->v.arr.n) {
            snprintf(p->where, sizeof p->where, "key '%s'", parallel[k]);
            return mk_gguf_fail(p, MK_ERR_FORMAT, "array length = %llu, but tokenizer.ggml.tokens has %llu",
                                (unsigned long long)other->v.arr.n, (unsigned long long)tokens->v.arr.n);
        }
    }
    g->alignment = MK_GGUF_DEFAULT_ALIGNMENT;
    const struct mk_gguf_kv *al = mk_gguf_find_kv(g, "general.alignment");
    if (al) {
        if (!mk_gguf_check_alignment(al->v.u64, why, sizeof why)) {
            snprintf(p->where, sizeof p->where, "key 'general.alignment'");
            return mk_gguf_fail(p, MK_ERR_FORMAT, "%s", why);
        }
        g->alignment = al->v.u64;
    }
    return MK_OK;
}

static enum mk_status mk_gguf_parse_tensors(struct mk_gguf_parser *p) {
    struct mk_gguf *g = p->g;
    char why[256];
    enum mk_status st;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct mk_gguf_tensor *t = &g->tensors[i];
        snprintf(p->where, sizeof p->where, "tensor %llu", (unsigned long long)i);
        if ((st = mk_gguf_rd_str(p, "name", &t->name)) != MK_OK) return st;
        if (!mk_gguf_check_name(t->name.data, t->name.len, true, why, sizeof why))
            return mk_gguf_fail(p, MK_ERR_FORMAT, "%s", why);
        mk_gguf_where_tensor(p, t->name);
        if ((st = mk_gguf_rd_u32(p, "n_dims", &t->n_dims)) != MK_OK) return st;
        if (t->n_dims < 1 || t->n_dims > MK_GGUF_MAX_DIMS)
            return mk_gguf_fail(p, MK_ERR_FORMAT, "n_dims = %u (must be 1..%d)", t->n_dims, MK_GGUF_MAX_DIMS);
        for (uint32_t d = 0; d < MK_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d < t->n_dims) {
                char field[16];
                snprintf(field, sizeof field, "ne[%u]", d);
                if ((st = mk_gguf_rd_u64(p, field, &t->ne[d])) != MK_OK) return st;
            }
        }
        if ((st = mk_gguf_rd_u32(p, "type", &t->type)) != MK_OK) return st;
        if ((st = mk_gguf_tensor_shape(t->type, t->n_dims, t->ne, &t->n_elements, &t->n_bytes, why, sizeof why)) !=
            MK_OK)
            return mk_gguf_fail(p, st, "%s", why);
        if ((st = mk_gguf_rd_u64(p, "offset", &t->offset)) != MK_OK) return st;
        uint64_t dup = mk_gguf_index_insert(&g->tensor_index, g->tensors, sizeof *g->tensors, i);
        if (dup != UINT64_MAX)
            return mk_gguf_fail(p, MK_ERR_FORMAT, "duplicate tensor name (tensor %llu and tensor %llu)",
                                (unsigned long long)dup, (unsigned long long)i);
    }
    /* The data section starts at the end of the tensor infos rounded up to the alignment; files
     * without tensors may end before that point. */
    uint64_t header_end = p->pos;
    g->data_offset = header_end + (g->alignment - header_end % g->alignment) % g->alignment;
    uint64_t avail = g->size > g->data_offset ? g->size - g->data_offset : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct mk_gguf_tensor *t = &g->tensors[i];
        mk_gguf_where_tensor(p, t->name);
        if (t->offset % g->alignment != 0)
            return mk_gguf_fail(p, MK_ERR_FORMAT, "offset = %llu is not a multiple of the alignment %llu",
                                (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (t->offset > avail || t->n_bytes > avail - t->offset)
            return mk_gguf_fail(p, MK_ERR_FORMAT,
                                "data at offset = %llu with n_bytes = %llu runs past the end of the file (the data "
                                "section at %llu holds %llu bytes)",
                                (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                                (unsigned long long)g->data_offset, (unsigned long long)avail);
        t->data = g->base + g->data_offset + t->offset;
    }
    /* llama.cpp's rule (ggml/src/gguf.cpp): in file order, each tensor starts exactly where the
     * one before it ends, padded to the alignment; the first starts at 0. Anything else (gaps,
     * overlaps, reordering) is refused there, so a file mk accepts is one llama.cpp accepts too. */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct mk_gguf_tensor *t = &g->tensors[i];
        if (t->offset != expect) {
            char shown[300];
            mk_gguf_where_tensor(p, t->name);
            if (i == 0)
                return mk_gguf_fail(p, MK_ERR_FORMAT,
                                    "data [%llu, %llu) does not start at offset 0 of the data section (at %llu), "
                                    "where the first tensor's data must start",
                                    (unsigned long long)t->offset, (unsigned long long)(t->offset + t->n_bytes),
                                    (unsigned long long)g->data_offset);
            const struct mk_gguf_tensor *a = &g->tensors[i - 1];
            return mk_gguf_fail(p, MK_ERR_FORMAT,
                                "data [%llu, %llu) %s tensor '%s' data [%llu, %llu): it must start at offset %llu, "
                                "right after the tensor before it padded to the alignment %llu",
                                (unsigned long long)t->offset, (unsigned long long)(t->offset + t->n_bytes),
                                t->offset >= expect                  ? "leaves a gap after"
                                : t->offset < a->offset + a->n_bytes ? "overlaps"
                                                                     : "is placed before the end of",
                                mk_gguf_show(shown, sizeof shown, a->name.data, a->name.len),
                                (unsigned long long)a->offset, (unsigned long long)(a->offset + a->n_bytes),
                                (unsigned long long)expect, (unsigned long long)g->alignment);
        }
        /* Cannot overflow: offset + n_bytes fits in the file (checked above), alignment <= 1 MiB. */
        expect = t->offset + t->n_bytes + (g->alignment - t->n_bytes % g->alignment) % g->alignment;
    }
    return MK_OK;
}

static enum mk_status mk_gguf_parse(struct mk_gguf *g, struct mk_error *err) {
    struct mk_gguf_parser p = { .g = g, .pos = 0, .err = err, .where = "" };
    enum mk_status st = mk_gguf_parse_header(&p);
    if (st == MK_OK) st = mk_gguf_parse_kvs(&p);
    if (st == MK_OK) st = mk_gguf_parse_tensors(&p);
    return st;
}

void mk_gguf_close(struct mk_gguf *g) {
    if (!g) return;
    if (g->kvs) {
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (g->kvs[i].type == MK_GGUF_ARRAY) free((void *)g->kvs[i].v.arr.strs);
    }
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    if (g->map) munmap(g->map, g->map_size);
    free(g->path);
    free(g);
}

static struct mk_gguf *mk_gguf_alloc(const char *name) {
    struct mk_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->path = strdup(name ? name : "<memory>");
    if (!g->path) {
        free(g);
        return NULL;
    }
    return g;
}

enum mk_status mk_gguf_open_memory(const void *data, size_t size, const char *name, struct mk_gguf **out,
                                   struct mk_error *err) {
    *out = NULL;
    if (!data && size != 0)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "%s: NULL buffer of %zu bytes", name ? name : "<memory>", size);
    struct mk_gguf *g = mk_gguf_alloc(name);
    if (!g) return mk_error_set(err, MK_ERR_NOMEM, "%s: out of memory", name ? name : "<memory>");
    g->base = data;
    g->size = size;
    enum mk_status st = mk_gguf_parse(g, err);
    if (st != MK_OK) {
        mk_gguf_close(g);
        return st;
    }
    *out = g;
    return MK_OK;
}

/* Bytes read per call when the caller does not say: large enough that the calls cost nothing next
 * to the copy, small enough that a cancel (Ctrl-C) is seen within a fraction of a second. */
#define MK_GGUF_READ_CHUNK (64u << 20)

/* The whole file into private anonymous memory, checking the cancel flag between chunks. A file
 * shortened or rewritten while it is read is an error here; once read, nothing the file does can
 * reach mk (a map of the file would turn a later truncation into SIGBUS in the middle of a step). */
static enum mk_status mk_gguf_read_all(struct mk_gguf *g, int fd, const struct stat *sb0,
                                       const struct mk_gguf_open_params *p, struct mk_error *err) {
    const char *path = g->path;
    const uint64_t size = g->size;
    g->map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        return mk_error_set(err, MK_ERR_NOMEM, "%s: cannot allocate %llu bytes to read it into: %s", path,
                            (unsigned long long)size, strerror(errno));
    }
    g->map_size = (size_t)size;
    const uint64_t chunk = p && p->chunk_bytes ? p->chunk_bytes : MK_GGUF_READ_CHUNK;
    uint64_t done = 0;
    while (done < size) {
        if (p && p->cancel && __atomic_load_n(p->cancel, __ATOMIC_RELAXED))
            return mk_error_set(err, MK_ERR_CANCELLED, "%s: loading cancelled after %llu of %llu bytes", path,
                                (unsigned long long)done, (unsigned long long)size);
        size_t want = (size_t)(size - done < chunk ? size - done : chunk);
        ssize_t n = pread(fd, (char *)g->map + done, want, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return mk_error_set(err, MK_ERR_IO, "%s: read failed at byte %llu: %s", path, (unsigned long long)done,
                                strerror(errno));
        if (n == 0)
            return mk_error_set(err, MK_ERR_IO,
                                "%s: the file ended at byte %llu of the %llu it had when opened (truncated while mk "
                                "read it?)",
                                path, (unsigned long long)done, (unsigned long long)size);
        done += (uint64_t)n;
        if (p && p->on_chunk) p->on_chunk(p->user, done, size);
    }
    struct stat sb1;
    if (fstat(fd, &sb1) != 0)
        return mk_error_set(err, MK_ERR_IO, "%s: cannot stat after reading: %s", path, strerror(errno));
    if ((uint64_t)sb1.st_size != size || sb1.st_mtim.tv_sec != sb0->st_mtim.tv_sec ||
        sb1.st_mtim.tv_nsec != sb0->st_mtim.tv_nsec)
        return mk_error_set(
            err, MK_ERR_IO,
            "%s: the file changed while mk read it (its size or modification time moved: %llu bytes when "
            "opened, %llu after reading)",
            path, (unsigned long long)size, (unsigned long long)sb1.st_size);
    mprotect(g->map, g->map_size, PROT_READ);
    g->base = g->map;
    return MK_OK;
}

enum mk_status mk_gguf_open(const char *path, struct mk_gguf **out, struct mk_error *err) {
    return mk_gguf_open_ex(path, NULL, out, err);
}

enum mk_status mk_gguf_open_ex(const char *path, const struct mk_gguf_open_params *p, struct mk_gguf **out,
                               struct mk_error *err) {
    *out = NULL;
    enum mk_status st;
    struct mk_gguf *g = mk_gguf_alloc(path);
    if (!g) return mk_error_set(err, MK_ERR_NOMEM, "%s: out of memory", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = mk_error_set(err, MK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = mk_error_set(err, MK_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = mk_error_set(err, MK_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    g->size = (uint64_t)sb.st_size;
    if (g->size > 0 && (st = mk_gguf_read_all(g, fd, &sb, p, err)) != MK_OK) goto fail;
    close(fd);
    fd = -1;
    if ((st = mk_gguf_parse(g, err)) != MK_OK) goto fail;
    *out = g;
    return MK_OK;
fail:
    if (fd >= 0) close(fd);
    mk_gguf_close(g);
    return st;
}

uint32_t mk_gguf_version(const struct mk_gguf *g) { return g->version; }
const char *mk_gguf_path(const struct mk_gguf *g) { return g->path; }
uint64_t mk_gguf_alignment(const struct mk_gguf *g) { return g->alignment; }
uint64_t mk_gguf_data_offset(const struct mk_gguf *g) { return g->data_offset; }
uint64_t mk_gguf_file_size(const struct mk_gguf *g) { return g->size; }
uint64_t mk_gguf_kv_count(const struct mk_gguf *g) { return g->n_kv; }
uint64_t mk_gguf_tensor_count(const struct mk_gguf *g) { return g->n_tensors; }

const struct mk_gguf_kv *mk_gguf_kv_at(const struct mk_gguf *g, uint64_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }

const struct mk_gguf_tensor *mk_gguf_tensor_at(const struct mk_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct mk_gguf_kv *mk_gguf_find_kv(const struct mk_gguf *g, const char *key) {
    uint64_t i = mk_gguf_index_find(&g->kv_index, g->kvs, sizeof *g->kvs, key, strlen(key));
    return i == UINT64_MAX ? NULL : &g->kvs[i];
}

const struct mk_gguf_tensor *mk_gguf_find_tensor(const struct mk_gguf *g, const char *name) {
    uint64_t i = mk_gguf_index_find(&g->tensor_index, g->tensors, sizeof *g->tensors, name, strlen(name));
    return i == UINT64_MAX ? NULL : &g->tensors[i];
}

/* ---- Typed getters ---- */

static enum mk_status mk_gguf_missing(const struct mk_gguf *g, const char *key, struct mk_error *err) {
    return mk_error_set(err, MK_ERR_FORMAT, "%s: key '%s' is missing", g->path, key);
}

static enum mk_status mk_gguf_wrong_type(const struct mk_gguf *g, const char *key, const struct mk_gguf_kv *kv,
                                         const char *need, struct mk_error *err) {
    char tbuf[64];
    return mk_error_set(err, MK_ERR_FORMAT, "%s: key '%s': type is %s, must be %s", g->path, key,
                        mk_gguf_describe_type(kv, tbuf, sizeof tbuf), need);
}

enum mk_status mk_gguf_get_u32_opt(const struct mk_gguf *g, const char *key, uint32_t *out, struct mk_error *err) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, key);
    if (!kv) return MK_OK;
    if (!mk_gguf_is_int(kv->type)) return mk_gguf_wrong_type(g, key, kv, "an integer", err);
    uint32_t v;
    if (!mk_gguf_int_to_u32(kv, &v)) {
        char vbuf[32];
        return mk_error_set(err, MK_ERR_FORMAT, "%s: key '%s': value %s (%s) does not fit in uint32", g->path, key,
                            mk_gguf_int_text(kv, vbuf, sizeof vbuf), mk_gguf_type_name(kv->type));
    }
    *out = v;
    return MK_OK;
}

enum mk_status mk_gguf_get_u32(const struct mk_gguf *g, const char *key, uint32_t *out, struct mk_error *err) {
    if (!mk_gguf_find_kv(g, key)) return mk_gguf_missing(g, key, err);
    return mk_gguf_get_u32_opt(g, key, out, err);
}

/* float64 values are accepted too and rounded; llama.cpp writes float32. */
enum mk_status mk_gguf_get_f32_opt(const struct mk_gguf *g, const char *key, float *out, struct mk_error *err) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, key);
    if (!kv) return MK_OK;
    if (kv->type != MK_GGUF_FLOAT32 && kv->type != MK_GGUF_FLOAT64)
        return mk_gguf_wrong_type(g, key, kv, "float32", err);
    *out = (float)kv->v.f64;
    return MK_OK;
}

enum mk_status mk_gguf_get_str_opt(const struct mk_gguf *g, const char *key, struct mk_gguf_str *out,
                                   struct mk_error *err) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, key);
    if (!kv) return MK_OK;
    if (kv->type != MK_GGUF_STRING) return mk_gguf_wrong_type(g, key, kv, "string", err);
    *out = kv->v.str;
    return MK_OK;
}

enum mk_status mk_gguf_get_str(const struct mk_gguf *g, const char *key, struct mk_gguf_str *out,
                               struct mk_error *err) {
    if (!mk_gguf_find_kv(g, key)) return mk_gguf_missing(g, key, err);
    return mk_gguf_get_str_opt(g, key, out, err);
}

/* ---- Writer ----
 * Metadata and tensor infos are kept in memory (they are small); the header is written at the
 * first write_data (or at finish when there is no data), then data streams through a large
 * stdio buffer. Errors are sticky: after one, every call returns it and finish reports it, so
 * streaming code may check only at the end. finish() and abort() both free the writer. */

struct mk_gguf_wtensor {
    char name[MK_GGUF_MAX_NAME + 1];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[MK_GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset; /* relative to the data section */
};

struct mk_gguf_writer {
    FILE *f;
    char *path;
    char *iobuf;       /* (MK_GGUF_WRITER_BUF) stdio buffer */
    uint8_t *kv_bytes; /* (kv_len) serialized KV section */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;                     /* (n_kv) copies, for duplicate checks */
    char *arch;                      /* general.architecture once written, for key rules */
    struct mk_gguf_wtensor *tensors; /* (n_tensors) */
    uint64_t n_tensors, tensors_cap;
    uint64_t alignment;
    uint64_t data_size; /* padded size of the data section so far */
    bool header_done;
    uint64_t cur;        /* tensor receiving data */
    uint64_t cur_done;   /* its bytes written so far */
    struct mk_error err; /* sticky */
};

#define MK_GGUF_WRITER_BUF (4u << 20)

static enum mk_status mk_gguf_wfail(struct mk_gguf_writer *w, enum mk_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum mk_status mk_gguf_wfail(struct mk_gguf_writer *w, enum mk_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mk_error_set(&w->err, st, "%s: %s", w->path, msg);
}

enum mk_status mk_gguf_writer_create(const char *path, struct mk_gguf_writer **out, struct mk_error *err) {
    *out = NULL;
    struct mk_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return mk_error_set(err, MK_ERR_NOMEM, "%s: out of memory", path);
    w->alignment = MK_GGUF_DEFAULT_ALIGNMENT;
    w->path = strdup(path);
    w->iobuf = malloc(MK_GGUF_WRITER_BUF);
    if (!w->path || !w->iobuf) {
        free(w->path);
        free(w->iobuf);
        free(w);
        return mk_error_set(err, MK_ERR_NOMEM, "%s: out of memory", path);
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        enum mk_status st = mk_error_set(err, MK_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(w->path);
        free(w->iobuf);
        free(w);
        return st;
    }
    setvbuf(w->f, w->iobuf, _IOFBF, MK_GGUF_WRITER_BUF);
    mk_error_clear(&w->err);
    *out = w;
    return MK_OK;
}

static bool mk_gguf_wput(struct mk_gguf_writer *w, const void *src, size_t n) {
    if (n > SIZE_MAX / 2 - w->kv_len) return false;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv_bytes, cap);
        if (!nb) return false;
        w->kv_bytes = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv_bytes + w->kv_len, src, n);
    w->kv_len += n;
    return true;
}

static bool mk_gguf_wput_u32(struct mk_gguf_writer *w, uint32_t v) { return mk_gguf_wput(w, &v, 4); }
static bool mk_gguf_wput_u64(struct mk_gguf_writer *w, uint64_t v) { return mk_gguf_wput(w, &v, 8); }

static bool mk_gguf_wput_str(struct mk_gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    return mk_gguf_wput_u64(w, n) && mk_gguf_wput(w, s, n);
}

/* Checks and records a key; kv carries the type (and value) the rules look at. Serializes
 * the key and the value type. */
static enum mk_status mk_gguf_wkey(struct mk_gguf_writer *w, const char *key, const struct mk_gguf_kv *kv) {
    if (w->err.status != MK_OK) return w->err.status;
    char shown[300], why[256];
    if (!key) return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "NULL key");
    size_t len = strlen(key);
    mk_gguf_show(shown, sizeof shown, key, len);
    if (!mk_gguf_check_name(key, len, false, why, sizeof why))
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': %s", shown, why);
    if (w->n_tensors > 0 || w->header_done)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s' added after the first tensor", shown);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "duplicate key '%s'", shown);
    struct mk_gguf_kv probe = *kv;
    probe.key = (struct mk_gguf_str){ len, key };
    struct mk_gguf_str arch = { w->arch ? strlen(w->arch) : 0, w->arch ? w->arch : "" };
    if (!mk_gguf_check_rule(&probe, arch, why, sizeof why))
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': %s", shown, why);
    if (strcmp(key, "general.alignment") == 0) {
        if (!mk_gguf_check_alignment(probe.v.u64, why, sizeof why))
            return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': %s", shown, why);
        w->alignment = probe.v.u64;
    }
    if (strcmp(key, "general.architecture") == 0 && kv->type == MK_GGUF_STRING) {
        free(w->arch);
        if (!(w->arch = strdup(kv->v.str.data))) return mk_gguf_wfail(w, MK_ERR_NOMEM, "out of memory");
    }
    if (w->n_kv % 64 == 0) {
        char **nk = realloc(w->keys, (w->n_kv + 64) * sizeof *nk);
        if (!nk) return mk_gguf_wfail(w, MK_ERR_NOMEM, "out of memory");
        w->keys = nk;
    }
    if (!(w->keys[w->n_kv] = strdup(key))) return mk_gguf_wfail(w, MK_ERR_NOMEM, "out of memory");
    w->n_kv++;
    if (!mk_gguf_wput_str(w, key) || !mk_gguf_wput_u32(w, (uint32_t)kv->type))
        return mk_gguf_wfail(w, MK_ERR_NOMEM, "out of memory");
    return MK_OK;
}

static enum mk_status mk_gguf_wdone(struct mk_gguf_writer *w, bool ok) {
    return ok ? MK_OK : mk_gguf_wfail(w, MK_ERR_NOMEM, "out of memory");
}

enum mk_status mk_gguf_writer_kv_u32(struct mk_gguf_writer *w, const char *key, uint32_t v) {
    struct mk_gguf_kv kv = { .type = MK_GGUF_UINT32, .v.u64 = v };
    enum mk_status st = mk_gguf_wkey(w, key, &kv);
    return st != MK_OK ? st : mk_gguf_wdone(w, mk_gguf_wput_u32(w, v));
}

enum mk_status mk_gguf_writer_kv_i32(struct mk_gguf_writer *w, const char *key, int32_t v) {
    struct mk_gguf_kv kv = { .type = MK_GGUF_INT32, .v.i64 = v };
    enum mk_status st = mk_gguf_wkey(w, key, &kv);
    return st != MK_OK ? st : mk_gguf_wdone(w, mk_gguf_wput(w, &v, 4));
}

enum mk_status mk_gguf_writer_kv_f32(struct mk_gguf_writer *w, const char *key, float v) {
    struct mk_gguf_kv kv = { .type = MK_GGUF_FLOAT32, .v.f64 = v };
    enum mk_status st = mk_gguf_wkey(w, key, &kv);
    return st != MK_OK ? st : mk_gguf_wdone(w, mk_gguf_wput(w, &v, 4));
}

enum mk_status mk_gguf_writer_kv_bool(struct mk_gguf_writer *w, const char *key, bool v) {
    struct mk_gguf_kv kv = { .type = MK_GGUF_BOOL, .v.u64 = v };
    uint8_t b = v ? 1 : 0;
    enum mk_status st = mk_gguf_wkey(w, key, &kv);
    return st != MK_OK ? st : mk_gguf_wdone(w, mk_gguf_wput(w, &b, 1));
}

enum mk_status mk_gguf_writer_kv_str(struct mk_gguf_writer *w, const char *key, const char *v) {
    if (w->err.status == MK_OK && !v)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': NULL string", key ? key : "(null)");
    struct mk_gguf_kv kv = { .type = MK_GGUF_STRING, .v.str = { v ? strlen(v) : 0, v } };
    enum mk_status st = mk_gguf_wkey(w, key, &kv);
    return st != MK_OK ? st : mk_gguf_wdone(w, mk_gguf_wput_str(w, v));
}

static enum mk_status mk_gguf_wkey_arr(struct mk_gguf_writer *w, const char *key, enum mk_gguf_type et, const void *v,
                                       uint64_t n) {
    if (w->err.status == MK_OK && !v && n > 0)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': NULL array of %llu elements", key ? key : "(null)",
                             (unsigned long long)n);
    struct mk_gguf_kv kv = { .type = MK_GGUF_ARRAY, .v.arr = { et, n, v, NULL } };
    enum mk_status st = mk_gguf_wkey(w, key, &kv);
    if (st != MK_OK) return st;
    return mk_gguf_wdone(w, mk_gguf_wput_u32(w, (uint32_t)et) && mk_gguf_wput_u64(w, n));
}

enum mk_status mk_gguf_writer_kv_arr_str(struct mk_gguf_writer *w, const char *key, const char *const *strs,
                                         uint64_t n) {
    enum mk_status st = mk_gguf_wkey_arr(w, key, MK_GGUF_STRING, strs, n);
    for (uint64_t i = 0; st == MK_OK && i < n; i++) {
        if (!strs[i])
            return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': element %llu is NULL", key, (unsigned long long)i);
        st = mk_gguf_wdone(w, mk_gguf_wput_str(w, strs[i]));
    }
    return st;
}

enum mk_status mk_gguf_writer_kv_arr_f32(struct mk_gguf_writer *w, const char *key, const float *v, uint64_t n) {
    enum mk_status st = mk_gguf_wkey_arr(w, key, MK_GGUF_FLOAT32, v, n);
    if (st == MK_OK && n > (SIZE_MAX >> 3))
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': array length %llu is too large", key,
                             (unsigned long long)n);
    return st != MK_OK ? st : mk_gguf_wdone(w, n == 0 || mk_gguf_wput(w, v, (size_t)n * 4));
}

enum mk_status mk_gguf_writer_kv_arr_i32(struct mk_gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    enum mk_status st = mk_gguf_wkey_arr(w, key, MK_GGUF_INT32, v, n);
    if (st == MK_OK && n > (SIZE_MAX >> 3))
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "key '%s': array length %llu is too large", key,
                             (unsigned long long)n);
    return st != MK_OK ? st : mk_gguf_wdone(w, n == 0 || mk_gguf_wput(w, v, (size_t)n * 4));
}

enum mk_status mk_gguf_writer_add_tensor(struct mk_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                         const uint64_t *ne) {
    if (w->err.status != MK_OK) return w->err.status;
    if (!name || !ne) return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "add_tensor: NULL name or shape");
    char shown[300], why[256];
    size_t len = strlen(name);
    mk_gguf_show(shown, sizeof shown, name, len);
    if (!mk_gguf_check_name(name, len, true, why, sizeof why))
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "tensor '%s': %s", shown, why);
    if (w->header_done)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "tensor '%s' declared after tensor data began", shown);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "duplicate tensor name '%s'", shown);
    if (n_dims < 1 || n_dims > MK_GGUF_MAX_DIMS)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "tensor '%s': n_dims = %u (must be 1..%d)", shown, n_dims,
                             MK_GGUF_MAX_DIMS);
    struct mk_gguf_wtensor t = { .type = type, .n_dims = n_dims };
    memcpy(t.name, name, len + 1);
    for (uint32_t d = 0; d < MK_GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    uint64_t n_el;
    enum mk_status st = mk_gguf_tensor_shape(type, n_dims, t.ne, &n_el, &t.n_bytes, why, sizeof why);
    if (st != MK_OK)
        return mk_gguf_wfail(w, st == MK_ERR_FORMAT ? MK_ERR_INVALID_ARG : st, "tensor '%s': %s", shown, why);
    uint64_t padded = t.n_bytes + (w->alignment - t.n_bytes % w->alignment) % w->alignment;
    t.offset = w->data_size;
    if (__builtin_add_overflow(w->data_size, padded, &w->data_size) || w->data_size > (uint64_t)INT64_MAX)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "tensor '%s': data section size overflows", shown);
    if (w->n_tensors == w->tensors_cap) {
        uint64_t cap = w->tensors_cap ? w->tensors_cap * 2 : 64;
        struct mk_gguf_wtensor *nt = realloc(w->tensors, cap * sizeof *nt);
        if (!nt) return mk_gguf_wfail(w, MK_ERR_NOMEM, "out of memory");
        w->tensors = nt;
        w->tensors_cap = cap;
    }
    w->tensors[w->n_tensors++] = t;
    return MK_OK;
}

static enum mk_status mk_gguf_wfile(struct mk_gguf_writer *w, const void *p, size_t n) {
    if (n > 0 && fwrite(p, 1, n, w->f) != n) return mk_gguf_wfail(w, MK_ERR_IO, "write failed: %s", strerror(errno));
    return MK_OK;
}

static enum mk_status mk_gguf_wpad(struct mk_gguf_writer *w, uint64_t written) {
    static const uint8_t zeros[4096];
    uint64_t pad = (w->alignment - written % w->alignment) % w->alignment;
    enum mk_status st = MK_OK;
    while (st == MK_OK && pad > 0) {
        size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        st = mk_gguf_wfile(w, zeros, n);
        pad -= n;
    }
    return st;
}

static enum mk_status mk_gguf_wheader(struct mk_gguf_writer *w) {
    uint32_t version = 3;
    uint64_t written = 0;
    enum mk_status st = mk_gguf_wfile(w, "GGUF", 4);
    if (st == MK_OK) st = mk_gguf_wfile(w, &version, 4);
    if (st == MK_OK) st = mk_gguf_wfile(w, &w->n_tensors, 8);
    if (st == MK_OK) st = mk_gguf_wfile(w, &w->n_kv, 8);
    if (st == MK_OK) st = mk_gguf_wfile(w, w->kv_bytes, w->kv_len);
    written = MK_GGUF_HEADER_BYTES + w->kv_len;
    for (uint64_t i = 0; st == MK_OK && i < w->n_tensors; i++) {
        const struct mk_gguf_wtensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        st = mk_gguf_wfile(w, &len, 8);
        if (st == MK_OK) st = mk_gguf_wfile(w, t->name, len);
        if (st == MK_OK) st = mk_gguf_wfile(w, &t->n_dims, 4);
        if (st == MK_OK) st = mk_gguf_wfile(w, t->ne, 8 * (size_t)t->n_dims);
        if (st == MK_OK) st = mk_gguf_wfile(w, &t->type, 4);
        if (st == MK_OK) st = mk_gguf_wfile(w, &t->offset, 8);
        written += 8 + len + 4 + 8 * t->n_dims + 4 + 8;
    }
    /* The data section is aligned; a file without tensors has none and ends here, as gguf-py's
     * vocab files do. */
    if (st == MK_OK && w->n_tensors > 0) st = mk_gguf_wpad(w, written);
    w->header_done = true;
    return st;
}

enum mk_status mk_gguf_writer_write_data(struct mk_gguf_writer *w, const void *data, size_t n) {
    if (w->err.status != MK_OK) return w->err.status;
    enum mk_status st;
    if (!w->header_done && (st = mk_gguf_wheader(w)) != MK_OK) return st;
    if (n == 0) return MK_OK;
    if (w->cur >= w->n_tensors)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG, "write of %zu bytes after the last tensor's data", n);
    struct mk_gguf_wtensor *t = &w->tensors[w->cur];
    /* A write never spans two tensors: a size mistake in the caller shows up here instead of
     * shifting every later tensor. */
    if (n > t->n_bytes - w->cur_done)
        return mk_gguf_wfail(w, MK_ERR_INVALID_ARG,
                             "tensor '%s': write of %zu bytes exceeds the %llu bytes it still needs", t->name, n,
                             (unsigned long long)(t->n_bytes - w->cur_done));
    if ((st = mk_gguf_wfile(w, data, n)) != MK_OK) return st;
    w->cur_done += n;
    if (w->cur_done == t->n_bytes) {
        if ((st = mk_gguf_wpad(w, t->n_bytes)) != MK_OK) return st;
        w->cur++;
        w->cur_done = 0;
    }
    return MK_OK;
}

static void mk_gguf_writer_free(struct mk_gguf_writer *w) {
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    free(w->arch);
    free(w->kv_bytes);
    free(w->tensors);
    free(w->iobuf);
    free(w->path);
    free(w);
}

void mk_gguf_writer_abort(struct mk_gguf_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->path);
    mk_gguf_writer_free(w);
}

enum mk_status mk_gguf_writer_finish(struct mk_gguf_writer *w, struct mk_error *err) {
    enum mk_status st = w->err.status;
    if (st == MK_OK && !w->header_done) st = mk_gguf_wheader(w);
    if (st == MK_OK && w->cur < w->n_tensors) {
        const struct mk_gguf_wtensor *t = &w->tensors[w->cur];
        st = mk_gguf_wfail(w, MK_ERR_INVALID_ARG,
                           "tensor '%s' got %llu of its %llu bytes (%llu of %llu tensors complete)", t->name,
                           (unsigned long long)w->cur_done, (unsigned long long)t->n_bytes, (unsigned long long)w->cur,
                           (unsigned long long)w->n_tensors);
    }
    if (st == MK_OK) {
        FILE *f = w->f;
        w->f = NULL;
        if (fclose(f) != 0) st = mk_gguf_wfail(w, MK_ERR_IO, "close failed: %s", strerror(errno));
    }
    if (st != MK_OK) {
        if (err) *err = w->err;
        mk_gguf_writer_abort(w);
        return st;
    }
    mk_gguf_writer_free(w);
    return MK_OK;
}

const struct mk_error *mk_gguf_writer_error(const struct mk_gguf_writer *w) { return &w->err; }
