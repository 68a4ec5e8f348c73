/* MK_OP_ATTN_PARTIAL: the query heads of one KV head over one split of the positions, as (o, m, l) per head for the combine. */
#ifndef MK_OP_ATTN_PARTIAL_CUH
#define MK_OP_ATTN_PARTIAL_CUH

#include "megakernel/common.cuh"
#include "megakernel/ops/attn_combine.cuh"

/* The K and V rows of positions t0 .. t0 + n into stage buffers with asynchronous copies of four
 * elements (16 bytes of f32, 8 of f16); the caller commits the group. Rows n .. tile of the buffers
 * keep stale data that nothing reads. */
template <typename KV>
__device__ __forceinline__ void mk_attn_issue(KV *ks, KV *vs, const KV *kb, const KV *vb, uint32_t t0, uint32_t n,
                                              uint32_t hd, uint32_t kv_dim) {
    const uint32_t q4 = hd / 4u, stride = hd + 4u;
    for (uint32_t i = threadIdx.x; i < n * q4; i += MK_BLOCK_THREADS) {
        const uint32_t j = i / q4, e = (i % q4) * 4u;
        const uint64_t off = (uint64_t)(t0 + j) * kv_dim + e;
        if (sizeof(KV) == 4u) {
            mk_cp_async16(ks + j * stride + e, kb + off, 16u);
            mk_cp_async16(vs + j * stride + e, vb + off, 16u);
        } else {
            mk_cp_async8(ks + j * stride + e, kb + off);
            mk_cp_async8(vs + j * stride + e, vb + off);
        }
    }
}

/* Where a split's result goes: its (o, m, l) row per query head for the merge, or, while split 0
 * alone holds positions (mk_attn_solo), the attention output of the task's query heads itself and
 * its int8-level copy. */
struct mk_attn_dst {
    float *part;  /* (n_head, n_blocks, hd + 2) */
    float *final; /* (n_head, hd), or NULL: write part */
    float *xq;    /* int8-level copy of the n_head * hd output, or NULL */
    uint32_t h0, b, nb, n_head;
};

/* The block's partial from each warp's (o, m, l) rows in ws (warps, g, hd + 2): out row (h, b)
 * as the tiled path writes it; or a solo task's output. */
__device__ __forceinline__ void mk_attn_merge_warps(float *ws, uint32_t g, uint32_t hd, const struct mk_attn_dst *d) {
    const uint32_t w2 = hd + 2u;
    __syncthreads();
    if (d->final) { /* a solo task: its warps merge as a merge's splits do, into the output */
        mk_attn_merge_rows(ws, MK_BLOCK_WARPS, g * w2, w2, g, hd, ws + MK_BLOCK_WARPS * g * w2,
                           d->final + (uint64_t)d->h0 * hd, d->xq, d->h0, d->n_head);
        __syncthreads(); /* ws and its weights are read above by other threads than their writers */
        return;
    }
    for (uint32_t i = threadIdx.x; i < g * w2; i += MK_BLOCK_THREADS) {
        const uint32_t h = i / w2, e = i % w2;
        float mx = -INFINITY;
        for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++) mx = fmaxf(mx, ws[(w * g + h) * w2 + hd]);
        float acc = 0.0f;
        for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++) {
            const float *row = ws + (w * g + h) * w2;
            if (row[hd] == -INFINITY) continue; /* a warp with no positions */
            acc += row[e] * expf(row[hd] - mx); /* o, or at hd + 1 the sum l */
        }
        d->part[((uint64_t)(d->h0 + h) * d->nb + d->b) * w2 + e] = e == hd ? mx : acc;
    }
    __syncthreads(); /* ws is read above by other threads than its writers */
}

