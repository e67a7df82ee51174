/*
 * core.h: what every layer below the manager shares of the daemon.
 *
 * The manager (daemon/manager) owns the daemon; the layers under it (the
 * client address spaces, the fault threads, eviction, writeback) never see
 * the Manager. They see this: the settings they run by, the daemon-wide
 * counters they add to, the pieces the manager built for them (the pools'
 * shared counters, the closer, the second tier, the fault threads, the
 * evictor), and the way back up: work posted to the manager's inbox, and
 * the callbacks in CoreOps, which the manager sets when it builds the Core.
 * The Manager embeds its Core; manager_of() in manager.h is the one
 * up-cast, and only the manager's layer uses it.
 *
 * Each group of fields says who writes it and how the others read it.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "codec.h"
#include "inbox.h"

typedef struct Core Core;
typedef struct Conn Conn; /* a control connection: the manager's, opaque below it */
typedef struct MMClient MMClient;
typedef struct FaultThread FaultThread;
typedef struct Evictor Evictor;
typedef struct Closer Closer;
typedef struct Tier Tier;
typedef struct PoolShared PoolShared;
typedef struct Pool Pool;

/* The settings the lower layers run by (the manager copies them from its
 * configuration at start; constant). */
#define RESCUE_LEVEL_MAX 3 /* zstd level of the workers' rescue of incompressible pages, at most */

typedef struct CoreConfig {
        CodecKind codec;
        int level;
        unsigned batch_pages;    /* pages per eviction batch, 1..ZSWAP_BATCH_MAX */
        int worker_nice;         /* compression workers' nice value (unless SCHED_IDLE) */
        bool worker_sched_idle;  /* compression workers run SCHED_IDLE */
        uint32_t max_compressed; /* larger compressed pages are incompressible */
        uint64_t max_regions;    /* per client */
        uint64_t max_registered; /* bytes per client */
        unsigned fault_threads;  /* threads serving faults */
        unsigned fault_spin_us;  /* poll this long after a fault before sleeping (measured, if it was auto) */
        bool fault_wake_one;     /* a fault wakes one sleeping thread (EPOLLEXCLUSIVE), not all; only with fault_shared */
        bool fault_pin;          /* pin fault thread i to CPU i when there is one per CPU */
        bool fault_shared;       /* every fault thread watches every uffd (else: the home thread only) */
        unsigned fault_rt_prio;  /* fault threads SCHED_FIFO at this priority, 0: time-shared */
} CoreConfig;

/* Calls up into the manager. Each runs on the manager thread only (the
 * lower layers call them from the manager's own calls into them), except
 * mm_release, which runs on whichever thread lets go of a client's last
 * reference. */
typedef struct CoreOps {
        /* answer request id of connection c */
        void (*reply)(Conn *c, uint32_t id, int status, int64_t value);
        /* drop connection c, which broke the protocol or stopped reading */
        void (*kill)(Conn *c, const char *why);
        /* send msg to the process on connection c without waiting: < 0
         * (-errno) if it could not take the whole message now */
        int (*send)(Conn *c, const void *msg, size_t len);
        /* give back deferred pool releases and empty chunks, of every client */
        void (*pool_reclaim)(Core *core);
        /* the last reference to mm is going: let go of what the layers
         * above the client's own state hang on it (retries, kept copies) */
        void (*mm_release)(MMClient *mm);
} CoreOps;

/* Work the manager receives from workers and fault threads (core_post()). */
enum {
        MW_BATCH_DONE = 100, /* a worker compressed lane `lane` of mm; v = pages stored */
        MW_RESTORE_DONE,     /* a fault thread restored [a, b) of mm for request id */
        MW_SYNC_DONE,        /* a fault thread caught up with mm's events: run the request */
        MW_REFILL_DONE,      /* a fault thread ended a refill of mm (FW_REFILL); a = pages it brought back */
        MW_RECOMP_DONE,      /* a worker ended a recompression job (data: its RecompJob, recompress.h) */
        MW_EVENTS_ASK,       /* a fault thread asks whether mm's uffd has an event under way; a = mm->remap_seq then */
};

#define CORE_ORPHAN_USERS 1024 /* users with forked children not attached at once */
#define CORE_FAULT_SPARES 4 /* fault threads started when every one is held (manager/loop.c fault_spare()) */
#define CORE_FAULT_THREADS_MAX (64 + CORE_FAULT_SPARES) /* --fault-threads at most, and the spares */

