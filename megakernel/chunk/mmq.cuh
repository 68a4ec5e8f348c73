/* mk_chunk_mm_*_kq: a chunk step's products of K-quant matrices over tens of token rows, the weights' integers on the tensor cores as they are (no decoded copy of the matrix). */
#ifndef MK_CHUNK_MMQ_CUH
#define MK_CHUNK_MMQ_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/mm.cuh"
#include "megakernel/chunk/mv.cuh"

/* Why: a K-quant product of 17 to 127 token rows decoded its tiles to floats in every block (the
 * 64-row mk_chunk_mm_* kernels), and from 128 rows went through split rows (mk_chunk_wsplit wrote
 * each matrix as bf16 hi and lo halves, 4 bytes a weight, then three products a tile: w hi . x hi,
 * w hi . x lo, w lo . x hi). Here each block reads the quantized rows themselves and multiplies
 * the integers q as mk_chunk_mv_kq does (q is exact in bf16, so two products a tile: q . x hi and
 * q . x lo), scaling each 32-column group's sums after it (d sc (q . x) - dmin m (sum of x)).
 * That wins up to about 128 token rows (the host's MK_CUDA_KQ_MAX); past it the split rows'
 * wgmma products do: these mma.sync tiles read x's fragments from shared memory in every warp
 * (a kilobyte a tile and group), with two warps a scheduler to hide the chains.
 *
 * Block (x, y, z): token rows [BM x, + BM) (BM = 8 NT: 64, or 32 for small chunks), 128 rows of
 * the stacked space from 128 y (SILU: 64 gate rows from 64 y and the same rows of up: warps 0-3
 * gate, 4-7 up), columns of split z. Warp w holds 16 weight rows by the BM token rows (NT n8
 * tiles). x comes to shared memory
 * MK_CHUNK_MMQ_KS columns (half a super-block) at a time in a ring of ST stages
 * by cp.async, each stage with its token rows' sums over its four groups (one per thread, made
 * once for the eight warps); each lane's weights load straight into registers half a super-block
 * ahead, as in mk_chunk_mv_kq. */

/* A stage: (token row, hi then lo, MK_CHUNK_MMQ_KS columns) rows MK_CHUNK_MMQ_XLD bf16 apart (576
 * bytes: two token rows of a 16-byte load phase land on different banks), then the sums
 * (group, token row). */
#define MK_CHUNK_MMQ_XLD   (2u * MK_CHUNK_MMQ_KS + 32u)
#define MK_CHUNK_MMQ_STAGE (MK_CHUNK_MM_TOKENS * (2u * MK_CHUNK_MMQ_XLD + 4u * MK_CHUNK_MMQ_KS / 32u))
static_assert(MK_CHUNK_MMQ_STAGE == MK_CHUNK_MMQ_STAGE_BYTES, "chunk.h sizes the ring");
static_assert(MK_CHUNK_MM_TOKENS * (MK_CHUNK_MMQ_ROWS + 4u) * 4u <= MK_CHUNK_MMQ32_SMEM, "SILU's epilogue fits");

/* One 32-column group of a warp's 16 rows (A: a0, a1, the group's k16 halves; scales s0, s1 of its
 * 16-column halves, offset mn) by the 8 NT token rows (x at xp, their group sums at xg + 8 t), added
 * to acc. The NT n8 tiles' products are independent chains, in straight-line code so that
 * their mma overlap; HALVES (a Q6_K row in the warp): two masked passes, a scale each. */
template <bool HALVES, uint32_t NT>
__device__ __forceinline__ void mk_mmq_group(const uint32_t *a0, const uint32_t *a1, const float *s0, const float *s1,
                                             const float *mn, const __nv_bfloat16 *xp, const float *xg, uint32_t t4,
                                             float (*acc)[4]) {
    struct mk_mv_x x[NT];
#pragma unroll
    for (uint32_t t = 0; t < NT; t++) x[t] = mk_mv_load_x(xp + t * 8u * MK_CHUNK_MMQ_XLD, MK_CHUNK_MMQ_KS);
    float q[NT][4], r[NT][4];
#pragma unroll
    for (uint32_t t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) q[t][e] = r[t][e] = 0.0f;
    if (!HALVES) {
#pragma unroll
        for (uint32_t t = 0; t < NT; t++) mk_mv_mma4(q[t], a0, a1, x[t]);
    } else {
        /* Pass 0 takes the lanes of columns 0-15 (t4 < 2), pass 1 the others. */
        const uint32_t keep0 = t4 < 2u ? ~0u : 0u, keep1 = ~keep0;
        const uint32_t b0[4] = { a0[0] & keep0, a0[1] & keep0, a0[2] & keep0, a0[3] & keep0 },
                       b1[4] = { a1[0] & keep0, a1[1] & keep0, a1[2] & keep0, a1[3] & keep0 },
                       c0[4] = { a0[0] & keep1, a0[1] & keep1, a0[2] & keep1, a0[3] & keep1 },
                       c1[4] = { a1[0] & keep1, a1[1] & keep1, a1[2] & keep1, a1[3] & keep1 };
#pragma unroll
        for (uint32_t t = 0; t < NT; t++) {
            mk_mv_mma4(q[t], b0, b1, x[t]);
            mk_mv_mma4(r[t], c0, c1, x[t]);
        }
    }
#pragma unroll
    for (uint32_t t = 0; t < NT; t++) {
        const float2 xs = *(const float2 *)(xg + 8u * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float v = fmaf(s0[e >> 1], q[t][e], acc[t][e]);
            if (HALVES) v = fmaf(s1[e >> 1], r[t][e], v);
            acc[t][e] = fmaf(-mn[e >> 1], (e & 1) ? xs.y : xs.x, v);
        }
    }
}

