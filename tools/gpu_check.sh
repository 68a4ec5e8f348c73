#!/bin/bash
# Runs mk's GPU tests and benchmarks on a GPU host that has no Bazel, from prebuilt binaries; logs go to $OUT.
#
# usage: tools/gpu_check.sh [BIN_DIR] [what...]
#   BIN_DIR  folder of binaries built elsewhere with `bazel build -c opt`: cuda_test (and mk,
#            megakernel_module.cubin/.ptx, variant_*.cubin when present); default gpu/. Models: $MK_MODELS_DIR, else
#            BIN_DIR/models (copies of ../shared/models files, never committed).
#   what     any of: info tests quant ptx llama1b bench bench8b variants nodriver mk trace peer
#            (default: all but bench8b, variants, trace and peer).
#   trace    mk trace of stories260K and of each file in $TRACE_MODELS, the JSON checked (every task a
#            slice on a block's track) and its per-op table kept.
#   peer     builds llama.cpp from $LLAMA_TARBALL (a .tar.gz of its source, e.g. vendor/llama.cpp of
#            the llama-cpp-python sdist) unless $LLAMA_BUILD already holds bin/llama-bench, then runs
#            mk bench (pp512, tg128, megakernel), llama-bench (-p 512 -n 128 -fa 1) and mk bench again
#            on each file in $PEER_MODELS (space-separated GGUFs, e.g. from mk gen --preset llama-1b).
#            The build takes about 5 minutes on 16 cores: start it in the background before the
#            tests (gpu_check.sh BIN peer with PEER_MODELS= empty) when device time is short.
# Writes $OUT/gpu_check.log (everything) and $OUT/summary.txt (the RESULT/BENCH/TRACE lines and
# the verdict of each part). Exit status 1 when any part failed.
set -u
BIN=${1:-gpu}
shift || true
WHAT=${*:-info tests quant ptx llama1b bench nodriver mk}
OUT=${OUT:-/tmp/mk-gpu-check}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
export MK_MODELS_DIR=${MK_MODELS_DIR:-$(cd "$BIN" && pwd)/models}
export TMPDIR=${TMPDIR:-/tmp}
failed=0

note() { echo "$*" | tee -a "$LOG" >> "$SUM"; }

# run NAME TIMEOUT CMD...: runs with a time limit, logs everything, keeps the tagged lines.
run() {
    local name=$1 limit=$2
    shift 2
    echo "=== $name: $* (limit ${limit}s)" >> "$LOG"
    local t0=$(date +%s.%N)
    timeout -k 10 "$limit" "$@" > "$OUT/.part" 2>&1
    local rc=$?
    local t1=$(date +%s.%N)
    cat "$OUT/.part" >> "$LOG"
    grep -E '^(RESULT|BENCH|TRACE|INFO|SKIP)' "$OUT/.part" >> "$SUM"
    grep -E 'check failed' "$OUT/.part" >> "$SUM"
    rm -f "$OUT/.part"
    local verdict=ok
    [ $rc -eq 124 ] && verdict="TIMED OUT"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict="FAILED (exit $rc)"
    [ $rc -ne 0 ] && failed=1
    note "--- $name: $verdict in $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s"
}

