/* Tests for core/dtype: type tables, fp16/bf16 rounding, block decoding, quantization error and dots. */
/*
 * Quantize-then-dequantize bounds, on 48 seeded rows of 4096 standard-Gaussian floats.
 * "rms" is RMS(err)/RMS(row) per row; "block" is max|err| in a block / max|x| in that block
 * (blocks of 32 for q8_0 and the plain floats, 256 for the k-quants). Measured = worst row
 * (mean over rows in brackets), gcc 12 x86-64, identical at -O2 and under ASan.
 *
 *   type  | rms measured        | rms bound | block measured | block bound
 *   ------+---------------------+-----------+----------------+---------------------------------
 *   f32   | 0                   | 0         | 0              | 0
 *   f16   | 2.13e-4 (2.07e-4)   | 3.0e-4    | 4.85e-4        | 2^-11 (half ulp; also checked
 *   bf16  | 1.71e-3 (1.66e-3)   | 2.5e-3    | 3.87e-3        | 2^-8   per element)
 *   q8_0  | 0.00555 (0.00533)   | 0.0065    | 0.00433        | 0.0045 (d/2 + 127 * fp16 error of
 *         |                     |           |                |         d = amax * 0.00443)
 *   q6_k  | 0.0181  (0.0177)    | 0.021     | 0.0161         | 0.020
 *   q4_k  | 0.0732  (0.0711)    | 0.085     | 0.0794         | 0.095
 *   q4_0  | 0.0887  (0.0856)    | 0.10      | 0.125          | 0.14
 *   q4_1  | 0.0802  (0.0778)    | 0.092     | 0.0670         | 0.077
 *   q5_0  | 0.0439  (0.0425)    | 0.05      | 0.0627         | 0.072
 *   q5_1  | 0.0386  (0.0376)    | 0.044     | 0.0326         | 0.038
 *   q2_k  | 0.309   (0.296)     | 0.35      | 0.370          | 0.42
 *   q3_k  | 0.156   (0.150)     | 0.18      | 0.200          | 0.23
 *   q5_k  | 0.0371  (0.0359)    | 0.043     | 0.0521         | 0.06
 *   iq4_nl| 0.0783  (0.0760)    | 0.09      | 0.113          | 0.13
 *   iq4_xs| 0.0792  (0.0766)    | 0.091     | 0.0994         | 0.115
 *
 * Dot: |mk_dot_row - dot(dequantized row, x) in double| <= 1e-5 * sum |w_i * x_i| (relative to
 * the magnitude sum, since the dot itself may cancel to near zero). Measured worst over all 15
 * types: 3.3e-8.
 */
#include "core/dtype.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#define CHECK_FEQ(got, want)                                          \
    do {                                                              \
        float g_ = (got), w_ = (want);                                \
        MK_CHECK_MSG(g_ == w_, "%s = %.9g, want %.9g", #got, g_, w_); \
    } while (0)

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* ---- deterministic Gaussian source (splitmix64 + Box-Muller) ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) /* in (0, 1) */
{
    return ((double)(rng_next() >> 11) + 0.5) * 0x1p-53;
}

