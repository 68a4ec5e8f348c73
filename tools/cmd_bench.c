/* mk bench: llama-bench-style decode timings per backend, against the memory-bandwidth floor. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graph/cpu_exec.h"
#include "graph/cpu_time.h"
#include "runtime/backend.h"
#include "runtime/bandwidth.h"
#include "runtime/soak.h"
#include "core/gen.h"
#include "core/model.h"
#include "tools/bench_chunk.h"
#include "tools/bench_stats.h"
#include "tools/cli.h"
#include "tools/cmds.h"
#include "tools/trace.h"

/* Prompt lengths one -p may list (llama-bench's -p 512,256,128). */
#define MK_BENCH_PROMPTS 8

struct mk_bench_opts {
    const char *model;
    const char *latencies; /* --soak: each measured token's position, wall and device ms to this file */
    const char *backends;  /* comma list or "all" */
    const char *presets;   /* comma list, used without -m */
    const char *dtype;
    uint32_t n, ctx, threads, warmup;
    uint32_t depth; /* tg starts at this position, after depth untimed steps (llama-bench -d) */
    bool json;
    struct mk_gpu_settings gpu;
    bool n_given, ctx_given;
    uint32_t soak; /* sessions of a soak run; 0 = the usual benchmark */
    float temp;
    uint64_t seed;
    uint32_t ubatch, n_draft;           /* chunk steps of up to ubatch tokens */
    uint32_t prompts[MK_BENCH_PROMPTS]; /* -p's list: a pp<N> row each, in the order given */
    uint32_t n_prompts;                 /* 0: no prompt test */
    int spec;                           /* nonzero (MK_SPEC_LOOKUP): also the speculative-decoding tests */
    bool breakdown;                     /* per op kind time and bandwidth of one traced step */
    bool host_loop;                     /* tg posts one step at a time even where the backend can generate */
    enum mk_kv_type kv_type;
    int act_f32; /* --chunk-act f32 */
};

struct mk_bench_row {
    char model[64];
    uint64_t size;
    const char *backend;
    char test[16];
    double p50_ms, p99_ms, mean_ms, dev_p50_ms;
    double p99_local; /* p99 of each token's time over its neighbours' median (tools/bench_stats.h), 0: none */
    double cpu_ms;    /* host CPU time (all threads of the process) per token */
    enum mk_kv_type kv_type;
    double bw_gbs, bw_ratio, floor_ms;
    double device_bw_gbs;
    char note[96];
};

static void mk_bench_usage(FILE *f) {
    fprintf(f, "usage: mk bench [-m FILE] [--backend all|ref,cpu,megakernel,perop,graph] [-n 128] [-d 0] [--ctx 512]\n"
               "                [--threads N] [--preset llama-1b,llama-8b] [--dtype bf16] [--breakdown] [--host-loop] "
               "[--json]\n"
               "  Times -n greedy decode steps (tg<n>) from an empty context on each backend and prints\n"
               "  ms/token p50 and p99, host CPU ms/token (every thread of the process: the cost to the\n"
               "  machine beside the wall time), tokens/s, the weight bandwidth achieved (weight bytes per token over\n"
               "  the p50 time) and its ratio to the read bandwidth the same run measures on that device.\n"
               "  Without -m it generates synthetic presets (cached in $TMPDIR) and benchmarks them.\n"
               "  'all' means every GPU backend when a GPU is present, else cpu.\n"
               "  The note 'host +N us' is the median of each step's wall time minus the time the backend\n"
               "  measured for the step itself (the GPU's own clock): the host's share of a token; 'device\n"
               "  p99' is the p99 of that time alone, so a slow wall p99 shows whether the GPU or the host\n"
               "  took it. 'p99 X x local median' (past 31 tokens; p99_over_local_median in --json) is the\n"
               "  p99 of each token's time over the median of the 31 tokens around it: a step that grows\n"
               "  with the position (the attention reading more of the cache) cancels there, so it is the\n"
               "  run's jitter, where p99 / p50 is the jitter and the growth together.\n"
               "  -d N (--depth) starts the timed steps and the timed prompt at position N, after N untimed\n"
               "  ones (tg<n>@d<N>, pp<p>@d<N>, like llama-bench -d); --ctx then defaults to the larger of\n"
               "  512, N + n and N + p. -n 0 leaves the prompt test alone (like llama-bench -n 0).\n"
               "\n"
               "       mk bench --soak SESSIONS -m FILE [--backend B] [-n 2000] [--temp 0.8] [--seed 1000] [--ctx N]\n"
               "                [--threads N] [--json] [--latencies FILE]\n"
               "  Soak: SESSIONS sessions one after another on the loaded model (after 2 warm-up ones),\n"
               "  each generating -n tokens sampled at --temp with seed S + i (the sequence restarts from\n"
               "  the prompt when it ends). Reports per-token p50/p99/max, wall and host CPU ms per token,\n"
               "  resident memory, open files and threads at start and end, and errors; exits 1 on any\n"
               "  error or on growth: anonymous resident memory (heap, caches; not the pages of the binary) by\n"
               "  more than 1 %% of all resident memory (at least 256 KiB), any file or thread. The per-token\n"
               "  times are also given on the backend's own clock (the GPU's), so a slow p99 shows whether\n"
               "  the device or the host took it; --latencies FILE writes every measured token's position,\n"
               "  wall ms and device ms, one per line.\n\n"
               "  -p N (default 512; 0 = none) adds pp<N>: N prompt tokens from an empty context in chunk\n"
               "  steps of up to --ubatch tokens, as tokens/s, with the time to first token (ttft). A comma\n"
               "  list (-p 512,256,128, as llama-bench takes it) adds a row for each, on one loaded backend.\n"
               "  --spec lookup adds greedy decoding of -n tokens with and without prompt-lookup\n"
               "  speculation (--draft K) on a shipped repetitive task (rewrite a passage with small edits)\n"
               "  and on free text (a story), with the acceptance rate and whether the outputs agree.\n"
               "  tg on the megakernel runs the token loop on the device (one command for all -n tokens,\n"
               "  the host only collects them): the times are then between tokens as the host receives\n"
               "  them, and 'host +N us' is the wall time of the whole run beyond the device's own, per\n"
               "  token. --host-loop posts one step per token instead, as the other backends do.\n"
               "  --breakdown adds, for the cpu and megakernel backends, the time and weight bandwidth\n"
               "  per op kind of one more step, run with per-task timestamps (mk trace writes the whole\n"
               "  step as a Perfetto trace).\n");
    fputs(mk_cli_kv_usage, f);
    fputs(mk_cli_chunk_usage, f);
    fputs(mk_cli_gpu_usage, f);
}

