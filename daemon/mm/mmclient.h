/*
 * mmclient.h: what the daemon knows about one client address space (mm).
 *
 * A connected process has one MMClient; a child forked by it gets another
 * one from the UFFD_EVENT_FORK message. See mmclient.c for ownership.
 */
#pragma once

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "dedup.h"
#include "inject.h"
#include "macro.h"
#include "pindex.h"
#include "pool.h"
#include "store.h"
#include "uffd-compat.h"
#include "protocol.h"
#include "tier.h"
#include "zsync.h"

typedef struct Core Core;
typedef struct FaultThread FaultThread;
typedef struct Conn Conn;
typedef struct PageoutOp PageoutOp;

#define LANES_MAX 8
/* how long a parent's store is held for a forked child that has not attached */
#define FORK_HOLD_NS (10ull * 1000000000)
#define LANE_SLOTS ZSWAP_BATCH_MAX
/* threads of one process whose fault histories are kept apart */
#define MM_HIST_THREADS 4

/* one thread's fault history (MMClient.hist): the page its next fault
 * pairs with, when its last fault was read, the page whose chain that
 * fault followed and the links it followed */
typedef struct HistThread {
        uint64_t last, last_ns, chain_from;
        uint32_t tid;
        unsigned chain_links;
} HistThread;

typedef enum LaneState {
        LANE_FREE,        /* slots unpopulated, may take a new batch */
        LANE_MOVING,      /* MOVE sent, waiting for MOVE_DONE */
        LANE_COMPRESSING, /* a worker reads and compresses the slots */
        LANE_DRAINING,    /* compressed; waiting for fault-path readers to leave */
        LANE_RELEASING,   /* RELEASE sent, waiting for RELEASE_DONE */
} LaneState;

typedef struct Lane {
        /* the manager's, except that while the lane is COMPRESSING the
         * worker its job went to (evictor_submit(), under the evictor's
         * lock) reads npages and addrs and takes or lets go of keep[]: the
         * manager touches none of them until the job's MW_BATCH_DONE comes
         * back through its inbox (evict_batch_done()). The last unref lets
         * go of what keep[] still holds */
        LaneState state;
        uint32_t npages;
        uint64_t addrs[LANE_SLOTS]; /* page i of the batch sits in slot lane*LANE_SLOTS+i */
        PageoutOp *op;
        uint32_t stored;            /* pages of the batch now held (STORED/SAME) */
        bool compress_due;          /* COMPRESSING, but no memory for its job yet: evict_tick() submits it */
        /* MOVING, MOVE_DONE in: what moved is being read (MW_JOB_MOVED), or
         * waits for memory to be (check_due: evict_tick() tries again);
         * reported: the agent's bits. gen: bumped by each plan, so that a
         * check back after the lane moved on is known */
        bool checking, check_due;
        uint32_t gen;
        uint64_t reported[LANE_SLOTS / 64];
        /* page i was CLEAN when planned: the copy it kept (a CLEAN value),
         * owned by the batch until the worker reuses or releases it; 0 if none */
        uint64_t keep[LANE_SLOTS];
        /* bit i: page i was mapped by another process too when planned
         * (pagemap: not exclusive; a fork's copy-on-write): the worker
         * stores it in its user's shared store (dedup.h) */
        uint64_t cow[LANE_SLOTS / 64];
        /* fault threads add/remove themselves while they read a slot of this
         * lane (so does a worker that hands a page back, hand_back(), for
         * the fault thread it hands it to); the manager releases the lane
         * only when it reads 0 (lane_try_release(): seq_cst, said there) */
        _Atomic uint32_t users;
} Lane;

typedef struct Region {
        uint64_t start, end;
        uint32_t stamp; /* when it was registered (age_stamp()) */
        /* registered for missing faults (mmclient_region_arm()): only then
         * may a page leave it. Carried by splits, moves and forks, as the
         * kernel carries the vmas' flags */
        bool armed;
} Region;

typedef struct MMClientStats {
        /* all counters are relaxed atomics: statistics, no ordering */
        _Atomic uint64_t stored_pages, same_pages, staged_pages, incompressible_pages;
        _Atomic uint64_t compressed_bytes, evictions, faults, faults_zero, prefetches;
        _Atomic uint64_t refaults, clean_pages, clean_bytes, clean_reevictions, reclaim_evictions;
        _Atomic uint64_t thrash_backoffs;
        _Atomic uint64_t refilled; /* pages brought back ahead of use (FW_REFILL): not in faults */
        _Atomic uint64_t moved_out; /* pages the agent's MOVEs took out of its memory, as checked (evict.c) */
        /* of stored_pages, those whose object is on the second tier, and
         * those objects' compressed bytes there (compressed_bytes counts
         * their stubs in the pool) */
        _Atomic uint64_t tier_pages, tier_bytes;
        /* of stored_pages, those whose object in the pool is of the
         * strong tier (PE_STRONG), and their bytes (in compressed_bytes) */
        _Atomic uint64_t strong_pages, strong_bytes;
        /* of strong_pages, those made with its dictionary (PE_DICT) */
        _Atomic uint64_t dict_pages, dict_bytes;
        /* of stored_pages, those whose object is in its user's shared
         * store (PE_SHARED): not in compressed_bytes, the shared store's
         * bytes are its user's (dedup.h) */
        _Atomic uint64_t shared_pages;
        /* pages the recompressor gave a strong object (the daemon-wide
         * counters of its savings and CPU are Core's) */
        _Atomic uint64_t recompressed;
        _Atomic uint64_t resident_pages, limit_bytes; /* written by reclaim each tick */
        _Atomic uint64_t registered; /* registered_bytes, readable without regions_lock */
} MMClientStats;

