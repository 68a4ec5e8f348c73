/* mk_chunk_mm: the matrix products of a chunk step on the tensor cores, each weight tile decoded into shared memory once for a block of token rows (any weight format). */
#ifndef MK_CHUNK_MM_CUH
#define MK_CHUNK_MM_CUH

#include <cuda_bf16.h>

#include "megakernel/chunk.h"
#include "megakernel/chunk/rows.cuh"
#include "megakernel/common.cuh"

/* Precision: activations are fp32, and a bf16 product alone would round each to 8 bits. Each
 * value is split into bf16 hi + lo (hi = bf16(v), lo = bf16(v - hi): 16 significant bits), and a
 * tile's products are hi.hi + lo.hi + hi.lo (fp32 accumulation). BF16 weights have lo = 0, so
 * their third product is skipped. The result differs from the fp32 dot by about 2^-16 relative,
 * the size of fp32's own summation-order differences over a few thousand terms. */

/* Rows of the shared tiles are MK_MM_LD bf16 apart: 80 bytes, which keeps the 32-bit fragment
 * loads of a warp on 32 distinct banks. */
#define MK_MM_LD 40u
#define MK_MM_BM MK_CHUNK_MM_TOKENS
#define MK_MM_BK MK_CHUNK_MM_K

/* Up to three matrices of equal width whose rows are stacked into one row space (q, k, v), or the
 * pair of MK_CHUNK_MM_SILU, each row decoded in its own format. */
struct mk_mm_mats {
    struct mk_wdesc m[3];
    uint32_t n_mats, rows; /* rows of the stacked space (the first matrix's for a pair) */
    bool exact;            /* every value is a bf16: the lo tiles are zero */
};

__device__ __forceinline__ uint32_t mk_mm_pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

/* v = hi + lo as bf16 pairs for 2k elements. */
template <int K> __device__ __forceinline__ void mk_mm_split(const float *v, uint32_t *hi, uint32_t *lo) {
#pragma unroll
    for (int j = 0; j < K; j++) {
        __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        float2 hf = __bfloat1622float2(h);
        hi[j] = *(uint32_t *)&h;
        lo[j] = mk_mm_pack(v[2 * j] - hf.x, v[2 * j + 1] - hf.y);
    }
}

/* 8 neighbouring columns from k of row `row` of w (0 past the end). */
template <bool BLOCKS> /* block formats may come (the 64-row kernels; the wide ones take bf16 only) */
__device__ __forceinline__ void mk_mm_fetch_w(const struct mk_wdesc *w, uint32_t row, uint32_t k, float *v) {
    if (row < w->rows && k + 8u <= w->cols && w->vec && w->dtype == MK_DEV_BF16) {
        const uint4 a = __ldg((const uint4 *)(mk_row(w, row) + 2ull * k));
        const uint32_t u[4] = { a.x, a.y, a.z, a.w };
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v[2 * j] = __uint_as_float(u[j] << 16);
            v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
        return;
    }
    /* Every address formed is inside the matrix (the compiler may load before it selects). */
    if (row >= w->rows) {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = 0.0f;
        return;
    }
    const uint8_t *rp = mk_row(w, row);
    if (BLOCKS && k + 8u <= w->cols && mk_layout_is_block_format(w->dtype)) {
        mk_q_value8(w->dtype, rp, k, v);
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t e = k + (uint32_t)j;
        const float f = mk_elem(w->dtype, rp, min(e, w->cols - 1u));
        v[j] = e < w->cols ? f : 0.0f;
    }
}

/* 8 neighbouring bf16 weights from k of row `row` of a bf16 matrix, as they are (0 past the end):
 * a bf16 weight is its own hi half, so the wide kernels store it without decoding or splitting. */
__device__ __forceinline__ uint4 mk_mm_fetch_raw(const struct mk_wdesc *w, uint32_t row, uint32_t k) {
    if (row < w->rows && k + 8u <= w->cols && w->vec) return __ldg((const uint4 *)(mk_row(w, row) + 2ull * k));
    float v[8];
    mk_mm_fetch_w<false>(w, row, k, v);
    return make_uint4(mk_mm_pack(v[0], v[1]), mk_mm_pack(v[2], v[3]), mk_mm_pack(v[4], v[5]), mk_mm_pack(v[6], v[7]));
}

/* Values k .. k + 7 of the split row at hi (its lo half ld later; 0 from K on) to sh and sl, one by
 * one: the row's end, or rows whose halves are not 16-byte aligned. */
__device__ __forceinline__ void mk_mm_split_copy8(__nv_bfloat16 *sh, __nv_bfloat16 *sl, const __nv_bfloat16 *hi,
                                                  uint32_t ld, uint32_t k, uint32_t K) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t e = k + (uint32_t)j, c = min(e, K - 1u);
        sh[j] = e < K ? hi[c] : __float2bfloat16_rn(0.0f);
        sl[j] = e < K ? hi[ld + c] : __float2bfloat16_rn(0.0f);
    }
}

/* The hi halves alone: x rounded to bf16 (the products' !XLO form). */
__device__ __forceinline__ void mk_mm_hi_copy8(__nv_bfloat16 *sh, const __nv_bfloat16 *hi, uint32_t k, uint32_t K) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t e = k + (uint32_t)j;
        sh[j] = e < K ? hi[min(e, K - 1u)] : __float2bfloat16_rn(0.0f);
    }
}

/* The launch's matrices: the pair w0, w1 of MK_CHUNK_MM_SILU (rows: w0's), else w0 with w1 and w2
 * stacked below it where given (rows: all of them). */
__device__ __forceinline__ struct mk_mm_mats mk_mm_launch_mats(const struct mk_kernel_args *a,
                                                               const struct mk_chunk_launch *l, bool silu) {
    struct mk_task_ctx c;
    c.a = a;
    struct mk_mm_mats mm;
    const uint32_t widx[3] = { l->w0, l->w1, l->w2 };
    mm.n_mats = silu ? 2u : l->w2 != MK_NO_WEIGHT ? 3u : l->w1 != MK_NO_WEIGHT ? 2u : 1u;
    mm.rows = 0;
    mm.exact = true;
#pragma unroll
    for (uint32_t q = 0; q < 3u; q++) {
        if (q >= mm.n_mats) break;
        mm.m[q] = mk_weight(&c, widx[q]);
        mm.exact = mm.exact && mm.m[q].dtype == MK_DEV_BF16;
        if (!silu || q == 0) mm.rows += mm.m[q].rows;
    }
    return mm;
}

/* The matrix of a stack that holds row r, with r made relative to it. */
__device__ __forceinline__ struct mk_wdesc mk_mm_which(const struct mk_mm_mats *mm, uint32_t *r) {
    if (mm->n_mats < 2u || *r < mm->m[0].rows) return mm->m[0];
    *r -= mm->m[0].rows;
    if (mm->n_mats < 3u || *r < mm->m[1].rows) return mm->m[1];
    *r -= mm->m[1].rows;
    return mm->m[2];
}

