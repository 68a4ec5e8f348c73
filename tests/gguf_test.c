/* GGUF reader/writer tests: hostile files built in memory, truncation and corruption sweeps,
 * writer round trips, and byte-identical rewrites of the real model files. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/status.h"
#include "tests/test_util.h"

static int g_hostile_cases;

/* ---- A small in-memory GGUF builder ---- */

struct buf {
    uint8_t *d;
    size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->d = realloc(b->d, cap);
        MK_ASSERT(b->d);
        b->cap = cap;
    }
    if (n) memcpy(b->d + b->n, p, n);
    b->n += n;
}

static void put_u8(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(struct buf *b, float v) { put(b, &v, 4); }
static void put_zeros(struct buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) put_u8(b, 0);
}

static void put_strn(struct buf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

static void put_str(struct buf *b, const char *s) { put_strn(b, s, strlen(s)); }

static void put_hdr(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static void put_key(struct buf *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
}

static void kv_u32(struct buf *b, const char *key, uint32_t v) {
    put_key(b, key, MK_GGUF_UINT32);
    put_u32(b, v);
}
static void kv_i32(struct buf *b, const char *key, int32_t v) {
    put_key(b, key, MK_GGUF_INT32);
    put(b, &v, 4);
}
static void kv_u64(struct buf *b, const char *key, uint64_t v) {
    put_key(b, key, MK_GGUF_UINT64);
    put_u64(b, v);
}
static void kv_f32(struct buf *b, const char *key, float v) {
    put_key(b, key, MK_GGUF_FLOAT32);
    put_f32(b, v);
}
static void kv_f64(struct buf *b, const char *key, double v) {
    put_key(b, key, MK_GGUF_FLOAT64);
    put(b, &v, 8);
}
static void kv_str(struct buf *b, const char *key, const char *v) {
    put_key(b, key, MK_GGUF_STRING);
    put_str(b, v);
}

static void kv_arr(struct buf *b, const char *key, uint32_t elem_type, uint64_t n) {
    put_key(b, key, MK_GGUF_ARRAY);
    put_u32(b, elem_type);
    put_u64(b, n);
}

static void kv_arr_str(struct buf *b, const char *key, uint64_t n) {
    kv_arr(b, key, MK_GGUF_STRING, n);
    for (uint64_t i = 0; i < n; i++) {
        char s[32];
        snprintf(s, sizeof s, "tok%llu", (unsigned long long)i);
        put_str(b, s);
    }
}

static void kv_arr_f32(struct buf *b, const char *key, uint64_t n) {
    kv_arr(b, key, MK_GGUF_FLOAT32, n);
    for (uint64_t i = 0; i < n; i++) put_f32(b, -(float)i);
}

static void kv_arr_i32(struct buf *b, const char *key, uint64_t n) {
    kv_arr(b, key, MK_GGUF_INT32, n);
    for (uint64_t i = 0; i < n; i++) put_u32(b, 1);
}

static void put_tinfo(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, offset);
}

static void put_pad(struct buf *b, size_t align) {
    while (b->n % align) put_u8(b, 0);
}

static void put_data(struct buf *b, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) put_u8(b, (uint8_t)(seed + i * 7));
}

/* One tensor, no KVs, data_bytes of data after the aligned header. */
static void one_tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset, size_t data_bytes) {
    put_hdr(b, 3, 1, 0);
    put_tinfo(b, name, n_dims, ne, type, offset);
    put_pad(b, 32);
    put_data(b, data_bytes, 1);
}

/* A valid file touching every value type, string arrays, three tensor types and alignment
 * padding. The last tensor ends the file, so every strict prefix is invalid. */
#define VALID_KVS     19
#define VALID_TENSORS 3
static void build_valid(struct buf *b, uint32_t version) {
    put_hdr(b, version, VALID_TENSORS, VALID_KVS);
    kv_str(b, "general.architecture", "llama");
    kv_str(b, "general.name", "tiny");
    kv_u32(b, "llama.context_length", 128);
    kv_f32(b, "llama.rope.freq_base", 10000.0f);
    kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_arr(b, "tokenizer.ggml.tokens", MK_GGUF_STRING, 3);
    put_str(b, "<s>");
    put_str(b, "");
    put_str(b, "hello");
    kv_arr_f32(b, "tokenizer.ggml.scores", 3);
    kv_arr_i32(b, "tokenizer.ggml.token_type", 3);
    put_key(b, "x.u8", MK_GGUF_UINT8);
    put_u8(b, 200);
    put_key(b, "x.i8", MK_GGUF_INT8);
    put_u8(b, 0x80);
    put_key(b, "x.u16", MK_GGUF_UINT16);
    put_u8(b, 0x34);
    put_u8(b, 0x12);
    put_key(b, "x.i16", MK_GGUF_INT16);
    put_u8(b, 0xfe);
    put_u8(b, 0xff);
    kv_u64(b, "x.u64", 1ull << 40);
    put_key(b, "x.i64", MK_GGUF_INT64);
    put_u64(b, (uint64_t)-5);
    kv_f64(b, "x.f64", 2.5);
    put_key(b, "x.bool", MK_GGUF_BOOL);
    put_u8(b, 1);
    kv_arr(b, "x.bools", MK_GGUF_BOOL, 2);
    put_u8(b, 0);
    put_u8(b, 1);
    kv_arr(b, "x.empty", MK_GGUF_STRING, 0);
    uint64_t ne_a[2] = { 4, 2 }, ne_b[1] = { 8 }, ne_c[2] = { 32, 2 };
    put_tinfo(b, "a", 2, ne_a, MK_DTYPE_F32, 0);   /* 32 bytes */
    put_tinfo(b, "b", 1, ne_b, MK_DTYPE_F16, 32);  /* 16 bytes, padded to 32 */
    put_tinfo(b, "c", 2, ne_c, MK_DTYPE_Q8_0, 64); /* 68 bytes */
    put_pad(b, 32);
    put_data(b, 32, 10);
    put_data(b, 16, 20);
    put_zeros(b, 16);
    put_data(b, 68, 30);
}

/* ---- Expectation helpers ---- */

#define HOSTILE_NAME "hostile.gguf"

/* Parses an exact-size copy (so the sanitizers see any overread) and checks the status and
 * that the message names the file and contains each of the given pieces. */
static void expect_fail_at(const char *label, int line, const struct buf *b, enum mk_status want, const char *s1,
                           const char *s2) {
    g_hostile_cases++;
    uint8_t *copy = malloc(b->n ? b->n : 1);
    MK_ASSERT(copy);
    memcpy(copy, b->d, b->n);
    struct mk_gguf *g = (struct mk_gguf *)1;
    struct mk_error err;
    mk_error_clear(&err);
    enum mk_status st = mk_gguf_open_memory(copy, b->n, HOSTILE_NAME, &g, &err);
    bool ok = st == want && g == NULL && err.status == want && strstr(err.msg, HOSTILE_NAME) == err.msg &&
              (!s1 || strstr(err.msg, s1)) && (!s2 || strstr(err.msg, s2));
    if (!ok) {
        mk_test_fail("line %d: hostile case '%s': got status %d (%s), want %d; message: %s\n  want pieces: '%s' '%s'",
                     line, label, st, mk_status_str(st), want, err.msg, s1 ? s1 : "", s2 ? s2 : "");
    }
    if (st == MK_OK && g) mk_gguf_close(g);
    free(copy);
}

#define EXPECT_FAIL(label, b, want, s1, s2) expect_fail_at(label, __LINE__, b, want, s1, s2)

static struct mk_gguf *open_ok(const struct buf *b) {
    struct mk_gguf *g = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    enum mk_status st = mk_gguf_open_memory(b->d, b->n, "valid.gguf", &g, &err);
    if (st != MK_OK) {
        mk_test_fail("unexpected failure: %s", err.msg);
        return NULL;
    }
    return g;
}

static void tmp_path(char *out, size_t cap, const char *what) {
    snprintf(out, cap, "%s/mk_gguf_test_%d_%s", mk_test_tmp_base(), (int)getpid(), what);
}

static void write_file(const char *path, const struct buf *b) {
    FILE *f = fopen(path, "wb");
    MK_ASSERT(f);
    MK_ASSERT(b->n == 0 || fwrite(b->d, 1, b->n, f) == b->n);
    MK_ASSERT(fclose(f) == 0);
}

static void reset(struct buf *b) { b->n = 0; }

/* ---- Hostile cases: one per malformation ---- */

