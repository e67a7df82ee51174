/*
 * fuzz-config.c: zswapd.conf(5) from hostile bytes (daemon/conf/config.c).
 *
 * The input is written to a memfd and read as "/proc/self/fd/N", on top of
 * a base Config that already holds arrays (allowed uids and gids, a user
 * rule), so that "unchanged on error" covers the heap parts too. Checks:
 * config_load() returns 0 or a negative errno; on error err starts with
 * the path (it says where) and the Config compares equal to a copy taken
 * before; on success config_copy() gives an equal Config, and the rule
 * lookups (config_user_allowed, config_user_limits, config_is_admin,
 * config_user_uffd_device) hold
 * root's guarantees for every uid the file names. ASan and LSan catch what
 * a parse leaks or overruns.
 *
 * config_default() resolves the group "zswap" (getgrnam), and names in the
 * file are resolved the same way; that reads /etc/passwd and /etc/group,
 * which is fine for a fuzzer.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"

static const char base_text[] = "[daemon]\n"
                                "compressor = zstd\n"
                                "level = 3\n"
                                "[users]\n"
                                "allow = 0 1000 @0\n"
                                "max_pool = 1G\n"
                                "[user:1000]\n"
                                "allow = yes\n"
                                "userfaultfd_device = yes\n"
                                "limit = 64M\n"
                                "[reclaim]\n"
                                "idle_age = 30s\n";

static int memfd = -1;
static char path[64];
static Config base;

static void write_input(const void *data, size_t size) {
        FUZZ_CHECK(ftruncate(memfd, 0) == 0, "ftruncate: %m");
        for (size_t done = 0; done < size;) {
                ssize_t k = pwrite(memfd, (const char *)data + done, size - done, (off_t)done);
                FUZZ_CHECK(k > 0, "pwrite: %m");
                done += (size_t)k;
        }
}

static void init_once(void) {
        char err[512] = "";

        if (memfd >= 0)
                return;
        memfd = memfd_create("fuzz-config", MFD_CLOEXEC);
        FUZZ_CHECK(memfd >= 0, "memfd_create: %m");
        snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
        config_default(&base);
        write_input(base_text, strlen(base_text));
        FUZZ_CHECK(config_load(&base, path, err, sizeof(err)) == 0, "the base config: %s", err);
}

static bool tunables_same(const Tunables *a, const Tunables *b) {
        /* bit for bit: a refused file must not have touched them at all */
        return a->limit == b->limit && a->idle_age_ms == b->idle_age_ms &&
               !memcmp(&a->pressure_target, &b->pressure_target, sizeof(double)) && a->min_free == b->min_free &&
               !memcmp(&a->pressure_step, &b->pressure_step, sizeof(double)) &&
               a->pressure_period_ms == b->pressure_period_ms && a->pool_max == b->pool_max &&
               !memcmp(&a->pool_accept, &b->pool_accept, sizeof(double)) && a->thrash_refaults == b->thrash_refaults &&
               a->thrash_backoff_ms == b->thrash_backoff_ms && a->keep_clean == b->keep_clean &&
               !memcmp(&a->clean_max, &b->clean_max, sizeof(double)) && a->write_scan_ms == b->write_scan_ms &&
               a->interval_ms == b->interval_ms;
}

static bool daemon_same(const DaemonConf *a, const DaemonConf *b) {
        return !memcmp(a->socket, b->socket, sizeof(a->socket)) && a->codec == b->codec && a->level == b->level &&
               a->workers == b->workers && a->fault_threads == b->fault_threads && a->batch == b->batch &&
               a->worker_nice == b->worker_nice && a->lock_memory == b->lock_memory && a->sandbox == b->sandbox &&
               a->max_clients == b->max_clients && a->set == b->set;
}

static bool rules_same(const UserRule *a, const UserRule *b, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (a[i].uid != b[i].uid || a[i].allow != b[i].allow || a[i].uffd_device != b[i].uffd_device ||
                    a[i].set != b[i].set ||
                    memcmp(&a[i].lim, &b[i].lim, sizeof(a[i].lim)) != 0)
                        return false;
        return true;
}

static bool users_same(const UsersConf *a, const UsersConf *b) {
        return a->allow_all == b->allow_all && a->n_allow_uids == b->n_allow_uids &&
               (a->n_allow_uids == 0 || !memcmp(a->allow_uids, b->allow_uids, a->n_allow_uids * sizeof(uid_t))) &&
               a->n_allow_gids == b->n_allow_gids &&
               (a->n_allow_gids == 0 || !memcmp(a->allow_gids, b->allow_gids, a->n_allow_gids * sizeof(gid_t))) &&
               a->uffd_device == b->uffd_device && a->has_admin_gid == b->has_admin_gid &&
               a->admin_gid == b->admin_gid &&
               !memcmp(a->admin_group, b->admin_group, sizeof(a->admin_group)) &&
               !memcmp(&a->defaults, &b->defaults, sizeof(a->defaults)) && a->nrules == b->nrules &&
               rules_same(a->rules, b->rules, a->nrules);
}

