/* The reference decode step: a plain, obviously correct forward pass that the fast executors are checked against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "graph/sample.h"

struct mk_ref {
    struct mk_backend base;
    const struct mk_model *m;
    uint32_t n_filled;  /* positions [0, n_filled) of the KV cache hold keys and values */
    float *x;           /* (n_embd) residual stream */
    float *xn;          /* (n_embd) normed activations */
    float *norm_w;      /* (n_embd) a norm weight as floats */
    float *q;           /* (n_head * head_dim) */
    float *att_out;     /* (n_head * head_dim) */
    float *score;       /* (n_ctx) */
    float *gate;        /* (n_ff) */
    float *up;          /* (n_ff) */
    float *logits;      /* (n_vocab) */
    float *key_cache;   /* (layer, ctx, kv_dim) */
    float *value_cache; /* (layer, ctx, kv_dim) */
    bool kv_f16;        /* k and v go through f16 on their way into the cache, as in an f16 cache */
    int has_logits;
};

static uint64_t mk_ref_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* y[r] = W[r] . x for every row r of W. */
static void mk_ref_matvec(const struct mk_weight *w, const float *x, float *y) {
    const uint8_t *base = (const uint8_t *)w->data;
    for (int64_t r = 0; r < w->rows; r++) y[r] = mk_dot_row(w->type, base + (uint64_t)r * w->row_bytes, x, w->cols);
}

/* out = x / sqrt(mean(x^2) + eps) * w; w is dequantized into wbuf first (norms may be stored in any format). */
static void mk_ref_rmsnorm(const struct mk_weight *w, const float *x, float *out, float *wbuf, int64_t n, float eps) {
    mk_dequantize_row(w->type, w->data, wbuf, n);
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * wbuf[i];
}

/* Rotates pair k < n_rot/2 of each head by theta = pos * freq_scale * base^(-2k/n_rot) / ff[k]: the
 * pair is (2k, 2k+1) or, NEOX-style, (k, k + n_rot/2). ff are Llama 3's frequency divisors (NULL:
 * all 1). The angle is computed in double so that long contexts do not lose precision in pos * freq. */
static void mk_ref_rope(float *v, uint32_t n_heads, uint32_t head_dim, int32_t pos, const struct mk_llama_config *c,
                        const float *ff) {
    const uint32_t n_rot = c->n_rot;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *hv = v + (size_t)h * head_dim;
        for (uint32_t k = 0; k < n_rot / 2; k++) {
            double theta = (double)pos * (double)c->rope_freq_scale * pow((double)c->rope_base, -2.0 * k / n_rot);
            if (ff) theta /= (double)ff[k];
            float cs = (float)cos(theta), sn = (float)sin(theta);
            uint32_t i0 = c->rope_neox ? k : 2 * k, i1 = c->rope_neox ? k + n_rot / 2 : 2 * k + 1;
            float x0 = hv[i0], x1 = hv[i1];
            hv[i0] = x0 * cs - x1 * sn;
            hv[i1] = x0 * sn + x1 * cs;
        }
    }
}

/* v += b, for an optional bias (f32, as the model checks). */
static void mk_ref_add_bias(const struct mk_weight *b, float *v) {
    if (!b->data) return;
    const float *bf = (const float *)b->data;
    for (int64_t i = 0; i < b->cols; i++) v[i] += bf[i];
}

/* qwen3's per-head RMSNorm of q or k: each head of head_dim scaled by its own rms and the shared weight. */
static void mk_ref_head_norm(const struct mk_weight *w, float *v, uint32_t n_heads, uint32_t head_dim, float *wbuf,
                             float eps) {
    for (uint32_t h = 0; h < n_heads; h++)
        mk_ref_rmsnorm(w, v + (size_t)h * head_dim, v + (size_t)h * head_dim, wbuf, head_dim, eps);
}

