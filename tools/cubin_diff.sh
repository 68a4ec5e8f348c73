#!/bin/bash
# Compares the machine code of one kernel in two cubins: its size in instructions and how many differ.
#
# usage: tools/cubin_diff.sh A.cubin B.cubin [KERNEL]   (KERNEL defaults to mk_megakernel)
#
# mk_megakernel is one function: ptxas allocates registers and schedules over all of it, so a
# change to one op can move the code of every op (BENCHMARKS.md, forty-fourth session). A change
# whose kernel code is identical here (a rename, a comment, a reordered condition that compiles the
# same) cannot change the kernel's speed; any other needs timing over every position range.
# Build the cubins with the flags of bazel/cuda.bzl, e.g.
#   nvcc -O3 -std=c++17 -I. -lineinfo -cubin -gencode arch=compute_90a,code=sm_90a \
#       megakernel/megakernel.cu -o A.cubin
# Needs readelf (binutils), dd (coreutils) and cmp (diffutils). Exit status 0 when the code is identical, 1 when it
# differs, 2 on bad input.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 A.cubin B.cubin [KERNEL]" >&2
    exit 2
fi
kernel=${3:-mk_megakernel}
for f in "$1" "$2"; do
    if [ ! -r "$f" ]; then
        echo "$0: $f: cannot read it" >&2
        exit 2
    fi
done
# text FILE: "offset size" (decimal) of the kernel's .text section.
text() {
    local line
    line=$(readelf -S -W "$1" 2>/dev/null | sed 's/^ *\[ *[0-9]*\] *//' | awk -v n=".text.$kernel" '$1 == n { print $4, $5 }')
    if [ -z "$line" ]; then
        echo "$0: $1: no section .text.$kernel (not a cubin, or no kernel $kernel in it)" >&2
        return 2
    fi
    set -- $line
    echo "$((16#$1)) $((16#$2))"
}
ta=$(text "$1") || exit 2
tb=$(text "$2") || exit 2
read -r oa sa <<< "$ta"
read -r ob sb <<< "$tb"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dd if="$1" of="$tmp/a" iflag=skip_bytes,count_bytes bs=64K skip="$oa" count="$sa" status=none
dd if="$2" of="$tmp/b" iflag=skip_bytes,count_bytes bs=64K skip="$ob" count="$sb" status=none
# Instructions are 16 bytes on sm_70 and later: count the 16-byte slots with any differing byte and
# note the first, by position (after an inserted instruction every later one counts: the figure then
# says only that the code differs and from where).
read -r n first < <(cmp -l "$tmp/a" "$tmp/b" 2>/dev/null |
    awk '{ i = int(($1 - 1) / 16); if (!c || i != last) { if (!c) f = i; c++; last = i } }
         END { print c + 0, (c ? f : "") }')
echo "$kernel: $((sa / 16)) instructions in $1, $((sb / 16)) in $2; $n of the first $(( (sa < sb ? sa : sb) / 16 )) differ${first:+, the first at instruction $first}"
[ "$sa" -eq "$sb" ] && [ "$n" -eq 0 ]
