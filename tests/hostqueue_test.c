/* Tests the host queue against a thread that plays the device: answers in order, the watchdog, device failures, cancel and stop. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostqueue/hostqueue.h"
#include "tests/test_util.h"

/* The fake device: the megakernel's side of the mailbox protocol. */
struct fake_device {
    struct mk_mailbox *mb;
    uint32_t hang_on_token; /* a STEP with this token never answers */
    uint32_t die;           /* the probe reports death once set */
    uint32_t steps_seen;
    uint32_t stopped;
    uint32_t delay_us;       /* per step */
    uint32_t n_ctx;          /* GENERATE ends at its last position (0: 1 << 20) */
    uint32_t gen_hang_after; /* GENERATE goes silent after this many tokens (0: never) */
    uint32_t die_on_hang;    /* ... and then the probe reports it dead */
    uint32_t gen_steps;      /* GENERATE steps run, all commands */
    pthread_t thread;
};

static void sleep_us(unsigned us) {
    struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000 };
    nanosleep(&ts, NULL);
}

/* The fake model: the token after tok at pos. */
static int32_t fake_next(int32_t tok, int32_t pos) { return (int32_t)(((uint32_t)tok * 7u + (uint32_t)pos) % 1000u); }

/* The megakernel's GENERATE: each step's token to the ring once the host has room, then the
 * next step from it, until mk_gen_end_after says stop; false when it went silent. */
static bool fake_generate(struct fake_device *d, uint32_t s) {
    struct mk_mailbox *mb = d->mb;
    struct mk_step_cmd cmd = mb->cmd;
    const uint32_t max = mb->gen_max, n_stop = mb->gen_n_stop, n_ctx = d->n_ctx ? d->n_ctx : 1u << 20;
    int32_t stop[MK_GEN_MAX_STOP];
    memcpy(stop, mb->gen_stop, sizeof stop);
    mb->t_start_ns = 1000000ull * s; /* every step takes 3 ns on this clock */
    for (uint32_t i = 0;; i++) {
        if (d->gen_hang_after && i == d->gen_hang_after) {
            if (d->die_on_hang) __atomic_store_n(&d->die, 1u, __ATOMIC_RELEASE);
            while (!__atomic_load_n(&d->stopped, __ATOMIC_ACQUIRE)) sleep_us(200);
            return false;
        }
        const uint32_t cancel = __atomic_load_n(&mb->gen_cancel, __ATOMIC_ACQUIRE);
        if (d->delay_us) sleep_us(d->delay_us);
        const int32_t tok = fake_next(cmd.token, cmd.pos);
        while (i - __atomic_load_n(&mb->gen_read, __ATOMIC_ACQUIRE) >= MK_GEN_RING) sleep_us(5);
        mb->gen_token[i % MK_GEN_RING] = tok;
        mb->gen_t_ns[i % MK_GEN_RING] = 1000000ull * s + 3u * (i + 1u);
        __atomic_add_fetch(&d->gen_steps, 1u, __ATOMIC_RELAXED);
        const uint32_t why = mk_gen_end_after(tok, i + 1u, cmd.pos, n_ctx, max, stop, n_stop, cancel);
        __atomic_store_n(&mb->gen_count, i + 1u, __ATOMIC_RELEASE);
        if (why != MK_GEN_RUNNING) {
            mb->gen_why = why;
            mb->out_token = tok;
            mb->t_end_ns = 1000000ull * s + 3u * (i + 1u);
            return true;
        }
        cmd.token = tok;
        cmd.pos++;
    }
}

static void *fake_device_main(void *arg) {
    struct fake_device *d = arg;
    for (uint32_t s = 0;; s++) {
        while (__atomic_load_n(&d->mb->cmd_seq, __ATOMIC_ACQUIRE) != s + 1) sleep_us(20);
        struct mk_step_cmd cmd = d->mb->cmd;
        if (cmd.cmd == MK_CMD_STOP) {
            __atomic_store_n(&d->stopped, 1u, __ATOMIC_RELEASE);
            return NULL;
        }
        if (cmd.cmd == MK_CMD_HANG || (uint32_t)cmd.token == d->hang_on_token) {
            /* Obeys nothing more, as a hung kernel; the test ends it by setting stopped itself. */
            while (!__atomic_load_n(&d->stopped, __ATOMIC_ACQUIRE)) sleep_us(200);
            return NULL;
        }
        if (cmd.cmd == MK_CMD_GENERATE) {
            if (!fake_generate(d, s)) return NULL;
            __atomic_store_n(&d->mb->done_seq, s + 1, __ATOMIC_RELEASE);
            continue;
        }
        __atomic_add_fetch(&d->steps_seen, 1u, __ATOMIC_RELAXED);
        if (d->delay_us) sleep_us(d->delay_us);
        d->mb->out_token = cmd.token * 2 + cmd.pos;
        d->mb->t_start_ns = 1000u * s;
        d->mb->t_end_ns = 1000u * s + 500u;
        __atomic_store_n(&d->mb->done_seq, s + 1, __ATOMIC_RELEASE);
    }
}

