/*
 * test-config.c: zswapd.conf(5) as a whole (daemon/conf/config.c): the
 * [daemon], [users] and [user:NAME] sections, the rules they make, the
 * errors a bad file gets (with its file:line), and the shipped
 * systemd/zswapd.conf (every key, commented out, at its default).
 *
 * The table of settings (config_settings[]) is the one source of
 * defaults: every row's default reads back as the default, the rows cover
 * every field (a Config scribbled over and then given every row's default
 * as a file is config_default()'s again), the command line's starting
 * point (manager_config_defaults(), what main() uses) and zswapd --help
 * say the same, and so do the shipped file and the constants other
 * modules keep for themselves.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "conf.h"
#include "macro.h"
#include "manager.h"
#include "memread.h"
#include "protocol.h"
#include "test.h"
#include "tunable-keys.h"

static char path[64];

static void write_file(const char *text) {
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f != NULL);
        fputs(text, f);
        ASSERT_OK(fclose(f));
}

static int load(Config *c, const char *text, char *err, size_t len) {
        write_file(text);
        return config_load(c, path, err, len);
}

static void test_defaults(void) {
        Config c;
        UserLimits l;

        config_default(&c);
        ASSERT_STREQ(c.daemon.socket, "/run/zswapd/zswapd.sock");
        ASSERT_TRUE(c.daemon.lock_memory && c.daemon.sandbox);
        ASSERT_EQ(c.daemon.set, 0u);
        /* nobody but root is a client until the file says so */
        ASSERT_TRUE(config_user_allowed(&c.users, 0, NULL, 0));
        ASSERT_TRUE(!config_user_allowed(&c.users, 1000, NULL, 0));
        config_user_limits(&c.users, 1000, &l);
        ASSERT_EQ(l.v[UKEY_MAX_CONNECTIONS], 64u);
        ASSERT_EQ(l.v[UKEY_MAX_REGIONS], 4096u);
        ASSERT_EQ(l.v[UKEY_MAX_REQUESTS], 1000u);
        ASSERT_EQ(l.v[UKEY_MAX_POOL], 0u);
        config_user_limits(&c.users, 0, &l);
        ASSERT_EQ(l.v[UKEY_MAX_CONNECTIONS], UINT64_MAX);
        ASSERT_EQ(l.v[UKEY_MAX_REQUESTS], 0u);
        config_free(&c);
}

