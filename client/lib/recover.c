/*
 * recover.c: what the agent does when the daemon goes and we hold a store
 * (agent_recover(), from agent.c only: all of this runs on the agent).
 * Every RECONNECT_STEP_MS until reconnect_ms has passed it dials the
 * socket again (dial()) and hands uffd, store and a fresh sync page to
 * whoever answers (adopt(), ZMSG_ADOPT). A daemon that cannot adopt the
 * store is attached to anew (attach_anew()), after we put every page back
 * ourselves (restore_self(): zswap_store_restore(), restore.c) if it
 * still held any; with no daemon in time we restore and stay detached.
 * Requesters see a new connection only once publish() set it, under
 * send_lock and lock; until then the agent talks to it alone
 * (agent_call()). Each step may write one line to $ZSWAP_RECOVERY_FD
 * (report()).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "macro.h"
#include "protocol.h"
#include "util.h"
#include "zsync.h"

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
                for (int i = 0; i < REPLY_FDS; i++)
                        rfd[i] = -1;
        h->id = new_id(c);
        r = zmsg_send(sock, msg, len, fds, nfds);
        if (r < 0)
                return r;
        for (;;) {
                int got[REPLY_FDS];
                size_t ngot = REPLY_FDS;
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
        ZMsgHello h = { .role = ZROLE_CLIENT, .features = zswap_hello_features };
        int fds[REPLY_FDS];
        int s = sock_connect(c);

        if (s < 0)
                return s;
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        int r = agent_call(c, s, &h, sizeof(h), NULL, 0, fds, NULL);
        safe_close(fds[1]);
        safe_close(fds[2]);
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
        ZMsgGroup g = { .limit = c->group_limit, .unmanaged = c->group_unmanaged };
        memcpy(g.name, c->group, sizeof(g.name));
        bool limit = c->limit_set;
        pthread_mutex_unlock(&c->lock);
        if (limit) {
                zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 0, sizeof(q));
                (void)agent_call(c, sock, &q, sizeof(q), NULL, 0, NULL, NULL);
        }
        if (g.limit) {
                zmsg_init(&g.hdr, ZMSG_SET_GROUP, 0, sizeof(g));
                (void)agent_call(c, sock, &g, sizeof(g), NULL, 0, NULL, NULL);
        }
}

/* Hand uffd, store and a fresh sync page to the daemon on sock. It copies
 * what it keeps into a store of its own and hands us that one: the old one
 * is stale from now on (a later restart must hand over the new one). */
static int adopt(struct zswap_client *c, int sock, int64_t *pages) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging, .staging_len = STAGING_BYTES,
                         .fork_token = fork_token };
        /* [uffd, store, sync page if any, shared store if any] */
        int fds[4] = { c->uffd, c->store_fd }, rfd[REPLY_FDS];
        size_t nfds = 2;
        if (c->sync_fd >= 0)
                fds[nfds++] = c->sync_fd;
        if (c->shared_fd >= 0)
                fds[nfds++] = c->shared_fd;

        zmsg_init(&a.hdr, ZMSG_ADOPT, 0, sizeof(a));
        int r = agent_call(c, sock, &a, sizeof(a), fds, nfds, rfd, pages);
        if (r == 0 && rfd[0] >= 0)
                store_accept(c, rfd[0], rfd[1]);
        else {
                safe_close(rfd[0]);
                safe_close(rfd[1]);
        }
        safe_close(rfd[2]);
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
        int rfd[REPLY_FDS], r;

        if (spare < 0)
                return spare;
        c->uffd = spare;
        int fds[2] = { c->uffd, c->sync_fd };
        zmsg_init(&a.hdr, ZMSG_ATTACH, 0, sizeof(a));
        r = agent_call(c, sock, &a, sizeof(a), fds, c->sync_fd >= 0 ? 2 : 1, rfd, NULL);
        if (r < 0)
                return r;
        store_accept(c, rfd[0], rfd[1]);
        safe_close(rfd[2]);
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

        int r = zswap_store_restore(c->uffd, c->store_fd, c->shared_fd, c->dctx, (uintptr_t)c->staging,
                                    STAGING_BYTES, spans, n, &st);
        zswap_scratch_free(spans, size);
        c->uffd = safe_close(c->uffd);
        /* unregistered with the uffd: no event for anybody to read */
        madvise(c->staging, STAGING_BYTES, MADV_DONTNEED);
        c->staging_stale = false;
        c->store_fd = safe_close(c->store_fd);
        c->shared_fd = safe_close(c->shared_fd);

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
bool agent_recover(struct zswap_client *c) {
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
                c->shared_fd = safe_close(c->shared_fd);
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
                c->shared_fd = safe_close(c->shared_fd);
        }
        safe_close(ns);
        if (spare >= 0)
                safe_close(spare);
        set_lost(c, false, true);
        report(c, "detached: no daemon took the store over");
        return false;
}
