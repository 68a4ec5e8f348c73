/* The chunk kernels' launch record: what the host passes with each launch of megakernel/chunk.cu besides the kernel args. */
#ifndef MK_CHUNK_H
#define MK_CHUNK_H

#include <stdint.h>

#include "megakernel/abi.h"

/* A chunk step (several tokens, megakernel/abi.h "Chunk programs") runs as a sequence of
 * ordinary launches on one stream: each instruction of the chunk program becomes one to five
 * launches of the kernels below, which the host picks from the opcode. The chunk program's
 * instructions and arena are in struct mk_kernel_args as for the other kernels; a launch adds this
 * record. Every kernel reads the step's command from mk_kernel_args.step_state. */

/* What mk_chunk_mm writes for output row r (weight row) of token row i; each mode is its own
 * kernel (mk_chunk_mm_store, _add, _silu), and mk_chunk_mm_reduce's argument. */
enum mk_chunk_mm_mode {
    MK_CHUNK_MM_STORE = 0, /* y[i, r] = W0[r] . x[i] */
    MK_CHUNK_MM_ADD = 1,   /* y[i, r] += W0[r] . x[i] (the residual add) */
    MK_CHUNK_MM_SILU = 2,  /* y[i, r] = silu(W0[r] . x[i]) * (W1[r] . x[i]) */
};

/* Split rows: the chunk products take their x (the RMSNorm's rows, the attention's output, the
 * SiLU products) split once by the kernel that makes it: a row of n values holds n bf16 hi values,
 * then n bf16 lo values, in the bytes of n floats (v = hi + lo, hi = bf16(v), lo = bf16(v - hi)).
 * Their tiles then load as they are. Every other row (the residual stream, q, k, v, the partials,
 * the logits) holds floats. */

struct mk_chunk_launch {
    uint32_t ii;     /* the chunk program's instruction this launch serves */
    uint32_t w0;     /* weight table index: the matrix of mk_chunk_mm, the norm of mk_chunk_rmsnorm */
    uint32_t w1;     /* MK_CHUNK_MM_SILU's second matrix; otherwise a matrix whose rows follow w0's, or MK_NO_WEIGHT */
    uint32_t mode;   /* enum mk_chunk_mm_mode, for mk_chunk_mm_reduce */
    uint32_t m;      /* token rows this launch covers (its grid's second dimension) */
    uint32_t x_off;  /* arena offset of input row 0 */
    uint32_t ldx;    /* floats between input rows */
    uint32_t y_off;  /* arena offset of output row 0 */
    uint32_t ldy;    /* floats between output rows */
    uint32_t splits; /* mk_chunk_mm: K is cut into this many splits (grid z), each writing its raw sums to
                      * y_off + z * m * ldy for mk_chunk_mm_reduce; 0 or 1: no split */
    float eps;       /* mk_chunk_rmsnorm; mk_chunk_mv_kq8_* normalizing x (s_off) */
    uint32_t w2;     /* a matrix whose rows follow w1's (q, k, v in one launch), or MK_NO_WEIGHT */
    uint32_t w_off;  /* mk_chunk_mm_*_split: arena offset of the weights as split rows, made by
                      * mk_chunk_wsplit (row r of the stacked w0, w1, w2 at w_off + r * cols);
                      * mk_chunk_mv_kq8_* normalizing x (s_off): the norm's weight table index */
    uint32_t n_off;  /* mk_chunk_reduce_norm: arena offset of the normalized split rows (rows ldx apart);
                      * mk_chunk_mv_kq8_* finishing an MK_CHUNK_MM_ADD (s_off set): the residual rows
                      * (rows ldy apart) */
    union {
        uint32_t f_off;   /* mk_chunk_reduce_norm: arena offset of its counters, one per token row */
        uint32_t x_parts; /* mk_chunk_mv_kq8_*: nonzero when x is the split partials of the
                           * MK_CHUNK_MM_SILU product ahead, this many of them at x_off (rows 2 ldx
                           * apart, up's sums at column ldx + n), which it adds itself */
    };
    uint32_t s_off; /* mk_chunk_reduce_norm: arena offset of its blocks' sums of squares (gridDim.x a row);
                     * mk_chunk_mv_kq8_*: nonzero, its tiles' finish scratch (MK_CHUNK_FIN_FLOATS): an
                     * MK_CHUNK_MM_ADD writes its tiles' sums there, any other mode forms x as the
                     * RMSNorm (norm w_off, eps) of the residual rows at x_off from them */
};
MK_STATIC_ASSERT(sizeof(struct mk_chunk_launch) == 64, "mk_chunk_launch is 64 bytes");
MK_STATIC_ASSERT(offsetof(struct mk_chunk_launch, eps) == 40, "mk_chunk_launch.eps at 40");

