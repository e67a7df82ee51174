/*
 * nbd.c: an NBD client over io_uring (nbd.h).
 *
 * The kernel here has no nbd module, so the daemon speaks the protocol
 * itself (NetworkBlockDevice/nbd doc/proto.md): the fixed newstyle
 * handshake with NBD_OPT_GO (NBD_INFO_EXPORT requested), falling back to
 * NBD_OPT_EXPORT_NAME when the server answers NBD_REP_ERR_UNSUP; then
 * simple replies only (structured replies are never negotiated) to READ,
 * WRITE, FLUSH and DISC.
 *
 * Every byte on the socket, and the connect itself, goes through the
 * connection's own small io_uring. The unit of work is a round: a chain of
 * ops (sendmsg, recvmsg, connect) linked in order, each followed by an
 * IORING_OP_LINK_TIMEOUT at the call's absolute deadline, submitted
 * together and reaped completely before the round ends. The
 * chain keeps the bytes of pipelined writes in order on the stream even
 * when a send has to wait for buffer space; the link timeouts are what
 * turn a server that stops answering into -ETIMEDOUT. A short transfer
 * (a send cut short, a recv that got part of what it needs) breaks the
 * chain after it; the next round resubmits what is left, from the first
 * unfinished op on, until the deadline.
 *
 * Invariants:
 *  - Between calls nothing is in flight: every request a call sends is
 *    answered (or the connection is dead) before it returns. So a reply
 *    that is not for one of the call's own requests is a protocol error,
 *    and the bytes after a read reply's header are that read's data.
 *  - Any transport error, timeout or protocol error leaves the stream at
 *    an unknown point: the connection is dead (c->dead) and every later
 *    call is -ENOTCONN. A server's error reply (EIO, ENOSPC...) keeps the
 *    stream in step and the connection alive, except NBD_ESHUTDOWN, after
 *    which the protocol wants a soft disconnect: dead, but nbd_close()
 *    still sends NBD_CMD_DISC.
 *  - Arguments are checked before anything is sent: a bad range is
 *    -EINVAL and leaves the connection as it was.
 *
 * Threads: no global state, no locks around a connection. One NbdConn is
 * used by one thread at a time, which may change from call to call (the
 * ring is not IORING_SETUP_SINGLE_ISSUER for that reason). nbd_pread()
 * allocates nothing: its request, reply and ops live in the NbdConn.
 * nbd_connect() looks a host name up on a thread of its own, so that a
 * slow DNS server cannot hold it past its timeout (nbd-connect.c,
 * resolve()).
 *
 * Files: this one has the engine and the transmission phase;
 * nbd-connect.c the connect, nbd-handshake.c the negotiation, nbd-uri.c
 * the URIs; nbd-internal.h what they share.
 */
#include <endian.h>
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(addr, len) ((void)0)
#endif

#include "macro.h"
#include "nbd-internal.h"
#include "nbd.h"
#include "uring.h"
#include "util.h"

/* transmission */
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2
#define NBD_CMD_FLUSH 3

/* How long after the deadline the reaping waits before it stops trusting
 * the link timeouts to end the round (they always should). */
#define NBD_BACKSTOP_NS 1000000000ull

/* ---- the io_uring engine ---- */

static void op_set(NbdOp *op, OpKind kind, int flags, const void *b0, size_t l0, const void *b1, size_t l1,
                   size_t want) {
        *op = (NbdOp) {
                .kind = kind,
                .flags = flags,
                .iov = { { (void *)b0, l0 }, { (void *)b1, l1 } },
                .niov = l1 > 0 ? 2 : 1,
                .want = want,
        };
}

/* MSG_WAITALL: the kernel itself retries a short send on a stream socket;
 * MSG_NOSIGNAL: a server gone away is -EPIPE, not SIGPIPE. */
void nbd_op_send(NbdOp *op, const void *b0, size_t l0, const void *b1, size_t l1) {
        op_set(op, OP_SEND, MSG_NOSIGNAL | MSG_WAITALL, b0, l0, b1, l1, l0 + l1);
}

