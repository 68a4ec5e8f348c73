/* The GPU backends: the persistent megakernel fed through the host queue, per-op launches, and those launches replayed as a CUDA graph. */
#include "runtime/cuda_backend.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/program.h"
#include "hostqueue/hostqueue.h"
#include "megakernel/chunk.h"
#include "megakernel/cuda_layout.h"
#include "megakernel/image.h"
#include "megakernel/cuda.h"
#include "core/dtype.h"

/* After STOP, how long free() waits for the kernel to leave, then again after the abort flag. */
#define MK_CUDA_EXIT_WAIT_MS 2000u

/* Launches of a chunk step that tracing times one by one. */
#define MK_CUDA_CHUNK_EVENTS 1024u

/* Most tokens per chunk step when the caller leaves it to the backend (llama.cpp's micro-batch). */
#define MK_CUDA_DEFAULT_UBATCH 512u
/* Chunk products of block-format weights over at least this many token rows (two token blocks)
 * decode their matrices once (mk_chunk_wsplit) instead of in every block (MK_CUDA_CHUNK_DEQUANT_MIN). */
#define MK_CUDA_DEFAULT_DQ_MIN 128u
/* K-quant chunk products over at most this many token rows (and over more than
 * MK_CHUNK_MV_TOKENS) multiply the matrices' integers (mk_chunk_mm_*_kq): 1.2-3x the decoded
 * paths' rate from 20 to 96 tokens on the H100 (llama-1b and llama-8b Q4_K_M; BENCHMARKS.md,
 * run87/run88). Past 64 the f16 wgmma products below win where they run (llama-8b pp72 1.48x,
 * pp128 1.93x; llama-1b 1.07-1.29x; run106); without them, up to MK_CUDA_KQ_MAX_ALONE. */
#define MK_CUDA_KQ_MAX       64u
#define MK_CUDA_KQ_MAX_ALONE 128u
/* Past MK_CUDA_KQ_MAX token rows, on cc 9.0 (sm_90a code), the K-quant products decode each
 * lane's weights to f16 in registers for wgmma (mk_chunk_mm_*_kw, x once to f16 hi and lo tiles by
 * mk_chunk_xh) instead of decoding whole matrices to split rows: llama-8b Q4_K_M 1.27-1.57x at
 * 160-512 tokens, llama-1b 1.04-1.19x (BENCHMARKS.md, run104), and no arena for decoded weights. */

/* GPU memory a session needs beyond its own buffers: the context, the module, the resident
 * grid's local memory and stacks. */
#define MK_CUDA_RESERVE_BYTES (256ull << 20)

/* The device's fault codes are the public ones. */
_Static_assert((int)MK_KFAULT_ERROR == (int)MK_FAULT_ERROR && (int)MK_KFAULT_TRAP == (int)MK_FAULT_TRAP &&
                   (int)MK_KFAULT_HANG == (int)MK_FAULT_HANG && (int)MK_KFAULT_BAD_ADDRESS == (int)MK_FAULT_BAD_ADDRESS,
               "enum mk_kernel_fault matches enum mk_fault_kind");
/* The settings' attn_merge (mk_attn_merge_from_name, mk_gpu_params) holds enum mk_attn_merge's values. */
_Static_assert(MK_ATTN_MERGE_AUTO == 0 && MK_ATTN_MERGE_SPLITS == 1 && MK_ATTN_MERGE_OP == 2,
               "enum mk_attn_merge is 0 auto, 1 split, 2 op");

/* The kernels of megakernel/chunk.cu, in the order of mk_cuda_chunk_names. The product groups
 * (_MM_*, _WIDE, _SPLIT, _KQ, _KQ32, _KW) each list STORE, ADD, SILU in that order: mk_cuda_chunk_mm
 * picks a group by offset. */
enum mk_cuda_chunk_kernel {
    MK_CK_EMBED,
    MK_CK_RMSNORM,
    MK_CK_MM_STORE,
    MK_CK_MM_ADD,
    MK_CK_MM_SILU,
    MK_CK_MM_STORE_WIDE, /* the three above with tiles of twice the weight rows, for bf16 weights */
    MK_CK_MM_ADD_WIDE,
    MK_CK_MM_SILU_WIDE,
    MK_CK_MM_REDUCE,
    MK_CK_QKV,
    MK_CK_ATTN,
    MK_CK_ATTN_MMA32, /* MK_CK_ATTN on the tensor cores, for head size 32, 64, 128 */
    MK_CK_ATTN_MMA64,
    MK_CK_ATTN_MMA128,
    MK_CK_ATTN_MERGE,
    MK_CK_LM_TILES,
    MK_CK_SAMPLE,
    MK_CK_MM_STORE_SPLIT, /* the wide products over weights that MK_CK_WSPLIT decoded once */
    MK_CK_MM_ADD_SPLIT,
    MK_CK_MM_SILU_SPLIT,
    MK_CK_WSPLIT,
    MK_CK_MV,          /* products of up to MK_CHUNK_MV_TOKENS token rows */
    MK_CK_MV_BF16,     /* the same over bf16 weights only */
    MK_CK_MV_KQ,       /* the same over Q4_K, Q5_K and Q6_K weights only (mk_cuda_chunk_kquants) */
    MK_CK_MM_STORE_KQ, /* the products over more token rows of those weights, their integers as they are */
    MK_CK_MM_ADD_KQ,
    MK_CK_MM_SILU_KQ,
    MK_CK_MM_STORE_KQ32, /* the same with 32 token rows a block, where those pad fewer rows */
    MK_CK_MM_ADD_KQ32,
    MK_CK_MM_SILU_KQ32,
    MK_CK_MM_STORE_KW, /* the same over more token rows on sm_90a's wgmma, x as MK_CK_XH left it */
    MK_CK_MM_ADD_KW,
    MK_CK_MM_SILU_KW,
    MK_CK_XH,       /* x's split rows to the f16 stages of the _KW products */
    MK_CK_MV_KQ8_2, /* MK_CK_MV_KQ with x as int8 levels on the tensor cores, for 2, 4, 8 token rows */
    MK_CK_MV_KQ8_4,
    MK_CK_MV_KQ8_8,
    MK_CK_REDUCE_NORM,      /* mk_chunk_mm_reduce of an ADD product and the mk_chunk_rmsnorm after it */
    MK_CK_MM_STORE_WIDE_XB, /* the _WIDE products with x rounded to bf16 (the program's act_bf16_min) */
    MK_CK_MM_ADD_WIDE_XB,
    MK_CK_MM_SILU_WIDE_XB,
    MK_CK_MM_STORE_WIDE_XB192, /* sm_90a only: the same in blocks of 192 weight rows (mk_cuda_xb_plan) */
    MK_CK_MM_ADD_WIDE_XB192,
    MK_CK_MM_SILU_WIDE_XB192,
    MK_CK_MM_STORE_WIDE_XT, /* sm_90a only: _WIDE_XB's tiles by the copy engine (tensor maps) */
    MK_CK_MM_ADD_WIDE_XT,
    MK_CK_MM_SILU_WIDE_XT,
    MK_CK_MM_STORE_WIDE_XT192,
    MK_CK_MM_ADD_WIDE_XT192,
    MK_CK_MM_SILU_WIDE_XT192,
    MK_CK_ATTN_H16_32, /* MK_CK_ATTN_MMA* over an f16 cache: q and the probabilities as f16 hi + lo */
    MK_CK_ATTN_H16_64,
    MK_CK_ATTN_H16_128,
    MK_CK_MM_STORE_WIDE_XB128, /* sm_90a only: _WIDE_XB in blocks of 128 weight rows (mk_cuda_xb_plan) */
    MK_CK_MM_ADD_WIDE_XB128,
    MK_CK_MM_SILU_WIDE_XB128,
    MK_CK_MM_STORE_WIDE_XT128, /* and by the copy engine */
    MK_CK_MM_ADD_WIDE_XT128,
    MK_CK_MM_SILU_WIDE_XT128,
    MK_CK_COUNT
};
static const char *const mk_cuda_chunk_names[MK_CK_COUNT] = {
    "mk_chunk_embed",
    "mk_chunk_rmsnorm",
    "mk_chunk_mm_store",
    "mk_chunk_mm_add",
    "mk_chunk_mm_silu",
    "mk_chunk_mm_store_wide",
    "mk_chunk_mm_add_wide",
    "mk_chunk_mm_silu_wide",
    "mk_chunk_mm_reduce",
    "mk_chunk_qkv",
    "mk_chunk_attn",
    "mk_chunk_attn_mma_32",
    "mk_chunk_attn_mma_64",
    "mk_chunk_attn_mma_128",
    "mk_chunk_attn_merge",
    "mk_chunk_lm_tiles",
    "mk_chunk_sample",
    "mk_chunk_mm_store_split",
    "mk_chunk_mm_add_split",
    "mk_chunk_mm_silu_split",
    "mk_chunk_wsplit",
    "mk_chunk_mv",
    "mk_chunk_mv_bf16",
    "mk_chunk_mv_kq",
    "mk_chunk_mm_store_kq",
    "mk_chunk_mm_add_kq",
    "mk_chunk_mm_silu_kq",
    "mk_chunk_mm_store_kq32",
    "mk_chunk_mm_add_kq32",
    "mk_chunk_mm_silu_kq32",
    "mk_chunk_mm_store_kw",
    "mk_chunk_mm_add_kw",
    "mk_chunk_mm_silu_kw",
    "mk_chunk_xh",
    "mk_chunk_mv_kq8_2",
    "mk_chunk_mv_kq8_4",
    "mk_chunk_mv_kq8_8",
    "mk_chunk_reduce_norm",
    "mk_chunk_mm_store_wide_xb",
    "mk_chunk_mm_add_wide_xb",
    "mk_chunk_mm_silu_wide_xb",
    "mk_chunk_mm_store_wide_xb192",
    "mk_chunk_mm_add_wide_xb192",
    "mk_chunk_mm_silu_wide_xb192",
    "mk_chunk_mm_store_wide_xt",
    "mk_chunk_mm_add_wide_xt",
    "mk_chunk_mm_silu_wide_xt",
    "mk_chunk_mm_store_wide_xt192",
    "mk_chunk_mm_add_wide_xt192",
    "mk_chunk_mm_silu_wide_xt192",
    "mk_chunk_attn_h16_32",
    "mk_chunk_attn_h16_64",
    "mk_chunk_attn_h16_128",
    "mk_chunk_mm_store_wide_xb128",
    "mk_chunk_mm_add_wide_xb128",
    "mk_chunk_mm_silu_wide_xb128",
    "mk_chunk_mm_store_wide_xt128",
    "mk_chunk_mm_add_wide_xt128",
    "mk_chunk_mm_silu_wide_xt128",
};

/* The copy engine's forms of the _WIDE_XB products (tensor maps, MK_CHUNK_MM_TX_THREADS a block). */
static bool mk_cuda_ck_xt(int k) {
    return (k >= MK_CK_MM_STORE_WIDE_XT && k <= MK_CK_MM_SILU_WIDE_XT192) ||
           (k >= MK_CK_MM_STORE_WIDE_XT128 && k <= MK_CK_MM_SILU_WIDE_XT128);
}
/* The _WIDE_XB products' forms whose tiles come in by cp.async, of every tile's rows. */
static bool mk_cuda_ck_xb(int k) {
    return (k >= MK_CK_MM_STORE_WIDE_XB && k <= MK_CK_MM_SILU_WIDE_XB192) ||
           (k >= MK_CK_MM_STORE_WIDE_XB128 && k <= MK_CK_MM_SILU_WIDE_XB128);
}
/* The kernels only the sm_90a code has: the _WIDE_XB products' 192- and 128-row tiles and the
 * copy engine's forms. */
static bool mk_cuda_ck_sm90a(int k) {
    return (k >= MK_CK_MM_STORE_WIDE_XB192 && k <= MK_CK_MM_SILU_WIDE_XT192) ||
           (k >= MK_CK_MM_STORE_WIDE_XB128 && k <= MK_CK_MM_SILU_WIDE_XT128);
}

struct mk_cuda_backend {
    struct mk_backend base;
    const struct mk_cuda *cu;
    int verbose;
    struct mk_gpu_settings gpu;
    enum mk_kv_type kv_type;              /* of the KV cache */
    bool act_f32;                         /* the chunk program's act_bf16_min is 0 */
    uint32_t c_xb_tokens, c_xb_smem;      /* the _WIDE_XB products' token rows a block and shared memory */
    bool c_xt;                            /* the _WIDE_XT kernels may run (cc 9.0, tensor maps, not turned off) */
    const struct mk_chunk_tmaps *c_tmaps; /* the tensor maps of the _WIDE_XT launch being issued */
    mk_cu_device dev;
    mk_cu_context ctx;
    mk_cu_module mod;
    mk_cu_function fn;        /* mk_megakernel or mk_perop */
    mk_cu_stream stream;      /* the kernels */
    mk_cu_stream copy_stream; /* read-backs while the megakernel stays resident */
    mk_cu_event ev0, ev1;
    struct mk_program *prog;
    uint32_t watchdog_ms;  /* 0 = the host queue's default */
    struct mk_fault fault; /* test only, megakernel only */
    struct mk_cuda_backend_info info;
    /* Device memory. */
    mk_cu_devptr d_weight_data; /* every distinct weight, 256-byte aligned */
    mk_cu_devptr d_wtable;      /* struct mk_weight_ref[n_weights] with device pointers */
    mk_cu_devptr d_instrs, d_task_base, d_counters, d_arena, d_k, d_v, d_state, d_work;
    mk_cu_devptr d_sched_offsets, d_sched_tasks, d_trace;
    mk_cu_devptr d_rope; /* float2 (n_ctx, n_rot / 2): RoPE's cos, sin */
    /* Launch parameters: everything the kernels read besides the program (megakernel/abi.h). */
    struct mk_kernel_args args;
    /* Megakernel. */
    struct mk_hostqueue *hq;
    struct mk_watch *watch; /* pinned, device-mapped: header then mk_watch_block[grid] */
    bool launched;
    /* Per-op and graph: the command and the token in pinned memory. */
    struct mk_step_cmd *h_cmd;
    int32_t *h_token;
    mk_cu_graph graph;
    mk_cu_graph_exec gexec;
    /* Per-op and chunk kernels launch with programmatic stream serialization: the sm_90 code waits
     * for the kernel ahead itself (mk_grid_dep_wait), after what needs no wait. */
    bool pdl;
    bool poisoned; /* a CUDA failure in a step: refuse further steps */
    struct mk_error poison_err;
    struct mk_weight_ref *wtable;  /* the device weight table as uploaded (device pointers) */
    struct mk_weight_ref *cwtable; /* the chunk program's, as uploaded */
    uint32_t ubatch_asked;         /* mk_backend_params.ubatch: 0 = MK_CUDA_DEFAULT_UBATCH, 1 = no chunk steps */
    /* Chunk steps (ubatch > 1): the chunk program run by per-op launches of megakernel/chunk.cu
     * over the same weights and KV cache. The megakernel leaves its loop for them and is launched
     * again for the next one-token step. */
    struct mk_program *cprog;
    mk_cu_module cmod;
    mk_cu_function ck[MK_CK_COUNT];
    mk_cu_devptr d_cinstrs, d_cwtable, d_carena, d_cstate;
    struct mk_kernel_args cargs;
    uint32_t c_xn, c_qkv; /* arena offsets of the scratch rows: normalized input (ubatch, n_embd) and
                           * q, k, v before RoPE (ubatch, q_dim + 2 kv_dim) */
    uint32_t c_part;      /* arena offset of the split-K partial sums (mk_cuda_part_floats) */
    uint32_t c_apart;     /* arena offset of the attention splits' partials (mk_cuda_attn_part_floats) */
    /* A split product's partials not yet added (MK_CHUNK_MM_STORE or _ADD): mk_chunk_mm_reduce's
     * record. The launch that reads that output adds them itself where it can (mk_chunk_reduce_norm
     * in place of mk_chunk_rmsnorm, mk_chunk_qkv); any other launch runs the reduce first. */
    struct mk_chunk_launch c_pend;
    bool c_pend_on;
    uint32_t c_fold; /* arena offset of mk_chunk_reduce_norm's scratch (MK_CHUNK_FOLD_FLOATS), zeroed */
    uint32_t c_fin;  /* arena offset of the integer tiles' finish scratch (MK_CHUNK_FIN_FLOATS), zeroed */
    /* The last MK_CHUNK_MM_ADD finished its own splits (mk_kq8_finish): its residual rows (m rows of
     * n floats from c_sums_y) and their tiles' sums of squares in c_fin. */
    bool c_sums_on;
    uint32_t c_sums_y, c_sums_m, c_sums_n;
    /* An RMSNorm of those rows not yet launched (mk_chunk_rmsnorm's record): the integer tiles of
     * the product that reads it form it as they stage x; any other launch runs it first. */
    struct mk_chunk_launch c_norm;
    bool c_norm_on;
    uint32_t c_wsplit;        /* arena offset of one product's weights decoded to split rows (c_wsplit_floats) */
    uint64_t c_wsplit_floats; /* the largest block-format product's (q/k/v, output, gate/up, down; not
                               * the LM head); 0 = products always decode in their blocks */
    uint32_t c_dq_min;        /* products of at least this many token rows use c_wsplit */
    uint32_t c_split_smem;    /* shared memory of the products over c_wsplit's split rows */
    uint32_t c_xh;            /* arena offset of x as the _KW products' f16 stages (c_xh_floats) */
    uint64_t c_xh_floats;     /* 0: no _KW products (not cc 9.0, --no-chunk-kq, or a small --ubatch) */
    uint32_t c_mv_k;          /* most columns of an mk_chunk_mv split whose x fits the device's shared
                               * memory (at most MK_CHUNK_MV_K); 0: few-token products take the tiles */
    uint32_t c_mv_pair;       /* most dynamic shared memory of a block that shares its SM with another */
    uint32_t c_head_dim;      /* the chunk program's largest head */
    uint32_t c_qkv_cols;
    struct mk_step_cmd *h_ccmd; /* pinned: the chunk step's command */
    int32_t *h_ctok;            /* pinned: (ubatch) tokens in, then (ubatch) tokens out */
    bool last_chunk;            /* the last step was a chunk step: logits come from the chunk arena */
    uint32_t last_n_out;
    /* Tracing (gpu.trace on): an event before each chunk launch, the launches' kernels, and the
     * time per kernel the last chunk step spent, printed with -v. */
    mk_cu_event cev[MK_CUDA_CHUNK_EVENTS];
    uint8_t cev_kernel[MK_CUDA_CHUNK_EVENTS];
    uint32_t cev_ii[MK_CUDA_CHUNK_EVENTS]; /* the chunk program's instruction of each launch */
    uint32_t n_cev;
};

