/* The persistent megakernel (fetch a task, wait on its counters, run its op, signal) and the per-op kernel that runs one instruction's tasks. */
#include <stdint.h>

#include "megakernel/abi.h"
#include "megakernel/common.cuh"
#include "megakernel/cuda_layout.h"
#include "megakernel/fault.cuh"
#include "megakernel/sync.cuh"
#include "megakernel/ops/attn_combine.cuh"
#include "megakernel/ops/attn_output.cuh"
#include "megakernel/ops/attn_partial.cuh"
#include "megakernel/ops/barrier.cuh"
#include "megakernel/ops/embed.cuh"
#include "megakernel/ops/matvec_residual.cuh"
#include "megakernel/ops/norm_gate_up_silu.cuh"
#include "megakernel/ops/norm_lm_head.cuh"
#include "megakernel/ops/norm_qkv_rope.cuh"
#include "megakernel/ops/sample.cuh"

/* Blocks per multiprocessor the register budget aims at (the occupancy API still sizes the grid).
 * One block of 256 threads may use 255 registers, where two had to fit in 128 and spilled (496 B of
 * stack): on the H100, llama-1b tg128 Q8_0 1.562 -> 1.320 ms, Q4_K_M 1.622 -> 1.630, BF16 1.411 ->
 * 1.423, perop Q8_0 1.607 -> 1.544 (BENCHMARKS.md, 2026-11-23 night). */
#ifndef MK_MIN_BLOCKS_PER_SM
#define MK_MIN_BLOCKS_PER_SM 1
#endif

#define MK_ABORTED 0xffffffffu
#define MK_NO_TASK 0xffffffffu

__device__ __forceinline__ struct mk_watch_block *mk_watch_slot(const struct mk_kernel_args *a) {
    if (!a->watch) return NULL;
    return (struct mk_watch_block *)((char *)a->watch + sizeof(struct mk_watch)) + blockIdx.x;
}

__device__ void mk_watch_publish(const struct mk_kernel_args *a, uint32_t state, uint32_t step, uint32_t ii,
                                 uint32_t ctr, uint32_t target, uint32_t seen) {
    struct mk_watch_block *w = mk_watch_slot(a);
    if (!w) return;
    mk_st_relaxed_sys(&w->step, step);
    mk_st_relaxed_sys(&w->instr, ii);
    mk_st_relaxed_sys(&w->ctr, ctr);
    mk_st_relaxed_sys(&w->target, target);
    mk_st_relaxed_sys(&w->seen, seen);
    mk_st_release_sys(&w->state, state);
}

/* Thread 0: waits until counter w->ctr reaches step * mul + add. False when told to abort. After
 * MK_WATCH_AFTER_NS it tells the host what it waits on, and starts reading the host's abort flag. */
__device__ bool mk_wait_counter(const struct mk_kernel_args *a, const struct mk_wait *w, uint32_t step, uint32_t ii) {
    if (w->ctr == MK_NO_COUNTER) return true;
    const uint32_t *ctr = (const uint32_t *)a->counters + w->ctr;
    const uint32_t target = step * w->mul + w->add;
    uint32_t v = mk_ld_relaxed_gpu(ctr);
    if (mk_reached(v, target)) {
        mk_fence_acquire_gpu();
        return true;
    }
    const uint64_t t0 = mk_globaltimer();
    uint64_t last_host = t0;
    uint32_t ns = 8;
    bool published = false;
    for (uint32_t it = 1;; it++) {
        mk_spin_pause(&ns);
        v = mk_ld_relaxed_gpu(ctr);
        if (mk_reached(v, target)) break;
        if ((it & 63u) == 0) {
            uint64_t now = mk_globaltimer();
            bool slow = now - t0 > MK_WATCH_AFTER_NS;
            if (slow && !published) {
                mk_watch_publish(a, MK_WATCH_COUNTER, step, ii, w->ctr, target, v);
                published = true;
            }
            /* Block 0 looks every 0.1 ms, the others every ms: PCIe reads only while stuck. */
            bool host = slow && now - last_host > (blockIdx.x == 0 ? 100000u : 1000000u);
            if (host) last_host = now;
            if (mk_should_abort(a, host)) return false;
        }
    }
    mk_fence_acquire_gpu();
    if (published) mk_st_relaxed_sys(&mk_watch_slot(a)->state, MK_WATCH_IDLE);
    return true;
}