__device__ __forceinline__ void mk_mma_bf16(float *d, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mk_ldsm_x4(uint32_t *r, const void *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* The matrix that holds row r of a block's BN weight rows from n0, and the row in it (SILU: BN / 2
 * rows of gate, then the same rows of up). */
template <bool SILU, uint32_t BN>
__device__ __forceinline__ struct mk_wdesc mk_mm_pick(const struct mk_mm_mats *mm, uint32_t n0, uint32_t r,
                                                      uint32_t *row) {
    if (SILU) {
        *row = n0 + (r < BN / 2u ? r : r - BN / 2u);
        return r < BN / 2u ? mm->m[0] : mm->m[1];
    }
    *row = n0 + r;
    return mk_mm_which(mm, row);
}

/* mk_mm_fetch_raw of that row, the matrices looked up again: out of line, so that the loads of
 * rows without 16-byte copies keep no descriptors in the loop's registers. */
template <bool SILU, uint32_t BN>
__device__ __noinline__ uint4 mk_mm_fetch_raw_at(const struct mk_kernel_args *a, const struct mk_chunk_launch *l,
                                                 uint32_t n0, uint32_t r, uint32_t k) {
    const struct mk_mm_mats mm = mk_mm_launch_mats(a, l, SILU);
    uint32_t row;
    const struct mk_wdesc w = mk_mm_pick<SILU, BN>(&mm, n0, r, &row);
    return mk_mm_fetch_raw(&w, row, k);
}

/* Where block (x, y, z) of a product of BN-row tiles works: rows[n0 ..) of the N stacked rows
 * (SILU: BN / 2 gate rows from n0 and the same rows of up), token rows [m0, m0 + BM), and split
 * z's columns [kb, ke) of K in whole stages of BK columns (an empty split writes zeros). */
struct mk_mm_place {
    uint32_t N, K, n0, m0, splits, kb, ke;
};
template <bool SILU, uint32_t BN, uint32_t BM = MK_MM_BM, uint32_t BK = MK_MM_BK>
__device__ __forceinline__ bool mk_mm_place_of(const struct mk_mm_mats *mm, const struct mk_chunk_launch *l,
                                               struct mk_mm_place *p) {
    p->N = mm->rows;
    p->K = mm->m[0].cols;
    p->n0 = blockIdx.y * (SILU ? BN / 2u : BN);
    p->m0 = blockIdx.x * BM;
    p->splits = l->splits > 1u ? l->splits : 1u;
    const uint32_t kspan = (p->K + BK * p->splits - 1u) / (BK * p->splits) * BK;
    p->kb = min(p->K, blockIdx.z * kspan);
    p->ke = min(p->K, p->kb + kspan);
    return p->n0 < p->N && p->m0 < l->m;
}

/* The row a block's loads take for weight row r (of BN from n0; w and row as mk_mm_pick gave them):
 * a bf16 matrix's own row, or with SPLITROWS its split row at l->w_off (the hi half; lo K values
 * later). Rows past the matrix, or past the stacked space (SILU: gate's N rows, then up's), repeat
 * the last: their sums reach only output rows that are never stored. */
template <bool SILU, uint32_t BN, bool SPLITROWS>
__device__ __forceinline__ const __nv_bfloat16 *
mk_mm_wrow(const struct mk_kernel_args *a, const struct mk_chunk_launch *l, const struct mk_wdesc *w, uint32_t row,
           uint32_t n0, uint32_t N, uint32_t K, uint32_t r) {
    if (!SPLITROWS) return (const __nv_bfloat16 *)mk_row(w, min(row, w->rows - 1u));
    const uint32_t srow = SILU ? (r < BN / 2u ? 0u : N) + row : n0 + r;
    return (const __nv_bfloat16 *)((const float *)a->arena + l->w_off +
                                   (uint64_t)min(srow, (SILU ? 2u * N : N) - 1u) * K);
}

/* Whether those rows go by 16-byte copies (K % 8 == 0 and the rows 16-byte aligned). */
template <bool SPLITROWS>
__device__ __forceinline__ bool mk_mm_wvec(const struct mk_mm_mats *mm, const struct mk_chunk_launch *l, uint32_t K) {
    bool v = (K & 7u) == 0u;
    if constexpr (SPLITROWS) {
        v = v && (l->w_off & 3u) == 0u;
    } else {
        for (uint32_t q = 0; q < mm->n_mats; q++) v = v && mm->m[q].vec;
    }
    return v;
}

/* A barrier of the product threads (the first MK_BLOCK_THREADS): the _wide_xt blocks' copy warp
 * has left by the time their epilogue meets here. */
__device__ __forceinline__ void mk_mm_sync(void) { asm volatile("bar.sync 1, %0;" ::"n"(MK_BLOCK_THREADS) : "memory"); }

/* The end of a product block of BN weight rows from n0 by MK_MM_BM token rows from m0, whose sums
 * each(fn) hands out as fn(token row, tile column, sum) (token rows past l->m left out): a split's
 * raw sums to the partials, else the mode's epilogue. */
template <int MODE, uint32_t BN, typename Each, uint32_t BM = MK_MM_BM>
__device__ __forceinline__ void mk_mm_epilogue(const struct mk_kernel_args *a, const struct mk_chunk_launch *l,
                                               uint32_t n0, uint32_t N, uint32_t m0, uint32_t splits, Each each) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    float *y = (float *)a->arena + l->y_off;
    if (splits > 1u) {
        /* A split's raw sums to its (m, ldy) slice of the partials; mk_chunk_mm_reduce adds the
         * splits in order and applies the mode. SILU puts up's columns after gate's N. */
        float *py = y + (uint64_t)blockIdx.z * l->m * l->ldy;
        each([&](uint32_t mt, uint32_t cl, float v) {
            const uint32_t n = SILU ? (cl < BN / 2u ? n0 + cl : N + n0 + cl - BN / 2u) : n0 + cl;
            if ((SILU ? n0 + cl % (BN / 2u) : n) < N) py[(uint64_t)mt * l->ldy + n] = v;
        });
        return;
    }
    if constexpr (SILU) {
        /* Gate and up of an output sit in different warps: through shared memory (free after the
         * loop's last barrier). */
        float *gs = (float *)mk_chunk_smem; /* (BM, BN + 4) */
        constexpr uint32_t LG = BN + 4u;
        each([&](uint32_t mt, uint32_t cl, float v) { gs[(mt - m0) * LG + cl] = v; });
        mk_mm_sync();
        for (uint32_t k = threadIdx.x; k < BM * BN / 2u; k += MK_BLOCK_THREADS) {
            const uint32_t mt = k / (BN / 2u), r = k % (BN / 2u);
            if (m0 + mt >= l->m || n0 + r >= N) continue;
            const float gv = gs[mt * LG + r], uv = gs[mt * LG + BN / 2u + r];
            mk_split_store(y + (uint64_t)(m0 + mt) * l->ldy, l->ldy, n0 + r, gv / (1.0f + expf(-gv)) * uv);
        }
    } else {
        each([&](uint32_t mt, uint32_t cl, float v) {
            const uint32_t n = n0 + cl;
            if (n >= N) return;
            float *yn = y + (uint64_t)mt * l->ldy + n;
            *yn = MODE == MK_CHUNK_MM_STORE ? v : __ldcg(yn) + v;
        });
    }
}

/* The byte offset of 16-byte chunk c (columns 8c .. 8c + 7) of row r in a K-major tile of 64-byte
 * rows with the 64-byte swizzle (chunk c at c ^ (r / 2 % 4)), as the wgmma products read it. */
__device__ __forceinline__ uint32_t mk_wg_at(uint32_t r, uint32_t c) { return r * 64u + ((c ^ ((r >> 1) & 3u)) << 4); }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* sm_90a: the bf16 products on wgmma. A warpgroup (4 warps) multiplies the block's 64 token rows by
 * 128 of its weight rows per instruction, both operands read from shared memory by descriptor. */
#define MK_MM_WGMMA 1
/* sm_90a: a warpgroup gives up registers to the block's pool (dec) or takes them from it (inc);
 * every warp of the warpgroup runs it. */
