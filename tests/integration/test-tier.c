/*
 * test-tier: the second tier (daemon/tier/tier.c) with a real daemon, a real
 * backing file on this disk (or a real nbd-server on loopback) and a real
 * client whose data is four times the pool's bound, so that most of it can
 * only live on the tier. Every case checks every page's content.
 *
 *   file          writeback to a file, read back (random and sequential
 *                 order), rewritten, paged out again, read back; a fork
 *                 child reads the tier pages it shares with its parent
 *   blockdev      the same on a block device (a loop device)
 *   nbd           the same through nbd-server on loopback (TCP)
 *   full          a backing file that fills: writeback stops, nothing lost
 *   write-error   writes fail (injected EIO): the pages stay in RAM
 *   read-error    reads fail (injected EIO): faults wait and retry
 *   corrupt       blocks of the backing file overwritten behind the
 *                 daemon's back: never installed; those pages SIGBUS, the
 *                 others read back intact
 *   forge         an attacker with the backing file: it must find no
 *                 page's content in clear, and a change that keeps every
 *                 CRC-32C (CRC is linear: XOR a multiple of its polynomial
 *                 in) must never be installed: those pages SIGBUS
 *   restart       the daemon killed with pages on the tier: the next one
 *                 adopts them (same backing file) and serves them
 *   nbd-restart   nbd-server killed with pages on the tier, faults waiting
 *                 on it; started again: reconnected, every page back
 *   nbd-down-restart  the daemon killed and the server down: the next
 *                 daemon starts without it, adopts, and serves every page
 *                 once the server is back
 *   nbd-stall     nbd-server stops answering (SIGSTOP) while a client
 *                 faults on its tier pages; the daemon has one fault
 *                 thread. Another client's 4096 faults (same-filled pages
 *                 read in random order, one fault each) must all be served
 *                 while the read stays stalled (a fault thread that read
 *                 the tier itself would wait up to a second for each);
 *                 then the server goes on and the stalled client reads
 *                 every page
 *   fork-hold     a client forks while its evicted pages are all in RAM;
 *                 its child stops before it can attach, so the daemon
 *                 holds the parent; another client fills the pool and the
 *                 writer runs: it must take none of the held parent's
 *                 pages (the child could not read them from the tier).
 *                 Then the daemon is killed and the child continued: it
 *                 restores its memory from the parent's store and reads
 *                 every page back, instead of being killed
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>

#include "crc32c.h"
#include "harness.h"
#include "protocol.h"
#include "util.h"

#define POOL_MAX (4u << 20)
#define DATA (4 * POOL_MAX) /* four times the pool's bound */
#define NPAGES ((unsigned)(DATA / ZSWAP_PAGE_SIZE))
/* the tier's stubs are allocated before the objects they replace are
 * given back: the pool may pass its bound by a few chunks meanwhile */
#define POOL_SLACK (64u << 10)

static char conf_path[128], backing[128];
static TdNbd nbd;
static TestDaemon *cur; /* whose log a failure shows */

static pid_t main_pid;

static void cleanup(void) {
        if (getpid() != main_pid)
                return; /* a child that failed: the files are the test's */
        td_nbd_remove(&nbd);
        if (conf_path[0])
                unlink(conf_path);
        if (backing[0])
                unlink(backing);
}

static void write_conf(const char *backing_spec, const char *extra) {
        snprintf(conf_path, sizeof(conf_path), "/tmp/zswap-test-tier-%d.conf", (int)getpid());
        FILE *f = fopen(conf_path, "w");
        ASSERT_TRUE(f);
        /* the key the objects are sealed with: one for every run of the
         * tests, never the machine's (/var/lib/zswapd) */
        fprintf(f, "[tier]\nbacking = %s\nkey = /tmp/zswap-test-tier.key\n%s", backing_spec, extra ? extra : "");
        fclose(f);
}

static void start_daemon_with(TestDaemon *d, const char *extra) {
        char args[256];
        snprintf(args, sizeof(args), "--config %s --pool-max %u%s%s", conf_path, POOL_MAX,
                 getenv("TIER_VERBOSE") ? " -v" : "", extra);
        td_start_logged(d, args);
        cur = d;
}

static void start_daemon(TestDaemon *d) {
        start_daemon_with(d, "");
}

static ZMsgStatusReply status(TestDaemon *d) {
        ZMsgStatusReply st;
        td_status(d, &st);
        return st;
}

/* The whole region out, and at least min_tier pages on the tier. */
static void page_all_out(TestDaemon *d, struct zswap_client *c, uint8_t *buf, uint64_t min_tier) {
        td_tier_fill(d, c, buf, DATA, min_tier);
}

static ZMsgStatusReply tier_settled(TestDaemon *d) {
        ZMsgStatusReply st;
        td_tier_settled(d, &st);
        return st;
}

/* The clients' own tier counters (zswapctl clients) add up to the
 * tier's: read between two statuses that agree, with the writer settled
 * (the test's own client is not faulting meanwhile). An adoption under
 * way has taken its stubs' blocks before its client is listed: until it
 * is answered, the clients count fewer; waited for. */
