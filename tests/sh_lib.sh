#!/usr/bin/env bash
# What the shell tests share: a temp folder, the failure count, run-and-check helpers and the
# models folder lookup. Sourced, never run.

# Call first: makes $T (removed on exit) and zeroes the failure count. $1 names the test.
sh_init() {
    T="$(mktemp -d "${TEST_TMPDIR:-/tmp}/$1.XXXXXX")"
    trap 'rm -rf "$T"' EXIT
    failures=0
}

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# run WANT_RC CMD...: runs CMD with stdout in $T/out and stderr in $T/err, checks the exit code.
run() {
    local want="$1"
    shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "'$*' exited $rc, expected $want; stderr: $(head -c 400 "$T/err")"
    fi
}

# has FILE TEXT: FILE contains the fixed string TEXT.
has() {
    grep -qF -- "$2" "$1" || fail "expected '$2' in $1 output: $(head -c 600 "$1")"
}

# sh_models PROBE: sets $M to the models folder holding PROBE, or to "" after saying why (a
# failure when MK_REQUIRE_MODELS=1, a skip otherwise).
sh_models() {
    M=""
    local d
    for d in "${MK_MODELS_DIR:-}" ../shared/models; do
        if [ -n "$d" ] && [ -r "$d/$1" ]; then
            M="$d"
            return
        fi
    done
    if [ "${MK_REQUIRE_MODELS:-}" = 1 ]; then
        fail "models dir not found (MK_MODELS_DIR=${MK_MODELS_DIR:-unset}) and MK_REQUIRE_MODELS=1"
    else
        echo "SKIP: models dir not found (set MK_MODELS_DIR); real-file checks skipped"
    fi
}
