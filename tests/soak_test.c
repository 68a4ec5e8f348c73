/* Soak: many sampled sessions one after another on one loaded stories260K (cpu backend) leave resident memory, file descriptors and threads where they started, with zero errors. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/mk.h"
#include "runtime/soak.h"
#include "tests/test_util.h"

/* Sized for CI, and smaller under ThreadSanitizer (every atomic and futex of the executor is
 * instrumented there); MK_SOAK_SESSIONS=100 MK_SOAK_TOKENS=2000 is the full soak, which
 * `mk bench --soak 100` also runs. */
#if defined(__SANITIZE_THREAD__)
#define DEFAULT_SESSIONS 4
#define DEFAULT_TOKENS   60
#else
#define DEFAULT_SESSIONS 12
#define DEFAULT_TOKENS   300
#endif

static unsigned env_or(const char *name, unsigned dflt) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? (unsigned)atoi(v) : dflt;
}

int main(void) {
    const char *path = mk_test_stories_path();
    if (!path) return mk_test_finish("soak_test");
    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        mk_test_fail("FAIL: load: %s", err.msg);
        return mk_test_finish("soak_test");
    }
    struct mk_soak_params p = mk_soak_default_params();
    p.sessions = env_or("MK_SOAK_SESSIONS", DEFAULT_SESSIONS);
    p.tokens = env_or("MK_SOAK_TOKENS", DEFAULT_TOKENS);
    p.session.backend = MK_BACKEND_CPU;
    /* The default worker count (one, the caller, for this model) and two: real worker threads. */
    p.vary_threads = true;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* ThreadSanitizer's shadow memory grows with every new address touched, AddressSanitizer keeps
     * freed blocks resident in its quarantine: resident memory is checked in the plain build, and
     * leaks under ASan by LeakSanitizer at exit. */
    p.rss_floor_kib = 1L << 20;
#endif
#if defined(__SANITIZE_THREAD__)
    const int own_threads = 2; /* TSan's background thread */
#else
    const int own_threads = 1;
#endif
    struct mk_soak_report r;
    MK_CHECK(mk_soak_run(lm, &p, &r, &err) == MK_OK);
    printf(
        "soak: %u sessions x %u tokens: %llu tokens, %u errors; per token p50 %.3f ms, p99 %.3f ms, max %.3f ms; "
        "wall %.3f ms, host cpu %.3f ms; rss %ld -> %ld KiB (anonymous %ld -> %ld); fds %d -> %d; threads %d -> %d\n",
        r.sessions, p.tokens, (unsigned long long)r.tokens, r.errors, r.p50_ms, r.p99_ms, r.max_ms, r.wall_ms_per_token,
        r.cpu_ms_per_token, r.rss0_kib, r.rss1_kib, r.anon0_kib, r.anon1_kib, r.fds0, r.fds1, r.threads0, r.threads1);
    MK_CHECK_MSG(r.verdict[0] == '\0', "soak: %s", r.verdict);
    MK_CHECK_MSG(r.errors == 0, "first error: %s", r.first_error);
    MK_CHECK(r.tokens == (uint64_t)p.sessions * p.tokens);
    MK_CHECK(r.rss0_kib > 0 && r.rss1_kib > 0 && r.fds0 > 0);
    MK_CHECK(r.anon0_kib > 0 && r.anon0_kib <= r.rss0_kib && r.anon1_kib > 0 && r.anon1_kib <= r.rss1_kib);
    /* Nothing of a session outlives it: only the main thread (and TSan's) is left. */
    MK_CHECK_MSG(r.threads0 == own_threads && r.threads1 == own_threads, "threads %d -> %d", r.threads0, r.threads1);
    MK_CHECK(r.p50_ms > 0 && r.p50_ms <= r.p99_ms && r.p99_ms <= r.max_ms);
    MK_CHECK_MSG(r.dev_p50_ms == 0 && r.dev_p99_ms == 0, "the cpu backend keeps no clock of its own: %g %g",
                 r.dev_p50_ms, r.dev_p99_ms);

    /* The ref backend times its own steps: each token's step is part of the time between tokens. */
    struct mk_soak_params q = mk_soak_default_params();
    q.sessions = 1;
    q.warmup = 0;
    q.tokens = 64;
    q.session.backend = MK_BACKEND_REF;
    q.rss_floor_kib = 1L << 20;
    MK_CHECK(mk_soak_run(lm, &q, &r, &err) == MK_OK);
    printf("soak ref: per token p50 %.3f ms (on its own clock %.3f), p99 %.3f (%.3f)\n", r.p50_ms, r.dev_p50_ms,
           r.p99_ms, r.dev_p99_ms);
    MK_CHECK_MSG(r.errors == 0, "first error: %s", r.first_error);
    MK_CHECK(r.dev_p50_ms > 0 && r.dev_p50_ms <= r.p50_ms && r.dev_p99_ms <= r.p99_ms);
    mk_lm_free(lm);
    return mk_test_finish("soak_test");
}
