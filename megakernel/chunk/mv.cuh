/* mk_chunk_mv: a chunk step's matrix products over a few token rows (speculation's verify steps, a prompt's tail, the LM head of the output rows) on the tensor cores, each weight read once, straight into registers. */
#ifndef MK_CHUNK_MV_CUH
#define MK_CHUNK_MV_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/mm.cuh"

/* With a few token rows the product is bound by reading the weights, and the 64-token tiles of
 * mk_chunk_mm would spend a whole tile's tensor-core work (and, for block formats, decoding) on
 * each row. Here the weights are the mma's A operand (16 rows by k16) and the token rows its n8
 * B operand: a lane loads 8 neighbouring columns of two weight rows (16 bytes each for bf16) into
 * A registers as they are, and the k order inside a 32-column group is permuted the same way for
 * x, which the dot product does not see. Lane (g, t4) holds columns 8 t4 .. 8 t4 + 7 of rows g and
 * g + 8: mma u (0, 1) takes columns 8 t4 + 4u + {0, 1} as its k pair 2 t4 and 8 t4 + 4u + {2, 3}
 * as its pair 2 t4 + 8, from x's token rows g and 8 + g likewise (a second n8 tile past 8 rows). */

/* Block (x, 1, z): R = MK_CHUNK_MV_ROWS rows of the stacked space (q, k, v stacked; for
 * MK_CHUNK_MM_SILU, R / 2 gate rows and the same rows of up), warp w 16 of them, columns of split z
 * (mk_chunk_mv_span). Its l.m <= MK_CHUNK_MV_TOKENS token rows (split rows) of those columns come
 * to shared memory (MK_CHUNK_MV_SMEM(m, span)) while the first weights load. Each output (token i,
 * stacked row r; SILU: gate rows, then up's) goes to y_off + z * m * ldy + i * ldy + r: the raw sum,
 * or added to what is there for MK_CHUNK_MM_ADD with one split; the host sends the others through
 * mk_chunk_mm_reduce. */
/* EXACT: every matrix is bf16 (loaded as they are, no lo product); U: 32-column groups a warp
 * loads before it multiplies (bytes in flight, against registers: decoding takes many). */
