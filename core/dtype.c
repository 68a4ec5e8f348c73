/* Weight formats: ggml type tables, fp16/bf16 conversion and per-row dequantize/dot/quantize. */
#include "core/dtype.h"

#include "core/status.h"

#include <math.h>
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

static const struct mk_dtype_info mk_info_f32 = { "f32", 1, 4 };
static const struct mk_dtype_info mk_info_f16 = { "f16", 1, 2 };
static const struct mk_dtype_info mk_info_bf16 = { "bf16", 1, 2 };
static const struct mk_dtype_info mk_info_q8_0 = { "q8_0", MK_QK8_0, sizeof(struct mk_block_q8_0) };
static const struct mk_dtype_info mk_info_q4_k = { "q4_k", MK_QK_K, sizeof(struct mk_block_q4_k) };
static const struct mk_dtype_info mk_info_q6_k = { "q6_k", MK_QK_K, sizeof(struct mk_block_q6_k) };

const struct mk_dtype_info *mk_dtype_get(uint32_t type) {
    switch (type) {
    case MK_DTYPE_F32: return &mk_info_f32;
    case MK_DTYPE_F16: return &mk_info_f16;
    case MK_DTYPE_BF16: return &mk_info_bf16;
    case MK_DTYPE_Q8_0: return &mk_info_q8_0;
    case MK_DTYPE_Q4_K: return &mk_info_q4_k;
    case MK_DTYPE_Q6_K: return &mk_info_q6_k;
    default: return NULL;
    }
}

const char *mk_dtype_ggml_name(uint32_t type) {
    if (type >= sizeof(mk_ggml_names) / sizeof(mk_ggml_names[0])) return NULL;
    return mk_ggml_names[type];
}

