// Reference for mk's chat prompts: llama.cpp renders a conversation and tokenizes it (test-only, built against a llama.cpp build by check_chat.sh).
//
// It does what llama-completion does for `-cnv -sys SYSTEM -p USER`: one system and one user
// message through common_chat_templates_apply (use_jinja false by default there; --jinja is what
// llama-cli and llama-server use), then common_tokenize(prompt, add_special = true,
// parse_special = true). Prints the token ids as one line "[1, 2, 3]", and with --text the
// rendered prompt on stderr.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "chat.h"
#include "common.h"
#include "llama.h"

static void usage() {
    fprintf(stderr, "usage: chat_ref -m MODEL [--template NAME_OR_JINJA] [--system TEXT] -p USER [--jinja] [--text]\n");
}

int main(int argc, char **argv) {
    std::string model_path, tmpl, system, user;
    bool jinja = false, text = false, have_user = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&](std::string &out) {
            if (i + 1 >= argc) {
                usage();
                exit(2);
            }
            out = argv[++i];
        };
        if (a == "-m") next(model_path);
        else if (a == "--template") next(tmpl);
        else if (a == "--system") next(system);
        else if (a == "-p") {
            next(user);
            have_user = true;
        } else if (a == "--jinja") jinja = true;
        else if (a == "--text") text = true;
        else {
            usage();
            return 2;
        }
    }
    if (model_path.empty() || !have_user) {
        usage();
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model *model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        fprintf(stderr, "chat_ref: cannot load %s\n", model_path.c_str());
        return 1;
    }
    const llama_vocab *vocab = llama_model_get_vocab(model);
    auto tmpls = common_chat_templates_init(model, tmpl);
    common_chat_templates_inputs in;
    in.use_jinja = jinja;
    in.add_generation_prompt = true;
    if (!system.empty()) {
        common_chat_msg m;
        m.role = "system";
        m.content = system;
        in.messages.push_back(m);
    }
    common_chat_msg u;
    u.role = "user";
    u.content = user;
    in.messages.push_back(u);
    std::string prompt = common_chat_templates_apply(tmpls.get(), in).prompt;
    if (text) fprintf(stderr, "%s", prompt.c_str());
    std::vector<llama_token> ids(prompt.size() + 8);
    int n = llama_tokenize(vocab, prompt.c_str(), (int32_t)prompt.size(), ids.data(), (int32_t)ids.size(), true, true);
    if (n < 0) {
        fprintf(stderr, "chat_ref: tokenize failed (%d)\n", n);
        return 1;
    }
    printf("[");
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
