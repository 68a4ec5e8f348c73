/* 'mk quantize': rewrites a GGUF with its matrices in another weight format. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/gen.h"
#include "tools/cmds.h"

static void mk_quantize_usage(FILE *f) {
    fprintf(f, "usage: mk quantize IN OUT --dtype TYPE\n"
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
               "                 to q8_0, ...), and to f16 when 32 does not divide them either.\n");
}

int mk_cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *dtype = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            mk_quantize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dtype")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mk quantize: --dtype needs a value\n");
                return 2;
            }
            dtype = argv[++i];
        } else if (!strncmp(a, "--dtype=", 8)) {
            dtype = a + 8;
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
    if (mk_gen_quantize_file(in, out, dtype, true, &err) != MK_OK) {
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
