/* Status codes, readable error messages and the invariant check shared by all of mk. */
#ifndef MK_STATUS_H
#define MK_STATUS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The status enum and error struct are part of the public API too: runtime/mk.h carries a copy of
 * this block under the same guard (it may include only standard headers), and tests/layers_check.py
 * fails when the two copies differ by one byte. */
#ifndef MK_STATUS_TYPES_DEFINED
#define MK_STATUS_TYPES_DEFINED
enum mk_status {
    MK_OK = 0,
    MK_ERR_INVALID_ARG = -1, /* caller passed something unusable */
    MK_ERR_IO = -2,          /* open/read/write/mmap failed */
    MK_ERR_FORMAT = -3,      /* a file is malformed or hostile */
    MK_ERR_UNSUPPORTED = -4, /* well-formed but not something mk runs */
    MK_ERR_NOMEM = -5,
    MK_ERR_NO_DEVICE = -6,    /* no CUDA driver or no usable GPU */
    MK_ERR_CUDA = -7,         /* a Driver API call failed */
    MK_ERR_TIMEOUT = -8,      /* the watchdog fired */
    MK_ERR_CONTEXT_FULL = -9, /* the KV cache has no room for another token */
    MK_ERR_CANCELLED = -10,
    MK_ERR_INTERNAL = -11,
};

/* An error report: a status and a message naming the file, field and value involved. */
struct mk_error {
    enum mk_status status;
    char msg[512];
};

/* Short name of a status code, e.g. "format error". */
const char *mk_status_str(enum mk_status status);
#endif /* MK_STATUS_TYPES_DEFINED */

/* Records status and a printf-style message into err (which may be NULL); returns status so
 * callers can write `return mk_error_set(err, MK_ERR_FORMAT, "...")`. */
enum mk_status mk_error_set(struct mk_error *err, enum mk_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (to add context such as a file name). */
void mk_error_prefix(struct mk_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void mk_error_clear(struct mk_error *err);

/* Broken invariants abort with file and line; they are bugs, never bad input. */
#define MK_ASSERT(cond)                                                                       \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "mk: assertion failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
