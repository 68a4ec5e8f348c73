/* mk_chunk_mv_kq8: a chunk step's K-quant products over a few token rows with x as int8 levels, on the one-token megakernel's tensor-core tiles (megakernel/qmma.cuh). */
#ifndef MK_CHUNK_MV8_CUH
#define MK_CHUNK_MV8_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/mv.cuh"

/* mk_chunk_mv_kq decodes each lane's weights to bf16 and scales each group's sums in float: about
 * 60 instructions a 32-column group, which bound it (llama-8b Q4_K_M, a 4-token step: 6.1 ms at
 * 0.75 TB/s, where the one-token megakernel reads the same weights in 3.3 ms). Here x's token rows
 * are quantized once a block into the megakernel's three int8 levels, and a group of 16 weight rows
 * is one integer mma per pair of token rows (Q6_K: per token row) on its quants as they are, as the
 * megakernel's tiles do for one. The grid, the tiles a block takes, the splits and the outputs are
 * mk_chunk_mv_kq's, so the host picks either with the same plan. */

/* Q4_K and Q5_K rows need their blocks 16-byte aligned (mk_qmma_k45_load's 128-bit loads of a
 * header), Q6_K's 2-byte; other rows take no tile here. */
__device__ __forceinline__ uint32_t mk_kq8_kind(const struct mk_wdesc *w) {
    const uint32_t align = (uint32_t)(((uintptr_t)w->ptr | w->row_bytes) & 15u);
    if (w->dtype == MK_DEV_Q4_K && !align) return MK_KQ_4;
    if (w->dtype == MK_DEV_Q5_K && !align) return MK_KQ_5;
    if (w->dtype == MK_DEV_Q6_K && !(align & 1u)) return MK_KQ_6;
    return MK_KQ_NONE;
}

/* x (XS: the split rows of chunk.h; silu(gate) * up from the l.x_parts partials of the SILU product
 * ahead; or the RMSNorm of the residual rows from the tiles' sums, mk_kq8_finish) for the columns
 * of super-blocks [sb0, sb1) as NT token rows of int8
 * levels at xq (token t's group G at 96 (NT G + t)) and their group entries (mk_qmma_xg_pack) at
 * xg (MK_QMMA_XG_BYTES (NT G + t)), by the whole block, four columns a thread: the megakernel's
 * levels and rounding (mk_xq_pack_d), but one scale for each token row's super-block, max|x| / 127
 * over its 256 columns, so that mk_qmma_k45_sbt adds a super-block's groups as integers. The error
 * stays that of float rounding against the super-block's largest value. Token rows from m on and
 * columns outside [kb, ke) are zero (d 0, levels 0), which every tile then multiplies to exactly
 * nothing. */
