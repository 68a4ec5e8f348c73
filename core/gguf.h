/* GGUF v2/v3 reader: the file read once into private read-only memory, then zero-copy over it, every read bounded. */
#ifndef MK_GGUF_H
#define MK_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mk_gguf_type {
    MK_GGUF_UINT8 = 0,
    MK_GGUF_INT8 = 1,
    MK_GGUF_UINT16 = 2,
    MK_GGUF_INT16 = 3,
    MK_GGUF_UINT32 = 4,
    MK_GGUF_INT32 = 5,
    MK_GGUF_FLOAT32 = 6,
    MK_GGUF_BOOL = 7,
    MK_GGUF_STRING = 8,
    MK_GGUF_ARRAY = 9,
    MK_GGUF_UINT64 = 10,
    MK_GGUF_INT64 = 11,
    MK_GGUF_FLOAT64 = 12,
};

#define MK_GGUF_MAX_DIMS          4
#define MK_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapped file: not NUL-terminated. */
struct mk_gguf_str {
    uint64_t len;
    const char *data;
};

struct mk_gguf_kv {
    struct mk_gguf_str key;
    enum mk_gguf_type type;
    union {
        uint64_t u64; /* UINT8..UINT64 and BOOL, zero-extended */
        int64_t i64;  /* INT8..INT64, sign-extended */
        double f64;   /* FLOAT32 and FLOAT64 */
        struct mk_gguf_str str;
        struct {
            enum mk_gguf_type elem_type;
            uint64_t n;
            const void *data;               /* packed elements (numeric arrays) */
            const struct mk_gguf_str *strs; /* n entries when elem_type is STRING */
        } arr;
    } v;
};

