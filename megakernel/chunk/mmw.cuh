/* mk_chunk_mm_*_kw: a chunk step's products of K-quant matrices over hundreds of token rows on wgmma, each lane's weights decoded to f16 in registers (no decoded copy of the matrix). */
#ifndef MK_CHUNK_MMW_CUH
#define MK_CHUNK_MMW_CUH

#include <cuda_fp16.h>

#include "megakernel/chunk.h"
#include "megakernel/chunk/mm.cuh"
#include "megakernel/chunk/mv.cuh"

/* Why: past 128 token rows the K-quant products went through split rows (every matrix decoded to
 * bf16 hi and lo, 4 bytes a weight, then three wgmma products a tile), because the integers'
 * mma.sync kernel (mmq.cuh), latency bound, lost to them there; this kernel beats both from 65
 * token rows (the host's MK_CUDA_KQ_MAX; BENCHMARKS.md, run104-run107). Here the weights are wgmma's A
 * operand straight from registers: each lane loads its quantized bytes (mk_kq_fetch) half a
 * super-block ahead and turns each pair into f16 sc q with one byte permute and one half2 fma; x
 * is B, from shared memory by descriptor, as the f16 hi and lo rows that mk_chunk_xh wrote once
 * per product. Two products a tile (x hi and x lo) and no weight copy through memory.
 *
 * Precision: sc q is exact in f16 for Q4_K and Q5_K (at most 63 x 31), and so is Q6_K's
 * sc (q - 32) up to 2048 (past it, odd values round by one in 2^12). x = hi + lo holds 22 bits, scaled per token row by a
 * power of two (its largest value to 128 .. 256; the sums are scaled back after) so that it
 * neither overflows nor goes subnormal. Each super-block's sums (acc_sb) are scaled by its d in
 * fp32 into the running sums; the offsets - dmin m (sum of x over each group) join them through
 * one more pair of k16 steps a super-block: A the offsets as f16 hi and lo, B each token row's
 * group sums as hi and lo (mk_chunk_xh makes them from the fp32 x). Measured against the CPU
 * executor (cuda_test chunk, tiny-hd128, chunks of 136 and 192): largest relative logit error
 * 2.6e-4 (Q4_K_M), 2.7e-4 (Q5_K_M), 7.5e-4 (Q6_K), where the split rows' products give 1.4e-5;
 * more than these roundings explain (Q6_K's large products, or the tensor cores' own f16
 * accumulation: not separated), within the tests' 1e-3, tokens equal.
 *
 * Lane (g, t4) of a warp holds 8 neighbouring columns 8 t4 .. + 7 of each 32-column group of its
 * weight rows g and g + 8 (mk_kq_decode's order): the group's k16 step u takes columns
 * 8 t4 + 4 u + {0, 1} as its k pair 2 t4 and 8 t4 + 4 u + {2, 3} as its pair 2 t4 + 8. The
 * tensor cores read x's k in that order, so mk_chunk_xh stores each group permuted to it
 * (mk_kw_src). */

/* The x column that group position p (0..31) of the permuted rows holds. */
__device__ __forceinline__ uint32_t mk_kw_src(uint32_t p) {
    const uint32_t u = p >> 4, s = p & 15u;
    return 8u * ((s & 7u) >> 1) + 4u * u + 2u * (s >> 3) + (s & 1u);
}

__device__ __forceinline__ uint32_t mk_kw_h2(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *(const uint32_t *)&h;
}

/* mk_chunk_xh's layout, read by the _kw kernels too: the stage of token block tb and half
 * super-block (128 columns) h of a product over K columns, and the 2^e of each token row after
 * all stages. */
