/* 'mk chat': an interactive multi-turn conversation in the terminal that keeps the KV cache across turns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/mk.h"
#include "tools/cmds.h"
#include "tools/session.h"

static void mk_chat_usage(FILE *f) {
    fprintf(f, "usage: mk chat -m FILE [--system TEXT] [--chat-template NAME] [options]\n"
               "\n"
               "Talks with a model in its chat format: each line read from stdin is a user message (stdin may\n"
               "be a pipe); the answer streams to stdout and ends at the end of the model's turn. The KV cache\n"
               "is kept across turns, so each turn evaluates only its new tokens. /exit or end of input ends\n"
               "the conversation; Ctrl-C during an answer stops that answer. When the conversation no longer\n"
               "fits the context, mk says so and ends: start again with a larger --ctx.\n"
               "\n");
    mk_tool_print_usage(f, -1);
}

/* The conversation so far; the strings are owned (malloc'ed). */
struct mk_chat_conv {
    struct mk_chat_msg *msgs;
    size_t n, cap;
};

static int mk_chat_push(struct mk_chat_conv *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        struct mk_chat_msg *grown = realloc(c->msgs, cap * sizeof *grown);
        if (!grown) return -1;
        c->msgs = grown;
        c->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return -1;
    c->msgs[c->n++] = (struct mk_chat_msg){ role, copy };
    return 0;
}

static void mk_chat_conv_free(struct mk_chat_conv *c) {
    for (size_t i = 0; i < c->n; i++) free((char *)c->msgs[i].content);
    free(c->msgs);
}

/* -1 when the command should go on, else the exit status. */
static int mk_chat_parse(int argc, char **argv, struct mk_tool_opts *o) {
    if (mk_tool_opts_init(o, "chat", -1)) return 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            mk_chat_usage(stdout);
            return 0;
        }
        int r = mk_tool_parse_flag(o, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        fprintf(stderr, "mk chat: %s '%s'\n", argv[i][0] == '-' ? "unknown option" : "unexpected argument", argv[i]);
        mk_chat_usage(stderr);
        return 2;
    }
    if (!o->model_path) {
        fprintf(stderr, "mk chat: no model (-m FILE)\n");
        return 2;
    }
    if (o->no_special) {
        fprintf(stderr, "mk chat: --no-special cannot be used: the template's markers are special tokens\n");
        return 2;
    }
    return -1;
}

/* One turn: the whole conversation rendered and tokenized, only what the cache lacks evaluated,
 * then the answer streamed and added to the conversation. 0 to go on, else the exit status. */
static int mk_chat_turn(const struct mk_tool_opts *o, const struct mk_lm *lm, struct mk_session *s,
                        struct mk_chat_conv *conv, unsigned turn) {
    int32_t *ids = NULL;
    char *text = mk_tool_render_chat(o, lm, conv->msgs, conv->n);
    int64_t n = text ? mk_tool_tokenize("chat", lm, text, true, true, &ids) : -1;
    free(text);
    if (n < 0) return 1;
    uint32_t reused = 0;
    mk_tool_sigint_answering(true);
    enum mk_status st = mk_session_feed_sequence(s, ids, (size_t)n, &reused);
    mk_tool_sigint_answering(false);
    free(ids);
    if (st == MK_ERR_CONTEXT_FULL) {
        fprintf(stderr,
                "mk chat: context full: the conversation is %lld tokens and the context holds %u; start again "
                "with a larger --ctx (the model was trained with %u)\n",
                (long long)n, (unsigned)mk_session_n_ctx(s), (unsigned)mk_lm_get_info(lm).n_ctx_train);
        return 1;
    }
    if (st == MK_ERR_CANCELLED) {
        /* What was evaluated stays valid: the next turn keeps the prefix it shares. */
        fprintf(stderr, "mk chat: interrupted while reading the message; it is dropped\n");
        conv->n--;
        free((char *)conv->msgs[conv->n].content);
        return 0;
    }
    if (st != MK_OK) {
        fprintf(stderr, "mk chat: evaluating the message: %s\n", mk_session_last_error(s));
        return 1;
    }
    if (o->sp.verbose)
        fprintf(stderr, "mk chat: turn %u: %lld tokens, %u kept from the cache, %lld evaluated\n", turn, (long long)n,
                (unsigned)reused, (long long)n - reused);
    struct mk_tool_stream out = { .ids = o->print_ids, .keep_text = true };
    uint32_t n_gen = 0;
    enum mk_stop_reason why = mk_tool_generate(o, s, &out, &n_gen);
    int rc = why == MK_STOP_NONE || why == MK_STOP_CONTEXT_FULL ? 1 : 0;
    if (!rc && mk_chat_push(conv, "assistant", out.text ? out.text : "")) {
        fprintf(stderr, "mk chat: out of memory\n");
        rc = 1;
    }
    free(out.text);
    return rc;
}

/* A line of stdin without its newline in a malloc'ed *line; false at the end of input. */
static bool mk_chat_read_line(char **line, size_t *cap) {
    if (isatty(STDIN_FILENO)) {
        fputs("> ", stdout);
        fflush(stdout);
    }
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) return false;
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = '\0';
    return true;
}

int mk_cmd_chat(int argc, char **argv) {
    struct mk_tool_opts o;
    int rc = mk_chat_parse(argc, argv, &o);
    if (rc >= 0) return rc;
    rc = 1;
    struct mk_lm *lm = NULL;
    struct mk_session *s = NULL;
    struct mk_chat_conv conv = { 0 };
    char *line = NULL;
    size_t line_cap = 0;
    int orc = mk_tool_open(&o, &lm, &s);
    if (orc) {
        rc = orc == 130 ? 130 : 1;
        goto done;
    }
    char *probe = mk_tool_render_chat(&o, lm, NULL, 0); /* an unknown or missing template fails here */
    if (!probe) goto done;
    free(probe);
    fprintf(stderr, "mk chat: template %s; /exit or end of input ends the conversation\n",
            o.chat_template ? o.chat_template : mk_lm_chat_template(lm));
    if (o.system && mk_chat_push(&conv, "system", o.system)) goto done;
    mk_tool_sigint_install(s, false);
    rc = 0;
    for (unsigned turn = 1; rc == 0 && mk_chat_read_line(&line, &line_cap);) {
        if (!strcmp(line, "/exit")) break;
        if (!line[0]) continue;
        if (mk_chat_push(&conv, "user", line)) {
            fprintf(stderr, "mk chat: out of memory\n");
            rc = 1;
            break;
        }
        rc = mk_chat_turn(&o, lm, s, &conv, turn++);
    }
    if (o.sp.verbose) {
        struct mk_timings t = mk_session_timings(s);
        mk_tool_print_summary(&t);
    }
done:
    mk_tool_sigint_remove();
    free(line);
    mk_chat_conv_free(&conv);
    mk_session_free(s);
    mk_lm_free(lm);
    return rc;
}
