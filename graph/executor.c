/* Names of the backend kinds, shared by every layer that reports or parses them. */
#include <string.h>

#include "graph/executor.h"

static const char *const mk_backend_names[] = {
    [MK_BACKEND_AUTO] = "auto",   [MK_BACKEND_REF] = "ref",
    [MK_BACKEND_CPU] = "cpu",     [MK_BACKEND_MEGAKERNEL] = "megakernel",
    [MK_BACKEND_PEROP] = "perop", [MK_BACKEND_GRAPH] = "graph",
};
#define MK_BACKEND_N_KINDS (sizeof mk_backend_names / sizeof mk_backend_names[0])

const char *mk_backend_kind_name(enum mk_backend_kind k) {
    if ((unsigned)k < MK_BACKEND_N_KINDS) return mk_backend_names[k];
    return "unknown";
}

int mk_backend_kind_parse(const char *s, enum mk_backend_kind *out) {
    if (!s) return -1;
    for (unsigned i = 0; i < MK_BACKEND_N_KINDS; i++) {
        if (!strcmp(s, mk_backend_names[i])) {
            *out = (enum mk_backend_kind)i;
            return 0;
        }
    }
    return -1;
}
