/* The Llama-family model description: reads the config and vocab keys of a GGUF and checks every tensor. */
#include "core/model.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest tensor name the model builds: "blk.4294967295.attn_output.weight" plus NUL. */
#define MK_MODEL_NAME_CAP 48

/* The public model plus what it owns beyond the GGUF map. */
struct mk_model_impl {
    struct mk_model pub;
    float *scores;  /* (n_tokens) aligned copy of tokenizer.ggml.scores */
    int32_t *types; /* (n_tokens) aligned copy of tokenizer.ggml.token_type */
    char *names;    /* (n_names, MK_MODEL_NAME_CAP) weight names */
    size_t n_names;
};

static struct mk_model_impl *mk_model_impl_of(struct mk_model *m) {
    return (struct mk_model_impl *)((char *)m - offsetof(struct mk_model_impl, pub));
}

static const char *mk_model_file(const struct mk_gguf *g) {
    const char *p = mk_gguf_path(g);
    return p ? p : "(gguf)";
}

/* ---- config ---- */

static enum mk_status mk_model_read_u32(const struct mk_gguf *g, const char *arch, const char *suffix, bool required,
                                        uint32_t *out, struct mk_error *err) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    /* The GGUF getters name the file and the key in their messages. */
    return required ? mk_gguf_get_u32(g, key, out, err) : mk_gguf_get_u32_opt(g, key, out, err);
}

static enum mk_status mk_model_read_f32(const struct mk_gguf *g, const char *arch, const char *suffix, float *out,
                                        struct mk_error *err) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return mk_gguf_get_f32_opt(g, key, out, err);
}

/* rope.scaling.type as llama.cpp reads it: absent or "none" leaves positions alone, "linear"
 * divides them by rope.scaling.factor (or the older rope.scale_linear); YaRN, LongRoPE and the
 * rest change the angles in ways mk does not implement, so they are refused by name. */
static enum mk_status mk_model_read_rope_scaling(const struct mk_gguf *g, struct mk_llama_config *cfg,
                                                 struct mk_error *err) {
    const char *file = mk_model_file(g), *a = cfg->arch;
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    struct mk_gguf_str type = { 0, NULL };
    enum mk_status st = mk_gguf_get_str_opt(g, key, &type, err);
    if (st != MK_OK) return st;
    bool linear = !type.data || mk_gguf_str_eq(type, "linear");
    if (!linear && !mk_gguf_str_eq(type, "none"))
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: %s is '%.*s'; mk implements only 'none' and 'linear'", file,
                            key, (int)(type.len > 64 ? 64 : type.len), type.data);
    float factor = 0.0f;
    const char *factor_key = "rope.scaling.factor";
    if ((st = mk_model_read_f32(g, a, factor_key, &factor, err)) != MK_OK) return st;
    if (factor == 0.0f) {
        factor_key = "rope.scale_linear";
        if ((st = mk_model_read_f32(g, a, factor_key, &factor, err)) != MK_OK) return st;
    }
    if (!linear || factor == 0.0f) return MK_OK;
    if (!(factor > 0.0f))
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s.%s is %g; a linear scaling factor must be positive", file, a,
                            factor_key, (double)factor);
    cfg->rope_freq_scale = 1.0f / factor;
    return MK_OK;
}

/* Fills cfg from `<arch>.*` keys. Vocab-only files describe some other model, so there nothing is
 * required and nothing is cross-checked. */