enum { MK_KQ8_X_SPLIT = 0, MK_KQ8_X_PARTS = 1, MK_KQ8_X_NORM = 2 };
template <uint32_t NT, int XS>
__device__ __forceinline__ void mk_kq8_stage_x(const struct mk_kernel_args &a, const struct mk_chunk_launch &l,
                                               uint32_t m, uint32_t sb0, uint32_t sb1, uint32_t kb, uint32_t ke,
                                               uint8_t *xq, uint8_t *xg) {
    const uint32_t cols = 256u * (sb1 - sb0), all = NT * cols;
    const bool vec = (l.x_off & 1u) == 0u && (l.ldx & 3u) == 0u; /* 8-byte loads of hi and of lo */
    __shared__ float wmax[2][MK_BLOCK_THREADS / 32u];
    __shared__ float nscale[NT];
    const float *nw = nullptr;
    if (XS == MK_KQ8_X_NORM) {
        /* Each token row's RMSNorm scale from the tiles' sums of squares (mk_kq8_finish), added in
         * the same order on every run. */
        struct mk_task_ctx c;
        c.a = &a;
        nw = (const float *)mk_weight(&c, l.w_off).ptr;
        const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, nt = mk_chunk_fin_tiles(l.ldx);
        if (warp < m) {
            const float *sums = (const float *)a.arena + l.s_off + nt;
            float t = 0.0f;
            for (uint32_t j = lane; j < nt; j += 32u) t += __ldcg(sums + MK_CHUNK_MV8_TOKENS * j + warp);
            t = mk_warp_sum(t);
            if (lane == 0u) nscale[warp] = 1.0f / sqrtf(t / (float)l.ldx + l.eps);
        }
        __syncthreads();
    }
    for (uint32_t base = 0; base < all; base += 4u * MK_BLOCK_THREADS) {
        const uint32_t e = base + 4u * threadIdx.x, i = e / cols, cc = e % cols, k = 256u * sb0 + cc;
        const bool live = e < all && i < m && k >= kb && k < ke;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (XS == MK_KQ8_X_NORM && live) {
            /* As mk_chunk_rmsnorm forms it: x * scale * norm. */
            const float4 x4 = __ldcg((const float4 *)((const float *)a.arena + l.x_off + (uint64_t)i * l.ldx + k));
            const float sc = nscale[i];
            v = make_float4(x4.x * sc * __ldg(nw + k), x4.y * sc * __ldg(nw + k + 1u), x4.z * sc * __ldg(nw + k + 2u),
                            x4.w * sc * __ldg(nw + k + 3u));
        } else if (XS == MK_KQ8_X_PARTS && live) {
            /* silu(gate) * up from the partials, as mk_chunk_mm_reduce forms it but kept in fp32:
             * one launch fewer a layer (BENCHMARKS.md, twenty-sixth session). */
            const uint64_t ld = 2ull * l.ldx, slice = (uint64_t)l.m * ld;
            const float *pg = (const float *)a.arena + l.x_off + (uint64_t)i * ld + k;
            float4 gs = __ldcg((const float4 *)pg), us = __ldcg((const float4 *)(pg + l.ldx));
            for (uint32_t z = 1; z < l.x_parts; z++) {
                const float4 g4 = __ldcg((const float4 *)(pg + z * slice)),
                             u4 = __ldcg((const float4 *)(pg + z * slice + l.ldx));
                gs.x += g4.x, gs.y += g4.y, gs.z += g4.z, gs.w += g4.w;
                us.x += u4.x, us.y += u4.y, us.z += u4.z, us.w += u4.w;
            }
            v = make_float4(gs.x / (1.0f + expf(-gs.x)) * us.x, gs.y / (1.0f + expf(-gs.y)) * us.y,
                            gs.z / (1.0f + expf(-gs.z)) * us.z, gs.w / (1.0f + expf(-gs.w)) * us.w);
        } else if (XS == MK_KQ8_X_SPLIT && live) {
            const __nv_bfloat16 *hi = (const __nv_bfloat16 *)((const float *)a.arena + l.x_off + (uint64_t)i * l.ldx);
            float f[4];
            if (vec) {
                const uint2 h = *(const uint2 *)(hi + k), o = *(const uint2 *)(hi + l.ldx + k);
                const __nv_bfloat162 *ph = (const __nv_bfloat162 *)&h, *po = (const __nv_bfloat162 *)&o;
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const float2 fh = __bfloat1622float2(ph[j]), fo = __bfloat1622float2(po[j]);
                    f[2 * j] = fh.x + fo.x, f[2 * j + 1] = fh.y + fo.y;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) f[j] = mk_split_load(hi, l.ldx, k + (uint32_t)j);
            }
            v = make_float4(f[0], f[1], f[2], f[3]);
        }
        /* A super-block's 256 columns are two warps' 128 (all, cols and the pass are multiples of
         * 256): each warp's maximum meets its partner's in shared memory, by pass parity, so that
         * one barrier a pass keeps a pass's reads before the writes two passes on. */
        float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const uint32_t warp = threadIdx.x >> 5, par = (base / (4u * MK_BLOCK_THREADS)) & 1u;
        if ((threadIdx.x & 31u) == 0u) wmax[par][warp] = amax;
        __syncthreads();
        const float d = fmaxf(wmax[par][warp], wmax[par][warp ^ 1u]) / 127.0f;
        uint32_t word[3];
        int s[3];
        mk_xq_pack_d(v, d, word, s); /* every lane: its shuffles take the whole warp */
        if (e >= all) continue;
        const uint32_t G = cc / 32u, p = cc % 32u, at = NT * G + i;
#pragma unroll
        for (int q = 0; q < 3; q++) *(uint32_t *)(xq + 96u * at + 32u * (uint32_t)q + p) = word[q];
        if ((threadIdx.x & 7u) == 0u) *(uint2 *)(xg + MK_QMMA_XG_BYTES * at) = mk_qmma_xg_pack(d, s);
    }
}

