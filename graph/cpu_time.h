/* Host CPU time of the whole process, to put next to wall time per token in benchmarks. */
#ifndef MK_CPU_TIME_H
#define MK_CPU_TIME_H

#include <stdint.h>

/* CPU time (user + system) every thread of this process has used so far, in nanoseconds
 * (CLOCK_PROCESS_CPUTIME_ID); 0 where the clock is missing. */
uint64_t mk_cpu_time_process_ns(void);

/* A span of wall and process CPU time: start it, run steps, read it. */
struct mk_cpu_span {
    uint64_t wall0_ns, cpu0_ns;
};
struct mk_cpu_span mk_cpu_span_start(void);
/* Host CPU per unit (ms), and *wall_ms (may be NULL) the wall ms per unit, since s; n units. */
double mk_cpu_span_ms_per(const struct mk_cpu_span *s, uint64_t n, double *wall_ms);

#endif
