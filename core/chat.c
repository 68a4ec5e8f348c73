/* Chat templates: llama.cpp's built-in formats, detected from a Jinja template string and rendered. */
#include "core/chat.h"

#include <ctype.h>
#include <string.h>

static const char *const mk_chat_names[MK_CHAT_COUNT] = {
    [MK_CHAT_UNKNOWN] = "unknown",
    [MK_CHAT_CHATML] = "chatml",
    [MK_CHAT_LLAMA2] = "llama2",
    [MK_CHAT_LLAMA2_SYS] = "llama2-sys",
    [MK_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [MK_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [MK_CHAT_MISTRAL_V1] = "mistral-v1",
    [MK_CHAT_MISTRAL_V3] = "mistral-v3",
    [MK_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [MK_CHAT_MISTRAL_V7] = "mistral-v7",
    [MK_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [MK_CHAT_PHI3] = "phi3",
    [MK_CHAT_PHI4] = "phi4",
    [MK_CHAT_FALCON3] = "falcon3",
    [MK_CHAT_ZEPHYR] = "zephyr",
    [MK_CHAT_MONARCH] = "monarch",
    [MK_CHAT_GEMMA] = "gemma",
    [MK_CHAT_ORION] = "orion",
    [MK_CHAT_OPENCHAT] = "openchat",
    [MK_CHAT_VICUNA] = "vicuna",
    [MK_CHAT_VICUNA_ORCA] = "vicuna-orca",
    [MK_CHAT_DEEPSEEK] = "deepseek",
    [MK_CHAT_DEEPSEEK2] = "deepseek2",
    [MK_CHAT_DEEPSEEK3] = "deepseek3",
    [MK_CHAT_COMMAND_R] = "command-r",
    [MK_CHAT_LLAMA3] = "llama3",
    [MK_CHAT_CHATGLM3] = "chatglm3",
    [MK_CHAT_CHATGLM4] = "chatglm4",
    [MK_CHAT_GLMEDGE] = "glmedge",
    [MK_CHAT_MINICPM] = "minicpm",
};

/* DeepSeek's full-width markers, spelled as UTF-8 bytes. */
#define MK_CHAT_DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define MK_CHAT_DS_ASSISTANT \
    "<\xef\xbd\x9c"          \
    "Assistant\xef\xbd\x9c>"
#define MK_CHAT_DS_EOS \
    "<\xef\xbd\x9c"    \
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define MK_CHAT_MINICPM_USER "<\xe7\x94\xa8\xe6\x88\xb7>" /* <用户> */

enum mk_chat_template mk_chat_template_from_name(const char *name) {
    if (!name) return MK_CHAT_UNKNOWN;
    for (int t = MK_CHAT_UNKNOWN + 1; t < MK_CHAT_COUNT; t++)
        if (!strcmp(name, mk_chat_names[t])) return (enum mk_chat_template)t;
    return MK_CHAT_UNKNOWN;
}

const char *mk_chat_template_name(enum mk_chat_template t) {
    return t > MK_CHAT_UNKNOWN && t < MK_CHAT_COUNT ? mk_chat_names[t] : "unknown";
}

struct mk_chat_hay {
    const char *s;
    size_t n;
};

static bool mk_chat_has(struct mk_chat_hay h, const char *needle) {
    size_t m = strlen(needle);
    if (m > h.n) return false;
    for (size_t i = 0; i + m <= h.n; i++)
        if (h.s[i] == needle[0] && memcmp(h.s + i, needle, m) == 0) return true;
    return false;
}

static bool mk_chat_starts(struct mk_chat_hay h, const char *prefix) {
    size_t m = strlen(prefix);
    return m <= h.n && memcmp(h.s, prefix, m) == 0;
}

/* The [INST] family: Mistral's official templates, else Llama 2 and its variants. */
static enum mk_chat_template mk_chat_detect_inst(struct mk_chat_hay h) {
    if (mk_chat_has(h, "[SYSTEM_PROMPT]")) return MK_CHAT_MISTRAL_V7;
    if (mk_chat_has(h, "' [INST] ' + system_message") || mk_chat_has(h, "[AVAILABLE_TOOLS]")) {
        if (mk_chat_has(h, " [INST]")) return MK_CHAT_MISTRAL_V1;
        if (mk_chat_has(h, "\"[INST]\"")) return MK_CHAT_MISTRAL_V3_TEKKEN;
        return MK_CHAT_MISTRAL_V3;
    }
    if (mk_chat_has(h, "content.strip()")) return MK_CHAT_LLAMA2_SYS_STRIP;
    if (mk_chat_has(h, "bos_token + '[INST]")) return MK_CHAT_LLAMA2_SYS_BOS;
    if (mk_chat_has(h, "<<SYS>>")) return MK_CHAT_LLAMA2_SYS;
    return MK_CHAT_LLAMA2;
}

enum mk_chat_template mk_chat_detect_template(const char *tmpl, size_t len) {
    if (!tmpl) return MK_CHAT_UNKNOWN;
    struct mk_chat_hay h = { tmpl, len };
    for (int t = MK_CHAT_UNKNOWN + 1; t < MK_CHAT_COUNT; t++)
        if (strlen(mk_chat_names[t]) == len && memcmp(tmpl, mk_chat_names[t], len) == 0)
            return (enum mk_chat_template)t;
    /* Tried in llama.cpp's order, since several formats share markers. Formats mk does not render
     * (SmolVLM, ChatGLM-family tool variants, EXAONE MoE) answer UNKNOWN rather than fall through
     * to a wrong match. */
    if (mk_chat_has(h, "<|im_start|>")) {
        if (mk_chat_has(h, "<|im_sep|>")) return MK_CHAT_PHI4;
        if (mk_chat_has(h, "<end_of_utterance>")) return MK_CHAT_UNKNOWN;
        return MK_CHAT_CHATML;
    }
    if (mk_chat_starts(h, "mistral") || mk_chat_has(h, "[INST]")) return mk_chat_detect_inst(h);
    if (mk_chat_has(h, "<|assistant|>") && mk_chat_has(h, "<|end|>")) return MK_CHAT_PHI3;
    if (mk_chat_has(h, "[gMASK]<sop>")) return MK_CHAT_CHATGLM4;
    if (mk_chat_has(h, "<|assistant|>") && mk_chat_has(h, "<|user|>")) {
        if (mk_chat_has(h, "<|tool_declare|>")) return MK_CHAT_UNKNOWN;
        return mk_chat_has(h, "</s>") ? MK_CHAT_FALCON3 : MK_CHAT_GLMEDGE;
    }
    if (mk_chat_has(h, "<|{{ item['role'] }}|>") && mk_chat_has(h, "<|begin_of_image|>")) return MK_CHAT_GLMEDGE;
    if (mk_chat_has(h, "<|user|>") && mk_chat_has(h, "<|endoftext|>")) return MK_CHAT_ZEPHYR;
    if (mk_chat_has(h, "bos_token + message['role']")) return MK_CHAT_MONARCH;
    if (mk_chat_has(h, "<start_of_turn>")) return MK_CHAT_GEMMA;
    if (mk_chat_has(h, "'\\n\\nAssistant: ' + eos_token")) return MK_CHAT_ORION;
    if (mk_chat_has(h, "GPT4 Correct ")) return MK_CHAT_OPENCHAT;
    if (mk_chat_has(h, "USER: ") && mk_chat_has(h, "ASSISTANT: "))
        return mk_chat_has(h, "SYSTEM: ") ? MK_CHAT_VICUNA_ORCA : MK_CHAT_VICUNA;
    if (mk_chat_has(h, "### Instruction:") && mk_chat_has(h, "<|EOT|>")) return MK_CHAT_DEEPSEEK;
    if (mk_chat_has(h, "<|START_OF_TURN_TOKEN|>") && mk_chat_has(h, "<|USER_TOKEN|>")) return MK_CHAT_COMMAND_R;
    if (mk_chat_has(h, "<|start_header_id|>") && mk_chat_has(h, "<|end_header_id|>")) return MK_CHAT_LLAMA3;
    if (mk_chat_has(h, "[gMASK]sop")) return MK_CHAT_CHATGLM3;
    if (mk_chat_has(h, MK_CHAT_MINICPM_USER)) return MK_CHAT_MINICPM;
    if (mk_chat_has(h, "'Assistant: ' + message['content'] + eos_token")) return MK_CHAT_DEEPSEEK2;
    if (mk_chat_has(h, MK_CHAT_DS_ASSISTANT) && mk_chat_has(h, MK_CHAT_DS_USER) && mk_chat_has(h, MK_CHAT_DS_EOS))
        return MK_CHAT_DEEPSEEK3;
    return MK_CHAT_UNKNOWN;
}

/* ---- Rendering ---- */

struct mk_chat_out {
    char *buf;
    size_t cap, n;
};

static void mk_chat_putn(struct mk_chat_out *o, const char *s, size_t len) {
    if (o->n < o->cap) {
        size_t room = o->cap - o->n;
        memcpy(o->buf + o->n, s, len < room ? len : room);
    }
    o->n += len;
}

static void mk_chat_put(struct mk_chat_out *o, const char *s) { mk_chat_putn(o, s, strlen(s)); }

static bool mk_chat_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* The content without leading and trailing C-locale white space, as llama.cpp's trim(). */
static void mk_chat_put_trimmed(struct mk_chat_out *o, const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && mk_chat_space(s[a])) a++;
    while (b > a && mk_chat_space(s[b - 1])) b--;
    mk_chat_putn(o, s + a, b - a);
}

static void mk_chat_put_content(struct mk_chat_out *o, const char *s, bool trim) {
    if (trim)
        mk_chat_put_trimmed(o, s);
    else
        mk_chat_put(o, s);
}

static bool mk_chat_is(const struct mk_chat_message *m, const char *role) { return !strcmp(m->role, role); }

static void mk_chat_render_mistral(enum mk_chat_template t, const struct mk_chat_message *msgs, size_t n,
                                   struct mk_chat_out *o) {
    if (t == MK_CHAT_MISTRAL_V7 || t == MK_CHAT_MISTRAL_V7_TEKKEN) {
        const char *sp = t == MK_CHAT_MISTRAL_V7 ? " " : "";
        for (size_t i = 0; i < n; i++) {
            if (mk_chat_is(&msgs[i], "system")) {
                mk_chat_put(o, "[SYSTEM_PROMPT]");
                mk_chat_put(o, sp);
                mk_chat_put(o, msgs[i].content);
                mk_chat_put(o, "[/SYSTEM_PROMPT]");
            } else if (mk_chat_is(&msgs[i], "user")) {
                mk_chat_put(o, "[INST]");
                mk_chat_put(o, sp);
                mk_chat_put(o, msgs[i].content);
                mk_chat_put(o, "[/INST]");
            } else {
                mk_chat_put(o, sp);
                mk_chat_put(o, msgs[i].content);
                mk_chat_put(o, "</s>");
            }
        }
        return;
    }
    /* v1 puts a space before [INST] and [/INST]; tekken none after [INST]; v3 trims answers. */
    const char *lead = t == MK_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = t == MK_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool in_turn = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            mk_chat_put(o, lead);
            mk_chat_put(o, "[INST]");
            mk_chat_put(o, trail);
            in_turn = true;
        }
        if (mk_chat_is(&msgs[i], "system")) {
            mk_chat_put(o, msgs[i].content);
            mk_chat_put(o, "\n\n");
        } else if (mk_chat_is(&msgs[i], "user")) {
            mk_chat_put(o, msgs[i].content);
            mk_chat_put(o, lead);
            mk_chat_put(o, "[/INST]");
        } else {
            mk_chat_put(o, trail);
            mk_chat_put_content(o, msgs[i].content, t == MK_CHAT_MISTRAL_V3);
            mk_chat_put(o, "</s>");
            in_turn = false;
        }
    }
}

static void mk_chat_render_llama2(enum mk_chat_template t, const struct mk_chat_message *msgs, size_t n,
                                  struct mk_chat_out *o) {
    bool strip = t == MK_CHAT_LLAMA2_SYS_STRIP;
    /* The first [INST] opens without BOS: the tokenizer adds that one. */
    bool in_turn = true;
    mk_chat_put(o, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            in_turn = true;
            mk_chat_put(o, t == MK_CHAT_LLAMA2_SYS_BOS ? "<s>[INST] " : "[INST] ");
        }
        if (mk_chat_is(&msgs[i], "system")) {
            if (t == MK_CHAT_LLAMA2) {
                /* No system block in plain Llama 2: the text leads the first user message. */
                mk_chat_put_content(o, msgs[i].content, strip);
                mk_chat_put(o, "\n");
            } else {
                mk_chat_put(o, "<<SYS>>\n");
                mk_chat_put_content(o, msgs[i].content, strip);
                mk_chat_put(o, "\n<</SYS>>\n\n");
            }
        } else if (mk_chat_is(&msgs[i], "user")) {
            mk_chat_put_content(o, msgs[i].content, strip);
            mk_chat_put(o, " [/INST]");
        } else {
            mk_chat_put_content(o, msgs[i].content, strip);
            mk_chat_put(o, "</s>");
            in_turn = false;
        }
    }
}