/* What reclaim keeps per client (reclaim.c); manager thread only. */
typedef struct MMReclaim {
        uint64_t limit;         /* resident limit in bytes, 0: none */
        bool limit_set;         /* limit is the client's own (else the daemon's default) */
        int64_t idle_age_ms;    /* the client's own idle age, -1: the default */
        /* recompression (recompress.c): the client's own age (-1: the
         * default), where its next walk starts, when its last whole pass
         * ended (0: walk again now) and whether that pass took anything,
         * and when the recompressor first saw it */
        int64_t recompress_age_ms;
        uint64_t recompress_cursor, recompress_walked_ms, recompress_seen_ms;
        bool recompress_walk_took;
        uint64_t recompress_pass_taken; /* objects the walk under way took so far */
        uint64_t dict_tried;    /* its objects when a dictionary was last trained for it, 0: never */
        bool off;               /* the client is exempt from the daemon's policies */
        uint64_t resident;      /* resident managed pages: the last count, brought up to date (reclaim.c) */
        uint64_t held;          /* pages held out (stored + same + staged) at the last tick */
        uint64_t hand;          /* where the clock hand is */
        PageoutOp *op;          /* the policy eviction in progress, or NULL */
        uint64_t idle_swept_ms; /* last whole idle sweep */
        uint64_t written_ms;    /* last write scan */
        uint32_t write_scans;   /* write scans made (reclaim.c write_scan()) */
        uint64_t thrash_ms;     /* last look at the zones' refault rates */
        uint64_t pressure_want; /* pages the pressure controller asks of this client (new this period) */
        uint64_t pressure_left; /* of what it asked, pages not yet planned */
        uint64_t pressure_cap;  /* the most pressure_left may be: this period's share */
        uint64_t measured_ms;   /* when the last count back was taken */
        unsigned scanning;      /* counts on their way (reclaim.c, MW_JOB_SCAN) */
        /* the last count's resident pages, and as it ran: the pages the
         * fault threads had put back (mmclient_pages_back()), the pages
         * moved out (st.moved_out), and whether no lane was moving (its
         * pages are then neither in the count nor in moved_out later) */
        uint64_t counted, back_at_scan, moved_at_scan;
        bool count_settled;
        PageoutOp *last_op;     /* the op given last_want at the last tick */
        uint64_t last_want;
        /* refill (reclaim.c): pages to bring back ahead of use because
         * room opened (the controller, the limit) and because the client
         * woke; of the policies' evictions (reclaim_evictions), those
         * room refills brought back; whether a FW_REFILL is out (and its
         * wake part); the limit room was last measured from (the lowest
         * since, while an eviction defers it); whether the controller let
         * go of everything it held since; whether room opened that an
         * eviction deferred measuring (refill_plan()); the refaults and
         * evictions counted when the client last took a refault */
        uint64_t refill_want, refill_wake, room_refilled;
        uint32_t refill_out_wake;
        /* the stamp the pages wanted start from (refill_since()), worked
         * out for refill_cut_for pages; again when more are wanted */
        uint32_t refill_cut;
        bool refill_cut_ok;
        uint64_t refill_cut_for;
        bool refilling;
        uint64_t refill_limit;
        bool refill_all, refill_deferred;
        uint64_t refill_refaults, refill_evictions, refill_quiet_ms;
        /* a write scan found more pages written than came back since the
         * one before (the program wrote), since the last refill_plan();
         * pages found written by this scan so far; the pages back
         * (mmclient_pages_back()) at the last write scan */
        bool wrote;
        uint64_t written, back_at_write_scan;
        /* a group (ZMSG_SET_GROUP: the processes of one zswap-run, of a
         * systemd unit) that shares one resident limit: its name ("":
         * none; a group is its user's: the connection's uid goes with
         * it), the group's limit as this client gave it, what the client
         * holds unmanaged, and its share of the limit as the tick that
         * counted every member (group_tick) worked it out (bytes; 0: not
         * yet) */
        char group[ZSWAP_GROUP_NAME_MAX];
        uint64_t group_limit, group_unmanaged, group_share, group_tick;
        /* the operator's limit for groups of that name (GROUP_LIMIT,
         * groups.c), over group_limit; 0: none. cgroup_read: groups.c
         * looked at the process's cgroup (once) */
        uint64_t group_op_limit;
        bool cgroup_read;
        /* the client said its limit (or group) again: it grew fast; counted
         * at the next manager tick (reclaim_early()) */
        bool count_soon;
} MMReclaim;

/*
 * Who writes what (every field below says which of these it is):
 *
 *   the manager      the manager thread: manager.c and what it calls
 *                    (evict.c's planning, reclaim.c, users.c, report.c,
 *                    tier_tick())
 *   the reader       the fault thread holding serve_lock (fault.c): any
 *                    of them, whichever woke first
 *   a worker         a compression worker running a job of this client
 *                    (workers.c, job_compress())
 *   the last unref   whichever thread drops the last reference: after the
 *                    count's acq_rel it owns everything and frees it
 *
 * "Before publish": written by the thread that creates the MMClient and
 * then never again: the manager at ATTACH and ADOPT, before mm_serve()
 * hands it to the fault threads; for a fork child, the parent's reader at
 * the FORK event (daemon/fault/fork.c, event_fork()), before fault_thread_own() and
 * the orphan list. Every other thread gets the MMClient through an inbox
 * or list (mpsc.h: release push, acquire take) or a job handed over under
 * a lock, so it reads these without one. A fork child's CHILD_ATTACH and
 * ATTACH come after that, while fault threads already watch its uffd:
 * what the manager writes then says so.
 */