/* Thread 0: waits for step s's command and returns its code (MK_ABORTED when told to leave).
 * Block 0 takes the next mailbox command, copies it into the step state and opens the step; under
 * GENERATE the SAMPLE task opens the next step itself, and block 0 goes back to the mailbox only
 * once it says the generation ended. The other blocks wait for the step to open. prev: the code of
 * step s - 1's command (MK_CMD_NONE before the first). */
__device__ uint32_t mk_wait_command(const struct mk_kernel_args *a, uint32_t s, uint32_t prev,
                                    struct mk_step_cmd *s_cmd) {
    struct mk_step_state *st = (struct mk_step_state *)a->step_state;
    uint32_t *dst = (uint32_t *)s_cmd;
    const uint32_t words = sizeof(struct mk_step_cmd) / 4u;
    bool fed = false; /* opened by the previous step's SAMPLE */
    if (blockIdx.x == 0 && prev == MK_CMD_GENERATE) {
        uint32_t ns = 16;
        for (uint32_t it = 1;; it++) {
            if (mk_reached(mk_ld_acquire_gpu(&st->go), s + 1u)) {
                fed = true;
                break;
            }
            if (mk_ld_acquire_gpu(&st->gen_over) == s + 1u) break;
            mk_spin_pause(&ns);
            if ((it & 255u) == 0 && mk_should_abort(a, true)) return MK_ABORTED;
        }
    }
    if (blockIdx.x == 0 && !fed) {
        struct mk_mailbox *mb = (struct mk_mailbox *)a->mailbox;
        const uint32_t n = __ldcg(&st->n_cmd) + 1u;
        for (uint32_t it = 1;; it++) {
            if (mk_reached(mk_ld_acquire_sys(&mb->cmd_seq), n)) break;
            if ((it & 15u) == 0 && mk_should_abort(a, true)) return MK_ABORTED;
        }
        const uint64_t t0 = mk_globaltimer();
        const volatile uint32_t *src = (const volatile uint32_t *)&mb->cmd;
        uint32_t *gcmd = (uint32_t *)&st->cmd;
        for (uint32_t i = 0; i < words; i++) {
            uint32_t v = src[i];
            gcmd[i] = v;
            dst[i] = v;
        }
        if (s_cmd->cmd == MK_CMD_GENERATE) {
            const volatile struct mk_mailbox *vmb = mb;
            uint32_t n_stop = vmb->gen_n_stop;
            if (n_stop > MK_GEN_MAX_STOP) n_stop = MK_GEN_MAX_STOP;
            for (uint32_t i = 0; i < n_stop; i++) st->gen_stop[i] = vmb->gen_stop[i];
            st->gen_n_stop = n_stop;
            st->gen_max = vmb->gen_max;
            st->gen_count = 0;
            st->gen_read = 0;
            mb->t_start_ns = t0;
        }
        st->n_cmd = n;
        st->step = s;
        st->t_start_ns = t0;
        mk_st_release_gpu(&st->go, s + 1u);
    } else {
        if (blockIdx.x != 0) {
            uint32_t ns = 16;
            for (uint32_t it = 1;; it++) {
                if (mk_reached(mk_ld_acquire_gpu(&st->go), s + 1u)) break;
                mk_spin_pause(&ns);
                if ((it & 255u) == 0 && mk_should_abort(a, false)) return MK_ABORTED;
            }
        }
        const uint32_t *gcmd = (const uint32_t *)&st->cmd;
        for (uint32_t i = 0; i < words; i++) dst[i] = __ldcg(gcmd + i);
    }
    return s_cmd->cmd;
}

/* Thread 0 under MK_CMD_HANG: never answers, so that the host's watchdog fires; leaves on abort.
 * Block 0 reads the host's flag and relays it to the others. */
