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
    float *arena;             /* (arena_floats) */
    float *k_cache, *v_cache; /* (layer, n_ctx, kv_dim) */
    uint32_t n_ctx;
    const struct mk_step_cmd *cmd;
    float *scratch; /* (3 * max weight cols + max tile rows) per worker */
};

/* Runs task t of one instruction; SAMPLE stores its token in *sampled. -1 on an unknown opcode. */
int mk_cpu_run_task(const struct mk_cpu_ctx *c, const struct mk_instr *in, uint32_t t, int32_t *sampled);

/* The cpu backend: compiles m for p->n_threads workers and runs it with mk_cpu_exec. */
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
enum mk_status mk_cpu_exec_step(struct mk_cpu_exec *e, const struct mk_step_cmd *cmd, int32_t *out_token,
                                struct mk_error *err);
const float *mk_cpu_exec_logits(const struct mk_cpu_exec *e);
/* The step watchdog (0 = 60000 ms): a step whose tasks are not all done by then fails with
 * MK_ERR_TIMEOUT. And, for tests, a fault to inject (NULL or MK_FAULT_NONE: none). After any
 * failure the executor refuses further steps; free it. */
void mk_cpu_exec_set_fault(struct mk_cpu_exec *e, const struct mk_fault *fault, uint32_t watchdog_ms);
void mk_cpu_exec_free(struct mk_cpu_exec *e);

#endif
