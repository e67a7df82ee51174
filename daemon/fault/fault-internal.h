/*
 * fault-internal.h: what the files of the fault threads share; fault.h is
 * what the layers above see. The fault threads are the latency-critical
 * side of the daemon:
 *
 * One fault thread per CPU, pinned there; every thread watches every
 * client uffd (edge-triggered), so a fault wakes the thread on its own CPU
 * first (a wake-up across vCPUs costs ~60 us here). Whoever wakes takes
 * the client's serve_lock with a trylock and reads; the lock is held from
 * a read() until that message is handled, so at any moment one thread is
 * the reader, and every message of that uffd, page faults and the
 * FORK/REMAP/REMOVE/UNMAP events alike, is handled completely, in the
 * order the kernel queued it, and every UFFDIO_COPY or ZEROPAGE into that
 * address space is made under the same lock. That single ordering point is
 * what makes mremap, munmap and MADV_DONTNEED race-free against restores:
 * an event is never processed while a copy for the same address space is
 * half done (docs/page-lifecycle.md). A thread that finds the lock taken
 * leaves a kick for the holder (serve_unlock), so no message is left
 * unread. Each client also has a home thread, which receives its installs,
 * restores and syncs through its inbox. A call into a client can wait for
 * that client's mmap lock, which the client can hold as long as it likes
 * (docs/security.md): once a thread has been in one call for a while
 * (STEAL_AFTER_MS, manager/loop.c), the manager has another thread take
 * the work handed to it and run it (work_steal()), every tick while the
 * call lasts.
 *
 * The fault path (serve()) takes no lock a worker or the manager waits on:
 * entries are claimed with a compare-and-swap (STORED/SAME/MOVING/STAGED ->
 * LOADING), the pool object is then private to this thread, lz4
 * decompression uses no context and zstd a context of this thread's own.
 * Compression workers never hold anything the fault path waits for (the
 * manager only ever trylocks serve_lock). Work from workers and from the
 * manager arrives through a lock-free inbox.
 *
 * A copy that fails with EAGAIN (the kernel is in the middle of an mremap
 * or fork of that address space and has an event queued for us) keeps its
 * page in a retry item of the address space, keeps the entry LOADING, and
 * is retried after the queued messages have been read. A page is claimed
 * only with such an item at hand (retry_ready()); out of memory, nothing
 * is claimed and the faulting thread is woken to fault again.
 *
 * The files: uffd-ops.c (the uffd ioctls, retries), serve.c (the serve
 * path: page faults), events.c (reading the uffd under serve_lock, the
 * event journal, REMOVE/UNMAP/REMAP), fork.c (FORK, a parent held for
 * its child), work.c (FW_* work from other threads), thread.c (the
 * thread loop, its start and stop). No file keeps static data another
 * uses: what they share is in the structs below.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "codec.h"
#include "core.h"
#include "fault.h"
#include "inject.h"
#include "latency.h"
#include "memread.h"
#include "tier.h"
#include "tier-pump.h"
#include "uffd-compat.h"
#include "util.h"

/*
 * Who may touch what. "This thread only": the fault thread that owns the
 * FaultThread, and, before it starts or after it is joined, whoever runs
 * fault_thread_new() or fault_thread_free() (the manager, or main at
 * exit); pthread_create() and pthread_join() order those accesses. "Under
 * serve_lock": the MMClient's, held by the one reader of its uffd at a time
 * (the overview above).
 *
 * Memory orders. Every atomic access is explicit (*_explicit, never the
 * seq_cst of a plain operation on an _Atomic). The recurring ones:
 *  - a page-index entry (pindex.h; docs/page-lifecycle.md): a load is
 *    acquire and pairs with the release store or CAS that published the
 *    value, so the pool object or staging slot it names is complete when
 *    read; a claim (-> LOADING) is a CAS, acquire for the same reason (the
 *    payload is read after it); a store that ends our ownership (installed,
 *    dropped, given back) is release, so our reads of the payload and our
 *    copy come before the next owner sees the value (and frees or reuses
 *    it); a CAS that drops an entry while the value is looked at after is
 *    acq_rel;
 *  - Lane.users, a lane's pin: raised seq_cst where it pairs with the
 *    manager's seq_cst load before it releases the lane (serve_slot()),
 *    dropped release, so our reads of the slot come before the manager
 *    may release and reuse it;
 *  - counters (MMClientStats, the Core's, fork_bytes): relaxed, nothing
 *    is ordered by them (mmclient.h, core.h);
 *  - the MMClient atomics (has_retries, read_deferred, fork_unread,
 *    slot_reads, tier_reads, revoke_reads, kick, fork_hold ...): the order
 *    each needs, and why, is said where it is declared (mmclient.h), and
 *    at an access that differs.
 */

