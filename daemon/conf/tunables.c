/*
 * tunables.c: the run-time half of the configuration module
 * (daemon/conf/config.c): how the [reclaim] and [pool] keys are typed, checked
 * and written as text.
 *
 * Every key is one row of keys[]: its type, where it lives in Tunables
 * and its range. Its default and help line are its row of
 * config_settings[] (daemon/conf/config.c), the one table of every setting;
 * its name is common/tunable-keys.c's (zswapctl lists them without
 * linking the daemon); both tables are indexed by the same enum. Setting
 * from the configuration file, from `zswapctl set`, the defaults, and
 * reading back for `zswapctl get` all go through that row, so a key cannot
 * accept a value in one place and refuse it in another.
 *
 * A value is parsed completely and range-checked before the field is
 * written, so a refused value leaves Tunables as it was (config_load()
 * goes further and parses the whole file into a copy). Ranges are checked
 * against the value in its field's unit (bytes, ms, percent, count): the
 * user's "0.5s" and "500ms" meet the same bound.
 *
 * Percentages of RAM ("pool_max = 10%") become bytes when they are set:
 * the machine's RAM does not change under a running daemon.
 *
 * No state, no locks: the caller owns the Tunables (the manager thread).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "config.h"
#include "macro.h"
#include "protocol.h"
#include "tunable-keys.h"
#include "tunables.h"
#include "util.h"

typedef enum KeyType {
        KEY_SIZE = 1, /* uint64_t bytes; a size or a percentage of RAM */
        KEY_DURATION, /* uint64_t milliseconds */
        KEY_PERCENT,  /* double */
        KEY_COUNT,    /* uint64_t */
        KEY_BOOL,     /* bool */
} KeyType;

typedef struct Key {
        KeyType type;
        size_t offset;   /* of the field in Tunables */
        bool zero_ok;    /* 0 (off) is accepted besides [min, max] */
        double min, max; /* in the field's unit; max 0: no bound but the type's */
} Key;

typedef union Value {
        uint64_t u;
        double d;
        bool b;
} Value;

#define FIELD(f) offsetof(Tunables, f)
#define SEC 1000.0
static const Key keys[_TUNABLE_KEY_MAX] = {
        [TUNABLE_LIMIT] = { KEY_SIZE, FIELD(limit), false, 0, 0 },
        [TUNABLE_IDLE_AGE] = { KEY_DURATION, FIELD(idle_age_ms), true, 1 * SEC, 30 * 24 * 3600 * SEC },
        [TUNABLE_PRESSURE_TARGET] = { KEY_PERCENT, FIELD(pressure_target), false, 0, 100 },
        [TUNABLE_MIN_FREE] = { KEY_SIZE, FIELD(min_free), false, 0, 0 },
        [TUNABLE_PRESSURE_STEP] = { KEY_PERCENT, FIELD(pressure_step), false, 0.1, 100 },
        [TUNABLE_PRESSURE_PERIOD] = { KEY_DURATION, FIELD(pressure_period_ms), false, 1 * SEC, 60 * SEC },
        [TUNABLE_POOL_MAX] = { KEY_SIZE, FIELD(pool_max), false, 0, 0 },
        [TUNABLE_POOL_ACCEPT] = { KEY_PERCENT, FIELD(pool_accept), false, 1, 100 },
        [TUNABLE_POOL_COMPACT] = { KEY_PERCENT, FIELD(pool_compact), false, 0, 100 },
        [TUNABLE_THRASH_REFAULTS] = { KEY_COUNT, FIELD(thrash_refaults), false, 0, 0 },
        [TUNABLE_THRASH_BACKOFF] = { KEY_DURATION, FIELD(thrash_backoff_ms), false, 0.1 * SEC, 600 * SEC },
        [TUNABLE_KEEP_CLEAN] = { KEY_BOOL, FIELD(keep_clean), false, 0, 0 },
        [TUNABLE_CLEAN_MAX] = { KEY_PERCENT, FIELD(clean_max), false, 0, 100 },
        [TUNABLE_REFILL] = { KEY_BOOL, FIELD(refill), false, 0, 0 },
        [TUNABLE_REFILL_QUIET] = { KEY_DURATION, FIELD(refill_quiet_ms), true, 1 * SEC, 3600 * SEC },
        [TUNABLE_WRITE_SCAN] = { KEY_DURATION, FIELD(write_scan_ms), true, 0.1 * SEC, 3600 * SEC },
        [TUNABLE_INTERVAL] = { KEY_DURATION, FIELD(interval_ms), false, 0.01 * SEC, 10 * SEC },
        [TUNABLE_RECOMPRESS_AGE] = { KEY_DURATION, FIELD(recompress_age_ms), true, 1 * SEC, 30 * 24 * 3600 * SEC },
        [TUNABLE_RECOMPRESS_LEVEL] = { KEY_COUNT, FIELD(recompress_level), false, 1, 22 },
        [TUNABLE_RECOMPRESS_CPU] = { KEY_PERCENT, FIELD(recompress_cpu), false, 0.1, 100 },
        [TUNABLE_RECOMPRESS_DICT] = { KEY_BOOL, FIELD(recompress_dict), false, 0, 0 },
        [TUNABLE_DEDUP] = { KEY_BOOL, FIELD(dedup), false, 0, 0 },
        [TUNABLE_FAULT_HISTORY] = { KEY_BOOL, FIELD(fault_history), false, 0, 0 },
};

