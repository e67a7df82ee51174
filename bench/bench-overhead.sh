#!/bin/bash
# bench-overhead: what zswapd costs a program it never evicts from.
#
# Runs each workload plainly and under zswap-run (a daemon of BUILD_DIR on
# a private socket, no limit, no pageout, the daemon's default policy),
# alternating, REPS times each, and prints the median wall time of each
# and their ratio (zswap-run / plain: 1.00 is free). With --variant
# KEY=VALUE the daemon runs with that policy key too (zswapd --set), e.g.
# write_scan=0 to see what write tracking costs.
#
#   sudo bench/bench-overhead.sh [--reps N] [--only NAME] [--variant KEY=VALUE] [BUILD_DIR]
#
# Workloads (those whose program is missing are skipped, with a line):
#   perl     a hash of 2M keys
#   python   a dict of 2M keys
#   node     a Map of 500k entries
#   java     a HashMap of 1.5M entries (java runs the source file itself)
#   redis    redis-server loaded with 500k keys by redis-benchmark
#   memcached  memcached loaded with 1M keys (64-byte values) by a python
#            client over its Unix socket, pipelined, then counted
#   cc       a parallel build (ninja -j2) of this project's daemon
#   sh       a shell running /bin/true 500 times (fork and exec: what
#            each short-lived process costs)
#   fork     python holding 64 MiB, forking 300 children that exit at
#            once (a pre-fork server's workers, a shell's subshells):
#            what each fork child costs its parent's page tables
#   purge    python writing 16 KiB of a 64 MiB mapping and giving it back
#            (madvise MADV_DONTNEED) 40000 times, as allocators return
#            memory: what each uffd event (REMOVE, UNMAP) costs
# Needs root (the daemon does).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
reps=3 only= variant=()
while [ $# -gt 0 ]; do
        case $1 in
        --reps) reps=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --variant) variant+=(--set "$2"); shift 2 ;;
        *) break ;;
        esac
done
build=$(cd "${1:-build}" && pwd)

if [ "$(id -u)" != 0 ]; then
        echo "bench-overhead: needs root (zswapd does)" >&2
        exit 1
fi
work=$(mktemp -d /tmp/bench-overhead.XXXXXX)
sock=$work/zswapd.sock
dpid=
cleanup() {
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
        rm -rf "$work"
}
trap cleanup EXIT

"$build/daemon/zswapd" --socket "$sock" --no-config "${variant[@]}" 2> "$work/zswapd.log" &
dpid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "bench-overhead: the daemon did not start:"; cat "$work/zswapd.log"; exit 1; }

cat > "$work/Bench.java" <<'EOF'
import java.util.HashMap;
public class Bench {
    public static void main(String[] a) {
        HashMap<String, Integer> m = new HashMap<>();
        for (int i = 0; i < 1500000; i++) m.put("key" + i, i);
        long s = 0;
        for (int i = 0; i < 1500000; i++) s += m.get("key" + i);
        System.out.println(m.size() + " " + s);
    }
}
EOF

