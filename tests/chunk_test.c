/* Several tokens per step: chunk programs against one-token steps and the reference, chunked prompts and prompt-lookup speculation against plain greedy decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gen.h"
#include "core/model.h"
#include "graph/cpu_exec.h"
#include "graph/lookup.h"
#include "graph/program.h"
#include "megakernel/chunk.h"
#include "runtime/backend.h"
#include "runtime/mk.h"
#include "tests/test_util.h"

#define N_CTX 96

/* A token sequence with repeats, so that prompt lookup finds matches: (n) ids below vocab. */
static void make_tokens(int32_t *ids, uint32_t n, uint32_t vocab) {
    for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)(1u + (i % 11u) * 37u % (vocab - 1u));
}

static struct mk_program *compile(const struct mk_model *m, uint32_t workers, enum mk_schedule sched, uint32_t ubatch) {
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = workers;
    cp.n_ctx = N_CTX;
    cp.schedule = sched;
    cp.attn_block = 16; /* several attention blocks inside and across chunks */
    cp.ubatch = ubatch;
    struct mk_program *p = NULL;
    struct mk_error err = { 0 };
    enum mk_status st = mk_program_compile(m, &cp, &p, &err);
    MK_CHECK_MSG(st == MK_OK, "compile ubatch %u for %u workers: %s", ubatch, workers, err.msg);
    return st == MK_OK ? p : NULL;
}

/* Runs ids through the chunk program in chunks of the sizes in `sizes` (cycled), every row an
 * output row, and through the one-token program and the reference token by token: every row's
 * logits must match, and the tokens too. */
static void check_chunk_program(const char *name, const struct mk_model *m, uint32_t workers, enum mk_schedule sched) {
    const uint32_t U = 8, n = 70, vocab = m->cfg.n_vocab;
    static const uint32_t sizes[] = { 5, 8, 1, 3, 8, 7, 2 };
    struct mk_error err = { 0 };
    struct mk_program *one = compile(m, workers, sched, 1), *chunk = compile(m, workers, sched, U);
    struct mk_cpu_exec *e1 = NULL, *ec = NULL;
    struct mk_backend *ref = NULL;
    struct mk_backend_params bp = { .kind = MK_BACKEND_REF, .n_ctx = N_CTX, .kv_type = MK_KV_F16 };
    int32_t ids[70], outs[8];
    float *want = malloc((size_t)n * vocab * sizeof *want), *ref_logits = malloc(vocab * sizeof *ref_logits);
    int32_t want_tok[70];
    if (!one || !chunk || !want || !ref_logits) goto done;
    MK_CHECK(chunk->ubatch == U && one->ubatch == 1);
    MK_CHECK(chunk->tokens_off != MK_NO_BUF && one->tokens_off == MK_NO_BUF);
    if (mk_cpu_exec_create(one, workers, &e1, &err) != MK_OK ||
        mk_cpu_exec_create(chunk, workers, &ec, &err) != MK_OK || mk_backend_create_ref(m, &bp, &ref, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s: executors: %s", name, err.msg);
        goto done;
    }
    make_tokens(ids, n, vocab);
    double worst_ref = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct mk_step_cmd c = mk_test_step_cmd(ids[i], (int32_t)i);
        MK_CHECK(mk_cpu_exec_step(e1, &c, &want_tok[i], &err) == MK_OK);
        memcpy(want + (size_t)i * vocab, mk_cpu_exec_logits(e1), vocab * sizeof *want);
        int32_t rt;
        MK_CHECK(ref->vt->step(ref, &c, &rt, &err) == MK_OK && ref->vt->logits(ref, ref_logits, &err) == MK_OK);
        double e = mk_test_rel_err(want + (size_t)i * vocab, ref_logits, vocab);
        if (e > worst_ref) worst_ref = e;
    }
    /* The f16 cache: sums that differ in their last bits now and then round a k or v element to the
     * neighbouring half (program_test says more), so the reference is close, the executors exact. */
    MK_CHECK_MSG(worst_ref < 1e-3, "%s: one-token program differs from the reference by %.3g", name, worst_ref);
    double worst = 0;
    uint32_t steps = 0;
    for (uint32_t i = 0, k = 0; i < n; i += k, steps++) {
        k = sizes[steps % (sizeof sizes / sizeof sizes[0])];
        if (k > n - i) k = n - i;
        struct mk_step_cmd c = mk_test_step_cmd(ids[i], (int32_t)i);
        c.n_tokens = (uint16_t)k;
        c.n_out = (uint16_t)k;
        enum mk_status st = mk_cpu_exec_step_chunk(ec, &c, ids + i, outs, &err);
        MK_CHECK_MSG(st == MK_OK, "%s: chunk step at %u: %s", name, i, err.msg);
        if (st != MK_OK) break;
        for (uint32_t j = 0; j < k; j++) {
            double e = mk_test_rel_err(mk_cpu_exec_logits_row(ec, j), want + (size_t)(i + j) * vocab, vocab);
            if (e > worst) worst = e;
            MK_CHECK_MSG(outs[j] == want_tok[i + j], "%s: row %u of the step at %u: token %d, one-token step %d", name,
                         j, i, outs[j], want_tok[i + j]);
        }
        MK_CHECK(mk_cpu_exec_logits_row(ec, k) == NULL);
    }
    MK_CHECK_MSG(worst < 1e-6, "%s: chunk logits differ from one-token steps by %.3g", name, worst);
    /* A prompt chunk: only the last row gets logits, and they match too. */
    struct mk_step_cmd c = mk_test_step_cmd(ids[0], 0);
    c.n_tokens = 6;
    c.n_out = 1;
    MK_CHECK(mk_cpu_exec_step_chunk(ec, &c, ids, outs, &err) == MK_OK);
    MK_CHECK(outs[0] == want_tok[5] && mk_test_rel_err(mk_cpu_exec_logits(ec), want + 5ull * vocab, vocab) < 1e-6);
    /* Bad steps are refused, not run. */
    c.n_tokens = (uint16_t)(U + 1);
    MK_CHECK(mk_cpu_exec_step_chunk(ec, &c, ids, outs, &err) == MK_ERR_INVALID_ARG);
    c.n_tokens = 4;
    c.n_out = 5;
    MK_CHECK(mk_cpu_exec_step_chunk(ec, &c, ids, outs, &err) == MK_ERR_INVALID_ARG);
    c.n_out = 1;
    c.pos = N_CTX - 3;
    MK_CHECK(mk_cpu_exec_step_chunk(ec, &c, ids, outs, &err) == MK_ERR_CONTEXT_FULL);
    printf("%-28s %u workers %-7s: %u rows in %u chunk steps, max logit error vs one-token steps %.2e, one-token vs "
           "reference %.2e\n",
           name, workers, sched == MK_SCHED_STATIC ? "static" : "dynamic", n, steps, worst, worst_ref);
done:
    free(want);
    free(ref_logits);
    if (ref) ref->vt->free(ref);
    mk_cpu_exec_free(ec);
    mk_cpu_exec_free(e1);
    mk_program_free(chunk);
    mk_program_free(one);
}

