/*
 * test-hostile: a real daemon fed garbage by raw connections while a
 * legitimate client with 8 MiB paged out keeps working.
 *
 * Each malformed or out-of-order message gets an error reply with the errno
 * manager.c gives it, or the connection is dropped where the daemon says so
 * (too many protocol errors, a peer that never reads). Descriptors sent with
 * refused messages are closed (a pipe whose last reader is gone gives EPIPE;
 * the daemon's fd count returns to where it started). A raw connection that
 * completes the handshake and then plays a bad agent (wrong MOVE_DONE, then
 * hanging up mid-move) keeps its memory intact. Memory that is not private,
 * anonymous and writable, or already registered, is refused. Throughout,
 * the legitimate client's pages stay held; at the end they read back
 * identical and the daemon exits cleanly.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "uffd-compat.h"
#include "util.h"

#define LEN ((size_t)8 << 20)
#define P ZSWAP_PAGE_SIZE
#define LANE_BYTES ((uint64_t)ZSWAP_BATCH_MAX * P)
#define AGENT_PAGES 16 /* memory the raw connection registers */

static TestDaemon d;
static struct zswap_client *legit;
static uint64_t legit_held; /* pages the daemon holds for the legit client */
static uint32_t ids = 1000;
static int agent_uffd = -1; /* the raw connection's uffd, kept to move pages as its agent */
static _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 64], out[64 << 10];

static uint64_t daemon_clients(void) {
        ZMsgStatusReply st;

        td_status(&d, &st);
        return st.stats.clients;
}

/* How many polls in a row saw the count *last. */
static int steady(int *last, int *same) {
        int n = (int)td_fd_count(&d);

        *same = n == *last ? *same + 1 : 0;
        *last = n;
        return *same;
}

/* The daemon's open fds with no client: once its count of clients is 0
 * and the count of fds has held for 2 s (a client's teardown goes on
 * after it left the count, and takes a while under valgrind). */
static int daemon_fds(void) {
        int last = -1, same = 0;

        WAIT_UNTIL(daemon_clients() == 0, TEST_WAIT_S, "the start-up probe client still counted");
        WAIT_UNTIL(steady(&last, &same) >= 200, TEST_WAIT_S, "the daemon's fd count never held still, last %d", last);
        return last;
}

/* Every fd the clients brought is closed: wait for the count to come
 * back to start, however long the daemon's teardowns take. Below start
 * is no leak: a teardown that outlasted daemon_fds()'s wait (seen under
 * valgrind on a busy machine, 33 at start and 25 after) was counted in
 * start. */
static void wait_fds_back(int start) {
        int n = -1;

        WAIT_UNTIL(daemon_clients() == 0, TEST_WAIT_S, "a client still counted");
        WAIT_UNTIL((n = (int)td_fd_count(&d)) <= start, TEST_WAIT_S, "the daemon has %d fds open, %d at start", n,
                   start);
}

/* The daemon runs and still holds the legit client's pages. */
static void check_alive(const char *after) {
        struct zswap_stats s;
        if (waitpid(d.pid, NULL, WNOHANG) != 0)
                test_fail("zswapd died after: %s", after);
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
        strcpy(sa.sun_path, d.sock);
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        return fd;
}

/* A fresh message of type t in `out` (size 0: the type's), new id. */
static void *msg(uint16_t t, size_t size) {
        memset(out, 0, sizeof(out));
        zmsg_init((ZMsgHeader *)out, t, ++ids, size ? size : zmsg_expected_size(t));
        return out;
}
#define MSG(type, t) ((type *)msg(t, 0))

/* Send `out`, len bytes of it (0: as its header says); returns its id. */
static uint32_t xmit(int fd, size_t len, const int *fds, size_t nfds) {
        const ZMsgHeader *h = (const ZMsgHeader *)out;
        ASSERT_OK(zmsg_send(fd, out, len ? len : h->size, fds, nfds));
        return h->id;
}

/* The second fd of the last reply that had one (the shared store after
 * the store), -1: none; whoever wants it takes it */
static int second_fd = -1;

/* Read one message into `in`; returns its length, its first fd in *rfd. */
static ssize_t recv_msg(int fd, int *rfd) {
        int fds[4];
        size_t nfds = ELEMENTSOF(fds);
        ssize_t n = zmsg_recv(fd, in, sizeof(in), fds, &nfds, NULL);
        second_fd = safe_close(second_fd);
        for (size_t i = 0; i < nfds; i++)
                if (i == 0 && rfd)
                        *rfd = fds[0];
                else if (i == 1 && rfd)
                        second_fd = fds[1];
                else
                        safe_close(fds[i]);
        if (n > 0)
                ASSERT_OK(zmsg_validate(in, (size_t)n));
        return n;
}

