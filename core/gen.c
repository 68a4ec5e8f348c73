/* Synthetic Llama GGUF writer and GGUF requantizer: counter-based random weights streamed row by row. */
#include "core/gen.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/gguf.h"

/* Rows are produced and written in chunks of about this many output bytes. */
#define MK_GEN_CHUNK_BYTES ((size_t)4 << 20)
/* A worker gets at least this many elements of a chunk (fewer are not worth a thread). */
#define MK_GEN_THREAD_MIN_ELEMS 65536
/* Most workers a chunk of rows is cut into (--threads). */
#define MK_GEN_MAX_THREADS 64u
#define MK_GEN_NAME_CAP    48

/* llama.cpp LLAMA_FTYPE_* values for general.file_type. */
enum {
    MK_FTYPE_ALL_F32 = 0,
    MK_FTYPE_MOSTLY_F16 = 1,
    MK_FTYPE_MOSTLY_Q4_0 = 2,
    MK_FTYPE_MOSTLY_Q4_1 = 3,
    MK_FTYPE_MOSTLY_Q8_0 = 7,
    MK_FTYPE_MOSTLY_Q5_0 = 8,
    MK_FTYPE_MOSTLY_Q5_1 = 9,
    MK_FTYPE_MOSTLY_Q2_K = 10,
    MK_FTYPE_MOSTLY_Q3_K_S = 11,
    MK_FTYPE_MOSTLY_Q3_K_M = 12,
    MK_FTYPE_MOSTLY_Q3_K_L = 13,
    MK_FTYPE_MOSTLY_Q4_K_S = 14,
    MK_FTYPE_MOSTLY_Q4_K_M = 15,
    MK_FTYPE_MOSTLY_Q5_K_S = 16,
    MK_FTYPE_MOSTLY_Q5_K_M = 17,
    MK_FTYPE_MOSTLY_Q6_K = 18,
    MK_FTYPE_MOSTLY_IQ4_NL = 25,
    MK_FTYPE_MOSTLY_IQ4_XS = 30,
    MK_FTYPE_MOSTLY_BF16 = 32,
};

/* SentencePiece token types, as llama.cpp numbers them. */
enum { MK_TOKEN_NORMAL = 1, MK_TOKEN_UNKNOWN = 2, MK_TOKEN_CONTROL = 3, MK_TOKEN_BYTE = 6 };

