#!/usr/bin/env bash
# Tests 'mk run --chat' and 'mk chat' on generated ChatML models: prompt tokens, --no-special, end-of-turn stop, multi-turn cache reuse, context full, Ctrl-C, errors.
set -u

MK="${1:?usage: chat_cli_test.sh path/to/mk}"
MK="$(cd "$(dirname "$MK")" && pwd)/$(basename "$MK")"
. "$(dirname "$0")/sh_lib.sh"
sh_init chat_cli_test

# The tiny preset with ChatML's template name as tokenizer.chat_template; its vocab ends with
# <|im_start|> (507) <|im_end|> (508) <|start_header_id|> <|end_header_id|> <|eot_id|>.
run 0 "$MK" gen --chat-template chatml -o "$T/chat.gguf"
run 0 "$MK" gen -o "$T/plain.gguf"
run 0 "$MK" tokenize -m "$T/chat.gguf" -p "<|im_end|>" --ids
[ "$(cat "$T/out")" = "[1, 508]" ] || fail "<|im_end|> is not token 508: $(cat "$T/out")"
common=(--temp 0 --backend cpu -t 2)
run 0 "$MK" info "$T/chat.gguf"
has "$T/out" "chat:         template chatml"
run 0 "$MK" info "$T/plain.gguf"
has "$T/out" "no tokenizer.chat_template"

# ---- mk run --chat: the prompt is the rendered template, its markers special tokens ----
run 0 "$MK" run -m "$T/chat.gguf" --chat --system "Be brief." -p "Hi" -n 4 -v "${common[@]}"
prompt="$(sed -n 's/^mk run: prompt: [0-9]* tokens: //p' "$T/err")"
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' >"$T/rendered"
run 0 "$MK" tokenize -m "$T/chat.gguf" -f "$T/rendered" --ids
want="$(tr -d '[],' <"$T/out")"
[ -n "$prompt" ] && [ "$prompt" = "$want" ] || fail "--chat prompt ids '$prompt', want the ChatML rendering's '$want'"
case " $prompt " in *" 507 "*" 508 "*) ;; *) fail "--chat prompt lacks the ChatML markers: $prompt" ;; esac

# ---- --no-special: "<|im_start|>" in a plain prompt is one token, or text ----
run 0 "$MK" run -m "$T/chat.gguf" -p "<|im_start|>user" -n 1 -v "${common[@]}"
special="$(sed -n 's/^mk run: prompt: [0-9]* tokens: //p' "$T/err")"
run 0 "$MK" run -m "$T/chat.gguf" -p "<|im_start|>user" -n 1 -v --no-special "${common[@]}"
plain="$(sed -n 's/^mk run: prompt: [0-9]* tokens: //p' "$T/err")"
case "$special" in "1 507 "*) ;; *) fail "parsed prompt does not start with BOS <|im_start|>: '$special'" ;; esac
case " $plain " in *" 507 "*) fail "--no-special still made <|im_start|>: '$plain'" ;; esac
[ "$(wc -w <<<"$plain")" -gt "$(wc -w <<<"$special")" ] || fail "--no-special: '$plain' vs '$special'"
run 2 "$MK" run -m "$T/chat.gguf" --chat --no-special -p "Hi"
has "$T/err" "--no-special cannot go with --chat"
run 2 "$MK" run -m "$T/chat.gguf" --system "x" -p "Hi"
has "$T/err" "--system needs --chat"

# ---- End of turn: the token greedy answers first becomes the EOT id of the same weights ----
run 0 "$MK" run -m "$T/chat.gguf" --chat -p "Hi" -n 1 --ids "${common[@]}"
x="$(cat "$T/out")"
run 0 "$MK" gen --chat-template chatml --eot-id "$x" -o "$T/eot.gguf"
run 0 "$MK" run -m "$T/eot.gguf" --chat -p "Hi" -n 5 --ids "${common[@]}"
[ -z "$(tr -d '\n' <"$T/out")" ] || fail "EOT $x: generated '$(cat "$T/out")', expected nothing"
has "$T/err" "end of turn after 0 tokens"
run 0 "$MK" run -m "$T/eot.gguf" --chat -p "Hi" -n 5 --ids --ignore-eos "${common[@]}"
[ "$(cut -d' ' -f1 "$T/out")" = "$x" ] && [ "$(wc -w <"$T/out")" -eq 5 ] ||
    fail "--ignore-eos: '$(cat "$T/out")', expected 5 ids starting with $x"

# ---- mk chat: lines from a pipe, the cache kept across turns, /exit ----
printf 'Hello there\nAnd then?\n\n/exit\nnever read\n' >"$T/in"
"$MK" chat -m "$T/chat.gguf" -n 6 -v "${common[@]}" <"$T/in" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" = 0 ] || fail "mk chat exited $rc: $(head -c 400 "$T/err")"
[ "$(wc -l <"$T/out")" -eq 2 ] || fail "mk chat: expected 2 answers (one a line), got: $(cat "$T/out")"
grep -q "never read" "$T/err" && fail "mk chat read past /exit"
t1="$(sed -n 's/^mk chat: turn 1: \([0-9]*\) tokens, 0 kept from the cache, \1 evaluated$/\1/p' "$T/err")"
read -r n2 kept2 eval2 <<<"$(sed -n 's/^mk chat: turn 2: \([0-9]*\) tokens, \([0-9]*\) kept from the cache, \([0-9]*\) evaluated$/\1 \2 \3/p' "$T/err")"
if [ -z "$t1" ] || [ -z "${n2:-}" ]; then
    fail "mk chat -v does not report the turns: $(cat "$T/err")"
