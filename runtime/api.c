/* The public C API (runtime/mk.h): models with their tokenizer, sessions over a backend, streaming generation. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/mk.h"
#include "core/chat.h"
#include "core/gguf.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "runtime/backend.h"

struct mk_lm {
    struct mk_model *model;
    struct mk_tokenizer *tok; /* NULL when the file has no vocabulary */
    double load_ms;
};

struct mk_session {
    const struct mk_lm *lm;
    struct mk_backend *backend;
    struct mk_sampling_params sampling; /* seed resolved */
    uint32_t n_past;                    /* positions evaluated */
    int32_t next;                       /* token the last step sampled, -1 before any step */
    bool next_emitted;                  /* next went to the caller but is not evaluated yet */
    int32_t last_token;                 /* the token before the next piece, for dropping the dummy-prefix space */
    int32_t *tokens;                    /* (n_ctx) the token evaluated at each position, for feed_sequence */
    bool ignore_eog;                    /* generation does not stop on end-of-generation tokens */
    struct mk_timings timings;
    struct mk_error err;
    int cancel; /* set by mk_session_cancel from any thread; taken by the next step */
};

static double mk_api_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- Models ---- */

enum mk_status mk_lm_load(const char *path, struct mk_lm **out, struct mk_error *err) {
    return mk_lm_load_ex(path, NULL, out, err);
}

enum mk_status mk_lm_load_ex(const char *path, const struct mk_lm_load_params *p, struct mk_lm **out,
                             struct mk_error *err) {
    *out = NULL;
    if (!path) return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_lm_load: no path");
    double t0 = mk_api_now_ms();
    struct mk_lm *lm = calloc(1, sizeof *lm);
    if (!lm) return mk_error_set(err, MK_ERR_NOMEM, "%s: out of memory", path);
    struct mk_gguf_open_params gp = { .cancel = p ? p->cancel : NULL };
    enum mk_status st = mk_model_load_ex(path, &gp, &lm->model, err);
    if (st != MK_OK) goto fail;
    if (lm->model->vocab.n_tokens > 0) {
        /* The file's tokenizer.ggml.pre, add_bos_token and EOG ids choose how text splits and ends. */
        st = lm->model->gguf ? mk_tokenizer_create_gguf(&lm->model->vocab, lm->model->gguf, &lm->tok, err)
                             : mk_tokenizer_create(&lm->model->vocab, &lm->tok, err);
        if (st != MK_OK) {
            mk_error_prefix(err, "%s: tokenizer", path);
            goto fail;
        }
    }
    lm->load_ms = mk_api_now_ms() - t0;
    *out = lm;
    return MK_OK;
fail:
    mk_lm_free(lm);
    return st;
}

void mk_lm_free(struct mk_lm *lm) {
    if (!lm) return;
    mk_tokenizer_free(lm->tok);
    mk_model_free(lm->model);
    free(lm);
}

struct mk_lm_info mk_lm_get_info(const struct mk_lm *lm) {
    const struct mk_model *m = lm->model;
    struct mk_lm_info info = {
        .arch = m->cfg.arch,
        .tokenizer = lm->tok ? mk_tokenizer_kind(lm->tok) : "",
        .n_vocab = m->cfg.n_vocab,
        .n_ctx_train = m->cfg.n_ctx_train,
        .n_embd = m->cfg.n_embd,
        .n_ff = m->cfg.n_ff,
        .n_layer = m->cfg.n_layer,
        .n_head = m->cfg.n_head,
        .n_head_kv = m->cfg.n_head_kv,
        .n_params = m->vocab_only ? 0 : mk_model_param_count(m),
        .bytes_per_token = m->vocab_only ? 0 : mk_model_bytes_per_token(m),
        .bos = m->vocab.bos,
        .eos = m->vocab.eos,
        .add_bos = lm->tok ? mk_tokenizer_add_bos(lm->tok) : m->vocab.add_bos,
        .can_decode = !m->vocab_only,
        .load_ms = lm->load_ms,
    };
    return info;
}

int64_t mk_lm_tokenize(const struct mk_lm *lm, const char *text, size_t len, bool add_bos, bool parse_special,
                       int32_t *ids, size_t cap) {
    if (!lm->tok) return MK_ERR_UNSUPPORTED;
    return mk_tokenizer_encode(lm->tok, text, len, add_bos, parse_special, ids, cap);
}

size_t mk_lm_token_piece(const struct mk_lm *lm, int32_t prev_id, int32_t id, char *out, size_t cap) {
    if (!lm->tok) return 0;
    return mk_tokenizer_piece(lm->tok, prev_id, id, out, cap);
}