static void test_header_cases(void) {
    struct buf b = { 0 };

    put(&b, "GGML", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 0);
    EXPECT_FAIL("bad magic", &b, MK_ERR_FORMAT, "magic", "GGML");
    reset(&b);
    put(&b, "\x1b[2J", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 0);
    EXPECT_FAIL("magic with escape bytes is shown escaped", &b, MK_ERR_FORMAT, "magic", "\\x1b[2J");
    reset(&b);
    put_hdr(&b, 1, 0, 0);
    EXPECT_FAIL("version 1", &b, MK_ERR_UNSUPPORTED, "version = 1", "v1");
    reset(&b);
    put_hdr(&b, 0, 0, 0);
    EXPECT_FAIL("version 0", &b, MK_ERR_FORMAT, "version = 0", NULL);
    reset(&b);
    put_hdr(&b, 4, 0, 0);
    EXPECT_FAIL("version 4", &b, MK_ERR_FORMAT, "version = 4", NULL);
    reset(&b);
    put_hdr(&b, 0x03000000u, 0, 0);
    EXPECT_FAIL("big-endian version", &b, MK_ERR_UNSUPPORTED, "version = 0x03000000", "big-endian");
    reset(&b);
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u8(&b, 0);
    put_u8(&b, 0);
    EXPECT_FAIL("file shorter than the header", &b, MK_ERR_FORMAT, "file size = 10", "header");
    reset(&b);
    EXPECT_FAIL("empty buffer", &b, MK_ERR_FORMAT, "file size = 0", NULL);

    put_hdr(&b, 3, 0, 1ull << 60);
    kv_u32(&b, "a", 1);
    EXPECT_FAIL("kv_count huge, tiny file", &b, MK_ERR_FORMAT, "kv_count = 1152921504606846976", NULL);
    reset(&b);
    put_hdr(&b, 3, 1ull << 63, 0);
    put_zeros(&b, 64);
    EXPECT_FAIL("tensor_count 2^63", &b, MK_ERR_FORMAT, "tensor_count = 9223372036854775808", NULL);
    reset(&b);
    put_hdr(&b, 3, 1000, 0);
    put_zeros(&b, 32000);
    EXPECT_FAIL("tensor_count fits the cap but not the file", &b, MK_ERR_FORMAT, "tensor_count = 1000", "cannot fit");
    reset(&b);
    put_hdr(&b, 3, 0, 1000);
    put_zeros(&b, 13000);
    EXPECT_FAIL("kv_count fits the cap but not the file", &b, MK_ERR_FORMAT, "kv_count = 1000", "cannot fit");
    reset(&b);
    put_hdr(&b, 3, UINT64_MAX, UINT64_MAX);
    EXPECT_FAIL("both counts UINT64_MAX", &b, MK_ERR_FORMAT, "kv_count = 18446744073709551615", NULL);
    reset(&b);
    /* 100 bytes after the header: 7 KVs may fit (98 bytes), then no tensor info can. */
    put_hdr(&b, 3, 1, 7);
    put_zeros(&b, 100);
    EXPECT_FAIL("tensor_count fits alone but not after the KVs", &b, MK_ERR_FORMAT, "tensor_count = 1", "7 KVs");
    free(b.d);
}

static void test_string_cases(void) {
    struct buf b = { 0 };

    put_hdr(&b, 3, 0, 1);
    put_u64(&b, 1ull << 63);
    put_zeros(&b, 16);
    EXPECT_FAIL("key length 2^63", &b, MK_ERR_FORMAT, "key length = 9223372036854775808", "1 GiB");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_u64(&b, 1000);
    put(&b, "abcdefgh", 8);
    EXPECT_FAIL("key length past the end", &b, MK_ERR_FORMAT, "key length = 1000", "past the end");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "", MK_GGUF_UINT8);
    put_u8(&b, 1);
    put_zeros(&b, 8);
    EXPECT_FAIL("empty key", &b, MK_ERR_FORMAT, "kv 0", "key name is empty");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_strn(&b, "gen\0eral", 8);
    put_u32(&b, MK_GGUF_UINT8);
    put_u8(&b, 1);
    EXPECT_FAIL("key with a NUL byte", &b, MK_ERR_FORMAT, "kv 0", "NUL");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "general.name", MK_GGUF_STRING);
    put_u64(&b, 500);
    put(&b, "short", 5);
    EXPECT_FAIL("string value past the end", &b, MK_ERR_FORMAT, "string value length = 500", "general.name");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "general.name", MK_GGUF_STRING);
    put_u64(&b, 1ull << 31);
    put_zeros(&b, 8);
    EXPECT_FAIL("string value over 1 GiB", &b, MK_ERR_FORMAT, "string value length = 2147483648", "1 GiB");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "general.name", MK_GGUF_STRING);
    put_u64(&b, UINT64_MAX);
    EXPECT_FAIL("string length UINT64_MAX", &b, MK_ERR_FORMAT, "string value length = 18446744073709551615", NULL);
    free(b.d);
}

static void test_value_cases(void) {
    struct buf b = { 0 };

    put_hdr(&b, 3, 0, 1);
    put_key(&b, "x", 13);
    put_u64(&b, 0);
    EXPECT_FAIL("unknown value type 13", &b, MK_ERR_FORMAT, "value type = 13", "key 'x'");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "x", UINT32_MAX);
    put_u64(&b, 0);
    EXPECT_FAIL("value type 0xffffffff", &b, MK_ERR_FORMAT, "value type = 4294967295", NULL);
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "x", MK_GGUF_UINT32);
    put_u8(&b, 1);
    put_u8(&b, 2);
    EXPECT_FAIL("truncated scalar", &b, MK_ERR_FORMAT, "uint32 value needs 4 bytes", "only 2 remain");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    put_key(&b, "x.flag", MK_GGUF_BOOL);
    put_u8(&b, 2);
    EXPECT_FAIL("bool value 2", &b, MK_ERR_FORMAT, "bool value = 2", "x.flag");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.flags", MK_GGUF_BOOL, 3);
    put_u8(&b, 1);
    put_u8(&b, 0);
    put_u8(&b, 5);
    EXPECT_FAIL("bool array element 5", &b, MK_ERR_FORMAT, "element 2: bool value = 5", NULL);
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.arr", 77, 1);
    put_u32(&b, 0);
    EXPECT_FAIL("array element type unknown", &b, MK_ERR_FORMAT, "array element type = 77", "x.arr");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.nested", MK_GGUF_ARRAY, 1);
    put_u32(&b, MK_GGUF_UINT8);
    put_u64(&b, 1);
    put_u8(&b, 0);
    EXPECT_FAIL("nested array", &b, MK_ERR_FORMAT, "array element type = 9", "array of arrays");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.arr", MK_GGUF_UINT32, 1000);
    put_u32(&b, 7);
    EXPECT_FAIL("numeric array past the end", &b, MK_ERR_FORMAT, "array length = 1000", "past the end");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.arr", MK_GGUF_FLOAT32, 1ull << 62);
    put_u32(&b, 7);
    EXPECT_FAIL("array count * elem size overflows", &b, MK_ERR_FORMAT, "array length = 4611686018427387904", "1 GiB");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.arr", MK_GGUF_UINT8, (1ull << 30) + 1);
    put_u32(&b, 7);
    EXPECT_FAIL("array over 1 GiB", &b, MK_ERR_FORMAT, "array length = 1073741825", "1 GiB");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.arr", MK_GGUF_FLOAT64, UINT64_MAX);
    EXPECT_FAIL("array count UINT64_MAX", &b, MK_ERR_FORMAT, "array length = 18446744073709551615", NULL);
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.strs", MK_GGUF_STRING, 1000);
    put_str(&b, "a");
    EXPECT_FAIL("string array count past the end", &b, MK_ERR_FORMAT, "array length = 1000", "cannot fit");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.strs", MK_GGUF_STRING, 1ull << 40);
    put_str(&b, "a");
    EXPECT_FAIL("string array count over the limit", &b, MK_ERR_FORMAT, "array length = 1099511627776", "limit");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr(&b, "x.strs", MK_GGUF_STRING, 3);
    put_str(&b, "a");
    put_u64(&b, 999);
    put(&b, "bcdefghijklmnopq", 16);
    EXPECT_FAIL("string array element past the end", &b, MK_ERR_FORMAT, "element 1 length = 999", "x.strs");
    reset(&b);
    put_hdr(&b, 3, 0, 2);
    kv_u32(&b, "x.dup", 1);
    kv_str(&b, "x.dup", "again");
    EXPECT_FAIL("duplicate key", &b, MK_ERR_FORMAT, "key 'x.dup'", "duplicate key (kv 0 and kv 1)");
    free(b.d);
}

/* A single KV that breaks the type rule of a known key. */
static void known_key_case(const char *label, int line, void (*emit)(struct buf *), const char *s1, const char *s2) {
    struct buf b = { 0 };
    put_hdr(&b, 3, 0, 2);
    kv_str(&b, "general.architecture", "llama");
    emit(&b);
    expect_fail_at(label, line, &b, MK_ERR_FORMAT, s1, s2);
    free(b.d);
}

static void e_arch_u32(struct buf *b) { kv_u32(b, "general.name", 7); }
static void e_align_str(struct buf *b) { kv_str(b, "general.alignment", "32"); }
static void e_align_0(struct buf *b) { kv_u32(b, "general.alignment", 0); }
static void e_align_48(struct buf *b) { kv_u32(b, "general.alignment", 48); }
static void e_align_2m(struct buf *b) { kv_u32(b, "general.alignment", 1u << 21); }
static void e_align_neg(struct buf *b) { kv_i32(b, "general.alignment", -32); }
static void e_align_big(struct buf *b) { kv_u64(b, "general.alignment", (1ull << 32) + 32); }
static void e_align_f32(struct buf *b) { kv_f32(b, "general.alignment", 32.0f); }
static void e_model_arr(struct buf *b) { kv_arr_str(b, "tokenizer.ggml.model", 1); }
static void e_tokens_i32(struct buf *b) { kv_arr_i32(b, "tokenizer.ggml.tokens", 2); }
static void e_tokens_str(struct buf *b) { kv_str(b, "tokenizer.ggml.tokens", "abc"); }
static void e_scores_f64(struct buf *b) {
    kv_arr(b, "tokenizer.ggml.scores", MK_GGUF_FLOAT64, 1);
    put_u64(b, 0);
}
static void e_scores_f32(struct buf *b) { kv_f32(b, "tokenizer.ggml.scores", 1.0f); }
static void e_ttype_u32(struct buf *b) {
    kv_arr(b, "tokenizer.ggml.token_type", MK_GGUF_UINT32, 1);
    put_u32(b, 1);
}
static void e_merges_i32(struct buf *b) { kv_arr_i32(b, "tokenizer.ggml.merges", 1); }
static void e_bos_str(struct buf *b) { kv_str(b, "tokenizer.ggml.bos_token_id", "1"); }
static void e_eos_f32(struct buf *b) { kv_f32(b, "tokenizer.ggml.eos_token_id", 2.0f); }
static void e_unk_neg(struct buf *b) { kv_i32(b, "tokenizer.ggml.unknown_token_id", -1); }
static void e_pad_big(struct buf *b) { kv_u64(b, "tokenizer.ggml.padding_token_id", 1ull << 40); }
static void e_ctx_f32(struct buf *b) { kv_f32(b, "llama.context_length", 2048.0f); }
static void e_blocks_str(struct buf *b) { kv_str(b, "llama.block_count", "5"); }
static void e_embd_bool(struct buf *b) {
    put_key(b, "llama.embedding_length", MK_GGUF_BOOL);
    put_u8(b, 1);
}
static void e_ff_f64(struct buf *b) { kv_f64(b, "llama.feed_forward_length", 172.0); }
static void e_heads_arr(struct buf *b) { kv_arr_i32(b, "llama.attention.head_count", 2); }
static void e_kvheads_neg(struct buf *b) { kv_i32(b, "llama.attention.head_count_kv", -4); }
static void e_rope_dim_str(struct buf *b) { kv_str(b, "llama.rope.dimension_count", "8"); }
static void e_theta_u32(struct buf *b) { kv_u32(b, "llama.rope.freq_base", 10000); }
static void e_eps_f64(struct buf *b) { kv_f64(b, "llama.attention.layer_norm_rms_epsilon", 1e-5); }
static void e_eps_nan(struct buf *b) { kv_f32(b, "llama.attention.layer_norm_rms_epsilon", NAN); }
static void e_theta_inf(struct buf *b) { kv_f32(b, "llama.rope.freq_base", INFINITY); }
static void e_add_bos_u8(struct buf *b) {
    put_key(b, "tokenizer.ggml.add_bos_token", MK_GGUF_UINT8);
    put_u8(b, 1);
}

