/* Option-value parsing shared by the mk subcommands. */
#include "tools/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/mk.h"

int mk_cli_parse_long(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int mk_cli_parse_float(const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = (float)v;
    return 0;
}

int mk_cli_uint(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
    long long x;
    if (mk_cli_parse_long(v, lo, hi, &x) != 0) {
        fprintf(stderr, "mk %s: %s needs an integer in [%u, %u], got '%s'\n", cmd, opt, lo, hi, v ? v : "");
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

const char mk_cli_gpu_usage[] =
    "  GPU backends (defaults are the measured-fastest; MK_CUDA_* variables set them too, flags win):\n"
    "    --schedule static|dynamic  per-block task lists (default) or one work counter\n"
    "    --tasks-per-worker N       matvec tiling target (0 = compiler default)\n"
    "    --attn-block N             positions per unit of an attention split (0 = compiler default)\n"
    "    --attn-solo N              below position N one split holds every position (0 = compiler default)\n"
    "    --attn-splits N            attention splits of the sequence per KV head (0 = compiler default)\n"
    "    --fuse-attn-output         fold the attention combine into the attention-output tasks\n"
    "    --attn-merge auto|split|op who merges the attention splits: each KV head's last split, an op\n"
    "                               of their own, or (auto) the split where the heads' partials are small\n"
    "    --blocks-per-sm N          cap on blocks per multiprocessor (0 = as many as fit)\n"
    "    --no-rope-table            compute RoPE angles in the kernel\n"
    "    --chunk-dequant-min N      chunk steps of at least N tokens decode block-format matrices once\n"
    "                               before their products (0 = default, 128)\n"
    "    --no-pdl                   chunk kernels start only when the one ahead has ended (default: on\n"
    "                               sm_90 each overlaps the tail of the one ahead)\n"
    "    --no-chunk-kq              chunk products of Q4_K/Q5_K/Q6_K matrices over 17 or more tokens\n"
    "                               decode the weights instead of multiplying their integers\n"
    "    --mv-blocks N              most blocks per column split of the Q4_K/Q5_K/Q6_K products over 16\n"
    "                               or fewer tokens, each taking tiles in turn (0 = the backend's plan)\n"
    "    --trace off|on|fetch       megakernel per-task timestamps\n"
    "    --kernel-image FILE        load this cubin, fatbin or PTX instead of the built-in kernels\n";

int mk_cli_gpu_flag(const char *cmd, int argc, char **argv, int *i, struct mk_gpu_settings *s) {
    const char *a = argv[*i];
    if (!strcmp(a, "--fuse-attn-output")) {
        s->fuse_attn_output = true;
        return 1;
    }
    if (!strcmp(a, "--no-rope-table")) {
        s->no_rope_table = true;
        return 1;
    }
    if (!strcmp(a, "--no-pdl")) {
        s->no_pdl = true;
        return 1;
    }
    if (!strcmp(a, "--no-chunk-kq")) {
        s->no_chunk_kq = true;
        return 1;
    }
    if (strcmp(a, "--schedule") && strcmp(a, "--tasks-per-worker") && strcmp(a, "--attn-block") &&
        strcmp(a, "--attn-solo") && strcmp(a, "--attn-splits") && strcmp(a, "--blocks-per-sm") &&
        strcmp(a, "--trace") && strcmp(a, "--kernel-image") && strcmp(a, "--chunk-dequant-min") &&
        strcmp(a, "--mv-blocks") && strcmp(a, "--attn-merge"))
        return 0;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v) {
        fprintf(stderr, "mk %s: %s needs a value\n", cmd, a);
        return -1;
    }
    *i += 1;
    if (!strcmp(a, "--tasks-per-worker")) return mk_cli_uint(cmd, a, v, 0, 1u << 16, &s->tasks_per_worker) ? -1 : 1;
    if (!strcmp(a, "--attn-block")) return mk_cli_uint(cmd, a, v, 0, 1u << 20, &s->attn_block) ? -1 : 1;
    if (!strcmp(a, "--attn-solo")) return mk_cli_uint(cmd, a, v, 0, 1u << 24, &s->attn_solo) ? -1 : 1;
    if (!strcmp(a, "--attn-splits")) return mk_cli_uint(cmd, a, v, 0, 1u << 16, &s->attn_splits) ? -1 : 1;
    if (!strcmp(a, "--chunk-dequant-min")) return mk_cli_uint(cmd, a, v, 0, 1u << 20, &s->chunk_dequant_min) ? -1 : 1;
    if (!strcmp(a, "--mv-blocks")) return mk_cli_uint(cmd, a, v, 0, 1u << 20, &s->mv_blocks) ? -1 : 1;
    if (!strcmp(a, "--blocks-per-sm")) return mk_cli_uint(cmd, a, v, 0, 64, &s->blocks_per_sm) ? -1 : 1;
    if (!strcmp(a, "--kernel-image")) {
        s->kernel_image = v;
        return 1;
    }
    if (!strcmp(a, "--attn-merge")) {
        const int merge = mk_attn_merge_from_name(v);
        if (merge < 0) {
            fprintf(stderr, "mk %s: --attn-merge is 'auto', 'split' or 'op', got '%s'\n", cmd, v);
            return -1;
        }
        s->attn_merge = (uint32_t)merge;
        return 1;
    }
    if (!strcmp(a, "--schedule") && (!strcmp(v, "static") || !strcmp(v, "dynamic"))) {
        s->dynamic_schedule = !strcmp(v, "dynamic");
        return 1;
    }
    if (!strcmp(a, "--trace") && (!strcmp(v, "off") || !strcmp(v, "on") || !strcmp(v, "fetch"))) {
        s->trace = !strcmp(v, "off")  ? MK_GPU_TRACE_OFF
                   : !strcmp(v, "on") ? MK_GPU_TRACE_AFTER_WAITS
                                      : MK_GPU_TRACE_AT_FETCH;
        return 1;
    }
    fprintf(stderr, "mk %s: %s needs %s, got '%s'\n", cmd, a,
            !strcmp(a, "--trace") ? "off, on or fetch" : "static or dynamic", v);
    return -1;
}

int mk_cli_gpu_env(const char *cmd, struct mk_gpu_settings *s) {
    struct mk_error err;
    mk_error_clear(&err);
    if (mk_gpu_settings_from_env(s, &err) == MK_OK) return 0;
    fprintf(stderr, "mk %s: %s\n", cmd, err.msg);
    return -1;
}

void mk_cli_gpu_params(const struct mk_gpu_settings *s, struct mk_gpu_params *out) {
    out->dynamic_schedule = s->dynamic_schedule;
    out->tasks_per_worker = s->tasks_per_worker;
    out->attn_block = s->attn_block;
    out->attn_solo = s->attn_solo;
    out->attn_splits = s->attn_splits;
    out->fuse_attn_output = s->fuse_attn_output;
    out->attn_merge = (int)s->attn_merge;
    out->blocks_per_sm = s->blocks_per_sm;
    out->no_rope_table = s->no_rope_table;
    out->chunk_dequant_min = s->chunk_dequant_min;
    out->no_pdl = s->no_pdl;
    out->no_chunk_kq = s->no_chunk_kq;
    out->mv_blocks = s->mv_blocks;
    out->no_mv_kq8 = s->no_mv_kq8;
    out->no_fold = s->no_fold;
    out->no_attn_h16 = s->no_attn_h16;
    out->xb_rows = s->xb_rows;
    out->xb_load = (int)s->xb_load;
    out->trace = (int)s->trace;
    out->kernel_image = s->kernel_image;
    out->no_float_image = s->no_float_image;
}

const char mk_cli_chunk_usage[] =
    "  Several tokens per step (chunk steps):\n"
    "    --ubatch N          most prompt tokens per step; 0 = the backend's default (cpu 32, GPU 512), 1 = one\n"
    "                        token per step (default 0)\n"
    "    --spec lookup|off   speculative decoding by prompt lookup, greedy (--temp 0) only: output\n"
    "                        identical to plain greedy decoding (default off)\n"
    "    --draft K           most tokens one speculation proposes, at most ubatch - 1 (default 8);\n"
    "                        each step verifies as many of them as the measured acceptance rate\n"
    "                        and step costs make worth it, none when a plain step is cheaper\n";

int mk_cli_chunk_flag(const char *cmd, int argc, char **argv, int *i, uint32_t *ubatch, int *spec, uint32_t *n_draft) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--ubatch")) {
        if (mk_cli_uint(cmd, a, v, 0, 4096, ubatch)) return -1;
    } else if (!strcmp(a, "--draft")) {
        if (mk_cli_uint(cmd, a, v, 1, 4095, n_draft)) return -1;
    } else if (!strcmp(a, "--spec")) {
        if (v && !strcmp(v, "lookup"))
            *spec = MK_SPEC_LOOKUP;
        else if (v && !strcmp(v, "off"))
            *spec = MK_SPEC_OFF;
        else {
            fprintf(stderr, "mk %s: --spec is 'lookup' or 'off', got '%s'\n", cmd, v ? v : "");
            return -1;
        }
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

const char mk_cli_kv_usage[] =
    "    --kv-type f16|f32   elements of the KV cache (default f16, as llama.cpp's; f32 doubles its\n"
    "                        memory and the attention's reads)\n"
    "    --chunk-act bf16|f32\n"
    "                        inputs of the products over bf16 weights in steps of 64 tokens or more\n"
    "                        (default bf16, as llama.cpp's; f32 keeps 16 significant bits, at twice\n"
    "                        the tensor-core work)\n";

/* argv[*i] as `flag first|second`: 0 when it is another flag, -1 after printing why its value is
 * neither, else 1 with *second_picked set and *i moved past the value. */
static int mk_cli_either(const char *cmd, int argc, char **argv, int *i, const char *flag, const char *first,
                         const char *second, int *second_picked) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(argv[*i], flag)) return 0;
    if (!v || (strcmp(v, first) && strcmp(v, second))) {
        fprintf(stderr, "mk %s: %s is '%s' or '%s', got '%s'\n", cmd, flag, first, second, v ? v : "");
        return -1;
    }
    *second_picked = !strcmp(v, second);
    (*i)++;
    return 1;
}

int mk_cli_act_flag(const char *cmd, int argc, char **argv, int *i, int *act_f32) {
    return mk_cli_either(cmd, argc, argv, i, "--chunk-act", "bf16", "f32", act_f32);
}

int mk_cli_kv_flag(const char *cmd, int argc, char **argv, int *i, enum mk_kv_type *kv) {
    int f32 = 0;
    const int g = mk_cli_either(cmd, argc, argv, i, "--kv-type", "f16", "f32", &f32);
    if (g == 1) *kv = f32 ? MK_KV_F32 : MK_KV_F16;
    return g;
}
