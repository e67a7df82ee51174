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
 * slow DNS server cannot hold it past its timeout (resolve()).
 */
#include <endian.h>
#include <errno.h>
#include <liburing.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(addr, len) ((void)0)
#endif

#include "macro.h"
#include "nbd.h"
#include "uring.h"
#include "util.h"

/* handshake */
#define NBD_MAGIC 0x4e42444d41474943ull /* "NBDMAGIC" */
#define NBD_IHAVEOPT 0x49484156454f5054ull /* "IHAVEOPT" */
#define NBD_CLISERV_MAGIC 0x00420281861253ull /* oldstyle servers */
#define NBD_OPT_REPLY_MAGIC 0x3e889045565a9ull
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES (1u << 1)
#define NBD_OPT_EXPORT_NAME 1
#define NBD_OPT_ABORT 2
#define NBD_OPT_GO 7
#define NBD_REP_ACK 1
#define NBD_REP_INFO 3
#define NBD_REP_FLAG_ERROR (1u << 31)
#define NBD_REP_ERR_UNSUP (NBD_REP_FLAG_ERROR | 1)
#define NBD_REP_ERR_POLICY (NBD_REP_FLAG_ERROR | 2)
#define NBD_REP_ERR_INVALID (NBD_REP_FLAG_ERROR | 3)
#define NBD_REP_ERR_PLATFORM (NBD_REP_FLAG_ERROR | 4)
#define NBD_REP_ERR_TLS_REQD (NBD_REP_FLAG_ERROR | 5)
#define NBD_REP_ERR_UNKNOWN (NBD_REP_FLAG_ERROR | 6)
#define NBD_REP_ERR_SHUTDOWN (NBD_REP_FLAG_ERROR | 7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD (NBD_REP_FLAG_ERROR | 8)
#define NBD_REP_ERR_TOO_BIG (NBD_REP_FLAG_ERROR | 9)
#define NBD_INFO_EXPORT 0
/* Strings in option replies are at most 4096 bytes; anything much larger
 * is a server we should not keep reading from. */
#define NBD_OPT_REPLY_MAX (64u << 10)
#define NBD_OPT_REPLIES_MAX 64

/* transmission */
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_CMD_READ 0
#define NBD_CMD_WRITE 1
#define NBD_CMD_DISC 2
#define NBD_CMD_FLUSH 3

/*
 * Writes in flight on one connection. A window of writes is one round:
 * NBD_WINDOW sendmsg ops, then one recv for all their replies (16 bytes
 * each: write replies carry no data), each op with its link timeout.
 */
#define NBD_WINDOW 16
#define NBD_OPS (NBD_WINDOW + 1)
#define NBD_RING_ENTRIES 64
_Static_assert(2 * NBD_OPS <= NBD_RING_ENTRIES, "a round must fit in the ring");

/* How long after the deadline the reaping waits before it stops trusting
 * the link timeouts to end the round (they always should). */
#define NBD_BACKSTOP_NS 1000000000ull
#define NS_PER_SEC 1000000000ull

typedef struct __attribute__((packed)) NbdRequest {
        uint32_t magic;
        uint16_t flags;
        uint16_t type;
        uint64_t cookie;
        uint64_t offset;
        uint32_t length;
} NbdRequest;

typedef struct __attribute__((packed)) NbdReply {
        uint32_t magic;
        uint32_t error;
        uint64_t cookie;
} NbdReply;

_Static_assert(sizeof(NbdRequest) == 28 && sizeof(NbdReply) == 16, "wire layout");

typedef enum OpKind {
        OP_SEND,
        OP_RECV,
        OP_CONNECT,
} OpKind;

