/*
 * test-hostile: a real daemon fed garbage by raw connections, while a
 * legitimate client with 8 MiB paged out keeps working.
 *
 * Each malformed or out-of-order message gets an error reply with the
 * errno manager.c gives it, or the connection is dropped where the daemon
 * says it will be (too many protocol errors, a peer that never reads).
 * File descriptors that come with refused messages are closed (a pipe whose
 * last reader is gone gives EPIPE; the daemon's fd count goes back to where
 * it was). A raw connection that completes the handshake and then plays a
 * bad agent (wrong MOVE_DONE, then hanging up mid-move) leaves its own
 * memory intact. Registering memory a client does not own privately is
 * refused. Throughout, the legitimate client's pages stay held, and at the
 * end they read back identical and the daemon exits cleanly.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "uffd-compat.h"

#define LEN ((size_t)8 << 20)
#define LANE_BYTES ((uint64_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE)

static TestDaemon d;
static struct zswap_client *legit;
static uint64_t legit_held; /* pages the daemon holds for the legit client */
static uint32_t ids = 1000;
static _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 64], out[64 << 10];

static int count_fds(pid_t pid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        DIR *dir = opendir(path);
        int n = 0;
        ASSERT_TRUE(dir);
        for (struct dirent *e; (e = readdir(dir));)
                n += e->d_name[0] != '.';
        closedir(dir);
        return n;
}

/* The daemon runs (not a zombie) and the legit client's pages are held. */
static void check_alive(const char *after) {
        char path[64], buf[256];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)d.pid);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f && fgets(buf, sizeof(buf), f));
        fclose(f);
        if (strrchr(buf, ')')[2] == 'Z')
                test_fail("zswapd died after: %s", after);
        struct zswap_stats s;
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, legit_held);
        ASSERT_EQ(s.registered_bytes, LEN);
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_GLOBAL, &s));
        fprintf(stderr, "-- ok after %s\n", after);
}

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = { .tv_sec = 10 };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        strcpy(sa.sun_path, d.sock);
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        return fd;
}

static ssize_t raw_send(int fd, const void *buf, size_t len, const int *fds, size_t nfds) {
        char control[CMSG_SPACE(sizeof(int) * 32)] = {};
        struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (nfds) {
                mh.msg_control = control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                *cm = (struct cmsghdr){ .cmsg_len = CMSG_LEN(sizeof(int) * nfds), .cmsg_level = SOL_SOCKET,
                                        .cmsg_type = SCM_RIGHTS };
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
        }
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        return n < 0 ? -errno : n;
}

/* A message of type t (its declared size unless len says otherwise) in out. */
static uint32_t build(uint16_t t, size_t len) {
        memset(out, 0, sizeof(out));
        zmsg_init((ZMsgHeader *)out, t, ++ids, len ? len : zmsg_expected_size(t));
        return ids;
}

static uint32_t send_msg(int fd, uint16_t t, const int *fds, size_t nfds) {
        uint32_t id = ((ZMsgHeader *)out)->type == t ? ((ZMsgHeader *)out)->id : build(t, 0);
        ASSERT_EQ(raw_send(fd, out, ((ZMsgHeader *)out)->size, fds, nfds), ((ZMsgHeader *)out)->size);
        return id;
}

/* Read one message; returns its length, the first fd that came in *rfd. */
static ssize_t recv_msg(int fd, int *rfd) {
        int fds[4];
        size_t nfds = ELEMENTSOF(fds);
        ssize_t n = zmsg_recv(fd, in, sizeof(in), fds, &nfds, NULL);
        for (size_t i = 0; i < nfds; i++)
                if (i == 0 && rfd)
                        *rfd = fds[0];
                else
                        safe_close(fds[i]);
        if (n > 0)
                ASSERT_OK(zmsg_validate(in, (size_t)n));
        return n;
}

/* The next message must be the reply to id with this status. */
static int expect_reply(int fd, uint32_t id, int status) {
        int rfd = -1;
        ssize_t n = recv_msg(fd, &rfd);
        const ZMsgReply *r = (const ZMsgReply *)in;
        if (n <= 0)
                test_fail("request %u: no reply (%zd): connection closed or daemon gone", id, n);
        ASSERT_EQ(r->hdr.type, ZMSG_REPLY);
        ASSERT_EQ(r->hdr.id, id);
        if (r->status != status)
                test_fail("request %u: status %d (%s), expected %d (%s)", id, r->status, strerror(-r->status), status,
                          strerror(-status));
        return rfd;
}

