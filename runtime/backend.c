/* Backend names and the factory that resolves AUTO to the best executor this machine can run. */
#include <stdio.h>
#include <string.h>

#include "graph/cpu_exec.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"

static enum mk_status mk_backend_create_kind(const struct mk_model *m, const struct mk_backend_params *p,
                                             enum mk_backend_kind kind, struct mk_backend **out, struct mk_error *err) {
    struct mk_backend_params q = *p;
    q.kind = kind;
    switch (kind) {
    case MK_BACKEND_REF: return mk_backend_create_ref(m, &q, out, err);
    case MK_BACKEND_CPU: return mk_backend_create_cpu(m, &q, out, err);
    case MK_BACKEND_MEGAKERNEL:
    case MK_BACKEND_PEROP:
    case MK_BACKEND_GRAPH: return mk_backend_create_cuda(m, &q, out, err);
    case MK_BACKEND_AUTO: break;
    }
    return mk_error_set(err, MK_ERR_INVALID_ARG,
                        "backend kind %d is not one of auto, ref, cpu, megakernel, perop, graph", (int)kind);
}

/* A GPU that is absent or cannot run a kind is a reason to try the next one; any other failure
 * (a CUDA error, no memory) is reported, since silently running elsewhere would hide it. */
static int mk_backend_can_fall_back(enum mk_status st) { return st == MK_ERR_NO_DEVICE || st == MK_ERR_UNSUPPORTED; }

static enum mk_status mk_backend_create_any(const struct mk_model *m, const struct mk_backend_params *p,
                                            struct mk_backend **out, struct mk_error *err) {
    *out = NULL;
    if (p->kind != MK_BACKEND_AUTO) return mk_backend_create_kind(m, p, p->kind, out, err);

    /* Why each kind was passed over, for the verbose report. */
    char why[1024];
    size_t used = 0;
    why[0] = '\0';
    static const enum mk_backend_kind order[] = { MK_BACKEND_MEGAKERNEL, MK_BACKEND_PEROP, MK_BACKEND_CPU };
    const size_t n_order = sizeof order / sizeof order[0];
    for (size_t i = 0; i < n_order; i++) {
        struct mk_error e;
        mk_error_clear(&e);
        enum mk_status st = mk_backend_create_kind(m, p, order[i], out, &e);
        if (st == MK_OK) {
            if (p->verbose)
                fprintf(stderr, "mk: backend auto -> %s%s%s%s\n", mk_backend_kind_name(order[i]), used ? " (" : "", why,
                        used ? ")" : "");
            return MK_OK;
        }
        if (!mk_backend_can_fall_back(st) || i + 1 == n_order) {
            if (err) *err = e;
            return st;
        }
        int k = snprintf(why + used, sizeof why - used, "%s%s: %s", used ? "; " : "", mk_backend_kind_name(order[i]),
                         e.msg);
        if (k > 0) used = used + (size_t)k < sizeof why ? used + (size_t)k : sizeof why - 1;
        /* Without a device there is no point asking the next GPU kind. */
        if (st == MK_ERR_NO_DEVICE && order[i] == MK_BACKEND_MEGAKERNEL) i++;
    }
    return mk_error_set(err, MK_ERR_INTERNAL, "backend auto: no kind was tried");
}

enum mk_status mk_backend_create(const struct mk_model *m, const struct mk_backend_params *p, struct mk_backend **out,
                                 struct mk_error *err) {
    enum mk_status st = mk_backend_create_any(m, p, out, err);
    if (st == MK_OK && p->verbose && p->ubatch > 1 && (*out)->ubatch <= 1)
        fprintf(stderr, "mk: the %s backend has no chunk steps yet: ubatch %u runs one token per step\n",
                mk_backend_kind_name((*out)->kind), p->ubatch);
    return st;
}
