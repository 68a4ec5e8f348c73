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

__device__ void mk_op_norm_qkv_rope(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    struct mk_qkv q;
    q.m[0] = mk_weight(c, in->weight[1]);
    q.m[1] = mk_weight(c, in->weight[2]);
    q.m[2] = mk_weight(c, in->weight[3]);
    const struct mk_args_qkv *qa = &in->args.qkv;
    q.q_dim = qa->q_dim;
    q.kv_dim = qa->kv_dim;
    const uint32_t layer = qa->layer, head_dim = qa->head_dim, n_rot = qa->n_rot;
    const int32_t pos = c->cmd->pos;
    if (pos < 0 || (uint32_t)pos >= c->a->n_ctx) mk_device_fail(c->a, MK_DEVERR_BAD_POS, (uint32_t)pos);
    const uint32_t n = q.m[0].cols;
    float *xs = c->smem;
    float *res = c->smem + mk_layout_align4(n);
    mk_block_rmsnorm(c, xs, mk_arena(c) + in->buf[0], n, in->weight[0], qa->eps);

    const uint32_t total = q.q_dim + 2u * q.kv_dim;
    const uint32_t r0 = c->t * qa->rows_per_task;
    if (r0 >= total) return;
    const uint32_t count = min(qa->rows_per_task, total - r0);
    const bool vec = q.m[0].vec && q.m[1].vec && q.m[2].vec;
    const uint32_t warp = threadIdx.x >> 5;
    if (mk_layout_is_block_format(q.m[0].dtype) || mk_layout_is_block_format(q.m[1].dtype) ||
        mk_layout_is_block_format(q.m[2].dtype)) {
        /* [r0, r0 + count) of [wq; wk; wv] as up to three runs of rows, one per matrix. */
        struct mk_qseg seg[3];
        uint32_t nseg = 0, done = 0;
        while (done < count) {
            uint32_t row = r0 + done, m = mk_qkv_which(&q, &row);
            uint32_t n = min(count - done, q.m[m].rows - row);
            seg[nseg++] = mk_qseg_make(&q.m[m], row, n, done);
            done += n;
        }
        mk_qrows(seg, nseg, xs, res, (uint8_t *)(res + mk_layout_align4(qa->rows_per_task)));
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

    /* Pairs (2i, 2i+1) never straddle a task: rows_per_task, q_dim, kv_dim and head_dim are even. */
    float *qout = mk_arena(c) + in->buf[1];
    const uint64_t cache_row = ((uint64_t)layer * c->a->n_ctx + (uint32_t)pos) * q.kv_dim;
    float *kc = (float *)c->a->k_cache + cache_row;
    float *vc = (float *)c->a->v_cache + cache_row;
    const struct mk_kernel_args *ka = c->a;
    const float2 *table = ka->rope_table && ka->rope_pairs * 2u == n_rot && ka->rope_base == qa->rope_base
                              ? (const float2 *)ka->rope_table
                              : NULL;
    for (uint32_t i = 2u * threadIdx.x; i < count; i += 2u * MK_BLOCK_THREADS) {
        uint32_t r = r0 + i;
        float a = res[i], b = res[i + 1];
        if (r < q.q_dim + q.kv_dim) {
            uint32_t local = r < q.q_dim ? r : r - q.q_dim;
            uint32_t dim = local % head_dim; /* 2i of the pair */
            if (dim < n_rot) {
                float cs, sn;
                if (table) {
                    float2 t = __ldg(table + (uint64_t)pos * (n_rot / 2u) + dim / 2u);
                    cs = t.x;
                    sn = t.y;
                } else {
                    /* In double, as the CPU executor does, so both round the same angles. */
                    double theta = (double)pos * pow((double)qa->rope_base, -(double)dim / (double)n_rot);
                    cs = (float)cos(theta);
                    sn = (float)sin(theta);
                }
                float ra = a * cs - b * sn;
                float rb = a * sn + b * cs;
                a = ra;
                b = rb;
            }
            if (r < q.q_dim) {
                qout[r] = a;
                qout[r + 1] = b;
            } else {
                kc[local] = a;
                kc[local + 1] = b;
            }
        } else {
            uint32_t local = r - q.q_dim - q.kv_dim;
            vc[local] = a;
            vc[local + 1] = b;
        }
    }
}

#endif
