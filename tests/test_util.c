/* Helpers shared by the C tests: see tests/test_util.h. */
#include "tests/test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mk_test_failures;

/* Atomic because some tests check from several threads. */
static void mk_test_count_failure(void) { __atomic_add_fetch(&mk_test_failures, 1, __ATOMIC_RELAXED); }

void mk_test_fail_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, msg);
    mk_test_count_failure();
}

void mk_test_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    mk_test_count_failure();
}

int mk_test_finish(const char *name) {
    int n = __atomic_load_n(&mk_test_failures, __ATOMIC_RELAXED);
    if (n) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, n);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

const char *mk_test_models_dir(const char *probe_file) {
    const char *cands[] = { getenv("MK_MODELS_DIR"), "../shared/models" };
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        if (!cands[i] || !cands[i][0]) continue;
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/%s", cands[i], probe_file);
        if (access(probe, R_OK) == 0) return cands[i];
    }
    /* CI sets MK_REQUIRE_MODELS=1 so that a broken models path fails instead of skipping. */
    const char *req = getenv("MK_REQUIRE_MODELS");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "FAIL: %s not found under $MK_MODELS_DIR (%s) or ../shared/models, and MK_REQUIRE_MODELS=1\n",
                probe_file, getenv("MK_MODELS_DIR") ? getenv("MK_MODELS_DIR") : "unset");
        exit(1);
    }
    return NULL;
}

const char *mk_test_stories_path(void) {
    static char path[4200];
    const char *models = mk_test_models_dir("stories260K-f32.gguf");
    if (!models) {
        printf("SKIP: no models folder with stories260K-f32.gguf\n");
        return NULL;
    }
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", models);
    return path;
}

const int32_t mk_test_golden_ids[60] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
    266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415,
};

const double mk_test_golden_logits[5] = { -6.222914, 8.404342, -6.223739, -6.222544, -6.221953 };

const char *mk_test_tmp_base(void) {
    const char *t = getenv("TEST_TMPDIR");
    return t && t[0] ? t : "/tmp";
}

char *mk_test_make_tmp_dir(char *buf, size_t cap, const char *prefix) {
    snprintf(buf, cap, "%s/%sXXXXXX", mk_test_tmp_base(), prefix);
    return mkdtemp(buf);
}

void mk_test_remove_tree(const char *dir) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

void *mk_test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (len == cap) {
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        if (r == 0) break;
        len += r;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = '\0';
    *n = len;
    return buf;
}

const char *mk_test_data_path(const char *file, char *buf, size_t cap) {
    const char *srcdir = getenv("TEST_SRCDIR"), *ws = getenv("TEST_WORKSPACE");
    if (srcdir && ws) {
        snprintf(buf, cap, "%s/%s/tests/data/%s", srcdir, ws, file);
        if (access(buf, R_OK) == 0) return buf;
    }
    snprintf(buf, cap, "tests/data/%s", file);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

void *mk_test_read_data_file(const char *file, size_t *n) {
    char path[1024];
    return mk_test_data_path(file, path, sizeof path) ? mk_test_read_file(path, n) : NULL;
}

double mk_test_rel_err(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d) || d > num) num = d; /* once NaN, stays NaN */
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0.0 ? num / den : num;
}

struct mk_step_cmd mk_test_step_cmd(int32_t token, int32_t pos) {
    struct mk_step_cmd c;
    memset(&c, 0, sizeof c);
    c.cmd = MK_CMD_STEP;
    c.token = token;
    c.pos = pos;
    return c;
}
