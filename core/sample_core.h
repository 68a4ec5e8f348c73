/* The sampler's arithmetic, shared verbatim by host C and CUDA device code so that every executor
 * draws the same token from the same logits. */
#ifndef MK_SAMPLE_CORE_H
#define MK_SAMPLE_CORE_H

#include <stdint.h>

#ifdef __CUDACC__
#define MK_HD __host__ __device__ __forceinline__
#else
#define MK_HD static inline
#endif

/* A uniform draw in [0, 1) that depends only on (seed, pos): no sampler state to carry across
 * the host/device boundary, and a replay of the same positions draws the same numbers. */
MK_HD float mk_sample_uniform(uint64_t seed, int32_t pos) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(uint32_t)(pos + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* True when candidate (la, ia) ranks before (lb, ib): greater logit, then lower id. */
MK_HD int mk_sample_before(float la, int32_t ia, float lb, int32_t ib) { return la > lb || (la == lb && ia < ib); }

/* Given n candidates sorted by mk_sample_before (the top-k of the logits), applies llama.cpp's
 * order: top-p, then min-p on the untempered distribution, then temperature, then one draw with u.
 * Scratch p must hold n floats. Returns the chosen id. */
MK_HD int32_t mk_sample_pick(const float *logit, const int32_t *id, int n, float temperature, float top_p, float min_p,
                             float u, float *p) {
    if (n <= 0) return -1;
    float mx = logit[0];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        p[i] = __builtin_expf(logit[i] - mx);
        sum += p[i];
    }
    int keep = n;
    if (top_p < 1.0f) {
        float cum = 0.0f;
        for (int i = 0; i < n; i++) {
            cum += p[i] / sum;
            if (cum >= top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
        float lim = mx + __builtin_logf(min_p);
        int k = 1;
        while (k < keep && logit[k] >= lim) k++;
        keep = k;
    }
    float tsum = 0.0f;
    for (int i = 0; i < keep; i++) {
        p[i] = __builtin_expf((logit[i] - mx) / temperature);
        tsum += p[i];
    }
    float target = u * tsum;
    float cum = 0.0f;
    for (int i = 0; i < keep; i++) {
        cum += p[i];
        if (target < cum) return id[i];
    }
    return id[keep - 1];
}

#endif
