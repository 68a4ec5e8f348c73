/* Read-bandwidth probes, so benchmarks compare against the floor of the machine they ran on. */
#ifndef MK_BANDWIDTH_H
#define MK_BANDWIDTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host memory: threads (0 = online cores) each sum their slice of a 1 GiB buffer; best of 5. */
enum mk_status mk_bandwidth_host_read(uint32_t threads, double *bytes_per_s, struct mk_error *err);

/* True when a CUDA driver and a GPU are usable. */
bool mk_bandwidth_cuda_available(void);

/* GPU memory: a streaming kernel of 16-byte loads over 1 GiB on device `device`; best of 10. */
enum mk_status mk_bandwidth_cuda_read(int device, double *bytes_per_s, struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
