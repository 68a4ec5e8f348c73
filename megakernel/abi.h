/* The host/device ABI of an mk program: opcodes, the instruction, counters, step state, mailbox. */
#ifndef MK_ABI_H
#define MK_ABI_H

/* Shared by C11 host code and CUDA C device code: fixed-width types only, no pointers in the
 * program itself (pointers live in struct mk_kernel_args, filled per executor). */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define MK_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MK_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* 2: named per-opcode arguments, launch parameters instead of module globals.
 * 3: NORM_QKV_ROPE takes biases, per-head q/k norms, NEOX rotation and rope scaling.
 * 4: chunk programs (several tokens per step): mk_step_cmd.n_tokens/n_out, MK_OP_ATTN_CHUNK,
 *    EMBED buf[1] (the step's tokens) and SAMPLE buf[3] (one token per output row). A program of
 *    one token per step is the same as in version 3.
 * 5: ATTN_PARTIAL tasks are (KV head, split) and a split's positions grow with pos (mk_attn_span),
 *    so a step's attention costs what its positions cost, not what n_ctx does.
 * 6: the KV cache holds f16 or f32 elements (mk_kernel_args.kv_type): NORM_QKV_ROPE rounds k and v
 *    to the cache's type, attention widens them back to f32.
 * 7: NORM_GATE_UP_SILU may write, and MATVEC_RESIDUAL may read, the int8-level copy of the FFN
 *    hidden vector (buf[2], MK_XQ_*), so that a block-format FFN-down quantizes its input once.
 * 8: MK_CMD_GENERATE (the token loop on the device): the mailbox grows a stop set and a token ring,
 *    done_seq counts commands rather than steps, and the step state carries the generation.
 * 9: MATVEC_RESIDUAL and ATTN_OUTPUT may write, and the norm ops may read, the normalized
 *    int8-level copy of the residual stream (buf[3], weight[1], MK_XQN_*), so that a norm op over
 *    block-format matrices does not normalize and quantize x in every task.
 * 10: NORM_QKV_ROPE may size the tasks over wv apart from those over wq and wk
 *    (mk_args_qkv.v_rows_per_task, mk_qkv_task_rows), so that a wv of a costlier format (Q4_K_M's
 *    Q6_K) does not set the op's span.
 * 11: ATTN_COMBINE may write the int8-level copy of the attention vector (buf[2], MK_XQ_*), so that
 *    a block-format attention-output matvec reads it instead of quantizing the vector in every task.
 * 12: ATTN_PARTIAL may merge the splits itself (mk_args_attn.arrive): the last task of each KV head
 *    to finish combines that head's query heads as ATTN_COMBINE would, so that no combine op (and
 *    no dependent phase) follows. A program of ABI 11 (arrive = 0) is the same in version 12.
 * 13: SAMPLE may know the LM head's tiles (mk_args_sample.rows_per_tile), so that the top-k pass
 *    reads only the tiles that can hold candidates; 0 there is version 12.
 * 14: split 0 may hold every position below a threshold larger than the unit (mk_args_attn.solo,
 *    mk_args_attn_out.solo), so that the solo step runs past the first unit; 0 there is version 13. */
#define MK_ABI_VERSION 14u

#define MK_NO_COUNTER 0xffffffffu
#define MK_NO_WEIGHT  0xffffffffu
#define MK_NO_BUF     0xffffffffu
/* Counter 0 counts every finished task of every instruction: BARRIER waits on it. */
#define MK_COUNTER_ALL 0u

/* Opcodes: explicit values, only ever appended, 0 = NOP. Each opcode's arguments are the
 * struct of the same name in union mk_op_args below (in->args.<name>); "rows" of a matvec are
 * output elements, tiled rows_per_task rows per task. Every weight is a row-major (rows, cols)
 * matrix in the weight table; norms are (1, n) rows. All activations are fp32 in the arena;
 * accumulation is fp32.
 *
 * Chunk programs (struct mk_program.ubatch = U > 1) run up to U tokens per step: token i of the
 * step (i < cmd.n_tokens) is at position cmd.pos + i. Every activation buffer then holds U rows of
 * its one-token size (row i at buf + i * size: x (U, n_embd), q and the attention (U, q_dim), the
 * FFN hidden (U, n_ff)); a matvec task computes its rows for every token of the step, so a weight
 * tile is read once per step (on the GPU: a small GEMM over the chunk). NORM_QKV_ROPE writes the
 * KV rows of all n_tokens positions. Attention is MK_OP_ATTN_CHUNK (causal inside the chunk and
 * over the cache); ATTN_PARTIAL, ATTN_COMBINE and ATTN_OUTPUT appear only in one-token programs.
 * Only the last cmd.n_out rows reach the LM head and SAMPLE (output row j is token row
 * n_tokens - n_out + j): logits (U, vocab), tile maxima (U, n_tiles, 2). A one-token program
 * (U = 1) ignores n_tokens and n_out. The CPU executor runs chunk programs; the GPU backends run
 * them as per-op launches of megakernel/chunk.cu (runtime/cuda_backend.c sequences them). */
