/* Tests for runtime/gen: each dtype of the tiny preset, and each requantization, against the generator's floats. */
/*
 * Error bounds, dequantized file weight vs mk_gen_tensor_values. RMS bounds are tests/dtype_test.c's
 * (its quantizers are byte-identical to llama.cpp's); the q8_0 block bound is the analytic one
 * (d/2 plus the fp16 rounding of d); the q6_k and q4_k block bounds sit above the worst block seen
 * here over about 13,000 blocks per format (q6_k 0.0169, q4_k 0.102).
 *
 *   type  | per element                         | per tensor RMS(err)/RMS(x) | per block max|err|/max|x|
 *   ------+-------------------------------------+----------------------------+--------------------------
 *   f32   | exact                               | 0                          | 0
 *   f16   | <= max(2^-11 |x|, 2^-25) (half ulp) | -                          | -
 *   bf16  | <= 2^-8 |x| (half ulp)              | -                          | -
 *   q8_0  | -                                   | 0.0065                     | 0.0045 (32-element blocks)
 *   q6_k  | -                                   | 0.021                      | 0.025  (256-element blocks)
 *   q4_k  | -                                   | 0.085                      | 0.12   (256-element blocks)
 *
 * Norm weights are f32 in every file, so exact.
 */
#include "core/gen.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gguf.h"
#include "core/model.h"
#include "tests/test_util.h"

#define SEED 7u

static char tmp_dir[512];

static const char *tmp_path(const char *name) {
    static char bufs[4][700];
    static int k;
    char *p = bufs[k++ % 4];
    snprintf(p, 700, "%s/%s", tmp_dir, name);
    return p;
}

static const char *const dtypes[] = { "f32",  "f16",  "bf16", "q8_0", "q4_k", "q6_k", "q4_k_m", "q4_0",
                                      "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs" };
/* Under ThreadSanitizer (unoptimized, every access instrumented; the whole list took over the
 * 300 s limit) the first seven formats cover the generator's threads and the files the later checks
 * read; the other builds run them all. */
#if defined(__SANITIZE_THREAD__)
#define N_DTYPES 7u
#else
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])
#endif

/* Worst errors seen per format, printed at the end. */
struct err_stats {
    double rms_rel, block_rel, elem_rel;
};
static struct err_stats worst[32];

/* Compares weight w (dequantized) with the generator's values for the same tensor. */
static void check_weight(const struct mk_weight *w, uint64_t seed) {
    const int64_t rows = w->rows, cols = w->cols;
    float *x = malloc((size_t)cols * sizeof *x), *y = malloc((size_t)cols * sizeof *y);
    const struct mk_dtype_info *info = mk_dtype_get(w->type);
    const int64_t blk = info->block_size > 1 ? info->block_size : 1;
    const int failures_before = mk_test_failures;
    double se = 0, sx = 0, block_rel = 0, elem_bad = 0;
    bool exact = true;
    for (int64_t r = 0; r < rows; r++) {
        mk_gen_tensor_values(seed, w->name, cols, (uint64_t)(r * cols), (uint64_t)cols, x);
        mk_dequantize_row(w->type, (const uint8_t *)w->data + (uint64_t)r * w->row_bytes, y, cols);
        for (int64_t b = 0; b < cols; b += blk) {
            double emax = 0, xmax = 0;
            for (int64_t i = b; i < b + blk; i++) {
                double e = fabs((double)y[i] - x[i]);
                se += e * e;
                sx += (double)x[i] * x[i];
                emax = fmax(emax, e);
                xmax = fmax(xmax, fabs(x[i]));
                if (e != 0) exact = false;
                double lim = w->type == MK_DTYPE_F16    ? fmax(ldexp(fabs(x[i]), -11), ldexp(1.0, -25))
                             : w->type == MK_DTYPE_BF16 ? ldexp(fabs(x[i]), -8)
                                                        : INFINITY;
                if (e > lim) elem_bad++;
            }
            if (xmax > 0) block_rel = fmax(block_rel, emax / xmax);
        }
    }
    double rms_rel = sx > 0 ? sqrt(se / sx) : 0;
    struct err_stats *ws = &worst[w->type % 32];
    ws->rms_rel = fmax(ws->rms_rel, rms_rel);
    ws->block_rel = fmax(ws->block_rel, block_rel);
    switch (w->type) {
    case MK_DTYPE_F32: MK_CHECK(exact); break;
    case MK_DTYPE_F16:
    case MK_DTYPE_BF16: MK_CHECK(elem_bad == 0); break;
    case MK_DTYPE_Q8_0: MK_CHECK(rms_rel <= 0.0065 && block_rel <= 0.0045); break;
    case MK_DTYPE_Q6_K: MK_CHECK(rms_rel <= 0.021 && block_rel <= 0.025); break;
    case MK_DTYPE_Q4_K: MK_CHECK(rms_rel <= 0.085 && block_rel <= 0.12); break;
    /* tests/dtype_test.c's Gaussian bounds, block bounds about 1.2x for these other values */
    case MK_DTYPE_Q4_0: MK_CHECK(rms_rel <= 0.10 && block_rel <= 0.17); break;
    case MK_DTYPE_Q4_1: MK_CHECK(rms_rel <= 0.092 && block_rel <= 0.095); break;
    case MK_DTYPE_Q5_0: MK_CHECK(rms_rel <= 0.05 && block_rel <= 0.087); break;
    case MK_DTYPE_Q5_1: MK_CHECK(rms_rel <= 0.044 && block_rel <= 0.046); break;
    case MK_DTYPE_Q2_K: MK_CHECK(rms_rel <= 0.35 && block_rel <= 0.5); break;
    case MK_DTYPE_Q3_K: MK_CHECK(rms_rel <= 0.18 && block_rel <= 0.28); break;
    case MK_DTYPE_Q5_K: MK_CHECK(rms_rel <= 0.043 && block_rel <= 0.072); break;
    case MK_DTYPE_IQ4_NL: MK_CHECK(rms_rel <= 0.09 && block_rel <= 0.16); break;
    case MK_DTYPE_IQ4_XS: MK_CHECK(rms_rel <= 0.091 && block_rel <= 0.14); break;
    }
    /* Not all zeros: a broken writer could pass a relative bound on an empty tensor only if x were zero. */
    MK_CHECK(sx > 0);
    if (mk_test_failures != failures_before)
        fprintf(stderr, "  (weight %s type %s rms_rel %g block_rel %g)\n", w->name, info->name, rms_rel, block_rel);
    free(x);
    free(y);
}

