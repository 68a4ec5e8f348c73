/* Weight formats: ggml type tables, fp16/bf16 conversion and per-row dequantize/dot/quantize. */
#include "core/dtype.h"

#include "core/status.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

/* Indexed by ggml type id; ids 4 and 5 (q4_2, q4_3) were dropped before GGUF and stay NULL. */
static const char *const mk_ggml_names[] = {
    [0] = "f32",         [1] = "f16",       [2] = "q4_0",     [3] = "q4_1",    [6] = "q5_0",        [7] = "q5_1",
    [8] = "q8_0",        [9] = "q8_1",      [10] = "q2_k",    [11] = "q3_k",   [12] = "q4_k",       [13] = "q5_k",
    [14] = "q6_k",       [15] = "q8_k",     [16] = "iq2_xxs", [17] = "iq2_xs", [18] = "iq3_xxs",    [19] = "iq1_s",
    [20] = "iq4_nl",     [21] = "iq3_s",    [22] = "iq2_s",   [23] = "iq4_xs", [24] = "i8",         [25] = "i16",
    [26] = "i32",        [27] = "i64",      [28] = "f64",     [29] = "iq1_m",  [30] = "bf16",       [31] = "q4_0_4_4",
    [32] = "q4_0_4_8",   [33] = "q4_0_8_8", [34] = "tq1_0",   [35] = "tq2_0",  [36] = "iq4_nl_4_4", [37] = "iq4_nl_4_8",
    [38] = "iq4_nl_8_8", [39] = "mxfp4",    [40] = "nvfp4",   [41] = "q1_0",   [42] = "q2_0",
};

const enum mk_dtype mk_dtype_all[MK_DTYPE_COUNT] = {
    MK_DTYPE_F32,  MK_DTYPE_F16,  MK_DTYPE_Q4_0,   MK_DTYPE_Q4_1,   MK_DTYPE_Q5_0,
    MK_DTYPE_Q5_1, MK_DTYPE_Q8_0, MK_DTYPE_Q2_K,   MK_DTYPE_Q3_K,   MK_DTYPE_Q4_K,
    MK_DTYPE_Q5_K, MK_DTYPE_Q6_K, MK_DTYPE_IQ4_NL, MK_DTYPE_IQ4_XS, MK_DTYPE_BF16,
};

const int8_t mk_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

#define MK_INFO(type, name, block, bytes) [type] = { name, block, bytes }
static const struct mk_dtype_info mk_infos[] = {
    MK_INFO(MK_DTYPE_F32, "f32", 1, 4),
    MK_INFO(MK_DTYPE_F16, "f16", 1, 2),
    MK_INFO(MK_DTYPE_BF16, "bf16", 1, 2),
    MK_INFO(MK_DTYPE_Q4_0, "q4_0", MK_QK4_0, sizeof(struct mk_block_q4_0)),
    MK_INFO(MK_DTYPE_Q4_1, "q4_1", MK_QK4_0, sizeof(struct mk_block_q4_1)),
    MK_INFO(MK_DTYPE_Q5_0, "q5_0", MK_QK4_0, sizeof(struct mk_block_q5_0)),
    MK_INFO(MK_DTYPE_Q5_1, "q5_1", MK_QK4_0, sizeof(struct mk_block_q5_1)),
    MK_INFO(MK_DTYPE_Q8_0, "q8_0", MK_QK8_0, sizeof(struct mk_block_q8_0)),
    MK_INFO(MK_DTYPE_Q2_K, "q2_k", MK_QK_K, sizeof(struct mk_block_q2_k)),
    MK_INFO(MK_DTYPE_Q3_K, "q3_k", MK_QK_K, sizeof(struct mk_block_q3_k)),
    MK_INFO(MK_DTYPE_Q4_K, "q4_k", MK_QK_K, sizeof(struct mk_block_q4_k)),
    MK_INFO(MK_DTYPE_Q5_K, "q5_k", MK_QK_K, sizeof(struct mk_block_q5_k)),
    MK_INFO(MK_DTYPE_Q6_K, "q6_k", MK_QK_K, sizeof(struct mk_block_q6_k)),
    MK_INFO(MK_DTYPE_IQ4_NL, "iq4_nl", MK_QK4_0, sizeof(struct mk_block_iq4_nl)),
    MK_INFO(MK_DTYPE_IQ4_XS, "iq4_xs", MK_QK_K, sizeof(struct mk_block_iq4_xs)),
};
#undef MK_INFO

const struct mk_dtype_info *mk_dtype_get(uint32_t type) {
    /* ids between the supported ones have a zeroed entry (no name) */
    if (type >= sizeof(mk_infos) / sizeof(mk_infos[0]) || !mk_infos[type].name) return NULL;
    return &mk_infos[type];
}

bool mk_dtype_is_block(uint32_t type) {
    const struct mk_dtype_info *di = mk_dtype_get(type);
    return di && di->block_size > 1;
}

const char *mk_dtype_ggml_name(uint32_t type) {
    if (type >= sizeof(mk_ggml_names) / sizeof(mk_ggml_names[0])) return NULL;
    return mk_ggml_names[type];
}

