/*
 * age.h: how recently each page of a client was used.
 *
 * Every page the daemon knows has a use stamp, a hot count and the
 * eviction epoch it left in (pindex.h's PageMeta). The fault threads
 * stamp the pages they bring back (age_note_refault(), age_note_use());
 * the reclaim policy (reclaim.c) stamps the pages it finds written and
 * reads the stamps to choose what to evict.
 */
#pragma once

#include <stdint.h>

#include "util.h"

typedef struct MMClient MMClient;

/* Stamps are in units of 64 ms since the daemon started; 0 means never. */
#define AGE_STAMP_MS 64
extern uint64_t age_t0_ms;
static inline uint32_t age_stamp(void) {
        return (uint32_t)((now_ms() - age_t0_ms) / AGE_STAMP_MS) + 1;
}

/* The client's eviction epoch: its evictions / 64, as kept per page. */
static inline uint16_t age_epoch(uint64_t evictions) {
        return (uint16_t)(evictions >> 6);
}

/* Fault threads: a page the daemon held came back (refault) at addr.
 * Stamps it used now and, if it was evicted recently compared with the
 * client's resident size (refault distance), makes it hot. */
void age_note_refault(MMClient *mm, uint64_t addr);
/* Fault threads: a page was brought back ahead of any use (a refill):
 * stamped used now, no hot count, not a return for thrash protection. */
void age_note_stamp(MMClient *mm, uint64_t addr);
/* Fault threads: a page went in ahead of a reader (fault-around). */
void age_note_use(MMClient *mm, uint64_t addr);