static enum mk_status fake_probe(void *ctx, struct mk_error *err) {
    struct fake_device *d = ctx;
    if (__atomic_load_n(&d->die, __ATOMIC_ACQUIRE))
        return mk_error_set(err, MK_ERR_CUDA, "fake device died (cuStreamQuery: CUDA_ERROR_LAUNCH_FAILED)");
    return MK_OK;
}

static void fake_describe(void *ctx, char *buf, size_t n) {
    snprintf(buf, n, "block 7 waits on counter 3 for 12 (saw 11)");
}

static struct mk_hostqueue *start(struct fake_device *d, uint32_t watchdog_ms) {
    struct mk_hostqueue_params p = {
        .cu = NULL, .watchdog_ms = watchdog_ms, .probe = fake_probe, .describe = fake_describe, .ctx = d, .what = "fake"
    };
    struct mk_hostqueue *q = NULL;
    struct mk_error err;
    if (mk_hostqueue_create(&p, &q, &err) != MK_OK) {
        fprintf(stderr, "create: %s\n", err.msg);
        exit(1);
    }
    d->mb = mk_hostqueue_mailbox(q);
    MK_CHECK(mk_hostqueue_mailbox_device(q) == 0);
    pthread_create(&d->thread, NULL, fake_device_main, d);
    return q;
}

/* Stops q and ends a fake device that may never answer again, as a hung kernel. */
static void stop_hung(struct mk_hostqueue *q, struct fake_device *d) {
    mk_hostqueue_stop(q);
    __atomic_store_n(&d->stopped, 1u, __ATOMIC_RELEASE);
    pthread_join(d->thread, NULL);
    mk_hostqueue_free(q);
}

static void test_in_order(void) {
    struct fake_device d = { .hang_on_token = 0xffffffffu };
    struct mk_hostqueue *q = start(&d, 5000);
    for (int i = 0; i < 200; i++) {
        struct mk_step_cmd c = mk_test_step_cmd(100 + i, i);
        struct mk_hostqueue_result r;
        struct mk_error err;
        enum mk_status st = mk_hostqueue_submit(q, &c, &r, &err);
        MK_CHECK(st == MK_OK);
        MK_CHECK(r.token == (100 + i) * 2 + i);
        MK_CHECK(r.t_end_ns - r.t_start_ns == 500u);
    }
    MK_CHECK(mk_hostqueue_posted(q) == 200u);
    MK_CHECK(!mk_hostqueue_poisoned(q));
    mk_hostqueue_stop(q);
    pthread_join(d.thread, NULL);
    MK_CHECK(__atomic_load_n(&d.stopped, __ATOMIC_ACQUIRE) == 1u); /* STOP reached the device */
    MK_CHECK(d.steps_seen == 200u);
    mk_hostqueue_free(q);
}

/* Several submitters at once: each gets its own answer. */
struct submitter {
    struct mk_hostqueue *q;
    int base;
    int ok;
};

static void *submitter_main(void *arg) {
    struct submitter *s = arg;
    for (int i = 0; i < 50; i++) {
        struct mk_step_cmd c = mk_test_step_cmd(s->base + i, i);
        struct mk_hostqueue_result r;
        struct mk_error err;
        if (mk_hostqueue_submit(s->q, &c, &r, &err) == MK_OK && r.token == (s->base + i) * 2 + i) s->ok++;
    }
    return NULL;
}