/* A CUtensorMap (cuTensorMapEncodeTiled's 128 opaque bytes), passed by value to the _wide_xt
 * kernels: x's hi halves as an (m, K) bf16 tensor whose rows are ldx floats apart, boxes of
 * MK_CHUNK_MM_TX_ROW_BYTES / 2 columns by MK_CHUNK_MM_XB_TOKENS rows; each bf16 matrix as a
 * (rows, K) tensor, boxes of those columns by MK_CHUNK_MM_TX_ROWS rows; both with the 128-byte
 * swizzle of the tiles that mk_wg_desc128 describes. */
struct mk_chunk_tmap {
#ifdef __cplusplus
    alignas(128)
#else
    _Alignas(128)
#endif
        uint64_t opaque[16];
};
struct mk_chunk_tmaps {
    struct mk_chunk_tmap x, w[3]; /* w0, w1, w2 of the launch */
};
MK_STATIC_ASSERT(sizeof(struct mk_chunk_tmaps) == 512, "mk_chunk_tmaps is 4 CUtensorMaps");

/* mk_chunk_mm's tiles: MK_CHUNK_MM_ROWS (mk_chunk_mm_*), MK_CHUNK_MM_WIDE_ROWS (_wide) or
 * MK_CHUNK_MM_SPLIT_ROWS (_split) weight rows by MK_CHUNK_MM_TOKENS token rows per block,
 * MK_CHUNK_MM_K columns per stage (grid: tokens / MK_CHUNK_MM_TOKENS, rows / tile rows; a
 * MK_CHUNK_MM_SILU block makes half its tile rows), and its dynamic shared memory: two stages
 * (MK_CHUNK_MM_WIDE_STAGES for _wide) of bf16 hi and lo tiles, rows 40 apart, of the activations
 * and wt tiles of the weights (hi, and lo where 2; _wide's bf16 weights have no lo). The
 * MK_CHUNK_MM_SILU results, (tokens, rows + 4) fp32, fit in them. */
#define MK_CHUNK_MM_ROWS                      64u
#define MK_CHUNK_MM_WIDE_ROWS                 256u
#define MK_CHUNK_MM_SPLIT_ROWS                256u
#define MK_CHUNK_MM_TOKENS                    64u
#define MK_CHUNK_MM_K                         32u
#define MK_CHUNK_MM_WIDE_STAGES               3u
#define MK_CHUNK_MM_SMEM_AT(rows, stages, wt) ((stages)*2u * 40u * (2u * MK_CHUNK_MM_TOKENS + (wt) * (rows)))
#define MK_CHUNK_MM_SMEM                      MK_CHUNK_MM_SMEM_AT(MK_CHUNK_MM_ROWS, 2u, 2u)
/* _wide: three mma.sync stages, or on sm_90a four of the wgmma ring (2 x 64 x 32 + 256 x 32 bf16). */
#define MK_CHUNK_MM_WG_SMEM \
    (4u * 2u * (2u * MK_CHUNK_MM_TOKENS * MK_CHUNK_MM_K + MK_CHUNK_MM_WIDE_ROWS * MK_CHUNK_MM_K))
