/* Tests the reference decode against stories260K's golden logits and greedy ids, requantized copies, a random F16 model, and its error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "core/gen.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "tests/test_util.h"

static const char *g_models; /* the models folder */

static struct mk_model *load(const char *path) {
    struct mk_model *m = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    if (mk_model_load(path, &m, &err) != MK_OK) {
        mk_test_fail("FAIL: loading %s: %s", path, err.msg);
        return NULL;
    }
    return m;
}

static struct mk_backend *make_ref(const struct mk_model *m, uint32_t n_ctx) {
    struct mk_backend_params p;
    memset(&p, 0, sizeof p);
    p.kind = MK_BACKEND_REF;
    p.n_ctx = n_ctx;
    struct mk_backend *b = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    if (mk_backend_create_ref(m, &p, &b, &err) != MK_OK) {
        mk_test_fail("FAIL: creating the ref backend: %s", err.msg);
        return NULL;
    }
    MK_CHECK(b->kind == MK_BACKEND_REF && b->n_ctx == n_ctx);
    return b;
}

/* Greedy ids from BOS: ids[0] is what the step at pos 0 produced. Returns how many steps succeeded. */
static int greedy_from_bos(struct mk_backend *b, int32_t bos, int n, int32_t *ids) {
    int32_t tok = bos;
    for (int i = 0; i < n; i++) {
        struct mk_step_cmd c = mk_test_step_cmd(tok, i);
        struct mk_error err;
        mk_error_clear(&err);
        if (b->vt->step(b, &c, &tok, &err) != MK_OK) {
            mk_test_fail("FAIL: step %d: %s", i, err.msg);
            return i;
        }
        ids[i] = tok;
    }
    return n;
}

static void print_text(const char *label, const struct mk_model *m, const int32_t *ids, int n) {
    struct mk_tokenizer *t = NULL;
    struct mk_error err;
    if (mk_tokenizer_create_gguf(&m->vocab, m->gguf, &t, &err) != MK_OK) return;
    int32_t seq[128];
    seq[0] = m->vocab.bos;
    memcpy(seq + 1, ids, (size_t)n * sizeof *ids);
    char text[2048];
    size_t len = mk_tokenizer_decode(t, seq, (size_t)n + 1, text, sizeof text - 1);
    text[len < sizeof text - 1 ? len : sizeof text - 1] = '\0';
    printf("%s: %s\n", label, text);
    mk_tokenizer_free(t);
}

static void test_stories_golden(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", g_models);
    struct mk_model *m = load(path);
    if (!m) return;
    struct mk_backend *b = make_ref(m, 512);
    if (!b) goto done;

    struct mk_error err;
    int32_t tok = -1;
    struct mk_step_cmd c = mk_test_step_cmd(m->vocab.bos, 0);
    MK_CHECK(m->vocab.bos == 1);
    MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_OK);
    float *logits = malloc(sizeof(float) * m->cfg.n_vocab);
    MK_CHECK(b->vt->logits(b, logits, &err) == MK_OK);
    double worst = 0.0;
    for (int i = 0; i < 5; i++) {
        double e = fabs((double)logits[i] - mk_test_golden_logits[i]);
        if (e > worst) worst = e;
    }
    printf("stories260K f32: logits[0..5) at pos 0 = %.6f %.6f %.6f %.6f %.6f, max |error| vs README = %.3g\n",
           logits[0], logits[1], logits[2], logits[3], logits[4], worst);
    MK_CHECK(worst < 1e-4);
    MK_CHECK(tok == mk_test_golden_ids[0]);

    /* Reset forgets the cache: the same first step gives bit-identical logits. */
    MK_CHECK(b->vt->reset(b, &err) == MK_OK);
    MK_CHECK(b->vt->logits(b, logits, &err) != MK_OK); /* nothing computed since the reset */
    int32_t ids[60];
    int n = greedy_from_bos(b, m->vocab.bos, 60, ids);
    MK_CHECK(n == 60);
    int first_bad = -1;
    for (int i = 0; i < n && first_bad < 0; i++)
        if (ids[i] != mk_test_golden_ids[i]) first_bad = i;
    printf("stories260K f32: first 60 greedy ids from BOS %s the README", first_bad < 0 ? "equal" : "DIFFER from");
    if (first_bad >= 0)
        printf(" (first at index %d: %d, expected %d)", first_bad, ids[first_bad], mk_test_golden_ids[first_bad]);
    printf("\n");
    MK_CHECK(first_bad < 0);
    print_text("stories260K f32 greedy text", m, ids, n);
    free(logits);

    /* Rewinding to an earlier position recomputes from there: step pos 3 again with the golden
     * token at pos 3 gives the golden next token. */
    int32_t again = -1;
    c = mk_test_step_cmd(mk_test_golden_ids[2], 3);
    MK_CHECK(b->vt->step(b, &c, &again, &err) == MK_OK && again == mk_test_golden_ids[3]);

done:
    if (b) b->vt->free(b);
    mk_model_free(m);
}