enum mk_opcode {
    MK_OP_NOP = 0,
    /* args.embed: x[buf0 + e] = dequant(weight0[token])[e] for e in this task's chunk of
     * elems_per_task elements of n_embd. token comes from the step state. */
    MK_OP_EMBED = 1,
    /* args.matvec: out[buf1 + r] += dot(weight0[r], in[buf0 .. buf0+cols)) for this task's rows.
     * Used for attention-output and FFN-down with the residual add fused. buf2 (block-format
     * weights only, else MK_NO_BUF): the int8-level copy of the input that its producer wrote
     * (see MK_XQ_GROUP); an executor that fills those copies may read it instead of buf0. buf3
     * (or MK_NO_BUF; block-format weight0 only): where the task also writes its rows of out as the
     * copy the next norm op reads (MK_XQN_*, norm weight weight1; rows_per_task is then a multiple
     * of MK_XQ_GROUP). Executors that never read such copies may leave it unwritten. */
    MK_OP_MATVEC_RESIDUAL = 2,
    /* args.qkv: RMSNorm of x (buf0, n = weight1.cols) with weight0 and eps, then rows r of
     * [wq; wk; wv] (weight1, weight2, weight3) against it (rows_per_task is even). Rows [0, q_dim)
     * go to q (buf1); rows of k and v go to the KV cache of `layer` at the step's position. Then,
     * in this order: the biases (when args.bias names them) are added to q, k, v; with
     * MK_QKV_QK_NORM each q and k head is RMSNorm'ed over head_dim with eps and the weights
     * args.qk_norm (q), args.qk_norm + 1 (k); RoPE rotates pair i < n_rot/2 of each q and k head,
     * elements (2i, 2i+1), or (i, i + n_rot/2) with MK_QKV_NEOX, by
     * theta = pos * rope_scale * rope_base^(-2i/n_rot) / rope_freqs[i] (rope_freqs: 1 when
     * MK_NO_WEIGHT). With MK_QKV_NEOX or MK_QKV_QK_NORM, rows_per_task is a multiple of head_dim,
     * so that every task holds whole heads. buf3 (or MK_NO_BUF): the copy of x its producer wrote
     * (MK_XQN_*), which an executor may read instead of normalizing x (NORM_GATE_UP_SILU and
     * NORM_LM_HEAD likewise). */
    MK_OP_NORM_QKV_ROPE = 3,
    /* args.attn: attention over one split of the sequence: task t is KV head t / n_blocks, split
     * b = t % n_blocks, covering positions mk_attn_span(pos, block, n_blocks, solo, b) (below
     * max(block, solo) all in split 0; past that whole blocks of `block` positions dealt evenly to
     * the splits, so the splits grow with pos), for each of the
     * n_head / n_head_kv query heads h of that KV head (the K and V rows are read once for all of
     * them). Writes (o[head_dim], m, l) to buf1 + (h*n_blocks + b)*(head_dim+2): m = max score,
     * l = sum exp(s - m), o = sum exp(s - m) v. An empty split writes m = -inf, l = 0, o = 0.
     * q = buf0. scores = q.k / sqrt(head_dim). With args.attn.arrive (not 0), each task then counts
     * itself in at counter arrive + its KV head; the one that makes it n_blocks sets it back to 0
     * and, before it signals, merges the splits of that KV head's query heads into buf2 (and buf3,
     * or MK_NO_BUF) exactly as ATTN_COMBINE's buf1 (and buf2) for the same partials. Those counters
     * are no instruction's signal and are waited on by none; they are zero at launch. Where only
     * split 0 holds positions (mk_attn_live = 1), an executor may instead have the KV head's tasks
     * write buf2 (and buf3) themselves, each for some of its query heads over split 0's positions,
     * the same values, with no partials and no count: with arrive, buf1 is the executor's scratch. */
    MK_OP_ATTN_PARTIAL = 4,
    /* args.combine: merges the n_blocks blocks of head t: out[buf1 + t*head_dim ..] =
     * sum_b o_b e^(m_b-M) / sum_b l_b e^(m_b-M). buf0 = partials. One head per task. buf2 (or
     * MK_NO_BUF; head_dim a multiple of MK_XQ_GROUP): where the task also writes its head of out as
     * int8 levels (MK_XQ_*, n_head * head_dim elements). Executors that never read such copies may
     * leave it unwritten. */
    MK_OP_ATTN_COMBINE = 5,
    /* args.gate_up: RMSNorm of x (buf0) with weight0 and eps; hb[buf1 + r] =
     * silu(gate_r . xn) * (up_r . xn) with gate = weight1, up = weight2. buf2 (or MK_NO_BUF):
     * where the task also writes its rows of hb as int8 levels (MK_XQ_GROUP; rows_per_task is then
     * a multiple of it). Executors that never read such copies may leave it unwritten. */
    MK_OP_NORM_GATE_UP_SILU = 6,
    /* args.lm_head: RMSNorm of x (buf0) with weight0 and eps; logits[buf1 + r] = weight1[r] . xn
     * for this task's rows, and the task's (max logit, lowest index reaching it) to buf2 + 2*t as
     * (float, uint32 bits). */
    MK_OP_NORM_LM_HEAD = 7,
    /* args.sample: one task: picks the token from the n_tiles tile maxima at buf2 (temperature
     * <= 0: greatest logit, lowest index on ties) or samples from the vocab logits at buf1 with
     * the step's parameters (see core/sample_core.h); writes it to the step state's out_token. */
    MK_OP_SAMPLE = 8,
    /* One task that does nothing but wait: a join of every task before it (waits on counter 0). */
    MK_OP_BARRIER = 9,
    /* args.attn_out: ATTN_COMBINE fused into the attention-output matvec: the task merges the
     * partials at buf0 (n_blocks splits of whole blocks of `block` positions, n_head heads of
     * head_dim, laid out as ATTN_PARTIAL writes them; only the mk_attn_live splits that hold
     * positions <= pos) into the attention
     * vector, then out[buf1 + r] += dot(weight0[r], attention) for its rows. buf3 and weight1 as
     * MATVEC_RESIDUAL's. */
    MK_OP_ATTN_OUTPUT = 10,
    /* args.attn (chunk programs): task t is head t; for each token i < n_tokens of the step, the
     * attention of its q row (buf0 + i*n_head*head_dim) over positions [0, pos + i] of the layer's
     * cache, to buf1 + i*n_head*head_dim + t*head_dim. The positions are taken in the splits of
     * ATTN_PARTIAL at position pos + i, each summed with a running maximum from -inf and merged as
     * ATTN_COMBINE merges partials, so that a chunk row equals a one-token step bit for bit. */
    MK_OP_ATTN_CHUNK = 11,
};
#define MK_OP_COUNT 12u

