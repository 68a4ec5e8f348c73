/* K-quant matvec rows on the tensor cores: 16 weight rows at a time against x's int8 levels (mma m16n8k32 s8). */
#ifndef MK_QMMA_CUH
#define MK_QMMA_CUH

/* Included by common.cuh after struct mk_qseg. Why: the dp4a path (quant8.cuh) spends about 175
 * instructions on 32 weights of one row (three levels of x, a dot, a combine and the scales per
 * lane), so at one block of 8 warps per SM the K-quant products were bound by issue, not by memory
 * (llama-1b Q4_K_M: 0.47-0.62 TB/s). One mma multiplies 16 rows by a 32-element group for all
 * three levels of x (B's columns 0-2; Q6_K's two 16-element scales use columns 3-5 for the second
 * half), exactly as the integer dots did, so results agree with the dp4a path to float rounding.
 *
 * Fragments (PTX ISA, mma.m16n8k32 .s8): lane = 4 g + c holds A bytes of rows g and g + 8 at k =
 * 4c .. 4c + 3 and 16 + 4c .. 16 + 4c + 3, B bytes of column g at the same k, and C at rows g,
 * g + 8, columns 2c, 2c + 1. The sum runs over k, so any order of k serves as long as A and B
 * agree: lane c's k slots carry elements 8c .. 8c + 7 of the group, which are 8 neighbouring
 * bytes (one 64-bit load) of a K-quant's nibbles and of x's levels.
 *
 * The 32-element formats stay on dp4a: their lane-unit dot is already cheap (no sub-block scales
 * to decode), and the same tiles measured slower on llama-1b (Q8_0 1.29 -> 2.14 ms, Q4_0 1.16 ->
 * 1.72 ms per token, BENCHMARKS.md 2026-11-25). */

#define MK_QMMA_ROWS 16u

/* The formats that take the tiles (-DMK_NO_QMMA: none, the dp4a path for every format, to compare). */
__device__ __forceinline__ bool mk_qmma_type(uint32_t t) {
#ifdef MK_NO_QMMA
    (void)t;
    return false;
#else
    return t == MK_DEV_Q4_K || t == MK_DEV_Q5_K || t == MK_DEV_Q6_K;
#endif
}

/* tests/qmma_host_test.cc compiles the tiles as host C++ (MK_QMMA_HOST) with a 32-thread model of
 * the warp in place of the mma, the shared-memory loads and the block-level driver below. */