/* The block's partial, or a solo task's output, from np (o, m, l) rows per head in ws (np, g, hd + 2),
 * np <= 32, in one pass: warp h finds head h's maximum, the rows' weights and the sum l, then every
 * thread sums one output element over the rows. mk_attn_rows's 32 row groups (8 warps of 4) went
 * through shuffles within each warp, then mk_attn_merge_warps over the warps: two chains of
 * exponentials and barriers that took 2.4 us of a 7.8 us split at position 1000 on the H200, and of
 * a 4.1 us solo task at 100 (clock64 marks; BENCHMARKS.md, forty-fifth session). */
__device__ __forceinline__ void mk_attn_merge_parts(float *ws, uint32_t np, uint32_t g, uint32_t hd,
                                                    const struct mk_attn_dst *d) {
    const uint32_t w2 = hd + 2u, warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    float *fac = ws + np * g * w2; /* (g, np) weights, then (g) maxima and (g) sums */
    __syncthreads();
    if (warp < g) {
        const float *row = ws + ((uint64_t)min(lane, np - 1u) * g + warp) * w2; /* lanes past np read a row, unused */
        const float m = lane < np ? row[hd] : -INFINITY, mx = mk_warp_max(m);
        const float f = m == -INFINITY ? 0.0f : expf(m - mx); /* a row group with no position weighs 0 */
        const float ls = mk_warp_sum(f == 0.0f ? 0.0f : f * row[hd + 1u]);
        if (lane < np) fac[warp * np + lane] = f;
        if (lane == 0) {
            fac[g * np + warp] = mx;
            fac[g * np + g + warp] = ls;
        }
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < g * hd; i += MK_BLOCK_THREADS) {
        const uint32_t h = i / hd, e = i % hd;
        const float *fh = fac + h * np;
        float acc = 0.0f;
        for (uint32_t k = 0; k < np; k++) acc += ws[((uint64_t)k * g + h) * w2 + e] * fh[k];
        if (d->final) {
            const float v = acc / fac[g * np + g + h];
            d->final[(uint64_t)d->h0 * hd + i] = v;
            if (d->xq) mk_warp_store_xq(v, (d->h0 * hd + i) / 32u, d->n_head * hd, d->xq);
        } else {
            d->part[((uint64_t)(d->h0 + h) * d->nb + d->b) * w2 + e] = acc;
        }
    }
    if (!d->final && threadIdx.x < 2u * g) {
        const uint32_t h = threadIdx.x % g, e = hd + threadIdx.x / g;
        d->part[((uint64_t)(d->h0 + h) * d->nb + d->b) * w2 + e] = fac[g * np + (e - hd) * g + h];
    }
    __syncthreads(); /* ws and fac are read above by other threads than their writers */
}

/* Query heads per KV head that mk_attn_rows takes. */
#define MK_ATTN_ROWS_MAX_G 4
/* Row groups each lane loads per batch of mk_attn_rows (16 bytes of K and of V each). Four: a
 * 128-position split is then one batch a warp, one round of loads. Two were chosen when short
 * splits of four heads took the first positions and four left most warps idle (twentieth
 * session); the solo step takes those now, a head a task. With the merge in one pass and the
 * one-head loop for solo tasks, four against two (base) measured llama-1b Q4_K_M 2-6 % faster below
 * position 640 and 1-2 % past it, llama-8b Q4_K_M 1.2-1.7 % (BENCHMARKS.md, forty-fifth session). */
#ifndef MK_ATTN_ROWS_U
#define MK_ATTN_ROWS_U 4
#endif

/* The split over an f16 cache, rows to lanes: a row's HD dimensions lie on HD / 8 lanes, 8 each
 * (one 16-byte load of K and one of V), so a warp covers 32 * 8 / HD rows per load and a score
 * takes log2(HD / 8) shuffles, not the 5 of a whole-warp sum: mk_attn_warps spent about 20
 * shuffles a position at g = 4, which held the attention at a third of the read bandwidth
 * whatever the element size. Each row group keeps its own running (o, m, l) per query head, and
 * all of them merge in shared memory in one pass (mk_attn_merge_parts). G, the heads the loop
 * runs: 1 for a solo task's head, MK_ATTN_ROWS_MAX_G for a split's (heads past g compute on zero
 * queries, unwritten). The loop has no per-head control flow: a row group with no position yet
 * weighs its rows by exp(-inf - 0) = 0 instead of skipping them, so the heads' chains can overlap;
 * the one-head loop made the solo tasks 1-3 % faster than the four-head one with g = 1 (forty-fourth
 * session). */
