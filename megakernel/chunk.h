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

/* What mk_chunk_mm writes for output row r (weight row) of token row i. */
enum mk_chunk_mm_mode {
    MK_CHUNK_MM_STORE = 0, /* y[i, col0 + r] = W0[r] . x[i] */
    MK_CHUNK_MM_ADD = 1,   /* y[i, col0 + r] += W0[r] . x[i] (the residual add) */
    MK_CHUNK_MM_SILU = 2,  /* y[i, col0 + r] = silu(W0[r] . x[i]) * (W1[r] . x[i]) */
};

struct mk_chunk_launch {
    uint32_t ii;    /* the chunk program's instruction this launch serves */
    uint32_t w0;    /* weight table index: the matrix of mk_chunk_mm, the norm of mk_chunk_rmsnorm */
    uint32_t w1;    /* MK_CHUNK_MM_SILU's second matrix, else MK_NO_WEIGHT */
    uint32_t mode;  /* enum mk_chunk_mm_mode */
    uint32_t m;     /* token rows this launch covers (its grid's second dimension) */
    uint32_t x_off; /* arena offset of input row 0 */
    uint32_t ldx;   /* floats between input rows */
    uint32_t y_off; /* arena offset of output row 0 */
    uint32_t ldy;   /* floats between output rows */
    uint32_t col0;  /* first output column */
    float eps;      /* mk_chunk_rmsnorm */
    uint32_t reserved;
};
MK_STATIC_ASSERT(sizeof(struct mk_chunk_launch) == 48, "mk_chunk_launch is 48 bytes");
MK_STATIC_ASSERT(offsetof(struct mk_chunk_launch, eps) == 40, "mk_chunk_launch.eps at 40");

/* mk_chunk_mm's tile: MK_CHUNK_MM_ROWS weight rows by MK_CHUNK_MM_TOKENS token rows per block,
 * MK_CHUNK_MM_K columns per stage (grid: rows / MK_CHUNK_MM_ROWS, tokens / MK_CHUNK_MM_TOKENS). */
#define MK_CHUNK_MM_ROWS   128u
#define MK_CHUNK_MM_TOKENS 64u
#define MK_CHUNK_MM_K      32u

#endif