/* The system messages of msgs[from, to), joined (trimmed each when trim) as one text that
 * formats without a system role put before the next user message; true when it is not empty. */
static bool mk_chat_put_pending_system(const struct mk_chat_message *msgs, size_t from, size_t to, bool trim,
                                       struct mk_chat_out *o) {
    struct mk_chat_out probe = { NULL, 0, 0 };
    for (size_t j = from; j < to; j++)
        if (mk_chat_is(&msgs[j], "system")) mk_chat_put_content(&probe, msgs[j].content, trim);
    if (probe.n == 0) return false;
    for (size_t j = from; j < to; j++)
        if (mk_chat_is(&msgs[j], "system")) mk_chat_put_content(o, msgs[j].content, trim);
    mk_chat_put(o, "\n\n");
    return true;
}

/* Gemma has no system role: the system text opens the next user turn; "assistant" is "model". */
static void mk_chat_render_gemma(const struct mk_chat_message *msgs, size_t n, bool add_assistant,
                                 struct mk_chat_out *o) {
    size_t pending = 0; /* system messages from here on are not written yet */
    for (size_t i = 0; i < n; i++) {
        if (mk_chat_is(&msgs[i], "system")) continue;
        bool model = mk_chat_is(&msgs[i], "assistant");
        mk_chat_put(o, "<start_of_turn>");
        mk_chat_put(o, model ? "model" : msgs[i].role);
        mk_chat_put(o, "\n");
        if (!model) {
            mk_chat_put_pending_system(msgs, pending, i, true, o);
            pending = i + 1;
        }
        mk_chat_put_trimmed(o, msgs[i].content);
        mk_chat_put(o, "<end_of_turn>\n");
    }
    if (add_assistant) mk_chat_put(o, "<start_of_turn>model\n");
}

