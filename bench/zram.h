/*
 * zram.h: a kernel zram swap device of the benchmark's own, the reference
 * zswapd is measured against.
 *
 * zram_new() takes a fresh device from zram-control, sets it up as the
 * highest-priority swap and turns swap readahead off (page-cluster 0) so that
 * a fault reads exactly one page, as a zswapd fault does. zram_teardown()
 * undoes every step that was done, in reverse, and never touches a device
 * this object did not create.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef struct Zram Zram;

/*
 * Create /dev/zramN with compressor algo and disksize bytes, mkswap it and
 * swapon it. sysfs and procfs are the roots of /sys and /proc. On failure
 * everything done so far is undone and a negative errno is returned; -EBUSY
 * if the kernel's zswap is enabled (it would sit in front of the device).
 */
int zram_new(const char *sysfs, const char *procfs, const char *algo, uint64_t disksize,
             Zram **ret);

/*
 * swapoff, reset, hot_remove and restore page-cluster, whichever of them is
 * still to do. Every step is tried even if one fails; returns the first
 * failure. Safe to call more than once.
 */
int zram_teardown(Zram *z);

/* zram_teardown() and free; accepts NULL, returns NULL. */
Zram *zram_free(Zram *z);
static inline void zram_freep(Zram **z) {
        zram_free(*z);
}
#define _cleanup_zram_ _cleanup_(zram_freep)

/* The device node, "/dev/zramN". */
const char *zram_device(const Zram *z);

/* The page-cluster value found before zram_new() set it to 0. */
int zram_saved_page_cluster(const Zram *z);

/* From mm_stat: bytes stored (orig_data_size) and memory used (mem_used_total). */
int zram_mm_stat(const Zram *z, uint64_t *ret_orig, uint64_t *ret_used);

/* Whether the kernel's own zswap is enabled (it would sit in front of zram). */
bool zram_kernel_zswap_enabled(const char *sysfs);

/*
 * How many pages of [addr, addr+len) are resident, by mincore(); vec
 * (len / page size bytes) is left holding the answer per page. Counts all
 * pages as resident if mincore() fails.
 */
size_t zram_resident_pages(void *addr, size_t len, unsigned char *vec);

typedef struct ZramPageout {
        unsigned calls;        /* MADV_PAGEOUT calls made */
        size_t first_resident; /* pages the first call left resident */
        size_t resident;       /* pages still resident after the last */
} ZramPageout;

/*
 * Page [addr, addr+len) out to swap with MADV_PAGEOUT, and again while a call
 * still makes progress (the kernel skips pages it cannot isolate at that
 * moment), at most max_calls times. vec is as for zram_resident_pages().
 * Returns the number of pages out, or a negative errno.
 */
int zram_pageout(void *addr, size_t len, unsigned char *vec, unsigned max_calls, ZramPageout *ret);