static double mk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Greedy steps at positions 0 .. n - 1 from *tok, untimed; *tok ends as the last step's token. */
static enum mk_status mk_bench_untimed(struct mk_backend *b, struct mk_step_cmd *cmd, int32_t *tok, uint32_t n,
                                       struct mk_error *err) {
    for (uint32_t i = 0; i < n; i++) {
        cmd->token = *tok;
        cmd->pos = (int32_t)i;
        enum mk_status st = b->vt->step(b, cmd, tok, err);
        if (st != MK_OK) return st;
    }
    return MK_OK;
}

/* A timed device generation: each token's arrival gap on the host and its device time. */
struct mk_bench_gen {
    double *ms;       /* (n) host ms since the token before (or the call) */
    uint64_t *dev_ns; /* (n) device time of the step that sampled each token */
    uint32_t n;
    double t_prev;
};

static bool mk_bench_on_token(void *user, uint32_t i, int32_t token, uint64_t step_ns) {
    (void)token;
    struct mk_bench_gen *g = user;
    const double now = mk_now_ms();
    g->ms[i] = now - g->t_prev;
    g->dev_ns[i] = step_ns;
    g->t_prev = now;
    g->n = i + 1u;
    return false;
}

/* Times one backend on one model (row: tg, pp: a row per -p length); 0 on success, else prints why
 * and returns -1. */
