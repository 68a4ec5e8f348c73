#!/usr/bin/env bash
# Fails when a C or CUDA C file of mk does not match .clang-format (run `clang-format -i` on it).
set -euo pipefail
root="$TEST_SRCDIR/$TEST_WORKSPACE"
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
    echo "FAIL: clang-format not found (tools/bazelw installs Debian's clang-format package)"
    exit 1
fi
echo "using $("$cf" --version)"
cd "$root"
mapfile -t files < <(find -L core megakernel graph hostqueue runtime tools tests \
    -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort)
[ "${#files[@]}" -gt 50 ] || { echo "FAIL: only ${#files[@]} source files found"; exit 1; }
if ! "$cf" --style=file --dry-run -Werror "${files[@]}"; then
    echo "FAIL: the files above are not formatted; run: clang-format -i FILE"
    exit 1
fi
echo "format: ${#files[@]} files match .clang-format"
