/*
 * test-torture: several threads write and read random pages of a large
 * region while the daemon evicts it continuously; every read is checked
 * against a shadow version, and at the end every page is.
 *
 * Pages belong to threads in blocks of BLOCK pages (block % nthreads), so
 * the shadow needs no lock and each thread can also read a whole block in
 * address order, which makes the daemon install pages ahead (fault-around); the races under test are between the client's accesses and the
 * daemon (eviction, staging, compression, fault service, MADV_DONTNEED
 * events), which see all pages. Page content is a function of (page,
 * version), compressible like real data; version 0 means "dropped with
 * MADV_DONTNEED", whose content must read as zeros.
 *
 * TORTURE_SECONDS (default 60), TORTURE_MB (default 256), TORTURE_THREADS (4).
 * It runs TORTURE_SECONDS, and longer if the daemon has not yet evicted as
 * many of the region's pages as the region holds: its own count for this
 * client, the test's pageout calls and (variants with a limit, idle age
 * or second tier) the daemon's own policies together. TORTURE_TAKEN=N
 * (the variant whose fault threads are held in calls now and then): and
 * until other fault threads have taken at least N items of work from held
 * ones (zswapctl status work_taken), so that the run is known to have
 * raced what it is for.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/mman.h>

#include "harness.h"
#include "protocol.h"
#include "util.h"

static uint8_t *region;
static size_t npages;
static unsigned nthreads;
static uint32_t *version; /* shadow: written by the owning thread only */
static _Atomic bool stop;
static _Atomic uint64_t reads, writes, drops, errors;

static void make_page(uint64_t *w, size_t page, uint32_t ver) {
        uint64_t tag = (uint64_t)page << 32 | ver;
        for (size_t j = 0; j < ZSWAP_PAGE_SIZE / 8; j++)
                w[j] = (j & 3) ? tag + (j & ~(size_t)3) : j;
}

static bool check_page(const uint64_t *w, size_t page, uint32_t ver) {
        uint64_t expect[ZSWAP_PAGE_SIZE / 8];
        if (ver == 0)
                memset(expect, 0, sizeof(expect));
        else
                make_page(expect, page, ver);
        if (memcmp(w, expect, ZSWAP_PAGE_SIZE) == 0)
                return true;
        fprintf(stderr, "page %zu: expected version %u, first word %#llx word1 %#llx\n", page, ver,
                (unsigned long long)w[0], (unsigned long long)w[1]);
        return false;
}

#define BLOCK 64

static void scan_block(size_t block) {
        for (size_t page = block * BLOCK; page < (block + 1) * BLOCK && page < npages; page++)
                if (!check_page((uint64_t *)(region + page * ZSWAP_PAGE_SIZE), page, version[page]))
                        atomic_fetch_add(&errors, 1);
        atomic_fetch_add_explicit(&reads, BLOCK, memory_order_relaxed);
}

static void *worker(void *arg) {
        unsigned t = (unsigned)(uintptr_t)arg;
        uint64_t seed = 1000 + t;
        size_t blocks = npages / BLOCK / nthreads;

        while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
                size_t block = (xorshift(&seed) % blocks) * nthreads + t;
                size_t page = block * BLOCK + xorshift(&seed) % BLOCK;
                uint64_t *p = (uint64_t *)(region + page * ZSWAP_PAGE_SIZE);
                unsigned op = (unsigned)(xorshift(&seed) % 100);
                if (op < 2) {
                        scan_block(block);
                } else if (op < 45) {
                        if (!check_page(p, page, version[page]))
                                atomic_fetch_add(&errors, 1);
                        atomic_fetch_add_explicit(&reads, 1, memory_order_relaxed);
                } else if (op < 97) {
                        /* word by word, so eviction can hit a half-written page */
                        version[page]++;
                        if (version[page] == 0)
                                version[page] = 1;
                        make_page(p, page, version[page]);
                        atomic_fetch_add_explicit(&writes, 1, memory_order_relaxed);
                } else {
                        madvise(p, ZSWAP_PAGE_SIZE, MADV_DONTNEED);
                        version[page] = 0;
                        atomic_fetch_add_explicit(&drops, 1, memory_order_relaxed);
                }
        }
        return NULL;
}

