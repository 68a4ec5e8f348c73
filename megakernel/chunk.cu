/* The kernels of a chunk step (several tokens per step): per-op launches the host sequences from the chunk program (megakernel/chunk.h). */
#include <stdint.h>

#include "megakernel/abi.h"
#include "megakernel/chunk.h"
#include "megakernel/chunk/attn.cuh"
#include "megakernel/chunk/attn_mma.cuh"
#include "megakernel/chunk/mm.cuh"
#include "megakernel/chunk/mmq.cuh"
#include "megakernel/chunk/mmw.cuh"
#include "megakernel/chunk/mv.cuh"
#include "megakernel/chunk/mv8.cuh"
#include "megakernel/chunk/qkv.cuh"
#include "megakernel/chunk/rows.cuh"
#include "megakernel/chunk/sample.cuh"
