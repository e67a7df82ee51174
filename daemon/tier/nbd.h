/*
 * nbd.h: a client of the NBD protocol (network block device) whose socket
 * I/O all goes through a small io_uring per connection.
 *
 * The second storage tier keeps blocks of compressed pages on an NBD export
 * (nbd-server, qemu-nbd, nbdkit...), reached over TCP or a Unix socket.
 * One NbdConn is used by one thread at a time (no locks inside); several
 * connections to the same export may be used from several threads at once.
 * See nbd.c for the design.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_DEFAULT_PORT "10809"
/* The largest read or write one request may carry: what the protocol says
 * every server must accept without calling it a denial of service. */
#define NBD_MAX_REQUEST (32u << 20)

typedef struct NbdAddr {
        char host[256];         /* TCP host (name or address), or "" for a Unix socket */
        char port[16];          /* default "10809" */
        char path[108];         /* Unix socket path when host is "" */
        char export_name[256];
} NbdAddr;

/* Parse the standard NBD URI: nbd://HOST[:PORT]/EXPORT,
 * nbd+unix:///EXPORT?socket=PATH (IPv6 as nbd://[::1]:10809/x); the export
 * name and the socket path are percent-decoded. TLS (nbds://), user info,
 * abstract sockets and unknown query parameters are refused. 0, or -EINVAL
 * with why in err (err may be NULL). */
int nbd_parse(const char *uri, NbdAddr *ret, char *err, size_t errlen);

typedef struct NbdConn NbdConn;

/* Connect and negotiate (fixed newstyle, NBD_OPT_GO, falling back to
 * NBD_OPT_EXPORT_NAME on servers without it); every step (name lookup,
 * connect, each handshake message) bounded by timeout_ms, which is also
 * the bound on each later request. 0 or -errno, with a human-readable
 * reason in err: -ECONNREFUSED "connection refused", -ENOENT "export 'x'
 * not found", -ETIMEDOUT, -EPROTO for a server that breaks the protocol... */
int nbd_connect(const NbdAddr *a, int timeout_ms, NbdConn **ret, char *err, size_t errlen);

uint64_t nbd_size(const NbdConn *c);    /* export size in bytes */
bool nbd_read_only(const NbdConn *c);   /* writes fail with -EPERM */
bool nbd_multi_conn(const NbdConn *c);  /* NBD_FLAG_CAN_MULTI_CONN */
bool nbd_can_flush(const NbdConn *c);   /* else nbd_flush() is -EOPNOTSUPP */

/* One read of len bytes at off into buf; waits for its reply only. 0, or
 * -EINVAL (len 0, len > NBD_MAX_REQUEST, past the end: the connection is
 * not touched), the server's error (-EIO...: the connection lives on), or
 * a transport or protocol error (-ETIMEDOUT, -ECONNRESET, -EPROTO...: the
 * connection is dead). Allocates nothing: page faults wait on it. */
int nbd_pread(NbdConn *c, void *buf, uint32_t len, uint64_t off);

/* Several writes, pipelined (requests sent back to back, replies matched
 * by cookie in whatever order they come); waits until every reply came.
 * The ranges of one batch must not overlap: a server may carry them out in
 * any order. 0, or the error of the first write (in w[] order) that
 * failed. Every entry is checked before anything is sent: one bad range
 * is -EINVAL and nothing is written. -EPERM on a read-only export. */
typedef struct NbdWrite {
        const void *buf;
        uint32_t len;
        uint64_t off;
} NbdWrite;
int nbd_pwrite_batch(NbdConn *c, const NbdWrite *w, unsigned n);

/* Make every write whose reply came durable on the server. */
int nbd_flush(NbdConn *c);

/* Send NBD_CMD_DISC if the connection is alive, close. Accepts NULL,
 * returns NULL. */
NbdConn *nbd_close(NbdConn *c);

/* After any transport/protocol error the connection is dead: every later
 * call returns -ENOTCONN at once; the caller closes it and connects again.
 * Also true after the server said it is shutting down (NBD_ESHUTDOWN). */
bool nbd_dead(const NbdConn *c);
