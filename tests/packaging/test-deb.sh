#!/bin/bash
# test-deb: the Debian packages, as a user gets them. From a copy of the
# source tree (what git tracks, or the tree without its build
# directories): dpkg-buildpackage -us -uc -b makes zswapd, libzswap0 and
# libzswap-dev; lintian finds no error in them; they install on this
# machine; the installed daemon, started through the installed
# zswapd.socket (by systemd where it runs, else by systemd-socket-activate
# with the unit's own socket and ExecStart=), answers the installed
# zswapctl; a program built against the installed header and pkg-config
# file hands pages over and gets them back unchanged, and so does a
# python process under the installed zswap-run that the installed
# zswapctl pages out; purging removes every file the packages installed,
# /etc/zswapd, the daemon's state directory and the drop-in `zswapctl
# enable` wrote.
#
# It installs into the system, so it runs only where nothing of zswapd is
# installed already (no package, no /usr/sbin/zswapd) and no daemon
# serves /run/zswapd/zswapd.sock, as root; what it lacks to build and
# check packages (debhelper, lintian, dpkg-dev) it installs with apt-get.
# Suite 'deb' (tests/meson.build): .ci/run runs it once, beside the
# plain flavour's tests. Environment: ZSWAP_SOURCE_ROOT.
set -u
export LC_ALL=C
# the installed programs and library, not the build tree's
unset LD_LIBRARY_PATH ZSWAPD ZSWAPD_CONFIG ZSWAP_SOCKET ZSWAP_PRELOAD

if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: needs root (installs packages)"
        exit 77
fi
if [ ! -f "${ZSWAP_SOURCE_ROOT:-}/debian/control" ]; then
        echo "FAIL: \$ZSWAP_SOURCE_ROOT has no debian/control (run through meson test)"
        exit 1
fi
src=$ZSWAP_SOURCE_ROOT
for p in zswapd libzswap0 libzswap-dev; do
        if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
                echo "SKIP: package $p is installed here; this test installs and purges its own"
                exit 77
        fi
done
if [ -e /usr/sbin/zswapd ] || [ -e /usr/bin/zswapctl ]; then
        echo "SKIP: zswapd is installed in /usr (not by a package): this test would overwrite it"
        exit 77
fi
sock=/run/zswapd/zswapd.sock
if [ -S "$sock" ] && python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(sys.argv[1])" "$sock" 2>/dev/null; then
        echo "SKIP: a zswapd serves $sock already"
        exit 77
fi

need=()
for p in debhelper lintian dpkg-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
        echo "installing ${need[*]}"
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 ||
               { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }; }; then
                echo "SKIP: cannot install ${need[*]}"
                exit 77
        fi
fi

work=$(mktemp -d)
activator=
activator_sock=
installed=
cleanup() {
        [ -n "$activator" ] && kill "$activator" 2>/dev/null && wait "$activator" 2>/dev/null
        pkill -KILL -f "^/usr/sbin/zswapd" 2>/dev/null
        if [ -n "$installed" ]; then
                dpkg --purge zswapd libzswap-dev libzswap0 >/dev/null 2>&1
        fi
        [ -n "$activator_sock" ] && rm -f "$sock"
        rm -f "/etc/systemd/system/$unit.d/zswap.conf"
        rmdir "/etc/systemd/system/$unit.d" 2>/dev/null
        rm -rf "$work"
}
unit=zswap-test-deb-$$.service
trap cleanup EXIT
failures=0
fail() {
        echo "FAIL: $*"
        failures=$((failures + 1))
}

# ---- build ----
version=$(cd "$src" && dpkg-parsechangelog -S Version)
tree=$work/zswapd-$version
mkdir -p "$tree"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 -I{} sh -c '[ -e "{}" ] && printf "%s\0" "{}"' |
                tar --null -T - -cf -) | tar -C "$tree" -xf -
else
        tar -C "$src" --exclude='./build*' --exclude='./ci-*' -cf - . | tar -C "$tree" -xf -
