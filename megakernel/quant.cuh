/* Device dequantization of one element of a row in any ggml block type mk runs (ggml's layouts). */
#ifndef MK_QUANT_CUH
#define MK_QUANT_CUH

/* Pure functions of the bytes: tests compile them as host C++ with a small shim in place of CUDA's
 * headers (tests/quant_cuh_test.cc). */
#ifndef MK_QUANT_NO_CUDA_HEADERS
#include <cuda_fp16.h>
#endif
#include <stdint.h>
#include <string.h>

/* Host compilers of the tests know no unroll pragma. */
#ifdef MK_QUANT_NO_CUDA_HEADERS
#define MK_UNROLL
#else
#define MK_UNROLL _Pragma("unroll")
#endif

/* ggml type ids (core/dtype.h is host C; the ids are ggml's and never change). */
#define MK_DEV_Q4_0   2u
#define MK_DEV_Q4_1   3u
#define MK_DEV_Q5_0   6u
#define MK_DEV_Q5_1   7u
#define MK_DEV_Q8_0   8u
#define MK_DEV_Q2_K   10u
#define MK_DEV_Q3_K   11u
#define MK_DEV_Q4_K   12u
#define MK_DEV_Q5_K   13u
#define MK_DEV_Q6_K   14u
#define MK_DEV_IQ4_NL 20u
#define MK_DEV_IQ4_XS 23u

/* Lanes of a warp decode 32 neighbouring elements, so the block header each lane reads is the
 * same address for the whole warp (one broadcast) and the quant bytes are neighbours. Loads go
 * through the read-only path byte by byte: ggml blocks are only 2-byte aligned. Staged blocks in
 * shared memory take the mk_s_ loads below instead (the read-only path faults there). */
__device__ __forceinline__ uint32_t mk_q_u8(const uint8_t *p) { return __ldg(p); }

__device__ __forceinline__ float mk_q_half(const uint8_t *p) {
    return __half2float(__ushort_as_half(__ldg((const unsigned short *)p)));
}

/* Value q of the IQ4 non-linear grid {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38,
 * 53, 69, 89, 113}, packed as int8 bytes into two words so the lookup stays in registers. */
__device__ __forceinline__ float mk_q_iq4(uint32_t q) {
    const unsigned long long lo = 0xf6eaddcfbfad9881ull, hi = 0x7159453526190d01ull;
    unsigned long long w = (q & 8u) ? hi : lo;
    return (float)(int8_t)(uint8_t)(w >> (8u * (q & 7u)));
}

/* Nibble e (0..31) of a 32-element block whose 16 bytes hold elements j (low) and j + 16 (high). */
__device__ __forceinline__ uint32_t mk_q_nibble32(const uint8_t *qs, uint32_t e) {
    uint32_t b = mk_q_u8(qs + (e & 15u));
    return e < 16u ? b & 15u : b >> 4;
}

/* 6-bit scale and min j (0..7) of a Q4_K or Q5_K super-block from its 12 packed bytes. */
__device__ __forceinline__ void mk_q_scale_min_k4(uint32_t j, const uint8_t *s, float *sc, float *m) {
    if (j < 4u) {
        *sc = (float)(mk_q_u8(s + j) & 63u);
        *m = (float)(mk_q_u8(s + j + 4u) & 63u);
    } else {
        *sc = (float)((mk_q_u8(s + j + 4u) & 15u) | ((mk_q_u8(s + j - 4u) >> 6) << 4));
        *m = (float)((mk_q_u8(s + j + 4u) >> 4) | ((mk_q_u8(s + j) >> 6) << 4));
    }
}

/* Signed 6-bit scale i (0..15) of a Q3_K super-block from its 12 packed bytes: low 4 bits from
 * bytes 0-7 (low nibbles first), high 2 bits from bytes 8-11. */
__device__ __forceinline__ int mk_q_scale_q3k(uint32_t i, const uint8_t *s) {
    uint32_t g = i >> 2, r = i & 3u;
    uint32_t lo = g < 2u ? mk_q_u8(s + 4u * g + r) & 15u : mk_q_u8(s + 4u * (g - 2u) + r) >> 4;
    uint32_t hi = (mk_q_u8(s + 8u + r) >> (2u * g)) & 3u;
    return (int)(lo | (hi << 4)) - 32;
}