static uint64_t mk_cuda_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void mk_cuda_sleep_us(unsigned us) {
    struct timespec ts = { 0, (long)us * 1000 };
    nanosleep(&ts, NULL);
}

/* ---- The host queue's callbacks (run on the feeder thread). ---- */

static enum mk_status mk_cuda_probe(void *ctx, struct mk_error *err) {
    struct mk_cuda_backend *b = ctx;
    if (MK_CU(b->cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    int r = MK_CU_EX(b->cu, err, MK_CUDA_ERROR_NOT_READY, cuStreamQuery(b->stream));
    if (r == 1) return MK_OK; /* still running, as it should */
    if (r == 0) return mk_error_set(err, MK_ERR_INTERNAL, "the megakernel left its loop without a STOP command");
    mk_error_prefix(err, "the megakernel died");
    return MK_ERR_CUDA;
}

static void mk_cuda_describe(void *ctx, char *buf, size_t n) {
    struct mk_cuda_backend *b = ctx;
    if (!b->watch) return;
    const struct mk_watch_block *wb = (const struct mk_watch_block *)(b->watch + 1);
    uint32_t waiting = 0, hung = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < b->info.grid; i++) {
        uint32_t state = __atomic_load_n(&wb[i].state, __ATOMIC_ACQUIRE);
        if (state == MK_WATCH_HANG) hung++;
        if (state != MK_WATCH_COUNTER) continue;
        if (waiting++ < 3 && used < n) {
            uint32_t ii = wb[i].instr;
            const char *label = ii < b->prog->n_instr ? b->prog->labels[ii] : "?";
            int k = snprintf(buf + used, n - used, "%sblock %u waits on counter %u for %u (saw %u) in instr %u '%s'",
                             used ? "; " : "", i, wb[i].ctr, wb[i].target, wb[i].seen, ii, label);
            if (k > 0) used += (size_t)k;
        }
    }
    if (used >= n) return;
    if (waiting > 3)
        snprintf(buf + used, n - used, "; %u blocks wait in all", waiting);
    else if (hung)
        snprintf(buf + used, n - used, "%s%u blocks obey MK_CMD_HANG", used ? "; " : "", hung);
    else if (!waiting)
        snprintf(buf + used, n - used, "no block reports a wait on a counter (a block may be stuck in an op)");
}

/* ---- Setup helpers. ---- */

static enum mk_status mk_cuda_alloc(struct mk_cuda_backend *b, mk_cu_devptr *p, size_t bytes, bool zero,
                                    const char *what, struct mk_error *err) {
    if (!bytes) bytes = 16;
    if (MK_CU(b->cu, err, cuMemAlloc_v2(p, bytes))) {
        mk_error_prefix(err, "allocating %zu bytes of GPU memory for %s", bytes, what);
        return MK_ERR_CUDA;
    }
    if (zero && MK_CU(b->cu, err, cuMemsetD8_v2(*p, 0, bytes))) return MK_ERR_CUDA;
    return MK_OK;
}

static enum mk_status mk_cuda_upload(struct mk_cuda_backend *b, mk_cu_devptr *p, const void *src, size_t bytes,
                                     const char *what, struct mk_error *err) {
    enum mk_status st = mk_cuda_alloc(b, p, bytes, false, what, err);
    if (st != MK_OK) return st;
    if (bytes && MK_CU(b->cu, err, cuMemcpyHtoD_v2(*p, src, bytes))) return MK_ERR_CUDA;
    return MK_OK;
}

static uint64_t mk_cuda_align256(uint64_t n) { return (n + 255u) & ~(uint64_t)255u; }

/* The formats the device code decodes (megakernel/common.cuh and quant.cuh). */
static bool mk_cuda_dtype_ok(uint32_t dt) {
    switch (dt) {
    case MK_DTYPE_F32:
    case MK_DTYPE_F16:
    case MK_DTYPE_BF16:
    case 2:  /* q4_0 */
    case 3:  /* q4_1 */
    case 6:  /* q5_0 */
    case 7:  /* q5_1 */
    case 8:  /* q8_0 */
    case 10: /* q2_k */
    case 11: /* q3_k */
    case 12: /* q4_k */
    case 13: /* q5_k */
    case 14: /* q6_k */
    case 20: /* iq4_nl */
    case 23: /* iq4_xs */ return true;
    default: return false;
    }
}

/* Every weight in a format the device decodes; heads no wider than a block. */
static enum mk_status mk_cuda_check_program(const struct mk_program *p, struct mk_error *err) {
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        for (int k = 0; k < 4; k++) {
            uint32_t wi = in->weight[k];
            if (wi == MK_NO_WEIGHT || wi >= p->n_weights) continue;
            uint32_t dt = p->weights[wi].dtype;
            if (!mk_cuda_dtype_ok(dt)) {
                const char *name = mk_dtype_ggml_name(dt);
                return mk_error_set(err, MK_ERR_UNSUPPORTED,
                                    "instruction %u '%s': weight %d (%ux%u) is %s, which the GPU kernels do not decode "
                                    "(use --backend cpu)",
                                    i, p->labels[i], k, p->weights[wi].rows, p->weights[wi].cols,
                                    name ? name : "an unknown type");
            }
        }
        uint32_t head_dim = in->op == MK_OP_ATTN_PARTIAL || in->op == MK_OP_ATTN_CHUNK ? in->args.attn.head_dim
                            : in->op == MK_OP_ATTN_COMBINE                             ? in->args.combine.head_dim
                            : in->op == MK_OP_ATTN_OUTPUT                              ? in->args.attn_out.head_dim
                                                                                       : 0;
        if (head_dim > MK_MAX_HEAD_DIM)
            return mk_error_set(err, MK_ERR_UNSUPPORTED, "instruction %u '%s': head_dim %u is over the GPU limit of %u",
                                i, p->labels[i], head_dim, MK_MAX_HEAD_DIM);
        /* The attention copies K and V rows in 16-byte pieces. */
        if (head_dim % 4u)
            return mk_error_set(
                err, MK_ERR_UNSUPPORTED,
                "instruction %u '%s': head_dim %u is not a multiple of 4, which the GPU attention needs", i,
                p->labels[i], head_dim);
        /* The chunk kernels (megakernel/chunk.cu) run the opcodes of chunk programs only; the
         * megakernel and mk_perop those of one-token programs. */
        const bool chunk_op = in->op == MK_OP_ATTN_CHUNK,
                   one_op = in->op == MK_OP_ATTN_PARTIAL || in->op == MK_OP_ATTN_COMBINE || in->op == MK_OP_ATTN_OUTPUT;
        if ((p->ubatch > 1 && one_op) || (p->ubatch <= 1 && chunk_op))
            return mk_error_set(err, MK_ERR_UNSUPPORTED,
                                "instruction %u '%s': opcode %s in a program of %u tokens per step", i, p->labels[i],
                                mk_opcode_name(in->op), p->ubatch);
        if (in->op >= MK_OP_COUNT)
            return mk_error_set(err, MK_ERR_UNSUPPORTED, "instruction %u '%s': opcode %u is unknown to the GPU kernels",
                                i, p->labels[i], in->op);
    }
    return MK_OK;
}

static uint32_t mk_cuda_program_smem(const struct mk_program *p) {
    uint32_t words = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        uint32_t w = mk_layout_smem_words(&p->instrs[i], p->weights);
        if (w > words) words = w;
    }
    return words * 4u;
}

static enum mk_status mk_cuda_compile(const struct mk_model *m, const struct mk_cuda_backend *b, uint32_t workers,
                                      struct mk_program **out, struct mk_error *err) {
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = workers;
    cp.n_ctx = b->base.n_ctx;
    cp.schedule = b->gpu.dynamic_schedule ? MK_SCHED_DYNAMIC : MK_SCHED_STATIC;
    if (b->gpu.tasks_per_worker) cp.tasks_per_worker = b->gpu.tasks_per_worker;
    if (b->gpu.attn_block) cp.attn_block = b->gpu.attn_block;
    cp.attn_solo = b->gpu.attn_solo;
    if (b->gpu.attn_splits) cp.attn_splits = b->gpu.attn_splits;
    cp.fuse_attn_output = b->gpu.fuse_attn_output;
    cp.attn_merge = (enum mk_attn_merge)b->gpu.attn_merge;
    cp.kv_type = b->kv_type;
    return mk_program_compile(m, &cp, out, err);
}

/* settings.kernel_image: that file (cubin, fatbin or PTX) instead of the embedded code. */
static enum mk_status mk_cuda_load_file_module(struct mk_cuda_backend *b, const char *path, struct mk_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mk_error_set(err, MK_ERR_IO, "kernel image: cannot open %s", path);
    enum mk_status st = MK_OK;
    void *img = NULL;
    long n = 0;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = mk_error_set(err, MK_ERR_IO, "kernel image: cannot size %s", path);
        goto done;
    }
    img = aligned_alloc(256, ((size_t)n + 256u) & ~(size_t)255u);
    if (!img) {
        st = mk_error_set(err, MK_ERR_NOMEM, "out of memory reading %s", path);
        goto done;
    }
    memset(img, 0, ((size_t)n + 256u) & ~(size_t)255u); /* NUL-terminates a PTX file too */
    if (fread(img, 1, (size_t)n, f) != (size_t)n) {
        st = mk_error_set(err, MK_ERR_IO, "kernel image: short read of %s", path);
        goto done;
    }
    if (MK_CU(b->cu, err, cuModuleLoadDataEx(&b->mod, img, 0, NULL, NULL))) {
        mk_error_prefix(err, "kernel image %s", path);
        st = MK_ERR_CUDA;
        goto done;
    }
    b->info.from_cubin = 2;
    snprintf(b->info.image, sizeof b->info.image, "file %s", path);
done:
    free(img);
    fclose(f);
    return st;
}

/* Whether a fatbin of these archs ("sm_80 ... compute_80") holds machine code this device runs:
 * SASS of the same major version and a minor version no higher (sm_80 code runs on sm_87, not on
 * sm_90). */
static bool mk_cuda_fatbin_has_sass(const char *archs, int major, int minor) {
    for (const char *a = strstr(archs, "sm_"); a; a = strstr(a + 3, "sm_")) {
        int v = atoi(a + 3);
        if (v / 10 == major && v % 10 <= minor) return true;
    }
    return false;
}

/* The embedded fatbin: the driver takes its SASS for this device, else compiles its PTX. A model
 * of float weights takes the build without block formats (mk_megakernel_float_fatbin) where that
 * has SASS for the device. */