for w in $WHAT; do
    case $w in
    info)
        {
            echo "=== info"
            nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
            nvcc --version 2>&1 | tail -2
            if [ -f "$BIN/megakernel_module.cubin" ] && command -v cuobjdump > /dev/null; then
                cuobjdump -res-usage "$BIN/megakernel_module.cubin" 2>&1 | grep -A1 -E 'mk_megakernel|mk_perop'
                cuobjdump -sass "$BIN/megakernel_module.cubin" 2>/dev/null | grep -c 'LDG.E.128' | sed 's/^/16-byte global loads in SASS: /'
                cuobjdump -sass "$BIN/megakernel_module.cubin" 2>/dev/null | grep -cE 'LDL|STL' | sed 's/^/local-memory ops in SASS: /'
            fi
        } >> "$LOG" 2>&1
        grep -E 'H100|H200|NVIDIA|REG|16-byte|local-memory' "$LOG" >> "$SUM"
        ;;
    tests)
        for t in stories sampling context hang faults generate spec; do
            run "cuda_test $t" 300 "$BIN/cuda_test" "$t"
        done
        # Sticky CUDA errors end CUDA for their process: one process per injected kind.
        for k in error trap "bad address"; do
            run "cuda_test faults $k" 120 "$BIN/cuda_test" faults "$k"
        done
        # The f32 KV cache (the default is f16) on its own attention path.
        run "cuda_test stories, f32 KV cache" 300 env MK_TEST_KV=f32 "$BIN/cuda_test" stories
        run "cuda_test chunk, f32 KV cache" 300 env MK_TEST_KV=f32 "$BIN/cuda_test" chunk
        run "cuda_test chunk" 300 "$BIN/cuda_test" chunk
        # Every chunk product of a block format over weights decoded once (default: 128 tokens up).
        run "cuda_test chunk, decoded weights from 1 token" 300 env MK_CUDA_CHUNK_DEQUANT_MIN=1 "$BIN/cuda_test" chunk
        # K-quant chunk products through decoded weights too (default: their integers, mk_chunk_mm_*_kq).
        run "cuda_test chunk, K-quants decoded" 300 env MK_CUDA_NO_CHUNK_KQ=1 "$BIN/cuda_test" chunk
        # Few-token K-quant products with one block per split taking every tile in turn.
        run "cuda_test chunk, one block per split" 300 env MK_CUDA_MV_BLOCKS=1 "$BIN/cuda_test" chunk
        # Split products' partials added by mk_chunk_mm_reduce launches (default: by the launch after).
        run "cuda_test chunk, partials added by their own launch" 300 env MK_CUDA_FOLD=0 "$BIN/cuda_test" chunk
        # Float models on Hopper run the kernels built without block formats: the full build must agree too.
        run "cuda_test stories, kernels with every format" 300 env MK_CUDA_FLOAT_IMAGE=0 "$BIN/cuda_test" stories
        # The optional ATTN_OUTPUT op (combine fused into the attention output) must agree too.
        run "cuda_test stories, fused attention output" 300 env MK_CUDA_FUSE_ATTN_OUTPUT=1 "$BIN/cuda_test" stories
        ;;
    quant)
        # Every weight type and llama.cpp mix on the tiny preset, each GPU backend against the CPU.
        run "cuda_test quant" 300 "$BIN/cuda_test" quant
        run "cuda_test quant, decoded weights from 1 token" 300 env MK_CUDA_CHUNK_DEQUANT_MIN=1 "$BIN/cuda_test" quant
        run "cuda_test quant, one block per split" 300 env MK_CUDA_MV_BLOCKS=1 "$BIN/cuda_test" quant
        run "cuda_test quant, K-quants decoded" 300 env MK_CUDA_NO_CHUNK_KQ=1 MK_CUDA_CHUNK_DEQUANT_MIN=1 "$BIN/cuda_test" quant
        ;;
    ptx)
        # The PTX path (what GPUs other than sm_90 run), JIT-compiled by the driver.
        [ -f "$BIN/megakernel_module.ptx" ] &&
            run "cuda_test stories via PTX JIT" 300 env MK_CUDA_CUBIN="$BIN/megakernel_module.ptx" "$BIN/cuda_test" stories
        ;;
    llama1b)
        run "cuda_test llama1b" 580 "$BIN/cuda_test" llama1b
        run "cuda_test llama1b, fused attention output" 580 env MK_CUDA_FUSE_ATTN_OUTPUT=1 "$BIN/cuda_test" llama1b
        ;;
    bench)
        run "cuda_test bench" 300 "$BIN/cuda_test" bench
        ;;
    bench8b)
        run "cuda_test bench8b" 580 "$BIN/cuda_test" bench8b
        ;;
    variants)
        # Megakernel tuning knobs on llama-1b (timings only).
        for v in "MK_CUDA_ATTN_BLOCK=512" "MK_CUDA_TASKS_PER_WORKER=2" "MK_CUDA_TASKS_PER_WORKER=4" \
            "MK_CUDA_BLOCKS_PER_SM=1" "MK_CUDA_SCHEDULE=dynamic" "MK_CUDA_ATTN_BLOCK=512 MK_CUDA_TASKS_PER_WORKER=2" \
            $(for f in "$BIN"/variant_*.cubin; do [ -f "$f" ] && echo "MK_CUDA_CUBIN=$f"; done); do
            run "megakernel $v" 120 env $v MK_BENCH_SKIP_STORIES=1 MK_BENCH_KINDS=megakernel MK_BENCH_SKIP_TRACE=1 \
                "$BIN/cuda_test" bench
        done
        ;;
    nodriver)
        # The same binaries where the driver cannot be opened: a clear reason, exit 0 for the test.
        run "cuda_test without driver" 60 env MK_CUDA_LIB=libcuda-absent.so.1 "$BIN/cuda_test"
        if [ -x "$BIN/mk" ]; then
            echo "=== mk run --backend megakernel without driver" >> "$LOG"
            MK_CUDA_LIB=libcuda-absent.so.1 "$BIN/mk" run -m "$MK_MODELS_DIR/stories260K-f32.gguf" --backend megakernel -n 4 \
                >> "$OUT/.nd" 2>&1
            rc=$?
            cat "$OUT/.nd" >> "$LOG"
            if [ $rc -ne 0 ] && grep -q 'libcuda-absent.so.1 not found' "$OUT/.nd"; then
                note "--- mk run --backend megakernel without driver: ok (fails with: $(grep -m1 'not found' "$OUT/.nd"))"
            else
                note "--- mk run --backend megakernel without driver: FAILED (exit $rc, no clear reason)"
                failed=1
            fi
            rm -f "$OUT/.nd"
        fi
        ;;
    mk)
        if [ -x "$BIN/mk" ]; then
            run "mk run megakernel" 120 "$BIN/mk" run -m "$MK_MODELS_DIR/stories260K-f32.gguf" --backend megakernel -n 60 -v
            m1b=$TMPDIR/mk_llama1b_bf16.gguf
            [ -f "$m1b" ] && run "mk bench llama-1b" 400 "$BIN/mk" bench -m "$m1b" --backend megakernel,perop,graph -n 128
        fi
        ;;
    trace)
        for f in "$MK_MODELS_DIR/stories260K-f32.gguf" ${TRACE_MODELS:-}; do
            t=$OUT/trace-$(basename "$f" .gguf).json
            run "mk trace $(basename "$f")" 120 "$BIN/mk" trace -m "$f" -n 16 -o "$t"
            tail -n 30 "$LOG" | sed -n '/^mk trace: step/,/^(time:/p' >> "$SUM"
            run "trace JSON $(basename "$t")" 60 python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