/* The next message must be the reply to id with this status; returns its fd. */
static int reply(int fd, uint32_t id, int status) {
        const ZMsgReply *r = (const ZMsgReply *)in;
        int rfd = -1;
        ssize_t n = recv_msg(fd, &rfd);
        if (n <= 0)
                test_fail("request %u: no reply (%zd): connection dropped or daemon gone", id, n);
        ASSERT_EQ(r->hdr.type, ZMSG_REPLY);
        ASSERT_EQ(r->hdr.id, id);
        if (r->status != status)
                test_fail("request %u: status %d (%s), expected %d (%s)", id, r->status, strerror(-r->status), status,
                          strerror(-status));
        return rfd;
}

/* Send `out` with fds; expect status and no fd back. */
static void req(int fd, const int *fds, size_t nfds, int status) {
        ASSERT_EQ(reply(fd, xmit(fd, 0, fds, nfds), status), -1);
}

static void type_req(int fd, uint16_t t, int status) {
        msg(t, 0);
        req(fd, NULL, 0, status);
}

static uint32_t range_send(int fd, uint16_t t, uint64_t addr, uint64_t len) {
        ZMsgRange *m = MSG(ZMsgRange, t);
        m->addr = addr;
        m->len = len;
        return xmit(fd, 0, NULL, 0);
}

static void range_req(int fd, uint16_t t, uint64_t addr, uint64_t len, int status) {
        ASSERT_EQ(reply(fd, range_send(fd, t, addr, len), status), -1);
}

/* HELLO.role and STATS.scope: the first field after the header */
static void u32_req(int fd, uint16_t t, uint32_t v, int status) {
        MSG(ZMsgHello, t)->role = v;
        req(fd, NULL, 0, status);
}

/* The last reader of the pipe is gone, here and in the daemon (which
 * closes what it was sent right after replying). */
static void assert_no_reader(int wfd) {
        WAIT_UNTIL(write(wfd, "x", 1) < 0 && errno == EPIPE, TEST_WAIT_S, "the pipe still has a reader (%s)",
                   strerror(errno));
        close(wfd);
}

/* ---- malformed packets ---- */

/* Refused with EPROTO: type, size field (0: the type's), bytes sent (0: as
 * the size field says), a wrong magic or version. */
static const struct {
        uint16_t type;
        uint32_t size, len, magic, version;
} bad_packets[] = {
        { ZMSG_STATS, 0, 1, 0, 0 },    { ZMSG_STATS, 0, 7, 0, 0 },        { ZMSG_STATS, 0, 15, 0, 0 },
        { ZMSG_STATS, 0, 20, 0, 0 },   { ZMSG_STATS, 32, 0, 0, 0 },       { ZMSG_STATS, ZSWAP_MSG_MAX + 1, 0, 0, 0 },
        { ZMSG_STATS, 4096, 0, 0, 0 }, { ZMSG_STATS, 4097, 0, 0, 0 },     { ZMSG_STATS, 32 << 10, 0, 0, 0 },
        { ZMSG_STATS, 0, 0, 0x50575359, 0 }, { ZMSG_STATS, 0, 0, 0, 2 }, { 0, 16, 0, 0, 0 },
        { 10, 16, 0, 0, 0 },           { 99, 16, 0, 0, 0 },               { 0xffff, 16, 0, 0, 0 },
        /* well-formed, but only the daemon sends these */
        { ZMSG_REPLY, 0, 0, 0, 0 },    { ZMSG_STATS_REPLY, 0, 0, 0, 0 },  { ZMSG_RELEASE, 0, 0, 0, 0 },
};

