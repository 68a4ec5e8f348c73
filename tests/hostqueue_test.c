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
    uint32_t delay_us; /* per step */
    pthread_t thread;
};

static void sleep_us(unsigned us) {
    struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000 };
    nanosleep(&ts, NULL);
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

int main(void) {
    test_in_order();
    test_concurrent_submitters();
    test_watchdog();
    test_hang_command();
    test_device_death();
    test_device_error_code();
    test_cancel();
    return mk_test_finish("hostqueue_test");
}