static void test_sections(void) {
        char err[512] = "";
        Config c;
        UserLimits l;
        gid_t g_clients[] = { 500, 700 }, g_admin[] = { 900 };

        config_default(&c);
        int r = load(&c,
                     "[daemon]\n"
                     "socket = /run/test/z.sock\n"
                     "compressor = zstd\n"
                     "level = 3\n"
                     "workers = auto\n"
                     "fault_threads = 2\n"
                     "batch = 64\n"
                     "worker_nice = -5\n"
                     "lock_memory = no\n"
                     "sandbox = off\n"
                     "max_clients = 10\n"
                     "[reclaim]\n"
                     "idle_age = 30s\n"
                     "[users]\n"
                     "allow = 1001, 1002 @700\n"
                     "admin_group = 900\n"
                     "max_pool = 64M\n"
                     "max_requests = 0\n"
                     "userfaultfd_device = yes\n"
                     "[user:1002]\n"
                     "allow = no\n"
                     "userfaultfd_device = no\n"
                     "[user:1003]\n"
                     "max_pool = 1G\n"
                     "limit = 512M\n",
                     err, sizeof(err));
        if (r < 0)
                test_fail("%s", err);
        ASSERT_STREQ(c.daemon.socket, "/run/test/z.sock");
        ASSERT_EQ(c.daemon.codec, CODEC_ZSTD);
        ASSERT_EQ(c.daemon.level, 3);
        ASSERT_EQ(c.daemon.workers, 0u);
        ASSERT_EQ(c.daemon.fault_threads, 2u);
        ASSERT_EQ(c.daemon.batch, 64u);
        ASSERT_EQ(c.daemon.worker_nice, -5);
        ASSERT_TRUE(!c.daemon.lock_memory && !c.daemon.sandbox);
        ASSERT_EQ(c.daemon.max_clients, 10u);
        ASSERT_EQ(c.daemon.set, (1u << _DKEY_MAX) - 1);
        ASSERT_EQ(c.tun.idle_age_ms, 30000u);

        ASSERT_TRUE(config_user_allowed(&c.users, 1001, NULL, 0));
        ASSERT_TRUE(!config_user_allowed(&c.users, 1002, NULL, 0));        /* its own rule wins */
        ASSERT_TRUE(!config_user_allowed(&c.users, 1002, g_clients, 2));   /* even with the group */
        ASSERT_TRUE(config_user_allowed(&c.users, 1004, g_clients, 2));    /* by a supplementary group */
        ASSERT_TRUE(!config_user_allowed(&c.users, 1004, g_clients, 1));
        ASSERT_TRUE(config_is_admin(&c.users, 1005, g_admin, 1));
        ASSERT_TRUE(!config_is_admin(&c.users, 1005, g_clients, 2));
        ASSERT_TRUE(config_is_admin(&c.users, 0, NULL, 0));
        /* userfaultfd_device: [users]' yes, a rule's no over it, root always */
        ASSERT_TRUE(config_user_uffd_device(&c.users, 1001));
        ASSERT_TRUE(config_user_uffd_device(&c.users, 1003));
        ASSERT_TRUE(!config_user_uffd_device(&c.users, 1002));
        ASSERT_TRUE(config_user_uffd_device(&c.users, 0));

        config_user_limits(&c.users, 1001, &l);
        ASSERT_EQ(l.v[UKEY_MAX_POOL], 64u << 20);
        ASSERT_EQ(l.v[UKEY_MAX_REQUESTS], 0u);
        ASSERT_EQ(l.v[UKEY_LIMIT], 0u);
        config_user_limits(&c.users, 1003, &l); /* its own keys over [users]' */
        ASSERT_EQ(l.v[UKEY_MAX_POOL], 1u << 30);
        ASSERT_EQ(l.v[UKEY_LIMIT], 512u << 20);
        ASSERT_EQ(l.v[UKEY_MAX_CONNECTIONS], 64u);

        /* a copy is deep: freeing one leaves the other whole */
        Config copy;
        ASSERT_OK(config_copy(&copy, &c));
        config_free(&c);
        ASSERT_TRUE(config_user_allowed(&copy.users, 1004, g_clients, 2));
        config_free(&copy);

        /* allow = * lets everyone in, root's name works */
        config_default(&c);
        if (load(&c, "[users]\nallow = root *\n", err, sizeof(err)) < 0)
                test_fail("%s", err);
        ASSERT_TRUE(config_user_allowed(&c.users, 4242, NULL, 0));
        /* the device is not handed out unless the file says so; root's always */
        ASSERT_TRUE(!config_user_uffd_device(&c.users, 4242));
        ASSERT_TRUE(config_user_uffd_device(&c.users, 0));
        config_free(&c);

        /* a rule's yes over [users]' default */
        config_default(&c);
        if (load(&c, "[users]\nallow = *\n[user:1000]\nuserfaultfd_device = on\n", err, sizeof(err)) < 0)
                test_fail("%s", err);
        ASSERT_TRUE(config_user_uffd_device(&c.users, 1000));
        ASSERT_TRUE(!config_user_uffd_device(&c.users, 1001));
        config_free(&c);
}