static const struct mk_gen_preset mk_gen_presets[] = {
    /* name, n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx, rope_base, tied */
    { "tiny", 256, 768, 4, 8, 4, 512, 2048, 10000.0f, true },
    { "llama-1b", 2048, 8192, 16, 32, 8, 128256, 131072, 500000.0f, true },
    { "llama-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, false },
    /* Llama-3-8B's head size (128, the common one of 7-8B models) and its separate head, tiny */
    { "tiny-hd128", 512, 1024, 2, 4, 2, 512, 2048, 10000.0f, false },
    /* Llama-3's four query heads a KV head (head size 64), tiny: the GPU attention's sharing of a KV
     * head's query heads over its split tasks at g = 4, which the other tiny presets (two) miss */
    { "tiny-gqa4", 512, 1024, 2, 8, 2, 512, 2048, 10000.0f, true },
};

struct mk_gen_params mk_gen_default_params(void) {
    return (struct mk_gen_params){
        .preset = "tiny", .dtype = "f32", .seed = 42, .progress = false, .chat_template = NULL, .eot_id = -1
    };
}

const char mk_gen_preset_names[] = "tiny, llama-1b, llama-8b, tiny-hd128, tiny-gqa4";

const struct mk_gen_preset *mk_gen_find_preset(const char *name) {
    for (size_t i = 0; name && i < sizeof mk_gen_presets / sizeof mk_gen_presets[0]; i++)
        if (!strcmp(mk_gen_presets[i].name, name)) return &mk_gen_presets[i];
    return NULL;
}

/* ---- formats ---- */

/* Per weight type: the file type of a file with every matrix in it (--pure in llama-quantize). */
static const struct {
    enum mk_dtype type;
    uint32_t ftype;
} mk_gen_pure_ftypes[] = {
    { MK_DTYPE_F32, MK_FTYPE_ALL_F32 },          { MK_DTYPE_F16, MK_FTYPE_MOSTLY_F16 },
    { MK_DTYPE_BF16, MK_FTYPE_MOSTLY_BF16 },     { MK_DTYPE_Q4_0, MK_FTYPE_MOSTLY_Q4_0 },
    { MK_DTYPE_Q4_1, MK_FTYPE_MOSTLY_Q4_1 },     { MK_DTYPE_Q5_0, MK_FTYPE_MOSTLY_Q5_0 },
    { MK_DTYPE_Q5_1, MK_FTYPE_MOSTLY_Q5_1 },     { MK_DTYPE_Q8_0, MK_FTYPE_MOSTLY_Q8_0 },
    { MK_DTYPE_Q2_K, MK_FTYPE_MOSTLY_Q2_K },     { MK_DTYPE_Q3_K, MK_FTYPE_MOSTLY_Q3_K_S },
    { MK_DTYPE_Q4_K, MK_FTYPE_MOSTLY_Q4_K_S },   { MK_DTYPE_Q5_K, MK_FTYPE_MOSTLY_Q5_K_S },
    { MK_DTYPE_Q6_K, MK_FTYPE_MOSTLY_Q6_K },     { MK_DTYPE_IQ4_NL, MK_FTYPE_MOSTLY_IQ4_NL },
    { MK_DTYPE_IQ4_XS, MK_FTYPE_MOSTLY_IQ4_XS },
};

/* llama.cpp's quantized file types, by their LLAMA_FTYPE_MOSTLY_ names, with the default type. */
static const struct {
    const char *name;
    enum mk_dtype type;
    uint32_t ftype;
} mk_gen_mixes[] = {
    { "Q4_0", MK_DTYPE_Q4_0, MK_FTYPE_MOSTLY_Q4_0 },       { "Q4_1", MK_DTYPE_Q4_1, MK_FTYPE_MOSTLY_Q4_1 },
    { "Q5_0", MK_DTYPE_Q5_0, MK_FTYPE_MOSTLY_Q5_0 },       { "Q5_1", MK_DTYPE_Q5_1, MK_FTYPE_MOSTLY_Q5_1 },
    { "Q8_0", MK_DTYPE_Q8_0, MK_FTYPE_MOSTLY_Q8_0 },       { "Q2_K", MK_DTYPE_Q2_K, MK_FTYPE_MOSTLY_Q2_K },
    { "Q3_K_S", MK_DTYPE_Q3_K, MK_FTYPE_MOSTLY_Q3_K_S },   { "Q3_K_M", MK_DTYPE_Q3_K, MK_FTYPE_MOSTLY_Q3_K_M },
    { "Q3_K_L", MK_DTYPE_Q3_K, MK_FTYPE_MOSTLY_Q3_K_L },   { "Q4_K_S", MK_DTYPE_Q4_K, MK_FTYPE_MOSTLY_Q4_K_S },
    { "Q4_K_M", MK_DTYPE_Q4_K, MK_FTYPE_MOSTLY_Q4_K_M },   { "Q5_K_S", MK_DTYPE_Q5_K, MK_FTYPE_MOSTLY_Q5_K_S },
    { "Q5_K_M", MK_DTYPE_Q5_K, MK_FTYPE_MOSTLY_Q5_K_M },   { "Q6_K", MK_DTYPE_Q6_K, MK_FTYPE_MOSTLY_Q6_K },
    { "IQ4_NL", MK_DTYPE_IQ4_NL, MK_FTYPE_MOSTLY_IQ4_NL }, { "IQ4_XS", MK_DTYPE_IQ4_XS, MK_FTYPE_MOSTLY_IQ4_XS },
};

const char mk_gen_format_names[] =
    "every matrix in one type: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, "
    "iq4_xs; llama.cpp's mixes: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, "
    "Q5_K_M, Q6_K, IQ4_NL, IQ4_XS (names with _S/_M/_L also in lowercase)";

int mk_gen_parse_format(const char *name, struct mk_gen_format *out) {
    if (!name) return -1;
    /* Capitals name llama.cpp's file types; a lowercase type name is that type throughout. A
     * suffixed name cannot be a type, so q4_k_m is accepted too. */
    const size_t len = strlen(name);
    const bool suffixed = len > 2 && name[len - 2] == '_' && strchr("SMLsml", name[len - 1]);
    for (size_t i = 0; i < sizeof mk_gen_mixes / sizeof mk_gen_mixes[0]; i++) {
        if (suffixed ? !strcasecmp(name, mk_gen_mixes[i].name) : !strcmp(name, mk_gen_mixes[i].name)) {
            *out = (struct mk_gen_format){ .type = mk_gen_mixes[i].type, .ftype = mk_gen_mixes[i].ftype, .mix = true };
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof mk_gen_pure_ftypes / sizeof mk_gen_pure_ftypes[0]; i++) {
        if (!strcmp(name, mk_dtype_get(mk_gen_pure_ftypes[i].type)->name)) {
            *out = (struct mk_gen_format){ .type = mk_gen_pure_ftypes[i].type, .ftype = mk_gen_pure_ftypes[i].ftype };
            return 0;
        }
    }
    return -1;
}

static bool mk_gen_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* llama.cpp's choice of layers that get more bits in the K-quant mixes. */
static bool mk_gen_use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

/* llama-quantize's type for a layer matrix of a mix (llama_tensor_get_type_impl for the llama
 * arch without experts; the 70B-only attn_v bump is left out). il is the layer, n its count. */
static enum mk_dtype mk_gen_mix_layer_type(uint32_t ftype, enum mk_dtype t, const char *name, int il, int n,
                                           uint32_t n_gqa) {
    if (mk_gen_ends_with(name, ".attn_v.weight")) {
        switch (ftype) {
        case MK_FTYPE_MOSTLY_Q2_K: return n_gqa >= 4 ? MK_DTYPE_Q4_K : MK_DTYPE_Q3_K;
        case MK_FTYPE_MOSTLY_Q3_K_M: return il < 2 ? MK_DTYPE_Q5_K : MK_DTYPE_Q4_K;
        case MK_FTYPE_MOSTLY_Q3_K_L: return MK_DTYPE_Q5_K;
        case MK_FTYPE_MOSTLY_IQ4_NL:
        case MK_FTYPE_MOSTLY_IQ4_XS: return n_gqa >= 4 ? MK_DTYPE_Q5_K : t;
        case MK_FTYPE_MOSTLY_Q4_K_M:
        case MK_FTYPE_MOSTLY_Q5_K_M: return mk_gen_use_more_bits(il, n) ? MK_DTYPE_Q6_K : t;
        case MK_FTYPE_MOSTLY_Q4_K_S: return il < 4 ? MK_DTYPE_Q5_K : t;
        default: return t;
        }
    }
    if (mk_gen_ends_with(name, ".ffn_down.weight")) {
        switch (ftype) {
        case MK_FTYPE_MOSTLY_Q2_K: return MK_DTYPE_Q3_K;
        case MK_FTYPE_MOSTLY_Q3_K_M: return il < n / 16 ? MK_DTYPE_Q5_K : MK_DTYPE_Q4_K;
        case MK_FTYPE_MOSTLY_Q3_K_L: return MK_DTYPE_Q5_K;
        case MK_FTYPE_MOSTLY_Q4_K_M:
        case MK_FTYPE_MOSTLY_Q5_K_M: return mk_gen_use_more_bits(il, n) ? MK_DTYPE_Q6_K : t;
        case MK_FTYPE_MOSTLY_IQ4_NL:
        case MK_FTYPE_MOSTLY_IQ4_XS:
        case MK_FTYPE_MOSTLY_Q4_K_S: return il < n / 8 ? MK_DTYPE_Q5_K : t;
        default: return t;
        }
    }
    if (mk_gen_ends_with(name, ".attn_output.weight")) {
        switch (ftype) {
        case MK_FTYPE_MOSTLY_Q2_K: return MK_DTYPE_Q3_K;
        case MK_FTYPE_MOSTLY_Q3_K_M: return MK_DTYPE_Q4_K;
        case MK_FTYPE_MOSTLY_Q3_K_L: return MK_DTYPE_Q5_K;
        default: return t;
        }
    }
    return t;
}

static enum mk_dtype mk_gen_fallback(enum mk_dtype t, int64_t cols);

enum mk_dtype mk_gen_tensor_type(struct mk_gen_format f, const char *name, uint32_t n_dims, int64_t cols,
                                 struct mk_gen_model_shape shape) {
    if (n_dims < 2) return MK_DTYPE_F32;
    enum mk_dtype t = f.type;
    const bool quantized = t != MK_DTYPE_F32 && t != MK_DTYPE_F16 && t != MK_DTYPE_BF16;
    if (f.mix && quantized) {
        unsigned layer;
        const bool is_head =
            !strcmp(name, "output.weight") || (!shape.has_output && !strcmp(name, "token_embd.weight"));
        if (is_head) {
            if (cols % mk_dtype_get(t)->block_size)
                t = MK_DTYPE_Q8_0;
            else if (t != MK_DTYPE_Q8_0)
                t = MK_DTYPE_Q6_K;
        } else if (sscanf(name, "blk.%u.", &layer) == 1 && layer < shape.n_layer) {
            t = mk_gen_mix_layer_type(f.ftype, t, name, (int)layer, (int)shape.n_layer, shape.n_gqa);
        }
    }
    return mk_gen_fallback(t, cols);
}

/* As llama.cpp's tensor_type_fallback: a smaller block of about as many bits, then f16. */
static enum mk_dtype mk_gen_fallback(enum mk_dtype t, int64_t cols) {
    if (cols % mk_dtype_get(t)->block_size) {
        switch (t) {
        case MK_DTYPE_IQ4_XS: t = MK_DTYPE_IQ4_NL; break;
        case MK_DTYPE_Q2_K:
        case MK_DTYPE_Q3_K: t = MK_DTYPE_Q4_0; break;
        case MK_DTYPE_Q4_K: t = MK_DTYPE_Q5_0; break;
        case MK_DTYPE_Q5_K: t = MK_DTYPE_Q5_1; break;
        case MK_DTYPE_Q6_K: t = MK_DTYPE_Q8_0; break;
        default: break;
        }
        if (cols % mk_dtype_get(t)->block_size) t = MK_DTYPE_F16;
    }
    return t;
}

struct mk_gen_quantize_params mk_gen_quantize_default_params(void) {
    return (struct mk_gen_quantize_params){ .output_type = -1, .token_embd_type = -1 };
}

enum mk_dtype mk_gen_quantize_type(const struct mk_gen_quantize_params *p, struct mk_gen_format f, const char *name,
                                   uint32_t n_dims, int64_t cols, struct mk_gen_model_shape shape) {
    if (n_dims < 2) return MK_DTYPE_F32;
    const bool embd = !strcmp(name, "token_embd.weight");
    const bool head = !strcmp(name, "output.weight") || (!shape.has_output && embd);
    /* As llama-quantize: the embedding's own choice first, then the head's (which a tied embedding
     * is), then the overrides. */
    if (embd && p->token_embd_type >= 0) return mk_gen_fallback((enum mk_dtype)p->token_embd_type, cols);
    if (head && p->output_type >= 0) return mk_gen_fallback((enum mk_dtype)p->output_type, cols);
    for (uint32_t i = 0; i < p->n_overrides; i++)
        if (p->overrides[i].part && strstr(name, p->overrides[i].part))
            return mk_gen_fallback(p->overrides[i].type, cols);
    return mk_gen_tensor_type(f, name, n_dims, cols, shape);
}

/* ---- values ---- */

#define MK_GEN_GOLDEN 0x9e3779b97f4a7c15ULL

static uint64_t mk_gen_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t mk_gen_hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

void mk_gen_tensor_values(uint64_t seed, const char *name, int64_t cols, uint64_t first, uint64_t n, float *out) {
    const uint64_t key = mk_gen_mix64(seed * MK_GEN_GOLDEN ^ mk_gen_mix64(mk_gen_hash_name(name)));
    const bool norm = mk_gen_ends_with(name, "norm.weight");
    const double offset = norm ? 1.0 : 0.0;
    const double scale = (norm ? 0.1 : 1.0 / sqrt((double)(cols > 0 ? cols : 1))) * (1.7320508075688772 / 65536.0);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = mk_gen_mix64(key + (first + i + 1) * MK_GEN_GOLDEN);
        /* Sum of four 16-bit uniforms: mean 131070, standard deviation about 65536/sqrt(3). */
        uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                     (uint32_t)(r >> 48);
        out[i] = (float)(offset + scale * ((double)s - 131070.0));
    }
}

/* ---- streaming ---- */

struct mk_gen_progress {
    bool on;
    const char *label;
    uint64_t total, done; /* output bytes */
    int last_permille;
};

static void mk_gen_progress_add(struct mk_gen_progress *p, uint64_t n) {
    p->done += n;
    if (!p->on || !p->total) return;
    int pm = (int)(p->done * 1000 / p->total);
    if (pm == p->last_permille) return;
    p->last_permille = pm;
    int width = 40, fill = pm * width / 1000;
    bool gb = p->total >= 1000000000ull;
    double unit = gb ? 1e9 : 1e6;
    fprintf(stderr, "\r%s [%.*s%*s] %5.1f%% %.2f/%.2f %s", p->label, fill, "########################################",
            width - fill, "", pm / 10.0, p->done / unit, p->total / unit, gb ? "GB" : "MB");
    if (p->done >= p->total) fputc('\n', stderr);
    fflush(stderr);
}

/* Rows [row0, row0 + n_rows) of one tensor, from generated values (src NULL) or another format. */
struct mk_gen_rows {
    uint64_t seed;
    const char *name;
    const uint8_t *src; /* (rows, src_row_bytes) or NULL */
    enum mk_dtype src_type;
    uint64_t src_row_bytes;
    int64_t cols;
    enum mk_dtype dst_type;
    uint64_t dst_row_bytes;
    int64_t row0, n_rows;
    uint8_t *dst;   /* (n_rows, dst_row_bytes) */
    float *scratch; /* (cols) */
};

static void *mk_gen_rows_run(void *arg) {
    struct mk_gen_rows *j = arg;
    for (int64_t r = 0; r < j->n_rows; r++) {
        uint64_t row = (uint64_t)(j->row0 + r);
        if (j->src)
            mk_dequantize_row(j->src_type, j->src + row * j->src_row_bytes, j->scratch, j->cols);
        else
            mk_gen_tensor_values(j->seed, j->name, j->cols, row * (uint64_t)j->cols, (uint64_t)j->cols, j->scratch);
        mk_quantize_row(j->dst_type, j->scratch, j->dst + (uint64_t)r * j->dst_row_bytes, j->cols);
    }
    return NULL;
}

struct mk_gen_stream {
    struct mk_gguf_writer *w;
    uint8_t *buf; /* (chunk rows, dst_row_bytes) */
    size_t buf_cap;
    uint32_t n_threads;                 /* workers per chunk, 1 .. MK_GEN_MAX_THREADS */
    float *scratch[MK_GEN_MAX_THREADS]; /* (scratch_cols) per worker */
    int64_t scratch_cols;
    struct mk_gen_progress progress;
};

/* n, or where 0 the online CPUs, within 1 .. MK_GEN_MAX_THREADS. */
static uint32_t mk_gen_threads(uint32_t n) {
    if (!n) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (uint32_t)(c < MK_GEN_MAX_THREADS ? c : MK_GEN_MAX_THREADS) : 1u;
    }
    return n < MK_GEN_MAX_THREADS ? n : MK_GEN_MAX_THREADS;
}

