/*
 * conn.c: the control connections.
 *
 * Every message from a client is validated (protocol.c) and answered;
 * malformed ones get -EPROTO and are counted. A client is the process that
 * connected, not its pid number: a pidfd taken at connect (SO_PEERPIDFD),
 * and from ATTACH on fds bound to its address space, with the proof that
 * its uffd acts on that address space (mm_bind_proven(), attach.c). Its
 * credentials (SO_PEERCRED, SO_PEERGROUPS at connect) are checked on each
 * request (creds_changed()): a message sent by another process (a forked
 * child writing to an inherited socket) is refused; one from a process
 * whose credentials changed is refused and the connection ended. A client
 * can only name memory of its own address space: the uffd it hands over is
 * the only way the daemon changes its memory, its mem fd the only way it
 * reads it.
 *
 * Here: accept, the peer's identity, reading and validating messages (what
 * each asks is requests.c's, dispatch()), replies, and the end of a
 * connection. Manager thread only.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "closer.h"
#include "evict.h"
#include "inject.h"
#include "log.h"
#include "manager-internal.h"
#include "memread.h"
#include "pidfd-compat.h"
#include "users.h"
#include "util.h"

#define PROTOCOL_ERRORS_MAX 64

void reply_send(Conn *c, const void *msg, size_t len, const int *fds, size_t nfds) {
        if (c->dying)
                return;
        int r = zmsg_send(c->fd, msg, len, fds, nfds);
        if (r < 0)
                conn_kill(c, r == -EAGAIN ? "client not reading its socket" : "cannot send");
}

Conn *conn_find(Manager *m, uint64_t serial) {
        for (Conn *c = m->conns; c; c = c->next)
                if (c->serial == serial && !c->dying)
                        return c;
        return NULL;
}

void conn_reply(Conn *c, uint32_t id, int status, int64_t value) {
        ZMsgReply r = { .status = status, .value = value };
        zmsg_init(&r.hdr, ZMSG_REPLY, id, sizeof(r));
        reply_send(c, &r, sizeof(r), NULL, 0);
}

void conn_kill(Conn *c, const char *why) {
        if (c->dying)
                return;
        log_warn("client pid %d: dropping connection: %s", (int)c->pid, why);
        c->dying = true;
}

/* Root, or a member of [users] admin_group: may steer every client and
 * change daemon-wide settings. Decided now, from the credentials the peer
 * had when it connected, which creds_changed() checked still hold for this
 * request; a reload that changes admin_group applies at once. */
bool conn_admin(Manager *m, Conn *c) {
        return config_is_admin(&m->conf.users, c->uid, c->groups, c->ngroups);
}

/* The requests whose answer depends on who asks: admin rights ([users]
 * admin_group, root) or the user that owns a client. */
static bool request_privileged(uint16_t type) {
        return type == ZMSG_PAGEOUT_PID || type == ZMSG_SET_LIMIT || type == ZMSG_TUNABLE_SET ||
               type == ZMSG_TUNABLE_GET || type == ZMSG_CLIENTS;
}

/* Parse the ids after key ("Uid:", "Gid:", "Groups:") in a /proc status
 * line into ids[] (up to cap); their count, or -1 if line is not key's. */
static int status_ids(const char *line, const char *key, unsigned long *ids, int cap) {
        size_t kl = strlen(key);
        int n = 0;

        if (strncmp(line, key, kl) != 0)
                return -1;
        for (const char *p = line + kl; n < cap;) {
                char *end;
                while (*p == ' ' || *p == '\t')
                        p++;
                unsigned long v = strtoul(p, &end, 10);
                if (end == p)
                        break;
                ids[n++] = v;
                p = end;
        }
        return n;
}

/*
 * Has the peer the credentials it connected with (SO_PEERCRED: effective
 * uid and gid; SO_PEERGROUPS)? Read now from /proc/PID/status, which its
 * pidfd, alive after the read, says is still that process's. True if so.
 */
static bool conn_creds_same(Conn *c) {
        char path[64], line[4096];
        unsigned long ids[64];
        bool uid_ok = false, gid_ok = false, groups_ok = false;
        struct pollfd p = { .fd = c->pidfd, .events = POLLIN };
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)c->pid);
        f = fopen(path, "re");
        if (!f)
                return false;
        while (fgets(line, sizeof(line), f)) {
                int n;
                /* "Uid:" real, effective, saved, fs */
                if ((n = status_ids(line, "Uid:", ids, 4)) >= 0)
                        uid_ok = n == 4 && ids[1] == c->uid;
                else if ((n = status_ids(line, "Gid:", ids, 4)) >= 0)
                        gid_ok = n == 4 && ids[1] == c->gid;
                else if ((n = status_ids(line, "Groups:", ids, ELEMENTSOF(ids))) >= 0) {
                        /* both lists come from the same sorted group_info */
                        groups_ok = (size_t)n + 1 == c->ngroups && n < (int)ELEMENTSOF(ids);
                        for (int i = 0; groups_ok && i < n; i++)
                                groups_ok = ids[i] == c->groups[i + 1];
                }
        }
        fclose(f);
        return uid_ok && gid_ok && groups_ok && c->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

