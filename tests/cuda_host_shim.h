/* Just enough of CUDA's device vocabulary to compile pure device helpers as host C++ for tests. */
#ifndef MK_CUDA_HOST_SHIM_H
#define MK_CUDA_HOST_SHIM_H

#include <stdint.h>
#include <string.h>

/* core/dtype.h is C11; its layout checks read the same in C++. */
#define _Static_assert static_assert
#include "core/dtype.h"

#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__

static inline uint8_t __ldg(const uint8_t *p) { return *p; }
static inline unsigned short __ldg(const unsigned short *p) {
    unsigned short v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A half is its bits; conversion goes through mk's exact host conversion. */
struct __half {
    unsigned short bits;
};
static inline __half __ushort_as_half(unsigned short u) {
    __half h;
    h.bits = u;
    return h;
}
static inline float __half2float(__half h) { return mk_fp16_to_fp32(h.bits); }

#endif
