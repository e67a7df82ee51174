/*
 * test-write-backoff: write tracking does not make a program that writes
 * all of its memory all the time take a write-protect fault per page per
 * write scan (reclaim.c write_scan()).
 *
 * A client writes every page of 16 MiB over and over while the daemon
 * scans every 100 ms. Once 8 scans are past (the zones' back-off has had
 * time to grow), the writer's minor faults over the next 32 scans must
 * stay under a quarter of one per page per scan: without the back-off
 * every scan protects every page again and the writer takes one fault per
 * page per scan. The zones must be seen sitting scans out, every page
 * holds what was last written, and the region still evicts and reads back
 * whole.
 *
 * Before that, while no policy can evict from the client (no limit, no
 * idle age, no pressure controller) and it holds nothing, it is not
 * tracked at all: a second of writing every page takes no fault and sees
 * no write scan. The scans begin once the client has a limit (1 GiB here,
 * which evicts nothing).
 */
#include <sys/resource.h>

#include "harness.h"
#include "protocol.h"

#define NPAGES 4096
#define WARMUP_SCANS 8
#define MEASURED_SCANS 32
#define SAFETY_S 300

static long minflt(void) {
        struct rusage ru;
        ASSERT_OK(getrusage(RUSAGE_SELF, &ru));
        return ru.ru_minflt;
}

static void status(const TestDaemon *d, uint64_t *scans, uint64_t *out) {
        ZMsgStatusReply st;
        td_status(d, &st);
        *scans = st.write_scans;
        *out = st.write_zones_out;
}

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        uint64_t scans, out, s0, out0;

        td_start(&d, "--set write_scan=100ms");
        struct zswap_client *c = td_connect(&d);
        uint8_t *p = test_map(len);
        fill_pages(p, len, 9);
        ASSERT_OK(zswap_register(c, p, len));

        /* no policy, nothing held: no write tracking */
        long nf0 = minflt();
        uint64_t npass = 0;
        for (time_t t = time(NULL); time(NULL) - t < 2;) {
                npass++;
                for (size_t i = 0; i < NPAGES; i++)
                        ((volatile uint64_t *)(p + i * ZSWAP_PAGE_SIZE))[3] = npass;
                usleep(10000);
        }
        long nfaults = minflt() - nf0;
        status(&d, &scans, &out);
        fprintf(stderr, "no policy: %llu passes over every page, %ld minor faults, %llu write scans\n",
                (unsigned long long)npass, nfaults, (unsigned long long)scans);
        ASSERT_EQ(scans, 0);
#if !defined(__SANITIZE_THREAD__) /* ThreadSanitizer's own memory takes faults of its own */
        ASSERT_TRUE(nfaults < NPAGES / 16);
#endif

        /* a limit: the scans begin. Write tracking needs
         * UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN */
        ASSERT_OK(zswap_set_limit(c, 1ull << 30));
        time_t t0 = time(NULL);
        do {
                usleep(50000);
                status(&d, &scans, &out);
        } while (scans == 0 && time(NULL) - t0 < 10);
        if (scans == 0) {
                fprintf(stderr, "no write scan in 10 s: the kernel has no write tracking here\n");
                return 77;
        }

        uint64_t pass = 0;
        long f0 = 0;
        s0 = scans;
        out0 = out;
        bool measuring = false;
        t0 = time(NULL);
        for (;;) {
                pass++;
                for (size_t i = 0; i < NPAGES; i++)
                        ((volatile uint64_t *)(p + i * ZSWAP_PAGE_SIZE))[3] = pass;
                status(&d, &scans, &out);
                if (!measuring && scans - s0 >= WARMUP_SCANS) {
                        measuring = true;
                        s0 = scans;
                        out0 = out;
                        f0 = minflt();
                } else if (measuring && scans - s0 >= MEASURED_SCANS)
                        break;
                if (time(NULL) - t0 > SAFETY_S)
                        test_fail("safety timeout: %llu passes, %llu scans (measuring: %d)", (unsigned long long)pass,
                                  (unsigned long long)(scans - s0), measuring);
        }
        long faults = minflt() - f0;
        uint64_t nscans = scans - s0;
        fprintf(stderr, "%llu passes; over %llu write scans: %ld minor faults (%.2f per page per scan), %llu zones sat out\n",
                (unsigned long long)pass, (unsigned long long)nscans, faults, (double)faults / NPAGES / (double)nscans,
                (unsigned long long)(out - out0));
        ASSERT_TRUE(out > out0);
        ASSERT_TRUE((uint64_t)faults * 4 < (uint64_t)NPAGES * nscans);

        for (size_t i = 0; i < NPAGES; i++)
                ASSERT_EQ(((uint64_t *)(p + i * ZSWAP_PAGE_SIZE))[3], pass);
        hash_pages(p, len, hashes);
        ASSERT_TRUE(zswap_pageout(c, p, len) > 0);
        ASSERT_EQ(verify_pages(p, len, hashes), 0);

        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
