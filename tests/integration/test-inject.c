/*
 * test-inject: each failure the daemon handles, made to happen.
 *
 * A real daemon runs with ZSWAPD_INJECT in its environment (common/inject.h)
 * and one family of sites armed at a rate that fires hundreds of times: the
 * pool refusing objects, the daemon's allocations failing, the uffd ioctls
 * answering the errors the kernel gives. Under it a client registers,
 * pages out, reads back, writes, forks, unregisters; every page must read
 * back as it was written, the daemon must still serve a fresh client and
 * exit cleanly, and its exit line must show the site fired (so the test
 * cannot silently test nothing). ESRCH, ENOENT and EEXIST from UFFDIO_COPY
 * mean the mapping or the process is gone, or the page is present, and the
 * daemon then drops what it held by design; injected on a live mapping they
 * can only check that nothing hangs or crashes and that no more pages go
 * than were injected.
 *
 * TEST_INJECT_ROUNDS (6), TEST_INJECT_RANGES (300) and TEST_INJECT_PAGES
 * (2048) size each case's workload: the valgrind run, where every call is a hundred times
 * slower, uses fewer, still enough for every site to fire.
 *
 * Then the clients that do not play along: one that never reads its socket,
 * one whose agent never answers MOVE. Neither may stall another client,
 * and the second keeps its pages. And a pool far smaller than the data:
 * nothing is lost, what does not fit stays resident.
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "uffd-compat.h"

#define NPAGES 2048 /* 8 MiB of heap pages */
#define ZPAGES 256  /* never written: read faults get the zero page */
#define P ZSWAP_PAGE_SIZE
#define LANE_BYTES ((uint64_t)ZSWAP_BATCH_MAX * P)

static TestDaemon d;

/* Calls that an injected failure may refuse are asked again. */
static struct zswap_client *connect_retry(void) {
        struct zswap_client *c = NULL;
        int r = 0;
        for (int i = 0; i < 2000; i++, usleep(1000))
                if ((r = zswap_connect(d.sock, &c)) == 0)
                        return c;
        test_fail("cannot connect: %s", strerror(-r));
}

static void register_retry(struct zswap_client *c, void *p, size_t len) {
        int r = 0;
        for (int i = 0; i < 2000; i++, usleep(500))
                if ((r = zswap_register(c, p, len)) == 0)
                        return;
        test_fail("cannot register: %s", strerror(-r));
}

static void unregister_retry(struct zswap_client *c, void *p, size_t len) {
        int r = 0;
        for (int i = 0; i < 2000; i++, usleep(500))
                if ((r = zswap_unregister(c, p, len)) == 0)
                        return;
        test_fail("cannot unregister: %s", strerror(-r));
}

/* Pages evicted; a refused pageout (out of memory) counts 0. */
static long pageout(struct zswap_client *c, void *p, size_t len) {
        int r = zswap_pageout(c, p, len);
        if (r < 0 && r != -ENOMEM && r != -ENOSPC)
                test_fail("pageout: %s", strerror(-r));
        return r < 0 ? 0 : r;
}

static size_t zero_bad(const uint8_t *p, size_t len) {
        size_t bad = 0;
        for (size_t i = 0; i < len; i += 8)
                bad += *(const uint64_t *)(p + i) != 0;
        return bad;
}

/* Register, page out, read back, write, fork, unregister; returns pages
 * that did not read back as written (must be 0 unless lossy). Over
 * TEST_INJECT_PAGES (NPAGES at most, a multiple of 64). */
