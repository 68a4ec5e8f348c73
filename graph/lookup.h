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
 * MK_LOOKUP_NGRAM_MIN, the latest p < n - g with ctx[p..p+g) == ctx[n-g..n) proposes the
 * max_draft tokens from ctx[p+g], continued past n by the tokens it proposed (as if the text went
 * on repeating with period n - p). Writes them to draft and returns how many (0: no match), and g
 * to *ngram (where not NULL; 0 without a match). */
uint32_t mk_lookup_draft(const int32_t *ctx, size_t n, uint32_t max_draft, int32_t *draft, uint32_t *ngram);

/* How much of a draft to verify. A verification step of k drafted tokens costs about
 * 1 + c0 + beta k single steps (c0: what a step of several tokens costs beyond a plain one
 * whatever their number, such as its own kernels and launches; beta: the extra cost of one more
 * row, near 0 where a step is bound by reading the weights, near 1 where it is bound by
 * arithmetic) and yields on average 1 + a + ... + a^k tokens when each drafted token holds with
 * probability a. The k in 0..k_max with the most tokens per unit of cost; 0 (a plain step)
 * unless some k beats it by 2 %. */
uint32_t mk_lookup_choose(double accept, double c0, double beta, uint32_t k_max);

/* Running estimates for mk_lookup_choose, kept per session. c0 and beta are the least-squares
 * line through the verification steps seen, (k, time / plain step - 1), the older ones weighing
 * less, its slope held toward the starting one so that steps of one draft length alone still
 * give a line (through their mean): measured at k = 1 only, a large cost there is not taken to
 * grow with k. */
struct mk_lookup_stats {
    /* per drafted token, exponential moving average, by the length of the n-gram that matched: a
     * long match predicts better (in free text most matches are of two tokens, and chance) */
    double accept[MK_LOOKUP_NGRAM_MAX + 1];
    double c0;                  /* fixed extra cost of a verification step, relative to a plain step */
    double beta;                /* extra cost per drafted token, relative to a plain step */
    double step_ms;             /* a plain step's wall time, moving average; 0 until one was timed */
    double w, sk, skk, sy, sky; /* the verification steps' decayed weights and sums */
};
/* c0 0.3, beta 0.05 (a step of several tokens on a GPU: mostly its fixed cost) until costs are
 * measured; acceptance 0.6 for drafts from a 4-token match, 0.5 from 3 and 0.4 from 2. */
struct mk_lookup_stats mk_lookup_stats_init(void);
/* One drafted token of a draft from an ngram-token match held (hit) or did not. */
void mk_lookup_stats_token(struct mk_lookup_stats *s, uint32_t ngram, int hit);
/* A plain step took ms; a verification step of k drafted tokens took ms. */
void mk_lookup_stats_plain(struct mk_lookup_stats *s, double ms);
void mk_lookup_stats_verify(struct mk_lookup_stats *s, uint32_t k, double ms);

#ifdef __cplusplus
}
#endif
#endif