/* The int8-level copy of an activation vector of n floats (n a multiple of MK_XQ_GROUP), for the
 * integer dots of block-format weights (megakernel/quant8.cuh): for each group of 32 inputs,
 * x = d * (q1 + q2 / 254 + q3 / 254^2) elementwise, with the (n / 32, 3, 32) int8 levels q1, q2,
 * q3 from the start of the buffer, then per group (float d, int32 sums of q1, q2 and q3) from
 * float MK_XQ_GROUPS_OFF(n). MK_XQ_FLOATS(n) arena floats in all. */
#define MK_XQ_GROUP         32u
#define MK_XQ_GROUPS_OFF(n) (3u * (n) / 4u)
#define MK_XQ_FLOATS(n)     (MK_XQ_GROUPS_OFF(n) + (n) / 8u)
/* The normalized copy of the residual stream x (n floats) for the norm op that reads it next:
 * the int8-level copy above of x * w (w: that op's norm weight, f32), whose group scales the
 * reader multiplies by the RMSNorm scale 1 / sqrt(mean(x^2) + eps), then at float
 * MK_XQN_SS_OFF(n) the sum of x^2 over each group of MK_XQ_GROUP, which the reader adds up. The
 * levels do not depend on the scale, so each producer task writes its groups on its own. */
#define MK_XQN_SS_OFF(n) MK_XQ_FLOATS(n)
#define MK_XQN_FLOATS(n) (MK_XQN_SS_OFF(n) + (n) / MK_XQ_GROUP)

#ifdef __CUDACC__
#define MK_ABI_FN static __host__ __device__ __forceinline__
#else
#define MK_ABI_FN static inline
#endif

/* The unit of the splits at position pos: below solo (when larger than block) one unit of solo
 * positions, so that split 0 holds them all; past it, block. A select rather than a branch to a
 * path of its own: with the branch the megakernel's attention past solo was 1-1.5 % slower
 * (BENCHMARKS.md, forty-third session). */
MK_ABI_FN uint32_t mk_attn_unit(uint32_t pos, uint32_t block, uint32_t solo) {
    return pos < solo && solo > block ? solo : block;
}
/* Split b of n_blocks at position pos covers positions [*lo, *hi) (empty when *lo >= *hi): below
 * max(block, solo) split 0 holds them all; past that the pos / block + 1 blocks that hold positions
 * are dealt to the splits evenly, whole blocks each, so a short sequence leaves the last splits
 * empty and a long one lengthens every split. */
