/*
 * tunable-keys.c: the names behind tunable-keys.h; constant data only.
 */
#include <stddef.h>

#include "tunable-keys.h"

const char *const tunable_names[_TUNABLE_KEY_MAX] = {
        [TUNABLE_LIMIT] = "limit",
        [TUNABLE_IDLE_AGE] = "idle_age",
        [TUNABLE_PRESSURE_TARGET] = "pressure_target",
        [TUNABLE_MIN_FREE] = "min_free",
        [TUNABLE_PRESSURE_STEP] = "pressure_step",
        [TUNABLE_PRESSURE_PERIOD] = "pressure_period",
        [TUNABLE_POOL_MAX] = "pool_max",
        [TUNABLE_POOL_ACCEPT] = "pool_accept",
        [TUNABLE_POOL_COMPACT] = "pool_compact",
        [TUNABLE_THRASH_REFAULTS] = "thrash_refaults",
        [TUNABLE_THRASH_BACKOFF] = "thrash_backoff",
        [TUNABLE_KEEP_CLEAN] = "keep_clean",
        [TUNABLE_CLEAN_MAX] = "clean_max",
        [TUNABLE_REFILL] = "refill",
        [TUNABLE_REFILL_QUIET] = "refill_quiet",
        [TUNABLE_WRITE_SCAN] = "write_scan",
        [TUNABLE_INTERVAL] = "interval",
        [TUNABLE_RECOMPRESS_AGE] = "recompress_age",
        [TUNABLE_RECOMPRESS_LEVEL] = "recompress_level",
        [TUNABLE_RECOMPRESS_CPU] = "recompress_cpu",
        [TUNABLE_RECOMPRESS_DICT] = "recompress_dict",
        [TUNABLE_DEDUP] = "dedup",
        [TUNABLE_FAULT_HISTORY] = "fault_history",
};

const char *const tunable_client_names[] = { "limit", "idle_age", "reclaim", "group", "recompress_age", NULL };