static int mk_bench_one(const struct mk_model *m, const char *name, enum mk_backend_kind kind,
                        const struct mk_bench_opts *o, struct mk_bench_row *row,
                        struct mk_bench_row pp[MK_BENCH_PROMPTS]) {
    struct mk_backend_params bp = { 0 };
    bp.kind = kind;
    bp.ubatch = o->ubatch;
    bp.n_ctx = o->ctx;
    bp.kv_type = o->kv_type;
    bp.act_f32 = o->act_f32 != 0;
    bp.n_threads = o->threads;
    bp.gpu = o->gpu;
    struct mk_error err = { 0 };
    struct mk_backend *b = NULL;
    if (mk_backend_create(m, &bp, &b, &err) != MK_OK) {
        fprintf(stderr, "mk bench: %s on %s: %s\n", mk_backend_kind_name(kind), name, err.msg);
        return -1;
    }
    double *ms = calloc(o->n + 1u, sizeof *ms), *dev = calloc(o->n + 1u, sizeof *dev);
    int rc = -1;
    if (!ms || !dev) goto done;
    struct mk_step_cmd cmd = { 0 };
    cmd.cmd = MK_CMD_STEP;
    int32_t tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    /* Warm up (module load, first touches), then start over from an empty context and fill it to
     * the depth, untimed. */
    if (mk_bench_untimed(b, &cmd, &tok, o->warmup, &err) != MK_OK || b->vt->reset(b, &err) != MK_OK) goto fail;
    tok = m->vocab.bos >= 0 ? m->vocab.bos : 1;
    if (mk_bench_untimed(b, &cmd, &tok, o->depth, &err) != MK_OK) goto fail;
    uint64_t bytes = mk_model_bytes_per_token(m);
    row->size = bytes;
    row->backend = b->vt->name;
    if (o->n && b->vt->generate && !o->host_loop && b->kind == MK_BACKEND_MEGAKERNEL) {
        /* One device generation: its tokens as the host receives them. */
        struct mk_bench_gen bg = { .ms = ms, .dev_ns = calloc(o->n, sizeof(uint64_t)), .n = 0 };
        if (!bg.dev_ns) goto done;
        cmd.token = tok;
        cmd.pos = (int32_t)o->depth;
        const struct mk_backend_gen gen = { .max_steps = o->n, .on_token = mk_bench_on_token, .user = &bg };
        struct mk_backend_gen_result r;
        struct mk_cpu_span span = mk_cpu_span_start();
        bg.t_prev = mk_now_ms();
        const double t0 = bg.t_prev;
        enum mk_status gst = b->vt->generate(b, &cmd, &gen, &r, &err);
        const double wall = mk_now_ms() - t0;
        row->cpu_ms = mk_cpu_span_ms_per(&span, o->n, NULL);
        if (gst == MK_OK && (r.n_steps != o->n || bg.n != o->n))
            gst = mk_error_set(&err, MK_ERR_INTERNAL, "the device generation ran %u steps and gave %u tokens for %u",
                               r.n_steps, bg.n, o->n);
        if (gst != MK_OK) {
            free(bg.dev_ns);
            goto fail;
        }
        uint32_t n_dev = 0;
        for (uint32_t i = 0; i < o->n; i++)
            if (bg.dev_ns[i]) dev[n_dev++] = bg.dev_ns[i] / 1e6;
        const double dev_total = r.t_end_ns > r.t_start_ns ? (r.t_end_ns - r.t_start_ns) / 1e6 : 0;
        snprintf(row->note, sizeof row->note, "device loop, host +%.1f us, device p99 %.3f ms",
                 (wall - dev_total) / o->n * 1e3, n_dev ? mk_bench_quantile(dev, n_dev, 0.99) : 0.0);
        row->dev_p50_ms = n_dev ? mk_bench_quantile(dev, n_dev, 0.50) : 0;
        free(bg.dev_ns);
    } else if (o->n) {
        uint32_t n_dev = 0;
        struct mk_cpu_span span = mk_cpu_span_start();
        for (uint32_t i = 0; i < o->n; i++) {
            cmd.token = tok;
            cmd.pos = (int32_t)(o->depth + i);
            double t0 = mk_now_ms();
            if (b->vt->step(b, &cmd, &tok, &err) != MK_OK) goto fail;
            ms[i] = mk_now_ms() - t0;
            if (b->last_step_ns) dev[n_dev++] = b->last_step_ns / 1e6;
        }
        row->cpu_ms = mk_cpu_span_ms_per(&span, o->n, NULL);
        double *host = n_dev == o->n ? malloc(n_dev * sizeof *host) : NULL;
        if (host) {
            /* What a step costs beyond the device's own time: the host's command, wait and wake-up. */
            for (uint32_t i = 0; i < n_dev; i++) host[i] = ms[i] - dev[i];
            /* With the device's own p99 beside the wall p99, a slow step shows whether the GPU or the
             * host (wake-up, preemption) took the time. */
            snprintf(row->note, sizeof row->note, "host +%.1f us, device p99 %.3f ms",
                     mk_bench_quantile(host, n_dev, 0.50) * 1e3, mk_bench_quantile(dev, n_dev, 0.99));
            free(host);
        }
        row->dev_p50_ms = n_dev ? mk_bench_quantile(dev, n_dev, 0.50) : 0;
    }
    if (o->n) { /* -n 0: the prompt test alone, as llama-bench -n 0 */
        double sum = 0;
        for (uint32_t i = 0; i < o->n; i++) sum += ms[i];
        row->mean_ms = sum / o->n;
        row->p99_local = mk_bench_local_quantile(ms, o->n, 0.99); /* before mk_bench_quantile sorts ms */
        if (row->p99_local > 0 && o->n > 2u * MK_BENCH_LOCAL_HALF + 1u) {
            const size_t len = strlen(row->note);
            snprintf(row->note + len, sizeof row->note - len, "%sp99 %.3f x local median", len ? ", " : "",
                     row->p99_local);
        }
        row->p99_ms = mk_bench_quantile(ms, o->n, 0.99);
        row->p50_ms = mk_bench_quantile(ms, o->n, 0.50);
        row->bw_gbs = bytes / (row->p50_ms * 1e-3) / 1e9;
        if (o->depth)
            snprintf(row->test, sizeof row->test, "tg%u@d%u", o->n, o->depth);
        else
            snprintf(row->test, sizeof row->test, "tg%u", o->n);
    }
    for (uint32_t k = 0; k < o->n_prompts; k++) {
        const uint32_t n_prompt = o->prompts[k];
        struct mk_bench_pp r;
        struct mk_cpu_span span = mk_cpu_span_start();
        if (mk_bench_pp_run(b, m->cfg.n_vocab, n_prompt, o->depth, 3, &r, &err) != MK_OK) goto fail;
        pp[k] = *row;
        /* Host CPU per prompt token over the repetitions (their untimed depth steps included). */
        pp[k].cpu_ms = mk_cpu_span_ms_per(&span, 3u * n_prompt, NULL);
        if (o->depth)
            snprintf(pp[k].test, sizeof pp[k].test, "pp%u@d%u", n_prompt, o->depth);
        else
            snprintf(pp[k].test, sizeof pp[k].test, "pp%u", n_prompt);
        pp[k].p50_ms = pp[k].mean_ms = r.ms_per_token_p50;
        pp[k].p99_ms = r.ms_per_token_max;
        pp[k].dev_p50_ms = pp[k].p99_local = 0;
        /* A chunk step reads the weights once for all its tokens. */
        pp[k].bw_gbs = (double)bytes * r.steps / (r.ttft_ms * 1e-3) / 1e9;
        snprintf(pp[k].note, sizeof pp[k].note, "ttft %.1f ms, %u step%s", r.ttft_ms, r.steps,
                 r.steps == 1u ? "" : "s");
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "mk bench: %s on %s: %s\n", mk_backend_kind_name(kind), name, err.msg);
done:
    free(ms);
    free(dev);
    b->vt->free(b);
    return rc;
}

