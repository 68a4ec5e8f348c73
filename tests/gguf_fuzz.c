/* Fuzz target for the GGUF reader (libFuzzer with -DMK_GGUF_LIBFUZZER); otherwise a driver that replays files and writes seeds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t mk_fuzz_elem_size(enum mk_gguf_type t) {
    switch (t) {
    case MK_GGUF_UINT8:
    case MK_GGUF_INT8:
    case MK_GGUF_BOOL: return 1;
    case MK_GGUF_UINT16:
    case MK_GGUF_INT16: return 2;
    case MK_GGUF_UINT64:
    case MK_GGUF_INT64:
    case MK_GGUF_FLOAT64: return 8;
    default: return 4;
    }
}

/* Reads every byte the parse hands out and checks the reader's promises, so the sanitizers see
 * any pointer that strays outside the input. */
static uint64_t mk_fuzz_touch(const struct mk_gguf *g, const uint8_t *data, size_t size) {
    uint64_t sum = 0;
    struct mk_error err;
    for (uint64_t i = 0; i < mk_gguf_kv_count(g); i++) {
        const struct mk_gguf_kv *kv = mk_gguf_kv_at(g, i);
        MK_ASSERT(kv->key.len > 0 && (const uint8_t *)kv->key.data >= data &&
                  (const uint8_t *)kv->key.data + kv->key.len <= data + size);
        char *key = malloc(kv->key.len + 1);
        MK_ASSERT(key);
        memcpy(key, kv->key.data, kv->key.len);
        key[kv->key.len] = '\0';
        MK_ASSERT(mk_gguf_find_kv(g, key) == kv);
        uint32_t u;
        float f;
        struct mk_gguf_str s;
        sum += mk_gguf_get_u32_opt(g, key, &u, &err) == MK_OK;
        sum += mk_gguf_get_f32_opt(g, key, &f, &err) == MK_OK;
        if (mk_gguf_get_str(g, key, &s, &err) == MK_OK)
            for (uint64_t j = 0; j < s.len; j++) sum += (unsigned char)s.data[j];
        free(key);
        if (kv->type == MK_GGUF_ARRAY && kv->v.arr.elem_type == MK_GGUF_STRING) {
            for (uint64_t k = 0; k < kv->v.arr.n; k++)
                for (uint64_t j = 0; j < kv->v.arr.strs[k].len; j++) sum += (unsigned char)kv->v.arr.strs[k].data[j];
        } else if (kv->type == MK_GGUF_ARRAY) {
            MK_ASSERT(kv->v.arr.elem_type <= MK_GGUF_FLOAT64 && kv->v.arr.elem_type != MK_GGUF_ARRAY);
            const uint8_t *p = kv->v.arr.data;
            uint64_t n = kv->v.arr.n * mk_fuzz_elem_size(kv->v.arr.elem_type);
            for (uint64_t j = 0; j < n; j++) sum += p[j];
        } else {
            MK_ASSERT(kv->type <= MK_GGUF_FLOAT64);
        }
    }
    for (uint64_t i = 0; i < mk_gguf_tensor_count(g); i++) {
        const struct mk_gguf_tensor *t = mk_gguf_tensor_at(g, i);
        const struct mk_dtype_info *info = mk_dtype_get(t->type);
        MK_ASSERT(info != NULL);
        MK_ASSERT(t->n_dims >= 1 && t->n_dims <= MK_GGUF_MAX_DIMS);
        uint64_t n = 1;
        for (int d = 0; d < MK_GGUF_MAX_DIMS; d++) {
            MK_ASSERT(t->ne[d] >= 1);
            n *= t->ne[d];
        }
        MK_ASSERT(n == t->n_elements && t->ne[0] % info->block_size == 0);
        MK_ASSERT(t->n_bytes == n / info->block_size * info->type_size);
        MK_ASSERT(t->offset % mk_gguf_alignment(g) == 0);
        MK_ASSERT((const uint8_t *)t->data == data + mk_gguf_data_offset(g) + t->offset);
        MK_ASSERT(mk_gguf_data_offset(g) + t->offset + t->n_bytes <= size);
        char name[64];
        MK_ASSERT(t->name.len < sizeof name);
        memcpy(name, t->name.data, t->name.len);
        name[t->name.len] = '\0';
        MK_ASSERT(mk_gguf_find_tensor(g, name) == t);
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->n_bytes; j++) sum += p[j];
    }
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct mk_gguf *g = NULL;
    struct mk_error err;
    mk_error_clear(&err);
    enum mk_status st = mk_gguf_open_memory(data, size, "fuzz.gguf", &g, &err);
    if (st != MK_OK) {
        MK_ASSERT(g == NULL && err.status == st);
        MK_ASSERT(st == MK_ERR_FORMAT || st == MK_ERR_UNSUPPORTED || st == MK_ERR_NOMEM);
        MK_ASSERT(strncmp(err.msg, "fuzz.gguf: ", 11) == 0);
        return 0;
    }
    volatile uint64_t sink = mk_fuzz_touch(g, data, size);
    (void)sink;
    mk_gguf_close(g);
    return 0;
}

