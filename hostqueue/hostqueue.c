/* The feeder thread between the backend and the device (one command at a time through the mailbox, release/acquire ordered, with a watchdog) and the token ring of a device generation. */
#include "hostqueue/hostqueue.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define MK_HQ_CAP                 16u
#define MK_HQ_DEFAULT_WATCHDOG_MS 10000u
/* How often the feeder asks the device side whether it still lives while a step is out. */
#define MK_HQ_PROBE_NS 1000000ull
/* Polling for a step's answer: the feeder sleeps until shortly before the answer is due (from the
 * steps before), spins across the due time, and otherwise sleeps with a backoff growing to this,
 * so a step costs the host a small slice of a core and a late answer at most this much delay. */
#define MK_HQ_SLEEP_MAX_NS 50000ull
#define MK_HQ_SLEEP_MIN_NS 1000ull
/* Half the spin window around the due time: fixed part plus a share of the step's length. */
#define MK_HQ_SPIN_FIXED_NS 10000ull
#define MK_HQ_SPIN_SHARE    32u
/* An idle feeder polls this long before it blocks. */
#define MK_HQ_IDLE_SPIN_NS 50000ull
/* A submitter sleeps in pieces of at most MK_HQ_SLEEP_MAX_NS until this much before its answer
 * is due (the default timer slack of its thread, 50 us, plus the spin window), spins across the
 * due time, then sleeps with a backoff, and blocks only once the answer is this late. Blocking
 * for the whole step (1-2 ms on a GPU) let the idle core sleep deeply: on the H100 host 2-3 % of
 * tokens then came 0.3-3 ms late, in bursts, while the device's own times stayed flat. */
#define MK_HQ_SUBMIT_EARLY_NS 60000ull
#define MK_HQ_SUBMIT_BLOCK_NS 20000000ull

enum mk_hq_state { MK_HQ_QUEUED = 0, MK_HQ_POSTED = 1, MK_HQ_DONE = 2 };

/* A submitted command; lives on the submitter's stack until state is DONE. */
struct mk_hq_req {
    struct mk_step_cmd cmd;
    uint32_t state; /* enum mk_hq_state, release-stored by the feeder */
    enum mk_status st;
    struct mk_error err;
    struct mk_hostqueue_result res;
};

struct mk_hostqueue {
    struct mk_hostqueue_params p;
    struct mk_mailbox *mb; /* host view */
    uint64_t mb_dev;       /* device address, 0 without cu */
    pthread_t feeder;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv_feeder;          /* the ring got a command or stop was asked */
    pthread_cond_t cv_done;            /* a command finished */
    struct mk_hq_req *ring[MK_HQ_CAP]; /* (MK_HQ_CAP) under mu; head..tail queued */
    uint32_t head, tail;
    uint32_t n_queued; /* tail - head, also read without mu by the spinning feeder */
    bool feeder_sleeping;
    bool busy;   /* the feeder holds a command (taken, not yet complete) */
    bool direct; /* a generation posts and drains the mailbox on its caller's thread */
    bool stop_requested;
    bool joined;
    uint32_t poisoned; /* atomic flag; poison_err is written before it is set */
    struct mk_error poison_err;
    uint32_t seq;         /* commands posted; written by the feeder only */
    uint64_t step_ns_est; /* written by the feeder, read by submitters (atomics): running mean of recent
                           * steps' length, 0 before any */
};

static uint64_t mk_hq_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void mk_hq_sleep_ns(uint64_t ns) {
    struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
    nanosleep(&ts, NULL);
}

static inline void mk_hq_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* One pause of a poll for an answer due within [spin_from, spin_to) ns of the start, el ns ago:
 * sleep towards the window in pieces short enough that the core stays awake, spin across it,
 * back off after it. */
static void mk_hq_pause(uint64_t el, uint64_t spin_from, uint64_t spin_to, uint64_t *backoff) {
    if (el < spin_from) {
        const uint64_t left = spin_from - el;
        mk_hq_sleep_ns(left < MK_HQ_SLEEP_MAX_NS ? left : MK_HQ_SLEEP_MAX_NS);
    } else if (el < spin_to) {
        for (int i = 0; i < 64; i++) mk_hq_relax();
    } else {
        mk_hq_sleep_ns(*backoff);
        if (*backoff < MK_HQ_SLEEP_MAX_NS) *backoff *= 2;
    }
}

