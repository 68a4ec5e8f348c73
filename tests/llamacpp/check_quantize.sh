#!/usr/bin/env bash
# Both ways with llama.cpp's quantizer: mk quantize and llama-quantize on the same input must write the same tensor types and bytes, and each tool decodes the other's files (test-only; needs a llama.cpp build).
#
# usage: tests/llamacpp/check_quantize.sh LLAMA_CPP_DIR MK INPUT.gguf [WORK_DIR]
#   LLAMA_CPP_DIR  llama.cpp source tree built with CMake into build/ (static libraries,
#                  -DBUILD_SHARED_LIBS=OFF; the llama-quantize target)
#   INPUT.gguf     an F32/F16/BF16 Llama GGUF (mk gen --preset tiny -o base.gguf makes one)
# For every single type (llama-quantize --pure) and every llama.cpp file type (its mixes, no
# imatrix): quantize with both, compare every tensor's type and bytes (gguf-py from LLAMA_CPP_DIR,
# needs numpy), then decode 16 greedy tokens of each file with both programs and compare the runs:
# llama.cpp (greedy_ref.cpp, the library on one thread) on mk's file against llama.cpp on its own
# file, mk on llama.cpp's file against mk on its own file. Exits 1 on any difference.
set -u
L=${1:?llama.cpp dir}
MK=${2:?mk binary}
IN=${3:?input gguf}
W=${4:-$(mktemp -d)}
mkdir -p "$W"
Q=$L/build/bin/llama-quantize
. "$(dirname "$0")/lib.sh"
llamacpp_build "$L" greedy_ref.cpp "$W/greedy_ref"
PROMPT="Once upon a time"
fails=0
compare() { # a.gguf b.gguf -> prints "identical" or the differences
    PYTHONPATH="$L/gguf-py" python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
from gguf import GGUFReader
a, b = GGUFReader(sys.argv[1]), GGUFReader(sys.argv[2])
ta = {t.name: t for t in a.tensors}
tb = {t.name: t for t in b.tensors}
bad = []
if set(ta) != set(tb):
    bad.append(f"tensor names differ: only mk {sorted(set(ta) - set(tb))}, only llama.cpp {sorted(set(tb) - set(ta))}")
types = {}
for n in sorted(set(ta) & set(tb)):
    x, y = ta[n], tb[n]
    if x.tensor_type != y.tensor_type:
        bad.append(f"{n}: mk {x.tensor_type.name}, llama.cpp {y.tensor_type.name}")
    elif not np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
        d = np.count_nonzero(np.asarray(x.data).view(np.uint8) != np.asarray(y.data).view(np.uint8))
        bad.append(f"{n} ({x.tensor_type.name}): {d} of {x.n_bytes} bytes differ")
    types[x.tensor_type.name] = types.get(x.tensor_type.name, 0) + 1
if bad:
    print("DIFFER: " + "; ".join(bad[:6]) + (f"; ... {len(bad)} in all" if len(bad) > 6 else ""))
    sys.exit(1)
print("identical tensors (" + ", ".join(f"{k} x{v}" for k, v in sorted(types.items())) + ")")
PY
}
run_ll() { "$W/greedy_ref" "$1" "$PROMPT" 16 2>&1 | tr '\n' ' '; }
run_mk() { "$MK" run -m "$1" --backend cpu -p "$PROMPT" -n 16 --temp 0 --ids 2>/dev/null | tr '\n' ' '; }
one() { # label mk-dtype llama-type [--pure]
    local label=$1 mkt=$2 llt=$3 pure=${4:-}
    local a=$W/mk-$label.gguf b=$W/ll-$label.gguf
    "$MK" quantize "$IN" "$a" --dtype "$mkt" > /dev/null 2> "$W/err" || { echo "FAIL $label: mk quantize: $(head -c 300 "$W/err")"; fails=$((fails + 1)); return; }
    "$Q" $pure "$IN" "$b" "$llt" 2 > /dev/null 2> "$W/err" || { echo "FAIL $label: llama-quantize: $(tail -c 300 "$W/err")"; fails=$((fails + 1)); return; }
    local cmp ok=1
    cmp=$(compare "$a" "$b") || ok=0
    local lla llb mka mkb
    lla=$(run_ll "$a"); llb=$(run_ll "$b"); mka=$(run_mk "$a"); mkb=$(run_mk "$b")
    [ -n "$lla" ] && [ "$lla" = "$llb" ] || ok=0
    [ -n "$mka" ] && [ "$mka" = "$mkb" ] || ok=0
    if [ $ok = 1 ]; then
        echo "ok   $label: $cmp; llama.cpp decodes mk's file as its own, mk decodes llama.cpp's as its own [$mka]"
    else
        fails=$((fails + 1))
        echo "FAIL $label: $cmp"
        echo "     llama.cpp on mk's file:        $lla"
        echo "     llama.cpp on its own file:    $llb"
        echo "     mk on mk's file:              $mka"
        echo "     mk on llama.cpp's file:       $mkb"
    fi
    rm -f "$a" "$b"
}
for t in f16:F16 bf16:BF16 q8_0:Q8_0 q4_0:Q4_0 q4_1:Q4_1 q5_0:Q5_0 q5_1:Q5_1 q2_k:Q2_K q3_k:Q3_K_M q4_k:Q4_K_M \
    q5_k:Q5_K_M q6_k:Q6_K iq4_nl:IQ4_NL iq4_xs:IQ4_XS; do
    one "pure-${t%%:*}" "${t%%:*}" "${t##*:}" --pure
done
for t in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS; do
    one "$t" "$t" "$t"
done
echo "check_quantize: $fails failure(s)"
[ $fails -eq 0 ]