/* The same weights as F16 and BF16 give the same first 20 greedy tokens; Q8_0 stays readable. */
static void test_requantized(void) {
    char src[4200], dirbuf[4200];
    if (!mk_test_make_tmp_dir(dirbuf, sizeof dirbuf, "mk-ref-test-")) {
        mk_test_fail("FAIL: mkdtemp %s", dirbuf);
        return;
    }
    snprintf(src, sizeof src, "%s/stories260K-f32.gguf", g_models);
    const char *types[] = { "f16", "bf16", "q8_0" };
    const enum mk_dtype want[] = { MK_DTYPE_F16, MK_DTYPE_BF16, MK_DTYPE_Q8_0 };
    for (size_t ti = 0; ti < 3; ti++) {
        char dst[4300];
        snprintf(dst, sizeof dst, "%s/stories260K-%s.gguf", dirbuf, types[ti]);
        struct mk_error err;
        mk_error_clear(&err);
        struct mk_gen_quantize_params qp = mk_gen_quantize_default_params();
        qp.dtype = types[ti];
        if (mk_gen_quantize_file(src, dst, qp, &err) != MK_OK) {
            mk_test_fail("FAIL: quantizing to %s: %s", types[ti], err.msg);
            continue;
        }
        struct mk_model *m = load(dst);
        if (!m) {
            unlink(dst);
            continue;
        }
        MK_CHECK(m->layers[0].wq.type == want[ti] && m->token_embd.type == want[ti]);
        struct mk_backend *b = make_ref(m, 128);
        if (b) {
            int32_t ids[60];
            int n = greedy_from_bos(b, m->vocab.bos, 60, ids);
            int same_prefix = 0;
            while (same_prefix < n && ids[same_prefix] == mk_test_golden_ids[same_prefix]) same_prefix++;
            int same_at = 0;
            for (int i = 0; i < n; i++) same_at += ids[i] == mk_test_golden_ids[i];
            printf("stories260K %s: first %d of 60 greedy ids equal the f32 golden ones (%d positions agree)\n",
                   types[ti], same_prefix, same_at);
            char label[64];
            snprintf(label, sizeof label, "stories260K %s greedy text", types[ti]);
            print_text(label, m, ids, n);
            if (ti < 2)
                MK_CHECK(same_prefix >= 20);
            else
                MK_CHECK(same_prefix >= 10); /* 8-bit weights may drift later, but the story starts the same */
            b->vt->free(b);
        }
        mk_model_free(m);
        unlink(dst);
    }
    rmdir(dirbuf);
}

/* An untrained F16 model with an untied head and a 32000-token vocabulary runs, greedy and sampled. */
static void test_tiny_random(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/llama-2-tiny-random.gguf", g_models);
    struct mk_model *m = load(path);
    if (!m) return;
    MK_CHECK(!m->cfg.tied_output);
    MK_CHECK(m->layers[0].wq.type == MK_DTYPE_F16);
    struct mk_backend *b = make_ref(m, 64);
    if (b) {
        float *logits = malloc(sizeof(float) * m->cfg.n_vocab);
        int32_t tok = m->vocab.bos;
        int ok = 1;
        for (int i = 0; i < 8; i++) {
            struct mk_step_cmd c = mk_test_step_cmd(tok, i);
            if (i >= 4) {
                c.temperature = 0.8f;
                c.top_k = 40;
                c.top_p = 0.95f;
                c.min_p = 0.05f;
                c.seed = 3;
            }
            struct mk_error err;
            enum mk_status st = b->vt->step(b, &c, &tok, &err);
            if (st != MK_OK) {
                mk_test_fail("FAIL: tiny-random step %d: %s", i, err.msg);
                ok = 0;
                break;
            }
            MK_CHECK(tok >= 0 && (uint32_t)tok < m->cfg.n_vocab);
            MK_CHECK(b->vt->logits(b, logits, &err) == MK_OK);
            int finite = 1;
            for (uint32_t v = 0; v < m->cfg.n_vocab; v++) finite &= isfinite(logits[v]) != 0;
            MK_CHECK(finite);
            if (c.temperature <= 0.0f) {
                int32_t am = 0;
                for (uint32_t v = 1; v < m->cfg.n_vocab; v++)
                    if (logits[v] > logits[am]) am = (int32_t)v;
                MK_CHECK(tok == am);
            }
        }
        if (ok) printf("llama-2-tiny-random (f16, untied head): 8 steps ran, logits finite\n");
        free(logits);
        b->vt->free(b);
    }
    mk_model_free(m);
}

static void test_errors(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", g_models);
    struct mk_model *m = load(path);
    if (!m) return;
    struct mk_backend *b = make_ref(m, 4);
    if (b) {
        struct mk_error err;
        int32_t tok = m->vocab.bos;
        mk_error_clear(&err);
        struct mk_step_cmd c = mk_test_step_cmd(tok, 1);
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_ERR_INVALID_ARG); /* skips position 0 */
        c = mk_test_step_cmd(512, 0);
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_ERR_INVALID_ARG);
        MK_CHECK(strstr(err.msg, "512") != NULL);
        c = mk_test_step_cmd(-1, 0);
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_ERR_INVALID_ARG);
        tok = m->vocab.bos;
        for (int i = 0; i < 4; i++) {
            c = mk_test_step_cmd(tok, i);
            MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_OK);
        }
        c = mk_test_step_cmd(tok, 4);
        mk_error_clear(&err);
        MK_CHECK(b->vt->step(b, &c, &tok, &err) == MK_ERR_CONTEXT_FULL);
        MK_CHECK(err.status == MK_ERR_CONTEXT_FULL && strstr(err.msg, "context full") && strstr(err.msg, "n_ctx = 4"));
        printf("context full message: %s\n", err.msg);
        b->vt->free(b);
    }
    mk_model_free(m);
}

int main(void) {
    g_models = mk_test_models_dir("stories260K-f32.gguf");
    if (!g_models) {
        printf("SKIP: models directory not found (set MK_MODELS_DIR); ref_test needs stories260K\n");
        return 0;
    }
    test_stories_golden();
    test_requantized();
    test_tiny_random();
    test_errors();
    return mk_test_finish("ref_test");
}