/* Element e of a row of type t; 0 for a type mk does not know (the host refuses those). */
__device__ __forceinline__ float mk_q_value(uint32_t t, const uint8_t *row, uint32_t e) {
    const uint32_t c = e >> 5, i = e & 31u; /* 32-element block (or sub-block) and position in it */
    switch (t) {
    case MK_DEV_Q8_0: {
        const uint8_t *b = row + 34u * c;
        return mk_q_half(b) * (float)(int8_t)mk_q_u8(b + 2u + i);
    }
    case MK_DEV_Q4_0: {
        const uint8_t *b = row + 18u * c;
        return (float)((int)mk_q_nibble32(b + 2u, i) - 8) * mk_q_half(b);
    }
    case MK_DEV_Q4_1: {
        const uint8_t *b = row + 20u * c;
        return (float)mk_q_nibble32(b + 4u, i) * mk_q_half(b) + mk_q_half(b + 2u);
    }
    case MK_DEV_Q5_0:
    case MK_DEV_Q5_1: {
        const bool one = t == MK_DEV_Q5_1;
        const uint8_t *b = row + (one ? 24u : 22u) * c;
        const uint8_t *qh = b + (one ? 4u : 2u);
        uint32_t h = mk_q_u8(qh) | (mk_q_u8(qh + 1u) << 8) | (mk_q_u8(qh + 2u) << 16) | (mk_q_u8(qh + 3u) << 24);
        uint32_t q = mk_q_nibble32(qh + 4u, i) | (((h >> i) & 1u) << 4);
        if (one) return (float)q * mk_q_half(b) + mk_q_half(b + 2u);
        return (float)((int)q - 16) * mk_q_half(b);
    }
    case MK_DEV_IQ4_NL: {
        const uint8_t *b = row + 18u * c;
        return mk_q_half(b) * mk_q_iq4(mk_q_nibble32(b + 2u, i));
    }
    case MK_DEV_Q2_K: {
        /* scales[16] qs[64] d dmin; sub-block k: half n = k / 4, shift 2 * (k % 4), scale
         * 8n + 2(k % 4) + (i >= 16). */
        const uint8_t *b = row + 84u * (c >> 3);
        uint32_t k = c & 7u, n = k >> 2, j = k & 3u;
        uint32_t sc = mk_q_u8(b + 8u * n + 2u * j + (i >> 4));
        uint32_t q = (mk_q_u8(b + 16u + 32u * n + i) >> (2u * j)) & 3u;
        float d = mk_q_half(b + 80u), dmin = mk_q_half(b + 82u);
        return d * (float)(sc & 15u) * (float)q - dmin * (float)(sc >> 4);
    }
    case MK_DEV_Q3_K: {
        /* hmask[32] qs[64] scales[12] d; sub-block k: high bit k of hmask[i], low bits from
         * qs[32n + i] >> 2(k % 4), scale 2k + (i >= 16). */
        const uint8_t *b = row + 110u * (c >> 3);
        uint32_t k = c & 7u, n = k >> 2, j = k & 3u;
        int q = (int)((mk_q_u8(b + 32u + 32u * n + i) >> (2u * j)) & 3u) - (((mk_q_u8(b + i) >> k) & 1u) ? 0 : 4);
        int s = mk_q_scale_q3k(2u * k + (i >> 4), b + 96u);
        return mk_q_half(b + 108u) * (float)s * (float)q;
    }
    case MK_DEV_Q4_K:
    case MK_DEV_Q5_K: {
        /* d dmin scales[12] (qh[32]) qs[128]; sub-block k: byte 32(k / 2) + i of qs, low nibble
         * for even k; Q5_K adds bit k of qh[i] as 16. */
        const bool five = t == MK_DEV_Q5_K;
        const uint8_t *b = row + (five ? 176u : 144u) * (c >> 3);
        uint32_t k = c & 7u;
        uint32_t byte = mk_q_u8(b + (five ? 48u : 16u) + 32u * (k >> 1) + i);
        uint32_t q = (k & 1u) ? byte >> 4 : byte & 15u;
        if (five) q += ((mk_q_u8(b + 16u + i) >> k) & 1u) << 4;
        float sc, m;
        mk_q_scale_min_k4(k, b + 4u, &sc, &m);
        return mk_q_half(b) * sc * (float)q - mk_q_half(b + 2u) * m;
    }
    case MK_DEV_Q6_K: {
        /* ql[128] qh[64] scales[16] d; sub-block k: half n = k / 4, quarter kk = k % 4; low 4 bits
         * from ql[64n + 32(kk & 1) + i] (high nibble when kk >= 2), high 2 bits from
         * qh[32n + i] >> 2kk, scale 8n + 2kk + (i >= 16). */
        const uint8_t *b = row + 210u * (c >> 3);
        uint32_t k = c & 7u, n = k >> 2, kk = k & 3u;
        uint32_t lb = mk_q_u8(b + 64u * n + 32u * (kk & 1u) + i);
        uint32_t lo = kk < 2u ? lb & 15u : lb >> 4;
        uint32_t hi = (mk_q_u8(b + 128u + 32u * n + i) >> (2u * kk)) & 3u;
        int q = (int)(lo | (hi << 4)) - 32;
        float sc = (float)(int8_t)mk_q_u8(b + 192u + 8u * n + 2u * kk + (i >> 4));
        return mk_q_half(b + 208u) * sc * (float)q;
    }
    case MK_DEV_IQ4_XS: {
        /* d scales_h(u16) scales_l[4] qs[128]; sub-block k: 6-bit scale from nibble k of scales_l
         * and bits 2k..2k+1 of scales_h, minus 32; quants qs[16k ..] as in IQ4_NL. */
        const uint8_t *b = row + 136u * (c >> 3);
        uint32_t k = c & 7u;
        uint32_t sh = mk_q_u8(b + 2u) | (mk_q_u8(b + 3u) << 8);
        uint32_t ls = ((mk_q_u8(b + 4u + (k >> 1)) >> (4u * (k & 1u))) & 15u) | (((sh >> (2u * k)) & 3u) << 4);
        return mk_q_half(b) * (float)((int)ls - 32) * mk_q_iq4(mk_q_nibble32(b + 8u + 16u * k, i));
    }
    default: return 0.0f;
    }
}

