/* The executor interface behind a session: ref, cpu, megakernel, perop and graph all implement it. */
#ifndef MK_EXECUTOR_H
#define MK_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"
#include "core/status.h"
#include "megakernel/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend kinds are part of the public API too: runtime/mk.h carries a copy of this block
 * under the same guard, and tests/layers_check.py fails when the two copies differ by one byte. */
#ifndef MK_BACKEND_KIND_DEFINED
#define MK_BACKEND_KIND_DEFINED
enum mk_backend_kind {
    MK_BACKEND_AUTO = 0,
    MK_BACKEND_REF = 1,        /* straight CPU reference forward pass */
    MK_BACKEND_CPU = 2,        /* the program on pthread workers */
    MK_BACKEND_MEGAKERNEL = 3, /* one persistent cooperative kernel */
    MK_BACKEND_PEROP = 4,      /* one launch per instruction */
    MK_BACKEND_GRAPH = 5,      /* per-op launches captured in a CUDA graph */
};
const char *mk_backend_kind_name(enum mk_backend_kind k);
/* 0 when s names a kind (stored in *out), -1 when it names none. */
int mk_backend_kind_parse(const char *s, enum mk_backend_kind *out);
#endif /* MK_BACKEND_KIND_DEFINED */

#ifndef MK_FAULT_DEFINED
#define MK_FAULT_DEFINED
/* Test only: a backend fails on purpose in one step, so that tests can check that the session
 * reports it, frees what it holds and that the next session on the model works. */
enum mk_fault_kind {
    MK_FAULT_NONE = 0,
    MK_FAULT_ERROR = 1,       /* an op reports an error (gpu: the kernel reports a device error) */
    MK_FAULT_TRAP = 2,        /* cpu: a worker thread fails and ends; gpu: the kernel executes a trap */
    MK_FAULT_HANG = 3,        /* a worker (cpu) or a block (gpu) stops signalling: the watchdog must fire */
    MK_FAULT_BAD_ADDRESS = 4, /* gpu: the kernel writes to an unmapped address; cpu: as MK_FAULT_ERROR */
};
struct mk_fault {
    enum mk_fault_kind kind;
    uint32_t step; /* 0-based count of the backend's steps (prompt and generated tokens alike) */
};
#endif /* MK_FAULT_DEFINED */

/* What the first word of a GPU trace entry holds, or no trace. */
enum mk_gpu_trace {
    MK_GPU_TRACE_OFF = 0,
    MK_GPU_TRACE_AFTER_WAITS = 1, /* per-task start (after the task's waits) and end of the last step */
    MK_GPU_TRACE_AT_FETCH = 2,    /* start = when the block took the task, before its waits */
};

/* How the bf16 products over long chunks bring in their tiles on sm_90a (MK_CUDA_XB_LOAD). */
enum mk_xb_load {
    MK_XB_LOAD_AUTO = 0, /* the backend's choice: TMA where the tensor maps can be made */
    MK_XB_LOAD_COPY,     /* asynchronous copies by every thread (cp.async) */
    MK_XB_LOAD_TMA,      /* the copy engine, from tensor maps */
};

/* Knobs of the GPU backends (megakernel, perop, graph), for tuning experiments. All zero is the
 * default (mk_gpu_default_settings): the measured-fastest choices. Set from mk's flags, from
 * struct mk_session_params in the public API, or from the MK_CUDA_* environment variables by
 * mk_gpu_settings_from_env (the mk command only; the library never reads them). */