size_t mk_lm_detokenize(const struct mk_lm *lm, const int32_t *ids, size_t n, char *out, size_t cap) {
    if (!lm->tok) return 0;
    return mk_tokenizer_decode(lm->tok, ids, n, out, cap);
}

int64_t mk_lm_token_text(const struct mk_lm *lm, int32_t id, char *out, size_t cap) {
    if (!lm->tok) return MK_ERR_UNSUPPORTED;
    size_t len;
    const char *text = mk_tokenizer_token_text(lm->tok, id, &len);
    if (!text) return MK_ERR_INVALID_ARG;
    if (out) memcpy(out, text, len < cap ? len : cap);
    return (int64_t)len;
}

bool mk_lm_is_eog(const struct mk_lm *lm, int32_t id) {
    if (!lm->tok) return id >= 0 && id == lm->model->vocab.eos;
    return mk_tokenizer_is_eog(lm->tok, id);
}

/* ---- Chat templates ---- */

const char *mk_chat_template_name_at(size_t i) {
    return i + 1 < MK_CHAT_COUNT ? mk_chat_template_name((enum mk_chat_template)(i + 1)) : NULL;
}

/* The template tokenizer.chat_template stands for; MK_CHAT_UNKNOWN with *has = false when absent. */
static enum mk_chat_template mk_api_file_template(const struct mk_lm *lm, struct mk_gguf_str *text, bool *has) {
    const struct mk_gguf_kv *kv = lm->model->gguf ? mk_gguf_find_kv(lm->model->gguf, "tokenizer.chat_template") : NULL;
    *has = kv && kv->type == MK_GGUF_STRING;
    if (!*has) return MK_CHAT_UNKNOWN;
    *text = kv->v.str;
    return mk_chat_detect_template(text->data, (size_t)text->len);
}

const char *mk_lm_chat_template(const struct mk_lm *lm) {
    struct mk_gguf_str text;
    bool has;
    enum mk_chat_template t = mk_api_file_template(lm, &text, &has);
    return t == MK_CHAT_UNKNOWN ? NULL : mk_chat_template_name(t);
}

/* Every template name, comma-separated, for error messages. */
static void mk_api_template_names(char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; mk_chat_template_name_at(i) && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%s", i ? ", " : "", mk_chat_template_name_at(i));
}

/* The template tmpl names, or the file's; an error naming the file or the name otherwise. */
static enum mk_status mk_api_choose_template(const struct mk_lm *lm, const char *tmpl, enum mk_chat_template *out,
                                             struct mk_error *err) {
    char names[1024];
    if (tmpl) {
        *out = mk_chat_template_from_name(tmpl);
        if (*out != MK_CHAT_UNKNOWN) return MK_OK;
        mk_api_template_names(names, sizeof names);
        return mk_error_set(err, MK_ERR_INVALID_ARG, "unknown chat template '%s' (known: %s)", tmpl, names);
    }
    struct mk_gguf_str text;
    bool has;
    *out = mk_api_file_template(lm, &text, &has);
    if (*out != MK_CHAT_UNKNOWN) return MK_OK;
    const char *path = lm->model->gguf ? mk_gguf_path(lm->model->gguf) : "the model";
    if (!has)
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "%s has no tokenizer.chat_template: name a template (chatml, llama3, ...)", path);
    return mk_error_set(err, MK_ERR_UNSUPPORTED,
                        "%s: tokenizer.chat_template (%llu bytes, starting \"%.*s\") is not a format mk renders: "
                        "name a template (chatml, llama3, ...)",
                        path, (unsigned long long)text.len, (int)(text.len < 40 ? text.len : 40), text.data);
}

int64_t mk_lm_chat_apply(const struct mk_lm *lm, const char *tmpl, const struct mk_chat_msg *msgs, size_t n,
                         bool add_generation_prompt, char *out, size_t cap, struct mk_error *err) {
    if (!lm || (n && !msgs)) return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_lm_chat_apply: no model or no messages");
    enum mk_chat_template t;
    enum mk_status st = mk_api_choose_template(lm, tmpl, &t, err);
    if (st != MK_OK) return st;
    /* The public message mirrors core's field by field (mk.h includes only standard headers). */
    struct mk_chat_message *cm = malloc((n ? n : 1) * sizeof *cm);
    if (!cm) return mk_error_set(err, MK_ERR_NOMEM, "mk_lm_chat_apply: out of memory for %zu messages", n);
    for (size_t i = 0; i < n; i++) cm[i] = (struct mk_chat_message){ .role = msgs[i].role, .content = msgs[i].content };
    size_t len = 0;
    st = mk_chat_apply(t, cm, n, add_generation_prompt, out, cap, &len, err);
    free(cm);
    if (st != MK_OK) return st;
    if (len >= cap && cap > 0) out[cap - 1] = '\0'; /* a truncated text ends like snprintf's */
    return len > INT64_MAX ? MK_ERR_NOMEM : (int64_t)len;
}

