/*
 * nbd-handshake.c: the negotiation between connect (nbd-connect.c) and
 * transmission (nbd.c): the fixed newstyle handshake with NBD_OPT_GO
 * (NBD_INFO_EXPORT requested), falling back to NBD_OPT_EXPORT_NAME when
 * the server answers NBD_REP_ERR_UNSUP (NetworkBlockDevice/nbd
 * doc/proto.md). What it learns is the export's size and transmission
 * flags. Each step is one round of the connection's engine (nbd.c),
 * bounded by the timeout on its own.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "macro.h"
#include "nbd-internal.h"
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

/* One step of the handshake: bounded by the timeout on its own. */
static int hs_send(NbdConn *c, const void *buf, size_t len) {
        nbd_op_send(&c->op[0], buf, len, NULL, 0);
        return nbd_conn_run(c, c->op, 1, nbd_conn_deadline(c));
}

static int hs_recv(NbdConn *c, void *buf, size_t len) {
        nbd_op_recv(&c->op[0], buf, len, NULL, 0, len, MSG_WAITALL);
        return nbd_conn_run(c, c->op, 1, nbd_conn_deadline(c));
}

static int opt_send(NbdConn *c, uint32_t opt, const void *data, uint32_t len) {
        uint8_t hdr[16];

        store_be(hdr, NBD_IHAVEOPT, 8);
        store_be(hdr + 8, opt, 4);
        store_be(hdr + 12, len, 4);
        nbd_op_send(&c->op[0], hdr, sizeof(hdr), data, len);
        return nbd_conn_run(c, c->op, 1, nbd_conn_deadline(c));
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
                return errorf(r, err, errlen, "sending NBD_OPT_GO: %s", nbd_io_reason(r));
        for (unsigned i = 0; i < NBD_OPT_REPLIES_MAX; i++) {
                r = opt_reply(c, NBD_OPT_GO, &type, data, sizeof(data), &len);
                if (r < 0)
                        return errorf(r, err, errlen, "reply to NBD_OPT_GO: %s", nbd_io_reason(r));
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
                return errorf(r, err, errlen, "NBD_OPT_EXPORT_NAME: %s", nbd_io_reason(r));
        c->size = load_be(d, 8);
        c->flags = (uint16_t)load_be(d + 8, 2);
        return 0;
}

int nbd_handshake(NbdConn *c, const char *name, char *err, size_t errlen) {
        uint8_t hello[18], cflags[4];
        uint16_t hflags;
        uint32_t flags = 0;
        int r;

        r = hs_recv(c, hello, sizeof(hello));
        if (r < 0)
                return errorf(r, err, errlen, "waiting for the server's greeting: %s", nbd_io_reason(r));
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
                return errorf(r, err, errlen, "sending client flags: %s", nbd_io_reason(r));
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