/* mk bench --soak: one backend, one model; 0 when flat and error-free. */
static int mk_bench_soak(const struct mk_bench_opts *o) {
    if (!o->model) {
        fprintf(stderr, "mk bench: --soak needs -m FILE\n");
        return 2;
    }
    enum mk_backend_kind kind = MK_BACKEND_AUTO;
    if (strcmp(o->backends, "all") && mk_backend_kind_parse(o->backends, &kind) != 0) {
        fprintf(stderr, "mk bench: --soak runs one backend; '%s' is not one (ref, cpu, megakernel, perop, graph)\n",
                o->backends);
        return 2;
    }
    struct mk_error err = { 0 };
    struct mk_lm *lm = NULL;
    if (mk_lm_load(o->model, &lm, &err) != MK_OK) {
        fprintf(stderr, "mk bench: %s\n", err.msg);
        return 1;
    }
    struct mk_soak_params p = mk_soak_default_params();
    p.sessions = o->soak;
    p.tokens = o->n_given ? o->n : 2000;
    p.seed = o->seed;
    p.session.backend = kind;
    p.session.n_threads = o->threads;
    p.session.n_ctx = o->ctx_given ? o->ctx : 0;
    p.session.kv_type = o->kv_type;
    p.session.act_f32 = o->act_f32;
    p.session.sampling.temperature = o->temp;
    p.latencies_path = o->latencies;
    mk_cli_gpu_params(&o->gpu, &p.session.gpu);
    struct mk_soak_report r;
    int rc = 1;
    if (mk_soak_run(lm, &p, &r, &err) != MK_OK) {
        fprintf(stderr, "mk bench: soak: %s\n", err.msg);
        goto done;
    }
    const char *base = strrchr(o->model, '/');
    base = base ? base + 1 : o->model;
    if (o->json) {
        printf("{\"model\":\"%s\",\"backend\":\"%s\",\"sessions\":%u,\"tokens_per_session\":%u,\"tokens\":%" PRIu64
               ",\"errors\":%u,\"ms_p50\":%.4f,\"ms_p99\":%.4f,\"ms_max\":%.4f,\"device_ms_p50\":%.4f,\"device_ms_"
               "p99\":%.4f,"
               "\"wall_ms_per_token\":%.4f,"
               "\"host_cpu_ms\":%.4f,\"rss_kib_start\":%ld,\"rss_kib_end\":%ld,\"anon_kib_start\":%ld,\"anon_kib_end\":"
               "%ld,\"fds_start\":%d,\"fds_end\":%d,"
               "\"threads_start\":%d,\"threads_end\":%d,\"pass\":%s,\"verdict\":\"",
               base, mk_backend_kind_name(kind), r.sessions, p.tokens, r.tokens, r.errors, r.p50_ms, r.p99_ms, r.max_ms,
               r.dev_p50_ms, r.dev_p99_ms, r.wall_ms_per_token, r.cpu_ms_per_token, r.rss0_kib, r.rss1_kib, r.anon0_kib,
               r.anon1_kib, r.fds0, r.fds1, r.threads0, r.threads1, r.verdict[0] ? "false" : "true");
        for (const char *c = r.verdict; *c; c++) printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
        printf("\"}\n");
    } else {
        printf("soak %s on %s: %u sessions x %u tokens (%" PRIu64 " tokens, temp %.2f), %u errors\n", base,
               mk_backend_kind_name(kind), r.sessions, p.tokens, r.tokens, (double)o->temp, r.errors);
        printf("  per token: p50 %.3f ms, p99 %.3f ms, max %.3f ms; wall %.3f ms, host cpu %.3f ms\n", r.p50_ms,
               r.p99_ms, r.max_ms, r.wall_ms_per_token, r.cpu_ms_per_token);
        if (r.dev_p50_ms > 0)
            printf("  on the backend's own clock: p50 %.3f ms, p99 %.3f ms (the rest of a token is the host's)\n",
                   r.dev_p50_ms, r.dev_p99_ms);
        double pct = r.rss0_kib > 0 ? 100.0 / (double)r.rss0_kib : 0.0;
        printf("  resident memory %ld -> %ld KiB (%+.2f %%): anonymous %ld -> %ld KiB (%+.2f %% of resident), "
               "file-backed %ld -> %ld KiB\n",
               r.rss0_kib, r.rss1_kib, pct * (double)(r.rss1_kib - r.rss0_kib), r.anon0_kib, r.anon1_kib,
               pct * (double)(r.anon1_kib - r.anon0_kib), r.rss0_kib - r.anon0_kib, r.rss1_kib - r.anon1_kib);
        printf("  open files %d -> %d, threads %d -> %d\n", r.fds0, r.fds1, r.threads0, r.threads1);
        printf("  %s%s\n", r.verdict[0] ? "FAIL: " : "pass", r.verdict);
    }
    rc = r.verdict[0] ? 1 : 0;
done:
    mk_lm_free(lm);
    return rc;
}