static void mk_hq_poison(struct mk_hostqueue *q, const struct mk_error *e) {
    if (__atomic_load_n(&q->poisoned, __ATOMIC_ACQUIRE)) return;
    q->poison_err = *e;
    __atomic_store_n(&q->poisoned, 1u, __ATOMIC_RELEASE);
}

bool mk_hostqueue_poisoned(struct mk_hostqueue *q) { return __atomic_load_n(&q->poisoned, __ATOMIC_ACQUIRE) != 0; }

uint32_t mk_hostqueue_posted(struct mk_hostqueue *q) { return __atomic_load_n(&q->seq, __ATOMIC_ACQUIRE); }

struct mk_mailbox *mk_hostqueue_mailbox(struct mk_hostqueue *q) {
    return q->mb;
}

uint64_t mk_hostqueue_mailbox_device(const struct mk_hostqueue *q) { return q->mb_dev; }

/* The submitter may return (and drop req) as soon as it sees DONE: nothing touches req after. */
static void mk_hq_complete(struct mk_hostqueue *q, struct mk_hq_req *req, enum mk_status st) {
    req->st = st;
    __atomic_store_n(&req->state, MK_HQ_DONE, __ATOMIC_RELEASE);
    pthread_mutex_lock(&q->mu);
    q->busy = false;
    pthread_cond_broadcast(&q->cv_done);
    pthread_mutex_unlock(&q->mu);
}

static const char *mk_hq_deverr_name(uint32_t code) {
    switch (code) {
    case MK_DEVERR_BAD_OPCODE: return "unknown opcode at instruction";
    case MK_DEVERR_BAD_POS: return "position out of range:";
    case MK_DEVERR_BAD_TOKEN: return "token out of range:";
    case MK_DEVERR_INJECTED: return "injected fault (test) at step";
    default: return "unknown device error, argument";
    }
}

/* Whether the device side still lives; else fills err (naming where it was: `in` after "broken
 * invariant", `during` after "failed"), poisons the queue and returns the status. */
static enum mk_status mk_hq_check_device(struct mk_hostqueue *q, const char *in, const char *during,
                                         struct mk_error *err) {
    const char *what = q->p.what ? q->p.what : "device";
    uint32_t code = __atomic_load_n(&q->mb->error, __ATOMIC_ACQUIRE);
    enum mk_status st = MK_OK;
    if (code) {
        st = mk_error_set(err, MK_ERR_INTERNAL, "%s stopped on a broken invariant %s: %s %u", what, in,
                          mk_hq_deverr_name(code), q->mb->error_arg);
    } else if (q->p.probe) {
        st = q->p.probe(q->p.ctx, err);
        if (st != MK_OK) mk_error_prefix(err, "%s failed %s", what, during);
    }
    if (st != MK_OK) mk_hq_poison(q, err);
    return st;
}

/* The watchdog fired: "<what> <head> within N ms<tail> (watchdog): <what the device waits on>";
 * poisons the queue. */
static enum mk_status mk_hq_timeout(struct mk_hostqueue *q, const char *head, const char *tail, struct mk_error *err) {
    char info[320];
    info[0] = '\0';
    if (q->p.describe) q->p.describe(q->p.ctx, info, sizeof info);
    mk_error_set(err, MK_ERR_TIMEOUT, "%s %s within %u ms%s (watchdog)%s%s; the session is unusable now",
                 q->p.what ? q->p.what : "device", head,
                 q->p.watchdog_ms ? q->p.watchdog_ms : MK_HQ_DEFAULT_WATCHDOG_MS, tail, info[0] ? ": " : "", info);
    mk_hq_poison(q, err);
    return MK_ERR_TIMEOUT;
}