static size_t workload(int rounds, bool lossy) {
        static uint64_t hashes[NPAGES];
        const size_t npages = MIN(MAX(test_env_uint("TEST_INJECT_PAGES", NPAGES) / 64 * 64, 64u), (unsigned)NPAGES);
        const size_t len = npages * P;
        struct zswap_client *c = connect_retry();
        uint8_t *buf = test_map(len), *zero = test_map(ZPAGES * P);
        size_t bad = 0;
        long evicted = 0;

        fill_pages(buf, len, 7);
        hash_pages(buf, len, hashes);
        register_retry(c, buf, len);
        register_retry(c, zero, ZPAGES * P);
        /* nothing to take, but the range is registered for missing faults
         * from then on: its first touches are the daemon's to serve */
        pageout(c, zero, ZPAGES * P);
        for (int round = 0; round < rounds; round++) {
                evicted += pageout(c, buf, len);
                bad += verify_pages(buf, len, hashes);
                /* first touches: zero page, then a write fault's fresh page */
                bad += zero_bad(zero, ZPAGES * P) ? 1 : 0;
                for (size_t i = 0; i < ZPAGES; i += 2)
                        zero[i * P + 8] = 0;
                ASSERT_OK(madvise(zero, ZPAGES * P, MADV_DONTNEED));
                /* write a quarter, evict again, read back */
                fill_pages(buf + (size_t)(round % 4) * len / 4, len / 4, 100 + (uint64_t)round);
                hash_pages(buf, len, hashes);
                evicted += pageout(c, buf, len);
#if !defined(__SANITIZE_THREAD__) /* a forked child starts threads: TSan cannot */
                if (round == 1) {
                        pid_t pid = fork();
                        ASSERT_TRUE(pid >= 0);
                        if (pid == 0)
                                _exit(!lossy && verify_pages(buf, len, hashes) != 0 ? 1 : 0);
                        int st;
                        ASSERT_EQ(waitpid(pid, &st, 0), pid);
                        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                                test_fail("forked child read different pages (status %#x)", st);
                }
#endif
                bad += verify_pages(buf, len, hashes);
        }
        /* many small ranges come and go: each a REGISTER, a PAGEOUT, an
         * UNREGISTER, so their sites are hit hundreds of times too */
        for (unsigned i = 0; i < test_env_uint("TEST_INJECT_RANGES", 300); i++) {
                uint8_t *part = buf + (size_t)(i % (npages / 16)) * 16 * P;
                size_t off = (size_t)(part - buf) / P;
                unregister_retry(c, buf, len);
                register_retry(c, part, 16 * P);
                evicted += pageout(c, part, 16 * P);
                bad += verify_pages(part, 16 * P, hashes + off);
                unregister_retry(c, part, 16 * P);
                register_retry(c, buf, len);
        }
        evicted += pageout(c, buf, len);
        unregister_retry(c, buf, len);
        unregister_retry(c, zero, ZPAGES * P);
        bad += verify_pages(buf, len, hashes);
        /* unregistered memory is the program's own again: dropping it gives
         * zeros, whether or not the kernel still had the range registered */
        ASSERT_OK(madvise(buf, P, MADV_DONTNEED));
        bad += zero_bad(buf, P) ? 1 : 0;
        zswap_disconnect(c);
        fprintf(stderr, "  %ld pages evicted, %zu bad\n", evicted, bad);
        if (!lossy)
                ASSERT_TRUE(evicted > 0);
        munmap(buf, len);
        munmap(zero, ZPAGES * P);
        return bad;
}

/* A client that has nothing to do with the failures still gets served.
 * Returns the pages that did not read back: 0 (checked here) unless lossy,
 * where the armed sites hit this client too and a page they drop counts
 * against the case's injections like any other. */
static size_t fresh_client(bool lossy) {
        static uint64_t hashes[256];
        struct zswap_client *c = connect_retry();
        uint8_t *buf = test_map(256 * P);
        fill_pages(buf, 256 * P, 3);
        hash_pages(buf, 256 * P, hashes);
        register_retry(c, buf, 256 * P);
        pageout(c, buf, 256 * P);
        size_t bad = verify_pages(buf, 256 * P, hashes);
        if (!lossy)
                ASSERT_EQ(bad, 0);
        unregister_retry(c, buf, 256 * P);
        zswap_disconnect(c);
        munmap(buf, 256 * P);
        return bad;
}

/* How often the daemon's exit line says site fired. */
static unsigned long long injected(const char *site) {
        char line[1024], key[64];
        unsigned long long n = 0;
        FILE *f = fopen(d.log, "re");
        ASSERT_TRUE(f);
        snprintf(key, sizeof(key), "fault injection at exit: %s=", site);
        while (fgets(line, sizeof(line), f)) {
                char *p = strstr(line, key), *q = p ? strstr(p, ": ") : NULL;
                if (q && (q = strstr(q + 2, ": ")))
                        n = strtoull(q + 2, NULL, 10);
        }
        fclose(f);
        return n;
}