static void send_expect(int fd, uint16_t t, const int *fds, size_t nfds, int status) {
        uint32_t id = send_msg(fd, t, fds, nfds);
        ASSERT_EQ(expect_reply(fd, id, status), -1);
}

static void range_expect(int fd, uint16_t t, uint64_t addr, uint64_t len, int status) {
        build(t, 0);
        ((ZMsgRange *)out)->addr = addr;
        ((ZMsgRange *)out)->len = len;
        send_expect(fd, t, NULL, 0, status);
}

static void scalar_expect(int fd, uint16_t t, uint32_t v, int status) {
        build(t, 0);
        ((ZMsgHello *)out)->role = v; /* also ZMsgStatsReq.scope */
        send_expect(fd, t, NULL, 0, status);
}

static bool pipe_has_reader(int wfd) {
        ssize_t n = write(wfd, "x", 1);
        ASSERT_TRUE(n == 1 || errno == EPIPE);
        return n == 1;
}

/* ---- malformed packets ---- */

static void malformed(void) {
        int fd = raw_connect();
        ZMsgHeader *h = (ZMsgHeader *)out;
        uint32_t id;

        /* shorter than a header: no id to echo */
        static const size_t shorts[] = { 1, 7, sizeof(ZMsgHeader) - 1 };
        for (size_t i = 0; i < ELEMENTSOF(shorts); i++) {
                build(ZMSG_STATS, 0);
                ASSERT_EQ(raw_send(fd, out, shorts[i], NULL, 0), shorts[i]);
                expect_reply(fd, 0, -EPROTO);
        }
        /* too long: just over the limit, and beyond the daemon's buffer */
        id = build(ZMSG_STATS, ZSWAP_MSG_MAX + 1);
        ASSERT_EQ(raw_send(fd, out, ZSWAP_MSG_MAX + 1, NULL, 0), ZSWAP_MSG_MAX + 1);
        expect_reply(fd, id, -EPROTO);
        static const size_t longs[] = { 4096, 4097, 32 << 10 };
        for (size_t i = 0; i < ELEMENTSOF(longs); i++) {
                id = build(ZMSG_STATS, longs[i]);
                ASSERT_EQ(raw_send(fd, out, longs[i], NULL, 0), longs[i]);
                ASSERT_TRUE(recv_msg(fd, NULL) == sizeof(ZMsgReply));
                /* a truncated packet is refused; its id may or may not be read */
                ASSERT_TRUE(((ZMsgReply *)in)->hdr.id == id || ((ZMsgReply *)in)->hdr.id == 0);
                ASSERT_EQ(((ZMsgReply *)in)->status, -EPROTO);
        }
        id = build(ZMSG_STATS, 0);
        h->magic = 0x50575359;
        send_expect(fd, ZMSG_STATS, NULL, 0, -EPROTO);
        build(ZMSG_STATS, 0);
        h->version = 2;
        send_expect(fd, ZMSG_STATS, NULL, 0, -EPROTO);
        build(ZMSG_STATS, sizeof(ZMsgStatsReq) + 8); /* size field agrees, type does not */
        send_expect(fd, ZMSG_STATS, NULL, 0, -EPROTO);
        build(ZMSG_STATS, 0);
        ASSERT_EQ(raw_send(fd, out, sizeof(ZMsgStatsReq) - 4, NULL, 0), sizeof(ZMsgStatsReq) - 4);
        expect_reply(fd, ids, -EPROTO); /* size field says more than came */
        static const uint16_t unknown[] = { 0, 10, 99, 1000, 0xffff };
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                build(unknown[i], sizeof(ZMsgHeader));
                send_expect(fd, unknown[i], NULL, 0, -EPROTO);
        }
        /* well-formed, but only the daemon sends these */
        static const uint16_t theirs[] = { ZMSG_REPLY, ZMSG_STATS_REPLY, ZMSG_RELEASE };
        for (size_t i = 0; i < ELEMENTSOF(theirs); i++)
                send_expect(fd, theirs[i], NULL, 0, -EPROTO);
        build(ZMSG_MOVE, zmsg_move_size(1));
        ((ZMsgMove *)out)->nruns = ((ZMsgMove *)out)->npages = ((ZMsgMove *)out)->runs[0].npages = 1;
        send_expect(fd, ZMSG_MOVE, NULL, 0, -EPROTO);

        /* after all that, the connection still answers, with real numbers */
        id = build(ZMSG_STATS, 0);
        ((ZMsgStatsReq *)out)->scope = ZSWAP_STATS_GLOBAL;
        send_msg(fd, ZMSG_STATS, NULL, 0);
        ASSERT_EQ(recv_msg(fd, NULL), sizeof(ZMsgStatsReply));
        const ZMsgStatsReply *sr = (const ZMsgStatsReply *)in;
        ASSERT_EQ(sr->hdr.type, ZMSG_STATS_REPLY);
        ASSERT_EQ(sr->hdr.id, id);
        ASSERT_EQ(sr->status, 0);
        ASSERT_TRUE(sr->stats.clients >= 1);
        ASSERT_TRUE(sr->stats.registered_bytes >= LEN);
        ASSERT_TRUE(sr->stats.stored_pages + sr->stats.same_pages >= legit_held);
        close(fd);
        check_alive("malformed packets");
}

