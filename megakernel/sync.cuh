/* Memory-ordering helpers of the kernels: every acquire, release and spin of the device code lives here. */
#ifndef MK_SYNC_CUH
#define MK_SYNC_CUH

#include <stdint.h>

/* Acquire at GPU scope: the counters and the step state, written by other blocks. */
__device__ __forceinline__ uint32_t mk_ld_acquire_gpu(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Acquire at system scope: the mailbox, written by the host through PCIe. */
__device__ __forceinline__ uint32_t mk_ld_acquire_sys(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* The polling read of a spin: no L1 invalidation per iteration; mk_fence_acquire_gpu after. */
__device__ __forceinline__ uint32_t mk_ld_relaxed_gpu(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Turns the last relaxed read of a spin into an acquire (the PTX model's acquire pattern). */
__device__ __forceinline__ void mk_fence_acquire_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

/* Programmatic dependent launch (sm_90): a chunk kernel the host launches with it may be resident
 * before the kernel ahead of it in the stream has ended, so that its launch and anything it does
 * first (loading weights, which no kernel writes) overlap that kernel's tail. Every chunk kernel
 * calls this before it reads or writes activations: it returns once the kernel ahead has ended and
 * its writes are visible, and then lets the kernel behind this one start launching (one kernel
 * ahead at most: the one behind waits for this one in turn). Every block calls it, early exits
 * included, so a kernel's end implies the end of all before it. Before sm_90 there is no such
 * launch (the host does not ask for it) and this is nothing. */
__device__ __forceinline__ void mk_grid_dep_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A plain system-scope read that the compiler may not cache (the host's abort flag). */
__device__ __forceinline__ uint32_t mk_ld_relaxed_sys(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void mk_st_release_gpu(uint32_t *p, uint32_t v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void mk_st_release_sys(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void mk_st_relaxed_sys(uint32_t *p, uint32_t v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* The signal of a finished task. The block's threads met at a __syncthreads before this, so the
 * release covers their writes too (bar.sync orders them before thread 0's release). */
__device__ __forceinline__ void mk_red_release_gpu_add(uint32_t *p, uint32_t v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Thread 0's count at *p, returning the value before: the release orders the block's writes (met
 * at a __syncthreads before) ahead of the count, and the acquire the writes of those who counted
 * before ahead of what the block reads next (after a __syncthreads). */
__device__ __forceinline__ uint32_t mk_atom_acq_rel_gpu_add(uint32_t *p, uint32_t v) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

/* Whether this block is the last of n to count itself in at *count (every thread gets the
 * answer). Thread 0 counts with one acq_rel atomic after the block barrier: its release carries
 * every thread's earlier writes (met at the barrier; PTX release is cumulative), and in the last
 * block its acquire, then the barrier, carry the other blocks' writes to every thread's reads
 * after. One round trip to L2, where two sequentially consistent fences and a relaxed atomic took
 * three. */
__device__ __forceinline__ bool mk_block_last_in(uint32_t *count, uint32_t n) {
    __shared__ bool s_last;
    __syncthreads();
    if (threadIdx.x == 0) s_last = mk_atom_acq_rel_gpu_add(count, 1u) == n - 1u;
    __syncthreads();
    return s_last;
}

__device__ __forceinline__ uint64_t mk_globaltimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Counters only grow: "reached" is a wrap-safe comparison of the difference. */
__device__ __forceinline__ bool mk_reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

/* Backoff of a spin: short sleeps keep the L2 quiet without adding more than ~0.1 us latency. */
__device__ __forceinline__ void mk_spin_pause(uint32_t *ns) {
    __nanosleep(*ns);
    if (*ns < 128u) *ns *= 2u;
}

/* Starts pulling [p, p + bytes) from HBM into L2 without waiting for it (Hopper's bulk prefetch;
 * nothing on older GPUs). Ranges are cut to 64 KB pieces. */
__device__ __forceinline__ void mk_prefetch_l2(const void *p, uint64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)15u;
    uintptr_t end = ((uintptr_t)p + bytes + 15u) & ~(uintptr_t)15u;
    while (a < end) {
        uint32_t n = end - a > 65536u ? 65536u : (uint32_t)(end - a);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
        a += n;
    }
#else
    (void)p;
    (void)bytes;
#endif
}

/* Hopper's transaction barriers in shared memory (mbarrier) and the bulk copies that complete on
 * them: a ring stage is "full" once its bytes have landed and "empty" once its readers have
 * arrived, so warps wait for the one stage they need instead of meeting at __syncthreads. sm_90
 * only (the kernels that use them are built for sm_90a); elsewhere a trap. */
__device__ __forceinline__ void mk_mbar_init(uint64_t *bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(count)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); /* for the copy engine */
#else
    (void)bar, (void)count;
    __trap();
#endif
}

__device__ __forceinline__ void mk_mbar_arrive(uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"((uint32_t)__cvta_generic_to_shared(bar))
                 : "memory");
#else
    (void)bar;
    __trap();
#endif
}

/* Blocks until the phase of the given parity (0 first, then 1, 0, ...) has completed. */
__device__ __forceinline__ void mk_mbar_wait(uint64_t *bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(bar);
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
    } while (!done);
#else
    (void)bar, (void)parity;
    __trap();
#endif
}

/* One arrival that also makes the phase wait for bytes more of copies (mk_bulk_copy). */
__device__ __forceinline__ void mk_mbar_expect(uint64_t *bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(bar)),
                 "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
    __trap();
#endif
}

/* One bulk copy of bytes (a multiple of 16, both ends 16-byte aligned) from global to shared
 * memory, by the copy engine, its bytes counted on bar as they land. */
__device__ __forceinline__ void mk_bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes), "r"((uint32_t)__cvta_generic_to_shared(bar))
                 : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar;
    __trap();
#endif
}

/* The bulk tensor copy of the box at (c0 columns, c1 rows) of the tensor map at map (a
 * __grid_constant__ parameter) to dst, laid out as the map's swizzle says, its bytes counted on bar
 * (a box past the tensor's bounds lands as zeros and counts whole). */
__device__ __forceinline__ void mk_tma_load2(void *dst, const void *map, int32_t c0, int32_t c1, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            (uint32_t)__cvta_generic_to_shared(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"((uint32_t)__cvta_generic_to_shared(bar))
        : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)bar;
    __trap();
#endif
}

#endif
