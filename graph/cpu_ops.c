/* The program's opcodes on the CPU, one task at a time: the executor's twin of megakernel/ops/. */
#include <math.h>
#include <string.h>

#include "graph/cpu_exec.h"
#include "core/dtype.h"
#include "graph/sample.h"

/* Tokens in this step: chunk programs take cmd.n_tokens (the executor checked it against ubatch). */
static uint32_t mk_cpu_n_tokens(const struct mk_cpu_ctx *c) {
    return c->ubatch > 1 && c->cmd->n_tokens > 1 ? c->cmd->n_tokens : 1u;
}

/* Output rows (the last ones of the step) that reach the LM head and the sampler. */
static uint32_t mk_cpu_n_out(const struct mk_cpu_ctx *c) {
    uint32_t n = mk_cpu_n_tokens(c);
    return c->ubatch > 1 && c->cmd->n_out > 1 && c->cmd->n_out <= n ? c->cmd->n_out : 1u;
}

static const void *mk_cpu_row(const struct mk_weight_ref *w, uint32_t r) {
    return (const uint8_t *)(uintptr_t)w->ptr + (uint64_t)r * w->row_bytes;
}

/* xn = x / rms(x) * norm: every task recomputes it (n floats from cache) instead of waiting
 * for a separate norm op. */
static void mk_cpu_rmsnorm(const struct mk_weight_ref *norm, const float *x, uint32_t n, float eps, float *xn,
                           float *tmp) {
    float ss = 0.0f;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    mk_dequantize_row((enum mk_dtype)norm->dtype, mk_cpu_row(norm, 0), tmp, n);
    for (uint32_t i = 0; i < n; i++) xn[i] = x[i] * scale * tmp[i];
}

static float mk_cpu_dot(const struct mk_weight_ref *w, uint32_t r, const float *x) {
    return mk_dot_row((enum mk_dtype)w->dtype, mk_cpu_row(w, r), x, w->cols);
}

/* RoPE's angle for pair k, in double and in the same order of operations as the reference. */
static double mk_cpu_rope_theta(const struct mk_cpu_ctx *c, const struct mk_args_qkv *a, uint32_t k, int32_t pos) {
    double theta = (double)pos * (double)a->rope_scale * pow((double)a->rope_base, -2.0 * k / a->n_rot);
    if (a->rope_freqs != MK_NO_WEIGHT) theta /= (double)((const float *)(uintptr_t)c->weights[a->rope_freqs].ptr)[k];
    return theta;
}

/* out[i * out_stride] = row r of w . x[i * x_stride] for the N tokens of the step. Where there are
 * several, a row in another format is dequantized once for all of them and dotted as F32: the
 * quantized dots dequantize into the same eight lanes in the same order, so every sum is the one
 * mk_dot_row makes, bit for bit, without decoding the row N times. */
static void mk_cpu_dot_tokens(const struct mk_cpu_ctx *c, const struct mk_weight_ref *w, uint32_t r, const float *x,
                              uint64_t x_stride, uint32_t N, float *out, uint64_t out_stride) {
    if (N == 1 || w->dtype == MK_DTYPE_F32) {
        for (uint32_t i = 0; i < N; i++) out[i * out_stride] = mk_cpu_dot(w, r, x + i * x_stride);
        return;
    }
    mk_dequantize_row((enum mk_dtype)w->dtype, mk_cpu_row(w, r), c->row, w->cols);
    for (uint32_t i = 0; i < N; i++) out[i * out_stride] = mk_dot_row(MK_DTYPE_F32, c->row, x + i * x_stride, w->cols);
}

/* Whether a product of N token rows over w[0..n) takes its inputs rounded to bf16 (the program's
 * act_bf16_min: every matrix bf16, enough rows), as the GPU's products do. */
static bool mk_cpu_act_bf16(const struct mk_cpu_ctx *c, uint32_t N, const struct mk_weight_ref *const *w, int n) {
    if (!c->act_bf16_min || N < c->act_bf16_min) return false;
    for (int j = 0; j < n; j++)
        if (w[j]->dtype != MK_DTYPE_BF16) return false;
    return true;
}

static void mk_cpu_round_bf16(float *x, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] = mk_bf16_to_fp32(mk_fp32_to_bf16(x[i]));
}

