/* mk_chunk_attn: causal attention of a chunk step's token rows over the KV cache, one block per (query head, token row). */
#ifndef MK_CHUNK_ATTN_CUH
#define MK_CHUNK_ATTN_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/rows.cuh"

/* Lanes hold head dimensions lane, lane + 32, ... (head_dim <= MK_MAX_HEAD_DIM = 8 * 32). */
#define MK_CATTN_DIMS (MK_MAX_HEAD_DIM / 32u)

/* Block (h, i): head h of token row i (position pos + i) over positions [0, pos + i]. Each warp
 * takes 32 positions at a time, a lane scoring one, and keeps a running maximum, sum and output;
 * the warps' parts are merged at the end. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_attn(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    __shared__ __align__(16) float qs[MK_MAX_HEAD_DIM];
    __shared__ float wm[MK_BLOCK_WARPS], wl[MK_BLOCK_WARPS];
    __shared__ float wo[MK_BLOCK_WARPS][MK_MAX_HEAD_DIM];
    const struct mk_instr *in = (const struct mk_instr *)a.instrs + l.ii;
    const struct mk_args_attn at = in->args.attn;
    const uint32_t h = blockIdx.x, i = blockIdx.y, hd = at.head_dim, lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const uint32_t q_dim = at.n_head * hd, kvh = h / (at.n_head / at.n_head_kv);
    const uint32_t last = (uint32_t)mk_chunk_cmd(&a)->pos + i;
    const float *q = (const float *)a.arena + in->buf[0] + (uint64_t)i * q_dim + h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += MK_BLOCK_THREADS) qs[d] = __ldcg(q + d);
    __syncthreads();
    const uint64_t layer0 = (uint64_t)at.layer * a.n_ctx;
    const float *kc = (const float *)a.k_cache + kvh * hd, *vc = (const float *)a.v_cache + kvh * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, lsum = 0.0f, o[MK_CATTN_DIMS];
#pragma unroll
    for (uint32_t k = 0; k < MK_CATTN_DIMS; k++) o[k] = 0.0f;
    for (uint32_t base = warp * 32u; base <= last; base += MK_BLOCK_THREADS) {
        const uint32_t p = base + lane;
        float s = -INFINITY;
        if (p <= last) {
            const float4 *kr = (const float4 *)(kc + (layer0 + p) * a.kv_dim);
            float acc = 0.0f;
            for (uint32_t d4 = 0; d4 < hd / 4u; d4++) {
                const float4 kv = __ldcg(kr + d4);
                const float4 qv = *(const float4 *)(qs + 4u * d4);
                acc += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
            }
            s = acc * scale;
        }
        const float mn = fmaxf(m, mk_warp_max(s)); /* finite: position base <= last */
        const float corr = expf(m - mn), pr = p <= last ? expf(s - mn) : 0.0f;
        lsum = lsum * corr + mk_warp_sum(pr);
#pragma unroll
        for (uint32_t k = 0; k < MK_CATTN_DIMS; k++) o[k] *= corr;
        const uint32_t n = min(32u, last + 1u - base);
        for (uint32_t j = 0; j < n; j++) {
            const float pj = __shfl_sync(0xffffffffu, pr, j);
            const float *vr = vc + (layer0 + base + j) * a.kv_dim;
#pragma unroll
            for (uint32_t k = 0; k < MK_CATTN_DIMS; k++)
                if (lane + 32u * k < hd) o[k] = fmaf(pj, __ldcg(vr + lane + 32u * k), o[k]);
        }
        m = mn;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = lsum;
    }
#pragma unroll
    for (uint32_t k = 0; k < MK_CATTN_DIMS; k++)
        if (lane + 32u * k < hd) wo[warp][lane + 32u * k] = o[k];
    __syncthreads();
    float M = -INFINITY;
    for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++) M = fmaxf(M, wm[w]);
    float L = 0.0f;
    for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++) L += wm[w] == -INFINITY ? 0.0f : wl[w] * expf(wm[w] - M);
    float *out = (float *)a.arena + in->buf[1] + (uint64_t)i * q_dim + h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += MK_BLOCK_THREADS) {
        float acc = 0.0f;
        for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++)
            if (wm[w] != -INFINITY) acc += wo[w][d] * expf(wm[w] - M);
        out[d] = acc / L;
    }
}

#endif