static float rng_gauss(void) {
    double u1 = rng_uniform(), u2 = rng_uniform();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- (5) tables ---- */

static void test_tables(void) {
    static const struct {
        enum mk_dtype type;
        const char *name;
        uint32_t block_size, type_size;
    } want[] = {
        { MK_DTYPE_F32, "f32", 1, 4 },           { MK_DTYPE_F16, "f16", 1, 2 },
        { MK_DTYPE_BF16, "bf16", 1, 2 },         { MK_DTYPE_Q8_0, "q8_0", 32, 34 },
        { MK_DTYPE_Q4_K, "q4_k", 256, 144 },     { MK_DTYPE_Q6_K, "q6_k", 256, 210 },
        { MK_DTYPE_Q4_0, "q4_0", 32, 18 },       { MK_DTYPE_Q4_1, "q4_1", 32, 20 },
        { MK_DTYPE_Q5_0, "q5_0", 32, 22 },       { MK_DTYPE_Q5_1, "q5_1", 32, 24 },
        { MK_DTYPE_Q2_K, "q2_k", 256, 84 },      { MK_DTYPE_Q3_K, "q3_k", 256, 110 },
        { MK_DTYPE_Q5_K, "q5_k", 256, 176 },     { MK_DTYPE_IQ4_NL, "iq4_nl", 32, 18 },
        { MK_DTYPE_IQ4_XS, "iq4_xs", 256, 136 },
    };
    int supported = 0;
    for (uint32_t t = 0; t < 200; t++) supported += mk_dtype_get(t) != NULL;
    MK_CHECK(supported == 15 && MK_DTYPE_COUNT == 15);
    for (int i = 0; i < MK_DTYPE_COUNT; i++) MK_CHECK(mk_dtype_get(mk_dtype_all[i]) != NULL);
    MK_CHECK(mk_dtype_get(0xffffffffu) == NULL);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct mk_dtype_info *info = mk_dtype_get((uint32_t)want[i].type);
        MK_CHECK(info != NULL);
        if (!info) continue;
        MK_CHECK(strcmp(info->name, want[i].name) == 0);
        MK_CHECK(info->block_size == want[i].block_size);
        MK_CHECK(info->type_size == want[i].type_size);
        MK_CHECK(strcmp(mk_dtype_ggml_name((uint32_t)want[i].type), want[i].name) == 0);
        enum mk_dtype parsed = (enum mk_dtype) - 1;
        MK_CHECK(mk_dtype_parse(want[i].name, &parsed) == 0 && parsed == want[i].type);
    }

    /* ggml's numbering, gaps included */
    static const struct {
        uint32_t id;
        const char *name;
    } ggml[] = {
        { 0, "f32" },     { 1, "f16" },    { 2, "q4_0" },     { 3, "q4_1" },    { 6, "q5_0" },     { 7, "q5_1" },
        { 8, "q8_0" },    { 9, "q8_1" },   { 10, "q2_k" },    { 11, "q3_k" },   { 12, "q4_k" },    { 13, "q5_k" },
        { 14, "q6_k" },   { 15, "q8_k" },  { 16, "iq2_xxs" }, { 17, "iq2_xs" }, { 18, "iq3_xxs" }, { 19, "iq1_s" },
        { 20, "iq4_nl" }, { 21, "iq3_s" }, { 22, "iq2_s" },   { 23, "iq4_xs" }, { 24, "i8" },      { 25, "i16" },
        { 26, "i32" },    { 27, "i64" },   { 28, "f64" },     { 29, "iq1_m" },  { 30, "bf16" },    { 34, "tq1_0" },
        { 35, "tq2_0" },  { 39, "mxfp4" },
    };
    for (size_t i = 0; i < sizeof(ggml) / sizeof(ggml[0]); i++) {
        const char *n = mk_dtype_ggml_name(ggml[i].id);
        MK_CHECK(n != NULL && strcmp(n, ggml[i].name) == 0);
    }
    MK_CHECK(mk_dtype_ggml_name(4) == NULL);
    MK_CHECK(mk_dtype_ggml_name(5) == NULL);
    MK_CHECK(mk_dtype_ggml_name(1000) == NULL);
    MK_CHECK(mk_dtype_ggml_name(0xffffffffu) == NULL);
    /* known to ggml, not to mk */
    MK_CHECK(mk_dtype_get(9) == NULL && mk_dtype_get(15) == NULL && mk_dtype_get(16) == NULL &&
             mk_dtype_get(21) == NULL && mk_dtype_get(39) == NULL && mk_dtype_get(4) == NULL);

    enum mk_dtype t = MK_DTYPE_F32;
    MK_CHECK(mk_dtype_parse("Q4_K", &t) == 0 && t == MK_DTYPE_Q4_K);
    MK_CHECK(mk_dtype_parse("BF16", &t) == 0 && t == MK_DTYPE_BF16);
    MK_CHECK(mk_dtype_parse("q6_K", &t) == 0 && t == MK_DTYPE_Q6_K);
    t = MK_DTYPE_F16;
    MK_CHECK(mk_dtype_parse("q4_k_m", &t) == -1 && t == MK_DTYPE_F16);
    MK_CHECK(mk_dtype_parse("IQ4_XS", &t) == 0 && t == MK_DTYPE_IQ4_XS);
    MK_CHECK(mk_dtype_parse("iq2_xxs", &t) == -1 && mk_dtype_parse("q8_1", &t) == -1);
    MK_CHECK(mk_dtype_parse("f32 ", &t) == -1);
    MK_CHECK(mk_dtype_parse("", &t) == -1);
    MK_CHECK(mk_dtype_parse(NULL, &t) == -1);

    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_F32, 4096) == 16384);
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_F16, 4096) == 8192);
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_BF16, 3) == 6);
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_Q8_0, 4096) == 128 * 34);
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_Q4_K, 4096) == 16 * 144);
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_Q6_K, 4096) == 16 * 210);
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_Q6_K, 0) == 0);
    /* 14336-wide FFN rows, as in Llama 3 8B */
    MK_CHECK(mk_dtype_row_bytes(MK_DTYPE_Q4_K, 14336) == 56 * 144);
}

/* ---- (2) fp16 / bf16 ---- */

/* Value of half bits h computed from the definition, independently of the library. */
static double half_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 0x1f)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -24);
    else
        v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

