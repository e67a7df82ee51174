/*
 * age.c: the fault threads' side of page ageing (age.h).
 */
#include <stdatomic.h>

#include "age.h"
#include "mmclient.h"
#include "pindex.h"

uint64_t age_t0_ms;

void age_note_refault(MMClient *mm, uint64_t addr) {
        PageMeta *meta = pindex_meta(mm->index, addr, false);
        atomic_fetch_add_explicit(&mm->st.refaults, 1, memory_order_relaxed);
        if (!meta)
                return;
        unsigned i = pmeta_idx(addr);
        uint16_t then = atomic_load_explicit(&meta->epoch[i], memory_order_relaxed);
        uint16_t ep = age_epoch(atomic_load_explicit(&mm->st.evictions, memory_order_relaxed));
        uint64_t distance = (uint64_t)(uint16_t)(ep - then) << 6;
        uint64_t resident = atomic_load_explicit(&mm->st.resident_pages, memory_order_relaxed);
        /* evicted less than a resident set ago: an LRU of this size would
         * have kept it, so it is working set */
        atomic_store_explicit(&meta->hot[i], distance <= resident ? 3 : 1, memory_order_relaxed);
        atomic_store_explicit(&meta->stamp[i], age_stamp(), memory_order_relaxed);
        atomic_fetch_add_explicit(&meta->refaults, 1, memory_order_relaxed);
}

void age_note_use(MMClient *mm, uint64_t addr) {
        PageMeta *meta = pindex_meta(mm->index, addr, false);
        if (!meta)
                return;
        atomic_store_explicit(&meta->stamp[pmeta_idx(addr)], age_stamp(), memory_order_relaxed);
        /* brought back ahead of a reader: for thrash protection, a return
         * like a refault */
        atomic_fetch_add_explicit(&meta->refaults, 1, memory_order_relaxed);
}

void age_note_stamp(MMClient *mm, uint64_t addr) {
        PageMeta *meta = pindex_meta(mm->index, addr, false);
        if (meta)
                atomic_store_explicit(&meta->stamp[pmeta_idx(addr)], age_stamp(), memory_order_relaxed);
}