#ifndef MK_GGUF_LIBFUZZER

/* Writes small valid files that reach every part of the reader: all value types, string
 * arrays, every supported tensor type, and a custom alignment. */
static int mk_fuzz_make_seeds(const char *dir) {
    char path[1024];
    struct mk_error err;
    struct mk_gguf_writer *w = NULL;

    snprintf(path, sizeof path, "%s/seed_llama.gguf", dir);
    if (mk_gguf_writer_create(path, &w, &err) != MK_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const char *toks[6] = { "<unk>",
                            "<s>",
                            "</s>",
                            "\xe2\x96\x81"
                            "a",
                            "b",
                            "" };
    const char *merges[2] = { "a b", "\xe2\x96\x81 a" };
    float scores[6] = { 0, 0, 0, -1, -2, -3 };
    int32_t types[6] = { 2, 3, 3, 1, 1, 6 };
    mk_gguf_writer_kv_str(w, "general.architecture", "llama");
    mk_gguf_writer_kv_str(w, "general.name", "seed");
    mk_gguf_writer_kv_u32(w, "llama.context_length", 64);
    mk_gguf_writer_kv_u32(w, "llama.embedding_length", 256);
    mk_gguf_writer_kv_u32(w, "llama.block_count", 1);
    mk_gguf_writer_kv_u32(w, "llama.feed_forward_length", 512);
    mk_gguf_writer_kv_u32(w, "llama.attention.head_count", 2);
    mk_gguf_writer_kv_u32(w, "llama.attention.head_count_kv", 1);
    mk_gguf_writer_kv_u32(w, "llama.rope.dimension_count", 128);
    mk_gguf_writer_kv_f32(w, "llama.rope.freq_base", 10000.0f);
    mk_gguf_writer_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    mk_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
    mk_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 6);
    mk_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 6);
    mk_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, 6);
    mk_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    mk_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
    mk_gguf_writer_kv_i32(w, "tokenizer.ggml.eos_token_id", 2);
    mk_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
    static const struct {
        const char *name;
        uint32_t type, n_dims;
        uint64_t ne[4];
    } ts[] = {
        { "token_embd.weight", MK_DTYPE_F32, 2, { 8, 6 } },
        { "output_norm.weight", MK_DTYPE_F16, 1, { 8 } },
        { "blk.0.attn_q.weight", MK_DTYPE_Q8_0, 2, { 32, 2 } },
        { "blk.0.attn_k.weight", MK_DTYPE_Q4_K, 1, { 256 } },
        { "blk.0.attn_v.weight", MK_DTYPE_Q6_K, 1, { 256 } },
        { "blk.0.ffn_norm.weight", MK_DTYPE_BF16, 3, { 2, 2, 2 } },
    };
    uint8_t bytes[512];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 37);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        mk_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        const struct mk_dtype_info *info = mk_dtype_get(ts[i].type);
        uint64_t n = 1;
        for (uint32_t d = 0; d < ts[i].n_dims; d++) n *= ts[i].ne[d];
        mk_gguf_writer_write_data(w, bytes, (size_t)(n / info->block_size * info->type_size));
    }
    if (mk_gguf_writer_finish(w, &err) != MK_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }

    snprintf(path, sizeof path, "%s/seed_align64.gguf", dir);
    if (mk_gguf_writer_create(path, &w, &err) != MK_OK) return 1;
    mk_gguf_writer_kv_u32(w, "general.alignment", 64);
    uint64_t ne[2] = { 3, 2 };
    mk_gguf_writer_add_tensor(w, "a", MK_DTYPE_F32, 2, ne);
    mk_gguf_writer_add_tensor(w, "b", MK_DTYPE_F32, 1, ne);
    mk_gguf_writer_write_data(w, bytes, 24);
    mk_gguf_writer_write_data(w, bytes, 12);
    if (mk_gguf_writer_finish(w, &err) != MK_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }

    /* Every scalar type and every numeric array type, which the writer does not emit. */
    snprintf(path, sizeof path, "%s/seed_types.gguf", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    uint32_t v3 = 3, t;
    /* 12 scalars (types 0..12 but array) and 10 numeric arrays (no string, uint8 or array). */
    uint64_t n_tensors = 0, n_kv = 22, one = 1, two = 2;
    fwrite("GGUF", 1, 4, f);
    fwrite(&v3, 4, 1, f);
    fwrite(&n_tensors, 8, 1, f);
    fwrite(&n_kv, 8, 1, f);
    for (t = 0; t <= MK_GGUF_FLOAT64; t++) {
        if (t == MK_GGUF_ARRAY) continue;
        char key[16];
        uint64_t klen = (uint64_t)snprintf(key, sizeof key, "s.%u", t);
        fwrite(&klen, 8, 1, f);
        fwrite(key, 1, klen, f);
        fwrite(&t, 4, 1, f);
        if (t == MK_GGUF_STRING) {
            fwrite(&two, 8, 1, f);
            fwrite("hi", 1, 2, f);
        } else {
            fwrite(&one, mk_fuzz_elem_size((enum mk_gguf_type)t), 1, f);
        }
        if (t == MK_GGUF_STRING || t == MK_GGUF_UINT8) continue; /* string arrays come from the writer seeds */
        uint32_t arr = MK_GGUF_ARRAY;
        klen = (uint64_t)snprintf(key, sizeof key, "a.%u", t);
        fwrite(&klen, 8, 1, f);
        fwrite(key, 1, klen, f);
        fwrite(&arr, 4, 1, f);
        fwrite(&t, 4, 1, f);
        fwrite(&two, 8, 1, f);
        fwrite(&one, mk_fuzz_elem_size((enum mk_gguf_type)t), 1, f);
        fwrite(&one, mk_fuzz_elem_size((enum mk_gguf_type)t), 1, f);
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--make-seeds") == 0) return mk_fuzz_make_seeds(argv[2]);
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s FILE...            replay inputs through the fuzz target\n"
                "       %s --make-seeds DIR   write a seed corpus\n",
                argv[0], argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "%s: cannot open\n", argv[i]);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *d = malloc(n > 0 ? (size_t)n : 1);
        size_t got = d ? fread(d, 1, (size_t)(n > 0 ? n : 0), f) : 0;
        fclose(f);
        if (!d || got != (size_t)(n > 0 ? n : 0)) {
            fprintf(stderr, "%s: cannot read\n", argv[i]);
            free(d);
            return 1;
        }
        LLVMFuzzerTestOneInput(d, got);
        struct mk_gguf *g = NULL;
        struct mk_error err;
        if (mk_gguf_open_memory(d, got, argv[i], &g, &err) == MK_OK)
            printf("%s: ok, %llu KVs, %llu tensors\n", argv[i], (unsigned long long)mk_gguf_kv_count(g),
                   (unsigned long long)mk_gguf_tensor_count(g));
        else
            printf("rejected: %s\n", err.msg);
        mk_gguf_close(g);
        free(d);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
#endif