static void mk_ref_forward(struct mk_ref *r, int32_t token, int32_t pos) {
    const struct mk_model *m = r->m;
    const struct mk_llama_config *c = &m->cfg;
    const int64_t n_embd = c->n_embd, n_ff = c->n_ff;
    const uint32_t hd = c->head_dim;
    const size_t kv_dim = (size_t)c->n_head_kv * hd;
    const uint32_t group = c->n_head / c->n_head_kv;
    const float inv_sqrt_hd = 1.0f / sqrtf((float)hd);

    mk_dequantize_row(m->token_embd.type,
                      (const uint8_t *)m->token_embd.data + (uint64_t)token * m->token_embd.row_bytes, r->x, n_embd);

    for (uint32_t l = 0; l < c->n_layer; l++) {
        const struct mk_layer_weights *lw = &m->layers[l];
        float *kc = r->key_cache + ((size_t)l * r->base.n_ctx) * kv_dim;   /* (ctx, kv_dim) of this layer */
        float *vc = r->value_cache + ((size_t)l * r->base.n_ctx) * kv_dim; /* (ctx, kv_dim) */
        float *k_here = kc + (size_t)pos * kv_dim;
        float *v_here = vc + (size_t)pos * kv_dim;

        mk_ref_rmsnorm(&lw->attn_norm, r->x, r->xn, r->norm_w, n_embd, c->rms_eps);
        mk_ref_matvec(&lw->wq, r->xn, r->q);
        mk_ref_matvec(&lw->wk, r->xn, k_here);
        mk_ref_matvec(&lw->wv, r->xn, v_here);
        mk_ref_add_bias(&lw->bq, r->q);
        mk_ref_add_bias(&lw->bk, k_here);
        mk_ref_add_bias(&lw->bv, v_here);
        if (c->has_qk_norm) {
            mk_ref_head_norm(&lw->q_norm, r->q, c->n_head, hd, r->norm_w, c->rms_eps);
            mk_ref_head_norm(&lw->k_norm, k_here, c->n_head_kv, hd, r->norm_w, c->rms_eps);
        }
        const float *ff = c->has_rope_freqs ? (const float *)m->rope_freqs.data : NULL;
        mk_ref_rope(r->q, c->n_head, hd, pos, c, ff);
        mk_ref_rope(k_here, c->n_head_kv, hd, pos, c, ff);
        if (r->kv_f16)
            for (size_t i = 0; i < kv_dim; i++) {
                k_here[i] = mk_fp16_to_fp32(mk_fp32_to_fp16(k_here[i]));
                v_here[i] = mk_fp16_to_fp32(mk_fp32_to_fp16(v_here[i]));
            }

        for (uint32_t h = 0; h < c->n_head; h++) {
            const float *qh = r->q + (size_t)h * hd;
            const size_t kv_off = (size_t)(h / group) * hd;
            float mx = -INFINITY;
            for (int32_t t = 0; t <= pos; t++) {
                const float *kt = kc + (size_t)t * kv_dim + kv_off;
                float s = 0.0f;
                for (uint32_t i = 0; i < hd; i++) s += qh[i] * kt[i];
                r->score[t] = s * inv_sqrt_hd;
                if (r->score[t] > mx) mx = r->score[t];
            }
            float sum = 0.0f;
            for (int32_t t = 0; t <= pos; t++) {
                r->score[t] = expf(r->score[t] - mx);
                sum += r->score[t];
            }
            float *oh = r->att_out + (size_t)h * hd;
            memset(oh, 0, hd * sizeof *oh);
            for (int32_t t = 0; t <= pos; t++) {
                const float *vt = vc + (size_t)t * kv_dim + kv_off;
                float a = r->score[t] / sum;
                for (uint32_t i = 0; i < hd; i++) oh[i] += a * vt[i];
            }
        }
        /* Output projection straight into the residual: x += Wo att_out. */
        for (int64_t i = 0; i < n_embd; i++)
            r->x[i] += mk_dot_row(lw->wo.type, (const uint8_t *)lw->wo.data + (uint64_t)i * lw->wo.row_bytes,
                                  r->att_out, lw->wo.cols);

        mk_ref_rmsnorm(&lw->ffn_norm, r->x, r->xn, r->norm_w, n_embd, c->rms_eps);
        mk_ref_matvec(&lw->w_gate, r->xn, r->gate);
        mk_ref_matvec(&lw->w_up, r->xn, r->up);
        for (int64_t i = 0; i < n_ff; i++) {
            float g = r->gate[i];
            r->gate[i] = g / (1.0f + expf(-g)) * r->up[i];
        }
        for (int64_t i = 0; i < n_embd; i++)
            r->x[i] +=
                mk_dot_row(lw->w_down.type, (const uint8_t *)lw->w_down.data + (uint64_t)i * lw->w_down.row_bytes,
                           r->gate, lw->w_down.cols);
    }

    mk_ref_rmsnorm(&m->output_norm, r->x, r->xn, r->norm_w, n_embd, c->rms_eps);
    mk_ref_matvec(&m->output, r->xn, r->logits);
}

/* Every call is one step: the reference has no persistent loop, so cmd->cmd is not consulted. */
static enum mk_status mk_ref_step(struct mk_backend *b, const struct mk_step_cmd *cmd, int32_t *out_token,
                                  struct mk_error *err) {
    struct mk_ref *r = (struct mk_ref *)b;
    const struct mk_llama_config *c = &r->m->cfg;
    if (cmd->pos < 0) return mk_error_set(err, MK_ERR_INVALID_ARG, "ref: step position %d is negative", (int)cmd->pos);
    if ((uint32_t)cmd->pos >= b->n_ctx)
        return mk_error_set(err, MK_ERR_CONTEXT_FULL,
                            "ref: context full: position %d does not fit in the KV cache of n_ctx = %u tokens",
                            (int)cmd->pos, (unsigned)b->n_ctx);
    if ((uint32_t)cmd->pos > r->n_filled)
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "ref: step position %d skips positions: only [0, %u) of the KV cache are filled",
                            (int)cmd->pos, (unsigned)r->n_filled);
    if (cmd->token < 0 || (uint32_t)cmd->token >= c->n_vocab)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "ref: token %d is outside the vocabulary [0, %u)", (int)cmd->token,
                            (unsigned)c->n_vocab);
    uint64_t t0 = mk_ref_now_ns();
    mk_ref_forward(r, cmd->token, cmd->pos);
    r->n_filled = (uint32_t)cmd->pos + 1;
    r->has_logits = 1;
    int32_t tok = mk_sample_token(r->logits, (int)c->n_vocab, cmd);
    b->last_step_ns = mk_ref_now_ns() - t0;
    if (tok < 0 || (uint32_t)tok >= c->n_vocab)
        return mk_error_set(err, MK_ERR_INTERNAL, "ref: sampler returned token %d for a vocabulary of %u", (int)tok,
                            (unsigned)c->n_vocab);
    *out_token = tok;
    return MK_OK;
}