static bool config_same(const Config *a, const Config *b) {
        return daemon_same(&a->daemon, &b->daemon) && users_same(&a->users, &b->users) && tunables_same(&a->tun, &b->tun);
}

static void check_uid(const Config *c, uid_t uid) {
        gid_t groups[3] = { 0, 1000, c->users.admin_gid };
        UserLimits l;

        (void)config_user_allowed(&c->users, uid, groups, 3);
        (void)config_user_allowed(&c->users, uid, NULL, 0);
        (void)config_is_admin(&c->users, uid, groups, 3);
        bool dev = config_user_uffd_device(&c->users, uid);
        config_user_limits(&c->users, uid, &l);
        if (uid == 0) {
                FUZZ_CHECK(config_user_allowed(&c->users, 0, NULL, 0) && config_is_admin(&c->users, 0, NULL, 0),
                           "root refused");
                FUZZ_CHECK(dev, "root refused /dev/userfaultfd");
                FUZZ_CHECK(l.v[UKEY_MAX_CONNECTIONS] == UINT64_MAX && l.v[UKEY_MAX_REGIONS] == UINT64_MAX &&
                                   l.v[UKEY_LIMIT] == 0 && l.v[UKEY_MAX_POOL] == 0,
                           "root limited");
        } else {
                /* never unlimited, whatever the file says (config.h) */
                FUZZ_CHECK(l.v[UKEY_MAX_CONNECTIONS] >= 1 && l.v[UKEY_MAX_CONNECTIONS] <= 65536 &&
                                   l.v[UKEY_MAX_REGIONS] >= 1 && l.v[UKEY_MAX_REGIONS] <= 1u << 20,
                           "uid %u: connections %llu, regions %llu", (unsigned)uid,
                           (unsigned long long)l.v[UKEY_MAX_CONNECTIONS], (unsigned long long)l.v[UKEY_MAX_REGIONS]);
        }
}

static void check_loaded(const Config *c) {
        Config cp;

        FUZZ_CHECK(config_copy(&cp, c) == 0, "config_copy");
        FUZZ_CHECK(config_same(&cp, c), "a copy differs");
        config_free(&cp);
        FUZZ_CHECK(c->daemon.socket[0] == '/' && memchr(c->daemon.socket, 0, sizeof(c->daemon.socket)),
                   "socket '%.108s'", c->daemon.socket);
        FUZZ_CHECK(c->daemon.batch >= 1 && c->daemon.batch <= 512 && c->daemon.level >= 0 && c->daemon.level <= 22,
                   "batch %u, level %d", c->daemon.batch, c->daemon.level);
        FUZZ_CHECK(memchr(c->users.admin_group, 0, sizeof(c->users.admin_group)), "admin_group unterminated");
        check_uid(c, 0);
        check_uid(c, 1000);
        check_uid(c, 65534);
        for (size_t i = 0; i < c->users.n_allow_uids; i++)
                check_uid(c, c->users.allow_uids[i]);
        for (size_t i = 0; i < c->users.nrules; i++) {
                FUZZ_CHECK(c->users.rules[i].uid != 0, "a rule for root");
                check_uid(c, c->users.rules[i].uid);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char err[512];
        Config c, before;
        int r;

        init_once();
        if (size > 64 * 1024)
                return 0;
        write_input(data, size);
        FUZZ_CHECK(config_copy(&c, &base) == 0, "config_copy");
        FUZZ_CHECK(config_copy(&before, &c) == 0, "config_copy");
        memset(err, 'x', sizeof(err) - 1);
        err[sizeof(err) - 1] = 0;

        r = config_load(&c, path, err, sizeof(err));
        FUZZ_CHECK(r == 0 || (r < 0 && r > -4096), "config_load = %d", r);
        if (r < 0) {
                FUZZ_CHECK(strncmp(err, path, strlen(path)) == 0 && err[strlen(path)] == ':',
                           "error %d without the path: '%s'", r, err);
                FUZZ_CHECK(config_same(&c, &before), "a refused file changed the Config (%s)", err);
        } else
                check_loaded(&c);
        config_free(&c);
        config_free(&before);
        return 0;
}
