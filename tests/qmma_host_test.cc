/* The K-quant tensor-core tiles (megakernel/qmma.cuh), run on the host by 32 threads as one warp, against the int8 lane-unit dot. */
#include <condition_variable>
#include <math.h>
#include <mutex>
#include <stdio.h>
#include <thread>
#include <vector>

#include "tests/cuda_host_shim.h"
#define MK_QUANT_NO_CUDA_HEADERS
#include "megakernel/quant8.cuh"
#include "tests/xq_host.h"

/* The rest of the device vocabulary the tiles use. */
struct mk_host_tid {
    unsigned x;
};
static thread_local mk_host_tid threadIdx;
struct uint2 {
    uint32_t x, y;
};
struct uint4 {
    uint32_t x, y, z, w;
};
struct float2 {
    float x, y;
};
static inline float2 mk_qmma_h2f(uint32_t w) {
    return float2{ mk_fp16_to_fp32((uint16_t)(w & 0xffffu)), mk_fp16_to_fp32((uint16_t)(w >> 16)) };
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline uint32_t min(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* Shared memory: x's quants and groups in one buffer, addressed by offset as ld.shared is. */
static const uint8_t *g_smem;
static uint2 mk_lds64(uint32_t a) {
    uint2 v;
    memcpy(&v, g_smem + a, 8);
    return v;
}
static uint32_t mk_lds32(uint32_t a) {
    uint32_t v;
    memcpy(&v, g_smem + a, 4);
    return v;
}
static uint4 mk_lds128(uint32_t a) {
    uint4 v;
    memcpy(&v, g_smem + a, 16);
    return v;
}

/* The warp: every lane deposits its fragments, then each reads what mma.m16n8k32 .s8 gives it, as
 * the PTX ISA lays the fragments out (written here from the manual, not from qmma.cuh). */
static struct {
    std::mutex m;
    std::condition_variable cv;
    unsigned waiting = 0, generation = 0;
    uint32_t a[32][4], b[32][2];
} g_warp;

static void warp_barrier(void) {
    std::unique_lock<std::mutex> lk(g_warp.m);
    const unsigned gen = g_warp.generation;
    if (++g_warp.waiting == 32) {
        g_warp.waiting = 0;
        g_warp.generation++;
        g_warp.cv.notify_all();
    } else {
        g_warp.cv.wait(lk, [&] { return g_warp.generation != gen; });
    }
}

static int8_t byte_of(uint32_t w, int i) { return (int8_t)(uint8_t)(w >> (8 * i)); }

static void mk_mma_s8(int *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    const unsigned lane = threadIdx.x & 31u;
    g_warp.a[lane][0] = a0, g_warp.a[lane][1] = a1, g_warp.a[lane][2] = a2, g_warp.a[lane][3] = a3;
    g_warp.b[lane][0] = b0, g_warp.b[lane][1] = b1;
    warp_barrier();
    int A[16][32], B[32][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, c = l & 3;
        for (int i = 0; i < 4; i++) {
            A[g][4 * c + i] = byte_of(g_warp.a[l][0], i);
            A[g + 8][4 * c + i] = byte_of(g_warp.a[l][1], i);
            A[g][16 + 4 * c + i] = byte_of(g_warp.a[l][2], i);
            A[g + 8][16 + 4 * c + i] = byte_of(g_warp.a[l][3], i);
            B[4 * c + i][g] = byte_of(g_warp.b[l][0], i);
            B[16 + 4 * c + i][g] = byte_of(g_warp.b[l][1], i);
        }
    }
    const int g = (int)lane >> 2, c = (int)lane & 3;
    const int rows[4] = { g, g, g + 8, g + 8 }, cols[4] = { 2 * c, 2 * c + 1, 2 * c, 2 * c + 1 };
    for (int r = 0; r < 4; r++) {
        int sum = 0;
        for (int k = 0; k < 32; k++) sum += A[rows[r]][k] * B[k][cols[r]];
        d[r] = sum;
    }
    warp_barrier(); /* the slots are refilled by the next mma */
}

#define MK_QMMA_HOST
#include "megakernel/qmma.cuh"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float rng_uniform() {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((uint32_t)(rng_state >> 33) >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

/* x in one shared-memory image, quants then groups, as the tiles address it. */
static void make_xq(const std::vector<float> &x, std::vector<int8_t> &q, std::vector<struct mk_xgroup> &grp,
                    std::vector<uint8_t> &smem, uint32_t *xq, uint32_t *xg) {
    mk_test_make_xq(x, q, grp); /* its exactness is quant_cuh_test's */
    *xq = 0;
    *xg = (uint32_t)q.size() / 16 * 16;
    smem.assign(*xg + 16 * grp.size(), 0);
    memcpy(smem.data(), q.data(), *xg);
    memcpy(smem.data() + *xg, grp.data(), 16 * grp.size());
}

/* 16 rows of type t over n inputs: each row's tile result (summed over its four lanes and over the
 * ks contiguous shares of its super-blocks mk_qmma_rows gives the warps) and the sum of mk_q8_unit
 * over the row, against the float dot. */
static int check(uint32_t t, const char *name, uint32_t n, uint32_t ks, int c, double *worst) {
    const size_t rb = mk_dtype_row_bytes((enum mk_dtype)t, n);
    std::vector<uint8_t> rows(16 * rb + 64);
    std::vector<float> w(n), x(n);
    const float wscale[] = { 1.0f, 1e-4f, 1e3f, 1.0f }, xscale[] = { 1.0f, 30.0f, 1e-3f, 1.0f };
    for (int r = 0; r < 16; r++) {
        for (uint32_t i = 0; i < n; i++) w[i] = rng_uniform() * wscale[c] * (i % 97 == 0 ? 50.0f : 1.0f);
        mk_quantize_row((enum mk_dtype)t, w.data(), rows.data() + r * rb, n);
    }
    for (uint32_t i = 0; i < n; i++) {
        x[i] = rng_uniform() * xscale[c] * (c == 3 && i % 61 == 0 ? 400.0f : 1.0f);
        if (c == 3 && i % 256 < 32) x[i] = 0.0f; /* groups of zeros: d = 0 */
    }
    std::vector<int8_t> q;
    std::vector<struct mk_xgroup> grp;
    std::vector<uint8_t> smem;
    uint32_t xq, xg;
    make_xq(x, q, grp, smem, &xq, &xg);
    g_smem = smem.data();
    float acc[32][2] = {};
    std::vector<std::thread> lanes;
    for (unsigned lane = 0; lane < 32; lane++) {
        lanes.emplace_back([&, lane] {
            threadIdx.x = lane;
            const uint8_t *pg = rows.data() + (lane >> 2) * rb, *pg8 = rows.data() + ((lane >> 2) + 8) * rb;
            for (uint32_t s = 0; s < ks; s++) {
                const uint32_t lo = mk_qmma_lo(s, ks, n / 256), hi = mk_qmma_hi(s, ks, n / 256);
                if (t == MK_DEV_Q6_K)
                    mk_qmma_k6(pg, pg8, lo, hi, xq, xg, acc[lane]);
                else if (t == MK_DEV_Q5_K)
                    mk_qmma_k45<true>(pg, pg8, lo, hi, xq, xg, acc[lane]);
                else
                    mk_qmma_k45<false>(pg, pg8, lo, hi, xq, xg, acc[lane]);
            }
        });
    }
    for (auto &l : lanes) l.join();
    struct mk_xq8 xv = { q.data(), grp.data() };
    double xmax = 0.0;
    for (uint32_t i = 0; i < n; i++) xmax = fmax(xmax, fabs((double)x[i]));
    int bad = 0;
    for (int r = 0; r < 16; r++) {
        double lanes = 0.0, want = 0.0, mag = 0.0;
        for (uint32_t u = 0; u < n / 32; u++) lanes += mk_q8_unit(t, rows.data() + r * rb, u, &xv);
        mk_dequantize_row((enum mk_dtype)t, rows.data() + r * rb, w.data(), n);
        for (uint32_t i = 0; i < n; i++) want += (double)w[i] * x[i], mag += fabs((double)w[i]);
        mag *= xmax;
        const int g = r % 8, h = r / 8;
        double got = 0.0;
        for (int c4 = 0; c4 < 4; c4++) got += acc[4 * g + c4][h];
        /* Both against the float dot of the dequantized row, on the scale of sum |w| max |x| as
         * quant_cuh_test bounds the lane-unit dot (measured here: lane units 7.3e-7, tiles 1.5e-6
         * on q4_k, 9.8e-7 on q5_k, 7.8e-8 on q6_k). The tiles subtract the minimum once per
         * super-block rather than per lane-unit, so that cancellation rounds larger parts; a wrong
         * nibble, scale or fragment is off by 1e-2 and more. */
        if (fabs(got - want) > *worst * mag) *worst = fabs(got - want) / mag;
        if (!(fabs(got - want) <= 3e-6 * mag) || !(fabs(lanes - want) <= 1e-6 * mag)) {
            if (bad < 3)
                fprintf(
                    stderr,
                    "%s n %u ks %u case %d row %d: tile %.9g, lane units %.9g, float dot %.9g (sum |w| max |x| %.3g)\n",
                    name, n, ks, c, r, got, lanes, want, mag);
            bad++;
        }
    }
    return bad;
}

/* mk_qmma_k45_sbt and mk_qmma_k6_sbt: NT token rows of n inputs in one pass over 16 rows, x's
 * image interleaved by token as the chunk kernel stages it (one scale a super-block; token ntok and
 * up padding: d 0, levels 0), each token's row sum (the lanes the kernel sums: c and c ^ 1 of a
 * pair, all four for Q6_K) against the float dot, as check() bounds the one-token tile. The tokens differ in scale, so a
 * lane that read another token's levels or groups shows. */
template <int NT> static int check_tokens(uint32_t t, const char *name, uint32_t n, int ntok, int c, double *worst) {
    const size_t rb = mk_dtype_row_bytes((enum mk_dtype)t, n);
    std::vector<uint8_t> rows(16 * rb + 64);
    std::vector<float> w(n);
    std::vector<std::vector<float>> x(NT, std::vector<float>(n, 0.0f));
    const float wscale[] = { 1.0f, 1e-4f, 1e3f, 1.0f }, xscale[] = { 1.0f, 30.0f, 1e-3f, 1.0f };
    for (int r = 0; r < 16; r++) {
        for (uint32_t i = 0; i < n; i++) w[i] = rng_uniform() * wscale[c] * (i % 97 == 0 ? 50.0f : 1.0f);
        mk_quantize_row((enum mk_dtype)t, w.data(), rows.data() + r * rb, n);
    }
    const uint32_t ng = n / 32, xg = 96u * NT * ng;
    std::vector<uint8_t> smem((96u + MK_QMMA_XG_BYTES) * NT * ng, 0);
    int bad_x = 0; /* inputs whose levels miss x (mk_test_make_xq prints them) */
    for (int k = 0; k < ntok; k++) {
        for (uint32_t i = 0; i < n; i++) {
            x[k][i] = rng_uniform() * xscale[c] * (float)(1 + 3 * k) * (c == 3 && i % 61 == 0 ? 400.0f : 1.0f);
            if (c == 3 && (i + 64u * (uint32_t)k) % 256 < 32) x[k][i] = 0.0f;
        }
        std::vector<int8_t> q;
        std::vector<struct mk_xgroup> grp;
        bad_x += mk_test_make_xq(x[k], q, grp, 256);
        for (uint32_t G = 0; G < ng; G++) {
            memcpy(smem.data() + 96u * (NT * G + (uint32_t)k), q.data() + 96u * G, 96);
            const uint2 e = mk_qmma_xg_pack(grp[G].d, grp[G].s);
            memcpy(smem.data() + xg + MK_QMMA_XG_BYTES * (NT * G + (uint32_t)k), &e, MK_QMMA_XG_BYTES);
        }
    }
    g_smem = smem.data();
    const bool six = t == MK_DEV_Q6_K;
    float acc[32][NT][2] = {}; /* Q4_K/Q5_K: pair p in acc[lane][p] */
    std::vector<std::thread> lanes;
    for (unsigned lane = 0; lane < 32; lane++) {
        lanes.emplace_back([&, lane] {
            threadIdx.x = lane;
            const uint8_t *pg = rows.data() + (lane >> 2) * rb, *pg8 = rows.data() + ((lane >> 2) + 8) * rb;
            for (uint32_t sb = 0; sb < n / 256; sb++) {
                struct mk_qk45_raw raw;
                if (six) {
                    mk_qmma_k6_sbt<NT>(pg + (uint64_t)sb * 210u, pg8 + (uint64_t)sb * 210u, 8u * sb, 0u, xg, acc[lane]);
                } else if (t == MK_DEV_Q5_K) {
                    mk_qmma_k45_load<true>(pg + (uint64_t)sb * 176u, pg8 + (uint64_t)sb * 176u, &raw);
                    mk_qmma_k45_sbt<true, NT>(raw, 8u * sb, 0u, xg, acc[lane]);
                } else {
                    mk_qmma_k45_load<false>(pg + (uint64_t)sb * 144u, pg8 + (uint64_t)sb * 144u, &raw);
                    mk_qmma_k45_sbt<false, NT>(raw, 8u * sb, 0u, xg, acc[lane]);
                }
            }
        });
    }
    for (auto &l : lanes) l.join();
    int bad = bad_x;
    for (int k = 0; k < NT; k++) {
        double xmax = 0.0;
        for (uint32_t i = 0; i < n; i++) xmax = fmax(xmax, fabs((double)x[k][i]));
        for (int r = 0; r < 16; r++) {
            double want = 0.0, mag = 0.0;
            mk_dequantize_row((enum mk_dtype)t, rows.data() + r * rb, w.data(), n);
            for (uint32_t i = 0; i < n; i++) want += (double)w[i] * x[k][i], mag += fabs((double)w[i]);
            mag *= xmax;
            const int g = r % 8, h = r / 8, l0 = 4 * g + 2 * (k % 2);
            const double got =
                six ? (double)acc[4 * g][k][h] + acc[4 * g + 1][k][h] + acc[4 * g + 2][k][h] + acc[4 * g + 3][k][h]
                    : (double)acc[l0][k / 2][h] + acc[l0 + 1][k / 2][h];
            if (k >= ntok) { /* padding: exactly nothing */
                if (got != 0.0) {
                    if (bad < 3)
                        fprintf(stderr, "%s %d tokens: padding token %d row %d gives %.9g\n", name, NT, k, r, got);
                    bad++;
                }
                continue;
            }
            if (fabs(got - want) > *worst * mag) *worst = fabs(got - want) / mag;
            if (!(fabs(got - want) <= 3e-6 * mag)) {
                if (bad < 3)
                    fprintf(stderr, "%s %d tokens n %u case %d token %d row %d: tile %.9g, float dot %.9g\n", name, NT,
                            n, c, k, r, got, want);
                bad++;
            }
        }
    }
    return bad;
}

int main(void) {
    const uint32_t types[] = { MK_DEV_Q4_K, MK_DEV_Q5_K, MK_DEV_Q6_K };
    const char *names[] = { "q4_k", "q5_k", "q6_k" };
    int failures = 0;
    for (int i = 0; i < 3; i++) {
        int bad = 0;
        double worst = 0.0;
        for (int c = 0; c < 4; c++) {
            bad += check(types[i], names[i], 256, 1, c, &worst);
            bad += check(types[i], names[i], 1024, 1, c, &worst);
            bad += check(types[i], names[i], 1024, 3, c, &worst); /* super-blocks split over warps */
        }
        printf("%-5s tiles %s the float dot (worst %.2g of sum |w| max |x|)\n", names[i],
               bad ? "DIFFER FROM" : "agree with", worst);
        failures += bad != 0;
        int bad2 = 0;
        double worst2 = 0.0;
        for (int c = 0; c < 4; c++)
            bad2 += check_tokens<2>(types[i], names[i], 256, 2, c, &worst2) +
                    check_tokens<2>(types[i], names[i], 1024, 1, c, &worst2) +
                    check_tokens<4>(types[i], names[i], 512, 3, c, &worst2) +
                    check_tokens<8>(types[i], names[i], 256, 8, c, &worst2) +
                    check_tokens<16>(types[i], names[i], 512, 13, c, &worst2);
        printf("%-5s tiles of 2 to 16 tokens %s the float dot (worst %.2g of sum |w| max |x|)\n", names[i],
               bad2 ? "DIFFER FROM" : "agree with", worst2);
        failures += bad2 != 0;
    }
    if (failures) {
        fprintf(stderr, "qmma_host_test: %d type(s) differ\n", failures);
        return 1;
    }
    printf("qmma_host_test: ok\n");
    return 0;
}
