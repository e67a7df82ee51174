/*
 * test-tunables: the daemon's tunables as text (daemon/conf/tunables.c) and the
 * configuration file (common/conf.c).
 *
 * Every key round-trips through tunable_set()/tunable_get() with its units
 * and lands in its own field only; bad values are refused with a message
 * that names the key and the accepted form, and leave Tunables alone;
 * the [reclaim] and [pool] sections of a file, read by the daemon's one
 * reader (config_load(), daemon/conf/config.c), apply in full, report
 * "path:LINE: ..." for the first bad line and then change nothing; systemd/zswapd.conf lists every
 * key, commented out, with its default and its help line.
 */
#include <limits.h>
#include <stdbool.h>

#include "conf.h"
#include "config.h"
#include "macro.h"
#include "protocol.h"
#include "test.h"
#include "tunable-keys.h"
#include "tunables.h"

#define SIZE_FORM "a size such as 4096, 64K, 1.5G, a percentage of RAM such as 10%, or none"
#define DURATION_FORM "a duration such as 250ms, 30s, 5m, 1h, or off"
#define PERCENT_FORM "a percentage such as 0.5 or 90"

static const char *const defaults[][2] = {
        { "limit", "0" },         { "idle_age", "0" },       { "pressure_target", "0" }, { "min_free", "0" },
        { "pressure_step", "2" }, { "pressure_period", "2s" }, { "pool_max", "0" },        { "pool_accept", "90" },
        { "pool_compact", "5" },  { "thrash_refaults", "128" }, { "thrash_backoff", "2s" }, { "keep_clean", "yes" }, { "clean_max", "2" }, { "refill", "yes" }, { "refill_quiet", "10s" }, { "write_scan", "1s" },
        { "interval", "250ms" },      { "recompress_age", "2m" }, { "recompress_level", "9" }, { "recompress_cpu", "10" },
        { "recompress_dict", "yes" },
        { "dedup", "yes" },
        { "fault_history", "yes" },
};

static bool same(const Tunables *a, const Tunables *b) {
        return a->limit == b->limit && a->idle_age_ms == b->idle_age_ms && a->pressure_target == b->pressure_target &&
               a->min_free == b->min_free && a->pressure_step == b->pressure_step &&
               a->pressure_period_ms == b->pressure_period_ms && a->pool_max == b->pool_max &&
               a->pool_accept == b->pool_accept && a->pool_compact == b->pool_compact &&
               a->thrash_refaults == b->thrash_refaults &&
               a->thrash_backoff_ms == b->thrash_backoff_ms && a->keep_clean == b->keep_clean && a->clean_max == b->clean_max && a->refill == b->refill && a->refill_quiet_ms == b->refill_quiet_ms &&
               a->write_scan_ms == b->write_scan_ms && a->interval_ms == b->interval_ms &&
               a->recompress_age_ms == b->recompress_age_ms && a->recompress_level == b->recompress_level &&
               a->recompress_cpu == b->recompress_cpu && a->recompress_dict == b->recompress_dict &&
               a->dedup == b->dedup && a->fault_history == b->fault_history;
}

static const char *get(const Tunables *t, const char *key) {
        static char buf[ZSWAP_TUNABLE_VALUE_MAX];
        ASSERT_OK(tunable_get(t, key, buf, sizeof(buf)));
        return buf;
}