#define KNOWN(label, fn, s1, s2) known_key_case(label, __LINE__, fn, s1, s2)

static void test_known_key_cases(void) {
    KNOWN("general.name as uint32", e_arch_u32, "key 'general.name'", "type is uint32, must be string");
    KNOWN("general.alignment as string", e_align_str, "key 'general.alignment'", "type is string");
    KNOWN("general.alignment 0", e_align_0, "key 'general.alignment'", "value 0 is not a power of two");
    KNOWN("general.alignment 48", e_align_48, "key 'general.alignment'", "value 48 is not a power of two");
    KNOWN("general.alignment 2 MiB", e_align_2m, "key 'general.alignment'", "value 2097152 is over the 1 MiB limit");
    KNOWN("general.alignment negative", e_align_neg, "key 'general.alignment'", "value -32 (int32) does not fit");
    KNOWN("general.alignment over uint32", e_align_big, "key 'general.alignment'", "value 4294967328");
    KNOWN("general.alignment as float", e_align_f32, "key 'general.alignment'", "type is float32");
    KNOWN("tokenizer.ggml.model as array", e_model_arr, "key 'tokenizer.ggml.model'", "type is array of string");
    KNOWN("tokens as int32 array", e_tokens_i32, "key 'tokenizer.ggml.tokens'", "type is array of int32");
    KNOWN("tokens as string", e_tokens_str, "key 'tokenizer.ggml.tokens'", "type is string, must be array of string");
    KNOWN("scores as float64 array", e_scores_f64, "key 'tokenizer.ggml.scores'", "array of float64");
    KNOWN("scores as scalar", e_scores_f32, "key 'tokenizer.ggml.scores'", "type is float32, must be array of float32");
    KNOWN("token_type as uint32 array", e_ttype_u32, "key 'tokenizer.ggml.token_type'", "array of uint32");
    KNOWN("merges as int32 array", e_merges_i32, "key 'tokenizer.ggml.merges'", "array of int32");
    KNOWN("bos_token_id as string", e_bos_str, "key 'tokenizer.ggml.bos_token_id'", "type is string");
    KNOWN("eos_token_id as float", e_eos_f32, "key 'tokenizer.ggml.eos_token_id'", "type is float32");
    KNOWN("unknown_token_id negative", e_unk_neg, "key 'tokenizer.ggml.unknown_token_id'", "value -1");
    KNOWN("padding_token_id over uint32", e_pad_big, "key 'tokenizer.ggml.padding_token_id'", "value 1099511627776");
    KNOWN("context_length as float", e_ctx_f32, "key 'llama.context_length'", "type is float32");
    KNOWN("block_count as string", e_blocks_str, "key 'llama.block_count'", "type is string");
    KNOWN("embedding_length as bool", e_embd_bool, "key 'llama.embedding_length'", "type is bool");
    KNOWN("feed_forward_length as float64", e_ff_f64, "key 'llama.feed_forward_length'", "type is float64");
    KNOWN("head_count as array", e_heads_arr, "key 'llama.attention.head_count'", "type is array of int32");
    KNOWN("head_count_kv negative", e_kvheads_neg, "key 'llama.attention.head_count_kv'", "value -4");
    KNOWN("rope.dimension_count as string", e_rope_dim_str, "key 'llama.rope.dimension_count'", "type is string");
    KNOWN("rope.freq_base as uint32", e_theta_u32, "key 'llama.rope.freq_base'", "type is uint32, must be float32");
    KNOWN("rms epsilon as float64", e_eps_f64, "key 'llama.attention.layer_norm_rms_epsilon'", "type is float64");
    KNOWN("rms epsilon NaN", e_eps_nan, "key 'llama.attention.layer_norm_rms_epsilon'", "nan is not finite");
    KNOWN("rope.freq_base infinite", e_theta_inf, "key 'llama.rope.freq_base'", "inf is not finite");
    KNOWN("add_bos_token as uint8", e_add_bos_u8, "key 'tokenizer.ggml.add_bos_token'", "type is uint8, must be bool");

    struct buf b = { 0 };
    put_hdr(&b, 3, 0, 1);
    kv_u32(&b, "general.architecture", 7);
    EXPECT_FAIL("general.architecture as uint32", &b, MK_ERR_FORMAT, "key 'general.architecture'", "type is uint32");
    /* The architecture may come after its keys (as in stories260K); the rule still applies. */
    reset(&b);
    put_hdr(&b, 3, 0, 2);
    kv_str(&b, "llama.context_length", "x");
    kv_str(&b, "general.architecture", "llama");
    EXPECT_FAIL("arch key before the architecture", &b, MK_ERR_FORMAT, "key 'llama.context_length'", "type is string");
    reset(&b);
    put_hdr(&b, 3, 0, 3);
    kv_arr_str(&b, "tokenizer.ggml.tokens", 3);
    kv_arr_f32(&b, "tokenizer.ggml.scores", 2);
    kv_arr_i32(&b, "tokenizer.ggml.token_type", 3);
    EXPECT_FAIL("scores shorter than tokens", &b, MK_ERR_FORMAT, "key 'tokenizer.ggml.scores'",
                "array length = 2, but tokenizer.ggml.tokens has 3");
    reset(&b);
    put_hdr(&b, 3, 0, 2);
    kv_arr_i32(&b, "tokenizer.ggml.token_type", 4);
    kv_arr_str(&b, "tokenizer.ggml.tokens", 3);
    EXPECT_FAIL("token_type longer than tokens", &b, MK_ERR_FORMAT, "key 'tokenizer.ggml.token_type'",
                "array length = 4, but tokenizer.ggml.tokens has 3");
    reset(&b);
    put_hdr(&b, 3, 0, 1);
    kv_arr_f32(&b, "tokenizer.ggml.scores", 2);
    EXPECT_FAIL("scores without tokens", &b, MK_ERR_FORMAT, "key 'tokenizer.ggml.scores'",
                "without tokenizer.ggml.tokens");

    /* Keys of another architecture are not held to llama's rules. */
    reset(&b);
    put_hdr(&b, 3, 0, 2);
    kv_str(&b, "general.architecture", "llama");
    kv_f32(&b, "gpt2.context_length", 1.5f);
    struct mk_gguf *g = open_ok(&b);
    mk_gguf_close(g);
    /* Small unsigned types are fine where an integer is needed, alignment included. */
    reset(&b);
    put_hdr(&b, 3, 1, 1);
    put_key(&b, "general.alignment", MK_GGUF_UINT8);
    put_u8(&b, 64);
    uint64_t ne[1] = { 8 };
    put_tinfo(&b, "t", 1, ne, MK_DTYPE_F32, 0);
    put_pad(&b, 64);
    put_data(&b, 32, 0);
    g = open_ok(&b);
    if (g) {
        MK_CHECK(mk_gguf_alignment(g) == 64);
        MK_CHECK(mk_gguf_data_offset(g) % 64 == 0);
        MK_CHECK(mk_gguf_tensor_at(g, 0)->data == b.d + mk_gguf_data_offset(g));
    }
    mk_gguf_close(g);
    free(b.d);
}

/* llama.cpp's offset rule: in file order each tensor starts where the one before it ends, padded
 * to the alignment. Every case here lies inside the file and is aligned, so only the rule can
 * reject it. */