typedef struct MMClient {
        /* any holder: mmclient_ref() relaxed, mmclient_unref() acq_rel */
        _Atomic int refs;
        Core *core;      /* the daemon as the layers below the manager see it (core.h): before publish, constant */
        /* the manager's only: given when the client is linked (mm_serve(),
         * or a fork child's CHILD_ATTACH, do_child_attach()); zswapctl
         * names it. No other thread reads it */
        uint64_t id;

        /* the daemon's reference: before publish (mmclient_new()), read by
         * every thread; closed, or handed to the closer, only by the last
         * unref. The client keeps its own */
        int uffd;
        /*
         * The process, as mmclient_prove() published it (bind_publish()):
         * written once by the manager, read by every thread. For ATTACH
         * and ADOPT that is before publish, but a fork child's fault
         * threads already watch it when its CHILD_ATTACH comes, so these
         * are _Atomic, read and written only through mmclient_pid() and
         * its kind below (seq_cst, said there), and each is published only
         * after the proof, never closed before the MMClient is freed (by
         * the last unref): a thread sees -1/0 or the process's own fd. The
         * four are stored one by one: a thread may see an fd before pid
         * (a log line then says pid 0).
         */
        _Atomic pid_t pid;       /* 0: a fork child that has not attached yet */
        _Atomic int pidfd;       /* -1 until pid is known */
        _Atomic int pagemap_fd;  /* /proc/PID/pagemap, bound to this mm at open */
        _Atomic int mem_fd;      /* /proc/PID/mem, the same: every read of the client's memory */
        int maps_fd;             /* /proc/PID/maps, the same; the manager's only (and the last unref's) */
        struct {
                pid_t pid;
                int pidfd, pagemap_fd, mem_fd;
        } bound; /* the manager's: opened by mmclient_bind(), not proven yet */
        /* before publish, constant (the entries are atomics: pentry.h) */
        PageIndex *index;
        /* the client's store (store.h): its pool, the index's leaves and
         * the ranges live there; NULL/-1 for an MMClient of a test. The
         * pointers are set before publish and constant; what the store
         * holds says who writes it (store.h, pool.h, regions_persist()) */
        uint8_t *store;
        int store_fd;
        Pool *pool;
        /* its user's shared store (dedup.h), whose pool holds the objects
         * of its PE_SHARED entries: a reference of its own, NULL if the
         * client is in no dedup domain. Set before publish (attach, adopt,
         * a fork child's event: mmclient_set_dedup()) and constant */
        Dedup *dedup;
        /* set when the daemon hands its clients over (exit without
         * restoring): the last unref leaves the store's entries alone.
         * Written by the manager (mm_detach()) or by the last unref, and
         * read only by the last unref */
        bool keep_store;

        /* regions: protected by regions_lock, which the manager and the
         * reader handling an event (events.c: event_remove(), event_remap(),
         * event_fork()) take; never the fault path. A fork child's are
         * copied before publish (mmclient_regions_copy()) */
        pthread_mutex_t regions_lock;
        Region *regions;
        size_t nregions;
        uint64_t registered_bytes;
        uint64_t regions_cut; /* counts removals and moves: mmclient_region_arm() */

        /*
         * staging: the client's staging area. staging_addr is written once,
         * before publish: by the manager at ATTACH and ADOPT, and for a
         * fork child by event_fork() (the area it inherited, at the
         * parent's address; its own ATTACH must name that one). nlanes is
         * 0 until the manager has the client's ATTACH (mm_set_staging());
         * for a fork child that is after fault threads watch it, hence
         * atomic: uffd_read_msg() reads it then. Every other reader is the
         * manager, the last unref, or comes after the manager's write
         * through something the manager published later: an entry naming
         * a slot (serve_slot(), fork_inflight()), a lane bit
         * (revoke_moves()), a job (workers).
         */
        uint64_t staging_addr;
        _Atomic unsigned nlanes;
        Lane lanes[LANES_MAX]; /* each field says who writes it (Lane) */
        /* children: the parent's token at the fork; before publish
         * (event_fork()), read by the manager */
        uint64_t fork_token;
        /* the token of the FORK_PREPARE being answered; manager only */
        uint64_t fork_token_announced;
        /* the token the client announced for its next fork (FORK_PREPARE,
         * or ADOPT); written by the manager once nothing of the client's is
         * in flight, read by the fault thread when the FORK event comes:
         * relaxed, the sync orders it */
        _Atomic uint64_t next_fork_token;
        /* children: who forked them (by value: the parent may go first).
         * Before publish (event_fork()), read by the manager. 0 if the
         * parent is a fork child whose own pid was not published yet */
        pid_t parent_pid;
        /* a fork child (event_fork()): until it attaches, its user's bound
         * on children that have not attached counts it (orphans_max), not
         * its connections. Before publish, never again */
        bool forked;
        /* children of an announced fork: the parent, whose store is held
         * for us until we attach (a reference; fault.c, fork_hold). Set
         * before publish (event_fork()); taken back by
         * mmclient_fork_release(): the manager at CHILD_ATTACH, or the
         * last unref (an orphan that never attached) */
        struct MMClient *fork_parent;
        /* parents: the token of an announced fork whose child has not
         * attached yet, 0: none. While it is set, nothing of this client's
         * store changes (its uffd is not read, its retries wait, nothing
         * is evicted, its store is kept if it dies), so that the child,
         * should this daemon die before it attaches, can restore itself
         * from it (client/lib/fork.c, child_lost()). Set by the fault thread that
         * handles the fork, ended by the manager when the child attaches
         * or its orphan goes, or by a fault thread after FORK_HOLD_NS
         * (fork_hold_until, under serve_lock) */
        _Atomic uint64_t fork_hold;
        /* under serve_lock: written by the reader at the fork event
         * (event_fork()), read by fork_held() */
        uint64_t fork_hold_until;
        /* its uffd was not read for a hold: read it once the hold is over
         * (a hint any fault thread takes, relaxed) */
        _Atomic bool fork_unread;
        /* a request was refused for EVICT_OPS_MAX queued (evict.c): said
         * once until one is queued again (the manager's) */
        bool ops_full_warned;
        /* a read of its uffd failed for want of a descriptor (a fork
         * event): said once until a read succeeds (its fault thread) */
        bool fork_fd_warned;
        /* its user had as many forked children not attached yet as it may
         * (orphans_max) when this address space forked, or when it was
         * itself forked: its uffd is not read, so it forks no more, until
         * the manager sees the user under the bound again and clears
         * this (users_orphans_unstop(), users.c). Set by its fault
         * thread, cleared by the manager, relaxed: a hint the kick after
         * orders */
        _Atomic bool orphans_stop;
        /* that bound: its user's max_connections when it attached (0: no
         * bound, root); a fork child inherits it. Written by the manager
         * (attach, reload), read by fault threads: relaxed, a setting */
        _Atomic uint32_t orphans_max;
        /* counted in core_orphans_add() for its uid: from its fork event
         * until it attaches or exits (set before it is published, cleared
         * by the manager) */
        bool orphan_counted;
        /* the manager answered a FORK_PREPARE: the next fork event is that
         * fork's (set by the manager, taken by the fault thread) */
        _Atomic bool fork_announced;
        /* the pages held out for the client when the manager answered
         * that FORK_PREPARE (the answer says how many, and nothing is
         * evicted until its FORK_DONE): its child needs the parent held
         * only if there were any. Set by the manager before
         * fork_announced, read by the fault thread at the fork event,
         * which the client's fork orders after the answer: relaxed */
        _Atomic uint64_t fork_held_pages;
        /* children: the parent's pidfd at the fork (-1 if none, or if the
         * parent's was not published yet): has it exited? Before publish
         * (event_fork()), read by the manager (mmclient_parent_gone()),
         * closed by the last unref */
        int parent_pidfd;

        /*
         * Every fault thread watches uffd; whichever wakes first takes
         * serve_lock and reads (fault.c). The lock makes the reader single
         * at any moment, and a message is handled completely before the
         * lock is let go, so messages are still handled one by one in
         * kernel order. The plain fields from here to `dead` are the
         * reader's, under serve_lock (ft excepted); the atomics among
         * them say who else touches them.
         */
        /* home thread: gets this mm's installs, restores, syncs. Set
         * before publish (mm_serve(), event_fork()) and constant: any
         * thread posts to it (workers: hand_back()) */
        FaultThread *ft;
        pthread_mutex_t serve_lock;
        struct Retry *retries; /* copies that met EAGAIN, retried after the next read */
        /* retries != NULL, readable without the lock: set by the reader
         * or by a read's completion (slot_read_done(), tier_read_done()),
         * cleared by the reader; a hint (run_due_retries()), relaxed, but
         * for the completion's store and run_retries()' clear, seq_cst
         * with the retry's state (said there) */
        _Atomic bool has_retries;
        /* of the retries, reads of a staging slot in flight (fault.c):
         * added by the reader that submits one, taken off by the thread
         * whose queue completes it; a bound on reads, relaxed */
        _Atomic unsigned slot_reads;
        _Atomic unsigned tier_reads; /* of the retries, reads of the second tier in flight: the same */
        /* staging slots to poison once the events queued before them are
         * read (UFFDIO_ZEROPAGE met EAGAIN: events.c slot_poison()), under
         * serve_lock */
        uint32_t poison[16];
        unsigned npoison;
        /* the old ranges of mremaps handled (REMAP) whose own UNMAP has
         * not come yet: the kernel unmapped them before it sent the
         * REMAP, but sends that UNMAP only once the mremap's thread runs
         * again, maybe after another thread's REMAP into the range
         * (events.c, remap_src_take()). Under serve_lock, as is
         * remap_seq, the number the last one added got */
        struct {
                uint64_t start, end, seq;
        } remap_src[8];
        unsigned nremap_src;
        uint64_t remap_seq;
        /* whether mm's uffd has an event under way is asked off the
         * fault threads (the ioctl that tells takes the client's mmap
         * lock: events.c remap_src_expire()): remap_probing is raised by
         * the fault thread that asks (an exchange: one question at a
         * time) and lowered by the manager once the answer is in;
         * remap_probed is the remap_seq the last answer "none under way"
         * covers, written by the manager, read under serve_lock. Relaxed
         * both: the value is all that is passed */
        _Atomic bool remap_probing;
        _Atomic uint64_t remap_probed;
        /* a thread found serve_lock taken: the holder reads the uffd
         * again. Set by any fault thread (service()), cleared by the one
         * that takes the lock, read after every unlock (serve_unlock(),
         * and the manager's mm_sync_now(), mm_replace_sync()): seq_cst,
         * each side stores before it looks at the other (said there) */
        _Atomic bool kick;
        /* a fault thread did not read the uffd, as a client of the same
         * user held another (core_user_held()); the manager has it read
         * once that ends (fault_threads_held()). Relaxed: Core.parked_any
         * publishes it, the manager's FW_KICK orders the read after */
        _Atomic bool parked;
        uint64_t ra_next;     /* where a sequential reader faults next */
        unsigned ra_window;   /* pages installed ahead last time, 0: not sequential */
        uint64_t ra_waiter;   /* a fault fault-around read and will serve */
        uint32_t ra_waiter_tid; /* and its thread (its message's ptid) */
        /* fault history (serve.c history_note()), for each of the last
         * MM_HIST_THREADS threads that faulted (tid: the fault message's
         * ptid, 0 where the uffd gives none). fault_tid: the
         * thread of the fault being served. Then the guesses scored in
         * this window and how many were right; chains not followed
         * (history_score()) */
        HistThread hist[MM_HIST_THREADS];
        uint32_t fault_tid;
        unsigned hist_guesses, hist_right;
        bool hist_paused;
        /* zero-fill-ahead (serve.c zero_ahead()): where the last run of
         * fresh pages mapped to the zero page ended, and the next run's
         * length in pages */
        uint64_t za_end;
        unsigned za_window;
        struct uffd_msg stash; /* a message fault-around read and left to handle next */
        bool has_stash;
        /* where each message is read to (under serve_lock): the store's
         * event journal (store.h), which keeps an event read and not yet
         * handled for the next daemon; journal_own without a store. The
         * pointer is set before publish and constant; what it points to
         * is the reader's (events.c, journal_done()) */
        struct uffd_msg *journal;
        struct uffd_msg journal_own;
        /* set by the manager when the client is gone (mm_retire()), read
         * by every thread as a hint to stop working on it (each holds a
         * reference, so a late look costs work, never memory): relaxed */
        _Atomic bool dead;
        /* a page the daemon's codec finds incompressible is tried with the
         * strong codec (recompression is on for this client): set by the
         * manager each tick (recompress.c), read by the workers per page:
         * relaxed, a setting */
        _Atomic bool strong_rescue;

        /* pool bytes this client may still take under its user's
         * max_pool; QUOTA_NONE: no quota. The manager sets it each tick
         * (users.c); workers, per page, the reader copying pages to a fork
         * child and an adoption's walk take from it and give back
         * (mmclient_quota_take()): a budget, relaxed. A fork child's is set
         * before publish */
        _Atomic int64_t quota_left;
        /* pool bytes copied for a child this client's fork event is
         * building, which is in no list yet (daemon/fault/fork.c event_fork(), the
         * reader's); counted for its user as if held (users.c, the
         * manager): a counter, relaxed */
        _Atomic uint64_t fork_bytes;

        /* manager thread only (the exceptions say so) */
        Conn *conn;
        /* the user it belongs to (its connection's, or its parent's):
         * before publish (do_attach(), do_adopt(); event_fork() for a fork
         * child), then read by every thread (memread.h charges reads to
         * it, tier_seal() binds objects to it) */
        uid_t uid;
        /* its library decodes the strong tier's objects (ZHELLO_F_STRONG):
         * set with uid, and like it read by every thread after publish;
         * recompression and the workers' zstd rescue only for such a client */
        bool strong_ok;
        /* and objects made with its dictionary (ZHELLO_F_DICT): as
         * strong_ok; a dictionary is trained only for such a client */
        bool dict_ok;
        /* its zstd dictionary (PE_DICT objects; recompress.c trains it,
         * docs/reclaim.md "Dictionaries"): NULL until mmclient_dict_set()
         * publishes it (release), once, never replaced; read by whoever
         * decodes (mmclient_dict(): acquire, after the PE_DICT entry that
         * was published after it). Unreferenced with the MMClient. */
        _Atomic(CodecDict *) dict;
        PoolHandle dict_h[STORE_DICT_OBJS]; /* its pool objects, dict_handles of them: written with dict */
        uint32_t dict_handles;
        uint64_t user_limit;   /* its user's default resident limit ([users] limit), 0: none */
        /* manager's list (mms, orphans); for a fork child also the link of
         * orphans_new, written by the reader that pushes it
         * (core_adopt_orphan()) before the manager takes it */
        struct MMClient *next;
        PageoutOp *ops, **ops_tail;
        unsigned restores;     /* restore jobs in flight */
        bool fork_paused;
        /* a fork child's is written by the reader that pushes it
         * (core_adopt_orphan()), before publish */
        uint64_t fork_paused_at;
        uint32_t fork_reply_id; /* pending FORK_PREPARE reply, 0 if none */
        uint32_t fork_gen;      /* FORK_PREPAREs seen: a FORK_DONE applies to the latest only */
        uint32_t syncs_pending; /* FW_SYNCs of requests posted (fault_sync_post()), not back (sync_done()) */
        uint64_t fork_reply_serial; /* the serial of the connection that asked it (the manager finds it by it) */
        unsigned unregisters;  /* pending unregister requests: pump pauses */
        /* the calls that wait for the client's mmap lock (mmjob.h): the
         * one running in the pool (its type and range are constant while
         * it runs), the rest queued behind it, oldest first */
        struct Work *job_cur;
        struct Work *jobs;
        /* 1 + the address whose region a job could not arm: passed over
         * once by the plan (evict.c), 0: none. Manager thread only. */
        uint64_t arm_failed;
        bool repump;           /* planning ran out of budget: pump again soon */

        MMClientStats st;       /* relaxed counters, any thread (MMClientStats) */
        MMReclaim rc;           /* manager thread only (MMReclaim) */
        /* regions registered in WP mode too (write tracking): before
         * publish, read by every thread */
        bool wp_async;
        /* the page shared with the client's agent (zsync.h), or NULL, and
         * its memfd, for a fork child's mapping (-1 if none). Set before
         * publish (mmclient_set_sync()), replaced only under serve_lock
         * (mmclient_swap_sync(): the manager's trylock, or the home
         * thread's FW_SYNC_SWAP); read under serve_lock (drain_uffd(),
         * event_fork()) and by the last unref */
        struct ZSync *sync;
        int sync_fd;
        /* a forked child's own sync page is on its way to `sync` (a fault
         * thread swaps it in, FW_SYNC_SWAP): no move is planned meanwhile.
         * Set by the manager, cleared by that thread (release) */
        _Atomic bool sync_swap;
        bool sync_warned;       /* under serve_lock: the agent was too slow once, said so */
        /* a move was under way: the uffd waits to be read, with our
         * `reading` raised on the sync page (drain_uffd()); written under
         * serve_lock, read without it as a hint */
        _Atomic bool read_deferred;
        /* a read of its memory was abandoned (memread.h): its uffd is
         * closed by the closer thread. Set by the thread whose read it was
         * (mmclient_read_overdue(): an exchange, so one says so). relaxed:
         * a flag its last holder reads after the reference count's
         * acq_rel */
        _Atomic bool read_stuck;
        /* lanes the agent may be moving pages into, a bit each: the
         * manager writes it (evict.c, lane_set_state()), fault threads
         * read it to revoke those moves (events.c, revoke_moves()) */
        _Atomic uint32_t lanes_moving;
        /* the revocation of the agent's moves under way, under serve_lock:
         * lanes still to read, and whether one began since the uffd was
         * last read; agent_slow: a revocation was needed at the last read */
        uint32_t revoke_left;
        bool revoking, agent_slow;
        uint64_t read_wait_t0; /* under serve_lock: since when a read waits for a move to end */
        /* reads of lanes for a revocation in flight (fault threads'
         * queues): added by the reader that submits one (relaxed: it reads
         * the count itself), taken off by the thread that completes it
         * (release), read by the reader (acquire: those reads are done) */
        _Atomic unsigned revoke_reads;
} MMClient;

