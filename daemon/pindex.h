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

typedef struct PageIndex PageIndex;

/* Entry states (low 3 bits). */
enum {
        PE_EMPTY = 0,   /* the daemon holds nothing: page resident or zero */
        PE_MOVING = 1,  /* chosen for eviction; the agent may be moving it to slot */
        PE_STAGED = 2,  /* moved out to staging slot, not compressed yet */
        PE_STORED = 3,  /* compressed: pool handle + length */
        PE_SAME = 4,    /* same-filled page: 32-bit fill value */
        PE_LOADING = 5, /* STORED/SAME payload owned by a thread that is installing it */
        PE_REMOVED = 6, /* MADV_DONTNEED seen while the page was still mapped: that
                         * frame is about to be zapped and must not be moved out;
                         * the next fault on the page clears it */
        PE_CLEAN = 7,   /* resident, restored by a read and not written since (as
                         * far as the daemon knows): the STORED/SAME payload it
                         * came from is kept, so evicting it again costs no
                         * compression. Bit 4 set: the payload is SAME's */
};
static inline uint64_t pe_make_removed(void) { return PE_REMOVED; }
#define PE_FLAG_INCOMPRESSIBLE ((uint64_t)1 << 3) /* on EMPTY: last eviction found it incompressible */

#define PINDEX_MAX_ADDR ((uint64_t)1 << 48)

static inline unsigned pe_state(uint64_t e) { return (unsigned)(e & 7); }
static inline uint64_t pe_make_stored(uint32_t handle, uint32_t clen) {
        return PE_STORED | (uint64_t)(clen & 0x1fff) << 8 | (uint64_t)handle << 32;
}
static inline uint64_t pe_make_same(uint32_t fill) { return PE_SAME | (uint64_t)fill << 32; }
static inline uint64_t pe_make_slot(unsigned state, uint32_t slot) { return state | (uint64_t)slot << 32; }
static inline uint64_t pe_with_state(uint64_t e, unsigned state) { return (e & ~(uint64_t)7) | state; }
static inline uint32_t pe_handle(uint64_t e) { return (uint32_t)(e >> 32); }
static inline uint32_t pe_fill(uint64_t e) { return (uint32_t)(e >> 32); }
/* the staging slot of MOVING and STAGED entries */
static inline uint32_t pe_slot(uint64_t e) { return (uint32_t)(e >> 32); }
static inline uint32_t pe_clen(uint64_t e) { return (uint32_t)(e >> 8) & 0x1fff; }
/* LOADING keeps the payload of the entry it came from; bits 4-6 say which
 * state that was (STORED if none is set). */
#define PE_LOADING_SAME ((uint64_t)1 << 4)
#define PE_LOADING_SLOT ((uint64_t)1 << 5)   /* came from MOVING or STAGED */
#define PE_LOADING_STAGED ((uint64_t)1 << 6) /* with SLOT: it was STAGED */
#define PE_LOADING_BITS (PE_LOADING_SAME | PE_LOADING_SLOT | PE_LOADING_STAGED | PE_FLAG_INCOMPRESSIBLE)
static inline uint64_t pe_make_loading(uint64_t from) {
        switch (pe_state(from)) {
        case PE_SAME:
                return pe_with_state(from, PE_LOADING) | PE_LOADING_SAME;
        case PE_MOVING:
                return pe_with_state(from, PE_LOADING) | PE_LOADING_SLOT;
        case PE_STAGED:
                return pe_with_state(from, PE_LOADING) | PE_LOADING_SLOT | PE_LOADING_STAGED;
        default:
                return pe_with_state(from, PE_LOADING);
        }
}
#define PE_CLEAN_SAME ((uint64_t)1 << 4)
/* CLEAN from the STORED/SAME entry it was restored from, and back */
static inline uint64_t pe_make_clean(uint64_t origin) {
        return pe_with_state(origin, PE_CLEAN) | (pe_state(origin) == PE_SAME ? PE_CLEAN_SAME : 0);
}
static inline uint64_t pe_clean_origin(uint64_t e) {
        return pe_with_state(e & ~PE_CLEAN_SAME, (e & PE_CLEAN_SAME) ? PE_SAME : PE_STORED);
}
static inline uint64_t pe_loading_origin(uint64_t e) {
        unsigned st = (e & PE_LOADING_SAME) ? PE_SAME
                      : (e & PE_LOADING_SLOT) ? ((e & PE_LOADING_STAGED) ? PE_STAGED : PE_MOVING)
                                              : PE_STORED;
        return pe_with_state(e & ~PE_LOADING_BITS, st);
}

/*
 * What reclaim knows of the pages of one 2 MiB zone (one leaf of the
 * tree, allocated with it: 3.5 KiB per 2 MiB that ever held an entry).
 * Fault threads write stamps, hotness and refault counts with relaxed
 * atomics; the manager reads them and keeps the back-off (docs/reclaim.md).
 */
#define PMETA_PAGES 512
typedef struct PageMeta {
        _Atomic uint32_t stamp[PMETA_PAGES]; /* last use seen (reclaim_stamp()), 0: never */
        _Atomic uint16_t epoch[PMETA_PAGES]; /* the client's eviction epoch when evicted */
        _Atomic uint8_t hot[PMETA_PAGES];    /* CLOCK count: passes of the hand it survives */
        _Atomic uint32_t refaults;           /* refaults in the zone, ever */
        /* manager thread only */
        uint32_t refaults_seen;              /* refaults at the last look */
        uint64_t seen_ms;                    /* when that was */
        uint64_t backoff_until_ms;           /* thrash back-off: not evicted before */
        uint8_t backoff_level;               /* the next back-off is base << level */
} PageMeta;
static inline unsigned pmeta_idx(uint64_t addr) {
        return (unsigned)(addr >> 12) & (PMETA_PAGES - 1);
}

int pindex_new(PageIndex **ret);
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
