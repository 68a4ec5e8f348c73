/* Tests the host sampler: candidate selection, greedy ties, reproducibility, and that draws follow the truncated softmax. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/sample.h"
#include "core/sample_core.h"
#include "tests/test_util.h"

static uint64_t g_rng = 0x1234567887654321ull;
static uint32_t test_rand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static struct mk_step_cmd test_cmd(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed, int32_t pos) {
    struct mk_step_cmd c;
    memset(&c, 0, sizeof c);
    c.cmd = MK_CMD_STEP;
    c.pos = pos;
    c.temperature = temp;
    c.top_k = top_k;
    c.top_p = top_p;
    c.min_p = min_p;
    c.seed = seed;
    return c;
}

static const float *g_sort_logits;
static int test_cmp_rank(const void *a, const void *b) {
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    if (mk_sample_before(g_sort_logits[ia], ia, g_sort_logits[ib], ib)) return -1;
    if (mk_sample_before(g_sort_logits[ib], ib, g_sort_logits[ia], ia)) return 1;
    return 0;
}

/* The heap selection equals a full sort's prefix, ties (many equal logits) included. */
static void test_top_k_matches_sort(void) {
    const int sizes[] = { 1, 2, 7, 100, 1500, 5000 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int vocab = sizes[si];
        float *l = malloc(sizeof(float) * vocab);
        int32_t *order = malloc(sizeof(int32_t) * vocab);
        for (int trial = 0; trial < 4; trial++) {
            for (int i = 0; i < vocab; i++) {
                /* trial 0/1: few distinct values (ties everywhere); 2: increasing; 3: wide spread */
                l[i] = trial < 2    ? (float)(test_rand() % 5)
                       : trial == 2 ? (float)i * 0.01f
                                    : (float)(test_rand() % 100000) * 1e-3f - 50.0f;
                order[i] = i;
            }
            g_sort_logits = l;
            qsort(order, (size_t)vocab, sizeof *order, test_cmp_rank);
            const int ks[] = { 1, 3, 40, 1024, vocab };
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                int k = ks[ki] < vocab ? ks[ki] : vocab;
                if (k > MK_SAMPLE_MAX_CAND) k = MK_SAMPLE_MAX_CAND;
                float cl[MK_SAMPLE_MAX_CAND];
                int32_t ci[MK_SAMPLE_MAX_CAND];
                int n = mk_sample_top_k(l, vocab, k, cl, ci);
                MK_CHECK(n == k);
                int ok = 1;
                for (int i = 0; i < n; i++) ok &= ci[i] == order[i] && cl[i] == l[order[i]];
                MK_CHECK(ok);
            }
        }
        free(l);
        free(order);
    }
}

static void test_cand_count(void) {
    MK_CHECK(mk_sample_cand_count(40, 512) == 40);
    MK_CHECK(mk_sample_cand_count(0, 512) == 512);
    MK_CHECK(mk_sample_cand_count(-3, 512) == 512);
    MK_CHECK(mk_sample_cand_count(600, 512) == 512);
    MK_CHECK(mk_sample_cand_count(0, 32000) == MK_SAMPLE_MAX_CAND);
    MK_CHECK(mk_sample_cand_count(MK_SAMPLE_MAX_CAND + 1, 32000) == MK_SAMPLE_MAX_CAND);
    MK_CHECK(mk_sample_cand_count(MK_SAMPLE_MAX_CAND, 32000) == MK_SAMPLE_MAX_CAND);
}

static void test_greedy(void) {
    float l[6] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f };
    MK_CHECK(mk_sample_argmax(l, 6) == 1);
    struct mk_step_cmd c = test_cmd(0.0f, 40, 0.95f, 0.05f, 7, 3);
    MK_CHECK(mk_sample_token(l, 6, &c) == 1);
    c.temperature = -1.0f;
    MK_CHECK(mk_sample_token(l, 6, &c) == 1);
    float neg[3] = { -5.0f, -1.0f, -1.0f };
    c.temperature = 0.0f;
    MK_CHECK(mk_sample_token(neg, 3, &c) == 1);
}

