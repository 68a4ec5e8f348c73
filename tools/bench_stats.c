/* Per-token latency statistics of mk bench that depend on the order the tokens ran in. */
#include "tools/bench_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int mk_bench_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double mk_bench_quantile(double *v, uint32_t n, double q) {
    qsort(v, n, sizeof *v, mk_bench_cmp);
    const uint32_t i = (uint32_t)ceil(q * n) - 1u;
    return v[i < n ? i : n - 1u];
}

double mk_bench_local_quantile(const double *ms, uint32_t n, double q) {
    const uint32_t w = 2u * MK_BENCH_LOCAL_HALF + 1u;
    double win[2u * MK_BENCH_LOCAL_HALF + 1u];
    if (n == 0 || !(q > 0.0 && q <= 1.0)) return 0.0;
    double *r = malloc((size_t)n * sizeof *r);
    if (!r) return 0.0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = i > MK_BENCH_LOCAL_HALF ? i - MK_BENCH_LOCAL_HALF : 0u, hi = lo + w;
        if (hi > n) {
            hi = n;
            lo = n > w ? n - w : 0u;
        }
        const uint32_t k = hi - lo;
        memcpy(win, ms + lo, k * sizeof *win);
        qsort(win, k, sizeof *win, mk_bench_cmp);
        const double med = k % 2u ? win[k / 2u] : (win[k / 2u - 1u] + win[k / 2u]) / 2.0;
        if (!(med > 0.0)) {
            free(r);
            return 0.0;
        }
        r[i] = ms[i] / med;
    }
    const double v = mk_bench_quantile(r, n, q);
    free(r);
    return v;
}
