/*
 * config.c: zswapd.conf(5) (config.h says what each section is for).
 *
 * conf_parse() (common/conf.c) does the syntax and calls assignment() for
 * every "key = value" with its section; each section has its own small
 * table here, and the value grammar is common/conf.h's, so that "64M" or
 * "30s" means the same in every section, on zswapctl's command line and
 * on the wire. The [reclaim] and [pool] keys go to tunable_set(), the
 * same function `zswapctl set` uses.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "conf.h"
#include "config.h"
#include "macro.h"
#include "protocol.h"
#include "util.h"

static const char *const daemon_keys[_DKEY_MAX] = {
        [DKEY_SOCKET] = "socket",         [DKEY_COMPRESSOR] = "compressor",
        [DKEY_LEVEL] = "level",           [DKEY_WORKERS] = "workers",
        [DKEY_FAULT_THREADS] = "fault_threads", [DKEY_BATCH] = "batch",
        [DKEY_WORKER_NICE] = "worker_nice", [DKEY_LOCK_MEMORY] = "lock_memory",
        [DKEY_SANDBOX] = "sandbox",       [DKEY_MAX_CLIENTS] = "max_clients",
};

static const char *const user_keys[_UKEY_MAX] = {
        [UKEY_MAX_CONNECTIONS] = "max_connections", [UKEY_MAX_REGIONS] = "max_regions",
        [UKEY_MAX_REGISTERED] = "max_registered",   [UKEY_MAX_POOL] = "max_pool",
        [UKEY_MAX_REQUESTS] = "max_requests",       [UKEY_LIMIT] = "limit",
};

const char *config_daemon_key(DaemonKey k) {
        return k < _DKEY_MAX ? daemon_keys[k] : NULL;
}

const char *config_user_key(UserKey k) {
        return k < _UKEY_MAX ? user_keys[k] : NULL;
}

void config_default(Config *c) {
        *c = (Config){
                .daemon = {
                        .socket = ZSWAP_DEFAULT_SOCKET,
                        .codec = CODEC_LZ4,
                        .batch = ZSWAP_BATCH_MAX,
                        .worker_nice = 10,
                        .lock_memory = true,
                        .sandbox = true,
                        .max_clients = 1024,
                },
                .tier = {
                        .grace_ms = TIER_DEFAULT_GRACE_MS,
                        .timeout_ms = TIER_DEFAULT_TIMEOUT_MS,
                        .read_spin_us = TIER_DEFAULT_READ_SPIN_US,
                },
                .users = {
                        .admin_group = "zswap",
                        .defaults.v = {
                                [UKEY_MAX_CONNECTIONS] = 64,
                                [UKEY_MAX_REGIONS] = 4096,
                                [UKEY_MAX_REQUESTS] = 1000,
                        },
                },
        };
        /* the default admin group counts only if the system has it */
        struct group *g = getgrnam("zswap");
        if (g) {
                c->users.has_admin_gid = true;
                c->users.admin_gid = g->gr_gid;
        }
        tunables_default(&c->tun);
}

void config_free(Config *c) {
        free(c->users.allow_uids);
        free(c->users.allow_gids);
        free(c->users.rules);
        c->users.allow_uids = NULL;
        c->users.allow_gids = NULL;
        c->users.rules = NULL;
        c->users.n_allow_uids = c->users.n_allow_gids = c->users.nrules = 0;
}

static void *dup_array(const void *p, size_t n, size_t size, bool *fail) {
        if (n == 0)
                return NULL;
        void *q = malloc(n * size);
        if (!q)
                *fail = true;
        else
                memcpy(q, p, n * size);
        return q;
}

int config_copy(Config *dst, const Config *src) {
        bool fail = false;
        *dst = *src;
        dst->users.allow_uids = dup_array(src->users.allow_uids, src->users.n_allow_uids, sizeof(uid_t), &fail);
        dst->users.allow_gids = dup_array(src->users.allow_gids, src->users.n_allow_gids, sizeof(gid_t), &fail);
        dst->users.rules = dup_array(src->users.rules, src->users.nrules, sizeof(UserRule), &fail);
        if (fail) {
                config_free(dst);
                return -ENOMEM;
        }
        return 0;
}

static int find_key(const char *const *keys, size_t n, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (keys[i] && strcmp(keys[i], key) == 0)
                        return (int)i;
        return -1;
}

