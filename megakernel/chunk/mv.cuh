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
/* K-quant rows (Q4_K, Q5_K, Q6_K) go another way: a 32-column group is one sub-block (Q6_K: two of
 * 16), whose values are d sc q - dmin m with q a small integer (Q6_K: d sc (q - 32), no m), so the
 * mma takes q itself as A (exact in bf16: no lo half, no float decoding) and each group's sums are
 * scaled after it: d sc (q . x) - dmin m (sum of x over the group), the sums of x made once per
 * block. Decoding a lane's 8 values is a few integer operations, where the float decoding
 * (mk_q_value8, then hi and lo halves) bound the products (llama-1b Q4_K_M 8-token step: 3.4 ms of
 * products for 0.8 GB, about a hundred issue slots per weight at the H100's rate). A lane's 8
 * columns lie in one 16-column half, so Q6_K's two scales are two masked passes of the same mma. */
#define MK_KQ_NONE 0u
#define MK_KQ_4    1u /* Q4_K */
#define MK_KQ_5    2u /* Q5_K */
#define MK_KQ_6    3u /* Q6_K */

__device__ __forceinline__ uint32_t mk_kq_kind(const struct mk_wdesc *w) {
    const uint32_t align = (uint32_t)(((uintptr_t)w->ptr | w->row_bytes) & 7u);
    if (w->dtype == MK_DEV_Q4_K && !align) return MK_KQ_4;
    if (w->dtype == MK_DEV_Q5_K && !align) return MK_KQ_5;
    if (w->dtype == MK_DEV_Q6_K && !(align & 1u)) return MK_KQ_6; /* 210-byte blocks: 2-byte loads */
    return MK_KQ_NONE;
}

/* The raw bytes of a half super-block (128 columns, sub-blocks 4 hb .. 4 hb + 3) that one lane
 * needs of one row: its 8 columns of each sub-block and the super-block's scales.
 * Q4_K/Q5_K: q[p] the 8 bytes of sub-blocks 4 hb + 2 p (low nibbles) and + 1 (high), qh Q5_K's
 * fifth bits (bit j for sub-block j), dm the halves d and dmin, sw the 12 bytes of packed scales
 * and mins (mk_kq_half unpacks the round's half into sw[0..1]). Q6_K: q[p] the low-bit bytes of sub-blocks 4 hb + p and + 2 (high nibbles), qh their
 * high bits (2 bits per sub-block), sw[0..1] the 8 int8 scales of the half, dm d. */
struct mk_kq_raw {
    uint2 q[2], qh;
    uint32_t dm, sw[3];
};

/* 8 bytes from a 2-byte aligned address (Q6_K's 210-byte blocks). */
__device__ __forceinline__ uint2 mk_kq_ld8(const uint8_t *p) { return make_uint2(mk_w_w32(p), mk_w_w32(p + 4u)); }

__device__ __forceinline__ void mk_kq_fetch(struct mk_kq_raw *r, const uint8_t *row, uint32_t kind, uint32_t k0,
                                            uint32_t t4) {
    const uint32_t hb = (k0 >> 7) & 1u;
    if (kind == MK_KQ_6) {
        const uint8_t *b = row + 210u * (k0 >> 8);
        r->q[0] = mk_kq_ld8(b + 64u * hb + 8u * t4);
        r->q[1] = mk_kq_ld8(b + 64u * hb + 32u + 8u * t4);
        r->qh = mk_kq_ld8(b + 128u + 32u * hb + 8u * t4);
        const uint2 sc = mk_kq_ld8(b + 192u + 8u * hb);
        r->sw[0] = sc.x, r->sw[1] = sc.y, r->sw[2] = 0u;
        r->dm = __ldg((const uint16_t *)(b + 208u));
        return;
    }
    const bool five = kind == MK_KQ_5;
    const uint8_t *b = row + (five ? 176u : 144u) * (k0 >> 8);
    const uint8_t *qs = b + (five ? 48u : 16u) + 64u * hb + 8u * t4;
    r->q[0] = __ldg((const uint2 *)qs);
    r->q[1] = __ldg((const uint2 *)(qs + 32u));
    r->qh = five ? __ldg((const uint2 *)(b + 16u + 8u * t4)) : make_uint2(0u, 0u);
    r->dm = __ldg((const uint32_t *)b);
#pragma unroll
    for (int i = 0; i < 3; i++) r->sw[i] = __ldg((const uint32_t *)(b + 4u) + i);
}

