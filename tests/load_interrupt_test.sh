#!/usr/bin/env bash
# Ctrl-C while 'mk run' reads a large model file stops the read between chunks: exit 130 with a message, promptly.
set -u

MK="${MK:-tools/mk}"
if [ ! -x "$MK" ]; then
    echo "load_interrupt_test: mk binary not found at $MK" >&2
    exit 1
fi
. "$(dirname "$0")/sh_lib.sh"
sh_init load_interrupt_test

# A 2 GiB sparse file: reading it takes a good fraction of a second, and it is no GGUF, so a read
# that was not stopped ends in a format error (exit 1), not in 130.
truncate -s 2G "$T/big.gguf"
"$MK" run -m "$T/big.gguf" -n 1 >"$T/out" 2>"$T/err" &
pid=$!
# SIGINT once the read is under way (the handler is installed before it starts): resident memory
# passes 64 MiB.
sent=0
for _ in $(seq 1 2000); do
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo "")
    [ -z "$rss" ] && break
    if [ "$rss" -gt 65536 ]; then
        t0=$(date +%s%N)
        kill -INT "$pid"
        sent=1
        break
    fi
    sleep 0.005
done
wait "$pid"
rc=$?
t1=$(date +%s%N)
if [ "$sent" = 1 ]; then
    [ "$rc" = 130 ] || fail "mk run exited $rc after SIGINT during the load, expected 130; stderr: $(head -c 400 "$T/err")"
    has "$T/err" "loading cancelled after"
    ms=$(((t1 - t0) / 1000000))
    echo "mk run ended ${ms} ms after SIGINT during the load"
    [ "$ms" -lt 5000 ] || fail "mk run took ${ms} ms to end after SIGINT during the load"
else
    echo "SKIP: the read ended before it could be interrupted (exit $rc)"
fi

if [ "$failures" != 0 ]; then
    echo "load_interrupt_test: $failures check(s) failed" >&2
    exit 1
fi
echo "load_interrupt_test: all checks passed"
