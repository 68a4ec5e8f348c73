/* CPU executor: the calling thread and N-1 pthread workers run a program with the megakernel's
 * protocol (mailbox command, atomic work counter, acquire/release dependency counters); every
 * wait spins briefly, then sleeps on a futex until the signaller wakes it. A failure (or the
 * caller's watchdog) aborts the step: every wait also ends on the abort flag. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/model.h"
#include "graph/cpu_exec.h"

/* Polls before a waiter sleeps. Long enough to cover a dependency on a task that is running on
 * another core right now (a few microseconds), short enough that on a busy machine a waiter gives
 * its core back instead of burning the time slice the thread it waits for needs. */
#define MK_CPU_SPIN 2000u

/* Weight bytes a step must read per worker before another worker pays for itself: a dependency
 * hand-off between workers costs microseconds when cores are free and a scheduler slice when they
 * are not, while a core streams these bytes in the order of a millisecond. */
#define MK_CPU_BYTES_PER_WORKER (4ull << 20)

/* Watchdog of a step when the backend params give none: generous, since a big model on a busy
 * machine may take seconds per step on the CPU. */
#define MK_CPU_DEFAULT_WATCHDOG_MS 60000u

/* How long mk_cpu_exec_free waits for an aborted worker to leave before it abandons the executor. */
#define MK_CPU_JOIN_WAIT_MS 2000u

/* Why a step failed, recorded once (the first failure wins). */
struct mk_cpu_failure {
    enum mk_status status;
    uint32_t step, instr, task, worker;
    const char *what; /* static text */
};

/* An event count: waiters sleep on seq; a signaller that sees sleepers bumps seq and wakes them. */
struct mk_cpu_event {
    uint32_t seq;
    uint32_t sleepers;
};

struct mk_cpu_exec {
    const struct mk_program *prog;
    uint32_t n_threads; /* workers, the caller of step included (it is worker 0) */
    pthread_t *threads; /* (n_threads - 1) */
    uint32_t n_started;
    float *arena;            /* (arena_floats) */
    void *k_cache, *v_cache; /* kv_type (layer, n_ctx, kv_dim) */
    const float *f16;        /* mk_fp16_table() for an f16 cache, else NULL */
    bool owns_kv;            /* false: another executor's cache (mk_cpu_exec_create_shared_kv) */
    uint32_t last_n_out;     /* output rows of the last step */
    float *scratch;          /* (n_threads, scratch_floats) */
    uint32_t scratch_floats; /* ... of which the last row_floats are the worker's dequantized row */
    uint32_t row_floats;
    uint32_t *counters; /* (n_counters) signals only grow; ATTN_PARTIAL's arrivals go back to 0 */
    uint64_t work;      /* dynamic schedule: next global task index */
    uint64_t held0;     /* worker 0's task of a later step, taken while finishing this one */
    struct mk_step_state state;
    struct mk_mailbox mailbox;
    struct mk_cpu_event ev_work; /* workers: go and the dependency counters */
    struct mk_cpu_event ev_host; /* the caller: the step's last task */
    uint32_t seq;                /* host: commands posted */
    uint32_t stop;               /* set before `go` when the command is STOP */
    uint32_t abort;              /* set once a step failed: every wait ends, the executor is done */
    uint32_t failed;             /* 0, 1 while fail is written, 2 once it is readable */
    struct mk_cpu_failure fail;
    uint64_t watchdog_ns;
    struct mk_fault fault;
    uint32_t fault_task; /* the global task index the injected fault hits */
    uint32_t n_exited;   /* workers that left their loop (a trapped one leaves early) */
    uint64_t *trace;     /* (n_tasks, 3) start after waits ns, end ns, worker; NULL = off */
};

struct mk_cpu_worker {
    struct mk_cpu_exec *e;
    uint32_t id;
};

static inline void mk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline bool mk_cpu_reached(const uint32_t *word, uint32_t target) {
    return (int32_t)(__atomic_load_n(word, __ATOMIC_SEQ_CST) - target) >= 0;
}

static uint64_t mk_cpu_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Called after the signaller's seq_cst update of what waiters test. All four accesses (update,
 * this load of sleepers; the waiter's increment of sleepers, its recheck) are seq_cst, so they
 * fall in one order: either the recheck sees the update or this load sees the sleeper. */
