/* MK_OP_SAMPLE: the step's token, greedy from the LM head's tile maxima or drawn from the top-k of the logits, posted to the host (or, under GENERATE, fed to the next step). */
#ifndef MK_OP_SAMPLE_CUH
#define MK_OP_SAMPLE_CUH

#include "megakernel/common.cuh"
#include "megakernel/ops/norm_lm_head.cuh"
#include "core/sample_core.h"

/* An order-preserving unsigned key of a logit; -0 and +0 share one key, as they compare equal. */
__device__ __forceinline__ uint32_t mk_logit_key(float f) {
    uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The logit of a key (+0 for -0, which compares and subtracts alike). */
__device__ __forceinline__ float mk_logit_of_key(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

/* Sorting keys: logit key, then the id complemented, so that descending order is
 * mk_sample_before's order (greater logit, then lower id). */
__device__ __forceinline__ uint64_t mk_cand_key(uint32_t key, uint32_t id) {
    return ((uint64_t)key << 32) | (uint32_t)~id;
}

/* Greatest logit, lowest id on ties, over the LM head's (logit, id) tile maxima. */
__device__ int32_t mk_sample_greedy(const struct mk_task_ctx *c) {
    __shared__ float wb[MK_BLOCK_WARPS];
    __shared__ uint32_t wi[MK_BLOCK_WARPS];
    const struct mk_instr *in = c->in;
    const float *tiles = mk_arena(c) + in->buf[2];
    float best = -INFINITY;
    uint32_t bi = 0xffffffffu;
    for (uint32_t t = threadIdx.x; t < in->args.sample.n_tiles; t += MK_BLOCK_THREADS) {
        float v = __ldcg(tiles + 2u * t);
        uint32_t i = __float_as_uint(__ldcg(tiles + 2u * t + 1u));
        if (mk_better(v, i, best, bi)) {
            best = v;
            bi = i;
        }
    }
    mk_warp_best(&best, &bi);
    if ((threadIdx.x & 31u) == 0) {
        wb[threadIdx.x >> 5] = best;
        wi[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    best = wb[0];
    bi = wi[0];
    for (uint32_t w = 1; w < MK_BLOCK_WARPS; w++)
        if (mk_better(wb[w], wi[w], best, bi)) {
            best = wb[w];
            bi = wi[w];
        }
    __syncthreads();
    return (int32_t)bi;
}

/* Adds a lane's digit d to hist when take; every lane of the warp calls it together. Each warp
 * adds its lanes of one digit in a single atomic (logits crowd into a few digits, and one
 * shared-memory atomic per element made the selection take longer than the rest of the token),
 * and a warp none of whose lanes takes skips even that: past the first digit almost none does. */
__device__ __forceinline__ void mk_sample_count_digit(uint32_t d, bool take, uint32_t *hist) {
    if (!__any_sync(0xffffffffu, take)) return;
    const uint32_t peers = __match_any_sync(0xffffffffu, take ? d : 0xffffffffu);
    if (take && (threadIdx.x & 31u) == (uint32_t)(__ffs(peers) - 1)) atomicAdd(&hist[d], __popc(peers));
}

/* One lane's logit key in the radix pass that counts digit (key >> shift) & 255 of the keys whose
 * higher digits are prefix. */
__device__ __forceinline__ void mk_sample_radix_count(uint32_t key, bool ok, uint32_t mask, uint32_t prefix, int shift,
                                                      uint32_t *hist) {
    mk_sample_count_digit((key >> shift) & 255u, ok && (key & mask) == prefix, hist);
}

/* The fallback's first digit: the top 12 bits of a logit key (sign, exponent, three bits of the
 * mantissa: an eighth of an octave), so that the k-th greatest logit's digit holds few logits. */
#define MK_SAMPLE_D12_SHIFT 20
#define MK_SAMPLE_D12_BINS  4096u

/* sel = {d, keys of greater digits, keys of digit d} for the greatest digit d of the
 * MK_SAMPLE_D12_BINS in h whose count from the top reaches k, or sel[0] = MK_SAMPLE_D12_BINS when
 * none does: thread t adds 16 digits from the top, a scan over the block finds the thread, and that
 * thread the digit. */
__device__ void mk_sample_find_d12(const uint32_t *h, uint32_t k, uint32_t *sel) {
    constexpr uint32_t B = MK_SAMPLE_D12_BINS / MK_BLOCK_THREADS;
    __shared__ uint32_t wsum[MK_BLOCK_WARPS];
    const uint32_t t = threadIdx.x, lane = t & 31u, warp = t >> 5;
    const uint32_t top = MK_SAMPLE_D12_BINS - 1u - B * t; /* this thread's digits: top down to top - B + 1 */
    if (t == 0) sel[0] = MK_SAMPLE_D12_BINS;              /* no digit: fewer than k counted */
    uint32_t own = 0;
#pragma unroll
    for (uint32_t q = 0; q < B; q++) own += h[top - q];
    uint32_t upto = own;
#pragma unroll
    for (uint32_t o = 1; o < 32u; o *= 2u) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, upto, o);
        if (lane >= o) upto += v;
    }
    if (lane == 31u) wsum[warp] = upto;
    __syncthreads();
    for (uint32_t w = 0; w < warp; w++) upto += wsum[w];
    if (upto >= k && upto - own < k) {
        uint32_t above = upto - own;
        for (uint32_t q = 0; q < B; q++) {
            const uint32_t n = h[top - q];
            if (above + n >= k) {
                sel[0] = top - q;
                sel[1] = above;
                sel[2] = n;
                break;
            }
            above += n;
        }
    }
    __syncthreads();
}

/* Radix selection of the k-th greatest of n keys, 8 bits at a time from the top: sel = {the key,
 * places left at it, keys equal to it}. pass(mask, prefix, shift, hist) calls
 * mk_sample_radix_count on every key, each lane of a warp alike. */
template <class Pass> __device__ void mk_sample_radix(uint32_t k, uint32_t *hist, uint32_t *sel, Pass pass) {
    if (threadIdx.x == 0) {
        sel[0] = 0;
        sel[1] = k;
        sel[2] = 0;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint32_t i = threadIdx.x; i < 256u; i += MK_BLOCK_THREADS) hist[i] = 0;
        __syncthreads();
        const uint32_t prefix = sel[0];
        pass(mask, prefix, shift);
        __syncthreads();
        if (threadIdx.x < 32u) {
            /* The greatest digit d whose count from the top (digits above it plus its own) reaches
             * the places left, or 0 when none does. Warp 0: lane l adds digits 255 - 8 l down to
             * 248 - 8 l, a prefix over the lanes finds the lane, and that lane its digit. One thread
             * walking the digits took a shared-memory round trip per digit, 4 passes of up to 256. */
            const uint32_t lane = threadIdx.x, remaining = sel[1];
            uint32_t h[8], own = 0;
#pragma unroll
            for (int q = 0; q < 8; q++) {
                h[q] = hist[255u - 8u * lane - q];
                own += h[q];
            }
            uint32_t upto = own; /* digits from 255 through this lane's last */
#pragma unroll
            for (uint32_t off = 1; off < 32u; off *= 2u) {
                const uint32_t t = __shfl_up_sync(0xffffffffu, upto, off);
                if (lane >= off) upto += t;
            }
            const uint32_t hit = __ballot_sync(0xffffffffu, upto >= remaining);
            if (lane == (hit ? (uint32_t)__ffs(hit) - 1u : 31u)) {
                uint32_t above = upto - own;
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    const uint32_t d = 255u - 8u * lane - q;
                    if (above + h[q] >= remaining || d == 0u) {
                        sel[0] = prefix | (d << shift);
                        sel[1] = remaining - above;
                        sel[2] = h[q];
                        break;
                    }
                    above += h[q];
                }
            }
        }
        mask |= 0xffu << shift;
        __syncthreads();
    }
}