static void list_keys(const char *const *keys, size_t n, char *buf, size_t len) {
        size_t o = 0;
        buf[0] = 0;
        for (size_t i = 0; i < n && o < len; i++)
                o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", keys[i]);
}

/* A count in [lo, hi]. */
static int parse_count(const char *key, const char *value, uint64_t lo, uint64_t hi, uint64_t *ret, char *err,
                       size_t errlen) {
        uint64_t v;
        if (conf_parse_uint(value, &v) < 0 || v < lo || v > hi)
                return errorf(-EINVAL, err, errlen, "%s: '%s' is not a whole number between %llu and %llu", key, value,
                            (unsigned long long)lo, (unsigned long long)hi);
        *ret = v;
        return 0;
}

static int daemon_assignment(DaemonConf *d, const char *key, const char *value, char *err, size_t errlen) {
        int k = find_key(daemon_keys, _DKEY_MAX, key);
        uint64_t v = 0;
        char keys[256];
        int r = 0;

        switch (k) {
        case DKEY_SOCKET:
                if (value[0] != '/' || strlen(value) >= sizeof(d->socket))
                        return errorf(-EINVAL, err, errlen, "socket: '%s' is not an absolute path of at most %zu bytes",
                                    value, sizeof(d->socket) - 1);
                strcpy(d->socket, value);
                break;
        case DKEY_COMPRESSOR:
                if (codec_from_string(value, &d->codec) < 0)
                        return errorf(-EINVAL, err, errlen, "compressor: unknown compressor '%s' (lz4, zstd)", value);
                break;
        case DKEY_LEVEL:
                r = parse_count(key, value, 0, 22, &v, err, errlen);
                d->level = (int)v;
                break;
        case DKEY_WORKERS:
        case DKEY_FAULT_THREADS:
                if (strcmp(value, "auto") == 0)
                        v = 0;
                else if ((r = parse_count(key, value, 0, 64, &v, err, errlen)) < 0)
                        return r;
                *(k == DKEY_WORKERS ? &d->workers : &d->fault_threads) = (unsigned)v;
                break;
        case DKEY_BATCH:
                r = parse_count(key, value, 1, ZSWAP_BATCH_MAX, &v, err, errlen);
                d->batch = (unsigned)v;
                break;
        case DKEY_WORKER_NICE: {
                char *end;
                long n = strtol(value, &end, 10);
                if (!*value || *end || n < -20 || n > 19)
                        return errorf(-EINVAL, err, errlen, "worker_nice: '%s' is not a nice value between -20 and 19",
                                    value);
                d->worker_nice = (int)n;
                break;
        }
        case DKEY_LOCK_MEMORY:
        case DKEY_SANDBOX:
                if (conf_parse_bool(value, k == DKEY_SANDBOX ? &d->sandbox : &d->lock_memory) < 0)
                        return errorf(-EINVAL, err, errlen, "%s: '%s' is not yes or no", key, value);
                break;
        case DKEY_MAX_CLIENTS:
                r = parse_count(key, value, 1, 65536, &v, err, errlen);
                d->max_clients = (unsigned)v;
                break;
        default:
                list_keys(daemon_keys, _DKEY_MAX, keys, sizeof(keys));
                return errorf(-EINVAL, err, errlen, "unknown key '%s' in [daemon] (%s)", key, keys);
        }
        if (r == 0)
                d->set |= 1u << k;
        return r;
}

static int user_limit_assignment(UserLimits *l, uint32_t *set, const char *key, const char *value, char *err,
                                 size_t errlen) {
        int k = find_key(user_keys, _UKEY_MAX, key);
        uint64_t v = 0;
        int r;

        switch (k) {
        case UKEY_MAX_CONNECTIONS:
                r = parse_count(key, value, 1, 65536, &v, err, errlen);
                break;
        case UKEY_MAX_REGIONS:
                r = parse_count(key, value, 1, 1u << 20, &v, err, errlen);
                break;
        case UKEY_MAX_REQUESTS:
                r = parse_count(key, value, 0, 1000000, &v, err, errlen);
                break;
        case UKEY_MAX_REGISTERED:
        case UKEY_MAX_POOL:
        case UKEY_LIMIT:
                r = conf_parse_size(value, conf_ram_bytes(), &v);
                if (r == -ERANGE)
                        return errorf(-EINVAL, err, errlen, "%s: '%s' is too large", key, value);
                if (r < 0)
                        return errorf(-EINVAL, err, errlen, "%s: '%s' is not a size (64M, 1.5G, 10%%, none)", key,
                                    value);
                break;
        default:
                return -ENOENT;
        }
        if (r < 0)
                return r;
        l->v[k] = v;
        *set |= 1u << k;
        return 0;
}

