#!/bin/bash
# Tests the 'mk run' command end to end: golden text and ids on stories260K, summary, built-in model, errors.
set -u

MK="${1:?usage: run_test.sh path/to/mk}"
MK="$(cd "$(dirname "$MK")" && pwd)/$(basename "$MK")"
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

models=""
for d in "${MK_MODELS_DIR:-}" ../shared/models; do
    if [ -n "$d" ] && [ -r "$d/stories260K-f32.gguf" ]; then
        models="$d"
        break
    fi
done

work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/mk-run-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Runs mk with the given arguments; stdout to $work/out, stderr to $work/err, status to $rc.
run() {
    "$MK" run "$@" >"$work/out" 2>"$work/err"
    rc=$?
}

expect_fail() {
    local what="$1" pattern="$2"
    shift 2
    run "$@"
    if [ "$rc" -eq 0 ]; then
        fail "$what: exit 0, expected an error"
    elif ! grep -q -- "$pattern" "$work/err"; then
        fail "$what: stderr lacks '$pattern': $(cat "$work/err")"
    else
        echo "ok: $what -> exit $rc: $(head -n 1 "$work/err")"
    fi
}

# ---- Options, checked before any model is read ----
expect_fail "--temp -1" "expected a number >= 0" --temp -1
expect_fail "--top-p 0" "expected a number in (0, 1]" --top-p 0
expect_fail "--top-p 1.5" "expected a number in (0, 1]" --top-p 1.5
expect_fail "--min-p 2" "expected a number in \[0, 1\]" --min-p 2
expect_fail "-n abc" "expected an integer >= -1" -n abc
expect_fail "-n -2" "expected an integer >= -1" -n -2
expect_fail "--top-k -1" "expected an integer >= 0" --top-k -1
expect_fail "--ctx 1x" "expected an integer >= 0" --ctx 1x
expect_fail "--seed -5" "expected an integer" --seed -5
expect_fail "--backend foo" "auto, ref, cpu, megakernel, perop or graph" --backend foo
expect_fail "unknown option" "unknown option '--frobnicate'" --frobnicate 3
expect_fail "missing value" "missing value" -m
expect_fail "missing file" "/nonexistent/model.gguf" -m /nonexistent/model.gguf
printf 'not a gguf file at all, only text\n' >"$work/junk.gguf"
expect_fail "not a GGUF" "junk.gguf" -m "$work/junk.gguf"

# ---- The built-in synthetic model: made in TMPDIR and deleted afterwards ----
mkdir -p "$work/tmp"
TMPDIR="$work/tmp" "$MK" run -n 8 --temp 0 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ]; then
    fail "built-in model: exit $rc: $(cat "$work/err")"
elif ! grep -q "built-in synthetic model" "$work/err"; then
    fail "built-in model: stderr does not say so: $(cat "$work/err")"
elif [ -n "$(ls -A "$work/tmp")" ]; then
    fail "built-in model: left files in TMPDIR: $(ls -A "$work/tmp")"
else
    echo "ok: built-in model ran 8 tokens and removed its temp file"
fi
TMPDIR="$work/tmp" "$MK" run -n 5 --temp 0 --ids >"$work/ids1" 2>/dev/null
TMPDIR="$work/tmp" "$MK" run -n 5 --temp 0 --ids >"$work/ids2" 2>/dev/null
if [ "$(wc -w <"$work/ids1")" -ne 5 ] || ! cmp -s "$work/ids1" "$work/ids2"; then
    fail "built-in model: 5 greedy ids not reproducible: '$(cat "$work/ids1")' vs '$(cat "$work/ids2")'"
fi

if [ -z "$models" ] && [ "${MK_REQUIRE_MODELS:-}" = 1 ]; then
    fail "models directory not found (MK_MODELS_DIR=${MK_MODELS_DIR:-unset}) and MK_REQUIRE_MODELS=1"
    exit 1
fi
if [ -z "$models" ]; then
    echo "SKIP: models directory not found (set MK_MODELS_DIR); skipping the stories260K checks"
    [ "$failures" -eq 0 ] || exit 1
    exit 0
fi
stories="$models/stories260K-f32.gguf"

# ---- Golden text: the README's greedy story; the prompt is its first 4 tokens, then 40 more ----
golden="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high"
expect40="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
case "$golden" in "$expect40"*) ;; *) fail "test bug: the 40-token text is not a prefix of the golden text" ;; esac
for backend in auto ref cpu; do
    run -m "$stories" -p "Once upon a time" --temp 0 -n 40 --backend "$backend"
    got="$(cat "$work/out")"
    if [ "$rc" -ne 0 ]; then
        fail "golden ($backend): exit $rc: $(cat "$work/err")"
    elif [ "$got" != "$expect40" ]; then
        fail "golden ($backend): got '$got', expected '$expect40'"
    else
        echo "ok: golden text ($backend): $got"
    fi