static void malformed(void) {
        int fd = raw_connect();

        for (size_t i = 0; i < ELEMENTSOF(bad_packets); i++) {
                ZMsgHeader *h = msg(bad_packets[i].type, bad_packets[i].size);
                h->magic = bad_packets[i].magic ?: h->magic;
                h->version = (uint16_t)(bad_packets[i].version ?: h->version);
                size_t len = bad_packets[i].len ?: h->size;
                uint32_t id = xmit(fd, len, NULL, 0);
                ASSERT_EQ(recv_msg(fd, NULL), sizeof(ZMsgReply));
                const ZMsgReply *r = (const ZMsgReply *)in;
                ASSERT_EQ(r->hdr.type, ZMSG_REPLY);
                ASSERT_EQ(r->status, -EPROTO);
                /* no id in a packet shorter than a header; one truncated
                 * past the daemon's buffer may or may not have it read */
                if (len < sizeof(ZMsgHeader))
                        ASSERT_EQ(r->hdr.id, 0);
                else
                        ASSERT_TRUE(r->hdr.id == id || (len > ZSWAP_MSG_MAX + 8 && r->hdr.id == 0));
        }
        ZMsgMove *mv = msg(ZMSG_MOVE, zmsg_move_size(1));
        mv->nruns = mv->npages = mv->runs[0].npages = 1;
        req(fd, NULL, 0, -EPROTO);

        /* descriptors on a request that takes none, four and then twenty
         * (the daemon takes up to the kernel's 253 in one message, so the
         * kernel drops none in its thread): answered, and all closed */
        int p[2], copies[20];
        char control[CMSG_SPACE(sizeof(copies))] = {};
        ASSERT_OK(pipe2(p, O_CLOEXEC | O_NONBLOCK));
        for (size_t i = 0; i < ELEMENTSOF(copies); i++)
                copies[i] = p[0];
        MSG(ZMsgStatsReq, ZMSG_STATS)->scope = ZSWAP_STATS_GLOBAL;
        xmit(fd, 0, copies, 4);
        ASSERT_TRUE(recv_msg(fd, NULL) == sizeof(ZMsgStatsReply) && ((ZMsgStatsReply *)in)->status == 0);
        struct msghdr mh = { .msg_iov = &(struct iovec){ out, ((ZMsgHeader *)out)->size },
                             .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control) };
        *CMSG_FIRSTHDR(&mh) = (struct cmsghdr){ .cmsg_len = CMSG_LEN(sizeof(copies)), .cmsg_level = SOL_SOCKET,
                                                .cmsg_type = SCM_RIGHTS };
        memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), copies, sizeof(copies));
        ((ZMsgHeader *)out)->id = ++ids;
        ASSERT_TRUE(sendmsg(fd, &mh, 0) > 0);
        ASSERT_TRUE(recv_msg(fd, NULL) == sizeof(ZMsgStatsReply) && ((ZMsgStatsReply *)in)->status == 0);
        close(p[0]);
        assert_no_reader(p[1]);

        /* after all that, the connection still answers, with real numbers */
        MSG(ZMsgStatsReq, ZMSG_STATS)->scope = ZSWAP_STATS_GLOBAL;
        uint32_t id = xmit(fd, 0, NULL, 0);
        const ZMsgStatsReply *sr = (const ZMsgStatsReply *)in;
        ASSERT_EQ(recv_msg(fd, NULL), sizeof(ZMsgStatsReply));
        ASSERT_TRUE(sr->hdr.type == ZMSG_STATS_REPLY && sr->hdr.id == id && sr->status == 0);
        ASSERT_TRUE(sr->stats.clients >= 1 && sr->stats.registered_bytes >= LEN);
        ASSERT_TRUE(sr->stats.stored_pages + sr->stats.same_pages >= legit_held);
        close(fd);
        check_alive("malformed packets");
}

/* ---- the handshake out of order ---- */

static void not_attached(int fd) {
        static const uint16_t ranges[] = { ZMSG_REGISTER, ZMSG_UNREGISTER, ZMSG_PAGEOUT };
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++)
                range_req(fd, ranges[i], (uint64_t)(uintptr_t)out & -P, P, -ENOTCONN);
        type_req(fd, ZMSG_FORK_PREPARE, -ENOTCONN);
        type_req(fd, ZMSG_MOVE_DONE, -EPROTO); /* out of the blue */
        type_req(fd, ZMSG_RELEASE_DONE, -EPROTO);
        type_req(fd, ZMSG_CHILD_ATTACH, -EPERM);
        range_req(fd, ZMSG_REGIONS, 0, 0, -ENOTCONN);
        type_req(fd, ZMSG_SET_GROUP, -ENOTCONN);
        u32_req(fd, ZMSG_STATS, ZSWAP_STATS_CLIENT, -ENOTCONN);
        u32_req(fd, ZMSG_STATS, 2, -EINVAL);
        u32_req(fd, ZMSG_STATS, UINT32_MAX, -EINVAL);
}

static void attach_req(int fd, uint64_t addr, uint64_t len, const int *fds, size_t nfds, int status) {
        ZMsgAttach *a = MSG(ZMsgAttach, ZMSG_ATTACH);
        a->staging_addr = addr;
        a->staging_len = len;
        req(fd, fds, nfds, status);
}

/* Returns a connection attached with a uffd of this process, staging at sa
 * (one lane). */
