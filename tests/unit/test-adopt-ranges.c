/*
 * test-adopt-ranges: adopt_ranges() (daemon/manager/adopt.c) on a store whose
 * range table is full and whose journal holds an event over all of it.
 *
 * A store comes back from its client (ZMSG_ADOPT) and its range table is
 * whatever the client wrote: up to STORE_RANGES_MAX ranges. The journal's
 * event is applied to it: each range the event cuts leaves a head, a tail
 * and, for an mremap, the part moved, up to three pieces per range before
 * they merge. Here every range is cut, and the table that comes back is
 * checked page by page against a model: an mremap of all the ranges gives
 * them all at their new place; an mremap that leaves one head in place
 * gives one range more than a store holds (refused); an munmap of them
 * all gives none. Under ASan a writer that ran past its room fails here.
 */
#include <linux/userfaultfd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adopt.h"
#include "codec.h"
#include "macro.h"
#include "store.h"
#include "test.h"

#define P ((uint64_t)ZSWAP_PAGE_SIZE)
#define BASE ((uint64_t)0x100000000ull)  /* the table: 4096 ranges from 4 GiB */
#define TO ((uint64_t)0x400000000000ull) /* where the mremap puts them */

/* The table: range i is `len` pages at BASE + i * stride pages. */
static void write_table(uint8_t *map, unsigned n, uint64_t stride, uint64_t len) {
        StoreRange *t = store_ranges_begin(map);
        for (unsigned i = 0; i < n; i++)
                t[i] = (StoreRange){ BASE + i * stride * P, BASE + (i * stride + len) * P };
        store_ranges_commit(map, n);
}

static void write_event(uint8_t *map, uint8_t event, uint64_t a, uint64_t b, uint64_t c) {
        struct uffd_msg msg = { .event = event };
        if (event == UFFD_EVENT_REMAP)
                msg.arg.remap = (typeof(msg.arg.remap)){ .from = a, .to = b, .len = c };
        else
                msg.arg.remove = (typeof(msg.arg.remove)){ .start = a, .end = b };
        memcpy(store_journal(map), &msg, sizeof(msg));
}

static bool in(const StoreRange *t, int n, uint64_t x) {
        for (int lo = 0, hi = n; lo < hi;) {
                int mid = (lo + hi) / 2;
                if (t[mid].end <= x)
                        lo = mid + 1;
                else if (t[mid].start > x)
                        hi = mid;
                else
                        return true;
        }
        return false;
}

/* Every page where the result could change (each range's first and last
 * page and the pages either side, at the old place and the new) is in
 * got exactly when want(x) says. */
static void check_pages(const StoreRange *got, int n, unsigned nold, uint64_t stride, uint64_t len,
                        bool (*want)(uint64_t x, uint64_t stride, uint64_t len)) {
        uint64_t checked = 0;
        for (int i = 1; i < n; i++)
                ASSERT_TRUE(got[i - 1].end < got[i].start); /* sorted, disjoint, merged */
        for (unsigned i = 0; i < nold; i++)
                for (int place = 0; place < 2; place++) {
                        uint64_t s = (place ? TO : BASE) + i * stride * P;
                        uint64_t probe[] = { s - P, s, s + P, s + (len - 1) * P, s + len * P };
                        for (size_t k = 0; k < ELEMENTSOF(probe); k++) {
                                bool w = want(probe[k], stride, len), g = in(got, n, probe[k]);
                                if (w != g)
                                        test_fail("page %#llx (range %u, %s): %s", (unsigned long long)probe[k], i,
                                                  place ? "moved" : "old place", w ? "missing" : "there, wrongly");
                                checked++;
                        }
                }
        ASSERT_EQ(checked, (uint64_t)nold * 10);
}

/* after an mremap of [BASE, BASE + nold * stride pages) to TO */
static bool want_moved(uint64_t x, uint64_t stride, uint64_t len) {
        if (x < TO)
                return false;
        uint64_t off = (x - TO) / P;
        return off / stride < STORE_RANGES_MAX && off % stride < len;
}

static void test_mremap_all(uint8_t *map) {
        /* 4096 one-page ranges a page apart, all moved: 3 * 4096 pieces
         * before they merge back into 4096 */
        StoreRange *t = NULL;
        StoreEvent ev;
        bool has_ev = false;
        char why[128] = "";
        const uint64_t stride = 2, len = 1, span = STORE_RANGES_MAX * stride * P;

        write_table(map, STORE_RANGES_MAX, stride, len);
        write_event(map, UFFD_EVENT_REMAP, BASE, TO, span);
        int n = adopt_ranges(map, &t, &ev, &has_ev, why, sizeof(why));
        if (n < 0)
                test_fail("adopt_ranges = %d (%s)", n, why);
        ASSERT_TRUE(has_ev);
        ASSERT_EQ(ev.start, BASE);
        ASSERT_EQ(ev.end, BASE + span);
        ASSERT_EQ(ev.to, TO);
        ASSERT_EQ(n, STORE_RANGES_MAX);
        for (int i = 0; i < n; i++) {
                ASSERT_EQ(t[i].start, TO + (uint64_t)i * stride * P);
                ASSERT_EQ(t[i].end, TO + ((uint64_t)i * stride + len) * P);
        }
        check_pages(t, n, STORE_RANGES_MAX, stride, len, want_moved);
        free(t);
        printf("mremap of %d ranges: %d ranges at the new place, every page where the model says\n",
               STORE_RANGES_MAX, n);
}

static void test_mremap_one_more(uint8_t *map) {
        /* two-page ranges, the event starting inside the first: its head
         * stays, every range moves: 4097 ranges, more than a store holds */
        StoreRange *t = NULL;
        StoreEvent ev;
        bool has_ev = false;
        char why[128] = "";
        const uint64_t stride = 3, len = 2, span = STORE_RANGES_MAX * stride * P;

        write_table(map, STORE_RANGES_MAX, stride, len);
        write_event(map, UFFD_EVENT_REMAP, BASE + P, TO, span - P);
        ASSERT_ERROR(adopt_ranges(map, &t, &ev, &has_ev, why, sizeof(why)), EBADMSG);
        ASSERT_TRUE(strstr(why, "too many ranges") != NULL);
        printf("mremap leaving one head: refused (%s)\n", why);
}

static void test_munmap_all(uint8_t *map) {
        StoreRange *t = NULL;
        StoreEvent ev;
        bool has_ev = false;
        char why[128] = "";
        const uint64_t stride = 2, len = 1, span = STORE_RANGES_MAX * stride * P;

        write_table(map, STORE_RANGES_MAX, stride, len);
        write_event(map, UFFD_EVENT_UNMAP, BASE, BASE + span, 0);
        int n = adopt_ranges(map, &t, &ev, &has_ev, why, sizeof(why));
        if (n < 0)
                test_fail("adopt_ranges = %d (%s)", n, why);
        ASSERT_EQ(n, 0);
        ASSERT_TRUE(has_ev && ev.to == STORE_EVENT_GONE);
        free(t);
        printf("munmap of %d ranges: none left\n", STORE_RANGES_MAX);
}

int main(void) {
        uint8_t *map = NULL;
        int fd = store_create(CODEC_LZ4, 0, 1, &map);

        ASSERT_OK(fd);
        test_mremap_all(map);
        test_mremap_one_more(map);
        test_munmap_all(map);
        store_unmap(map);
        close(fd);
        return 0;
}
