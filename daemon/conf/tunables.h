/*
 * tunables.h: the daemon's run-time policy knobs (docs/reclaim.md).
 *
 * The run-time half of daemon/conf/config.h's table of settings, used three
 * ways: the [reclaim] and [pool] sections of the configuration file
 * (--config), `zswapctl set KEY VALUE` and `zswapctl get [KEY]`. Values
 * are text on the wire and in the file and are parsed here, with units:
 * sizes take K, M, G, T suffixes (powers of 1024) or a percentage of the
 * machine's RAM ("10%"); durations take s, ms, m, h (plain numbers are
 * seconds); booleans are yes/no/on/off/1/0/true/false. The struct is
 * owned by the manager thread; other threads read the few fields they
 * need through the manager's copies.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Tunables {
        /* per-client policy defaults (a client's own setting overrides) */
        uint64_t limit;              /* key "limit": resident limit in bytes, 0 = none */
        uint64_t idle_age_ms;        /* key "idle_age": evict pages untouched this long, 0 = off */
        /* system pressure (senpai-style) */
        double pressure_target;      /* key "pressure_target": PSI memory "some" stall share over each period, percent; 0 = off */
        uint64_t min_free;           /* key "min_free": keep MemAvailable above this (bytes), 0 = off */
        double pressure_step;        /* key "pressure_step": most of the managed memory one
                                      * period may add to what is held out, percent (default 2) */
        uint64_t pressure_period_ms; /* key "pressure_period": control period (default 2 s) */
        /* pool bound, as zswap's max_pool_percent / accept_threshold_percent */
        uint64_t pool_max;           /* key "pool_max": bytes, 0 = unbounded */
        double pool_accept;          /* key "pool_accept": percent of pool_max under which
                                      * eviction resumes after the pool was full (default 90) */
        double pool_compact;         /* key "pool_compact": compact a client's pool once the chunks
                                      * that would empty come to this percent of it (default 5), 0 = never */
        /* thrash protection */
        uint64_t thrash_refaults;    /* key "thrash_refaults": refaults per second in one 2 MiB
                                      * zone above which the zone is backed off, 0 = off (default 128) */
        uint64_t thrash_backoff_ms;  /* key "thrash_backoff": first back-off (default 2 s),
                                      * doubling up to 64x while it keeps thrashing */
        /* ageing and mechanics */
        bool keep_clean;             /* key "keep_clean": keep the compressed copy of a page
                                      * restored by a read until it is written (default yes) */
        double clean_max;            /* key "clean_max": most those copies may take, in percent
                                      * of the client's registered memory (default 2) */
        bool fault_history;          /* key "fault_history": a fault also brings back the pages that
                                      * followed it the last times it was taken (default yes) */
        bool refill;                 /* key "refill": bring held pages back ahead of use when
                                      * room opens or an idle client wakes (default yes) */
        uint64_t refill_quiet_ms;    /* key "refill_quiet": a client quiet this long (no refault, no
                                      * write seen) that refaults woke (default 10 s), 0 = never */
        uint64_t write_scan_ms;      /* key "write_scan": how often written pages are looked
                                      * up with PAGEMAP_SCAN (default 1 s), 0 = never */
        uint64_t interval_ms;        /* key "interval": reclaim tick (default 250 ms) */
        /* the strong tier of compression (docs/reclaim.md, "Recompression") */
        uint64_t recompress_age_ms;  /* key "recompress_age": recompress objects unused this long
                                      * with zstd (default 2 min), 0 = off */
        uint64_t recompress_level;   /* key "recompress_level": its zstd level (default 9) */
        double recompress_cpu;       /* key "recompress_cpu": most of one CPU it may use, percent (default 10) */
        bool recompress_dict;        /* key "recompress_dict": train a zstd dictionary per client and
                                      * recompress with it (default yes) */
        bool dedup;                  /* key "dedup": a page shared after fork held once for its
                                      * user's processes (default yes) */
} Tunables;

/* The defaults: each key's row of config_settings[] (daemon/conf/config.c). */
void tunables_default(Tunables *t);

/*
 * Set key to value. 0, -ENOENT for an unknown key, -EINVAL for a value
 * that does not parse or is out of range; err (if not NULL) gets one line
 * saying why, in words an operator can act on ("pool_accept: 120 is not a
 * percentage between 1 and 100"). t is unchanged on error.
 */
int tunable_set(Tunables *t, const char *key, const char *value, char *err, size_t errlen);

/* Current value of key, formatted as it would be written in the file
 * ("64M", "30s", "0.5", "yes"). 0 or -ENOENT. */
int tunable_get(const Tunables *t, const char *key, char *buf, size_t len);

/* The keys, in table order; NULL after the last. */
const char *tunable_key(size_t i);

/* One line saying what the i-th key does (its row of config_settings[],
 * above its key in systemd/zswapd.conf); NULL after the last. */
const char *tunable_help(size_t i);