MK_ABI_FN void mk_attn_span(uint32_t pos, uint32_t block, uint32_t n_blocks, uint32_t solo, uint32_t b, uint32_t *lo,
                            uint32_t *hi) {
    const uint64_t unit = mk_attn_unit(pos, block, solo);
    const uint64_t units = pos / unit + 1u, per = (units + n_blocks - 1u) / n_blocks;
    const uint64_t l = (uint64_t)b * per * unit, h = l + per * unit;
    *lo = l > pos ? pos + 1u : (uint32_t)l;
    *hi = h > pos ? pos + 1u : (uint32_t)h;
}
/* The splits that hold positions at pos: splits [0, live) are non-empty, the others empty. */
MK_ABI_FN uint32_t mk_attn_live(uint32_t pos, uint32_t block, uint32_t n_blocks, uint32_t solo) {
    const uint32_t units = pos / mk_attn_unit(pos, block, solo) + 1u, per = (units + n_blocks - 1u) / n_blocks;
    return (units + per - 1u) / per;
}
/* Whether split 0 alone holds positions at pos (mk_attn_live = 1): with two splits or more, only
 * while pos is below the first block or solo. No divisions, for the attention's per-task path. */
MK_ABI_FN int mk_attn_solo_at(uint32_t pos, uint32_t block, uint32_t n_blocks, uint32_t solo) {
    return n_blocks <= 1u || pos < block || pos < solo;
}
/* Query heads a KV head that the megakernel's solo step takes (its warps' merge holds that many). */
#define MK_ATTN_SOLO_MAX_G 8u
/* Whether the megakernel's solo step can run a model's attention: at most MK_ATTN_SOLO_MAX_G query
 * heads a KV head, head size 64 or 128. The lowering asks it before it sets mk_args_attn.solo past
 * the unit; the kernel's mk_attn_solo (ops/attn_partial.cuh) makes the same test. */
MK_ABI_FN int mk_attn_solo_fits(uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim) {
    return n_head <= MK_ATTN_SOLO_MAX_G * n_head_kv && (head_dim == 64u || head_dim == 128u);
}

/* wait until counter[ctr] >= step * mul + add (compared wrap-safe as int32 of the difference). */
struct mk_wait {
    uint32_t ctr;
    uint32_t mul;
    uint32_t add;
};

/* The arguments of each opcode (see enum mk_opcode). */
struct mk_args_embed {
    uint32_t elems_per_task;
    uint32_t n_embd;
};
struct mk_args_matvec {
    uint32_t rows_per_task;
};
struct mk_args_qkv {
    uint32_t rows_per_task; /* even */
    uint32_t layer;
    uint32_t q_dim;
    uint32_t kv_dim;
    uint32_t head_dim;
    uint32_t n_rot;
    float eps;
    float rope_base;
    /* Appended for qwen2/qwen3 and rope scaling (ABI 3). */
    uint32_t bias;       /* weight index of the q bias; k, v biases at bias + 1, bias + 2; or MK_NO_WEIGHT */
    uint32_t qk_norm;    /* weight index of the per-head q norm; the k norm at qk_norm + 1; or MK_NO_WEIGHT */
    uint32_t rope_freqs; /* weight index of the (n_rot / 2) f32 frequency divisors, or MK_NO_WEIGHT */
    uint32_t flags;      /* MK_QKV_* */
    float rope_scale;    /* positions are multiplied by this (linear rope scaling: 1 / factor) */
    /* Appended in ABI 10. 0: task t takes rows [t rows_per_task, ...) of [wq; wk; wv]. Else the
     * first ceil((q_dim + kv_dim) / rows_per_task) tasks take the rows of wq and wk in tiles of
     * rows_per_task (the last one shorter) and the rest the rows of wv in tiles of
     * v_rows_per_task, which is even (whole heads under the flags) and at most rows_per_task. */
    uint32_t v_rows_per_task;
};
/* mk_args_qkv.flags */
#define MK_QKV_NEOX    1u /* rotate (i, i + n_rot/2) instead of (2i, 2i+1) */
#define MK_QKV_QK_NORM 2u /* per-head RMSNorm of q and k before RoPE */
#define MK_QKV_FLAGS   3u /* every flag a reader knows */
struct mk_args_attn {
    uint32_t block;    /* the unit of a split: positions are dealt to splits in whole blocks */
    uint32_t n_blocks; /* splits per head */
    uint32_t layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;
    /* Appended in ABI 12, ATTN_PARTIAL only: the first of n_head_kv arrival counters, one per KV
     * head, with which the splits' last task merges them (see MK_OP_ATTN_PARTIAL); 0 = none (a
     * separate ATTN_COMBINE merges them: counter 0 is MK_COUNTER_ALL, never an arrival counter). */
    uint32_t arrive;
    /* Appended in ABI 14: positions below max(block, solo) all belong to split 0 (mk_attn_span). */
    uint32_t solo;
};
struct mk_args_combine {
    uint32_t n_blocks;
    uint32_t n_head;
    uint32_t head_dim;
};
struct mk_args_attn_out {
    uint32_t rows_per_task;
    uint32_t n_blocks;
    uint32_t block; /* positions per block of the partials */
    uint32_t n_head;
    uint32_t head_dim;
    uint32_t solo; /* appended in ABI 14: as mk_args_attn's */
};
struct mk_args_norm_matvec { /* NORM_GATE_UP_SILU and NORM_LM_HEAD */
    uint32_t rows_per_task;
    float eps;
};
struct mk_args_sample {
    uint32_t n_tiles; /* LM-head tiles, one (max, index) pair each */
    uint32_t vocab;
    /* Appended in ABI 13. 0, or the LM head's rows_per_task: tile t's pair is the greatest of
     * logits [t rows_per_tile, (t + 1) rows_per_tile), so that the top-k sampler need read only
     * the tiles whose maximum can reach its threshold. */
    uint32_t rows_per_tile;
};
/* Chunk programs: EMBED takes token i from the int32 array at arena buf[1] ((U) tokens, written
 * by the host before it posts the step; row 0 is also cmd.token), and SAMPLE writes the token of
 * output row j as int32 to arena buf[3] + j ((U) tokens, read by the host after the step) and the
 * last row's to out_token. With temperature > 0, row j samples with position
 * cmd.pos + n_tokens - n_out + j. In one-token programs both slots are MK_NO_BUF. */

