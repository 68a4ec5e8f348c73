/* Entry points of the CUDA backends beyond struct mk_backend: test hooks and device facts. */
#ifndef MK_CUDA_BACKEND_H
#define MK_CUDA_BACKEND_H

#include <stdint.h>

#include "graph/executor.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* megakernel, perop, graph. */
/* MK_ERR_NO_DEVICE with a reason when no driver/GPU is usable. */
enum mk_status mk_backend_create_cuda(const struct mk_model *m, const struct mk_backend_params *p,
                                      struct mk_backend **out, struct mk_error *err);

/* What a CUDA backend runs on and how its kernel is shaped. */
struct mk_cuda_backend_info {
    char device[96];
    int cc_major, cc_minor;
    int sm_count;
    int blocks_per_sm;     /* from the occupancy API */
    uint32_t grid;         /* blocks (= the program's workers) */
    uint32_t threads;      /* per block */
    uint32_t smem_bytes;   /* dynamic shared memory per block */
    int regs, local_bytes; /* of the kernel this backend launches */
    int from_cubin;        /* 1: machine code (SASS) of the embedded fatbin; 0: its PTX, compiled
                              * by the driver; 2: the file of settings.kernel_image */
    char image[160];       /* what was loaded, in words, e.g. "SASS from the fatbin (sm_80 ...)" */
    int float_image;       /* 1: the embedded build without block formats (every weight f32, f16 or bf16) */
    uint32_t n_instr, n_tasks;
    uint64_t weight_bytes; /* uploaded */
};

/* Fills *out; MK_ERR_INVALID_ARG when b is not a megakernel, perop or graph backend. */
enum mk_status mk_backend_cuda_info(const struct mk_backend *b, struct mk_cuda_backend_info *out, struct mk_error *err);

/* MK_OK when weights + kv + other bytes, and a reserve for the context and the kernel, fit in
 * free_bytes of the GPU's total_bytes; else MK_ERR_NOMEM naming every size. Session creation runs
 * it with cuMemGetInfo's figures before it allocates anything. */
enum mk_status mk_cuda_check_memory(uint64_t weights, uint64_t kv, uint64_t other, uint64_t free_bytes,
                                    uint64_t total_bytes, struct mk_error *err);

/* Test only: posts MK_CMD_HANG to a megakernel backend and waits as for a step, so the watchdog
 * must end it with MK_ERR_TIMEOUT; the backend is poisoned afterwards and only free() remains. */
enum mk_status mk_backend_cuda_debug_hang(struct mk_backend *b, struct mk_error *err);

/* Per-task device timestamps of the last megakernel step, when the backend was created with
 * settings.trace on: start/end ns pairs of each of the n_tasks tasks into out[2 * n_tasks]
 * (start = after the task's waits; with MK_GPU_TRACE_AT_FETCH, when the block took the task,
 * before its waits). MK_ERR_UNSUPPORTED when tracing is off. */
enum mk_status mk_backend_cuda_trace(struct mk_backend *b, uint64_t *out, uint32_t n_tasks, struct mk_error *err);

/* One kernel launch of the last chunk step, timed by events on the stream: from just before it
 * to just before the next launch (the last one to the step's end), from the step's start. */
struct mk_cuda_chunk_launch_time {
    uint32_t ii;        /* the chunk program's instruction */
    const char *kernel; /* e.g. "mk_chunk_mm_store_wide" */
    double start_us, end_us;
};
/* The launches of the last step, when it was a chunk step and settings.trace is on: at most cap
 * into out, *n of them (a step's first MK_CUDA_CHUNK_EVENTS - 1 launches are timed). */
enum mk_status mk_backend_cuda_chunk_trace(struct mk_backend *b, struct mk_cuda_chunk_launch_time *out, uint32_t cap,
                                           uint32_t *n, struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