/*
 * Credentials are checked per request, not only at connect. A message
 * whose SCM_CREDENTIALS (real uid, gid) differ from the connection's first
 * one's, or a privileged request from a process whose effective ids or
 * groups are no longer those it connected with (a root process that
 * dropped privileges, setuid() or seteuid()), is refused and the
 * connection ended: admin rights and ownership are decided on the
 * connect-time credentials, which must therefore still be true. NULL, or
 * why not.
 */
static const char *creds_changed(Conn *c, const struct ucred *sender, uint16_t type) {
        if (sender->pid != 0) {
                if (!c->scm_known) {
                        c->scm_known = true;
                        c->scm_uid = sender->uid;
                        c->scm_gid = sender->gid;
                } else if (sender->uid != c->scm_uid || sender->gid != c->scm_gid)
                        return "its uid or gid changed since its first message";
        }
        if (request_privileged(type) && !conn_creds_same(c))
                return "its credentials changed since it connected";
        return NULL;
}

static void conn_message(Manager *m, Conn *c, const void *buf, ssize_t n, int *fds, size_t nfds,
                         const struct ucred *sender) {
        const ZMsgHeader *h = buf;
        /* a truncated packet (-EMSGSIZE) has a header only if it was long:
         * conn_readable() zeroes the header before each receive, so a short
         * one never echoes stale bytes of ours */
        bool has_hdr = n >= (ssize_t)sizeof(ZMsgHeader) || (n == -EMSGSIZE && h->magic == ZSWAP_PROTO_MAGIC);
        uint32_t id = has_hdr ? h->id : 0;
        int r;

        const char *changed = NULL;
        if (n < 0 || zmsg_validate(buf, (size_t)n) < 0)
                r = -EPROTO;
        else if (sender->pid != 0 && sender->pid != c->pid)
                r = -EPERM; /* another process writing to this client's socket */
        else if ((changed = creds_changed(c, sender, h->type)))
                r = -EPERM;
        else
                r = dispatch(m, c, buf, fds, nfds);

        if (r == -EPROTO) {
                /* a counter, relaxed: it orders nothing (core.h) */
                atomic_fetch_add_explicit(&m->core.protocol_errors, 1, memory_order_relaxed);
                log_warn("client pid %d: malformed or unexpected message (%zd bytes, type %u)", (int)c->pid, n,
                         has_hdr ? h->type : 0);
                if (++c->errors > PROTOCOL_ERRORS_MAX)
                        conn_kill(c, "too many protocol errors");
        }
        if (r <= 0)
                conn_reply(c, id, r, 0);
        if (changed) {
                log_warn("client pid %d (uid %u): request refused: %s", (int)c->pid, c->uid, changed);
                conn_kill(c, changed);
        }
        /* what the handler did not keep: a userfaultfd's close may wait
         * (closer.c) */
        for (size_t i = 0; i < nfds; i++)
                fds[i] = closer_drop(m->core.closer, fds[i], c->uid);
}

void conn_readable(Manager *m, Conn *c) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX + 8];

        for (int budget = 64; budget > 0 && !c->dying; budget--) {
                int fds[ZMSG_FDS_MAX];
                size_t nfds = ELEMENTSOF(fds);
                struct ucred sender;
                memset(buf, 0, sizeof(ZMsgHeader));
                ssize_t n = zmsg_recv_all(c->fd, buf, sizeof(buf), fds, &nfds, &sender);
                /* a file whose close may wait never reaches a handler
                 * (a userfaultfd does, for ATTACH: it is closed through
                 * the closer whoever closes it): the closer threads close
                 * it (closer.c) */
                for (size_t i = 0; i < nfds; i++)
                        if (!fd_may_be_kept(fds[i]))
                                fds[i] = closer_drop(m->core.closer, fds[i], c->uid);
                if (n == -EAGAIN)
                        return;
                if (closer_pending(m->core.closer, c->uid) >= CLOSER_USER_MAX)
                        conn_kill(c, "too many descriptors sent whose close waits");
                if (n == 0 || (n < 0 && n != -EMSGSIZE) || c->dying) {
                        for (size_t i = 0; i < nfds; i++)
                                fds[i] = closer_drop(m->core.closer, fds[i], c->uid);
                        c->dying = true;
                        return;
                }
                bool request = n >= (ssize_t)sizeof(ZMsgHeader) && ((ZMsgHeader *)buf)->type < ZMSG_REPLY;
                conn_message(m, c, buf, n, fds, nfds, &sender);
                if (request && !c->dying && !users_take_request(m, c))
                        return; /* paused until users_tick() */
        }
}

/* The peer's groups (SO_PEERGROUPS, Linux 4.13): the admin group and
 * "allow = @group" count supplementary groups too. */
