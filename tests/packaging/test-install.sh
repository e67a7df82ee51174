#!/bin/bash
# test-install: `meson install` into a staging root gives everything a
# package needs, and what it gives works from there.
#
# Installs the build this test runs in (MESON_BUILD_ROOT, --no-rebuild)
# into a temporary DESTDIR and checks: the three programs (they run and
# print their help), the library with its soname links, the preload shim,
# the header, the pkg-config file (a program compiled and linked against
# the staged header and library through `pkg-config --cflags --libs
# libzswap` alone runs and gets ENOENT from a socket that does not
# exist; the example of libzswap(3) compiles the same way), the man pages,
# the default configuration, the systemd units, tmpfiles.d and sysusers.d
# files. Nothing is written outside the staging directory; no network.
# Environment (tests/meson.build): MESON_BUILD_ROOT, MESON, CC,
# SANITIZE_CFLAGS, PREFIX, BINDIR, SBINDIR, LIBDIR, INCLUDEDIR, MANDIR,
# SYSCONFDIR, UNITDIR, TMPFILESDIR, SYSUSERSDIR, PRELOAD_PATH, SCDOC_FOUND.
set -u
export LC_ALL=C

for v in MESON_BUILD_ROOT PREFIX BINDIR SBINDIR LIBDIR INCLUDEDIR MANDIR SYSCONFDIR UNITDIR TMPFILESDIR SYSUSERSDIR PRELOAD_PATH; do
        if [ -z "${!v:-}" ]; then
                echo "FAIL: \$$v is not set (run through meson test)"
                exit 1
        fi
done
for tool in pkg-config readelf; do
        if ! command -v "$tool" >/dev/null; then
                echo "SKIP: $tool is not installed"
                exit 77
        fi
done
read -r -a cc <<<"${CC:-cc}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/root
failures=0
fail() {
        echo "FAIL: $*"
        failures=$((failures + 1))
}

if ! "${MESON:-meson}" install -C "$MESON_BUILD_ROOT" --destdir "$stage" --no-rebuild >"$work/install.log" 2>&1; then
        cat "$work/install.log"
        echo "FAIL: meson install"
        exit 1
fi
# DESTDIR + an absolute install path
at() {
        echo "$stage$1"
}

file() {
        [ -f "$(at "$1")" ] || fail "$1 is not installed"
}