/* Before a round's decoding (its bytes have arrived by then; unpacking at the fetch would wait for
 * them): a Q4_K/Q5_K r's sw[0], sw[1] become the 6-bit scales and mins of half hb's sub-blocks as
 * bytes of words, as Q6_K's sw already hold its half's scales. */
__device__ __forceinline__ void mk_kq_half(struct mk_kq_raw *r, uint32_t kind, uint32_t hb) {
    if (kind == MK_KQ_6) return;
    const uint32_t h[4] = { r->dm, r->sw[0], r->sw[1], r->sw[2] };
    r->sw[0] = mk_qmma_k4_scales(h, hb != 0u);
    r->sw[1] = mk_qmma_k4_mins(h, hb != 0u);
}

/* Sub-block j (0..7) of r's super-block: this lane's 8 values of q (Q6_K: q + 32) as bytes, columns
 * 8 t4 .. + 3 in lo and + 4 .. + 7 in hi. */
__device__ __forceinline__ void mk_kq_bytes(const struct mk_kq_raw *r, uint32_t kind, uint32_t j, uint32_t *lo,
                                            uint32_t *hi) {
    const bool six = kind == MK_KQ_6;
    const uint32_t kk = j & 3u;
    /* a select: an index would put r in local memory */
    const uint2 w = (six ? (kk & 1u) : (j & 2u)) ? r->q[1] : r->q[0];
    const uint32_t sh = six ? 2u * (kk & 2u) : 4u * (j & 1u);
    *lo = (w.x >> sh) & 0x0f0f0f0fu, *hi = (w.y >> sh) & 0x0f0f0f0fu;
    if (six) {
        *lo |= ((r->qh.x >> (2u * kk)) & 0x03030303u) << 4;
        *hi |= ((r->qh.y >> (2u * kk)) & 0x03030303u) << 4;
    } else {
        *lo |= ((r->qh.x >> j) & 0x01010101u) << 4;
        *hi |= ((r->qh.y >> j) & 0x01010101u) << 4;
    }
}

/* The scales of sub-block j's two 16-column halves (equal but for Q6_K) and its offset dmin m
 * (Q6_K: 0), r's scales as mk_kq_half left them. */
__device__ __forceinline__ void mk_kq_scales(const struct mk_kq_raw *r, uint32_t kind, uint32_t j, float *s0, float *s1,
                                             float *mn) {
    const uint32_t kk = j & 3u;
    if (kind == MK_KQ_6) {
        const float d = __half2float(__ushort_as_half((unsigned short)r->dm));
        const uint32_t sw = kk < 2u ? r->sw[0] : r->sw[1], b = 16u * (kk & 1u);
        *s0 = d * (float)(int8_t)(sw >> b);
        *s1 = d * (float)(int8_t)(sw >> (b + 8u));
        *mn = 0.0f;
        return;
    }
    const float2 dm = mk_qmma_h2f(r->dm);
    *s0 = *s1 = dm.x * (float)mk_qmma_byte(r->sw[0], kk);
    *mn = dm.y * (float)mk_qmma_byte(r->sw[1], kk);
}

/* Sub-block j of r's super-block: this lane's 8 values of q (Q6_K: q - 32) as 4 bf16 pairs
 * (columns 8 t4 + 2 i, + 1 in pair i), with mk_kq_scales. */
__device__ __forceinline__ void mk_kq_decode(const struct mk_kq_raw *r, uint32_t kind, uint32_t j, uint32_t *a,
                                             float *s0, float *s1, float *mn) {
    uint32_t lo, hi;
    mk_kq_bytes(r, kind, j, &lo, &hi);
    /* 0x4300 | q is the bf16 of 128 + q (q < 128): take 128 (Q6_K: 160) off, exactly. */
    const float off = kind == MK_KQ_6 ? 160.0f : 128.0f;
    const __nv_bfloat162 c = __floats2bfloat162_rn(off, off);
    const uint32_t pr[4] = { __byte_perm(lo, 0u, 0x4140u), __byte_perm(lo, 0u, 0x4342u), __byte_perm(hi, 0u, 0x4140u),
                             __byte_perm(hi, 0u, 0x4342u) };
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t v = pr[i] | 0x43004300u;
        const __nv_bfloat162 q = __hsub2(*(const __nv_bfloat162 *)&v, c);
        a[i] = *(const uint32_t *)&q;
    }
    mk_kq_scales(r, kind, j, s0, s1, mn);
}

/* Sub-block j of a lane's two rows (r[0]: row g, r[1]: g + 8) as the mma's A fragments over the
 * group's two k16 halves, with each row's scales and offset (mk_kq_decode). */
