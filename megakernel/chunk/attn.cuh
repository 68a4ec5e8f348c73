/* mk_chunk_attn: causal attention of a chunk step's token rows over the KV cache, one block per (KV head, tile of token rows), K and V staged in shared memory for all of them. */
#ifndef MK_CHUNK_ATTN_CUH
#define MK_CHUNK_ATTN_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/rows.cuh"

/* Lanes hold head dimensions lane, lane + 32, ... (head_dim <= MK_MAX_HEAD_DIM = 8 * 32). */
#define MK_CATTN_DIMS (MK_MAX_HEAD_DIM / 32u)

/* The output rows are split rows (chunk.h). Block (kvh, y): the query rows of KV head kvh's g query heads for token rows
 * [y * T, y * T + T), T = mk_chunk_attn_tokens(g): MK_CHUNK_ATTN_ROWS rows of (head, token), each
 * warp MK_CHUNK_ATTN_ROWS / 8 of them. Positions go by in tiles of MK_CHUNK_ATTN_KEYS, K and V
 * rows copied into shared memory once for every query row of the block; a lane scores one
 * position of the tile per row, and the rows keep a running maximum, sum and output (lane holds
 * dimensions lane + 32 k, k < D). Dynamic shared memory: mk_chunk_attn_smem(head_dim). */