/* The format each tensor of the tiny preset must have under dtype. */
static enum mk_dtype expected_type(const char *dtype, const char *name, bool is_norm) {
    if (is_norm) return MK_DTYPE_F32;
    if (!strcmp(dtype, "q4_k_m")) {
        /* tiny has 4 layers: use_more_bits holds for layers 2 ((2 - 0) % 3 == 2) and 3 (>= 7*4/8). */
        if (!strcmp(name, "token_embd.weight")) return MK_DTYPE_Q6_K; /* tied: it is the head */
        if (strstr(name, "attn_v") || strstr(name, "ffn_down"))
            return !strncmp(name, "blk.2.", 6) || !strncmp(name, "blk.3.", 6) ? MK_DTYPE_Q6_K : MK_DTYPE_Q4_K;
        return MK_DTYPE_Q4_K;
    }
    struct mk_gen_format f;
    MK_ASSERT(mk_gen_parse_format(dtype, &f) == 0 && !f.mix);
    return f.type;
}

/* Loads a tiny-preset file and checks config, vocab, tensor formats and every weight. */
static void check_tiny_file(const char *path, const char *dtype, uint64_t seed) {
    struct mk_model *m = NULL;
    struct mk_error err = { 0 };
    enum mk_status st = mk_model_load(path, &m, &err);
    if (st != MK_OK) fprintf(stderr, "%s: %s\n", path, err.msg);
    MK_CHECK(st == MK_OK);
    if (st != MK_OK) return;
    const struct mk_gen_preset *pr = mk_gen_find_preset("tiny");
    const struct mk_llama_config *c = &m->cfg;
    MK_CHECK(!strcmp(c->arch, "llama"));
    MK_CHECK(c->n_embd == pr->n_embd && c->n_ff == pr->n_ff && c->n_layer == pr->n_layer);
    MK_CHECK(c->n_head == pr->n_head && c->n_head_kv == pr->n_head_kv && c->n_vocab == pr->n_vocab);
    MK_CHECK(c->head_dim == pr->n_embd / pr->n_head && c->head_dim % 2 == 0 && c->head_dim >= 8);
    MK_CHECK(c->n_rot == c->head_dim && c->rope_base == pr->rope_base && c->n_ctx_train == pr->n_ctx);
    MK_CHECK(c->tied_output && m->output.data == m->token_embd.data);
    const struct mk_vocab_data *v = &m->vocab;
    MK_CHECK(!strcmp(v->model, "llama") && v->n_tokens == pr->n_vocab);
    MK_CHECK(v->bos == 1 && v->eos == 2 && v->unk == 0 && v->add_bos && v->scores && v->types);
    MK_CHECK(mk_gguf_str_eq(v->tokens[0], "<unk>") && v->types[0] == 2);
    MK_CHECK(mk_gguf_str_eq(v->tokens[1], "<s>") && v->types[1] == 3);
    MK_CHECK(mk_gguf_str_eq(v->tokens[2], "</s>") && v->types[2] == 3);
    MK_CHECK(mk_gguf_str_eq(v->tokens[3], "<0x00>") && mk_gguf_str_eq(v->tokens[3 + 255], "<0xFF>") &&
             v->types[258] == 6);
    MK_CHECK(mk_gguf_str_eq(v->tokens[259], "\xe2\x96\x81") && v->types[259] == 1);
    MK_CHECK(mk_gguf_str_eq(v->tokens[260], "\xe2\x96\x81"
                                            "a") &&
             mk_gguf_str_eq(v->tokens[261], "a"));
    MK_CHECK(v->scores[260] > v->scores[261] && v->scores[261] > v->scores[v->n_tokens - 1]);
    for (uint32_t i = 0; i + 1 < v->n_tokens; i++)
        for (uint32_t j = i + 1; j < v->n_tokens; j++)
            if (v->tokens[i].len == v->tokens[j].len &&
                !memcmp(v->tokens[i].data, v->tokens[j].data, v->tokens[i].len)) {
                mk_test_fail("duplicate token %u %u", i, j);
            }

    struct mk_gguf *g = m->gguf;
    uint32_t ft = 999;
    struct mk_gen_format f;
    MK_ASSERT(mk_gen_parse_format(dtype, &f) == 0);
    MK_CHECK(mk_gguf_get_u32_opt(g, "general.file_type", &ft, NULL) == MK_OK && ft == f.ftype);

    const struct mk_weight *ws[64];
    int n = 0;
    ws[n++] = &m->token_embd;
    ws[n++] = &m->output_norm;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const struct mk_layer_weights *L = &m->layers[l];
        const struct mk_weight *lw[] = { &L->attn_norm, &L->wq,     &L->wk,   &L->wv,    &L->wo,
                                         &L->ffn_norm,  &L->w_gate, &L->w_up, &L->w_down };
        for (size_t i = 0; i < 9; i++) ws[n++] = lw[i];
    }
    for (int i = 0; i < n; i++) {
        bool is_norm = ws[i]->rows == 1;
        enum mk_dtype want = expected_type(dtype, ws[i]->name, is_norm);
        if (ws[i]->type != want) fprintf(stderr, "%s: %s is %d, expected %d\n", path, ws[i]->name, ws[i]->type, want);
        MK_CHECK(ws[i]->type == want);
        const struct mk_gen_model_shape shape = { .n_layer = c->n_layer, .n_gqa = 2, .has_output = false };
        MK_CHECK(want == mk_gen_tensor_type(f, ws[i]->name, is_norm ? 1 : 2, ws[i]->cols, shape));
        check_weight(ws[i], seed);
    }
    mk_model_free(m);
}

