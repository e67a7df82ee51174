#!/bin/bash
# test-man: the man pages render cleanly and say what the code does.
#
# Each built page is rendered the way a user reads it (man -l, 80
# columns, no hyphenation) and checked for: no groff or man warnings, a
# NAME line whatis(1) can parse, the sections every page has, no line
# wider than the terminal, and references only to pages that exist. Then
# the content is compared with its source of truth, in both directions:
#   zswapd(8), zswapctl(8), zswap-run(1): every option (and zswapctl
#     command) the built binary's --help lists is an item of the page's
#     OPTIONS (COMMANDS), and every item there is in --help;
#   zswapd.conf(5): every key of common/tunable-keys.c, of the installed
#     default configuration systemd/zswapd.conf (in its section) and of
#     the daemon's table of settings (daemon/conf/config.c) is an item of the
#     page, and every item of the page is one of them;
#   libzswap(3): every function, stats field and constant of
#     include/zswap.h, and no function the header does not declare.
# Environment (tests/meson.build): MAN_BUILD_DIR, MAN_PAGES, SOURCE_ROOT,
# ZSWAPD, ZSWAPCTL, ZSWAP_RUN, SCDOC_FOUND.
set -u
export LC_ALL=C MANWIDTH=80 MANPAGER=cat PAGER=cat MAN_KEEP_FORMATTING=

if [ "${SCDOC_FOUND:-0}" != 1 ]; then
        echo "SKIP: scdoc was not found at setup, no man pages were built"
        exit 77
fi
for tool in man groff col lexgrog; do
        if ! command -v "$tool" >/dev/null; then
                echo "SKIP: $tool is not installed (man-db, groff-base)"
                exit 77
        fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
        echo "FAIL: $*"
        failures=$((failures + 1))
}

# render PAGE: $tmp/PAGE.txt, plain text as man shows it
render() {
        local page=$1 src=$MAN_BUILD_DIR/$1
        if [ ! -s "$src" ]; then
                fail "$page: not built ($src)"
                return 1
        fi
        if ! man --nh --nj --warnings=w -l "$src" 2>"$tmp/$page.err" | col -bx >"$tmp/$page.txt"; then
                fail "$page: man -l exited with an error"
        fi
        if [ -s "$tmp/$page.err" ]; then
                fail "$page: man -l warned:"
                sed 's/^/    /' "$tmp/$page.err"
        fi
        # groff itself, every warning on, straight from the source
        if ! groff -man -Tascii -ww -z "$src" 2>"$tmp/$page.gerr" || [ -s "$tmp/$page.gerr" ]; then
                fail "$page: groff -ww warned:"
                sed 's/^/    /' "$tmp/$page.gerr"
        fi
        [ -s "$tmp/$page.txt" ] || { fail "$page: rendered to nothing"; return 1; }
        return 0
}

# section PAGE NAME: the body of one top-level section (NAME at column 0)
section() {
        awk -v s="$2" '/^[A-Z]/ { on = ($0 == s); next } on' "$tmp/$1.txt"
}

# items PAGE SECTION: the item terms of a section. scdoc renders a term
# as a line of its own at the section's indent of 7 columns, after a
# blank line, with its text indented further on the next line; prose
# paragraphs stay at 7.
items() {
        section "$1" "$2" | awk '/^           [^ ]/ && term != "" { print term }
                                 { term = (blank && /^       [^ ]/) ? $0 : ""; blank = ($0 == "") }
                                 BEGIN { blank = 1 }'
}

# opts: every -x / --long option in the text on stdin
opts() {
        grep -oE '(^|[][ ,|(])--?[A-Za-z][A-Za-z0-9-]*' | sed -E 's/^[][ ,|(]//' | sort -u
}

# same_set WHAT A B: the lists in files A (truth) and B (page) agree
same_set() {
        local what=$1 truth=$2 page=$3 x
        while IFS= read -r x; do
                fail "$what: '$x' is missing from the page"
        done < <(comm -23 "$truth" "$page")
        while IFS= read -r x; do
                fail "$what: the page documents '$x', which does not exist"
        done < <(comm -13 "$truth" "$page")
}