#define RA_CHUNK 8  /* pages decoded and copied in one UFFDIO_COPY by fault-around */
#define RETRY_RESERVE 64

#define SLOT_READS_DEPTH 256  /* slot reads one thread has in flight */
#define SLOT_READS_CLIENT 32  /* of those, for one client */

#define READ_RECHECK_NS 50000 /* how soon a read put off for a move looks again */

/* A retry's page: there (READY), or being read from its staging slot by
 * the thread that made it (READING), or given up by an event while that
 * read was in flight (CANCELLED: the read's completion frees it). */
enum { RS_READY, RS_READING, RS_CANCELLED };

/* What a read of a thread's queue is for (MemReadOp.tag) */
enum { READ_SLOT, READ_REVOKE };

/*
 * A page held for a copy still to make: on its client's list (mm->retries,
 * under that client's serve_lock: whoever holds it adds, walks, frees), or
 * spare on a thread's reserve (FaultThread.reserve, this thread only). The
 * fields are written by the thread that makes it, under serve_lock, and
 * afterwards by the lock's holder, but for those a read in flight
 * writes (op, tj, page, and pin and pin_mm of a fork's copy): the thread
 * whose queue or pump completes the read writes them before its exchange
 * of state (acq_rel), and the holder reads them only after an acquire load
 * of state that saw READY.
 */
typedef struct Retry {
        struct Retry *next; /* the list's: under serve_lock, or the reserve's (this thread only) */
        bool reserved;     /* from a thread's reserve, not malloc; set when made, constant */
        uint64_t addr;     /* under serve_lock: an mremap moves it (remap_cb()) */
        uint64_t loading;  /* the LOADING value this thread put in the entry; 0: a zero fill */
        uint64_t t0;       /* when the fault it serves was read (fault_t0), 0: none */
        /* the staging lane whose slot the page came from (serve_slot()),
         * kept from release until the page is in: the retry holds it only
         * in this process, and a daemon that dies meanwhile leaves it to
         * the next one through the slot (adopt.c) */
        Lane *pin;
        /* a read of the slot nobody waits for (slot_read_async()): the
         * retry is made at once, READING, and becomes READY when the read
         * is back. The thread that completes the read only swaps state;
         * the list it is on belongs to whoever holds serve_lock. Written
         * by exchange, acq_rel, by both sides: the completion's release of
         * the page against the holder's acquire, and the holder's
         * CANCELLED against the completion that then frees (retry_free(),
         * slot_read_done()); whoever comes second frees */
        _Atomic int state;
        bool refault;      /* the program's own fault (reclaim's ageing hears of it); set when made */
        bool keep;         /* the install keeps the copy (a read fault: install()'s keep); set when made */
        MMClient *mm;      /* READING: a reference for the read, dropped when it is back */
        /* a forked child's copy of its parent's slot (fork_copy_async()):
         * pin is the parent's lane, pin_mm a reference to the parent, both
         * given up as soon as the read is back (the page is ours then) */
        MMClient *pin_mm;
        MemReadOp op;      /* READING: the read, into page */
        /* a read of the second tier (tier_read_async()): instead of op,
         * the pump's job, into page; READY with tj.res and tj.win */
        bool tier;
        TierJob tj;
        uint8_t page[ZSWAP_PAGE_SIZE]; /* the read's, then the holder's (state) */
} Retry;

