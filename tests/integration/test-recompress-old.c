/*
 * test-recompress-old: a program whose library is older than the strong
 * tier (it does not announce ZHELLO_F_STRONG in its HELLO: a program still
 * running the old libzswap after the daemon was upgraded) gets no zstd
 * object in its store, which its library could not decode should it ever
 * restore itself: neither recompression nor the zstd rescue of pages lz4
 * finds incompressible touch its pages, while another client of the same
 * daemon has both. Built on libzswap's core (the internal header), as
 * test-fork-token is, to set what the library announces.
 */
#include <sys/mman.h>

#include "harness.h"
#include "libzswap-internal.h"
#include "protocol.h"
#include "store.h"

#define NPAGES 2048

static TestDaemon d;

/* The versions of the stores this process holds (memfds named
 * zswapd-store): how many say "may hold strong objects". */
static unsigned strong_stores(unsigned *n) {
        int fds[8];
        unsigned strong = 0;

        *n = (unsigned)td_fds_named("memfd:zswapd-store", fds, 8);
        for (unsigned i = 0; i < *n; i++) {
                uint8_t *map = mmap(NULL, STORE_SUPER_SIZE, PROT_READ, MAP_SHARED, fds[i], 0);
                ASSERT_TRUE(map != MAP_FAILED);
                uint32_t v = store_super(map)->version;
                ASSERT_TRUE(v == STORE_VERSION || v == STORE_VERSION_STRONG);
                strong += v == STORE_VERSION_STRONG;
                munmap(map, STORE_SUPER_SIZE);
        }
        return strong;
}

/* Half corpus pages, half pages lz4 cannot shrink and zstd can. */
static uint8_t *region(struct zswap_client *c, uint64_t *hashes, uint64_t seed) {
        const size_t len = (size_t)NPAGES * ZSWAP_PAGE_SIZE;
        uint8_t *buf = td_region(c, len, seed, hashes);
        uint64_t s = seed;
        for (size_t i = len / 2; i < len; i++)
                buf[i] = (uint8_t)('A' + xorshift(&s) % 32);
        hash_pages(buf, len, hashes);
        return buf;
}

int main(void) {
        const size_t len = (size_t)NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t old_hashes[NPAGES], new_hashes[NPAGES];
        ZClientRecord now;
        ZMsgStatusReply st;

        ASSERT_OK(setenv("ZSWAP_RECONNECT_TIMEOUT", "0", 1));
        td_start(&d, "-o recompress_age=1s -o recompress_cpu=100");
        zswap_hello_features = 0;
        struct zswap_client *old = td_connect(&d);
        zswap_hello_features = ZHELLO_F_STRONG;
        struct zswap_client *cur = td_connect(&d);
        uint8_t *ob = region(old, old_hashes, 91), *nb = region(cur, new_hashes, 92);
        int no = zswap_pageout(old, ob, len), nn = zswap_pageout(cur, nb, len);
        ASSERT_TRUE(no > 0 && nn > 0);
        /* until recompression has settled: its count still for a
         * second, the current client's corpus half mostly done */
        uint64_t last = UINT64_MAX, end = test_now_ns() + TEST_WAIT_S * 1000000000ull;
        for (unsigned still = 0; still < 2;) {
                usleep(500000);
                td_status(&d, &st);
                still = st.recompressed >= NPAGES / 4 && st.recompressed == last ? still + 1 : 0;
                last = st.recompressed;
                if (test_now_ns() > end)
                        test_fail("recompression never settled: %llu pages after %u s",
                                  (unsigned long long)st.recompressed, TEST_WAIT_S);
        }
        td_clients_sum(&d, getpid(), &now);
        fprintf(stderr, "old library: %d pages out; current: %d out; %llu strong in all, %llu recompressed, "
                "%llu rescued\n", no, nn, (unsigned long long)now.strong_pages,
                (unsigned long long)st.recompressed, (unsigned long long)st.strong_rescued);
        /* the lz4-incompressible half stayed resident for the old one,
         * and went out for the current one */
        ASSERT_TRUE(no <= NPAGES / 2 + NPAGES / 50);
        ASSERT_TRUE(nn >= NPAGES * 9 / 10);
        /* every zstd object is the current client's: its own corpus half
         * recompressed, its own other half rescued, none of the old's */
        ASSERT_LE(st.recompressed, (uint64_t)NPAGES / 2);
        ASSERT_LE(st.strong_rescued, (uint64_t)NPAGES / 2);
        ASSERT_TRUE(st.strong_rescued >= NPAGES / 2 * 9 / 10);

        /* the current client's store says it may hold strong objects, so
         * that a daemon older than the strong tier refuses it; the old
         * one's does not, so that its library still accepts it */
        unsigned nstores, strong = strong_stores(&nstores);
        fprintf(stderr, "%u stores held, %u marked for the strong tier\n", nstores, strong);
        ASSERT_EQ(nstores, 2);
        ASSERT_EQ(strong, 1);

        /* the old one restores itself from its store: nothing in it that
         * an old library could not read (this one would; the counters
         * above are the proof) */
        td_kill(&d);
        size_t bad = verify_pages(ob, len, old_hashes) + verify_pages(nb, len, new_hashes);
        ASSERT_EQ(bad, 0);
        fprintf(stderr, "both restored themselves, every page right\n");
        zswap_disconnect(old);
        zswap_disconnect(cur);
        return 0;
}
