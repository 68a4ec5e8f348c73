/* MK_OP_ATTN_COMBINE: merges the (o, m, l) splits of one head into its attention output, and its int8-level copy. */
#ifndef MK_OP_ATTN_COMBINE_CUH
#define MK_OP_ATTN_COMBINE_CUH

#include "megakernel/common.cuh"

/* Merges the nb splits of heads h .. h + nh (partials at part, (nh, nb, hd + 2), contiguous) into
 * out (nh * hd floats) and, with xq (head_dim a multiple of 32), into the int8-level copy of the
 * n_head * hd attention vector. The heads' partials come into shared memory in one round of
 * independent loads: read split by split (or head by head), each a dependent L2 round trip, they
 * cost microseconds per layer. */
__device__ void mk_attn_combine_heads(const struct mk_task_ctx *c, const float *part, uint32_t nb, uint32_t hd,
                                      uint32_t h, uint32_t nh, uint32_t n_head, float *out, float *xq) {
    const uint32_t w = hd + 2u, n = nh * hd;
    float *ps = c->smem; /* (nh, nb, hd + 2) */
    for (uint32_t i = threadIdx.x; i < nh * nb * w; i += MK_BLOCK_THREADS) ps[i] = __ldcg(part + i);
    __syncthreads();
    /* With a copy to write, whole warps run each pass: a warp's 32 elements are one group of it
     * (one head's, as head_dim is a multiple of 32). */
    for (uint32_t i0 = 0; i0 < n; i0 += MK_BLOCK_THREADS) {
        const uint32_t i = i0 + threadIdx.x;
        if (xq ? i0 + (threadIdx.x & ~31u) >= n : i >= n) break;
        const float *ph = ps + (i / hd) * nb * w;
        const uint32_t d = i % hd;
        float mx = -INFINITY;
        for (uint32_t b = 0; b < nb; b++) mx = fmaxf(mx, ph[b * w + hd]);
        float num = 0.0f, den = 0.0f;
        for (uint32_t b = 0; b < nb; b++) {
            const float *pb = ph + b * w;
            if (pb[hd] == -INFINITY) continue; /* an empty split */
            const float e = expf(pb[hd] - mx);
            num += pb[d] * e;
            den += pb[hd + 1u] * e;
        }
        const float v = num / den;
        out[i] = v;
        if (xq) mk_warp_store_xq(v, (h * hd + i0) / 32u + (threadIdx.x >> 5), n_head * hd, xq);
    }
    __syncthreads(); /* ps is read above by every thread */
}

__device__ void mk_op_attn_combine(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const uint32_t nb = in->args.combine.n_blocks, hd = in->args.combine.head_dim, h = c->t;
    mk_attn_combine_heads(c, mk_arena(c) + in->buf[0] + (uint64_t)h * nb * (hd + 2u), nb, hd, h, 1u,
                          in->args.combine.n_head, mk_arena(c) + in->buf[1] + (uint64_t)h * hd,
                          in->buf[2] != MK_NO_BUF ? mk_arena(c) + in->buf[2] : NULL);
}

#endif
