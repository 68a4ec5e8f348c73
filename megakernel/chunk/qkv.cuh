/* mk_chunk_qkv: the chunk step's q, k, v rows (made by mk_chunk_mm) through the one-token op's epilogue: biases, q/k norms, RoPE, the KV cache. */
#ifndef MK_CHUNK_QKV_CUH
#define MK_CHUNK_QKV_CUH

#include "megakernel/chunk.h"
#include "megakernel/chunk/rows.cuh"
#include "megakernel/ops/norm_qkv_rope.cuh"

/* Block (t, i): rows [t * B, t * B + B) of [q; k; v] of token row i, B = mk_chunk_qkv_rows(
 * rows_per_task), read from the (m, q_dim + 2 kv_dim) rows at x_off, finished by mk_qkv_epilogue
 * at position pos + i. With l.splits > 1 the rows are the sums of the product's split partials at
 * x_off (mk_chunk_part_sum), which this adds in place of mk_chunk_mm_reduce, over blocks of
 * B = mk_chunk_qkv_fold_rows(rows_per_task). B is whole tasks of the instruction, which hold whole
 * heads where the epilogue needs them, as in the one-token op. Dynamic shared memory: B floats. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS)
    mk_chunk_qkv(const __grid_constant__ struct mk_kernel_args a, const struct mk_chunk_launch l) {
    __shared__ struct mk_instr s_in;
    __shared__ struct mk_step_cmd s_cmd;
    const uint32_t i = blockIdx.y;
    /* The program is no kernel's output: its copy overlaps the kernel ahead. */
    if (threadIdx.x == 0) {
        s_in = ((const struct mk_instr *)a.instrs)[l.ii];
        s_in.buf[1] += i * s_in.args.qkv.q_dim; /* q row i */
    }
    mk_grid_dep_wait();
    if (threadIdx.x == 0) s_cmd = *mk_chunk_cmd(&a);
    __syncthreads();
    const struct mk_args_qkv *qa = &s_in.args.qkv;
    struct mk_qkv q;
    q.q_dim = qa->q_dim;
    q.kv_dim = qa->kv_dim;
    const bool fold = l.splits > 1u;
    const uint32_t total = q.q_dim + 2u * q.kv_dim;
    const uint32_t rows = fold ? mk_chunk_qkv_fold_rows(qa->rows_per_task) : mk_chunk_qkv_rows(qa->rows_per_task);
    const uint32_t r0 = blockIdx.x * rows;
    if (r0 >= total) return;
    const uint32_t count = min(rows, total - r0);
    float *res = (float *)mk_chunk_smem;
    const float *src = (const float *)a.arena + l.x_off + (uint64_t)i * l.ldx + r0;
    for (uint32_t k = threadIdx.x; k < count; k += MK_BLOCK_THREADS)
        res[k] = fold ? mk_chunk_part_sum(a, l, i, r0 + k) : __ldcg(src + k);
    __syncthreads();
    const struct mk_task_ctx c = mk_chunk_task_ctx(&a, &s_in, &s_cmd, l.ii, blockIdx.x, res);
    mk_qkv_epilogue(&c, &q, res, r0, count, s_cmd.pos + (int32_t)i);
}

#endif
