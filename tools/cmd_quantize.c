/* 'mk quantize': rewrites a GGUF with its matrices in another weight format. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/gen.h"
#include "tools/cli.h"
#include "tools/cmds.h"

static void mk_quantize_usage(FILE *f) {
    fprintf(f, "usage: mk quantize IN OUT --dtype TYPE [--tensor-type PART=TYPE ...] [--output-tensor-type TYPE]\n"
               "                   [--token-embedding-type TYPE] [--threads N]\n"
               "\n"
               "Rewrites the GGUF IN as OUT with every 2-D weight dequantized and requantized to TYPE,\n"
               "row by row (the model is never held in memory). 1-D tensors (norms) become f32, all\n"
               "metadata is copied and general.file_type is updated. Tensors already in their target\n"
               "format are copied unchanged.\n"
               "\n"
               "  --dtype TYPE   a weight type for every matrix (like llama-quantize --pure): f32, f16,\n"
               "                 bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k,\n"
               "                 iq4_nl, iq4_xs; or llama.cpp's mix of that name, in capitals, with\n"
               "                 llama-quantize's per-tensor choices (no imatrix): Q4_0, Q4_1, Q5_0,\n"
               "                 Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S,\n"
               "                 Q5_K_M, Q6_K, IQ4_NL, IQ4_XS (_S/_M/_L also in lowercase). Rows a\n"
               "                 block does not divide fall back as in llama.cpp (q4_k to q5_0, q6_k\n"
               "                 to q8_0, ...), and to f16 when 32 does not divide them either.\n"
               "  -t, --threads N  threads that quantize (default: one per CPU, at most 64; the file is\n"
               "                 the same for any N)\n"
               "\n"
               "Per-tensor choices over TYPE's rules, as llama-quantize's options of the same names (a\n"
               "lowercase type name each; rows a block does not divide fall back as above):\n"
               "  --tensor-type PART=TYPE   every matrix whose name contains PART (a plain substring:\n"
               "                            ffn_down, blk.3.attn_v) gets TYPE; repeatable, the first\n"
               "                            match wins\n"
               "  --output-tensor-type TYPE the output head (output.weight, or the embedding when the\n"
               "                            model ties them)\n"
               "  --token-embedding-type TYPE  token_embd.weight\n");
}

/* A TYPE value of the per-tensor options: a type name (mk_dtype_parse), or a message listing them. */
static int mk_quantize_type_arg(const char *opt, const char *v, enum mk_dtype *out) {
    if (mk_dtype_parse(v, out) == 0) return 0;
    fprintf(stderr, "mk quantize: %s: unknown type '%s' (", opt, v);
    for (size_t i = 0; i < MK_DTYPE_COUNT; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", mk_dtype_get(mk_dtype_all[i])->name);
    fprintf(stderr, ")\n");
    return -1;
}

/* The value of option a (argv[*i]), given as "--opt VALUE" or "--opt=VALUE"; NULL (with a message)
 * when it is missing. */
static const char *mk_quantize_value(int argc, char **argv, int *i, const char *opt) {
    const char *a = argv[*i];
    const size_t n = strlen(opt);
    if (a[n] == '=') return a + n + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "mk quantize: %s needs a value\n", opt);
        return NULL;
    }
    return argv[++*i];
}

/* Whether a is option opt, alone or with "=VALUE". */
static bool mk_quantize_is(const char *a, const char *opt) {
    const size_t n = strlen(opt);
    return !strncmp(a, opt, n) && (a[n] == 0 || a[n] == '=');
}

#define MK_QUANTIZE_MAX_OVERRIDES 64

int mk_cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *dtype = NULL;
    struct mk_gen_override ov[MK_QUANTIZE_MAX_OVERRIDES];
    char parts[MK_QUANTIZE_MAX_OVERRIDES][128];
    struct mk_gen_quantize_params qp = mk_gen_quantize_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            mk_quantize_usage(stdout);
            return 0;
        } else if (mk_quantize_is(a, "--dtype")) {
            if (!(dtype = mk_quantize_value(argc, argv, &i, "--dtype"))) return 2;
        } else if (mk_quantize_is(a, "--tensor-type")) {
            const char *v = mk_quantize_value(argc, argv, &i, "--tensor-type");
            if (!v) return 2;
            const char *eq = strrchr(v, '=');
            if (!eq || eq == v || !eq[1] || (size_t)(eq - v) >= sizeof parts[0]) {
                fprintf(stderr,
                        "mk quantize: --tensor-type '%s': want PART=TYPE, PART a piece of a tensor name "
                        "(under 128 bytes), as in ffn_down=q6_k\n",
                        v);
                return 2;
            }
            if (qp.n_overrides == MK_QUANTIZE_MAX_OVERRIDES) {
                fprintf(stderr, "mk quantize: more than %d --tensor-type options\n", MK_QUANTIZE_MAX_OVERRIDES);
                return 2;
            }
            memcpy(parts[qp.n_overrides], v, (size_t)(eq - v));
            parts[qp.n_overrides][eq - v] = 0;
            if (mk_quantize_type_arg("--tensor-type", eq + 1, &ov[qp.n_overrides].type)) return 2;
            ov[qp.n_overrides].part = parts[qp.n_overrides];
            qp.n_overrides++;
        } else if (mk_quantize_is(a, "--output-tensor-type") || mk_quantize_is(a, "--token-embedding-type")) {
            const bool head = mk_quantize_is(a, "--output-tensor-type");
            const char *opt = head ? "--output-tensor-type" : "--token-embedding-type";
            const char *v = mk_quantize_value(argc, argv, &i, opt);
            enum mk_dtype t;
            if (!v || mk_quantize_type_arg(opt, v, &t)) return 2;
            *(head ? &qp.output_type : &qp.token_embd_type) = (int)t;
        } else if (mk_quantize_is(a, "--threads") || mk_quantize_is(a, "-t")) {
            const char *v = mk_quantize_value(argc, argv, &i, mk_quantize_is(a, "-t") ? "-t" : "--threads");
            if (!v) return 2;
            if (mk_cli_uint("quantize", "--threads", v, 1, 64, &qp.n_threads)) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "mk quantize: unknown option '%s'\n", a);
            mk_quantize_usage(stderr);
            return 2;
        } else if (!in) {
            in = a;
        } else if (!out) {
            out = a;
        } else {
            fprintf(stderr, "mk quantize: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!in || !out || !dtype) {
        fprintf(stderr, "mk quantize: need IN, OUT and --dtype\n");
        mk_quantize_usage(stderr);
        return 2;
    }
    struct mk_gen_format fmt;
    if (mk_gen_parse_format(dtype, &fmt) != 0) {
        fprintf(stderr, "mk quantize: unknown dtype '%s' (%s)\n", dtype, mk_gen_format_names);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct mk_error err = { 0 };
    qp.dtype = dtype;
    qp.overrides = ov;
    qp.progress = true;
    if (mk_gen_quantize_file(in, out, qp, &err) != MK_OK) {
        fprintf(stderr, "mk quantize: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct stat si, so;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    fprintf(stderr, "mk quantize: wrote %s (%s, %.1f MB from %.1f MB) in %.1f s\n", out, dtype,
            stat(out, &so) == 0 ? so.st_size / 1e6 : 0.0, stat(in, &si) == 0 ? si.st_size / 1e6 : 0.0, secs);
    return 0;
}
