/* Per-task timestamps of one decode step: runs it traced, aggregates per op kind, writes Chrome trace JSON. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/cpu_exec.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "tools/trace.h"

static int mk_trace_cmp(const void *a, const void *b) {
    const struct mk_trace_task *x = a, *y = b;
    if (x->track != y->track) return x->track < y->track ? -1 : 1;
    return x->s < y->s ? -1 : x->s > y->s;
}

static double mk_trace_dur_us(const struct mk_trace_task *t) { return t->e > t->s ? (double)(t->e - t->s) / 1e3 : 0.0; }

static int mk_trace_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The idle time (ns) before task c of tasks sorted by mk_trace_cmp: since the end of the task before
 * it on its track, or for a track's first since the step's start t0. */
static uint64_t mk_trace_idle_ns(const struct mk_trace_task *sorted, uint32_t c, uint64_t t0) {
    const uint64_t prev = c && sorted[c - 1].track == sorted[c].track ? sorted[c - 1].e : t0;
    return sorted[c].s > prev ? sorted[c].s - prev : 0;
}

/* The tasks' median duration and mean idle time before them, per op kind (a copy of the tasks in
 * track order gives each one's idle time). */
static void mk_trace_task_stats(const struct mk_program *p, const struct mk_trace_task *tk, uint64_t t0,
                                struct mk_trace_op *ops) {
    const uint32_t n = p->n_tasks;
    struct mk_trace_task *byt = malloc((size_t)(n ? n : 1) * sizeof *byt);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    uint32_t *op = malloc((size_t)(n ? n : 1) * sizeof *op);
    if (!byt || !d || !op) goto done;
    for (uint32_t i = 0; i < p->n_instr; i++)
        for (uint32_t t = p->task_base[i]; t < p->task_base[i + 1]; t++) op[t] = p->instrs[i].op;
    memcpy(byt, tk, (size_t)n * sizeof *byt);
    qsort(byt, n, sizeof *byt, mk_trace_cmp);
    for (uint32_t c = 0; c < n; c++)
        if (op[byt[c].t] < MK_OP_COUNT) ops[op[byt[c].t]].idle_us += (double)mk_trace_idle_ns(byt, c, t0) / 1e3;
    for (uint32_t o = 0; o < MK_OP_COUNT; o++) {
        uint32_t m = 0;
        for (uint32_t t = 0; t < n; t++)
            if (op[t] == o) d[m++] = mk_trace_dur_us(&tk[t]);
        if (!m) continue;
        qsort(d, m, sizeof *d, mk_trace_cmp_double);
        ops[o].task_med_us = m % 2 ? d[m / 2] : (d[m / 2 - 1] + d[m / 2]) / 2.0;
        ops[o].idle_us /= m;
    }
done:
    free(op);
    free(d);
    free(byt);
}

double mk_trace_ops(const struct mk_program *p, const struct mk_trace_task *tk, struct mk_trace_op *ops) {
    memset(ops, 0, MK_OP_COUNT * sizeof *ops);
    uint64_t step_lo = UINT64_MAX, step_hi = 0;
    uint32_t instrs[MK_OP_COUNT] = { 0 };
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const uint32_t lo = p->task_base[i], hi = p->task_base[i + 1], op = p->instrs[i].op;
        uint64_t first = UINT64_MAX, last = 0;
        double slowest = 0.0;
        for (uint32_t t = lo; t < hi; t++) {
            if (tk[t].s < first) first = tk[t].s;
            if (tk[t].e > last) last = tk[t].e;
            slowest = fmax(slowest, mk_trace_dur_us(&tk[t]));
        }
        if (op < MK_OP_COUNT && hi > lo) {
            ops[op].tasks += hi - lo;
            ops[op].span_us += last > first ? (double)(last - first) / 1e3 : 0.0;
            ops[op].bytes += mk_program_instr_weight_bytes(p, i);
            ops[op].slowest_us += slowest;
            instrs[op]++;
            if (first < step_lo) step_lo = first;
            if (last > step_hi) step_hi = last;
        }
    }
    for (uint32_t o = 0; o < MK_OP_COUNT; o++)
        if (instrs[o]) ops[o].slowest_us /= instrs[o];
    if (step_hi > step_lo) mk_trace_task_stats(p, tk, step_lo, ops);
    return step_hi > step_lo ? (double)(step_hi - step_lo) / 1e3 : 0.0;
}

