/*
 * test-refill: pages come back ahead of use (reclaim.md, "Refill").
 *
 *   limit   a client's limit pushes most of its 32 MiB out; the limit is
 *           raised: pages come back without a fault, never above the new
 *           limit; the limit is removed: the rest comes back. Then every
 *           page is read and checked, and the reads bring nothing back:
 *           it is all in.
 *   pageout a client pages half its memory out itself, then gets a limit
 *           that is removed: the refill brings back what the limit took,
 *           never the pages the client paged out.
 *   midway  a client's limit is removed while the eviction it started
 *           still compresses: the pages of its lanes in flight come back
 *           too (the refill measures the room once they are counted).
 *   pressure the pressure controller (min_free 100 %) holds part of a
 *           client out; once memory is plentiful (min_free 1M) it lowers
 *           its target and the pages come back a step a period.
 *   letgo   the same, but the controller is turned off (min_free 0):
 *           everything it held comes back.
 *   wake    a client is paged out while it does nothing; after
 *           refill_quiet it touches one page, and the pages taken while it
 *           was quiet come back before it reads them (checked whole).
 *   busy    a client keeps writing one half of its memory while the other
 *           half is paged out; a touch of the paged-out half after
 *           refill_quiet brings nothing back ahead: a process busy in its
 *           resident memory did not wake (without the write check, all
 *           of the paged-out half would come back).
 *   off     with refill=no the same wake brings nothing back: every page
 *           read brings one page back (a fault or fault-around).
 *
 * Without the refill the limit and wake cases fail on what their reads
 * bring back (each evicted page, by its fault or fault-around).
 * TEST_REFILL_CASES (say "limit,wake") runs only the cases it names.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "protocol.h"

#define LEN (32u << 20)
#define NPAGES (LEN / ZSWAP_PAGE_SIZE)

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct zswap_stats client_stats(struct zswap_client *c) {
        struct zswap_stats s;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        return s;
}

/* Pages the client has held out (stored or same-filled). */
static uint64_t held_pages(struct zswap_client *c) {
        struct zswap_stats s = client_stats(c);
        return s.stored_pages + s.same_pages;
}

/* A daemon with args, a client of it, its region filled (seed) and hashed. */
static uint8_t *start(TestDaemon *d, const char *args, struct zswap_client **c, uint64_t seed, uint64_t *hashes) {
        td_start(d, args);
        *c = td_connect(d);
        return td_region(*c, LEN, seed, hashes);
}

/* Page the second half of the region out; returns the pages held then. */
static uint64_t pageout_half(struct zswap_client *c, uint8_t *buf) {
        ASSERT_TRUE(td_pageout_want(c, buf + LEN / 2, LEN / 2, NPAGES / 2 * 9 / 10) > 0);
        return held_pages(c);
}

static uint64_t refilled(const TestDaemon *d) {
        ZMsgStatusReply st;
        td_status(d, &st);
        return st.refilled;
}

/* Wait until the client's held pages are at most held (the refill took
 * the rest back); fails after TEST_WAIT_S, saying how far it got. */
static void wait_held(const TestDaemon *d, struct zswap_client *c, uint64_t held, const char *what) {
        double t0 = now_s();
        for (;;) {
                struct zswap_stats s = client_stats(c);
                if (s.stored_pages + s.same_pages + s.staged_pages <= held)
                        return;
                if (now_s() - t0 > TEST_WAIT_S)
                        test_fail("%s: %llu pages still held after %d s (want %llu or fewer), %llu refilled", what,
                                  (unsigned long long)(s.stored_pages + s.same_pages + s.staged_pages), TEST_WAIT_S,
                                  (unsigned long long)held, (unsigned long long)refilled(d));
                usleep(50 * 1000);
        }
}

/* Wait until the limit is met and nothing is in flight. */
static void wait_limit(struct zswap_client *c, uint64_t bytes) {
        double t0 = now_s();
        for (;;) {
                struct zswap_stats s = client_stats(c);
                if (s.resident_bytes <= bytes && s.staged_pages == 0)
                        return;
                if (now_s() - t0 > TEST_WAIT_S)
                        test_fail("limit %llu: resident %llu after %d s", (unsigned long long)bytes,
                                  (unsigned long long)s.resident_bytes, TEST_WAIT_S);
                usleep(50 * 1000);
        }
}