/* Orion: no system role either; the system text opens the next "Human:" turn. */
static void mk_chat_render_orion(const struct mk_chat_message *msgs, size_t n, struct mk_chat_out *o) {
    size_t pending = 0;
    for (size_t i = 0; i < n; i++) {
        if (mk_chat_is(&msgs[i], "system")) continue;
        if (mk_chat_is(&msgs[i], "user")) {
            mk_chat_put(o, "Human: ");
            mk_chat_put_pending_system(msgs, pending, i, false, o);
            pending = i + 1;
            mk_chat_put(o, msgs[i].content);
            mk_chat_put(o, "\n\nAssistant: </s>");
        } else {
            mk_chat_put(o, msgs[i].content);
            mk_chat_put(o, "</s>");
        }
    }
}

/* Formats that wrap each message in a fixed prefix and suffix by role. */
struct mk_chat_wrap {
    const char *pre[3], *post[3]; /* system, user, assistant */
    bool trim;
    const char *opening; /* the assistant's opening, or NULL */
};

static int mk_chat_role_index(const struct mk_chat_message *m) {
    return mk_chat_is(m, "system") ? 0 : mk_chat_is(m, "user") ? 1 : mk_chat_is(m, "assistant") ? 2 : -1;
}

static void mk_chat_render_wrap(const struct mk_chat_wrap *w, const struct mk_chat_message *msgs, size_t n,
                                bool add_assistant, struct mk_chat_out *o) {
    for (size_t i = 0; i < n; i++) {
        int r = mk_chat_role_index(&msgs[i]);
        if (r < 0) continue; /* these formats have no place for other roles */
        mk_chat_put(o, w->pre[r]);
        mk_chat_put_content(o, msgs[i].content, w->trim);
        mk_chat_put(o, w->post[r]);
    }
    if (add_assistant && w->opening) mk_chat_put(o, w->opening);
}

