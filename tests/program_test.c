/* Differential tests of the compiled program: the CPU executor against the golden stories260K
 * output and the reference forward pass at several worker counts and both schedules, and the
 * validator against mutated programs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/cpu_exec.h"
#include "graph/program.h"
#include "runtime/backend.h"
#include "core/gen.h"
#include "core/model.h"
#include "tests/test_util.h"

/* The 60 golden ids from the models README (the line after "The first 60 generated ids are:"). */
static int read_golden_ids(const char *dir, int32_t *ids, int cap) {
    char path[1100];
    snprintf(path, sizeof path, "%s/README.md", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0, armed = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "The first 60 generated ids are")) {
            armed = 1;
            continue;
        }
        if (armed && line[0] >= '0' && line[0] <= '9') {
            char *s = line, *end;
            while (n < cap) {
                long v = strtol(s, &end, 10);
                if (end == s) break;
                ids[n++] = (int32_t)v;
                s = end;
            }
            break;
        }
    }
    fclose(f);
    return n;
}

/* How a one-token program merges the attention splits. */
enum attn_merge {
    MERGE_IN_SPLITS,  /* the default: each KV head's last ATTN_PARTIAL task */
    MERGE_COMBINE_OP, /* an ATTN_COMBINE op */
    MERGE_FUSED,      /* every ATTN_OUTPUT task */
};
static const char *const merge_names[] = { "in-split", "combine", "fused" };

/* Greedy decode from BOS on the executor, checking ids against golden and logits against ref. */
static void run_executor(const struct mk_model *m, struct mk_backend *ref, const int32_t *golden, int n_golden,
                         uint32_t threads, enum mk_schedule sched, enum attn_merge merge, enum mk_kv_type kv) {
    struct mk_error err = { 0 };
    struct mk_compile_params cp = mk_compile_default_params();
    cp.kv_type = kv;
    cp.n_workers = threads;
    cp.n_ctx = 128;
    cp.schedule = sched;
    cp.attn_block = 16; /* several attention blocks, so the combine step is exercised */
    cp.fuse_attn_output = merge == MERGE_FUSED;
    cp.attn_merge = merge == MERGE_COMBINE_OP ? MK_ATTN_MERGE_OP : MK_ATTN_MERGE_SPLITS;
    struct mk_program *prog = NULL;
    enum mk_status st = mk_program_compile(m, &cp, &prog, &err);
    MK_CHECK_MSG(st == MK_OK, "compile for %u workers: %s", threads, err.msg);
    if (st != MK_OK) return;
    struct mk_cpu_exec *ex = NULL;
    st = mk_cpu_exec_create(prog, threads, &ex, &err);
    MK_CHECK_MSG(st == MK_OK, "executor with %u threads: %s", threads, err.msg);
    if (st != MK_OK) {
        mk_program_free(prog);
        return;
    }
    float *ref_logits = malloc(m->cfg.n_vocab * sizeof(float));
    ref->vt->reset(ref, &err);
    int32_t tok = 1, ref_tok = 1;
    double worst = 0;
    for (int pos = 0; pos < n_golden; pos++) {
        struct mk_step_cmd c = mk_test_step_cmd(tok, pos);
        int32_t next = -1;
        st = mk_cpu_exec_step(ex, &c, &next, &err);
        MK_CHECK_MSG(st == MK_OK, "step %d: %s", pos, err.msg);
        if (st != MK_OK) break;
        if (ref) {
            struct mk_step_cmd rc = mk_test_step_cmd(ref_tok, pos);
            ref->vt->step(ref, &rc, &ref_tok, &err);
            ref->vt->logits(ref, ref_logits, &err);
            double e = mk_test_rel_err(mk_cpu_exec_logits(ex), ref_logits, m->cfg.n_vocab);
            if (e > worst) worst = e;
        }
        MK_CHECK_MSG(next == golden[pos], "%u threads %s: id %d is %d, golden %d", threads,
                     sched == MK_SCHED_STATIC ? "static" : "dynamic", pos, next, golden[pos]);
        if (next != golden[pos]) break;
        tok = next;
    }
    /* With an f16 cache, the reference's and the executor's f32 sums differ in their last bits, and now and
     * then that moves a k or v element to the neighbouring half: about 1e-4 of the logits after 60 tokens. */
    const double tol = kv == MK_KV_F16 ? 1e-3 : 1e-5;
    MK_CHECK_MSG(worst < tol, "%u threads: logits differ from the reference by %.3g (relative)", threads, worst);
    printf("executor %2u threads %-7s %-8s %s KV: %d golden ids, max logit error vs reference %.2e\n", threads,
           sched == MK_SCHED_STATIC ? "static" : "dynamic", merge_names[merge], mk_kv_type_name(kv), n_golden, worst);
    free(ref_logits);
    mk_cpu_exec_free(ex);
    mk_program_free(prog);
}

static void expect_invalid(const struct mk_program *p, const char *what, const char *needle) {
    struct mk_error err = { 0 };
    enum mk_status st = mk_program_validate(p, &err);
    MK_CHECK_MSG(st != MK_OK, "validator accepted a program with %s", what);
    MK_CHECK_MSG(st == MK_OK || strstr(err.msg, needle), "validator message for %s lacks '%s': %s", what, needle,
                 err.msg);
    if (st != MK_OK) printf("rejected %-28s: %s\n", what, err.msg);
}

static uint32_t find_op(const struct mk_program *p, uint32_t op, uint32_t nth) {
    for (uint32_t i = 0; i < p->n_instr; i++)
        if (p->instrs[i].op == op && nth-- == 0) return i;
    return UINT32_MAX;
}