#define MK_OP_ARGS_WORDS 15u
union mk_op_args {
    struct mk_args_embed embed;
    struct mk_args_matvec matvec;
    struct mk_args_qkv qkv;
    struct mk_args_attn attn;
    struct mk_args_combine combine;
    struct mk_args_norm_matvec gate_up;
    struct mk_args_norm_matvec lm_head;
    struct mk_args_sample sample;
    struct mk_args_attn_out attn_out;
    uint32_t words[MK_OP_ARGS_WORDS]; /* sizes the union; zero where an op uses less */
};
MK_STATIC_ASSERT(sizeof(union mk_op_args) == 4u * MK_OP_ARGS_WORDS, "mk_op_args is 60 bytes");

struct mk_instr {
    uint16_t op;    /* enum mk_opcode */
    uint16_t flags; /* reserved, 0 */
    uint32_t n_tasks;
    uint32_t signal;        /* counter each finished task adds 1 to (release), or MK_NO_COUNTER */
    struct mk_wait wait[2]; /* unused waits have ctr = MK_NO_COUNTER */
    uint32_t weight[4];     /* weight table indices */
    uint32_t buf[4];        /* arena offsets in floats */
    union mk_op_args args;  /* named by opcode */
};
/* Device code copies instructions as 16-byte words and host code writes them as C structs: the
 * offsets below are the contract, on both sides. */
MK_STATIC_ASSERT(sizeof(struct mk_instr) == 128, "mk_instr is 128 bytes");
MK_STATIC_ASSERT(sizeof(struct mk_wait) == 12, "mk_wait is 12 bytes");
MK_STATIC_ASSERT(offsetof(struct mk_instr, n_tasks) == 4, "mk_instr.n_tasks at 4");
MK_STATIC_ASSERT(offsetof(struct mk_instr, signal) == 8, "mk_instr.signal at 8");
MK_STATIC_ASSERT(offsetof(struct mk_instr, wait) == 12, "mk_instr.wait at 12");
MK_STATIC_ASSERT(offsetof(struct mk_instr, weight) == 36, "mk_instr.weight at 36");
MK_STATIC_ASSERT(offsetof(struct mk_instr, buf) == 52, "mk_instr.buf at 52");
MK_STATIC_ASSERT(offsetof(struct mk_instr, args) == 68, "mk_instr.args at 68");
MK_STATIC_ASSERT(offsetof(struct mk_args_qkv, eps) == 24 && offsetof(struct mk_args_qkv, rope_base) == 28,
                 "mk_args_qkv floats at 24, 28");
MK_STATIC_ASSERT(offsetof(struct mk_args_qkv, bias) == 32 && offsetof(struct mk_args_qkv, rope_scale) == 48 &&
                     offsetof(struct mk_args_qkv, v_rows_per_task) == 52 &&
                     sizeof(struct mk_args_qkv) <= 4u * MK_OP_ARGS_WORDS,
                 "mk_args_qkv appended fields at 32..52, within the union");

/* The rows [*r0, *r0 + *count) of [wq; wk; wv] that task t of a NORM_QKV_ROPE instruction computes
 * (*count 0: none, a task past the rows). Every executor maps tasks to rows through this. */