static enum mk_status mk_model_read_config(const struct mk_gguf *g, bool vocab_only, struct mk_llama_config *cfg,
                                           struct mk_error *err) {
    const char *file = mk_model_file(g);
    struct mk_gguf_str arch = { 0, NULL };
    enum mk_status st = mk_gguf_get_str_opt(g, "general.architecture", &arch, err);
    if (st != MK_OK) return st;
    if (!arch.data) {
        if (vocab_only) return MK_OK;
        return mk_error_set(err, MK_ERR_FORMAT, "%s: key general.architecture is missing", file);
    }
    bool known = mk_gguf_str_eq(arch, "llama") || mk_gguf_str_eq(arch, "mistral") || mk_gguf_str_eq(arch, "qwen2") ||
                 mk_gguf_str_eq(arch, "qwen3");
    if (!vocab_only && !known)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "%s: general.architecture is '%.*s'; mk runs only 'llama' (and 'mistral'), 'qwen2' and "
                            "'qwen3'",
                            file, (int)(arch.len > 64 ? 64 : arch.len), arch.data);
    if (arch.len >= sizeof cfg->arch || memchr(arch.data, '\0', arch.len)) {
        if (!vocab_only) return mk_error_set(err, MK_ERR_FORMAT, "%s: general.architecture is malformed", file);
        return MK_OK;
    }
    memcpy(cfg->arch, arch.data, arch.len);
    cfg->arch[arch.len] = '\0';
    const char *a = cfg->arch;
    bool req = !vocab_only;

    cfg->n_ctx_train = 2048;
    cfg->rope_base = 10000.0f;
    cfg->rms_eps = 1e-5f;
    cfg->rope_freq_scale = 1.0f;
    /* llama.cpp rotates the Qwen families' q and k NEOX-style (their converters do not permute
     * wq and wk the way the Llama converter does). */
    cfg->rope_neox = !strncmp(a, "qwen", 4);
    cfg->has_qk_norm = !strcmp(a, "qwen3");
    if ((st = mk_model_read_u32(g, a, "embedding_length", req, &cfg->n_embd, err)) != MK_OK) return st;
    if ((st = mk_model_read_u32(g, a, "feed_forward_length", req, &cfg->n_ff, err)) != MK_OK) return st;
    if ((st = mk_model_read_u32(g, a, "block_count", req, &cfg->n_layer, err)) != MK_OK) return st;
    if ((st = mk_model_read_u32(g, a, "attention.head_count", req, &cfg->n_head, err)) != MK_OK) return st;
    cfg->n_head_kv = cfg->n_head;
    if ((st = mk_model_read_u32(g, a, "attention.head_count_kv", false, &cfg->n_head_kv, err)) != MK_OK) return st;
    if ((st = mk_model_read_u32(g, a, "context_length", false, &cfg->n_ctx_train, err)) != MK_OK) return st;
    if ((st = mk_model_read_f32(g, a, "rope.freq_base", &cfg->rope_base, err)) != MK_OK) return st;
    if ((st = mk_model_read_f32(g, a, "attention.layer_norm_rms_epsilon", &cfg->rms_eps, err)) != MK_OK) return st;
    cfg->head_dim = cfg->n_head ? cfg->n_embd / cfg->n_head : 0;
    uint32_t key_len = UINT32_MAX, value_len = UINT32_MAX;
    if ((st = mk_model_read_u32(g, a, "attention.key_length", false, &key_len, err)) != MK_OK) return st;
    if ((st = mk_model_read_u32(g, a, "attention.value_length", false, &value_len, err)) != MK_OK) return st;
    if (key_len != UINT32_MAX) cfg->head_dim = key_len;
    cfg->n_rot = cfg->head_dim;
    if ((st = mk_model_read_u32(g, a, "rope.dimension_count", false, &cfg->n_rot, err)) != MK_OK) return st;
    if (vocab_only) return MK_OK;

    if (cfg->n_embd == 0 || cfg->n_ff == 0 || cfg->n_layer == 0 || cfg->n_head == 0 || cfg->n_head_kv == 0)
        return mk_error_set(err, MK_ERR_FORMAT,
                            "%s: %s.embedding_length=%u, feed_forward_length=%u, block_count=%u, "
                            "attention.head_count=%u, attention.head_count_kv=%u: none may be 0",
                            file, a, cfg->n_embd, cfg->n_ff, cfg->n_layer, cfg->n_head, cfg->n_head_kv);
    if (key_len == UINT32_MAX && cfg->n_embd % cfg->n_head)
        return mk_error_set(err, MK_ERR_FORMAT,
                            "%s: %s.embedding_length %u is not a multiple of %s.attention.head_count %u", file, a,
                            cfg->n_embd, a, cfg->n_head);
    if (cfg->n_head % cfg->n_head_kv)
        return mk_error_set(err, MK_ERR_FORMAT,
                            "%s: %s.attention.head_count %u is not a multiple of %s.attention.head_count_kv %u", file,
                            a, cfg->n_head, a, cfg->n_head_kv);
    /* Heads rotate in pairs. */
    if (cfg->head_dim == 0 || cfg->head_dim % 2)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "%s: %s.attention.key_length %u: mk needs an even, non-zero head size", file, a,
                            cfg->head_dim);
    /* Separate key and value head sizes would change every attention shape: refuse them plainly.
     * As in llama.cpp, an absent value_length means embedding_length / head_count. */
    if (value_len == UINT32_MAX) value_len = cfg->n_embd / cfg->n_head;
    if (value_len != cfg->head_dim)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "%s: %s.attention.value_length is %u; mk needs it equal to attention.key_length %u", file,
                            a, value_len, cfg->head_dim);
    if ((uint64_t)cfg->n_head * cfg->head_dim > UINT32_MAX / 4)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s.attention.head_count %u x key_length %u is too large", file, a,
                            cfg->n_head, cfg->head_dim);
    if (cfg->n_rot == 0 || cfg->n_rot % 2 || cfg->n_rot > cfg->head_dim)
        return mk_error_set(err, MK_ERR_FORMAT,
                            "%s: %s.rope.dimension_count %u must be even, non-zero and at most the head size %u", file,
                            a, cfg->n_rot, cfg->head_dim);
    if (!(cfg->rms_eps > 0.0f && cfg->rms_eps < 1.0f))
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s.attention.layer_norm_rms_epsilon %g is out of range", file, a,
                            (double)cfg->rms_eps);
    if (!(cfg->rope_base > 0.0f))
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s.rope.freq_base %g must be positive", file, a,
                            (double)cfg->rope_base);
    uint32_t experts = 0;
    if ((st = mk_model_read_u32(g, a, "expert_count", false, &experts, err)) != MK_OK) return st;
    if (experts)
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: %s.expert_count is %u; mk runs only dense models", file, a,
                            experts);
    return mk_model_read_rope_scaling(g, cfg, err);
}