template <int MODE, uint32_t NT, uint32_t ST>
__device__ __forceinline__ void mk_chunk_mm_kq(const struct mk_kernel_args &a, const struct mk_chunk_launch &l) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    constexpr uint32_t BM = 8u * NT, BN = MK_CHUNK_MMQ_ROWS, KS = MK_CHUNK_MMQ_KS, XLD = MK_CHUNK_MMQ_XLD;
    static_assert(BN == 16u * MK_BLOCK_WARPS && MK_BLOCK_WARPS == 8u && (NT == 4u || NT == 8u) && KS == 128u,
                  "16 rows a warp, 4 or 8 n8 tiles, half a super-block a stage");
    const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, SILU);
    struct mk_mm_place pl;
    if (!mk_mm_place_of<SILU, BN, BM, KS>(&mm, &l, &pl)) return;
    const uint32_t N = pl.N, K = pl.K, n0 = pl.n0, m0 = pl.m0, splits = pl.splits, kb = pl.kb, ke = pl.ke;
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, g = lane >> 2, t4 = lane & 3u;

    /* This lane's rows g and g + 8 of the warp's 16. */
    struct mk_kq_raw kr[2];
    const struct mk_kq_lane ql = mk_kq_lane_of(&mm, SILU, n0, K, kb, ke, warp, lane, kr);
    const uint32_t *kind = ql.kind;
    const uint8_t *const *krow = ql.row;
    /* With a Q6_K row among the warp's, two masked passes (a scale per 16-column half). */
    const bool halves = __any_sync(0xffffffffu, kind[0] == MK_KQ_6 || kind[1] == MK_KQ_6);
    mk_grid_dep_wait(); /* the weights did not wait for the kernel ahead; x does */

    uint8_t *const sm = (uint8_t *)mk_chunk_smem;
    const bool xvec = (l.x_off & 3u) == 0 && (l.ldx & 7u) == 0;
    /* Stage of columns k0: BM token rows (past l.m: the last again, never stored) by hi and lo. */
    auto issue = [&](uint32_t k0, uint8_t *st) {
        __nv_bfloat16 *xs = (__nv_bfloat16 *)st;
#pragma unroll
        for (uint32_t j = 0; j < BM * KS / 8u / MK_BLOCK_THREADS; j++) {
            const uint32_t e = tid + j * MK_BLOCK_THREADS, i = e / (KS / 8u), c = e % (KS / 8u) * 8u, k = k0 + c;
            const __nv_bfloat16 *hi =
                (const __nv_bfloat16 *)((const float *)a.arena + l.x_off + (uint64_t)min(m0 + i, l.m - 1u) * l.ldx);
            __nv_bfloat16 *d = xs + i * XLD + c;
            if (xvec && k + 8u <= K) {
                mk_cp_async16(d, hi + k, 16u);
                mk_cp_async16(d + KS, hi + l.ldx + k, 16u);
            } else {
                mk_mm_split_copy8(d, d + KS, hi, l.ldx, k, K);
            }
        }
    };
    const uint32_t nst = (ke - kb + KS - 1u) / KS;
#pragma unroll
    for (uint32_t s = 0; s + 1u < ST; s++) {
        if (s < nst) issue(kb + s * KS, sm + s * MK_CHUNK_MMQ_STAGE);
        mk_cp_async_commit();
    }
    float acc[NT][4];