static void mk_cpu_event_wake(struct mk_cpu_event *ev) {
    if (!__atomic_load_n(&ev->sleepers, __ATOMIC_SEQ_CST)) return;
    __atomic_fetch_add(&ev->seq, 1u, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &ev->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline bool mk_cpu_aborted(struct mk_cpu_exec *e) { return __atomic_load_n(&e->abort, __ATOMIC_SEQ_CST) != 0; }

/* Records the step's failure (the first one wins), then aborts: the flag is set like a counter
 * update, and both events woken, so that every wait sees it. */
static void mk_cpu_fail(struct mk_cpu_exec *e, const struct mk_cpu_failure *f) {
    uint32_t idle = 0;
    if (__atomic_compare_exchange_n(&e->failed, &idle, 1u, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        e->fail = *f;
        __atomic_store_n(&e->failed, 2u, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&e->abort, 1u, __ATOMIC_SEQ_CST);
    mk_cpu_event_wake(&e->ev_work);
    mk_cpu_event_wake(&e->ev_host);
}

/* Waits until *word (a sequence that only grows, wrapping) reaches target: true, or false once
 * the executor aborts or deadline_ns (CLOCK_MONOTONIC; 0 = none) passes. */
static bool mk_cpu_wait_ge(struct mk_cpu_exec *e, struct mk_cpu_event *ev, const uint32_t *word, uint32_t target,
                           uint64_t deadline_ns) {
    for (uint32_t i = 0; i < MK_CPU_SPIN; i++) {
        if (mk_cpu_reached(word, target)) return true;
        mk_cpu_relax();
    }
    while (!mk_cpu_reached(word, target)) {
        if (mk_cpu_aborted(e)) return false;
        struct timespec rel, *timeout = NULL;
        if (deadline_ns) {
            uint64_t now = mk_cpu_now_ns();
            if (now >= deadline_ns) return false;
            rel.tv_sec = (time_t)((deadline_ns - now) / 1000000000ull);
            rel.tv_nsec = (long)((deadline_ns - now) % 1000000000ull);
            timeout = &rel;
        }
        __atomic_fetch_add(&ev->sleepers, 1u, __ATOMIC_SEQ_CST);
        uint32_t seq = __atomic_load_n(&ev->seq, __ATOMIC_SEQ_CST);
        /* A bump of seq after this load makes the futex call return at once. */
        if (!mk_cpu_reached(word, target) && !mk_cpu_aborted(e))
            syscall(SYS_futex, &ev->seq, FUTEX_WAIT_PRIVATE, seq, timeout, NULL, 0);
        __atomic_fetch_sub(&ev->sleepers, 1u, __ATOMIC_SEQ_CST);
    }
    return true;
}

static bool mk_cpu_wait(struct mk_cpu_exec *e, const struct mk_wait *w, uint32_t step, uint64_t deadline_ns) {
    if (w->ctr == MK_NO_COUNTER) return true;
    return mk_cpu_wait_ge(e, &e->ev_work, &e->counters[w->ctr], step * w->mul + w->add, deadline_ns);
}

/* The injected fault, if task t of step is where it strikes: false when the task must not go on
 * (the failure is recorded; a hung worker returns only once the executor aborts). */
static bool mk_cpu_inject(struct mk_cpu_exec *e, uint32_t id, uint32_t t, uint32_t i, uint32_t step,
                          uint64_t deadline_ns) {
    if (e->fault.kind == MK_FAULT_NONE || step != e->fault.step || t != e->fault_task) return true;
    struct mk_cpu_failure f = { MK_ERR_INTERNAL, step, i, t, id, "an op failed (injected fault)" };
    if (e->fault.kind == MK_FAULT_TRAP)
        f.what =
            id ? "the worker thread failed and ended (injected trap)" : "the calling worker failed (injected trap)";
    if (e->fault.kind == MK_FAULT_HANG) {
        /* Stops signalling: waits on a word nothing changes until the watchdog aborts the step. */
        uint32_t never = 0;
        mk_cpu_wait_ge(e, &e->ev_work, &never, 1u, deadline_ns);
        return false;
    }
    mk_cpu_fail(e, &f);
    return false;
}

/* One task: its waits, its op, its signals. False when the step aborted (or this task failed). */
static bool mk_cpu_exec_task(struct mk_cpu_exec *e, struct mk_cpu_ctx *ctx, uint32_t id, uint32_t t, uint32_t step,
                             uint64_t deadline_ns) {
    const struct mk_program *p = e->prog;
    uint32_t i = mk_program_instr_of_task(p, t);
    const struct mk_instr *in = &p->instrs[i];
    if (!mk_cpu_wait(e, &in->wait[0], step, deadline_ns) || !mk_cpu_wait(e, &in->wait[1], step, deadline_ns))
        return false;
    if (!mk_cpu_inject(e, id, t, i, step, deadline_ns)) return false;
    const uint64_t t0 = e->trace ? mk_cpu_now_ns() : 0;
    int32_t tok = -1;
    if (mk_cpu_run_task(ctx, in, t - p->task_base[i], &tok) != 0) {
        struct mk_cpu_failure f = { MK_ERR_INTERNAL, step, i, t, id, "unknown opcode" };
        mk_cpu_fail(e, &f);
        return false;
    }
    if (e->trace) { /* before the signals, which publish it with the step's end */
        e->trace[3ull * t] = t0;
        e->trace[3ull * t + 1] = mk_cpu_now_ns();
        e->trace[3ull * t + 2] = id;
    }
    if (in->op == MK_OP_SAMPLE) {
        e->state.out_token = tok;
        e->mailbox.out_token = tok;
        __atomic_store_n(&e->mailbox.done_seq, step + 1, __ATOMIC_RELEASE);
    }
    if (in->signal != MK_NO_COUNTER) __atomic_fetch_add(&e->counters[in->signal], 1, __ATOMIC_SEQ_CST);
    uint32_t all = __atomic_add_fetch(&e->counters[MK_COUNTER_ALL], 1, __ATOMIC_SEQ_CST);
    mk_cpu_event_wake(&e->ev_work);
    /* The step ends when all its tasks did (not at SAMPLE): the next command rewrites state.cmd,
     * which tasks after SAMPLE may still read. */
    if (all == (step + 1) * p->n_tasks) mk_cpu_event_wake(&e->ev_host);
    return true;
}

/* Worker id's share of one step; *held carries a dynamic-schedule task of the next step. False
 * when the step aborted. */
static bool mk_cpu_run_share(struct mk_cpu_exec *e, struct mk_cpu_ctx *ctx, uint32_t id, uint32_t step, uint64_t *held,
                             uint64_t deadline_ns) {
    const struct mk_program *p = e->prog;
    if (p->schedule == MK_SCHED_STATIC) {
        for (uint32_t k = p->sched_offsets[id]; k < p->sched_offsets[id + 1]; k++)
            if (!mk_cpu_exec_task(e, ctx, id, p->sched_tasks[k], step, deadline_ns)) return false;
        return true;
    }
    for (;;) {
        if (*held == UINT64_MAX) *held = __atomic_fetch_add(&e->work, 1, __ATOMIC_RELAXED);
        if (*held / p->n_tasks > step) return true;
        if (!mk_cpu_exec_task(e, ctx, id, (uint32_t)(*held % p->n_tasks), step, deadline_ns)) return false;
        *held = UINT64_MAX;
    }
}

static struct mk_cpu_ctx mk_cpu_ctx_of(struct mk_cpu_exec *e, uint32_t id) {
    const struct mk_program *p = e->prog;
    return (struct mk_cpu_ctx){
        .weights = p->weights,
        .arena = e->arena,
        .k_cache = e->k_cache,
        .v_cache = e->v_cache,
        .kv_type = p->kv_type,
        .f16 = e->f16,
        .n_ctx = p->n_ctx,
        .cmd = &e->state.cmd,
        .scratch = e->scratch + (size_t)id * e->scratch_floats,
        .row = e->scratch + (size_t)id * e->scratch_floats + e->scratch_floats - e->row_floats,
        .ubatch = p->ubatch > 1 ? p->ubatch : 1,
        .act_bf16_min = p->act_bf16_min,
        .counters = e->counters,
    };
}

static void *mk_cpu_worker_main(void *arg) {
    struct mk_cpu_worker *wk = arg;
    struct mk_cpu_exec *e = wk->e;
    struct mk_cpu_ctx ctx = mk_cpu_ctx_of(e, wk->id);
    uint64_t held = UINT64_MAX;
    for (uint32_t step = 0;; step++) {
        if (!mk_cpu_wait_ge(e, &e->ev_work, &e->state.go, step + 1, 0)) break;
        if (__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) break;
        if (!mk_cpu_run_share(e, &ctx, wk->id, step, &held, 0)) break;
    }
    __atomic_fetch_add(&e->n_exited, 1u, __ATOMIC_RELEASE);
    free(wk);
    return NULL;
}

/* Host side of the hand-off: the command to the mailbox (as the device would see it), then the
 * step state the workers read, then `go`. */
static void mk_cpu_post(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd) {
    uint32_t n = ++e->seq;
    e->mailbox.cmd = *cmd;
    __atomic_store_n(&e->mailbox.cmd_seq, n, __ATOMIC_RELEASE);
    e->state.cmd = *cmd;
    e->state.step = n - 1;
    if (cmd->cmd != MK_CMD_STEP) __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&e->state.go, n, __ATOMIC_SEQ_CST);
    mk_cpu_event_wake(&e->ev_work);
}

/* After an abort: waits up to MK_CPU_JOIN_WAIT_MS for every worker to leave its loop (each does
 * once it sees the flag, unless it is stuck in an op). True when all did. */
static bool mk_cpu_quiesce(struct mk_cpu_exec *e) {
    uint64_t until = mk_cpu_now_ns() + MK_CPU_JOIN_WAIT_MS * 1000000ull;
    while (__atomic_load_n(&e->n_exited, __ATOMIC_ACQUIRE) < e->n_started) {
        if (mk_cpu_now_ns() >= until) return false;
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
    return true;
}

void mk_cpu_exec_free(struct mk_cpu_exec *e) {
    if (!e) return;
    if (e->n_started) {
        if (__atomic_load_n(&e->failed, __ATOMIC_ACQUIRE)) {
            /* Aborted: the workers leave by themselves. One stuck in an op may still touch the
             * executor, so it is abandoned (memory and all) rather than freed or waited for. */
            if (!mk_cpu_quiesce(e)) {
                for (uint32_t i = 0; i < e->n_started; i++) pthread_detach(e->threads[i]);
                return;
            }
        } else {
            struct mk_step_cmd stop;
            memset(&stop, 0, sizeof stop);
            stop.cmd = MK_CMD_STOP;
            mk_cpu_post(e, &stop);
        }
        for (uint32_t i = 0; i < e->n_started; i++) pthread_join(e->threads[i], NULL);
    }
    free(e->threads);
    mk_mem_free_big(e->arena);
    if (e->owns_kv) {
        mk_mem_free_big(e->k_cache);
        mk_mem_free_big(e->v_cache);
    }
    mk_mem_free_big(e->scratch);
    free(e->counters);
    free(e->trace);
    free(e);
}

enum mk_status mk_cpu_exec_set_trace(struct mk_cpu_exec *e, struct mk_error *err) {
    if (e->trace) return MK_OK;
    e->trace = calloc((size_t)e->prog->n_tasks * 3, sizeof *e->trace);
    if (!e->trace) return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the trace of %u tasks", e->prog->n_tasks);
    return MK_OK;
}

const uint64_t *mk_cpu_exec_trace(const struct mk_cpu_exec *e) { return e->trace; }

/* Scratch floats one worker needs for any task of prog (see the ops in graph/cpu_ops.c). */
static uint32_t mk_cpu_scratch_floats(const struct mk_program *prog) {
    uint64_t U = prog->ubatch > 1 ? prog->ubatch : 1, maxc = 0, maxrows = 0, attn = 0;
    for (uint32_t i = 0; i < prog->n_weights; i++)
        if (prog->weights[i].cols > maxc) maxc = prog->weights[i].cols;
    for (uint32_t i = 0; i < prog->n_instr; i++) {
        const struct mk_instr *in = &prog->instrs[i];
        if (in->op == MK_OP_NORM_QKV_ROPE && in->args.qkv.rows_per_task > maxrows) maxrows = in->args.qkv.rows_per_task;
        if (in->op == MK_OP_ATTN_CHUNK && (uint64_t)in->args.attn.n_blocks * (in->args.attn.head_dim + 2) > attn)
            attn = (uint64_t)in->args.attn.n_blocks * (in->args.attn.head_dim + 2);
    }
    /* The norm row, (token, cols) normalised inputs, (token, rows) of a QKV tile or two words per
     * token (LM-head maxima, gate and up dots); the attention partials of one head. A residual
     * product's dots (token) and its inputs rounded to bf16 (token, cols) fit in the first two. */
    uint64_t ops = maxc + U + U * maxc + U * (maxrows > 2 ? maxrows : 2);
    return (uint32_t)((ops > attn ? ops : attn) + 16);
}

static enum mk_status mk_cpu_exec_make(const struct mk_program *prog, uint32_t n_threads, struct mk_cpu_exec *kv_owner,
                                       struct mk_cpu_exec **out, struct mk_error *err) {
    if (prog->schedule == MK_SCHED_STATIC && prog->n_workers != n_threads)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "program has a static schedule for %u workers, not %u",
                            prog->n_workers, n_threads);
    if (!n_threads) return mk_error_set(err, MK_ERR_INVALID_ARG, "cpu executor needs at least one thread");
    struct mk_cpu_exec *e = calloc(1, sizeof *e);
    if (!e) return mk_error_set(err, MK_ERR_NOMEM, "out of memory creating the cpu executor");
    e->prog = prog;
    e->n_threads = n_threads;
    e->held0 = UINT64_MAX;
    e->watchdog_ns = (uint64_t)MK_CPU_DEFAULT_WATCHDOG_MS * 1000000ull;
    e->last_n_out = 1;
    for (uint32_t i = 0; i < prog->n_weights; i++)
        if (prog->weights[i].cols > e->row_floats) e->row_floats = prog->weights[i].cols;
    if (2u * prog->kv_dim > e->row_floats) e->row_floats = 2u * prog->kv_dim;
    e->scratch_floats = mk_cpu_scratch_floats(prog) + e->row_floats;
    e->f16 = prog->kv_type == MK_KV_F16 ? mk_fp16_table() : NULL;
    size_t kv = (size_t)prog->n_layer * prog->n_ctx * prog->kv_dim, kv_elem = mk_kv_type_size(prog->kv_type);
    e->threads = calloc(n_threads, sizeof *e->threads);
    e->arena = mk_mem_alloc_big((size_t)prog->arena_floats * sizeof(float));
    e->owns_kv = !kv_owner;
    if (kv_owner) {
        e->k_cache = kv_owner->k_cache;
        e->v_cache = kv_owner->v_cache;
    } else {
        e->k_cache = mk_mem_alloc_big(kv * kv_elem);
        e->v_cache = mk_mem_alloc_big(kv * kv_elem);
    }
    e->scratch = mk_mem_alloc_big((size_t)n_threads * e->scratch_floats * sizeof(float));
    e->counters = calloc(prog->n_counters, sizeof *e->counters);
    if (!e->threads || !e->arena || !e->k_cache || !e->v_cache || !e->scratch || !e->counters) {
        mk_cpu_exec_free(e);
        return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the cpu executor (KV cache %zu bytes)",
                            2 * kv * kv_elem);
    }
    for (uint32_t i = 1; i < n_threads; i++) {
        struct mk_cpu_worker *wk = malloc(sizeof *wk);
        if (!wk) break;
        *wk = (struct mk_cpu_worker){ e, i };
        if (pthread_create(&e->threads[e->n_started], NULL, mk_cpu_worker_main, wk) != 0) {
            free(wk);
            break;
        }
        e->n_started++;
    }
    if (e->n_started != n_threads - 1) {
        /* Workers already started wait for step 0's `go`; STOP releases them. */
        uint32_t started = e->n_started + 1;
        mk_cpu_exec_free(e);
        return mk_error_set(err, MK_ERR_NOMEM, "could start only %u of %u cpu worker threads", started, n_threads);
    }
    *out = e;
    return MK_OK;
}

/* The recorded failure as a message naming the step, and the instruction and worker where known. */
static void mk_cpu_exec_describe_failure(struct mk_cpu_exec *e, struct mk_error *err) {
    const struct mk_cpu_failure *f = &e->fail;
    const struct mk_program *p = e->prog;
    if (f->status == MK_ERR_TIMEOUT) {
        uint32_t done = __atomic_load_n(&e->counters[MK_COUNTER_ALL], __ATOMIC_ACQUIRE) - f->step * p->n_tasks;
        mk_error_set(err, MK_ERR_TIMEOUT,
                     "cpu executor step %u (pos %d): %u of %u tasks done after %llu ms (watchdog): a worker stopped "
                     "signalling; the session is unusable now",
                     f->step, e->state.cmd.pos, done, p->n_tasks, (unsigned long long)(e->watchdog_ns / 1000000ull));
        return;
    }
    mk_error_set(err, f->status, "cpu executor step %u (pos %d): instruction %u '%s', task %u on worker %u: %s",
                 f->step, e->state.cmd.pos, f->instr, f->instr < p->n_instr ? p->labels[f->instr] : "?", f->task,
                 f->worker, f->what);
}

enum mk_status mk_cpu_exec_create(const struct mk_program *prog, uint32_t n_threads, struct mk_cpu_exec **out,
                                  struct mk_error *err) {
    return mk_cpu_exec_make(prog, n_threads, NULL, out, err);
}

enum mk_status mk_cpu_exec_create_shared_kv(const struct mk_program *prog, uint32_t n_threads,
                                            struct mk_cpu_exec *kv_owner, struct mk_cpu_exec **out,
                                            struct mk_error *err) {
    const struct mk_program *o = kv_owner->prog;
    if (o->n_layer != prog->n_layer || o->n_ctx != prog->n_ctx || o->kv_dim != prog->kv_dim ||
        o->kv_type != prog->kv_type)
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "cannot share a KV cache of (%u layers, %u positions, %u, type %d) with a program of (%u, "
                            "%u, %u, type %d)",
                            o->n_layer, o->n_ctx, o->kv_dim, (int)o->kv_type, prog->n_layer, prog->n_ctx, prog->kv_dim,
                            (int)prog->kv_type);
    return mk_cpu_exec_make(prog, n_threads, kv_owner, out, err);
}

/* Posts a checked command (tokens already in the arena for chunk programs) and runs worker 0's share. */
static enum mk_status mk_cpu_exec_run(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, int32_t *out_token,
                                      struct mk_error *err) {
    const struct mk_program *p = e->prog;
    if (__atomic_load_n(&e->failed, __ATOMIC_ACQUIRE) == 2u) {
        mk_cpu_exec_describe_failure(e, err);
        mk_error_prefix(err, "refused, an earlier failure made the cpu executor unusable");
        return e->fail.status;
    }
    struct mk_step_cmd c = *cmd;
    c.cmd = MK_CMD_STEP;
    mk_cpu_post(e, &c);
    uint32_t step = e->seq - 1;
    /* The caller is worker 0: one hand-off fewer per step, and no other thread at all for one. It
     * is also the watchdog: every wait of its own ends at the deadline. */
    const uint64_t deadline = mk_cpu_now_ns() + e->watchdog_ns;
    struct mk_cpu_ctx ctx = mk_cpu_ctx_of(e, 0);
    const uint32_t all = (step + 1) * p->n_tasks;
    bool ok = mk_cpu_run_share(e, &ctx, 0, step, &e->held0, deadline) &&
              mk_cpu_wait_ge(e, &e->ev_host, &e->counters[MK_COUNTER_ALL], all, deadline);
    if (!ok && !mk_cpu_aborted(e)) {
        struct mk_cpu_failure f = { MK_ERR_TIMEOUT, step, UINT32_MAX, UINT32_MAX, UINT32_MAX, "" };
        mk_cpu_fail(e, &f);
    }
    if (!ok) {
        /* The record may still be in writing by the worker that failed first. */
        while (__atomic_load_n(&e->failed, __ATOMIC_ACQUIRE) != 2u) mk_cpu_relax();
        /* Workers may still be in an op of this step: they must be out before the caller's next
         * command (or free) rewrites what they read. */
        mk_cpu_quiesce(e);
        mk_cpu_exec_describe_failure(e, err);
        return e->fail.status;
    }
    *out_token = e->mailbox.out_token;
    return MK_OK;
}

static enum mk_status mk_cpu_check_span(const struct mk_program *p, int32_t pos, uint32_t n, struct mk_error *err) {
    if (pos < 0 || (uint64_t)pos + n > p->n_ctx)
        return mk_error_set(err, MK_ERR_CONTEXT_FULL, "positions %d..%lld are outside the context of %u tokens", pos,
                            (long long)pos + n - 1, p->n_ctx);
    return MK_OK;
}

static enum mk_status mk_cpu_check_token(const struct mk_program *p, int32_t token, struct mk_error *err) {
    if (token < 0 || (uint32_t)token >= p->vocab)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "token %d is outside the vocabulary of %u", token, p->vocab);
    return MK_OK;
}