#define MK_CHUNK_MM_WIDE_SMEM  MK_CHUNK_MM_WG_SMEM
#define MK_CHUNK_MM_SPLIT_SMEM MK_CHUNK_MM_SMEM_AT(MK_CHUNK_MM_SPLIT_ROWS, 2u, 2u)
/* _wide_xb (x rounded to bf16, the chunk program's act_bf16_min): on sm_90a (cc 9.0) blocks of
 * MK_CHUNK_MM_XB_TOKENS token rows by 256 weight rows (_wide_xb192: 192, _wide_xb128: 128), a ring of
 * MK_CHUNK_MM_XB_STAGES stages (128 x 32 + 256 x 32 bf16; SILU's (tokens, rows + 4) fp32 results fit
 * in them after), one block a multiprocessor; elsewhere the _wide kernels' blocks and shared memory. */
#define MK_CHUNK_MM_XB_TOKENS 128u
#define MK_CHUNK_MM_XB_STAGES 8u
#define MK_CHUNK_MM_XB_SMEM \
    (MK_CHUNK_MM_XB_STAGES * 2u * MK_CHUNK_MM_K * (MK_CHUNK_MM_XB_TOKENS + MK_CHUNK_MM_WIDE_ROWS))
/* _wide_xt (_xt192): the _wide_xb products on sm_90a with their tiles brought in by the copy engine
 * (cp.async.bulk.tensor) from the tensor maps of struct mk_chunk_tmaps, in rows of
 * MK_CHUNK_MM_TX_ROW_BYTES (the 128-byte swizzle), each stage's x box and its weight boxes of
 * MK_CHUNK_MM_TX_ROWS rows completing on the stage's mbarrier. The ring's shared memory, then its
 * full and empty barriers and the boxes' (matrix, row) table. */
#define MK_CHUNK_MM_TX_ROWS      32u
#define MK_CHUNK_MM_TX_ROW_BYTES 128u
#define MK_CHUNK_MM_XT_SMEM      (MK_CHUNK_MM_XB_SMEM + 256u)
/* Their blocks: the product warps' MK_BLOCK_THREADS and a warpgroup whose first warp asks for the
 * copies (registers move between warpgroups, so the copy warp comes with three idle ones). */
#define MK_CHUNK_MM_TX_THREADS (MK_BLOCK_THREADS + 128u)
/* _split on sm_90a (cc 9.0): three stages of the wgmma ring with weight hi and lo tiles. */
#define MK_CHUNK_MM_SPLIT_WG_SMEM \
    (3u * 2u * (2u * MK_CHUNK_MM_TOKENS * MK_CHUNK_MM_K + 2u * MK_CHUNK_MM_SPLIT_ROWS * MK_CHUNK_MM_K))

/* mk_chunk_mm_*_kq, the products of Q4_K, Q5_K and Q6_K matrices over more than MK_CHUNK_MV_TOKENS
 * token rows (up to the host's limit), their integers on the tensor cores (megakernel/chunk/mmq.cuh):
 * MK_CHUNK_MMQ_ROWS weight rows by MK_CHUNK_MM_TOKENS token rows a block (grid: tokens / that, rows
 * / that; SILU half the rows), x through shared memory MK_CHUNK_MMQ_KS columns a stage, one block a
 * multiprocessor with a ring of three stages (MK_CHUNK_MMQ_SMEM). mk_chunk_mm_*_kq32: 32 token rows
 * a block, two blocks a multiprocessor (128 registers each), two stages (MK_CHUNK_MMQ32_SMEM). */
#define MK_CHUNK_MMQ_ROWS        128u
#define MK_CHUNK_MMQ_KS          128u
#define MK_CHUNK_MMQ_STAGE_BYTES (MK_CHUNK_MM_TOKENS * (2u * (2u * MK_CHUNK_MMQ_KS + 32u) + 4u * MK_CHUNK_MMQ_KS / 32u))
#define MK_CHUNK_MMQ_SMEM        (3u * MK_CHUNK_MMQ_STAGE_BYTES)
#define MK_CHUNK_MMQ32_SMEM      (2u * MK_CHUNK_MMQ_STAGE_BYTES)

