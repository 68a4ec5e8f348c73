/* Prompt-lookup drafting (graph/lookup.h): an exact n-gram search backwards through the context. */
#include <string.h>

#include "graph/lookup.h"

uint32_t mk_lookup_draft(const int32_t *ctx, size_t n, uint32_t max_draft, int32_t *draft) {
    if (!max_draft) return 0;
    for (uint32_t g = MK_LOOKUP_NGRAM_MAX; g >= MK_LOOKUP_NGRAM_MIN; g--) {
        if (n < (size_t)g + 1) continue;
        const int32_t *suffix = ctx + n - g;
        /* The latest match first: recent text predicts the next tokens best. */
        for (size_t p = n - g; p-- > 0;) {
            if (ctx[p] != suffix[0] || memcmp(ctx + p, suffix, g * sizeof *ctx) != 0) continue;
            /* Past the context the copy reads its own output: a loop (text repeating with
             * period n - p) goes on as it did, so a short period still gives a whole draft. */
            for (uint32_t i = 0; i < max_draft; i++) {
                const size_t src = p + g + i;
                draft[i] = src < n ? ctx[src] : draft[src - n];
            }
            return max_draft;
        }
    }
    return 0;
}

uint32_t mk_lookup_choose(double accept, double beta, uint32_t k_max) {
    if (accept < 0) accept = 0;
    if (accept > 0.999) accept = 0.999;
    if (beta < 0.01) beta = 0.01;
    double best = 1.02, gain = 1, term = 1; /* k = 0: one token for one step */
    uint32_t best_k = 0;
    for (uint32_t k = 1; k <= k_max; k++) {
        term *= accept;
        gain += term;
        double rate = gain / (1.0 + beta * (double)k);
        if (rate > best) {
            best = rate;
            best_k = k;
        }
    }
    return best_k;
}

struct mk_lookup_stats mk_lookup_stats_init(void) {
    return (struct mk_lookup_stats){ 0.5, 0.25, 0.0 };
}

void mk_lookup_stats_token(struct mk_lookup_stats *s, int hit) { s->accept += 0.1 * ((hit ? 1.0 : 0.0) - s->accept); }

void mk_lookup_stats_plain(struct mk_lookup_stats *s, double ms) {
    s->step_ms = s->step_ms > 0 ? s->step_ms + 0.2 * (ms - s->step_ms) : ms;
}

void mk_lookup_stats_verify(struct mk_lookup_stats *s, uint32_t k, double ms) {
    if (s->step_ms <= 0 || !k) return;
    double b = (ms - s->step_ms) / ((double)k * s->step_ms);
    if (b < 0) b = 0;
    if (b > 2) b = 2;
    s->beta += 0.3 * (b - s->beta);
}