static int handshake_abuse(uint64_t sa) {
        int fd = raw_connect(), p[2][2];
        struct stat a, b;

        u32_req(fd, ZMSG_HELLO, 0, -EINVAL);
        u32_req(fd, ZMSG_HELLO, 4, -EINVAL);
        not_attached(fd);
        attach_req(fd, sa, LANE_BYTES, NULL, 0, -EPERM); /* no HELLO yet */
        msg(ZMSG_FORK_DONE, 0); /* no reply: the next one is for the next request */
        xmit(fd, 0, NULL, 0);
        u32_req(fd, ZMSG_STATS, UINT32_MAX, -EINVAL);

        /* HELLO hands over /dev/userfaultfd, once; this client asks for
         * its user's shared store too (checked below like its store) */
        MSG(ZMsgHello, ZMSG_HELLO)->role = ZROLE_CLIENT;
        ((ZMsgHello *)out)->features = ZHELLO_F_SHARED;
        int devfd = reply(fd, xmit(fd, 0, NULL, 0), 0);
        ASSERT_TRUE(devfd >= 0 && fstat(devfd, &a) == 0 && stat("/dev/userfaultfd", &b) == 0);
        ASSERT_TRUE(S_ISCHR(a.st_mode) && a.st_rdev == b.st_rdev);
        u32_req(fd, ZMSG_HELLO, ZROLE_CLIENT, -EALREADY);
        u32_req(fd, ZMSG_HELLO, ZROLE_CONTROL, -EALREADY);
        not_attached(fd);

        int uffd = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        ASSERT_TRUE(uffd >= 0);
        /* staging that is none: unaligned, empty, not whole lanes, too many
         * lanes, wrapping, above the index */
        const uint64_t bad_staging[][2] = { { sa + 1, LANE_BYTES }, { sa, 0 },          { sa, P },
                                            { sa, 9 * LANE_BYTES }, { -P, LANE_BYTES }, { (1ull << 48) - P, LANE_BYTES } };
        for (size_t i = 0; i < ELEMENTSOF(bad_staging); i++)
                attach_req(fd, bad_staging[i][0], bad_staging[i][1], &uffd, 1, -EINVAL);
        /* no fd, not a uffd, the device itself, three; the daemon closes all */
        ASSERT_OK(pipe2(p[0], O_CLOEXEC | O_NONBLOCK));
        ASSERT_OK(pipe2(p[1], O_CLOEXEC | O_NONBLOCK));
        attach_req(fd, sa, LANE_BYTES, NULL, 0, -EBADF);
        attach_req(fd, sa, LANE_BYTES, &p[0][0], 1, -EBADF);
        attach_req(fd, sa, LANE_BYTES, &devfd, 1, -EBADF);
        attach_req(fd, sa, LANE_BYTES, (int[]){ uffd, p[0][0], p[1][0] }, 3, -EBADF);
        /* a sync page (zsync.h) that is not a sealed memfd of a page at
         * least: a pipe, one the client could still shrink, one too small */
        int unsealed = memfd_create("hostile-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        int small = memfd_create("hostile-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ASSERT_TRUE(unsealed >= 0 && small >= 0);
        ASSERT_OK(ftruncate(unsealed, 4096));
        ASSERT_OK(ftruncate(small, 64));
        ASSERT_OK(fcntl(small, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW));
        attach_req(fd, sa, LANE_BYTES, (int[]){ uffd, p[1][0] }, 2, -EBADF);
        attach_req(fd, sa, LANE_BYTES, (int[]){ uffd, unsealed }, 2, -EBADF);
        attach_req(fd, sa, LANE_BYTES, (int[]){ uffd, small }, 2, -EBADF);
        close(unsealed);
        close(small);
        /* hugetlbfs: its page could be taken away under the daemon (where
         * the machine has huge pages at all) */
        int huge = memfd_create("hostile-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
        if (huge >= 0 && ftruncate(huge, 2 << 20) == 0 && fcntl(huge, F_ADD_SEALS, F_SEAL_SHRINK) == 0)
                attach_req(fd, sa, LANE_BYTES, (int[]){ uffd, huge }, 2, -EBADF);
        if (huge >= 0)
                close(huge);
        for (int i = 0; i < 2; i++) {
                close(p[i][0]);
                assert_no_reader(p[i][1]);
        }
        /* a uffd somebody already initialised is refused */
        int used = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        ASSERT_OK(ioctl(used, UFFDIO_API, &(struct uffdio_api){ .api = UFFD_API }));
        attach_req(fd, sa, LANE_BYTES, &used, 1, -EINVAL);
        close(used);

        /* the first uffd went through all that untouched; the reply
         * carries the client's store, which it can read and never write */
        ZMsgAttach *at = MSG(ZMsgAttach, ZMSG_ATTACH);
        at->staging_addr = sa;
        at->staging_len = LANE_BYTES;
        int store = reply(fd, xmit(fd, 0, &uffd, 1), 0), shared = TAKE_FD(second_fd);
        ASSERT_TRUE(store >= 0);
        /* and its user's shared store, which every process of the user
         * holds: read-only as well */
        ASSERT_TRUE(shared >= 0);
        int stores[2] = { store, shared };
        for (int i = 0; i < 2; i++) {
                ASSERT_EQ(fcntl(stores[i], F_GETFL) & O_ACCMODE, O_RDONLY);
                ASSERT_TRUE(mmap(NULL, P, PROT_READ | PROT_WRITE, MAP_SHARED, stores[i], 0) == MAP_FAILED);
                ASSERT_TRUE(fallocate(stores[i], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, P) < 0);
                ASSERT_TRUE(ftruncate(stores[i], 0) < 0);
                ASSERT_TRUE(fcntl(stores[i], F_ADD_SEALS, F_SEAL_WRITE) < 0);
                close(stores[i]);
        }
        attach_req(fd, sa, LANE_BYTES, &uffd, 1, -EPERM);
        agent_uffd = uffd; /* the daemon holds its own reference; this one moves pages */
        close(devfd);
        check_alive("handshake abuse");
        return fd;
}

/* ---- an attached connection: bad ranges, a bad agent ---- */

static void bad_ranges(int fd, uint64_t staging, uint64_t a) {
        static const uint16_t types[] = { ZMSG_REGISTER, ZMSG_UNREGISTER, ZMSG_PAGEOUT };
        const uint64_t top = 1ull << 48, bad[][2] = {
                { a + 1, P }, { a, P + 1 }, { a, 0 },           { 0, P },     { -P, 2 * P },
                { P, -P },    { top, P },   { top - P, 2 * P }, { -P, P },
        };
        for (size_t t = 0; t < ELEMENTSOF(types); t++)
                for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                        range_req(fd, types[t], bad[i][0], bad[i][1], -EINVAL);
        /* memory another connection registered (through its own uffd) */
        range_req(fd, ZMSG_REGISTER, a, LEN, -EEXIST);
        range_req(fd, ZMSG_REGISTER, a + LEN / 2, P, -EEXIST);
        range_req(fd, ZMSG_UNREGISTER, a, LEN, -EINVAL);
        range_req(fd, ZMSG_PAGEOUT, a, LEN, 0);
        ASSERT_EQ(((ZMsgReply *)in)->value, 0); /* none of it is ours */
        range_req(fd, ZMSG_REGISTER, staging, P, -EINVAL);
        /* memory named as libzswap's own (ZSWAP_OWN_NAME): its agent must
         * never fault on it, so no client may have it managed */
        uint8_t *own = test_map(2 * P);
        if (prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)own, P, (unsigned long)ZSWAP_OWN_NAME) == 0) {
                range_req(fd, ZMSG_REGISTER, (uintptr_t)own, 2 * P, -EINVAL);
                range_req(fd, ZMSG_REGISTER, (uintptr_t)own + P, P, 0); /* its unnamed neighbour */
                range_req(fd, ZMSG_UNREGISTER, (uintptr_t)own + P, P, 0);
        } else /* no CONFIG_ANON_VMA_NAME: nothing can be named */
                fprintf(stderr, "-- mappings cannot be named here (%s): [anon:zswap] refusal not tried\n",
                        strerror(errno));
        /* REGIONS: a length, an unaligned or impossible start; then a real
         * answer, in order, page-aligned */
        range_req(fd, ZMSG_REGIONS, 0, P, -EINVAL);
        range_req(fd, ZMSG_REGIONS, 1, 0, -EINVAL);
        range_req(fd, ZMSG_REGIONS, top, 0, -EINVAL);
        uint32_t id = range_send(fd, ZMSG_REGIONS, 0, 0);
        ASSERT_TRUE(recv_msg(fd, NULL) == (ssize_t)sizeof(ZMsgRegionsReply));
        const ZMsgRegionsReply *rr = (const ZMsgRegionsReply *)in;
        ASSERT_EQ(rr->hdr.type, ZMSG_REGIONS_REPLY);
        ASSERT_EQ(rr->hdr.id, id);
        ASSERT_EQ(rr->status, 0);
        ASSERT_TRUE(rr->count <= ZSWAP_REGIONS_PER_MSG);
        for (uint32_t i = 0; i < rr->count; i++)
                ASSERT_TRUE(page_aligned(rr->span[i].start) && page_aligned(rr->span[i].end) &&
                            rr->span[i].start < rr->span[i].end && (i == 0 || rr->span[i - 1].end <= rr->span[i].start));
        /* SET_GROUP: names without their NUL, with a byte a name has not,
         * empty; then a real one, and leaving it */
        ZMsgGroup *g = MSG(ZMsgGroup, ZMSG_SET_GROUP);
        g->limit = 64 << 20;
        memset(g->name, 'a', sizeof(g->name));
        req(fd, NULL, 0, -EINVAL);
        g = MSG(ZMsgGroup, ZMSG_SET_GROUP);
        g->limit = 64 << 20;
        strcpy(g->name, "../etc");
        req(fd, NULL, 0, -EINVAL);
        g = MSG(ZMsgGroup, ZMSG_SET_GROUP);
        g->limit = 64 << 20;
        req(fd, NULL, 0, -EINVAL);
        g = MSG(ZMsgGroup, ZMSG_SET_GROUP);
        g->limit = 64 << 20;
        g->unmanaged = UINT64_MAX; /* a lie: the budget floors at a quarter of the limit */
        strcpy(g->name, "run:1:2");
        req(fd, NULL, 0, 0);
        MSG(ZMsgGroup, ZMSG_SET_GROUP)->limit = 0;
        req(fd, NULL, 0, 0);
        /* answers to commands never sent: lane 0 is idle, lane 7 does not exist */
        for (uint32_t lane = 0; lane < 8; lane += 7) {
                MSG(ZMsgHeader, ZMSG_MOVE_DONE)->id = lane;
                req(fd, NULL, 0, -EPROTO);
                MSG(ZMsgHeader, ZMSG_RELEASE_DONE)->id = lane;
                req(fd, NULL, 0, -EPROTO);
        }
        check_alive("bad ranges");
}