static void test_validator(const struct mk_model *m) {
    struct mk_error err = { 0 };
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = 3;
    cp.n_ctx = 64;
    cp.fuse_attn_output = true;
    struct mk_program *p = NULL;
    if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
        MK_CHECK_MSG(0, "compile: %s", err.msg);
        return;
    }
    MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "pristine program rejected: %s", err.msg);
    uint32_t attn = find_op(p, MK_OP_ATTN_PARTIAL, 1), comb = find_op(p, MK_OP_ATTN_OUTPUT, 1);
    struct mk_instr saved;

    MK_CHECK_MSG(find_op(p, MK_OP_ATTN_COMBINE, 0) == UINT32_MAX,
                 "the combine was not fused into the attention output");
    /* A dropped signal: the attention's counter is never signaled, so its waiter can never go. */
    saved = p->instrs[attn];
    p->instrs[attn].signal = MK_NO_COUNTER;
    expect_invalid(p, "a dropped signal", "nothing signals");
    p->instrs[attn] = saved;

    /* A raised wait: more signals than the producer gives per step. */
    saved = p->instrs[comb];
    p->instrs[comb].wait[0].add += 1;
    expect_invalid(p, "a raised wait", "gives only");
    p->instrs[comb] = saved;

    /* A self-dependency. */
    saved = p->instrs[comb];
    p->instrs[comb].wait[0].ctr = p->instrs[comb].signal;
    expect_invalid(p, "a self-dependency", "its own counter");
    p->instrs[comb] = saved;

    /* A dropped wait: the combine would read partials nobody ordered before it. */
    saved = p->instrs[comb];
    p->instrs[comb].wait[0].ctr = MK_NO_COUNTER;
    expect_invalid(p, "a missing wait", "without waiting");
    p->instrs[comb] = saved;

    /* A wait on later work. */
    saved = p->instrs[attn];
    p->instrs[attn].wait[0].ctr = p->instrs[comb].signal;
    p->instrs[attn].wait[0].mul = p->instrs[attn].wait[0].add = p->instrs[comb].n_tasks;
    expect_invalid(p, "a wait on a later op", "later instr");
    p->instrs[attn] = saved;

    /* A barrier that waits for more tasks than come before it. */
    uint32_t first = find_op(p, MK_OP_NORM_QKV_ROPE, 0);
    saved = p->instrs[first];
    p->instrs[first].wait[1] = (struct mk_wait){ MK_COUNTER_ALL, p->n_tasks, p->task_base[first] + 1 };
    expect_invalid(p, "an oversized join", "come before it");
    p->instrs[first] = saved;

    /* An opcode nobody implements, and an arena range past the end. */
    saved = p->instrs[comb];
    p->instrs[comb].op = 77;
    expect_invalid(p, "an unknown opcode", "unknown opcode");
    p->instrs[comb] = saved;
    saved = p->instrs[comb];
    p->instrs[comb].buf[1] = p->arena_floats - 1;
    expect_invalid(p, "an arena overrun", "past the arena");
    p->instrs[comb] = saved;

    /* The sampler's tiles: the LM head's rows per task, as the compiler sets them; another row count
     * would have it skip tiles that hold candidates, one that does not cover the vocab too. */
    uint32_t smp = find_op(p, MK_OP_SAMPLE, 0), lm = find_op(p, MK_OP_NORM_LM_HEAD, 0);
    MK_CHECK(smp != UINT32_MAX && lm != UINT32_MAX &&
             p->instrs[smp].args.sample.rows_per_tile == p->instrs[lm].args.lm_head.rows_per_task &&
             p->instrs[smp].args.sample.n_tiles == p->instrs[lm].n_tasks);
    saved = p->instrs[smp];
    p->instrs[smp].args.sample.rows_per_tile += 1;
    expect_invalid(p, "sample tiles off the LM head's", "rows");
    p->instrs[smp].args.sample.rows_per_tile = 1;
    expect_invalid(p, "sample tiles short of the vocab", "do not cover");
    p->instrs[smp].args.sample.rows_per_tile = 0; /* ABI 12's sampler: reads every logit */
    MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "a sample without tile rows rejected: %s", err.msg);
    p->instrs[smp] = saved;
    MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "restored program rejected: %s", err.msg);
    mk_program_free(p);

    /* A static schedule whose worker runs tasks out of program order. */
    cp.schedule = MK_SCHED_STATIC;
    if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
        MK_CHECK_MSG(0, "compile static: %s", err.msg);
        return;
    }
    uint32_t a = p->sched_offsets[0];
    uint32_t tmp = p->sched_tasks[a];
    p->sched_tasks[a] = p->sched_tasks[a + 1];
    p->sched_tasks[a + 1] = tmp;
    expect_invalid(p, "a reordered static list", "program order");
    mk_program_free(p);
}

static struct mk_program *compile_merge(const struct mk_model *m, bool combine_op) {
    struct mk_error err = { 0 };
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = 4;
    cp.n_ctx = 128;
    cp.attn_block = 16; /* several splits by position 60 */
    cp.attn_merge = combine_op ? MK_ATTN_MERGE_OP : MK_ATTN_MERGE_SPLITS;
    struct mk_program *p = NULL;
    MK_CHECK_MSG(mk_program_compile(m, &cp, &p, &err) == MK_OK, "compile (combine op %d): %s", combine_op, err.msg);
    return p;
}

/* The attention splits merged by each KV head's last ATTN_PARTIAL task (the default) and by an
 * ATTN_COMBINE op: the programs' shapes, the validator's rules for the arrival counters, and the
 * same logits bit for bit on the CPU executor over 60 greedy steps on 4 threads. */