void mk_trace_print_ops(FILE *f, const struct mk_trace_op *ops, bool per_task) {
    fprintf(f, "%-18s %6s %10s %10s %9s", "op", "tasks", "time us", "MB", "GB/s");
    if (per_task) fprintf(f, " %10s %10s %10s", "task us", "slowest us", "idle us");
    fputc('\n', f);
    for (uint32_t o = 0; o < MK_OP_COUNT; o++) {
        if (!ops[o].tasks) continue;
        fprintf(f, "%-18s %6u %10.1f %10.2f %9.1f", mk_opcode_name(o), ops[o].tasks, ops[o].span_us,
                (double)ops[o].bytes / 1e6, ops[o].span_us > 0 ? (double)ops[o].bytes / (ops[o].span_us * 1e3) : 0.0);
        if (per_task) fprintf(f, " %10.2f %10.2f %10.2f", ops[o].task_med_us, ops[o].slowest_us, ops[o].idle_us);
        fputc('\n', f);
    }
}

int mk_trace_write(const char *path, const struct mk_program *p, struct mk_trace_task *tk, uint32_t n_tracks,
                   const char *track_name) {
    const uint32_t n = p->n_tasks;
    uint64_t t0 = UINT64_MAX;
    for (uint32_t t = 0; t < n; t++)
        if (tk[t].s < t0) t0 = tk[t].s;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mk trace: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"mk step\"}}");
    for (uint32_t w = 0; w < n_tracks; w++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%u,\"args\":{\"name\":\"%s %u\"}}", w,
                track_name, w);
    /* Each track's tasks in the order they ran, so that the idle time before each is known. */
    qsort(tk, n, sizeof *tk, mk_trace_cmp);
    for (uint32_t c = 0; c < n; c++) {
        const uint32_t t = tk[c].t, i = mk_program_instr_of_task(p, t);
        const uint32_t nt = p->task_base[i + 1] - p->task_base[i];
        const char *op = mk_opcode_name(p->instrs[i].op);
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"op\":\"%s\",\"task\":%u,\"weight_bytes\":%" PRIu64 ",\"idle_before_us\":%.3f}}",
                p->labels[i], op, tk[c].track, (double)(tk[c].s - t0) / 1e3,
                (double)(tk[c].e > tk[c].s ? tk[c].e - tk[c].s : 0) / 1e3, op, t - p->task_base[i],
                nt ? mk_program_instr_weight_bytes(p, i) / nt : 0, (double)mk_trace_idle_ns(tk, c, t0) / 1e3);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "mk trace: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* A step command from BOS's first step: greedy, or samp's sampling settings. */
static struct mk_step_cmd mk_trace_cmd(const struct mk_step_cmd *samp) {
    struct mk_step_cmd cmd = { 0 };
    cmd.cmd = MK_CMD_STEP;
    if (samp) {
        cmd.temperature = samp->temperature;
        cmd.top_k = samp->top_k;
        cmd.top_p = samp->top_p;
        cmd.min_p = samp->min_p;
        cmd.seed = samp->seed;
    }
    return cmd;
}

