/* MK_OP_EMBED: one chunk of the token's embedding row, dequantized into the residual stream. */
#ifndef MK_OP_EMBED_CUH
#define MK_OP_EMBED_CUH

#include "megakernel/common.cuh"

__device__ void mk_op_embed(const struct mk_task_ctx *c) {
    const struct mk_instr *in = c->in;
    struct mk_wdesc w = mk_weight(c, in->weight[0]);
    int32_t tok = c->cmd->token;
    if (tok < 0 || (uint32_t)tok >= w.rows) {
        mk_device_fail(c->a, c->fail, MK_DEVERR_BAD_TOKEN, (uint32_t)tok);
        return;
    }
    const uint8_t *row = mk_row(&w, (uint32_t)tok);
    uint32_t e0 = c->t * in->args.embed.elems_per_task;
    uint32_t e1 = min(e0 + in->args.embed.elems_per_task, in->args.embed.n_embd);
    float *x = mk_arena(c) + in->buf[0];
    for (uint32_t e = e0 + threadIdx.x; e < e1; e += MK_BLOCK_THREADS) x[e] = mk_elem(w.dtype, row, e);
}

#endif