MK_ABI_FN void mk_qkv_task_rows(const struct mk_args_qkv *a, uint32_t t, uint32_t *r0, uint32_t *count) {
    const uint32_t qk = a->q_dim + a->kv_dim, total = qk + a->kv_dim;
    uint64_t lo = (uint64_t)t * a->rows_per_task, n = a->rows_per_task, end = total;
    if (a->v_rows_per_task) {
        const uint32_t tq = (qk + a->rows_per_task - 1u) / a->rows_per_task;
        if (t < tq) {
            end = qk;
        } else {
            lo = qk + (uint64_t)(t - tq) * a->v_rows_per_task;
            n = a->v_rows_per_task;
        }
    }
    *r0 = lo < end ? (uint32_t)lo : end;
    *count = lo < end ? (uint32_t)(end - lo < n ? end - lo : n) : 0u;
}
MK_STATIC_ASSERT(offsetof(struct mk_args_attn, head_dim) == 20, "mk_args_attn.head_dim at 20");
MK_STATIC_ASSERT(offsetof(struct mk_args_attn, arrive) == 24, "mk_args_attn.arrive at 24");
MK_STATIC_ASSERT(offsetof(struct mk_args_attn, solo) == 28, "mk_args_attn.solo at 28");
MK_STATIC_ASSERT(offsetof(struct mk_args_attn_out, head_dim) == 16, "mk_args_attn_out.head_dim at 16");
MK_STATIC_ASSERT(offsetof(struct mk_args_attn_out, solo) == 20, "mk_args_attn_out.solo at 20");
MK_STATIC_ASSERT(offsetof(struct mk_args_norm_matvec, eps) == 4, "mk_args_norm_matvec.eps at 4");

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
    /* Steps from token at pos, each feeding the token it samples to the next, at most gen_max of
     * them; each token goes to the mailbox's ring. Ends after a step whose token is in the stop
     * set, after gen_max steps, at the end of the context, or when the host sets gen_cancel. */
    MK_CMD_GENERATE = 4,
};

/* Why a GENERATE command ended (mk_mailbox.gen_why). */
enum mk_gen_end {
    MK_GEN_RUNNING = 0,
    MK_GEN_END_STOP = 1,      /* the last token is in the stop set */
    MK_GEN_END_MAX = 2,       /* gen_max steps ran */
    MK_GEN_END_CONTEXT = 3,   /* the last step was at the context's last position */
    MK_GEN_END_CANCELLED = 4, /* the host set gen_cancel */
};

/* Tokens the device may run ahead of the host's reading, and the most stop tokens it checks. */
#define MK_GEN_RING     256u
#define MK_GEN_MAX_STOP 16u

/* Parameters of one step, as the host posts them and the device copies them. */
struct mk_step_cmd {
    uint32_t cmd; /* enum mk_cmd */
    int32_t token;
    int32_t pos;
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: no limit (capped at MK_SAMPLE_MAX_CAND) */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint16_t n_tokens; /* chunk programs: tokens in this step, 1..ubatch (0 means 1) */
    uint16_t n_out;    /* chunk programs: last rows that get logits and a token, 1..n_tokens (0 means 1) */
    uint64_t seed;
};
MK_STATIC_ASSERT(sizeof(struct mk_step_cmd) == 40, "mk_step_cmd is 40 bytes");
MK_STATIC_ASSERT(offsetof(struct mk_step_cmd, n_tokens) == 28 && offsetof(struct mk_step_cmd, n_out) == 30,
                 "mk_step_cmd.n_tokens at 28, n_out at 30 (was reserved0)");
MK_STATIC_ASSERT(offsetof(struct mk_step_cmd, seed) == 32, "mk_step_cmd.seed at 32");

/* The mailbox in pinned, device-mapped host memory. The host fills cmd (and for GENERATE the gen_
 * fields of line 0 and the stop set), then release-stores cmd_seq = n (n counts commands from 1).
 * The device acquire-loads cmd_seq, copies cmd, runs the step or steps, fills the result fields,
 * then release-stores done_seq = n. Under GENERATE each token goes to gen_token[i % MK_GEN_RING]
 * (and its time to gen_t_ns) before gen_count = i + 1 is release-stored; the device waits while
 * the host's gen_read is MK_GEN_RING behind. Each side's fields sit on their own 64-byte lines. */
struct mk_mailbox {
    uint32_t cmd_seq; /* host -> device */
    uint32_t pad0;
    struct mk_step_cmd cmd;
    uint32_t gen_max;    /* GENERATE: most steps, >= 1 */
    uint32_t gen_n_stop; /* ... entries of gen_stop used, <= MK_GEN_MAX_STOP */
    uint32_t gen_read;   /* ... tokens the host has taken from the ring (written while it runs) */
    uint32_t gen_cancel; /* ... nonzero: end after the step in flight (written while it runs) */
    uint32_t done_seq;   /* device -> host */
    int32_t out_token;
    uint64_t t_start_ns; /* device globaltimer when the command was seen */
    uint64_t t_end_ns;   /* ... and when its last token was written */
    uint32_t error;      /* nonzero: the device trapped a broken invariant (an MK_DEVERR_*) */
    uint32_t error_arg;
    uint32_t gen_count; /* GENERATE: tokens in the ring so far (the host zeroes it before posting) */
    uint32_t gen_why;   /* ... enum mk_gen_end, with done_seq */
    uint8_t pad2[64 - 40];
    int32_t gen_stop[MK_GEN_MAX_STOP]; /* host -> device */
    int32_t gen_token[MK_GEN_RING];    /* device -> host */
    uint64_t gen_t_ns[MK_GEN_RING];    /* device globaltimer when gen_token[i] was written */
};
MK_STATIC_ASSERT(offsetof(struct mk_mailbox, done_seq) == 64, "mk_mailbox: device line at 64");
MK_STATIC_ASSERT(offsetof(struct mk_mailbox, gen_stop) == 128, "mk_mailbox: stop set at 128");
MK_STATIC_ASSERT(offsetof(struct mk_mailbox, gen_token) == 192, "mk_mailbox: ring at 192");
MK_STATIC_ASSERT(sizeof(struct mk_mailbox) == 192 + 12 * MK_GEN_RING, "mk_mailbox: three lines and the ring");

