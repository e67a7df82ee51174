/*
 * manager.h: the daemon as a whole and its control connections.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "codec.h"
#include "config.h"
#include "inbox.h"
#include "mmclient.h"
#include "pool.h"
#include "report.h"
#include "tier.h"
#include "tunables.h"

typedef struct Evictor Evictor;
typedef struct Closer Closer;

typedef struct ManagerConfig {
        const char *socket_path;
        CodecKind codec;
        int level;
        unsigned workers;       /* compression workers */
        unsigned batch_pages;   /* pages per eviction batch, 1..ZSWAP_BATCH_MAX */
        int worker_nice;        /* workers' nice value (unless SCHED_IDLE) */
        bool worker_sched_idle; /* workers run SCHED_IDLE */
        unsigned fault_threads; /* threads serving faults */
        unsigned fault_spin_us; /* poll this long after a fault before sleeping */
        bool fault_pin;         /* pin fault thread i to CPU i when there is one per CPU */
        bool fault_shared;      /* every fault thread watches every uffd (else: the home thread only) */
        unsigned fault_rt_prio; /* fault threads SCHED_FIFO at this priority, 0: time-shared */
        uint64_t pool_max;      /* bytes, 0 = unlimited */
        uint32_t max_compressed; /* larger compressed pages are incompressible */
        uint64_t max_regions;   /* per client */
        uint64_t max_registered; /* bytes per client */
        unsigned max_clients;   /* connections in all */
        int listen_fd;          /* from socket activation, or -1 */
        bool lock_memory;       /* mlockall the daemon (sandbox.c) */
        bool sandbox;           /* drop capabilities, install the syscall filter (sandbox.c) */
        const char *config_path; /* zswapd.conf(5), reread on SIGHUP; NULL: none */
        char **sets;            /* --set KEY=VALUE, applied after the file */
        size_t nsets;
        uint32_t cli_set;       /* bit DKEY_*: given on the command line, which wins over the file */
        bool allow_all;         /* --allow-users: every user may be a client, whatever the file says */
        const Config *conf;     /* the file as read at start (manager_new copies it) */
} ManagerConfig;

/*
 * A control connection. Every field is the manager thread's: it accepts,
 * reads, answers and frees connections, and no other thread ever sees a
 * Conn (work coming back names one by its serial: sync_done()). Set at
 * accept and constant: m, fd, pid, pidfd, uid, gid, groups, ngroups,
 * serial; the rest as each says.
 */
struct Conn {
        Manager *m;
        int fd;
        int role;          /* ZRole, 0 before HELLO (set once, do_hello()) */
        pid_t pid;
        int pidfd;         /* the peer process, taken at connect (SO_PEERPIDFD): identity is this, not pid */
        uid_t uid;
        gid_t gid;
        gid_t *groups;     /* primary and supplementary groups (SO_PEERGROUPS) */
        size_t ngroups;
        bool scm_known;    /* scm_uid, scm_gid: the SCM_CREDENTIALS of its first message */
        uid_t scm_uid;     /* (real ids: a later message with others is refused) */
        gid_t scm_gid;
        bool throttled;    /* over its user's request rate: out of epoll until the tick (users.c) */
        MMClient *mm;      /* role CLIENT/CHILD after ATTACH */
        bool dying;
        unsigned errors;   /* protocol errors so far */
        uint64_t serial;   /* unique for the daemon's life: conns are found by it */
        Conn *next;        /* m->conns */
};

/*
 * The daemon. Threads: the manager (the thread in manager_run(), and
 * manager_new()/manager_free() around it), the fault threads, the
 * compression workers, the tier's writer and the closer. Each group of
 * fields below says who writes it and how the others read it.
 */
struct Manager {
        /* Set by manager_new() before it starts any other thread (fts,
         * nfts, evictor: as it starts them, before any client exists, so
         * before any thread can look at them), constant until
         * manager_free() has stopped the threads: any thread reads them
         * without a lock */
        ManagerConfig cfg;
        PoolShared *pools;    /* counters and bound of every client's pool (pool.c: its own atomics) */
        uint64_t daemon_id;   /* random, names this instance in the stores it owns */

        /* manager thread only */
        bool handover;        /* exiting without restoring: clients wait for the next daemon */
        int epfd;
        int listen_fd;

        Inbox inbox;       /* work from workers and fault threads: any thread pushes, the manager takes (mpsc.h) */

        /* set before the other threads start, constant (see cfg) */
        Closer *closer;    /* closes what clients sent off this thread (closer.c); any thread hands it fds */

        /* manager thread only */
        int timer_fd;      /* periodic maintenance */
        int signal_fd;
        bool exiting;
        bool listen_paused; /* out of fds: listen socket out of epoll until the next tick */
        /* systemd (sd-daemon.c), manager thread only: WATCHDOG=1 every
         * watchdog_ns (half systemd's interval, 0: none); STATUS= when it
         * changed, at most every few seconds */
        uint64_t watchdog_ns, watchdog_last_ns, status_last_ns;
        char status[128];

