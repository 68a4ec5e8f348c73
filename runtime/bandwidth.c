/* Read-bandwidth probes for mk bench: host memory with threads, GPU memory with a streaming kernel. */
#include "runtime/bandwidth.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "megakernel/cuda.h"

#define MK_BW_BYTES (1ull << 30)

/* From //megakernel:bandwidth_module: SASS per GPU generation and PTX, chosen by the driver. */
extern const unsigned char mk_bandwidth_fatbin[];

struct mk_bw_slice {
    const uint64_t *p;
    size_t n;
    uint64_t acc;
};

static void *mk_bw_sum(void *arg) {
    struct mk_bw_slice *s = arg;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 3 < s->n; i += 4) {
        a0 += s->p[i];
        a1 += s->p[i + 1];
        a2 += s->p[i + 2];
        a3 += s->p[i + 3];
    }
    s->acc = a0 ^ a1 ^ a2 ^ a3;
    return NULL;
}

static double mk_bw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum mk_status mk_bandwidth_host_read(uint32_t threads, double *bytes_per_s, struct mk_error *err) {
    if (!threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (uint32_t)n : 1;
    }
    if (threads > 256) threads = 256;
    uint64_t *buf = malloc(MK_BW_BYTES);
    pthread_t tid[256];
    struct mk_bw_slice sl[256];
    if (!buf) return mk_error_set(err, MK_ERR_NOMEM, "no memory for a %llu-byte bandwidth buffer", MK_BW_BYTES);
    size_t words = MK_BW_BYTES / 8;
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = mk_bw_now();
        uint32_t started = 0;
        for (uint32_t t = 0; t < threads; t++) {
            sl[t] = (struct mk_bw_slice){ buf + words / threads * t, words / threads, 0 };
            if (pthread_create(&tid[t], NULL, mk_bw_sum, &sl[t]) == 0)
                started++;
            else
                mk_bw_sum(&sl[t]);
        }
        for (uint32_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
        double dt = mk_bw_now() - t0;
        if (dt < best) best = dt;
    }
    free(buf);
    *bytes_per_s = (double)(words / threads * threads * 8) / best;
    return MK_OK;
}

bool mk_bandwidth_cuda_available(void) {
    const struct mk_cuda *cu;
    struct mk_error err;
    int n = 0;
    return mk_cuda_load(&cu, &err) == MK_OK && cu->cuDeviceGetCount(&n) == MK_CUDA_SUCCESS && n > 0;
}

enum mk_status mk_bandwidth_cuda_read(int device, double *bytes_per_s, struct mk_error *err) {
    const struct mk_cuda *cu;
    enum mk_status st = mk_cuda_load(&cu, err);
    if (st != MK_OK) return st;
    mk_cu_device dev;
    mk_cu_context ctx = NULL;
    mk_cu_module mod = NULL;
    mk_cu_function fn;
    mk_cu_devptr buf = 0, sink = 0;
    mk_cu_event e0 = NULL, e1 = NULL;
    int sms = 0;
    if (MK_CU(cu, err, cuDeviceGet(&dev, device)) || MK_CU(cu, err, cuCtxCreate_v2(&ctx, 0, dev)) ||
        MK_CU(cu, err, cuDeviceGetAttribute(&sms, MK_CU_ATTR_MULTIPROCESSOR_COUNT, dev)) ||
        MK_CU(cu, err, cuModuleLoadDataEx(&mod, mk_bandwidth_fatbin, 0, NULL, NULL)))
        goto fail;
    if (MK_CU(cu, err, cuModuleGetFunction(&fn, mod, "mk_bw_read")) ||
        MK_CU(cu, err, cuMemAlloc_v2(&buf, MK_BW_BYTES)) || MK_CU(cu, err, cuMemAlloc_v2(&sink, 16)) ||
        MK_CU(cu, err, cuMemsetD8_v2(buf, 0x5a, MK_BW_BYTES)) ||
        MK_CU(cu, err, cuEventCreate(&e0, MK_CU_EVENT_DEFAULT)) ||
        MK_CU(cu, err, cuEventCreate(&e1, MK_CU_EVENT_DEFAULT)))
        goto fail;
    uint64_t n = MK_BW_BYTES / 16;
    void *args[] = { &buf, &n, &sink };
    float best = 1e30f;
    for (int rep = 0; rep < 11; rep++) {
        float ms = 0;
        if (MK_CU(cu, err, cuEventRecord(e0, NULL)) ||
            MK_CU(cu, err, cuLaunchKernel(fn, (unsigned)sms * 4, 1, 1, 512, 1, 1, 0, NULL, args, NULL)) ||
            MK_CU(cu, err, cuEventRecord(e1, NULL)) || MK_CU(cu, err, cuEventSynchronize(e1)) ||
            MK_CU(cu, err, cuEventElapsedTime(&ms, e0, e1)))
            goto fail;
        if (rep > 0 && ms < best) best = ms; /* the first run pays for warm-up */
    }
    *bytes_per_s = (double)MK_BW_BYTES / (best * 1e-3);
    st = MK_OK;
    goto done;
fail:
    st = err->status ? err->status : MK_ERR_CUDA;
done:
    if (e0) cu->cuEventDestroy_v2(e0);
    if (e1) cu->cuEventDestroy_v2(e1);
    if (buf) cu->cuMemFree_v2(buf);
    if (sink) cu->cuMemFree_v2(sink);
    if (mod) cu->cuModuleUnload(mod);
    if (ctx) cu->cuCtxDestroy_v2(ctx);
    return st;
}