/* ---- vocabulary ---- */

static enum mk_status mk_model_read_array(const struct mk_gguf *g, const char *key, uint64_t n_expected,
                                          const struct mk_gguf_kv **out, struct mk_error *err) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, key);
    *out = NULL;
    if (!kv) return MK_OK;
    if (kv->type != MK_GGUF_ARRAY)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: key %s has type %s, expected an array", mk_model_file(g), key,
                            mk_gguf_type_name(kv->type));
    if (n_expected != UINT64_MAX && kv->v.arr.n != n_expected)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: key %s has %llu entries, expected %llu (one per token)",
                            mk_model_file(g), key, (unsigned long long)kv->v.arr.n, (unsigned long long)n_expected);
    *out = kv;
    return MK_OK;
}

static enum mk_status mk_model_read_token_id(const struct mk_gguf *g, const char *key, uint32_t n_tokens, int32_t *out,
                                             struct mk_error *err) {
    uint32_t v = UINT32_MAX;
    enum mk_status st = mk_gguf_get_u32_opt(g, key, &v, err);
    if (st != MK_OK) return st;
    /* 0xFFFFFFFF is the converters' spelling of "no such token". */
    if (v == UINT32_MAX) {
        *out = -1;
        return MK_OK;
    }
    if (v >= n_tokens)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s = %u is out of range (the vocab has %u tokens)",
                            mk_model_file(g), key, v, n_tokens);
    *out = (int32_t)v;
    return MK_OK;
}

static enum mk_status mk_model_read_vocab(struct mk_model_impl *mi, struct mk_error *err) {
    const struct mk_gguf *g = mi->pub.gguf;
    struct mk_vocab_data *v = &mi->pub.vocab;
    const char *file = mk_model_file(g);
    v->bos = v->eos = v->unk = -1;

