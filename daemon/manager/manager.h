/*
 * manager.h: the daemon as a whole: what main.c starts and runs, and the
 * Manager the manager's files share. A connection (Conn) and the calls
 * between those files are theirs only (manager-internal.h).
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "calibrate.h"
#include "config.h"
#include "core.h"
#include "macro.h"
#include "mmclient.h"
#include "reclaim.h"
#include "recompress.h"
#include "report.h"

typedef struct Manager Manager;

typedef struct ManagerConfig {
        const char *socket_path;
        CodecKind codec;
        int level;
        unsigned workers;       /* compression workers */
        unsigned batch_pages;   /* pages per eviction batch, 1..ZSWAP_BATCH_MAX */
        int worker_nice;        /* workers' nice value (unless SCHED_IDLE) */
        bool worker_sched_idle; /* workers run SCHED_IDLE */
        unsigned fault_threads; /* threads serving faults */
        unsigned fault_spin_us; /* poll this long after a fault before sleeping; FAULT_SPIN_AUTO: measured at start */
        FaultWake fault_wake;   /* shared service: how many threads a fault wakes; auto: measured at start */
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
 * The daemon. Threads: the manager (the thread in manager_run(), and
 * manager_new()/manager_free() around it), the fault threads, the
 * compression workers, the tier's writer and the closer. What the layers
 * below share of it is the Core (core.h); the rest is the manager's. Each
 * group of fields below says who writes it and how the others read it.
 */
/* A limit the operator gave every group of a name (groups.c). */
#define GROUP_LIMITS_MAX 64
typedef struct GroupLimit {
        char name[ZSWAP_GROUP_NAME_MAX];
        uint64_t limit;
} GroupLimit;

struct Manager {
        /* first: manager_of() casts back from the Core the layers below see */
        Core core;
        /* set by manager_new() before it starts any other thread, constant */
        ManagerConfig cfg;

        /* manager thread only; the loop's (loop.c) but where a field says */
        bool handover;        /* exiting without restoring: clients wait for the next daemon (SIGUSR1) */
        int epfd;
        int listen_fd;
        int timer_fd;      /* periodic maintenance */
        int signal_fd;
        bool exiting;      /* a signal to exit came: the loop ends */
        bool listen_paused; /* out of fds: listen socket out of epoll (conn.c, conn_accept()) until the next tick */
        bool spares_said;   /* every spare fault thread started and held: said once (loop.c fault_spare()) */
        /* systemd (sd-daemon.c), manager thread only (notify.c; watchdog_ns
         * and the first watchdog_last_ns: manager_run()): WATCHDOG=1 every
         * watchdog_ns (half systemd's interval, 0: none); STATUS= when it
         * changed, at most every few seconds */
        uint64_t watchdog_ns, watchdog_last_ns, status_last_ns;
        char status[128];

        /* manager thread only */
        Config conf;       /* zswapd.conf in force: [daemon] as read at start, [users] as of the last reload (reload.c) */
        struct UserState *users; /* users with connections or clients (users.c) */
        Conn *conns;       /* every connection (conn.c: conn_accept(), conn_free()) */
        unsigned nconns;   /* their number (conn.c) */
        MMClient *mms;     /* the clients served (clients.c: mm_link(), mm_retire()) */
        uint64_t next_mm_id; /* the last client id given (clients.c mm_serve(), attach.c) */
        uint64_t next_conn_serial; /* the last Conn.serial given (conn.c) */
        /* fork children no process has claimed yet, taken from
         * core.orphans_new whenever the manager looks (manager_orphans(),
         * clients.c); one leaves when a CHILD_ATTACH claims it (attach.c)
         * or its process exits (tick_orphans()) */
        MMClient *orphans;
        /* the clients whose ADOPT's walk runs (attach.c, AdoptWalk), not
         * served yet: their pools count for their users (users.c) */
        MMClient *adopting;
        /* the users' shared stores (dedups.c), a reference each */
        Dedup **dedups;
        size_t ndedups;

        /* the reclaim policy's state and tunables (reclaim.c); manager thread only */
        Reclaim reclaim;
        /* the strong tier's recompressor (recompress.c); manager thread only */
        Recompressor recomp;
        /* the operator's limits by group name (groups.c); manager thread only */
        GroupLimit group_limits[GROUP_LIMITS_MAX];
        unsigned ngroup_limits;
        ReportState report;    /* counters' recent samples, for rates (report.c); manager thread only */
};

/* The exit status after SIGUSR1: clients handed over, start the next
 * daemon (EX_TEMPFAIL). */
#define ZSWAPD_EXIT_HANDOVER 75

/*
 * The command line's starting point, from config_settings[]: the [daemon]
 * settings of d (config_default()'s, which must outlive cfg: socket_path
 * points into it; $ZSWAP_SOCKET wins for the socket) with workers and
 * fault_threads "auto" as ncpu, and the command-line-only settings.
 * Fields that are no setting (listen_fd, the per-client caps) get their
 * fixed values too.
 */
void manager_config_defaults(ManagerConfig *cfg, const DaemonConf *d, unsigned ncpu);
/* d's [daemon] settings whose bit (1 << DKEY_*) is in keys, onto cfg. */
void manager_config_apply(ManagerConfig *cfg, const DaemonConf *d, uint32_t keys, unsigned ncpu);

int manager_new(const ManagerConfig *cfg, Manager **ret);
/* Give back deferred pool releases and empty chunks, of every client. */
void manager_pool_reclaim(Manager *m);
/* The same, once a second: empty chunks are kept warm a while (pool_trim()). */
void manager_pool_trim(Manager *m);
/* Compact the pools of the clients that can be (pool_compact). */
void manager_pool_compact(Manager *m);
/* The configuration of cfg: the defaults, then the file, then each --set.
 * On error, err says which and why ("path:line: ..." or "--set KEY=VALUE:
 * ..."). ret must be config_free()d. */
int manager_build_config(const ManagerConfig *cfg, Config *ret, char *err, size_t len);
Manager *manager_free(Manager *m);
int manager_run(Manager *m);

/* The one up-cast: the Manager whose Core the layers below were handed. */
static inline Manager *manager_of(Core *core) {
        return container_of(core, Manager, core);
}

/* manager thread: the orphans, with those pushed since the last look */
MMClient *manager_orphans(Manager *m);