elif [ "$kept2" -lt "$t1" ] || [ "$((kept2 + eval2))" -ne "$n2" ]; then
    fail "turn 2: $n2 tokens, $kept2 kept, $eval2 evaluated; turn 1's $t1 tokens should all be kept"
else
    echo "ok: turn 2 evaluated $eval2 of $n2 tokens ($kept2 kept; turn 1 was $t1)"
fi
# The first answer is the one 'mk run --chat' gives the same message.
run 0 "$MK" chat -m "$T/chat.gguf" -n 6 --ids "${common[@]}" <"$T/in"
chat_first="$(sed -n 1p "$T/out")"
run 0 "$MK" run -m "$T/chat.gguf" --chat -p "Hello there" -n 6 --ids "${common[@]}"
[ -n "$chat_first" ] && [ "$chat_first" = "$(cat "$T/out")" ] ||
    fail "mk chat's first answer '$chat_first' differs from mk run --chat's '$(cat "$T/out")'"

# ---- Context full: said clearly, with what to do ----
"$MK" chat -m "$T/chat.gguf" -n 20 --ctx 48 "${common[@]}" <"$T/in" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" = 1 ] || fail "context full: exit $rc, expected 1"
has "$T/err" "context full"
has "$T/err" "--ctx"

# ---- Errors: no template, unknown template, no model ----
run 1 "$MK" chat -m "$T/plain.gguf" </dev/null
has "$T/err" "has no tokenizer.chat_template"
run 2 "$MK" chat -m "$T/chat.gguf" --chat-template nope </dev/null
has "$T/err" "unknown chat template 'nope'"
# Refused with the option, before the model is read (it need not even exist).
run 2 "$MK" run -m "$T/absent.gguf" --chat --chat-template nope -p "Hi"
has "$T/err" "unknown chat template 'nope' (known: chatml,"
run 2 "$MK" chat </dev/null
has "$T/err" "no model"
run 0 "$MK" chat -m "$T/plain.gguf" --chat-template llama3 -n 2 "${common[@]}" </dev/null
has "$T/err" "template llama3"

# ---- Ctrl-C during an answer stops the answer, not the program ----
mkfifo "$T/fifo"
rm -f "$T/out" # left from the last check, it would end the wait below before mk runs (see run_test.sh)
"$MK" chat -m "$T/chat.gguf" -n 1500 --ignore-eos --ids "${common[@]}" <"$T/fifo" >"$T/out" 2>"$T/err" &
pid=$!
exec 3>"$T/fifo"
echo "Tell me a long story" >&3
for _ in $(seq 200); do
    [ -s "$T/out" ] && break
    sleep 0.1
done
kill -INT "$pid"
sleep 0.5
echo "/exit" >&3
exec 3>&-
wait "$pid"
rc=$?
if [ "$rc" != 0 ] || ! grep -q "interrupted after" "$T/err"; then
    fail "SIGINT during an answer: exit $rc (want 0 after /exit), stderr: $(tail -n 3 "$T/err")"
else
    echo "ok: SIGINT stopped the answer ($(grep "interrupted after" "$T/err")), /exit then ended mk chat"
fi

# ---- mk gen --vocab: a model with a real tokenizer (Qwen2's, ChatML) ----
sh_models ggml-vocab-qwen2.gguf
if [ -n "$M" ]; then
    run 0 "$MK" gen --vocab "$M/ggml-vocab-qwen2.gguf" --chat-template chatml --dtype q8_0 -o "$T/qwen.gguf"
    run 0 "$MK" info "$T/qwen.gguf"
    has "$T/out" "151936 tokens"
    # The same text gives the same tokens through the vocab file and through the made model.
    text='Hello <|im_start|>world, 世界 123'
    run 0 "$MK" tokenize -m "$M/ggml-vocab-qwen2.gguf" -p "$text" --ids
    cp "$T/out" "$T/want"
    run 0 "$MK" tokenize -m "$T/qwen.gguf" -p "$text" --ids
    cmp -s "$T/out" "$T/want" || fail "tokens differ: vocab file $(cat "$T/want"), made model $(cat "$T/out")"
    # ChatML around one user message: <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n
    run 0 "$MK" run -m "$T/qwen.gguf" --backend cpu --chat -p Hi -n 0 -v
    has "$T/err" "prompt: 9 tokens: 151644 872 198 13048 151645 198 151644 77091 198"
    run 1 "$MK" gen --vocab "$T/in" -o "$T/bad.gguf"
    has "$T/err" "$T/in"
    [ -e "$T/bad.gguf" ] && fail "a failed 'mk gen --vocab' left $T/bad.gguf behind"
fi

[ "$failures" -eq 0 ] || {
    echo "$failures check(s) failed" >&2
    exit 1
}
echo "chat_cli_test: all checks passed"