enum mk_device_error {
    MK_DEVERR_NONE = 0,
    MK_DEVERR_BAD_OPCODE = 1, /* error_arg = instruction index */
    MK_DEVERR_BAD_POS = 2,    /* error_arg = position */
    MK_DEVERR_BAD_TOKEN = 3,  /* error_arg = token */
    MK_DEVERR_INJECTED = 4,   /* test only: mk_kernel_args.fault_kind asked for it; error_arg = step */
};

/* The step state in executor memory: the command being run, and the token it produced. */
struct mk_step_state {
    struct mk_step_cmd cmd;
    uint32_t step; /* 0-based index of the step being run */
    int32_t out_token;
    /* step + 1 once cmd holds step's command */
    uint32_t go;
    /* megakernel: s + 1 when a GENERATE ended before step s, whose command comes from the mailbox */
    uint32_t gen_over;
    uint64_t t_start_ns; /* megakernel: device globaltimer when block 0 saw the command */
    uint32_t n_cmd;      /* megakernel: mailbox commands taken, the one running included */
    uint32_t gen_max;    /* GENERATE: the mailbox's gen_max, gen_n_stop and gen_stop, copied */
    uint32_t gen_n_stop;
    uint32_t gen_count; /* ... tokens written to the ring */
    uint32_t gen_read;  /* ... the host's gen_read as last seen */
    uint32_t reserved;
    int32_t gen_stop[MK_GEN_MAX_STOP];
};
MK_STATIC_ASSERT(sizeof(struct mk_step_state) == 152, "mk_step_state is 152 bytes");
MK_STATIC_ASSERT(offsetof(struct mk_step_state, out_token) == 44, "mk_step_state.out_token at 44");
MK_STATIC_ASSERT(offsetof(struct mk_step_state, t_start_ns) == 56, "mk_step_state.t_start_ns at 56");
MK_STATIC_ASSERT(offsetof(struct mk_step_state, gen_stop) == 88, "mk_step_state.gen_stop at 88");

/* After a GENERATE step that wrote token tok (its count-th), the reason to end there, or
 * MK_GEN_RUNNING: the one rule for the device and for the host's tests. */
#ifdef __CUDACC__
#define MK_ABI_HD __host__ __device__
#else
#define MK_ABI_HD
#endif
static inline MK_ABI_HD uint32_t mk_gen_end_after(int32_t tok, uint32_t count, int32_t pos, uint32_t n_ctx,
                                                  uint32_t gen_max, const int32_t *stop, uint32_t n_stop,
                                                  uint32_t cancel) {
    for (uint32_t i = 0; i < n_stop && i < MK_GEN_MAX_STOP; i++)
        if (stop[i] == tok) return MK_GEN_END_STOP;
    if (count >= gen_max) return MK_GEN_END_MAX;
    if ((uint32_t)pos + 1u >= n_ctx) return MK_GEN_END_CONTEXT;
    if (cancel) return MK_GEN_END_CANCELLED;
    return MK_GEN_RUNNING;
}

/* Maximum candidates the sampler keeps (top_k <= 0 or above it means this many). */
#define MK_SAMPLE_MAX_CAND 1024

/* What the first word of a task's trace entry holds. */
enum mk_trace_mode {
    MK_TRACE_AFTER_WAITS = 0, /* the task's start after its waits */
    MK_TRACE_AT_FETCH = 1,    /* when the block took the task, before its waits (a tuning aid) */
};

#ifndef MK_KV_TYPE_DEFINED
#define MK_KV_TYPE_DEFINED
/* Elements of the KV cache (the values are ggml's type ids). f16, as llama.cpp's default, halves
 * the bytes attention reads per position; f32 keeps k and v exactly as computed. */
enum mk_kv_type {
    MK_KV_F32 = 0,
    MK_KV_F16 = 1,
};
#endif /* MK_KV_TYPE_DEFINED */