static void clients_add_up(TestDaemon *d) {
        ZMsgStatusReply a = tier_settled(d), b;
        uint64_t pages = 0, bytes = 0;

        for (uint64_t t0 = now_ns();; usleep(100 * 1000)) {
                for (int i = 0; i < 100; i++, a = b) {
                        td_clients_tier(d, 0, &pages, &bytes);
                        b = status(d);
                        if (a.tier_pages == b.tier_pages && a.tier_bytes == b.tier_bytes &&
                            a.tier_written == b.tier_written)
                                break;
                }
                if ((pages == b.tier_pages && bytes == b.tier_bytes) || now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        break;
                a = b;
        }
        if (pages != b.tier_pages || bytes != b.tier_bytes)
                test_fail("clients count %llu pages (%llu bytes) on the tier, the tier %llu (%llu)",
                          (unsigned long long)pages, (unsigned long long)bytes, (unsigned long long)b.tier_pages,
                          (unsigned long long)b.tier_bytes);
}

static void verify_random(uint8_t *buf, const uint64_t *hashes, uint64_t seed) {
        static uint32_t order[NPAGES];
        size_t bad = 0;

        for (uint32_t i = 0; i < NPAGES; i++)
                order[i] = i;
        for (uint32_t i = NPAGES - 1; i > 0; i--) {
                uint32_t j = (uint32_t)(xorshift(&seed) % (i + 1));
                uint32_t t = order[i];
                order[i] = order[j];
                order[j] = t;
        }
        for (uint32_t i = 0; i < NPAGES; i++)
                bad += page_hash(buf + (size_t)order[i] * ZSWAP_PAGE_SIZE) != hashes[order[i]];
        if (bad && cur)
                td_log_dump(cur);
        if (bad)
                test_fail("%zu of %u pages differ (random order)", bad, NPAGES);
}

static void verify_all(uint8_t *buf, const uint64_t *hashes, const char *when) {
        size_t bad = verify_pages(buf, DATA, hashes);
        if (bad && cur)
                td_log_dump(cur);
        if (bad)
                test_fail("%s: %zu of %u pages differ", when, bad, NPAGES);
}

/* Write a random tenth of the pages, as a program at work does. */
static void rewrite_some(uint8_t *buf, uint64_t *hashes, uint64_t *seed) {
        for (unsigned i = 0; i < NPAGES / 10; i++) {
                uint32_t p = (uint32_t)(xorshift(seed) % NPAGES);
                uint8_t *pg = buf + (size_t)p * ZSWAP_PAGE_SIZE;
                fill_pages(pg, ZSWAP_PAGE_SIZE, xorshift(seed));
                hashes[p] = page_hash(pg);
        }
}

/* The end of a case after a disruption: the daemon writes out again
 * (after a restart, above the old high-water mark while the grace lasts),
 * every page reads back, the client goes, the daemon stops cleanly. */
static void write_again_and_end(TestDaemon *d, struct zswap_client *c, uint8_t *buf, uint64_t *hashes,
                                uint64_t seed, const char *when) {
        rewrite_some(buf, hashes, &seed);
        page_all_out(d, c, buf, NPAGES / 4);
        verify_all(buf, hashes, when);
        zswap_disconnect(c);
        td_stop(d);
}

/* kill -9 with pages on the tier (once the writer has settled), between()
 * if any, then the next daemon: returns its status once it has adopted
 * them all. A batch the writer had in flight at the kill may have been
 * published after the count was read: never fewer. */
static ZMsgStatusReply kill_and_adopt(TestDaemon *d, void (*between)(void)) {
        ZMsgStatusReply before = tier_settled(d), st;

        td_kill(d);
        if (between)
                between();
        td_respawn(d);
        WAIT_UNTIL((st = status(d)).tier_pages >= before.tier_pages, TEST_WAIT_S,
                   "the new daemon adopted %llu pages on the tier of %llu", (unsigned long long)st.tier_pages,
                   (unsigned long long)before.tier_pages);
        return st;
}

/* The whole life of a client whose data is 4x the pool's bound. */
static void workload(TestDaemon *d, bool with_fork) {
        static uint64_t hashes[NPAGES];
        struct zswap_client *c = td_connect(d);
        uint8_t *buf = td_region(c, DATA, 0x71e2, hashes);
        uint64_t seed = 0x5eed;

        page_all_out(d, c, buf, NPAGES / 4);
        ZMsgStatusReply st = status(d);
        ASSERT_TRUE(st.tier_written_pages >= NPAGES / 4);
        ASSERT_LE(st.stats.pool_bytes, POOL_MAX + POOL_SLACK);
        clients_add_up(d);
        verify_random(buf, hashes, seed);
        ZMsgStatusReply st2 = status(d);
        ASSERT_TRUE(st2.tier_reads > st.tier_reads);
        ASSERT_EQ(st2.tier_corrupt, 0);

        for (int round = 0; round < 3; round++) {
                rewrite_some(buf, hashes, &seed);
                page_all_out(d, c, buf, NPAGES / 4);
                if (with_fork && round == 1) {
                        /* the child shares the parent's tier pages (one
                         * more reference to their blocks) and reads them;
                         * then the parent reads its own */
                        pid_t pid = fork();
                        ASSERT_TRUE(pid >= 0);
                        if (pid == 0) {
                                clients_add_up(d); /* the child's stubs: counted in both */
                                size_t bad = verify_pages(buf, DATA, hashes);
                                if (bad)
                                        fprintf(stderr, "fork child: %zu pages differ\n", bad);
                                _exit(bad ? 1 : 0);
                        }
                        int ws;
                        ASSERT_EQ(waitpid(pid, &ws, 0), pid);
                        ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
                }
                if (round % 2)
                        verify_random(buf, hashes, seed + (uint64_t)round);
                else
                        verify_all(buf, hashes, "sequential read-back");
        }
        st = status(d);
        ASSERT_EQ(st.tier_corrupt, 0);
        /* unregister takes every page back, the tier's too */
        page_all_out(d, c, buf, NPAGES / 4);
        ASSERT_OK(zswap_unregister(c, buf, DATA));
        verify_all(buf, hashes, "after unregister");
        zswap_disconnect(c);
        /* the client is gone: every block it held is free again, once
         * the writer has let go of the extents of a pass still running
         * (their blocks are counted used while it writes) */
        WAIT_UNTIL((st = status(d)).tier_pages == 0 && st.tier_used_bytes == 0, TEST_WAIT_S,
                   "%llu pages still on the tier, %llu bytes used", (unsigned long long)st.tier_pages,
                   (unsigned long long)st.tier_used_bytes);
        clients_add_up(d);
        munmap(buf, DATA);
}

static void backing_file(const char *size) {
        char spec[256];
        snprintf(backing, sizeof(backing), "/var/tmp/zswap-test-tier-%d.img", (int)getpid());
        unlink(backing);
        snprintf(spec, sizeof(spec), "size = %s\n", size);
        write_conf(backing, spec);
}

static void case_file(void) {
        TestDaemon d;
        backing_file("64M");
        start_daemon(&d);
        workload(&d, true);
        ASSERT_TRUE(td_log_has(&d, "second tier: file"));
        fprintf(stderr, "file: %u daemon threads, none privileged\n", td_assert_threads_unprivileged(&d));
        td_stop(&d);
}

/* A block device: a loop device over a file on this disk (the daemon
 * reads its size with BLKGETSIZE64). Skipped where loop devices cannot
 * be made. */
static char loopdev[32];

static void loop_detach(void) {
        char cmd[64];
        if (!loopdev[0] || getpid() != main_pid)
                return;
        snprintf(cmd, sizeof(cmd), "losetup -d %s", loopdev);
        (void)!system(cmd);
}

static void case_blockdev(void) {
        char cmd[300];
        TestDaemon d;

        snprintf(backing, sizeof(backing), "/var/tmp/zswap-test-tier-%d.img", (int)getpid());
        snprintf(cmd, sizeof(cmd), "truncate -s 64M %s && losetup -f --show %s", backing, backing);
        FILE *p = popen(cmd, "r");
        if (!p || !fgets(loopdev, sizeof(loopdev), p) || strncmp(loopdev, "/dev/loop", 9) != 0) {
                if (p)
                        pclose(p);
                loopdev[0] = 0;
                test_skip("cannot set up a loop device (losetup)");
        }
        pclose(p);
        loopdev[strcspn(loopdev, "\n")] = 0;
        atexit(loop_detach);
        write_conf(loopdev, NULL);
        start_daemon(&d);
        workload(&d, false);
        ASSERT_TRUE(td_log_has(&d, "second tier: device /dev/loop"));
        td_stop(&d);
}

/* A tier too small for what must go out: it fills, writeback stops, the
 * pool stays at its bound, and every page is still there. */
static void case_full(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;

        backing_file("1M"); /* 255 blocks for objects */
        start_daemon(&d);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, DATA, 0xf011, hashes);
        ZMsgStatusReply st = { 0 };
        for (uint64_t deadline = now_ns() + TEST_WAIT_S * 1000000000ull; now_ns() < deadline;) {
                ASSERT_OK(zswap_pageout(c, buf, DATA));
                st = status(&d);
                if (st.tier_full_events > 0 && st.tier_state == 2 /* full */)
                        break;
                usleep(20000);
        }
        ASSERT_TRUE(st.tier_full_events > 0);
        ASSERT_TRUE(st.tier_used_bytes > 200 * 4096ull);
        ASSERT_LE(st.stats.pool_bytes, POOL_MAX + POOL_SLACK);
        ASSERT_TRUE(td_log_has(&d, "is full: writeback stops"));
        verify_random(buf, hashes, 7);
        verify_all(buf, hashes, "tier full");
        zswap_disconnect(c);
        td_stop(&d);
}