static bool same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    void *pa = mk_test_read_file(a, &na), *pb = mk_test_read_file(b, &nb);
    bool same = pa && pb && na == nb && !memcmp(pa, pb, na);
    free(pa);
    free(pb);
    return same;
}

static void test_values(void) {
    /* Random access: any window equals the same slice of a longer run. */
    float all[3000], part[100];
    mk_gen_tensor_values(SEED, "blk.0.attn_q.weight", 256, 0, 3000, all);
    mk_gen_tensor_values(SEED, "blk.0.attn_q.weight", 256, 1234, 100, part);
    MK_CHECK(!memcmp(all + 1234, part, sizeof part));
    /* Other names and seeds give other values. */
    mk_gen_tensor_values(SEED, "blk.0.attn_k.weight", 256, 1234, 100, part);
    MK_CHECK(memcmp(all + 1234, part, sizeof part) != 0);
    mk_gen_tensor_values(SEED + 1, "blk.0.attn_q.weight", 256, 1234, 100, part);
    MK_CHECK(memcmp(all + 1234, part, sizeof part) != 0);

    /* Matrices: mean 0, std 1/sqrt(cols); norms: mean 1, std 0.1. */
    enum { N = 200000 };
    float *x = malloc(N * sizeof *x);
    mk_gen_tensor_values(SEED, "blk.3.ffn_down.weight", 768, 0, N, x);
    double s = 0, s2 = 0, mx = 0;
    for (int i = 0; i < N; i++) s += x[i], s2 += (double)x[i] * x[i], mx = fmax(mx, fabs(x[i]));
    double mean = s / N, sd = sqrt(s2 / N - mean * mean), want = 1 / sqrt(768.0);
    printf("matrix values: mean %.5f std %.5f (want %.5f) max %.4f\n", mean, sd, want, mx);
    MK_CHECK(fabs(mean) < 0.01 * want && fabs(sd - want) < 0.01 * want && mx <= 3.47 * want);
    mk_gen_tensor_values(SEED, "blk.1.ffn_norm.weight", 256, 0, N, x);
    s = s2 = 0;
    for (int i = 0; i < N; i++) s += x[i], s2 += (double)x[i] * x[i];
    mean = s / N, sd = sqrt(s2 / N - mean * mean);
    printf("norm values: mean %.5f std %.5f\n", mean, sd);
    MK_CHECK(fabs(mean - 1) < 0.002 && fabs(sd - 0.1) < 0.002);
    free(x);
}