/* What a value of each type looks like, for error messages. */
static const struct {
        const char *form, *noun;
} types[] = {
        [KEY_SIZE] = { "a size such as 4096, 64K, 1.5G, a percentage of RAM such as 10%, or none", "a size" },
        [KEY_DURATION] = { "a duration such as 250ms, 30s, 5m, 1h, or off", "a duration" },
        [KEY_PERCENT] = { "a percentage such as 0.5 or 90", "a percentage" },
        [KEY_COUNT] = { "a whole number", "a number" },
        [KEY_BOOL] = { "yes or no", "yes or no" },
};

void tunables_default(Tunables *t) {
        *t = (Tunables){ 0 };
        for (size_t i = 0; i < _TUNABLE_KEY_MAX; i++) {
                const ConfigSetting *s = config_tunable_setting(i);
                char err[160];
                if (tunable_set(t, tunable_names[i], s->def, err, sizeof(err)) < 0) {
                        /* a default its own row refuses: tests/test-tunables.c fails first */
                        fprintf(stderr, "zswapd: bad default of %s: %s\n", tunable_names[i], err);
                        abort();
                }
        }
}

const char *tunable_key(size_t i) {
        return i < _TUNABLE_KEY_MAX ? tunable_names[i] : NULL;
}

const char *tunable_help(size_t i) {
        return i < _TUNABLE_KEY_MAX ? config_tunable_setting(i)->help : NULL;
}

static int key_find(const char *name) {
        for (size_t i = 0; i < _TUNABLE_KEY_MAX; i++)
                if (strcmp(tunable_names[i], name) == 0)
                        return (int)i;
        return -ENOENT;
}

static int key_parse(const Key *k, const char *s, Value *v) {
        switch (k->type) {
        case KEY_SIZE: return conf_parse_size(s, conf_ram_bytes(), &v->u);
        case KEY_DURATION: return conf_parse_duration(s, &v->u);
        case KEY_PERCENT: return conf_parse_decimal(s, &v->d);
        case KEY_COUNT: return conf_parse_uint(s, &v->u);
        case KEY_BOOL: return conf_parse_bool(s, &v->b);
        }
        return -EINVAL;
}

static void key_format(const Key *k, Value v, char *buf, size_t len) {
        switch (k->type) {
        case KEY_SIZE: conf_format_size(v.u, buf, len); break;
        case KEY_DURATION: conf_format_duration(v.u, buf, len); break;
        case KEY_PERCENT: conf_format_decimal(v.d, buf, MIN(len, (size_t)ZSWAP_TUNABLE_VALUE_MAX)); break; /* a reply's room */
        case KEY_COUNT: snprintf(buf, len, "%llu", (unsigned long long)v.u); break;
        case KEY_BOOL: snprintf(buf, len, "%s", v.b ? "yes" : "no"); break;
        }
}

static bool key_in_range(const Key *k, Value v) {
        if (k->type == KEY_BOOL)
                return true; /* only v.b is set (valgrind saw v.u read) */
        double x = k->type == KEY_PERCENT ? v.d : (double)v.u;

        if (k->zero_ok && x == 0)
                return true;
        return x >= k->min && (k->max == 0 || x <= k->max);
}

/* min or max as a Value of the key's type, to print it */
static Value key_bound(const Key *k, double x) {
        return k->type == KEY_PERCENT ? (Value){ .d = x } : (Value){ .u = (uint64_t)x };
}

static Value key_load(const Key *k, const Tunables *t) {
        const char *p = (const char *)t + k->offset;
        Value v = { 0 };

        if (k->type == KEY_PERCENT)
                memcpy(&v.d, p, sizeof(v.d));
        else if (k->type == KEY_BOOL)
                memcpy(&v.b, p, sizeof(v.b));
        else
                memcpy(&v.u, p, sizeof(v.u));
        return v;
}

static void key_store(const Key *k, Tunables *t, Value v) {
        char *p = (char *)t + k->offset;

        if (k->type == KEY_PERCENT)
                memcpy(p, &v.d, sizeof(v.d));
        else if (k->type == KEY_BOOL)
                memcpy(p, &v.b, sizeof(v.b));
        else
                memcpy(p, &v.u, sizeof(v.u));
}

int tunable_set(Tunables *t, const char *key, const char *value, char *err, size_t errlen) {
        int i = key_find(key), r;
        char lo[32], hi[32];
        const Key *k;
        Value v;

        if (i < 0)
                return errorf(-ENOENT, err, errlen, "unknown key '%s' (zswapctl get lists them)", key);
        k = &keys[i];
        r = key_parse(k, value, &v);
        if (r == -ERANGE && strchr(value, '%'))
                return errorf(-EINVAL, err, errlen, "%s: %s is more than all of RAM (100%%)", key, value);
        if (r == -ERANGE)
                return errorf(-EINVAL, err, errlen, "%s: '%s' is too large", key, value);
        if (r < 0)
                return errorf(-EINVAL, err, errlen, "%s: '%s' is not %s", key, value, types[k->type].form);
        if (!key_in_range(k, v)) {
                key_format(k, key_bound(k, k->min), lo, sizeof(lo));
                key_format(k, key_bound(k, k->max), hi, sizeof(hi));
                return errorf(-EINVAL, err, errlen, "%s: %s is not %s%s between %s and %s", key, value,
                                 k->zero_ok ? "0 or " : "", types[k->type].noun, lo, hi);
        }
        key_store(k, t, v);
        return 0;
}

int tunable_get(const Tunables *t, const char *key, char *buf, size_t len) {
        int i = key_find(key);

        if (i < 0)
                return i;
        key_format(&keys[i], key_load(&keys[i], t), buf, len);
        return 0;
}
