/*
 * test-config.c: zswapd.conf(5) as a whole (daemon/config.c): the
 * [daemon], [users] and [user:NAME] sections, the rules they make, the
 * errors a bad file gets (with its file:line), and the shipped
 * systemd/zswapd.conf (every key, commented out, at its default).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "macro.h"
#include "test.h"

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

        test_source_path(__FILE__, "../systemd/zswapd.conf", file, sizeof(file));

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

int main(void) {
        snprintf(path, sizeof(path), "/tmp/test-config-%d.conf", (int)getpid());
        test_defaults();
        test_sections();
        test_errors();
        test_shipped();
        unlink(path);
        return 0;
}
