/* The steps 'mk run' and 'mk chat' share: their common flags, opening a session, tokenizing, chat rendering, streaming. */
#ifndef MK_TOOLS_SESSION_H
#define MK_TOOLS_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/executor.h"
#include "runtime/mk.h"

/* What the flags of 'mk run' and 'mk chat' ask for. */
struct mk_tool_opts {
    const char *cmd; /* "run" or "chat", for messages */
    const char *model_path;
    long long n_predict; /* tokens per answer; -1 = until end of generation or a full context */
    struct mk_session_params sp;
    struct mk_gpu_settings gpu;
    const char *chat_template; /* a template name; NULL = the file's */
    const char *system;        /* system message of a chat; NULL = none */
    bool no_special;           /* prompt text like "<|im_start|>" stays text */
    bool print_ids;            /* stream token ids instead of text */
};

/* Defaults, then the MK_CUDA_* environment; -1 after printing why the environment is malformed. */
int mk_tool_opts_init(struct mk_tool_opts *o, const char *cmd, long long n_predict);

/* Usage lines of the flags mk_tool_parse_flag takes. */
void mk_tool_print_usage(FILE *f, long long n_predict);

/* argv[*i] as one of the shared flags, *i moved past its value: 1 when it is one, 0 when it is
 * something else, -1 after printing why it is bad (a usage error: exit status 2). */
int mk_tool_parse_flag(struct mk_tool_opts *o, int argc, char **argv, int *i);

/* Loads the model, creates the session and says on stderr which backend and sampling it runs;
 * -1 after printing why not, 130 when Ctrl-C stopped the load. */
int mk_tool_open(const struct mk_tool_opts *o, struct mk_lm **lm, struct mk_session **s);

/* Ctrl-C: while an answer runs (mk_tool_sigint_answering(true)), SIGINT cancels it at the next
 * token; otherwise it ends the program. once: a second SIGINT always ends the program. */
void mk_tool_sigint_install(struct mk_session *s, bool once);
void mk_tool_sigint_answering(bool on);
void mk_tool_sigint_remove(void);

/* The ids of text in a malloc'ed *ids; add_bos as mk_lm_tokenize. The count, or -1 after a message. */
int64_t mk_tool_tokenize(const char *cmd, const struct mk_lm *lm, const char *text, bool add_bos, bool parse_special,
                         int32_t **ids);

/* The conversation rendered with o->chat_template (or the file's), the assistant's opening
 * appended, in a malloc'ed string; NULL after a message. */
char *mk_tool_render_chat(const struct mk_tool_opts *o, const struct mk_lm *lm, const struct mk_chat_msg *msgs,
                          size_t n);

/* Prints "prompt: N tokens: id id ..." on stderr (for -v). */
void mk_tool_print_ids(const char *cmd, const char *what, const int32_t *ids, size_t n);

/* Where generated tokens go: stdout as text or ids, and (keep_text) a copy of the text. */
struct mk_tool_stream {
    bool ids;       /* print ids, not text */
    bool first;     /* no id printed yet */
    bool keep_text; /* collect the text in text/len */
    bool oom;       /* the copy of the text ran out of memory */
    char *text;     /* malloc'ed, NUL-terminated; the caller frees it */
    size_t len, cap;
};

/* Generates up to o->n_predict tokens into out and says on stderr why it stopped when that is
 * anything but the length or the end of a turn: a full context (with what to do about it) or
 * Ctrl-C. Returns the stop reason, or MK_STOP_NONE after printing the error. */
enum mk_stop_reason mk_tool_generate(const struct mk_tool_opts *o, struct mk_session *s, struct mk_tool_stream *out,
                                     uint32_t *n_gen);

/* llama.cpp-style timing summary on stderr. */
void mk_tool_print_summary(const struct mk_timings *t);

#endif
