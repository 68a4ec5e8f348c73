/* Dots of ggml blocks, read straight from global memory, with activations as int8 levels (32 elements per lane, dp4a): the GPU path of every block format. */
#ifndef MK_QUANT8_CUH
#define MK_QUANT8_CUH

#include "megakernel/quant.cuh"

/* The activations of a block-format matvec, so that the weights' integer quants multiply integers
 * (dp4a, four products per instruction): each 32-element group of x is written as
 * x' = d * (q1 + q2 / 254 + q3 / 254^2) with int8 q1, q2, q3 and d = max|x| / 127. The error,
 * at most max|x| * 6.1e-8, is that of float rounding itself, so the GPU keeps agreeing with the
 * CPU executor's float dots to float precision (8-bit activations alone, as in ggml, would not:
 * their error is 10^5 times larger). */
#define MK_XQ_STEP 254.0f

/* Per group: d, then the sums of q1, q2 and q3 over its 32 elements. */
struct mk_xgroup {
    float d;
    int32_t s[3];
};

struct mk_xq8 {
    const int8_t *q;             /* (n / 32, 3, 32): q1[32] q2[32] q3[32] of each group, 16-byte aligned */
    const struct mk_xgroup *grp; /* (n / 32) */
};

/* The three int8 levels of one element of a group of scale d (all 0 at d = 0). Each level is
 * rounded with a reciprocal rather than a division: any rounding serves, since the next level
 * takes what this one left. */
__device__ __forceinline__ void mk_xq_levels(float x, float d, int *q) {
    if (d == 0.0f) {
        q[0] = q[1] = q[2] = 0;
        return;
    }
    const float inv = 1.0f / d;
    const float dl[3] = { d, d * (1.0f / MK_XQ_STEP), d * (1.0f / (MK_XQ_STEP * MK_XQ_STEP)) };
    const float il[3] = { inv, inv * MK_XQ_STEP, inv * (MK_XQ_STEP * MK_XQ_STEP) };
    float r = x;
    MK_UNROLL
    for (int l = 0; l < 3; l++) {
        float v = rintf(r * il[l]);
        v = fminf(fmaxf(v, -127.0f), 127.0f);
        q[l] = (int)v;
        r = r - v * dl[l];
    }
}

/* Integer sums of one level each, as a multiple of the group's d. */
__device__ __forceinline__ float mk_xq_combine(const int *s) {
    return (float)s[0] + ((float)s[1] + (float)s[2] * (1.0f / MK_XQ_STEP)) * (1.0f / MK_XQ_STEP);
}

/* Weight loads, straight from global memory through the read-only path (plain loads in host tests),
 * beside quant.cuh's mk_q_u8 and mk_q_half. Blocks are only as aligned as their size allows. The
 * loads of 4 to 16 bytes ask L2 for the 256 bytes around them (.L2::256B): a row's next blocks are
 * then on their way from HBM while this one's products run, where a warp's registers hold only one
 * super-block ahead (llama-8b Q4_K_M 3.97 -> 3.80 ms a token, gate/up -9 %). The float rows'
 * loads (common.cuh, mk_ld_weight16) lost with the same hint (llama-1b BF16 +1.3 %; BENCHMARKS.md,
 * 2026-11-27 nineteenth session). */