static void expect_command(int fd, uint16_t type) {
        ASSERT_TRUE(recv_msg(fd, NULL) > 0);
        ASSERT_EQ(((ZMsgHeader *)in)->type, type);
        ASSERT_EQ(((ZMsgHeader *)in)->id, 0); /* lane 0 */
}

/* Answer the RELEASE of lane 0 as libzswap's agent does. */
static void agent_release(int fd, uint64_t staging) {
        struct uffdio_range r = { .start = staging, .len = LANE_BYTES };

        expect_command(fd, ZMSG_RELEASE);
        ASSERT_TRUE(((ZMsgRelease *)in)->slot0 == 0 && ((ZMsgRelease *)in)->nslots == ZSWAP_BATCH_MAX);
        ASSERT_OK(ioctl(agent_uffd, UFFDIO_UNREGISTER, &r));
        ASSERT_OK(madvise((void *)(uintptr_t)staging, LANE_BYTES, MADV_DONTNEED));
        ASSERT_OK(ioctl(agent_uffd, UFFDIO_REGISTER,
                        &(struct uffdio_register){ .range = r, .mode = UFFDIO_REGISTER_MODE_WP }));
        MSG(ZMsgRelease, ZMSG_RELEASE_DONE)->hdr.id = 0;
        xmit(fd, 0, NULL, 0);
}

