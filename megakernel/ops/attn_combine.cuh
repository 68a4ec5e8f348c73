/* MK_OP_ATTN_COMBINE: merges the (o, m, l) splits of one head into its attention output, and its int8-level copy. */
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
    /* With a copy to write (buf2; head_dim a multiple of 32), whole warps run each pass: a warp's 32
     * elements are one group of it. */
    const bool xq = in->buf[2] != MK_NO_BUF;
    for (uint32_t d0 = 0; d0 < hd; d0 += MK_BLOCK_THREADS) {
        const uint32_t d = d0 + threadIdx.x;
        if (xq ? d0 + (threadIdx.x & ~31u) >= hd : d >= hd) break;
        float num = 0.0f, den = 0.0f;
        for (uint32_t b = 0; b < nb; b++) {
            const float *pb = ps + b * w;
            if (pb[hd] == -INFINITY) continue; /* an empty split */
            const float e = expf(pb[hd] - mx);
            num += pb[d] * e;
            den += pb[hd + 1u] * e;
        }
        const float v = num / den;
        out[d] = v;
        if (xq)
            mk_warp_store_xq(v, (h * hd + d0) / 32u + (threadIdx.x >> 5), in->args.combine.n_head * hd,
                             mk_arena(c) + in->buf[2]);
    }
    __syncthreads(); /* ps is read above by every thread */
}

#endif