template <int HD, int G>
__device__ __forceinline__ void mk_attn_rows(const struct mk_task_ctx *c, uint32_t g, uint32_t lo, uint32_t hi,
                                             const float *q, const __half *kb, const __half *vb,
                                             const struct mk_attn_dst *d) {
    constexpr int U = MK_ATTN_ROWS_U;
    constexpr uint32_t LPR = HD / 8u, R = 32u / LPR; /* lanes per row, rows per load */
    static_assert(MK_BLOCK_WARPS * R <= 32u && G <= (int)MK_BLOCK_WARPS,
                  "mk_attn_merge_parts: a warp a head, a lane a row");
    const uint32_t kv_dim = c->a->kv_dim, warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    const uint32_t dg = lane % LPR, rg = lane / LPR;
    const float scale = 1.0f / sqrtf((float)HD);
    float qr[G][8], o[G][8], m[G], l[G];
#pragma unroll
    for (int h = 0; h < G; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            qr[h][e] = (uint32_t)h < g ? __ldcg(q + h * HD + dg * 8u + e) : 0.0f;
            o[h][e] = 0.0f;
        }
    }
    const uint32_t rows = U * R, n_batches = (hi - lo + rows - 1u) / rows;
    for (uint32_t bi = warp; bi < n_batches; bi += MK_BLOCK_WARPS) {
        const uint32_t t0 = lo + bi * rows + rg;
        uint4 kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; u++) { /* past hi: row hi - 1 again, its score masked below */
            const uint64_t off = (uint64_t)min(t0 + u * R, hi - 1u) * kv_dim + dg * 8u;
            kr[u] = __ldcg((const uint4 *)(kb + off));
            vr[u] = __ldcg((const uint4 *)(vb + off));
        }
        float kc[U][8];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t w[4] = { kr[u].x, kr[u].y, kr[u].z, kr[u].w };
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = mk_h2_to_f2(w[i]);
                kc[u][2 * i] = f.x;
                kc[u][2 * i + 1] = f.y;
            }
        }
#pragma unroll
        for (int h = 0; h < G; h++) {
            float sc[U], mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e += 2) {
                    a0 = fmaf(qr[h][e], kc[u][e], a0);
                    a1 = fmaf(qr[h][e + 1], kc[u][e + 1], a1);
                }
                float a = a0 + a1;
#pragma unroll
                for (uint32_t off = LPR / 2u; off > 0u; off /= 2u) a += __shfl_xor_sync(0xffffffffu, a, off);
                sc[u] = t0 + u * R < hi ? a * scale : -INFINITY;
                mx = fmaxf(mx, sc[u]);
            }
            const float m_new = fmaxf(m[h], mx);
            const float ms = m_new == -INFINITY ? 0.0f : m_new; /* no position yet: every weight 0 */
            const float r = expf(m[h] - ms);
            float acc[8], ps = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = o[h][e] * r;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const float p = expf(sc[u] - ms);
                const uint32_t w[4] = { vr[u].x, vr[u].y, vr[u].z, vr[u].w };
                ps += p;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 f = mk_h2_to_f2(w[i]);
                    acc[2 * i] = fmaf(p, f.x, acc[2 * i]);
                    acc[2 * i + 1] = fmaf(p, f.y, acc[2 * i + 1]);
                }
            }
#pragma unroll
            for (int e = 0; e < 8; e++) o[h][e] = acc[e];
            l[h] = l[h] * r + ps;
            m[h] = m_new;
        }
    }
    /* Every row group's (o, m, l) as it is, merged with the other warps' in one pass. */
    float *ws = c->smem; /* (MK_BLOCK_WARPS * R, g, HD + 2), then mk_layout_attn_parts_words in all */
    const uint32_t w2 = HD + 2u, p = warp * R + rg;