/* Formats of the shape PRE + role + MID + content + POST, for any role. */
static void mk_chat_render_role(const char *pre, const char *mid, const char *post, bool trim,
                                const struct mk_chat_message *msgs, size_t n, struct mk_chat_out *o) {
    for (size_t i = 0; i < n; i++) {
        mk_chat_put(o, pre);
        mk_chat_put(o, msgs[i].role);
        mk_chat_put(o, mid);
        mk_chat_put_content(o, msgs[i].content, trim);
        mk_chat_put(o, post);
    }
}

static const struct mk_chat_wrap mk_chat_wraps[MK_CHAT_COUNT] = {
    [MK_CHAT_VICUNA] = { { "", "USER: ", "ASSISTANT: " }, { "\n\n", "\n", "</s>\n" }, false, "ASSISTANT:" },
    [MK_CHAT_VICUNA_ORCA] = { { "SYSTEM: ", "USER: ", "ASSISTANT: " }, { "\n", "\n", "</s>\n" }, false, "ASSISTANT:" },
    [MK_CHAT_DEEPSEEK] = { { "", "### Instruction:\n", "### Response:\n" },
                           { "", "\n", "\n<|EOT|>\n" },
                           false,
                           "### Response:\n" },
    [MK_CHAT_DEEPSEEK2] = { { "", "User: ", "Assistant: " }, { "\n\n", "\n\n", MK_CHAT_DS_EOS }, false, "Assistant:" },
    [MK_CHAT_DEEPSEEK3] = { { "", MK_CHAT_DS_USER, MK_CHAT_DS_ASSISTANT },
                            { "\n\n", "", MK_CHAT_DS_EOS },
                            false,
                            MK_CHAT_DS_ASSISTANT },
    [MK_CHAT_COMMAND_R] = { { "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
                              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>" },
                            { "<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>" },
                            true,
                            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>" },
};

static void mk_chat_render(enum mk_chat_template t, const struct mk_chat_message *msgs, size_t n, bool add_assistant,
                           struct mk_chat_out *o) {
    const char *opening = NULL;
    switch (t) {
    case MK_CHAT_CHATML:
        mk_chat_render_role("<|im_start|>", "\n", "<|im_end|>\n", false, msgs, n, o);
        opening = "<|im_start|>assistant\n";
        break;
    case MK_CHAT_PHI4:
        mk_chat_render_role("<|im_start|>", "<|im_sep|>", "<|im_end|>", false, msgs, n, o);
        opening = "<|im_start|>assistant<|im_sep|>";
        break;
    case MK_CHAT_PHI3:
        mk_chat_render_role("<|", "|>\n", "<|end|>\n", false, msgs, n, o);
        opening = "<|assistant|>\n";
        break;
    case MK_CHAT_FALCON3:
        mk_chat_render_role("<|", "|>\n", "\n", false, msgs, n, o);
        opening = "<|assistant|>\n";
        break;
    case MK_CHAT_ZEPHYR:
        mk_chat_render_role("<|", "|>\n", "<|endoftext|>\n", false, msgs, n, o);
        opening = "<|assistant|>\n";
        break;
    case MK_CHAT_LLAMA3:
        mk_chat_render_role("<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", true, msgs, n, o);
        opening = "<|start_header_id|>assistant<|end_header_id|>\n\n";
        break;
    case MK_CHAT_CHATGLM3:
        mk_chat_put(o, "[gMASK]sop");
        mk_chat_render_role("<|", "|>\n ", "", false, msgs, n, o);
        opening = "<|assistant|>";
        break;
    case MK_CHAT_CHATGLM4:
        mk_chat_put(o, "[gMASK]<sop>");
        mk_chat_render_role("<|", "|>\n", "", false, msgs, n, o);
        opening = "<|assistant|>\n";
        break;
    case MK_CHAT_GLMEDGE:
        mk_chat_render_role("<|", "|>\n", "", false, msgs, n, o);
        opening = "<|assistant|>";
        break;
    case MK_CHAT_MONARCH:
        /* BOS between messages, not before the first: the tokenizer adds that one. */
        for (size_t i = 0; i < n; i++) {
            if (i > 0) mk_chat_put(o, "<s>");
            mk_chat_put(o, msgs[i].role);
            mk_chat_put(o, "\n");
            mk_chat_put(o, msgs[i].content);
            mk_chat_put(o, "</s>\n");
        }
        opening = "<s>assistant\n";
        break;
    case MK_CHAT_OPENCHAT:
        for (size_t i = 0; i < n; i++) {
            if (!mk_chat_is(&msgs[i], "system")) {
                char first = (char)toupper((unsigned char)msgs[i].role[0]);
                mk_chat_put(o, "GPT4 Correct ");
                if (first) {
                    mk_chat_putn(o, &first, 1);
                    mk_chat_put(o, msgs[i].role + 1);
                }
                mk_chat_put(o, ": ");
            }
            mk_chat_put(o, msgs[i].content);
            mk_chat_put(o, "<|end_of_turn|>");
        }
        opening = "GPT4 Correct Assistant:";
        break;
    case MK_CHAT_MINICPM:
        for (size_t i = 0; i < n; i++) {
            bool user = mk_chat_is(&msgs[i], "user");
            if (user) mk_chat_put(o, MK_CHAT_MINICPM_USER);
            mk_chat_put_trimmed(o, msgs[i].content);
            if (user) mk_chat_put(o, "<AI>");
        }
        break;
    case MK_CHAT_GEMMA: mk_chat_render_gemma(msgs, n, add_assistant, o); return;
    case MK_CHAT_ORION: mk_chat_render_orion(msgs, n, o); return;
    case MK_CHAT_LLAMA2:
    case MK_CHAT_LLAMA2_SYS:
    case MK_CHAT_LLAMA2_SYS_BOS:
    case MK_CHAT_LLAMA2_SYS_STRIP: mk_chat_render_llama2(t, msgs, n, o); return;
    case MK_CHAT_MISTRAL_V1:
    case MK_CHAT_MISTRAL_V3:
    case MK_CHAT_MISTRAL_V3_TEKKEN:
    case MK_CHAT_MISTRAL_V7:
    case MK_CHAT_MISTRAL_V7_TEKKEN: mk_chat_render_mistral(t, msgs, n, o); return;
    default: mk_chat_render_wrap(&mk_chat_wraps[t], msgs, n, add_assistant, o); return;
    }
    if (add_assistant && opening) mk_chat_put(o, opening);
}

enum mk_status mk_chat_apply(enum mk_chat_template t, const struct mk_chat_message *msgs, size_t n, bool add_assistant,
                             char *out, size_t cap, size_t *len, struct mk_error *err) {
    if (t <= MK_CHAT_UNKNOWN || t >= MK_CHAT_COUNT)
        return mk_error_set(err, MK_ERR_UNSUPPORTED, "chat template %d is not one mk renders", (int)t);
    if (!len || (!out && cap > 0) || (!msgs && n > 0))
        return mk_error_set(err, MK_ERR_INVALID_ARG, "mk_chat_apply: NULL %s", !len ? "len" : !msgs ? "msgs" : "out");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return mk_error_set(err, MK_ERR_INVALID_ARG, "chat message %zu has no %s", i,
                                msgs[i].role ? "content" : "role");
    struct mk_chat_out o = { out, cap, 0 };
    mk_chat_render(t, msgs, n, add_assistant, &o);
    if (o.n < cap) out[o.n] = '\0';
    *len = o.n;
    return MK_OK;
}
