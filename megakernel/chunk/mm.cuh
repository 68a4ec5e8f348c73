/* mk_chunk_mm: the matrix product of a chunk step, each weight tile decoded into shared memory once for a block of token rows (fp32 FMA, any weight format). */
#ifndef MK_CHUNK_MM_CUH
#define MK_CHUNK_MM_CUH

#include "megakernel/chunk.h"
#include "megakernel/common.cuh"

#define MK_MM_WPAD 4u /* keeps the rows of a stage off each other's banks */

/* Columns [k0, k0 + MK_CHUNK_MM_K) of rows [n0, n0 + MK_CHUNK_MM_ROWS) of w, as fp32 into
 * ws[k][row]; rows or columns past the matrix are 0. Thread t decodes 16 neighbouring columns
 * of row t / 2. */
__device__ __forceinline__ void mk_mm_load_w(const struct mk_wdesc *w, uint32_t n0, uint32_t k0, float *ws) {
    const uint32_t r = threadIdx.x >> 1, kh = (threadIdx.x & 1u) * 16u, row = n0 + r;
    const uint32_t ld = MK_CHUNK_MM_ROWS + MK_MM_WPAD;
    float v[16];
    if (row < w->rows && k0 + kh + 16u <= w->cols && w->vec && w->dtype == MK_DEV_BF16) {
        const uint4 *p = (const uint4 *)(mk_row(w, row) + 2ull * (k0 + kh));
        uint4 a = __ldg(p), b = __ldg(p + 1);
        const uint32_t u[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
#pragma unroll
        for (int j = 0; j < 8; j++) {
            v[2 * j] = __uint_as_float(u[j] << 16);
            v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
    } else if (row < w->rows && k0 + kh + 16u <= w->cols && w->vec && w->dtype == MK_DEV_F16) {
        const uint4 *p = (const uint4 *)(mk_row(w, row) + 2ull * (k0 + kh));
        uint4 a = __ldg(p), b = __ldg(p + 1);
        const uint32_t u[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float2 f = mk_h2f2(u[j]);
            v[2 * j] = f.x;
            v[2 * j + 1] = f.y;
        }
    } else {
        const uint8_t *rp = row < w->rows ? mk_row(w, row) : NULL;
#pragma unroll 4
        for (int j = 0; j < 16; j++) {
            uint32_t e = k0 + kh + (uint32_t)j;
            v[j] = rp && e < w->cols ? mk_elem(w->dtype, rp, e) : 0.0f;
        }
    }
#pragma unroll
    for (int j = 0; j < 16; j++) ws[(kh + (uint32_t)j) * ld + r] = v[j];
}

/* Columns [k0, k0 + MK_CHUNK_MM_K) of token rows [m0, m0 + MK_CHUNK_MM_TOKENS) of x into
 * xs[k][token]; thread t takes 8 columns of token t / 4. */
__device__ __forceinline__ void mk_mm_load_x(const float *x, uint32_t ldx, uint32_t m, uint32_t K, uint32_t m0,
                                             uint32_t k0, float *xs) {
    const uint32_t t = threadIdx.x >> 2, kq = (threadIdx.x & 3u) * 8u;
    const uint32_t ld = MK_CHUNK_MM_TOKENS + MK_MM_WPAD;
    const float *xp = x + (uint64_t)(m0 + t) * ldx;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        uint32_t e = k0 + kq + (uint32_t)j;
        xs[(kq + (uint32_t)j) * ld + t] = m0 + t < m && e < K ? __ldcg(xp + e) : 0.0f;
    }
}

/* Thread (ty, tx) = (tid / 16, tid % 16) owns weight rows ty*8 .. +8 and token rows tx*4 .. +4. */
template <int MODE>
__device__ __forceinline__ void mk_chunk_mm_body(const struct mk_kernel_args *a, const struct mk_chunk_launch *l) {
    constexpr uint32_t BN = MK_CHUNK_MM_ROWS, BM = MK_CHUNK_MM_TOKENS, BK = MK_CHUNK_MM_K;
    constexpr uint32_t LDW = BN + MK_MM_WPAD, LDX = BM + MK_MM_WPAD;
    constexpr int NW = MODE == MK_CHUNK_MM_SILU ? 2 : 1;
    __shared__ __align__(16) float ws[NW][BK * LDW];
    __shared__ __align__(16) float xs[BK * LDX];
    struct mk_task_ctx c;
    c.a = a;
    struct mk_wdesc w[NW];
    w[0] = mk_weight(&c, l->w0);
    if (NW == 2) w[NW - 1] = mk_weight(&c, l->w1);
    const uint32_t N = w[0].rows, K = w[0].cols;
    const uint32_t n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    if (n0 >= N || m0 >= l->m) return;
    const float *x = (const float *)a->arena + l->x_off;
    const uint32_t ty = threadIdx.x >> 4, tx = threadIdx.x & 15u;
    float acc[NW][8][4];
#pragma unroll
    for (int q = 0; q < NW; q++)
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[q][i][j] = 0.0f;
    for (uint32_t k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int q = 0; q < NW; q++) mk_mm_load_w(&w[q], n0, k0, ws[q]);
        mk_mm_load_x(x, l->ldx, l->m, K, m0, k0, xs);
        __syncthreads();
#pragma unroll 4
        for (uint32_t k = 0; k < BK; k++) {
            const float4 xb = *(const float4 *)(xs + k * LDX + tx * 4u);
#pragma unroll
            for (int q = 0; q < NW; q++) {
                const float4 w0 = *(const float4 *)(ws[q] + k * LDW + ty * 8u);
                const float4 w1 = *(const float4 *)(ws[q] + k * LDW + ty * 8u + 4u);
                const float wr[8] = { w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w };
                const float xr[4] = { xb.x, xb.y, xb.z, xb.w };
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[q][i][j] = fmaf(wr[i], xr[j], acc[q][i][j]);
            }
        }
        __syncthreads();
    }
    float *y = (float *)a->arena + l->y_off + l->col0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t mt = m0 + tx * 4u + (uint32_t)j;
        if (mt >= l->m) continue;
        float *yr = y + (uint64_t)mt * l->ldy;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t n = n0 + ty * 8u + (uint32_t)i;
            if (n >= N) continue;
            if (MODE == MK_CHUNK_MM_STORE) {
                yr[n] = acc[0][i][j];
            } else if (MODE == MK_CHUNK_MM_ADD) {
                yr[n] = __ldcg(yr + n) + acc[0][i][j];
            } else {
                const float g = acc[0][i][j];
                yr[n] = g / (1.0f + expf(-g)) * acc[NW - 1][i][j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_mm_store(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mm_body<MK_CHUNK_MM_STORE>(&a, &l);
}
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_mm_add(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mm_body<MK_CHUNK_MM_ADD>(&a, &l);
}
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_mm_silu(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_chunk_mm_body<MK_CHUNK_MM_SILU>(&a, &l);
}

#endif
