/*
 * client.h: what a client is, shared by the pieces of libzswap: request.c
 * (requests and replies), agent.c (the agent thread), connect.c (making and
 * freeing a client), recover.c (daemon loss), fork.c (fork handling) and
 * libzswap.c (the public API). Not installed, and not for the layers above
 * (preload/ uses libzswap-internal.h): everything declared here is hidden
 * in libzswap.so.
 *
 * A client is one connection to the daemon plus one userfaultfd created in
 * this process through the /dev/userfaultfd descriptor the daemon hands
 * over (to root, and to users its configuration names), or with
 * userfaultfd(2) where the kernel allows it, so that kernel-mode faults,
 * e.g. read(2) into evicted memory, reach the daemon; UFFD_USER_MODE_ONLY
 * is never used (uffd_create()). The device is closed as soon as the uffd
 * is made. The daemon reads its faults
 * and events. We keep our own reference for as long as the process lives,
 * so a dying daemon never makes the kernel unregister our memory and
 * zero-fill it. The agent thread issues UFFDIO_MOVE on the same uffd: a
 * page leaves our page table atomically into the staging area (registered
 * on that uffd in write-protect mode, never armed, because a move's
 * destination must be), where the daemon reads it (process_vm_readv).
 * Moving through the daemon's own uffd matters: the kernel refuses a move
 * (EAGAIN) while an munmap/madvise/mremap/fork event of that uffd is
 * pending, so no page leaves while the daemon has not seen the change.
 *
 * The agent thread is the only reader of the socket. It executes the
 * daemon's MOVE and RELEASE commands (only this process may move or free
 * its own private pages) and hands replies to the threads waiting in
 * request(). Nothing here logs or touches errno (all entry points save and
 * restore it).
 *
 * fork(): pthread_atfork handlers pause eviction around the fork (so no
 * page is half-way between the client and the daemon when the address
 * space is copied), and the child reconnects, takes over the uffd the
 * daemon received for it (UFFD_EVENT_FORK) and starts its own agent.
 *
 * Who the daemon is: whoever listens on the socket's path. Every connect
 * (the first, a fork child's, each attempt of a recovery) checks that the
 * listener is root or the uid $ZSWAP_DAEMON_UID names before it sends a
 * byte (sock_connect()), since what follows hands over our uffd and store.
 *
 * Daemon loss: the daemon hands every client a store (store.h),
 * a sealed memfd holding its compressed pages, entries and ranges, which we
 * keep. When the agent reads EOF, it reconnects to the same socket every
 * RECONNECT_STEP_MS and hands uffd and store to the new daemon (ADOPT),
 * for up to reconnect_ms. Meanwhile threads touching evicted pages wait in
 * the kernel (our uffd reference keeps the memory registered) and library
 * calls fail with -ENOTCONN. If no daemon adopts the store in time, or the
 * store fails its checks, the agent installs every page itself from the
 * store (zswap_store_restore(), restore.c) on our own uffd, unregisters and closes it;
 * then it attaches anew if a daemon answered, or stays detached. Who may
 * touch the connection: c->sock, c->gen, c->recovering and c->dead are
 * written by the agent only, holding send_lock and lock; requesters read
 * them under either, and send only under send_lock after checking that the
 * generation they queued under is still current, so that no request meant
 * for a dead daemon reaches a new one mid-handshake.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "libzswap-internal.h"
#include "protocol.h"
#include "zsync.h"

#define STAGING_LANES 4
#define STAGING_BYTES ((size_t)STAGING_LANES * ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE)
#define RANGES_MAX 4096
#define RECONNECT_STEP_MS 50                 /* between two attempts to reach a new daemon */
#define RECONNECT_DEFAULT_MS (10 * 1000u)    /* ZSWAP_RECONNECT_TIMEOUT unset */
#define HANDSHAKE_REPLY_MIN_MS 5000          /* a new daemon's answer, at least this long */

/* descriptors a reply carries at most: CHILD_ATTACH's uffd, store and
 * shared store. Every rfd[] handed to request(), request_timed() and
 * agent_call() has this many */
#define REPLY_FDS 3

typedef struct Pending {
        struct Pending *next;
        uint32_t id;
        unsigned timeout_s; /* 0: wait for as long as the daemon lives */
        uint64_t gen;       /* the connection it was sent on */
        bool done;
        ssize_t len;
        int fd[REPLY_FDS];
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
} Pending;

typedef struct Range {
        uint64_t addr, len;
} Range;