/* Waits for the answer to command n; on failure poisons the queue and fills req->err. */
static enum mk_status mk_hq_wait_done(struct mk_hostqueue *q, struct mk_hq_req *req, uint32_t n) {
    const uint64_t limit = (uint64_t)(q->p.watchdog_ms ? q->p.watchdog_ms : MK_HQ_DEFAULT_WATCHDOG_MS) * 1000000ull;
    const uint64_t t0 = mk_hq_now_ns();
    const uint64_t est = __atomic_load_n(&q->step_ns_est, __ATOMIC_RELAXED),
                   half = MK_HQ_SPIN_FIXED_NS + est / MK_HQ_SPIN_SHARE;
    const uint64_t spin_from = est > half ? est - half : 0, spin_to = est + half;
    uint64_t last_probe = t0, backoff = MK_HQ_SLEEP_MIN_NS;
    for (;;) {
        if (__atomic_load_n(&q->mb->done_seq, __ATOMIC_ACQUIRE) == n) {
            req->res.token = q->mb->out_token;
            req->res.t_start_ns = q->mb->t_start_ns;
            req->res.t_end_ns = q->mb->t_end_ns;
            uint64_t took = mk_hq_now_ns() - t0;
            __atomic_store_n(&q->step_ns_est, est ? est - est / 8 + took / 8 : took, __ATOMIC_RELAXED);
            return MK_OK;
        }
        uint64_t now = mk_hq_now_ns(), el = now - t0;
        if (now - last_probe >= MK_HQ_PROBE_NS) {
            last_probe = now;
            char in[64], during[64];
            snprintf(in, sizeof in, "in step %u (pos %d)", n - 1, req->cmd.pos);
            snprintf(during, sizeof during, "during step %u (pos %d)", n - 1, req->cmd.pos);
            enum mk_status st = mk_hq_check_device(q, in, during, &req->err);
            if (st != MK_OK) return st;
        }
        if (el >= limit) {
            char head[96];
            snprintf(head, sizeof head, "step %u (pos %d, token %d) got no answer", n - 1, req->cmd.pos,
                     req->cmd.token);
            return mk_hq_timeout(q, head, "", &req->err);
        }
        mk_hq_pause(el, spin_from, spin_to, &backoff);
    }
}

/* Posts one command: fields first, then the sequence number with release. */
static uint32_t mk_hq_post(struct mk_hostqueue *q, const struct mk_step_cmd *cmd) {
    q->mb->cmd = *cmd;
    uint32_t n = q->seq + 1u;
    __atomic_store_n(&q->mb->cmd_seq, n, __ATOMIC_RELEASE);
    __atomic_store_n(&q->seq, n, __ATOMIC_RELEASE);
    return n;
}

/* Next queued command, or NULL once stop is asked and the ring is empty. */
static struct mk_hq_req *mk_hq_take(struct mk_hostqueue *q) {
    uint64_t t0 = mk_hq_now_ns();
    for (uint32_t i = 1;; i++) {
        if (__atomic_load_n(&q->n_queued, __ATOMIC_ACQUIRE) || (i & 63u) == 0) {
            pthread_mutex_lock(&q->mu);
            bool sleep_now = (i & 63u) == 0 && mk_hq_now_ns() - t0 > MK_HQ_IDLE_SPIN_NS;
            while ((q->head == q->tail || q->direct) && !(q->stop_requested && !q->direct) && sleep_now) {
                q->feeder_sleeping = true;
                pthread_cond_wait(&q->cv_feeder, &q->mu);
                q->feeder_sleeping = false;
            }
            struct mk_hq_req *req = NULL;
            bool stop = false;
            if (q->direct) {
                /* A generation owns the mailbox: nothing is taken, and STOP waits for it. */
            } else if (q->head != q->tail) {
                req = q->ring[q->head % MK_HQ_CAP];
                q->head++;
                q->busy = true;
                __atomic_store_n(&q->n_queued, q->tail - q->head, __ATOMIC_RELEASE);
                __atomic_store_n(&req->state, MK_HQ_POSTED, __ATOMIC_RELAXED);
            } else if (q->stop_requested) {
                stop = true;
            }
            pthread_mutex_unlock(&q->mu);
            if (req || stop) return req;
        }
        mk_hq_relax();
    }
}

static void *mk_hq_feeder_main(void *arg) {
    struct mk_hostqueue *q = arg;
    /* Short sleeps must end on time: the default 50 us slack would be the whole backoff. */
    prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
    for (;;) {
        struct mk_hq_req *req = mk_hq_take(q);
        if (!req) break;
        if (mk_hostqueue_poisoned(q)) {
            req->err = q->poison_err;
            mk_error_prefix(&req->err, "refused, an earlier failure poisoned the session");
            mk_hq_complete(q, req, q->poison_err.status);
            continue;
        }
        uint32_t n = mk_hq_post(q, &req->cmd);
        mk_hq_complete(q, req, mk_hq_wait_done(q, req, n));
    }
    /* A poisoned device may never read it; a live one leaves its loop. */
    if (!mk_hostqueue_poisoned(q)) {
        struct mk_step_cmd stop;
        memset(&stop, 0, sizeof stop);
        stop.cmd = MK_CMD_STOP;
        mk_hq_post(q, &stop);
    }
    return NULL;
}