static void move_done(int fd, uint32_t npages, bool all_moved) {
        ZMsgMoveDone *done = MSG(ZMsgMoveDone, ZMSG_MOVE_DONE);
        done->hdr.id = 0;
        done->npages = npages;
        if (all_moved)
                memset(done->moved, 0xff, sizeof(done->moved));
        xmit(fd, 0, NULL, 0);
}

static void bad_agent(int fd, uint8_t *mem, uint64_t staging) {
        const uint32_t npages = AGENT_PAGES;
        uint64_t addr = (uint64_t)(uintptr_t)mem, len = npages * P, hashes[AGENT_PAGES];

        fill_pages(mem, len, 99);
        hash_pages(mem, len, hashes);
        madvise((void *)(uintptr_t)staging, LANE_BYTES, MADV_NOHUGEPAGE);
        ASSERT_OK(ioctl(agent_uffd, UFFDIO_REGISTER,
                        &(struct uffdio_register){ .range = { .start = staging, .len = LANE_BYTES },
                                                   .mode = UFFDIO_REGISTER_MODE_WP }));
        range_req(fd, ZMSG_REGISTER, addr, len, 0);
        range_req(fd, ZMSG_REGISTER, addr, P, -EEXIST);

        /* the daemon asks us to move exactly our resident pages */
        uint32_t pageout = range_send(fd, ZMSG_PAGEOUT, addr, len);
        expect_command(fd, ZMSG_MOVE);
        const ZMsgMove *mv = (const ZMsgMove *)in;
        ASSERT_TRUE(mv->slot0 == 0 && mv->npages == npages && mv->nruns == 1);
        ASSERT_TRUE(mv->runs[0].addr == addr && mv->runs[0].npages == npages);
        /* a MOVE_DONE for the wrong number of pages is refused */
        ZMsgMoveDone *done = MSG(ZMsgMoveDone, ZMSG_MOVE_DONE);
        done->hdr.id = 0;
        done->npages = npages - 1;
        req(fd, NULL, 0, -EPROTO);
        /* "all moved" when nothing was: the daemon goes by what the slots
         * hold, finds them empty, and evicts nothing */
        move_done(fd, npages, true);
        agent_release(fd, staging);
        ASSERT_EQ(reply(fd, pageout, 0), -1);
        ASSERT_EQ(((ZMsgReply *)in)->value, 0);
        req(fd, NULL, 0, -EPROTO); /* the same RELEASE_DONE again */
        ASSERT_EQ(verify_pages(mem, len, hashes), 0);

        /* every page moved and "none moved" reported, as the kernel's own
         * UFFDIO_MOVE can report (EAGAIN after moving): the pages are in the
         * slots, and the daemon takes them from there rather than drop them */
        pageout = range_send(fd, ZMSG_PAGEOUT, addr, len);
        expect_command(fd, ZMSG_MOVE);
        struct uffdio_move m = { .dst = staging, .src = addr, .len = len };
        ASSERT_OK(ioctl(agent_uffd, UFFDIO_MOVE, &m));
        move_done(fd, npages, false);
        agent_release(fd, staging);
        ASSERT_EQ(reply(fd, pageout, 0), -1);
        ASSERT_EQ(((ZMsgReply *)in)->value, npages);
        ASSERT_EQ(verify_pages(mem, len, hashes), 0); /* faults, served from the pool */

        /* an agent that hangs up in the middle of a move */
        range_send(fd, ZMSG_PAGEOUT, addr, len);
        expect_command(fd, ZMSG_MOVE);
        close(fd);
        close(agent_uffd);
        check_alive("an agent hanging up mid-move");
        /* the daemon lets go of that memory: registering it again works */
        int r;
        WAIT_UNTIL((r = zswap_register(legit, mem, len)) != -EEXIST, TEST_WAIT_S, "the hung-up agent's memory is still registered");
        ASSERT_OK(r);
        ASSERT_OK(zswap_unregister(legit, mem, len));
        ASSERT_EQ(verify_pages(mem, len, hashes), 0);
}

