#!/bin/bash
# check-layers.sh: no source file includes a header of a higher layer.
#
# The layer order is the list in docs/design.md under "## Layers", in the
# fenced block that follows the line "<!-- layers -->": one layer per
# line, lowest first; folders on one line are peers, which may not include
# each other. A file may include headers of its own folder and of folders
# on lower lines, nothing else. Every .c and .h file under common/,
# daemon/, client/ and include/ must sit in a listed folder, and every
# header named in a quoted #include must be found in one.
#
#   check-layers.sh ROOT            check; exit 1 and name every violation
#   check-layers.sh --graph ROOT    print the include graph between folders
#                                   ("from -> to  count"), then check
#   check-layers.sh --self-test     show that a fixture tree with an upward
#                                   include fails and a clean one passes
set -u

graph=0
if [ "${1:-}" = "--graph" ]; then
        graph=1
        shift
fi

self_test() {
        t=$(mktemp -d) || exit 1
        trap 'rm -rf "$t"' EXIT
        mkdir -p "$t/docs" "$t/common" "$t/daemon/low" "$t/daemon/high" "$t/client"
        printf '# x\n\n## Layers\n\n<!-- layers -->\n```\ncommon\ndaemon/low\ndaemon/high client\n```\n' >"$t/docs/design.md"
        printf '#pragma once\n' >"$t/common/c.h"
        printf '#include "c.h"\n' >"$t/daemon/low/low.h"
        printf '#include "low.h"\n#include "c.h"\n' >"$t/daemon/high/high.h"
        printf '#include "c.h"\n' >"$t/client/cl.c"
        "$0" "$t" >/dev/null || { echo "self-test: a clean tree fails"; return 1; }
        printf '#include "high.h"\n' >>"$t/daemon/low/low.h"
        "$0" "$t" >/dev/null && { echo "self-test: an upward include passes"; return 1; }
        sed -i '$d' "$t/daemon/low/low.h"
        printf '#include "high.h"\n' >>"$t/client/cl.c"
        "$0" "$t" >/dev/null && { echo "self-test: an include between peers passes"; return 1; }
        sed -i '$d' "$t/client/cl.c"
        printf '#include "nowhere.h"\n' >>"$t/client/cl.c"
        "$0" "$t" >/dev/null && { echo "self-test: an unknown header passes"; return 1; }
        sed -i '$d' "$t/client/cl.c"
        printf 'int x;\n' >"$t/daemon/stray.c"
        "$0" "$t" >/dev/null && { echo "self-test: a file outside every layer passes"; return 1; }
        echo "self-test: ok"
        return 0
}

if [ "${1:-}" = "--self-test" ]; then
        self_test
        exit $?
fi

root=${1:?usage: check-layers.sh [--graph] ROOT | --self-test}
cd "$root" || exit 1

layers=$(awk '/^## Layers/ { s = 1 } s && /^<!-- layers -->/ { b = 1; next }
              b && /^```/ { if (f) exit; f = 1; next } b && f { print }' docs/design.md)
if [ -z "$layers" ]; then
        echo "docs/design.md: no layer list (## Layers, <!-- layers -->, a fenced block)"
        exit 1
fi

# folder -> "rank line"; header basename -> folder
declare -A rank peers where
n=0
while read -r line; do
        [ -z "$line" ] && continue
        for d in $line; do
                [ -d "$d" ] || { echo "docs/design.md: layer folder $d does not exist"; exit 1; }
                rank[$d]=$n
                peers[$d]="$line"
        done
        n=$((n + 1))
done <<<"$layers"

bad=0
for d in "${!rank[@]}"; do
        for h in "$d"/*.h; do
                [ -e "$h" ] || continue
                b=${h##*/}
                if [ -n "${where[$b]:-}" ]; then
                        echo "$h: a header of this name is also in ${where[$b]}"
                        bad=1
                fi
                where[$b]=$d
        done
done

# every source file is in a layer
while read -r f; do
        d=${f%/*}
        if [ -z "${rank[$d]:-}" ]; then
                echo "$f: in no layer of docs/design.md"
                bad=1
        fi
done < <(find common corpus daemon client include -name '*.[ch]' 2>/dev/null | sort)

declare -A edges
for d in "${!rank[@]}"; do
        for f in "$d"/*.[ch]; do
                [ -e "$f" ] || continue
                while read -r inc; do
                        b=${inc##*/}
                        to=${where[$b]:-}
                        if [ -z "$to" ]; then
                                echo "$f: includes \"$inc\", which no layer holds"
                                bad=1
                                continue
                        fi
                        [ "$to" = "$d" ] && continue
                        edges["$d -> $to"]=$((${edges["$d -> $to"]:-0} + 1))
                        if [ "${rank[$to]}" -gt "${rank[$d]}" ]; then
                                echo "$f: includes $to/$b, a higher layer"
                                bad=1
                        elif [ "${rank[$to]}" -eq "${rank[$d]}" ]; then
                                echo "$f: includes $to/$b, a peer layer"
                                bad=1
                        fi
                done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
        done
done

if [ "$graph" = 1 ]; then
        for e in "${!edges[@]}"; do
                printf '%-40s %s\n' "$e" "${edges[$e]}"
        done | sort
fi
if [ "$bad" != 0 ]; then
        echo "layer order broken (docs/design.md, ## Layers)"
        exit 1
fi
echo "layers: ${n} levels, every include goes down"