enum mk_status mk_cpu_exec_step(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, int32_t *out_token,
                                struct mk_error *err) {
    const struct mk_program *p = e->prog;
    enum mk_status st = mk_cpu_check_span(p, cmd->pos, 1, err);
    if (st == MK_OK) st = mk_cpu_check_token(p, cmd->token, err);
    if (st != MK_OK) return st;
    struct mk_step_cmd c = *cmd;
    c.n_tokens = 1;
    c.n_out = 1;
    if (p->tokens_off != MK_NO_BUF && p->ubatch > 1) memcpy(e->arena + p->tokens_off, &c.token, sizeof c.token);
    e->last_n_out = 1;
    return mk_cpu_exec_run(e, &c, out_token, err);
}

enum mk_status mk_cpu_exec_step_chunk(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, const int32_t *tokens,
                                      int32_t *out_tokens, struct mk_error *err) {
    const struct mk_program *p = e->prog;
    const uint32_t U = p->ubatch > 1 ? p->ubatch : 1, n = cmd->n_tokens ? cmd->n_tokens : 1u,
                   n_out = cmd->n_out ? cmd->n_out : 1u;
    if (n > U || n_out > n)
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "a step of %u tokens with %u output rows does not fit a program of %u tokens per step", n,
                            n_out, U);
    enum mk_status st = mk_cpu_check_span(p, cmd->pos, n, err);
    for (uint32_t i = 0; i < n && st == MK_OK; i++) st = mk_cpu_check_token(p, tokens[i], err);
    if (st != MK_OK) return st;
    struct mk_step_cmd c = *cmd;
    c.token = tokens[0];
    if (U == 1) return mk_cpu_exec_step(e, &c, out_tokens, err);
    c.n_tokens = (uint16_t)n;
    c.n_out = (uint16_t)n_out;
    memcpy(e->arena + p->tokens_off, tokens, n * sizeof *tokens);
    e->last_n_out = n_out;
    int32_t last;
    if ((st = mk_cpu_exec_run(e, &c, &last, err)) != MK_OK) return st;
    memcpy(out_tokens, e->arena + p->out_tokens_off, n_out * sizeof *out_tokens);
    return MK_OK;
}

