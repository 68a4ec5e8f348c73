/* The executor interface behind a session: ref, cpu, megakernel, perop and graph all implement it. */
#ifndef MK_EXECUTOR_H
#define MK_EXECUTOR_H

#include <stdint.h>

#include "core/model.h"
#include "core/status.h"
#include "megakernel/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend kinds are part of the public API too: runtime/mk.h carries a copy of this block
 * under the same guard, and tests/layers_check.py fails when the two copies differ by one byte. */
#ifndef MK_BACKEND_KIND_DEFINED
#define MK_BACKEND_KIND_DEFINED
enum mk_backend_kind {
    MK_BACKEND_AUTO = 0,
    MK_BACKEND_REF = 1,        /* straight CPU reference forward pass */
    MK_BACKEND_CPU = 2,        /* the program on pthread workers */
    MK_BACKEND_MEGAKERNEL = 3, /* one persistent cooperative kernel */
    MK_BACKEND_PEROP = 4,      /* one launch per instruction */
    MK_BACKEND_GRAPH = 5,      /* per-op launches captured in a CUDA graph */
};
const char *mk_backend_kind_name(enum mk_backend_kind k);
/* 0 when s names a kind (stored in *out), -1 when it names none. */
int mk_backend_kind_parse(const char *s, enum mk_backend_kind *out);
#endif /* MK_BACKEND_KIND_DEFINED */

struct mk_backend_params {
    enum mk_backend_kind kind;
    uint32_t n_ctx;
    uint32_t n_threads;   /* cpu backend workers; 0 = number of cores */
    uint32_t watchdog_ms; /* GPU backends: fail a step that takes longer; 0 = default 10000 */
    int device;           /* CUDA device ordinal */
    int verbose;
};

struct mk_backend;
struct mk_backend_vtbl {
    const char *name;
    /* Runs one decode step: cmd->token at cmd->pos, sampling with cmd's parameters. */
    enum mk_status (*step)(struct mk_backend *b, const struct mk_step_cmd *cmd, int32_t *out_token,
                           struct mk_error *err);
    /* Copies the last step's logits (vocab floats) to out. */
    enum mk_status (*logits)(struct mk_backend *b, float *out, struct mk_error *err);
    /* Forgets the KV cache (positions restart at 0). */
    enum mk_status (*reset)(struct mk_backend *b, struct mk_error *err);
    void (*free)(struct mk_backend *b);
};
struct mk_backend {
    const struct mk_backend_vtbl *vt;
    enum mk_backend_kind kind;
    uint32_t n_ctx;
    uint64_t last_step_ns; /* device-measured time of the last step, 0 if unknown */
};

#ifdef __cplusplus
}
#endif
#endif
