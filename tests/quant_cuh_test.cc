/* The device dequantization (megakernel/quant.cuh), compiled for the host, against core/dtype's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "tests/cuda_host_shim.h"
#define MK_QUANT_NO_CUDA_HEADERS
#include "megakernel/quant8.cuh"
#include "tests/xq_host.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_next() {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float rng_uniform() { return (float)(rng_next() >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }

/* Every quantized type core/dtype supports must decode to the same bits on the device as on the
 * host; each row comes from core/dtype's quantizer (so the blocks are ones real files hold) over
 * inputs of very different magnitudes, including all-zero and one-spike rows. */
static int check_type(uint32_t t, const struct mk_dtype_info *info) {
    const int64_t n = 8 * 256; /* a multiple of every block size */
    const float scales[] = { 1.0f, 1e-6f, 3e4f, 0.0f, 1.0f };
    std::vector<float> x(n), host(n);
    std::vector<uint8_t> row(mk_dtype_row_bytes((enum mk_dtype)t, n));
    int bad = 0;
    for (int k = 0; k < (int)(sizeof scales / sizeof scales[0]); k++) {
        for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * scales[k];
        if (k == 4) { /* one spike per block: extreme scale against tiny neighbours */
            for (int64_t i = 0; i < n; i++) x[i] = (i % info->block_size == 3) ? 1000.0f : rng_uniform() * 1e-3f;
        }
        mk_quantize_row((enum mk_dtype)t, x.data(), row.data(), n);
        mk_dequantize_row((enum mk_dtype)t, row.data(), host.data(), n);
        for (int64_t e = 0; e < n; e += 8) { /* the eight-at-a-time decoder of the chunk products */
            float dev8[8];
            mk_q_value8(t, row.data(), (uint32_t)e, dev8);
            for (int j = 0; j < 8; j++)
                if (memcmp(&dev8[j], &host[e + j], 4) != 0) {
                    if (bad < 5)
                        fprintf(stderr, "%s: case %d element %lld: mk_q_value8 %.9g, host %.9g\n", info->name, k,
                                (long long)(e + j), (double)dev8[j], (double)host[e + j]);
                    bad++;
                }
        }
        for (int64_t e = 0; e < n; e++) {
            float dev = mk_q_value(t, row.data(), (uint32_t)e);
            uint32_t a, b;
            memcpy(&a, &dev, 4);
            memcpy(&b, &host[e], 4);
            if (a != b) {
                if (bad < 5)
                    fprintf(stderr, "%s: case %d element %lld: device %.9g, host %.9g\n", info->name, k, (long long)e,
                            (double)dev, (double)host[e]);
                bad++;
            }
        }
    }
    return bad;
}

/* The block sizes the device assumes against core/dtype's for every type, and for the float formats
 * the staged four-at-a-time dot (mk_q_dot4, what float matrices in a mixed op run) against the
 * element decoder above. */
static int check_dot4(uint32_t t, const struct mk_dtype_info *info) {
    const uint32_t bb = mk_q_block_bytes(t), be = mk_q_block_elems(t);
    if (bb == 0) {
        fprintf(stderr, "%s: mk_q_block_bytes knows no size\n", info->name);
        return 1;
    }
    const int64_t n = 8 * 256;
    if ((int64_t)mk_dtype_row_bytes((enum mk_dtype)t, n) != (int64_t)(n / be * bb)) {
        fprintf(stderr, "%s: block of %u bytes / %u elements disagrees with core/dtype\n", info->name, bb, be);
        return 1;
    }
    if (info->block_size != 1) return 0; /* block formats: the int8 dot below */
    std::vector<float> w(n), x(n);
    std::vector<uint8_t> row(mk_dtype_row_bytes((enum mk_dtype)t, n));
    for (int64_t i = 0; i < n; i++) {
        w[i] = rng_uniform() * (i % 97 == 0 ? 50.0f : 1.0f);
        x[i] = rng_uniform();
    }
    mk_quantize_row((enum mk_dtype)t, w.data(), row.data(), n);
    std::vector<float> vals(n);
    mk_dequantize_row((enum mk_dtype)t, row.data(), vals.data(), n);
    int bad = 0;
    for (int64_t e0 = 0; e0 < n; e0 += 4) {
        const uint8_t *b = row.data() + (e0 / be) * bb;
        uint32_t in_block = (uint32_t)(e0 % be);
        float got = mk_q_dot4(t, b, in_block / 32u, (in_block % 32u) / 4u, &x[e0]);
        /* Scale and minimum are applied to the sums, as ggml's GPU kernels do: the rounding is
         * relative to the largest value of the group times the inputs, not to the result. */
        double want = 0.0, sum_x = 0.0, vmax = 0.0;
        for (int i = 0; i < 4; i++) {
            want += (double)vals[e0 + i] * x[e0 + i];
            sum_x += fabs((double)x[e0 + i]);
        }
        for (int64_t i = e0 - e0 % 32; i < e0 - e0 % 32 + 32; i++) vmax = fmax(vmax, fabs((double)vals[i]));
        if (fabs(got - want) > 2e-6 * sum_x * vmax + 1e-30) {
            if (bad < 5)
                fprintf(stderr, "%s: dot4 at element %lld: %.9g, elementwise %.9g\n", info->name, (long long)e0,
                        (double)got, want);
            bad++;
        }
    }
    return bad;
}