/* Max relative difference of the logits of the first n rows of a chunk of n tokens run from
 * position 0 by chunk programs compiled with act_bf16_min = min and with 0 (fp32 inputs); -1 on
 * failure. Their last row's token from the rounded run in *tok, the fp32 run's in *tok_f32. */
static double act_diff(const struct mk_model *m, uint32_t n, uint32_t min, int32_t *tok, int32_t *tok_f32) {
    const uint32_t vocab = m->cfg.n_vocab;
    struct mk_program *p[2] = { compile(m, 2, MK_SCHED_DYNAMIC, MK_ACT_BF16_MIN_DEFAULT),
                                compile(m, 2, MK_SCHED_DYNAMIC, MK_ACT_BF16_MIN_DEFAULT) };
    struct mk_cpu_exec *e[2] = { NULL, NULL };
    int32_t ids[MK_ACT_BF16_MIN_DEFAULT], outs[2][MK_ACT_BF16_MIN_DEFAULT];
    float *lg = malloc((size_t)n * vocab * sizeof *lg);
    double worst = -1.0;
    struct mk_error err = { 0 };
    if (!p[0] || !p[1] || !lg || n > MK_ACT_BF16_MIN_DEFAULT) goto done;
    p[0]->act_bf16_min = min;
    p[1]->act_bf16_min = 0;
    make_tokens(ids, n, vocab);
    worst = 0.0;
    for (int k = 0; k < 2; k++) {
        struct mk_step_cmd c = mk_test_step_cmd(ids[0], 0);
        c.n_tokens = (uint16_t)n;
        c.n_out = (uint16_t)n;
        if (mk_cpu_exec_create(p[k], 2, &e[k], &err) != MK_OK ||
            mk_cpu_exec_step_chunk(e[k], &c, ids, outs[k], &err) != MK_OK) {
            MK_CHECK_MSG(0, "act_bf16_min %u: %s", k ? 0u : min, err.msg);
            worst = -1.0;
            goto done;
        }
        for (uint32_t j = 0; j < n; j++) {
            if (k == 0) {
                memcpy(lg + (size_t)j * vocab, mk_cpu_exec_logits_row(e[0], j), vocab * sizeof *lg);
            } else {
                double d = mk_test_rel_err(lg + (size_t)j * vocab, mk_cpu_exec_logits_row(e[1], j), vocab);
                if (d > worst) worst = d;
            }
        }
    }
    *tok = outs[0][n - 1];
    *tok_f32 = outs[1][n - 1];
done:
    free(lg);
    for (int k = 0; k < 2; k++) {
        mk_cpu_exec_free(e[k]);
        mk_program_free(p[k]);
    }
    return worst;
}