/* ---- connections the daemon drops, or must not be confused by ---- */

/* Read replies until EOF. If the daemon closed with requests of ours
 * unread, ECONNRESET comes first, then what was queued. */
static int drain(int fd, uint16_t type, uint32_t first) {
        int got = 0;
        for (ssize_t n; (n = recv_msg(fd, NULL)) != 0;) {
                if (n == -ECONNRESET)
                        continue;
                ASSERT_TRUE(n > 0 && ((ZMsgHeader *)in)->type == type);
                if (type == ZMSG_REPLY)
                        ASSERT_EQ(((ZMsgReply *)in)->status, -EPROTO);
                else
                        ASSERT_EQ(((ZMsgHeader *)in)->id, first + (uint32_t)got);
                got++;
        }
        return got;
}

static void dropped(void) {
        /* PROTOCOL_ERRORS_MAX (64) answered, then the connection goes */
        int fd = raw_connect();
        for (int i = 0; i < 80 && zmsg_send(fd, "z", 1, NULL, 0) == 0; i++)
                ;
        ASSERT_EQ(drain(fd, ZMSG_REPLY, 0), 64);
        close(fd);
        check_alive("too many protocol errors");

        /* a peer that sends requests and never reads the replies */
        fd = raw_connect();
        u32_req(fd, ZMSG_HELLO, ZROLE_CONTROL, 0);
        ASSERT_OK(fd_set_nonblock(fd, true));
        uint32_t first = ids + 1;
        int sent = 0, r = 0;
        for (int spins = 0; sent < 20000 && spins < 2000 && (r == 0 || r == -EAGAIN);) {
                MSG(ZMsgStatsReq, ZMSG_STATS)->scope = ZSWAP_STATS_GLOBAL;
                r = zmsg_send(fd, out, sizeof(ZMsgStatsReq), NULL, 0);
                sent += r == 0;
                if (r == -EAGAIN && ++spins)
                        usleep(1000); /* the daemon is busy; the drop comes later */
        }
        /* the daemon shuts the connection for reading before it drains
         * and closes it: a send may fail before the close, so wait for EOF */
        ASSERT_OK(fd_set_nonblock(fd, false));
        int got = drain(fd, ZMSG_STATS_REPLY, first);
        fprintf(stderr, "never-reading peer: %d requests sent, %d replies queued before the drop\n", sent, got);
        ASSERT_TRUE(got < sent);
        close(fd);
        check_alive("a peer that never reads");

        /* a forked child writing to its parent's connection */
        fd = raw_connect();
        pid_t child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0) {
                MSG(ZMsgStatsReq, ZMSG_STATS)->scope = ZSWAP_STATS_GLOBAL;
                _exit(zmsg_send(fd, out, sizeof(ZMsgStatsReq), NULL, 0) == 0 ? 0 : 1);
        }
        int st;
        ASSERT_TRUE(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        reply(fd, ids + 1, -EPERM); /* the child's copy of ids counted one up */
        close(fd);

        int many[300];
        for (size_t i = 0; i < ELEMENTSOF(many); i++)
                many[i] = raw_connect();
        check_alive("300 idle connections");
        for (size_t i = 0; i < ELEMENTSOF(many); i++)
                close(many[i]);
}

