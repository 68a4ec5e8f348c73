/* Soak runs: sessions one after another on one model, per-token latency percentiles, and whether memory, files or threads grew. */
#include "runtime/soak.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"
#include "graph/cpu_time.h"

static uint64_t mk_soak_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A "Field:   N kB" line of /proc/self/status, in KiB; -1 when unknown. */
static long mk_soak_status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    long kib = -1;
    if (f) {
        char line[256];
        size_t n = strlen(field);
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, field, n) && line[n] == ':' && sscanf(line + n + 1, "%ld", &kib) == 1) break;
        fclose(f);
    }
    return kib;
}

long mk_soak_rss_kib(void) { return mk_soak_status_kib("VmRSS"); }

long mk_soak_anon_kib(void) { return mk_soak_status_kib("RssAnon"); }

/* Entries of a /proc/self folder, "." and ".." not counted; skip_own drops the listing's own fd. */
static int mk_soak_count_entries(const char *dir, int skip_own) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - skip_own;
}

int mk_soak_count_fds(void) { return mk_soak_count_entries("/proc/self/fd", 1); }

int mk_soak_count_threads(void) { return mk_soak_count_entries("/proc/self/task", 0); }

struct mk_soak_params mk_soak_default_params(void) {
    struct mk_soak_params p = {
        .sessions = 100,
        .warmup = 2,
        .tokens = 2000,
        .prompt = "Once upon a time",
        .seed = 1000,
        .vary_threads = false,
        .rss_slack_pct = 1.0,
        .rss_floor_kib = 256,
        .session = mk_session_default_params(),
    };
    p.session.sampling.temperature = 0.8f;
    return p;
}

/* Per-token latencies: the time between tokens of one generate call (its first token was sampled
 * by the prompt's last step, so it has none). */
struct mk_soak_lat {
    double *ms;    /* (cap) */
    double *dev;   /* (cap) the same steps on the backend's own clock: whether a slow token was the device's */
    uint32_t *pos; /* (cap) the position the token's step evaluated */
    const struct mk_session *s;
    size_t n, cap;
    uint64_t last;
    bool first;
    uint64_t tokens;
};

static void mk_soak_lat_free(struct mk_soak_lat *l) {
    free(l->ms);
    free(l->dev);
    free(l->pos);
}

static int mk_soak_on_token(void *user, int32_t id, const char *piece, size_t len) {
    (void)id, (void)piece, (void)len;
    struct mk_soak_lat *l = user;
    uint64_t t = mk_soak_now_ns();
    if (!l->first && l->n < l->cap) {
        l->dev[l->n] = mk_session_timings(l->s).last_step_device_ms;
        l->pos[l->n] = mk_session_n_past(l->s) - 1u;
        l->ms[l->n++] = (double)(t - l->last) / 1e6;
    }
    l->first = false;
    l->last = t;
    l->tokens++;
    return 0;
}

/* One session of p->tokens sampled tokens; 0, or -1 with the error in msg. */
static int mk_soak_session(const struct mk_lm *lm, const struct mk_soak_params *p, uint32_t i, struct mk_soak_lat *l,
                           char *msg, size_t cap) {
    struct mk_session_params sp = p->session;
    if (p->vary_threads) sp.n_threads = i % 2 ? 2 : 0;
    sp.sampling.seed = p->seed + i;
    struct mk_session *s = NULL;
    struct mk_error err;
    if (mk_session_create(lm, &sp, &s, &err) != MK_OK) {
        snprintf(msg, cap, "session %u: create: %s", i, err.msg);
        return -1;
    }
    l->s = s;
    uint32_t done = 0;
    int rc = 0;
    while (done < p->tokens) {
        if (mk_session_reset(s) != MK_OK || mk_session_feed_text(s, p->prompt) != MK_OK) {
            snprintf(msg, cap, "session %u: prompt: %s", i, mk_session_last_error(s));
            rc = -1;
            break;
        }
        enum mk_stop_reason why = MK_STOP_NONE;
        uint32_t n = 0;
        l->first = true;
        if (mk_session_generate(s, (int32_t)(p->tokens - done), mk_soak_on_token, l, &why, &n) != MK_OK ||
            why == MK_STOP_NONE || why == MK_STOP_CANCELLED) {
            snprintf(msg, cap, "session %u: generate (%s): %s", i, mk_stop_reason_str(why), mk_session_last_error(s));
            rc = -1;
            break;
        }
        done += n;
        if (n == 0 && why != MK_STOP_EOS) {
            snprintf(msg, cap, "session %u: generate made no progress (%s)", i, mk_stop_reason_str(why));
            rc = -1;
            break;
        }
    }
    mk_session_free(s);
    return rc;
}

static int mk_soak_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double mk_soak_pct(const double *sorted, size_t n, double q) {
    if (!n) return 0;
    size_t i = (size_t)(q * (double)n);
    return sorted[i < n ? i : n - 1];
}