/* Each bad file: refused with path:line and a message, the config untouched. */
static void test_errors(void) {
        static const struct {
                const char *text, *line, *msg;
        } bad[] = {
                { "[deamon]\nworkers = 2\n", ":2:", "unknown section [deamon]" },
                { "[daemon]\nworker = 2\n", ":2:", "unknown key 'worker' in [daemon]" },
                { "[daemon]\ncompressor = lzma\n", ":2:", "unknown compressor 'lzma'" },
                { "[daemon]\nworkers = 65\n", ":2:", "between 0 and 64" },
                { "[daemon]\nbatch = 0\n", ":2:", "between 1 and 512" },
                { "[daemon]\nsocket = relative.sock\n", ":2:", "not an absolute path" },
                { "[daemon]\nlock_memory = maybe\n", ":2:", "not yes or no" },
                { "[daemon]\nworker_nice = 20\n", ":2:", "between -20 and 19" },
                { "[users]\nallow = no-such-user-zswap\n", ":2:", "unknown user 'no-such-user-zswap'" },
                { "[users]\nallow = @no-such-group-zswap\n", ":2:", "unknown group 'no-such-group-zswap'" },
                { "[users]\nadmin_group = no-such-group-zswap\n", ":2:", "unknown group" },
                { "[users]\nmax_pool = lots\n", ":2:", "max_pool: 'lots' is not a size" },
                { "[users]\nmax_pool = 200%\n", ":2:", "too large" },
                { "[users]\nmax_connections = 0\n", ":2:", "between 1 and 65536" },
                { "[users]\nquota = 1\n", ":2:", "unknown key 'quota' in [users]" },
                { "[user:root]\nmax_pool = 1G\n", ":2:", "root is never limited" },
                { "[user:no-such-user-zswap]\nmax_pool = 1G\n", ":2:", "unknown user" },
                { "[user:1000]\nallow = perhaps\n", ":2:", "not yes or no" },
                { "[users]\nuserfaultfd_device = always\n", ":2:", "userfaultfd_device: 'always' is not yes or no" },
                { "[user:1000]\nuserfaultfd_device = 2\n", ":2:", "userfaultfd_device: '2' is not yes or no" },
                { "[user:1000]\nadmin_group = x\n", ":2:", "unknown key 'admin_group' in [user:1000]" },
                { "[pool]\nidle_age = 1s\n", ":2:", "unknown key 'idle_age' in [pool]" },
                { "[reclaim]\nidle_age = forever\n", ":2:", "idle_age" },
                { "[users]\nallow = 1000\n[reclaim]\nlimit = -1\n", ":4:", "limit" },
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char err[512] = "";
                Config c;
                config_default(&c);
                Config before = c;
                int r = load(&c, bad[i].text, err, sizeof(err));
                if (r >= 0)
                        test_fail("accepted: %s", bad[i].text);
                if (!strstr(err, path) || !strstr(err, bad[i].line) || !strstr(err, bad[i].msg))
                        test_fail("for '%s' expected '%s%s ... %s', got '%s'", bad[i].text, path, bad[i].line,
                                  bad[i].msg, err);
                ASSERT_TRUE(memcmp(&c.daemon, &before.daemon, sizeof(c.daemon)) == 0);
                ASSERT_EQ(c.users.nrules, 0u);
                ASSERT_EQ(c.users.n_allow_uids, 0u);
                config_free(&c);
        }
        /* a missing file says so */
        char err[512] = "";
        Config c;
        config_default(&c);
        ASSERT_TRUE(config_load(&c, "/nonexistent/zswapd.conf", err, sizeof(err)) < 0);
        ASSERT_TRUE(strstr(err, "/nonexistent/zswapd.conf") != NULL);
        config_free(&c);
}

/* systemd/zswapd.conf: loading it changes nothing, and every [daemon] and
 * [users] key is there once, commented out */