static int push(void **arr, size_t *n, size_t size, const void *v) {
        void *p = realloc(*arr, (*n + 1) * size);
        if (!p)
                return -ENOMEM;
        memcpy((char *)p + *n * size, v, size);
        *arr = p;
        (*n)++;
        return 0;
}

/* A user name or a uid. */
static int resolve_user(const char *s, uid_t *ret) {
        uint64_t v;
        if (conf_parse_uint(s, &v) == 0 && v < UINT32_MAX) {
                *ret = (uid_t)v;
                return 0;
        }
        struct passwd *pw = getpwnam(s);
        if (!pw)
                return -ENOENT;
        *ret = pw->pw_uid;
        return 0;
}

static int resolve_group(const char *s, gid_t *ret) {
        uint64_t v;
        if (conf_parse_uint(s, &v) == 0 && v < UINT32_MAX) {
                *ret = (gid_t)v;
                return 0;
        }
        struct group *g = getgrnam(s);
        if (!g)
                return -ENOENT;
        *ret = g->gr_gid;
        return 0;
}

/* allow = root alice 1001 @zswap   (or *) */
static int parse_allow(UsersConf *u, const char *value, char *err, size_t errlen) {
        char buf[1024], *save = NULL;
        int r;

        if (strlen(value) >= sizeof(buf))
                return errorf(-EINVAL, err, errlen, "allow: list too long");
        strcpy(buf, value);
        free(u->allow_uids);
        free(u->allow_gids);
        u->allow_uids = NULL;
        u->allow_gids = NULL;
        u->n_allow_uids = u->n_allow_gids = 0;
        u->allow_all = false;
        for (char *w = strtok_r(buf, " \t,", &save); w; w = strtok_r(NULL, " \t,", &save)) {
                if (strcmp(w, "*") == 0) {
                        u->allow_all = true;
                        continue;
                }
                if (w[0] == '@') {
                        gid_t g;
                        if (resolve_group(w + 1, &g) < 0)
                                return errorf(-EINVAL, err, errlen, "allow: unknown group '%s'", w + 1);
                        r = push((void **)&u->allow_gids, &u->n_allow_gids, sizeof(g), &g);
                } else {
                        uid_t uid;
                        if (resolve_user(w, &uid) < 0)
                                return errorf(-EINVAL, err, errlen, "allow: unknown user '%s' (a name, a uid, @group or *)",
                                            w);
                        r = push((void **)&u->allow_uids, &u->n_allow_uids, sizeof(uid), &uid);
                }
                if (r < 0)
                        return errorf(r, err, errlen, "out of memory");
        }
        return 0;
}

static int users_assignment(UsersConf *u, const char *key, const char *value, char *err, size_t errlen) {
        uint32_t set = 0;
        char keys[256];

        if (strcmp(key, "allow") == 0)
                return parse_allow(u, value, err, errlen);
        if (strcmp(key, "userfaultfd_device") == 0) {
                if (conf_parse_bool(value, &u->uffd_device) < 0)
                        return errorf(-EINVAL, err, errlen, "userfaultfd_device: '%s' is not yes or no", value);
                return 0;
        }
        if (strcmp(key, "admin_group") == 0) {
                if (strlen(value) >= sizeof(u->admin_group))
                        return errorf(-EINVAL, err, errlen, "admin_group: name too long");
                if (strcmp(value, "none") == 0 || !*value) {
                        u->has_admin_gid = false;
                        strcpy(u->admin_group, "none");
                        return 0;
                }
                if (resolve_group(value, &u->admin_gid) < 0)
                        return errorf(-EINVAL, err, errlen, "admin_group: unknown group '%s'", value);
                u->has_admin_gid = true;
                strcpy(u->admin_group, value);
                return 0;
        }
        int r = user_limit_assignment(&u->defaults, &set, key, value, err, errlen);
        if (r == -ENOENT) {
                list_keys(user_keys, _UKEY_MAX, keys, sizeof(keys));
                return errorf(-EINVAL, err, errlen, "unknown key '%s' in [users] (allow, admin_group, userfaultfd_device, %s)", key, keys);
        }
        return r;
}

