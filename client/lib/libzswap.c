/*
 * libzswap.c: the client side of zswapd.
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
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/time.h>
#include <time.h>
#include <sys/un.h>
#include <math.h>

#include "macro.h"
#include "libzswap-internal.h"
#include "protocol.h"
#include "store.h"
#include "zsync.h"
#include "uffd-compat.h"
#include "util.h"
#include "zswap.h"

#define STAGING_LANES 4
#define STAGING_BYTES ((size_t)STAGING_LANES * ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE)
#define RANGES_MAX 4096
#define RECONNECT_STEP_MS 50                 /* between two attempts to reach a new daemon */
#define RECONNECT_DEFAULT_MS (10 * 1000u)    /* ZSWAP_RECONNECT_TIMEOUT unset */
#define HANDSHAKE_REPLY_MIN_MS 5000          /* a new daemon's answer, at least this long */

typedef struct Pending {
        struct Pending *next;
        uint32_t id;
        unsigned timeout_s; /* 0: wait for as long as the daemon lives */
        uint64_t gen;       /* the connection it was sent on */
        bool done;
        ssize_t len;
        int fd[2];
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
} Pending;

typedef struct Range {
        uint64_t addr, len;
} Range;

struct zswap_client {
        int sock;     /* written by the agent under send_lock + lock (see the top) */
        int uffd;     /* replaced or closed only by the agent, or before it runs */
        int store_fd; /* the daemon's store (store.h), -1: none (an older daemon) */
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
        bool keep_uffd;       /* pages may still be held: never close our uffd */
        bool limit_set;       /* zswap_set_limit() succeeded: repeat it to a new daemon */
        uint64_t limit_bytes;
        Range *ranges;        /* what we registered, for disconnect and re-attach */
        size_t nranges;
        ZswapRecovery recovery; /* what recoveries did (libzswap-internal.h) */

        _Atomic uint32_t next_id;
        struct zswap_client *next_client; /* protected by clients_lock */
};

/* Every client of the process, for the fork handlers. */
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zswap_client *clients;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* A fresh random value before each fork (fork_token_new()); FORK_PREPARE
 * (and ADOPT) tell the daemon, the child names it to claim its
 * address space. Once the parent has exited, the token is all that tells a
 * child apart from another process of the same user (do_child_attach() in
 * daemon/manager.c), so it must not be guessable: never a counter. Written
 * under clients_lock by atfork_prepare() only. */
static volatile uint64_t fork_token;

/* ---- requests ---- */

static uint32_t new_id(struct zswap_client *c) {
        uint32_t id;
        do
                id = atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed) + 1;
        while (id == 0);
        return id;
}

/* Take the fds of a message: the first two to rfd[] if it is ours, the rest closed. */
static void take_reply_fds(int *fds, size_t nfds, bool mine, int *rfd) {
        for (size_t i = 0; i < nfds; i++) {
                if (mine && i < 2 && rfd)
                        rfd[i] = fds[i];
                else
                        safe_close(fds[i]);
        }
}

/* Before the agent runs (connect, fork child): read replies ourselves. */
static ssize_t request_direct(struct zswap_client *c, uint32_t id, void *reply, size_t cap, int *rfd) {
        for (;;) {
                int fds[2];
                size_t nfds = 2;
                ssize_t n = zmsg_recv(c->sock, reply, cap, fds, &nfds, NULL);
                if (n <= 0)
                        return n == 0 ? -ENOTCONN : n;
                const ZMsgHeader *h = reply;
                bool mine = zmsg_validate(reply, (size_t)n) == 0 &&
                            (h->type == ZMSG_REPLY || h->type == ZMSG_STATS_REPLY) && h->id == id;
                take_reply_fds(fds, nfds, mine, rfd);
                if (mine)
                        return n;
        }
}

/* The connection p was queued on is gone (or we are detached). Under lock. */
static bool conn_lost(struct zswap_client *c, const Pending *p) {
        return c->dead || c->recovering || p->gen != c->gen;
}

static ssize_t request_agent(struct zswap_client *c, Pending *p, const void *msg, size_t len, const int *fds,
                             size_t nfds) {
        ssize_t r;

        pthread_mutex_lock(&c->lock);
        if (c->dead || c->recovering) {
                pthread_mutex_unlock(&c->lock);
                return -ENOTCONN;
        }
        p->gen = c->gen;
        p->next = c->pending;
        c->pending = p;
        pthread_mutex_unlock(&c->lock);

        /* only on the connection p was queued for: a new daemon must never
         * see a request before the agent has handed it our memory */
        pthread_mutex_lock(&c->send_lock);
        r = p->gen == c->gen ? zmsg_send(c->sock, msg, len, fds, nfds) : -ENOTCONN;
        pthread_mutex_unlock(&c->send_lock);

        pthread_mutex_lock(&c->lock);
        while (r >= 0 && !p->done && !conn_lost(c, p)) {
                if (!p->timeout_s) {
                        pthread_cond_wait(&c->cond, &c->lock);
                        continue;
                }
                /* the fork handler never waits forever on a stuck daemon */
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += p->timeout_s;
                if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT && !p->done) {
                        r = -ETIMEDOUT;
                        break;
                }
        }
        for (Pending **q = &c->pending; *q; q = &(*q)->next)
                if (*q == p) {
                        *q = p->next;
                        break;
                }
        if (r >= 0)
                r = p->done ? p->len : -ENOTCONN;
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* Send msg (its header id is set here) and wait for the reply, at most
 * timeout_s seconds if not 0. Returns the reply's status (or value >= 0
 * through *value), or -errno. The reply's fds (up to 2) go to rfd[]
 * (closed unless the status is 0). */
static int request_timed(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
                         size_t reply_cap, int *rfd, int64_t *value, unsigned timeout_s) {
        ZMsgHeader *h = msg;
        _Alignas(8) uint8_t local[ZSWAP_MSG_MAX];
        int got[2] = { -1, -1 };
        ssize_t n;

        if (rfd)
                rfd[0] = rfd[1] = -1;
        h->id = new_id(c);
        if (c->agent_running) {
                /* on the caller's stack, never the program's heap: the
                 * agent writes the reply into it (request_agent() unlinks
                 * it before returning) */
                Pending pend = { .id = h->id, .fd = { -1, -1 }, .timeout_s = timeout_s }, *p = &pend;
                n = request_agent(c, p, msg, len, fds, nfds);
                if (n > 0)
                        memcpy(local, p->buf, (size_t)n);
                /* a reply that came after we gave up leaves its fds with p */
                got[0] = p->fd[0];
                got[1] = p->fd[1];
        } else {
                if (c->sock < 0)
                        return -ENOTCONN;
                n = zmsg_send(c->sock, msg, len, fds, nfds);
                if (n >= 0)
                        n = request_direct(c, h->id, local, sizeof(local), got);
        }
        const ZMsgReply *rep = (const ZMsgReply *)local;
        int status = n < 0 ? (int)n : rep->status;
        /* the daemon went while we sent: to the caller, as while it is away */
        if (n < 0 && (status == -EPIPE || status == -ECONNRESET))
                status = -ENOTCONN;
        if (n >= 0 && rep->hdr.type == ZMSG_STATS_REPLY && reply && (size_t)n <= reply_cap)
                memcpy(reply, local, (size_t)n);
        if (n >= 0 && rep->hdr.type == ZMSG_REPLY && rep->status == 0 && value)
                *value = rep->value;
        for (int i = 0; i < 2; i++) {
                if (rfd && status == 0)
                        rfd[i] = got[i];
                else
                        safe_close(got[i]);
        }
        return status;
}

static int request(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
                   size_t reply_cap, int *rfd, int64_t *value) {
        return request_timed(c, msg, len, fds, nfds, reply, reply_cap, rfd, value, 0);
}

/* ---- the agent ---- */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static void cow_break(uint64_t addr) {
        /* A page shared after fork (or by KSM) cannot be moved. Populating
         * it for writing gives us a private copy without writing a byte (so
         * no concurrent write of another thread can be lost), and fails
         * with an error rather than a signal if the page went away. */
        madvise((void *)(uintptr_t)addr, ZSWAP_PAGE_SIZE, MADV_POPULATE_WRITE);
}

/* Move up to ZSYNC_MOVE_CHUNK pages; -ETIMEDOUT if the daemon kept reading
 * our uffd too long to let a move start (zsync.h). */