struct Core {
        /* Set by the manager before it starts any other thread (fts,
         * evictor, tier: as it starts them, before any client exists, so
         * before any thread can look at them), constant until it has
         * stopped the threads: any thread reads them without a lock (but
         * nfts, which spares grow: below) */
        CoreConfig cfg;
        const CoreOps *ops;
        PoolShared *pools;    /* counters and bound of every client's pool (pool.c: its own atomics) */
        uint64_t daemon_id;   /* random, names this instance in the stores it owns */
        Closer *closer;       /* closes what clients sent off this thread (closer.c); any thread hands it fds */
        /* the fault threads: fts has room for cfg.fault_threads and
         * CORE_FAULT_SPARES more, which the manager starts when every
         * thread is held in a call into a client (fault_spare()): it
         * writes the new entry, then nfts (release; a reader's load is
         * acquire, or the seq_cst of a plain one). nfts never shrinks
         * before the threads stop */
        FaultThread **fts;
        _Atomic unsigned nfts;
        Evictor *evictor;     /* the compression workers (evict.c) */
        Tier *tier;           /* the second tier ([tier] backing), or NULL (tier.h) */
        /* what the kernel offers (probed at start): constant */
        bool wp_async;        /* UFFD_FEATURE_WP_ASYNC: writes are tracked */
        bool pagemap_scan;    /* PAGEMAP_SCAN works on pagemap */
        uint64_t zero_pfn;    /* the zero page's frame as pagemap shows it (0: not shown) */
        bool uffd_poison;     /* UFFD_FEATURE_POISON: a lost page becomes a SIGBUS (tier.c) */

        /* work for the manager: any thread pushes (core_post()), the
         * manager takes (mpsc.h) */
        Inbox inbox;
        /* children created by UFFD_EVENT_FORK that no process has claimed
         * yet: a fault thread pushes one without a lock (core_adopt_orphan());
         * the manager takes them whenever it looks */
        _Atomic(MMClient *) orphans_new;
        /* how many of those each user has, from their fork event until
         * they attach or exit (core_orphans_add()): a user at its bound
         * forks no more (event_fork()). orphan_lock guards the table;
         * only fork events and the manager take it. orphans_unbounded:
         * the daemon is exiting, nothing is held for the bound any more */
        pthread_mutex_t orphan_lock;
        struct {
                uid_t uid;
                uint32_t n; /* 0: a free slot */
        } orphan_users[CORE_ORPHAN_USERS];
        _Atomic bool orphans_unbounded;

        /* The user each fault thread has been in one call into a client
         * of for a while (uid + 1; 0: none), and how many such threads
         * there are: a call into a client can wait for the client's mmap
         * lock, which the client can hold as long as it likes. While a
         * client of a user holds one, no other thread calls into any of
         * that user's clients (core_user_held()), so that one user cannot
         * hold every fault thread one after the other. Written by the
         * manager each tick (fault_threads_held()), read by any thread:
         * relaxed, a hint at most a tick old */
        _Atomic uint64_t held_uid[CORE_FAULT_THREADS_MAX];
        _Atomic unsigned held_threads;
        /* a fault thread left a client's uffd unread for that
         * (MMClient.parked) since the manager last looked: release after
         * the client's flag, which the manager's acquire exchange sees */
        _Atomic bool parked_any;

        /* global counters, relaxed atomics: any thread adds, the manager
         * reads them for statistics and logs; nothing is ordered by them */
        _Atomic uint64_t faults, faults_zero, prefetches, evictions, protocol_errors, moves_revoked, zero_ahead;
        _Atomic uint64_t refilled; /* pages brought back ahead of use (reclaim.c, refill) */
        _Atomic uint64_t history_prefetched; /* pages a fault brought back by its history (serve.c) */
        _Atomic uint64_t history_right, history_wrong; /* faults its history foresaw, or not (serve.c) */
        _Atomic uint64_t calls_held, work_taken; /* fault threads held in a call, and their work taken (work.c) */
        _Atomic uint64_t write_scans, write_zones_out; /* reclaim.c write_scan() */
        _Atomic uint64_t move_misreports; /* pages UFFDIO_MOVE moved otherwise than it said (evict.c) */
        /* the strong tier (recompress.c): pages recompressed, the pool
         * bytes that saved, the CPU time it took (worker and manager);
         * incompressible pages the strong codec stored (workers.c) */
        _Atomic uint64_t recompressed, recompress_saved, recompress_cpu_ns, strong_rescued;
        _Atomic uint64_t pool_corrupt; /* pages lost: their object failed to decompress (serve.c) */
        /* dictionaries (recompress.c): trained and kept, refused, the
         * training's CPU time */
        _Atomic uint64_t dicts_trained, dicts_refused, dict_train_cpu_ns;

