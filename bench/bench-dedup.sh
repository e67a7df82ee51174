#!/bin/bash
# bench-dedup: pre-forked Python workers, with and without deduplication.
#
# A Python parent builds a heap of HEAP_MB MiB (a dict of records: small
# ints, strings, lists, what a warmed-up server holds), then forks WORKERS
# workers that only wait, all under zswap-run on a daemon of BUILD_DIR (a
# private socket). Every process is paged out with `zswapctl pageout`,
# the parent first. The daemon's pool then holds what it costs to keep
# them all out: printed with dedup = yes and with dedup = no, and their
# ratio. Then every worker reads its whole heap back (a sum over every
# record, in the worker: every page faulted in), one after the other; the
# fault latency median and p99 the daemon measured over those faults, and
# the workers' read time, are printed for both, with their ratios. The
# machine is named on the first line.
#
#   sudo bench/bench-dedup.sh [--workers N] [--heap-mb M] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
workers=8 heap=128
while [ $# -gt 0 ]; do
        case $1 in
        --workers) workers=$2; shift 2 ;;
        --heap-mb) heap=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) break ;;
        esac
done
build=$(cd "${1:-build}" && pwd)
[ "$(id -u)" = 0 ] || { echo "bench-dedup: needs root (the daemon does)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench-dedup: no python3" >&2; exit 1; }
zswapd=$build/daemon/zswapd ctl=$build/client/tools/zswapctl run=$build/client/preload/zswap-run
tmp=$(mktemp -d /tmp/bench-dedup.XXXXXX)
trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT

cat > "$tmp/forkdup.py" <<'EOF'
import os, sys, time
heap_mb, workers, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
records = {}
i = 0
# about 1 KiB of objects per record
while i * 1024 < heap_mb << 20:
        records[i] = {"id": i, "name": "user-%08d" % i, "tags": ["t%d" % (i % 17), "g%d" % (i % 5)],
                      "score": i * 0.5, "blob": ("%x" % (i * 2654435761)) * 40}
        i += 1
pids = []
for w in range(workers):
        pid = os.fork()
        if pid == 0:
                # wait to be told to read everything back
                while not os.path.exists("%s/go-%d" % (d, w)):
                        time.sleep(0.05)
                t = time.monotonic()
                s = 0
                for r in records.values():
                        s += r["id"] + len(r["name"]) + len(r["blob"]) + len(r["tags"])
                with open("%s/done-%d" % (d, w), "w") as f:
                        f.write("%f %d\n" % (time.monotonic() - t, s))
                while not os.path.exists("%s/quit" % d):
                        time.sleep(0.05)
                os._exit(0)
        pids.append(pid)
with open("%s/pids" % d, "w") as f:
        f.write(" ".join(str(p) for p in [os.getpid()] + pids) + "\n")
while not os.path.exists("%s/quit" % d):
        time.sleep(0.05)
for p in pids:
        os.waitpid(p, 0)
EOF

field() { "$ctl" --socket "$sock" --bytes status 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }

one() { # $1: yes/no
        local mode=$1 dir=$tmp/$1
        mkdir -p "$dir"
        sock=$tmp/zswapd-$mode.sock
        "$zswapd" --socket "$sock" --set dedup="$mode" --set recompress_age=0 --set refill=no \
                --set idle_age=0 2> "$dir/log" &
        local dpid=$!
        for _ in $(seq 200); do "$ctl" --socket "$sock" status >/dev/null 2>&1 && break; sleep 0.05; done
        "$run" --socket "$sock" -- python3 "$tmp/forkdup.py" "$heap" "$workers" "$dir" &
        local ppid=$!
        for _ in $(seq 1200); do [ -s "$dir/pids" ] && break; sleep 0.1; done
        local pids
        pids=$(cat "$dir/pids")
        sleep 1
        for p in $pids; do "$ctl" --socket "$sock" pageout "$p" >/dev/null; done
        "$ctl" --socket "$sock" --bytes status > "$dir/status-out"
        local f0
        f0=$(field faults)
        for w in $(seq 0 $((workers - 1))); do
                touch "$dir/go-$w"
                for _ in $(seq 3000); do [ -s "$dir/done-$w" ] && break; sleep 0.05; done
        done
        "$ctl" --socket "$sock" --bytes status > "$dir/status-in"
        touch "$dir/quit"
        wait "$ppid"
        kill "$dpid"; wait "$dpid" 2>/dev/null
        read_s=$(cat "$dir"/done-* | awk '{ s += $1 } END { printf "%.3f", s / NR }')
        eval "${mode}_pool=$(awk '$1 == "pool_bytes" { print $2 }' "$dir/status-out")"
        eval "${mode}_out=$(awk '$1 == "original_bytes" { print $2 }' "$dir/status-out")"
        eval "${mode}_objects=$(awk '$1 == "dedup_objects" { print $2 }' "$dir/status-out")"
        eval "${mode}_shared=$(awk '$1 == "dedup_pages" { print $2 }' "$dir/status-out")"
        eval "${mode}_p50=$(awk '$1 == "fault_latency_p50_ns" { print $2 }' "$dir/status-in")"
        eval "${mode}_p99=$(awk '$1 == "fault_latency_p99_ns" { print $2 }' "$dir/status-in")"
        eval "${mode}_faults=$(( $(awk '$1 == "faults" { print $2 }' "$dir/status-in") - f0 ))"
        eval "${mode}_read=$read_s"
}

echo "machine: $(uname -r), $(nproc) CPUs, $(systemd-detect-virt 2>/dev/null || echo unknown)," \
     "$(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ *//')"
echo "python heap ${heap} MiB, ${workers} workers forked after it, every process paged out"
one yes
one no
printf "%-6s %12s %12s %9s %9s %9s %9s %9s %8s\n" dedup "held out" "pool" "objects" "shared" "faults" \
        "p50 ns" "p99 ns" "read s"
for m in yes no; do
        eval printf "\"%-6s %12s %12s %9s %9s %9s %9s %9s %8s\\n\"" "$m" "\$${m}_out" "\$${m}_pool" \
                "\$${m}_objects" "\$${m}_shared" "\$${m}_faults" "\$${m}_p50" "\$${m}_p99" "\$${m}_read"
done
awk -v py="$yes_pool" -v pn="$no_pool" -v ay="$yes_p50" -v an="$no_p50" -v by="$yes_p99" -v bn="$no_p99" \
        -v ry="$yes_read" -v rn="$no_read" 'BEGIN {
        printf "pool without dedup / with: %.2fx; fault p50 with / without: %.2fx, p99 %.2fx; read time %.2fx\n",
               pn / py, ay / an, by / bn, ry / rn }'