static void mk_cpu_embed(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *w = &c->weights[in->weight[0]];
    const struct mk_args_embed *a = &in->args.embed;
    uint32_t lo = t * a->elems_per_task, hi = lo + a->elems_per_task > a->n_embd ? a->n_embd : lo + a->elems_per_task;
    float *row = c->scratch;
    const uint32_t N = mk_cpu_n_tokens(c);
    for (uint32_t i = 0; i < N; i++) {
        int32_t tok = c->cmd->token;
        if (in->buf[1] != MK_NO_BUF) memcpy(&tok, c->arena + in->buf[1] + i, sizeof tok);
        mk_dequantize_row((enum mk_dtype)w->dtype, mk_cpu_row(w, (uint32_t)tok), row, w->cols);
        memcpy(c->arena + in->buf[0] + (uint64_t)i * a->n_embd + lo, row + lo, (hi - lo) * sizeof(float));
    }
}

/* The f32 vector of weight idx (biases, q/k norms: the validator checks they are f32). */
static const float *mk_cpu_vec(const struct mk_cpu_ctx *c, uint32_t idx) {
    return (const float *)(uintptr_t)c->weights[idx].ptr;
}

/* Bias, per-head q/k norm and RoPE of rows [lo, hi) of [q; k; v], held in out. */
static void mk_cpu_qkv_epilogue(const struct mk_cpu_ctx *c, const struct mk_args_qkv *a, uint32_t lo, uint32_t hi,
                                float *out, int32_t pos) {
    const uint32_t q_dim = a->q_dim, kv_dim = a->kv_dim, hd = a->head_dim, n_rot = a->n_rot;
    if (a->bias != MK_NO_WEIGHT)
        for (uint32_t r = lo; r < hi; r++) {
            uint32_t part = r < q_dim ? 0 : r < q_dim + kv_dim ? 1 : 2;
            out[r - lo] += mk_cpu_vec(c, a->bias + part)[r - (part ? q_dim + (part - 1) * kv_dim : 0)];
        }
    /* With norms, tiles start on head boundaries (validated), so heads are whole here. */
    if (a->flags & MK_QKV_QK_NORM)
        for (uint32_t h0 = lo; h0 + hd <= hi && h0 < q_dim + kv_dim; h0 += hd) {
            const float *w = mk_cpu_vec(c, a->qk_norm + (h0 < q_dim ? 0 : 1));
            float *v = out + (h0 - lo), ss = 0.0f;
            for (uint32_t i = 0; i < hd; i++) ss += v[i] * v[i];
            float scale = 1.0f / sqrtf(ss / (float)hd + a->eps);
            for (uint32_t i = 0; i < hd; i++) v[i] = v[i] * scale * w[i];
        }
    /* Each pair lies in one tile: even tiles for adjacent pairs, whole heads for NEOX ones. */
    const bool neox = (a->flags & MK_QKV_NEOX) != 0;
    for (uint32_t r = lo; r < hi && r < q_dim + kv_dim; r++) {
        uint32_t dim = (r < q_dim ? r : r - q_dim) % hd;
        bool first = neox ? dim < n_rot / 2 : dim % 2 == 0 && dim < n_rot;
        if (!first) continue;
        uint32_t k = neox ? dim : dim / 2, partner = r - lo + (neox ? n_rot / 2 : 1);
        double theta = mk_cpu_rope_theta(c, a, k, pos);
        float cs = (float)cos(theta), sn = (float)sin(theta);
        float x0 = out[r - lo], x1 = out[partner];
        out[r - lo] = x0 * cs - x1 * sn;
        out[partner] = x0 * sn + x1 * cs;
    }
}

/* Element i of a KV cache, rounded to nearest even as the GPU's __float2half_rn when the cache is f16. */
static void mk_cpu_kv_store(const struct mk_cpu_ctx *c, void *cache, uint64_t i, float v) {
    if (c->kv_type == MK_KV_F16)
        ((uint16_t *)cache)[i] = mk_fp32_to_fp16(v);
    else
        ((float *)cache)[i] = v;
}

