/* mk tokenize: a model's tokens for a text, printed as llama.cpp's llama-tokenize prints them. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "runtime/mk.h"
#include "tools/cmds.h"

static void mk_tokenize_usage(FILE *f) {
    fprintf(f, "usage: mk tokenize -m FILE (-p TEXT | -f FILE | --stdin) [--ids] [--no-bos] [--no-special]\n"
               "                  [--show-count]\n"
               "Prints the tokens of a text, one 'id -> 'piece'' line each, like llama.cpp's llama-tokenize.\n"
               "Works on vocabulary-only GGUF files. The text is taken verbatim (no escape processing).\n"
               "  -m, --model FILE      GGUF file with a tokenizer\n"
               "  -p, --prompt TEXT     text to tokenize\n"
               "  -f, --file FILE       read the text from FILE, byte for byte\n"
               "      --stdin           read the text from standard input\n"
               "      --ids             print only the ids, as one list [1, 2, 3]\n"
               "      --no-bos          do not add BOS even when the vocabulary asks for it\n"
               "      --no-special      tokenize special-token text such as <s> as plain text\n"
               "                        (--no-parse-special is the same)\n"
               "      --show-count      print the number of tokens at the end\n");
}

/* Reads all of f; NULL with errno-style failure left to the caller's message. */
static char *mk_tokenize_slurp(FILE *f, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *grown = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                return NULL;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The raw texts and types of the vocabulary, for the control and unknown tokens that
 * mk_lm_token_piece leaves empty (generation never shows them) but llama-tokenize prints. */
struct mk_tokenize_vocab {
    struct mk_gguf *g;
    const struct mk_gguf_str *texts;
    const int32_t *types; /* NULL when the file has no tokenizer.ggml.token_type */
    uint64_t n;
};

static void mk_tokenize_vocab_open(const char *path, struct mk_tokenize_vocab *v) {
    struct mk_error err;
    memset(v, 0, sizeof *v);
    if (mk_gguf_open(path, &v->g, &err) != MK_OK) return;
    const struct mk_gguf_kv *toks = mk_gguf_find_kv(v->g, "tokenizer.ggml.tokens");
    const struct mk_gguf_kv *types = mk_gguf_find_kv(v->g, "tokenizer.ggml.token_type");
    if (toks && toks->type == MK_GGUF_ARRAY && toks->v.arr.elem_type == MK_GGUF_STRING) {
        v->texts = toks->v.arr.strs;
        v->n = toks->v.arr.n;
    }
    /* The reader has checked that token_type, when present, has one int32 per token. */
    if (types && types->type == MK_GGUF_ARRAY && types->v.arr.elem_type == MK_GGUF_INT32 && types->v.arr.n == v->n)
        v->types = types->v.arr.data;
}

/* llama.cpp's token types: 2 unknown, 3 control. With special pieces shown (as llama-tokenize
 * does) their text is printed as it is in the vocabulary. */
static bool mk_tokenize_is_special(const struct mk_tokenize_vocab *v, int32_t id) {
    if (!v->types || id < 0 || (uint64_t)id >= v->n) return false;
    int32_t ty;
    memcpy(&ty, (const char *)v->types + (size_t)id * sizeof ty, sizeof ty);
    return ty == 2 || ty == 3;
}

static int mk_tokenize_print_piece(const struct mk_lm *lm, const struct mk_tokenize_vocab *v, int32_t id) {
    char small[256];
    char *piece = small;
    /* INT32_MAX as the previous token: neither the start nor BOS, so the piece keeps its leading
     * space, as llama-tokenize shows it. */
    size_t n = mk_lm_token_piece(lm, INT32_MAX, id, small, sizeof small);
    if (n > sizeof small) {
        piece = malloc(n);
        if (!piece) {
            fprintf(stderr, "mk tokenize: out of memory for a piece of %zu bytes\n", n);
            return -1;
        }
        n = mk_lm_token_piece(lm, INT32_MAX, id, piece, n);
    }
    const char *text = piece;
    if (n == 0 && mk_tokenize_is_special(v, id)) {
        text = v->texts[id].data;
        n = (size_t)v->texts[id].len;
    }
    /* llama-tokenize prints the piece as a C string: a NUL byte ends it. */
    const char *nul = memchr(text, '\0', n);
    if (nul) n = (size_t)(nul - text);
    printf("%6d -> '", id);
    fwrite(text, 1, n, stdout);
    printf("'\n");
    if (piece != small) free(piece);
    return 0;
}

int mk_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool from_stdin = false, ids_only = false, no_bos = false, no_special = false, show_count = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            mk_tokenize_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_value) {
            model = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_value) {
            prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_value) {
            file = argv[++i];
        } else if (!strcmp(a, "--stdin")) {
            from_stdin = true;
        } else if (!strcmp(a, "--ids")) {
            ids_only = true;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--no-special") || !strcmp(a, "--no-parse-special")) {
            no_special = true;
        } else if (!strcmp(a, "--show-count")) {
            show_count = true;
        } else {
            bool missing = !has_value && (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-p") ||
                                          !strcmp(a, "--prompt") || !strcmp(a, "-f") || !strcmp(a, "--file"));
            fprintf(stderr, missing ? "mk tokenize: option '%s' needs a value\n" : "mk tokenize: unknown option '%s'\n",
                    a);
            mk_tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "mk tokenize: no model file (-m FILE)\n");
        mk_tokenize_usage(stderr);
        return 2;
    }
    if ((prompt != NULL) + (file != NULL) + from_stdin != 1) {
        fprintf(stderr, "mk tokenize: give exactly one of -p TEXT, -f FILE and --stdin\n");
        mk_tokenize_usage(stderr);
        return 2;
    }

    char *text = NULL;
    size_t len = 0;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "mk tokenize: cannot open '%s' for reading\n", file);
            return 1;
        }
        text = mk_tokenize_slurp(f, &len);
        fclose(f);
        if (!text) {
            fprintf(stderr, "mk tokenize: cannot read '%s'\n", file);
            return 1;
        }
    }

    struct mk_lm *lm = NULL;
    struct mk_error err;
    if (mk_lm_load(model, &lm, &err) != MK_OK) {
        fprintf(stderr, "mk tokenize: %s\n", err.msg);
        free(text);
        return 1;
    }
    if (from_stdin) {
        text = mk_tokenize_slurp(stdin, &len);
        if (!text) {
            fprintf(stderr, "mk tokenize: cannot read standard input\n");
            mk_lm_free(lm);
            return 1;
        }
    } else if (prompt) {
        len = strlen(prompt);
    }
    const char *src = prompt ? prompt : text;

    struct mk_lm_info info = mk_lm_get_info(lm);
    bool add_bos = info.add_bos && info.bos >= 0 && !no_bos;
    int rc = 1;
    int32_t *ids = NULL;
    int64_t n = mk_lm_tokenize(lm, src, len, add_bos, !no_special, NULL, 0);
    if (n >= 0) {
        ids = malloc(((size_t)n ? (size_t)n : 1) * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "mk tokenize: out of memory for %lld tokens\n", (long long)n);
            goto done;
        }
        n = mk_lm_tokenize(lm, src, len, add_bos, !no_special, ids, (size_t)n);
    }
    if (n < 0) {
        if (n == MK_ERR_UNSUPPORTED)
            fprintf(stderr, "mk tokenize: %s has no tokenizer (no tokenizer.ggml.tokens)\n", model);
        else
            fprintf(stderr, "mk tokenize: cannot tokenize the text of %zu bytes: %s\n", len,
                    mk_status_str((enum mk_status)n));
        goto done;
    }

    struct mk_tokenize_vocab vocab;
    mk_tokenize_vocab_open(model, &vocab);
    if (ids_only) printf("[");
    rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if (ids_only)
            printf("%s%d", i > 0 ? ", " : "", ids[i]);
        else if (mk_tokenize_print_piece(lm, &vocab, ids[i]) != 0)
            rc = 1;
    }
    if (ids_only) printf("]\n");
    if (show_count) printf("Total number of tokens: %lld\n", (long long)n);
    mk_gguf_close(vocab.g);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "mk tokenize: cannot write the output\n");
        rc = 1;
    }
done:
    free(ids);
    free(text);
    mk_lm_free(lm);
    return rc;
}
