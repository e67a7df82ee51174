/*
 * protocol.c: framing and validation of zswapd's wire messages.
 *
 * Both sides call zmsg_validate() on every packet before looking at any
 * field other than the header, so the daemon's logic only ever sees
 * messages whose size matches their type. zmsg_recv() makes sure no file
 * descriptor that came with a message leaks: the ones the caller asked for
 * are returned, all others are closed, including those of rejected or
 * truncated packets. Stateless; safe from any thread.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "macro.h"
#include "protocol.h"

size_t zmsg_expected_size(uint16_t type) {
        switch (type) {
        case ZMSG_HELLO:
                return sizeof(ZMsgHello);
        case ZMSG_ATTACH:
        case ZMSG_ADOPT:
                return sizeof(ZMsgAttach);
        case ZMSG_REGISTER:
        case ZMSG_UNREGISTER:
        case ZMSG_PAGEOUT:
        case ZMSG_REGIONS:
                return sizeof(ZMsgRange);
        case ZMSG_STATS:
                return sizeof(ZMsgStatsReq);
        case ZMSG_FORK_PREPARE:
                return sizeof(ZMsgFork);
        case ZMSG_FORK_DONE:
                return sizeof(ZMsgHeader);
        case ZMSG_CHILD_ATTACH:
                return sizeof(ZMsgChild);
        case ZMSG_PAGEOUT_PID:
        case ZMSG_PAGEIN_PID:
                return sizeof(ZMsgPageoutPid);
        case ZMSG_SET_LIMIT:
                return sizeof(ZMsgLimit);
        case ZMSG_SET_GROUP:
        case ZMSG_GROUP_LIMIT:
                return sizeof(ZMsgGroup);
        case ZMSG_TUNABLE_SET:
        case ZMSG_TUNABLE_GET:
        case ZMSG_TUNABLE_REPLY:
                return sizeof(ZMsgTunable);
        case ZMSG_STATUS:
                return sizeof(ZMsgHeader);
        case ZMSG_CLIENTS:
                return sizeof(ZMsgClientsReq);
        case ZMSG_STATUS_REPLY:
                return sizeof(ZMsgStatusReply);
        case ZMSG_CLIENTS_REPLY:
                return sizeof(ZMsgClientsReply);
        case ZMSG_REPLY:
                return sizeof(ZMsgReply);
        case ZMSG_STATS_REPLY:
                return sizeof(ZMsgStatsReply);
        case ZMSG_REGIONS_REPLY:
                return sizeof(ZMsgRegionsReply);
        case ZMSG_MOVE_DONE:
                return sizeof(ZMsgMoveDone);
        case ZMSG_RELEASE:
        case ZMSG_RELEASE_DONE:
                return sizeof(ZMsgRelease);
        default:
                return 0;
        }
}

void zgroup_of_unit(const char *unit, char *out, size_t cap) {
        size_t n = strlen(unit);
        if (snprintf(out, cap, "unit:%s", unit) < (int)cap && zgroup_name_valid(out, cap))
                return;
        uint32_t h = 2166136261u; /* FNV-1a */
        for (const char *p = unit; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        char part[41] = "";
        memcpy(part, unit, MIN(n, sizeof(part) - 1));
        for (char *p = part; *p; p++)
                if (!strchr(ZSWAP_GROUP_NAME_CHARS, *p))
                        *p = '_';
        snprintf(out, cap, "unit:%s-%08x", part, h);
}

bool zgroup_name_valid(const char *name, size_t cap) {
        size_t n = strnlen(name, MIN(cap, (size_t)ZSWAP_GROUP_NAME_MAX));
        return n > 0 && n < MIN(cap, (size_t)ZSWAP_GROUP_NAME_MAX) && strspn(name, ZSWAP_GROUP_NAME_CHARS) == n;
}

void zmsg_init(ZMsgHeader *h, uint16_t type, uint32_t id, size_t size) {
        h->magic = ZSWAP_PROTO_MAGIC;
        h->version = ZSWAP_PROTO_VERSION;
        h->type = type;
        h->id = id;
        h->size = (uint32_t)size;
}

