/* What the CUDA executor's host code and kernels must agree on beyond abi.h: block shape, shared memory per op, the watchdog area. */
#ifndef MK_CUDA_LAYOUT_H
#define MK_CUDA_LAYOUT_H

#include <stdint.h>

#include "megakernel/abi.h"

#ifdef __CUDACC__
#define MK_LAYOUT_FN static __host__ __device__ __forceinline__
#else
#define MK_LAYOUT_FN static inline
#endif

/* Threads per block of both kernels (mk_megakernel, mk_perop); ops are written for any multiple
 * of 32 up to 1024, the host reads nothing else from it. */
#define MK_BLOCK_THREADS 256u
#define MK_BLOCK_WARPS   (MK_BLOCK_THREADS / 32u)

/* Attention heads wider than this are refused at session creation (one thread per dimension). */
#define MK_MAX_HEAD_DIM 256u

/* Float4s of logits each thread of the sampler has in flight in its passes over them (a ring of
 * MK_SAMPLE_DEPTH slots a thread). */
#define MK_SAMPLE_DEPTH 6u

/* The sampler's shared memory: 64-bit sort keys, then logits, ids and scratch of the candidates,
 * a 256-bin radix histogram, then the ring of float4s (all counted in 4-byte words). It stays
 * under the 48 KB a launch gets without asking: the chunk step's sampler is launched on its own. */
#define MK_SAMPLE_SMEM_WORDS \
    (2u * MK_SAMPLE_MAX_CAND + 3u * MK_SAMPLE_MAX_CAND + 256u + 4u * MK_SAMPLE_DEPTH * MK_BLOCK_THREADS)
MK_STATIC_ASSERT(MK_SAMPLE_SMEM_WORDS * 4u <= 48u * 1024u, "the chunk sampler's launch asks for no more shared memory");

MK_LAYOUT_FN uint32_t mk_layout_align4(uint32_t n) { return (n + 3u) & ~3u; }

/* Attention streams K and V through MK_ATTN_STAGES shared-memory tiles (copies of the next tiles
 * in flight while one is computed), each at most MK_ATTN_TILE positions and MK_ATTN_TILE_WORDS
 * words for both; rows are head_dim + 4 words apart, which keeps the float4 reads of the scores
 * free of bank conflicts. The tile does not depend on the split's block: a split of fewer
 * positions fills part of a tile. The stages stay under 64 KB: shared memory taken beyond what
 * the other ops need shrinks the L1 cache of every op (the H100 measured the matvecs 6-10 %
 * slower with 105 KB of attention stages). */
#define MK_ATTN_TILE       64u
#define MK_ATTN_TILE_WORDS 4352u
#define MK_ATTN_STAGES     3u
MK_LAYOUT_FN uint32_t mk_layout_attn_tile(uint32_t head_dim) {
    uint32_t t = MK_ATTN_TILE_WORDS / (2u * (head_dim + 4u));
    t = t < MK_ATTN_TILE ? t & ~7u : MK_ATTN_TILE;
    return t < 8u ? 8u : t;
}
MK_LAYOUT_FN uint32_t mk_layout_attn_words(uint32_t head_dim, uint32_t group) {
    const uint32_t tile = mk_layout_attn_tile(head_dim);
    return 2u * mk_layout_align4(group * head_dim) + MK_ATTN_STAGES * 2u * tile * (head_dim + 4u) +
           mk_layout_align4(group * tile) + 3u * mk_layout_align4(group);
}

/* mk_attn_rows's merge (megakernel/ops/attn_partial.cuh, mk_attn_merge_parts): an (o, m, l) row of
 * head_dim + 2 and a weight for each of the group's heads in each of the block's row groups (256 /
 * head_dim a warp), then a maximum and a sum per head. Only head sizes 64 and 128 take that path. */
MK_LAYOUT_FN uint32_t mk_layout_attn_parts_words(uint32_t head_dim, uint32_t group) {
    if (head_dim != 64u && head_dim != 128u) return 0u;
    return MK_BLOCK_WARPS * (256u / head_dim) * group * (head_dim + 3u) + 2u * group;
}

/* A merge of the nb splits of nh heads (megakernel/ops/attn_combine.cuh): their (o, m, l) rows of
 * head_dim + 2, then a weight for each. */
MK_LAYOUT_FN uint32_t mk_layout_attn_merge_words(uint32_t nh, uint32_t nb, uint32_t head_dim) {
    return nh * nb * (head_dim + 3u);
}

/* Query heads whose partials a merge of the attention splits by the last ATTN_PARTIAL task loads in
 * one round: all g of the KV head where they fit in the attention's own shared memory, else as many
 * as fit, at least one. */
MK_LAYOUT_FN uint32_t mk_layout_attn_merge_heads(uint32_t head_dim, uint32_t g, uint32_t nb) {
    const uint32_t fit = mk_layout_attn_words(head_dim, g) / mk_layout_attn_merge_words(1u, nb, head_dim);
    return fit >= g ? g : fit ? fit : 1u;
}

/* Block-format (quantized) matrices are staged through shared memory: each warp streams its rows
 * in chunks of at most MK_QSTAGE_BYTES through MK_QSTAGES buffers, copies running ahead of the
 * decoding (megakernel/common.cuh, mk_qrows). */
#define MK_QSTAGE_BYTES 2048u
#define MK_QSTAGES      3u
MK_LAYOUT_FN uint32_t mk_layout_qstage_words(void) { return MK_BLOCK_WARPS * MK_QSTAGES * MK_QSTAGE_BYTES / 4u; }

/* A ggml block format rather than f32 (0), f16 (1) or bf16 (30). The device code built with
 * MK_FLOAT_ONLY (//megakernel:megakernel_float_module) has none: every block-format path folds away,
 * and the host loads that build only for programs without block formats. */