/* One transfer on the socket, possibly over several rounds. */
typedef struct NbdOp {
        OpKind kind;
        int flags;              /* MSG_* */
        struct iovec iov[2];    /* the whole transfer */
        unsigned niov;
        size_t want;            /* bytes that complete it; a recv may take more, up to the iovecs */
        size_t done;            /* bytes moved so far */
        int res;                /* the result of its last CQE */
        struct iovec cur[2];    /* what the last round asked for: iov past done */
        struct msghdr msg;      /* stays put while the kernel may read it */
} NbdOp;

struct NbdConn {
        struct io_uring ring;
        bool ring_ok;
        int fd;
        bool transmission;      /* the handshake is over: NBD_CMD_DISC may be sent */
        int dead;               /* 0, or the error that ended the connection */
        uint64_t timeout_ns;
        uint64_t size;
        uint16_t flags;         /* transmission flags */
        uint64_t cookie;        /* the next request's */
        uint32_t gen;           /* tags a round's CQEs (user_data's high half) */
        struct __kernel_timespec deadline; /* the round's, absolute CLOCK_MONOTONIC */
        struct sockaddr_storage addr;      /* IORING_OP_CONNECT's */
        socklen_t addrlen;
        NbdOp op[NBD_OPS];
        NbdRequest req[NBD_WINDOW];
        NbdReply reply[NBD_WINDOW];
        bool replied[NBD_WINDOW];
};

/* Big-endian fields of the handshake, which has no fixed layout. */
static uint64_t load_be(const uint8_t *p, unsigned bytes) {
        uint64_t v = 0;

        for (unsigned i = 0; i < bytes; i++)
                v = v << 8 | p[i];
        return v;
}

static void store_be(uint8_t *p, uint64_t v, unsigned bytes) {
        for (unsigned i = bytes; i-- > 0; v >>= 8)
                p[i] = (uint8_t)v;
}

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
static void op_send(NbdOp *op, const void *b0, size_t l0, const void *b1, size_t l1) {
        op_set(op, OP_SEND, MSG_NOSIGNAL | MSG_WAITALL, b0, l0, b1, l1, l0 + l1);
}

