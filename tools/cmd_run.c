/* 'mk run': decodes text from a model through the public API, streaming tokens, with a llama.cpp-style timing summary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gen.h"
#include "runtime/mk.h"
#include "tools/cmds.h"
#include "tools/session.h"

#define MK_RUN_DEFAULT_N    128
#define MK_RUN_DEFAULT_SEED 42u /* seed of the built-in model's weights */

static void mk_run_usage(FILE *f) {
    fprintf(f, "usage: mk run [-m FILE] [-p PROMPT] [-n N] [--chat [--system TEXT]] [options]\n"
               "\n"
               "Decodes text from a GGUF Llama model and streams it to stdout; a timing summary goes to stderr.\n"
               "Without -m, a small synthetic model with random weights (it prints gibberish) is made on the\n"
               "fly in $TMPDIR (or /tmp) and deleted afterwards. Generation stops at an end-of-generation\n"
               "token (EOS, <|im_end|>, <|eot_id|>, ...) unless --ignore-eos.\n"
               "\n"
               "  -p, --prompt TEXT  prompt (default empty: generation starts from BOS alone); special-token\n"
               "                     text such as <|im_start|> becomes that token\n"
               "  --no-special       tokenize special-token text in the prompt as plain text\n"
               "  --chat             the prompt is one user message: render it (after --system) with the\n"
               "                     model's chat template and print only the answer\n");
    mk_tool_print_usage(f, MK_RUN_DEFAULT_N);
}

/* The flags of mk run: the shared ones plus -p and --chat. */
struct mk_run_args {
    struct mk_tool_opts o;
    const char *prompt;
    bool chat;
};

/* -1 when the command should go on, else the exit status (help, or a usage error). */
static int mk_run_parse(int argc, char **argv, struct mk_run_args *a) {
    a->prompt = "";
    a->chat = false;
    if (mk_tool_opts_init(&a->o, "run", MK_RUN_DEFAULT_N)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            mk_run_usage(stdout);
            return 0;
        }
        int r = mk_tool_parse_flag(&a->o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(f, "--chat")) {
            a->chat = true;
        } else if ((!strcmp(f, "-p") || !strcmp(f, "--prompt")) && i + 1 < argc) {
            a->prompt = argv[++i];
        } else {
            fprintf(stderr, "mk run: %s '%s'\n",
                    !strcmp(f, "-p") || !strcmp(f, "--prompt") ? "missing value for"
                    : f[0] == '-'                              ? "unknown option"
                                                               : "unexpected argument",
                    f);
            mk_run_usage(stderr);
            return 2;
        }
    }
    if (a->chat && a->o.no_special) {
        fprintf(stderr, "mk run: --no-special cannot go with --chat: the template's markers are special tokens\n");
        return 2;
    }
    if (!a->chat && (a->o.system || a->o.chat_template)) {
        fprintf(stderr, "mk run: %s needs --chat\n", a->o.system ? "--system" : "--chat-template");
        return 2;
    }
    return -1;
}

/* Writes the built-in synthetic model to a fresh temp file; path receives its name. */
static int mk_run_make_default_model(char *path, size_t cap) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !dir[0]) dir = "/tmp";
    if ((size_t)snprintf(path, cap, "%s/mk-default-XXXXXX", dir) >= cap) {
        fprintf(stderr, "mk run: TMPDIR '%s' is too long\n", dir);
        return -1;
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "mk run: cannot create a temp file in %s: %s\n", dir, strerror(errno));
        return -1;
    }
    close(fd);
    struct mk_gen_params gp = mk_gen_default_params();
    gp.preset = "tiny";
    gp.dtype = "f32";
    gp.seed = MK_RUN_DEFAULT_SEED;
    gp.progress = false;
    struct mk_error err;
    mk_error_clear(&err);
    if (mk_gen_write(path, &gp, &err) != MK_OK) {
        fprintf(stderr, "mk run: writing the built-in model to %s: %s\n", path, err.msg);
        unlink(path);
        return -1;
    }
    fprintf(stderr,
            "mk run: no -m given: using a built-in synthetic model (preset tiny, f32, weight seed %u; random "
            "weights, so the text is gibberish), written to %s and deleted afterwards\n",
            MK_RUN_DEFAULT_SEED, path);
    return 0;
}