/* mk_trace_run on a CPU executor of its own. */
static int mk_trace_run_cpu(const char *tool, const struct mk_model *m, struct mk_compile_params cp, uint32_t threads,
                            uint32_t ubatch, uint32_t steps, const struct mk_step_cmd *samp, struct mk_program **p,
                            struct mk_trace_task **tk, uint32_t *n_tracks, char *where, size_t where_len) {
    struct mk_error err = { 0 };
    struct mk_step_cmd cmd = mk_trace_cmd(samp);
    int32_t tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    struct mk_cpu_exec *e = NULL;
    cp.n_workers = threads ? threads : mk_cpu_default_threads(m);
    cp.ubatch = ubatch > 1 ? ubatch : 1;
    if (mk_program_compile(m, &cp, p, &err) != MK_OK || mk_cpu_exec_create(*p, cp.n_workers, &e, &err) != MK_OK ||
        mk_cpu_exec_set_trace(e, &err) != MK_OK) {
        fprintf(stderr, "mk %s: %s\n", tool, err.msg);
        mk_cpu_exec_free(e);
        return -1;
    }
    int32_t toks[MK_UBATCH_MAX], outs[MK_UBATCH_MAX];
    for (uint32_t i = 0; i < steps; i++) {
        enum mk_status st;
        if (cp.ubatch > 1) {
            /* Chunk steps of ubatch tokens each, every row's token fed back as the next input. */
            for (uint32_t k = 0; k < cp.ubatch; k++) toks[k] = k ? outs[k - 1] : tok;
            cmd.pos = (int32_t)(i * cp.ubatch);
            cmd.n_tokens = (uint16_t)cp.ubatch;
            cmd.n_out = (uint16_t)cp.ubatch;
            st = mk_cpu_exec_step_chunk(e, &cmd, toks, outs, &err);
            tok = outs[cp.ubatch - 1];
        } else {
            cmd.token = tok;
            cmd.pos = (int32_t)i;
            st = mk_cpu_exec_step(e, &cmd, &tok, &err);
        }
        if (st != MK_OK) {
            fprintf(stderr, "mk %s: step %u: %s\n", tool, i, err.msg);
            mk_cpu_exec_free(e);
            return -1;
        }
    }
    const uint64_t *tr = mk_cpu_exec_trace(e);
    *tk = malloc((size_t)(*p)->n_tasks * sizeof **tk);
    if (*tk)
        for (uint32_t t = 0; t < (*p)->n_tasks; t++)
            (*tk)[t] = (struct mk_trace_task){ tr[3ull * t], tr[3ull * t + 1], (uint32_t)tr[3ull * t + 2], t };
    else
        fprintf(stderr, "mk %s: out of memory for the trace of %u tasks\n", tool, (*p)->n_tasks);
    *n_tracks = cp.n_workers;
    if (cp.ubatch > 1)
        snprintf(where, where_len, "the cpu executor, %u workers, chunk steps of %u tokens", cp.n_workers, cp.ubatch);
    else
        snprintf(where, where_len, "the cpu executor, %u workers", cp.n_workers);
    mk_cpu_exec_free(e);
    return *tk ? 0 : -1;
}

static bool mk_trace_on_token(void *user, uint32_t i, int32_t token, uint64_t step_ns) {
    (void)user, (void)i, (void)token, (void)step_ns;
    return false;
}

/* mk_trace_run on the megakernel backend: the device's timestamps, the program compiled again with
 * the backend's parameters to name each task's instruction and block. */
