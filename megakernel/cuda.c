/* Loads the CUDA driver with dlopen once per process and reports its failures as mk errors. */
#include "megakernel/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The table is written once under pthread_once and only read afterwards. */
static struct mk_cuda mk_cuda_table;
static struct mk_error mk_cuda_load_err;
static pthread_once_t mk_cuda_once = PTHREAD_ONCE_INIT;

struct mk_cuda_sym {
    const char *name;
    size_t offset;
    int optional; /* the entry stays NULL when the driver lacks it; callers check */
};

#define MK_CUDA_SYM(field) \
    { #field, offsetof(struct mk_cuda, field), 0 }
#define MK_CUDA_SYM_OPTIONAL(field) \
    { #field, offsetof(struct mk_cuda, field), 1 }
static const struct mk_cuda_sym mk_cuda_syms[] = {
    MK_CUDA_SYM(cuGetErrorName),
    MK_CUDA_SYM(cuGetErrorString),
    MK_CUDA_SYM(cuInit),
    MK_CUDA_SYM(cuDriverGetVersion),
    MK_CUDA_SYM(cuDeviceGetCount),
    MK_CUDA_SYM(cuDeviceGet),
    MK_CUDA_SYM(cuDeviceGetName),
    MK_CUDA_SYM(cuDeviceGetAttribute),
    MK_CUDA_SYM(cuCtxCreate_v2),
    MK_CUDA_SYM(cuCtxDestroy_v2),
    MK_CUDA_SYM(cuCtxSetCurrent),
    MK_CUDA_SYM(cuModuleLoadDataEx),
    MK_CUDA_SYM(cuModuleUnload),
    MK_CUDA_SYM(cuModuleGetFunction),
    MK_CUDA_SYM(cuFuncGetAttribute),
    MK_CUDA_SYM(cuFuncSetAttribute),
    MK_CUDA_SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    MK_CUDA_SYM(cuMemGetInfo_v2),
    MK_CUDA_SYM(cuMemAlloc_v2),
    MK_CUDA_SYM(cuMemFree_v2),
    MK_CUDA_SYM(cuMemcpyHtoD_v2),
    MK_CUDA_SYM(cuMemcpyHtoDAsync_v2),
    MK_CUDA_SYM(cuMemcpyDtoHAsync_v2),
    MK_CUDA_SYM(cuMemsetD8_v2),
    MK_CUDA_SYM(cuMemsetD8Async),
    MK_CUDA_SYM(cuMemHostAlloc),
    MK_CUDA_SYM(cuMemFreeHost),
    MK_CUDA_SYM(cuMemHostGetDevicePointer_v2),
    MK_CUDA_SYM(cuStreamCreate),
    MK_CUDA_SYM(cuStreamDestroy_v2),
    MK_CUDA_SYM(cuStreamSynchronize),
    MK_CUDA_SYM(cuStreamQuery),
    MK_CUDA_SYM(cuEventCreate),
    MK_CUDA_SYM(cuEventDestroy_v2),
    MK_CUDA_SYM(cuEventRecord),
    MK_CUDA_SYM(cuEventSynchronize),
    MK_CUDA_SYM(cuEventElapsedTime),
    MK_CUDA_SYM(cuLaunchKernel),
    MK_CUDA_SYM_OPTIONAL(cuLaunchKernelEx),
    MK_CUDA_SYM_OPTIONAL(cuTensorMapEncodeTiled),
    MK_CUDA_SYM(cuLaunchCooperativeKernel),
    MK_CUDA_SYM(cuStreamBeginCapture_v2),
    MK_CUDA_SYM(cuStreamEndCapture),
    MK_CUDA_SYM(cuGraphInstantiateWithFlags),
    MK_CUDA_SYM(cuGraphLaunch),
    MK_CUDA_SYM(cuGraphExecDestroy),
    MK_CUDA_SYM(cuGraphDestroy),
};

static void mk_cuda_do_load(void) {
    struct mk_cuda *cu = &mk_cuda_table;
    struct mk_error *err = &mk_cuda_load_err;
    const char *name = getenv("MK_CUDA_LIB");
    if (!name || !*name) name = "libcuda.so.1";
    /* The handle stays open for the life of the process: the table points into it. */
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        mk_error_set(err, MK_ERR_NO_DEVICE, "%s not found: %s (no NVIDIA driver on this machine)", name,
                     why ? why : "dlopen failed");
        return;
    }
    for (size_t i = 0; i < sizeof mk_cuda_syms / sizeof mk_cuda_syms[0]; i++) {
        void *fn = dlsym(lib, mk_cuda_syms[i].name);
        if (!fn && mk_cuda_syms[i].optional) continue;
        if (!fn) {
            mk_error_set(err, MK_ERR_NO_DEVICE, "%s: symbol %s missing (driver too old for mk)", name,
                         mk_cuda_syms[i].name);
            dlclose(lib);
            return;
        }
        /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
        memcpy((char *)cu + mk_cuda_syms[i].offset, &fn, sizeof fn);
    }
    mk_cu_result r = cu->cuInit(0);
    if (r != MK_CUDA_SUCCESS) {
        const char *ename = NULL, *estr = NULL;
        cu->cuGetErrorName(r, &ename);
        cu->cuGetErrorString(r, &estr);
        if (r == MK_CUDA_ERROR_NO_DEVICE)
            mk_error_set(err, MK_ERR_NO_DEVICE, "no CUDA device (cuInit: %s: %s)", ename ? ename : "?",
                         estr ? estr : "?");
        else
            mk_error_set(err, MK_ERR_NO_DEVICE, "CUDA driver unusable: cuInit(0) failed with %s (%d): %s",
                         ename ? ename : "?", r, estr ? estr : "?");
        return;
    }
    int count = 0;
    if (cu->cuDeviceGetCount(&count) != MK_CUDA_SUCCESS || count <= 0) {
        mk_error_set(err, MK_ERR_NO_DEVICE, "no CUDA device (the driver %s loaded but reports none)", name);
        return;
    }
    cu->cuDriverGetVersion(&cu->driver_version);
    mk_error_clear(err);
}

enum mk_status mk_cuda_load(const struct mk_cuda **out, struct mk_error *err) {
    *out = NULL;
    pthread_once(&mk_cuda_once, mk_cuda_do_load);
    if (mk_cuda_load_err.status != MK_OK) {
        if (err) *err = mk_cuda_load_err;
        return mk_cuda_load_err.status;
    }
    *out = &mk_cuda_table;
    return MK_OK;
}

int mk_cuda_check(const struct mk_cuda *cu, mk_cu_result r, mk_cu_result also_ok, const char *call, const char *file,
                  int line, struct mk_error *err) {
    if (r == MK_CUDA_SUCCESS) return 0;
    if (also_ok != MK_CUDA_SUCCESS && r == also_ok) return 1;
    const char *ename = NULL, *estr = NULL;
    if (cu->cuGetErrorName(r, &ename) != MK_CUDA_SUCCESS) ename = NULL;
    if (cu->cuGetErrorString(r, &estr) != MK_CUDA_SUCCESS) estr = NULL;
    return mk_error_set(err, MK_ERR_CUDA, "%s failed at %s:%d: %s (%d): %s", call, file, line,
                        ename ? ename : "unknown CUresult", r, estr ? estr : "no description");
}