/* The prompt's ids: the text as is, or (--chat) the message rendered with the chat template. */
static int64_t mk_run_prompt_ids(const struct mk_run_args *a, const struct mk_lm *lm, int32_t **ids) {
    const struct mk_lm_info info = mk_lm_get_info(lm);
    if (!a->chat) {
        if (a->prompt[0]) return mk_tool_tokenize("run", lm, a->prompt, true, !a->o.no_special, ids);
        if (info.bos < 0) {
            fprintf(stderr, "mk run: an empty prompt needs a BOS token, and %s has none: give -p\n", a->o.model_path);
            return -1;
        }
        *ids = malloc(sizeof **ids);
        if (!*ids) return -1;
        **ids = info.bos;
        return 1;
    }
    struct mk_chat_msg msgs[2];
    size_t n = 0;
    if (a->o.system) msgs[n++] = (struct mk_chat_msg){ "system", a->o.system };
    msgs[n++] = (struct mk_chat_msg){ "user", a->prompt };
    char *text = mk_tool_render_chat(&a->o, lm, msgs, n);
    if (!text) return -1;
    int64_t n_ids = mk_tool_tokenize("run", lm, text, true, true, ids);
    free(text);
    return n_ids;
}

/* Feeds the prompt and, unless --chat or --ids, echoes it as text. */
static int mk_run_feed_prompt(const struct mk_run_args *a, const struct mk_lm *lm, struct mk_session *s,
                              const int32_t *ids, size_t n) {
    if (a->o.sp.verbose) mk_tool_print_ids("run", "prompt", ids, n);
    if (n > mk_session_n_ctx(s)) {
        fprintf(stderr, "mk run: the prompt is %zu tokens, longer than the context of %u (raise --ctx)\n", n,
                (unsigned)mk_session_n_ctx(s));
        return -1;
    }
    mk_tool_sigint_answering(true);
    enum mk_status st = mk_session_feed(s, ids, n);
    mk_tool_sigint_answering(false);
    if (st != MK_OK) {
        fprintf(stderr, "mk run: evaluating the prompt: %s\n", mk_session_last_error(s));
        return st == MK_ERR_CANCELLED ? 130 : -1;
    }
    if (a->chat || a->o.print_ids) return 0;
    size_t need = mk_lm_detokenize(lm, ids, n, NULL, 0);
    char *text = malloc(need + 1);
    if (!text) {
        fprintf(stderr, "mk run: out of memory\n");
        return -1;
    }
    mk_lm_detokenize(lm, ids, n, text, need);
    fwrite(text, 1, need, stdout);
    fflush(stdout);
    free(text);
    return 0;
}

/* Generates, says why it stopped, prints the summary; the exit status. */
static int mk_run_generate(const struct mk_run_args *a, struct mk_session *s) {
    struct mk_tool_stream out = { .ids = a->o.print_ids };
    uint32_t n_gen = 0;
    enum mk_stop_reason why = mk_tool_generate(&a->o, s, &out, &n_gen);
    if (why == MK_STOP_NONE) return 1;
    if (why == MK_STOP_EOS || why == MK_STOP_EOG)
        fprintf(stderr, "mk run: %s after %u tokens\n", why == MK_STOP_EOS ? "end of sequence" : "end of turn",
                (unsigned)n_gen);
    struct mk_timings t = mk_session_timings(s);
    mk_tool_print_summary(&t);
    return why == MK_STOP_CANCELLED ? 130 : 0;
}

int mk_cmd_run(int argc, char **argv) {
    struct mk_run_args a;
    int rc = mk_run_parse(argc, argv, &a);
    if (rc >= 0) return rc;
    rc = 1;
    char tmp_path[4096] = "";
    struct mk_lm *lm = NULL;
    struct mk_session *s = NULL;
    int32_t *ids = NULL;
    if (!a.o.model_path) {
        if (mk_run_make_default_model(tmp_path, sizeof tmp_path)) goto done;
        a.o.model_path = tmp_path;
    }
    int orc = mk_tool_open(&a.o, &lm, &s);
    if (orc) {
        rc = orc == 130 ? 130 : 1;
        goto done;
    }
    mk_tool_sigint_install(s, true);
    int64_t n_ids = mk_run_prompt_ids(&a, lm, &ids);
    if (n_ids < 0) goto done;
    int frc = mk_run_feed_prompt(&a, lm, s, ids, (size_t)n_ids);
    if (frc) {
        rc = frc == 130 ? 130 : 1;
        goto done;
    }
    rc = mk_run_generate(&a, s);
done:
    mk_tool_sigint_remove();
    free(ids);
    mk_session_free(s);
    mk_lm_free(lm);
    if (tmp_path[0]) unlink(tmp_path);
    return rc;
}