/* Elements e0 .. e0 + 7 of a row of type t (e0 a multiple of 8): the same values as mk_q_value,
 * with each block's scales read once for the eight (they share a 32-element sub-block and, where
 * scales go by 16, its half). The chunk products decode their weight tiles with it. */
__device__ __forceinline__ void mk_q_value8(uint32_t t, const uint8_t *row, uint32_t e0, float *v) {
    const uint32_t c = e0 >> 5, i0 = e0 & 31u;
    switch (t) {
    case MK_DEV_Q8_0: {
        const uint8_t *b = row + 34u * c;
        const float d = mk_q_half(b);
        MK_UNROLL
        for (int j = 0; j < 8; j++) v[j] = d * (float)(int8_t)mk_q_u8(b + 2u + i0 + (uint32_t)j);
        return;
    }
    case MK_DEV_Q4_0: {
        const uint8_t *b = row + 18u * c;
        const float d = mk_q_half(b);
        MK_UNROLL
        for (int j = 0; j < 8; j++) v[j] = (float)((int)mk_q_nibble32(b + 2u, i0 + (uint32_t)j) - 8) * d;
        return;
    }
    case MK_DEV_Q4_K:
    case MK_DEV_Q5_K: {
        const bool five = t == MK_DEV_Q5_K;
        const uint8_t *b = row + (five ? 176u : 144u) * (c >> 3);
        const uint32_t k = c & 7u;
        float sc, m;
        mk_q_scale_min_k4(k, b + 4u, &sc, &m);
        const float d = mk_q_half(b), dmin = mk_q_half(b + 2u);
        MK_UNROLL
        for (int j = 0; j < 8; j++) {
            const uint32_t i = i0 + (uint32_t)j;
            const uint32_t byte = mk_q_u8(b + (five ? 48u : 16u) + 32u * (k >> 1) + i);
            uint32_t q = (k & 1u) ? byte >> 4 : byte & 15u;
            if (five) q += ((mk_q_u8(b + 16u + i) >> k) & 1u) << 4;
            v[j] = d * sc * (float)q - dmin * m;
        }
        return;
    }
    case MK_DEV_Q6_K: {
        const uint8_t *b = row + 210u * (c >> 3);
        const uint32_t k = c & 7u, n = k >> 2, kk = k & 3u;
        const float sc = (float)(int8_t)mk_q_u8(b + 192u + 8u * n + 2u * kk + (i0 >> 4)), d = mk_q_half(b + 208u);
        MK_UNROLL
        for (int j = 0; j < 8; j++) {
            const uint32_t i = i0 + (uint32_t)j;
            const uint32_t lb = mk_q_u8(b + 64u * n + 32u * (kk & 1u) + i);
            const uint32_t lo = kk < 2u ? lb & 15u : lb >> 4;
            const uint32_t hi = (mk_q_u8(b + 128u + 32u * n + i) >> (2u * kk)) & 3u;
            v[j] = d * sc * (float)((int)(lo | (hi << 4)) - 32);
        }
        return;
    }
    default:
        MK_UNROLL
        for (int j = 0; j < 8; j++) v[j] = mk_q_value(t, row, e0 + (uint32_t)j);
        return;
    }
}

