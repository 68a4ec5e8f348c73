/* Names of the backend kinds, shared by every layer that reports or parses them; the GPU settings and their environment overrides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/executor.h"

static const char *const mk_backend_names[] = {
    [MK_BACKEND_AUTO] = "auto",   [MK_BACKEND_REF] = "ref",
    [MK_BACKEND_CPU] = "cpu",     [MK_BACKEND_MEGAKERNEL] = "megakernel",
    [MK_BACKEND_PEROP] = "perop", [MK_BACKEND_GRAPH] = "graph",
};
#define MK_BACKEND_N_KINDS (sizeof mk_backend_names / sizeof mk_backend_names[0])

const char *mk_backend_kind_name(enum mk_backend_kind k) {
    if ((unsigned)k < MK_BACKEND_N_KINDS) return mk_backend_names[k];
    return "unknown";
}

int mk_backend_kind_parse(const char *s, enum mk_backend_kind *out) {
    if (!s) return -1;
    for (unsigned i = 0; i < MK_BACKEND_N_KINDS; i++) {
        if (!strcmp(s, mk_backend_names[i])) {
            *out = (enum mk_backend_kind)i;
            return 0;
        }
    }
    return -1;
}

bool mk_gpu_xb_rows_valid(uint32_t rows) { return rows == 0u || rows == 128u || rows == 192u || rows == 256u; }

struct mk_gpu_settings mk_gpu_default_settings(void) {
    struct mk_gpu_settings s;
    memset(&s, 0, sizeof s);
    return s;
}

/* A whole base-10 number in [lo, hi] from environment variable name; -1 when malformed. */
static int mk_env_uint(const char *name, const char *v, uint32_t lo, uint32_t hi, uint32_t *out, struct mk_error *err) {
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        mk_error_set(err, MK_ERR_INVALID_ARG, "%s=%s: want a whole number in [%u, %u]", name, v, lo, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

static int mk_env_bool(const char *name, const char *v, bool *out, struct mk_error *err) {
    if (strcmp(v, "0") && strcmp(v, "1")) {
        mk_error_set(err, MK_ERR_INVALID_ARG, "%s=%s: want 0 or 1", name, v);
        return -1;
    }
    *out = v[0] == '1';
    return 0;
}

int mk_attn_merge_from_name(const char *name) {
    return !name ? -1 : !strcmp(name, "auto") ? 0 : !strcmp(name, "split") ? 1 : !strcmp(name, "op") ? 2 : -1;
}

enum mk_status mk_gpu_settings_from_env(struct mk_gpu_settings *s, struct mk_error *err) {
    const char *v;
    if ((v = getenv("MK_CUDA_SCHEDULE"))) {
        if (strcmp(v, "static") && strcmp(v, "dynamic"))
            return mk_error_set(err, MK_ERR_INVALID_ARG, "MK_CUDA_SCHEDULE=%s: want static or dynamic", v);
        s->dynamic_schedule = !strcmp(v, "dynamic");
    }
    if ((v = getenv("MK_CUDA_TASKS_PER_WORKER")) &&
        mk_env_uint("MK_CUDA_TASKS_PER_WORKER", v, 0, 1u << 16, &s->tasks_per_worker, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_ATTN_BLOCK")) && mk_env_uint("MK_CUDA_ATTN_BLOCK", v, 0, 1u << 20, &s->attn_block, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_ATTN_SOLO")) && mk_env_uint("MK_CUDA_ATTN_SOLO", v, 0, 1u << 24, &s->attn_solo, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_ATTN_SPLITS")) && mk_env_uint("MK_CUDA_ATTN_SPLITS", v, 0, 1u << 16, &s->attn_splits, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_BLOCKS_PER_SM")) && mk_env_uint("MK_CUDA_BLOCKS_PER_SM", v, 0, 64, &s->blocks_per_sm, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_FUSE_ATTN_OUTPUT")) &&
        mk_env_bool("MK_CUDA_FUSE_ATTN_OUTPUT", v, &s->fuse_attn_output, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_PREFETCH_BYTES"))) {
        if (mk_env_uint("MK_CUDA_PREFETCH_BYTES", v, 0, 1u << 26, &s->prefetch_bytes, err)) return MK_ERR_INVALID_ARG;
        s->no_prefetch = s->prefetch_bytes == 0;
    }
    if ((v = getenv("MK_CUDA_PREFETCH_OPS")) &&
        mk_env_uint("MK_CUDA_PREFETCH_OPS", v, 0, (1u << MK_OP_COUNT) - 1u, &s->prefetch_ops, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_PREFETCH_MIN"))) {
        if (mk_env_uint("MK_CUDA_PREFETCH_MIN", v, 0, 1u << 30, &s->prefetch_min, err)) return MK_ERR_INVALID_ARG;
        s->prefetch_all = s->prefetch_min == 0;
    }
    if ((v = getenv("MK_CUDA_ATTN_MERGE"))) {
        const int merge = mk_attn_merge_from_name(v);
        if (merge < 0) return mk_error_set(err, MK_ERR_INVALID_ARG, "MK_CUDA_ATTN_MERGE=%s: want auto, split or op", v);
        s->attn_merge = (uint32_t)merge;
    }
    if ((v = getenv("MK_CUDA_NO_ROPE_TABLE")) && mk_env_bool("MK_CUDA_NO_ROPE_TABLE", v, &s->no_rope_table, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_CHUNK_DEQUANT_MIN")) &&
        mk_env_uint("MK_CUDA_CHUNK_DEQUANT_MIN", v, 0, 1u << 20, &s->chunk_dequant_min, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_NO_PDL")) && mk_env_bool("MK_CUDA_NO_PDL", v, &s->no_pdl, err)) return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_NO_CHUNK_KQ")) && mk_env_bool("MK_CUDA_NO_CHUNK_KQ", v, &s->no_chunk_kq, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_MV_KQ8"))) {
        bool on = true;
        if (mk_env_bool("MK_CUDA_MV_KQ8", v, &on, err)) return MK_ERR_INVALID_ARG;
        s->no_mv_kq8 = !on;
    }
    if ((v = getenv("MK_CUDA_FOLD"))) {
        bool on = true;
        if (mk_env_bool("MK_CUDA_FOLD", v, &on, err)) return MK_ERR_INVALID_ARG;
        s->no_fold = !on;
    }
    if ((v = getenv("MK_CUDA_ATTN_H16"))) {
        bool on = true;
        if (mk_env_bool("MK_CUDA_ATTN_H16", v, &on, err)) return MK_ERR_INVALID_ARG;
        s->no_attn_h16 = !on;
    }
    if ((v = getenv("MK_CUDA_MV_BLOCKS")) && mk_env_uint("MK_CUDA_MV_BLOCKS", v, 0, 1u << 20, &s->mv_blocks, err))
        return MK_ERR_INVALID_ARG;
    if ((v = getenv("MK_CUDA_XB_ROWS"))) {
        if (mk_env_uint("MK_CUDA_XB_ROWS", v, 0, 256, &s->xb_rows, err)) return MK_ERR_INVALID_ARG;
        if (!mk_gpu_xb_rows_valid(s->xb_rows))
            return mk_error_set(err, MK_ERR_INVALID_ARG, "MK_CUDA_XB_ROWS=%s: want 0, 128, 192 or 256", v);
    }
    if ((v = getenv("MK_CUDA_XB_LOAD"))) {
        static const char *const names[] = { "auto", "copy", "tma" };
        uint32_t i = 0;
        while (i < 3u && strcmp(v, names[i])) i++;
        if (i == 3u) return mk_error_set(err, MK_ERR_INVALID_ARG, "MK_CUDA_XB_LOAD=%s: want auto, copy or tma", v);
        s->xb_load = (enum mk_xb_load)i;
    }
    if ((v = getenv("MK_CUDA_TRACE"))) {
        if (!strcmp(v, "0"))
            s->trace = MK_GPU_TRACE_OFF;
        else if (!strcmp(v, "1"))
            s->trace = MK_GPU_TRACE_AFTER_WAITS;
        else if (!strcmp(v, "fetch"))
            s->trace = MK_GPU_TRACE_AT_FETCH;
        else
            return mk_error_set(err, MK_ERR_INVALID_ARG, "MK_CUDA_TRACE=%s: want 0, 1 or fetch", v);
    }
    if ((v = getenv("MK_CUDA_CUBIN")) && *v) s->kernel_image = v;
    if ((v = getenv("MK_CUDA_FLOAT_IMAGE"))) {
        bool on;
        if (mk_env_bool("MK_CUDA_FLOAT_IMAGE", v, &on, err)) return MK_ERR_INVALID_ARG;
        s->no_float_image = !on;
    }
    return MK_OK;
}

enum mk_status mk_backend_step_chunk(struct mk_backend *b, const struct mk_step_cmd *cmd, const int32_t *tokens,
                                     int32_t *out_tokens, struct mk_error *err) {
    const uint32_t n = cmd->n_tokens ? cmd->n_tokens : 1u, n_out = cmd->n_out ? cmd->n_out : 1u;
    if (n_out > n)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "a step of %u tokens cannot have %u output rows", n, n_out);
    if (b->vt->step_chunk && n <= b->ubatch) return b->vt->step_chunk(b, cmd, tokens, out_tokens, err);
    for (uint32_t i = 0; i < n; i++) {
        struct mk_step_cmd c = *cmd;
        c.token = tokens[i];
        c.pos = cmd->pos + (int32_t)i;
        c.n_tokens = 1;
        c.n_out = 1;
        int32_t tok;
        enum mk_status st = b->vt->step(b, &c, &tok, err);
        if (st != MK_OK) return st;
        if (i >= n - n_out) out_tokens[i - (n - n_out)] = tok;
    }
    return MK_OK;
}
