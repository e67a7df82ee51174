/*
 * test-quotas.c: every quota holds for pages that come by ADOPT or by
 * fork, not only for those that come by REGISTER and eviction
 * (daemon/manager/adopt.c, daemon/manager/users.c, fork_cb() in daemon/fault.c).
 *
 * Each case runs as an unprivileged uid of its own (numeric, named by
 * number in the test's zswapd.conf), as test-users does. The daemon runs
 * with --pool-max 32M.
 *
 *  - forged store, max_pool: a raw-protocol client builds a store of its
 *    own (a memfd, as the daemon's are) whose 12288 entries (48 MiB) all
 *    name one 4 KiB object, registers the range on a uffd of its own and
 *    hands both over with ZMSG_ADOPT, as a client whose daemon died does.
 *    Its user has max_pool 1M: the daemon's pool must hold at most that
 *    for it (plus 16 pages), every page must read back as the object
 *    (those that did not fit are installed in it, resident), and another
 *    user's pageout must still evict.
 *  - forged store, pool bound: the same for a user without max_pool: the
 *    pool stays under --pool-max (plus a chunk per size class in use).
 *  - forged ranges: a store naming more ranges than the user's
 *    max_regions, more bytes than its max_registered, or a shared
 *    mapping is refused (EDQUOT, EDQUOT, EINVAL) and nothing is
 *    registered; a store within them is adopted.
 *  - fork: a libzswap client of a user with max_pool 1M pages 2 MiB of
 *    heap data out and forks four children, each of which the daemon
 *    gives its own copies: once all have attached, the pool holds at most
 *    max_pool (plus 16 pages) for the user, and every child and the parent
 *    read every page back intact.
 *  - fork, orphans: the same with a child that never attaches (forked
 *    without libzswap's handlers) and forks four children of its own:
 *    their copies are paid from the same share.
 *  - holes: a forged store whose directory names 65536 leaves it never
 *    wrote (holes of its memfd), and whose range names 8192 entries of
 *    pool it never wrote either. A read of a hole of a memfd through a
 *    mapping allocates a page in that file (charged to the reader), so
 *    the daemon's reads would fill the forger's memfd with 288 MiB of
 *    zeros, memory the forger holds for as long as it keeps the file,
 *    at the cost of 8 bytes a leaf or entry. The memfd's allocated size
 *    must grow by at most 16 MiB across the ADOPT.
 */
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "pentry.h"
#include "protocol.h"
#include "store.h"
#include "uffd-compat.h"
#include "util.h"

#define P ((uint64_t)ZSWAP_PAGE_SIZE)
#define LANE_BYTES ((uint64_t)ZSWAP_BATCH_MAX * P)
#define MiB (1ull << 20)
#define POOL_MAX (32 * MiB)
#define MAX_POOL MiB
#define SLACK (16 * P) /* pages a worker or a fork had taken when a tick handed out the share anew */

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN true
#else
#define UNDER_TSAN false
#endif

#define U_FORGE 61001  /* max_pool 1M */
#define U_FORGE2 61002 /* no max_pool: the pool bound alone */
#define U_RANGES 61003 /* max_regions 4, max_registered 8M */
#define U_HONEST 61004
#define U_FORK 61005   /* max_pool 1M */

static TestDaemon d;
static char conf_path[128];

static void write_conf(void) {
        FILE *f = fopen(conf_path, "we");
        ASSERT_TRUE(f != NULL);
        fprintf(f,
                "[users]\n"
                "allow = %d %d %d %d %d\n"
                "userfaultfd_device = yes\n" /* the forgers make their own uffds */
                "max_regions = 64\n"
                "[user:%d]\n"
                "max_pool = 1M\n"
                "[user:%d]\n"
                "max_regions = 4\n"
                "max_registered = 8M\n"
                "[user:%d]\n"
                "max_pool = 1M\n",
                U_FORGE, U_FORGE2, U_RANGES, U_HONEST, U_FORK, U_FORGE, U_RANGES, U_FORK);
        ASSERT_OK(fclose(f));
}

/* Run fn(arg) as uid in a child; its pid (as_user_wait() for the status). */
static pid_t as_user_start(uid_t uid, int (*fn)(void *), void *arg) {
        pid_t pid = td_fork_as(uid, 0);
        if (pid == 0)
                _exit(fn(arg));
        return pid;
}