static void test_fp16(void) {
    /* the row form (a table) gives the same bits as one by one, NaN payloads included */
    static uint16_t all[0x10000];
    static float row[0x10000];
    for (uint32_t h = 0; h < 0x10000; h++) all[h] = (uint16_t)h;
    mk_fp16_to_fp32_row(all, row, 0x10000);
    for (uint32_t h = 0; h < 0x10000; h++)
        if (f32_bits(row[h]) != f32_bits(mk_fp16_to_fp32((uint16_t)h)))
            mk_test_fail("fp16 row %04x -> %08x, one by one %08x", h, f32_bits(row[h]),
                         f32_bits(mk_fp16_to_fp32((uint16_t)h)));
    /* decoding: every one of the 65536 encodings */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float got = mk_fp16_to_fp32((uint16_t)h);
        double want = half_value((uint16_t)h);
        if (want != want) {
            MK_CHECK(got != got);
            /* the payload survives in the top mantissa bits */
            MK_CHECK((f32_bits(got) & 0x7fffffu) >> 13 == (h & 0x3ffu));
        } else if (!((double)got == want && !signbit(got) == !signbit(want))) {
            mk_test_fail("fp16 %04x -> %.9g, want %.9g", h, got, want);
        }
        /* and back: every non-NaN encoding round-trips exactly */
        uint16_t back = mk_fp32_to_fp16(got);
        if (want == want)
            MK_CHECK(back == h);
        else
            MK_CHECK((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
    }

    /* named edge cases */
    MK_CHECK(mk_fp32_to_fp16(0.0f) == 0x0000);
    MK_CHECK(mk_fp32_to_fp16(-0.0f) == 0x8000);
    MK_CHECK(mk_fp32_to_fp16(1.0f) == 0x3c00);
    MK_CHECK(mk_fp32_to_fp16(-2.0f) == 0xc000);
    MK_CHECK(mk_fp32_to_fp16(65504.0f) == 0x7bff);
    MK_CHECK(mk_fp32_to_fp16(65519.99f) == 0x7bff); /* below the midpoint to 65536 */
    MK_CHECK(mk_fp32_to_fp16(65520.0f) == 0x7c00);  /* the tie goes to even, i.e. overflows */
    MK_CHECK(mk_fp32_to_fp16(1e10f) == 0x7c00);
    MK_CHECK(mk_fp32_to_fp16(-1e10f) == 0xfc00);
    MK_CHECK(mk_fp32_to_fp16(INFINITY) == 0x7c00);
    MK_CHECK(mk_fp32_to_fp16(-INFINITY) == 0xfc00);
    MK_CHECK(mk_fp32_to_fp16(0x1p-24f) == 0x0001);     /* smallest subnormal */
    MK_CHECK(mk_fp32_to_fp16(0x1p-14f) == 0x0400);     /* smallest normal */
    MK_CHECK(mk_fp32_to_fp16(0x1.ff8p-15f) == 0x03ff); /* largest subnormal */
    MK_CHECK(mk_fp32_to_fp16(0x1.ffcp-15f) == 0x0400); /* ... plus half a step: tie to even */
    MK_CHECK(mk_fp32_to_fp16(0x1p-25f) == 0x0000);     /* tie between 0 and the smallest: to 0 */
    MK_CHECK(mk_fp32_to_fp16(0x1.000002p-25f) == 0x0001);
    MK_CHECK(mk_fp32_to_fp16(0x1.8p-24f) == 0x0002); /* 1.5 steps: tie to even (2) */
    MK_CHECK(mk_fp32_to_fp16(0x1p-30f) == 0x0000);
    MK_CHECK(mk_fp32_to_fp16(-0x1p-30f) == 0x8000);
    MK_CHECK(mk_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00); /* tie, 0x3c00 is even */
    MK_CHECK(mk_fp32_to_fp16(1.0f + 0x3p-11f) == 0x3c02); /* tie, 0x3c01 is odd */
    MK_CHECK(mk_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-23f) == 0x3c01);
    MK_CHECK(mk_fp32_to_fp16(2047.5f) == 0x67ff + 1); /* 2047.5 ties up to 2048 (even) */
    CHECK_FEQ(mk_fp16_to_fp32(0x3555), 0.333251953125f);
    CHECK_FEQ(mk_fp16_to_fp32(0x0001), 0x1p-24f);
    CHECK_FEQ(mk_fp16_to_fp32(0x03ff), 0x1.ff8p-15f);
    MK_CHECK(isinf(mk_fp16_to_fp32(0xfc00)) && mk_fp16_to_fp32(0xfc00) < 0);
    uint16_t qn = mk_fp32_to_fp16(NAN);
    MK_CHECK((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0);
    /* a signalling NaN whose payload lives only in the low bits must not turn into inf */
    uint16_t sn = mk_fp32_to_fp16(bits_f32(0x7f800001u));
    MK_CHECK((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff) != 0);
    sn = mk_fp32_to_fp16(bits_f32(0xff800001u));
    MK_CHECK(sn & 0x8000);
    MK_CHECK((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff) != 0);

    /* rounding: around every midpoint between adjacent positive halves */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double a = half_value((uint16_t)h), b = half_value((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2); /* exact: needs 12 significant bits */
        MK_CHECK((double)mid == (a + b) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        uint16_t got = mk_fp32_to_fp16(mid);
        if (got != even) {
            mk_test_fail("fp16 round %.9g -> %04x, want %04x", mid, got, even);
        }
        MK_CHECK(mk_fp32_to_fp16(nextafterf(mid, 0.0f)) == h);
        MK_CHECK(mk_fp32_to_fp16(nextafterf(mid, INFINITY)) == h + 1);
        MK_CHECK(mk_fp32_to_fp16(-nextafterf(mid, INFINITY)) == ((h + 1) | 0x8000));
    }
}

static void test_bf16(void) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float got = mk_bf16_to_fp32((uint16_t)h);
        MK_CHECK(f32_bits(got) == h << 16);
        uint16_t back = mk_fp32_to_bf16(got);
        if (got == got)
            MK_CHECK(back == h);
        else
            MK_CHECK((back & 0x7f80) == 0x7f80 && (back & 0x7f) != 0 && (back & 0x8000) == (h & 0x8000));
    }
    MK_CHECK(mk_fp32_to_bf16(0.0f) == 0x0000);
    MK_CHECK(mk_fp32_to_bf16(-0.0f) == 0x8000);
    MK_CHECK(mk_fp32_to_bf16(1.0f) == 0x3f80);
    MK_CHECK(mk_fp32_to_bf16(INFINITY) == 0x7f80);
    MK_CHECK(mk_fp32_to_bf16(-INFINITY) == 0xff80);
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x3f808000u)) == 0x3f80); /* tie to even */
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x3f818000u)) == 0x3f82); /* tie to even, upward */
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x3f808001u)) == 0x3f81);
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x3f807fffu)) == 0x3f80);
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to inf */
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x00000001u)) == 0x0000); /* subnormals round too */
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x00008000u)) == 0x0000); /* tie to even (0) */
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x00018000u)) == 0x0002);
    MK_CHECK(mk_fp32_to_bf16(bits_f32(0x00008001u)) == 0x0001);
    /* signalling NaN with only low payload bits: truncation would give inf */
    uint16_t sn = mk_fp32_to_bf16(bits_f32(0x7f800001u));
    MK_CHECK((sn & 0x7f80) == 0x7f80 && (sn & 0x7f) != 0);
    sn = mk_fp32_to_bf16(bits_f32(0xffffffffu));
    MK_CHECK(sn == 0xffff || ((sn & 0xff80) == 0xff80 && (sn & 0x7f) != 0));
    MK_CHECK(isnan(mk_bf16_to_fp32(mk_fp32_to_bf16(NAN))));
}