void nbd_op_recv(NbdOp *op, void *b0, size_t l0, void *b1, size_t l1, size_t want, int flags) {
        op_set(op, OP_RECV, flags, b0, l0, b1, l1, want);
}

static void op_prep(NbdConn *c, NbdOp *op, struct io_uring_sqe *sqe) {
        size_t skip = op->done;
        unsigned n = 0;

        for (unsigned i = 0; i < op->niov; i++) {
                if (skip >= op->iov[i].iov_len) {
                        skip -= op->iov[i].iov_len;
                        continue;
                }
                op->cur[n++] = (struct iovec) { (uint8_t *)op->iov[i].iov_base + skip, op->iov[i].iov_len - skip };
                skip = 0;
        }
        op->msg = (struct msghdr) { .msg_iov = op->cur, .msg_iovlen = n };
        op->res = -ECANCELED;
        switch (op->kind) {
        case OP_SEND:
                io_uring_prep_sendmsg(sqe, c->fd, &op->msg, (unsigned)op->flags);
                break;
        case OP_RECV:
                io_uring_prep_recvmsg(sqe, c->fd, &op->msg, (unsigned)op->flags);
                break;
        case OP_CONNECT:
                io_uring_prep_connect(sqe, c->fd, (struct sockaddr *)&c->addr, c->addrlen);
                break;
        }
}

static void op_complete(NbdOp *op, int res) {
        op->res = res;
        if (op->kind == OP_CONNECT) {
                if (res == 0)
                        op->done = op->want;
                return;
        }
        if (res <= 0)
                return;
        /* memcheck cannot see the kernel write through the ring */
        if (op->kind == OP_RECV) {
                size_t left = (size_t)res;
                for (unsigned i = 0; i < op->msg.msg_iovlen && left > 0; i++) {
                        size_t n = MIN(left, op->cur[i].iov_len);
                        VALGRIND_MAKE_MEM_DEFINED(op->cur[i].iov_base, n);
                        left -= n;
                }
        }
        op->done += (size_t)res;
}

static uint64_t cqe_tag(uint32_t gen, unsigned i, bool timeout) {
        return (uint64_t)gen << 32 | (uint64_t)i << 1 | timeout;
}

/* Take every CQE there is; returns how many belonged to this round. */
static unsigned conn_reap(NbdConn *c, NbdOp *ops, unsigned n, bool *timed_out) {
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0, mine = 0;

        io_uring_for_each_cqe(&c->ring, head, cqe) {
                uint64_t tag = io_uring_cqe_get_data64(cqe);
                unsigned i = (unsigned)(tag & 0xffffffffu) >> 1;

                seen++;
                if ((uint32_t)(tag >> 32) != c->gen || i >= n)
                        continue; /* a straggler from an abandoned round */
                mine++;
                if (tag & 1) {
                        if (cqe->res == -ETIME)
                                *timed_out = true;
                } else
                        op_complete(&ops[i], cqe->res);
        }
        io_uring_cq_advance(&c->ring, seen);
        return mine;
}

static struct __kernel_timespec ns_to_ts(uint64_t ns) {
        return (struct __kernel_timespec) { .tv_sec = (long long)(ns / NS_PER_SEC),
                                            .tv_nsec = (long long)(ns % NS_PER_SEC) };
}

/* Wait for the round's CQEs. The link timeouts end every op by the
 * deadline; should they not, the socket is shut down, which ends any op
 * still waiting on it, so no buffer of the caller's is written after the
 * call returned. */