static int as_user_wait(pid_t pid) {
        int st;
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int as_user(uid_t uid, int (*fn)(void *), void *arg) {
        return as_user_wait(as_user_start(uid, fn, arg));
}

/* ---- a raw-protocol client ---- */

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = { .tv_sec = 60 };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d.sock);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
                return -errno;
        return fd;
}

/* Send m (fds with it) and read replies until the one to it: its status,
 * its first fd in *rfd (closed if rfd is NULL). Other messages (commands
 * to the agent) are read and ignored. */
static int request(int fd, void *m, size_t len, const int *fds, size_t nfds, int *rfd) {
        static _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 64];
        static uint32_t ids = 100;
        ZMsgHeader *h = m;
        h->id = ++ids;
        int r = zmsg_send(fd, m, len, fds, nfds);
        if (r < 0)
                return r;
        for (;;) {
                int got[4];
                size_t ngot = ELEMENTSOF(got);
                ssize_t n = zmsg_recv(fd, in, sizeof(in), got, &ngot, NULL);
                if (n <= 0)
                        return n < 0 ? (int)n : -ECONNRESET;
                const ZMsgReply *rep = (const ZMsgReply *)in;
                bool mine = rep->hdr.type == ZMSG_REPLY && rep->hdr.id == h->id;
                for (size_t i = 0; i < ngot; i++)
                        if (mine && i == 0 && rfd)
                                *rfd = got[0];
                        else
                                safe_close(got[i]);
                if (mine)
                        return rep->status;
        }
}

/* Connect, HELLO as a client, make a uffd of our own and initialise it as
 * the dead daemon would have: the connection, *uffd. */
static int raw_client(int *uffd) {
        int fd = raw_connect(), devfd = -1;
        if (fd < 0)
                return fd;
        ZMsgHello h = { .role = ZROLE_CLIENT };
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        int r = request(fd, &h, sizeof(h), NULL, 0, &devfd);
        if (r < 0 || devfd < 0)
                return r < 0 ? r : -EPROTO;
        *uffd = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        close(devfd);
        if (*uffd < 0 || ioctl(*uffd, UFFDIO_API, &(struct uffdio_api){ .api = UFFD_API }) < 0)
                return -errno;
        return fd;
}

static int uffd_register(int uffd, void *addr, uint64_t len) {
        struct uffdio_register rg = { .range = { .start = (uintptr_t)addr, .len = len },
                                      .mode = UFFDIO_REGISTER_MODE_MISSING };
        return ioctl(uffd, UFFDIO_REGISTER, &rg) < 0 ? -errno : 0;
}

/* len bytes of private anonymous memory at a 2 MiB boundary (a leaf of
 * the store covers 2 MiB) */
static uint8_t *map_aligned(uint64_t len) {
        const uint64_t zone = (uint64_t)STORE_LEAF_ENTRIES * P;
        uint8_t *m = mmap(NULL, len + zone, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
                return NULL;
        return (uint8_t *)ALIGN_TO((uintptr_t)m, zone);
}

/* A store of our own, as a client can make one: ranges, and for the first
 * npages pages of the first range an entry naming obj (one 4 KiB object,
 * stored raw). Its fd, the mapping in *map. */
static int forge_store(const StoreRange *ranges, size_t n, uint64_t npages, const uint8_t *obj, uint8_t **map) {
        int sfd = store_create(CODEC_LZ4, 0, 0x5eed, map);
        if (sfd < 0)
                return sfd;
        StoreRange *t = store_ranges_begin(*map);
        memcpy(t, ranges, n * sizeof(*t));
        store_ranges_commit(*map, n);
        if (npages == 0)
                return sfd;
        /* class 256 (4096 bytes) for chunk 1; the object at its slot 0 */
        const uint32_t id = 1, handle = id << (STORE_SPAN_SHIFT - STORE_UNIT_SHIFT);
        atomic_store(&store_chunk_class(*map)[id], STORE_NR_CLASSES);
        memcpy(store_pool(*map) + ((uint64_t)handle << STORE_UNIT_SHIFT), obj, P);
        uint32_t leaves = (uint32_t)((npages + STORE_LEAF_ENTRIES - 1) / STORE_LEAF_ENTRIES);
        for (uint32_t l = 0; l < leaves; l++) {
                uint64_t zone = ranges[0].start + (uint64_t)l * STORE_LEAF_ENTRIES * P;
                atomic_store(&store_dir(*map)[l], zone | STORE_DIR_USED);
                for (uint32_t j = 0; j < STORE_LEAF_ENTRIES && (uint64_t)l * STORE_LEAF_ENTRIES + j < npages; j++)
                        atomic_store(&store_leaf(*map, l)[j], pe_make_stored(handle, (uint32_t)P));
        }
        atomic_store(&store_super(*map)->leaves, leaves);
        return sfd;
}

/* ZMSG_ADOPT of our uffd and store, staging at staging: the status. */
static int adopt(int fd, int uffd, int sfd, const uint8_t *staging) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)staging, .staging_len = LANE_BYTES };
        int store = -1;
        zmsg_init(&a.hdr, ZMSG_ADOPT, 0, sizeof(a));
        int r = request(fd, &a, sizeof(a), (int[]){ uffd, sfd }, 2, &store);
        safe_close(store);
        return r;
}

