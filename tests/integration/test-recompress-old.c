/*
 * test-recompress-old: a program whose library is older than the strong
 * tier (it does not announce ZHELLO_F_STRONG in its HELLO: a program still
 * running the old libzswap after the daemon was upgraded) gets no zstd
 * object in its store, which its library could not decode should it ever
 * restore itself: neither recompression nor the zstd rescue of pages lz4
 * finds incompressible touch its pages, while another client of the same
 * daemon has both. Then a library that decodes zstd but knows no
 * dictionary (ZHELLO_F_STRONG without ZHELLO_F_DICT) beside a current one:
 * only the current one's store gets a dictionary (version 3), which the
 * other's library would refuse. Built on libzswap's core (the internal
 * header), as test-fork-token is, to set what the library announces.
 */
#include <fcntl.h>
#include <sys/mman.h>

#include "harness.h"
#include "libzswap-internal.h"
#include "protocol.h"
#include "store.h"

#define NPAGES 2048
#define DICT_NPAGES 4096 /* past the daemon's DICT_MIN_PAGES */

static TestDaemon d;

/* The versions of the stores this process holds (memfds named
 * zswapd-store): how many are of version `version`. */
static unsigned stores_of(uint32_t version, unsigned *n) {
        int fds[8];
        unsigned of = 0;

        *n = (unsigned)td_fds_named("memfd:zswapd-store", fds, 8);
        for (unsigned i = 0; i < *n; i++) {
                /* through a descriptor of our own: the library's agent
                 * closes its own when it restores (a use of one thread's
                 * descriptor on another without an order between them,
                 * which TSan reports) */
                char path[64];
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[i]);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                uint8_t *map = mmap(NULL, STORE_SUPER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
                close(fd);
                ASSERT_TRUE(map != MAP_FAILED);
                uint32_t v = store_super(map)->version;
                ASSERT_TRUE(v >= STORE_VERSION && v <= STORE_VERSION_DICT);
                of += v == version;
                munmap(map, STORE_SUPER_SIZE);
        }
        return of;
}

/* Until recompression has settled: its count at least least and still
 * for a second. */
static void settle(ZMsgStatusReply *st, uint64_t least) {
        uint64_t last = UINT64_MAX, end = test_now_ns() + TEST_WAIT_S * 1000000000ull;
        for (unsigned still = 0; still < 2;) {
                usleep(500000);
                td_status(&d, st);
                still = st->recompressed >= least && st->recompressed == last ? still + 1 : 0;
                last = st->recompressed;
                if (test_now_ns() > end)
                        test_fail("recompression never settled: %llu pages after %u s",
                                  (unsigned long long)st->recompressed, TEST_WAIT_S);
        }
}

/* A library without dictionaries beside a current one, each with enough
 * pages for one: only the current one's store gets it. */
static void no_dict(void) {
        const size_t len = (size_t)DICT_NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t mid_hashes[DICT_NPAGES], cur_hashes[DICT_NPAGES];
        ZMsgStatusReply st;
        unsigned n;

        td_start(&d, "-o recompress_age=1s -o recompress_cpu=100");
        zswap_hello_features = ZHELLO_F_STRONG;
        struct zswap_client *mid = td_connect(&d);
        zswap_hello_features = ZHELLO_F_STRONG | ZHELLO_F_DICT;
        struct zswap_client *cur = td_connect(&d);
        uint8_t *mb = td_region(mid, len, 93, mid_hashes), *cb = td_region(cur, len, 94, cur_hashes);
        ASSERT_TRUE(td_pageout_want(mid, mb, len, DICT_NPAGES * 9 / 10) > 0);
        ASSERT_TRUE(td_pageout_want(cur, cb, len, DICT_NPAGES * 9 / 10) > 0);
        settle(&st, DICT_NPAGES);
        unsigned v3 = stores_of(STORE_VERSION_DICT, &n);
        fprintf(stderr, "no dictionary known: %llu dictionaries trained, %llu pages made with one; %u of %u stores "
                "with a dictionary\n", (unsigned long long)st.dicts_trained, (unsigned long long)st.dict_pages, v3, n);
        ASSERT_EQ(st.dicts_trained, 1);
        ASSERT_TRUE(st.dict_pages > 0);
        ASSERT_EQ(n, 2);
        ASSERT_EQ(v3, 1);
        size_t bad = verify_pages(mb, len, mid_hashes) + verify_pages(cb, len, cur_hashes);
        ASSERT_EQ(bad, 0);
        zswap_disconnect(mid);
        zswap_disconnect(cur);
        td_stop(&d);
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
        /* the current client's corpus half mostly done */
        settle(&st, NPAGES / 4);
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
        unsigned nstores, strong = stores_of(STORE_VERSION_STRONG, &nstores) + stores_of(STORE_VERSION_DICT, &nstores);
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
        no_dict();
        return 0;
}
