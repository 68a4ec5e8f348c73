/* The host/device ABI of an mk program: opcodes, the instruction, counters, step state, mailbox. */
#ifndef MK_ABI_H
#define MK_ABI_H

/* Shared by C11 host code and CUDA C device code: fixed-width types only, no pointers in the
 * program itself (pointers live in struct mk_kernel_args, filled per executor). */
#include <stdint.h>

#ifdef __cplusplus
#define MK_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MK_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define MK_ABI_VERSION   1u
#define MK_PROGRAM_MAGIC 0x474f524bu /* "KROG" */

#define MK_NO_COUNTER 0xffffffffu
#define MK_NO_WEIGHT  0xffffffffu
#define MK_NO_BUF     0xffffffffu
/* Counter 0 counts every finished task of every instruction: BARRIER waits on it. */
#define MK_COUNTER_ALL 0u

/* Opcodes: explicit values, only ever appended, 0 = NOP. Shapes below use the instruction's
 * fields; "rows" of a matvec are output elements, tiled p[0] rows per task. Every weight is a
 * row-major (rows, cols) matrix in the weight table; norms are (1, n) rows. All activations are
 * fp32 in the arena; accumulation is fp32. */
enum mk_opcode {
    MK_OP_NOP = 0,
    /* x[buf0 + e] = dequant(weight0[token])[e] for e in this task's chunk.
     * p0 = elements per task, p1 = n_embd. token comes from the step state. */
    MK_OP_EMBED = 1,
    /* out[buf1 + r] += dot(weight0[r], in[buf0 .. buf0+cols)) for this task's rows.
     * p0 = rows per task. Used for attention-output and FFN-down with the residual add fused. */
    MK_OP_MATVEC_RESIDUAL = 2,
    /* RMSNorm of x (buf0, n = weight1.cols) with weight0, then rows r of [wq; wk; wv]
     * (weight1, weight2, weight3) against it. Rows [0, q_dim) go to q (buf1); rows of k and v go
     * to the KV cache of layer p1 at the step's position. RoPE rotates adjacent pairs (2i, 2i+1)
     * of q and k heads for i < n_rot/2 by pos * base^(-2i/n_rot). p0 = rows per task (even),
     * p1 = layer, p2 = q_dim, p3 = kv_dim, p4 = head_dim, p5 = n_rot; f0 = eps, f1 = rope base. */
    MK_OP_NORM_QKV_ROPE = 3,
    /* Attention of one head over one block of the sequence: task t is head t / p1, block t % p1,
     * positions [b*p0, min((b+1)*p0, pos+1)). Writes (o[head_dim], m, l) to
     * buf1 + (h*p1 + b)*(head_dim+2): m = max score, l = sum exp(s - m), o = sum exp(s - m) v.
     * An empty block writes m = -inf, l = 0, o = 0. q = buf0. scores = q.k / sqrt(head_dim).
     * p0 = block size, p1 = blocks, p2 = layer, p3 = n_head, p4 = n_head_kv, p5 = head_dim. */
    MK_OP_ATTN_PARTIAL = 4,
    /* Combines the blocks of head t: out[buf1 + t*head_dim ..] = sum_b o_b e^(m_b-M) / sum_b l_b e^(m_b-M).
     * buf0 = partials. p1 = blocks, p3 = n_head, p5 = head_dim. One head per task. */
    MK_OP_ATTN_COMBINE = 5,
    /* RMSNorm of x (buf0) with weight0; hb[buf1 + r] = silu(gate_r . xn) * (up_r . xn) with
     * gate = weight1, up = weight2. p0 = rows per task; f0 = eps. */
    MK_OP_NORM_GATE_UP_SILU = 6,
    /* RMSNorm of x (buf0) with weight0; logits[buf1 + r] = weight1[r] . xn for this task's rows,
     * and the task's (max logit, lowest index reaching it) to buf2 + 2*t as (float, uint32 bits).
     * p0 = rows per task; f0 = eps. */
    MK_OP_NORM_LM_HEAD = 7,
    /* One task: picks the token from the p1 tile maxima at buf2 (temperature <= 0: greatest
     * logit, lowest index on ties) or samples from logits buf1 (p2 = vocab) with the step's
     * parameters (see runtime/sample_core.h); writes it to the step state's out_token. */
    MK_OP_SAMPLE = 8,
    /* One task that does nothing but wait: a join of every task before it (waits on counter 0). */
    MK_OP_BARRIER = 9,
    /* ATTN_COMBINE fused into the attention-output matvec: the task merges the partials at buf0
     * (p1 blocks of p2 positions, p3 heads of p5 dims, laid out as ATTN_PARTIAL writes them; only
     * the blocks that hold positions <= pos) into the attention vector, then
     * out[buf1 + r] += dot(weight0[r], attention) for its rows. p0 = rows per task. */
    MK_OP_ATTN_OUTPUT = 10,
};
#define MK_OP_COUNT 11u

/* wait until counter[ctr] >= step * mul + add (compared wrap-safe as int32 of the difference). */
struct mk_wait {
    uint32_t ctr;
    uint32_t mul;
    uint32_t add;
};

