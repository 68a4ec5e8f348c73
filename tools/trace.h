/* Per-task timestamps of one decode step (megakernel or CPU executor) for mk trace and mk bench --breakdown. */
#ifndef MK_TOOLS_TRACE_H
#define MK_TOOLS_TRACE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/executor.h"
#include "graph/program.h"
#include "core/model.h"

struct mk_trace_op {
    uint32_t tasks;
    double span_us; /* sum over instructions of last end - first start */
    uint64_t bytes;
    double task_med_us; /* the median task's duration */
    double slowest_us;  /* the slowest task of each instruction, averaged over the instructions */
    double idle_us;     /* the time on a task's track before it (its waits, or the fetch), averaged */
};

/* One task as traced: start, end (ns, any origin) and its track. */
struct mk_trace_task {
    uint64_t s, e;
    uint32_t track, t;
};

/* Runs `steps` steps from BOS on the megakernel (timestamps from the device) or on a CPU
 * executor of `threads` workers (0: the cpu backend's default; with ubatch > 1, chunk steps of
 * ubatch tokens, so positions up to steps * ubatch), and gives the program and the
 * last step's tasks (*tk[t] for task t; free both), the number of tracks and where it ran; the KV
 * cache of type kv. The steps are greedy, or with samp its sampling settings (temperature, top_k,
 * top_p, min_p, seed; the rest of it unread). 0 on success, else -1 after printing why (prefixed
 * with cmd). */
int mk_trace_run(const char *cmd, const struct mk_model *m, bool cpu, uint32_t threads, uint32_t ubatch, uint32_t steps,
                 uint32_t ctx, enum mk_kv_type kv, const struct mk_gpu_settings *gs, const struct mk_step_cmd *samp,
                 struct mk_program **p, struct mk_trace_task **tk, uint32_t *n_tracks, char *where, size_t where_len);

/* mk trace --ubatch N on a GPU backend: `steps` chunk steps of ubatch tokens from BOS, the last
 * one's kernel launches timed by stream events, written as a Chrome trace (one track, a slice per
 * launch named by its instruction) into path, and the per-op table on stdout. 0, or -1 after
 * printing why (prefixed with tool). */
int mk_trace_chunk_gpu(const char *tool, const struct mk_model *m, uint32_t ubatch, uint32_t steps, uint32_t ctx,
                       enum mk_kv_type kv, const struct mk_gpu_settings *gs, const char *path);

/* Per op kind of p: tasks, summed instruction spans, weight bytes and the tasks' durations and
 * idle time before them (ops has MK_OP_COUNT entries; the durations stay 0 when their scratch
 * cannot be allocated); returns the step's span (first start to last end) in us. */
double mk_trace_ops(const struct mk_program *p, const struct mk_trace_task *tk, struct mk_trace_op *ops);

/* The tasks as Chrome trace JSON into path (tk is reordered); 0, or -1 after printing why. */
int mk_trace_write(const char *path, const struct mk_program *p, struct mk_trace_task *tk, uint32_t n_tracks,
                   const char *track_name);

/* The per-op table: op, tasks, time, MB, GB/s, and with per_task (ops from mk_trace_ops) the median
 * and slowest task and the idle time before a task. */
void mk_trace_print_ops(FILE *f, const struct mk_trace_op *ops, bool per_task);

#endif