const float *mk_cpu_exec_logits(const struct mk_cpu_exec *e) {
    return e->arena + e->prog->logits_off + (uint64_t)(e->last_n_out - 1) * e->prog->vocab;
}

const float *mk_cpu_exec_logits_row(const struct mk_cpu_exec *e, uint32_t j) {
    if (j >= e->last_n_out) return NULL;
    return e->arena + e->prog->logits_off + (uint64_t)j * e->prog->vocab;
}

void mk_cpu_exec_set_fault(struct mk_cpu_exec *e, const struct mk_fault *fault, uint32_t watchdog_ms) {
    const struct mk_program *p = e->prog;
    e->watchdog_ns = (uint64_t)(watchdog_ms ? watchdog_ms : MK_CPU_DEFAULT_WATCHDOG_MS) * 1000000ull;
    e->fault = fault ? *fault : (struct mk_fault){ MK_FAULT_NONE, 0 };
    /* The first task of the last worker's static share, so that with two or more threads the
     * fault hits a pthread worker, not the caller; the middle task otherwise. */
    e->fault_task = p->n_tasks / 2;
    if (p->schedule == MK_SCHED_STATIC && e->n_threads > 0) {
        uint32_t k = p->sched_offsets[e->n_threads - 1];
        if (k < p->sched_offsets[e->n_threads]) e->fault_task = p->sched_tasks[k];
    }
}