check_common() {
        local page=$1 name=${1%.*} sec=${1##*.} s w
        render "$page" || return
        # whatis(1)/apropos(1) can read the NAME line
        w=$(lexgrog "$MAN_BUILD_DIR/$page" 2>&1)
        case "$w" in
        *"parse failed"*) fail "$page: lexgrog cannot parse NAME: $w" ;;
        *"\"$name - "*|*"\"$name, "*) ;;
        *) fail "$page: NAME does not start with '$name - ': $w" ;;
        esac
        head -n1 "$tmp/$page.txt" | grep -q "^$name($sec)" || fail "$page: header is not $name($sec)"
        for s in NAME SYNOPSIS DESCRIPTION OPTIONS FILES "EXIT STATUS" EXAMPLES "SEE ALSO"; do
                grep -qx "$s" "$tmp/$page.txt" || fail "$page: no $s section"
        done
        [ -n "$(section "$page" EXAMPLES | tr -d ' \n')" ] || fail "$page: EXAMPLES is empty"
        # nothing wider than the terminal (the footer line is man's own)
        awk -v p="$page" 'length($0) > 80 { printf "FAIL: %s: line %d is %d columns: %s\n", p, NR, length($0), $0; bad = 1 }
                          END { exit bad }' "$tmp/$page.txt" || failures=$((failures + 1))
        # references to this project's pages name a page that exists
        for s in $(grep -oE '(zswap[a-z.-]*|libzswap)\([0-9]\)' "$tmp/$page.txt" | sort -u); do
                case " $MAN_PAGES " in
                *" ${s%(*}.$(echo "$s" | tr -dc 0-9) "*) ;;
                *) fail "$page: refers to $s, which is not one of this project's pages ($MAN_PAGES)" ;;
                esac
        done
}

