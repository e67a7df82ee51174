#!/usr/bin/env python3
"""Print the history of pages from a zswapd trace dump (daemon/trace.h).

    trace-page.py TRACE ADDR [ADDR...]

ADDR is a page address in hex (0x7f...), or START-END for a range. Events
of those pages (and REMOVE/UNMAP events covering them) are printed in time
order, in microseconds from the first one shown.
"""
import struct
import sys

NAMES = ['?', 'READ', 'ZERO', 'SLOT', 'INSTALL', 'RA', 'PLAN', 'MOVED', 'STORE', 'REMOVE', 'TOMB',
         'CANCEL', 'RACOPY', 'RALOOK', 'HANDBACK', 'DROP', 'RETRY']
STATES = ['EMPTY', 'MOVING', 'STAGED', 'STORED', 'SAME', 'LOADING', 'REMOVED', '?']
ENTRY_OPS = {3, 5, 8, 11, 14, 15}  # ops whose 'a' is an index entry (MOVED: 'b')


def parse_ranges(args):
    out = []
    for a in args:
        if '-' in a:
            lo, hi = a.split('-')
            out.append((int(lo, 16) & ~4095, int(hi, 16)))
        else:
            p = int(a, 16) & ~4095
            out.append((p, p + 4096))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ranges = parse_ranges(sys.argv[2:])
    data = open(sys.argv[1], 'rb').read()
    recs = []
    for off in range(8, len(data) - 39, 40):
        ts, opt, addr, a, b = struct.unpack_from('<5Q', data, off)
        if ts == 0:
            continue
        op, tid = opt & 0xffffffff, opt >> 32
        lo, hi = addr & ~4095, (addr & ~4095) + 4096
        if op == 12:  # RACOPY covers n pages
            hi = lo + (a & 0xffffffff) * 4096
        elif op == 9:  # REMOVE covers [addr, a)
            hi = a
        if any(lo < rh and hi > rl for rl, rh in ranges):
            recs.append((ts, tid, op, addr, a, b))
    recs.sort()
    if not recs:
        print('no events for those pages')
        return
    t0 = recs[0][0]
    for ts, tid, op, addr, a, b in recs:
        name = NAMES[op] if op < len(NAMES) else str(op)
        extra = f' ({STATES[a & 7]})' if op in ENTRY_OPS else f' (was {STATES[b & 7]})' if op == 7 else ''
        print(f'{(ts - t0) / 1e3:12.1f} us  tid {tid:<7} {name:<8} {addr:#x}  a {a:#x}{extra}  b {b:#x}')


if __name__ == '__main__':
    main()
