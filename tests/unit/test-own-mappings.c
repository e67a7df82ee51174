/*
 * test-own-mappings: the library knows its own mappings without the
 * kernel's help.
 *
 * libzswap keeps its own objects (its client, its lists, restore scratch)
 * in mappings of their own, which the shim must never manage: its agent
 * touches them when no daemon may be there to serve a fault. Where the
 * kernel names mappings, they read "[anon:zswap]" in /proc/PID/maps; this
 * project's kernels have no CONFIG_ANON_VMA_NAME (prctl(PR_SET_VMA) fails
 * with EINVAL), so the library also lists them (zswap_own_mappings()),
 * and the shim subtracts the list from what it registers. Checked: an
 * object is listed from its allocation, its mapping follows it when it
 * grows and moves, it leaves the list when freed, and a full list still
 * allocates (unlisted) and frees.
 */
#include <string.h>
#include <sys/mman.h>

#include "libzswap-internal.h"
#include "macro.h"
#include "test.h"

/* Whether [p, p + len) lies in one listed span. */
static bool listed(const void *p, size_t len) {
        ZswapSpan s[ZSWAP_OWN_MAPS];
        size_t n = zswap_own_mappings(s, ZSWAP_OWN_MAPS);
        for (size_t i = 0; i < n; i++)
                if ((uintptr_t)p >= s[i].start && (uintptr_t)p + len <= s[i].end)
                        return true;
        return false;
}

static size_t nlisted(void) {
        ZswapSpan s[ZSWAP_OWN_MAPS];
        return zswap_own_mappings(s, ZSWAP_OWN_MAPS);
}

int main(void) {
        ASSERT_EQ(nlisted(), 0);
        uint8_t *a = zswap_mem_alloc(100);
        ASSERT_TRUE(a != NULL && listed(a, 100));
        memset(a, 1, 100);

        /* grown past its mapping: it may move; the list follows */
        uint8_t *b = zswap_mem_realloc(a, 1 << 20);
        ASSERT_TRUE(b != NULL && b[99] == 1 && listed(b, 1 << 20));
        ASSERT_EQ(nlisted(), 1);

        void *scratch = zswap_scratch_alloc(3 * ZSWAP_PAGE_SIZE);
        ASSERT_TRUE(scratch != NULL && listed(scratch, 3 * ZSWAP_PAGE_SIZE));
        ASSERT_EQ(nlisted(), 2);
        zswap_scratch_free(scratch, 3 * ZSWAP_PAGE_SIZE);
        zswap_mem_free(b);
        ASSERT_EQ(nlisted(), 0);

        /* more than the list holds: the rest still work, unlisted */
        void *many[ZSWAP_OWN_MAPS + 8];
        for (size_t i = 0; i < ELEMENTSOF(many); i++) {
                many[i] = zswap_mem_alloc(64);
                ASSERT_TRUE(many[i] != NULL);
                memset(many[i], 2, 64);
        }
        ASSERT_EQ(nlisted(), ZSWAP_OWN_MAPS);
        for (size_t i = 0; i < ELEMENTSOF(many); i++)
                zswap_mem_free(many[i]);
        ASSERT_EQ(nlisted(), 0);
        /* and a slot freed is used again */
        void *c = zswap_mem_alloc(10);
        ASSERT_TRUE(listed(c, 10));
        zswap_mem_free(c);
        return 0;
}