/* The chunk programs' act_bf16_min: products over bf16 weights of that many token rows or more
 * take their inputs rounded to bf16 (as the GPU's _wide_xb products), fewer rows and other
 * weight types keep fp32 inputs. The GPU's side is cuda_test's check_chunks_act. */
static void check_act_bf16(const char *dir) {
    static const char *const dtypes[] = { "bf16", "f32" };
    for (int i = 0; i < 2; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/act-%s.gguf", dir, dtypes[i]);
        struct mk_gen_params gp = mk_gen_default_params();
        gp.preset = "tiny";
        gp.dtype = dtypes[i];
        struct mk_error err = { 0 };
        struct mk_model *m = NULL;
        if (mk_gen_write(path, &gp, &err) != MK_OK || mk_model_load(path, &m, &err) != MK_OK) {
            MK_CHECK_MSG(0, "act %s: %s", dtypes[i], err.msg);
            continue;
        }
        struct mk_program *d = compile(m, 1, MK_SCHED_DYNAMIC, 8), *one = compile(m, 1, MK_SCHED_DYNAMIC, 1);
        MK_CHECK(d && d->act_bf16_min == MK_ACT_BF16_MIN_DEFAULT && one && one->act_bf16_min == 0);
        mk_program_free(d);
        mk_program_free(one);
        const uint32_t n = MK_ACT_BF16_MIN_DEFAULT;
        int32_t tok, tok_f32;
        const double at = act_diff(m, n, n, &tok, &tok_f32);
        const double below = act_diff(m, n, n + 1u, &tok, &tok_f32);
        const double fewer = act_diff(m, n - 1u, n, &tok, &tok_f32);
        if (i == 0) {
            /* Rounding 8 of fp32's 24 bits: logits move, by far less than their spread. */
            MK_CHECK_MSG(at > 1e-5 && at < 5e-2, "bf16, %u rows: rounded inputs moved the logits by %.3g", n, at);
            printf("%-28s %u rows: logits of bf16 inputs differ from fp32 inputs' by %.2e; the last tokens %d, %d\n",
                   "tiny-bf16 act_bf16_min", n, at, tok, tok_f32);
        } else {
            MK_CHECK_MSG(at == 0.0, "f32 weights, %u rows: inputs were rounded (%.3g)", n, at);
        }
        MK_CHECK_MSG(below == 0.0 && fewer == 0.0, "%s: rows under act_bf16_min were rounded (%.3g, %.3g)", dtypes[i],
                     below, fewer);
        mk_model_free(m);
    }
}

static void expect_invalid(const struct mk_program *p, const char *what, const char *needle) {
    struct mk_error err = { 0 };
    enum mk_status st = mk_program_validate(p, &err);
    MK_CHECK_MSG(st != MK_OK, "validator accepted a chunk program with %s", what);
    MK_CHECK_MSG(st == MK_OK || strstr(err.msg, needle), "message for %s lacks '%s': %s", what, needle, err.msg);
}

static void check_validator(const struct mk_model *m) {
    struct mk_program *p = compile(m, 2, MK_SCHED_DYNAMIC, 4);
    if (!p) return;
    struct mk_error err = { 0 };
    MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "pristine chunk program rejected: %s", err.msg);
    uint32_t embed = 0, attn = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        if (p->instrs[i].op == MK_OP_EMBED) embed = i;
        if (p->instrs[i].op == MK_OP_ATTN_CHUNK && !attn) attn = i;
        MK_CHECK(p->instrs[i].op != MK_OP_ATTN_PARTIAL && p->instrs[i].op != MK_OP_ATTN_OUTPUT);
    }
    MK_CHECK(attn > 0);
    struct mk_instr saved = p->instrs[embed];
    p->instrs[embed].buf[1] = MK_NO_BUF;
    expect_invalid(p, "no token array", "lacks a token array");
    p->instrs[embed].buf[1] = saved.buf[1] + 16;
    expect_invalid(p, "a moved token array", "token array is at");
    p->instrs[embed] = saved;
    saved = p->instrs[attn];
    p->instrs[attn].op = MK_OP_ATTN_PARTIAL;
    expect_invalid(p, "a one-token attention op", "one-token op");
    p->instrs[attn] = saved;
    p->instrs[attn].args.attn.n_blocks = 0;
    expect_invalid(p, "attention without splits", "chunk attention shape");
    p->instrs[attn] = saved;
    /* Every activation has ubatch rows: a smaller arena cannot hold them. */
    p->arena_floats /= 2;
    expect_invalid(p, "a one-token arena", "past the arena");
    mk_program_free(p);
}

