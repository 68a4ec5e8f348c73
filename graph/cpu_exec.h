/* The CPU executor of programs: pthread workers with the megakernel's counter protocol. */
#ifndef MK_CPU_EXEC_H
#define MK_CPU_EXEC_H

#include <stdint.h>

#include "graph/program.h"
#include "megakernel/abi.h"
#include "graph/executor.h"

/* What one worker's task sees: host addresses of everything plus its own scratch. */
struct mk_cpu_ctx {
    const struct mk_weight_ref *weights;
    float *arena;            /* (arena_floats) */
    void *k_cache, *v_cache; /* kv_type (layer, n_ctx, kv_dim) */
    enum mk_kv_type kv_type;
    const float *f16; /* mk_fp16_table() for an f16 cache (its elements widen by lookup), else NULL */
    uint32_t n_ctx;
    const struct mk_step_cmd *cmd;
    float *scratch; /* per worker: see mk_cpu_exec_create */
    /* per worker: (max weight cols, at least 2 kv_dim) one dequantized weight row, or attention's K
     * and V rows widened to f32 */
    float *row;
    uint32_t ubatch; /* the program's tokens per step (1: one-token program) */
    /* the program's: products over bf16 weights of this many token rows or more round their
     * inputs to bf16; 0 = never */
    uint32_t act_bf16_min;
    uint32_t *counters; /* the executor's (n_counters): ATTN_PARTIAL counts itself in at its arrival counter */
};

/* Runs task t of one instruction; SAMPLE stores its token in *sampled. -1 on an unknown opcode. */
int mk_cpu_run_task(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t, int32_t *sampled);

/* Tokens per chunk step of the cpu backend when asked for 0 (measured in BENCHMARKS.md). */
#define MK_CPU_DEFAULT_UBATCH 32u

/* The cpu backend: compiles m for p->n_threads workers and runs it with mk_cpu_exec; with
 * p->ubatch > 1 (or 0) also a chunk program for prompts and speculation, over the same cache. */
enum mk_status mk_backend_create_cpu(const struct mk_model *m, const struct mk_backend_params *p,
                                     struct mk_backend **out, struct mk_error *err);
/* CPUs this process may run on (sched_getaffinity), at least 1. */
uint32_t mk_cpu_allowed_cpus(void);
/* Workers the cpu backend uses when asked for 0: one per MK_CPU_BYTES_PER_WORKER (4 MiB) of
 * weights read per token, at most mk_cpu_allowed_cpus(); a tiny model gets one, run on the
 * calling thread with no hand-off at all. */
uint32_t mk_cpu_default_threads(const struct mk_model *m);
/* The executor over an existing program (tests use this to run mutated or hand-tuned programs).
 * The thread calling step is worker 0; n_threads - 1 pthreads are the others. */
struct mk_cpu_exec;
enum mk_status mk_cpu_exec_create(const struct mk_program *prog, uint32_t n_threads, struct mk_cpu_exec **out,
                                  struct mk_error *err);
/* Like mk_cpu_exec_create, but the executor uses kv_owner's KV cache (same n_layer, n_ctx, kv_dim)
 * instead of its own: the cpu backend runs its one-token and chunk programs over one cache. Steps
 * of the two must not overlap (each step returns when all its tasks are done); kv_owner must
 * outlive this executor. */
enum mk_status mk_cpu_exec_create_shared_kv(const struct mk_program *prog, uint32_t n_threads,
                                            struct mk_cpu_exec *kv_owner, struct mk_cpu_exec **out,
                                            struct mk_error *err);
enum mk_status mk_cpu_exec_step(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, int32_t *out_token,
                                struct mk_error *err);
/* One step of a chunk program: cmd->n_tokens tokens (tokens[i] at cmd->pos + i); the last
 * cmd->n_out rows (0 means 1) get logits and a token each, out_tokens[j] for output row j. */
enum mk_status mk_cpu_exec_step_chunk(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, const int32_t *tokens,
                                      int32_t *out_tokens, struct mk_error *err);
/* Logits (vocab) of the last step's last output row. */
const float *mk_cpu_exec_logits(const struct mk_cpu_exec *e);
/* The step watchdog (0 = 60000 ms): a step whose tasks are not all done by then fails with
 * MK_ERR_TIMEOUT. And, for tests, a fault to inject (NULL or MK_FAULT_NONE: none). After any
 * failure the executor refuses further steps; free it. */
void mk_cpu_exec_set_fault(struct mk_cpu_exec *e, const struct mk_fault *fault, uint32_t watchdog_ms);
/* Logits (vocab) of output row j of the last step, NULL when it had no such row. */
const float *mk_cpu_exec_logits_row(const struct mk_cpu_exec *e, uint32_t j);
void mk_cpu_exec_free(struct mk_cpu_exec *e);
/* Per-task timestamps from the next step on (mk trace): call between steps. */
enum mk_status mk_cpu_exec_set_trace(struct mk_cpu_exec *e, struct mk_error *err);
/* The last step's (n_tasks, 3): start after the task's waits (ns, CLOCK_MONOTONIC), end, worker;
 * NULL unless tracing is on. */
const uint64_t *mk_cpu_exec_trace(const struct mk_cpu_exec *e);

#endif
