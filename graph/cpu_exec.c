/* CPU executor: N pthread workers run a program with exactly the megakernel's protocol
 * (mailbox command, atomic work counter, acquire/release dependency counters). */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graph/cpu_exec.h"

struct mk_cpu_exec {
    const struct mk_program *prog;
    uint32_t n_threads;
    pthread_t *threads; /* (n_threads) */
    uint32_t n_started;
    float *arena;             /* (arena_floats) */
    float *k_cache, *v_cache; /* (layer, n_ctx, kv_dim) */
    float *scratch;           /* (n_threads, scratch_floats) */
    uint32_t scratch_floats;
    uint32_t *counters; /* (n_counters) only grow */
    uint64_t work;      /* dynamic schedule: next global task index */
    struct mk_step_state state;
    struct mk_mailbox mailbox;
    uint32_t seq;  /* host: commands posted */
    uint32_t stop; /* set before `go` when the command is STOP: late workers must not
                                   * read state.cmd, which the next command may be overwriting */
    int bad_op;    /* set when a worker meets an unknown opcode */
};

struct mk_cpu_worker {
    struct mk_cpu_exec *e;
    uint32_t id;
};

/* Spins briefly, then yields, then sleeps: more workers than cores must still make progress. */
static void mk_cpu_backoff(uint32_t *spins) {
    uint32_t s = (*spins)++;
    if (s < 64) return;
    if (s < 256) {
        sched_yield();
        return;
    }
    struct timespec ts = { 0, 20000 };
    nanosleep(&ts, NULL);
}

static inline uint32_t mk_load_acquire(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

static void mk_cpu_wait(const struct mk_cpu_exec *e, const struct mk_wait *w, uint32_t step) {
    if (w->ctr == MK_NO_COUNTER) return;
    uint32_t target = step * w->mul + w->add, spins = 0;
    while ((int32_t)(mk_load_acquire(&e->counters[w->ctr]) - target) < 0) mk_cpu_backoff(&spins);
}

static void mk_cpu_exec_task(struct mk_cpu_exec *e, struct mk_cpu_ctx *ctx, uint32_t t, uint32_t step) {
    const struct mk_program *p = e->prog;
    uint32_t i = mk_program_instr_of_task(p, t);
    const struct mk_instr *in = &p->instrs[i];
    mk_cpu_wait(e, &in->wait[0], step);
    mk_cpu_wait(e, &in->wait[1], step);
    int32_t tok = -1;
    if (mk_cpu_run_task(ctx, in, t - p->task_base[i], &tok) != 0) __atomic_store_n(&e->bad_op, 1, __ATOMIC_RELEASE);
    if (in->op == MK_OP_SAMPLE) {
        e->state.out_token = tok;
        e->mailbox.out_token = tok;
        __atomic_store_n(&e->mailbox.done_seq, step + 1, __ATOMIC_RELEASE);
    }
    if (in->signal != MK_NO_COUNTER) __atomic_fetch_add(&e->counters[in->signal], 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&e->counters[MK_COUNTER_ALL], 1, __ATOMIC_RELEASE);
}

static void *mk_cpu_worker_main(void *arg) {
    struct mk_cpu_worker *wk = arg;
    struct mk_cpu_exec *e = wk->e;
    const struct mk_program *p = e->prog;
    struct mk_cpu_ctx ctx = {
        .weights = p->weights,
        .arena = e->arena,
        .k_cache = e->k_cache,
        .v_cache = e->v_cache,
        .n_ctx = p->n_ctx,
        .cmd = &e->state.cmd,
        .scratch = e->scratch + (size_t)wk->id * e->scratch_floats,
    };
    uint64_t held = UINT64_MAX; /* a task of a later step taken while finishing this one */
    for (uint32_t step = 0;; step++) {
        uint32_t spins = 0;
        if (wk->id == 0) {
            while (mk_load_acquire(&e->mailbox.cmd_seq) != step + 1) mk_cpu_backoff(&spins);
            e->state.cmd = e->mailbox.cmd;
            e->state.step = step;
            if (e->state.cmd.cmd != MK_CMD_STEP) __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&e->state.go, step + 1, __ATOMIC_RELEASE);
        } else {
            while ((int32_t)(mk_load_acquire(&e->state.go) - (step + 1)) < 0) mk_cpu_backoff(&spins);
        }
        if (__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) break;
        if (p->schedule == MK_SCHED_STATIC) {
            for (uint32_t k = p->sched_offsets[wk->id]; k < p->sched_offsets[wk->id + 1]; k++)
                mk_cpu_exec_task(e, &ctx, p->sched_tasks[k], step);
            continue;
        }
        for (;;) {
            if (held == UINT64_MAX) held = __atomic_fetch_add(&e->work, 1, __ATOMIC_RELAXED);
            if (held / p->n_tasks > step) break;
            mk_cpu_exec_task(e, &ctx, (uint32_t)(held % p->n_tasks), step);
            held = UINT64_MAX;
        }
    }
    free(wk);
    return NULL;
}

