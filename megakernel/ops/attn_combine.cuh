/* MK_OP_ATTN_COMBINE: merges the (o, m, l) splits of one head into its attention output. */
#ifndef MK_OP_ATTN_COMBINE_CUH
#define MK_OP_ATTN_COMBINE_CUH

#include "megakernel/common.cuh"

/* The head's partials come into shared memory in one round of independent loads: read split by
 * split, each a dependent L2 round trip, they cost microseconds per layer. */
__device__ void mk_op_attn_combine(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const uint32_t nb = in->args.combine.n_blocks, hd = in->args.combine.head_dim, w = hd + 2u;
    const uint32_t h = c->t;
    const float *part = mk_arena(c) + in->buf[0] + (uint64_t)h * nb * w;
    float *out = mk_arena(c) + in->buf[1] + (uint64_t)h * hd;
    float *ps = c->smem; /* (nb, hd + 2) */
    for (uint32_t i = threadIdx.x; i < nb * w; i += MK_BLOCK_THREADS) ps[i] = __ldcg(part + i);
    __syncthreads();
    float mx = -INFINITY;
    for (uint32_t b = 0; b < nb; b++) mx = fmaxf(mx, ps[b * w + hd]);
    for (uint32_t d = threadIdx.x; d < hd; d += MK_BLOCK_THREADS) {
        float num = 0.0f, den = 0.0f;
        for (uint32_t b = 0; b < nb; b++) {
            const float *pb = ps + b * w;
            if (pb[hd] == -INFINITY) continue; /* an empty split */
            const float e = expf(pb[hd] - mx);
            num += pb[d] * e;
            den += pb[hd + 1u] * e;
        }
        out[d] = num / den;
    }
    __syncthreads(); /* ps is read above by every thread */
}

#endif
