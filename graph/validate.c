/* Program validator: re-derives every instruction's memory accesses from its opcode and proves
 * the waits order them, can all be met, and cannot deadlock for any number of workers. */
#include <stdlib.h>
#include <string.h>

#include "graph/program.h"

enum { MK_SPACE_ARENA = 0, MK_SPACE_KV = 1 };

struct mk_range {
    int space; /* arena, or KV cache of layer `lo` (the whole layer) */
    uint64_t lo, hi;
};

/* A counter's owner in the validator's table: an instruction's arrival counter, not its signal. */
#define MK_VAL_ARRIVAL 0x80000000u

struct mk_access {
    struct mk_range r[3], w[3];
    int nr, nw;
};

static bool mk_overlap(const struct mk_range *a, const struct mk_range *b) {
    return a->space == b->space && a->lo < b->hi && b->lo < a->hi;
}

static const struct mk_weight_ref *mk_val_weight(const struct mk_program *p, const struct mk_instr *in, int k) {
    return in->weight[k] < p->n_weights ? &p->weights[in->weight[k]] : NULL;
}

#define FAIL(...) return mk_error_set(err, MK_ERR_INVALID_ARG, __VA_ARGS__)

/* Weight idx + k exists, is an f32 vector of n elements. */
static bool mk_val_vec(const struct mk_program *p, uint32_t idx, uint32_t k, uint32_t n) {
    if (idx == MK_NO_WEIGHT || idx >= p->n_weights || k >= p->n_weights - idx) return false;
    const struct mk_weight_ref *w = &p->weights[idx + k];
    return w->dtype == 0 /* f32 */ && w->rows == 1 && w->cols == n;
}

/* NORM_QKV_ROPE's appended arguments: biases, q/k norms, frequency divisors, flags, scale. */
static enum mk_status mk_val_qkv_extras(const struct mk_program *p, uint32_t i, const char *lab,
                                        const struct mk_args_qkv *q, struct mk_error *err) {
    if (q->flags & ~MK_QKV_FLAGS) FAIL("instr %u (%s): unknown qkv flags 0x%x", i, lab, q->flags);
    if (q->bias != MK_NO_WEIGHT && !(mk_val_vec(p, q->bias, 0, q->q_dim) && mk_val_vec(p, q->bias, 1, q->kv_dim) &&
                                     mk_val_vec(p, q->bias, 2, q->kv_dim)))
        FAIL("instr %u (%s): biases at weight %u are not f32 vectors of %u, %u, %u", i, lab, q->bias, q->q_dim,
             q->kv_dim, q->kv_dim);
    bool norm = (q->flags & MK_QKV_QK_NORM) != 0;
    if (norm != (q->qk_norm != MK_NO_WEIGHT) ||
        (norm && !(mk_val_vec(p, q->qk_norm, 0, q->head_dim) && mk_val_vec(p, q->qk_norm, 1, q->head_dim))))
        FAIL("instr %u (%s): q/k norms at weight %u do not match the flags 0x%x and head_dim %u", i, lab, q->qk_norm,
             q->flags, q->head_dim);
    if (q->rope_freqs != MK_NO_WEIGHT && !mk_val_vec(p, q->rope_freqs, 0, q->n_rot / 2))
        FAIL("instr %u (%s): rope_freqs weight %u is not an f32 vector of %u", i, lab, q->rope_freqs, q->n_rot / 2);
    if (!(q->rope_scale > 0.0f && q->rope_scale < 1e30f))
        FAIL("instr %u (%s): rope_scale %g is not a positive number", i, lab, (double)q->rope_scale);
    if ((q->flags & (MK_QKV_NEOX | MK_QKV_QK_NORM)) &&
        (q->rows_per_task % q->head_dim || q->v_rows_per_task % q->head_dim))
        FAIL("instr %u (%s): NEOX rotation or q/k norms need whole heads, but tiles of %u (wv: %u) rows split heads of "
             "%u",
             i, lab, q->rows_per_task, q->v_rows_per_task, q->head_dim);
    return MK_OK;
}