cat > "$work/mcload.py" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
n, batch = 1000000, []
for i in range(n):
    v = b"v%063d" % i
    batch.append(b"set key%d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
    if len(batch) == 1000:
        s.sendall(b"".join(batch))
        batch = []
s.sendall(b"".join(batch) + b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
print([l.decode() for l in buf.split(b"\r\n") if l.startswith(b"STAT curr_items")][0])
EOF

# each workload: a check that it can run, and its command (run by bash -c)
declare -A cmd have
have[perl]="command -v perl"
cmd[perl]="perl -e 'my %h; \$h{\$_} = \$_ for 1 .. 2000000; my \$s = 0; \$s += \$h{\$_} for 1 .. 2000000; print scalar(keys %h), \" \$s\n\"'"
have[python]="command -v python3"
cmd[python]="python3 -c 'd = {i: str(i) for i in range(2000000)}; print(len(d), sum(len(v) for v in d.values()))'"
have[node]="command -v node"
cmd[node]="node -e 'const m = new Map(); for (let i = 0; i < 500000; i++) m.set(\"k\" + i, { i, s: \"v\" + i }); let t = 0; for (const [k, v] of m) t += v.i; console.log(m.size, t)'"
have[java]="command -v java"
cmd[java]="java -Xmx2g $work/Bench.java"
have[redis]="command -v redis-server && command -v redis-benchmark && command -v redis-cli"
cmd[redis]="redis-server --port 0 --unixsocket $work/redis.sock --save '' --appendonly no --daemonize no >/dev/null & p=\$!; \
for i in \$(seq 100); do redis-cli -s $work/redis.sock ping >/dev/null 2>&1 && break; sleep 0.05; done; \
redis-benchmark -s $work/redis.sock -q -t set -n 500000 -r 500000 -d 64 -P 16 >/dev/null; \
n=\$(redis-cli -s $work/redis.sock dbsize); redis-cli -s $work/redis.sock shutdown nosave >/dev/null 2>&1; wait \$p; echo \$n keys"
have[memcached]="command -v memcached && command -v python3"
cmd[memcached]="memcached -u root -s $work/mc.sock -a 0700 -m 1024 -t 2 & p=\$!; \
for i in \$(seq 100); do [ -S $work/mc.sock ] && break; sleep 0.05; done; \
python3 $work/mcload.py $work/mc.sock; kill \$p; wait \$p; rm -f $work/mc.sock"
have[cc]="command -v ninja && command -v meson"
have[sh]="true"
cmd[sh]="for i in \$(seq 500); do /bin/true; done; echo 500 runs"
have[fork]="command -v python3"
cmd[fork]="python3 -c 'import os
b = bytearray(64 << 20)
for i in range(0, len(b), 4096): b[i] = 1
for i in range(300):
    p = os.fork()
    if p == 0: os._exit(0)
    os.waitpid(p, 0)
print(300, \"forks\")'"
have[purge]="command -v python3"
cmd[purge]="python3 -c 'import mmap, time
m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
time.sleep(0.3)
c = 16 << 10; b = b\"x\" * c; n = (64 << 20) // c
for i in range(40000):
    o = (i % n) * c; m[o:o + c] = b; m.madvise(mmap.MADV_DONTNEED, o, c)
print(40000, \"purges\")'"
cmd[cc]="ninja -C $work/ccbuild -j2 daemon/zswapd >/dev/null && ninja -C $work/ccbuild -t clean >/dev/null && echo built"

echo "bench-overhead: $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
     "hypervisor: $(systemd-detect-virt 2>/dev/null || echo unknown); reps $reps; daemon defaults${variant[*]:+ with ${variant[*]}}"
printf '%-8s %10s %10s %7s  %s\n' workload plain_s zswap_s ratio "output (plain | zswap-run)"

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
timed() { # timed OUTFILE CMD...: wall seconds on stdout
        local t0 t1 out=$1
        shift
        t0=$(date +%s.%N)
        "$@" > "$out.out" 2>&1
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

for w in perl python node java redis memcached cc sh fork purge; do
        [ -n "$only" ] && [ "$only" != "$w" ] && continue
        if ! bash -c "${have[$w]}" >/dev/null 2>&1; then
                printf '%-8s skipped: not installed\n' "$w"
                continue
        fi
        if [ "$w" = cc ] && [ ! -d "$work/ccbuild" ]; then
                meson setup "$work/ccbuild" "$src" >/dev/null 2>&1 || { printf '%-8s skipped: meson setup failed\n' "$w"; continue; }
                ninja -C "$work/ccbuild" -t clean >/dev/null 2>&1
        fi
        plain=() managed=()
        for r in $(seq "$reps"); do
                # shellcheck disable=SC2206
                plain+=($(timed "$work/plain" bash -c "${cmd[$w]}" dummy))
                managed+=($(timed "$work/managed" "$build/client/preload/zswap-run" --socket "$sock" -- bash -c "${cmd[$w]}"))
        done
        p=$(printf '%s\n' "${plain[@]}" | median)
        m=$(printf '%s\n' "${managed[@]}" | median)
        printf '%-8s %10.2f %10.2f %7.2f  %s | %s\n' "$w" "$p" "$m" "$(awk -v a="$m" -v b="$p" 'BEGIN { print a / b }')" \
               "$(tail -c 60 "$work/plain.out" | tr '\n' ' ')" "$(tail -c 60 "$work/managed.out" | tr '\n' ' ')"
done
echo "daemon: $("$build/client/tools/zswapctl" --socket "$sock" status 2>/dev/null | grep -E '^(faults|faults_zero_fill|zero_ahead|evictions) ' | tr -s ' ' | paste -sd, -)"
