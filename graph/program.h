/* A compiled decode-step program (megakernel/abi.h instructions) and the compiler that makes it. */
#ifndef MK_PROGRAM_H
#define MK_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "megakernel/abi.h"
#include "core/model.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most tokens a chunk step may take: n_tokens is a uint16_t in struct mk_step_cmd. */
#define MK_UBATCH_MAX 4096u

enum mk_schedule {
    MK_SCHED_DYNAMIC = 0, /* workers take tasks from one atomic work counter */
    MK_SCHED_STATIC = 1,  /* per-worker task lists fixed by the compiler */
};

/* Who merges the attention splits of a one-token program (fuse_attn_output aside). */
enum mk_attn_merge {
    /* each KV head's last split where its query heads' partials are at most
     * MK_ATTN_MERGE_SPLIT_MAX floats, else an op. The split's merge has the solo step (split 0
     * alone holds positions: no partials, no merge), and it merges only the splits that hold
     * positions; the op spreads the merge over the query heads. On the H200 at n_ctx 4096 (16
     * splits a KV head, run147-run149, BENCHMARKS.md) the split's merge is 7-10 % faster than the
     * op up to position 127, 0.2-2 % faster at depths 128-384 and level to 1.2 % slower at 1500 on
     * llama-1b (4,224 floats) and llama-8b (8,320) Q4_K_M: so up to llama-8b's 16 splits; larger
     * is unmeasured and keeps the op. */
    MK_ATTN_MERGE_AUTO = 0,
    MK_ATTN_MERGE_SPLITS = 1, /* the last ATTN_PARTIAL task of each KV head (one dependent phase less) */
    MK_ATTN_MERGE_OP = 2,     /* an ATTN_COMBINE op */
};
#define MK_ATTN_MERGE_SPLIT_MAX 8320u
/* The solo step's bound by head size (graph/lower.c): a solo task reads its KV head's whole K and
 * V, so the larger heads hand over to the splits sooner. */
#define MK_ATTN_SOLO_DEFAULT    640u
#define MK_ATTN_SOLO_DEFAULT_64 1536u

struct mk_compile_params {
    uint32_t n_workers; /* workers (GPU blocks or CPU threads) the tiling aims at */
    uint32_t n_ctx;     /* KV-cache length the program is built for */
    enum mk_schedule schedule;
    uint32_t attn_block;           /* the unit of an attention split, in positions; 0 = auto (128) */
    uint32_t attn_solo;            /* below this position split 0 alone holds every position (at least the
                                * unit); 0 = auto (MK_ATTN_SOLO_DEFAULT_64 at head size 64 or less,
                                * MK_ATTN_SOLO_DEFAULT above, where the megakernel's solo step
                                * runs, else the unit) */
    uint32_t attn_splits;          /* splits of the sequence per KV head (attention tasks n_head_kv x splits);
                                * 0 = auto: enough for one task per worker, at least 2 */
    uint32_t tasks_per_worker;     /* matvec tiling target; 0 = auto */
    bool barriers;                 /* join every dependency with a grid barrier (a baseline) */
    bool fuse_attn_output;         /* fold ATTN_COMBINE into every attention-output task (one op and one
                              * wait less per layer, but each task redoes the combine; measured
                              * slower on the H100, see BENCHMARKS.md) */
    enum mk_attn_merge attn_merge; /* who merges a one-token program's attention splits */
    uint32_t ubatch;               /* most tokens per step (a chunk program, see megakernel/abi.h); 0 or 1:
                                * the one-token program; a chunk program ignores fuse_attn_output */
    enum mk_kv_type kv_type;       /* the KV cache's elements; default MK_KV_F16 */
    /* Chunk programs: a product whose matrices are all bf16, over this many token rows or more,
     * takes its inputs rounded to bf16 (as llama.cpp's bf16 products do); below it, and over other
     * weight types, they keep fp32's precision (the GPU's bf16 hi + lo halves, twice the
     * tensor-core work). 0 = never round; default MK_ACT_BF16_MIN_DEFAULT. */
    uint32_t act_bf16_min;
};
#define MK_ACT_BF16_MIN_DEFAULT 64u
struct mk_compile_params mk_compile_default_params(void);

struct mk_program {
    struct mk_instr *instrs; /* (n_instr) */
    char (*labels)[40];      /* (n_instr) e.g. "blk.3.attn_qkv" */
    uint32_t n_instr;
    uint32_t *task_base; /* (n_instr + 1) first task of each instruction */
    uint32_t n_tasks;    /* tasks per step */
    uint32_t n_counters;
    struct mk_weight_ref *weights; /* (n_weights) ptr = host address inside the model map */
    uint32_t n_weights;
    uint32_t arena_floats;
    uint32_t n_ctx, n_layer, kv_dim, n_embd, vocab;
    enum mk_kv_type kv_type; /* elements of the KV cache the program writes and reads */
    uint32_t logits_off;     /* arena offset of the (vocab) logits */
    enum mk_schedule schedule;
    uint32_t n_workers;
    uint32_t *sched_offsets; /* (n_workers + 1), static schedule only */
    uint32_t *sched_tasks;   /* (n_tasks), static schedule only */
    uint32_t ubatch;         /* most tokens per step, 1 for a one-token program */
    uint32_t act_bf16_min;   /* mk_compile_params.act_bf16_min (0 in a one-token program) */
    uint32_t tokens_off;     /* chunk programs: arena offset of the step's int32 tokens (ubatch), else MK_NO_BUF */
    uint32_t out_tokens_off; /* chunk programs: arena offset of the int32 token of each output row (ubatch), else
                              * MK_NO_BUF */
};

/* Lowers one decode step of m into a program. */
enum mk_status mk_program_compile(const struct mk_model *m, const struct mk_compile_params *p, struct mk_program **out,
                                  struct mk_error *err);
void mk_program_free(struct mk_program *p);

/* Proves every wait can be met by earlier tasks, nothing waits on itself, every read of the arena
 * or KV cache is ordered after its write and every overwrite after the reads before it, and the
 * static schedule (if any) lists every task once in program order. */
enum mk_status mk_program_validate(const struct mk_program *p, struct mk_error *err);

/* Human-readable (or JSON) listing with per-op tasks, bytes, counters, barriers and totals. */
void mk_program_dump(const struct mk_program *p, FILE *f, bool json);

/* Bytes of the program's K and V caches together. */
uint64_t mk_program_kv_bytes(const struct mk_program *p);
/* Bytes of one KV cache element of type t (4 or 2). */
uint32_t mk_kv_type_size(enum mk_kv_type t);
/* "f16" or "f32", as --kv-type names them. */
const char *mk_kv_type_name(enum mk_kv_type t);

/* Weight bytes the program reads per step (each weight table entry once). */
uint64_t mk_program_weight_bytes(const struct mk_program *p);
/* Weight bytes one step of instruction i reads (EMBED reads a single row). */
uint64_t mk_program_instr_weight_bytes(const struct mk_program *p, uint32_t i);

/* Instruction index of global task t (binary search over task_base). */
uint32_t mk_program_instr_of_task(const struct mk_program *p, uint32_t t);

const char *mk_opcode_name(uint32_t op);

#ifdef __cplusplus
}
#endif
#endif
