/* MK_OP_NORM_QKV_ROPE: RMSNorm, rows of [wq; wk; wv], RoPE on q and k, k and v appended to the KV cache. */
#ifndef MK_OP_NORM_QKV_ROPE_CUH
#define MK_OP_NORM_QKV_ROPE_CUH

#include "megakernel/common.cuh"

struct mk_qkv {
    struct mk_wdesc m[3]; /* wq, wk, wv */
    uint32_t q_dim, kv_dim;
};

/* Which of wq, wk, wv holds row r of [wq; wk; wv], and the row's index in it. */
__device__ __forceinline__ uint32_t mk_qkv_which(const struct mk_qkv *q, uint32_t *r) {
    if (*r < q->q_dim) return 0;
    if (*r < q->q_dim + q->kv_dim) {
        *r -= q->q_dim;
        return 1;
    }
    *r -= q->q_dim + q->kv_dim;
    return 2;
}

/* With R > 1 the caller guarantees one format for all three matrices; R = 1 takes the row's own. */
__device__ __forceinline__ void mk_qkv_rows(const struct mk_qkv *q, const float *xs, float *res, uint32_t r0,
                                            uint32_t count, uint32_t g, bool vec, const int R) {
    const uint8_t *rows[4];
    float acc[4];
    uint32_t m = 0;
#pragma unroll
    for (int r = 0; r < R; r++) {
        uint32_t row = r0 + min(g + (uint32_t)r, count - 1u);
        m = mk_qkv_which(q, &row);
        rows[r] = mk_row(&q->m[m], row);
    }
    if (R == 1) vec = q->m[m].vec;
    mk_dot_rows(rows, R, q->m[m].dtype, vec, q->m[0].cols, xs, acc);
    if ((threadIdx.x & 31u) == 0) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (g + (uint32_t)r < count) res[g + r] = acc[r];
    }
}

/* Element i of the task's rows, to q in the arena or to the KV cache row of this step (element
 * offset cache_row, in the cache's type). */
__device__ __forceinline__ void mk_qkv_store(const struct mk_task_ctx *c, const struct mk_qkv *q, uint32_t r, float v,
                                             float *qout, uint64_t cache_row) {
    if (r < q->q_dim) {
        qout[r] = v;
        return;
    }
    const bool is_k = r < q->q_dim + q->kv_dim;
    const uint64_t i = cache_row + r - q->q_dim - (is_k ? 0u : q->kv_dim);
    void *cache = (void *)(is_k ? c->a->k_cache : c->a->v_cache);
    if (c->a->kv_type == MK_KV_F16)
        mk_kv_st((__half *)cache + i, v);
    else
        mk_kv_st((float *)cache + i, v);
}

/* cos, sin of pair k's angle pos * rope_scale * rope_base^(-2k/n_rot) / rope_freqs[k]: from the
 * host's table when it was made for these parameters, else in double as the CPU executor does. */
__device__ __forceinline__ float2 mk_qkv_rope_cs(const struct mk_task_ctx *c, const struct mk_args_qkv *qa, uint32_t k,
                                                 int32_t pos) {
    const struct mk_kernel_args *ka = c->a;
    if (ka->rope_table && ka->rope_pairs * 2u == qa->n_rot && ka->rope_base == qa->rope_base &&
        ka->rope_scale == qa->rope_scale && ka->rope_freqs == qa->rope_freqs)
        return __ldg((const float2 *)ka->rope_table + (uint64_t)pos * (qa->n_rot / 2u) + k);
    double theta = (double)pos * (double)qa->rope_scale * pow((double)qa->rope_base, -2.0 * k / qa->n_rot);
    if (qa->rope_freqs != MK_NO_WEIGHT) theta /= (double)__ldg((const float *)mk_weight(c, qa->rope_freqs).ptr + k);
    return make_float2((float)cos(theta), (float)sin(theta));
}

/* After the matvec: biases, per-head q/k norms, RoPE, then the stores. Pairs never straddle a
 * task: tiles hold even rows, or whole heads for NEOX pairs and the norms (the validator checks). */