/* ---- the handshake out of order ---- */

static void before_attach(int fd) {
        static const uint16_t ranges[] = { ZMSG_REGISTER, ZMSG_UNREGISTER, ZMSG_PAGEOUT };
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++)
                range_expect(fd, ranges[i], (uint64_t)(uintptr_t)in & ~(ZSWAP_PAGE_SIZE - 1), ZSWAP_PAGE_SIZE,
                             -ENOTCONN);
        send_expect(fd, ZMSG_FORK_PREPARE, NULL, 0, -ENOTCONN);
        send_expect(fd, ZMSG_MOVE_DONE, NULL, 0, -EPROTO); /* out of the blue */
        send_expect(fd, ZMSG_RELEASE_DONE, NULL, 0, -EPROTO);
        scalar_expect(fd, ZMSG_STATS, ZSWAP_STATS_CLIENT, -ENOTCONN);
        scalar_expect(fd, ZMSG_STATS, 2, -EINVAL);
        scalar_expect(fd, ZMSG_STATS, UINT32_MAX, -EINVAL);
}

static void attach_expect(int fd, uint64_t addr, uint64_t len, const int *fds, size_t nfds, int status) {
        build(ZMSG_ATTACH, 0);
        ((ZMsgAttach *)out)->staging_addr = addr;
        ((ZMsgAttach *)out)->staging_len = len;
        send_expect(fd, ZMSG_ATTACH, fds, nfds, status);
}

/* Returns a connection attached with a uffd of this process; its staging
 * area (one lane) in *staging. */
