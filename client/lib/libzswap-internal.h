/*
 * libzswap-internal.h: what the preload shim (preload.c), linked with
 * libzswap statically, needs beyond the public API. Not installed, not
 * exported from libzswap.so.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "zswap.h"

typedef struct ZswapSpan {
        uint64_t start, end;
} ZswapSpan;

/* Memory of the client itself that must never be managed: its staging
 * area, its agent thread's stack and every mapping of the library's own
 * (zswap_own_mappings()). Fills up to max spans; returns how many. */
size_t zswap_client_own_memory(struct zswap_client *c, ZswapSpan *spans, size_t max);

/* The mappings zswap_scratch_alloc() made that are still there, up to max
 * (at most ZSWAP_OWN_MAPS): the shim subtracts them from what it manages
 * where the kernel cannot name them [anon:zswap] (no CONFIG_ANON_VMA_NAME:
 * prctl(PR_SET_VMA) fails with EINVAL, as on this project's machines). */
#define ZSWAP_OWN_MAPS 64
size_t zswap_own_mappings(ZswapSpan *spans, size_t max);

/* What one restore from a store did (zswap_store_restore()). */
typedef struct ZswapRestoreStats {
        uint64_t restored; /* pages installed from the store */
        uint64_t present;  /* entries whose page was in place already (EEXIST) */
        uint64_t gone;     /* entries whose address was unmapped, discarded or no
                            * longer registered: nothing to install */
        uint64_t bad;      /* entries whose content failed the store's checks (a
                            * tampered store): left to the kernel, they read as zeros */
        uint64_t children; /* forked children (UFFD_EVENT_FORK) served on the way */
        uint64_t tier;     /* entries whose data was on the daemon's second tier, which
                            * only a daemon can read: poisoned (SIGBUS on access) where
                            * the uffd allows it, rather than left to read as zeros */
} ZswapRestoreStats;

/*
 * Install every page a store holds into the address space of uffd, from
 * this process (the daemon that served uffd is gone): STORED and SAME pages
 * decoded, MOVING and STAGED pages copied from their slot of the staging
 * area [staging, staging + staging_len), which must be this process's.
 * Address-space events met on the way (EAGAIN) are read and followed:
 * REMOVE/UNMAP ranges are skipped, REMAP moves what is left to install,
 * FORK gets the child filled the same way through its new uffd, which is
 * then closed. Ends with UFFDIO_UNREGISTER of the store's ranges, ranges[]
 * and where REMAP moved them, which wakes every thread still waiting; the
 * caller closes uffd. Counts go to *st (added). Returns 0, or -EBADMSG /
 * -EBADF when the store could not be read at all (nothing installed, the
 * ranges still unregistered), -ENOMEM.
 *
 * It never calls malloc() or stdio: glibc's fork() holds their locks while
 * the kernel waits for the FORK event to be read, by this very function.
 * So dctx[codec] (indexed by CodecKind, NULL entries allowed) must hold a
 * decompression context for the store's codec, made beforehand; without
 * one it is made here, which deadlocks if a fork is pending.
 *
 * shared_fd (-1: none) is the store's shared store, the daemon's store of
 * its user's pages shared with other processes (PE_SHARED entries); one
 * the store does not name is not used, and such pages count as bad.
 */
int zswap_store_restore(int uffd, int store_fd, int shared_fd, CodecDCtx *const *dctx, uint64_t staging,
                        uint64_t staging_len, const ZswapSpan *ranges, size_t nranges, ZswapRestoreStats *st);

/*
 * In a forked child whose daemon died before it attached: the kernel
 * unregistered our memory with the uffd only that daemon held, and the
 * pages the parent had evicted at the fork are missing from it. Write
 * each back in place from the parent's store, which we inherited and
 * which the daemon kept as it was at the fork until we attached
 * (daemon/fault/fork.c, fork_held()): pages in place are left alone, and only
 * anonymous memory inside ranges[] is written, whatever the store says.
 * Only a store whose daemon our fork was announced to (fork_announced is
 * our token) is used. 0; -ESTALE if the store changed after the fork
 * (StoreSuper.fork_served is our token), names another fork, or was
 * released; -EREMOTE if a page is lost all the same (on the daemon's
 * second tier, or failing the store's checks); -EBADMSG etc. if the store
 * cannot be read.
 */
int zswap_store_restore_forked(int store_fd, int shared_fd, CodecDCtx *const *dctx, uint64_t fork_token, uint64_t staging,
                               uint64_t staging_len, const ZswapSpan *ranges, size_t nranges,
                               ZswapRestoreStats *st);

/* Memory from mmap() rather than malloc(), for what runs while a fork may
 * wait for us (zswap_store_restore()): NULL if there is none. */
void *zswap_scratch_alloc(size_t len);
void zswap_scratch_free(void *p, size_t len);