__device__ __forceinline__ void mk_kq_decode2(const struct mk_kq_raw *r, const uint32_t *kind, uint32_t j, uint32_t *a0,
                                              uint32_t *a1, float *s0, float *s1, float *mn) {
    uint32_t aq[2][4];
#pragma unroll
    for (int h = 0; h < 2; h++) mk_kq_decode(&r[h], kind[h], j, aq[h], &s0[h], &s1[h], &mn[h]);
    a0[0] = aq[0][0], a0[1] = aq[1][0], a0[2] = aq[0][1], a0[3] = aq[1][1];
    a1[0] = aq[0][2], a1[1] = aq[1][2], a1[2] = aq[0][3], a1[3] = aq[1][3];
}

/* A lane's two weight rows, r0 + g and r0 + g + 8 of the stacked space (SILU: gate rows, then up's
 * from N), each in its own matrix (w) and row there (wr); a row past r_end repeats the last and is
 * never stored. */
__device__ __forceinline__ void mk_mv_lane_rows(const struct mk_mm_mats *mm, bool silu, uint32_t r0, uint32_t r_end,
                                                uint32_t g, struct mk_wdesc *w, uint32_t *wr) {
    const uint32_t N = mm->rows;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t r = min(r0 + g + 8u * (uint32_t)h, r_end - 1u);
        if (silu) {
            w[h] = r < N ? mm->m[0] : mm->m[1];
            wr[h] = r < N ? r : r - N;
        } else {
            wr[h] = r;
            w[h] = mk_mm_which(mm, &wr[h]);
        }
    }
}

/* The tiles of a product of N rows (SILU: N gate rows, then N up rows), MK_CHUNK_MV_ROWS rows a tile,
 * 16 a warp (SILU: warps 0-3 gate, 4-7 up): how many tiles, where this warp's stacked rows end, and
 * this warp's first row of tile t, base + t step. */
struct mk_mv_tiles {
    uint32_t ntile, r_end, base, step;
};
__device__ __forceinline__ struct mk_mv_tiles mk_mv_tiles_of(bool silu, uint32_t N, uint32_t warp) {
    static_assert(MK_CHUNK_MV_ROWS == 16u * MK_BLOCK_WARPS && MK_BLOCK_WARPS == 8u,
                  "16 rows a warp, half the warps up");
    constexpr uint32_t HR = MK_CHUNK_MV_ROWS / 2u;
    struct mk_mv_tiles t;
    if (silu)
        t = { (N + HR - 1u) / HR, (warp < 4u ? 0u : N) + N, (warp < 4u ? 0u : N) + (warp & 3u) * 16u, HR };
    else
        t = { (N + MK_CHUNK_MV_ROWS - 1u) / MK_CHUNK_MV_ROWS, N, warp * 16u, MK_CHUNK_MV_ROWS };
    return t;
}

/* A lane's two rows of a block's 128 stacked rows from n0, 16 a warp (SILU: warps 0-3 gate's rows
 * from n0, 4-7 the same rows of up), for the K-quant products over many token rows: each row's
 * format (mk_kq_kind) and first byte, and the bytes of the first half super-block of columns
 * [kb, ke) in kr (the weights need not wait for the kernel ahead). Traps unless every row of the
 * warp is Q4_K, Q5_K or Q6_K of whole super-blocks. */
struct mk_kq_lane {
    uint32_t kind[2];
    const uint8_t *row[2];
};
__device__ __forceinline__ struct mk_kq_lane mk_kq_lane_of(const struct mk_mm_mats *mm, bool silu, uint32_t n0,
                                                           uint32_t K, uint32_t kb, uint32_t ke, uint32_t warp,
                                                           uint32_t lane, struct mk_kq_raw *kr) {
    const uint32_t g = lane >> 2, t4 = lane & 3u;
    const uint32_t N = mm->rows;
    const uint32_t r0 = silu ? (warp < 4u ? 0u : N) + n0 + (warp & 3u) * 16u : n0 + warp * 16u;
    const uint32_t r_end = silu ? (warp < 4u ? 0u : N) + N : N;
    struct mk_wdesc w[2];
    uint32_t wr[2];
    mk_mv_lane_rows(mm, silu, r0, r_end, g, w, wr);
    struct mk_kq_lane q;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        q.kind[h] = mk_kq_kind(&w[h]);
        q.row[h] = mk_row(&w[h], wr[h]);
    }
    if (!__all_sync(0xffffffffu, (K & 255u) == 0 && q.kind[0] != MK_KQ_NONE && q.kind[1] != MK_KQ_NONE)) __trap();
    if (kb < ke) {
#pragma unroll
        for (int h = 0; h < 2; h++) mk_kq_fetch(&kr[h], q.row[h], q.kind[h], kb, t4);
    }
    return q;
}