int main(void) {
        TestDaemon d;
        unsigned seconds = test_env_uint("TORTURE_SECONDS", 60), mb = test_env_uint("TORTURE_MB", 256);
        pthread_t threads[16];
        uint64_t seed = 7, passes = 0, evicted = 0, daemon_evicted = 0;
        const uint64_t want_taken = test_env_uint("TORTURE_TAKEN", 0);
        ZMsgStatusReply st = { 0 };

        nthreads = test_env_uint("TORTURE_THREADS", 4);
        if (mb < 4)
                mb = 4;
        if (nthreads < 1 || nthreads > 16)
                nthreads = 4;
        npages = ((size_t)mb << 20) / ZSWAP_PAGE_SIZE;
        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        region = test_map(npages * ZSWAP_PAGE_SIZE);
        version = calloc(npages, sizeof(uint32_t));
        for (size_t i = 0; i < npages; i++) {
                version[i] = 1;
                make_page((uint64_t *)(region + i * ZSWAP_PAGE_SIZE), i, 1);
        }
        ASSERT_OK(zswap_register(c, region, npages * ZSWAP_PAGE_SIZE));
        for (unsigned t = 0; t < nthreads; t++)
                ASSERT_OK(-pthread_create(&threads[t], NULL, worker, (void *)(uintptr_t)t));

        /* the chosen time, and then on until the daemon has evicted more
         * pages than the region holds (work done, whatever the machine's
         * speed), up to a safety bound that reports how far it got. The
         * daemon's count: where its policies evict all the time (reclaim,
         * tier), they find few pages left for the test's pageouts, which
         * would then take minutes to add up to the region on their own */
        uint64_t end = now_ns() + (uint64_t)seconds * 1000000000ull;
        uint64_t bound = end + (want_taken ? 300 : 8ull * seconds) * 1000000000ull;
        while ((now_ns() < end || daemon_evicted <= npages || st.work_taken < want_taken) &&
               atomic_load(&errors) == 0) {
                struct zswap_stats cs;
                if (now_ns() > bound)
                        test_fail("after %llu s: %llu of %zu pages evicted (%llu by %llu pageout passes); %llu calls "
                                  "held a fault thread, %llu items of work taken from held threads (want %llu)",
                                  (unsigned long long)(now_ns() - end) / 1000000000ull + seconds,
                                  (unsigned long long)daemon_evicted, npages,
                                  (unsigned long long)evicted, (unsigned long long)passes,
                                  (unsigned long long)st.calls_held, (unsigned long long)st.work_taken,
                                  (unsigned long long)want_taken);
                /* random windows, sometimes the whole region */
                size_t first = xorshift(&seed) % npages, n = 1 + xorshift(&seed) % 2048;
                if (passes % 16 == 0) {
                        first = 0;
                        n = npages;
                }
                if (first + n > npages)
                        n = npages - first;
                int r = zswap_pageout(c, region + first * ZSWAP_PAGE_SIZE, n * ZSWAP_PAGE_SIZE);
                ASSERT_OK(r);
                evicted += (uint64_t)r;
                passes++;
                ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &cs));
                daemon_evicted = cs.evictions;
                if (want_taken)
                        td_status(&d, &st);
        }
        atomic_store(&stop, true);
        for (unsigned t = 0; t < nthreads; t++)
                pthread_join(threads[t], NULL);

        if (atomic_load(&errors) && getenv("ZSWAPD_TRACE")) {
                /* the daemon writes its page trace (daemon/util/trace.h); page N
                 * is at region + N * 4096 for scripts/trace-page.py */
                fprintf(stderr, "trace of a daemon run with region at %p: %s\n", (void *)region, getenv("ZSWAPD_TRACE"));
                kill(d.pid, SIGUSR2);
                sleep(3);
        }
        size_t bad = 0;
        for (size_t i = 0; i < npages; i++)
                bad += !check_page((uint64_t *)(region + i * ZSWAP_PAGE_SIZE), i, version[i]);
        struct zswap_stats s;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        fprintf(stderr, "%u s, %u MiB, %u threads: %llu pages evicted, %llu by %llu pageout passes, %llu faults, "
                        "%llu installed ahead, %llu reads, %llu writes, %llu drops; %llu read errors, "
                        "%zu bad pages at the end\n",
                seconds, mb, nthreads, (unsigned long long)s.evictions, (unsigned long long)evicted,
                (unsigned long long)passes,
                (unsigned long long)s.faults, (unsigned long long)s.prefetches, (unsigned long long)reads,
                (unsigned long long)writes,
                (unsigned long long)drops, (unsigned long long)errors, bad);
        if (want_taken) {
                td_status(&d, &st);
                fprintf(stderr, "%llu calls held a fault thread; %llu items of work taken from held threads\n",
                        (unsigned long long)st.calls_held, (unsigned long long)st.work_taken);
                ASSERT_TRUE(st.calls_held > 0);
                ASSERT_TRUE(st.work_taken >= want_taken);
        }
        ASSERT_EQ(atomic_load(&errors), 0);
        ASSERT_EQ(bad, 0);
        ASSERT_TRUE(s.evictions > npages);
        ASSERT_TRUE(evicted > 0); /* the test's pageouts raced the rest */
        ASSERT_TRUE(s.prefetches > 0); /* the block scans exercised fault-around */
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
