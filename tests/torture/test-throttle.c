/*
 * test-throttle: a client whose threads get almost no CPU loses no page,
 * however long its agent stays stuck in the middle of a page move, and the
 * daemon goes on serving other clients meanwhile.
 *
 * Three client processes run the same rounds against one daemon that
 * evicts from them all the time (a resident limit of one page, and a
 * PAGEOUT every other round): map 1 MiB, write it, register it, check
 * every page (half the rounds), unmap it while its pages are in flight,
 * map new memory at the same address at once (one mmap(MAP_FIXED) over
 * it, so that no other thread of the process, such as the library's agent
 * mapping its staging area, can take the address in between), write it,
 * check every page. The mmap returns once the daemon has read the UNMAP
 * event of the old pages, so a page move the agent began before and
 * finishes after would take a page of the new mapping
 * (docs/page-lifecycle.md, "munmap and a move in flight"):
 *
 * - "quota" runs in a cgroup whose CPU quota is 7 % of one CPU (cgroup v2
 *   cpu.max, or v1's cpu.cfs_quota_us): all its threads stop for most of
 *   each 100 ms period, the agent in the middle of a move among them;
 * - "stopped" is stopped (SIGSTOP) and continued at random, for 1-50 ms
 *   mostly and now and then for a second;
 * - "neighbour" runs freely: while "stopped" is stopped for a second, it
 *   must complete rounds (faults served, pages evicted) all the same.
 *
 * Every page of every mapping is checked: none may come back with another
 * mapping's content (stale) or without its own (lost). The run lasts
 * TEST_THROTTLE_SECONDS (60) and then until each client has done 20
 * rounds and "stopped" has been stopped for a second, with a safety bound
 * that reports how far it got. The moves the daemon revoked are reported:
 * an agent caught in the middle of a move is rare here (none in some
 * runs, one in others, at any time), so the run does not wait for one;
 * test-dos's "stuck" case holds a move on purpose and checks the
 * revocation itself.
 * Exit 77 if there is no CPU controller to throttle with (after the
 * stopped client's part has run).
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "protocol.h"

#define LEN (1u << 20)
#define NPAGES (LEN / ZSWAP_PAGE_SIZE)
#define QUOTA_PCT 7
#define MIN_ROUNDS 20
#define SAFETY_S 600
#define NEIGHBOUR_ROUNDS 2 /* rounds the neighbour completes while "stopped" is stopped for long */

enum { QUOTA, STOPPED, NEIGHBOUR, NCLIENTS };
static const char *const names[NCLIENTS] = { "quota", "stopped", "neighbour" };

typedef struct Shared {
        _Atomic uint64_t rounds[NCLIENTS], checked[NCLIENTS], lost[NCLIENTS], stale[NCLIENTS], wrong[NCLIENTS];
        _Atomic bool stop;
} Shared;

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Page i of a mapping: real heap data, stamped with who wrote it, for
 * which round and which mapping of the round (gen), so a page of another
 * mapping is told apart from a lost one. */
static void stamp_pages(uint8_t *base, unsigned who, uint64_t round, unsigned gen, uint64_t *hashes) {
        fill_pages(base, LEN, round * 4 + gen + who * 1000003);
        for (size_t i = 0; i < NPAGES; i++) {
                uint64_t *w = (uint64_t *)(base + i * ZSWAP_PAGE_SIZE);
                w[0] = 0x7a73776170746872ull; /* "zswapthr" */
                w[1] = round << 24 | (uint64_t)gen << 20 | i;
                w[2] = who;
        }
        hash_pages(base, LEN, hashes);
}

/* Check every page: how many are lost (another content, not an older
 * mapping's) and how many stale (an older mapping's stamp). */
static void check_pages(Shared *sh, unsigned who, const uint8_t *base, const uint64_t *hashes, uint64_t round,
                        unsigned gen) {
        unsigned lost = 0, stale = 0, wrong = 0;

        for (size_t i = 0; i < NPAGES; i++) {
                const uint8_t *p = base + i * ZSWAP_PAGE_SIZE;
                if (page_hash(p) == hashes[i])
                        continue;
                const uint64_t *w = (const uint64_t *)p;
                uint64_t want = round << 24 | (uint64_t)gen << 20 | i;
                if (w[0] == 0x7a73776170746872ull && w[1] != want && (w[1] & 0xfffff) == i)
                        stale++;
                else if (w[0] == 0 && w[1] == 0)
                        lost++;
                else
                        wrong++;
                if (lost + stale + wrong <= 5)
                        fprintf(stderr, "%s: round %llu mapping %u page %zu: %s (stamp %#llx)\n", names[who],
                                (unsigned long long)round, gen, i,
                                w[0] == 0x7a73776170746872ull && w[1] != want ? "another mapping's content"
                                : w[0] == 0 && w[1] == 0                       ? "zeros"
                                                                               : "wrong content",
                                (unsigned long long)w[1]);
        }
        atomic_fetch_add(&sh->checked[who], NPAGES);
        atomic_fetch_add(&sh->lost[who], lost);
        atomic_fetch_add(&sh->stale[who], stale);
        atomic_fetch_add(&sh->wrong[who], wrong);
}

static void spin(uint64_t *rng, unsigned max) {
        for (volatile unsigned i = 0, n = (unsigned)(xorshift(rng) % max); i < n; i++)
                ;
}

