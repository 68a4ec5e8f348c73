#!/usr/bin/env bash
# Fails when an #include or a Bazel label points up or sideways between mk's layers (ARCHITECTURE.md).
#
# usage: tools/layers_check.sh [ROOT]   (ROOT: the checkout, default the folder above this script)
# Prints one line per violation and exits 1 when there is any.
set -euo pipefail
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
cd "$root"

# Lowest first; a folder may use its own files and those of the folders before it.
layers=(core megakernel graph hostqueue runtime tools tests)
rank() {
    local i
    for i in "${!layers[@]}"; do
        [ "${layers[$i]}" = "$1" ] && { echo "$i"; return; }
    done
    echo -1
}

bad=0
complain() {
    echo "layers: $*"
    bad=1
}

for dir in "${layers[@]}"; do
    [ -d "$dir" ] || { complain "folder $dir/ is missing"; continue; }
    own=$(rank "$dir")
    # #include "folder/file" in C and CUDA sources.
    while IFS= read -r hit; do
        file=${hit%%:*}
        rest=${hit#*:}
        line=${rest%%:*}
        target=$(sed -E 's/.*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/' <<< "$rest")
        top=${target%%/*}
        [ "$top" = "$target" ] && { complain "$file:$line: include \"$target\" names no folder"; continue; }
        r=$(rank "$top")
        if [ "$r" -lt 0 ]; then
            complain "$file:$line: include \"$target\": $top/ is not a layer"
        elif [ "$r" -gt "$own" ]; then
            complain "$file:$line: include \"$target\" points up from $dir/ to $top/"
        fi
    done < <(grep -RnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$dir" \
                 --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' || true)
    # Labels //folder:target in BUILD files.
    if [ -f "$dir/BUILD" ]; then
        while IFS= read -r hit; do
            line=${hit%%:*}
            for label in $(grep -oE '"//[a-z_]*(:[A-Za-z0-9_.-]+)?' <<< "${hit#*:}"); do
                top=${label#\"//}
                top=${top%%:*}
                [ -z "$top" ] && continue # the root package
                [ "$top" = bazel ] || [ "$top" = visibility ] && continue
                r=$(rank "$top")
                if [ "$r" -lt 0 ]; then
                    complain "$dir/BUILD:$line: label ${label#\"}: $top/ is not a layer"
                elif [ "$r" -gt "$own" ]; then
                    # Visibility lists name the layers above on purpose.
                    grep -qE 'visibility|MK_ABOVE' <<< "${hit#*:}" && continue
                    complain "$dir/BUILD:$line: label ${label#\"} points up from $dir/ to $top/"
                fi
            done
        done < <(grep -nE '"//[a-z_]+' "$dir/BUILD" || true)
    fi
done

# The public header stands alone: standard headers only.
while IFS= read -r hit; do
    complain "runtime/mk.h:${hit%%:*}: includes ${hit#*:}; the public header may include only standard headers"
done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' runtime/mk.h | sed -E 's/^([0-9]+):.*include[[:space:]]+/\1:/' || true)

# mk.h carries copies of three internal blocks; they must stay byte-identical.
block() { # FILE GUARD
    awk -v g="$2" '$0 == "#ifndef " g { on = 1 } on { print } on && $0 ~ "^#endif.*" g { exit }' "$1"
}
for pair in core/status.h:MK_STATUS_TYPES_DEFINED graph/executor.h:MK_BACKEND_KIND_DEFINED \
    graph/executor.h:MK_FAULT_DEFINED megakernel/abi.h:MK_KV_TYPE_DEFINED; do
    file=${pair%%:*}
    guard=${pair#*:}
    a=$(block "$file" "$guard")
    b=$(block runtime/mk.h "$guard")
    [ -n "$a" ] || complain "$file: no block guarded by $guard"
    [ "$a" = "$b" ] || complain "runtime/mk.h: the block guarded by $guard differs from the one in $file"
done

[ $bad -eq 0 ] && echo "layers: ok (${layers[*]})"
exit $bad
