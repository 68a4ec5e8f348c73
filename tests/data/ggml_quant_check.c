/* Dev tool, not built by Bazel: checks mk's quantizers byte for byte against ggml's C reference
 * quantizers on random rows, and prints the hashes tests/dtype_test.c keeps for golden_input.
 * Build against the ggml sources shipped in the llama-cpp-python sdist (PyPI), e.g.:
 *   G=llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
 *   gcc -O2 -std=gnu11 -I$G/include -I$G/src -I. tests/data/ggml_quant_check.c $G/src/ggml-quants.c \
 *       core/dtype.c core/status.c -lm -o /tmp/ggml_quant_check && /tmp/ggml_quant_check */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include <ggml-quants.h> /* from the ggml sources, not this repository */

/* ggml-quants.c's only outside dependencies */
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ggml abort %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    abort();
}

/* referenced by ggml-quants.c functions this tool never calls */
size_t ggml_row_size(enum ggml_type type, int64_t ne) { abort(); }
size_t ggml_type_size(enum ggml_type type) { abort(); }
const char *ggml_type_name(enum ggml_type type) { abort(); }

#define N 16384

/* The same inputs as golden_input in tests/dtype_test.c. */
static void golden_input(float *x) {
    uint32_t r = 12345u;
    for (int i = 0; i < N; i++) {
        int s = 0;
        for (int k = 0; k < 4; k++) {
            r = r * 1664525u + 1013904223u;
            s += (int)((r >> 8) % 2001u);
        }
        float g = (float)(s - 4000) / 1024.0f;
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
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ggml's quantizer for a type without an importance matrix, as llama-quantize runs it */
static void ggml_quantize(enum mk_dtype t, const float *x, void *y, int64_t n) {
    switch (t) {
    case MK_DTYPE_Q4_0: quantize_row_q4_0_ref(x, y, n); break;
    case MK_DTYPE_Q4_1: quantize_row_q4_1_ref(x, y, n); break;
    case MK_DTYPE_Q5_0: quantize_row_q5_0_ref(x, y, n); break;
    case MK_DTYPE_Q5_1: quantize_row_q5_1_ref(x, y, n); break;
    case MK_DTYPE_Q8_0: quantize_row_q8_0_ref(x, y, n); break;
    case MK_DTYPE_Q2_K: quantize_row_q2_K_ref(x, y, n); break;
    case MK_DTYPE_Q3_K: quantize_row_q3_K_ref(x, y, n); break;
    case MK_DTYPE_Q4_K: quantize_row_q4_K_ref(x, y, n); break;
    case MK_DTYPE_Q5_K: quantize_row_q5_K_ref(x, y, n); break;
    case MK_DTYPE_Q6_K: quantize_row_q6_K_ref(x, y, n); break;
    case MK_DTYPE_IQ4_NL: quantize_iq4_nl(x, y, 1, n, NULL); break;
    case MK_DTYPE_IQ4_XS: quantize_row_iq4_xs_ref(x, y, n); break;
    default: abort();
    }
}

static uint64_t g_rng = 7;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(g_rng >> 11) % 2000001 - 1000000) / 1e6f;
}

int main(void) {
    static float x[N];
    static unsigned char a[N * 2], b[N * 2];
    static const enum mk_dtype types[] = { MK_DTYPE_Q4_0, MK_DTYPE_Q4_1, MK_DTYPE_Q5_0,   MK_DTYPE_Q5_1,
                                           MK_DTYPE_Q8_0, MK_DTYPE_Q2_K, MK_DTYPE_Q3_K,   MK_DTYPE_Q4_K,
                                           MK_DTYPE_Q5_K, MK_DTYPE_Q6_K, MK_DTYPE_IQ4_NL, MK_DTYPE_IQ4_XS };
    int bad = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const char *name = mk_dtype_get(types[t])->name;
        const size_t bytes = mk_dtype_row_bytes(types[t], N);
        golden_input(x);
        ggml_quantize(types[t], x, a, N);
        mk_quantize_row(types[t], x, b, N);
        printf("%-7s golden_input hash ggml %016llx mk %016llx%s\n", name, (unsigned long long)fnv1a(a, bytes),
               (unsigned long long)fnv1a(b, bytes), memcmp(a, b, bytes) ? "  DIFFERENT" : "");
        bad += memcmp(a, b, bytes) != 0;
        /* random rows at several magnitudes, with sparse outliers and zero runs */
        int diff_rows = 0;
        for (int trial = 0; trial < 200; trial++) {
            const float scale = trial % 4 == 0 ? 1e-3f : trial % 4 == 1 ? 30.0f : 1.0f;
            for (int i = 0; i < N; i++) {
                x[i] = rnd() * scale;
                if (trial % 5 == 2 && i % 37 == 0) x[i] *= 50.0f;
                if (trial % 7 == 3 && (i / 64) % 5 == 0) x[i] = 0.0f;
            }
            ggml_quantize(types[t], x, a, N);
            mk_quantize_row(types[t], x, b, N);
            diff_rows += memcmp(a, b, bytes) != 0;
        }
        printf("%-7s random rows differing: %d of 200\n", name, diff_rows);
        bad += diff_rows;
    }
    return bad != 0;
}
