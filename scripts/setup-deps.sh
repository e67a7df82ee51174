#!/bin/bash
# Install what zswapd needs to build, test and benchmark on Debian 12.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc clang libclang-rt-14-dev liblz4-dev libzstd-dev liburing-dev libsodium-dev
      libcap-dev libseccomp-dev zstd util-linux python3 redis-server redis-tools sqlite3
      scdoc man-db groff-base systemd valgrind nbd-server tmux)
missing=()
for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}"
fi
