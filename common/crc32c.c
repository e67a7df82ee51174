/*
 * crc32c.c: CRC-32C, hardware where there is some (crc32c.h).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "crc32c.h"

#define POLY 0x82f63b78u /* reversed Castagnoli polynomial */

static uint32_t table[8][256];

__attribute__((constructor)) static void crc32c_init(void) {
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++)
                        c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
                table[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
                for (int t = 1; t < 8; t++)
                        table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

/* slicing by 8: eight table lookups per 8 bytes */
static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t len) {
        while (len && ((uintptr_t)p & 7)) {
                c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
                len--;
        }
        for (; len >= 8; len -= 8, p += 8) {
                uint64_t w;
                memcpy(&w, p, 8);
                w ^= c;
                c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
                    table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
                    table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        }
        while (len--)
                c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t len) {
        uint64_t c64;

        while (len && ((uintptr_t)p & 7)) {
                c = __builtin_ia32_crc32qi(c, *p++);
                len--;
        }
        c64 = c;
        for (; len >= 8; len -= 8, p += 8) {
                uint64_t w;
                memcpy(&w, p, 8);
                c64 = __builtin_ia32_crc32di(c64, w);
        }
        c = (uint32_t)c64;
        while (len--)
                c = __builtin_ia32_crc32qi(c, *p++);
        return c;
}

static bool have_hw(void) {
        static _Atomic int have = -1; /* every thread finds the same answer */
        int h = atomic_load_explicit(&have, memory_order_relaxed);
        if (h < 0) {
                h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
                atomic_store_explicit(&have, h, memory_order_relaxed);
        }
        return h;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len) {
        uint32_t c = ~crc;
#if defined(__x86_64__)
        if (have_hw())
                return ~crc_hw(c, buf, len);
#endif
        return ~crc_soft(c, buf, len);
}
