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
    const char *preset; /* "tiny", "llama-1b", "llama-8b" */
    const char *dtype;  /* "f32", "f16", "bf16", "q8_0", "q4_k", "q6_k" or the mix "q4_k_m" */
    uint64_t seed;
    bool progress; /* progress bar on stderr, only when stderr is a terminal */
};

/* preset "tiny", dtype "f32", seed 42, no progress. */
struct mk_gen_params mk_gen_default_params(void);

struct mk_gen_preset {
    const char *name;
    uint32_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx;
    float rope_base;
    bool tied_output; /* no output.weight: the embedding is the LM head */
};

/* The preset called name, or NULL. */
const struct mk_gen_preset *mk_gen_find_preset(const char *name);

/* A target weight format: one dtype for every matrix, or llama.cpp's Q4_K_M mix. */
struct mk_gen_format {
    enum mk_dtype type; /* MK_DTYPE_Q4_K for the mix */
    bool q4_k_m;
};

/* Parses a --dtype value; 0 on success, -1 when unknown. */
int mk_gen_parse_format(const char *name, struct mk_gen_format *out);

/* The format a tensor gets. 1-D tensors (norms) are always F32. With the Q4_K_M mix, as in
 * llama.cpp: output.weight (token_embd.weight when the file has no output.weight, because it is
 * then the head) is Q6_K; attn_v and ffn_down are Q6_K in the layers where use_more_bits holds
 * (the first n_layer/8, the last n_layer/8 and every third layer between); everything else Q4_K.
 * A row length that the block size does not divide falls back to Q8_0, then F16. */
enum mk_dtype mk_gen_tensor_type(struct mk_gen_format f, const char *name, uint32_t n_dims, int64_t cols,
                                 uint32_t n_layer, bool has_output);

/* llama.cpp's general.file_type for a format (LLAMA_FTYPE_*; plain q4_k is reported as Q4_K_S). */
uint32_t mk_gen_file_type(struct mk_gen_format f);

/* Elements [first, first + n) of tensor `name` (row-major, rows of `cols` = ne[0]) as mk_gen_write
 * generates them, before any rounding to the file's format. Each element is a pure function of
 * (seed, name, index): a splitmix64 hash turned into an approximately normal value (sum of four
 * uniforms). Norm weights (names ending in "norm.weight") are 1 + 0.1 z; every matrix, the
 * embedding included, is z / sqrt(cols), so a matvec of an O(1) activation stays O(1). */
void mk_gen_tensor_values(uint64_t seed, const char *name, int64_t cols, uint64_t first, uint64_t n, float *out);

/* Writes a Llama GGUF of the preset, streamed tensor by tensor (memory use is a few chunks of rows),
 * with a synthetic SentencePiece vocab: <unk>, <s>, </s>, 256 byte tokens, then letter pieces. */
enum mk_status mk_gen_write(const char *path, const struct mk_gen_params *p, struct mk_error *err);

/* Rewrites in_path into out_path with every 2-D weight in format dtype (see mk_gen_tensor_type),
 * 1-D tensors as F32, all metadata copied and general.file_type updated. Streams row by row;
 * tensors already in their target format are copied byte for byte. */
enum mk_status mk_gen_quantize_file(const char *in_path, const char *out_path, const char *dtype, bool progress,
                                    struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
