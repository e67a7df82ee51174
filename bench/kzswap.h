/*
 * kzswap.h: the kernel's zswap in front of a swapfile of the benchmark's
 * own, the second reference zswapd is measured against.
 *
 * kzswap_new() creates the swapfile, swaps on it at the highest priority,
 * turns swap readahead off (page-cluster 0: a fault reads one page, as a
 * zswapd fault does), and sets zswap's module parameters: the compressor,
 * max_pool_percent (the caller's: backend.c asks for one high enough for the
 * whole data set), the shrinker off (so no page is written on to the disk)
 * unless the caller asks for writeback, and enabled. kzswap_teardown() puts
 * every parameter back as it was found, swaps off and deletes the file.
 *
 * The caller holds the benchmarks' lock (backend.c) for the whole time.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

typedef struct KZswap KZswap;

/* Where a run that was killed before its teardown is found and undone. */
#define KZSWAP_STATE_FILE "/run/zswap-bench-kzswap.state"

typedef struct KZswapSetup {
        const char *sysfs;      /* root of /sys */
        const char *procfs;     /* root of /proc */
        const char *swapfile;   /* created, must be ours alone (e.g. /var/tmp/zswap-bench.swap) */
        const char *state;      /* KZSWAP_STATE_FILE, or a fixture's */
        const char *compressor; /* one the kernel has, e.g. "lzo" */
        uint64_t size;          /* swapfile bytes */
        unsigned max_pool_percent; /* of total RAM; written as given */
        /* false (the default): shrinker_enabled=N, pages stay in the pool.
         * true: shrinker_enabled=Y, zswap writes pool pages on to the
         * swapfile (bench-tier's reference for a second tier). */
        bool writeback;
} KZswapSetup;

/*
 * Set it all up. If the state file of an earlier run is there (that run
 * was killed), it is undone first. On failure everything done is undone and
 * a negative errno is returned: -ENODEV if the kernel has no zswap, -EINVAL
 * if it lacks the compressor.
 */
int kzswap_new(const KZswapSetup *s, KZswap **ret);

/*
 * If the state file is there, a run was killed before its teardown: put
 * back what it recorded (zswap's parameters, page-cluster), swapoff and
 * delete its swapfile, delete the state file. 0 if there was nothing to do.
 * Call it holding the benchmarks' lock, before setting up any kernel swap:
 * zram must not run with a killed run's zswap still enabled in front of it.
 */
int kzswap_recover(const char *sysfs, const char *procfs, const char *state);

/*
 * Restore the parameters and page-cluster, swapoff, delete the swapfile and
 * the state file, whichever is still to do. Every step is tried even if one
 * fails; returns the first failure. Safe to call more than once.
 */
int kzswap_teardown(KZswap *k);

/* kzswap_teardown() and free; accepts NULL, returns NULL. */
KZswap *kzswap_free(KZswap *k);
static inline void kzswap_freep(KZswap **k) {
        kzswap_free(*k);
}
#define _cleanup_kzswap_ _cleanup_(kzswap_freep)

/* A line saying what was set up (file, size, parameters before -> now). */
const char *kzswap_describe(const KZswap *k);

typedef struct KZswapStats {
        uint64_t stored_pages;  /* pages zswap holds */
        uint64_t pool_bytes;    /* memory its pool takes */
        uint64_t rejected;      /* stores refused (they went on to the disk); UINT64_MAX: unknown */
        uint64_t written_back;  /* pages written on to the disk; UINT64_MAX: unknown */
        uint64_t pool_limit_hit; /* stores refused because the pool was full; UINT64_MAX: unknown */
        bool debugfs;           /* false: from /proc/meminfo, machine-wide */
} KZswapStats;

/*
 * Read zswap's counters (rejected, written_back and pool_limit_hit since
 * set-up) from debugfs (mounted on a private directory for
 * the read if it is not mounted), else Zswap/Zswapped of /proc/meminfo.
 */
int kzswap_stats(const KZswap *k, KZswapStats *ret);
