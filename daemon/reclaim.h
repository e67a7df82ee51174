/*
 * reclaim.h: the daemon's own eviction policies (docs/reclaim.md).
 *
 * Resident limits, idle age, system pressure and the pool bound decide,
 * on the manager's reclaim tick, how many pages each client should give
 * up and which: a clock hand sweeps the client's registered memory and
 * takes pages whose last use it saw (a refault, a write found by
 * PAGEMAP_SCAN, the registration) is oldest, sparing pages that came back
 * soon after their eviction and zones that thrash. Everything here runs
 * on the manager thread, except the stamp and refault helpers that the
 * fault threads call.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pindex.h"
#include "util.h"

typedef struct Manager Manager;
typedef struct MMClient MMClient;

/* Stamps are in units of 64 ms since the daemon started; 0 means never. */
#define RECLAIM_STAMP_MS 64
extern uint64_t reclaim_t0_ms;
static inline uint64_t now_ms(void) {
        return now_ns() / 1000000;
}
static inline uint32_t reclaim_stamp(void) {
        return (uint32_t)((now_ms() - reclaim_t0_ms) / RECLAIM_STAMP_MS) + 1;
}

/* The client's eviction epoch: its evictions / 64, as kept per page. */
static inline uint16_t reclaim_epoch(uint64_t evictions) {
        return (uint16_t)(evictions >> 6);
}

/* Fault threads: a page the daemon held came back (refault) at addr.
 * Stamps it used now and, if it was evicted recently compared with the
 * client's resident size (refault distance), makes it hot. */
void reclaim_note_refault(MMClient *mm, uint64_t addr);
/* Fault threads: a page went in ahead of a reader (fault-around). */
void reclaim_note_use(MMClient *mm, uint64_t addr);

/* Manager: set up (the clock origin, the tunables in force). */
void reclaim_init(Manager *m);
/* Manager: m->tun changed; hand what other threads read to them. */
void reclaim_apply(Manager *m);
/* Manager: a setting changed; run the policies within 50 ms. */
void reclaim_soon(Manager *m);
/* Manager timer: runs the policies every `interval`. */
void reclaim_tick(Manager *m);
/* Manager: count mm's resident managed pages for statistics; unless
 * fresh, a count younger than 100 ms is reused (global statistics must
 * not let anyone make the manager walk every client's page tables in a
 * loop). */
void reclaim_measure(Manager *m, MMClient *mm, bool fresh);
/* One line on the pressure controller and the pool bound. */
int reclaim_status(Manager *m, char *buf, size_t len);
/* Is eviction allowed to add to the pool now (pool bound hysteresis)?
 * Any thread. */
bool reclaim_pool_accepts(Manager *m);
/* Does an object of len bytes fit under the pool bound (pool_max) as the
 * pool is now? No hysteresis: for copies that are not evictions (a fork's
 * copy, an adopted store's objects), which go resident instead when it
 * does not. Any thread. */
bool reclaim_pool_room(Manager *m, uint64_t len);

/* The resident limit in force for mm: its own, else its user's ([users]
 * limit), else the daemon's; 0: none. Manager thread. */
uint64_t reclaim_client_limit(Manager *m, MMClient *mm);