struct mk_gguf_tensor {
    struct mk_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[MK_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;                 /* ggml type id; always one mk_dtype_get() knows */
    uint64_t offset;               /* relative to the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data; /* inside the map */
};

struct mk_gguf;

/* Reads path into private read-only memory and parses it. Errors name the file, the field and the
 * value. The file is read, not mapped, so that one truncated or rewritten later cannot reach mk
 * (a map would fault with SIGBUS); one that shrinks or changes while it is read is MK_ERR_IO. */
enum mk_status mk_gguf_open(const char *path, struct mk_gguf **out, struct mk_error *err);

/* How mk_gguf_open_ex reads the file. All zero is mk_gguf_open. */
struct mk_gguf_open_params {
    const int *cancel;    /* read between chunks; once nonzero the open fails with MK_ERR_CANCELLED */
    uint32_t chunk_bytes; /* bytes per read call; 0 = 64 MiB */
    /* Test only: called after each chunk with the bytes read so far (tests truncate the file here). */
    void (*on_chunk)(void *user, uint64_t done, uint64_t size);
    void *user;
};
enum mk_status mk_gguf_open_ex(const char *path, const struct mk_gguf_open_params *p, struct mk_gguf **out,
                               struct mk_error *err);
/* Parses a buffer the caller keeps alive (tests, fuzzer). name is used in messages. */
enum mk_status mk_gguf_open_memory(const void *data, size_t size, const char *name, struct mk_gguf **out,
                                   struct mk_error *err);
void mk_gguf_close(struct mk_gguf *g);

uint32_t mk_gguf_version(const struct mk_gguf *g);
const char *mk_gguf_path(const struct mk_gguf *g);
uint64_t mk_gguf_alignment(const struct mk_gguf *g);
uint64_t mk_gguf_data_offset(const struct mk_gguf *g);
uint64_t mk_gguf_file_size(const struct mk_gguf *g);

uint64_t mk_gguf_kv_count(const struct mk_gguf *g);
const struct mk_gguf_kv *mk_gguf_kv_at(const struct mk_gguf *g, uint64_t i);
const struct mk_gguf_kv *mk_gguf_find_kv(const struct mk_gguf *g, const char *key);

uint64_t mk_gguf_tensor_count(const struct mk_gguf *g);
const struct mk_gguf_tensor *mk_gguf_tensor_at(const struct mk_gguf *g, uint64_t i);
const struct mk_gguf_tensor *mk_gguf_find_tensor(const struct mk_gguf *g, const char *name);

/* Typed getters: MK_OK, or MK_ERR_FORMAT naming the key when it is present with the wrong type,
 * or MK_ERR_FORMAT "missing" when absent and required. The *_opt forms leave *out alone when
 * the key is absent and return MK_OK. Integer getters accept any integer type whose value fits. */
enum mk_status mk_gguf_get_u32(const struct mk_gguf *g, const char *key, uint32_t *out, struct mk_error *err);
enum mk_status mk_gguf_get_u32_opt(const struct mk_gguf *g, const char *key, uint32_t *out, struct mk_error *err);
enum mk_status mk_gguf_get_f32_opt(const struct mk_gguf *g, const char *key, float *out, struct mk_error *err);
enum mk_status mk_gguf_get_str(const struct mk_gguf *g, const char *key, struct mk_gguf_str *out, struct mk_error *err);
enum mk_status mk_gguf_get_str_opt(const struct mk_gguf *g, const char *key, struct mk_gguf_str *out,
                                   struct mk_error *err);

/* True when s equals the NUL-terminated c. */
bool mk_gguf_str_eq(struct mk_gguf_str s, const char *c);
const char *mk_gguf_type_name(enum mk_gguf_type t);

/* ---- Writer: streams a GGUF v3 file to disk, tensors written one at a time. ---- */
struct mk_gguf_writer;

enum mk_status mk_gguf_writer_create(const char *path, struct mk_gguf_writer **out, struct mk_error *err);
/* Metadata, in order; all before the first tensor info. */
enum mk_status mk_gguf_writer_kv_u32(struct mk_gguf_writer *w, const char *key, uint32_t v);
enum mk_status mk_gguf_writer_kv_i32(struct mk_gguf_writer *w, const char *key, int32_t v);
enum mk_status mk_gguf_writer_kv_f32(struct mk_gguf_writer *w, const char *key, float v);
enum mk_status mk_gguf_writer_kv_bool(struct mk_gguf_writer *w, const char *key, bool v);
enum mk_status mk_gguf_writer_kv_str(struct mk_gguf_writer *w, const char *key, const char *v);
/* strs: n NUL-terminated strings. */
enum mk_status mk_gguf_writer_kv_arr_str(struct mk_gguf_writer *w, const char *key, const char *const *strs,
                                         uint64_t n);
enum mk_status mk_gguf_writer_kv_arr_f32(struct mk_gguf_writer *w, const char *key, const float *v, uint64_t n);
enum mk_status mk_gguf_writer_kv_arr_i32(struct mk_gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Declares a tensor (name, ggml type, ne[0..n_dims)). Every tensor is declared before the first
 * write_data; data then comes in declaration order. */
enum mk_status mk_gguf_writer_add_tensor(struct mk_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                         const uint64_t *ne);
/* Appends bytes of the current tensor's data; after a tensor's last byte the writer pads to the
 * alignment. May be called several times per tensor (streaming rows). */
enum mk_status mk_gguf_writer_write_data(struct mk_gguf_writer *w, const void *data, size_t n);
/* Checks every declared tensor got exactly its bytes, flushes and closes. Always frees the writer
 * (never call abort after it); on failure the partial file is removed. */
enum mk_status mk_gguf_writer_finish(struct mk_gguf_writer *w, struct mk_error *err);
/* Frees without finishing (on error paths); removes the partial file. */
void mk_gguf_writer_abort(struct mk_gguf_writer *w);
/* Last error of a writer call that returned non-OK. Errors are sticky: after one failure every
 * later call returns it, so streaming code may check once at the end. */
const struct mk_error *mk_gguf_writer_error(const struct mk_gguf_writer *w);

#ifdef __cplusplus
}
#endif
#endif
