/*
 * evict.h: eviction — planning batches, the agent's moves, compression
 * workers, staging lanes. Everything here runs on the manager thread except
 * the workers.
 */
#pragma once

#include "core.h"
#include "mmclient.h"
#include "protocol.h"

/* One request that became ops on several address spaces (PAGEOUT_PID):
 * answered when the last of them finishes. */
typedef struct PageoutGroup {
        Conn *conn;       /* NULL once the requester is gone */
        uint32_t id;
        unsigned ops;     /* ops not finished */
        uint64_t evicted;
} PageoutGroup;

struct PageoutOp {
        PageoutOp *next;
        PageoutGroup *group; /* or NULL: answered through conn */
        Conn *conn;       /* NULL once the requester is gone */
        uint32_t id;      /* request id to reply to; 0: internal */
        bool unregister;  /* an UNREGISTER waiting for the lanes to settle */
        /* every page of the range back (FW_RESTORE) once the lanes settle:
         * an UNREGISTER, or a PAGEIN (the range stays registered) */
        bool restore;
        bool posted;      /* its restore was handed to the fault thread */
        /* an UNREGISTER's pages are back; its range is being unregistered
         * (a job, mmjob.h): it ends when that is back */
        bool restored, unregistering;
        uint64_t start, end, cursor;
        uint64_t evicted;
        unsigned inflight; /* lanes working for this op */
        /* a policy eviction (reclaim.c): only pages the policy finds cold */
        bool reclaim;
        bool wrapped;      /* the sweep went past the top and started again at 0 */
        uint64_t want;     /* pages to take by the clock (limit, pressure), 0: none */
        uint32_t idle_before; /* also every page last used before this stamp, 0: off */
        bool spare_thrash; /* skip zones in thrash back-off (not for limits) */
        /* what the plan knows of the client's page tables: the pagemap
         * words of [pm_start, pm_end), read at pm_ns by a job (mmjob.h:
         * the read takes the client's mmap lock, which the client can
         * hold); the plan waits while pm_reading */
        uint64_t *pm, pm_start, pm_end, pm_ns;
        bool pm_reading, pm_failed;
};

/* Queue a policy eviction of mm (reclaim.c fills in the policy fields
 * of the op returned, which stays mm->rc.op until it finishes). */
PageoutOp *evict_queue_reclaim(Core *core, MMClient *mm);
/* Release what a lane's kept copies hold (the batch will not use them). */
void evict_lane_drop_keeps(MMClient *mm, Lane *lane);

int evictor_new(Core *core, unsigned workers, Evictor **ret);
Evictor *evictor_free(Evictor *ev);

/* Requests (pageouts, pageins) one client may have waiting at once: its
 * program's threads each wait for their own (client/lib/request.c), and
 * each one queued is the manager's memory for as long as it waits (for an
 * agent that never answers a MOVE, as long as the connection lives). An
 * UNREGISTER is not counted: each takes a registered range away. */
#define EVICT_OPS_MAX 256

/* Queue a pageout (or an unregister restore) of [start, end) for mm;
 * -EBUSY: mm has EVICT_OPS_MAX requests waiting already. */
int evict_queue(Core *core, MMClient *mm, Conn *c, uint32_t id, uint64_t start, uint64_t end, bool unregister);
/* The same as one op of group g (which counts it). */
int evict_queue_group(Core *core, MMClient *mm, PageoutGroup *g, uint64_t start, uint64_t end);
/* Every page of [start, end) that mm's pool or tier holds back in the
 * process, once nothing of mm is in flight; the range stays registered.
 * One op of group g, which counts the pages held before. */
int evict_queue_pagein(Core *core, MMClient *mm, PageoutGroup *g, uint64_t start, uint64_t end);
/* Answer for an op and free it (also one that will not finish: its
 * address space is gone). */
void evict_op_drop(Core *core, PageoutOp *op);
/* One op of g is done, having evicted that many pages; the last answers. */
void evict_group_done(Core *core, PageoutGroup *g, uint64_t evicted);
/* Start whatever batches can start. */
void evict_pump(Core *core, MMClient *mm);
/* The agent's answers. -EPROTO if they do not fit what we asked. */
int evict_move_done(Core *core, MMClient *mm, uint32_t lane, const ZMsgMoveDone *msg);
int evict_release_done(Core *core, MMClient *mm, uint32_t lane);
/* Completions from workers and fault threads (manager inbox). */
void evict_batch_done(Core *core, Work *w);
void evict_restore_done(Core *core, Work *w);
/* A job of eviction's back (mmjob.h, MW_JOB_ARM or MW_JOB_UNREGISTER):
 * what it was for goes on; w is freed. */
void evict_job_done(Core *core, Work *w);
/* Periodic: lanes waiting for fault-path readers, fork pause timeouts. */
void evict_tick(Core *core, MMClient *mm);
/* No batch is moving or compressing. */
bool evict_settled(MMClient *mm);
/* Settled, and no page a worker handed back waits for its fault thread:
 * the thread has nothing of mm's eviction left to catch up with. */
bool evict_quiet(MMClient *mm);
/* Pages in mm's lanes whose MOVE is not checked yet: still in its memory,
 * or on their way out. */
uint64_t evict_moving_pages(const MMClient *mm);
/* The requester of ops is gone: forget it. */
void evict_forget_conn(MMClient *mm, Conn *c);
/* The agent is gone: lanes stop waiting for it. */
void evict_agent_gone(Core *core, MMClient *mm);