/* The workload with an injection site armed in the daemon
 * (ZSWAPD_INJECT): the failures happen (the counter at errors_off in the
 * status counts them), the daemon says so (needle in its log), and the
 * workload still checks every page. */
static void injected(const char *spec, size_t errors_off, const char *needle) {
        TestDaemon d;
        backing_file("64M");
        setenv("ZSWAPD_INJECT", spec, 1);
        start_daemon(&d);
        unsetenv("ZSWAPD_INJECT");
        workload(&d, false);
        ZMsgStatusReply st = status(&d);
        uint64_t errors;
        memcpy(&errors, (const uint8_t *)&st + errors_off, sizeof(errors));
        ASSERT_TRUE(errors > 0);
        ASSERT_TRUE(td_log_has(&d, needle));
        td_stop(&d);
}

/* Every eighth write batch fails: its pages stay in RAM, the writer backs
 * off and tries again; nothing is lost. */
static void case_write_error(void) {
        injected("tier_write=1/8", offsetof(ZMsgStatusReply, tier_write_errors), "writeback stops for");
}

/* Every tenth read fails: the fault waits, is retried and completes. */
static void case_read_error(void) {
        injected("tier_read=1/10", offsetof(ZMsgStatusReply, tier_read_errors), "the fault waits and is retried");
}

static sigjmp_buf bus_jmp;
static void on_sigbus(int sig) {
        (void)sig;
        siglongjmp(bus_jmp, 1);
}

/* Read every page (in a child: a poisoned page stays poisoned): intact,
 * SIGBUS, or with other content. */
static void read_all_counted(uint8_t *buf, const uint64_t *hashes, unsigned *good, unsigned *bus, unsigned *wrong) {
        volatile unsigned g = 0, b = 0, w = 0;

        signal(SIGBUS, on_sigbus);
        for (volatile unsigned i = 0; i < NPAGES; i++) {
                uint8_t *pg = buf + (size_t)i * ZSWAP_PAGE_SIZE;
                if (sigsetjmp(bus_jmp, 1)) {
                        b++;
                        continue;
                }
                if (page_hash(pg) == hashes[i])
                        g++;
                else
                        w++;
        }
        *good = g, *bus = b, *wrong = w;
}

/* A poisoned page stays poisoned, and says so again: the child that read
 * buf ends with 0 if reading every page of it again hits SIGBUS, else 2. */
static _Noreturn void exit_still_poisoned(uint8_t *buf) {
        if (!sigsetjmp(bus_jmp, 1)) {
                for (unsigned i = 0; i < NPAGES; i++)
                        (void)*(volatile uint8_t *)(buf + (size_t)i * ZSWAP_PAGE_SIZE);
                _exit(2); /* no SIGBUS any more */
        }
        _exit(0);
}

/* The child that read the pages (what: the case) must have ended with 0. */
static void child_ok(TestDaemon *d, pid_t pid, const char *what) {
        int ws;
        ASSERT_EQ(waitpid(pid, &ws, 0), pid);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
                td_log_dump(d);
                test_fail("%s: child status %#x%s", what, ws,
                          WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM ? " (its reads never ended)" : "");
        }
}

/* Every page's data on the tier is overwritten on disk (the header is
 * left alone): no page may come back with other content. Pages whose
 * record fails to open are poisoned: reading them is a SIGBUS. The
 * pages the pool still holds read back intact. Runs in a child process:
 * poisoned pages stay poisoned. */