/* mk_chunk_mv's column splits: the host recounts them from the span so that none is empty, and the
 * kernel recomputes the span from that count; the two must agree, and the splits cover the columns. */
static void check_mv_span(void) {
    uint32_t bad = 0;
    for (uint32_t k = 1; k <= 20000; k += k < 600u ? 1u : 37u)
        for (uint32_t s = 1; s <= 64; s++) {
            const uint32_t span = mk_chunk_mv_span(k, s), n = (k + span - 1u) / span;
            if (span % MK_CHUNK_MV_KSTEP || n > s || mk_chunk_mv_span(k, n) != span || (n - 1u) * span >= k) {
                if (!bad++) fprintf(stderr, "mv span: %u columns in %u splits: span %u, %u splits\n", k, s, span, n);
            }
        }
    MK_CHECK(bad == 0);
}

/* mk_chunk_mv_kq_plan: every plan covers the columns with whole splits, none empty, x fits, the
 * partials fit (where no count's do, the host refuses the plan and takes the tile kernels), no
 * split has more blocks than tiles or than the GPU holds, and no other split count leaves the
 * busiest block fewer columns (a tile counted as 64 more). */
static void check_mv_plan(void) {
    const uint32_t Ks[] = { 256, 2048, 3072, 4096, 5120, 8192, 11008, 14336 }, ms[] = { 1, 2, 4, 8, 9, 16 };
    const uint32_t tiles_of[] = { 1, 2, 7, 24, 32, 48, 112, 224, 1002 };
    uint32_t bad = 0, checked = 0;
    for (size_t a = 0; a < sizeof Ks / sizeof Ks[0]; a++)
        for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++)
            for (size_t c = 0; c < sizeof tiles_of / sizeof tiles_of[0]; c++)
                for (int v = 0; v < 4; v++) {
                    const bool silu = v & 1, kq8 = v >> 1;
                    const uint32_t K = Ks[a], m = ms[b], tiles = tiles_of[c], all = tiles * 128u;
                    if (kq8 && m > MK_CHUNK_MV8_TOKENS) continue; /* mk_chunk_mv_kq takes those */
                    const uint64_t part = 4ull * 132u * MK_CHUNK_MM_TOKENS * 2u * MK_CHUNK_MM_ROWS;
                    uint32_t s, bx;
                    mk_chunk_mv_kq_plan(m, K, tiles, 2048, 113u * 1024u, 132, 264, part, silu, all, 0, kq8, &s, &bx);
                    const uint32_t span = mk_chunk_mv_span(K, s);
                    const bool fits = (!silu && s == 1) || (uint64_t)s * m * all <= part;
                    bool ok =
                        span <= 2048 && (K + span - 1u) / span == s && (s - 1u) * span < K && bx >= 1 && bx <= tiles;
                    const uint32_t slots = mk_chunk_mv_kq_smem(m, span, kq8) <= 113u * 1024u ? 264u : 132u;
                    ok = ok && (!fits || (uint64_t)s * bx <= (slots > s ? slots : s));
                    const uint32_t cols = kq8 ? mk_chunk_mv8_cols(span) : span;
                    const uint64_t cost = (uint64_t)((tiles + bx - 1u) / bx) * (cols + 64u);
                    for (uint32_t t = (K + 2047u) / 2048u; ok && t <= 32u && t <= (K + 127u) / 128u; t++) {
                        const uint32_t sp = mk_chunk_mv_span(K, t);
                        if ((K + sp - 1u) / sp != t || ((silu || t > 1) && (uint64_t)t * m * all > part)) continue;
                        if (!fits) ok = false; /* a count whose partials fit was passed over */
                        const uint32_t sl = mk_chunk_mv_kq_smem(m, sp, kq8) <= 113u * 1024u ? 264u : 132u;
                        const uint32_t per = sl / t > 1u ? sl / t : 1u, b2 = per < tiles ? per : tiles;
                        ok = (uint64_t)((tiles + b2 - 1u) / b2) * ((kq8 ? mk_chunk_mv8_cols(sp) : sp) + 64u) >= cost;
                    }
                    /* A cap lowers the blocks and nothing else. */
                    uint32_t s1, b1;
                    mk_chunk_mv_kq_plan(m, K, tiles, 2048, 113u * 1024u, 132, 264, part, silu, all, 1, kq8, &s1, &b1);
                    ok = ok && s1 == s && b1 == 1;
                    /* kq8's x is smaller: it fits wherever the bf16 staging's does. */
                    ok = ok && (!kq8 || MK_CHUNK_MV8_SMEM(m, span) <= MK_CHUNK_MV_SMEM(m, span));
                    checked++;
                    if (!ok && !bad++)
                        fprintf(stderr, "mv plan: K %u m %u tiles %u silu %d: %u splits of %u blocks\n", K, m, tiles,
                                silu, s, bx);
                }
    MK_CHECK(checked == 8 * 9 * 2 * (6 + 4) && bad == 0); /* kq8 for the 4 counts up to 8 rows */
    /* llama-8b's FFN gate/up at 4 tokens: 8 splits of 512 columns, 33 blocks each (BENCHMARKS.md). */
    uint32_t s, bx;
    mk_chunk_mv_kq_plan(4, 4096, 224, 2048, 113u * 1024u, 132, 264,
                        4ull * 132u * MK_CHUNK_MM_TOKENS * 2u * MK_CHUNK_MM_ROWS, true, 2u * 14336u, 0, false, &s, &bx);
    MK_CHECK(s == 8 && bx == 33);
}