/* x's B fragments for one 32-column group (this lane's 8 columns of its token row from xp, their lo
 * half span later): hi and lo for the mma over the group's first and second k16. */
struct mk_mv_x {
    uint32_t h0[2], h1[2], l0[2], l1[2];
};
__device__ __forceinline__ struct mk_mv_x mk_mv_load_x(const __nv_bfloat16 *xp, uint32_t span) {
    const uint4 h = *(const uint4 *)xp, l = *(const uint4 *)(xp + span);
    return { { h.x, h.y }, { h.z, h.w }, { l.x, l.y }, { l.z, l.w } };
}
/* d += A . x over the group, A's k16 halves a0 and a1, x as hi plus lo. */
__device__ __forceinline__ void mk_mv_mma4(float *d, const uint32_t *a0, const uint32_t *a1, const struct mk_mv_x &x) {
    mk_mma_bf16(d, a0, x.h0);
    mk_mma_bf16(d, a1, x.h1);
    mk_mma_bf16(d, a0, x.l0);
    mk_mma_bf16(d, a1, x.l1);
}

/* EXACT: every matrix is bf16 (loaded as they are, no lo product); U: 32-column groups a warp
 * loads before it multiplies (bytes in flight, against registers: decoding takes many); KQ: every
 * matrix is a K-quant with whole super-blocks (the integer weights above; their own kernel, so that
 * the registers go to them). A block takes the tiles blockIdx.x, + gridDim.x, ... of its split's
 * columns, x brought to shared memory once for all of them: where the host gives the grid fewer
 * blocks than tiles (mk_cuda_chunk_mv, K-quants), narrow splits keep every block busy to the end
 * without each paying for x and its group sums per tile. */