static void mk_cpu_qkv(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *wq = &c->weights[in->weight[1]], *wk = &c->weights[in->weight[2]],
                               *wv = &c->weights[in->weight[3]];
    const struct mk_args_qkv *a = &in->args.qkv;
    uint32_t n = wq->cols, q_dim = a->q_dim, kv_dim = a->kv_dim, layer = a->layer;
    uint32_t lo, count;
    mk_qkv_task_rows(a, t, &lo, &count);
    if (count == 0) return;
    const uint32_t hi = lo + count;
    const uint32_t N = mk_cpu_n_tokens(c), rpt = a->rows_per_task;
    float *tmp = c->scratch, *xn = c->scratch + n, *out = xn + (uint64_t)N * n; /* xn (token, n), out (token, rpt) */
    for (uint32_t i = 0; i < N; i++)
        mk_cpu_rmsnorm(&c->weights[in->weight[0]], c->arena + in->buf[0] + (uint64_t)i * n, n, a->eps,
                       xn + (uint64_t)i * n, tmp);
    const struct mk_weight_ref *const all[3] = { wq, wk, wv };
    if (mk_cpu_act_bf16(c, N, all, 3)) mk_cpu_round_bf16(xn, (uint64_t)N * n);
    /* Each weight row is read once for all tokens of the step (it stays in cache across them). */
    for (uint32_t r = lo; r < hi; r++) {
        const struct mk_weight_ref *w = r < q_dim ? wq : r < q_dim + kv_dim ? wk : wv;
        uint32_t wr = r < q_dim ? r : r < q_dim + kv_dim ? r - q_dim : r - q_dim - kv_dim;
        mk_cpu_dot_tokens(c, w, wr, xn, n, N, out + r - lo, rpt);
    }
    for (uint32_t i = 0; i < N; i++) {
        int32_t pos = c->cmd->pos + (int32_t)i;
        float *o = out + (uint64_t)i * rpt; /* token i's rows [lo, hi) */
        uint64_t kv_row = ((uint64_t)layer * c->n_ctx + (uint64_t)pos) * kv_dim;
        mk_cpu_qkv_epilogue(c, a, lo, hi, o, pos);
        for (uint32_t r = lo; r < hi; r++) {
            if (r < q_dim)
                c->arena[in->buf[1] + (uint64_t)i * q_dim + r] = o[r - lo];
            else if (r < q_dim + kv_dim)
                mk_cpu_kv_store(c, c->k_cache, kv_row + r - q_dim, o[r - lo]);
            else
                mk_cpu_kv_store(c, c->v_cache, kv_row + r - q_dim - kv_dim, o[r - lo]);
        }
    }
}

/* n elements of a KV cache from element i on, widened to f32 (the cache's own floats as they are). */
static const float *mk_cpu_kv_row(const struct mk_cpu_ctx *c, const void *cache, uint64_t i, uint32_t n, float *buf) {
    if (c->kv_type == MK_KV_F32) return (const float *)cache + i;
    const uint16_t *h = (const uint16_t *)cache + i;
    for (uint32_t d = 0; d < n; d++) buf[d] = c->f16[h[d]];
    return buf;
}

/* Attention of g query heads (head i's q at q + i hd) of KV head kvh over split b of the layer's
 * positions up to pos, as (o[hd], m, l) at o + i o_stride. Each K and V row is widened once for
 * all g heads; every head's arithmetic is the same as alone, in the same order. */
static void mk_cpu_attn_block(const struct mk_cpu_ctx *c, const struct mk_args_attn *a, const float *q, uint32_t g,
                              uint32_t kvh, uint32_t b, int32_t pos, float *o, uint64_t o_stride) {
    uint32_t layer = a->layer, hd = a->head_dim, kv_dim = a->n_head_kv * hd, lo, hi;
    mk_attn_span((uint32_t)pos, a->block, a->n_blocks, a->solo, b, &lo, &hi);
    const float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t i = 0; i < g; i++) {
        float *oi = o + i * o_stride;
        for (uint32_t d = 0; d < hd; d++) oi[d] = 0.0f;
        oi[hd] = -INFINITY; /* the running maximum m, then the sum l */
        oi[hd + 1] = 0.0f;
    }
    for (uint32_t j = lo; j < hi; j++) {
        const uint64_t at = ((uint64_t)layer * c->n_ctx + (uint64_t)j) * kv_dim + (uint64_t)kvh * hd;
        const float *k = mk_cpu_kv_row(c, c->k_cache, at, hd, c->row);
        const float *v = mk_cpu_kv_row(c, c->v_cache, at, hd, c->row + hd);
        for (uint32_t i = 0; i < g; i++) {
            const float *qi = q + (uint64_t)i * hd;
            float *oi = o + i * o_stride, m = oi[hd], l = oi[hd + 1], s = 0.0f;
            for (uint32_t d = 0; d < hd; d++) s += qi[d] * k[d];
            s *= scale;
            if (s > m) {
                /* Rescale what has been summed so far to the new maximum. */
                float r = expf(m - s);
                l *= r;
                for (uint32_t d = 0; d < hd; d++) oi[d] *= r;
                m = s;
            }
            float e = expf(s - m);
            l += e;
            for (uint32_t d = 0; d < hd; d++) oi[d] += e * v[d];
            oi[hd] = m;
            oi[hd + 1] = l;
        }
    }
}