#pragma unroll
    for (int h = 0; h < G; h++) {
        if ((uint32_t)h >= g) break;
        float *row = ws + ((uint64_t)p * g + h) * w2;
#pragma unroll
        for (int e = 0; e < 8; e++) row[dg * 8u + e] = o[h][e];
        if (dg == 0) {
            row[HD] = m[h];
            row[HD + 1u] = l[h];
        }
    }
    mk_attn_merge_parts(ws, MK_BLOCK_WARPS * R, g, HD, d);
}

/* Heads of this many query heads per KV head and head_dim = 32 * VW take mk_attn_warps. */
#define MK_ATTN_WARPS_MAX_G 8
static_assert(MK_ATTN_SOLO_MAX_G == MK_ATTN_WARPS_MAX_G, "mk_attn_solo repeats mk_attn_solo_fits with this bound");

/* Positions per warp batch of mk_attn_warps: 16 / VW rows of f32 or f16 (32 / VW rows of f32
 * spilled; 32 / VW of f16 measured 1.5 % slower on llama-1b Q4_K_M's H200 token, no faster on
 * llama-1b or llama-8b BF16 at position 128 or 1500: run96, BENCHMARKS.md). */
#ifndef MK_ATTN_F16_ROWS
#define MK_ATTN_F16_ROWS 16
#endif

/* The split with no shared-memory tiles and no block barriers until the end: warp w takes the
 * batches w, w + 8, ... of U positions, lane l holds dimensions VW l .. VW l + VW - 1 of every
 * row, a batch's K and V rows load into registers together (U x 2 rows in flight per warp), and
 * each warp keeps its own running (o, m, l) per query head; the warps' partials merge in shared
 * memory. The tiled path spent three barriers and a shared-memory round trip per 32 positions:
 * at position 4000 about 2.5 us a tile, a third of the read bandwidth. */
template <int VW, typename KV>
__device__ __forceinline__ void mk_attn_warps(const struct mk_task_ctx *c, uint32_t g, uint32_t lo, uint32_t hi,
                                              const float *q, const KV *kb, const KV *vb, const struct mk_attn_dst *d) {
    constexpr int U = (sizeof(KV) == 4u ? 16 : MK_ATTN_F16_ROWS) / VW;
    constexpr int G = MK_ATTN_WARPS_MAX_G;
    constexpr uint32_t hd = 32u * VW;
    const uint32_t kv_dim = c->a->kv_dim, warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    const float scale = 1.0f / sqrtf((float)hd);
    float qr[G][VW], o[G][VW], m[G], l[G];
#pragma unroll
    for (int h = 0; h < G; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < VW; e++) {
            qr[h][e] = (uint32_t)h < g ? __ldcg(q + h * hd + lane * VW + e) : 0.0f;
            o[h][e] = 0.0f;
        }
    }
    mk_kv_lane<KV, VW> kr[U], vr[U];
    const uint32_t n_batches = (hi - lo + U - 1u) / U;
    for (uint32_t bi = warp; bi < n_batches; bi += MK_BLOCK_WARPS) {
        const uint32_t t0 = lo + bi * U;
#pragma unroll
        for (int u = 0; u < U; u++) { /* past hi: row hi - 1 again, its score masked below */
            const uint64_t off = (uint64_t)min(t0 + u, hi - 1u) * kv_dim + lane * VW;
            kr[u].load(kb + off);
            vr[u].load(vb + off);
        }
        float kc[U][VW];
#pragma unroll
        for (int u = 0; u < U; u++) kr[u].get(kc[u]);
#pragma unroll
        for (int h = 0; h < G; h++) {
            if ((uint32_t)h >= g) break;
            float sc[U], mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float a = 0.0f;
#pragma unroll
                for (int e = 0; e < VW; e++) a = fmaf(qr[h][e], kc[u][e], a);
                a = mk_warp_sum(a) * scale;
                sc[u] = t0 + u < hi ? a : -INFINITY;
                mx = fmaxf(mx, sc[u]);
            }
            const float m_new = fmaxf(m[h], mx), r = expf(m[h] - m_new);
            float ps = 0.0f, acc[VW];
#pragma unroll
            for (int e = 0; e < VW; e++) acc[e] = o[h][e] * r;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const float p = expf(sc[u] - m_new);
                float vv[VW];
                vr[u].get(vv);
                ps += p;
#pragma unroll
                for (int e = 0; e < VW; e++) acc[e] = fmaf(p, vv[e], acc[e]);
            }