/* ---- forged stores ---- */

typedef struct Forge {
        uint64_t npages;
        int ready[2], go[2]; /* pipes: the forger says it adopted and checked; the test lets it go */
} Forge;

static void fill_obj(uint8_t *obj) {
        for (size_t i = 0; i < P; i++)
                obj[i] = (uint8_t)(i * 7 + i / 13);
}

/* Hand back a store whose entries all name one object; once the test has
 * looked at the pool (go[]), read every page back. */
static int forger(void *arg) {
        Forge *f = arg;
        uint8_t obj[ZSWAP_PAGE_SIZE], *map = NULL;
        int uffd = -1;
        char x = 0;

        close(f->ready[0]);
        close(f->go[1]);
        fill_obj(obj);
        int fd = raw_client(&uffd);
        if (fd < 0)
                return 10;
        uint8_t *staging = map_aligned(LANE_BYTES), *buf = map_aligned(f->npages * P);
        if (!staging || !buf || uffd_register(uffd, buf, f->npages * P) < 0)
                return 11;
        StoreRange r = { (uintptr_t)buf, (uintptr_t)buf + f->npages * P };
        int sfd = forge_store(&r, 1, f->npages, obj, &map);
        if (sfd < 0)
                return 12;
        int st = adopt(fd, uffd, sfd, staging);
        if (st < 0) {
                fprintf(stderr, "uid %u: ADOPT: %s\n", getuid(), strerror(-st));
                return 13;
        }
        fprintf(stderr, "uid %u: forged store of %llu pages naming one object adopted\n", getuid(),
                (unsigned long long)f->npages);
        if (write(f->ready[1], "r", 1) != 1 || read(f->go[0], &x, 1) != 1)
                return 15;
        uint64_t bad = 0;
        for (uint64_t i = 0; i < f->npages; i++)
                bad += memcmp(buf + i * P, obj, P) != 0;
        if (bad) {
                fprintf(stderr, "uid %u: %llu of %llu pages lost\n", getuid(), (unsigned long long)bad,
                        (unsigned long long)f->npages);
                return 14;
        }
        return 0;
}

/* ---- holes ---- */

#define HOLE_LEAVES 65536u
#define HOLE_ENTRIES 8192u

