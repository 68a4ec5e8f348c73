/* The steps 'mk run' and 'mk chat' share: their common flags, opening a session, tokenizing, chat rendering, streaming. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/session.h"

int mk_tool_opts_init(struct mk_tool_opts *o, const char *cmd, long long n_predict) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->n_predict = n_predict;
    o->sp = mk_session_default_params();
    o->gpu = mk_gpu_default_settings();
    return mk_cli_gpu_env(cmd, &o->gpu) ? -1 : 0;
}

void mk_tool_print_usage(FILE *f, long long n_predict) {
    fprintf(f,
            "  -m, --model FILE   GGUF model\n"
            "  -n, --n-predict N  tokens to generate; -1 = until end of generation or a full context (default %lld)\n"
            "  --temp T           temperature; 0 = greedy (default 0.8)\n"
            "  --top-k K          keep the K most likely tokens; 0 = 1024 (default 40)\n"
            "  --top-p P          nucleus mass, 0 < P <= 1; 1 = off (default 0.95)\n"
            "  --min-p M          drop tokens below M x the best probability, 0 <= M <= 1; 0 = off (default 0.05)\n"
            "  --seed S           sampling seed (default: random, printed on stderr)\n"
            "  -c, --ctx N        context length; 0 = min(model's, 4096) (default 0)\n"
            "  --backend KIND     auto, ref, cpu, megakernel, perop or graph (default auto: megakernel, else\n"
            "                     perop, else cpu)\n"
            "  -t, --threads N    cpu backend workers; 0 = number of cores (default 0)\n"
            "  --chat-template NAME  chat format instead of the one the file's tokenizer.chat_template stands\n"
            "                     for: chatml, llama3, llama2, mistral-v7, phi3, gemma, ... (an unknown name is\n"
            "                     refused with the list)\n"
            "  --system TEXT      system message of the conversation\n"
            "  --ignore-eos       go on through end-of-generation tokens (EOS, <|im_end|>, <|eot_id|>, ...)\n"
            "  --host-loop        one command per generated token, even on the megakernel (whose token loop\n"
            "                     otherwise runs on the GPU)\n"
            "  --ids              print the generated token ids, space-separated, instead of text\n"
            "  -v, --verbose      report backend choices and the prompt's token ids\n",
            n_predict);
    fputs(mk_cli_kv_usage, f);
    fputs(mk_cli_chunk_usage, f);
    fputs(mk_cli_gpu_usage, f);
}

static int mk_tool_bad(const char *cmd, const char *opt, const char *val, const char *want) {
    fprintf(stderr, "mk %s: %s '%s': expected %s\n", cmd, opt, val, want);
    return -1;
}

/* The flags that take a value; 0 when argv[*i] is none of them. */
static int mk_tool_parse_value(struct mk_tool_opts *o, const char *a, const char *v) {
    struct mk_sampling_params *sa = &o->sp.sampling;
    long long ll;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        o->model_path = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
        if (mk_cli_parse_long(v, -1, INT32_MAX, &o->n_predict)) return mk_tool_bad(o->cmd, a, v, "an integer >= -1");
    } else if (!strcmp(a, "--temp")) {
        if (mk_cli_parse_float(v, 0.0f, 1e6f, &sa->temperature)) return mk_tool_bad(o->cmd, a, v, "a number >= 0");
    } else if (!strcmp(a, "--top-k")) {
        if (mk_cli_parse_long(v, 0, INT32_MAX, &ll)) return mk_tool_bad(o->cmd, a, v, "an integer >= 0");
        sa->top_k = (int32_t)ll;
    } else if (!strcmp(a, "--top-p")) {
        if (mk_cli_parse_float(v, 0.0f, 1.0f, &sa->top_p) || !(sa->top_p > 0.0f))
            return mk_tool_bad(o->cmd, a, v, "a number in (0, 1]");
    } else if (!strcmp(a, "--min-p")) {
        if (mk_cli_parse_float(v, 0.0f, 1.0f, &sa->min_p)) return mk_tool_bad(o->cmd, a, v, "a number in [0, 1]");
    } else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-' || s == MK_SEED_RANDOM)
            return mk_tool_bad(o->cmd, a, v, "an integer in [0, 2^64 - 2]");
        sa->seed = s;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
        if (mk_cli_parse_long(v, 0, INT32_MAX, &ll)) return mk_tool_bad(o->cmd, a, v, "an integer >= 0");
        o->sp.n_ctx = (uint32_t)ll;
    } else if (!strcmp(a, "--backend")) {
        if (mk_backend_kind_parse(v, &o->sp.backend))
            return mk_tool_bad(o->cmd, a, v, "auto, ref, cpu, megakernel, perop or graph");
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (mk_cli_parse_long(v, 0, 4096, &ll)) return mk_tool_bad(o->cmd, a, v, "an integer in [0, 4096]");
        o->sp.n_threads = (uint32_t)ll;
    } else if (!strcmp(a, "--chat-template")) {
        /* Checked here, so that a wrong name fails before minutes of loading. */
        size_t i = 0;
        while (mk_chat_template_name_at(i) && strcmp(mk_chat_template_name_at(i), v)) i++;
        if (!mk_chat_template_name_at(i)) {
            fprintf(stderr, "mk %s: unknown chat template '%s' (known:", o->cmd, v);
            for (i = 0; mk_chat_template_name_at(i); i++)
                fprintf(stderr, "%s %s", i ? "," : "", mk_chat_template_name_at(i));
            fprintf(stderr, ")\n");
            return -1;
        }
        o->chat_template = v;
    } else if (!strcmp(a, "--system")) {
        o->system = v;
    } else {
        return 0;
    }
    return 1;
}

