/* mk's public C API: load a Llama-family GGUF, open decode sessions on any backend, stream tokens. */
#ifndef MK_H
#define MK_H

/* Usage:
 *
 *     struct mk_error err;
 *     struct mk_lm *lm;
 *     if (mk_lm_load("model.gguf", &lm, &err) != MK_OK) { puts(err.msg); ... }
 *     struct mk_session_params sp = mk_session_default_params();
 *     struct mk_session *s;
 *     if (mk_session_create(lm, &sp, &s, &err) != MK_OK) { ... }
 *     if (mk_session_feed_text(s, "Once upon a time") != MK_OK) puts(mk_session_last_error(s));
 *     mk_session_generate(s, 64, on_token, user, &why, &n);
 *     mk_session_free(s);
 *     mk_lm_free(lm);
 *
 * A model (struct mk_lm) is read-only once loaded: any number of sessions, in any threads, may
 * share it, and every mk_lm_* query is thread-safe. A session is used by one thread at a time (only
 * mk_session_cancel may come from another thread or a signal handler). There is no global state. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and backend kinds ----
 * These blocks (and the fault block below) are byte-identical copies of the ones in core/status.h
 * and graph/executor.h (tools/layers_check.sh compares them), so that this header needs nothing but standard headers. */

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

#ifndef MK_BACKEND_KIND_DEFINED
#define MK_BACKEND_KIND_DEFINED
enum mk_backend_kind {
    MK_BACKEND_AUTO = 0,
    MK_BACKEND_REF = 1,        /* straight CPU reference forward pass */
    MK_BACKEND_CPU = 2,        /* the program on pthread workers */
    MK_BACKEND_MEGAKERNEL = 3, /* one persistent cooperative kernel */
    MK_BACKEND_PEROP = 4,      /* one launch per instruction */
    MK_BACKEND_GRAPH = 5,      /* per-op launches captured in a CUDA graph */
};
const char *mk_backend_kind_name(enum mk_backend_kind k);
/* 0 when s names a kind (stored in *out), -1 when it names none. */
int mk_backend_kind_parse(const char *s, enum mk_backend_kind *out);
#endif /* MK_BACKEND_KIND_DEFINED */

#ifndef MK_FAULT_DEFINED
#define MK_FAULT_DEFINED
/* Test only: a backend fails on purpose in one step, so that tests can check that the session
 * reports it, frees what it holds and that the next session on the model works. */
enum mk_fault_kind {
    MK_FAULT_NONE = 0,
    MK_FAULT_ERROR = 1,       /* an op reports an error (gpu: the kernel reports a device error) */
    MK_FAULT_TRAP = 2,        /* cpu: a worker thread fails and ends; gpu: the kernel executes a trap */
    MK_FAULT_HANG = 3,        /* a worker (cpu) or a block (gpu) stops signalling: the watchdog must fire */
    MK_FAULT_BAD_ADDRESS = 4, /* gpu: the kernel writes to an unmapped address; cpu: as MK_FAULT_ERROR */
};
struct mk_fault {
    enum mk_fault_kind kind;
    uint32_t step; /* 0-based count of the backend's steps (prompt and generated tokens alike) */
};
#endif /* MK_FAULT_DEFINED */

#ifndef MK_KV_TYPE_DEFINED
#define MK_KV_TYPE_DEFINED
/* Elements of the KV cache (the values are ggml's type ids). f16, as llama.cpp's default, halves
 * the bytes attention reads per position; f32 keeps k and v exactly as computed. */
enum mk_kv_type {
    MK_KV_F32 = 0,
    MK_KV_F16 = 1,
};
#endif /* MK_KV_TYPE_DEFINED */

/* ---- Models ---- */

struct mk_lm; /* a loaded model and its tokenizer */

/* Reads and validates a GGUF file. err (may be NULL) names the file, key or tensor at fault. */
enum mk_status mk_lm_load(const char *path, struct mk_lm **out, struct mk_error *err);
/* What mk_lm_load_ex adds. The file is read into memory (not mapped): a file truncated or
 * rewritten while it is read fails the load with MK_ERR_IO, and one changed afterwards cannot
 * reach a session. */
struct mk_lm_load_params {
    /* Checked between chunks (64 MiB) of the read: once *cancel is nonzero (set it from any thread
     * or a signal handler), the load stops with MK_ERR_CANCELLED and frees what it read. NULL:
     * not cancellable. */
    const int *cancel;
};
enum mk_status mk_lm_load_ex(const char *path, const struct mk_lm_load_params *p, struct mk_lm **out,
                             struct mk_error *err);
void mk_lm_free(struct mk_lm *lm);

