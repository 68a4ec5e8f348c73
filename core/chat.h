/* Chat templates: detect llama.cpp's built-in formats from tokenizer.chat_template, render them in C. */
#ifndef MK_CHAT_H
#define MK_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The formats llama.cpp renders without a Jinja engine (src/llama-chat.cpp), by the same names. */
enum mk_chat_template {
    MK_CHAT_UNKNOWN = 0,
    MK_CHAT_CHATML,
    MK_CHAT_LLAMA2,
    MK_CHAT_LLAMA2_SYS,
    MK_CHAT_LLAMA2_SYS_BOS,
    MK_CHAT_LLAMA2_SYS_STRIP,
    MK_CHAT_MISTRAL_V1,
    MK_CHAT_MISTRAL_V3,
    MK_CHAT_MISTRAL_V3_TEKKEN,
    MK_CHAT_MISTRAL_V7,
    MK_CHAT_MISTRAL_V7_TEKKEN,
    MK_CHAT_PHI3,
    MK_CHAT_PHI4,
    MK_CHAT_FALCON3,
    MK_CHAT_ZEPHYR,
    MK_CHAT_MONARCH,
    MK_CHAT_GEMMA,
    MK_CHAT_ORION,
    MK_CHAT_OPENCHAT,
    MK_CHAT_VICUNA,
    MK_CHAT_VICUNA_ORCA,
    MK_CHAT_DEEPSEEK,
    MK_CHAT_DEEPSEEK2,
    MK_CHAT_DEEPSEEK3,
    MK_CHAT_COMMAND_R,
    MK_CHAT_LLAMA3,
    MK_CHAT_CHATGLM3,
    MK_CHAT_CHATGLM4,
    MK_CHAT_GLMEDGE,
    MK_CHAT_MINICPM,
    MK_CHAT_COUNT,
};

struct mk_chat_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
};

/* The template called name ("chatml", "llama3", "mistral-v7", ...), or MK_CHAT_UNKNOWN. */
enum mk_chat_template mk_chat_template_from_name(const char *name);
/* The name of t; "unknown" for MK_CHAT_UNKNOWN or a value out of range. */
const char *mk_chat_template_name(enum mk_chat_template t);

/* The template a tokenizer.chat_template string (len bytes, need not be NUL-terminated) stands
 * for, recognised as llama.cpp's llm_chat_detect_template does: the string may also be a
 * template name. MK_CHAT_UNKNOWN when it is neither, or is a format mk does not render. */
enum mk_chat_template mk_chat_detect_template(const char *tmpl, size_t len);

/* Renders n messages in template t, then the assistant's opening when add_assistant (for the
 * templates that have one), byte for byte as llama.cpp's llm_chat_apply_template does. BOS is
 * never written here: the tokenizer adds it when the vocabulary says so, as in llama.cpp.
 * Writes at most cap bytes to out, NUL-terminated when the text fits (*len < cap), and sets *len
 * to the text's length; call again with more room when *len >= cap. MK_ERR_UNSUPPORTED for an
 * unknown template, MK_ERR_INVALID_ARG for a message without a role or content. */
enum mk_status mk_chat_apply(enum mk_chat_template t, const struct mk_chat_message *msgs, size_t n, bool add_assistant,
                             char *out, size_t cap, size_t *len, struct mk_error *err);

#ifdef __cplusplus
}
#endif
#endif
