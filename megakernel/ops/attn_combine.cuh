/* MK_OP_ATTN_COMBINE: merges the (o, m, l) splits of one head into its attention output, and its int8-level copy. */
#ifndef MK_OP_ATTN_COMBINE_CUH
#define MK_OP_ATTN_COMBINE_CUH

#include "megakernel/common.cuh"

/* Merges, for each of nh heads, ns (o, m, l) rows of hd + 2 floats in shared memory (head h's row of
 * split s at rows + h * hs + s * ss) into out (nh * hd floats) and, with xq, into the int8-level
 * copy of the n_head * hd attention vector, whose head h0 is out's first (nh * hd then a multiple of
 * 32: whole warps run each pass, a warp's 32 elements one group of the copy). A row of no positions
 * (m = -inf, o = l = 0) weighs 0. fac: ns * nh floats of shared memory for the rows' weights,
 * computed once rather than per element. The splits of an ATTN_COMBINE and the warps of a split
 * of mk_attn_warps that writes the output itself (attn_partial.cuh) both end here: the same sums in
 * the same order.
 * Out of line and its loops over the splits not unrolled: one copy for every path that merges, 7 KB.
 * Unrolled it was 14 KB and llama-1b's token 2-3 % slower (run135, BENCHMARKS.md, thirty-eighth
 * session). */
__device__ __noinline__ void mk_attn_merge_rows(const float *rows, uint32_t ns, uint32_t ss, uint32_t hs, uint32_t nh,
                                                uint32_t hd, float *fac, float *out, float *xq, uint32_t h0,
                                                uint32_t n_head) {
    for (uint32_t i = threadIdx.x; i < ns * nh; i += MK_BLOCK_THREADS) {
        const uint32_t h = i % nh, s = i / nh;
        float mx = -INFINITY;
#pragma unroll 1
        for (uint32_t k = 0; k < ns; k++) mx = fmaxf(mx, rows[h * hs + k * ss + hd]);
        const float m = rows[h * hs + s * ss + hd];
        fac[i] = m == -INFINITY ? 0.0f : expf(m - mx);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < nh * hd; i += MK_BLOCK_THREADS) {
        const uint32_t h = i / hd, e = i % hd;
        float num = 0.0f, den = 0.0f;
#pragma unroll 1
        for (uint32_t s = 0; s < ns; s++) {
            const float f = fac[s * nh + h], *row = rows + h * hs + s * ss;
            num += row[e] * f;
            den += row[hd + 1u] * f;
        }
        const float v = num / den;
        out[i] = v;
        if (xq) mk_warp_store_xq(v, (h0 * hd + i) / 32u, n_head * hd, xq);
    }
}

/* Merges splits 0 .. ns of heads h .. h + nh (partials at part, (nh, nb, hd + 2), contiguous; the
 * splits from ns on hold no positions) into out (nh * hd floats) and, with xq (head_dim a multiple
 * of 32), into the int8-level copy of the n_head * hd attention vector. The heads' partials come
 * into shared memory in one round of independent loads: read split by split (or head by head),
 * each a dependent L2 round trip, they cost microseconds per layer. Shared memory:
 * mk_layout_attn_merge_words(nh, nb, hd). */
__device__ void mk_attn_combine_heads(const struct mk_task_ctx *c, const float *part, uint32_t nb, uint32_t ns,
                                      uint32_t hd, uint32_t h, uint32_t nh, uint32_t n_head, float *out, float *xq) {
    const uint32_t w = hd + 2u, rw = ns * w, skip = (nb - ns) * w;
    float *ps = c->smem; /* (nh, ns, hd + 2), then the weights (ns, nh) */
    for (uint32_t i = threadIdx.x; i < nh * rw; i += MK_BLOCK_THREADS) ps[i] = __ldcg(part + i + i / rw * skip);
    __syncthreads();
    mk_attn_merge_rows(ps, ns, w, rw, nh, hd, ps + nh * rw, out, xq, h, n_head);
    __syncthreads(); /* ps is read above by every thread */
}

__device__ void mk_op_attn_combine(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const uint32_t nb = in->args.combine.n_blocks, hd = in->args.combine.head_dim, h = c->t;
    mk_attn_combine_heads(c, mk_arena(c) + in->buf[0] + (uint64_t)h * nb * (hd + 2u), nb, nb, hd, h, 1u,
                          in->args.combine.n_head, mk_arena(c) + in->buf[1] + (uint64_t)h * hd,
                          in->buf[2] != MK_NO_BUF ? mk_arena(c) + in->buf[2] : NULL);
}

#endif