static int conn_wait(NbdConn *c, NbdOp *ops, unsigned n, uint64_t deadline, bool *timed_out) {
        unsigned want = 2 * n, got = 0;
        uint64_t stop = deadline + NBD_BACKSTOP_NS;
        bool shut = false;

        for (;;) {
                struct io_uring_cqe *cqe;
                struct __kernel_timespec ts;
                uint64_t now;

                got += conn_reap(c, ops, n, timed_out);
                if (got >= want)
                        return shut ? -ETIMEDOUT : 0;
                now = now_ns();
                if (now >= stop) {
                        if (shut)
                                return -ETIMEDOUT; /* stragglers are told apart by c->gen */
                        shutdown(c->fd, SHUT_RDWR);
                        shut = true;
                        stop = now + NBD_BACKSTOP_NS;
                        continue;
                }
                ts = ns_to_ts(stop - now);
                (void)io_uring_wait_cqes(&c->ring, &cqe, want - got, &ts, NULL);
        }
}

/* One round: ops[0..n) chained in order, each with its link timeout. 0
 * when every op either finished or did not fail (short: the next round
 * goes on), else the first failure in chain order. */
static int conn_round(NbdConn *c, NbdOp *ops, unsigned n, uint64_t deadline) {
        bool timed_out = false;
        int r;

        c->gen++;
        c->deadline = ns_to_ts(deadline);
        for (unsigned i = 0; i < n; i++) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring), *lt;

                op_prep(c, &ops[i], sqe);
                sqe->flags |= IOSQE_IO_LINK;
                io_uring_sqe_set_data64(sqe, cqe_tag(c->gen, i, false));
                lt = io_uring_get_sqe(&c->ring);
                io_uring_prep_link_timeout(lt, &c->deadline, IORING_TIMEOUT_ABS);
                io_uring_sqe_set_data64(lt, cqe_tag(c->gen, i, true));
                if (i + 1 < n)
                        lt->flags |= IOSQE_IO_LINK;
        }
        r = io_uring_submit(&c->ring);
        if (r != (int)(2 * n)) {
                /* the ring is out of step with us: nothing more goes through it */
                shutdown(c->fd, SHUT_RDWR);
                return r < 0 ? r : -EIO;
        }
        r = conn_wait(c, ops, n, deadline, &timed_out);
        if (r < 0)
                return r;
        for (unsigned i = 0; i < n; i++) {
                const NbdOp *op = &ops[i];

                if (op->res == 0 && op->kind == OP_RECV && op->done < op->want)
                        return -ECONNRESET; /* the server closed the connection */
                if (op->res >= 0 || op->res == -EINTR || op->res == -EAGAIN)
                        continue;
                if (op->res == -ECANCELED) {
                        if (timed_out)
                                return -ETIMEDOUT;
                        continue; /* an op before it came up short */
                }
                return op->res;
        }
        return 0;
}

/* Run ops[0..n) to completion, in order, by the deadline. */
int nbd_conn_run(NbdConn *c, NbdOp *ops, unsigned n, uint64_t deadline) {
        for (;;) {
                unsigned first = 0;
                int r;

                while (first < n && ops[first].done >= ops[first].want)
                        first++;
                if (first == n)
                        return 0;
                /* a chain starts an op only after those before it finished */
                for (unsigned i = first + 1; i < n; i++)
                        if (ops[i].done > 0)
                                return -EIO;
                if (now_ns() >= deadline)
                        return -ETIMEDOUT;
                r = conn_round(c, ops + first, n - first, deadline);
                if (r < 0)
                        return r;
        }
}

/* The stream is at an unknown point, or gone: nothing may use it again. */
static int conn_kill(NbdConn *c, int r) {
        if (c->dead == 0 || c->dead == -ESHUTDOWN)
                c->dead = r;
        if (c->fd >= 0)
                shutdown(c->fd, SHUT_RDWR);
        return r;
}

uint64_t nbd_conn_deadline(const NbdConn *c) {
        return now_ns() + c->timeout_ns;
}

/* ---- transmission ---- */

static void req_fill(NbdRequest *q, uint16_t type, uint64_t cookie, uint64_t off, uint32_t len) {
        *q = (NbdRequest) {
                .magic = htobe32(NBD_REQUEST_MAGIC),
                .type = htobe16(type),
                .cookie = htobe64(cookie),
                .offset = htobe64(off),
                .length = htobe32(len),
        };
}

/* Which of the n requests from cookie base this simple reply answers;
 * -EPROTO for anything else (a structured reply was never negotiated). */
