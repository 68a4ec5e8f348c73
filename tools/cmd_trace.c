/* mk trace: the per-task timestamps of one megakernel step as a Chrome/Perfetto trace, and the time per op kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/cmds.h"
#include "tools/trace.h"

static void mk_trace_usage(FILE *f) {
    fprintf(f,
            "usage: mk trace -m FILE [-n 16] [--ctx 512] [-o mk_trace.json] [--backend megakernel|cpu]\n"
            "                [--threads N] [--ubatch N] [--kv-type f16|f32] [--fetch] [--temp T [--top-k K]]\n"
            "                [GPU options]\n"
            "  Runs -n decode steps from BOS with per-task timestamps on (on the megakernel as\n"
            "  one generation, the token loop on the device, as mk run decodes), and writes the last\n"
            "  step as a Chrome trace (open it in ui.perfetto.dev or chrome://tracing): one track per\n"
            "  GPU block (megakernel, the default) or CPU executor worker (cpu, --threads N), one slice\n"
            "  per task named by its instruction (blk.3.ffn_down, ...) with its op, task index, weight\n"
            "  bytes and the idle time on its track before it (waiting for its inputs, fetching).\n"
            "  Then prints per op kind\n"
            "  the tasks, the summed time of its instructions (first start to last end of each), the\n"
            "  weight bandwidth over that time, the median task, each instruction's slowest task\n"
            "  (averaged) and the idle time before a task. Timestamps cost nothing when not asked for.\n"
            "  --ubatch N  chunk steps of N tokens: the trace shows the last one (cpu: its tasks per\n"
            "            worker; megakernel: its kernel launches on the stream, timed by events)\n"
            "  --fetch   slices start when the block takes the task, before its waits (default: after\n"
            "            them, so a slice is the task's own work)\n"
            "  --temp T  sample at temperature T (default 0: greedy), with mk run's top-p 0.95 and min-p\n"
            "            0.05, seed 1; --top-k K (default 40; 0 = 1024): the sample op's cost depends on it\n"
            "%s",
            mk_cli_gpu_usage);
}

int mk_cmd_trace(int argc, char **argv) {
    const char *path = NULL, *out = "mk_trace.json";
    uint32_t steps = 16, ctx = 512, threads = 0, ubatch = 1;
    bool fetch = false, cpu = false;
    /* mk run's sampling defaults (top-k, top-p, min-p); the temperature and seed are the trace's. */
    const struct mk_sampling_params dflt = mk_session_default_params().sampling;
    float temp = 0.0f;
    uint32_t top_k = (uint32_t)dflt.top_k;
    enum mk_kv_type kv = MK_KV_F16;
    struct mk_gpu_settings gs = mk_gpu_default_settings();
    if (mk_cli_gpu_env("trace", &gs)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int g = mk_cli_gpu_flag("trace", argc, argv, &i, &gs);
        if (g == 0) g = mk_cli_kv_flag("trace", argc, argv, &i, &kv);
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
        } else if (!strcmp(a, "--ubatch")) {
            if (mk_cli_uint("trace", a, v, 1, MK_UBATCH_MAX, &ubatch)) return 2;
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
        } else if (!strcmp(a, "--temp")) {
            if (!v || mk_cli_parse_float(v, 0.0f, 100.0f, &temp)) {
                fprintf(stderr, "mk trace: --temp '%s' is not a temperature in [0, 100]\n", v ? v : "");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--top-k")) {
            if (mk_cli_uint("trace", a, v, 0, 1u << 20, &top_k)) return 2;
            i++;
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
    if ((uint64_t)steps * ubatch > ctx) {
        fprintf(stderr, "mk trace: -n %u steps of %u tokens do not fit in --ctx %u\n", steps, ubatch, ctx);
        return 2;
    }
    if (temp > 0.0f && ubatch > 1 && !cpu) {
        fprintf(stderr, "mk trace: --temp with --ubatch %u: the megakernel's chunk trace runs greedy steps only\n",
                ubatch);
        return 2;
    }
    /* A fixed seed, so that two traces sample the same tokens. */
    const struct mk_step_cmd samp = {
        .temperature = temp, .top_k = (int32_t)top_k, .top_p = dflt.top_p, .min_p = dflt.min_p, .seed = 1u
    };
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
    if (ubatch > 1 && !cpu) {
        rc = mk_trace_chunk_gpu("trace", m, ubatch, steps, ctx, kv, &gs, out) == 0 ? 0 : 1;
        goto done;
    }
    if (mk_trace_run("trace", m, cpu, threads, ubatch, steps, ctx, kv, &gs, temp > 0.0f ? &samp : NULL, &p, &tk,
                     &n_tracks, where, sizeof where) != 0)
        goto done;
    struct mk_trace_op ops[MK_OP_COUNT];
    const double span_us = mk_trace_ops(p, tk, ops);
    if (mk_trace_write(out, p, tk, n_tracks, cpu ? "worker" : "block") != 0) goto done;
    printf("mk trace: step %u of %s on %s, %u tasks, step span %.1f us, %s -> %s\n", steps, path, where, p->n_tasks,
           span_us, temp > 0.0f ? "sampled" : "greedy", out);
    mk_trace_print_ops(stdout, ops, true);
    printf("(time: first start to last end of each instruction of the kind, summed; task: the median task; slowest:\n"
           " each instruction's slowest task, averaged; idle: its track's idle time before a task, averaged; %s)\n",
           fetch && !cpu ? "slices start at fetch" : "slices start after their waits");
    rc = 0;
done:
    free(tk);
    mk_program_free(p);
    mk_model_free(m);
    return rc;
}
