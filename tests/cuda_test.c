/* GPU test of the megakernel, perop and graph backends against the CPU executor, the golden stories260K text, the watchdog and the context limit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "graph/cpu_exec.h"
#include "graph/program.h"
#include "runtime/backend.h"
#include "megakernel/cuda.h"
#include "runtime/cuda_backend.h"
#include "core/gen.h"
#include "core/model.h"
#include "graph/sample.h"
#include "runtime/soak.h"
#include "runtime/mk.h"
#include "tests/test_util.h"

static const enum mk_backend_kind gpu_kinds[] = { MK_BACKEND_MEGAKERNEL, MK_BACKEND_PEROP, MK_BACKEND_GRAPH };
#define N_GPU_KINDS 3

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Logits against the CPU executor, relative: 1e-3 on an f32 KV cache. On an f16 one the device's
 * and the CPU's f32 sums differ in their last bits and now and then round a k or v element to the
 * neighbouring half, which moves the logits by up to about 1e-3 on stories260K over 200 positions. */
static double g_tol = 1e-3;

/* The session's default f16 KV cache; MK_TEST_KV=f32 runs the whole test on an f32 one. */
static enum mk_kv_type test_kv_type(void) {
    const char *kv = getenv("MK_TEST_KV");
    return kv && !strcmp(kv, "f32") ? MK_KV_F32 : MK_KV_F16;
}

/* Who merges the attention splits (enum mk_attn_merge) where a test sets it; -1: the settings'
 * (MK_CUDA_ATTN_MERGE, else the backend's choice). */
static int g_attn_merge = -1;
/* The position below which split 0 alone holds every position (mk_gpu_settings.attn_solo) where a
 * test sets it; 0: the settings'. */
static uint32_t g_attn_solo = 0;

static struct mk_backend_params params(enum mk_backend_kind kind, uint32_t n_ctx) {
    struct mk_backend_params p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.n_ctx = n_ctx;
    p.n_threads = 0;
    p.watchdog_ms = 0;
    p.device = 0;
    p.verbose = 1;
    p.kv_type = test_kv_type();
    /* MK_CUDA_* tuning variables apply here as they do to the mk command. */
    struct mk_error err;
    p.gpu = mk_gpu_default_settings();
    if (mk_gpu_settings_from_env(&p.gpu, &err) != MK_OK) {
        fprintf(stderr, "%s\n", err.msg);
        exit(2);
    }
    if (g_attn_merge >= 0) p.gpu.attn_merge = g_attn_merge;
    if (g_attn_solo) p.gpu.attn_solo = g_attn_solo;
    return p;
}

static struct mk_step_cmd greedy_cmd(int32_t token, int32_t pos) {
    struct mk_step_cmd c = mk_test_step_cmd(token, pos);
    c.top_p = 1.0f;
    return c;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A reference run on the CPU executor: tokens fed and produced, and the logits of every step. */
struct trace {
    uint32_t n, vocab;
    int32_t *in;   /* (n) token fed at step i (pos i) */
    int32_t *out;  /* (n) token produced */
    float *logits; /* (n, vocab) */
};

static void trace_free(struct trace *t) {
    free(t->in);
    free(t->out);
    free(t->logits);
}

static int cpu_reference(const struct mk_model *m, uint32_t n_ctx, int32_t first, uint32_t n, struct trace *t) {
    struct mk_backend_params p = params(MK_BACKEND_CPU, n_ctx);
    p.verbose = 0;
    struct mk_backend *b = NULL;
    struct mk_error err;
    if (mk_backend_create_cpu(m, &p, &b, &err) != MK_OK) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return -1;
    }
    t->n = n;
    t->vocab = m->cfg.n_vocab;
    t->in = calloc(n, sizeof *t->in);
    t->out = calloc(n, sizeof *t->out);
    t->logits = calloc((size_t)n * t->vocab, sizeof *t->logits);
    int32_t tok = first;
    for (uint32_t i = 0; i < n; i++) {
        struct mk_step_cmd c = greedy_cmd(tok, (int32_t)i);
        t->in[i] = tok;
        if (b->vt->step(b, &c, &tok, &err) != MK_OK ||
            b->vt->logits(b, t->logits + (size_t)i * t->vocab, &err) != MK_OK) {
            fprintf(stderr, "cpu step %u: %s\n", i, err.msg);
            b->vt->free(b);
            return -1;
        }
        t->out[i] = tok;
    }
    b->vt->free(b);
    return 0;
}

/* Feeds a GPU backend the reference's tokens; compares tokens and logits at every step. Returns
 * the worst relative logit error, and the first step whose token differs in *first_diff (-1). */
static double compare_backend(struct mk_backend *b, const struct trace *t, int *first_diff, uint64_t *med_ns,
                              const char *what) {
    float *lg = malloc((size_t)t->vocab * sizeof *lg);
    uint64_t *ns = calloc(t->n, sizeof *ns);
    double worst = 0.0;
    *first_diff = -1;
    struct mk_error err;
    for (uint32_t i = 0; i < t->n; i++) {
        struct mk_step_cmd c = greedy_cmd(t->in[i], (int32_t)i);
        int32_t tok = -1;
        enum mk_status st = b->vt->step(b, &c, &tok, &err);
        MK_CHECK(st == MK_OK);
        if (st != MK_OK) {
            fprintf(stderr, "%s %s step %u: %s\n", what, b->vt->name, i, err.msg);
            worst = INFINITY;
            break;
        }
        ns[i] = b->last_step_ns;
        st = b->vt->logits(b, lg, &err);
        MK_CHECK(st == MK_OK);
        if (st != MK_OK) {
            fprintf(stderr, "%s %s logits %u: %s\n", what, b->vt->name, i, err.msg);
            worst = INFINITY;
            break;
        }
        const float *ref = t->logits + (size_t)i * t->vocab;
        double e = mk_test_rel_err(lg, ref, t->vocab);
        if (!(e <= worst)) worst = e;
        if (tok != t->out[i] && *first_diff < 0) {
            *first_diff = (int)i;
            /* Where they part: the reference's margin between its pick and the GPU's pick. */
            fprintf(stderr,
                    "%s %s: step %u picks %d, cpu picks %d; cpu logits %.6f vs %.6f (margin %.3g), gpu %.6f vs %.6f, "
                    "step rel err %.3g\n",
                    what, b->vt->name, i, tok, t->out[i], ref[t->out[i]], ref[tok], ref[t->out[i]] - ref[tok],
                    lg[t->out[i]], lg[tok], e);
        }
        /* The token must be the greedy pick of the backend's own logits, whatever the reference did. */
        MK_CHECK(tok == mk_sample_argmax(lg, (int)t->vocab));
    }
    qsort(ns, t->n, sizeof *ns, cmp_u64);
    *med_ns = ns[t->n / 2];
    free(ns);
    free(lg);
    return worst;
}

static int float_dtype(enum mk_dtype t) { return t == MK_DTYPE_F32 || t == MK_DTYPE_F16 || t == MK_DTYPE_BF16; }

static struct mk_backend *create_gpu_with(const struct mk_model *m, const struct mk_backend_params *pp) {
    const struct mk_backend_params p = *pp;
    const enum mk_backend_kind kind = p.kind;
    struct mk_backend *b = NULL;
    struct mk_error err;
    double t0 = now_ms();
    enum mk_status st = mk_backend_create_cuda(m, &p, &b, &err);
    if (st != MK_OK) {
        fprintf(stderr, "create %s: %s: %s\n", mk_backend_kind_name(kind), mk_status_str(st), err.msg);
        MK_CHECK(st == MK_OK);
        return NULL;
    }
    struct mk_cuda_backend_info info;
    if (mk_backend_cuda_info(b, &info, &err) == MK_OK)
        printf("INFO %s: %s, grid %u (%d/SM x %d SMs), %u threads, %u B smem, %d regs, %d B local, %s, %u instr, "
               "%u tasks, %.1f MB weights, created in %.0f ms\n",
               b->vt->name, info.device, info.grid, info.blocks_per_sm, info.sm_count, info.threads, info.smem_bytes,
               info.regs, info.local_bytes, info.image, info.n_instr, info.n_tasks, info.weight_bytes / 1e6,
               now_ms() - t0);
    /* Hopper runs the build without block formats for models of float matrices, unless told not to. */
    const int float_model = float_dtype(m->token_embd.type) && float_dtype(m->output.type) &&
                            float_dtype(m->layers[0].wq.type) && float_dtype(m->layers[0].w_down.type);
    const int want = float_model && info.cc_major == 9 && !p.gpu.kernel_image && !p.gpu.no_float_image;
    MK_CHECK_MSG(info.float_image == want, "%s: float-formats kernels %d, want %d (%s)", b->vt->name, info.float_image,
                 want, info.image);
    return b;
}

static struct mk_backend *create_gpu(const struct mk_model *m, enum mk_backend_kind kind, uint32_t n_ctx,
                                     uint32_t watchdog_ms) {
    struct mk_backend_params p = params(kind, n_ctx);
    p.watchdog_ms = watchdog_ms;
    return create_gpu_with(m, &p);
}

static void test_stories(const struct mk_model *m) {
    struct trace t;
    if (cpu_reference(m, 512, 1, 60, &t) != 0) {
        MK_CHECK(0);
        return;
    }
    /* The CPU executor itself must give the golden text. */
    MK_CHECK(memcmp(t.out, mk_test_golden_ids, sizeof mk_test_golden_ids) == 0);
    for (int k = 0; k < N_GPU_KINDS; k++) {
        struct mk_backend *b = create_gpu(m, gpu_kinds[k], 512, 0);
        if (!b) continue;
        /* Free-running greedy decode: the golden ids. */
        int32_t tok = 1, got[60];
        struct mk_error err;
        int ok = 1;
        for (int i = 0; i < 60 && ok; i++) {
            struct mk_step_cmd c = greedy_cmd(tok, i);
            if (b->vt->step(b, &c, &tok, &err) != MK_OK) {
                fprintf(stderr, "%s step %d: %s\n", b->vt->name, i, err.msg);
                ok = 0;
                break;
            }
            got[i] = tok;
        }
        MK_CHECK(ok);
        int golden = ok && memcmp(got, mk_test_golden_ids, sizeof mk_test_golden_ids) == 0;
        MK_CHECK(golden);
        /* Same positions again after reset: logits against the CPU executor step by step. */
        MK_CHECK(b->vt->reset(b, &err) == MK_OK);
        int diff;
        uint64_t med;
        double e = compare_backend(b, &t, &diff, &med, "stories260K");
        printf("RESULT stories260K %s: golden %s, first token diff %d, max rel logit err %.3g, median step %.1f us\n",
               b->vt->name, golden ? "yes" : "NO", diff, e, med / 1e3);
        MK_CHECK(e < g_tol);
        MK_CHECK(diff < 0);
        b->vt->free(b);
    }
    trace_free(&t);
}