/* Whether a and b are in one group (MMReclaim.group): the same name and
 * the same user. Manager thread. */
static inline bool mmclient_same_group(const MMClient *a, const MMClient *b) {
        return a->uid == b->uid && strcmp(a->rc.group, b->rc.group) == 0;
}

/* The process and its fds (MMClient.pid): the only accesses to them, but
 * for their initialisation and bind_publish(). seq_cst, not argued
 * weaker: a reader needs at least acquire (the fd was opened, and is
 * open, before the store that published it), and none reads them on a
 * counted path (a system call, a log line, a match by pid). */
/* mm's dictionary, or NULL: any thread. */
static inline const CodecDict *mmclient_dict(MMClient *mm) {
        return atomic_load_explicit(&mm->dict, memory_order_acquire);
}
/* Give mm dictionary d (a reference of its own): its bytes are written to
 * mm's store (pool objects the store's superblock names, then the store
 * marked STORE_VERSION_DICT), then it is published. Once per MMClient, by
 * whoever builds mm's entries (the manager, or the fault thread that
 * builds a fork child), before any PE_DICT entry of it: 0, -EEXIST if mm
 * has one, -ENOMEM/-ENOSPC (the pool). */
int mmclient_dict_set(MMClient *mm, CodecDict *d);

static inline pid_t mmclient_pid(const MMClient *mm) {
        return atomic_load_explicit(&mm->pid, memory_order_seq_cst);
}
static inline int mmclient_pidfd(const MMClient *mm) {
        return atomic_load_explicit(&mm->pidfd, memory_order_seq_cst);
}
static inline int mmclient_pagemap_fd(const MMClient *mm) {
        return atomic_load_explicit(&mm->pagemap_fd, memory_order_seq_cst);
}
static inline int mmclient_mem_fd(const MMClient *mm) {
        return atomic_load_explicit(&mm->mem_fd, memory_order_seq_cst);
}