#pragma unroll
            for (int e = 0; e < VW; e++) o[h][e] = acc[e];
            l[h] = l[h] * r + ps;
            m[h] = m_new;
        }
    }
    /* Each warp's partials, then the block's: out row (h, b) = (o, m, l) as the tiled path writes it. */
    float *ws = c->smem; /* (warps, g, hd + 2) */
    const uint32_t w2 = hd + 2u;
#pragma unroll
    for (int h = 0; h < G; h++) {
        if ((uint32_t)h >= g) break;
        float *row = ws + ((uint64_t)warp * g + h) * w2;
#pragma unroll
        for (int e = 0; e < VW; e++) row[lane * VW + e] = o[h][e];
        if (lane == 0) {
            row[hd] = m[h];
            row[hd + 1u] = l[h];
        }
    }
    mk_attn_merge_warps(ws, g, hd, d);
}

/* The K and V rows of the split are read once for all g query heads of the KV head and stream
 * through MK_ATTN_STAGES tiles: the copies of the next tiles run while one is computed, so a long
 * split keeps its loads in flight instead of waiting a round trip per tile. Inlined like every
 * op: as a call (no spills in ptxas) it made the matvec tasks 25 % slower on the H100. */
template <typename KV>
__device__ __forceinline__ void mk_attn_split(const struct mk_task_ctx *c, uint32_t lo, uint32_t hi, bool solo,
                                              uint32_t h0, uint32_t gs) {
    const struct mk_instr *in = c->in;
    const struct mk_args_attn *at = &in->args.attn;
    const uint32_t nb = at->n_blocks, layer = at->layer, hd = at->head_dim;
    const uint32_t g = at->n_head / at->n_head_kv, kvh = c->t / nb, b = c->t % nb;
    float *out = mk_arena(c) + in->buf[1]; /* (n_head, n_blocks, hd + 2) */
    const struct mk_attn_dst d = { out,
                                   solo ? mk_arena(c) + in->buf[2] : NULL,
                                   solo && in->buf[3] != MK_NO_BUF ? mk_arena(c) + in->buf[3] : NULL,
                                   kvh * g + h0,
                                   b,
                                   nb,
                                   at->n_head };
    const float *q = mk_arena(c) + in->buf[0] + (uint64_t)(kvh * g + h0) * hd;
    const uint32_t kv_dim = c->a->kv_dim;
    const uint64_t base = (uint64_t)layer * c->a->n_ctx * kv_dim + (uint64_t)kvh * hd;
    const KV *kb = (const KV *)c->a->k_cache + base;
    const KV *vb = (const KV *)c->a->v_cache + base;
    if (sizeof(KV) == 2u && g <= MK_ATTN_ROWS_MAX_G && (hd == 64u || hd == 128u)) {
        /* Two or three heads a KV head take the four-head loop too (the rest on zero queries): a
         * two-head instantiation made llama-1b's token 8-11 % slower at every position (the
         * whole kernel's code moved; run7, BENCHMARKS.md, forty-fifth session), and gained
         * nothing measurable on tiny-hd128 (two heads of 128) at 1000-1927. */
        if (gs == 1u) {
            if (hd == 64u)
                mk_attn_rows<64, 1>(c, gs, lo, hi, q, (const __half *)kb, (const __half *)vb, &d);
            else
                mk_attn_rows<128, 1>(c, gs, lo, hi, q, (const __half *)kb, (const __half *)vb, &d);
        } else {
            if (hd == 64u)
                mk_attn_rows<64, MK_ATTN_ROWS_MAX_G>(c, gs, lo, hi, q, (const __half *)kb, (const __half *)vb, &d);
            else
                mk_attn_rows<128, MK_ATTN_ROWS_MAX_G>(c, gs, lo, hi, q, (const __half *)kb, (const __half *)vb, &d);
        }
        return;
    }
    if (g <= MK_ATTN_WARPS_MAX_G && (hd == 64u || hd == 128u)) {
        if (hd == 64u)
            mk_attn_warps<2>(c, gs, lo, hi, q, kb, vb, &d);
        else
            mk_attn_warps<4>(c, gs, lo, hi, q, kb, vb, &d);
        return;
    }
    const uint32_t tile = mk_layout_attn_tile(hd), stride = hd + 4u, stage = 2u * tile * stride;
    float *qs = c->smem;                            /* (g, hd) */
    float *os = qs + mk_layout_align4(g * hd);      /* (g, hd) running sums of p v */
    KV *st = (KV *)(os + mk_layout_align4(g * hd)); /* (MK_ATTN_STAGES, {K, V}, tile, hd + 4) KV elements, in
                                                     * room for f32 ones */
    float *sc = os + mk_layout_align4(g * hd) + MK_ATTN_STAGES * stage; /* (g, tile) scores, then weights */
    float *ms = sc + mk_layout_align4(g * tile);                        /* (g) running maxima */
    float *ls = ms + mk_layout_align4(g);                               /* (g) running sums of p */
    float *rs = ls + mk_layout_align4(g);                               /* (g) this tile's rescale of the sums */
    const float scale = 1.0f / sqrtf((float)hd);
    const uint32_t n_tiles = (hi - lo + tile - 1u) / tile;
    for (uint32_t k = 0; k + 1u < MK_ATTN_STAGES; k++) {
        if (k < n_tiles)
            mk_attn_issue(st + k * stage, st + k * stage + tile * stride, kb, vb, lo + k * tile,
                          min(tile, hi - (lo + k * tile)), hd, kv_dim);
        mk_cp_async_commit();
    }
    for (uint32_t i = threadIdx.x; i < g * hd; i += MK_BLOCK_THREADS) {
        qs[i] = __ldcg(q + i);
        os[i] = 0.0f;
    }
    for (uint32_t i = threadIdx.x; i < g; i += MK_BLOCK_THREADS) {
        ms[i] = -INFINITY;
        ls[i] = 0.0f;
    }
    const uint32_t warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    for (uint32_t k = 0; k < n_tiles; k++) {
        const uint32_t t0 = lo + k * tile, n = min(tile, hi - t0);
        mk_cp_async_wait_attn();
        __syncthreads(); /* tile k is in for every thread; every reader of tile k - 1 is done */
        {
            const uint32_t k2 = k + MK_ATTN_STAGES - 1u;
            if (k2 < n_tiles) {
                KV *s2 = st + (k2 % MK_ATTN_STAGES) * stage;
                mk_attn_issue(s2, s2 + tile * stride, kb, vb, lo + k2 * tile, min(tile, hi - (lo + k2 * tile)), hd,
                              kv_dim);
            }
            mk_cp_async_commit();
        }
        const KV *ks = st + (k % MK_ATTN_STAGES) * stage, *vs = ks + tile * stride;
        for (uint32_t i = threadIdx.x; i < g * n; i += MK_BLOCK_THREADS) {
            const uint32_t hq = i / n, j = i % n;
            const KV *kr = ks + j * stride;
            const float4 *qr = (const float4 *)(qs + hq * hd);
            float a0 = 0.0f, a1 = 0.0f;
            for (uint32_t e = 0; e < hd / 4u; e++) {
                const float4 kv = mk_kv_ld4(kr + 4u * e), qv = qr[e];
                a0 = fmaf(qv.x, kv.x, a0);
                a1 = fmaf(qv.y, kv.y, a1);
                a0 = fmaf(qv.z, kv.z, a0);
                a1 = fmaf(qv.w, kv.w, a1);
            }
            sc[hq * tile + j] = (a0 + a1) * scale;
        }
        __syncthreads();
        /* One warp per query head: the tile's maximum, the weights, their sum, the rescale. */
        for (uint32_t hq = warp; hq < g; hq += MK_BLOCK_WARPS) {
            float *sh = sc + hq * tile;
            float tm = -INFINITY;
            for (uint32_t j = lane; j < n; j += 32u) tm = fmaxf(tm, sh[j]);
            tm = mk_warp_max(tm);
            const float m_old = ms[hq], m_new = fmaxf(m_old, tm);
            float tl = 0.0f;
            for (uint32_t j = lane; j < n; j += 32u) {
                const float p = expf(sh[j] - m_new);
                sh[j] = p;
                tl += p;
            }
            tl = mk_warp_sum(tl);
            if (lane == 0) {
                const float r = expf(m_old - m_new); /* 0 on the first tile (m_old = -inf) */
                rs[hq] = r;
                ls[hq] = ls[hq] * r + tl;
                ms[hq] = m_new;
            }
        }
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < g * hd; i += MK_BLOCK_THREADS) {
            const uint32_t hq = i / hd, d = i % hd;
            const float *ph = sc + hq * tile;
            float a0 = 0.0f, a1 = 0.0f;
            uint32_t j = 0;
            for (; j + 1u < n; j += 2u) {
                a0 = fmaf(ph[j], mk_kv_ld1(vs + j * stride + d), a0);
                a1 = fmaf(ph[j + 1u], mk_kv_ld1(vs + (j + 1u) * stride + d), a1);
            }
            if (j < n) a0 = fmaf(ph[j], mk_kv_ld1(vs + j * stride + d), a0);
            os[i] = os[i] * rs[hq] + (a0 + a1);
        }
    }
    __syncthreads(); /* ms and ls from their warps */
    for (uint32_t i = threadIdx.x; i < g * (hd + 2u); i += MK_BLOCK_THREADS) {
        const uint32_t hq = i / (hd + 2u), e = i % (hd + 2u), h = kvh * g + hq;
        out[((uint64_t)h * nb + b) * (hd + 2u) + e] = e < hd ? os[hq * hd + e] : e == hd ? ms[hq] : ls[hq];
    }
    __syncthreads(); /* os is read above by other threads than its writers */
}