__device__ void mk_hang(const struct mk_kernel_args *a, uint32_t step) {
    mk_watch_publish(a, MK_WATCH_HANG, step, 0, 0, 0, 0);
    uint64_t last = mk_globaltimer();
    for (;;) {
        __nanosleep(1000);
        uint64_t now = mk_globaltimer();
        bool host = blockIdx.x == 0 && now - last > 100000u;
        if (host) last = now;
        if (mk_should_abort(a, host)) return;
    }
}

/* task_base entries the megakernel keeps in shared memory (programs with more search global memory). */
#define MK_SMEM_TASK_BASE 512u

/* Instruction of global task t: the last i with base[i] <= t (empty instructions skipped). */
__device__ __forceinline__ uint32_t mk_instr_of_task(const uint32_t *base, uint32_t n_instr, uint32_t t) {
    uint32_t lo = 0, hi = n_instr - 1u;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1u) >> 1;
        if (base[mid] <= t)
            lo = mid;
        else
            hi = mid - 1u;
    }
    return lo;
}

/* Thread 0, before the task's waits: the first weight rows it will stream, on their way into L2
 * while the inputs are still being computed elsewhere (a->prefetch_bytes of them at most: more
 * would flood L2 with lines evicted before use, as the FFN and LM-head ops read more than L2
 * holds). */
__device__ void mk_prefetch_task(const struct mk_kernel_args *a, const struct mk_instr *in, uint32_t t) {
    const struct mk_weight_ref *wt = (const struct mk_weight_ref *)a->weights;
    uint32_t first = 0, n_mats = 0, rpt = 0;
    switch (in->op) {
    case MK_OP_MATVEC_RESIDUAL: first = 0, n_mats = 1, rpt = in->args.matvec.rows_per_task; break;
    case MK_OP_ATTN_OUTPUT: first = 0, n_mats = 1, rpt = in->args.attn_out.rows_per_task; break;
    case MK_OP_NORM_QKV_ROPE: first = 1, n_mats = 3, rpt = in->args.qkv.rows_per_task; break;
    case MK_OP_NORM_GATE_UP_SILU: first = 1, n_mats = 2, rpt = in->args.gate_up.rows_per_task; break;
    case MK_OP_NORM_LM_HEAD: first = 1, n_mats = 1, rpt = in->args.lm_head.rows_per_task; break;
    default: return;
    }
    if (!a->prefetch_bytes || !((a->prefetch_ops >> in->op) & 1u)) return;
    const bool stacked = in->op == MK_OP_NORM_QKV_ROPE; /* rows of [wq; wk; wv] in one range */
    uint64_t r0 = (uint64_t)t * rpt, r1 = r0 + rpt;
    if (stacked) {
        uint32_t lo, n;
        mk_qkv_task_rows(&in->args.qkv, t, &lo, &n);
        r0 = lo, r1 = (uint64_t)lo + n;
    }
    /* Small tasks go without: their ops are short, and what every block asks for at once slows the
     * tail of the op still running (llama-1b's token, run97). */
    const uint64_t task = (r1 - r0) * __ldg(&wt[in->weight[first]].row_bytes) * (stacked ? 1u : n_mats);
    if (task < a->prefetch_min) return;
    uint64_t budget = a->prefetch_bytes / (stacked ? 1u : n_mats), base = 0;
    for (uint32_t k = 0; k < n_mats && budget; k++) {
        const struct mk_weight_ref *w = wt + in->weight[first + k];
        const uint64_t rows = __ldg(&w->rows), rb = __ldg(&w->row_bytes);
        uint64_t lo = r0, hi = r1;
        if (stacked) {
            lo = r0 > base ? r0 - base : 0;
            hi = r1 > base ? r1 - base : 0;
            base += rows;
        }
        if (hi > rows) hi = rows;
        if (lo >= hi) continue;
        uint64_t bytes = (hi - lo) * rb;
        if (bytes > budget) bytes = budget;
        if (stacked) budget -= bytes;
        mk_prefetch_l2((const uint8_t *)__ldg((const unsigned long long *)&w->ptr) + lo * rb, bytes);
    }
}

