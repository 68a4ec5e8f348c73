/* MK_OP_BARRIER: no work of its own; the task's waits make it a join of everything before it. */
#ifndef MK_OP_BARRIER_CUH
#define MK_OP_BARRIER_CUH

#include "megakernel/common.cuh"

__device__ __forceinline__ void mk_op_barrier(const struct mk_task_ctx *c) { (void)c; }

#endif