/* ---- (1) hand-built blocks ---- */

static void test_known_q8_0(void) {
    struct mk_block_q8_0 b[2];
    b[0].d = 0x3800; /* 0.5 */
    b[1].d = 0xc400; /* -4.0 */
    for (int l = 0; l < 32; l++) {
        b[0].qs[l] = (int8_t)(l - 16);
        b[1].qs[l] = (int8_t)(l * 8 - 128);
    }
    b[0].qs[5] = -3;
    b[0].qs[6] = 127;
    b[0].qs[7] = -128;
    float y[64];
    mk_dequantize_row(MK_DTYPE_Q8_0, b, y, 64);
    CHECK_FEQ(y[5], -1.5f);
    CHECK_FEQ(y[6], 63.5f);
    CHECK_FEQ(y[7], -64.0f);
    CHECK_FEQ(y[0], -8.0f);
    CHECK_FEQ(y[16], 0.0f);
    CHECK_FEQ(y[31], 7.5f);
    CHECK_FEQ(y[32], 512.0f);  /* -128 * -4 */
    CHECK_FEQ(y[63], -480.0f); /* 120 * -4 */

    /* the reference quantizer rounds half away from zero (roundf), with d = amax / 127 */
    float x[32] = { 127.0f, 2.5f, -2.5f, 0.5f, -0.49f, -127.0f, 3.5f, 1.49f };
    struct mk_block_q8_0 q;
    MK_CHECK(mk_quantize_row(MK_DTYPE_Q8_0, x, &q, 32) == 34);
    MK_CHECK(q.d == 0x3c00);
    static const int8_t want[8] = { 127, 3, -3, 1, 0, -127, 4, 1 };
    for (int l = 0; l < 8; l++) MK_CHECK(q.qs[l] == want[l]);
    for (int l = 8; l < 32; l++) MK_CHECK(q.qs[l] == 0);
}

/* Logical contents of the hand-built Q4_K block; packed by hand into bytes below. */
static const uint8_t k_q4_sc[8] = { 1, 2, 3, 63, 17, 33, 48, 5 };
static const uint8_t k_q4_m[8] = { 0, 4, 8, 1, 20, 40, 63, 2 };

static void test_known_q4_k(void) {
    struct mk_block_q4_k b;
    memset(&b, 0, sizeof(b));
    b.d = 0x4000;    /* 2.0 */
    b.dmin = 0x3800; /* 0.5 */
    /* bytes 0-3: scale j | (top 2 bits of scale j+4) << 6
     * bytes 4-7: min j   | (top 2 bits of min j+4) << 6
     * bytes 8-11: low 4 bits of scale j+4 | low 4 bits of min j+4 << 4
     * scales 17=01'0001 33=10'0001 48=11'0000 5=00'0101; mins 20=01'0100 40=10'1000 63=11'1111 2=00'0010 */
    static const uint8_t packed[12] = { 0x41, 0x82, 0xc3, 0x3f, 0x40, 0x84, 0xc8, 0x01, 0x41, 0x81, 0xf0, 0x25 };
    memcpy(b.scales, packed, 12);
    /* 32-byte run c holds values 64c..64c+31 in low nibbles and 64c+32.. in high nibbles */
    b.qs[0] = 0x5a;   /* value 0: q=10 (sub 0); value 32: q=5 (sub 1) */
    b.qs[32] = 0x21;  /* value 64: q=1 (sub 2); value 96: q=2 (sub 3) */
    b.qs[64] = 0x43;  /* value 128: q=3 (sub 4); value 160: q=4 (sub 5) */
    b.qs[127] = 0xc3; /* value 223: q=3 (sub 6); value 255: q=12 (sub 7) */
    float y[256];
    mk_dequantize_row(MK_DTYPE_Q4_K, &b, y, 256);
    /* y = 2 * scale * q - 0.5 * min */
    CHECK_FEQ(y[0], 20.0f);
    CHECK_FEQ(y[1], 0.0f);
    CHECK_FEQ(y[32], 18.0f);
    CHECK_FEQ(y[33], -2.0f);
    CHECK_FEQ(y[64], 2.0f);
    CHECK_FEQ(y[65], -4.0f);
    CHECK_FEQ(y[96], 251.5f);
    CHECK_FEQ(y[97], -0.5f);
    CHECK_FEQ(y[128], 92.0f);
    CHECK_FEQ(y[129], -10.0f);
    CHECK_FEQ(y[160], 244.0f);
    CHECK_FEQ(y[161], -20.0f);
    CHECK_FEQ(y[200], -31.5f);
    CHECK_FEQ(y[223], 256.5f);
    CHECK_FEQ(y[254], -1.0f);
    CHECK_FEQ(y[255], 119.0f);

    /* every element, from the logical scales/mins and nibble placement */
    uint8_t qv[256];
    for (int e = 0; e < 256; e++) {
        qv[e] = (uint8_t)((e * 7 + 3) % 16);
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)(qv[64 * c + l] | (qv[64 * c + 32 + l] << 4));
    mk_dequantize_row(MK_DTYPE_Q4_K, &b, y, 256);
    for (int e = 0; e < 256; e++) {
        float want = 2.0f * k_q4_sc[e / 32] * qv[e] - 0.5f * k_q4_m[e / 32];
        if (y[e] != want) {
            mk_test_fail("q4_k value %d = %g, want %g", e, y[e], want);
        }
    }
}

