/* MK_OP_MATVEC_RESIDUAL: out[r] += W[r] . in for the task's rows (attention output, FFN down). */
#ifndef MK_OP_MATVEC_RESIDUAL_CUH
#define MK_OP_MATVEC_RESIDUAL_CUH

#include "megakernel/common.cuh"

__device__ __forceinline__ void mk_matvec_residual_rows(const struct mk_wdesc *w, const float *xs, float *out,
                                                        uint32_t r0, uint32_t count, uint32_t g, const int R) {
    const uint8_t *rows[4];
    float acc[4], old[4];
#pragma unroll
    for (int r = 0; r < R; r++) {
        uint32_t row = r0 + min(g + (uint32_t)r, count - 1u);
        rows[r] = mk_row(w, row);
        old[r] = __ldcg(out + row); /* in flight during the dot */
    }
    mk_dot_rows(rows, R, w->dtype, w->vec, w->cols, xs, acc);
    if ((threadIdx.x & 31u) == 0) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (g + (uint32_t)r < count) out[r0 + g + r] = old[r] + acc[r];
    }
}

/* out[r0 + i] += res[i] for the task's count rows (a multiple of 32), writing the normalized copy of
 * them (abi.h, MK_XQN_*; norm weight nw) warp by warp, a group of 32 each. Kept out of line: the
 * rows' common path stays as it was. */
__device__ __noinline__ void mk_residual_store_normq(float *out, const float *res, uint32_t r0, uint32_t count,
                                                     uint32_t n_all, const float *nw, float *cq) {
    for (uint32_t i0 = threadIdx.x & ~31u; i0 < count; i0 += MK_BLOCK_THREADS) {
        const uint32_t i = i0 + (threadIdx.x & 31u);
        const float v = __ldcg(out + r0 + i) + res[i], nwv = __ldg(nw + r0 + i);
        out[r0 + i] = v;
        mk_warp_store_normq(v, nwv, (r0 + i0) / 32u, n_all, cq);
    }
}

/* out[buf1 + r] += W[r] . xs for the task's rows_per_task rows; xs (w.cols floats, shared
 * memory) is ready, or for block formats `pre` (x as int8 levels, see mk_qrows). Block formats use
 * `scratch` (shared memory: results, then the stages) and write the normalized copy of out when
 * the instruction names one (buf3). */
__device__ void mk_matvec_residual_tile(const struct mk_task_ctx *c, const struct mk_wdesc *w, float *xs,
                                        uint32_t rows_per_task, float *scratch, const struct mk_xq8 *pre) {
    const struct mk_instr *in = c->in;
    uint32_t r0 = c->t * rows_per_task;
    if (r0 >= w->rows) return;
    uint32_t count = min(rows_per_task, w->rows - r0);
    float *out = mk_arena(c) + in->buf[1];
    if (mk_layout_is_block_format(w->dtype)) {
        struct mk_qseg seg = mk_qseg_make(w, r0, count, 0u);
        mk_qrows(&seg, 1u, xs, scratch, (uint8_t *)(scratch + mk_layout_align4(rows_per_task)), pre);
        if (in->buf[3] != MK_NO_BUF) {
            mk_residual_store_normq(out, scratch, r0, count, w->rows, (const float *)mk_weight(c, in->weight[1]).ptr,
                                    mk_arena(c) + in->buf[3]);
            return;
        }
        for (uint32_t i = threadIdx.x; i < count; i += MK_BLOCK_THREADS)
            out[r0 + i] = __ldcg(out + r0 + i) + scratch[i];
        return;
    }
    uint32_t warp = threadIdx.x >> 5;
    int R = mk_rows_per_warp(count);
    if (R == 4) {
        for (uint32_t g = warp * 4u; g < count; g += MK_BLOCK_WARPS * 4u)
            mk_matvec_residual_rows(w, xs, out, r0, count, g, 4);
    } else if (R == 2) {
        for (uint32_t g = warp * 2u; g < count; g += MK_BLOCK_WARPS * 2u)
            mk_matvec_residual_rows(w, xs, out, r0, count, g, 2);
    } else {
        for (uint32_t g = warp; g < count; g += MK_BLOCK_WARPS) mk_matvec_residual_rows(w, xs, out, r0, count, g, 1);
    }
}

__device__ void mk_op_matvec_residual(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    struct mk_wdesc w = mk_weight(c, in->weight[0]);
    const uint32_t rpt = in->args.matvec.rows_per_task;
    float *xs = c->smem, *scratch = xs + mk_layout_align4(w.cols);
    if (in->buf[2] != MK_NO_BUF && mk_layout_is_block_format(w.dtype)) {
        /* The producer wrote x as int8 levels: its quants over xs, its groups where the stages go. */
        const struct mk_xq8 xq =
            mk_block_load_xq(mk_arena(c) + in->buf[2], w.cols, (int8_t *)xs, scratch + mk_layout_align4(rpt));
        mk_matvec_residual_tile(c, &w, xs, rpt, scratch, &xq);
        return;
    }
    mk_block_load(xs, mk_arena(c) + in->buf[0], w.cols);
    mk_matvec_residual_tile(c, &w, xs, rpt, scratch, NULL);
}

#endif