struct mk_lm_info {
    const char *arch;      /* "llama", "mistral", "qwen2", "qwen3" */
    const char *tokenizer; /* "llama" (SentencePiece), "gpt2" (byte-level BPE), or "" when none */
    uint32_t n_vocab, n_ctx_train, n_embd, n_ff, n_layer, n_head, n_head_kv;
    uint64_t n_params;
    uint64_t bytes_per_token; /* weight bytes one decode step reads */
    int32_t bos, eos;         /* -1 when absent */
    bool
        add_bos; /* prompts start with BOS (tokenizer.ggml.add_bos_token, else llama.cpp's default for the vocabulary) */
    bool can_decode; /* false for vocabulary-only files */
    double load_ms;
};
struct mk_lm_info mk_lm_get_info(const struct mk_lm *lm);

/* Every mk_lm_* function below only reads the model: any number of threads may call them at once
 * on one model (mk_lm_free must come after all of them). */

/* Tokenizes len bytes of text. add_bos adds the special tokens the file asks for, as llama.cpp's
 * add_special does: BOS when tokenizer.ggml.add_bos_token is true (absent, its default is true for
 * SentencePiece vocabularies and for the BPE pre-tokenizers llama.cpp starts with BOS, such as
 * llama-bpe; mk_lm_info.add_bos says what applies), EOS when add_eos_token is true; false adds
 * neither. parse_special turns control-token text such as "<s>" or "<|im_start|>" into its id
 * (false tokenizes it as plain text). SentencePiece vocabularies add the dummy-prefix space.
 * Writes at most cap ids and returns how many the text needs (call again with more room when
 * that exceeds cap), or a negative enum mk_status. */
int64_t mk_lm_tokenize(const struct mk_lm *lm, const char *text, size_t len, bool add_bos, bool parse_special,
                       int32_t *ids, size_t cap);
/* Tokenizes a prompt the way mk_session_feed_text does at the start of a sequence: BOS first
 * when the vocabulary adds it, the dummy-prefix space, control-token text left as text, and an
 * empty prompt as BOS alone. Same return convention as mk_lm_tokenize. */
int64_t mk_lm_tokenize_prompt(const struct mk_lm *lm, const char *text, int32_t *ids, size_t cap);
/* Text of one token; prev_id is the token before it (-1 at the start) so that the dummy-prefix
 * space after BOS is dropped. Control tokens ("<|im_end|>") give no text. Writes at most cap bytes
 * (no NUL); returns the bytes needed. */
size_t mk_lm_token_piece(const struct mk_lm *lm, int32_t prev_id, int32_t id, char *out, size_t cap);
/* Text of a whole sequence, same conventions. */
size_t mk_lm_detokenize(const struct mk_lm *lm, const int32_t *ids, size_t n, char *out, size_t cap);
/* The vocabulary's raw text of token id: "<|im_end|>", "\xe2\x96\x81the" (U+2581 marks a space in
 * SentencePiece vocabularies), "<0x0A>" for a byte token. Writes at most cap bytes (no NUL) and
 * returns the bytes needed, or MK_ERR_INVALID_ARG for an id outside the vocabulary
 * (MK_ERR_UNSUPPORTED for a file without one). */
int64_t mk_lm_token_text(const struct mk_lm *lm, int32_t id, char *out, size_t cap);
/* True when id ends generation: EOS, EOT (tokenizer.ggml.eot_token_id), EOM, and tokens such as
 * <|im_end|>, <|eot_id|>, <|eom_id|>, <end_of_turn> that llama.cpp treats as such. */
bool mk_lm_is_eog(const struct mk_lm *lm, int32_t id);

/* ---- Chat templates ---- */

/* One turn of a conversation. */
struct mk_chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 text */
};

/* The i-th name mk_lm_chat_apply accepts ("chatml", "llama3", "mistral-v7", ...), NULL past the
 * last one. */
const char *mk_chat_template_name_at(size_t i);

/* Name of the built-in template the file's tokenizer.chat_template stands for (detected the way
 * llama.cpp detects its built-in templates), or NULL when the file has none or one mk does not
 * render. */
const char *mk_lm_chat_template(const struct mk_lm *lm);

/* Renders n messages with a chat template, then the assistant's opening when
 * add_generation_prompt, byte for byte as llama.cpp's llama_chat_apply_template. tmpl names a
 * built-in template (see mk_chat_template_name_at) or is NULL for the one the file's
 * tokenizer.chat_template stands for. BOS is not written: tokenize the text with add_bos = true
 * and parse_special = true. Like snprintf, writes at most cap bytes, always NUL-terminated when
 * cap > 0 (truncated when the text does not fit), and returns the text's length (call again with more room when it is >= cap); or a
 * negative enum mk_status with err (may be NULL) saying why: MK_ERR_INVALID_ARG for an unknown
 * name or a message without role or content, MK_ERR_UNSUPPORTED when tmpl is NULL and the file
 * has no template or one mk does not render. */