/* ---- Sessions ---- */

struct mk_session_params mk_session_default_params(void) {
    struct mk_session_params p = {
        .n_ctx = 0,
        .backend = MK_BACKEND_AUTO,
        .n_threads = 0,
        .device = 0,
        .sampling = { .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = MK_SEED_RANDOM },
        .verbose = 0,
        .ignore_eog = 0,
    };
    return p;
}

/* The public mirror of the GPU settings, field by field (mk.h includes only standard headers). */
static struct mk_gpu_settings mk_api_gpu_settings(const struct mk_gpu_params *g) {
    struct mk_gpu_settings s = mk_gpu_default_settings();
    s.dynamic_schedule = g->dynamic_schedule != 0;
    s.tasks_per_worker = g->tasks_per_worker;
    s.attn_block = g->attn_block;
    s.fuse_attn_output = g->fuse_attn_output != 0;
    s.blocks_per_sm = g->blocks_per_sm;
    s.no_rope_table = g->no_rope_table != 0;
    s.trace = (enum mk_gpu_trace)g->trace;
    s.kernel_image = g->kernel_image;
    return s;
}

/* A seed that differs between runs and between sessions of one process, without global state. */
static uint64_t mk_api_random_seed(const void *salt) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    z ^= (uint64_t)getpid() << 40;
    z ^= (uint64_t)(uintptr_t)salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z == MK_SEED_RANDOM ? 0 : z;
}

enum mk_status mk_session_create(const struct mk_lm *lm, const struct mk_session_params *p, struct mk_session **out,
                                 struct mk_error *err) {
    *out = NULL;
    if (!lm || !p) return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: no model or no parameters");
    const struct mk_llama_config *c = &lm->model->cfg;
    const struct mk_sampling_params *sp = &p->sampling;
    if (!(sp->temperature == sp->temperature) || !(sp->top_p == sp->top_p) || !(sp->min_p == sp->min_p))
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: sampling parameters must not be NaN");
    if (sp->temperature > 0.0f && !(sp->top_p > 0.0f))
        return mk_error_set(err, MK_ERR_INVALID_ARG,
                            "mk_session_create: top_p = %g keeps no token (use 0 < top_p <= 1)", (double)sp->top_p);
    if (sp->min_p > 1.0f)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: min_p = %g is above 1", (double)sp->min_p);
    if (p->fault.kind < MK_FAULT_NONE || p->fault.kind > MK_FAULT_BAD_ADDRESS)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: fault.kind = %d (want 0 to 4)",
                            (int)p->fault.kind);
    if (p->gpu.trace < 0 || p->gpu.trace > 2)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: gpu.trace = %d (want 0, 1 or 2)",
                            p->gpu.trace);
    double t0 = mk_api_now_ms();
    struct mk_session *s = calloc(1, sizeof *s);
    if (!s) return mk_error_set(err, MK_ERR_NOMEM, "mk_session_create: out of memory");
    s->lm = lm;
    s->sampling = *sp;
    if (s->sampling.seed == MK_SEED_RANDOM) s->sampling.seed = mk_api_random_seed(s);
    s->next = -1;
    s->last_token = -1;
    s->ignore_eog = p->ignore_eog != 0;
    struct mk_backend_params bp = {
        .kind = p->backend,
        .n_ctx = p->n_ctx ? p->n_ctx : (c->n_ctx_train && c->n_ctx_train < 4096 ? c->n_ctx_train : 4096),
        .n_threads = p->n_threads,
        .watchdog_ms = p->watchdog_ms,
        .device = p->device,
        .verbose = p->verbose,
        .gpu = mk_api_gpu_settings(&p->gpu),
        .fault = p->fault,
    };
    enum mk_status st = mk_backend_create(lm->model, &bp, &s->backend, err);
    if (st != MK_OK) {
        free(s);
        return st;
    }
    s->tokens = malloc((size_t)s->backend->n_ctx * sizeof *s->tokens);
    if (!s->tokens) {
        mk_session_free(s);
        return mk_error_set(err, MK_ERR_NOMEM, "mk_session_create: out of memory for %u positions", (unsigned)bp.n_ctx);
    }
    s->timings.load_ms = lm->load_ms;
    s->timings.init_ms = mk_api_now_ms() - t0;
    mk_error_clear(&s->err);
    *out = s;
    return MK_OK;
}

