/*
 * agent.c: the agent thread, one per client (agent_start()), the only
 * reader of the client's connection once it runs. It executes the
 * daemon's MOVE (UFFDIO_MOVE of our pages into the staging area, under the
 * sync page's handshake, zsync.h) and RELEASE (emptying staging slots),
 * since only this process may move or free its own private pages, and
 * hands replies to the threads waiting in request() (request.c). When the
 * connection is lost it runs the recovery (agent_recover(), recover.c) and
 * goes on with the new connection, or marks the client dead and leaves.
 * It takes no signal and no clients_lock; zswap_self is true on it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "macro.h"
#include "pageout-stages.h"
#include "protocol.h"
#include "uffd-compat.h"
#include "util.h"
#include "zsync.h"

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

        PAGEOUT_STAGE(PS_MOVE_READ);

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
        PAGEOUT_STAGE(PS_MOVED);
        zmsg_init(&done.hdr, ZMSG_MOVE_DONE, m->hdr.id, sizeof(done));
        zmsg_send(sock, &done, sizeof(done), NULL, 0);
}

/* Free staging slots. The range is unregistered around the MADV_DONTNEED:
 * a registered range would send the daemon a REMOVE event and block us
 * until it reads it, which a dead daemon never does. No move targets a
 * lane while it is being released. */
void staging_free(struct zswap_client *c, size_t off, size_t len) {
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

        PAGEOUT_STAGE(PS_RELEASE_READ);
        if ((uint64_t)m->slot0 + m->nslots <= STAGING_BYTES / ZSWAP_PAGE_SIZE)
                staging_free(c, (size_t)m->slot0 * ZSWAP_PAGE_SIZE, (size_t)m->nslots * ZSWAP_PAGE_SIZE);
        PAGEOUT_STAGE(PS_RELEASED);
        zmsg_init(&done.hdr, ZMSG_RELEASE_DONE, m->hdr.id, sizeof(done));
        zmsg_send(sock, &done, sizeof(done), NULL, 0);
}

static void agent_reply(struct zswap_client *c, const void *buf, ssize_t n, int *fds, size_t nfds) {
        const ZMsgHeader *h = buf;

        PAGEOUT_STAGE(PS_ANSWER_READ);

        pthread_mutex_lock(&c->lock);
        for (Pending *p = c->pending; p; p = p->next)
                if (p->id == h->id && !p->done && p->gen == c->gen) {
                        memcpy(p->buf, buf, (size_t)n);
                        p->len = n;
                        for (size_t i = 0; i < nfds && i < REPLY_FDS; i++)
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
void agent_command(struct zswap_client *c, int sock, const void *buf) {
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

/* A lost connection: look for a new daemon (true: go on with it), or not. */
static bool agent_lost(struct zswap_client *c) {
        /* During connect_client(): its ATTACH may have been answered, the
         * reply handed over but the store not yet taken from it. Fail what
         * still waits for an answer, then wait for the connect to end with
         * what it got. Leaving at once with no store would leave our uffd,
         * the staging area registered on it, without a reader: the
         * program's next fork() would wait forever for its event to be
         * read (test-connect-death). */
        pthread_mutex_lock(&c->send_lock);
        pthread_mutex_lock(&c->lock);
        if (c->connecting) {
                c->gen++;
                pthread_cond_broadcast(&c->cond);
        }
        pthread_mutex_unlock(&c->send_lock);
        while (c->connecting && !c->closing)
                pthread_cond_wait(&c->cond, &c->lock);
        /* a disconnect that took every page back first: nothing to recover */
        bool clean = c->closing && c->nranges == 0 && !c->keep_uffd;
        bool recover = c->store_fd >= 0 && c->uffd >= 0 && !clean;
        pthread_mutex_unlock(&c->lock);
        return recover && agent_recover(c);
}

/* Each thread writes its own (the agent here, preload.c's threads theirs):
 * thread-local, no lock. */
__thread bool zswap_self __attribute__((tls_model("initial-exec")));

static void *agent_main(void *arg) {
        struct zswap_client *c = arg;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        zswap_self = true;

        for (;;) {
                int fds[REPLY_FDS];
                size_t nfds = REPLY_FDS;
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
                else if (valid && zmsg_is_reply(h->type)) {
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

int agent_start(struct zswap_client *c) {
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