static void test_shipped(void) {
        char file[PATH_MAX + 64], err[512] = "", line[512];
        Config c, d;

        test_source_path(__FILE__, "../../systemd/zswapd.conf", file, sizeof(file));

        config_default(&c);
        config_default(&d);
        if (config_load(&c, file, err, sizeof(err)) < 0)
                test_fail("%s", err);
        ASSERT_TRUE(memcmp(&c.daemon, &d.daemon, sizeof(c.daemon)) == 0);
        ASSERT_TRUE(memcmp(&c.users.defaults, &d.users.defaults, sizeof(d.users.defaults)) == 0);
        ASSERT_EQ(c.users.nrules, 0u);

        const char *keys[_DKEY_MAX + _UKEY_MAX + 3];
        unsigned seen[ELEMENTSOF(keys)] = { 0 }, n = 0;
        for (DaemonKey k = 0; k < _DKEY_MAX; k++)
                keys[n++] = config_daemon_key(k);
        for (UserKey k = 0; k < _UKEY_MAX; k++)
                keys[n++] = config_user_key(k);
        keys[n++] = "allow";
        keys[n++] = "admin_group";
        keys[n++] = "userfaultfd_device";
        FILE *f = fopen(file, "re");
        ASSERT_TRUE(f != NULL);
        bool in_users_rule = false;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "#[user:", 7) == 0)
                        in_users_rule = true; /* the example section repeats keys */
                for (unsigned i = 0; i < n && !in_users_rule; i++) {
                        size_t kl = strlen(keys[i]);
                        if (line[0] == '#' && strncmp(line + 1, keys[i], kl) == 0 && strncmp(line + 1 + kl, " = ", 3) == 0)
                                seen[i]++;
                }
        }
        fclose(f);
        for (unsigned i = 0; i < n; i++)
                if (seen[i] < 1)
                        test_fail("systemd/zswapd.conf does not show '#%s = ...'", keys[i]);
        /* limit is both a [reclaim] and a [users] key */
        for (unsigned i = 0; i < n; i++)
                if (seen[i] != 1 && strcmp(keys[i], "limit") != 0)
                        test_fail("systemd/zswapd.conf shows '#%s = ...' %u times", keys[i], seen[i]);
        config_free(&c);
        config_free(&d);
}


/* row's default, which must exist */
static const char *def(const char *section, const char *key) {
        const ConfigSetting *s = config_setting(section, key);
        if (!s || !s->def)
                test_fail("no default for [%s] %s in config_settings[]", section ? section : "command line", key);
        return s->def;
}

static uint64_t def_uint(const char *section, const char *key) {
        uint64_t v;
        if (conf_parse_uint(def(section, key), &v) < 0)
                test_fail("[%s] %s: default '%s' is not a number", section ? section : "command line", key,
                          def(section, key));
        return v;
}

static bool def_bool(const char *section, const char *key) {
        bool b;
        if (conf_parse_bool(def(section, key), &b) < 0)
                test_fail("[%s] %s: default '%s' is not yes or no", section, key, def(section, key));
        return b;
}

/* The settings a Config holds, field by field (not the padding, not what
 * is past a string's end). */
static void assert_same_config(const Config *a, const Config *b, const char *what) {
        char va[ZSWAP_TUNABLE_VALUE_MAX], vb[ZSWAP_TUNABLE_VALUE_MAX];
        const DaemonConf *x = &a->daemon, *y = &b->daemon;

        if (strcmp(x->socket, y->socket) != 0 || x->codec != y->codec || x->level != y->level ||
            x->workers != y->workers || x->fault_threads != y->fault_threads || x->batch != y->batch ||
            x->worker_nice != y->worker_nice || x->lock_memory != y->lock_memory || x->sandbox != y->sandbox ||
            x->max_clients != y->max_clients)
                test_fail("%s: [daemon] differs", what);
        if (strcmp(a->tier.backing, b->tier.backing) != 0 || strcmp(a->tier.key, b->tier.key) != 0 ||
            a->tier.size != b->tier.size || a->tier.rate != b->tier.rate || a->tier.grace_ms != b->tier.grace_ms ||
            a->tier.timeout_ms != b->tier.timeout_ms || a->tier.read_spin_us != b->tier.read_spin_us)
                test_fail("%s: [tier] differs", what);
        if (a->users.allow_all != b->users.allow_all || a->users.n_allow_uids != b->users.n_allow_uids ||
            a->users.n_allow_gids != b->users.n_allow_gids || a->users.uffd_device != b->users.uffd_device ||
            a->users.has_admin_gid != b->users.has_admin_gid ||
            (a->users.has_admin_gid && a->users.admin_gid != b->users.admin_gid) ||
            strcmp(a->users.admin_group, b->users.admin_group) != 0 || a->users.nrules != b->users.nrules)
                test_fail("%s: [users] differs", what);
        for (UserKey k = 0; k < _UKEY_MAX; k++)
                if (a->users.defaults.v[k] != b->users.defaults.v[k])
                        test_fail("%s: [users] %s differs: %llu, %llu", what, config_user_key(k),
                                  (unsigned long long)a->users.defaults.v[k], (unsigned long long)b->users.defaults.v[k]);
        for (size_t i = 0; i < _TUNABLE_KEY_MAX; i++) {
                ASSERT_OK(tunable_get(&a->tun, tunable_names[i], va, sizeof(va)));
                ASSERT_OK(tunable_get(&b->tun, tunable_names[i], vb, sizeof(vb)));
                if (strcmp(va, vb) != 0)
                        test_fail("%s: %s differs: %s, %s", what, tunable_names[i], va, vb);
        }
}

