/* MK_OP_ATTN_OUTPUT: every task merges the attention's sequence blocks itself, then runs its rows
 * of the attention-output matvec with the residual add, saving a separate combine op and its wait. */
#ifndef MK_OP_ATTN_OUTPUT_CUH
#define MK_OP_ATTN_OUTPUT_CUH

#include "megakernel/common.cuh"
#include "megakernel/ops/matvec_residual.cuh"

/* Elements of the attention vector each thread merges with independent loads in flight. */
#define MK_ATTN_OUT_PER_THREAD 16

__device__ void mk_op_attn_output(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const struct mk_args_attn_out *ao = &in->args.attn_out;
    const uint32_t nb = ao->n_blocks, bs = ao->block, nh = ao->n_head, hd = ao->head_dim, n = nh * hd;
    struct mk_wdesc w = mk_weight(c, in->weight[0]);
    /* Splits past the position are empty: only the live ones count. */
    const uint32_t live = mk_attn_live((uint32_t)c->cmd->pos, bs, nb, ao->solo);
    const float *part = mk_arena(c) + in->buf[0];
    float *xs = c->smem;                       /* (n) the attention vector */
    float *ms = c->smem + mk_layout_align4(n); /* (nh, live) block maxima, then weights */
    float *ls = ms + nh * nb;                  /* (nh, live) block sums */
    for (uint32_t i = threadIdx.x; i < nh * live; i += MK_BLOCK_THREADS) {
        const float *pb = part + ((uint64_t)(i / live) * nb + i % live) * (hd + 2u);
        ms[i] = __ldcg(pb + hd);
        ls[i] = __ldcg(pb + hd + 1u);
    }
    __syncthreads();
    /* Each block's weight in its head's softmax: e^(m_b - M) / sum_b' l_b' e^(m_b' - M). */
    for (uint32_t h = threadIdx.x; h < nh; h += MK_BLOCK_THREADS) {
        float mx = -INFINITY, den = 0.0f;
        for (uint32_t b = 0; b < live; b++) mx = fmaxf(mx, ms[h * live + b]);
        for (uint32_t b = 0; b < live; b++)
            if (ls[h * live + b] != 0.0f) den += ls[h * live + b] * expf(ms[h * live + b] - mx);
        for (uint32_t b = 0; b < live; b++)
            ms[h * live + b] = ls[h * live + b] != 0.0f ? expf(ms[h * live + b] - mx) / den : 0.0f;
    }
    __syncthreads();
    for (uint32_t e0 = 0; e0 < n; e0 += MK_ATTN_OUT_PER_THREAD * MK_BLOCK_THREADS) {
        float acc[MK_ATTN_OUT_PER_THREAD];
#pragma unroll
        for (int k = 0; k < MK_ATTN_OUT_PER_THREAD; k++) acc[k] = 0.0f;
        for (uint32_t b = 0; b < live; b++) {
#pragma unroll
            for (int k = 0; k < MK_ATTN_OUT_PER_THREAD; k++) {
                const uint32_t e = e0 + threadIdx.x + (uint32_t)k * MK_BLOCK_THREADS, h = e / hd;
                if (e < n)
                    acc[k] += __ldcg(part + ((uint64_t)h * nb + b) * (hd + 2u) + (e - h * hd)) * ms[h * live + b];
            }
        }
#pragma unroll
        for (int k = 0; k < MK_ATTN_OUT_PER_THREAD; k++) {
            const uint32_t e = e0 + threadIdx.x + (uint32_t)k * MK_BLOCK_THREADS;
            if (e < n) xs[e] = acc[k];
        }
    }
    __syncthreads();
    mk_matvec_residual_tile(c, &w, xs, ao->rows_per_task, ms + mk_layout_align4(2u * nh * nb), NULL);
}

#endif
