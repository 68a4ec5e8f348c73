#!/usr/bin/env bash
# Tokenizes random texts with mk and with llama.cpp's llama-tokenize on every vocab file of a folder and compares the ids (test-only; needs a llama.cpp build).
#
# usage: tests/llamacpp/check_tokenize.sh LLAMA_TOKENIZE MK VOCAB_DIR [N_TEXTS] [SEED]
#   LLAMA_TOKENIZE  llama.cpp's llama-tokenize binary
#   VOCAB_DIR       folder of ggml-vocab-*.gguf files (llama.cpp's models/ folder has 17)
# Texts mix ASCII words, digits, punctuation, runs of spaces, tabs and newlines, code, accented
# Latin, Greek, Cyrillic, CJK, Hangul, Thai, Devanagari, Arabic, emoji (with ZWJ and skin tones),
# the vocab's own special-token texts and invalid-looking sequences. Vocabularies mk refuses (BERT
# WordPiece, T5 Unigram, non-Llama architectures) are listed as skipped. Exits 1 on a mismatch.
set -u
LT=${1:?llama-tokenize}
MK=${2:?mk binary}
DIR=${3:?vocab dir}
N=${4:-8}
SEED=${5:-1}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 - "$W" "$N" "$SEED" <<'PY'
import random, sys
w, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
ranges = [(0x41, 0x5a), (0x61, 0x7a), (0x30, 0x39), (0xc0, 0x17f), (0x391, 0x3c9), (0x410, 0x44f),
          (0x4e00, 0x4fff), (0xac00, 0xad00), (0xe01, 0xe3a), (0x905, 0x939), (0x627, 0x64a),
          (0x3041, 0x3096), (0x1f600, 0x1f64f), (0x1f300, 0x1f5ff)]
words = ["the", "The", "Hello", "world", "don't", "I'm", "we'll", "they've", "isn't", "HTTP", "3.14159",
         "1234567890", "12,345", "e.g.", "U.S.A.", "snake_case", "camelCase", "x+y=z", "<b>", "</div>",
         "def f(x):", "return x**2", "#include <stdio.h>", "http://example.com/a?b=c&d=e", "\\n", "```",
         "café", "naïve", "Ελληνικά", "русский", "中文", "日本語", "한국어", "ภาษาไทย", "हिन्दी", "العربية",
         "👋🏽", "👨‍👩‍👧", "🇫🇷", "ﬁ", "Å", "\u00a0", "\u200b", "\u3000", "...", "!!!", "??", "--", "—", "’", "“quoted”"]
specials = ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
            "<|eot_id|>", "<|start_header_id|>", "[INST]", "<|user|>", "<|assistant|>", "<pad>", "<mask>"]
def piece():
    r = rng.random()
    if r < 0.45: return rng.choice(words)
    if r < 0.65: return "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(1, 8)))
    if r < 0.80: return rng.choice([" ", "  ", "   ", "\t", "\n", "\n\n", " \n ", "\r\n", "    ", "\t\t"])
    if r < 0.90: return rng.choice(specials)
    return "".join(rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~0123456789 ") for _ in range(rng.randint(1, 6)))
for i in range(n):
    parts, total = [], 0
    while total < 1500:
        p = piece(); parts.append(p); total += len(p)
        if rng.random() < 0.6: parts.append(" ")
    with open(f"{w}/t{i}.txt", "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))
PY
ok=0 bad=0 skipped=""
for v in "$DIR"/ggml-vocab-*.gguf; do
    name=$(basename "$v" .gguf)
    if ! "$MK" tokenize -m "$v" -p x --ids > /dev/null 2> "$W/err"; then
        skipped="$skipped $name ($(head -c 120 "$W/err" | tr '\n' ' '))"
        continue
    fi
    vok=0 vbad=0
    for t in "$W"/t*.txt; do
        a=$("$MK" tokenize -m "$v" -f "$t" --ids 2>&1)
        b=$("$LT" -m "$v" -f "$t" --ids --log-disable --no-escape 2>/dev/null | tail -n 1)
        if [ "$a" = "$b" ]; then vok=$((vok + 1)); else
            vbad=$((vbad + 1))
            cp "$t" "$W/../mismatch-$name-$(basename "$t")" 2>/dev/null
            echo "  $name $(basename "$t"): mk $(echo "$a" | head -c 200) ... llama.cpp $(echo "$b" | head -c 200) ..."
        fi
    done
    echo "$name: $vok of $((vok + vbad)) texts give llama-tokenize's ids"
    ok=$((ok + vok)); bad=$((bad + vbad))
done
[ -n "$skipped" ] && echo "skipped (mk refuses them, with this message):$skipped"
echo "check_tokenize: $ok of $((ok + bad)) texts agree"
[ $bad -eq 0 ]