static int move_one(struct zswap_client *c, uint64_t src, uint64_t dst, uint64_t npages, int64_t *moved) {
        /* no ALLOW_SRC_HOLES: on 6.18 a hole met after an internal EAGAIN
         * makes move_pages() spin (design.md); a hole gives ENOENT and the
         * page is skipped */
        struct uffdio_move mv = { .dst = dst, .src = src, .len = MIN(npages, (uint64_t)ZSYNC_MOVE_CHUNK) * ZSWAP_PAGE_SIZE };
        int r;

        *moved = 0;
        if (!zsync_move_begin(c->sync))
                return -ETIMEDOUT;
        r = ioctl(c->uffd, UFFDIO_MOVE, &mv) < 0 ? -errno : 0;
        zsync_move_end(c->sync);
        *moved = mv.move > 0 ? mv.move / (int64_t)ZSWAP_PAGE_SIZE : 0;
        return r;
}

static void set_bits(uint64_t *bits, uint32_t from, uint32_t n) {
        for (uint32_t i = from; i < from + n; i++)
                bits[i / 64] |= (uint64_t)1 << (i % 64);
}

/* EAGAIN with nothing moved: the address space is changing (an event is
 * queued for the daemon, which reads it within microseconds) */
#define AGENT_EAGAIN_TRIES 8

/*
 * Move each run to its slots. What this reports is a hint: the daemon
 * checks which pages really left (evict.c, lane_moved), since
 * the kernel can move pages and still report fewer.
 */
/* Has the daemon at the other end of sock gone (its last reference
 * closed), whatever it left queued for us? */
static bool daemon_gone(int sock) {
        struct pollfd p = { .fd = sock, .events = POLLRDHUP };
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

static void agent_move(struct zswap_client *c, int sock, const ZMsgMove *m) {
        ZMsgMoveDone done = { .npages = m->npages };
        uint32_t idx = 0;

        /* a dead daemon's last commands: nobody will read the pages, and a
         * reader it left counted in the sync page would make every move
         * wait for nothing; the pages stay where they are */
        if (daemon_gone(sock))
                return;

        for (uint32_t ri = 0; ri < m->nruns; ri++) {
                uint64_t src = m->runs[ri].addr, n = m->runs[ri].npages;
                uint64_t dst = (uint64_t)(uintptr_t)c->staging + (uint64_t)(m->slot0 + idx) * ZSWAP_PAGE_SIZE;
                uint64_t off = 0;
                unsigned tries = 0;
                bool cow_broken = false, single = false;

                while (off < n) {
                        int64_t moved;
                        int r = move_one(c, src + off * ZSWAP_PAGE_SIZE, dst + off * ZSWAP_PAGE_SIZE,
                                         single ? 1 : n - off, &moved);
                        set_bits(done.moved, idx + (uint32_t)off, (uint32_t)moved);
                        off += (uint64_t)moved;
                        if (r == 0 || off >= n)
                                continue;
                        if (moved > 0) {
                                /* stopped part way: go on from there; the page
                                 * it stopped at is a new one, whose COW was
                                 * not broken yet (after a fork every page of
                                 * the run is shared, and keeping the flag
                                 * left every second one behind) */
                                tries = 0;
                                cow_broken = false;
                                continue;
                        }
                        if (r == -ETIMEDOUT) {
                                if (daemon_gone(sock))
                                        return; /* see above */
                                break; /* the daemon is busy with our uffd: the rest stays */
                        }
                        if (r == -EAGAIN) {
                                if (++tries > AGENT_EAGAIN_TRIES)
                                        break; /* still changing: the rest of the run stays */
                                sched_yield();
                                continue;
                        }
                        if (r == -EINVAL && !single) {
                                /* the run spans two vmas (memory registered in
                                 * pieces that did not merge): page by page */
                                single = true;
                                continue;
                        }
                        if (r == -EBUSY && !cow_broken) {
                                cow_break(src + off * ZSWAP_PAGE_SIZE);
                                cow_broken = true;
                                continue;
                        }
                        /* leave this page where it is; the daemon puts its entry back */
                        done.errors++;
                        off++;
                        tries = 0;
                        cow_broken = false;
                }
                idx += (uint32_t)n;
        }
        zmsg_init(&done.hdr, ZMSG_MOVE_DONE, m->hdr.id, sizeof(done));
        zmsg_send(sock, &done, sizeof(done), NULL, 0);
}

/* Free staging slots. The range is unregistered around the MADV_DONTNEED:
 * a registered range would send the daemon a REMOVE event and block us
 * until it reads it, which a dead daemon never does. No move targets a
 * lane while it is being released. */
static void staging_free(struct zswap_client *c, size_t off, size_t len) {
        struct uffdio_range r = { .start = (uintptr_t)c->staging + off, .len = len };
        struct uffdio_register reg = { .range = r, .mode = UFFDIO_REGISTER_MODE_WP };
        bool registered = ioctl(c->uffd, UFFDIO_UNREGISTER, &r) == 0;

        madvise(c->staging + off, len, MADV_DONTNEED);
        if (registered)
                ioctl(c->uffd, UFFDIO_REGISTER, &reg);
}

static void agent_release(struct zswap_client *c, int sock, const ZMsgRelease *m) {
        ZMsgRelease done = *m;

        /* a dead daemon's last release: its store may still name pages in
         * those slots (STAGED), which the next daemon reads from there; the
         * slots are emptied once it has (test-restart load lost pages so) */
        if (daemon_gone(sock))
                return;

        if ((uint64_t)m->slot0 + m->nslots <= STAGING_BYTES / ZSWAP_PAGE_SIZE)
                staging_free(c, (size_t)m->slot0 * ZSWAP_PAGE_SIZE, (size_t)m->nslots * ZSWAP_PAGE_SIZE);
        zmsg_init(&done.hdr, ZMSG_RELEASE_DONE, m->hdr.id, sizeof(done));
        zmsg_send(sock, &done, sizeof(done), NULL, 0);
}

static void agent_reply(struct zswap_client *c, const void *buf, ssize_t n, int *fds, size_t nfds) {
        const ZMsgHeader *h = buf;

        pthread_mutex_lock(&c->lock);
        for (Pending *p = c->pending; p; p = p->next)
                if (p->id == h->id && !p->done && p->gen == c->gen) {
                        memcpy(p->buf, buf, (size_t)n);
                        p->len = n;
                        for (size_t i = 0; i < nfds && i < 2; i++)
                                p->fd[i] = TAKE_FD(fds[i]);
                        p->done = true;
                        pthread_cond_broadcast(&c->cond);
                        break;
                }
        pthread_mutex_unlock(&c->lock);
        for (size_t i = 0; i < nfds; i++)
                safe_close(fds[i]);
}

/* A daemon command. After a recovery, whatever the dead daemon left in
 * staging goes first: the new one took what it needed before answering. */
static void agent_command(struct zswap_client *c, int sock, const void *buf) {
        const ZMsgHeader *h = buf;

        if (c->staging_stale) {
                staging_free(c, 0, STAGING_BYTES);
                c->staging_stale = false;
        }
        if (h->type == ZMSG_MOVE)
                agent_move(c, sock, buf);
        else
                agent_release(c, sock, buf);
}

static bool agent_recover(struct zswap_client *c);

/* A lost connection: look for a new daemon (true: go on with it), or not. */
static bool agent_lost(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        /* a disconnect that took every page back first: nothing to recover */
        bool clean = c->closing && c->nranges == 0 && !c->keep_uffd;
        bool recover = c->store_fd >= 0 && c->uffd >= 0 && !clean;
        pthread_mutex_unlock(&c->lock);
        return recover && agent_recover(c);
}

__thread bool zswap_self __attribute__((tls_model("initial-exec")));

static void *agent_main(void *arg) {
        struct zswap_client *c = arg;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        zswap_self = true;

        for (;;) {
                int fds[2];
                size_t nfds = 2;
                ssize_t n = zmsg_recv(c->sock, buf, sizeof(buf), fds, &nfds, NULL);
                if (n == -EINTR || n == -EMSGSIZE)
                        continue;
                if (n <= 0) {
                        if (agent_lost(c))
                                continue;
                        break;
                }
                const ZMsgHeader *h = (const ZMsgHeader *)buf;
                bool valid = zmsg_validate(buf, (size_t)n) == 0;
                if (valid && (h->type == ZMSG_MOVE || h->type == ZMSG_RELEASE))
                        agent_command(c, c->sock, buf);
                else if (valid && (h->type == ZMSG_REPLY || h->type == ZMSG_STATS_REPLY)) {
                        agent_reply(c, buf, n, fds, nfds);
                        nfds = 0;
                }
                take_reply_fds(fds, nfds, false, NULL);
        }
        pthread_mutex_lock(&c->lock);
        c->dead = true;
        c->recovering = false;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

size_t zswap_client_own_memory(struct zswap_client *c, ZswapSpan *spans, size_t max) {
        size_t n = 0;
        pthread_attr_t a;
        void *stack;
        size_t size;

        if (n < max && c->staging)
                spans[n++] = (ZswapSpan){ (uintptr_t)c->staging, (uintptr_t)c->staging + STAGING_BYTES };
        if (n < max && c->agent_running && pthread_getattr_np(c->agent, &a) == 0) {
                if (pthread_attr_getstack(&a, &stack, &size) == 0)
                        spans[n++] = (ZswapSpan){ (uintptr_t)stack, (uintptr_t)stack + size };
                pthread_attr_destroy(&a);
        }
        return n + zswap_own_mappings(spans + n, max - n);
}

static int agent_start(struct zswap_client *c) {
        sigset_t all, old;
        int r;

        /* the agent takes no signal: the program's handlers run elsewhere */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        c->agent_running = true;
        /* EAGAIN is also what the kernel answers while another thread of
         * the process is in execve() (a fork child the shim attaches as
         * it execs): that exec ends us soon; a real shortage outlasts
         * the tries (at most 100 ms) */
        for (int i = 0; (r = pthread_create(&c->agent, NULL, agent_main, c)) == EAGAIN && i < 100; i++)
                usleep(1000);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0)
                c->agent_running = false;
        return -r;
}

/* ---- setup ---- */

/* Every connection, the first, a fork child's and a recovery's: nothing is
 * sent before the listener proved to be root or the uid we were told to
 * trust (unix_peer_trusted(), common/util.c); -EPERM otherwise. */
static int sock_connect(struct zswap_client *c) {
        struct timeval tv = { .tv_sec = 10 };
        int fd = unix_connect_daemon(c->path, c->daemon_uid);

        if (fd < 0)
                return fd;
        /* never hang forever on a daemon that stopped answering */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        return fd;
}

/* HELLO; *devfd: the daemon's /dev/userfaultfd descriptor, or -1 when it
 * hands none (userfaultfd_device, zswapd.conf(5); never to a fork child). */
static int hello(struct zswap_client *c, uint32_t role, int *devfd) {
        ZMsgHello h = { .role = role };
        int fds[2];
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        int r = request(c, &h, sizeof(h), NULL, 0, NULL, 0, fds, NULL);
        safe_close(fds[1]);
        *devfd = fds[0];
        return r;
}

/*
 * A new uffd of this process. Through the daemon's /dev/userfaultfd
 * descriptor if it handed one: that fd is closed here, at once and
 * whatever happens, so that it is never kept past creating the uffd (it
 * would let this process make kernel-mode uffds ever after). Without one,
 * userfaultfd(2), which the kernel allows without UFFD_USER_MODE_ONLY only
 * with vm.unprivileged_userfaultfd = 1 or CAP_SYS_PTRACE: -EPERM
 * otherwise. USER_MODE_ONLY is never used: a system call that touched an
 * evicted page (read(2) into it) would fail with EFAULT instead of waiting
 * for the page.
 */
static int uffd_create(int *devfd) {
        int fd, r;

        if (*devfd >= 0)
                fd = ioctl(*devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        else
                fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        r = fd < 0 ? negative_errno() : fd;
        *devfd = safe_close(*devfd);
        return r;
}

/* Register the staging area on our uffd: write-protect mode, never armed,
 * only because UFFDIO_MOVE needs its destination in a range of the uffd it
 * runs on. Needs the daemon's UFFDIO_API handshake done (after ATTACH). */
static int staging_register(struct zswap_client *c) {
        struct uffdio_register reg = { .range = { .start = (uintptr_t)c->staging, .len = STAGING_BYTES },
                                       .mode = UFFDIO_REGISTER_MODE_WP };

        /* a read of a slot maps the 4 KiB zero page, never a huge one that
         * would cover other slots */
        madvise(c->staging, STAGING_BYTES, MADV_NOHUGEPAGE);
        if (ioctl(c->uffd, UFFDIO_REGISTER, &reg) < 0)
                return -errno;
        return 0;
}

/* Keep fd as our store if it is one (a sealed memfd of the store's size;
 * what it holds is checked only when it is needed). Anything else, or no
 * fd (an older daemon): no store, and no recovery but waiting. */
static void store_accept(struct zswap_client *c, int fd) {
        uint8_t *map;

        if (fd < 0)
                return;
        if (store_map(fd, false, &map) < 0) {
                safe_close(fd);
                return;
        }
        /* the decompression context a restore will need, made now: while
         * restoring we may not allocate (zswap_store_restore(), restore.c) */
        uint32_t codec = store_super(map)->codec;
        store_unmap(map);
        if (codec < ELEMENTSOF(c->dctx) && !c->dctx[codec] && codec_dctx_new_in((CodecKind)codec, &zswap_own_alloc, &c->dctx[codec]) < 0)
                c->dctx[codec] = NULL;
        /* under the lock: the agent reads it (agent_lost) as soon as it
         * runs, which is before an ATTACH is answered */
        pthread_mutex_lock(&c->lock);
        int old = c->store_fd;
        c->store_fd = fd;
        pthread_mutex_unlock(&c->lock);
        safe_close(old);
}

static int attach(struct zswap_client *c, bool with_uffd) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging, .staging_len = STAGING_BYTES };
        int fds[2] = { c->uffd, c->sync_fd }, rfd[2];
        zmsg_init(&a.hdr, ZMSG_ATTACH, 0, sizeof(a));
        int r = request(c, &a, sizeof(a), with_uffd ? fds : NULL, with_uffd ? 2 : 0, NULL, 0, rfd, NULL);
        /* a fork child got its store with its uffd (CHILD_ATTACH) */
        if (c->store_fd < 0)
                store_accept(c, rfd[0]);
        else
                safe_close(rfd[0]);
        safe_close(rfd[1]);
        return r;
}

