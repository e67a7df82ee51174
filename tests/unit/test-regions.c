/*
 * test-regions: the daemon's list of registered ranges, which decides what
 * may be evicted: add, overlap, remove with splits, move (mremap), clip,
 * limits. Every case checks the exact list against a model.
 */
#include <stdio.h>

#include "core.h"
#include "mmclient.h"
#include "test.h"

#define P 4096ull

static void expect(MMClient *mm, const uint64_t *want, size_t n) {
        if (mm->nregions != n) {
                for (size_t i = 0; i < mm->nregions; i++)
                        fprintf(stderr, "  [%#llx, %#llx)\n", (unsigned long long)mm->regions[i].start,
                                (unsigned long long)mm->regions[i].end);
                test_fail("%zu regions, expected %zu", mm->nregions, n);
        }
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++) {
                ASSERT_EQ(mm->regions[i].start, want[2 * i]);
                ASSERT_EQ(mm->regions[i].end, want[2 * i + 1]);
                bytes += want[2 * i + 1] - want[2 * i];
        }
        ASSERT_EQ(mm->registered_bytes, bytes);
}

int main(void) {
        Core core = { .cfg = { .max_regions = 8, .max_registered = 1000 * P } };
        MMClient *mm;

        ASSERT_OK(mmclient_new(&core, -1, &mm));

        ASSERT_OK(mmclient_region_add(mm, 10 * P, 20 * P, true)); /* armed: kept by splits and moves */
        ASSERT_OK(mmclient_region_add(mm, 30 * P, 40 * P, false));
        ASSERT_OK(mmclient_region_add(mm, 0, 5 * P, false));
        expect(mm, (uint64_t[]){ 0, 5 * P, 10 * P, 20 * P, 30 * P, 40 * P }, 3);
        ASSERT_ERROR(mmclient_region_add(mm, 15 * P, 35 * P, false), EEXIST);
        ASSERT_ERROR(mmclient_region_add(mm, 19 * P, 21 * P, false), EEXIST);
        ASSERT_OK(mmclient_region_add(mm, 20 * P, 30 * P, false)); /* touching is not overlapping */

        /* a hole in the middle splits; the ends shrink */
        ASSERT_OK(mmclient_region_remove(mm, 12 * P, 14 * P, false));
        ASSERT_OK(mmclient_region_remove(mm, 3 * P, 11 * P, false));
        ASSERT_OK(mmclient_region_remove(mm, 38 * P, 50 * P, false));
        expect(mm, (uint64_t[]){ 0, 3 * P, 11 * P, 12 * P, 14 * P, 20 * P, 20 * P, 30 * P, 30 * P, 38 * P }, 5);

        /* unregister must name a range inside one region */
        ASSERT_ERROR(mmclient_region_remove(mm, 2 * P, 12 * P, true), EINVAL);
        ASSERT_ERROR(mmclient_region_remove(mm, 4 * P, 5 * P, true), EINVAL);
        ASSERT_OK(mmclient_region_remove(mm, 15 * P, 16 * P, true));
        expect(mm, (uint64_t[]){ 0, 3 * P, 11 * P, 12 * P, 14 * P, 15 * P, 16 * P, 20 * P, 20 * P, 30 * P,
                                 30 * P, 38 * P }, 6);

        /* clip finds the first registered part at or after start */
        uint64_t s = 3 * P, e = 100 * P;
        ASSERT_TRUE(mmclient_region_clip(mm, &s, &e));
        ASSERT_EQ(s, 11 * P);
        ASSERT_EQ(e, 12 * P);
        s = 38 * P, e = 100 * P;
        ASSERT_TRUE(!mmclient_region_clip(mm, &s, &e));

        /* mremap moves the registered parts, at the same offsets */
        ASSERT_OK(mmclient_region_move(mm, 10 * P, 200 * P, 10 * P));
        expect(mm, (uint64_t[]){ 0, 3 * P, 20 * P, 30 * P, 30 * P, 38 * P, 201 * P, 202 * P, 204 * P, 205 * P,
                                 206 * P, 210 * P }, 6);
        bool armed = false;
        uint32_t stamp;
        for (uint64_t a = 201; a < 210; a += 4) {
                s = a * P, e = 300 * P;
                ASSERT_TRUE(mmclient_region_clip_stamp(mm, &s, &e, &stamp, &armed));
                ASSERT_TRUE(armed);
        }
        s = 20 * P, e = 300 * P;
        ASSERT_TRUE(mmclient_region_clip_stamp(mm, &s, &e, &stamp, &armed));
        ASSERT_TRUE(!armed);

        /* limits: regions and bytes */
        ASSERT_OK(mmclient_region_add(mm, 300 * P, 301 * P, false));
        ASSERT_OK(mmclient_region_add(mm, 302 * P, 303 * P, false));
        ASSERT_ERROR(mmclient_region_add(mm, 304 * P, 305 * P, false), ENOSPC);
        ASSERT_OK(mmclient_region_remove(mm, 0, 1000 * P, false));
        expect(mm, NULL, 0);
        ASSERT_ERROR(mmclient_region_add(mm, 0, 1001 * P, false), ENOSPC);
        ASSERT_OK(mmclient_region_add(mm, 0, 1000 * P, false));

        mmclient_unref(mm);
        return 0;
}