__device__ __forceinline__ uint8_t *mk_xh_stage(float *base, uint32_t K, uint32_t tb, uint32_t h) {
    return (uint8_t *)base + ((uint64_t)tb * (K / MK_CHUNK_MMW_KS) + h) * MK_CHUNK_MMW_STAGE_BYTES;
}
__device__ __forceinline__ float *mk_xh_scales(float *base, uint32_t m, uint32_t K) {
    return (float *)mk_xh_stage(base, K, MK_CHUNK_XH_ROWS(m) / MK_CHUNK_MMW_TOKENS, 0);
}

/* Block x: token row x of the split rows at l.x_off (l.ldx apart; K = l.ldx columns) scaled by
 * 2^-e (e: that of the row's largest value, less 8) as f16 hi and lo, each 32-column group
 * permuted by mk_kw_src, straight into the _kw kernels' stages at l.y_off: for each block of
 * MK_CHUNK_MMW_TOKENS token rows and MK_CHUNK_MMW_KS columns, MK_CHUNK_MMW_STAGE_BYTES holding
 * the hi tiles of its 4 groups, their lo tiles and (used with a super-block's second half) a tile
 * of each row's group sums (8 hi halves, then 8 lo), all as mk_wg_at places them; then 2^e per
 * row as floats. Rows from l.m to the whole token block are zeros. So a stage is one bulk copy. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_xh(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    constexpr uint32_t BM = MK_CHUNK_MMW_TOKENS, KS = MK_CHUNK_MMW_KS, GB = BM * 64u;
    static_assert(MK_CHUNK_MMW_STAGE_BYTES == 9u * GB && KS == 4u * 32u, "4 hi, 4 lo and a sums tile a stage");
    mk_grid_dep_wait();
    const uint32_t K = l.ldx, i = blockIdx.x, tid = threadIdx.x, r = i % BM;
    const bool live = i < l.m;
    const __nv_bfloat16 *hi =
        (const __nv_bfloat16 *)((const float *)a.arena + l.x_off + (uint64_t)min(i, l.m - 1u) * l.ldx);
    float *base = (float *)a.arena + l.y_off;
    __shared__ float most[MK_BLOCK_WARPS];
    float m = 0.0f;
    for (uint32_t k = tid; k < K && live; k += MK_BLOCK_THREADS) m = fmaxf(m, fabsf(mk_split_load(hi, K, k)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((tid & 31u) == 0) most[tid >> 5] = m;
    __syncthreads();
    m = most[0];
#pragma unroll
    for (uint32_t w = 1; w < MK_BLOCK_WARPS; w++) m = fmaxf(m, most[w]);
    int e = 0;
    if (m > 0.0f && isfinite(m)) {
        frexpf(m, &e); /* m = f 2^e, f in [0.5, 1) */
        e = max(-120, min(120, e - 8));
    }
    const float inv = live ? ldexpf(1.0f, -e) : 0.0f;
    /* A thread a group: position pairs (p, p + 1) hold source columns (c, c + 1). */
    for (uint32_t g0 = 32u * tid; g0 < K; g0 += 32u * MK_BLOCK_THREADS) {
        uint8_t *st = mk_xh_stage(base, K, i / BM, g0 / KS) + (g0 % KS / 32u) * GB;
        float sum = 0.0f;
#pragma unroll 4
        for (uint32_t p = 0; p < 32u; p += 2u) {
            const uint32_t c = g0 + mk_kw_src(p), at = mk_wg_at(r, p / 8u) + 2u * (p % 8u);
            const float v0 = mk_split_load(hi, K, c) * inv, v1 = mk_split_load(hi, K, c + 1u) * inv;
            const __half2 h = __floats2half2_rn(v0, v1);
            const float2 hf = __half22float2(h);
            *(uint32_t *)(st + at) = *(const uint32_t *)&h;
            *(uint32_t *)(st + 4u * GB + at) = mk_kw_h2(v0 - hf.x, v1 - hf.y);
            sum += v0 + v1;
        }
        const __half sh = __float2half_rn(sum);
        /* The sums tile of the super-block's second half. */
        uint8_t *ss = mk_xh_stage(base, K, i / BM, g0 / 256u * 2u + 1u) + 8u * GB;
        const uint32_t gi = g0 / 32u % 8u;
        *(__half *)(ss + mk_wg_at(r, 0) + 2u * gi) = sh;
        *(__half *)(ss + mk_wg_at(r, 1) + 2u * gi) = __float2half_rn(sum - __half2float(sh));
    }
    if (tid == 0 && live) mk_xh_scales(base, l.m, K)[i] = ldexpf(1.0f, e);
}