template <uint32_t R> __device__ __forceinline__ void mk_setmaxnreg_dec(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <uint32_t R> __device__ __forceinline__ void mk_setmaxnreg_inc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

/* The descriptor of a K-major bf16 tile in shared memory from p: rows of 64 bytes (32 columns) with
 * the 64-byte swizzle (16-byte chunk c of row r at chunk c ^ (r / 2 % 4), mk_wg_at), 8-row groups
 * 512 bytes apart. Measured: whole 8 x 16-byte core matrices without swizzling ran the products at
 * under half this rate (BENCHMARKS.md, 2026-11-26). */
__device__ __forceinline__ uint64_t mk_wg_desc(const void *p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((s & 0x3ffffu) >> 4) | ((uint64_t)(16u >> 4) << 16) | ((uint64_t)(512u >> 4) << 32) |
           (2ull << 62);
}

/* mk_wg_desc for rows of 128 bytes (64 columns) with the 128-byte swizzle (16-byte chunk c of row r
 * at c ^ (r % 8), 8-row groups 1024 bytes apart), as the copy engine lays out its boxes. */
__device__ __forceinline__ uint64_t mk_wg_desc128(const void *p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((s & 0x3ffffu) >> 4) | ((uint64_t)(16u >> 4) << 16) | ((uint64_t)(1024u >> 4) << 32) |
           (1ull << 62);
}

/* The accumulator operands of a wgmma: 16 registers (d[i] .. d[i + 15]) per group, as constraints and
 * as the instruction's register list. */
#define MK_WG_D4(i)  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MK_WG_D16(i) MK_WG_D4(i), MK_WG_D4(i + 4), MK_WG_D4(i + 8), MK_WG_D4(i + 12)
#define MK_WG_R0     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define MK_WG_R1     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MK_WG_R2     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define MK_WG_R3     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MK_WG_R4     "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define MK_WG_R5     "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define MK_WG_R6     "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define MK_WG_R7     "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MK_WG_MMA_ASM(n, regs, descs)                                                                        \
    "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" n "k16.f32.bf16.bf16 {" regs \
    "}, " descs ", p, 1, 1, 0, 0;\n}"

/* d (64 x N, N / 2 floats a thread) += a (64 x 16) . b (N x 16)^T, N 128, 192 or 256. */
template <uint32_t N> __device__ __forceinline__ void mk_wg_mma(float *d, uint64_t da, uint64_t db) {
    static_assert(N == 128u || N == 192u || N == 256u, "the wgmma widths the products use");
    if constexpr (N == 128u)
        asm volatile(MK_WG_MMA_ASM("128", MK_WG_R0 ", " MK_WG_R1 ", " MK_WG_R2 ", " MK_WG_R3, "%64, %65")
                     : MK_WG_D16(0), MK_WG_D16(16), MK_WG_D16(32), MK_WG_D16(48)
                     : "l"(da), "l"(db));
    else if constexpr (N == 192u)
        asm volatile(MK_WG_MMA_ASM("192",
                                   MK_WG_R0 ", " MK_WG_R1 ", " MK_WG_R2 ", " MK_WG_R3 ", " MK_WG_R4 ", " MK_WG_R5,
                                   "%96, %97")
                     : MK_WG_D16(0), MK_WG_D16(16), MK_WG_D16(32), MK_WG_D16(48), MK_WG_D16(64), MK_WG_D16(80)
                     : "l"(da), "l"(db));
    else
        asm volatile(MK_WG_MMA_ASM("256",
                                   MK_WG_R0 ", " MK_WG_R1 ", " MK_WG_R2 ", " MK_WG_R3 ", " MK_WG_R4 ", " MK_WG_R5
                                            ", " MK_WG_R6 ", " MK_WG_R7,
                                   "%128, %129")
                     : MK_WG_D16(0), MK_WG_D16(16), MK_WG_D16(32), MK_WG_D16(48), MK_WG_D16(64), MK_WG_D16(80),
                       MK_WG_D16(96), MK_WG_D16(112)
                     : "l"(da), "l"(db));
}
#endif

/* Block (x, y, z): token rows [m0, m0 + BM) by weight rows [n0, n0 + BN), m0 = x BM, n0 = y BN
 * (token blocks side by side, so that a weight tile is read from memory once for all of them), BN
 * 64, 128 or 256. Warp (wm, wn) = (warp / 4, warp % 4) owns tokens wm*32 .. +32 (two m16 tiles) and
 * rows wn*BN/4 .. +BN/4 (BN/32 n8 tiles). Thread t loads 8 columns of token row t / 4 (a split row:
 * hi and lo as they are) and of weight rows t / 4 + 64 f per stage into shared memory ahead of the
 * tensor cores: asynchronous copies for x, bf16 weights and split rows in a ring of STAGES (with
 * two, the next stage's copies run while this one's products do), through registers for weights
 * decoded from blocks (two stages). One barrier per stage. Dynamic shared memory:
 * MK_CHUNK_MM_SMEM_AT(BN, STAGES, weight tiles per stage). */
/* Where a block's weight tiles come from. */
enum mk_mm_wsrc {
    MK_MM_W_DECODE = 0, /* any format, decoded and split by the block (BN 64) */
    MK_MM_W_RAW = 1,    /* bf16 weights, copied to the hi tile as they are (BN 256) */
    MK_MM_W_SPLIT = 2,  /* split rows at l->w_off that mk_chunk_wsplit decoded once (BN 256) */
};

template <int MODE, uint32_t BN, int WSRC, uint32_t STAGES, bool XLO = true>
__device__ __forceinline__ void mk_chunk_mm_body(const struct mk_kernel_args *a, const struct mk_chunk_launch *l) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    constexpr uint32_t BM = MK_MM_BM, BK = MK_MM_BK, LD = MK_MM_LD;
    constexpr int FW = (int)(BN / 64u), NJ = (int)(BN / 32u); /* weight fetches per thread, n8 tiles per warp */
    /* RAW takes bf16 weights only (the host launches it when every matrix is bf16): they go to the
     * hi tile as loaded, and a stage has no lo tile of weights. */
    constexpr bool RAW = WSRC == MK_MM_W_RAW, SPLITW = WSRC == MK_MM_W_SPLIT;
    static_assert(WSRC != MK_MM_W_DECODE || STAGES == 2u, "decoded tiles pass through registers");
    static_assert(XLO || WSRC == MK_MM_W_RAW, "only bf16 weights take x rounded to bf16 (!XLO)");
    /* Halves of a stage: x's hi and lo tiles, then w's hi (and lo unless RAW) from WB. */
    constexpr uint32_t XH = BM * LD, WH = BN * LD, WB = 2u * XH, STAGE = WB + (RAW ? 1u : 2u) * WH;
    static_assert(STAGES * STAGE * 2u <= MK_CHUNK_MM_SMEM_AT(BN, STAGES, RAW ? 1u : 2u) &&
                      4u * BM * (BN + 4u) <= MK_CHUNK_MM_SMEM_AT(BN, STAGES, RAW ? 1u : 2u),
                  "the host's shared memory holds the stages and SILU's results");
    __nv_bfloat16 *const sm = (__nv_bfloat16 *)mk_chunk_smem;
    struct mk_mm_mats mm = mk_mm_launch_mats(a, l, SILU);
    if (RAW && !mm.exact) __trap();
    if (SPLITW) mm.exact = false;
    struct mk_mm_place pl;
    if (!mk_mm_place_of<SILU, BN>(&mm, l, &pl)) return;
    const uint32_t N = pl.N, K = pl.K, n0 = pl.n0, m0 = pl.m0, splits = pl.splits, kb = pl.kb, ke = pl.ke;
    const float *x = (const float *)a->arena + l->x_off;
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, g = lane >> 2, t4 = lane & 3u;
    const uint32_t wm = warp >> 2, wn = warp & 3u;

    /* This thread's loads: 8 columns from lk of token row lr and of weight rows lr + 64 f (lrow[f]
     * of lw[f]). */
    const uint32_t lr = tid >> 2, lk = (tid & 3u) * 8u;
    uint32_t lrow[FW];
    struct mk_wdesc lw[FW];
    const __nv_bfloat16 *wsh[FW]; /* RAW, SPLITW: the rows the copies take (mk_mm_wrow) */
#pragma unroll
    for (int f = 0; f < FW; f++) {
        const uint32_t r = lr + 64u * (uint32_t)f;
        lw[f] = mk_mm_pick<SILU, BN>(&mm, n0, r, &lrow[f]);
        wsh[f] = mk_mm_wrow<SILU, BN, SPLITW>(a, l, &lw[f], lrow[f], n0, N, K, r);
    }
    /* Token rows past m repeat row m - 1: only their own output rows, which are never stored, see
     * them. */
    const __nv_bfloat16 *xh = (const __nv_bfloat16 *)(x + (uint64_t)min(m0 + lr, l->m - 1u) * l->ldx);
    const bool xvec = (l->x_off & 3u) == 0 && (l->ldx & 7u) == 0; /* 16-byte copies of split rows */
    const bool wvec = mk_mm_wvec<SPLITW>(&mm, l, K);              /* else each stage's loads look again */

    /* 8 values from k of the split row at hi (its lo half ld later) into the tiles at sh and sl. */
    auto split8 = [&](__nv_bfloat16 *sh, __nv_bfloat16 *sl, const __nv_bfloat16 *hi, uint32_t ld, uint32_t k,
                      bool vec) {
        if (vec && k + 8u <= K) {
            mk_cp_async16(sh, hi + k, 16u);
            mk_cp_async16(sl, hi + ld + k, 16u);
            return;
        }
        mk_mm_split_copy8(sh, sl, hi, ld, k, K);
    };
    /* This thread's x and, for bf16 weights and split rows, w of the stage from k0 into st. */
    auto issue = [&](uint32_t k0, __nv_bfloat16 *st) {
        const uint32_t k = k0 + lk;
        if constexpr (XLO) {
            split8(st + lr * LD + lk, st + XH + lr * LD + lk, xh, l->ldx, k, xvec);
        } else if (xvec && k + 8u <= K) {
            mk_cp_async16(st + lr * LD + lk, xh + k, 16u);
        } else {
            mk_mm_hi_copy8(st + lr * LD + lk, xh, k, K);
        }
        if constexpr (SPLITW) {
#pragma unroll
            for (int f = 0; f < FW; f++) {
                __nv_bfloat16 *d = st + WB + (lr + 64u * (uint32_t)f) * LD + lk;
                split8(d, d + WH, wsh[f], K, k, wvec);
            }
        }
        if constexpr (RAW) {
#pragma unroll
            for (int f = 0; f < FW; f++) {
                __nv_bfloat16 *d = st + WB + (lr + 64u * (uint32_t)f) * LD + lk;
                if (wvec && k < K) { /* K % 8 == 0: the 8 columns are in the row */
                    mk_cp_async16(d, wsh[f] + k, 16u);
                } else {
                    *(uint4 *)d = mk_mm_fetch_raw_at<SILU, BN>(a, l, n0, lr + 64u * (uint32_t)f, k);
                }
            }
        }
    };
    /* Weights decoded from blocks: into registers, then split into the stage. */
    float wv[FW][8];
    auto fetch_w = [&](uint32_t k0) {
#pragma unroll
        for (int f = 0; f < FW; f++) mk_mm_fetch_w<BN == 64u>(&lw[f], lrow[f], k0 + lk, wv[f]);
    };
    auto store_w = [&](__nv_bfloat16 *st) {
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int f = 0; f < FW; f++) {
            const uint32_t r = lr + 64u * (uint32_t)f;
            mk_mm_split<4>(wv[f], hi, lo);
            *(uint4 *)(st + WB + r * LD + lk) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *(uint4 *)(st + WB + WH + r * LD + lk) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
    };

    float acc[2][NJ][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    /* ldmatrix row addresses: A (16x16 of x) row lane % 16, column 8 * (lane / 16); B (two n8 tiles
     * by k16 of w) row 8 * (lane / 16) + lane % 8, column 8 * ((lane / 8) % 2). */
    const uint32_t a_off = (wm * 32u + (lane & 15u)) * LD + (lane >> 4) * 8u;
    const uint32_t b_off = (wn * (BN / 4u) + (lane >> 4) * 8u + (lane & 7u)) * LD + ((lane >> 3) & 1u) * 8u;
    /* The products of the stage at st. */
    auto mma_stage = [&](const __nv_bfloat16 *st) {
#pragma unroll
        for (uint32_t kk = 0; kk < BK; kk += 16u) {
            uint32_t ah[2][4], al[2][4], bh[NJ * 2], bl[NJ * 2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mk_ldsm_x4(ah[i], st + a_off + (uint32_t)i * 16u * LD + kk);
                if (XLO) mk_ldsm_x4(al[i], st + XH + a_off + (uint32_t)i * 16u * LD + kk);
            }
#pragma unroll
            for (int j = 0; j < NJ; j += 2) mk_ldsm_x4(bh + 2 * j, st + WB + b_off + (uint32_t)j * 8u * LD + kk);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < NJ; j++) {
                    mk_mma_bf16(acc[i][j], ah[i], bh + 2 * j);
                    if (XLO) mk_mma_bf16(acc[i][j], al[i], bh + 2 * j);
                }
            if (!RAW && !mm.exact) {
#pragma unroll
                for (int j = 0; j < NJ; j += 2)
                    mk_ldsm_x4(bl + 2 * j, st + WB + WH + b_off + (uint32_t)j * 8u * LD + kk);
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int j = 0; j < NJ; j++) mk_mma_bf16(acc[i][j], ah[i], bl + 2 * j);
            }
        }
    };
    if constexpr (STAGES == 2u) {
        /* Two stages: the next stage's copies (and decoded weights, through registers) go out
         * while this one's products run, one barrier per stage. */
        if (kb < ke) {
            issue(kb, sm);
            if (WSRC == MK_MM_W_DECODE) {
                fetch_w(kb);
                store_w(sm);
            }
        }
        mk_cp_async_wait_all();
        __syncthreads();
        uint32_t cur = 0;
        for (uint32_t k0 = kb; k0 < ke; k0 += BK) {
            const bool more = k0 + BK < ke;
            if (more) {
                issue(k0 + BK, sm + (cur ^ 1u) * STAGE);
                if (WSRC == MK_MM_W_DECODE) fetch_w(k0 + BK);
            }
            mma_stage(sm + cur * STAGE);
            if (more && WSRC == MK_MM_W_DECODE) store_w(sm + (cur ^ 1u) * STAGE);
            mk_cp_async_wait_all();
            __syncthreads();
            cur ^= 1u;
        }
    } else {
        /* A ring of STAGES: copies run STAGES - 1 stages ahead of the products, one group of
         * copies per stage (empty past the end, so that the count of groups stays in step). The
         * barrier at the top of a stage also frees the stage the products left last time, which
         * this stage's copies fill. */
        uint32_t kn = kb;
#pragma unroll
        for (uint32_t s = 0; s + 1u < STAGES; s++, kn += BK) {
            if (kn < ke) issue(kn, sm + s * STAGE);
            mk_cp_async_commit();
        }
        uint32_t cur = 0, nxt = STAGES - 1u;
        for (uint32_t k0 = kb; k0 < ke; k0 += BK, kn += BK) {
            mk_cp_async_wait_group<STAGES - 2u>();
            __syncthreads();
            if (kn < ke) issue(kn, sm + nxt * STAGE);
            mk_cp_async_commit();
            mma_stage(sm + cur * STAGE);
            cur = cur + 1u == STAGES ? 0u : cur + 1u;
            nxt = nxt + 1u == STAGES ? 0u : nxt + 1u;
        }
        mk_cp_async_wait_all();
        __syncthreads(); /* SILU's epilogue reuses the stages */
    }

    /* fn(token row, tile column, sum) for each of this thread's sums in the block's rows. */
    auto each = [&](auto fn) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e2 = 0; e2 < 2; e2++) {
                const uint32_t mt = m0 + wm * 32u + (uint32_t)i * 16u + g + 8u * (uint32_t)e2;
                if (mt >= l->m) continue;
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e1 = 0; e1 < 2; e1++)
                        fn(mt, wn * (BN / 4u) + (uint32_t)j * 8u + 2u * t4 + (uint32_t)e1, acc[i][j][2 * e2 + e1]);
            }
    };
    mk_mm_epilogue<MODE, BN>(a, l, n0, N, m0, splits, each);
}