/* A new client address space, with a new store if the manager has pools
 * (m->pools); the caller keeps uffd on failure. */
int mmclient_new(Core *core, int uffd, MMClient **ret);
/* A read-only descriptor of mm's store for its process (store_reopen_ro()). */
int mmclient_store_fd_ro(MMClient *mm);
MMClient *mmclient_ref(MMClient *mm);
/* A forked child attached, or its orphan goes: its parent's store is no
 * longer held for it (daemon/fault/fork.c, fork_held()). Drops the reference to the
 * parent. */
void mmclient_fork_release(MMClient *child);
/* The instant of mm's announced fork token is past (its event read, or
 * its FORK_DONE come): said in mm's store (StoreSuper.fork_evented), for
 * a daemon that adopts it. */
static inline void mmclient_fork_evented(MMClient *mm, uint64_t token) {
        if (mm->store && token)
                atomic_store_explicit(&store_super(mm->store)->fork_evented, token, memory_order_release);
}
MMClient *mmclient_unref(MMClient *mm);

/* Pages held out for the client: stored, same-filled and staged. Relaxed
 * counters: exact only while nothing of it is in flight (the manager's
 * FORK_PREPARE answer), a hint elsewhere (the reclaim tick). */
static inline uint64_t mmclient_held_pages(MMClient *mm) {
        return atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed) +
               atomic_load_explicit(&mm->st.same_pages, memory_order_relaxed) +
               atomic_load_explicit(&mm->st.staged_pages, memory_order_relaxed);
}