static void test_merge_same(const struct mk_model *m) {
    struct mk_program *a = compile_merge(m, false), *b = compile_merge(m, true);
    struct mk_cpu_exec *ea = NULL, *eb = NULL;
    struct mk_error err = { 0 };
    if (!a || !b) goto done;
    const uint32_t L = m->cfg.n_layer, nkv = m->cfg.n_head_kv;
    MK_CHECK_MSG(find_op(a, MK_OP_ATTN_COMBINE, 0) == UINT32_MAX && find_op(b, MK_OP_ATTN_COMBINE, L - 1) != UINT32_MAX,
                 "combine ops: in-split program %s, combine-op program %s",
                 find_op(a, MK_OP_ATTN_COMBINE, 0) == UINT32_MAX ? "none" : "some",
                 find_op(b, MK_OP_ATTN_COMBINE, L - 1) != UINT32_MAX ? "all" : "too few");
    MK_CHECK_MSG(a->n_counters == a->n_instr + 1 + L * nkv && b->n_counters == b->n_instr + 1,
                 "counters %u for %u instructions (in-split), %u for %u (combine op)", a->n_counters, a->n_instr,
                 b->n_counters, b->n_instr);
    for (uint32_t l = 0; l < L; l++) {
        const uint32_t ia = find_op(a, MK_OP_ATTN_PARTIAL, l), ib = find_op(b, MK_OP_ATTN_PARTIAL, l);
        if (ia == UINT32_MAX || ib == UINT32_MAX) {
            MK_CHECK_MSG(0, "layer %u has no attention partials", l);
            continue;
        }
        MK_CHECK_MSG(a->instrs[ia].args.attn.arrive == a->n_instr + 1 + l * nkv && b->instrs[ib].args.attn.arrive == 0,
                     "layer %u: arrival counters at %u (in-split) and %u (combine op)", l,
                     a->instrs[ia].args.attn.arrive, b->instrs[ib].args.attn.arrive);
    }
    /* The validator: each rule broken once on the in-split program. */
    const uint32_t p0 = find_op(a, MK_OP_ATTN_PARTIAL, 0), p1 = find_op(a, MK_OP_ATTN_PARTIAL, 1);
    const uint32_t wo = find_op(a, MK_OP_MATVEC_RESIDUAL, 0);
    struct mk_instr s0 = a->instrs[p0], s1 = a->instrs[p1], sw = a->instrs[wo];
    a->instrs[p0].args.attn.arrive = a->n_counters - nkv + 1;
    expect_invalid(a, "arrivals past the counters", "not among");
    a->instrs[p0].args.attn.arrive = a->instrs[p0].signal;
    expect_invalid(a, "arrivals at a signal", "also signals");
    a->instrs[p0] = s0;
    a->instrs[p1].args.attn.arrive = s0.args.attn.arrive;
    expect_invalid(a, "two ops' arrivals on one counter", "also arrives at");
    a->instrs[p1] = s1;
    a->instrs[wo].wait[0].ctr = s0.args.attn.arrive;
    expect_invalid(a, "a wait on an arrival counter", "an arrival counter");
    a->instrs[wo] = sw;
    a->instrs[p0].args.attn.arrive = 0;
    expect_invalid(a, "a merge's output without arrivals", "without arrival counters");
    a->instrs[p0] = s0;
    MK_CHECK_MSG(mk_program_validate(a, &err) == MK_OK, "restored in-split program rejected: %s", err.msg);

    if (mk_cpu_exec_create(a, 4, &ea, &err) != MK_OK || mk_cpu_exec_create(b, 4, &eb, &err) != MK_OK) {
        MK_CHECK_MSG(0, "executors: %s", err.msg);
        goto done;
    }
    int32_t tok = 1;
    uint32_t differ = 0;
    for (int pos = 0; pos < 60; pos++) {
        struct mk_step_cmd c = mk_test_step_cmd(tok, pos);
        int32_t na = -1, nb = -1;
        if (mk_cpu_exec_step(ea, &c, &na, &err) != MK_OK || mk_cpu_exec_step(eb, &c, &nb, &err) != MK_OK) {
            MK_CHECK_MSG(0, "step %d: %s", pos, err.msg);
            break;
        }
        differ += na != nb || memcmp(mk_cpu_exec_logits(ea), mk_cpu_exec_logits(eb), m->cfg.n_vocab * sizeof(float));
        tok = na;
    }
    MK_CHECK_MSG(differ == 0, "%u of 60 steps' logits differ between the in-split merge and the combine op", differ);
    printf("attention merge: in-split and combine-op programs agree bit for bit over 60 steps\n");
    /* The default (auto) merges in the splits exactly where a KV head's partials are small: up to
     * 512 splits of this model's 20 floats, so that both sides of MK_ATTN_MERGE_SPLIT_MAX come. */
    unsigned n_in_split = 0, n_op = 0;
    for (uint32_t splits = 0; splits <= 512; splits += 64) {
        struct mk_compile_params cp = mk_compile_default_params();
        cp.n_workers = 4;
        cp.n_ctx = 512;
        cp.attn_block = 1;
        cp.attn_splits = splits;
        struct mk_program *p = NULL;
        if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
            MK_CHECK_MSG(0, "compile with %u splits: %s", splits, err.msg);
            continue;
        }
        const struct mk_args_attn *at = &p->instrs[find_op(p, MK_OP_ATTN_PARTIAL, 0)].args.attn;
        const uint64_t floats = (uint64_t)(at->n_head / at->n_head_kv) * at->n_blocks * (at->head_dim + 2);
        const bool in_split = at->arrive != 0, combine = find_op(p, MK_OP_ATTN_COMBINE, 0) != UINT32_MAX;
        MK_CHECK_MSG(in_split == (floats <= MK_ATTN_MERGE_SPLIT_MAX) && combine == !in_split,
                     "auto merge with %u splits (%llu floats a KV head): in the splits %d, combine op %d", at->n_blocks,
                     (unsigned long long)floats, in_split, combine);
        printf("attention merge auto: %u splits, %llu floats a KV head: %s\n", at->n_blocks, (unsigned long long)floats,
               in_split ? "in the splits" : "an op");
        n_in_split += in_split;
        n_op += !in_split;
        mk_program_free(p);
    }
    MK_CHECK_MSG(n_in_split && n_op, "auto merge: %u programs in the splits, %u by an op; the sweep must reach both",
                 n_in_split, n_op);