    struct mk_gguf_str model = { 0, NULL };
    enum mk_status st = mk_gguf_get_str_opt(g, "tokenizer.ggml.model", &model, err);
    if (st != MK_OK) return st;
    if (model.data) {
        if (model.len >= sizeof v->model || memchr(model.data, '\0', model.len))
            return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not a tokenizer mk knows",
                                file, (int)(model.len > 64 ? 64 : model.len), model.data);
        memcpy(v->model, model.data, model.len);
        v->model[model.len] = '\0';
    }

    const struct mk_gguf_kv *kv;
    if ((st = mk_model_read_array(g, "tokenizer.ggml.tokens", UINT64_MAX, &kv, err)) != MK_OK) return st;
    if (!kv) return MK_OK;
    if (kv->v.arr.elem_type != MK_GGUF_STRING)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: tokenizer.ggml.tokens holds %s, expected strings", file,
                            mk_gguf_type_name(kv->v.arr.elem_type));
    if (kv->v.arr.n == 0 || kv->v.arr.n > INT32_MAX)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", file,
                            (unsigned long long)kv->v.arr.n);
    v->n_tokens = (uint32_t)kv->v.arr.n;
    v->tokens = kv->v.arr.strs;

    /* Arrays in the KV section are not aligned in the file: keep aligned copies. */
    if ((st = mk_model_read_array(g, "tokenizer.ggml.scores", v->n_tokens, &kv, err)) != MK_OK) return st;
    if (kv) {
        if (kv->v.arr.elem_type != MK_GGUF_FLOAT32)
            return mk_error_set(err, MK_ERR_FORMAT, "%s: tokenizer.ggml.scores holds %s, expected float32", file,
                                mk_gguf_type_name(kv->v.arr.elem_type));
        if (!(mi->scores = malloc((size_t)v->n_tokens * sizeof(float))))
            return mk_error_set(err, MK_ERR_NOMEM, "%s: no memory for %u token scores", file, v->n_tokens);
        memcpy(mi->scores, kv->v.arr.data, (size_t)v->n_tokens * sizeof(float));
        v->scores = mi->scores;
    }
    if ((st = mk_model_read_array(g, "tokenizer.ggml.token_type", v->n_tokens, &kv, err)) != MK_OK) return st;
    if (kv) {
        if (kv->v.arr.elem_type != MK_GGUF_INT32 && kv->v.arr.elem_type != MK_GGUF_UINT32)
            return mk_error_set(err, MK_ERR_FORMAT, "%s: tokenizer.ggml.token_type holds %s, expected int32", file,
                                mk_gguf_type_name(kv->v.arr.elem_type));
        if (!(mi->types = malloc((size_t)v->n_tokens * sizeof(int32_t))))
            return mk_error_set(err, MK_ERR_NOMEM, "%s: no memory for %u token types", file, v->n_tokens);
        memcpy(mi->types, kv->v.arr.data, (size_t)v->n_tokens * sizeof(int32_t));
        v->types = mi->types;
    }
    if ((st = mk_model_read_array(g, "tokenizer.ggml.merges", UINT64_MAX, &kv, err)) != MK_OK) return st;
    if (kv) {
        if (kv->v.arr.elem_type != MK_GGUF_STRING)
            return mk_error_set(err, MK_ERR_FORMAT, "%s: tokenizer.ggml.merges holds %s, expected strings", file,
                                mk_gguf_type_name(kv->v.arr.elem_type));
        v->n_merges = kv->v.arr.n;
        v->merges = kv->v.arr.strs;
    }
    if ((st = mk_model_read_token_id(g, "tokenizer.ggml.bos_token_id", v->n_tokens, &v->bos, err)) != MK_OK) return st;
    if ((st = mk_model_read_token_id(g, "tokenizer.ggml.eos_token_id", v->n_tokens, &v->eos, err)) != MK_OK) return st;
    if ((st = mk_model_read_token_id(g, "tokenizer.ggml.unknown_token_id", v->n_tokens, &v->unk, err)) != MK_OK)
        return st;

    v->add_bos = !strcmp(v->model, "llama");
    kv = mk_gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
    if (kv) {
        if (kv->type != MK_GGUF_BOOL)
            return mk_error_set(err, MK_ERR_FORMAT, "%s: key tokenizer.ggml.add_bos_token has type %s, expected bool",
                                file, mk_gguf_type_name(kv->type));
        v->add_bos = kv->v.u64 != 0;
    }
    return MK_OK;
}

/* ---- tensors ---- */

/* Names the model may bind: four global tensors, at most fourteen per layer. */
static size_t mk_model_name_cap(uint32_t n_layer) { return (size_t)4 + 14 * (size_t)n_layer; }

