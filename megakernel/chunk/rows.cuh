/* Row-wise chunk kernels: the embedding rows of the step's tokens and the RMSNorm of token rows. */
#ifndef MK_CHUNK_ROWS_CUH
#define MK_CHUNK_ROWS_CUH

#include <cuda_bf16.h>

#include "megakernel/chunk.h"
#include "megakernel/common.cuh"
#include "megakernel/sync.cuh"

/* Every chunk kernel's dynamic shared memory (sized per launch by the host), aligned as the
 * 128-byte swizzle's 1024-byte pattern (the swizzled tiles and the copy engine's boxes) assumes. */
extern __shared__ __align__(1024) float4 mk_chunk_smem[];

__device__ __forceinline__ const struct mk_step_cmd *mk_chunk_cmd(const struct mk_kernel_args *a) {
    return &((const struct mk_step_state *)a->step_state)->cmd;
}

/* Value i of a split row (chunk.h) of ld values at row: bf16 hi at i, lo at ld + i. */
__device__ __forceinline__ void mk_split_store(float *row, uint32_t ld, uint32_t i, float v) {
    __nv_bfloat16 *h = (__nv_bfloat16 *)row;
    const __nv_bfloat16 hi = __float2bfloat16_rn(v);
    h[i] = hi;
    h[ld + i] = __float2bfloat16_rn(v - __bfloat162float(hi));
}

/* Value i of such a split row, hi + lo. */
__device__ __forceinline__ float mk_split_load(const __nv_bfloat16 *row, uint32_t ld, uint32_t i) {
    return __bfloat162float(row[i]) + __bfloat162float(row[ld + i]);
}

/* Column n of token row i of a split product's partial sums (l.splits of them at x_off, rows ldx
 * apart, split z at z * m * ldx), added in split order from 0. */
__device__ __forceinline__ float mk_chunk_part_sum(const struct mk_kernel_args &a, const struct mk_chunk_launch &l,
                                                   uint32_t i, uint32_t n) {
    const float *p = (const float *)a.arena + l.x_off + (uint64_t)i * l.ldx + n;
    const uint64_t slice = (uint64_t)l.m * l.ldx;
    float v = 0.0f;
    for (uint32_t z = 0; z < l.splits; z++) v += __ldcg(p + z * slice);
    return v;
}

/* The task context of a one-token op's helper run by a chunk kernel: in and cmd in shared memory,
 * no mailbox (a broken invariant traps). */
__device__ __forceinline__ struct mk_task_ctx mk_chunk_task_ctx(const struct mk_kernel_args *a,
                                                                const struct mk_instr *in,
                                                                const struct mk_step_cmd *cmd, uint32_t ii, uint32_t t,
                                                                float *smem) {
    struct mk_task_ctx c;
    c.a = a;
    c.in = in;
    c.cmd = cmd;
    c.ii = ii;
    c.t = t;
    c.step = 0;
    c.smem = smem;
    c.fail = NULL;
    return c;
}

/* EMBED of a chunk program: block i writes x row i from the embedding row of token i (the host
 * checked the tokens against the vocabulary). */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_embed(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait();
    const struct mk_instr *in = (const struct mk_instr *)a.instrs + l.ii;
    struct mk_task_ctx c;
    c.a = &a;
    const struct mk_wdesc w = mk_weight(&c, __ldg(&in->weight[0]));
    const uint32_t i = blockIdx.x, n = __ldg(&in->args.embed.n_embd);
    const int32_t tok = __ldcg((const int32_t *)a.arena + __ldg(&in->buf[1]) + i);
    const uint8_t *row = mk_row(&w, (uint32_t)tok);
    float *x = (float *)a.arena + __ldg(&in->buf[0]) + (uint64_t)i * n;
    for (uint32_t e = threadIdx.x; e < n; e += MK_BLOCK_THREADS) x[e] = mk_elem(w.dtype, row, e);
}

/* Rows of up to this many float4 a thread (8,192 values) stay in registers in mk_chunk_rmsnorm. */
#define MK_CHUNK_NORM_VEC 8u

