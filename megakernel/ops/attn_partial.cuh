/* MK_OP_ATTN_PARTIAL: one head over one block of positions, as (o, m, l) for the combine step. */
#ifndef MK_OP_ATTN_PARTIAL_CUH
#define MK_OP_ATTN_PARTIAL_CUH

#include "megakernel/common.cuh"

/* Positions are taken MK_ATTN_TILE at a time: their K and V rows land in shared memory with one
 * round of parallel loads, instead of one dependent L2 round trip per position. */
__device__ void mk_op_attn_partial(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const struct mk_args_attn *at = &in->args.attn;
    const uint32_t bs = at->block, nb = at->n_blocks, layer = at->layer;
    const uint32_t n_head = at->n_head, n_head_kv = at->n_head_kv, hd = at->head_dim;
    const uint32_t h = c->t / nb, b = c->t % nb;
    const int32_t pos = c->cmd->pos;
    if (pos < 0 || (uint32_t)pos >= c->a->n_ctx) {
        mk_device_fail(c->a, c->fail, MK_DEVERR_BAD_POS, (uint32_t)pos);
        return;
    }
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
    const uint32_t tile = mk_layout_attn_tile(bs), stride = hd + 1u; /* +1: conflict-free columns */
    float *qs = c->smem;                                             /* (hd) */
    float *ks = qs + mk_layout_align4(hd);                           /* (tile, hd + 1) */
    float *vs = ks + tile * stride;                                  /* (tile, hd + 1) */
    float *sc = vs + tile * stride;                                  /* (tile) scores, then weights */
    float *red = sc + mk_layout_align4(tile);                        /* (MK_BLOCK_THREADS) partial sums of o */
    const float *q = mk_arena(c) + in->buf[0] + (uint64_t)h * hd;
    const uint32_t kv_dim = c->a->kv_dim;
    const uint32_t kvh = h / (n_head / n_head_kv);
    const uint64_t base = (uint64_t)layer * c->a->n_ctx * kv_dim + (uint64_t)kvh * hd;
    const float *kb = (const float *)c->a->k_cache + base;
    const float *vb = (const float *)c->a->v_cache + base;
    const float scale = 1.0f / sqrtf((float)hd);
    const uint32_t groups = MK_BLOCK_THREADS / hd; /* hd <= MK_MAX_HEAD_DIM = MK_BLOCK_THREADS */
    const uint32_t g = threadIdx.x / hd, d = threadIdx.x % hd;
    for (uint32_t i = threadIdx.x; i < hd; i += MK_BLOCK_THREADS) qs[i] = __ldcg(q + i);
    float m = -INFINITY, l = 0.0f, o = 0.0f; /* o: this thread's (group g, dim d) share */
    for (uint32_t t0 = start; t0 < end; t0 += tile) {
        const uint32_t n = min(tile, end - t0);
        __syncthreads(); /* the previous tile's readers are done */
        for (uint32_t i = threadIdx.x; i < n * hd; i += MK_BLOCK_THREADS) {
            uint32_t j = i / hd, e = i % hd;
            uint64_t off = (uint64_t)(t0 + j) * kv_dim + e;
            ks[j * stride + e] = __ldcg(kb + off);
            vs[j * stride + e] = __ldcg(vb + off);
        }
        __syncthreads();
        for (uint32_t j = threadIdx.x; j < n; j += MK_BLOCK_THREADS) {
            const float *k = ks + j * stride;
            float s = 0.0f;
            for (uint32_t e = 0; e < hd; e++) s += qs[e] * k[e];
            sc[j] = s * scale;
        }
        __syncthreads();
        float tm = -INFINITY;
        for (uint32_t j = threadIdx.x; j < n; j += MK_BLOCK_THREADS) tm = fmaxf(tm, sc[j]);
        tm = mk_block_max(tm);
        const float m_new = fmaxf(m, tm);
        const float rescale = expf(m - m_new); /* 0 on the first tile (m = -inf) */
        float tl = 0.0f;
        for (uint32_t j = threadIdx.x; j < n; j += MK_BLOCK_THREADS) {
            float p = expf(sc[j] - m_new);
            sc[j] = p;
            tl += p;
        }
        tl = mk_block_sum(tl); /* its barriers also publish sc */
        l = l * rescale + tl;
        m = m_new;
        float acc = 0.0f;
        if (g < groups)
            for (uint32_t j = g; j < n; j += groups) acc += sc[j] * vs[j * stride + d];
        o = o * rescale + acc;
    }
    red[threadIdx.x] = g < groups ? o : 0.0f;
    __syncthreads();
    if (threadIdx.x < hd) {
        float s = 0.0f;
        for (uint32_t k = 0; k < groups; k++) s += red[k * hd + threadIdx.x];
        out[threadIdx.x] = s;
    }
    if (threadIdx.x == 0) {
        out[hd] = m;
        out[hd + 1] = l;
    }
}

#endif
