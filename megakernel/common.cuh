/* Device helpers shared by the ops: the task context, weight element loads, block reductions, RMSNorm into shared memory, the row-dot core. */
#ifndef MK_COMMON_CUH
#define MK_COMMON_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "megakernel/abi.h"
#include "megakernel/cuda_layout.h"
#include "megakernel/quant.cuh"
#include "megakernel/quant8.cuh"
#include "megakernel/sync.cuh"

/* Values of enum mk_dtype (runtime/dtype.h is host C; the ids are ggml's and never change). */
#define MK_DEV_F32  0u
#define MK_DEV_F16  1u
#define MK_DEV_BF16 30u

/* One task as an op sees it. in and cmd point into shared memory. */
struct mk_task_ctx {
    const struct mk_kernel_args *a;
    const struct mk_instr *in;
    const struct mk_step_cmd *cmd;
    uint32_t ii;    /* instruction index */
    uint32_t t;     /* task index within the instruction */
    uint32_t step;  /* 0-based step being run */
    float *smem;    /* dynamic shared memory, mk_layout_smem_words(in) words */
    uint32_t *fail; /* the block's flag (shared memory) that an op met a broken invariant, or NULL */
};

__device__ __forceinline__ float *mk_arena(const struct mk_task_ctx *c) { return (float *)c->a->arena; }

/* A read-only copy of one weight table entry. */
struct mk_wdesc {
    const uint8_t *ptr;
    uint32_t dtype, rows, cols, row_bytes;
    bool vec; /* 16-byte loads are possible: aligned base and rows, whole chunks */
};

__device__ __forceinline__ struct mk_wdesc mk_weight(const struct mk_task_ctx *c, uint32_t idx) {
    const struct mk_weight_ref *w = (const struct mk_weight_ref *)c->a->weights + idx;
    struct mk_wdesc d;
    d.ptr = (const uint8_t *)__ldg((const unsigned long long *)&w->ptr);
    d.dtype = __ldg(&w->dtype);
    d.rows = __ldg(&w->rows);
    d.cols = __ldg(&w->cols);
    d.row_bytes = __ldg(&w->row_bytes);
    uint32_t per16 = d.dtype == MK_DEV_F32 ? 4u : 8u;
    bool plain = d.dtype == MK_DEV_F32 || d.dtype == MK_DEV_F16 || d.dtype == MK_DEV_BF16;
    d.vec = plain && ((uintptr_t)d.ptr % 16u) == 0 && d.row_bytes % 16u == 0 && d.cols % per16 == 0;
    return d;
}

__device__ __forceinline__ const uint8_t *mk_row(const struct mk_wdesc *w, uint32_t r) {
    return w->ptr + (uint64_t)r * w->row_bytes;
}

__device__ __forceinline__ float mk_bf16_bits(uint32_t b) { return __uint_as_float(b << 16); }

/* Element e of a row in any format; the float formats inline, block formats through quant.cuh. */
__device__ __forceinline__ float mk_elem(uint32_t dtype, const uint8_t *row, uint32_t e) {
    if (dtype == MK_DEV_F32) return __ldg((const float *)row + e);
    if (dtype == MK_DEV_F16) return __half2float(__ushort_as_half(__ldg((const unsigned short *)row + e)));
    if (dtype == MK_DEV_BF16) return mk_bf16_bits(__ldg((const unsigned short *)row + e));
    return mk_q_value(dtype, row, e);
}

/* A block that saw the host's abort, or a broken invariant, sets this, so that the others leave
 * without PCIe reads (device-internal state of one module, which lives as long as its session). */
__device__ uint32_t mk_abort_relay;

/* True when the kernel must leave. The host flag costs a PCIe read, so callers ask for it rarely. */
__device__ bool mk_should_abort(const struct mk_kernel_args *a, bool read_host) {
    if (*(volatile uint32_t *)&mk_abort_relay) return true;
    if (read_host && a->watch) {
        if (mk_ld_relaxed_sys(&((struct mk_watch *)a->watch)->abort)) {
            atomicExch(&mk_abort_relay, 1u);
            return true;
        }
    }
    return false;
}

/* Broken invariants: record them in the mailbox and end the kernel without a trap, so that the
 * CUDA context, and with it every later session of the process, stays usable (a trap is a sticky
 * error). The calling op returns at once; its block leaves after the op (the flag `block_fail`),
 * the others through the abort relay, and the host reads the error from the mailbox. Without a
 * mailbox (the per-op kernels) nobody would hear of it: trap. */
__device__ __noinline__ void mk_device_fail(const struct mk_kernel_args *a, uint32_t *block_fail, uint32_t code,
                                            uint32_t arg) {
    if (!a->mailbox) __trap();
    struct mk_mailbox *mb = (struct mk_mailbox *)a->mailbox;
    mk_st_relaxed_sys(&mb->error_arg, arg);
    mk_st_release_sys(&mb->error, code);
    atomicExch(&mk_abort_relay, 1u);
    __threadfence_system();
    if (block_fail) *(volatile uint32_t *)block_fail = 1u;
}

__device__ __forceinline__ float mk_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float mk_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* (v, i) ranks before (bv, bi): greater logit, then lower id. */
__device__ __forceinline__ bool mk_better(float v, uint32_t i, float bv, uint32_t bi) {
    return v > bv || (v == bv && i < bi);
}

/* The best (value, index) of the warp by mk_better, in every lane. */
__device__ __forceinline__ void mk_warp_best(float *best, uint32_t *bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, *best, o);
        uint32_t i = __shfl_xor_sync(0xffffffffu, *bi, o);
        if (mk_better(v, i, *best, *bi)) {
            *best = v;
            *bi = i;
        }
    }
}