__device__ __forceinline__ void mk_fetch_instr(const struct mk_kernel_args *a, uint32_t ii, struct mk_instr *dst) {
    const uint4 *src = (const uint4 *)((const struct mk_instr *)a->instrs + ii);
    uint4 *d = (uint4 *)dst;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(struct mk_instr) / 16u); i++) d[i] = __ldg(src + i);
}

__device__ __forceinline__ void mk_run_op(const struct mk_task_ctx *c) {
    switch (c->in->op) {
    case MK_OP_NOP: break;
    case MK_OP_EMBED: mk_op_embed(c); break;
    case MK_OP_MATVEC_RESIDUAL: mk_op_matvec_residual(c); break;
    case MK_OP_NORM_QKV_ROPE: mk_op_norm_qkv_rope(c); break;
    case MK_OP_ATTN_PARTIAL: mk_op_attn_partial(c); break;
    case MK_OP_ATTN_COMBINE: mk_op_attn_combine(c); break;
    case MK_OP_NORM_GATE_UP_SILU: mk_op_norm_gate_up_silu(c); break;
    case MK_OP_NORM_LM_HEAD: mk_op_norm_lm_head(c); break;
    case MK_OP_SAMPLE: mk_op_sample(c); break;
    case MK_OP_BARRIER: mk_op_barrier(c); break;
    case MK_OP_ATTN_OUTPUT: mk_op_attn_output(c); break;
    default: mk_device_fail(c->a, c->fail, MK_DEVERR_BAD_OPCODE, c->ii);
    }
}

extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, MK_MIN_BLOCKS_PER_SM)
    mk_megakernel(const __grid_constant__ struct mk_kernel_args a) {
    extern __shared__ float4 mk_dyn_smem[];
    __shared__ struct mk_instr s_in;
    __shared__ struct mk_step_cmd s_cmd;
    __shared__ uint32_t s_ctl[4]; /* command, task within instr, instr, run state */
    __shared__ uint32_t s_fail;   /* an op of this block met a broken invariant (mk_device_fail) */
    __shared__ uint32_t s_base[MK_SMEM_TASK_BASE];
    const bool base_in_smem = a.n_instr + 1u <= MK_SMEM_TASK_BASE;
    for (uint32_t i = threadIdx.x; base_in_smem && i <= a.n_instr; i += MK_BLOCK_THREADS)
        s_base[i] = __ldg((const uint32_t *)a.task_base + i);
    const uint32_t *base = base_in_smem ? s_base : (const uint32_t *)a.task_base;
    struct mk_task_ctx c;
    c.a = &a;
    c.in = &s_in;
    c.cmd = &s_cmd;
    c.smem = (float *)mk_dyn_smem;
    c.fail = &s_fail;
    if (threadIdx.x == 0) s_fail = 0;
    const bool dynamic = a.sched_offsets == 0;
    uint64_t held = ~0ull; /* thread 0, dynamic: a work item of a later step, kept for it */
    uint32_t cursor = 0, end = 0;
    uint32_t prev = MK_CMD_NONE; /* thread 0: the last step's command */
    for (uint32_t s = 0;; s++) {
        if (threadIdx.x == 0) prev = s_ctl[0] = mk_wait_command(&a, s, prev, &s_cmd);
        if (a.fault_kind && s == a.fault_step && threadIdx.x == 0 && blockIdx.x == gridDim.x - 1u)
            s_ctl[0] = mk_fault_inject(&a, s, s_ctl[0]);
        __syncthreads();
        const uint32_t cmd = s_ctl[0];
        if (cmd == MK_CMD_HANG) {
            if (threadIdx.x == 0) mk_hang(&a, s);
            return;
        }
        if (cmd != MK_CMD_STEP && cmd != MK_CMD_GENERATE) return; /* STOP, abort */
        c.step = s;
        if (!dynamic && threadIdx.x == 0) {
            cursor = __ldg((const uint32_t *)a.sched_offsets + blockIdx.x);
            end = __ldg((const uint32_t *)a.sched_offsets + blockIdx.x + 1u);
        }
        for (;;) {
            if (threadIdx.x == 0) {
                uint32_t task = MK_NO_TASK;
                if (dynamic) {
                    /* Work items are handed out in program order across steps; one of a later
                     * step is kept for that step (every block is resident, so this cannot deadlock).
                     * Only one item is taken at a time: a block holding two tasks of one op would
                     * run them back to back while other blocks idle. */
                    if (held == ~0ull) held = atomicAdd((unsigned long long *)a.work, 1ull);
                    if (held / a.n_tasks == s) {
                        task = (uint32_t)(held % a.n_tasks);
                        held = ~0ull;
                    }
                } else if (cursor < end) {
                    task = __ldg((const uint32_t *)a.sched_tasks + cursor++);
                }
                uint32_t run = 0;
                if (task != MK_NO_TASK) {
                    uint32_t ii = mk_instr_of_task(base, a.n_instr, task);
                    if (a.trace && a.trace_mode == MK_TRACE_AT_FETCH)
                        ((uint64_t *)a.trace)[2u * task] = mk_globaltimer();
                    mk_fetch_instr(&a, ii, &s_in);
                    mk_prefetch_task(&a, &s_in, task - base[ii]);
                    run = 1;
                    if (!mk_wait_counter(&a, &s_in.wait[0], s, ii) || !mk_wait_counter(&a, &s_in.wait[1], s, ii))
                        run = MK_ABORTED;
                    if (a.trace && a.trace_mode != MK_TRACE_AT_FETCH)
                        ((uint64_t *)a.trace)[2u * task] = mk_globaltimer();
                    s_ctl[1] = task - base[ii];
                    s_ctl[2] = ii;
                }
                s_ctl[3] = run;
            }
            __syncthreads();
            const uint32_t run = s_ctl[3];
            if (run == MK_ABORTED) return;
            if (run == 0) break;
            c.t = s_ctl[1];
            c.ii = s_ctl[2];
            mk_run_op(&c);
            __syncthreads();
            if (*(volatile uint32_t *)&s_fail) return; /* unsignalled: the others leave by the relay */
            if (threadIdx.x == 0) {
                uint32_t *counters = (uint32_t *)a.counters;
                if (s_in.signal != MK_NO_COUNTER) mk_red_release_gpu_add(counters + s_in.signal, 1u);
                mk_red_release_gpu_add(counters + MK_COUNTER_ALL, 1u);
                if (a.trace) ((uint64_t *)a.trace)[2u * (base[c.ii] + c.t) + 1u] = mk_globaltimer();
            }
        }
    }
}