static uint64_t fd_allocated(int fd) {
        struct stat st;
        return fstat(fd, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

static int holes_forger(void *arg) {
        uint8_t *map = NULL;
        int uffd = -1;

        (void)arg;
        int fd = raw_client(&uffd);
        if (fd < 0)
                return 10;
        uint8_t *staging = map_aligned(LANE_BYTES), *buf = map_aligned((uint64_t)HOLE_ENTRIES * P);
        if (!staging || !buf || uffd_register(uffd, buf, (uint64_t)HOLE_ENTRIES * P) < 0)
                return 11;
        uint64_t zone = (uint64_t)STORE_LEAF_ENTRIES * P, base = (uintptr_t)buf;
        StoreRange r = { base, base + (uint64_t)HOLE_ENTRIES * P };
        int sfd = forge_store(&r, 1, 0, NULL, &map);
        if (sfd < 0)
                return 12;
        /* leaves 0..15 hold entries of the range, each naming a 4 KiB
         * object in a chunk of its own, the class table written; the
         * others name zones far away, and nothing else is written */
        for (uint32_t l = 0; l < HOLE_LEAVES; l++)
                atomic_store(&store_dir(map)[l], (l < HOLE_ENTRIES / STORE_LEAF_ENTRIES ? base + l * zone
                                                                                        : (uint64_t)(l + 64) * zone) |
                                                         STORE_DIR_USED);
        for (uint32_t i = 0; i < HOLE_ENTRIES; i++) {
                uint32_t id = 1 + i, handle = id << (STORE_SPAN_SHIFT - STORE_UNIT_SHIFT);
                atomic_store(&store_chunk_class(map)[id], STORE_NR_CLASSES);
                atomic_store(&store_leaf(map, i / STORE_LEAF_ENTRIES)[i % STORE_LEAF_ENTRIES],
                             pe_make_stored(handle, (uint32_t)P));
        }
        atomic_store(&store_super(map)->leaves, HOLE_LEAVES);
        uint64_t before = fd_allocated(sfd);
        int st = adopt(fd, uffd, sfd, staging);
        uint64_t after = fd_allocated(sfd);
        fprintf(stderr, "holes: ADOPT %d (%s); the forged store's memfd: %llu KiB allocated before, %llu KiB after\n",
                st, st < 0 ? strerror(-st) : "ok", (unsigned long long)(before >> 10), (unsigned long long)(after >> 10));
        return after > before + 16 * MiB ? 20 : 0;
}

static void wait_no_clients(const char *after) {
        ZMsgStatusReply st;
        for (int i = 0; i < TEST_WAIT_S * 100; i++) {
                td_status(&d, &st);
                if (st.stats.clients == 0 && st.stats.compressed_bytes == 0)
                        return;
                usleep(10000);
        }
        test_fail("after %s: %llu clients and %llu compressed bytes left after %d s", after,
                  (unsigned long long)st.stats.clients, (unsigned long long)st.stats.compressed_bytes, TEST_WAIT_S);
}

/* 4 MiB of heap pages evicted and read back: at least some stored */
static int honest_pageout(void *arg) {
        size_t len = 4 * MiB;
        uint64_t *hashes = calloc(len / P, sizeof(uint64_t));
        struct zswap_client *c;
        struct zswap_stats s;

        if (!hashes || zswap_connect(d.sock, &c) < 0)
                return 30;
        uint8_t *buf = td_region(c, len, 5, hashes);
        /* until some are out: a move revoked while the agent was
         * descheduled leaves its pages in place */
        long n = td_pageout_want(c, buf, len, 1);
        if (zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s) < 0)
                return 31;
        fprintf(stderr, "honest uid %u: pageout evicted %ld pages, %llu stored\n", getuid(), n,
                (unsigned long long)s.stored_pages);
        if (n <= 0 || s.stored_pages == 0)
                return 32;
        if (verify_pages(buf, len, hashes) != 0)
                return 33;
        zswap_disconnect(c);
        free(hashes);
        return 0;
}

/* A forger of uid with npages: checked against the bound while it holds
 * them; with honest, another user's pageout meanwhile. */
static void forged_store(uid_t uid, uint64_t npages, uint64_t bound, const char *what, bool honest) {
        Forge f = { .npages = npages };
        ZMsgStatusReply st;
        char x;

        ASSERT_OK(pipe2(f.ready, O_CLOEXEC));
        ASSERT_OK(pipe2(f.go, O_CLOEXEC));
        pid_t pid = as_user_start(uid, forger, &f);
        close(f.ready[1]);
        close(f.go[0]);
        if (read(f.ready[0], &x, 1) != 1)
                test_fail("%s: the forger exited with %d before it was done", what, as_user_wait(pid));
        td_status(&d, &st);
        fprintf(stderr, "%s: pool %llu bytes, %llu compressed bytes in %llu pages (bound %llu)\n", what,
                (unsigned long long)st.stats.pool_bytes, (unsigned long long)st.stats.compressed_bytes,
                (unsigned long long)st.stats.stored_pages, (unsigned long long)bound);
        if (st.stats.compressed_bytes > bound)
                test_fail("%s: %llu compressed bytes held, over the bound %llu", what,
                          (unsigned long long)st.stats.compressed_bytes, (unsigned long long)bound);
        if (honest)
                ASSERT_EQ(as_user(U_HONEST, honest_pageout, NULL), 0);
        ASSERT_EQ(write(f.go[1], "g", 1), 1);
        ASSERT_EQ(as_user_wait(pid), 0);
        close(f.ready[0]);
        close(f.go[1]);
        wait_no_clients(what);
}

/* ---- forged ranges ---- */

typedef struct RangeCase {
        unsigned n;     /* ranges */
        uint64_t len;   /* bytes each */
        bool shared;    /* a MAP_SHARED mapping */
        int want;       /* ADOPT's status */
} RangeCase;

static int forge_ranges(void *arg) {
        const RangeCase *rc = arg;
        StoreRange r[16];
        uint8_t *map = NULL;
        int uffd = -1;

        int fd = raw_client(&uffd);
        if (fd < 0)
                return 40;
        uint8_t *staging = map_aligned(LANE_BYTES);
        /* n ranges a page apart in one mapping, registered whole */
        uint64_t span = rc->n * (rc->len + P);
        uint8_t *buf = rc->shared ? mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                                  : map_aligned(span);
        if (!staging || !buf || buf == MAP_FAILED || uffd_register(uffd, buf, span) < 0)
                return 41;
        for (unsigned i = 0; i < rc->n; i++)
                r[i] = (StoreRange){ (uintptr_t)buf + i * (rc->len + P), (uintptr_t)buf + i * (rc->len + P) + rc->len };
        int sfd = forge_store(r, rc->n, 0, NULL, &map);
        if (sfd < 0)
                return 42;
        int st = adopt(fd, uffd, sfd, staging);
        fprintf(stderr, "uid %u: %u %sranges of %llu KiB: ADOPT says %d (%s)\n", getuid(), rc->n,
                rc->shared ? "shared " : "", (unsigned long long)rc->len >> 10, st, st < 0 ? strerror(-st) : "adopted");
        if (st != rc->want && !(rc->want == 0 && st >= 0))
                return 43;
        /* registered now, with the connection open: what the daemon counts */
        ZMsgStatusReply s;
        td_status(&d, &s);
        uint64_t want = st >= 0 ? rc->n * rc->len : 0;
        if (s.stats.registered_bytes != want) {
                fprintf(stderr, "registered %llu bytes, expected %llu\n", (unsigned long long)s.stats.registered_bytes,
                        (unsigned long long)want);
                return 44;
        }
        close(fd);
        return 0;
}

/* ---- fork ---- */

#define FORK_CHILDREN 4
#define FORK_BYTES (2 * MiB)

typedef struct ForkCase {
        int ready[2], go[2];
} ForkCase;

static int fork_parent(void *arg) {
        ForkCase *fc = arg;
        uint64_t *hashes = calloc(FORK_BYTES / P, sizeof(uint64_t));
        struct zswap_client *c;
        struct zswap_stats s;
        int up[2], down[2];
        pid_t kids[FORK_CHILDREN];
        char x;

        close(fc->ready[0]);
        close(fc->go[1]);
        if (!hashes || zswap_connect(d.sock, &c) < 0 || pipe2(up, O_CLOEXEC) < 0 || pipe2(down, O_CLOEXEC) < 0)
                return 50;
        uint8_t *buf = td_region(c, FORK_BYTES, 21, hashes);
        long n = td_pageout_want(c, buf, FORK_BYTES, 1); /* as in honest_pageout() */
        if (n <= 0 || zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s) < 0)
                return 51;
        fprintf(stderr, "fork parent: %ld pages evicted, %llu stored in %llu compressed bytes\n", n,
                (unsigned long long)s.stored_pages, (unsigned long long)s.compressed_bytes);
        for (int i = 0; i < FORK_CHILDREN; i++) {
                kids[i] = fork();
                if (kids[i] < 0)
                        return 52;
                if (kids[i] == 0) {
                        close(up[0]);
                        close(down[1]);
                        /* attached (libzswap's atfork handler waits for the
                         * daemon to have copied our pages): say so, wait,
                         * then read every page */
                        if (write(up[1], "a", 1) != 1 || read(down[0], &x, 1) != 1)
                                _exit(60);
                        if (verify_pages(buf, FORK_BYTES, hashes) != 0)
                                _exit(61);
                        _exit(0);
                }
        }
        for (int i = 0; i < FORK_CHILDREN; i++)
                if (read(up[0], &x, 1) != 1)
                        return 53;
        /* the test looks at the pool now */
        if (write(fc->ready[1], "r", 1) != 1 || read(fc->go[0], &x, 1) != 1)
                return 54;
        for (int i = 0; i < FORK_CHILDREN; i++)
                if (write(down[1], "g", 1) != 1)
                        return 55;
        int bad = 0;
        for (int i = 0; i < FORK_CHILDREN; i++) {
                int st;
                if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "fork child %d: status %#x\n", i, st);
                        bad++;
                }
        }
        if (bad)
                return 56;
        if (verify_pages(buf, FORK_BYTES, hashes) != 0)
                return 57;
        zswap_disconnect(c);
        free(hashes);
        return 0;
}

