/* Soak runs: many sampled sessions one after another on one loaded model, with the process's memory, files and threads before and after (mk bench --soak, tests/soak_test.c). */
#ifndef MK_SOAK_H
#define MK_SOAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/mk.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_soak_params {
    uint32_t sessions;  /* measured sessions, after the warm-up ones */
    uint32_t warmup;    /* sessions run before the baseline is taken (allocator arenas, thread stacks) */
    uint32_t tokens;    /* generated per session; the sequence restarts (reset + prompt) when it ends */
    const char *prompt; /* fed at each (re)start */
    uint64_t seed;      /* session i samples with seed + i */
    bool vary_threads;  /* odd sessions use 2 cpu workers, even ones the default */
    double
        rss_slack_pct; /* allowed growth of anonymous resident memory, in % of all resident memory at the baseline ... */
    long rss_floor_kib;               /* ... but at least this many KiB */
    struct mk_session_params session; /* backend, sampling (temperature > 0), n_ctx, ... */
    const char *latencies_path;       /* when set: each measured token's position, wall and device ms, one per line */
};
/* 100 sessions of 2000 tokens at temperature 0.8, 2 warm-up sessions, 1 % / 256 KiB slack. */
struct mk_soak_params mk_soak_default_params(void);

struct mk_soak_report {
    uint32_t sessions, errors;
    uint64_t tokens;                    /* generated in the measured sessions */
    double p50_ms, p99_ms, max_ms;      /* per generated token (one decode step and the callback) */
    double dev_p50_ms, dev_p99_ms;      /* the same steps on the backend's own clock; 0 where it has none */
    double wall_ms_per_token;           /* whole measured run over its tokens (restarts and prompts too) */
    double cpu_ms_per_token;            /* host CPU of every thread of the process, same basis */
    long rss0_kib, rss1_kib;            /* resident memory after warm-up, and at the end */
    long anon0_kib, anon1_kib;          /* its anonymous part (heap, KV caches, stacks), what a leak grows; the rest
                                         * is file-backed: pages of the binary and libraries, read once when code
                                         * first runs */
    int fds0, fds1, threads0, threads1; /* open files and threads, same moments */
    char first_error[512];              /* the first session's error, "" when none */
    char verdict[256];                  /* "" when flat and error-free, else what grew or failed */
};

/* Resident memory of this process in KiB (VmRSS in /proc/self/status), -1 when unknown. */
long mk_soak_rss_kib(void);
/* Its anonymous part in KiB (RssAnon in /proc/self/status), -1 when unknown. */
long mk_soak_anon_kib(void);
/* Open file descriptors (/proc/self/fd) or threads (/proc/self/task) of this process, -1 when unknown. */
int mk_soak_count_fds(void);
int mk_soak_count_threads(void);

/* Runs p->warmup then p->sessions sessions on lm and fills *r. MK_OK when it ran (r->verdict says
 * whether it passed); an error only when the run could not start (no memory). */
enum mk_status mk_soak_run(const struct mk_lm *lm, const struct mk_soak_params *p, struct mk_soak_report *r,
                           struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