static void case_corrupt(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;

        backing_file("64M");
        start_daemon(&d);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct zswap_client *c = td_connect(&d);
                uint8_t *buf = td_region(c, DATA, 0xc0de, hashes);
                page_all_out(&d, c, buf, NPAGES / 4);
                ZMsgStatusReply st = status(&d);
                /* O_DIRECT as the daemon's own I/O: a buffered write
                 * racing its direct writes would be the kernel's own
                 * collision (and an EIO from fsync), not our test */
                int fd = open(backing, O_WRONLY | O_DIRECT);
                ASSERT_TRUE(fd >= 0);
                uint8_t *junk = aligned_alloc(4096, 1 << 16);
                uint64_t s = 42;
                ASSERT_TRUE(junk);
                for (size_t i = 0; i < (1 << 16); i += 8)
                        *(uint64_t *)(junk + i) = xorshift(&s);
                for (uint64_t off = 4096; off < 64ull << 20; off += 1 << 16)
                        ASSERT_EQ(pwrite(fd, junk, 1 << 16, (off_t)off), (ssize_t)(1 << 16));
                close(fd);
                free(junk);
                unsigned good, bus, wrong;
                read_all_counted(buf, hashes, &good, &bus, &wrong);
                ZMsgStatusReply st2 = status(&d);
                fprintf(stderr, "corrupt: %u intact, %u SIGBUS, %u wrong; %llu pages were on the tier, %llu corrupt\n",
                        good, bus, wrong, (unsigned long long)st.tier_pages, (unsigned long long)st2.tier_corrupt);
                if (wrong || bus == 0 || st2.tier_corrupt == 0 || good + bus != NPAGES)
                        _exit(1);
                exit_still_poisoned(buf);
        }
        child_ok(&d, pid, "corrupt");
        ASSERT_TRUE(td_log_has(&d, "fails authentication"));
        td_stop(&d);
}

/* Pool objects that fail to decompress (ZSWAPD_INJECT decode: every
 * seventh decompression of a pool object says its data is corrupt, as a
 * flipped bit in a zstd frame would). A fault on such a page must end:
 * the page is poisoned (SIGBUS), never installed with other content and
 * never left waiting; every other page reads back intact. Without the
 * poisoning the child's read never returns: its alarm ends it. The pool
 * is made big enough for the whole region: at the usual bound the tier's
 * writer may have moved every page out of the pool before the reads (a
 * slow sanitizer build), and a page read from the tier is not a pool
 * object. */
static void case_pool_corrupt(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;

        backing_file("64M");
        setenv("ZSWAPD_INJECT", "decode=1/7", 1);
        start_daemon_with(&d, " --pool-max 64M");
        unsetenv("ZSWAPD_INJECT");
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct zswap_client *c = td_connect(&d);
                uint8_t *buf = td_region(c, DATA, 0xdec0, hashes);
                page_all_out(&d, c, buf, 0);
                ZMsgStatusReply st = status(&d);
                alarm(TEST_WAIT_S);
                unsigned good, bus, wrong;
                read_all_counted(buf, hashes, &good, &bus, &wrong);
                alarm(0);
                ZMsgStatusReply st2 = status(&d);
                fprintf(stderr, "pool-corrupt: %u intact, %u SIGBUS, %u wrong; %llu pages were held (%llu on the tier), "
                        "%llu lost\n", good, bus, wrong, (unsigned long long)st.stats.stored_pages,
                        (unsigned long long)st.tier_pages, (unsigned long long)st2.pool_corrupt);
                if (wrong || bus == 0 || st2.pool_corrupt < bus || good + bus != NPAGES)
                        _exit(1);
                /* the lost pages' objects went back to the pool */
                if (status(&d).stats.stored_pages != 0)
                        _exit(3);
                exit_still_poisoned(buf);
        }
        child_ok(&d, pid, "pool-corrupt");
        ASSERT_TRUE(td_log_has(&d, "its pool object fails to decompress"));
        td_stop(&d);
}

/* kill -9 with pages on the tier: the next daemon (same backing file)
 * adopts the client's store, stubs and all, and serves every page. */
/* A 5-byte pattern whose XOR into a message, anywhere, leaves its
 * CRC-32C what it was, whatever the seed: a multiple of the CRC's
 * polynomial, found as a dependency among the CRCs of single bits (40
 * vectors in a space of 32 dimensions have one). */
static uint64_t crc_neutral(void) {
        uint8_t z[64] = { 0 };
        uint32_t vec[40];
        uint64_t comb[40];
        uint32_t base = crc32c(0, z, sizeof(z));

        for (int i = 0; i < 40; i++) {
                z[16 + i / 8] ^= (uint8_t)(1u << (i % 8));
                vec[i] = crc32c(0, z, sizeof(z)) ^ base;
                z[16 + i / 8] ^= (uint8_t)(1u << (i % 8));
                comb[i] = 1ull << i;
        }
        int row = 0;
        for (int bit = 31; bit >= 0 && row < 40; bit--) {
                int piv = -1;
                for (int r = row; r < 40 && piv < 0; r++)
                        if (vec[r] >> bit & 1)
                                piv = r;
                if (piv < 0)
                        continue;
                uint32_t tv = vec[piv];
                uint64_t tc = comb[piv];
                vec[piv] = vec[row], comb[piv] = comb[row];
                vec[row] = tv, comb[row] = tc;
                for (int r = 0; r < 40; r++)
                        if (r != row && (vec[r] >> bit & 1)) {
                                vec[r] ^= vec[row];
                                comb[r] ^= comb[row];
                        }
                row++;
        }
        for (int r = row; r < 40; r++)
                if (vec[r] == 0 && comb[r])
                        return comb[r];
        test_fail("no CRC-neutral pattern found");
}

/* Whoever can read and write the backing file learns no page and gets
 * none of its making installed. Each page carries a marker; none may be
 * in the file in clear. Then a pattern that keeps any CRC-32C is XORed in
 * every 512 bytes of the data blocks, as an attacker of a checksum would:
 * no page may come back with other content; pages whose object was hit
 * SIGBUS. Runs in a child: poisoned pages stay poisoned. */