#ifndef MK_QUANT_NO_CUDA_HEADERS
__device__ __forceinline__ uint32_t mk_w_ldg32(const uint8_t *p) {
    uint32_t v;
    asm("ld.global.nc.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 mk_w_ldg64(const uint8_t *p) {
    uint2 v;
    asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 mk_w_ldg128(const uint8_t *p) {
    uint4 v;
    asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#endif
__device__ __forceinline__ uint32_t mk_w_u16(const uint8_t *p) { return __ldg((const unsigned short *)p); }
__device__ __forceinline__ uint32_t mk_w_ld32(const uint8_t *p) { /* p 4-byte aligned */
#ifdef MK_QUANT_NO_CUDA_HEADERS
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return mk_w_ldg32(p);
#endif
}
__device__ __forceinline__ uint32_t mk_w_w32(const uint8_t *p) { /* p 2-byte aligned */
    return mk_w_u16(p) | (mk_w_u16(p + 2) << 16);
}

/* N words from a 2-byte aligned p: aligned loads, shifted into place. */
template <int N> __device__ __forceinline__ void mk_w_words(const uint8_t *p, uint32_t *w) {
    const uint8_t *a = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)3);
    const uint32_t sh = 8u * (uint32_t)((uintptr_t)p & 3u);
    uint32_t v[N + 1];
    MK_UNROLL
    for (int i = 0; i <= N; i++) v[i] = mk_w_ld32(a + 4 * i);
    MK_UNROLL
    for (int i = 0; i < N; i++) w[i] = __funnelshift_r(v[i], v[i + 1], sh);
}

/* N words from p aligned to 4 N bytes (N = 4: one 128-bit load), from global memory (G) or from
 * shared memory (the activations' quants). */
template <bool G, int N> __device__ __forceinline__ void mk_w_aligned(const uint8_t *p, uint32_t *w) {
#ifdef MK_QUANT_NO_CUDA_HEADERS
    memcpy(w, p, 4 * N);
#else
    if (N % 4 == 0) {
        MK_UNROLL
        for (int i = 0; i < N; i += 4) {
            uint4 v = G ? mk_w_ldg128(p + 4 * i) : *(const uint4 *)(p + 4 * i);
            w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
        }
    } else if (N % 2 == 0) {
        MK_UNROLL
        for (int i = 0; i < N; i += 2) {
            uint2 v = G ? mk_w_ldg64(p + 4 * i) : *(const uint2 *)(p + 4 * i);
            w[i] = v.x, w[i + 1] = v.y;
        }
    } else {
        MK_UNROLL
        for (int i = 0; i < N; i++) w[i] = G ? mk_w_ld32(p + 4 * i) : *(const uint32_t *)(p + 4 * i);
    }
#endif
}

__device__ __forceinline__ int mk_dp4(uint32_t a, uint32_t b, int c) { return __dp4a((int)a, (int)b, c); }

/* Four nibbles (one per byte, 0..15) through the IQ4 code book to four int8 values. */
__device__ __forceinline__ uint32_t mk_q8_iq4(uint32_t v) {
    const uint32_t t0 = 0xbfad9881u, t1 = 0xf6eaddcfu, t2 = 0x26190d01u, t3 = 0x71594535u;
    const uint32_t s = (v & 0x07070707u) | ((v & 0x07070707u) >> 4);
    const uint32_t sel = (s & 0xffu) | ((s >> 8) & 0xff00u);
    const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
    const uint32_t m = ((v >> 3) & 0x01010101u) * 0xffu;
    return (lo & ~m) | (hi & m);
}

/* Four bits (of one nibble) spread to bit 0 of four bytes. */
__device__ __forceinline__ uint32_t mk_q8_spread4(uint32_t b) { return ((b & 15u) * 0x00204081u) & 0x01010101u; }

/* The three level sums of W signed int8x4 weight words against W words of a group's quants from
 * position p (a multiple of 4 W) on. */
template <int W>
__device__ __forceinline__ void mk_xq_dot(const uint32_t *w, const struct mk_xq8 *x, uint32_t g, uint32_t p, int *s) {
    const uint8_t *q = (const uint8_t *)(x->q + 96u * g + p);
    MK_UNROLL
    for (int l = 0; l < 3; l++) {
        uint32_t xv[W];
        mk_w_aligned<false, W>(q + 32 * l, xv);
        int a = 0;
        MK_UNROLL
        for (int k = 0; k < W; k++) a = mk_dp4(w[k], xv[k], a);
        s[l] = a;
    }
}

/* Bytes with values 0..15 (0..7, 0..63) minus 8 (4, 32), as signed bytes: no carries cross bytes. */
__device__ __forceinline__ uint32_t mk_q8_minus8(uint32_t v) { return (v + 0x78787878u) ^ 0x80808080u; }
__device__ __forceinline__ uint32_t mk_q8_minus4(uint32_t v) { return (v + 0x7c7c7c7cu) ^ 0x80808080u; }
__device__ __forceinline__ uint32_t mk_q8_minus32(uint32_t v) { return (v + 0x60606060u) ^ 0x80808080u; }

/* Sum over the 32 elements of lane-unit u of a row (blocks from c on) of value * x', x given from
 * the row's first element. T is a constant after inlining. */
__device__ __forceinline__ float mk_q8_unit(uint32_t T, const uint8_t *c, uint32_t u, const struct mk_xq8 *x) {
    const uint32_t bb = mk_q_block_bytes(T);
    uint32_t w[8], q[8];
    int s[3];
    if (mk_q_block_elems(T) == 32u) {
        /* One block per lane: group u of x. */
        const uint8_t *b = c + bb * u;
        const struct mk_xgroup gr = x->grp[u];
        if (T == MK_DEV_Q8_0) {
            mk_w_words<8>(b + 2, q);
        } else {
            const bool five = T == MK_DEV_Q5_0 || T == MK_DEV_Q5_1, one = T == MK_DEV_Q4_1 || T == MK_DEV_Q5_1;
            const uint32_t qs = (one ? 4u : 2u) + (five ? 4u : 0u);
            mk_w_words<4>(b + qs, w);
            const uint32_t qh = five ? mk_w_w32(b + qs - 4u) : 0u;
            MK_UNROLL
            for (int k = 0; k < 4; k++) {
                q[k] = w[k] & 0x0f0f0f0fu;
                q[4 + k] = (w[k] >> 4) & 0x0f0f0f0fu;
                if (five) {
                    q[k] |= mk_q8_spread4(qh >> (4 * k)) << 4;
                    q[4 + k] |= mk_q8_spread4(qh >> (16 + 4 * k)) << 4;
                }
                if (T == MK_DEV_Q4_0) {
                    q[k] = mk_q8_minus8(q[k]);
                    q[4 + k] = mk_q8_minus8(q[4 + k]);
                }
                if (T == MK_DEV_IQ4_NL) {
                    q[k] = mk_q8_iq4(q[k]);
                    q[4 + k] = mk_q8_iq4(q[4 + k]);
                }
            }
        }
        mk_xq_dot<8>(q, x, u, 0u, s);
        if (T == MK_DEV_Q5_0)
            for (int l = 0; l < 3; l++) s[l] -= 16 * gr.s[l];
        float r = mk_q_half(b) * (gr.d * mk_xq_combine(s));
        if (T == MK_DEV_Q4_1 || T == MK_DEV_Q5_1) r += mk_q_half(b + 2u) * (gr.d * mk_xq_combine(gr.s));
        return r;
    }
    /* Super-blocks of 256: eight lanes each. */
    const uint8_t *b = c + bb * (u >> 3);
    const uint32_t l = u & 7u, g0 = 8u * (u >> 3); /* lane in the super-block, its first group */
    if (T == MK_DEV_Q4_K || T == MK_DEV_Q5_K) {
        /* Lane l: sub-blocks 2j (low nibbles) and 2j + 1 (high), positions 16h .. 16h + 15 of each. */
        const bool five = T == MK_DEV_Q5_K;
        const uint32_t j = l >> 1, h = l & 1u, ga = g0 + 2u * j;
        mk_w_aligned<true, 4>(b + (five ? 48u : 16u) + 32u * j + 16u * h, w);
        uint32_t hb[4];
        if (five) mk_w_aligned<true, 4>(b + 16u + 16u * h, hb);
        MK_UNROLL
        for (int k = 0; k < 4; k++) {
            q[k] = w[k] & 0x0f0f0f0fu;
            q[4 + k] = (w[k] >> 4) & 0x0f0f0f0fu;
            if (five) {
                q[k] |= ((hb[k] >> (2u * j)) & 0x01010101u) << 4;
                q[4 + k] |= ((hb[k] >> (2u * j + 1u)) & 0x01010101u) << 4;
            }
        }
        int sb[3];
        mk_xq_dot<4>(q, x, ga, 16u * h, s);
        mk_xq_dot<4>(q + 4, x, ga + 1u, 16u * h, sb);
        float sca, ma, scb, mb;
        mk_q_scale_min_k4(2u * j, b + 4u, &sca, &ma);
        mk_q_scale_min_k4(2u * j + 1u, b + 4u, &scb, &mb);
        const struct mk_xgroup *gra = &x->grp[ga], *grb = &x->grp[ga + 1u];
        float r = mk_q_half(b) * (sca * (gra->d * mk_xq_combine(s)) + scb * (grb->d * mk_xq_combine(sb)));
        if (h == 0u)
            r -= mk_q_half(b + 2u) * (ma * (gra->d * mk_xq_combine(gra->s)) + mb * (grb->d * mk_xq_combine(grb->s)));
        return r;
    }
    if (T == MK_DEV_IQ4_XS) {
        /* Lane l: sub-block l, laid out as an IQ4_NL block. */
        mk_w_words<4>(b + 8u + 16u * l, w);
        MK_UNROLL
        for (int k = 0; k < 4; k++) {
            q[k] = mk_q8_iq4(w[k] & 0x0f0f0f0fu);
            q[4 + k] = mk_q8_iq4((w[k] >> 4) & 0x0f0f0f0fu);
        }
        mk_xq_dot<8>(q, x, g0 + l, 0u, s);
        const uint32_t sh = mk_w_u16(b + 2u);
        const int ls =
            (int)(((mk_q_u8(b + 4u + (l >> 1)) >> (4u * (l & 1u))) & 15u) | (((sh >> (2u * l)) & 3u) << 4)) - 32;
        return mk_q_half(b) * ((float)ls * (x->grp[g0 + l].d * mk_xq_combine(s)));
    }
    /* Q2_K, Q3_K, Q6_K: lane l takes positions 8p .. 8p + 7 of the four quarters (32-element
     * groups) of half n; their scales are per 16 positions. */
    const uint32_t n = l >> 2, p = l & 3u;
    float r = 0.0f, rm = 0.0f;
    uint32_t a0[2], a1[2], a2[2];
    if (T == MK_DEV_Q6_K) {
        mk_w_words<2>(b + 64u * n + 8u * p, a0);
        mk_w_words<2>(b + 64u * n + 32u + 8u * p, a1);
        mk_w_words<2>(b + 128u + 32u * n + 8u * p, a2);
    } else if (T == MK_DEV_Q3_K) {
        mk_w_words<2>(b + 32u + 32u * n + 8u * p, a0);
        mk_w_words<2>(b + 8u * p, a1);
    } else {
        mk_w_words<2>(b + 16u + 32u * n + 8u * p, a0);
    }
    MK_UNROLL
    for (int kk = 0; kk < 4; kk++) {
        const uint32_t g = g0 + 4u * n + kk;
        MK_UNROLL
        for (int k = 0; k < 2; k++) {
            if (T == MK_DEV_Q6_K) {
                const uint32_t lo = kk & 1 ? a1[k] : a0[k];
                const uint32_t lq = kk < 2 ? lo & 0x0f0f0f0fu : (lo >> 4) & 0x0f0f0f0fu;
                const uint32_t hh = kk == 0 ? a2[k] << 4 : kk == 1 ? a2[k] << 2 : kk == 2 ? a2[k] : a2[k] >> 2;
                q[k] = mk_q8_minus32(lq | (hh & 0x30303030u));
            } else if (T == MK_DEV_Q3_K) {
                q[k] =
                    mk_q8_minus4(((a0[k] >> (2 * kk)) & 0x03030303u) | (((a1[k] >> (4u * n + kk)) & 0x01010101u) << 2));
            } else {
                q[k] = (a0[k] >> (2 * kk)) & 0x03030303u;
            }
        }
        mk_xq_dot<2>(q, x, g, 8u * p, s);
        const float xd = x->grp[g].d;
        if (T == MK_DEV_Q6_K) {
            r += (float)(int8_t)mk_q_u8(b + 192u + 8u * n + 2u * kk + (p >> 1)) * (xd * mk_xq_combine(s));
        } else if (T == MK_DEV_Q3_K) {
            r += (float)mk_q_scale_q3k(2u * (4u * n + kk) + (p >> 1), b + 96u) * (xd * mk_xq_combine(s));
        } else {
            const uint32_t sc = mk_q_u8(b + 8u * n + 2u * kk + (p >> 1));
            const uint32_t ones[2] = { 0x01010101u, 0x01010101u };
            int sx[3];
            mk_xq_dot<2>(ones, x, g, 8u * p, sx);
            r += (float)(sc & 15u) * (xd * mk_xq_combine(s));
            rm += (float)(sc >> 4) * (xd * mk_xq_combine(sx));
        }
    }
    if (T == MK_DEV_Q6_K) return mk_q_half(b + 208u) * r;
    if (T == MK_DEV_Q3_K) return mk_q_half(b + 108u) * r;
    return mk_q_half(b + 80u) * r - mk_q_half(b + 82u) * rm;
}

#endif
