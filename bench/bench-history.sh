#!/bin/bash
# bench-history: what the fault history (fault_history, design.md "Fault
# history") does to a real program that walks the same data again under
# a resident limit that makes it thrash.
#
# python3 builds a list of N dicts (about 250 bytes each), shuffles it
# (so each pass touches the heap's pages in a scattered order, the same
# every pass) and sums one field over it PASSES times, under zswap-run
# --limit LIMIT, with a daemon of BUILD_DIR of its own: once with
# fault_history=yes, once with no. Prints each pass's seconds, the total,
# and the daemon's faults, history_prefetched and the history's guesses
# (history_right, history_wrong) for each.
#
#   sudo bench/bench-history.sh [--objects N] [--passes P] [--limit SIZE] [BUILD_DIR]
#
# Defaults: 400000 objects (a heap of about 100 MiB), 6 passes, 32M.
set -uo pipefail
cd "$(dirname "$0")/.."
objects=400000 passes=6 limit=32M
while [ $# -gt 0 ]; do
        case $1 in
        --objects) objects=$2; shift 2 ;;
        --passes) passes=$2; shift 2 ;;
        --limit) limit=$2; shift 2 ;;
        *) break ;;
        esac
done
build=$(cd "${1:-build}" && pwd)
if [ "$(id -u)" != 0 ]; then
        echo "bench-history: needs root (zswapd does)" >&2
        exit 1
fi
command -v python3 >/dev/null || { echo "bench-history: no python3" >&2; exit 1; }
work=$(mktemp -d /tmp/bench-history.XXXXXX)
dpid=
cleanup() {
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
        rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/walk.py" <<'EOF'
import random, sys, time
n, passes = int(sys.argv[1]), int(sys.argv[2])
objs = [{'k': i, 'v': 'x' * 40} for i in range(n)]
random.seed(1)
random.shuffle(objs)
want = n * (n - 1) // 2
for p in range(passes):
    t = time.time()
    s = 0
    for o in objs:
        s += o['k']
    if s != want:
        sys.exit('pass %d: sum %d, want %d' % (p, s, want))
    print('%.3f' % (time.time() - t), flush=True)
EOF

echo "bench-history: $objects objects, $passes passes, limit $limit; $(nproc) CPUs, Linux $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
for h in yes no; do
        sock=$work/zswapd-$h.sock
        "$build/daemon/zswapd" --socket "$sock" --no-config --set "fault_history=$h" 2> "$work/zswapd-$h.log" &
        dpid=$!
        for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
        [ -S "$sock" ] || { echo "bench-history: the daemon did not start:"; cat "$work/zswapd-$h.log"; exit 1; }
        start=$(date +%s%N)
        times=$("$build/client/preload/zswap-run" -s "$sock" -l "$limit" python3 "$work/walk.py" "$objects" "$passes") ||
                { echo "bench-history: the walk failed (fault_history=$h)"; exit 1; }
        total_ms=$((($(date +%s%N) - start) / 1000000))
        st=$("$build/client/tools/zswapctl" --socket "$sock" status)
        faults=$(awk '$1 == "faults" { print $2 }' <<< "$st")
        hist=$(awk '$1 == "history_prefetched" { print $2 }' <<< "$st")
        right=$(awk '$1 == "history_right" { print $2 }' <<< "$st")
        wrong=$(awk '$1 == "history_wrong" { print $2 }' <<< "$st")
        printf 'fault_history=%-3s passes (s): %s  total %d.%03d s  faults %s  history_prefetched %s  guesses right %s wrong %s\n' \
                "$h" "$(echo $times)" $((total_ms / 1000)) $((total_ms % 1000)) "$faults" "$hist" "$right" "$wrong"
        kill "$dpid"
        wait "$dpid" 2>/dev/null
        dpid=
done