/* Pages of the region present in our page tables. */
static uint64_t present_pages(const uint8_t *buf) {
        static uint64_t pm[NPAGES];
        FILE *f = fopen("/proc/self/pagemap", "re");
        uint64_t n = 0;
        ASSERT_TRUE(f != NULL);
        ASSERT_EQ(pread(fileno(f), pm, sizeof(pm), (off_t)((uintptr_t)buf / ZSWAP_PAGE_SIZE) * 8), (ssize_t)sizeof(pm));
        fclose(f);
        for (size_t i = 0; i < NPAGES; i++)
                n += (pm[i] >> 63) & 1;
        return n;
}

/* Read and check every page; returns the pages the reads brought back
 * (faults, and pages fault-around installed ahead of them). */
static uint64_t read_all(struct zswap_client *c, const uint8_t *buf, const uint64_t *hashes) {
        struct zswap_stats a = client_stats(c), b;
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);
        b = client_stats(c);
        return b.faults - a.faults + b.prefetches - a.prefetches;
}

static void test_limit(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set interval=100ms", &c, 7, hashes);
        ASSERT_OK(zswap_set_limit(c, 4 << 20));
        wait_limit(c, 4 << 20);
        usleep(500 * 1000); /* a few ticks more: it must stop at the limit */
        struct zswap_stats s = client_stats(c);
        uint64_t held = held_pages(c), r0 = refilled(&d), e0 = s.reclaim_evictions;
        uint64_t present = present_pages(buf);
        fprintf(stderr, "limit 4M: %llu pages held, %llu present, resident %llu KiB\n", (unsigned long long)held,
                (unsigned long long)present, (unsigned long long)s.resident_bytes >> 10);
        ASSERT_TRUE(held > NPAGES / 2);
        /* the limit takes what is over it, not everything: counts that
         * came back while its lanes were moving must not want their pages
         * again */
        ASSERT_TRUE(present >= (4u << 20) / ZSWAP_PAGE_SIZE * 3 / 4);

        /* raised: up to the new limit less a sixteenth comes back */
        ASSERT_OK(zswap_set_limit(c, 16 << 20));
        uint64_t room = (16u << 20) / ZSWAP_PAGE_SIZE * 15 / 16 - (4u << 20) / ZSWAP_PAGE_SIZE;
        wait_held(&d, c, held - room / 2, "limit raised to 16M");
        usleep(500 * 1000); /* a few ticks more: it must stop under the limit */
        present = present_pages(buf);
        uint64_t e1 = client_stats(c).reclaim_evictions;
        fprintf(stderr, "limit 16M: %llu refilled, %llu pages held, %llu present, %llu evicted since the raise\n",
                (unsigned long long)(refilled(&d) - r0), (unsigned long long)held_pages(c), (unsigned long long)present,
                (unsigned long long)(e1 - e0));
        ASSERT_TRUE(present * ZSWAP_PAGE_SIZE <= 16u << 20);
        ASSERT_TRUE(refilled(&d) - r0 >= room / 2);
        /* room measured right takes nothing back out: a count that saw
         * part of a refill, then the refill's whole, would */
        ASSERT_EQ(e1 - e0, 0);

        /* removed: everything comes back; the reads find it in */
        ASSERT_OK(zswap_set_limit(c, 0));
        wait_held(&d, c, 0, "limit removed");
        uint64_t faults = read_all(c, buf, hashes);
        fprintf(stderr, "no limit: %llu refilled in all, reading every page brought back %llu\n",
                (unsigned long long)(refilled(&d) - r0), (unsigned long long)faults);
        ASSERT_EQ(faults, 0);
        ASSERT_TRUE(refilled(&d) - r0 >= held);
        zswap_disconnect(c);
        td_stop(&d);
}

