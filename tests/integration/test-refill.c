/*
 * test-refill: pages come back ahead of use (reclaim.md, "Refill").
 *
 *   limit   a client's limit pushes most of its 32 MiB out; the limit is
 *           raised: pages come back without a fault, never above the new
 *           limit; the limit is removed: the rest comes back. Then every
 *           page is read and checked, and the reads bring nothing back:
 *           it is all in.
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

        td_start(&d, "--set interval=100ms");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, LEN, 7, hashes);
        ASSERT_OK(zswap_set_limit(c, 4 << 20));
        wait_limit(c, 4 << 20);
        struct zswap_stats s = client_stats(c);
        uint64_t held = s.stored_pages + s.same_pages, r0 = refilled(&d);
        fprintf(stderr, "limit 4M: %llu pages held, resident %llu KiB\n", (unsigned long long)held,
                (unsigned long long)s.resident_bytes >> 10);
        ASSERT_TRUE(held > NPAGES / 2);

        /* raised: up to the new limit less a sixteenth comes back */
        ASSERT_OK(zswap_set_limit(c, 16 << 20));
        uint64_t room = (16u << 20) / ZSWAP_PAGE_SIZE * 15 / 16 - (4u << 20) / ZSWAP_PAGE_SIZE;
        wait_held(&d, c, held - room / 2, "limit raised to 16M");
        usleep(500 * 1000); /* a few ticks more: it must stop under the limit */
        s = client_stats(c);
        uint64_t present = present_pages(buf);
        fprintf(stderr, "limit 16M: %llu refilled, %llu pages held, %llu present\n",
                (unsigned long long)(refilled(&d) - r0), (unsigned long long)(s.stored_pages + s.same_pages),
                (unsigned long long)present);
        ASSERT_TRUE(present * ZSWAP_PAGE_SIZE <= 16u << 20);
        ASSERT_TRUE(refilled(&d) - r0 >= room / 2);

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
        struct zswap_stats s = client_stats(c);
        uint64_t held = s.stored_pages + s.same_pages;
        sleep(2); /* refill_quiet (1 s) and a tick */
        (void)*(volatile uint8_t *)(buf + LEN / 2); /* wakes */
        return held;
}

static void test_wake(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        td_start(&d, "--set interval=100ms --set refill_quiet=1s --set write_scan=100ms");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, LEN, 11, hashes);
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

static void test_busy(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        td_start(&d, "--set interval=100ms --set refill_quiet=1s --set write_scan=100ms");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, LEN, 17, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf + LEN / 2, LEN / 2, NPAGES / 2 * 9 / 10) > 0);
        struct zswap_stats s = client_stats(c);
        uint64_t held = s.stored_pages + s.same_pages;
        /* 2 s (twice refill_quiet) of writing the first half (each page
         * rewritten with its own bytes), then a touch of the second */
        double t0 = now_s();
        while (now_s() - t0 < 2.0)
                for (size_t i = 0; i < NPAGES / 2; i += 16) {
                        volatile uint8_t *b = buf + i * ZSWAP_PAGE_SIZE + 64;
                        *b = *b;
                }
        (void)*(volatile uint8_t *)(buf + LEN / 2);
        for (int i = 0; i < 10; i++) { /* ticks in which a refill would start, writing on */
                for (size_t p = 0; p < NPAGES / 2; p += 16) {
                        volatile uint8_t *b = buf + p * ZSWAP_PAGE_SIZE + 64;
                        *b = *b;
                }
                usleep(50 * 1000);
        }
        s = client_stats(c);
        fprintf(stderr, "busy: %llu pages held, %llu still held, %llu refilled\n", (unsigned long long)held,
                (unsigned long long)(s.stored_pages + s.same_pages), (unsigned long long)refilled(&d));
        ASSERT_EQ(refilled(&d), 0);
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);
        zswap_disconnect(c);
        td_stop(&d);
}

static void test_off(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];

        td_start(&d, "--set interval=100ms --set refill_quiet=1s --set write_scan=100ms --set refill=no");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, LEN, 13, hashes);
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
        test_limit();
        test_wake();
        test_busy();
        test_off();
        return 0;
}