/* Derives the accesses of instruction i and checks its fields against the opcode's contract. */
static enum mk_status mk_val_access(const struct mk_program *p, uint32_t i, struct mk_access *a, struct mk_error *err) {
    const struct mk_instr *in = &p->instrs[i];
    const char *lab = p->labels ? p->labels[i] : "";
    memset(a, 0, sizeof *a);
#define RD(lo_, n_) \
    a->r[a->nr++] = (struct mk_range) { MK_SPACE_ARENA, (lo_), (uint64_t)(lo_) + (n_) }
#define WR(lo_, n_) \
    a->w[a->nw++] = (struct mk_range) { MK_SPACE_ARENA, (lo_), (uint64_t)(lo_) + (n_) }
#define NEED_W(k)                                               \
    const struct mk_weight_ref *w##k = mk_val_weight(p, in, k); \
    if (!w##k)                                                  \
        FAIL("instr %u (%s): weight slot %d = %u is not in the table of %u", i, lab, k, in->weight[k], p->n_weights);
    /* The int8-level copy of the attention vector (nh heads of hd) that a merge of the splits may
     * write at buf[k]: whole groups in every head. */
#define ATTN_XQ_OUT(k_, nh_, hd_)                                                                                    \
    if (in->buf[k_] != MK_NO_BUF) {                                                                                  \
        if ((hd_) % MK_XQ_GROUP)                                                                                     \
            FAIL("instr %u (%s): an int8-level output (buf%d = %u) needs heads of whole groups of %u (head_dim %u)", \
                 i, lab, k_, in->buf[k_], MK_XQ_GROUP, hd_);                                                         \
        WR(in->buf[k_], MK_XQ_FLOATS((uint64_t)(nh_) * (hd_)));                                                      \
    }
    /* The normalized copy of the residual stream (abi.h, MK_XQN_*): read by a norm op of n inputs,
     * written by a residual add of w0->rows rows in tasks of rpt, with the f32 norm weight 1. */
#define NORMQ_IN(n_)                                                                                              \
    if (in->buf[3] != MK_NO_BUF) {                                                                                \
        if (U > 1 || (n_) % MK_XQ_GROUP)                                                                          \
            FAIL("instr %u (%s): a normalized input copy (buf3 = %u) needs a one-token program and whole groups " \
                 "of %u in %u inputs",                                                                            \
                 i, lab, in->buf[3], MK_XQ_GROUP, (unsigned)(n_));                                                \
        RD(in->buf[3], MK_XQN_FLOATS(n_));                                                                        \
    }
#define NORMQ_OUT(rpt_)                                                                                           \
    if (in->buf[3] != MK_NO_BUF) {                                                                                \
        const struct mk_weight_ref *nw = mk_val_weight(p, in, 1);                                                 \
        if (U > 1 || !mk_dtype_is_block(w0->dtype) || w0->rows % MK_XQ_GROUP || (rpt_) % MK_XQ_GROUP || !nw ||    \
            nw->dtype != MK_DTYPE_F32 || nw->cols != w0->rows)                                                    \
            FAIL("instr %u (%s): a normalized output copy (buf3 = %u) needs a one-token program, a block-format " \
                 "weight, whole groups of %u in %u rows, %u per task, and an f32 norm weight of as many columns", \
                 i, lab, in->buf[3], MK_XQ_GROUP, w0->rows, (unsigned)(rpt_));                                    \
        WR(in->buf[3], MK_XQN_FLOATS(w0->rows));                                                                  \
    }
    uint64_t T = in->n_tasks, U = p->ubatch > 1 ? p->ubatch : 1;
    /* Chunk programs name their token arrays in EMBED buf[1] and SAMPLE buf[3]; one-token ones do not. */
    if ((in->op == MK_OP_EMBED || in->op == MK_OP_SAMPLE) &&
        (in->buf[in->op == MK_OP_EMBED ? 1 : 3] == MK_NO_BUF) != (U == 1))
        FAIL("instr %u (%s): a program of %llu tokens per step %s a token array", i, lab, (unsigned long long)U,
             U == 1 ? "has" : "lacks");
    if (U > 1 && (in->op == MK_OP_ATTN_PARTIAL || in->op == MK_OP_ATTN_COMBINE || in->op == MK_OP_ATTN_OUTPUT))
        FAIL("instr %u (%s): %s is a one-token op, in a program of %llu tokens per step", i, lab,
             mk_opcode_name(in->op), (unsigned long long)U);
    switch (in->op) {
    case MK_OP_EMBED: {
        const struct mk_args_embed *e = &in->args.embed;
        NEED_W(0);
        if (w0->cols != e->n_embd || T * e->elems_per_task < e->n_embd)
            FAIL("instr %u (%s): embed covers %llu of %u elements", i, lab, (unsigned long long)(T * e->elems_per_task),
                 w0->cols);
        WR(in->buf[0], U * e->n_embd);
        if (U > 1 && in->buf[1] != p->tokens_off)
            FAIL("instr %u (%s): embed reads tokens at %u, the program's token array is at %u", i, lab, in->buf[1],
                 p->tokens_off);
        if (U > 1) RD(in->buf[1], U);
        break;
    }
    case MK_OP_NORM_QKV_ROPE: {
        const struct mk_args_qkv *q = &in->args.qkv;
        NEED_W(0) NEED_W(1) NEED_W(2) NEED_W(3);
        uint32_t n = w1->cols;
        if (w0->cols != n || w2->cols != n || w3->cols != n || w1->rows != q->q_dim || w2->rows != q->kv_dim ||
            w3->rows != q->kv_dim || q->kv_dim != p->kv_dim)
            FAIL("instr %u (%s): q/k/v/norm shapes disagree with q_dim %u kv_dim %u", i, lab, q->q_dim, q->kv_dim);
        if (q->rows_per_task == 0 || q->rows_per_task % 2 ||
            (!q->v_rows_per_task && T * q->rows_per_task < (uint64_t)q->q_dim + 2ull * q->kv_dim))
            FAIL("instr %u (%s): %llu tasks of %u rows do not cover %u rows in even tiles", i, lab,
                 (unsigned long long)T, q->rows_per_task, q->q_dim + 2 * q->kv_dim);
        if (q->v_rows_per_task) {
            const uint64_t qk = (uint64_t)q->q_dim + q->kv_dim, vr = q->v_rows_per_task;
            const uint64_t need = (qk + q->rows_per_task - 1) / q->rows_per_task + (q->kv_dim + vr - 1) / vr;
            if (vr % 2 || vr > q->rows_per_task || T < need)
                FAIL("instr %u (%s): %llu tasks of %u rows over wq, wk and of %u rows over wv do not cover them in "
                     "even tiles of at most %u rows (%llu needed)",
                     i, lab, (unsigned long long)T, q->rows_per_task, q->v_rows_per_task, q->rows_per_task,
                     (unsigned long long)need);
        }
        if (q->layer >= p->n_layer) FAIL("instr %u (%s): layer %u of %u", i, lab, q->layer, p->n_layer);
        if (!q->head_dim || q->head_dim % 2 || q->n_rot > q->head_dim || q->n_rot % 2 || q->q_dim % q->head_dim ||
            q->kv_dim % q->head_dim)
            FAIL("instr %u (%s): head_dim %u / n_rot %u invalid", i, lab, q->head_dim, q->n_rot);
        enum mk_status vst = mk_val_qkv_extras(p, i, lab, q, err);
        if (vst != MK_OK) return vst;
        RD(in->buf[0], U * n);
        NORMQ_IN(n);
        WR(in->buf[1], U * q->q_dim);
        a->w[a->nw++] = (struct mk_range){ MK_SPACE_KV, q->layer, q->layer + 1ull };
        break;
    }
    case MK_OP_ATTN_PARTIAL: {
        const struct mk_args_attn *at = &in->args.attn;
        uint32_t bs = at->block, nb = at->n_blocks, nh = at->n_head, nkv = at->n_head_kv, hd = at->head_dim;
        if (!bs || !nb || !nh || !nkv || !hd || nh % nkv || (uint64_t)nkv * hd != p->kv_dim ||
            T != (uint64_t)nkv * nb || at->layer >= p->n_layer)
            FAIL("instr %u (%s): attention shape (block %u x %u, heads %u/%u, dim %u, layer %u) inconsistent", i, lab,
                 bs, nb, nh, nkv, hd, at->layer);
        RD(in->buf[0], (uint64_t)nh * hd);
        a->r[a->nr++] = (struct mk_range){ MK_SPACE_KV, at->layer, at->layer + 1ull };
        WR(in->buf[1], (uint64_t)nh * nb * (hd + 2));
        if (!at->arrive) {
            if (in->buf[2] != MK_NO_BUF || in->buf[3] != MK_NO_BUF)
                FAIL("instr %u (%s): attention outputs (buf2 = %u, buf3 = %u) without arrival counters (arrive = 0)", i,
                     lab, in->buf[2], in->buf[3]);
            break;
        }
        WR(in->buf[2], (uint64_t)nh * hd); /* the arrival counters: mk_program_validate */
        ATTN_XQ_OUT(3, nh, hd);
        break;
    }
    case MK_OP_ATTN_CHUNK: {
        const struct mk_args_attn *at = &in->args.attn;
        uint32_t bs = at->block, nb = at->n_blocks, nh = at->n_head, nkv = at->n_head_kv, hd = at->head_dim;
        if (!bs || !nb || !nh || !nkv || !hd || nh % nkv || (uint64_t)nkv * hd != p->kv_dim || T != nh ||
            at->layer >= p->n_layer)
            FAIL("instr %u (%s): chunk attention shape (block %u x %u, heads %u/%u, dim %u, layer %u, %llu tasks) "
                 "inconsistent",
                 i, lab, bs, nb, nh, nkv, hd, at->layer, (unsigned long long)T);
        RD(in->buf[0], U * nh * hd);
        a->r[a->nr++] = (struct mk_range){ MK_SPACE_KV, at->layer, at->layer + 1ull };
        WR(in->buf[1], U * nh * hd);
        break;
    }
    case MK_OP_ATTN_COMBINE: {
        uint32_t nb = in->args.combine.n_blocks, nh = in->args.combine.n_head, hd = in->args.combine.head_dim;
        if (!nb || !nh || !hd || T != nh)
            FAIL("instr %u (%s): combine of %u heads has %llu tasks", i, lab, nh, (unsigned long long)T);
        RD(in->buf[0], (uint64_t)nh * nb * (hd + 2));
        WR(in->buf[1], (uint64_t)nh * hd);
        ATTN_XQ_OUT(2, nh, hd);
        break;
    }
    case MK_OP_ATTN_OUTPUT: {
        const struct mk_args_attn_out *ao = &in->args.attn_out;
        NEED_W(0);
        uint32_t nb = ao->n_blocks, bs = ao->block, nh = ao->n_head, hd = ao->head_dim, rpt = ao->rows_per_task;
        if (!nb || !bs || !nh || !hd || w0->cols != nh * hd || !rpt || T * rpt < w0->rows)
            FAIL("instr %u (%s): attention output shape (blocks %u x %u, heads %u of %u, %u cols, tiles %llu x %u) "
                 "inconsistent",
                 i, lab, nb, bs, nh, hd, w0->cols, (unsigned long long)T, rpt);
        RD(in->buf[0], (uint64_t)nh * nb * (hd + 2));
        RD(in->buf[1], w0->rows);
        WR(in->buf[1], w0->rows);
        NORMQ_OUT(rpt);
        break;
    }
    case MK_OP_MATVEC_RESIDUAL: {
        uint32_t rpt = in->args.matvec.rows_per_task;
        NEED_W(0);
        if (!rpt || T * rpt < w0->rows)
            FAIL("instr %u (%s): tiles cover %llu of %u rows", i, lab, (unsigned long long)(T * rpt), w0->rows);
        RD(in->buf[0], U * w0->cols);
        RD(in->buf[1], U * w0->rows);
        WR(in->buf[1], U * w0->rows);
        if (in->buf[2] != MK_NO_BUF) {
            if (U > 1 || !mk_dtype_is_block(w0->dtype) || w0->cols % MK_XQ_GROUP)
                FAIL("instr %u (%s): an int8-level input (buf2 = %u) needs a one-token program and a block-format "
                     "weight of whole groups (type %u, %u cols)",
                     i, lab, in->buf[2], w0->dtype, w0->cols);
            RD(in->buf[2], MK_XQ_FLOATS(w0->cols));
        }
        NORMQ_OUT(rpt);
        break;
    }
    case MK_OP_NORM_GATE_UP_SILU: {
        uint32_t rpt = in->args.gate_up.rows_per_task;
        NEED_W(0) NEED_W(1) NEED_W(2);
        if (w0->cols != w1->cols || w1->cols != w2->cols || w1->rows != w2->rows || !rpt || T * rpt < w1->rows)
            FAIL("instr %u (%s): gate/up/norm shapes or tiles disagree", i, lab);
        RD(in->buf[0], U * w1->cols);
        NORMQ_IN(w1->cols);
        WR(in->buf[1], U * w1->rows);
        if (in->buf[2] != MK_NO_BUF) {
            if (U > 1 || w1->rows % MK_XQ_GROUP || rpt % MK_XQ_GROUP)
                FAIL("instr %u (%s): an int8-level output (buf2 = %u) needs a one-token program and whole groups of "
                     "%u in %u rows, %u per task",
                     i, lab, in->buf[2], MK_XQ_GROUP, w1->rows, rpt);
            WR(in->buf[2], MK_XQ_FLOATS(w1->rows));
        }
        break;
    }
    case MK_OP_NORM_LM_HEAD: {
        uint32_t rpt = in->args.lm_head.rows_per_task;
        NEED_W(0) NEED_W(1);
        if (w0->cols != w1->cols || w1->rows != p->vocab || !rpt || T * rpt < w1->rows)
            FAIL("instr %u (%s): LM head shapes or tiles disagree", i, lab);
        RD(in->buf[0], U * w1->cols);
        NORMQ_IN(w1->cols);
        WR(in->buf[1], U * w1->rows);
        WR(in->buf[2], U * 2 * T);
        break;
    }
    case MK_OP_SAMPLE:
        if (T != 1 || in->args.sample.vocab != p->vocab || !in->args.sample.n_tiles)
            FAIL("instr %u (%s): sample needs 1 task over %u logits", i, lab, p->vocab);
        if (in->args.sample.rows_per_tile &&
            ((uint64_t)in->args.sample.vocab + in->args.sample.rows_per_tile - 1u) / in->args.sample.rows_per_tile !=
                in->args.sample.n_tiles)
            FAIL("instr %u (%s): sample's %u tiles of %u rows do not cover the %u logits", i, lab,
                 in->args.sample.n_tiles, in->args.sample.rows_per_tile, in->args.sample.vocab);
        if (in->args.sample.rows_per_tile) { /* it reads only some tiles: they must be the LM head's */
            uint32_t h = 0;
            while (h < p->n_instr && !(p->instrs[h].op == MK_OP_NORM_LM_HEAD && p->instrs[h].buf[2] == in->buf[2])) h++;
            if (h == p->n_instr || p->instrs[h].args.lm_head.rows_per_task != in->args.sample.rows_per_tile ||
                p->instrs[h].n_tasks != in->args.sample.n_tiles)
                FAIL("instr %u (%s): sample's tiles (%u of %u rows at %u) are not an LM head's", i, lab,
                     in->args.sample.n_tiles, in->args.sample.rows_per_tile, in->buf[2]);
        }
        RD(in->buf[1], U * in->args.sample.vocab);
        RD(in->buf[2], U * 2ull * in->args.sample.n_tiles);
        if (U > 1 && in->buf[3] != p->out_tokens_off)
            FAIL("instr %u (%s): sample writes tokens at %u, the program's output array is at %u", i, lab, in->buf[3],
                 p->out_tokens_off);
        if (U > 1) WR(in->buf[3], U);
        break;
    case MK_OP_BARRIER:
        if (T != 1) FAIL("instr %u (%s): a barrier is one task", i, lab);
        break;
    default: FAIL("instr %u (%s): unknown opcode %u", i, lab, in->op);
    }
    for (int k = 0; k < a->nr + a->nw; k++) {
        const struct mk_range *r = k < a->nr ? &a->r[k] : &a->w[k - a->nr];
        if (r->space == MK_SPACE_ARENA && r->hi > p->arena_floats)
            FAIL("instr %u (%s): arena range [%llu, %llu) is past the arena of %u floats", i, lab,
                 (unsigned long long)r->lo, (unsigned long long)r->hi, p->arena_floats);
    }
    return MK_OK;
#undef RD
#undef WR
#undef NEED_W
#undef NORMQ_IN
#undef NORMQ_OUT
#undef ATTN_XQ_OUT
}

enum mk_status mk_program_validate(const struct mk_program *p, struct mk_error *err) {
    uint32_t n = p->n_instr;
    if (!n) FAIL("program has no instructions");
    if (p->task_base[0] != 0) FAIL("task_base[0] = %u, not 0", p->task_base[0]);
    for (uint32_t i = 0; i < n; i++) {
        if (!p->instrs[i].n_tasks) FAIL("instr %u (%s) has no tasks", i, p->labels[i]);
        if (p->task_base[i + 1] != p->task_base[i] + p->instrs[i].n_tasks) FAIL("task_base[%u] is inconsistent", i + 1);
    }
    if (p->task_base[n] != p->n_tasks) FAIL("n_tasks %u != sum of tasks %u", p->n_tasks, p->task_base[n]);
    if (p->instrs[n - 1].op != MK_OP_SAMPLE)
        FAIL("the last instruction is %u, not SAMPLE: the step has no end", p->instrs[n - 1].op);
    /* Each counter has at most one signaler; remember it. */
    uint32_t *signaler = malloc((size_t)p->n_counters * sizeof *signaler);
    uint32_t words = (n + 63) / 64;
    uint64_t *anc = calloc((size_t)n * words, sizeof *anc);
    struct mk_access *acc = calloc(n, sizeof *acc);
    enum mk_status st = MK_OK;
    if (!signaler || !anc || !acc) {
        st = mk_error_set(err, MK_ERR_NOMEM, "out of memory validating the program");
        goto done;
    }
#undef FAIL
#define FAIL(...)                                                \
    do {                                                         \
        st = mk_error_set(err, MK_ERR_INVALID_ARG, __VA_ARGS__); \
        goto done;                                               \
    } while (0)
    for (uint32_t c = 0; c < p->n_counters; c++) signaler[c] = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = p->instrs[i].signal;
        if (s == MK_NO_COUNTER) continue;
        if (s == MK_COUNTER_ALL || s >= p->n_counters)
            FAIL("instr %u (%s) signals counter %u (valid: 1..%u)", i, p->labels[i], s, p->n_counters - 1);
        if (signaler[s] != UINT32_MAX) FAIL("counter %u is signaled by instr %u and %u", s, signaler[s], i);
        signaler[s] = i;
    }
    /* ATTN_PARTIAL's arrival counters: counted by that instruction alone, never a signal or a wait. */
    for (uint32_t i = 0; i < n; i++) {
        const struct mk_instr *in = &p->instrs[i];
        if (in->op != MK_OP_ATTN_PARTIAL || !in->args.attn.arrive) continue;
        const uint32_t c0 = in->args.attn.arrive, nkv = in->args.attn.n_head_kv;
        if (c0 >= p->n_counters || nkv > p->n_counters - c0)
            FAIL("instr %u (%s): arrival counters %u..%u are not among the program's %u", i, p->labels[i], c0,
                 c0 + nkv - 1u, p->n_counters);
        for (uint32_t c = c0; c < c0 + nkv; c++) {
            if (signaler[c] != UINT32_MAX)
                FAIL("instr %u (%s) arrives at counter %u, which instr %u also %s", i, p->labels[i], c,
                     signaler[c] & ~MK_VAL_ARRIVAL, signaler[c] & MK_VAL_ARRIVAL ? "arrives at" : "signals");
            signaler[c] = MK_VAL_ARRIVAL | i;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct mk_instr *in = &p->instrs[i];
        for (int k = 0; k < 2; k++) {
            const struct mk_wait *w = &in->wait[k];
            if (w->ctr == MK_NO_COUNTER) continue;
            if (w->ctr >= p->n_counters)
                FAIL("instr %u (%s) waits on counter %u of %u", i, p->labels[i], w->ctr, p->n_counters);
            if (w->ctr == MK_COUNTER_ALL) {
                /* A join: every task before `add` in program order; per step, all tasks. */
                if (w->mul != p->n_tasks)
                    FAIL("instr %u (%s) waits on the all-tasks counter with %u per step, but a step has %u tasks", i,
                         p->labels[i], w->mul, p->n_tasks);
                if (w->add > p->task_base[i])
                    FAIL("instr %u (%s) waits for %u tasks but only %u come before it (it would wait on itself or "
                         "later work)",
                         i, p->labels[i], w->add, p->task_base[i]);
                for (uint32_t j = 0; j < i; j++)
                    if (p->task_base[j + 1] <= w->add) {
                        for (uint32_t wd = 0; wd < words; wd++)
                            anc[(size_t)i * words + wd] |= anc[(size_t)j * words + wd];
                        anc[(size_t)i * words + j / 64] |= 1ull << (j % 64);
                    }
                continue;
            }
            uint32_t j = signaler[w->ctr];
            if (j == UINT32_MAX)
                FAIL("instr %u (%s) waits on counter %u, which nothing signals: the wait can never be met", i,
                     p->labels[i], w->ctr);
            if (j & MK_VAL_ARRIVAL)
                FAIL("instr %u (%s) waits on counter %u, an arrival counter of instr %u (it goes back to 0 each step)",
                     i, p->labels[i], w->ctr, j & ~MK_VAL_ARRIVAL);
            if (j == i) FAIL("instr %u (%s) waits on its own counter %u", i, p->labels[i], w->ctr);
            if (j > i)
                FAIL("instr %u (%s) waits on counter %u of the later instr %u (%s)", i, p->labels[i], w->ctr, j,
                     p->labels[j]);
            uint32_t t = p->instrs[j].n_tasks;
            if (w->mul != t)
                FAIL("instr %u (%s) expects %u signals per step on counter %u, but instr %u gives %u", i, p->labels[i],
                     w->mul, w->ctr, j, t);
            if (w->add > t)
                FAIL("instr %u (%s) waits for %u signals on counter %u, but instr %u (%s) gives only %u per step", i,
                     p->labels[i], w->add, w->ctr, j, p->labels[j], t);
            if (w->add < t)
                FAIL("instr %u (%s) waits for %u of the %u tasks of instr %u: partial waits are not ordered", i,
                     p->labels[i], w->add, t, j);
            for (uint32_t wd = 0; wd < words; wd++) anc[(size_t)i * words + wd] |= anc[(size_t)j * words + wd];
            anc[(size_t)i * words + j / 64] |= 1ull << (j % 64);
        }
        if ((st = mk_val_access(p, i, &acc[i], err)) != MK_OK) goto done;
    }
    /* Every read after its write, every overwrite after the reads and writes before it. */
    for (uint32_t j = 0; j < n; j++)
        for (uint32_t i = 0; i < j; i++) {
            bool ordered = (anc[(size_t)j * words + i / 64] >> (i % 64)) & 1;
            if (ordered) continue;
            const struct mk_access *a = &acc[i], *b = &acc[j];
            for (int x = 0; x < a->nw; x++) {
                for (int y = 0; y < b->nr; y++)
                    if (mk_overlap(&a->w[x], &b->r[y]))
                        FAIL("instr %u (%s) reads what instr %u (%s) writes without waiting for it", j, p->labels[j], i,
                             p->labels[i]);
                for (int y = 0; y < b->nw; y++)
                    if (mk_overlap(&a->w[x], &b->w[y]))
                        FAIL("instr %u (%s) and instr %u (%s) write the same memory unordered", i, p->labels[i], j,
                             p->labels[j]);
            }
            for (int x = 0; x < a->nr; x++)
                for (int y = 0; y < b->nw; y++)
                    if (mk_overlap(&a->r[x], &b->w[y]))
                        FAIL("instr %u (%s) overwrites what instr %u (%s) reads without waiting for it", j,
                             p->labels[j], i, p->labels[i]);
        }
    /* The step ends when SAMPLE ends: it must come after everything else. */
    for (uint32_t i = 0; i + 1 < n; i++)
        if (!((anc[(size_t)(n - 1) * words + i / 64] >> (i % 64)) & 1))
            FAIL("instr %u (%s) is not ordered before the final SAMPLE: the step could end while it runs", i,
                 p->labels[i]);
    if (p->schedule == MK_SCHED_STATIC) {
        if (!p->n_workers || !p->sched_offsets || !p->sched_tasks) FAIL("static schedule without task lists");
        if (p->sched_offsets[0] != 0 || p->sched_offsets[p->n_workers] != p->n_tasks)
            FAIL("static schedule does not list %u tasks", p->n_tasks);
        uint8_t *seen = calloc(p->n_tasks, 1);
        if (!seen) FAIL("out of memory");
        for (uint32_t w = 0; w < p->n_workers && st == MK_OK; w++) {
            if (p->sched_offsets[w + 1] < p->sched_offsets[w])
                st = mk_error_set(err, MK_ERR_INVALID_ARG, "worker %u has a negative task list", w);
            for (uint32_t k = p->sched_offsets[w]; k < p->sched_offsets[w + 1] && st == MK_OK; k++) {
                uint32_t t = p->sched_tasks[k];
                if (t >= p->n_tasks || seen[t])
                    st =
                        mk_error_set(err, MK_ERR_INVALID_ARG, "task %u listed twice or out of range (worker %u)", t, w);
                else if (k > p->sched_offsets[w] && p->sched_tasks[k - 1] >= t)
                    st = mk_error_set(err, MK_ERR_INVALID_ARG,
                                      "worker %u runs task %u after task %u: not program order (deadlock risk)", w, t,
                                      p->sched_tasks[k - 1]);
                else
                    seen[t] = 1;
            }
        }
        free(seen);
    }
done:
    free(signaler);
    free(anc);
    free(acc);
    return st;
}