/* Matrices may be in any weight type mk_dtype knows; norms stay f32. */
static bool mk_model_is_supported_matrix_type(uint32_t t) { return mk_dtype_get(t) != NULL; }

static const char *mk_model_type_name(uint32_t t) {
    const char *n = mk_dtype_ggml_name(t);
    return n ? n : "unknown";
}

/* Binds `name` (a 1-D weight when rows == 0) to w after checking shape and type. */
static enum mk_status mk_model_bind(struct mk_model_impl *mi, const char *name, int64_t rows, int64_t cols,
                                    struct mk_weight *w, struct mk_error *err) {
    const struct mk_gguf *g = mi->pub.gguf;
    const char *file = mk_model_file(g);
    bool is_1d = rows == 0;
    const struct mk_gguf_tensor *t = mk_gguf_find_tensor(g, name);
    if (!t) return mk_error_set(err, MK_ERR_FORMAT, "%s: tensor '%s' is missing", file, name);

    uint64_t want[MK_GGUF_MAX_DIMS] = { (uint64_t)cols, is_1d ? 1 : (uint64_t)rows, 1, 1 };
    bool ok = t->n_dims >= 1 && t->n_dims <= (is_1d ? 1u : 2u);
    for (int d = 0; d < MK_GGUF_MAX_DIMS; d++) ok = ok && t->ne[d] == want[d];
    if (!ok) {
        char got[96], exp[64];
        int o = snprintf(got, sizeof got, "[");
        for (uint32_t d = 0; d < t->n_dims && d < MK_GGUF_MAX_DIMS; d++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
        snprintf(got + o, sizeof got - (size_t)o, "]");
        if (is_1d)
            snprintf(exp, sizeof exp, "[%lld]", (long long)cols);
        else
            snprintf(exp, sizeof exp, "[%lld, %lld]", (long long)cols, (long long)rows);
        return mk_error_set(err, MK_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s (ne[0] first)", file, name,
                            got, exp);
    }
    if (is_1d ? t->type != MK_DTYPE_F32 : !mk_model_is_supported_matrix_type(t->type))
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s; mk reads %s", file, name,
                            mk_model_type_name(t->type),
                            is_1d ? "norm weights only as f32 ('mk quantize' converts them)"
                                  : "matrices as f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, "
                                    "q6_k, iq4_nl or iq4_xs");
    const struct mk_dtype_info *info = mk_dtype_get(t->type);
    MK_ASSERT(info != NULL);
    if (cols % info->block_size)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: tensor '%s' rows of %lld are not a multiple of the %s block of %u",
                            file, name, (long long)cols, info->name, info->block_size);
    uint64_t row_bytes = mk_dtype_row_bytes((enum mk_dtype)t->type, cols);
    uint64_t n_rows = is_1d ? 1 : (uint64_t)rows;
    if (t->n_bytes != row_bytes * n_rows)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: tensor '%s' holds %llu bytes, expected %llu", file, name,
                            (unsigned long long)t->n_bytes, (unsigned long long)(row_bytes * n_rows));

    MK_ASSERT(mi->n_names < mk_model_name_cap(mi->pub.cfg.n_layer));
    char *own = mi->names + mi->n_names++ * MK_MODEL_NAME_CAP;
    snprintf(own, MK_MODEL_NAME_CAP, "%s", name);
    *w = (struct mk_weight){
        .name = own,
        .data = t->data,
        .type = (enum mk_dtype)t->type,
        .rows = (int64_t)n_rows,
        .cols = cols,
        .row_bytes = row_bytes,
        .n_bytes = t->n_bytes,
    };
    return MK_OK;
}

/* The optional tensors of layer l: Q/K/V biases (all three or none, any architecture, as llama.cpp
 * reads them) and qwen3's per-head q and k norms (required there, refused elsewhere by the
 * unexpected-tensor check). */