static void inject_case(const char *spec, const char *sites, bool lossy) {
        const char *only = getenv("TEST_INJECT_ONLY"); /* a substring of the specs to run */
        if (only && !strstr(spec, only))
                return;
        fprintf(stderr, "-- ZSWAPD_INJECT=%s\n", spec);
        td_start_injected(&d, spec);
        /* two at least: the fork is in the second */
        size_t bad = workload((int)MAX(test_env_uint("TEST_INJECT_ROUNDS", 6), 2u), lossy);
        bad += fresh_client(lossy);
        td_stop(&d); /* fails the test unless the daemon exits cleanly */
        unsigned long long total = 0;
        char list[128], *save = NULL;
        snprintf(list, sizeof(list), "%s", sites);
        for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
                unsigned long long n = injected(s);
                fprintf(stderr, "  %s: %llu injected\n", s, n);
                if (n == 0)
                        test_fail("site %s never fired: the case tested nothing (log %s)", s, d.log);
                total += n;
        }
        if (lossy)
                ASSERT_LE(bad, total);
        else
                ASSERT_EQ(bad, 0);
        unlink(d.log);
}

/* ---- clients that do not play along ---- */

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d.sock);
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        return fd;
}

static _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 64], out[ZSWAP_MSG_MAX];
static uint32_t ids;

static uint32_t send_msg(int fd, uint16_t type, const int *fds, size_t nfds) {
        ZMsgHeader *h = (ZMsgHeader *)out;
        zmsg_init(h, type, ++ids, zmsg_expected_size(type));
        ASSERT_OK(zmsg_send(fd, out, h->size, fds, nfds));
        return h->id;
}

/* The next message: a reply to id with status 0; its fd, if any. */
static int expect_reply(int fd, uint32_t id) {
        int fds[2] = { -1, -1 };
        size_t nfds = 2;
        ssize_t n = zmsg_recv(fd, in, sizeof(in), fds, &nfds, NULL);
        const ZMsgReply *r = (const ZMsgReply *)in;
        ASSERT_TRUE(n > 0);
        ASSERT_TRUE(r->hdr.type == ZMSG_REPLY && r->hdr.id == id);
        if (r->status != 0)
                test_fail("request %u: %s", id, strerror(-r->status));
        return nfds > 0 ? fds[0] : -1;
}

/* One round of an ordinary client while the bad one does its worst. */
static void others_served(const char *while_what) {
        fprintf(stderr, "  a normal client while %s\n", while_what);
        ASSERT_EQ(workload(2, false), 0);
        ASSERT_TRUE(waitpid(d.pid, NULL, WNOHANG) == 0);
}

/* HELLO as CLIENT, then requests without ever reading a reply. */
static void never_reads(void) {
        int fd = raw_connect(), sent = 0;
        ((ZMsgHello *)out)->role = ZROLE_CLIENT;
        send_msg(fd, ZMSG_HELLO, NULL, 0);
        ASSERT_OK(fcntl(fd, F_SETFL, O_NONBLOCK));
        for (; sent < 100000; sent++) {
                memset(out, 0, sizeof(out));
                ((ZMsgStatsReq *)out)->scope = ZSWAP_STATS_GLOBAL;
                ZMsgHeader *h = (ZMsgHeader *)out;
                zmsg_init(h, ZMSG_STATS, ++ids, zmsg_expected_size(ZMSG_STATS));
                if (zmsg_send(fd, out, h->size, NULL, 0) < 0)
                        break; /* our buffer is full, or the daemon dropped us */
        }
        fprintf(stderr, "  %d requests sent unread\n", sent);
        others_served("a client never reads its socket");
        close(fd);
}

/* Attached, 64 pages registered and a PAGEOUT asked, and then the agent
 * never answers the MOVE. */