/* Same (seed, pos) gives the same token; top-k 1 is greedy at any temperature. */
static void test_reproducible_and_top1(void) {
    enum { V = 300 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)(test_rand() % 1000) * 0.005f;
    int32_t greedy = mk_sample_argmax(l, V);
    int differs = 0;
    int32_t first = -1;
    for (int32_t pos = 0; pos < 500; pos++) {
        struct mk_step_cmd a = test_cmd(1.5f, 0, 1.0f, 0.0f, 99, pos);
        struct mk_step_cmd b = a;
        int32_t ta = mk_sample_token(l, V, &a), tb = mk_sample_token(l, V, &b);
        MK_CHECK(ta == tb);
        MK_CHECK(ta >= 0 && ta < V);
        if (pos == 0) first = ta;
        differs |= ta != first;
        struct mk_step_cmd k1 = test_cmd(5.0f, 1, 1.0f, 0.0f, 12345 + (uint64_t)pos, pos);
        MK_CHECK(mk_sample_token(l, V, &k1) == greedy);
    }
    MK_CHECK(differs); /* a flat-ish distribution at temperature 1.5 must not give one token 500 times */
    /* Different seeds give different sequences. */
    int same = 0;
    for (int32_t pos = 0; pos < 200; pos++) {
        struct mk_step_cmd a = test_cmd(1.5f, 0, 1.0f, 0.0f, 1, pos), b = test_cmd(1.5f, 0, 1.0f, 0.0f, 2, pos);
        same += mk_sample_token(l, V, &a) == mk_sample_token(l, V, &b);
    }
    MK_CHECK(same < 150);
}

static void test_uniform_range(void) {
    double sum = 0.0;
    int ok = 1;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        float u = mk_sample_uniform(777, i);
        ok &= u >= 0.0f && u < 1.0f;
        sum += u;
    }
    MK_CHECK(ok);
    MK_CHECK(fabs(sum / n - 0.5) < 0.005);
}

/* Draws count[id] over n positions; returns the largest normalized deviation seen and checks
 * |f - p| < 4 sqrt(p (1 - p) / n) + 1e-3 for every id (p = expected[id]). */
static void test_frequencies(const char *what, const float *l, int vocab, float temp, int32_t top_k, float top_p,
                             float min_p, const double *expected) {
    const int n = 200000;
    int *count = calloc((size_t)vocab, sizeof *count);
    for (int32_t pos = 0; pos < n; pos++) {
        struct mk_step_cmd c = test_cmd(temp, top_k, top_p, min_p, 2024, pos);
        int32_t t = mk_sample_token(l, vocab, &c);
        if (t >= 0 && t < vocab) count[t]++;
    }
    double worst = 0.0;
    for (int i = 0; i < vocab; i++) {
        double f = (double)count[i] / n, p = expected[i];
        double tol = 4.0 * sqrt(p * (1.0 - p) / n) + 1e-3;
        if (fabs(f - p) >= tol) {
            mk_test_fail("FAIL %s: id %d: frequency %.5f, expected %.5f (tolerance %.5f)", what, i, f, p, tol);
        }
        if (fabs(f - p) / tol > worst) worst = fabs(f - p) / tol;
    }
    printf("%s: 200000 draws, worst |f - p| = %.2f of the tolerance\n", what, worst);
    free(count);
}

/* softmax(l / temp) over the ids in keep (others 0). */
static void test_softmax(const float *l, int vocab, double temp, const int *keep, double *out) {
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < vocab; i++)
        if (keep[i] && l[i] > mx) mx = l[i];
    for (int i = 0; i < vocab; i++) {
        out[i] = keep[i] ? exp((l[i] - mx) / temp) : 0.0;
        sum += out[i];
    }
    for (int i = 0; i < vocab; i++) out[i] /= sum;
}