static void mk_cpu_combine_head(const float *part, uint32_t nb, uint32_t hd, float *out);

/* Task t: split t % nb for each query head of KV head t / nb. */
static void mk_cpu_attn_partial(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_args_attn *a = &in->args.attn;
    uint32_t nb = a->n_blocks, hd = a->head_dim, g = a->n_head / a->n_head_kv, kvh = t / nb, b = t % nb;
    mk_cpu_attn_block(c, a, c->arena + in->buf[0] + (uint64_t)kvh * g * hd, g, kvh, b, c->cmd->pos,
                      c->arena + in->buf[1] + ((uint64_t)kvh * g * nb + b) * (hd + 2), (uint64_t)nb * (hd + 2));
    if (!a->arrive) return;
    /* The KV head's last split merges its query heads (abi.h): the release orders this task's
     * partials before its count, the acquire the others' before the merge. */
    uint32_t *count = &c->counters[a->arrive + kvh];
    if (__atomic_add_fetch(count, 1u, __ATOMIC_ACQ_REL) != nb) return;
    __atomic_store_n(count, 0u, __ATOMIC_RELAXED);
    for (uint32_t h = kvh * g; h < (kvh + 1) * g; h++)
        mk_cpu_combine_head(c->arena + in->buf[1] + (uint64_t)h * nb * (hd + 2), nb, hd,
                            c->arena + in->buf[2] + (uint64_t)h * hd);
}

/* Merges the first nb sequence blocks of head h's partials into out (hd floats). */
static void mk_cpu_combine_head(const float *part, uint32_t nb, uint32_t hd, float *out) {
    float M = -INFINITY;
    for (uint32_t b = 0; b < nb; b++)
        if (part[b * (hd + 2) + hd] > M) M = part[b * (hd + 2) + hd];
    float L = 0.0f;
    for (uint32_t d = 0; d < hd; d++) out[d] = 0.0f;
    for (uint32_t b = 0; b < nb; b++) {
        const float *pb = part + b * (hd + 2);
        if (pb[hd + 1] == 0.0f) continue;
        float e = expf(pb[hd] - M);
        L += pb[hd + 1] * e;
        for (uint32_t d = 0; d < hd; d++) out[d] += pb[d] * e;
    }
    for (uint32_t d = 0; d < hd; d++) out[d] /= L;
}

static void mk_cpu_attn_combine(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t h) {
    uint32_t nb = in->args.combine.n_blocks, hd = in->args.combine.head_dim;
    mk_cpu_combine_head(c->arena + in->buf[0] + (uint64_t)h * nb * (hd + 2), nb, hd,
                        c->arena + in->buf[1] + (uint64_t)h * hd);
}

/* Head t for every token of the step: the blocks of ATTN_PARTIAL, merged as ATTN_COMBINE merges
 * them, so that each row equals a one-token step at its position bit for bit. */
static void mk_cpu_attn_chunk(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t h) {
    const struct mk_args_attn *a = &in->args.attn;
    const uint32_t nb = a->n_blocks, bs = a->block, hd = a->head_dim, row = a->n_head * hd, N = mk_cpu_n_tokens(c);
    const uint32_t kvh = h / (a->n_head / a->n_head_kv);
    float *part = c->scratch; /* (n_blocks, head_dim + 2) */
    for (uint32_t i = 0; i < N; i++) {
        int32_t pos = c->cmd->pos + (int32_t)i;
        uint32_t live = mk_attn_live((uint32_t)pos, bs, nb, a->solo);
        const float *q = c->arena + in->buf[0] + (uint64_t)i * row + (uint64_t)h * hd;
        for (uint32_t b = 0; b < live; b++)
            mk_cpu_attn_block(c, a, q, 1, kvh, b, pos, part + (uint64_t)b * (hd + 2), 0);
        mk_cpu_combine_head(part, live, hd, c->arena + in->buf[1] + (uint64_t)i * row + (uint64_t)h * hd);
    }
}