/* One tile's rows (this warp's 16) over super-blocks [sb0, sb1) into acc (mk_qmma_k45_sbt's pairs):
 * Q4_K/Q5_K words of the next super-block load during this one's products, as mk_qmma_k45 does for
 * one token. The loop is mk_qmma_k45's: taking both through one loop with a callable changed the
 * one-token megakernel's generated code (twenty-third session's review). */
template <bool FIVE, uint32_t NT>
__device__ __forceinline__ void mk_kq8_k45(const uint8_t *p0, const uint8_t *p8, uint32_t sb0, uint32_t sb1,
                                           uint32_t xq, uint32_t xg, float (*acc)[2]) {
    const uint32_t BB = FIVE ? 176u : 144u;
    if (sb0 >= sb1) return;
    struct mk_qk45_raw w;
    mk_qmma_k45_load<FIVE>(p0 + (uint64_t)sb0 * BB, p8 + (uint64_t)sb0 * BB, &w);
    for (uint32_t sb = sb0; sb < sb1; sb++) {
        const struct mk_qk45_raw cur = w;
        if (sb + 1u < sb1) mk_qmma_k45_load<FIVE>(p0 + (uint64_t)(sb + 1u) * BB, p8 + (uint64_t)(sb + 1u) * BB, &w);
        mk_qmma_k45_sbt<FIVE, (int)NT>(cur, 8u * (sb - sb0), xq, xg, acc);
    }
}

/* After the splits' partials of block tile `tile` (rows 128 tile ..) are stored: the last split to
 * get here adds them in split order into the residual rows (n_off, as mk_chunk_mm_reduce would) and
 * writes the tile's sum of squares of each token row (MK_CHUNK_FIN_FLOATS), which the next product
 * turns into its RMSNorm (mk_kq8_stage_x): the reduce_norm launch between them goes (BENCHMARKS.md,
 * twenty-sixth session). A thread takes a row of the tile for every other token row. */
template <uint32_t NT>
__device__ __forceinline__ void mk_kq8_finish(const struct mk_kernel_args &a, const struct mk_chunk_launch &l,
                                              uint32_t tile, uint32_t m, uint32_t N) {
    static_assert(MK_CHUNK_MV_ROWS == 128u && MK_BLOCK_THREADS == 256u && NT <= MK_CHUNK_MV8_TOKENS,
                  "a thread a row of the tile for every other token row");
    /* At 8 token rows eight splits' loads go out together, then add in split order (8 tokens -2.5 %
     * on llama-8b); at 2 and 4 that form was slower than a load at a time (run66). */
    constexpr uint32_t J = NT / 2u, U = NT == 8u ? 8u : 1u;
    __shared__ float red[MK_BLOCK_WARPS][J];
    uint32_t *count = (uint32_t *)a.arena + l.s_off + tile;
    if (!mk_block_last_in(count, l.splits)) return; /* after every warp's partials of the tile */
    const uint32_t r = tile * MK_CHUNK_MV_ROWS + (threadIdx.x & 127u), h = threadIdx.x >> 7;
    const uint64_t slice = (uint64_t)l.m * l.ldy;
    const float *part = (const float *)a.arena + l.y_off;
    float *res = (float *)a.arena + l.n_off;
    float v[J], y0[J], ss[J];
#pragma unroll
    for (uint32_t j = 0; j < J; j++) {
        const uint32_t i = h + 2u * j;
        v[j] = 0.0f;
        y0[j] = i < m && r < N ? __ldcg(res + (uint64_t)i * l.ldy + r) : 0.0f;
    }
    for (uint32_t z0 = 0; z0 < l.splits; z0 += U) {
        float pv[J][U];
#pragma unroll
        for (uint32_t j = 0; j < J; j++)
#pragma unroll
            for (uint32_t u = 0; u < U; u++) {
                const uint32_t i = h + 2u * j;
                pv[j][u] = i < m && r < N && z0 + u < l.splits
                               ? __ldcg(part + (z0 + u) * slice + (uint64_t)i * l.ldy + r)
                               : 0.0f;
            }
#pragma unroll
        for (uint32_t j = 0; j < J; j++)
#pragma unroll
            for (uint32_t u = 0; u < U; u++) v[j] += pv[j][u];
    }
    const uint32_t warp = threadIdx.x >> 5;
#pragma unroll
    for (uint32_t j = 0; j < J; j++) {
        const uint32_t i = h + 2u * j;
        ss[j] = 0.0f;
        if (i < m && r < N) {
            const float t = y0[j] + v[j];
            res[(uint64_t)i * l.ldy + r] = t;
            ss[j] = t * t;
        }
        const float t = mk_warp_sum(ss[j]);
        if ((threadIdx.x & 31u) == 0u) red[warp][j] = t;
    }
    __syncthreads();
    if (threadIdx.x < m) {
        const uint32_t i = threadIdx.x, w0 = 4u * (i & 1u), j = i >> 1;
        float *sums = (float *)a.arena + l.s_off + mk_chunk_fin_tiles(N);
        sums[MK_CHUNK_MV8_TOKENS * tile + i] = ((red[w0][j] + red[w0 + 1u][j]) + red[w0 + 2u][j]) + red[w0 + 3u][j];
    }
    if (threadIdx.x == 0) *count = 0u; /* for the next launch, which starts after this one ends */
}

