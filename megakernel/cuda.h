/* The CUDA Driver API opened at run time with dlopen: its few types and constants, a table of entry points, one checking macro. */
#ifndef MK_CUDA_H
#define MK_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Our own spellings of the driver's types, so nothing here needs cuda.h at build time. Values and
 * layouts follow cuda.h of CUDA 12/13 (the ABI of the _v2 entry points never changes). */
typedef int mk_cu_result;
typedef int mk_cu_device;
typedef uint64_t mk_cu_devptr;
typedef struct mk_cu_ctx_st *mk_cu_context;
typedef struct mk_cu_mod_st *mk_cu_module;
typedef struct mk_cu_func_st *mk_cu_function;
typedef struct mk_cu_stream_st *mk_cu_stream;
typedef struct mk_cu_event_st *mk_cu_event;
typedef struct mk_cu_graph_st *mk_cu_graph;
typedef struct mk_cu_graph_exec_st *mk_cu_graph_exec;

#define MK_CUDA_SUCCESS         0
#define MK_CUDA_ERROR_NO_DEVICE 100
#define MK_CUDA_ERROR_NOT_READY 600
/* The grid of a cooperative launch does not fit on the device at once. */
#define MK_CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE 720

#define MK_CU_ATTR_MULTIPROCESSOR_COUNT       16
#define MK_CU_ATTR_CAN_MAP_HOST_MEMORY        19
#define MK_CU_ATTR_CC_MAJOR                   75
#define MK_CU_ATTR_CC_MINOR                   76
#define MK_CU_ATTR_COOPERATIVE_LAUNCH         95
#define MK_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN 97

#define MK_CU_FUNC_ATTR_NUM_REGS           4
#define MK_CU_FUNC_ATTR_LOCAL_SIZE_BYTES   3
#define MK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED 8

#define MK_CU_CTX_SCHED_SPIN                   0x01
#define MK_CU_STREAM_NON_BLOCKING              0x1
#define MK_CU_EVENT_DEFAULT                    0x0
#define MK_CU_MEMHOSTALLOC_PORTABLE            0x01
#define MK_CU_MEMHOSTALLOC_DEVICEMAP           0x02
#define MK_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1

#define MK_CU_JIT_ERROR_LOG_BUFFER            5
#define MK_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

/* cuLaunchKernelEx's launch record and one attribute (CUlaunchConfig, CUlaunchAttribute). */
#define MK_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION 6
struct mk_cu_launch_attr {
    int id;
    char pad[4];
    union {
        char pad[64];
        int value; /* programmaticStreamSerializationAllowed, among others */
        void *align;
    } v;
};
struct mk_cu_launch_config {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    mk_cu_stream stream;
    struct mk_cu_launch_attr *attrs;
    unsigned n_attrs;
};
_Static_assert(sizeof(struct mk_cu_launch_attr) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(struct mk_cu_launch_config, stream) == 32 &&
                   offsetof(struct mk_cu_launch_config, attrs) == 40 && sizeof(struct mk_cu_launch_config) == 56,
               "CUlaunchConfig's layout");

/* The values of cuTensorMapEncodeTiled's enums that mk uses (its 128-byte CUtensorMap is
 * struct mk_chunk_tmap, megakernel/chunk.h). */
#define MK_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16   9
#define MK_CU_TENSOR_MAP_INTERLEAVE_NONE      0
#define MK_CU_TENSOR_MAP_SWIZZLE_128B         3
#define MK_CU_TENSOR_MAP_L2_PROMOTION_L2_256B 3
#define MK_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE  0 /* zeros past the tensor's bounds */