/* ---- what a client may register ---- */

static void ownership(void) {
        struct zswap_stats before, after;
        char path[] = "/tmp/zswap-hostile-XXXXXX";
        int ffd = mkstemp(path);

        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &before));
        ASSERT_TRUE(ffd >= 0 && unlink(path) == 0 && ftruncate(ffd, 16 * P) == 0);
        uint8_t *m = test_map(6 * P), *mine = test_map(16 * P);
        uint8_t *f = mmap(NULL, 16 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, ffd, 0);
        uint8_t *sh = mmap(NULL, 16 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        uint8_t *ro = mmap(NULL, 16 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(f != MAP_FAILED && sh != MAP_FAILED && ro != MAP_FAILED);
        ASSERT_OK(munmap(m + 2 * P, 2 * P));
        f[0] = 1;
        /* not mapped, partly mapped (across, into and out of the hole),
         * file-backed (even private), shared, read-only */
        const struct { uint8_t *a; size_t len; } foreign[] = {
                { m + 2 * P, P }, { m, 6 * P },   { m + P, 2 * P }, { m + 3 * P, 2 * P },
                { f, 16 * P },    { sh, 16 * P }, { ro, 16 * P },
        };
        for (size_t i = 0; i < ELEMENTSOF(foreign); i++)
                ASSERT_ERROR(zswap_register(legit, foreign[i].a, foreign[i].len), EINVAL);
        /* the same range twice, or overlapping it */
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
        munmap(m, 6 * P);
        munmap(f, 16 * P);
        munmap(sh, 16 * P);
        munmap(ro, 16 * P);
        munmap(mine, 16 * P);
        close(ffd);
        check_alive("registering memory that is not private anonymous");
}

int main(void) {
        uint64_t *hashes = malloc(LEN / P * sizeof(uint64_t));
        struct zswap_stats s;

        signal(SIGPIPE, SIG_IGN);
        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        int fds_at_start = daemon_fds(); /* once the start-up probe client is gone */
        ASSERT_TRUE(fds_at_start > 0);

        legit = td_connect(&d);
        uint8_t *buf = test_map(LEN), *staging = test_map(2 * LANE_BYTES), *mem = test_map(AGENT_PAGES * P);
        fill_pages(buf, LEN, 7);
        hash_pages(buf, LEN, hashes);
        ASSERT_OK(zswap_register(legit, buf, LEN));
        int n = zswap_pageout(legit, buf, LEN);
        ASSERT_TRUE(n > (int)(LEN / P) * 9 / 10);
        legit_held = (uint64_t)n;
        check_alive("the legitimate client's pageout");

        malformed();
        int fd = handshake_abuse((uint64_t)(uintptr_t)staging);
        bad_ranges(fd, (uint64_t)(uintptr_t)staging, (uint64_t)(uintptr_t)buf);
        bad_agent(fd, mem, (uint64_t)(uintptr_t)staging);
        dropped();
        ownership();

        /* the legitimate client's data, byte for byte */
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);
        ASSERT_OK(zswap_get_stats(legit, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);
        ASSERT_TRUE(s.faults + s.prefetches >= legit_held); /* fault-around installs some ahead */
        ASSERT_OK(zswap_unregister(legit, buf, LEN));
        zswap_disconnect(legit);

        /* every connection, uffd and fd the hostile ones brought is gone */
        wait_fds_back(fds_at_start);
        td_stop(&d);
        munmap(staging, 2 * LANE_BYTES);
        munmap(mem, AGENT_PAGES * P);
        munmap(buf, LEN);
        free(hashes);
        fprintf(stderr, "hostile: ok\n");
        return 0;
}
