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
            size_t avail = n - (p + g);
            uint32_t k = avail < max_draft ? (uint32_t)avail : max_draft;
            memcpy(draft, ctx + p + g, k * sizeof *draft);
            return k;
        }
    }
    return 0;
}