enum mk_status mk_hostqueue_submit(struct mk_hostqueue *q, const struct mk_step_cmd *cmd,
                                   struct mk_hostqueue_result *res, struct mk_error *err) {
    if (mk_hostqueue_poisoned(q)) {
        if (err) {
            *err = q->poison_err;
            mk_error_prefix(err, "refused, an earlier failure poisoned the session");
        }
        return q->poison_err.status;
    }
    struct mk_hq_req req;
    memset(&req, 0, sizeof req);
    req.cmd = *cmd;
    pthread_mutex_lock(&q->mu);
    while (q->tail - q->head == MK_HQ_CAP && !q->stop_requested) pthread_cond_wait(&q->cv_done, &q->mu);
    if (q->stop_requested) {
        pthread_mutex_unlock(&q->mu);
        return mk_error_set(err, MK_ERR_CANCELLED, "the command queue is stopping");
    }
    q->ring[q->tail % MK_HQ_CAP] = &req;
    q->tail++;
    const uint32_t ahead_and_self = q->tail - q->head; /* not counting one the feeder may hold */
    __atomic_store_n(&q->n_queued, q->tail - q->head, __ATOMIC_RELEASE);
    if (q->feeder_sleeping) pthread_cond_signal(&q->cv_feeder);
    pthread_mutex_unlock(&q->mu);

    /* The answer is due after the requests ahead of this one and its own step; the feeder
     * broadcasts cv_done on every answer. */
    const uint64_t t0 = mk_hq_now_ns(), est = __atomic_load_n(&q->step_ns_est, __ATOMIC_RELAXED);
    const uint64_t due = est * (uint64_t)ahead_and_self, half = MK_HQ_SPIN_FIXED_NS + est / MK_HQ_SPIN_SHARE;
    const uint64_t spin_from = due > half + MK_HQ_SUBMIT_EARLY_NS ? due - half - MK_HQ_SUBMIT_EARLY_NS : 0;
    const uint64_t spin_to = due + half;
    uint64_t backoff = MK_HQ_SLEEP_MIN_NS;
    while (__atomic_load_n(&req.state, __ATOMIC_ACQUIRE) != MK_HQ_DONE) {
        const uint64_t el = mk_hq_now_ns() - t0;
        if (el < spin_to + MK_HQ_SUBMIT_BLOCK_NS) {
            mk_hq_pause(el, spin_from, spin_to, &backoff);
        } else {
            pthread_mutex_lock(&q->mu);
            while (__atomic_load_n(&req.state, __ATOMIC_ACQUIRE) != MK_HQ_DONE) pthread_cond_wait(&q->cv_done, &q->mu);
            pthread_mutex_unlock(&q->mu);
        }
    }
    if (req.st != MK_OK) {
        if (err) *err = req.err;
        return req.st;
    }
    if (res) *res = req.res;
    return MK_OK;
}

/* Waits until the feeder is idle with nothing queued, then keeps it off the mailbox. */
static enum mk_status mk_hq_acquire_direct(struct mk_hostqueue *q, struct mk_error *err) {
    pthread_mutex_lock(&q->mu);
    while ((q->busy || q->head != q->tail || q->direct) && !q->stop_requested) pthread_cond_wait(&q->cv_done, &q->mu);
    if (q->stop_requested) {
        pthread_mutex_unlock(&q->mu);
        return mk_error_set(err, MK_ERR_CANCELLED, "the command queue is stopping");
    }
    q->direct = true;
    pthread_mutex_unlock(&q->mu);
    return MK_OK;
}

static void mk_hq_release_direct(struct mk_hostqueue *q) {
    pthread_mutex_lock(&q->mu);
    q->direct = false;
    if (q->feeder_sleeping) pthread_cond_signal(&q->cv_feeder);
    pthread_cond_broadcast(&q->cv_done);
    pthread_mutex_unlock(&q->mu);
}