/* Issue 11's architectures on every GPU backend, rope table on and off: tests/data's Llama 3
 * (rope_freqs), Qwen2 (biases, NEOX, linear scaling) and Qwen3 (q/k norms, head size 32) models
 * against the CPU executor, which arch_test checks against transformers. Run from the checkout
 * (or under bazel) so that tests/data resolves. */
static void check_chunks(const struct mk_model *m, const struct trace *t, uint32_t n_ctx, uint32_t ubatch,
                         const char *what);

static void test_hf_models(void) {
    static const char *const names[] = { "hf_llama3", "hf_qwen2", "hf_qwen3" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char file[64], path[1024];
        snprintf(file, sizeof file, "%s.gguf", names[i]);
        const char *gguf = mk_test_data_path(file, path, sizeof path);
        MK_CHECK_MSG(gguf != NULL, "tests/data/%s not found: run cuda_test from the checkout", file);
        struct mk_model *m = NULL;
        struct mk_error err;
        if (!gguf || mk_model_load(gguf, &m, &err) != MK_OK) {
            MK_CHECK_MSG(gguf == NULL, "load %s: %s", file, err.msg);
            continue;
        }
        struct trace t;
        if (cpu_reference(m, 128, 1, 72, &t) != 0) {
            MK_CHECK(0);
            mk_model_free(m);
            continue;
        }
        for (int k = 0; k < N_GPU_KINDS; k++)
            for (int table = 0; table < 2; table++) {
                struct mk_backend_params p = params(gpu_kinds[k], 128);
                p.gpu.no_rope_table = !table;
                struct mk_backend *b = create_gpu_with(m, &p);
                if (!b) continue;
                int diff;
                uint64_t med;
                double e = compare_backend(b, &t, &diff, &med, names[i]);
                printf("RESULT %s %s (rope table %s): first token diff %d, max rel logit err %.3g\n", names[i],
                       b->vt->name, table ? "on" : "off", diff, e);
                MK_CHECK_MSG(e < g_tol, "%s %s: logits differ from the CPU executor by %g", names[i], b->vt->name, e);
                MK_CHECK(diff < 0);
                b->vt->free(b);
            }
        check_chunks(m, &t, 128, 24, names[i]);
        trace_free(&t);
        mk_model_free(m);
    }
}

/* The device sampler must pick what the host sampler picks from the same (device) logits. */
static void test_sampling(const struct mk_model *m, const char *what) {
    static const struct {
        float temperature, top_p, min_p;
        int32_t top_k;
    } settings[] = {
        { 0.8f, 0.95f, 0.05f, 40 }, { 1.0f, 1.0f, 0.0f, 0 },   { 1.5f, 0.9f, 0.0f, 2000 },
        { 0.7f, 1.0f, 0.1f, 1 },    { 0.8f, 0.95f, 0.05f, 0 },
    };
    const int n_settings = (int)(sizeof settings / sizeof settings[0]);
    for (int k = 0; k < N_GPU_KINDS; k++) {
        struct mk_backend *b = create_gpu(m, gpu_kinds[k], 512, 0);
        if (!b) continue;
        float *lg = malloc((size_t)m->cfg.n_vocab * sizeof *lg);
        int32_t tok = 1;
        int agree = 0, total = 0;
        struct mk_error err;
        for (int i = 0; i < 48; i++) {
            struct mk_step_cmd c = greedy_cmd(tok, i);
            int s = i % n_settings;
            c.temperature = settings[s].temperature;
            c.top_p = settings[s].top_p;
            c.min_p = settings[s].min_p;
            c.top_k = settings[s].top_k;
            c.seed = 1234u + (uint64_t)i * 77u;
            if (b->vt->step(b, &c, &tok, &err) != MK_OK || b->vt->logits(b, lg, &err) != MK_OK) {
                fprintf(stderr, "%s sampling step %d: %s\n", b->vt->name, i, err.msg);
                MK_CHECK(0);
                break;
            }
            int32_t want = mk_sample_token(lg, (int)m->cfg.n_vocab, &c);
            total++;
            if (want == tok)
                agree++;
            else
                fprintf(stderr, "%s sampling step %d (setting %d): device %d, host %d\n", b->vt->name, i, s, tok, want);
        }
        printf("RESULT sampling %s, %s, vocab %u: %d of %d draws equal the host sampler's on the device logits\n",
               b->vt->name, what, m->cfg.n_vocab, agree, total);
        MK_CHECK(agree == total && total == 48);
        /* Chunk steps: every output row j samples at its own position (pos + n - n_out + j). */
        agree = total = 0;
        MK_CHECK(b->vt->reset(b, &err) == MK_OK);
        int32_t in[6], outs[6];
        for (int i = 0; i < 8 && b->vt->step_chunk && b->ubatch >= 6; i++) {
            for (int j = 0; j < 6; j++) in[j] = (int32_t)((7 + 13 * (6 * i + j)) % (int)m->cfg.n_vocab);
            struct mk_step_cmd c = greedy_cmd(in[0], 6 * i);
            int st_i = i % n_settings;
            c.temperature = settings[st_i].temperature;
            c.top_p = settings[st_i].top_p;
            c.min_p = settings[st_i].min_p;
            c.top_k = settings[st_i].top_k;
            c.seed = 99u + (uint64_t)i;
            c.n_tokens = 6;
            c.n_out = 3;
            if (b->vt->step_chunk(b, &c, in, outs, &err) != MK_OK) {
                fprintf(stderr, "%s chunk sampling step %d: %s\n", b->vt->name, i, err.msg);
                MK_CHECK(0);
                break;
            }
            for (int j = 0; j < 3; j++) {
                struct mk_step_cmd r = c;
                r.pos = c.pos + 3 + j;
                MK_CHECK(b->vt->logits_row(b, (uint32_t)j, lg, &err) == MK_OK);
                int32_t want = mk_sample_token(lg, (int)m->cfg.n_vocab, &r);
                total++;
                if (want == outs[j]) agree++;
            }
        }
        printf("RESULT sampling %s chunk rows, %s, vocab %u: %d of %d draws equal the host sampler's on the device "
               "logits\n",
               b->vt->name, what, m->cfg.n_vocab, agree, total);
        MK_CHECK(agree == total && total == 24);
        free(lg);
        b->vt->free(b);
    }
}

static void test_context_limit(const struct mk_model *m) {
    for (int k = 0; k < N_GPU_KINDS; k++) {
        struct mk_backend *b = create_gpu(m, gpu_kinds[k], 8, 0);
        if (!b) continue;
        int32_t tok = 1;
        struct mk_error err;
        for (int i = 0; i < 8; i++) {
            struct mk_step_cmd c = greedy_cmd(tok, i);
            MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_OK);
        }
        struct mk_step_cmd c = greedy_cmd(tok, 8);
        enum mk_status st = b->vt->step(b, &c, &tok, &err);
        MK_CHECK(st == MK_ERR_CONTEXT_FULL);
        MK_CHECK(strstr(err.msg, "context of 8") != NULL);
        printf("RESULT context limit %s: %s: %s\n", b->vt->name, mk_status_str(st), err.msg);
        /* Still usable after the refusal. */
        c = greedy_cmd(1, 0);
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_OK);
        b->vt->free(b);
    }
}

static void test_hang(const struct mk_model *m) {
    struct mk_backend *b = create_gpu(m, MK_BACKEND_MEGAKERNEL, 64, 1500);
    if (!b) return;
    int32_t tok;
    struct mk_error err;
    struct mk_step_cmd c = greedy_cmd(1, 0);
    MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_OK);
    double t0 = now_ms();
    enum mk_status st = mk_backend_cuda_debug_hang(b, &err);
    double took = now_ms() - t0;
    printf("RESULT hang: %s after %.0f ms: %s\n", mk_status_str(st), took, err.msg);
    MK_CHECK(st == MK_ERR_TIMEOUT);
    MK_CHECK(took >= 1400.0 && took < 5000.0);
    MK_CHECK(strstr(err.msg, "MK_CMD_HANG") != NULL);
    c = greedy_cmd(tok, 1);
    st = b->vt->step(b, &c, &tok, &err);
    MK_CHECK(st == MK_ERR_TIMEOUT);
    printf("RESULT after hang: %s: %s\n", mk_status_str(st), err.msg);
    t0 = now_ms();
    b->vt->free(b);
    took = now_ms() - t0;
    printf("RESULT free after hang: %.0f ms\n", took);
    MK_CHECK(took < 8000.0);
    /* The GPU is usable again: a new megakernel runs. */
    b = create_gpu(m, MK_BACKEND_MEGAKERNEL, 64, 0);
    if (b) {
        c = greedy_cmd(1, 0);
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_OK);
        MK_CHECK(tok == mk_test_golden_ids[0]);
        b->vt->free(b);
    }
}

/* Greedy steps from BOS until one fails; how many succeeded, with the failure in *st and err. */
static uint32_t run_until_failure(struct mk_backend *b, uint32_t n, enum mk_status *st, struct mk_error *err) {
    int32_t tok = 1;
    *st = MK_OK;
    for (uint32_t i = 0; i < n; i++) {
        struct mk_step_cmd c = greedy_cmd(tok, (int32_t)i);
        if ((*st = b->vt->step(b, &c, &tok, err)) != MK_OK) return i;
        if (tok != mk_test_golden_ids[i]) {
            fprintf(stderr, "step %u: token %d, golden %d\n", i, tok, mk_test_golden_ids[i]);
            MK_CHECK(0);
            return i;
        }
    }
    return n;
}

static void test_faults_generate(const struct mk_model *m);

