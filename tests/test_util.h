/* Helpers shared by the C tests: the models folder, the failure count and its CHECK macros, temp folders, whole-file reads, stories260K's golden output. */
#ifndef MK_TESTS_TEST_UTIL_H
#define MK_TESTS_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "megakernel/abi.h"

/* Failed checks so far in this test binary; mk_test_finish turns it into the exit status. */
extern int mk_test_failures;

/* Counts a failure and prints "file:line: check failed: cond" to stderr (tools/gpu_check.sh keeps
 * the lines that say "check failed"). */
#define MK_CHECK(cond)                                                 \
    do {                                                               \
        if (!(cond)) mk_test_fail_at(__FILE__, __LINE__, "%s", #cond); \
    } while (0)

/* MK_CHECK with a printf-style message in place of the condition's text. */
#define MK_CHECK_MSG(cond, ...)                                        \
    do {                                                               \
        if (!(cond)) mk_test_fail_at(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* Counts a failure and prints "file:line: check failed: <message>" to stderr. */
void mk_test_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Counts a failure and prints the message (and a newline) to stderr as it is. */
void mk_test_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The end of main: prints "<name>: all checks passed" and returns 0, or the number of failed
 * checks to stderr and returns 1. */
int mk_test_finish(const char *name);

/* The folder of the shared model files: the first of $MK_MODELS_DIR, ../shared/models and
 * ../shared/models that holds a readable probe_file. NULL when none does; the caller then
 * prints "SKIP: ..." for the parts that need the files. */
const char *mk_test_models_dir(const char *probe_file);

/* The path of stories260K-f32.gguf in the models folder; NULL (after printing "SKIP: ...") when
 * there is none. */
const char *mk_test_stories_path(void);

/* stories260K-f32.gguf's greedy ids from BOS and its logits [0, 5) at pos 0, from the models
 * folder's README. */
extern const int32_t mk_test_golden_ids[60];
extern const double mk_test_golden_logits[5];

/* Where tests write files: $TEST_TMPDIR (set by bazel test), else /tmp. */
const char *mk_test_tmp_base(void);

/* Makes a fresh folder "<tmp base>/<prefix>XXXXXX" (mkdtemp) into buf; NULL with errno on failure. */
char *mk_test_make_tmp_dir(char *buf, size_t cap, const char *prefix);

/* Removes dir and everything under it; says so on stderr when that fails. */
void mk_test_remove_tree(const char *dir);

/* The whole file, plus a terminating NUL byte not counted in *n; NULL when it cannot be read. */
void *mk_test_read_file(const char *path, size_t *n);

/* tests/data/<file> in the runfiles ($TEST_SRCDIR/$TEST_WORKSPACE), else from the current folder:
 * its path into buf (cap bytes) when it is readable, else NULL. */
const char *mk_test_data_path(const char *file, char *buf, size_t cap);

/* mk_test_read_file of mk_test_data_path(file). */
void *mk_test_read_data_file(const char *file, size_t *n);

/* max |a - b| / max |b|: relative to the values' scale, so entries near zero do not dominate.
 * A NaN anywhere in a - b gives NaN, so tolerance checks fail on it. */
double mk_test_rel_err(const float *a, const float *b, size_t n);

/* A STEP command for token at pos with every other field zero: greedy. */
struct mk_step_cmd mk_test_step_cmd(int32_t token, int32_t pos);

#endif