static void mk_gen_stream_free(struct mk_gen_stream *s) {
    free(s->buf);
    for (uint32_t i = 0; i < MK_GEN_MAX_THREADS; i++) free(s->scratch[i]);
}

/* Drops mapped source pages once their rows are written, so requantizing a large model does not
 * keep the whole input resident (the mapping is read-only: pages re-fault from the file). */
static void mk_gen_release_pages(const void *data, uint64_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)data + page - 1) & ~(page - 1), b = ((uintptr_t)data + n) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static enum mk_status mk_gen_writer_failed(struct mk_gguf_writer *w, enum mk_status st, struct mk_error *err) {
    const struct mk_error *we = w ? mk_gguf_writer_error(w) : NULL;
    if (err && we && we->status != MK_OK)
        *err = *we;
    else
        mk_error_set(err, st, "GGUF writer failed: %s", mk_status_str(st));
    return st;
}

/* Appends n bytes; from_map marks bytes of the mapped input, released as they go. */
static enum mk_status mk_gen_write_bytes(struct mk_gen_stream *s, const uint8_t *p, uint64_t n, bool from_map,
                                         struct mk_error *err) {
    while (n) {
        size_t k = n < MK_GEN_CHUNK_BYTES ? (size_t)n : MK_GEN_CHUNK_BYTES;
        enum mk_status st = mk_gguf_writer_write_data(s->w, p, k);
        if (st != MK_OK) return mk_gen_writer_failed(s->w, st, err);
        if (from_map) mk_gen_release_pages(p, k);
        mk_gen_progress_add(&s->progress, k);
        p += k;
        n -= k;
    }
    return MK_OK;
}

