/* The kernels' code as nvcc built it at build time (//megakernel:megakernel_module): PTX for any recent GPU and an sm_90 cubin. */
#ifndef MK_MEGAKERNEL_IMAGE_H
#define MK_MEGAKERNEL_IMAGE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NUL-terminated PTX text; the size counts the NUL. */
extern const unsigned char mk_megakernel_ptx[];
extern const size_t mk_megakernel_ptx_size;
/* The cubin for compute capability 9.0. */
extern const unsigned char mk_megakernel_cubin[];
extern const size_t mk_megakernel_cubin_size;

#ifdef __cplusplus
}
#endif
#endif
