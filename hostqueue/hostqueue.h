/* The host side of the mailbox: a feeder thread posts step commands one at a time, a generation is posted and drained on the caller's thread, both watched by a watchdog. */
#ifndef MK_HOSTQUEUE_H
#define MK_HOSTQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "megakernel/abi.h"
#include "megakernel/cuda.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Asked about every millisecond while a step is out: MK_OK while the device side lives, else a
 * status with err filled (the kernel died). Runs on the feeder thread. */
typedef enum mk_status (*mk_hostqueue_probe_fn)(void *ctx, struct mk_error *err);
/* After a timeout: appends what the device side waits on to buf (NUL-terminated, n bytes). */
typedef void (*mk_hostqueue_describe_fn)(void *ctx, char *buf, size_t n);

struct mk_hostqueue_params {
    /* The mailbox lives in pinned, device-mapped memory of the current context when cu is set;
     * NULL puts it in plain host memory (tests that play the device with a thread). */
    const struct mk_cuda *cu;
    uint32_t watchdog_ms;              /* 0 = 10000 */
    mk_hostqueue_probe_fn probe;       /* may be NULL */
    mk_hostqueue_describe_fn describe; /* may be NULL */
    void *ctx;                         /* passed to probe and describe */
    const char *what;                  /* names the device side in messages, e.g. "megakernel" */
};

/* What the device answered to one step. */
struct mk_hostqueue_result {
    int32_t token;
    uint64_t t_start_ns, t_end_ns; /* device clock */
};

struct mk_hostqueue;

enum mk_status mk_hostqueue_create(const struct mk_hostqueue_params *p, struct mk_hostqueue **out,
                                   struct mk_error *err);

/* The mailbox as the host sees it, and its device address (0 without cu). */
struct mk_mailbox *mk_hostqueue_mailbox(struct mk_hostqueue *q);
uint64_t mk_hostqueue_mailbox_device(const struct mk_hostqueue *q);

/* Runs one command (MK_CMD_STEP, or MK_CMD_HANG in tests) through the feeder and waits for its
 * answer. MK_ERR_TIMEOUT when the watchdog fires: the queue is poisoned from then on and every
 * later command fails at once. MK_ERR_CANCELLED when cancelled before it was posted. */
enum mk_status mk_hostqueue_submit(struct mk_hostqueue *q, const struct mk_step_cmd *cmd,
                                   struct mk_hostqueue_result *res, struct mk_error *err);

/* One token of a generation, on the caller's thread, in order: the i-th token (from 0) and the
 * device time of the step that sampled it (from the token before it was written, or from the
 * command's start). Returns true to stop: the device is told to end after its step in flight, and
 * the tokens it wrote after this one are not delivered. */
typedef bool (*mk_hostqueue_token_fn)(void *user, uint32_t i, int32_t token, uint64_t step_ns);

struct mk_hostqueue_gen {
    uint32_t max_steps;  /* >= 1 */
    const int32_t *stop; /* tokens that end the generation after they are delivered */
    uint32_t n_stop;     /* <= MK_GEN_MAX_STOP */
    mk_hostqueue_token_fn on_token;
    void *user;
};

struct mk_hostqueue_gen_result {
    uint32_t n_steps;     /* steps the device ran (tokens it wrote) */
    uint32_t n_delivered; /* tokens given to on_token */
    uint32_t why;         /* enum mk_gen_end */
    uint64_t t_start_ns;  /* device clock: when the command was seen */
    uint64_t t_end_ns;    /* ... and when its last token was written */
};

/* Runs MK_CMD_GENERATE from cmd (token at pos, sampling settings): the device feeds each sampled
 * token to its next step, and the calling thread itself drains the ring, pacing its polls by the
 * recent step time, so no other host thread works meanwhile. Returns once the device posted the
 * end; the watchdog applies to each token. Commands submitted meanwhile wait. */
enum mk_status mk_hostqueue_generate(struct mk_hostqueue *q, const struct mk_step_cmd *cmd,
                                     const struct mk_hostqueue_gen *gen, struct mk_hostqueue_gen_result *res,
                                     struct mk_error *err);

/* Fails every command queued but not yet posted with MK_ERR_CANCELLED (the one on the device
 * runs to its end). Callable from any thread. */
void mk_hostqueue_cancel(struct mk_hostqueue *q);

/* True once a timeout or a device failure made the device side unusable. */
bool mk_hostqueue_poisoned(struct mk_hostqueue *q);

/* Commands posted so far (the device's next step index). */
uint32_t mk_hostqueue_posted(struct mk_hostqueue *q);

/* Posts MK_CMD_STOP after the queued commands (unless poisoned) and joins the feeder; never blocks
 * longer than the command in flight's watchdog. Idempotent. */
void mk_hostqueue_stop(struct mk_hostqueue *q);

/* Stops (if not yet) and frees the mailbox. With cu, the context must still be current. */
void mk_hostqueue_free(struct mk_hostqueue *q);

#ifdef __cplusplus
}
#endif
#endif