done
for key in "load time" "prompt eval time" "/     5 tokens" "eval time" "/    39 runs" "tokens per second"; do
    grep -q -- "$key" "$work/err" || fail "summary lacks '$key': $(cat "$work/err")"
done

# ---- Golden ids from an empty prompt ----
golden_ids="403 407 261 378 432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337 410 408 419 292 411 322 265 282 295 433 426 385 328 432 358 394 261 370 432 352 266 268 388 426 338 391 266 267 337 335 312 432 398 312 286 267 414 270 333 415"
run -m "$stories" --temp 0 -n 60 --ids
if [ "$rc" -ne 0 ] || [ "$(cat "$work/out")" != "$golden_ids" ]; then
    fail "golden ids: exit $rc, got '$(cat "$work/out")'"
else
    echo "ok: empty prompt, 60 greedy ids equal the README"
fi
run -m "$stories" --temp 0 -n 60
if [ "$(cat "$work/out")" != "$golden" ]; then
    fail "golden text from BOS: got '$(cat "$work/out")'"
fi

# ---- Requantized copies (made with 'mk quantize'): F16 and BF16 keep the first 20 greedy ids ----
golden20="$(echo "$golden_ids" | cut -d' ' -f1-20)"
for dtype in f16 bf16 q8_0; do
    if ! "$MK" quantize "$stories" "$work/stories-$dtype.gguf" --dtype "$dtype" >/dev/null 2>"$work/err"; then
        fail "mk quantize --dtype $dtype: $(cat "$work/err")"
        continue
    fi
    run -m "$work/stories-$dtype.gguf" --temp 0 -n 20 --ids
    if [ "$dtype" = q8_0 ]; then
        run -m "$work/stories-$dtype.gguf" -p "Once upon a time" --temp 0 -n 40
        echo "ok: q8_0 greedy text: $(cat "$work/out")"
        case "$(cat "$work/out")" in "Once upon a time, there was a little girl"*) ;; *) fail "q8_0 text strays at once" ;; esac
    elif [ "$rc" -ne 0 ] || [ "$(cat "$work/out")" != "$golden20" ]; then
        fail "$dtype: first 20 greedy ids '$(cat "$work/out")', expected '$golden20'"
    else
        echo "ok: $dtype: first 20 greedy ids equal the f32 golden ids"
    fi
    rm -f "$work/stories-$dtype.gguf"
done

# ---- Sampling: a fixed seed reproduces; the default seed is reported ----
run -m "$stories" -p "Once upon a time" -n 30 --seed 7 --temp 1
first="$(cat "$work/out")"
run -m "$stories" -p "Once upon a time" -n 30 --seed 7 --temp 1
[ "$rc" -eq 0 ] && [ "$first" = "$(cat "$work/out")" ] || fail "--seed 7 is not reproducible"
run -m "$stories" -p "Once upon a time" -n 10
grep -q "seed [0-9]" "$work/err" || fail "the random seed is not reported: $(cat "$work/err")"

# ---- Context limits ----
expect_fail "prompt longer than the context" "longer than the context" -m "$stories" --ctx 4 -p "Once upon a time there was"
run -m "$stories" --ctx 16 -n 100 --temp 0 --ids
if [ "$rc" -ne 0 ] || ! grep -q "context full" "$work/err" || [ "$(wc -w <"$work/out")" -ne 16 ]; then
    fail "context full during generation: exit $rc, $(wc -w <"$work/out") ids, stderr $(cat "$work/err")"
else
    echo "ok: --ctx 16 stops after 16 tokens: $(grep "context full" "$work/err")"
fi

# ---- A random F16 model with a 32000-token vocabulary ----
run -m "$models/llama-2-tiny-random.gguf" -p "Hello" -n 6 --ids
if [ "$rc" -ne 0 ] || [ "$(wc -w <"$work/out")" -ne 6 ]; then
    fail "llama-2-tiny-random: exit $rc: $(cat "$work/err")"
else
    echo "ok: llama-2-tiny-random generated: $(cat "$work/out")"
fi

