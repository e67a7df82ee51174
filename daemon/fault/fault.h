/*
 * fault.h: the threads that serve page faults and uffd events.
 */
#pragma once

#include "inbox.h"
#include "latency.h"
#include "mmclient.h"

typedef struct FaultThread FaultThread;

enum {
        FW_REMOVE = 1, /* stop watching mm's uffd, drop the reference (sent to every thread) */
        FW_INSTALL,    /* put back the staged page at a (entry value v): incompressible or no pool room */
        FW_RESTORE,    /* install every held page of [a, b), then tell the manager (id) */
        FW_ADOPT,      /* start watching mm's uffd (sent to every thread) */
        FW_SYNC,       /* bounce back to the manager once every event read so far is handled */
        FW_KICK,       /* read mm's uffd: a kick was left while a non-fault thread held serve_lock */
        FW_SYNC_SWAP,  /* a forked child's own sync page (mapped at v, memfd a) replaces its parent's */
        FW_REFILL,     /* bring back up to lane held pages of mm used at stamp id or later, then tell the manager */
        FW_STEAL,      /* take and run the work of fault thread v, held in a call into a client (fault_thread_steal()) */
};

int fault_thread_new(Core *core, unsigned idx, FaultThread **ret);
/* Stop the thread (joins it). Stop every thread before freeing any: a
 * thread may post to the others (a forked child to watch). */
void fault_thread_stop(FaultThread *ft);
/* Stops the thread, drops every client it holds. */
FaultThread *fault_thread_free(FaultThread *ft);

/* Every fault thread starts (FW_ADOPT) or stops (FW_REMOVE) watching mm's
 * uffd; mm->ft must be set. Any thread may call them. */
int fault_watch(Core *core, MMClient *mm);
void fault_unwatch(Core *core, MMClient *mm);
int fault_post_mm(FaultThread *ft, int type, MMClient *mm);
/* Manager thread: an FW_SYNC of request type (its id, and a and b for the
 * answer) to mm's fault thread, counted in mm->syncs_pending until the
 * manager's sync_done() hears it back; serial names the connection that
 * asked. -ENOMEM, or 0. */
int fault_sync_post(MMClient *mm, int type, uint32_t id, uint64_t serial, uint64_t a, uint64_t b);

/* Free the retries still held on mm (its last reference is going). */
void fault_mm_free_retries(MMClient *mm);

/* Manager thread, each tick: how long fault thread ft has been in the
 * same call into a client (a copy into it, or another call that can wait
 * for its mmap lock) as its looks saw it (ns; 0: in none, or in another
 * than at the last look), and that client's uffd. */
uint64_t fault_thread_held(FaultThread *ft, uint64_t now, int *uffd);
/* True the first time it is asked about `what` (FT_HELD_*) of the call
 * fault_thread_held() saw (manager thread): each call is counted once and
 * logged once. */
enum { FT_HELD_COUNTED = 1, FT_HELD_SAID = 2 };
bool fault_thread_first(FaultThread *ft, unsigned what);

/* Manager thread: have thread to take the work handed to thread from,
 * which a call into a client holds (FW_STEAL). False: no memory, the next
 * tick asks again. */
bool fault_thread_steal(FaultThread *to, FaultThread *from);

/* Add the thread's fault latency histogram into s (any thread). */
void fault_thread_latency(const FaultThread *ft, LatencySnapshot *s);

/* Queue work for the thread (any thread). Takes ownership of w. */
void fault_thread_post(FaultThread *ft, Work *w);
Work *work_new(int type, MMClient *mm); /* takes a reference on mm */
void work_free(Work *w);