static void mk_bench_print(const struct mk_bench_row *r, bool json, bool *first) {
    if (json) {
        printf("%s{\"model\":\"%s\",\"weight_bytes\":%" PRIu64 ",\"backend\":\"%s\",\"test\":\"%s\","
               "\"ms_p50\":%.4f,\"ms_p99\":%.4f,\"ms_mean\":%.4f,\"host_cpu_ms\":%.4f,\"device_ms_p50\":%.4f,"
               "\"tokens_per_s\":%.2f,"
               "\"weight_gb_s\":%.1f,\"device_read_gb_s\":%.1f,\"ratio_to_read_bw\":%.3f,\"floor_ms\":%.4f,"
               "\"kv_type\":\"%s\",\"p99_over_local_median\":%.4f,\"note\":\"%s\"}",
               *first ? "" : ",\n", r->model, r->size, r->backend, r->test, r->p50_ms, r->p99_ms, r->mean_ms, r->cpu_ms,
               r->dev_p50_ms, 1e3 / r->mean_ms, r->bw_gbs, r->device_bw_gbs, r->bw_ratio, r->floor_ms,
               mk_kv_type_name(r->kv_type), r->p99_local, r->note);
    } else {
        printf("| %-24s | %9.2f GB | %-10s | %-6s | %8.3f | %8.3f | %8.3f | %9.1f | %8.1f | %8.1f | %5.2f | %s |\n",
               r->model, r->size / 1e9, r->backend, r->test, r->p50_ms, r->p99_ms, r->cpu_ms, 1e3 / r->mean_ms,
               r->bw_gbs, r->device_bw_gbs, r->bw_ratio, r->note);
    }
    *first = false;
    fflush(stdout);
}