static enum mk_status mk_cuda_load_module(struct mk_cuda_backend *b, bool float_model, struct mk_error *err) {
    b->info.float_image = 0;
    if (b->gpu.kernel_image) return mk_cuda_load_file_module(b, b->gpu.kernel_image, err);
    const bool flt = float_model && !b->gpu.no_float_image &&
                     mk_cuda_fatbin_has_sass(mk_megakernel_float_archs, b->info.cc_major, b->info.cc_minor);
    const char *archs = flt ? mk_megakernel_float_archs : mk_megakernel_archs;
    char log[4096];
    log[0] = '\0';
    int opts[2] = { MK_CU_JIT_ERROR_LOG_BUFFER, MK_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
    void *vals[2] = { log, (void *)(uintptr_t)sizeof log };
    if (MK_CU(b->cu, err,
              cuModuleLoadDataEx(&b->mod, flt ? mk_megakernel_float_fatbin : mk_megakernel_fatbin, 2, opts, vals))) {
        if (log[0]) mk_error_prefix(err, "PTX JIT log: %.300s", log);
        mk_error_prefix(err, "loading the kernels (%s%s) on %s (cc %d.%d)", flt ? "float formats only, " : "", archs,
                        b->info.device, b->info.cc_major, b->info.cc_minor);
        return MK_ERR_CUDA;
    }
    bool sass = mk_cuda_fatbin_has_sass(archs, b->info.cc_major, b->info.cc_minor);
    b->info.float_image = flt;
    b->info.from_cubin = sass ? 1 : 0;
    snprintf(b->info.image, sizeof b->info.image, "%s from the %sfatbin (%s)", sass ? "SASS" : "PTX JIT",
             flt ? "float-formats " : "", archs);
    return MK_OK;
}

/* The chunk program's own GPU memory: its arena with the scratch rows, instructions, weight table. */
/* Split-K partials: a product is split only while its grid has fewer than two blocks per
 * multiprocessor, so splits x tiles stay under four per multiprocessor. */
static uint64_t mk_cuda_part_floats(const struct mk_cuda_backend *b) {
    return 4ull * (uint64_t)b->info.sm_count * MK_CHUNK_MM_TOKENS * 2u * MK_CHUNK_MM_ROWS;
}
/* Attention splits: likewise under four blocks per multiprocessor, each (o, m, l) per query row. */
static uint64_t mk_cuda_attn_part_floats(const struct mk_cuda_backend *b) {
    return 4ull * (uint64_t)b->info.sm_count * MK_CHUNK_ATTN_ROWS * (b->c_head_dim + 2u);
}
static uint64_t mk_cuda_chunk_arena_floats(const struct mk_cuda_backend *b) {
    const struct mk_program *c = b->cprog;
    return (uint64_t)c->arena_floats + 16u + (uint64_t)c->ubatch * (c->n_embd + 16u) + 16u +
           (uint64_t)c->ubatch * (b->c_qkv_cols + 16u) + 16u + mk_cuda_part_floats(b) + 16u +
           mk_cuda_attn_part_floats(b) + 16u + b->c_wsplit_floats + 16u + b->c_xh_floats + 16u +
           MK_CHUNK_FOLD_FLOATS(c->ubatch, c->n_embd) + 16u + MK_CHUNK_FIN_FLOATS(c->n_embd);
}
static uint64_t mk_cuda_chunk_bytes(const struct mk_cuda_backend *b) {
    if (!b->cprog) return 0;
    return mk_cuda_chunk_arena_floats(b) * 4u + (uint64_t)b->cprog->n_instr * sizeof(struct mk_instr) +
           (uint64_t)b->cprog->n_weights * sizeof(struct mk_weight_ref) + sizeof(struct mk_step_state);
}

/* Default chunk steps this device cannot hold: the session takes one token per step instead
 * (chunk steps the caller asked for are reported as errors before this is called). */
static void mk_cuda_drop_chunk(struct mk_cuda_backend *b, const char *why) {
    if (b->verbose) fprintf(stderr, "mk: %s: no chunk steps, one token per step (%s)\n", b->base.vt->name, why);
    mk_program_free(b->cprog);
    b->cprog = NULL;
    struct mk_error ignored;
    if (b->cmod) MK_CU(b->cu, &ignored, cuModuleUnload(b->cmod));
    b->cmod = NULL;
    memset(b->ck, 0, sizeof b->ck);
    b->c_qkv_cols = b->c_head_dim = 0;
    b->c_wsplit_floats = b->c_xh_floats = 0;
}

/* Every distinct weight once (the tied LM head shares the embedding), then the table. */
static enum mk_status mk_cuda_upload_weights(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_program *p = b->prog;
    struct mk_weight_ref *table = calloc(p->n_weights ? p->n_weights : 1, sizeof *table);
    uint64_t *offset = calloc(p->n_weights ? p->n_weights : 1, sizeof *offset);
    enum mk_status st = MK_OK;
    if (!table || !offset) {
        st = mk_error_set(err, MK_ERR_NOMEM, "out of memory for the weight table");
        goto done;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < p->n_weights; i++) {
        uint32_t same = i;
        for (uint32_t j = 0; j < i; j++)
            if (p->weights[j].ptr == p->weights[i].ptr) {
                same = j;
                break;
            }
        if (same != i) {
            offset[i] = offset[same];
            continue;
        }
        offset[i] = total;
        total += mk_cuda_align256((uint64_t)p->weights[i].rows * p->weights[i].row_bytes);
    }
    /* Everything the session will allocate, checked before the first allocation. */
    size_t free_b = 0, total_b = 0;
    if (MK_CU(b->cu, err, cuMemGetInfo_v2(&free_b, &total_b))) {
        st = MK_ERR_CUDA;
        goto done;
    }
    uint64_t kv = mk_program_kv_bytes(p);
    uint64_t other = (uint64_t)p->arena_floats * 4u + (uint64_t)p->n_instr * sizeof *p->instrs +
                     (uint64_t)p->n_counters * 4u + (uint64_t)p->n_tasks * 24u + (uint64_t)p->n_ctx * 512u +
                     (uint64_t)p->n_weights * sizeof *table;
    /* The space for decoded weights gives way first (the products then decode in their tiles),
     * then the default chunk steps, when only they do not fit. */
    if (b->c_wsplit_floats &&
        mk_cuda_check_memory(total, kv, other + mk_cuda_chunk_bytes(b), free_b, total_b, NULL) != MK_OK) {
        if (b->verbose)
            fprintf(stderr,
                    "mk: %s: chunk products decode their weights in every tile (%.2f GB for decoded weights "
                    "do not fit beside the model)\n",
                    b->base.vt->name, b->c_wsplit_floats * 4u / 1e9);
        b->c_wsplit_floats = 0;
    }
    const uint64_t chunk = mk_cuda_chunk_bytes(b);
    if (chunk && !b->ubatch_asked && mk_cuda_check_memory(total, kv, other + chunk, free_b, total_b, NULL) != MK_OK &&
        mk_cuda_check_memory(total, kv, other, free_b, total_b, NULL) == MK_OK) {
        char why[96];
        snprintf(why, sizeof why, "their %.2f GB of buffers do not fit beside the model", chunk / 1e9);
        mk_cuda_drop_chunk(b, why);
    }
    other += mk_cuda_chunk_bytes(b);
    if ((st = mk_cuda_check_memory(total, kv, other, free_b, total_b, err)) != MK_OK) {
        if (b->cprog)
            mk_error_prefix(err, "with chunk steps of %u tokens (--ubatch 1 turns them off)", b->cprog->ubatch);
        mk_error_prefix(err, "%s", b->info.device);
        goto done;
    }
    if ((st = mk_cuda_alloc(b, &b->d_weight_data, total, false, "weights", err)) != MK_OK) goto done;
    for (uint32_t i = 0; i < p->n_weights; i++) {
        table[i] = p->weights[i];
        table[i].ptr = b->d_weight_data + offset[i];
        bool first = true;
        for (uint32_t j = 0; j < i; j++)
            if (p->weights[j].ptr == p->weights[i].ptr) first = false;
        if (!first) continue;
        size_t bytes = (size_t)p->weights[i].rows * p->weights[i].row_bytes;
        if (MK_CU(b->cu, err, cuMemcpyHtoD_v2(table[i].ptr, (const void *)(uintptr_t)p->weights[i].ptr, bytes))) {
            st = MK_ERR_CUDA;
            goto done;
        }
    }
    b->info.weight_bytes = total;
    st = mk_cuda_upload(b, &b->d_wtable, table, (size_t)p->n_weights * sizeof *table, "the weight table", err);
    b->wtable = table;
    table = NULL;
done:
    free(table);
    free(offset);
    return st;
}

/* The megakernel's L2 prefetch of a task's first weights before its waits (mk_kernel_args). On
 * the H200 (run97, run98, BENCHMARKS.md) it pays on llama-8b BF16's token (16 GB of weights, every
 * task: -0.5 to -1.1 %) and costs on llama-1b's (2.5 GB BF16, 0.8 GB Q4_K_M: +0.4 to +2.2 %, most of
 * it from tasks under 768 KB, whose ops are a few microseconds long): so every task of a model of
 * MK_CUDA_PREFETCH_ALL_BYTES or more per token prefetches, and in smaller ones tasks from
 * MK_CUDA_PREFETCH_MIN up. */
#define MK_CUDA_PREFETCH_BYTES     65536u
#define MK_CUDA_PREFETCH_MIN       (768u << 10)
#define MK_CUDA_PREFETCH_ALL_BYTES (8ull << 30)

static enum mk_status mk_cuda_setup_memory(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_program *p = b->prog;
    enum mk_status st;
    size_t kv = (size_t)(mk_program_kv_bytes(p) / 2u); /* each of K and V */
    if ((st = mk_cuda_upload_weights(b, err)) != MK_OK) return st;
    if ((st = mk_cuda_upload(b, &b->d_instrs, p->instrs, (size_t)p->n_instr * sizeof *p->instrs, "instructions", err)))
        return st;
    if ((st = mk_cuda_upload(b, &b->d_task_base, p->task_base, ((size_t)p->n_instr + 1) * sizeof(uint32_t),
                             "task bases", err)))
        return st;
    if ((st = mk_cuda_alloc(b, &b->d_counters, (size_t)p->n_counters * 4u, true, "counters", err))) return st;
    if ((st = mk_cuda_alloc(b, &b->d_arena, (size_t)p->arena_floats * 4u, true, "the arena", err))) return st;
    if ((st = mk_cuda_alloc(b, &b->d_k, kv, true, "the K cache", err))) return st;
    if ((st = mk_cuda_alloc(b, &b->d_v, kv, true, "the V cache", err))) return st;
    if ((st = mk_cuda_alloc(b, &b->d_state, sizeof(struct mk_step_state), true, "the step state", err))) return st;
    if ((st = mk_cuda_alloc(b, &b->d_work, sizeof(uint64_t), true, "the work counter", err))) return st;
    if (p->schedule == MK_SCHED_STATIC) {
        if ((st = mk_cuda_upload(b, &b->d_sched_offsets, p->sched_offsets, ((size_t)p->n_workers + 1) * 4u,
                                 "the schedule", err)))
            return st;
        if ((st = mk_cuda_upload(b, &b->d_sched_tasks, p->sched_tasks, (size_t)p->n_tasks * 4u, "the schedule", err)))
            return st;
    }
    if (b->base.kind == MK_BACKEND_MEGAKERNEL && b->gpu.trace != MK_GPU_TRACE_OFF)
        if ((st = mk_cuda_alloc(b, &b->d_trace, (size_t)p->n_tasks * 16u, true, "the trace", err))) return st;
    struct mk_kernel_args *a = &b->args;
    memset(a, 0, sizeof *a);
    a->instrs = b->d_instrs;
    a->task_base = b->d_task_base;
    a->weights = b->d_wtable;
    a->counters = b->d_counters;
    a->arena = b->d_arena;
    a->k_cache = b->d_k;
    a->v_cache = b->d_v;
    a->step_state = b->d_state;
    a->work = b->d_work;
    a->sched_offsets = b->d_sched_offsets;
    a->sched_tasks = b->d_sched_tasks;
    a->trace = b->d_trace;
    a->trace_mode = b->gpu.trace == MK_GPU_TRACE_AT_FETCH ? MK_TRACE_AT_FETCH : MK_TRACE_AFTER_WAITS;
    a->n_instr = p->n_instr;
    a->n_tasks = p->n_tasks;
    a->n_counters = p->n_counters;
    a->n_workers = p->n_workers;
    a->n_ctx = p->n_ctx;
    a->kv_dim = p->kv_dim;
    a->kv_type = (uint32_t)p->kv_type;
    a->prefetch_bytes = b->gpu.no_prefetch      ? 0u
                        : b->gpu.prefetch_bytes ? b->gpu.prefetch_bytes
                                                : MK_CUDA_PREFETCH_BYTES;
    a->prefetch_ops = b->gpu.prefetch_ops ? b->gpu.prefetch_ops : ~0u; /* every op mk_prefetch_task knows */
    a->prefetch_min = b->gpu.prefetch_all                                        ? 0u
                      : b->gpu.prefetch_min                                      ? b->gpu.prefetch_min
                      : mk_program_weight_bytes(p) >= MK_CUDA_PREFETCH_ALL_BYTES ? 0u
                                                                                 : MK_CUDA_PREFETCH_MIN;
    a->n_layer = p->n_layer;
    a->vocab = p->vocab;
    a->fault_kind = (uint32_t)b->fault.kind;
    a->fault_step = b->fault.step;
    return MK_OK;
}

/* RoPE's (cos, sin) for every position and pair, in double as the CPU executor computes them
 * (position scale and Llama 3 frequency divisors included), so that the kernels skip
 * double-precision pow/cos/sin in the qkv op. Skipped (the kernels then compute the angles) when
 * the layers disagree on the rope parameters. */
static enum mk_status mk_cuda_setup_rope(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_program *p = b->prog;
    const struct mk_args_qkv *first = NULL;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        if (in->op != MK_OP_NORM_QKV_ROPE) continue;
        const struct mk_args_qkv *a = &in->args.qkv;
        if (first && (a->n_rot != first->n_rot || a->rope_base != first->rope_base ||
                      a->rope_scale != first->rope_scale || a->rope_freqs != first->rope_freqs))
            return MK_OK;
        if (!first) first = a;
    }
    if (!first) return MK_OK;
    const uint32_t n_rot = first->n_rot, pairs = n_rot / 2u;
    const float base = first->rope_base;
    /* The program's weight table keeps host addresses (the device copy is separate); validated f32. */
    const float *ff =
        first->rope_freqs == MK_NO_WEIGHT ? NULL : (const float *)(uintptr_t)p->weights[first->rope_freqs].ptr;
    size_t n = (size_t)p->n_ctx * pairs;
    float *tab = malloc(n * 2u * sizeof(float));
    if (!tab) return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the RoPE table (%zu entries)", n);
    for (uint32_t pos = 0; pos < p->n_ctx; pos++)
        for (uint32_t k = 0; k < pairs; k++) {
            double theta = (double)pos * (double)first->rope_scale * pow((double)base, -2.0 * k / n_rot);
            if (ff) theta /= (double)ff[k];
            tab[2u * ((size_t)pos * pairs + k)] = (float)cos(theta);
            tab[2u * ((size_t)pos * pairs + k) + 1u] = (float)sin(theta);
        }
    enum mk_status st = mk_cuda_upload(b, &b->d_rope, tab, n * 2u * sizeof(float), "the RoPE table", err);
    free(tab);
    if (st != MK_OK) return st;
    b->args.rope_table = b->d_rope;
    b->args.rope_pairs = pairs;
    b->args.rope_scale = first->rope_scale;
    b->args.rope_freqs = first->rope_freqs;
    b->args.rope_base = base;
    return MK_OK;
}

enum mk_status mk_cuda_check_memory(uint64_t weights, uint64_t kv, uint64_t other, uint64_t free_bytes,
                                    uint64_t total_bytes, struct mk_error *err) {
    uint64_t need = weights + kv + other + MK_CUDA_RESERVE_BYTES;
    if (need <= free_bytes) return MK_OK;
    return mk_error_set(err, MK_ERR_NOMEM,
                        "the model needs %.2f GB of GPU memory (weights %.2f GB, KV cache %.2f GB, buffers %.2f GB, "
                        "reserve %.2f GB) and the GPU has %.2f GB free of %.2f GB: use a smaller context (--ctx), a "
                        "smaller weight type, or --backend cpu",
                        need / 1e9, weights / 1e9, kv / 1e9, other / 1e9, MK_CUDA_RESERVE_BYTES / 1e9, free_bytes / 1e9,
                        total_bytes / 1e9);
}

/* ---- The megakernel. ---- */

static enum mk_status mk_cuda_start_megakernel(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    size_t watch_bytes = sizeof(struct mk_watch) + (size_t)b->info.grid * sizeof(struct mk_watch_block);
    if (!b->watch) {
        void *h = NULL;
        if (MK_CU(cu, err, cuMemHostAlloc(&h, watch_bytes, MK_CU_MEMHOSTALLOC_DEVICEMAP | MK_CU_MEMHOSTALLOC_PORTABLE)))
            return MK_ERR_CUDA;
        b->watch = h;
        mk_cu_devptr watch_dev = 0;
        if (MK_CU(cu, err, cuMemHostGetDevicePointer_v2(&watch_dev, h, 0))) return MK_ERR_CUDA;
        b->args.watch = watch_dev;
    }
    memset(b->watch, 0, watch_bytes);
    b->watch->n_blocks = b->info.grid;

    struct mk_hostqueue_params qp = {
        .cu = cu,
        .watchdog_ms = b->watchdog_ms,
        .probe = mk_cuda_probe,
        .describe = mk_cuda_describe,
        .ctx = b,
        .what = "megakernel",
    };
    enum mk_status st = mk_hostqueue_create(&qp, &b->hq, err);
    if (st != MK_OK) return st;
    b->args.mailbox = mk_hostqueue_mailbox_device(b->hq);
    void *params[1] = { &b->args };
    int r = MK_CU_EX(cu, err, MK_CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                     cuLaunchCooperativeKernel(b->fn, b->info.grid, 1, 1, MK_BLOCK_THREADS, 1, 1, b->info.smem_bytes,
                                               b->stream, params));
    /* Too large a grid is a reason for AUTO to try per-op launches. */
    if (r == 1)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "%s cannot hold the megakernel's %u blocks of %u threads with %u bytes of shared memory "
                            "at once (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)",
                            b->info.device, b->info.grid, MK_BLOCK_THREADS, b->info.smem_bytes);
    if (r) {
        mk_error_prefix(err, "launching the megakernel on %u blocks of %u threads with %u bytes of shared memory",
                        b->info.grid, MK_BLOCK_THREADS, b->info.smem_bytes);
        return MK_ERR_CUDA;
    }
    b->launched = true;
    return MK_OK;
}

/* Waits up to ms for the kernel stream to drain: true once nothing runs (finished or died). */
static bool mk_cuda_wait_idle(struct mk_cuda_backend *b, unsigned ms) {
    uint64_t t0 = mk_cuda_now_ns();
    for (;;) {
        struct mk_error e;
        if (MK_CU_EX(b->cu, &e, MK_CUDA_ERROR_NOT_READY, cuStreamQuery(b->stream)) != 1) return true;
        if (mk_cuda_now_ns() - t0 > (uint64_t)ms * 1000000ull) return false;
        mk_cuda_sleep_us(200);
    }
}

/* ---- The vtable. ---- */

static enum mk_status mk_cuda_check_cmd(struct mk_cuda_backend *b, const struct mk_step_cmd *cmd,
                                        struct mk_error *err) {
    if (b->poisoned) {
        if (err) *err = b->poison_err;
        mk_error_prefix(err, "refused, an earlier failure poisoned this %s session", b->base.vt->name);
        return b->poison_err.status;
    }
    if (cmd->pos < 0 || (uint32_t)cmd->pos >= b->prog->n_ctx)
        return mk_error_set(err, MK_ERR_CONTEXT_FULL,
                            "position %d is outside the context of %u tokens allocated on the GPU", cmd->pos,
                            b->prog->n_ctx);
    if (cmd->token < 0 || (uint32_t)cmd->token >= b->prog->vocab)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "token %d is outside the vocabulary of %u", cmd->token,
                            b->prog->vocab);
    return MK_OK;
}

static enum mk_status mk_cuda_poison(struct mk_cuda_backend *b, enum mk_status st, struct mk_error *err) {
    b->poisoned = true;
    if (err)
        b->poison_err = *err;
    else
        mk_error_set(&b->poison_err, st, "a GPU step failed");
    return st;
}

/* The megakernel again after chunk steps: its counters, work counter and step state start from
 * zero, as at the first launch (steps count from 0 in a new launch), with a new host queue. */
