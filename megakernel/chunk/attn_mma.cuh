/* mk_chunk_attn_mma: the chunk step's causal attention on the tensor cores for head sizes 32, 64 and 128, with mk_chunk_attn's blocks, splits and partials. */
#ifndef MK_CHUNK_ATTN_MMA_CUH
#define MK_CHUNK_ATTN_MMA_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/mm.cuh"
#include "megakernel/chunk/rows.cuh"

/* Precision as mk_chunk_mm's: q, k, v and the probabilities are split into bf16 hi + lo, and each
 * product is hi.hi + lo.hi + hi.lo in fp32, about 2^-16 relative to the fp32 dot. */

__device__ __forceinline__ void mk_ldsm_x4_t(uint32_t *r, const void *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* d += a b from bf16 hi/lo splits: hi.hi + lo.hi + hi.lo. */
__device__ __forceinline__ void mk_mma_bf16x3(float *d, const uint32_t *ah, const uint32_t *al, const uint32_t *bh,
                                              const uint32_t *bl) {
    mk_mma_bf16(d, ah, bh);
    mk_mma_bf16(d, al, bh);
    mk_mma_bf16(d, ah, bl);
}

/* d += a b on f16 tiles (the H16 form). Not volatile: the compiler may interleave the products
 * with the loads and the softmax around them. */
__device__ __forceinline__ void mk_mma_f16(float *d, const uint32_t *a, const uint32_t *b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two floats as f16x2 hi + lo (a in the low halves, mma's fragment order): hi + lo holds them to
 * about 2^-22, as bf16 hi + lo does to 2^-16, while f16 keeps their range. */
__device__ __forceinline__ void mk_split_h2(float a, float b, uint32_t *hi, uint32_t *lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(a - f.x, b - f.y);
    *hi = *(const uint32_t *)&h;
    *lo = *(const uint32_t *)&l;
}

/* Four floats to rows of bf16 hi and lo tiles at hi[0..3], lo[0..3] (8-byte aligned). */
__device__ __forceinline__ void mk_attn_split4(float4 v, __nv_bfloat16 *hi, __nv_bfloat16 *lo) {
    const float f[4] = { v.x, v.y, v.z, v.w };
    uint32_t h[2], l[2];
    mk_mm_split<2>(f, h, l);
    *(uint2 *)hi = make_uint2(h[0], h[1]);
    *(uint2 *)lo = make_uint2(l[0], l[1]);
}

/* Block (kvh, y, z) as mk_chunk_attn's, except that y counts down, so that the tiles with the most
 * positions start first. Warp w computes rows 16 (w % 4) .. +16 of the block over keys 32 (w / 4)
 * .. +32 of each tile of MK_CHUNK_ATTN_MMA_KEYS positions (scores S = Q K^T and O += P V with
 * m16n8k16 products, P from S's accumulators without leaving registers); the two warps of a row
 * group merge their running (max, sum, output) at the end. Dynamic shared memory:
 * mk_chunk_attn_mma_smem(HD).
 * H16 (the _h16 kernels, for an f16 KV cache): q scaled and the probabilities as f16 hi + lo, two
 * products each against K and V as the cache holds them, which the copies bring straight into
 * two buffers: two thirds of the tensor-core work and none of K's and V's splitting, in the same
 * shared memory. */
template <uint32_t HD, bool H16>
__device__ __forceinline__ void mk_chunk_attn_mma_body(const struct mk_kernel_args &a,
                                                       const struct mk_chunk_launch &l) {
    constexpr uint32_t ROWS = MK_CHUNK_ATTN_ROWS, KT = MK_CHUNK_ATTN_MMA_KEYS, LDH = HD + 8u;
    constexpr int KS = (int)(HD / 16u), NT = (int)(HD / 8u), NL = H16 ? 1 : (int)(KT * HD / 4u / MK_BLOCK_THREADS);
    constexpr int NC = (int)(KT * HD / 8u / MK_BLOCK_THREADS); /* H16: 16-byte copies a thread, of K and of V */
    static_assert(KT == 64u && ROWS == 64u && MK_BLOCK_THREADS == 256u, "the warp roles assume these");
    static_assert(!H16 || NC >= 1, "whole copies");
    const struct mk_instr *in = (const struct mk_instr *)a.instrs + l.ii;
    const struct mk_args_attn at = in->args.attn;
    const uint32_t g = at.n_head / at.n_head_kv, T = mk_chunk_attn_tokens(g), yt = gridDim.y - 1u - blockIdx.y;
    const uint32_t kvh = blockIdx.x, t0 = yt * T, tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const uint32_t gq = lane >> 2, t4 = lane & 3u, wr = warp & 3u, wh = warp >> 2;
    const uint32_t q_dim = at.n_head * HD, n_rows = g * T, n_tok = min(T, l.m - t0);
    const int32_t pos = mk_chunk_cmd(&a)->pos;
    /* (ROWS, LDH) each: q, k, v as hi and lo; H16: q's hi and lo as f16, then K and V of two tiles
     * (k0 v0 k1 v1) */
    __nv_bfloat16 *qh = (__nv_bfloat16 *)mk_chunk_smem;
    __nv_bfloat16 *ql = qh + ROWS * LDH, *kh = ql + ROWS * LDH, *kl = kh + KT * LDH, *vh = kl + KT * LDH,
                  *vl = vh + KT * LDH;
    if (H16) vh = kl;

    /* This thread's rows: R and R + 8 of the block (accumulator elements 0, 1 and 2, 3). */
    const uint32_t R = 16u * wr + gq;
    const uint32_t last0 = (uint32_t)pos + t0 + min(R % T, n_tok - 1u),
                   last1 = (uint32_t)pos + t0 + min((R + 8u) % T, n_tok - 1u);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f, o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.0f;

    const uint32_t end = (uint32_t)pos + t0 + n_tok, splits = l.splits > 1u ? l.splits : 1u;
    const uint32_t span = (end + KT * splits - 1u) / (KT * splits) * KT, ps = min(end, blockIdx.z * span),
                   pe = min(end, ps + span);
    const uint64_t layer0 = (uint64_t)at.layer * a.n_ctx;
    const bool f16 = a.kv_type == MK_KV_F16;
    if (H16 && !f16) __trap();
    /* H16 scales q before rounding it (less range asked of f16), the scores not again. */
    const float scale = 1.0f / sqrtf((float)HD), s_scale = H16 ? 1.0f : scale;
    /* The next tile's K and V, loaded while the tensor cores work on this one. */
    float4 kr[NL], vr[NL];
    auto fetch = [&](uint32_t p0) {
        const uint32_t nk = min(KT, pe - p0);
#pragma unroll
        for (int i = 0; i < (H16 ? 0 : NL); i++) { /* H16 copies instead */
            const uint32_t k = tid + (uint32_t)i * MK_BLOCK_THREADS, j = k / (HD / 4u), d = 4u * (k % (HD / 4u));
            /* Keys past the split repeat its last one: finite, and their scores are masked. */
            const uint64_t off = (layer0 + p0 + min(j, nk - 1u)) * a.kv_dim + kvh * HD + d;
            kr[i] = f16 ? mk_kv_ldcg4((const __half *)a.k_cache + off) : mk_kv_ldcg4((const float *)a.k_cache + off);
            vr[i] = f16 ? mk_kv_ldcg4((const __half *)a.v_cache + off) : mk_kv_ldcg4((const float *)a.v_cache + off);
        }
    };
    /* H16: tile p0's K and V straight from the f16 cache into buffer b, as one group of copies. */
    auto copy = [&](uint32_t p0, uint32_t b) {
        const uint32_t nk = min(KT, pe - p0);
#pragma unroll
        for (int i = 0; i < NC; i++) {
            const uint32_t k = tid + (uint32_t)i * MK_BLOCK_THREADS, j = k / (HD / 8u), d = 8u * (k % (HD / 8u));
            const uint64_t off = (layer0 + p0 + min(j, nk - 1u)) * a.kv_dim + kvh * HD + d;
            mk_cp_async16(kh + 2u * b * KT * LDH + j * LDH + d, (const __half *)a.k_cache + off, 16u);
            mk_cp_async16(vh + 2u * b * KT * LDH + j * LDH + d, (const __half *)a.v_cache + off, 16u);
        }
        mk_cp_async_commit();
    };
    const uint32_t a_off = (16u * wr + (lane & 15u)) * LDH + (lane >> 4) * 8u;
    const uint32_t b_off = (32u * wh + (lane >> 4) * 8u + (lane & 7u)) * LDH + ((lane >> 3) & 1u) * 8u;
    const uint32_t v_off = (32u * wh + (lane & 7u) + ((lane >> 3) & 1u) * 8u) * LDH + (lane >> 4) * 8u;
    /* Row r of the block is query head kvh * g + r / T at token row t0 + r % T (zero past them).
     * q's loads, then the first tile's, are all asked for before any waits on them: a few-token
     * step near the start of the context is a single tile, which waited on q a row piece at a time
     * (BENCHMARKS.md, twenty-fifth session). */
    constexpr int NQ = (int)(ROWS * HD / 4u / MK_BLOCK_THREADS);
    float4 qv[NQ];
#pragma unroll
    for (int i = 0; i < NQ; i++) {
        const uint32_t k = tid + (uint32_t)i * MK_BLOCK_THREADS, r = k / (HD / 4u), d = 4u * (k % (HD / 4u)),
                       it = r % T;
        qv[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n_rows && it < n_tok) {
            const float *q =
                (const float *)a.arena + in->buf[0] + (uint64_t)(t0 + it) * q_dim + (kvh * g + r / T) * HD + d;
            qv[i] = make_float4(__ldcg(q), __ldcg(q + 1), __ldcg(q + 2), __ldcg(q + 3));
        }
    }
    if (ps < pe) {
        if (H16)
            copy(ps, 0u);
        else
            fetch(ps);
    }
#pragma unroll
    for (int i = 0; i < NQ; i++) {
        const uint32_t k = tid + (uint32_t)i * MK_BLOCK_THREADS, r = k / (HD / 4u), d = 4u * (k % (HD / 4u));
        if (H16) {
            const float4 v = qv[i];
            uint2 h, lo;
            mk_split_h2(v.x * scale, v.y * scale, &h.x, &lo.x);
            mk_split_h2(v.z * scale, v.w * scale, &h.y, &lo.y);
            *(uint2 *)(qh + r * LDH + d) = h;
            *(uint2 *)(ql + r * LDH + d) = lo;
        } else {
            mk_attn_split4(qv[i], qh + r * LDH + d, ql + r * LDH + d);
        }
    }
    for (uint32_t p0 = ps, it = 0; p0 < pe; p0 += KT, it++) {
        const uint32_t nk = min(KT, pe - p0);
        const __nv_bfloat16 *kt = kh, *vt = vh; /* this tile's K and V */
        if (H16) {
            /* Past it this tile has landed for every thread, and the last one (the other buffer)
             * is consumed: the next tile's copies go there while this one is multiplied. */
            mk_cp_async_wait_all();
            __syncthreads();
            if (p0 + KT < pe) copy(p0 + KT, (it + 1u) & 1u);
            kt = kh + 2u * (it & 1u) * KT * LDH;
            vt = vh + 2u * (it & 1u) * KT * LDH;
        } else {
            __syncthreads(); /* the previous tile is consumed */
#pragma unroll
            for (int i = 0; i < NL; i++) {
                const uint32_t k = tid + (uint32_t)i * MK_BLOCK_THREADS, j = k / (HD / 4u), d = 4u * (k % (HD / 4u));
                mk_attn_split4(kr[i], kh + j * LDH + d, kl + j * LDH + d);
                mk_attn_split4(vr[i], vh + j * LDH + d, vl + j * LDH + d);
            }
            __syncthreads();
            if (p0 + KT < pe) fetch(p0 + KT);
        }

        /* S (16 rows by this warp's 32 keys, four n8 tiles). */
        float s[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t ah[4], al[4];
            mk_ldsm_x4(ah, qh + a_off + 16u * (uint32_t)kk);
            mk_ldsm_x4(al, ql + a_off + 16u * (uint32_t)kk);
#pragma unroll
            for (int jp = 0; jp < 2; jp++) {
                uint32_t bh[4], bl[4];
                mk_ldsm_x4(bh, kt + b_off + 16u * (uint32_t)jp * LDH + 16u * (uint32_t)kk);
                if (H16) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        mk_mma_f16(s[2 * jp + h], ah, bh + 2 * h);
                        mk_mma_f16(s[2 * jp + h], al, bh + 2 * h);
                    }
                    continue;
                }
                mk_ldsm_x4(bl, kl + b_off + 16u * (uint32_t)jp * LDH + 16u * (uint32_t)kk);
#pragma unroll
                for (int h = 0; h < 2; h++) mk_mma_bf16x3(s[2 * jp + h], ah, al, bh + 2 * h, bl + 2 * h);
            }
        }
        /* Mask, running maximum, probabilities. */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const uint32_t key = p0 + 32u * wh + 8u * (uint32_t)j + 2u * t4 + (uint32_t)(e & 1);
                const bool ok = key < p0 + nk && key <= (e < 2 ? last0 : last1);
                s[j][e] = ok ? s[j][e] * s_scale : -INFINITY;
                if (e < 2)
                    mx0 = fmaxf(mx0, s[j][e]);
                else
                    mx1 = fmaxf(mx1, s[j][e]);
            }
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
        }
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        /* -inf while this warp has met none of the row's positions (a split, or a short tile). */
        const float c0 = n0 == -INFINITY ? 1.0f : expf(m0 - n0), c1 = n1 == -INFINITY ? 1.0f : expf(m1 - n1);
        m0 = n0;
        m1 = n1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            o[j][0] *= c0;
            o[j][1] *= c0;
            o[j][2] *= c1;
            o[j][3] *= c1;
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = s[j][e] == -INFINITY ? 0.0f : expf(s[j][e] - (e < 2 ? n0 : n1));
                s[j][e] = p;
                if (e < 2)
                    l0 += p;
                else
                    l1 += p;
            }
            /* O += P V: P's A fragments are S's accumulators of two n8 tiles. */
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t ph[4], pl[4];
            if (H16) {
                mk_split_h2(s[2 * ks][0], s[2 * ks][1], &ph[0], &pl[0]);
                mk_split_h2(s[2 * ks][2], s[2 * ks][3], &ph[1], &pl[1]);
                mk_split_h2(s[2 * ks + 1][0], s[2 * ks + 1][1], &ph[2], &pl[2]);
                mk_split_h2(s[2 * ks + 1][2], s[2 * ks + 1][3], &ph[3], &pl[3]);
#pragma unroll
                for (int jp = 0; jp < NT / 2; jp++) {
                    uint32_t bh[4];
                    mk_ldsm_x4_t(bh, vt + v_off + 16u * (uint32_t)ks * LDH + 16u * (uint32_t)jp);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        mk_mma_f16(o[2 * jp + h], ph, bh + 2 * h);
                        mk_mma_f16(o[2 * jp + h], pl, bh + 2 * h);
                    }
                }
                continue;
            }
            mk_mm_split<1>(&s[2 * ks][0], &ph[0], &pl[0]);
            mk_mm_split<1>(&s[2 * ks][2], &ph[1], &pl[1]);
            mk_mm_split<1>(&s[2 * ks + 1][0], &ph[2], &pl[2]);
            mk_mm_split<1>(&s[2 * ks + 1][2], &ph[3], &pl[3]);
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                uint32_t bh[4], bl[4];
                mk_ldsm_x4_t(bh, vh + v_off + 16u * (uint32_t)ks * LDH + 16u * (uint32_t)jp);
                mk_ldsm_x4_t(bl, vl + v_off + 16u * (uint32_t)ks * LDH + 16u * (uint32_t)jp);
