#!/usr/bin/env bash
# What the llama.cpp comparison scripts share: building a reference program against a llama.cpp build. Sourced, never run.

# llamacpp_build LLAMA_CPP_DIR SOURCE OUT: compiles SOURCE (next to this file) against the static
# libraries of LLAMA_CPP_DIR/build (cmake -DBUILD_SHARED_LIBS=OFF, targets llama-common or
# llama-quantize); nothing when OUT exists. Exits 2 when it cannot.
llamacpp_build() {
    local l=$1 src=$2 out=$3
    [ -x "$out" ] && return 0
    local libs
    libs=$(find "$l/build" -name 'libllama-common*.a' -o -name 'libllama.a' -o -name 'libggml*.a' | sort -r)
    g++ -std=c++17 -O1 -I"$l/include" -I"$l/common" -I"$l/ggml/include" -I"$l/vendor" \
        "$(dirname "${BASH_SOURCE[0]}")/$src" -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl \
        -o "$out" || {
        echo "cannot build $src against $l/build"
        exit 2
    }
}