static enum mk_status mk_cuda_relaunch(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    const struct mk_program *p = b->prog;
    const uint64_t t0 = mk_cuda_now_ns();
    if (MK_CU(cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    if (MK_CU(cu, err, cuStreamSynchronize(b->stream))) return MK_ERR_CUDA;
    /* On the kernel's stream: it is non-blocking, so memsets on the legacy stream were not
     * ordered before the launch. */
    if (MK_CU(cu, err, cuMemsetD8Async(b->d_counters, 0, (size_t)p->n_counters * 4u, b->stream)) ||
        MK_CU(cu, err, cuMemsetD8Async(b->d_work, 0, sizeof(uint64_t), b->stream)) ||
        MK_CU(cu, err, cuMemsetD8Async(b->d_state, 0, sizeof(struct mk_step_state), b->stream)))
        return MK_ERR_CUDA;
    enum mk_status st = mk_cuda_start_megakernel(b, err);
    if (st == MK_OK && b->verbose && b->gpu.trace != MK_GPU_TRACE_OFF)
        fprintf(stderr, "mk: megakernel launched again after chunk steps in %.3f ms\n", (mk_cuda_now_ns() - t0) / 1e6);
    return st;
}

/* The megakernel leaves its loop (STOP) so that the chunk kernels get the GPU. */
static enum mk_status mk_cuda_park(struct mk_cuda_backend *b, struct mk_error *err) {
    if (!b->launched) return MK_OK;
    const uint64_t t0 = mk_cuda_now_ns();
    mk_hostqueue_stop(b->hq);
    if (mk_hostqueue_poisoned(b->hq) || !mk_cuda_wait_idle(b, MK_CUDA_EXIT_WAIT_MS)) {
        __atomic_store_n(&b->watch->abort, 1u, __ATOMIC_RELEASE);
        mk_cuda_wait_idle(b, MK_CUDA_EXIT_WAIT_MS);
        return mk_error_set(err, MK_ERR_INTERNAL, "the megakernel did not leave its loop for a chunk step");
    }
    b->launched = false;
    if (MK_CU(b->cu, err, cuStreamSynchronize(b->stream))) {
        mk_error_prefix(err, "the megakernel ended with an error before a chunk step");
        return MK_ERR_CUDA;
    }
    mk_hostqueue_free(b->hq);
    b->hq = NULL;
    if (b->verbose && b->gpu.trace != MK_GPU_TRACE_OFF)
        fprintf(stderr, "mk: megakernel left its loop for a chunk step in %.3f ms\n", (mk_cuda_now_ns() - t0) / 1e6);
    return MK_OK;
}

static enum mk_status mk_cuda_mega_step(struct mk_backend *base, const struct mk_step_cmd *cmd, int32_t *out_token,
                                        struct mk_error *err) {
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    enum mk_status st = mk_cuda_check_cmd(b, cmd, err);
    if (st != MK_OK) return st;
    if (!b->launched && (st = mk_cuda_relaunch(b, err)) != MK_OK) return mk_cuda_poison(b, st, err);
    b->last_chunk = false;
    struct mk_step_cmd c = *cmd;
    c.cmd = MK_CMD_STEP;
    struct mk_hostqueue_result res;
    st = mk_hostqueue_submit(b->hq, &c, &res, err);
    if (st != MK_OK) return mk_hostqueue_poisoned(b->hq) ? mk_cuda_poison(b, st, err) : st;
    *out_token = res.token;
    b->base.last_step_ns = res.t_end_ns > res.t_start_ns ? res.t_end_ns - res.t_start_ns : 0;
    return MK_OK;
}

static enum mk_status mk_cuda_mega_generate(struct mk_backend *base, const struct mk_step_cmd *cmd,
                                            const struct mk_backend_gen *gen, struct mk_backend_gen_result *res,
                                            struct mk_error *err) {
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    memset(res, 0, sizeof *res);
    enum mk_status st = mk_cuda_check_cmd(b, cmd, err);
    if (st != MK_OK) return st;
    if (!b->launched && (st = mk_cuda_relaunch(b, err)) != MK_OK) return mk_cuda_poison(b, st, err);
    b->last_chunk = false;
    const struct mk_hostqueue_gen hg = { .max_steps = gen->max_steps,
                                         .stop = gen->stop,
                                         .n_stop = gen->n_stop,
                                         .on_token = gen->on_token,
                                         .user = gen->user };
    struct mk_hostqueue_gen_result hr;
    st = mk_hostqueue_generate(b->hq, cmd, &hg, &hr, err);
    res->n_delivered = hr.n_delivered;
    if (st != MK_OK) return mk_hostqueue_poisoned(b->hq) ? mk_cuda_poison(b, st, err) : st;
    res->n_steps = hr.n_steps;
    res->why = hr.why;
    res->t_start_ns = hr.t_start_ns;
    res->t_end_ns = hr.t_end_ns;
    b->base.last_step_ns = hr.n_steps && hr.t_end_ns > hr.t_start_ns ? (hr.t_end_ns - hr.t_start_ns) / hr.n_steps : 0;
    return MK_OK;
}

/* A launch of an op kernel (per-op or chunk) of threads a block on b's stream: with programmatic
 * stream serialization where b->pdl says. MK_CU's result. */
static int mk_cuda_launch_ops(struct mk_cuda_backend *b, mk_cu_function fn, uint32_t gx, uint32_t gy, uint32_t gz,
                              uint32_t threads, uint32_t smem, void **params, struct mk_error *err) {
    if (!b->pdl) return MK_CU(b->cu, err, cuLaunchKernel(fn, gx, gy, gz, threads, 1, 1, smem, b->stream, params, NULL));
    struct mk_cu_launch_attr pdl = { .id = MK_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, .v.value = 1 };
    const struct mk_cu_launch_config cfg = { gx, gy, gz, threads, 1, 1, smem, b->stream, &pdl, 1 };
    return MK_CU(b->cu, err, cuLaunchKernelEx(&cfg, fn, params, NULL));
}

/* One step as per-op launches (also what the graph captures). */
static enum mk_status mk_cuda_enqueue_ops(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    const struct mk_program *p = b->prog;
    if (MK_CU(cu, err,
              cuMemcpyHtoDAsync_v2(b->d_state + offsetof(struct mk_step_state, cmd), b->h_cmd,
                                   sizeof(struct mk_step_cmd), b->stream)))
        return MK_ERR_CUDA;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        if (in->op == MK_OP_NOP || in->op == MK_OP_BARRIER || !in->n_tasks) continue;
        uint32_t ii = i;
        void *params[2] = { &b->args, &ii };
        uint32_t smem = mk_layout_smem_words(in, p->weights) * 4u;
        if (mk_cuda_launch_ops(b, b->fn, in->n_tasks, 1, 1, MK_BLOCK_THREADS, smem, params, err)) {
            mk_error_prefix(err, "per-op launch of instruction %u '%s' (%u tasks)", i, p->labels[i], in->n_tasks);
            return MK_ERR_CUDA;
        }
    }
    if (MK_CU(cu, err,
              cuMemcpyDtoHAsync_v2(b->h_token, b->d_state + offsetof(struct mk_step_state, out_token), sizeof(int32_t),
                                   b->stream)))
        return MK_ERR_CUDA;
    return MK_OK;
}

static enum mk_status mk_cuda_launch_step(struct mk_backend *base, const struct mk_step_cmd *cmd, int32_t *out_token,
                                          struct mk_error *err) {
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    const struct mk_cuda *cu = b->cu;
    enum mk_status st = mk_cuda_check_cmd(b, cmd, err);
    if (st != MK_OK) return st;
    if (MK_CU(cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    *b->h_cmd = *cmd;
    b->h_cmd->cmd = MK_CMD_STEP;
    *b->h_token = -1;
    b->last_chunk = false;
    if (MK_CU(cu, err, cuEventRecord(b->ev0, b->stream))) return mk_cuda_poison(b, MK_ERR_CUDA, err);
    if (b->gexec) {
        if (MK_CU(cu, err, cuGraphLaunch(b->gexec, b->stream))) return mk_cuda_poison(b, MK_ERR_CUDA, err);
    } else if ((st = mk_cuda_enqueue_ops(b, err)) != MK_OK) {
        return mk_cuda_poison(b, st, err);
    }
    if (MK_CU(cu, err, cuEventRecord(b->ev1, b->stream))) return mk_cuda_poison(b, MK_ERR_CUDA, err);
    if (MK_CU(cu, err, cuStreamSynchronize(b->stream))) {
        mk_error_prefix(err, "%s step at pos %d", b->base.vt->name, cmd->pos);
        return mk_cuda_poison(b, MK_ERR_CUDA, err);
    }
    float ms = 0.0f;
    if (!MK_CU(cu, err, cuEventElapsedTime(&ms, b->ev0, b->ev1))) b->base.last_step_ns = (uint64_t)((double)ms * 1e6);
    *out_token = *b->h_token;
    return MK_OK;
}

/* Whether every matrix of w is Q4_K, Q5_K or Q6_K of whole super-blocks, which mk_chunk_mv_kq
 * and mk_chunk_mm_*_kq multiply as integers (the device copies are 256-byte aligned, so its loads are too). */
static bool mk_cuda_chunk_kquants(const struct mk_weight_ref *wt, const uint32_t w[3]) {
    for (int j = 0; j < 3; j++) {
        if (w[j] == MK_NO_WEIGHT) continue;
        const uint32_t t = wt[w[j]].dtype;
        if ((t != MK_DTYPE_Q4_K && t != MK_DTYPE_Q5_K && t != MK_DTYPE_Q6_K) || wt[w[j]].cols % 256u) return false;
    }
    return true;
}

/* Whether mk_chunk_mv_kq8_* takes the K-quant stack w (mk_cuda_chunk_kquants): each warp's 16 rows
 * must share one format, so where the format changes down the stack it changes at a multiple of
 * 16 rows (SILU's gate and up never share a warp). */
static bool mk_cuda_chunk_kq8(const struct mk_weight_ref *wt, const uint32_t w[3], bool silu) {
    uint32_t row = 0;
    for (int j = 0; j < 2 && !silu && w[j + 1] != MK_NO_WEIGHT; j++) {
        row += wt[w[j]].rows;
        if (row % 16u && wt[w[j]].dtype != wt[w[j + 1]].dtype) return false;
    }
    return true;
}

/* The widest matrix of the chunk program's products (their x rows' length). */
static uint32_t mk_cuda_product_cols(const struct mk_program *p) {
    uint32_t most = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        if (in->op != MK_OP_NORM_QKV_ROPE && in->op != MK_OP_MATVEC_RESIDUAL && in->op != MK_OP_NORM_GATE_UP_SILU)
            continue;
        const uint32_t w = in->op == MK_OP_MATVEC_RESIDUAL ? in->weight[0] : in->weight[1];
        if (p->weights[w].cols > most) most = p->weights[w].cols;
    }
    return most;
}

/* The weights of the chunk program's largest product that is not all bf16 (nor, with kq, all
 * K-quants: mk_chunk_mm_*_kq reads those as they are), as split rows (the LM head aside: it serves
 * a few rows per step): the space mk_chunk_wsplit decodes them into. */
static uint64_t mk_cuda_wsplit_floats(const struct mk_program *p, bool kq) {
    uint64_t most = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        int first = 0, count = 0;
        switch (in->op) {
        case MK_OP_NORM_QKV_ROPE: first = 1, count = 3; break;
        case MK_OP_MATVEC_RESIDUAL: first = 0, count = 1; break;
        case MK_OP_NORM_GATE_UP_SILU: first = 1, count = 2; break;
        default: continue;
        }
        uint64_t floats = 0;
        bool bf16 = true;
        uint32_t ws[3] = { MK_NO_WEIGHT, MK_NO_WEIGHT, MK_NO_WEIGHT };
        for (int j = first; j < first + count; j++) {
            const struct mk_weight_ref *w = &p->weights[in->weight[j]];
            floats += (uint64_t)w->rows * w->cols;
            bf16 = bf16 && w->dtype == MK_DTYPE_BF16;
            ws[j - first] = in->weight[j];
        }
        if (!bf16 && !(kq && mk_cuda_chunk_kquants(p->weights, ws)) && floats > most) most = floats;
    }
    return most;
}

/* One launch of chunk kernel k on grid (gx, gy, gz) with the launch record l, as it is. */
static enum mk_status mk_cuda_chunk_issue(struct mk_cuda_backend *b, enum mk_cuda_chunk_kernel k, uint32_t gx,
                                          uint32_t gy, uint32_t gz, uint32_t smem, struct mk_chunk_launch l,
                                          struct mk_error *err) {
    if (!gx || !gy) return MK_OK;
    if (b->gpu.trace != MK_GPU_TRACE_OFF && b->n_cev + 1u < MK_CUDA_CHUNK_EVENTS) {
        if (!b->cev[b->n_cev] && MK_CU(b->cu, err, cuEventCreate(&b->cev[b->n_cev], MK_CU_EVENT_DEFAULT)))
            return MK_ERR_CUDA;
        if (MK_CU(b->cu, err, cuEventRecord(b->cev[b->n_cev], b->stream))) return MK_ERR_CUDA;
        b->cev_ii[b->n_cev] = l.ii;
        b->cev_kernel[b->n_cev++] = (uint8_t)k;
    }
    /* The copy engine's products take their tensor maps as a third parameter, and a warp more. */
    const bool tx = mk_cuda_ck_xt(k);
    MK_ASSERT(!tx || b->c_tmaps);
    void *params[3] = { &b->cargs, &l, tx ? (void *)b->c_tmaps : NULL };
    if (mk_cuda_launch_ops(b, b->ck[k], gx, gy, gz, tx ? MK_CHUNK_MM_TX_THREADS : MK_BLOCK_THREADS, smem, params,
                           err)) {
        mk_error_prefix(err, "chunk step: %s on %ux%u blocks for instruction %u '%s'", mk_cuda_chunk_names[k], gx, gy,
                        l.ii, b->cprog->labels[l.ii]);
        return MK_ERR_CUDA;
    }
    return MK_OK;
}

static uint32_t mk_cuda_div_up(uint32_t a, uint32_t b) { return (a + b - 1u) / b; }

/* The pending RMSNorm (c_norm) launched, and the pending partials (c_pend) added into their output
 * by mk_chunk_mm_reduce. */
static enum mk_status mk_cuda_chunk_flush(struct mk_cuda_backend *b, struct mk_error *err) {
    if (b->c_norm_on) {
        b->c_norm_on = false;
        const enum mk_status st = mk_cuda_chunk_issue(b, MK_CK_RMSNORM, b->c_norm.m, 1, 1, 0, b->c_norm, err);
        if (st != MK_OK) return st;
    }
    if (!b->c_pend_on) return MK_OK;
    b->c_pend_on = false;
    const struct mk_chunk_launch r = b->c_pend;
    const uint32_t cols = r.mode == MK_CHUNK_MM_SILU ? r.ldx / 2u : r.ldx;
    return mk_cuda_chunk_issue(b, MK_CK_MM_REDUCE, mk_cuda_div_up(cols, MK_BLOCK_THREADS), r.m, 1, 0, r, err);
}

/* Whether the pending partials are those of the product whose output l reads: m rows of ldx floats
 * from x_off, stored (STORE) or added to (ADD) as mode says. Then l reads them in its place (x_off,
 * ldx: the partials; splits) and they are no longer pending. Only steps of few token rows, whose
 * launches are short enough that a launch's fixed cost counts: at 512 rows the folded kernels were
 * slower than the two launches they replace (llama-1b pp512 BF16 -4 %, Q4_K_M -2.6 %, run51). */
static bool mk_cuda_chunk_fold(struct mk_cuda_backend *b, struct mk_chunk_launch *l, enum mk_chunk_mm_mode mode) {
    const struct mk_chunk_launch *r = &b->c_pend;
    if (!b->c_pend_on || b->gpu.no_fold || l->m > MK_CHUNK_MV_TOKENS || r->mode != (uint32_t)mode ||
        r->y_off != l->x_off || r->ldy != l->ldx || r->ldx != l->ldx || r->m != l->m)
        return false;
    l->x_off = r->x_off;
    l->splits = r->splits;
    b->c_pend_on = false;
    return true;
}

/* One launch of chunk kernel k, after any pending partials are added. */
static enum mk_status mk_cuda_chunk_launch3(struct mk_cuda_backend *b, enum mk_cuda_chunk_kernel k, uint32_t gx,
                                            uint32_t gy, uint32_t gz, uint32_t smem, struct mk_chunk_launch l,
                                            struct mk_error *err) {
    enum mk_status st = mk_cuda_chunk_flush(b, err);
    return st != MK_OK ? st : mk_cuda_chunk_issue(b, k, gx, gy, gz, smem, l, err);
}

static enum mk_status mk_cuda_chunk_launch(struct mk_cuda_backend *b, enum mk_cuda_chunk_kernel k, uint32_t gx,
                                           uint32_t gy, uint32_t smem, struct mk_chunk_launch l, struct mk_error *err) {
    return mk_cuda_chunk_launch3(b, k, gx, gy, 1, smem, l, err);
}

/* Product kernel k on (gx, gy, splits) with each split's raw sums going to the partials (rows ldp
 * floats apart, from part_at floats into them), then mk_chunk_mm_reduce adding them in split order
 * into l's output with l's mode (rows: the outputs per token row, SILU's gate rows). That reduce
 * waits in c_pend for the next launch, which runs it first or, where it reads that output, adds the
 * partials itself. */
static enum mk_status mk_cuda_chunk_split_launch(struct mk_cuda_backend *b, enum mk_cuda_chunk_kernel k, uint32_t gx,
                                                 uint32_t gy, uint32_t splits, uint32_t smem, struct mk_chunk_launch l,
                                                 uint32_t rows, uint32_t ldp, uint32_t part_at, struct mk_error *err) {
    struct mk_chunk_launch r = l;
    r.x_parts = 0;
    r.n_off = r.s_off = 0;
    l.y_off = b->c_part + part_at;
    l.ldy = ldp;
    l.splits = splits;
    enum mk_status st = mk_cuda_chunk_launch3(b, k, gx, gy, splits, smem, l, err);
    r.x_off = b->c_part + part_at;
    r.ldx = ldp;
    r.splits = splits;
    MK_ASSERT(ldp == (r.mode == MK_CHUNK_MM_SILU ? 2u * rows : rows));
    if (st != MK_OK) return st;
    b->c_pend = r;
    b->c_pend_on = true;
    return MK_OK;
}

/* mk_cuda_chunk_mm's product over at most MK_CHUNK_MV_TOKENS token rows (l: its launch record, rows:
 * its gate rows for SILU, else the stacked rows) by mk_chunk_mv kernel k, which reads each weight
 * once: the columns are split until the grid has a few blocks per multiprocessor (the K-quants as
 * mk_chunk_mv_kq_plan says, their blocks taking several tiles each), and SILU, or ADD over several
 * splits, add the splits' partials after (an ADD on the integer tiles adds them itself, last split
 * of each tile, mk_kq8_finish). MK_ERR_UNSUPPORTED when the partials do not fit. */
static enum mk_status mk_cuda_chunk_mv(struct mk_cuda_backend *b, struct mk_chunk_launch l, uint32_t rows,
                                       enum mk_cuda_chunk_kernel k, struct mk_error *err) {
    const bool silu = l.mode == MK_CHUNK_MM_SILU;
    const uint32_t K = l.ldx, all = silu ? 2u * rows : rows;
    const uint32_t tiles = mk_cuda_div_up(rows, silu ? MK_CHUNK_MV_ROWS / 2u : MK_CHUNK_MV_ROWS);
    const bool kq8 = k >= MK_CK_MV_KQ8_2 && k <= MK_CK_MV_KQ8_8;
    uint32_t gx = tiles, splits;
    if (k == MK_CK_MV_KQ || kq8) {
        const uint32_t sms = (uint32_t)b->info.sm_count;
        mk_chunk_mv_kq_plan(l.m, K, tiles, b->c_mv_k, b->c_mv_pair, sms, 2u * sms, mk_cuda_part_floats(b), silu, all,
                            b->gpu.mv_blocks, kq8, &splits, &gx);
    } else {
        /* bf16 and the other formats: a tile a block, 4 blocks per multiprocessor. */
        const uint32_t want = 4u * (uint32_t)b->info.sm_count, most = mk_cuda_div_up(K, MK_CHUNK_MV_KSTEP);
        splits = mk_cuda_div_up(K, b->c_mv_k);
        if (gx * splits < want) splits = mk_cuda_div_up(want, gx);
        if (splits > most) splits = most;
        splits = mk_cuda_div_up(K, mk_chunk_mv_span(K, splits)); /* no split left empty; the span stays */
    }
    const uint32_t span = mk_chunk_mv_span(K, splits);
    MK_ASSERT(mk_chunk_mv_span(K, splits) == span && span <= b->c_mv_k);
    const uint32_t smem = mk_chunk_mv_kq_smem(l.m, span, kq8);
    /* x the SILU product's output with its partials pending: the integer tiles add them as they
     * stage x (one launch fewer), and this product's own partials go after them. Each block of a
     * split reads the partials of its columns again, so only over two splits at most: llama-1b's
     * (two) gained 3-4 % at 2 and 4 tokens, llama-8b's (eight, 32 blocks a split) lost 5-14 %
     * (BENCHMARKS.md, twenty-sixth session). */
    const struct mk_chunk_launch *r = &b->c_pend;
    uint64_t part_at = 0;
    if (kq8 && b->c_pend_on && !b->gpu.no_fold && !silu && r->mode == MK_CHUNK_MM_SILU && r->y_off == l.x_off &&
        r->ldy == K && r->ldx == 2u * K && r->m == l.m && r->splits <= 2u) {
        const uint64_t at = ((uint64_t)(r->x_off - b->c_part) + (uint64_t)r->splits * r->m * r->ldx + 15u) & ~15ull;
        if (splits == 1u || at + (uint64_t)splits * l.m * all <= mk_cuda_part_floats(b)) {
            l.x_off = r->x_off;
            l.x_parts = r->splits;
            b->c_pend_on = false;
            part_at = at;
        }
    }
    if ((splits > 1u || silu) && part_at + (uint64_t)splits * l.m * all > mk_cuda_part_floats(b))
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "the partials of %u splits do not fit", splits);
    /* x the RMSNorm still pending: formed here from the residual rows and the sums the product
     * ahead left (mk_kq8_finish). */
    if (kq8 && b->c_norm_on && b->c_norm.y_off == l.x_off && b->c_norm.m == l.m && b->c_norm.ldx == K) {
        l.x_off = b->c_norm.x_off;
        l.s_off = b->c_fin;
        l.w_off = b->c_norm.w0;
        l.eps = b->c_norm.eps;
        b->c_norm_on = false;
    }
    /* An ADD over several splits finishes them itself, leaving the sums for the next norm. */
    const bool fin = kq8 && l.mode == MK_CHUNK_MM_ADD && splits > 1u && !b->gpu.no_fold && l.ldy == rows &&
                     rows <= b->cprog->n_embd && l.m <= MK_CHUNK_MV8_TOKENS;
    const uint32_t residual = l.y_off;
    if (fin) {
        l.n_off = residual;
        l.s_off = b->c_fin;
    }
    if (splits == 1u && !silu) return mk_cuda_chunk_launch(b, k, gx, 1, smem, l, err);
    const enum mk_status st =
        mk_cuda_chunk_split_launch(b, k, gx, 1, splits, smem, l, rows, all, (uint32_t)part_at, err);
    if (st == MK_OK && fin) {
        b->c_pend_on = false;
        b->c_sums_on = true;
        b->c_sums_y = residual;
        b->c_sums_m = l.m;
        b->c_sums_n = rows;
    }
    return st;
}

