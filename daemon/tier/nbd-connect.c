/*
 * nbd-connect.c: nbd_connect(), up to the handshake (nbd-handshake.c):
 * the connection's ring, the name lookup, the socket and its connect.
 *
 * The connect goes through the connection's io_uring like every other
 * byte (nbd.c): one IORING_OP_CONNECT with its link timeout. A host name
 * is looked up on a thread of its own, so that a slow DNS server cannot
 * hold nbd_connect() past its timeout (resolve()); that thread is the one
 * exception to "every thread is joined" (docs/design.md, "Threads").
 */
#include <errno.h>
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

#include "macro.h"
#include "nbd-internal.h"
#include "uring.h"
#include "util.h"

const char *nbd_io_reason(int r) {
        switch (r) {
        case -ETIMEDOUT: return "timed out";
        case -ECONNRESET: return "connection closed by the server";
        case -ECONNREFUSED: return "connection refused";
        case -EPROTO: return "protocol error";
        default: return strerror(-r);
        }
}

static int conn_connect(NbdConn *c, uint64_t deadline) {
        c->op[0] = (NbdOp) { .kind = OP_CONNECT, .want = 1 };
        return nbd_conn_run(c, c->op, 1, deadline);
}

/* A name lookup on its own thread, which the caller may give up waiting
 * for: then the thread frees it when getaddrinfo() returns. */
typedef struct Lookup {
        pthread_mutex_t lock;
        pthread_cond_t cond;    /* on CLOCK_MONOTONIC */
        bool done;              /* under lock: gai and result are set (the lookup thread) */
        bool abandoned;         /* under lock: the caller is gone (the caller) */
        /* the lookup thread's answer, set under lock with done; the caller
         * reads them once it saw done (after the join) */
        int gai;
        struct addrinfo *result;
        /* what to look up: set by lookup_new() before the thread starts,
         * then only read */
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
        deadline = nbd_conn_deadline(c);
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
                return errorf(r, err, errlen, "%s port %s: %s", a->host, a->port, nbd_io_reason(r));
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
        r = conn_connect(c, nbd_conn_deadline(c));
        if (r < 0)
                return errorf(r, err, errlen, "%s: %s", a->path, nbd_io_reason(r));
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
                r = nbd_handshake(c, a->export_name, err, errlen);
        if (r < 0) {
                nbd_close(c);
                return r;
        }
        *ret = c;
        return 0;
}