/* Entry points, named as the symbols libcuda exports (the _v2 ones where they exist). */
struct mk_cuda {
    int driver_version;
    mk_cu_result (*cuGetErrorName)(mk_cu_result, const char **);
    mk_cu_result (*cuGetErrorString)(mk_cu_result, const char **);
    mk_cu_result (*cuInit)(unsigned);
    mk_cu_result (*cuDriverGetVersion)(int *);
    mk_cu_result (*cuDeviceGetCount)(int *);
    mk_cu_result (*cuDeviceGet)(mk_cu_device *, int);
    mk_cu_result (*cuDeviceGetName)(char *, int, mk_cu_device);
    mk_cu_result (*cuDeviceGetAttribute)(int *, int, mk_cu_device);
    mk_cu_result (*cuCtxCreate_v2)(mk_cu_context *, unsigned, mk_cu_device);
    mk_cu_result (*cuCtxDestroy_v2)(mk_cu_context);
    mk_cu_result (*cuCtxSetCurrent)(mk_cu_context);
    mk_cu_result (*cuModuleLoadDataEx)(mk_cu_module *, const void *, unsigned, int *, void **);
    mk_cu_result (*cuModuleUnload)(mk_cu_module);
    mk_cu_result (*cuModuleGetFunction)(mk_cu_function *, mk_cu_module, const char *);
    mk_cu_result (*cuFuncGetAttribute)(int *, int, mk_cu_function);
    mk_cu_result (*cuFuncSetAttribute)(mk_cu_function, int, int);
    mk_cu_result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, mk_cu_function, int, size_t);
    mk_cu_result (*cuMemGetInfo_v2)(size_t *, size_t *);
    mk_cu_result (*cuMemAlloc_v2)(mk_cu_devptr *, size_t);
    mk_cu_result (*cuMemFree_v2)(mk_cu_devptr);
    mk_cu_result (*cuMemcpyHtoD_v2)(mk_cu_devptr, const void *, size_t);
    mk_cu_result (*cuMemcpyHtoDAsync_v2)(mk_cu_devptr, const void *, size_t, mk_cu_stream);
    mk_cu_result (*cuMemcpyDtoHAsync_v2)(void *, mk_cu_devptr, size_t, mk_cu_stream);
    mk_cu_result (*cuMemsetD8_v2)(mk_cu_devptr, unsigned char, size_t);
    mk_cu_result (*cuMemsetD8Async)(mk_cu_devptr, unsigned char, size_t, mk_cu_stream);
    mk_cu_result (*cuMemHostAlloc)(void **, size_t, unsigned);
    mk_cu_result (*cuMemFreeHost)(void *);
    mk_cu_result (*cuMemHostGetDevicePointer_v2)(mk_cu_devptr *, void *, unsigned);
    mk_cu_result (*cuStreamCreate)(mk_cu_stream *, unsigned);
    mk_cu_result (*cuStreamDestroy_v2)(mk_cu_stream);
    mk_cu_result (*cuStreamSynchronize)(mk_cu_stream);
    mk_cu_result (*cuStreamQuery)(mk_cu_stream);
    mk_cu_result (*cuEventCreate)(mk_cu_event *, unsigned);
    mk_cu_result (*cuEventDestroy_v2)(mk_cu_event);
    mk_cu_result (*cuEventRecord)(mk_cu_event, mk_cu_stream);
    mk_cu_result (*cuEventSynchronize)(mk_cu_event);
    mk_cu_result (*cuEventElapsedTime)(float *, mk_cu_event, mk_cu_event);
    mk_cu_result (*cuLaunchKernel)(mk_cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   mk_cu_stream, void **, void **);
    /* Optional (NULL when the driver lacks it, before CUDA 12): launches with attributes. */
    mk_cu_result (*cuLaunchKernelEx)(const struct mk_cu_launch_config *, mk_cu_function, void **, void **);
    /* Optional (NULL before CUDA 12): the tensor maps of Hopper's bulk tensor copies. */
    mk_cu_result (*cuTensorMapEncodeTiled)(void *, int, uint32_t, void *, const uint64_t *, const uint64_t *,
                                           const uint32_t *, const uint32_t *, int, int, int, int);
    mk_cu_result (*cuLaunchCooperativeKernel)(mk_cu_function, unsigned, unsigned, unsigned, unsigned, unsigned,
                                              unsigned, unsigned, mk_cu_stream, void **);
    mk_cu_result (*cuStreamBeginCapture_v2)(mk_cu_stream, int);
    mk_cu_result (*cuStreamEndCapture)(mk_cu_stream, mk_cu_graph *);
    mk_cu_result (*cuGraphInstantiateWithFlags)(mk_cu_graph_exec *, mk_cu_graph, unsigned long long);
    mk_cu_result (*cuGraphLaunch)(mk_cu_graph_exec, mk_cu_stream);
    mk_cu_result (*cuGraphExecDestroy)(mk_cu_graph_exec);
    mk_cu_result (*cuGraphDestroy)(mk_cu_graph);
};

/* Opens libcuda.so.1 (or $MK_CUDA_LIB) and runs cuInit once per process; later calls return the
 * same table or the same failure. MK_ERR_NO_DEVICE says why when there is no driver or no GPU. */
enum mk_status mk_cuda_load(const struct mk_cuda **out, struct mk_error *err);

/* The checking behind MK_CU: 0 for CUDA_SUCCESS, 1 when r equals the tolerated code `also_ok`
 * (nonzero), else fills err with MK_ERR_CUDA naming the call text, file, line and the driver's
 * error name and string, and returns MK_ERR_CUDA. */
int mk_cuda_check(const struct mk_cuda *cu, mk_cu_result r, mk_cu_result also_ok, const char *call, const char *file,
                  int line, struct mk_error *err);

/* Every driver call goes through this: MK_CU_EX(cu, err, CODE, cuX(args)) calls cu->cuX(args).
 * MK_CU(...) is the common case where only success is fine. */
#define MK_CU_EX(cu, err, also_ok, call) mk_cuda_check((cu), (cu)->call, (also_ok), #call, __FILE__, __LINE__, (err))
#define MK_CU(cu, err, call)             MK_CU_EX(cu, err, MK_CUDA_SUCCESS, call)

#ifdef __cplusplus
}
#endif
#endif
