/* The kernels' code as nvcc built it at build time (//megakernel:megakernel_module and :chunk_module): one fatbin with SASS per supported GPU generation and PTX for newer ones. */
#ifndef MK_MEGAKERNEL_IMAGE_H
#define MK_MEGAKERNEL_IMAGE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A fatbin for cuModuleLoadData: the driver takes the SASS that fits the device, else compiles
 * the PTX. 256-byte aligned. */
extern const unsigned char mk_megakernel_fatbin[];
extern const size_t mk_megakernel_fatbin_size;
/* What it holds, e.g. "sm_80 sm_86 sm_89 sm_90 compute_80". */
extern const char mk_megakernel_archs[];
/* The same kernels without the block-format paths (built with MK_FLOAT_ONLY), for programs whose
 * weights are all f32, f16 or bf16; SASS only ("sm_90"), no PTX. */
extern const unsigned char mk_megakernel_float_fatbin[];
extern const size_t mk_megakernel_float_fatbin_size;
extern const char mk_megakernel_float_archs[];
/* The chunk step's kernels (//megakernel:chunk_module, megakernel/chunk.cu), built the same way. */
extern const unsigned char mk_chunk_fatbin[];
extern const size_t mk_chunk_fatbin_size;
extern const char mk_chunk_archs[];

#ifdef __cplusplus
}
#endif
#endif
