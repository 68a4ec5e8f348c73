/* Synthetic Llama GGUFs with deterministic random weights, and rewriting a GGUF in another weight format. */
#ifndef MK_GEN_H
#define MK_GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_gen_params {
    const char *preset; /* one of mk_gen_preset_names */
    const char *dtype;  /* a type name ("f32", "q4_0", ...) or a llama.cpp mix ("Q4_K_M"); see mk_gen_format */
    uint64_t seed;
    bool progress;      /* progress bar on stderr, only when stderr is a terminal */
    uint32_t n_threads; /* workers that make the rows; 0: one per online CPU (at most 64) */
    /* Written as tokenizer.chat_template when not NULL (a template name such as "chatml" or the
     * Jinja text); the vocab's last tokens then become the control tokens of mk_gen_chat_tokens,
     * so that a test model can be talked to in ChatML or Llama 3 format. */
    const char *chat_template;
    int32_t eot_id; /* written as tokenizer.ggml.eot_token_id when >= 0 (default -1: absent) */
    /* A GGUF whose tokenizer (every tokenizer.* key: tokens, merges, pre-tokenizer, special ids,
     * chat template) replaces the synthetic one; the vocab size follows it. chat_template, when
     * also set, replaces that file's template and adds no tokens. NULL: the synthetic vocab. */
    const char *vocab_path;
};

/* The control tokens a vocab with a chat template ends with, in id order. */
extern const char *const mk_gen_chat_tokens[];
extern const unsigned mk_gen_n_chat_tokens;

/* preset "tiny", dtype "f32", seed 42, no progress, no chat template, no EOT id. */
struct mk_gen_params mk_gen_default_params(void);

struct mk_gen_preset {
    const char *name;
    uint32_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx;
    float rope_base;
    bool tied_output; /* no output.weight: the embedding is the LM head */
};

/* The preset called name, or NULL. */
const struct mk_gen_preset *mk_gen_find_preset(const char *name);
/* The presets' names, for help and error messages. */
extern const char mk_gen_preset_names[];

/* A target weight format: one dtype for every matrix (a lowercase type name, like llama-quantize
 * --pure), or one of llama.cpp's file types (its LLAMA_FTYPE name: Q4_0, Q2_K, Q3_K_M, Q4_K_M,
 * IQ4_XS, ...), whose tensor mix follows llama-quantize without an importance matrix. */
struct mk_gen_format {
    enum mk_dtype type; /* every matrix, or the file type's default (Q4_K for Q4_K_M) */
    uint32_t ftype;     /* llama.cpp's general.file_type (LLAMA_FTYPE_*) */
    bool mix;           /* a llama.cpp file type: some tensors get another type */
};

/* Parses a --dtype value ("q4_0", "Q4_K_M", "q4_k_m", ...); 0 on success, -1 when unknown. */
int mk_gen_parse_format(const char *name, struct mk_gen_format *out);
/* The accepted --dtype values, for help and error messages. */
extern const char mk_gen_format_names[];

/* What the mix rules look at in a model besides the tensor itself. */
struct mk_gen_model_shape {
    uint32_t n_layer;
    uint32_t n_gqa;  /* query heads per KV head */
    bool has_output; /* an output.weight; otherwise token_embd.weight is also the head */
};

/* The format a tensor gets. 1-D tensors (norms) are always F32. With a mix, as llama-quantize
 * (llama arch, no experts): the head (output.weight, or token_embd.weight when the file has no
 * output.weight) is Q6_K (Q8_0 for Q8_0 files or rows the default type cannot block); attn_v,
 * ffn_down and attn_output get more bits by the file type's rules, some only in the layers where
 * use_more_bits holds (the first n_layer/8, the last n_layer/8 and every third layer between).
 * Then, for any format, a row length the block size does not divide falls back as in llama.cpp
 * (q2_k, q3_k to q4_0; q4_k to q5_0; q5_k to q5_1; q6_k to q8_0; iq4_xs to iq4_nl), and to F16
 * when that does not divide either. */
enum mk_dtype mk_gen_tensor_type(struct mk_gen_format f, const char *name, uint32_t n_dims, int64_t cols,
                                 struct mk_gen_model_shape shape);

/* Elements [first, first + n) of tensor `name` (row-major, rows of `cols` = ne[0]) as mk_gen_write
 * generates them, before any rounding to the file's format. Each element is a pure function of
 * (seed, name, index): a splitmix64 hash turned into an approximately normal value (sum of four
 * uniforms). Norm weights (names ending in "norm.weight") are 1 + 0.1 z; every matrix, the
 * embedding included, is z / sqrt(cols), so a matvec of an O(1) activation stays O(1). */
void mk_gen_tensor_values(uint64_t seed, const char *name, int64_t cols, uint64_t first, uint64_t n, float *out);

/* Writes a Llama GGUF of the preset, streamed tensor by tensor (memory use is a few chunks of rows),
 * with a synthetic SentencePiece vocab: <unk>, <s>, </s>, 256 byte tokens, then letter pieces. */
enum mk_status mk_gen_write(const char *path, const struct mk_gen_params *p, struct mk_error *err);

/* A matrix type chosen by hand over a format's rules, as llama-quantize's --tensor-type: every
 * matrix whose name contains `part` ("ffn_down", "blk.3.attn_v"; a plain substring, not a regular
 * expression) gets `type`, the first matching override winning. */
struct mk_gen_override {
    const char *part;
    enum mk_dtype type;
};

/* How mk_gen_quantize_file rewrites a file (mk_gen_quantize_default_params: dtype NULL, no
 * overrides, no head or embedding choice, no progress). */
struct mk_gen_quantize_params {
    const char *dtype; /* the format: a --dtype value (see mk_gen_parse_format) */
    const struct mk_gen_override *overrides;
    uint32_t n_overrides;
    int output_type;     /* an enum mk_dtype for the head (output.weight, or a tied token_embd.weight), as
                          * llama-quantize's --output-tensor-type; -1: the format's rule */
    int token_embd_type; /* an enum mk_dtype for token_embd.weight (--token-embedding-type); -1: none */
    bool progress;       /* a progress line on a terminal's stderr */
    uint32_t n_threads;  /* workers that make the rows; 0: one per online CPU (at most 64) */
};
struct mk_gen_quantize_params mk_gen_quantize_default_params(void);

/* The format a tensor gets under p's choices over f's rules: token_embd_type for token_embd.weight,
 * output_type for the head, else the first override that matches a matrix, else
 * mk_gen_tensor_type's rules; a row length the chosen type's block does not divide falls back as
 * there. 1-D tensors stay F32. */
enum mk_dtype mk_gen_quantize_type(const struct mk_gen_quantize_params *p, struct mk_gen_format f, const char *name,
                                   uint32_t n_dims, int64_t cols, struct mk_gen_model_shape shape);

/* Rewrites in_path into out_path with every 2-D weight in the type mk_gen_quantize_type gives it,
 * 1-D tensors as F32, all metadata copied and general.file_type that of p.dtype. Streams row by
 * row; tensors already in their target format are copied byte for byte. */
enum mk_status mk_gen_quantize_file(const char *in_path, const char *out_path, struct mk_gen_quantize_params p,
                                    struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