# ---- Ctrl-C: the first SIGINT stops decoding, the summary still prints, exit 130 ----
# The last test's output goes first: left there, it could end the wait below before the
# background shell has exec'd mk, whose SIGINT would then run this script's EXIT trap in the
# child and remove $work.
rm -f "$work/out" "$work/err"
"$MK" run -m "$models/stories260K-f32.gguf" --backend ref --ids -n -1 --ctx 1000000 >"$work/out" 2>"$work/err" &
pid=$!
# Signal only once tokens stream (the handler is in place by then); give up after 20 s.
for _ in $(seq 200); do
    [ -s "$work/out" ] && break
    sleep 0.1
done
kill -INT "$pid"
wait "$pid"
rc=$?
if [ "$rc" -ne 130 ] || ! grep -q "interrupted after" "$work/err" || ! grep -q "eval time" "$work/err"; then
    fail "SIGINT: exit $rc (want 130), stderr: $(tail -n 3 "$work/err")"
else
    echo "ok: SIGINT -> exit 130: $(grep "interrupted after" "$work/err")"
fi

# ---- mk trace: its errors; the trace itself needs the GPU host (tools/gpu_check.sh trace) ----
trace_fail() {
    local what="$1" want_rc="$2" pattern="$3"
    shift 3
    "$MK" trace "$@" >"$work/out" 2>"$work/err"
    rc=$?
    if [ "$rc" -ne "$want_rc" ] || ! grep -q -- "$pattern" "$work/err"; then
        fail "mk trace $what: exit $rc (want $want_rc), stderr: $(head -n 2 "$work/err")"
    else
        echo "ok: mk trace $what -> exit $rc: $(head -n 1 "$work/err")"
    fi
}
trace_fail "without -m" 2 "a model is required"
trace_fail "-n past --ctx" 2 "do not fit in --ctx 8" -m "$stories" -n 9 --ctx 8
trace_fail "bad GPU flag" 2 "static or dynamic" -m "$stories" --schedule sometimes
trace_fail "bad --chunk-dequant-min" 2 "needs an integer in \[0, 1048576\], got 'lots'" -m "$stories" --chunk-dequant-min lots
MK_CUDA_CHUNK_DEQUANT_MIN=-3 trace_fail "bad MK_CUDA_CHUNK_DEQUANT_MIN" 2 "MK_CUDA_CHUNK_DEQUANT_MIN=-3: want a whole number" \
    -m "$stories"
MK_CUDA_NO_PDL=yes trace_fail "bad MK_CUDA_NO_PDL" 2 "MK_CUDA_NO_PDL=yes: want 0 or 1" -m "$stories"
MK_CUDA_NO_CHUNK_KQ=2 trace_fail "bad MK_CUDA_NO_CHUNK_KQ" 2 "MK_CUDA_NO_CHUNK_KQ=2: want 0 or 1" -m "$stories"
MK_CUDA_MV_KQ8=2 trace_fail "bad MK_CUDA_MV_KQ8" 2 "MK_CUDA_MV_KQ8=2: want 0 or 1" -m "$stories"
MK_CUDA_FOLD=yes trace_fail "bad MK_CUDA_FOLD" 2 "MK_CUDA_FOLD=yes: want 0 or 1" -m "$stories"
MK_CUDA_ATTN_H16=on trace_fail "bad MK_CUDA_ATTN_H16" 2 "MK_CUDA_ATTN_H16=on: want 0 or 1" -m "$stories"
MK_CUDA_MV_BLOCKS=many trace_fail "bad MK_CUDA_MV_BLOCKS" 2 "MK_CUDA_MV_BLOCKS=many: want a whole number" -m "$stories"
MK_CUDA_XB_ROWS=200 trace_fail "bad MK_CUDA_XB_ROWS" 2 "MK_CUDA_XB_ROWS=200: want 0, 128, 192 or 256" -m "$stories"
MK_CUDA_XB_LOAD=tmx trace_fail "bad MK_CUDA_XB_LOAD" 2 "MK_CUDA_XB_LOAD=tmx: want auto, copy or tma" -m "$stories"
MK_CUDA_FLOAT_IMAGE=yes trace_fail "bad MK_CUDA_FLOAT_IMAGE" 2 "MK_CUDA_FLOAT_IMAGE=yes: want 0 or 1" -m "$stories"
trace_fail "missing file" 1 "/nonexistent/model.gguf" -m /nonexistent/model.gguf
MK_CUDA_LIB=libcuda-absent.so.1 trace_fail "without a driver" 1 "libcuda-absent.so.1 not found" -m "$stories" -o "$work/t.json"
[ -e "$work/t.json" ] && fail "mk trace without a driver wrote $work/t.json"
trace_fail "unknown backend" 2 "'megakernel' or 'cpu'" -m "$stories" --backend ref
# The cpu executor's trace: a slice per task, on the tracks of its two workers (a tiny model's
# tasks may all go to one of them).
"$MK" trace -m "$stories" --backend cpu --threads 2 -n 4 -o "$work/t.json" >"$work/out" 2>"$work/err"
rc=$?
tasks=$(sed -n 's/.* \([0-9][0-9]*\) tasks, step span.*/\1/p' "$work/out")
slices=$(grep -c '"ph":"X"' "$work/t.json" 2>/dev/null)
tracks=$(grep -o '"ph":"X","pid":0,"tid":[0-9]*' "$work/t.json" 2>/dev/null | grep -cv '"tid":[01]$')
named=$(grep -c '"name":"thread_name"' "$work/t.json" 2>/dev/null)
if [ "$rc" -ne 0 ] || [ -z "$tasks" ] || [ "$slices" != "$tasks" ] || [ "$tracks" -ne 0 ] || [ "$named" -ne 2 ] ||
    ! grep -q "^norm_gate_up_silu" "$work/out"; then
    fail "mk trace --backend cpu: exit $rc, $tasks tasks, $slices slices, $tracks on no worker, $named tracks: $(cat "$work/err")"
