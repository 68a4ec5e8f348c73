/* mk dump: compiles a model's decode step and prints the program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/program.h"
#include "core/model.h"
#include "tools/cli.h"
#include "tools/cmds.h"

static void mk_dump_usage(FILE *f) {
    fprintf(f,
            "usage: mk dump -m FILE [--workers N] [--ctx N] [--schedule dynamic|static] [--barriers]\n"
            "               [--fuse-attn-output] [--attn-merge auto|split|op] [--tasks-per-worker N] [--attn-block N] "
            "[--attn-solo N] [--attn-splits N]\n"
            "               [--ubatch N] [--kv-type f16|f32] [--chunk-act bf16|f32] [--json]\n"
            "  Compiles one decode step of FILE for N workers (default 132, an H100's SM count) and a\n"
            "  KV cache of --ctx positions (default 512), validates it, and prints every instruction:\n"
            "  tasks, weight bytes per task, the counter it signals, the int8-level copies of x it reads\n"
            "  (<) and writes (>) (i8: its input or output, n8: the residual stream normalized for the\n"
            "  next norm op) and the counters it waits on, then totals (instructions, barriers and\n"
            "  weight bytes per token).\n"
            "  --barriers joins every dependency with a grid barrier (a baseline for comparisons).\n"
            "  --fuse-attn-output folds the attention combine into the attention-output matvec.\n"
            "  --attn-merge: each KV head's last split merges the attention splits (split), an op of their\n"
            "  own does (op), or (auto, the default) the split where the heads' partials are small.\n"
            "  --tasks-per-worker, --attn-block, --attn-solo and --attn-splits tile as the GPU backends'\n"
            "  flags of those names do.\n"
            "  --ubatch N compiles the chunk program of up to N tokens per step (megakernel/abi.h).\n"
            "  --kv-type f16|f32 sets the KV cache's elements (default f16).\n"
            "  --chunk-act bf16|f32: a chunk program's products over bf16 weights round their inputs to\n"
            "  bf16 from 64 token rows on (default), or never.\n");
}

int mk_cmd_dump(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = 132;
    int kv_flag, act_f32 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mk_dump_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) break;
            path = v, i++;
        } else if (!strcmp(a, "--workers")) {
            if (mk_cli_uint("dump", a, v, 1, 1u << 20, &cp.n_workers)) return 2;
            i++;
        } else if (!strcmp(a, "--ctx")) {
            if (mk_cli_uint("dump", a, v, 1, 1u << 20, &cp.n_ctx)) return 2;
            i++;
        } else if (!strcmp(a, "--schedule")) {
            if (v && !strcmp(v, "static"))
                cp.schedule = MK_SCHED_STATIC;
            else if (v && !strcmp(v, "dynamic"))
                cp.schedule = MK_SCHED_DYNAMIC;
            else {
                fprintf(stderr, "mk dump: --schedule is 'dynamic' or 'static', got '%s'\n", v ? v : "");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--barriers")) {
            cp.barriers = true;
        } else if (!strcmp(a, "--fuse-attn-output")) {
            cp.fuse_attn_output = true;
        } else if (!strcmp(a, "--attn-merge")) {
            const int merge = mk_attn_merge_from_name(v);
            if (merge < 0) {
                fprintf(stderr, "mk dump: --attn-merge is 'auto', 'split' or 'op', got '%s'\n", v ? v : "");
                return 2;
            }
            cp.attn_merge = (enum mk_attn_merge)merge;
            i++;
        } else if (!strcmp(a, "--tasks-per-worker")) {
            if (mk_cli_uint("dump", a, v, 0, 1u << 16, &cp.tasks_per_worker)) return 2;
            i++;
        } else if (!strcmp(a, "--attn-block")) {
            if (mk_cli_uint("dump", a, v, 0, 1u << 20, &cp.attn_block)) return 2;
            i++;
        } else if (!strcmp(a, "--attn-solo")) {
            if (mk_cli_uint("dump", a, v, 0, 1u << 24, &cp.attn_solo)) return 2;
            i++;
        } else if (!strcmp(a, "--attn-splits")) {
            if (mk_cli_uint("dump", a, v, 0, 1u << 16, &cp.attn_splits)) return 2;
            i++;
        } else if (!strcmp(a, "--ubatch")) {
            if (mk_cli_uint("dump", a, v, 0, MK_UBATCH_MAX, &cp.ubatch)) return 2;
            i++;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if ((kv_flag = mk_cli_kv_flag("dump", argc, argv, &i, &cp.kv_type)) != 0) {
            if (kv_flag < 0) return 2;
        } else if ((kv_flag = mk_cli_act_flag("dump", argc, argv, &i, &act_f32)) != 0) {
            if (kv_flag < 0) return 2;
            cp.act_bf16_min = act_f32 ? 0u : MK_ACT_BF16_MIN_DEFAULT;
        } else {
            fprintf(stderr, "mk dump: unknown option '%s'\n", a);
            mk_dump_usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "mk dump: a model is required (-m FILE)\n");
        mk_dump_usage(stderr);
        return 2;
    }
    struct mk_error err = { 0 };
    struct mk_model *m = NULL;
    if (mk_model_load(path, &m, &err) != MK_OK) {
        fprintf(stderr, "mk dump: %s\n", err.msg);
        return 1;
    }
    struct mk_program *p = NULL;
    if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
        fprintf(stderr, "mk dump: %s: %s\n", path, err.msg);
        mk_model_free(m);
        return 1;
    }
    mk_program_dump(p, stdout, json);
    mk_program_free(p);
    mk_model_free(m);
    return 0;
}