#ifndef MK_QMMA_HOST
__device__ __forceinline__ void mk_mma_s8(int *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

/* x's quants and groups are in shared memory; generic loads of them cost an address-space check. */
__device__ __forceinline__ uint2 mk_lds64(uint32_t a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ uint32_t mk_lds32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
/* A word's two halves (a K-quant super-block's d and dmin) as floats. */
__device__ __forceinline__ float2 mk_qmma_h2f(uint32_t w) { return __half22float2(*(const __half2 *)&w); }
__device__ __forceinline__ uint4 mk_lds128(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

#endif

/* The value of a group's three level sums times its scale (quant8.cuh's d * mk_xq_combine). */
__device__ __forceinline__ float mk_qmma_gsum(uint32_t grp, uint32_t G) {
    const uint4 v = mk_lds128(grp + 16u * G);
    const int s[3] = { (int)v.y, (int)v.z, (int)v.w };
    return __uint_as_float(v.x) * mk_xq_combine(s);
}

/* Byte k (0..3) of w, unsigned. */
__device__ __forceinline__ uint32_t mk_qmma_byte(uint32_t w, uint32_t k) { return (w >> (8u * k)) & 255u; }

/* A Q4_K or Q5_K super-block's 6-bit scales, and its mins, from its header words h[1..3] (bytes
 * 4-15, ggml's get_scale_min_k4) as bytes of a word: those of sub-blocks 0-3, or of 4-7 (hi). */
__device__ __forceinline__ uint32_t mk_qmma_k4_scales(const uint32_t *h, bool hi) {
    return hi ? (h[3] & 0x0f0f0f0fu) | ((h[1] >> 2) & 0x30303030u) : h[1] & 0x3f3f3f3fu;
}
__device__ __forceinline__ uint32_t mk_qmma_k4_mins(const uint32_t *h, bool hi) {
    return hi ? ((h[3] >> 4) & 0x0f0f0f0fu) | ((h[2] >> 2) & 0x30303030u) : h[2] & 0x3f3f3f3fu;
}

/* One Q4_K or Q5_K super-block of rows g and g + 8 as this lane reads it: header words (d, dmin,
 * scales, mins), its 8 bytes of each 32-byte quant chunk, and for Q5_K its 8 bytes of the high bits. */
struct mk_qk45_raw {
    uint32_t h0[4], h8[4], q0[8], q8[8], e0[2], e8[2];
};

/* ... from global memory (b0, b8: the rows' super-block). */
template <bool FIVE>
__device__ __forceinline__ void mk_qmma_k45_load(const uint8_t *b0, const uint8_t *b8, struct mk_qk45_raw *w) {
    const uint32_t c = threadIdx.x & 3u, QS = FIVE ? 48u : 16u;
    mk_w_aligned<true, 4>(b0, w->h0);
    mk_w_aligned<true, 4>(b8, w->h8);
    MK_UNROLL
    for (int p = 0; p < 4; p++) {
        mk_w_aligned<true, 2>(b0 + QS + 32u * p + 8u * c, w->q0 + 2 * p);
        mk_w_aligned<true, 2>(b8 + QS + 32u * p + 8u * c, w->q8 + 2 * p);
    }
    if (FIVE) {
        mk_w_aligned<true, 2>(b0 + 16u + 8u * c, w->e0);
        mk_w_aligned<true, 2>(b8 + 16u + 8u * c, w->e8);
    }
}

/* Group s (0..7) of a Q4_K (FIVE: Q5_K) super-block of rows g and g + 8 as this lane's mma A
 * fragment: its 8 bytes of each row's quants, with Q5_K's fifth bits. */
template <bool FIVE> __device__ __forceinline__ void mk_qmma_k45_a(const struct mk_qk45_raw &w, int s, uint32_t *a) {
    const uint32_t p = (uint32_t)s >> 1, sh = 4u * ((uint32_t)s & 1u);
    a[0] = (w.q0[2 * p] >> sh) & 0x0f0f0f0fu, a[1] = (w.q8[2 * p] >> sh) & 0x0f0f0f0fu;
    a[2] = (w.q0[2 * p + 1] >> sh) & 0x0f0f0f0fu, a[3] = (w.q8[2 * p + 1] >> sh) & 0x0f0f0f0fu;
    if (FIVE) {
        a[0] |= ((w.e0[0] >> s) & 0x01010101u) << 4;
        a[1] |= ((w.e8[0] >> s) & 0x01010101u) << 4;
        a[2] |= ((w.e0[1] >> s) & 0x01010101u) << 4;
        a[3] |= ((w.e8[1] >> s) & 0x01010101u) << 4;
    }
}

/* Super-block sb of Q4_K (FIVE: Q5_K) rows g and g + 8 (words in w): adds this lane's share of each
 * row's dot to acc[0], acc[1] (the four lanes of a row sum later). xq, xg: shared addresses of x's
 * quants and groups. */
template <bool FIVE>
__device__ __forceinline__ void mk_qmma_k45_sb(const struct mk_qk45_raw &w, uint32_t sb, uint32_t xq, uint32_t xg,
                                               float *acc) {
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, c = lane & 3u;
    /* C column 2c holds level 0 (c = 0) or 2 (c = 1) and column 2c + 1 level 1 (c = 0) or none:
     * t = 254 C[2c] + C[2c + 1] weighs 1/254 or 1/254^3; columns 4-7 are empty. */
    const float tw = c == 0u ? 1.0f / MK_XQ_STEP : c == 1u ? 1.0f / (MK_XQ_STEP * MK_XQ_STEP * MK_XQ_STEP) : 0.0f;
    const bool bl = g < 3u;
    const uint32_t xqo = xq + 32u * (bl ? g : 0u) + 8u * c;
    const uint32_t *h0 = w.h0, *h8 = w.h8;
    /* 6-bit scales of sub-blocks 0-3 and 4-7, bytes of words; mins likewise. */
    const uint32_t s0[2] = { mk_qmma_k4_scales(h0, false), mk_qmma_k4_scales(h0, true) };
    const uint32_t s8[2] = { mk_qmma_k4_scales(h8, false), mk_qmma_k4_scales(h8, true) };
    float v0 = 0.0f, v8 = 0.0f;
    MK_UNROLL
    for (int s = 0; s < 8; s++) {
        const uint32_t G = 8u * sb + (uint32_t)s;
        const uint2 bx = mk_lds64(xqo + 96u * G);
        const uint32_t xb0 = bl ? bx.x : 0u, xb1 = bl ? bx.y : 0u;
        uint32_t a[4];
        mk_qmma_k45_a<FIVE>(w, s, a);
        int d[4];
        mk_mma_s8(d, a[0], a[1], a[2], a[3], xb0, xb1);
        const float dx = __uint_as_float(mk_lds128(xg + 16u * G).x) * tw;
        const int sc0 = (int)mk_qmma_byte(s0[s >> 2], (uint32_t)s & 3u);
        const int sc8 = (int)mk_qmma_byte(s8[s >> 2], (uint32_t)s & 3u);
        v0 += (float)((d[0] * 254 + d[1]) * sc0) * dx;
        v8 += (float)((d[2] * 254 + d[3]) * sc8) * dx;
    }
    /* Mins: lane c takes sub-blocks 2c and 2c + 1 (the four lanes of a row sum later). */
    const uint32_t m0w = mk_qmma_k4_mins(h0, c >= 2u), m8w = mk_qmma_k4_mins(h8, c >= 2u);
    float m0 = 0.0f, m8 = 0.0f;
    MK_UNROLL
    for (uint32_t e = 0; e < 2u; e++) {
        const uint32_t s = 2u * c + e;
        const float gs = mk_qmma_gsum(xg, 8u * sb + s);
        m0 += (float)mk_qmma_byte(m0w, s & 3u) * gs;
        m8 += (float)mk_qmma_byte(m8w, s & 3u) * gs;
    }
    const float2 d0 = mk_qmma_h2f(h0[0]), d8 = mk_qmma_h2f(h8[0]);
    acc[0] += d0.x * v0 - d0.y * m0;
    acc[1] += d8.x * v8 - d8.y * m8;
}

/* Rows pg (row g) and pg8 (row g + 8) over super-blocks [sb0, sb1) straight from global memory, the
 * next super-block's words loading during this one's products: with one block of 8 warps per
 * multiprocessor a warp that waited for each super-block in turn could not cover the latency
 * (2.4 % of a llama-8b Q4_K_M token; BENCHMARKS.md 2026-11-26, night). */
template <bool FIVE>
__device__ __forceinline__ void mk_qmma_k45(const uint8_t *pg, const uint8_t *pg8, uint32_t sb0, uint32_t sb1,
                                            uint32_t xq, uint32_t xg, float *acc) {
    const uint32_t BB = FIVE ? 176u : 144u;
    if (sb0 >= sb1) return;
    struct mk_qk45_raw w;
    mk_qmma_k45_load<FIVE>(pg + (uint64_t)sb0 * BB, pg8 + (uint64_t)sb0 * BB, &w);
    for (uint32_t sb = sb0; sb < sb1; sb++) {
        const struct mk_qk45_raw cur = w;
        if (sb + 1u < sb1) mk_qmma_k45_load<FIVE>(pg + (uint64_t)(sb + 1u) * BB, pg8 + (uint64_t)(sb + 1u) * BB, &w);
        mk_qmma_k45_sb<FIVE>(cur, sb, xq, xg, acc);
    }
}

/* Q6_K rows pg, pg8 over super-blocks [sb0, sb1), as mk_qmma_k45_sb does Q4_K. Each 32-element
 * group has two 16-element scales, so B's columns are (level, half): 0 (0, 0), 1 (1, 0), 2 (0, 1),
 * 3 (1, 1), 4 (2, 0), 6 (2, 1), 5 and 7 empty. Lane c's C columns 2c, 2c + 1 then share one half
 * (c & 1) and combine as Q4_K's do (t = 254 C[2c] + C[2c + 1]): one scale and one conversion per row
 * and group, where a column per level and half took four scales and four conversions.
 * |t| <= 255 * 16 * 32 * 127 < 2^24 and t times an int8 scale stays below 2^31. Loading the next
 * super-block during this one's products, as mk_qmma_k45 does, measured slower here (48 words a
 * lane; llama-1b Q6_K +2.5 %, llama-8b Q4_K_M +1.9 %). */
__device__ __forceinline__ void mk_qmma_k6(const uint8_t *pg, const uint8_t *pg8, uint32_t sb0, uint32_t sb1,
                                           uint32_t xq, uint32_t xg, float *acc) {
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, c = lane & 3u;
    /* Column g's level and half; the lane's k slots are elements 8c .. 8c + 7, in half c / 2. */
    const uint32_t lev = g == 4u || g == 6u ? 2u : g & 1u, half = g == 2u || g == 3u || g == 6u ? 1u : 0u;
    const bool bl = g != 5u && g != 7u && half == c >> 1;
    const uint32_t xqo = xq + 32u * lev + 8u * c;
    const float tw = c < 2u ? 1.0f / MK_XQ_STEP : 1.0f / (MK_XQ_STEP * MK_XQ_STEP * MK_XQ_STEP);
    const uint32_t hs = 8u * (c & 1u); /* the lane's half: byte 2kk + 1 of a scale word */
    for (uint32_t sb = sb0; sb < sb1; sb++) {
        const uint8_t *b0 = pg + (uint64_t)sb * 210u, *b8 = pg8 + (uint64_t)sb * 210u;
        uint32_t sc0[4], sc8[4];
        mk_w_words<4>(b0 + 192u, sc0);
        mk_w_words<4>(b8 + 192u, sc8);
        MK_UNROLL
        for (int i = 0; i < 4; i++) sc0[i] >>= hs, sc8[i] >>= hs;
        float v0 = 0.0f, v8 = 0.0f;
        MK_UNROLL
        for (uint32_t n = 0; n < 2u; n++) {
            uint32_t la0[2], lb0[2], hh0[2], la8[2], lb8[2], hh8[2];
            mk_w_words<2>(b0 + 64u * n + 8u * c, la0);
            mk_w_words<2>(b0 + 64u * n + 32u + 8u * c, lb0);
            mk_w_words<2>(b0 + 128u + 32u * n + 8u * c, hh0);
            mk_w_words<2>(b8 + 64u * n + 8u * c, la8);
            mk_w_words<2>(b8 + 64u * n + 32u + 8u * c, lb8);
            mk_w_words<2>(b8 + 128u + 32u * n + 8u * c, hh8);
            MK_UNROLL
            for (uint32_t kk = 0; kk < 4u; kk++) {
                const uint32_t G = 8u * sb + 4u * n + kk;
                const uint2 bx = mk_lds64(xqo + 96u * G);
                const uint32_t xb0 = bl ? bx.x : 0u, xb1 = bl ? bx.y : 0u;
                uint32_t a[4];
                MK_UNROLL
                for (int k = 0; k < 2; k++) {
                    const uint32_t l0 = kk & 1u ? lb0[k] : la0[k], l8 = kk & 1u ? lb8[k] : la8[k];
                    const uint32_t q0 = kk < 2u ? l0 & 0x0f0f0f0fu : (l0 >> 4) & 0x0f0f0f0fu;
                    const uint32_t q8 = kk < 2u ? l8 & 0x0f0f0f0fu : (l8 >> 4) & 0x0f0f0f0fu;
                    a[2 * k] = mk_q8_minus32(q0 | (((hh0[k] >> (2u * kk)) & 0x03030303u) << 4));
                    a[2 * k + 1] = mk_q8_minus32(q8 | (((hh8[k] >> (2u * kk)) & 0x03030303u) << 4));
                }
                int d[4];
                mk_mma_s8(d, a[0], a[1], a[2], a[3], xb0, xb1);
                const float dx = __uint_as_float(mk_lds128(xg + 16u * G).x) * tw;
                /* Scale 8n + 2kk + half: byte (2kk) % 4 of word (8n + 2kk) / 4, shifted by half. */
                const uint32_t wi = (8u * n + 2u * kk) >> 2, bi = (2u * kk) & 3u;
                const int s0 = (int)(int8_t)mk_qmma_byte(sc0[wi], bi), s8 = (int)(int8_t)mk_qmma_byte(sc8[wi], bi);
                v0 += (float)((d[0] * 254 + d[1]) * s0) * dx;
                v8 += (float)((d[2] * 254 + d[3]) * s8) * dx;
            }
        }
        acc[0] += mk_q_half(b0 + 208u) * v0;
        acc[1] += mk_q_half(b8 + 208u) * v8;
    }
}

/* The few-token tiles of a chunk step (megakernel/chunk/mv8.cuh): the weights are read once for NT
 * token rows, as the one-token tiles read them for one, instead of decoding them to bf16 with float
 * scales per group (mk_chunk_mv_kq, bound by those instructions: BENCHMARKS.md, twenty-second
 * session). x's image holds the NT token rows interleaved, so that a token's offset is a constant
 * of the load: token t's levels of group G at xq + 96 (NT G + t) (three levels of 32 bytes, as
 * mk_xq8's), its group entry at xg + 8 (NT G + t): the group's d and its sum d * mk_xq_combine(s)
 * (mk_qmma_xg_pack), the sum formed once where x is staged, not at each of the mins' reads (fewer
 * instructions a super-block: BENCHMARKS.md, twenty-fifth session). The originals above
 * stay as they are: the megakernel's code is tuned on their generated code. */
#define MK_QMMA_XG_BYTES 8u
__device__ __forceinline__ uint2 mk_qmma_xg_pack(float d, const int *s) {
    uint2 v;
    v.x = __float_as_uint(d), v.y = __float_as_uint(d * mk_xq_combine(s));
    return v;
}

/* A Q4_K (FIVE: Q5_K) super-block of rows g and g + 8 (words in w; its first group G0 of x's image)
 * against NT token rows, NT / 2 pairs, each pair one mma on A decoded once a group: B's columns
 * 0-2 are the pair's first token's three levels, 4-6 the second's, 3 and 7 empty, so lane c's C
 * columns 2c, 2c + 1 belong to token c >> 1 of the pair and combine as mk_qmma_k45_sb's do
 * (t = 254 C[2c] + C[2c + 1], weighed 1/254 or 1/254^3). acc[p][0], acc[p][1]: this lane's share of
 * rows g and g + 8 for token 2p + (c >> 1) (lanes c and c ^ 1 sum later); the mins go four groups a
 * lane. x's groups share one scale over the super-block (mk_kq8_stage_x), so each column's products
 * times the sub-block scales add up as integers over the eight groups, and the floats come once a
 * super-block: about 80 instructions fewer a super-block at four tokens (BENCHMARKS.md, twenty-fifth
 * session). The integer sums stay below 2^31: at most 32 * 31 * 127 * 63 * 8 (Q5_K's quants, x's
 * levels, 6-bit scales, eight groups). */
template <bool FIVE, int NT>
__device__ __forceinline__ void mk_qmma_k45_sbt(const struct mk_qk45_raw &w, uint32_t G0, uint32_t xq, uint32_t xg,
                                                float (*acc)[2]) {
    static_assert(NT % 2 == 0, "pairs of token rows");
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, c = lane & 3u, tok = c >> 1;
    const float tw = (c & 1u) == 0u ? 1.0f / MK_XQ_STEP : 1.0f / (MK_XQ_STEP * MK_XQ_STEP * MK_XQ_STEP);
    /* B column g: token g >> 2's level g & 3 (3: none). */
    const uint32_t blev = g & 3u;
    const bool bl = blev < 3u;
    const uint32_t xqo = xq + 96u * (g >> 2) + 32u * (bl ? blev : 0u) + 8u * c, xgt = xg + MK_QMMA_XG_BYTES * tok;
    const uint32_t *h0 = w.h0, *h8 = w.h8;
    const uint32_t s0[2] = { mk_qmma_k4_scales(h0, false), mk_qmma_k4_scales(h0, true) };
    const uint32_t s8[2] = { mk_qmma_k4_scales(h8, false), mk_qmma_k4_scales(h8, true) };
    const float2 d0 = mk_qmma_h2f(h0[0]), d8 = mk_qmma_h2f(h8[0]);
    /* sum[p][h][k]: column 2c + k of row g + 8h for pair p, times the sub-block scales. */
    int sum[NT / 2][2][2];
    MK_UNROLL
    for (int p = 0; p < NT / 2; p++) sum[p][0][0] = sum[p][0][1] = sum[p][1][0] = sum[p][1][1] = 0;
    MK_UNROLL
    for (int s = 0; s < 8; s++) {
        const uint32_t G = G0 + (uint32_t)s;
        uint32_t a[4];
        mk_qmma_k45_a<FIVE>(w, s, a);
        const int sc0 = (int)mk_qmma_byte(s0[s >> 2], (uint32_t)s & 3u);
        const int sc8 = (int)mk_qmma_byte(s8[s >> 2], (uint32_t)s & 3u);
        MK_UNROLL
        for (int p = 0; p < NT / 2; p++) {
            const uint2 bx = mk_lds64(xqo + 96u * (NT * G + 2u * (uint32_t)p));
            int d[4];
            mk_mma_s8(d, a[0], a[1], a[2], a[3], bl ? bx.x : 0u, bl ? bx.y : 0u);
            sum[p][0][0] += d[0] * sc0, sum[p][0][1] += d[1] * sc0;
            sum[p][1][0] += d[2] * sc8, sum[p][1][1] += d[3] * sc8;
        }
    }
    MK_UNROLL
    for (int p = 0; p < NT / 2; p++) {
        const float xd = __uint_as_float(mk_lds32(xgt + MK_QMMA_XG_BYTES * (NT * G0 + 2u * (uint32_t)p))) * tw;
        acc[p][0] += ((float)sum[p][0][0] * MK_XQ_STEP + (float)sum[p][0][1]) * (xd * d0.x);
        acc[p][1] += ((float)sum[p][1][0] * MK_XQ_STEP + (float)sum[p][1][1]) * (xd * d8.x);
    }
    /* Mins: lane c takes its token's sub-blocks 4 (c & 1) .. + 3. */
    const uint32_t m0w = mk_qmma_k4_mins(h0, (c & 1u) != 0u), m8w = mk_qmma_k4_mins(h8, (c & 1u) != 0u);
    MK_UNROLL
    for (int p = 0; p < NT / 2; p++) {
        float m0 = 0.0f, m8 = 0.0f;
        MK_UNROLL
        for (uint32_t e = 0; e < 4u; e++) {
            const float gs = __uint_as_float(
                mk_lds32(xgt + 4u + MK_QMMA_XG_BYTES * (2u * (uint32_t)p + NT * (G0 + 4u * (c & 1u) + e))));
            m0 += (float)mk_qmma_byte(m0w, e) * gs;
            m8 += (float)mk_qmma_byte(m8w, e) * gs;
        }
        acc[p][0] -= d0.y * m0;
        acc[p][1] -= d8.y * m8;
    }
}

/* A Q6_K super-block of rows g and g + 8 (b0, b8; its first group G0 of x's image) against NT token
 * rows, one mma a token on A decoded once a group: B's columns are mk_qmma_k6's (a token fills six
 * of them, so tokens do not pair). acc[t][0], acc[t][1]: this lane's share of rows g and g + 8 for
 * token t (the four lanes of a row sum later). As in mk_qmma_k45_sbt, x's scale is one a
 * super-block, so each column's products times the 16-element scales add up as integers over the
 * eight groups and the floats come once a super-block: |sum| <= 16 * 32 * 127 * 128 * 8 < 2^27.
 * Its decoding repeats mk_qmma_k6's: routing that one through shared helpers changed the one-token
 * megakernel's generated code, which was not timed so (twenty-third session's review). */
template <int NT>
__device__ __forceinline__ void mk_qmma_k6_sbt(const uint8_t *b0, const uint8_t *b8, uint32_t G0, uint32_t xq,
                                               uint32_t xg, float (*acc)[2]) {
    const uint32_t lane = threadIdx.x & 31u, g = lane >> 2, c = lane & 3u;
    const uint32_t lev = g == 4u || g == 6u ? 2u : g & 1u, half = g == 2u || g == 3u || g == 6u ? 1u : 0u;
    const bool bl = g != 5u && g != 7u && half == c >> 1;
    const uint32_t xqo = xq + 32u * lev + 8u * c;
    const float tw = c < 2u ? 1.0f / MK_XQ_STEP : 1.0f / (MK_XQ_STEP * MK_XQ_STEP * MK_XQ_STEP);
    const uint32_t hs = 8u * (c & 1u);
    uint32_t sc0[4], sc8[4];
    mk_w_words<4>(b0 + 192u, sc0);
    mk_w_words<4>(b8 + 192u, sc8);
    MK_UNROLL
    for (int i = 0; i < 4; i++) sc0[i] >>= hs, sc8[i] >>= hs;
    /* sum[t][h][k]: column 2c + k of row g + 8h for token t, times the 16-element scales. */
    int sum[NT][2][2];
    MK_UNROLL
    for (int t = 0; t < NT; t++) sum[t][0][0] = sum[t][0][1] = sum[t][1][0] = sum[t][1][1] = 0;
    MK_UNROLL
    for (uint32_t n = 0; n < 2u; n++) {
        uint32_t la0[2], lb0[2], hh0[2], la8[2], lb8[2], hh8[2];
        mk_w_words<2>(b0 + 64u * n + 8u * c, la0);
        mk_w_words<2>(b0 + 64u * n + 32u + 8u * c, lb0);
        mk_w_words<2>(b0 + 128u + 32u * n + 8u * c, hh0);
        mk_w_words<2>(b8 + 64u * n + 8u * c, la8);
        mk_w_words<2>(b8 + 64u * n + 32u + 8u * c, lb8);
        mk_w_words<2>(b8 + 128u + 32u * n + 8u * c, hh8);
        MK_UNROLL
        for (uint32_t kk = 0; kk < 4u; kk++) {
            const uint32_t G = G0 + 4u * n + kk;
            uint32_t a[4];
            MK_UNROLL
            for (int k = 0; k < 2; k++) {
                const uint32_t l0 = kk & 1u ? lb0[k] : la0[k], l8 = kk & 1u ? lb8[k] : la8[k];
                const uint32_t q0 = kk < 2u ? l0 & 0x0f0f0f0fu : (l0 >> 4) & 0x0f0f0f0fu;
                const uint32_t q8 = kk < 2u ? l8 & 0x0f0f0f0fu : (l8 >> 4) & 0x0f0f0f0fu;
                a[2 * k] = mk_q8_minus32(q0 | (((hh0[k] >> (2u * kk)) & 0x03030303u) << 4));
                a[2 * k + 1] = mk_q8_minus32(q8 | (((hh8[k] >> (2u * kk)) & 0x03030303u) << 4));
            }
            /* Scale 8n + 2kk + half: byte (2kk) % 4 of word (8n + 2kk) / 4, shifted by half. */
            const uint32_t wi = (8u * n + 2u * kk) >> 2, bi = (2u * kk) & 3u;
            const int s0 = (int)(int8_t)mk_qmma_byte(sc0[wi], bi), s8 = (int)(int8_t)mk_qmma_byte(sc8[wi], bi);
            MK_UNROLL
            for (int t = 0; t < NT; t++) {
                const uint2 bx = mk_lds64(xqo + 96u * (NT * G + (uint32_t)t));
                int d[4];
                mk_mma_s8(d, a[0], a[1], a[2], a[3], bl ? bx.x : 0u, bl ? bx.y : 0u);
                sum[t][0][0] += d[0] * s0, sum[t][0][1] += d[1] * s0;
                sum[t][1][0] += d[2] * s8, sum[t][1][1] += d[3] * s8;
            }
        }
    }
    const float tw0 = tw * mk_q_half(b0 + 208u), tw8 = tw * mk_q_half(b8 + 208u);
    MK_UNROLL
    for (int t = 0; t < NT; t++) {
        const float xd = __uint_as_float(mk_lds32(xg + MK_QMMA_XG_BYTES * (NT * G0 + (uint32_t)t)));
        acc[t][0] += ((float)sum[t][0][0] * MK_XQ_STEP + (float)sum[t][0][1]) * (xd * tw0);
        acc[t][1] += ((float)sum[t][1][0] * MK_XQ_STEP + (float)sum[t][1][1]) * (xd * tw8);
    }
}

/* Super-blocks [lo, hi) of item `it` (tile it / ks, its share it % ks of nsb). */
__device__ __forceinline__ uint32_t mk_qmma_lo(uint32_t it, uint32_t ks, uint32_t nsb) { return it % ks * nsb / ks; }
__device__ __forceinline__ uint32_t mk_qmma_hi(uint32_t it, uint32_t ks, uint32_t nsb) {
    return (it % ks + 1u) * nsb / ks;
}

#ifndef MK_QMMA_HOST
/* Tile `tile` of the segments mk_qmma_type takes, counted across them: its segment (*sg) and its
 * index there. */
__device__ __forceinline__ uint32_t mk_qmma_tile(const struct mk_qseg *all, uint32_t tile, const struct mk_qseg **sg) {
    for (uint32_t si = 0;; si++) {
        if (!mk_qmma_type(all[si].dtype)) continue;
        const uint32_t t = (all[si].n + MK_QMMA_ROWS - 1u) / MK_QMMA_ROWS;
        if (tile < t) {
            *sg = &all[si];
            return tile;
        }
        tile -= t;
    }
}

/* Super-blocks [sb0, sb1) of rows g and g + 8 of the tile at row r0 of segment sg, straight from
 * global memory. */
__device__ __forceinline__ void mk_qmma_unit_global(const struct mk_qseg *sg, uint32_t r0, uint32_t sb0, uint32_t sb1,
                                                    uint32_t xq, uint32_t xg, float *acc) {
    const uint32_t g = (threadIdx.x & 31u) >> 2;
    const uint8_t *pg = sg->ptr + (uint64_t)(sg->row0 + min(r0 + g, sg->n - 1u)) * sg->row_bytes;
    const uint8_t *pg8 = sg->ptr + (uint64_t)(sg->row0 + min(r0 + g + 8u, sg->n - 1u)) * sg->row_bytes;
    if (sg->dtype == MK_DEV_Q4_K)
        mk_qmma_k45<false>(pg, pg8, sb0, sb1, xq, xg, acc);
    else if (sg->dtype == MK_DEV_Q5_K)
        mk_qmma_k45<true>(pg, pg8, sb0, sb1, xq, xg, acc);
    else
        mk_qmma_k6(pg, pg8, sb0, sb1, xq, xg, acc);
}

/* Item sums of rows g and g + 8 (acc, this lane's share) into res, or with ks > 1 into the warp's
 * row of part for mk_qmma_rows to add up. */
__device__ __forceinline__ void mk_qmma_put(const struct mk_qseg *sg, uint32_t r0, uint32_t ks, float *acc, float *res,
                                            float (*part)[MK_QMMA_ROWS]) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u, g = lane >> 2;
    MK_UNROLL
    for (int o = 1; o < 4; o <<= 1) {
        acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], o);
        acc[1] += __shfl_xor_sync(0xffffffffu, acc[1], o);
    }
    if ((lane & 3u) != 0u) return;
    if (ks == 1u) {
        if (r0 + g < sg->n) res[sg->res0 + r0 + g] = acc[0];
        if (r0 + g + 8u < sg->n) res[sg->res0 + r0 + g + 8u] = acc[1];
    } else {
        part[warp][g] = acc[0];
        part[warp][g + 8u] = acc[1];
    }
}