static void test_defaults(void) {
        Tunables t;
        char buf[16];

        tunables_default(&t);
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++) {
                ASSERT_STREQ(tunable_key(i), defaults[i][0]);
                ASSERT_STREQ(tunable_names[i], defaults[i][0]);
                ASSERT_STREQ(get(&t, defaults[i][0]), defaults[i][1]);
                ASSERT_TRUE(tunable_help(i) && strlen(tunable_help(i)) > 10);
        }
        ASSERT_TRUE(tunable_key(ELEMENTSOF(defaults)) == NULL);
        ASSERT_TRUE(tunable_help(ELEMENTSOF(defaults)) == NULL);
        ASSERT_EQ(ELEMENTSOF(defaults), _TUNABLE_KEY_MAX);
        ASSERT_EQ(t.limit, 0);
        ASSERT_EQ(t.pressure_period_ms, 2000);
        ASSERT_TRUE(t.pressure_step == 2 && t.pool_accept == 90);
        ASSERT_EQ(t.thrash_refaults, 128);
        ASSERT_EQ(t.thrash_backoff_ms, 2000);
        ASSERT_TRUE(t.keep_clean);
        ASSERT_TRUE(t.refill);
        ASSERT_EQ(t.write_scan_ms, 1000);
        ASSERT_EQ(t.interval_ms, 250);
        ASSERT_ERROR(tunable_get(&t, "nope", buf, sizeof(buf)), ENOENT);
        ASSERT_EQ(t.recompress_age_ms, 120000);
        ASSERT_EQ(t.recompress_level, 9);
        /* the per-client keys zswapctl lists: three of them are tunables too */
        ASSERT_STREQ(tunable_client_names[0], "limit");
        ASSERT_STREQ(tunable_client_names[1], "idle_age");
        ASSERT_STREQ(tunable_client_names[2], "reclaim");
        ASSERT_STREQ(tunable_client_names[3], "group"); /* read-only: the process's group and its figures */
        ASSERT_STREQ(tunable_client_names[4], "recompress_age");
        ASSERT_TRUE(tunable_client_names[5] == NULL);
}

/* key, what is set, what reads back */
static const char *const round_trips[][3] = {
        { "limit", "0", "0" },
        { "recompress_age", "0", "0" },
        { "recompress_age", "90s", "90s" },
        { "recompress_level", "19", "19" },
        { "recompress_cpu", "2.5", "2.5" },
        { "recompress_dict", "no", "no" },
        { "dedup", "no", "no" },
        { "fault_history", "no", "no" },
        { "limit", "none", "0" },
        { "limit", "4096", "4K" },
        { "limit", "4097", "4097" },
        { "limit", "64K", "64K" },
        { "limit", "67108864", "64M" },
        { "limit", "64M", "64M" },
        { "limit", "1.5G", "1536M" },
        { "limit", "0.5K", "512" },
        { "limit", "2T", "2T" },
        { "limit", "3g", "3G" },
        { "limit", "512MiB", "512M" },
        { "limit", "512MB", "512M" },
        { "limit", "18446744073709551615", "18446744073709551615" },
        { "idle_age", "0", "0" },
        { "idle_age", "off", "0" },
        { "idle_age", "30", "30s" },
        { "idle_age", "90s", "90s" },
        { "idle_age", "120s", "2m" },
        { "idle_age", "5m", "5m" },
        { "idle_age", "1h", "1h" },
        { "idle_age", "1.5h", "90m" },
        { "idle_age", "1500ms", "1500ms" },
        { "idle_age", "720h", "720h" },
        { "pressure_target", "0.5", "0.5" },
        { "pressure_target", "10", "10" },
        { "pressure_target", "100", "100" },
        { "min_free", "256M", "256M" },
        { "min_free", "1.25G", "1280M" },
        { "pressure_step", "0.1", "0.1" },
        { "pressure_step", "2.5", "2.5" },
        { "pressure_step", "100", "100" },
        { "pressure_period", "1s", "1s" },
        { "pressure_period", "1500ms", "1500ms" },
        { "pressure_period", "60", "1m" },
        { "pool_max", "1G", "1G" },
        { "pool_max", "10000000", "10000000" },
        { "pool_accept", "1", "1" },
        { "pool_accept", "85%", "85" },
        { "pool_accept", "99.5", "99.5" },
        { "pool_compact", "0", "0" },
        { "pool_compact", "12.5%", "12.5" },
        { "thrash_refaults", "0", "0" },
        { "thrash_refaults", "1000", "1000" },
        { "thrash_backoff", "100ms", "100ms" },
        { "thrash_backoff", "10m", "10m" },
        { "clean_max", "0", "0" },
        { "clean_max", "100", "100" },
        { "clean_max", "2.5%", "2.5" },
        { "refill", "no", "no" },
        { "refill_quiet", "0", "0" },
        { "refill_quiet", "90s", "90s" },
        { "keep_clean", "no", "no" },
        { "keep_clean", "YES", "yes" },
        { "keep_clean", "off", "no" },
        { "keep_clean", "On", "yes" },
        { "keep_clean", "false", "no" },
        { "keep_clean", "true", "yes" },
        { "keep_clean", "0", "no" },
        { "keep_clean", "1", "yes" },
        { "write_scan", "0", "0" },
        { "write_scan", "off", "0" },
        { "write_scan", "100ms", "100ms" },
        { "write_scan", "1h", "1h" },
        { "interval", "10ms", "10ms" },
        { "interval", "10s", "10s" },
        { "interval", "0.5", "500ms" },
};