/* mk_chunk_mm_*_kw, the products of Q4_K, Q5_K and Q6_K matrices over more token rows than the
 * _kq kernels take, on sm_90a's wgmma (megakernel/chunk/mmw.cuh): MK_CHUNK_MMW_ROWS weight rows by
 * MK_CHUNK_MMW_TOKENS token rows a block (grid: tokens / that, rows / that; SILU half the rows),
 * one block a multiprocessor with a ring of three stages of MK_CHUNK_MMW_KS columns
 * (MK_CHUNK_MMW_SMEM). x comes from mk_chunk_xh (grid: the token rows rounded up to whole token
 * blocks) as the stages themselves, MK_CHUNK_MMW_STAGE_BYTES for each token block and MK_CHUNK_MMW_KS
 * columns (x's f16 hi and lo tiles, 4 of each, and a tile of group sums), then 2^e per token row:
 * MK_CHUNK_XH_FLOATS(m, K) floats of the arena. */
#define MK_CHUNK_MMW_ROWS        128u
#define MK_CHUNK_MMW_TOKENS      128u
#define MK_CHUNK_MMW_KS          128u
#define MK_CHUNK_MMW_STAGE_BYTES (9u * MK_CHUNK_MMW_TOKENS * 64u)
#define MK_CHUNK_MMW_SMEM        (3u * MK_CHUNK_MMW_STAGE_BYTES + 64u) /* and the ring's barriers */
#define MK_CHUNK_XH_ROWS(m)      (((m) + MK_CHUNK_MMW_TOKENS - 1u) / MK_CHUNK_MMW_TOKENS * MK_CHUNK_MMW_TOKENS)
#define MK_CHUNK_XH_FLOATS(m, K)     \
    ((uint64_t)MK_CHUNK_XH_ROWS(m) * \
     ((K) / MK_CHUNK_MMW_KS * (MK_CHUNK_MMW_STAGE_BYTES / MK_CHUNK_MMW_TOKENS / 4u) + 1u))

/* mk_chunk_mv, the products of at most MK_CHUNK_MV_TOKENS token rows: MK_CHUNK_MV_ROWS weight rows
 * per block (16 a warp), the columns cut into splits of mk_chunk_mv_span columns (grid: rows / that,
 * 1, splits), each at most MK_CHUNK_MV_K (less where the device has less) so that the split's x
 * fits in dynamic shared memory: MK_CHUNK_MV_SMEM(m, span) bytes, bf16 hi and lo per token row (in
 * whole n8 tiles), then a float per token row and 32 columns (the group sums of Q4_K/Q5_K rows). */
#define MK_CHUNK_MV_TOKENS        16u
#define MK_CHUNK_MV_ROWS          128u
#define MK_CHUNK_MV_KSTEP         128u
#define MK_CHUNK_MV_K             2048u
#define MK_CHUNK_MV_SMEM(m, span) (((m) + 7u) / 8u * 8u * (2u * (2u * (span) + 8u) + 4u * (span) / 32u))
MK_ABI_FN uint32_t mk_chunk_mv_span(uint32_t cols, uint32_t splits) {
    const uint32_t step = MK_CHUNK_MV_KSTEP * splits;
    return (cols + step - 1u) / step * MK_CHUNK_MV_KSTEP;
}

/* mk_chunk_mv_kq8_<NT>, the K-quant products of mk_chunk_mv_kq with x as int8 levels on the one-token
 * tiles' tensor-core form (megakernel/chunk/mv8.cuh), for m <= MK_CHUNK_MV8_TOKENS token rows: the
 * same grid and outputs, NT = mk_chunk_mv8_tokens(m) token rows (m rounded up; the rest zero), and
 * x's levels and group scales of whole super-blocks (a split of an odd number of 128-column steps
 * touches one more half super-block, given zero x): MK_CHUNK_MV8_SMEM(m, span) bytes, 104 a token
 * row and 32 columns (96 of levels, 8 of the group's scale and sum). Past 8 rows mk_chunk_mv_kq is faster (a 16-row kernel measured 9.7 ms against
 * its 8.3 for a 16-token llama-8b Q4_K_M step, BENCHMARKS.md twenty-third session). */
