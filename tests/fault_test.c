/* Faults in the middle: injected cpu executor failures (error, trap, hang) end the session with an error naming the step, leave no thread behind, and the next session on the same model is correct. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/gguf.h"
#include "runtime/cuda_backend.h"
#include "runtime/mk.h"
#include "runtime/soak.h"
#include "tests/test_util.h"

#define N_GEN 24

/* The watchdog of the sessions that hang on purpose (the others keep the default): long enough
 * that a busy machine does not fire it on a healthy step, also under ThreadSanitizer. */
#if defined(__SANITIZE_THREAD__)
#define HANG_WATCHDOG_MS 3000
#else
#define HANG_WATCHDOG_MS 1000
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
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
    sp.watchdog_ms = kind == MK_FAULT_HANG ? HANG_WATCHDOG_MS : 0;
    sp.fault.kind = kind;
    sp.fault.step = step;
    /* Faults count one-token steps (the GPU backends' only kind): the prompt goes token by token,
     * so step N is position N. */
    sp.ubatch = 1;
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
    struct run base;
    /* Worker threads once before the baseline count: ThreadSanitizer starts a thread of its own
     * with the first one. */
    run_session(lm, 2, MK_FAULT_NONE, 0, &base);
    const int threads0 = mk_soak_count_threads();
    MK_CHECK(threads0 >= 1);
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
                /* The watchdog ends a hang; nothing else waits for it. */
                double limit = kinds[k] == MK_FAULT_HANG ? HANG_WATCHDOG_MS + 4000 : 4000;
                MK_CHECK_MSG(r.ms < limit, "%s at step %u: took %.0f ms", names[k], steps[si], r.ms);
                MK_CHECK_MSG(kinds[k] != MK_FAULT_HANG || r.ms >= HANG_WATCHDOG_MS - 50, "hang detected after %.0f ms",
                             r.ms);
                int threads1 = mk_soak_count_threads();
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

/* The GPU memory check session creation runs before allocating, with made-up device figures. */
static void test_gpu_memory_check(void) {
    const uint64_t gb = 1000000000ull;
    struct mk_error err;
    MK_CHECK(mk_cuda_check_memory(2 * gb, gb / 2, gb / 10, 80 * gb, 80 * gb, &err) == MK_OK);
    /* An 8B BF16 model on a GPU with 12 GB free: refused, with every size named. */
    memset(&err, 0, sizeof err);
    MK_CHECK(mk_cuda_check_memory(16060000000ull, 1073741824ull, 200000000ull, 12 * gb, 80 * gb, &err) == MK_ERR_NOMEM);
    MK_CHECK(err.status == MK_ERR_NOMEM);
    printf("refused: %s\n", err.msg);
    const char *sizes[] = { "weights 16.06 GB", "KV cache 1.07 GB", "buffers 0.20 GB", "12.00 GB free of 80.00 GB" };
    for (int i = 0; i < 4; i++) MK_CHECK_MSG(strstr(err.msg, sizes[i]) != NULL, "no '%s' in: %s", sizes[i], err.msg);
    /* The reserve counts: exactly the buffers free is not enough, the reserve more is. */
    MK_CHECK(mk_cuda_check_memory(gb, 0, 0, gb, 80 * gb, &err) == MK_ERR_NOMEM);
    MK_CHECK(mk_cuda_check_memory(gb, 0, 0, gb + (256ull << 20), 80 * gb, &err) == MK_OK);
    /* Sizes that would overflow a 32-bit sum still compare right. */
    MK_CHECK(mk_cuda_check_memory(5 * gb, 0, 0, 4 * gb, 8 * gb, &err) == MK_ERR_NOMEM);
}

/* What the read hook does to the file after its first chunk. */
struct file_trick {
    const char *path;
    int what; /* 0 truncate, 1 rewrite (same size, new mtime), 2 cancel */
    int cancel;
    int calls;
};

