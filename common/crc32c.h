/*
 * crc32c.h: CRC-32C (Castagnoli), the checksum of the second tier's
 * objects (daemon/tier/tier.c).
 *
 * SSE4.2's crc32 instruction where the CPU has it (about 0.3 µs for a
 * 4 KiB page here), a table otherwise; both give the same values, which
 * are the standard ones (crc32c("123456789") = 0xe3069283).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: crc32c(crc32c(0, a), b) == crc32c of a then b. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