#pragma unroll
    for (uint32_t t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;
    for (uint32_t it = 0; it < nst; it++) {
        const uint32_t k0 = kb + it * KS;
        uint8_t *st = sm + (it % ST) * MK_CHUNK_MMQ_STAGE;
        mk_cp_async_wait_group<ST - 2u>();
        /* Past it every thread's copies of this stage have landed and every warp has finished the
         * stage before, whose buffer the next copies fill. */
        __syncthreads();
        if (it + ST - 1u < nst) issue(k0 + (ST - 1u) * KS, sm + ((it + ST - 1u) % ST) * MK_CHUNK_MMQ_STAGE);
        mk_cp_async_commit();
        const __nv_bfloat16 *xs = (const __nv_bfloat16 *)st;
        float *xsum = (float *)(st + BM * XLD * 2u); /* (group, token row) */
        {
            const uint32_t i = tid & (BM - 1u), u = tid / BM;
            if (u < KS / 32u) {
                const uint4 *p = (const uint4 *)(xs + i * XLD + 32u * u);
                float s = 0.0f;
#pragma unroll
                for (uint32_t j = 0; j < 4u; j++) {
                    const uint4 hv = p[j], lv = p[j + KS / 8u];
                    const uint32_t hw[4] = { hv.x, hv.y, hv.z, hv.w }, lw[4] = { lv.x, lv.y, lv.z, lv.w };
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const float2 hf = __bfloat1622float2(*(const __nv_bfloat162 *)&hw[q]);
                        const float2 lf = __bfloat1622float2(*(const __nv_bfloat162 *)&lw[q]);
                        s += (hf.x + lf.x) + (hf.y + lf.y);
                    }
                }
                xsum[u * BM + i] = s;
            }
        }
        struct mk_kq_raw cur[2] = { kr[0], kr[1] };
#pragma unroll
        for (int h = 0; h < 2; h++) mk_kq_half(&cur[h], kind[h], (k0 >> 7) & 1u);
        if (k0 + KS < ke) {
#pragma unroll
            for (int h = 0; h < 2; h++) mk_kq_fetch(&kr[h], krow[h], kind[h], k0 + KS, t4);
        }
        __syncthreads(); /* the sums */
        const __nv_bfloat16 *xrow = xs + g * XLD + 8u * t4;
#pragma unroll
        for (uint32_t u = 0; u < 4u; u++) {
            uint32_t a0[4], a1[4];
            float s0[2], s1[2], mn[2];
            mk_kq_decode2(cur, kind, ((k0 >> 5) & 7u) + u, a0, a1, s0, s1, mn);
            if (halves)
                mk_mmq_group<true, NT>(a0, a1, s0, s1, mn, xrow + 32u * u, xsum + u * BM + 2u * t4, t4, acc);
            else
                mk_mmq_group<false, NT>(a0, a1, s0, s1, mn, xrow + 32u * u, xsum + u * BM + 2u * t4, t4, acc);
        }
    }
    mk_cp_async_wait_all();
    __syncthreads(); /* SILU's epilogue reuses the stages */
    /* acc[t]: (row g, token 8 t + 2 t4), (g, .. + 1), (g + 8, 8 t + 2 t4), (g + 8, .. + 1); tile
     * column 16 w + row, as mk_mm_epilogue counts them (SILU: up's after gate's BN / 2). */
    auto each = [&](auto fn) {
#pragma unroll
        for (uint32_t t = 0; t < NT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const uint32_t mt = m0 + 8u * t + 2u * t4 + (uint32_t)(e & 1);
                if (mt < l.m) fn(mt, 16u * warp + g + 8u * (uint32_t)(e >> 1), acc[t][e]);
            }
    };
    mk_mm_epilogue<MODE, BN, decltype(each), BM>(&a, &l, n0, N, m0, splits, each);
}

/* _kq: 64 token rows a block, one block a multiprocessor, three stages; _kq32: 32 token rows, two
 * blocks a multiprocessor (128 registers: a few spills) and two stages, for chunks that 32-token
 * blocks pad less (17-32, 65-96 token rows). The kernels are latency bound at 8 warps a
 * multiprocessor (Nsight Compute: 0.48 of 2 warps eligible a scheduler); 16 warps of 32-token
 * blocks also won at 48 and 64 tokens on llama-1b, but lost 9 % on llama-8b, whose weights they
 * read twice as often (BENCHMARKS.md, run92, run93). */
#define MK_MM_KQ_KERNEL(name, mode, nt, st, blocks)                                             \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, blocks)                      \
        name(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        mk_chunk_mm_kq<mode, nt, st>(a, l);                                                     \
    }
MK_MM_KQ_KERNEL(mk_chunk_mm_store_kq, MK_CHUNK_MM_STORE, 8u, 3u, 1)
MK_MM_KQ_KERNEL(mk_chunk_mm_add_kq, MK_CHUNK_MM_ADD, 8u, 3u, 1)
MK_MM_KQ_KERNEL(mk_chunk_mm_silu_kq, MK_CHUNK_MM_SILU, 8u, 3u, 1)
MK_MM_KQ_KERNEL(mk_chunk_mm_store_kq32, MK_CHUNK_MM_STORE, 4u, 2u, 2)
MK_MM_KQ_KERNEL(mk_chunk_mm_add_kq32, MK_CHUNK_MM_ADD, 4u, 2u, 2)
MK_MM_KQ_KERNEL(mk_chunk_mm_silu_kq32, MK_CHUNK_MM_SILU, 4u, 2u, 2)

#endif