static const char *const mk_tool_value_flags[] = {
    "-m",     "--model", "-n",    "--n-predict", "--temp", "--top-k",   "--top-p",         "--min-p",
    "--seed", "-c",      "--ctx", "--backend",   "-t",     "--threads", "--chat-template", "--system",
};

int mk_tool_parse_flag(struct mk_tool_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    int g = mk_cli_gpu_flag(o->cmd, argc, argv, i, &o->gpu);
    if (g) return g;
    g = mk_cli_chunk_flag(o->cmd, argc, argv, i, &o->sp.ubatch, &o->sp.spec, &o->sp.n_draft);
    if (g) return g;
    g = mk_cli_kv_flag(o->cmd, argc, argv, i, &o->sp.kv_type);
    if (g) return g;
    g = mk_cli_act_flag(o->cmd, argc, argv, i, &o->sp.act_f32);
    if (g) return g;
    if (!strcmp(a, "--ids")) {
        o->print_ids = true;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        o->sp.verbose = 1;
    } else if (!strcmp(a, "--no-special")) {
        o->no_special = true;
    } else if (!strcmp(a, "--ignore-eos")) {
        o->sp.ignore_eog = 1;
    } else if (!strcmp(a, "--host-loop")) {
        o->sp.host_loop = 1;
    } else {
        bool takes_value = false;
        for (size_t k = 0; k < sizeof mk_tool_value_flags / sizeof mk_tool_value_flags[0]; k++)
            takes_value |= !strcmp(a, mk_tool_value_flags[k]);
        if (!takes_value) return 0;
        if (*i + 1 >= argc) {
            fprintf(stderr, "mk %s: %s: missing value\n", o->cmd, a);
            return -1;
        }
        return mk_tool_parse_value(o, a, argv[++*i]);
    }
    return 1;
}

/* The session Ctrl-C cancels, whether an answer is running, and the flag that stops a load (all
 * read by the signal handler). */
static struct mk_session *volatile mk_tool_interruptible;
static volatile sig_atomic_t mk_tool_answering;
static int mk_tool_load_cancel;