/* Block i: y row i = x row i * norm / sqrt(mean(x^2) + eps), formed as the CPU executor forms it,
 * as a split row for the products. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_rmsnorm(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    struct mk_task_ctx c;
    c.a = &a;
    const struct mk_wdesc nw = mk_weight(&c, l.w0);
    const uint32_t n = nw.cols, i = blockIdx.x, tid = threadIdx.x;
    const float *x = (const float *)a.arena + l.x_off + (uint64_t)i * l.ldx;
    float *y = (float *)a.arena + l.y_off + (uint64_t)i * l.ldy;
    /* The grid is a block per token row, so a loop of load rounds waited out n / 256 memory
     * latencies one after another (about 12 us a launch at 4,096): a thread's values are loaded at
     * once into registers instead, the norm's (which no kernel writes) before the wait. Norms are
     * f32 in GGUF files; other types take the loop (mk_elem's decoders inlined for each value made
     * the kernel 17 times longer, and slower to launch than the latencies it saved). */
    constexpr uint32_t V = MK_CHUNK_NORM_VEC;
    if (n <= 4u * V * MK_BLOCK_THREADS && (n & 3u) == 0 && (l.x_off & 3u) == 0 && (l.ldx & 3u) == 0 &&
        nw.dtype == MK_DEV_F32 && ((uintptr_t)nw.ptr & 15u) == 0) {
        float gv[V][4], xv[V][4];
#pragma unroll
        for (uint32_t v = 0; v < V; v++) {
            const uint32_t e = 4u * (v * MK_BLOCK_THREADS + tid);
            const float4 q = e < n ? __ldg((const float4 *)nw.ptr + e / 4u) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            gv[v][0] = q.x, gv[v][1] = q.y, gv[v][2] = q.z, gv[v][3] = q.w;
        }
        mk_grid_dep_wait();
        float ss = 0.0f;
#pragma unroll
        for (uint32_t v = 0; v < V; v++) {
            const uint32_t e = 4u * (v * MK_BLOCK_THREADS + tid);
            const float4 q = e < n ? __ldcg((const float4 *)(x + e)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            xv[v][0] = q.x, xv[v][1] = q.y, xv[v][2] = q.z, xv[v][3] = q.w;
        }
#pragma unroll
        for (uint32_t v = 0; v < V; v++)
#pragma unroll
            for (uint32_t j = 0; j < 4u; j++) ss += xv[v][j] * xv[v][j];
        ss = mk_block_sum(ss);
        const float scale = 1.0f / sqrtf(ss / (float)n + l.eps);
#pragma unroll
        for (uint32_t v = 0; v < V; v++)
#pragma unroll
            for (uint32_t j = 0; j < 4u; j++) {
                const uint32_t e = 4u * (v * MK_BLOCK_THREADS + tid) + j;
                if (e < n) mk_split_store(y, n, e, xv[v][j] * scale * gv[v][j]);
            }
        return;
    }
    mk_grid_dep_wait();
    float ss = 0.0f;
    for (uint32_t e = threadIdx.x; e < n; e += MK_BLOCK_THREADS) {
        float v = __ldcg(x + e);
        ss += v * v;
    }
    ss = mk_block_sum(ss);
    const float scale = 1.0f / sqrtf(ss / (float)n + l.eps);
    for (uint32_t e = threadIdx.x; e < n; e += MK_BLOCK_THREADS)
        mk_split_store(y, n, e, __ldcg(x + e) * scale * mk_elem(nw.dtype, nw.ptr, e));
}

/* Block (b, i): columns [256 b, 256 b + 256) of residual row i (y_off, rows ldy apart) gain the
 * split partials of the MK_CHUNK_MM_ADD product ahead (mk_chunk_part_sum; rows of ldx = the row's
 * n values), as mk_chunk_mm_reduce adds them; then the row's last block to finish writes its
 * RMSNorm (norm w0, eps) as a split row at n_off + i * ldx. Scratch: row i's counter at f_off + i,
 * its blocks' sums at s_off + i * gridDim.x. This takes the place of mk_chunk_mm_reduce
 * and mk_chunk_rmsnorm, two launches whose fixed cost (about 6 us each in a chain of them) was most
 * of their time; the norm itself stays in one block a row, which reads the row once more from L2.
 * The sum of squares adds the blocks' sums in block order, so it is the same on every run. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_reduce_norm(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    static_assert(MK_BLOCK_THREADS == 256u, "MK_CHUNK_FOLD_FLOATS counts blocks of 256 columns");
    struct mk_task_ctx c;
    c.a = &a;
    const struct mk_wdesc nw = mk_weight(&c, l.w0);
    mk_grid_dep_wait();
    const uint32_t n = l.ldx, i = blockIdx.y, e = blockIdx.x * MK_BLOCK_THREADS + threadIdx.x, nb = gridDim.x;
    float *x = (float *)a.arena + l.y_off + (uint64_t)i * l.ldy;
    float v = 0.0f;
    if (e < n) {
        v = __ldcg(x + e) + mk_chunk_part_sum(a, l, i, e);
        x[e] = v;
    }
    const float ss = mk_block_sum(v * v);
    uint32_t *count = (uint32_t *)a.arena + l.f_off + i;
    float *sums = (float *)a.arena + l.s_off + (uint64_t)i * nb;
    if (threadIdx.x == 0) sums[blockIdx.x] = ss;
    if (!mk_block_last_in(count, nb)) return;
    float total = 0.0f;
    for (uint32_t b = 0; b < nb; b++) total += __ldcg(sums + b);
    const float scale = 1.0f / sqrtf(total / (float)n + l.eps);
    float *y = (float *)a.arena + l.n_off + (uint64_t)i * l.ldx;
    /* A thread's loads go out together: one at a time, each waited out its own round trip. */
    constexpr uint32_t U = 8;
    for (uint32_t e0 = threadIdx.x; e0 < n; e0 += U * MK_BLOCK_THREADS) {
        float xv[U], gv[U];
#pragma unroll
        for (uint32_t j = 0; j < U; j++) {
            const uint32_t k = e0 + j * MK_BLOCK_THREADS;
            xv[j] = k < n ? __ldcg(x + k) : 0.0f;
            gv[j] = k < n ? mk_elem(nw.dtype, nw.ptr, k) : 0.0f;
        }
#pragma unroll
        for (uint32_t j = 0; j < U; j++)
            if (e0 + j * MK_BLOCK_THREADS < n) mk_split_store(y, n, e0 + j * MK_BLOCK_THREADS, xv[j] * scale * gv[j]);
    }
    if (threadIdx.x == 0) *count = 0u; /* for the next launch, which starts after this one ends */
}

#endif