static int xq_bad; /* elements whose three levels miss x by more than float rounding allows */

/* The int8 dot (mk_q8_unit, what the GPU runs for block formats) against the float dot of the
 * dequantized row, row by row: it must agree to float precision, for rows and inputs of very
 * different magnitudes. */
static int check_q8(uint32_t t, const struct mk_dtype_info *info) {
    const int64_t n = 8 * 256;
    const size_t bytes = mk_dtype_row_bytes((enum mk_dtype)t, n);
    std::vector<float> w(n), x(n), vals(n);
    std::vector<uint8_t> row(bytes + 64);
    std::vector<int8_t> xq;
    std::vector<struct mk_xgroup> grp;
    const float wscale[] = { 1.0f, 1e-4f, 1e3f, 1.0f };
    const float xscale[] = { 1.0f, 30.0f, 1e-3f, 1.0f };
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        for (int64_t i = 0; i < n; i++) {
            w[i] = rng_uniform() * wscale[c] * (i % 97 == 0 ? 50.0f : 1.0f);
            x[i] = rng_uniform() * xscale[c] * (c == 3 && i % 61 == 0 ? 400.0f : 1.0f);
            if (c == 3 && i % 256 < 32) x[i] = 0.0f; /* groups of zeros: d = 0 */
        }
        mk_quantize_row((enum mk_dtype)t, w.data(), row.data(), n);
        mk_dequantize_row((enum mk_dtype)t, row.data(), vals.data(), n);
        xq_bad += mk_test_make_xq(x, xq, grp);
        struct mk_xq8 xv = { xq.data(), grp.data() };
        /* The bound is float rounding's on the terms the int8 dot forms: a group's scaled sum and,
         * for formats with a minimum, the minimum times the group's sum, which can cancel. Measured
         * worst over 120 random rows per type: 2.9e-7 (q4_1); without a minimum 1.9e-8. */
        double want = 0.0, mag = 0.0, xmax = 0.0;
        for (int64_t i = 0; i < n; i++) {
            want += (double)vals[i] * x[i];
            mag += fabs((double)vals[i]);
            xmax = fmax(xmax, fabs((double)x[i]));
        }
        mag *= xmax;
        double got = 0.0;
        for (uint32_t u = 0; u < n / 32; u++) got += mk_q8_unit(t, row.data(), u, &xv);
        if (!(fabs(got - want) <= 1e-6 * mag)) {
            fprintf(stderr, "%s: int8 dot, case %d: %.9g, float dot %.9g (sum |w| x max |x| %.3g)\n", info->name, c,
                    got, want, mag);
            bad++;
        }
    }
    return bad;
}

int main(void) {
    int failures = 0, checked = 0;
    for (uint32_t t = 0; t < 64; t++) {
        const struct mk_dtype_info *info = mk_dtype_get(t);
        if (!info) continue;
        int bad4 = check_dot4(t, info);
        printf("%-8s %s %s\n", info->name, info->block_size == 1 ? "staged dot4" : "block size",
               bad4 ? "DIFFERS" : "agrees");
        failures += bad4 != 0;
        if (info->block_size == 1) continue;
        int bad8 = check_q8(t, info);
        printf("%-8s int8 dot %s\n", info->name, bad8 ? "DIFFERS" : "agrees");
        failures += bad8 != 0;
        int bad = check_type(t, info);
        printf("%-8s %s\n", info->name, bad ? "DIFFERS" : "bit-identical");
        failures += bad != 0;
        checked++;
    }
    if (checked < 3) {
        fprintf(stderr, "only %d quantized types found in core/dtype\n", checked);
        return 1;
    }
    if (xq_bad) {
        fprintf(stderr, "%d activations were written as int8 levels less exactly than float rounding\n", xq_bad);
        failures++;
    }
    if (failures) return 1;
    printf("quant_cuh_test: %d quantized types decode identically on host and device paths\n", checked);
    return 0;
}