/* Set key, check what reads back, that the text read back parses to the
 * same, and that no other key moved. */
static void round_trip(const char *key, const char *in, const char *out) {
        Tunables t, again, d;
        char err[256] = "", back[ZSWAP_TUNABLE_VALUE_MAX];

        tunables_default(&t);
        d = t;
        if (tunable_set(&t, key, in, err, sizeof(err)) < 0)
                test_fail("%s = %s refused: %s", key, in, err);
        snprintf(back, sizeof(back), "%s", get(&t, key));
        if (strcmp(back, out) != 0)
                test_fail("%s = %s reads back as '%s', not '%s'", key, in, back, out);
        again = d;
        ASSERT_OK(tunable_set(&again, key, back, err, sizeof(err)));
        ASSERT_TRUE(same(&t, &again));
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                if (strcmp(defaults[i][0], key) != 0)
                        ASSERT_STREQ(get(&t, defaults[i][0]), defaults[i][1]);
}

static void test_round_trips(void) {
        Tunables t;

        for (size_t i = 0; i < ELEMENTSOF(round_trips); i++)
                round_trip(round_trips[i][0], round_trips[i][1], round_trips[i][2]);
        /* every key is moved off its default at least once above */
        for (size_t k = 0; k < ELEMENTSOF(defaults); k++) {
                bool moved = false;
                for (size_t i = 0; i < ELEMENTSOF(round_trips); i++)
                        moved |= strcmp(round_trips[i][0], defaults[k][0]) == 0 &&
                                 strcmp(round_trips[i][2], defaults[k][1]) != 0;
                if (!moved)
                        test_fail("no round trip moves %s", defaults[k][0]);
        }

        /* the fields themselves, in their units */
        tunables_default(&t);
        ASSERT_OK(tunable_set(&t, "limit", "1.5G", NULL, 0));
        ASSERT_EQ(t.limit, 1536ull << 20);
        ASSERT_OK(tunable_set(&t, "idle_age", "1.5h", NULL, 0));
        ASSERT_EQ(t.idle_age_ms, 90 * 60 * 1000);
        ASSERT_OK(tunable_set(&t, "interval", "0.5", NULL, 0));
        ASSERT_EQ(t.interval_ms, 500);
        ASSERT_OK(tunable_set(&t, "pressure_step", "2.5", NULL, 0));
        ASSERT_TRUE(t.pressure_step == 2.5);
        ASSERT_OK(tunable_set(&t, "pool_accept", "85%", NULL, 0));
        ASSERT_TRUE(t.pool_accept == 85);
        ASSERT_OK(tunable_set(&t, "keep_clean", "off", NULL, 0));
        ASSERT_TRUE(!t.keep_clean);
        ASSERT_OK(tunable_set(&t, "thrash_refaults", "7", NULL, 0));
        ASSERT_EQ(t.thrash_refaults, 7);
}

