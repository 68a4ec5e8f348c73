/* The chunk step's output rows: the LM head's tile maxima from the logits, then the one-token sampler on each row. */
#ifndef MK_CHUNK_SAMPLE_CUH
#define MK_CHUNK_SAMPLE_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/rows.cuh"
#include "megakernel/ops/sample.cuh"

/* Block (t, j), for the NORM_LM_HEAD instruction l.ii: the (max logit, lowest index reaching it)
 * of rows [t * rows_per_task, ...) of output row j's logits, where the one-token op puts them. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_lm_tiles(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait();
    __shared__ float wb[MK_BLOCK_WARPS];
    __shared__ uint32_t wi[MK_BLOCK_WARPS];
    const struct mk_instr *in = (const struct mk_instr *)a.instrs + l.ii;
    const uint32_t rpt = in->args.lm_head.rows_per_task, t = blockIdx.x, j = blockIdx.y;
    const uint32_t V = a.vocab, n_tiles = (V + rpt - 1u) / rpt, r0 = t * rpt, r1 = min(V, r0 + rpt);
    const float *logits = (const float *)a.arena + in->buf[1] + (uint64_t)j * V;
    float best = -INFINITY;
    uint32_t bi = 0xffffffffu;
    for (uint32_t r = r0 + threadIdx.x; r < r1; r += MK_BLOCK_THREADS) {
        const float v = __ldcg(logits + r);
        if (mk_better(v, r, best, bi)) {
            best = v;
            bi = r;
        }
    }
    mk_warp_best(&best, &bi);
    if ((threadIdx.x & 31u) == 0) {
        wb[threadIdx.x >> 5] = best;
        wi[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        best = wb[0], bi = wi[0];
        for (uint32_t w = 1; w < MK_BLOCK_WARPS; w++)
            if (mk_better(wb[w], wi[w], best, bi)) {
                best = wb[w];
                bi = wi[w];
            }
        float *tile = (float *)a.arena + in->buf[2] + 2ull * ((uint64_t)j * n_tiles + t);
        tile[0] = best;
        tile[1] = __uint_as_float(bi);
    }
}

/* Block j, for the SAMPLE instruction l.ii: output row j's token (row j of the logits and tile
 * maxima, sampled at position pos + n_tokens - n_out + j), to the out tokens; the last row's also
 * to the step state. Dynamic shared memory: MK_SAMPLE_SMEM_WORDS words. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_sample(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    mk_grid_dep_wait();
    __shared__ struct mk_instr s_in;
    __shared__ struct mk_step_cmd s_cmd;
    const uint32_t j = blockIdx.x;
    uint32_t n_out = 1;
    if (threadIdx.x == 0) {
        s_in = ((const struct mk_instr *)a.instrs)[l.ii];
        s_cmd = *mk_chunk_cmd(&a);
        const uint32_t n = s_cmd.n_tokens ? s_cmd.n_tokens : 1u;
        n_out = s_cmd.n_out ? s_cmd.n_out : 1u;
        s_in.buf[1] += j * s_in.args.sample.vocab;
        s_in.buf[2] += 2u * j * s_in.args.sample.n_tiles;
        s_cmd.pos += (int32_t)(n - n_out + j);
    }
    __syncthreads();
    const struct mk_task_ctx c = mk_chunk_task_ctx(&a, &s_in, &s_cmd, l.ii, 0, (float *)mk_chunk_smem);
    const int32_t tok = s_cmd.temperature <= 0.0f ? mk_sample_greedy(&c) : mk_sample_topk(&c);
    if (threadIdx.x != 0) return;
    ((int32_t *)a.arena)[s_in.buf[3] + j] = tok;
    if (j + 1u == n_out) ((struct mk_step_state *)a.step_state)->out_token = tok;
}

#endif