done:
    mk_cpu_exec_free(ea);
    mk_cpu_exec_free(eb);
    mk_program_free(a);
    mk_program_free(b);
}

/* Every worker count from 1 to 130 must validate (the compiler's tiling changes with it). */
static void test_worker_counts(const struct mk_model *m) {
    struct mk_error err = { 0 };
    for (uint32_t w = 1; w <= 130; w += 1) {
        struct mk_compile_params cp = mk_compile_default_params();
        cp.n_workers = w;
        cp.n_ctx = 40 + w;
        cp.schedule = w % 2 ? MK_SCHED_STATIC : MK_SCHED_DYNAMIC;
        cp.barriers = w % 5 == 0;
        cp.fuse_attn_output = w % 3 == 0;
        struct mk_program *p = NULL;
        enum mk_status st = mk_program_compile(m, &cp, &p, &err);
        MK_CHECK_MSG(st == MK_OK, "compile for %u workers: %s", w, err.msg);
        mk_program_free(p);
    }
}

/* The attention's splits (mk_attn_span) cover positions 0..pos once each, in order, whole blocks
 * each but the last non-empty one, with the non-empty ones first and as many as mk_attn_live says
 * (one exactly where mk_attn_solo_at says so, and always below solo); when the blocks of the
 * positions fit the splits and pos is past solo, split b is block b. */
static void test_attn_span(void) {
    static const uint32_t blocks[] = { 1, 3, 16, 64, 128 }, splits[] = { 1, 2, 5, 16, 128 };
    static const uint32_t solos[] = { 0, 1, 100, 256, 1000 };
    uint32_t bad = 0, checked = 0;
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
        for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++)
            for (size_t oi = 0; oi < sizeof solos / sizeof solos[0]; oi++)
                for (uint32_t pos = 0; pos < 3000; pos += pos < 300 ? 1 : 37) {
                    const uint32_t bs = blocks[bi], nb = splits[si], so = solos[oi],
                                   live = mk_attn_live(pos, bs, nb, so);
                    uint32_t next = 0;
                    for (uint32_t b = 0; b < nb; b++) {
                        uint32_t lo, hi;
                        mk_attn_span(pos, bs, nb, so, b, &lo, &hi);
                        const bool empty = lo >= hi;
                        bool ok = empty == (b >= live);
                        if (!empty) {
                            ok = ok && lo == next && lo % bs == 0 && (hi % bs == 0 || hi == pos + 1);
                            if (pos / bs + 1 <= nb && pos >= so) ok = ok && lo == b * bs;
                            next = hi;
                        }
                        if (!ok && bad++ < 5)
                            fprintf(stderr, "span pos %u block %u splits %u solo %u: split %u is [%u, %u), live %u\n",
                                    pos, bs, nb, so, b, lo, hi, live);
                        checked++;
                    }
                    if ((mk_attn_solo_at(pos, bs, nb, so) != (live == 1) || (pos < so && live != 1)) && bad++ < 5)
                        fprintf(stderr, "span pos %u block %u splits %u solo %u: solo %d, live %u\n", pos, bs, nb, so,
                                mk_attn_solo_at(pos, bs, nb, so), live);
                    if (next != pos + 1 && bad++ < 5)
                        fprintf(stderr, "span pos %u block %u splits %u solo %u: covers [0, %u)\n", pos, bs, nb, so,
                                next);
                }
    MK_CHECK_MSG(bad == 0, "%u of %u attention splits wrong", bad, checked);
    printf("attention splits: %u checked\n", checked);
}

/* The KV cache type: f16 halves the cache, an unknown type is refused with its value named. */
static void test_kv_types(const struct mk_model *m) {
    struct mk_compile_params cp = mk_compile_default_params();
    MK_CHECK(cp.kv_type == MK_KV_F16);
    cp.n_ctx = 128;
    struct mk_program *p16 = NULL, *p32 = NULL, *bad = NULL;
    struct mk_error err = { 0 };
    MK_CHECK(mk_program_compile(m, &cp, &p16, &err) == MK_OK);
    cp.kv_type = MK_KV_F32;
    MK_CHECK(mk_program_compile(m, &cp, &p32, &err) == MK_OK);
    if (p16 && p32) {
        uint64_t want = 2ull * m->cfg.n_layer * 128 * m->cfg.n_head_kv * m->cfg.head_dim;
        MK_CHECK_MSG(mk_program_kv_bytes(p16) == 2 * want && mk_program_kv_bytes(p32) == 4 * want,
                     "KV bytes f16 %llu f32 %llu, want %llu and %llu", (unsigned long long)mk_program_kv_bytes(p16),
                     (unsigned long long)mk_program_kv_bytes(p32), (unsigned long long)(2 * want),
                     (unsigned long long)(4 * want));
        MK_CHECK(p16->kv_type == MK_KV_F16 && p32->kv_type == MK_KV_F32);
    }
    cp.kv_type = (enum mk_kv_type)9;
    MK_CHECK(mk_program_compile(m, &cp, &bad, &err) == MK_ERR_INVALID_ARG && bad == NULL);
    MK_CHECK_MSG(strstr(err.msg, "KV cache type 9") != NULL, "message: %s", err.msg);
    mk_program_free(p16);
    mk_program_free(p32);
}

/* The program of m for `workers` and `ubatch` at a 64-position context, checked to compile and
 * validate (NULL, with the failure counted, when it does not compile). */
static struct mk_program *compile_checked(const char *name, const struct mk_model *m, uint32_t workers,
                                          uint32_t ubatch) {
    struct mk_error err = { 0 };
    struct mk_compile_params cp = mk_compile_default_params();
    cp.n_workers = workers;
    cp.n_ctx = 64;
    cp.ubatch = ubatch;
    struct mk_program *p = NULL;
    if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s: compile for %u workers, ubatch %u: %s", name, workers, ubatch, err.msg);
        return NULL;
    }
    MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "%s: rejected: %s", name, err.msg);
    return p;
}

