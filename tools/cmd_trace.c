/* mk trace: the per-task timestamps of one megakernel step as a Chrome/Perfetto trace, and the time per op kind. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/cpu_exec.h"
#include "graph/program.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "core/model.h"
#include "tools/cli.h"
#include "tools/cmds.h"

static void mk_trace_usage(FILE *f) {
    fprintf(f,
            "usage: mk trace -m FILE [-n 16] [--ctx 512] [-o mk_trace.json] [--backend megakernel|cpu]\n"
            "                [--threads N] [--fetch] [GPU options]\n"
            "  Runs -n greedy decode steps from BOS with per-task timestamps on, and writes the last\n"
            "  step as a Chrome trace (open it in ui.perfetto.dev or chrome://tracing): one track per\n"
            "  GPU block (megakernel, the default) or CPU executor worker (cpu, --threads N), one slice\n"
            "  per task named by its instruction (blk.3.ffn_down, ...) with its op, task index, weight\n"
            "  bytes and the idle time on its track before it (waiting for its inputs, fetching).\n"
            "  Then prints per op kind\n"
            "  the tasks, the summed time of its instructions (first start to last end of each) and\n"
            "  the weight bandwidth over that time. Timestamps cost nothing when not asked for.\n"
            "  --fetch   slices start when the block takes the task, before its waits (default: after\n"
            "            them, so a slice is the task's own work)\n"
            "%s",
            mk_cli_gpu_usage);
}

struct mk_trace_op {
    uint32_t tasks;
    double span_us; /* sum over instructions of last end - first start */
    uint64_t bytes;
};

/* One task as traced: start, end (ns, any origin) and its track. */
struct mk_trace_task {
    uint64_t s, e;
    uint32_t track, t;
};

static int mk_trace_cmp(const void *a, const void *b) {
    const struct mk_trace_task *x = a, *y = b;
    if (x->track != y->track) return x->track < y->track ? -1 : 1;
    return x->s < y->s ? -1 : x->s > y->s;
}

/* The step's tasks (p's, tk[t] for task t) as Chrome trace JSON into path; per op kind into ops. */
static int mk_trace_write(const char *path, const struct mk_program *p, struct mk_trace_task *tk, uint32_t n_tracks,
                          const char *track_name, struct mk_trace_op *ops) {
    const uint32_t n = p->n_tasks;
    uint64_t t0 = UINT64_MAX;
    for (uint32_t t = 0; t < n; t++)
        if (tk[t].s < t0) t0 = tk[t].s;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const uint32_t lo = p->task_base[i], hi = p->task_base[i + 1], op = p->instrs[i].op;
        uint64_t first = UINT64_MAX, last = 0;
        for (uint32_t t = lo; t < hi; t++) {
            if (tk[t].s < first) first = tk[t].s;
            if (tk[t].e > last) last = tk[t].e;
        }
        if (op < MK_OP_COUNT && hi > lo) {
            ops[op].tasks += hi - lo;
            ops[op].span_us += last > first ? (double)(last - first) / 1e3 : 0.0;
            ops[op].bytes += mk_program_instr_weight_bytes(p, i);
        }
    }
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
        const uint64_t prev = c && tk[c - 1].track == tk[c].track ? tk[c - 1].e : t0;
        const char *op = mk_opcode_name(p->instrs[i].op);
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"op\":\"%s\",\"task\":%u,\"weight_bytes\":%" PRIu64 ",\"idle_before_us\":%.3f}}",
                p->labels[i], op, tk[c].track, (double)(tk[c].s - t0) / 1e3,
                (double)(tk[c].e > tk[c].s ? tk[c].e - tk[c].s : 0) / 1e3, op, t - p->task_base[i],
                nt ? mk_program_instr_weight_bytes(p, i) / nt : 0,
                tk[c].s > prev ? (double)(tk[c].s - prev) / 1e3 : 0.0);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "mk trace: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Runs steps on the megakernel (timestamps from the device) or on a CPU executor of `threads`
 * workers (from the workers), fills *p and *tk (one per task) and names the tracks. */