static void case_forge(void) {
        static uint64_t hashes[NPAGES];
        const char *mark = "zswap-tier-secret-";
        uint64_t delta = crc_neutral();
        TestDaemon d;

        /* the pattern does what it claims, at any place, under any seed */
        uint8_t m[300];
        uint64_t s0 = 7;
        for (size_t i = 0; i < sizeof(m); i++)
                m[i] = (uint8_t)xorshift(&s0);
        for (unsigned at = 0; at + 5 <= sizeof(m); at += 37) {
                uint32_t seed = (uint32_t)xorshift(&s0), before = crc32c(seed, m, sizeof(m));
                for (int b = 0; b < 5; b++)
                        m[at + b] ^= (uint8_t)(delta >> (8 * b));
                ASSERT_EQ(crc32c(seed, m, sizeof(m)), before);
        }

        backing_file("64M");
        start_daemon(&d);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct zswap_client *c = td_connect(&d);
                uint8_t *buf = td_region(c, DATA, 0xf0f0, hashes);
                for (unsigned i = 0; i < NPAGES; i++) {
                        uint8_t *pg = buf + (size_t)i * ZSWAP_PAGE_SIZE;
                        snprintf((char *)pg + 256, 40, "%s%08u", mark, i);
                        hashes[i] = page_hash(pg);
                }
                page_all_out(&d, c, buf, NPAGES / 4);
                ZMsgStatusReply st = status(&d);
                /* O_DIRECT as the daemon's own I/O (case_corrupt) */
                int fd = open(backing, O_RDWR | O_DIRECT);
                ASSERT_TRUE(fd >= 0);
                uint8_t *chunk = aligned_alloc(4096, 1 << 16);
                ASSERT_TRUE(chunk);
                unsigned clear = 0;
                for (uint64_t off = 0; off < 64ull << 20; off += 1 << 16) {
                        ASSERT_EQ(pread(fd, chunk, 1 << 16, (off_t)off), (ssize_t)(1 << 16));
                        for (uint8_t *p = chunk; (p = memmem(p, chunk + (1 << 16) - p, mark, strlen(mark))); p++)
                                clear++;
                        /* the header (block 0) is left alone */
                        for (size_t at = off ? 0 : 4096; at + 5 <= (1 << 16); at += 512)
                                for (int b = 0; b < 5; b++)
                                        chunk[at + b] ^= (uint8_t)(delta >> (8 * b));
                        ASSERT_EQ(pwrite(fd, chunk, 1 << 16, (off_t)off), (ssize_t)(1 << 16));
                }
                close(fd);
                free(chunk);
                if (clear) {
                        fprintf(stderr, "forge: %u pages' markers in clear in the backing file (%llu pages there)\n",
                                clear, (unsigned long long)st.tier_pages);
                        _exit(3);
                }
                unsigned good, bus, wrong;
                read_all_counted(buf, hashes, &good, &bus, &wrong);
                ZMsgStatusReply st2 = status(&d);
                fprintf(stderr, "forge: no marker in clear; after the forgery %u intact, %u SIGBUS, %u wrong; %llu "
                                "pages were on the tier, %llu refused\n",
                        good, bus, wrong, (unsigned long long)st.tier_pages, (unsigned long long)st2.tier_corrupt);
                _exit(wrong || bus == 0 || st2.tier_corrupt == 0 || good + bus != NPAGES ? 1 : 0);
        }
        child_ok(&d, pid, "forge");
        td_stop(&d);
}

static void case_restart(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;

        backing_file("64M");
        start_daemon(&d);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, DATA, 0xad09, hashes);
        page_all_out(&d, c, buf, NPAGES / 4);
        kill_and_adopt(&d, NULL);
        ASSERT_TRUE(td_log_has(&d, "(kept)"));
        clients_add_up(&d); /* adoption counts them again */
        verify_random(buf, hashes, 3);
        write_again_and_end(&d, c, buf, hashes, 9, "after restart");
}

/* ---- nbd-server on loopback ---- */

/* kill_and_adopt()'s between: the server down too */
static void nbd_down(void) {
        td_nbd_stop(&nbd);
}

static void nbd_setup(void) {
        char spec[128];
        if (!td_nbd_installed())
                test_skip("nbd-server is not installed (scripts/setup-deps.sh installs it)");
        td_nbd_start(&nbd);
        snprintf(spec, sizeof(spec), "nbd://127.0.0.1:%d/tier", nbd.port);
        /* with its size given, a daemon starts while the server is down */
        write_conf(spec, "timeout = 2s\nsize = 64M\n");
}

static void case_nbd(void) {
        TestDaemon d;
        nbd_setup();
        start_daemon(&d);
        workload(&d, true);
        ASSERT_TRUE(td_log_has(&d, "second tier: nbd"));
        /* the connection and its header were made around the sandbox:
         * no thread (io_uring's workers included) kept root's privileges */
        fprintf(stderr, "nbd: %u daemon threads, none privileged\n", td_assert_threads_unprivileged(&d));
        td_stop(&d);
}

typedef struct Reader {
        uint8_t *buf;
        const uint64_t *hashes;
        _Atomic size_t bad;
        _Atomic bool done;
} Reader;

static void *reader_main(void *arg) {
        Reader *r = arg;
        atomic_store(&r->bad, verify_pages(r->buf, DATA, r->hashes));
        atomic_store(&r->done, true);
        return NULL;
}

/* The server goes away with pages on it: faults on them wait (they do not
 * read zeros, nor fail); writeback stops. The server comes back: the
 * daemon reconnects, the waiting faults complete, every page is intact. */
static void case_nbd_restart(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;

        nbd_setup();
        start_daemon(&d);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, DATA, 0x4bd, hashes);
        page_all_out(&d, c, buf, NPAGES / 4);
        td_nbd_stop(&nbd);
        Reader r = { .buf = buf, .hashes = hashes };
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, reader_main, &r), 0);
        /* the reader reaches a page on the tier and waits there */
        ZMsgStatusReply st;
        WAIT_UNTIL((st = status(&d)).tier_read_errors > 0, TEST_WAIT_S, "no read of the tier failed");
        usleep(300000);
        ASSERT_TRUE(!atomic_load(&r.done));
        td_nbd_start(&nbd);
        ASSERT_EQ(pthread_join(t, NULL), 0);
        ASSERT_EQ(atomic_load(&r.bad), 0);
        st = status(&d);
        ASSERT_TRUE(st.tier_reconnects > 0);
        ASSERT_TRUE(td_log_has(&d, "the second tier cannot be read"));
        /* writeback goes on through a new connection */
        write_again_and_end(&d, c, buf, hashes, 1, "after the server came back");
}