static void test_concurrent_submitters(void) {
    struct fake_device d = { .hang_on_token = 0xffffffffu };
    struct mk_hostqueue *q = start(&d, 5000);
    struct submitter s[3] = { { q, 1000, 0 }, { q, 2000, 0 }, { q, 3000, 0 } };
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, submitter_main, &s[i]);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) MK_CHECK(s[i].ok == 50);
    mk_hostqueue_stop(q);
    pthread_join(d.thread, NULL);
    mk_hostqueue_free(q);
    MK_CHECK(d.steps_seen == 150u);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_watchdog(void) {
    struct fake_device d = { .hang_on_token = 7 };
    struct mk_hostqueue *q = start(&d, 300);
    struct mk_step_cmd c = mk_test_step_cmd(5, 0);
    struct mk_hostqueue_result r;
    struct mk_error err;
    MK_CHECK(mk_hostqueue_submit(q, &c, &r, &err) == MK_OK);
    c = mk_test_step_cmd(7, 1);
    double t0 = now_ms();
    enum mk_status st = mk_hostqueue_submit(q, &c, &r, &err);
    double took = now_ms() - t0;
    MK_CHECK(st == MK_ERR_TIMEOUT);
    MK_CHECK(err.status == MK_ERR_TIMEOUT);
    MK_CHECK(took >= 290.0);
    /* The message names the step, the position and what the device waits on. */
    MK_CHECK(strstr(err.msg, "step 1") != NULL);
    MK_CHECK(strstr(err.msg, "pos 1") != NULL);
    MK_CHECK(strstr(err.msg, "300 ms") != NULL);
    MK_CHECK(strstr(err.msg, "counter 3") != NULL);
    MK_CHECK(mk_hostqueue_poisoned(q));
    /* Later commands fail at once with the same cause. */
    c = mk_test_step_cmd(5, 2);
    t0 = now_ms();
    st = mk_hostqueue_submit(q, &c, &r, &err);
    MK_CHECK(st == MK_ERR_TIMEOUT);
    MK_CHECK(now_ms() - t0 < 100.0);
    MK_CHECK(strstr(err.msg, "poisoned") != NULL);
    /* Stop does not block on a hung device, and posts no STOP it would never read. */
    t0 = now_ms();
    mk_hostqueue_stop(q);
    MK_CHECK(now_ms() - t0 < 1000.0);
    MK_CHECK(mk_hostqueue_posted(q) == 2u);
    __atomic_store_n(&d.stopped, 1u, __ATOMIC_RELEASE);
    pthread_join(d.thread, NULL);
    mk_hostqueue_free(q);
}

static void test_hang_command(void) {
    struct fake_device d = { .hang_on_token = 0xffffffffu };
    struct mk_hostqueue *q = start(&d, 200);
    struct mk_step_cmd c = mk_test_step_cmd(0, 0);
    c.cmd = MK_CMD_HANG;
    struct mk_hostqueue_result r;
    struct mk_error err;
    MK_CHECK(mk_hostqueue_submit(q, &c, &r, &err) == MK_ERR_TIMEOUT);
    stop_hung(q, &d);
}

static void test_device_death(void) {
    struct fake_device d = { .hang_on_token = 9 };
    struct mk_hostqueue *q = start(&d, 10000);
    struct mk_step_cmd c = mk_test_step_cmd(9, 3);
    struct mk_hostqueue_result r;
    struct mk_error err;
    __atomic_store_n(&d.die, 1u, __ATOMIC_RELEASE);
    double t0 = now_ms();
    enum mk_status st = mk_hostqueue_submit(q, &c, &r, &err);
    /* Found by the probe within milliseconds, not by the 10 s watchdog. */
    MK_CHECK(st == MK_ERR_CUDA);
    MK_CHECK(now_ms() - t0 < 2000.0);
    MK_CHECK(strstr(err.msg, "LAUNCH_FAILED") != NULL);
    MK_CHECK(strstr(err.msg, "pos 3") != NULL);
    MK_CHECK(mk_hostqueue_poisoned(q));
    stop_hung(q, &d);
}

static void test_device_error_code(void) {
    struct fake_device d = { .hang_on_token = 11 };
    struct mk_hostqueue *q = start(&d, 10000);
    struct mk_mailbox *mb = mk_hostqueue_mailbox(q);
    mb->error_arg = 42;
    __atomic_store_n(&mb->error, (uint32_t)MK_DEVERR_BAD_OPCODE, __ATOMIC_RELEASE);
    struct mk_step_cmd c = mk_test_step_cmd(11, 0);
    struct mk_hostqueue_result r;
    struct mk_error err;
    MK_CHECK(mk_hostqueue_submit(q, &c, &r, &err) == MK_ERR_INTERNAL);
    MK_CHECK(strstr(err.msg, "opcode") != NULL);
    MK_CHECK(strstr(err.msg, "42") != NULL);
    stop_hung(q, &d);
}

struct slow_submit {
    struct mk_hostqueue *q;
    int32_t token;
    enum mk_status st;
};