/* Produces all `rows` rows of job's tensor, s->n_threads workers per chunk, and appends them to the
 * file. */
static enum mk_status mk_gen_write_rows(struct mk_gen_stream *s, struct mk_gen_rows job, int64_t rows,
                                        struct mk_error *err) {
    const uint32_t nt = s->n_threads ? s->n_threads : 1u;
    if (job.cols > s->scratch_cols) {
        for (uint32_t i = 0; i < nt; i++) {
            free(s->scratch[i]);
            if (!(s->scratch[i] = malloc((size_t)job.cols * sizeof(float))))
                return mk_error_set(err, MK_ERR_NOMEM, "no memory for a row of %lld floats", (long long)job.cols);
        }
        s->scratch_cols = job.cols;
    }
    /* A chunk keeps every worker busy for a while: 4 MB per two workers, at most 32 MB. */
    const size_t chunk_bytes = MK_GEN_CHUNK_BYTES * (nt < 16u ? (nt + 1u) / 2u : 8u);
    int64_t chunk_rows = (int64_t)(chunk_bytes / job.dst_row_bytes);
    if (chunk_rows < 1) chunk_rows = 1;
    if (chunk_rows > rows) chunk_rows = rows;
    size_t need = (size_t)chunk_rows * job.dst_row_bytes;
    if (need > s->buf_cap) {
        free(s->buf);
        if (!(s->buf = malloc(need))) {
            s->buf_cap = 0;
            return mk_error_set(err, MK_ERR_NOMEM, "no memory for %zu bytes of rows", need);
        }
        s->buf_cap = need;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const int64_t n = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
        /* Workers of at least MK_GEN_THREAD_MIN_ELEMS values each; the caller's thread is worker 0,
         * and a worker whose thread does not start runs on the caller's after the others. */
        int64_t workers = n * job.cols / MK_GEN_THREAD_MIN_ELEMS;
        if (workers > (int64_t)nt) workers = nt;
        if (workers > n) workers = n;
        if (workers < 1) workers = 1;
        struct mk_gen_rows part[MK_GEN_MAX_THREADS];
        pthread_t th[MK_GEN_MAX_THREADS];
        bool started[MK_GEN_MAX_THREADS] = { false };
        for (int64_t i = 0, row = r0; i < workers; i++) {
            part[i] = job;
            part[i].row0 = row;
            part[i].n_rows = n / workers + (i < n % workers ? 1 : 0);
            part[i].dst = s->buf + (size_t)(row - r0) * job.dst_row_bytes;
            part[i].scratch = s->scratch[i];
            row += part[i].n_rows;
            if (i > 0) started[i] = pthread_create(&th[i], NULL, mk_gen_rows_run, &part[i]) == 0;
        }
        mk_gen_rows_run(&part[0]);
        for (int64_t i = 1; i < workers; i++) {
            if (started[i])
                pthread_join(th[i], NULL);
            else
                mk_gen_rows_run(&part[i]);
        }
        enum mk_status st = mk_gen_write_bytes(s, s->buf, (uint64_t)n * job.dst_row_bytes, false, err);
        if (st != MK_OK) return st;
        if (job.src) mk_gen_release_pages(job.src + (uint64_t)r0 * job.src_row_bytes, (uint64_t)n * job.src_row_bytes);
    }
    return MK_OK;
}

/* ---- synthetic model ---- */

struct mk_gen_tensor {
    char name[MK_GEN_NAME_CAP];
    uint32_t n_dims;
    int64_t rows, cols; /* rows 1 for 1-D */
    enum mk_dtype type;
};

struct mk_gen_vocab {
    uint32_t n;
    const char **pieces; /* (n) into pool */
    char *pool;
    float *scores;  /* (n) */
    int32_t *types; /* (n) */
};

static void mk_gen_vocab_free(struct mk_gen_vocab *v) {
    free(v->pieces);
    free(v->pool);
    free(v->scores);
    free(v->types);
}

/* <unk>, <s>, </s>, the 256 byte tokens, then "▁", and for lengths 1, 2, ... every lowercase
 * word both with and without the word-start mark, scores descending. All pieces are distinct. */