/* The speculative-decoding rows: each task without and with speculation. */
static int mk_bench_spec_rows(const char *path, enum mk_backend_kind kind, const struct mk_bench_opts *o,
                              const struct mk_bench_row *tg, bool *first) {
    struct mk_bench_spec_params sp = { path,       kind, o->threads, o->ctx, o->ubatch,
                                       o->n_draft, o->n, o->kv_type, { 0 },  o->act_f32 };
    mk_cli_gpu_params(&o->gpu, &sp.gpu);
    struct mk_bench_spec res[2];
    struct mk_error err = { 0 };
    if (mk_bench_spec_run(&sp, res, &err) != MK_OK) {
        fprintf(stderr, "mk bench: speculation on %s: %s\n", path, err.msg);
        return 1;
    }
    for (int k = 0; k < 2; k++)
        for (int on = 0; on < 2; on++) {
            struct mk_bench_row r = *tg;
            double tok_s = on ? res[k].tok_s_on : res[k].tok_s_off;
            snprintf(r.test, sizeof r.test, "%s%s", res[k].task, on ? "+lk" : "");
            r.p50_ms = r.p99_ms = r.mean_ms = tok_s > 0 ? 1e3 / tok_s : 0;
            r.dev_p50_ms = r.p99_local = 0;
            r.bw_gbs = tok_s * r.size / 1e9 / (on && res[k].n_gen ? (double)res[k].n_gen / (res[k].steps_on + 1) : 1);
            r.bw_ratio = r.device_bw_gbs > 0 ? r.bw_gbs / r.device_bw_gbs : 0;
            if (on)
                snprintf(r.note, sizeof r.note, "accept %.1f %% in %u verify steps, %.2fx, %s output",
                         100 * res[k].accept, res[k].steps_on,
                         res[k].tok_s_off > 0 ? res[k].tok_s_on / res[k].tok_s_off : 0,
                         res[k].same ? "same" : "DIFFERENT");
            else
                snprintf(r.note, sizeof r.note, "%u tokens, greedy", res[k].n_gen);
            mk_bench_print(&r, o->json, first);
        }
    return !res[0].same || !res[1].same;
}

/* Per op kind of the step after -n traced ones (at most the context), on stdout, or stderr with --json. */
static int mk_bench_breakdown(const struct mk_model *m, const char *name, enum mk_backend_kind kind,
                              const struct mk_bench_opts *o) {
    FILE *f = o->json ? stderr : stdout;
    if (kind != MK_BACKEND_CPU && kind != MK_BACKEND_MEGAKERNEL) {
        fprintf(f, "breakdown %s %s: only the cpu and megakernel backends record per-task times\n", name,
                mk_backend_kind_name(kind));
        return 0;
    }
    struct mk_program *p = NULL;
    struct mk_trace_task *tk = NULL;
    uint32_t tracks;
    char where[200];
    const uint32_t steps = o->n < o->ctx ? o->n : o->ctx;
    if (mk_trace_run("bench", m, kind == MK_BACKEND_CPU, o->threads, 1, steps, o->ctx, o->kv_type, &o->gpu, NULL, &p,
                     &tk, &tracks, where, sizeof where) != 0)
        return 1;
    struct mk_trace_op ops[MK_OP_COUNT];
    const double span_us = mk_trace_ops(p, tk, ops);
    fprintf(f, "breakdown %s %s: step %u on %s, step span %.1f us\n", name, mk_backend_kind_name(kind), steps, where,
            span_us);
    mk_trace_print_ops(f, ops, true);
    free(tk);
    mk_program_free(p);
    return 0;
}