struct FaultThread {
        Core *core;         /* set before the thread starts, constant */
        unsigned idx;       /* set before the thread starts, constant */
        /* written by fault_thread_new() before anything else sees it, read
         * by fault_thread_stop(): both run on the thread that owns the
         * FaultThread (the manager, or main), never on the fault thread */
        pthread_t thread;
        bool started;       /* the same: fault_thread_new() and fault_thread_stop() */
        /* made before the thread starts, closed after it is joined; its
         * interest list changed by this thread only (own/disown) */
        int epfd;
        /* any thread pushes (lock-free, inbox.h), this thread takes */
        Inbox inbox;
        CodecDCtx *dctx;    /* this thread only */
        TierReader *tier;   /* reads from the second tier here and now (a fork's copies), or NULL (tier.h); this thread only */
        /* reads from the second tier for faults, or NULL (tier-pump.h):
         * this thread submits and takes, the pump's own thread reads; a
         * thread that takes this one's work while a call holds it takes
         * too (fault_thread_reap()) */
        TierPump *pump;
        int pump_fd;        /* eventfd: the pump's jobs are back; the pump writes, this thread reads */
        uint64_t tier_warned_ns; /* last "cannot read the second tier" line; this thread only */
        uint64_t lost_since_ns;  /* pages lost on the tier: logged one by one this minute, and not; this thread only */
        unsigned lost_logged, lost_unlogged; /* this thread only */
        Retry *reserve;     /* spare retries for when malloc fails; this thread only */
        uint64_t nomem_warned_ns; /* last "out of memory for a retry" line; this thread only */
        /* slot reads in flight (memread.h), NULL: read and wait; this
         * thread submits, and takes what is back, as does a thread that
         * takes its work while a call holds it (fault_thread_reap()) */
        MemReadQueue *reads;
        void *revoke_buf;   /* where revocations read lanes to, never looked at (revoke_moves()); this thread only */
        /*
         * The work this thread took and has not run: items taken from the
         * inbox and not yet run (pending), FW_RESTORE and FW_REFILL under
         * way (restores), installs and syncs that found serve_lock taken
         * (deferred), each oldest first; and items another thread took
         * from our inbox that only this one can run (mine: FW_ADOPT,
         * FW_REMOVE, the stop's wake-up). Under work_lock, which is held
         * only to move items, never across a call: while a call into a
         * client holds this thread, another takes the lot
         * (fault_thread_steal(), work_steal() in work.c).
         */
        pthread_mutex_t work_lock;
        Work *pending, *restores, *deferred, *mine;
        MMClient **owned;   /* watched in epfd, one reference each; this thread only */
        size_t nowned;      /* entries of owned; this thread only */
        bool retry_due;     /* this thread left retries on some mm; this thread only */
        bool read_soon;     /* a read waits for a move to end: look again in READ_RECHECK_NS; this thread only */
        /* the spin after a fault (thread.c): faults left whose spin is
         * skipped, and how many the next wasted spin skips; this thread only */
        unsigned spin_skip, spin_backoff;
        /* written by the manager, read by the thread. relaxed both sides:
         * fault_thread_stop() pushes an inbox item (or writes the eventfd)
         * after the store, which wakes the thread and orders it; a thread
         * that missed it sees it at its next wake-up */
        _Atomic bool stop;
        /* when the page fault being handled was read (now_ns()), 0: the
         * work at hand is no program's fault; this thread only */
        uint64_t fault_t0;
        uint64_t stash_t0; /* when fault-around read the page fault it left in mm->stash; this thread only */
        bool refill_more;  /* a refill slice got through and more is to come: look for faults, then go on */
        /* the call into a client this thread is in (call_begin(): a
         * UFFDIO_COPY, ZEROPAGE or POISON, or the check for an event under
         * way), by the client's uffd, -1: none; and how many such calls
         * it has ended. Written by this thread, read by the manager's tick
         * (fault_thread_held()): relaxed, values looked at a tick apart */
        _Atomic int call_uffd;
        _Atomic uint64_t calls;
        uint64_t ncalls;       /* this thread only: what calls says */
        /* the manager's only (fault_thread_held()): what its last look
         * saw, since when, and what was done about the call once
         * (FT_HELD_*) */
        int seen_uffd;
        uint64_t seen_calls, seen_since;
        unsigned seen_done;
        /* this thread's buffers, this thread only (zero: zeroed by
         * fault_thread_new()'s calloc, never written) */
        _Alignas(64) uint8_t page[ZSWAP_PAGE_SIZE];
        _Alignas(64) uint8_t zero[ZSWAP_PAGE_SIZE];
        _Alignas(64) uint8_t ra_buf[RA_CHUNK][ZSWAP_PAGE_SIZE];
        /* last: the page buffers keep their place in the struct */
        _Alignas(64) LatencyHist lat; /* read to install, this thread writes, any thread reads (latency.h) */
};

/* One walk of a client's page index for an event (REMOVE, UNMAP, REMAP,
 * FORK): on the stack of the thread handling the event, under the
 * client's serve_lock; nobody else sees it. */
typedef struct RangeCtx {
        FaultThread *ft;
        MMClient *mm;
        MMClient *child;
        int64_t delta;
        uint64_t kill_at; /* remap: the fault injection's kill at the first entry from here (kill_event) */
        int errors;
        int inflight;    /* fork: pages caught in an eviction (MOVING, STAGED) */
        int kept;        /* fork: of those, pages the child could not take now, kept in its pool (fork_keep()) */
        int install_err; /* fork: the first error installing a page in the child */
        int resident;    /* fork: pages installed in the child for want of quota or pool room */
        int over;        /* fork: of those, copied after all: the child could not take them (EAGAIN) */
        struct ForkSnap *snap; /* fork: the pages in flight, read before anything else (fork.c) */
} RangeCtx;

/* A read of a lane to revoke the agent's moves (events.c, revoke_moves()):
 * made by the reader, under serve_lock; completed (or found overdue) by
 * the same thread, whose queue it is on (thread.c, run_reads()). */
