/*
 * request.c: a request to the daemon and its reply.
 *
 * request() sends one message and waits for the reply with the same id.
 * Before the agent runs (connect, a fork child's attach) the caller reads
 * the socket itself (request_direct()); once it runs, the agent is the
 * only reader and hands the reply over through a Pending on the caller's
 * stack, queued on c->pending under c->lock (request_agent()). A request
 * is sent only under send_lock, and only on the connection generation it
 * was queued on, so none meant for a dead daemon reaches a new one. Called
 * from program threads and the fork handlers, never from the agent, which
 * talks to a daemon it has not published yet through agent_call()
 * (recover.c).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "macro.h"
#include "protocol.h"
#include "util.h"

uint32_t new_id(struct zswap_client *c) {
        uint32_t id;
        do
                id = atomic_fetch_add_explicit(&c->next_id, 1, memory_order_relaxed) + 1;
        while (id == 0);
        return id;
}

/* Take the fds of a message: the first REPLY_FDS to rfd[] if it is ours, the rest closed. */
void take_reply_fds(int *fds, size_t nfds, bool mine, int *rfd) {
        for (size_t i = 0; i < nfds; i++) {
                if (mine && i < REPLY_FDS && rfd)
                        rfd[i] = fds[i];
                else
                        safe_close(fds[i]);
        }
}

/* Before the agent runs (connect, fork child): read replies ourselves. */
static ssize_t request_direct(struct zswap_client *c, uint32_t id, void *reply, size_t cap, int *rfd) {
        for (;;) {
                int fds[REPLY_FDS];
                size_t nfds = REPLY_FDS;
                ssize_t n = zmsg_recv(c->sock, reply, cap, fds, &nfds, NULL);
                if (n <= 0)
                        return n == 0 ? -ENOTCONN : n;
                const ZMsgHeader *h = reply;
                bool mine = zmsg_validate(reply, (size_t)n) == 0 &&
                            zmsg_is_reply(h->type) && h->id == id;
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
 * through *value), or -errno. The reply's fds (up to REPLY_FDS) go to rfd[]
 * (closed unless the status is 0). */
int request_timed(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
                         size_t reply_cap, int *rfd, int64_t *value, unsigned timeout_s) {
        ZMsgHeader *h = msg;
        _Alignas(8) uint8_t local[ZSWAP_MSG_MAX];
        int got[REPLY_FDS] = { -1, -1, -1 };
        ssize_t n;

        if (rfd)
                for (int i = 0; i < REPLY_FDS; i++)
                        rfd[i] = -1;
        h->id = new_id(c);
        if (c->agent_running) {
                /* on the caller's stack, never the program's heap: the
                 * agent writes the reply into it (request_agent() unlinks
                 * it before returning) */
                Pending pend = { .id = h->id, .fd = { -1, -1, -1 }, .timeout_s = timeout_s }, *p = &pend;
                n = request_agent(c, p, msg, len, fds, nfds);
                if (n > 0)
                        memcpy(local, p->buf, (size_t)n);
                /* a reply that came after we gave up leaves its fds with p */
                for (int i = 0; i < REPLY_FDS; i++)
                        got[i] = p->fd[i];
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
        if (n >= 0 && rep->hdr.type != ZMSG_REPLY && reply && (size_t)n <= reply_cap)
                memcpy(reply, local, (size_t)n);
        if (n >= 0 && rep->hdr.type == ZMSG_REPLY && rep->status == 0 && value)
                *value = rep->value;
        for (int i = 0; i < REPLY_FDS; i++) {
                if (rfd && status == 0)
                        rfd[i] = got[i];
                else
                        safe_close(got[i]);
        }
        return status;
}

int request(struct zswap_client *c, void *msg, size_t len, const int *fds, size_t nfds, void *reply,
                   size_t reply_cap, int *rfd, int64_t *value) {
        return request_timed(c, msg, len, fds, nfds, reply, reply_cap, rfd, value, 0);
}