/* The split's partials for the g query heads of KV head kvh (an empty split writes m = -inf), or
 * with solo the output of query heads h0 .. h0 + gs of the KV head over split 0's positions. */
__device__ void mk_attn_partial_split(const struct mk_task_ctx *c, uint32_t kvh, uint32_t b, bool solo, uint32_t h0,
                                      uint32_t gs) {
    const struct mk_instr *in = c->in;
    const struct mk_args_attn *at = &in->args.attn;
    const uint32_t nb = at->n_blocks, hd = at->head_dim, g = at->n_head / at->n_head_kv;
    uint32_t lo, hi;
    mk_attn_span((uint32_t)c->cmd->pos, at->block, nb, at->solo, solo ? 0u : b, &lo, &hi);
    if (lo >= hi) {
        float *out = mk_arena(c) + in->buf[1]; /* (n_head, n_blocks, hd + 2) */
        for (uint32_t i = threadIdx.x; i < g * (hd + 2u); i += MK_BLOCK_THREADS) {
            const uint32_t h = kvh * g + i / (hd + 2u), e = i % (hd + 2u);
            out[((uint64_t)h * nb + b) * (hd + 2u) + e] = e == hd ? -INFINITY : 0.0f;
        }
        return;
    }
    if (c->a->kv_type == MK_KV_F16)
        mk_attn_split<__half>(c, lo, hi, solo, h0, gs);
    else
        mk_attn_split<float>(c, lo, hi, solo, h0, gs);
}

