/* The tiny Llama 3, Qwen2 and Qwen3 models of tests/hf/make_hf_models.py, run on the reference and the CPU executor against transformers' logits and greedy tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "core/model.h"
#include "tests/test_util.h"

/* A .golden file: header line, ids line, then n_total rows of n_vocab float32 logits. */
struct golden {
    uint32_t n_vocab, n_prompt, n_total;
    int32_t ids[512];
    const float *logits; /* row t: after token t */
    unsigned char *buf;
};

static bool golden_read(const char *file, struct golden *g) {
    size_t n = 0;
    memset(g, 0, sizeof *g);
    g->buf = mk_test_read_data_file(file, &n);
    if (!g->buf) return false;
    char *s = (char *)g->buf, *nl = memchr(s, '\n', n);
    if (!nl || sscanf(s, "mk-hf-golden 1 %u %u %u", &g->n_vocab, &g->n_prompt, &g->n_total) != 3 || g->n_total > 512 ||
        g->n_prompt == 0 || g->n_prompt >= g->n_total)
        return false;
    char *p = nl + 1, *end;
    for (uint32_t i = 0; i < g->n_total; i++) {
        long v = strtol(p, &end, 10);
        if (end == p) return false;
        g->ids[i] = (int32_t)v;
        p = end;
    }
    if (*p != '\n') return false;
    size_t off = (size_t)(p + 1 - s);
    /* The floats may sit at any offset: copy them to aligned storage after the header. */
    size_t bytes = (size_t)g->n_total * g->n_vocab * sizeof(float);
    if (n - off != bytes) return false;
    float *al = malloc(bytes);
    if (!al) return false;
    memcpy(al, g->buf + off, bytes);
    free(g->buf);
    g->buf = (unsigned char *)al;
    g->logits = al;
    return true;
}

/* What each test model is built to exercise (make_hf_models.py's configs), as mk reads it. */
static void check_config(const char *name, const struct mk_model *m) {
    const struct mk_llama_config *c = &m->cfg;
    MK_CHECK(c->n_embd == 64 && c->n_layer == 2 && c->n_head == 4 && c->n_head_kv == 2 && c->n_vocab == 160);
    if (!strcmp(name, "hf_llama3")) {
        MK_CHECK(!strcmp(c->arch, "llama") && !c->rope_neox && c->has_rope_freqs && !c->has_qkv_bias);
        MK_CHECK(!c->has_qk_norm && !c->tied_output && c->head_dim == 16 && c->rope_freq_scale == 1.0f);
        /* Llama 3's divisors for head size 16, base 1e4, factor 8, original context 32: the
         * fastest pair keeps its frequency, the second is smoothed, the slow ones are divided by 8. */
        const float *ff = m->rope_freqs.data;
        MK_CHECK(ff && ff[0] == 1.0f && ff[1] > 1.0f && ff[1] < 8.0f && ff[7] == 8.0f);
    } else if (!strcmp(name, "hf_qwen2")) {
        MK_CHECK(!strcmp(c->arch, "qwen2") && c->rope_neox && c->has_qkv_bias && !c->has_qk_norm);
        MK_CHECK(c->tied_output && c->rope_freq_scale == 0.5f && !c->has_rope_freqs && c->rms_eps == 1e-6f);
    } else {
        MK_CHECK(!strcmp(c->arch, "qwen3") && c->rope_neox && c->has_qk_norm && !c->has_qkv_bias);
        MK_CHECK(c->head_dim == 32 && c->n_rot == 32 && !c->tied_output);
    }
}

/* Feeds the golden sequence; after every token compares the logits with transformers' and, from
 * the last prompt token on, the greedy choice with the token transformers chose next. */