#pragma unroll
                for (int h = 0; h < 2; h++) mk_mma_bf16x3(o[2 * jp + h], ph, pl, bh + 2 * h, bl + 2 * h);
            }
        }
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }

    /* The second key half's (max, sum, output) through shared memory (K and V are consumed). */
    float *mo = (float *)(qh + 2u * ROWS * LDH); /* (ROWS, HD + 2): output, then max and sum */
    constexpr uint32_t LF = HD + 2u;
    __syncthreads();
    if (wh == 1u) {
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint32_t col = 8u * (uint32_t)j + 2u * t4;
            *(float2 *)(mo + R * LF + col) = make_float2(o[j][0], o[j][1]);
            *(float2 *)(mo + (R + 8u) * LF + col) = make_float2(o[j][2], o[j][3]);
        }
        if (t4 == 0u) {
            *(float2 *)(mo + R * LF + HD) = make_float2(m0, l0);
            *(float2 *)(mo + (R + 8u) * LF + HD) = make_float2(m1, l1);
        }
    }
    __syncthreads();
    if (wh == 1u) return;
    float cs[2][2], lt[2], mt[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float2 ml = *(const float2 *)(mo + (R + 8u * (uint32_t)h) * LF + HD);
        const float ma = h ? m1 : m0, la = h ? l1 : l0, M = fmaxf(ma, ml.x);
        cs[h][0] = ma == -INFINITY ? 0.0f : expf(ma - M);
        cs[h][1] = ml.x == -INFINITY ? 0.0f : expf(ml.x - M);
        mt[h] = M;
        lt[h] = la * cs[h][0] + ml.y * cs[h][1];
    }
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint32_t col = 8u * (uint32_t)j + 2u * t4;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float2 ob = *(const float2 *)(mo + (R + 8u * (uint32_t)h) * LF + col);
            o[j][2 * h] = o[j][2 * h] * cs[h][0] + ob.x * cs[h][1];
            o[j][2 * h + 1] = o[j][2 * h + 1] * cs[h][0] + ob.y * cs[h][1];
        }
    }
    if (splits > 1u) {
        /* As mk_chunk_attn's partials: (o, m, l) of row r at y_off + ((z * n_head_kv + kvh) *
         * gridDim.y + y) * ROWS * (hd + 2) + r * (hd + 2). */
        float *part =
            (float *)a.arena + l.y_off + ((uint64_t)(blockIdx.z * gridDim.x + kvh) * gridDim.y + yt) * ROWS * LF;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float *pr = part + (R + 8u * (uint32_t)h) * LF;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                pr[8u * (uint32_t)j + 2u * t4] = o[j][2 * h];
                pr[8u * (uint32_t)j + 2u * t4 + 1u] = o[j][2 * h + 1];
            }
            if (t4 == 0u) {
                pr[HD] = mt[h];
                pr[HD + 1u] = lt[h];
            }
        }
        return;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t r = R + 8u * (uint32_t)h, it = r % T;
        if (r >= n_rows || it >= n_tok) continue;
        float *out = (float *)a.arena + in->buf[1] + (uint64_t)(t0 + it) * q_dim;
        const uint32_t c0 = (kvh * g + r / T) * HD;
        const float inv = 1.0f / lt[h];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint32_t col = c0 + 8u * (uint32_t)j + 2u * t4;
            mk_split_store(out, q_dim, col, o[j][2 * h] * inv);
            mk_split_store(out, q_dim, col + 1u, o[j][2 * h + 1] * inv);
        }
    }
}

/* One kernel per head size (mk_chunk_attn_mma_fits) and form, each with the registers its size
 * needs: two blocks fit a multiprocessor up to 64. */
#define MK_ATTN_MMA_KERNEL(name, hd, h16, per_sm)                                                   \
    extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, per_sm)                          \
        name##hd(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) { \
        mk_grid_dep_wait();                                                                         \
        mk_chunk_attn_mma_body<hd, h16>(a, l);                                                      \
    }
MK_ATTN_MMA_KERNEL(mk_chunk_attn_mma_, 32, false, 2)
MK_ATTN_MMA_KERNEL(mk_chunk_attn_mma_, 64, false, 2)
MK_ATTN_MMA_KERNEL(mk_chunk_attn_mma_, 128, false, 1)
MK_ATTN_MMA_KERNEL(mk_chunk_attn_h16_, 32, true, 2)
MK_ATTN_MMA_KERNEL(mk_chunk_attn_h16_, 64, true, 2)
MK_ATTN_MMA_KERNEL(mk_chunk_attn_h16_, 128, true, 1)

#endif