static void run_client(TestDaemon *d, Shared *sh, unsigned who, const char *cgroup) {
        static uint64_t hashes[NPAGES];
        uint64_t rng = who * 7919 + 17;

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* stopped or not, gone with the test */
        /* before the library starts its agent: every thread in it */
        if (cgroup && !td_cgroup_join(cgroup, getpid()))
                test_fail("cannot join the cgroup %s: %m", cgroup);
        struct zswap_client *c = td_connect(d);
        ASSERT_OK(zswap_set_limit(c, ZSWAP_PAGE_SIZE));
        uint8_t *base = test_map(LEN);
        for (uint64_t r = 0; !atomic_load(&sh->stop); r++) {
                /* managed memory, evicted all the time */
                stamp_pages(base, who, r, 0, hashes);
                ASSERT_OK(zswap_register(c, base, LEN));
                if (r & 1)
                        ASSERT_OK(zswap_pageout(c, base, LEN));
                spin(&rng, 200000);
                if (r & 2)
                        check_pages(sh, who, base, hashes, r, 0);
                /* gone while its pages are in flight, and new memory at
                 * the same place at once */
                uint8_t *p = mmap(base, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
                ASSERT_TRUE(p == base);
                stamp_pages(base, who, r, 1, hashes);
                spin(&rng, 100000);
                check_pages(sh, who, base, hashes, r, 1);
                atomic_fetch_add(&sh->rounds[who], 1);
        }
        zswap_disconnect(c);
        exit(0);
}

static uint64_t revoked(const TestDaemon *d) {
        struct ZMsgStatusReply st;
        td_status(d, &st);
        return st.moves_revoked;
}

static void report(const Shared *sh, const TestDaemon *d) {
        for (unsigned i = 0; i < NCLIENTS; i++)
                fprintf(stderr, "%-9s %6llu rounds, %8llu pages checked: %llu lost, %llu stale, %llu wrong\n", names[i],
                        (unsigned long long)sh->rounds[i], (unsigned long long)sh->checked[i],
                        (unsigned long long)sh->lost[i], (unsigned long long)sh->stale[i],
                        (unsigned long long)sh->wrong[i]);
        fprintf(stderr, "moves revoked by the daemon: %llu\n", (unsigned long long)revoked(d));
}

int main(void) {
        TestDaemon d;
        unsigned seconds = test_env_uint("TEST_THROTTLE_SECONDS", 60);
        char cgdir[512];
        pid_t pids[NCLIENTS] = { 0 };
        uint64_t rng = (uint64_t)getpid();
        unsigned long_stops = 0;

        test_require_root();
        bool quota = td_quota_cgroup(QUOTA_PCT, cgdir, sizeof(cgdir));
        if (!quota)
                fprintf(stderr, "no cgroup cpu controller to throttle with: the quota client does not run\n");
        Shared *sh = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(sh != MAP_FAILED);
        td_start_logged(&d, "--set interval=10ms --set write_scan=0");
        for (unsigned i = 0; i < NCLIENTS; i++) {
                if (i == QUOTA && !quota)
                        continue;
                pids[i] = fork();
                ASSERT_TRUE(pids[i] >= 0);
                if (pids[i] == 0)
                        run_client(&d, sh, i, i == QUOTA ? cgdir : NULL);
        }

        uint64_t t0 = mono_ms(), next_long = t0 + 5000;
        for (;;) {
                uint64_t now = mono_ms();
                bool enough = now - t0 >= seconds * 1000ull && long_stops > 0;
                for (unsigned i = 0; i < NCLIENTS; i++)
                        enough &= !pids[i] || sh->rounds[i] >= MIN_ROUNDS;
                if (enough)
                        break;
                if (now - t0 > SAFETY_S * 1000ull) {
                        report(sh, &d);
                        test_fail("not done after %u s (want %u s, %u rounds each, a long stop)",
                                  SAFETY_S, seconds, MIN_ROUNDS);
                }
                /* stopped at random, with its agent wherever it is */
                ASSERT_OK(kill(pids[STOPPED], SIGSTOP));
                if (now >= next_long) {
                        /* for long: the other clients are served meanwhile */
                        uint64_t n0 = sh->rounds[NEIGHBOUR], s0 = mono_ms();
                        while (sh->rounds[NEIGHBOUR] < n0 + NEIGHBOUR_ROUNDS) {
                                if (mono_ms() - s0 > SAFETY_S * 1000ull) {
                                        report(sh, &d);
                                        test_fail("the neighbour did %llu rounds in %u s while \"stopped\" was stopped",
                                                  (unsigned long long)(sh->rounds[NEIGHBOUR] - n0), SAFETY_S);
                                }
                                sleep_ms(10);
                        }
                        sleep_ms(1000);
                        long_stops++;
                        next_long = mono_ms() + 5000;
                } else
                        sleep_ms(1 + (unsigned)(xorshift(&rng) % 50));
                ASSERT_OK(kill(pids[STOPPED], SIGCONT));
                sleep_ms(1 + (unsigned)(xorshift(&rng) % 50));
        }
        atomic_store(&sh->stop, true);
        for (unsigned i = 0; i < NCLIENTS; i++) {
                int status;
                if (!pids[i])
                        continue;
                ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        report(sh, &d);
                        td_log_dump(&d);
                        test_fail("client %s ended with status %#x", names[i], status);
                }
        }
        report(sh, &d);
        fprintf(stderr, "\"stopped\" was stopped for a second %u times\n", long_stops);
        if (quota)
                td_cgroup_remove(cgdir);
        uint64_t bad = 0;
        for (unsigned i = 0; i < NCLIENTS; i++)
                bad += sh->lost[i] + sh->stale[i] + sh->wrong[i];
        if (bad)
                td_log_dump(&d);
        ASSERT_EQ(bad, 0);
        td_stop(&d);
        if (!quota)
                test_skip("the stopped client passed; no cgroup cpu controller for the quota client");
        return 0;
}