typedef struct RevokeRead {
        MMClient *mm; /* a reference until the read is back */
        MemReadOp op; /* the read queue's while in flight (memread.h) */
} RevokeRead;

/* ---- uffd-ops.c: the uffd ioctls and retries ---- */
int uffd_copy(int uffd, uint64_t addr, const void *page, uint64_t mode);
int uffd_zeropage(int uffd, uint64_t addr);
void uffd_wake(int uffd, uint64_t addr);
void uffd_poison(MMClient *mm, uint64_t addr);
void retry_unpin(Lane *pin);
bool retry_ready(FaultThread *ft);
void retry_none(FaultThread *ft, MMClient *mm, uint64_t addr);
void retry_add(FaultThread *ft, MMClient *mm, uint64_t addr, uint64_t loading, const void *page, bool keep,
               bool refault);
Retry **retry_find(MMClient *mm, uint64_t addr);
bool retry_keep_pin(MMClient *mm, uint64_t addr, uint64_t loading, Lane *pin);
void retry_drop(FaultThread *ft, Retry **p);
void run_retries(FaultThread *ft, MMClient *mm);

/* ---- serve.c: the serve path ---- */
void install(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t loading,
             const void *page, uint64_t final, bool keep, bool refault);
int tier_stub(MMClient *mm, uint64_t origin, TierStub *s);
int decode(FaultThread *ft, MMClient *mm, uint64_t origin, uint8_t *dst);
int serve_slot(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t v, uint64_t final,
                bool refault);
Retry *slot_read_submit(FaultThread *ft, MMClient *mm, MMClient *src, uint64_t addr, uint64_t loading,
                        uint32_t slot, Lane *lane, bool refault);
bool read_submit(FaultThread *ft, MMClient *src, MemReadOp *op, uint64_t off, void *buf, size_t len, int tag);
void slot_read_done(FaultThread *ft, MemReadOp *op);
void tier_failed(FaultThread *ft, MMClient *mm, uint64_t addr, _Atomic uint64_t *e, uint64_t v,
                 uint64_t loading, int r);
void tier_around(FaultThread *ft, MMClient *mm, uint64_t addr, const TierWindow *w);
void tier_read_done(FaultThread *ft, TierJob *j);
bool serve(FaultThread *ft, MMClient *mm, uint64_t addr, bool write, bool around);
unsigned refill_run(FaultThread *ft, MMClient *mm, uint64_t a, unsigned max, uint32_t since, unsigned *got);

/* ---- events.c: reading the uffd, the events ---- */
ssize_t uffd_read_msg(MMClient *mm, struct uffd_msg *msg);
void revoke_read_done(FaultThread *ft, MemReadOp *op);
void drain_uffd(FaultThread *ft, MMClient *mm);
void service(FaultThread *ft, MMClient *mm);
void serve_unlock(FaultThread *ft, MMClient *mm);

/* ---- fork.c: UFFD_EVENT_FORK, a parent held for its child ---- */
void event_fork(FaultThread *ft, MMClient *mm, int child_fd);
bool fork_held(FaultThread *ft, MMClient *mm);

/* ---- work.c: work from other threads ---- */
void work_discard(Work *w);
bool work_waits(FaultThread *ft);
void run_deferred(FaultThread *ft);
void run_inbox(FaultThread *ft);
void run_restores(FaultThread *ft);
void work_list_discard(Work **list);

/* ---- thread.c: the thread ---- */
void fault_thread_own(FaultThread *ft, MMClient *mm);
void fault_thread_disown(FaultThread *ft, MMClient *mm);
size_t fault_thread_reap(FaultThread *ft, FaultThread *x);

/* The fault thread this thread is (fault_thread_main() sets it), NULL on
 * any other thread: the calls below say where it is in a call into a
 * client, which the client's mmap lock can hold (docs/security.md). */
extern __thread FaultThread *fault_self;

#define FORK_DONE_LATE_MS 200 /* the injection's waits around a FORK_DONE's sync (work.c) */
#define CALL_SLOW_MS 150 /* the injection's wait: past the manager's STEAL_AFTER_MS (manager/loop.c) */

static inline void call_begin(int uffd) {
        FaultThread *ft = fault_self;
        if (!ft)
                return;
        atomic_store_explicit(&ft->call_uffd, uffd, memory_order_relaxed);
        if (INJECT(INJ_CALL_SLOW))
                usleep(CALL_SLOW_MS * 1000); /* the manager sees the call last, and has another thread take our work */
}

static inline void call_end(void) {
        FaultThread *ft = fault_self;
        if (ft) {
                atomic_store_explicit(&ft->call_uffd, -1, memory_order_relaxed);
                atomic_store_explicit(&ft->calls, ++ft->ncalls, memory_order_relaxed);
        }
}