/* mk_chunk_xb_plan against the H200's per-kernel traces (BENCHMARKS.md, thirty-second session:
 * each tile forced with MK_CUDA_XB_ROWS): for every product of llama-8b and llama-1b over 512 and
 * 128 tokens, the plan takes the tile that measured fastest of 256, 192 and 128 rows, with the
 * splits it ran with there. Forced rows are taken whatever they cost; without the narrow tiles the
 * plan is 256 rows. */
static void check_xb_plan(void) {
    const uint64_t part = 4ull * 132u * MK_CHUNK_MM_TOKENS * 2u * MK_CHUNK_MM_ROWS;
    static const struct {
        uint32_t m, rows, silu, K, bn, splits;
    } fastest[] = {
        /* llama-8b: q/k/v, output, down, gate/up */
        { 512, 6144, 0, 4096, 192, 1 },
        { 512, 4096, 0, 4096, 256, 2 },
        { 512, 4096, 0, 14336, 256, 2 },
        { 512, 14336, 1, 4096, 256, 1 },
        { 128, 6144, 0, 4096, 128, 2 },
        { 128, 4096, 0, 4096, 128, 4 },
        { 128, 4096, 0, 14336, 128, 4 },
        { 128, 14336, 1, 4096, 256, 1 },
        /* llama-1b */
        { 512, 3072, 0, 2048, 192, 2 },
        { 512, 2048, 0, 2048, 128, 2 },
        { 512, 2048, 0, 8192, 128, 2 },
        { 512, 8192, 1, 2048, 256, 1 },
        { 128, 3072, 0, 2048, 128, 4 },
        { 128, 2048, 0, 2048, 128, 5 },
        { 128, 2048, 0, 8192, 128, 8 },
        { 128, 8192, 1, 2048, 128, 1 },
    };
    for (size_t i = 0; i < sizeof fastest / sizeof fastest[0]; i++) {
        uint32_t s = 0;
        const uint32_t gx = fastest[i].m / MK_CHUNK_MM_XB_TOKENS;
        const uint32_t bn =
            mk_chunk_xb_plan(132, true, 0, part, gx, fastest[i].rows, fastest[i].silu, fastest[i].K, fastest[i].m, &s);
        if (bn != fastest[i].bn || s != fastest[i].splits)
            fprintf(stderr, "xb plan: %u tokens by %u rows of %u%s: %u rows x %u splits, measured fastest %u x %u\n",
                    fastest[i].m, fastest[i].rows, fastest[i].K, fastest[i].silu ? " (silu)" : "", bn, s, fastest[i].bn,
                    fastest[i].splits);
        MK_CHECK(bn == fastest[i].bn && s == fastest[i].splits);
        /* whatever the plan, its partials fit */
        MK_CHECK(s == 1u || (uint64_t)s * fastest[i].m * (fastest[i].silu ? 2u : 1u) * fastest[i].rows <= part);
    }
    uint32_t s = 0;
    /* forced: 128-row SILU tiles past one wave (the run91 trace's 4 x 224 blocks) */
    MK_CHECK(mk_chunk_xb_plan(132, true, 128, part, 4, 14336, true, 4096, 512, &s) == 128 && s == 1);
    MK_CHECK(mk_chunk_xb_plan(132, true, 192, part, 4, 4096, false, 14336, 512, &s) == 192);
    MK_CHECK(mk_chunk_xb_plan(132, false, 0, part, 1, 3072, false, 2048, 128, &s) == 256 && s > 1);
}