static int handshake_abuse(uint8_t **staging) {
        int fd = raw_connect(), p[2][2], devfd;
        uint8_t *st = test_map(2 * LANE_BYTES);
        uint64_t sa = (uint64_t)(uintptr_t)st;
        struct stat a, b;

        scalar_expect(fd, ZMSG_HELLO, 0, -EINVAL);
        scalar_expect(fd, ZMSG_HELLO, 4, -EINVAL);
        scalar_expect(fd, ZMSG_HELLO, UINT32_MAX, -EINVAL);
        before_attach(fd);
        attach_expect(fd, sa, LANE_BYTES, NULL, 0, -EPERM); /* no HELLO yet */
        send_expect(fd, ZMSG_CHILD_ATTACH, NULL, 0, -EPERM);
        /* FORK_DONE has no reply: the next reply must be for the next request */
        send_msg(fd, ZMSG_FORK_DONE, NULL, 0);
        scalar_expect(fd, ZMSG_STATS, UINT32_MAX, -EINVAL);

        /* HELLO hands over /dev/userfaultfd, once */
        build(ZMSG_HELLO, 0);
        ((ZMsgHello *)out)->role = ZROLE_CLIENT;
        devfd = expect_reply(fd, send_msg(fd, ZMSG_HELLO, NULL, 0), 0);
        ASSERT_TRUE(devfd >= 0);
        ASSERT_OK(fstat(devfd, &a));
        ASSERT_OK(stat("/dev/userfaultfd", &b));
        ASSERT_TRUE(S_ISCHR(a.st_mode) && a.st_rdev == b.st_rdev);
        scalar_expect(fd, ZMSG_HELLO, ZROLE_CLIENT, -EALREADY);
        scalar_expect(fd, ZMSG_HELLO, ZROLE_CONTROL, -EALREADY);
        before_attach(fd);
        send_expect(fd, ZMSG_CHILD_ATTACH, NULL, 0, -EPERM);

        int uffd = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        ASSERT_TRUE(uffd >= 0);
        /* staging areas that are not one: unaligned, empty, not whole lanes,
         * too many lanes, wrapping, above the index */
        attach_expect(fd, sa + 1, LANE_BYTES, &uffd, 1, -EINVAL);
        attach_expect(fd, sa, 0, &uffd, 1, -EINVAL);
        attach_expect(fd, sa, ZSWAP_PAGE_SIZE, &uffd, 1, -EINVAL);
        attach_expect(fd, sa, 9 * LANE_BYTES, &uffd, 1, -EINVAL);
        attach_expect(fd, UINT64_MAX & ~(ZSWAP_PAGE_SIZE - 1), LANE_BYTES, &uffd, 1, -EINVAL);
        attach_expect(fd, ((uint64_t)1 << 48) - ZSWAP_PAGE_SIZE, LANE_BYTES, &uffd, 1, -EINVAL);
        /* no fd, not a uffd, the device itself, too many; the daemon closes
         * every fd it was sent */
        ASSERT_OK(pipe2(p[0], O_CLOEXEC | O_NONBLOCK));
        ASSERT_OK(pipe2(p[1], O_CLOEXEC | O_NONBLOCK));
        attach_expect(fd, sa, LANE_BYTES, NULL, 0, -EBADF);
        attach_expect(fd, sa, LANE_BYTES, &p[0][0], 1, -EBADF);
        attach_expect(fd, sa, LANE_BYTES, &devfd, 1, -EBADF);
        int three[3] = { uffd, p[0][0], p[1][0] };
        attach_expect(fd, sa, LANE_BYTES, three, 3, -EBADF);
        p[0][0] = safe_close(p[0][0]);
        p[1][0] = safe_close(p[1][0]);
        ASSERT_TRUE(!pipe_has_reader(p[0][1]));
        ASSERT_TRUE(!pipe_has_reader(p[1][1]));
        close(p[0][1]);
        close(p[1][1]);
        /* a uffd someone already initialised is refused */
        int used = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        struct uffdio_api api = { .api = UFFD_API };
        ASSERT_OK(ioctl(used, UFFDIO_API, &api));
        attach_expect(fd, sa, LANE_BYTES, &used, 1, -EINVAL);
        close(used);

        /* the uffd above went through all of that untouched */
        attach_expect(fd, sa, LANE_BYTES, &uffd, 1, 0);
        attach_expect(fd, sa, LANE_BYTES, &uffd, 1, -EPERM);
        close(uffd); /* the daemon holds its own reference */
        close(devfd);
        *staging = st;
        check_alive("handshake abuse");
        return fd;
}

/* ---- an attached connection: bad ranges, a bad agent ---- */

static void bad_ranges(int fd, uint8_t *staging, uint8_t *legit_buf) {
        static const uint16_t types[] = { ZMSG_REGISTER, ZMSG_UNREGISTER, ZMSG_PAGEOUT };
        uint64_t a = (uint64_t)(uintptr_t)legit_buf, P = ZSWAP_PAGE_SIZE, top = (uint64_t)1 << 48;
        const uint64_t bad[][2] = {
                { a + 1, P },     { a, P + 1 },     { a, 0 },          { 0, P },         { UINT64_MAX & ~(P - 1), 2 * P },
                { P, UINT64_MAX & ~(P - 1) }, { top, P }, { top - P, 2 * P }, { UINT64_MAX - P + 1, P },
        };
        for (size_t t = 0; t < ELEMENTSOF(types); t++)
                for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                        range_expect(fd, types[t], bad[i][0], bad[i][1], -EINVAL);
        /* another connection's memory (registered through its uffd) */
        range_expect(fd, ZMSG_REGISTER, a, LEN, -EEXIST);
        range_expect(fd, ZMSG_REGISTER, a + LEN / 2, P, -EEXIST);
        range_expect(fd, ZMSG_UNREGISTER, a, LEN, -EINVAL);
        build(ZMSG_PAGEOUT, 0);
        ((ZMsgRange *)out)->addr = a;
        ((ZMsgRange *)out)->len = LEN;
        ASSERT_EQ(expect_reply(fd, send_msg(fd, ZMSG_PAGEOUT, NULL, 0), 0), -1);
        ASSERT_EQ(((ZMsgReply *)in)->value, 0); /* none of it is ours */
        range_expect(fd, ZMSG_REGISTER, (uint64_t)(uintptr_t)staging, P, -EINVAL);
        /* answers to commands never sent */
        send_expect(fd, ZMSG_MOVE_DONE, NULL, 0, -EPROTO);
        build(ZMSG_MOVE_DONE, 0);
        ((ZMsgHeader *)out)->id = 7; /* no such lane */
        send_expect(fd, ZMSG_MOVE_DONE, NULL, 0, -EPROTO);
        send_expect(fd, ZMSG_RELEASE_DONE, NULL, 0, -EPROTO);
        check_alive("bad ranges");
}