static void test_known_q6_k(void) {
    struct mk_block_q6_k b;
    memset(&b, 0, sizeof(b));
    b.d = 0x3400; /* 0.25 */
    static const int8_t sc[16] = { 2, 1, -3, 4, 5, 6, 127, -128, 9, -1, 11, 7, 13, 3, -2, 1 };
    memcpy(b.scales, sc, 16);
    /* all-zero bits mean q = -32 everywhere */
    b.ql[5] = 0xa3;
    b.qh[5] = 0xe4; /* 11'10'01'00: high bits 0 (value 5), 1 (37), 2 (69), 3 (101) */
    b.ql[64 + 31] = 0xff;
    b.qh[32 + 31] = 0xff;
    float y[256];
    mk_dequantize_row(MK_DTYPE_Q6_K, &b, y, 256);
    CHECK_FEQ(y[0], -16.0f);    /* 0.25 * 2 * -32 */
    CHECK_FEQ(y[5], -14.5f);    /* q = 3 - 32 = -29, scale 2 */
    CHECK_FEQ(y[37], 12.0f);    /* q = (0 | 1<<4) - 32 = -16, scale -3 */
    CHECK_FEQ(y[69], 12.5f);    /* q = (10 | 2<<4) - 32 = 10, scale 5 */
    CHECK_FEQ(y[101], 508.0f);  /* q = (0 | 3<<4) - 32 = 16, scale 127 */
    CHECK_FEQ(y[112], 1024.0f); /* q = -32, scale -128 */
    CHECK_FEQ(y[159], -7.75f);  /* q = 31, scale -1 */
    CHECK_FEQ(y[191], 28.0f);   /* q = 48 - 32 = 16, scale 7 */
    CHECK_FEQ(y[223], 23.25f);  /* q = 63 - 32 = 31, scale 3 */
    CHECK_FEQ(y[255], 4.0f);    /* q = 16, scale 1 */
    CHECK_FEQ(y[254], -8.0f);   /* q = -32, scale 1 */

    /* every element: value e of a 128-half uses scale e/16; ql byte l holds values l (low)
     * and l+64 (high), byte l+32 holds l+32 and l+96; qh byte l holds their top bits */
    uint8_t qv[256];
    for (int e = 0; e < 256; e++) qv[e] = (uint8_t)((e * 37 + 11) % 64);
    memset(b.ql, 0, sizeof(b.ql));
    memset(b.qh, 0, sizeof(b.qh));
    for (int h = 0; h < 2; h++) {
        const uint8_t *v = qv + 128 * h;
        for (int l = 0; l < 32; l++) {
            b.ql[64 * h + l] = (uint8_t)((v[l] & 15) | ((v[l + 64] & 15) << 4));
            b.ql[64 * h + l + 32] = (uint8_t)((v[l + 32] & 15) | ((v[l + 96] & 15) << 4));
            b.qh[32 * h + l] =
                (uint8_t)((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
        }
    }
    mk_dequantize_row(MK_DTYPE_Q6_K, &b, y, 256);
    for (int e = 0; e < 256; e++) {
        float want = 0.25f * (float)sc[e / 16] * (float)(qv[e] - 32);
        if (y[e] != want) {
            mk_test_fail("q6_k value %d = %g, want %g", e, y[e], want);
        }
    }
}

static void test_known_plain(void) {
    const uint16_t h[4] = { 0x3c00, 0xc000, 0x0001, 0x7bff };
    float y[4];
    mk_dequantize_row(MK_DTYPE_F16, h, y, 4);
    CHECK_FEQ(y[0], 1.0f);
    CHECK_FEQ(y[1], -2.0f);
    CHECK_FEQ(y[2], 0x1p-24f);
    CHECK_FEQ(y[3], 65504.0f);
    const uint16_t bf[3] = { 0x3f80, 0xc0a0, 0x4049 };
    mk_dequantize_row(MK_DTYPE_BF16, bf, y, 3);
    CHECK_FEQ(y[0], 1.0f);
    CHECK_FEQ(y[1], -5.0f);
    CHECK_FEQ(y[2], 3.140625f);
}

/* ---- bit-compatibility with llama.cpp's reference quantizers ---- */

#define GOLDEN_N 16384
/* Exactly representable values from integer arithmetic only (no libm); super-blocks cycle:
 * 0-1 roughly Gaussian (sum of 4 uniforms), 2 all positive, 3 all negative and large,
 * 4 with outliers, 5 tiny values, 6 with a zero sub-block and a constant sub-block, 7 a ramp. */
static void golden_input(float *x) {
    uint32_t r = 12345u;
    for (int i = 0; i < GOLDEN_N; i++) {
        int s = 0;
        for (int k = 0; k < 4; k++) {
            r = r * 1664525u + 1013904223u;
            s += (int)((r >> 8) % 2001u);
        }
        float g = (float)(s - 4000) / 1024.0f; /* about N(0, 1.13) */
        switch ((i / 256) % 8) {
        case 2: g = (g < 0 ? -g : g) + 0.25f; break;
        case 3: g = -(g < 0 ? -g : g) * 64.0f; break;
        case 4: g = (i % 29 == 0) ? g * 40.0f : g; break;
        case 5: g = g * 0x1p-12f; break;
        case 6: g = (i % 256) < 32 ? 0.0f : (i % 256) < 64 ? 0.75f : g; break;
        case 7: g = (float)((i % 256) - 100) / 32.0f; break;
        default: break;
        }
        x[i] = g;
    }
}

static uint64_t fnv1a(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The hashes are of the blocks that ggml-quants.c's quantize_row_<type>_ref write for
 * golden_input (for iq4_nl: quantize_iq4_nl without importance weights, what llama-quantize runs;
 * its _ref variant skips the scale search). They come from tests/data/ggml_quant_check.c, built
 * against the ggml sources of the llama-cpp-python 0.3.36 sdist; that tool also found mk's
 * blocks identical to ggml's on 200 random rows of 16384 per type. A quantizer that is merely
 * "about as accurate" fails here; one that is byte-identical to llama.cpp passes. */
static void test_golden_blocks(void) {
    static float x[GOLDEN_N];
    static unsigned char q[GOLDEN_N * 2];
    golden_input(x);
    static const struct {
        enum mk_dtype type;
        uint64_t hash;
    } want[] = {
        { MK_DTYPE_Q8_0, 0x3ae103254ff55eb8ull },   { MK_DTYPE_Q4_K, 0x90730e0e7e2ed79aull },
        { MK_DTYPE_Q6_K, 0xbf101c9a554ff78eull },   { MK_DTYPE_Q4_0, 0x4d7c79e85e3cb19dull },
        { MK_DTYPE_Q4_1, 0x8ba649b5805dd0feull },   { MK_DTYPE_Q5_0, 0xec6672a5408deb3bull },
        { MK_DTYPE_Q5_1, 0x422894f142d73e6cull },   { MK_DTYPE_Q2_K, 0x4e442f8fc2d55a72ull },
        { MK_DTYPE_Q3_K, 0x2c7c3118596acc33ull },   { MK_DTYPE_Q5_K, 0x74a07b68ce4daffeull },
        { MK_DTYPE_IQ4_NL, 0xeb8ab7763384c21bull }, { MK_DTYPE_IQ4_XS, 0xcd633da16371752dull },
    };
    for (size_t t = 0; t < sizeof(want) / sizeof(want[0]); t++) {
        size_t n = mk_quantize_row(want[t].type, x, q, GOLDEN_N);
        MK_CHECK(n == mk_dtype_row_bytes(want[t].type, GOLDEN_N));
        uint64_t h = fnv1a(q, n);
        if (h != want[t].hash) {
            mk_test_fail("%s blocks differ from llama.cpp's: hash %016llx, want %016llx",
                         mk_dtype_get((uint32_t)want[t].type)->name, (unsigned long long)h,
                         (unsigned long long)want[t].hash);
        }
    }
}

/* ---- golden vectors from the gguf package (tests/data/make_dtype_golden.py) ---- */

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Every type: mk's dequantization of random blocks with extreme fp16 scales (0, -0, subnormal,
 * 65504, negative) and all-min / all-max quants is bit-identical to gguf.quants.dequantize, and
 * mk_dot_row on those blocks matches a double dot of that output. */
static void test_golden_dequantize(void) {
    for (int t = 0; t < MK_DTYPE_COUNT; t++) {
        const enum mk_dtype type = mk_dtype_all[t];
        const struct mk_dtype_info *info = mk_dtype_get(type);
        char file[64];
        snprintf(file, sizeof file, "dtype_golden_%s.bin", info->name);
        size_t n = 0;
        unsigned char *d = mk_test_read_data_file(file, &n);
        MK_CHECK_MSG(d != NULL, "cannot read %s", file);
        if (!d) continue;
        const uint32_t nb = n >= 20 ? le32(d + 8) : 0, bb = n >= 20 ? le32(d + 12) : 0, be = n >= 20 ? le32(d + 16) : 0;
        const int64_t elems = (int64_t)nb * be;
        const bool ok = n >= 20 && !memcmp(d, "MKDG", 4) && le32(d + 4) == (uint32_t)type && nb > 0 &&
                        be % info->block_size == 0 &&
                        (uint64_t)bb * info->block_size == (uint64_t)be * info->type_size &&
                        n == 20 + (size_t)nb * bb + (size_t)elems * 4;
        MK_CHECK_MSG(ok, "%s: bad header or size", file);
        if (!ok) {
            free(d);
            continue;
        }
        const unsigned char *blocks = d + 20, *want = d + 20 + (size_t)nb * bb;
        float *y = malloc((size_t)elems * sizeof(float));
        mk_dequantize_row(type, blocks, y, elems);
        int bad = 0;
        for (int64_t i = 0; i < elems; i++) {
            if (f32_bits(y[i]) != le32(want + 4 * i) && bad++ < 5)
                mk_test_fail("%s element %lld: mk %08x (%.9g), gguf %08x", info->name, (long long)i, f32_bits(y[i]),
                             y[i], le32(want + 4 * i));
        }
        if (bad)
            mk_test_fail("%s: %d of %lld dequantized values differ from gguf's", info->name, bad, (long long)elems);
        /* the dot reads the same blocks: compare with the gguf values in double */
        float *x = malloc((size_t)elems * sizeof(float));
        for (int64_t i = 0; i < elems; i++) x[i] = rng_gauss();
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < elems; i++) {
            const double w = bits_f32(le32(want + 4 * i));
            ref += w * x[i];
            mag += fabs(w * x[i]);
        }
        /* the f32 and bf16 files hold values near FLT_MAX, whose products overflow fp32 sums */
        if (mag < 1e30) {
            const float got = mk_dot_row(type, blocks, x, elems);
            MK_CHECK_MSG(fabs(got - ref) <= 1e-5 * mag, "%s golden dot %.9g vs %.9g", info->name, got, ref);
        }
        free(x);
        free(y);
        free(d);
    }
}

/* Types the gguf package can quantize: mk's bytes equal gguf.quants.quantize's on the same floats. */
static void test_golden_quantize(void) {
    static const enum mk_dtype types[] = { MK_DTYPE_Q4_0, MK_DTYPE_Q4_1, MK_DTYPE_Q5_0, MK_DTYPE_Q5_1,
                                           MK_DTYPE_Q8_0, MK_DTYPE_BF16, MK_DTYPE_F16 };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct mk_dtype_info *info = mk_dtype_get(types[t]);
        char file[64];
        snprintf(file, sizeof file, "dtype_quant_%s.bin", info->name);
        size_t n = 0;
        unsigned char *d = mk_test_read_data_file(file, &n);
        MK_CHECK_MSG(d != NULL, "cannot read %s", file);
        if (!d) continue;
        const uint32_t ne = n >= 16 ? le32(d + 8) : 0, nq = n >= 16 ? le32(d + 12) : 0;
        const bool ok = n >= 16 && !memcmp(d, "MKQG", 4) && le32(d + 4) == (uint32_t)types[t] &&
                        ne % info->block_size == 0 && nq == mk_dtype_row_bytes(types[t], ne) &&
                        n == 16 + (size_t)ne * 4 + nq;
        MK_CHECK_MSG(ok, "%s: bad header or size", file);
        if (ok) {
            float *x = malloc((size_t)ne * sizeof(float));
            for (uint32_t i = 0; i < ne; i++) x[i] = bits_f32(le32(d + 16 + 4 * i));
            unsigned char *q = malloc(nq);
            MK_CHECK(mk_quantize_row(types[t], x, q, ne) == nq);
            const unsigned char *want = d + 16 + (size_t)ne * 4;
            int bad = 0;
            for (uint32_t i = 0; i < nq; i++)
                if (q[i] != want[i] && bad++ < 5)
                    mk_test_fail("%s quantized byte %u: mk %02x, gguf %02x", info->name, i, q[i], want[i]);
            if (bad) mk_test_fail("%s: %d of %u quantized bytes differ from gguf's", info->name, bad, nq);
            free(q);
            free(x);
        }
        free(d);
    }
}