/* The attention vector an op merges the splits into, and its int8-level copy: ATTN_COMBINE's buf1
 * and buf2, or a merging ATTN_PARTIAL's buf2 and buf3; MK_NO_BUF for other ops. */
static uint32_t attn_vec(const struct mk_instr *in) {
    return in->op == MK_OP_ATTN_COMBINE                           ? in->buf[1]
           : in->op == MK_OP_ATTN_PARTIAL && in->args.attn.arrive ? in->buf[2]
                                                                  : MK_NO_BUF;
}
static uint32_t attn_copy(const struct mk_instr *in) {
    return in->op == MK_OP_ATTN_COMBINE ? in->buf[2] : attn_vec(in) != MK_NO_BUF ? in->buf[3] : MK_NO_BUF;
}

/* The int8-level copies (abi.h, MK_XQ_*) of the FFN hidden vector and of the attention vector: a
 * one-token program whose FFN-down is a block format has each gate/up task write the first, in whole
 * groups, and the FFN-down read it; one whose attention output is a block format has the merge of the
 * attention splits write the second (heads of whole groups) and the attention output read it. Float formats and
 * chunk programs have none, and the validator refuses copies that break those rules. */
static void check_xq_program(const char *name, const struct mk_model *m, uint32_t workers, uint32_t ubatch,
                             bool block) {
    struct mk_error err = { 0 };
    struct mk_program *p = compile_checked(name, m, workers, ubatch);
    if (!p) return;
    const bool want = block && ubatch <= 1;
    const bool want_attn = want && m->cfg.head_dim % MK_XQ_GROUP == 0;
    uint32_t copies = 0, attn_copies = 0, readers = 0, gate_up = UINT32_MAX, down = UINT32_MAX;
    uint32_t combine = UINT32_MAX;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        if (in->op == MK_OP_NORM_GATE_UP_SILU) {
            gate_up = i;
            if (in->buf[2] == MK_NO_BUF) continue;
            copies++;
            MK_CHECK_MSG(in->args.gate_up.rows_per_task % MK_XQ_GROUP == 0, "%s: instr %u tiles %u rows", name, i,
                         in->args.gate_up.rows_per_task);
        } else if (attn_vec(in) != MK_NO_BUF) {
            combine = i;
            if (attn_copy(in) != MK_NO_BUF) attn_copies++;
        } else if (in->op == MK_OP_MATVEC_RESIDUAL) {
            /* The FFN-down reads what the last gate/up wrote, the attention output what the last
             * combine wrote; no other matvec reads a copy. */
            const bool ffn_down = gate_up != UINT32_MAX && in->buf[0] == p->instrs[gate_up].buf[1];
            const bool attn_out = combine != UINT32_MAX && in->buf[0] == attn_vec(&p->instrs[combine]);
            if (ffn_down) down = i;
            if (in->buf[2] == MK_NO_BUF) continue;
            readers++;
            const uint32_t w = ffn_down ? gate_up : attn_out ? combine : UINT32_MAX;
            const uint32_t wrote = w == gate_up      ? p->instrs[w].buf[2]
                                   : w != UINT32_MAX ? attn_copy(&p->instrs[w])
                                                     : MK_NO_BUF;
            MK_CHECK_MSG(w != UINT32_MAX && in->buf[2] == wrote,
                         "%s: instr %u reads an int8 copy at %u that its producer (at %u) did not write", name, i,
                         in->buf[2], wrote);
        }
    }
    MK_CHECK_MSG(copies == (want ? m->cfg.n_layer : 0) && attn_copies == (want_attn ? m->cfg.n_layer : 0) &&
                     readers == copies + attn_copies,
                 "%s, %u workers, ubatch %u: %u gate/up copies, %u combine copies and %u readers, want %u and %u", name,
                 workers, ubatch, copies, attn_copies, readers, want ? m->cfg.n_layer : 0,
                 want_attn ? m->cfg.n_layer : 0);
    if (want_attn && combine != UINT32_MAX) {
        struct mk_instr saved = p->instrs[combine];
        p->instrs[combine].buf[p->instrs[combine].op == MK_OP_ATTN_COMBINE ? 2 : 3] = p->arena_floats - 8;
        expect_invalid(p, "a combine's int8 copy past the arena", "past the arena");
        p->instrs[combine] = saved;
    }
    if (want && gate_up != UINT32_MAX && down != UINT32_MAX) {
        struct mk_instr saved = p->instrs[gate_up];
        p->instrs[gate_up].args.gate_up.rows_per_task += 2; /* still covers the rows, in split groups */
        expect_invalid(p, "an int8 copy in split groups", "whole groups");
        p->instrs[gate_up] = saved;
        saved = p->instrs[down];
        p->instrs[down].buf[2] = p->arena_floats - 8;
        expect_invalid(p, "an int8 copy past the arena", "past the arena");
        p->instrs[down] = saved;
        MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "%s: restored program rejected: %s", name, err.msg);
    } else if (!block && down != UINT32_MAX) {
        struct mk_instr saved = p->instrs[down];
        p->instrs[down].buf[2] = p->instrs[down].buf[0];
        expect_invalid(p, "an int8 copy for float weights", "block-format");
        p->instrs[down] = saved;
    }
    mk_program_free(p);
}

/* The normalized copy of the residual stream (abi.h, MK_XQN_*): a residual add whose tasks hold
 * whole groups writes it, with the norm weight of the norm op that reads its output next, and that
 * op (the next norm op of the program) reads it; chunk programs have none. `all` says every residual
 * add and norm op takes part (one worker: one task holds every row). The validator refuses copies
 * in split groups or for float weights. */