static enum mk_status mk_ref_logits(struct mk_backend *b, float *out, struct mk_error *err) {
    struct mk_ref *r = (struct mk_ref *)b;
    if (!r->has_logits)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "ref: no step has run since the last reset: no logits");
    memcpy(out, r->logits, (size_t)r->m->cfg.n_vocab * sizeof *out);
    return MK_OK;
}

static enum mk_status mk_ref_reset(struct mk_backend *b, struct mk_error *err) {
    struct mk_ref *r = (struct mk_ref *)b;
    r->n_filled = 0;
    r->has_logits = 0;
    return MK_OK;
}

static void mk_ref_free(struct mk_backend *b) {
    struct mk_ref *r = (struct mk_ref *)b;
    if (!r) return;
    free(r->x);
    free(r->xn);
    free(r->norm_w);
    free(r->q);
    free(r->att_out);
    free(r->score);
    free(r->gate);
    free(r->up);
    free(r->logits);
    mk_mem_free_big(r->key_cache);
    mk_mem_free_big(r->value_cache);
    free(r);
}

static const struct mk_backend_vtbl mk_ref_vtbl = {
    .name = "ref",
    .step = mk_ref_step,
    .logits = mk_ref_logits,
    .reset = mk_ref_reset,
    .free = mk_ref_free,
};

static float *mk_ref_alloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

enum mk_status mk_backend_create_ref(const struct mk_model *m, const struct mk_backend_params *p,
                                     struct mk_backend **out, struct mk_error *err) {
    *out = NULL;
    if (m->vocab_only)
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "ref: the model file holds only a vocabulary, no weights to run");
    const struct mk_llama_config *c = &m->cfg;
    if (c->n_head == 0 || c->n_head_kv == 0 || c->n_head % c->n_head_kv != 0 || c->n_rot > c->head_dim ||
        c->n_rot % 2 != 0)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "ref: n_head = %u, n_head_kv = %u, head_dim = %u, n_rot = %u is not a shape it runs",
                            (unsigned)c->n_head, (unsigned)c->n_head_kv, (unsigned)c->head_dim, (unsigned)c->n_rot);
    uint32_t n_ctx = p->n_ctx ? p->n_ctx : c->n_ctx_train;
    if (n_ctx == 0 || n_ctx > (uint32_t)INT32_MAX)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "ref: n_ctx = %u is out of range", (unsigned)n_ctx);
    struct mk_ref *r = calloc(1, sizeof *r);
    if (!r) return mk_error_set(err, MK_ERR_NOMEM, "ref: out of memory");
    r->base.vt = &mk_ref_vtbl;
    r->base.kind = MK_BACKEND_REF;
    r->base.n_ctx = n_ctx;
    r->m = m;
    r->kv_f16 = p->kv_type == MK_KV_F16;
    const size_t q_dim = (size_t)c->n_head * c->head_dim;
    const size_t kv_dim = (size_t)c->n_head_kv * c->head_dim;
    const size_t cache = (size_t)c->n_layer * n_ctx * kv_dim;
    r->x = mk_ref_alloc(c->n_embd);
    r->xn = mk_ref_alloc(c->n_embd);
    r->norm_w = mk_ref_alloc(c->n_embd > c->head_dim ? c->n_embd : c->head_dim);
    r->q = mk_ref_alloc(q_dim);
    r->att_out = mk_ref_alloc(q_dim);
    r->score = mk_ref_alloc(n_ctx);
    r->gate = mk_ref_alloc(c->n_ff);
    r->up = mk_ref_alloc(c->n_ff);
    r->logits = mk_ref_alloc(c->n_vocab);
    r->key_cache = mk_mem_alloc_big(cache * sizeof(float));
    r->value_cache = mk_mem_alloc_big(cache * sizeof(float));
    if (!r->x || !r->xn || !r->norm_w || !r->q || !r->att_out || !r->score || !r->gate || !r->up || !r->logits ||
        !r->key_cache || !r->value_cache)
        goto fail;
    *out = &r->base;
    return MK_OK;
fail:
    mk_ref_free(&r->base);
    return mk_error_set(err, MK_ERR_NOMEM, "ref: out of memory for a KV cache of %u layers x %u positions x %zu floats",
                        (unsigned)c->n_layer, (unsigned)n_ctx, kv_dim);
}
