/* mk bench's tests of several tokens per step: prompt processing (pp<n>) and speculative decoding. */
#ifndef MK_TOOLS_BENCH_CHUNK_H
#define MK_TOOLS_BENCH_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/executor.h"
#include "runtime/mk.h"

struct mk_bench_pp {
    double ms_per_token_p50, ms_per_token_max; /* over the repetitions */
    double ttft_ms;                            /* p50 time of the whole prompt: its last step samples the first token */
    uint32_t steps;                            /* steps one prompt took */
};

/* pp<n_prompt>[@d<depth>]: `reps` times, n_prompt tokens after `depth` untimed ones (0: from an
 * empty context) through chunk steps of up to b->ubatch tokens (token by token where the backend
 * has no chunk steps). */
enum mk_status mk_bench_pp_run(struct mk_backend *b, uint32_t vocab, uint32_t n_prompt, uint32_t depth, uint32_t reps,
                               struct mk_bench_pp *out, struct mk_error *err);

/* One speculative-decoding test: greedy generation of n tokens after a prompt, with and without
 * prompt-lookup speculation, through the public API. */
struct mk_bench_spec {
    const char *task;           /* "rewrite" (the shipped repetitive task) or "story" (free text) */
    double tok_s_off, tok_s_on; /* generated tokens per second */
    double accept;              /* accepted / drafted tokens with speculation */
    uint32_t steps_on, n_gen;   /* verification steps, tokens generated */
    bool same;                  /* both runs produced the same tokens */
};

struct mk_bench_spec_params {
    const char *path;
    enum mk_backend_kind kind;
    uint32_t threads, ctx, ubatch, n_draft, n;
    enum mk_kv_type kv_type;
    struct mk_gpu_params gpu; /* the GPU settings (flags and MK_CUDA_* overrides), as the other rows take */
    int act_f32;              /* struct mk_session_params.act_f32 */
};

/* Runs both tasks (res[0] rewrite, res[1] story); MK_OK or the first failure in err. */
enum mk_status mk_bench_spec_run(const struct mk_bench_spec_params *p, struct mk_bench_spec res[2],
                                 struct mk_error *err);

#endif