/* Sum over the block; every thread gets the same value (same order everywhere). */
__device__ __noinline__ float mk_block_sum(float v) {
    __shared__ float part[MK_BLOCK_WARPS];
    v = mk_warp_sum(v);
    if ((threadIdx.x & 31u) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (uint32_t w = 0; w < MK_BLOCK_WARPS; w++) s += part[w];
    __syncthreads();
    return s;
}

__device__ __noinline__ float mk_block_max(float v) {
    __shared__ float part[MK_BLOCK_WARPS];
    v = mk_warp_max(v);
    if ((threadIdx.x & 31u) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = part[0];
#pragma unroll
    for (uint32_t w = 1; w < MK_BLOCK_WARPS; w++) s = fmaxf(s, part[w]);
    __syncthreads();
    return s;
}

/* xs = x (arena, n floats), read through L2: other blocks wrote it during this kernel. */
__device__ __forceinline__ void mk_block_load(float *xs, const float *x, uint32_t n) {
    for (uint32_t i = threadIdx.x; i < n; i += MK_BLOCK_THREADS) xs[i] = __ldcg(x + i);
    __syncthreads();
}

/* xs = RMSNorm(x) * norm weight: x * w * (1 / sqrt(mean(x^2) + eps)). x and w are read in the
 * same pass, so a norm costs one round of loads; the product is formed as x * w first, which
 * differs from the CPU's (x * scale) * w by at most one rounding. */
__device__ __noinline__ void mk_block_rmsnorm(const struct mk_task_ctx *c, float *xs, const float *x, uint32_t n,
                                              uint32_t norm_idx, float eps) {
    struct mk_wdesc nw = mk_weight(c, norm_idx);
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += MK_BLOCK_THREADS) {
        float v = __ldcg(x + i);
        xs[i] = v * mk_elem(nw.dtype, nw.ptr, i);
        ss += v * v;
    }
    ss = mk_block_sum(ss);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = threadIdx.x; i < n; i += MK_BLOCK_THREADS) xs[i] *= scale;
    __syncthreads();
}