template <int D>
__device__ __forceinline__ void mk_chunk_attn_body(const struct mk_kernel_args &a, const struct mk_chunk_launch &l) {
    constexpr uint32_t RW = MK_CHUNK_ATTN_ROWS / MK_BLOCK_WARPS, KT = MK_CHUNK_ATTN_KEYS;
    const struct mk_instr *in = (const struct mk_instr *)a.instrs + l.ii;
    const struct mk_args_attn at = in->args.attn;
    const uint32_t hd = at.head_dim, g = at.n_head / at.n_head_kv, T = mk_chunk_attn_tokens(g);
    const uint32_t kvh = blockIdx.x, t0 = blockIdx.y * T, lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    /* K rows hd + 4 apart: 16-byte aligned, and the float4 reads of 8 lanes (a quarter warp) fall
     * on distinct banks; V rows are read across lanes, any stride is conflict-free. */
    const uint32_t q_dim = at.n_head * hd, ld = hd + 4u;
    const int32_t pos = mk_chunk_cmd(&a)->pos;
    float *qs = (float *)mk_chunk_smem;       /* (ROWS, hd) */
    float *ks = qs + MK_CHUNK_ATTN_ROWS * hd; /* (KT, hd + 4) */
    float *vs = ks + KT * ld;                 /* (KT, hd + 4) */
    const uint32_t n_rows = g * T, n_tok = min(T, l.m - t0);

    /* Row r of the block is query head kvh * g + r / T at token row t0 + r % T. */
    for (uint32_t k = threadIdx.x; k < MK_CHUNK_ATTN_ROWS * hd; k += MK_BLOCK_THREADS) {
        const uint32_t r = k / hd, d = k % hd, it = r % T;
        float v = 0.0f;
        if (r < n_rows && it < n_tok)
            v = __ldcg((const float *)a.arena + in->buf[0] + (uint64_t)(t0 + it) * q_dim + (kvh * g + r / T) * hd + d);
        qs[k] = v;
    }
    uint32_t last[RW]; /* each row's last position */
    float m[RW], lsum[RW], o[RW][D];
#pragma unroll
    for (uint32_t w = 0; w < RW; w++) {
        const uint32_t r = warp * RW + w;
        last[w] = (uint32_t)pos + t0 + min(r % T, n_tok - 1u);
        m[w] = -INFINITY;
        lsum[w] = 0.0f;
#pragma unroll
        for (int k = 0; k < D; k++) o[w][k] = 0.0f;
    }
    /* Split z of l.splits (grid z): whole key tiles [ps, pe) of the block's positions [0, end). */
    const uint32_t end = (uint32_t)pos + t0 + n_tok, splits = l.splits > 1u ? l.splits : 1u;
    const uint32_t span = (end + KT * splits - 1u) / (KT * splits) * KT, ps = min(end, blockIdx.z * span),
                   pe = min(end, ps + span);
    const uint64_t layer0 = (uint64_t)at.layer * a.n_ctx;
    const bool f16 = a.kv_type == MK_KV_F16;
    const float scale = 1.0f / sqrtf((float)hd);
    const uint32_t hd4 = hd / 4u;
    for (uint32_t p0 = ps; p0 < pe; p0 += KT) {
        __syncthreads(); /* the previous tile is consumed (and qs written, the first time) */
        const uint32_t nk = min(KT, pe - p0);
        for (uint32_t k = threadIdx.x; k < KT * hd4; k += MK_BLOCK_THREADS) {
            const uint32_t j = k / hd4, d = 4u * (k % hd4);
            const uint64_t off = (layer0 + p0 + min(j, nk - 1u)) * a.kv_dim + kvh * hd + d;
            *(float4 *)(ks + j * ld + d) =
                f16 ? mk_kv_ldcg4((const __half *)a.k_cache + off) : mk_kv_ldcg4((const float *)a.k_cache + off);
            *(float4 *)(vs + j * ld + d) =
                f16 ? mk_kv_ldcg4((const __half *)a.v_cache + off) : mk_kv_ldcg4((const float *)a.v_cache + off);
        }
        __syncthreads();
        float s[RW];
#pragma unroll
        for (uint32_t w = 0; w < RW; w++) s[w] = 0.0f;
        const float *kr = ks + lane * ld;
        const float *qw = qs + warp * RW * hd;
        for (uint32_t d = 0; d < hd; d += 4u) {
            const float4 kv = *(const float4 *)(kr + d);
#pragma unroll
            for (uint32_t w = 0; w < RW; w++) {
                const float4 qv = *(const float4 *)(qw + w * hd + d);
                s[w] = fmaf(qv.x, kv.x, fmaf(qv.y, kv.y, fmaf(qv.z, kv.z, fmaf(qv.w, kv.w, s[w]))));
            }
        }
        const uint32_t p = p0 + lane;
        float pr[RW];
#pragma unroll
        for (uint32_t w = 0; w < RW; w++) {
            const float sc = p <= last[w] && lane < nk ? s[w] * scale : -INFINITY;
            /* -inf while a split has met none of the row's positions (only split 0 is sure to). */
            const float mn = fmaxf(m[w], mk_warp_max(sc));
            const float corr = mn == -INFINITY ? 1.0f : expf(m[w] - mn);
            pr[w] = sc == -INFINITY ? 0.0f : expf(sc - mn);
            lsum[w] = lsum[w] * corr + mk_warp_sum(pr[w]);
            m[w] = mn;
#pragma unroll
            for (int k = 0; k < D; k++) o[w][k] *= corr;
        }
        for (uint32_t j = 0; j < nk; j++) {
            float vv[D];
#pragma unroll
            for (int k = 0; k < D; k++) vv[k] = lane + 32u * k < hd ? vs[j * ld + lane + 32u * k] : 0.0f;
#pragma unroll
            for (uint32_t w = 0; w < RW; w++) {
                const float pj = __shfl_sync(0xffffffffu, pr[w], j);
#pragma unroll
                for (int k = 0; k < D; k++) o[w][k] = fmaf(pj, vv[k], o[w][k]);
            }
        }
    }
    if (splits > 1u) {
        /* The split's (o, m, l) of each row for mk_chunk_attn_merge, at y_off + ((z * n_head_kv +
         * kvh) * gridDim.y + y) * ROWS * (hd + 2) + r * (hd + 2). */
        float *part =
            (float *)a.arena + l.y_off +
            ((uint64_t)(blockIdx.z * gridDim.x + kvh) * gridDim.y + blockIdx.y) * MK_CHUNK_ATTN_ROWS * (hd + 2u);
#pragma unroll
        for (uint32_t w = 0; w < RW; w++) {
            float *pr = part + (warp * RW + w) * (hd + 2u);
#pragma unroll
            for (int k = 0; k < D; k++)
                if (lane + 32u * k < hd) pr[lane + 32u * k] = o[w][k];
            if (lane == 0) {
                pr[hd] = m[w];
                pr[hd + 1u] = lsum[w];
            }
        }
        return;
    }
#pragma unroll
    for (uint32_t w = 0; w < RW; w++) {
        const uint32_t r = warp * RW + w, it = r % T;
        if (r >= n_rows || it >= n_tok) continue;
        float *out = (float *)a.arena + in->buf[1] + (uint64_t)(t0 + it) * q_dim;
        const uint32_t c0 = (kvh * g + r / T) * hd;
        const float inv = 1.0f / lsum[w];
#pragma unroll
        for (int k = 0; k < D; k++)
            if (lane + 32u * k < hd) mk_split_store(out, q_dim, c0 + lane + 32u * k, o[w][k] * inv);
    }
}

