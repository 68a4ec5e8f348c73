/* The backend factory: resolves AUTO to the best executor this machine can run, and the reference backend. */
#ifndef MK_BACKEND_H
#define MK_BACKEND_H

#include <stdint.h>

#include "graph/executor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mk_status mk_backend_create_ref(const struct mk_model *m, const struct mk_backend_params *p,
                                     struct mk_backend **out, struct mk_error *err);
/* Resolves AUTO (megakernel where possible, else perop, else cpu) and creates; (*out)->kind says
 * which it chose. */
enum mk_status mk_backend_create(const struct mk_model *m, const struct mk_backend_params *p, struct mk_backend **out,
                                 struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