static enum mk_status mk_model_bind_layer_extras(struct mk_model_impl *mi, uint32_t l, uint64_t *n_bound,
                                                 struct mk_error *err) {
    struct mk_model *m = &mi->pub;
    struct mk_llama_config *c = &m->cfg;
    struct mk_layer_weights *L = &m->layers[l];
    const char *file = mk_model_file(m->gguf);
    const int64_t q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    struct {
        const char *name;
        int64_t n;
        struct mk_weight *w;
    } bias[] = { { "attn_q.bias", q, &L->bq }, { "attn_k.bias", kv, &L->bk }, { "attn_v.bias", kv, &L->bv } };
    char name[MK_MODEL_NAME_CAP];
    int n_bias = 0, missing = -1;
    enum mk_status st;
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "blk.%u.%s", l, bias[i].name);
        if (!mk_gguf_find_tensor(m->gguf, name)) {
            if (missing < 0) missing = i;
            continue;
        }
        if ((st = mk_model_bind(mi, name, 0, bias[i].n, bias[i].w, err)) != MK_OK) return st;
        n_bias++;
    }
    /* The GPU and CPU ops take the three biases as one set. */
    if (n_bias && missing >= 0)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "%s: layer %u has some attention biases but not tensor 'blk.%u.%s'; mk needs all three of "
                            "q, k, v or none",
                            file, l, l, bias[missing].name);
    if (l == 0)
        c->has_qkv_bias = n_bias == 3;
    else if (c->has_qkv_bias != (n_bias == 3))
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "%s: tensor 'blk.%u.attn_q.bias' is %s, unlike layer 0", file, l,
                            n_bias ? "present" : "missing");
    *n_bound += (uint64_t)n_bias;
    if (c->has_qk_norm) {
        snprintf(name, sizeof name, "blk.%u.attn_q_norm.weight", l);
        if ((st = mk_model_bind(mi, name, 0, c->head_dim, &L->q_norm, err)) != MK_OK) return st;
        snprintf(name, sizeof name, "blk.%u.attn_k_norm.weight", l);
        if ((st = mk_model_bind(mi, name, 0, c->head_dim, &L->k_norm, err)) != MK_OK) return st;
        *n_bound += 2;
    }
    return MK_OK;
}

static enum mk_status mk_model_bind_tensors(struct mk_model_impl *mi, struct mk_error *err) {
    struct mk_model *m = &mi->pub;
    struct mk_llama_config *c = &m->cfg;
    const struct mk_gguf *g = m->gguf;
    const char *file = mk_model_file(g);
    uint64_t n_tensors = mk_gguf_tensor_count(g);
    enum mk_status st;