static void check_xqn_program(const char *name, const struct mk_model *m, uint32_t workers, uint32_t ubatch, bool all) {
    struct mk_error err = { 0 };
    struct mk_program *p = compile_checked(name, m, workers, ubatch);
    if (!p) return;
    uint32_t copies = 0, readers = 0, writer = UINT32_MAX;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        if (in->op == MK_OP_MATVEC_RESIDUAL || in->op == MK_OP_ATTN_OUTPUT) {
            writer = in->buf[3] != MK_NO_BUF ? i : UINT32_MAX;
            if (writer == UINT32_MAX) continue;
            copies++;
            const uint32_t rpt =
                in->op == MK_OP_ATTN_OUTPUT ? in->args.attn_out.rows_per_task : in->args.matvec.rows_per_task;
            MK_CHECK_MSG(rpt % MK_XQ_GROUP == 0, "%s: instr %u tiles %u rows", name, i, rpt);
        } else if (in->op == MK_OP_NORM_QKV_ROPE || in->op == MK_OP_NORM_GATE_UP_SILU || in->op == MK_OP_NORM_LM_HEAD) {
            const struct mk_instr *w = writer == UINT32_MAX ? NULL : &p->instrs[writer];
            MK_CHECK_MSG(w ? in->buf[3] == w->buf[3] && in->weight[0] == w->weight[1] : in->buf[3] == MK_NO_BUF,
                         "%s: instr %u reads a normalized copy at %u (norm weight %u); the residual add before it "
                         "wrote %u (norm weight %u)",
                         name, i, in->buf[3], in->weight[0], w ? w->buf[3] : MK_NO_BUF,
                         w ? w->weight[1] : MK_NO_WEIGHT);
            readers += in->buf[3] != MK_NO_BUF;
            writer = UINT32_MAX;
        }
    }
    /* Every wo and FFN-down writes one; every norm op but layer 0's (after the embedding) reads one. */
    const uint32_t want = all && ubatch <= 1 ? 2u * m->cfg.n_layer : 0u;
    MK_CHECK_MSG(readers == copies && (!all || copies == want),
                 "%s, %u workers, ubatch %u: %u normalized copies and %u readers, want %u", name, workers, ubatch,
                 copies, readers, want);
    for (uint32_t i = 0; i < p->n_instr && copies; i++) {
        struct mk_instr *in = &p->instrs[i];
        if (in->op != MK_OP_MATVEC_RESIDUAL || in->buf[3] == MK_NO_BUF) continue;
        const struct mk_instr saved = *in;
        in->args.matvec.rows_per_task += 2; /* still covers the rows, in split groups */
        expect_invalid(p, "a normalized copy in split groups", "whole groups");
        *in = saved;
        in->weight[1] = in->weight[0];
        expect_invalid(p, "a normalized copy with a matrix for its norm weight", "f32 norm weight");
        *in = saved;
        MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "%s: restored program rejected: %s", name, err.msg);
        break;
    }
    mk_program_free(p);
}

/* A synthetic model of preset in dtype, written under tmp and loaded (NULL, the failure counted, when
 * either step fails). */
