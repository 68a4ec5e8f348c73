#!/usr/bin/env bash
# Checks `mk run --chat` prompt tokens against llama.cpp's rendering and tokenization of the same conversation (test-only; needs a llama.cpp build).
#
# usage: tests/llamacpp/check_chat.sh LLAMA_CPP_DIR MK [MODELS_DIR] [WORK_DIR]
#   LLAMA_CPP_DIR  llama.cpp source tree built with CMake into LLAMA_CPP_DIR/build (static
#                  libraries: -DBUILD_SHARED_LIBS=OFF; the llama-common target)
#   MK             the mk binary
#   MODELS_DIR     folder with ggml-vocab-qwen2.gguf, ggml-vocab-llama-bpe.gguf and
#                  ggml-vocab-llama-spm.gguf (default ../shared/models)
# Models with real vocabularies and the real Qwen2.5 and Llama 3.x Jinja templates (from
# LLAMA_CPP_DIR/models/templates) are made with `mk gen --vocab`; every built-in template mk
# knows is then checked by name on them too. Prints one line per case and exits 1 on a mismatch.
set -u
L=${1:?llama.cpp dir}
MK=${2:?mk binary}
MODELS=${3:-../shared/models}
W=${4:-$(mktemp -d)}
mkdir -p "$W"
. "$(dirname "$0")/lib.sh"
llamacpp_build "$L" chat_ref.cpp "$W/chat_ref"
T=$L/models/templates
gen() { # name vocab template-text-or-name
    [ -f "$W/$1.gguf" ] || "$MK" gen --preset tiny --dtype q8_0 --vocab "$MODELS/$2" --chat-template "$3" \
        -o "$W/$1.gguf" > /dev/null || exit 2
}
gen qwen25 ggml-vocab-qwen2.gguf "$(cat "$T/Qwen-Qwen2.5-7B-Instruct.jinja")"
gen llama31 ggml-vocab-llama-bpe.gguf "$(cat "$T/meta-llama-Llama-3.1-8B-Instruct.jinja")"
gen llama32 ggml-vocab-llama-bpe.gguf "$(cat "$T/meta-llama-Llama-3.2-3B-Instruct.jinja")"
gen llama33 ggml-vocab-llama-bpe.gguf "$(cat "$T/meta-llama-Llama-3.3-70B-Instruct.jinja")"
gen spm ggml-vocab-llama-spm.gguf chatml

fails=0 n=0
# case: model, template name ("" = the file's), system, user
check() {
    local model=$1 tmpl=$2 sys=$3 user=$4 mkargs=() refargs=()
    [ -n "$tmpl" ] && mkargs+=(--chat-template "$tmpl") && refargs+=(--template "$tmpl")
    [ -n "$sys" ] && mkargs+=(--system "$sys") && refargs+=(--system "$sys")
    local mk_ids ref_ids
    mk_ids=$("$MK" run -m "$W/$model.gguf" --backend cpu --chat "${mkargs[@]}" -p "$user" -n 0 -v 2>&1 |
        sed -n 's/^mk run: prompt: [0-9]* tokens: //p' | tr ' ' ',' | sed 's/,/, /g')
    ref_ids=$("$W/chat_ref" -m "$W/$model.gguf" "${refargs[@]}" -p "$user" | tr -d '[]')
    local what="$model ${tmpl:-file-template} system=${#sys}B user=${#user}B"
    n=$((n + 1))
    if [ -n "$mk_ids" ] && [ "$mk_ids" = "$ref_ids" ]; then
        echo "ok   $what: [$mk_ids]"
    else
        fails=$((fails + 1))
        echo "FAIL $what"
        echo "     mk:        [$mk_ids]"
        echo "     llama.cpp: [$ref_ids]"
    fi
}
SYS="You are a helpful assistant."
USERS=("Hello! How are you?" "  spaces around, and a newline
inside  " "Grüße, 世界 🌍 — 'quotes' \"and\" <b>tags</b>" "text with <|im_end|> and <|eot_id|> in it")
for m in qwen25 llama31 llama32 llama33; do
    for u in "${USERS[@]}"; do
        check $m "" "$SYS" "$u"
        check $m "" "" "$u"
    done
done
for t in chatml llama2 llama2-sys llama2-sys-bos llama2-sys-strip mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7 \
    mistral-v7-tekken phi3 phi4 falcon3 zephyr monarch gemma orion openchat vicuna vicuna-orca deepseek deepseek2 \
    deepseek3 command-r llama3 chatglm3 chatglm4 glmedge minicpm; do
    for m in qwen25 spm; do
        check $m $t "$SYS" "${USERS[2]}"
        check $m $t "" "${USERS[1]}"
    done
done
echo "check_chat: $((n - fails)) of $n cases agree"
[ $fails -eq 0 ]