static void test_ram_percent(void) {
        uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE), v;
        char err[256];
        Tunables t;

        tunables_default(&t);
        ASSERT_TRUE(ram > 0);
        ASSERT_OK(tunable_set(&t, "pool_max", "10%", err, sizeof(err)));
        ASSERT_TRUE(t.pool_max <= ram / 10 && t.pool_max + 4096 > ram / 10);
        ASSERT_EQ(t.pool_max % 4096, 0);
        ASSERT_OK(tunable_set(&t, "min_free", "0.5%", err, sizeof(err)));
        ASSERT_TRUE(t.min_free <= ram / 200 && t.min_free + 4096 > ram / 200);
        ASSERT_OK(tunable_set(&t, "limit", "100%", err, sizeof(err)));
        ASSERT_EQ(t.limit, ram);
        /* and back: a size that parses to the same bytes */
        ASSERT_OK(conf_parse_size(get(&t, "limit"), 0, &v));
        ASSERT_EQ(v, ram);
        ASSERT_ERROR(tunable_set(&t, "pool_max", "101%", err, sizeof(err)), EINVAL);
        ASSERT_STREQ(err, "pool_max: 101% is more than all of RAM (100%)");
        ASSERT_ERROR(tunable_set(&t, "pool_max", "100.5%", err, sizeof(err)), EINVAL);
        ASSERT_ERROR(tunable_set(&t, "interval", "10%", err, sizeof(err)), EINVAL);
        ASSERT_STREQ(err, "interval: '10%' is not " DURATION_FORM);
        /* without a RAM size (zswapctl's sizes are bytes) a percentage is no size */
        ASSERT_ERROR(conf_parse_size("10%", 0, &v), EINVAL);
}

/* key, refused value, the whole message */
static const char *const refusals[][3] = {
        /* out of range */
        { "pool_accept", "120", "pool_accept: 120 is not a percentage between 1 and 100" },
        { "pool_accept", "0", "pool_accept: 0 is not a percentage between 1 and 100" },
        { "pool_accept", "0.5", "pool_accept: 0.5 is not a percentage between 1 and 100" },
        { "pool_compact", "101", "pool_compact: 101 is not a percentage between 0 and 100" },
        { "pressure_target", "100.5", "pressure_target: 100.5 is not a percentage between 0 and 100" },
        { "pressure_step", "0.05", "pressure_step: 0.05 is not a percentage between 0.1 and 100" },
        { "pressure_step", "0", "pressure_step: 0 is not a percentage between 0.1 and 100" },
        { "interval", "5ms", "interval: 5ms is not a duration between 10ms and 10s" },
        { "interval", "0", "interval: 0 is not a duration between 10ms and 10s" },
        { "interval", "11s", "interval: 11s is not a duration between 10ms and 10s" },
        { "write_scan", "50ms", "write_scan: 50ms is not 0 or a duration between 100ms and 1h" },
        { "write_scan", "2h", "write_scan: 2h is not 0 or a duration between 100ms and 1h" },
        { "pressure_period", "500ms", "pressure_period: 500ms is not a duration between 1s and 1m" },
        { "pressure_period", "61s", "pressure_period: 61s is not a duration between 1s and 1m" },
        { "idle_age", "500ms", "idle_age: 500ms is not 0 or a duration between 1s and 720h" },
        { "thrash_backoff", "off", "thrash_backoff: off is not a duration between 100ms and 10m" },
        { "recompress_level", "0", "recompress_level: 0 is not a number between 1 and 22" },
        { "recompress_level", "23", "recompress_level: 23 is not a number between 1 and 22" },
        { "recompress_cpu", "0", "recompress_cpu: 0 is not a percentage between 0.1 and 100" },
        { "recompress_age", "100ms", "recompress_age: 100ms is not 0 or a duration between 1s and 720h" },
        /* not a value of the type */
        { "limit", "12x", "limit: '12x' is not " SIZE_FORM },
        { "limit", "-1", "limit: '-1' is not " SIZE_FORM },
        { "limit", "", "limit: '' is not " SIZE_FORM },
        { "limit", " 64M", "limit: ' 64M' is not " SIZE_FORM },
        { "limit", "64M ", "limit: '64M ' is not " SIZE_FORM },
        { "limit", "64 M", "limit: '64 M' is not " SIZE_FORM },
        { "limit", "1.", "limit: '1.' is not " SIZE_FORM },
        { "limit", ".5G", "limit: '.5G' is not " SIZE_FORM },
        { "limit", "1e3", "limit: '1e3' is not " SIZE_FORM },
        { "limit", "0x10", "limit: '0x10' is not " SIZE_FORM },
        { "limit", "64P", "limit: '64P' is not " SIZE_FORM },
        { "min_free", "+5M", "min_free: '+5M' is not " SIZE_FORM },
        { "pool_max", "99999999999999999999x", "pool_max: '99999999999999999999x' is not " SIZE_FORM },
        { "interval", "250 ms", "interval: '250 ms' is not " DURATION_FORM },
        { "interval", "1d", "interval: '1d' is not " DURATION_FORM },
        { "interval", "-1s", "interval: '-1s' is not " DURATION_FORM },
        { "interval", "1sec", "interval: '1sec' is not " DURATION_FORM },
        { "interval", "inf", "interval: 'inf' is not " DURATION_FORM },
        { "interval", "1M", "interval: '1M' is not " DURATION_FORM },
        { "pressure_target", "nan", "pressure_target: 'nan' is not " PERCENT_FORM },
        { "pressure_target", "1e1", "pressure_target: '1e1' is not " PERCENT_FORM },
        { "pressure_target", "-1", "pressure_target: '-1' is not " PERCENT_FORM },
        { "pressure_target", "0x1", "pressure_target: '0x1' is not " PERCENT_FORM },
        { "pressure_target", "5 %", "pressure_target: '5 %' is not " PERCENT_FORM },
        { "pool_accept", "ninety", "pool_accept: 'ninety' is not " PERCENT_FORM },
        { "keep_clean", "maybe", "keep_clean: 'maybe' is not yes or no" },
        { "keep_clean", "", "keep_clean: '' is not yes or no" },
        { "keep_clean", "yess", "keep_clean: 'yess' is not yes or no" },
        { "thrash_refaults", "1.5", "thrash_refaults: '1.5' is not a whole number" },
        { "thrash_refaults", "-3", "thrash_refaults: '-3' is not a whole number" },
        /* beyond 64 bits */
        { "limit", "16777216T", "limit: '16777216T' is too large" },
        { "limit", "18446744073709551616", "limit: '18446744073709551616' is too large" },
        { "idle_age", "99999999999999999999h", "idle_age: '99999999999999999999h' is too large" },
        { "thrash_refaults", "99999999999999999999", "thrash_refaults: '99999999999999999999' is too large" },
};