int64_t mk_lm_chat_apply(const struct mk_lm *lm, const char *tmpl, const struct mk_chat_msg *msgs, size_t n,
                         bool add_generation_prompt, char *out, size_t cap, struct mk_error *err);

/* ---- Sessions ---- */

struct mk_session; /* a KV cache on one backend, the sampling settings and timings */

/* seed value meaning "pick one at session creation" (see mk_session_seed). */
#define MK_SEED_RANDOM UINT64_MAX

/* Sampling as llama.cpp applies it: top-k, then top-p, then min-p, then temperature, then one
 * draw whose uniform number depends only on (seed, position), so a fixed seed reproduces a run. */
struct mk_sampling_params {
    float temperature; /* <= 0: greedy (argmax, the lowest id on ties). Default 0.8 */
    int32_t top_k;     /* keep the k most likely; <= 0 or over 1024: 1024. Default 40 */
    float top_p;       /* keep the smallest set of mass >= top_p; >= 1: off. Default 0.95 */
    float min_p;       /* drop tokens below min_p x the best one's probability; <= 0: off. Default 0.05 */
    uint64_t seed;     /* MK_SEED_RANDOM (the default): chosen at session creation */
};

/* Tuning knobs of the GPU backends (megakernel, perop, graph), for experiments. All zero (the
 * default) is the measured-fastest configuration. The library never reads the environment for
 * them (the mk command maps its MK_CUDA_* variables and flags onto these). */
struct mk_gpu_params {
    int dynamic_schedule;       /* nonzero: one work counter instead of static per-block task lists */
    uint32_t tasks_per_worker;  /* matvec tiling target; 0 = the compiler's */
    uint32_t attn_block;        /* the unit of an attention split, in positions; 0 = the compiler's */
    int fuse_attn_output;       /* nonzero: the attention combine folded into the attention-output tasks */
    uint32_t blocks_per_sm;     /* cap on the blocks per multiprocessor; 0 = as many as fit */
    int no_rope_table;          /* nonzero: RoPE angles computed in the kernel, not from a table */
    int trace;                  /* megakernel per-task timestamps: 0 off, 1 after waits, 2 at fetch */
    const char *kernel_image;   /* cubin, fatbin or PTX file loaded instead of the built-in kernels */
    uint32_t attn_splits;       /* attention splits of the sequence per KV head; 0 = the compiler's */
    uint32_t chunk_dequant_min; /* chunk products of block-format weights over at least this many
                                 * tokens decode each matrix once first; 0 = the default (128) */
    int no_pdl;                 /* nonzero: each chunk kernel starts only when the one ahead has
                                 * ended (default: on sm_90 it overlaps that kernel's tail) */
    int no_chunk_kq;            /* nonzero: chunk products of Q4_K/Q5_K/Q6_K matrices over 17 or more
                                 * tokens go through decoded weights, not the matrices' integers */
    unsigned mv_blocks;         /* most blocks per column split of the Q4_K/Q5_K/Q6_K products over 16
                                 * or fewer tokens (each takes every such tile in turn); 0 = the plan */
    int no_mv_kq8;              /* nonzero: those products decode the weights to bf16 instead of taking x
                                 * as int8 levels on the integer tensor cores, for comparison */
    int no_fold;                /* nonzero: a chunk product split over its columns has its partial sums
                                 * added by a launch of their own, not by the kernel that reads them */
    int no_attn_h16;            /* nonzero: chunk attention over the f16 KV cache splits q, K, V and the
                                 * probabilities into bf16 hi + lo, three products each, instead of taking
                                 * K and V as cached (q and probabilities as f16 hi + lo), for comparison */
    unsigned xb_rows;           /* sm_90a: weight rows of the bf16 products' tiles over chunks whose
                                 * inputs are rounded to bf16 (128, 192 or 256); 0 = the backend's plan */
    int xb_load;                /* how those tiles reach shared memory: 0 the backend's choice (the copy
                                 * engine where it can), 1 cp.async, 2 the copy engine */
    int attn_merge;             /* who merges the attention splits: 0 the backend's choice, 1 each KV
                                 * head's last split, 2 an op of their own */
    int no_float_image;         /* nonzero: the built-in kernels with every weight format even for a
                                 * model whose weights are all f32, f16 or bf16 (by default those run
                                 * a build without the block formats where it has the GPU's SASS) */
    uint32_t attn_solo;         /* below this position one attention split holds every position (at
                                 * least the unit); 0 = the compiler's (where the merge is in the
                                 * splits 1536 at head size 64, 640 at 128) */
};