/* Pages the fault threads have made resident for the client since it came:
 * faults served with content or zeros, pages installed ahead of a reader
 * and pages refilled. Relaxed
 * counters, only ever compared with an earlier reading (reclaim_early()). */
static inline uint64_t mmclient_pages_back(MMClient *mm) {
        return atomic_load_explicit(&mm->st.faults, memory_order_relaxed) +
               atomic_load_explicit(&mm->st.faults_zero, memory_order_relaxed) +
               atomic_load_explicit(&mm->st.prefetches, memory_order_relaxed) +
               atomic_load_explicit(&mm->st.refilled, memory_order_relaxed);
}

/* Map the client's sync page from memfd fd (sealed against shrinking,
 * at least ZSWAP_SYNC_SIZE): takes fd. -EBADF if it is not such a memfd. */
int mmclient_set_sync(MMClient *mm, int fd);
bool mmclient_sync_fd_ok(int fd);
/* Try serve_lock where finding it taken puts the work off (0: ours): the
 * manager, and a fault thread's installs, syncs and restores. Never in a
 * uffd reader's service(), whose kick needs a real holder. Busy too while
 * another fault thread waits in a call into a client of the same user
 * (core_user_held()): the work waits until it is done. */
int mmclient_serve_trylock(MMClient *mm);

/* Map a sync page's memfd (checked with mmclient_sync_fd_ok()); takes fd
 * (closed on failure). */