__device__ void mk_qkv_epilogue(const struct mk_task_ctx *c, const struct mk_qkv *q, float *res, uint32_t r0,
                                uint32_t count, int32_t pos) {
    const struct mk_instr *in = c->in;
    const struct mk_args_qkv *qa = &in->args.qkv;
    const uint32_t head_dim = qa->head_dim, n_rot = qa->n_rot, qk_dim = q->q_dim + q->kv_dim;
    if (qa->bias != MK_NO_WEIGHT) {
        const float *bias[3];
        for (uint32_t m = 0; m < 3u; m++) bias[m] = (const float *)mk_weight(c, qa->bias + m).ptr;
        for (uint32_t i = threadIdx.x; i < count; i += MK_BLOCK_THREADS) {
            uint32_t r = r0 + i;
            uint32_t m = mk_qkv_which(q, &r);
            res[i] += __ldg(bias[m] + r);
        }
        __syncthreads();
    }
    if (qa->flags & MK_QKV_QK_NORM) {
        /* One warp per q or k head of the task. */
        const uint32_t lane = threadIdx.x & 31u;
        for (uint32_t h0 = (threadIdx.x >> 5) * head_dim; h0 < count; h0 += MK_BLOCK_WARPS * head_dim) {
            if (r0 + h0 >= qk_dim) break;
            const float *w = (const float *)mk_weight(c, qa->qk_norm + (r0 + h0 < q->q_dim ? 0u : 1u)).ptr;
            float *v = res + h0, ss = 0.0f;
            for (uint32_t i = lane; i < head_dim; i += 32u) ss += v[i] * v[i];
            ss = mk_warp_sum(ss);
            float scale = 1.0f / sqrtf(ss / (float)head_dim + qa->eps);
            for (uint32_t i = lane; i < head_dim; i += 32u) v[i] = v[i] * scale * __ldg(w + i);
        }
        __syncthreads();
    }
    float *qout = mk_arena(c) + in->buf[1];
    const uint64_t cache_row = ((uint64_t)qa->layer * c->a->n_ctx + (uint32_t)pos) * q->kv_dim;
    const bool neox = (qa->flags & MK_QKV_NEOX) != 0;
    const uint32_t half = n_rot / 2u;
    for (uint32_t i = threadIdx.x; i < count; i += MK_BLOCK_THREADS) {
        const uint32_t r = r0 + i;
        if (r >= qk_dim) {
            mk_qkv_store(c, q, r, res[i], qout, cache_row);
            continue;
        }
        const uint32_t dim = (r < q->q_dim ? r : r - q->q_dim) % head_dim;
        /* The thread of a pair's first element rotates and stores both; the second's skips it. */
        const bool rotated = dim < n_rot;
        const bool first = neox ? dim < half : dim % 2u == 0u;
        if (!rotated) {
            mk_qkv_store(c, q, r, res[i], qout, cache_row);
            continue;
        }
        if (!first) continue;
        const uint32_t off = neox ? half : 1u;
        float2 cs = mk_qkv_rope_cs(c, qa, neox ? dim : dim / 2u, pos);
        float a = res[i], b = res[i + off];
        mk_qkv_store(c, q, r, a * cs.x - b * cs.y, qout, cache_row);
        mk_qkv_store(c, q, r + off, a * cs.y + b * cs.x, qout, cache_row);
    }
}

__device__ void mk_op_norm_qkv_rope(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    struct mk_qkv q;
    q.m[0] = mk_weight(c, in->weight[1]);
    q.m[1] = mk_weight(c, in->weight[2]);
    q.m[2] = mk_weight(c, in->weight[3]);
    const struct mk_args_qkv *qa = &in->args.qkv;
    q.q_dim = qa->q_dim;
    q.kv_dim = qa->kv_dim;
    const int32_t pos = c->cmd->pos;
    if (pos < 0 || (uint32_t)pos >= c->a->n_ctx) {
        mk_device_fail(c->a, c->fail, MK_DEVERR_BAD_POS, (uint32_t)pos);
        return;
    }
    const uint32_t n = q.m[0].cols;
    float *xs = c->smem;
    float *res = c->smem + mk_layout_align4(n);
    uint8_t *stage = (uint8_t *)(res + mk_layout_align4(qa->rows_per_task));
    const int blocks = mk_layout_is_block_format(q.m[0].dtype) + mk_layout_is_block_format(q.m[1].dtype) +
                       mk_layout_is_block_format(q.m[2].dtype);
    struct mk_xq8 xq;
    const bool pre = mk_block_norm_input(c, xs, mk_arena(c) + in->buf[0], n, in->weight[0], qa->eps,
                                         blocks == 0 || blocks == 3, blocks == 3 ? (float *)stage : NULL, &xq);

    uint32_t r0, count;
    mk_qkv_task_rows(qa, c->t, &r0, &count);
    if (count == 0u) return;
    const bool vec = q.m[0].vec && q.m[1].vec && q.m[2].vec;
    const uint32_t warp = threadIdx.x >> 5;
    if (blocks) {
        /* [r0, r0 + count) of [wq; wk; wv] as up to three runs of rows, one per matrix. */
        struct mk_qseg seg[3];
        uint32_t nseg = 0, done = 0;
        while (done < count) {
            uint32_t row = r0 + done, m = mk_qkv_which(&q, &row);
            uint32_t n = min(count - done, q.m[m].rows - row);
            seg[nseg++] = mk_qseg_make(&q.m[m], row, n, done);
            done += n;
        }
        mk_qrows(seg, nseg, xs, res, stage, pre ? &xq : NULL);
    } else {
        /* Mixed formats (Q4_K_M gives some layers a Q6_K wv) take one row per warp. */
        const bool same = q.m[0].dtype == q.m[1].dtype && q.m[0].dtype == q.m[2].dtype;
        int R = same ? mk_rows_per_warp(count) : 1;
        if (R == 4) {
            for (uint32_t g = warp * 4u; g < count; g += MK_BLOCK_WARPS * 4u)
                mk_qkv_rows(&q, xs, res, r0, count, g, vec, 4);
        } else if (R == 2) {
            for (uint32_t g = warp * 2u; g < count; g += MK_BLOCK_WARPS * 2u)
                mk_qkv_rows(&q, xs, res, r0, count, g, vec, 2);
        } else {
            for (uint32_t g = warp; g < count; g += MK_BLOCK_WARPS) mk_qkv_rows(&q, xs, res, r0, count, g, vec, 1);
        }
    } /* float formats */
    __syncthreads();
    mk_qkv_epilogue(c, &q, res, r0, count, pos);
}

#endif