static struct mk_model *load_preset(const char *tmp, const char *preset, const char *dtype) {
    char path[1100];
    struct mk_gen_params gp = mk_gen_default_params();
    gp.preset = preset;
    gp.dtype = dtype;
    snprintf(path, sizeof path, "%s/%s-%s.gguf", tmp, preset, dtype);
    struct mk_error err = { 0 };
    struct mk_model *m = NULL;
    if (mk_gen_write(path, &gp, &err) != MK_OK || mk_model_load(path, &m, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s %s: %s", preset, dtype, err.msg);
        mk_model_free(m);
        return NULL;
    }
    return m;
}

static struct mk_model *load_tiny(const char *tmp, const char *dtype) { return load_preset(tmp, "tiny", dtype); }

/* NORM_QKV_ROPE's tasks over a costlier wv (abi.h, v_rows_per_task): where Q4_K_M gives a layer a
 * Q6_K wv, the compiler sizes those tasks apart from the wq/wk ones, the tasks cover every row of
 * [wq; wk; wv] once, the validator refuses splits that break the rules, and the CPU executor on
 * such a program agrees with the reference forward pass. */
static void check_qkv_split(const char *name, const struct mk_model *m, uint32_t workers, struct mk_backend *ref) {
    struct mk_error err = { 0 };
    struct mk_program *p = compile_checked(name, m, workers, 1);
    if (!p) return;
    uint32_t split = 0, costlier = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        struct mk_instr *in = &p->instrs[i];
        if (in->op != MK_OP_NORM_QKV_ROPE) continue;
        struct mk_args_qkv *a = &in->args.qkv;
        const struct mk_weight_ref *wq = &p->weights[in->weight[1]], *wv = &p->weights[in->weight[3]];
        costlier += wv->row_bytes > wq->row_bytes;
        if (!a->v_rows_per_task) continue;
        split++;
        MK_CHECK_MSG(wv->row_bytes > wq->row_bytes && a->v_rows_per_task < a->rows_per_task,
                     "%s: instr %u splits wv (%u rows a task) from wq (%u) where wv costs no more", name, i,
                     a->v_rows_per_task, a->rows_per_task);
        const uint32_t total = a->q_dim + 2 * a->kv_dim;
        uint32_t *seen = calloc(total, sizeof *seen), covered = 0;
        for (uint32_t t = 0; seen && t < in->n_tasks; t++) {
            uint32_t r0, n;
            mk_qkv_task_rows(a, t, &r0, &n);
            MK_CHECK_MSG(n <= a->rows_per_task && r0 + n <= total, "%s: task %u rows [%u, +%u) of %u", name, t, r0, n,
                         total);
            /* No task straddles wk and wv: wv's tiles start at q_dim + kv_dim. */
            MK_CHECK_MSG(n == 0 || (r0 < a->q_dim + a->kv_dim) == (r0 + n <= a->q_dim + a->kv_dim),
                         "%s: task %u rows [%u, +%u) straddle wk and wv", name, t, r0, n);
            for (uint32_t r = r0; r < r0 + n && r < total; r++) covered += seen[r]++ == 0;
        }
        MK_CHECK_MSG(seen && covered == total, "%s: instr %u's tasks cover %u of %u rows", name, i, covered, total);
        free(seen);
        if (split == 1) {
            const struct mk_instr saved = *in;
            a->v_rows_per_task = a->rows_per_task + 2;
            expect_invalid(p, "wv tiles larger than wq's", "at most");
            a->v_rows_per_task = saved.args.qkv.v_rows_per_task + 1;
            expect_invalid(p, "odd wv tiles", "even tiles");
            a->v_rows_per_task = 2;
            expect_invalid(p, "too few tasks for the wv tiles", "needed");
            *in = saved;
            MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "%s: restored program rejected: %s", name, err.msg);
        }
    }
    MK_CHECK_MSG(costlier > 0 && split == costlier, "%s, %u workers: %u of %u q/k/v ops with a costlier wv split", name,
                 workers, split, costlier);
    struct mk_cpu_exec *ex = NULL;
    if (mk_cpu_exec_create(p, workers < 8 ? workers : 8, &ex, &err) != MK_OK) {
        MK_CHECK_MSG(0, "%s: executor: %s", name, err.msg);
        mk_program_free(p);
        return;
    }
    float *ref_logits = malloc(m->cfg.n_vocab * sizeof(float));
    double worst = 0;
    int32_t tok = 1, ref_tok = 1;
    ref->vt->reset(ref, &err);
    for (int pos = 0; pos < 8 && ref_logits; pos++) {
        struct mk_step_cmd c = mk_test_step_cmd(tok, pos), rc = mk_test_step_cmd(ref_tok, pos);
        if (mk_cpu_exec_step(ex, &c, &tok, &err) != MK_OK || ref->vt->step(ref, &rc, &ref_tok, &err) != MK_OK ||
            ref->vt->logits(ref, ref_logits, &err) != MK_OK) {
            MK_CHECK_MSG(0, "%s: step %d: %s", name, pos, err.msg);
            break;
        }
        double e = mk_test_rel_err(mk_cpu_exec_logits(ex), ref_logits, m->cfg.n_vocab);
        if (e > worst) worst = e;
        MK_CHECK_MSG(tok == ref_tok, "%s: step %d: executor id %d, reference %d", name, pos, tok, ref_tok);
    }
    MK_CHECK_MSG(worst < 1e-3, "%s, %u workers: logits differ from the reference by %.3g", name, workers, worst);
    printf("%s, %u workers: %u q/k/v ops split, 8 steps, max logit error vs reference %.2e\n", name, workers, split,
           worst);
    free(ref_logits);
    mk_cpu_exec_free(ex);
    mk_program_free(p);
}

static void test_qkv_split(void) {
    char tmp[1024];
    if (!mk_test_make_tmp_dir(tmp, sizeof tmp, "mk_program_test")) {
        MK_CHECK_MSG(0, "no temporary directory");
        return;
    }
    struct mk_model *m = load_tiny(tmp, "Q4_K_M"); /* Q6_K wv in layers 2 and 3 */
    struct mk_error err = { 0 };
    struct mk_backend *ref = NULL;
    struct mk_backend_params bp = { 0 };
    bp.kind = MK_BACKEND_REF;
    bp.n_ctx = 64;
    bp.kv_type = MK_KV_F16;
    if (m && mk_backend_create_ref(m, &bp, &ref, &err) != MK_OK) MK_CHECK_MSG(0, "tiny Q4_K_M: %s", err.msg);
    if (ref) {
        check_qkv_split("tiny Q4_K_M", m, 7, ref);
        check_qkv_split("tiny Q4_K_M", m, 132, ref);
    }
    if (ref) ref->vt->free(ref);
    mk_model_free(m);
    mk_test_remove_tree(tmp);
}

/* The solo step's bound (mk_args_attn.solo) of every ATTN_PARTIAL: where the splits merge
 * themselves, the compiler's default by head size (graph/lower.c: MK_ATTN_SOLO_DEFAULT_64 at 64,
 * MK_ATTN_SOLO_DEFAULT at 128); 0 where an op merges them; the caller's value where it sets one. */
static void test_attn_solo_default(void) {
    char tmp[1024];
    if (!mk_test_make_tmp_dir(tmp, sizeof tmp, "mk_program_test")) {
        MK_CHECK_MSG(0, "no temporary directory");
        return;
    }
    static const struct {
        const char *preset;
        uint32_t head_dim, want;
    } cases[] = { { "tiny-gqa4", 64, MK_ATTN_SOLO_DEFAULT_64 }, { "tiny-hd128", 128, MK_ATTN_SOLO_DEFAULT } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct mk_model *m = load_preset(tmp, cases[i].preset, "f16");
        if (!m) continue;
        struct mk_error err = { 0 };
        MK_CHECK_MSG(m->cfg.head_dim == cases[i].head_dim, "%s: head size %u, want %u", cases[i].preset,
                     m->cfg.head_dim, cases[i].head_dim);
        for (int k = 0; k < 3; k++) { /* splits merge (default bound), an op merges, splits merge at 300 */
            struct mk_compile_params cp = mk_compile_default_params();
            cp.n_workers = 132;
            cp.n_ctx = 2048;
            cp.attn_merge = k == 1 ? MK_ATTN_MERGE_OP : MK_ATTN_MERGE_SPLITS;
            cp.attn_solo = k == 2 ? 300u : 0u;
            const uint32_t want = k == 0 ? cases[i].want : k == 1 ? 0u : 300u;
            struct mk_program *p = NULL;
            if (mk_program_compile(m, &cp, &p, &err) != MK_OK) {
                MK_CHECK_MSG(0, "%s: compile (case %d): %s", cases[i].preset, k, err.msg);
                continue;
            }
            MK_CHECK_MSG(mk_program_validate(p, &err) == MK_OK, "%s: rejected: %s", cases[i].preset, err.msg);
            uint32_t n = 0;
            for (uint32_t j = 0; j < p->n_instr; j++) {
                const struct mk_instr *in = &p->instrs[j];
                if (in->op != MK_OP_ATTN_PARTIAL) continue;
                n++;
                MK_CHECK_MSG(in->args.attn.solo == want && (in->args.attn.arrive != 0) == (k != 1),
                             "%s case %d: instr %u has solo %u and arrive %u, want solo %u", cases[i].preset, k, j,
                             in->args.attn.solo, in->args.attn.arrive, want);
            }
            MK_CHECK_MSG(n == m->cfg.n_layer, "%s case %d: %u attention instructions for %u layers", cases[i].preset, k,
                         n, m->cfg.n_layer);
            mk_program_free(p);
        }
        mk_model_free(m);
    }
    mk_test_remove_tree(tmp);
}