static void test_pageout(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set interval=100ms", &c, 19, hashes);
        /* the second half out on the client's own request */
        uint64_t asked = pageout_half(c, buf);
        /* then a limit takes most of the first half */
        ASSERT_OK(zswap_set_limit(c, 4 << 20));
        wait_limit(c, 4 << 20);
        uint64_t held = held_pages(c), r0 = refilled(&d);
        ASSERT_OK(zswap_set_limit(c, 0));
        wait_held(&d, c, asked, "limit removed");
        usleep(500 * 1000); /* a few ticks more: the asked-for pages must stay out */
        uint64_t still = held_pages(c);
        fprintf(stderr, "pageout: %llu pages paged out on request, %llu held under the limit, %llu refilled, %llu still held\n",
                (unsigned long long)asked, (unsigned long long)held, (unsigned long long)(refilled(&d) - r0),
                (unsigned long long)still);
        ASSERT_TRUE(still >= asked);
        ASSERT_TRUE(refilled(&d) - r0 >= held - asked);
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);
        zswap_disconnect(c);
        td_stop(&d);
}

/*
 * The limit removed as soon as its eviction has pages in flight: every
 * page comes back. Whether the removal met lanes in flight is seen
 * after the fact (the policies' evictions grew after the removal
 * returned); a round that did not is run again, 10 rounds at most (on
 * a machine too busy to ever catch one, the last round's checks stand).
 */
static void test_midway(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set interval=100ms", &c, 29, hashes);
        for (int round = 1;; round++) {
                ASSERT_OK(zswap_set_limit(c, 4 << 20));
                double t0 = now_s();
                struct zswap_stats s;
                for (;;) {
                        s = client_stats(c);
                        if (s.staged_pages > 0 || (s.resident_bytes <= 4u << 20 && s.stored_pages > 0))
                                break; /* in flight, or (we were not looking) done */
                        if (now_s() - t0 > TEST_WAIT_S)
                                test_fail("limit 4M: nothing evicted after %d s", TEST_WAIT_S);
                        usleep(1000);
                }
                ASSERT_OK(zswap_set_limit(c, 0));
                struct zswap_stats after = client_stats(c);
                wait_held(&d, c, 0, "limit removed midway");
                uint64_t faults = read_all(c, buf, hashes);
                struct zswap_stats end = client_stats(c);
                bool hit = end.reclaim_evictions > after.reclaim_evictions;
                fprintf(stderr, "midway, round %d: %llu pages in flight at the removal, %llu evicted after it, %llu "
                                "refilled, reading every page brought back %llu\n",
                        round, (unsigned long long)s.staged_pages,
                        (unsigned long long)(end.reclaim_evictions - after.reclaim_evictions),
                        (unsigned long long)refilled(&d), (unsigned long long)faults);
                ASSERT_EQ(faults, 0);
                if (hit || round == 10)
                        break;
        }
        zswap_disconnect(c);
        td_stop(&d);
}

/* The controller (min_free 100 %) holds part of a client out; then
 * `zswapctl set min_free` to value: every page comes back. */
static void pressure_then(const char *value, uint64_t seed) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];
        char cmd[64];

        /* more free memory than the machine has: the controller holds out more each period */
        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set min_free=100% --set pressure_step=25 --set pressure_period=1s --set interval=100ms", &c, seed, hashes);
        double t0 = now_s();
        for (;;) {
                uint64_t h = held_pages(c);
                if (h >= NPAGES / 5)
                        break;
                if (now_s() - t0 > TEST_WAIT_S)
                        test_fail("pressure: %llu pages held after %d s", (unsigned long long)h, TEST_WAIT_S);
                usleep(100 * 1000);
        }
        snprintf(cmd, sizeof(cmd), "set min_free %s", value);
        ASSERT_EQ(td_ctl(&d, cmd), 0);
        uint64_t held = held_pages(c);
        wait_held(&d, c, 0, cmd);
        uint64_t back = read_all(c, buf, hashes);
        fprintf(stderr, "min_free %s: %llu pages held, %llu refilled; reading every page brought back %llu\n", value,
                (unsigned long long)held, (unsigned long long)refilled(&d), (unsigned long long)back);
        ASSERT_EQ(back, 0);
        ASSERT_TRUE(refilled(&d) >= held);
        zswap_disconnect(c);
        td_stop(&d);
}

/* memory is plentiful now: the target comes down a step a period */
static void test_pressure(void) {
        pressure_then("1M", 23);
}

/* the controller turned off: what it held comes back */
static void test_letgo(void) {
        pressure_then("0", 31);
}

/* Page the whole region out while the client is quiet, wait refill_quiet,
 * touch one page: returns the pages held then. */
