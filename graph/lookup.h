/* Prompt-lookup drafting for speculative decoding: the tokens that followed the latest earlier
 * occurrence of the context's last n-gram. */
#ifndef MK_LOOKUP_H
#define MK_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* n-gram lengths tried, longest first. */
#define MK_LOOKUP_NGRAM_MAX 4u
#define MK_LOOKUP_NGRAM_MIN 2u

/* Up to max_draft tokens for what comes after ctx[0..n): for g = MK_LOOKUP_NGRAM_MAX down to
 * MK_LOOKUP_NGRAM_MIN, the latest p < n - g with ctx[p..p+g) == ctx[n-g..n) proposes
 * ctx[p+g .. min(p+g+max_draft, n)). Writes them to draft and returns how many (0: no match). */
uint32_t mk_lookup_draft(const int32_t *ctx, size_t n, uint32_t max_draft, int32_t *draft);

#ifdef __cplusplus
}
#endif
#endif