# check_program PAGE BINARY: options (and commands) against --help
check_program() {
        local page=$1 bin=$2 name=${1%.*} sec=${1##*.}
        [ -f "$tmp/$page.txt" ] || return
        if ! "$bin" --help >"$tmp/$name.help" 2>&1; then
                fail "$name --help failed"
                return
        fi
        tail -n1 "$tmp/$name.help" | grep -q "^See $name($sec)" || fail "$name --help does not end with 'See $name($sec)'"
        opts <"$tmp/$name.help" >"$tmp/$name.help-opts"
        [ -s "$tmp/$name.help-opts" ] || fail "$name --help lists no options"
        items "$page" OPTIONS | opts >"$tmp/$name.page-opts"
        same_set "$page: option" "$tmp/$name.help-opts" "$tmp/$name.page-opts"
        # zswapctl: the commands of --help are the page's COMMANDS
        if grep -q '^Commands:' "$tmp/$name.help"; then
                awk '/^Commands:/ { on = 1; next } /^[^ ]/ { on = 0 } on && /^  [a-z]/ { print $1 }' \
                        "$tmp/$name.help" | sort -u >"$tmp/$name.help-cmds"
                items "$page" COMMANDS | awk '{ print $1 }' | sort -u >"$tmp/$name.page-cmds"
                same_set "$page: command" "$tmp/$name.help-cmds" "$tmp/$name.page-cmds"
        fi
        # zswapctl: the columns of clients its --help lists (the upper-case
        # words before each line's description) are the page's CLIENT COLUMNS
        if grep -q '^Columns of clients' "$tmp/$name.help"; then
                awk '/^Columns of clients/ { on = 1; next } /^[^ ]|^$/ { on = 0 }
                     on { sub(/^ +/, ""); sub(/  .*/, ""); for (i = 1; i <= NF; i++) print $i }' \
                        "$tmp/$name.help" | sort -u >"$tmp/$name.help-cols"
                items "$page" "CLIENT COLUMNS" | awk '{ print $1 }' | sort -u >"$tmp/$name.page-cols"
                same_set "$page: column" "$tmp/$name.help-cols" "$tmp/$name.page-cols"
        fi
}

# conf_keys: "section key" for every key of the page's OPTIONS, by the
# [section] subsection it is under (rendered at an indent of 3)
conf_page_keys() {
        section zswapd.conf.5 OPTIONS | awk '
                /^   \[[a-z:A-Z]+\]$/ { s = $1; gsub(/[][]/, "", s); sub(/:.*/, "", s); next }
                /^       [a-z_]+ =/ { print s, $1 }' | sort -u
}

check_conf() {
        local page=zswapd.conf.5 f keys=$tmp/conf-truth s k
        [ -f "$tmp/$page.txt" ] || return
        conf_page_keys >"$tmp/conf-page"
        [ -s "$tmp/conf-page" ] || { fail "$page: no keys found in OPTIONS"; return; }
        : >"$keys"
        # the run-time tunables: [reclaim]; pool_max, pool_accept, pool_compact, recompress_* and dedup [pool]
        f=$SOURCE_ROOT/common/tunable-keys.c
        [ -f "$f" ] || fail "$f is missing"
        for k in $(sed -nE 's/^[[:space:]]*\[TUNABLE_[A-Z_]+\] = "([a-z_]+)",.*/\1/p' "$f"); do
                case $k in
                pool_max|pool_accept|pool_compact|recompress_*|dedup) echo "pool $k" ;;
                *) echo "reclaim $k" ;;
                esac
        done >>"$keys"
        [ -s "$keys" ] || fail "no keys parsed from $f"
        # the default configuration installed as /etc/zswapd/zswapd.conf
        f=$SOURCE_ROOT/systemd/zswapd.conf
        [ -f "$f" ] || fail "$f is missing"
        awk '/^\[[a-z:A-Z]+\]/ { s = $0; gsub(/[][]/, "", s); sub(/:.*/, "", s); next }
             /^[#;]?[a-z_]+ *=/ { k = $0; sub(/^[#;]/, "", k); sub(/ *=.*/, "", k); print s, k }' "$f" >>"$keys"
        # every section of that file is a subsection of the page
        for s in $(sed -nE 's/^\[([a-z]+)(:[A-Za-z]+)?\].*/\1\2/p' "$f" | sort -u); do
                section "$page" OPTIONS | grep -qE "^   \[${s%%:*}(:[A-Z]+)?\]$" || fail "$page: no [$s] subsection"
        done
        # the daemon's table of every setting (daemon/conf/config.c,
        # config_settings[]): one row per key, '{ "section", "key", ...';
        # the command-line-only rows (section NULL) are zswapd(8)'s
        f=$SOURCE_ROOT/daemon/conf/config.c
        if [ -f "$f" ]; then
                sed -nE 's/^[[:space:]]*\{ "([a-z]+)", "([a-z_]+)",.*/\1 \2/p' "$f" >>"$keys"
                grep -q '^daemon ' "$keys" || fail "no [daemon] keys parsed from $f"
                grep -q '^users ' "$keys" || fail "no [users] keys parsed from $f"
                grep -q '^tier ' "$keys" || fail "no [tier] keys parsed from $f"
        fi
        sort -u -o "$keys" "$keys"
        # [reclaim] may also hold the pool keys; the page lists them under [pool]
        same_set "$page: key" "$keys" "$tmp/conf-page"
}

