#!/usr/bin/env bash
# Runs tools/layers_check.sh on the tree (must pass), then on copies with one bad include or label
# planted (each must fail), so the check itself is known to bite.
set -euo pipefail
root="$TEST_SRCDIR/$TEST_WORKSPACE"
check="$root/tools/layers_check.sh"
fail=0

bash "$check" "$root" || { echo "FAIL: the tree itself breaks the layering"; fail=1; }

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/layers.XXXXXX")
plant() { # NAME SHELL-SNIPPET-RUN-IN-THE-COPY EXPECTED-MESSAGE
    local copy="$tmp/$1"
    mkdir -p "$copy"
    cp -rL "$root/." "$copy/"
    chmod -R u+w "$copy"
    (cd "$copy" && eval "$2")
    local out
    if out=$(bash "$check" "$copy" 2>&1); then
        echo "FAIL: $1: the check passed after: $2"
        fail=1
    elif ! grep -qF "$3" <<< "$out"; then
        echo "FAIL: $1: the check failed without saying '$3':"
        echo "$out"
        fail=1
    else
        echo "ok: $1 caught: $(grep -F "$3" <<< "$out" | head -1)"
    fi
}
plant core-includes-runtime "echo '#include \"runtime/mk.h\"' >> core/dtype.c" 'points up from core/ to runtime/'
plant graph-includes-hostqueue "echo '#include \"hostqueue/hostqueue.h\"' >> graph/lower.c" 'points up from graph/ to hostqueue/'
plant megakernel-includes-graph "echo '#include \"graph/program.h\"' >> megakernel/common.cuh" 'points up from megakernel/ to graph/'
plant graph-deps-runtime "echo 'cc_library(name = \"x\", deps = [\"//runtime:api\"])' >> graph/BUILD" 'label //runtime:api points up'
plant public-header-internal "echo '#include \"core/status.h\"' >> runtime/mk.h" 'may include only standard headers'
plant public-copy-drifts "sed -i 's/MK_ERR_INTERNAL = -11/MK_ERR_INTERNAL = -12/' runtime/mk.h" 'MK_STATUS_TYPES_DEFINED differs'
exit $fail
