/* 'mk run': decodes text from a model through the public API, streaming tokens, with a llama.cpp-style timing summary. */
#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gen.h"
#include "runtime/mk.h"
#include "graph/executor.h"
#include "tools/cli.h"
#include "tools/cmds.h"

#define MK_RUN_DEFAULT_N    128
#define MK_RUN_DEFAULT_SEED 42u /* seed of the built-in model's weights */

static void mk_run_usage(FILE *f) {
    fprintf(f,
            "usage: mk run [-m FILE] [-p PROMPT] [-n N] [options]\n"
            "\n"
            "Decodes text from a GGUF Llama model and streams it to stdout; a timing summary goes to stderr.\n"
            "Without -m, a small synthetic model with random weights (it prints gibberish) is made on the\n"
            "fly in $TMPDIR (or /tmp) and deleted afterwards.\n"
            "\n"
            "  -m, --model FILE   GGUF model\n"
            "  -p, --prompt TEXT  prompt (default empty: generation starts from BOS alone)\n"
            "  -n, --n-predict N  tokens to generate; -1 = until end of sequence or a full context (default %d)\n"
            "  --temp T           temperature; 0 = greedy (default 0.8)\n"
            "  --top-k K          keep the K most likely tokens; 0 = 1024 (default 40)\n"
            "  --top-p P          nucleus mass, 0 < P <= 1; 1 = off (default 0.95)\n"
            "  --min-p M          drop tokens below M x the best probability, 0 <= M <= 1; 0 = off (default 0.05)\n"
            "  --seed S           sampling seed (default: random, printed on stderr)\n"
            "  -c, --ctx N        context length; 0 = min(model's, 4096) (default 0)\n"
            "  --backend KIND     auto, ref, cpu, megakernel, perop or graph (default auto: megakernel, else\n"
            "                     perop, else cpu)\n"
            "  -t, --threads N    cpu backend workers; 0 = number of cores (default 0)\n"
            "  --ids              print the generated token ids, space-separated, instead of text\n"
            "  -v, --verbose      report backend choices\n",
            MK_RUN_DEFAULT_N);
    fputs(mk_cli_chunk_usage, f);
    fputs(mk_cli_gpu_usage, f);
}

static int mk_run_bad(const char *opt, const char *val, const char *want) {
    fprintf(stderr, "mk run: %s '%s': expected %s\n", opt, val, want);
    return 2;
}

/* The session Ctrl-C cancels: the first SIGINT stops decoding at the next token so the summary
 * still prints and the temp model is removed; a second one (default action) kills the process. */
static struct mk_session *volatile mk_run_interruptible;

static void mk_run_on_sigint(int sig) {
    (void)sig;
    struct mk_session *s = mk_run_interruptible;
    if (s) mk_session_cancel(s);
}

struct mk_run_out {
    int ids;   /* print ids, not text */
    int first; /* no id printed yet */
};