/* Product kernel k on (gx, gy) tiles of stages of kstage columns. Too few tiles to fill the GPU (few
 * tokens, or few rows for a long row): the columns are split too, each split at least two stages,
 * and the partial sums added in order after. */
static enum mk_status mk_cuda_chunk_mm_grid(struct mk_cuda_backend *b, enum mk_cuda_chunk_kernel k, uint32_t gx,
                                            uint32_t gy, uint32_t smem, struct mk_chunk_launch l, uint32_t rows,
                                            uint32_t kstage, struct mk_error *err) {
    const bool silu = l.mode == MK_CHUNK_MM_SILU;
    const uint32_t want = 2u * (uint32_t)b->info.sm_count, ldp = silu ? 2u * rows : rows;
    uint32_t splits = gx * gy < want ? mk_cuda_div_up(want, gx * gy) : 1u;
    const uint32_t most = b->cprog->weights[l.w0].cols / (2u * kstage);
    if (splits > most) splits = most;
    while (splits > 1u && (uint64_t)splits * l.m * ldp > mk_cuda_part_floats(b)) splits--;
    if (splits <= 1u) return mk_cuda_chunk_launch(b, k, gx, gy, smem, l, err);
    return mk_cuda_chunk_split_launch(b, k, gx, gy, splits, smem, l, rows, ldp, 0, err);
}

/* The _WIDE_XB products' tile and column splits (mk_chunk_xb_plan, megakernel/chunk.h) on this
 * GPU: 192- and 128-row tiles where the sm_90a code runs (the blocks of 128 token rows), forced by
 * the settings' xb_rows. */
static uint32_t mk_cuda_xb_plan(const struct mk_cuda_backend *b, uint32_t gx, uint32_t rows, bool silu, uint32_t K,
                                uint32_t m, uint32_t *splits) {
    return mk_chunk_xb_plan((uint32_t)b->info.sm_count, b->c_xb_tokens == MK_CHUNK_MM_XB_TOKENS, b->gpu.xb_rows,
                            mk_cuda_part_floats(b), gx, rows, silu, K, m, splits);
}

/* The tensor map of a bf16 tensor at dev of rows of cols values, stride bytes apart, in boxes of
 * MK_CHUNK_MM_TX_ROW_BYTES by box_rows rows with the 128-byte swizzle (mk_chunk_tmaps). */
static enum mk_status mk_cuda_tmap(struct mk_cuda_backend *b, struct mk_chunk_tmap *map, mk_cu_devptr dev,
                                   uint32_t cols, uint32_t rows, uint64_t stride, uint32_t box_rows,
                                   struct mk_error *err) {
    const uint64_t dims[2] = { cols, rows }, strides[1] = { stride };
    const uint32_t box[2] = { MK_CHUNK_MM_TX_ROW_BYTES / 2u, box_rows }, steps[2] = { 1, 1 };
    if (MK_CU(b->cu, err,
              cuTensorMapEncodeTiled(map, MK_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)(uintptr_t)dev, dims, strides,
                                     box, steps, MK_CU_TENSOR_MAP_INTERLEAVE_NONE, MK_CU_TENSOR_MAP_SWIZZLE_128B,
                                     MK_CU_TENSOR_MAP_L2_PROMOTION_L2_256B, MK_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)))
        return MK_ERR_CUDA;
    return MK_OK;
}

/* Whether the _WIDE_XB product of launch l (x: split rows at l->x_off; the matrices w, n of them, of
 * K columns) can bring its tiles in by the copy engine, and if so their tensor maps: 16-byte
 * aligned rows of whole bf16 values, stacked matrices whose boundaries fall between boxes. */
static enum mk_status mk_cuda_xt_maps(struct mk_cuda_backend *b, const struct mk_chunk_launch *l, const uint32_t w[3],
                                      bool silu, struct mk_chunk_tmaps *tm, bool *ok, struct mk_error *err) {
    const struct mk_weight_ref *wt = b->cwtable;
    const uint32_t K = wt[w[0]].cols;
    *ok = false;
    if (!b->c_xt || K % 8u || l->x_off % 4u || l->ldx % 4u) return MK_OK;
    for (int j = 0; j < 3; j++) {
        if (w[j] == MK_NO_WEIGHT) continue;
        if (wt[w[j]].dtype != MK_DTYPE_BF16 || wt[w[j]].cols != K || wt[w[j]].row_bytes != 2u * K || wt[w[j]].ptr % 16u)
            return MK_OK;
        /* a box of rows never straddles two stacked matrices */
        if (!silu && j < 2 && w[j + 1] != MK_NO_WEIGHT && wt[w[j]].rows % MK_CHUNK_MM_TX_ROWS) return MK_OK;
    }
    memset(tm, 0, sizeof *tm);
    enum mk_status st =
        mk_cuda_tmap(b, &tm->x, b->d_carena + 4ull * l->x_off, K, l->m, 4ull * l->ldx, MK_CHUNK_MM_XB_TOKENS, err);
    for (int j = 0; j < 3 && st == MK_OK; j++)
        if (w[j] != MK_NO_WEIGHT)
            st = mk_cuda_tmap(b, &tm->w[j], wt[w[j]].ptr, K, wt[w[j]].rows, 2ull * K, MK_CHUNK_MM_TX_ROWS, err);
    *ok = st == MK_OK;
    return st;
}

/* The matrix product y (m rows from y_off, ldy apart) = w . x rows, where w is w0 alone, w0 with
 * w1 and w2 stacked below it (q, k, v), or silu(w0) * w1 for MK_CK_MM_SILU. */
static enum mk_status mk_cuda_chunk_mm(struct mk_cuda_backend *b, enum mk_cuda_chunk_kernel k, uint32_t ii,
                                       const uint32_t w[3], uint32_t m, uint32_t x_off, uint32_t y_off, uint32_t ldy,
                                       struct mk_error *err) {
    const struct mk_weight_ref *wt = b->cprog->weights;
    uint32_t rows = wt[w[0]].rows, per_block = MK_CHUNK_MM_ROWS;
    bool bf16 = true;
    for (int j = 0; j < 3; j++) bf16 = bf16 && (w[j] == MK_NO_WEIGHT || wt[w[j]].dtype == MK_DTYPE_BF16);
    const bool silu = k == MK_CK_MM_SILU;
    if (k == MK_CK_MM_ADD) b->c_sums_on = false; /* the residual rows change */
    const enum mk_chunk_mm_mode mode = silu                ? MK_CHUNK_MM_SILU
                                       : k == MK_CK_MM_ADD ? MK_CHUNK_MM_ADD
                                                           : MK_CHUNK_MM_STORE;
    uint64_t all = 0; /* weights of every matrix */
    for (int j = 0; j < 3; j++) all += w[j] == MK_NO_WEIGHT ? 0u : (uint64_t)wt[w[j]].rows * wt[w[j]].cols;
    /* Block formats over several token blocks: each block would decode the same tiles, so the
     * matrices are decoded once into split rows first. */
    const bool kw = !bf16 && !b->gpu.no_chunk_kq && m > MK_CUDA_KQ_MAX &&
                    MK_CHUNK_XH_FLOATS(m, wt[w[0]].cols) <= b->c_xh_floats && mk_cuda_chunk_kquants(wt, w);
    const bool kq = !bf16 && !kw && !b->gpu.no_chunk_kq && m <= MK_CUDA_KQ_MAX_ALONE && mk_cuda_chunk_kquants(wt, w);
    const bool dq = !bf16 && !kq && !kw && m >= b->c_dq_min && all <= b->c_wsplit_floats;
    uint32_t smem = MK_CHUNK_MM_SMEM;
    /* The program's act_bf16_min: x rounded to bf16, on the wide products whatever the rows. */
    const bool xb = bf16 && b->cprog->act_bf16_min && m >= b->cprog->act_bf16_min;
    if (bf16 || dq) {
        k = (enum mk_cuda_chunk_kernel)((int)k - MK_CK_MM_STORE +
                                        (xb     ? MK_CK_MM_STORE_WIDE_XB
                                         : bf16 ? MK_CK_MM_STORE_WIDE
                                                : MK_CK_MM_STORE_SPLIT));
        per_block = bf16 ? MK_CHUNK_MM_WIDE_ROWS : MK_CHUNK_MM_SPLIT_ROWS;
        smem = xb ? b->c_xb_smem : bf16 ? MK_CHUNK_MM_WIDE_SMEM : b->c_split_smem;
    }
    if (silu)
        per_block /= 2u;
    else
        for (int j = 1; j < 3; j++) rows += w[j] == MK_NO_WEIGHT ? 0u : wt[w[j]].rows;
    struct mk_chunk_launch l = { .ii = ii,
                                 .w0 = w[0],
                                 .w1 = w[1],
                                 .w2 = w[2],
                                 .mode = (uint32_t)mode,
                                 .m = m,
                                 .x_off = x_off,
                                 .ldx = wt[w[0]].cols,
                                 .y_off = y_off,
                                 .ldy = ldy };
    if (m <= MK_CHUNK_MV_TOKENS && b->c_mv_k && !xb) {
        /* K-quants over up to 8 rows: x as int8 levels on the megakernel's integer tiles, unless
         * MK_CUDA_MV_KQ8=0 asks for the bf16 decoding (mk_chunk_mv_kq) to compare. */
        const uint32_t nt = mk_chunk_mv8_tokens(m);
        const enum mk_cuda_chunk_kernel kq8 = nt == 2u ? MK_CK_MV_KQ8_2 : nt == 4u ? MK_CK_MV_KQ8_4 : MK_CK_MV_KQ8_8;
        const bool take8 = !b->gpu.no_mv_kq8 && m <= MK_CHUNK_MV8_TOKENS;
        const enum mk_cuda_chunk_kernel mv = bf16                                      ? MK_CK_MV_BF16
                                             : !mk_cuda_chunk_kquants(wt, w)           ? MK_CK_MV
                                             : take8 && mk_cuda_chunk_kq8(wt, w, silu) ? kq8
                                                                                       : MK_CK_MV_KQ;
        enum mk_status st = mk_cuda_chunk_mv(b, l, rows, mv, err);
        if (st != MK_ERR_UNSUPPORTED) return st;
    }
    if (kq) {
        /* The K-quant integers as they are: no decoded copy, each block reads the quantized rows.
         * 32-token blocks where they pad fewer token rows than 64-token ones (17-32, 65-96): on a
         * tie the 64-token blocks, which read each weight half as often (llama-8b pp64 -9 % in
         * 32-token blocks, llama-1b +13 %; run92, run93). */
        const bool k32 = m % MK_CHUNK_MM_TOKENS != 0u && m % MK_CHUNK_MM_TOKENS <= MK_CHUNK_MM_TOKENS / 2u;
        k = (enum mk_cuda_chunk_kernel)((int)k - MK_CK_MM_STORE + (k32 ? MK_CK_MM_STORE_KQ32 : MK_CK_MM_STORE_KQ));
        const uint32_t gx = mk_cuda_div_up(m, k32 ? MK_CHUNK_MM_TOKENS / 2u : MK_CHUNK_MM_TOKENS);
        const uint32_t gy = mk_cuda_div_up(rows, silu ? MK_CHUNK_MMQ_ROWS / 2u : MK_CHUNK_MMQ_ROWS);
        return mk_cuda_chunk_mm_grid(b, k, gx, gy, k32 ? MK_CHUNK_MMQ32_SMEM : MK_CHUNK_MMQ_SMEM, l, rows,
                                     MK_CHUNK_MMQ_KS, err);
    }
    if (kw) {
        /* x once to f16 tiles laid out as the products' stages, then each block reads the
         * quantized rows themselves. */
        struct mk_chunk_launch x = l;
        x.y_off = b->c_xh;
        enum mk_status st = mk_cuda_chunk_launch(b, MK_CK_XH, MK_CHUNK_XH_ROWS(m), 1, 0, x, err);
        if (st != MK_OK) return st;
        l.x_off = b->c_xh;
        k = (enum mk_cuda_chunk_kernel)((int)k - MK_CK_MM_STORE + MK_CK_MM_STORE_KW);
        const uint32_t gx = mk_cuda_div_up(m, MK_CHUNK_MMW_TOKENS);
        const uint32_t gy = mk_cuda_div_up(rows, silu ? MK_CHUNK_MMW_ROWS / 2u : MK_CHUNK_MMW_ROWS);
        return mk_cuda_chunk_mm_grid(b, k, gx, gy, MK_CHUNK_MMW_SMEM, l, rows, 2u * MK_CHUNK_MMW_KS, err);
    }
    if (xb) {
        const uint32_t gx = mk_cuda_div_up(m, b->c_xb_tokens);
        uint32_t splits;
        const uint32_t bn = mk_cuda_xb_plan(b, gx, rows, silu, wt[w[0]].cols, m, &splits);
        const uint32_t gy = mk_cuda_div_up(rows, silu ? bn / 2u : bn);
        /* By the copy engine where the tensor maps can be made. */
        struct mk_chunk_tmaps tm;
        bool tx;
        enum mk_status st = mk_cuda_xt_maps(b, &l, w, silu, &tm, &tx, err);
        if (st != MK_OK) return st;
        const int base = bn == MK_CHUNK_MM_WIDE_ROWS ? (tx ? MK_CK_MM_STORE_WIDE_XT : MK_CK_MM_STORE_WIDE_XB)
                         : bn == 192u                ? (tx ? MK_CK_MM_STORE_WIDE_XT192 : MK_CK_MM_STORE_WIDE_XB192)
                                                     : (tx ? MK_CK_MM_STORE_WIDE_XT128 : MK_CK_MM_STORE_WIDE_XB128);
        k = (enum mk_cuda_chunk_kernel)((int)k - MK_CK_MM_STORE_WIDE_XB + base);
        if (tx) smem = MK_CHUNK_MM_XT_SMEM;
        if (b->verbose && b->gpu.trace != MK_GPU_TRACE_OFF)
            fprintf(stderr,
                    "mk: chunk product %u: %u token rows by %u, tiles of %u rows, %u x %u blocks, %u splits, %s\n", ii,
                    m, rows, bn, gx, gy, splits, tx ? "copy engine" : "asynchronous copies");
        b->c_tmaps = tx ? &tm : NULL;
        if (splits <= 1u)
            st = mk_cuda_chunk_launch(b, k, gx, gy, smem, l, err);
        else
            st = mk_cuda_chunk_split_launch(b, k, gx, gy, splits, smem, l, rows, silu ? 2u * rows : rows, 0, err);
        b->c_tmaps = NULL;
        return st;
    }
    l.w_off = dq ? b->c_wsplit : 0u;
    /* Token blocks side by side (grid x): the blocks of a weight tile run together. */
    const uint32_t gx = mk_cuda_div_up(m, MK_CHUNK_MM_TOKENS), gy = mk_cuda_div_up(rows, per_block);
    if (dq) {
        struct mk_chunk_launch d = l;
        d.y_off = b->c_wsplit;
        const uint64_t threads = all / wt[w[0]].cols * mk_cuda_div_up(wt[w[0]].cols, 8u);
        enum mk_status st = mk_cuda_chunk_launch(
            b, MK_CK_WSPLIT, (uint32_t)((threads + MK_BLOCK_THREADS - 1u) / MK_BLOCK_THREADS), 1, 0, d, err);
        if (st != MK_OK) return st;
    }
    return mk_cuda_chunk_mm_grid(b, k, gx, gy, smem, l, rows, MK_CHUNK_MM_K, err);
}

