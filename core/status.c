/* Error reporting helpers. */
#include "core/status.h"

#include <string.h>

enum mk_status mk_error_set(struct mk_error *err, enum mk_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void mk_error_prefix(struct mk_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
}

void mk_error_clear(struct mk_error *err) {
    if (err) {
        err->status = MK_OK;
        err->msg[0] = '\0';
    }
}

const char *mk_status_str(enum mk_status status) {
    switch (status) {
    case MK_OK: return "ok";
    case MK_ERR_INVALID_ARG: return "invalid argument";
    case MK_ERR_IO: return "I/O error";
    case MK_ERR_FORMAT: return "format error";
    case MK_ERR_UNSUPPORTED: return "unsupported";
    case MK_ERR_NOMEM: return "out of memory";
    case MK_ERR_NO_DEVICE: return "no device";
    case MK_ERR_CUDA: return "CUDA error";
    case MK_ERR_TIMEOUT: return "timeout";
    case MK_ERR_CONTEXT_FULL: return "context full";
    case MK_ERR_CANCELLED: return "cancelled";
    case MK_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