int mk_dtype_parse(const char *name, enum mk_dtype *out) {
    static const enum mk_dtype supported[] = { MK_DTYPE_F32,  MK_DTYPE_F16,  MK_DTYPE_BF16,
                                               MK_DTYPE_Q8_0, MK_DTYPE_Q4_K, MK_DTYPE_Q6_K };
    if (!name) return -1;
    for (size_t i = 0; i < sizeof(supported) / sizeof(supported[0]); i++) {
        if (strcasecmp(name, mk_dtype_get(supported[i])->name) == 0) {
            if (out) *out = supported[i];
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

void mk_dequantize_row(enum mk_dtype type, const void *src, float *dst, int64_t n) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    MK_ASSERT(info != NULL && n >= 0 && n % info->block_size == 0);
    const int64_t nb = n / info->block_size;
    switch (type) {
    case MK_DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case MK_DTYPE_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = mk_fp16_to_fp32_inline(h[i]);
        break;
    }
    case MK_DTYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = mk_bits_f32((uint32_t)h[i] << 16);
        break;
    }
    case MK_DTYPE_Q8_0:
        for (int64_t i = 0; i < nb; i++) mk_dequantize_q8_0((const struct mk_block_q8_0 *)src + i, dst + i * MK_QK8_0);
        break;
    case MK_DTYPE_Q4_K:
        for (int64_t i = 0; i < nb; i++) mk_dequantize_q4_k((const struct mk_block_q4_k *)src + i, dst + i * MK_QK_K);
        break;
    case MK_DTYPE_Q6_K:
        for (int64_t i = 0; i < nb; i++) mk_dequantize_q6_k((const struct mk_block_q6_k *)src + i, dst + i * MK_QK_K);
        break;
    }
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

static float mk_dot_q8_0(const struct mk_block_q8_0 *b, const float *x, int64_t nb) {
    enum { GROUP = 8 }; /* blocks decoded per buffer fill */
    float acc[MK_LANES] = { 0 };
    float w[GROUP * MK_QK8_0]; /* (element of the group) */
    for (int64_t i = 0; i < nb; i += GROUP) {
        const int g = nb - i < GROUP ? (int)(nb - i) : GROUP;
        for (int j = 0; j < g; j++) mk_dequantize_q8_0(b + i + j, w + j * MK_QK8_0);
        mk_lanes_dot(acc, w, x + i * MK_QK8_0, g * MK_QK8_0);
    }
    return mk_lanes_sum(acc);
}

/* K-quant super-blocks of MK_QK_K elements: decode one block, then a lane-parallel float dot. */
static float mk_dot_k_blocks(const uint8_t *blocks, size_t block_bytes, void (*deq)(const void *, float *),
                             const float *x, int64_t nb) {
    float acc[MK_LANES] = { 0 };
    float w[MK_QK_K]; /* (element of the block) */
    for (int64_t i = 0; i < nb; i++) {
        deq(blocks + (size_t)i * block_bytes, w);
        mk_lanes_dot(acc, w, x + i * MK_QK_K, MK_QK_K);
    }
    return mk_lanes_sum(acc);
}

static void mk_deq_q4_k_any(const void *b, float *y) { mk_dequantize_q4_k(b, y); }
static void mk_deq_q6_k_any(const void *b, float *y) { mk_dequantize_q6_k(b, y); }

float mk_dot_row(enum mk_dtype type, const void *row, const float *x, int64_t n) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    MK_ASSERT(info != NULL && n >= 0 && n % info->block_size == 0);
    const int64_t nb = n / info->block_size;
    switch (type) {
    case MK_DTYPE_F32: return mk_dot_f32(row, x, n);
    case MK_DTYPE_F16: return mk_dot_f16(row, x, n);
    case MK_DTYPE_BF16: return mk_dot_bf16(row, x, n);
    case MK_DTYPE_Q8_0: return mk_dot_q8_0(row, x, nb);
    case MK_DTYPE_Q4_K: return mk_dot_k_blocks(row, sizeof(struct mk_block_q4_k), mk_deq_q4_k_any, x, nb);
    case MK_DTYPE_Q6_K: return mk_dot_k_blocks(row, sizeof(struct mk_block_q6_k), mk_deq_q6_k_any, x, nb);
    }
    MK_ASSERT(0);
    return 0.0f;
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
 * squared error over a small sweep of candidate scales (ggml's make_qkx2_quants with
 * use_mad = false). Returns scale; *the_min receives min. */
static float mk_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                                 uint8_t *Laux, float rmin, float rdelta, int nstep) {
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
        best_error += w[i] * (diff * diff);
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
                cur_error += w[i] * (diff * diff);
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

static void mk_quantize_q4_k(const float *x, struct mk_block_q4_k *y, int64_t nb) {
    uint8_t L[MK_QK_K];
    uint8_t Laux[32];
    float weights[32];
    float mins[MK_QK_K / 32];   /* (sub-block) */
    float scales[MK_QK_K / 32]; /* (sub-block) */

    for (int64_t i = 0; i < nb; i++) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < MK_QK_K / 32; j++) {
            const float *xs = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
            const float av_x = sqrtf(sum_x2 / 32);
            /* weight large values more, plus a floor so small ones still count */
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
            scales[j] = mk_make_qkx2_quants(32, 15, xs, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        memset(y[i].scales, 0, sizeof(y[i].scales));
        for (int j = 0; j < MK_QK_K / 32; j++) {
            /* the uint8_t narrowing (then clamp) matches ggml even for a stray negative */
            uint8_t ls = (uint8_t)mk_nearest_int(inv_scale * scales[j]);
            uint8_t lm = (uint8_t)mk_nearest_int(inv_min * mins[j]);
            ls = ls > 63 ? 63 : ls;
            lm = lm > 63 ? 63 : lm;
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = mk_fp32_to_fp16(max_scale / 63.0f);
        y[i].dmin = mk_fp32_to_fp16(max_min / 63.0f);

        /* requantize against the scales as actually stored (6-bit, fp16) */
        const float d_all = mk_fp16_to_fp32(y[i].d), dmin_all = mk_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < MK_QK_K / 32; j++) {
            uint8_t sc, m;
            mk_q4k_scale_min(j, y[i].scales, &sc, &m);
            const float d = d_all * sc;
            if (d == 0.0f) continue;
            const float dm = dmin_all * m;
            for (int l = 0; l < 32; l++) {
                int q = mk_nearest_int((x[32 * j + l] + dm) / d);
                L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > 15 ? 15 : q);
            }
        }

        uint8_t *q = y[i].qs;
        for (int j = 0; j < MK_QK_K; j += 64) {
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
        x += MK_QK_K;
    }
}

/* Symmetric fit x[i] ~ scale*(L[i] - nmax), L in [0, 2*nmax), weighted by x^2 (ggml's
 * make_qx_quants with rmse_type 1 and no importance weights). Returns scale. */
static float mk_make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
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
    case MK_DTYPE_Q8_0: mk_quantize_q8_0(src, dst, nb); break;
    case MK_DTYPE_Q4_K: mk_quantize_q4_k(src, dst, nb); break;
    case MK_DTYPE_Q6_K: mk_quantize_q6_k(src, dst, nb); break;
    }
    return (size_t)nb * info->type_size;
}
