/* 'mk info': describes a GGUF model: header, config, tokenizer, tensor table, parameters and bytes per token. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/chat.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "core/model.h"
#include "tools/cmds.h"

static void mk_info_usage(FILE *f) {
    fprintf(f, "usage: mk info [--keys] FILE\n"
               "\n"
               "Describes a GGUF model: format version, architecture and config, tokenizer, a table of\n"
               "tensors (name, type, shape, bytes), the parameter count and the weight bytes one decoded\n"
               "token reads. Vocab-only files (no tensors) are reported as such.\n"
               "\n"
               "  --keys   also list every metadata key (arrays are summarized)\n");
}

static const char *mk_info_ftype_name(uint32_t ft) {
    switch (ft) {
    case 0: return "all f32";
    case 1: return "mostly f16";
    case 7: return "mostly q8_0";
    case 14: return "mostly q4_k (Q4_K_S)";
    case 15: return "Q4_K_M mix";
    case 18: return "mostly q6_k";
    case 32: return "mostly bf16";
    default: return "a llama.cpp file type mk does not name";
    }
}

/* "2.47 GB" style, decimal units as in the design brief. */
static const char *mk_info_human(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.2f GB", n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.2f MB", n / 1e6);
    else if (n >= 1000ull)
        snprintf(buf, cap, "%.2f kB", n / 1e3);
    else
        snprintf(buf, cap, "%" PRIu64 " B", n);
    return buf;
}

/* "1.24 B" / "292.8 K" style parameter counts. */
static const char *mk_info_count(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.2f B", n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.2f M", n / 1e6);
    else
        snprintf(buf, cap, "%.1f K", n / 1e3);
    return buf;
}

static void mk_info_print_kv(const struct mk_gguf_kv *kv) {
    printf("  %-44.*s ", (int)kv->key.len, kv->key.data);
    switch (kv->type) {
    case MK_GGUF_UINT8:
    case MK_GGUF_UINT16:
    case MK_GGUF_UINT32:
    case MK_GGUF_UINT64: printf("%s %" PRIu64 "\n", mk_gguf_type_name(kv->type), kv->v.u64); break;
    case MK_GGUF_INT8:
    case MK_GGUF_INT16:
    case MK_GGUF_INT32:
    case MK_GGUF_INT64: printf("%s %" PRId64 "\n", mk_gguf_type_name(kv->type), kv->v.i64); break;
    case MK_GGUF_FLOAT32:
    case MK_GGUF_FLOAT64: printf("%s %g\n", mk_gguf_type_name(kv->type), kv->v.f64); break;
    case MK_GGUF_BOOL: printf("bool %s\n", kv->v.u64 ? "true" : "false"); break;
    case MK_GGUF_STRING:
        printf("string \"%.*s\"%s\n", (int)(kv->v.str.len > 60 ? 60 : kv->v.str.len), kv->v.str.data,
               kv->v.str.len > 60 ? "..." : "");
        break;
    case MK_GGUF_ARRAY: printf("array of %" PRIu64 " %s\n", kv->v.arr.n, mk_gguf_type_name(kv->v.arr.elem_type)); break;
    default: printf("%s\n", mk_gguf_type_name(kv->type)); break;
    }
}

static void mk_info_print_tensors(const struct mk_gguf *g) {
    uint64_t n = mk_gguf_tensor_count(g);
    if (!n) return;
    printf("\ntensors (%" PRIu64 "):\n", n);
    printf("  %-34s %-6s %-22s %14s\n", "name", "type", "shape (ne0 first)", "bytes");
    for (uint64_t i = 0; i < n; i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        char shape[64];
        int o = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
        snprintf(shape + o, sizeof shape - (size_t)o, "]");
        const char *tn = mk_dtype_ggml_name(t->type);
        printf("  %-34.*s %-6s %-22s %14" PRIu64 "\n", (int)t->name.len, t->name.data, tn ? tn : "?", shape,
               t->n_bytes);
    }
}

static void mk_info_print_vocab(const struct mk_vocab_data *v) {
    if (!v->n_tokens) {
        printf("tokenizer:    none in the file\n");
        return;
    }
    const char *kind = !strcmp(v->model, "llama")  ? "SentencePiece"
                       : !strcmp(v->model, "gpt2") ? "byte-level BPE"
                                                   : "unknown kind";
    printf("tokenizer:    %s (%s), %u tokens", v->model[0] ? v->model : "(no model key)", kind, v->n_tokens);
    if (v->n_merges) printf(", %" PRIu64 " merges", v->n_merges);
    printf("\n              bos %d, eos %d, unk %d, add_bos %s", v->bos, v->eos, v->unk, v->add_bos ? "true" : "false");
    printf(", scores %s, token types %s\n", v->scores ? "yes" : "no", v->types ? "yes" : "no");
}

/* Which built-in chat format the file's tokenizer.chat_template stands for, if any. */
static void mk_info_print_chat(const struct mk_gguf *g) {
    const struct mk_gguf_kv *kv = mk_gguf_find_kv(g, "tokenizer.chat_template");
    if (!kv || kv->type != MK_GGUF_STRING) {
        printf("chat:         no tokenizer.chat_template (mk chat needs --chat-template NAME)\n");
        return;
    }
    enum mk_chat_template t = mk_chat_detect_template(kv->v.str.data, (size_t)kv->v.str.len);
    if (t == MK_CHAT_UNKNOWN)
        printf("chat:         tokenizer.chat_template (%" PRIu64
               " bytes) is no format mk renders (use --chat-template)\n",
               kv->v.str.len);
    else
        printf("chat:         template %s (tokenizer.chat_template, %" PRIu64 " bytes)\n", mk_chat_template_name(t),
               kv->v.str.len);
}

