#!/bin/bash
# The main job: set up, build, start zswapd, page 1 GiB of real heap data
# out through libzswap, show what was saved, read it back and verify.
# Run as root on Debian 12 from a checkout with ../shared/corpus beside it.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup-deps.sh
[ -d build ] || meson setup build
ninja -C build
# the socket in a directory of root's own (mode 0700), never straight
# in world-writable /tmp, where anyone could listen in the daemon's place
dir=$(mktemp -d /tmp/zswapd-demo-XXXX)
sock=$dir/zswapd.sock
./build/daemon/zswapd --no-config --socket "$sock" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
./build/client/tools/zswap-demo --socket "$sock" --size "${DEMO_MB:-1024}"
echo
./build/client/tools/zswapctl --socket "$sock" status