static void mk_tool_on_sigint(int sig) {
    struct mk_session *s = mk_tool_interruptible;
    if (s && mk_tool_answering) {
        mk_session_cancel(s);
        return;
    }
    if (!s) { /* still loading: the read stops between chunks */
        __atomic_store_n(&mk_tool_load_cancel, 1, __ATOMIC_RELAXED);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

int mk_tool_open(const struct mk_tool_opts *o, struct mk_lm **lm, struct mk_session **s) {
    struct mk_error err;
    mk_error_clear(&err);
    struct mk_session_params sp = o->sp;
    mk_cli_gpu_params(&o->gpu, &sp.gpu);
    *s = NULL;
    mk_tool_sigint_install(NULL, false);
    struct mk_lm_load_params lp = { &mk_tool_load_cancel };
    if (mk_lm_load_ex(o->model_path, &lp, lm, &err) != MK_OK || mk_session_create(*lm, &sp, s, &err) != MK_OK) {
        fprintf(stderr, "mk %s: %s\n", o->cmd, err.msg);
        return err.status == MK_ERR_CANCELLED ? 130 : -1;
    }
    if (__atomic_load_n(&mk_tool_load_cancel, __ATOMIC_RELAXED)) {
        fprintf(stderr, "mk %s: interrupted\n", o->cmd);
        return 130;
    }
    fprintf(stderr, "mk %s: backend %s, n_ctx %u, ", o->cmd, mk_session_backend_name(*s),
            (unsigned)mk_session_n_ctx(*s));
    if (sp.sampling.temperature > 0.0f)
        fprintf(stderr, "temp %g, top-k %d, top-p %g, min-p %g, seed %llu\n", (double)sp.sampling.temperature,
                (int)sp.sampling.top_k, (double)sp.sampling.top_p, (double)sp.sampling.min_p,
                (unsigned long long)mk_session_seed(*s));
    else
        fprintf(stderr, "greedy\n");
    return 0;
}

void mk_tool_sigint_install(struct mk_session *s, bool once) {
    mk_tool_interruptible = s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mk_tool_on_sigint;
    sa.sa_flags = once ? SA_RESETHAND : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

void mk_tool_sigint_answering(bool on) { mk_tool_answering = on; }

void mk_tool_sigint_remove(void) {
    signal(SIGINT, SIG_DFL);
    mk_tool_answering = 0;
    mk_tool_interruptible = NULL;
}

int64_t mk_tool_tokenize(const char *cmd, const struct mk_lm *lm, const char *text, bool add_bos, bool parse_special,
                         int32_t **ids) {
    *ids = NULL;
    const size_t len = strlen(text);
    int64_t n = mk_lm_tokenize(lm, text, len, add_bos, parse_special, NULL, 0);
    if (n >= 0) {
        *ids = malloc(((size_t)n + 1) * sizeof **ids);
        if (!*ids) n = MK_ERR_NOMEM;
    }
    if (n >= 0) n = mk_lm_tokenize(lm, text, len, add_bos, parse_special, *ids, (size_t)n + 1);
    if (n < 0) {
        fprintf(stderr, "mk %s: cannot tokenize a text of %zu bytes: %s\n", cmd, len, mk_status_str((enum mk_status)n));
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return n;
}

char *mk_tool_render_chat(const struct mk_tool_opts *o, const struct mk_lm *lm, const struct mk_chat_msg *msgs,
                          size_t n) {
    struct mk_error err;
    mk_error_clear(&err);
    int64_t need = mk_lm_chat_apply(lm, o->chat_template, msgs, n, true, NULL, 0, &err);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (need >= 0 && !text) need = mk_error_set(&err, MK_ERR_NOMEM, "out of memory for %lld bytes", (long long)need);
    if (need >= 0) need = mk_lm_chat_apply(lm, o->chat_template, msgs, n, true, text, (size_t)need + 1, &err);
    if (need < 0) {
        fprintf(stderr, "mk %s: %s\n", o->cmd, err.msg);
        free(text);
        return NULL;
    }
    return text;
}

void mk_tool_print_ids(const char *cmd, const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "mk %s: %s: %zu tokens:", cmd, what, n);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fputc('\n', stderr);
}

static void mk_tool_keep(struct mk_tool_stream *o, const char *piece, size_t len) {
    if (o->oom) return;
    if (o->len + len + 1 > o->cap) {
        size_t cap = (o->len + len + 1) * 2;
        char *grown = realloc(o->text, cap);
        if (!grown) {
            o->oom = true;
            return;
        }
        o->text = grown;
        o->cap = cap;
    }
    memcpy(o->text + o->len, piece, len);
    o->len += len;
    o->text[o->len] = '\0';
}

static int mk_tool_on_token(void *user, int32_t id, const char *piece, size_t len) {
    struct mk_tool_stream *o = user;
    if (o->ids) {
        printf("%s%d", o->first ? "" : " ", (int)id);
        o->first = false;
    } else {
        fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    if (o->keep_text) mk_tool_keep(o, piece, len);
    return 0;
}

enum mk_stop_reason mk_tool_generate(const struct mk_tool_opts *o, struct mk_session *s, struct mk_tool_stream *out,
                                     uint32_t *n_gen) {
    enum mk_stop_reason why = MK_STOP_NONE;
    *n_gen = 0;
    out->first = true;
    mk_tool_sigint_answering(true);
    enum mk_status st = mk_session_generate(s, (int32_t)o->n_predict, mk_tool_on_token, out, &why, n_gen);
    mk_tool_sigint_answering(false);
    printf("\n");
    fflush(stdout);
    if (st != MK_OK) {
        fprintf(stderr, "mk %s: generation stopped after %u tokens: %s\n", o->cmd, (unsigned)*n_gen,
                mk_session_last_error(s));
        return MK_STOP_NONE;
    }
    if (out->oom) {
        fprintf(stderr, "mk %s: out of memory for the answer's text\n", o->cmd);
        return MK_STOP_NONE;
    }
    if (why == MK_STOP_CONTEXT_FULL)
        fprintf(stderr,
                "mk %s: context full: all %u positions are used; stopped after %u tokens (raise --ctx, up to "
                "the model's training context)\n",
                o->cmd, (unsigned)mk_session_n_ctx(s), (unsigned)*n_gen);
    else if (why == MK_STOP_CANCELLED)
        fprintf(stderr, "mk %s: interrupted after %u tokens\n", o->cmd, (unsigned)*n_gen);
    return why;
}

void mk_tool_print_summary(const struct mk_timings *t) {
    const double total_ms = t->load_ms + t->init_ms + t->prompt_ms + t->eval_ms;
    fprintf(stderr, "\nmk:        load time = %10.2f ms\n", t->load_ms);
    fprintf(stderr, "mk:        init time = %10.2f ms (backend and KV cache)\n", t->init_ms);
    if (t->n_prompt)
        fprintf(stderr, "mk: prompt eval time = %10.2f ms / %5u tokens (%8.2f ms per token, %8.2f tokens per second)\n",
                t->prompt_ms, (unsigned)t->n_prompt, t->prompt_ms / t->n_prompt,
                t->prompt_ms > 0 ? 1e3 * t->n_prompt / t->prompt_ms : 0.0);
    if (t->n_eval)
        fprintf(stderr, "mk:        eval time = %10.2f ms / %5u runs   (%8.2f ms per token, %8.2f tokens per second)\n",
                t->eval_ms, (unsigned)t->n_eval, t->eval_ms / t->n_eval,
                t->eval_ms > 0 ? 1e3 * t->n_eval / t->eval_ms : 0.0);
    else
        fprintf(stderr, "mk:        eval time = %10.2f ms / %5u runs\n", t->eval_ms, 0u);
    if (t->n_spec_steps)
        fprintf(stderr, "mk:      speculation = %5u steps, %u of %u drafted tokens accepted (%.1f %%)\n",
                (unsigned)t->n_spec_steps, (unsigned)t->n_accepted, (unsigned)t->n_drafted,
                t->n_drafted ? 100.0 * t->n_accepted / t->n_drafted : 0.0);
    fprintf(stderr, "mk:       total time = %10.2f ms / %5u tokens\n", total_ms, (unsigned)(t->n_prompt + t->n_eval));
}