/* A fresh sync page (zsync.h) in place of the current one: sealed against
 * shrinking, since the daemon maps it too and must never fault on a page we
 * took away. A new daemon gets a fresh one, never counters a dead one left
 * raised. The agent, or before it runs. */
static int sync_new(struct zswap_client *c) {
        int fd = memfd_create("zswap-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        void *m = MAP_FAILED;

        if (fd >= 0 && ftruncate(fd, ZSWAP_SYNC_SIZE) == 0 &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
                m = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                int r = negative_errno();
                safe_close(fd);
                return r;
        }
        /* the new page in place before the old one goes: a fork() from
         * another thread meanwhile copies a pointer to mapped memory
         * (a child once crashed on the old page, unmapped) */
        ZSync *old = c->sync;
        int old_fd = c->sync_fd;
        c->sync = m;
        c->sync_fd = fd;
        if (old)
                munmap(old, ZSWAP_SYNC_SIZE);
        safe_close(old_fd);
        return 0;
}

static bool recovering(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        bool r = c->recovering;
        pthread_mutex_unlock(&c->lock);
        return r;
}

static void agent_join(struct zswap_client *c) {
        /* the agent leaves on EOF; it never blocks on the daemon, but do not
         * hang a program's exit on it if it does */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        if (pthread_timedjoin_np(c->agent, NULL, &ts) == 0)
                c->agent_running = false;
        else if (recovering(c)) {
                /* restoring our pages from the store: as long as that takes */
                pthread_join(c->agent, NULL);
                c->agent_running = false;
        }
}

static void client_free(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        c->closing = true; /* an agent looking for a new daemon restores at once */
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&c->send_lock);
        if (c->sock >= 0)
                shutdown(c->sock, SHUT_RDWR);
        pthread_mutex_unlock(&c->send_lock);
        if (c->agent_running) {
                agent_join(c);
                if (c->agent_running) {
                        pthread_detach(c->agent);
                        return; /* leak the client rather than free what the agent uses */
                }
        }
        safe_close(c->sock);
        if (c->staging && c->staging != MAP_FAILED) {
                /* Unregister first: munmap() of a registered range queues
                 * an UNMAP event and waits until somebody reads it, and the
                 * daemon may have stopped reading our uffd already (it does
                 * once the connection is gone). Without the range, the
                 * munmap sends nothing. */
                struct uffdio_range r = { .start = (uintptr_t)c->staging, .len = STAGING_BYTES };
                if (c->uffd >= 0)
                        (void)ioctl(c->uffd, UFFDIO_UNREGISTER, &r);
                munmap(c->staging, STAGING_BYTES);
        }
        if (!c->keep_uffd)
                safe_close(c->uffd);
        safe_close(c->store_fd);
        for (size_t i = 0; i < ELEMENTSOF(c->dctx); i++)
                codec_dctx_free(c->dctx[i]);
        if (c->sync)
                munmap(c->sync, ZSWAP_SYNC_SIZE);
        safe_close(c->sync_fd);
        pthread_mutex_destroy(&c->send_lock);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        zswap_mem_free(c->ranges);
        zswap_mem_free(c);
}

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);
static int child_attach_now(struct zswap_client *c);

