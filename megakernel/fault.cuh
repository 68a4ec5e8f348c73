/* Test only: the faults mk_kernel_args.fault_kind asks the megakernel to make at the start of one step, so the host's detection and recovery can be tested. */
#ifndef MK_FAULT_CUH
#define MK_FAULT_CUH

#include <stdint.h>

#include "megakernel/abi.h"
#include "megakernel/common.cuh"

/* Thread 0 of the grid's last block, after the step's command arrived: the command the block
 * goes on with. HANG turns it into MK_CMD_HANG (the block parks until the host aborts), ERROR into
 * MK_CMD_STOP after recording the error (the block leaves, the others follow the abort relay); the
 * others do not return. */
__device__ __noinline__ uint32_t mk_fault_inject(const struct mk_kernel_args *a, uint32_t step, uint32_t cmd) {
    switch (a->fault_kind) {
    case MK_KFAULT_ERROR: mk_device_fail(a, NULL, MK_DEVERR_INJECTED, step); return MK_CMD_STOP;
    case MK_KFAULT_TRAP: __trap(); break;
    case MK_KFAULT_HANG: return MK_CMD_HANG;
    case MK_KFAULT_BAD_ADDRESS:
        /* Far above any allocation and below the top of the 49-bit address space. */
        *(volatile uint32_t *)(uintptr_t)0x1ffff00000000ull = step;
        __threadfence();
        __trap(); /* in case the store landed somewhere mapped after all */
        break;
    default: break;
    }
    return cmd;
}

#endif
