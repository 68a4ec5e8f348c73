/* Two sessions on one model from two threads generate the tokens each generates alone (cpu backend, greedy and seeded sampling); run under ThreadSanitizer too. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/mk.h"
#include "tests/test_util.h"

#define N_TOK 80

struct job {
    const struct mk_lm *lm;
    float temp;
    uint64_t seed;
    uint32_t threads;
    const char *prompt;
    int32_t ids[N_TOK];
    uint32_t n;
    enum mk_status st;
    char msg[512];
};

static int keep(void *user, int32_t id, const char *piece, size_t len) {
    (void)piece, (void)len;
    struct job *j = user;
    if (j->n < N_TOK) j->ids[j->n++] = id;
    return 0;
}

static void *run_job(void *arg) {
    struct job *j = arg;
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_CPU;
    sp.n_threads = j->threads;
    sp.sampling.temperature = j->temp;
    sp.sampling.seed = j->seed;
    struct mk_session *s = NULL;
    struct mk_error err;
    j->n = 0;
    j->st = mk_session_create(j->lm, &sp, &s, &err);
    if (j->st != MK_OK) {
        snprintf(j->msg, sizeof j->msg, "create: %s", err.msg);
        return NULL;
    }
    j->st = mk_session_feed_text(s, j->prompt);
    if (j->st == MK_OK) j->st = mk_session_generate(s, N_TOK, keep, j, NULL, NULL);
    if (j->st != MK_OK) snprintf(j->msg, sizeof j->msg, "%s", mk_session_last_error(s));
    mk_session_free(s);
    return NULL;
}

static void check_same(const struct job *alone, const struct job *together, const char *what) {
    MK_CHECK_MSG(together->st == MK_OK, "%s: %s", what, together->msg);
    MK_CHECK_MSG(alone->n == together->n && memcmp(alone->ids, together->ids, alone->n * sizeof(int32_t)) == 0,
                 "%s: %u tokens together differ from the %u alone", what, together->n, alone->n);
}

int main(void) {
    const char *models = mk_test_models_dir("stories260K-f32.gguf");
    if (!models) {
        printf("SKIP: no models folder with stories260K-f32.gguf\n");
        return mk_test_finish("concurrent_test");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", models);
    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        mk_test_fail("FAIL: load: %s", err.msg);
        return mk_test_finish("concurrent_test");
    }
    /* Greedy and seeded sampling; one worker (the caller) and two (real worker threads). */
    const float temps[2] = { 0.0f, 0.9f };
    for (int t = 0; t < 2; t++) {
        for (uint32_t threads = 1; threads <= 2; threads++) {
            struct job a = { lm, temps[t], 7, threads, "Once upon a time", { 0 }, 0, MK_OK, "" };
            struct job b = { lm, temps[t], 99, threads, "The little dog", { 0 }, 0, MK_OK, "" };
            struct job a_alone = a, b_alone = b;
            run_job(&a_alone);
            run_job(&b_alone);
            MK_CHECK_MSG(a_alone.st == MK_OK && a_alone.n == N_TOK, "alone: %s", a_alone.msg);
            MK_CHECK_MSG(b_alone.st == MK_OK && b_alone.n == N_TOK, "alone: %s", b_alone.msg);
            pthread_t ta, tb;
            MK_CHECK(pthread_create(&ta, NULL, run_job, &a) == 0);
            MK_CHECK(pthread_create(&tb, NULL, run_job, &b) == 0);
            pthread_join(ta, NULL);
            pthread_join(tb, NULL);
            char what[64];
            snprintf(what, sizeof what, "temp %.1f, %u threads, session a", temps[t], threads);
            check_same(&a_alone, &a, what);
            what[strlen(what) - 1] = 'b';
            check_same(&b_alone, &b, what);
        }
    }
    mk_lm_free(lm);
    return mk_test_finish("concurrent_test");
}
