/* Known answers for the per-op table of a trace (tools/trace.c): spans, median and slowest task, idle time before a task. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/program.h"
#include "tests/test_util.h"
#include "tools/trace.h"

#define CLOSE(a, b) (fabs((a) - (b)) < 1e-9)

/* Three instructions without weights: a matvec of two tasks, an attention split op of three, a
 * matvec of one; six tasks on three tracks with hand-picked times (ns). */
static void test_known_table(void) {
    struct mk_instr instrs[3];
    memset(instrs, 0, sizeof instrs);
    const uint16_t ops[3] = { MK_OP_MATVEC_RESIDUAL, MK_OP_ATTN_PARTIAL, MK_OP_MATVEC_RESIDUAL };
    const uint32_t n_tasks[3] = { 2, 3, 1 };
    for (int i = 0; i < 3; i++) {
        instrs[i].op = ops[i];
        instrs[i].n_tasks = n_tasks[i];
        for (int k = 0; k < 4; k++) instrs[i].weight[k] = MK_NO_WEIGHT;
    }
    uint32_t task_base[4] = { 0, 2, 5, 6 };
    struct mk_program p = { .instrs = instrs, .task_base = task_base, .n_instr = 3, .n_tasks = 6 };
    /* start, end, track, task */
    const struct mk_trace_task tk[6] = {
        { 0, 2000, 0, 0 },    /* first on track 0: idle 0 */
        { 500, 1500, 1, 1 },  /* first on track 1: idle 0.5 us from the step's start */
        { 3000, 4000, 0, 2 }, /* after task 0: idle 1 us */
        { 2500, 6500, 1, 3 }, /* after task 1: idle 1 us */
        { 3000, 3500, 2, 4 }, /* first on track 2: idle 3 us */
        { 7000, 8000, 0, 5 }, /* after task 2: idle 3 us */
    };
    struct mk_trace_op t[MK_OP_COUNT];
    const double span = mk_trace_ops(&p, tk, t);
    MK_CHECK_MSG(CLOSE(span, 8.0), "step span %g us, want 8", span);
    const struct mk_trace_op *mv = &t[MK_OP_MATVEC_RESIDUAL], *at = &t[MK_OP_ATTN_PARTIAL];
    MK_CHECK_MSG(mv->tasks == 3 && at->tasks == 3, "tasks %u and %u, want 3 and 3", mv->tasks, at->tasks);
    MK_CHECK_MSG(CLOSE(mv->span_us, 3.0) && CLOSE(at->span_us, 4.0), "spans %g and %g us, want 3 and 4", mv->span_us,
                 at->span_us);
    /* matvec tasks 2, 1 and 1 us: median 1; slowest of each instruction 2 and 1: 1.5 */
    MK_CHECK_MSG(CLOSE(mv->task_med_us, 1.0), "matvec median %g us, want 1", mv->task_med_us);
    MK_CHECK_MSG(CLOSE(mv->slowest_us, 1.5), "matvec slowest %g us, want 1.5", mv->slowest_us);
    MK_CHECK_MSG(CLOSE(mv->idle_us, 3.5 / 3.0), "matvec idle %g us, want 7/6", mv->idle_us);
    /* attention tasks 1, 4 and 0.5 us: median 1; one instruction, slowest 4 */
    MK_CHECK_MSG(CLOSE(at->task_med_us, 1.0), "attention median %g us, want 1", at->task_med_us);
    MK_CHECK_MSG(CLOSE(at->slowest_us, 4.0), "attention slowest %g us, want 4", at->slowest_us);
    MK_CHECK_MSG(CLOSE(at->idle_us, 5.0 / 3.0), "attention idle %g us, want 5/3", at->idle_us);
    MK_CHECK_MSG(t[MK_OP_EMBED].tasks == 0 && t[MK_OP_EMBED].task_med_us == 0.0, "an op without tasks has figures");

    /* An even count takes the mean of the middle two: drop the last matvec task's instruction. */
    p.n_instr = 2;
    p.n_tasks = 5;
    mk_trace_ops(&p, tk, t);
    MK_CHECK_MSG(CLOSE(t[MK_OP_MATVEC_RESIDUAL].task_med_us, 1.5), "median of 2 and 1 us: %g, want 1.5",
                 t[MK_OP_MATVEC_RESIDUAL].task_med_us);

    /* The table prints the per-task columns only when asked. */
    char buf[2048];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    MK_CHECK(f != NULL);
    if (!f) return;
    mk_trace_print_ops(f, t, true);
    mk_trace_print_ops(f, t, false);
    fclose(f);
    MK_CHECK_MSG(strstr(buf, "slowest us") != NULL, "no per-task columns in:\n%s", buf);
    const char *second = strstr(buf + 1, "\nop ");
    MK_CHECK_MSG(second && !strstr(second, "slowest us"), "per-task columns printed unasked:\n%s", buf);
}

int main(void) {
    test_known_table();
    return mk_test_finish("trace_test");
}