/* Every mapping the library makes for itself is named ZSWAP_OWN_NAME
 * (protocol.h): the shim never registers one, and the daemon refuses to. */
/* Zeroed objects of the library's own, off the program's heap (restore.c). */
void *zswap_mem_alloc(size_t n);
void zswap_mem_free(void *p);
void *zswap_mem_realloc(void *p, size_t n);
/* The same, for a decompression context (zstd's workspace included). */
extern const CodecAlloc zswap_own_alloc;

/* What this library tells the daemon it understands in every HELLO
 * (protocol.h ZHELLO_F_*): all it does. Tests set it to 0 to be a library
 * older than the strong tier (tests/integration/test-recompress.c). */
extern uint32_t zswap_hello_features;

/* What a client's recoveries from daemon loss did, since it connected. */
typedef struct ZswapRecovery {
        uint64_t losses;      /* times the connection was lost with a store to recover */
        uint64_t adopted;     /* a new daemon took the store over (ZMSG_ADOPT) */
        uint64_t reattached;  /* attached anew (store released, or restored first) */
        uint64_t restores;    /* restores from the store by the library itself */
        uint64_t detached;    /* recoveries that ended with no daemon (timeout) */
        int last_adopt_status; /* the last ADOPT answer (0, -EBUSY, ...), 1: none yet */
        ZswapRestoreStats restore; /* summed over the restores */
} ZswapRecovery;

/* A copy of c's recovery counters (taken under its lock). */
void zswap_client_recovery(struct zswap_client *c, ZswapRecovery *ret);

/* True on a thread while it does the library's own work (the agent, for
 * its life; preload.c's scanner, its fork handler and its connect): the
 * shim's close() keeps the library's descriptors from the program, not
 * from the library. initial-exec: read from a signal handler's close(). */
extern __thread bool zswap_self __attribute__((tls_model("initial-exec")));

/* Install the library's fork handlers now (zswap_connect() does it
 * otherwise): a caller whose own handlers must run around them registers
 * its own after this call. */
void zswap_atfork_init(void);

/* The descriptors c lives on (its socket, uffd, store, sync page), at
 * most cap of them into out; their count. Safe from any thread and from a
 * signal handler: the fields are read without the lock, so a descriptor
 * the agent replaces at that moment may be missed or named once more. */
size_t zswap_client_fds(struct zswap_client *c, int *out, size_t cap);

/* True while c's agent is reconnecting or restoring: calls fail with
 * -ENOTCONN meanwhile, but the client may come back (preload.c keeps
 * scanning). */
bool zswap_client_recovering(struct zswap_client *c);

/* The memory of c the daemon manages now, from `from` on, in address
 * order (ZMSG_REGIONS: after every event of the process read so far was
 * handled): up to ZSWAP_REGIONS_BATCH spans; how many, or -errno. *next:
 * where to ask again for the rest; 0 when that was all. */
#define ZSWAP_REGIONS_BATCH 120
int zswap_client_regions(struct zswap_client *c, uint64_t from, ZswapSpan spans[ZSWAP_REGIONS_BATCH],
                         uint64_t *next);

/* A value that changes whenever the daemon drops or moves a part of c's
 * managed memory on the kernel's word (an munmap(), an mremap(): the sync
 * page's regions_gen, zsync.h) and whenever c's connection is replaced:
 * what the preload shim remembers it registered is to be asked again. */
uint64_t zswap_client_regions_gen(struct zswap_client *c);

/* Make c's list of registered ranges (what it registers again with a new
 * daemon, and gives up at the end) the n spans given: the daemon's own
 * list (zswap_client_regions()). For a client whose ranges no other
 * thread registers meanwhile (the preload shim's). */
void zswap_client_ranges_set(struct zswap_client *c, const ZswapSpan *spans, size_t n);

/* Join the group `name` (ZMSG_SET_GROUP): the daemon keeps its members'
 * managed resident memory under `limit` less what they hold unmanaged,
 * together; `unmanaged` is this process's part. limit 0: leave it.
 * Repeated to a daemon that takes the client over. 0 or -errno. */
int zswap_client_set_group(struct zswap_client *c, const char *name, uint64_t limit, uint64_t unmanaged);

/* The fork token of this process's last fork (0: none yet): a random
 * 64-bit value per fork, which the daemon matches at CHILD_ATTACH. For
 * tests. */
uint64_t zswap_fork_token_last(void);
/* Fork children whose parent held nothing out (the daemon's answer to the
 * fork's FORK_PREPARE) put off attaching until zswap_child_attach() is
 * called (zswap_child_pending() until then), or until they fork
 * themselves: the preload's scanner does it after ZSWAP_ATTACH_MS, and a
 * child that execs or exits first costs no round trip. Without the call,
 * every child attaches in the fork, as the library's own users expect. */
void zswap_child_attach_defer(void);
bool zswap_child_pending(struct zswap_client *c);
int zswap_child_attach(struct zswap_client *c);