#if defined(MK_MM_WGMMA)
/* d (64 x 128, 64 floats a thread) = (first ? 0 : d) + a (64 x 16 f16, this warp's 16 rows in
 * mma's A layout) . b (128 x 16 f16 from shared memory)^T. */
__device__ __forceinline__ void mk_wg_mma_rf16(float *d, const uint32_t *a, uint64_t db, bool first) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, "
        "%33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "
        "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"((uint32_t)first));
}

/* Sub-block j of a lane's row as f16: 4 pairs (columns 8 t4 + 2 i, + 1 in pair i) of sc q (Q6_K:
 * sc (q - 32)), the integer scale of the lane's 16-column half. */
__device__ __forceinline__ void mk_kw_decode(const struct mk_kq_raw *r, uint32_t kind, uint32_t j, uint32_t t4,
                                             uint32_t *a) {
    uint32_t lo, hi;
    mk_kq_bytes(r, kind, j, &lo, &hi);
    const uint32_t pr[4] = { __byte_perm(lo, 0x64u, 0x4140u), __byte_perm(lo, 0x64u, 0x4342u),
                             __byte_perm(hi, 0x64u, 0x4140u), __byte_perm(hi, 0x64u, 0x4342u) };
    /* 0x64 above q makes the f16 1024 + q (q < 1024). */
    if (kind == MK_KQ_6) {
        const uint32_t kk = j & 3u, sw = kk < 2u ? r->sw[0] : r->sw[1];
        const int sc = (int8_t)(sw >> (16u * (kk & 1u) + 8u * (t4 >> 1)));
        const __half2 s2 = __float2half2_rn((float)sc), off = __float2half2_rn(1056.0f);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __half2 v = __hmul2(__hsub2(*(const __half2 *)&pr[i], off), s2);
            a[i] = *(const uint32_t *)&v;
        }
        return;
    }
    /* (1024 + q) sc - 1024 sc in one rounding: sc q itself (at most 1953). */
    const float sc = (float)mk_qmma_byte(r->sw[0], j & 3u);
    const __half2 s2 = __float2half2_rn(sc), c2 = __float2half2_rn(-1024.0f * sc);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 v = __hfma2(*(const __half2 *)&pr[i], s2, c2);
        a[i] = *(const uint32_t *)&v;
    }
}

/* Block (x, y, z): token rows [BM x, + BM), weight rows [128 y, + 128) of the stacked space (SILU:
 * 64 gate rows from 64 y and the same rows of up: warpgroup 0 gate, 1 up), columns of split z in
 * whole super-blocks. Warp w holds 16 weight rows by the BM token rows. x (mk_chunk_xh's, from
 * l.x_off) comes to shared memory half a super-block a stage: its hi and lo tiles (4 groups of BM
 * rows by 64 bytes each) and, for a super-block's second half, the token rows' group sums (a
 * tile of 16 halves a row), one bulk copy by thread 0 a stage, two stages ahead. Each stage has a
 * "full" barrier (its bytes landed) and an "empty" one (every warp done reading it), so that a
 * warp waits only for the stage it needs (with copies by every thread and a block barrier each
 * half, llama-8b Q4_K_M pp512 ran 8,800 tok/s; this way 10,300, run117/run118). Quarters of a
 * super-block take their A from two register sets by turns, one decoded while the other
 * multiplies. BM 128 (MK_CHUNK_MMW_TOKENS) beat 64 (llama-1b Q4_K_M pp512 44,457 against 38,670
 * tok/s, run101/run103): half the decoding a product. */