static void *slow_submit_main(void *arg) {
    struct slow_submit *s = arg;
    struct mk_step_cmd c = mk_test_step_cmd(s->token, 0);
    struct mk_hostqueue_result r;
    struct mk_error err;
    s->st = mk_hostqueue_submit(s->q, &c, &r, &err);
    return NULL;
}

static void test_cancel(void) {
    /* One slow step on the device, then a queued one that cancel must fail. */
    struct fake_device d = { .hang_on_token = 0xffffffffu, .delay_us = 300000 };
    struct mk_hostqueue *q = start(&d, 5000);
    struct slow_submit a = { q, 1, MK_OK }, b = { q, 2, MK_OK };
    pthread_t ta, tb;
    pthread_create(&ta, NULL, slow_submit_main, &a);
    while (__atomic_load_n(&d.steps_seen, __ATOMIC_RELAXED) == 0) sleep_us(1000);
    pthread_create(&tb, NULL, slow_submit_main, &b);
    sleep_us(50000);
    mk_hostqueue_cancel(q);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    MK_CHECK(a.st == MK_OK);
    MK_CHECK(b.st == MK_ERR_CANCELLED);
    MK_CHECK(!mk_hostqueue_poisoned(q));
    mk_hostqueue_stop(q);
    pthread_join(d.thread, NULL);
    mk_hostqueue_free(q);
    MK_CHECK(d.steps_seen == 1u);
}

/* What the host side of a generation saw. */
struct gen_log {
    int32_t tok[4096];
    uint32_t n, stop_at; /* on_token returns true at token stop_at (0: never) */
    uint32_t slow_every; /* sleeps 2 ms at every slow_every-th token, so the ring fills */
    uint32_t out_of_order;
    uint32_t bad_step_ns; /* tokens whose step time was not the fake device's 3 ns */
};

static bool gen_on_token(void *user, uint32_t i, int32_t token, uint64_t step_ns) {
    struct gen_log *g = user;
    if (i != g->n) g->out_of_order++;
    if (step_ns != 3) g->bad_step_ns++;
    if (g->n < 4096) g->tok[g->n] = token;
    g->n++;
    if (g->slow_every && i % g->slow_every == g->slow_every - 1) sleep_us(2000);
    return g->stop_at && i == g->stop_at;
}

/* Tokens the fake model gives from token at pos: out[i] is the i-th step's. */
static void gen_expect(int32_t token, int32_t pos, uint32_t n, int32_t *out) {
    for (uint32_t i = 0; i < n; i++) {
        token = fake_next(token, pos + (int32_t)i);
        out[i] = token;
    }
}

static enum mk_status run_gen(struct mk_hostqueue *q, int32_t token, int32_t pos, uint32_t max, const int32_t *stop,
                              uint32_t n_stop, struct gen_log *g, struct mk_hostqueue_gen_result *r,
                              struct mk_error *err) {
    struct mk_step_cmd c = mk_test_step_cmd(token, pos);
    struct mk_hostqueue_gen gp = {
        .max_steps = max, .stop = stop, .n_stop = n_stop, .on_token = gen_on_token, .user = g
    };
    return mk_hostqueue_generate(q, &c, &gp, r, err);
}

/* A generation of four rings' worth with a consumer that falls behind: every token once, in order
 * (a slot the device reused before the host read it would show); then stop tokens, cancel, the context's end, and steps after it. */