/* Streaming 16-byte weight load: read once, so keep it out of L1. */
__device__ __forceinline__ uint4 mk_ld_weight16(const uint8_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ float mk_dot_f32x4(uint4 w, float4 x) {
    return __uint_as_float(w.x) * x.x + __uint_as_float(w.y) * x.y + __uint_as_float(w.z) * x.z +
           __uint_as_float(w.w) * x.w;
}

__device__ __forceinline__ float mk_dot_bf16x8(uint4 w, float4 a, float4 b) {
    float s = mk_bf16_bits(w.x & 0xffffu) * a.x;
    s = fmaf(__uint_as_float(w.x & 0xffff0000u), a.y, s);
    s = fmaf(mk_bf16_bits(w.y & 0xffffu), a.z, s);
    s = fmaf(__uint_as_float(w.y & 0xffff0000u), a.w, s);
    s = fmaf(mk_bf16_bits(w.z & 0xffffu), b.x, s);
    s = fmaf(__uint_as_float(w.z & 0xffff0000u), b.y, s);
    s = fmaf(mk_bf16_bits(w.w & 0xffffu), b.z, s);
    s = fmaf(__uint_as_float(w.w & 0xffff0000u), b.w, s);
    return s;
}

__device__ __forceinline__ float2 mk_h2f2(uint32_t u) {
    __half2 h = *(__half2 *)&u;
    return __half22float2(h);
}

__device__ __forceinline__ float mk_dot_f16x8(uint4 w, float4 a, float4 b) {
    float2 p = mk_h2f2(w.x), q = mk_h2f2(w.y), r = mk_h2f2(w.z), t = mk_h2f2(w.w);
    float s = p.x * a.x;
    s = fmaf(p.y, a.y, s);
    s = fmaf(q.x, a.z, s);
    s = fmaf(q.y, a.w, s);
    s = fmaf(r.x, b.x, s);
    s = fmaf(r.y, b.y, s);
    s = fmaf(t.x, b.z, s);
    s = fmaf(t.y, b.w, s);
    return s;
}

/* 16-byte loads a lane issues per round of the row-dot loop: one buffer of them for f32 rows, two
 * for f16 and bf16 rows (the next round's in flight during this one's products). */
#ifndef MK_DOT_INFLIGHT
#define MK_DOT_INFLIGHT 8
#endif

/* acc[r] = row[r] . xs over n elements for R (1, 2 or 4, a constant after inlining) rows of one
 * float format (f32, f16, bf16; block formats take mk_qrows), reduced over the warp: every lane
 * gets the sums. All rows share dtype and `vec`. */
__device__ __forceinline__ void mk_dot_rows(const uint8_t *const *row, const int R, uint32_t dtype, bool vec,
                                            uint32_t n, const float *xs, float *acc) {
    const uint32_t lane = threadIdx.x & 31u;
    const int U = MK_DOT_INFLIGHT / R;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    if (vec && dtype == MK_DEV_F32) {
        const uint32_t nc = n / 4u;
        const float4 *x4 = (const float4 *)xs;
        for (uint32_t c0 = lane; c0 < nc; c0 += 32u * U) {
            uint4 w[4][MK_DOT_INFLIGHT];
#pragma unroll
            for (int u = 0; u < U; u++) {
                uint32_t ch = c0 + 32u * u;
#pragma unroll
                for (int r = 0; r < R; r++)
                    w[r][u] = ch < nc ? mk_ld_weight16(row[r] + 16u * ch) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                uint32_t ch = c0 + 32u * u;
                if (ch < nc) {
                    float4 x = x4[ch];
#pragma unroll
                    for (int r = 0; r < R; r++) acc[r] += mk_dot_f32x4(w[r][u], x);
                }
            }
        }
    } else if (vec) {
        /* Two buffers of U chunks a row: the next buffer's loads are in flight while this one's are
         * multiplied, so a lane's loads never drain between rounds. One buffer drained them and
         * ran llama-8b BF16 at 0.77 of the read bandwidth (tg128 6.29 ms against 6.01, H100;
         * BENCHMARKS.md, sixteenth session); deeper buffers (12 or 16 chunks) measured slower. */
        const uint32_t nc = n / 8u;
        const float4 *x4 = (const float4 *)xs;
        const bool bf = dtype == MK_DEV_BF16;
        uint4 wa[4][MK_DOT_INFLIGHT], wb[4][MK_DOT_INFLIGHT];
        auto load = [&](uint4(*w)[MK_DOT_INFLIGHT], uint32_t c) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                uint32_t ch = c + 32u * u;
#pragma unroll
                for (int r = 0; r < R; r++)
                    w[r][u] = ch < nc ? mk_ld_weight16(row[r] + 16u * ch) : make_uint4(0, 0, 0, 0);
            }
        };
        auto use = [&](uint4(*w)[MK_DOT_INFLIGHT], uint32_t c) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                uint32_t ch = c + 32u * u;
                if (ch < nc) {
                    float4 xa = x4[2u * ch], xb = x4[2u * ch + 1u];
#pragma unroll
                    for (int r = 0; r < R; r++)
                        acc[r] += bf ? mk_dot_bf16x8(w[r][u], xa, xb) : mk_dot_f16x8(w[r][u], xa, xb);
                }
            }
        };
        load(wa, lane);
        for (uint32_t c0 = lane; c0 < nc; c0 += 64u * U) {
            load(wb, c0 + 32u * U);
            use(wa, c0);
            load(wa, c0 + 64u * U);
            use(wb, c0 + 32u * U);
        }
    } else {
        for (uint32_t e = lane; e < n; e += 32u) {
            float x = xs[e];
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += mk_elem(dtype, row[r], e) * x;
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = mk_warp_sum(acc[r]);
}

/* Rows per warp for a task of `count` rows: fill every warp first, then share loads across rows. */
__device__ __forceinline__ int mk_rows_per_warp(uint32_t count) {
    if (count >= 4u * MK_BLOCK_WARPS) return 4;
    if (count >= 2u * MK_BLOCK_WARPS) return 2;
    return 1;
}

/* ---- Block formats: rows streamed through shared memory (the staged path). ---- */

/* Rows [row0, row0 + n) of one matrix whose results go to res[res0 ...]. */
struct mk_qseg {
    const uint8_t *ptr;
    uint32_t dtype, row_bytes, cols;
    uint32_t row0, n, res0;
};

__device__ __forceinline__ struct mk_qseg mk_qseg_make(const struct mk_wdesc *w, uint32_t row0, uint32_t n,
                                                       uint32_t res0) {
    struct mk_qseg s;
    s.ptr = w->ptr;
    s.dtype = w->dtype;
    s.row_bytes = w->row_bytes;
    s.cols = w->cols;
    s.row0 = row0;
    s.n = n;
    s.res0 = res0;
    return s;
}

/* K-quant rows on the tensor cores (it needs struct mk_qseg). */
#include "megakernel/qmma.cuh"

/* Bytes per chunk of a row of format t: whole blocks, a multiple of 16, at most MK_QSTAGE_BYTES. */
__device__ __forceinline__ uint32_t mk_qchunk_bytes(uint32_t t) {
    uint32_t bb = mk_q_block_bytes(t), unit = bb;
    while (unit % 16u) unit += bb;
    return MK_QSTAGE_BYTES / unit * unit;
}

__device__ __forceinline__ void mk_cp_async16(void *dst, const void *src, uint32_t src_bytes) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
/* 8 bytes (an f16 KV cache's four elements): cp.async.cg takes only 16. */
__device__ __forceinline__ void mk_cp_async8(void *dst, const void *src) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void mk_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void mk_cp_async_wait_all(void) { asm volatile("cp.async.wait_all;" ::: "memory"); }
/* All but the newest N groups have landed. */
template <uint32_t N> __device__ __forceinline__ void mk_cp_async_wait_group(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void mk_cp_async_wait_stages(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(MK_QSTAGES - 1) : "memory");
}
/* All but the newest MK_ATTN_STAGES - 2 groups of attention tiles have landed. */
__device__ __forceinline__ void mk_cp_async_wait_attn(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(MK_ATTN_STAGES - 2) : "memory");
}

/* The two f16 halves of a word, low first, as f32 (no address taken: a cast through memory put
 * the attention's rows on the stack). */
__device__ __forceinline__ float2 mk_h2_to_f2(uint32_t u) {
    return make_float2(__half2float(__ushort_as_half((unsigned short)(u & 0xffffu))),
                       __half2float(__ushort_as_half((unsigned short)(u >> 16))));
}

/* KV cache elements (mk_kernel_args.kv_type: float or __half) widened to f32. Four at p: 16-byte
 * aligned for f32, 8 for f16; p may point to shared or global memory. */
