/* Tests core/chat: template detection and rendering against llama.cpp's own expected outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat.h"
#include "tests/test_util.h"

/* llama.cpp's test conversation (tests/test-chat-template.cpp), spaces around the second answer
 * included: they show which templates trim. */
static const struct mk_chat_message g_conv[] = {
    { "system", "You are a helpful assistant" },
    { "user", "Hello" },
    { "assistant", "Hi there" },
    { "user", "Who are you" },
    { "assistant", "   I am an assistant   " },
    { "user", "Another question" },
};
#define N_CONV (sizeof g_conv / sizeof g_conv[0])

/* Real chat_template strings of published models and what llama.cpp renders for g_conv with the
 * assistant prompt added: the name, template_str and expected_output fields of llama.cpp's
 * tests/test-chat-template.cpp (MIT), for every case whose format mk renders. The second field
 * is the built-in template llama.cpp's detection picks for it (read from llama-chat.cpp). */
struct chat_case {
    const char *model;
    const char *name;
    const char *tmpl;
    const char *expected;
};

static const struct chat_case g_cases[] = {
    {
        "teknium/OpenHermes-2.5-Mistral-7B",
        "chatml",
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
        "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        "<|im_start|>system\nYou are a helpful "
        "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi "
        "there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   "
        "<|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n",
    },
    {
        "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)",
        "llama2",
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
        "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
        "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
        "are supported!') }}{% endif %}{% endfor %}",
        "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   "
        "</s>[INST] Another question [/INST]",
    },
    {
        "TheBloke/FusionNet_34Bx2_MoE-AWQ",
        "llama2-sys-bos",
        "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > 1 "
        "-%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- "
        "messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n{{- "
        "'[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == "
        "'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you "
        "[/INST]   I am an assistant   </s><s>[INST] Another question [/INST]",
    },
    {
        "bofenghuang/vigogne-2-70b-chat",
        "llama2-sys-strip",
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
        "system_message = messages[0]['content'] %}{% elif true == true and not '<<SYS>>' in messages[0]['content'] "
        "%}{% set loop_messages = messages %}{% set system_message = 'Vous êtes Vigogne, un assistant IA créé par "
        "Zaion Lab. Vous suivez extrêmement bien les instructions. Aidez autant que vous le pouvez.' %}{% else %}{% "
        "set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages "
        "%}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
        "alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false "
        "%}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% "
        "set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + content.strip() + "
        "'\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token "
        "}}{% endif %}{% endfor %}",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]I "
        "am an assistant</s>[INST] Another question [/INST]",
    },
    {
        "mlabonne/AlphaMonarch-7B",
        "monarch",
        "{% for message in messages %}{{bos_token + message['role'] + '\\n' + message['content'] + eos_token + "
        "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' }}{% endif %}",
        "system\nYou are a helpful assistant</s>\n<s>user\nHello</s>\n<s>assistant\nHi there</s>\n<s>user\nWho are "
        "you</s>\n<s>assistant\n   I am an assistant   </s>\n<s>user\nAnother question</s>\n<s>assistant\n",
    },
    {
        "google/gemma-7b-it",
        "gemma",
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for "
        "message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
        "(message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif "
        "%}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if "
        "add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
        "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
        "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n",
    },
    {
        "OrionStarAI/Orion-14B-Chat",
        "orion",
        "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}{% if message['role'] == 'user' "
        "%}{{ 'Human: ' + message['content'] + '\\n\\nAssistant: ' + eos_token }}{% elif message['role'] == "
        "'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
        "Human: You are a helpful assistant\n\nHello\n\nAssistant: </s>Hi there</s>Human: Who are you\n\nAssistant: "
        "</s>   I am an assistant   </s>Human: Another question\n\nAssistant: </s>",
    },
    {
        "openchat/openchat-3.5-0106",
        "openchat",
        "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role'].title() + ': ' + "
        "message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct "
        "Assistant:' }}{% endif %}",
        "You are a helpful assistant<|end_of_turn|>GPT4 Correct User: Hello<|end_of_turn|>GPT4 Correct Assistant: Hi "
        "there<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>GPT4 Correct Assistant:    I am an assistant "
        "  <|end_of_turn|>GPT4 Correct User: Another question<|end_of_turn|>GPT4 Correct Assistant:",
    },
    {
        "deepseek-ai/deepseek-coder-33b-instruct",
        "deepseek",
        "{% if not add_generation_prompt is defined %}\n{% set add_generation_prompt = false %}\n{% endif %}\n{%- set "
        "ns = namespace(found=false) -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' "
        "-%}\n        {%- set ns.found = true -%}\n    {%- endif -%}\n{%- endfor -%}\n{{bos_token}}{%- if not ns.found "
        "-%}\n{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek "
        "Company, and you only answer questions related to computer science. For politically sensitive questions, "
        "security and privacy issues, and other non-computer science questions, you will refuse to answer\\n'}}\n{%- "
        "endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n{{ message['content'] "
        "}}\n    {%- else %}\n        {%- if message['role'] == 'user' %}\n{{'### Instruction:\\n' + "
        "message['content'] + '\\n'}}\n        {%- else %}\n{{'### Response:\\n' + message['content'] + "
        "'\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{% if add_generation_prompt "
        "%}\n{{'### Response:'}}\n{% endif %}",
        "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### Instruction:\nWho "
        "are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\nAnother question\n### Response:\n",
    },
    {
        "eachadea/vicuna-13b-1.1",
        "vicuna",
        "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '\n\n' "
        "-}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}{%- else "
        "-%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if "
        "add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}",
        "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I am an "
        "assistant   </s>\nUSER: Another question\nASSISTANT:",
    },
    {
        "Orca-Vicuna",
        "vicuna-orca",
        "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{-'SYSTEM: ' + message['content'] + '\n' "
        "-}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}{%- else "
        "-%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if "
        "add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}",
        "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I "
        "am an assistant   </s>\nUSER: Another question\nASSISTANT:",
    },
    {
        "CohereForAI/c4ai-command-r-plus",
        "command-r",
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
        "system_message = messages[0]['content'] %}{% elif false == true %}{% set loop_messages = messages %}{% set "
        "system_message = 'You are Command-R, a brilliant, sophisticated, AI-assistant trained to assist human users "
        "by providing thorough responses. You are trained by Cohere.' %}{% else %}{% set loop_messages = messages %}{% "
        "set system_message = false %}{% endif %}{% if system_message != false %}{{ "
        "'<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for "
        "message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set "
        "content = message['content'] %}{% if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + "
        "content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% elif message['role'] == 'assistant' %}{{ "
        "'<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% "
        "endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}",
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful "
        "assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_"
        "TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are "
        "you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an "
        "assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another "
        "question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    },
    {
        "Llama-3",
        "llama3",
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
        "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
        "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ "
        "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|"
        "end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
        "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
        "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    },
    {
        "Phi-3-mini",
        "phi3",
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
        "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') "
        "%}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
        "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
        "question<|end|>\n<|assistant|>\n",
    },
    {
        "Phi-3-small",
        "phi3",
        "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + "
        "'<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% "
        "endif %}",
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
        "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
        "question<|end|>\n<|assistant|>\n",
    },
    {
        "Phi-3-medium",
        "phi3",
        "{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + "
        "'<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + "
        "'<|end|>' + '\n'}}{% endif %}{% endfor %}",
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
        "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
        "question<|end|>\n<|assistant|>\n",
    },
    {
        "Phi-3-vision",
        "phi3",
        "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% "
        "endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{- '<|assistant|>\n' -}}{% "
        "endif %}",
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
        "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
        "question<|end|>\n<|assistant|>\n",
    },
    {
        "ChatGLM3",
        "chatglm3",
        "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n {{ message['content'] "
        "}}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}{% endif %}{% endfor %}{% if "
        "add_generation_prompt %}<|assistant|>{% endif %}",
        "[gMASK]sop<|system|>\n You are a helpful assistant<|user|>\n Hello<|assistant|>\n Hi there<|user|>\n Who are "
        "you<|assistant|>\n    I am an assistant   <|user|>\n Another question<|assistant|>",
    },
    {
        "ChatGLM4",
        "chatglm4",
        "[gMASK]<sop>{% for item in messages %}{% if item['tools'] is defined %}<|system|>\n你是一个名为 ChatGLM "
        "的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 "
        "模型开发的，你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{% set tools = item['tools'] "
        "%}{% for tool in tools %}{% if tool['type'] == 'function' %}\n\n## {{ tool['function']['name'] }}\n\n{{ "
        "tool['function'] | tojson(indent=4) }}\n......{% endif %}{% endfor %}{% endif %}{% if item['content'] %}<|{{ "
        "item['role'] }}|>{{ item['metadata'] }}\n{{ item['content'] }}{% endif %}{% endfor %}{% if "
        "add_generation_prompt %}<|assistant|>\n{% endif %}",
        "[gMASK]<sop><|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there<|user|>\nWho are "
        "you<|assistant|>\n   I am an assistant   <|user|>\nAnother question<|assistant|>\n",
    },
    {
        "GLMEdge",
        "glmedge",
        "{% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n{{ item['content'] }}{% elif "
        "item['role'] == 'user' %}<|user|>\n{{ item['content'] }}{% elif item['role'] == 'assistant' "
        "%}<|assistant|>\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>",
        "<|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there<|user|>\nWho are "
        "you<|assistant|>\n   I am an assistant   <|user|>\nAnother question<|assistant|>",
    },
    {
        "MiniCPM-3B-OpenHermes-2.5-v2-GGUF",
        "minicpm",
        "{% for message in messages %}{% if message['role'] == 'user' %}{{'<用户>' + message['content'].strip() + "
        "'<AI>'}}{% else %}{{message['content'].strip()}}{% endif %}{% endfor %}",
        "You are a helpful assistant<用户>Hello<AI>Hi there<用户>Who are you<AI>I am an assistant<用户>Another "
        "question<AI>",
    },
    {
        "DeepSeek-V2",
        "deepseek2",
        "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token "
        "}}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' "
        "}}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif "
        "message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}{% if "
        "add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
        "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there<｜end▁of▁sentence｜>User: Who are "
        "you\n\nAssistant:    I am an assistant   <｜end▁of▁sentence｜>User: Another question\n\nAssistant:",
    },
    {
        "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)",
        "mistral-v1",
        "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    {%- "
        "set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif "
        "%}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system message, conversation roles "
        "must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' "
        "%}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + "
        "'\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + "
        "message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n    "
        "    {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n        {{- raise_exception('Only user and "
        "assistant roles are supported, with the exception of an initial optional system message!') }}\n    {%- endif "
        "%}\n{%- endfor %}\n",
        " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
        "assistant   </s> [INST] Another question [/INST]",
    },
    {
        "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at start)",
        "mistral-v3",
        "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messages[0][\"content\"] %}\n    "
        "{%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif "
        "%}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n{%- set user_messages = "
        "loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n\n{#- This block checks for "
        "alternating user/assistant messages, skipping tool calling messages #}\n{%- set ns = namespace() %}\n{%- set "
        "ns.index = 0 %}\n{%- for message in loop_messages %}\n    {%- if not (message.role == \"tool\" or "
        "message.role == \"tool_results\" or (message.tool_calls is defined and message.tool_calls is not none)) %}\n  "
        "      {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n            {{- "
        "raise_exception(\"After the optional system message, conversation roles must alternate "
        "user/assistant/user/assistant/...\") }}\n        {%- endif %}\n        {%- set ns.index = ns.index + 1 %}\n   "
        " {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if "
        "message[\"role\"] == \"user\" %}\n        {%- if tools is not none and (message == user_messages[-1]) %}\n    "
        "        {{- \"[AVAILABLE_TOOLS] [\" }}\n            {%- for tool in tools %}\n                {%- set tool = "
        "tool.function %}\n                {{- '{\"type\": \"function\", \"function\": {' }}\n                {%- for "
        "key, val in tool.items() if key != \"return\" %}\n                    {%- if val is string %}\n               "
        "         {{- '\"' + key + '\": \"' + val + '\"' }}\n                    {%- else %}\n                        "
        "{{- '\"' + key + '\": ' + val|tojson }}\n                    {%- endif %}\n                    {%- if not "
        "loop.last %}\n                        {{- \", \" }}\n                    {%- endif %}\n                {%- "
        "endfor %}\n                {{- \"}}\" }}\n                {%- if not loop.last %}\n                    {{- "
        "\", \" }}\n                {%- else %}\n                    {{- \"]\" }}\n                {%- endif %}\n      "
        "      {%- endfor %}\n            {{- \"[/AVAILABLE_TOOLS]\" }}\n            {%- endif %}\n        {%- if "
        "loop.last and system_message is defined %}\n            {{- \"[INST] \" + system_message + \"\\n\\n\" + "
        "message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST] \" + "
        "message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- elif message.tool_calls is defined and "
        "message.tool_calls is not none %}\n        {{- \"[TOOL_CALLS] [\" }}\n        {%- for tool_call in "
        "message.tool_calls %}\n            {%- set out = tool_call.function|tojson %}\n            {{- out[:-1] }}\n  "
        "          {%- if not tool_call.id is defined or tool_call.id|length != 9 %}\n                {{- "
        "raise_exception(\"Tool call IDs should be alphanumeric strings with length 9!\") }}\n            {%- endif "
        "%}\n            {{- ', \"id\": \"' + tool_call.id + '\"}' }}\n            {%- if not loop.last %}\n           "
        "     {{- \", \" }}\n            {%- else %}\n                {{- \"]\" + eos_token }}\n            {%- endif "
        "%}\n        {%- endfor %}\n    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- \" \" + "
        "message[\"content\"]|trim + eos_token}}\n    {%- elif message[\"role\"] == \"tool_results\" or "
        "message[\"role\"] == \"tool\" %}\n        {%- if message.content is defined and message.content.content is "
        "defined %}\n            {%- set content = message.content.content %}\n        {%- else %}\n            {%- "
        "set content = message.content %}\n        {%- endif %}\n        {{- '[TOOL_RESULTS] {\"content\": ' + "
        "content|string + \", \" }}\n        {%- if not message.tool_call_id is defined or message.tool_call_id|length "
        "!= 9 %}\n            {{- raise_exception(\"Tool call IDs should be alphanumeric strings with length 9!\") "
        "}}\n        {%- endif %}\n        {{- '\"call_id\": \"' + message.tool_call_id + '\"}[/TOOL_RESULTS]' }}\n    "
        "{%- else %}\n        {{- raise_exception(\"Only user and assistant roles are supported, with the exception of "
        "an initial optional system message!\") }}\n    {%- endif %}\n{%- endfor %}\n",
        "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
        "assistant</s>[INST] Another question[/INST]",
    },
    {
        "Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' template; modified to have system prompt at start)",
        "mistral-v3-tekken",
        "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messages[0][\"content\"] %}\n    "
        "{%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif "
        "%}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n{%- set user_messages = "
        "loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n\n{#- This block checks for "
        "alternating user/assistant messages, skipping tool calling messages #}\n{%- set ns = namespace() %}\n{%- set "
        "ns.index = 0 %}\n{%- for message in loop_messages %}\n    {%- if not (message.role == \"tool\" or "
        "message.role == \"tool_results\" or (message.tool_calls is defined and message.tool_calls is not none)) %}\n  "
        "      {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n            {{- "
        "raise_exception(\"After the optional system message, conversation roles must alternate "
        "user/assistant/user/assistant/...\") }}\n        {%- endif %}\n        {%- set ns.index = ns.index + 1 %}\n   "
        " {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if "
        "message[\"role\"] == \"user\" %}\n        {%- if tools is not none and (message == user_messages[-1]) %}\n    "
        "        {{- \"[AVAILABLE_TOOLS][\" }}\n            {%- for tool in tools %}\n                {%- set tool = "
        "tool.function %}\n                {{- '{\"type\": \"function\", \"function\": {' }}\n                {%- for "
        "key, val in tool.items() if key != \"return\" %}\n                    {%- if val is string %}\n               "
        "         {{- '\"' + key + '\": \"' + val + '\"' }}\n                    {%- else %}\n                        "
        "{{- '\"' + key + '\": ' + val|tojson }}\n                    {%- endif %}\n                    {%- if not "
        "loop.last %}\n                        {{- \", \" }}\n                    {%- endif %}\n                {%- "
        "endfor %}\n                {{- \"}}\" }}\n                {%- if not loop.last %}\n                    {{- "
        "\", \" }}\n                {%- else %}\n                    {{- \"]\" }}\n                {%- endif %}\n      "
        "      {%- endfor %}\n            {{- \"[/AVAILABLE_TOOLS]\" }}\n            {%- endif %}\n        {%- if "
        "loop.last and system_message is defined %}\n            {{- \"[INST]\" + system_message + \"\\n\\n\" + "
        "message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST]\" + message[\"content\"] "
        "+ \"[/INST]\" }}\n        {%- endif %}\n    {%- elif (message.tool_calls is defined and message.tool_calls is "
        "not none) %}\n        {{- \"[TOOL_CALLS][\" }}\n        {%- for tool_call in message.tool_calls %}\n          "
        "  {%- set out = tool_call.function|tojson %}\n            {{- out[:-1] }}\n            {%- if not "
        "tool_call.id is defined or tool_call.id|length != 9 %}\n                {{- raise_exception(\"Tool call IDs "
        "should be alphanumeric strings with length 9!\") }}\n            {%- endif %}\n            {{- ', \"id\": \"' "
        "+ tool_call.id + '\"}' }}\n            {%- if not loop.last %}\n                {{- \", \" }}\n            "
        "{%- else %}\n                {{- \"]\" + eos_token }}\n            {%- endif %}\n        {%- endfor %}\n    "
        "{%- elif message[\"role\"] == \"assistant\" %}\n        {{- message[\"content\"] + eos_token}}\n    {%- elif "
        "message[\"role\"] == \"tool_results\" or message[\"role\"] == \"tool\" %}\n        {%- if message.content is "
        "defined and message.content.content is defined %}\n            {%- set content = message.content.content %}\n "
        "       {%- else %}\n            {%- set content = message.content %}\n        {%- endif %}\n        {{- "
        "'[TOOL_RESULTS]{\"content\": ' + content|string + \", \" }}\n        {%- if not message.tool_call_id is "
        "defined or message.tool_call_id|length != 9 %}\n            {{- raise_exception(\"Tool call IDs should be "
        "alphanumeric strings with length 9!\") }}\n        {%- endif %}\n        {{- '\"call_id\": \"' + "
        "message.tool_call_id + '\"}[/TOOL_RESULTS]' }}\n    {%- else %}\n        {{- raise_exception(\"Only user and "
        "assistant roles are supported, with the exception of an initial optional system message!\") }}\n    {%- endif "
        "%}\n{%- endfor %}\n",
        "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   "
        "</s>[INST]Another question[/INST]",
    },
    {
        "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)",
        "mistral-v7",
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + "
        "message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
        "message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are "
        "supported!') }}{% endif %}{% endfor %}",
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
        "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]",
    },
    {
        "phi-4",
        "phi4",
        "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + "
        "message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + "
        "message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') "
        "%}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
        "<|im_start|>system<|im_sep|>You are a helpful "
        "assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi "
        "there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an "
        "assistant   <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>",
    },
};

/* Renders msgs in t into a fresh buffer, checking the size protocol on the way. */
static char *render(enum mk_chat_template t, const struct mk_chat_message *msgs, size_t n, bool add, size_t *len) {
    struct mk_error err;
    size_t need = 0;
    if (mk_chat_apply(t, msgs, n, add, NULL, 0, &need, &err) != MK_OK) {
        mk_test_fail("%s: sizing failed: %s", mk_chat_template_name(t), err.msg);
        return NULL;
    }
    /* Too small by one: nothing past cap is written, the length still comes back. */
    char *small = malloc(need + 1);
    MK_ASSERT(small);
    memset(small, 'Z', need + 1);
    size_t got = 0;
    if (need > 0) {
        MK_CHECK(mk_chat_apply(t, msgs, n, add, small, need - 1, &got, &err) == MK_OK && got == need);
        MK_CHECK(small[need - 1] == 'Z' && small[need] == 'Z');
    }
    free(small);
    char *buf = malloc(need + 1);
    MK_ASSERT(buf);
    MK_CHECK(mk_chat_apply(t, msgs, n, add, buf, need + 1, &got, &err) == MK_OK && got == need);
    MK_CHECK(buf[need] == '\0' && strlen(buf) == need);
    *len = need;
    return buf;
}

static void test_llama_cpp_cases(void) {
    int n_ok = 0;
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        const struct chat_case *c = &g_cases[i];
        enum mk_chat_template t = mk_chat_detect_template(c->tmpl, strlen(c->tmpl));
        if (strcmp(mk_chat_template_name(t), c->name) != 0) {
            mk_test_fail("%s: detected '%s', want '%s'", c->model, mk_chat_template_name(t), c->name);
            continue;
        }
        size_t len;
        char *got = render(t, g_conv, N_CONV, true, &len);
        if (!got) continue;
        if (strcmp(got, c->expected) != 0)
            mk_test_fail("%s (%s): rendered\n%s\nwant\n%s", c->model, c->name, got, c->expected);
        else
            n_ok++;
        free(got);
    }
    printf("llama.cpp cases: %d of %zu rendered identically\n", n_ok, sizeof g_cases / sizeof g_cases[0]);
}