        /* set before any client exists, constant (see cfg) */
        FaultThread **fts;
        unsigned nfts;
        Evictor *evictor;     /* the manager's (evict.c submits to it) */
        Tier *tier;           /* the second tier ([tier] backing), or NULL (tier.h) */

        /* manager thread only */
        Config conf;       /* zswapd.conf in force: [daemon] as read at start, [users] as of the last reload */
        struct UserState *users; /* users with connections or clients (users.c) */
        Conn *conns;
        unsigned nconns;
        MMClient *mms;
        uint64_t next_mm_id;
        uint64_t next_conn_serial;

        /* children created by UFFD_EVENT_FORK that no process has claimed
         * yet: a fault thread pushes one onto orphans_new without a lock
         * (manager_adopt_orphan); the manager moves them to orphans, its
         * own list, whenever it looks (manager_orphans) */
        _Atomic(MMClient *) orphans_new;
        MMClient *orphans;

        /* global counters, relaxed atomics: any thread adds, the manager
         * reads them for statistics and logs; nothing is ordered by them */
        _Atomic uint64_t faults, faults_zero, prefetches, evictions, protocol_errors, moves_revoked, zero_ahead;
        _Atomic uint64_t write_scans, write_zones_out; /* reclaim.c write_scan() */
        _Atomic uint64_t move_misreports; /* pages UFFDIO_MOVE moved otherwise than it said (evict.c) */

        /* reclaim (reclaim.c): tunables owned by the manager thread, and
         * the copies other threads read */
        Tunables tun;          /* manager thread only */
        /* what the kernel offers (probe_features()): set before the other
         * threads start, constant (see cfg) */
        bool wp_async;         /* the kernel offers UFFD_FEATURE_WP_ASYNC: writes are tracked */
        bool pagemap_scan;     /* PAGEMAP_SCAN works on pagemap */
        uint64_t zero_pfn;     /* the zero page's frame as pagemap shows it (0: not shown) */
        bool uffd_poison;      /* UFFD_FEATURE_POISON: a lost page becomes a SIGBUS (tier.c) */
        /* copies of tunables, written by the manager (reclaim_apply()),
         * read by fault threads, workers and the tier's writer: relaxed,
         * each is a setting on its own (a thread that reads the old one a
         * moment longer acts as if it had read it a moment earlier;
         * pool_bound and pool_resume may be seen from two applies, and
         * both are hints the pool's own counters decide) */
        _Atomic bool keep_clean;
        _Atomic uint32_t clean_max_permille; /* tun.clean_max, for the fault threads */
        _Atomic uint64_t pool_bound, pool_resume; /* bytes; 0: no bound */
        /* the pool is at its bound: set and cleared by whichever of the
         * workers and the manager sees the pool cross pool_bound or
         * pool_resume (reclaim_pool_accepts(): an exchange, so one of
         * them logs it), and by the manager when the bound changes;
         * relaxed, a hint that the pool's own counters decide */
        _Atomic bool pool_full;
        _Atomic uint64_t pool_full_events; /* times it was set: a relaxed counter */
        /* manager thread only (reclaim.c) */
        uint64_t reclaim_last_ms, pressure_last_ms;
        double psi_now;        /* memory stall share (PSI "some") over the last period, percent */
        uint64_t psi_total, psi_total_ms; /* the PSI total (µs) read then, and when */
        uint64_t avail_now;    /* last MemAvailable read, bytes */
        uint64_t hold_target;  /* pages the pressure controller wants held out */

        ReportState report;    /* counters' recent samples, for rates (report.c); manager thread only */
};

/* The exit status after SIGUSR1: clients handed over, start the next
 * daemon (EX_TEMPFAIL). */
#define ZSWAPD_EXIT_HANDOVER 75

int manager_new(const ManagerConfig *cfg, Manager **ret);
/* Give back deferred pool releases and empty chunks, of every client. */
void manager_pool_reclaim(Manager *m);
/* The configuration of cfg: the defaults, then the file, then each --set.
 * On error, err says which and why ("path:line: ..." or "--set KEY=VALUE:
 * ..."). ret must be config_free()d. */
int manager_build_config(const ManagerConfig *cfg, Config *ret, char *err, size_t len);
Manager *manager_free(Manager *m);
int manager_run(Manager *m);

/* Work the manager receives from workers and fault threads. */
enum {
        MW_BATCH_DONE = 100, /* a worker compressed lane `lane` of mm; v = pages stored */
        MW_RESTORE_DONE,     /* a fault thread restored [a, b) of mm for request id */
        MW_SYNC_DONE,        /* a fault thread caught up with mm's events: run the request */
};
void manager_post(Manager *m, Work *w);

/* From any thread: hand a new fork child to the manager. */
void manager_adopt_orphan(Manager *m, MMClient *child);
/* manager thread: the orphans, with those pushed since the last look */
MMClient *manager_orphans(Manager *m);

/* Send a reply to a request (manager thread). */
void conn_reply(Conn *c, uint32_t id, int status, int64_t value);
/* Drop a connection after a protocol violation (manager thread). */
void conn_kill(Conn *c, const char *why);
/* Root or a member of the admin group (zswapd.conf [users] admin_group). */
bool conn_admin(Manager *m, Conn *c);