static void run_backend(const char *name, const struct mk_model *m, const struct golden *g, enum mk_backend_kind kind,
                        uint32_t threads) {
    struct mk_backend_params bp = { .kind = kind, .n_ctx = 128, .n_threads = threads };
    struct mk_backend *b = NULL;
    struct mk_error err = { 0 };
    enum mk_status st =
        kind == MK_BACKEND_REF ? mk_backend_create_ref(m, &bp, &b, &err) : mk_backend_create(m, &bp, &b, &err);
    MK_CHECK_MSG(st == MK_OK, "%s: backend %s: %s", name, mk_backend_kind_name(kind), err.msg);
    if (st != MK_OK) return;
    float *logits = malloc(g->n_vocab * sizeof *logits);
    double worst_rel = 0.0, worst_abs = 0.0;
    int matched = 0, near_ties = 0, steps = 0;
    for (uint32_t t = 0; t < g->n_total && logits; t++) {
        struct mk_step_cmd cmd = mk_test_step_cmd(g->ids[t], (int32_t)t);
        int32_t tok = -1;
        st = b->vt->step(b, &cmd, &tok, &err);
        if (st == MK_OK) st = b->vt->logits(b, logits, &err);
        MK_CHECK_MSG(st == MK_OK, "%s/%s step %u: %s", name, b->vt->name, t, err.msg);
        if (st != MK_OK) break;
        const float *want = g->logits + (size_t)t * g->n_vocab;
        double rel = mk_test_rel_err(logits, want, g->n_vocab);
        for (uint32_t i = 0; i < g->n_vocab; i++) {
            double d = fabs((double)logits[i] - want[i]);
            if (d > worst_abs) worst_abs = d;
        }
        if (!(rel <= worst_rel)) worst_rel = rel;
        if (t + 1 < g->n_total && t + 1 >= g->n_prompt) {
            steps++;
            int32_t next = g->ids[t + 1];
            if (tok == next) {
                matched++;
            } else if (tok >= 0 && (uint32_t)tok < g->n_vocab && want[next] - want[tok] < 1e-3f) {
                near_ties++; /* transformers itself has the two within rounding */
            } else {
                MK_CHECK_MSG(false, "%s/%s: step %u chose %d, transformers %d (logits %g vs %g)", name, b->vt->name, t,
                             (int)tok, (int)next, tok >= 0 ? (double)want[tok] : 0.0, (double)want[next]);
            }
        }
    }
    printf("  %-10s %-4s greedy %d/%d equal (%d near-ties), max |logit diff| %.3g, relative %.3g\n", name, b->vt->name,
           matched, steps, near_ties, worst_abs, worst_rel);
    MK_CHECK_MSG(worst_rel < 2e-4, "%s/%s: logits differ from transformers by %g relative", name, b->vt->name,
                 worst_rel);
    MK_CHECK(steps == (int)(g->n_total - g->n_prompt));
    free(logits);
    b->vt->free(b);
}

static void test_model(const char *name) {
    char file[64], path[1024];
    snprintf(file, sizeof file, "%s.gguf", name);
    const char *gguf = mk_test_data_path(file, path, sizeof path);
    MK_CHECK_MSG(gguf != NULL, "tests/data/%s is missing (tests/hf/make_hf_models.py makes it)", file);
    snprintf(file, sizeof file, "%s.golden", name);
    struct golden g;
    bool ok = golden_read(file, &g);
    MK_CHECK_MSG(ok, "tests/data/%s is missing or malformed", file);
    struct mk_model *m = NULL;
    struct mk_error err = { 0 };
    enum mk_status st = gguf && ok ? mk_model_load(gguf, &m, &err) : MK_ERR_IO;
    MK_CHECK_MSG(!gguf || !ok || st == MK_OK, "%s: %s", name, err.msg);
    if (st == MK_OK) {
        check_config(name, m);
        MK_CHECK(g.n_vocab == m->cfg.n_vocab);
        if (g.n_vocab == m->cfg.n_vocab) {
            run_backend(name, m, &g, MK_BACKEND_REF, 1);
            run_backend(name, m, &g, MK_BACKEND_CPU, 3);
        }
        mk_model_free(m);
    }
    free(g.buf);
}

int main(void) {
    printf("transformers goldens:\n");
    test_model("hf_llama3");
    test_model("hf_qwen2");
    test_model("hf_qwen3");
    return mk_test_finish("arch_test");
}
