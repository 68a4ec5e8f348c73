#!/usr/bin/env bash
# CLI checks for 'mk info', 'mk gen' and 'mk quantize': help, exit codes, error messages and what info reports.
set -u

MK="${MK:-tools/mk}"
if [ ! -x "$MK" ]; then
    echo "cli_test: mk binary not found at $MK" >&2
    exit 1
fi
. "$(dirname "$0")/sh_lib.sh"
sh_init cli_test

for c in info gen quantize; do
    run 0 "$MK" "$c" --help
    has "$T/out" "usage: mk $c"
done

# Usage errors: exit 2 with a message naming what was wrong.
run 2 "$MK" gen --preset tiny
has "$T/err" "no output file"
run 2 "$MK" gen --preset llama-70b -o "$T/x.gguf"
has "$T/err" "llama-70b"
run 2 "$MK" gen --dtype iq2_xxs -o "$T/x.gguf"
has "$T/err" "iq2_xxs"
run 2 "$MK" gen --seed -3 -o "$T/x.gguf"
run 2 "$MK" gen --eot-id -1 -o "$T/x.gguf"
has "$T/err" "--eot-id '-1'"
run 1 "$MK" gen --eot-id 512 -o "$T/x.gguf"
has "$T/err" "eot id 512 is outside the vocab of 512 tokens"
run 2 "$MK" quantize "$T/x.gguf"
run 2 "$MK" info
[ -e "$T/x.gguf" ] && fail "a failed 'mk gen' left $T/x.gguf behind"

# mk dump names the int8-level copies of the plan: on a one-worker q8_0 model every residual add
# writes the normalized copy its next norm op reads, and gate/up writes FFN-down's input.
run 0 "$MK" gen --preset tiny --dtype q8_0 -o "$T/q8.gguf"
run 0 "$MK" dump -m "$T/q8.gguf" --workers 1
grep -E 'blk\.0\.ffn_down +matvec_residual' "$T/out" | grep -qF 'i8< n8>' || fail "ffn_down's copies: $(cat "$T/out")"
grep -E 'blk\.1\.attn_qkv +norm_qkv_rope' "$T/out" | grep -qF 'n8<' || fail "attn_qkv's copy: $(cat "$T/out")"
grep -E 'blk\.0\.ffn_gate_up' "$T/out" | grep -qF 'n8< i8>' || fail "gate/up's copies: $(cat "$T/out")"
has "$T/out" "copies: int8 levels of x"
run 0 "$MK" dump -m "$T/q8.gguf" --workers 1 --json
has "$T/out" '"copies":"i8< n8>"'
run 0 "$MK" dump -m "$T/q8.gguf" --workers 1 --ubatch 8
grep -qE 'n8|i8<' "$T/out" && fail "a chunk program with copies: $(cat "$T/out")"

# Runtime errors: exit 1 naming the file.
run 1 "$MK" info "$T/missing.gguf"
has "$T/err" "$T/missing.gguf"
printf 'not a gguf file at all, just text\n' >"$T/text.gguf"
run 1 "$MK" info "$T/text.gguf"
has "$T/err" "$T/text.gguf"
run 1 "$MK" quantize "$T/missing.gguf" "$T/y.gguf" --dtype q8_0
has "$T/err" "$T/missing.gguf"
[ -e "$T/y.gguf" ] && fail "a failed 'mk quantize' left $T/y.gguf behind"

# gen -> info: the tiny preset in the Q4_K_M mix.
run 0 "$MK" gen --preset tiny --dtype q4_k_m --seed 3 -o "$T/t.gguf"
[ -s "$T/t.gguf" ] || fail "mk gen wrote no file"
run 0 "$MK" info "$T/t.gguf"
has "$T/out" "architecture: llama"
has "$T/out" "15 (Q4_K_M mix)"
has "$T/out" "n_embd 256, n_ff 768, n_layer 4, n_vocab 512"
has "$T/out" "n_head 8, n_head_kv 4 (GQA 2:1), head_dim 32"
has "$T/out" "tied output"
has "$T/out" "llama (SentencePiece), 512 tokens"
has "$T/out" "blk.2.attn_v.weight"
# Layers 0-1 all Q4_K (444,416 B each), layers 2-3 with Q6_K attn_v and ffn_down (503,552 B
# each), output_norm 1,024 B, one Q6_K embedding row 210 B, the tied Q6_K head 107,520 B.
has "$T/out" "weight bytes per token: 2004690 "
run 0 "$MK" info --keys "$T/t.gguf"
has "$T/out" "mk.gen.seed"

# quantize -> info: f16 everywhere but the norms.
run 0 "$MK" quantize "$T/t.gguf" "$T/h.gguf" --dtype f16
run 0 "$MK" info "$T/h.gguf"
has "$T/out" "1 (mostly f16)"
has "$T/out" "mk synthetic tiny q4_k_m"
grep -E '^  blk\.0\.ffn_down\.weight +f16 ' "$T/out" >/dev/null || fail "ffn_down is not f16 after quantize"
grep -E '^  blk\.0\.ffn_norm\.weight +f32 ' "$T/out" >/dev/null || fail "ffn_norm is not f32 after quantize"
run 1 "$MK" quantize "$T/h.gguf" "$T/h.gguf" --dtype q8_0
has "$T/err" "same file"