static enum mk_status mk_gen_vocab_build(uint32_t n, struct mk_gen_vocab *v, struct mk_error *err) {
    const size_t piece_cap = 16; /* "▁" (3 bytes) + up to 8 letters + NUL */
    memset(v, 0, sizeof *v);
    v->n = n;
    if (n < 3 + 256 + 1) return mk_error_set(err, MK_ERR_INVALID_ARG, "vocab of %u tokens is too small", n);
    v->pieces = calloc(n, sizeof *v->pieces);
    v->pool = calloc(n, piece_cap);
    v->scores = calloc(n, sizeof *v->scores);
    v->types = calloc(n, sizeof *v->types);
    if (!v->pieces || !v->pool || !v->scores || !v->types) {
        mk_gen_vocab_free(v);
        return mk_error_set(err, MK_ERR_NOMEM, "no memory for a vocab of %u tokens", n);
    }
    uint32_t k = 0;
#define MK_GEN_PIECE(type_, score_, ...)            \
    do {                                            \
        char *p_ = v->pool + (size_t)k * piece_cap; \
        snprintf(p_, piece_cap, __VA_ARGS__);       \
        v->pieces[k] = p_;                          \
        v->types[k] = (type_);                      \
        v->scores[k] = (score_);                    \
        k++;                                        \
    } while (0)
    MK_GEN_PIECE(MK_TOKEN_UNKNOWN, 0.0f, "<unk>");
    MK_GEN_PIECE(MK_TOKEN_CONTROL, 0.0f, "<s>");
    MK_GEN_PIECE(MK_TOKEN_CONTROL, 0.0f, "</s>");
    for (int b = 0; b < 256; b++) MK_GEN_PIECE(MK_TOKEN_BYTE, 0.0f, "<0x%02X>", b);
    float score = -1.0f;
    MK_GEN_PIECE(MK_TOKEN_NORMAL, score--, "\xe2\x96\x81");
    for (int len = 1; k < n; len++) {
        MK_ASSERT(len <= 8);
        int digit[8] = { 0 };
        for (;;) {
            char word[9];
            for (int i = 0; i < len; i++) word[i] = (char)('a' + digit[i]);
            word[len] = '\0';
            if (k < n) MK_GEN_PIECE(MK_TOKEN_NORMAL, score--, "\xe2\x96\x81%s", word);
            if (k < n) MK_GEN_PIECE(MK_TOKEN_NORMAL, score--, "%s", word);
            if (k >= n) break;
            int i = len - 1;
            while (i >= 0 && ++digit[i] == 26) digit[i--] = 0;
            if (i < 0) break;
        }
    }
#undef MK_GEN_PIECE
    return MK_OK;
}

const char *const mk_gen_chat_tokens[] = {
    "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
};
const unsigned mk_gen_n_chat_tokens = sizeof mk_gen_chat_tokens / sizeof mk_gen_chat_tokens[0];

/* The last pieces give way to the chat markers: the weights depend only on token ids, so a chat
 * model computes exactly what the plain one does, and only the rarest letter pieces are lost. */
static void mk_gen_vocab_add_chat(struct mk_gen_vocab *v) {
    for (unsigned i = 0; i < mk_gen_n_chat_tokens; i++) {
        uint32_t id = v->n - mk_gen_n_chat_tokens + i;
        v->pieces[id] = mk_gen_chat_tokens[i];
        v->types[id] = MK_TOKEN_CONTROL;
        v->scores[id] = 0.0f;
    }
}

#define MK_GEN_TRY(call)                      \
    do {                                      \
        if ((st = (call)) != MK_OK) {         \
            mk_gen_writer_failed(w, st, err); \
            goto fail;                        \
        }                                     \
    } while (0)

static enum mk_status mk_gen_copy_kv(struct mk_gguf_writer *w, const char *in_path, const char *key,
                                     const struct mk_gguf_kv *kv, struct mk_error *err);
static char *mk_gen_strdup(struct mk_gguf_str s);

/* The size of p->vocab_path's vocabulary (its tokenizer.ggml.tokens), checked to be usable. */
static enum mk_status mk_gen_vocab_file_size(const struct mk_gguf *g, const char *path, uint32_t *n,
                                             struct mk_error *err) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!kv || kv->type != MK_GGUF_ARRAY || kv->v.arr.elem_type != MK_GGUF_STRING)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: no tokenizer.ggml.tokens string array to take the vocab from",
                            path);
    if (kv->v.arr.n < 4 || kv->v.arr.n > (1u << 24))
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: tokenizer.ggml.tokens has %llu tokens (4 to 16777216)", path,
                            (unsigned long long)kv->v.arr.n);
    *n = (uint32_t)kv->v.arr.n;
    return MK_OK;
}

/* Copies every tokenizer.* key of g (but the chat template when the caller writes its own). */
static enum mk_status mk_gen_copy_tokenizer(struct mk_gguf_writer *w, const struct mk_gguf *g, const char *path,
                                            bool skip_template, struct mk_error *err) {
    enum mk_status st = MK_OK;
    for (uint64_t i = 0; i < mk_gguf_kv_count(g) && st == MK_OK; i++) {
        const struct mk_gguf_kv *kv = mk_gguf_kv_at(g, i);
        char *key = mk_gen_strdup(kv->key);
        if (!key) return mk_error_set(err, MK_ERR_FORMAT, "%s: a key holds a NUL byte", path);
        if (!strncmp(key, "tokenizer.", 10) && !(skip_template && !strcmp(key, "tokenizer.chat_template")))
            st = mk_gen_copy_kv(w, path, key, kv, err);
        free(key);
    }
    return st;
}