/* Injected megakernel faults (mk_kernel_args.fault_kind): an error code, a trap, a store to a bad
 * address, a block that stops signalling. Each ends its session with an error naming the step;
 * freeing the session destroys its context (and the sticky error with it), and a new session on
 * the same model decodes the golden text. */
static void test_faults(const struct mk_model *m, const char *only_kind) {
    const enum mk_fault_kind kinds[4] = { MK_FAULT_HANG, MK_FAULT_ERROR, MK_FAULT_TRAP, MK_FAULT_BAD_ADDRESS };
    const enum mk_status want[4] = { MK_ERR_TIMEOUT, MK_ERR_INTERNAL, MK_ERR_CUDA, MK_ERR_CUDA };
    const char *names[4] = { "hang", "error", "trap", "bad address" };
    const uint32_t at = 7;
    const int threads0 = mk_soak_count_threads();
    for (int k = 0; k < 4; k++) {
        /* A trap or a bad address is a sticky CUDA error: the driver refuses every later call of the
         * process, new contexts included, so each of those kinds runs in a process of its own
         * (`cuda_test faults KIND`); the hang ends through the watchdog's abort, and the error ends
         * the kernel without a trap (mk_device_fail), both leaving CUDA usable. */
        if (only_kind ? strcmp(only_kind, names[k]) != 0 : k > 1) continue;
        const bool sticky = kinds[k] == MK_FAULT_TRAP || kinds[k] == MK_FAULT_BAD_ADDRESS;
        struct mk_backend_params p = params(MK_BACKEND_MEGAKERNEL, 64);
        p.watchdog_ms = 1500;
        p.gpu.dynamic_schedule = false; /* a parked block's tasks then stay undone: the step hangs */
        p.fault.kind = kinds[k];
        p.fault.step = at;
        struct mk_backend *b = create_gpu_with(m, &p);
        if (!b) continue;
        struct mk_error err;
        enum mk_status st;
        double t0 = now_ms();
        uint32_t done = run_until_failure(b, 20, &st, &err);
        double took = now_ms() - t0;
        printf("RESULT fault %s at step %u: %s after %u steps, %.0f ms: %s\n", names[k], at, mk_status_str(st), done,
               took, err.msg);
        MK_CHECK_MSG(st == want[k] && done == at, "%s: status %d after %u steps", names[k], st, done);
        char step[32];
        snprintf(step, sizeof step, "step %u ", at);
        MK_CHECK_MSG(strstr(err.msg, step) != NULL, "%s: the error does not name %s: %s", names[k], step, err.msg);
        MK_CHECK(took < (kinds[k] == MK_FAULT_HANG ? 6000.0 : 3000.0));
        struct mk_step_cmd c = greedy_cmd(1, (int32_t)at + 1);
        int32_t tok;
        t0 = now_ms();
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == want[k]);
        MK_CHECK(now_ms() - t0 < 100.0);
        t0 = now_ms();
        b->vt->free(b);
        took = now_ms() - t0;
        printf("RESULT free after %s: %.0f ms, %d threads (%d before)\n", names[k], took, mk_soak_count_threads(),
               threads0);
        MK_CHECK(took < 8000.0);
        MK_CHECK(mk_soak_count_threads() == threads0);
        /* A new session (a new context) on the same model works, or after a sticky error says
         * clearly that CUDA is gone for this process. */
        if (sticky) {
            struct mk_backend_params p2 = params(MK_BACKEND_MEGAKERNEL, 64);
            struct mk_backend *b2 = NULL;
            enum mk_status st2 = mk_backend_create_cuda(m, &p2, &b2, &err);
            printf("RESULT after %s, a new session in the same process: %s%s\n", names[k],
                   st2 == MK_OK ? "works" : "refused: ", st2 == MK_OK ? "" : err.msg);
            MK_CHECK(st2 == MK_OK || (st2 == MK_ERR_CUDA && strstr(err.msg, "CUDA_ERROR") != NULL));
            if (b2) {
                MK_CHECK_MSG(run_until_failure(b2, 20, &st, &err) == 20, "after %s: %s", names[k], err.msg);
                b2->vt->free(b2);
            }
            continue;
        }
        b = create_gpu(m, MK_BACKEND_MEGAKERNEL, 64, 0);
        MK_CHECK_MSG(b != NULL, "no megakernel after %s", names[k]);
        if (!b) continue;
        MK_CHECK_MSG(run_until_failure(b, 20, &st, &err) == 20, "after %s: %s", names[k], err.msg);
        b->vt->free(b);
    }
    if (only_kind) return; /* after a sticky error CUDA refuses everything */
    test_faults_generate(m);
    /* The per-op backends refuse fault injection. */
    struct mk_backend_params p = params(MK_BACKEND_PEROP, 64);
    p.fault.kind = MK_FAULT_TRAP;
    struct mk_backend *b = NULL;
    struct mk_error err;
    MK_CHECK(mk_backend_create(m, &p, &b, &err) == MK_ERR_UNSUPPORTED && !b);
}

/* Loads path, first writing it from the preset in dtype (with vocab's tokenizer, or NULL: the
 * synthetic one) when it is missing (it stays for later runs); NULL, as a failed check, when either
 * fails. */
static struct mk_model *load_or_generate(const char *path, const char *preset, const char *dtype, const char *vocab) {
    struct stat sb;
    struct mk_error err;
    if (stat(path, &sb) != 0) {
        struct mk_gen_params gp = mk_gen_default_params();
        gp.preset = preset;
        gp.dtype = dtype;
        gp.vocab_path = vocab;
        double t0 = now_ms();
        if (mk_gen_write(path, &gp, &err) != MK_OK) {
            fprintf(stderr, "gen %s: %s\n", preset, err.msg);
            MK_CHECK(0);
            return NULL;
        }
        printf("INFO wrote %s in %.1f s\n", path, (now_ms() - t0) / 1e3);
    }
    struct mk_model *m = NULL;
    if (mk_model_load(path, &m, &err) != MK_OK) {
        fprintf(stderr, "load %s: %s\n", path, err.msg);
        MK_CHECK(0);
        return NULL;
    }
    return m;
}

/* *v = m with a head of its own in memory, a copy of m's (zeros unless `copy`), returned for the
 * caller to change and free after every backend on v; NULL (a skip, or a failed check when out of
 * memory) unless m's head is plain f32. v shares everything else with m and owns nothing. */
static float *test_head_replace(const struct mk_model *m, struct mk_model *v, bool copy, const char *what) {
    if (m->output.type != MK_DTYPE_F32 || m->output.row_bytes != (uint64_t)m->output.cols * sizeof(float)) {
        printf("SKIP sampling over %s: the head of %s is not plain f32\n", what, m->output.name);
        return NULL;
    }
    const uint64_t n = (uint64_t)m->output.rows * (uint64_t)m->output.cols;
    float *w = calloc(n, sizeof *w);
    if (!w) {
        MK_CHECK(0);
        return NULL;
    }
    if (copy) memcpy(w, m->output.data, n * sizeof *w);
    *v = *m;
    v->output.data = w;
    v->cfg.tied_output = false;
    return w;
}

/* test_sampling over LM heads that make ties, for the device sampler's paths that real logits
 * rarely take: a head of zeros (every logit 0, so every key ties: past the tile count the k-th's
 * digit holds more logits than the fallback's buffer and the selection over all logits breaks its
 * ties by index), then every other row ones (the logits are 0 and one sum s: with s > 0 every tile's
 * maximum is s, so the bound from the tile maxima leaves half the vocab above it, fewer than top-k
 * 1024 or 2000 on a small vocab; with s < 0 the zeros tie). The host sampler takes ties in index
 * order, and the device must too. The head is replaced in memory; it needs f32 (the tiny models'). */
static void test_sampling_ties(const struct mk_model *m) {
    struct mk_model v;
    float *w = test_head_replace(m, &v, false, "tied logits");
    if (!w) return;
    const uint64_t rows = (uint64_t)m->output.rows, cols = (uint64_t)m->output.cols;
    test_sampling(&v, "a head of zeros");
    for (uint64_t r = 0; r < rows; r += 2)
        for (uint64_t c = 0; c < cols; c++) w[r * cols + c] = 1.0f;
    test_sampling(&v, "every other row of the head ones");
    free(w);
}

/* A head that makes NaN logits (every 97th row NaN, the rest the model's): what the host and device
 * samplers draw there is not defined, but every step must end with a token of the vocab, no error
 * and no hang, greedy and sampled, past the tile count too. */
static void test_sampling_nan(const struct mk_model *m) {
    struct mk_model v;
    float *w = test_head_replace(m, &v, true, "NaN logits");
    if (!w) return;
    const uint64_t rows = (uint64_t)m->output.rows, cols = (uint64_t)m->output.cols;
    for (uint64_t r = 3; r < rows; r += 97)
        for (uint64_t c = 0; c < cols; c++) w[r * cols + c] = NAN;
    static const int32_t top_ks[] = { 40, 0, 2000, 1 };
    for (int k = 0; k < N_GPU_KINDS; k++) {
        struct mk_backend *b = create_gpu(&v, gpu_kinds[k], 512, 0);
        if (!b) continue;
        int32_t tok = 1;
        int ok = 0, total = 0;
        struct mk_error err;
        for (int i = 0; i < 40; i++) {
            struct mk_step_cmd c = greedy_cmd(tok, i);
            if (i % 5 != 4) {
                c.temperature = 0.8f;
                c.top_p = 0.95f;
                c.min_p = 0.05f;
                c.top_k = top_ks[i % 5];
                c.seed = 77u + (uint64_t)i;
            }
            total++;
            if (b->vt->step(b, &c, &tok, &err) != MK_OK) {
                fprintf(stderr, "%s NaN sampling step %d: %s\n", b->vt->name, i, err.msg);
                break;
            }
            if (tok >= 0 && (uint32_t)tok < m->cfg.n_vocab)
                ok++;
            else {
                fprintf(stderr, "%s NaN sampling step %d: token %d outside the vocab\n", b->vt->name, i, tok);
                tok = 1;
            }
        }
        printf("RESULT sampling %s, NaN logits, vocab %u: %d of %d steps gave a token of the vocab\n", b->vt->name,
               m->cfg.n_vocab, ok, total);
        MK_CHECK(ok == total && total == 40);
        b->vt->free(b);
    }
    free(w);
}

