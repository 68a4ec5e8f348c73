/* Faults in the middle: injected cpu executor failures (error, trap, hang) end the session with an error naming the step, leave no thread behind, and the next session on the same model is correct. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/mk.h"
#include "tests/test_util.h"

#define N_GEN 24

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

struct run {
    int32_t ids[N_GEN];
    uint32_t n;
    enum mk_status st;
    char msg[512];
    double ms;
};

static int keep(void *user, int32_t id, const char *piece, size_t len) {
    (void)piece, (void)len;
    struct run *r = user;
    if (r->n < N_GEN) r->ids[r->n++] = id;
    return 0;
}

/* Prompt, then N_GEN greedy tokens with a fault (maybe none) on the cpu backend. */
static void run_session(const struct mk_lm *lm, uint32_t threads, enum mk_fault_kind kind, uint32_t step,
                        struct run *r) {
    memset(r, 0, sizeof *r);
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_CPU;
    sp.n_threads = threads;
    sp.sampling.temperature = 0.0f;
    sp.watchdog_ms = 300;
    sp.fault.kind = kind;
    sp.fault.step = step;
    struct mk_session *s = NULL;
    struct mk_error err;
    r->st = mk_session_create(lm, &sp, &s, &err);
    if (r->st != MK_OK) {
        snprintf(r->msg, sizeof r->msg, "create: %s", err.msg);
        return;
    }
    double t0 = now_ms();
    r->st = mk_session_feed_text(s, "Once upon a time");
    if (r->st == MK_OK) r->st = mk_session_generate(s, N_GEN, keep, r, NULL, NULL);
    r->ms = now_ms() - t0;
    if (r->st != MK_OK) {
        snprintf(r->msg, sizeof r->msg, "%s", mk_session_last_error(s));
        /* The session stays failed: the next call is refused at once, with the same cause. */
        double t1 = now_ms();
        enum mk_status again = mk_session_generate(s, 4, NULL, NULL, NULL, NULL);
        if (again == MK_ERR_INVALID_ARG) again = mk_session_feed_text(s, "again");
        MK_CHECK_MSG(again == r->st, "after the fault: status %d, want %d (%s)", again, r->st,
                     mk_session_last_error(s));
        MK_CHECK_MSG(now_ms() - t1 < 100, "a refused call took %.0f ms", now_ms() - t1);
        MK_CHECK_MSG(strstr(mk_session_last_error(s), "refused") != NULL, "second error: %s", mk_session_last_error(s));
    }
    mk_session_free(s);
}

static void test_faults(const struct mk_lm *lm) {
    const int threads0 = count_threads();
    MK_CHECK(threads0 == 1);
    struct run base;
    run_session(lm, 1, MK_FAULT_NONE, 0, &base);
    MK_CHECK_MSG(base.st == MK_OK && base.n == N_GEN, "baseline: %s", base.msg);
    const enum mk_fault_kind kinds[4] = { MK_FAULT_ERROR, MK_FAULT_TRAP, MK_FAULT_HANG, MK_FAULT_BAD_ADDRESS };
    const char *names[4] = { "error", "trap", "hang", "bad address" };
    /* Step 0 (the first prompt token), one in the prompt, one in the generation. */
    const uint32_t steps[3] = { 0, 3, 11 };
    int32_t prompt[64];
    const int64_t n_prompt = mk_lm_tokenize_prompt(lm, "Once upon a time", prompt, 64);
    MK_CHECK(n_prompt > 3 && n_prompt < 11);
    for (uint32_t threads = 1; threads <= 3; threads++) {
        for (int k = 0; k < 4; k++) {
            for (int si = 0; si < 3; si++) {
                struct run r;
                run_session(lm, threads, kinds[k], steps[si], &r);
                if (threads == 2 && si == 2) printf("%s: %s (%.0f ms)\n", names[k], r.msg, r.ms);
                char want[32];
                snprintf(want, sizeof want, "step %u ", steps[si]);
                const enum mk_status want_st = kinds[k] == MK_FAULT_HANG ? MK_ERR_TIMEOUT : MK_ERR_INTERNAL;
                MK_CHECK_MSG(r.st == want_st, "%s at step %u, %u threads: status %d, want %d (%s)", names[k], steps[si],
                             threads, r.st, want_st, r.msg);
                MK_CHECK_MSG(strstr(r.msg, want) != NULL, "%s at step %u, %u threads: the error does not name it: %s",
                             names[k], steps[si], threads, r.msg);
                MK_CHECK_MSG(kinds[k] != MK_FAULT_HANG || strstr(r.msg, "watchdog"), "hang: %s", r.msg);
                MK_CHECK_MSG(kinds[k] != MK_FAULT_TRAP || strstr(r.msg, "trap"), "trap: %s", r.msg);
                /* The prompt tokens and those generated before the fault went through. */
                uint32_t before = steps[si] >= n_prompt ? steps[si] - (uint32_t)n_prompt + 1 : 0;
                MK_CHECK_MSG(r.n == before && memcmp(r.ids, base.ids, r.n * sizeof(int32_t)) == 0,
                             "%s at step %u: %u tokens before the fault, want %u matching the baseline", names[k],
                             steps[si], r.n, before);
                /* The watchdog (300 ms) ends a hang; nothing else waits for it. */
                double limit = kinds[k] == MK_FAULT_HANG ? 5000 : 2000;
                MK_CHECK_MSG(r.ms < limit, "%s at step %u: took %.0f ms", names[k], steps[si], r.ms);
                MK_CHECK_MSG(kinds[k] != MK_FAULT_HANG || r.ms >= 250, "hang detected after %.0f ms", r.ms);
                int threads1 = count_threads();
                MK_CHECK_MSG(threads1 == threads0, "%s, %u threads: %d threads left, %d before", names[k], threads,
                             threads1, threads0);
                struct run next;
                run_session(lm, threads, MK_FAULT_NONE, 0, &next);
                MK_CHECK_MSG(next.st == MK_OK && next.n == N_GEN && !memcmp(next.ids, base.ids, sizeof base.ids),
                             "the session after %s at step %u (%u threads) differs from the baseline: %s", names[k],
                             steps[si], threads, next.msg);
            }
        }
    }
    /* A fault beyond the run never fires. */
    struct run late;
    run_session(lm, 2, MK_FAULT_ERROR, 1000, &late);
    MK_CHECK_MSG(late.st == MK_OK && !memcmp(late.ids, base.ids, sizeof base.ids), "late fault: %s", late.msg);
    /* An unknown kind is refused. */
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_CPU;
    sp.fault.kind = (enum mk_fault_kind)9;
    struct mk_session *s = NULL;
    struct mk_error err;
    MK_CHECK(mk_session_create(lm, &sp, &s, &err) == MK_ERR_INVALID_ARG && !s);
    MK_CHECK_MSG(strstr(err.msg, "fault.kind = 9"), "%s", err.msg);
}

int main(void) {
    const char *path = mk_test_stories_path();
    if (!path) return mk_test_finish("fault_test");
    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        mk_test_fail("FAIL: load: %s", err.msg);
        return mk_test_finish("fault_test");
    }
    test_faults(lm);
    mk_lm_free(lm);
    return mk_test_finish("fault_test");
}