#if defined(MK_MM_WGMMA)
/* The wgmma products' ring: stages of BK columns from kb to ke, STAGE bytes each at sm, copies
 * (issue(k0, stage)) STAGES - 2 ahead of the products (mma(stage)), one commit group of each per
 * stage (copies' groups empty past the end, so that the count stays in step). The tensor cores may
 * still read the stage before this one while the copies fill the one after the last in flight.
 * Two stages a barrier (4 ahead) measured slower over 512 tokens, faster over 128 (run74). */
template <uint32_t STAGES, uint32_t BK, uint32_t STAGE, typename Issue, typename Mma>
__device__ __forceinline__ void mk_wg_ring(uint8_t *sm, uint32_t kb, uint32_t ke, Issue issue, Mma mma) {
    constexpr uint32_t AHEAD = STAGES - 2u;
    uint32_t kn = kb;
#pragma unroll
    for (uint32_t s = 0; s < AHEAD; s++, kn += BK) {
        if (kn < ke) issue(kn, sm + s * STAGE);
        mk_cp_async_commit();
    }
    uint32_t cur = 0, nxt = AHEAD;
    for (uint32_t k0 = kb; k0 < ke; k0 += BK, kn += BK) {
        mk_cp_async_wait_group<AHEAD - 1u>();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* the copies, for the tensor cores */
        /* Past it every warpgroup has seen its products of two stages back finish: their stage
         * is the one the copies fill next. */
        __syncthreads();
        if (kn < ke) issue(kn, sm + nxt * STAGE);
        mk_cp_async_commit();
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        mma((const uint8_t *)(sm + cur * STAGE));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        cur = cur + 1u == STAGES ? 0u : cur + 1u;
        nxt = nxt + 1u == STAGES ? 0u : nxt + 1u;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    mk_cp_async_wait_all();
    __syncthreads(); /* SILU's epilogue reuses the stages */
}

/* The wide products (BN 256) on wgmma: the same block and loads as mk_chunk_mm_body's, the tiles
 * swizzled for the tensor cores (mk_wg_at), warpgroup g multiplying x's hi and lo tiles by weight
 * rows 128 g .. + 128: bf16 weights (MK_MM_W_RAW), or with SPLITW the hi and lo halves of split
 * rows (MK_MM_W_SPLIT; a third product, x hi by w lo, per step). */
template <int MODE, bool SPLITW>
__device__ __forceinline__ void mk_chunk_mm_wg(const struct mk_kernel_args *a, const struct mk_chunk_launch *l) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    /* A ring of 4 stages, copies 2 ahead: the tensor cores may still read the stage before this one
     * while the copies fill the one after next. Split rows' stages hold twice the weights: 3 stages,
     * copies 1 ahead. */
    constexpr uint32_t BM = MK_MM_BM, BN = 256u, BK = MK_MM_BK, STAGES = SPLITW ? 3u : 4u;
    constexpr uint32_t XB = BM * BK * 2u, WB = BN * BK * 2u, STAGE = 2u * XB + (SPLITW ? 2u : 1u) * WB; /* bytes */
    static_assert(STAGES * STAGE <= (SPLITW ? MK_CHUNK_MM_SPLIT_WG_SMEM : MK_CHUNK_MM_WIDE_SMEM),
                  "the products' shared memory holds the ring");
    uint8_t *const sm = (uint8_t *)mk_chunk_smem;
    const struct mk_mm_mats mm = mk_mm_launch_mats(a, l, SILU);
    if (!SPLITW && !mm.exact) __trap();
    struct mk_mm_place pl;
    if (!mk_mm_place_of<SILU, BN>(&mm, l, &pl)) return;
    const uint32_t N = pl.N, K = pl.K, n0 = pl.n0, m0 = pl.m0, splits = pl.splits, kb = pl.kb, ke = pl.ke;
    const float *x = (const float *)a->arena + l->x_off;
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const uint32_t lr = tid >> 2, lc = tid & 3u, lk = lc * 8u;
    const __nv_bfloat16 *wrow[4]; /* mk_mm_wrow */
    const bool wfast = mk_mm_wvec<SPLITW>(&mm, l, K);
#pragma unroll
    for (int f = 0; f < 4; f++) {
        uint32_t row;
        const uint32_t r = lr + 64u * (uint32_t)f;
        const struct mk_wdesc w = mk_mm_pick<SILU, BN>(&mm, n0, r, &row);
        wrow[f] = mk_mm_wrow<SILU, BN, SPLITW>(a, l, &w, row, n0, N, K, r);
    }
    const __nv_bfloat16 *xh = (const __nv_bfloat16 *)(x + (uint64_t)min(m0 + lr, l->m - 1u) * l->ldx);
    const bool xvec = (l->x_off & 3u) == 0 && (l->ldx & 7u) == 0;
    auto issue = [&](uint32_t k0, uint8_t *st) {
        const uint32_t k = k0 + lk;
        __nv_bfloat16 *dh = (__nv_bfloat16 *)(st + mk_wg_at(lr, lc)),
                      *dl = (__nv_bfloat16 *)(st + XB + mk_wg_at(lr, lc));
        if (xvec && k + 8u <= K) {
            mk_cp_async16(dh, xh + k, 16u);
            mk_cp_async16(dl, xh + l->ldx + k, 16u);
        } else {
            mk_mm_split_copy8(dh, dl, xh, l->ldx, k, K);
        }
#pragma unroll
        for (int f = 0; f < 4; f++) {
            uint8_t *d = st + 2u * XB + mk_wg_at(lr + 64u * (uint32_t)f, lc);
            if (SPLITW) {
                if (wfast && k < K) {
                    mk_cp_async16(d, wrow[f] + k, 16u);
                    mk_cp_async16(d + WB, wrow[f] + K + k, 16u);
                } else {
                    mk_mm_split_copy8((__nv_bfloat16 *)d, (__nv_bfloat16 *)(d + WB), wrow[f], K, k, K);
                }
            } else if (wfast && k < K) { /* K % 8 == 0: the 8 columns are in the row */
                mk_cp_async16(d, wrow[f] + k, 16u);
            } else {
                *(uint4 *)d = mk_mm_fetch_raw_at<SILU, BN>(a, l, n0, lr + 64u * (uint32_t)f, k);
            }
        }
    };
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    const uint32_t wg = warp >> 2;
    mk_wg_ring<STAGES, BK, STAGE>(sm, kb, ke, issue, [&](const uint8_t *st) {
#pragma unroll
        for (uint32_t kk = 0; kk < BK; kk += 16u) {
            /* k16 step kk starts kk * 2 bytes into the rows; warpgroup g's rows 8 KB into w's tile */
            const uint64_t db = mk_wg_desc(st + 2u * XB + wg * 8192u + kk * 2u);
            mk_wg_mma<128u>(acc, mk_wg_desc(st + kk * 2u), db);
            mk_wg_mma<128u>(acc, mk_wg_desc(st + XB + kk * 2u), db);
            if (SPLITW)
                mk_wg_mma<128u>(acc, mk_wg_desc(st + kk * 2u), mk_wg_desc(st + 2u * XB + WB + wg * 8192u + kk * 2u));
        }
    });
    /* Warp w of warpgroup g holds token rows 16 (w % 4) .. + 16 and weight rows 128 g .. + 128, as
     * 16 n8 tiles of mma's C layout. */
    auto each = [&](auto fn) {
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            const uint32_t mt = m0 + 16u * (warp & 3u) + (lane >> 2) + 8u * (uint32_t)e2;
            if (mt >= l->m) continue;
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int e1 = 0; e1 < 2; e1++)
                    fn(mt, 128u * wg + 8u * (uint32_t)i + 2u * (lane & 3u) + (uint32_t)e1, acc[4 * i + 2 * e2 + e1]);
        }
    };
    mk_mm_epilogue<MODE, BN>(a, l, n0, N, m0, splits, each);
}
/* The end of a block of the _wide_xb products (mk_chunk_mm_wx, mk_chunk_mm_tx), whose warp w of
 * warpgroup g holds token rows 64 g + 16 (w % 4) .. + 16 and all BN weight rows in acc, as BN / 8
 * n8 tiles of mma's C layout. */