static void test_offset_rule_cases(struct buf *b) {
    uint64_t ne1[1] = { 8 }, ne3[1] = { 3 };
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne1, MK_DTYPE_F32, 64);
    put_pad(b, 32);
    put_data(b, 96, 0);
    EXPECT_FAIL("gap between two tensors", b, MK_ERR_FORMAT, "tensor 'b': data [64, 96) leaves a gap after tensor 'a'",
                "must start at offset 32");
    reset(b);
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne1, MK_DTYPE_F32, 32);
    put_tinfo(b, "b", 1, ne1, MK_DTYPE_F32, 0);
    put_pad(b, 32);
    put_data(b, 64, 0);
    EXPECT_FAIL("two tensors swapped in the data section", b, MK_ERR_FORMAT, "tensor 'a': data [32, 64)",
                "offset 0 of the data section");
    reset(b);
    put_hdr(b, 3, 3, 0);
    put_tinfo(b, "a", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne1, MK_DTYPE_F32, 64);
    put_tinfo(b, "c", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(b, 32);
    put_data(b, 96, 0);
    EXPECT_FAIL("third tensor placed before the second", b, MK_ERR_FORMAT, "tensor 'b': data [64, 96)",
                "leaves a gap after tensor 'a' data [0, 32)");
    reset(b);
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(b, "a2", 1, ne1, MK_DTYPE_F32, 0);
    put_pad(b, 32);
    put_data(b, 32, 0);
    EXPECT_FAIL("two tensors sharing their data", b, MK_ERR_FORMAT, "tensor 'a2': data [0, 32) overlaps tensor 'a'",
                "must start at offset 32");
    reset(b);
    /* 12 bytes under general.alignment = 16: the next tensor starts at 16; 32 is aligned too, but
     * leaves 16 bytes of odd padding that llama.cpp refuses. */
    put_hdr(b, 3, 2, 1);
    kv_u32(b, "general.alignment", 16);
    put_tinfo(b, "a", 1, ne3, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne3, MK_DTYPE_F32, 32);
    put_pad(b, 16);
    put_data(b, 48, 0);
    EXPECT_FAIL("padding of 32 where general.alignment = 16 asks for 16", b, MK_ERR_FORMAT,
                "tensor 'b': data [32, 44) leaves a gap after tensor 'a' data [0, 12)",
                "must start at offset 16, right after the tensor before it padded to the alignment 16");
    reset(b);
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne3, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne3, MK_DTYPE_F32, 16);
    put_pad(b, 32);
    put_data(b, 64, 0);
    EXPECT_FAIL("padding of 16 under the default alignment 32", b, MK_ERR_FORMAT, "tensor 'b'",
                "offset = 16 is not a multiple of the alignment 32");
    reset(b);
    /* A file cut inside the last tensor's data, and one cut before the second tensor starts. */
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(b, 32);
    put_data(b, 50, 0);
    EXPECT_FAIL("truncated inside the last tensor", b, MK_ERR_FORMAT,
                "tensor 'b': data at offset = 32 with n_bytes = 32", "holds 50 bytes");
    reset(b);
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(b, 32);
    put_data(b, 20, 0);
    EXPECT_FAIL("truncated inside the first tensor", b, MK_ERR_FORMAT,
                "tensor 'a': data at offset = 0 with n_bytes = 32", "holds 20 bytes");
    reset(b);

    /* What the rule allows: odd sizes padded to a small alignment, and (as llama.cpp's loader
     * allows) a file that stops right after the last tensor's bytes, without its padding. */
    put_hdr(b, 3, 3, 1);
    kv_u32(b, "general.alignment", 8);
    put_tinfo(b, "a", 1, ne3, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne3, MK_DTYPE_F32, 16);
    put_tinfo(b, "c", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(b, 8);
    size_t data_start = b->n;
    put_data(b, 64, 0);
    struct mk_gguf *g = open_ok(b);
    if (g) {
        MK_CHECK(mk_gguf_alignment(g) == 8 && mk_gguf_data_offset(g) == data_start);
        MK_CHECK(mk_gguf_find_tensor(g, "c")->data == b->d + data_start + 32);
        mk_gguf_close(g);
    }
    reset(b);
    put_hdr(b, 3, 2, 0);
    put_tinfo(b, "a", 1, ne3, MK_DTYPE_F32, 0);
    put_tinfo(b, "b", 1, ne3, MK_DTYPE_F32, 32);
    put_pad(b, 32);
    put_data(b, 44, 0);
    g = open_ok(b);
    if (g) mk_gguf_close(g);
    reset(b);
}