/* Appends one finding to the verdict, "; "-separated. */
__attribute__((format(printf, 2, 3))) static void mk_soak_say(struct mk_soak_report *r, const char *fmt, ...) {
    size_t used = strlen(r->verdict);
    if (used && used + 2 < sizeof r->verdict) {
        memcpy(r->verdict + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->verdict + used, sizeof r->verdict - used, fmt, ap);
    va_end(ap);
}

/* What grew or failed, "" when nothing did. Anonymous memory is judged: file-backed pages grow by
 * at most the mapped code (a branch first taken in session 40 reads its page then) and are the
 * kernel's to drop. */
static void mk_soak_judge(const struct mk_soak_params *p, struct mk_soak_report *r) {
    long slack = (long)((double)r->rss0_kib * p->rss_slack_pct / 100.0);
    if (slack < p->rss_floor_kib) slack = p->rss_floor_kib;
    if (r->errors) mk_soak_say(r, "%u sessions failed (first: %s)", r->errors, r->first_error);
    if (r->rss0_kib < 0 || r->rss1_kib < 0 || r->anon0_kib < 0 || r->anon1_kib < 0)
        mk_soak_say(r, "resident memory unknown (/proc/self/status)");
    else if (r->anon1_kib - r->anon0_kib > slack)
        mk_soak_say(r, "anonymous resident memory grew from %ld to %ld KiB (allowed %ld)", r->anon0_kib, r->anon1_kib,
                    slack);
    if (r->fds1 != r->fds0) mk_soak_say(r, "open files went from %d to %d", r->fds0, r->fds1);
    if (r->threads1 != r->threads0) mk_soak_say(r, "threads went from %d to %d", r->threads0, r->threads1);
}

enum mk_status mk_soak_run(const struct mk_lm *lm, const struct mk_soak_params *p, struct mk_soak_report *r,
                           struct mk_error *err) {
    memset(r, 0, sizeof *r);
    size_t cap = (size_t)p->sessions * p->tokens;
    const size_t wcap = p->tokens ? p->tokens : 1;
    struct mk_soak_lat l = { .ms = calloc(cap ? cap : 1, sizeof(double)),
                             .dev = calloc(cap ? cap : 1, sizeof(double)),
                             .pos = calloc(cap ? cap : 1, sizeof(uint32_t)),
                             .cap = cap,
                             .first = true };
    struct mk_soak_lat warm = { .ms = calloc(wcap, sizeof(double)),
                                .dev = calloc(wcap, sizeof(double)),
                                .pos = calloc(wcap, sizeof(uint32_t)),
                                .cap = p->tokens,
                                .first = true };
    if (!l.ms || !warm.ms || !l.dev || !warm.dev) {
        free(l.ms);
        free(l.dev);
        free(warm.ms);
        free(warm.dev);
        return mk_error_set(err, MK_ERR_NOMEM, "soak: out of memory for %zu latencies", cap);
    }
    /* Resident before the baseline: pages of the latency buffer touched during the run would
     * otherwise count as growth (1.6 MB for 100 x 2000 tokens). */
    memset(l.ms, 0xff, cap * sizeof(double));
    memset(l.dev, 0xff, cap * sizeof(double));
    memset(l.pos, 0xff, cap * sizeof(uint32_t));
    char msg[512];
    for (uint32_t i = 0; i < p->warmup; i++) {
        warm.n = 0;
        if (mk_soak_session(lm, p, i, &warm, msg, sizeof msg) != 0) {
            r->errors++;
            if (!r->first_error[0]) snprintf(r->first_error, sizeof r->first_error, "warm-up %s", msg);
        }
    }
    r->rss0_kib = mk_soak_rss_kib();
    r->anon0_kib = mk_soak_anon_kib();
    r->fds0 = mk_soak_count_fds();
    r->threads0 = mk_soak_count_threads();
    struct mk_cpu_span span = mk_cpu_span_start();
    for (uint32_t i = p->warmup; i < p->warmup + p->sessions; i++) {
        if (mk_soak_session(lm, p, i, &l, msg, sizeof msg) != 0) {
            r->errors++;
            if (!r->first_error[0]) snprintf(r->first_error, sizeof r->first_error, "%s", msg);
        }
    }
    r->tokens = l.tokens;
    r->cpu_ms_per_token = mk_cpu_span_ms_per(&span, l.tokens, &r->wall_ms_per_token);
    r->rss1_kib = mk_soak_rss_kib();
    r->anon1_kib = mk_soak_anon_kib();
    r->fds1 = mk_soak_count_fds();
    r->threads1 = mk_soak_count_threads();
    r->sessions = p->sessions;
    if (p->latencies_path) {
        FILE *f = fopen(p->latencies_path, "w");
        if (f) {
            fprintf(f, "# token position wall_ms device_ms\n");
            for (size_t i = 0; i < l.n; i++) fprintf(f, "%zu %u %.4f %.4f\n", i, l.pos[i], l.ms[i], l.dev[i]);
        }
        if (!f || fclose(f) != 0) mk_soak_say(r, "could not write %s", p->latencies_path);
    }
    qsort(l.ms, l.n, sizeof *l.ms, mk_soak_cmp_double);
    r->p50_ms = mk_soak_pct(l.ms, l.n, 0.50);
    r->p99_ms = mk_soak_pct(l.ms, l.n, 0.99);
    r->max_ms = l.n ? l.ms[l.n - 1] : 0;
    qsort(l.dev, l.n, sizeof *l.dev, mk_soak_cmp_double);
    r->dev_p50_ms = mk_soak_pct(l.dev, l.n, 0.50);
    r->dev_p99_ms = mk_soak_pct(l.dev, l.n, 0.99);
    mk_soak_judge(p, r);
    mk_soak_lat_free(&l);
    mk_soak_lat_free(&warm);
    return MK_OK;
}
