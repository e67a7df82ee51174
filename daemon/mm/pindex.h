/*
 * pindex.h: the page index of one client address space.
 *
 * One 64-bit atomic entry per page, found through a four-level radix tree
 * keyed by virtual page number (a software page table). Readers never lock;
 * every change of an entry is a compare-and-swap, and whoever swaps a
 * STORED/SAME/LOADING entry out owns what it referred to (see
 * docs/page-lifecycle.md).
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pentry.h"

typedef struct PageIndex PageIndex;

/*
 * What reclaim knows of the pages of one 2 MiB zone (one leaf of the
 * tree, allocated with it: 5.5 KiB per 2 MiB that ever held an entry).
 * Fault threads write stamps, hotness and refault counts with relaxed
 * atomics; the manager reads them and keeps the back-off (docs/reclaim.md).
 */
#define PMETA_PAGES 512
typedef struct PageMeta {
        _Atomic uint32_t stamp[PMETA_PAGES]; /* last use seen (age_stamp()), 0: never */
        _Atomic uint16_t epoch[PMETA_PAGES]; /* the client's eviction epoch when evicted */
        _Atomic uint8_t hot[PMETA_PAGES];    /* CLOCK count: passes of the hand it survives */
        /* fault history (serve.c history_note()): the page that faulted
         * next after this one, as a distance in pages (signed, << 2), and
         * how many times in a row that was seen (the low 2 bits, capped
         * at 3; 0: nothing known). Fault threads, under serve_lock */
        _Atomic uint32_t next[PMETA_PAGES];
        _Atomic uint32_t refaults;           /* refaults in the zone, ever */
        /* manager thread only */
        uint32_t refaults_seen;              /* refaults at the last look */
        uint64_t seen_ms;                    /* when that was */
        uint64_t backoff_until_ms;           /* thrash back-off: not evicted before */
        uint8_t backoff_level;               /* the next back-off is base << level */
        /* write tracking's back-off (reclaim.c write_scan()) */
        uint64_t written[PMETA_PAGES / 64];  /* pages written at the zone's last write scan */
        uint16_t nwritten;                   /* how many */
        uint8_t wp_level;                    /* scans written densely in a row, capped */
        uint8_t wp_skip;                     /* write scans the zone sits out */
        bool wp_out;                         /* sat out scan wp_seen */
        uint32_t wp_seen, wp_judged;         /* the client's write scan that last looked, judged */
} PageMeta;
static inline unsigned pmeta_idx(uint64_t addr) {
        return (unsigned)(addr >> 12) & (PMETA_PAGES - 1);
}

int pindex_new(PageIndex **ret);
/* An index whose leaves' entries live in a client's store (store.h), which
 * must outlive it. */
int pindex_new_store(uint8_t *store, PageIndex **ret);

/* Frees the tree only; the caller releases what entries refer to first. */
PageIndex *pindex_free(PageIndex *pi);

/* The entry of addr; NULL if its leaf does not exist (create = false) or
 * cannot be allocated (create = true). Lock-free. */
_Atomic uint64_t *pindex_entry(PageIndex *pi, uint64_t addr, bool create);

/* The zone's reclaim data of addr; NULL as for pindex_entry(). Lock-free. */
PageMeta *pindex_meta(PageIndex *pi, uint64_t addr, bool create);

/* Call fn for every existing entry in [start, end) whose value is not 0,
 * in address order. fn may change the entry. Returns what fn returned if
 * non-zero (stops), else 0. */
typedef int (*PIndexFn)(void *ud, uint64_t addr, _Atomic uint64_t *e);
int pindex_walk(PageIndex *pi, uint64_t start, uint64_t end, PIndexFn fn, void *ud);

/* Call fn for every zone's reclaim data, in address order (addr: the
 * zone's first page). Returns what fn returned if non-zero, else 0. */
typedef int (*PMetaFn)(void *ud, uint64_t addr, PageMeta *meta);
int pindex_walk_meta(PageIndex *pi, PMetaFn fn, void *ud);

/* Bytes of tree nodes held. */
uint64_t pindex_bytes(PageIndex *pi);
