/* mk_chunk_mv: a chunk step's matrix product over a few token rows (the LM head of the output rows), one warp per weight row at a time, x held in shared memory. */
#ifndef MK_CHUNK_MV_CUH
#define MK_CHUNK_MV_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/mm.cuh"

/* Block b: weight rows [b * R, b * R + R), R = MK_CHUNK_MV_ROWS, warp w every MK_BLOCK_WARPS-th
 * of them from w; y[i, r] = w0[r] . x[i] for the l.m <= MK_CHUNK_MV_TOKENS token rows, whose split
 * rows (chunk.h) come to shared memory as floats once per block (dynamic: MK_CHUNK_MV_SMEM(m, K)).
 * The tile kernels would spend a whole 64-token tile on each row's decode for one token; here a
 * lane decodes 8 weights at a time and uses them for every token. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_mv(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    float *xs = (float *)mk_chunk_smem; /* (m, K) */
    struct mk_task_ctx c;
    c.a = &a;
    const struct mk_wdesc w = mk_weight(&c, l.w0);
    const uint32_t K = w.cols, m = min(l.m, MK_CHUNK_MV_TOKENS), lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (uint32_t e = threadIdx.x; e < m * K; e += MK_BLOCK_THREADS) {
        const uint32_t i = e / K, k = e % K;
        const __nv_bfloat16 *row = (const __nv_bfloat16 *)((const float *)a.arena + l.x_off + (uint64_t)i * l.ldx);
        xs[e] = __bfloat162float(row[k]) + __bfloat162float(row[l.ldx + k]);
    }
    __syncthreads();
    const uint32_t r_end = min(w.rows, (blockIdx.x + 1u) * MK_CHUNK_MV_ROWS);
    for (uint32_t r = blockIdx.x * MK_CHUNK_MV_ROWS + warp; r < r_end; r += MK_BLOCK_WARPS) {
        float acc[MK_CHUNK_MV_TOKENS];
#pragma unroll
        for (uint32_t i = 0; i < MK_CHUNK_MV_TOKENS; i++) acc[i] = 0.0f;
        for (uint32_t k = lane * 8u; k < K; k += 256u) {
            float v[8];
            mk_mm_fetch_w<true>(&w, r, k, v);
#pragma unroll
            for (uint32_t i = 0; i < MK_CHUNK_MV_TOKENS; i++) {
                if (i >= m) break;
                const float *xi = xs + i * K + k;
#pragma unroll
                for (uint32_t j = 0; j < 8u; j++)
                    if (k + j < K) acc[i] = fmaf(v[j], xi[j], acc[i]);
            }
        }
#pragma unroll
        for (uint32_t i = 0; i < MK_CHUNK_MV_TOKENS; i++) {
            if (i >= m) break;
            float s = acc[i];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) ((float *)a.arena)[l.y_off + (uint64_t)i * l.ldy + r] = s;
        }
    }
}

#endif