static int reply_match(const NbdReply *p, uint64_t base, unsigned n, unsigned *ret) {
        uint64_t k = be64toh(p->cookie) - base;

        if (be32toh(p->magic) != NBD_SIMPLE_REPLY_MAGIC || k >= n)
                return -EPROTO;
        *ret = (unsigned)k;
        return 0;
}

/* A server's error as -errno; the protocol says to take values it does
 * not define as EINVAL. */
static int reply_errno(NbdConn *c, const NbdReply *p) {
        int r;

        switch (be32toh(p->error)) {
        case 0: return 0;
        case 1: return -EPERM;
        case 5: return -EIO;
        case 12: return -ENOMEM;
        case 22: return -EINVAL;
        case 28: return -ENOSPC;
        case 75: return -EOVERFLOW;
        case 95: return -EOPNOTSUPP;
        case 108: r = -ESHUTDOWN; break;
        default: return -EINVAL;
        }
        /* the server is going away: disconnect softly (nbd_close) */
        if (c->dead == 0)
                c->dead = r;
        return r;
}

static int conn_usable(const NbdConn *c) {
        if (!c)
                return -EINVAL;
        return c->dead ? -ENOTCONN : 0;
}

static int range_check(const NbdConn *c, const void *buf, uint32_t len, uint64_t off) {
        if (!buf || len == 0 || len > NBD_MAX_REQUEST)
                return -EINVAL;
        if (off > c->size || len > c->size - off)
                return -EINVAL;
        return 0;
}

int nbd_pread(NbdConn *c, void *buf, uint32_t len, uint64_t off) {
        uint64_t deadline, cookie;
        NbdReply *p;
        size_t got;
        unsigned i;
        int r;

        r = conn_usable(c);
        if (r < 0)
                return r;
        r = range_check(c, buf, len, off);
        if (r < 0)
                return r;
        deadline = nbd_conn_deadline(c);
        cookie = c->cookie++;
        p = &c->reply[0];
        *p = (NbdReply) {};
        req_fill(&c->req[0], NBD_CMD_READ, cookie, off, len);
        nbd_op_send(&c->op[0], &c->req[0], sizeof(NbdRequest), NULL, 0);
        /* The header, and whatever data came with it: nothing else is in
         * flight, so the bytes after the header are this read's. Not
         * MSG_WAITALL: an error reply has no data to wait for. */
        nbd_op_recv(&c->op[1], p, sizeof(*p), buf, len, sizeof(*p), 0);
        r = nbd_conn_run(c, c->op, 2, deadline);
        if (r < 0)
                return conn_kill(c, r);
        if (reply_match(p, cookie, 1, &i) < 0)
                return conn_kill(c, -EPROTO);
        got = c->op[1].done - sizeof(*p);
        r = reply_errno(c, p);
        if (r < 0)
                return got > 0 ? conn_kill(c, -EPROTO) : r;
        if (got < len) {
                nbd_op_recv(&c->op[0], (uint8_t *)buf + got, len - got, NULL, 0, len - got, MSG_WAITALL);
                r = nbd_conn_run(c, c->op, 1, deadline);
                if (r < 0)
                        return conn_kill(c, r);
        }
        return 0;
}

/* Up to NBD_WINDOW writes in one round: the requests chained back to back
 * (header and data in one sendmsg each), their replies read by one recv
 * chained after them. */