else
    echo "ok: mk trace --backend cpu: $slices slices for $tasks tasks, all on the $named worker tracks"
fi
# A chunk step (#12): its attention is ATTN_CHUNK.
"$MK" trace -m "$stories" --backend cpu --ubatch 4 -n 2 -o "$work/tc.json" >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q '"cat":"attn_chunk"' "$work/tc.json" || ! grep -q "chunk steps of 4 tokens" "$work/out"; then
    fail "mk trace --ubatch 4: exit $rc: $(cat "$work/err")"
else
    echo "ok: mk trace --ubatch 4: $(grep -c '"cat":"attn_chunk"' "$work/tc.json") attn_chunk slices"
fi
# A sampled step (--temp): the trace says so, and its sample slice is there; a bad temperature and
# --temp on the megakernel's chunk trace (greedy only) are refused before anything loads.
"$MK" trace -m "$stories" --backend cpu --threads 2 -n 4 --temp 0.8 --top-k 5 -o "$work/ts.json" >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "step span .* us, sampled ->" "$work/out" || ! grep -q '"cat":"sample"' "$work/ts.json"; then
    fail "mk trace --temp 0.8: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk trace --temp 0.8: $(grep -c '"cat":"sample"' "$work/ts.json") sample slice"
fi
trace_fail "bad --temp" 2 "--temp 'hot' is not a temperature" -m "$stories" --temp hot
trace_fail "--temp on a GPU chunk trace" 2 "runs greedy steps only" -m "$stories" --ubatch 4 --temp 0.8
# A GPU chunk step's trace needs the driver like any GPU trace (its launches are timed on the device).
MK_CUDA_LIB=libcuda-absent.so.1 trace_fail "--ubatch on the GPU without a driver" 1 "libcuda-absent.so.1 not found" \
    -m "$stories" --ubatch 4 -o "$work/tg.json"
[ -e "$work/tg.json" ] && fail "mk trace --ubatch without a driver wrote $work/tg.json"

# mk bench --breakdown: the same per-op table after the cpu backend's row; none for ref. Each row has
# the median and slowest task and the idle time before a task: tasks take time, and none is negative.
"$MK" bench -m "$stories" --backend cpu,ref -n 8 -p 0 --breakdown >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "^breakdown stories260K-f32.gguf cpu: step 8 on the cpu executor" "$work/out" ||
    ! grep -q "^op .*task us  *slowest us  *idle us$" "$work/out" ||
    ! awk '$1 == "norm_gate_up_silu" && $2 == 5 && NF == 8 && $6 > 0 && $7 >= $6 / 100 && $8 >= 0 { ok = 1 } END { exit !ok }' "$work/out" ||
    ! grep -q "^breakdown stories260K-f32.gguf ref: only" "$work/out"; then
    fail "mk bench --breakdown: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench --breakdown: $(grep -c '^breakdown' "$work/out") breakdown headers"
fi

# mk bench -d: the timed steps start deep in the context (tg4@d600 needs --ctx 604, chosen by itself);
# a depth that does not fit an explicit --ctx is refused.
"$MK" bench -m "$stories" --backend cpu -n 4 -d 600 -p 0 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "| tg4@d600 " "$work/out"; then
    fail "mk bench -d 600: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench -d 600: $(grep -o 'tg4@d600 *| *[0-9.]*' "$work/out")"