static void test_tensor_cases(void) {
    struct buf b = { 0 };
    uint64_t ne1[1] = { 8 }, ne2[2] = { 4, 2 };

    put_hdr(&b, 3, 2, 0);
    put_tinfo(&b, "w", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(&b, "w", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(&b, 32);
    put_data(&b, 64, 0);
    EXPECT_FAIL("duplicate tensor name", &b, MK_ERR_FORMAT, "tensor 'w'",
                "duplicate tensor name (tensor 0 and tensor 1)");
    reset(&b);
    one_tensor(&b, "", 1, ne1, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("empty tensor name", &b, MK_ERR_FORMAT, "tensor 0", "name is empty");
    reset(&b);
    char long_name[65];
    memset(long_name, 'n', 64);
    long_name[64] = '\0';
    one_tensor(&b, long_name, 1, ne1, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("tensor name of 64 bytes", &b, MK_ERR_FORMAT, "tensor 0", "name length = 64");
    reset(&b);
    put_hdr(&b, 3, 1, 0);
    put_strn(&b, "a\0b", 3);
    put_u32(&b, 1);
    put_u64(&b, 8);
    put_u32(&b, MK_DTYPE_F32);
    put_u64(&b, 0);
    put_pad(&b, 32);
    put_data(&b, 32, 0);
    EXPECT_FAIL("tensor name with a NUL byte", &b, MK_ERR_FORMAT, "tensor 0", "NUL");
    reset(&b);
    one_tensor(&b, "blk.0.attn_q.weight", 0, ne1, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("n_dims 0", &b, MK_ERR_FORMAT, "tensor 'blk.0.attn_q.weight'", "n_dims = 0 (must be 1..4)");
    reset(&b);
    put_hdr(&b, 3, 1, 0);
    put_str(&b, "blk.0.attn_q.weight");
    put_u32(&b, 7);
    for (int i = 0; i < 7; i++) put_u64(&b, 2);
    put_u32(&b, MK_DTYPE_F32);
    put_u64(&b, 0);
    put_pad(&b, 32);
    put_data(&b, 512, 0);
    EXPECT_FAIL("n_dims 7", &b, MK_ERR_FORMAT, "tensor 'blk.0.attn_q.weight'", "n_dims = 7 (must be 1..4)");
    reset(&b);
    put_hdr(&b, 3, 1, 0);
    put_str(&b, "t");
    put_u32(&b, 0x80000000u);
    put_zeros(&b, 64);
    EXPECT_FAIL("n_dims 2^31", &b, MK_ERR_FORMAT, "tensor 't'", "n_dims = 2147483648");
    reset(&b);
    uint64_t ne_zero[2] = { 4, 0 };
    one_tensor(&b, "t", 2, ne_zero, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("dimension 0", &b, MK_ERR_FORMAT, "tensor 't'", "ne[1] = 0");
    reset(&b);
    uint64_t ne_huge[1] = { 1ull << 63 };
    one_tensor(&b, "t", 1, ne_huge, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("dimension over INT64_MAX", &b, MK_ERR_FORMAT, "tensor 't'", "ne[0] = 9223372036854775808");
    reset(&b);
    uint64_t ne_ovf[2] = { 1ull << 32, 1ull << 32 };
    one_tensor(&b, "t", 2, ne_ovf, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("element count overflow", &b, MK_ERR_FORMAT, "element count overflows", "4294967296, 4294967296");
    reset(&b);
    uint64_t ne_bovf[2] = { 1ull << 31, 1ull << 31 };
    one_tensor(&b, "t", 2, ne_bovf, MK_DTYPE_F32, 0, 32);
    EXPECT_FAIL("byte count overflow", &b, MK_ERR_FORMAT, "byte count overflows",
                "4611686018427387904 elements of f32");
    reset(&b);
    one_tensor(&b, "t", 1, ne1, 99, 0, 32);
    EXPECT_FAIL("unknown tensor type", &b, MK_ERR_FORMAT, "tensor 't'", "type = 99 (not a ggml type)");
    reset(&b);
    uint64_t ne_q[1] = { 32 };
    one_tensor(&b, "blk.0.ffn_up.weight", 1, ne_q, 16, 0, 32);
    EXPECT_FAIL("iq2_xxs tensor", &b, MK_ERR_UNSUPPORTED, "tensor 'blk.0.ffn_up.weight'",
                "type iq2_xxs (16) is not supported by mk");
    reset(&b);
    uint64_t ne_33[1] = { 33 };
    one_tensor(&b, "t", 1, ne_33, MK_DTYPE_Q8_0, 0, 64);
    EXPECT_FAIL("q8_0 row not a multiple of 32", &b, MK_ERR_FORMAT, "ne[0] = 33", "q8_0 block size 32");
    reset(&b);
    uint64_t ne_100[2] = { 100, 4 };
    one_tensor(&b, "t", 2, ne_100, MK_DTYPE_Q4_K, 0, 1024);
    EXPECT_FAIL("q4_k row not a multiple of 256", &b, MK_ERR_FORMAT, "ne[0] = 100", "block size 256");
    reset(&b);
    one_tensor(&b, "t", 1, ne1, MK_DTYPE_F32, 16, 64);
    EXPECT_FAIL("offset not aligned", &b, MK_ERR_FORMAT, "offset = 16", "alignment 32");
    reset(&b);
    put_hdr(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 64);
    put_tinfo(&b, "t", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(&b, 64);
    put_data(&b, 128, 0);
    EXPECT_FAIL("offset not aligned to general.alignment", &b, MK_ERR_FORMAT, "offset = 32", "alignment 64");
    reset(&b);
    one_tensor(&b, "t", 2, ne2, MK_DTYPE_F32, 0, 16);
    EXPECT_FAIL("data past the end", &b, MK_ERR_FORMAT, "offset = 0 with n_bytes = 32", "holds 16 bytes");
    reset(&b);
    one_tensor(&b, "t", 1, ne1, MK_DTYPE_F32, UINT64_MAX - 31, 64);
    EXPECT_FAIL("offset + n_bytes overflows", &b, MK_ERR_FORMAT, "offset = 18446744073709551584", "past the end");
    reset(&b);
    one_tensor(&b, "t", 1, ne1, MK_DTYPE_F32, 0, 0);
    EXPECT_FAIL("tensor in a file that ends at the header", &b, MK_ERR_FORMAT, "n_bytes = 32", "holds 0 bytes");
    reset(&b);
    uint64_t ne16[1] = { 16 };
    put_hdr(&b, 3, 2, 0);
    put_tinfo(&b, "a", 1, ne16, MK_DTYPE_F32, 0);
    put_tinfo(&b, "b", 1, ne1, MK_DTYPE_F32, 32);
    put_pad(&b, 32);
    put_data(&b, 64, 0);
    EXPECT_FAIL("overlapping tensor data", &b, MK_ERR_FORMAT, "tensor 'b': data [32, 64)",
                "overlaps tensor 'a' data [0, 64)");
    reset(&b);
    put_hdr(&b, 3, 3, 0);
    put_tinfo(&b, "x", 1, ne1, MK_DTYPE_F32, 64);
    put_tinfo(&b, "y", 1, ne1, MK_DTYPE_F32, 0);
    put_tinfo(&b, "z", 1, ne1, MK_DTYPE_F32, 64);
    put_pad(&b, 32);
    put_data(&b, 96, 0);
    EXPECT_FAIL("tensors declared out of order", &b, MK_ERR_FORMAT, "tensor 'x': data [64, 96)",
                "does not start at offset 0 of the data section");
    reset(&b);
    test_offset_rule_cases(&b);
    put_hdr(&b, 3, 2, 0);
    put_tinfo(&b, "a_long_name_that_uses_up_the_minimum_sizes", 1, ne1, MK_DTYPE_F32, 0);
    put_str(&b, "t");
    put_u8(&b, 1);
    EXPECT_FAIL("truncated tensor info", &b, MK_ERR_FORMAT, "tensor 't'", "n_dims needs 4 bytes");
    reset(&b);
    /* Escape sequences in names never reach a terminal raw. */
    put_hdr(&b, 3, 1, 0);
    put_str(&b, "\x1b[31mred");
    put_u32(&b, 9);
    put_zeros(&b, 40);
    EXPECT_FAIL("control bytes in a tensor name", &b, MK_ERR_FORMAT, "tensor '\\x1b[31mred'", "n_dims = 9");
    reset(&b);
    char big_key[2001];
    memset(big_key, 'k', 2000);
    big_key[2000] = '\0';
    put_hdr(&b, 3, 0, 2);
    kv_u32(&b, big_key, 1);
    kv_u32(&b, big_key, 2);
    EXPECT_FAIL("duplicate 2000-byte key is shown cut", &b, MK_ERR_FORMAT, "kkk...'", "duplicate key");
    free(b.d);
}

static void test_open_file_cases(void) {
    char path[512];
    struct mk_gguf *g = NULL;
    struct mk_error err;
    struct buf b = { 0 };

    tmp_path(path, sizeof path, "empty.gguf");
    write_file(path, &b);
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_ERR_FORMAT && g == NULL);
    MK_CHECK(strstr(err.msg, path) == err.msg && strstr(err.msg, "file size = 0"));
    g_hostile_cases++;
    unlink(path);

    uint64_t ne[1] = { 8 };
    put_hdr(&b, 3, 1, 0);
    put_str(&b, "model.norm");
    put_u32(&b, 7);
    put_zeros(&b, 64);
    tmp_path(path, sizeof path, "ndims.gguf");
    write_file(path, &b);
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_ERR_FORMAT && g == NULL);
    MK_CHECK(strstr(err.msg, path) == err.msg && strstr(err.msg, "tensor 'model.norm': n_dims = 7"));
    g_hostile_cases++;
    unlink(path);

    reset(&b);
    one_tensor(&b, "t", 1, ne, MK_DTYPE_F32, 0, 16);
    tmp_path(path, sizeof path, "short.gguf");
    write_file(path, &b);
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_ERR_FORMAT && g == NULL);
    MK_CHECK(strstr(err.msg, path) == err.msg && strstr(err.msg, "runs past the end"));
    g_hostile_cases++;
    unlink(path);

    MK_CHECK(mk_gguf_open("/nonexistent/dir/x.gguf", &g, &err) == MK_ERR_IO && g == NULL);
    MK_CHECK(strstr(err.msg, "/nonexistent/dir/x.gguf") && strstr(err.msg, "cannot open"));
    MK_CHECK(mk_gguf_open(mk_test_tmp_base(), &g, &err) == MK_ERR_IO && g == NULL);
    MK_CHECK(strstr(err.msg, "not a regular file") != NULL);

    /* A valid file through the mmap path: tensor data lands inside the map, aligned. */
    reset(&b);
    build_valid(&b, 3);
    tmp_path(path, sizeof path, "valid.gguf");
    write_file(path, &b);
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_OK);
    if (g) {
        MK_CHECK(strcmp(mk_gguf_path(g), path) == 0);
        MK_CHECK(mk_gguf_file_size(g) == b.n);
        const struct mk_gguf_tensor *c = mk_gguf_find_tensor(g, "c");
        MK_CHECK(c && ((uintptr_t)c->data % 32) == 0);
        MK_CHECK(c && memcmp(c->data, b.d + b.n - 68, 68) == 0);
        mk_gguf_close(g);
    }
    unlink(path);
    free(b.d);
}

/* ---- Valid files and getters ---- */

static void test_valid(uint32_t version) {
    struct buf b = { 0 };
    build_valid(&b, version);
    struct mk_gguf *g = open_ok(&b);
    if (!g) {
        free(b.d);
        return;
    }
    MK_CHECK(mk_gguf_version(g) == version);
    MK_CHECK(mk_gguf_kv_count(g) == VALID_KVS);
    MK_CHECK(mk_gguf_tensor_count(g) == VALID_TENSORS);
    MK_CHECK(mk_gguf_alignment(g) == 32);
    MK_CHECK(mk_gguf_data_offset(g) == b.n - 32 - 32 - 68);
    MK_CHECK(mk_gguf_kv_at(g, VALID_KVS) == NULL && mk_gguf_tensor_at(g, VALID_TENSORS) == NULL);
    MK_CHECK(mk_gguf_str_eq(mk_gguf_kv_at(g, 0)->key, "general.architecture"));
    MK_CHECK(mk_gguf_find_kv(g, "missing") == NULL && mk_gguf_find_tensor(g, "missing") == NULL);
    MK_CHECK(mk_gguf_find_kv(g, "x.u") == NULL && mk_gguf_find_kv(g, "x.u88") == NULL);

    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, "tokenizer.ggml.tokens");
    MK_CHECK(kv && kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_STRING && kv->v.arr.n == 3);
    if (kv && kv->v.arr.strs) {
        MK_CHECK(mk_gguf_str_eq(kv->v.arr.strs[0], "<s>"));
        MK_CHECK(mk_gguf_str_eq(kv->v.arr.strs[1], ""));
        MK_CHECK(mk_gguf_str_eq(kv->v.arr.strs[2], "hello"));
    }
    kv = mk_gguf_find_kv(g, "tokenizer.ggml.scores");
    MK_CHECK(kv && kv->v.arr.elem_type == MK_GGUF_FLOAT32 && kv->v.arr.n == 3);
    if (kv) {
        float s[3];
        memcpy(s, kv->v.arr.data, sizeof s);
        MK_CHECK(s[0] == 0.0f && s[1] == -1.0f && s[2] == -2.0f);
    }
    kv = mk_gguf_find_kv(g, "x.u8");
    MK_CHECK(kv && kv->type == MK_GGUF_UINT8 && kv->v.u64 == 200);
    kv = mk_gguf_find_kv(g, "x.i8");
    MK_CHECK(kv && kv->type == MK_GGUF_INT8 && kv->v.i64 == -128);
    kv = mk_gguf_find_kv(g, "x.u16");
    MK_CHECK(kv && kv->v.u64 == 0x1234);
    kv = mk_gguf_find_kv(g, "x.i16");
    MK_CHECK(kv && kv->v.i64 == -2);
    kv = mk_gguf_find_kv(g, "x.u64");
    MK_CHECK(kv && kv->v.u64 == 1ull << 40);
    kv = mk_gguf_find_kv(g, "x.i64");
    MK_CHECK(kv && kv->v.i64 == -5);
    kv = mk_gguf_find_kv(g, "x.f64");
    MK_CHECK(kv && kv->type == MK_GGUF_FLOAT64 && kv->v.f64 == 2.5);
    kv = mk_gguf_find_kv(g, "x.bool");
    MK_CHECK(kv && kv->type == MK_GGUF_BOOL && kv->v.u64 == 1);
    kv = mk_gguf_find_kv(g, "x.bools");
    MK_CHECK(kv && kv->v.arr.n == 2 && ((const uint8_t *)kv->v.arr.data)[1] == 1);
    kv = mk_gguf_find_kv(g, "x.empty");
    MK_CHECK(kv && kv->v.arr.n == 0 && kv->v.arr.strs == NULL);

    const struct mk_gguf_tensor *t = mk_gguf_find_tensor(g, "a");
    MK_CHECK(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
    MK_CHECK(t && t->n_elements == 8 && t->n_bytes == 32 && t->offset == 0);
    MK_CHECK(t && t->data == b.d + mk_gguf_data_offset(g));
    t = mk_gguf_find_tensor(g, "b");
    MK_CHECK(t && t->type == MK_DTYPE_F16 && t->n_bytes == 16 && t->offset == 32);
    t = mk_gguf_find_tensor(g, "c");
    MK_CHECK(t && t->type == MK_DTYPE_Q8_0 && t->n_elements == 64 && t->n_bytes == 68);
    MK_CHECK(t && (const uint8_t *)t->data + t->n_bytes == b.d + b.n);

    /* Getters. */
    struct mk_error err;
    uint32_t u = 77;
    float f = 3.0f;
    struct mk_gguf_str s = { 0, NULL };
    MK_CHECK(mk_gguf_get_u32(g, "x.u8", &u, &err) == MK_OK && u == 200);
    MK_CHECK(mk_gguf_get_u32(g, "llama.context_length", &u, &err) == MK_OK && u == 128);
    MK_CHECK(mk_gguf_get_u32(g, "x.i8", &u, &err) == MK_ERR_FORMAT);
    MK_CHECK(strstr(err.msg, "valid.gguf") && strstr(err.msg, "x.i8") && strstr(err.msg, "-128"));
    MK_CHECK(mk_gguf_get_u32(g, "x.u64", &u, &err) == MK_ERR_FORMAT && strstr(err.msg, "1099511627776"));
    MK_CHECK(mk_gguf_get_u32(g, "general.name", &u, &err) == MK_ERR_FORMAT && strstr(err.msg, "type is string"));
    MK_CHECK(mk_gguf_get_u32(g, "llama.block_count", &u, &err) == MK_ERR_FORMAT);
    MK_CHECK(strstr(err.msg, "valid.gguf") && strstr(err.msg, "'llama.block_count' is missing"));
    u = 77;
    MK_CHECK(mk_gguf_get_u32_opt(g, "llama.block_count", &u, &err) == MK_OK && u == 77);
    MK_CHECK(mk_gguf_get_f32_opt(g, "llama.rope.freq_base", &f, &err) == MK_OK && f == 10000.0f);
    MK_CHECK(mk_gguf_get_f32_opt(g, "x.f64", &f, &err) == MK_OK && f == 2.5f);
    f = 3.0f;
    MK_CHECK(mk_gguf_get_f32_opt(g, "nope", &f, &err) == MK_OK && f == 3.0f);
    MK_CHECK(mk_gguf_get_f32_opt(g, "x.u8", &f, &err) == MK_ERR_FORMAT && strstr(err.msg, "type is uint8"));
    MK_CHECK(mk_gguf_get_str(g, "general.name", &s, &err) == MK_OK && mk_gguf_str_eq(s, "tiny"));
    MK_CHECK(mk_gguf_get_str(g, "tokenizer.ggml.tokens", &s, &err) == MK_ERR_FORMAT);
    MK_CHECK(strstr(err.msg, "type is array of string, must be string") != NULL);
    MK_CHECK(mk_gguf_get_str(g, "general.basename", &s, &err) == MK_ERR_FORMAT && strstr(err.msg, "missing"));
    s.len = 99;
    MK_CHECK(mk_gguf_get_str_opt(g, "general.basename", &s, &err) == MK_OK && s.len == 99);
    MK_CHECK(strcmp(mk_gguf_type_name(MK_GGUF_FLOAT64), "float64") == 0);
    MK_CHECK(strcmp(mk_gguf_type_name((enum mk_gguf_type)99), "unknown") == 0);
    mk_gguf_close(g);
    free(b.d);
}

/* Many KVs and tensors: the name indexes keep parsing and lookups linear. */
static void test_many_entries(void) {
    enum { N = 50000 };
    struct buf b = { 0 };
    put_hdr(&b, 3, N, N);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        kv_u32(&b, name, (uint32_t)i);
    }
    uint64_t ne[1] = { 1 };
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "t.%d", i);
        put_tinfo(&b, name, 1, ne, MK_DTYPE_F32, (uint64_t)i * 32);
    }
    put_pad(&b, 32);
    for (int i = 0; i < N; i++) {
        put_u32(&b, (uint32_t)i);
        put_zeros(&b, 28);
    }
    struct mk_gguf *g = open_ok(&b);
    if (g) {
        for (int i = 0; i < N; i += 997) {
            snprintf(name, sizeof name, "k.%d", i);
            const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, name);
            MK_CHECK(kv && kv->v.u64 == (uint64_t)i);
            snprintf(name, sizeof name, "t.%d", i);
            const struct mk_gguf_tensor *t = mk_gguf_find_tensor(g, name);
            uint32_t v = 0;
            if (t) memcpy(&v, t->data, 4);
            MK_CHECK(t && v == (uint32_t)i);
        }
        mk_gguf_close(g);
    }
    /* The same with one duplicate name at the very end. */
    reset(&b);
    put_hdr(&b, 3, 0, N);
    for (int i = 0; i < N - 1; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        kv_u32(&b, name, (uint32_t)i);
    }
    kv_u32(&b, "k.12345", 0);
    EXPECT_FAIL("duplicate key among 50000", &b, MK_ERR_FORMAT, "key 'k.12345'",
                "duplicate key (kv 12345 and kv 49999)");
    free(b.d);
}

/* ---- Sweeps ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Reads everything a consumer could, so the sanitizers check every pointer a parse hands out. */
static uint64_t touch_all(const struct mk_gguf *g) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < mk_gguf_kv_count(g); i++) {
        const struct mk_gguf_kv *kv = mk_gguf_kv_at(g, i);
        for (uint64_t j = 0; j < kv->key.len; j++) sum += (unsigned char)kv->key.data[j];
        MK_CHECK(mk_gguf_find_kv(g, "") == NULL);
        if (kv->type == MK_GGUF_STRING) {
            for (uint64_t j = 0; j < kv->v.str.len; j++) sum += (unsigned char)kv->v.str.data[j];
        } else if (kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_STRING) {
            for (uint64_t k = 0; k < kv->v.arr.n; k++)
                for (uint64_t j = 0; j < kv->v.arr.strs[k].len; j++) sum += (unsigned char)kv->v.arr.strs[k].data[j];
        } else if (kv->type == MK_GGUF_ARRAY) {
            const uint8_t *p = kv->v.arr.data;
            uint64_t n =
                kv->v.arr.n * (kv->v.arr.elem_type == MK_GGUF_UINT8 || kv->v.arr.elem_type == MK_GGUF_INT8 ||
                                       kv->v.arr.elem_type == MK_GGUF_BOOL
                                   ? 1
                               : kv->v.arr.elem_type == MK_GGUF_UINT16 || kv->v.arr.elem_type == MK_GGUF_INT16 ? 2
                               : kv->v.arr.elem_type == MK_GGUF_UINT64 || kv->v.arr.elem_type == MK_GGUF_INT64 ||
                                       kv->v.arr.elem_type == MK_GGUF_FLOAT64
                                   ? 8
                                   : 4);
            for (uint64_t j = 0; j < n; j++) sum += p[j];
        }
    }
    for (uint64_t i = 0; i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        MK_CHECK(mk_dtype_get(t->type) != NULL);
        MK_CHECK(t->offset % mk_gguf_alignment(g) == 0);
        MK_CHECK(mk_gguf_data_offset(g) + t->offset + t->n_bytes <= mk_gguf_file_size(g));
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->n_bytes; j++) sum += p[j];
    }
    return sum;
}