static void check_lookup(void) {
    const int32_t ctx[] = { 5, 6, 7, 8, 9, 1, 2, 5, 6, 7 };
    int32_t d[8];
    /* "5 6 7" occurred before, followed by 8 9 1 2 5 6 7. */
    uint32_t g = 9, k = mk_lookup_draft(ctx, 10, 3, d, &g);
    MK_CHECK(k == 3 && d[0] == 8 && d[1] == 9 && d[2] == 1 && g == 3);
    k = mk_lookup_draft(ctx, 10, 8, d, NULL);
    MK_CHECK(k == 8 && d[6] == 7 && d[7] == 8); /* past the context: the match goes on with 8 */
    /* A loop of period 2 drafts as far as asked, not the 2 tokens after the latest match. */
    const int32_t loop[] = { 3, 1, 2, 1, 2, 1, 2 };
    k = mk_lookup_draft(loop, 7, 5, d, &g);
    MK_CHECK(k == 5 && d[0] == 1 && d[1] == 2 && d[2] == 1 && d[3] == 2 && d[4] == 1 && g == 4);
    /* No repeated 2-gram at the end: no draft. */
    const int32_t fresh[] = { 1, 2, 3, 4, 2, 5 };
    MK_CHECK(mk_lookup_draft(fresh, 6, 4, d, &g) == 0 && g == 0);
    /* The latest occurrence wins. */
    const int32_t twice[] = { 1, 2, 3, 1, 2, 4, 1, 2 };
    MK_CHECK(mk_lookup_draft(twice, 8, 1, d, &g) == 1 && d[0] == 4 && g == 2);
    MK_CHECK(mk_lookup_draft(twice, 8, 0, d, NULL) == 0 && mk_lookup_draft(twice, 1, 4, d, NULL) == 0);

    /* Draft length: weight-bound steps (small beta) verify long drafts even at modest acceptance;
     * arithmetic-bound ones (beta near 1) only short drafts at high acceptance, none at low. */
    MK_CHECK(mk_lookup_choose(0.9, 0.0, 0.05, 8) == 8);
    MK_CHECK(mk_lookup_choose(0.5, 0.0, 0.05, 8) >= 2);
    MK_CHECK(mk_lookup_choose(0.2, 0.0, 1.0, 8) == 0);
    uint32_t c = mk_lookup_choose(0.9, 0.0, 0.7, 8);
    MK_CHECK(c >= 1 && c <= 4);
    MK_CHECK(mk_lookup_choose(0.99, 0.0, 0.05, 3) == 3 && mk_lookup_choose(0.9, 0.0, 0.05, 0) == 0);
    /* A fixed cost per verification step asks for longer drafts, not shorter ones; at 55 %
     * acceptance a step costing half a plain one more, plus 3 % a token, still pays. */
    MK_CHECK(mk_lookup_choose(0.55, 0.5, 0.03, 8) >= 3);
    MK_CHECK(mk_lookup_choose(0.55, 0.0, 0.5, 8) <= 1);
    MK_CHECK(mk_lookup_choose(0.3, 0.5, 0.03, 8) == 0);
    /* A session starts verifying drafts of every match length; a few misses of 2-token matches
     * stop theirs and not the others, and a run of hits brings them back: each length learns
     * apart. */
    struct mk_lookup_stats st = mk_lookup_stats_init();
    for (uint32_t n = 2; n <= 4; n++) MK_CHECK(mk_lookup_choose(st.accept[n], st.c0, st.beta, 8) >= 1);
    for (int i = 0; i < 3; i++) mk_lookup_stats_token(&st, 2, 0);
    MK_CHECK(mk_lookup_choose(st.accept[2], st.c0, st.beta, 8) == 0);
    MK_CHECK(mk_lookup_choose(st.accept[4], st.c0, st.beta, 8) >= 1);
    for (int i = 0; i < 8; i++) mk_lookup_stats_token(&st, 2, 1);
    MK_CHECK(mk_lookup_choose(st.accept[2], st.c0, st.beta, 8) >= 2);
    MK_CHECK(st.accept[4] == mk_lookup_stats_init().accept[4] && st.accept[2] > st.accept[4]);
    mk_lookup_stats_token(&st, 0, 1); /* no match, no length: ignored */
    mk_lookup_stats_token(&st, 9, 1);
    /* The estimates move toward what they see. */
    for (uint32_t n = 2; n <= 4; n++)
        for (int i = 0; i < 50; i++) mk_lookup_stats_token(&st, n, 0);
    for (uint32_t n = 2; n <= 4; n++) MK_CHECK(st.accept[n] < 0.01);
    mk_lookup_stats_verify(&st, 4, 2.0); /* no plain step timed yet: no cost estimate */
    MK_CHECK(st.beta == mk_lookup_stats_init().beta);
    for (int i = 0; i < 20; i++) mk_lookup_stats_plain(&st, 1.0);
    /* Steps of one draft length: their cost is met there, the slope stays near the start's. */
    struct mk_lookup_stats one = st;
    for (int i = 0; i < 30; i++) mk_lookup_stats_verify(&one, 4, 1.2);
    MK_CHECK(fabs(one.c0 + 4.0 * one.beta - 0.2) < 0.01);
    MK_CHECK(one.beta < 0.2);
    /* Two lengths: the line through them, fixed cost and slope apart (1.5 at k = 1, 1.6 at 8). */
    for (int i = 0; i < 30; i++) {
        mk_lookup_stats_verify(&st, 1, 1.5);
        mk_lookup_stats_verify(&st, 8, 1.6);
    }
    MK_CHECK(st.c0 > 0.4 && st.c0 < 0.55 && st.beta < 0.03);
    MK_CHECK(mk_lookup_choose(0.6, st.c0, st.beta, 8) >= 3);
}