static void atfork_install(void) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void cond_init_monotonic(pthread_cond_t *cond) {
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(cond, &a);
        pthread_condattr_destroy(&a);
}

/* $ZSWAP_RECONNECT_TIMEOUT: seconds, decimal; unset or not a number: the default. */
static unsigned reconnect_ms_from_env(void) {
        const char *v = getenv("ZSWAP_RECONNECT_TIMEOUT");
        char *end;

        if (!v || !*v)
                return RECONNECT_DEFAULT_MS;
        double sec = strtod(v, &end);
        if (*end || !isfinite(sec) || sec < 0)
                return RECONNECT_DEFAULT_MS;
        return sec * 1000.0 >= (double)UINT32_MAX ? UINT32_MAX : (unsigned)(sec * 1000.0 + 0.5);
}

/* $ZSWAP_RECOVERY_FD: a descriptor number the library writes one line to
 * per recovery (for tests and debugging; the library prints nothing else). */
static int report_fd_from_env(void) {
        const char *v = getenv("ZSWAP_RECOVERY_FD");
        char *end;

        if (!v || !*v)
                return -1;
        long fd = strtol(v, &end, 10);
        return *end || fd < 0 || fd > INT32_MAX || fcntl((int)fd, F_GETFD) < 0 ? -1 : (int)fd;
}

static int client_alloc(const char *path, struct zswap_client **ret) {
        struct zswap_client *c = zswap_mem_alloc(sizeof(*c));
        int r;

        if (!c)
                return -ENOMEM;
        c->sock = c->uffd = c->sync_fd = c->store_fd = -1;
        c->report_fd = report_fd_from_env();
        c->daemon_uid = daemon_uid_from_env(); /* read once: the agent reconnects with it */
        c->recovery.last_adopt_status = 1;
        atomic_init(&c->reconnect_ms, reconnect_ms_from_env());
        pthread_mutex_init(&c->send_lock, NULL);
        pthread_mutex_init(&c->lock, NULL);
        cond_init_monotonic(&c->cond);
        snprintf(c->path, sizeof(c->path), "%s", path);
        c->staging = mmap(NULL, STAGING_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c->staging == MAP_FAILED) {
                c->staging = NULL;
                client_free(c);
                return -ENOMEM;
        }
        r = sync_new(c);
        if (r < 0) {
                client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

static int connect_client(struct zswap_client *c) {
        int devfd = -1, r;

        c->sock = sock_connect(c);
        if (c->sock < 0)
                return c->sock;
        r = hello(c, ZROLE_CLIENT, &devfd);
        if (r < 0) {
                safe_close(devfd);
                return r;
        }
        r = uffd_create(&devfd);
        if (r < 0)
                return r;
        c->uffd = r;
        r = agent_start(c);
        if (r < 0)
                return r;
        r = attach(c, true);
        if (r < 0)
                return r;
        /* the daemon moves nothing before our first PAGEOUT, which can only
         * come after this */
        return staging_register(c);
}

/* ---- daemon loss: reconnect, adopt, or restore ---- */

static void ranges_forget(struct zswap_client *c, uint64_t addr, uint64_t len);

static void report(struct zswap_client *c, const char *fmt, ...) _printf_(2, 3);
static void report(struct zswap_client *c, const char *fmt, ...) {
        char line[320];
        va_list ap;

        if (c->report_fd < 0)
                return;
        /* snprintf and write(): no stdio stream, whose lock a fork
         * waiting for us may hold (see restore.c) */
        int n = snprintf(line, sizeof(line), "libzswap[%d]: ", (int)getpid());
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        n = MIN(n, (int)sizeof(line) - 2);
        line[n++] = '\n';
        (void)!write(c->report_fd, line, (size_t)n);
}

/* A request on a connection the agent has not published yet: the agent
 * reads the reply itself, executing daemon commands that come first.
 * Returns the status (-EAGAIN also when no reply came in time). */
static int agent_call(struct zswap_client *c, int sock, void *msg, size_t len, const int *fds, size_t nfds,
                      int *rfd, int64_t *value) {
        ZMsgHeader *h = msg;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        int r;

        if (rfd)
                rfd[0] = rfd[1] = -1;
        h->id = new_id(c);
        r = zmsg_send(sock, msg, len, fds, nfds);
        if (r < 0)
                return r;
        for (;;) {
                int got[2];
                size_t ngot = 2;
                ssize_t n = zmsg_recv(sock, buf, sizeof(buf), got, &ngot, NULL);
                if (n == -EMSGSIZE)
                        continue;
                if (n <= 0)
                        return n == 0 ? -ENOTCONN : (int)n;
                const ZMsgReply *rep = (const ZMsgReply *)buf;
                bool valid = zmsg_validate(buf, (size_t)n) == 0;
                if (valid && (rep->hdr.type == ZMSG_MOVE || rep->hdr.type == ZMSG_RELEASE))
                        agent_command(c, sock, buf);
                bool mine = valid && rep->hdr.type == ZMSG_REPLY && rep->hdr.id == h->id;
                take_reply_fds(got, ngot, mine && rep->status == 0, rfd);
                if (!mine)
                        continue;
                if (rep->status == 0 && value)
                        *value = rep->value;
                return rep->status;
        }
}

static bool conn_error(int r) {
        return r == -ENOTCONN || r == -ECONNRESET || r == -EPIPE || r == -EAGAIN || r == -ETIMEDOUT ||
               r == -ENOENT || r == -ECONNREFUSED;
}

/* Connect to the socket again and say HELLO: *sock, and in *spare a new
 * uffd made at once (uffd_create(): the device is not kept), for
 * attach_anew() should the daemon not adopt our store; a negative errno
 * if none could be made. Replies are waited for wait_ms at most. */
static int dial(struct zswap_client *c, unsigned wait_ms, int *sock, int *spare) {
        struct timeval tv = { .tv_sec = wait_ms / 1000, .tv_usec = (wait_ms % 1000) * 1000 };
        ZMsgHello h = { .role = ZROLE_CLIENT };
        int fds[2];
        int s = sock_connect(c);

        if (s < 0)
                return s;
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        int r = agent_call(c, s, &h, sizeof(h), NULL, 0, fds, NULL);
        safe_close(fds[1]);
        if (r < 0) {
                safe_close(fds[0]);
                safe_close(s);
                return r;
        }
        *sock = s;
        *spare = uffd_create(&fds[0]);
        return 0;
}

/* Our own resident limit again, to a daemon that took us over or that we
 * attached to anew (it is not in the store). */
static void resend_limit(struct zswap_client *c, int sock) {
        pthread_mutex_lock(&c->lock);
        ZMsgLimit q = { .pid = 0, .bytes = c->limit_bytes };
        bool limit = c->limit_set;
        pthread_mutex_unlock(&c->lock);
        if (limit) {
                zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 0, sizeof(q));
                (void)agent_call(c, sock, &q, sizeof(q), NULL, 0, NULL, NULL);
        }
}

/* Hand uffd, store and a fresh sync page to the daemon on sock. It copies
 * what it keeps into a store of its own and hands us that one: the old one
 * is stale from now on (a later restart must hand over the new one). */
static int adopt(struct zswap_client *c, int sock, int64_t *pages) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging, .staging_len = STAGING_BYTES,
                         .fork_token = fork_token };
        int fds[3] = { c->uffd, c->store_fd, c->sync_fd }, rfd[2];

        zmsg_init(&a.hdr, ZMSG_ADOPT, 0, sizeof(a));
        int r = agent_call(c, sock, &a, sizeof(a), fds, c->sync_fd >= 0 ? 3 : 2, rfd, pages);
        if (r == 0 && rfd[0] >= 0)
                store_accept(c, rfd[0]);
        else
                safe_close(rfd[0]);
        safe_close(rfd[1]);
        if (r == 0 && c->staging_stale) {
                /* the daemon took what the slots held: empty them before
                 * any command of the new daemon runs */
                staging_free(c, 0, STAGING_BYTES);
                c->staging_stale = false;
        }
        if (r == 0)
                resend_limit(c, sock);
        return r;
}

