/* The public C API (runtime/mk.h): models with their tokenizer, sessions over a backend, streaming generation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/mk.h"
#include "core/chat.h"
#include "core/gguf.h"
#include "core/model.h"
#include "core/tokenizer.h"
#include "graph/lookup.h"
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
    bool ignore_eog;                    /* generation does not stop on end-of-generation tokens */
    struct mk_timings timings;
    struct mk_error err;
    int cancel;       /* set by mk_session_cancel from any thread; taken by the next step */
    uint32_t ubatch;  /* most tokens per step (1: the backend has no chunk steps) */
    bool spec;        /* prompt-lookup speculation is on (greedy and ubatch > 1) */
    uint32_t n_draft; /* most tokens a speculation proposes (<= ubatch - 1) */
    int32_t *hist;    /* (n_ctx) the token at each position evaluated: prompt lookup, feed_sequence */
    int32_t *chunk;   /* (ubatch) tokens of a chunk step */
    int32_t *outs;    /* (ubatch) its output tokens */
    /* Outputs a verification step already produced for the positions after `next`: queue[q_head
     * + i] is the greedy token after position n_past + i, whose input (next, then the queue's
     * earlier entries) that step evaluated too. */
    int32_t *queue; /* (ubatch) */
    uint32_t q_head, q_len;
    /* Adaptive draft length: acceptance and cost estimates, and the draft prompt lookup would have
     * made at a plain step, scored against what greedy decoding then gives (mk_spec_score). */
    struct mk_lookup_stats spec_stats;
    int32_t *shadow; /* (ubatch) */
    uint32_t shadow_len, shadow_at, shadow_ngram;
    /* The last verification step's draft length and time, scored at the next step: a plain step
     * after it pays for bringing the one-token loop back (the megakernel leaves it for chunk
     * steps), which belongs to the verification. */
    uint32_t spec_pend_k;
    double spec_pend_ms;
    uint32_t logits_pos0, logits_rows; /* position of the last step's output row 0, and its rows */
    bool host_loop;                    /* generate steps one token at a time even where the backend has generate */
    bool logits_ahead;                 /* the backend's last step is past n_past - 1 (a device generation ran on) */
    int32_t stop_ids[MK_GEN_MAX_STOP]; /* the device generation's stop set: the end-of-generation ids */
    uint32_t n_stop_ids;
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
        .kv_type = MK_KV_F16,
    };
    return p;
}