template <int MODE, uint32_t BN>
__device__ __forceinline__ void mk_wx_epilogue(const struct mk_kernel_args *a, const struct mk_chunk_launch *l,
                                               const float *acc, uint32_t n0, uint32_t N, uint32_t m0,
                                               uint32_t splits) {
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, wg = warp >> 2;
    auto each = [&](auto fn) {
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            const uint32_t mt = m0 + 64u * wg + 16u * (warp & 3u) + (lane >> 2) + 8u * (uint32_t)e2;
            if (mt >= l->m) continue;
#pragma unroll
            for (int i = 0; i < (int)(BN / 8u); i++)
#pragma unroll
                for (int e1 = 0; e1 < 2; e1++)
                    fn(mt, 8u * (uint32_t)i + 2u * (lane & 3u) + (uint32_t)e1, acc[4 * i + 2 * e2 + e1]);
        }
    };
    mk_mm_epilogue<MODE, BN, decltype(each), MK_CHUNK_MM_XB_TOKENS>(a, l, n0, N, m0, splits, each);
}

/* The _wide_xb products on wgmma: x rounded to bf16 (its split rows' hi halves), so each token row
 * costs one product, not two, and a block takes MK_CHUNK_MM_XB_TOKENS token rows by BN weight rows:
 * warpgroup g multiplies token rows 64 g .. + 64 by all BN per m64nBNk16 instruction, twice the
 * products per byte a stage loads of mk_chunk_mm_wg's 64 x 256 blocks (whose loads from L2, not
 * the tensor cores, bound them once x's lo half was gone). A ring of MK_CHUNK_MM_XB_STAGES stages,
 * copies all but two of them ahead: with two ahead (run70) a stage's loads waited on L2 and memory
 * longer than its products took. BN 256, 192 or 128: one block per multiprocessor, so the host picks
 * the tile and splits whose blocks fill the waves best (mk_cuda_xb_plan). */