/* sel[0] = the k-th greatest key of the L tile maxima, the key whose rank (greater keys, then
 * equal ones of lower index) is k - 1: one comparison a tile a thread, where the radix selection
 * took four passes of three barriers (9,300 cycles at top-k 40, run159). kb: L words. */
__device__ void mk_sample_kth_rank(uint32_t *kb, const float *tiles, uint32_t L, uint32_t k, uint32_t *sel) {
    for (uint32_t i = threadIdx.x; i < L; i += MK_BLOCK_THREADS) kb[i] = mk_logit_key(__ldcg(tiles + 2u * i));
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < L; i += MK_BLOCK_THREADS) {
        const uint32_t key = kb[i];
        uint32_t r = 0;
        for (uint32_t j = 0; j < L; j++) {
            const uint32_t kj = kb[j];
            r += (kj > key) | ((kj == key) & (j < i));
        }
        if (r == k - 1u) sel[0] = key;
    }
    __syncthreads();
}

/* The float4s l4[base(t) + c] for segments t < n_seg and columns c < span4 (those below n4), each
 * handed to use(t, j, ok, v) with j = base(t) + c: v is l4[j] when ok. Each thread copies its
 * columns into its own MK_SAMPLE_DEPTH slots of the ring (cp.async) and reads back only those,
 * so no register holds the loads in flight and no barrier orders them; every lane calls use the
 * same number of times in the same order, so use may hold warp votes. Loads in registers kept 16
 * KB a block in flight at most (more spilled), and each round trip took some 3,500 cycles, most of
 * a sampled token's sampler (clock64 marks, run159). */
