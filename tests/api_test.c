/* Tests the public C API end to end on stories260K and generated chat models: golden text, streaming, stops, chat, errors. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gen.h"
#include "core/gguf.h"
#include "runtime/mk.h"
#include "tests/test_util.h"

/* From ../shared/models/README.md: the text of stories260K's golden greedy ids. */
static const char k_golden_text[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a "
    "big, red ball. She wanted to play with it, but it was too high";

static const char *g_models; /* the models folder */
static char g_stories[4200]; /* its stories260K-f32.gguf */

/* Collects what the callback saw; stops after stop_after tokens when that is > 0. */
struct collect {
    int32_t ids[1024];
    int n;
    char text[8192];
    size_t len;
    int stop_after;
};

static int collect_token(void *user, int32_t id, const char *piece, size_t len) {
    struct collect *c = user;
    if (c->n < 1024) c->ids[c->n] = id;
    c->n++;
    if (c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, piece, len);
        c->len += len;
        c->text[c->len] = '\0';
    }
    return c->stop_after > 0 && c->n >= c->stop_after;
}

static struct mk_session *open_session_loop(const struct mk_lm *lm, enum mk_backend_kind kind, uint32_t n_ctx,
                                            float temp, uint64_t seed, int host_loop) {
    struct mk_session_params sp = mk_session_default_params();
    sp.host_loop = host_loop;
    sp.backend = kind;
    sp.n_ctx = n_ctx;
    sp.sampling.temperature = temp;
    sp.sampling.seed = seed;
    sp.n_threads = 2;
    struct mk_session *s = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    if (mk_session_create(lm, &sp, &s, &err) != MK_OK) {
        mk_test_fail("FAIL: mk_session_create(%s): %s", mk_backend_kind_name(kind), err.msg);
        return NULL;
    }
    return s;
}

static struct mk_session *open_session(const struct mk_lm *lm, enum mk_backend_kind kind, uint32_t n_ctx, float temp,
                                       uint64_t seed) {
    return open_session_loop(lm, kind, n_ctx, temp, seed, 0);
}

static void test_defaults(void) {
    struct mk_session_params p = mk_session_default_params();
    MK_CHECK(p.sampling.top_k == 40);
    MK_CHECK(fabsf(p.sampling.top_p - 0.95f) < 1e-7f);
    MK_CHECK(fabsf(p.sampling.min_p - 0.05f) < 1e-7f);
    MK_CHECK(fabsf(p.sampling.temperature - 0.8f) < 1e-7f);
    MK_CHECK(p.sampling.seed == MK_SEED_RANDOM);
    MK_CHECK(p.backend == MK_BACKEND_AUTO);
}

static void test_tokenize(const struct mk_lm *lm) {
    struct mk_lm_info info = mk_lm_get_info(lm);
    MK_CHECK(info.n_vocab == 512 && info.n_layer == 5 && info.bos == 1 && info.eos == 2 && info.add_bos &&
             info.can_decode);
    MK_CHECK(!strcmp(info.tokenizer, "llama"));
    int32_t ids[16];
    int64_t n = mk_lm_tokenize_prompt(lm, "Once upon a time", ids, 16);
    const int32_t want[5] = { 1, 403, 407, 261, 378 };
    MK_CHECK(n == 5 && !memcmp(ids, want, sizeof want));
    n = mk_lm_tokenize_prompt(lm, "", ids, 16);
    MK_CHECK(n == 1 && ids[0] == 1);
    /* Too little room: the count needed comes back. */
    MK_CHECK(mk_lm_tokenize_prompt(lm, "Once upon a time", ids, 2) == 5);
    char text[64];
    size_t len = mk_lm_detokenize(lm, want, 5, text, sizeof text - 1);
    text[len] = '\0';
    MK_CHECK(!strcmp(text, "Once upon a time"));
}

/* Another thread cancels the session once generation has reported `after` tokens; the callback
 * holds the generating thread there until the cancel is in, so the stop point is exact. */
struct canceller {
    struct mk_session *s;
    uint32_t after;
    uint32_t seen;      /* tokens the generating thread reported, atomically */
    uint32_t cancelled; /* set by the cancelling thread after mk_session_cancel */
};

static int count_token(void *user, int32_t id, const char *piece, size_t len) {
    (void)id, (void)piece, (void)len;
    struct canceller *c = user;
    if (__atomic_add_fetch(&c->seen, 1, __ATOMIC_RELEASE) == c->after)
        while (!__atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE)) sched_yield();
    return 0;
}