void mk_cpu_exec_free(struct mk_cpu_exec *e) {
    if (!e) return;
    if (e->n_started) {
        e->mailbox.cmd.cmd = MK_CMD_STOP;
        __atomic_store_n(&e->mailbox.cmd_seq, e->seq + 1, __ATOMIC_RELEASE);
        for (uint32_t i = 0; i < e->n_started; i++) pthread_join(e->threads[i], NULL);
    }
    free(e->threads);
    free(e->arena);
    free(e->k_cache);
    free(e->v_cache);
    free(e->scratch);
    free(e->counters);
    free(e);
}

enum mk_status mk_cpu_exec_create(const struct mk_program *prog, uint32_t n_threads, struct mk_cpu_exec **out,
                                  struct mk_error *err) {
    if (prog->schedule == MK_SCHED_STATIC && prog->n_workers != n_threads)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "program has a static schedule for %u workers, not %u",
                            prog->n_workers, n_threads);
    if (!n_threads) return mk_error_set(err, MK_ERR_INVALID_ARG, "cpu executor needs at least one thread");
    struct mk_cpu_exec *e = calloc(1, sizeof *e);
    if (!e) return mk_error_set(err, MK_ERR_NOMEM, "out of memory creating the cpu executor");
    e->prog = prog;
    e->n_threads = n_threads;
    uint32_t maxc = 0, maxrows = 0;
    for (uint32_t i = 0; i < prog->n_weights; i++)
        if (prog->weights[i].cols > maxc) maxc = prog->weights[i].cols;
    for (uint32_t i = 0; i < prog->n_instr; i++)
        if (prog->instrs[i].op == MK_OP_NORM_QKV_ROPE && prog->instrs[i].args.qkv.rows_per_task > maxrows)
            maxrows = prog->instrs[i].args.qkv.rows_per_task;
    e->scratch_floats = 2 * maxc + maxrows + 16;
    size_t kv = (size_t)prog->n_layer * prog->n_ctx * prog->kv_dim;
    e->threads = calloc(n_threads, sizeof *e->threads);
    e->arena = calloc(prog->arena_floats ? prog->arena_floats : 1, sizeof(float));
    e->k_cache = calloc(kv ? kv : 1, sizeof(float));
    e->v_cache = calloc(kv ? kv : 1, sizeof(float));
    e->scratch = calloc((size_t)n_threads * e->scratch_floats, sizeof(float));
    e->counters = calloc(prog->n_counters, sizeof *e->counters);
    if (!e->threads || !e->arena || !e->k_cache || !e->v_cache || !e->scratch || !e->counters) {
        mk_cpu_exec_free(e);
        return mk_error_set(err, MK_ERR_NOMEM, "out of memory for the cpu executor (KV cache %zu floats)", 2 * kv);
    }
    for (uint32_t i = 0; i < n_threads; i++) {
        struct mk_cpu_worker *wk = malloc(sizeof *wk);
        if (!wk) break;
        *wk = (struct mk_cpu_worker){ e, i };
        if (pthread_create(&e->threads[i], NULL, mk_cpu_worker_main, wk) != 0) {
            free(wk);
            break;
        }
        e->n_started++;
    }
    if (e->n_started != n_threads) {
        /* Workers already started wait for step 0's command; STOP releases them. */
        uint32_t started = e->n_started;
        mk_cpu_exec_free(e);
        return mk_error_set(err, MK_ERR_NOMEM, "could start only %u of %u cpu worker threads", started, n_threads);
    }
    *out = e;
    return MK_OK;
}