/* RMSNorm of m rows of n floats from x_off into the scratch rows c_xn. */
static enum mk_status mk_cuda_chunk_norm(struct mk_cuda_backend *b, uint32_t ii, uint32_t norm, float eps, uint32_t m,
                                         uint32_t x_off, bool defer, struct mk_error *err) {
    const uint32_t n = b->cprog->weights[norm].cols;
    struct mk_chunk_launch l = { .ii = ii,
                                 .w0 = norm,
                                 .w1 = MK_NO_WEIGHT,
                                 .w2 = MK_NO_WEIGHT,
                                 .m = m,
                                 .x_off = x_off,
                                 .ldx = n,
                                 .y_off = b->c_xn,
                                 .ldy = n,
                                 .eps = eps };
    if (defer && !b->c_pend_on && b->c_sums_on && b->c_sums_y == x_off && b->c_sums_m == m && b->c_sums_n == n &&
        b->cprog->weights[norm].dtype == MK_DTYPE_F32 && (x_off & 3u) == 0 && (n & 3u) == 0) {
        /* The product ahead finished its splits and left its tiles' sums: the product after forms
         * the norm itself where it can (mk_cuda_chunk_mv), otherwise the next launch runs it. */
        b->c_norm = l;
        b->c_norm_on = true;
        return MK_OK;
    }
    if (mk_cuda_chunk_fold(b, &l, MK_CHUNK_MM_ADD)) {
        /* The residual rows gain the product's partials and are normalized in one launch. */
        l.y_off = x_off;
        l.ldy = n;
        l.n_off = b->c_xn;
        MK_ASSERT(n <= b->cprog->n_embd && m <= b->cprog->ubatch); /* the scratch's size */
        l.f_off = b->c_fold;
        l.s_off = b->c_fold + b->cprog->ubatch;
        return mk_cuda_chunk_launch(b, MK_CK_REDUCE_NORM, mk_cuda_div_up(n, MK_BLOCK_THREADS), m, 0, l, err);
    }
    return mk_cuda_chunk_launch(b, MK_CK_RMSNORM, m, 1, 0, l, err);
}

/* Every instruction of the chunk program for a step of n tokens from cmd_pos with n_out output rows. */
static enum mk_status mk_cuda_chunk_enqueue(struct mk_cuda_backend *b, int32_t cmd_pos, uint32_t n, uint32_t n_out,
                                            struct mk_error *err) {
    const struct mk_program *p = b->cprog;
    enum mk_status st = MK_OK;
    b->c_pend_on = b->c_sums_on = b->c_norm_on = false;
    for (uint32_t i = 0; i < p->n_instr && st == MK_OK; i++) {
        const struct mk_instr *in = &p->instrs[i];
        struct mk_chunk_launch l = { .ii = i, .w0 = MK_NO_WEIGHT, .w1 = MK_NO_WEIGHT, .w2 = MK_NO_WEIGHT, .m = n };
        switch (in->op) {
        case MK_OP_NOP:
        case MK_OP_BARRIER: break;
        case MK_OP_EMBED: st = mk_cuda_chunk_launch(b, MK_CK_EMBED, n, 1, 0, l, err); break;
        case MK_OP_NORM_QKV_ROPE: {
            const struct mk_args_qkv *a = &in->args.qkv;
            const uint32_t total = a->q_dim + 2u * a->kv_dim;
            st = mk_cuda_chunk_norm(b, i, in->weight[0], a->eps, n, in->buf[0], true, err);
            if (st == MK_OK)
                st = mk_cuda_chunk_mm(b, MK_CK_MM_STORE, i, in->weight + 1, n, b->c_xn, b->c_qkv, total, err);
            l.x_off = b->c_qkv;
            l.ldx = total;
            if (st == MK_OK) {
                /* The product's partials are added by smaller blocks (mk_chunk_qkv_fold_rows). */
                const bool fold = mk_cuda_chunk_fold(b, &l, MK_CHUNK_MM_STORE);
                const uint32_t rows =
                    fold ? mk_chunk_qkv_fold_rows(a->rows_per_task) : mk_chunk_qkv_rows(a->rows_per_task);
                const uint32_t gx = mk_cuda_div_up(total, rows);
                st = mk_cuda_chunk_launch(b, MK_CK_QKV, gx, n, rows * 4u, l, err);
            }
            break;
        }
        case MK_OP_ATTN_CHUNK: {
            const struct mk_args_attn *a = &in->args.attn;
            const uint32_t tiles = mk_cuda_div_up(n, mk_chunk_attn_tokens(a->n_head / a->n_head_kv));
            const bool mma = mk_chunk_attn_mma_fits(a->head_dim);
            /* K and V in f16 as cached: q and the probabilities as f16 hi + lo. */
            const bool h16 = mma && b->kv_type == MK_KV_F16 && !b->gpu.no_attn_h16;
            const enum mk_cuda_chunk_kernel k =
                !mma ? MK_CK_ATTN
                     : (enum mk_cuda_chunk_kernel)((h16 ? MK_CK_ATTN_H16_32 : MK_CK_ATTN_MMA32) +
                                                   (a->head_dim == 32u   ? 0
                                                    : a->head_dim == 64u ? 1
                                                                         : 2));
            const uint32_t blocks = a->n_head_kv * tiles,
                           smem = mma ? mk_chunk_attn_mma_smem(a->head_dim) : mk_chunk_attn_smem(a->head_dim);
            const uint32_t keys = mma ? MK_CHUNK_ATTN_MMA_KEYS : MK_CHUNK_ATTN_KEYS;
            /* Few blocks for a long history (few tokens deep in the context): the positions are
             * split too, each split at least two key tiles, and merged in split order. The
             * tensor-core blocks take more shared memory: one per multiprocessor fills it. */
            const uint32_t want = (mma ? 1u : 2u) * (uint32_t)b->info.sm_count;
            uint32_t splits = blocks < want ? mk_cuda_div_up(want, blocks) : 1u;
            const uint32_t most = mk_cuda_div_up((uint32_t)cmd_pos + n, 2u * keys);
            if (splits > most) splits = most;
            while (splits > 1u &&
                   (uint64_t)splits * blocks * MK_CHUNK_ATTN_ROWS * (a->head_dim + 2u) > mk_cuda_attn_part_floats(b))
                splits--;
            if (splits <= 1u) {
                st = mk_cuda_chunk_launch(b, k, a->n_head_kv, tiles, smem, l, err);
                break;
            }
            l.splits = splits;
            l.y_off = b->c_apart;
            st = mk_cuda_chunk_launch3(b, k, a->n_head_kv, tiles, splits, smem, l, err);
            l.x_off = b->c_apart;
            if (st == MK_OK) st = mk_cuda_chunk_launch(b, MK_CK_ATTN_MERGE, a->n_head_kv, tiles, 0, l, err);
            break;
        }
        case MK_OP_MATVEC_RESIDUAL:
            st = mk_cuda_chunk_mm(b, MK_CK_MM_ADD, i, (const uint32_t[3]){ in->weight[0], MK_NO_WEIGHT, MK_NO_WEIGHT },
                                  n, in->buf[0], in->buf[1], p->weights[in->weight[0]].rows, err);
            break;
        case MK_OP_NORM_GATE_UP_SILU:
            st = mk_cuda_chunk_norm(b, i, in->weight[0], in->args.gate_up.eps, n, in->buf[0], true, err);
            if (st == MK_OK)
                st = mk_cuda_chunk_mm(b, MK_CK_MM_SILU, i,
                                      (const uint32_t[3]){ in->weight[1], in->weight[2], MK_NO_WEIGHT }, n, b->c_xn,
                                      in->buf[1], p->weights[in->weight[1]].rows, err);
            break;
        case MK_OP_NORM_LM_HEAD: {
            const uint32_t rows = p->weights[in->weight[1]].rows, rpt = in->args.lm_head.rows_per_task;
            st = mk_cuda_chunk_norm(b, i, in->weight[0], in->args.lm_head.eps, n_out,
                                    in->buf[0] + (n - n_out) * p->n_embd, false, err);
            if (st == MK_OK)
                st = mk_cuda_chunk_mm(b, MK_CK_MM_STORE, i,
                                      (const uint32_t[3]){ in->weight[1], MK_NO_WEIGHT, MK_NO_WEIGHT }, n_out, b->c_xn,
                                      in->buf[1], rows, err);
            if (st == MK_OK) st = mk_cuda_chunk_launch(b, MK_CK_LM_TILES, mk_cuda_div_up(rows, rpt), n_out, 0, l, err);
            break;
        }
        case MK_OP_SAMPLE:
            st = mk_cuda_chunk_launch(b, MK_CK_SAMPLE, n_out, 1, MK_SAMPLE_SMEM_WORDS * 4u, l, err);
            break;
        default:
            st = mk_error_set(err, MK_ERR_INTERNAL,
                              "chunk step: instruction %u '%s' has opcode %s, which no chunk "
                              "kernel runs",
                              i, p->labels[i], mk_opcode_name(in->op));
        }
    }
    return st == MK_OK ? mk_cuda_chunk_flush(b, err) : st;
}

/* With tracing: the last chunk step's time per kernel (each launch timed from its start event to
 * the next launch's, the last one to the step's end event). */
static void mk_cuda_chunk_report(struct mk_cuda_backend *b, uint32_t n, float step_ms) {
    double per[MK_CK_COUNT] = { 0 };
    uint32_t count[MK_CK_COUNT] = { 0 };
    for (uint32_t i = 0; i < b->n_cev; i++) {
        float ms = 0.0f;
        struct mk_error e;
        if (MK_CU(b->cu, &e, cuEventElapsedTime(&ms, b->cev[i], i + 1u < b->n_cev ? b->cev[i + 1u] : b->ev1))) return;
        per[b->cev_kernel[i]] += ms;
        count[b->cev_kernel[i]]++;
    }
    fprintf(stderr, "mk: chunk step of %u tokens: %.3f ms:", n, step_ms);
    for (int k = 0; k < MK_CK_COUNT; k++)
        if (count[k]) fprintf(stderr, " %s %.3f ms (%u)", mk_cuda_chunk_names[k] + 9, per[k], count[k]);
    fputc('\n', stderr);
}

static enum mk_status mk_cuda_step_chunk(struct mk_backend *base, const struct mk_step_cmd *cmd, const int32_t *tokens,
                                         int32_t *out_tokens, struct mk_error *err) {
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    const struct mk_cuda *cu = b->cu;
    const struct mk_program *p = b->cprog;
    const uint32_t n = cmd->n_tokens ? cmd->n_tokens : 1u, n_out = cmd->n_out ? cmd->n_out : 1u;
    if (!p || n > p->ubatch || n_out > n)
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "a step of %u tokens with %u output rows does not fit the GPU's chunk steps of %u tokens",
                            n, n_out, p ? p->ubatch : 1u);
    struct mk_step_cmd c = *cmd;
    c.token = tokens[0];
    enum mk_status st = mk_cuda_check_cmd(b, &c, err);
    if (st != MK_OK) return st;
    if ((uint64_t)cmd->pos + n > p->n_ctx)
        return mk_error_set(err, MK_ERR_CONTEXT_FULL,
                            "positions %d to %u are outside the context of %u tokens allocated on the GPU", cmd->pos,
                            (unsigned)(cmd->pos + n - 1u), p->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= p->vocab)
            return mk_error_set(err, MK_ERR_INVALID_ARG,
                                "token %d (row %u of the step) is outside the vocabulary of %u", tokens[i], i,
                                p->vocab);
    if (MK_CU(cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    if ((st = mk_cuda_park(b, err)) != MK_OK) return mk_cuda_poison(b, st, err);
    c.cmd = MK_CMD_STEP;
    c.n_tokens = (uint16_t)n;
    c.n_out = (uint16_t)n_out;
    *b->h_ccmd = c;
    memcpy(b->h_ctok, tokens, n * sizeof *tokens);
    if (MK_CU(cu, err, cuEventRecord(b->ev0, b->stream)) ||
        MK_CU(
            cu, err,
            cuMemcpyHtoDAsync_v2(b->d_cstate + offsetof(struct mk_step_state, cmd), b->h_ccmd, sizeof c, b->stream)) ||
        MK_CU(cu, err,
              cuMemcpyHtoDAsync_v2(b->d_carena + (mk_cu_devptr)p->tokens_off * 4u, b->h_ctok, n * 4u, b->stream)))
        return mk_cuda_poison(b, MK_ERR_CUDA, err);
    b->n_cev = 0;
    if ((st = mk_cuda_chunk_enqueue(b, cmd->pos, n, n_out, err)) != MK_OK) return mk_cuda_poison(b, st, err);
    if (MK_CU(cu, err,
              cuMemcpyDtoHAsync_v2(b->h_ctok, b->d_carena + (mk_cu_devptr)p->out_tokens_off * 4u, n_out * 4u,
                                   b->stream)) ||
        MK_CU(cu, err, cuEventRecord(b->ev1, b->stream)))
        return mk_cuda_poison(b, MK_ERR_CUDA, err);
    if (MK_CU(cu, err, cuStreamSynchronize(b->stream))) {
        mk_error_prefix(err, "chunk step of %u tokens at pos %d", n, cmd->pos);
        return mk_cuda_poison(b, MK_ERR_CUDA, err);
    }
    float ms = 0.0f;
    if (!MK_CU(cu, err, cuEventElapsedTime(&ms, b->ev0, b->ev1))) b->base.last_step_ns = (uint64_t)((double)ms * 1e6);
    memcpy(out_tokens, b->h_ctok, n_out * sizeof *out_tokens);
    if (b->n_cev && b->verbose) mk_cuda_chunk_report(b, n, ms);
    b->last_chunk = true;
    b->last_n_out = n_out;
    return MK_OK;
}

/* Logits row j of the last step: the chunk arena's output row j after a chunk step. */
static enum mk_status mk_cuda_logits_row(struct mk_backend *base, uint32_t j, float *out, struct mk_error *err) {
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    const struct mk_cuda *cu = b->cu;
    if (b->poisoned) {
        if (err) *err = b->poison_err;
        mk_error_prefix(err, "refused, an earlier failure poisoned this %s session", b->base.vt->name);
        return b->poison_err.status;
    }
    if (j >= (b->last_chunk ? b->last_n_out : 1u))
        return mk_error_set(err, MK_ERR_INVALID_ARG, "logits: the last step has no output row %u", j);
    if (MK_CU(cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    const struct mk_program *p = b->last_chunk ? b->cprog : b->prog;
    mk_cu_devptr src = (b->last_chunk ? b->d_carena : b->d_arena) +
                       ((mk_cu_devptr)p->logits_off + (mk_cu_devptr)j * p->vocab) * sizeof(float);
    if (MK_CU(cu, err, cuMemcpyDtoHAsync_v2(out, src, (size_t)p->vocab * sizeof(float), b->copy_stream)))
        return MK_ERR_CUDA;
    if (MK_CU(cu, err, cuStreamSynchronize(b->copy_stream))) return MK_ERR_CUDA;
    return MK_OK;
}

/* The last step's logits: its last output row (the only one of a one-token step). */
static enum mk_status mk_cuda_logits(struct mk_backend *base, float *out, struct mk_error *err) {
    const struct mk_cuda_backend *b = (const struct mk_cuda_backend *)base;
    return mk_cuda_logits_row(base, b->last_chunk ? b->last_n_out - 1u : 0u, out, err);
}

/* Positions restart at 0: the KV cache rows are overwritten before they are read again. */
static enum mk_status mk_cuda_reset(struct mk_backend *base, struct mk_error *err) { return MK_OK; }

static void mk_cuda_free(struct mk_backend *base) {
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    if (!b) return;
    const struct mk_cuda *cu = b->cu;
    struct mk_error e;
    bool abandon = false;
    if (b->ctx) MK_CU(cu, &e, cuCtxSetCurrent(b->ctx));
    if (b->hq) mk_hostqueue_stop(b->hq);
    if (b->launched) {
        /* STOP ends a healthy kernel; a stuck one gets the abort flag, which every spin reads. */
        bool idle = !mk_hostqueue_poisoned(b->hq) && mk_cuda_wait_idle(b, MK_CUDA_EXIT_WAIT_MS);
        if (!idle) {
            __atomic_store_n(&b->watch->abort, 1u, __ATOMIC_RELEASE);
            idle = mk_cuda_wait_idle(b, MK_CUDA_EXIT_WAIT_MS);
        }
        if (!idle) {
            /* Destroying the context would wait for the kernel forever: leave it to process exit. */
            fprintf(stderr, "mk: the megakernel did not leave after STOP and abort; its GPU context is abandoned\n");
            abandon = true;
        }
    }
    if (abandon) {
        free(b);
        return;
    }
    if (b->hq) mk_hostqueue_free(b->hq);
    if (b->gexec) MK_CU(cu, &e, cuGraphExecDestroy(b->gexec));
    if (b->graph) MK_CU(cu, &e, cuGraphDestroy(b->graph));
    if (b->watch) MK_CU(cu, &e, cuMemFreeHost(b->watch));
    if (b->h_cmd) MK_CU(cu, &e, cuMemFreeHost(b->h_cmd));
    if (b->h_token) MK_CU(cu, &e, cuMemFreeHost(b->h_token));
    if (b->h_ccmd) MK_CU(cu, &e, cuMemFreeHost(b->h_ccmd));
    if (b->h_ctok) MK_CU(cu, &e, cuMemFreeHost(b->h_ctok));
    mk_cu_devptr bufs[] = { b->d_weight_data,   b->d_wtable,      b->d_instrs, b->d_task_base, b->d_counters,
                            b->d_arena,         b->d_k,           b->d_v,      b->d_state,     b->d_work,
                            b->d_sched_offsets, b->d_sched_tasks, b->d_trace,  b->d_rope,      b->d_cinstrs,
                            b->d_cwtable,       b->d_carena,      b->d_cstate };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) MK_CU(cu, &e, cuMemFree_v2(bufs[i]));
    for (uint32_t i = 0; i < MK_CUDA_CHUNK_EVENTS; i++)
        if (b->cev[i]) MK_CU(cu, &e, cuEventDestroy_v2(b->cev[i]));
    if (b->ev0) MK_CU(cu, &e, cuEventDestroy_v2(b->ev0));
    if (b->ev1) MK_CU(cu, &e, cuEventDestroy_v2(b->ev1));
    if (b->stream) MK_CU(cu, &e, cuStreamDestroy_v2(b->stream));
    if (b->copy_stream) MK_CU(cu, &e, cuStreamDestroy_v2(b->copy_stream));
    if (b->mod) MK_CU(cu, &e, cuModuleUnload(b->mod));
    if (b->cmod) MK_CU(cu, &e, cuModuleUnload(b->cmod));
    if (b->ctx) {
        MK_CU(cu, &e, cuCtxSetCurrent(NULL));
        MK_CU(cu, &e, cuCtxDestroy_v2(b->ctx));
    }
    mk_program_free(b->prog);
    mk_program_free(b->cprog);
    free(b->wtable);
    free(b->cwtable);
    free(b);
}

/* Chunk steps run as per-op launches of megakernel/chunk.cu on every kind (the megakernel leaves
 * its loop for them); without a chunk program (ubatch 1) step_chunk refuses and sessions feed
 * one token per step. */
#define MK_CUDA_VTBL(kind, step_fn, generate_fn)                                                               \
    {                                                                                                          \
        .name = kind, .step = step_fn, .logits = mk_cuda_logits, .reset = mk_cuda_reset, .free = mk_cuda_free, \
        .step_chunk = mk_cuda_step_chunk, .logits_row = mk_cuda_logits_row, .generate = generate_fn            \
    }
static const struct mk_backend_vtbl mk_cuda_mega_vtbl =
    MK_CUDA_VTBL("megakernel", mk_cuda_mega_step, mk_cuda_mega_generate);
static const struct mk_backend_vtbl mk_cuda_perop_vtbl = MK_CUDA_VTBL("perop", mk_cuda_launch_step, NULL);
static const struct mk_backend_vtbl mk_cuda_graph_vtbl = MK_CUDA_VTBL("graph", mk_cuda_launch_step, NULL);

static bool mk_cuda_is_ours(const struct mk_backend *b) {
    return b && (b->vt == &mk_cuda_mega_vtbl || b->vt == &mk_cuda_perop_vtbl || b->vt == &mk_cuda_graph_vtbl);
}

enum mk_status mk_backend_cuda_info(const struct mk_backend *base, struct mk_cuda_backend_info *out,
                                    struct mk_error *err) {
    if (!mk_cuda_is_ours(base)) return mk_error_set(err, MK_ERR_INVALID_ARG, "not a CUDA backend");
    *out = ((const struct mk_cuda_backend *)base)->info;
    return MK_OK;
}

enum mk_status mk_backend_cuda_debug_hang(struct mk_backend *base, struct mk_error *err) {
    if (!mk_cuda_is_ours(base) || base->vt != &mk_cuda_mega_vtbl)
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "MK_CMD_HANG needs a megakernel backend");
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    struct mk_step_cmd c;
    memset(&c, 0, sizeof c);
    c.cmd = MK_CMD_HANG;
    struct mk_hostqueue_result res;
    enum mk_status st = mk_hostqueue_submit(b->hq, &c, &res, err);
    if (st == MK_OK) return mk_error_set(err, MK_ERR_INTERNAL, "the megakernel answered MK_CMD_HANG");
    if (mk_hostqueue_poisoned(b->hq)) mk_cuda_poison(b, st, err);
    return st;
}

enum mk_status mk_backend_cuda_chunk_trace(struct mk_backend *base, struct mk_cuda_chunk_launch_time *out, uint32_t cap,
                                           uint32_t *n, struct mk_error *err) {
    *n = 0;
    if (!mk_cuda_is_ours(base)) return mk_error_set(err, MK_ERR_INVALID_ARG, "not a CUDA backend");
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    if (b->gpu.trace == MK_GPU_TRACE_OFF)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "tracing is off (create the backend with gpu.trace set: mk --trace, or MK_CUDA_TRACE=1)");
    if (!b->last_chunk || !b->n_cev)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "the last step was not a traced chunk step");
    if (MK_CU(b->cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    for (uint32_t i = 0; i < b->n_cev && i < cap; i++) {
        float s = 0.0f, e = 0.0f;
        if (MK_CU(b->cu, err, cuEventElapsedTime(&s, b->ev0, b->cev[i])) ||
            MK_CU(b->cu, err, cuEventElapsedTime(&e, b->ev0, i + 1u < b->n_cev ? b->cev[i + 1u] : b->ev1)))
            return MK_ERR_CUDA;
        out[i] = (struct mk_cuda_chunk_launch_time){ .ii = b->cev_ii[i],
                                                     .kernel = mk_cuda_chunk_names[b->cev_kernel[i]],
                                                     .start_us = (double)s * 1e3,
                                                     .end_us = (double)e * 1e3 };
        *n = i + 1u;
    }
    return MK_OK;
}

enum mk_status mk_backend_cuda_trace(struct mk_backend *base, uint64_t *out, uint32_t n_tasks, struct mk_error *err) {
    if (!mk_cuda_is_ours(base)) return mk_error_set(err, MK_ERR_INVALID_ARG, "not a CUDA backend");
    struct mk_cuda_backend *b = (struct mk_cuda_backend *)base;
    if (!b->d_trace)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "tracing is off (create the backend with gpu.trace set: mk --trace, or MK_CUDA_TRACE=1)");
    if (n_tasks != b->prog->n_tasks)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "trace has %u tasks, not %u", b->prog->n_tasks, n_tasks);
    if (MK_CU(b->cu, err, cuCtxSetCurrent(b->ctx))) return MK_ERR_CUDA;
    if (MK_CU(b->cu, err, cuMemcpyDtoHAsync_v2(out, b->d_trace, (size_t)n_tasks * 16u, b->copy_stream)))
        return MK_ERR_CUDA;
    if (MK_CU(b->cu, err, cuStreamSynchronize(b->copy_stream))) return MK_ERR_CUDA;
    return MK_OK;
}