int mmclient_map_sync(int fd, struct ZSync **ret);
/* A forked child's own sync page p (memfd fd), in place of its parent's it
 * had since the fork; takes both. The caller holds serve_lock (every
 * reader of mm->sync does). */
void mmclient_swap_sync(MMClient *mm, struct ZSync *p, int fd);

/* Bind the process of pidfd (pid its number, as the connection gave it):
 * a pidfd of its own, /proc/PID/mem, pagemap and maps, all bound to
 * the process and its address space as they are now. -ESRCH if it exited
 * (the pid may name another process by now). Nothing is proven yet about
 * mm->uffd: mmclient_prove(). */
int mmclient_bind(MMClient *mm, int pidfd, pid_t pid);
/* Undo mmclient_bind() (before mmclient_prove() succeeded). */
void mmclient_unbind(MMClient *mm);
/* Prove that mm->uffd acts on the address space mmclient_bind() bound: a
 * page of [staging, staging+len) picked at random, registered on the uffd
 * for missing faults, must show as a mapping of its own through the maps
 * fd; it is left registered write-protect only, as the client's staging
 * area is. On success the bound pid and fds are published (mm->pid,
 * mm->mem_fd, ...), for good. 0; -EPERM: another address space; -ESRCH: it
 * is gone; -EBUSY: no page to prove it with; -ENOMEM. */
int mmclient_prove(MMClient *mm, uint64_t staging, uint64_t len);

/* Regions. All take regions_lock. A region added is armed if armed says
 * so (registered for missing faults already). */
int mmclient_region_add(MMClient *mm, uint64_t start, uint64_t end, bool armed);
int mmclient_region_remove(MMClient *mm, uint64_t start, uint64_t end, bool must_exist);
int mmclient_region_move(MMClient *mm, uint64_t from, uint64_t to, uint64_t len);
int mmclient_regions_copy(MMClient *dst, MMClient *src);
/* Clip [*start, *end) to the first registered part at or after *start;
 * false if none. Takes regions_lock. */
bool mmclient_region_clip(MMClient *mm, uint64_t *start, uint64_t *end);
/* Up to max of mm's regions ending after `from`, in address order, into
 * starts[]/ends[]; how many. *next: the end of the last one given if
 * more follow, else 0. Takes regions_lock. */
size_t mmclient_regions_list(MMClient *mm, uint64_t from, uint64_t *starts, uint64_t *ends, size_t max,
                             uint64_t *next);
/* The same, also giving the region's registration stamp and whether it
 * is armed. */
bool mmclient_region_clip_stamp(MMClient *mm, uint64_t *start, uint64_t *end, uint32_t *stamp, bool *armed);
/* Register the region holding addr for missing faults too, before any of
 * its pages may leave: a page moved out of a region that is not would be
 * refilled with zeros by the kernel at its next touch. Waits for the
 * client's mmap lock: a job's (mmjob.h), one at a time per client. 0 (armed); -EAGAIN: the region changed meanwhile (an munmap or
 * mremap event), ask again; -ENOENT: no region there; -errno of the
 * ioctl. */
int mmclient_region_arm(MMClient *mm, uint64_t addr);
/* Is addr inside a registered region? Caller holds regions_lock. */
bool mmclient_region_has_locked(MMClient *mm, uint64_t addr);

/* The stub an entry value on the second tier (STORED|PE_TIER) names, as
 * mm's pool holds it: not checked (tier_stub_check() does that). */
/* The pool the object of STORED (LOADING, CLEAN) entry value v is in. */
static inline Pool *mmclient_pool_of(MMClient *mm, uint64_t v) {
        return (v & PE_SHARED) ? dedup_pool(mm->dedup) : mm->pool;
}

/* mm joins the dedup domain of d (a reference of its own): its store
 * names d's store. Before publish, once. */
void mmclient_set_dedup(MMClient *mm, Dedup *d);

static inline TierStub mmclient_tier_stub(MMClient *mm, uint64_t v) {
        TierStub s;
        memcpy(&s, pool_map(mm->pool, pe_handle(v)), sizeof(s));
        return s;
}

/* The strong-tier object of entry value v came into mm's pool (dir 1)
 * or left it (-1). */
static inline void mmclient_count_strong(MMClient *mm, uint64_t v, int dir) {
        uint64_t len = pe_clen(v);
        bool dict = (v & PE_DICT) != 0;
        if (dir > 0) {
                atomic_fetch_add_explicit(&mm->st.strong_pages, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->st.strong_bytes, len, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->st.dict_pages, dict, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->st.dict_bytes, dict ? len : 0, memory_order_relaxed);
        } else {
                atomic_fetch_sub_explicit(&mm->st.strong_pages, 1, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.strong_bytes, len, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.dict_pages, dict, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.dict_bytes, dict ? len : 0, memory_order_relaxed);
        }
}

/* A page of mm's whose compressed object (len bytes) went to the second
 * tier (dir 1), or left it (-1): the per-client tier counters. */
static inline void mmclient_count_tier(MMClient *mm, uint32_t len, int dir) {
        if (dir > 0) {
                atomic_fetch_add_explicit(&mm->st.tier_pages, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->st.tier_bytes, len, memory_order_relaxed);
        } else {
                atomic_fetch_sub_explicit(&mm->st.tier_pages, 1, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.tier_bytes, len, memory_order_relaxed);
        }
}

/* A STORED entry value v now holds a page (dir 1) or no longer does (-1):
 * stored_pages, compressed_bytes and, for an object of the strong tier in
 * the pool, strong_pages and strong_bytes. */