static void *cancel_thread(void *arg) {
    struct canceller *c = arg;
    while (__atomic_load_n(&c->seen, __ATOMIC_ACQUIRE) < c->after) sched_yield();
    mk_session_cancel(c->s);
    __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* mk_session_cancel: before a call, from another thread during generate, and during feed. Each
 * request stops exactly one call, and what was evaluated stays (the golden sequence continues). */
static void test_cancel(const struct mk_lm *lm) {
    struct mk_session *s = open_session(lm, MK_BACKEND_REF, 512, 0.0f, 1);
    if (!s) return;
    enum mk_stop_reason why = MK_STOP_NONE;
    uint32_t n = 99;
    MK_CHECK(mk_session_feed_text(s, "") == MK_OK);
    mk_session_cancel(s);
    MK_CHECK(mk_session_generate(s, 10, NULL, NULL, &why, &n) == MK_OK);
    MK_CHECK(why == MK_STOP_CANCELLED && n == 0);
    MK_CHECK(!strcmp(mk_stop_reason_str(why), "cancelled"));
    struct collect c = { .stop_after = 0 };
    MK_CHECK(mk_session_generate(s, 5, collect_token, &c, &why, &n) == MK_OK); /* the request was used up */
    MK_CHECK(why == MK_STOP_LENGTH && n == 5 && !memcmp(c.ids, mk_test_golden_ids, 5 * sizeof(int32_t)));

    /* From another thread, mid-generation: stops right after the token being reported. */
    struct canceller cc = { s, 3, 0, 0 };
    pthread_t th;
    MK_CHECK(pthread_create(&th, NULL, cancel_thread, &cc) == 0);
    MK_CHECK(mk_session_generate(s, 400, count_token, &cc, &why, &n) == MK_OK);
    pthread_join(th, NULL);
    MK_CHECK_MSG(why == MK_STOP_CANCELLED && n == 3, "cross-thread cancel: why %d after %u tokens", why, n);
    printf("api: cancel from another thread stopped generation after %u tokens\n", n);

    /* During feed: MK_ERR_CANCELLED, and the session still works afterwards. */
    MK_CHECK(mk_session_reset(s) == MK_OK);
    int32_t ids[3] = { 1, 403, 407 };
    mk_session_cancel(s);
    MK_CHECK(mk_session_feed(s, ids, 3) == MK_ERR_CANCELLED);
    MK_CHECK(strstr(mk_session_last_error(s), "cancelled") != NULL);
    MK_CHECK(mk_session_n_past(s) == 0);
    MK_CHECK(mk_session_feed(s, ids, 1) == MK_OK);
    MK_CHECK(mk_session_generate(s, 3, collect_token, &c, &why, &n) == MK_OK && why == MK_STOP_LENGTH);
    mk_session_free(s);
}

/* Empty prompt: the README's 60 ids and text, the logits at pos 0, and the timings. */
static void test_golden_from_bos(const struct mk_lm *lm) {
    struct mk_session *s = open_session(lm, MK_BACKEND_REF, 256, 0.0f, 1);
    if (!s) return;
    MK_CHECK(!strcmp(mk_session_backend_name(s), "ref"));
    MK_CHECK(mk_session_feed_text(s, "") == MK_OK);
    MK_CHECK(mk_session_n_past(s) == 1);
    float logits[512];
    MK_CHECK(mk_session_logits(s, logits, 511) == MK_ERR_INVALID_ARG); /* too small */
    MK_CHECK(mk_session_logits(s, logits, 512) == MK_OK);
    double worst = 0.0;
    for (int i = 0; i < 5; i++)
        if (fabs(logits[i] - mk_test_golden_logits[i]) > worst) worst = fabs(logits[i] - mk_test_golden_logits[i]);
    /* The default f16 KV cache rounds v (the whole attention output at pos 0) to 11 bits. */
    printf("api: logits at pos 0 max |error| vs README = %.3g (f16 KV cache)\n", worst);
    MK_CHECK(worst < 2e-3);

    /* An f32 cache is llama2.c's arithmetic: the README's logits to float rounding. */
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_REF;
    sp.n_ctx = 64;
    sp.kv_type = MK_KV_F32;
    struct mk_session *s32 = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    MK_CHECK_MSG(mk_session_create(lm, &sp, &s32, &err) == MK_OK, "f32 KV session: %s", err.msg);
    if (s32) {
        float l32[512];
        MK_CHECK(mk_session_feed_text(s32, "") == MK_OK && mk_session_logits(s32, l32, 512) == MK_OK);
        double w32 = 0.0;
        for (int i = 0; i < 5; i++)
            if (fabs(l32[i] - mk_test_golden_logits[i]) > w32) w32 = fabs(l32[i] - mk_test_golden_logits[i]);
        printf("api: logits at pos 0 max |error| vs README = %.3g (f32 KV cache)\n", w32);
        MK_CHECK(w32 < 1e-4);
        mk_session_free(s32);
    }
    sp.kv_type = (enum mk_kv_type)7;
    s32 = NULL;
    MK_CHECK(mk_session_create(lm, &sp, &s32, &err) == MK_ERR_INVALID_ARG && s32 == NULL);
    MK_CHECK_MSG(strstr(err.msg, "kv_type = 7") != NULL, "bad kv_type message: %s", err.msg);
    sp.kv_type = MK_KV_F32;
    sp.gpu.xb_rows = 200;
    MK_CHECK(mk_session_create(lm, &sp, &s32, &err) == MK_ERR_INVALID_ARG && s32 == NULL);
    MK_CHECK_MSG(strstr(err.msg, "gpu.xb_rows = 200") != NULL, "bad xb_rows message: %s", err.msg);
    sp.gpu.xb_rows = 0;
    sp.gpu.xb_load = 3;
    MK_CHECK(mk_session_create(lm, &sp, &s32, &err) == MK_ERR_INVALID_ARG && s32 == NULL);
    MK_CHECK_MSG(strstr(err.msg, "gpu.xb_load = 3") != NULL, "bad xb_load message: %s", err.msg);
    sp.gpu.xb_load = 0;

    struct collect c = { .stop_after = 0 };
    enum mk_stop_reason why = MK_STOP_NONE;
    uint32_t n = 0;
    MK_CHECK(mk_session_generate(s, 60, collect_token, &c, &why, &n) == MK_OK);
    MK_CHECK(why == MK_STOP_LENGTH && n == 60 && c.n == 60);
    MK_CHECK(!memcmp(c.ids, mk_test_golden_ids, sizeof mk_test_golden_ids));
    MK_CHECK(!strcmp(c.text, k_golden_text));
    int same = !memcmp(c.ids, mk_test_golden_ids, sizeof mk_test_golden_ids) && !strcmp(c.text, k_golden_text);
    printf("api: empty prompt, 60 greedy tokens %s the README ids and text\n", same ? "equal" : "DIFFER from");
    struct mk_timings t = mk_session_timings(s);
    MK_CHECK(t.n_prompt == 1 && t.n_generated == 60 && t.n_eval == 59);
    MK_CHECK(t.load_ms > 0.0 && t.prompt_ms >= 0.0 && t.eval_ms > 0.0);
    MK_CHECK(mk_session_n_past(s) == 60); /* the 60th token is generated but not yet evaluated */

    /* Reset starts over: same text again, timings of the sequence cleared. */
    MK_CHECK(mk_session_reset(s) == MK_OK);
    MK_CHECK(mk_session_n_past(s) == 0 && mk_session_timings(s).n_generated == 0);
    MK_CHECK(mk_session_generate(s, 5, NULL, NULL, &why, &n) == MK_ERR_INVALID_ARG); /* nothing fed */
    MK_CHECK(strstr(mk_session_last_error(s), "feed") != NULL);
    MK_CHECK(mk_session_feed_text(s, NULL) == MK_OK);
    struct collect c2 = { .stop_after = 0 };
    MK_CHECK(mk_session_generate(s, 60, collect_token, &c2, &why, &n) == MK_OK);
    MK_CHECK(c2.n == 60 && !memcmp(c2.ids, mk_test_golden_ids, sizeof mk_test_golden_ids));
    mk_session_free(s);
}

/* The prompt "Once upon a time" continues the golden story; the callback can stop and resume. */
static void test_prompt_and_callback_stop(const struct mk_lm *lm) {
    struct mk_session *s = open_session(lm, MK_BACKEND_REF, 256, 0.0f, 1);
    if (!s) return;
    MK_CHECK(mk_session_feed_text(s, "Once upon a time") == MK_OK);
    MK_CHECK(mk_session_n_past(s) == 5);
    struct collect c = { .stop_after = 7 };
    enum mk_stop_reason why;
    uint32_t n;
    MK_CHECK(mk_session_generate(s, 40, collect_token, &c, &why, &n) == MK_OK);
    MK_CHECK(why == MK_STOP_CALLBACK && n == 7 && c.n == 7);
    c.stop_after = 0;
    MK_CHECK(mk_session_generate(s, 33, collect_token, &c, &why, &n) == MK_OK);
    MK_CHECK(why == MK_STOP_LENGTH && n == 33 && c.n == 40);
    MK_CHECK(!memcmp(c.ids, mk_test_golden_ids + 4, 40 * sizeof(int32_t)));
    char expect[8192];
    snprintf(expect, sizeof expect, "Once upon a time%s", c.text);
    MK_CHECK(!strncmp(expect, k_golden_text, strlen(expect)));
    printf("api: prompt \"Once upon a time\" + 40 greedy tokens: \"%s\"\n", expect);

    /* Feeding text after generation evaluates the pending generated token first. */
    uint32_t past = mk_session_n_past(s);
    MK_CHECK(mk_session_feed_text(s, " The end.") == MK_OK);
    MK_CHECK(mk_session_n_past(s) > past + 1);
    mk_session_free(s);
}

/* A context that fills: generation stops with MK_STOP_CONTEXT_FULL; a too-long prompt fails whole. */
static void test_context_full(const struct mk_lm *lm) {
    struct mk_session *s = open_session(lm, MK_BACKEND_REF, 16, 0.0f, 1);
    if (!s) return;
    MK_CHECK(mk_session_n_ctx(s) == 16);
    MK_CHECK(mk_session_feed_text(s, "") == MK_OK);
    struct collect c = { .stop_after = 0 };
    enum mk_stop_reason why;
    uint32_t n;
    MK_CHECK(mk_session_generate(s, -1, collect_token, &c, &why, &n) == MK_OK);
    MK_CHECK(why == MK_STOP_CONTEXT_FULL && n == 16 && mk_session_n_past(s) == 16);
    MK_CHECK(!memcmp(c.ids, mk_test_golden_ids, 16 * sizeof(int32_t)));
    MK_CHECK(!strcmp(mk_stop_reason_str(why), "context full"));
    /* The last token was never evaluated, so nothing more fits. */
    int32_t one = 5;
    MK_CHECK(mk_session_feed(s, &one, 0) == MK_ERR_CONTEXT_FULL);
    mk_session_free(s);

    s = open_session(lm, MK_BACKEND_REF, 4, 0.0f, 1);
    if (!s) return;
    MK_CHECK(mk_session_feed_text(s, "Once upon a time there was") == MK_ERR_CONTEXT_FULL);
    MK_CHECK(mk_session_error(s)->status == MK_ERR_CONTEXT_FULL);
    MK_CHECK(strstr(mk_session_last_error(s), "n_ctx = 4") != NULL);
    printf("api: prompt too long: %s\n", mk_session_last_error(s));
    MK_CHECK(mk_session_n_past(s) == 0);
    int32_t bad = 512;
    MK_CHECK(mk_session_feed(s, &bad, 1) == MK_ERR_INVALID_ARG);
    mk_session_free(s);
}

/* What one scripted run of a session did: its tokens, stop reasons and positions. */
struct loop_run {
    struct collect c;
    enum mk_stop_reason why[4];
    uint32_t n[4], past[4];
};

static void loop_script(struct mk_session *s, struct loop_run *r) {
    memset(r, 0, sizeof *r);
    MK_CHECK(mk_session_feed_text(s, "Once upon a time") == MK_OK);
    r->c.stop_after = 7; /* the callback stops it */
    MK_CHECK(mk_session_generate(s, 40, collect_token, &r->c, &r->why[0], &r->n[0]) == MK_OK);
    r->past[0] = mk_session_n_past(s);
    r->c.stop_after = 0; /* the budget stops it */
    MK_CHECK(mk_session_generate(s, 33, collect_token, &r->c, &r->why[1], &r->n[1]) == MK_OK);
    r->past[1] = mk_session_n_past(s);
    MK_CHECK(mk_session_feed_text(s, " The end.") == MK_OK); /* the pending token first */
    r->past[2] = mk_session_n_past(s);
    MK_CHECK(mk_session_generate(s, -1, collect_token, &r->c, &r->why[3], &r->n[3]) == MK_OK); /* the context */
    r->past[3] = mk_session_n_past(s);
}

/* The token loop behind the backend's generate (the cpu executor's, taking the megakernel's path
 * through the session) against one step per token, greedy and sampled: the same tokens, stop
 * reasons and positions, whichever way generation ends. */
static void test_device_loop(const struct mk_lm *lm) {
    for (int k = 0; k < 2; k++) {
        const float temp = k ? 1.0f : 0.0f;
        struct mk_session *a = open_session_loop(lm, MK_BACKEND_CPU, 128, temp, 1234, 0);
        struct mk_session *b = open_session_loop(lm, MK_BACKEND_CPU, 128, temp, 1234, 1);
        static struct loop_run ra, rb;
        if (a && b) {
            loop_script(a, &ra);
            loop_script(b, &rb);
            MK_CHECK(ra.c.n == rb.c.n && !memcmp(ra.c.ids, rb.c.ids, sizeof(int32_t) * (size_t)ra.c.n));
            MK_CHECK(!memcmp(ra.why, rb.why, sizeof ra.why) && !memcmp(ra.n, rb.n, sizeof ra.n));
            MK_CHECK(!memcmp(ra.past, rb.past, sizeof ra.past));
            MK_CHECK(ra.why[0] == MK_STOP_CALLBACK && ra.n[0] == 7 && ra.why[1] == MK_STOP_LENGTH && ra.n[1] == 33);
            MK_CHECK(ra.why[3] == MK_STOP_CONTEXT_FULL && ra.past[3] == 128);
            if (!k) MK_CHECK(!memcmp(ra.c.ids, mk_test_golden_ids + 4, 40 * sizeof(int32_t)));
            printf("api: %s, generate's loop and the host's step loop: %d tokens alike, ends %s, %s, %s\n",
                   k ? "sampled" : "greedy", ra.c.n, mk_stop_reason_str(ra.why[0]), mk_stop_reason_str(ra.why[1]),
                   mk_stop_reason_str(ra.why[3]));
            /* Logits after generate are those of the last evaluated position. */
            static float la[512], lb[512];
            MK_CHECK(mk_session_logits(a, la, 512) == MK_OK && mk_session_logits(b, lb, 512) == MK_OK);
            MK_CHECK(!memcmp(la, lb, sizeof la));
        }
        mk_session_free(a);
        mk_session_free(b);
    }
}

/* Sampling: a fixed seed reproduces the run in another session; another seed does not. */
static void test_sampling_sessions(const struct mk_lm *lm) {
    struct collect a = { .stop_after = 0 }, b = { .stop_after = 0 }, d = { .stop_after = 0 };
    struct mk_session *sa = open_session(lm, MK_BACKEND_REF, 256, 1.0f, 1234);
    struct mk_session *sb = open_session(lm, MK_BACKEND_REF, 256, 1.0f, 1234);
    struct mk_session *sd = open_session(lm, MK_BACKEND_REF, 256, 1.0f, 99);
    if (sa && sb && sd) {
        MK_CHECK(mk_session_seed(sa) == 1234);
        MK_CHECK(mk_session_feed_text(sa, "Once upon a time") == MK_OK);
        MK_CHECK(mk_session_feed_text(sb, "Once upon a time") == MK_OK);
        MK_CHECK(mk_session_feed_text(sd, "Once upon a time") == MK_OK);
        MK_CHECK(mk_session_generate(sa, 80, collect_token, &a, NULL, NULL) == MK_OK);
        MK_CHECK(mk_session_generate(sb, 80, collect_token, &b, NULL, NULL) == MK_OK);
        MK_CHECK(mk_session_generate(sd, 80, collect_token, &d, NULL, NULL) == MK_OK);
        MK_CHECK(a.n == b.n && !memcmp(a.ids, b.ids, sizeof(int32_t) * (size_t)a.n));
        MK_CHECK(memcmp(a.ids, d.ids, sizeof(int32_t) * 80) != 0);
        printf("api: sampled (T=1, seed 1234): \"Once upon a time%s\"\n", a.text);
    }
    mk_session_free(sa);
    mk_session_free(sb);
    mk_session_free(sd);

    /* MK_SEED_RANDOM picks a seed per session. */
    struct mk_session *r1 = open_session(lm, MK_BACKEND_REF, 8, 0.8f, MK_SEED_RANDOM);
    struct mk_session *r2 = open_session(lm, MK_BACKEND_REF, 8, 0.8f, MK_SEED_RANDOM);
    if (r1 && r2) MK_CHECK(mk_session_seed(r1) != mk_session_seed(r2) && mk_session_seed(r1) != MK_SEED_RANDOM);
    mk_session_free(r1);
    mk_session_free(r2);
}

/* Two sessions on one model, stepped alternately and on two threads at once, give the golden greedy output. */
struct thread_job {
    const struct mk_lm *lm;
    struct collect c;
    enum mk_status st;
};

static void *thread_generate(void *arg) {
    struct thread_job *j = arg;
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_REF;
    sp.n_ctx = 128;
    sp.sampling.temperature = 0.0f;
    struct mk_session *s = NULL;
    j->st = mk_session_create(j->lm, &sp, &s, NULL);
    if (j->st != MK_OK) return NULL;
    j->st = mk_session_feed_text(s, "");
    if (j->st == MK_OK) j->st = mk_session_generate(s, 60, collect_token, &j->c, NULL, NULL);
    mk_session_free(s);
    return NULL;
}

static void test_two_sessions(const struct mk_lm *lm) {
    struct mk_session *s1 = open_session(lm, MK_BACKEND_REF, 128, 0.0f, 1);
    struct mk_session *s2 = open_session(lm, MK_BACKEND_REF, 128, 0.0f, 1);
    struct collect c1 = { .stop_after = 0 }, c2 = { .stop_after = 0 };
    if (s1 && s2) {
        MK_CHECK(mk_session_feed_text(s1, "") == MK_OK);
        MK_CHECK(mk_session_feed_text(s2, "") == MK_OK);
        for (int i = 0; i < 60; i++) {
            MK_CHECK(mk_session_generate(s1, 1, collect_token, &c1, NULL, NULL) == MK_OK);
            MK_CHECK(mk_session_generate(s2, 1, collect_token, &c2, NULL, NULL) == MK_OK);
        }
        MK_CHECK(c1.n == 60 && c2.n == 60);
        MK_CHECK(!memcmp(c1.ids, mk_test_golden_ids, sizeof mk_test_golden_ids) &&
                 !memcmp(c2.ids, mk_test_golden_ids, sizeof mk_test_golden_ids));
        MK_CHECK(!strcmp(c1.text, c2.text));
    }
    mk_session_free(s1);
    mk_session_free(s2);

    struct thread_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        jobs[i].lm = lm;
        MK_CHECK(pthread_create(&th[i], NULL, thread_generate, &jobs[i]) == 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        MK_CHECK(jobs[i].st == MK_OK && jobs[i].c.n == 60);
        MK_CHECK(!memcmp(jobs[i].c.ids, mk_test_golden_ids, sizeof mk_test_golden_ids));
    }
    printf("api: two sessions (interleaved, and on two threads) gave the golden greedy output\n");
}

/* AUTO resolves to a real backend whose greedy output agrees with the reference. */
static void test_auto_backend(const struct mk_lm *lm) {
    struct mk_session *s = open_session(lm, MK_BACKEND_AUTO, 128, 0.0f, 1);
    if (!s) return;
    MK_CHECK(mk_session_backend_kind(s) != MK_BACKEND_AUTO && mk_session_backend_kind(s) != MK_BACKEND_REF);
    struct collect c = { .stop_after = 0 };
    MK_CHECK(mk_session_feed_text(s, "") == MK_OK);
    MK_CHECK(mk_session_generate(s, 40, collect_token, &c, NULL, NULL) == MK_OK);
    int same = c.n == 40 && !memcmp(c.ids, mk_test_golden_ids, 40 * sizeof(int32_t));
    printf("api: backend auto chose %s; its 40 greedy ids %s the reference\n", mk_session_backend_name(s),
           same ? "equal" : "DIFFER from");
    MK_CHECK(same);
    mk_session_free(s);
}

/* Copies src to dst with tokenizer.ggml.eos_token_id replaced, so that a story's end (the model
 * writes BOS there) becomes end-of-sequence. */
static int write_with_eos(const char *src, const char *dst, uint32_t eos) {
    struct mk_gguf *g = NULL;
    struct mk_gguf_writer *w = NULL;
    struct mk_error err;
    if (mk_gguf_open(src, &g, &err) != MK_OK || mk_gguf_writer_create(dst, &w, &err) != MK_OK) goto fail;
    for (uint64_t i = 0; i < mk_gguf_kv_count(g); i++) {
        const struct mk_gguf_kv *kv = mk_gguf_kv_at(g, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.data);
        enum mk_status st = MK_ERR_UNSUPPORTED;
        if (!strcmp(key, "tokenizer.ggml.eos_token_id")) {
            st = mk_gguf_writer_kv_u32(w, key, eos);
        } else if (kv->type <= MK_GGUF_UINT32 && kv->type % 2 == 0) {
            st = mk_gguf_writer_kv_u32(w, key, (uint32_t)kv->v.u64);
        } else if (kv->type <= MK_GGUF_INT32) {
            st = mk_gguf_writer_kv_i32(w, key, (int32_t)kv->v.i64);
        } else if (kv->type == MK_GGUF_FLOAT32 || kv->type == MK_GGUF_FLOAT64) {
            st = mk_gguf_writer_kv_f32(w, key, (float)kv->v.f64);
        } else if (kv->type == MK_GGUF_BOOL) {
            st = mk_gguf_writer_kv_bool(w, key, kv->v.u64 != 0);
        } else if (kv->type == MK_GGUF_STRING) {
            char *v = strndup(kv->v.str.data, kv->v.str.len);
            st = mk_gguf_writer_kv_str(w, key, v);
            free(v);
        } else if (kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_STRING) {
            char **v = calloc(kv->v.arr.n, sizeof *v);
            for (uint64_t k = 0; k < kv->v.arr.n; k++) v[k] = strndup(kv->v.arr.strs[k].data, kv->v.arr.strs[k].len);
            st = mk_gguf_writer_kv_arr_str(w, key, (const char *const *)v, kv->v.arr.n);
            for (uint64_t k = 0; k < kv->v.arr.n; k++) free(v[k]);
            free(v);
        } else if (kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_FLOAT32) {
            st = mk_gguf_writer_kv_arr_f32(w, key, kv->v.arr.data, kv->v.arr.n);
        } else if (kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_INT32) {
            st = mk_gguf_writer_kv_arr_i32(w, key, kv->v.arr.data, kv->v.arr.n);
        }
        if (st != MK_OK) {
            fprintf(stderr, "write_with_eos: cannot copy key %s\n", key);
            goto fail;
        }
    }
    for (uint64_t i = 0; i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        if (mk_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne) != MK_OK) goto fail;
    }
    for (uint64_t i = 0; i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        if (mk_gguf_writer_write_data(w, t->data, t->n_bytes) != MK_OK) goto fail;
    }
    enum mk_status st = mk_gguf_writer_finish(w, &err);
    w = NULL;
    mk_gguf_close(g);
    return st == MK_OK ? 0 : -1;
fail:
    if (w) mk_gguf_writer_abort(w);
    mk_gguf_close(g);
    return -1;
}