/* Expect the daemon's next command to this agent. */
static const ZMsgHeader *expect_command(int fd, uint16_t type) {
        ssize_t n = recv_msg(fd, NULL);
        ASSERT_TRUE(n > 0);
        ASSERT_EQ(((ZMsgHeader *)in)->type, type);
        return (const ZMsgHeader *)in;
}

static void bad_agent(int fd, uint8_t *mem, size_t npages) {
        uint64_t addr = (uint64_t)(uintptr_t)mem;
        uint64_t *hashes = calloc(npages, sizeof(uint64_t));

        fill_pages(mem, npages * ZSWAP_PAGE_SIZE, 99);
        hash_pages(mem, npages * ZSWAP_PAGE_SIZE, hashes);
        range_expect(fd, ZMSG_REGISTER, addr, npages * ZSWAP_PAGE_SIZE, 0);
        range_expect(fd, ZMSG_REGISTER, addr, ZSWAP_PAGE_SIZE, -EEXIST);

        /* the daemon asks us to move exactly our resident pages */
        build(ZMSG_PAGEOUT, 0);
        ((ZMsgRange *)out)->addr = addr;
        ((ZMsgRange *)out)->len = npages * ZSWAP_PAGE_SIZE;
        uint32_t pageout = send_msg(fd, ZMSG_PAGEOUT, NULL, 0);
        const ZMsgMove *mv = (const ZMsgMove *)expect_command(fd, ZMSG_MOVE);
        uint32_t lane = mv->hdr.id, moving = mv->npages; /* `in` is reused below */
        ASSERT_EQ(lane, 0);
        ASSERT_EQ(mv->slot0, 0);
        ASSERT_EQ(mv->npages, npages);
        ASSERT_EQ(mv->nruns, 1);
        ASSERT_EQ(mv->runs[0].addr, addr);
        ASSERT_EQ(mv->runs[0].npages, npages);

        /* a MOVE_DONE for the wrong number of pages is refused... */
        build(ZMSG_MOVE_DONE, 0);
        ZMsgMoveDone *done = (ZMsgMoveDone *)out;
        done->hdr.id = lane;
        done->npages = moving - 1;
        send_expect(fd, ZMSG_MOVE_DONE, NULL, 0, -EPROTO);
        /* ...the right one, "nothing moved", releases the lane... */
        build(ZMSG_MOVE_DONE, 0);
        done->hdr.id = lane;
        done->npages = moving;
        send_msg(fd, ZMSG_MOVE_DONE, NULL, 0);
        const ZMsgRelease *rel = (const ZMsgRelease *)expect_command(fd, ZMSG_RELEASE);
        ASSERT_EQ(rel->hdr.id, lane);
        ASSERT_EQ(rel->slot0, 0);
        ASSERT_EQ(rel->nslots, ZSWAP_BATCH_MAX);
        build(ZMSG_RELEASE_DONE, 0);
        ((ZMsgRelease *)out)->hdr.id = lane;
        send_msg(fd, ZMSG_RELEASE_DONE, NULL, 0);
        /* ...and the pageout finishes having evicted nothing */
        ASSERT_EQ(expect_reply(fd, pageout, 0), -1);
        ASSERT_EQ(((ZMsgReply *)in)->value, 0);
        send_expect(fd, ZMSG_RELEASE_DONE, NULL, 0, -EPROTO); /* twice */
        ASSERT_EQ(verify_pages(mem, npages * ZSWAP_PAGE_SIZE, hashes), 0);

        /* an agent that hangs up in the middle of a move */
        build(ZMSG_PAGEOUT, 0);
        ((ZMsgRange *)out)->addr = addr;
        ((ZMsgRange *)out)->len = npages * ZSWAP_PAGE_SIZE;
        send_msg(fd, ZMSG_PAGEOUT, NULL, 0);
        expect_command(fd, ZMSG_MOVE);
        close(fd);
        check_alive("an agent hanging up mid-move");
        /* the daemon lets go of that memory: a new registration succeeds */
        int r = -EEXIST;
        for (int i = 0; i < 500 && r == -EEXIST; i++) {
                usleep(10000);
                r = zswap_register(legit, mem, npages * ZSWAP_PAGE_SIZE);
        }
        ASSERT_OK(r);
        ASSERT_OK(zswap_unregister(legit, mem, npages * ZSWAP_PAGE_SIZE));
        ASSERT_EQ(verify_pages(mem, npages * ZSWAP_PAGE_SIZE, hashes), 0);
        free(hashes);
}