static void test_generate(void) {
    struct fake_device d = { .hang_on_token = 0xffffffffu, .n_ctx = 3000 };
    struct mk_hostqueue *q = start(&d, 5000);
    static struct gen_log g;
    static int32_t want[4096];
    struct mk_hostqueue_gen_result r;
    struct mk_error err;

    memset(&g, 0, sizeof g);
    g.slow_every = 300;
    MK_CHECK(run_gen(q, 5, 0, 4 * MK_GEN_RING, NULL, 0, &g, &r, &err) == MK_OK);
    gen_expect(5, 0, 4 * MK_GEN_RING, want);
    MK_CHECK(g.n == 4 * MK_GEN_RING && r.n_steps == g.n && r.n_delivered == g.n && g.out_of_order == 0);
    MK_CHECK(memcmp(g.tok, want, g.n * sizeof *want) == 0);
    MK_CHECK(r.why == MK_GEN_END_MAX);
    MK_CHECK(g.bad_step_ns == 0);
    MK_CHECK(r.t_end_ns - r.t_start_ns == 3u * 4u * MK_GEN_RING);

    /* A stop token ends it after that token, which is delivered. */
    gen_expect(9, 40, 100, want);
    int32_t stop[2] = { -1, want[37] };
    uint32_t first = 0;
    while (want[first] != want[37]) first++;
    memset(&g, 0, sizeof g);
    MK_CHECK(run_gen(q, 9, 40, 100, stop, 2, &g, &r, &err) == MK_OK);
    MK_CHECK(r.why == MK_GEN_END_STOP && r.n_steps == first + 1 && g.n == first + 1);
    MK_CHECK(g.tok[g.n - 1] == want[37]);

    /* The consumer says stop at token 10: nothing after it is delivered, and the device ends within
     * a few steps (each takes 100 us here). */
    d.delay_us = 100;
    memset(&g, 0, sizeof g);
    g.stop_at = 10;
    MK_CHECK(run_gen(q, 3, 0, 2000, NULL, 0, &g, &r, &err) == MK_OK);
    MK_CHECK(g.n == 11 && r.n_delivered == 11);
    MK_CHECK(r.why == MK_GEN_END_CANCELLED && r.n_steps >= 11 && r.n_steps < 60);
    d.delay_us = 0;

    /* The last position of the context ends it. */
    memset(&g, 0, sizeof g);
    MK_CHECK(run_gen(q, 3, 2990, 100, NULL, 0, &g, &r, &err) == MK_OK);
    MK_CHECK(r.why == MK_GEN_END_CONTEXT && g.n == 10);

    /* Bad arguments are refused before anything is posted. */
    MK_CHECK(run_gen(q, 3, 0, 0, NULL, 0, &g, &r, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(err.msg, "max_steps 0") != NULL);

    /* One-step commands go on after generations, numbered with them. */
    struct mk_step_cmd c = mk_test_step_cmd(21, 7);
    struct mk_hostqueue_result sr;
    MK_CHECK(mk_hostqueue_submit(q, &c, &sr, &err) == MK_OK && sr.token == 21 * 2 + 7);
    MK_CHECK(mk_hostqueue_posted(q) == 5u);
    MK_CHECK(!mk_hostqueue_poisoned(q));
    mk_hostqueue_stop(q);
    pthread_join(d.thread, NULL);
    MK_CHECK(__atomic_load_n(&d.stopped, __ATOMIC_ACQUIRE) == 1u);
    mk_hostqueue_free(q);
}

/* A generation that goes silent: the watchdog fires between tokens and poisons the queue. */
static void test_generate_watchdog(void) {
    struct fake_device d = { .hang_on_token = 0xffffffffu, .gen_hang_after = 20 };
    struct mk_hostqueue *q = start(&d, 100);
    static struct gen_log g;
    memset(&g, 0, sizeof g);
    struct mk_hostqueue_gen_result r;
    struct mk_error err;
    double t0 = now_ms();
    MK_CHECK(run_gen(q, 1, 0, 500, NULL, 0, &g, &r, &err) == MK_ERR_TIMEOUT);
    double took = now_ms() - t0;
    MK_CHECK(took >= 90 && took < 2000);
    MK_CHECK(g.n == 20);
    MK_CHECK(strstr(err.msg, "no token within 100 ms after its 20-th") != NULL);
    MK_CHECK(strstr(err.msg, "block 7 waits on counter 3") != NULL);
    MK_CHECK(mk_hostqueue_poisoned(q));
    MK_CHECK(run_gen(q, 1, 0, 5, NULL, 0, &g, &r, &err) == MK_ERR_TIMEOUT); /* refused */
    stop_hung(q, &d);

    /* A device that dies: its finished tokens are delivered, then the probe's error names it. */
    struct fake_device d2 = { .hang_on_token = 0xffffffffu, .gen_hang_after = 30, .die_on_hang = 1 };
    q = start(&d2, 5000);
    memset(&g, 0, sizeof g);
    t0 = now_ms();
    MK_CHECK(run_gen(q, 1, 0, 500, NULL, 0, &g, &r, &err) == MK_ERR_CUDA);
    MK_CHECK(now_ms() - t0 < 1000);
    MK_CHECK(g.n == 30 && r.n_delivered == 30);
    MK_CHECK(strstr(err.msg, "fake failed generating from pos 0") != NULL);
    MK_CHECK(strstr(err.msg, "CUDA_ERROR_LAUNCH_FAILED") != NULL);
    MK_CHECK(mk_hostqueue_poisoned(q));
    stop_hung(q, &d2);
}

int main(void) {
    test_in_order();
    test_concurrent_submitters();
    test_watchdog();
    test_hang_command();
    test_device_death();
    test_device_error_code();
    test_cancel();
    test_generate();
    test_generate_watchdog();
    return mk_test_finish("hostqueue_test");
}