template <int MODE>
__device__ __forceinline__ void mk_chunk_mm_kw(const struct mk_kernel_args &a, const struct mk_chunk_launch &l) {
    constexpr bool SILU = MODE == MK_CHUNK_MM_SILU;
    /* 3 stages of 72 KB, copies 2 ahead: a stage is refilled once every warp has finished the
     * products that read it. */
    constexpr uint32_t BM = MK_CHUNK_MMW_TOKENS, BN = MK_CHUNK_MMW_ROWS, KS = MK_CHUNK_MMW_KS, ST = 3u, AHEAD = ST - 1u;
    constexpr uint32_t NR = BM / 2u;                                    /* sums a thread */
    constexpr uint32_t GB = BM * 64u, STAGE = MK_CHUNK_MMW_STAGE_BYTES; /* bytes: a 32-column tile; a stage */
    static_assert(BN == 16u * MK_BLOCK_WARPS && BM == 128u && KS / 8u == 16u &&
                      ST * STAGE + 2u * ST * 8u <= MK_CHUNK_MMW_SMEM && BM * (BN + 4u) * 4u <= MK_CHUNK_MMW_SMEM,
                  "16 rows a warp, n128 tiles; the ring and SILU's epilogue fit");
    const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, SILU);
    struct mk_mm_place pl;
    if (!mk_mm_place_of<SILU, BN, BM, 2u * KS>(&mm, &l, &pl)) return;
    const uint32_t N = pl.N, K = pl.K, n0 = pl.n0, m0 = pl.m0, splits = pl.splits, kb = pl.kb, ke = pl.ke;
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, g = lane >> 2, t4 = lane & 3u;

    struct mk_kq_raw kr[2];
    const struct mk_kq_lane ql = mk_kq_lane_of(&mm, SILU, n0, K, kb, ke, warp, lane, kr); /* rows g, g + 8 */
    const uint32_t *kind = ql.kind;
    const uint8_t *const *krow = ql.row;
    mk_grid_dep_wait(); /* the weights did not wait for the kernel ahead; x does */

    uint8_t *const sm = (uint8_t *)mk_chunk_smem;
    /* x's stages as mk_chunk_xh laid them out, this block's token rows from column kb on; each
     * half super-block one bulk copy (the first half without the sums tile). */
    const uint32_t nst = (ke - kb) / KS, nsb = nst / 2u; /* halves, whole super-blocks */
    float *const xbase = (float *)a.arena + l.x_off;
    const uint8_t *xst = mk_xh_stage(xbase, K, m0 / BM, kb / KS);
    const float *xscale = mk_xh_scales(xbase, l.m, K);
    /* The ring's barriers (bytes landed; every warp done reading) after the stages: static shared
     * memory would move the stages off the 512-byte alignment that the swizzle's address bits need. */
    uint64_t *const full = (uint64_t *)(sm + ST * STAGE), *const empty = full + ST;
    if (tid == 0) {
#pragma unroll
        for (uint32_t s = 0; s < ST; s++) mk_mbar_init(&full[s], 1u), mk_mbar_init(&empty[s], MK_BLOCK_WARPS);
    }
    __syncthreads();
    /* Thread 0: half it into its stage. */
    auto issue = [&](uint32_t it) {
        const uint32_t bytes = (it & 1u) ? STAGE : 8u * GB;
        mk_mbar_expect(&full[it % ST], bytes);
        mk_bulk_copy(sm + (it % ST) * STAGE, xst + (uint64_t)it * STAGE, bytes, &full[it % ST]);
    };
    if (tid == 0)
        for (uint32_t it = 0; it < AHEAD && it < nst; it++) issue(it);
    float acc[NR], sb[NR]; /* the running sums; the super-block's sums */