# Per-tensor choices, as llama-quantize's options: f16 gates, one q8_0 attn_v, a q8_0 (tied) head.
run 0 "$MK" quantize "$T/t.gguf" "$T/o.gguf" --dtype q4_0 --tensor-type ffn_gate=f16 --tensor-type=blk.1.attn_v=q8_0 \
    --output-tensor-type q8_0
run 0 "$MK" info "$T/o.gguf"
grep -E '^  blk\.0\.ffn_gate\.weight +f16 ' "$T/out" >/dev/null || fail "--tensor-type ffn_gate=f16 did not make ffn_gate f16"
grep -E '^  blk\.1\.attn_v\.weight +q8_0 ' "$T/out" >/dev/null || fail "blk.1.attn_v is not q8_0"
grep -E '^  blk\.0\.attn_v\.weight +q4_0 ' "$T/out" >/dev/null || fail "blk.0.attn_v is not q4_0"
grep -E '^  token_embd\.weight +q8_0 ' "$T/out" >/dev/null || fail "--output-tensor-type q8_0 missed the tied head"
run 2 "$MK" quantize "$T/t.gguf" "$T/o2.gguf" --dtype q4_0 --tensor-type ffn_gate
has "$T/err" "want PART=TYPE"
run 2 "$MK" quantize "$T/t.gguf" "$T/o2.gguf" --dtype q4_0 --tensor-type ffn_gate=q9
has "$T/err" "unknown type 'q9'"
run 2 "$MK" quantize "$T/t.gguf" "$T/o2.gguf" --dtype q4_0 --token-embedding-type
has "$T/err" "--token-embedding-type needs a value"
[ -e "$T/o2.gguf" ] && fail "a refused 'mk quantize' left $T/o2.gguf behind"

# Real files, when the models directory is there.
sh_models stories260K-f32.gguf
if [ -n "$M" ]; then
    run 0 "$MK" info "$M/stories260K-f32.gguf"
    has "$T/out" "n_embd 64, n_ff 172, n_layer 5, n_vocab 512"
    has "$T/out" "tied output by content"
    has "$T/out" "parameters:   292800"
    has "$T/out" "weight bytes per token: 1040384 "
    run 0 "$MK" info "$M/ggml-vocab-gpt-2.gguf"
    has "$T/out" "vocab-only:   yes"
    has "$T/out" "gpt2 (byte-level BPE), 50257 tokens, 50000 merges"
    run 0 "$MK" info "$M/llama-2-tiny-random.gguf"
    has "$T/out" "untied (output.weight, f16)"
    # The KV cache type: f16 by default (half the bytes of f32), a bad one named with exit 2.
    run 0 "$MK" dump -m "$M/stories260K-f32.gguf" --ctx 128
    has "$T/out" "KV cache 81920 bytes (f16)"
    run 0 "$MK" dump -m "$M/stories260K-f32.gguf" --ctx 128 --kv-type f32
    has "$T/out" "KV cache 163840 bytes (f32)"
    for c in dump bench trace; do
        run 2 "$MK" "$c" -m "$M/stories260K-f32.gguf" --kv-type q8_0
        has "$T/err" "--kv-type is 'f16' or 'f32', got 'q8_0'"
    done
    run 0 "$MK" run -m "$M/stories260K-f32.gguf" --backend cpu --temp 0 -n 12 --kv-type f32
    has "$T/out" "Once upon a time, there was a little girl"
    # The chunk products' inputs: a chunk program says from how many token rows its bf16 products
    # round them; --chunk-act f32 never; a bad value named with exit 2.
    run 0 "$MK" dump -m "$M/stories260K-f32.gguf" --ctx 128 --ubatch 64
    has "$T/out" "products over bf16 weights of 64 token rows or more take their inputs rounded to bf16"
    run 0 "$MK" dump -m "$M/stories260K-f32.gguf" --ctx 128 --ubatch 64 --chunk-act f32 --json
    has "$T/out" '"act_bf16_min":0,'
    for c in dump bench; do
        run 2 "$MK" "$c" -m "$M/stories260K-f32.gguf" --chunk-act f16
        has "$T/err" "--chunk-act is 'bf16' or 'f32', got 'f16'"
    done
    run 0 "$MK" run -m "$M/stories260K-f32.gguf" --backend cpu --temp 0 -n 12 --chunk-act f32 --ubatch 64
    has "$T/out" "Once upon a time, there was a little girl"
    # The backend's token loop and one step per token print the same story.
    run 0 "$MK" run -m "$M/stories260K-f32.gguf" --backend cpu --temp 0.8 --seed 7 -n 40
    cp "$T/out" "$T/loop.out"
    run 0 "$MK" run -m "$M/stories260K-f32.gguf" --backend cpu --temp 0.8 --seed 7 -n 40 --host-loop
    cmp -s "$T/out" "$T/loop.out" || fail "mk run --host-loop printed another story"
    has "$T/out" "Once upon a time"
fi

if [ "$failures" != 0 ]; then
    echo "cli_test: $failures check(s) failed" >&2
    exit 1
fi
echo "cli_test: all checks passed"