    /* Every layer has nine tensors: a block_count beyond what the file holds is a lie, caught
     * before it sizes an allocation. */
    if ((uint64_t)c->n_layer * 9 + 2 > n_tensors)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s.block_count is %u but the file has only %llu tensors", file,
                            c->arch, c->n_layer, (unsigned long long)n_tensors);

    const struct mk_gguf_tensor *te = mk_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return mk_error_set(err, MK_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", file);
    if (te->n_dims != 2 || te->ne[1] == 0 || te->ne[1] > INT32_MAX)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: tensor 'token_embd.weight' has %u dims and %llu rows", file,
                            te->n_dims, (unsigned long long)te->ne[1]);
    c->n_vocab = (uint32_t)te->ne[1];
    uint32_t vocab_key = c->n_vocab;
    char key[96];
    snprintf(key, sizeof key, "%s.vocab_size", c->arch);
    if ((st = mk_gguf_get_u32_opt(g, key, &vocab_key, err)) != MK_OK) return st;
    if (vocab_key != c->n_vocab)
        return mk_error_set(err, MK_ERR_FORMAT, "%s: %s is %u but tensor 'token_embd.weight' has %u rows", file, key,
                            vocab_key, c->n_vocab);
    if (m->vocab.n_tokens && m->vocab.n_tokens != c->n_vocab)
        return mk_error_set(err, MK_ERR_FORMAT,
                            "%s: tokenizer.ggml.tokens has %u tokens but tensor 'token_embd.weight' has %u rows", file,
                            m->vocab.n_tokens, c->n_vocab);

    if (!(m->layers = calloc(c->n_layer, sizeof *m->layers)) ||
        !(mi->names = calloc(mk_model_name_cap(c->n_layer), MK_MODEL_NAME_CAP)))
        return mk_error_set(err, MK_ERR_NOMEM, "%s: no memory for %u layers", file, c->n_layer);

    const int64_t e = c->n_embd, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    const int64_t ff = c->n_ff, nv = c->n_vocab;
    uint64_t n_bound = 0;
    if ((st = mk_model_bind(mi, "token_embd.weight", nv, e, &m->token_embd, err)) != MK_OK) return st;
    if ((st = mk_model_bind(mi, "output_norm.weight", 0, e, &m->output_norm, err)) != MK_OK) return st;
    n_bound += 2;
    c->tied_output = mk_gguf_find_tensor(g, "output.weight") == NULL;
    if (c->tied_output) {
        m->output = m->token_embd;
    } else {
        if ((st = mk_model_bind(mi, "output.weight", nv, e, &m->output, err)) != MK_OK) return st;
        n_bound++;
    }
    for (uint32_t l = 0; l < c->n_layer; l++) {
        struct mk_layer_weights *L = &m->layers[l];
        struct {
            const char *part;
            int64_t rows, cols;
            struct mk_weight *w;
        } parts[] = {
            { "attn_norm", 0, e, &L->attn_norm }, { "attn_q", q, e, &L->wq },      { "attn_k", kv, e, &L->wk },
            { "attn_v", kv, e, &L->wv },          { "attn_output", e, q, &L->wo }, { "ffn_norm", 0, e, &L->ffn_norm },
            { "ffn_gate", ff, e, &L->w_gate },    { "ffn_up", ff, e, &L->w_up },   { "ffn_down", e, ff, &L->w_down },
        };
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            char name[MK_MODEL_NAME_CAP];
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, parts[i].part);
            if ((st = mk_model_bind(mi, name, parts[i].rows, parts[i].cols, parts[i].w, err)) != MK_OK) return st;
            n_bound++;
        }
        if ((st = mk_model_bind_layer_extras(mi, l, &n_bound, err)) != MK_OK) return st;
    }
    if (mk_gguf_find_tensor(g, "rope_freqs.weight")) {
        /* llama.cpp reads Llama 3's frequency divisors only for the llama architecture. */
        if (strcmp(c->arch, "llama") && strcmp(c->arch, "mistral"))
            return mk_error_set(err, MK_ERR_UNSUPPORTED,
                                "%s: tensor 'rope_freqs.weight' is not part of a %s model (only llama files carry it)",
                                file, c->arch);
        if ((st = mk_model_bind(mi, "rope_freqs.weight", 0, c->n_rot / 2, &m->rope_freqs, err)) != MK_OK) return st;
        c->has_rope_freqs = true;
        n_bound++;
    }
    /* Anything else (output or FFN biases, a fused attn_qkv, experts, extra blocks) changes the maths:
     * refuse it by name. */
    if (n_bound != n_tensors) {
        for (uint64_t i = 0; i < n_tensors; i++) {
            const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
            char name[MK_MODEL_NAME_CAP + 1];
            bool known = false;
            if (t->name.len < sizeof name) {
                memcpy(name, t->name.data, t->name.len);
                name[t->name.len] = '\0';
                for (size_t j = 0; j < mi->n_names && !known; j++)
                    known = !strcmp(mi->names + j * MK_MODEL_NAME_CAP, name);
            }
            if (!known)
                return mk_error_set(err, MK_ERR_UNSUPPORTED,
                                    "%s: tensor '%.*s' is not part of a %s model with %u layers mk knows how to run",
                                    file, (int)(t->name.len > 80 ? 80 : t->name.len), t->name.data, c->arch,
                                    c->n_layer);
        }
    }
    return MK_OK;
}

/* ---- public ---- */

enum mk_status mk_model_from_gguf(struct mk_gguf *g, struct mk_model **out, struct mk_error *err) {
    *out = NULL;
    if (!g) return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_model_from_gguf: no GGUF");
    struct mk_model_impl *mi = calloc(1, sizeof *mi);
    if (!mi) {
        mk_gguf_close(g);
        return mk_error_set(err, MK_ERR_NOMEM, "%s: no memory for the model", mk_model_file(g));
    }
    struct mk_model *m = &mi->pub;
    m->gguf = g;
    m->vocab_only = mk_gguf_tensor_count(g) == 0;
    enum mk_status st;
    if ((st = mk_model_read_config(g, m->vocab_only, &m->cfg, err)) != MK_OK) goto fail;
    if ((st = mk_model_read_vocab(mi, err)) != MK_OK) goto fail;
    if (m->vocab_only) {
        if (m->vocab.n_tokens == 0) {
            st = mk_error_set(err, MK_ERR_FORMAT, "%s: the file has neither tensors nor a tokenizer", mk_model_file(g));
            goto fail;
        }
        m->cfg.n_vocab = m->vocab.n_tokens;
    } else if ((st = mk_model_bind_tensors(mi, err)) != MK_OK) {
        goto fail;
    }
    *out = m;
    return MK_OK;
fail:
    mk_model_free(m);
    return st;
}