/* The table itself: each key once in its section, every DaemonKey,
 * UserKey and TunableKey a row, every row a help line, and every default
 * one its own parser takes. */
static void test_table(void) {
        unsigned dkeys[_DKEY_MAX] = { 0 }, ukeys[_UKEY_MAX] = { 0 }, tkeys[_TUNABLE_KEY_MAX] = { 0 };

        ASSERT_TRUE(config_n_settings > 0);
        for (size_t i = 0; i < config_n_settings; i++) {
                const ConfigSetting *s = &config_settings[i];
                const char *sec = s->section ? s->section : "command line";
                if (!s->key || !*s->key)
                        test_fail("row %zu has no key", i);
                if (!s->help || strlen(s->help) < 10)
                        test_fail("[%s] %s has no help line", sec, s->key);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(config_settings[j].key, s->key) == 0 &&
                            ((!s->section && !config_settings[j].section) ||
                             (s->section && config_settings[j].section &&
                              strcmp(s->section, config_settings[j].section) == 0)))
                                test_fail("[%s] %s is in the table twice", sec, s->key);
                if (config_setting(s->section, s->key) != s)
                        test_fail("config_setting(%s, %s) does not find its row", sec, s->key);
                if (!s->section) {
                        ASSERT_EQ(s->when, CONFIG_CMDLINE);
                        /* a number, or auto (measured at start, calibrate.h) */
                        if (strcmp(s->def, "auto") != 0)
                                def_uint(NULL, s->key);
                        continue;
                }
                if (strcmp(sec, "daemon") == 0 || strcmp(sec, "tier") == 0)
                        ASSERT_EQ(s->when, CONFIG_AT_START);
                else if (strcmp(sec, "users") == 0)
                        ASSERT_EQ(s->when, CONFIG_ON_RELOAD);
                else if (strcmp(sec, "reclaim") == 0 || strcmp(sec, "pool") == 0)
                        ASSERT_EQ(s->when, CONFIG_RUN_TIME);
                else
                        test_fail("row [%s] %s: unknown section", sec, s->key);
                if (strcmp(sec, "daemon") == 0) {
                        ASSERT_TRUE(s->id >= 0 && s->id < _DKEY_MAX);
                        dkeys[s->id]++;
                        ASSERT_STREQ(config_daemon_key(s->id), s->key);
                } else if (strcmp(sec, "users") == 0 && s->id >= 0) {
                        ASSERT_TRUE(s->id < _UKEY_MAX);
                        ukeys[s->id]++;
                        ASSERT_STREQ(config_user_key(s->id), s->key);
                } else if (strcmp(sec, "reclaim") == 0 || strcmp(sec, "pool") == 0) {
                        /* the name zswapctl knows it by is the same */
                        ASSERT_TRUE(s->id >= 0 && s->id < _TUNABLE_KEY_MAX);
                        tkeys[s->id]++;
                        ASSERT_STREQ(tunable_names[s->id], s->key);
                        ASSERT_TRUE(config_tunable_setting(s->id) == s);
                        ASSERT_STREQ(tunable_help(s->id), s->help);
                }
                /* pool_max and pool_accept are [pool]'s; [reclaim] takes them too */
                if (strcmp(sec, "pool") == 0)
                        ASSERT_TRUE(config_setting("reclaim", s->key) == s);
        }
        for (int k = 0; k < _DKEY_MAX; k++)
                if (dkeys[k] != 1)
                        test_fail("DaemonKey %d has %u rows", k, dkeys[k]);
        for (int k = 0; k < _UKEY_MAX; k++)
                if (ukeys[k] != 1)
                        test_fail("UserKey %d has %u rows", k, ukeys[k]);
        for (int k = 0; k < _TUNABLE_KEY_MAX; k++)
                if (tkeys[k] != 1)
                        test_fail("tunable %s has %u rows", tunable_names[k], tkeys[k]);
        ASSERT_TRUE(config_setting("daemon", "no_such_key") == NULL);
        ASSERT_TRUE(config_setting("pool", "idle_age") == NULL);
}