enum mk_status mk_cpu_exec_step(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, int32_t *out_token,
                                struct mk_error *err) {
    const struct mk_program *p = e->prog;
    if (cmd->pos < 0 || (uint32_t)cmd->pos >= p->n_ctx)
        return mk_error_set(err, MK_ERR_CONTEXT_FULL, "position %d is outside the context of %u tokens", cmd->pos,
                            p->n_ctx);
    if (cmd->token < 0 || (uint32_t)cmd->token >= p->vocab)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "token %d is outside the vocabulary of %u", cmd->token, p->vocab);
    e->mailbox.cmd = *cmd;
    e->mailbox.cmd.cmd = MK_CMD_STEP;
    uint32_t n = ++e->seq, spins = 0;
    __atomic_store_n(&e->mailbox.cmd_seq, n, __ATOMIC_RELEASE);
    while (mk_load_acquire(&e->mailbox.done_seq) != n) mk_cpu_backoff(&spins);
    if (__atomic_load_n(&e->bad_op, __ATOMIC_ACQUIRE))
        return mk_error_set(err, MK_ERR_INTERNAL, "cpu executor met an unknown opcode in step %u", n - 1);
    *out_token = e->mailbox.out_token;
    return MK_OK;
}

const float *mk_cpu_exec_logits(const struct mk_cpu_exec *e) { return e->arena + e->prog->logits_off; }

/* ---- The cpu backend: compiles the model's program for the worker count and runs it. ---- */

struct mk_cpu_backend {
    struct mk_backend base;
    struct mk_program *prog;
    struct mk_cpu_exec *exec;
};

static enum mk_status mk_cpu_backend_step(struct mk_backend *b, const struct mk_step_cmd *cmd, int32_t *tok,
                                          struct mk_error *err) {
    return mk_cpu_exec_step(((struct mk_cpu_backend *)b)->exec, cmd, tok, err);
}

static enum mk_status mk_cpu_backend_logits(struct mk_backend *b, float *out, struct mk_error *err) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    memcpy(out, mk_cpu_exec_logits(cb->exec), cb->prog->vocab * sizeof(float));
    return MK_OK;
}

static enum mk_status mk_cpu_backend_reset(struct mk_backend *b, struct mk_error *err) { return MK_OK; }

static void mk_cpu_backend_free(struct mk_backend *b) {
    struct mk_cpu_backend *cb = (struct mk_cpu_backend *)b;
    if (!cb) return;
    mk_cpu_exec_free(cb->exec);
    mk_program_free(cb->prog);
    free(cb);
}

static const struct mk_backend_vtbl mk_cpu_backend_vtbl = {
    "cpu", mk_cpu_backend_step, mk_cpu_backend_logits, mk_cpu_backend_reset, mk_cpu_backend_free,
};

enum mk_status mk_backend_create_cpu(const struct mk_model *m, const struct mk_backend_params *bp,
                                     struct mk_backend **out, struct mk_error *err) {
    struct mk_cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return mk_error_set(err, MK_ERR_NOMEM, "out of memory creating the cpu backend");
    uint32_t threads = bp->n_threads;
    if (!threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (uint32_t)n : 1;
    }
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = threads;
    cp.n_ctx = bp->n_ctx;
    enum mk_status st = mk_program_compile(m, &cp, &cb->prog, err);
    if (st == MK_OK) st = mk_cpu_exec_create(cb->prog, threads, &cb->exec, err);
    if (st != MK_OK) {
        mk_cpu_backend_free(&cb->base);
        return st;
    }
    cb->base.vt = &mk_cpu_backend_vtbl;
    cb->base.kind = MK_BACKEND_CPU;
    cb->base.n_ctx = bp->n_ctx;
    *out = &cb->base;
    return MK_OK;
}