static void mk_cpu_attn_output(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *w = &c->weights[in->weight[0]];
    const struct mk_args_attn_out *a = &in->args.attn_out;
    uint32_t nb = a->n_blocks, bs = a->block, nh = a->n_head, hd = a->head_dim;
    /* Splits past the position are empty: only the live ones count. */
    uint32_t live = mk_attn_live((uint32_t)c->cmd->pos, bs, nb, a->solo);
    float *att = c->scratch;
    for (uint32_t h = 0; h < nh; h++)
        mk_cpu_combine_head(c->arena + in->buf[0] + (uint64_t)h * nb * (hd + 2), live, hd, att + (uint64_t)h * hd);
    uint32_t rpt = a->rows_per_task, lo = t * rpt, hi = lo + rpt > w->rows ? w->rows : lo + rpt;
    float *y = c->arena + in->buf[1];
    for (uint32_t r = lo; r < hi; r++) y[r] += mk_cpu_dot(w, r, att);
}

static void mk_cpu_matvec_residual(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *w = &c->weights[in->weight[0]];
    uint32_t rpt = in->args.matvec.rows_per_task, lo = t * rpt, hi = lo + rpt > w->rows ? w->rows : lo + rpt;
    const float *x = c->arena + in->buf[0]; /* (token, cols) */
    float *y = c->arena + in->buf[1];       /* (token, rows) */
    const uint32_t N = mk_cpu_n_tokens(c);
    float *dots = c->scratch; /* (token) */
    if (mk_cpu_act_bf16(c, N, &w, 1)) {
        float *xr = c->scratch + c->ubatch; /* (token, cols): fits beside dots (mk_cpu_scratch_floats) */
        memcpy(xr, x, (size_t)N * w->cols * sizeof *xr);
        mk_cpu_round_bf16(xr, (uint64_t)N * w->cols);
        x = xr;
    }
    for (uint32_t r = lo; r < hi; r++) {
        mk_cpu_dot_tokens(c, w, r, x, w->cols, N, dots, 1);
        for (uint32_t i = 0; i < N; i++) y[(uint64_t)i * w->rows + r] += dots[i];
    }
}