template <int MODE, uint32_t BN>
__device__ __forceinline__ void mk_chunk_mm_wx(const struct mk_kernel_args *a, const struct mk_chunk_launch *l) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    constexpr uint32_t BM = MK_CHUNK_MM_XB_TOKENS, BK = MK_MM_BK, STAGES = MK_CHUNK_MM_XB_STAGES;
    constexpr uint32_t XB = BM * BK * 2u, WB = BN * BK * 2u, STAGE = XB + WB; /* bytes */
    constexpr int FW = (int)(BN / 64u);                                       /* weight rows a thread copies a stage */
    static_assert(BN % 64u == 0u && BN <= MK_CHUNK_MM_WIDE_ROWS, "whole rows of the 256 threads' copies");
    static_assert(STAGES * STAGE <= MK_CHUNK_MM_XB_SMEM && 4u * BM * (BN + 4u) <= MK_CHUNK_MM_XB_SMEM,
                  "the products' shared memory holds the ring and SILU's results");
    uint8_t *const sm = (uint8_t *)mk_chunk_smem;
    const struct mk_mm_mats mm = mk_mm_launch_mats(a, l, SILU);
    if (!mm.exact) __trap();
    struct mk_mm_place pl;
    if (!mk_mm_place_of<SILU, BN, BM>(&mm, l, &pl)) return;
    const uint32_t N = pl.N, K = pl.K, n0 = pl.n0, m0 = pl.m0, splits = pl.splits, kb = pl.kb, ke = pl.ke;
    const float *x = (const float *)a->arena + l->x_off;
    const uint32_t tid = threadIdx.x, warp = tid >> 5;
    const uint32_t lr = tid >> 2, lc = tid & 3u, lk = lc * 8u;
    const __nv_bfloat16 *wrow[FW]; /* mk_mm_wrow */
    const bool wfast = mk_mm_wvec<false>(&mm, l, K);
#pragma unroll
    for (int f = 0; f < FW; f++) {
        uint32_t row;
        const uint32_t r = lr + 64u * (uint32_t)f;
        const struct mk_wdesc w = mk_mm_pick<SILU, BN>(&mm, n0, r, &row);
        wrow[f] = mk_mm_wrow<SILU, BN, false>(a, l, &w, row, n0, N, K, r);
    }
    /* Token rows lr and lr + 64; rows past m repeat row m - 1 (their outputs are never stored). */
    const __nv_bfloat16 *xh[2];
#pragma unroll
    for (int f = 0; f < 2; f++)
        xh[f] = (const __nv_bfloat16 *)(x + (uint64_t)min(m0 + lr + 64u * (uint32_t)f, l->m - 1u) * l->ldx);
    const bool xvec = (l->x_off & 3u) == 0 && (l->ldx & 7u) == 0;
    auto issue = [&](uint32_t k0, uint8_t *st) {
        const uint32_t k = k0 + lk;
#pragma unroll
        for (int f = 0; f < 2; f++) {
            __nv_bfloat16 *d = (__nv_bfloat16 *)(st + mk_wg_at(lr + 64u * (uint32_t)f, lc));
            if (xvec && k + 8u <= K)
                mk_cp_async16(d, xh[f] + k, 16u);
            else
                mk_mm_hi_copy8(d, xh[f], k, K);
        }
#pragma unroll
        for (int f = 0; f < FW; f++) {
            const uint32_t r = lr + 64u * (uint32_t)f;
            uint8_t *d = st + XB + mk_wg_at(r, lc);
            if (wfast && k < K) /* K % 8 == 0: the 8 columns are in the row */
                mk_cp_async16(d, wrow[f] + k, 16u);
            else
                *(uint4 *)d = mk_mm_fetch_raw_at<SILU, BN>(a, l, n0, r, k);
        }
    };
    float acc[BN / 2u];
#pragma unroll
    for (uint32_t i = 0; i < BN / 2u; i++) acc[i] = 0.0f;
    const uint32_t wg = warp >> 2;
    mk_wg_ring<STAGES, BK, STAGE>(sm, kb, ke, issue, [&](const uint8_t *st) {
#pragma unroll
        for (uint32_t kk = 0; kk < BK; kk += 16u)
            /* warpgroup g's token rows 64 * 64 bytes into x's tile; k16 step kk 2 kk bytes into the rows */
            mk_wg_mma<BN>(acc, mk_wg_desc(st + wg * 4096u + kk * 2u), mk_wg_desc(st + XB + kk * 2u));
    });
    mk_wx_epilogue<MODE, BN>(a, l, acc, n0, N, m0, splits);
}