static void parse_mutant(const uint8_t *data, size_t n, int *n_ok, int *n_err) {
    uint8_t *copy = malloc(n ? n : 1);
    MK_ASSERT(copy);
    memcpy(copy, data, n);
    struct mk_gguf *g = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    enum mk_status st = mk_gguf_open_memory(copy, n, "mutant.gguf", &g, &err);
    if (st == MK_OK) {
        MK_CHECK(g != NULL);
        (void)touch_all(g);
        mk_gguf_close(g);
        (*n_ok)++;
    } else {
        MK_CHECK(g == NULL);
        MK_CHECK(st == MK_ERR_FORMAT || st == MK_ERR_UNSUPPORTED);
        MK_CHECK(strncmp(err.msg, "mutant.gguf: ", 13) == 0 && strlen(err.msg) > 20);
        (*n_err)++;
    }
    free(copy);
}

static void test_truncation_sweep(void) {
    struct buf b = { 0 };
    build_valid(&b, 3);
    int n_ok = 0, n_err = 0;
    for (size_t len = 0; len < b.n; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        MK_ASSERT(copy);
        memcpy(copy, b.d, len);
        struct mk_gguf *g = NULL;
        struct mk_error err;
        enum mk_status st = mk_gguf_open_memory(copy, len, "trunc.gguf", &g, &err);
        if (st != MK_ERR_FORMAT || g != NULL || strncmp(err.msg, "trunc.gguf: ", 12) != 0) {
            mk_test_fail("prefix %zu of %zu: status %d, message %s", len, b.n, st, err.msg);
        }
        n_err++;
        free(copy);
    }
    parse_mutant(b.d, b.n, &n_ok, &n_err);
    MK_CHECK(n_ok == 1);
    printf("truncation sweep: %zu prefixes rejected\n", b.n);
    free(b.d);
}

static void test_corruption_sweeps(void) {
    struct buf b = { 0 };
    build_valid(&b, 3);
    int n_ok = 0, n_err = 0;
    uint8_t *m = malloc(b.n);
    MK_ASSERT(m);
    /* Every byte set to boundary values. */
    static const int vals[] = { 0x00, 0xff, 0x7f, 0x80, 0x01, 0x20, -1, -2 };
    for (size_t pos = 0; pos < b.n; pos++) {
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            memcpy(m, b.d, b.n);
            m[pos] = vals[v] == -1   ? (uint8_t)(b.d[pos] + 1)
                     : vals[v] == -2 ? (uint8_t)(b.d[pos] - 1)
                                     : (uint8_t)vals[v];
            parse_mutant(m, b.n, &n_ok, &n_err);
        }
    }
    /* Pseudo-random 1..4-byte corruptions and 8-byte field overwrites. */
    for (int it = 0; it < 30000; it++) {
        memcpy(m, b.d, b.n);
        int k = 1 + (int)(rng() % 4);
        for (int j = 0; j < k; j++) {
            size_t pos = rng() % b.n;
            if (rng() % 4 == 0 && pos + 8 <= b.n) {
                uint64_t v = rng() % 3 == 0 ? rng() : rng() % 4096;
                memcpy(m + pos, &v, 8);
            } else {
                m[pos] = (uint8_t)rng();
            }
        }
        parse_mutant(m, b.n, &n_ok, &n_err);
    }
    printf("corruption sweeps: %d parsed, %d rejected cleanly\n", n_ok, n_err);
    MK_CHECK(n_ok > 0 && n_err > 0);
    free(m);
    free(b.d);
}