# ---- programs: installed, executable, and they run from there ----
for p in "$SBINDIR/zswapd" "$BINDIR/zswapctl" "$BINDIR/zswap-run"; do
        f=$(at "$p")
        if [ ! -x "$f" ]; then
                fail "$p is not installed as an executable"
                continue
        fi
        name=${p##*/}
        out=$("$f" --help 2>&1) || fail "$p --help exited $?"
        grep -q "See $name(" <<<"$out" || fail "$p --help does not point to its man page: $out"
done

# ---- the library: soname, links, exports; the preload shim ----
lib=$(at "$LIBDIR")
real=$(cd "$lib" 2>/dev/null && ls libzswap.so.*.*.* 2>/dev/null | head -n1)
if [ -z "$real" ]; then
        fail "$LIBDIR/libzswap.so.X.Y.Z is not installed"
else
        soname=$(readelf -d "$lib/$real" | sed -nE 's/.*\(SONAME\).*\[(.*)\]/\1/p')
        [ "$soname" = libzswap.so.0 ] || fail "$real: SONAME is '$soname', not libzswap.so.0"
        [ "$(readlink -f "$lib/libzswap.so.0")" = "$(readlink -f "$lib/$real")" ] ||
                fail "$LIBDIR/libzswap.so.0 does not lead to $real"
        [ "$(readlink -f "$lib/libzswap.so")" = "$(readlink -f "$lib/$real")" ] ||
                fail "$LIBDIR/libzswap.so (the link for -lzswap) does not lead to $real"
        # exactly the functions of the header leave the library
        sed -nE 's/^[a-z].*[ *](zswap_[a-z_]+)\(.*/\1/p' "$(at "$INCLUDEDIR")/zswap.h" 2>/dev/null | sort -u >"$work/declared"
        readelf --dyn-syms -W "$lib/$real" | awk '$4 == "FUNC" && $5 == "GLOBAL" && $7 != "UND" { sub(/@.*/, "", $8); print $8 }' |
                sort -u >"$work/exported"
        [ -s "$work/declared" ] && ! diff -u "$work/declared" "$work/exported" >"$work/diff" && {
                fail "libzswap exports other functions than include/zswap.h declares:"
                sed 's/^/    /' "$work/diff"
        }
fi
shim=$(at "$PRELOAD_PATH")
if [ ! -f "$shim" ]; then
        fail "$PRELOAD_PATH is not installed"
else
        readelf --dyn-syms -W "$shim" | grep -qE ' GLOBAL +DEFAULT +[0-9]+ mmap(@|$)' ||
                fail "libzswap-preload.so does not export mmap"
fi
# zswap-run and zswapctl enable preload the shim from where it was installed
for prog in "$BINDIR/zswap-run" "$BINDIR/zswapctl"; do
        grep -qaF "$PRELOAD_PATH" "$(at "$prog")" || fail "$prog does not name $PRELOAD_PATH"
done

# ---- header and pkg-config: build a client against the staged tree only ----
file "$INCLUDEDIR/zswap.h"
pcdir=$(at "$LIBDIR/pkgconfig")
file "$LIBDIR/pkgconfig/libzswap.pc"
# only the staged .pc file, and /usr/include or /usr/lib kept (prefix=/usr)
export PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_PATH=
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
if ! flags=$(pkg-config --cflags --libs libzswap 2>&1); then
        fail "pkg-config cannot resolve libzswap from the staging root: $flags"
        flags=
fi
case " $flags " in
*" -I$(at "$INCLUDEDIR") "*) ;;
*) fail "pkg-config --cflags does not name the staged include dir: $flags" ;;
esac
case " $flags " in
*" -L$lib "*"-lzswap "*) ;;
*) fail "pkg-config --libs does not name the staged library: $flags" ;;
esac

if [ -n "$flags" ]; then
        cat >"$work/client.c" <<'EOF'
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zswap.h>

int main(void) {
        struct zswap_client *c = NULL;
        struct zswap_stats st;
        int r;

        errno = 1234;
        r = zswap_connect("/nonexistent-zswap-test/zswapd.sock", &c);
        if (r != -ENOENT || c) {
                printf("zswap_connect: %d (%s), expected -ENOENT\n", r, strerror(-r));
                return 1;
        }
        if (errno != 1234) {
                printf("zswap_connect changed errno\n");
                return 1;
        }
        r = zswap_connect("/nonexistent-zswap-test/zswapd.sock", NULL);
        if (r != -EINVAL) {
                printf("zswap_connect(ret NULL): %d, expected -EINVAL\n", r);
                return 1;
        }
        r = zswap_get_stats(NULL, ZSWAP_STATS_GLOBAL, &st);
        if (r != -EINVAL) {
                printf("zswap_get_stats(NULL): %d, expected -EINVAL\n", r);
                return 1;
        }
        zswap_disconnect(NULL);
        printf("ok %s\n", ZSWAP_DEFAULT_SOCKET);
        return 0;
}
EOF
        # shellcheck disable=SC2086 # pkg-config's output is a word list
        if ! "${cc[@]}" -std=gnu11 -Wall -Werror ${SANITIZE_CFLAGS:-} -o "$work/client" "$work/client.c" $flags \
                >"$work/cc.log" 2>&1; then
                fail "a client does not build against the staged tree with $flags:"
                sed 's/^/    /' "$work/cc.log"
        else
                # the program must load the staged library, not one of the system's
                out=$(LD_LIBRARY_PATH=$lib "$work/client" 2>&1)
                [ "$out" = "ok /run/zswapd/zswapd.sock" ] || fail "the staged client said: $out"
                LD_LIBRARY_PATH=$lib ldd "$work/client" | grep -q "libzswap.so.0 => $lib/libzswap.so.0" ||
                        fail "the client did not load the staged libzswap: $(LD_LIBRARY_PATH=$lib ldd "$work/client")"
        fi
