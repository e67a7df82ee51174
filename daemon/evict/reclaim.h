/*
 * reclaim.h: the daemon's own eviction policies (docs/reclaim.md).
 *
 * Resident limits, idle age, system pressure and the pool bound decide,
 * on the manager's reclaim tick, how many pages each client should give
 * up and which: a clock hand sweeps the client's registered memory and
 * takes pages whose last use it saw (a refault, a write found by
 * PAGEMAP_SCAN, the registration) is oldest, sparing pages that came back
 * soon after their eviction and zones that thrash. Everything here runs
 * on the manager thread; the stamps and refault notes the fault threads
 * write are in age.h, the pool-bound checks the workers make in core.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "age.h"
#include "pindex.h"
#include "tunables.h"
#include "util.h"

typedef struct Core Core;
typedef struct MMClient MMClient;

/* The policy's state: the manager embeds one and hands it, at
 * reclaim_init(), the Core and its client list. Manager thread only. */
typedef struct Reclaim {
        Core *core;
        MMClient *const *mms;  /* the manager's client list (its head) */
        Tunables tun;          /* the run-time tunables in force (tunables.h) */
        uint64_t reclaim_last_ms, pressure_last_ms;
        double psi_now;        /* memory stall share (PSI "some") over the last period, percent */
        uint64_t psi_total, psi_total_ms; /* the PSI total (µs) read then, and when */
        uint64_t avail_now;    /* last MemAvailable read, bytes */
        uint64_t hold_target;  /* pages the pressure controller wants held out */
        bool wants_out;        /* it wanted more held than was, at its last period: no refill */
        uint64_t group_tick;   /* ticks that shared out the groups' limits (groups_share()) */
} Reclaim;



/* Manager: set up (the clock origin, the tunables in force). */
void reclaim_init(Reclaim *rc, Core *core, MMClient *const *mms);
/* Manager: m->tun changed; hand what other threads read to them. */
void reclaim_apply(Reclaim *rc);
/* Manager: a setting changed; run the policies within 50 ms. */
void reclaim_soon(Reclaim *rc);
/* Manager timer: runs the policies every `interval`. */
void reclaim_tick(Reclaim *rc);
/* Manager: mm's resident managed pages for statistics are the last count
 * back; one older than 100 ms starts another, for the next look (global
 * statistics must not let anyone make the daemon walk every client's page
 * tables in a loop). The counts are jobs (mmjob.h, MW_JOB_SCAN), never the
 * manager's own page-table walks. */
void reclaim_measure(Reclaim *rc, MMClient *mm);
/* Counts of one client on their way at most: a client asking for its own
 * statistics in a loop gets the last count past them. */
#define RECLAIM_SCANS_MAX 4
/* Manager: a count of mm as of now, for the STATS request id of the
 * connection with this serial, which waits for it: true if one started;
 * once back (reclaim_scan_done(), w->v and w->id) the request is answered.
 * False: answer with the last count (a call of ours waits for the mmap
 * lock of one of its user's clients, RECLAIM_SCANS_MAX are on their way,
 * no memory). */
bool reclaim_measure_for(Reclaim *rc, MMClient *mm, uint64_t serial, uint32_t id);
/* Manager: a count is back (MW_JOB_SCAN, from the inbox): what it found
 * becomes mm's. The caller answers the request it was for, if any (w->v:
 * the connection's serial; w->id: the request's). */
void reclaim_scan_done(Reclaim *rc, Work *w);
/* Manager: a fault thread ended mm's refill (MW_REFILL_DONE); takes w. */
void reclaim_refill_done(Reclaim *rc, Work *w);
/* Manager: the members of mm's group (same user, same name) and their
 * managed resident, unmanaged and share in bytes, for `zswapctl get
 * --pid PID group`; false if mm is in none. */
bool reclaim_group_of(Reclaim *rc, MMClient *mm, unsigned *members, uint64_t *resident, uint64_t *unmanaged,
                      uint64_t *limit);
/* One line on the pressure controller and the pool bound. */
int reclaim_status(Reclaim *rc, char *buf, size_t len);

/* The resident limit in force for mm: its own, else its user's ([users]
 * limit), else the daemon's; 0: none. Manager thread. */
uint64_t reclaim_client_limit(Reclaim *rc, MMClient *mm);