enum mk_status mk_gen_write(const char *path, const struct mk_gen_params *p, struct mk_error *err) {
    struct mk_gen_params def = mk_gen_default_params();
    if (!p) p = &def;
    const struct mk_gen_preset *pr = mk_gen_find_preset(p->preset ? p->preset : def.preset);
    if (!pr) return mk_error_set(err, MK_ERR_INVALID_ARG, "unknown preset '%s' (%s)", p->preset, mk_gen_preset_names);
    struct mk_gen_format fmt;
    const char *dtype = p->dtype ? p->dtype : def.dtype;
    if (mk_gen_parse_format(dtype, &fmt) != 0)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "unknown dtype '%s' (%s)", dtype, mk_gen_format_names);

    enum mk_status st;
    struct mk_gguf_writer *w = NULL;
    struct mk_gen_tensor *ts = NULL;
    struct mk_gen_stream s = { 0 };
    struct mk_gen_vocab voc = { 0 };
    struct mk_gguf *vg = NULL;
    uint32_t n_vocab = pr->n_vocab;
    if (p->vocab_path) {
        if ((st = mk_gguf_open(p->vocab_path, &vg, err)) != MK_OK) return st;
        if ((st = mk_gen_vocab_file_size(vg, p->vocab_path, &n_vocab, err)) != MK_OK) {
            mk_gguf_close(vg);
            return st;
        }
    }
    const uint32_t L = pr->n_layer, head_dim = pr->n_embd / pr->n_head;
    const int64_t e = pr->n_embd, q = (int64_t)pr->n_head * head_dim, kv = (int64_t)pr->n_head_kv * head_dim;
    const int64_t ff = pr->n_ff, nv = n_vocab;
    size_t n_ts = 0, cap = (size_t)9 * L + 3;
    const struct mk_gen_model_shape shape = { .n_layer = L,
                                              .n_gqa = pr->n_head / pr->n_head_kv,
                                              .has_output = !pr->tied_output };

    if (p->eot_id >= 0 && (uint32_t)p->eot_id >= n_vocab) {
        st = mk_error_set(err, MK_ERR_INVALID_ARG, "eot id %d is outside the vocab of %u tokens", (int)p->eot_id,
                          n_vocab);
        goto fail;
    }
    if (!vg) {
        if ((st = mk_gen_vocab_build(pr->n_vocab, &voc, err)) != MK_OK) goto fail;
        if (p->chat_template) mk_gen_vocab_add_chat(&voc);
    }
    if (!(ts = calloc(cap, sizeof *ts))) {
        st = mk_error_set(err, MK_ERR_NOMEM, "no memory for the tensor list");
        goto fail;
    }
#define MK_GEN_ADD(rows_, cols_, ...)                                              \
    do {                                                                           \
        struct mk_gen_tensor *t_ = &ts[n_ts++];                                    \
        snprintf(t_->name, sizeof t_->name, __VA_ARGS__);                          \
        t_->rows = (rows_) ? (rows_) : 1;                                          \
        t_->cols = (cols_);                                                        \
        t_->n_dims = (rows_) ? 2 : 1;                                              \
        t_->type = mk_gen_tensor_type(fmt, t_->name, t_->n_dims, t_->cols, shape); \
    } while (0)
    MK_GEN_ADD(nv, e, "token_embd.weight");
    for (uint32_t l = 0; l < L; l++) {
        MK_GEN_ADD(0, e, "blk.%u.attn_norm.weight", l);
        MK_GEN_ADD(q, e, "blk.%u.attn_q.weight", l);
        MK_GEN_ADD(kv, e, "blk.%u.attn_k.weight", l);
        MK_GEN_ADD(kv, e, "blk.%u.attn_v.weight", l);
        MK_GEN_ADD(e, q, "blk.%u.attn_output.weight", l);
        MK_GEN_ADD(0, e, "blk.%u.ffn_norm.weight", l);
        MK_GEN_ADD(ff, e, "blk.%u.ffn_gate.weight", l);
        MK_GEN_ADD(ff, e, "blk.%u.ffn_up.weight", l);
        MK_GEN_ADD(e, ff, "blk.%u.ffn_down.weight", l);
    }
    MK_GEN_ADD(0, e, "output_norm.weight");
    if (!pr->tied_output) MK_GEN_ADD(nv, e, "output.weight");
#undef MK_GEN_ADD
    MK_ASSERT(n_ts <= cap);

    if ((st = mk_gguf_writer_create(path, &w, err)) != MK_OK) goto fail;
    char name[128], seed_str[32];
    snprintf(name, sizeof name, "mk synthetic %s %s", pr->name, dtype);
    snprintf(seed_str, sizeof seed_str, "%llu", (unsigned long long)p->seed);
    MK_GEN_TRY(mk_gguf_writer_kv_str(w, "general.architecture", "llama"));
    MK_GEN_TRY(mk_gguf_writer_kv_str(w, "general.name", name));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "general.file_type", fmt.ftype));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "general.quantization_version", 2));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.context_length", pr->n_ctx));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.embedding_length", pr->n_embd));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.block_count", pr->n_layer));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.feed_forward_length", pr->n_ff));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.attention.head_count", pr->n_head));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.attention.head_count_kv", pr->n_head_kv));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.rope.dimension_count", head_dim));
    MK_GEN_TRY(mk_gguf_writer_kv_f32(w, "llama.rope.freq_base", pr->rope_base));
    MK_GEN_TRY(mk_gguf_writer_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "llama.vocab_size", n_vocab));
    if (vg) {
        if ((st = mk_gen_copy_tokenizer(w, vg, p->vocab_path, p->chat_template != NULL, err)) != MK_OK) goto fail;
    } else {
        MK_GEN_TRY(mk_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama"));
        MK_GEN_TRY(mk_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", voc.pieces, voc.n));
        MK_GEN_TRY(mk_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", voc.scores, voc.n));
        MK_GEN_TRY(mk_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", voc.types, voc.n));
        MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1));
        MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2));
        MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0));
        MK_GEN_TRY(mk_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true));
        MK_GEN_TRY(mk_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", false));
    }
    if (p->eot_id >= 0) MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)p->eot_id));
    if (p->chat_template) MK_GEN_TRY(mk_gguf_writer_kv_str(w, "tokenizer.chat_template", p->chat_template));
    MK_GEN_TRY(mk_gguf_writer_kv_str(w, "mk.gen.preset", pr->name));
    MK_GEN_TRY(mk_gguf_writer_kv_str(w, "mk.gen.seed", seed_str));

    s.w = w;
    s.progress = (struct mk_gen_progress){ .on = p->progress && isatty(2), .label = "mk gen", .last_permille = -1 };
    s.n_threads = mk_gen_threads(p->n_threads);
    for (size_t i = 0; i < n_ts; i++) {
        uint64_t ne[2] = { (uint64_t)ts[i].cols, (uint64_t)ts[i].rows };
        MK_GEN_TRY(mk_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ne));
        s.progress.total += (uint64_t)ts[i].rows * mk_dtype_row_bytes(ts[i].type, ts[i].cols);
    }
    for (size_t i = 0; i < n_ts; i++) {
        struct mk_gen_rows job = {
            .seed = p->seed,
            .name = ts[i].name,
            .cols = ts[i].cols,
            .dst_type = ts[i].type,
            .dst_row_bytes = mk_dtype_row_bytes(ts[i].type, ts[i].cols),
        };
        if ((st = mk_gen_write_rows(&s, job, ts[i].rows, err)) != MK_OK) goto fail;
    }
    st = mk_gguf_writer_finish(w, err);
    w = NULL; /* finish frees the writer, whatever it returns */
    if (st != MK_OK) goto fail;
    mk_gen_stream_free(&s);
    mk_gen_vocab_free(&voc);
    mk_gguf_close(vg);
    free(ts);
    return MK_OK;