/* ---- The cpu backend: compiles the model's program for the worker count and runs it. ---- */

/* One-token steps run the one-token program (its speed untouched by chunking); chunk steps run
 * the chunk program, over the same KV cache. */
struct mk_cpu_backend {
    struct mk_backend base;
    struct mk_program *prog, *chunk_prog; /* chunk_prog: NULL when ubatch is 1 */
    struct mk_cpu_exec *exec, *chunk_exec;
    bool last_chunk; /* the last step ran the chunk program */
};

static enum mk_status mk_cpu_backend_step(struct mk_backend *b, const struct mk_step_cmd *cmd, int32_t *tok,
                                          struct mk_error *err) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    cb->last_chunk = false;
    return mk_cpu_exec_step(cb->exec, cmd, tok, err);
}

static enum mk_status mk_cpu_backend_step_chunk(struct mk_backend *b, const struct mk_step_cmd *cmd,
                                                const int32_t *tokens, int32_t *out_tokens, struct mk_error *err) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    if (!cb->chunk_exec || cmd->n_tokens <= 1) {
        struct mk_step_cmd c = *cmd;
        c.token = tokens[0];
        return mk_cpu_backend_step(b, &c, out_tokens, err);
    }
    cb->last_chunk = true;
    return mk_cpu_exec_step_chunk(cb->chunk_exec, cmd, tokens, out_tokens, err);
}