static int mk_run_on_token(void *user, int32_t id, const char *piece, size_t len) {
    struct mk_run_out *o = user;
    if (o->ids) {
        printf("%s%d", o->first ? "" : " ", (int)id);
        o->first = 0;
    } else {
        fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    return 0;
}

static void mk_run_summary(const struct mk_timings *t, double total_ms) {
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

/* The session's plain mirror of the GPU settings (runtime/mk.h). */
static void mk_run_gpu_params(const struct mk_gpu_settings *s, struct mk_gpu_params *out) {
    out->dynamic_schedule = s->dynamic_schedule;
    out->tasks_per_worker = s->tasks_per_worker;
    out->attn_block = s->attn_block;
    out->fuse_attn_output = s->fuse_attn_output;
    out->blocks_per_sm = s->blocks_per_sm;
    out->no_rope_table = s->no_rope_table;
    out->trace = (int)s->trace;
    out->kernel_image = s->kernel_image;
}

int mk_cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "";
    long long n_predict = MK_RUN_DEFAULT_N;
    int print_ids = 0;
    struct mk_session_params sp = mk_session_default_params();
    struct mk_gpu_settings gpu = mk_gpu_default_settings();
    if (mk_cli_gpu_env("run", &gpu)) return 2;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mk_run_usage(stdout);
            return 0;
        }
        int g = mk_cli_gpu_flag("run", argc, argv, &i, &gpu);
        if (g < 0) return 2;
        if (g) continue;
        g = mk_cli_chunk_flag("run", argc, argv, &i, &sp.ubatch, &sp.spec, &sp.n_draft);
        if (g < 0) return 2;
        if (g) continue;
        if (!strcmp(a, "--ids")) {
            print_ids = 1;
            continue;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            sp.verbose = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mk run: %s: %s\n", a,
                    a[0] == '-' ? "missing value (or unknown option)" : "unexpected argument");
            mk_run_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        long long ll;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (mk_cli_parse_long(v, -1, INT32_MAX, &n_predict)) return mk_run_bad(a, v, "an integer >= -1");
        } else if (!strcmp(a, "--temp")) {
            if (mk_cli_parse_float(v, 0.0f, 1e6f, &sp.sampling.temperature)) return mk_run_bad(a, v, "a number >= 0");
        } else if (!strcmp(a, "--top-k")) {
            if (mk_cli_parse_long(v, 0, INT32_MAX, &ll)) return mk_run_bad(a, v, "an integer >= 0");
            sp.sampling.top_k = (int32_t)ll;
        } else if (!strcmp(a, "--top-p")) {
            if (mk_cli_parse_float(v, 0.0f, 1.0f, &sp.sampling.top_p) || !(sp.sampling.top_p > 0.0f))
                return mk_run_bad(a, v, "a number in (0, 1]");
        } else if (!strcmp(a, "--min-p")) {
            if (mk_cli_parse_float(v, 0.0f, 1.0f, &sp.sampling.min_p)) return mk_run_bad(a, v, "a number in [0, 1]");
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-' || s == MK_SEED_RANDOM)
                return mk_run_bad(a, v, "an integer in [0, 2^64 - 2]");
            sp.sampling.seed = s;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (mk_cli_parse_long(v, 0, INT32_MAX, &ll)) return mk_run_bad(a, v, "an integer >= 0");
            sp.n_ctx = (uint32_t)ll;
        } else if (!strcmp(a, "--backend")) {
            if (mk_backend_kind_parse(v, &sp.backend))
                return mk_run_bad(a, v, "auto, ref, cpu, megakernel, perop or graph");
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (mk_cli_parse_long(v, 0, 4096, &ll)) return mk_run_bad(a, v, "an integer in [0, 4096]");
            sp.n_threads = (uint32_t)ll;
        } else {
            fprintf(stderr, "mk run: unknown option '%s'\n", a);
            mk_run_usage(stderr);
            return 2;
        }
    }

    mk_run_gpu_params(&gpu, &sp.gpu);

    int rc = 1;
    char tmp_path[4096] = "";
    struct mk_lm *lm = NULL;
    struct mk_session *s = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    struct mk_error err;
    mk_error_clear(&err);

    if (!model_path) {
        if (mk_run_make_default_model(tmp_path, sizeof tmp_path)) goto done;
        model_path = tmp_path;
    }
    if (mk_lm_load(model_path, &lm, &err) != MK_OK) {
        fprintf(stderr, "mk run: %s\n", err.msg);
        goto done;
    }
    if (mk_session_create(lm, &sp, &s, &err) != MK_OK) {
        fprintf(stderr, "mk run: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "mk run: backend %s, n_ctx %u, ", mk_session_backend_name(s), (unsigned)mk_session_n_ctx(s));
    if (sp.sampling.temperature > 0.0f)
        fprintf(stderr, "temp %g, top-k %d, top-p %g, min-p %g, seed %llu\n", (double)sp.sampling.temperature,
                (int)sp.sampling.top_k, (double)sp.sampling.top_p, (double)sp.sampling.min_p,
                (unsigned long long)mk_session_seed(s));
    else
        fprintf(stderr, "greedy\n");
    mk_run_interruptible = s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mk_run_on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    size_t cap = strlen(prompt) + 4;
    int64_t n_ids;
    for (;;) {
        int32_t *grown = realloc(ids, cap * sizeof *ids);
        if (!grown) {
            fprintf(stderr, "mk run: out of memory\n");
            goto done;
        }
        ids = grown;
        n_ids = mk_lm_tokenize_prompt(lm, prompt, ids, cap);
        if (n_ids < 0 || (uint64_t)n_ids <= cap) break;
        cap = (size_t)n_ids;
    }
    if (n_ids < 0) {
        fprintf(stderr, "mk run: cannot tokenize the prompt: %s%s\n", mk_status_str((enum mk_status)n_ids),
                n_ids == MK_ERR_INVALID_ARG ? " (an empty prompt needs a BOS token)" : "");
        goto done;
    }
    if ((uint64_t)n_ids > mk_session_n_ctx(s)) {
        fprintf(stderr, "mk run: the prompt is %lld tokens, longer than the context of %u (raise --ctx)\n",
                (long long)n_ids, (unsigned)mk_session_n_ctx(s));
        goto done;
    }
    if (mk_session_feed(s, ids, (size_t)n_ids) != MK_OK) {
        fprintf(stderr, "mk run: evaluating the prompt: %s\n", mk_session_last_error(s));
        goto done;
    }
    if (!print_ids) {
        size_t need = mk_lm_detokenize(lm, ids, (size_t)n_ids, NULL, 0);
        text = malloc(need + 1);
        if (!text) {
            fprintf(stderr, "mk run: out of memory\n");
            goto done;
        }
        mk_lm_detokenize(lm, ids, (size_t)n_ids, text, need);
        fwrite(text, 1, need, stdout);
        fflush(stdout);
    }

    struct mk_run_out out = { .ids = print_ids, .first = 1 };
    enum mk_stop_reason why;
    uint32_t n_gen = 0;
    if (mk_session_generate(s, (int32_t)n_predict, mk_run_on_token, &out, &why, &n_gen) != MK_OK) {
        printf("\n");
        fprintf(stderr, "mk run: generation stopped after %u tokens: %s\n", (unsigned)n_gen, mk_session_last_error(s));
        goto done;
    }
    printf("\n");
    fflush(stdout);
    if (why == MK_STOP_CONTEXT_FULL)
        fprintf(stderr,
                "mk run: context full: all %u positions are used; stopped after %u of %lld tokens (raise --ctx)\n",
                (unsigned)mk_session_n_ctx(s), (unsigned)n_gen, n_predict);
    else if (why == MK_STOP_EOS)
        fprintf(stderr, "mk run: end of sequence after %u tokens\n", (unsigned)n_gen);
    else if (why == MK_STOP_CANCELLED)
        fprintf(stderr, "mk run: interrupted after %u tokens\n", (unsigned)n_gen);
    struct mk_timings t = mk_session_timings(s);
    mk_run_summary(&t, t.load_ms + t.init_ms + t.prompt_ms + t.eval_ms);
    rc = why == MK_STOP_CANCELLED ? 130 : 0;
done:
    signal(SIGINT, SIG_DFL);
    mk_run_interruptible = NULL;
    free(text);
    free(ids);
    mk_session_free(s);
    mk_lm_free(lm);
    if (tmp_path[0]) unlink(tmp_path);
    return rc;
}