/* ---- Writer ---- */

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void test_writer_round_trip(void) {
    char path[512];
    tmp_path(path, sizeof path, "written.gguf");
    struct mk_gguf_writer *w = NULL;
    struct mk_error err;
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    if (!w) return;
    const char *toks[4] = { "<unk>", "", "\xe2\x96\x81the", "a b" };
    float scores[4] = { 0.0f, -1.5f, 2.25f, -1e30f };
    int32_t types[4] = { 2, 3, 1, 1 };
    MK_CHECK(mk_gguf_writer_kv_str(w, "general.architecture", "llama") == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "llama.block_count", 2) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_i32(w, "x.neg", -7) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_f32(w, "llama.rope.freq_base", 500000.0f) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 4) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, 4) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_arr_i32(w, "x.empty", NULL, 0) == MK_OK);

    struct {
        const char *name;
        uint32_t type, n_dims;
        uint64_t ne[4];
    } ts[] = {
        { "f32", MK_DTYPE_F32, 2, { 5, 3 } },      { "f16", MK_DTYPE_F16, 1, { 7 } },
        { "bf16", MK_DTYPE_BF16, 3, { 2, 3, 4 } }, { "q8_0", MK_DTYPE_Q8_0, 2, { 64, 3 } },
        { "q4_k", MK_DTYPE_Q4_K, 2, { 256, 2 } },  { "q6_k", MK_DTYPE_Q6_K, 4, { 512, 1, 1, 2 } },
    };
    const size_t nt = sizeof ts / sizeof ts[0];
    uint64_t bytes[6];
    for (size_t i = 0; i < nt; i++) {
        MK_CHECK(mk_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne) == MK_OK);
        const struct mk_dtype_info *info = mk_dtype_get(ts[i].type);
        uint64_t n = 1;
        for (uint32_t d = 0; d < ts[i].n_dims; d++) n *= ts[i].ne[d];
        bytes[i] = n / info->block_size * info->type_size;
    }
    /* Stream each tensor in uneven pieces. */
    uint8_t chunk[1000];
    for (size_t i = 0; i < nt; i++) {
        uint64_t done = 0;
        while (done < bytes[i]) {
            size_t n = (size_t)((bytes[i] - done) < 77 ? (bytes[i] - done) : 77);
            for (size_t j = 0; j < n; j++) chunk[j] = (uint8_t)(i * 31 + done + j);
            MK_CHECK(mk_gguf_writer_write_data(w, chunk, n) == MK_OK);
            done += n;
        }
    }
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_OK);

    struct mk_gguf *g = NULL;
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_OK);
    if (g) {
        MK_CHECK(mk_gguf_version(g) == 3 && mk_gguf_alignment(g) == 32);
        MK_CHECK(mk_gguf_kv_count(g) == 9 && mk_gguf_tensor_count(g) == nt);
        struct mk_gguf_str s;
        uint32_t u;
        float f;
        MK_CHECK(mk_gguf_get_str(g, "general.architecture", &s, &err) == MK_OK && mk_gguf_str_eq(s, "llama"));
        MK_CHECK(mk_gguf_get_u32(g, "llama.block_count", &u, &err) == MK_OK && u == 2);
        const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, "x.neg");
        MK_CHECK(kv && kv->type == MK_GGUF_INT32 && kv->v.i64 == -7);
        MK_CHECK(mk_gguf_get_f32_opt(g, "llama.rope.freq_base", &f, &err) == MK_OK && f == 500000.0f);
        kv = mk_gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
        MK_CHECK(kv && kv->type == MK_GGUF_BOOL && kv->v.u64 == 1);
        kv = mk_gguf_find_kv(g, "tokenizer.ggml.tokens");
        MK_CHECK(kv && kv->v.arr.n == 4);
        for (int i = 0; kv && i < 4; i++) MK_CHECK(mk_gguf_str_eq(kv->v.arr.strs[i], toks[i]));
        kv = mk_gguf_find_kv(g, "tokenizer.ggml.scores");
        MK_CHECK(kv && kv->v.arr.n == 4 && memcmp(kv->v.arr.data, scores, sizeof scores) == 0);
        kv = mk_gguf_find_kv(g, "tokenizer.ggml.token_type");
        MK_CHECK(kv && kv->v.arr.n == 4 && memcmp(kv->v.arr.data, types, sizeof types) == 0);
        kv = mk_gguf_find_kv(g, "x.empty");
        MK_CHECK(kv && kv->v.arr.elem_type == MK_GGUF_INT32 && kv->v.arr.n == 0);
        uint64_t expect_off = 0;
        for (size_t i = 0; i < nt; i++) {
            const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
            MK_CHECK(mk_gguf_str_eq(t->name, ts[i].name) && t->type == ts[i].type && t->n_dims == ts[i].n_dims);
            for (uint32_t d = 0; d < 4; d++) MK_CHECK(t->ne[d] == (d < ts[i].n_dims ? ts[i].ne[d] : 1));
            MK_CHECK(t->n_bytes == bytes[i] && t->offset == expect_off);
            expect_off += (bytes[i] + 31) / 32 * 32;
            const uint8_t *p = t->data;
            bool same = true;
            for (uint64_t j = 0; j < bytes[i]; j++) same &= p[j] == (uint8_t)(i * 31 + j);
            MK_CHECK(same);
        }
        /* llama.cpp's layout: the file ends with the last tensor's padding. */
        MK_CHECK(mk_gguf_file_size(g) == mk_gguf_data_offset(g) + expect_off);
        mk_gguf_close(g);
    }
    unlink(path);
}

static void test_writer_errors(void) {
    char path[512];
    tmp_path(path, sizeof path, "bad.gguf");
    struct mk_gguf_writer *w = NULL;
    struct mk_error err;
    uint64_t ne[2] = { 32, 2 };

    MK_CHECK(mk_gguf_writer_create("/nonexistent/dir/out.gguf", &w, &err) == MK_ERR_IO && w == NULL);
    MK_CHECK(strstr(err.msg, "/nonexistent/dir/out.gguf") != NULL);

    /* Duplicate key; errors are sticky and finish removes the file. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "a.b", 1) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "a.b", 2) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "duplicate key 'a.b'") != NULL);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, path) == mk_gguf_writer_error(w)->msg);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "c.d", 2) == MK_ERR_INVALID_ARG);
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_ERR_INVALID_ARG && strstr(err.msg, "duplicate key"));
    MK_CHECK(!file_exists(path));

    /* Known-key types are enforced on the way out too. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_str(w, "general.architecture", "llama") == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_f32(w, "llama.context_length", 4.0f) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "llama.context_length") &&
             strstr(mk_gguf_writer_error(w)->msg, "float32"));
    mk_gguf_writer_abort(w);
    MK_CHECK(!file_exists(path));

    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "general.alignment", 48) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "48") != NULL);
    mk_gguf_writer_abort(w);

    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_str(w, "", "x") == MK_ERR_INVALID_ARG);
    mk_gguf_writer_abort(w);

    /* Key after a tensor. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "t", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "late.key", 1) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "after the first tensor") != NULL);
    mk_gguf_writer_abort(w);

    /* Unsupported, malformed and duplicate tensors. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "t", 16, 2, ne) == MK_ERR_UNSUPPORTED);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "type iq2_xxs (16) is not supported by mk") != NULL);
    mk_gguf_writer_abort(w);
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    uint64_t ne_bad[1] = { 33 };
    MK_CHECK(mk_gguf_writer_add_tensor(w, "t", MK_DTYPE_Q8_0, 1, ne_bad) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "ne[0] = 33") != NULL);
    mk_gguf_writer_abort(w);
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "t", MK_DTYPE_F32, 5, ne) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "n_dims = 5") != NULL);
    mk_gguf_writer_abort(w);
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "t", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "t", MK_DTYPE_F32, 2, ne) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "duplicate tensor name 't'") != NULL);
    mk_gguf_writer_abort(w);

    /* A write that would cross into the next tensor. */
    uint8_t data[512] = { 0 };
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "a", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "b", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 200) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 100) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "tensor 'a': write of 100 bytes exceeds the 56 bytes") != NULL);
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(!file_exists(path));

    /* Too few bytes: finish fails and removes the file. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "a", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "b", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 256) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 10) == MK_OK);
    MK_CHECK(file_exists(path));
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(err.msg, "tensor 'b' got 10 of its 256 bytes") != NULL);
    MK_CHECK(!file_exists(path));

    /* Bytes after the last tensor. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "a", MK_DTYPE_F32, 2, ne) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 256) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 1) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(mk_gguf_writer_error(w)->msg, "after the last tensor") != NULL);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "late", MK_DTYPE_F32, 2, ne) == MK_ERR_INVALID_ARG);
    mk_gguf_writer_abort(w);
    MK_CHECK(!file_exists(path));

    /* Custom alignment is honoured; an empty file is valid. */
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_kv_u32(w, "general.alignment", 256) == MK_OK);
    uint64_t ne1[1] = { 3 };
    MK_CHECK(mk_gguf_writer_add_tensor(w, "a", MK_DTYPE_F32, 1, ne1) == MK_OK);
    MK_CHECK(mk_gguf_writer_add_tensor(w, "b", MK_DTYPE_F32, 1, ne1) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 12) == MK_OK);
    MK_CHECK(mk_gguf_writer_write_data(w, data, 12) == MK_OK);
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_OK);
    struct mk_gguf *g = NULL;
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_OK);
    if (g) {
        MK_CHECK(mk_gguf_alignment(g) == 256 && mk_gguf_data_offset(g) == 256);
        MK_CHECK(mk_gguf_find_tensor(g, "b")->offset == 256 && mk_gguf_file_size(g) == 768);
        mk_gguf_close(g);
    }
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_OK);
    MK_CHECK(mk_gguf_open(path, &g, &err) == MK_OK);
    if (g) {
        MK_CHECK(mk_gguf_file_size(g) == 24 && mk_gguf_kv_count(g) == 0 && mk_gguf_tensor_count(g) == 0);
        mk_gguf_close(g);
    }
    unlink(path);
}