void mk_session_free(struct mk_session *s) {
    if (!s) return;
    if (s->backend) s->backend->vt->free(s->backend);
    free(s->tokens);
    free(s);
}

const char *mk_session_last_error(const struct mk_session *s) { return s->err.msg; }

const struct mk_error *mk_session_error(const struct mk_session *s) { return &s->err; }

/* One decode step of token at the next position; the sampled token becomes s->next. */
static enum mk_status mk_session_step(struct mk_session *s, int32_t token) {
    struct mk_step_cmd cmd = {
        .cmd = MK_CMD_STEP,
        .token = token,
        .pos = (int32_t)s->n_past,
        .temperature = s->sampling.temperature,
        .top_k = s->sampling.top_k,
        .top_p = s->sampling.top_p,
        .min_p = s->sampling.min_p,
        .seed = s->sampling.seed,
    };
    int32_t out = -1;
    if (__atomic_exchange_n(&s->cancel, 0, __ATOMIC_ACQ_REL))
        return mk_error_set(&s->err, MK_ERR_CANCELLED, "cancelled before position %u", (unsigned)s->n_past);
    enum mk_status st = s->backend->vt->step(s->backend, &cmd, &out, &s->err);
    if (st != MK_OK) return st;
    s->tokens[s->n_past++] = token;
    s->next = out;
    s->next_emitted = false;
    s->last_token = token;
    return MK_OK;
}

enum mk_status mk_session_feed(struct mk_session *s, const int32_t *ids, size_t n) {
    mk_error_clear(&s->err);
    const uint32_t n_vocab = s->lm->model->cfg.n_vocab;
    const size_t pending = s->next_emitted ? 1 : 0;
    const uint32_t n_ctx = s->backend->n_ctx;
    if (n + pending > (size_t)(n_ctx - s->n_past))
        return mk_error_set(&s->err, MK_ERR_CONTEXT_FULL,
                            "context full: %zu tokens do not fit in the %u free positions (n_ctx = %u, %u used)",
                            n + pending, (unsigned)(n_ctx - s->n_past), (unsigned)n_ctx, (unsigned)s->n_past);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
            return mk_error_set(&s->err, MK_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary [0, %u)",
                                (int)ids[i], i, (unsigned)n_vocab);
    double t0 = mk_api_now_ms();
    enum mk_status st = MK_OK;
    if (pending) {
        st = mk_session_step(s, s->next);
        if (st == MK_OK) s->timings.n_prompt++;
    }
    for (size_t i = 0; st == MK_OK && i < n; i++) {
        st = mk_session_step(s, ids[i]);
        if (st == MK_OK) s->timings.n_prompt++;
    }
    s->timings.prompt_ms += mk_api_now_ms() - t0;
    return st;
}

/* Tokenizes into a growing buffer; *ids is malloc'ed (or NULL). Returns the count or a negative status. */
static int64_t mk_api_tokenize_alloc(const struct mk_lm *lm, const char *text, bool at_start, int32_t **ids) {
    *ids = NULL;
    size_t cap = strlen(text) + 4;
    for (;;) {
        int32_t *grown = realloc(*ids, cap * sizeof **ids);
        if (!grown) {
            free(*ids);
            *ids = NULL;
            return MK_ERR_NOMEM;
        }
        *ids = grown;
        int64_t n = at_start ? mk_lm_tokenize_prompt(lm, text, *ids, cap)
                             : mk_lm_tokenize(lm, text, strlen(text), false, false, *ids, cap);
        if (n < 0 || (uint64_t)n <= cap) return n;
        cap = (size_t)n;
    }
}

int64_t mk_lm_tokenize_prompt(const struct mk_lm *lm, const char *text, int32_t *ids, size_t cap) {
    if (!lm->tok) return MK_ERR_UNSUPPORTED;
    const int32_t bos = lm->model->vocab.bos;
    const size_t len = text ? strlen(text) : 0;
    if (len == 0) {
        if (bos < 0) return MK_ERR_INVALID_ARG;
        if (cap >= 1) ids[0] = bos;
        return 1;
    }
    return mk_tokenizer_encode(lm->tok, text, len, mk_tokenizer_add_bos(lm->tok) && bos >= 0, false, ids, cap);
}