#pragma unroll
    for (uint32_t i = 0; i < NR; i++) acc[i] = sb[i] = 0.0f;
    uint32_t av[2][16];      /* (quarter's parity, group v: step 0's 4 registers, step 1's 4) */
    uint32_t mh[2], ml[2];   /* the offsets of groups 2 t4, + 1 of rows g, g + 8: hi and lo pairs */
    float dn[2], dp[2];      /* d of rows g, g + 8: this super-block's, the one before's */
    struct mk_kq_raw cur[2]; /* this half's bytes, unpacked */
    /* Super-block s in quarters of two groups, each a commit group of wgmma. Before a quarter
     * decodes into its registers the group two back (their last reader) has finished (wait 1);
     * quarter 0 waits for the super-block before to finish, adds its sums, d acc_sb, to acc (its
     * offsets went into acc by wgmma), then overwrites acc_sb. */
    for (uint32_t s = 0; s < nsb; s++) {
#pragma unroll
        for (uint32_t qi = 0; qi < 4u; qi++) {
            const uint32_t h = qi >> 1, it = 2u * s + h, k0 = kb + it * KS;
            const uint8_t *st = sm + (it % ST) * STAGE;
            /* A super-block's first quarter waits for all: the one before's last group reads the
             * offsets (mh, ml) that this quarter overwrites, and its sums (acc_sb) go into acc
             * below. (Waiting only for the group two back let that group read the new offsets, a
             * race that the block barrier of each half used to hide: BENCHMARKS.md, run116.) */
            if (qi == 0u)
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            else
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            /* This warp's products of the half before have finished: its stage may be refilled
             * (with half it + 2) once every warp has said so. */
            if ((qi & 1u) && it > 0u && lane == 0) mk_mbar_arrive(&empty[(it - 1u) % ST]);
            if ((qi & 1u) && tid == 0 && it + AHEAD < nst) {
                if (it > 0u) mk_mbar_wait(&empty[(it - 1u) % ST], ((it - 1u) / ST) & 1u);
                issue(it + AHEAD);
            }
            __syncwarp(); /* lane 0's branches rejoin before the warp-wide wgmma instructions */
            if ((qi & 1u) == 0) {
                mk_mbar_wait(&full[it % ST], (it / ST) & 1u);
                __syncwarp(); /* the lanes may leave the spin at different turns */
                cur[0] = kr[0], cur[1] = kr[1];
#pragma unroll
                for (int r = 0; r < 2; r++) mk_kq_half(&cur[r], kind[r], h);
                if (k0 + KS < ke) {
#pragma unroll
                    for (int r = 0; r < 2; r++) mk_kq_fetch(&kr[r], krow[r], kind[r], k0 + KS, t4);
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    if (h == 0u) {
                        dp[r] = dn[r];
                        dn[r] = kind[r] == MK_KQ_6 ? __half2float(__ushort_as_half((unsigned short)cur[r].dm))
                                                   : mk_qmma_h2f(cur[r].dm).x;
                    }
                    if (h == (t4 >> 1)) { /* this lane's two groups lie in this half */
                        float s0, s1, m0v, m1v;
                        mk_kq_scales(&cur[r], kind[r], 2u * t4, &s0, &s1, &m0v);
                        mk_kq_scales(&cur[r], kind[r], 2u * t4 + 1u, &s0, &s1, &m1v);
                        const __half2 hh = __floats2half2_rn(-m0v, -m1v);
                        const float2 hf = __half22float2(hh);
                        mh[r] = *(const uint32_t *)&hh;
                        ml[r] = mk_kw_h2(-m0v - hf.x, -m1v - hf.y);
                    }
                }
            }
            uint32_t *a4 = av[qi & 1u];
#pragma unroll
            for (uint32_t v = 0; v < 2u; v++) {
                uint32_t q[2][4];
#pragma unroll
                for (int r = 0; r < 2; r++) mk_kw_decode(&cur[r], kind[r], 2u * qi + v, t4, q[r]);
                uint32_t *dst = a4 + 8u * v;
                dst[0] = q[0][0], dst[1] = q[1][0], dst[2] = q[0][1], dst[3] = q[1][1];
                dst[4] = q[0][2], dst[5] = q[1][2], dst[6] = q[0][3], dst[7] = q[1][3];
            }
            if (qi == 0u && s > 0u) {
#pragma unroll
                for (uint32_t i = 0; i < NR; i++) acc[i] = fmaf(dp[(i >> 1) & 1u], sb[i], acc[i]);
            }
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (uint32_t v = 0; v < 2u; v++)
#pragma unroll
                for (uint32_t e = 0; e < 2u; e++) {
                    const uint32_t u = 2u * (qi & 1u) + v; /* the group's tile in the stage */
                    mk_wg_mma_rf16(sb, a4 + 8u * v + 4u * e, mk_wg_desc(st + u * GB + 32u * e),
                                   qi == 0u && v == 0u && e == 0u);
                    mk_wg_mma_rf16(sb, a4 + 8u * v + 4u * e, mk_wg_desc(st + (4u + u) * GB + 32u * e), false);
                }
            if (qi == 3u) {
                const uint32_t ah[4] = { mh[0], mh[1], mh[0], mh[1] }, al[4] = { ml[0], ml[1], ml[0], ml[1] };
                const uint64_t ds = mk_wg_desc(st + 8u * GB);
                mk_wg_mma_rf16(acc, ah, ds, false);
                mk_wg_mma_rf16(acc, al, ds, false);
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (nsb > 0u) {
#pragma unroll
        for (uint32_t i = 0; i < NR; i++) acc[i] = fmaf(dn[(i >> 1) & 1u], sb[i], acc[i]);
    }
    __syncthreads(); /* SILU's epilogue reuses the stages, every copy consumed */
    /* acc[4 i + 2 e2 + e1]: weight row 16 w + g + 8 e2 (the tile column, as mk_mm_epilogue counts
     * them; SILU: up's after gate's BN / 2) by token row 8 i + 2 t4 + e1, scaled back by the row's
     * 2^e. */
    auto each = [&](auto fn) {
#pragma unroll
        for (uint32_t i = 0; i < BM / 8u; i++)
#pragma unroll
            for (uint32_t e1 = 0; e1 < 2u; e1++) {
                const uint32_t mt = m0 + 8u * i + 2u * t4 + e1;
                if (mt >= l.m) continue;
                const float s = xscale[mt];
#pragma unroll
                for (uint32_t e2 = 0; e2 < 2u; e2++) fn(mt, 16u * warp + g + 8u * e2, s * acc[4u * i + 2u * e2 + e1]);
            }
    };
    mk_mm_epilogue<MODE, BN, decltype(each), BM>(&a, &l, n0, N, m0, splits, each);
}
#endif

/* One block a multiprocessor (about 250 registers a thread, 216 KB of stages); built for sm_90a
 * only, elsewhere a trap that the host never launches (it takes these on cc 9.0 alone). */
#if defined(MK_MM_WGMMA)
#define MK_MM_KW_BODY(mode) mk_chunk_mm_kw<mode>(a, l)
#else
#define MK_MM_KW_BODY(mode) __trap()
#endif
#define MK_MM_KW_KERNEL(name, mode)                                                             \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 1)                           \
        name(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        MK_MM_KW_BODY(mode);                                                                    \
    }
MK_MM_KW_KERNEL(mk_chunk_mm_store_kw, MK_CHUNK_MM_STORE)
MK_MM_KW_KERNEL(mk_chunk_mm_add_kw, MK_CHUNK_MM_ADD)
MK_MM_KW_KERNEL(mk_chunk_mm_silu_kw, MK_CHUNK_MM_SILU)

#endif