int zmsg_validate(const void *buf, size_t len) {
        const ZMsgHeader *h = buf;

        if (len < sizeof(ZMsgHeader) || len > ZSWAP_MSG_MAX)
                return -EPROTO;
        if (h->magic != ZSWAP_PROTO_MAGIC || h->version != ZSWAP_PROTO_VERSION)
                return -EPROTO;
        if (h->size != len)
                return -EPROTO;

        if (h->type == ZMSG_MOVE) {
                const ZMsgMove *m = buf;
                uint64_t sum = 0;

                if (len < offsetof(ZMsgMove, runs))
                        return -EPROTO;
                if (m->nruns == 0 || m->nruns > ZSWAP_MOVE_RUNS_MAX || len != zmsg_move_size(m->nruns))
                        return -EPROTO;
                for (uint32_t i = 0; i < m->nruns; i++)
                        sum += m->runs[i].npages;
                if (sum != m->npages || sum == 0 || sum > ZSWAP_BATCH_MAX)
                        return -EPROTO;
                return 0;
        }

        size_t want = zmsg_expected_size(h->type);
        if (want == 0 || want != len)
                return -EPROTO;
        return 0;
}

int zmsg_send(int fd, const void *msg, size_t len, const int *fds, size_t nfds) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * ZMSG_FDS_MAX)];
        } control;
        struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (nfds > ZMSG_FDS_MAX)
                return -EINVAL;
        if (nfds > 0) {
                mh.msg_control = control.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                memset(control.buf, 0, mh.msg_controllen); /* padding too: no stack bytes leave */
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
        }

        for (;;) {
                ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (n >= 0)
                        return (size_t)n == len ? 0 : -EMSGSIZE;
                if (errno != EINTR)
                        return negative_errno();
        }
}

static void take_fds(struct msghdr *mh, int *fds, size_t *nfds, struct ucred *sender) {
        size_t cap = nfds ? *nfds : 0, got = 0;

        for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET)
                        continue;
                if (cm->cmsg_type == SCM_CREDENTIALS && sender && cm->cmsg_len >= CMSG_LEN(sizeof(struct ucred)))
                        memcpy(sender, CMSG_DATA(cm), sizeof(*sender));
                if (cm->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                        int f;
                        memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                        if (got < cap)
                                fds[got++] = f;
                        else
                                safe_close(f);
                }
        }
        if (nfds)
                *nfds = got;
}

/* One recvmsg() into the control buffer given; keep: a truncated message's
 * fds are returned too, for the caller to close. */
static ssize_t recv_one(int fd, void *buf, size_t cap, void *control, size_t controllen, int *fds, size_t *nfds,
                        struct ucred *sender, bool keep) {
        struct iovec iov = { .iov_base = buf, .iov_len = cap };
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control,
                .msg_controllen = controllen,
        };
        ssize_t n;

        if (sender)
                *sender = (struct ucred){ .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
        do
                n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                if (nfds)
                        *nfds = 0;
                return negative_errno();
        }

        take_fds(&mh, fds, nfds, sender);
        if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
                for (size_t i = 0; !keep && nfds && i < *nfds; i++)
                        safe_close(fds[i]);
                if (nfds && !keep)
                        *nfds = 0;
                return -EMSGSIZE;
        }
        return n;
}

ssize_t zmsg_recv(int fd, void *buf, size_t cap, int *fds, size_t *nfds, struct ucred *sender) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(struct ucred))];
        } control;
        return recv_one(fd, buf, cap, control.buf, sizeof(control.buf), fds, nfds, sender, false);
}

ssize_t zmsg_recv_all(int fd, void *buf, size_t cap, int *fds, size_t *nfds, struct ucred *sender) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * ZMSG_FDS_MAX) + CMSG_SPACE(sizeof(struct ucred))];
        } control;
        return recv_one(fd, buf, cap, control.buf, sizeof(control.buf), fds, nfds, sender, true);
}