/* ---- (3) quantize-then-dequantize error ---- */

#define ROW_N  4096
#define N_ROWS 48

struct err_stats {
    double worst_rms_rel;   /* max over rows of RMS(err)/RMS(row) */
    double mean_rms_rel;    /* mean over rows of the same */
    double worst_block_rel; /* max over blocks of max|err| / max|x| in the block */
};

static struct err_stats measure(enum mk_dtype type, const float *rows, int nrows) {
    const struct mk_dtype_info *info = mk_dtype_get((uint32_t)type);
    const int bs = (int)info->block_size;
    const int blk = bs == 1 ? 32 : bs; /* plain floats: report per 32 for information */
    size_t nbytes = mk_dtype_row_bytes(type, ROW_N);
    unsigned char *q = malloc(nbytes);
    float *y = malloc(ROW_N * sizeof(float));
    struct err_stats st = { 0, 0, 0 };
    for (int r = 0; r < nrows; r++) {
        const float *x = rows + (size_t)r * ROW_N;
        memset(q, 0xa5, nbytes);
        MK_CHECK(mk_quantize_row(type, x, q, ROW_N) == nbytes);
        mk_dequantize_row(type, q, y, ROW_N);
        double se = 0, sx = 0;
        for (int i = 0; i < ROW_N; i++) {
            double e = (double)y[i] - x[i];
            se += e * e;
            sx += (double)x[i] * x[i];
        }
        double rel = sqrt(se / sx);
        if (rel > st.worst_rms_rel) st.worst_rms_rel = rel;
        st.mean_rms_rel += rel / nrows;
        for (int b0 = 0; b0 < ROW_N; b0 += blk) {
            double emax = 0, xmax = 0;
            for (int i = b0; i < b0 + blk; i++) {
                emax = fmax(emax, fabs((double)y[i] - x[i]));
                xmax = fmax(xmax, fabs((double)x[i]));
            }
            if (xmax > 0 && emax / xmax > st.worst_block_rel) st.worst_block_rel = emax / xmax;
        }
        /* the plain float formats: each element within half an ulp of its format */
        if (type == MK_DTYPE_F16 || type == MK_DTYPE_BF16 || type == MK_DTYPE_F32) {
            double ulp_rel = type == MK_DTYPE_F16 ? 0x1p-11 : type == MK_DTYPE_BF16 ? 0x1p-8 : 0;
            for (int i = 0; i < ROW_N; i++) {
                double a = fabs((double)x[i]);
                double tol = type == MK_DTYPE_F16 && a < 0x1p-14 ? 0x1p-25 : a * ulp_rel;
                MK_CHECK(fabs((double)y[i] - x[i]) <= tol);
            }
        }
    }
    free(q);
    free(y);
    return st;
}

