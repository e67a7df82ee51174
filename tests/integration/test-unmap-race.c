/*
 * test-unmap-race: a program that unmaps managed memory and maps new
 * memory at the same address at once, while the daemon keeps evicting
 * from it (a resident limit of almost nothing), must find in the new
 * mapping exactly what it wrote there. munmap() returns as soon as the
 * daemon has *read* the UNMAP event; a page move planned before it must
 * never take a page of the new mapping (docs/page-lifecycle.md).
 *
 * TEST_UNMAP_ROUNDS overrides the number of rounds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

#define LEN (2u << 20)

int main(void) {
        TestDaemon d;
        unsigned rounds = test_env_uint("TEST_UNMAP_ROUNDS", 2000);
        size_t bad = 0, bad_rounds = 0;

        td_start(&d, "--set interval=10ms --set write_scan=0");
        struct zswap_client *c = td_connect(&d);
        ASSERT_OK(zswap_set_limit(c, ZSWAP_PAGE_SIZE));
        uint8_t *base = test_map(LEN);
        for (unsigned r = 0; r < rounds; r++) {
                /* managed memory, being evicted all the time */
                memset(base, (int)(r & 0x7f) + 1, LEN);
                ASSERT_OK(zswap_register(c, base, LEN));
                for (volatile unsigned spin = 0; spin < (r % 64) * 1000; spin++)
                        ;
                /* gone, and new memory at the same place at once */
                ASSERT_EQ(munmap(base, LEN), 0);
                uint8_t *p = mmap(base, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                                  -1, 0);
                ASSERT_TRUE(p == base);
                for (size_t off = 0; off < LEN; off += ZSWAP_PAGE_SIZE)
                        p[off] = 0xee;
                usleep(200);
                size_t here = 0;
                for (size_t off = 0; off < LEN; off += ZSWAP_PAGE_SIZE)
                        here += p[off] != 0xee;
                if (here) {
                        bad += here;
                        bad_rounds++;
                        fprintf(stderr, "round %u: %zu pages of the new mapping lost their content\n", r, here);
                }
        }
        fprintf(stderr, "%u rounds: %zu pages lost in %zu rounds\n", rounds, bad, bad_rounds);
        ASSERT_EQ(bad, 0);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