/* Every row's default, parsed the way the file is, gives the value
 * config_default() holds, and the run-time ones also format back to the
 * very text of the table. Then the rows cover every field: a Config
 * scribbled over and given every default as one file is the default
 * Config again. */
static void test_table_round_trip(void) {
        char err[512] = "", text[8192] = "", out[ZSWAP_TUNABLE_VALUE_MAX];
        bool have_group = getgrnam("zswap") != NULL;
        Config d, c;
        size_t o = 0;

        config_default(&d);
        for (size_t i = 0; i < config_n_settings; i++) {
                const ConfigSetting *s = &config_settings[i];
                if (!s->section || !s->def)
                        continue;
                if (s->may_be_missing && !have_group)
                        continue; /* the file would be refused: the system lacks it */
                /* one key at a time on top of the defaults: nothing moves */
                config_default(&c);
                snprintf(text, sizeof(text), "[%s]\n%s = %s\n", s->section, s->key, s->def);
                if (load(&c, text, err, sizeof(err)) < 0)
                        test_fail("[%s] %s = %s: %s", s->section, s->key, s->def, err);
                ASSERT_EQ(c.daemon.set & ~(strcmp(s->section, "daemon") == 0 ? 1u << s->id : 0u), 0u);
                c.daemon.set = 0;
                assert_same_config(&c, &d, s->key);
                config_free(&c);
                if (s->when == CONFIG_RUN_TIME) {
                        ASSERT_OK(tunable_get(&d.tun, s->key, out, sizeof(out)));
                        if (strcmp(out, s->def) != 0)
                                test_fail("%s: the default reads back as '%s', the table says '%s'", s->key, out,
                                          s->def);
                }
        }
        text[0] = 0;
        for (size_t i = 0; i < config_n_settings; i++) {
                const ConfigSetting *s = &config_settings[i];
                if (!s->section || !s->def || (s->may_be_missing && !have_group))
                        continue;
                o += (size_t)snprintf(text + o, sizeof(text) - o, "[%s]\n%s = %s\n", s->section, s->key, s->def);
                ASSERT_TRUE(o < sizeof(text));
        }
        config_default(&c);
        memset(&c.daemon, 0x5a, sizeof(c.daemon));
        memset(&c.tier, 0x5a, sizeof(c.tier));
        memset(&c.tun, 0x5a, sizeof(c.tun));
        memset(&c.users.defaults, 0x5a, sizeof(c.users.defaults));
        c.users.allow_all = c.users.uffd_device = true;
        c.tun.keep_clean = false;
        if (have_group) {
                c.users.has_admin_gid = false;
                c.users.admin_gid = 12345;
        }
        c.tier.key[0] = 0; /* rows without a default: empty, which no file line writes */
        c.tier.backing[0] = 0;
        if (load(&c, text, err, sizeof(err)) < 0)
                test_fail("every default as a file: %s", err);
        c.daemon.set = 0;
        assert_same_config(&c, &d, "every default over a scribbled Config");
        config_free(&c);
        config_free(&d);
}

/* What main() starts from (manager_config_defaults()) is the table's, and
 * what it always was. */