static void test_roundtrip_error(void) {
    float *rows = malloc((size_t)N_ROWS * ROW_N * sizeof(float));
    for (size_t i = 0; i < (size_t)N_ROWS * ROW_N; i++) rows[i] = rng_gauss();
    static const struct {
        enum mk_dtype type;
        double rms_bound, block_bound;
    } bounds[] = {
        { MK_DTYPE_F32, 0.0, 0.0 },        { MK_DTYPE_F16, 3.0e-4, 0x1p-11 }, { MK_DTYPE_BF16, 2.5e-3, 0x1p-8 },
        { MK_DTYPE_Q8_0, 0.0065, 0.0045 }, { MK_DTYPE_Q6_K, 0.021, 0.020 },   { MK_DTYPE_Q4_K, 0.085, 0.095 },
        { MK_DTYPE_Q4_0, 9, 9 },           { MK_DTYPE_Q4_1, 9, 9 },           { MK_DTYPE_Q5_0, 9, 9 },
        { MK_DTYPE_Q5_1, 9, 9 },           { MK_DTYPE_Q2_K, 9, 9 },           { MK_DTYPE_Q3_K, 9, 9 },
        { MK_DTYPE_Q5_K, 9, 9 },           { MK_DTYPE_IQ4_NL, 9, 9 },         { MK_DTYPE_IQ4_XS, 9, 9 },
    };
    for (size_t t = 0; t < sizeof(bounds) / sizeof(bounds[0]); t++) {
        struct err_stats st = measure(bounds[t].type, rows, N_ROWS);
        printf("%-5s rms_rel worst %.6f mean %.6f (bound %.6f)  block_max_rel %.6f (bound %.6f)\n",
               mk_dtype_get((uint32_t)bounds[t].type)->name, st.worst_rms_rel, st.mean_rms_rel, bounds[t].rms_bound,
               st.worst_block_rel, bounds[t].block_bound);
        MK_CHECK(st.worst_rms_rel <= bounds[t].rms_bound);
        MK_CHECK(st.worst_block_rel <= bounds[t].block_bound);
    }

    /* the quantizers must also separate formats: coarser formats really are coarser */
    struct err_stats s8 = measure(MK_DTYPE_Q8_0, rows, 4);
    struct err_stats s6 = measure(MK_DTYPE_Q6_K, rows, 4);
    struct err_stats s4 = measure(MK_DTYPE_Q4_K, rows, 4);
    MK_CHECK(s8.worst_rms_rel < s6.worst_rms_rel && s6.worst_rms_rel < s4.worst_rms_rel);
    MK_CHECK(s4.worst_rms_rel > 0.02); /* a 4-bit format cannot be this good on Gaussians */
    /* the K-quant ladder: each extra bit per weight lowers the error */
    static const enum mk_dtype ladder[] = { MK_DTYPE_Q2_K, MK_DTYPE_Q3_K, MK_DTYPE_Q4_K, MK_DTYPE_Q5_K, MK_DTYPE_Q6_K };
    double prev = 1.0;
    for (int i = 0; i < 5; i++) {
        const double e = measure(ladder[i], rows, 4).worst_rms_rel;
        MK_CHECK_MSG(e < prev, "%s error %g not below the coarser type's %g", mk_dtype_get(ladder[i])->name, e, prev);
        prev = e;
    }

    /* zero rows quantize to blocks that decode to exact zeros */
    float zero[512] = { 0 }, y[512];
    unsigned char buf[512 * 4];
    for (int t = 0; t < MK_DTYPE_COUNT; t++) {
        const enum mk_dtype qt = mk_dtype_all[t];
        memset(buf, 0x5a, sizeof(buf));
        mk_quantize_row(qt, zero, buf, 512);
        mk_dequantize_row(qt, buf, y, 512);
        for (int i = 0; i < 512; i++)
            MK_CHECK_MSG(y[i] == 0.0f, "%s zero row decodes to %g", mk_dtype_get(qt)->name, y[i]);
    }

    /* a row with a different magnitude per block: each block's error scales with the block */
    for (int i = 0; i < ROW_N; i++) rows[i] = rng_gauss() * ldexpf(1.0f, (i / 256) - 8);
    for (size_t t = 3; t < sizeof(bounds) / sizeof(bounds[0]); t++) {
        struct err_stats st = measure(bounds[t].type, rows, 1);
        MK_CHECK(st.worst_block_rel <= bounds[t].block_bound);
    }
    free(rows);
}

