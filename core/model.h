/* The Llama-family model description: config from GGUF metadata, checked against the tensors. */
#ifndef MK_MODEL_H
#define MK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_llama_config {
    char arch[32];   /* "llama" (or "mistral"), "qwen2" or "qwen3" */
    uint32_t n_embd; /* hidden size */
    uint32_t n_ff;   /* FFN inner size */
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv; /* default n_head */
    uint32_t head_dim;  /* attention.key_length (= value_length), default n_embd / n_head */
    uint32_t n_rot;     /* rope.dimension_count, default head_dim */
    uint32_t n_vocab;
    uint32_t n_ctx_train; /* context_length, default 2048 */
    float rope_base;      /* rope.freq_base, default 10000 */
    float rms_eps;        /* attention.layer_norm_rms_epsilon, default 1e-5 */
    bool tied_output;     /* no output.weight: the LM head is token_embd */
    /* Appended for the Qwen architectures and rope scaling (issue 11). */
    bool rope_neox;        /* rotate pairs (i, i + n_rot/2) instead of (2i, 2i+1): qwen2, qwen3 */
    float rope_freq_scale; /* positions are multiplied by this: 1 / rope.scaling.factor for linear, else 1 */
    bool has_qkv_bias;     /* blk.N.attn_{q,k,v}.bias (qwen2; optional for llama, all three or none) */
    bool has_qk_norm;      /* blk.N.attn_{q,k}_norm.weight: per-head RMSNorm of q and k before RoPE (qwen3) */
    bool has_rope_freqs;   /* rope_freqs.weight: Llama 3 per-pair frequency divisors */
};

/* A 2-D weight in ggml orientation: rows of `cols` contiguous elements (ne[0] = cols, ne[1] = rows).
 * A matvec y = W x has len(y) = rows, len(x) = cols. 1-D weights (norms) have rows = 1. */
struct mk_weight {
    const char *name; /* tensor name, NUL-terminated (owned by the model) */
    const void *data; /* inside the GGUF map */
    enum mk_dtype type;
    int64_t rows, cols;
    uint64_t row_bytes;
    uint64_t n_bytes;
};

struct mk_layer_weights {
    struct mk_weight attn_norm; /* (n_embd) */
    struct mk_weight wq;        /* (n_head*head_dim, n_embd) */
    struct mk_weight wk;        /* (n_head_kv*head_dim, n_embd) */
    struct mk_weight wv;        /* (n_head_kv*head_dim, n_embd) */
    struct mk_weight wo;        /* (n_embd, n_head*head_dim) */
    struct mk_weight ffn_norm;  /* (n_embd) */
    struct mk_weight w_gate;    /* (n_ff, n_embd) */
    struct mk_weight w_up;      /* (n_ff, n_embd) */
    struct mk_weight w_down;    /* (n_embd, n_ff) */
    /* Optional (data NULL when the model has none; see cfg.has_qkv_bias, has_qk_norm). */
    struct mk_weight bq, bk, bv;     /* (n_head*head_dim), (n_head_kv*head_dim) twice */
    struct mk_weight q_norm, k_norm; /* (head_dim) each */
};

/* Vocabulary of the file: tokens and merges point into the map; scores and types are aligned
 * copies owned by the model (the file's arrays need not be aligned). */
struct mk_vocab_data {
    char model[16]; /* "llama", "gpt2", or "" when the file has none */
    uint32_t n_tokens;
    const struct mk_gguf_str *tokens;
    const float *scores;  /* n_tokens, or NULL */
    const int32_t *types; /* n_tokens, or NULL */
    uint64_t n_merges;
    const struct mk_gguf_str *merges; /* gpt2 only */
    int32_t bos, eos, unk;            /* -1 when absent */
    bool add_bos;                     /* tokenizer.ggml.add_bos_token, default true for llama, false for gpt2 */
};

struct mk_model {
    struct mk_gguf *gguf; /* owned */
    struct mk_llama_config cfg;
    bool vocab_only; /* no tensors: only the tokenizer is usable */
    struct mk_vocab_data vocab;
    struct mk_weight token_embd;     /* (n_vocab, n_embd) */
    struct mk_weight output_norm;    /* (n_embd) */
    struct mk_weight output;         /* (n_vocab, n_embd); equals token_embd when tied */
    struct mk_layer_weights *layers; /* n_layer */
    struct mk_weight rope_freqs;     /* (n_rot / 2), data NULL unless cfg.has_rope_freqs */
};

/* Opens and validates a model file. Errors name the file and the key or tensor at fault. */
enum mk_status mk_model_load(const char *path, struct mk_model **out, struct mk_error *err);
/* mk_model_load with a cancel flag and read settings (core/gguf.h); p may be NULL. */
struct mk_gguf_open_params;
enum mk_status mk_model_load_ex(const char *path, const struct mk_gguf_open_params *p, struct mk_model **out,
                                struct mk_error *err);
/* Same, from an already open GGUF (ownership moves to the model, even on failure). */
enum mk_status mk_model_from_gguf(struct mk_gguf *g, struct mk_model **out, struct mk_error *err);
void mk_model_free(struct mk_model *m);

/* Parameter count and the weight bytes one decode step reads (every matrix once, the embedding
 * row, the norms, the LM head). */
uint64_t mk_model_param_count(const struct mk_model *m);
uint64_t mk_model_bytes_per_token(const struct mk_model *m);
/* Whether any weight of m is in a block format (quantized), rather than all f32, f16 or bf16. */
bool mk_model_has_block_weights(const struct mk_model *m);

#ifdef __cplusplus
}
#endif
#endif