template <bool EXACT, uint32_t U>
__device__ __forceinline__ void mk_chunk_mv_body(const struct mk_kernel_args &a, const struct mk_chunk_launch &l) {
    static_assert(MK_CHUNK_MV_KSTEP % (32u * U) == 0, "a split spans whole groups of loads");
    const bool silu = l.mode == MK_CHUNK_MM_SILU;
    const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, silu);
    if (EXACT && !mm.exact) __trap();
    const uint32_t N = mm.rows, K = mm.m[0].cols, rows = silu ? 2u * N : N, m = min(l.m, MK_CHUNK_MV_TOKENS);
    const uint32_t splits = l.splits > 1u ? l.splits : 1u, span = mk_chunk_mv_span(K, splits);
    const uint32_t kb = min(K, blockIdx.z * span), ke = min(K, kb + span), XLD = 2u * span + 8u;
    __nv_bfloat16 *xs = (__nv_bfloat16 *)mk_chunk_smem; /* (token, hi then lo, span): rows XLD apart */
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, g = lane >> 2, t4 = lane & 3u;

    /* This warp's 16 rows from r0 (SILU: warps 0-3 gate, 4-7 up), and this lane's two of them, each
     * in its own matrix of the stack; a row past them repeats the last and is never stored. */
    static_assert(MK_CHUNK_MV_ROWS == 16u * MK_BLOCK_WARPS && MK_BLOCK_WARPS == 8u,
                  "16 rows a warp, half the warps up");
    constexpr uint32_t HR = MK_CHUNK_MV_ROWS / 2u;
    const uint32_t r0 =
        silu ? (warp < 4u ? 0u : N) + blockIdx.x * HR + (warp & 3u) * 16u : blockIdx.x * MK_CHUNK_MV_ROWS + warp * 16u;
    const uint32_t r_end = silu ? (warp < 4u ? 0u : N) + N : rows;
    struct mk_wdesc w[2];
    uint32_t wr[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t r = min(r0 + g + 8u * (uint32_t)h, r_end - 1u);
        if (silu) {
            w[h] = r < N ? mm.m[0] : mm.m[1];
            wr[h] = r < N ? r : r - N;
        } else {
            wr[h] = r;
            w[h] = mk_mm_which(&mm, &wr[h]);
        }
    }
    /* bf16 rows whose columns are all there load as they are; the rest through mk_mm_fetch_*. */
    const uint4 *wp[2] = { (const uint4 *)mk_row(&w[0], wr[0]) + t4, (const uint4 *)mk_row(&w[1], wr[1]) + t4 };
    const bool vec = EXACT && w[0].vec && w[1].vec;
    auto load = [&](uint32_t k0, uint4(&ah)[U][2], uint4(&al)[U][2]) {
        if (vec && k0 + 32u * U <= K) {
#pragma unroll
            for (uint32_t u = 0; u < U; u++)
#pragma unroll
                for (int h = 0; h < 2; h++) ah[u][h] = __ldg(wp[h] + (k0 + 32u * u) / 8u);
            return;
        }
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t k = k0 + 32u * u + 8u * t4;
                /* bf16 element by element (the row's end, or rows not 16-byte aligned):
                 * mk_mm_fetch_raw's any-format path would spill registers here. */
                if (EXACT) {
                    const uint16_t *rp = (const uint16_t *)mk_row(&w[h], wr[h]);
                    uint32_t q[4];
#pragma unroll
                    for (uint32_t j = 0; j < 4u; j++) {
                        const uint32_t e = k + 2u * j;
                        q[j] = (e < K ? rp[min(e, K - 1u)] : 0u) |
                               (e + 1u < K ? (uint32_t)rp[min(e + 1u, K - 1u)] << 16 : 0u);
                    }
                    ah[u][h] = make_uint4(q[0], q[1], q[2], q[3]);
                    continue;
                }
                float v[8];
                mk_mm_fetch_w<true>(&w[h], wr[h], k, v);
                uint32_t hi[4], lo[4];
                mk_mm_split<4>(v, hi, lo);
                ah[u][h] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                al[u][h] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            }
    };
    /* The first weights do not wait for x. */
    uint4 ah[U][2], al[U][2] = {};
    if (kb < ke) load(kb, ah, al);
    mk_grid_dep_wait();

    /* x: 8 columns a thread at a time; token rows past m and columns past K are zero. */
    const uint32_t nt = (m + 7u) / 8u; /* n8 tiles of token rows */
    const bool xvec = (l.x_off & 3u) == 0 && (l.ldx & 7u) == 0;
    for (uint32_t e = tid; e < 8u * nt * span / 8u; e += MK_BLOCK_THREADS) {
        const uint32_t i = e / (span / 8u), c = e % (span / 8u) * 8u, k = kb + c;
        const __nv_bfloat16 *hi = (const __nv_bfloat16 *)((const float *)a.arena + l.x_off + (uint64_t)i * l.ldx);
        __nv_bfloat16 *dh = xs + i * XLD + c;
        if (i < m && xvec && k + 8u <= K) {
            *(uint4 *)dh = *(const uint4 *)(hi + k);
            *(uint4 *)(dh + span) = *(const uint4 *)(hi + l.ldx + k);
        } else if (i < m) {
            mk_mm_split_copy8(dh, dh + span, hi, l.ldx, k, K);
        } else {
            *(uint4 *)dh = *(uint4 *)(dh + span) = make_uint4(0, 0, 0, 0);
        }
    }
    __syncthreads();

    const __nv_bfloat16 *xrow = xs + g * XLD + 8u * t4;
    float acc[2][4] = {};
    for (uint32_t k0 = kb; k0 < ke; k0 += 32u * U) {
        if (k0 > kb) load(k0, ah, al);
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t a0[4] = { ah[u][0].x, ah[u][1].x, ah[u][0].y, ah[u][1].y },
                           a1[4] = { ah[u][0].z, ah[u][1].z, ah[u][0].w, ah[u][1].w };
            const uint32_t l0[4] = { al[u][0].x, al[u][1].x, al[u][0].y, al[u][1].y },
                           l1[4] = { al[u][0].z, al[u][1].z, al[u][0].w, al[u][1].w };
#pragma unroll
            for (uint32_t t = 0; t < 2u; t++) {
                if (t >= nt) break;
                const __nv_bfloat16 *xp = xrow + t * 8u * XLD + k0 - kb + 32u * u;
                const uint4 bh = *(const uint4 *)xp, bl = *(const uint4 *)(xp + span);
                const uint32_t bh0[2] = { bh.x, bh.y }, bh1[2] = { bh.z, bh.w }, bl0[2] = { bl.x, bl.y },
                               bl1[2] = { bl.z, bl.w };
                mk_mma_bf16(acc[t], a0, bh0);
                mk_mma_bf16(acc[t], a1, bh1);
                mk_mma_bf16(acc[t], a0, bl0);
                mk_mma_bf16(acc[t], a1, bl1);
                if (!EXACT) {
                    mk_mma_bf16(acc[t], l0, bh0);
                    mk_mma_bf16(acc[t], l1, bh1);
                }
            }
        }
    }

    /* acc[t]: (row g, token 8 t + 2 t4), (g, .. + 1), (g + 8, 8 t + 2 t4), (g + 8, .. + 1). */
    float *y = (float *)a.arena + l.y_off + (uint64_t)blockIdx.z * m * l.ldy;
    const bool add = l.mode == MK_CHUNK_MM_ADD && splits == 1u;
#pragma unroll
    for (uint32_t t = 0; t < 2u; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const uint32_t r = r0 + g + 8u * (uint32_t)(e >> 1), i = 8u * t + 2u * t4 + (uint32_t)(e & 1);
            if (r >= r_end || i >= m) continue;
            float *yp = y + (uint64_t)i * l.ldy + r;
            *yp = add ? __ldcg(yp) + acc[t][e] : acc[t][e];
        }
}

extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)
    mk_chunk_mv(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mv_body<false, 1u>(a, l);
}
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)
    mk_chunk_mv_bf16(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mv_body<true, 4u>(a, l);
}

#endif