/* fork() without libzswap's atfork handlers: the child never attaches
 * (the daemon keeps it as an orphan) and must do nothing that needs a
 * lock another thread of ours may have held (no malloc, no stdio) */
static pid_t raw_fork(void) {
        return (pid_t)syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
}

/* In an orphan: read a page (its fault is served once the daemon has
 * built us: a fork before that would leave the daemon no way to install
 * the pages it has no room for), fork four grandchildren, each of which
 * reads a page likewise, says so on up, waits on down and reads every
 * page; wait for them. */
static int orphan_main(uint8_t *buf, const uint64_t *hashes, int up, int down) {
        pid_t kids[FORK_CHILDREN];
        volatile uint8_t first = buf[0];
        char x;

        (void)first;
        for (int i = 0; i < FORK_CHILDREN; i++) {
                kids[i] = raw_fork();
                if (kids[i] < 0)
                        return 70;
                if (kids[i] == 0) {
                        volatile uint8_t mine = buf[0];
                        (void)mine;
                        if (write(up, "a", 1) != 1 || read(down, &x, 1) != 1)
                                _exit(71);
                        _exit(verify_pages(buf, FORK_BYTES, hashes) != 0 ? 72 : 0);
                }
        }
        for (int i = 0; i < FORK_CHILDREN; i++) {
                int st;
                if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        return 73;
        }
        return verify_pages(buf, FORK_BYTES, hashes) != 0 ? 74 : 0;
}