__device__ __forceinline__ float4 mk_kv_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 mk_kv_ld4(const __half *p) {
    const uint2 u = *(const uint2 *)p;
    const float2 a = mk_h2_to_f2(u.x), b = mk_h2_to_f2(u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
/* ... the same from global memory past L1 (the cache is written by other blocks in the step) */
__device__ __forceinline__ float4 mk_kv_ldcg4(const float *p) { return __ldcg((const float4 *)p); }
__device__ __forceinline__ float4 mk_kv_ldcg4(const __half *p) {
    const uint2 u = __ldcg((const uint2 *)p);
    const float2 a = mk_h2_to_f2(u.x), b = mk_h2_to_f2(u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float mk_kv_ld1(const float *p) { return *p; }
__device__ __forceinline__ float mk_kv_ld1(const __half *p) { return __half2float(*p); }
/* Rounds to nearest even as the CPU executor's mk_fp32_to_fp16. */
__device__ __forceinline__ void mk_kv_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void mk_kv_st(__half *p, float v) { *p = __float2half_rn(v); }

/* VW consecutive elements of a K or V row as one lane holds them: loaded in one instruction
 * (8 or 16 bytes of f32, 4 or 8 of f16) and widened when used. */
template <typename KV, int VW> struct mk_kv_lane;
template <> struct mk_kv_lane<float, 2> {
    float2 v;
    __device__ __forceinline__ void load(const float *p) { v = __ldcg((const float2 *)p); }
    __device__ __forceinline__ void get(float *f) const {
        f[0] = v.x;
        f[1] = v.y;
    }
};
template <> struct mk_kv_lane<float, 4> {
    float4 v;
    __device__ __forceinline__ void load(const float *p) { v = __ldcg((const float4 *)p); }
    __device__ __forceinline__ void get(float *f) const {
        f[0] = v.x;
        f[1] = v.y;
        f[2] = v.z;
        f[3] = v.w;
    }
};
template <> struct mk_kv_lane<__half, 2> {
    uint32_t v;
    __device__ __forceinline__ void load(const __half *p) { v = __ldcg((const unsigned int *)p); }
    __device__ __forceinline__ void get(float *f) const {
        const float2 a = mk_h2_to_f2(v);
        f[0] = a.x;
        f[1] = a.y;
    }
};
template <> struct mk_kv_lane<__half, 4> {
    uint2 v;
    __device__ __forceinline__ void load(const __half *p) { v = __ldcg((const uint2 *)p); }
    __device__ __forceinline__ void get(float *f) const {
        const float2 a = mk_h2_to_f2(v.x), b = mk_h2_to_f2(v.y);
        f[0] = a.x;
        f[1] = a.y;
        f[2] = b.x;
        f[3] = b.y;
    }
};

/* A warp's cursor: its k-th row of the segments (k = warp, warp + MK_BLOCK_WARPS, ...) and the
 * chunk of that row. */
struct mk_qcur {
    uint32_t k, ch;
};

/* Locates row k of the segments: its segment and row in it; false past the end. */
__device__ __forceinline__ bool mk_qcur_seg(const struct mk_qseg *seg, uint32_t nseg, uint32_t k, uint32_t *s,
                                            uint32_t *r) {
    for (uint32_t i = 0; i < nseg; i++) {
        if (k < seg[i].n) {
            *s = i;
            *r = k;
            return true;
        }
        k -= seg[i].n;
    }
    return false;
}

/* Starts the copy of the cursor's chunk into buf (every lane takes part; nothing past the end),
 * then commits a group either way, so that group counts stay in step with chunks. */
__device__ __forceinline__ void mk_qissue(const struct mk_qseg *seg, uint32_t nseg, struct mk_qcur c, uint8_t *buf) {
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t s, r;
    if (mk_qcur_seg(seg, nseg, c.k, &s, &r)) {
        const uint32_t cb = mk_qchunk_bytes(seg[s].dtype), off = c.ch * cb;
        const uint8_t *src = seg[s].ptr + (uint64_t)(seg[s].row0 + r) * seg[s].row_bytes + off;
        const uint32_t len = min(cb, seg[s].row_bytes - off);
        if ((((uintptr_t)src) & 15u) == 0) {
            for (uint32_t j = 16u * lane; j < len; j += 512u) mk_cp_async16(buf + j, src + j, min(16u, len - j));
        } else {
            /* Rows only 2-byte aligned (an odd count of 84-, 110- or 210-byte blocks before them). */
            for (uint32_t j = 2u * lane; j < len; j += 64u)
                *(unsigned short *)(buf + j) = __ldg((const unsigned short *)(src + j));
        }
    }
    mk_cp_async_commit();
}

__device__ __forceinline__ void mk_qcur_next(const struct mk_qseg *seg, uint32_t nseg, struct mk_qcur *c) {
    uint32_t s, r;
    if (!mk_qcur_seg(seg, nseg, c->k, &s, &r)) return;
    if (++c->ch * mk_qchunk_bytes(seg[s].dtype) >= seg[s].row_bytes) {
        c->ch = 0;
        c->k += MK_BLOCK_WARPS;
    }
}

/* This lane's part of a staged chunk of `len` bytes of float format t against x (from the chunk's
 * first element): 8 lanes per 32-element group, four elements each. One loop per format, so each decode
 * is specialised and the switch stays outside it. */
__device__ __noinline__ float mk_qchunk_dot(uint32_t t, const uint8_t *chunk, uint32_t len, const float *x) {
    const uint32_t lane = threadIdx.x & 31u, q = lane & 7u;
    float acc = 0.0f;
    /* Block size and groups per block are constants inside each case: no divisions in the loop. */
    switch (t) {
#define MK_QCHUNK_LOOP(T)                                                         \
    case T: {                                                                     \
        const uint32_t bb = mk_q_block_bytes(T), gpb = mk_q_block_elems(T) / 32u; \
        const uint32_t groups = len / bb * gpb;                                   \
        for (uint32_t gi = lane >> 3; gi < groups; gi += 4u) {                    \
            const float4 x4 = *(const float4 *)(x + 32u * gi + 4u * q);           \
            const float xa[4] = { x4.x, x4.y, x4.z, x4.w };                       \
            acc += mk_q_dot4(T, chunk + gi / gpb * bb, gi % gpb, q, xa);          \
        }                                                                         \
        break;                                                                    \
    }
        MK_QCHUNK_LOOP(MK_DEV_F32)
        MK_QCHUNK_LOOP(MK_DEV_F16)
        MK_QCHUNK_LOOP(MK_DEV_BF16)
#undef MK_QCHUNK_LOOP
    default: break;
    }
    return acc;
}

/* Up to four weight rows (by value: a noinline callee keeps them in registers). */
struct mk_rows4 {
    const uint8_t *p[4];
};

/* Lane-units (32 elements each) a lane has in flight at once in the block-format matvec (8 and an
 * L2 prefetch of each warp's next rows measured slower on llama-1b Q8_0 and Q4_K_M). */
#ifndef MK_Q8_INFLIGHT
#define MK_Q8_INFLIGHT 4
#endif

/* acc[r] = row r . x' for R rows of block format T, straight from global memory: lane-units
 * lane, lane + 32, ... of every row, MK_Q8_INFLIGHT / R of each row in flight per lane, as the
 * float path keeps 16-byte loads in flight. */
template <uint32_t T, int R>
__device__ __forceinline__ float4 mk_q8_rows_t(const struct mk_rows4 *row, uint32_t units, const struct mk_xq8 *x) {
    const uint32_t lane = threadIdx.x & 31u;
    const int U = MK_Q8_INFLIGHT / R;
    float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (uint32_t u0 = lane; u0 < units; u0 += 32u * U) {
#pragma unroll
        for (int i = 0; i < U; i++) {
            const uint32_t u = u0 + 32u * (uint32_t)i, uc = min(u, units - 1u); /* loads stay unconditional */
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float v = mk_q8_unit(T, row->p[r], uc, x);
                acc[r] += u < units ? v : 0.0f;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = mk_warp_sum(acc[r]);
    return make_float4(acc[0], acc[1], acc[2], acc[3]);
}

__device__ __noinline__ float4 mk_q8_rows(uint32_t t, struct mk_rows4 row, int R, uint32_t units, struct mk_xq8 x) {
    switch (t) {
#define MK_Q8_ROWS(T)                                           \
    case T:                                                     \
        if (R == 4) return mk_q8_rows_t<T, 4>(&row, units, &x); \
        if (R == 2) return mk_q8_rows_t<T, 2>(&row, units, &x); \
        return mk_q8_rows_t<T, 1>(&row, units, &x);
        MK_Q8_ROWS(MK_DEV_Q4_0)
        MK_Q8_ROWS(MK_DEV_Q4_1)
        MK_Q8_ROWS(MK_DEV_Q5_0)
        MK_Q8_ROWS(MK_DEV_Q5_1)
        MK_Q8_ROWS(MK_DEV_Q8_0)
        MK_Q8_ROWS(MK_DEV_Q2_K)
        MK_Q8_ROWS(MK_DEV_Q3_K)
        MK_Q8_ROWS(MK_DEV_Q4_K)
        MK_Q8_ROWS(MK_DEV_Q5_K)
        MK_Q8_ROWS(MK_DEV_Q6_K)
        MK_Q8_ROWS(MK_DEV_IQ4_NL)
        MK_Q8_ROWS(MK_DEV_IQ4_XS)
#undef MK_Q8_ROWS
    default: return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* One pass of the quantizer over four inputs per thread (x[i .. i + 3], i = base + 4 t): eight
 * neighbouring lanes hold a group of 32 and reduce its maximum and level sums with shuffles. Every
 * lane of the warp must call it. Gives the thread's three words of quants and its group's scale
 * and sums (lane 0 of the eight writes those). */
__device__ __forceinline__ void mk_xq_pack_d(float4 v, float d, uint32_t *word, int *s);
__device__ __forceinline__ void mk_xq_pack(float4 v, uint32_t *word, int *s, float *d_out) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    mk_xq_pack_d(v, d, word, s);
    *d_out = d;
}

/* ... at a scale d the caller chose (at least the group's max|x| / 127). */
__device__ __forceinline__ void mk_xq_pack_d(float4 v, float d, uint32_t *word, int *s) {
    const float xv[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
    for (int m = 0; m < 3; m++) word[m] = 0u, s[m] = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int l[3];
        mk_xq_levels(xv[k], d, l);
#pragma unroll
        for (int m = 0; m < 3; m++) {
            word[m] |= ((uint32_t)l[m] & 255u) << (8 * k);
            s[m] += l[m];
        }
    }
#pragma unroll
    for (int m = 0; m < 3; m++)
        for (int o = 4; o > 0; o >>= 1) s[m] += __shfl_xor_sync(0xffffffffu, s[m], o);
}

/* Stores what mk_xq_pack gave for input i (< n) of group i / 32. */
__device__ __forceinline__ void mk_xq_store(uint32_t i, const uint32_t *word, const int *s, float d, int8_t *q,
                                            struct mk_xgroup *grp) {
    const uint32_t g = i / 32u, p = i % 32u;
#pragma unroll
    for (int m = 0; m < 3; m++) *(uint32_t *)(q + 96u * g + 32u * m + p) = word[m];
    if ((threadIdx.x & 7u) == 0) {
        grp[g].d = d;
        for (int m = 0; m < 3; m++) grp[g].s[m] = s[m];
    }
}

/* The quantizer's passes over the n floats at src (shared memory, n a multiple of 32) into quants
 * at q and group scales and sums at grp (shared or global memory). q may overlay src: each pass of
 * 1024 elements writes its 3072 bytes of quants only after every thread read its floats, and they
 * cover floats this or earlier passes read. */
__device__ __noinline__ void mk_block_xq_passes(const float *src, uint32_t n, int8_t *q, struct mk_xgroup *grp) {
    for (uint32_t base = 0; base < n; base += 4u * MK_BLOCK_THREADS) {
        const uint32_t i = base + 4u * threadIdx.x;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < n) v = *(const float4 *)(src + i);
        uint32_t word[3];
        int s[3];
        float d;
        mk_xq_pack(v, word, s, &d);
        __syncthreads();
        if (i < n) mk_xq_store(i, word, s, d, q, grp);
    }
    __syncthreads();
}

/* x for the int8 dots from xs (n floats, n a multiple of 32): the groups' scales and sums at
 * `area`, the quants over xs itself, or after the groups with `keep` (when float formats of the
 * same op still read xs). */
__device__ __forceinline__ struct mk_xq8 mk_block_quantize_x(float *xs, uint32_t n, float *area, bool keep) {
    struct mk_xgroup *grp = (struct mk_xgroup *)area;
    int8_t *q = keep ? (int8_t *)(area + n / 8u) : (int8_t *)xs;
    mk_block_xq_passes(xs, n, q, grp);
    struct mk_xq8 x = { q, grp };
    return x;
}

/* The int8-level copy (abi.h, MK_XQ_*) of the n_all-element vector whose rows [r0, r0 + count)
 * this block just computed (both multiples of 32), from their values in shared memory at vs:
 * written to the copy at xq once here, so that the matvec tasks reading the vector need not each
 * quantize it. The same levels as theirs, bit for bit: the same floats, groups and passes. */
__device__ __forceinline__ void mk_block_store_xq(const float *vs, uint32_t r0, uint32_t count, uint32_t n_all,
                                                  float *xq) {
    __syncthreads(); /* vs from all the block's threads */
    mk_block_xq_passes(vs, count, (int8_t *)xq + 3u * r0,
                       (struct mk_xgroup *)(xq + MK_XQ_GROUPS_OFF(n_all)) + r0 / 32u);
}

/* Group g of the int8-level copy (abi.h, MK_XQ_*) of an n_all-element vector, from the warp's 32
 * values u (lane l: element 32 g + l): the levels as mk_xq_pack gives them (the same maximum, scale
 * and rounding), so that a reader gets what quantizing the floats itself would give, bit for bit.
 * One warp a group, all in registers: the producer needs no block barrier for it. */
__device__ __forceinline__ void mk_warp_store_xq(float u, uint32_t g, uint32_t n_all, float *xq) {
    const uint32_t lane = threadIdx.x & 31u;
    const float d = mk_warp_max(fabsf(u)) / 127.0f;
    int l[3];
    mk_xq_levels(u, d, l);
    int8_t *q = (int8_t *)xq + 96u * g + lane;
    int sum[3];
#pragma unroll
    for (int m = 0; m < 3; m++) {
        q[32 * m] = (int8_t)l[m];
        sum[m] = l[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum[m] += __shfl_xor_sync(0xffffffffu, sum[m], o);
    }
    if (lane == 0) {
        struct mk_xgroup *gr = (struct mk_xgroup *)(xq + MK_XQ_GROUPS_OFF(n_all)) + g;
        gr->d = d;
        for (int m = 0; m < 3; m++) gr->s[m] = sum[m];
    }
}

/* Group g of the normalized copy (abi.h, MK_XQN_*) of the n_all-element residual stream, from the
 * warp's 32 values v and their norm weights w: the group's sum of v^2, then the levels of v * w. */
__device__ __forceinline__ void mk_warp_store_normq(float v, float w, uint32_t g, uint32_t n_all, float *xq) {
    const float ss = mk_warp_sum(v * v);
    mk_warp_store_xq(v * w, g, n_all, xq);
    if ((threadIdx.x & 31u) == 0) xq[MK_XQN_SS_OFF(n_all) + g] = ss;
}

/* This thread's 8 uint4 of an int8-level copy from uint4 `base` on: nq of quants at src, then ng of
 * groups at gsrc. All are issued before any is used: the copy is one round trip to L2. */
__device__ __forceinline__ void mk_xq_load8(const uint4 *src, const uint4 *gsrc, uint32_t nq, uint32_t ng,
                                            uint32_t base, uint4 *v) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint32_t i = base + (uint32_t)k * MK_BLOCK_THREADS + threadIdx.x;
        if (i < nq + ng) v[k] = __ldcg(i < nq ? src + i : gsrc + (i - nq));
    }
}

/* The int8-level copy of an n-element vector (arena, written by another op during this kernel) into
 * shared memory: its quants at q (3 n bytes), its groups at grp (n / 2 bytes). */
__device__ __noinline__ struct mk_xq8 mk_block_load_xq(const float *xq, uint32_t n, int8_t *q, float *grp) {
    const uint4 *src = (const uint4 *)xq, *gsrc = (const uint4 *)(xq + MK_XQ_GROUPS_OFF(n));
    const uint32_t nq = 3u * n / 16u, ng = n / 32u;
    for (uint32_t base = 0; base < nq + ng; base += 8u * MK_BLOCK_THREADS) {
        uint4 v[8];
        mk_xq_load8(src, gsrc, nq, ng, base, v);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t i = base + (uint32_t)k * MK_BLOCK_THREADS + threadIdx.x;
            if (i < nq)
                ((uint4 *)q)[i] = v[k];
            else if (i < nq + ng)
                ((uint4 *)grp)[i - nq] = v[k];
        }
    }
    __syncthreads();
    struct mk_xq8 x = { q, (const struct mk_xgroup *)grp };
    return x;
}

/* Group sums of squares each lane loads beside the copy (n up to 32 * 32 * this in one go). */
#define MK_XQN_SS_PER_LANE 8u

/* A norm op's input from the normalized copy its producers wrote (abi.h, MK_XQN_*; n elements,
 * n a multiple of 32): quants at q and groups at grp as mk_block_load_xq puts them, each group's
 * scale times the RMSNorm scale. Every warp adds up the groups' sums of squares itself, in the
 * same order (so every warp and task scales alike), with its loads in flight beside the copy's:
 * no block barrier beyond the copy's own. Its own function rather than a flag of mk_block_load_xq,
 * whose store loop it repeats (both load through mk_xq_load8): the flag measured slower on llama-8b
 * Q4_K_M (4.083 against 4.021 ms). */
__device__ __noinline__ struct mk_xq8 mk_block_load_normq(const float *xq, uint32_t n, float eps, int8_t *q,
                                                          float *grp) {
    const uint32_t lane = threadIdx.x & 31u, ng = n / 32u, nq = 3u * n / 16u;
    const float *ss = xq + MK_XQN_SS_OFF(n);
    const uint4 *src = (const uint4 *)xq, *gsrc = (const uint4 *)(xq + MK_XQ_GROUPS_OFF(n));
    float part[MK_XQN_SS_PER_LANE];
#pragma unroll
    for (uint32_t k = 0; k < MK_XQN_SS_PER_LANE; k++) {
        const uint32_t g = lane + 32u * k;
        part[k] = g < ng ? __ldcg(ss + g) : 0.0f;
    }
    float scale = 0.0f;
    for (uint32_t base = 0; base < nq + ng; base += 8u * MK_BLOCK_THREADS) {
        uint4 v[8];
        mk_xq_load8(src, gsrc, nq, ng, base, v);
        if (base == 0) {
            float sum = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < MK_XQN_SS_PER_LANE; k++) sum += part[k];
            for (uint32_t g = lane + 32u * MK_XQN_SS_PER_LANE; g < ng; g += 32u) sum += __ldcg(ss + g);
            scale = 1.0f / sqrtf(mk_warp_sum(sum) / (float)n + eps);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t i = base + (uint32_t)k * MK_BLOCK_THREADS + threadIdx.x;
            if (i < nq) {
                ((uint4 *)q)[i] = v[k];
            } else if (i < nq + ng) {
                v[k].x = __float_as_uint(__uint_as_float(v[k].x) * scale); /* the group's d */
                ((uint4 *)grp)[i - nq] = v[k];
            }
        }
    }
    __syncthreads();
    struct mk_xq8 x = { q, (const struct mk_xgroup *)grp };
    return x;
}

/* Passes of four inputs per thread whose loads mk_block_prep keeps in flight at once: an input of
 * up to 8192 floats (with 256 threads) is one round trip to L2. */
#define MK_PREP_PASSES 8
#define MK_PREP_WIDTH  (4u * MK_BLOCK_THREADS)

/* A norm op's input in one go: x (arena, n floats, read through L2) times RMSNorm with the f32
 * norm weight nw lands in xs as floats, or with `area` as the int8 levels of mk_block_quantize_x
 * (quants over xs, groups at area; n a multiple of 32). The floats never touch shared memory on
 * the way, and each thread's loads are in flight together (all of x stays in registers, so n is
 * at most MK_PREP_PASSES * MK_PREP_WIDTH), where mk_block_rmsnorm then mk_block_quantize_x took a
 * round trip to L2 per element per thread and two passes over shared memory. The norm forms
 * (x * w) * scale like mk_block_rmsnorm; its sum of squares adds in another order (the executors
 * agree within rounding, not bit for bit, as before). With `area` and the normalized copy that x's
 * producers wrote (`copy`, abi.h MK_XQN_*) the levels come from the copy instead, x is not read.
 * (The copy's loader is called from here rather than from mk_block_norm_input, which each norm op
 * inlines: there it cost llama-1b, whose ops take no copy, 2 % of a token.) */
__device__ __noinline__ struct mk_xq8 mk_block_prep(const float *x, uint32_t n, const float *nw, float eps, float *xs,
                                                    float *area, const float *copy) {
    if (copy && area) return mk_block_load_normq(copy, n, eps, (int8_t *)xs, area);
    const float4 *x4 = (const float4 *)x, *w4 = (const float4 *)nw;
    struct mk_xgroup *grp = (struct mk_xgroup *)area;
    int8_t *q = (int8_t *)xs;
    float4 v[MK_PREP_PASSES];
#pragma unroll
    for (int k = 0; k < MK_PREP_PASSES; k++) {
        const uint32_t i = (uint32_t)k * MK_PREP_WIDTH + 4u * threadIdx.x;
        v[k] = i < n ? __ldcg(x4 + i / 4u) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < MK_PREP_PASSES; k++) {
        const uint32_t i = (uint32_t)k * MK_PREP_WIDTH + 4u * threadIdx.x;
        const float4 w = i < n ? __ldg(w4 + i / 4u) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        v[k] = make_float4(v[k].x * w.x, v[k].y * w.y, v[k].z * w.z, v[k].w * w.w);
    }
    const float scale = 1.0f / sqrtf(mk_block_sum(ss) / (float)n + eps);
#pragma unroll
    for (int k = 0; k < MK_PREP_PASSES; k++) {
        const uint32_t pass = (uint32_t)k * MK_PREP_WIDTH, i = pass + 4u * threadIdx.x;
        if (pass >= n) break; /* the same for the whole block: the shuffles see every lane */
        const float4 y = make_float4(v[k].x * scale, v[k].y * scale, v[k].z * scale, v[k].w * scale);
        if (area) {
            uint32_t word[3];
            int s[3];
            float d;
            mk_xq_pack(y, word, s, &d);
            if (i < n) mk_xq_store(i, word, s, d, q, grp);
        } else if (i < n) {
            *(float4 *)(xs + i) = y;
        }
    }
    __syncthreads();
    struct mk_xq8 xq = { q, grp };
    return xq;
}

/* A norm op's input RMSNorm(x) * w (norm weight norm_idx) in xs: through mk_block_prep where the
 * op allows it (`prep`: its matrices all float formats or all block formats) and it can (an f32
 * norm weight, aligned vectors, n within its registers), else mk_block_rmsnorm. With `area` (all
 * block formats) mk_block_prep writes the int8 levels instead of the floats, or with a copy its
 * producers wrote (buf3) they are read from there; then *xq holds them and the result is true, for
 * mk_qrows's `pre`. */
__device__ __forceinline__ bool mk_block_norm_input(const struct mk_task_ctx *c, float *xs, const float *x, uint32_t n,
                                                    uint32_t norm_idx, float eps, bool prep, float *area,
                                                    struct mk_xq8 *xq) {
    const struct mk_wdesc nw = mk_weight(c, norm_idx);
    if (prep && nw.dtype == MK_DEV_F32 && n % 4u == 0 && n <= MK_PREP_PASSES * MK_PREP_WIDTH &&
        (((uintptr_t)x | (uintptr_t)xs | (uintptr_t)nw.ptr) % 16u) == 0) {
        *xq = mk_block_prep(x, n, (const float *)nw.ptr, eps, xs, area,
                            c->in->buf[3] != MK_NO_BUF ? mk_arena(c) + c->in->buf[3] : NULL);
        return area != NULL;
    }
    mk_block_rmsnorm(c, xs, x, n, norm_idx, eps);
    return false;
}

/* res[seg.res0 + i] = row(seg.row0 + i) . xs for every row of the segments, in any format. Block
 * formats take x rounded to int8 levels (mk_block_quantize_x, which overwrites xs when no float
 * format needs it) and stream their rows straight from global memory; float formats in the same
 * op stream theirs chunk by chunk through MK_QSTAGES buffers of `stage` (MK_QSTAGE_BYTES each per
 * warp), the copies of the next chunks in flight while the current one is decoded. The groups of
 * x follow the stages (when there are float formats) at `stage`; `pre`, when given, is x already
 * in int8 levels there (mk_block_prep; only for ops with no float format). Ends with
 * __syncthreads, so res is complete for the whole block. */
__device__ __noinline__ void mk_qrows(const struct mk_qseg *all, uint32_t nall, float *xs, float *res, uint8_t *stage,
                                      const struct mk_xq8 *pre) {
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    struct mk_qseg seg[3]; /* the float-format segments */
    uint32_t nseg = 0;
    bool any_block = false;
    for (uint32_t i = 0; i < nall; i++) {
        if (mk_layout_is_block_format(all[i].dtype))
            any_block = true;
        else if (nseg < 3u)
            seg[nseg++] = all[i];
    }
    uint8_t *bufs = stage + warp * MK_QSTAGES * MK_QSTAGE_BYTES;
    struct mk_qcur prod = { warp, 0u }, cons = prod;
    if (nseg) {
        for (uint32_t i = 0; i + 1u < MK_QSTAGES; i++) {
            mk_qissue(seg, nseg, prod, bufs + i * MK_QSTAGE_BYTES);
            mk_qcur_next(seg, nseg, &prod);
        }
    }
    if (any_block) {
        /* While the float chunks are on their way: x for the block formats, then their rows. */
        float *area = (float *)(stage + (nseg ? 4u * mk_layout_qstage_words() : 0u));
        const struct mk_xq8 xq = pre ? *pre : mk_block_quantize_x(xs, all[0].cols, area, nseg > 0);
        mk_qmma_rows(all, nall, xq, res);
        for (uint32_t i = 0; i < nall; i++) {
            const struct mk_qseg *sg = &all[i];
            if (!mk_layout_is_block_format(sg->dtype) || mk_qmma_type(sg->dtype)) continue;
            const int R = mk_rows_per_warp(sg->n);
            for (uint32_t k = warp * (uint32_t)R; k < sg->n; k += MK_BLOCK_WARPS * (uint32_t)R) {
                struct mk_rows4 rw;
#pragma unroll
                for (int r = 0; r < 4; r++)
                    rw.p[r] = sg->ptr + (uint64_t)(sg->row0 + min(k + (uint32_t)r, sg->n - 1u)) * sg->row_bytes;
                const float4 a = mk_q8_rows(sg->dtype, rw, R, sg->cols / 32u, xq);
                const float av[4] = { a.x, a.y, a.z, a.w };
                if (lane == 0)
                    for (int r = 0; r < R; r++)
                        if (k + (uint32_t)r < sg->n) res[sg->res0 + k + r] = av[r];
            }
        }
    }
    float acc = 0.0f;
    uint32_t s, r;
    for (uint32_t it = 0; nseg && mk_qcur_seg(seg, nseg, cons.k, &s, &r); it++) {
        mk_qissue(seg, nseg, prod, bufs + ((it + MK_QSTAGES - 1u) % MK_QSTAGES) * MK_QSTAGE_BYTES);
        mk_qcur_next(seg, nseg, &prod);
        mk_cp_async_wait_stages();
        __syncwarp();
        const uint32_t cb = mk_qchunk_bytes(seg[s].dtype), off = cons.ch * cb;
        const uint32_t len = min(cb, seg[s].row_bytes - off);
        const uint32_t e0 = off / mk_q_block_bytes(seg[s].dtype) * mk_q_block_elems(seg[s].dtype);
        acc += mk_qchunk_dot(seg[s].dtype, bufs + (it % MK_QSTAGES) * MK_QSTAGE_BYTES, len, xs + e0);
        __syncwarp(); /* this buffer is refilled by the next iteration's copy */
        if (off + len >= seg[s].row_bytes) {
            acc = mk_warp_sum(acc);
            if (lane == 0) res[seg[s].res0 + r] = acc;
            acc = 0.0f;
        }
        mk_qcur_next(seg, nseg, &cons);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
}

#endif