static void test_manager_defaults(void) {
        ManagerConfig cfg;
        CodecKind codec;
        Config d;

        ASSERT_OK(unsetenv("ZSWAP_SOCKET"));
        config_default(&d);
        manager_config_defaults(&cfg, &d.daemon, 7);
        ASSERT_OK(codec_from_string(def("daemon", "compressor"), &codec));
        ASSERT_STREQ(cfg.socket_path, def("daemon", "socket"));
        ASSERT_EQ(cfg.codec, codec);
        ASSERT_EQ((uint64_t)cfg.level, def_uint("daemon", "level"));
        ASSERT_EQ(def_uint("daemon", "workers"), 0u); /* "auto": one per CPU */
        ASSERT_EQ(cfg.workers, 7u);
        ASSERT_EQ(def_uint("daemon", "fault_threads"), 0u);
        ASSERT_EQ(cfg.fault_threads, 7u);
        ASSERT_EQ((uint64_t)cfg.batch_pages, def_uint("daemon", "batch"));
        ASSERT_EQ(cfg.worker_nice, atoi(def("daemon", "worker_nice")));
        ASSERT_EQ((uint64_t)cfg.max_clients, def_uint("daemon", "max_clients"));
        ASSERT_EQ(cfg.lock_memory, def_bool("daemon", "lock_memory"));
        ASSERT_EQ(cfg.sandbox, def_bool("daemon", "sandbox"));
        ASSERT_STREQ(def(NULL, "fault-spin-us"), "auto");
        ASSERT_EQ(cfg.fault_spin_us, FAULT_SPIN_AUTO);
        ASSERT_STREQ(def(NULL, "fault-wake"), "auto");
        ASSERT_EQ(cfg.fault_wake, FAULT_WAKE_AUTO);
        ASSERT_EQ((uint64_t)cfg.fault_rt_prio, def_uint(NULL, "fault-rt-prio"));
        ASSERT_EQ(cfg.listen_fd, -1);
        ASSERT_EQ(cfg.cli_set, 0u);
        ASSERT_TRUE(cfg.config_path == NULL && cfg.nsets == 0 && !cfg.allow_all);
        /* the values zswapd has always started with */
        ASSERT_STREQ(cfg.socket_path, ZSWAP_DEFAULT_SOCKET);
        ASSERT_EQ(cfg.codec, CODEC_LZ4);
        ASSERT_EQ(cfg.level, 0);
        ASSERT_EQ(cfg.batch_pages, (unsigned)ZSWAP_BATCH_MAX);
        ASSERT_EQ(cfg.worker_nice, 10);
        ASSERT_EQ(cfg.max_clients, 1024u);
        ASSERT_TRUE(cfg.lock_memory && cfg.sandbox && cfg.fault_pin && cfg.fault_shared && !cfg.worker_sched_idle);
        ASSERT_EQ(cfg.fault_spin_us, FAULT_SPIN_AUTO);
        ASSERT_EQ(cfg.fault_wake, FAULT_WAKE_AUTO);
        ASSERT_EQ(cfg.fault_rt_prio, 0u);
        ASSERT_EQ(cfg.pool_max, 0u);
        ASSERT_EQ(cfg.max_compressed, (uint32_t)(ZSWAP_PAGE_SIZE * 3 / 4));
        ASSERT_EQ(cfg.max_regions, 4096u);
        ASSERT_EQ(cfg.max_registered, UINT64_MAX);
        /* $ZSWAP_SOCKET wins over the default */
        ASSERT_OK(setenv("ZSWAP_SOCKET", "/tmp/elsewhere.sock", 1));
        manager_config_defaults(&cfg, &d.daemon, 1);
        ASSERT_STREQ(cfg.socket_path, "/tmp/elsewhere.sock");
        ASSERT_EQ(cfg.workers, 1u);
        ASSERT_OK(unsetenv("ZSWAP_SOCKET"));

        /* the constants other modules keep for their own callers */
        ASSERT_EQ(d.tier.grace_ms, (uint64_t)TIER_DEFAULT_GRACE_MS);
        ASSERT_EQ(d.tier.timeout_ms, (uint32_t)TIER_DEFAULT_TIMEOUT_MS);
        ASSERT_EQ(d.tier.read_spin_us, (uint32_t)TIER_DEFAULT_READ_SPIN_US);
        ASSERT_EQ(def_uint(NULL, "read-bound-ms"), (uint64_t)MEMREAD_BOUND_MS);
        config_free(&d);
}