static void test_eos(void) {
    char dir[4200];
    if (!mk_test_make_tmp_dir(dir, sizeof dir, "mk-api-test-")) {
        mk_test_fail("FAIL: mkdtemp");
        return;
    }
    char path[4300];
    snprintf(path, sizeof path, "%s/eos-is-bos.gguf", dir);
    if (write_with_eos(g_stories, path, 1)) {
        mk_test_fail("FAIL: writing %s", path);
        rmdir(dir);
        return;
    }
    struct mk_lm *lm = NULL;
    struct mk_error err;
    MK_CHECK(mk_lm_load(path, &lm, &err) == MK_OK);
    if (lm) {
        MK_CHECK(mk_lm_get_info(lm).eos == 1);
        /* The reference steps token by token; the cpu backend's generate checks the stop set. */
        for (int k = 0; k < 2; k++) {
            struct mk_session *s = open_session(lm, k ? MK_BACKEND_CPU : MK_BACKEND_REF, 512, 0.0f, 1);
            if (s) {
                struct collect c = { .stop_after = 0 };
                enum mk_stop_reason why;
                uint32_t n;
                MK_CHECK(mk_session_feed_text(s, "") == MK_OK);
                MK_CHECK(mk_session_generate(s, -1, collect_token, &c, &why, &n) == MK_OK);
                printf("api: with eos = 1 the first story ends after %u tokens (%s)\n", n, mk_stop_reason_str(why));
                MK_CHECK(why == MK_STOP_EOS && n > 60 && n < 500);
                int has_eos = 0;
                for (int i = 0; i < c.n && i < 1024; i++) has_eos |= c.ids[i] == 1;
                MK_CHECK(!has_eos);
                MK_CHECK(!memcmp(c.ids, mk_test_golden_ids, sizeof mk_test_golden_ids));
                mk_session_free(s);
            }
        }
        mk_lm_free(lm);
    }
    unlink(path);
    rmdir(dir);
}