template <class Base, class Use>
__device__ __forceinline__ void mk_sample_stream(float4 *ring /* (MK_SAMPLE_DEPTH, MK_BLOCK_THREADS) */,
                                                 const float4 *l4, uint32_t n4, uint32_t n_seg, uint32_t span4,
                                                 Base base, Use use) {
    const uint32_t x = threadIdx.x, M = (span4 + MK_BLOCK_THREADS - 1u) / MK_BLOCK_THREADS, n = n_seg * M;
    uint32_t it = 0, im = 0; /* the next copy's segment and column round */
    auto issue = [&](uint32_t slot) {
        const uint32_t c = im * MK_BLOCK_THREADS + x;
        if (it < n_seg && c < span4) {
            const uint32_t j = base(it) + c;
            if (j < n4) mk_cp_async16(ring + slot * MK_BLOCK_THREADS + x, l4 + j, 16u);
        }
        if (++im == M) {
            im = 0;
            it++;
        }
        mk_cp_async_commit(); /* empty past the end: the wait below counts groups */
    };
    for (uint32_t r = 0; r < MK_SAMPLE_DEPTH; r++) issue(r);
    uint32_t t = 0, m = 0;
    for (uint32_t r = 0; r < n; r++) {
        mk_cp_async_wait_group<MK_SAMPLE_DEPTH - 1u>();
        const uint32_t slot = r % MK_SAMPLE_DEPTH, c = m * MK_BLOCK_THREADS + x;
        const uint32_t j = c < span4 ? base(t) + c : n4;
        const float4 v = ring[slot * MK_BLOCK_THREADS + x];
        use(t, j, j < n4, v);
        issue(slot); /* after use: the slot's value has been read */
        if (++m == M) {
            m = 0;
            t++;
        }
    }
    mk_cp_async_wait_all();
}

/* In order, as mk_sample_pick adds them. */
__device__ __forceinline__ float mk_sample_sum(const float *p, uint32_t n) {
    float s = 0.0f;
#pragma unroll 8
    for (uint32_t i = 0; i < n; i++) s += p[i];
    return s;
}

/* p[i] = p[0] + ... + p[i] for i < n, added in order as mk_sample_pick's running sums are (thread 0
 * alone). With no exit the loop runs ahead of its loads: mk_sample_pick's scan that stops at its
 * target took 75 cycles an element at top-k 1024, the sum 9 (run164). Returns the total. */
__device__ __forceinline__ float mk_sample_prefix(float *p, uint32_t n) {
    float s = 0.0f;
#pragma unroll 8
    for (uint32_t i = 0; i < n; i++) {
        s += p[i];
        p[i] = s;
    }
    return s;
}

/* mk_sample_pick with its element-wise steps spread over the block: each expf and division is the
 * same operation on the same floats, and thread 0 adds them in the same order, so the token is
 * the same. One thread doing all of it took 8.7 us of a top-k-40 token and 0.17 ms at top-k 1024
 * (clock64 marks, run159). q: scratch of n floats beside p's. */