struct mk_gpu_settings {
    bool dynamic_schedule;      /* one work counter instead of the compiler's static per-block lists
                                * (static measured faster on the H100: every block knows its next
                                * task and prefetches its weights while it waits) */
    uint32_t tasks_per_worker;  /* matvec tiling target; 0 = the compiler's */
    uint32_t attn_block;        /* the unit of an attention split, in positions; 0 = the compiler's */
    uint32_t attn_solo;         /* below this position split 0 alone holds them; 0 = the compiler's */
    uint32_t attn_splits;       /* attention splits of the sequence per KV head; 0 = the compiler's */
    bool fuse_attn_output;      /* fold the attention combine into the attention-output tasks */
    uint32_t prefetch_bytes;    /* megakernel: bytes of a task's weights asked into L2 before its waits;
                                 * 0 = the backend's default (MK_CUDA_PREFETCH_BYTES; its 0 sets no_prefetch) */
    bool no_prefetch;           /* megakernel: no weights asked into L2 before a task's waits */
    uint32_t prefetch_ops;      /* megakernel: the opcodes (bit 1 << op) whose tasks prefetch; 0 = the
                                 * backend's choice (MK_CUDA_PREFETCH_OPS, a number) */
    uint32_t prefetch_min;      /* megakernel: only tasks of at least this many bytes of weights
                                 * prefetch; 0 = the backend's default (MK_CUDA_PREFETCH_MIN; its 0 sets
                                 * prefetch_all) */
    bool prefetch_all;          /* megakernel: tasks of every size prefetch */
    uint32_t attn_merge;        /* enum mk_attn_merge (graph/program.h): who merges the attention
                                 * splits; 0 = the compiler's choice (MK_CUDA_ATTN_MERGE=auto|split|op) */
    uint32_t blocks_per_sm;     /* cap on the occupancy API's blocks per SM; 0 = no cap */
    bool no_rope_table;         /* compute RoPE angles in the kernel instead of a host-made table */
    uint32_t chunk_dequant_min; /* chunk products of block-format weights over at least this many
                                 * tokens decode each matrix once first; 0 = the backend's default */
    bool no_pdl;                /* chunk kernels start only when the one ahead has ended, instead of
                                 * overlapping its tail (programmatic dependent launch, sm_90) */
    bool no_chunk_kq;           /* chunk products of K-quant matrices over 17 or more tokens decode the
                                 * weights (the paths before mk_chunk_mm_*_kq and _kw), for comparison */
    bool no_mv_kq8;             /* the K-quant products over 16 or fewer tokens decode the weights to bf16
                                 * (mk_chunk_mv_kq) instead of taking x as int8 levels (mk_chunk_mv_kq8_*),
                                 * for comparison (MK_CUDA_MV_KQ8=0) */
    bool no_fold;               /* a split chunk product's partials are added by mk_chunk_mm_reduce
                                 * rather than by the RMSNorm or q/k/v kernel after it (MK_CUDA_FOLD=0) */
    bool no_attn_h16;           /* chunk attention over an f16 KV cache splits q, K, V and the probabilities
                                 * into bf16 hi + lo (three products) instead of taking K and V as cached
                                 * and q and the probabilities as f16 hi + lo (MK_CUDA_ATTN_H16=0) */
    uint32_t mv_blocks;         /* most blocks per column split of the K-quant products over 16 or fewer
                                 * tokens, each taking every such tile in turn; 0 = the backend's plan */
    uint32_t xb_rows;           /* weight rows of the bf16 products' tiles over long chunks (x rounded
                                 * to bf16; sm_90a: 128, 192 or 256); 0 = the backend's plan */
    enum mk_xb_load xb_load;    /* how those products' tiles reach shared memory (sm_90a) */
    enum mk_gpu_trace trace;    /* megakernel: per-task timestamps (mk_backend_cuda_trace) */
    const char *kernel_image;   /* cubin, fatbin or PTX file loaded instead of the embedded code;
                                * NULL = embedded */
    bool no_float_image;        /* megakernel, perop, graph: the embedded kernels with every weight
                                 * format even where the model's are all f32, f16 or bf16 (by default
                                 * those load the build without block formats where it has SASS for
                                 * the GPU; MK_CUDA_FLOAT_IMAGE=0) */
};
struct mk_gpu_settings mk_gpu_default_settings(void);
/* Whether rows is a bf16 product tile the sm_90a code has (xb_rows): 0 (the plan's), 128, 192 or 256. */
bool mk_gpu_xb_rows_valid(uint32_t rows);

/* "auto", "split" or "op" as the value of enum mk_attn_merge (graph/program.h) it names; -1 for
 * anything else. */
int mk_attn_merge_from_name(const char *name);

/* Applies the environment overrides MK_CUDA_SCHEDULE=static|dynamic, MK_CUDA_TASKS_PER_WORKER=N,
 * MK_CUDA_ATTN_BLOCK=N, MK_CUDA_ATTN_SOLO=N, MK_CUDA_ATTN_SPLITS=N, MK_CUDA_FUSE_ATTN_OUTPUT=0|1, MK_CUDA_BLOCKS_PER_SM=N,
 * MK_CUDA_NO_ROPE_TABLE=0|1, MK_CUDA_CHUNK_DEQUANT_MIN=N, MK_CUDA_NO_PDL=0|1, MK_CUDA_NO_CHUNK_KQ=0|1, MK_CUDA_MV_KQ8=0|1, MK_CUDA_FOLD=0|1, MK_CUDA_ATTN_H16=0|1, MK_CUDA_MV_BLOCKS=N, MK_CUDA_XB_ROWS=0|128|192|256, MK_CUDA_XB_LOAD=auto|copy|tma, MK_CUDA_TRACE=0|1|fetch, MK_CUDA_CUBIN=FILE, MK_CUDA_FLOAT_IMAGE=0|1 to *s (the one place
 * they are read). MK_ERR_INVALID_ARG naming the variable and value when one is malformed. */
