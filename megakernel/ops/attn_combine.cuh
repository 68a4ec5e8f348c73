/* MK_OP_ATTN_COMBINE: merges the (o, m, l) blocks of one head into its attention output. */
#ifndef MK_OP_ATTN_COMBINE_CUH
#define MK_OP_ATTN_COMBINE_CUH

#include "megakernel/common.cuh"

__device__ void mk_op_attn_combine(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const uint32_t nb = in->args.combine.n_blocks, hd = in->args.combine.head_dim;
    const uint32_t h = c->t;
    const float *part = mk_arena(c) + in->buf[0] + (uint64_t)h * nb * (hd + 2u);
    float *out = mk_arena(c) + in->buf[1] + (uint64_t)h * hd;
    float mx = -INFINITY;
    for (uint32_t b = 0; b < nb; b++) mx = fmaxf(mx, __ldcg(part + (uint64_t)b * (hd + 2u) + hd));
    for (uint32_t d = threadIdx.x; d < hd; d += MK_BLOCK_THREADS) {
        float num = 0.0f, den = 0.0f;
        for (uint32_t b = 0; b < nb; b++) {
            const float *pb = part + (uint64_t)b * (hd + 2u);
            float m = __ldcg(pb + hd);
            if (m == -INFINITY) continue; /* an empty block */
            float e = expf(m - mx);
            num += __ldcg(pb + d) * e;
            den += __ldcg(pb + hd + 1u) * e;
        }
        out[d] = num / den;
    }
}

#endif