fi

# ---- man pages ----
if [ "${SCDOC_FOUND:-0}" = 1 ]; then
        for p in man8/zswapd.8 man8/zswapctl.8 man1/zswap-run.1 man3/libzswap.3 man5/zswapd.conf.5; do
                file "$MANDIR/$p"
        done
        # libzswap(3)'s example builds as printed (a reader copies it)
        page=$(at "$MANDIR/man3/libzswap.3")
        if [ -f "$page" ] && [ -n "$flags" ] && command -v man >/dev/null && command -v col >/dev/null; then
                MANWIDTH=80 man -l "$page" 2>/dev/null | col -bx |
                        awk '/^EXAMPLES/ { on = 1; next } /^[A-Z]/ { on = 0 } on && /^       [^ ]/ { if (code) exit }
                             on && /^           / { code = 1; print substr($0, 12); next } on && code && /^$/ { print }' \
                        >"$work/example.c"
                grep -q 'zswap_connect' "$work/example.c" || fail "no C example found in libzswap(3)"
                # shellcheck disable=SC2086
                "${cc[@]}" -std=gnu11 -Wall -Werror ${SANITIZE_CFLAGS:-} -o "$work/example" "$work/example.c" $flags \
                        >"$work/cc.log" 2>&1 || {
                        fail "libzswap(3)'s example does not build:"
                        sed 's/^/    /' "$work/cc.log"
                }
        fi
else
        echo "note: scdoc was not found at setup; man pages not checked"
fi

# ---- configuration and systemd integration ----
file "$SYSCONFDIR/zswapd/zswapd.conf"
# the installed daemon accepts the installed default configuration as it is
if [ -x "$(at "$SBINDIR/zswapd")" ] && [ -f "$(at "$SYSCONFDIR/zswapd/zswapd.conf")" ]; then
        out=$("$(at "$SBINDIR/zswapd")" --check-config --config "$(at "$SYSCONFDIR/zswapd/zswapd.conf")" 2>&1) ||
                fail "zswapd --check-config refuses the installed zswapd.conf: $out"
fi
file "$UNITDIR/zswapd.service"
file "$UNITDIR/zswapd.socket"
file "$TMPFILESDIR/zswapd.conf"
file "$SYSUSERSDIR/zswapd.conf"
if [ -f "$(at "$UNITDIR/zswapd.service")" ]; then
        # the unit runs the installed daemon
        grep -qE "^ExecStart=-?$SBINDIR/zswapd( |$)" "$(at "$UNITDIR/zswapd.service")" ||
                fail "zswapd.service does not start $SBINDIR/zswapd: $(grep ^ExecStart "$(at "$UNITDIR/zswapd.service")")"
fi
# every man: page the units' Documentation= names is installed
if [ "${SCDOC_FOUND:-0}" = 1 ]; then
        for u in zswapd.service zswapd.socket; do
                f=$(at "$UNITDIR/$u")
                [ -f "$f" ] || continue
                for m in $(sed -n 's/^Documentation=//p' "$f"); do
                        case $m in
                        man:*\(*\))
                                m=${m#man:}
                                n=${m%%(*}
                                sec=${m#*(}
                                sec=${sec%)}
                                file "$MANDIR/man$sec/$n.$sec"
                                ;;
                        esac
                done
        done
fi

# nothing is installed outside the prefix and sysconfdir, the unit dirs
find "$stage" -type f -o -type l | sed "s|^$stage||" | sort >"$work/all"
while IFS= read -r f; do
        case $f in
        "$PREFIX"/* | "$SYSCONFDIR"/* | "$UNITDIR"/* | "$TMPFILESDIR"/* | "$SYSUSERSDIR"/*) ;;
        *) fail "installed outside the prefix: $f" ;;
        esac
done <"$work/all"

if [ "$failures" -gt 0 ]; then
        echo "$failures check(s) failed; installed:"
        sed 's/^/    /' "$work/all"
        exit 1
fi
echo "ok: $(grep -cv -e '^/all$' "$work/all") files installed and checked"