/* ---- Staged decoding: ggml blocks copied into shared memory, four neighbours per lane. ---- */

/* Bytes and elements of one ggml block of type t (f32/f16/bf16 as 32-element runs); 0 if unknown. */
__host__ __device__ __forceinline__ uint32_t mk_q_block_bytes(uint32_t t) {
    switch (t) {
    case 0u: return 128u; /* f32 */
    case 1u:              /* f16 */
    case 30u: return 64u; /* bf16 */
    case MK_DEV_Q8_0: return 34u;
    case MK_DEV_Q4_0: return 18u;
    case MK_DEV_Q4_1: return 20u;
    case MK_DEV_Q5_0: return 22u;
    case MK_DEV_Q5_1: return 24u;
    case MK_DEV_IQ4_NL: return 18u;
    case MK_DEV_Q2_K: return 84u;
    case MK_DEV_Q3_K: return 110u;
    case MK_DEV_Q4_K: return 144u;
    case MK_DEV_Q5_K: return 176u;
    case MK_DEV_Q6_K: return 210u;
    case MK_DEV_IQ4_XS: return 136u;
    default: return 0u;
    }
}

__host__ __device__ __forceinline__ uint32_t mk_q_block_elems(uint32_t t) {
    return t == MK_DEV_Q2_K || t == MK_DEV_Q3_K || t == MK_DEV_Q4_K || t == MK_DEV_Q5_K || t == MK_DEV_Q6_K ||
                   t == MK_DEV_IQ4_XS
               ? 256u
               : 32u;
}

/* Loads from a staged copy (shared memory, or any memory in host tests): every offset used is
 * even, since every ggml block size is. */
__device__ __forceinline__ uint32_t mk_s_u16(const uint8_t *p) { return *(const unsigned short *)p; }
__device__ __forceinline__ uint32_t mk_s_w32(const uint8_t *p) { return mk_s_u16(p) | (mk_s_u16(p + 2) << 16); }
__device__ __forceinline__ float mk_s_half(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)mk_s_u16(p)));
}
/* Sum over i < 4 of value(e0 + i) * x[i] for a float format (f32, f16, bf16; the block formats take
 * the int8 dots of quant8.cuh), where e0 = 32 * g + 4 * q (q = 0..7) counts from the start of the
 * 32-element run at b. */
__device__ __forceinline__ float mk_q_dot4(uint32_t t, const uint8_t *b, uint32_t g, uint32_t q, const float *x) {
    const uint32_t e = 4u * q; /* first element in the 32-element group */
    (void)g;
    switch (t) {
    case 0u: { /* f32 */
        const float *f = (const float *)(b + 4u * e);
        return f[0] * x[0] + f[1] * x[1] + f[2] * x[2] + f[3] * x[3];
    }
    case 1u: { /* f16 */
        const uint8_t *h = b + 2u * e;
        return mk_s_half(h) * x[0] + mk_s_half(h + 2) * x[1] + mk_s_half(h + 4) * x[2] + mk_s_half(h + 6) * x[3];
    }
    case 30u: { /* bf16 */
        uint32_t lo = mk_s_w32(b + 2u * e), hi = mk_s_w32(b + 2u * e + 4u);
        float v0, v1, v2, v3;
        uint32_t u0 = lo << 16, u1 = lo & 0xffff0000u, u2 = hi << 16, u3 = hi & 0xffff0000u;
        memcpy(&v0, &u0, 4);
        memcpy(&v1, &u1, 4);
        memcpy(&v2, &u2, 4);
        memcpy(&v3, &u3, 4);
        return v0 * x[0] + v1 * x[1] + v2 * x[2] + v3 * x[3];
    }
    default: return 0.0f;
    }
}

#endif