enum mk_status mk_gpu_settings_from_env(struct mk_gpu_settings *s, struct mk_error *err);

struct mk_backend_params {
    enum mk_backend_kind kind;
    uint32_t n_ctx;
    uint32_t n_threads;   /* cpu backend workers; 0 = number of cores */
    uint32_t watchdog_ms; /* fail a step that takes longer; 0 = default (GPU 10000, cpu 60000) */
    int device;           /* CUDA device ordinal */
    int verbose;
    struct mk_gpu_settings gpu; /* GPU backends only */
    struct mk_fault fault;      /* test only: all zero = none */
    uint32_t ubatch;            /* most tokens per chunk step; 0 = the backend's default (cpu:
                                 * MK_CPU_DEFAULT_UBATCH; GPU: 512; ref: 1), 1 = one token per step */
    enum mk_kv_type kv_type;    /* the KV cache's elements (the ref backend rounds k and v to them) */
    bool act_f32;               /* chunk programs with act_bf16_min 0 (graph/program.h) */
};

struct mk_backend;
/* A generation on the device (mk_backend_vtbl.generate): token i (from 0) on the caller's thread,
 * in order, with the device time of the step that sampled it (0 if unknown); true stops it (the
 * device ends after its step in flight, and what it wrote after this token is not delivered). */
typedef bool (*mk_backend_token_fn)(void *user, uint32_t i, int32_t token, uint64_t step_ns);

struct mk_backend_gen {
    uint32_t max_steps;  /* >= 1 */
    const int32_t *stop; /* ends it after such a token (which is delivered); <= MK_GEN_MAX_STOP */
    uint32_t n_stop;
    mk_backend_token_fn on_token;
    void *user;
};

struct mk_backend_gen_result {
    uint32_t n_steps;     /* steps run: positions cmd->pos .. + n_steps - 1 hold KV entries */
    uint32_t n_delivered; /* tokens given to on_token */
    uint32_t why;         /* enum mk_gen_end */
    uint64_t t_start_ns;  /* device clock: when the device took the command */
    uint64_t t_end_ns;    /* ... and when it wrote its last token */
};

struct mk_backend_vtbl {
    const char *name;
    /* Runs one decode step: cmd->token at cmd->pos, sampling with cmd's parameters. */
    enum mk_status (*step)(struct mk_backend *b, const struct mk_step_cmd *cmd, int32_t *out_token,
                           struct mk_error *err);
    /* Copies the last step's logits (vocab floats) to out. */
    enum mk_status (*logits)(struct mk_backend *b, float *out, struct mk_error *err);
    /* Forgets the KV cache (positions restart at 0). */
    enum mk_status (*reset)(struct mk_backend *b, struct mk_error *err);
    void (*free)(struct mk_backend *b);
    /* Optional (NULL: one token per step, see mk_backend_step_chunk): one step of cmd->n_tokens
     * (<= ubatch) tokens, tokens[i] at cmd->pos + i; the last cmd->n_out rows each get logits and
     * a token, out_tokens[j] for output row j. */
    enum mk_status (*step_chunk)(struct mk_backend *b, const struct mk_step_cmd *cmd, const int32_t *tokens,
                                 int32_t *out_tokens, struct mk_error *err);
    /* Optional: copies the logits (vocab floats) of output row j of the last step. */
    enum mk_status (*logits_row)(struct mk_backend *b, uint32_t j, float *out, struct mk_error *err);
    /* Optional (NULL: the caller steps token by token): steps from cmd->token at cmd->pos, each
     * fed the token the one before sampled, with no host round trip between them. The logits are
     * the last step's, which may be past the last delivered token. */
    enum mk_status (*generate)(struct mk_backend *b, const struct mk_step_cmd *cmd, const struct mk_backend_gen *gen,
                               struct mk_backend_gen_result *res, struct mk_error *err);
};
struct mk_backend {
    const struct mk_backend_vtbl *vt;
    enum mk_backend_kind kind;
    uint32_t n_ctx;
    uint64_t last_step_ns; /* device-measured time of the last step, 0 if unknown */
    uint32_t ubatch;       /* most tokens step_chunk takes; 0 or 1: one token per step */
};

/* One step of cmd->n_tokens tokens through b->vt->step_chunk, or token by token through step
 * where the backend has no chunk steps (out_tokens then holds the last n_out steps' tokens). */
enum mk_status mk_backend_step_chunk(struct mk_backend *b, const struct mk_step_cmd *cmd, const int32_t *tokens,
                                     int32_t *out_tokens, struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
