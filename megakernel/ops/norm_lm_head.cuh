/* MK_OP_NORM_LM_HEAD: final RMSNorm, logits for the task's vocabulary rows, and the tile's best (logit, id). */
#ifndef MK_OP_NORM_LM_HEAD_CUH
#define MK_OP_NORM_LM_HEAD_CUH

#include "megakernel/common.cuh"

__device__ __forceinline__ void mk_lm_rows(const struct mk_wdesc *w, const float *xs, float *logits, uint32_t r0,
                                           uint32_t count, uint32_t g, float *best, uint32_t *best_i, const int R) {
    const uint8_t *rows[4];
    float acc[4];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = mk_row(w, r0 + min(g + (uint32_t)r, count - 1u));
    mk_dot_rows(rows, R, w->dtype, w->vec, w->cols, xs, acc);
    if ((threadIdx.x & 31u) == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (g + (uint32_t)r < count) {
                uint32_t id = r0 + g + r;
                logits[id] = acc[r];
                if (mk_better(acc[r], id, *best, *best_i)) {
                    *best = acc[r];
                    *best_i = id;
                }
            }
        }
    }
}

__device__ void mk_op_norm_lm_head(const struct mk_task_ctx *c) {
    __shared__ float wbest[MK_BLOCK_WARPS];
    __shared__ uint32_t wbest_i[MK_BLOCK_WARPS];
    const struct mk_instr *in = c->in;
    struct mk_wdesc w = mk_weight(c, in->weight[1]);
    float *xs = c->smem;
    const struct mk_args_norm_matvec *la = &in->args.lm_head;
    float *res = xs + mk_layout_align4(w.cols);
    uint8_t *stage = (uint8_t *)(res + mk_layout_align4(la->rows_per_task));
    const bool block = mk_layout_is_block_format(w.dtype);
    struct mk_xq8 xq;
    const bool pre = mk_block_norm_input(c, xs, mk_arena(c) + in->buf[0], w.cols, in->weight[0], la->eps, true,
                                         block ? (float *)stage : NULL, &xq);
    uint32_t r0 = c->t * la->rows_per_task;
    float best = -INFINITY;
    uint32_t best_i = r0; /* as the CPU executor: an all -inf tile names its first row */
    uint32_t count = r0 < w.rows ? min(la->rows_per_task, w.rows - r0) : 0u;
    float *logits = mk_arena(c) + in->buf[1];
    const uint32_t warp = threadIdx.x >> 5;
    int R = mk_rows_per_warp(count);
    if (block) {
        if (count) {
            struct mk_qseg seg = mk_qseg_make(&w, r0, count, 0u);
            mk_qrows(&seg, 1u, xs, res, stage, pre ? &xq : NULL);
        }
        /* Each thread's best of its rows, then the warp's (lane 0 holds it, as below). */
        for (uint32_t i = threadIdx.x; i < count; i += MK_BLOCK_THREADS) {
            logits[r0 + i] = res[i];
            if (mk_better(res[i], r0 + i, best, best_i)) {
                best = res[i];
                best_i = r0 + i;
            }
        }
        mk_warp_best(&best, &best_i);
    } else if (R == 4) {
        for (uint32_t g = warp * 4u; g < count; g += MK_BLOCK_WARPS * 4u)
            mk_lm_rows(&w, xs, logits, r0, count, g, &best, &best_i, 4);
    } else if (R == 2) {
        for (uint32_t g = warp * 2u; g < count; g += MK_BLOCK_WARPS * 2u)
            mk_lm_rows(&w, xs, logits, r0, count, g, &best, &best_i, 2);
    } else {
        for (uint32_t g = warp; g < count; g += MK_BLOCK_WARPS)
            mk_lm_rows(&w, xs, logits, r0, count, g, &best, &best_i, 1);
    }
    if ((threadIdx.x & 31u) == 0) {
        wbest[warp] = best;
        wbest_i[warp] = best_i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = wbest[0];
        uint32_t bi = wbest_i[0];
        for (uint32_t k = 1; k < MK_BLOCK_WARPS; k++)
            if (mk_better(wbest[k], wbest_i[k], b, bi)) {
                b = wbest[k];
                bi = wbest_i[k];
            }
        float *tile = mk_arena(c) + in->buf[2] + 2u * c->t;
        tile[0] = b;
        tile[1] = __uint_as_float(bi);
    }
}

#endif