fi
echo "building the packages of $version"
start=$SECONDS
if ! (cd "$tree" && DEB_BUILD_OPTIONS="parallel=$(nproc) noddebs" nice -n 19 dpkg-buildpackage -us -uc -b \
              >"$work/build.log" 2>&1); then
        tail -40 "$work/build.log"
        echo "FAIL: dpkg-buildpackage"
        exit 1
fi
echo "built in $((SECONDS - start)) s"
arch=$(dpkg --print-architecture)
debs=()
for p in zswapd libzswap0 libzswap-dev; do
        f=$work/${p}_${version}_$arch.deb
        if [ -f "$f" ]; then debs+=("$f"); else fail "no $f"; fi
done
[ ${#debs[@]} -eq 3 ] || exit 1

# ---- lintian: no error ----
lintian --fail-on error "$work/zswapd_${version}_$arch.changes" >"$work/lintian.log" 2>&1
lint=$?
grep -v 'running with root privileges' "$work/lintian.log"
[ $lint -eq 0 ] || fail "lintian found errors (exit $lint)"

# ---- install ----
if ! dpkg -i "${debs[@]}" >"$work/install.log" 2>&1; then
        cat "$work/install.log"
        echo "FAIL: dpkg -i"
        exit 1
fi
installed=1
# what they installed, less directories (some, like /lib, are the system's)
mapfile -t files < <(dpkg -L zswapd libzswap0 libzswap-dev | sort -u | while read -r f; do [ -d "$f" ] || echo "$f"; done)
for f in /usr/sbin/zswapd /usr/bin/zswapctl /usr/bin/zswap-run /etc/zswapd/zswapd.conf /usr/include/zswap.h; do
        [ -e "$f" ] || fail "$f is not installed"
done
dpkg-query -W -f='${Conffiles}\n' zswapd | grep -q '/etc/zswapd/zswapd.conf' ||
        fail "/etc/zswapd/zswapd.conf is not a conffile"
getent group zswap >/dev/null || fail "the group zswap was not created"
/usr/sbin/zswapd --check-config >"$work/check.log" 2>&1 || { cat "$work/check.log"; fail "the installed configuration does not check"; }
zswapctl --version | grep -qF "$version" || fail "zswapctl --version is not $version"

# ---- the daemon through the installed socket unit ----
unitdir=$(dirname "$(dpkg -L zswapd | grep '/zswapd.socket$' | head -1)")
[ -f "$unitdir/zswapd.socket" ] || fail "no zswapd.socket installed"
if [ -d /run/systemd/system ]; then
        systemctl is-active --quiet zswapd.socket || fail "zswapd.socket is not active after install"
        how="systemd"
else
        listen=$(sed -n 's/^ListenSequentialPacket=//p' "$unitdir/zswapd.socket")
        exec_start=$(sed -n 's/^ExecStart=//p' "$unitdir/zswapd.service")
        [ "$listen" = "$sock" ] || fail "zswapd.socket listens on '$listen', not $sock"
        mkdir -p "$(dirname "$sock")"
        rm -f "$sock" # a socket file nobody serves (checked above)
        read -r -a cmd <<<"$exec_start"
        systemd-socket-activate --seqpacket -l "$sock" -- "${cmd[@]}" >"$work/daemon.log" 2>&1 &
        activator=$! activator_sock=1
        how="systemd-socket-activate (no systemd here)"
        for _ in $(seq 600); do grep -q "^Listening on" "$work/daemon.log" && break; sleep 0.05; done
fi
if ! zswapctl status >"$work/status.log" 2>&1 || ! grep -qE '^compressor +lz4' "$work/status.log"; then
        cat "$work/status.log" "$work/daemon.log" 2>/dev/null
        fail "zswapctl status through the socket unit ($how)"
else
        echo "zswapctl status answered through zswapd.socket ($how)"
fi

# ---- a program built against the installed development files ----
cat >"$work/client.c" <<'EOF'
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <zswap.h>

int main(void) {
        struct zswap_client *c;
        size_t len = 8u << 20;
        int r = zswap_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "connect: %s\n", strerror(-r));
                return 1;
        }
        uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || (r = zswap_register(c, p, len)) < 0) {
                fprintf(stderr, "register: %s\n", strerror(-r));
                return 1;
        }
        for (size_t i = 0; i < len; i++)
                p[i] = (uint8_t)(i * 7 + i / 4096);
        long out = zswap_pageout(c, p, len);
        for (size_t i = 0; i < len; i++)
                if (p[i] != (uint8_t)(i * 7 + i / 4096)) {
                        fprintf(stderr, "byte %zu differs\n", i);
                        return 1;
                }
        printf("pages out %ld, all back\n", out);
        zswap_disconnect(c);
        return out > 0 ? 0 : 1;
}
EOF
if ! cc -o "$work/client" "$work/client.c" $(pkg-config --cflags --libs libzswap) >"$work/cc.log" 2>&1; then
        cat "$work/cc.log"
        fail "a client does not build against the installed libzswap-dev"