static void test_refusals(void) {
        Tunables t, before;
        char err[256], small[8];

        /* start from a state that is not the defaults, to see nothing moves */
        tunables_default(&t);
        ASSERT_OK(tunable_set(&t, "limit", "1G", NULL, 0));
        ASSERT_OK(tunable_set(&t, "pressure_step", "3.5", NULL, 0));
        ASSERT_OK(tunable_set(&t, "keep_clean", "no", NULL, 0));
        before = t;
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                err[0] = 0;
                int r = tunable_set(&t, refusals[i][0], refusals[i][1], err, sizeof(err));
                if (r != -EINVAL)
                        test_fail("%s = '%s': %d, not -EINVAL", refusals[i][0], refusals[i][1], r);
                ASSERT_STREQ(err, refusals[i][2]);
                ASSERT_TRUE(same(&t, &before));
        }
        ASSERT_ERROR(tunable_set(&t, "nope", "1", err, sizeof(err)), ENOENT);
        ASSERT_STREQ(err, "unknown key 'nope' (zswapctl get lists them)");
        ASSERT_ERROR(tunable_set(&t, "", "1", err, sizeof(err)), ENOENT);
        /* no message buffer, or a short one */
        ASSERT_ERROR(tunable_set(&t, "interval", "x", NULL, 0), EINVAL);
        ASSERT_ERROR(tunable_set(&t, "interval", "x", small, sizeof(small)), EINVAL);
        ASSERT_STREQ(small, "interva");
        ASSERT_TRUE(same(&t, &before));
}

/* ---- configuration files ---- */

static char dir[] = "/tmp/test-tunables-XXXXXX";

static const char *write_file(const char *name, const char *text) {
        static char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f);
        ASSERT_EQ(fputs(text, f) >= 0, 1);
        ASSERT_OK(fclose(f));
        return path;
}