/* The token loop behind the generate interface, with the megakernel's end rule (mk_gen_end_after)
 * but each step posted from here: sessions on the CPU take the path they take on the megakernel. */
static enum mk_status mk_cpu_backend_generate(struct mk_backend *b, const struct mk_step_cmd *cmd,
                                              const struct mk_backend_gen *gen, struct mk_backend_gen_result *res,
                                              struct mk_error *err) {
    memset(res, 0, sizeof *res);
    if (!gen->max_steps || gen->n_stop > MK_GEN_MAX_STOP || (gen->n_stop && !gen->stop) || !gen->on_token)
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "generate: max_steps %u must be >= 1, the stop set holds at most %u tokens (got %u), and "
                            "on_token is required",
                            gen->max_steps, MK_GEN_MAX_STOP, gen->n_stop);
    struct mk_step_cmd c = *cmd;
    c.cmd = MK_CMD_STEP;
    for (uint32_t i = 0;; i++) {
        int32_t tok;
        enum mk_status st = mk_cpu_backend_step(b, &c, &tok, err);
        if (st != MK_OK) return st;
        res->n_steps = i + 1u;
        res->n_delivered++;
        const uint32_t cancel = gen->on_token(gen->user, i, tok, b->last_step_ns);
        res->why = mk_gen_end_after(tok, i + 1u, c.pos, b->n_ctx, gen->max_steps, gen->stop, gen->n_stop, cancel);
        if (res->why != MK_GEN_RUNNING) return MK_OK;
        c.token = tok;
        c.pos++;
    }
}