/* mk_chunk_mm_wx with its stages brought in by the copy engine (the _wide_xt kernels): a warp of
 * its own (warp MK_BLOCK_WARPS, past the products' 256 threads, in a warpgroup that gives its
 * registers to theirs: MK_CHUNK_MM_TX_THREADS in all) asks for each stage's boxes (x's
 * MK_CHUNK_MM_XB_TOKENS token rows, then the tile's weight rows MK_CHUNK_MM_TX_ROWS at a time,
 * each box from the matrix that holds it), which land already swizzled and complete on the
 * stage's full barrier; each product warp arrives on the stage's empty barrier once its products
 * of it are done, and the copies into a stage wait for that. No product warp waits for another:
 * when thread 0 asked for the copies between its products, its warpgroup met the other's slowest
 * warp at every stage (Nsight Compute, thirtieth session: 0.19 eligible warps a scheduler). Rows of 128 bytes (64 columns a stage, the 128-byte swizzle): with
 * 64-byte rows, as mk_chunk_mm_wx takes them, the copy engine's boxes were slower than cp.async
 * over 512 tokens (llama-8b pp512 -29 %), and blocks in clusters of two sharing each weight box by
 * multicast slower still (BENCHMARKS.md, twenty-ninth session). */
template <int MODE, uint32_t BN>
__device__ __forceinline__ void mk_chunk_mm_tx(const struct mk_kernel_args *a, const struct mk_chunk_launch *l,
                                               const struct mk_chunk_tmaps *t) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    constexpr uint32_t BM = MK_CHUNK_MM_XB_TOKENS, RB = MK_CHUNK_MM_TX_ROW_BYTES, BK = RB / 2u;
    constexpr uint32_t XB = BM * RB, WB = BN * RB, STAGE = XB + WB; /* bytes */
    constexpr uint32_t STAGES = MK_CHUNK_MM_XB_SMEM / STAGE, PR = MK_CHUNK_MM_TX_ROWS, NP = BN / PR;
    static_assert(BN % PR == 0u && (BN / 2u) % PR == 0u, "whole boxes");
    static_assert(STAGES >= 3u && STAGES * STAGE + 16u * STAGES + 8u * NP <= MK_CHUNK_MM_XT_SMEM &&
                      4u * BM * (BN + 4u) <= STAGES * STAGE,
                  "the ring, its barriers and the boxes' table; SILU's results in the ring");
    static_assert(MK_CHUNK_MM_TX_THREADS == MK_BLOCK_THREADS + 128u, "the product warps and the copy warpgroup");
    /* Registers a thread: 168 at launch (ptxas's cap for 384 threads); the copy warpgroup keeps
     * COPY_REGS and the two product warpgroups take PRODUCT_REGS, which their BN / 2 accumulators
     * and SILU's epilogue need (at 168 it spilled 312 bytes; at 240, 28, after the loop). */
    constexpr uint32_t COPY_REGS = 24u, PRODUCT_REGS = 240u;
    static_assert(32u * (COPY_REGS + 2u * PRODUCT_REGS) <= 65536u / 4u,
                  "each of the four schedulers' register files holds a copy warp and two product warps");
    uint8_t *const sm = (uint8_t *)mk_chunk_smem;
    uint64_t *const full = (uint64_t *)(sm + STAGES * STAGE), *const empty = full + STAGES;
    uint32_t *const box_map = (uint32_t *)(empty + STAGES), *const box_row = box_map + NP;
    const struct mk_mm_mats mm = mk_mm_launch_mats(a, l, SILU);
    if (!mm.exact) __trap();
    struct mk_mm_place pl;
    if (!mk_mm_place_of<SILU, BN, BM, BK>(&mm, l, &pl)) {
        mk_grid_dep_wait();
        return;
    }
    const uint32_t N = pl.N, n0 = pl.n0, m0 = pl.m0, splits = pl.splits, kb = pl.kb;
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const uint32_t n = (pl.ke - kb + BK - 1u) / BK; /* stages; the last may run past K (zeros) */
    if (tid < NP) {
        /* Box tid: tile rows PR tid .. + PR, all in one matrix (the host checks the stacked
         * matrices' boundaries); rows past the matrix land as zeros. */
        const uint32_t r = PR * tid;
        uint32_t row = n0 + (SILU && r >= BN / 2u ? r - BN / 2u : r), q = SILU && r >= BN / 2u ? 1u : 0u;
        if (!SILU && mm.n_mats > 1u && row >= mm.m[0].rows) {
            row -= mm.m[0].rows;
            q = 1u;
            if (mm.n_mats > 2u && row >= mm.m[1].rows) row -= mm.m[1].rows, q = 2u;
        }
        box_map[tid] = q;
        box_row[tid] = row;
    }
    if (tid == 0)
        for (uint32_t s = 0; s < STAGES; s++) {
            mk_mbar_init(&full[s], 1u);
            mk_mbar_init(&empty[s], MK_BLOCK_WARPS); /* each product warp */
        }
    __syncthreads();
    if (warp >= MK_BLOCK_WARPS) {
        mk_setmaxnreg_dec<COPY_REGS>();
        if (warp > MK_BLOCK_WARPS) return;
        /* The copy warp's lane 0: stage j's boxes into its slot, once the slot's last readers
         * (stage j - STAGES) are done; then it leaves (the copies land on their own). The first
         * STAGES stages' weight boxes go before the wait for the kernel ahead: no kernel writes
         * the model's bf16 matrices (the only ones these kernels take), and a block that starts
         * beside the kernel ahead's last blocks fills its ring meanwhile. x waits. */
        if (lane == 0u) {
            const uint32_t pre = n < STAGES ? n : STAGES;
            auto weights = [&](uint32_t j) {
                const uint32_t s = j % STAGES;
                uint8_t *st = sm + s * STAGE;
                const int32_t k0 = (int32_t)(kb + j * BK);
                mk_mbar_expect(&full[s], STAGE);
#pragma unroll
                for (uint32_t p = 0; p < NP; p++)
                    mk_tma_load2(st + XB + p * PR * RB, &t->w[box_map[p]], k0, (int32_t)box_row[p], &full[s]);
            };
            for (uint32_t j = 0; j < pre; j++) weights(j);
            mk_grid_dep_wait();
            for (uint32_t j = 0; j < n; j++) {
                const uint32_t s = j % STAGES;
                if (j >= pre) {
                    mk_mbar_wait(&empty[s], (j / STAGES - 1u) & 1u);
                    weights(j);
                }
                mk_tma_load2(sm + s * STAGE, &t->x, (int32_t)(kb + j * BK), (int32_t)m0, &full[s]);
            }
        }
        return;
    }
    mk_grid_dep_wait(); /* before the epilogue's reads and writes of the activations */
    mk_setmaxnreg_inc<PRODUCT_REGS>();
    float acc[BN / 2u];
#pragma unroll
    for (uint32_t i = 0; i < BN / 2u; i++) acc[i] = 0.0f;
    const uint32_t wg = warp >> 2;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t s = i % STAGES;
        mk_mbar_wait(&full[s], (i / STAGES) & 1u);
        const uint8_t *st = sm + s * STAGE;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (uint32_t kk = 0; kk < BK; kk += 16u)
            /* warpgroup g's token rows 64 g rows into x's tile; k16 step kk 2 kk bytes into the rows */
            mk_wg_mma<BN>(acc, mk_wg_desc128(st + wg * 64u * RB + kk * 2u), mk_wg_desc128(st + XB + kk * 2u));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        /* This warp's products of stage i - 1 are done: its slot may take stage i + STAGES - 1. */
        if (i > 0u && lane == 0u) mk_mbar_arrive(&empty[(i - 1u) % STAGES]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    /* Every copy has landed (each was waited for): SILU's epilogue may reuse the ring. The copy
     * warp has left, so the product warps meet on a barrier of their own. */
    mk_mm_sync();
    mk_wx_epilogue<MODE, BN>(a, l, acc, n0, N, m0, splits);
}
#endif

/* BN 64 (mk_chunk_mm_*): twice the blocks, for weights decoded from blocks formats, whose decoding
 * wants more warps; the wide tiles (_wide, _split: 256 rows) feed each fragment of x to 8 n8 tiles,
 * bf16 weights in a ring of three stages, split rows (whose weight tiles are twice as large) in
 * two, so that two blocks share a multiprocessor (each measured on the H100, BENCHMARKS.md). */