/* A client whose child never attaches and forks grandchildren: their
 * copies are paid from the orphan's share of the user's max_pool. */
static int orphan_parent(void *arg) {
        ForkCase *fc = arg;
        uint64_t *hashes = calloc(FORK_BYTES / P, sizeof(uint64_t));
        struct zswap_client *c;
        int up[2], down[2];
        char x;

        close(fc->ready[0]);
        close(fc->go[1]);
        if (!hashes || zswap_connect(d.sock, &c) < 0 || pipe2(up, O_CLOEXEC) < 0 || pipe2(down, O_CLOEXEC) < 0)
                return 80;
        uint8_t *buf = td_region(c, FORK_BYTES, 23, hashes);
        if (td_pageout_want(c, buf, FORK_BYTES, 1) <= 0)
                return 81;
        pid_t orphan = raw_fork();
        if (orphan < 0)
                return 82;
        if (orphan == 0) {
                close(up[0]);
                close(down[1]);
                _exit(orphan_main(buf, hashes, up[1], down[0]));
        }
        close(up[1]);
        close(down[0]);
        for (int i = 0; i < FORK_CHILDREN; i++)
                if (read(up[0], &x, 1) != 1)
                        return 83;
        if (write(fc->ready[1], "r", 1) != 1 || read(fc->go[0], &x, 1) != 1)
                return 84;
        for (int i = 0; i < FORK_CHILDREN; i++)
                if (write(down[1], "g", 1) != 1)
                        return 85;
        int st;
        if (waitpid(orphan, &st, 0) != orphan || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "orphan: status %#x\n", st);
                return 86;
        }
        if (verify_pages(buf, FORK_BYTES, hashes) != 0)
                return 87;
        zswap_disconnect(c);
        free(hashes);
        return 0;
}

