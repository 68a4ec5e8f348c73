/* Tokenizers from a GGUF vocab: SentencePiece-style `llama` and byte-level BPE `gpt2`. */
#ifndef MK_TOKENIZER_H
#define MK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_tokenizer;

/* Builds a tokenizer from vocab data (copied; the source may go away). */
enum mk_status mk_tokenizer_create(const struct mk_vocab_data *v, struct mk_tokenizer **out, struct mk_error *err);
void mk_tokenizer_free(struct mk_tokenizer *t);

/* Tokenizes len bytes of text (any bytes: invalid UTF-8 goes through byte fallback).
 * add_bos prepends BOS; parse_special turns control-token text such as "<s>" into its id.
 * Writes at most cap ids; returns the number of ids the text needs (may exceed cap), or a
 * negative mk_status. */
int64_t mk_tokenizer_encode(const struct mk_tokenizer *t, const char *text, size_t len, bool add_bos,
                            bool parse_special, int32_t *ids, size_t cap);
/* Bytes of one token as text (byte tokens to their byte, U+2581 to space, control tokens to "").
 * prev_id is the token before it (-1 at the start), so the SPM dummy-prefix space after BOS or
 * at the start can be dropped. Writes at most cap bytes; returns the byte count needed. */
size_t mk_tokenizer_piece(const struct mk_tokenizer *t, int32_t prev_id, int32_t id, char *out, size_t cap);
/* Whole sequence to text; same conventions. Returns bytes needed. */
size_t mk_tokenizer_decode(const struct mk_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap);

uint32_t mk_tokenizer_n_vocab(const struct mk_tokenizer *t);
int32_t mk_tokenizer_bos(const struct mk_tokenizer *t);
int32_t mk_tokenizer_eos(const struct mk_tokenizer *t);
const char *mk_tokenizer_kind(const struct mk_tokenizer *t); /* "llama" or "gpt2" */

#ifdef __cplusplus
}
#endif
#endif
