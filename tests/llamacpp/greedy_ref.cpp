// Reference decode for mk's format checks: llama.cpp loads a GGUF, evaluates a prompt and prints the ids of N greedy tokens (test-only, built against a llama.cpp build by check_quantize.sh).
//
// One thread, CPU only, the prompt tokenized with add_special = true and parse_special = true,
// each next token the argmax of the logits (no sampler chain), printed as "id id id".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: greedy_ref MODEL PROMPT N\n");
        return 2;
    }
    const int n_gen = atoi(argv[3]);
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "greedy_ref: cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab *vocab = llama_model_get_vocab(model);
    std::string prompt = argv[2];
    std::vector<llama_token> ids(prompt.size() + 8);
    int n = llama_tokenize(vocab, prompt.c_str(), (int32_t)prompt.size(), ids.data(), (int32_t)ids.size(), true, true);
    if (n <= 0) {
        fprintf(stderr, "greedy_ref: tokenize failed\n");
        return 1;
    }
    ids.resize(n);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "greedy_ref: cannot create a context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_batch batch = llama_batch_get_one(ids.data(), (int32_t)ids.size());
    llama_token next = 0;
    for (int i = 0; i < n_gen; i++) {
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "greedy_ref: decode failed at token %d\n", i);
            return 1;
        }
        const float *logits = llama_get_logits_ith(ctx, -1);
        next = 0;
        for (int v = 1; v < n_vocab; v++)
            if (logits[v] > logits[next]) next = v;
        printf(i ? " %d" : "%d", next);
        batch = llama_batch_get_one(&next, 1);
    }
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