__device__ int32_t mk_sample_pick_block(const float *logit, const int32_t *id, uint32_t n,
                                        const struct mk_step_cmd *cmd, float *p, float *q) {
    __shared__ float s_sum;
    __shared__ uint32_t s_cut, s_pick, s_at;
    if (n == 0) return -1;
    const float mx = logit[0], top_p = cmd->top_p, min_p = cmd->min_p;
    /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p); the first below cuts */
    const float lim = min_p > 0.0f ? mx + __builtin_logf(min_p) : 0.0f;
    if (threadIdx.x == 0) s_cut = n;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < n; i += MK_BLOCK_THREADS) {
        p[i] = __builtin_expf(logit[i] - mx);
        if (min_p > 0.0f && i > 0u && !(logit[i] >= lim)) atomicMin(&s_cut, i);
    }
    __syncthreads();
    if (threadIdx.x == 0) s_sum = mk_sample_sum(p, n);
    __syncthreads();
    const float sum = s_sum;
    if (top_p < 1.0f)
        for (uint32_t i = threadIdx.x; i < n; i += MK_BLOCK_THREADS) q[i] = p[i] / sum;
    __syncthreads();
    /* The running sums only grow (every term is in [0, 1]), so the first to reach a target is the
     * one place where they cross it, found by every thread at once. */
    if (threadIdx.x == 0) {
        if (top_p < 1.0f) mk_sample_prefix(q, n);
        s_at = n;
    }
    __syncthreads();
    if (top_p < 1.0f)
        for (uint32_t i = threadIdx.x; i < n; i += MK_BLOCK_THREADS)
            if (q[i] >= top_p && (i == 0u || !(q[i - 1u] >= top_p))) s_at = i;
    __syncthreads();
    const uint32_t keep = min(s_at < n ? s_at + 1u : n, min_p > 0.0f ? s_cut : n);
    for (uint32_t i = threadIdx.x; i < keep; i += MK_BLOCK_THREADS)
        p[i] = __builtin_expf((logit[i] - mx) / cmd->temperature);
    __syncthreads();
    if (threadIdx.x == 0) {
        /* s_sum, read above into sum, holds the draw's target from here */
        s_sum = mk_sample_uniform(cmd->seed, cmd->pos) * mk_sample_prefix(p, keep);
        s_pick = keep; /* none reaches the target: the last */
    }
    __syncthreads();
    const float target = s_sum;
    for (uint32_t i = threadIdx.x; i < keep; i += MK_BLOCK_THREADS)
        if (target < p[i] && (i == 0u || !(target < p[i - 1u]))) s_pick = i;
    __syncthreads();
    return id[s_pick < keep ? s_pick : keep - 1u];
}

/* Top-k, then mk_sample_pick's draw: the CPU executor's choice from the same logits.
 * Usually one pass over the logits of a few tiles: at least k of them reach the k-th greatest of
 * the LM head's tile maxima (found among the few tiles), so every logit at or above it is a
 * candidate, and the candidates sorted by (logit, lower id) start with the top-k. When k exceeds
 * the tiles or the candidates overflow their buffer, radix selection over all logits finds the
 * k-th key exactly. */
