/*
 * zswap.h: libzswap, the client side of zswapd.
 *
 * A program hands page-aligned private anonymous memory to the zswapd daemon.
 * The daemon may then compress pages of it out of the process and puts each
 * one back, byte for byte, the moment any thread (or the kernel, on behalf of
 * a system call) touches it. Memory stays at the same addresses; the program
 * notices only the time a fault takes.
 *
 * Every function returns 0 (or a count) on success and a negative errno value
 * on failure. None of them reads or writes errno. All functions are
 * thread-safe; one client handle serves every thread of a process.
 *
 * The library starts one helper thread per connection (the agent). It does
 * what only the process itself can do on the daemon's behalf: move pages out
 * of the address space atomically (UFFDIO_MOVE) and free staging memory.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default socket path of the daemon. */
#define ZSWAP_DEFAULT_SOCKET "/run/zswapd/zswapd.sock"

struct zswap_client;

/*
 * Connect to the daemon at socket_path (NULL: $ZSWAP_SOCKET, then
 * ZSWAP_DEFAULT_SOCKET), create this process's userfaultfd through it and
 * start the agent thread. Returns 0 and a handle in *ret, or
 * -ENOENT/-ECONNREFUSED (no daemon), -EPROTO (version mismatch), -EPERM
 * (the daemon's configuration does not admit this user: zswapd.conf(5)
 * [users] allow), -ECONNRESET or -EPIPE (the daemon closed the connection at
 * once: too many connections, or its user's max_connections), -ENOMEM.
 */
int zswap_connect(const char *socket_path, struct zswap_client **ret);

/*
 * Hand [addr, addr+len) to the daemon. addr and len must be multiples of the
 * page size and the range must be private, anonymous, writable memory that
 * is not yet registered. Returns -EINVAL for a bad range, -EEXIST if it
 * overlaps a registered range, -ENOSPC if a per-client limit is reached,
 * -EDQUOT if the user's max_regions or max_registered (zswapd.conf(5))
 * would be exceeded, -ENOTCONN if the daemon is gone.
 */
int zswap_register(struct zswap_client *c, void *addr, size_t len);

/*
 * Take [addr, addr+len) back: every evicted page in it is restored first,
 * then the range stops being managed. The range must be exactly one
 * registered range or lie inside one (the remainder stays registered).
 */
int zswap_unregister(struct zswap_client *c, void *addr, size_t len);

/*
 * Like madvise(MADV_PAGEOUT): compress the pages of the range out of the
 * process and return once they are out (or were found incompressible and
 * kept). Pages of the range that are not registered are left alone. Returns
 * the number of pages evicted by this call (>= 0), or a negative errno.
 */
int zswap_pageout(struct zswap_client *c, void *addr, size_t len);

/* Counters, as the daemon sees them. */
struct zswap_stats {
        uint64_t pool_bytes;           /* memory the compressed pool occupies */
        uint64_t compressed_bytes;     /* sum of the compressed objects' sizes */
        uint64_t stored_pages;         /* pages held compressed */
        uint64_t same_pages;           /* same-filled pages (no pool space) */
        uint64_t incompressible_pages; /* pages found incompressible, kept resident */
        uint64_t staged_pages;         /* pages moved out, not yet compressed */
        uint64_t original_bytes;       /* bytes of the pages held (stored + same) */
        uint64_t evictions;            /* pages evicted since start */
        uint64_t faults;               /* faults served since start */
        uint64_t faults_zero;          /* of which: no content held (zero fill) */
        uint64_t clients;              /* connected clients (processes) */
        uint64_t registered_bytes;     /* bytes registered */
        uint64_t prefetches;           /* pages installed ahead of use: of a sequential reader, or by fault history */
        /* reclaim (docs/reclaim.md) */
        uint64_t resident_bytes;       /* managed memory resident in the client(s), as of the last reclaim tick */
        uint64_t limit_bytes;          /* resident limit in force (client scope; 0: none) */
        uint64_t refaults;             /* faults that brought back a page the daemon held */
        uint64_t clean_pages;          /* resident pages whose compressed copy is kept (not written since) */
        uint64_t clean_bytes;          /* pool bytes those copies take */
        uint64_t clean_reevictions;    /* evictions that reused a kept copy: no compression */
        uint64_t reclaim_evictions;    /* pages evicted by the daemon's own policies (limit, idle, pressure) */
        uint64_t thrash_backoffs;      /* times a 2 MiB zone was backed off for refaulting too fast */
        uint64_t pool_full_events;     /* times eviction stopped at the pool bound */
};

enum zswap_stats_scope {
        ZSWAP_STATS_CLIENT = 0, /* this process only */
        ZSWAP_STATS_GLOBAL = 1, /* the whole daemon */
};

/*
 * Keep this process's resident managed memory under bytes (0: no limit):
 * the daemon evicts its coldest pages, continuously and in batches, like
 * cgroup memory.high. Returns 0 or -errno (-ENOTCONN, -EINVAL).
 */
int zswap_set_limit(struct zswap_client *c, uint64_t bytes);

/* Fill *ret with the counters of one scope. */
int zswap_get_stats(struct zswap_client *c, enum zswap_stats_scope scope, struct zswap_stats *ret);

/*
 * How long the library looks for a new daemon after the one serving c dies
 * (it tries every 50 ms): a daemon restarted on the same socket within
 * timeout_ms takes c's memory over and c goes on as if nothing happened.
 * Meanwhile threads touching evicted pages wait, and calls on c fail with
 * -ENOTCONN. After timeout_ms (0: at once) the library puts every evicted
 * page back itself and c is detached for good: the program keeps all its
 * data, calls on c fail with -ENOTCONN. The default comes from the
 * environment variable ZSWAP_RECONNECT_TIMEOUT (seconds, decimal) at
 * zswap_connect(), 10 seconds if it is unset. A daemon too old to hand the
 * library a copy of what it holds allows no recovery: threads touching
 * evicted pages then wait for good. Returns 0, or -EINVAL for a NULL c.
 */
int zswap_set_reconnect_timeout(struct zswap_client *c, unsigned timeout_ms);

/*
 * Disconnect. Registered ranges are restored and unregistered first, so the
 * process keeps all its data (also while the library is recovering from a
 * daemon's death: it then restores them itself at once). Accepts NULL.
 */
void zswap_disconnect(struct zswap_client *c);

#ifdef __cplusplus
}
#endif