static void silent_agent(void) {
        const size_t n = 64;
        uint64_t hashes[64];
        int fd = raw_connect();

        ((ZMsgHello *)out)->role = ZROLE_CLIENT;
        int devfd = expect_reply(fd, send_msg(fd, ZMSG_HELLO, NULL, 0));
        ASSERT_TRUE(devfd >= 0);
        int uffd = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        if (uffd < 0)
                test_skip("USERFAULTFD_IOC_NEW: %s", strerror(errno));
        uint8_t *area = test_map(2 * LANE_BYTES);
        uint64_t staging = ((uint64_t)(uintptr_t)area + LANE_BYTES - 1) & ~(LANE_BYTES - 1);
        ZMsgAttach *a = (ZMsgAttach *)out;
        memset(out, 0, sizeof(out));
        a->staging_addr = staging;
        a->staging_len = LANE_BYTES;
        expect_reply(fd, send_msg(fd, ZMSG_ATTACH, &uffd, 1));
        madvise((void *)(uintptr_t)staging, LANE_BYTES, MADV_NOHUGEPAGE);
        ASSERT_OK(ioctl(uffd, UFFDIO_REGISTER,
                        &(struct uffdio_register){ .range = { .start = staging, .len = LANE_BYTES },
                                                   .mode = UFFDIO_REGISTER_MODE_WP }));
        uint8_t *mem = test_map(n * P);
        fill_pages(mem, n * P, 42);
        hash_pages(mem, n * P, hashes);
        ZMsgRange *rg = (ZMsgRange *)out;
        memset(out, 0, sizeof(out));
        rg->addr = (uint64_t)(uintptr_t)mem;
        rg->len = n * P;
        expect_reply(fd, send_msg(fd, ZMSG_REGISTER, NULL, 0));
        memset(out, 0, sizeof(out));
        rg->addr = (uint64_t)(uintptr_t)mem;
        rg->len = n * P;
        send_msg(fd, ZMSG_PAGEOUT, NULL, 0);
        ASSERT_TRUE(zmsg_recv(fd, in, sizeof(in), NULL, NULL, NULL) > 0);
        ASSERT_EQ(((ZMsgHeader *)in)->type, ZMSG_MOVE);
        /* ... and no MOVE_DONE, ever */
        others_served("an agent sits on a MOVE");
        ASSERT_EQ(verify_pages(mem, n * P, hashes), 0);
        close(fd); /* the daemon gives the range back and unregisters it */
        close(uffd);
        close(devfd);
        ASSERT_EQ(verify_pages(mem, n * P, hashes), 0);
        others_served("after the silent agent left");
        munmap(mem, n * P);
        munmap(area, 2 * LANE_BYTES);
}

static void bad_clients(void) {
        fprintf(stderr, "-- clients that do not play along\n");
        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        never_reads();
        silent_agent();
        fresh_client(false);
        td_stop(&d);
}

/* A pool of 1 MiB for 8 MiB of data: the rest stays resident. */
static void full_pool(void) {
        char args[300];
        fprintf(stderr, "-- a full pool\n");
        snprintf(args, sizeof(args), "%s --pool-max 1M", getenv("TEST_DAEMON_ARGS") ?: "");
        td_start(&d, args);
        ASSERT_EQ(workload(3, false), 0);
        fresh_client(false);
        td_stop(&d);
}

int main(void) {
#if !ZSWAP_INJECT
        test_skip("built with -Dinject=false: no injection sites");
#endif
        test_require_root();
        if (access("/dev/userfaultfd", R_OK | W_OK) != 0)
                test_skip("no /dev/userfaultfd");
        /* a single every-Nth site may fire only where the workload cannot
         * see it; the rates are chosen for hundreds of injections each */
        inject_case("pool_alloc=1/3", "pool_alloc", false);
        inject_case("pool_alloc=~1/2", "pool_alloc", false);
        inject_case("malloc=~1/10", "malloc", false);
        inject_case("uffd_copy=EAGAIN:1/3,uffd_zeropage=EAGAIN:1/3,uffd_wp=EAGAIN:1/2", "uffd_copy,uffd_zeropage",
                    false);
        inject_case("uffd_register=ENOMEM:1/3,uffd_unregister=ENOMEM:1/2", "uffd_register,uffd_unregister", false);
        inject_case("uffd_register=EBUSY:~1/4,uffd_unregister=ESRCH:1/2", "uffd_register,uffd_unregister", false);
        /* the kernel's answer when it cannot allocate or charge the page
         * (the client's memory cgroup at its limit): put off, never lost */
        inject_case("uffd_copy=ENOMEM:1/3", "uffd_copy", false);
        inject_case("uffd_copy=EEXIST:1/7", "uffd_copy", true);
        inject_case("uffd_copy=ENOENT:1/31,uffd_zeropage=ENOENT:1/5", "uffd_copy,uffd_zeropage", true);
        inject_case("uffd_copy=ESRCH:1/31,uffd_zeropage=ESRCH:1/5", "uffd_copy,uffd_zeropage", true);
        /* installs, syncs, restores and a forked child's sync page put
         * off as if a fault thread held the client (work.c work_locked()) */
        inject_case("lock_busy=~1/2", "lock_busy", false);
        /* copies put off, and no retry to be had for some of them */
        inject_case("uffd_copy=EAGAIN:1/3,retry_nomem=~1/2", "uffd_copy,retry_nomem", false);
        bad_clients();
        full_pool();
        return 0;
}