enum mk_status mk_hostqueue_generate(struct mk_hostqueue *q, const struct mk_step_cmd *cmd,
                                     const struct mk_hostqueue_gen *gen, struct mk_hostqueue_gen_result *res,
                                     struct mk_error *err) {
    memset(res, 0, sizeof *res);
    if (mk_hostqueue_poisoned(q)) {
        if (err) {
            *err = q->poison_err;
            mk_error_prefix(err, "refused, an earlier failure poisoned the session");
        }
        return q->poison_err.status;
    }
    if (!gen->max_steps || gen->n_stop > MK_GEN_MAX_STOP || (gen->n_stop && !gen->stop) || !gen->on_token)
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "generate: max_steps %u must be >= 1, the stop set holds at most %u tokens (got %u), and "
                            "on_token is required",
                            gen->max_steps, MK_GEN_MAX_STOP, gen->n_stop);
    enum mk_status st = mk_hq_acquire_direct(q, err);
    if (st != MK_OK) return st;

    struct mk_mailbox *mb = q->mb;
    mb->gen_max = gen->max_steps;
    mb->gen_n_stop = gen->n_stop;
    for (uint32_t i = 0; i < gen->n_stop; i++) mb->gen_stop[i] = gen->stop[i];
    mb->gen_read = 0;
    mb->gen_cancel = 0;
    mb->gen_count = 0;
    mb->gen_why = MK_GEN_RUNNING;
    struct mk_step_cmd c = *cmd;
    c.cmd = MK_CMD_GENERATE;
    const uint32_t n = mk_hq_post(q, &c); /* its release orders every field above */

    const char *what = q->p.what ? q->p.what : "device";
    const uint64_t limit = (uint64_t)(q->p.watchdog_ms ? q->p.watchdog_ms : MK_HQ_DEFAULT_WATCHDOG_MS) * 1000000ull;
    uint64_t est = __atomic_load_n(&q->step_ns_est, __ATOMIC_RELAXED);
    uint64_t t_last = mk_hq_now_ns(), last_probe = t_last, backoff = MK_HQ_SLEEP_MIN_NS;
    uint32_t seen = 0;
    uint64_t t_prev_dev = 0; /* device clock: when the token before was written */
    bool stopped = false;
    for (;;) {
        /* done_seq first: once it is posted, gen_count is final. */
        const bool done = __atomic_load_n(&mb->done_seq, __ATOMIC_ACQUIRE) == n;
        const uint32_t count = __atomic_load_n(&mb->gen_count, __ATOMIC_ACQUIRE);
        if (count != seen) {
            if (count - seen > MK_GEN_RING || count > gen->max_steps) {
                st = mk_error_set(err, MK_ERR_INTERNAL,
                                  "%s reported %u generated tokens after %u (ring of %u, at most %u asked): the "
                                  "mailbox is corrupt",
                                  what, count, seen, MK_GEN_RING, gen->max_steps);
                mk_hq_poison(q, err);
                break;
            }
            for (uint32_t i = seen; i < count && !stopped; i++) {
                const int32_t tok = mb->gen_token[i % MK_GEN_RING];
                const uint64_t t = mb->gen_t_ns[i % MK_GEN_RING];
                /* The device wrote its start before its first token. */
                const uint64_t from = i ? t_prev_dev : mb->t_start_ns;
                t_prev_dev = t;
                res->n_delivered++;
                if (gen->on_token(gen->user, i, tok, t > from ? t - from : 0)) {
                    stopped = true;
                    __atomic_store_n(&mb->gen_cancel, 1u, __ATOMIC_RELEASE);
                }
            }
            /* The ring slots are read: the device may reuse them. */
            __atomic_store_n(&mb->gen_read, count, __ATOMIC_RELEASE);
            const uint64_t now = mk_hq_now_ns(), per = (now - t_last) / (count - seen);
            est = est ? est - est / 8 + per / 8 : per;
            t_last = now;
            seen = count;
            backoff = MK_HQ_SLEEP_MIN_NS;
            continue;
        }
        if (done || st != MK_OK) break;
        const uint64_t now = mk_hq_now_ns(), el = now - t_last;
        if (now - last_probe >= MK_HQ_PROBE_NS) {
            last_probe = now;
            /* A failed device still hands over the tokens it finished: one more look at the ring. */
            char where[64];
            snprintf(where, sizeof where, "generating from pos %d (%u tokens in)", c.pos, seen);
            if ((st = mk_hq_check_device(q, where, where, err)) != MK_OK) continue;
        }
        if (el >= limit) {
            char head[64], tail[32];
            snprintf(head, sizeof head, "generating from pos %d gave no token", c.pos);
            snprintf(tail, sizeof tail, " after its %u-th", seen);
            st = mk_hq_timeout(q, head, tail, err);
            break;
        }
        const uint64_t half = MK_HQ_SPIN_FIXED_NS + est / MK_HQ_SPIN_SHARE;
        mk_hq_pause(el, est > half ? est - half : 0, est + half, &backoff);
    }
    if (st == MK_OK) {
        __atomic_store_n(&q->step_ns_est, est, __ATOMIC_RELAXED);
        res->n_steps = seen;
        res->why = mb->gen_why;
        res->t_start_ns = mb->t_start_ns;
        res->t_end_ns = mb->t_end_ns;
    }
    mk_hq_release_direct(q);
    return st;
}