template <bool EXACT, uint32_t U, bool KQ>
__device__ __forceinline__ void mk_chunk_mv_body(const struct mk_kernel_args &a, const struct mk_chunk_launch &l) {
    static_assert(MK_CHUNK_MV_KSTEP % (32u * U) == 0, "a split spans whole groups of loads");
    const bool silu = l.mode == MK_CHUNK_MM_SILU;
    const struct mk_mm_mats mm = mk_mm_launch_mats(&a, &l, silu);
    if (EXACT && !mm.exact) __trap();
    const uint32_t N = mm.rows, K = mm.m[0].cols, m = min(l.m, MK_CHUNK_MV_TOKENS);
    const uint32_t splits = l.splits > 1u ? l.splits : 1u, span = mk_chunk_mv_span(K, splits);
    const uint32_t kb = min(K, blockIdx.z * span), ke = min(K, kb + span), XLD = 2u * span + 8u;
    __nv_bfloat16 *xs = (__nv_bfloat16 *)mk_chunk_smem; /* (token, hi then lo, span): rows XLD apart */
    const uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, g = lane >> 2, t4 = lane & 3u;

    /* This warp's 16 rows of tile `tile`, and this lane's two of them, each in its own matrix of the
     * stack; a row past them repeats the last and is never stored. */
    const struct mk_mv_tiles tl = mk_mv_tiles_of(silu, N, warp);
    const uint32_t ntile = tl.ntile, r_end = tl.r_end;
    auto first_row = [&](uint32_t tile) { return tl.base + tile * tl.step; };
    struct mk_wdesc w[2];
    uint32_t wr[2];
    mk_mv_lane_rows(&mm, silu, first_row(blockIdx.x), r_end, g, w, wr);
    /* bf16 rows whose columns are all there load as they are; the rest through mk_mm_fetch_*. */
    const uint4 *const wp[2] = { (const uint4 *)mk_row(&w[0], wr[0]) + t4, (const uint4 *)mk_row(&w[1], wr[1]) + t4 };
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
    /* With a Q6_K row among the warp's, the integer weights go in two masked passes (a scale per
     * half group). */
    static_assert(!(KQ && EXACT), "one or the other");
    uint32_t kind[2] = { KQ ? mk_kq_kind(&w[0]) : MK_KQ_NONE, KQ ? mk_kq_kind(&w[1]) : MK_KQ_NONE };
    const uint8_t *krow[2] = { mk_row(&w[0], wr[0]), mk_row(&w[1], wr[1]) };
    /* Every row of a K-quant launch is one of the three with whole super-blocks (one check for the
     * block's first tile: the stacked matrices are the same for all). */
    if (KQ && !__all_sync(0xffffffffu, (K & 255u) == 0 && kind[0] != MK_KQ_NONE && kind[1] != MK_KQ_NONE)) __trap();
    struct mk_kq_raw kr[2];

    /* The first weights do not wait for x. */
    uint4 ah[U][2], al[U][2] = {};
    if (kb < ke) {
        if (KQ) {
#pragma unroll
            for (int h = 0; h < 2; h++) mk_kq_fetch(&kr[h], krow[h], kind[h], kb, t4);
        } else {
            load(kb, ah, al);
        }
    }
    mk_grid_dep_wait();

    /* x: 8 columns a thread at a time; token rows past m and columns past K are zero. For the
     * integer weights, each token row's sum of x over each 32-column group too, xsum[(group, token
     * row)] after x (MK_CHUNK_MV_SMEM's last part): the four threads of a group add their eight
     * columns' hi and lo, then meet by shuffles. */
    const uint32_t nt = (m + 7u) / 8u; /* n8 tiles of token rows */
    const uint32_t tr = 8u * nt;
    float *xsum = (float *)(xs + tr * XLD);
    const bool xvec = (l.x_off & 3u) == 0 && (l.ldx & 7u) == 0;
    static_assert(MK_CHUNK_MV_KSTEP % 32u == 0 && MK_BLOCK_THREADS % 32u == 0, "a group's four threads share a warp");
    for (uint32_t e = tid; e < 8u * nt * span / 8u; e += MK_BLOCK_THREADS) {
        const uint32_t i = e / (span / 8u), c = e % (span / 8u) * 8u, k = kb + c;
        const __nv_bfloat16 *hi = (const __nv_bfloat16 *)((const float *)a.arena + l.x_off + (uint64_t)i * l.ldx);
        __nv_bfloat16 *dh = xs + i * XLD + c;
        float s = 0.0f;
        if (i < m && xvec && k + 8u <= K) {
            const uint4 vh = *(const uint4 *)(hi + k), vl = *(const uint4 *)(hi + l.ldx + k);
            *(uint4 *)dh = vh;
            *(uint4 *)(dh + span) = vl;
            if (KQ) {
                const __nv_bfloat162 *ph = (const __nv_bfloat162 *)&vh, *pl = (const __nv_bfloat162 *)&vl;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float2 fh = __bfloat1622float2(ph[j]), fl = __bfloat1622float2(pl[j]);
                    s += (fh.x + fl.x) + (fh.y + fl.y);
                }
            }
        } else if (i < m) {
            mk_mm_split_copy8(dh, dh + span, hi, l.ldx, k, K);
            if (KQ) {
#pragma unroll
                for (int j = 0; j < 8; j++) s += __bfloat162float(dh[j]) + __bfloat162float(dh[span + j]);
            }
        } else {
            *(uint4 *)dh = *(uint4 *)(dh + span) = make_uint4(0, 0, 0, 0);
        }
        if (KQ) {
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if ((c & 31u) == 0u) xsum[(c / 32u) * tr + i] = s;
        }
    }
    __syncthreads();

    const __nv_bfloat16 *xrow = xs + g * XLD + 8u * t4;
    float *y = (float *)a.arena + l.y_off + (uint64_t)blockIdx.z * m * l.ldy;
    const bool add = l.mode == MK_CHUNK_MM_ADD && splits == 1u;
    auto run_tile = [&](uint32_t tile) {
        float acc[2][4] = {};
        if (KQ) {
            const bool halves = __any_sync(0xffffffffu, kind[0] == MK_KQ_6 || kind[1] == MK_KQ_6);
            /* The next tile's rows, whose first bytes load during this tile's last round. */
            const uint32_t next = tile + gridDim.x;
            uint32_t nkind[2] = { kind[0], kind[1] };
            const uint8_t *nrow[2] = { krow[0], krow[1] };
            /* A half super-block (4 groups) a round, the next one's bytes loading meanwhile. */
            for (uint32_t k0 = kb; k0 < ke; k0 += 128u) {
                struct mk_kq_raw cur[2] = { kr[0], kr[1] };
#pragma unroll
                for (int h = 0; h < 2; h++) mk_kq_half(&cur[h], kind[h], (k0 >> 7) & 1u);
                if (k0 + 128u < ke) {
#pragma unroll
                    for (int h = 0; h < 2; h++) mk_kq_fetch(&kr[h], krow[h], kind[h], k0 + 128u, t4);
                } else if (next < ntile) {
                    /* The matrices again from the launch: kept from the start, they cost registers. */
                    const struct mk_mm_mats nm = mk_mm_launch_mats(&a, &l, silu);
                    struct mk_wdesc nw[2];
                    uint32_t nwr[2];
                    mk_mv_lane_rows(&nm, silu, first_row(next), r_end, g, nw, nwr);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        nkind[h] = mk_kq_kind(&nw[h]), nrow[h] = mk_row(&nw[h], nwr[h]);
                        mk_kq_fetch(&kr[h], nrow[h], nkind[h], kb, t4);
                    }
                }
#pragma unroll
                for (uint32_t u = 0; u < 4u; u++) {
                    uint32_t a0[4], a1[4];
                    float s0[2], s1[2], mn[2];
                    mk_kq_decode2(cur, kind, ((k0 >> 5) & 7u) + u, a0, a1, s0, s1, mn);
                    /* Halves: pass 0 takes the lanes of columns 0-15 (t4 < 2), pass 1 the others. */
                    const uint32_t keep0 = !halves || t4 < 2u ? ~0u : 0u, keep1 = ~keep0;
#pragma unroll
                    for (uint32_t t = 0; t < 2u; t++) {
                        if (t >= nt) break;
                        const struct mk_mv_x x = mk_mv_load_x(xrow + t * 8u * XLD + k0 - kb + 32u * u, span);
                        float q[4] = {}, r[4] = {};
                        if (!halves) {
                            mk_mv_mma4(q, a0, a1, x);
                        } else {
                            const uint32_t b0[4] = { a0[0] & keep0, a0[1] & keep0, a0[2] & keep0, a0[3] & keep0 },
                                           b1[4] = { a1[0] & keep0, a1[1] & keep0, a1[2] & keep0, a1[3] & keep0 },
                                           c0[4] = { a0[0] & keep1, a0[1] & keep1, a0[2] & keep1, a0[3] & keep1 },
                                           c1[4] = { a1[0] & keep1, a1[1] & keep1, a1[2] & keep1, a1[3] & keep1 };
                            mk_mv_mma4(q, b0, b1, x);
                            mk_mv_mma4(r, c0, c1, x);
                        }
                        const float2 xg = *(const float2 *)(xsum + ((k0 - kb) / 32u + u) * tr + 8u * t + 2u * t4);
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            acc[t][e] += s0[e >> 1] * q[e] + s1[e >> 1] * r[e] - mn[e >> 1] * ((e & 1) ? xg.y : xg.x);
                    }
                }
            }
            kind[0] = nkind[0], kind[1] = nkind[1], krow[0] = nrow[0], krow[1] = nrow[1];
        } else {
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
                        const struct mk_mv_x x = mk_mv_load_x(xrow + t * 8u * XLD + k0 - kb + 32u * u, span);
                        mk_mv_mma4(acc[t], a0, a1, x);
                        if (!EXACT) {
                            mk_mma_bf16(acc[t], l0, x.h0);
                            mk_mma_bf16(acc[t], l1, x.h1);
                        }
                    }
                }
            }
        }

        /* acc[t]: (row g, token 8 t + 2 t4), (g, .. + 1), (g + 8, 8 t + 2 t4), (g + 8, .. + 1). */
        const uint32_t rt = first_row(tile);
#pragma unroll
        for (uint32_t t = 0; t < 2u; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const uint32_t r = rt + g + 8u * (uint32_t)(e >> 1), i = 8u * t + 2u * t4 + (uint32_t)(e & 1);
                if (r >= r_end || i >= m) continue;
                float *yp = y + (uint64_t)i * l.ldy + r;
                *yp = add ? __ldcg(yp) + acc[t][e] : acc[t][e];
            }
    };
    /* Only the K-quant kernel takes several tiles (the others' registers hold no more). */
    if (KQ) {
        for (uint32_t tile = blockIdx.x; tile < ntile; tile += gridDim.x) run_tile(tile);
    } else if (blockIdx.x < ntile) {
        run_tile(blockIdx.x);
    }
}

extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)
    mk_chunk_mv(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mv_body<false, 1u, false>(a, l);
}
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)
    mk_chunk_mv_bf16(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mv_body<true, 4u, false>(a, l);
}
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, 2)
    mk_chunk_mv_kq(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mv_body<false, 1u, true>(a, l);
}

#endif
