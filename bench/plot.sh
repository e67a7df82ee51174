#!/bin/bash
# bench/plot.sh: the benchmark figures as pictures, in one command.
#
#   sudo bench/plot.sh [--replot] [BUILD_DIR [OUT_DIR]]   (default: build docs/img)
#
# Measures, on this machine and in this one run:
#   0. bench-wake: the bare userfaultfd round trip (no decompression) with
#      the handler in another process on the same CPU, the floor under
#      every zswapd fault below; its median and p99 go into machine.txt;
#   1. bench-core --latencies: every fault's latency when a region of real
#      heap pages (the corpus, $PLOT_SIZE_MIB MiB, default 256) is read
#      back after a pageout, in random and in sequential order, for
#      zswapd, kernel zram (lz4) and kernel zswap (lzo before a swapfile);
#   2. memory saved over time under reclaim: a python program that builds
#      about 300 MB of records (dicts of ints, floats and strings, as a
#      service's cache holds) under `zswap-run --limit 64M`, then reads a
#      tenth of them again and again, with the daemon's figures read every
#      0.2 s (the program's RssAnon, what zswapd holds for it, the pool).
# then draws them with gnuplot into OUT_DIR: fault-latency.svg (the share
# of faults slower than each latency, log-log: the tail is where the
# backends differ) and reclaim-timeline.svg. The data and the reports of
# bench-core and bench-wake go to OUT_DIR/data/, with the machine they were
# measured on; --replot draws again from them without measuring;
# PLOT_FORMAT=png draws PNGs instead of SVGs. Needs root (kernel
# phases, the daemon) and gnuplot (gnuplot-nox, installed if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

replot=
if [ "${1:-}" = --replot ]; then
        replot=1
        shift
fi
build=${1:-build}
out=${2:-docs/img}
data=$out/data
mkdir -p "$data"

if ! command -v gnuplot >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
fi

if [ -z "$replot" ]; then
        [ "$(id -u)" -eq 0 ] || { echo "plot.sh: measuring needs root (or --replot)" >&2; exit 1; }
        for f in bench/bench-core bench/bench-wake daemon/zswapd client/preload/zswap-run client/tools/zswapctl; do
                [ -x "$build/$f" ] || { echo "plot.sh: no $build/$f: build first (meson setup $build && ninja -C $build)" >&2; exit 1; }
        done
        {
                echo "# measured $(date -u '+%Y-%m-%d %H:%M UTC') at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
                echo "# $(uname -r), $(nproc) CPUs, virtualization: $(systemd-detect-virt 2>/dev/null || echo unknown)"
                echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
        } >"$data/machine.txt"

        # 0. the bare uffd round trip: bench-wake's same-cpu row is
        # "same-cpu MEDIAN P99 MAX CPU" (us)
        "$build/bench/bench-wake" 20000 | tee "$data/bench-wake.txt"
        awk '$1 == "same-cpu" { found = 1
                printf "# uffd round trip, same CPU, handler in another process (bench-wake): median %s us, p99 %s us\n", $2, $3 }
             END { exit !found }' "$data/bench-wake.txt" >>"$data/machine.txt" ||
                { echo "plot.sh: no same-cpu row in bench-wake's report" >&2; exit 1; }

        # 1. fault latency distributions
        rm -f "$data"/*-random.dat "$data"/*-sequential.dat
        "$build/bench/bench-core" --size "${PLOT_SIZE_MIB:-256}" --latencies "$data" | tee "$data/bench-core.txt"

        # 2. memory saved over time under reclaim
        work=$(mktemp -d)
        sock=$work/zswapd.sock
        daemon= prog=
        cleanup() {
                [ -n "$prog" ] && kill "$prog" 2>/dev/null
                [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
                rm -rf "$work"
        }
        trap cleanup EXIT
        "$build/daemon/zswapd" --socket "$sock" --no-config 2>"$work/daemon.log" &
        daemon=$!
        for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
        ZSWAP_SOCKET=$sock "$build/client/preload/zswap-run" --limit 64M -- python3 -c '
import random, time
random.seed(7)
words = ["alpha", "beta", "gamma", "delta", "error", "ok", "GET", "POST", "/api/v1/items", "user", "admin"]
records = []
for i in range(900000):
    records.append({"id": i, "user": "user%d" % random.randrange(50000), "score": random.random() * 100,
                    "path": random.choice(words[8:]) + "/" + str(random.randrange(10**6)),
                    "tags": [random.choice(words) for _ in range(3)], "status": random.choice((200, 404, 500))})
    if i % 50000 == 0:
        time.sleep(0.2)
hot = records[: len(records) // 10]
end = time.time() + 8
total = 0
while time.time() < end:
    for r in hot:
        total += r["status"]
print(len(records), total)
' >"$work/prog.out" 2>&1 &
        prog=$!
        t0=$(date +%s.%N)
        echo "# seconds rss_anon_bytes evicted_bytes pool_bytes saved_bytes refaults" >"$data/reclaim-timeline.dat"
        while kill -0 "$prog" 2>/dev/null; do
                # the python process (zswap-run execs it: same pid)
                rss=$(awk '/^RssAnon:/ { print $2 * 1024 }' "/proc/$prog/status" 2>/dev/null || echo 0)
                mapfile -t v < <("$build/client/tools/zswapctl" -s "$sock" status -n -b \
                                         -o original_bytes,pool_bytes,refaults 2>/dev/null || true)
                if [ ${#v[@]} -eq 3 ]; then
                        t=$(echo "$(date +%s.%N) - $t0" | bc)
                        saved=$((v[0] > v[1] ? v[0] - v[1] : 0))
                        echo "$t ${rss:-0} ${v[0]} ${v[1]} $saved ${v[2]}" >>"$data/reclaim-timeline.dat"
                fi
                sleep 0.2
        done
        wait "$prog" || { cat "$work/prog.out"; echo "plot.sh: the reclaim workload failed" >&2; exit 1; }
        prog=
        echo "reclaim workload: $(cat "$work/prog.out") ($(wc -l <"$data/reclaim-timeline.dat") samples)"
fi

ext=${PLOT_FORMAT:-svg}
case $ext in
svg) term='svg size 960,420 dynamic enhanced font "sans,11"' ;;
png) term='pngcairo size 1200,520 enhanced font "sans,11"' ;;
*) echo "plot.sh: PLOT_FORMAT is svg or png" >&2; exit 2 ;;
esac
machine=$(sed -n '2p' "$data/machine.txt" | sed 's/^# //')
when=$(sed -n '1p' "$data/machine.txt" | sed 's/^# measured //')
size=$(sed -n 's/^.*zram-lz4 random fault-in: \([0-9]*\) faults.*/\1/p' "$data/zram-lz4-random.dat" 2>/dev/null || true)