static void mk_cpu_gate_up(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *wg = &c->weights[in->weight[1]], *wu = &c->weights[in->weight[2]];
    const struct mk_args_norm_matvec *a = &in->args.gate_up;
    uint32_t n = wg->cols, lo = t * a->rows_per_task,
             hi = lo + a->rows_per_task > wg->rows ? wg->rows : lo + a->rows_per_task;
    const uint32_t N = mk_cpu_n_tokens(c);
    float *tmp = c->scratch, *xn = c->scratch + n; /* xn (token, n) */
    for (uint32_t i = 0; i < N; i++)
        mk_cpu_rmsnorm(&c->weights[in->weight[0]], c->arena + in->buf[0] + (uint64_t)i * n, n, a->eps,
                       xn + (uint64_t)i * n, tmp);
    const struct mk_weight_ref *const both[2] = { wg, wu };
    if (mk_cpu_act_bf16(c, N, both, 2)) mk_cpu_round_bf16(xn, (uint64_t)N * n);
    float *g = xn + (uint64_t)N * n, *u = g + N; /* (token) each */
    for (uint32_t r = lo; r < hi; r++) {
        mk_cpu_dot_tokens(c, wg, r, xn, n, N, g, 1);
        mk_cpu_dot_tokens(c, wu, r, xn, n, N, u, 1);
        for (uint32_t i = 0; i < N; i++)
            c->arena[in->buf[1] + (uint64_t)i * wg->rows + r] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

static void mk_cpu_lm_head(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *w = &c->weights[in->weight[1]];
    const struct mk_args_norm_matvec *a = &in->args.lm_head;
    uint32_t n = w->cols, lo = t * a->rows_per_task,
             hi = lo + a->rows_per_task > w->rows ? w->rows : lo + a->rows_per_task;
    const uint32_t n_out = mk_cpu_n_out(c), first = mk_cpu_n_tokens(c) - n_out;
    /* xn (output row, n), then each row's best logit and its index */
    float *tmp = c->scratch, *xn = c->scratch + n, *best = xn + (uint64_t)n_out * n;
    uint32_t *best_i = (uint32_t *)(best + n_out);
    for (uint32_t j = 0; j < n_out; j++) {
        mk_cpu_rmsnorm(&c->weights[in->weight[0]], c->arena + in->buf[0] + (uint64_t)(first + j) * n, n, a->eps,
                       xn + (uint64_t)j * n, tmp);
        best[j] = -INFINITY;
        best_i[j] = lo;
    }
    if (mk_cpu_act_bf16(c, n_out, &w, 1)) mk_cpu_round_bf16(xn, (uint64_t)n_out * n);
    for (uint32_t r = lo; r < hi; r++) {
        mk_cpu_dot_tokens(c, w, r, xn, n, n_out, c->arena + in->buf[1] + r, w->rows);
        for (uint32_t j = 0; j < n_out; j++) {
            float v = c->arena[in->buf[1] + (uint64_t)j * w->rows + r];
            if (v > best[j]) best[j] = v, best_i[j] = r;
        }
    }
    for (uint32_t j = 0; j < n_out; j++) {
        float *tile = &c->arena[in->buf[2] + 2 * ((uint64_t)j * in->n_tasks + t)];
        tile[0] = best[j];
        memcpy(&tile[1], &best_i[j], sizeof best_i[j]);
    }
}

/* The token of output row j (logits at buf1 + j*vocab, tile maxima at buf2 + 2*j*n_tiles). */
static int32_t mk_cpu_sample_row(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t j) {
    const struct mk_args_sample *a = &in->args.sample;
    if (c->cmd->temperature > 0.0f) {
        /* The draw depends on the row's own position, as in a one-token step there. */
        struct mk_step_cmd row = *c->cmd;
        row.pos += (int32_t)(mk_cpu_n_tokens(c) - mk_cpu_n_out(c) + j);
        return mk_sample_token(c->arena + in->buf[1] + (uint64_t)j * a->vocab, (int)a->vocab, &row);
    }
    const float *tiles = c->arena + in->buf[2] + 2ull * j * a->n_tiles;
    float best = -INFINITY;
    uint32_t best_i = 0;
    for (uint32_t t = 0; t < a->n_tiles; t++) {
        float v = tiles[2 * t];
        uint32_t idx;
        memcpy(&idx, &tiles[2 * t + 1], sizeof idx);
        /* Tiles are in row order, so strict > keeps the lowest index among equal maxima. */
        if (v > best) best = v, best_i = idx;
    }
    return (int32_t)best_i;
}

static int32_t mk_cpu_sample(const struct mk_cpu_ctx *c, const struct mk_instr *in) {
    const uint32_t n_out = mk_cpu_n_out(c);
    int32_t tok = -1;
    for (uint32_t j = 0; j < n_out; j++) {
        tok = mk_cpu_sample_row(c, in, j);
        if (in->buf[3] != MK_NO_BUF) memcpy(c->arena + in->buf[3] + j, &tok, sizeof tok);
    }
    return tok;
}

int mk_cpu_run_task(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t, int32_t *sampled) {
    switch (in->op) {
    case MK_OP_NOP: return 0;
    case MK_OP_EMBED: mk_cpu_embed(c, in, t); return 0;
    case MK_OP_MATVEC_RESIDUAL: mk_cpu_matvec_residual(c, in, t); return 0;
    case MK_OP_NORM_QKV_ROPE: mk_cpu_qkv(c, in, t); return 0;
    case MK_OP_ATTN_PARTIAL: mk_cpu_attn_partial(c, in, t); return 0;
    case MK_OP_ATTN_COMBINE: mk_cpu_attn_combine(c, in, t); return 0;
    case MK_OP_NORM_GATE_UP_SILU: mk_cpu_gate_up(c, in, t); return 0;
    case MK_OP_NORM_LM_HEAD: mk_cpu_lm_head(c, in, t); return 0;
    case MK_OP_SAMPLE: *sampled = mk_cpu_sample(c, in); return 0;
    case MK_OP_BARRIER: return 0;
    case MK_OP_ATTN_OUTPUT: mk_cpu_attn_output(c, in, t); return 0;
    case MK_OP_ATTN_CHUNK: mk_cpu_attn_chunk(c, in, t); return 0;
    }
    return -1;
}
