/*
 * libzswap.c: the client side of zswapd.
 *
 * A client is one connection to the daemon plus one userfaultfd created in
 * this process through the /dev/userfaultfd descriptor the daemon hands
 * over (so kernel-mode faults, e.g. read(2) into evicted memory, reach the
 * daemon; UFFD_USER_MODE_ONLY is never used). The daemon reads its faults
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
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <sys/un.h>

#include "macro.h"
#include "libzswap-internal.h"
#include "protocol.h"
#include "zsync.h"
#include "uffd-compat.h"
#include "util.h"
#include "zswap.h"

#define STAGING_LANES 4
#define STAGING_BYTES ((size_t)STAGING_LANES * ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE)
#define RANGES_MAX 4096

typedef struct Pending {
        struct Pending *next;
        uint32_t id;
        unsigned timeout_s; /* 0: wait for as long as the daemon lives */
        bool done;
        ssize_t len;
        int fd;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
} Pending;

typedef struct Range {
        uint64_t addr, len;
} Range;

struct zswap_client {
        int sock;
        int uffd;
        uint8_t *staging;
        ZSync *sync;  /* shared with the daemon (zsync.h): moves and its uffd reads apart */
        int sync_fd;
        char path[108];

        pthread_t agent;
        bool agent_running; /* set before the agent starts, cleared after join */

        pthread_mutex_t lock; /* protects everything below */
        pthread_cond_t cond;
        Pending *pending;
        bool dead;            /* the daemon hung up */
        bool keep_uffd;       /* pages may still be held: never close our uffd */
        Range *ranges;        /* what we registered, for disconnect */
        size_t nranges;

        _Atomic uint32_t next_id;
        struct zswap_client *next_client; /* protected by clients_lock */
};

/* Every client of the process, for the fork handlers. */
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zswap_client *clients;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* Incremented before each fork; the daemon reads it from our memory when the
 * kernel reports the fork, the child names it to claim its address space. */
static volatile uint64_t fork_token;

/* ---- requests ---- */

static uint32_t new_id(struct zswap_client *c) {
        uint32_t id;
        do
                id = atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed) + 1;
        while (id == 0);
        return id;
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
                for (size_t i = 0; i < nfds; i++) {
                        if (mine && i == 0 && rfd)
                                *rfd = fds[0];
                        else
                                safe_close(fds[i]);
                }
                if (mine)
                        return n;
        }
}