/* res[seg.res0 + i] for every segment of all[0 .. nall) whose format mk_qmma_type takes, by the
 * whole block: tiles of 16 rows across those segments, each tile's super-blocks split into up to
 * MK_BLOCK_WARPS / tiles contiguous shares whose sums meet in shared memory in a fixed order. Every
 * thread of the block calls it; it ends with res written (but not synchronised) when no tile was
 * split. */
__device__ __noinline__ void mk_qmma_rows(const struct mk_qseg *all, uint32_t nall, struct mk_xq8 x, float *res) {
    __shared__ float part[MK_BLOCK_WARPS][MK_QMMA_ROWS];
    const uint32_t warp = threadIdx.x >> 5;
    uint32_t nt = 0, nsb = 0;
    for (uint32_t i = 0; i < nall; i++)
        if (mk_qmma_type(all[i].dtype)) nt += (all[i].n + MK_QMMA_ROWS - 1u) / MK_QMMA_ROWS, nsb = all[i].cols / 256u;
    if (nt == 0u) return;
    const uint32_t ks = max(1u, min(MK_BLOCK_WARPS / nt, nsb)), items = nt * ks;
    const uint32_t xq = (uint32_t)__cvta_generic_to_shared(x.q), xg = (uint32_t)__cvta_generic_to_shared(x.grp);
    for (uint32_t it = warp; it < items; it += MK_BLOCK_WARPS) {
        const struct mk_qseg *sg;
        const uint32_t r0 = MK_QMMA_ROWS * mk_qmma_tile(all, it / ks, &sg);
        float acc[2] = { 0.0f, 0.0f };
        mk_qmma_unit_global(sg, r0, mk_qmma_lo(it, ks, nsb), mk_qmma_hi(it, ks, nsb), xq, xg, acc);
        mk_qmma_put(sg, r0, ks, acc, res, part);
    }
    if (ks == 1u) return;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < nt * MK_QMMA_ROWS; i += MK_BLOCK_THREADS) {
        const uint32_t r = i % MK_QMMA_ROWS;
        float sum = 0.0f;
        for (uint32_t s = 0; s < ks; s++) sum += part[(i / MK_QMMA_ROWS) * ks + s][r]; /* item = warp here */
        const struct mk_qseg *sg;
        const uint32_t row = MK_QMMA_ROWS * mk_qmma_tile(all, i / MK_QMMA_ROWS, &sg) + r;
        if (row < sg->n) res[sg->res0 + row] = sum;
    }
    __syncthreads(); /* part is free for the next call */
}
#endif

#endif