enum mk_status mk_model_load(const char *path, struct mk_model **out, struct mk_error *err) {
    return mk_model_load_ex(path, NULL, out, err);
}

enum mk_status mk_model_load_ex(const char *path, const struct mk_gguf_open_params *p, struct mk_model **out,
                                struct mk_error *err) {
    *out = NULL;
    struct mk_gguf *g = NULL;
    enum mk_status st = mk_gguf_open_ex(path, p, &g, err);
    if (st != MK_OK) return st;
    return mk_model_from_gguf(g, out, err);
}

void mk_model_free(struct mk_model *m) {
    if (!m) return;
    struct mk_model_impl *mi = mk_model_impl_of(m);
    mk_gguf_close(m->gguf);
    free(m->layers);
    free(mi->scores);
    free(mi->types);
    free(mi->names);
    free(mi);
}

/* Every weight of a layer, the optional ones included (their data is NULL when absent). */
#define MK_LAYER_WEIGHTS 14
static void mk_layer_weight_list(const struct mk_layer_weights *L, const struct mk_weight *ws[MK_LAYER_WEIGHTS]) {
    const struct mk_weight *all[MK_LAYER_WEIGHTS] = { &L->attn_norm, &L->wq,     &L->wk,     &L->wv,     &L->wo,
                                                      &L->ffn_norm,  &L->w_gate, &L->w_up,   &L->w_down, &L->bq,
                                                      &L->bk,        &L->bv,     &L->q_norm, &L->k_norm };
    memcpy(ws, all, sizeof all);
}

static uint64_t mk_model_layer_sum(const struct mk_model *m, bool bytes) {
    uint64_t s = 0;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        const struct mk_weight *ws[MK_LAYER_WEIGHTS];
        mk_layer_weight_list(&m->layers[l], ws);
        for (size_t i = 0; i < MK_LAYER_WEIGHTS; i++)
            if (ws[i]->data) s += bytes ? ws[i]->n_bytes : (uint64_t)(ws[i]->rows * ws[i]->cols);
    }
    return s;
}

bool mk_model_has_block_weights(const struct mk_model *m) {
    const struct mk_weight *top[] = { &m->token_embd, &m->output_norm, &m->output, &m->rope_freqs };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (top[i]->data && mk_dtype_is_block(top[i]->type)) return true;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        const struct mk_weight *ws[MK_LAYER_WEIGHTS];
        mk_layer_weight_list(&m->layers[l], ws);
        for (size_t i = 0; i < MK_LAYER_WEIGHTS; i++)
            if (ws[i]->data && mk_dtype_is_block(ws[i]->type)) return true;
    }
    return false;
}

uint64_t mk_model_param_count(const struct mk_model *m) {
    if (!m || m->vocab_only) return 0;
    uint64_t n = mk_model_layer_sum(m, false);
    n += (uint64_t)(m->token_embd.rows * m->token_embd.cols) + (uint64_t)m->output_norm.cols;
    if (m->cfg.has_rope_freqs) n += (uint64_t)m->rope_freqs.cols;
    if (!m->cfg.tied_output) n += (uint64_t)(m->output.rows * m->output.cols);
    return n;
}

uint64_t mk_model_bytes_per_token(const struct mk_model *m) {
    if (!m || m->vocab_only) return 0;
    /* One embedding row is gathered; the LM head (the embedding table itself when tied) is read whole. */
    return mk_model_layer_sum(m, true) + m->output_norm.n_bytes + m->token_embd.row_bytes + m->output.n_bytes +
           (m->cfg.has_rope_freqs ? m->rope_freqs.n_bytes : 0);
}
