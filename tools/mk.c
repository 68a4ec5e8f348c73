/* The mk command: dispatches to one subcommand per file. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "tools/cmds.h"

struct mk_subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct mk_subcommand mk_subcommands[] = {
    { "run", mk_cmd_run, "decode text from a model (a built-in synthetic model without -m)" },
    { "chat", mk_cmd_chat, "talk with a model in its chat format, turn by turn, keeping the KV cache" },
    { "bench", mk_cmd_bench, "time decoding per backend against the memory-bandwidth floor" },
    { "info", mk_cmd_info, "describe a GGUF model: config, tokenizer, tensors, bytes per token" },
    { "dump", mk_cmd_dump, "print the compiled work-queue program of a model" },
    { "trace", mk_cmd_trace, "write one megakernel step as a Perfetto trace, with the time per op" },
    { "gen", mk_cmd_gen, "write a Llama GGUF with deterministic random weights" },
    { "quantize", mk_cmd_quantize, "rewrite a GGUF with another weight format" },
    { "tokenize", mk_cmd_tokenize, "print the tokens of a text, as llama.cpp's llama-tokenize does" },
};

static void mk_usage(FILE *f) {
    fprintf(f, "usage: mk <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof mk_subcommands / sizeof mk_subcommands[0]; i++)
        fprintf(f, "  %-9s %s\n", mk_subcommands[i].name, mk_subcommands[i].help);
    fprintf(f, "\n'mk <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    /* Under `bazel run`, relative paths mean the caller's directory, not the runfiles tree. */
    const char *wd = getenv("BUILD_WORKING_DIRECTORY");
    if (wd && chdir(wd) != 0) fprintf(stderr, "mk: cannot enter %s; relative paths may not resolve\n", wd);
    if (argc < 2) {
        mk_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        mk_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof mk_subcommands / sizeof mk_subcommands[0]; i++)
        if (!strcmp(argv[1], mk_subcommands[i].name)) return mk_subcommands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mk: unknown command '%s'\n\n", argv[1]);
    mk_usage(stderr);
    return 2;
}