/* Register again what we had registered, with a daemon we attached to
 * anew. A range that is no longer what it was (unmapped, say) is dropped. */
static int reregister(struct zswap_client *c, int sock) {
        pthread_mutex_lock(&c->lock);
        size_t n = c->nranges;
        Range *copy = n ? zswap_mem_alloc(n * sizeof(*copy)) : NULL;
        if (copy)
                memcpy(copy, c->ranges, n * sizeof(*copy));
        pthread_mutex_unlock(&c->lock);
        for (size_t i = 0; copy && i < n; i++) {
                ZMsgRange m = { .addr = copy[i].addr, .len = copy[i].len };
                zmsg_init(&m.hdr, ZMSG_REGISTER, 0, sizeof(m));
                int r = agent_call(c, sock, &m, sizeof(m), NULL, 0, NULL, NULL);
                if (r == -ENOTCONN || r == -ECONNRESET || r == -EPIPE || r == -EAGAIN) {
                        zswap_mem_free(copy);
                        return r;
                }
                if (r < 0 && r != -EEXIST)
                        ranges_forget(c, copy[i].addr, copy[i].len);
        }
        zswap_mem_free(copy);
        return 0;
}

/* Attach to the daemon on sock as a new client: spare as our new uffd
 * (dial(); a negative errno if there is none), ATTACH (a new store),
 * staging, every range again, the limit again. Our old uffd is closed
 * already. */
static int attach_anew(struct zswap_client *c, int sock, int spare) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging, .staging_len = STAGING_BYTES };
        int rfd[2], r;

        if (spare < 0)
                return spare;
        c->uffd = spare;
        int fds[2] = { c->uffd, c->sync_fd };
        zmsg_init(&a.hdr, ZMSG_ATTACH, 0, sizeof(a));
        r = agent_call(c, sock, &a, sizeof(a), fds, c->sync_fd >= 0 ? 2 : 1, rfd, NULL);
        if (r < 0)
                return r;
        store_accept(c, rfd[0]);
        safe_close(rfd[1]);
        r = staging_register(c);
        if (r < 0)
                return r;
        r = reregister(c, sock);
        if (r < 0)
                return r;
        resend_limit(c, sock);
        return 0;
}

/* Every page the store holds back in place, then our uffd closed (its last
 * reference: what is still registered stops being, waiters wake). */
static void restore_self(struct zswap_client *c) {
        ZswapRestoreStats st = { 0 };

        /* no malloc(): a fork may be waiting for us to read its event */
        const size_t size = RANGES_MAX * sizeof(ZswapSpan);
        ZswapSpan *spans = zswap_scratch_alloc(size);
        size_t n = 0;
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; spans && i < c->nranges && i < RANGES_MAX; i++)
                spans[n++] = (ZswapSpan){ c->ranges[i].addr, c->ranges[i].addr + c->ranges[i].len };
        pthread_mutex_unlock(&c->lock);

        int r = zswap_store_restore(c->uffd, c->store_fd, c->dctx, (uintptr_t)c->staging, STAGING_BYTES, spans, n,
                                    &st);
        zswap_scratch_free(spans, size);
        c->uffd = safe_close(c->uffd);
        /* unregistered with the uffd: no event for anybody to read */
        madvise(c->staging, STAGING_BYTES, MADV_DONTNEED);
        c->staging_stale = false;
        c->store_fd = safe_close(c->store_fd);

        pthread_mutex_lock(&c->lock);
        c->recovery.restores++;
        c->recovery.restore.restored += st.restored;
        c->recovery.restore.present += st.present;
        c->recovery.restore.gone += st.gone;
        c->recovery.restore.bad += st.bad;
        c->recovery.restore.children += st.children;
        c->recovery.restore.tier += st.tier;
        pthread_mutex_unlock(&c->lock);
        report(c, "restored %" PRIu64 " pages from the store (present %" PRIu64 ", gone %" PRIu64 ", bad %" PRIu64
                  ", children %" PRIu64 ")%s",
               st.restored, st.present, st.gone, st.bad, st.children, r < 0 ? ": the store is unreadable" : "");
        if (st.tier)
                report(c, "%" PRIu64 " pages were on zswapd's second tier, which only zswapd can read: they are "
                          "lost and poisoned (SIGBUS on access); keep zswapd restarting (systemd Restart=) to keep them",
                       st.tier);
}

/* Requests go to sock from now on; the agent serves it. */
static void publish(struct zswap_client *c, int sock) {
        struct timeval tv = { 0 };
        int old;

        setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        pthread_mutex_lock(&c->send_lock);
        pthread_mutex_lock(&c->lock);
        old = c->sock;
        c->sock = sock;
        c->gen++;
        c->recovering = false;
        if (c->closing)
                shutdown(sock, SHUT_RDWR); /* client_free() waits for us to leave */
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_unlock(&c->send_lock);
        safe_close(old);
}

static void set_lost(struct zswap_client *c, bool recovering_now, bool dead) {
        pthread_mutex_lock(&c->send_lock);
        pthread_mutex_lock(&c->lock);
        c->gen++; /* requests in flight: -ENOTCONN */
        c->recovering = recovering_now;
        c->dead = dead;
        if (recovering_now)
                c->recovery.losses++;
        else if (dead)
                c->recovery.detached++;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_unlock(&c->send_lock);
}

static uint64_t ms_left(uint64_t deadline) {
        uint64_t now = now_ns();
        return now >= deadline ? 0 : (deadline - now) / 1000000;
}

/* Wait RECONNECT_STEP_MS, or until client_free() wants us gone. False: stop trying. */
static bool recover_wait(struct zswap_client *c, uint64_t deadline, bool sleep) {
        struct timespec ts;

        pthread_mutex_lock(&c->lock);
        if (sleep && !c->closing && ms_left(deadline) > 0) {
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t ns = (uint64_t)ts.tv_nsec + MIN(ms_left(deadline), (uint64_t)RECONNECT_STEP_MS) * 1000000;
                ts.tv_sec += (time_t)(ns / 1000000000);
                ts.tv_nsec = (long)(ns % 1000000000);
                pthread_cond_timedwait(&c->cond, &c->lock, &ts);
        }
        bool go_on = !c->closing && ms_left(deadline) > 0;
        pthread_mutex_unlock(&c->lock);
        return go_on;
}

/*
 * The daemon is gone and we hold a store. Find a new daemon to adopt it
 * until reconnect_ms has passed; a daemon that cannot adopt it is attached
 * to anew, after we put the pages back ourselves if it still held any.
 * True: a new connection is published, the agent serves it.
 */
static bool agent_recover(struct zswap_client *c) {
        uint64_t deadline = now_ns() + (uint64_t)atomic_load_explicit(&c->reconnect_ms, memory_order_relaxed) * 1000000;
        int ns = -1, spare = -EBADF, r = -ETIMEDOUT;
        bool answered = false, sleep = false, untrusted = false;
        int64_t pages = 0;

        set_lost(c, true, false);
        c->staging_stale = true;
        if (sync_new(c) < 0 && c->sync)
                /* seq_cst, as every access of the handshake's counters
                 * (zsync.h); not argued weaker */
                atomic_store_explicit(&c->sync->reading, 0, memory_order_seq_cst);
        while (recover_wait(c, deadline, sleep)) {
                sleep = true;
                if (ns < 0) {
                        r = dial(c, MAX((unsigned)ms_left(deadline), (unsigned)HANDSHAKE_REPLY_MIN_MS), &ns, &spare);
                        if (r == -EPERM && !untrusted)
                                report(c, "the socket's listener is not root nor $ZSWAP_DAEMON_UID: nothing sent "
                                          "to it, still looking for zswapd");
                        untrusted |= r == -EPERM;
                        if (r < 0)
                                continue;
                }
                r = adopt(c, ns, &pages);
                pthread_mutex_lock(&c->lock);
                c->recovery.last_adopt_status = r;
                pthread_mutex_unlock(&c->lock);
                if (r == 0) {
                        if (spare >= 0)
                                safe_close(spare);
                        pthread_mutex_lock(&c->lock);
                        c->recovery.adopted++;
                        pthread_mutex_unlock(&c->lock);
                        publish(c, ns);
                        report(c, "adopted by a new daemon (%" PRId64 " pages held)", pages);
                        return true;
                }
                if (r == -EBUSY)
                        continue;
                if (conn_error(r) && r != -ENOENT) {
                        ns = safe_close(ns);
                        if (spare >= 0)
                                safe_close(spare);
                        spare = -EBADF;
                        continue;
                }
                answered = true; /* -ENOENT: released; -EBADMSG or other: restore */
                break;
        }
        if (answered && r == -ENOENT) {
                /* the old daemon gave every page back: nothing to restore */
                c->uffd = safe_close(c->uffd);
                madvise(c->staging, STAGING_BYTES, MADV_DONTNEED);
                c->staging_stale = false;
                c->store_fd = safe_close(c->store_fd);
        } else
                restore_self(c);
        pthread_mutex_lock(&c->lock);
        answered = answered && !c->closing;
        pthread_mutex_unlock(&c->lock);
        if (answered) {
                r = attach_anew(c, ns, spare);
                spare = -EBADF; /* our uffd now, if there was one */
                if (r == 0) {
                        pthread_mutex_lock(&c->lock);
                        c->recovery.reattached++;
                        pthread_mutex_unlock(&c->lock);
                        publish(c, ns);
                        report(c, "attached anew to a new daemon");
                        return true;
                }
                /* the new daemon lets go of what it got when we hang up;
                 * whatever it evicted meanwhile comes back from its store */
                ns = safe_close(ns);
                if (c->store_fd >= 0 && c->uffd >= 0)
                        restore_self(c);
                c->uffd = safe_close(c->uffd);
                c->store_fd = safe_close(c->store_fd);
        }
        safe_close(ns);
        if (spare >= 0)
                safe_close(spare);
        set_lost(c, false, true);
        report(c, "detached: no daemon took the store over");
        return false;
}