static void fork_quota(int (*parent)(void *), const char *what) {
        ForkCase fc;
        ZMsgStatusReply st;
        char x;

        ASSERT_OK(pipe2(fc.ready, O_CLOEXEC));
        ASSERT_OK(pipe2(fc.go, O_CLOEXEC));
        pid_t pid = as_user_start(U_FORK, parent, &fc);
        close(fc.ready[1]);
        close(fc.go[0]);
        if (read(fc.ready[0], &x, 1) != 1)
                test_fail("%s: the parent exited with %d before its children were made", what, as_user_wait(pid));
        td_status(&d, &st);
        fprintf(stderr, "%s, max_pool 1M: %llu compressed bytes in %llu pages\n", what,
                (unsigned long long)st.stats.compressed_bytes, (unsigned long long)st.stats.stored_pages);
        if (st.stats.compressed_bytes > MAX_POOL + SLACK)
                test_fail("%s: %llu compressed bytes held for a user with max_pool %llu", what,
                          (unsigned long long)st.stats.compressed_bytes, (unsigned long long)MAX_POOL);
        ASSERT_EQ(write(fc.go[1], "g", 1), 1);
        ASSERT_EQ(as_user_wait(pid), 0);
        close(fc.ready[0]);
        close(fc.go[1]);
        wait_no_clients(what);
}

/* argv[1], if given, runs one case: pool, bound, ranges, holes, fork or orphans */
static bool want_case(int argc, char **argv, const char *name) {
        return argc < 2 || strcmp(argv[1], name) == 0;
}

int main(int argc, char **argv) {
        char args[256];

        snprintf(conf_path, sizeof(conf_path), "/tmp/test-quotas-%d.conf", (int)getpid());
        write_conf();
        snprintf(args, sizeof(args), "--config %s --pool-max %llu", conf_path, (unsigned long long)POOL_MAX);
        td_start_logged(&d, args);

        /* 48 MiB named by a store of one object, against max_pool 1M and
         * then against the 32 MiB pool bound (and a chunk per class) */
        if (want_case(argc, argv, "pool"))
                forged_store(U_FORGE, 12288, MAX_POOL + SLACK, "forged store, max_pool 1M", true);
        if (want_case(argc, argv, "bound"))
                forged_store(U_FORGE2, 12288, POOL_MAX + 64 * 1024, "forged store, pool bound 32M", false);
        /* every page past the bounds was installed in the forger, and said */
        if (want_case(argc, argv, "pool") || want_case(argc, argv, "bound"))
                ASSERT_TRUE(td_log_has(&d, "adopted pages installed in the client, resident"));

        /* ranges: max_regions 4, max_registered 8M, shared memory */
        RangeCase cases[] = {
                { 8, 64 * 1024, false, -EDQUOT },
                { 2, 8 * MiB, false, -EDQUOT },
                { 1, MiB, true, -EINVAL },
                { 4, MiB, false, 0 },
        };
        for (size_t i = 0; want_case(argc, argv, "ranges") && i < ELEMENTSOF(cases); i++) {
                int r = as_user(U_RANGES, forge_ranges, &cases[i]);
                if (r != 0)
                        test_fail("forged ranges, case %zu: exit %d", i, r);
                wait_no_clients("forged ranges");
        }

        if (want_case(argc, argv, "holes")) {
                int r = as_user(U_FORGE2, holes_forger, NULL);
                if (r != 0)
                        test_fail("holes: exit %d", r);
                wait_no_clients("holes");
        }

        if (UNDER_TSAN) {
                /* the children start their agent thread after a multi-threaded
                 * fork, which ThreadSanitizer's runtime cannot follow */
                fprintf(stderr, "fork: skipped under ThreadSanitizer\n");
        } else {
                if (want_case(argc, argv, "fork")) {
                        fork_quota(fork_parent, "fork: the parent and 4 children");
                        ASSERT_TRUE(td_log_has(&d, "installed in a forked child, resident"));
                }
                if (want_case(argc, argv, "orphans"))
                        fork_quota(orphan_parent, "fork: the parent, a child that never attaches and its 4 children");
        }
        td_stop(&d);
        unlink(conf_path);
        unlink(d.log);
        return 0;
}
