/*
 * fuzz-store.h: the input format of fuzz-store (fuzz-store.c), shared with
 * gen-seeds.c, which writes its seeds.
 *
 * An input is a header (FuzzStoreHdr, FUZZ_STORE_HDR_SIZE bytes, little
 * endian, no padding; a shorter input reads as if padded with zeros) and
 * then records, each an op byte (FS_OP_JOURNAL from FS_OP_JOURNAL_BYTE up,
 * FS_OP_FILL from FS_OP_FILL_BYTE up to it, below it taken modulo
 * FS_OP_JOURNAL, so inputs written before the journal existed mostly read
 * as they did) and its fixed
 * payload; a truncated record ends the input. Every value is written into
 * the store as is, so a mutation reaches every check the readers make.
 *
 * The superblock fields that must hold one value are stored XORed with it
 * (an all-zero header is a valid, empty lz4 store of state ACTIVE): most
 * mutated inputs keep them valid, so the checks go deeper, and a mutation
 * of one of them tests the check that refuses it.
 */
#pragma once

#include <stdint.h>

typedef struct FuzzStoreHdr {
        uint64_t magic_x;      /* magic = STORE_MAGIC ^ magic_x */
        uint32_t version_x;    /* version = STORE_VERSION ^ version_x */
        uint32_t super_size_x; /* super_size = sizeof(StoreSuper) ^ super_size_x */
        uint64_t size_x;       /* size = STORE_SIZE ^ size_x */
        uint32_t codec;        /* as is: 0 lz4, 1 zstd, anything else refused */
        uint32_t features;     /* as is */
        uint64_t daemon_id;    /* as is */
        uint32_t state_x;      /* state = STORE_ACTIVE ^ state_x */
        uint32_t ranges_cur;   /* as is */
        uint32_t nranges[2];   /* as is */
        uint32_t leaves;       /* as is */
        uint16_t nslots;       /* staging slots zswap_store_restore() is told of */
        uint16_t max_ranges;   /* room given to store_ranges() (0: STORE_RANGES_MAX) */
        uint32_t flags;        /* FS_F_*: the adopting daemon adopt_check() is given */
        uint32_t why_len;      /* room store_check() gets for its reason: why_len % 80 (0: 80) */
} FuzzStoreHdr;

#define FUZZ_STORE_HDR_SIZE 72
_Static_assert(sizeof(FuzzStoreHdr) == FUZZ_STORE_HDR_SIZE, "FuzzStoreHdr has padding");

#define FS_F_DAEMON_ZSTD 1u    /* the adopting daemon runs zstd (else lz4) */
#define FS_F_DAEMON_WP_ASYNC 2u /* and has UFFD_FEATURE_WP_ASYNC */
#define FS_F_DAEMON_SAME_ID 4u /* and is the daemon named in the store (-EBUSY) */

enum {
        FS_OP_RANGE, /* u8 copy (bit 0), u16 index (mod STORE_RANGES_MAX), u64 start, u64 end */
        FS_OP_DIR,   /* u32 slot (mod STORE_LEAVES_MAX), u64 value */
        FS_OP_ENTRY, /* u32 leaf (mod STORE_LEAVES_MAX), u16 index (mod 512), u64 entry */
        FS_OP_CLASS, /* u32 chunk id (mod STORE_POOL_IDS), u16 value */
        FS_OP_POOL,  /* u32 unit (16 bytes) of the pool area (mod 2^32: all of it), u16 len,
                      * len bytes (as many as are left); clipped to the file's end */
        FS_OP_OBJECT, /* an object and the entry naming it, in terms mutations keep meaningful:
                       * u32 leaf (mod STORE_LEAVES_MAX), u16 index (mod 512), u8 how (mod 3:
                       * STORED, LOADING or CLEAN of it), u32 chunk id (mod STORE_POOL_IDS),
                       * u16 class slot value c (written as is), u16 slot, u8 skew, u16 clen
                       * (mod 8192), u16 len, len bytes (as many as are left). The handle is
                       * id << 12 plus slot * c + skew units (32-bit: any handle), the
                       * bytes go where it points, clipped to the file's end. */
        FS_OP_JOURNAL, /* the event journal (store.h), written as a struct uffd_msg: u8 event,
                        * u64 a, u64 b, u64 c at the message's arg (remove.start, remove.end;
                        * remap.from, remap.to, remap.len) */
        FS_OP_FILL, /* many writes in one record, so that an input reaches every count limit:
                     * u8 what (FS_FILL_*), u16 count, u32 first, u64 base, u32 stride, u32 len.
                     * Ranges (count mod STORE_RANGES_MAX + 2): range i, at index (first + i) mod
                     * STORE_RANGES_MAX of copy what & 1, is len pages at page base + i * stride
                     * (wrapping as uint64_t); with FS_FILL_COUNT the superblock's nranges of that
                     * copy is set to the count. Entries (count mod FS_FILL_ENTRIES_MAX + 1):
                     * entry first + i (leaf << 9 | index, the leaf mod STORE_LEAVES_MAX) is
                     * base + i * stride: stride 0 names one object from every entry. At most
                     * 4 * STORE_RANGES_MAX writes in all per input; past that a count is cut. */
        _FS_OP_MAX,
};
#define FS_OP_JOURNAL_BYTE 0xf0
#define FS_OP_FILL_BYTE 0xe0
#define FS_FILL_COPY 1u      /* ranges: the table's copy 1 (else 0) */
#define FS_FILL_ENTRIES 2u   /* leaf entries, not ranges */
#define FS_FILL_COUNT 4u     /* ranges: and the superblock's count */
#define FS_FILL_ENTRIES_MAX 8192
