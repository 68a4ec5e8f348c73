/* mk bench's prompt-processing and speculative-decoding tests (tools/bench_chunk.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/mk.h"
#include "tools/bench_chunk.h"

static double mk_bench_chunk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int mk_bench_chunk_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Positions [from, from + n) of toks through chunk steps of up to ub tokens; the steps taken to *steps. */
static enum mk_status mk_bench_pp_feed(struct mk_backend *b, const int32_t *toks, uint32_t from, uint32_t n,
                                       uint32_t ub, int32_t *outs, uint32_t *steps, struct mk_error *err) {
    enum mk_status st = MK_OK;
    *steps = 0;
    for (uint32_t i = 0; i < n && st == MK_OK; i += ub, (*steps)++) {
        uint32_t k = n - i < ub ? n - i : ub;
        struct mk_step_cmd cmd = {
            .cmd = MK_CMD_STEP, .token = toks[from + i], .pos = (int32_t)(from + i), .n_tokens = (uint16_t)k, .n_out = 1
        };
        st = mk_backend_step_chunk(b, &cmd, toks + from + i, outs, err);
    }
    return st;
}

enum mk_status mk_bench_pp_run(struct mk_backend *b, uint32_t vocab, uint32_t n_prompt, uint32_t depth, uint32_t reps,
                               struct mk_bench_pp *out, struct mk_error *err) {
    const uint32_t ub = b->ubatch > 1 && b->vt->step_chunk ? b->ubatch : 1;
    const uint32_t total = depth + n_prompt;
    int32_t *toks = malloc(total * sizeof *toks), *outs = malloc(ub * sizeof *outs);
    double *ms = calloc(reps, sizeof *ms);
    enum mk_status st = MK_OK;
    if (!toks || !outs || !ms) {
        st = mk_error_set(err, MK_ERR_NOMEM, "pp%u: out of memory", n_prompt);
        goto done;
    }
    /* Any tokens will do for timing; spread them over the vocabulary. */
    for (uint32_t i = 0; i < total; i++) toks[i] = (int32_t)((1u + i * 7919u) % vocab);
    for (uint32_t r = 0; r < reps && st == MK_OK; r++) {
        uint32_t steps = 0;
        /* The context up to depth, untimed (like llama-bench -d), then the timed prompt after it. */
        if ((st = b->vt->reset(b, err)) != MK_OK || (st = mk_bench_pp_feed(b, toks, 0, depth, ub, outs, &steps, err)))
            break;
        double t0 = mk_bench_chunk_now_ms();
        st = mk_bench_pp_feed(b, toks, depth, n_prompt, ub, outs, &steps, err);
        ms[r] = mk_bench_chunk_now_ms() - t0;
        out->steps = steps;
    }
    if (st == MK_OK) {
        qsort(ms, reps, sizeof *ms, mk_bench_chunk_cmp);
        out->ttft_ms = ms[(reps - 1) / 2];
        out->ms_per_token_p50 = out->ttft_ms / n_prompt;
        out->ms_per_token_max = ms[reps - 1] / n_prompt;
    }
done:
    free(toks);
    free(outs);
    free(ms);
    return st;
}

/* The repetitive task: the model is asked to write a given passage again with small edits, so
 * most of what it writes is in its context already. */
static const char mk_bench_passage[] =
    "Once upon a time, there was a little girl named Lily. She lived in a small house near the woods with her mom, "
    "her dad and a big brown dog called Max. Every morning Lily and Max went for a walk to the old oak tree. They "
    "liked to sit under the tree and look at the birds. One day Lily saw a small bird on the ground. The bird was "
    "sad because it could not fly. Lily picked up the bird very gently and took it home. Her mom gave her a little "
    "box and some soft grass. Lily put the bird in the box and gave it water and seeds. Max sat next to the box and "
    "watched the bird all day. After three days the bird was happy again. It jumped out of the box and sang a "
    "pretty song. Lily took the bird back to the old oak tree. The bird flew up into the sky and then came back to "
    "sit on her hand. Lily smiled and said, \"You can come and see me every day.\" From that day on, the bird came "
    "to the tree every morning, and Lily, Max and the bird were the best of friends.";