static int mk_trace_run_gpu(const char *tool, const struct mk_model *m, struct mk_compile_params cp, uint32_t steps,
                            const struct mk_gpu_settings *gs, const struct mk_step_cmd *samp, struct mk_program **p,
                            struct mk_trace_task **tk, uint32_t *n_tracks, char *where, size_t where_len) {
    struct mk_error err = { 0 };
    struct mk_step_cmd cmd = mk_trace_cmd(samp);
    int32_t tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    struct mk_backend_params bp = { 0 };
    bp.kind = MK_BACKEND_MEGAKERNEL;
    bp.n_ctx = cp.n_ctx;
    bp.kv_type = cp.kv_type;
    bp.gpu = *gs;
    /* mk bench --breakdown passes its untraced settings: the timestamps are the point here. */
    if (bp.gpu.trace == MK_GPU_TRACE_OFF) bp.gpu.trace = MK_GPU_TRACE_AFTER_WAITS;
    struct mk_backend *b = NULL;
    uint64_t *tr = NULL;
    struct mk_cuda_backend_info info;
    int rc = -1;
    if (mk_backend_create(m, &bp, &b, &err) != MK_OK) {
        fprintf(stderr, "mk %s: %s (the timestamps come from the megakernel backend; the cpu executor traces too)\n",
                tool, err.msg);
        return -1;
    }
    if (b->vt->generate) {
        /* As tokens are generated: the token loop on the device, each step opened by the last. */
        const struct mk_backend_gen gen = { .max_steps = steps, .on_token = mk_trace_on_token };
        struct mk_backend_gen_result r;
        cmd.token = tok;
        cmd.pos = 0;
        if (b->vt->generate(b, &cmd, &gen, &r, &err) != MK_OK) {
            fprintf(stderr, "mk %s: generating %u steps: %s\n", tool, steps, err.msg);
            goto done;
        }
    }
    for (uint32_t i = 0; i < steps && !b->vt->generate; i++) {
        cmd.token = tok;
        cmd.pos = (int32_t)i;
        if (b->vt->step(b, &cmd, &tok, &err) != MK_OK) {
            fprintf(stderr, "mk %s: step %u: %s\n", tool, i, err.msg);
            goto done;
        }
    }
    if (mk_backend_cuda_info(b, &info, &err) != MK_OK) goto fail;
    tr = calloc((size_t)info.n_tasks * 2, sizeof *tr);
    if (!tr) goto done;
    if (mk_backend_cuda_trace(b, tr, info.n_tasks, &err) != MK_OK) goto fail;
    cp.n_workers = info.grid;
    cp.tasks_per_worker = gs->tasks_per_worker;
    cp.attn_block = gs->attn_block;
    cp.attn_solo = gs->attn_solo;
    cp.attn_splits = gs->attn_splits;
    cp.fuse_attn_output = gs->fuse_attn_output;
    cp.attn_merge = (enum mk_attn_merge)gs->attn_merge;
    cp.schedule = gs->dynamic_schedule ? MK_SCHED_DYNAMIC : MK_SCHED_STATIC;
    if (mk_program_compile(m, &cp, p, &err) != MK_OK) goto fail;
    if ((*p)->n_tasks != info.n_tasks || (*p)->n_instr != info.n_instr) {
        fprintf(stderr, "mk %s: the program compiled here (%u tasks) is not the backend's (%u tasks)\n", tool,
                (*p)->n_tasks, info.n_tasks);
        goto done;
    }
    *tk = malloc((size_t)info.n_tasks * sizeof **tk);
    if (!*tk) goto done;
    /* A static schedule names each task's block; a dynamic one does not (all on track 0). */
    for (uint32_t t = 0; t < info.n_tasks; t++) (*tk)[t] = (struct mk_trace_task){ tr[2 * t], tr[2 * t + 1], 0, t };
    if ((*p)->schedule == MK_SCHED_STATIC && (*p)->sched_offsets)
        for (uint32_t w = 0; w < info.grid; w++)
            for (uint32_t c = (*p)->sched_offsets[w]; c < (*p)->sched_offsets[w + 1]; c++)
                (*tk)[(*p)->sched_tasks[c]].track = w;
    *n_tracks = info.grid;
    snprintf(where, where_len, "%s, %u blocks", info.device, info.grid);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "mk %s: %s\n", tool, err.msg);
done:
    free(tr);
    b->vt->free(b);
    return rc;
}

int mk_trace_run(const char *tool, const struct mk_model *m, bool cpu, uint32_t threads, uint32_t ubatch,
                 uint32_t steps, uint32_t ctx, enum mk_kv_type kv, const struct mk_gpu_settings *gs,
                 const struct mk_step_cmd *samp, struct mk_program **p, struct mk_trace_task **tk, uint32_t *n_tracks,
                 char *where, size_t where_len) {
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_ctx = ctx;
    cp.kv_type = kv;
    if (cpu) return mk_trace_run_cpu(tool, m, cp, threads, ubatch, steps, samp, p, tk, n_tracks, where, where_len);
    return mk_trace_run_gpu(tool, m, cp, steps, gs, samp, p, tk, n_tracks, where, where_len);
}

