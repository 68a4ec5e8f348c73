/* MK_OP_ATTN_PARTIAL: one head over one block of positions, as (o, m, l) for the combine step. */
#ifndef MK_OP_ATTN_PARTIAL_CUH
#define MK_OP_ATTN_PARTIAL_CUH

#include "megakernel/common.cuh"

__device__ void mk_op_attn_partial(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const uint32_t bs = in->p[0], nb = in->p[1], layer = in->p[2];
    const uint32_t n_head = in->p[3], n_head_kv = in->p[4], hd = in->p[5];
    const uint32_t h = c->t / nb, b = c->t % nb;
    const int32_t pos = c->cmd->pos;
    if (pos < 0 || (uint32_t)pos >= c->a->n_ctx) mk_device_fail(c->a, MK_DEVERR_BAD_POS, (uint32_t)pos);
    const uint32_t start = b * bs;
    const uint32_t end = min(start + bs, (uint32_t)pos + 1u);
    float *out = mk_arena(c) + in->buf[1] + (uint64_t)(h * nb + b) * (hd + 2u);
    if (start >= end) {
        for (uint32_t d = threadIdx.x; d < hd; d += MK_BLOCK_THREADS) out[d] = 0.0f;
        if (threadIdx.x == 0) {
            out[hd] = -INFINITY;
            out[hd + 1] = 0.0f;
        }
        return;
    }
    const uint32_t n = end - start;
    float *qs = c->smem;
    float *sc = qs + mk_layout_align4(hd);        /* (n) scores, then weights */
    float *red = sc + mk_layout_align4(bs);       /* (MK_BLOCK_THREADS) partial sums of o */
    const float *q = mk_arena(c) + in->buf[0] + (uint64_t)h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += MK_BLOCK_THREADS) qs[d] = __ldcg(q + d);
    __syncthreads();

    const uint32_t kv_dim = c->a->kv_dim;
    const uint32_t kvh = h / (n_head / n_head_kv);
    const uint64_t base = (uint64_t)layer * c->a->n_ctx * kv_dim + (uint64_t)kvh * hd;
    const float *kb = (const float *)c->a->k_cache + base;
    const float *vb = (const float *)c->a->v_cache + base;
    const float scale = 1.0f / sqrtf((float)hd);
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (uint32_t j = warp; j < n; j += MK_BLOCK_WARPS) {
        const float *k = kb + (uint64_t)(start + j) * kv_dim;
        float s = 0.0f;
        for (uint32_t d = lane; d < hd; d += 32u) s += qs[d] * __ldcg(k + d);
        s = mk_warp_sum(s);
        if (lane == 0) sc[j] = s * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (uint32_t j = threadIdx.x; j < n; j += MK_BLOCK_THREADS) m = fmaxf(m, sc[j]);
    m = mk_block_max(m);
    float l = 0.0f;
    for (uint32_t j = threadIdx.x; j < n; j += MK_BLOCK_THREADS) {
        float p = expf(sc[j] - m);
        sc[j] = p;
        l += p;
    }
    l = mk_block_sum(l); /* its barriers also publish sc */

    const uint32_t groups = MK_BLOCK_THREADS / hd; /* hd <= MK_MAX_HEAD_DIM = MK_BLOCK_THREADS */
    const uint32_t g = threadIdx.x / hd, d = threadIdx.x % hd;
    float acc = 0.0f;
    if (g < groups)
        for (uint32_t j = g; j < n; j += groups) acc += sc[j] * __ldcg(vb + (uint64_t)(start + j) * kv_dim + d);
    red[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x < hd) {
        float o = 0.0f;
        for (uint32_t k = 0; k < groups; k++) o += red[k * hd + threadIdx.x];
        out[threadIdx.x] = o;
    }
    if (threadIdx.x == 0) {
        out[hd] = m;
        out[hd + 1] = l;
    }
}

#endif