static void op_recv(NbdOp *op, void *b0, size_t l0, void *b1, size_t l1, size_t want, int flags) {
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
static int conn_run(NbdConn *c, NbdOp *ops, unsigned n, uint64_t deadline) {
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

static uint64_t conn_deadline(const NbdConn *c) {
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
        deadline = conn_deadline(c);
        cookie = c->cookie++;
        p = &c->reply[0];
        *p = (NbdReply) {};
        req_fill(&c->req[0], NBD_CMD_READ, cookie, off, len);
        op_send(&c->op[0], &c->req[0], sizeof(NbdRequest), NULL, 0);
        /* The header, and whatever data came with it: nothing else is in
         * flight, so the bytes after the header are this read's. Not
         * MSG_WAITALL: an error reply has no data to wait for. */
        op_recv(&c->op[1], p, sizeof(*p), buf, len, sizeof(*p), 0);
        r = conn_run(c, c->op, 2, deadline);
        if (r < 0)
                return conn_kill(c, r);
        if (reply_match(p, cookie, 1, &i) < 0)
                return conn_kill(c, -EPROTO);
        got = c->op[1].done - sizeof(*p);
        r = reply_errno(c, p);
        if (r < 0)
                return got > 0 ? conn_kill(c, -EPROTO) : r;
        if (got < len) {
                op_recv(&c->op[0], (uint8_t *)buf + got, len - got, NULL, 0, len - got, MSG_WAITALL);
                r = conn_run(c, c->op, 1, deadline);
                if (r < 0)
                        return conn_kill(c, r);
        }
        return 0;
}

/* Up to NBD_WINDOW writes in one round: the requests chained back to back
 * (header and data in one sendmsg each), their replies read by one recv
 * chained after them. */
static int write_window(NbdConn *c, const NbdWrite *w, unsigned k) {
        uint64_t deadline = conn_deadline(c), base = c->cookie;
        unsigned first = k;
        int err = 0, r;

        c->cookie += k;
        for (unsigned i = 0; i < k; i++) {
                req_fill(&c->req[i], NBD_CMD_WRITE, base + i, w[i].off, w[i].len);
                op_send(&c->op[i], &c->req[i], sizeof(NbdRequest), w[i].buf, w[i].len);
                c->replied[i] = false;
        }
        memset(c->reply, 0, k * sizeof(NbdReply));
        op_recv(&c->op[k], c->reply, k * sizeof(NbdReply), NULL, 0, k * sizeof(NbdReply), MSG_WAITALL);
        r = conn_run(c, c->op, k + 1, deadline);
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
        deadline = conn_deadline(c);
        cookie = c->cookie++;
        req_fill(&c->req[0], NBD_CMD_FLUSH, cookie, 0, 0);
        c->reply[0] = (NbdReply) {};
        op_send(&c->op[0], &c->req[0], sizeof(NbdRequest), NULL, 0);
        op_recv(&c->op[1], &c->reply[0], sizeof(NbdReply), NULL, 0, sizeof(NbdReply), MSG_WAITALL);
        r = conn_run(c, c->op, 2, deadline);
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
                op_send(&c->op[0], &c->req[0], sizeof(NbdRequest), NULL, 0);
                (void)conn_run(c, c->op, 1, conn_deadline(c));
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

/* ---- connecting ---- */

static const char *io_reason(int r) {
        switch (r) {
        case -ETIMEDOUT: return "timed out";
        case -ECONNRESET: return "connection closed by the server";
        case -ECONNREFUSED: return "connection refused";
        case -EPROTO: return "protocol error";
        default: return strerror(-r);
        }
}

/* One step of the handshake: bounded by the timeout on its own. */
static int hs_send(NbdConn *c, const void *buf, size_t len) {
        op_send(&c->op[0], buf, len, NULL, 0);
        return conn_run(c, c->op, 1, conn_deadline(c));
}

static int hs_recv(NbdConn *c, void *buf, size_t len) {
        op_recv(&c->op[0], buf, len, NULL, 0, len, MSG_WAITALL);
        return conn_run(c, c->op, 1, conn_deadline(c));
}

static int conn_connect(NbdConn *c, uint64_t deadline) {
        c->op[0] = (NbdOp) { .kind = OP_CONNECT, .want = 1 };
        return conn_run(c, c->op, 1, deadline);
}

/* A name lookup on its own thread, which the caller may give up waiting
 * for: then the thread frees it when getaddrinfo() returns. */
typedef struct Lookup {
        pthread_mutex_t lock;
        pthread_cond_t cond;    /* on CLOCK_MONOTONIC */
        bool done;              /* under lock: gai and result are set */
        bool abandoned;         /* under lock: the caller is gone */
        int gai;
        struct addrinfo *result;
        char host[256];
        char port[16];
} Lookup;

static void lookup_free(Lookup *l) {
        pthread_cond_destroy(&l->cond);
        pthread_mutex_destroy(&l->lock);
        free(l);
}

static void *lookup_thread(void *arg) {
        const struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
        struct __user_cap_header_struct caps = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = { 0 };
        Lookup *l = arg;
        struct addrinfo *res = NULL;

        /* The first connect's lookup runs before the sandbox, with every
         * capability of root (capabilities are per thread), and may
         * outlive its caller's wait: it parses what a DNS server says.
         * It needs none: this thread drops them all (capset may only
         * lower them; the sandbox's filter allows it). */
        (void)syscall(SYS_capset, &caps, none);
        int g = getaddrinfo(l->host, l->port, &hints, &res);
        bool abandoned;

        pthread_mutex_lock(&l->lock);
        l->done = true;
        l->gai = g;
        l->result = g == 0 ? res : NULL;
        abandoned = l->abandoned;
        pthread_cond_signal(&l->cond);
        pthread_mutex_unlock(&l->lock);
        if (abandoned) {
                if (g == 0)
                        freeaddrinfo(res);
                lookup_free(l);
        }
        return NULL;
}

static int lookup_new(const NbdAddr *a, Lookup **ret) {
        pthread_condattr_t attr;
        Lookup *l = calloc(1, sizeof(*l));
        int r;

        if (!l)
                return -ENOMEM;
        snprintf(l->host, sizeof(l->host), "%s", a->host);
        snprintf(l->port, sizeof(l->port), "%s", a->port);
        r = pthread_condattr_init(&attr);
        if (r == 0) {
                r = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
                r = r ?: pthread_cond_init(&l->cond, &attr);
                pthread_condattr_destroy(&attr);
        }
        if (r != 0) {
                free(l);
                return -r;
        }
        pthread_mutex_init(&l->lock, NULL);
        *ret = l;
        return 0;
}

/* getaddrinfo() bounded by the timeout: numeric addresses at once, names
 * on a thread of their own (DNS may take much longer than the timeout;
 * glibc's getaddrinfo_a() would do, but its helper threads are not made
 * by pthread_create() and TSan cannot follow them). */
static int resolve(const NbdAddr *a, uint64_t timeout_ns, struct addrinfo **ret, char *err, size_t errlen) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
        uint64_t deadline = now_ns() + timeout_ns;
        struct timespec ts = { .tv_sec = (time_t)(deadline / NS_PER_SEC), .tv_nsec = (long)(deadline % NS_PER_SEC) };
        pthread_t thread;
        Lookup *l = NULL;
        int g, r;

        g = getaddrinfo(a->host, a->port, &hints, ret);
        if (g == 0)
                return 0;
        if (g != EAI_NONAME)
                return errorf(-EINVAL, err, errlen, "bad address '%s' port '%s': %s", a->host, a->port, gai_strerror(g));
        r = lookup_new(a, &l);
        if (r < 0)
                return errorf(r, err, errlen, "looking up '%s': %s", a->host, strerror(-r));
        r = pthread_create(&thread, NULL, lookup_thread, l);
        if (r != 0) {
                lookup_free(l);
                return errorf(-r, err, errlen, "looking up '%s': %s", a->host, strerror(r));
        }
        pthread_mutex_lock(&l->lock);
        while (!l->done && pthread_cond_timedwait(&l->cond, &l->lock, &ts) != ETIMEDOUT)
                ;
        if (!l->done) {
                /* decided under the lock: the thread will see it and free l */
                l->abandoned = true;
                pthread_mutex_unlock(&l->lock);
                pthread_detach(thread);
                return errorf(-ETIMEDOUT, err, errlen, "looking up '%s' timed out", a->host);
        }
        pthread_mutex_unlock(&l->lock);
        pthread_join(thread, NULL);
        g = l->gai;
        *ret = l->result;
        lookup_free(l);
        if (g != 0)
                return errorf(-EHOSTUNREACH, err, errlen, "cannot resolve '%s': %s", a->host, gai_strerror(g));
        return 0;
}

static int conn_tcp(NbdConn *c, const NbdAddr *a, char *err, size_t errlen) {
        struct addrinfo *list = NULL;
        uint64_t deadline;
        int r, one = 1;

        r = resolve(a, c->timeout_ns, &list, err, errlen);
        if (r < 0)
                return r;
        /* one deadline for every address the name has */
        deadline = conn_deadline(c);
        r = -EHOSTUNREACH;
        for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
                if (ai->ai_addrlen > sizeof(c->addr))
                        continue;
                c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (c->fd < 0) {
                        r = negative_errno();
                        continue;
                }
                /* requests are small and each waits for its reply */
                if (setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
                        r = negative_errno();
                        c->fd = safe_close(c->fd);
                        continue;
                }
                memcpy(&c->addr, ai->ai_addr, ai->ai_addrlen);
                c->addrlen = ai->ai_addrlen;
                r = conn_connect(c, deadline);
                if (r >= 0)
                        break;
                c->fd = safe_close(c->fd);
        }
        freeaddrinfo(list);
        if (r < 0)
                return errorf(r, err, errlen, "%s port %s: %s", a->host, a->port, io_reason(r));
        return 0;
}

static int conn_unix(NbdConn *c, const NbdAddr *a, char *err, size_t errlen) {
        struct sockaddr_un *sa = (struct sockaddr_un *)&c->addr;
        size_t n = strnlen(a->path, sizeof(a->path));
        int r;

        if (n == 0 || n >= sizeof(sa->sun_path))
                return errorf(-EINVAL, err, errlen, "no Unix socket path, or too long a one");
        sa->sun_family = AF_UNIX;
        memcpy(sa->sun_path, a->path, n + 1);
        c->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return errorf(negative_errno(), err, errlen, "socket: %m");
        r = conn_connect(c, conn_deadline(c));
        if (r < 0)
                return errorf(r, err, errlen, "%s: %s", a->path, io_reason(r));
        return 0;
}

static int opt_send(NbdConn *c, uint32_t opt, const void *data, uint32_t len) {
        uint8_t hdr[16];

        store_be(hdr, NBD_IHAVEOPT, 8);
        store_be(hdr + 8, opt, 4);
        store_be(hdr + 12, len, 4);
        op_send(&c->op[0], hdr, sizeof(hdr), data, len);
        return conn_run(c, c->op, 1, conn_deadline(c));
}

/* Read one option reply: its type, and its first cap bytes of data into
 * data (the rest is read and dropped); *ret_len is the whole length. */
static int opt_reply(NbdConn *c, uint32_t opt, uint32_t *ret_type, uint8_t *data, size_t cap, uint32_t *ret_len) {
        uint8_t hdr[20], sink[256];
        uint32_t len;
        size_t keep;
        int r;

        r = hs_recv(c, hdr, sizeof(hdr));
        if (r < 0)
                return r;
        if (load_be(hdr, 8) != NBD_OPT_REPLY_MAGIC || load_be(hdr + 8, 4) != opt)
                return -EPROTO;
        len = (uint32_t)load_be(hdr + 16, 4);
        if (len > NBD_OPT_REPLY_MAX)
                return -EPROTO;
        keep = MIN((size_t)len, cap);
        if (keep > 0) {
                r = hs_recv(c, data, keep);
                if (r < 0)
                        return r;
        }
        for (size_t left = len - keep; left > 0;) {
                size_t n = MIN(left, sizeof(sink));
                r = hs_recv(c, sink, n);
                if (r < 0)
                        return r;
                left -= n;
        }
        *ret_type = (uint32_t)load_be(hdr + 12, 4);
        *ret_len = len;
        return 0;
}

/* An option's error reply as -errno and a sentence, with the server's
 * own message (its printable part). */
static int opt_error(uint32_t type, const char *name, const uint8_t *msg, uint32_t len, char *err, size_t errlen) {
        static const struct {
                uint32_t type;
                int r;
                const char *what;
        } known[] = {
                { NBD_REP_ERR_UNKNOWN, -ENOENT, "not found" },
                { NBD_REP_ERR_POLICY, -EACCES, "refused by the server's policy" },
                { NBD_REP_ERR_TLS_REQD, -EACCES, "requires TLS (not supported)" },
                { NBD_REP_ERR_SHUTDOWN, -ESHUTDOWN, "unavailable: the server is shutting down" },
                { NBD_REP_ERR_BLOCK_SIZE_REQD, -EOPNOTSUPP, "requires block size negotiation (not supported)" },
                { NBD_REP_ERR_INVALID, -EINVAL, "refused: the server calls NBD_OPT_GO invalid" },
                { NBD_REP_ERR_PLATFORM, -EOPNOTSUPP, "refused: not supported on the server's platform" },
                { NBD_REP_ERR_TOO_BIG, -EINVAL, "refused: request too big" },
        };
        const char *what = "refused with an unknown error";
        char text[200];
        size_t n = 0;
        int r = -EPROTO;

        for (size_t i = 0; i < ELEMENTSOF(known); i++)
                if (known[i].type == type) {
                        r = known[i].r;
                        what = known[i].what;
                }
        for (uint32_t i = 0; i < len && n + 1 < sizeof(text); i++)
                text[n++] = msg[i] >= 0x20 && msg[i] < 0x7f ? (char)msg[i] : '?';
        text[n] = 0;
        return errorf(r, err, errlen, "export '%s' %s (%#x)%s%s%s", name, what, type, n ? " (server: " : "", text,
                    n ? ")" : "");
}

/* NBD_OPT_GO with NBD_INFO_EXPORT: 0 in transmission, 1 if the server
 * does not know the option (fall back), -errno. */
static int opt_go(NbdConn *c, const char *name, char *err, size_t errlen) {
        uint8_t d[4 + sizeof(((NbdAddr *)0)->export_name) + 4], data[256];
        uint32_t n = (uint32_t)strlen(name), type, len;
        bool have_export = false;
        int r;

        store_be(d, n, 4);
        memcpy(d + 4, name, n);
        store_be(d + 4 + n, 1, 2); /* one information request: */
        store_be(d + 6 + n, NBD_INFO_EXPORT, 2);
        r = opt_send(c, NBD_OPT_GO, d, n + 8);
        if (r < 0)
                return errorf(r, err, errlen, "sending NBD_OPT_GO: %s", io_reason(r));
        for (unsigned i = 0; i < NBD_OPT_REPLIES_MAX; i++) {
                r = opt_reply(c, NBD_OPT_GO, &type, data, sizeof(data), &len);
                if (r < 0)
                        return errorf(r, err, errlen, "reply to NBD_OPT_GO: %s", io_reason(r));
                if (type == NBD_REP_INFO) {
                        if (len < 2 || (load_be(data, 2) == NBD_INFO_EXPORT && len != 12))
                                return errorf(-EPROTO, err, errlen, "malformed NBD_REP_INFO (%u bytes)", len);
                        if (load_be(data, 2) == NBD_INFO_EXPORT) {
                                c->size = load_be(data + 2, 8);
                                c->flags = (uint16_t)load_be(data + 10, 2);
                                have_export = true;
                        }
                        continue; /* information we did not ask for is ignored */
                }
                if (type == NBD_REP_ACK) {
                        if (!have_export)
                                return errorf(-EPROTO, err, errlen, "NBD_OPT_GO acknowledged without NBD_INFO_EXPORT");
                        return 0;
                }
                if (type == NBD_REP_ERR_UNSUP)
                        return 1;
                if (type & NBD_REP_FLAG_ERROR) {
                        r = opt_error(type, name, data, MIN(len, (uint32_t)sizeof(data)), err, errlen);
                        /* the stream is in step: end the session softly, no reply awaited */
                        (void)opt_send(c, NBD_OPT_ABORT, NULL, 0);
                        return r;
                }
                return errorf(-EPROTO, err, errlen, "unexpected reply %#x to NBD_OPT_GO", type);
        }
        return errorf(-EPROTO, err, errlen, "too many replies to NBD_OPT_GO");
}

/* The old way in: no error reply, a server without the export hangs up. */
static int opt_export_name(NbdConn *c, const char *name, bool no_zeroes, char *err, size_t errlen) {
        uint8_t d[8 + 2 + 124];
        int r;

        r = opt_send(c, NBD_OPT_EXPORT_NAME, name, (uint32_t)strlen(name));
        if (r >= 0)
                r = hs_recv(c, d, no_zeroes ? 10 : sizeof(d));
        if (r == -ECONNRESET)
                return errorf(-ENOENT, err, errlen, "server hung up on export '%s' (no such export?)", name);
        if (r < 0)
                return errorf(r, err, errlen, "NBD_OPT_EXPORT_NAME: %s", io_reason(r));
        c->size = load_be(d, 8);
        c->flags = (uint16_t)load_be(d + 8, 2);
        return 0;
}

static int handshake(NbdConn *c, const char *name, char *err, size_t errlen) {
        uint8_t hello[18], cflags[4];
        uint16_t hflags;
        uint32_t flags = 0;
        int r;

        r = hs_recv(c, hello, sizeof(hello));
        if (r < 0)
                return errorf(r, err, errlen, "waiting for the server's greeting: %s", io_reason(r));
        if (load_be(hello, 8) != NBD_MAGIC)
                return errorf(-EPROTO, err, errlen, "not an NBD server (bad greeting)");
        if (load_be(hello + 8, 8) == NBD_CLISERV_MAGIC)
                return errorf(-EPROTO, err, errlen, "server speaks the oldstyle handshake (not supported)");
        if (load_be(hello + 8, 8) != NBD_IHAVEOPT)
                return errorf(-EPROTO, err, errlen, "not an NBD server (bad handshake magic)");
        hflags = (uint16_t)load_be(hello + 16, 2);
        /* set only what the server offered: it must drop anything else */
        if (hflags & NBD_FLAG_FIXED_NEWSTYLE)
                flags |= NBD_FLAG_C_FIXED_NEWSTYLE;
        if (hflags & NBD_FLAG_NO_ZEROES)
                flags |= NBD_FLAG_C_NO_ZEROES;
        store_be(cflags, flags, 4);
        r = hs_send(c, cflags, sizeof(cflags));
        if (r < 0)
                return errorf(r, err, errlen, "sending client flags: %s", io_reason(r));
        r = 1;
        if (hflags & NBD_FLAG_FIXED_NEWSTYLE)
                r = opt_go(c, name, err, errlen);
        if (r == 1)
                r = opt_export_name(c, name, flags & NBD_FLAG_C_NO_ZEROES, err, errlen);
        if (r < 0)
                return r;
        if (!(c->flags & NBD_FLAG_HAS_FLAGS))
                c->flags = 0; /* the other bits mean nothing then */
        c->transmission = true;
        return 0;
}

int nbd_connect(const NbdAddr *a, int timeout_ms, NbdConn **ret, char *err, size_t errlen) {
        NbdConn *c;
        int r;

        if (err && errlen > 0)
                err[0] = 0;
        if (!a || !ret || timeout_ms <= 0)
                return errorf(-EINVAL, err, errlen, "invalid arguments");
        if (strnlen(a->export_name, sizeof(a->export_name)) == sizeof(a->export_name) ||
            strnlen(a->host, sizeof(a->host)) == sizeof(a->host) ||
            strnlen(a->port, sizeof(a->port)) == sizeof(a->port))
                return errorf(-EINVAL, err, errlen, "unterminated field in the address");
        c = calloc(1, sizeof(*c));
        if (!c)
                return errorf(-ENOMEM, err, errlen, "out of memory");
        c->fd = -1;
        c->timeout_ns = (uint64_t)timeout_ms * 1000000ull;
        /* COOP_TASKRUN: completions are run when we enter the kernel
         * anyway, no need to interrupt the thread for them */
        r = uring_init(NBD_RING_ENTRIES, &c->ring, IORING_SETUP_COOP_TASKRUN);
        if (r == -EINVAL)
                r = uring_init(NBD_RING_ENTRIES, &c->ring, 0);
        if (r < 0) {
                free(c);
                return errorf(r, err, errlen, "io_uring: %s", strerror(-r));
        }
        c->ring_ok = true;
        r = a->host[0] ? conn_tcp(c, a, err, errlen) : conn_unix(c, a, err, errlen);
        if (r >= 0)
                r = handshake(c, a->export_name, err, errlen);
        if (r < 0) {
                nbd_close(c);
                return r;
        }
        *ret = c;
        return 0;
}