        /* copies of the run-time tunables, written by the manager
         * (reclaim_apply()), read by fault threads, workers and the tier's
         * writer: relaxed, each is a setting on its own (a thread that
         * reads the old one a moment longer acts as if it had read it a
         * moment earlier; pool_bound and pool_resume may be seen from two
         * applies, and both are hints the pool's own counters decide) */
        _Atomic bool keep_clean;
        _Atomic bool fault_history; /* tunable fault_history (serve.c history_follow()) */
        _Atomic bool dedup; /* tunable dedup: workers store in shared stores (dedup.h) */
        _Atomic uint32_t strong_level; /* tunable recompress_level, at most RESCUE_LEVEL_MAX: the workers' rescue */
        _Atomic uint32_t clean_max_permille; /* tunable clean_max, for the fault threads */
        _Atomic uint64_t pool_bound, pool_resume; /* bytes; 0: no bound */
        /* the pool is at its bound: set and cleared by whichever of the
         * workers and the manager sees the pool cross pool_bound or
         * pool_resume (core_pool_accepts(): an exchange, so one of
         * them logs it), and by the manager when the bound changes;
         * relaxed, a hint that the pool's own counters decide */
        _Atomic bool pool_full;
        _Atomic uint64_t pool_full_events; /* times it was set: a relaxed counter */
};

/* Any thread: hand w (and the reference it holds) to the manager. */
static inline void core_post(Core *core, Work *w) {
        inbox_push(&core->inbox, w);
}

/* Any thread: hand a new fork child (and our reference) to the manager; a
 * push, never a wait for the manager (which may be in pool_reclaim or
 * madvise). */
void core_adopt_orphan(Core *core, MMClient *child);
/* Manager thread: the children pushed since the last call, oldest last. */
MMClient *core_take_orphans(Core *core);
/* Any thread: one more, or one fewer, forked child of uid not attached
 * yet; how many it has now (0 from a full table: not counted). */
uint32_t core_orphans_add(Core *core, uid_t uid, int delta);

/* The index of the fault thread this thread is, -1 on any other (set by
 * the fault thread as it starts). */
extern __thread int core_fault_idx;

/* Does a fault thread other than this one wait in a call into a client of
 * uid (held_uid)? Then this thread puts off its work for uid's clients.
 * Any thread; one load while no thread is held. */
static inline bool core_user_held(Core *core, uid_t uid) {
        if (!core || !atomic_load_explicit(&core->held_threads, memory_order_relaxed))
                return false;
        for (unsigned i = 0; i < core->nfts && i < CORE_FAULT_THREADS_MAX; i++)
                if ((int)i != core_fault_idx &&
                    atomic_load_explicit(&core->held_uid[i], memory_order_relaxed) == (uint64_t)uid + 1)
                        return true;
        return false;
}

/* Is eviction allowed to add to the pool now (pool bound hysteresis)?
 * Any thread. */
bool core_pool_accepts(Core *core);
/* Does an object of len bytes fit under the pool bound (pool_max) as the
 * pool is now? No hysteresis: for copies that are not evictions (a fork's
 * copy, an adopted store's objects), which go resident instead when it
 * does not. Any thread. */
bool core_pool_room(Core *core, uint64_t len);
/* May the pools keep their empty chunks warm a while (pool_trim())? Not
 * once the pools come near the mark where eviction resumes after the bound
 * (80 % of it), where the second tier's writer starts at 95 %: chunks kept
 * must never stop eviction nor send pages to the second tier. Any thread. */
bool core_pool_keeps(Core *core);
/* pool_trim() of p at the core's pool_keeps(). */
void core_pool_trim(Core *core, Pool *p);