enum mk_status mk_session_feed_text(struct mk_session *s, const char *text) {
    mk_error_clear(&s->err);
    const struct mk_lm *lm = s->lm;
    if (!lm->tok)
        return mk_error_set(&s->err, MK_ERR_UNSUPPORTED, "%s has no vocabulary: feed token ids instead",
                            mk_gguf_path(lm->model->gguf));
    if (!text) text = "";
    const bool at_start = s->n_past == 0 && !s->next_emitted;
    if (at_start && !text[0] && lm->model->vocab.bos < 0)
        return mk_error_set(&s->err, MK_ERR_INVALID_ARG,
                            "empty prompt and the vocabulary has no BOS token: nothing to start from");
    int32_t *ids;
    int64_t n = mk_api_tokenize_alloc(lm, text, at_start, &ids);
    enum mk_status st;
    if (n < 0)
        st = mk_error_set(&s->err, (enum mk_status)n, "tokenizing a prompt of %zu bytes failed: %s", strlen(text),
                          mk_status_str((enum mk_status)n));
    else if (n == 0)
        st = MK_OK;
    else
        st = mk_session_feed(s, ids, (size_t)n);
    free(ids);
    return st;
}

const char *mk_stop_reason_str(enum mk_stop_reason r) {
    switch (r) {
    case MK_STOP_NONE: return "error";
    case MK_STOP_LENGTH: return "length";
    case MK_STOP_EOS: return "end of sequence";
    case MK_STOP_CALLBACK: return "stopped by the callback";
    case MK_STOP_CONTEXT_FULL: return "context full";
    case MK_STOP_CANCELLED: return "cancelled";
    case MK_STOP_EOG: return "end of generation";
    }
    return "unknown";
}

enum mk_status mk_session_generate(struct mk_session *s, int32_t n_max, mk_token_fn fn, void *user,
                                   enum mk_stop_reason *why, uint32_t *n_generated) {
    mk_error_clear(&s->err);
    enum mk_stop_reason reason = MK_STOP_NONE;
    uint32_t count = 0;
    enum mk_status st = MK_OK;
    if (s->next < 0) {
        st = mk_error_set(&s->err, MK_ERR_INVALID_ARG, "generate: nothing was fed: feed a prompt (or BOS) first");
        goto done;
    }
    const int32_t eos = s->lm->model->vocab.eos;
    const bool stop_eog = !s->ignore_eog;
    char small[64];
    char *piece = small;
    size_t piece_cap = sizeof small;
    for (;;) {
        if (n_max >= 0 && count >= (uint32_t)n_max) {
            reason = MK_STOP_LENGTH;
            break;
        }
        if (!s->next_emitted && __atomic_exchange_n(&s->cancel, 0, __ATOMIC_ACQ_REL)) {
            reason = MK_STOP_CANCELLED;
            break;
        }
        if (s->next_emitted) {
            if (s->n_past >= s->backend->n_ctx) {
                reason = MK_STOP_CONTEXT_FULL;
                break;
            }
            double t0 = mk_api_now_ms();
            st = mk_session_step(s, s->next);
            s->timings.eval_ms += mk_api_now_ms() - t0;
            if (st == MK_ERR_CANCELLED) {
                mk_error_clear(&s->err);
                st = MK_OK;
                reason = MK_STOP_CANCELLED;
                break;
            }
            if (st != MK_OK) break;
            s->timings.n_eval++;
        }
        const int32_t tok = s->next;
        if (stop_eog && mk_lm_is_eog(s->lm, tok)) {
            reason = tok == eos ? MK_STOP_EOS : MK_STOP_EOG;
            break;
        }
        s->next_emitted = true;
        count++;
        s->timings.n_generated++;
        if (fn) {
            size_t len = mk_lm_token_piece(s->lm, s->last_token, tok, piece, piece_cap);
            if (len > piece_cap) {
                char *grown = malloc(len);
                if (!grown) {
                    st = mk_error_set(&s->err, MK_ERR_NOMEM, "generate: out of memory for a piece of %zu bytes", len);
                    break;
                }
                if (piece != small) free(piece);
                piece = grown;
                piece_cap = len;
                len = mk_lm_token_piece(s->lm, s->last_token, tok, piece, piece_cap);
            }
            if (fn(user, tok, piece, len)) {
                reason = MK_STOP_CALLBACK;
                break;
            }
        }
    }
    if (piece != small) free(piece);
done:
    if (why) *why = st == MK_OK ? reason : MK_STOP_NONE;
    if (n_generated) *n_generated = count;
    return st;
}