fail:
    if (w) mk_gguf_writer_abort(w);
    if (s.progress.on) fputc('\n', stderr);
    mk_gen_stream_free(&s);
    mk_gen_vocab_free(&voc);
    mk_gguf_close(vg);
    free(ts);
    return st;
}

/* ---- requantization ---- */

/* A NUL-terminated copy of a GGUF string; NULL when it holds a NUL (cannot be passed on). */
static char *mk_gen_strdup(struct mk_gguf_str s) {
    if (memchr(s.data, '\0', s.len)) return NULL;
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.data, s.len);
        c[s.len] = '\0';
    }
    return c;
}

/* Copies one metadata pair into the writer; file_type replaces general.file_type's value. */
static enum mk_status mk_gen_copy_kv(struct mk_gguf_writer *w, const char *in_path, const char *key,
                                     const struct mk_gguf_kv *kv, struct mk_error *err) {
    enum mk_status st = MK_OK;
    char *str = NULL;
    const char **strs = NULL;
    char *pool = NULL;
    void *num = NULL;
    bool own_error = false; /* err already says what failed; otherwise ask the writer */
    switch (kv->type) {
    /* The writer has 32-bit integers only: narrower ones widen, keeping their sign. */
    case MK_GGUF_UINT8:
    case MK_GGUF_UINT16:
    case MK_GGUF_UINT32: st = mk_gguf_writer_kv_u32(w, key, (uint32_t)kv->v.u64); break;
    case MK_GGUF_INT8:
    case MK_GGUF_INT16:
    case MK_GGUF_INT32: st = mk_gguf_writer_kv_i32(w, key, (int32_t)kv->v.i64); break;
    case MK_GGUF_FLOAT32: st = mk_gguf_writer_kv_f32(w, key, (float)kv->v.f64); break;
    case MK_GGUF_BOOL: st = mk_gguf_writer_kv_bool(w, key, kv->v.u64 != 0); break;
    case MK_GGUF_STRING:
        if (!(str = mk_gen_strdup(kv->v.str)))
            return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: key %s: string value holds a NUL byte or no memory",
                                in_path, key);
        st = mk_gguf_writer_kv_str(w, key, str);
        break;
    case MK_GGUF_ARRAY: {
        uint64_t n = kv->v.arr.n;
        if (kv->v.arr.elem_type == MK_GGUF_STRING) {
            size_t total = 0;
            for (uint64_t i = 0; i < n; i++) {
                if (memchr(kv->v.arr.strs[i].data, '\0', kv->v.arr.strs[i].len))
                    return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: key %s: string %llu holds a NUL byte", in_path,
                                        key, (unsigned long long)i);
                total += kv->v.arr.strs[i].len + 1;
            }
            strs = malloc((n ? n : 1) * sizeof *strs);
            pool = malloc(total ? total : 1);
            if (!strs || !pool) {
                st = mk_error_set(err, MK_ERR_NOMEM, "%s: key %s: no memory to copy %llu strings", in_path, key,
                                  (unsigned long long)n);
                own_error = true;
                break;
            }
            char *o = pool;
            for (uint64_t i = 0; i < n; i++) {
                memcpy(o, kv->v.arr.strs[i].data, kv->v.arr.strs[i].len);
                o[kv->v.arr.strs[i].len] = '\0';
                strs[i] = o;
                o += kv->v.arr.strs[i].len + 1;
            }
            st = mk_gguf_writer_kv_arr_str(w, key, strs, n);
        } else if (kv->v.arr.elem_type == MK_GGUF_FLOAT32 || kv->v.arr.elem_type == MK_GGUF_INT32) {
            /* Copied because array data in the file is not aligned for float or int32 access. */
            if (!(num = malloc(n ? n * 4 : 4))) {
                st = mk_error_set(err, MK_ERR_NOMEM, "%s: key %s: no memory to copy %llu values", in_path, key,
                                  (unsigned long long)n);
                own_error = true;
                break;
            }
            memcpy(num, kv->v.arr.data, n * 4);
            st = kv->v.arr.elem_type == MK_GGUF_FLOAT32 ? mk_gguf_writer_kv_arr_f32(w, key, num, n)
                                                        : mk_gguf_writer_kv_arr_i32(w, key, num, n);
        } else {
            return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: key %s: arrays of %s cannot be copied yet", in_path, key,
                                mk_gguf_type_name(kv->v.arr.elem_type));
        }
        break;
    }
    default:
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: key %s: values of type %s cannot be copied yet", in_path, key,
                            mk_gguf_type_name(kv->type));
    }
    if (st != MK_OK && !own_error) mk_gen_writer_failed(w, st, err);
    free(str);
    free(strs);
    free(pool);
    free(num);
    return st;
}

/* Number of blocks: <arch>.block_count, else one more than the highest blk.N in the tensor names. */
static uint32_t mk_gen_count_layers(const struct mk_gguf *g) {
    struct mk_gguf_str arch = { 0, NULL };
    uint32_t n = 0;
    if (mk_gguf_get_str_opt(g, "general.architecture", &arch, NULL) == MK_OK && arch.data && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.data);
        if (mk_gguf_get_u32_opt(g, key, &n, NULL) == MK_OK && n) return n;
    }
    for (uint64_t i = 0; i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        char name[MK_GEN_NAME_CAP];
        unsigned l;
        if (t->name.len >= sizeof name) continue;
        memcpy(name, t->name.data, t->name.len);
        name[t->name.len] = '\0';
        if (sscanf(name, "blk.%u.", &l) == 1 && l + 1 > n) n = l + 1;
    }
    return n;
}

/* An unsigned integer key of g, or def when it is missing or of another type; the mix rules only
 * use it to pick between two types, so a malformed value need not stop quantizing. */
