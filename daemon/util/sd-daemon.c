/*
 * sd-daemon.c: systemd's service protocol without libsystemd.
 *
 * Two environment contracts, both documented as stable interfaces by
 * systemd (sd_listen_fds(3), sd_notify(3)): a socket-activated process
 * finds LISTEN_PID (its own pid) and LISTEN_FDS (how many fds from fd 3
 * on); a Type=notify service finds NOTIFY_SOCKET, an AF_UNIX datagram
 * socket it sends "KEY=VALUE\n..." states to. systemd takes the sender's
 * pid from the credentials the kernel attaches (SO_PASSCRED on its end),
 * so nothing but the datagram is sent.
 *
 * The datagram socket is made once and kept, unconnected: every send
 * names $NOTIFY_SOCKET again, so a systemd that re-executed itself (and
 * made its socket anew) still hears us, and no socket() is needed after
 * the daemon installed its syscall filter (main() sends a first STATUS=
 * before the sandbox). sendmsg() on one socket is thread-safe, so is this.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macro.h"
#include "sd-daemon.h"

#define SD_LISTEN_FDS_START 3

/* A whole decimal number that fits an unsigned long long, or -EINVAL. */
static int parse_ull(const char *s, unsigned long long *ret) {
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        *ret = strtoull(s, &end, 10);
        return errno || *end ? -EINVAL : 0;
}

int sdd_listen_fds(void) {
        unsigned long long pid, n;
        int r = 0;

        if (!getenv("LISTEN_PID"))
                goto out;
        if (parse_ull(getenv("LISTEN_PID"), &pid) < 0 || parse_ull(getenv("LISTEN_FDS"), &n) < 0 ||
            n > 1024) {
                r = -EINVAL;
                goto out;
        }
        if (pid != (unsigned long long)getpid())
                goto out; /* meant for the process that exec'd us, not for us */
        for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + (int)n; fd++) {
                int flags = fcntl(fd, F_GETFD);
                if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
                        r = negative_errno();
                        goto out;
                }
        }
        r = (int)n;
out:
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
        return r;
}

static pthread_once_t notify_once = PTHREAD_ONCE_INIT;
static int notify_fd = -1;

static void notify_open(void) {
        notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

int sdd_notify(const char *state) {
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len;

        if (!path || !*path)
                return 0;
        len = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
                return -EINVAL;
        memcpy(sa.sun_path, path, len);
        if (path[0] == '@')
                sa.sun_path[0] = 0; /* abstract: the name is the bytes after the NUL, no terminator */
        else
                len++;

        pthread_once(&notify_once, notify_open);
        if (notify_fd < 0)
                return -EBADF;
        struct iovec iov = { .iov_base = (void *)state, .iov_len = strlen(state) };
        struct msghdr mh = {
                .msg_name = &sa,
                .msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len),
                .msg_iov = &iov,
                .msg_iovlen = 1,
        };
        /* a full receive queue drops the state rather than stall the daemon */
        if (sendmsg(notify_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                return negative_errno();
        return 1;
}

int sdd_notifyf(const char *fmt, ...) {
        char buf[1024];
        va_list ap;

        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof(buf))
                return -ENOBUFS;
        return sdd_notify(buf);
}

uint64_t sdd_watchdog_usec(void) {
        unsigned long long usec, pid;
        const char *p = getenv("WATCHDOG_PID");

        if (parse_ull(getenv("WATCHDOG_USEC"), &usec) < 0 || usec == 0)
                return 0;
        if (p && (parse_ull(p, &pid) < 0 || pid != (unsigned long long)getpid()))
                return 0; /* the watchdog is some other process's */
        return usec;
}
