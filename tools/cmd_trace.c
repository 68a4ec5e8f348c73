/* mk trace: the per-task timestamps of one megakernel step as a Chrome/Perfetto trace, and the time per op kind. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/program.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "core/model.h"
#include "tools/cli.h"
#include "tools/cmds.h"

static void mk_trace_usage(FILE *f) {
    fprintf(f,
            "usage: mk trace -m FILE [-n 16] [--ctx 512] [-o mk_trace.json] [--fetch] [GPU options]\n"
            "  Runs -n greedy decode steps from BOS on the megakernel backend with per-task device\n"
            "  timestamps on, and writes the last step as a Chrome trace (open it in ui.perfetto.dev\n"
            "  or chrome://tracing): one track per GPU block, one slice per task named by its\n"
            "  instruction (blk.3.ffn_down, ...) with its op, task index, weight bytes and the idle\n"
            "  time on its block before it (waiting for its inputs, fetching). Then prints per op kind\n"
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

/* The trace of the last step of b (compiled as p) as Chrome trace JSON into path. */
static int mk_trace_write(const char *path, const struct mk_program *p, const uint64_t *tr, uint32_t grid,
                          struct mk_trace_op *ops) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    const uint32_t n = p->n_tasks;
    uint32_t *block = malloc(n * sizeof *block);
    uint64_t *last_end = calloc(grid ? grid : 1, sizeof *last_end);
    if (!block || !last_end) {
        free(block);
        free(last_end);
        fclose(f);
        fprintf(stderr, "mk trace: out of memory\n");
        return -1;
    }
    /* Static schedules name each task's block; a dynamic one does not (all on track 0). */
    for (uint32_t t = 0; t < n; t++) block[t] = 0;
    if (p->schedule == MK_SCHED_STATIC && p->sched_offsets && p->n_workers == grid)
        for (uint32_t w = 0; w < grid; w++)
            for (uint32_t c = p->sched_offsets[w]; c < p->sched_offsets[w + 1]; c++) block[p->sched_tasks[c]] = w;
    uint64_t t0 = UINT64_MAX;
    for (uint32_t t = 0; t < n; t++)
        if (tr[2 * t] && tr[2 * t] < t0) t0 = tr[2 * t];
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"mk megakernel step\"}}");
    for (uint32_t w = 0; w < grid; w++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%u,\"args\":{\"name\":\"block %u\"}}",
                w, w);
    /* Tasks of a block in the order it ran them, so that the idle time before each is known. */
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const uint32_t lo = p->task_base[i], hi = p->task_base[i + 1];
        const uint64_t bytes = mk_program_instr_weight_bytes(p, i);
        const uint32_t op = p->instrs[i].op;
        double first = 1e300, last = 0;
        for (uint32_t t = lo; t < hi; t++) {
            double s = (double)(tr[2 * t] - t0) / 1e3, e = (double)(tr[2 * t + 1] - t0) / 1e3;
            if (s < first) first = s;
            if (e > last) last = e;
        }
        if (op < MK_OP_COUNT && hi > lo) {
            ops[op].tasks += hi - lo;
            ops[op].span_us += last - first;
            ops[op].bytes += bytes;
        }
    }
    for (uint32_t w = 0; w < grid; w++) last_end[w] = t0;
    for (uint32_t c = 0; c < n; c++) {
        const uint32_t t = p->schedule == MK_SCHED_STATIC && p->sched_tasks ? p->sched_tasks[c] : c;
        const uint32_t i = mk_program_instr_of_task(p, t), w = block[t];
        const uint32_t nt = p->task_base[i + 1] - p->task_base[i];
        const uint64_t s = tr[2 * t], e = tr[2 * t + 1];
        const double idle = s > last_end[w] ? (double)(s - last_end[w]) / 1e3 : 0.0;
        last_end[w] = e;
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"op\":\"%s\",\"task\":%u,\"weight_bytes\":%" PRIu64 ",\"idle_before_us\":%.3f}}",
                p->labels[i], mk_opcode_name(p->instrs[i].op), w, (double)(s - t0) / 1e3,
                (double)(e > s ? e - s : 0) / 1e3, mk_opcode_name(p->instrs[i].op), t - p->task_base[i],
                nt ? mk_program_instr_weight_bytes(p, i) / nt : 0, idle);
    }
    fprintf(f, "\n]}\n");
    free(block);
    free(last_end);
    if (fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int mk_cmd_trace(int argc, char **argv) {
    const char *path = NULL, *out = "mk_trace.json";
    uint32_t steps = 16, ctx = 512;
    bool fetch = false;
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
    struct mk_backend *b = NULL;
    struct mk_program *p = NULL;
    uint64_t *tr = NULL;
    int rc = 1;
    if (mk_model_load(path, &m, &err) != MK_OK) {
        fprintf(stderr, "mk trace: %s\n", err.msg);
        return 1;
    }
    struct mk_backend_params bp = { 0 };
    bp.kind = MK_BACKEND_MEGAKERNEL;
    bp.n_ctx = ctx;
    bp.gpu = gs;
    if (mk_backend_create(m, &bp, &b, &err) != MK_OK) {
        fprintf(stderr, "mk trace: %s (the timestamps come from the megakernel backend)\n", err.msg);
        goto done;
    }
    struct mk_step_cmd cmd = { 0 };
    cmd.cmd = MK_CMD_STEP;
    int32_t tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    for (uint32_t i = 0; i < steps; i++) {
        cmd.token = tok;
        cmd.pos = (int32_t)i;
        if (b->vt->step(b, &cmd, &tok, &err) != MK_OK) {
            fprintf(stderr, "mk trace: step %u: %s\n", i, err.msg);
            goto done;
        }
    }
    struct mk_cuda_backend_info info;
    if (mk_backend_cuda_info(b, &info, &err) != MK_OK) {
        fprintf(stderr, "mk trace: %s\n", err.msg);
        goto done;
    }
    tr = calloc((size_t)info.n_tasks * 2, sizeof *tr);
    if (!tr) {
        fprintf(stderr, "mk trace: out of memory for %u tasks\n", info.n_tasks);
        goto done;
    }
    if (mk_backend_cuda_trace(b, tr, info.n_tasks, &err) != MK_OK) {
        fprintf(stderr, "mk trace: %s\n", err.msg);
        goto done;
    }
    /* The backend's program, compiled again with its parameters, names each task's instruction. */
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = info.grid;
    cp.n_ctx = ctx;
    cp.tasks_per_worker = gs.tasks_per_worker;
    cp.attn_block = gs.attn_block;
    cp.fuse_attn_output = gs.fuse_attn_output;
    cp.schedule = gs.dynamic_schedule ? MK_SCHED_DYNAMIC : MK_SCHED_STATIC;
    if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
        fprintf(stderr, "mk trace: %s\n", err.msg);
        goto done;
    }
    if (p->n_tasks != info.n_tasks || p->n_instr != info.n_instr) {
        fprintf(stderr, "mk trace: the program compiled here (%u tasks) is not the backend's (%u tasks)\n", p->n_tasks,
                info.n_tasks);
        goto done;
    }
    struct mk_trace_op ops[MK_OP_COUNT];
    memset(ops, 0, sizeof ops);
    if (mk_trace_write(out, p, tr, info.grid, ops) != 0) goto done;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t t = 0; t < info.n_tasks; t++) {
        if (tr[2 * t] < lo) lo = tr[2 * t];
        if (tr[2 * t + 1] > hi) hi = tr[2 * t + 1];
    }
    printf("mk trace: step %u of %s on %s, %u blocks, %u tasks, step span %.1f us -> %s\n", steps, path, info.device,
           info.grid, info.n_tasks, (double)(hi - lo) / 1e3, out);
    printf("%-18s %6s %10s %10s %9s\n", "op", "tasks", "time us", "MB", "GB/s");
    for (uint32_t o = 0; o < MK_OP_COUNT; o++) {
        if (!ops[o].tasks) continue;
        printf("%-18s %6u %10.1f %10.2f %9.1f\n", mk_opcode_name(o), ops[o].tasks, ops[o].span_us,
               (double)ops[o].bytes / 1e6, ops[o].span_us > 0 ? (double)ops[o].bytes / (ops[o].span_us * 1e3) : 0.0);
    }
    printf("(time: first start to last end of each instruction of the kind, summed; %s)\n",
           fetch ? "slices start at fetch" : "slices start after their waits");
    rc = 0;
done:
    free(tr);
    mk_program_free(p);
    if (b) b->vt->free(b);
    mk_model_free(m);
    return rc;
}
