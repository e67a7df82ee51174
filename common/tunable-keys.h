/*
 * tunable-keys.h: the names of zswapd's run-time tunables.
 *
 * Shared so that zswapctl can list them (`zswapctl get` asks the daemon
 * key by key) without linking the daemon. The daemon's table of types,
 * ranges and help lines (daemon/conf/tunables.c) is indexed by TunableKey, so a
 * name cannot drift from its entry. The order is the one zswapctl prints.
 */
#pragma once

typedef enum TunableKey {
        TUNABLE_LIMIT,
        TUNABLE_IDLE_AGE,
        TUNABLE_PRESSURE_TARGET,
        TUNABLE_MIN_FREE,
        TUNABLE_PRESSURE_STEP,
        TUNABLE_PRESSURE_PERIOD,
        TUNABLE_POOL_MAX,
        TUNABLE_POOL_ACCEPT,
        TUNABLE_POOL_COMPACT,
        TUNABLE_THRASH_REFAULTS,
        TUNABLE_THRASH_BACKOFF,
        TUNABLE_KEEP_CLEAN,
        TUNABLE_CLEAN_MAX,
        TUNABLE_REFILL,
        TUNABLE_REFILL_QUIET,
        TUNABLE_WRITE_SCAN,
        TUNABLE_INTERVAL,
        TUNABLE_RECOMPRESS_AGE,
        TUNABLE_RECOMPRESS_LEVEL,
        TUNABLE_RECOMPRESS_CPU,
        TUNABLE_RECOMPRESS_DICT,
        TUNABLE_DEDUP,
        TUNABLE_FAULT_HISTORY,
        _TUNABLE_KEY_MAX,
} TunableKey;

/* Daemon-wide keys, indexed by TunableKey. */
extern const char *const tunable_names[_TUNABLE_KEY_MAX];

/* Keys a client of process PID may have set for itself (`zswapctl set
 * --pid PID KEY VALUE`), NULL-terminated. */
extern const char *const tunable_client_names[];