struct zswap_client {
        int sock;     /* written by the agent under send_lock + lock (see the top) */
        int uffd;     /* replaced or closed only by the agent, or before it runs */
        int store_fd; /* the daemon's store (store.h), -1: none (an older daemon) */
        /* its user's shared store, which the store's PE_SHARED entries
         * name (daemon/mm/dedup.h), -1: none; replaced with store_fd */
        int shared_fd;
        CodecDCtx *dctx[CODEC_ZSTD + 1]; /* for a restore from it, by codec; made in advance */
        uint8_t *staging;
        ZSync *sync;  /* shared with the daemon (zsync.h): moves and its uffd reads apart */
        int sync_fd;
        char path[108];
        uid_t daemon_uid; /* $ZSWAP_DAEMON_UID, trusted besides root; (uid_t)-1: none */
        int report_fd; /* $ZSWAP_RECOVERY_FD: one line per recovery, -1: none */
        bool staging_stale; /* agent only: free staging before the next command */
        _Atomic unsigned reconnect_ms; /* how long to look for a new daemon */

        pthread_t agent;
        bool agent_running; /* set before the agent starts, cleared after join */
        /* the last FORK_PREPARE was answered (by the daemon of the
         * connection generation it was sent on): a child may restore
         * itself from its store (child_lost()); written by the forking
         * thread under clients_lock */
        bool fork_ok;
        /* its answer: 1 + the pages the daemon held out for us then, 0:
         * not known (no answer, or a daemon that does not say). Nothing
         * is evicted from the answer to the fork, so 1 means the child
         * inherits every page in place. Under clients_lock, as fork_ok */
        int64_t fork_held;
        /* a fork child whose parent held nothing out: it attaches when
         * zswap_child_attach() is called (the preload's scanner, after
         * ZSWAP_ATTACH_MS), or before it forks itself, rather than in the
         * fork; until then the daemon serves its faults through the uffd
         * it holds and evicts nothing. With the token of its fork. Under
         * clients_lock */
        bool child_pending;
        uint64_t child_token;

        pthread_mutex_t send_lock; /* taken before lock; held around sends of requests */
        pthread_mutex_t lock; /* protects everything below */
        pthread_cond_t cond;
        Pending *pending;
        uint64_t gen;         /* connection generation: +1 when one is lost or replaced */
        bool dead;            /* the daemon hung up and we are detached for good */
        bool recovering;      /* the agent is looking for a new daemon or restoring */
        bool closing;         /* client_free() runs: the agent leaves at EOF */
        bool connecting;      /* connect_client() runs: the agent waits for it before it recovers or leaves */
        bool keep_uffd;       /* pages may still be held: never close our uffd */
        bool limit_set;       /* zswap_set_limit() succeeded: repeat it to a new daemon */
        uint64_t limit_bytes;
        /* zswap_client_set_group() succeeded: repeated to a new daemon too */
        char group[ZSWAP_GROUP_NAME_MAX];
        uint64_t group_limit, group_unmanaged;
        Range *ranges;        /* what we registered, for disconnect and re-attach */
        size_t nranges;
        ZswapRecovery recovery; /* what recoveries did (libzswap-internal.h) */

        _Atomic uint32_t next_id;
        struct zswap_client *next_client; /* protected by clients_lock */
};

#pragma GCC visibility push(hidden)

/* Every client of the process, for the fork handlers (libzswap.c). */
extern pthread_mutex_t clients_lock;
extern struct zswap_client *clients;
/* The token of the last fork (fork.c). */
extern volatile uint64_t fork_token;

/* ---- request.c ---- */
uint32_t new_id(struct zswap_client *c);
void take_reply_fds(int *fds, size_t nfds, bool mine, int *rfd);
int request_timed(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
                  size_t reply_cap, int *rfd, int64_t *value, unsigned timeout_s);
int request(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
            size_t reply_cap, int *rfd, int64_t *value);

/* ---- agent.c ---- */
void staging_free(struct zswap_client *c, size_t off, size_t len);
void agent_command(struct zswap_client *c, int sock, const void *buf);
int agent_start(struct zswap_client *c);

/* ---- connect.c ---- */
int sock_connect(struct zswap_client *c);
int hello(struct zswap_client *c, uint32_t role, int *devfd);
int uffd_create(int *devfd);
int staging_register(struct zswap_client *c);
void store_accept(struct zswap_client *c, int fd, int shared);
int attach(struct zswap_client *c, bool with_uffd);
int sync_new(struct zswap_client *c);
bool recovering(struct zswap_client *c);
void client_free(struct zswap_client *c);
void cond_init_monotonic(pthread_cond_t *cond);
int client_alloc(const char *path, struct zswap_client **ret);
int connect_client(struct zswap_client *c);

/* ---- recover.c ---- */
bool agent_recover(struct zswap_client *c);

/* ---- libzswap.c ---- */
void ranges_forget(struct zswap_client *c, uint64_t addr, uint64_t len);

#pragma GCC visibility pop