elif ! out=$("$work/client" 2>&1); then
        fail "the client built against the packages: $out"
else
        echo "libzswap client: $out"
fi

# ---- an unmodified program under the installed zswap-run ----
coproc PY { zswap-run -- python3 -c '
import hashlib, os, sys
data = [bytes([i % 251]) * 3000 + str(i).encode() for i in range(20000)]
h = hashlib.sha256(b"".join(data)).hexdigest()
print(os.getpid(), flush=True)
sys.stdin.readline()
print("same" if hashlib.sha256(b"".join(data)).hexdigest() == h else "changed", flush=True)
'; }
read -r -t 60 pypid <&"${PY[0]}" || fail "python under zswap-run did not start"
evicted=0
for _ in $(seq 100); do
        line=$(zswapctl pageout "$pypid" 2>/dev/null) &&
                evicted=$(sed -n 's/^process [0-9]*: \([0-9]*\) pages evicted$/\1/p' <<<"$line") &&
                [ "${evicted:-0}" -gt 0 ] && break
        sleep 0.1
done
[ "${evicted:-0}" -gt 0 ] || fail "zswapctl pageout of python under zswap-run evicted nothing"
echo >&"${PY[1]}"
read -r -t 60 verdict <&"${PY[0]}"
[ "${verdict:-}" = same ] || fail "python's data after pageout: '${verdict:-nothing}'"
wait "$PY_PID" 2>/dev/null
echo "python under zswap-run: $evicted pages out, data the same"

# ---- a drop-in, then purge ----
zswapctl enable "$unit" --limit 1G >/dev/null || fail "zswapctl enable $unit"
[ -f "/etc/systemd/system/$unit.d/zswap.conf" ] || fail "no drop-in for $unit"
if [ -n "$activator" ]; then
        kill "$activator" 2>/dev/null
        wait "$activator" 2>/dev/null
        activator=
fi
pkill -TERM -f "^/usr/sbin/zswapd" 2>/dev/null
mkdir -p /var/lib/zswapd # the service's StateDirectory=, made by systemd where it runs
if ! dpkg --purge zswapd libzswap-dev libzswap0 >"$work/purge.log" 2>&1; then
        cat "$work/purge.log"
        fail "dpkg --purge"
fi
installed=
left=0
for f in "${files[@]}"; do
        if [ -f "$f" ] || [ -L "$f" ]; then
                fail "$f is left after purge"
                left=$((left + 1))
        fi
done
for d in /etc/zswapd /var/lib/zswapd "/etc/systemd/system/$unit.d"; do
        [ -e "$d" ] && fail "$d is left after purge"
done
echo "purge: ${#files[@]} files of the packages checked, $left left"

if [ $failures -gt 0 ]; then
        echo "$failures failure(s)"
        exit 1
fi
echo "ok: built, lintian-clean, installed, served through zswapd.socket, a client and zswap-run, purged"