void mk_hostqueue_cancel(struct mk_hostqueue *q) {
    pthread_mutex_lock(&q->mu);
    while (q->head != q->tail) {
        struct mk_hq_req *req = q->ring[q->head % MK_HQ_CAP];
        q->head++;
        mk_error_set(&req->err, MK_ERR_CANCELLED, "step at pos %d was cancelled before it was posted", req->cmd.pos);
        req->st = MK_ERR_CANCELLED;
        __atomic_store_n(&req->state, MK_HQ_DONE, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&q->n_queued, 0u, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&q->cv_done);
    pthread_mutex_unlock(&q->mu);
}

void mk_hostqueue_stop(struct mk_hostqueue *q) {
    if (!q || !q->started || q->joined) return;
    pthread_mutex_lock(&q->mu);
    q->stop_requested = true;
    pthread_cond_signal(&q->cv_feeder);
    pthread_cond_broadcast(&q->cv_done);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->feeder, NULL);
    q->joined = true;
}

void mk_hostqueue_free(struct mk_hostqueue *q) {
    if (!q) return;
    mk_hostqueue_stop(q);
    if (q->mb) {
        if (q->p.cu) {
            struct mk_error e;
            MK_CU(q->p.cu, &e, cuMemFreeHost(q->mb));
        } else {
            free(q->mb);
        }
    }
    pthread_cond_destroy(&q->cv_feeder);
    pthread_cond_destroy(&q->cv_done);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

enum mk_status mk_hostqueue_create(const struct mk_hostqueue_params *p, struct mk_hostqueue **out,
                                   struct mk_error *err) {
    *out = NULL;
    struct mk_hostqueue *q = calloc(1, sizeof *q);
    if (!q) return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the host queue");
    q->p = *p;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv_feeder, NULL);
    pthread_cond_init(&q->cv_done, NULL);
    enum mk_status st = MK_OK;
    if (p->cu) {
        void *h = NULL;
        if (MK_CU(p->cu, err,
                  cuMemHostAlloc(&h, sizeof(struct mk_mailbox),
                                 MK_CU_MEMHOSTALLOC_DEVICEMAP | MK_CU_MEMHOSTALLOC_PORTABLE))) {
            st = MK_ERR_CUDA;
            goto fail;
        }
        q->mb = h;
        if (MK_CU(p->cu, err, cuMemHostGetDevicePointer_v2(&q->mb_dev, h, 0))) {
            st = MK_ERR_CUDA;
            goto fail;
        }
    } else {
        q->mb = aligned_alloc(64, sizeof(struct mk_mailbox));
        if (!q->mb) {
            st = mk_error_set(err, MK_ERR_NOMEM, "out of memory for the mailbox");
            goto fail;
        }
    }
    memset(q->mb, 0, sizeof *q->mb);
    if (pthread_create(&q->feeder, NULL, mk_hq_feeder_main, q) != 0) {
        st = mk_error_set(err, MK_ERR_NOMEM, "cannot start the host queue's feeder thread");
        goto fail;
    }
    q->started = true;
    *out = q;
    return MK_OK;
fail:
    mk_hostqueue_free(q);
    return st;
}