__device__ int32_t mk_sample_topk(const struct mk_task_ctx *c) {
    __shared__ uint32_t sel[4]; /* prefix, remaining, count at prefix, unused */
    __shared__ uint32_t cnt[2]; /* candidates above the threshold, ties taken */
    __shared__ uint32_t wcount[MK_BLOCK_WARPS];
    __shared__ uint32_t ext[2]; /* the greatest and least tile maxima's keys */
    const struct mk_instr *in = c->in;
    const struct mk_step_cmd *cmd = c->cmd;
    const float *logits = mk_arena(c) + in->buf[1];
    const float *tiles = mk_arena(c) + in->buf[2]; /* (n_tiles, 2): each tile's greatest logit, its id */
    const uint32_t V = in->args.sample.vocab, L = in->args.sample.n_tiles;
    uint32_t k =
        (cmd->top_k <= 0 || cmd->top_k > (int32_t)MK_SAMPLE_MAX_CAND) ? MK_SAMPLE_MAX_CAND : (uint32_t)cmd->top_k;
    if (k > V) k = V;
    uint64_t *keys = (uint64_t *)c->smem;                   /* (MK_SAMPLE_MAX_CAND) */
    float *cl = c->smem + 2u * MK_SAMPLE_MAX_CAND;          /* (MK_SAMPLE_MAX_CAND) logits */
    int32_t *cid = (int32_t *)(cl + MK_SAMPLE_MAX_CAND);    /* (MK_SAMPLE_MAX_CAND) ids */
    float *cp = (float *)(cid + MK_SAMPLE_MAX_CAND);        /* (MK_SAMPLE_MAX_CAND) scratch */
    uint32_t *hist = (uint32_t *)(cp + MK_SAMPLE_MAX_CAND); /* (256) */
    float4 *ring = (float4 *)(hist + 256);                  /* (MK_SAMPLE_DEPTH, MK_BLOCK_THREADS) */
    /* The row as the aligned float4s that hold it (a chunk row starts j * vocab floats into the
     * buffer); element i of the row is float 4 j + q - off of them. */
    const uint32_t off = (uint32_t)(((uintptr_t)logits / sizeof(float)) % 4u);
    const float4 *l4 = (const float4 *)(logits - off);
    const uint32_t n4 = (V + off + 3u) / 4u;

    uint32_t n_keys = MK_SAMPLE_MAX_CAND + 1u; /* sorted below; more: not a candidate set */
    if (k <= L) {
        if (L <= MK_SAMPLE_MAX_CAND) { /* keys to cp */
            mk_sample_kth_rank((uint32_t *)cp, tiles, L, k, sel);
        } else {
            mk_sample_radix(k, hist, sel, [&](uint32_t mask, uint32_t prefix, int shift) {
                for (uint32_t i0 = 0; i0 < L; i0 += MK_BLOCK_THREADS) {
                    const uint32_t i = i0 + threadIdx.x;
                    mk_sample_radix_count(i < L ? mk_logit_key(__ldcg(tiles + 2u * i)) : 0u, i < L, mask, prefix, shift,
                                          hist);
                }
            });
        }
        const uint32_t T = sel[0];
        /* Only the tiles whose maximum reaches T hold candidates (about k of them): listed in cid,
         * which is free until the candidates are sorted, when the program gives the tiles' rows. */
        const uint32_t rpt = in->args.sample.rows_per_tile;
        uint32_t *tl = (uint32_t *)cid;
        if (threadIdx.x == 0) {
            cnt[0] = 0;
            cnt[1] = 0;
        }
        __syncthreads();
        const bool ranked = L <= MK_SAMPLE_MAX_CAND; /* the tiles' keys are in cp */
        if (rpt)
            for (uint32_t t = threadIdx.x; t < L; t += MK_BLOCK_THREADS)
                if ((ranked ? ((const uint32_t *)cp)[t] : mk_logit_key(__ldcg(tiles + 2u * t))) >= T) {
                    const uint32_t at = atomicAdd(&cnt[1], 1u);
                    if (at < MK_SAMPLE_MAX_CAND) tl[at] = t;
                }
        __syncthreads();
        const uint32_t nt = rpt ? cnt[1] : MK_SAMPLE_MAX_CAND + 1u;
        const bool listed = nt <= MK_SAMPLE_MAX_CAND;
        /* A listed tile is the u4 float4s from the one holding its first row; its rows alone count. */
        const uint32_t u4 = (rpt + 3u) / 4u + 1u;
        mk_sample_stream(
            ring, l4, n4, listed ? nt : 1u, listed ? u4 : n4,
            [&](uint32_t t) { return listed ? (tl[t] * rpt + off) / 4u : 0u; },
            [&](uint32_t t, uint32_t j, bool ok, float4 f) {
                if (!ok) return;
                const uint32_t lo = listed ? tl[t] * rpt : 0u, hi = listed ? min(V, lo + rpt) : V;
                const float e[4] = { f.x, f.y, f.z, f.w };
#pragma unroll
                for (uint32_t q = 0; q < 4u; q++) {
                    const uint32_t i = 4u * j + q - off, key = mk_logit_key(e[q]); /* wraps below the row */
                    if (i >= lo && i < hi && key >= T) {
                        const uint32_t at = atomicAdd(&cnt[0], 1u);
                        if (at < MK_SAMPLE_MAX_CAND) keys[at] = mk_cand_key(key, i);
                    }
                }
            });
        __syncthreads();
        n_keys = cnt[0];
        __syncthreads(); /* cnt is reused below */
    }
    if (n_keys > MK_SAMPLE_MAX_CAND || n_keys < k) {
        /* Two passes over the logits where the radix selection took four and a fifth to collect
         * (33-50 us each for llama's 128,256, run161): a histogram of their 12-bit first digits, then
         * the logits of greater digits straight to the candidates and those of the k-th's digit to
         * buf, whose radix selection runs in shared memory. More at that digit than buf holds, or
         * more ties at the threshold than places: the selection over all logits below. */
        bool done = false;
        uint32_t *h12 = (uint32_t *)c->smem; /* (MK_SAMPLE_D12_BINS): over keys, cl and cid */
        uint64_t *buf = (uint64_t *)cl;      /* (3 * MK_SAMPLE_MAX_CAND / 2): over cl, cid and cp */
        const uint32_t buf_cap = 3u * MK_SAMPLE_MAX_CAND / 2u;
        for (uint32_t i = threadIdx.x; i < MK_SAMPLE_D12_BINS; i += MK_BLOCK_THREADS) h12[i] = 0;
        if (threadIdx.x == 0) {
            ext[0] = 0;
            ext[1] = 0xffffffffu;
        }
        __syncthreads();
        for (uint32_t t = threadIdx.x; t < L; t += MK_BLOCK_THREADS) {
            const uint32_t key = mk_logit_key(__ldcg(tiles + 2u * t));
            atomicMax(&ext[0], key);
            atomicMin(&ext[1], key);
        }
        __syncthreads();
        /* Only the logits at or above lb are counted: half the tile maxima's spread below the
         * least of them. Each maximum is the greatest of a tile's thousand logits, so the k-th
         * greatest logit lies about the least of them, and lb lets through the top of the
         * distribution (how many logits reach it was not counted; this pass takes about what a
         * collection pass does, run162); counting them all, one shared-memory atomic each or a
         * warp's match per logit, took 0.15 ms a pass (run161). If fewer than k reach it, the
         * selection over all logits. */
        const float hi = mk_logit_of_key(ext[0]), lo = mk_logit_of_key(ext[1]), lbf = lo - 0.5f * (hi - lo);
        const uint32_t lb = isfinite(lbf) ? mk_logit_key(lbf) : 0u;
        mk_sample_stream(
            ring, l4, n4, 1u, n4, [](uint32_t) { return 0u; },
            [&](uint32_t, uint32_t j, bool ok, float4 f) {
                if (!ok) return;
                const float e[4] = { f.x, f.y, f.z, f.w };
#pragma unroll
                for (uint32_t q = 0; q < 4u; q++) {
                    const uint32_t i = 4u * j + q - off, key = mk_logit_key(e[q]); /* i wraps below the row */
                    if (i < V && key >= lb) atomicAdd(&h12[key >> MK_SAMPLE_D12_SHIFT], 1u);
                }
            });
        __syncthreads();
        mk_sample_find_d12(h12, k, sel);
        const uint32_t d = sel[0], above = sel[1], at_d = sel[2];
        if (d < MK_SAMPLE_D12_BINS && at_d <= buf_cap) {
            if (threadIdx.x == 0) {
                cnt[0] = 0;
                cnt[1] = 0;
            }
            __syncthreads(); /* h12 read: keys and buf are free */
            mk_sample_stream(
                ring, l4, n4, 1u, n4, [](uint32_t) { return 0u; },
                [&](uint32_t, uint32_t j, bool ok, float4 f) {
                    if (!ok) return;
                    const float e[4] = { f.x, f.y, f.z, f.w };
#pragma unroll
                    for (uint32_t q = 0; q < 4u; q++) {
                        const uint32_t i = 4u * j + q - off, key = mk_logit_key(e[q]);
                        if (i >= V || key < lb) continue; /* as counted */
                        const uint32_t dd = key >> MK_SAMPLE_D12_SHIFT;
                        if (dd > d)
                            keys[atomicAdd(&cnt[0], 1u)] = mk_cand_key(key, i);
                        else if (dd == d)
                            buf[atomicAdd(&cnt[1], 1u)] = mk_cand_key(key, i);
                    }
                });
            __syncthreads();
            mk_sample_radix(k - above, hist, sel, [&](uint32_t mask, uint32_t prefix, int shift) {
                for (uint32_t i0 = 0; i0 < at_d; i0 += MK_BLOCK_THREADS) {
                    const uint32_t i = i0 + threadIdx.x;
                    mk_sample_radix_count(i < at_d ? (uint32_t)(buf[i] >> 32) : 0u, i < at_d, mask, prefix, shift,
                                          hist);
                }
            });
            const uint32_t T = sel[0], need_eq = sel[1], n_eq = sel[2];
            if (n_eq == need_eq) {
                if (threadIdx.x == 0) cnt[1] = 0; /* cnt[0] is above */
                __syncthreads();
                for (uint32_t i = threadIdx.x; i < at_d; i += MK_BLOCK_THREADS) {
                    const uint64_t ck = buf[i];
                    const uint32_t key = (uint32_t)(ck >> 32);
                    if (key > T)
                        keys[atomicAdd(&cnt[0], 1u)] = ck;
                    else if (key == T)
                        keys[k - need_eq + atomicAdd(&cnt[1], 1u)] = ck;
                }
                done = true;
            }
        }
        __syncthreads();
        if (!done) {
            mk_sample_radix(k, hist, sel, [&](uint32_t mask, uint32_t prefix, int shift) {
                mk_sample_stream(
                    ring, l4, n4, 1u, n4, [](uint32_t) { return 0u; },
                    [&](uint32_t, uint32_t j, bool ok, float4 f) {
                        const float e[4] = { f.x, f.y, f.z, f.w };
#pragma unroll
                        for (uint32_t q = 0; q < 4u; q++) {
                            const uint32_t i = 4u * j + q - off; /* wraps below the row */
                            mk_sample_radix_count(mk_logit_key(e[q]), ok && i < V, mask, prefix, shift, hist);
                        }
                    });
            });
            const uint32_t T = sel[0], need_eq = sel[1], n_eq = sel[2];
            const uint32_t n_gt = k - need_eq;
            if (threadIdx.x == 0) {
                cnt[0] = 0;
                cnt[1] = 0;
            }
            __syncthreads();
            if (n_eq == need_eq) {
                mk_sample_stream(
                    ring, l4, n4, 1u, n4, [](uint32_t) { return 0u; },
                    [&](uint32_t, uint32_t j, bool ok, float4 f) {
                        if (!ok) return;
                        const float e[4] = { f.x, f.y, f.z, f.w };
#pragma unroll
                        for (uint32_t q = 0; q < 4u; q++) {
                            const uint32_t i = 4u * j + q - off, key = mk_logit_key(e[q]);
                            if (i >= V) continue;
                            if (key > T)
                                keys[atomicAdd(&cnt[0], 1u)] = mk_cand_key(key, i);
                            else if (key == T)
                                keys[n_gt + atomicAdd(&cnt[1], 1u)] = mk_cand_key(key, i);
                        }
                    });
            } else {
                /* More ties at the threshold than places: the lowest ids win, so take them in order. */
                const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
                for (uint32_t base = 0; base < V; base += MK_BLOCK_THREADS) {
                    uint32_t i = base + threadIdx.x;
                    uint32_t key = i < V ? mk_logit_key(__ldcg(logits + i)) : 0u;
                    bool gt = i < V && key > T, eq = i < V && key == T;
                    if (gt) keys[atomicAdd(&cnt[0], 1u)] = mk_cand_key(key, i);
                    uint32_t ball = __ballot_sync(0xffffffffu, eq);
                    if (lane == 0) wcount[warp] = __popc(ball);
                    __syncthreads();
                    uint32_t at = cnt[1];
                    for (uint32_t w = 0; w < warp; w++) at += wcount[w];
                    at += __popc(ball & ((1u << lane) - 1u));
                    if (eq && at < need_eq) keys[n_gt + at] = mk_cand_key(key, i);
                    __syncthreads();
                    if (threadIdx.x == 0) {
                        uint32_t s = cnt[1];
                        for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++) s += wcount[w];
                        cnt[1] = s;
                    }
                    __syncthreads();
                }
            }
        }
        n_keys = k;
        __syncthreads();
    }

    /* Sorted descending. Up to a key a thread, by rank (the keys are distinct: each holds its id),
     * into the ring, free by now: one barrier, where the bitonic sort's 21 stages of 48 keys took
     * 6,300 cycles (run159). Else a bitonic sort in place, padded to a power of two with keys below
     * every real one. */
    const uint64_t *sorted = (const uint64_t *)ring;
    if (n_keys <= MK_BLOCK_THREADS) {
        if (threadIdx.x < n_keys) {
            const uint64_t key = keys[threadIdx.x];
            uint32_t r = 0;
            for (uint32_t j = 0; j < n_keys; j++) r += keys[j] > key;
            ((uint64_t *)ring)[r] = key;
        }
        __syncthreads();
    } else {
        uint32_t P = 1;
        while (P < n_keys) P <<= 1;
        for (uint32_t i = n_keys + threadIdx.x; i < P; i += MK_BLOCK_THREADS) keys[i] = 0;
        __syncthreads();
        for (uint32_t size = 2; size <= P; size <<= 1) {
            for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
                for (uint32_t i = threadIdx.x; i < P; i += MK_BLOCK_THREADS) {
                    uint32_t j = i ^ stride;
                    if (j > i) {
                        bool desc = (i & size) == 0;
                        uint64_t a = keys[i], b = keys[j];
                        if ((a < b) == desc) {
                            keys[i] = b;
                            keys[j] = a;
                        }
                    }
                }
                __syncthreads();
            }
        }
        sorted = keys;
    }
    /* Each logit from its key: the logits would be another round trip. */
    for (uint32_t i = threadIdx.x; i < k; i += MK_BLOCK_THREADS) {
        uint32_t id = ~(uint32_t)sorted[i];
        cid[i] = (int32_t)id;
        cl[i] = mk_logit_of_key((uint32_t)(sorted[i] >> 32));
    }
    __syncthreads();
    return mk_sample_pick_block(cl, cid, k, cmd, cp, (float *)keys);
}