static uint64_t mk_gen_kv_uint(const struct mk_gguf *g, const char *key, uint64_t def) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, key);
    if (!kv) return def;
    switch (kv->type) {
    case MK_GGUF_UINT8:
    case MK_GGUF_UINT16:
    case MK_GGUF_UINT32:
    case MK_GGUF_UINT64: return kv->v.u64;
    case MK_GGUF_INT8:
    case MK_GGUF_INT16:
    case MK_GGUF_INT32:
    case MK_GGUF_INT64: return kv->v.i64 > 0 ? (uint64_t)kv->v.i64 : def;
    default: return def;
    }
}

enum mk_status mk_gen_quantize_file(const char *in_path, const char *out_path, struct mk_gen_quantize_params p,
                                    struct mk_error *err) {
    struct mk_gen_format fmt;
    if (mk_gen_parse_format(p.dtype, &fmt) != 0)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "unknown dtype '%s' (%s)", p.dtype ? p.dtype : "(null)",
                            mk_gen_format_names);
    for (uint32_t i = 0; i < p.n_overrides; i++)
        if (!p.overrides || !p.overrides[i].part || !p.overrides[i].part[0] || !mk_dtype_get(p.overrides[i].type))
            return mk_error_set(err, MK_ERR_INVALID_ARG, "override %u: no tensor name part or no such type", i);
    if ((p.output_type >= 0 && !mk_dtype_get((enum mk_dtype)p.output_type)) ||
        (p.token_embd_type >= 0 && !mk_dtype_get((enum mk_dtype)p.token_embd_type)))
        return mk_error_set(err, MK_ERR_INVALID_ARG, "output type %d or token embedding type %d is no type",
                            p.output_type, p.token_embd_type);
    struct stat si, so;
    if (stat(in_path, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "%s: output and input are the same file", out_path);

    struct mk_gguf *g = NULL;
    struct mk_gguf_writer *w = NULL;
    struct mk_gen_stream s = { 0 };
    enum mk_dtype *types = NULL;
    char *key = NULL;
    enum mk_status st = mk_gguf_open(in_path, &g, err);
    if (st != MK_OK) return st;
    const uint64_t n_kv = mk_gguf_kv_count(g), n_t = mk_gguf_tensor_count(g);
    const uint64_t n_head = mk_gen_kv_uint(g, "llama.attention.head_count", 1);
    const uint64_t n_head_kv = mk_gen_kv_uint(g, "llama.attention.head_count_kv", n_head);
    const struct mk_gen_model_shape shape = {
        .n_layer = mk_gen_count_layers(g),
        .n_gqa = n_head_kv && n_head >= n_head_kv ? (uint32_t)(n_head / n_head_kv) : 1,
        .has_output = mk_gguf_find_tensor(g, "output.weight") != NULL,
    };
    if (!(types = calloc(n_t ? n_t : 1, sizeof *types))) {
        st = mk_error_set(err, MK_ERR_NOMEM, "%s: no memory for %llu tensors", in_path, (unsigned long long)n_t);
        goto fail;
    }
    if ((st = mk_gguf_writer_create(out_path, &w, err)) != MK_OK) goto fail;

    bool wrote_ftype = false;
    for (uint64_t i = 0; i < n_kv; i++) {
        const struct mk_gguf_kv *kv = mk_gguf_kv_at(g, i);
        free(key);
        if (!(key = mk_gen_strdup(kv->key))) {
            st = mk_error_set(err, MK_ERR_FORMAT, "%s: a key holds a NUL byte", in_path);
            goto fail;
        }
        /* The writer pads with its own alignment: an inherited alignment key would lie. */
        if (!strcmp(key, "general.alignment")) continue;
        if (!strcmp(key, "general.file_type")) {
            MK_GEN_TRY(mk_gguf_writer_kv_u32(w, key, fmt.ftype));
            wrote_ftype = true;
            continue;
        }
        if ((st = mk_gen_copy_kv(w, in_path, key, kv, err)) != MK_OK) goto fail;
    }
    if (!wrote_ftype) MK_GEN_TRY(mk_gguf_writer_kv_u32(w, "general.file_type", fmt.ftype));

    s.w = w;
    s.progress = (struct mk_gen_progress){ .on = p.progress && isatty(2), .label = "mk quantize", .last_permille = -1 };
    s.n_threads = mk_gen_threads(p.n_threads);
    for (uint64_t i = 0; i < n_t; i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        free(key);
        if (!(key = mk_gen_strdup(t->name))) {
            st = mk_error_set(err, MK_ERR_FORMAT, "%s: tensor %llu's name holds a NUL byte", in_path,
                              (unsigned long long)i);
            goto fail;
        }
        types[i] = mk_gen_quantize_type(&p, fmt, key, t->n_dims, (int64_t)t->ne[0], shape);
        uint64_t rows = t->ne[0] ? t->n_elements / t->ne[0] : 0;
        MK_GEN_TRY(mk_gguf_writer_add_tensor(w, key, types[i], t->n_dims, t->ne));
        s.progress.total += rows * mk_dtype_row_bytes(types[i], (int64_t)t->ne[0]);
    }
    for (uint64_t i = 0; i < n_t; i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        if (t->type == (uint32_t)types[i]) {
            if ((st = mk_gen_write_bytes(&s, t->data, t->n_bytes, true, err)) != MK_OK) goto fail;
            continue;
        }
        int64_t cols = (int64_t)t->ne[0];
        struct mk_gen_rows job = {
            .name = NULL,
            .src = t->data,
            .src_type = (enum mk_dtype)t->type,
            .src_row_bytes = mk_dtype_row_bytes((enum mk_dtype)t->type, cols),
            .cols = cols,
            .dst_type = types[i],
            .dst_row_bytes = mk_dtype_row_bytes(types[i], cols),
        };
        if ((st = mk_gen_write_rows(&s, job, cols ? (int64_t)(t->n_elements / t->ne[0]) : 0, err)) != MK_OK) goto fail;
    }
    st = mk_gguf_writer_finish(w, err);
    w = NULL;
    if (st != MK_OK) goto fail;
    mk_gen_stream_free(&s);
    free(types);
    free(key);
    mk_gguf_close(g);
    return MK_OK;
fail:
    if (w) mk_gguf_writer_abort(w);
    if (s.progress.on) fputc('\n', stderr);
    mk_gen_stream_free(&s);
    free(types);
    free(key);
    mk_gguf_close(g);
    return st;
}