/* test_sampling over the GPT-2 vocab (50,257 tokens, not a multiple of 4): the device sampler reads
 * the logits four at a time, and a chunk's row j starts j * 50,257 floats into the buffer, so rows
 * 1 and 2 start off a 16-byte boundary. */
static void test_sampling_odd_vocab(const char *dir) {
    char vocab[1100], path[600];
    snprintf(vocab, sizeof vocab, "%s/ggml-vocab-gpt-2.gguf", dir);
    struct stat sb;
    if (stat(vocab, &sb) != 0) {
        printf("SKIP sampling over an odd vocab: %s not found\n", vocab);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/mk_tiny_gpt2vocab_f32.gguf", tmp && *tmp ? tmp : "/tmp");
    struct mk_model *m = load_or_generate(path, "tiny", "f32", vocab);
    if (!m) return;
    MK_CHECK(m->cfg.n_vocab % 4u != 0u);
    test_sampling(m, "its head");
    test_sampling_ties(m);
    test_sampling_nan(m);
    mk_model_free(m);
}

/* The reference's margin between its pick at a step and its next-best logit, and that pick's size
 * (at least 1), which bounds the margin a rounding difference can flip. */
static double ref_margin(const float *ref, uint32_t vocab, int32_t pick, double *scale) {
    float second = -INFINITY;
    for (uint32_t i = 0; i < vocab; i++)
        if ((int32_t)i != pick && ref[i] > second) second = ref[i];
    *scale = fabs(ref[pick]);
    return ref[pick] - second;
}

/* Runs every GPU backend over the reference's tokens: logits within g_tol (relative) at every step,
 * and greedy tokens equal unless they part at a near tie that rounding order can flip. */
static void check_gpu_kinds(const struct mk_model *m, const struct trace *t, uint32_t n_ctx, const char *what) {
    for (int k = 0; k < N_GPU_KINDS; k++) {
        struct mk_backend *b = create_gpu(m, gpu_kinds[k], n_ctx, 0);
        if (!b) continue;
        int diff;
        uint64_t med;
        double e = compare_backend(b, t, &diff, &med, what);
        printf("RESULT %s %s: tokens %s cpu for %u steps%s, max rel logit err %.3g, median step %.1f us\n", what,
               b->vt->name, diff < 0 ? "equal" : "part from", t->n, diff < 0 ? "" : " (see above)", e, med / 1e3);
        MK_CHECK(e < g_tol);
        if (diff >= 0) {
            double scale;
            double margin = ref_margin(t->logits + (size_t)diff * t->vocab, t->vocab, t->out[diff], &scale);
            printf("RESULT %s %s: parts at step %d, cpu top-2 margin %.3g (%.3g relative)\n", what, b->vt->name, diff,
                   margin, margin / (scale > 0 ? scale : 1));
            MK_CHECK(margin <= g_tol * (scale > 1 ? scale : 1));
        }
        b->vt->free(b);
    }
}

/* Chunk steps (megakernel/chunk.cu) against the CPU executor's one-token steps: the reference's
 * tokens fed in chunks of several sizes (every row an output row) with one-token steps between
 * them, so that the megakernel parks and comes back and each path reads KV rows the other wrote.
 * Every row's logits within g_tol and its token equal to the reference's unless they part at a
 * near tie, as check_gpu_kinds allows. The products keep fp32's precision (act_f32): the rounded
 * inputs of long bf16 chunks are check_chunks_act's. */
static void check_chunks(const struct mk_model *m, const struct trace *t, uint32_t n_ctx, uint32_t ubatch,
                         const char *what) {
    /* 0: a one-token step. At ubatch 24 the sizes up to 8 take each of mk_chunk_mv_kq8_*'s token
     * counts (2; 3 and 5 padded with zero rows to 4 and 8), 9 and 13 mk_chunk_mv_kq. */
    static const uint32_t sizes[] = { 5, 24, 0, 17, 0, 0, 24, 2, 9, 0, 13, 3 };
    float *lg = malloc((size_t)t->vocab * sizeof *lg);
    int32_t *outs = malloc((size_t)ubatch * sizeof *outs);
    for (int kk = 0; kk < N_GPU_KINDS; kk++) {
        struct mk_backend_params p = params(gpu_kinds[kk], n_ctx);
        p.ubatch = ubatch;
        p.act_f32 = true;
        struct mk_backend *b = create_gpu_with(m, &p);
        if (!b) continue;
        MK_CHECK(b->ubatch == ubatch && b->vt->step_chunk != NULL);
        struct mk_error err;
        double worst = 0.0, chunk_ms = 0.0;
        int first_diff = -1, ok = 1;
        uint32_t n_chunks = 0, n_single = 0;
        for (uint32_t pos = 0, j = 0; pos < t->n && ok; j++) {
            uint32_t k = sizes[j % (sizeof sizes / sizeof sizes[0])] * ubatch / 24u;
            if (k > t->n - pos) k = t->n - pos;
            struct mk_step_cmd c = greedy_cmd(t->in[pos], (int32_t)pos);
            enum mk_status st;
            if (k <= 1) {
                k = 1;
                st = b->vt->step(b, &c, outs, &err);
                n_single++;
            } else {
                c.n_tokens = (uint16_t)k;
                c.n_out = (uint16_t)k;
                st = b->vt->step_chunk(b, &c, t->in + pos, outs, &err);
                chunk_ms += b->last_step_ns / 1e6;
                n_chunks++;
            }
            if (st != MK_OK) {
                fprintf(stderr, "%s %s: step of %u tokens at %u: %s\n", what, b->vt->name, k, pos, err.msg);
                ok = 0;
                break;
            }
            for (uint32_t r = 0; r < k; r++) {
                st = b->vt->logits_row(b, r, lg, &err);
                if (st != MK_OK) {
                    fprintf(stderr, "%s %s: logits row %u at %u: %s\n", what, b->vt->name, r, pos, err.msg);
                    ok = 0;
                    break;
                }
                const float *ref = t->logits + (size_t)(pos + r) * t->vocab;
                double e = mk_test_rel_err(lg, ref, t->vocab);
                if (!(e <= worst)) worst = e;
                MK_CHECK(outs[r] == mk_sample_argmax(lg, (int)t->vocab));
                if (outs[r] != t->out[pos + r] && first_diff < 0) {
                    first_diff = (int)(pos + r);
                    double scale;
                    double margin = ref_margin(ref, t->vocab, t->out[pos + r], &scale);
                    printf("RESULT %s %s chunks: parts at position %u (row %u of %u), cpu top-2 margin %.3g\n", what,
                           b->vt->name, pos + r, r, k, margin);
                    MK_CHECK(margin <= g_tol * (scale > 1 ? scale : 1));
                }
            }
            pos += k;
        }
        MK_CHECK(ok);
        printf("RESULT %s %s chunks of up to %u: tokens %s cpu over %u positions (%u chunk steps, %u one-token steps), "
               "max rel logit err %.3g, chunk steps %.2f ms in all\n",
               what, b->vt->name, ubatch, first_diff < 0 ? "equal" : "part from", t->n, n_chunks, n_single, worst,
               chunk_ms);
        MK_CHECK(worst < g_tol);
        b->vt->free(b);
    }
    free(outs);
    free(lg);
}

/* The CPU backend's chunk program over t's tokens in chunks of sizes[] (cycled, only whole chunks
 * that fit): every row's logits into lg (row, vocab) and tokens into tok; the rows covered, or 0. */
static uint32_t cpu_chunks(const struct mk_model *m, const struct trace *t, uint32_t n_ctx, uint32_t ubatch,
                           enum mk_kv_type kv, bool act_f32, const uint32_t *sizes, uint32_t n_sizes, float *lg,
                           int32_t *tok) {
    struct mk_backend_params cp = params(MK_BACKEND_CPU, n_ctx);
    cp.verbose = 0;
    cp.ubatch = ubatch;
    cp.kv_type = kv;
    cp.act_f32 = act_f32;
    struct mk_backend *cpu = NULL;
    struct mk_error err;
    if (mk_backend_create(m, &cp, &cpu, &err) != MK_OK) {
        MK_CHECK_MSG(0, "cpu backend: %s", err.msg);
        return 0;
    }
    uint32_t end = 0;
    for (uint32_t j = 0;; j++) {
        const uint32_t k = sizes[j % n_sizes];
        if (k > t->n - end) break;
        struct mk_step_cmd c = greedy_cmd(t->in[end], (int32_t)end);
        c.n_tokens = (uint16_t)k;
        c.n_out = (uint16_t)k;
        if (cpu->vt->step_chunk(cpu, &c, t->in + end, tok + end, &err) != MK_OK) {
            MK_CHECK_MSG(0, "cpu chunk at %u: %s", end, err.msg);
            end = 0;
            break;
        }
        for (uint32_t r = 0; r < k; r++)
            if (cpu->vt->logits_row(cpu, r, lg + (size_t)(end + r) * t->vocab, &err) != MK_OK) {
                MK_CHECK_MSG(0, "cpu logits row %u: %s", r, err.msg);
                cpu->vt->free(cpu);
                return 0;
            }
        end += k;
    }
    cpu->vt->free(cpu);
    return end;
}

/* Chunks of at least MK_ACT_BF16_MIN_DEFAULT tokens with the default inputs (bf16 products' x
 * rounded to bf16) against the CPU backend's chunk program, which rounds the same inputs (KV caches
 * of type kv on both). The two executors' values differ by about 1e-4 before each rounding (fp32 sums in
 * other orders, the GPU's bf16 hi + lo elsewhere), so a few percent of the inputs round to the
 * other neighbour on one side, a whole bf16 step each: the logits part by a good share of the
 * rounding's own effect (the rows' worst: 5.4e-3 against 8.2e-3 with an f32 cache; with an f16 one
 * 5.4e-3 against 7.9e-3, 6.1e-3 with the attention's f16 form, BENCHMARKS.md, thirtieth session).
 * A GPU that rounded nothing would sit the whole effect away from the CPU's rounded chunks and next
 * to its fp32-input ones, so every row's logits must be nearer the rounded chunks than the rounding
 * moves them and nearer than the GPU's own are to the fp32-input chunks, and tokens equal unless
 * the CPU's top two are within 3/4 of the rounding's effect. */
static void check_chunks_act(const struct mk_model *m, const struct trace *t, uint32_t n_ctx, uint32_t ubatch,
                             enum mk_kv_type kv, const uint32_t *sizes, uint32_t n_sizes, const char *what) {
    const uint32_t V = t->vocab;
    float *want = malloc((size_t)t->n * V * sizeof *want), *f32 = malloc((size_t)t->n * V * sizeof *f32);
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t *want_tok = malloc((size_t)t->n * sizeof *want_tok), *f32_tok = malloc((size_t)t->n * sizeof *f32_tok);
    int32_t *outs = malloc((size_t)ubatch * sizeof *outs);
    if (!want || !f32 || !lg || !want_tok || !f32_tok || !outs) {
        MK_CHECK_MSG(0, "%s: out of memory", what);
        goto done;
    }
    for (uint32_t j = 0; j < n_sizes; j++) MK_CHECK(sizes[j] >= MK_ACT_BF16_MIN_DEFAULT && sizes[j] <= ubatch);
    const uint32_t end = cpu_chunks(m, t, n_ctx, ubatch, kv, false, sizes, n_sizes, want, want_tok);
    if (end != cpu_chunks(m, t, n_ctx, ubatch, kv, true, sizes, n_sizes, f32, f32_tok) ||
        end < 2u * MK_ACT_BF16_MIN_DEFAULT) {
        MK_CHECK_MSG(0, "%s: cpu chunks covered %u rows", what, end);
        goto done;
    }
    double moved = 0.0;
    for (uint32_t i = 0; i < end; i++) {
        double e = mk_test_rel_err(want + (size_t)i * V, f32 + (size_t)i * V, V);
        if (e > moved) moved = e;
    }
    MK_CHECK_MSG(moved > 1e-5, "%s: rounded chunks equal fp32-input chunks (%.3g): is the rounding on?", what, moved);
    /* Every GPU backend with the backend's own tiles and loads; the first also, with an f32 cache,
     * with each tile width forced (sm_90a: 128, 192 and 256 weight rows, MK_CUDA_XB_ROWS) and each way
     * of loading them (MK_CUDA_XB_LOAD: cp.async, the copy engine), with an f16 one with the
     * attention's bf16 hi + lo form (MK_CUDA_ATTN_H16=0). */
    struct forced {
        uint32_t rows;
        enum mk_xb_load load;
        bool no_attn_h16;
    };
    static const struct forced forced_f32[] = { { 192, MK_XB_LOAD_AUTO, false }, { 256, MK_XB_LOAD_AUTO, false },
                                                { 128, MK_XB_LOAD_AUTO, false }, { 128, MK_XB_LOAD_COPY, false },
                                                { 0, MK_XB_LOAD_COPY, false },   { 0, MK_XB_LOAD_TMA, false } },
                               forced_f16[] = { { 0, MK_XB_LOAD_AUTO, true } };
    const bool f16 = kv == MK_KV_F16;
    const struct forced *forced = f16 ? forced_f16 : forced_f32;
    const int n_forced =
        f16 ? (int)(sizeof forced_f16 / sizeof forced_f16[0]) : (int)(sizeof forced_f32 / sizeof forced_f32[0]);
    for (int run = 0; run < N_GPU_KINDS + n_forced; run++) {
        const int kk = run < N_GPU_KINDS ? run : 0;
        struct mk_backend_params p = params(gpu_kinds[kk], n_ctx);
        p.ubatch = ubatch;
        p.kv_type = kv;
        if (run >= N_GPU_KINDS) {
            p.gpu.xb_rows = forced[run - N_GPU_KINDS].rows;
            p.gpu.xb_load = forced[run - N_GPU_KINDS].load;
            p.gpu.no_attn_h16 = forced[run - N_GPU_KINDS].no_attn_h16;
        }
        struct mk_backend *b = create_gpu_with(m, &p);
        if (!b) continue;
        struct mk_error err;
        double worst = 0.0, from_f32 = 0.0;
        int first_diff = -1, ok = 1;
        for (uint32_t pos = 0, j = 0; pos < end && ok; j++) {
            const uint32_t k = sizes[j % n_sizes];
            struct mk_step_cmd c = greedy_cmd(t->in[pos], (int32_t)pos);
            c.n_tokens = (uint16_t)k;
            c.n_out = (uint16_t)k;
            if (b->vt->step_chunk(b, &c, t->in + pos, outs, &err) != MK_OK) {
                fprintf(stderr, "%s %s: chunk of %u at %u: %s\n", what, b->vt->name, k, pos, err.msg);
                ok = 0;
                break;
            }
            for (uint32_t r = 0; r < k && ok; r++) {
                if (b->vt->logits_row(b, r, lg, &err) != MK_OK) {
                    fprintf(stderr, "%s %s: logits row %u at %u: %s\n", what, b->vt->name, r, pos, err.msg);
                    ok = 0;
                    break;
                }
                const float *ref = want + (size_t)(pos + r) * V;
                double e = mk_test_rel_err(lg, ref, V), e32 = mk_test_rel_err(lg, f32 + (size_t)(pos + r) * V, V);
                if (!(e <= worst)) worst = e;
                if (!(e32 <= from_f32)) from_f32 = e32;
                if (outs[r] != want_tok[pos + r] && first_diff < 0) {
                    first_diff = (int)(pos + r);
                    double scale, margin = ref_margin(ref, V, want_tok[pos + r], &scale);
                    printf("RESULT %s %s bf16-input chunks: parts at position %u, cpu top-2 margin %.3g\n", what,
                           b->vt->name, pos + r, margin);
                    MK_CHECK(margin <= 0.75 * moved * (scale > 1 ? scale : 1));
                }
            }
            pos += k;
        }
        MK_CHECK(ok);
        static const char *const loads[] = { "planned", "cp.async", "copy engine" };
        printf(
            "RESULT %s %s bf16-input chunks of up to %u from %u (%s cache%s, tiles of %u rows, 0: planned; loads %s): "
            "tokens %s the cpu chunk program's over %u positions, max rel logit err %.3g (from the cpu's fp32-input "
            "chunks %.3g; the rounding moves the cpu's by %.3g)\n",
            what, b->vt->name, ubatch, sizes[0], f16 ? "f16" : "f32",
            !f16                ? ""
            : p.gpu.no_attn_h16 ? ", attention bf16 hi + lo"
                                : ", attention f16 hi + lo",
            p.gpu.xb_rows, loads[p.gpu.xb_load], first_diff < 0 ? "equal" : "part from", end, worst, from_f32, moved);
        MK_CHECK(worst < moved && worst < from_f32);
        b->vt->free(b);
    }
done:
    free(outs);
    free(f32_tok);
    free(want_tok);
    free(lg);
    free(f32);
    free(want);
}

static void test_chunk_stories(const struct mk_model *m) {
    struct trace t;
    if (cpu_reference(m, 512, 1, 200, &t) != 0) {
        MK_CHECK(0);
        return;
    }
    check_chunks(m, &t, 512, 24, "stories260K");
    check_chunks(m, &t, 512, 96, "stories260K");
    trace_free(&t);
}

/* The preset in format (generated into $TMPDIR when missing): `steps` greedy steps of each GPU
 * backend against the CPU executor, then chunk steps of up to each of the (0-ended) ubatches. */
static void check_generated(const char *preset, const char *format, uint32_t n_ctx, uint32_t steps,
                            const uint32_t *ubatches) {
    const bool bf16 = !strcmp(format, "bf16");
    const char *tmp = getenv("TMPDIR");
    char path[600], what[64];
    snprintf(path, sizeof path, "%s/mk_%s_%s.gguf", tmp && *tmp ? tmp : "/tmp", preset, format);
    snprintf(what, sizeof what, "%s-%s", preset, format);
    struct mk_model *m = load_or_generate(path, preset, format, NULL);
    if (!m) return;
    struct trace t;
    if (cpu_reference(m, n_ctx, 1, steps, &t) != 0) {
        MK_CHECK(0);
    } else {
        check_gpu_kinds(m, &t, n_ctx, what);
        for (const uint32_t *u = ubatches; *u; u++) {
            check_chunks(m, &t, n_ctx, *u, what);
            /* Chunks of 64-128 tokens (one block of token rows), and past 128 (two, the second
             * mostly past the chunk's rows). */
            static const uint32_t one[] = { 64, 96, 72, 128, 80 }, two[] = { 136, 64 };
            if (bf16 && *u >= MK_ACT_BF16_MIN_DEFAULT) {
                check_chunks_act(m, &t, n_ctx, *u, MK_KV_F32, one, 5, what);
                check_chunks_act(m, &t, n_ctx, *u, MK_KV_F16, one, 5, what);
            }
            if (bf16 && *u >= two[0]) check_chunks_act(m, &t, n_ctx, *u, MK_KV_F32, two, 2, what);
        }
        trace_free(&t);
    }
    mk_model_free(m);
}

/* 1100 steps of four query heads a KV head (the other tiny presets have two) at 16 splits a KV head
 * (n_ctx 2048, unit 128; 132 workers give 66), on each GPU executor against the CPU executor's
 * logits: once merged by an ATTN_COMBINE op, then twice by each KV head's last split (auto's choice
 * here), where the split tasks share the query heads while split 0 holds every position (below the
 * solo bound: every step at the default, the first 128 in the third pass) and past that the last
 * one merges two to nine live splits. */
static void test_attn_gqa4(void) {
    static const int merge[] = { MK_ATTN_MERGE_OP, MK_ATTN_MERGE_SPLITS, MK_ATTN_MERGE_SPLITS };
    /* The third pass sets the solo step's bound to the unit: with the default (1536 at this head
     * size) all 1,100 steps would be solo, and the splits that merge themselves would go untested. */
    static const uint32_t solo[] = { 0, 0, 128 };
    for (int i = 0; i < 3; i++) {
        printf("INFO tiny-gqa4: the attention merged by %s%s\n", i ? "each KV head's last split" : "an op",
               solo[i] ? ", the solo step only below the first unit (128)" : "");
        g_attn_merge = merge[i];
        g_attn_solo = solo[i];
        check_generated("tiny-gqa4", "bf16", 2048, 1100, (const uint32_t[]){ 0 });
    }
    g_attn_merge = -1;
    g_attn_solo = 0;
}

/* Every weight type and llama.cpp mix on the tiny preset: each GPU backend against the CPU
 * executor, which the CPU tests tie to ggml's dequantization. */
static void test_quant(void) {
    static const char *const formats[] = {
        "f16",    "bf16",   "q8_0",   "q4_0",   "q4_1",   "q5_0",   "q5_1", "q2_k",
        "q3_k",   "q4_k",   "q5_k",   "q6_k",   "iq4_nl", "iq4_xs", "Q2_K", "Q3_K_S",
        "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_XS"
    };
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
        check_generated("tiny", formats[f], 256, 32, (const uint32_t[]){ 24, 0 });
}

/* Heads of 128 (the 8B models' size: the chunk attention's widest tensor-core kernel) on a tiny
 * model, bf16 (the wide products) and the K-quants, whose chunks of 72 to 192 take the f16 wgmma
 * products on cc 9.0 (elsewhere, or with MK_CUDA_NO_CHUNK_KQ=1, the integers' mma.sync kernels up
 * to 128 and split rows past it): Q4_K_M stacks Q4_K and Q6_K rows in one product, Q5_K_M Q5_K
 * and Q6_K. */
static void test_chunk_hd128(void) {
    check_generated("tiny-hd128", "bf16", 512, 200, (const uint32_t[]){ 24, 192, 0 });
    check_generated("tiny-hd128", "Q4_K_M", 512, 200, (const uint32_t[]){ 24, 192, 0 });
    check_generated("tiny-hd128", "Q5_K_M", 512, 200, (const uint32_t[]){ 192, 0 });
    check_generated("tiny-hd128", "q6_k", 512, 200, (const uint32_t[]){ 192, 0 });
}

/* The name results carry for a model at path: its file name when MK_GPU_LLAMA1B chose it (any
 * weight type), else the generated file's. */
static const char *llama1b_label(const char *path) {
    if (!getenv("MK_GPU_LLAMA1B")) return "llama-1b-bf16";
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* llama-1b shape in BF16: greedy tokens of every backend against the CPU executor for 64 steps;
 * where a token differs, the reference's own margin must be within the logit error there. */
static void test_llama1b(void) {
    const char *path = getenv("MK_GPU_LLAMA1B");
    char buf[512];
    if (!path) {
        const char *tmp = getenv("TMPDIR");
        snprintf(buf, sizeof buf, "%s/mk_llama1b_bf16.gguf", tmp && *tmp ? tmp : "/tmp");
        path = buf;
    }
    struct mk_model *m = load_or_generate(path, "llama-1b", "bf16", NULL);
    if (!m) return;
    const uint32_t steps = 64, n_ctx = 512;
    struct trace t;
    double t0 = now_ms();
    if (cpu_reference(m, n_ctx, 1, steps, &t) != 0) {
        MK_CHECK(0);
        mk_model_free(m);
        return;
    }
    printf("INFO cpu reference %s: %u steps in %.1f s\n", llama1b_label(path), steps, (now_ms() - t0) / 1e3);
    check_gpu_kinds(m, &t, n_ctx, llama1b_label(path));
    check_chunks(m, &t, n_ctx, 24, llama1b_label(path));
    trace_free(&t);
    mk_model_free(m);
}

/* Timings, not checks: greedy decode from BOS on each backend, wall and device time per step. */
static void bench_model(const struct mk_model *m, const char *name, uint32_t n) {
    uint64_t bytes = mk_model_bytes_per_token(m);
    const char *only = getenv("MK_BENCH_KINDS"); /* e.g. "megakernel" */
    for (int k = 0; k < N_GPU_KINDS; k++) {
        if (only && !strstr(only, mk_backend_kind_name(gpu_kinds[k]))) continue;
        struct mk_backend *b = create_gpu(m, gpu_kinds[k], 512, 0);
        if (!b) continue;
        struct mk_error err;
        int32_t tok = 1;
        double *wall = calloc(n, sizeof *wall), *dev = calloc(n, sizeof *dev);
        int ok = 1;
        for (uint32_t i = 0; i < 8 && ok; i++) {
            struct mk_step_cmd c = greedy_cmd(tok, (int32_t)i);
            ok = b->vt->step(b, &c, &tok, &err) == MK_OK;
        }
        ok = ok && b->vt->reset(b, &err) == MK_OK;
        tok = 1;
        for (uint32_t i = 0; i < n && ok; i++) {
            struct mk_step_cmd c = greedy_cmd(tok, (int32_t)i);
            double t0 = now_ms();
            ok = b->vt->step(b, &c, &tok, &err) == MK_OK;
            wall[i] = now_ms() - t0;
            dev[i] = b->last_step_ns / 1e6;
        }
        if (!ok) {
            fprintf(stderr, "bench %s %s: %s\n", name, b->vt->name, err.msg);
            MK_CHECK(ok);
        } else {
            double w50, w99, d50, d99;
            double *v = wall;
            for (int pass = 0; pass < 2; pass++, v = dev) {
                for (uint32_t i = 1; i < n; i++)
                    for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
                        double x = v[j];
                        v[j] = v[j - 1];
                        v[j - 1] = x;
                    }
            }
            w50 = wall[n / 2];
            w99 = wall[(n * 99) / 100];
            d50 = dev[n / 2];
            d99 = dev[(n * 99) / 100];
            printf("BENCH %s %s tg%u: wall p50 %.3f ms p99 %.3f ms (%.1f tok/s), device p50 %.3f ms p99 %.3f ms, "
                   "%.1f MB/token -> %.0f GB/s at device p50\n",
                   name, b->vt->name, n, w50, w99, 1e3 / w50, d50, d99, bytes / 1e6, bytes / (d50 * 1e-3) / 1e9);
        }
        free(wall);
        free(dev);
        b->vt->free(b);
    }
}

/* Where the megakernel's time goes: per-opcode task time and span of one step, from the trace. */
static void trace_model(const struct mk_model *m, const char *name, uint32_t steps, enum mk_gpu_trace mode) {
    struct mk_backend_params bp = params(MK_BACKEND_MEGAKERNEL, 512);
    bp.gpu.trace = mode;
    struct mk_backend *b = create_gpu_with(m, &bp);
    if (!b) return;
    struct mk_cuda_backend_info info;
    struct mk_error err;
    mk_backend_cuda_info(b, &info, &err);
    int32_t tok = 1;
    for (uint32_t i = 0; i < steps; i++) {
        struct mk_step_cmd c = greedy_cmd(tok, (int32_t)i);
        if (b->vt->step(b, &c, &tok, &err) != MK_OK) {
            fprintf(stderr, "trace %s: %s\n", name, err.msg);
            b->vt->free(b);
            return;
        }
    }
    uint64_t *tr = calloc((size_t)info.n_tasks * 2, sizeof *tr);
    if (mk_backend_cuda_trace(b, tr, info.n_tasks, &err) != MK_OK) {
        fprintf(stderr, "trace %s: %s\n", name, err.msg);
    } else {
        /* The program is the CPU executor's, compiled for the same grid: ops per task by task_base. */
        struct mk_compile_params cp = mk_compile_default_params();
        cp.n_workers = info.grid;
        cp.n_ctx = 512;
        cp.tasks_per_worker = bp.gpu.tasks_per_worker;
        cp.attn_block = bp.gpu.attn_block;
        cp.attn_splits = bp.gpu.attn_splits;
        cp.fuse_attn_output = bp.gpu.fuse_attn_output;
        cp.attn_merge = (enum mk_attn_merge)bp.gpu.attn_merge;
        cp.schedule = bp.gpu.dynamic_schedule ? MK_SCHED_DYNAMIC : MK_SCHED_STATIC;
        struct mk_program *p = NULL;
        if (mk_program_compile(m, &cp, &p, &err) == MK_OK && p->n_tasks == info.n_tasks) {
            double busy[MK_OP_COUNT] = { 0 }, first[MK_OP_COUNT], last[MK_OP_COUNT] = { 0 };
            uint32_t count[MK_OP_COUNT] = { 0 };
            uint64_t t0 = UINT64_MAX, t1 = 0;
            for (uint32_t t = 0; t < p->n_tasks; t++) {
                if (tr[2 * t] < t0) t0 = tr[2 * t];
                if (tr[2 * t + 1] > t1) t1 = tr[2 * t + 1];
            }
            for (int o = 0; o < (int)MK_OP_COUNT; o++) first[o] = 1e30;
            for (uint32_t t = 0; t < p->n_tasks; t++) {
                uint32_t op = p->instrs[mk_program_instr_of_task(p, t)].op;
                double s = (tr[2 * t] - t0) / 1e3, e = (tr[2 * t + 1] - t0) / 1e3;
                busy[op] += e - s;
                count[op]++;
                if (s < first[op]) first[op] = s;
                if (e > last[op]) last[op] = e;
            }
            printf("TRACE %s megakernel (%s): step span %.1f us over %u tasks on %u blocks\n", name,
                   mode == MK_GPU_TRACE_AT_FETCH ? "start = fetch" : "start = after waits", (t1 - t0) / 1e3, p->n_tasks,
                   info.grid);
            /* One layer in the middle, instruction by instruction: when its tasks began and ended. */
            char want[16];
            snprintf(want, sizeof want, "blk.%u.", m->cfg.n_layer / 2);
            for (uint32_t i = 0; i < p->n_instr; i++) {
                if (strncmp(p->labels[i], want, strlen(want)) && p->instrs[i].op != MK_OP_NORM_LM_HEAD) continue;
                double s_min = 1e30, s_max = 0, e_min = 1e30, e_max = 0, sum = 0;
                for (uint32_t t = p->task_base[i]; t < p->task_base[i + 1]; t++) {
                    double s = (tr[2 * t] - t0) / 1e3, e = (tr[2 * t + 1] - t0) / 1e3;
                    if (s < s_min) s_min = s;
                    if (s > s_max) s_max = s;
                    if (e < e_min) e_min = e;
                    if (e > e_max) e_max = e;
                    sum += e - s;
                }
                uint32_t n = p->task_base[i + 1] - p->task_base[i];
                printf("TRACE %s   %-22s %4u tasks: start %8.1f..%8.1f  end %8.1f..%8.1f  mean %6.2f us\n", name,
                       p->labels[i], n, s_min, s_max, e_min, e_max, n ? sum / n : 0.0);
            }
            for (int o = 0; o < (int)MK_OP_COUNT; o++)
                if (count[o])
                    printf("TRACE %s   %-18s %5u tasks, busy %9.1f us (%.2f us/task), first start %8.1f us, last end "
                           "%8.1f us\n",
                           name, mk_opcode_name((uint32_t)o), count[o], busy[o], busy[o] / count[o], first[o], last[o]);
        }
        mk_program_free(p);
    }
    free(tr);
    b->vt->free(b);
}

static void test_bench(const char *dir) {
    char path[1100];
    struct mk_error err;
    struct mk_model *m = NULL;
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", dir);
    if (!getenv("MK_BENCH_SKIP_STORIES") && mk_model_load(path, &m, &err) == MK_OK) {
        bench_model(m, "stories260K-f32", 256);
        trace_model(m, "stories260K-f32", 16, MK_GPU_TRACE_AFTER_WAITS);
        mk_model_free(m);
    }
    const char *big = getenv("MK_GPU_LLAMA1B");
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/mk_llama1b_bf16.gguf", tmp && *tmp ? tmp : "/tmp");
    if (mk_model_load(big ? big : path, &m, &err) == MK_OK) {
        const char *name = llama1b_label(big ? big : path);
        bench_model(m, name, 128);
        if (!getenv("MK_BENCH_SKIP_TRACE")) {
            trace_model(m, name, 16, MK_GPU_TRACE_AFTER_WAITS);
            trace_model(m, name, 16, MK_GPU_TRACE_AT_FETCH);
        }
        mk_model_free(m);
    } else {
        printf("INFO bench: no llama-1b model (%s)\n", err.msg);
    }
}

/* llama-8b shape in BF16 (generated into $TMPDIR when missing): timings of every backend. */
static void test_bench8b(void) {
    const char *tmp = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/mk_llama8b_bf16.gguf", tmp && *tmp ? tmp : "/tmp");
    struct mk_model *m = load_or_generate(path, "llama-8b", "bf16", NULL);
    if (!m) return;
    bench_model(m, "llama-8b-bf16", 128);
    if (!getenv("MK_BENCH_SKIP_TRACE")) trace_model(m, "llama-8b-bf16", 16, MK_GPU_TRACE_AFTER_WAITS);
    mk_model_free(m);
}

/* ---- The token loop on the device (MK_CMD_GENERATE). ---- */

struct gen_rec {
    int32_t *tok; /* (cap) */
    uint32_t n, cap, stop_at, slow_every;
    bool stop_now; /* stop_at reached */
};

static bool gen_rec_token(void *user, uint32_t i, int32_t token, uint64_t step_ns) {
    (void)step_ns;
    struct gen_rec *r = user;
    if (i == r->n && r->n < r->cap) r->tok[r->n++] = token;
    if (r->slow_every && i % r->slow_every == r->slow_every - 1) {
        struct timespec ts = { 0, 3000000 };
        nanosleep(&ts, NULL);
    }
    return r->stop_at && i == r->stop_at;
}

/* Steps token by token from first at pos0 with cmd's sampling; out[i] is step i's token. */
static enum mk_status step_loop(struct mk_backend *b, struct mk_step_cmd c, int32_t first, int32_t pos0, uint32_t n,
                                int32_t *out, struct mk_error *err) {
    int32_t tok = first;
    for (uint32_t i = 0; i < n; i++) {
        c.token = tok;
        c.pos = pos0 + (int32_t)i;
        enum mk_status st = b->vt->step(b, &c, &tok, err);
        if (st != MK_OK) return st;
        out[i] = tok;
    }
    return MK_OK;
}

static enum mk_status gen_run(struct mk_backend *b, struct mk_step_cmd c, int32_t first, int32_t pos0, uint32_t max,
                              const int32_t *stop, uint32_t n_stop, struct gen_rec *r,
                              struct mk_backend_gen_result *res, struct mk_error *err) {
    c.token = first;
    c.pos = pos0;
    r->n = 0;
    const struct mk_backend_gen gen = {
        .max_steps = max, .stop = stop, .n_stop = n_stop, .on_token = gen_rec_token, .user = r
    };
    return b->vt->generate(b, &c, &gen, res, err);
}

static uint32_t first_diff_u(const int32_t *a, const int32_t *b, uint32_t n) {
    uint32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* The megakernel's device loop against its own one-command-per-token steps (the same kernel and
 * program, so equal token for token), greedy and sampled, across several rings of tokens with a
 * consumer that falls behind; the CPU executor's greedy tokens beside it; stop tokens, cancel
 * (and the KV cache after it), and the context's end. */
static void check_generate(const struct mk_model *m, const char *label, uint32_t n, uint32_t n_ctx,
                           bool want_cpu_equal) {
    struct mk_backend *b = create_gpu(m, MK_BACKEND_MEGAKERNEL, n_ctx, 0);
    if (!b) return;
    MK_CHECK(b->vt->generate != NULL);
    int32_t *want = calloc(n, sizeof *want), *cpu = calloc(n, sizeof *cpu);
    struct gen_rec r = { .tok = calloc(n, sizeof *r.tok), .cap = n };
    struct mk_backend_gen_result res;
    struct mk_error err;
    const int32_t first = m->vocab.bos >= 0 ? m->vocab.bos : 1;

    struct mk_backend_params cp = params(MK_BACKEND_CPU, n_ctx);
    cp.verbose = 0;
    struct mk_backend *cb = NULL;
    const double t0 = now_ms();
    if (mk_backend_create_cpu(m, &cp, &cb, &err) == MK_OK) {
        MK_CHECK(step_loop(cb, greedy_cmd(0, 0), first, 0, n, cpu, &err) == MK_OK);
        cb->vt->free(cb);
    }
    printf("INFO generate %s: cpu reference of %u steps in %.1f s\n", label, n, (now_ms() - t0) / 1e3);

    struct mk_step_cmd sampled = greedy_cmd(0, 0);
    sampled.temperature = 0.8f;
    sampled.top_k = 40;
    sampled.top_p = 0.95f;
    sampled.min_p = 0.05f;
    sampled.seed = 4242;
    for (int k = 0; k < 2; k++) {
        const struct mk_step_cmd c = k ? sampled : greedy_cmd(0, 0);
        MK_CHECK(b->vt->reset(b, &err) == MK_OK);
        MK_CHECK(step_loop(b, c, first, 0, n, want, &err) == MK_OK);
        MK_CHECK(b->vt->reset(b, &err) == MK_OK);
        r.slow_every = k ? 0 : 97; /* greedy: the ring fills while the consumer sleeps */
        const double g0 = now_ms();
        enum mk_status st = gen_run(b, c, first, 0, n, NULL, 0, &r, &res, &err);
        const double g_ms = now_ms() - g0;
        if (st != MK_OK) fprintf(stderr, "generate %s: %s\n", label, err.msg);
        MK_CHECK(st == MK_OK);
        const uint32_t d = first_diff_u(r.tok, want, n);
        printf("RESULT generate %s %s: %u tokens, %u equal to the step loop's before the first difference, "
               "why %u, %.3f ms/token wall (device %.3f)\n",
               label, k ? "sampled" : "greedy", r.n, d, res.why, g_ms / n,
               res.n_steps ? (res.t_end_ns - res.t_start_ns) / 1e6 / res.n_steps : 0.0);
        MK_CHECK(r.n == n && res.n_steps == n && res.n_delivered == n && res.why == MK_GEN_END_MAX);
        MK_CHECK(d == n);
        if (!k) {
            const uint32_t dc = first_diff_u(r.tok, cpu, n);
            printf("RESULT generate %s greedy: %u of %u tokens equal the cpu executor's before the first difference\n",
                   label, dc, n);
            if (want_cpu_equal) MK_CHECK(dc == n);
        }
    }

    /* Greedy again for the rest: want is the greedy sequence. */
    MK_CHECK(b->vt->reset(b, &err) == MK_OK);
    MK_CHECK(step_loop(b, greedy_cmd(0, 0), first, 0, n, want, &err) == MK_OK);
    r.slow_every = 0;

    /* A stop token ends it after its first occurrence, delivered. */
    const uint32_t k_stop = n / 3;
    const int32_t stop[2] = { (int32_t)m->cfg.n_vocab - 1 == want[k_stop] ? 0 : (int32_t)m->cfg.n_vocab - 1,
                              want[k_stop] };
    uint32_t at = 0;
    while (want[at] != want[k_stop]) at++;
    if (stop[0] != want[k_stop])
        for (uint32_t i = 0; i < at; i++)
            if (want[i] == stop[0]) at = i;
    MK_CHECK(gen_run(b, greedy_cmd(0, 0), first, 0, n, stop, 2, &r, &res, &err) == MK_OK);
    printf("RESULT generate %s stop: ended after %u tokens (stop token first at %u), why %u\n", label, res.n_steps, at,
           res.why);
    MK_CHECK(res.why == MK_GEN_END_STOP && res.n_steps == at + 1 && r.n == at + 1);

    /* The consumer stops at token 20: the device ends soon after, and the cache up to there holds,
     * so a step at position 21 gives greedy's token. */
    r.stop_at = 20;
    MK_CHECK(gen_run(b, greedy_cmd(0, 0), first, 0, n, NULL, 0, &r, &res, &err) == MK_OK);
    printf("RESULT generate %s cancel: %u delivered, the device ran %u steps, why %u\n", label, res.n_delivered,
           res.n_steps, res.why);
    MK_CHECK(res.n_delivered == 21 && r.n == 21 && res.why == MK_GEN_END_CANCELLED);
    MK_CHECK(res.n_steps >= 21 && res.n_steps <= 21 + 16);
    r.stop_at = 0;
    int32_t next = -1;
    struct mk_step_cmd c21 = greedy_cmd(want[20], 21);
    MK_CHECK(b->vt->step(b, &c21, &next, &err) == MK_OK && next == want[21]);

    /* The context's last position ends it. */
    MK_CHECK(gen_run(b, greedy_cmd(0, 0), want[n_ctx - 6 < n ? n_ctx - 6 : 0], (int32_t)n_ctx - 5, 100, NULL, 0, &r,
                     &res, &err) == MK_OK);
    MK_CHECK(res.why == MK_GEN_END_CONTEXT && res.n_steps == 5);

    /* A position past the context is refused before anything runs. */
    MK_CHECK(gen_run(b, greedy_cmd(0, 0), first, (int32_t)n_ctx, 10, NULL, 0, &r, &res, &err) == MK_ERR_CONTEXT_FULL);
    free(want);
    free(cpu);
    free(r.tok);
    b->vt->free(b);
}

/* The faults that leave CUDA usable (a block that stops, an error code) in the middle of a device
 * generation: it fails with the fault's status and names it, after delivering the golden tokens
 * of the steps before; a new session then generates the golden text. */
static void test_faults_generate(const struct mk_model *m) {
    const enum mk_fault_kind kinds[2] = { MK_FAULT_HANG, MK_FAULT_ERROR };
    const enum mk_status want[2] = { MK_ERR_TIMEOUT, MK_ERR_INTERNAL };
    const char *names[2] = { "hang", "error" }, *says[2] = { "no token within 1500 ms after its 7-th", "at step 7" };
    const uint32_t at = 7;
    for (int k = 0; k < 2; k++) {
        struct mk_backend_params p = params(MK_BACKEND_MEGAKERNEL, 64);
        p.watchdog_ms = 1500;
        p.gpu.dynamic_schedule = false;
        p.fault.kind = kinds[k];
        p.fault.step = at;
        struct mk_backend *b = create_gpu_with(m, &p);
        if (!b) continue;
        struct gen_rec r = { .tok = calloc(64, sizeof(int32_t)), .cap = 64 };
        struct mk_backend_gen_result res;
        struct mk_error err;
        double t0 = now_ms();
        enum mk_status st = gen_run(b, greedy_cmd(0, 0), 1, 0, 20, NULL, 0, &r, &res, &err);
        double took = now_ms() - t0;
        printf("RESULT fault %s at step %u of a device generation: %s after %u tokens, %.0f ms: %s\n", names[k], at,
               mk_status_str(st), r.n, took, err.msg);
        MK_CHECK(st == want[k] && r.n == at && res.n_delivered == at);
        MK_CHECK(!memcmp(r.tok, mk_test_golden_ids, at * sizeof(int32_t)));
        MK_CHECK_MSG(strstr(err.msg, "generating from pos 0") && strstr(err.msg, says[k]), "%s: %s", names[k], err.msg);
        MK_CHECK(took < (kinds[k] == MK_FAULT_HANG ? 6000.0 : 3000.0));
        MK_CHECK(gen_run(b, greedy_cmd(0, 0), 1, 0, 5, NULL, 0, &r, &res, &err) == want[k]); /* poisoned */
        b->vt->free(b);
        b = create_gpu(m, MK_BACKEND_MEGAKERNEL, 64, 0);
        if (b) {
            MK_CHECK(gen_run(b, greedy_cmd(0, 0), 1, 0, 20, NULL, 0, &r, &res, &err) == MK_OK && r.n == 20);
            MK_CHECK_MSG(!memcmp(r.tok, mk_test_golden_ids, 20 * sizeof(int32_t)), "after %s", names[k]);
            b->vt->free(b);
        }
        free(r.tok);
    }
}

static void test_generate(const struct mk_model *m) {
    check_generate(m, "stories260K", 600, 1024, true);
    const char *path = getenv("MK_GPU_GEN_MODEL");
    if (!path) return;
    struct mk_model *g = load_or_generate(path, "llama-1b", "q4_k_m", NULL);
    if (!g) return;
    const char *base = strrchr(path, '/');
    check_generate(g, base ? base + 1 : path, 300, 512, false);
    mk_model_free(g);
}

/* Speculation through the public API on the GPU: greedy output with prompt lookup equals plain
 * greedy decoding (which runs as one device loop) on the megakernel and on perop. */
struct spec_run {
    int32_t ids[160];
    uint32_t n;
    struct mk_timings t;
};
static int spec_collect(void *user, int32_t id, const char *piece, size_t len) {
    (void)piece, (void)len;
    struct spec_run *r = user;
    if (r->n < 160) r->ids[r->n++] = id;
    return 0;
}
static void spec_session(const struct mk_lm *lm, enum mk_backend_kind kind, int spec, const int32_t *prompt,
                         uint32_t n_prompt, struct spec_run *r) {
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = kind;
    sp.n_ctx = 256;
    sp.ubatch = 16;
    sp.spec = spec;
    sp.kv_type = test_kv_type();
    sp.sampling.temperature = 0.0f;
    struct mk_session *s = NULL;
    struct mk_error err = { 0 };
    memset(r, 0, sizeof *r);
    if (mk_session_create(lm, &sp, &s, &err) != MK_OK) {
        MK_CHECK_MSG(0, "spec session on %s: %s", mk_backend_kind_name(kind), err.msg);
        return;
    }
    MK_CHECK_MSG(mk_session_feed(s, prompt, n_prompt) == MK_OK, "feed: %s", mk_session_last_error(s));
    MK_CHECK_MSG(mk_session_generate(s, 150, spec_collect, r, NULL, NULL) == MK_OK, "generate: %s",
                 mk_session_last_error(s));
    r->t = mk_session_timings(s);
    mk_session_free(s);
}
static void test_spec(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", dir);
    struct mk_lm *lm = NULL;
    struct mk_error err = { 0 };
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s: %s", path, err.msg);
        return;
    }
    /* Repeats, so that drafts hold at times. */
    int32_t prompt[48];
    for (uint32_t i = 0; i < 48; i++) prompt[i] = (int32_t)(1u + (i % 13u) * 29u % 511u);
    static struct spec_run base, on, perop;
    spec_session(lm, MK_BACKEND_MEGAKERNEL, MK_SPEC_OFF, prompt, 48, &base);
    spec_session(lm, MK_BACKEND_MEGAKERNEL, MK_SPEC_LOOKUP, prompt, 48, &on);
    spec_session(lm, MK_BACKEND_PEROP, MK_SPEC_LOOKUP, prompt, 48, &perop);
    const struct spec_run *all[] = { &on, &perop };
    static const char *const what[] = { "megakernel", "perop" };
    MK_CHECK(base.n == 150);
    for (int k = 0; k < 2; k++) {
        MK_CHECK_MSG(all[k]->n == base.n && !memcmp(all[k]->ids, base.ids, base.n * sizeof base.ids[0]),
                     "speculation (%s) output differs from plain greedy decoding at token %u", what[k],
                     first_diff_u(all[k]->ids, base.ids, base.n));
        printf("INFO spec %s: %u verification steps, %u of %u drafted tokens accepted\n", what[k],
               (unsigned)all[k]->t.n_spec_steps, (unsigned)all[k]->t.n_accepted, (unsigned)all[k]->t.n_drafted);
    }
    MK_CHECK_MSG(on.t.n_spec_steps > 0 && perop.t.n_spec_steps > 0, "no draft was verified on a repetitive prompt");
    mk_lm_free(lm);
}