static enum mk_status mk_cpu_backend_logits(struct mk_backend *b, float *out, struct mk_error *err) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    memcpy(out, mk_cpu_exec_logits(cb->last_chunk ? cb->chunk_exec : cb->exec), cb->prog->vocab * sizeof(float));
    return MK_OK;
}

static enum mk_status mk_cpu_backend_logits_row(struct mk_backend *b, uint32_t j, float *out, struct mk_error *err) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    const float *row = mk_cpu_exec_logits_row(cb->last_chunk ? cb->chunk_exec : cb->exec, j);
    if (!row) return mk_error_set(err, MK_ERR_INVALID_ARG, "logits: the last step has no output row %u", j);
    memcpy(out, row, cb->prog->vocab * sizeof(float));
    return MK_OK;
}

static enum mk_status mk_cpu_backend_reset(struct mk_backend *b, struct mk_error *err) { return MK_OK; }

static void mk_cpu_backend_free(struct mk_backend *b) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    if (!cb) return;
    /* The chunk executor uses the one-token executor's KV cache: free it first. */
    mk_cpu_exec_free(cb->chunk_exec);
    mk_cpu_exec_free(cb->exec);
    mk_program_free(cb->chunk_prog);
    mk_program_free(cb->prog);
    free(cb);
}

static const struct mk_backend_vtbl mk_cpu_backend_vtbl = {
    "cpu",
    mk_cpu_backend_step,
    mk_cpu_backend_logits,
    mk_cpu_backend_reset,
    mk_cpu_backend_free,
    mk_cpu_backend_step_chunk,
    mk_cpu_backend_logits_row,
    mk_cpu_backend_generate,
};