/* Formats llama.cpp's test file has no case for. These expectations are written by hand from each
 * format's published layout (model cards), for system, user, assistant, user. */
static void test_other_formats(void) {
    static const struct mk_chat_message conv[] = {
        { "system", "Be brief." },
        { "user", "Hi" },
        { "assistant", " Hello! " },
        { "user", "Bye" },
    };
    static const struct {
        const char *name, *expected;
    } cases[] = {
        { "zephyr", "<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\n Hello! "
                    "<|endoftext|>\n<|user|>\nBye<|endoftext|>\n<|assistant|>\n" },
        { "deepseek3",
          "Be brief.\n\n<\xef\xbd\x9cUser\xef\xbd\x9c>Hi<\xef\xbd\x9c"
          "Assistant\xef\xbd\x9c> Hello! <\xef\xbd\x9c"
          "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>Bye<\xef\xbd\x9c"
          "Assistant\xef\xbd\x9c>" },
        { "mistral-v7-tekken", "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST] Hello! </s>[INST]Bye[/INST]" },
        { "llama2-sys", "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>[INST] Bye [/INST]" },
        { "falcon3", "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n Hello! \n<|user|>\nBye\n<|assistant|>\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum mk_chat_template t = mk_chat_template_from_name(cases[i].name);
        MK_CHECK_MSG(t != MK_CHAT_UNKNOWN, "no template named %s", cases[i].name);
        size_t len;
        char *got = render(t, conv, 4, true, &len);
        if (got && strcmp(got, cases[i].expected) != 0)
            mk_test_fail("%s: rendered\n%s\nwant\n%s", cases[i].name, got, cases[i].expected);
        free(got);
    }
}

/* Detection markers of llama.cpp's llm_chat_detect_template for formats without a case above. */
static void test_detection_markers(void) {
    static const struct {
        const char *tmpl, *name;
    } cases[] = {
        { "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|endoftext|>{% endfor %}<|user|>", "zephyr" },
        { "{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + c}}{{'<\xef\xbd\x9c"
          "Assistant\xef\xbd\x9c>' + c + '<\xef\xbd\x9c"
          "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>'}}",
          "deepseek3" },
        { "{{ '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT]' }}{{ '[INST]' + c + '[/INST]' }}", "mistral-v7" },
        { "[INST] <<SYS>>\n{{ system }}\n<</SYS>>", "llama2-sys" },
        { "mistral whatever the rest says", "llama2" },
        { "<|user|>{{ c }}</s><|assistant|>", "falcon3" },
        { "<|user|>{{ c }}<|assistant|>", "glmedge" },
        { "chatml", "chatml" },
        { "llama3", "llama3" },
        /* SmolVLM starts turns with <|im_start|> but is not ChatML; EXAONE MoE looks like GLM. */
        { "<|im_start|>User:{{ c }}<end_of_utterance>", "unknown" },
        { "<|user|><|assistant|><|tool_declare|>", "unknown" },
        { "{{ messages }}", "unknown" },
        { "", "unknown" },
        { "granite", "unknown" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = mk_chat_template_name(mk_chat_detect_template(cases[i].tmpl, strlen(cases[i].tmpl)));
        MK_CHECK_MSG(!strcmp(got, cases[i].name), "'%s' detected as %s, want %s", cases[i].tmpl, got, cases[i].name);
    }
    /* Only len bytes count: a marker past them is not seen. */
    const char *s = "hello <|im_start|>";
    MK_CHECK(mk_chat_detect_template(s, 6) == MK_CHAT_UNKNOWN);
    MK_CHECK(mk_chat_detect_template(s, strlen(s)) == MK_CHAT_CHATML);
    MK_CHECK(mk_chat_detect_template(NULL, 0) == MK_CHAT_UNKNOWN);
}

static void test_names_and_errors(void) {
    for (int t = MK_CHAT_UNKNOWN + 1; t < MK_CHAT_COUNT; t++) {
        const char *name = mk_chat_template_name((enum mk_chat_template)t);
        MK_CHECK_MSG((int)mk_chat_template_from_name(name) == t, "name %s does not map back", name);
        MK_CHECK((int)mk_chat_detect_template(name, strlen(name)) == t);
        /* Every format renders an empty conversation and a one-message one without trouble. */
        size_t len;
        free(render((enum mk_chat_template)t, g_conv, 0, true, &len));
        free(render((enum mk_chat_template)t, g_conv + 1, 1, false, &len));
    }
    MK_CHECK(mk_chat_template_from_name("nope") == MK_CHAT_UNKNOWN);
    MK_CHECK(mk_chat_template_from_name(NULL) == MK_CHAT_UNKNOWN);
    MK_CHECK(!strcmp(mk_chat_template_name(MK_CHAT_COUNT), "unknown"));

    struct mk_error err;
    size_t len;
    char buf[64];
    MK_CHECK(mk_chat_apply(MK_CHAT_UNKNOWN, g_conv, 1, true, buf, sizeof buf, &len, &err) == MK_ERR_UNSUPPORTED);
    MK_CHECK(mk_chat_apply(MK_CHAT_COUNT, g_conv, 1, true, buf, sizeof buf, &len, &err) == MK_ERR_UNSUPPORTED);
    struct mk_chat_message bad[2] = { { "user", "hi" }, { "assistant", NULL } };
    MK_CHECK(mk_chat_apply(MK_CHAT_CHATML, bad, 2, true, buf, sizeof buf, &len, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(err.msg, "message 1 has no content") != NULL);
    bad[1] = (struct mk_chat_message){ NULL, "x" };
    MK_CHECK(mk_chat_apply(MK_CHAT_CHATML, bad, 2, true, buf, sizeof buf, &len, &err) == MK_ERR_INVALID_ARG);
    MK_CHECK(strstr(err.msg, "message 1 has no role") != NULL);
    MK_CHECK(mk_chat_apply(MK_CHAT_CHATML, g_conv, 1, true, buf, sizeof buf, NULL, &err) == MK_ERR_INVALID_ARG);
}

/* With the assistant prompt, a rendering is the one without it plus the format's opening. */
static void test_assistant_prompt(void) {
    static const struct {
        const char *name, *opening;
    } cases[] = {
        { "chatml", "<|im_start|>assistant\n" },
        { "llama3", "<|start_header_id|>assistant<|end_header_id|>\n\n" },
        { "gemma", "<start_of_turn>model\n" },
        { "mistral-v7", "" },
        { "llama2", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum mk_chat_template t = mk_chat_template_from_name(cases[i].name);
        size_t la, lb;
        char *with = render(t, g_conv, N_CONV, true, &la);
        char *without = render(t, g_conv, N_CONV, false, &lb);
        if (with && without) {
            size_t k = strlen(cases[i].opening);
            MK_CHECK_MSG(la == lb + k && !memcmp(with, without, lb) && !strcmp(with + lb, cases[i].opening),
                         "%s: opening differs", cases[i].name);
        }
        free(with);
        free(without);
    }
}

int main(void) {
    test_llama_cpp_cases();
    test_other_formats();
    test_detection_markers();
    test_names_and_errors();
    test_assistant_prompt();
    return mk_test_finish("chat_test");
}