struct run {
    int32_t ids[256];
    uint32_t n;
    float logits[32768];
    struct mk_timings t;
};

static int collect(void *user, int32_t id, const char *piece, size_t len) {
    struct run *r = user;
    if (r->n < 256) r->ids[r->n++] = id;
    return 0;
}

/* Greedy: the prompt, then n_gen tokens (-1: until the context is full), then the logits. */
static void session_run(const struct mk_lm *lm, enum mk_backend_kind kind, uint32_t ubatch, int spec, uint32_t n_ctx,
                        const int32_t *prompt, uint32_t n_prompt, int32_t n_gen, struct run *r) {
    struct mk_session_params sp = mk_session_default_params();
    sp.backend = kind;
    sp.n_ctx = n_ctx;
    sp.n_threads = 2;
    sp.ubatch = ubatch;
    sp.spec = spec;
    sp.n_draft = 5;
    sp.sampling.temperature = 0.0f;
    struct mk_session *s = NULL;
    struct mk_error err = { 0 };
    memset(r, 0, sizeof *r);
    if (mk_session_create(lm, &sp, &s, &err) != MK_OK) {
        MK_CHECK_MSG(0, "session: %s", err.msg);
        return;
    }
    MK_CHECK_MSG(mk_session_feed(s, prompt, n_prompt) == MK_OK, "feed: %s", mk_session_last_error(s));
    MK_CHECK_MSG(mk_session_generate(s, n_gen, collect, r, NULL, NULL) == MK_OK, "generate: %s",
                 mk_session_last_error(s));
    uint32_t vocab = mk_lm_get_info(lm).n_vocab;
    MK_CHECK(vocab <= 32768 && mk_session_logits(s, r->logits, 32768) == MK_OK);
    r->t = mk_session_timings(s);
    mk_session_free(s);
}

static uint32_t g_accepted; /* drafted tokens accepted over every model */