#define MK_MM_KERNEL(name, mode, bn, wsrc, stages, xlo)                                         \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)                           \
        name(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        mk_grid_dep_wait();                                                                     \
        mk_chunk_mm_body<mode, bn, wsrc, stages, xlo>(&a, &l);                                  \
    }
#define MK_MM_KERNELS(suffix, bn, wsrc, stages, xlo)                                  \
    MK_MM_KERNEL(mk_chunk_mm_store##suffix, MK_CHUNK_MM_STORE, bn, wsrc, stages, xlo) \
    MK_MM_KERNEL(mk_chunk_mm_add##suffix, MK_CHUNK_MM_ADD, bn, wsrc, stages, xlo)     \
    MK_MM_KERNEL(mk_chunk_mm_silu##suffix, MK_CHUNK_MM_SILU, bn, wsrc, stages, xlo)
MK_MM_KERNELS(, MK_CHUNK_MM_ROWS, MK_MM_W_DECODE, 2u, true)
/* _wide_xb: the _wide products with x rounded to bf16 (its split rows' hi halves alone), for the
 * chunk programs' act_bf16_min (graph/program.h): half the tensor-core work; on sm_90a in blocks of
 * MK_CHUNK_MM_XB_TOKENS token rows (mk_chunk_mm_wx), elsewhere the _wide kernel's without the lo
 * products. */
#if defined(MK_MM_WGMMA)
#define MK_MM_WG_KERNEL(name, mode, splitw)                                                     \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)                           \
        name(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        mk_grid_dep_wait();                                                                     \
        mk_chunk_mm_wg<mode, splitw>(&a, &l);                                                   \
    }
MK_MM_WG_KERNEL(mk_chunk_mm_store_wide, MK_CHUNK_MM_STORE, false)
MK_MM_WG_KERNEL(mk_chunk_mm_add_wide, MK_CHUNK_MM_ADD, false)
MK_MM_WG_KERNEL(mk_chunk_mm_silu_wide, MK_CHUNK_MM_SILU, false)
MK_MM_WG_KERNEL(mk_chunk_mm_store_split, MK_CHUNK_MM_STORE, true)
MK_MM_WG_KERNEL(mk_chunk_mm_add_split, MK_CHUNK_MM_ADD, true)
MK_MM_WG_KERNEL(mk_chunk_mm_silu_split, MK_CHUNK_MM_SILU, true)
#define MK_MM_WX_KERNEL(name, mode, bn)                                                         \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 1)                           \
        name(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        mk_grid_dep_wait();                                                                     \
        mk_chunk_mm_wx<mode, bn>(&a, &l);                                                       \
    }
/* KERNEL's store, add and silu kernels mk_chunk_mm_{store,add,silu}_<form><suffix> of BN bn. */
#define MK_MM_MODE_KERNELS(KERNEL, form, suffix, bn)                \
    KERNEL(mk_chunk_mm_store_##form##suffix, MK_CHUNK_MM_STORE, bn) \
    KERNEL(mk_chunk_mm_add_##form##suffix, MK_CHUNK_MM_ADD, bn)     \
    KERNEL(mk_chunk_mm_silu_##form##suffix, MK_CHUNK_MM_SILU, bn)
MK_MM_MODE_KERNELS(MK_MM_WX_KERNEL, wide_xb, , 256u)
MK_MM_MODE_KERNELS(MK_MM_WX_KERNEL, wide_xb, 192, 192u)
MK_MM_MODE_KERNELS(MK_MM_WX_KERNEL, wide_xb, 128, 128u)
/* The copy engine's form (mk_chunk_mm_tx), its tensor maps the third parameter. */
#define MK_MM_TX_KERNEL(name, mode, bn)                                                                         \
    extern "C" __global__ void __launch_bounds__(MK_CHUNK_MM_TX_THREADS, 1)                                     \
        name(const __grid_constant__ struct mk_kernel_args a, const __grid_constant__ struct mk_chunk_launch l, \
             const __grid_constant__ struct mk_chunk_tmaps t) {                                                 \
        mk_chunk_mm_tx<mode, bn>(&a, &l, &t); /* it waits for the kernel ahead itself */                        \
    }
MK_MM_MODE_KERNELS(MK_MM_TX_KERNEL, wide_xt, , 256u)
MK_MM_MODE_KERNELS(MK_MM_TX_KERNEL, wide_xt, 192, 192u)
MK_MM_MODE_KERNELS(MK_MM_TX_KERNEL, wide_xt, 128, 128u)
#else
MK_MM_KERNELS(_wide, MK_CHUNK_MM_WIDE_ROWS, MK_MM_W_RAW, MK_CHUNK_MM_WIDE_STAGES, true)
MK_MM_KERNELS(_split, MK_CHUNK_MM_SPLIT_ROWS, MK_MM_W_SPLIT, 2u, true)
MK_MM_KERNELS(_wide_xb, MK_CHUNK_MM_WIDE_ROWS, MK_MM_W_RAW, MK_CHUNK_MM_WIDE_STAGES, false)
#endif

/* Thread t: 8 columns of a row of the stacked w0, w1, w2 (rows from 0, then w1's, then w2's),
 * decoded once into split rows at y_off (row r at y_off + r * cols floats), for the _split
 * products of a chunk step, whose blocks would otherwise each decode the same tiles. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_wsplit(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait(); /* the split rows it writes are what the product ahead reads */
    const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, false);
    const uint32_t K = mm.m[0].cols, groups = (K + 7u) / 8u;
    const uint64_t t = (uint64_t)blockIdx.x * MK_BLOCK_THREADS + threadIdx.x;
    if (t >= (uint64_t)mm.rows * groups) return;
    uint32_t row = (uint32_t)(t / groups);
    const uint32_t k = (uint32_t)(t % groups) * 8u;
    __nv_bfloat16 *hi = (__nv_bfloat16 *)((float *)a.arena + l.y_off + (uint64_t)row * K);
    const struct mk_wdesc w = mk_mm_which(&mm, &row);
    float v[8];
    mk_mm_fetch_w<true>(&w, row, k, v);
    if (k + 8u <= K && (l.y_off & 3u) == 0 && (K & 7u) == 0) {
        uint32_t h[4], lo[4];
        mk_mm_split<4>(v, h, lo);
        *(uint4 *)(hi + k) = make_uint4(h[0], h[1], h[2], h[3]);
        *(uint4 *)(hi + K + k) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        return;
    }
#pragma unroll
    for (uint32_t j = 0; j < 8u; j++)
        if (k + j < K) mk_split_store((float *)hi, K, k + j, v[j]);
}

/* Thread (n, i): output column n of token row i from the splits' partials at x_off (rows ldx
 * apart, split z at z * m * ldx), added in split order, then l.mode's epilogue (SILU: up's sums at
 * column ldx / 2 + n; its output rows are split rows). Grid: (columns / 256, m). */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_mm_reduce(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait();
    const bool silu = l.mode == MK_CHUNK_MM_SILU;
    const uint32_t n = blockIdx.x * MK_BLOCK_THREADS + threadIdx.x, i = blockIdx.y, N = silu ? l.ldx / 2u : l.ldx;
    if (n >= N) return;
    const float v = mk_chunk_part_sum(a, l, i, n), u = silu ? mk_chunk_part_sum(a, l, i, n + N) : 0.0f;
    float *y = (float *)a.arena + l.y_off + (uint64_t)i * l.ldy;
    if (l.mode == MK_CHUNK_MM_STORE)
        y[n] = v;
    else if (l.mode == MK_CHUNK_MM_ADD)
        y[n] = __ldcg(y + n) + v;
    else
        mk_split_store(y, l.ldy, n, v / (1.0f + expf(-v)) * u);
}

#endif