static int mk_trace_run(const struct mk_model *m, bool cpu, uint32_t threads, uint32_t steps, uint32_t ctx,
                        const struct mk_gpu_settings *gs, struct mk_program **p, struct mk_trace_task **tk,
                        uint32_t *n_tracks, char *where, size_t where_len) {
    struct mk_error err = { 0 };
    struct mk_step_cmd cmd = { 0 };
    cmd.cmd = MK_CMD_STEP;
    int32_t tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_ctx = ctx;
    int rc = -1;
    if (cpu) {
        struct mk_cpu_exec *e = NULL;
        cp.n_workers = threads ? threads : mk_cpu_default_threads(m);
        if (mk_program_compile(m, &cp, p, &err) != MK_OK || mk_cpu_exec_create(*p, cp.n_workers, &e, &err) != MK_OK ||
            mk_cpu_exec_set_trace(e, &err) != MK_OK) {
            fprintf(stderr, "mk trace: %s\n", err.msg);
            mk_cpu_exec_free(e);
            return -1;
        }
        for (uint32_t i = 0; i < steps; i++) {
            cmd.token = tok;
            cmd.pos = (int32_t)i;
            if (mk_cpu_exec_step(e, &cmd, &tok, &err) != MK_OK) {
                fprintf(stderr, "mk trace: step %u: %s\n", i, err.msg);
                mk_cpu_exec_free(e);
                return -1;
            }
        }
        const uint64_t *tr = mk_cpu_exec_trace(e);
        *tk = malloc((size_t)(*p)->n_tasks * sizeof **tk);
        if (*tk)
            for (uint32_t t = 0; t < (*p)->n_tasks; t++)
                (*tk)[t] = (struct mk_trace_task){ tr[3ull * t], tr[3ull * t + 1], (uint32_t)tr[3ull * t + 2], t };
        *n_tracks = cp.n_workers;
        snprintf(where, where_len, "the cpu executor, %u workers", cp.n_workers);
        mk_cpu_exec_free(e);
        return *tk ? 0 : -1;
    }
    struct mk_backend_params bp = { 0 };
    bp.kind = MK_BACKEND_MEGAKERNEL;
    bp.n_ctx = ctx;
    bp.gpu = *gs;
    struct mk_backend *b = NULL;
    uint64_t *tr = NULL;
    struct mk_cuda_backend_info info;
    if (mk_backend_create(m, &bp, &b, &err) != MK_OK) {
        fprintf(stderr,
                "mk trace: %s (the timestamps come from the megakernel backend; --backend cpu traces the "
                "cpu executor)\n",
                err.msg);
        return -1;
    }
    for (uint32_t i = 0; i < steps; i++) {
        cmd.token = tok;
        cmd.pos = (int32_t)i;
        if (b->vt->step(b, &cmd, &tok, &err) != MK_OK) {
            fprintf(stderr, "mk trace: step %u: %s\n", i, err.msg);
            goto done;
        }
    }
    if (mk_backend_cuda_info(b, &info, &err) != MK_OK) goto fail;
    tr = calloc((size_t)info.n_tasks * 2, sizeof *tr);
    if (!tr) goto done;
    if (mk_backend_cuda_trace(b, tr, info.n_tasks, &err) != MK_OK) goto fail;
    /* The backend's program, compiled again with its parameters, names each task's instruction. */
    cp.n_workers = info.grid;
    cp.tasks_per_worker = gs->tasks_per_worker;
    cp.attn_block = gs->attn_block;
    cp.fuse_attn_output = gs->fuse_attn_output;
    cp.schedule = gs->dynamic_schedule ? MK_SCHED_DYNAMIC : MK_SCHED_STATIC;
    if (mk_program_compile(m, &cp, p, &err) != MK_OK) goto fail;
    if ((*p)->n_tasks != info.n_tasks || (*p)->n_instr != info.n_instr) {
        fprintf(stderr, "mk trace: the program compiled here (%u tasks) is not the backend's (%u tasks)\n",
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
    fprintf(stderr, "mk trace: %s\n", err.msg);
done:
    free(tr);
    b->vt->free(b);
    return rc;
}

int mk_cmd_trace(int argc, char **argv) {
    const char *path = NULL, *out = "mk_trace.json";
    uint32_t steps = 16, ctx = 512, threads = 0;
    bool fetch = false, cpu = false;
    struct mk_gpu_settings gs = mk_gpu_default_settings();
    if (mk_cli_gpu_env("trace", &gs)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int g = mk_cli_gpu_flag("trace", argc, argv, &i, &gs);
        if (g < 0) return 2;
        if (g > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mk_trace_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) break;
            path = v, i++;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) break;
            out = v, i++;
        } else if (!strcmp(a, "-n")) {
            if (mk_cli_uint("trace", a, v, 1, 1u << 20, &steps)) return 2;
            i++;
        } else if (!strcmp(a, "--ctx")) {
            if (mk_cli_uint("trace", a, v, 1, 1u << 20, &ctx)) return 2;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (mk_cli_uint("trace", a, v, 0, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--backend")) {
            if (v && (!strcmp(v, "cpu") || !strcmp(v, "megakernel"))) {
                cpu = !strcmp(v, "cpu");
            } else {
                fprintf(stderr, "mk trace: --backend is 'megakernel' or 'cpu', got '%s'\n", v ? v : "");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--fetch")) {
            fetch = true;
        } else {
            fprintf(stderr, "mk trace: unknown option '%s'\n", a);
            mk_trace_usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "mk trace: a model is required (-m FILE)\n");
        mk_trace_usage(stderr);
        return 2;
    }
    if (steps > ctx) {
        fprintf(stderr, "mk trace: -n %u steps do not fit in --ctx %u\n", steps, ctx);
        return 2;
    }
    if (gs.trace == MK_GPU_TRACE_AT_FETCH) fetch = true; /* --trace fetch says the same */
    gs.trace = fetch ? MK_GPU_TRACE_AT_FETCH : MK_GPU_TRACE_AFTER_WAITS;
    struct mk_error err = { 0 };
    struct mk_model *m = NULL;
    struct mk_program *p = NULL;
    struct mk_trace_task *tk = NULL;
    uint32_t n_tracks = 0;
    char where[200];
    int rc = 1;
    if (mk_model_load(path, &m, &err) != MK_OK) {
        fprintf(stderr, "mk trace: %s\n", err.msg);
        return 1;
    }
    if (mk_trace_run(m, cpu, threads, steps, ctx, &gs, &p, &tk, &n_tracks, where, sizeof where) != 0) goto done;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t t = 0; t < p->n_tasks; t++) {
        if (tk[t].s < lo) lo = tk[t].s;
        if (tk[t].e > hi) hi = tk[t].e;
    }
    struct mk_trace_op ops[MK_OP_COUNT];
    memset(ops, 0, sizeof ops);
    if (mk_trace_write(out, p, tk, n_tracks, cpu ? "worker" : "block", ops) != 0) goto done;
    printf("mk trace: step %u of %s on %s, %u tasks, step span %.1f us -> %s\n", steps, path, where, p->n_tasks,
           (double)(hi - lo) / 1e3, out);
    printf("%-18s %6s %10s %10s %9s\n", "op", "tasks", "time us", "MB", "GB/s");
    for (uint32_t o = 0; o < MK_OP_COUNT; o++) {
        if (!ops[o].tasks) continue;
        printf("%-18s %6u %10.1f %10.2f %9.1f\n", mk_opcode_name(o), ops[o].tasks, ops[o].span_us,
               (double)ops[o].bytes / 1e6, ops[o].span_us > 0 ? (double)ops[o].bytes / (ops[o].span_us * 1e3) : 0.0);
    }
    printf("(time: first start to last end of each instruction of the kind, summed; %s)\n",
           fetch && !cpu ? "slices start at fetch" : "slices start after their waits");
    rc = 0;
done:
    free(tk);
    mk_program_free(p);
    mk_model_free(m);
    return rc;
}
