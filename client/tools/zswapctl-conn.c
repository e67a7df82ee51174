/*
 * zswapctl-conn.c: zswapctl's control connection. ctl_connect() connects
 * to a trusted listener only (root or $ZSWAP_DAEMON_UID: nothing is sent
 * to anybody else) and says HELLO in the control role; ctl_request() is
 * one synchronous request and its reply, never more than one in flight.
 * read_failed() and refused() turn a daemon's refusal into the message
 * that says what to do, and exit status 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "protocol.h"
#include "util.h"
#include "zswapctl.h"

int ctl_request(int fd, void *msg, size_t len, void *reply, size_t cap) {
        ZMsgHeader *h = msg;
        ssize_t n;
        int r = zmsg_send(fd, msg, len, NULL, 0);
        if (r < 0)
                return r;
        n = zmsg_recv(fd, reply, cap, NULL, NULL, NULL);
        if (n <= 0)
                return n == 0 ? -ECONNRESET : (int)n;
        if (zmsg_validate(reply, (size_t)n) < 0 || ((ZMsgHeader *)reply)->id != h->id)
                return -EPROTO;
        /* TUNABLE_REPLY keeps its status after the pid; any other refusal
         * (e.g. an older daemon's -EPROTO) is a plain REPLY */
        if (((ZMsgHeader *)reply)->type == ZMSG_TUNABLE_REPLY)
                return ((ZMsgTunable *)reply)->status;
        return ((ZMsgReply *)reply)->status;
}

/* The reply must be of type want (a plain REPLY with status 0 is not). */
int ctl_expect(int fd, void *msg, size_t len, void *reply, size_t cap, uint16_t want) {
        int r = ctl_request(fd, msg, len, reply, cap);
        if (r == 0 && ((ZMsgHeader *)reply)->type != want)
                return -EPROTO;
        return r;
}

/* A control connection that said HELLO, or -1 with why not in why[len]
 * (one line, no newline). */
int ctl_open(const char *path, char *why, size_t len) {
        int fd = unix_connect(path);
        ZMsgHello h = { .role = ZROLE_CONTROL };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        uid_t peer = 0;

        /* nothing is sent to a listener that is not root nor the uid
         * $ZSWAP_DAEMON_UID names: whoever could write the socket's
         * directory could be listening there (common/util.c) */
        if (fd >= 0 && unix_peer_trusted(fd, daemon_uid_from_env(), &peer) < 0) {
                close(fd);
                snprintf(why, len,
                         "zswapctl: %s is served by uid %u, not by root: not trusted as zswapd, nothing sent "
                         "(set ZSWAP_DAEMON_UID=%u if zswapd runs as that user)",
                         path, (unsigned)peer, (unsigned)peer);
                return -1;
        }

        if (fd == -ENOENT || fd == -ECONNREFUSED) {
                snprintf(why, len, "zswapd is not running: start it with systemctl start zswapd (no socket at %s)",
                         path);
                return -1;
        }
        if (fd == -EACCES) {
                snprintf(why, len, "zswapctl: permission denied on %s: run as root or a member of group zswap", path);
                return -1;
        }
        if (fd < 0) {
                snprintf(why, len, "zswapctl: cannot connect to %s: %s", path, strerror(-fd));
                return -1;
        }
        zmsg_init(&h.hdr, ZMSG_HELLO, 1, sizeof(h));
        int r = ctl_request(fd, &h, sizeof(h), buf, sizeof(buf));
        if (r < 0) {
                snprintf(why, len, "zswapctl: %s refused the connection: %s", path, strerror(-r));
                close(fd);
                return -1;
        }
        return fd;
}

/* A control connection that said HELLO, or -1 after saying why not. */
int ctl_connect(const char *path) {
        char why[512];
        int fd = ctl_open(path, why, sizeof(why));
        if (fd < 0)
                fprintf(stderr, "%s\n", why);
        return fd;
}

/* Say why a read request failed; exit status 1. */
int read_failed(int r, const char *what) {
        if (r == -EPROTO)
                fprintf(stderr, "zswapctl: the running zswapd does not understand %s: restart it with this version\n",
                        what);
        else if (r == -EPERM)
                fprintf(stderr, "zswapctl: " EPERM_ADMIN "\n");
        else
                fprintf(stderr, "zswapctl: %s: %s\n", what, strerror(-r));
        return 1;
}

/* The daemon has no client with that pid: say whether the process exists. */
void no_client(long pid) {
        if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
                fprintf(stderr, "zswapctl: no such process: %ld\n", pid);
        else
                fprintf(stderr, "zswapctl: process %ld has no memory managed by zswapd (it was not started under "
                                "zswap-run nor linked with libzswap, or it has not attached yet: zswap-run attaches "
                                "ZSWAP_ATTACH_MS, 100 ms, after the start)\n", pid);
}

/* Say why the daemon refused a request about process pid (0: the daemon). */
int refused(int r, int32_t pid, bool change, const char *what, const char *msg) {
        if (r == -ESRCH)
                no_client(pid);
        else if (r == -EPERM && pid)
                fprintf(stderr, "zswapctl: " EPERM_ADMIN " (process %d is another user's)\n", (int)pid);
        else if (r == -EPERM)
                fprintf(stderr, "zswapctl: " EPERM_ADMIN " (%s)\n",
                        change ? "changing daemon settings" : "reading daemon settings");
        else if (r == -EPROTO)
                fprintf(stderr, "zswapctl: the running zswapd does not understand %s: restart it with this version\n",
                        what);
        else if (msg && *msg)
                fprintf(stderr, "zswapctl: %s\n", msg);
        else
                fprintf(stderr, "zswapctl: %s: %s\n", what, strerror(-r));
        return 1;
}