check_lib() {
        local page=libzswap.3 h=$SOURCE_ROOT/include/zswap.h
        [ -f "$tmp/$page.txt" ] || return
        [ -f "$h" ] || { fail "$h is missing"; return; }
        sed -nE 's/^[a-z].*[ *](zswap_[a-z_]+)\(.*/\1/p' "$h" | sort -u >"$tmp/lib-truth"
        [ -s "$tmp/lib-truth" ] || fail "no functions parsed from $h"
        grep -oE '\bzswap_[a-z_]+\(' "$tmp/$page.txt" | tr -d '(' | sort -u >"$tmp/lib-page"
        same_set "$page: function" "$tmp/lib-truth" "$tmp/lib-page"
        for f in $(cat "$tmp/lib-truth"); do
                section "$page" SYNOPSIS | grep -q "[ *]$f(" || fail "$page: $f is not in SYNOPSIS"
                section "$page" NAME | grep -qw "$f" || fail "$page: $f is not in NAME"
                section "$page" DESCRIPTION | grep -qx "   $f()" || fail "$page: DESCRIPTION has no $f() subsection"
                if ! grep -qE "^void $f\(" "$h"; then
                        section "$page" ERRORS | grep -qx "       $f()" || fail "$page: ERRORS has no item for $f()"
                fi
        done
        # every counter of struct zswap_stats, every constant
        for f in $(awk '/^struct zswap_stats \{/ { on = 1; next } on && /^\};/ { on = 0 }
                        on { for (i = 1; i <= NF; i++) if ($i ~ /^[a-z_]+;$/) { sub(/;/, "", $i); print $i } }' "$h") \
                 $(grep -oE '\bZSWAP_[A-Z_]+\b' "$h" | sort -u); do
                grep -qw -- "$f" "$tmp/$page.txt" || fail "$page: $f (include/zswap.h) is not mentioned"
        done
}

for page in $MAN_PAGES; do
        check_common "$page"
done
check_program zswapd.8 "$ZSWAPD"
check_program zswapctl.8 "$ZSWAPCTL"
check_program zswap-run.1 "$ZSWAP_RUN"
check_conf
check_lib
# every Prometheus metric zswapctl(8) names is one zswapctl prints
if [ -f "$tmp/zswapctl.8.txt" ]; then
        for m in $(grep -oE '\bzswapd_[a-z0-9_]+' "$tmp/zswapctl.8.txt" | sort -u); do
                grep -q "\"${m}[{\" ]" "$SOURCE_ROOT"/client/tools/zswapctl*.c ||
                        fail "zswapctl.8: metric $m is not in client/tools/zswapctl*.c"
        done
fi
# zswapd(8) on the units: every unit setting it quotes with a value
# (WatchdogSec=30s) is the unit's, and the capabilities it explains in
# SECURITY are exactly the service's CapabilityBoundingSet=
check_units() {
        local page=zswapd.8 units kv k v
        units=$(ls "$SOURCE_ROOT"/systemd/zswapd.service* "$SOURCE_ROOT"/systemd/zswapd.socket 2>/dev/null)
        [ -n "$units" ] || { fail "no units in $SOURCE_ROOT/systemd"; return; }
        [ -f "$tmp/$page.txt" ] || return
        # (groff may break a line after a hyphen: join such lines first)
        for kv in $( (section $page SYSTEMD; section $page SECURITY) | sed -e ':a' -e '/-$/{N;s/-\n *\([a-z]\)/-\1/;ta}' |
                     grep -oE '\b[A-Z][A-Za-z]+=[^ ,;)]*[^ ,;).]' | sort -u); do
                k=${kv%%=*}
                v=${kv#*=}
                # keys of the units only (READY=1 is the notify protocol's)
                grep -qE "^$k=" $units || continue
                grep -qE "^$k=(.* )?$v( |$)" $units || fail "$page: says $kv, the units say $(grep -hE "^$k=" $units | tr '\n' ' ')"
        done
        sed -nE 's/^CapabilityBoundingSet=//p' $units | tr ' ' '\n' | grep . | sort -u >"$tmp/caps-unit"
        items $page SECURITY | grep -oE '^ +CAP_[A-Z_]+$' | tr -d ' ' | sort -u >"$tmp/caps-page"
        [ -s "$tmp/caps-unit" ] || fail "no CapabilityBoundingSet= in the units"
        same_set "$page: capability" "$tmp/caps-unit" "$tmp/caps-page"
}
check_units

for s in SIGNALS SYSTEMD SECURITY; do
        grep -qx "$s" "$tmp/zswapd.8.txt" 2>/dev/null || fail "zswapd.8: no $s section"
done

if [ "$failures" -gt 0 ]; then
        echo "$failures check(s) failed"
        exit 1
fi
echo "ok: $MAN_PAGES"