static uint64_t sleep_and_wake(TestDaemon *d, struct zswap_client *c, uint8_t *buf) {
        ZMsgStatusReply st;

        /* a first write scan, so that the writes that filled the region
         * are behind us: the client is quiet from then on */
        ASSERT_TRUE(td_pageout_want(c, buf, ZSWAP_PAGE_SIZE, 1) > 0);
        td_status(d, &st);
        uint64_t scans = st.write_scans;
        double t0 = now_s();
        do {
                usleep(50 * 1000);
                td_status(d, &st);
                if (now_s() - t0 > TEST_WAIT_S)
                        test_fail("no write scan after %d s", TEST_WAIT_S);
        } while (st.write_scans < scans + 2);
        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
        uint64_t held = held_pages(c);
        usleep(1300 * 1000); /* refill_quiet (1 s) and a tick or three */
        (void)*(volatile uint8_t *)(buf + LEN / 2); /* wakes */
        return held;
}

static void test_wake(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set interval=100ms --set refill_quiet=1s --set write_scan=100ms", &c, 11, hashes);
        uint64_t r0 = refilled(&d);
        uint64_t held = sleep_and_wake(&d, c, buf);
        /* the woken page itself was a fault; the rest come back */
        wait_held(&d, c, held / 10, "woken");
        uint64_t faults = read_all(c, buf, hashes);
        fprintf(stderr, "wake: %llu pages held, %llu refilled, reading every page brought back %llu\n",
                (unsigned long long)held, (unsigned long long)(refilled(&d) - r0), (unsigned long long)faults);
        ASSERT_TRUE(refilled(&d) - r0 >= held * 9 / 10);
        ASSERT_TRUE(faults <= held / 10);
        zswap_disconnect(c);
        td_stop(&d);
}

/* Rewrite a byte of every 16th page of the first half with its own value. */
static void rewrite_half(uint8_t *buf) {
        for (size_t i = 0; i < NPAGES / 2; i += 16) {
                volatile uint8_t *b = buf + i * ZSWAP_PAGE_SIZE + 64;
                *b = *b;
        }
}

static void test_busy(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set interval=100ms --set refill_quiet=1s --set write_scan=100ms", &c, 17, hashes);
        uint64_t held = pageout_half(c, buf);
        /* 1.5 s (refill_quiet and a half) of writing the first half (each page
         * rewritten with its own bytes), then a touch of the second, then
         * ticks in which a refill would start, writing on */
        double t0 = now_s();
        while (now_s() - t0 < 1.5)
                rewrite_half(buf);
        (void)*(volatile uint8_t *)(buf + LEN / 2);
        for (int i = 0; i < 10; i++) {
                rewrite_half(buf);
                usleep(50 * 1000);
        }
        fprintf(stderr, "busy: %llu pages held, %llu still held, %llu refilled\n", (unsigned long long)held,
                (unsigned long long)held_pages(c), (unsigned long long)refilled(&d));
        ASSERT_EQ(refilled(&d), 0);
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);
        zswap_disconnect(c);
        td_stop(&d);
}

static void test_off(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        struct zswap_client *c;
        uint8_t *buf = start(&d, "--set interval=100ms --set refill_quiet=1s --set write_scan=100ms --set refill=no", &c, 13, hashes);
        uint64_t held = sleep_and_wake(&d, c, buf);
        usleep(500 * 1000); /* ticks in which a refill would start */
        uint64_t faults = read_all(c, buf, hashes);
        fprintf(stderr, "refill=no: %llu pages held, %llu refilled, reading every page brought back %llu\n",
                (unsigned long long)held, (unsigned long long)refilled(&d), (unsigned long long)faults);
        ASSERT_EQ(refilled(&d), 0);
        ASSERT_TRUE(faults >= held - 1);
        zswap_disconnect(c);
        td_stop(&d);
}

int main(void) {
        static const struct {
                const char *name;
                void (*fn)(void);
        } cases[] = {
                { "limit", test_limit }, { "pageout", test_pageout }, { "midway", test_midway },
                { "pressure", test_pressure }, { "letgo", test_letgo }, { "wake", test_wake },
                { "busy", test_busy }, { "off", test_off },
        };

        /* TEST_REFILL_CASES: some of them (comma-separated), all if unset */
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                if (test_case_selected("TEST_REFILL_CASES", cases[i].name)) {
                        fprintf(stderr, "== %s\n", cases[i].name);
                        cases[i].fn();
                }
        return 0;
}
