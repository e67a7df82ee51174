#!/bin/bash
# The main job: set up, build, start zswapd, page 1 GiB of real heap data
# out through libzswap, show what was saved, read it back and verify.
# Run as root on Debian 12 from a checkout with ../shared/corpus beside it.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup-deps.sh
[ -d build ] || meson setup build
ninja -C build
sock=$(mktemp -u /tmp/zswapd-demo-XXXX.sock)
./build/daemon/zswapd --no-config --socket "$sock" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
./build/client/zswap-demo --socket "$sock" --size "${DEMO_MB:-1024}"
echo
./build/client/zswapctl --socket "$sock" status