int mk_dtype_parse(const char *name, enum mk_dtype *out) {
    if (!name) return -1;
    for (size_t i = 0; i < MK_DTYPE_COUNT; i++) {
        if (strcasecmp(name, mk_dtype_get(mk_dtype_all[i])->name) == 0) {
            if (out) *out = mk_dtype_all[i];
            return 0;
        }
    }
    return -1;
}

size_t mk_dtype_row_bytes(enum mk_dtype type, int64_t n) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    MK_ASSERT(info != NULL && n >= 0 && n % info->block_size == 0);
    return (size_t)(n / info->block_size) * info->type_size;
}

static inline uint32_t mk_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float mk_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Branch-free so that row loops over it vectorize; exact for every input: subnormals are
 * rebuilt by a subtraction of normal floats, so no denormal operand is ever touched. */
static inline float mk_fp16_to_fp32_inline(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t exp = em & 0x0f800000u;
    /* masks instead of branches: all ones when the half is inf/NaN, resp. zero/subnormal */
    const uint32_t is_special = 0u - (uint32_t)(exp == 0x0f800000u);
    const uint32_t is_small = 0u - (uint32_t)(exp == 0);
    const uint32_t normal = em + (112u << 23) + (is_special & (112u << 23));
    const uint32_t small = mk_f32_bits(mk_bits_f32(em + (113u << 23)) - 0x1p-14f);
    return mk_bits_f32(sign | (normal & ~is_small) | (small & is_small));
}

float mk_fp16_to_fp32(uint16_t h) { return mk_fp16_to_fp32_inline(h); }

/* Every half as a float, filled once: a KV cache row widens at one load an element, where the
 * bit arithmetic (which gcc -O2 does not vectorize) made an f16 cache 2-3x slower than f32 in
 * the CPU executor's attention. */
static float mk_fp16_table_data[1u << 16];
static pthread_once_t mk_fp16_table_once = PTHREAD_ONCE_INIT;

static void mk_fp16_table_fill(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) mk_fp16_table_data[h] = mk_fp16_to_fp32_inline((uint16_t)h);
}

const float *mk_fp16_table(void) {
    pthread_once(&mk_fp16_table_once, mk_fp16_table_fill);
    return mk_fp16_table_data;
}

void mk_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n) {
    const float *t = mk_fp16_table();
    for (int64_t i = 0; i < n; i++) dst[i] = t[src[i]];
}

uint16_t mk_fp32_to_fp16(float f) {
    uint32_t u = mk_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) {
        if (man == 0) return sign | 0x7c00u;
        /* keep the top payload bits and force quiet so a NaN never becomes inf */
        return sign | 0x7e00u | (uint16_t)(man >> 13);
    }
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) return sign | 0x7c00u;
    uint32_t m, shift;
    if (e <= 0) {
        /* subnormal result, in units of 2^-24: the full significand shifted by 14 - e */
        if (e < -10) return sign;
        m = man | 0x800000u;
        shift = (uint32_t)(14 - e); /* 13 + (1 - e) */
    } else {
        m = man;
        shift = 13;
    }
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    /* a carry out of the mantissa correctly bumps the exponent (up to inf) */
    if (e <= 0) return sign | (uint16_t)q;
    return sign | (uint16_t)(((uint32_t)e << 10) + q);
}

float mk_bf16_to_fp32(uint16_t h) { return mk_bits_f32((uint32_t)h << 16); }

