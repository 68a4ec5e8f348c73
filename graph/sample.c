/* Host sampler: greedy argmax, or top-k candidate selection followed by the shared pick. */
#include "graph/sample.h"

#include "core/sample_core.h"

int mk_sample_cand_count(int32_t top_k, int vocab) {
    if (top_k > 0 && top_k <= MK_SAMPLE_MAX_CAND && top_k <= vocab) return top_k;
    return vocab < MK_SAMPLE_MAX_CAND ? vocab : MK_SAMPLE_MAX_CAND;
}

int32_t mk_sample_argmax(const float *logits, int vocab) {
    int32_t best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* The heap keeps its worst-ranked candidate at the root, so a new logit only has to beat the
 * root to get in: O(vocab log n) whatever order the logits come in. */
static int mk_sample_worse(const float *l, const int32_t *id, int a, int b) {
    return mk_sample_before(l[b], id[b], l[a], id[a]);
}

static void mk_sample_swap(float *l, int32_t *id, int a, int b) {
    float tl = l[a];
    l[a] = l[b];
    l[b] = tl;
    int32_t ti = id[a];
    id[a] = id[b];
    id[b] = ti;
}

static void mk_sample_sift_down(float *l, int32_t *id, int n, int i) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && mk_sample_worse(l, id, c + 1, c)) c++;
        if (!mk_sample_worse(l, id, c, i)) return;
        mk_sample_swap(l, id, c, i);
        i = c;
    }
}

static void mk_sample_sift_up(float *l, int32_t *id, int i) {
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!mk_sample_worse(l, id, i, parent)) return;
        mk_sample_swap(l, id, i, parent);
        i = parent;
    }
}

int mk_sample_top_k(const float *logits, int vocab, int n, float *cand_logit, int32_t *cand_id) {
    if (n > vocab) n = vocab;
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++) {
        cand_logit[i] = logits[i];
        cand_id[i] = i;
        mk_sample_sift_up(cand_logit, cand_id, i);
    }
    for (int i = n; i < vocab; i++) {
        if (!mk_sample_before(logits[i], i, cand_logit[0], cand_id[0])) continue;
        cand_logit[0] = logits[i];
        cand_id[0] = i;
        mk_sample_sift_down(cand_logit, cand_id, n, 0);
    }
    /* Heap sort: moving the worst to the end each time leaves the array best-first. */
    for (int end = n - 1; end > 0; end--) {
        mk_sample_swap(cand_logit, cand_id, 0, end);
        mk_sample_sift_down(cand_logit, cand_id, end, 0);
    }
    return n;
}

int32_t mk_sample_token(const float *logits, int vocab, const struct mk_step_cmd *cmd) {
    if (vocab <= 0) return -1;
    if (!(cmd->temperature > 0.0f)) return mk_sample_argmax(logits, vocab);
    float cand_logit[MK_SAMPLE_MAX_CAND]; /* (n) best first */
    int32_t cand_id[MK_SAMPLE_MAX_CAND];  /* (n) */
    float scratch[MK_SAMPLE_MAX_CAND];    /* (n) */
    int n = mk_sample_top_k(logits, vocab, mk_sample_cand_count(cmd->top_k, vocab), cand_logit, cand_id);
    float u = mk_sample_uniform(cmd->seed, cmd->pos);
    return mk_sample_pick(cand_logit, cand_id, n, cmd->temperature, cmd->top_p, cmd->min_p, u, scratch);
}