void mk_session_cancel(struct mk_session *s) { __atomic_store_n(&s->cancel, 1, __ATOMIC_RELEASE); }

enum mk_status mk_session_reset(struct mk_session *s) {
    mk_error_clear(&s->err);
    enum mk_status st = s->backend->vt->reset(s->backend, &s->err);
    if (st != MK_OK) return st;
    s->n_past = 0;
    s->next = -1;
    s->next_emitted = false;
    s->last_token = -1;
    double load_ms = s->timings.load_ms, init_ms = s->timings.init_ms;
    memset(&s->timings, 0, sizeof s->timings);
    s->timings.load_ms = load_ms;
    s->timings.init_ms = init_ms;
    return MK_OK;
}

enum mk_status mk_session_rewind(struct mk_session *s, uint32_t n_keep) {
    mk_error_clear(&s->err);
    if (n_keep > s->n_past)
        return mk_error_set(&s->err, MK_ERR_INVALID_ARG, "rewind: cannot keep %u positions, only %u are evaluated",
                            (unsigned)n_keep, (unsigned)s->n_past);
    if (n_keep == 0) {
        /* The reference backend keeps logits until reset; the others keep nothing per sequence. */
        enum mk_status st = s->backend->vt->reset(s->backend, &s->err);
        if (st != MK_OK) return st;
    }
    /* Positions at or after n_keep are overwritten by the next steps before any attention reads them. */
    s->n_past = n_keep;
    s->next = -1;
    s->next_emitted = false;
    s->last_token = n_keep ? s->tokens[n_keep - 1] : -1;
    return MK_OK;
}

enum mk_status mk_session_feed_sequence(struct mk_session *s, const int32_t *ids, size_t n, uint32_t *n_reused) {
    mk_error_clear(&s->err);
    if (n_reused) *n_reused = 0;
    const uint32_t n_ctx = s->backend->n_ctx;
    if (n == 0 || !ids) return mk_error_set(&s->err, MK_ERR_INVALID_ARG, "feed_sequence: no tokens");
    if (n > n_ctx)
        return mk_error_set(&s->err, MK_ERR_CONTEXT_FULL,
                            "context full: a sequence of %zu tokens does not fit in n_ctx = %u", n, (unsigned)n_ctx);
    size_t keep = 0;
    while (keep < s->n_past && keep < n && s->tokens[keep] == ids[keep]) keep++;
    /* The last generated token, sampled but not evaluated, counts as held when it is what comes next. */
    const bool pending = keep == s->n_past && s->next_emitted && keep < n && ids[keep] == s->next;
    if (!pending && keep == n) keep = n - 1; /* the last token is evaluated again for its logits */
    enum mk_status st = MK_OK;
    if (!pending && (keep < s->n_past || s->next_emitted)) st = mk_session_rewind(s, (uint32_t)keep);
    if (st != MK_OK) return st;
    const size_t from = keep + (pending ? 1 : 0);
    st = mk_session_feed(s, ids + from, n - from);
    if (st == MK_OK && n_reused) *n_reused = (uint32_t)keep;
    return st;
}

enum mk_status mk_session_logits(struct mk_session *s, float *out, size_t cap) {
    mk_error_clear(&s->err);
    const uint32_t n_vocab = s->lm->model->cfg.n_vocab;
    if (cap < n_vocab)
        return mk_error_set(&s->err, MK_ERR_INVALID_ARG, "logits: room for %zu floats, the vocabulary has %u", cap,
                            (unsigned)n_vocab);
    if (s->n_past == 0) return mk_error_set(&s->err, MK_ERR_INVALID_ARG, "logits: nothing was evaluated yet");
    return s->backend->vt->logits(s->backend, out, &s->err);
}

struct mk_timings mk_session_timings(const struct mk_session *s) {
    return s->timings;
}

enum mk_backend_kind mk_session_backend_kind(const struct mk_session *s) { return s->backend->kind; }

const char *mk_session_backend_name(const struct mk_session *s) { return mk_backend_kind_name(s->backend->kind); }

uint32_t mk_session_n_ctx(const struct mk_session *s) { return s->backend->n_ctx; }

uint32_t mk_session_n_past(const struct mk_session *s) { return s->n_past; }

uint64_t mk_session_seed(const struct mk_session *s) { return s->sampling.seed; }