void zswap_atfork_init(void) {
        pthread_once(&atfork_once, atfork_install);
}

_public_ int zswap_connect(const char *socket_path, struct zswap_client **ret) {
        int saved = errno, r;
        struct zswap_client *c;

        if (!ret)
                return -EINVAL;
        if (!socket_path)
                socket_path = getenv("ZSWAP_SOCKET");
        if (!socket_path || !*socket_path)
                socket_path = ZSWAP_DEFAULT_SOCKET;
        pthread_once(&atfork_once, atfork_install);
        r = client_alloc(socket_path, &c);
        if (r == 0) {
                r = connect_client(c);
                if (r < 0)
                        client_free(c);
        }
        if (r == 0) {
                pthread_mutex_lock(&clients_lock);
                c->next_client = clients;
                clients = c;
                pthread_mutex_unlock(&clients_lock);
                *ret = c;
        }
        errno = saved;
        return r;
}

static int range_request(struct zswap_client *c, uint16_t type, void *addr, size_t len, int64_t *value) {
        ZMsgRange m = { .addr = (uintptr_t)addr, .len = len };

        if (!c || !addr || len == 0 || !page_aligned((uintptr_t)addr) || !page_aligned(len))
                return -EINVAL;
        zmsg_init(&m.hdr, type, 0, sizeof(m));
        return request(c, &m, sizeof(m), NULL, 0, NULL, 0, NULL, value);
}

_public_ int zswap_register(struct zswap_client *c, void *addr, size_t len) {
        int saved = errno, r;

        r = range_request(c, ZMSG_REGISTER, addr, len, NULL);
        if (r == 0) {
                pthread_mutex_lock(&c->lock);
                Range *n = c->nranges < RANGES_MAX ? zswap_mem_realloc(c->ranges, (c->nranges + 1) * sizeof(Range)) : NULL;
                if (n) {
                        c->ranges = n;
                        c->ranges[c->nranges++] = (Range){ (uintptr_t)addr, len };
                }
                pthread_mutex_unlock(&c->lock);
        }
        errno = saved;
        return r;
}

static void ranges_forget(struct zswap_client *c, uint64_t addr, uint64_t len) {
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->nranges; i++) {
                Range *g = &c->ranges[i];
                if (g->addr == addr && g->len == len) {
                        *g = c->ranges[--c->nranges];
                        break;
                }
                if (addr >= g->addr && addr + len <= g->addr + g->len) {
                        /* a part: keep the rest (the tail becomes its own range) */
                        uint64_t tail = g->addr + g->len - (addr + len);
                        g->len = addr - g->addr;
                        Range *n = tail ? zswap_mem_realloc(c->ranges, (c->nranges + 1) * sizeof(Range)) : NULL;
                        if (n) {
                                c->ranges = n;
                                c->ranges[c->nranges++] = (Range){ addr + len, tail };
                        }
                        if (c->ranges[i].len == 0)
                                c->ranges[i] = c->ranges[--c->nranges];
                        break;
                }
        }
        pthread_mutex_unlock(&c->lock);
}

_public_ int zswap_unregister(struct zswap_client *c, void *addr, size_t len) {
        int saved = errno, r;

        r = range_request(c, ZMSG_UNREGISTER, addr, len, NULL);
        if (r == 0)
                ranges_forget(c, (uintptr_t)addr, len);
        errno = saved;
        return r;
}

_public_ int zswap_pageout(struct zswap_client *c, void *addr, size_t len) {
        int saved = errno, r;
        int64_t value = 0;

        r = range_request(c, ZMSG_PAGEOUT, addr, len, &value);
        errno = saved;
        if (r < 0)
                return r;
        return value > INT32_MAX ? INT32_MAX : (int)value;
}

_public_ int zswap_set_limit(struct zswap_client *c, uint64_t bytes) {
        ZMsgLimit q = { .pid = 0, .bytes = bytes };
        int saved = errno, r;

        if (!c)
                return -EINVAL;
        zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 0, sizeof(q));
        r = request(c, &q, sizeof(q), NULL, 0, NULL, 0, NULL, NULL);
        if (r == 0) {
                /* a daemon that attaches us anew after a restart gets it again */
                pthread_mutex_lock(&c->lock);
                c->limit_set = true;
                c->limit_bytes = bytes;
                pthread_mutex_unlock(&c->lock);
        }
        errno = saved;
        return r;
}

_public_ int zswap_set_reconnect_timeout(struct zswap_client *c, unsigned timeout_ms) {
        if (!c)
                return -EINVAL;
        /* relaxed: a setting read once at the next loss, nothing else hangs on it */
        atomic_store_explicit(&c->reconnect_ms, timeout_ms, memory_order_relaxed);
        return 0;
}

void zswap_client_recovery(struct zswap_client *c, ZswapRecovery *ret) {
        pthread_mutex_lock(&c->lock);
        *ret = c->recovery;
        pthread_mutex_unlock(&c->lock);
}

size_t zswap_client_fds(struct zswap_client *c, int *out, size_t cap) {
        const int fds[] = { c->sock, c->uffd, c->store_fd, c->sync_fd };
        size_t n = 0;

        for (size_t i = 0; i < ELEMENTSOF(fds) && n < cap; i++)
                if (fds[i] >= 0)
                        out[n++] = fds[i];
        return n;
}

bool zswap_client_recovering(struct zswap_client *c) {
        return c && recovering(c);
}

_public_ int zswap_get_stats(struct zswap_client *c, enum zswap_stats_scope scope, struct zswap_stats *ret) {
        ZMsgStatsReq q = { .scope = (uint32_t)scope };
        ZMsgStatsReply rep;
        int saved = errno, r;

        if (!c || !ret)
                return -EINVAL;
        memset(&rep, 0, sizeof(rep));
        zmsg_init(&q.hdr, ZMSG_STATS, 0, sizeof(q));
        r = request(c, &q, sizeof(q), NULL, 0, &rep, sizeof(rep), NULL, NULL);
        if (r == 0) {
                if (rep.hdr.type != ZMSG_STATS_REPLY)
                        r = -EPROTO;
                else
                        *ret = rep.stats;
        }
        errno = saved;
        return r;
}

