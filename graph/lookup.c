/* Prompt-lookup drafting (graph/lookup.h): an exact n-gram search backwards through the context. */
#include <string.h>

#include "graph/lookup.h"

uint32_t mk_lookup_draft(const int32_t *ctx, size_t n, uint32_t max_draft, int32_t *draft, uint32_t *ngram) {
    if (ngram) *ngram = 0;
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
            if (ngram) *ngram = g;
            return max_draft;
        }
    }
    return 0;
}

uint32_t mk_lookup_choose(double accept, double c0, double beta, uint32_t k_max) {
    if (accept < 0) accept = 0;
    if (accept > 0.999) accept = 0.999;
    if (c0 < 0) c0 = 0;
    if (beta < 0.01) beta = 0.01;
    double best = 1.02, gain = 1, term = 1; /* k = 0: one token for one step */
    uint32_t best_k = 0;
    for (uint32_t k = 1; k <= k_max; k++) {
        term *= accept;
        gain += term;
        double rate = gain / (1.0 + c0 + beta * (double)k);
        if (rate > best) {
            best = rate;
            best_k = k;
        }
    }
    return best_k;
}

/* The starting line, how strongly the slope is held to it (in weight times draft length squared),
 * and how much each verification step's weight keeps per later one. */
#define MK_LOOKUP_C0_START    0.3
#define MK_LOOKUP_BETA_START  0.05
#define MK_LOOKUP_SLOPE_HOLD  1.0
#define MK_LOOKUP_VERIFY_KEEP 0.8

/* The starting acceptance by match length, each just above what pays at the starting costs and
 * higher for longer matches: a verification that fails costs most of a step, and free text has
 * many chance matches of two tokens, so their drafts stop being verified after a few misses,
 * while the rarer long matches, which predict well, keep their own estimate. */
struct mk_lookup_stats mk_lookup_stats_init(void) {
    struct mk_lookup_stats s = { .c0 = MK_LOOKUP_C0_START, .beta = MK_LOOKUP_BETA_START };
    _Static_assert(MK_LOOKUP_NGRAM_MIN == 2u && MK_LOOKUP_NGRAM_MAX == 4u, "one starting acceptance per length");
    s.accept[2] = 0.4;
    s.accept[3] = 0.5;
    s.accept[4] = 0.6;
    return s;
}

void mk_lookup_stats_token(struct mk_lookup_stats *s, uint32_t ngram, int hit) {
    if (ngram < MK_LOOKUP_NGRAM_MIN || ngram > MK_LOOKUP_NGRAM_MAX) return;
    s->accept[ngram] += 0.1 * ((hit ? 1.0 : 0.0) - s->accept[ngram]);
}

void mk_lookup_stats_plain(struct mk_lookup_stats *s, double ms) {
    s->step_ms = s->step_ms > 0 ? s->step_ms + 0.2 * (ms - s->step_ms) : ms;
}

void mk_lookup_stats_verify(struct mk_lookup_stats *s, uint32_t k, double ms) {
    if (s->step_ms <= 0 || !k) return;
    double y = ms / s->step_ms - 1.0, x = (double)k;
    if (y < 0) y = 0;
    if (y > 8) y = 8;
    s->w = MK_LOOKUP_VERIFY_KEEP * s->w + 1.0;
    s->sk = MK_LOOKUP_VERIFY_KEEP * s->sk + x;
    s->skk = MK_LOOKUP_VERIFY_KEEP * s->skk + x * x;
    s->sy = MK_LOOKUP_VERIFY_KEEP * s->sy + y;
    s->sky = MK_LOOKUP_VERIFY_KEEP * s->sky + x * y;
    /* The weighted least-squares line, its slope held toward the start's by MK_LOOKUP_SLOPE_HOLD
     * (so that steps of one length give a line through their mean), and through the origin
     * where the fixed cost would come out negative. */
    const double xm = s->sk / s->w, ym = s->sy / s->w;
    const double sxx = s->skk - s->w * xm * xm, sxy = s->sky - s->w * xm * ym;
    double beta = (sxy + MK_LOOKUP_SLOPE_HOLD * MK_LOOKUP_BETA_START) / (sxx + MK_LOOKUP_SLOPE_HOLD);
    if (beta < 0) beta = 0;
    if (beta > 2) beta = 2;
    double c0 = ym - beta * xm;
    if (c0 < 0) {
        c0 = 0;
        beta = ym / xm;
        if (beta > 2) beta = 2;
    }
    if (c0 > 4) c0 = 4;
    s->c0 = c0;
    s->beta = beta;
}