/* Whether split 0 alone holds positions, so that the KV head's tasks write the output themselves: no
 * partials, no count and no merge, a chain of L2 round trips (the count, then the partials) that
 * took about 2.4 us a layer on the H200, as long as the split. Only where a split would merge
 * (arrive) and on the paths that end in mk_attn_merge_warps or mk_attn_merge_parts. */
__device__ __forceinline__ bool mk_attn_solo(const struct mk_args_attn *at, uint32_t pos) {
    /* mk_attn_solo_fits written out: calling it compiled to other machine code for the whole kernel
     * (tools/cubin_diff.sh), which would need timing over every position range again. */
    const uint32_t hd = at->head_dim;
    return at->arrive && at->n_head <= MK_ATTN_WARPS_MAX_G * at->n_head_kv && (hd == 64u || hd == 128u) &&
           mk_attn_solo_at(pos, at->block, at->n_blocks, at->solo);
}

__device__ void mk_op_attn_partial(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    const struct mk_args_attn *at = &in->args.attn;
    const uint32_t nb = at->n_blocks, hd = at->head_dim;
    const uint32_t g = at->n_head / at->n_head_kv, kvh = c->t / nb;
    const int32_t pos = c->cmd->pos;
    if (pos < 0 || (uint32_t)pos >= c->a->n_ctx) {
        mk_device_fail(c->a, c->fail, MK_DEVERR_BAD_POS, (uint32_t)pos);
        return;
    }
    const bool solo = mk_attn_solo(at, (uint32_t)pos);
    if (solo) {
        /* Split 0 holds every position, so the KV head's nb tasks share its query heads instead:
         * task b writes the output of heads b * per .. (b + 1) * per, each alone as the whole
         * split would (a head's sums do not depend on the others'). */
        const uint32_t per = (g + nb - 1u) / nb, b = c->t % nb, h0 = b * per;
        if (h0 < g) mk_attn_partial_split(c, kvh, b, true, h0, min(per, g - h0));
        return;
    }
    mk_attn_partial_split(c, kvh, c->t % nb, false, 0u, g);
    if (!at->arrive) return;
    /* The merge by the KV head's last split: the blocks that ran the others are already on their next
     * task, instead of every block meeting at a combine op's wait. The counter goes back to 0 before
     * this task signals (thread 0 does both, in that order), so the next step's tasks of this layer
     * (which wait, through the layers between, on that signal) count from 0 again; that also holds
     * for mk_perop, whose steps are all 0. */
    uint32_t *count = (uint32_t *)c->a->counters + at->arrive + kvh;
    if (!mk_block_last_in(count, nb)) return;
    if (threadIdx.x == 0) *count = 0u;
    float *part = mk_arena(c) + in->buf[1], *out = mk_arena(c) + in->buf[2];
    float *xq = in->buf[3] != MK_NO_BUF ? mk_arena(c) + in->buf[3] : NULL;
    /* As many of the KV head's query heads a round as the op's shared memory holds; only the splits
     * that hold positions, which at depth 128 are 2 of llama-1b's 16 at n_ctx 4096. */
    const uint32_t per = mk_layout_attn_merge_heads(hd, g, nb),
                   live = mk_attn_live((uint32_t)pos, at->block, nb, at->solo);
    for (uint32_t h = kvh * g; h < (kvh + 1u) * g; h += per) {
        const uint32_t nh = min(per, (kvh + 1u) * g - h);
        mk_attn_combine_heads(c, part + (uint64_t)h * nb * (hd + 2u), nb, live, hd, h, nh, at->n_head,
                              out + (uint64_t)h * hd, xq);
    }
}

#endif
