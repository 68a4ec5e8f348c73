/* Per-token latency statistics of mk bench that depend on the order the tokens ran in. */
#ifndef MK_TOOLS_BENCH_STATS_H
#define MK_TOOLS_BENCH_STATS_H

#include <stdint.h>

/* The q-quantile (0 < q <= 1) of v[0 .. n), n > 0, as the value at rank ceil(q n); sorts v in place. */
double mk_bench_quantile(double *v, uint32_t n, double q);

/* Tokens on each side of a token whose times give its local median. */
#define MK_BENCH_LOCAL_HALF 15u

/* The q-quantile (0 < q <= 1, as mk bench's p99) of each token's time over the median time of the
 * 2 * MK_BENCH_LOCAL_HALF + 1 tokens around it (the window kept inside [0, n) at the ends; all n
 * tokens when fewer). A step that grows with the position (the attention reading more of the KV
 * cache) cancels against its neighbours; noise and stalls do not. So p99 / p50 over a long run says
 * how much of the tail is the position, and this how much is jitter. ms: n times in the order they
 * ran, left as they are. Returns 0 when n is 0, memory runs out or a median is not positive. */
double mk_bench_local_quantile(const double *ms, uint32_t n, double q);

#endif