static int mk_bench_model(const char *path, const struct mk_bench_opts *o, bool *first) {
    struct mk_error err = { 0 };
    struct mk_model *m = NULL;
    if (mk_model_load(path, &m, &err) != MK_OK) {
        fprintf(stderr, "mk bench: %s\n", err.msg);
        return 1;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    bool gpu = mk_bandwidth_cuda_available();
    char list[256];
    snprintf(list, sizeof list, "%s",
             strcmp(o->backends, "all") ? o->backends
             : gpu                      ? "megakernel,perop,graph"
                                        : "cpu");
    int failed = 0;
    double host_bw = 0, cuda_bw = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        enum mk_backend_kind kind;
        if (mk_backend_kind_parse(tok, &kind) != 0) {
            fprintf(stderr, "mk bench: unknown backend '%s' (ref, cpu, megakernel, perop, graph, all)\n", tok);
            failed = 1;
            continue;
        }
        struct mk_bench_row row = { .kv_type = o->kv_type }, pp[MK_BENCH_PROMPTS];
        snprintf(row.model, sizeof row.model, "%s", base);
        if (mk_bench_one(m, base, kind, o, &row, pp) != 0) {
            failed = 1;
            continue;
        }
        /* The bandwidth this backend's memory can deliver, measured in this run. */
        bool on_gpu = kind == MK_BACKEND_MEGAKERNEL || kind == MK_BACKEND_PEROP || kind == MK_BACKEND_GRAPH ||
                      (kind == MK_BACKEND_AUTO && gpu);
        double *bw = on_gpu ? &cuda_bw : &host_bw;
        if (*bw == 0) {
            enum mk_status st =
                on_gpu ? mk_bandwidth_cuda_read(0, bw, &err) : mk_bandwidth_host_read(o->threads, bw, &err);
            if (st != MK_OK) {
                fprintf(stderr, "mk bench: read bandwidth: %s\n", err.msg);
                *bw = 0;
            }
        }
        row.device_bw_gbs = *bw / 1e9;
        row.bw_ratio = *bw > 0 ? row.bw_gbs * 1e9 / *bw : 0;
        row.floor_ms = *bw > 0 ? row.size / *bw * 1e3 : 0;
        if (o->n) mk_bench_print(&row, o->json, first);
        for (uint32_t k = 0; k < o->n_prompts; k++) {
            pp[k].device_bw_gbs = row.device_bw_gbs;
            pp[k].bw_ratio = *bw > 0 ? pp[k].bw_gbs * 1e9 / *bw : 0;
            mk_bench_print(&pp[k], o->json, first);
        }
        if (o->spec) failed |= mk_bench_spec_rows(path, kind, o, &row, first);
        if (o->breakdown) failed |= mk_bench_breakdown(m, base, kind, o);
    }
    mk_model_free(m);
    return failed;
}

/* -p N or a comma list of up to MK_BENCH_PROMPTS lengths (0 alone: no prompt test); 0 when parsed. */
static int mk_bench_parse_prompts(const char *v, struct mk_bench_opts *o) {
    char buf[256];
    if (strlen(v) >= sizeof buf) {
        fprintf(stderr, "mk bench: -p '%.32s...' is too long\n", v);
        return 2;
    }
    snprintf(buf, sizeof buf, "%s", v);
    o->n_prompts = 0;
    const bool list = strchr(v, ',') != NULL;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint32_t n;
        if (mk_cli_uint("bench", "-p", tok, list ? 1 : 0, 1u << 24, &n)) return 2;
        if (o->n_prompts == MK_BENCH_PROMPTS) {
            fprintf(stderr, "mk bench: -p '%s' lists more than %d prompt lengths\n", v, MK_BENCH_PROMPTS);
            return 2;
        }
        if (n) o->prompts[o->n_prompts++] = n;
    }
    if (list && o->n_prompts == 0) {
        fprintf(stderr, "mk bench: -p '%s' lists no prompt length\n", v);
        return 2;
    }
    return 0;
}

