/* Tokenizers from a GGUF vocab: SentencePiece-style `llama` and byte-level BPE `gpt2`. */
#ifndef MK_TOKENIZER_H
#define MK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf.h"
#include "core/model.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_tokenizer;

/* The tokenizer.ggml keys that mk_vocab_data does not carry. */
struct mk_tokenizer_meta {
    char pre[64];                              /* tokenizer.ggml.pre; "" when absent */
    int8_t add_bos, add_eos, add_space_prefix; /* tokenizer.ggml.add_*: 1 or 0, -1 when absent */
    int32_t eot, eom;                          /* tokenizer.ggml.eot_token_id, eom_token_id; -1 when absent */
    /* general.name holds "phi-3" or "phi3" (any case): as in llama.cpp, whitespace after a special
     * token in the text is dropped (its RSTRIP attribute), but after <unk>, <s> and <|endoftext|>. */
    bool rstrip_specials;
};
void mk_tokenizer_meta_init(struct mk_tokenizer_meta *m); /* everything absent */
enum mk_status mk_tokenizer_read_meta(const struct mk_gguf *g, struct mk_tokenizer_meta *m, struct mk_error *err);

/* Builds a tokenizer from vocab data and those keys (copied; the sources may go away), with
 * llama.cpp's defaults for what is absent. A BPE vocab's pre-tokenizer is chosen by m->pre; an
 * unknown name falls back to "default" with a warning on stderr. */
enum mk_status mk_tokenizer_create_meta(const struct mk_vocab_data *v, const struct mk_tokenizer_meta *m,
                                        struct mk_tokenizer **out, struct mk_error *err);
/* Same, reading the keys from g: what a model file's tokenizer should use. */
enum mk_status mk_tokenizer_create_gguf(const struct mk_vocab_data *v, const struct mk_gguf *g,
                                        struct mk_tokenizer **out, struct mk_error *err);
/* Same with no keys but v->add_bos (so a BPE vocab gets the "default" pre-tokenizer). */
enum mk_status mk_tokenizer_create(const struct mk_vocab_data *v, struct mk_tokenizer **out, struct mk_error *err);
void mk_tokenizer_free(struct mk_tokenizer *t);

/* Tokenizes len bytes of text (any bytes: invalid UTF-8 goes through byte fallback).
 * add_special adds BOS and EOS where the vocab asks for them (add_bos_token, add_eos_token), as
 * llama.cpp's add_special; parse_special turns control-token text such as "<s>" into its id
 * (user-defined tokens are always matched).
 * Writes at most cap ids; returns the number of ids the text needs (may exceed cap), or a
 * negative mk_status. */
int64_t mk_tokenizer_encode(const struct mk_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t *ids, size_t cap);
/* Pre-tokenizes len bytes of text as the named pre-tokenizer (a tokenizer.ggml.pre value) would,
 * with no vocab: writes each word's byte length to lens (at most cap) and returns the number of
 * words, or a negative mk_status (MK_ERR_INVALID_ARG for a name mk does not know). */
int64_t mk_tokenizer_split(const char *pre, const char *text, size_t len, size_t *lens, size_t cap);
/* Bytes of one token as text (byte tokens to their byte, U+2581 to space, control tokens to "").
 * prev_id is the token before it (-1 at the start), so the SPM dummy-prefix space after BOS or
 * at the start can be dropped. Writes at most cap bytes; returns the byte count needed. */
size_t mk_tokenizer_piece(const struct mk_tokenizer *t, int32_t prev_id, int32_t id, char *out, size_t cap);
/* Whole sequence to text; same conventions. Returns bytes needed. */
size_t mk_tokenizer_decode(const struct mk_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap);

/* The vocab's text of token id, as stored (U+2581 for spaces, "<0x0A>" for a byte token, a control
 * token's own text), with its byte length in *len; NULL when id is outside the vocab. */
const char *mk_tokenizer_token_text(const struct mk_tokenizer *t, int32_t id, size_t *len);
uint32_t mk_tokenizer_n_vocab(const struct mk_tokenizer *t);
int32_t mk_tokenizer_bos(const struct mk_tokenizer *t);
int32_t mk_tokenizer_eos(const struct mk_tokenizer *t);
const char *mk_tokenizer_kind(const struct mk_tokenizer *t); /* "llama" or "gpt2" */
const char *mk_tokenizer_pre(const struct mk_tokenizer *t);  /* the BPE pre-tokenizer's name; "" for llama */
bool mk_tokenizer_add_bos(const struct mk_tokenizer *t);
bool mk_tokenizer_add_eos(const struct mk_tokenizer *t);
int32_t mk_tokenizer_eot(const struct mk_tokenizer *t); /* end of turn, by key or by text; -1 when none */
/* True when id ends generation: EOS, EOT, EOM, or a token such as <|im_end|> or <|eot_id|> that
 * llama.cpp puts in its end-of-generation set. */
bool mk_tokenizer_is_eog(const struct mk_tokenizer *t, int32_t id);
/* The end-of-generation ids: up to cap of them into out; returns how many there are. */
size_t mk_tokenizer_eog_ids(const struct mk_tokenizer *t, int32_t *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