tracks = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert x and all(e["tid"] in tracks and e["dur"] >= 0 and e["ts"] >= 0 for e in x), "bad slices"
print("INFO trace %s: %d slices on %d block tracks, %d distinct instructions, span %.1f us" % (sys.argv[1], len(x),
      len({e["tid"] for e in x}), len({e["name"] for e in x}), max(e["ts"] + e["dur"] for e in x)))' "$t"
        done
        ;;
    peer)
        LLAMA_BUILD=${LLAMA_BUILD:-$TMPDIR/llama.cpp/build}
        if [ ! -x "$LLAMA_BUILD/bin/llama-bench" ]; then
            src=$(dirname "$LLAMA_BUILD")
            mkdir -p "$(dirname "$src")"
            run "llama.cpp unpack" 120 tar xzf "${LLAMA_TARBALL:-gpu/llama.cpp-subset.tar.gz}" -C "$(dirname "$src")"
            run "llama.cpp configure" 300 cmake -S "$src" -B "$LLAMA_BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
                -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
                -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_APP=OFF
            run "llama.cpp build" 900 cmake --build "$LLAMA_BUILD" -j "$(nproc)" --target llama-bench
        fi
        # Each file: mk, llama.cpp, mk again (prompt pp512 and decode tg128 alike), so a drift of
        # the device shows between the two mk runs.
        for f in ${PEER_MODELS:-}; do
            for r in 1 2; do
                run "mk bench $(basename "$f") pp512 ($r)" 120 "$BIN/mk" bench -m "$f" --backend megakernel -p 512 -n 0
                run "mk bench $(basename "$f") tg128 ($r)" 120 "$BIN/mk" bench -m "$f" --backend megakernel -p 0 -n 128
                [ $r -eq 1 ] && run "llama-bench $(basename "$f")" 300 "$LLAMA_BUILD/bin/llama-bench" -m "$f" -ngl 99 \
                    -p 512 -n 128 -fa 1 -r 3 -o md
            done
        done
        grep -E '^\| .*(pp512|tg128)' "$LOG" >> "$SUM"
        ;;
    *)
        note "unknown part '$w'"
        failed=1
        ;;
    esac
done
note "=== gpu_check: $([ $failed -eq 0 ] && echo PASSED || echo FAILED)"
cat "$SUM"
exit $failed