_public_ void zswap_disconnect(struct zswap_client *c) {
        int saved = errno;

        if (!c)
                return;
        pthread_mutex_lock(&clients_lock);
        for (struct zswap_client **p = &clients; *p; p = &(*p)->next_client)
                if (*p == c) {
                        *p = c->next_client;
                        break;
                }
        pthread_mutex_unlock(&clients_lock);
        /* every page comes back before we let go */
        for (;;) {
                Range g;
                pthread_mutex_lock(&c->lock);
                bool any = c->nranges > 0;
                if (any)
                        g = c->ranges[c->nranges - 1];
                pthread_mutex_unlock(&c->lock);
                if (!any)
                        break;
                int r = range_request(c, ZMSG_UNREGISTER, (void *)(uintptr_t)g.addr, g.len, NULL);
                if (r < 0) {
                        /* The daemon is gone or not answering: our uffd must
                         * stay open, so that the memory stays registered and
                         * an evicted page waits rather than reading as zeros.
                         * Any other refusal (the program unmapped part of the
                         * range itself, say) leaves nothing of ours held
                         * there: the daemon restores every page it holds for
                         * us when the connection closes. */
                        bool gone = r == -ENOTCONN || r == -ETIMEDOUT || r == -ECONNRESET || r == -EPIPE;
                        pthread_mutex_lock(&c->lock);
                        c->nranges--;
                        if (gone)
                                c->keep_uffd = true;
                        pthread_mutex_unlock(&c->lock);
                        continue;
                }
                ranges_forget(c, g.addr, g.len);
        }
        client_free(c);
        errno = saved;
}

/* ---- fork ---- */

/* 64 random bits, never 0 (the daemon's "no token") nor the last one.
 * getrandom() blocks only until the kernel's generator is seeded at boot;
 * should it fail anyway (a seccomp filter, say), the clock and pid are
 * mixed in: unique, but guessable, which only matters once the parent is
 * gone. */
static uint64_t fork_token_new(uint64_t last) {
        uint64_t t = 0;
        ssize_t n;

        do
                n = getrandom(&t, sizeof(t), 0);
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(t)) {
                t = now_ns() ^ ((uint64_t)getpid() << 32) ^ last;
                t = (t ^ (t >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finish */
                t = (t ^ (t >> 27)) * 0x94d049bb133111ebull;
                t ^= t >> 31;
        }
        return t == 0 || t == last ? ~last | 1 : t;
}

uint64_t zswap_fork_token_last(void) {
        return fork_token;
}

static void atfork_prepare(void) {
        pthread_mutex_lock(&clients_lock);
        /* a child that has not attached yet forks: it attaches now, so
         * that its own child is forked from a client the daemon knows */
        for (struct zswap_client *c = clients; c; c = c->next_client)
                if (c->child_pending)
                        child_attach_now(c);
        fork_token = fork_token_new(fork_token);
        for (struct zswap_client *c = clients; c; c = c->next_client) {
                ZMsgFork h = { .token = fork_token };
                int64_t held = 0;
                /* While the agent looks for a new daemon, the fork waits for
                 * the outcome (it would wait in the kernel anyway, until
                 * somebody reads its event): only a daemon that got our
                 * FORK_PREPARE knows the token the child will name. The
                 * agent never takes clients_lock. */
                uint64_t gen;
                int r;
                for (int tries = 0;; tries++) {
                        pthread_mutex_lock(&c->lock);
                        while (c->recovering)
                                pthread_cond_wait(&c->cond, &c->lock);
                        gen = c->gen;
                        bool dead = c->dead;
                        pthread_mutex_unlock(&c->lock);
                        zmsg_init(&h.hdr, ZMSG_FORK_PREPARE, 0, sizeof(h));
                        /* waits until no page of ours is in flight; a dead
                         * daemon answers at once with ENOTCONN, a stuck one
                         * times out */
                        r = request_timed(c, &h, sizeof(h), NULL, 0, NULL, 0, NULL, &held, 10);
                        if (r != -ENOTCONN || dead || tries == 2)
                                break;
                        /* the daemon died before it answered (pages of ours
                         * may have been in flight): to the next one, once
                         * the agent has seen the loss (a second at most) and
                         * found it; a child can restore itself only from a
                         * store whose daemon the fork was announced to */
                        struct timespec until;
                        clock_gettime(CLOCK_MONOTONIC, &until);
                        until.tv_sec += 1;
                        pthread_mutex_lock(&c->lock);
                        while (c->gen == gen && !c->dead &&
                               pthread_cond_timedwait(&c->cond, &c->lock, &until) != ETIMEDOUT)
                                ;
                        bool seen = c->gen != gen;
                        pthread_mutex_unlock(&c->lock);
                        if (!seen)
                                break;
                }
                /* answered: its daemon wrote our token into its store
                 * before it answered, whatever happened to it since */
                pthread_mutex_lock(&c->lock);
                c->fork_ok = r == 0;
                c->fork_held = r == 0 && held > 0 ? held : 0;
                pthread_mutex_unlock(&c->lock);
        }
}

static void atfork_parent(void) {
        for (struct zswap_client *c = clients; c; c = c->next_client) {
                ZMsgHeader h;
                zmsg_init(&h, ZMSG_FORK_DONE, new_id(c), sizeof(h));
                /* only to a live connection: a daemon that took over since
                 * never got our FORK_PREPARE */
                pthread_mutex_lock(&c->send_lock);
                pthread_mutex_lock(&c->lock);
                bool live = !c->dead && !c->recovering;
                pthread_mutex_unlock(&c->lock);
                if (live)
                        zmsg_send(c->sock, &h, sizeof(h), NULL, 0);
                pthread_mutex_unlock(&c->send_lock);
        }
        pthread_mutex_unlock(&clients_lock);
}

static bool ranges_registered(struct zswap_client *c);

/* In the child: take over the address space the daemon tracks for us. */
static int child_reconnect(struct zswap_client *c) {
        ZMsgChild ch = { .fork_token = c->child_token,
                         .staging_addr = (uintptr_t)c->staging };
        int devfd = -1, r;

        c->sock = sock_connect(c);
        if (c->sock < 0)
                return c->sock;
        r = hello(c, ZROLE_CHILD, &devfd);
        /* our uffd comes from the fork event: a device an older daemon
         * hands a child too is never needed, closed at once */
        safe_close(devfd);
        if (r < 0)
                return r;
        /* a sync page of our own (zsync.h), given with the attach: the one
         * we inherited is the parent's, and the parent may have replaced
         * it (a recovery) after the daemon read our fork event with the
         * old one, or around our fork */
        if (sync_new(c) < 0) {
                c->sync = NULL; /* no handshake rather than a page we may not have */
                c->sync_fd = safe_close(c->sync_fd);
        }
        /* the daemon may still be handling the fork event that created our
         * address space (it copies what the parent had evicted): up to 5 s */
        for (int i = 0; i < 1000; i++) {
                int rfd[2];
                zmsg_init(&ch.hdr, ZMSG_CHILD_ATTACH, 0, sizeof(ch));
                r = request(c, &ch, sizeof(ch), &c->sync_fd, c->sync_fd >= 0 ? 1 : 0, NULL, 0, rfd, NULL);
                /* [our uffd, our store]; an older daemon sends no store */
                c->uffd = rfd[0];
                store_accept(c, rfd[1]);
                if (r != -ESRCH)
                        break;
                /* a daemon that does not know us, and our memory no longer
                 * registered: our uffd went with the daemon that read our
                 * fork event, and no daemon will ever know us */
                if (i % 10 == 9 && !ranges_registered(c))
                        break;
                usleep(5000);
        }
        if (r == 0 && c->uffd < 0)
                r = -EPROTO;
        if (r < 0)
                return r;
        /* the staging area came with the fork, registered on our new uffd,
         * with whatever the parent had in it: free that first */
        staging_free(c, 0, STAGING_BYTES);
        r = staging_register(c);
        if (r < 0)
                return r;
        r = agent_start(c);
        if (r < 0)
                return r;
        return attach(c, false);
}

static int held_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        unsigned st = pe_state(atomic_load_explicit(e, memory_order_relaxed));
        return st == PE_STORED || st == PE_SAME || st == PE_MOVING || st == PE_STAGED || st == PE_LOADING;
}

/* Did the parent's store (inherited) hold pages out of memory? Those are
 * missing in our address space too. */
static bool parent_held_pages(int store_fd) {
        uint8_t *map;
        bool held = false;

        if (store_fd < 0)
                return false;
        /* a descriptor we do not have (the agent received it between the
         * fork's copy of our descriptors and its copy of our memory), or
         * not a store: it may have held pages, which we cannot tell */
        if (store_map(store_fd, false, &map) < 0)
                return true;
        if (store_check(map, NULL, 0) == 0)
                held = store_walk(map, held_cb, NULL) == 1;
        store_unmap(map);
        return held;
}

/* The daemon at the other end of the connection we inherited: most likely
 * the one that read our fork event and holds our uffd. A pidfd, or -1. */
static int peer_pidfd(int sock) {
        struct ucred cr;
        socklen_t len = sizeof(cr);

        if (sock < 0 || getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.pid <= 0)
                return -1;
        return (int)syscall(SYS_pidfd_open, cr.pid, 0);
}

