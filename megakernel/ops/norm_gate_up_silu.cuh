/* MK_OP_NORM_GATE_UP_SILU: RMSNorm, then silu(gate . xn) * (up . xn) for the task's FFN rows. */
#ifndef MK_OP_NORM_GATE_UP_SILU_CUH
#define MK_OP_NORM_GATE_UP_SILU_CUH

#include "megakernel/common.cuh"

__device__ __forceinline__ void mk_gate_up_rows(const struct mk_wdesc *gw, const struct mk_wdesc *uw, bool vec,
                                                const float *xs, float *hb, float *hs, uint32_t r0, uint32_t count,
                                                uint32_t g, const int R) {
    /* R rows of gate then the same R rows of up, in one pass over xs. */
    const uint8_t *rows[4];
    float acc[4];
#pragma unroll
    for (int r = 0; r < R; r++) {
        uint32_t row = r0 + min(g + (uint32_t)r, count - 1u);
        rows[r] = mk_row(gw, row);
        rows[R + r] = mk_row(uw, row);
    }
    if (gw->dtype == uw->dtype) {
        mk_dot_rows(rows, 2 * R, gw->dtype, vec, gw->cols, xs, acc);
    } else {
        mk_dot_rows(rows, R, gw->dtype, vec, gw->cols, xs, acc);
        mk_dot_rows(rows + R, R, uw->dtype, vec, uw->cols, xs, acc + R);
    }
    if ((threadIdx.x & 31u) == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (g + (uint32_t)r < count) {
                float gate = acc[r], up = acc[R + r];
                hs[g + r] = hb[r0 + g + r] = gate / (1.0f + expf(-gate)) * up;
            }
        }
    }
}

__device__ __forceinline__ void mk_op_norm_gate_up_silu(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    struct mk_wdesc gw = mk_weight(c, in->weight[1]);
    struct mk_wdesc uw = mk_weight(c, in->weight[2]);
    float *xs = c->smem;
    const struct mk_args_norm_matvec *ga = &in->args.gate_up;
    float *res = xs + mk_layout_align4(gw.cols);
    uint8_t *stage = (uint8_t *)(res + mk_layout_align4(2u * ga->rows_per_task));
    const int blocks = mk_layout_is_block_format(gw.dtype) + mk_layout_is_block_format(uw.dtype);
    struct mk_xq8 xq;
    const bool pre = mk_block_norm_input(c, xs, mk_arena(c) + in->buf[0], gw.cols, in->weight[0], ga->eps, blocks != 1,
                                         blocks == 2 ? (float *)stage : NULL, &xq);
    uint32_t r0 = c->t * ga->rows_per_task;
    if (r0 >= gw.rows) return;
    uint32_t count = min(ga->rows_per_task, gw.rows - r0);
    float *hb = mk_arena(c) + in->buf[1];
    if (blocks) {
        struct mk_qseg seg[2] = { mk_qseg_make(&gw, r0, count, 0u), mk_qseg_make(&uw, r0, count, count) };
        mk_qrows(seg, 2u, xs, res, stage, pre ? &xq : NULL);
        for (uint32_t i = threadIdx.x; i < count; i += MK_BLOCK_THREADS) {
            float gate = res[i];
            res[i] = hb[r0 + i] = gate / (1.0f + expf(-gate)) * res[count + i]; /* in place: its own i */
        }
    } else {
        const bool vec = gw.vec && uw.vec;
        const uint32_t warp = threadIdx.x >> 5;
        if (count >= 2u * MK_BLOCK_WARPS) {
            for (uint32_t g = warp * 2u; g < count; g += MK_BLOCK_WARPS * 2u)
                mk_gate_up_rows(&gw, &uw, vec, xs, hb, res, r0, count, g, 2);
        } else {
            for (uint32_t g = warp; g < count; g += MK_BLOCK_WARPS)
                mk_gate_up_rows(&gw, &uw, vec, xs, hb, res, r0, count, g, 1);
        }
    }
    /* res holds the task's rows of hb either way: quantized from shared memory, not read back. */
    if (in->buf[2] != MK_NO_BUF) mk_block_store_xq(res, r0, count, gw.rows, mk_arena(c) + in->buf[2]);
}

#endif