# fault latency: one panel per order, a line per backend
gnuplot <<EOF
set terminal $term
set output "$out/fault-latency.$ext"
set multiplot layout 1,2 title "Fault latency reading back real heap pages after a pageout (${size:-?} faults a pass)\n{/*0.8 $machine; $when}"
set logscale xy
set xlabel "latency (us)"
set ylabel "share of faults slower"
set format y "10^{%L}"
set grid
set key bottom left
set yrange [*:1]
set title "random order"
plot "$data/zswapd-lz4-random.dat" using 1:2 with lines lw 2 title "zswapd (lz4)", \
     "$data/zram-lz4-random.dat" using 1:2 with lines lw 2 title "kernel zram (lz4)", \
     "$data/zswap-lzo-random.dat" using 1:2 with lines lw 2 title "kernel zswap (lzo)"
set title "sequential order"
plot "$data/zswapd-lz4-sequential.dat" using 1:2 with lines lw 2 title "zswapd (lz4)", \
     "$data/zram-lz4-sequential.dat" using 1:2 with lines lw 2 title "kernel zram (lz4)", \
     "$data/zswap-lzo-sequential.dat" using 1:2 with lines lw 2 title "kernel zswap (lzo)"
unset multiplot
EOF

# memory saved over time
gnuplot <<EOF
set terminal $term
set output "$out/reclaim-timeline.$ext"
set title "A python program building 300 MB of records under zswap-run --limit 64M, then reading a tenth of them\n{/*0.8 $machine; $when}"
set xlabel "seconds"
set ylabel "MiB"
set grid
set key top left
M = 1024.0 * 1024.0
plot "$data/reclaim-timeline.dat" using 1:(\$2 / M) with lines lw 2 title "resident (RssAnon)", \
     "" using 1:(\$3 / M) with lines lw 2 title "held by zswapd (original size)", \
     "" using 1:(\$4 / M) with lines lw 2 title "pool (compressed)", \
     "" using 1:(\$5 / M) with lines lw 2 dt 2 title "saved (held - pool)"
EOF
echo "wrote $out/fault-latency.$ext and $out/reclaim-timeline.$ext (data in $data)"
