#!/usr/bin/env python3
"""Print the history of pages from a zswapd trace dump (daemon/trace.h).

    trace-page.py TRACE ADDR [ADDR...]
    trace-page.py --follow TRACE ADDR

ADDR is a page address in hex (0x7f...), or START-END for a range. Events
of those pages (and REMOVE/UNMAP events covering them) are printed in time
order, in microseconds from the first one shown.

--follow: the history of the page that was at ADDR when it was last read
(its last fault), back through every REMAP (mremap) that brought it there:
each address it had, and what happened to it while it was there.
"""
import struct
import sys

NAMES = ['?', 'READ', 'ZERO', 'SLOT', 'INSTALL', 'RA', 'PLAN', 'MOVED', 'STORE', 'REMOVE', 'TOMB',
         'CANCEL', 'RACOPY', 'RALOOK', 'HANDBACK', 'DROP', 'RETRY', 'REMAP', 'ARM', 'REG']
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


def load(path):
    data = open(path, 'rb').read()
    recs = []
    for off in range(8, len(data) - 39, 40):
        ts, opt, addr, a, b = struct.unpack_from('<5Q', data, off)
        if ts:
            recs.append((ts, opt >> 32, opt & 0xffffffff, addr, a, b))
    recs.sort()
    return recs


def show(r, t0):
    ts, tid, op, addr, a, b = r
    name = NAMES[op] if op < len(NAMES) else str(op)
    extra = f' ({STATES[a & 7]})' if op in ENTRY_OPS else f' (was {STATES[b & 7]})' if op == 7 else ''
    print(f'{(ts - t0) / 1e3:12.1f} us  tid {tid:<7} {name:<8} {addr:#x}  a {a:#x}{extra}  b {b:#x}')


def covers(r, page):
    _, _, op, addr, a, b = r
    lo, hi = addr & ~4095, (addr & ~4095) + 4096
    if op == 12:
        hi = lo + (a & 0xffffffff) * 4096
    elif op in (9, 18, 19):
        hi = a
    elif op == 17:
        return addr <= page < addr + b or a <= page < a + b
    return lo <= page < hi


def follow(path, page):
    recs = load(path)
    reads = [r for r in recs if r[2] == 1 and r[3] & ~4095 == page]
    if not reads:
        sys.exit(f'no fault read at {page:#x}')
    segs, t = [], reads[-1][0]
    while True:
        before = [r for r in recs if r[0] < t and r[2] == 17 and r[4] <= page < r[4] + r[5]]
        if not before:
            segs.append((page, 0, t))
            break
        r = before[-1]
        segs.append((page, r[0], t))
        page, t = r[3] + (page - r[4]), r[0]
    t0 = recs[0][0]
    for page, tf, tt in reversed(segs):
        print(f'--- at {page:#x}')
        for r in recs:
            if tf <= r[0] <= tt and covers(r, page):
                show(r, t0)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == '--follow':
        follow(sys.argv[2], int(sys.argv[3], 16) & ~4095)
        return
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
        elif op in (18, 19):  # ARM, REG cover [addr, a)
            hi = a
        elif op == 17:  # REMAP covers [addr, addr + b) and [a, a + b)
            hi = addr + b
            if any(a < rh and a + b > rl for rl, rh in ranges):
                lo, hi = a, a + b
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