static const char good_conf[] = "# every key, in both sections\n"
                                "; a comment of the other kind\n"
                                "\n"
                                "[reclaim]\n"
                                "limit = 512M\n"
                                "idle_age=5m\n"
                                "   pressure_target   =   0.5   \n"
                                "min_free = 1G\n"
                                "pressure_step = 5\n"
                                "pressure_period = 4s\n"
                                "\tthrash_refaults = 64\n"
                                "thrash_backoff = 500ms\n"
                                "keep_clean = no\n"
                                "clean_max = 50\n"
                                "fault_history = no\n"
                                "refill = no\n"
                                "refill_quiet = 30s\n"
                                "write_scan = 0\n"
                                "interval = 100ms\r\n"
                                "pool_max = 1G\n"
                                "\n"
                                "[users]\n"
                                "# another section's limit: not the [reclaim] one\n"
                                "allow = *\n"
                                "limit = 64M\n"
                                "\n"
                                "[pool]\n"
                                "recompress_age = 10m\n"
                                "recompress_level = 12\n"
                                "recompress_cpu = 25\n"
                                "recompress_dict = no\n"
                                "dedup = no\n"
                                "pool_max = 2G\n"
                                "pool_accept = 80\n"
                                "pool_compact = 20\n";

static const char *const good_values[][2] = {
        { "limit", "512M" },        { "idle_age", "5m" },      { "pressure_target", "0.5" }, { "min_free", "1G" },
        { "pressure_step", "5" },   { "pressure_period", "4s" }, { "pool_max", "2G" },         { "pool_accept", "80" },
        { "thrash_refaults", "64" }, { "thrash_backoff", "500ms" }, { "keep_clean", "no" },     { "write_scan", "0" },
        { "interval", "100ms" },    { "clean_max", "50" },     { "pool_compact", "20" },     { "refill", "no" },
        { "refill_quiet", "30s" },  { "recompress_age", "10m" }, { "recompress_level", "12" }, { "recompress_cpu", "25" },
        { "recompress_dict", "no" },  { "dedup", "no" },          { "fault_history", "no" },
};

/* The [reclaim] and [pool] settings of path over t, through the file
 * reader the daemon uses; t is unchanged on error. */
static int load_tunables(Tunables *t, const char *path, char *err, size_t errlen) {
        Config c;
        int r;

        config_default(&c);
        c.tun = *t;
        r = config_load(&c, path, err, errlen);
        if (r == 0)
                *t = c.tun;
        config_free(&c);
        return r;
}

/* A file that fails on line; t must not move. */
static void load_fails(Tunables *t, const char *text, int error, unsigned line, const char *msg) {
        const char *path = write_file("bad.conf", text);
        Tunables before = *t;
        char err[512] = "", want[512];

        ASSERT_ERROR(load_tunables(t, path, err, sizeof(err)), error);
        snprintf(want, sizeof(want), "%s:%u: %s", path, line, msg);
        ASSERT_STREQ(err, want);
        ASSERT_TRUE(same(t, &before));
}