/* zswapd --help states the table's defaults (the binary is $ZSWAPD, as the
 * integration tests run it). */
static void test_usage(void) {
        const char *zswapd = getenv("ZSWAPD");
        char cmd[PATH_MAX + 32], help[8192] = "", want[256];
        size_t n = 0;
        static const struct {
                const char *section, *key, *fmt;
        } shown[] = {
                { "daemon", "socket", "--socket PATH       listen on PATH (default %s)" },
                { "daemon", "compressor", "--compressor NAME   %s (default)" },
                { "daemon", "batch", "(default %s)\n  -n, --worker-nice" },
                { "daemon", "worker_nice", "nice value of the compression workers (default %s)" },
                { NULL, "fault-spin-us", "poll N us before sleeping (default %s: 0 or 50" },
                { NULL, "fault-wake", "all fault threads or one (default %s: measured)" },
                { NULL, "read-bound-ms", "(default %s)\n  -o, --set" },
        };

        if (!zswapd || !*zswapd) {
                printf("test_usage: skipped, $ZSWAPD is not set\n");
                return;
        }
        snprintf(cmd, sizeof(cmd), "'%s' --help", zswapd);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p != NULL);
        while (n + 1 < sizeof(help) && !feof(p)) {
                size_t k = fread(help + n, 1, sizeof(help) - 1 - n, p);
                if (k == 0)
                        break;
                n += k;
        }
        help[n] = 0;
        ASSERT_EQ(pclose(p), 0);
        for (size_t i = 0; i < ELEMENTSOF(shown); i++) {
                snprintf(want, sizeof(want), shown[i].fmt, def(shown[i].section, shown[i].key));
                if (!strstr(help, want))
                        test_fail("zswapd --help does not say '%s'", want);
        }
}

/* systemd/zswapd.conf shows every row's default, in the row's section */
static void test_shipped_defaults(void) {
        char file[PATH_MAX + 64], line[512], section[64] = "";
        unsigned seen[256] = { 0 };

        ASSERT_TRUE(config_n_settings <= ELEMENTSOF(seen));
        test_source_path(__FILE__, "../../systemd/zswapd.conf", file, sizeof(file));
        FILE *f = fopen(file, "re");
        ASSERT_TRUE(f != NULL);
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = 0;
                if (line[0] == '[') {
                        snprintf(section, sizeof(section), "%.*s", (int)strcspn(line + 1, "]"), line + 1);
                        continue;
                }
                if (strncmp(line, "#[", 2) == 0)
                        section[0] = 0; /* the example [user:NAME] repeats keys with other values */
                for (size_t i = 0; i < config_n_settings && line[0] == '#'; i++) {
                        const ConfigSetting *s = &config_settings[i];
                        char want[256];
                        if (!s->section || strcmp(s->section, section) != 0)
                                continue;
                        snprintf(want, sizeof(want), "#%s =%s%s", s->key, s->def && *s->def ? " " : "",
                                 s->def ? s->def : "");
                        if (strcmp(line, want) == 0)
                                seen[i]++;
                }
        }
        fclose(f);
        for (size_t i = 0; i < config_n_settings; i++) {
                const ConfigSetting *s = &config_settings[i];
                /* tier's key is left out of the file: its default is a path the
                 * page gives */
                if (!s->section || (strcmp(s->section, "tier") == 0 && strcmp(s->key, "key") == 0))
                        continue;
                if (seen[i] != 1)
                        test_fail("systemd/zswapd.conf shows '#%s = %s' in [%s] %u times, not once", s->key,
                                  s->def ? s->def : "", s->section, seen[i]);
        }
}

int main(void) {
        snprintf(path, sizeof(path), "/tmp/test-config-%d.conf", (int)getpid());
        test_table();
        test_table_round_trip();
        test_manager_defaults();
        test_usage();
        test_shipped_defaults();
        test_defaults();
        test_sections();
        test_errors();
        test_shipped();
        unlink(path);
        return 0;
}