static void test_distributions(void) {
    enum { V = 12 };
    float l[V] = { 2.0f, 1.5f, 1.2f, 0.3f, 0.0f, -0.4f, -1.0f, 1.9f, -2.5f, 0.8f, 0.8f, -0.1f };
    int keep[V];
    double p[V];

    for (int i = 0; i < V; i++) keep[i] = 1;
    test_softmax(l, V, 0.7, keep, p);
    test_frequencies("softmax T=0.7", l, V, 0.7f, 0, 1.0f, 0.0f, p);
    test_softmax(l, V, 1.3, keep, p);
    test_frequencies("softmax T=1.3", l, V, 1.3f, 0, 1.0f, 0.0f, p);

    /* top-k 3: ids 0 (2.0), 7 (1.9), 1 (1.5) */
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 7 || i == 1;
    test_softmax(l, V, 1.0, keep, p);
    test_frequencies("top-k 3", l, V, 1.0f, 3, 1.0f, 0.0f, p);

    /* top-p: untempered probabilities, sorted; keep the shortest prefix reaching top_p. */
    {
        double q[V];
        for (int i = 0; i < V; i++) keep[i] = 1;
        test_softmax(l, V, 1.0, keep, q);
        /* ranks: 0 (.2407), 7 (.2178), 1 (.1460), 2 (.1081), 9, 10 (.0725 each), ... */
        const int rank[] = { 0, 7, 1, 2, 9, 10 };
        double cum = 0.0;
        int n_keep = 0;
        for (int r = 0; r < 6; r++) {
            cum += q[rank[r]];
            n_keep = r + 1;
            if (cum >= 0.7) break;
        }
        MK_CHECK(n_keep == 4); /* .2407 + .2178 + .1460 = .6044 < .7, + .1081 = .7125 */
        for (int i = 0; i < V; i++) keep[i] = 0;
        for (int r = 0; r < n_keep; r++) keep[rank[r]] = 1;
        test_softmax(l, V, 0.9, keep, p);
        test_frequencies("top-p 0.7 T=0.9", l, V, 0.9f, 0, 0.7f, 0.0f, p);
    }

    /* min-p 0.4: keep p_i >= 0.4 p_max  <=>  l_i >= 2.0 + log(0.4) = 1.0837: ids 0, 7, 1, 2 */
    for (int i = 0; i < V; i++) keep[i] = l[i] >= 2.0f + logf(0.4f);
    MK_CHECK(keep[0] && keep[7] && keep[1] && keep[2] && !keep[9]);
    test_softmax(l, V, 1.2, keep, p);
    test_frequencies("min-p 0.4 T=1.2", l, V, 1.2f, 0, 1.0f, 0.4f, p);

    /* Both: top-k 5 (0, 7, 1, 2, 9) then top-p 0.95 within them (untempered, renormalized to the five),
     * then min-p 0.5 (l >= 2 + log .5 = 1.307: 0, 7, 1). */
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 7 || i == 1;
    test_softmax(l, V, 0.8, keep, p);
    test_frequencies("top-k 5 + top-p 0.95 + min-p 0.5", l, V, 0.8f, 5, 0.95f, 0.5f, p);
}

/* On a big vocabulary with top-k 40, every draw is one of the 40 best. */
static void test_top_k_membership(void) {
    enum { V = 32000 };
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = (float)(test_rand() % 100000) * 1e-4f;
    float cl[40];
    int32_t ci[40];
    mk_sample_top_k(l, V, 40, cl, ci);
    int ok = 1;
    for (int32_t pos = 0; pos < 2000; pos++) {
        struct mk_step_cmd c = test_cmd(3.0f, 40, 1.0f, 0.0f, 5, pos);
        int32_t t = mk_sample_token(l, V, &c);
        int found = 0;
        for (int j = 0; j < 40; j++) found |= ci[j] == t;
        ok &= found;
    }
    MK_CHECK(ok);
    free(l);
}

int main(void) {
    test_cand_count();
    test_top_k_matches_sort();
    test_greedy();
    test_reproducible_and_top1();
    test_uniform_range();
    test_distributions();
    test_top_k_membership();
    return mk_test_finish("sample_test");
}