/* ---- Chat: generated tiny models whose vocab ends with the ChatML and Llama 3 markers ---- */

/* The Jinja text ChatML models carry (what llama.cpp's detection looks at: <|im_start|>). */
static const char k_chatml_jinja[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/* Writes the tiny preset with a chat template (and an EOT id when eot >= 0) to dir/name. */
static int write_chat_model(const char *dir, const char *name, const char *tmpl, int32_t eot, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    struct mk_gen_params gp = mk_gen_default_params();
    gp.chat_template = tmpl;
    gp.eot_id = eot;
    struct mk_error err;
    if (mk_gen_write(path, &gp, &err) != MK_OK) {
        mk_test_fail("FAIL: writing %s: %s", path, err.msg);
        return -1;
    }
    return 0;
}

static int32_t token_id(const struct mk_lm *lm, const char *text) {
    char buf[64];
    for (int32_t id = 0; id < (int32_t)mk_lm_get_info(lm).n_vocab; id++) {
        int64_t n = mk_lm_token_text(lm, id, buf, sizeof buf);
        if (n == (int64_t)strlen(text) && !memcmp(buf, text, (size_t)n)) return id;
    }
    return -1;
}

/* The rendered conversation tokenized as a chat prompt; count, ids in out (cap 512). */
static int64_t chat_ids(const struct mk_lm *lm, const struct mk_chat_msg *msgs, size_t n, int32_t *out) {
    char text[4096];
    struct mk_error err;
    int64_t len = mk_lm_chat_apply(lm, NULL, msgs, n, true, text, sizeof text, &err);
    MK_CHECK_MSG(len > 0 && (size_t)len < sizeof text, "chat_apply: %s", err.msg);
    if (len <= 0 || (size_t)len >= sizeof text) return -1;
    int64_t k = mk_lm_tokenize(lm, text, (size_t)len, true, true, out, 512);
    MK_CHECK(k > 0 && k <= 512);
    return k;
}

static void test_chat_render(const struct mk_lm *lm, const struct mk_lm *plain) {
    MK_CHECK(mk_lm_chat_template(lm) && !strcmp(mk_lm_chat_template(lm), "chatml"));
    MK_CHECK(mk_lm_chat_template(plain) == NULL);
    const struct mk_chat_msg msgs[] = { { "system", "Be brief." }, { "user", "Hi" } };
    const char want[] = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n";
    char out[256], small[8];
    struct mk_error err;
    MK_CHECK(mk_lm_chat_apply(lm, NULL, msgs, 2, true, out, sizeof out, &err) == (int64_t)strlen(want));
    MK_CHECK(!strcmp(out, want));
    /* snprintf's convention: the length needed, a truncated NUL-terminated prefix. */
    MK_CHECK(mk_lm_chat_apply(lm, NULL, msgs, 2, true, small, sizeof small, &err) == (int64_t)strlen(want));
    MK_CHECK(!strcmp(small, "<|im_st"));
    /* Without the generation prompt the text stops after the last message; a name overrides the file. */
    MK_CHECK(mk_lm_chat_apply(lm, NULL, msgs, 2, false, out, sizeof out, &err) ==
             (int64_t)strlen(want) - (int64_t)strlen("<|im_start|>assistant\n"));
    MK_CHECK(mk_lm_chat_apply(plain, "llama3", msgs + 1, 1, true, out, sizeof out, &err) > 0);
    MK_CHECK(!strcmp(out, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    MK_CHECK(mk_lm_chat_apply(lm, "no-such-format", msgs, 2, true, out, sizeof out, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(err.msg, "'no-such-format'") && strstr(err.msg, "chatml"));
    printf("api: unknown template: %.120s...\n", err.msg);
    MK_CHECK(mk_lm_chat_apply(plain, NULL, msgs, 2, true, out, sizeof out, &err) == MK_ERR_UNSUPPORTED);
    MK_CHECK(strstr(err.msg, "no tokenizer.chat_template") != NULL);
    printf("api: no template: %s\n", err.msg);
    const struct mk_chat_msg bad[] = { { "user", NULL } };
    MK_CHECK(mk_lm_chat_apply(lm, NULL, bad, 1, true, out, sizeof out, &err) == MK_ERR_INVALID_ARG);
    for (size_t i = 0; mk_chat_template_name_at(i); i++)
        MK_CHECK(mk_lm_chat_apply(lm, mk_chat_template_name_at(i), msgs, 2, true, NULL, 0, &err) > 0);
}

static void test_special_tokens(const struct mk_lm *lm) {
    const int32_t im_start = token_id(lm, "<|im_start|>"), im_end = token_id(lm, "<|im_end|>");
    const int32_t eot_id = token_id(lm, "<|eot_id|>");
    MK_CHECK(im_start > 0 && im_end > 0 && eot_id > 0);
    char buf[16];
    MK_CHECK(mk_lm_token_text(lm, im_end, buf, sizeof buf) == 10 && !memcmp(buf, "<|im_end|>", 10));
    MK_CHECK(mk_lm_token_text(lm, 1, buf, 2) == 3 && !memcmp(buf, "<s", 2));
    MK_CHECK(mk_lm_token_text(lm, -1, buf, sizeof buf) == MK_ERR_INVALID_ARG);
    MK_CHECK(mk_lm_token_text(lm, (int32_t)mk_lm_get_info(lm).n_vocab, buf, sizeof buf) == MK_ERR_INVALID_ARG);
    MK_CHECK(mk_lm_is_eog(lm, im_end) && mk_lm_is_eog(lm, eot_id) && mk_lm_is_eog(lm, mk_lm_get_info(lm).eos));
    MK_CHECK(!mk_lm_is_eog(lm, im_start) && !mk_lm_is_eog(lm, 1) && !mk_lm_is_eog(lm, -1));
    /* parse_special: the marker's text is its token, or plain text made of other tokens. */
    int32_t a[32], b[32];
    int64_t na = mk_lm_tokenize(lm, "<|im_start|>user", 16, true, true, a, 32);
    int64_t nb = mk_lm_tokenize(lm, "<|im_start|>user", 16, true, false, b, 32);
    MK_CHECK(na >= 3 && a[0] == 1 && a[1] == im_start);
    MK_CHECK(nb > na && nb <= 32);
    for (int64_t i = 0; i < nb && i < 32; i++) MK_CHECK(b[i] != im_start);
}

/* Multi-turn feeding: only the tokens beyond the shared prefix are evaluated, and the logits equal
 * those of a fresh session fed the whole conversation. */
static void test_multi_turn(const struct mk_lm *lm) {
    struct mk_session *s = open_session(lm, MK_BACKEND_REF, 256, 0.0f, 1);
    struct mk_session *fresh = open_session(lm, MK_BACKEND_REF, 256, 0.0f, 1);
    if (!s || !fresh) goto done;
    int32_t ids1[512], ids2[512];
    struct mk_chat_msg conv[3] = { { "user", "Hello there" }, { "assistant", "" }, { "user", "And then?" } };
    int64_t n1 = chat_ids(lm, conv, 1, ids1);
    uint32_t reused = 99;
    MK_CHECK(mk_session_feed_sequence(s, ids1, (size_t)n1, &reused) == MK_OK && reused == 0);
    MK_CHECK(mk_session_n_past(s) == (uint32_t)n1);
    struct collect c = { .stop_after = 0 };
    enum mk_stop_reason why;
    uint32_t n_gen = 0;
    MK_CHECK(mk_session_generate(s, 6, collect_token, &c, &why, &n_gen) == MK_OK && n_gen == 6);
    conv[1].content = c.text;
    int64_t n2 = chat_ids(lm, conv, 3, ids2);
    MK_CHECK(n2 > n1 && !memcmp(ids1, ids2, (size_t)n1 * sizeof *ids1));
    const uint32_t prompt_before = mk_session_timings(s).n_prompt;
    MK_CHECK(mk_session_feed_sequence(s, ids2, (size_t)n2, &reused) == MK_OK);
    const uint32_t evaluated = mk_session_timings(s).n_prompt - prompt_before;
    printf("api: turn 2 is %lld tokens: %u kept, %u evaluated (turn 1 was %lld + 6 generated)\n", (long long)n2,
           (unsigned)reused, (unsigned)evaluated, (long long)n1);
    MK_CHECK(reused >= (uint32_t)n1 && evaluated == (uint32_t)n2 - reused);
    MK_CHECK(mk_session_n_past(s) == (uint32_t)n2);
    float *la = malloc(512 * sizeof *la), *lb = malloc(512 * sizeof *lb);
    MK_CHECK(mk_session_feed(fresh, ids2, (size_t)n2) == MK_OK);
    MK_CHECK(mk_session_logits(s, la, 512) == MK_OK && mk_session_logits(fresh, lb, 512) == MK_OK);
    float diff = 0.0f;
    for (int i = 0; i < 512; i++) diff = fmaxf(diff, fabsf(la[i] - lb[i]));
    MK_CHECK_MSG(diff < 1e-4f, "multi-turn logits differ from a fresh session's by %g", (double)diff);

    /* A sequence that diverges at position 5 keeps 5 tokens and re-evaluates the rest. */
    ids2[5] = ids2[5] == 300 ? 301 : 300;
    MK_CHECK(mk_session_feed_sequence(s, ids2, (size_t)n2, &reused) == MK_OK && reused == 5);
    MK_CHECK(mk_session_reset(fresh) == MK_OK && mk_session_feed(fresh, ids2, (size_t)n2) == MK_OK);
    MK_CHECK(mk_session_logits(s, la, 512) == MK_OK && mk_session_logits(fresh, lb, 512) == MK_OK);
    diff = 0.0f;
    for (int i = 0; i < 512; i++) diff = fmaxf(diff, fabsf(la[i] - lb[i]));
    MK_CHECK_MSG(diff < 1e-4f, "logits after a rewind differ from a fresh session's by %g", (double)diff);
    /* The same sequence again evaluates only its last token; one too long changes nothing. */
    const uint32_t before = mk_session_timings(s).n_prompt;
    MK_CHECK(mk_session_feed_sequence(s, ids2, (size_t)n2, &reused) == MK_OK && reused == (uint32_t)n2 - 1);
    MK_CHECK(mk_session_timings(s).n_prompt == before + 1);
    int32_t *big = calloc(300, sizeof *big);
    MK_CHECK(big && mk_session_feed_sequence(s, big, 300, &reused) == MK_ERR_CONTEXT_FULL);
    MK_CHECK(mk_session_n_past(s) == (uint32_t)n2 && strstr(mk_session_last_error(s), "context full"));
    MK_CHECK(mk_session_feed_sequence(s, ids2, 0, &reused) == MK_ERR_INVALID_ARG);
    MK_CHECK(mk_session_rewind(s, (uint32_t)n2 + 1) == MK_ERR_INVALID_ARG);
    MK_CHECK(mk_session_rewind(s, 0) == MK_OK && mk_session_n_past(s) == 0);
    MK_CHECK(mk_session_generate(s, 1, NULL, NULL, &why, &n_gen) == MK_ERR_INVALID_ARG);
    free(big);
    free(la);
    free(lb);
done:
    mk_session_free(s);
    mk_session_free(fresh);
}

/* Greedy decoding's first answer token X, then the same weights with X as the EOT id: generation
 * stops before emitting anything, with MK_STOP_EOG; ignore_eog lets X through. */
static void test_eog_stop(const char *dir, const struct mk_lm *lm) {
    const struct mk_chat_msg msgs[] = { { "user", "Hello" } };
    int32_t ids[512];
    int64_t n = chat_ids(lm, msgs, 1, ids);
    struct mk_session *s = open_session(lm, MK_BACKEND_REF, 128, 0.0f, 1);
    if (!s || n <= 0) {
        mk_session_free(s);
        return;
    }
    struct collect c = { .stop_after = 0 };
    enum mk_stop_reason why;
    uint32_t n_gen = 0;
    MK_CHECK(mk_session_feed(s, ids, (size_t)n) == MK_OK);
    MK_CHECK(mk_session_generate(s, 1, collect_token, &c, &why, &n_gen) == MK_OK && n_gen == 1);
    mk_session_free(s);
    const int32_t x = c.ids[0];
    MK_CHECK_MSG(!mk_lm_is_eog(lm, x), "test bug: the first greedy token %d already ends generation", (int)x);
    char path[4300];
    struct mk_lm *eot = NULL;
    struct mk_error err;
    if (write_chat_model(dir, "eot.gguf", k_chatml_jinja, x, path, sizeof path) ||
        mk_lm_load(path, &eot, &err) != MK_OK) {
        mk_test_fail("FAIL: the EOT model: %s", path);
        return;
    }
    MK_CHECK(mk_lm_is_eog(eot, x));
    s = open_session(eot, MK_BACKEND_REF, 128, 0.0f, 1);
    if (s) {
        MK_CHECK(mk_session_feed(s, ids, (size_t)n) == MK_OK);
        MK_CHECK(mk_session_generate(s, 10, NULL, NULL, &why, &n_gen) == MK_OK);
        printf("api: with eot = %d greedy stops after %u tokens (%s)\n", (int)x, (unsigned)n_gen,
               mk_stop_reason_str(why));
        MK_CHECK(why == MK_STOP_EOG && n_gen == 0);
        mk_session_free(s);
    }
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = MK_BACKEND_REF;
    sp.n_ctx = 128;
    sp.sampling.temperature = 0.0f;
    sp.ignore_eog = 1;
    s = NULL;
    MK_CHECK(mk_session_create(eot, &sp, &s, &err) == MK_OK);
    if (s) {
        struct collect d = { .stop_after = 0 };
        MK_CHECK(mk_session_feed(s, ids, (size_t)n) == MK_OK);
        MK_CHECK(mk_session_generate(s, 3, collect_token, &d, &why, &n_gen) == MK_OK);
        MK_CHECK(why == MK_STOP_LENGTH && n_gen == 3 && d.ids[0] == x);
        mk_session_free(s);
    }
    mk_lm_free(eot);
    unlink(path);
}

static void test_chat(void) {
    char dir[4200], chat_path[4300], plain_path[4300];
    if (!mk_test_make_tmp_dir(dir, sizeof dir, "mk-api-chat-")) {
        mk_test_fail("FAIL: mkdtemp");
        return;
    }
    struct mk_lm *lm = NULL, *plain = NULL;
    struct mk_error err;
    if (!write_chat_model(dir, "chatml.gguf", k_chatml_jinja, -1, chat_path, sizeof chat_path) &&
        !write_chat_model(dir, "plain.gguf", NULL, -1, plain_path, sizeof plain_path)) {
        MK_CHECK(mk_lm_load(chat_path, &lm, &err) == MK_OK);
        MK_CHECK(mk_lm_load(plain_path, &plain, &err) == MK_OK);
    }
    if (lm && plain) {
        test_chat_render(lm, plain);
        test_special_tokens(lm);
        test_multi_turn(lm);
        test_eog_stop(dir, lm);
    }
    mk_lm_free(lm);
    mk_lm_free(plain);
    unlink(chat_path);
    unlink(plain_path);
    rmdir(dir);
}

static void test_load_errors(void) {
    struct mk_lm *lm = (struct mk_lm *)1;
    struct mk_error err;
    mk_error_clear(&err);
    MK_CHECK(mk_lm_load("/nonexistent/dir/model.gguf", &lm, &err) == MK_ERR_IO);
    MK_CHECK(lm == NULL && strstr(err.msg, "/nonexistent/dir/model.gguf") != NULL);
    printf("api: missing file: %s\n", err.msg);

    char path[4200];
    snprintf(path, sizeof path, "%s/mk-api-garbage-XXXXXX", mk_test_tmp_base());
    int fd = mkstemp(path);
    MK_CHECK(fd >= 0);
    if (fd >= 0) {
        const char junk[] = "this is not a GGUF file, just some text long enough to be read";
        MK_CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
        close(fd);
        mk_error_clear(&err);
        MK_CHECK(mk_lm_load(path, &lm, &err) == MK_ERR_FORMAT);
        printf("api: not a GGUF: %s\n", err.msg);
        unlink(path);
    }

    /* A vocabulary-only file tokenizes but cannot decode. */
    char vocab[4200];
    snprintf(vocab, sizeof vocab, "%s/ggml-vocab-llama-spm.gguf", g_models);
    MK_CHECK(mk_lm_load(vocab, &lm, &err) == MK_OK);
    if (lm) {
        MK_CHECK(!mk_lm_get_info(lm).can_decode);
        int32_t ids[8];
        MK_CHECK(mk_lm_tokenize(lm, "Hello", 5, true, false, ids, 8) >= 2 && ids[0] == 1);
        struct mk_session_params sp = mk_session_default_params();
        sp.backend = MK_BACKEND_REF;
        struct mk_session *s = NULL;
        MK_CHECK(mk_session_create(lm, &sp, &s, &err) == MK_ERR_UNSUPPORTED && s == NULL);
        mk_lm_free(lm);
    }
}

int main(void) {
    test_defaults();
    test_chat();
    g_models = mk_test_models_dir("stories260K-f32.gguf");
    if (!g_models) {
        printf("SKIP: models directory not found (set MK_MODELS_DIR); api_test's model checks need stories260K\n");
        return mk_test_failures ? 1 : 0;
    }
    snprintf(g_stories, sizeof g_stories, "%s/stories260K-f32.gguf", g_models);
    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(g_stories, &lm, &err) != MK_OK) {
        fprintf(stderr, "FAIL: loading %s: %s\n", g_stories, err.msg);
        return 1;
    }
    test_tokenize(lm);
    test_golden_from_bos(lm);
    test_cancel(lm);
    test_prompt_and_callback_stop(lm);
    test_context_full(lm);
    test_sampling_sessions(lm);
    test_device_loop(lm);
    test_two_sessions(lm);
    test_auto_backend(lm);
    mk_lm_free(lm);
    test_eos();
    test_load_errors();
    return mk_test_finish("api_test");
}