/* The public mirror of the GPU settings, field by field (mk.h includes only standard headers). */
static struct mk_gpu_settings mk_api_gpu_settings(const struct mk_gpu_params *g) {
    struct mk_gpu_settings s = mk_gpu_default_settings();
    s.dynamic_schedule = g->dynamic_schedule != 0;
    s.tasks_per_worker = g->tasks_per_worker;
    s.attn_block = g->attn_block;
    s.attn_solo = g->attn_solo;
    s.attn_splits = g->attn_splits;
    s.fuse_attn_output = g->fuse_attn_output != 0;
    s.attn_merge = g->attn_merge == 1 || g->attn_merge == 2 ? (uint32_t)g->attn_merge : 0u;
    s.blocks_per_sm = g->blocks_per_sm;
    s.no_rope_table = g->no_rope_table != 0;
    s.chunk_dequant_min = g->chunk_dequant_min;
    s.no_pdl = g->no_pdl != 0;
    s.no_chunk_kq = g->no_chunk_kq != 0;
    s.mv_blocks = g->mv_blocks;
    s.no_mv_kq8 = g->no_mv_kq8 != 0;
    s.no_fold = g->no_fold != 0;
    s.no_attn_h16 = g->no_attn_h16 != 0;
    s.xb_rows = g->xb_rows;
    s.xb_load = (enum mk_xb_load)g->xb_load;
    s.trace = (enum mk_gpu_trace)g->trace;
    s.kernel_image = g->kernel_image;
    s.no_float_image = g->no_float_image != 0;
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
    if (p->kv_type != MK_KV_F16 && p->kv_type != MK_KV_F32)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: kv_type = %d (want MK_KV_F16 or MK_KV_F32)",
                            (int)p->kv_type);
    if (p->gpu.trace < 0 || p->gpu.trace > 2)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: gpu.trace = %d (want 0, 1 or 2)",
                            p->gpu.trace);
    if (!mk_gpu_xb_rows_valid(p->gpu.xb_rows))
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: gpu.xb_rows = %u (want 0, 128, 192 or 256)",
                            p->gpu.xb_rows);
    if (p->gpu.xb_load < MK_XB_LOAD_AUTO || p->gpu.xb_load > MK_XB_LOAD_TMA)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_session_create: gpu.xb_load = %d (want 0, 1 or 2)",
                            p->gpu.xb_load);
    double t0 = mk_api_now_ms();
    struct mk_session *s = calloc(1, sizeof *s);
    if (!s) return mk_error_set(err, MK_ERR_NOMEM, "mk_session_create: out of memory");
    s->lm = lm;
    s->sampling = *sp;
    if (s->sampling.seed == MK_SEED_RANDOM) s->sampling.seed = mk_api_random_seed(s);
    s->next = -1;
    s->last_token = -1;
    s->ignore_eog = p->ignore_eog != 0;
    s->host_loop = p->host_loop != 0;
    struct mk_backend_params bp = {
        .ubatch = p->ubatch,
        .kind = p->backend,
        .n_ctx = p->n_ctx ? p->n_ctx : (c->n_ctx_train && c->n_ctx_train < 4096 ? c->n_ctx_train : 4096),
        .n_threads = p->n_threads,
        .watchdog_ms = p->watchdog_ms,
        .device = p->device,
        .verbose = p->verbose,
        .gpu = mk_api_gpu_settings(&p->gpu),
        .fault = p->fault,
        .kv_type = p->kv_type,
        .act_f32 = p->act_f32 != 0,
    };
    enum mk_status st = mk_backend_create(lm->model, &bp, &s->backend, err);
    if (st != MK_OK) {
        free(s);
        return st;
    }
    const uint32_t n_ctx = s->backend->n_ctx;
    s->ubatch = s->backend->vt->step_chunk && s->backend->ubatch > 1 ? s->backend->ubatch : 1;
    s->spec = p->spec == MK_SPEC_LOOKUP && sp->temperature <= 0.0f && s->ubatch > 1;
    s->n_draft = p->n_draft ? p->n_draft : 8;
    if (s->n_draft > s->ubatch - 1) s->n_draft = s->ubatch - 1;
    s->hist = malloc((size_t)n_ctx * sizeof *s->hist);
    s->chunk = malloc((size_t)s->ubatch * sizeof *s->chunk);
    s->outs = malloc((size_t)s->ubatch * sizeof *s->outs);
    s->queue = malloc((size_t)s->ubatch * sizeof *s->queue);
    s->shadow = malloc((size_t)s->ubatch * sizeof *s->shadow);
    s->spec_stats = mk_lookup_stats_init();
    if (!s->ignore_eog) {
        /* More than the device checks: the host still stops on every one, a few steps later. */
        if (lm->tok) {
            size_t n = mk_tokenizer_eog_ids(lm->tok, s->stop_ids, MK_GEN_MAX_STOP);
            s->n_stop_ids = n < MK_GEN_MAX_STOP ? (uint32_t)n : MK_GEN_MAX_STOP;
        } else if (lm->model->vocab.eos >= 0) {
            s->stop_ids[s->n_stop_ids++] = lm->model->vocab.eos;
        }
    }
    if (!s->hist || !s->chunk || !s->outs || !s->queue || !s->shadow) {
        mk_session_free(s);
        return mk_error_set(err, MK_ERR_NOMEM, "mk_session_create: out of memory for %u positions", n_ctx);
    }
    if (p->verbose && p->spec == MK_SPEC_LOOKUP && !s->spec)
        fprintf(stderr, "mk: speculation off (%s)\n",
                sp->temperature > 0.0f ? "temperature > 0: greedy decoding only" : "the backend has no chunk steps");
    s->timings.load_ms = lm->load_ms;
    s->timings.init_ms = mk_api_now_ms() - t0;
    mk_error_clear(&s->err);
    *out = s;
    return MK_OK;
}