/* True when a separate head holds exactly the embedding's bytes (stories260K ships such a copy). */
static bool mk_info_head_is_embedding_copy(const struct mk_model *m) {
    return !m->cfg.tied_output && m->output.type == m->token_embd.type && m->output.n_bytes == m->token_embd.n_bytes &&
           memcmp(m->output.data, m->token_embd.data, m->output.n_bytes) == 0;
}

int mk_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool keys = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            mk_info_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--keys")) {
            keys = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "mk info: unknown option '%s'\n", argv[i]);
            mk_info_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "mk info: one FILE only ('%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        mk_info_usage(stderr);
        return 2;
    }

    struct mk_error err = { 0 };
    struct mk_gguf *g = NULL;
    if (mk_gguf_open(path, &g, &err) != MK_OK) {
        fprintf(stderr, "mk info: %s\n", err.msg);
        return 1;
    }
    struct mk_model *m = NULL;
    enum mk_status st = mk_model_load(path, &m, &err);
    char b1[32], b2[32];

    printf("file:         %s (%s)\n", path, mk_info_human(mk_gguf_file_size(g), b1, sizeof b1));
    printf("gguf:         version %u, %" PRIu64 " keys, %" PRIu64 " tensors, alignment %" PRIu64
           ", data at byte %" PRIu64 "\n",
           mk_gguf_version(g), mk_gguf_kv_count(g), mk_gguf_tensor_count(g), mk_gguf_alignment(g),
           mk_gguf_data_offset(g));
    struct mk_gguf_str s = { 0, NULL };
    if (mk_gguf_get_str_opt(g, "general.architecture", &s, NULL) == MK_OK && s.data)
        printf("architecture: %.*s\n", (int)s.len, s.data);
    s = (struct mk_gguf_str){ 0, NULL };
    if (mk_gguf_get_str_opt(g, "general.name", &s, NULL) == MK_OK && s.data)
        printf("name:         %.*s\n", (int)s.len, s.data);
    uint32_t ft = UINT32_MAX;
    if (mk_gguf_get_u32_opt(g, "general.file_type", &ft, NULL) == MK_OK && ft != UINT32_MAX)
        printf("file type:    %u (%s)\n", ft, mk_info_ftype_name(ft));

    if (st == MK_OK && m->vocab_only) {
        printf("vocab-only:   yes: no tensors, only the tokenizer is usable");
        if (m->cfg.n_embd)
            printf(" (its %s.* keys describe a model of %u layers x %u that is not here)", m->cfg.arch, m->cfg.n_layer,
                   m->cfg.n_embd);
        printf("\n");
    } else if (st == MK_OK) {
        const struct mk_llama_config *c = &m->cfg;
        printf("config:       n_embd %u, n_ff %u, n_layer %u, n_vocab %u\n", c->n_embd, c->n_ff, c->n_layer,
               c->n_vocab);
        printf("attention:    n_head %u, n_head_kv %u (GQA %u:1), head_dim %u, n_rot %u\n", c->n_head, c->n_head_kv,
               c->n_head / c->n_head_kv, c->head_dim, c->n_rot);
        printf("rope:         freq_base %g; rms eps %g; trained context %u\n", (double)c->rope_base, (double)c->rms_eps,
               c->n_ctx_train);
        if (c->rope_neox || c->rope_freq_scale != 1.0f || c->has_rope_freqs || c->has_qkv_bias || c->has_qk_norm)
            printf("variant:      %s rotation%s%s%s; rope position scale %g\n", c->rope_neox ? "NEOX" : "adjacent-pair",
                   c->has_rope_freqs ? ", Llama 3 rope_freqs" : "", c->has_qkv_bias ? ", Q/K/V biases" : "",
                   c->has_qk_norm ? ", per-head q/k RMSNorm" : "", (double)c->rope_freq_scale);
        if (c->tied_output)
            printf("output head:  tied output (no output.weight: the LM head is token_embd.weight)\n");
        else if (mk_info_head_is_embedding_copy(m))
            printf("output head:  tied output by content (output.weight is a bit-identical copy of "
                   "token_embd.weight; read as a separate tensor)\n");
        else
            printf("output head:  untied (output.weight, %s)\n", mk_dtype_get(m->output.type)->name);
    }
    if (st == MK_OK) mk_info_print_vocab(&m->vocab);
    if (st == MK_OK && m->vocab.n_tokens) mk_info_print_chat(g);
    if (keys) {
        printf("\nmetadata (%" PRIu64 " keys):\n", mk_gguf_kv_count(g));
        for (uint64_t i = 0; i < mk_gguf_kv_count(g); i++) mk_info_print_kv(mk_gguf_kv_at(g, i));
    }
    mk_info_print_tensors(g);
    if (st == MK_OK && !m->vocab_only) {
        uint64_t params = mk_model_param_count(m), bpt = mk_model_bytes_per_token(m);
        printf("\nparameters:   %" PRIu64 " (%s)\n", params, mk_info_count(params, b1, sizeof b1));
        printf("weight bytes per token: %" PRIu64 " (%s; weights in the file: %s)\n", bpt,
               mk_info_human(bpt, b1, sizeof b1),
               mk_info_human(mk_gguf_file_size(g) - mk_gguf_data_offset(g), b2, sizeof b2));
    }
    mk_model_free(m);
    mk_gguf_close(g);
    if (st != MK_OK) {
        fprintf(stderr, "mk info: %s\n", err.msg);
        return 1;
    }
    return 0;
}