/* One instruction's tasks, ordered against the other instructions by the stream (and, launched
 * with programmatic dependent launch, by mk_grid_dep_wait after the instruction's fetch): no
 * counters. */
extern "C" __global__ void __launch_bounds__(MK_BLOCK_THREADS, MK_MIN_BLOCKS_PER_SM)
    mk_perop(const __grid_constant__ struct mk_kernel_args a, uint32_t ii) {
    extern __shared__ float4 mk_dyn_smem[];
    __shared__ struct mk_instr s_in;
    __shared__ struct mk_step_cmd s_cmd;
    if (threadIdx.x == 0) mk_fetch_instr(&a, ii, &s_in);
    mk_grid_dep_wait();
    if (threadIdx.x == 0) {
        const uint32_t *gcmd = (const uint32_t *)&((const struct mk_step_state *)a.step_state)->cmd;
        uint32_t *dst = (uint32_t *)&s_cmd;
        for (uint32_t i = 0; i < sizeof(struct mk_step_cmd) / 4u; i++) dst[i] = __ldcg(gcmd + i);
    }
    __syncthreads();
    struct mk_task_ctx c;
    c.a = &a;
    c.in = &s_in;
    c.cmd = &s_cmd;
    c.smem = (float *)mk_dyn_smem;
    c.fail = NULL; /* no mailbox: mk_device_fail traps */
    c.ii = ii;
    c.step = 0;
    const uint32_t n = s_in.n_tasks;
    for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
        c.t = t;
        mk_run_op(&c);
        __syncthreads();
    }
}