/* Thread 0 under GENERATE, after step tok was sampled: the token into the ring (waiting while the
 * host is MK_GEN_RING behind), then either the next step opened with tok at pos + 1, or the end
 * posted to the host and block 0 sent back to the mailbox. cancel: the host's flag, read early. */
__device__ void mk_sample_generate(const struct mk_task_ctx *c, int32_t tok, uint32_t cancel) {
    const struct mk_kernel_args *a = c->a;
    struct mk_step_state *st = (struct mk_step_state *)a->step_state;
    struct mk_mailbox *mb = (struct mk_mailbox *)a->mailbox;
    const struct mk_step_cmd *cmd = c->cmd;
    const uint32_t i = __ldcg(&st->gen_count);
    uint32_t read = __ldcg(&st->gen_read);
    if (i - read >= MK_GEN_RING) {
        uint64_t last = mk_globaltimer();
        for (;;) {
            read = mk_ld_acquire_sys(&mb->gen_read);
            if (i - read < MK_GEN_RING) break;
            __nanosleep(2000);
            const uint64_t now = mk_globaltimer();
            const bool host = now - last > 100000u;
            if (host) last = now;
            if (mk_should_abort(a, host)) return; /* the others leave by the relay */
        }
        st->gen_read = read;
    }
    const uint64_t now = mk_globaltimer();
    mb->gen_token[i % MK_GEN_RING] = tok;
    mb->gen_t_ns[i % MK_GEN_RING] = now;
    const uint32_t why = mk_gen_end_after(tok, i + 1u, cmd->pos, a->n_ctx, __ldcg(&st->gen_max), st->gen_stop,
                                          __ldcg(&st->gen_n_stop), cancel);
    __threadfence_system();
    mk_st_release_sys(&mb->gen_count, i + 1u);
    st->gen_count = i + 1u;
    if (why == MK_GEN_RUNNING) {
        struct mk_step_cmd next = *cmd;
        next.token = tok;
        next.pos = cmd->pos + 1;
        st->cmd = next;
        st->step = c->step + 1u;
        st->t_start_ns = now;
        mk_st_release_gpu(&st->go, c->step + 2u);
        return;
    }
    mb->out_token = tok;
    mb->t_end_ns = now;
    mb->gen_why = why;
    __threadfence_system();
    mk_st_release_sys(&mb->done_seq, __ldcg(&st->n_cmd));
    mk_st_release_gpu(&st->gen_over, c->step + 2u);
}