/* ---- Creation. ---- */

static enum mk_status mk_cuda_open_device(struct mk_cuda_backend *b, int ordinal, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    int count = 0;
    if (MK_CU(cu, err, cuDeviceGetCount(&count))) return MK_ERR_CUDA;
    if (ordinal < 0 || ordinal >= count)
        return mk_error_set(err, MK_ERR_NO_DEVICE, "CUDA device %d does not exist (%d found)", ordinal, count);
    if (MK_CU(cu, err, cuDeviceGet(&b->dev, ordinal))) return MK_ERR_CUDA;
    if (MK_CU(cu, err, cuDeviceGetName(b->info.device, (int)sizeof b->info.device, b->dev))) return MK_ERR_CUDA;
    if (MK_CU(cu, err, cuDeviceGetAttribute(&b->info.cc_major, MK_CU_ATTR_CC_MAJOR, b->dev))) return MK_ERR_CUDA;
    if (MK_CU(cu, err, cuDeviceGetAttribute(&b->info.cc_minor, MK_CU_ATTR_CC_MINOR, b->dev))) return MK_ERR_CUDA;
    if (MK_CU(cu, err, cuDeviceGetAttribute(&b->info.sm_count, MK_CU_ATTR_MULTIPROCESSOR_COUNT, b->dev)))
        return MK_ERR_CUDA;
    if (b->info.cc_major < 7)
        return mk_error_set(err, MK_ERR_NO_DEVICE, "%s has compute capability %d.%d; mk's kernels need 7.0 or newer",
                            b->info.device, b->info.cc_major, b->info.cc_minor);
    int map = 0;
    if (MK_CU(cu, err, cuDeviceGetAttribute(&map, MK_CU_ATTR_CAN_MAP_HOST_MEMORY, b->dev))) return MK_ERR_CUDA;
    if (!map && b->base.kind == MK_BACKEND_MEGAKERNEL)
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s cannot map host memory, which the megakernel's mailbox needs",
                            b->info.device);
    if (b->base.kind == MK_BACKEND_MEGAKERNEL) {
        int coop = 0;
        if (MK_CU(cu, err, cuDeviceGetAttribute(&coop, MK_CU_ATTR_COOPERATIVE_LAUNCH, b->dev))) return MK_ERR_CUDA;
        if (!coop)
            return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s has no cooperative launch, which the megakernel needs",
                                b->info.device);
    }
    if (MK_CU(cu, err, cuCtxCreate_v2(&b->ctx, MK_CU_CTX_SCHED_SPIN, b->dev))) return MK_ERR_CUDA;
    return MK_OK;
}

/* The backend of kind bp->kind with nothing opened yet. */
static enum mk_status mk_cuda_backend_new(const struct mk_cuda *cu, const struct mk_backend_params *bp,
                                          struct mk_cuda_backend **out, struct mk_error *err) {
    const struct mk_backend_vtbl *vt = bp->kind == MK_BACKEND_MEGAKERNEL ? &mk_cuda_mega_vtbl
                                       : bp->kind == MK_BACKEND_PEROP    ? &mk_cuda_perop_vtbl
                                       : bp->kind == MK_BACKEND_GRAPH    ? &mk_cuda_graph_vtbl
                                                                         : NULL;
    if (!vt) return mk_error_set(err, MK_ERR_INVALID_ARG, "backend kind %d is not a CUDA backend", (int)bp->kind);
    if (bp->fault.kind != MK_FAULT_NONE && bp->kind != MK_BACKEND_MEGAKERNEL)
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "fault injection (kind %d) runs in the megakernel only, not %s",
                            (int)bp->fault.kind, vt->name);
    struct mk_cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the %s backend", vt->name);
    b->cu = cu;
    b->verbose = bp->verbose;
    b->gpu = bp->gpu;
    b->watchdog_ms = bp->watchdog_ms;
    b->fault = bp->fault;
    b->kv_type = bp->kv_type;
    b->act_f32 = bp->act_f32;
    b->ubatch_asked = bp->ubatch;
    b->base.vt = vt;
    b->base.kind = bp->kind;
    b->base.n_ctx = bp->n_ctx;
    b->info.threads = MK_BLOCK_THREADS;
    *out = b;
    return MK_OK;
}

/* Blocks of the kernel b->fn one multiprocessor holds with smem bytes of dynamic shared memory,
 * capped by settings.blocks_per_sm. */
static enum mk_status mk_cuda_blocks_per_sm(struct mk_cuda_backend *b, uint32_t smem, int *per_sm,
                                            struct mk_error *err) {
    *per_sm = 0;
    if (MK_CU(b->cu, err, cuOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, b->fn, (int)MK_BLOCK_THREADS, smem)))
        return MK_ERR_CUDA;
    if (*per_sm < 1)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "no block of the kernel fits on a multiprocessor of %s (%u bytes shared)", b->info.device,
                            smem);
    if (b->gpu.blocks_per_sm && (int)b->gpu.blocks_per_sm < *per_sm) *per_sm = (int)b->gpu.blocks_per_sm;
    return MK_OK;
}

/* The shared memory of the program `p` set on the kernel function (mk_cuda_max_grid found it),
 * and the grid the occupancy API allows for it. */
static enum mk_status mk_cuda_size_grid(struct mk_cuda_backend *b, const struct mk_program *p, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    uint32_t smem = mk_cuda_program_smem(p);
    int optin = 0;
    if (MK_CU(cu, err, cuDeviceGetAttribute(&optin, MK_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN, b->dev))) return MK_ERR_CUDA;
    if (smem + 2048u > (uint32_t)optin)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "the program needs %u bytes of shared memory per block, %s allows %d", smem, b->info.device,
                            optin);
    if (MK_CU(cu, err, cuFuncSetAttribute(b->fn, MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)smem))) return MK_ERR_CUDA;
    struct mk_error ignored;
    MK_CU(cu, &ignored, cuFuncGetAttribute(&b->info.regs, MK_CU_FUNC_ATTR_NUM_REGS, b->fn));
    MK_CU(cu, &ignored, cuFuncGetAttribute(&b->info.local_bytes, MK_CU_FUNC_ATTR_LOCAL_SIZE_BYTES, b->fn));
    int per_sm = 0;
    enum mk_status st = mk_cuda_blocks_per_sm(b, smem, &per_sm, err);
    if (st != MK_OK) return st;
    b->info.blocks_per_sm = per_sm;
    b->info.grid = (uint32_t)per_sm * (uint32_t)b->info.sm_count;
    return MK_OK;
}

/* The kernel function, and the grid its registers and threads allow before shared memory counts. */
static enum mk_status mk_cuda_max_grid(struct mk_cuda_backend *b, uint32_t *grid, struct mk_error *err) {
    const char *fname = b->base.kind == MK_BACKEND_MEGAKERNEL ? "mk_megakernel" : "mk_perop";
    if (MK_CU(b->cu, err, cuModuleGetFunction(&b->fn, b->mod, fname))) return MK_ERR_CUDA;
    int per_sm = 0;
    enum mk_status st = mk_cuda_blocks_per_sm(b, 0, &per_sm, err);
    if (st == MK_OK) *grid = (uint32_t)per_sm * (uint32_t)b->info.sm_count;
    return st;
}

/* The kernels and the program they run, tiled for the grid. The program is compiled once, for
 * the grid the kernel's registers allow; only when its shared memory lowers the occupancy is it
 * compiled again for the smaller grid (whose bigger tiles may need more, so until the grid holds). */
static enum mk_status mk_cuda_build_program(struct mk_cuda_backend *b, const struct mk_model *m, struct mk_error *err) {
    uint32_t grid = 0;
    enum mk_status st = mk_cuda_load_module(b, !mk_model_has_block_weights(m), err);
    if (st == MK_OK) st = mk_cuda_max_grid(b, &grid, err);
    for (int round = 0; st == MK_OK; round++) {
        mk_program_free(b->prog);
        b->prog = NULL;
        st = mk_cuda_compile(m, b, grid, &b->prog, err);
        if (st == MK_OK) st = mk_cuda_check_program(b->prog, err);
        if (st == MK_OK) st = mk_cuda_size_grid(b, b->prog, err);
        if (st != MK_OK || b->info.grid >= grid) break;
        if (round == 4)
            st = mk_error_set(err, MK_ERR_UNSUPPORTED, "no grid of %s holds the program's shared memory (%u blocks)",
                              b->info.device, b->info.grid);
        grid = b->info.grid;
    }
    if (st != MK_OK) return st;
    /* The float-formats build reads every weight as f32, f16 or bf16. */
    for (uint32_t i = 0; b->info.float_image && i < b->prog->n_weights; i++)
        if (mk_layout_is_block_format(b->prog->weights[i].dtype))
            return mk_error_set(err, MK_ERR_INTERNAL,
                                "weight %u of the program is %s, but the float-formats kernels run it", i,
                                mk_dtype_ggml_name(b->prog->weights[i].dtype));
    b->info.grid = grid; /* the program's static schedule is for exactly this many blocks */
    b->info.blocks_per_sm = (int)(grid / (uint32_t)b->info.sm_count);
    b->info.smem_bytes = mk_cuda_program_smem(b->prog);
    b->info.n_instr = b->prog->n_instr;
    b->info.n_tasks = b->prog->n_tasks;
    return MK_OK;
}

static enum mk_status mk_cuda_create_streams(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    if (MK_CU(cu, err, cuStreamCreate(&b->stream, MK_CU_STREAM_NON_BLOCKING)) ||
        MK_CU(cu, err, cuStreamCreate(&b->copy_stream, MK_CU_STREAM_NON_BLOCKING)) ||
        MK_CU(cu, err, cuEventCreate(&b->ev0, MK_CU_EVENT_DEFAULT)) ||
        MK_CU(cu, err, cuEventCreate(&b->ev1, MK_CU_EVENT_DEFAULT)))
        return MK_ERR_CUDA;
    return MK_OK;
}

/* Per-op launches replayed as one CUDA graph. */
static enum mk_status mk_cuda_capture_graph(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    if (MK_CU(cu, err, cuStreamBeginCapture_v2(b->stream, MK_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))) return MK_ERR_CUDA;
    enum mk_status st = mk_cuda_enqueue_ops(b, err);
    mk_cu_graph g = NULL;
    struct mk_error end_err;
    int r = MK_CU(cu, &end_err, cuStreamEndCapture(b->stream, &g));
    b->graph = g;
    if (st != MK_OK) return st;
    if (r) {
        *err = end_err;
        return MK_ERR_CUDA;
    }
    if (MK_CU(cu, err, cuGraphInstantiateWithFlags(&b->gexec, b->graph, 0))) return MK_ERR_CUDA;
    return MK_OK;
}

/* Per-op and graph: the command and the token in pinned memory, and the graph. */
static enum mk_status mk_cuda_prepare_launches(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    void *h = NULL;
    if (MK_CU(cu, err, cuMemHostAlloc(&h, sizeof(struct mk_step_cmd), MK_CU_MEMHOSTALLOC_PORTABLE))) return MK_ERR_CUDA;
    b->h_cmd = h;
    memset(h, 0, sizeof(struct mk_step_cmd));
    if (MK_CU(cu, err, cuMemHostAlloc(&h, 64, MK_CU_MEMHOSTALLOC_PORTABLE))) return MK_ERR_CUDA;
    b->h_token = h;
    return b->base.kind == MK_BACKEND_GRAPH ? mk_cuda_capture_graph(b, err) : MK_OK;
}

