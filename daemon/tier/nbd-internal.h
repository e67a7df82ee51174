/*
 * nbd-internal.h: what the parts of the NBD client share; nbd.h is its
 * interface, and nothing outside daemon/tier/nbd*.c includes this.
 *
 *   nbd.c            the io_uring engine every byte on the socket goes
 *                    through (rounds, link timeouts), and the transmission
 *                    phase: READ, WRITE, FLUSH, DISC, nbd_close(); the
 *                    design of the whole client is described there
 *   nbd-connect.c    nbd_connect(): the ring, the name lookup on a thread
 *                    of its own, the socket and its connect
 *   nbd-handshake.c  the fixed newstyle negotiation: NBD_OPT_GO, or
 *                    NBD_OPT_EXPORT_NAME on servers without it
 *   nbd-uri.c        nbd_parse()
 *
 * Threads: one NbdConn is used by one thread at a time (nbd.h), which may
 * change from call to call; the caller orders one call after the other
 * (the tier's own locks and hand-overs). So no field of it has a lock or
 * an atomic: each says which file writes it. The functions declared at the
 * end are hidden (-fvisibility=hidden) and used by these files only.
 */
#pragma once

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "nbd.h"

/* transmission flags: the handshake takes them from the server
 * (nbd-handshake.c), transmission obeys them (nbd.c) */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)

/*
 * Writes in flight on one connection. A window of writes is one round:
 * NBD_WINDOW sendmsg ops, then one recv for all their replies (16 bytes
 * each: write replies carry no data), each op with its link timeout.
 */
#define NBD_WINDOW 16
#define NBD_OPS (NBD_WINDOW + 1)
#define NBD_RING_ENTRIES 64
_Static_assert(2 * NBD_OPS <= NBD_RING_ENTRIES, "a round must fit in the ring");

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

/* Every field belongs to the thread using the connection (see above);
 * what follows each says which file writes it. */
struct NbdConn {
        struct io_uring ring;   /* nbd_connect() sets it up, nbd_close() ends it */
        bool ring_ok;           /* nbd-connect.c */
        int fd;                 /* nbd-connect.c opens it, nbd_close() closes it */
        bool transmission;      /* the handshake is over: NBD_CMD_DISC may be sent (nbd-handshake.c) */
        int dead;               /* 0, or the error that ended the connection (nbd.c) */
        uint64_t timeout_ns;    /* nbd_connect(), then constant */
        uint64_t size;          /* nbd-handshake.c, then constant */
        uint16_t flags;         /* transmission flags (nbd-handshake.c, then constant) */
        uint64_t cookie;        /* the next request's (nbd.c) */
        uint32_t gen;           /* tags a round's CQEs (user_data's high half) (nbd.c) */
        struct __kernel_timespec deadline; /* the round's, absolute CLOCK_MONOTONIC (nbd.c) */
        struct sockaddr_storage addr;      /* IORING_OP_CONNECT's (nbd-connect.c) */
        socklen_t addrlen;                 /* (nbd-connect.c) */
        /* the ops of the call under way, its requests and their replies:
         * whichever file makes the call fills them, the engine (nbd.c)
         * moves them forward; nothing in them outlives the call */
        NbdOp op[NBD_OPS];
        NbdRequest req[NBD_WINDOW];
        NbdReply reply[NBD_WINDOW];
        bool replied[NBD_WINDOW];
};

/* nbd.c: the io_uring engine */

/* A send of b0 and b1 (l1 may be 0), MSG_WAITALL | MSG_NOSIGNAL. */
void nbd_op_send(NbdOp *op, const void *b0, size_t l0, const void *b1, size_t l1);
/* A recv into b0 and b1 (l1 may be 0) that is complete with want bytes. */
void nbd_op_recv(NbdOp *op, void *b0, size_t l0, void *b1, size_t l1, size_t want, int flags);
/* Run ops[0..n) to completion, in order, by the deadline. */
int nbd_conn_run(NbdConn *c, NbdOp *ops, unsigned n, uint64_t deadline);
/* The deadline of a call (or of one step of the handshake) begun now. */
uint64_t nbd_conn_deadline(const NbdConn *c);

/* nbd-connect.c: a transport error in words, for err */
const char *nbd_io_reason(int r);

/* nbd-handshake.c: negotiate the export name on a connected socket; then
 * the connection is in transmission. 0, or -errno with why in err. */
int nbd_handshake(NbdConn *c, const char *name, char *err, size_t errlen);