static int user_rule_assignment(UsersConf *u, const char *name, const char *key, const char *value, char *err,
                                size_t errlen) {
        UserRule *rule = NULL;
        char keys[256];
        uid_t uid;
        int r;

        if (resolve_user(name, &uid) < 0)
                return errorf(-EINVAL, err, errlen, "[user:%s]: unknown user", name);
        if (uid == 0)
                return errorf(-EINVAL, err, errlen, "[user:%s]: root is never limited", name);
        for (size_t i = 0; i < u->nrules; i++)
                if (u->rules[i].uid == uid)
                        rule = &u->rules[i];
        if (!rule) {
                UserRule nr = { .uid = uid, .allow = -1, .uffd_device = -1 };
                if (push((void **)&u->rules, &u->nrules, sizeof(nr), &nr) < 0)
                        return errorf(-ENOMEM, err, errlen, "out of memory");
                rule = &u->rules[u->nrules - 1];
        }
        if (strcmp(key, "allow") == 0) {
                bool b;
                if (conf_parse_bool(value, &b) < 0)
                        return errorf(-EINVAL, err, errlen, "allow: '%s' is not yes or no", value);
                rule->allow = b;
                return 0;
        }
        if (strcmp(key, "userfaultfd_device") == 0) {
                bool b;
                if (conf_parse_bool(value, &b) < 0)
                        return errorf(-EINVAL, err, errlen, "userfaultfd_device: '%s' is not yes or no", value);
                rule->uffd_device = b;
                return 0;
        }
        r = user_limit_assignment(&rule->lim, &rule->set, key, value, err, errlen);
        if (r == -ENOENT) {
                list_keys(user_keys, _UKEY_MAX, keys, sizeof(keys));
                return errorf(-EINVAL, err, errlen, "unknown key '%s' in [user:%s] (allow, userfaultfd_device, %s)", key, name, keys);
        }
        return r;
}

/* [tier]: read at start; a reload that changes any of it says it needs
 * a restart */
static int tier_assignment(TierConf *t, const char *key, const char *value, char *err, size_t errlen) {
        uint64_t v;

        if (strcmp(key, "backing") == 0) {
                if (strlen(value) >= sizeof(t->backing))
                        return errorf(-EINVAL, err, errlen, "backing: too long (at most %zu bytes)", sizeof(t->backing) - 1);
                if (*value && *value != '/' && strncmp(value, "nbd://", 6) != 0 && strncmp(value, "nbd+unix://", 11) != 0)
                        return errorf(-EINVAL, err, errlen,
                                    "backing: '%s' is not an absolute path, nbd://HOST[:PORT]/EXPORT or "
                                    "nbd+unix:///EXPORT?socket=PATH", value);
                strcpy(t->backing, value);
                return 0;
        }
        if (strcmp(key, "size") == 0 || strcmp(key, "writeback_rate") == 0) {
                if (conf_parse_size(value, 0, &v) < 0)
                        return errorf(-EINVAL, err, errlen, "%s: '%s' is not a size (bytes, or with K, M, G, T)", key, value);
                if (strcmp(key, "size") == 0)
                        t->size = v;
                else
                        t->rate = v;
                return 0;
        }
        if (strcmp(key, "grace") == 0 || strcmp(key, "timeout") == 0) {
                if (conf_parse_duration(value, &v) < 0 || (strcmp(key, "timeout") == 0 && (v < 10 || v > 600000)))
                        return errorf(-EINVAL, err, errlen, "%s: '%s' is not a duration%s (e.g. 500ms, 60s, 5m)", key,
                                    value, strcmp(key, "timeout") == 0 ? " from 10ms to 10min" : "");
                if (strcmp(key, "grace") == 0)
                        t->grace_ms = v;
                else
                        t->timeout_ms = (uint32_t)v;
                return 0;
        }
        if (strcmp(key, "key") == 0) {
                if (strlen(value) >= sizeof(t->key) || *value != '/')
                        return errorf(-EINVAL, err, errlen, "key: '%s' is not an absolute path (at most %zu bytes)", value,
                                    sizeof(t->key) - 1);
                strcpy(t->key, value);
                return 0;
        }
        if (strcmp(key, "read_spin_us") == 0) {
                if (conf_parse_uint(value, &v) < 0 || v > 10000)
                        return errorf(-EINVAL, err, errlen, "read_spin_us: '%s' is not 0 to 10000 (microseconds)", value);
                t->read_spin_us = (uint32_t)v;
                return 0;
        }
        return errorf(-EINVAL, err, errlen,
                    "unknown key '%s' in [tier] (backing, size, writeback_rate, grace, timeout, read_spin_us, key)",
                    key);
}