static int peer_groups(int fd, gid_t primary, Conn *c) {
        socklen_t len = 64 * sizeof(gid_t);

        for (;;) {
                gid_t *g = INJECT_ALLOC(realloc(c->groups, len + sizeof(gid_t)));
                if (!g)
                        return -ENOMEM;
                c->groups = g;
                g[0] = primary;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g + 1, &len) == 0) {
                        c->ngroups = 1 + len / sizeof(gid_t);
                        return 0;
                }
                if (errno != ERANGE || len > 65536 * sizeof(gid_t))
                        return negative_errno();
        }
}

/*
 * A pidfd of the peer process: the kernel's own, taken at connect()
 * (SO_PEERPIDFD, Linux 6.5). Without it, pidfd_open() of the pid, kept
 * only if that process started before we accepted (its start time, in
 * clock ticks, at most the tick of accepted_ticks): a process started
 * since cannot be the one that connected, so a reused pid is caught, up
 * to a reuse within the same clock tick.
 */
static int peer_pidfd(int fd, pid_t pid, uint64_t accepted_ticks) {
        socklen_t len = sizeof(int);
        uint64_t start;
        int pidfd = -1;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0)
                return pidfd;
        if (errno != ENOPROTOOPT && errno != EINVAL)
                return negative_errno();
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
                return negative_errno();
        if (proc_start_ticks(pid, &start) < 0 || start > accepted_ticks) {
                safe_close(pidfd);
                return -ESRCH;
        }
        return pidfd;
}

/* CLOCK_BOOTTIME in clock ticks (the unit of /proc/PID/stat's start time), rounded up. */
static uint64_t boot_ticks_now(void) {
        struct timespec ts;
        long hz = sysconf(_SC_CLK_TCK);

        clock_gettime(CLOCK_BOOTTIME, &ts);
        return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) * (uint64_t)hz / 1000000000ull + 1;
}

void conn_accept(Manager *m) {
        for (;;) {
                int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE) {
                                /* stop listening until the next tick instead of
                                 * spinning on a listen socket we cannot serve */
                                log_warn("out of file descriptors: not accepting for a moment");
                                epoll_ctl(m->epfd, EPOLL_CTL_DEL, m->listen_fd, NULL);
                                m->listen_paused = true;
                        }
                        return;
                }
                struct ucred cred;
                socklen_t len = sizeof(cred);
                int one = 1;
                Conn *c = INJECT_ALLOC(calloc(1, sizeof(*c)));
                if (!c || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
                    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
                        free(c);
                        safe_close(fd);
                        continue;
                }
                /* a connection refused is closed as any other
                 * (closer_close_conn()): what its peer sent on it already
                 * goes to the closer threads, not to this thread's close */
                if (closer_pending(m->core.closer, cred.uid) >= CLOSER_USER_MAX) {
                        log_warn("pid %d (uid %u): refused: its user sent descriptors whose close still waits",
                                 (int)cred.pid, cred.uid);
                        free(c);
                        closer_close_conn(m->core.closer, fd, cred.uid);
                        continue;
                }
                if (memread_stuck(cred.uid) > 0) {
                        log_warn("pid %d (uid %u): refused: a read of its user's memory waited past its bound "
                                 "(memread.h)",
                                 (int)cred.pid, cred.uid);
                        free(c);
                        closer_close_conn(m->core.closer, fd, cred.uid);
                        continue;
                }
                if (m->nconns >= m->cfg.max_clients || !users_may_connect(m, cred.uid)) {
                        log_warn("pid %d (uid %u): too many connections (%s), refused", (int)cred.pid, cred.uid,
                                 m->nconns >= m->cfg.max_clients ? "max_clients" : "its user's max_connections");
                        free(c);
                        closer_close_conn(m->core.closer, fd, cred.uid);
                        continue;
                }
                c->pidfd = peer_pidfd(fd, cred.pid, boot_ticks_now());
                if (c->pidfd < 0 || peer_groups(fd, cred.gid, c) < 0) {
                        safe_close(c->pidfd);
                        free(c->groups);
                        free(c);
                        closer_close_conn(m->core.closer, fd, cred.uid);
                        continue;
                }
                c->m = m;
                c->serial = ++m->next_conn_serial;
                c->fd = fd;
                c->pid = cred.pid;
                c->uid = cred.uid;
                c->gid = cred.gid;
                struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                        closer_close_conn(m->core.closer, fd, cred.uid);
                        safe_close(c->pidfd);
                        free(c->groups);
                        free(c);
                        continue;
                }
                c->next = m->conns;
                m->conns = c;
                m->nconns++;
        }
}

void conn_free(Manager *m, Conn *c) {
        for (Conn **p = &m->conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        m->nconns--;
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                evict_forget_conn(mm, c);
        if (c->mm) {
                log_info("client pid %d disconnected", (int)c->pid);
                mm_detach(m, c->mm, c);
        }
        epoll_ctl(m->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->fd = closer_close_conn(m->core.closer, c->fd, c->uid);
        safe_close(c->pidfd);
        free(c->groups);
        free(c);
}

void reap_conns(Manager *m) {
        for (Conn *c = m->conns, *n; c; c = n) {
                n = c->next;
                if (c->dying)
                        conn_free(m, c);
        }
}