static void test_xq_copies(void) {
    char tmp[1024];
    if (!mk_test_make_tmp_dir(tmp, sizeof tmp, "mk_program_test")) {
        MK_CHECK_MSG(0, "no temporary directory");
        return;
    }
    static const char *const dtypes[] = { "f32", "Q4_K_M", "q8_0" };
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        struct mk_model *m = load_tiny(tmp, dtypes[i]);
        if (!m) continue;
        const uint32_t workers[] = { 1, 7, 132 };
        for (size_t w = 0; w < 3; w++) {
            check_xq_program(dtypes[i], m, workers[w], 1, i > 0);
            check_xq_program(dtypes[i], m, workers[w], 8, i > 0);
            /* q8_0: every matrix a block format; one worker: whole groups in every task. */
            check_xqn_program(dtypes[i], m, workers[w], 1, i == 2 && workers[w] == 1);
            check_xqn_program(dtypes[i], m, workers[w], 8, false);
        }
        mk_model_free(m);
    }
    mk_test_remove_tree(tmp);
}

int main(void) {
    test_attn_span();
    test_attn_solo_default();
    test_xq_copies();
    test_qkv_split();
    const char *dir = mk_test_models_dir("stories260K-f32.gguf");
    if (!dir) {
        printf("SKIP: models dir not found (set MK_MODELS_DIR)\n");
        return 0;
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/stories260K-f32.gguf", dir);
    struct mk_error err = { 0 };
    struct mk_model *m = NULL;
    if (mk_model_load(path, &m, &err) != MK_OK) {
        fprintf(stderr, "FAIL: load %s: %s\n", path, err.msg);
        return 1;
    }
    int32_t golden[64];
    int n_golden = read_golden_ids(dir, golden, 64);
    MK_CHECK_MSG(n_golden == 60, "read %d golden ids from the README, want 60", n_golden);
    /* The reference rounds k and v through f16 as an f16 cache does, so each cache type has its own. */
    struct mk_backend_params bp = { 0 };
    bp.kind = MK_BACKEND_REF;
    bp.n_ctx = 128;
    bp.kv_type = MK_KV_F16;
    struct mk_backend *ref = NULL, *ref32 = NULL;
    MK_CHECK_MSG(mk_backend_create_ref(m, &bp, &ref, &err) == MK_OK, "ref backend: %s", err.msg);
    bp.kv_type = MK_KV_F32;
    MK_CHECK_MSG(mk_backend_create_ref(m, &bp, &ref32, &err) == MK_OK, "ref backend (f32 KV): %s", err.msg);
    if (ref && ref32 && n_golden == 60) {
        uint32_t counts[] = { 1, 2, 3, 7, 64 };
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
            run_executor(m, ref, golden, n_golden, counts[i], MK_SCHED_DYNAMIC, MERGE_IN_SPLITS, MK_KV_F16);
        run_executor(m, ref, golden, n_golden, 3, MK_SCHED_STATIC, MERGE_IN_SPLITS, MK_KV_F16);
        run_executor(m, ref, golden, n_golden, 7, MK_SCHED_STATIC, MERGE_IN_SPLITS, MK_KV_F16);
        /* The splits merged by a combine op, or in the attention output, must agree too. */
        run_executor(m, ref, golden, n_golden, 3, MK_SCHED_DYNAMIC, MERGE_COMBINE_OP, MK_KV_F16);
        run_executor(m, ref, golden, n_golden, 7, MK_SCHED_STATIC, MERGE_COMBINE_OP, MK_KV_F16);
        run_executor(m, ref, golden, n_golden, 2, MK_SCHED_DYNAMIC, MERGE_FUSED, MK_KV_F16);
        run_executor(m, ref, golden, n_golden, 5, MK_SCHED_STATIC, MERGE_FUSED, MK_KV_F16);
        /* And an f32 cache, on both schedules and each merge. */
        run_executor(m, ref32, golden, n_golden, 3, MK_SCHED_DYNAMIC, MERGE_IN_SPLITS, MK_KV_F32);
        run_executor(m, ref32, golden, n_golden, 2, MK_SCHED_STATIC, MERGE_COMBINE_OP, MK_KV_F32);
        run_executor(m, ref32, golden, n_golden, 4, MK_SCHED_STATIC, MERGE_FUSED, MK_KV_F32);
    }
    test_merge_same(m);
    test_validator(m);
    test_kv_types(m);
    test_worker_counts(m);
    if (ref) ref->vt->free(ref);
    if (ref32) ref32->vt->free(ref32);
    mk_model_free(m);
    return mk_test_finish("program_test");
}