#define HONEST_PAGES 4096u

typedef struct Honest {
        uint8_t *same; /* evicted same-filled pages: nothing of them is on the tier */
        _Atomic unsigned checked, bad;
        _Atomic bool done;
} Honest;

/* In random order: no fault-around, each page a fault of its own. */
static void *honest_main(void *arg) {
        static uint32_t order[HONEST_PAGES];
        Honest *h = arg;
        uint64_t seed = 0x40e57;

        for (uint32_t i = 0; i < HONEST_PAGES; i++)
                order[i] = i;
        for (uint32_t i = HONEST_PAGES - 1; i > 0; i--) {
                uint32_t j = (uint32_t)(xorshift(&seed) % (i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
        }
        for (unsigned n = 0; n < HONEST_PAGES; n++) {
                unsigned i = order[n];
                const uint32_t *p = (const uint32_t *)(h->same + (size_t)i * ZSWAP_PAGE_SIZE);
                bool ok = true;
                for (size_t k = 0; k < ZSWAP_PAGE_SIZE / 4; k++)
                        ok &= p[k] == 0x5a000000u + i;
                atomic_fetch_add(&h->bad, !ok);
                atomic_fetch_add(&h->checked, 1);
        }
        atomic_store(&h->done, true);
        return NULL;
}

/* One client's read of the second tier stalls (the NBD server stops
 * answering, the read's timeout is 10 min): another client's faults are
 * served meanwhile, by the daemon's only fault thread. */
static void case_nbd_stall(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;
        char spec[128];

        nbd_setup();
        snprintf(spec, sizeof(spec), "nbd://127.0.0.1:%d/tier", nbd.port);
        write_conf(spec, "timeout = 10m\nsize = 64M\n");
        start_daemon_with(&d, " --fault-threads 1");
        struct zswap_client *hc = td_connect(&d), *sc = td_connect(&d);
        /* the honest client's pages go out first, same-filled: they live in
         * the index alone, never in the pool, so never on the tier */
        Honest h = { 0 };
        size_t hlen = (size_t)HONEST_PAGES * ZSWAP_PAGE_SIZE;
        h.same = mmap(NULL, hlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(h.same != MAP_FAILED);
        for (unsigned i = 0; i < HONEST_PAGES; i++) {
                uint32_t *p = (uint32_t *)(h.same + (size_t)i * ZSWAP_PAGE_SIZE);
                for (size_t k = 0; k < ZSWAP_PAGE_SIZE / 4; k++)
                        p[k] = 0x5a000000u + i;
        }
        ASSERT_OK(zswap_register(hc, h.same, hlen));
        ZMsgStatusReply st;
        for (int i = 0; (st = status(&d)).stats.same_pages < HONEST_PAGES; i++) {
                ASSERT_TRUE(i < TEST_WAIT_S * 10);
                ASSERT_OK(zswap_pageout(hc, h.same, hlen));
                usleep(100000);
        }
        /* the stalled client's pages, a quarter of them on the tier */
        uint8_t *buf = td_region(sc, DATA, 0x57a1, hashes);
        page_all_out(&d, sc, buf, NPAGES / 4);
        tier_settled(&d);
        td_nbd_pause(&nbd);
        TdPageReader s = { .buf = buf, .hashes = hashes, .npages = NPAGES };
        pthread_t st_t, h_t;
        ASSERT_EQ(pthread_create(&st_t, NULL, td_page_reader, &s), 0);
        /* until it waits in a fault that does not come back: a page of the
         * tier */
        (void)td_page_reader_stall(&s, "the stalled client's reader");
        /* meanwhile the honest client reads its pages; the stalled read
         * stays one read, unanswered, all along: no read of the tier ends
         * (a read that timed out and was tried again, as when the thread
         * that serves the faults reads the tier itself and gives up after
         * a second to serve the others, counts an error) */
        uint64_t errors = status(&d).tier_read_errors;
        ASSERT_EQ(pthread_create(&h_t, NULL, honest_main, &h), 0);
        WAIT_UNTIL(atomic_load(&h.done), TEST_WAIT_S,
                   "with the stalled client's read of the tier waiting at page %zu, the other client's faults "
                   "were served for %u of %u pages", atomic_load(&s.at), atomic_load(&h.checked), HONEST_PAGES);
        ASSERT_EQ(pthread_join(h_t, NULL), 0);
        ASSERT_EQ(atomic_load(&h.bad), 0);
        st = status(&d);
        if (st.tier_read_errors != errors)
                td_log_dump(&d);
        if (st.tier_read_errors != errors)
                test_fail("the other client was served, but between reads of the stalled tier: %llu of them "
                          "gave up meanwhile", (unsigned long long)(st.tier_read_errors - errors));
        ASSERT_TRUE(!atomic_load(&s.done)); /* it was stalled all along */
        td_log_mark(&d, "the honest client read its pages; the nbd server goes on");
        td_nbd_resume(&nbd);
        ASSERT_EQ(pthread_join(st_t, NULL), 0);
        if (atomic_load(&s.bad))
                td_log_dump(&d);
        ASSERT_EQ(atomic_load(&s.bad), 0);
        zswap_disconnect(hc);
        zswap_disconnect(sc);
        td_stop(&d);
}

/* The daemon killed with pages on the server, and the server down too: the
 * next daemon starts all the same (the size is in its configuration),
 * adopts the client, whose faults on the tier wait; the server comes
 * back, the daemon connects, reads the tier's header (the pages' CRCs
 * need its id) and the faults complete with every page intact. */
static void case_nbd_down_restart(void) {
        static uint64_t hashes[NPAGES];
        TestDaemon d;

        nbd_setup();
        start_daemon(&d);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, DATA, 0xd0a1, hashes);
        page_all_out(&d, c, buf, NPAGES / 4);
        ZMsgStatusReply st = kill_and_adopt(&d, nbd_down);
        ASSERT_EQ(st.tier_state, 4 /* disconnected */);
        ASSERT_TRUE(td_log_has(&d, "starting without it"));
        Reader r = { .buf = buf, .hashes = hashes };
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, reader_main, &r), 0);
        usleep(500000);
        ASSERT_TRUE(!atomic_load(&r.done)); /* waiting on a page of the tier */
        td_nbd_start(&nbd);
        ASSERT_EQ(pthread_join(t, NULL), 0);
        ASSERT_EQ(atomic_load(&r.bad), 0);
        ASSERT_TRUE(td_log_has(&d, "(kept)"));
        write_again_and_end(&d, c, buf, hashes, 5, "after the server came back");
}

