#!/bin/bash
# The benchmarks, one after the other: bench-wake (the wake-up measurement
# that chose the fault-thread layout); bench-contention inversion and
# readers, bench-store, bench-scale, bench-core and bench-redis, each
# printing its own table of zswapd beside kernel zram-lz4 (and kernel
# zswap-lzo) measured in the same run; bench-recompress, the strong tier
# against zram-lz4 and zstd as the only codec; last, bench-reclaim, the daemon's own
# reclaim under a resident limit against LRU, FIFO, CLOCK and OPT on the
# same access traces. bench-overhead.sh, bench-history.sh, bench-restart,
# bench-policy and bench-tier are run on their own. Needs root; sets up and tears down its
# own swap (bench/backend.c).
#
#   sudo bench/run-all.sh [BUILD_DIR]      (default: build)
#
# Takes ~20 minutes on 2 vCPUs (bench-reclaim ~3 of them). Run it on an
# otherwise idle machine: every benchmark compares within its own run, but
# a busy machine widens the spread. Output: the tables on stdout; a copy in
# BUILD_DIR/bench-all.log.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bench=$build/bench

if [ "$(id -u)" != 0 ]; then
        echo "run-all.sh: needs root (kernel zram and zswap are the reference)" >&2
        exit 1
fi
if [ ! -x "$bench/bench-core" ]; then
        echo "run-all.sh: no benchmarks in $build: meson setup $build && ninja -C $build" >&2
        exit 1
fi

run() {
        echo
        echo "################ $*"
        "$@"
        local rc=$?
        [ $rc -eq 0 ] || echo "################ exit status $rc: $*"
        return 0
}

{
        echo "zswapd benchmarks, $(date -u '+%F %T') UTC, $(uname -r), $(nproc) CPUs, git $(git rev-parse --short HEAD 2>/dev/null)"
        run "$bench/bench-wake" 20000
        run "$bench/bench-contention" inversion
        run "$bench/bench-contention" readers
        run "$bench/bench-store"
        run "$bench/bench-scale"
        run "$bench/bench-core" --size 1024
        run "$bench/bench-redis"
        run "$bench/bench-recompress" --size 128
        run "$bench/bench-reclaim"
} 2>&1 | tee "$build/bench-all.log"