/* Does somebody still hold our uffd (and serve our faults)? When its last
 * reference goes the kernel unregisters every range of it at once, so one
 * range still registered ("um" in VmFlags, or "uw" for a range registered
 * for write-protect faults only), or the staging area ("uw"), says so. One is enough:
 * our list of ranges does not follow mremap(), and may name a place a
 * range left (a child whose live daemon was still copying its pages gave
 * up attaching, took that for its memory unregistered, and was killed). */
static bool ranges_registered(struct zswap_client *c) {
        uint64_t lo = 0, hi = 0, staging = (uintptr_t)c->staging;
        char line[512];
        bool ok = false;

        if (c->nranges == 0 && !c->staging)
                return true;
        FILE *f = fopen("/proc/self/smaps", "re");
        if (!f)
                return true; /* cannot tell: do not kill on a guess */
        while (!ok && fgets(line, sizeof(line), f)) {
                unsigned long long s, e;
                if (sscanf(line, "%llx-%llx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' ')) {
                        lo = s;
                        hi = e;
                        continue;
                }
                if (strncmp(line, "VmFlags:", 8))
                        continue;
                /* missing faults (armed) or write-protect ones alone
                 * (never evicted from: daemon/mmclient.c) */
                if (vmflags_uffd_registered(line))
                        for (size_t i = 0; i < c->nranges && !ok; i++)
                                ok = c->ranges[i].addr >= lo && c->ranges[i].addr < hi;
                /* the staging area: registered for write-protect faults */
                if (staging && staging >= lo && staging < hi && vmflags_uffd_registered(line))
                        ok = true;
        }
        fclose(f);
        return ok;
}

/*
 * A fork whose daemon died before we held our own uffd: the kernel gave
 * the only reference to that daemon, so when it died it unregistered our
 * memory, and the pages the parent had evicted at the fork are missing
 * from our address space (they would read as zeros). The daemon kept the
 * parent's store, which we inherited, as it was at the fork until we
 * attached (daemon/fault.c, fork_held()): we write those pages back in
 * place from it (zswap_store_restore_forked()) and carry on unmanaged.
 * That store is as it was at the fork only if our fork was announced
 * (FORK_PREPARE answered: announced) and the store names it: its daemon
 * answered that FORK_PREPARE, or adopted the parent between the answer
 * and the fork and took the fork as announced to itself (daemon/manager.c
 * do_adopt(): it evicted nothing until the fork was done). A daemon that
 * took the parent over otherwise may have evicted into a store we do not
 * hold. If the daemon died before it answered, the FORK_PREPARE went to
 * the next (atfork_prepare()). Only if that cannot be done
 * (not announced so, the daemon served the parent again after waiting for
 * us too long, a page was on its second tier, the store is broken) is the
 * loss never let pass silently: we say so and die, as a
 * process whose memory the kernel could not give back would. The test is
 * on our own memory, once that daemon is surely gone (its pidfd, up to
 * 2 s): a range no longer registered while the parent held pages at the
 * fork (held, looked at before we tried to attach). A daemon that is
 * alive still serves us through the uffd it holds, whatever else failed.
 */
static void child_lost(struct zswap_client *c, bool held, bool announced, int daemon_pidfd, int parent_store) {
        static const char msg[] = "libzswap: zswapd died while this process was being forked; "
                                  "the memory it held for the parent is lost to the child: killing it\n";
        struct pollfd p = { .fd = daemon_pidfd, .events = POLLIN };
        ZswapRestoreStats st = { 0 };
        char line[256];

        if (!held)
                return;
        if (daemon_pidfd >= 0)
                (void)poll(&p, 1, 2000);
        if (ranges_registered(c))
                return;
        /* any address the store names (our list of ranges does not follow
         * mremap(), the store does): only anonymous memory with nothing in
         * place is written */
        static const ZswapSpan all = { 0, PINDEX_MAX_ADDR };
        int r = !announced ? -ESTALE
                           : zswap_store_restore_forked(parent_store, c->dctx, fork_token, (uintptr_t)c->staging,
                                                        STAGING_BYTES, &all, 1, &st);
        if (r == 0) {
                int n = snprintf(line, sizeof(line),
                                 "libzswap: zswapd died while this process was being forked; the %llu pages it "
                                 "held for the parent were written back from the parent's store: running unmanaged\n",
                                 (unsigned long long)st.restored);
                (void)!write(STDERR_FILENO, line, (size_t)MIN(n, (int)sizeof(line) - 1));
                return;
        }
        (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
        raise(SIGKILL);
}

/* A child that put off attaching (child_pending) attaches. Under
 * clients_lock; 0, or the error that leaves it unmanaged: the daemon
 * still serves what it holds through the uffd it got. */
static int child_attach_now(struct zswap_client *c) {
        int r;

        c->child_pending = false;
        c->dead = false;
        r = child_reconnect(c);
        if (r < 0) {
                c->sock = safe_close(c->sock);
                c->dead = true;
        }
        return r;
}

static bool child_attach_deferred;

void zswap_child_attach_defer(void) {
        pthread_mutex_lock(&clients_lock);
        child_attach_deferred = true;
        pthread_mutex_unlock(&clients_lock);
}

bool zswap_child_pending(struct zswap_client *c) {
        pthread_mutex_lock(&clients_lock);
        bool pending = c && c->child_pending;
        pthread_mutex_unlock(&clients_lock);
        return pending;
}

int zswap_child_attach(struct zswap_client *c) {
        int saved = errno;
        pthread_mutex_lock(&clients_lock);
        int r = c && c->child_pending ? child_attach_now(c) : 0;
        pthread_mutex_unlock(&clients_lock);
        errno = saved;
        return r;
}

static void atfork_child(void) {
        int saved = errno;

        for (struct zswap_client *c = clients; c; c = c->next_client) {
                /* a parent with no uffd (detached after a restore) had no
                 * fork event: the daemon knows nothing of us */
                bool managed = c->uffd >= 0 && !c->dead;
                /* what we inherited belongs to the parent: whether the
                 * daemon held pages out for it at the fork (its answer to
                 * our FORK_PREPARE, or else the parent's store now), and
                 * who its daemon is, in case we cannot attach */
                bool held = managed && (c->fork_held > 0 ? c->fork_held > 1 : parent_held_pages(c->store_fd));
                /* our fork was announced: whether the store we hold is
                 * as at the fork, the store says (it names our fork only
                 * if its daemon answered our FORK_PREPARE, or adopted the
                 * parent while it forked: zswap_store_restore_forked()) */
                bool announced = c->fork_ok;
                /* the agent between two daemons at the fork: the next
                 * one may be serving the parent already while the store
                 * we hold is the last one's, which events (an unmap, a
                 * DONTNEED) no longer reach: not to be trusted */
                bool adopting = c->recovering;
                int daemon_pidfd = managed ? peer_pidfd(c->sock) : -1;
                int parent_store = c->store_fd;
                c->store_fd = -1;
                c->sock = safe_close(c->sock);
                c->uffd = safe_close(c->uffd);
                c->agent_running = false;
                c->pending = NULL;
                c->dead = false;
                c->recovering = false;
                c->closing = false;
                c->gen = 0;
                c->staging_stale = false;
                c->recovery = (ZswapRecovery){ .last_adopt_status = 1 };
                pthread_mutex_init(&c->send_lock, NULL);
                pthread_mutex_init(&c->lock, NULL);
                cond_init_monotonic(&c->cond);
                c->child_token = fork_token;
                c->child_pending = false;
                if (managed && !held && announced && !adopting && child_attach_deferred) {
                        /* nothing of ours is out of memory, and the daemon
                         * holds no parent for us: attach later, if we live
                         * that long (a shell's child execs first) */
                        safe_close(daemon_pidfd);
                        safe_close(parent_store);
                        c->child_pending = true;
                        c->dead = true; /* until then */
                        continue;
                }
                int r = managed ? child_reconnect(c) : -ENOTCONN;
                if (managed && r < 0)
                        child_lost(c, held, announced && !adopting, daemon_pidfd, parent_store);
                safe_close(daemon_pidfd);
                safe_close(parent_store);
                if (r < 0) {
                        /* carry on unmanaged; the daemon still serves the
                         * pages it holds for us through the uffd it got */
                        c->sock = safe_close(c->sock);
                        c->dead = true;
                }
        }
        pthread_mutex_unlock(&clients_lock);
        errno = saved;
}