static void test_load(void) {
        char err[512] = "", want[512];
        Tunables t, d;

        ASSERT_TRUE(mkdtemp(dir));
        tunables_default(&t);
        d = t;
        const char *path = write_file("good.conf", good_conf);
        if (load_tunables(&t, path, err, sizeof(err)) < 0)
                test_fail("good.conf: %s", err);
        for (size_t i = 0; i < ELEMENTSOF(good_values); i++)
                ASSERT_STREQ(get(&t, good_values[i][0]), good_values[i][1]);
        ASSERT_EQ(ELEMENTSOF(good_values), _TUNABLE_KEY_MAX);
        ASSERT_EQ(t.limit, 512ull << 20);
        ASSERT_TRUE(t.pressure_target == 0.5 && !t.keep_clean);

        /* each failure leaves the good file's values, even where lines before it were fine */
        load_fails(&t, "[reclaim]\ninterval = 1s\n\nbogus = 1\n", EINVAL, 4,
                   "unknown key 'bogus' in [reclaim] (zswapctl get lists them)");
        load_fails(&t, "# c\n[pool]\npool_accept = 120\n", EINVAL, 3,
                   "pool_accept: 120 is not a percentage between 1 and 100");
        load_fails(&t, "[reclaim]\nlimit = 1G\nkeep_clean\n", EINVAL, 3, "expected key = value, got 'keep_clean'");
        load_fails(&t, "[users]\nlimit = 1G\nkeep_clean\n", EINVAL, 3, "expected key = value, got 'keep_clean'");
        load_fails(&t, "[pool]\ninterval = 1s\n", EINVAL, 2, "unknown key 'interval' in [pool] (pool_max, pool_accept, pool_compact, recompress_age, recompress_level, recompress_cpu, recompress_dict, dedup)");
        load_fails(&t, "\nlimit = 1G\n[reclaim]\n", EINVAL, 2, "'limit' comes before any [section]");
        load_fails(&t, "[reclaim\nlimit = 1G\n", EINVAL, 1, "expected [section], got '[reclaim'");
        load_fails(&t, "[reclaim]\n = 5\n", EINVAL, 2, "no key before '='");
        load_fails(&t, "[reclaim]\ninterval = 250ms # faster\n", EINVAL, 2,
                   "interval: '250ms # faster' is not " DURATION_FORM);
        for (size_t i = 0; i < ELEMENTSOF(good_values); i++)
                ASSERT_STREQ(get(&t, good_values[i][0]), good_values[i][1]);

        /* no file */
        snprintf(want, sizeof(want), "%s/missing.conf", dir);
        ASSERT_ERROR(load_tunables(&t, want, err, sizeof(err)), ENOENT);
        ASSERT_TRUE(strstr(err, want) == err && strstr(err, "No such file"));

        /* an empty file and one with only other sections change nothing */
        ASSERT_OK(load_tunables(&d, write_file("empty.conf", ""), err, sizeof(err)));
        ASSERT_OK(load_tunables(&d, write_file("other.conf", "[daemon]\nworkers = 2\n[users]\nlimit = 1G\n"), err,
                                sizeof(err)));
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                ASSERT_STREQ(get(&d, defaults[i][0]), defaults[i][1]);
}

/* systemd/zswapd.conf: every key once, commented out, with its default
 * and its help line just above; loading it changes nothing. */
static void test_shipped_conf(void) {
        char path[2 * PATH_MAX], err[512], line[512], prev[2][512] = { "", "" };
        unsigned seen[ELEMENTSOF(defaults)] = { 0 };
        Tunables t, d;

        test_source_path(__FILE__, "../../systemd/zswapd.conf", path, sizeof(path));

        tunables_default(&t);
        d = t;
        if (load_tunables(&t, path, err, sizeof(err)) < 0)
                test_fail("%s", err);
        ASSERT_TRUE(same(&t, &d));

        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f);
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = 0;
                for (size_t i = 0; i < ELEMENTSOF(defaults); i++) {
                        char want[128], help[256];
                        snprintf(want, sizeof(want), "#%s = %s", defaults[i][0], defaults[i][1]);
                        if (strcmp(line, want) != 0)
                                continue;
                        snprintf(help, sizeof(help), "# %s", tunable_help(i));
                        if (strcmp(prev[0], help) != 0 && strcmp(prev[1], help) != 0)
                                test_fail("zswapd.conf: no '%s' above '%s'", help, want);
                        seen[i]++;
                }
                memcpy(prev[0], prev[1], sizeof(prev[0]));
                memcpy(prev[1], line, sizeof(prev[1]));
        }
        fclose(f);
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                if (seen[i] != 1)
                        test_fail("zswapd.conf: '#%s = %s' appears %u times", defaults[i][0], defaults[i][1], seen[i]);
}

int main(void) {
        test_defaults();
        test_round_trips();
        test_ram_percent();
        test_refusals();
        test_load();
        test_shipped_conf();
        for (size_t i = 0; i < 4; i++) {
                char path[PATH_MAX];
                snprintf(path, sizeof(path), "%s/%s", dir, (const char *[]){ "good.conf", "bad.conf", "empty.conf", "other.conf" }[i]);
                ASSERT_OK(unlink(path));
        }
        ASSERT_OK(rmdir(dir));
        return 0;
}