static void test_formats_api(void) {
    struct mk_gen_format f;
    MK_CHECK(mk_gen_parse_format("q4_k_m", &f) == 0 && f.mix && f.type == MK_DTYPE_Q4_K && f.ftype == 15);
    MK_CHECK(mk_gen_parse_format("Q4_K_M", &f) == 0 && f.mix && f.ftype == 15);
    MK_CHECK(mk_gen_parse_format("bf16", &f) == 0 && !f.mix && f.type == MK_DTYPE_BF16 && f.ftype == 32);
    MK_CHECK(mk_gen_parse_format("q4_0", &f) == 0 && !f.mix && f.type == MK_DTYPE_Q4_0 && f.ftype == 2);
    MK_CHECK(mk_gen_parse_format("Q4_0", &f) == 0 && f.mix && f.type == MK_DTYPE_Q4_0 && f.ftype == 2);
    MK_CHECK(mk_gen_parse_format("q5_k", &f) == 0 && !f.mix && f.ftype == 16);
    MK_CHECK(mk_gen_parse_format("Q3_K_M", &f) == 0 && f.type == MK_DTYPE_Q3_K && f.ftype == 12);
    MK_CHECK(mk_gen_parse_format("iq4_xs", &f) == 0 && f.type == MK_DTYPE_IQ4_XS && f.ftype == 30);
    MK_CHECK(mk_gen_parse_format("iq2_xxs", &f) != 0 && mk_gen_parse_format("Q4_K", &f) != 0 &&
             mk_gen_parse_format("", &f) != 0 && mk_gen_parse_format("q4_k_x", &f) != 0);
    /* llama.cpp's use_more_bits over 16 layers: 0, 1 (first 1/8), 4, 7, 10, 13 (every third), 14, 15 (last 1/8). */
    MK_ASSERT(mk_gen_parse_format("q4_k_m", &f) == 0);
    const struct mk_gen_model_shape s16 = { .n_layer = 16, .n_gqa = 4, .has_output = false };
    const struct mk_gen_model_shape s32 = { .n_layer = 32, .n_gqa = 4, .has_output = true };
    const struct mk_gen_model_shape s5 = { .n_layer = 5, .n_gqa = 1, .has_output = true };
    const char *more = "1100100100100111";
    for (int l = 0; l < 16; l++) {
        char name[48];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        enum mk_dtype t = mk_gen_tensor_type(f, name, 2, 8192, s16);
        MK_CHECK(t == (more[l] == '1' ? MK_DTYPE_Q6_K : MK_DTYPE_Q4_K));
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        MK_CHECK(mk_gen_tensor_type(f, name, 2, 2048, s16) == MK_DTYPE_Q4_K);
    }
    MK_CHECK(mk_gen_tensor_type(f, "output.weight", 2, 4096, s32) == MK_DTYPE_Q6_K);
    MK_CHECK(mk_gen_tensor_type(f, "token_embd.weight", 2, 4096, s32) == MK_DTYPE_Q4_K);
    MK_CHECK(mk_gen_tensor_type(f, "token_embd.weight", 2, 2048, s16) == MK_DTYPE_Q6_K);
    MK_CHECK(mk_gen_tensor_type(f, "output_norm.weight", 1, 2048, s16) == MK_DTYPE_F32);
    /* Rows a block does not divide fall back as llama.cpp's tensor_type_fallback: q4_k -> q5_0,
     * q6_k -> q8_0, then f16; a head the default type cannot block is q8_0. */
    MK_CHECK(mk_gen_tensor_type(f, "blk.0.attn_q.weight", 2, 64, s5) == MK_DTYPE_Q5_0);
    MK_CHECK(mk_gen_tensor_type(f, "blk.0.ffn_down.weight", 2, 172, s5) == MK_DTYPE_F16);
    MK_CHECK(mk_gen_tensor_type(f, "output.weight", 2, 64, s5) == MK_DTYPE_Q8_0);

    /* Other mixes, rule by rule (llama.cpp's llama_tensor_get_type_impl for llama). */
    MK_ASSERT(mk_gen_parse_format("Q2_K", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q4_K); /* gqa 4 */
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.attn_v.weight", 2, 2048, s5) == MK_DTYPE_Q3_K);  /* gqa 1 */
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_Q3_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.attn_output.weight", 2, 2048, s16) == MK_DTYPE_Q3_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.ffn_up.weight", 2, 2048, s16) == MK_DTYPE_Q2_K);
    MK_CHECK(mk_gen_tensor_type(f, "output.weight", 2, 2048, s32) == MK_DTYPE_Q6_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.ffn_up.weight", 2, 96, s16) == MK_DTYPE_Q4_0); /* fallback */
    MK_ASSERT(mk_gen_parse_format("Q3_K_M", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "blk.1.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q5_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.2.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q4_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.0.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_Q5_K); /* < 16/16 */
    MK_CHECK(mk_gen_tensor_type(f, "blk.1.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_Q4_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.1.attn_output.weight", 2, 2048, s16) == MK_DTYPE_Q4_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.1.attn_q.weight", 2, 2048, s16) == MK_DTYPE_Q3_K);
    MK_ASSERT(mk_gen_parse_format("Q4_K_S", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "blk.3.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q5_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.4.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q4_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.1.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_Q5_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.2.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_Q4_K);
    MK_ASSERT(mk_gen_parse_format("Q5_K_M", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "blk.4.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q6_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.5.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q5_K);
    MK_ASSERT(mk_gen_parse_format("IQ4_XS", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "blk.5.attn_v.weight", 2, 2048, s16) == MK_DTYPE_Q5_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.5.attn_v.weight", 2, 2048, s5) == MK_DTYPE_IQ4_XS);
    MK_CHECK(mk_gen_tensor_type(f, "blk.1.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_Q5_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.2.ffn_down.weight", 2, 8192, s16) == MK_DTYPE_IQ4_XS);
    MK_CHECK(mk_gen_tensor_type(f, "blk.2.ffn_up.weight", 2, 96, s16) == MK_DTYPE_IQ4_NL);
    MK_ASSERT(mk_gen_parse_format("Q8_0", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "output.weight", 2, 2048, s32) == MK_DTYPE_Q8_0);
    MK_ASSERT(mk_gen_parse_format("Q4_0", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "output.weight", 2, 2048, s32) == MK_DTYPE_Q6_K);
    MK_CHECK(mk_gen_tensor_type(f, "blk.0.attn_v.weight", 2, 2048, s32) == MK_DTYPE_Q4_0);
    /* a pure type keeps every matrix, the head too */
    MK_ASSERT(mk_gen_parse_format("q4_0", &f) == 0);
    MK_CHECK(mk_gen_tensor_type(f, "output.weight", 2, 2048, s32) == MK_DTYPE_Q4_0);

    struct mk_error err = { 0 };
    struct mk_gen_params p = mk_gen_default_params();
    MK_CHECK(!strcmp(p.preset, "tiny") && !strcmp(p.dtype, "f32") && p.seed == 42 && !p.progress);
    p.preset = "llama-70b";
    MK_CHECK(mk_gen_write(tmp_path("bad.gguf"), &p, &err) == MK_ERR_INVALID_ARG && strstr(err.msg, "llama-70b"));
    p = mk_gen_default_params();
    p.dtype = "iq2_xxs";
    MK_CHECK(mk_gen_write(tmp_path("bad.gguf"), &p, &err) == MK_ERR_INVALID_ARG && strstr(err.msg, "iq2_xxs"));
    MK_CHECK(access(tmp_path("bad.gguf"), F_OK) != 0);
    p = mk_gen_default_params();
    MK_CHECK(mk_gen_write("/nonexistent-dir/x.gguf", &p, &err) == MK_ERR_IO &&
             strstr(err.msg, "/nonexistent-dir/x.gguf"));

    const struct mk_gen_preset *b1 = mk_gen_find_preset("llama-1b"), *b8 = mk_gen_find_preset("llama-8b");
    MK_CHECK(b1 && b1->n_embd == 2048 && b1->n_layer == 16 && b1->n_head == 32 && b1->n_head_kv == 8);
    MK_CHECK(b1 && b1->n_ff == 8192 && b1->n_vocab == 128256 && b1->tied_output && b1->rope_base == 500000.0f);
    MK_CHECK(b8 && b8->n_embd == 4096 && b8->n_layer == 32 && b8->n_ff == 14336 && !b8->tied_output);
    const struct mk_gen_preset *h = mk_gen_find_preset("tiny-hd128");
    MK_CHECK(h && h->n_embd / h->n_head == 128 && h->n_head / h->n_head_kv == 2 && !h->tied_output);
    const struct mk_gen_preset *q4 = mk_gen_find_preset("tiny-gqa4");
    MK_CHECK(q4 && q4->n_embd / q4->n_head == 64 && q4->n_head / q4->n_head_kv == 4 && q4->n_ctx >= 2048);
    /* Every name the messages list is a preset. */
    char names[256];
    MK_CHECK(strlen(mk_gen_preset_names) < sizeof names);
    snprintf(names, sizeof names, "%s", mk_gen_preset_names);
    for (char *n = strtok(names, ", "); n; n = strtok(NULL, ", "))
        MK_CHECK_MSG(mk_gen_find_preset(n) != NULL, "'%s' in mk_gen_preset_names is no preset", n);
}

static void test_generated(void) {
    char name[64];
    for (size_t i = 0; i < N_DTYPES; i++) {
        struct mk_gen_params p = mk_gen_default_params();
        p.dtype = dtypes[i];
        p.seed = SEED;
        snprintf(name, sizeof name, "tiny-%s.gguf", dtypes[i]);
        struct mk_error err = { 0 };
        enum mk_status st = mk_gen_write(tmp_path(name), &p, &err);
        if (st != MK_OK) fprintf(stderr, "gen %s: %s\n", dtypes[i], err.msg);
        MK_CHECK(st == MK_OK);
        if (st == MK_OK) check_tiny_file(tmp_path(name), dtypes[i], SEED);
    }
    /* Deterministic: the same parameters give the same bytes; another seed other weights. */
    struct mk_gen_params p = mk_gen_default_params();
    p.dtype = "q4_k_m";
    p.seed = SEED;
    struct mk_error err = { 0 };
    MK_CHECK(mk_gen_write(tmp_path("again.gguf"), &p, &err) == MK_OK);
    MK_CHECK(same_file(tmp_path("again.gguf"), tmp_path("tiny-q4_k_m.gguf")));
    p.dtype = "f32";
    p.seed = SEED + 1;
    MK_CHECK(mk_gen_write(tmp_path("seed8.gguf"), &p, &err) == MK_OK);
    MK_CHECK(!same_file(tmp_path("seed8.gguf"), tmp_path("tiny-f32.gguf")));
    check_tiny_file(tmp_path("seed8.gguf"), "f32", SEED + 1);
    /* The rows come out the same whatever the number of workers (tiny-hd128's matrices are cut
     * between several), and so does a requantized file. */
    p = mk_gen_default_params();
    p.preset = "tiny-hd128";
    p.dtype = "Q4_K_M";
    p.n_threads = 1;
    MK_CHECK(mk_gen_write(tmp_path("hd128-t1.gguf"), &p, &err) == MK_OK);
    p.n_threads = 5;
    MK_CHECK(mk_gen_write(tmp_path("hd128-t5.gguf"), &p, &err) == MK_OK);
    MK_CHECK(same_file(tmp_path("hd128-t1.gguf"), tmp_path("hd128-t5.gguf")));
    p.dtype = "f32";
    MK_CHECK(mk_gen_write(tmp_path("hd128-f32.gguf"), &p, &err) == MK_OK);
    struct mk_gen_quantize_params q = mk_gen_quantize_default_params();
    q.dtype = "q6_k";
    q.n_threads = 1;
    MK_CHECK(mk_gen_quantize_file(tmp_path("hd128-f32.gguf"), tmp_path("hd128-q6-t1.gguf"), q, &err) == MK_OK);
    q.n_threads = 3;
    MK_CHECK(mk_gen_quantize_file(tmp_path("hd128-f32.gguf"), tmp_path("hd128-q6-t3.gguf"), q, &err) == MK_OK);
    MK_CHECK(same_file(tmp_path("hd128-q6-t1.gguf"), tmp_path("hd128-q6-t3.gguf")));
}

/* mk_gen_quantize_file to one format, with no per-tensor choices. */
static enum mk_status quantize(const char *in, const char *out, const char *dtype, struct mk_error *err) {
    struct mk_gen_quantize_params p = mk_gen_quantize_default_params();
    p.dtype = dtype;
    return mk_gen_quantize_file(in, out, p, err);
}

static void test_quantize(void) {
    char name[64];
    struct mk_error err = { 0 };
    char src[700];
    snprintf(src, sizeof src, "%s", tmp_path("tiny-f32.gguf"));
    for (size_t i = 0; i < N_DTYPES; i++) {
        snprintf(name, sizeof name, "requant-%s.gguf", dtypes[i]);
        enum mk_status st = quantize(src, tmp_path(name), dtypes[i], &err);
        if (st != MK_OK) fprintf(stderr, "quantize %s: %s\n", dtypes[i], err.msg);
        MK_CHECK(st == MK_OK);
        if (st != MK_OK) continue;
        check_tiny_file(tmp_path(name), dtypes[i], SEED);
        /* The same quantizer on the same floats: identical to generating that dtype directly. */
        snprintf(name, sizeof name, "tiny-%s.gguf", dtypes[i]);
        struct mk_model *a = NULL, *b = NULL;
        char rq[64];
        snprintf(rq, sizeof rq, "requant-%s.gguf", dtypes[i]);
        if (mk_model_load(tmp_path(name), &a, &err) == MK_OK && mk_model_load(tmp_path(rq), &b, &err) == MK_OK) {
            MK_CHECK(a->layers[3].w_down.n_bytes == b->layers[3].w_down.n_bytes &&
                     !memcmp(a->layers[3].w_down.data, b->layers[3].w_down.data, a->layers[3].w_down.n_bytes));
            MK_CHECK(!memcmp(a->token_embd.data, b->token_embd.data, a->token_embd.n_bytes));
            /* Metadata is carried over: vocab and name are the source's. */
            MK_CHECK(a->vocab.n_tokens == b->vocab.n_tokens && mk_gguf_kv_count(a->gguf) == mk_gguf_kv_count(b->gguf));
            struct mk_gguf_str n1 = { 0, NULL }, n2 = { 0, NULL };
            mk_gguf_get_str_opt(b->gguf, "general.name", &n1, NULL);
            MK_CHECK(n1.data && mk_gguf_str_eq(n1, "mk synthetic tiny f32"));
            mk_gguf_get_str_opt(b->gguf, "tokenizer.ggml.model", &n2, NULL);
            MK_CHECK(n2.data && mk_gguf_str_eq(n2, "llama"));
        } else {
            MK_CHECK(0);
        }
        mk_model_free(a);
        mk_model_free(b);
    }
    /* bf16 back to f32 is exact; a file already in the target format is copied byte for byte. */
    MK_CHECK(quantize(tmp_path("tiny-bf16.gguf"), tmp_path("bf16-f32.gguf"), "f32", &err) == MK_OK);
    struct mk_model *a = NULL, *b = NULL;
    if (mk_model_load(tmp_path("bf16-f32.gguf"), &a, &err) == MK_OK &&
        mk_model_load(tmp_path("tiny-bf16.gguf"), &b, &err) == MK_OK) {
        MK_CHECK(a->layers[1].wq.type == MK_DTYPE_F32);
        float *x = malloc(256 * sizeof *x);
        mk_dequantize_row(MK_DTYPE_BF16, b->layers[1].wq.data, x, 256);
        MK_CHECK(!memcmp(x, a->layers[1].wq.data, 256 * sizeof *x));
        free(x);
    } else {
        MK_CHECK(0);
    }
    mk_model_free(a);
    mk_model_free(b);
    MK_CHECK(quantize(tmp_path("tiny-q4_k_m.gguf"), tmp_path("copy.gguf"), "q4_k_m", &err) == MK_OK);
    MK_CHECK(same_file(tmp_path("tiny-q4_k_m.gguf"), tmp_path("copy.gguf")));

    /* Errors name the file; nothing is left behind. */
    MK_CHECK(quantize(src, src, "q8_0", &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(quantize(tmp_path("none.gguf"), tmp_path("out.gguf"), "q8_0", &err) == MK_ERR_IO &&
             strstr(err.msg, "none.gguf"));
    MK_CHECK(quantize(src, tmp_path("out.gguf"), "iq3_s", &err) == MK_ERR_INVALID_ARG && strstr(err.msg, "iq3_s"));
    MK_CHECK(access(tmp_path("out.gguf"), F_OK) != 0);
}

/* A real model: stories260K's rows (64 and 172 wide) cannot take K-quant blocks. */
static void test_quantize_stories(void) {
    const char *dir = mk_test_models_dir("stories260K-f32.gguf");
    if (!dir) {
        printf("SKIP: models dir not found (set MK_MODELS_DIR); stories260K requantization skipped\n");
        return;
    }
    char in[1100];
    snprintf(in, sizeof in, "%s/stories260K-f32.gguf", dir);
    struct mk_error err = { 0 };
    enum mk_status st = quantize(in, tmp_path("stories-q4_k_m.gguf"), "q4_k_m", &err);
    if (st != MK_OK) fprintf(stderr, "quantize stories: %s\n", err.msg);
    MK_CHECK(st == MK_OK);
    struct mk_model *a = NULL, *b = NULL;
    if (st == MK_OK && mk_model_load(tmp_path("stories-q4_k_m.gguf"), &a, &err) == MK_OK &&
        mk_model_load(in, &b, &err) == MK_OK) {
        MK_CHECK(a->layers[0].wq.type == MK_DTYPE_Q5_0 && a->layers[0].w_down.type == MK_DTYPE_F16);
        MK_CHECK(a->output.type == MK_DTYPE_Q8_0 && a->layers[0].ffn_norm.type == MK_DTYPE_F32);
        MK_CHECK(!memcmp(a->layers[0].ffn_norm.data, b->layers[0].ffn_norm.data, 64 * 4));
        MK_CHECK(a->vocab.n_tokens == 512 && mk_gguf_kv_count(a->gguf) == mk_gguf_kv_count(b->gguf) + 1);
        /* f32 -> f16 of ffn_down: within half an ulp of the original. */
        float y[172];
        const float *x = b->layers[4].w_down.data;
        mk_dequantize_row(MK_DTYPE_F16, a->layers[4].w_down.data, y, 172);
        for (int i = 0; i < 172; i++) MK_CHECK(fabsf(y[i] - x[i]) <= fmaxf(ldexpf(fabsf(x[i]), -11), ldexpf(1, -25)));
    } else {
        MK_CHECK(0);
    }
    mk_model_free(a);
    mk_model_free(b);
}

/* Per-tensor choices over a format (llama-quantize's --tensor-type, --output-tensor-type and
 * --token-embedding-type), by mk_gen_quantize_type, then through a file. */
static void test_quantize_overrides(void) {
    struct mk_gen_format f;
    MK_ASSERT(mk_gen_parse_format("q4_k_m", &f) == 0);
    const struct mk_gen_model_shape tied = { .n_layer = 16, .n_gqa = 4, .has_output = false };
    const struct mk_gen_model_shape untied = { .n_layer = 16, .n_gqa = 4, .has_output = true };
    const struct mk_gen_override ov[] = { { "blk.3.ffn", MK_DTYPE_Q8_0 },
                                          { "ffn_gate", MK_DTYPE_F16 },
                                          { "ffn_up", MK_DTYPE_BF16 },
                                          { "attn_v", MK_DTYPE_Q6_K } };
    struct mk_gen_quantize_params p = mk_gen_quantize_default_params();
    MK_CHECK(p.dtype == NULL && p.n_overrides == 0 && p.output_type == -1 && p.token_embd_type == -1 && !p.progress);
    /* No choices: the format's rules. */
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.0.ffn_down.weight", 2, 8192, tied) == MK_DTYPE_Q6_K);
    MK_CHECK(mk_gen_quantize_type(&p, f, "token_embd.weight", 2, 2048, tied) == MK_DTYPE_Q6_K);
    p.overrides = ov;
    p.n_overrides = 4;
    /* The first match wins: blk.3's gate is q8_0, the other layers' f16. */
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.3.ffn_gate.weight", 2, 2048, tied) == MK_DTYPE_Q8_0);
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.2.ffn_gate.weight", 2, 2048, tied) == MK_DTYPE_F16);
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.2.ffn_up.weight", 2, 2048, tied) == MK_DTYPE_BF16);
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.2.ffn_down.weight", 2, 8192, tied) == MK_DTYPE_Q4_K);
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.3.attn_v.weight", 2, 2048, tied) == MK_DTYPE_Q6_K);
    /* A row length the chosen block does not divide falls back; norms stay f32. */
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.2.attn_v.weight", 2, 64, tied) == MK_DTYPE_Q8_0);
    MK_CHECK(mk_gen_quantize_type(&p, f, "blk.2.ffn_gate.weight", 1, 2048, tied) == MK_DTYPE_F32);
    /* Head and embedding: the embedding's choice first (a tied embedding is the head), then the
     * head's, ahead of any override. */
    const struct mk_gen_override embd_ov = { "token_embd", MK_DTYPE_Q4_0 };
    p.overrides = &embd_ov;
    p.n_overrides = 1;
    MK_CHECK(mk_gen_quantize_type(&p, f, "token_embd.weight", 2, 2048, tied) == MK_DTYPE_Q4_0);
    p.output_type = MK_DTYPE_Q8_0;
    MK_CHECK(mk_gen_quantize_type(&p, f, "token_embd.weight", 2, 2048, tied) == MK_DTYPE_Q8_0);
    MK_CHECK(mk_gen_quantize_type(&p, f, "token_embd.weight", 2, 2048, untied) == MK_DTYPE_Q4_0);
    MK_CHECK(mk_gen_quantize_type(&p, f, "output.weight", 2, 2048, untied) == MK_DTYPE_Q8_0);
    p.token_embd_type = MK_DTYPE_IQ4_NL;
    MK_CHECK(mk_gen_quantize_type(&p, f, "token_embd.weight", 2, 2048, tied) == MK_DTYPE_IQ4_NL);
    MK_CHECK(mk_gen_quantize_type(&p, f, "token_embd.weight", 2, 2048, untied) == MK_DTYPE_IQ4_NL);

    /* Through a file: the tiny q8_0 model into q4_k_m with f16 gates, a q4_0 head. */
    struct mk_error err;
    mk_error_clear(&err);
    struct mk_gen_params gp = mk_gen_default_params();
    gp.preset = "tiny";
    gp.dtype = "q8_0";
    MK_ASSERT(mk_gen_write(tmp_path("ov-src.gguf"), &gp, &err) == MK_OK);
    const struct mk_gen_override gates = { "ffn_gate", MK_DTYPE_F16 };
    struct mk_gen_quantize_params q = mk_gen_quantize_default_params();
    q.dtype = "q4_k_m";
    q.overrides = &gates;
    q.n_overrides = 1;
    q.output_type = MK_DTYPE_Q4_0;
    MK_CHECK(mk_gen_quantize_file(tmp_path("ov-src.gguf"), tmp_path("ov.gguf"), q, &err) == MK_OK);
    struct mk_gguf *g = NULL;
    if (mk_gguf_open(tmp_path("ov.gguf"), &g, &err) == MK_OK) {
        const struct mk_gguf_tensor *t;
        MK_CHECK((t = mk_gguf_find_tensor(g, "blk.1.ffn_gate.weight")) && t->type == MK_DTYPE_F16);
        MK_CHECK((t = mk_gguf_find_tensor(g, "blk.1.ffn_up.weight")) && t->type == MK_DTYPE_Q4_K);
        MK_CHECK((t = mk_gguf_find_tensor(g, "token_embd.weight")) && t->type == MK_DTYPE_Q4_0);
        MK_CHECK((t = mk_gguf_find_tensor(g, "blk.1.ffn_norm.weight")) && t->type == MK_DTYPE_F32);
        mk_gguf_close(g);
    } else {
        mk_test_fail("FAIL: %s", err.msg);
    }
    /* Bad choices are refused with the file untouched. */
    const struct mk_gen_override bad = { "", MK_DTYPE_F16 };
    q.overrides = &bad;
    MK_CHECK(mk_gen_quantize_file(tmp_path("ov-src.gguf"), tmp_path("ov-bad.gguf"), q, &err) == MK_ERR_INVALID_ARG);
    q.n_overrides = 0;
    q.output_type = 4; /* ggml id 4 (the removed q4_2): no type */
    MK_CHECK(mk_gen_quantize_file(tmp_path("ov-src.gguf"), tmp_path("ov-bad.gguf"), q, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(access(tmp_path("ov-bad.gguf"), F_OK) != 0);
}

int main(void) {
    if (!mk_test_make_tmp_dir(tmp_dir, sizeof tmp_dir, "gen_test.")) {
        perror("mkdtemp");
        return 1;
    }
    test_values();
    test_formats_api();
    test_generated();
    test_quantize();
    test_quantize_stories();
    test_quantize_overrides();
    for (size_t i = 0; i < MK_DTYPE_COUNT; i++) {
        const enum mk_dtype t = mk_dtype_all[i];
        if (worst[t % 32].rms_rel > 0)
            printf("%-6s worst tensor rms_rel %.5f, worst block max_rel %.5f\n", mk_dtype_get(t)->name,
                   worst[t % 32].rms_rel, worst[t % 32].block_rel);
    }
    mk_test_remove_tree(tmp_dir);
    return mk_test_finish("gen_test");
}