/* ---- (4) dot == dequantize-then-dot ---- */

static void test_dot(void) {
    const enum mk_dtype *types = mk_dtype_all;
    enum { N = 4096 + 512, NT = MK_DTYPE_COUNT };
    float *w = malloc(N * sizeof(float));
    float *x = malloc(N * sizeof(float));
    float *y = malloc(N * sizeof(float));
    unsigned char *q = malloc(N * 4);
    double worst[NT] = { 0 };
    for (int trial = 0; trial < 24; trial++) {
        for (int i = 0; i < N; i++) {
            w[i] = rng_gauss() * (trial % 3 == 0 ? 0.02f : 1.0f);
            /* some trials have activations with a large common offset, to stress the
             * sum(x) term of Q4_K's min */
            x[i] = rng_gauss() + (trial % 4 == 1 ? 5.0f : 0.0f);
        }
        for (int t = 0; t < NT; t++) {
            const struct mk_dtype_info *info = mk_dtype_get((uint32_t)types[t]);
            /* plain floats also get a length that leaves a remainder after the lanes */
            int64_t n = info->block_size == 1 ? N - 3 - trial % 5 : N - (trial % 2) * 256;
            mk_quantize_row(types[t], w, q, n);
            mk_dequantize_row(types[t], q, y, n);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)y[i] * x[i];
                mag += fabs((double)y[i] * x[i]);
            }
            float got = mk_dot_row(types[t], q, x, n);
            double rel = fabs(got - ref) / mag;
            if (rel > worst[t]) worst[t] = rel;
            if (!(rel <= 1e-5)) {
                mk_test_fail("dot %s trial %d: %.9g vs %.9g (rel %.3g)", info->name, trial, got, ref, rel);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        printf("dot %-6s worst |err|/sum|w*x| %.3g (bound 1e-5)\n", mk_dtype_get((uint32_t)types[t])->name, worst[t]);

    /* a hand-computable dot: Q8_0 block with d = 0.5 */
    struct mk_block_q8_0 b;
    b.d = 0x3800;
    for (int l = 0; l < 32; l++) {
        b.qs[l] = (int8_t)(l % 2 ? -l : l);
        x[l] = 1.0f;
    }
    /* sum over l of +-l: 0 - 1 + 2 - 3 ... - 31 = -16, times 0.5 */
    CHECK_FEQ(mk_dot_row(MK_DTYPE_Q8_0, &b, x, 32), -8.0f);
    free(w);
    free(x);
    free(y);
    free(q);
}

int main(void) {
    test_tables();
    test_fp16();
    test_bf16();
    test_known_plain();
    test_known_q8_0();
    test_known_q4_k();
    test_known_q6_k();
    test_golden_blocks();
    test_golden_dequantize();
    test_golden_quantize();
    test_roundtrip_error();
    test_dot();
    return mk_test_finish("dtype_test");
}