/* ---- Real model files ---- */

/* Re-emits g through the writer, in the same order; llama.cpp produced these files, so a byte
 * match shows the writer's layout is llama.cpp's. */
static void rewrite_and_compare(const struct mk_gguf *g, const char *orig_path) {
    char path[512];
    tmp_path(path, sizeof path, "rewrite.gguf");
    struct mk_gguf_writer *w = NULL;
    struct mk_error err;
    MK_CHECK(mk_gguf_writer_create(path, &w, &err) == MK_OK);
    if (!w) return;
    bool ok = true;
    for (uint64_t i = 0; ok && i < mk_gguf_kv_count(g); i++) {
        const struct mk_gguf_kv *kv = mk_gguf_kv_at(g, i);
        char *key = strndup(kv->key.data, kv->key.len);
        enum mk_status st = MK_ERR_INTERNAL;
        if (kv->type == MK_GGUF_UINT32) {
            st = mk_gguf_writer_kv_u32(w, key, (uint32_t)kv->v.u64);
        } else if (kv->type == MK_GGUF_INT32) {
            st = mk_gguf_writer_kv_i32(w, key, (int32_t)kv->v.i64);
        } else if (kv->type == MK_GGUF_FLOAT32) {
            st = mk_gguf_writer_kv_f32(w, key, (float)kv->v.f64);
        } else if (kv->type == MK_GGUF_BOOL) {
            st = mk_gguf_writer_kv_bool(w, key, kv->v.u64 != 0);
        } else if (kv->type == MK_GGUF_STRING) {
            char *v = strndup(kv->v.str.data, kv->v.str.len);
            st = mk_gguf_writer_kv_str(w, key, v);
            free(v);
        } else if (kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_STRING) {
            char **v = calloc(kv->v.arr.n + 1, sizeof *v);
            for (uint64_t j = 0; j < kv->v.arr.n; j++) v[j] = strndup(kv->v.arr.strs[j].data, kv->v.arr.strs[j].len);
            st = mk_gguf_writer_kv_arr_str(w, key, (const char *const *)v, kv->v.arr.n);
            for (uint64_t j = 0; j < kv->v.arr.n; j++) free(v[j]);
            free(v);
        } else if (kv->type == MK_GGUF_ARRAY &&
                   (kv->v.arr.elem_type == MK_GGUF_FLOAT32 || kv->v.arr.elem_type == MK_GGUF_INT32)) {
            void *v = malloc(kv->v.arr.n * 4 + 4);
            memcpy(v, kv->v.arr.data, kv->v.arr.n * 4);
            st = kv->v.arr.elem_type == MK_GGUF_FLOAT32 ? mk_gguf_writer_kv_arr_f32(w, key, v, kv->v.arr.n)
                                                        : mk_gguf_writer_kv_arr_i32(w, key, v, kv->v.arr.n);
            free(v);
        } else {
            fprintf(stderr, "%s: key %s has a type the writer lacks\n", orig_path, key);
        }
        if (st != MK_OK) {
            fprintf(stderr, "%s: rewriting key %s failed: %s\n", orig_path, key, mk_gguf_writer_error(w)->msg);
            ok = false;
        }
        free(key);
    }
    for (uint64_t i = 0; ok && i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        char *name = strndup(t->name.data, t->name.len);
        ok = mk_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne) == MK_OK;
        free(name);
    }
    for (uint64_t i = 0; ok && i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        for (uint64_t done = 0; ok && done < t->n_bytes; done += 4096) {
            size_t n = (size_t)(t->n_bytes - done < 4096 ? t->n_bytes - done : 4096);
            ok = mk_gguf_writer_write_data(w, (const uint8_t *)t->data + done, n) == MK_OK;
        }
    }
    MK_CHECK(ok);
    if (!ok) {
        mk_gguf_writer_abort(w);
        return;
    }
    MK_CHECK(mk_gguf_writer_finish(w, &err) == MK_OK);
    size_t a_n = 0, b_n = 0;
    uint8_t *a = mk_test_read_file(orig_path, &a_n), *b = mk_test_read_file(path, &b_n);
    MK_CHECK(a && b);
    /* Files without tensors written by gguf-py stop at the header; mk pads like llama.cpp's C
     * writer only when a data section follows, so those match exactly too. */
    bool same = a && b && a_n == b_n && memcmp(a, b, a_n) == 0;
    if (!same) fprintf(stderr, "%s: rewrite differs (%zu vs %zu bytes)\n", orig_path, a_n, b_n);
    MK_CHECK(same);
    free(a);
    free(b);
    unlink(path);
}

struct model_expect {
    const char *file;
    uint64_t n_tensors, n_kv, data_offset;
    uint64_t n_tokens;
};

static void test_models(void) {
    const char *dir = mk_test_models_dir("stories260K-f32.gguf");
    if (!dir) {
        printf("SKIP: models dir not found (set MK_MODELS_DIR); real-file checks not run\n");
        return;
    }
    static const struct model_expect ex[] = {
        { "stories260K-f32.gguf", 48, 19, 14176, 512 },
        { "llama-2-tiny-random.gguf", 12, 18, 724416, 32000 },
        { "ggml-vocab-llama-spm.gguf", 0, 22, 723872, 32000 },
        { "ggml-vocab-gpt-2.gguf", 0, 16, 1766816, 50257 },
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, ex[i].file);
        struct mk_gguf *g = NULL;
        struct mk_error err;
        if (mk_gguf_open(path, &g, &err) != MK_OK) {
            mk_test_fail("%s: %s", path, err.msg);
            continue;
        }
        MK_CHECK(mk_gguf_version(g) == 3);
        MK_CHECK(mk_gguf_tensor_count(g) == ex[i].n_tensors);
        MK_CHECK(mk_gguf_kv_count(g) == ex[i].n_kv);
        MK_CHECK(mk_gguf_alignment(g) == 32);
        MK_CHECK(mk_gguf_data_offset(g) == ex[i].data_offset);
        const struct mk_gguf_kv *tok = mk_gguf_find_kv(g, "tokenizer.ggml.tokens");
        MK_CHECK(tok && tok->v.arr.n == ex[i].n_tokens);
        (void)touch_all(g);
        rewrite_and_compare(g, path);
        /* Prefixes of the header region fail cleanly. */
        size_t whole_n = 0;
        uint8_t *whole = mk_test_read_file(path, &whole_n);
        MK_CHECK(whole && whole_n == mk_gguf_file_size(g));
        size_t hdr = whole_n < 20000 ? whole_n : 20000;
        int n_ok = 0, n_err = 0;
        for (size_t len = 0; whole && len < hdr; len += (len < 4096 ? 1 : 7)) parse_mutant(whole, len, &n_ok, &n_err);
        MK_CHECK(n_ok == 0 && n_err > 0);
        free(whole);
        mk_gguf_close(g);
        printf("%s: read, rewritten byte-identically, %d header prefixes rejected\n", ex[i].file, n_err);
    }

    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", dir);
    struct mk_gguf *g = NULL;
    struct mk_error err;
    if (mk_gguf_open(path, &g, &err) != MK_OK) return;
    uint32_t u = 0;
    struct mk_gguf_str s;
    MK_CHECK(mk_gguf_get_str(g, "general.architecture", &s, &err) == MK_OK && mk_gguf_str_eq(s, "llama"));
    MK_CHECK(mk_gguf_get_u32(g, "llama.embedding_length", &u, &err) == MK_OK && u == 64);
    MK_CHECK(mk_gguf_get_u32(g, "llama.feed_forward_length", &u, &err) == MK_OK && u == 172);
    MK_CHECK(mk_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u, &err) == MK_OK && u == UINT32_MAX);
    float eps = 0;
    MK_CHECK(mk_gguf_get_f32_opt(g, "llama.attention.layer_norm_rms_epsilon", &eps, &err) == MK_OK && eps == 1e-5f);
    const struct mk_gguf_tensor *t = mk_gguf_find_tensor(g, "token_embd.weight");
    MK_CHECK(t && t->type == MK_DTYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->offset == 0);
    t = mk_gguf_find_tensor(g, "blk.4.ffn_norm.weight");
    MK_CHECK(t && t->ne[0] == 64 && t->offset == 1170944);
    MK_CHECK(t && t->offset + t->n_bytes == mk_gguf_file_size(g) - mk_gguf_data_offset(g));
    mk_gguf_close(g);
}

int main(void) {
    test_header_cases();
    test_string_cases();
    test_value_cases();
    test_known_key_cases();
    test_tensor_cases();
    test_open_file_cases();
    test_many_entries();
    printf("hostile cases: %d\n", g_hostile_cases);
    test_valid(3);
    test_valid(2);
    test_truncation_sweep();
    test_corruption_sweeps();
    test_writer_round_trip();
    test_writer_errors();
    test_models();
    return mk_test_finish("gguf_test");
}