/* Speculative decoding (mk_session_params.spec). */
enum mk_spec {
    MK_SPEC_OFF = 0,
    /* Prompt lookup: the longest recent n-gram match in the context proposes up to n_draft next
     * tokens, one chunk step verifies them, and the longest prefix greedy decoding would produce
     * is kept, plus the next token: the output is greedy decoding's, token for token. Only with
     * temperature <= 0 and a backend with chunk steps (ubatch > 1); otherwise off. */
    MK_SPEC_LOOKUP = 1,
};

struct mk_session_params {
    uint32_t n_ctx;               /* KV-cache positions; 0 = min(model's n_ctx_train, 4096) */
    enum mk_backend_kind backend; /* MK_BACKEND_AUTO: megakernel, else perop, else cpu */
    uint32_t n_threads;           /* cpu backend workers; 0 = auto (the number of cores) */
    int device;                   /* CUDA device ordinal */
    struct mk_sampling_params sampling;
    int verbose;              /* backends report their choices on stderr */
    struct mk_gpu_params gpu; /* GPU backends only; all zero = defaults */
    /* nonzero: generation goes on through EOS and every other end-of-generation token (they are
     * passed to the callback like any token), as llama.cpp's --ignore-eos. Default 0. */
    int ignore_eog;
    /* A step that takes longer fails with MK_ERR_TIMEOUT and leaves the session unusable (free it
     * and create another); 0 = the default, 10000 ms on a GPU and 60000 ms on the cpu backend. */
    uint32_t watchdog_ms;
    /* Test only: make step fault.step fail as fault.kind says (see struct mk_fault); all zero, the
     * default, injects nothing. The failing call returns an error naming the step. Faults count
     * one-token steps: with ubatch 1 step N is position N. On a GPU, a trap or bad address is a
     * sticky CUDA error that ends CUDA for the whole process (new sessions are refused with it); an
     * error ends the kernel without a trap, so a new session works. */
    struct mk_fault fault;
    uint32_t ubatch;         /* most tokens per step for prompts and speculation (like llama.cpp's micro-batch);
                       * 0 = the backend's default (cpu 32, GPU 512, ref 1);
                       * 1 = one token per step */
    int spec;                /* enum mk_spec; default MK_SPEC_OFF */
    uint32_t n_draft;        /* most tokens one speculation proposes; 0 = 8; at most ubatch - 1 are used */
    enum mk_kv_type kv_type; /* the KV cache's elements; default MK_KV_F16 (as llama.cpp's) */
    /* nonzero: mk_session_generate posts one step at a time even where the backend can run the
     * token loop itself (the megakernel samples each token and feeds it to its next step, and the
     * calling thread only collects them). Default 0. */
    int host_loop;
    /* nonzero: chunk steps keep activations at fp32's precision in every product (bf16 hi + lo
     * halves on the GPU: twice the tensor-core work over bf16 weights). Default 0: products over
     * bf16 weights in steps of 64 tokens or more take them rounded to bf16, as llama.cpp's do;
     * steps of fewer tokens (speculation, short prompts) and other weight types are unchanged. */
    int act_f32;
};
struct mk_session_params mk_session_default_params(void);

/* Creates the backend and its KV cache. lm must outlive the session. */
enum mk_status mk_session_create(const struct mk_lm *lm, const struct mk_session_params *p, struct mk_session **out,
                                 struct mk_error *err);
void mk_session_free(struct mk_session *s);

/* Message of the last failed call on s ("" when none). */
const char *mk_session_last_error(const struct mk_session *s);
/* The last failed call's status and message. */
const struct mk_error *mk_session_error(const struct mk_session *s);

/* Evaluates tokens at the next positions (after any generated token not yet evaluated). Fails
 * with MK_ERR_CONTEXT_FULL, evaluating nothing, when they do not all fit. */
enum mk_status mk_session_feed(struct mk_session *s, const int32_t *ids, size_t n);
/* Tokenizes and feeds text. At the start of the sequence, BOS comes first when the vocabulary
 * adds it; an empty text at the start feeds BOS alone. Control-token text stays text: to parse it
 * (a chat prompt), tokenize with mk_lm_tokenize(..., parse_special = true) and feed the ids. */
enum mk_status mk_session_feed_text(struct mk_session *s, const char *text);