/* Chunked prompts and speculation against token-by-token greedy decoding, through the public API. */
static void check_api(const char *name, const char *path) {
    struct mk_lm *lm = NULL;
    struct mk_error err = { 0 };
    if (mk_lm_load(path, &lm, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s: %s", path, err.msg);
        return;
    }
    uint32_t vocab = mk_lm_get_info(lm).n_vocab;
    int32_t prompt[40];
    make_tokens(prompt, 40, vocab);
    static struct run base, ref, chunk, spec, spec_full, base_full;
    session_run(lm, MK_BACKEND_CPU, 1, MK_SPEC_OFF, N_CTX, prompt, 40, 40, &base);
    session_run(lm, MK_BACKEND_REF, 8, MK_SPEC_LOOKUP, N_CTX, prompt, 40, 40, &ref);
    session_run(lm, MK_BACKEND_CPU, 8, MK_SPEC_OFF, N_CTX, prompt, 40, 40, &chunk);
    session_run(lm, MK_BACKEND_CPU, 8, MK_SPEC_LOOKUP, N_CTX, prompt, 40, 40, &spec);
    const struct run *all[] = { &ref, &chunk, &spec };
    static const char *const what[] = { "ref", "chunked prompt", "speculation" };
    MK_CHECK(base.n == 40 && base.t.n_prompt_steps == 40 && chunk.t.n_prompt_steps == 5);
    MK_CHECK_MSG(ref.t.n_spec_steps == 0, "%s: speculation ran on the ref backend, which has no chunk steps", name);
    MK_CHECK_MSG(spec.t.n_spec_steps > 0, "%s: prompt lookup proposed nothing on a repetitive prompt", name);
    for (int k = 0; k < 3; k++) {
        MK_CHECK_MSG(all[k]->n == base.n && !memcmp(all[k]->ids, base.ids, base.n * sizeof base.ids[0]),
                     "%s: %s output differs from token-by-token greedy decoding", name, what[k]);
        double e = mk_test_rel_err(all[k]->logits, base.logits, vocab);
        MK_CHECK_MSG(e < (k == 0 ? 1e-3 : 1e-5), "%s: %s: final logits differ by %.3g", name, what[k], e);
    }
    /* To a full context: drafts are cut at its end. */
    session_run(lm, MK_BACKEND_CPU, 1, MK_SPEC_OFF, 64, prompt, 10, -1, &base_full);
    session_run(lm, MK_BACKEND_CPU, 8, MK_SPEC_LOOKUP, 64, prompt, 10, -1, &spec_full);
    MK_CHECK_MSG(spec_full.n == base_full.n && !memcmp(spec_full.ids, base_full.ids, base_full.n * sizeof(int32_t)),
                 "%s: speculation to a full context differs (%u vs %u tokens)", name, spec_full.n, base_full.n);
    g_accepted += spec.t.n_accepted + spec_full.t.n_accepted;
    printf("%-28s greedy identical: chunked prompt (%u steps for 40 tokens), speculation (%u steps, %u of %u drafted "
           "accepted), to a full context (%u tokens, %u accepted)\n",
           name, chunk.t.n_prompt_steps, spec.t.n_spec_steps, spec.t.n_accepted, spec.t.n_drafted, spec_full.n,
           spec_full.t.n_accepted);
    mk_lm_free(lm);
}

static void check_model(const char *name, const char *path) {
    struct mk_model *m = NULL;
    struct mk_error err = { 0 };
    if (mk_model_load(path, &m, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s: %s", path, err.msg);
        return;
    }
    check_chunk_program(name, m, 1, MK_SCHED_DYNAMIC);
    check_chunk_program(name, m, 3, MK_SCHED_DYNAMIC);
    check_chunk_program(name, m, 2, MK_SCHED_STATIC);
    mk_model_free(m);
    check_api(name, path);
}

int main(void) {
    check_lookup();
    check_mv_span();
    check_mv_plan();
    check_xb_plan();
    char tmp[1024], path[1200];
    if (!mk_test_make_tmp_dir(tmp, sizeof tmp, "chunk_test")) {
        fprintf(stderr, "FAIL: temp dir\n");
        return 1;
    }
    /* Sanitized builds (ASan, TSan: -O0 and checked memory, about 30x slower) take one float and one
     * block format and one real model; the full set runs in the plain build. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    static const char *const dtypes[] = { "f32", "q4_k" };
    const size_t n_files = 1;
#else
    static const char *const dtypes[] = { "f32", "q8_0", "q4_k" };
    const size_t n_files = 2;
#endif
    /* The tiny preset in each type, then heads of 128 (the 8B models' size) in f32. */
    for (size_t i = 0; i <= sizeof dtypes / sizeof dtypes[0]; i++) {
        const bool hd128 = i == sizeof dtypes / sizeof dtypes[0];
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        if (hd128) break;
#endif
        struct mk_gen_params gp = mk_gen_default_params();
        gp.preset = hd128 ? "tiny-hd128" : "tiny";
        gp.dtype = hd128 ? "f32" : dtypes[i];
        char name[64];
        snprintf(name, sizeof name, "%s-%s", gp.preset, gp.dtype);
        snprintf(path, sizeof path, "%s/%s.gguf", tmp, name);
        struct mk_error err = { 0 };
        if (mk_gen_write(path, &gp, &err) != MK_OK) {
            MK_CHECK_MSG(0, "gen %s: %s", name, err.msg);
            continue;
        }
        check_model(name, path);
        if (i == 0) {
            struct mk_model *m = NULL;
            if (mk_model_load(path, &m, &err) == MK_OK) check_validator(m);
            mk_model_free(m);
        }
    }
    check_act_bf16(tmp);
    mk_test_remove_tree(tmp);
    const char *dir = mk_test_models_dir("stories260K-f32.gguf");
    if (!dir) {
        printf("SKIP: models dir not found (set MK_MODELS_DIR): stories260K and llama-2-tiny-random\n");
    } else {
        static const char *const files[] = { "stories260K-f32.gguf", "llama-2-tiny-random.gguf" };
        for (size_t i = 0; i < n_files; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            check_model(files[i], path);
        }
    }
    MK_CHECK_MSG(g_accepted > 0, "no drafted token was ever accepted: the acceptance path went untested");
    return mk_test_finish("chunk_test");
}