void mk_session_free(struct mk_session *s) {
    if (!s) return;
    if (s->backend) s->backend->vt->free(s->backend);
    free(s->hist);
    free(s->chunk);
    free(s->outs);
    free(s->queue);
    free(s->shadow);
    free(s);
}

const char *mk_session_last_error(const struct mk_session *s) { return s->err.msg; }

const struct mk_error *mk_session_error(const struct mk_session *s) { return &s->err; }

/* A step of token at the next position with the session's sampling settings. */
static struct mk_step_cmd mk_session_cmd(const struct mk_session *s, int32_t token) {
    return (struct mk_step_cmd){
        .cmd = MK_CMD_STEP,
        .token = token,
        .pos = (int32_t)s->n_past,
        .temperature = s->sampling.temperature,
        .top_k = s->sampling.top_k,
        .top_p = s->sampling.top_p,
        .min_p = s->sampling.min_p,
        .seed = s->sampling.seed,
    };
}

/* One step of the n tokens at the next positions (a chunk step when n > 1); the last n_out rows'
 * tokens go to s->outs, the last one becomes s->next, and n_past moves past all n. */
static enum mk_status mk_session_step_n(struct mk_session *s, const int32_t *tokens, uint32_t n, uint32_t n_out) {
    struct mk_step_cmd cmd = mk_session_cmd(s, tokens[0]);
    cmd.n_tokens = (uint16_t)n;
    cmd.n_out = (uint16_t)n_out;
    if (__atomic_exchange_n(&s->cancel, 0, __ATOMIC_ACQ_REL))
        return mk_error_set(&s->err, MK_ERR_CANCELLED, "cancelled before position %u", (unsigned)s->n_past);
    enum mk_status st = n == 1 ? s->backend->vt->step(s->backend, &cmd, &s->outs[0], &s->err)
                               : mk_backend_step_chunk(s->backend, &cmd, tokens, s->outs, &s->err);
    if (st != MK_OK) return st;
    memcpy(s->hist + s->n_past, tokens, n * sizeof *tokens);
    s->logits_pos0 = s->n_past + n - n_out;
    s->logits_rows = n_out;
    s->logits_ahead = false;
    s->n_past += n;
    s->next = s->outs[n_out - 1];
    s->next_emitted = false;
    s->last_token = tokens[n - 1];
    s->q_len = 0;
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
    s->shadow_len = 0; /* a draft scored against generated tokens, not fed ones */
    /* Chunks of up to ubatch tokens (the pending token first); only each chunk's last row needs
     * logits, and only the last chunk's token is kept. */
    size_t done = 0;
    while (st == MK_OK && done < n + pending) {
        uint32_t k = 0;
        for (; k < s->ubatch && done + k < n + pending; k++)
            s->chunk[k] = pending && done + k == 0 ? s->next : ids[done + k - pending];
        st = mk_session_step_n(s, s->chunk, k, 1);
        if (st != MK_OK) break;
        done += k;
        s->timings.n_prompt += k;
        s->timings.n_prompt_steps++;
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

/* Scores the drafts prompt lookup would have made at positions from .. n_past - 1, which plain
 * steps evaluated: a draft is followed until it misses or runs out, then the next position's
 * opens. The acceptance estimate so learns from every token, verified or not. */
static void mk_spec_score(struct mk_session *s, uint32_t from) {
    for (uint32_t i = from; i < s->n_past; i++) {
        const int32_t follow = i + 1 < s->n_past ? s->hist[i + 1] : s->next;
        if (!s->shadow_len) {
            s->shadow_len = mk_lookup_draft(s->hist, (size_t)i + 1, s->n_draft, s->shadow, &s->shadow_ngram);
            s->shadow_at = 0;
            if (!s->shadow_len) continue;
        }
        const int hit = follow == s->shadow[s->shadow_at];
        mk_lookup_stats_token(&s->spec_stats, s->shadow_ngram, hit);
        if (!hit || ++s->shadow_at == s->shadow_len) s->shadow_len = 0;
    }
}

/* A step's time into the cost estimates: a verification of k drafted tokens, or (k = 0) a plain
 * step. */
static void mk_spec_timed(struct mk_session *s, uint32_t k, double ms) {
    if (s->spec_pend_k) {
        double v = s->spec_pend_ms;
        if (!k && s->spec_stats.step_ms > 0 && ms > s->spec_stats.step_ms) v += ms - s->spec_stats.step_ms;
        mk_lookup_stats_verify(&s->spec_stats, s->spec_pend_k, v);
        s->spec_pend_k = 0;
        if (!k) return; /* this step's own time is not a plain one's */
    }
    if (k) {
        s->spec_pend_k = k;
        s->spec_pend_ms = ms;
    } else {
        mk_lookup_stats_plain(&s->spec_stats, ms);
    }
}

/* Evaluates s->next at the next position (its sampled successor becomes s->next), but takes the
 * output from a verification step's queue when it already has it, and otherwise, with speculation
 * on, verifies as much of a prompt-lookup draft as pays in the same step. left: tokens the caller may still emit after next. */
static enum mk_status mk_session_advance(struct mk_session *s, uint64_t left) {
    if (s->q_len) {
        if (__atomic_exchange_n(&s->cancel, 0, __ATOMIC_ACQ_REL))
            return mk_error_set(&s->err, MK_ERR_CANCELLED, "cancelled before position %u", (unsigned)s->n_past);
        s->hist[s->n_past++] = s->next;
        s->last_token = s->next;
        s->next = s->queue[s->q_head++];
        s->q_len--;
        s->next_emitted = false;
        return MK_OK;
    }
    uint32_t room = s->backend->n_ctx - s->n_past; /* >= 1: the caller checked */
    uint64_t max = s->spec ? s->n_draft : 0;
    if (max > left) max = left;
    if (max > room - 1u) max = room - 1u;
    uint32_t k = 0, ngram = 0;
    if (max) {
        /* The context so far is hist[0..n_past) then next. */
        s->hist[s->n_past] = s->next;
        k = mk_lookup_draft(s->hist, s->n_past + 1, (uint32_t)max, s->chunk + 1, &ngram);
        k = mk_lookup_choose(s->spec_stats.accept[ngram], s->spec_stats.c0, s->spec_stats.beta, k);
    }
    s->chunk[0] = s->next;
    const uint32_t base = s->n_past;
    const double t0 = s->spec ? mk_api_now_ms() : 0; /* the draft-length estimates need step times */
    enum mk_status st = mk_session_step_n(s, s->chunk, k + 1, k + 1);
    if (st != MK_OK || !s->spec) return st;
    const double ms = mk_api_now_ms() - t0;
    mk_spec_timed(s, k, ms);
    if (!k) {
        mk_spec_score(s, base);
        return MK_OK;
    }
    s->shadow_len = 0;
    /* outs[i] is greedy's token after chunk[i]; draft token chunk[i + 1] holds while it matches. */
    uint32_t j = 0;
    while (j < k && s->outs[j] == s->chunk[j + 1]) j++;
    for (uint32_t i = 0; i < j; i++) mk_lookup_stats_token(&s->spec_stats, ngram, 1);
    if (j < k) mk_lookup_stats_token(&s->spec_stats, ngram, 0);
    s->timings.n_spec_steps++;
    s->timings.n_drafted += k;
    s->timings.n_accepted += j;
    /* Keep position base (next) evaluated; the j accepted positions after it wait in the queue.
     * The KV entries of rejected drafts are dead: positions past n_past are rewritten before any
     * step attends to them. */
    s->n_past = base + 1;
    s->last_token = s->chunk[0];
    s->next = s->outs[0];
    memcpy(s->queue, s->outs + 1, j * sizeof *s->queue);
    s->q_head = 0;
    s->q_len = j;
    return MK_OK;
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

/* One generation's progress, shared by the host's token loop and the device's. */
struct mk_gen_run {
    struct mk_session *s;
    mk_token_fn fn;
    void *user;
    int32_t n_max;
    uint32_t count;
    enum mk_stop_reason reason;
    enum mk_status st;
    char small[64];
    char *piece;
    size_t piece_cap;
};

/* Hands s->next (sampled, not yet given out) to the caller; true when generation ends here. */
static bool mk_gen_emit(struct mk_gen_run *g) {
    struct mk_session *s = g->s;
    const int32_t tok = s->next;
    if (!s->ignore_eog && mk_lm_is_eog(s->lm, tok)) {
        g->reason = tok == s->lm->model->vocab.eos ? MK_STOP_EOS : MK_STOP_EOG;
        return true;
    }
    s->next_emitted = true;
    g->count++;
    s->timings.n_generated++;
    if (!g->fn) return false;
    size_t len = mk_lm_token_piece(s->lm, s->last_token, tok, g->piece, g->piece_cap);
    if (len > g->piece_cap) {
        char *grown = malloc(len);
        if (!grown) {
            g->st = mk_error_set(&s->err, MK_ERR_NOMEM, "generate: out of memory for a piece of %zu bytes", len);
            return true;
        }
        if (g->piece != g->small) free(g->piece);
        g->piece = grown;
        g->piece_cap = len;
        len = mk_lm_token_piece(s->lm, s->last_token, tok, g->piece, g->piece_cap);
    }
    if (g->fn(g->user, tok, g->piece, len)) {
        g->reason = MK_STOP_CALLBACK;
        return true;
    }
    return false;
}

/* Token i of a device generation: the step evaluated s->next at n_past and sampled token. */
static bool mk_gen_on_device_token(void *user, uint32_t i, int32_t token, uint64_t step_ns) {
    (void)i;
    struct mk_gen_run *g = user;
    struct mk_session *s = g->s;
    s->backend->last_step_ns = step_ns; /* what mk_session_timings reports while the callback runs */
    s->hist[s->n_past++] = s->next;
    s->last_token = s->next;
    s->next = token;
    s->next_emitted = false;
    s->timings.n_eval++;
    if (mk_gen_emit(g)) return true;
    if (g->n_max >= 0 && g->count >= (uint32_t)g->n_max) {
        g->reason = MK_STOP_LENGTH;
        return true;
    }
    if (__atomic_exchange_n(&s->cancel, 0, __ATOMIC_ACQ_REL)) {
        g->reason = MK_STOP_CANCELLED;
        return true;
    }
    return false;
}

/* The rest of the generation as one device token loop (s->next is emitted, room >= 1). */
static enum mk_status mk_gen_on_device(struct mk_gen_run *g) {
    struct mk_session *s = g->s;
    uint64_t max = s->backend->n_ctx - s->n_past;
    if (g->n_max >= 0 && (uint64_t)g->n_max - g->count < max) max = (uint64_t)g->n_max - g->count;
    const struct mk_step_cmd cmd = mk_session_cmd(s, s->next);
    const struct mk_backend_gen gen = {
        .max_steps = (uint32_t)max,
        .stop = s->stop_ids,
        .n_stop = s->n_stop_ids,
        .on_token = mk_gen_on_device_token,
        .user = g,
    };
    const uint32_t base = s->n_past;
    struct mk_backend_gen_result r;
    const double t0 = mk_api_now_ms();
    enum mk_status st = s->backend->vt->generate(s->backend, &cmd, &gen, &r, &s->err);
    s->timings.eval_ms += mk_api_now_ms() - t0;
    s->logits_pos0 = s->n_past - 1;
    s->logits_rows = 1;
    s->logits_ahead = st != MK_OK || r.n_steps != s->n_past - base;
    s->q_len = 0;
    if (st == MK_OK && !r.n_delivered)
        st = mk_error_set(&s->err, MK_ERR_INTERNAL, "%s: a generation from position %u gave no token",
                          s->backend->vt->name, (unsigned)base);
    return st;
}

enum mk_status mk_session_generate(struct mk_session *s, int32_t n_max, mk_token_fn fn, void *user,
                                   enum mk_stop_reason *why, uint32_t *n_generated) {
    mk_error_clear(&s->err);
    struct mk_gen_run g = { .s = s, .fn = fn, .user = user, .n_max = n_max, .reason = MK_STOP_NONE, .st = MK_OK };
    g.piece = g.small;
    g.piece_cap = sizeof g.small;
    if (s->next < 0) {
        g.st = mk_error_set(&s->err, MK_ERR_INVALID_ARG, "generate: nothing was fed: feed a prompt (or BOS) first");
        goto done;
    }
    const bool device_loop = s->backend->vt->generate && !s->host_loop && !s->spec;
    for (;;) {
        if (n_max >= 0 && g.count >= (uint32_t)n_max) {
            g.reason = MK_STOP_LENGTH;
            break;
        }
        if (!s->next_emitted && __atomic_exchange_n(&s->cancel, 0, __ATOMIC_ACQ_REL)) {
            g.reason = MK_STOP_CANCELLED;
            break;
        }
        if (s->next_emitted) {
            if (s->n_past >= s->backend->n_ctx) {
                g.reason = MK_STOP_CONTEXT_FULL;
                break;
            }
            if (device_loop && !s->q_len) {
                const enum mk_status dst = mk_gen_on_device(&g);
                if (dst != MK_OK) g.st = dst; /* else keep what the callback path set (out of memory) */
                if (g.st != MK_OK || g.reason != MK_STOP_NONE) break;
                continue; /* it ended by its budget or at the context's end: the checks above say which */
            }
            double t0 = mk_api_now_ms();
            g.st = mk_session_advance(s, n_max >= 0 ? (uint64_t)n_max - g.count - 1 : UINT64_MAX);
            s->timings.eval_ms += mk_api_now_ms() - t0;
            if (g.st == MK_ERR_CANCELLED) {
                mk_error_clear(&s->err);
                g.st = MK_OK;
                g.reason = MK_STOP_CANCELLED;
                break;
            }
            if (g.st != MK_OK) break;
            s->timings.n_eval++;
        }
        if (mk_gen_emit(&g)) break;
    }
    if (g.piece != g.small) free(g.piece);
done:
    if (why) *why = g.st == MK_OK ? g.reason : MK_STOP_NONE;
    if (n_generated) *n_generated = g.count;
    return g.st;
}

void mk_session_cancel(struct mk_session *s) { __atomic_store_n(&s->cancel, 1, __ATOMIC_RELEASE); }

enum mk_status mk_session_reset(struct mk_session *s) {
    mk_error_clear(&s->err);
    enum mk_status st = s->backend->vt->reset(s->backend, &s->err);
    if (st != MK_OK) return st;
    s->n_past = 0;
    s->q_len = 0;
    s->shadow_len = 0;
    s->logits_rows = 0;
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
    s->last_token = n_keep ? s->hist[n_keep - 1] : -1;
    s->q_len = 0; /* verified outputs queued for positions past n_keep are void */
    s->shadow_len = 0;
    s->logits_rows = 0;
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
    while (keep < s->n_past && keep < n && s->hist[keep] == ids[keep]) keep++;
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
    if (s->logits_ahead)
        return mk_error_set(&s->err, MK_ERR_UNSUPPORTED,
                            "logits: the device's token loop ran past position %u before generation stopped; create "
                            "the session with host_loop set to read logits after generating",
                            (unsigned)(s->n_past - 1));
    /* After a verification step the last evaluated position may be any of its rows. */
    uint32_t row = s->n_past - 1 - s->logits_pos0;
    if (s->logits_rows > 1 && row < s->logits_rows && s->backend->vt->logits_row)
        return s->backend->vt->logits_row(s->backend, row, out, &s->err);
    return s->backend->vt->logits(s->backend, out, &s->err);
}

struct mk_timings mk_session_timings(const struct mk_session *s) {
    struct mk_timings t = s->timings;
    t.last_step_device_ms = (double)s->backend->last_step_ns / 1e6;
    return t;
}

enum mk_backend_kind mk_session_backend_kind(const struct mk_session *s) { return s->backend->kind; }

const char *mk_session_backend_name(const struct mk_session *s) { return mk_backend_kind_name(s->backend->kind); }

uint32_t mk_session_n_ctx(const struct mk_session *s) { return s->backend->n_ctx; }

uint32_t mk_session_n_past(const struct mk_session *s) { return s->n_past; }

uint64_t mk_session_seed(const struct mk_session *s) { return s->sampling.seed; }