static ssize_t request_agent(struct zswap_client *c, Pending *p, const void *msg, size_t len, const int *fds,
                             size_t nfds) {
        ssize_t r;

        pthread_mutex_lock(&c->lock);
        if (c->dead) {
                pthread_mutex_unlock(&c->lock);
                return -ENOTCONN;
        }
        p->next = c->pending;
        c->pending = p;
        pthread_mutex_unlock(&c->lock);

        r = zmsg_send(c->sock, msg, len, fds, nfds);

        pthread_mutex_lock(&c->lock);
        while (r >= 0 && !p->done && !c->dead) {
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
        else if (r == -ETIMEDOUT && p->fd >= 0)
                p->fd = safe_close(p->fd);
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* Send msg (its header id is set here) and wait for the reply, at most
 * timeout_s seconds if not 0. Returns the reply's status (or value >= 0
 * through *value), or -errno. */
static int request_timed(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
                         size_t reply_cap, int *rfd, int64_t *value, unsigned timeout_s) {
        ZMsgHeader *h = msg;
        Pending *p = NULL;
        _Alignas(8) uint8_t local[ZSWAP_MSG_MAX];
        ssize_t n;

        if (rfd)
                *rfd = -1;
        if (c->sock < 0)
                return -ENOTCONN;
        h->id = new_id(c);
        if (c->agent_running) {
                p = calloc(1, sizeof(*p));
                if (!p)
                        return -ENOMEM;
                p->id = h->id;
                p->fd = -1;
                p->timeout_s = timeout_s;
                n = request_agent(c, p, msg, len, fds, nfds);
                if (n > 0)
                        memcpy(local, p->buf, (size_t)n);
                if (rfd)
                        *rfd = p->fd;
                else
                        safe_close(p->fd);
                free(p);
        } else {
                n = zmsg_send(c->sock, msg, len, fds, nfds);
                if (n >= 0)
                        n = request_direct(c, h->id, local, sizeof(local), rfd);
        }
        if (n < 0)
                return (int)n;
        const ZMsgReply *rep = (const ZMsgReply *)local;
        if (rep->hdr.type == ZMSG_STATS_REPLY && reply && (size_t)n <= reply_cap)
                memcpy(reply, local, (size_t)n);
        if (rep->hdr.type == ZMSG_REPLY && rep->status == 0 && value)
                *value = rep->value;
        if (rep->status < 0 && rfd && *rfd >= 0)
                *rfd = safe_close(*rfd);
        return rep->status;
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
static void agent_move(struct zswap_client *c, const ZMsgMove *m) {
        ZMsgMoveDone done = { .npages = m->npages };
        uint32_t idx = 0;

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
                        if (r == -ETIMEDOUT)
                                break; /* the daemon is busy with our uffd: the rest stays */
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
        zmsg_send(c->sock, &done, sizeof(done), NULL, 0);
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

static void agent_release(struct zswap_client *c, const ZMsgRelease *m) {
        ZMsgRelease done = *m;

        if ((uint64_t)m->slot0 + m->nslots <= STAGING_BYTES / ZSWAP_PAGE_SIZE)
                staging_free(c, (size_t)m->slot0 * ZSWAP_PAGE_SIZE, (size_t)m->nslots * ZSWAP_PAGE_SIZE);
        zmsg_init(&done.hdr, ZMSG_RELEASE_DONE, m->hdr.id, sizeof(done));
        zmsg_send(c->sock, &done, sizeof(done), NULL, 0);
}

static void agent_reply(struct zswap_client *c, const void *buf, ssize_t n, int fd) {
        const ZMsgHeader *h = buf;

        pthread_mutex_lock(&c->lock);
        for (Pending *p = c->pending; p; p = p->next)
                if (p->id == h->id && !p->done) {
                        memcpy(p->buf, buf, (size_t)n);
                        p->len = n;
                        p->fd = fd;
                        p->done = true;
                        fd = -1;
                        pthread_cond_broadcast(&c->cond);
                        break;
                }
        pthread_mutex_unlock(&c->lock);
        safe_close(fd);
}

static void *agent_main(void *arg) {
        struct zswap_client *c = arg;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        for (;;) {
                int fds[2];
                size_t nfds = 2;
                ssize_t n = zmsg_recv(c->sock, buf, sizeof(buf), fds, &nfds, NULL);
                if (n == -EINTR || n == -EMSGSIZE)
                        continue;
                if (n <= 0)
                        break;
                const ZMsgHeader *h = (const ZMsgHeader *)buf;
                int fd = nfds > 0 ? fds[0] : -1;
                for (size_t i = 1; i < nfds; i++)
                        safe_close(fds[i]);
                if (zmsg_validate(buf, (size_t)n) < 0) {
                        safe_close(fd);
                        continue;
                }
                if (h->type == ZMSG_MOVE)
                        agent_move(c, (const ZMsgMove *)buf);
                else if (h->type == ZMSG_RELEASE)
                        agent_release(c, (const ZMsgRelease *)buf);
                else if (h->type == ZMSG_REPLY || h->type == ZMSG_STATS_REPLY) {
                        agent_reply(c, buf, n, fd);
                        fd = -1;
                }
                safe_close(fd);
        }
        pthread_mutex_lock(&c->lock);
        c->dead = true;
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
        return n;
}

static int agent_start(struct zswap_client *c) {
        sigset_t all, old;
        int r;

        /* the agent takes no signal: the program's handlers run elsewhere */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        c->agent_running = true;
        r = pthread_create(&c->agent, NULL, agent_main, c);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0)
                c->agent_running = false;
        return -r;
}

/* ---- setup ---- */

static int sock_connect(const char *path) {
        struct timeval tv = { .tv_sec = 10 };
        int fd = unix_connect(path);

        if (fd < 0)
                return fd;
        /* never hang forever on a daemon that stopped answering */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        return fd;
}

static int hello(struct zswap_client *c, uint32_t role, int *devfd) {
        ZMsgHello h = { .role = role };
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        int r = request(c, &h, sizeof(h), NULL, 0, NULL, 0, devfd, NULL);
        if (r == 0 && *devfd < 0)
                r = -EPROTO;
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

static int attach(struct zswap_client *c, bool with_uffd) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging, .staging_len = STAGING_BYTES,
                         .fork_token_addr = (uintptr_t)&fork_token };
        int fds[2] = { c->uffd, c->sync_fd };
        zmsg_init(&a.hdr, ZMSG_ATTACH, 0, sizeof(a));
        return request(c, &a, sizeof(a), with_uffd ? fds : NULL, with_uffd ? 2 : 0, NULL, 0, NULL, NULL);
}

static void client_free(struct zswap_client *c) {
        if (c->sock >= 0)
                shutdown(c->sock, SHUT_RDWR);
        if (c->agent_running) {
                /* the agent leaves on EOF; it never blocks on the daemon, but
                 * do not hang a program's exit on it if it does */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 5;
                if (pthread_timedjoin_np(c->agent, NULL, &ts) != 0) {
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
        if (c->sync)
                munmap(c->sync, ZSWAP_SYNC_SIZE);
        safe_close(c->sync_fd);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        free(c->ranges);
        free(c);
}

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

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

static int client_alloc(const char *path, struct zswap_client **ret) {
        struct zswap_client *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->sock = c->uffd = c->sync_fd = -1;
        pthread_mutex_init(&c->lock, NULL);
        cond_init_monotonic(&c->cond);
        snprintf(c->path, sizeof(c->path), "%s", path);
        c->staging = mmap(NULL, STAGING_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c->staging == MAP_FAILED) {
                c->staging = NULL;
                client_free(c);
                return -ENOMEM;
        }
        /* sealed against shrinking: the daemon maps it too, and must never
         * fault on a page we took away */
        c->sync_fd = memfd_create("zswap-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (c->sync_fd < 0 || ftruncate(c->sync_fd, ZSWAP_SYNC_SIZE) < 0 ||
            fcntl(c->sync_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
            (c->sync = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, c->sync_fd, 0)) == MAP_FAILED) {
                int r = negative_errno();
                c->sync = NULL;
                client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

static int connect_client(struct zswap_client *c) {
        int devfd = -1, r;

        c->sock = sock_connect(c->path);
        if (c->sock < 0)
                return c->sock;
        r = hello(c, ZROLE_CLIENT, &devfd);
        if (r < 0)
                return r;
        c->uffd = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        r = c->uffd < 0 ? -errno : 0;
        close(devfd);
        if (r < 0)
                return r;
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
                Range *n = c->nranges < RANGES_MAX ? realloc(c->ranges, (c->nranges + 1) * sizeof(Range)) : NULL;
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
                        Range *n = tail ? realloc(c->ranges, (c->nranges + 1) * sizeof(Range)) : NULL;
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
        errno = saved;
        return r;
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

static void atfork_prepare(void) {
        pthread_mutex_lock(&clients_lock);
        fork_token++;
        for (struct zswap_client *c = clients; c; c = c->next_client) {
                ZMsgHeader h;
                zmsg_init(&h, ZMSG_FORK_PREPARE, 0, sizeof(h));
                /* waits until no page of ours is in flight; a dead daemon
                 * answers at once with ENOTCONN, a stuck one times out */
                request_timed(c, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL, 10);
        }
}

static void atfork_parent(void) {
        for (struct zswap_client *c = clients; c; c = c->next_client) {
                ZMsgHeader h;
                zmsg_init(&h, ZMSG_FORK_DONE, new_id(c), sizeof(h));
                zmsg_send(c->sock, &h, sizeof(h), NULL, 0);
        }
        pthread_mutex_unlock(&clients_lock);
}

/* In the child: take over the address space the daemon tracks for us. */
static int child_reconnect(struct zswap_client *c) {
        ZMsgChild ch = { .fork_token = fork_token, .fork_token_addr = (uintptr_t)&fork_token,
                         .staging_addr = (uintptr_t)c->staging };
        int devfd = -1, r;

        c->sock = sock_connect(c->path);
        if (c->sock < 0)
                return c->sock;
        r = hello(c, ZROLE_CHILD, &devfd);
        if (r < 0)
                return r;
        /* the daemon may still be handling the fork event that created our
         * address space (it copies what the parent had evicted): up to 5 s */
        for (int i = 0; i < 1000; i++) {
                zmsg_init(&ch.hdr, ZMSG_CHILD_ATTACH, 0, sizeof(ch));
                r = request(c, &ch, sizeof(ch), NULL, 0, NULL, 0, &c->uffd, NULL);
                if (r != -ESRCH)
                        break;
                usleep(5000);
        }
        safe_close(devfd);
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

static void atfork_child(void) {
        int saved = errno;

        for (struct zswap_client *c = clients; c; c = c->next_client) {
                /* what we inherited belongs to the parent */
                c->sock = safe_close(c->sock);
                c->uffd = safe_close(c->uffd);
                c->agent_running = false;
                c->pending = NULL;
                c->dead = false;
                pthread_mutex_init(&c->lock, NULL);
                cond_init_monotonic(&c->cond);
                if (child_reconnect(c) < 0) {
                        /* carry on unmanaged; the daemon still serves the
                         * pages it holds for us through the uffd it got */
                        c->sock = safe_close(c->sock);
                        c->dead = true;
                }
        }
        pthread_mutex_unlock(&clients_lock);
        errno = saved;
}
