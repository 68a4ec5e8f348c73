/* Host CPU time of the whole process: what a token costs the machine, beside what it costs in wall time. */
#include "graph/cpu_time.h"

#include <time.h>

static uint64_t mk_cpu_time_clock_ns(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t mk_cpu_time_process_ns(void) { return mk_cpu_time_clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

struct mk_cpu_span mk_cpu_span_start(void) {
    return (struct mk_cpu_span){ mk_cpu_time_clock_ns(CLOCK_MONOTONIC), mk_cpu_time_process_ns() };
}

double mk_cpu_span_ms_per(const struct mk_cpu_span *s, uint64_t n, double *wall_ms) {
    double d = n ? (double)n : 1.0;
    if (wall_ms) *wall_ms = (double)(mk_cpu_time_clock_ns(CLOCK_MONOTONIC) - s->wall0_ns) / 1e6 / d;
    return (double)(mk_cpu_time_process_ns() - s->cpu0_ns) / 1e6 / d;
}