static void on_chunk(void *user, uint64_t done, uint64_t size) {
    struct file_trick *t = user;
    if (t->calls++ != 0) return;
    if (t->what == 0) MK_CHECK(truncate(t->path, (off_t)(size / 3)) == 0);
    if (t->what == 1) {
        struct timespec ts[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
        MK_CHECK(utimensat(AT_FDCWD, t->path, ts, 0) == 0);
    }
    if (t->what == 2) __atomic_store_n(&t->cancel, 1, __ATOMIC_RELAXED);
}

static int copy_file(const char *from, const char *to) {
    size_t n = 0;
    void *data = mk_test_read_file(from, &n);
    FILE *f = data ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(data, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    free(data);
    return ok ? 0 : -1;
}

/* A file truncated or rewritten while it is read, a cancelled read, and a file truncated after
 * the load (which a memory map would turn into SIGBUS in the next step). */
static void test_file_changes(const char *stories) {
    char dir[4200], path[4300];
    MK_CHECK(mk_test_make_tmp_dir(dir, sizeof dir, "fault_test_") != NULL);
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    const int fds0 = mk_soak_count_fds();
    const enum mk_status want[3] = { MK_ERR_IO, MK_ERR_IO, MK_ERR_CANCELLED };
    const char *says[3] = { "truncated while mk read it", "changed while mk read it", "cancelled after 65536 of" };
    for (int what = 0; what < 3; what++) {
        MK_CHECK(copy_file(stories, path) == 0);
        struct file_trick t = { path, what, 0, 0 };
        struct mk_gguf_open_params gp = { &t.cancel, 65536, on_chunk, &t };
        struct mk_gguf *g = NULL;
        struct mk_error err;
        mk_error_clear(&err);
        enum mk_status st = mk_gguf_open_ex(path, &gp, &g, &err);
        printf("file trick %d: %s\n", what, err.msg);
        MK_CHECK_MSG(st == want[what] && !g, "trick %d: status %d", what, st);
        MK_CHECK_MSG(strstr(err.msg, says[what]) != NULL, "trick %d: %s", what, err.msg);
        MK_CHECK(what == 2 ? t.calls == 1 : t.calls >= 1);
        mk_gguf_close(g);
    }
    /* A file cut short before the open is a format error, never a read past its end. */
    MK_CHECK(copy_file(stories, path) == 0);
    MK_CHECK(truncate(path, 600000) == 0);
    struct mk_lm *lm = NULL;
    struct mk_error err;
    MK_CHECK(mk_lm_load(path, &lm, &err) != MK_OK && !lm);
    /* Loaded, then truncated to nothing: the session still decodes the golden text. */
    MK_CHECK(copy_file(stories, path) == 0);
    MK_CHECK(mk_lm_load(path, &lm, &err) == MK_OK);
    MK_CHECK(truncate(path, 0) == 0);
    if (lm) {
        struct mk_session_params sp = mk_session_default_params();
        sp.backend = MK_BACKEND_CPU;
        sp.sampling.temperature = 0.0f;
        struct mk_session *s = NULL;
        struct run r;
        memset(&r, 0, sizeof r);
        MK_CHECK(mk_session_create(lm, &sp, &s, &err) == MK_OK);
        if (s) {
            MK_CHECK(mk_session_feed_text(s, "") == MK_OK);
            MK_CHECK(mk_session_generate(s, N_GEN, keep, &r, NULL, NULL) == MK_OK);
            MK_CHECK(r.n == N_GEN && memcmp(r.ids, mk_test_golden_ids, sizeof r.ids) == 0);
        }
        mk_session_free(s);
        mk_lm_free(lm);
    }
    /* A cancelled load through the public API. */
    MK_CHECK(copy_file(stories, path) == 0);
    int cancel = 1;
    struct mk_lm_load_params lp = { &cancel };
    MK_CHECK(mk_lm_load_ex(path, &lp, &lm, &err) == MK_ERR_CANCELLED && !lm);
    MK_CHECK_MSG(strstr(err.msg, "cancelled after 0 of"), "%s", err.msg);
    MK_CHECK_MSG(mk_soak_count_fds() == fds0, "open files %d -> %d", fds0, mk_soak_count_fds());
    mk_test_remove_tree(dir);
}

int main(void) {
    test_gpu_memory_check();
    const char *path = mk_test_stories_path();
    if (!path) return mk_test_finish("fault_test");
    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        mk_test_fail("FAIL: load: %s", err.msg);
        return mk_test_finish("fault_test");
    }
    test_faults(lm);
    test_file_changes(path);
    mk_lm_free(lm);
    return mk_test_finish("fault_test");
}