/* ---- a backing path someone else can influence ---- */

#define U_PLANTER 60011 /* a local user with write access to the backing's directory */

static char unsafe_dir[128];

static void unsafe_cleanup(void) {
        char cmd[200];
        if (unsafe_dir[0] && getpid() == main_pid) {
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", unsafe_dir);
                (void)!system(cmd);
        }
}

static void write_file(const char *path, const char *text, mode_t mode) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        ASSERT_OK(fchmod(fd, mode));
        close(fd);
}

static void assert_file(const char *path, const char *text) {
        char buf[256] = { 0 };
        struct stat st;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(fstat(fd, &st));
        ASSERT_EQ(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(text));
        close(fd);
        if (strcmp(buf, text) != 0 || st.st_size != (off_t)strlen(text))
                test_fail("%s was written by the daemon: %lld bytes now", path, (long long)st.st_size);
}

/* A daemon with its tier at `path` must refuse to start, saying `why`. If
 * it starts anyway it is given time to write its tier header, then
 * stopped: the caller's checks of the files then show what it wrote. */
static void expect_refused(const char *path, const char *why) {
        char log[192], sock[160], cmd[1024];
        snprintf(log, sizeof(log), "%s/daemon.log", unsafe_dir);
        snprintf(sock, sizeof(sock), "%s/zswapd.sock", unsafe_dir);
        write_conf(path, "size = 16M\n");
        snprintf(cmd, sizeof(cmd), "exec %s --socket %s --config %s >%s 2>&1", td_daemon_path(), sock, conf_path, log);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
                _exit(127);
        }
        int st = 0;
        pid_t w = 0;
        for (int i = 0; i < 3000 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
                usleep(10000);
        if (w == 0) { /* it started: the header is written at once */
                sleep(1);
                kill(pid, SIGTERM);
                waitpid(pid, &st, 0);
                fprintf(stderr, "the daemon started on %s\n", path);
        } else {
                ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
        }
        char text[8192] = { 0 };
        int fd = open(log, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(read(fd, text, sizeof(text) - 1) >= 0);
        close(fd);
        if (!strstr(text, why))
                test_fail("the daemon did not refuse %s with '%s'; its log:\n%s", path, why, text);
}

/* As U_PLANTER: a symlink, or a file of its own, at `link`. */
static void plant(const char *link, const char *target) {
        pid_t pid = td_fork_as(U_PLANTER, 0);
        int st;
        if (pid == 0) {
                int r = target ? symlink(target, link) : open(link, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                _exit(r < 0 ? 91 : 0);
        }
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The backing path lies in a directory others may write to (sticky and
 * world-writable, as /tmp), or names a file that is not the daemon's
 * own: root must never follow a planted symlink or hard link into
 * another file, write into a file another user can read, nor overwrite
 * data that is not a tier. Each refusal names its reason; every file
 * keeps its bytes. */
static void case_unsafe_backing(void) {
        char victim[192], path[192], link2[192];

        snprintf(unsafe_dir, sizeof(unsafe_dir), "/var/tmp/zswap-test-unsafe-%d", (int)getpid());
        ASSERT_OK(mkdir(unsafe_dir, 0755));
        atexit(unsafe_cleanup);
        ASSERT_OK(chmod(unsafe_dir, 01777));
        snprintf(victim, sizeof(victim), "%s/root-secret", unsafe_dir);
        write_file(victim, "root's own file\n", 0600);
        snprintf(path, sizeof(path), "%s/tier.img", unsafe_dir);

        /* a symlink a user planted at the path, to root's file */
        plant(path, victim);
        expect_refused(path, "is a symlink that root did not make");
        assert_file(victim, "root's own file\n");
        ASSERT_OK(unlink(path));

        /* a second name of root's file (a hard link) */
        ASSERT_OK(link(victim, path));
        expect_refused(path, "with one link");
        assert_file(victim, "root's own file\n");
        ASSERT_OK(unlink(path));

        /* a file the user made there first, to read the tier from */
        plant(path, NULL);
        expect_refused(path, "must be a file of the daemon's user");
        ASSERT_OK(unlink(path));

        /* root's own file, 0600, holding data: a mistake, not a tier */
        write_file(path, "not a tier\n", 0600);
        expect_refused(path, "holds data that is not a zswapd tier");
        assert_file(path, "not a tier\n");
        ASSERT_OK(unlink(path));

        /* a symlink root made in a directory only root may write: followed
         * (a tier named through /dev/disk/by-id works the same way) */
        snprintf(link2, sizeof(link2), "%s/safe", unsafe_dir);
        ASSERT_OK(mkdir(link2, 0755));
        snprintf(link2, sizeof(link2), "%s/safe/tier.img", unsafe_dir);
        ASSERT_OK(symlink(path, link2));
        TestDaemon d;
        write_conf(link2, "size = 16M\n");
        start_daemon(&d);
        ASSERT_TRUE(td_log_has(&d, "second tier: file"));
        td_stop(&d);
        struct stat sb;
        ASSERT_OK(stat(path, &sb));
        ASSERT_EQ(sb.st_size, 16 << 20);
}

/* ---- fork-hold ---- */

#define HOLD_PAGES 256u
static _Atomic bool stop_in_child;

/* Registered before the library's own handler (it registers on the first
 * connect), so it runs first in the child: the child stops before it can
 * attach, and the daemon holds its parent meanwhile. */
static void child_stops(void) {
        if (atomic_load(&stop_in_child)) {
                /* a test that fails leaves no stopped child (holding its
                 * output open, so that meson waits for it) */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                raise(SIGSTOP);
        }
}

static void case_fork_hold(void) {
        const size_t plen = HOLD_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t phashes[HOLD_PAGES], fhashes[NPAGES];
        int go[2], done[2], st;
        TestDaemon d;

#if defined(__SANITIZE_THREAD__)
        test_skip("fork-hold: not under TSan (a child of a multi-threaded fork starts threads)");
#endif
        ASSERT_OK(pthread_atfork(NULL, NULL, child_stops));
        backing_file("64M");
        start_daemon(&d);
        /* the filler: a client of its own whose data is four times the
         * pool's bound, paged out when told */
        ASSERT_OK(pipe(go));
        ASSERT_OK(pipe(done));
        pid_t filler = fork();
        ASSERT_TRUE(filler >= 0);
        if (filler == 0) {
                char b;
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                struct zswap_client *fc = td_connect(&d);
                uint8_t *fbuf = td_region(fc, DATA, 0xf111, fhashes);
                if (read(go[0], &b, 1) != 1)
                        _exit(2);
                int n = zswap_pageout(fc, fbuf, DATA);
                (void)!write(done[1], &b, 1);
                if (read(go[0], &b, 1) < 0)
                        _exit(3);
                zswap_disconnect(fc);
                _exit(n > 0 ? 0 : 1);
        }

        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, plen, 0x4f1d, phashes);
        ZMsgStatusReply s0;
        for (uint64_t t0 = now_ns();; usleep(20000)) {
                ASSERT_TRUE(zswap_pageout(c, buf, plen) >= 0);
                s0 = status(&d);
                if (s0.stats.stored_pages + s0.stats.same_pages >= HOLD_PAGES * 9 / 10)
                        break;
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        test_fail("%llu of the parent's %u pages evicted after %d s",
                                  (unsigned long long)(s0.stats.stored_pages + s0.stats.same_pages), HOLD_PAGES,
                                  TEST_WAIT_S);
        }
        uint64_t tp, tb;
        td_clients_tier(&d, getpid(), &tp, &tb);
        ASSERT_EQ(tp, 0); /* all in RAM: the pool is far under its bound */
        /* the parent's pages a second older than the filler's: the
         * writer takes the oldest first */
        usleep(1100000);

        atomic_store(&stop_in_child, true);
        pid_t child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0) {
                size_t bad = verify_pages(buf, plen, phashes);
                fprintf(stderr, "fork-hold child: %zu pages differ\n", bad);
                _exit(bad ? 1 : 0);
        }
        atomic_store(&stop_in_child, false);
        ASSERT_EQ(waitpid(child, &st, WUNTRACED), child);
        ASSERT_TRUE(WIFSTOPPED(st));

        /* the pool fills past the tier's mark: the writer runs */
        uint64_t written0 = status(&d).tier_written_pages;
        char b = 1;
        ASSERT_EQ(write(go[1], &b, 1), 1);
        ASSERT_EQ(read(done[0], &b, 1), 1);
        ZMsgStatusReply s1;
        /* a pass that takes anything takes the oldest first: the parent's
         * pages, were they the writer's to take */
        WAIT_UNTIL((s1 = status(&d)).tier_written_pages > written0, TEST_WAIT_S, "the writer wrote nothing");
        tier_settled(&d);
        if (td_log_has(&d, "did not attach within"))
                /* the hold lasts 10 s at most: the writer may take the
                 * parent's pages after it, as it should */
                test_skip("fork-hold: the parent's hold ended before the writer was done: this machine is too slow "
                          "for the case");
        td_clients_tier(&d, getpid(), &tp, &tb);
        if (tp != 0)
                test_fail("the writer took %llu pages of a parent held for its fork child", (unsigned long long)tp);

        /* the daemon dies before the child attaches: the child restores
         * itself from its parent's store */
        ASSERT_EQ(write(go[1], &b, 1), 1);
        ASSERT_EQ(waitpid(filler, &st, 0), filler);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        td_kill(&d);
        ASSERT_OK(kill(child, SIGCONT));
        ASSERT_EQ(waitpid(child, &st, 0), child);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("the fork child: status %#x (%s)", st,
                          WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? "killed by its library" : "pages differ");
        td_respawn(&d);
        size_t bad = verify_pages(buf, plen, phashes);
        if (bad)
                test_fail("in the parent, adopted after the fork: %zu of %u pages differ", bad, HOLD_PAGES);
        zswap_disconnect(c);
        td_stop(&d);
}

/* A page the daemon could not give back is poisoned: its read is a
 * SIGBUS. Outside the corrupt case (which catches its own) that is a lost
 * page: say which, and show the daemon's log (not async-signal-safe, but
 * the test is over). */
static void on_lost_page(int sig, siginfo_t *si, void *uc) {
        (void)uc;
        fprintf(stderr, "signal %d reading %p: a page was lost (poisoned)\n", sig, si->si_addr);
        if (cur)
                td_log_dump(cur);
        _exit(1);
}

int main(int argc, char **argv) {
        static const struct {
                const char *name;
                void (*fn)(void);
        } cases[] = {
                { "file", case_file },       { "blockdev", case_blockdev }, { "full", case_full },       { "write-error", case_write_error },
                { "read-error", case_read_error }, { "corrupt", case_corrupt }, { "pool-corrupt", case_pool_corrupt },
                { "forge", case_forge },
                { "restart", case_restart },
                { "nbd", case_nbd },         { "nbd-restart", case_nbd_restart },
                { "nbd-down-restart", case_nbd_down_restart }, { "unsafe-backing", case_unsafe_backing },
                { "fork-hold", case_fork_hold },  { "nbd-stall", case_nbd_stall },
        };

        test_require_root();
        main_pid = getpid();
        struct sigaction sa = { .sa_sigaction = on_lost_page, .sa_flags = SA_SIGINFO };
        sigaction(SIGBUS, &sa, NULL);
        atexit(cleanup);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
                        continue;
                fprintf(stderr, "== %s\n", cases[i].name);
                cases[i].fn();
        }
        return 0;
}
