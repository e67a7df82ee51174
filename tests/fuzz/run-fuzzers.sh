#!/bin/sh
# run-fuzzers.sh: build the libFuzzer binaries with clang and run each one
# for a while on a scratch copy of its committed corpus (docs/fuzzing.md).
#
#   tests/fuzz/run-fuzzers.sh [-t SECONDS] [-b BUILDDIR] [-m] [FUZZER...]
#
#   -t  seconds per fuzzer (default 60)
#   -b  the clang build directory (default build-fuzz, made if missing)
#   -m  merge what each run found into tests/fuzz/corpus/NAME (-merge=1:
#       only inputs that add coverage; look at the size before committing)
#   FUZZER: protocol, config, codec, store (default: all four)
#
# Per fuzzer it prints the executions, libFuzzer's final cov: and ft:,
# and the crashes, whose inputs are kept in BUILDDIR/fuzz-out/NAME/. The
# exit status is 1 if any fuzzer crashed. Needs clang and libclang-rt-dev
# (scripts/setup-deps.sh installs them).
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
secs=60
build=build-fuzz
merge=0
while getopts t:b:m opt; do
        case $opt in
        t) secs=$OPTARG ;;
        b) build=$OPTARG ;;
        m) merge=1 ;;
        *) sed -n '2,17p' "$0"; exit 2 ;;
        esac
done
shift $((OPTIND - 1))
names=${*:-protocol config codec store}
case $build in /*) ;; *) build=$top/$build ;; esac

command -v clang >/dev/null || { echo "clang not found: scripts/setup-deps.sh" >&2; exit 2; }
if [ ! -f "$build/build.ninja" ]; then
        # the daemon's code is instrumented for coverage (fuzzer-no-link);
        # UBSan reports abort so that libFuzzer counts them as crashes
        CC=clang meson setup "$build" "$top" -Db_sanitize=address,undefined -Db_lundef=false \
                -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined' >/dev/null
fi
targets=
for n in $names; do targets="$targets tests/fuzz/fuzz-$n"; done
# only the fuzzers and what they link: the rest of the tree need not build with clang
ninja -C "$build" $targets >/dev/null

failed=0
printf '%-10s %12s %8s %8s %8s\n' fuzzer execs cov ft crashes
for n in $names; do
        out=$build/fuzz-out/$n
        rm -rf "$out"
        mkdir -p "$out/corpus" "$out/crashes"
        cp "$top/tests/fuzz/corpus/$n/"* "$out/corpus/"
        dict=
        [ -f "$top/tests/fuzz/fuzz-$n.dict" ] && dict=-dict=$top/tests/fuzz/fuzz-$n.dict
        # one job, one worker; in it -fork=1 -ignore_crashes=1 keeps going
        # after a crash (each one saved), so a known bug does not end the run
        (cd "$out" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
                "$build/tests/fuzz/fuzz-$n" -max_total_time="$secs" -jobs=1 -workers=1 -fork=1 \
                -ignore_crashes=1 -print_final_stats=1 -artifact_prefix="$out/crashes/" $dict \
                "$out/corpus" >"$out/log" 2>&1) || true
        # -jobs/-workers: the run's own output is in fuzz-0.log; fork mode
        # prints "#EXECS: cov: N ft: N ..." lines, a plain run "#EXECS DONE cov: ..."
        logs="$out/log $(ls "$out"/fuzz-*.log 2>/dev/null || true)"
        line=$(cat $logs | grep -E '^#[0-9]+:? .*cov: ' | tail -1)
        execs=$(cat $logs | sed -n 's/^stat::number_of_executed_units: *//p' | tail -1)
        [ -n "$execs" ] || execs=$(echo "$line" | sed -n 's/^#\([0-9]*\).*/\1/p')
        cov=$(echo "$line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
        ft=$(echo "$line" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
        crashes=$(find "$out/crashes" -type f | wc -l)
        printf '%-10s %12s %8s %8s %8s\n' "$n" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$crashes"
        [ "$crashes" -eq 0 ] || { failed=1; ls "$out/crashes" | sed 's/^/    /'; }
        if [ "$merge" = 1 ]; then
                "$build/tests/fuzz/fuzz-$n" -merge=1 "$top/tests/fuzz/corpus/$n" "$out/corpus" \
                        >"$out/merge.log" 2>&1 || echo "  merge failed: $out/merge.log"
        fi
done
exit $failed