static int assignment(const char *section, const char *key, const char *value, unsigned line, void *userdata,
                      char *err, size_t errlen) {
        Config *c = userdata;
        bool pool_key = strcmp(key, "pool_max") == 0 || strcmp(key, "pool_accept") == 0;
        int r;

        if (strcmp(section, "daemon") == 0)
                return daemon_assignment(&c->daemon, key, value, err, errlen);
        if (strcmp(section, "tier") == 0)
                return tier_assignment(&c->tier, key, value, err, errlen);
        if (strcmp(section, "users") == 0)
                return users_assignment(&c->users, key, value, err, errlen);
        if (strncmp(section, "user:", 5) == 0 && section[5])
                return user_rule_assignment(&c->users, section + 5, key, value, err, errlen);
        if (strcmp(section, "reclaim") == 0 || strcmp(section, "pool") == 0) {
                if (strcmp(section, "pool") == 0 && !pool_key)
                        return errorf(-EINVAL, err, errlen, "unknown key '%s' in [pool] (pool_max, pool_accept)", key);
                r = tunable_set(&c->tun, key, value, err, errlen);
                if (r == -ENOENT)
                        errorf(r, err, errlen, "unknown key '%s' in [%s] (zswapctl get lists them)", key, section);
                return r < 0 ? -EINVAL : 0;
        }
        return errorf(-EINVAL, err, errlen,
                    "unknown section [%s] (daemon, pool, reclaim, tier, users, user:NAME)", section);
}

int config_load(Config *c, const char *path, char *err, size_t errlen) {
        Config copy;
        int r = config_copy(&copy, c);

        if (r < 0)
                return errorf(r, err, errlen, "%s: out of memory", path);
        r = conf_parse(path, assignment, &copy, err, errlen);
        if (r < 0) {
                config_free(&copy);
                return r;
        }
        config_free(c);
        *c = copy;
        return 0;
}

static bool has_gid(const gid_t *groups, size_t n, gid_t g) {
        for (size_t i = 0; i < n; i++)
                if (groups[i] == g)
                        return true;
        return false;
}

static const UserRule *rule_of(const UsersConf *u, uid_t uid) {
        for (size_t i = 0; i < u->nrules; i++)
                if (u->rules[i].uid == uid)
                        return &u->rules[i];
        return NULL;
}

bool config_user_allowed(const UsersConf *u, uid_t uid, const gid_t *groups, size_t ngroups) {
        const UserRule *rule = rule_of(u, uid);

        if (uid == 0)
                return true;
        if (rule && rule->allow >= 0)
                return rule->allow;
        if (u->allow_all)
                return true;
        for (size_t i = 0; i < u->n_allow_uids; i++)
                if (u->allow_uids[i] == uid)
                        return true;
        for (size_t i = 0; i < u->n_allow_gids; i++)
                if (has_gid(groups, ngroups, u->allow_gids[i]))
                        return true;
        return false;
}

void config_user_limits(const UsersConf *u, uid_t uid, UserLimits *ret) {
        const UserRule *rule = rule_of(u, uid);

        if (uid == 0) {
                *ret = (UserLimits){ .v = { [UKEY_MAX_CONNECTIONS] = UINT64_MAX, [UKEY_MAX_REGIONS] = UINT64_MAX } };
                return;
        }
        *ret = u->defaults;
        for (int k = 0; rule && k < _UKEY_MAX; k++)
                if (rule->set & (1u << k))
                        ret->v[k] = rule->lim.v[k];
}

bool config_user_uffd_device(const UsersConf *u, uid_t uid) {
        const UserRule *rule = rule_of(u, uid);

        if (uid == 0)
                return true;
        if (rule && rule->uffd_device >= 0)
                return rule->uffd_device;
        return u->uffd_device;
}

bool config_is_admin(const UsersConf *u, uid_t uid, const gid_t *groups, size_t ngroups) {
        return uid == 0 || (u->has_admin_gid && has_gid(groups, ngroups, u->admin_gid));
}
