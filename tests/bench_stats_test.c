/* Known answers for mk bench's p99 over each token's local median (tools/bench_stats.c): a step that grows with the position against noise and stalls. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/test_util.h"
#include "tools/bench_stats.h"

#define N 1000u

/* 1.0 ms at the first token to 1.1 at the last, as attention over a growing cache makes it. */
static void ramp(double *ms) {
    for (uint32_t i = 0; i < N; i++) ms[i] = 1.0 + 0.1 * i / (N - 1u);
}

/* The growth alone: p99 / p50 over the run is about 1.05, over the local median 1 (a window of 31
 * tokens spans 0.3 % of the ramp), and the times are left in their order. */
static void test_ramp(void) {
    double ms[N], copy[N];
    ramp(ms);
    memcpy(copy, ms, sizeof ms);
    const double v = mk_bench_local_quantile(ms, N, 0.99);
    MK_CHECK_MSG(v >= 1.0 && v < 1.002, "ramp: p99 over the local median %.5f, want 1 .. 1.002", v);
    MK_CHECK_MSG(!memcmp(copy, ms, sizeof ms), "the times were reordered");
}

/* Stalls of 20 % on 2 % of the tokens reach the p99 (1.2 over their neighbours); on 0.5 % they do
 * not, and the ramp's own value comes back. */
static void test_stalls(void) {
    double ms[N];
    ramp(ms);
    for (uint32_t i = 7; i < N; i += 50u) ms[i] *= 1.2; /* 20 tokens */
    double v = mk_bench_local_quantile(ms, N, 0.99);
    MK_CHECK_MSG(fabs(v - 1.2) < 0.005, "2 %% stalls: %.5f, want 1.2", v);
    ramp(ms);
    for (uint32_t i = 7; i < N; i += 200u) ms[i] *= 1.2; /* 5 tokens */
    v = mk_bench_local_quantile(ms, N, 0.99);
    MK_CHECK_MSG(v >= 1.0 && v < 1.002, "0.5 %% stalls: %.5f, want 1 .. 1.002", v);
}

/* A stall at either end meets a window moved inside the run, and still counts. */
static void test_ends(void) {
    double ms[N];
    for (uint32_t i = 0; i < N; i++) ms[i] = 2.0;
    for (uint32_t i = 0; i < 6; i++) ms[i] = ms[N - 1u - i] = 3.0; /* 12 tokens, 1.2 % */
    const double v = mk_bench_local_quantile(ms, N, 0.99);
    MK_CHECK_MSG(fabs(v - 1.5) < 1e-12, "stalls at the ends: %.5f, want 1.5", v);
}

/* Runs shorter than the window take all their tokens; the median of an even count is the mean of
 * the middle two; no tokens, a bad quantile or a median of 0 give 0. */
static void test_short_and_bad(void) {
    const double one[1] = { 4.0 }, four[4] = { 1.0, 2.0, 3.0, 10.0 }, zeros[3] = { 0.0, 0.0, 0.0 };
    MK_CHECK(fabs(mk_bench_local_quantile(one, 1, 0.99) - 1.0) < 1e-12);
    MK_CHECK_MSG(fabs(mk_bench_local_quantile(four, 4, 0.99) - 4.0) < 1e-12, "four tokens: %.5f, want 10 / 2.5",
                 mk_bench_local_quantile(four, 4, 0.99));
    MK_CHECK(fabs(mk_bench_local_quantile(four, 4, 0.25) - 0.4) < 1e-12);
    MK_CHECK(mk_bench_local_quantile(four, 0, 0.99) == 0.0);
    MK_CHECK(mk_bench_local_quantile(four, 4, 0.0) == 0.0);
    MK_CHECK(mk_bench_local_quantile(four, 4, 1.5) == 0.0);
    MK_CHECK(mk_bench_local_quantile(zeros, 3, 0.99) == 0.0);
}

int main(void) {
    test_ramp();
    test_stalls();
    test_ends();
    test_short_and_bad();
    return mk_test_finish("bench_stats_test");
}