/* ---- connections the daemon drops ---- */

static void too_many_errors(void) {
        int fd = raw_connect(), replies = 0;

        /* PROTOCOL_ERRORS_MAX (64) answered, then the connection goes */
        for (int i = 0; i < 80; i++)
                if (raw_send(fd, "z", 1, NULL, 0) < 0)
                        break;
        for (;;) {
                /* the daemon closed with our surplus unread: ECONNRESET comes
                 * first, then the queued replies, then EOF */
                ssize_t n = recv_msg(fd, NULL);
                if (n == -ECONNRESET)
                        continue;
                if (n == 0)
                        break;
                ASSERT_TRUE(n > 0);
                ASSERT_EQ(((ZMsgReply *)in)->status, -EPROTO);
                replies++;
        }
        ASSERT_EQ(replies, 64);
        close(fd);
        check_alive("too many protocol errors");
}

static void never_reads(void) {
        int fd = raw_connect(), sent = 0, got = 0;
        uint32_t first = ids + 1;

        scalar_expect(fd, ZMSG_HELLO, ZROLE_CONTROL, 0);
        first = ids + 1;
        for (int spins = 0; sent < 20000 && spins < 2000;) {
                build(ZMSG_STATS, 0);
                ((ZMsgStatsReq *)out)->scope = ZSWAP_STATS_GLOBAL;
                ssize_t r = sendmsg(fd, &(struct msghdr){ .msg_iov = &(struct iovec){ out, sizeof(ZMsgStatsReq) },
                                                          .msg_iovlen = 1 },
                                    MSG_NOSIGNAL | MSG_DONTWAIT);
                if (r > 0) {
                        sent++;
                        continue;
                }
                if (errno != EAGAIN)
                        break; /* the daemon hung up */
                spins++;
                usleep(1000);
        }
        /* replies come in order until the daemon gave up on us */
        for (ssize_t n; (n = recv_msg(fd, NULL)) != 0; got++) {
                if (n == -ECONNRESET) {
                        got--;
                        continue;
                }
                ASSERT_TRUE(n > 0);
                ASSERT_EQ(((ZMsgHeader *)in)->type, ZMSG_STATS_REPLY);
                ASSERT_EQ(((ZMsgHeader *)in)->id, first + (uint32_t)got);
        }
        fprintf(stderr, "never-reading peer: %d requests sent, %d replies queued before the drop\n", sent, got);
        ASSERT_TRUE(got < sent);
        close(fd);
        check_alive("a peer that never reads");
}

static void foreign_sender(void) {
        int fd = raw_connect();
        pid_t child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0) {
                /* a forked child writing to its parent's connection */
                build(ZMSG_STATS, 0);
                ((ZMsgStatsReq *)out)->scope = ZSWAP_STATS_GLOBAL;
                _exit(raw_send(fd, out, sizeof(ZMsgStatsReq), NULL, 0) == sizeof(ZMsgStatsReq) ? 0 : 1);
        }
        int st;
        ASSERT_EQ(waitpid(child, &st, 0), child);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        expect_reply(fd, ids + 1, -EPERM);
        close(fd);
}

static void many_connections(void) {
        int fds[300];
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                fds[i] = raw_connect();
        check_alive("300 idle connections");
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                close(fds[i]);
}

/* ---- what a client may register ---- */