/* Called once per generated token with its id and text; return nonzero to stop. */
typedef int (*mk_token_fn)(void *user, int32_t id, const char *piece, size_t piece_len);

enum mk_stop_reason {
    MK_STOP_NONE = 0,         /* generation failed (see the status) */
    MK_STOP_LENGTH = 1,       /* produced n_max tokens */
    MK_STOP_EOS = 2,          /* the model produced EOS (not passed to the callback) */
    MK_STOP_CALLBACK = 3,     /* the callback returned nonzero */
    MK_STOP_CONTEXT_FULL = 4, /* every KV-cache position is used */
    MK_STOP_CANCELLED = 5,    /* mk_session_cancel was called */
    MK_STOP_EOG = 6,          /* another end-of-generation token, such as <|im_end|> or <|eot_id|> (the end
                                 of a turn; not passed to the callback) */
};
const char *mk_stop_reason_str(enum mk_stop_reason r);

/* Generates up to n_max tokens (n_max < 0: until EOS, another end-of-generation token (see
 * mk_lm_is_eog) or a full context; ignore_eog turns the first two off) after what was fed,
 * calling fn (may be NULL) for each. Returns MK_OK for every stop reason; *why (may be NULL) says
 * which, *n_generated (may be NULL) how many tokens fn saw. Needs something fed first. */
enum mk_status mk_session_generate(struct mk_session *s, int32_t n_max, mk_token_fn fn, void *user,
                                   enum mk_stop_reason *why, uint32_t *n_generated);

/* Asks the feed or generate running on s (on another thread), or the next one to start, to stop
 * at the next token boundary: feed then fails with MK_ERR_CANCELLED (the tokens before it stay
 * evaluated), generate returns MK_OK with MK_STOP_CANCELLED. Each request stops one call. Safe
 * to call from any thread and from a signal handler (it only stores an atomic flag). */
void mk_session_cancel(struct mk_session *s);

/* Forgets the sequence (the KV cache and the timings of prompt and generation). */
enum mk_status mk_session_reset(struct mk_session *s);
/* Forgets every position from n_keep on (and a generated token not yet evaluated), keeping the
 * first n_keep; the next feed continues at position n_keep. MK_ERR_INVALID_ARG when n_keep is
 * beyond the positions evaluated. Timings are kept. */
enum mk_status mk_session_rewind(struct mk_session *s, uint32_t n_keep);
/* Makes the sequence ids[0..n) with as little work as possible, for multi-turn chat: keeps the
 * longest prefix of ids the session already holds (its evaluated tokens, and the last generated
 * token when that matches too), rewinds past the first difference and feeds the rest; at least
 * the last token is evaluated, so that generation can follow. *n_reused (may be NULL) receives the
 * evaluated positions kept, so n - *n_reused tokens were evaluated; afterwards mk_session_n_past is n. MK_ERR_CONTEXT_FULL, changing nothing, when n
 * exceeds the context; MK_ERR_INVALID_ARG when n is 0. */
enum mk_status mk_session_feed_sequence(struct mk_session *s, const int32_t *ids, size_t n, uint32_t *n_reused);

/* Copies the logits (n_vocab floats) of the last evaluated position; cap is out's length. */
enum mk_status mk_session_logits(struct mk_session *s, float *out, size_t cap);

struct mk_timings {
    double load_ms;    /* mk_lm_load */
    double init_ms;    /* mk_session_create: backend, weights upload, KV cache */
    uint32_t n_prompt; /* tokens fed */
    double prompt_ms;
    uint32_t n_eval; /* decode steps of generated tokens */
    double eval_ms;
    uint32_t n_generated;       /* tokens passed to the callback */
    uint32_t n_prompt_steps;    /* steps the prompt tokens took (fewer than n_prompt with chunk steps) */
    uint32_t n_spec_steps;      /* speculative verification steps */
    uint32_t n_drafted;         /* tokens they proposed */
    uint32_t n_accepted;        /* ... and of those, the ones greedy decoding agreed with */
    double last_step_device_ms; /* the last step on the backend's own clock (GPU: the device's); 0 where none */
};
struct mk_timings mk_session_timings(const struct mk_session *s);

enum mk_backend_kind mk_session_backend_kind(const struct mk_session *s); /* the one AUTO resolved to */
const char *mk_session_backend_name(const struct mk_session *s);
uint32_t mk_session_n_ctx(const struct mk_session *s);
uint32_t mk_session_n_past(const struct mk_session *s); /* positions evaluated */
uint64_t mk_session_seed(const struct mk_session *s);   /* the seed in use, after MK_SEED_RANDOM */

#ifdef __cplusplus
}
#endif
#endif