uint32_t mk_cpu_allowed_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1u;
}

uint32_t mk_cpu_default_threads(const struct mk_model *m) {
    uint64_t per_worker = m ? mk_model_bytes_per_token(m) / MK_CPU_BYTES_PER_WORKER : 1;
    uint32_t cpus = mk_cpu_allowed_cpus();
    if (per_worker < 1) per_worker = 1;
    return per_worker < cpus ? (uint32_t)per_worker : cpus;
}

enum mk_status mk_backend_create_cpu(const struct mk_model *m, const struct mk_backend_params *bp,
                                     struct mk_backend **out, struct mk_error *err) {
    struct mk_cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return mk_error_set(err, MK_ERR_NOMEM, "out of memory creating the cpu backend");
    uint32_t threads = bp->n_threads ? bp->n_threads : mk_cpu_default_threads(m);
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = threads;
    cp.n_ctx = bp->n_ctx;
    cp.kv_type = bp->kv_type;
    enum mk_status st = mk_program_compile(m, &cp, &cb->prog, err);
    if (st == MK_OK) st = mk_cpu_exec_create(cb->prog, threads, &cb->exec, err);
    cp.ubatch = bp->ubatch ? bp->ubatch : MK_CPU_DEFAULT_UBATCH;
    if (bp->act_f32) cp.act_bf16_min = 0;
    if (cp.ubatch > bp->n_ctx) cp.ubatch = bp->n_ctx;
    if (st == MK_OK && cp.ubatch > 1) {
        st = mk_program_compile(m, &cp, &cb->chunk_prog, err);
        if (st == MK_OK) st = mk_cpu_exec_create_shared_kv(cb->chunk_prog, threads, cb->exec, &cb->chunk_exec, err);
    }
    if (st == MK_OK) mk_cpu_exec_set_fault(cb->exec, &bp->fault, bp->watchdog_ms);
    if (st == MK_OK && cb->chunk_exec) mk_cpu_exec_set_fault(cb->chunk_exec, NULL, bp->watchdog_ms);
    if (st != MK_OK) {
        mk_cpu_backend_free(&cb->base);
        return st;
    }
    cb->base.vt = &mk_cpu_backend_vtbl;
    cb->base.kind = MK_BACKEND_CPU;
    cb->base.n_ctx = bp->n_ctx;
    cb->base.ubatch = cb->chunk_prog ? cp.ubatch : 1;
    *out = &cb->base;
    return MK_OK;
}
