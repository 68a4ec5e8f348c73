/* The public header alone: this file includes runtime/mk.h and nothing else of mk. */
#include <stdio.h>
#include <string.h>

#include "runtime/mk.h"

static int failures;
#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                           \
        }                                                                         \
    } while (0)

int main(void) {
    /* The copies of the status and backend-kind blocks in mk.h name the library's values. */
    CHECK(strcmp(mk_status_str(MK_OK), mk_status_str(MK_ERR_FORMAT)) != 0);
    CHECK(strstr(mk_status_str(MK_ERR_CONTEXT_FULL), "context") != NULL);
    CHECK(strcmp(mk_backend_kind_name(MK_BACKEND_MEGAKERNEL), "megakernel") == 0);
    CHECK(strcmp(mk_backend_kind_name(MK_BACKEND_GRAPH), "graph") == 0);
    enum mk_backend_kind k = MK_BACKEND_AUTO;
    CHECK(mk_backend_kind_parse("perop", &k) == 0 && k == MK_BACKEND_PEROP);
    CHECK(mk_backend_kind_parse("nonsense", &k) == -1);

    struct mk_session_params sp = mk_session_default_params();
    CHECK(sp.backend == MK_BACKEND_AUTO && sp.sampling.seed == MK_SEED_RANDOM);

    struct mk_error err;
    struct mk_lm *lm = NULL;
    CHECK(mk_lm_load("/nonexistent/dir/m.gguf", &lm, &err) == MK_ERR_IO && lm == NULL);
    CHECK(err.status == MK_ERR_IO && strstr(err.msg, "/nonexistent/dir/m.gguf") != NULL);

    if (failures) return 1;
    printf("mk_h_test: ok\n");
    return 0;
}