static void ownership(void) {
        const size_t P = ZSWAP_PAGE_SIZE;
        struct zswap_stats before, after;
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &before));

        /* not mapped at all, or only partly */
        uint8_t *m = test_map(4 * P);
        ASSERT_OK(munmap(m + P, P));
        ASSERT_ERROR(zswap_register(legit, m + P, P), EINVAL);
        ASSERT_ERROR(zswap_register(legit, m, 4 * P), EINVAL);
        ASSERT_ERROR(zswap_register(legit, m + 2 * P, 4 * P), EINVAL);
        /* file-backed, even private */
        char path[] = "/tmp/zswap-hostile-XXXXXX";
        int ffd = mkstemp(path);
        ASSERT_TRUE(ffd >= 0);
        unlink(path);
        ASSERT_OK(ftruncate(ffd, 16 * P));
        uint8_t *f = mmap(NULL, 16 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, ffd, 0);
        ASSERT_TRUE(f != MAP_FAILED);
        f[0] = 1;
        ASSERT_ERROR(zswap_register(legit, f, 16 * P), EINVAL);
        /* shared anonymous memory, and memory we cannot write */
        uint8_t *sh = mmap(NULL, 16 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(sh != MAP_FAILED);
        ASSERT_ERROR(zswap_register(legit, sh, 16 * P), EINVAL);
        uint8_t *ro = mmap(NULL, 16 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(ro != MAP_FAILED);
        ASSERT_ERROR(zswap_register(legit, ro, 16 * P), EINVAL);
        /* the same range twice, or overlapping */
        uint8_t *mine = test_map(16 * P);
        ASSERT_OK(zswap_register(legit, mine + 4 * P, 8 * P));
        ASSERT_ERROR(zswap_register(legit, mine + 4 * P, 8 * P), EEXIST);
        ASSERT_ERROR(zswap_register(legit, mine + 6 * P, P), EEXIST);
        ASSERT_ERROR(zswap_register(legit, mine, 16 * P), EEXIST);
        ASSERT_ERROR(zswap_register(legit, mine + 11 * P, 5 * P), EEXIST);
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &after));
        ASSERT_EQ(after.registered_bytes, before.registered_bytes + 8 * P);
        ASSERT_OK(zswap_unregister(legit, mine + 4 * P, 8 * P));
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &after));
        ASSERT_EQ(after.registered_bytes, before.registered_bytes);
        munmap(m, 4 * P);
        munmap(f, 16 * P);
        munmap(sh, 16 * P);
        munmap(ro, 16 * P);
        munmap(mine, 16 * P);
        close(ffd);
        check_alive("registering memory that is not private anonymous");
}

int main(void) {
        uint64_t *hashes = malloc(LEN / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        uint8_t *staging, *buf;
        struct zswap_stats s;

        signal(SIGPIPE, SIG_IGN);
        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        int daemon_fds = count_fds(d.pid);

        legit = td_connect(&d);
        buf = test_map(LEN);
        fill_pages(buf, LEN, 7);
        hash_pages(buf, LEN, hashes);
        ASSERT_OK(zswap_register(legit, buf, LEN));
        int n = zswap_pageout(legit, buf, LEN);
        ASSERT_TRUE(n > (int)(LEN / ZSWAP_PAGE_SIZE) * 9 / 10);
        legit_held = (uint64_t)n;
        check_alive("the legitimate client's pageout");

        malformed();
        int fd = handshake_abuse(&staging);
        bad_ranges(fd, staging, buf);
        uint8_t *mem = test_map(16 * ZSWAP_PAGE_SIZE);
        bad_agent(fd, mem, 16);
        too_many_errors();
        never_reads();
        foreign_sender();
        many_connections();
        ownership();

        /* the legitimate client's data, byte for byte */
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);
        ASSERT_TRUE(s.faults >= legit_held);
        ASSERT_OK(zswap_unregister(legit, buf, LEN));
        zswap_disconnect(legit);

        /* every connection, uffd and fd the hostile ones made is gone */
        int now = 0;
        for (int i = 0; i < 500 && (now = count_fds(d.pid)) != daemon_fds; i++)
                usleep(10000);
        if (now != daemon_fds)
                test_fail("zswapd holds %d fds, %d at start", now, daemon_fds);
        td_stop(&d);
        munmap(staging, 2 * LANE_BYTES);
        munmap(mem, 16 * ZSWAP_PAGE_SIZE);
        munmap(buf, LEN);
        free(hashes);
        fprintf(stderr, "hostile: ok\n");
        return 0;
}