#define MK_CHUNK_MV8_TOKENS 8u
MK_ABI_FN uint32_t mk_chunk_mv8_tokens(uint32_t m) { return m <= 2u ? 2u : m <= 4u ? 4u : 8u; }
MK_ABI_FN uint32_t mk_chunk_mv8_cols(uint32_t span) { return (span + 255u) / 256u * 256u; }
#define MK_CHUNK_MV8_SMEM(m, span) (mk_chunk_mv8_tokens(m) * 104u * (mk_chunk_mv8_cols(span) / 32u))

/* The K-quant few-token products' plan (mk_chunk_mv_kq) for `tiles` tiles of K columns and m token
 * rows: *splits column splits (at most max_k columns each) of *blocks blocks, each block taking
 * every *blocks-th tile of its split with x brought in once. The plan leaves the busiest block the
 * fewest columns, a tile's own cost (its rows' setup, its stores) counted as 64 columns more
 * (BENCHMARKS.md, twenty-second session: 512 and up were slower). slots1 / slots2: the blocks the
 * GPU holds at once with a block's x above / within pair_smem bytes; part_floats: the room for the
 * splits' partial sums (partials: SILU, whose sums always go through them; m x all floats a split);
 * cap: at most this many blocks a split, 0 = no cap. kq8: for mk_chunk_mv_kq8_*, whose x takes
 * MK_CHUNK_MV8_SMEM and whose blocks read whole super-blocks (mk_chunk_mv8_cols of a split's span). */
MK_ABI_FN uint32_t mk_chunk_mv_kq_smem(uint32_t m, uint32_t span, bool kq8) {
    return kq8 ? MK_CHUNK_MV8_SMEM(m, span) : MK_CHUNK_MV_SMEM(m, span);
}
MK_ABI_FN void mk_chunk_mv_kq_plan(uint32_t m, uint32_t K, uint32_t tiles, uint32_t max_k, uint32_t pair_smem,
                                   uint32_t slots1, uint32_t slots2, uint64_t part_floats, bool partials, uint32_t all,
                                   uint32_t cap, bool kq8, uint32_t *splits, uint32_t *blocks) {
    const uint32_t most = (K + MK_CHUNK_MV_KSTEP - 1u) / MK_CHUNK_MV_KSTEP, first = (K + max_k - 1u) / max_k;
    uint64_t best = ~0ull;
    *splits = first, *blocks = tiles;
    for (uint32_t s = first; s <= most && s <= 32u; s++) {
        const uint32_t span = mk_chunk_mv_span(K, s);
        if ((K + span - 1u) / span != s) continue; /* the same span as a smaller count */
        if ((partials || s > 1u) && (uint64_t)s * m * all > part_floats) continue;
        const uint32_t slots = mk_chunk_mv_kq_smem(m, span, kq8) <= pair_smem ? slots2 : slots1;
        const uint32_t per = slots / s > 1u ? slots / s : 1u, bx = per < tiles ? per : tiles;
        const uint64_t cost = (uint64_t)((tiles + bx - 1u) / bx) * ((kq8 ? mk_chunk_mv8_cols(span) : span) + 64u);
        if (cost < best) best = cost, *splits = s, *blocks = bx;
    }
    if (cap && *blocks > cap) *blocks = cap;
}

/* mk_chunk_qkv: a block finishes this many rows of one token row, whole tasks of the instruction's
 * rows_per_task (so no RoPE pair or normed head straddles two blocks), about 4096 where tasks are
 * smaller: the one-token program's tasks are a few rows each, far too little work for a block. */
MK_ABI_FN uint32_t mk_chunk_qkv_rows(uint32_t rows_per_task) {
    return rows_per_task >= 4096u ? rows_per_task : 4096u / rows_per_task * rows_per_task;
}