struct mk_instr {
    uint16_t op;    /* enum mk_opcode */
    uint16_t flags; /* reserved, 0 */
    uint32_t n_tasks;
    uint32_t signal;        /* counter each finished task adds 1 to (release), or MK_NO_COUNTER */
    struct mk_wait wait[2]; /* unused waits have ctr = MK_NO_COUNTER */
    uint32_t weight[4];     /* weight table indices */
    uint32_t buf[4];        /* arena offsets in floats */
    uint32_t p[8];          /* op parameters, see the opcode */
    float f[2];
    uint32_t reserved[5];
};
MK_STATIC_ASSERT(sizeof(struct mk_instr) == 128, "mk_instr is 128 bytes");
MK_STATIC_ASSERT(sizeof(struct mk_wait) == 12, "mk_wait is 12 bytes");

/* One weight matrix as an executor sees it: ptr is a host or device address. */
struct mk_weight_ref {
    uint64_t ptr;
    uint32_t dtype; /* enum mk_dtype (ggml id) */
    uint32_t rows;
    uint32_t cols;
    uint32_t row_bytes;
    uint64_t reserved;
};
MK_STATIC_ASSERT(sizeof(struct mk_weight_ref) == 32, "mk_weight_ref is 32 bytes");

/* Commands from the host. */
enum mk_cmd {
    MK_CMD_NONE = 0,
    MK_CMD_STEP = 1, /* run the program once for token at pos */
    MK_CMD_STOP = 2, /* leave the persistent loop */
    MK_CMD_HANG = 3, /* test only: never answer, so the watchdog can be tested */
};

/* Parameters of one step, as the host posts them and the device copies them. */
struct mk_step_cmd {
    uint32_t cmd; /* enum mk_cmd */
    int32_t token;
    int32_t pos;
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: no limit (capped at MK_SAMPLE_MAX_CAND) */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint32_t reserved0;
    uint64_t seed;
};
MK_STATIC_ASSERT(sizeof(struct mk_step_cmd) == 40, "mk_step_cmd is 40 bytes");

/* The mailbox in pinned, device-mapped host memory. The host fills cmd, then release-stores
 * cmd_seq = n (n counts commands from 1). The device acquire-loads cmd_seq, copies cmd, runs the
 * step, fills the result fields, then release-stores done_seq = n. Each side's fields sit on their
 * own 64-byte lines. */
struct mk_mailbox {
    uint32_t cmd_seq; /* host -> device */
    uint32_t pad0;
    struct mk_step_cmd cmd;
    uint8_t pad1[64 - 48];
    uint32_t done_seq; /* device -> host */
    int32_t out_token;
    uint64_t t_start_ns; /* device globaltimer when the step's command was seen */
    uint64_t t_end_ns;   /* ... and when the token was written */
    uint32_t error;      /* nonzero: the device trapped a broken invariant (an MK_DEVERR_*) */
    uint32_t error_arg;
    uint8_t pad2[64 - 32];
};
MK_STATIC_ASSERT(sizeof(struct mk_mailbox) == 128, "mk_mailbox is two lines");

enum mk_device_error {
    MK_DEVERR_NONE = 0,
    MK_DEVERR_BAD_OPCODE = 1, /* error_arg = instruction index */
    MK_DEVERR_BAD_POS = 2,    /* error_arg = position */
    MK_DEVERR_BAD_TOKEN = 3,  /* error_arg = token */
};

/* The step state in executor memory: the command being run, and the token it produced. */
struct mk_step_state {
    struct mk_step_cmd cmd;
    uint32_t step; /* 0-based index of the step being run */
    int32_t out_token;
    uint32_t go; /* step + 1 once cmd holds step's command */
    uint32_t reserved[7];
};
MK_STATIC_ASSERT(sizeof(struct mk_step_state) == 80, "mk_step_state is 80 bytes");

/* Maximum candidates the sampler keeps (top_k <= 0 or above it means this many). */
#define MK_SAMPLE_MAX_CAND 1024

/* Everything one executor run needs, as addresses in that executor's memory. */
struct mk_kernel_args {
    uint64_t instrs;        /* const struct mk_instr[n_instr] */
    uint64_t task_base;     /* const uint32_t[n_instr + 1]: first task index of each instruction */
    uint64_t weights;       /* const struct mk_weight_ref[] */
    uint64_t counters;      /* uint32_t[n_counters], zero at launch */
    uint64_t arena;         /* float[arena_floats] */
    uint64_t k_cache;       /* float (layer, n_ctx, kv_dim) */
    uint64_t v_cache;       /* float (layer, n_ctx, kv_dim) */
    uint64_t step_state;    /* struct mk_step_state */
    uint64_t mailbox;       /* struct mk_mailbox (device-mapped host memory) */
    uint64_t work;          /* uint64_t work counter for dynamic scheduling, zero at launch */
    uint64_t sched_offsets; /* uint32_t[n_workers + 1] static schedule, or 0 for dynamic */
    uint64_t sched_tasks;   /* uint32_t[n_tasks]: task indices, each worker's in program order */
    uint64_t trace;         /* uint64_t[n_tasks * 2] start/end ns of the last step, or 0 */
    uint32_t n_instr;
    uint32_t n_tasks; /* tasks per step */
    uint32_t n_counters;
    uint32_t n_workers;
    uint32_t n_ctx;
    uint32_t kv_dim;
    uint32_t n_layer;
    uint32_t vocab;
};
MK_STATIC_ASSERT(sizeof(struct mk_kernel_args) == 136, "mk_kernel_args is 136 bytes");

#endif
