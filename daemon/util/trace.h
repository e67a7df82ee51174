/*
 * trace.h: a debugging aid. With ZSWAPD_TRACE=PATH in its environment the
 * daemon records what happens to each page (plans, moves, stores, faults
 * read, copies, events) in a ring of the last 4M events, and writes the
 * ring to PATH on SIGUSR2. scripts/trace-page.py prints the history of
 * chosen pages from it; test-torture sends the signal when it reads a bad
 * page. Off (one predictable branch per site) unless the variable is set.
 */
#pragma once
#include <stdint.h>

enum {
        TR_READ = 1, /* a uffd message read: addr, event, flags */
        TR_ZERO,     /* zero fill: addr, write, result */
        TR_SLOT,     /* a staging slot read for a fault: addr, entry, result | word 1 << 32 */
        TR_INSTALL,  /* UFFDIO_COPY of a page: addr, LOADING value, result | word 1 << 32 */
        TR_RA,       /* a page of a fault-around chunk: addr, entry, word 1 */
        TR_PLAN,     /* chosen for eviction: addr, slot, pagemap word */
        TR_MOVED,    /* MOVE_DONE: addr, moved (verified), entry */
        TR_STORE,    /* compressed: addr, new entry, word 1 */
        TR_REMOVE,   /* REMOVE/UNMAP event: start, end, unmap */
        TR_TOMB,     /* tombstone: addr, pagemap word */
        TR_CANCEL,   /* a MOVING entry cancelled by an event: 0, entry */
        TR_RACOPY,   /* a fault-around UFFDIO_COPY: addr, n | copied << 32, mode */
        TR_RALOOK,   /* a message read by fault-around: addr, event, flags */
        TR_HANDBACK, /* a staged page handed back to the fault path: addr, entry, why */
        TR_DROP,     /* an entry seen by a REMOVE/UNMAP walk: addr, entry */
        TR_RETRY,    /* a copy left for retry: addr, LOADING value */
        TR_REMAP,    /* REMAP event: from, to, len */
        TR_ARM,      /* a run of regions registered for missing faults: start, end, result */
        TR_REG,      /* REGISTER: start, end, result (1: armed at once) */
};

extern uint64_t *trace_buf;
void trace_add(unsigned op, uint64_t addr, uint64_t a, uint64_t b);
void trace_init(void);
#define TRACE(op, addr, a, b)                                                   \
        do {                                                                    \
                if (__builtin_expect(trace_buf != NULL, 0))                     \
                        trace_add((op), (addr), (uint64_t)(a), (uint64_t)(b)); \
        } while (0)