/* The body for the head size: each lane holds ceil(head_dim / 32) output dimensions. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_attn(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait();
    const uint32_t hd = ((const struct mk_instr *)a.instrs + l.ii)->args.attn.head_dim;
    if (hd <= 32u)
        mk_chunk_attn_body<1>(a, l);
    else if (hd <= 64u)
        mk_chunk_attn_body<2>(a, l);
    else if (hd <= 128u)
        mk_chunk_attn_body<4>(a, l);
    else
        mk_chunk_attn_body<MK_CATTN_DIMS>(a, l);
}

/* Block (kvh, y) of the attention's grid: each of its rows' splits (mk_chunk_attn with l.splits
 * > 1, partials at l.x_off) merged in split order into the row's output. One warp per row. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_attn_merge(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait();
    const struct mk_instr *in = (const struct mk_instr *)a.instrs + l.ii;
    const struct mk_args_attn at = in->args.attn;
    const uint32_t hd = at.head_dim, g = at.n_head / at.n_head_kv, T = mk_chunk_attn_tokens(g);
    const uint32_t kvh = blockIdx.x, t0 = blockIdx.y * T, lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const uint32_t q_dim = at.n_head * hd, n_rows = g * T, n_tok = min(T, l.m - t0), row_f = hd + 2u;
    const uint64_t zstride = (uint64_t)gridDim.x * gridDim.y * MK_CHUNK_ATTN_ROWS * row_f;
    const float *base =
        (const float *)a.arena + l.x_off + ((uint64_t)kvh * gridDim.y + blockIdx.y) * MK_CHUNK_ATTN_ROWS * row_f;
    for (uint32_t r = warp; r < MK_CHUNK_ATTN_ROWS; r += MK_BLOCK_WARPS) {
        const uint32_t it = r % T;
        if (r >= n_rows || it >= n_tok) continue;
        const float *pr = base + r * row_f;
        float M = -INFINITY;
        for (uint32_t z = 0; z < l.splits; z++) M = fmaxf(M, __ldcg(pr + z * zstride + hd));
        float L = 0.0f;
        for (uint32_t z = 0; z < l.splits; z++) {
            const float mz = __ldcg(pr + z * zstride + hd);
            if (mz != -INFINITY) L += __ldcg(pr + z * zstride + hd + 1u) * expf(mz - M);
        }
        float *out = (float *)a.arena + in->buf[1] + (uint64_t)(t0 + it) * q_dim;
        const uint32_t c0 = (kvh * g + r / T) * hd;
        for (uint32_t d = lane; d < hd; d += 32u) {
            float acc = 0.0f;
            for (uint32_t z = 0; z < l.splits; z++) {
                const float mz = __ldcg(pr + z * zstride + hd);
                if (mz != -INFINITY) acc += __ldcg(pr + z * zstride + d) * expf(mz - M);
            }
            mk_split_store(out, q_dim, c0 + d, acc / L);
        }
    }
}

#endif