/* Test only: what the megakernel does wrong on purpose (megakernel/fault.cuh). The values are
 * those of enum mk_fault_kind in graph/executor.h. */
enum mk_kernel_fault {
    MK_KFAULT_NONE = 0,
    MK_KFAULT_ERROR = 1,       /* report MK_DEVERR_INJECTED in the mailbox, then trap */
    MK_KFAULT_TRAP = 2,        /* a trap instruction: the context's sticky error */
    MK_KFAULT_HANG = 3,        /* the block stops (as under MK_CMD_HANG) and never signals */
    MK_KFAULT_BAD_ADDRESS = 4, /* a store to an unmapped address: an illegal-address error */
};

/* Everything one executor run needs, as addresses in that executor's memory: the launch
 * parameters of the GPU kernels (passed by value, __grid_constant__). Nothing reaches a kernel
 * any other way. */
struct mk_kernel_args {
    uint64_t instrs;        /* const struct mk_instr[n_instr] */
    uint64_t task_base;     /* const uint32_t[n_instr + 1]: first task index of each instruction */
    uint64_t weights;       /* const struct mk_weight_ref[] */
    uint64_t counters;      /* uint32_t[n_counters], zero at launch */
    uint64_t arena;         /* float[arena_floats] */
    uint64_t k_cache;       /* kv_type (layer, n_ctx, kv_dim) */
    uint64_t v_cache;       /* kv_type (layer, n_ctx, kv_dim) */
    uint64_t step_state;    /* struct mk_step_state */
    uint64_t mailbox;       /* struct mk_mailbox (device-mapped host memory), or 0 */
    uint64_t work;          /* uint64_t work counter for dynamic scheduling, zero at launch */
    uint64_t sched_offsets; /* uint32_t[n_workers + 1] static schedule, or 0 for dynamic */
    uint64_t sched_tasks;   /* uint32_t[n_tasks]: task indices, each worker's in program order */
    uint64_t trace;         /* uint64_t[n_tasks * 2] start/end ns of the last step, or 0 */
    uint64_t watch;         /* megakernel/cuda_layout.h's struct mk_watch, then mk_watch_block[grid]
                             * (device-mapped host memory), or 0 */
    uint64_t rope_table;    /* float2 (n_ctx, rope_pairs): cos, sin of RoPE for rope_base, rope_scale
                             * and rope_freqs, computed on the host in double; 0: the ops compute
                             * the angles themselves */
    uint32_t n_instr;
    uint32_t n_tasks; /* tasks per step */
    uint32_t n_counters;
    uint32_t n_workers;
    uint32_t n_ctx;
    uint32_t kv_dim;
    uint32_t n_layer;
    uint32_t vocab;
    uint32_t rope_pairs; /* of rope_table: n_rot / 2 it was made for */
    float rope_base;     /* ... and the base; an op whose own differ computes its angles */
    uint32_t trace_mode; /* enum mk_trace_mode */
    float rope_scale;    /* ... the position scale (mk_args_qkv.rope_scale) ... */
    uint32_t rope_freqs; /* ... and the weight index of the frequency divisors it applied, or MK_NO_WEIGHT */
    uint32_t fault_kind; /* test only: enum mk_kernel_fault the megakernel injects; 0 = none */
    uint32_t fault_step; /* ... at the start of this step, in its last block */
    uint32_t kv_type;    /* elements of k_cache and v_cache: MK_KV_F32 or MK_KV_F16 */
    /* Appended in ABI 12. The megakernel asks L2 for up to prefetch_bytes of a task's weights
     * before its waits, for the opcodes whose bit (1 << op) is set in prefetch_ops and tasks of at
     * least prefetch_min bytes of weights (rows_per_task x row bytes x matrices); 0: none. */
    uint32_t prefetch_bytes;
    uint32_t prefetch_ops;
    uint32_t prefetch_min;
    uint32_t reserved; /* 0 */
};
MK_STATIC_ASSERT(sizeof(struct mk_kernel_args) == 200, "mk_kernel_args is 200 bytes");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, watch) == 104, "mk_kernel_args.watch at 104");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, rope_table) == 112, "mk_kernel_args.rope_table at 112");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, n_instr) == 120, "mk_kernel_args.n_instr at 120");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, rope_pairs) == 152, "mk_kernel_args.rope_pairs at 152");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, trace_mode) == 160, "mk_kernel_args.trace_mode at 160");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, rope_freqs) == 168, "mk_kernel_args.rope_freqs at 168");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, fault_kind) == 172, "mk_kernel_args.fault_kind at 172");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, kv_type) == 180, "mk_kernel_args.kv_type at 180");
MK_STATIC_ASSERT(offsetof(struct mk_kernel_args, prefetch_ops) == 188 &&
                     offsetof(struct mk_kernel_args, prefetch_min) == 192,
                 "mk_kernel_args.prefetch_ops at 188, prefetch_min at 192");

#endif