int main(int argc, char **argv) {
    const struct mk_cuda *cu = NULL;
    struct mk_error err;
    const char *dir = mk_test_models_dir("stories260K-f32.gguf");
    struct mk_model *m = NULL;
    if (dir) {
        char path[1100];
        snprintf(path, sizeof path, "%s/stories260K-f32.gguf", dir);
        if (mk_model_load(path, &m, &err) != MK_OK) {
            fprintf(stderr, "load %s: %s\n", path, err.msg);
            return 1;
        }
    }
    if (mk_cuda_load(&cu, &err) != MK_OK) {
        /* No GPU: the GPU backends must say so clearly, with the reason. */
        MK_CHECK(err.status == MK_ERR_NO_DEVICE);
        MK_CHECK(strlen(err.msg) > 10);
        if (m) {
            struct mk_backend_params p = params(MK_BACKEND_MEGAKERNEL, 64);
            struct mk_backend *b = NULL;
            struct mk_error e2;
            enum mk_status st = mk_backend_create_cuda(m, &p, &b, &e2);
            MK_CHECK(st == MK_ERR_NO_DEVICE && b == NULL);
            MK_CHECK(strcmp(e2.msg, err.msg) == 0);
            mk_model_free(m);
        }
        printf("SKIP: %s\n", err.msg);
        return mk_test_failures ? 1 : 0;
    }
    printf("INFO CUDA driver %d, KV cache %s\n", cu->driver_version, mk_kv_type_name(test_kv_type()));
    if (test_kv_type() == MK_KV_F16) g_tol = 3e-3;
    const char *only = argc > 1 ? argv[1] : "all";
    int all = !strcmp(only, "all");
    if (all || !strcmp(only, "arch")) test_hf_models();
    if (!m) {
        printf("SKIP: models folder not found (set MK_MODELS_DIR); GPU tests need stories260K-f32.gguf\n");
        return mk_test_finish("cuda_test");
    }
    if (all || !strcmp(only, "stories")) test_stories(m);
    if (all || !strcmp(only, "chunk")) test_chunk_stories(m);
    if (all || !strcmp(only, "sampling")) {
        test_sampling(m, "its head");
        test_sampling_ties(m);
        test_sampling_nan(m);
        test_sampling_odd_vocab(dir);
    }
    if (all || !strcmp(only, "context")) test_context_limit(m);
    if (all || !strcmp(only, "generate")) test_generate(m);
    if (all || !strcmp(only, "hang")) test_hang(m);
    if (all || !strcmp(only, "faults")) test_faults(m, argc > 2 ? argv[2] : NULL);
    if (all || !strcmp(only, "spec")) test_spec(dir);
    mk_model_free(m);
    if (all || !strcmp(only, "quant")) test_quant();
    if (all || !strcmp(only, "chunk")) test_chunk_hd128();
    if (all || !strcmp(only, "attn")) test_attn_gqa4();
    if (all || !strcmp(only, "llama1b")) test_llama1b();
    if (!strcmp(only, "bench")) test_bench(dir);
    if (!strcmp(only, "bench8b")) test_bench8b();
    return mk_test_finish("cuda_test");
}