static int write_window(NbdConn *c, const NbdWrite *w, unsigned k) {
        uint64_t deadline = nbd_conn_deadline(c), base = c->cookie;
        unsigned first = k;
        int err = 0, r;

        c->cookie += k;
        for (unsigned i = 0; i < k; i++) {
                req_fill(&c->req[i], NBD_CMD_WRITE, base + i, w[i].off, w[i].len);
                nbd_op_send(&c->op[i], &c->req[i], sizeof(NbdRequest), w[i].buf, w[i].len);
                c->replied[i] = false;
        }
        memset(c->reply, 0, k * sizeof(NbdReply));
        nbd_op_recv(&c->op[k], c->reply, k * sizeof(NbdReply), NULL, 0, k * sizeof(NbdReply), MSG_WAITALL);
        r = nbd_conn_run(c, c->op, k + 1, deadline);
        if (r < 0)
                return conn_kill(c, r);
        for (unsigned j = 0; j < k; j++) {
                unsigned i;

                if (reply_match(&c->reply[j], base, k, &i) < 0 || c->replied[i])
                        return conn_kill(c, -EPROTO);
                c->replied[i] = true;
                r = reply_errno(c, &c->reply[j]);
                if (r < 0 && i < first) {
                        first = i;
                        err = r;
                }
        }
        return err;
}

int nbd_pwrite_batch(NbdConn *c, const NbdWrite *w, unsigned n) {
        int err = 0, r;

        r = conn_usable(c);
        if (r < 0)
                return r;
        if (n > 0 && !w)
                return -EINVAL;
        for (unsigned i = 0; i < n; i++) {
                r = range_check(c, w[i].buf, w[i].len, w[i].off);
                if (r < 0)
                        return r;
        }
        if (n > 0 && (c->flags & NBD_FLAG_READ_ONLY))
                return -EPERM;
        for (unsigned at = 0; at < n; at += NBD_WINDOW) {
                r = write_window(c, w + at, MIN(n - at, (unsigned)NBD_WINDOW));
                if (r < 0 && err == 0)
                        err = r;
                if (c->dead)
                        break;
        }
        return err;
}

int nbd_flush(NbdConn *c) {
        uint64_t deadline, cookie;
        unsigned i;
        int r;

        r = conn_usable(c);
        if (r < 0)
                return r;
        if (!(c->flags & NBD_FLAG_SEND_FLUSH))
                return -EOPNOTSUPP; /* the protocol forbids sending it */
        deadline = nbd_conn_deadline(c);
        cookie = c->cookie++;
        req_fill(&c->req[0], NBD_CMD_FLUSH, cookie, 0, 0);
        c->reply[0] = (NbdReply) {};
        nbd_op_send(&c->op[0], &c->req[0], sizeof(NbdRequest), NULL, 0);
        nbd_op_recv(&c->op[1], &c->reply[0], sizeof(NbdReply), NULL, 0, sizeof(NbdReply), MSG_WAITALL);
        r = nbd_conn_run(c, c->op, 2, deadline);
        if (r < 0)
                return conn_kill(c, r);
        if (reply_match(&c->reply[0], cookie, 1, &i) < 0)
                return conn_kill(c, -EPROTO);
        return reply_errno(c, &c->reply[0]);
}

NbdConn *nbd_close(NbdConn *c) {
        if (!c)
                return NULL;
        /* a soft disconnect where the stream is still in step; the
         * server sends nothing back */
        if (c->transmission && (c->dead == 0 || c->dead == -ESHUTDOWN)) {
                req_fill(&c->req[0], NBD_CMD_DISC, c->cookie++, 0, 0);
                nbd_op_send(&c->op[0], &c->req[0], sizeof(NbdRequest), NULL, 0);
                (void)nbd_conn_run(c, c->op, 1, nbd_conn_deadline(c));
        }
        /* the ring first: its exit cancels whatever still uses the socket */
        if (c->ring_ok)
                uring_exit(&c->ring);
        safe_close(c->fd);
        free(c);
        return NULL;
}

uint64_t nbd_size(const NbdConn *c) {
        return c ? c->size : 0;
}

bool nbd_read_only(const NbdConn *c) {
        return c && (c->flags & NBD_FLAG_READ_ONLY);
}

bool nbd_multi_conn(const NbdConn *c) {
        return c && (c->flags & NBD_FLAG_CAN_MULTI_CONN);
}

bool nbd_can_flush(const NbdConn *c) {
        return c && (c->flags & NBD_FLAG_SEND_FLUSH);
}

bool nbd_dead(const NbdConn *c) {
        return !c || c->dead != 0;
}