/* The _WIDE_XB products' tile and column splits for gx token blocks over rows output rows (SILU:
 * gate rows, half a tile each of gate and up) of K columns. One block a multiprocessor, so a grid a
 * few blocks past whole waves costs a whole wave. Each (tile, splits) is costed as its waves of
 * blocks, each block its products at about 3 TFLOP/s plus MK_CHUNK_XB_FIXED columns (the ring's
 * fill, the epilogue), and a split's partials written and read back at 2.5 TB/s; the cheapest
 * wins, the wider tile and the fewer splits on a tie. Against 256-row tiles split until two blocks
 * a multiprocessor (run73): llama-8b's q/k/v over 512 tokens in one wave of 128 blocks of 192 rows
 * (not 96 of 256) took 7 % less time, llama-1b's products over 128 tokens in fewer splits 20 %
 * less. SILU takes 192 rows only in one wave without splits (which would add a launch to apply
 * the SiLU): 512 blocks of 224 rows were no faster than 448 of 256 (both 4 waves; the blocks share
 * L2's bandwidth, and narrower tiles load x more often). Other products take 128 rows only where
 * they are split over their columns anyway: the cost counts a stage's time in proportion to its
 * rows, but a 128-row stage took about 3/4 of a 256-row one's (H200, run90: llama-8b's output and
 * down products over 512 tokens in 128 unsplit blocks of 128 rows took 7.69 ms, in 2 splits of
 * 256 rows 5.09), while over 128 tokens the split 128-row plans made llama-8b pp128 6 % faster and
 * llama-1b's 15 %. With each tile forced on the H200 (thirty-second session), the plan's tile was
 * the fastest of the three for every product of llama-8b and llama-1b over 512 and 128 tokens
 * (chunk_test holds those sixteen plans). sms: the multiprocessors; narrow: whether the 192- and
 * 128-row tiles exist; forced: a tile's rows to take (0: the plan's); part_floats: the room for
 * the splits' partial sums. Returns the tile's weight rows; *splits the column splits (1: none). */
#define MK_CHUNK_XB_FIXED 256u
MK_ABI_FN uint32_t mk_chunk_xb_plan(uint32_t sms, bool narrow, uint32_t forced, uint64_t part_floats, uint32_t gx,
                                    uint32_t rows, bool silu, uint32_t K, uint32_t m, uint32_t *splits) {
    const uint32_t tiles[3] = { MK_CHUNK_MM_WIDE_ROWS, 192u, 128u }, ldp = silu ? 2u * rows : rows;
    const uint32_t most = K / (2u * MK_CHUNK_MM_K) > 16u ? 16u : K / (2u * MK_CHUNK_MM_K);
    double best = -1.0;
    uint32_t best_bn = MK_CHUNK_MM_WIDE_ROWS;
    *splits = 1u;
    for (uint32_t t = 0; t < (narrow ? 3u : 1u); t++) {
        const uint32_t bn = tiles[t], tile_rows = silu ? bn / 2u : bn;
        if (forced && bn != forced) continue;
        const uint32_t gy = (rows + tile_rows - 1u) / tile_rows;
        for (uint32_t s = 1; s <= (most ? most : 1u); s++) {
            if (s > 1u && (uint64_t)s * m * ldp > part_floats) break;
            const uint32_t kspan = (K + MK_CHUNK_MM_K * s - 1u) / (MK_CHUNK_MM_K * s) * MK_CHUNK_MM_K;
            const uint32_t waves = (gx * gy * s + sms - 1u) / sms;
            if (silu && bn != MK_CHUNK_MM_WIDE_ROWS && !forced && (s > 1u || waves > 1u)) continue;
            if (!silu && bn == 128u && s == 1u && !forced) continue;
            const double cost = (double)waves * 256.0 * bn * (kspan + MK_CHUNK_XB_FIXED) / 3000.0 +
                                (s > 1u ? (double)s * m * ldp * 8.0 / 2500.0 : 0.0); /* ns */
            if (best < 0.0 || cost < best) best = cost, best_bn = bn, *splits = s;
        }
    }
    return best_bn;
}