struct mk_bench_spec_sink {
    int32_t *ids;
    uint32_t n, cap;
};

static int mk_bench_spec_token(void *user, int32_t id, const char *piece, size_t len) {
    struct mk_bench_spec_sink *s = user;
    if (s->n < s->cap) s->ids[s->n++] = id;
    return 0;
}

/* One greedy run: the generated tokens to ids (p->n of them at most), the timings to *t. */
static enum mk_status mk_bench_spec_once(const struct mk_lm *lm, const struct mk_bench_spec_params *p, int spec,
                                         const char *prompt, int32_t *ids, uint32_t *n_ids, struct mk_timings *t,
                                         struct mk_error *err) {
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = p->kind;
    sp.n_threads = p->threads;
    sp.n_ctx = p->ctx;
    sp.ubatch = p->ubatch;
    sp.spec = spec;
    sp.n_draft = p->n_draft;
    sp.kv_type = p->kv_type;
    sp.act_f32 = p->act_f32;
    sp.gpu = p->gpu;
    sp.sampling.temperature = 0.0f;
    struct mk_session *s = NULL;
    enum mk_status st = mk_session_create(lm, &sp, &s, err);
    if (st != MK_OK) return st;
    struct mk_bench_spec_sink sink = { ids, 0, p->n };
    if ((st = mk_session_feed_text(s, prompt)) == MK_OK)
        st = mk_session_generate(s, (int32_t)p->n, mk_bench_spec_token, &sink, NULL, NULL);
    if (st != MK_OK && err) *err = *mk_session_error(s);
    *t = mk_session_timings(s);
    *n_ids = sink.n;
    mk_session_free(s);
    return st;
}

enum mk_status mk_bench_spec_run(const struct mk_bench_spec_params *p, struct mk_bench_spec res[2],
                                 struct mk_error *err) {
    struct mk_lm *lm = NULL;
    enum mk_status st = mk_lm_load(p->path, &lm, err);
    if (st != MK_OK) return st;
    size_t cap = sizeof mk_bench_passage + 256;
    char *rewrite = malloc(cap);
    int32_t *a = malloc(p->n * sizeof *a), *b = malloc(p->n * sizeof *b);
    if (!rewrite || !a || !b) {
        st = mk_error_set(err, MK_ERR_NOMEM, "spec bench: out of memory");
        goto done;
    }
    snprintf(rewrite, cap,
             "%s\n\nThe same story again, but the girl is called Mia:\n\nOnce upon a time, there was a little girl "
             "named Mia.",
             mk_bench_passage);
    const char *prompts[2] = { rewrite, "Once upon a time" };
    static const char *const tasks[2] = { "rewrite", "story" };
    for (int k = 0; k < 2 && st == MK_OK; k++) {
        struct mk_timings off, on;
        uint32_t na = 0, nb = 0;
        st = mk_bench_spec_once(lm, p, MK_SPEC_OFF, prompts[k], a, &na, &off, err);
        if (st == MK_OK) st = mk_bench_spec_once(lm, p, MK_SPEC_LOOKUP, prompts[k], b, &nb, &on, err);
        if (st != MK_OK) break;
        res[k] = (struct mk_bench_spec){
            .task = tasks[k],
            .tok_s_off = off.eval_ms > 0 ? 1e3 * off.n_eval / off.eval_ms : 0,
            .tok_s_on = on.eval_ms > 0 ? 1e3 * on.n_eval / on.eval_ms : 0,
            .accept = on.n_drafted ? (double)on.n_accepted / on.n_drafted : 0,
            .steps_on = on.n_spec_steps,
            .n_gen = na,
            .same = na == nb && !memcmp(a, b, na * sizeof *a),
        };
    }
done:
    free(rewrite);
    free(a);
    free(b);
    mk_lm_free(lm);
    return st;
}
