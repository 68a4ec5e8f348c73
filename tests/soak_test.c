/* Soak: many sampled sessions one after another on one loaded stories260K (cpu backend) leave resident memory, file descriptors and threads where they started, with zero errors. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graph/cpu_time.h"
#include "runtime/mk.h"
#include "tests/test_util.h"

/* Sized for CI; MK_SOAK_SESSIONS=100 MK_SOAK_TOKENS=2000 is the full soak. */
#define DEFAULT_SESSIONS 12
#define DEFAULT_TOKENS   300

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
        fclose(f);
    }
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Entries of a /proc/self folder, "." and ".." (and the listing's own fd) not counted. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return strcmp(dir, "/proc/self/fd") == 0 ? n - 1 : n;
}

static unsigned env_or(const char *name, unsigned dflt) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? (unsigned)atoi(v) : dflt;
}

struct lat {
    double *ms; /* (cap) */
    size_t n, cap;
    uint64_t last;
};

static int on_token(void *user, int32_t id, const char *piece, size_t len) {
    (void)id, (void)piece, (void)len;
    struct lat *l = user;
    uint64_t t = now_ns();
    if (l->n < l->cap) l->ms[l->n++] = (double)(t - l->last) / 1e6;
    l->last = t;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One session: tokens sampled tokens, starting over (reset + prompt) whenever the context fills. */
static int run_session(const struct mk_lm *lm, unsigned i, unsigned tokens, struct lat *l) {
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_CPU;
    sp.n_threads = i % 2 ? 2 : 0; /* the default and real worker threads both */
    sp.sampling.temperature = 0.8f;
    sp.sampling.seed = 1000 + i;
    struct mk_session *s = NULL;
    struct mk_error err;
    if (mk_session_create(lm, &sp, &s, &err) != MK_OK) {
        mk_test_fail("FAIL: session %u: create: %s", i, err.msg);
        return -1;
    }
    unsigned done = 0;
    int rc = 0;
    while (done < tokens && rc == 0) {
        if (mk_session_reset(s) != MK_OK || mk_session_feed_text(s, "Once upon a time") != MK_OK) {
            mk_test_fail("FAIL: session %u: feed: %s", i, mk_session_last_error(s));
            rc = -1;
            break;
        }
        enum mk_stop_reason why = MK_STOP_NONE;
        uint32_t n = 0;
        l->last = now_ns();
        if (mk_session_generate(s, (int32_t)(tokens - done), on_token, l, &why, &n) != MK_OK || why == MK_STOP_NONE ||
            why == MK_STOP_CANCELLED) {
            mk_test_fail("FAIL: session %u: generate (%s): %s", i, mk_stop_reason_str(why), mk_session_last_error(s));
            rc = -1;
        }
        done += n;
        if (n == 0 && why != MK_STOP_EOS) break;
    }
    mk_session_free(s);
    return rc;
}

int main(void) {
    const char *models = mk_test_models_dir("stories260K-f32.gguf");
    if (!models) {
        printf("SKIP: no models folder with stories260K-f32.gguf\n");
        return mk_test_finish("soak_test");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", models);
    unsigned sessions = env_or("MK_SOAK_SESSIONS", DEFAULT_SESSIONS), tokens = env_or("MK_SOAK_TOKENS", DEFAULT_TOKENS);
    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        mk_test_fail("FAIL: load: %s", err.msg);
        return mk_test_finish("soak_test");
    }
    struct lat l = { calloc((size_t)sessions * tokens, sizeof(double)), 0, (size_t)sessions * tokens, 0 };
    struct lat warm = { calloc(tokens, sizeof(double)), 0, tokens, 0 };
    MK_CHECK(l.ms && warm.ms);
    /* A session of each kind first, so that the allocator's arenas and glibc's cache of thread
     * stacks (their touched pages stay resident) are in place before the baseline. */
    for (unsigned i = 0; i < 2; i++) {
        warm.n = 0;
        MK_CHECK(run_session(lm, i, tokens, &warm) == 0);
    }
    long rss0 = rss_kib();
    int fd0 = count_entries("/proc/self/fd"), thr0 = count_entries("/proc/self/task");
    int errors = 0;
    struct mk_cpu_span span = mk_cpu_span_start();
    for (unsigned i = 2; i < sessions + 2; i++) errors += run_session(lm, i, tokens, &l) != 0;
    double wall_ms = 0, cpu_ms = mk_cpu_span_ms_per(&span, l.n, &wall_ms);
    long rss1 = rss_kib();
    int fd1 = count_entries("/proc/self/fd"), thr1 = count_entries("/proc/self/task");
    qsort(l.ms, l.n, sizeof *l.ms, cmp_double);
    double p50 = l.n ? l.ms[l.n / 2] : 0, p99 = l.n ? l.ms[(l.n * 99) / 100] : 0, mx = l.n ? l.ms[l.n - 1] : 0;
    printf("soak: %u sessions x %u tokens: %zu tokens, %d errors; per token p50 %.3f ms, p99 %.3f ms, max %.3f ms; "
           "wall %.3f ms, host cpu %.3f ms; rss %ld -> %ld KiB; fds %d -> %d; threads %d -> %d\n",
           sessions, tokens, l.n, errors, p50, p99, mx, wall_ms, cpu_ms, rss0, rss1, fd0, fd1, thr0, thr1);
    MK_CHECK(errors == 0);
    MK_CHECK(l.n == (size_t)sessions * tokens);
    MK_CHECK(rss0 > 0 && rss1 > 0);
    /* Flat within 1 %, with a floor of 256 KiB for the allocator's own bookkeeping. */
    long slack = rss0 / 100 > 256 ? rss0 / 100 : 256;
    MK_CHECK_MSG(rss1 - rss0 <= slack, "resident memory grew from %ld to %ld KiB", rss0, rss1);
    MK_CHECK_MSG(fd1 == fd0, "open files went from %d to %d", fd0, fd1);
    MK_CHECK_MSG(thr1 == thr0 && thr1 == 1, "threads went from %d to %d", thr0, thr1);
    free(l.ms);
    free(warm.ms);
    mk_lm_free(lm);
    return mk_test_finish("soak_test");
}