fi
# pp at depth: the timed prompt starts after -d untimed positions (pp64@d300, like llama-bench -p 64 -d 300).
"$MK" bench -m "$stories" --backend cpu -n 4 -d 300 -p 64 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "| pp64@d300 " "$work/out" || ! grep -q "| tg4@d300 " "$work/out"; then
    fail "mk bench -d 300 -p 64: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench -d 300 -p 64: $(grep -o 'pp64@d300 *| *[0-9.]*' "$work/out")"
fi
# -n 0: the prompt test alone (like llama-bench -n 0); with nothing left to time, a usage error.
"$MK" bench -m "$stories" --backend cpu -n 0 -p 32 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "| pp32 " "$work/out" || grep -q "| tg" "$work/out"; then
    fail "mk bench -n 0 -p 32: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench -n 0 -p 32: $(grep -o 'pp32 *| *[0-9.]*' "$work/out")"
fi
"$MK" bench -m "$stories" --backend cpu -n 0 -p 0 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q -- "-n 0 leaves only the prompt test" "$work/err"; then
    fail "mk bench -n 0 -p 0: want exit 2 and a reason, got $rc: $(cat "$work/err")"
else
    echo "ok: mk bench -n 0 -p 0 refused"
fi
# -p as a list (llama-bench's -p 512,256,128): a row for each length, in the order given, on one
# loaded backend; --ctx grows to the longest; a 0 inside a list, an empty list or too many are refused.
"$MK" bench -m "$stories" --backend cpu -n 0 -p 48,16,32 >"$work/out" 2>"$work/err"
rc=$?
order=$(grep -o '| pp[0-9]* ' "$work/out" | tr -d '| ' | tr '\n' ' ')
if [ "$rc" -ne 0 ] || [ "$order" != "pp48 pp16 pp32 " ]; then
    fail "mk bench -n 0 -p 48,16,32: exit $rc, rows '$order': $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench -p 48,16,32: rows $order"
fi
"$MK" bench -m "$stories" --backend cpu -n 4 -p 16,600 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "| pp600 " "$work/out" || ! grep -q "| tg4 " "$work/out"; then
    fail "mk bench -n 4 -p 16,600 (the context sized for the longest): exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench -p 16,600 sized its context for pp600"
fi
for bad in "16,0" "," "1,2,3,4,5,6,7,8,9" "16,x"; do
    "$MK" bench -m "$stories" --backend cpu -n 4 -p "$bad" >"$work/out" 2>"$work/err"
    rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q -- "-p" "$work/err"; then
        fail "mk bench -p '$bad': want exit 2 and a reason naming -p, got $rc: $(cat "$work/err")"
    else
        echo "ok: mk bench -p '$bad' refused: $(head -1 "$work/err")"
    fi
done
# --spec lookup: both tasks with and without speculation, the same output, and how many
# verification steps ran (none tells that the cost model kept to plain steps).
"$MK" bench -m "$stories" --backend cpu --spec lookup -n 48 -p 0 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || [ "$(grep -cE '\| (rewrite|story)\+lk +\|.*accept [0-9.]+ % in [0-9]+ verify steps, [0-9.]+x, same output \|' \
    "$work/out")" -ne 2 ]; then
    fail "mk bench --spec lookup: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench --spec lookup: $(grep -o 'rewrite+lk .*' "$work/out" | sed 's/.*| accept/accept/')"
fi
# The host's share of a step, for backends that time their own steps (ref does).
"$MK" bench -m "$stories" --backend ref -n 8 -p 0 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] || ! grep -E -q "\| ref +\| tg8 .*\| host \+[0-9]+\.[0-9] us, device p99 [0-9]+\.[0-9]{3} ms \|" "$work/out"; then
    fail "mk bench --backend ref: no host share: exit $rc: $(cat "$work/out" "$work/err")"
else
    echo "ok: mk bench --backend ref: $(grep -o 'host +[0-9.]* us' "$work/out")"
fi
"$MK" bench -m "$stories" --backend cpu -n 4 -d 600 --ctx 512 -p 0 >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "must fit in --ctx 512" "$work/err"; then
    fail "mk bench -d 600 --ctx 512: exit $rc, want 2: $(cat "$work/err")"
else
    echo "ok: mk bench -d 600 --ctx 512 refused: $(cat "$work/err")"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "run_test: all checks passed"