uint16_t mk_fp32_to_bf16(float f) {
    uint32_t u = mk_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- block formats ----
 * Reduction loops keep MK_LANES independent partial sums so the compiler can vectorize them
 * without reassociating a single fp32 sum (which it may not do without -ffast-math). */
#define MK_LANES 8

static inline float mk_lanes_sum(const float acc[MK_LANES]) {
    float s = 0.0f;
    for (int k = 0; k < MK_LANES; k++) s += acc[k];
    return s;
}

/* acc[k] += sum over the n/MK_LANES rows of w[.][k] * x[.][k]; n is a multiple of MK_LANES. */
static inline void mk_lanes_dot(float acc[MK_LANES], const float *restrict w, const float *restrict x, int n) {
    for (int i = 0; i < n; i += MK_LANES)
        for (int k = 0; k < MK_LANES; k++) acc[k] += w[i + k] * x[i + k];
}

/* 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of a Q4_K block: bytes 0-3
 * hold scales 0-3 (low 6 bits) and bytes 4-7 mins 0-3; sub-blocks 4-7 keep their low nibbles in
 * bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-7. */
static inline void mk_q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* restrict: y is float and the blocks are bytes, which C lets alias anything; without it the
 * loops are not vectorized. */
static inline void mk_dequantize_q8_0(const struct mk_block_q8_0 *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    for (int l = 0; l < MK_QK8_0; l++) y[l] = (float)b->qs[l] * d;
}

static inline void mk_dequantize_q4_k(const struct mk_block_q4_k *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    const float dmin = mk_fp16_to_fp32_inline(b->dmin);
    const uint8_t *q = b->qs;
    /* each 64 values share 32 bytes: low nibbles first, then high nibbles */
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        mk_q4k_scale_min(2 * c, b->scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        mk_q4k_scale_min(2 * c + 1, b->scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
        y += 64;
    }
}

static inline void mk_dequantize_q6_k(const struct mk_block_q6_k *restrict b, float *restrict y) {
    /* First the 6-bit values in element order, as bytes, then one scale per 16 of them. Each
     * 128 values use 64 ql and 32 qh bytes: ql byte l holds values l (low nibble) and l+64
     * (high), ql byte l+32 holds l+32 and l+96, and qh byte l their top 2 bits. */
    int8_t q[MK_QK_K]; /* (element of the block), in -32..31 */
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h;
        const uint8_t *qh = b->qh + 32 * h;
        int8_t *v = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            v[l] = (int8_t)(((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32);
            v[l + 32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
            v[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            v[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
    const float d = mk_fp16_to_fp32_inline(b->d);
    for (int j = 0; j < MK_QK_K / 16; j++) {
        const float s = d * b->scales[j];
        for (int l = 0; l < 16; l++) y[16 * j + l] = s * (float)q[16 * j + l];
    }
}

/* The 32-element formats keep element j in the low nibble of byte j and element j+16 in the high
 * nibble; q5 formats add a 5th bit per element from a 32-bit little-endian word. Each value is
 * computed as in ggml (int quant to float, times the scale, plus the offset) so results are
 * bit-identical. */
static inline uint32_t mk_load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void mk_dequantize_q4_0(const struct mk_block_q4_0 *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    for (int j = 0; j < MK_QK4_0 / 2; j++) {
        y[j] = (float)((b->qs[j] & 0x0f) - 8) * d;
        y[j + MK_QK4_0 / 2] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static inline void mk_dequantize_q4_1(const struct mk_block_q4_1 *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d), m = mk_fp16_to_fp32_inline(b->m);
    for (int j = 0; j < MK_QK4_0 / 2; j++) {
        y[j] = (float)(b->qs[j] & 0x0f) * d + m;
        y[j + MK_QK4_0 / 2] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static inline void mk_dequantize_q5_0(const struct mk_block_q5_0 *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    const uint32_t qh = mk_load_u32le(b->qh);
    for (int j = 0; j < MK_QK4_0 / 2; j++) {
        const int h0 = (int)((qh >> j) << 4) & 0x10, h1 = (int)(qh >> (j + 12)) & 0x10;
        y[j] = (float)(((b->qs[j] & 0x0f) | h0) - 16) * d;
        y[j + MK_QK4_0 / 2] = (float)(((b->qs[j] >> 4) | h1) - 16) * d;
    }
}

static inline void mk_dequantize_q5_1(const struct mk_block_q5_1 *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d), m = mk_fp16_to_fp32_inline(b->m);
    const uint32_t qh = mk_load_u32le(b->qh);
    for (int j = 0; j < MK_QK4_0 / 2; j++) {
        const int h0 = (int)((qh >> j) << 4) & 0x10, h1 = (int)(qh >> (j + 12)) & 0x10;
        y[j] = (float)((b->qs[j] & 0x0f) | h0) * d + m;
        y[j + MK_QK4_0 / 2] = (float)((b->qs[j] >> 4) | h1) * d + m;
    }
}

static inline void mk_dequantize_iq4_nl(const struct mk_block_iq4_nl *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    for (int j = 0; j < MK_QK4_0 / 2; j++) {
        y[j] = d * (float)mk_iq4nl_values[b->qs[j] & 0x0f];
        y[j + MK_QK4_0 / 2] = d * (float)mk_iq4nl_values[b->qs[j] >> 4];
    }
}

static inline void mk_dequantize_q2_k(const struct mk_block_q2_k *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d), dmin = mk_fp16_to_fp32_inline(b->dmin);
    /* each 128 values use 32 bytes: 2-bit field k of byte l is element 32*k + l; scales go in
     * element order, one per 16 */
    const uint8_t *q = b->qs;
    int is = 0;
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int half = 0; half < 2; half++) {
                const uint8_t sc = b->scales[is++];
                const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[16 * half + l] >> (2 * k)) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* Signed 6-bit scale j (0..15) of a Q3_K block, from its 12 packed bytes: the low 4 bits are the
 * nibbles of bytes 0-7 (scales 0-7 low nibbles, 8-15 high), the top 2 bits sit in bytes 8-11. */
static inline int mk_q3k_scale(int j, const uint8_t *s) {
    const int lo = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
    return (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

static inline void mk_dequantize_q3_k(const struct mk_block_q3_k *restrict b, float *restrict y) {
    const float d_all = mk_fp16_to_fp32_inline(b->d);
    const uint8_t *q = b->qs;
    int is = 0;
    uint8_t m = 1; /* hmask bit of the current 32-element slice */
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int half = 0; half < 2; half++) {
                const float dl = d_all * (float)mk_q3k_scale(is++, b->scales);
                const uint8_t *hm = b->hmask + 16 * half;
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)(((q[16 * half + l] >> (2 * k)) & 3) - ((hm[l] & m) ? 0 : 4));
            }
            m <<= 1;
        }
        q += 32;
    }
}

static inline void mk_dequantize_q5_k(const struct mk_block_q5_k *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    const float dmin = mk_fp16_to_fp32_inline(b->dmin);
    const uint8_t *ql = b->qs;
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        mk_q4k_scale_min(2 * c, b->scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        mk_q4k_scale_min(2 * c + 1, b->scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)((ql[l] & 0x0f) + (b->qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)((ql[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        y += 64;
        u1 <<= 2;
        u2 <<= 2;
    }
}

static inline void mk_dequantize_iq4_xs(const struct mk_block_iq4_xs *restrict b, float *restrict y) {
    const float d = mk_fp16_to_fp32_inline(b->d);
    const uint8_t *qs = b->qs;
    for (int ib = 0; ib < MK_QK_K / 32; ib++) {
        const int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((b->scales_h >> (2 * ib)) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)mk_iq4nl_values[qs[j] & 0x0f];
            y[j + 16] = dl * (float)mk_iq4nl_values[qs[j] >> 4];
        }
        y += 32;
        qs += 16;
    }
}

/* One decoder per block format, by ggml id; plain float types have none. */
typedef void (*mk_block_deq_fn)(const void *block, float *y);
#define MK_DEQ_ANY(t) \
    static void mk_deq_##t##_any(const void *b, float *y) { mk_dequantize_##t(b, y); }
MK_DEQ_ANY(q4_0)
MK_DEQ_ANY(q4_1)
MK_DEQ_ANY(q5_0)
MK_DEQ_ANY(q5_1)
MK_DEQ_ANY(q8_0)
MK_DEQ_ANY(q2_k)
MK_DEQ_ANY(q3_k)
MK_DEQ_ANY(q4_k)
MK_DEQ_ANY(q5_k)
MK_DEQ_ANY(q6_k)
MK_DEQ_ANY(iq4_nl)
MK_DEQ_ANY(iq4_xs)
#undef MK_DEQ_ANY

static mk_block_deq_fn mk_block_deq(enum mk_dtype type) {
    switch (type) {
    case MK_DTYPE_Q4_0: return mk_deq_q4_0_any;
    case MK_DTYPE_Q4_1: return mk_deq_q4_1_any;
    case MK_DTYPE_Q5_0: return mk_deq_q5_0_any;
    case MK_DTYPE_Q5_1: return mk_deq_q5_1_any;
    case MK_DTYPE_Q8_0: return mk_deq_q8_0_any;
    case MK_DTYPE_Q2_K: return mk_deq_q2_k_any;
    case MK_DTYPE_Q3_K: return mk_deq_q3_k_any;
    case MK_DTYPE_Q4_K: return mk_deq_q4_k_any;
    case MK_DTYPE_Q5_K: return mk_deq_q5_k_any;
    case MK_DTYPE_Q6_K: return mk_deq_q6_k_any;
    case MK_DTYPE_IQ4_NL: return mk_deq_iq4_nl_any;
    case MK_DTYPE_IQ4_XS: return mk_deq_iq4_xs_any;
    case MK_DTYPE_F32:
    case MK_DTYPE_F16:
    case MK_DTYPE_BF16: break;
    }
    return NULL;
}

void mk_dequantize_row(enum mk_dtype type, const void *src, float *dst, int64_t n) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    MK_ASSERT(info != NULL && n >= 0 && n % info->block_size == 0);
    const int64_t nb = n / info->block_size;
    switch (type) {
    case MK_DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case MK_DTYPE_F16: mk_fp16_to_fp32_row(src, dst, n); return;
    case MK_DTYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = mk_bits_f32((uint32_t)h[i] << 16);
        return;
    }
    case MK_DTYPE_Q8_0:
        /* the common case, kept inline so its loop vectorizes */
        for (int64_t i = 0; i < nb; i++) mk_dequantize_q8_0((const struct mk_block_q8_0 *)src + i, dst + i * MK_QK8_0);
        return;
    default: break;
    }
    const mk_block_deq_fn deq = mk_block_deq(type);
    MK_ASSERT(deq != NULL);
    for (int64_t i = 0; i < nb; i++)
        deq((const uint8_t *)src + (size_t)i * info->type_size, dst + i * (int64_t)info->block_size);
}

/* ---- dot products: weight row in its stored format times fp32 activations ----
 * Lane sums run across the whole row and are folded once at the end. Block formats decode one
 * block into a stack buffer and then take a plain float dot: two simple loops vectorize where
 * one fused loop over nibbles does not. */

static float mk_dot_f32(const float *w, const float *x, int64_t n) {
    float acc[MK_LANES] = { 0 };
    const int64_t nv = n - n % MK_LANES;
    for (int64_t i = 0; i < nv; i += MK_LANES)
        for (int k = 0; k < MK_LANES; k++) acc[k] += w[i + k] * x[i + k];
    float s = mk_lanes_sum(acc);
    for (int64_t i = nv; i < n; i++) s += w[i] * x[i];
    return s;
}

static float mk_dot_f16(const uint16_t *w, const float *x, int64_t n) {
    float acc[MK_LANES] = { 0 };
    const int64_t nv = n - n % MK_LANES;
    for (int64_t i = 0; i < nv; i += MK_LANES)
        for (int k = 0; k < MK_LANES; k++) acc[k] += mk_fp16_to_fp32_inline(w[i + k]) * x[i + k];
    float s = mk_lanes_sum(acc);
    for (int64_t i = nv; i < n; i++) s += mk_fp16_to_fp32_inline(w[i]) * x[i];
    return s;
}

static float mk_dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    float acc[MK_LANES] = { 0 };
    const int64_t nv = n - n % MK_LANES;
    for (int64_t i = 0; i < nv; i += MK_LANES)
        for (int k = 0; k < MK_LANES; k++) acc[k] += mk_bits_f32((uint32_t)w[i + k] << 16) * x[i + k];
    float s = mk_lanes_sum(acc);
    for (int64_t i = nv; i < n; i++) s += mk_bits_f32((uint32_t)w[i] << 16) * x[i];
    return s;
}

/* Block formats: decode up to MK_QK_K elements of whole blocks into a stack buffer, then a
 * lane-parallel float dot against the matching activations. */
static float mk_dot_blocks(const uint8_t *blocks, const struct mk_dtype_info *info, mk_block_deq_fn deq, const float *x,
                           int64_t nb) {
    const int group = (int)(MK_QK_K / info->block_size); /* blocks per buffer fill */
    float acc[MK_LANES] = { 0 };
    float w[MK_QK_K]; /* (element of the group) */
    for (int64_t i = 0; i < nb; i += group) {
        const int g = nb - i < group ? (int)(nb - i) : group;
        for (int j = 0; j < g; j++) deq(blocks + (size_t)(i + j) * info->type_size, w + j * (int)info->block_size);
        mk_lanes_dot(acc, w, x + i * (int64_t)info->block_size, g * (int)info->block_size);
    }
    return mk_lanes_sum(acc);
}

static float mk_dot_q8_0(const struct mk_block_q8_0 *b, const float *x, int64_t nb) {
    enum { GROUP = MK_QK_K / MK_QK8_0 }; /* blocks decoded per buffer fill */
    float acc[MK_LANES] = { 0 };
    float w[GROUP * MK_QK8_0]; /* (element of the group) */
    for (int64_t i = 0; i < nb; i += GROUP) {
        const int g = nb - i < GROUP ? (int)(nb - i) : GROUP;
        for (int j = 0; j < g; j++) mk_dequantize_q8_0(b + i + j, w + j * MK_QK8_0);
        mk_lanes_dot(acc, w, x + i * MK_QK8_0, g * MK_QK8_0);
    }
    return mk_lanes_sum(acc);
}

float mk_dot_row(enum mk_dtype type, const void *row, const float *x, int64_t n) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    MK_ASSERT(info != NULL && n >= 0 && n % info->block_size == 0);
    const int64_t nb = n / info->block_size;
    switch (type) {
    case MK_DTYPE_F32: return mk_dot_f32(row, x, n);
    case MK_DTYPE_F16: return mk_dot_f16(row, x, n);
    case MK_DTYPE_BF16: return mk_dot_bf16(row, x, n);
    case MK_DTYPE_Q8_0: return mk_dot_q8_0(row, x, nb);
    default: break;
    }
    const mk_block_deq_fn deq = mk_block_deq(type);
    MK_ASSERT(deq != NULL);
    return mk_dot_blocks(row, info, deq, x, nb);
}

/* ---- quantization: llama.cpp's reference (no importance matrix) algorithms ---- */

/* Rounds half to even like ggml's nearest_int; out-of-range and NaN inputs are clamped rather
 * than left undefined (ggml asserts instead). */
static inline int mk_nearest_int(float v) {
    if (!(v > -4194303.0f)) return v != v ? 0 : -4194303;
    if (v > 4194303.0f) return 4194303;
    return (int)rintf(v);
}

static void mk_quantize_q8_0(const float *x, struct mk_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int l = 0; l < MK_QK8_0; l++) amax = fmaxf(amax, fabsf(x[l]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = mk_fp32_to_fp16(d);
        for (int l = 0; l < MK_QK8_0; l++) {
            float v = roundf(x[l] * id); /* half away from zero, as ggml's q8_0 reference */
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            y[i].qs[l] = (int8_t)(v == v ? v : 0.0f);
        }
        x += MK_QK8_0;
    }
}

/* Fits x[i] ~ scale*L[i] - min with L in [0, nmax] and min >= 0, minimizing the weighted
 * squared (use_mad: absolute) error over a small sweep of candidate scales (ggml's
 * make_qkx2_quants). Returns scale; *the_min receives min. */
static float mk_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                                 uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = mk_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        const float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = mk_nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                const float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Q4_K and Q5_K: 8 sub-blocks of 32 fitted with make_qkx2_quants (nmax 15 or 31), their scales
 * and mins quantized to 6 bits against fp16 super-block scales, then every element requantized
 * against the scales as stored. Fills d, dmin, scales[12] and L (quants in 0..nmax). */
static void mk_quantize_k_super(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out, uint16_t *dmin_out,
                                uint8_t packed[MK_K_SCALE_SIZE], uint8_t L[MK_QK_K]) {
    uint8_t Laux[32];
    float weights[32];
    float mins[MK_QK_K / 32];   /* (sub-block) */
    float scales[MK_QK_K / 32]; /* (sub-block) */
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < MK_QK_K / 32; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        /* weight large values more, plus a floor so small ones still count */
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
        scales[j] = mk_make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }

    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(packed, 0, MK_K_SCALE_SIZE);
    for (int j = 0; j < MK_QK_K / 32; j++) {
        /* the uint8_t narrowing (then clamp) matches ggml even for a stray negative */
        uint8_t ls = (uint8_t)mk_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)mk_nearest_int(inv_min * mins[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = mk_fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = mk_fp32_to_fp16(max_min / 63.0f);

    /* requantize against the scales as actually stored (6-bit, fp16) */
    const float d_all = mk_fp16_to_fp32(*d_out), dmin_all = mk_fp16_to_fp32(*dmin_out);
    for (int j = 0; j < MK_QK_K / 32; j++) {
        uint8_t sc, m;
        mk_q4k_scale_min(j, packed, &sc, &m);
        const float d = d_all * sc;
        if (d == 0.0f) continue;
        const float dm = dmin_all * m;
        for (int l = 0; l < 32; l++) {
            int q = mk_nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
        }
    }
}

static void mk_quantize_q4_k(const float *x, struct mk_block_q4_k *y, int64_t nb) {
    uint8_t L[MK_QK_K]; /* (element of the block) */
    for (int64_t i = 0; i < nb; i++) {
        mk_quantize_k_super(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < MK_QK_K; j += 64) {
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
        x += MK_QK_K;
    }
}

static void mk_quantize_q5_k(const float *x, struct mk_block_q5_k *y, int64_t nb) {
    uint8_t L[MK_QK_K]; /* (element of the block) */
    for (int64_t i = 0; i < nb; i++) {
        mk_quantize_k_super(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        /* 64 values per 32 qs bytes as q4_k; their 5th bits in qh bit 2c (first 32) and 2c+1 */
        memset(y[i].qh, 0, sizeof(y[i].qh));
        uint8_t *ql = y[i].qs;
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < MK_QK_K; n += 64) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
            ql += 32;
        }
        x += MK_QK_K;
    }
}

/* Absolute maximum of n values, returned with its sign (the first one on ties). */
static inline float mk_signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Symmetric fit x[i] ~ scale*(L[i] - nmax), L in [0, 2*nmax), weighted by x^2 (ggml's
 * make_qx_quants with rmse_type 1 and no importance weights). Returns scale. */
static float mk_make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = mk_signed_absmax(x, n);
    if (fabsf(max) < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = mk_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = mk_nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = mk_nearest_int(iscale * x[i]);
                l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void mk_quantize_q6_k(const float *x, struct mk_block_q6_k *y, int64_t nb) {
    int8_t L[MK_QK_K];
    float scales[MK_QK_K / 16]; /* (sub-block) */

    for (int64_t i = 0; i < nb; i++) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < MK_QK_K / 16; ib++) {
            scales[ib] = mk_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) {
            memset(&y[i], 0, sizeof(y[i]));
            x += MK_QK_K;
            continue;
        }

        /* the signed max maps to -128 so the full int8 range is used */
        const float iscale = -128.0f / max_scale;
        y[i].d = mk_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < MK_QK_K / 16; ib++) {
            int s = mk_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s > 127 ? 127 : s);
        }

        const float d_all = mk_fp16_to_fp32(y[i].d);
        for (int j = 0; j < MK_QK_K / 16; j++) {
            const float d = d_all * y[i].scales[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) {
                int q = mk_nearest_int(x[16 * j + l] / d);
                q = q < -32 ? -32 : q > 31 ? 31 : q;
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }

        uint8_t *ql = y[i].ql;
        uint8_t *qh = y[i].qh;
        for (int j = 0; j < MK_QK_K; j += 128) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = (uint8_t)L[j + l], q2 = (uint8_t)L[j + l + 32];
                const uint8_t q3 = (uint8_t)L[j + l + 64], q4 = (uint8_t)L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0x0f) | ((q3 & 0x0f) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0x0f) | ((q4 & 0x0f) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
        x += MK_QK_K;
    }
}

/* ggml's 4/5-bit round-to-nearest quantizers take (int8_t)(v) of a value that is in range for
 * finite inputs; this truncates the same way and sends NaN and out-of-range values to a bound
 * instead of leaving the conversion undefined. */
static inline int mk_trunc_int(float v) {
    if (!(v > -128.0f)) return v != v ? 0 : -128;
    if (v > 255.0f) return 255;
    return (int)v;
}

static inline void mk_min_max(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

static inline int mk_clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Symmetric 4/5-bit (q4_0, q5_0): the signed absmax maps to -2^(bits-1). Writes quants 0..2^bits-1. */
static float mk_quantize_sym32(const float *x, int half_range, uint8_t q[MK_QK4_0]) {
    const float d = mk_signed_absmax(x, MK_QK4_0) / (float)-half_range;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < MK_QK4_0; j++)
        q[j] = (uint8_t)mk_clamp_int(mk_trunc_int(x[j] * id + ((float)half_range + 0.5f)), 0, 2 * half_range - 1);
    return d;
}

static void mk_quantize_q4_0(const float *x, struct mk_block_q4_0 *y, int64_t nb) {
    uint8_t q[MK_QK4_0];
    for (int64_t i = 0; i < nb; i++, x += MK_QK4_0) {
        y[i].d = mk_fp32_to_fp16(mk_quantize_sym32(x, 8, q));
        for (int j = 0; j < MK_QK4_0 / 2; j++) y[i].qs[j] = (uint8_t)(q[j] | (q[j + MK_QK4_0 / 2] << 4));
    }
}

static void mk_quantize_q5_0(const float *x, struct mk_block_q5_0 *y, int64_t nb) {
    uint8_t q[MK_QK4_0];
    for (int64_t i = 0; i < nb; i++, x += MK_QK4_0) {
        y[i].d = mk_fp32_to_fp16(mk_quantize_sym32(x, 16, q));
        uint32_t qh = 0;
        for (int j = 0; j < MK_QK4_0 / 2; j++) {
            const uint8_t q0 = q[j], q1 = q[j + MK_QK4_0 / 2];
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + MK_QK4_0 / 2);
        }
        for (int k = 0; k < 4; k++) y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* Asymmetric (q4_1, q5_1): the block's [min, max] spread over levels + 1 values. */
static void mk_quantize_q4_1(const float *x, struct mk_block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += MK_QK4_0) {
        float min, max;
        mk_min_max(x, MK_QK4_0, &min, &max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = mk_fp32_to_fp16(d);
        y[i].m = mk_fp32_to_fp16(min);
        for (int j = 0; j < MK_QK4_0 / 2; j++) {
            const int q0 = mk_clamp_int(mk_trunc_int((x[j] - min) * id + 0.5f), 0, 15);
            const int q1 = mk_clamp_int(mk_trunc_int((x[j + MK_QK4_0 / 2] - min) * id + 0.5f), 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void mk_quantize_q5_1(const float *x, struct mk_block_q5_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += MK_QK4_0) {
        float min, max;
        mk_min_max(x, MK_QK4_0, &min, &max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = mk_fp32_to_fp16(d);
        y[i].m = mk_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < MK_QK4_0 / 2; j++) {
            /* no clamp here in ggml: a rounding spill to 32 keeps its low 5 bits (0) */
            const uint8_t q0 = (uint8_t)mk_trunc_int((x[j] - min) * id + 0.5f);
            const uint8_t q1 = (uint8_t)mk_trunc_int((x[j + MK_QK4_0 / 2] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)((q0 & 0x10u) >> 4) << j | (uint32_t)((q1 & 0x10u) >> 4) << (j + MK_QK4_0 / 2);
        }
        for (int k = 0; k < 4; k++) y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* Packs 256 2-bit values: 2-bit field k of byte l of each 32-byte half is element 32*k + l. */
static void mk_pack_2bit(const uint8_t L[MK_QK_K], uint8_t qs[MK_QK_K / 4]) {
    for (int j = 0; j < MK_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static void mk_quantize_q2_k(const float *x, struct mk_block_q2_k *y, int64_t nb) {
    uint8_t L[MK_QK_K]; /* (element of the block) */
    uint8_t Laux[16];
    float weights[16];
    float mins[MK_QK_K / 16];   /* (sub-block) */
    float scales[MK_QK_K / 16]; /* (sub-block) */
    const float q4scale = 15.0f;
    for (int64_t i = 0; i < nb; i++, x += MK_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < MK_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] =
                mk_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        /* ggml stores nearest_int(...) into the byte unclamped; it is at most 15 for finite input */
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < MK_QK_K / 16; j++) y[i].scales[j] = (uint8_t)mk_nearest_int(iscale * scales[j]);
            y[i].d = mk_fp32_to_fp16(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof(y[i].scales));
            y[i].d = mk_fp32_to_fp16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < MK_QK_K / 16; j++) y[i].scales[j] |= (uint8_t)(mk_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = mk_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = mk_fp32_to_fp16(0.0f);
        }
        const float d_all = mk_fp16_to_fp32(y[i].d), dmin_all = mk_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < MK_QK_K / 16; j++) {
            const float d = d_all * (y[i].scales[j] & 0x0f);
            if (d == 0.0f) continue;
            const float dm = dmin_all * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)mk_clamp_int(mk_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        mk_pack_2bit(L, y[i].qs);
    }
}

/* Symmetric fit x[i] ~ scale*L[i], L in [-nmax, nmax), weighted by x^2, refined by moving one
 * element at a time while that improves the fit (ggml's make_q3_quants with do_rmse). Writes
 * L + nmax; returns scale. */
static float mk_make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = mk_signed_absmax(x, n);
    if (fabsf(max) < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = mk_clamp_int(mk_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = mk_clamp_int(mk_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

static void mk_quantize_q3_k(const float *x, struct mk_block_q3_k *y, int64_t nb) {
    int8_t L[MK_QK_K];          /* (element of the block) */
    float scales[MK_QK_K / 16]; /* (sub-block) */
    for (int64_t i = 0; i < nb; i++, x += MK_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < MK_QK_K / 16; j++) {
            scales[j] = mk_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof(y[i].scales));
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < MK_QK_K / 16; j++) {
                /* ggml narrows to int8_t before clamping */
                const int l = mk_clamp_int((int8_t)mk_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0x0f);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = mk_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = mk_fp32_to_fp16(0.0f);
        }
        const float d_all = mk_fp16_to_fp32(y[i].d);
        for (int j = 0; j < MK_QK_K / 16; j++) {
            const float d = d_all * (float)mk_q3k_scale(j, y[i].scales);
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(mk_clamp_int(mk_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* high bit of element j goes to bit j/32 of hmask[j%32]; the low 2 bits pack as q2_k */
        uint8_t low[MK_QK_K]; /* (element of the block) */
        memset(y[i].hmask, 0, sizeof(y[i].hmask));
        for (int j = 0; j < MK_QK_K; j++) {
            if (L[j] > 3) y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
            low[j] = (uint8_t)(L[j] & 3);
        }
        mk_pack_2bit(low, y[i].qs);
    }
}

/* Index of the code book value nearest to v (ties to the lower one), by bisection as in ggml. */
static inline int mk_iq4_best_index(float v) {
    const int8_t *val = mk_iq4nl_values;
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

/* Scale of one 32-element sub-block for the non-linear code book: the best of 15 candidate
 * scales around max/-127, each refitted by weighted least squares (weights x^2). */
static float mk_iq4_block_scale(const float *xb) {
    enum { NTRY = 7 };
    const int8_t *values = mk_iq4nl_values;
    const float max = mk_signed_absmax(xb, 32);
    if (fabsf(max) < 1e-15f) return 0.0f;
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const float q = values[mk_iq4_best_index(id * xb[j])];
        const float w = xb[j] * xb[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = values[mk_iq4_best_index(id * xb[j])];
            const float w = xb[j] * xb[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Packs 32 code book indices as 16 bytes: element j low nibble, element j+16 high. */
static void mk_pack_iq4(const uint8_t L[32], uint8_t q4[16]) {
    for (int j = 0; j < 16; j++) q4[j] = (uint8_t)(L[j] | (L[16 + j] << 4));
}

/* iq4_nl: ggml's quantize_iq4_nl without importance weights (what llama-quantize runs; its
 * quantize_row_iq4_nl_ref skips the scale search). */
static void mk_quantize_iq4_nl(const float *x, struct mk_block_iq4_nl *y, int64_t nb) {
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += MK_QK4_0) {
        const float scale = mk_iq4_block_scale(x);
        y[i].d = mk_fp32_to_fp16(scale);
        const float id = scale != 0.0f ? 1 / scale : 0.0f;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)mk_iq4_best_index(id * x[j]);
        mk_pack_iq4(L, y[i].qs);
    }
}

/* iq4_xs: sub-block scales as 6-bit signed multiples of an fp16 super-block scale, then each
 * element indexed against its sub-block's stored scale (ggml computes that in fp32 from the
 * unrounded super-block scale). */
static void mk_quantize_iq4_xs(const float *x, struct mk_block_iq4_xs *y, int64_t nb) {
    float scales[MK_QK_K / 32]; /* (sub-block) */
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += MK_QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < MK_QK_K / 32; ib++) {
            scales[ib] = mk_iq4_block_scale(x + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        const float d = -max_scale / 32;
        y[i].d = mk_fp32_to_fp16(d);
        y[i].scales_h = 0;
        const float id = d != 0.0f ? 1 / d : 0.0f;
        for (int ib = 0; ib < MK_QK_K / 32; ib++) {
            const int l = mk_clamp_int(mk_nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l;
            const float idl = dl != 0.0f ? 1 / dl : 0.0f;
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)mk_iq4_best_index(idl * x[32 * ib + j]);
            mk_pack_iq4(L, y[i].qs + 16 * ib);
            const int biased = l + 32;
            if (ib % 2 == 0)
                y[i].scales_l[ib / 2] = (uint8_t)(biased & 0x0f);
            else
                y[i].scales_l[ib / 2] |= (uint8_t)((biased & 0x0f) << 4);
            y[i].scales_h |= (uint16_t)((biased >> 4) << (2 * ib));
        }
    }
}

size_t mk_quantize_row(enum mk_dtype type, const float *src, void *dst, int64_t n) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    MK_ASSERT(info != NULL && n >= 0 && n % info->block_size == 0);
    const int64_t nb = n / info->block_size;
    switch (type) {
    case MK_DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case MK_DTYPE_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = mk_fp32_to_fp16(src[i]);
        break;
    }
    case MK_DTYPE_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = mk_fp32_to_bf16(src[i]);
        break;
    }
    case MK_DTYPE_Q4_0: mk_quantize_q4_0(src, dst, nb); break;
    case MK_DTYPE_Q4_1: mk_quantize_q4_1(src, dst, nb); break;
    case MK_DTYPE_Q5_0: mk_quantize_q5_0(src, dst, nb); break;
    case MK_DTYPE_Q5_1: mk_quantize_q5_1(src, dst, nb); break;
    case MK_DTYPE_Q8_0: mk_quantize_q8_0(src, dst, nb); break;
    case MK_DTYPE_Q2_K: mk_quantize_q2_k(src, dst, nb); break;
    case MK_DTYPE_Q3_K: mk_quantize_q3_k(src, dst, nb); break;
    case MK_DTYPE_Q4_K: mk_quantize_q4_k(src, dst, nb); break;
    case MK_DTYPE_Q5_K: mk_quantize_q5_k(src, dst, nb); break;
    case MK_DTYPE_Q6_K: mk_quantize_q6_k(src, dst, nb); break;
    case MK_DTYPE_IQ4_NL: mk_quantize_iq4_nl(src, dst, nb); break;
    case MK_DTYPE_IQ4_XS: mk_quantize_iq4_xs(src, dst, nb); break;
    }
    return (size_t)nb * info->type_size;
}