#if defined(MK_FLOAT_ONLY) && defined(__CUDA_ARCH__)
MK_LAYOUT_FN int mk_layout_is_block_format(uint32_t dtype) {
    (void)dtype;
    return 0;
}
#else
MK_LAYOUT_FN int mk_layout_is_block_format(uint32_t dtype) { return dtype != 0u && dtype != 1u && dtype != 30u; }
#endif

/* The block-format path's extra words (megakernel/common.cuh, mk_qrows): `res` results (rows of the
 * task, 4-aligned); with `keep` (float formats in the same op, which still read the floats and are
 * staged) the stages; x for the int8 dots (megakernel/quant8.cuh): a scale and three sums per 32
 * inputs, and with `keep` the 3 n bytes of quants, which otherwise overwrite the floats. */
MK_LAYOUT_FN uint32_t mk_layout_qextra_words(int staged, uint32_t res, uint32_t n, int keep) {
    return staged ? mk_layout_align4(res) + (keep ? mk_layout_qstage_words() + 3u * n / 4u : 0u) + n / 8u : 0u;
}

/* 4-byte words of dynamic shared memory the op of `in` uses; the kernels carve exactly this.
 * `w` is the weight table (column counts, and formats for the staged path). */
MK_LAYOUT_FN uint32_t mk_layout_smem_words(const struct mk_instr *in, const struct mk_weight_ref *w) {
    switch (in->op) {
    case MK_OP_MATVEC_RESIDUAL:
        return mk_layout_align4(w[in->weight[0]].cols) +
               mk_layout_qextra_words(mk_layout_is_block_format(w[in->weight[0]].dtype), in->args.matvec.rows_per_task,
                                      w[in->weight[0]].cols, 0);
    case MK_OP_ATTN_OUTPUT: {
        uint32_t own = mk_layout_align4(w[in->weight[0]].cols) +
                       mk_layout_align4(2u * in->args.attn_out.n_head * in->args.attn_out.n_blocks);
        return own + mk_layout_qextra_words(mk_layout_is_block_format(w[in->weight[0]].dtype),
                                            in->args.attn_out.rows_per_task, w[in->weight[0]].cols, 0);
    }
    case MK_OP_NORM_QKV_ROPE: {
        int blocks = 0;
        for (int k = 1; k <= 3; k++) blocks += mk_layout_is_block_format(w[in->weight[k]].dtype);
        /* res is there either way (the epilogue works on it). */
        return mk_layout_align4(w[in->weight[1]].cols) + mk_layout_align4(in->args.qkv.rows_per_task) +
               (blocks ? mk_layout_qextra_words(1, 0u, w[in->weight[1]].cols, blocks < 3) : 0u);
    }
    case MK_OP_ATTN_PARTIAL: {
        const uint32_t hd = in->args.attn.head_dim, g = in->args.attn.n_head / in->args.attn.n_head_kv,
                       nb = in->args.attn.n_blocks, tiles = mk_layout_attn_words(hd, g),
                       parts = mk_layout_attn_parts_words(hd, g), words = tiles > parts ? tiles : parts;
        const uint32_t merge =
            in->args.attn.arrive ? mk_layout_attn_merge_words(mk_layout_attn_merge_heads(hd, g, nb), nb, hd) : 0u;
        return words > merge ? words : merge;
    }
    case MK_OP_NORM_GATE_UP_SILU: {
        int blocks =
            mk_layout_is_block_format(w[in->weight[1]].dtype) + mk_layout_is_block_format(w[in->weight[2]].dtype);
        /* res is there either way: float formats keep their rows of hb in it for the int8-level copy. */
        const uint32_t rpt = in->args.gate_up.rows_per_task;
        return mk_layout_align4(w[in->weight[1]].cols) +
               (blocks > 0 ? mk_layout_qextra_words(1, 2u * rpt, w[in->weight[1]].cols, blocks < 2)
                           : mk_layout_align4(rpt));
    }
    case MK_OP_NORM_LM_HEAD:
        return mk_layout_align4(w[in->weight[1]].cols) +
               mk_layout_qextra_words(mk_layout_is_block_format(w[in->weight[1]].dtype), in->args.lm_head.rows_per_task,
                                      w[in->weight[1]].cols, 0);
    case MK_OP_SAMPLE: return MK_SAMPLE_SMEM_WORDS;
    case MK_OP_ATTN_COMBINE:
        return mk_layout_attn_merge_words(1u, in->args.combine.n_blocks, in->args.combine.head_dim);
    default: return 0;
    }
}

/* The watchdog area: device-mapped host memory the kernel writes only when a wait has lasted
 * MK_WATCH_AFTER_NS, so that a host that gave up can say who waits on what. */
#define MK_WATCH_AFTER_NS 1000000ull

enum mk_watch_state {
    MK_WATCH_IDLE = 0,
    MK_WATCH_COUNTER = 1, /* waits on counter ctr for target, saw `seen` */
    MK_WATCH_HANG = 2,    /* obeys MK_CMD_HANG */
};

struct mk_watch_block {
    uint32_t state; /* enum mk_watch_state */
    uint32_t step;
    uint32_t instr;
    uint32_t ctr;
    uint32_t target;
    uint32_t seen;
    uint32_t pad[2];
};

struct mk_watch {
    uint32_t abort; /* host -> device: nonzero makes every block leave the kernel */
    uint32_t n_blocks;
    uint32_t pad[6];
    /* followed by struct mk_watch_block[n_blocks] */
};
MK_STATIC_ASSERT(sizeof(struct mk_watch_block) == 32, "mk_watch_block is 32 bytes");
MK_STATIC_ASSERT(sizeof(struct mk_watch) == 32, "mk_watch is 32 bytes");

#endif