__device__ void mk_op_sample(const struct mk_task_ctx *c) {
    const bool gen = c->cmd->cmd == MK_CMD_GENERATE && c->a->mailbox;
    /* The host's cancel flag crosses PCIe: asked for before the selection so that the read's
     * latency hides behind it. */
    uint32_t cancel = 0;
    if (gen && threadIdx.x == 0) cancel = mk_ld_relaxed_sys(&((struct mk_mailbox *)c->a->mailbox)->gen_cancel);
    int32_t tok = c->cmd->temperature <= 0.0f ? mk_sample_greedy(c) : mk_sample_topk(c);
    if (threadIdx.x != 0) return;
    struct mk_step_state *st = (struct mk_step_state *)c->a->step_state;
    st->out_token = tok;
    if (gen) {
        mk_sample_generate(c, tok, cancel);
    } else if (c->a->mailbox) {
        struct mk_mailbox *mb = (struct mk_mailbox *)c->a->mailbox;
        /* Block 0 wrote the step's start time when it took the command. */
        uint64_t t0 = __ldcg((const unsigned long long *)&st->t_start_ns);
        mb->out_token = tok;
        mb->t_start_ns = t0;
        mb->t_end_ns = mk_globaltimer();
        __threadfence_system();
        mk_st_release_sys(&mb->done_seq, __ldcg(&st->n_cmd));
    }
}

#endif