static inline void mmclient_count_stored(MMClient *mm, uint64_t v, int dir) {
        uint64_t len = pe_clen(v);
        bool strong = (v & PE_STRONG) && !pe_is_tier(v);
        if (v & PE_SHARED) {
                atomic_fetch_add_explicit(&mm->st.stored_pages, (uint64_t)(int64_t)dir, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->st.shared_pages, (uint64_t)(int64_t)dir, memory_order_relaxed);
                return;
        }
        if (dir > 0) {
                atomic_fetch_add_explicit(&mm->st.stored_pages, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&mm->st.compressed_bytes, len, memory_order_relaxed);
        } else {
                atomic_fetch_sub_explicit(&mm->st.stored_pages, 1, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.compressed_bytes, len, memory_order_relaxed);
        }
        if (strong)
                mmclient_count_strong(mm, v, dir);
}

/* Release what entry value v holds (pool object, counters); for LOADING,
 * what the state it came from held. */
void mmclient_release_payload(MMClient *mm, uint64_t v);
/* Zero an entry and release what it held, unless a fault thread owns it
 * (LOADING): then the owner releases it. */
void mmclient_entry_drop(MMClient *mm, _Atomic uint64_t *e);

/* Address of a staging slot in the client. */
static inline uint64_t mmclient_slot_addr(const MMClient *mm, uint32_t slot) {
        return mm->staging_addr + (uint64_t)slot * ZSWAP_PAGE_SIZE;
}

/* Map the zero page at a staging slot if it is empty (UFFDIO_ZEROPAGE):
 * UFFDIO_MOVE refuses a populated destination, so a move into that slot
 * can no longer happen (docs/page-lifecycle.md). */
void mmclient_slot_poison(MMClient *mm, uint32_t slot);
/* The same, UFFDIO_ZEROPAGE only: 0 or -errno (-EAGAIN: an event is
 * queued, unread). */
int mmclient_slot_zero(MMClient *mm, uint32_t slot);

/* The pagemap words of npages pages from start. 0, -errno, -EIO if short. */
int mmclient_pagemap(MMClient *mm, uint64_t start, size_t npages, uint64_t *pm);

/* Is the process still alive (pidfd not readable), with the address space
 * it had when bound (no exec since)? */
bool mmclient_alive(MMClient *mm);
/* A fork child not attached yet: has the process that forked it exited? */
bool mmclient_parent_gone(const MMClient *mm);
/* Is mm's uffd left unread because its user has all the forked children
 * not attached it may (MMClient.orphans_stop)? Any thread. */
bool mmclient_orphans_stopped(MMClient *mm);

/* Read len bytes at remote addr of the client, through its mem fd (never
 * by pid). -ESRCH: the address space is gone (the process exited or
 * exec'd); -EFAULT: not mapped. */
/* A read of mm's memory at addr has waited past the bound (memread.h):
 * mm is not evicted while its user's reads count (memread_stuck(),
 * evict.c), said once. Any thread. */
void mmclient_read_overdue(MMClient *mm, uint64_t addr);

/* mmclient_read() into the calling thread's buffer (memread_view()): *out
 * is valid until its next read of a client's memory. */
int mmclient_read_view(MMClient *mm, uint64_t addr, size_t len, const uint8_t **out);
int mmclient_read(MMClient *mm, uint64_t addr, void *buf, size_t len);

/* Is [start, end) covered by private, anonymous, writable mappings of the
 * client (its maps fd, bound at mmclient_bind())? 0, -EINVAL, or -errno
 * reading maps. */
int mmclient_check_anon(MMClient *mm, uint64_t start, uint64_t end);
/* Is no page of n sorted, disjoint ranges mapped by anything but private,
 * anonymous, writable memory? Unlike mmclient_check_anon(), a part not
 * mapped at all passes: a store's table may keep a range an munmap took
 * until its event, pending on the uffd, is read (adopt.c). Maps read
 * once. 0, -EINVAL, or -errno reading maps. */
int mmclient_check_anon_ranges(MMClient *mm, const StoreRange *r, size_t n);

/* Does the address space behind uffd still exist? (A non-destructive
 * UFFDIO_WRITEPROTECT probe: -ESRCH once the mm is gone.) */
bool uffd_mm_alive(int uffd);
/* An event of uffd begun and not yet counted out by the kernel (its
 * message unread, or read and its thread not run since). */
bool uffd_event_under_way(int uffd);

/* Register [start, end) in the client's uffd: for write-protect faults
 * only where the uffd has WP_ASYNC (so the kernel serves every first
 * touch: unarmed; 0 or -errno), else for missing faults too (armed: 1).
 * Unregister it. */
int mmclient_uffd_register(MMClient *mm, uint64_t start, uint64_t end);
int mmclient_uffd_unregister(MMClient *mm, uint64_t start, uint64_t end);
/* Unregister every region mm has (they stay on its list). */
void mmclient_uffd_unregister_all(MMClient *mm);

/* quota_left with no quota: half the range, so that what takers give
 * back after the manager set it anew (a take, the tick's store of
 * QUOTA_NONE, the give) cannot overflow it into a negative budget, which
 * would refuse every page until the next tick. */
#define QUOTA_NONE (INT64_MAX / 2)

/* Take n pool bytes from mm's share of its user's max_pool (quota_left,
 * which the manager hands out every tick, users.c): true, or false with
 * nothing taken. mmclient_quota_give() gives them back (an allocation that
 * failed after all). Any thread. */
static inline bool mmclient_quota_take(MMClient *mm, int64_t n) {
        /* relaxed: a budget, not a synchronisation; the CAS-free debit may
         * let concurrent takers go below zero by what they took at once,
         * each of whom then gives it back */
        if (atomic_fetch_sub_explicit(&mm->quota_left, n, memory_order_relaxed) >= n)
                return true;
        atomic_fetch_add_explicit(&mm->quota_left, n, memory_order_relaxed);
        return false;
}

static inline void mmclient_quota_give(MMClient *mm, int64_t n) {
        /* relaxed: as mmclient_quota_take() */
        atomic_fetch_add_explicit(&mm->quota_left, n, memory_order_relaxed);
}