static void mk_cuda_report(const struct mk_cuda_backend *b) {
    fprintf(stderr,
            "mk: %s on %s (cc %d.%d, %d SMs): %u blocks (%d/SM) x %u threads, %u B shared, %d regs, %d B local, %s; "
            "%u instructions, %u tasks, %s schedule, %.1f MB weights; op kernels %s\n",
            b->base.vt->name, b->info.device, b->info.cc_major, b->info.cc_minor, b->info.sm_count, b->info.grid,
            b->info.blocks_per_sm, MK_BLOCK_THREADS, b->info.smem_bytes, b->info.regs, b->info.local_bytes,
            b->info.image, b->prog->n_instr, b->prog->n_tasks,
            b->prog->schedule == MK_SCHED_STATIC ? "static" : "dynamic", b->info.weight_bytes / 1e6,
            b->pdl ? "overlap the one ahead (programmatic dependent launch)" : "start when the one ahead has ended");
}

/* The chunk program (ubatch tokens per step) and its kernels, when chunk steps are asked for. */
static enum mk_status mk_cuda_build_chunk(struct mk_cuda_backend *b, const struct mk_model *m, uint32_t ubatch,
                                          struct mk_error *err) {
    const struct mk_cuda *cu = b->cu;
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = b->info.grid;
    cp.n_ctx = b->base.n_ctx;
    cp.ubatch = ubatch;
    cp.kv_type = b->kv_type;
    if (b->act_f32) cp.act_bf16_min = 0;
    enum mk_status st = mk_program_compile(m, &cp, &b->cprog, err);
    if (st == MK_OK) st = mk_cuda_check_program(b->cprog, err);
    if (st != MK_OK) {
        mk_error_prefix(err, "the chunk program (--ubatch %u; --ubatch 1 turns chunk steps off)", ubatch);
        return st;
    }
    for (uint32_t i = 0; i < b->cprog->n_instr; i++)
        if (b->cprog->instrs[i].op == MK_OP_NORM_QKV_ROPE)
            b->c_qkv_cols = b->cprog->instrs[i].args.qkv.q_dim + 2u * b->cprog->instrs[i].args.qkv.kv_dim;
    b->c_dq_min = b->gpu.chunk_dequant_min ? b->gpu.chunk_dequant_min : MK_CUDA_DEFAULT_DQ_MIN;
    /* cc 9.0 runs the sm_90a code, which alone has the _KW products and the 192-row _WIDE_XB ones. */
    const bool kw = b->info.cc_major == 9 && b->info.cc_minor == 0;
    b->c_xh_floats = 0;
    if (kw && !b->gpu.no_chunk_kq && ubatch > MK_CUDA_KQ_MAX)
        b->c_xh_floats = MK_CHUNK_XH_FLOATS(ubatch, mk_cuda_product_cols(b->cprog));
    b->c_wsplit_floats =
        ubatch >= b->c_dq_min
            ? mk_cuda_wsplit_floats(b->cprog, !b->gpu.no_chunk_kq && (ubatch <= MK_CUDA_KQ_MAX_ALONE || b->c_xh_floats))
            : 0u;
    char log[4096];
    log[0] = '\0';
    int opts[2] = { MK_CU_JIT_ERROR_LOG_BUFFER, MK_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
    void *vals[2] = { log, (void *)(uintptr_t)sizeof log };
    if (MK_CU(cu, err, cuModuleLoadDataEx(&b->cmod, mk_chunk_fatbin, 2, opts, vals))) {
        if (log[0]) mk_error_prefix(err, "PTX JIT log: %.300s", log);
        mk_error_prefix(err, "loading the chunk kernels (%s) on %s", mk_chunk_archs, b->info.device);
        return MK_ERR_CUDA;
    }
    for (int k = 0; k < MK_CK_COUNT; k++) {
        b->ck[k] = NULL;
        if (!kw && mk_cuda_ck_sm90a(k)) continue;
        if (MK_CU(cu, err, cuModuleGetFunction(&b->ck[k], b->cmod, mk_cuda_chunk_names[k]))) return MK_ERR_CUDA;
    }
    /* The attention stages its query rows, K and V in shared memory sized by the head. */
    uint32_t attn_smem = 0;
    for (uint32_t i = 0; i < b->cprog->n_instr; i++) {
        const struct mk_instr *in = &b->cprog->instrs[i];
        if (in->op != MK_OP_ATTN_CHUNK) continue;
        if (in->args.attn.n_head / in->args.attn.n_head_kv > MK_CHUNK_ATTN_ROWS)
            return mk_error_set(err, MK_ERR_UNSUPPORTED,
                                "the chunk program: %u query heads per KV head is over the GPU chunk attention's %u "
                                "(--ubatch 1 turns chunk steps off)",
                                in->args.attn.n_head / in->args.attn.n_head_kv, MK_CHUNK_ATTN_ROWS);
        if (in->args.attn.head_dim > b->c_head_dim) b->c_head_dim = in->args.attn.head_dim;
        const uint32_t hd = in->args.attn.head_dim;
        const uint32_t need = mk_chunk_attn_mma_fits(hd) ? mk_chunk_attn_mma_smem(hd) : mk_chunk_attn_smem(hd);
        if (need > attn_smem) attn_smem = need;
    }
    int optin = 0;
    if (MK_CU(cu, err, cuDeviceGetAttribute(&optin, MK_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN, b->dev))) return MK_ERR_CUDA;
    if (attn_smem > (uint32_t)optin)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "the chunk attention needs %u bytes of shared memory per block, %s allows %d (--ubatch 1 "
                            "turns chunk steps off)",
                            attn_smem, b->info.device, optin);
    static const enum mk_cuda_chunk_kernel attn_kernels[] = { MK_CK_ATTN,        MK_CK_ATTN_MMA32,  MK_CK_ATTN_MMA64,
                                                              MK_CK_ATTN_MMA128, MK_CK_ATTN_H16_32, MK_CK_ATTN_H16_64,
                                                              MK_CK_ATTN_H16_128 };
    for (size_t k = 0; k < sizeof attn_kernels / sizeof attn_kernels[0]; k++)
        if (attn_smem > 48u * 1024u &&
            MK_CU(cu, err,
                  cuFuncSetAttribute(b->ck[attn_kernels[k]], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)attn_smem)))
            return MK_ERR_CUDA;
    for (int k = MK_CK_MM_STORE_WIDE; k <= MK_CK_MM_SILU_WIDE; k++)
        if (MK_CU(cu, err,
                  cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)MK_CHUNK_MM_WIDE_SMEM)))
            return MK_ERR_CUDA;
    /* cc 9.0 runs the sm_90a code: its _wide_xb products take 128 token rows a block, by 256, 192 or
     * 128 weight rows (elsewhere only the 256-row kernels are loaded). */
    b->c_xb_tokens = kw ? MK_CHUNK_MM_XB_TOKENS : MK_CHUNK_MM_TOKENS;
    b->c_xb_smem = kw ? MK_CHUNK_MM_XB_SMEM : MK_CHUNK_MM_WIDE_SMEM;
    for (int k = 0; k < MK_CK_COUNT; k++)
        if (mk_cuda_ck_xb(k) && b->ck[k] &&
            MK_CU(cu, err, cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)b->c_xb_smem)))
            return MK_ERR_CUDA;
    /* And their copy engine's form, where the driver makes tensor maps. */
    b->c_xt = kw && cu->cuTensorMapEncodeTiled && b->gpu.xb_load != MK_XB_LOAD_COPY;
    for (int k = 0; k < MK_CK_COUNT && b->c_xt; k++)
        if (mk_cuda_ck_xt(k) &&
            MK_CU(cu, err, cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)MK_CHUNK_MM_XT_SMEM)))
            return MK_ERR_CUDA;
    /* cc 9.0 runs the sm_90a code, whose split-row products are the wgmma ring. */
    b->c_split_smem =
        b->info.cc_major == 9 && b->info.cc_minor == 0 ? MK_CHUNK_MM_SPLIT_WG_SMEM : MK_CHUNK_MM_SPLIT_SMEM;
    for (int k = MK_CK_MM_STORE_SPLIT; k <= MK_CK_MM_SILU_SPLIT; k++)
        if (MK_CU(cu, err, cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)b->c_split_smem)))
            return MK_ERR_CUDA;
    /* The widest split whose x fits (whole column steps): MK_CHUNK_MV_K on a Hopper's 227 KB. */
    uint32_t mv_k = MK_CHUNK_MV_K;
    while (mv_k && MK_CHUNK_MV_SMEM(MK_CHUNK_MV_TOKENS, mv_k) > (uint32_t)optin) mv_k -= MK_CHUNK_MV_KSTEP;
    b->c_mv_k = mv_k;
    /* Two blocks share a multiprocessor's shared memory (the optin limit and a block's 1 KB reserve). */
    b->c_mv_pair = ((uint32_t)optin + 1024u) / 2u - 1024u;
    for (int k = MK_CK_MM_STORE_KQ; k <= MK_CK_MM_SILU_KQ32; k++)
        if (MK_CU(cu, err,
                  cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED,
                                     (int)(k >= MK_CK_MM_STORE_KQ32 ? MK_CHUNK_MMQ32_SMEM : MK_CHUNK_MMQ_SMEM))))
            return MK_ERR_CUDA;
    /* Only cc 9.0 runs them (elsewhere they trap), and other devices may allow less shared memory. */
    for (int k = MK_CK_MM_STORE_KW; k <= MK_CK_MM_SILU_KW && kw; k++)
        if (MK_CU(cu, err, cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)MK_CHUNK_MMW_SMEM)))
            return MK_ERR_CUDA;
    const uint32_t mv = MK_CHUNK_MV_SMEM(MK_CHUNK_MV_TOKENS, mv_k);
    for (int k = MK_CK_MV; k <= MK_CK_MV_KQ; k++)
        if (mv_k && mv > 48u * 1024u &&
            MK_CU(cu, err, cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)mv)))
            return MK_ERR_CUDA;
    /* mk_chunk_mv_kq8_*: x of their most token rows (no more than the above: chunk_test). */
    for (int k = MK_CK_MV_KQ8_2; k <= MK_CK_MV_KQ8_8; k++) {
        const uint32_t mv8 = MK_CHUNK_MV8_SMEM(2u << (k - MK_CK_MV_KQ8_2), mv_k);
        if (mv_k && mv8 > 48u * 1024u &&
            MK_CU(cu, err, cuFuncSetAttribute(b->ck[k], MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)mv8)))
            return MK_ERR_CUDA;
    }
    return MK_OK;
}

/* The chunk program's memory, after the one-token program's: its weight table points at the same
 * device weights, its kernels at the same KV cache and RoPE table. */
static enum mk_status mk_cuda_setup_chunk(struct mk_cuda_backend *b, struct mk_error *err) {
    const struct mk_program *c = b->cprog, *p = b->prog;
    const struct mk_cuda *cu = b->cu;
    struct mk_weight_ref *table = calloc(c->n_weights ? c->n_weights : 1, sizeof *table);
    if (!table) return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the chunk program's weight table");
    enum mk_status st = MK_OK;
    for (uint32_t i = 0; i < c->n_weights && st == MK_OK; i++) {
        uint32_t j = 0;
        while (j < p->n_weights &&
               (p->weights[j].ptr != c->weights[i].ptr || p->weights[j].dtype != c->weights[i].dtype))
            j++;
        if (j == p->n_weights)
            st = mk_error_set(err, MK_ERR_INTERNAL, "chunk program: weight %u is not in the one-token program", i);
        else
            table[i] = b->wtable[j];
    }
    if (st == MK_OK)
        st = mk_cuda_upload(b, &b->d_cwtable, table, (size_t)c->n_weights * sizeof *table, "the chunk weight table",
                            err);
    free(b->cwtable);
    b->cwtable = table;
    if (st != MK_OK) return st;
    /* Arena offsets are 32-bit float indices: a space past them is left out. */
    if (mk_cuda_chunk_arena_floats(b) >= (1ull << 32)) b->c_wsplit_floats = 0;
    if (mk_cuda_chunk_arena_floats(b) >= (1ull << 32)) b->c_xh_floats = 0;
    const uint64_t floats = mk_cuda_chunk_arena_floats(b);
    if ((st = mk_cuda_upload(b, &b->d_cinstrs, c->instrs, (size_t)c->n_instr * sizeof *c->instrs,
                             "the chunk instructions", err)) ||
        (st = mk_cuda_alloc(b, &b->d_carena, floats * 4u, true, "the chunk arena", err)) ||
        (st = mk_cuda_alloc(b, &b->d_cstate, sizeof(struct mk_step_state), true, "the chunk step state", err)))
        return st;
    b->c_xn = (c->arena_floats + 15u) & ~15u;
    b->c_qkv = (uint32_t)((b->c_xn + (uint64_t)c->ubatch * c->n_embd + 15u) & ~15ull);
    b->c_part = (uint32_t)((b->c_qkv + (uint64_t)c->ubatch * b->c_qkv_cols + 15u) & ~15ull);
    b->c_apart = (uint32_t)((b->c_part + mk_cuda_part_floats(b) + 15u) & ~15ull);
    b->c_wsplit = (uint32_t)((b->c_apart + mk_cuda_attn_part_floats(b) + 15u) & ~15ull);
    b->c_xh = (uint32_t)((b->c_wsplit + b->c_wsplit_floats + 15u) & ~15ull);
    b->c_fold = (uint32_t)((b->c_xh + b->c_xh_floats + 15u) & ~15ull);
    b->c_fin = (uint32_t)((b->c_fold + MK_CHUNK_FOLD_FLOATS(c->ubatch, c->n_embd) + 15u) & ~15ull);
    void *h = NULL;
    if (MK_CU(cu, err, cuMemHostAlloc(&h, sizeof(struct mk_step_cmd), MK_CU_MEMHOSTALLOC_PORTABLE))) return MK_ERR_CUDA;
    b->h_ccmd = h;
    if (MK_CU(cu, err, cuMemHostAlloc(&h, (size_t)c->ubatch * sizeof(int32_t), MK_CU_MEMHOSTALLOC_PORTABLE)))
        return MK_ERR_CUDA;
    b->h_ctok = h;
    b->cargs = b->args;
    b->cargs.instrs = b->d_cinstrs;
    b->cargs.task_base = 0;
    b->cargs.weights = b->d_cwtable;
    b->cargs.counters = 0;
    b->cargs.arena = b->d_carena;
    b->cargs.step_state = b->d_cstate;
    b->cargs.mailbox = 0;
    b->cargs.work = 0;
    b->cargs.sched_offsets = 0;
    b->cargs.sched_tasks = 0;
    b->cargs.trace = 0;
    b->cargs.watch = 0;
    b->cargs.n_instr = c->n_instr;
    b->cargs.n_tasks = c->n_tasks;
    b->cargs.n_counters = 0;
    b->cargs.fault_kind = 0;
    b->base.ubatch = c->ubatch;
    return MK_OK;
}

/* Every step after the device is open; the caller frees b on failure. */
static enum mk_status mk_cuda_setup(struct mk_cuda_backend *b, const struct mk_model *m, int device,
                                    struct mk_error *err) {
    enum mk_status st;
    if ((st = mk_cuda_open_device(b, device, err)) != MK_OK) return st;
    /* Only where the embedded sm_90 SASS runs: the compute_80 PTX that newer GPUs compile, and a
     * --kernel-image, may lack the wait. */
    b->pdl = !b->gpu.no_pdl && !b->gpu.kernel_image && b->info.cc_major == 9 && b->cu->cuLaunchKernelEx;
    if ((st = mk_cuda_build_program(b, m, err)) != MK_OK) return st;
    uint32_t ubatch = b->ubatch_asked ? b->ubatch_asked : MK_CUDA_DEFAULT_UBATCH;
    if (ubatch > b->base.n_ctx) ubatch = b->base.n_ctx;
    if (ubatch > 1 && (st = mk_cuda_build_chunk(b, m, ubatch, err)) != MK_OK) {
        /* Chunk steps the caller asked for are an error to report; the default ones the device
         * cannot run (a head too wide for its shared memory) leave one token per step. */
        if (st != MK_ERR_UNSUPPORTED || b->ubatch_asked > 1) return st;
        mk_cuda_drop_chunk(b, err ? err->msg : "");
        if (err) mk_error_clear(err);
    }
    if ((st = mk_cuda_create_streams(b, err)) != MK_OK) return st;
    if ((st = mk_cuda_setup_memory(b, err)) != MK_OK) return st;
    if (!b->gpu.no_rope_table && (st = mk_cuda_setup_rope(b, err)) != MK_OK) return st;
    if (b->cprog && (st = mk_cuda_setup_chunk(b, err)) != MK_OK) return st;
    if (b->base.kind == MK_BACKEND_MEGAKERNEL) return mk_cuda_start_megakernel(b, err);
    return mk_cuda_prepare_launches(b, err);
}

enum mk_status mk_backend_create_cuda(const struct mk_model *m, const struct mk_backend_params *bp,
                                      struct mk_backend **out, struct mk_error *err) {
    *out = NULL;
    const struct mk_cuda *cu = NULL;
    struct mk_cuda_backend *b = NULL;
    enum mk_status st = mk_cuda_load(&cu, err);
    if (st == MK_OK) st = mk_cuda_backend_new(cu, bp, &b, err);
    if (st != MK_OK) return st;
    if ((st = mk_cuda_setup(b, m, bp->device, err)) != MK_OK) {
        mk_cuda_free(&b->base);
        return st;
    }
    if (b->verbose) mk_cuda_report(b);
    *out = &b->base;
    return MK_OK;
}
