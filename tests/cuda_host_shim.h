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

/* The integer intrinsics of the int8 dots (megakernel/quant8.cuh), as the PTX manual defines them. */
static inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t sh) {
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31u));
}
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
}
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}

#endif