/* ... and where it adds the split product's partial sums itself (splits > 1): whole tasks of at
 * least 256 rows, so that the partials' reads spread over many blocks (a block reads at a few tens
 * of GB/s: 4,096 rows a block measured slower than the reduce launch it saved). */
MK_ABI_FN uint32_t mk_chunk_qkv_fold_rows(uint32_t rows_per_task) {
    return rows_per_task >= 256u ? rows_per_task : (255u / rows_per_task + 1u) * rows_per_task;
}

/* mk_chunk_reduce_norm: the split partials of an MK_CHUNK_MM_ADD product added into the residual
 * rows (grid: columns / MK_BLOCK_THREADS by token rows, as mk_chunk_mm_reduce), then the RMSNorm of
 * each row by the row's last block to finish. Its scratch: a counter per token row of the largest
 * step (back at 0 after each launch; a place of its own, as steps of fewer rows would write sums
 * over it), then each block's sum of squares. */
#define MK_CHUNK_FOLD_FLOATS(ubatch, cols) ((uint64_t)(ubatch) * (1u + ((cols) + 255u) / 256u))

/* The few-token integer tiles' finish (mk_chunk_mv_kq8_*): an MK_CHUNK_MM_ADD over several splits
 * has the last split of each block tile (MK_CHUNK_MV_ROWS rows) add the partials into the residual
 * and write the tile's sum of squares for each token row, so that the next product normalizes x as
 * it stages it: no mk_chunk_reduce_norm launch. Its scratch for rows of up to `cols` outputs: a
 * counter per tile (back at 0 after each launch), then MK_CHUNK_MV8_TOKENS sums per tile. */
MK_ABI_FN uint32_t mk_chunk_fin_tiles(uint32_t cols) { return (cols + MK_CHUNK_MV_ROWS - 1u) / MK_CHUNK_MV_ROWS; }
#define MK_CHUNK_FIN_FLOATS(cols) ((uint64_t)mk_chunk_fin_tiles(cols) * (1u + MK_CHUNK_MV8_TOKENS))

/* mk_chunk_attn: a block holds MK_CHUNK_ATTN_ROWS query rows of (head, token) of one KV head,
 * mk_chunk_attn_tokens(g) tokens of its g query heads (grid: n_head_kv by tokens / that), and
 * streams positions MK_CHUNK_ATTN_KEYS at a time. */
#define MK_CHUNK_ATTN_ROWS 64u
#define MK_CHUNK_ATTN_KEYS 32u
MK_ABI_FN uint32_t mk_chunk_attn_tokens(uint32_t group) {
    return group >= MK_CHUNK_ATTN_ROWS ? 1u : MK_CHUNK_ATTN_ROWS / group;
}
MK_ABI_FN uint32_t mk_chunk_attn_smem(uint32_t head_dim) {
    return 4u * (MK_CHUNK_ATTN_ROWS * head_dim + 2u * MK_CHUNK_ATTN_KEYS * (head_dim + 4u));
}

/* mk_chunk_attn_mma, the tensor-core attention for the head sizes it takes (the others run
 * mk_chunk_attn): the same blocks and partials, positions MK_CHUNK_ATTN_MMA_KEYS at a time, q, K
 * and V as bf16 hi and lo tiles with rows head_dim + 8 apart. Its form over an f16 cache (the
 * _h16 kernels) fills the same shared memory with q's f16 hi and lo tiles and two tiles each of K
 * and V as cached. */
#define MK_CHUNK_ATTN_MMA_KEYS 64u
MK_ABI_FN int mk_chunk_attn_mma_fits(uint32_t head_dim) {
    return head_dim == 32u || head_dim == 64u || head_dim == 128u;
}
MK_ABI_FN uint32_t mk_chunk_attn_mma_smem(uint32_t head_dim) {
    return 2u * (2u * MK_CHUNK_ATTN_ROWS + 4u * MK_CHUNK_ATTN_MMA_KEYS) * (head_dim + 8u);
}

#endif