int mk_cmd_bench(int argc, char **argv) {
    struct mk_bench_opts o = { .backends = "all",
                               .dtype = "bf16",
                               .n = 128,
                               .ctx = 512,
                               .warmup = 8,
                               .gpu = mk_gpu_default_settings(),
                               .prompts = { 512 },
                               .n_prompts = 1,
                               .temp = 0.8f,
                               .seed = 1000,
                               .kv_type = MK_KV_F16 };
    if (mk_cli_gpu_env("bench", &o.gpu)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            mk_bench_usage(stdout);
            return 0;
        }
        int g = mk_cli_gpu_flag("bench", argc, argv, &i, &o.gpu);
        if (g < 0) return 2;
        if (g) continue;
        g = mk_cli_chunk_flag("bench", argc, argv, &i, &o.ubatch, &o.spec, &o.n_draft);
        if (g < 0) return 2;
        if (g) continue;
        g = mk_cli_kv_flag("bench", argc, argv, &i, &o.kv_type);
        if (g < 0) return 2;
        if (g) continue;
        g = mk_cli_act_flag("bench", argc, argv, &i, &o.act_f32);
        if (g < 0) return 2;
        if (g) continue;
        if (!strcmp(a, "--breakdown")) {
            o.breakdown = true;
            continue;
        }
        if (!strcmp(a, "--host-loop")) {
            o.host_loop = true;
            continue;
        }
        if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "mk bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--backend"))
            o.backends = v;
        else if (!strcmp(a, "--preset"))
            o.presets = v;
        else if (!strcmp(a, "--dtype"))
            o.dtype = v;
        else if (!strcmp(a, "-p")) {
            if (mk_bench_parse_prompts(v, &o)) return 2;
        } else if (!strcmp(a, "-n")) {
            if (mk_cli_uint("bench", a, v, 0, 1u << 24, &o.n)) return 2;
            o.n_given = true;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
            if (mk_cli_uint("bench", a, v, 0, 1u << 24, &o.depth)) return 2;
        } else if (!strcmp(a, "--ctx")) {
            if (mk_cli_uint("bench", a, v, 1, 1u << 24, &o.ctx)) return 2;
            o.ctx_given = true;
        } else if (!strcmp(a, "--soak")) {
            if (mk_cli_uint("bench", a, v, 1, 1u << 24, &o.soak)) return 2;
        } else if (!strcmp(a, "--temp")) {
            if (mk_cli_parse_float(v, 0.0f, 100.0f, &o.temp)) {
                fprintf(stderr, "mk bench: --temp '%s' is not a temperature in [0, 100]\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--latencies")) {
            o.latencies = v;
        } else if (!strcmp(a, "--seed")) {
            long long seed = 0;
            if (mk_cli_parse_long(v, 0, INT64_MAX, &seed)) {
                fprintf(stderr, "mk bench: --seed '%s' is not a number in [0, 2^63)\n", v);
                return 2;
            }
            o.seed = (uint64_t)seed;
        } else if (!strcmp(a, "--threads")) {
            if (mk_cli_uint("bench", a, v, 1, 1u << 24, &o.threads)) return 2;
        } else if (!strcmp(a, "--warmup")) {
            if (mk_cli_uint("bench", a, v, 1, 1u << 24, &o.warmup)) return 2;
        } else {
            fprintf(stderr, "mk bench: unknown option '%s'\n", a);
            mk_bench_usage(stderr);
            return 2;
        }
    }
    uint32_t longest = 0; /* of the prompts, which the context must hold */
    for (uint32_t k = 0; k < o.n_prompts; k++) longest = o.prompts[k] > longest ? o.prompts[k] : longest;
    if (o.n == 0 && (o.soak || o.spec || o.breakdown || !o.n_prompts)) {
        fprintf(stderr, "mk bench: -n 0 leaves only the prompt test (-p N): not with --soak, --spec or --breakdown\n");
        return 2;
    }
    if (o.soak) return mk_bench_soak(&o);
    if (!o.ctx_given && o.depth + o.n > o.ctx) o.ctx = o.depth + o.n;
    if (!o.ctx_given && o.depth + longest > o.ctx) o.ctx = o.depth + longest;
    if (o.depth + o.n > o.ctx || o.warmup > o.ctx || o.depth + longest > o.ctx) {
        fprintf(stderr, "mk bench: -d %u plus -n %u, the longest -p %u (and warm-up %u) must fit in --ctx %u\n",
                o.depth, o.n, longest, o.warmup, o.ctx);
        return 2;
    }
    bool first = true;
    if (o.json)
        printf("[\n");
    else {
        printf("KV cache %s, chunk products' inputs over bf16 weights %s\n\n", mk_kv_type_name(o.kv_type),
               o.act_f32 ? "f32 (bf16 hi + lo)" : "bf16 from 64 tokens a step");
        printf("| %-24s | %12s | %-10s | %-6s | %8s | %8s | %8s | %9s | %8s | %8s | %5s | %s |\n", "model",
               "weights/tok", "backend", "test", "ms p50", "ms p99", "cpu ms", "tok/s", "GB/s", "read GB/s", "ratio",
               "note");
        printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "--------------------------", "--------------",
               "------------", "--------", "----------", "----------", "----------", "-----------", "----------",
               "----------", "-------", "------");
    }
    int failed = 0;
    if (o.model) {
        failed = mk_bench_model(o.model, &o, &first);
    } else {
        char presets[256];
        snprintf(presets, sizeof presets, "%s",
                 o.presets                       ? o.presets
                 : mk_bandwidth_cuda_available() ? "llama-1b,llama-8b"
                                                 : "tiny");
        const char *tmp = getenv("TMPDIR");
        for (char *save = NULL, *p = strtok_r(presets, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            char path[512];
            snprintf(path, sizeof path, "%s/mk-bench-%s-%s.gguf", tmp && *tmp ? tmp : "/tmp", p, o.dtype);
            struct stat sb;
            if (stat(path, &sb) != 0) {
                fprintf(stderr, "mk bench: generating %s (%s, %s)\n", path, p, o.dtype);
                struct mk_gen_params gp = mk_gen_default_params();
                gp.preset = p;
                gp.dtype = o.dtype;
                gp.progress = isatty(2);
                struct mk_error err = { 0 };
                if (mk_gen_write(path, &gp, &err) != MK_OK) {
                    fprintf(stderr, "mk bench: %s\n", err.msg);
                    failed = 1;
                    continue;
                }
            }
            failed |= mk_bench_model(path, &o, &first);
        }
    }
    if (o.json) printf("\n]\n");
    return failed ? 1 : 0;
}
