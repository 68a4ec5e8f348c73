/* 'mk gen': writes a Llama GGUF of a preset shape with deterministic random weights. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/gen.h"
#include "tools/cli.h"
#include "tools/cmds.h"

static void mk_gen_usage(FILE *f) {
    fprintf(f, "usage: mk gen [--preset NAME] [--dtype TYPE] [--seed S] [--vocab FILE] -o FILE\n"
               "\n"
               "Writes a Llama-architecture GGUF with deterministic random weights (the same seed gives\n"
               "the same file) and a synthetic SentencePiece vocab, with llama.cpp's keys and tensor names.\n"
               "\n"
               "  --preset NAME  tiny (default: 256 wide, 4 layers, 512 tokens, 13 MB as f32),\n"
               "                 llama-1b (Llama-3.2-1B shape: 2048 wide, 16 layers, 32/8 heads,\n"
               "                 FFN 8192, 128256 tokens, tied head), llama-8b (Llama-3-8B shape: 4096\n"
               "                 wide, 32 layers, 32/8 heads, FFN 14336, 128256 tokens, separate head),\n"
               "                 tiny-hd128 (512 wide, 2 layers, 4/2 heads of 128, FFN 1024, 512\n"
               "                 tokens, separate head: the 8B head size, tiny), tiny-gqa4 (512 wide,\n"
               "                 2 layers, 8/2 heads of 64, FFN 1024, 512 tokens, tied head: Llama-3's\n"
               "                 4 query heads a KV head, tiny)\n"
               "  --dtype TYPE   a weight type for every matrix: f32 (default), f16, bf16, q4_0, q4_1,\n"
               "                 q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs; or\n"
               "                 llama.cpp's mix of that name, in capitals, as llama-quantize makes it\n"
               "                 without an imatrix: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M,\n"
               "                 Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS (the\n"
               "                 _S/_M/_L ones also in lowercase); norm weights are always f32\n"
               "  --seed S       weight seed (default 42)\n"
               "  -t, --threads N  threads that make the weights (default: one per CPU, at most 64; the\n"
               "                 file is the same for any N)\n"
               "  --chat-template T  write T as tokenizer.chat_template (a template name such as chatml or\n"
               "                 llama3, or Jinja text); the vocab then ends with the control tokens\n"
               "                 <|im_start|> <|im_end|> <|start_header_id|> <|end_header_id|> <|eot_id|>\n"
               "  --eot-id N     write N as tokenizer.ggml.eot_token_id (an end-of-generation token)\n"
               "  --vocab FILE   take the tokenizer from this GGUF (every tokenizer.* key: tokens, merges,\n"
               "                 pre-tokenizer, special ids, chat template; a vocab-only ggml-vocab-*.gguf\n"
               "                 will do) instead of the synthetic one; the vocab size follows it, and\n"
               "                 --chat-template then only replaces its template\n"
               "  -o FILE        output path (required)\n");
}

/* Accepts "--opt VALUE" and "--opt=VALUE"; returns the value or NULL when argv[*i] is not opt. */
static const char *mk_gen_opt(int argc, char **argv, int *i, const char *opt, bool *missing) {
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n)) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n]) return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

int mk_cmd_gen(int argc, char **argv) {
    struct mk_gen_params p = mk_gen_default_params();
    const char *out = NULL, *v;
    p.progress = true;
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            mk_gen_usage(stdout);
            return 0;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--preset", &missing))) {
            p.preset = v;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--dtype", &missing))) {
            p.dtype = v;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--seed", &missing))) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 0);
            if (errno || end == v || *end || v[0] == '-') {
                fprintf(stderr, "mk gen: --seed '%s' is not a non-negative integer\n", v);
                return 2;
            }
            p.seed = s;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--threads", &missing)) ||
                   (v = mk_gen_opt(argc, argv, &i, "-t", &missing))) {
            if (mk_cli_uint("gen", "--threads", v, 1, 64, &p.n_threads)) return 2;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--chat-template", &missing))) {
            p.chat_template = v;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--vocab", &missing))) {
            p.vocab_path = v;
        } else if ((v = mk_gen_opt(argc, argv, &i, "--eot-id", &missing))) {
            char *end;
            errno = 0;
            long id = strtol(v, &end, 10);
            if (errno || end == v || *end || id < 0 || id > INT32_MAX) {
                fprintf(stderr, "mk gen: --eot-id '%s' is not a token id (an integer >= 0)\n", v);
                return 2;
            }
            p.eot_id = (int32_t)id;
        } else if ((v = mk_gen_opt(argc, argv, &i, "-o", &missing)) ||
                   (v = mk_gen_opt(argc, argv, &i, "--output", &missing))) {
            out = v;
        } else {
            if (missing)
                fprintf(stderr, "mk gen: option '%s' needs a value\n", argv[i]);
            else
                fprintf(stderr, "mk gen: unknown argument '%s'\n", argv[i]);
            mk_gen_usage(stderr);
            return 2;
        }
        if (missing) {
            fprintf(stderr, "mk gen: option '%s' needs a value\n", argv[i]);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "mk gen: no output file (-o FILE)\n");
        mk_gen_usage(stderr);
        return 2;
    }
    struct mk_gen_format fmt;
    if (!mk_gen_find_preset(p.preset)) {
        fprintf(stderr, "mk gen: unknown preset '%s' (%s)\n", p.preset, mk_gen_preset_names);
        return 2;
    }
    if (mk_gen_parse_format(p.dtype, &fmt) != 0) {
        fprintf(stderr, "mk gen: unknown dtype '%s' (%s)\n", p.dtype, mk_gen_format_names);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct mk_error err = { 0 };
    if (mk_gen_write(out, &p, &err) != MK_OK) {
        fprintf(stderr, "mk gen: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct stat sb;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    double mb = stat(out, &sb) == 0 ? sb.st_size / 1e6 : 0.0;
    fprintf(stderr, "mk gen: wrote %s (preset %s, %s, seed %llu, %.1f MB) in %.1f s\n", out, p.preset, p.dtype,
            (unsigned long long)p.seed, mb, secs);
    return 0;
}