int mk_trace_chunk_gpu(const char *tool, const struct mk_model *m, uint32_t ubatch, uint32_t steps, uint32_t ctx,
                       enum mk_kv_type kv, const struct mk_gpu_settings *gs, const char *path) {
    struct mk_error err = { 0 };
    struct mk_backend_params bp = { 0 };
    bp.kind = MK_BACKEND_MEGAKERNEL;
    bp.n_ctx = ctx;
    bp.ubatch = ubatch;
    bp.gpu = *gs;
    if (bp.gpu.trace == MK_GPU_TRACE_OFF) bp.gpu.trace = MK_GPU_TRACE_AFTER_WAITS;
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_ctx = ctx;
    cp.ubatch = ubatch;
    cp.kv_type = kv;
    bp.kv_type = kv;
    struct mk_backend *b = NULL;
    struct mk_program *p = NULL;
    struct mk_cuda_chunk_launch_time *lt = NULL;
    double *first = NULL, *last = NULL;
    int rc = -1;
    if (mk_backend_create(m, &bp, &b, &err) != MK_OK) {
        fprintf(stderr, "mk %s: %s\n", tool, err.msg);
        return -1;
    }
    if (!b->vt->step_chunk || b->ubatch < ubatch) {
        fprintf(stderr, "mk %s: the %s backend takes no chunk steps of %u tokens here\n", tool, b->vt->name, ubatch);
        goto done;
    }
    struct mk_step_cmd cmd = { 0 };
    cmd.cmd = MK_CMD_STEP;
    int32_t toks[MK_UBATCH_MAX], outs[MK_UBATCH_MAX];
    int32_t tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    for (uint32_t i = 0; i < steps; i++) {
        /* As the cpu trace: chunk steps of ubatch tokens, each row's token fed back as the next input. */
        for (uint32_t k = 0; k < ubatch; k++) toks[k] = k ? outs[k - 1] : tok;
        cmd.pos = (int32_t)(i * ubatch);
        cmd.token = toks[0];
        cmd.n_tokens = (uint16_t)ubatch;
        cmd.n_out = (uint16_t)ubatch;
        if (b->vt->step_chunk(b, &cmd, toks, outs, &err) != MK_OK) {
            fprintf(stderr, "mk %s: chunk step %u: %s\n", tool, i, err.msg);
            goto done;
        }
        tok = outs[ubatch - 1];
    }
    const uint32_t cap = 4096;
    uint32_t n = 0;
    lt = malloc(cap * sizeof *lt);
    if (!lt || mk_backend_cuda_chunk_trace(b, lt, cap, &n, &err) != MK_OK ||
        mk_program_compile(m, &cp, &p, &err) != MK_OK) {
        fprintf(stderr, "mk %s: %s\n", tool, lt ? err.msg : "out of memory");
        goto done;
    }
    first = malloc(p->n_instr * sizeof *first);
    last = calloc(p->n_instr, sizeof *last);
    if (!first || !last) goto done;
    for (uint32_t i = 0; i < p->n_instr; i++) first[i] = -1.0;
    for (uint32_t c = 0; c < n; c++) {
        if (lt[c].ii >= p->n_instr) {
            fprintf(stderr, "mk %s: launch %u names instruction %u of a program of %u\n", tool, c, lt[c].ii,
                    p->n_instr);
            goto done;
        }
        if (first[lt[c].ii] < 0) first[lt[c].ii] = lt[c].start_us;
        last[lt[c].ii] = lt[c].end_us;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mk %s: cannot write %s: %s\n", tool, path, strerror(errno));
        goto done;
    }
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"mk chunk step\"}}");
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"stream\"}}");
    for (uint32_t c = 0; c < n; c++) {
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"op\":\"%s\",\"kernel\":\"%s\",\"instr\":%u}}",
                p->labels[lt[c].ii], mk_opcode_name(p->instrs[lt[c].ii].op), lt[c].start_us,
                lt[c].end_us > lt[c].start_us ? lt[c].end_us - lt[c].start_us : 0.0,
                mk_opcode_name(p->instrs[lt[c].ii].op), lt[c].kernel, lt[c].ii);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "mk %s: cannot write %s: %s\n", tool, path, strerror(errno));
        goto done;
    }
    struct mk_trace_op ops[MK_OP_COUNT];
    memset(ops, 0, sizeof ops);
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const uint32_t op = p->instrs[i].op;
        if (op >= MK_OP_COUNT || first[i] < 0) continue;
        ops[op].tasks += p->task_base[i + 1] - p->task_base[i];
        ops[op].span_us += last[i] - first[i];
        ops[op].bytes += mk_program_instr_weight_bytes(p, i);
    }
    printf("mk %s: chunk step %u (%u tokens at positions %u..%u) on the %s backend, %u kernel launches, %.1f us -> "
           "%s\n",
           tool, steps, ubatch, (steps - 1u) * ubatch, steps * ubatch - 1u, b->vt->name, n, n ? lt[n - 1].end_us : 0.0,
           path);
    mk_trace_print_ops(stdout, ops, false);
    printf("(time: each instruction's launches, first start to last end, summed; tasks are the chunk program's)\n");
    rc = 0;
done:
    free(first);
    free(last);
    free(lt);
    mk_program_free(p);
    b->vt->free(b);
    return rc;
}
