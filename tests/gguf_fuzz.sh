#!/usr/bin/env bash
# Builds the GGUF reader fuzzer with clang + libFuzzer (ASan/UBSan) and runs it on a generated seed corpus.
# Usage: tests/gguf_fuzz.sh [RUNS] [extra libFuzzer flags...]   (RUNS defaults to 200000)
# Env: MK_FUZZ_DIR (work dir, default /tmp/mk_gguf_fuzz), MK_MODELS_DIR (real files for seeds).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-200000}
shift || true
work=${MK_FUZZ_DIR:-/tmp/mk_gguf_fuzz}
mkdir -p "$work/corpus" "$work/seeds" "$work/crashes"

if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    echo "libFuzzer runtime missing; installing libclang-rt-14-dev" >&2
    apt-get install -y libclang-rt-14-dev >&2
fi

srcs="runtime/gguf.c runtime/dtype.c runtime/status.c tests/gguf_fuzz.c"
flags="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -I. -g"

# Seeds: small valid files from the writer, plus the real model files cut to their first 16 KiB
# (realistic key names and vocab arrays; the cut makes them fail late, deep in the parser).
gcc $flags -Wno-format-truncation -O1 $srcs -lm -o "$work/gguf_fuzz_driver"
"$work/gguf_fuzz_driver" --make-seeds "$work/seeds"
models=""
for d in "${MK_MODELS_DIR:-}" ../shared/models; do
    if [ -n "$d" ] && [ -f "$d/stories260K-f32.gguf" ]; then models=$d; break; fi
done
if [ -n "$models" ]; then
    for f in "$models"/*.gguf; do
        head -c 16384 "$f" > "$work/seeds/cut16k_$(basename "$f")"
    done
fi

cat > "$work/gguf.dict" <<'EOF'
"GGUF"
"general.architecture"
"general.alignment"
"general.name"
"llama"
"tokenizer.ggml.model"
"tokenizer.ggml.tokens"
"tokenizer.ggml.scores"
"tokenizer.ggml.token_type"
"tokenizer.ggml.merges"
"tokenizer.ggml.bos_token_id"
"llama.context_length"
"llama.rope.freq_base"
"llama.attention.layer_norm_rms_epsilon"
"\x00\x00\x00\x00\x00\x00\x00\x80"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x00\x00\x00\x40\x00\x00\x00\x00"
"\x20\x00\x00\x00"
"\x09\x00\x00\x00"
EOF

clang $flags -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DMK_GGUF_LIBFUZZER \
    $srcs -lm -o "$work/gguf_fuzz"

cd "$work"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ./gguf_fuzz -runs="$runs" -dict=gguf.dict -max_len=20000 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=crashes/ -print_final_stats=1 "$@" corpus seeds