template <uint32_t NT>
__device__ __forceinline__ void mk_chunk_mv_kq8_body(const struct mk_kernel_args &a, const struct mk_chunk_launch &l) {
    const bool silu = l.mode == MK_CHUNK_MM_SILU;
    uint32_t N, K;
    {
        const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, silu);
        N = mm.rows, K = mm.m[0].cols;
    }
    const uint32_t m = min(l.m, NT);
    const uint32_t splits = l.splits > 1u ? l.splits : 1u, span = mk_chunk_mv_span(K, splits);
    const uint32_t kb = min(K, blockIdx.z * span), ke = min(K, kb + span);
    /* The split's super-blocks: a split of an odd number of 128-column steps starts or ends in the
     * middle of one, whose other half has zero x here (mk_kq8_stage_x). */
    const uint32_t sb0 = kb / 256u, sb1 = (ke + 255u) / 256u;
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3u;
    uint8_t *xs = (uint8_t *)mk_chunk_smem;
    uint8_t *xgs = xs + 96u * NT * 8u * (sb1 - sb0);
    const uint32_t xq = (uint32_t)__cvta_generic_to_shared(xs), xg = (uint32_t)__cvta_generic_to_shared(xgs);

    /* This warp's 16 rows of a tile, as mk_chunk_mv_body lays them. */
    const struct mk_mv_tiles tl = mk_mv_tiles_of(silu, N, warp);
    const uint32_t ntile = tl.ntile, r_end = tl.r_end;
    auto first_row = [&](uint32_t tile) { return tl.base + tile * tl.step; };
    /* A tile's rows, one format for the whole warp (the host sends only stacks where that holds:
     * mk_cuda_chunk_kq8); the matrices again from the launch each time, as registers are dear. */
    auto rows_of = [&](uint32_t tile, uint32_t *kind, const uint8_t **p0, const uint8_t **p8) {
        const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, silu);
        struct mk_wdesc w[2];
        uint32_t wr[2];
        mk_mv_lane_rows(&mm, silu, first_row(tile), r_end, g, w, wr);
        const uint32_t k = mk_kq8_kind(&w[0]);
        const bool same = k != MK_KQ_NONE && mk_kq8_kind(&w[1]) == k && __shfl_sync(0xffffffffu, k, 0) == k;
        if (!__all_sync(0xffffffffu, (K & 255u) == 0 && same)) __trap();
        *kind = k, *p0 = mk_row(&w[0], wr[0]), *p8 = mk_row(&w[1], wr[1]);
    };
    /* A lane of each row asks L2 for the split's bytes of a tile's rows: the first tile's while x is
     * staged (and the kernel ahead ends), each next one's while this one's products run. */
    auto prefetch = [&](uint32_t kind, const uint8_t *p0, const uint8_t *p8) {
        const uint64_t BB = kind == MK_KQ_6 ? 210u : kind == MK_KQ_5 ? 176u : 144u;
        if (c == 0u) mk_prefetch_l2(p0 + BB * sb0, BB * (sb1 - sb0));
        if (c == 1u) mk_prefetch_l2(p8 + BB * sb0, BB * (sb1 - sb0));
    };
    uint32_t kind = MK_KQ_NONE;
    const uint8_t *p0 = nullptr, *p8 = nullptr;
    if (blockIdx.x < ntile) {
        rows_of(blockIdx.x, &kind, &p0, &p8);
        prefetch(kind, p0, p8);
    }
    mk_grid_dep_wait();
    /* A copy for each source, so that the split rows' staging stays as it was timed. */
    if (l.x_parts)
        mk_kq8_stage_x<NT, MK_KQ8_X_PARTS>(a, l, m, sb0, sb1, kb, ke, xs, xgs);
    else if (l.s_off && l.mode != MK_CHUNK_MM_ADD)
        mk_kq8_stage_x<NT, MK_KQ8_X_NORM>(a, l, m, sb0, sb1, kb, ke, xs, xgs);
    else
        mk_kq8_stage_x<NT, MK_KQ8_X_SPLIT>(a, l, m, sb0, sb1, kb, ke, xs, xgs);
    __syncthreads();

    float *y = (float *)a.arena + l.y_off + (uint64_t)blockIdx.z * m * l.ldy;
    const bool add = l.mode == MK_CHUNK_MM_ADD && splits == 1u;
    const bool fin = l.mode == MK_CHUNK_MM_ADD && splits > 1u && l.s_off != 0u;
    auto put = [&](uint32_t rt, uint32_t i, int h, float v) {
        const uint32_t r = rt + g + 8u * (uint32_t)h;
        if (r >= r_end || i >= m) return;
        float *yp = y + (uint64_t)i * l.ldy + r;
        *yp = add ? __ldcg(yp) + v : v;
    };
    /* The next tile's rows, found for its prefetch and kept for its turn rather than found again: a
     * split's tile is short (two super-blocks at 4 tokens on llama-8b's gate/up), so the search was
     * a good part of a tile's instructions (BENCHMARKS.md, twenty-fifth session). */
    uint32_t nk = MK_KQ_NONE;
    const uint8_t *n0 = nullptr, *n8 = nullptr;
    for (uint32_t tile = blockIdx.x; tile < ntile; tile += gridDim.x) {
        if (tile != blockIdx.x) kind = nk, p0 = n0, p8 = n8;
        if (tile + gridDim.x < ntile) {
            rows_of(tile + gridDim.x, &nk, &n0, &n8);
            prefetch(nk, n0, n8);
        }
        const uint32_t rt = first_row(tile);
        float acc[NT][2];
#pragma unroll
        for (uint32_t t = 0; t < NT; t++) acc[t][0] = acc[t][1] = 0.0f;
        if (kind == MK_KQ_6) {
            for (uint32_t sb = sb0; sb < sb1; sb++) {
                mk_qmma_k6_sbt<(int)NT>(p0 + 210ull * sb, p8 + 210ull * sb, 8u * (sb - sb0), xq, xg, acc);
            }
            /* Token t: the four lanes of each row; lane t % 4 stores it. */
#pragma unroll
            for (uint32_t t = 0; t < NT; t++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float v = acc[t][h];
                    v += __shfl_xor_sync(0xffffffffu, v, 1);
                    v += __shfl_xor_sync(0xffffffffu, v, 2);
                    if (c == (t & 3u)) put(rt, t, h, v);
                }
        } else {
            if (kind == MK_KQ_5) {
                mk_kq8_k45<true, NT>(p0, p8, sb0, sb1, xq, xg, acc);
            } else {
                mk_kq8_k45<false, NT>(p0, p8, sb0, sb1, xq, xg, acc);
            }
            /* Token 2p + (c >> 1): lanes c and c ^ 1; the even one stores it. */
#pragma unroll
            for (uint32_t p = 0; p < NT / 2u; p++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float v = acc[p][h] + __shfl_xor_sync(0xffffffffu, acc[p][h], 1);
                    if ((c & 1u) == 0u) put(rt, 2u * p + (c >> 1), h, v);
                }
        }
        if (fin) mk_kq8_finish<NT>(a, l, tile, m, N);
    }
}

#define MK_CHUNK_MV_KQ8(NT)                                                                                     \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)                                           \
        mk_chunk_mv_kq8_##NT(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        mk_chunk_mv_kq8_body<NT##u>(a, l);                                                                      \
    }
MK_CHUNK_MV_KQ8(2)
MK_CHUNK_MV_KQ8(4)
MK_CHUNK_MV_KQ8(8)
#undef MK_CHUNK_MV_KQ8

#endif
