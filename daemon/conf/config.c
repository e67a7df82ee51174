/*
 * config.c: zswapd's settings, zswapd.conf(5) (config.h says what each
 * section is for).
 *
 * config_settings[] is the one table of every setting: its section, key,
 * default (as it is written in the file), when it applies and a help line.
 * config_default() is nothing but each row's default handed to the same
 * assignment() a file's line goes to, so a default cannot be a value the
 * file would refuse or read differently; the command line starts from it
 * (manager_config_defaults(), daemon/manager). Rows of [daemon] and [users] limits carry
 * their DaemonKey/UserKey, those of [reclaim] and [pool] their TunableKey.
 *
 * conf_parse() (common/conf.c) does the syntax and calls assignment() for
 * every "key = value" with its section; each section has its own parsing
 * function here, and the value grammar is common/conf.h's, so that "64M"
 * or "30s" means the same in every section, on zswapctl's command line
 * and on the wire. The [reclaim] and [pool] keys go to tunable_set()
 * (daemon/conf/tunables.c, the run-time half: their types and ranges), the
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

#define START CONFIG_AT_START
#define RUN CONFIG_RUN_TIME
#define RELOAD CONFIG_ON_RELOAD
#define CMDLINE CONFIG_CMDLINE
const ConfigSetting config_settings[] = {
        /* [daemon], in DaemonKey order (the order "unknown key" lists them in) */
        { "daemon", "socket", DKEY_SOCKET, ZSWAP_DEFAULT_SOCKET, START, false,
          "the Unix socket clients and zswapctl connect to" },
        { "daemon", "compressor", DKEY_COMPRESSOR, "lz4", START, false,
          "lz4 (fast) or zstd (smaller, slower)" },
        { "daemon", "level", DKEY_LEVEL, "0", START, false,
          "compression level, 0: the compressor's default (zstd 1..22; lz4: acceleration)" },
        { "daemon", "workers", DKEY_WORKERS, "0", START, false,
          "compression worker threads; 0 or auto: one per CPU" },
        { "daemon", "fault_threads", DKEY_FAULT_THREADS, "0", START, false,
          "threads serving page faults; 0 or auto: one per CPU" },
        { "daemon", "batch", DKEY_BATCH, "512", START, false,
          "pages per eviction batch, 1..512" },
        { "daemon", "worker_nice", DKEY_WORKER_NICE, "10", START, false,
          "nice value of the compression workers, -20..19" },
        { "daemon", "lock_memory", DKEY_LOCK_MEMORY, "yes", START, false,
          "lock the daemon's own memory, so that serving a fault never waits on one of its own" },
        { "daemon", "sandbox", DKEY_SANDBOX, "yes", START, false,
          "drop every capability the daemon does not use and refuse system calls it does not make" },
        { "daemon", "max_clients", DKEY_MAX_CLIENTS, "1024", START, false,
          "connections in all" },

        /* [reclaim] and [pool]: the run-time tunables, in TunableKey order
         * (zswapctl get's); types and ranges in daemon/conf/tunables.c */
        { "reclaim", "limit", TUNABLE_LIMIT, "0", RUN, false,
          "resident limit of each client's managed memory (a client's own setting wins); 0: none" },
        { "reclaim", "idle_age", TUNABLE_IDLE_AGE, "0", RUN, false,
          "evict pages nobody touched for this long; 0: off" },
        { "reclaim", "pressure_target", TUNABLE_PRESSURE_TARGET, "0", RUN, false,
          "hold more out while tasks stall on memory (PSI some, percent of each period) above this, less below; 0: off" },
        { "reclaim", "min_free", TUNABLE_MIN_FREE, "0", RUN, false,
          "evict while MemAvailable is below this; 0: off" },
        { "reclaim", "pressure_step", TUNABLE_PRESSURE_STEP, "2", RUN, false,
          "most of the managed memory, in percent, one period may add to what is held out" },
        { "reclaim", "pressure_period", TUNABLE_PRESSURE_PERIOD, "2s", RUN, false,
          "control period of pressure_target and min_free (PSI avg10 needs >= 1s)" },
        { "pool", "pool_max", TUNABLE_POOL_MAX, "0", RUN, false,
          "largest the compressed pool may grow; 0: unbounded" },
        { "pool", "pool_accept", TUNABLE_POOL_ACCEPT, "90", RUN, false,
          "once the pool was full, eviction resumes below this percentage of pool_max" },
        { "pool", "pool_compact", TUNABLE_POOL_COMPACT, "5", RUN, false,
          "move objects out of a client's sparsest pool chunks once that frees this percentage of its pool; 0: never" },
        { "reclaim", "thrash_refaults", TUNABLE_THRASH_REFAULTS, "128", RUN, false,
          "refaults per second in one 2 MiB zone that make reclaim back off it; 0: off" },
        { "reclaim", "thrash_backoff", TUNABLE_THRASH_BACKOFF, "2s", RUN, false,
          "first back-off of a thrashing zone, doubled (up to 64x) while it thrashes" },
        { "reclaim", "keep_clean", TUNABLE_KEEP_CLEAN, "yes", RUN, false,
          "keep the compressed copy of a page a read brought back until it is written" },
        { "reclaim", "clean_max", TUNABLE_CLEAN_MAX, "2", RUN, false,
          "most those kept copies may take, in percent of the client's registered memory" },
        { "reclaim", "fault_history", TUNABLE_FAULT_HISTORY, "yes", RUN, false,
          "a fault also brings back the held pages that faulted after it the last two times it was taken" },
        { "reclaim", "refill", TUNABLE_REFILL, "yes", RUN, false,
          "bring held pages back ahead of use, most recently used first, when room opens or an idle process wakes" },
        { "reclaim", "refill_quiet", TUNABLE_REFILL_QUIET, "10s", RUN, false,
          "a process that takes a fault after this long without one or a write woke: what was taken meanwhile comes back; 0: never" },
        { "reclaim", "write_scan", TUNABLE_WRITE_SCAN, "1s", RUN, false,
          "how often written pages are looked for with PAGEMAP_SCAN; 0: never" },
        { "reclaim", "interval", TUNABLE_INTERVAL, "250ms", RUN, false,
          "how often reclaim looks at the clients and their limits (the reclaim tick)" },
        { "pool", "recompress_age", TUNABLE_RECOMPRESS_AGE, "2m", RUN, false,
          "recompress with zstd the objects of pages nobody touched for this long (a client's own setting wins); 0: off" },
        { "pool", "recompress_level", TUNABLE_RECOMPRESS_LEVEL, "9", RUN, false,
          "the zstd level of recompression, 1..22 (pages the compressor finds incompressible: 3 at most)" },
        { "pool", "recompress_cpu", TUNABLE_RECOMPRESS_CPU, "10", RUN, false,
          "most of one CPU recompression may use, in percent" },
        { "pool", "recompress_dict", TUNABLE_RECOMPRESS_DICT, "yes", RUN, false,
          "train a zstd dictionary for each big client from its own pages, and recompress with it" },
        { "pool", "dedup", TUNABLE_DEDUP, "yes", RUN, false,
          "hold the pages a user's processes share after fork once, in a store they all hold (security.md)" },

        /* [tier], in the order "unknown key" lists them in */
        { "tier", "backing", -1, NULL, START, false,
          "a file, a block device, or an NBD export; empty: no second tier" },
        { "tier", "size", -1, "0", START, false,
          "bytes of it to use; 0: the whole file, device or export" },
        { "tier", "writeback_rate", -1, "0", START, false,
          "bytes written per second at most; 0: no limit" },
        { "tier", "grace", -1, "60s", START, false,
          "after a restart, blocks an earlier daemon wrote are kept this long for clients coming back" },
        { "tier", "timeout", -1, "5s", START, false,
          "an NBD request (and a connection attempt) takes this long at most" },
        { "tier", "read_spin_us", -1, "200", START, false,
          "a fault's read of a file polls for its completion this long before it sleeps; 0: sleep at once" },
        { "tier", "key", -1, NULL, START, false,
          "the file of the key the tier's blocks are sealed with; empty: " TIER_DEFAULT_KEY },

        /* [users]: the keys compared by name, then the limits in UserKey
         * order (as "unknown key" lists them) */
        { "users", "allow", -1, "root", RELOAD, false,
          "users who may hand memory over: names, uids, @group, or *; root always may" },
        { "users", "admin_group", -1, "zswap", RELOAD, true,
          "members may run admin commands as root can; none: root only" },
        { "users", "userfaultfd_device", -1, "no", RELOAD, false,
          "hand the user's clients a descriptor of /dev/userfaultfd" },
        { "users", "max_connections", UKEY_MAX_CONNECTIONS, "64", RELOAD, false,
          "connections one user may have open" },
        { "users", "max_regions", UKEY_MAX_REGIONS, "4096", RELOAD, false,
          "regions one user may have registered" },
        { "users", "max_registered", UKEY_MAX_REGISTERED, "0", RELOAD, false,
          "bytes one user may have registered; 0: no limit" },
        { "users", "max_pool", UKEY_MAX_POOL, "0", RELOAD, false,
          "pool bytes one user's pages may take; beyond it they stay resident; 0: no limit" },
        { "users", "max_requests", UKEY_MAX_REQUESTS, "1000", RELOAD, false,
          "requests per second; beyond it the user's connections are read more slowly; 0: no limit" },
        { "users", "limit", UKEY_LIMIT, "none", RELOAD, false,
          "resident limit of each of the user's clients, unless it sets its own; none: the [reclaim] limit" },

        /* the command line only (zswapd --help, zswapd(8)) */
        { NULL, "fault-spin-us", -1, "auto", CMDLINE, false,
          "after a fault, poll this many microseconds before sleeping (0..10000, 0: off; auto: 0 or 50, measured at start)" },
        { NULL, "fault-wake", -1, "auto", CMDLINE, false,
          "with the shared service, a fault wakes every fault thread (all) or one (one); auto: measured at start" },
        { NULL, "fault-rt-prio", -1, "0", CMDLINE, false,
          "fault threads SCHED_FIFO at this priority (0..99, 0: time-shared)" },
        { NULL, "read-bound-ms", -1, "1000", CMDLINE, false,
          "a read of a client's memory that waits this long ends that client (10..3600000)" },
};
const size_t config_n_settings = ELEMENTSOF(config_settings);
#undef START
#undef RUN
#undef RELOAD
#undef CMDLINE

static bool pool_section_key(const char *key) {
        return strcmp(key, "pool_max") == 0 || strcmp(key, "pool_accept") == 0 || strcmp(key, "pool_compact") == 0 ||
               strncmp(key, "recompress_", 11) == 0 || strcmp(key, "dedup") == 0;
}

const ConfigSetting *config_setting(const char *section, const char *key) {
        for (size_t i = 0; i < config_n_settings; i++) {
                const ConfigSetting *s = &config_settings[i];
                bool in = section ? s->section && (strcmp(s->section, section) == 0 ||
                                                   (strcmp(section, "reclaim") == 0 && strcmp(s->section, "pool") == 0))
                                  : !s->section;
                if (in && strcmp(s->key, key) == 0)
                        return s;
        }
        return NULL;
}

/* The row with id in section. */
static const ConfigSetting *setting_by_id(const char *section, int id) {
        for (size_t i = 0; i < config_n_settings; i++)
                if (config_settings[i].section && strcmp(config_settings[i].section, section) == 0 &&
                    config_settings[i].id == id)
                        return &config_settings[i];
        return NULL;
}

const ConfigSetting *config_tunable_setting(TunableKey k) {
        const ConfigSetting *s = setting_by_id("reclaim", (int)k);
        return s ? s : setting_by_id("pool", (int)k);
}

const char *config_daemon_key(DaemonKey k) {
        const ConfigSetting *s = k < _DKEY_MAX ? setting_by_id("daemon", (int)k) : NULL;
        return s ? s->key : NULL;
}

const char *config_user_key(UserKey k) {
        const ConfigSetting *s = k < _UKEY_MAX ? setting_by_id("users", (int)k) : NULL;
        return s ? s->key : NULL;
}

static int assignment(const char *section, const char *key, const char *value, unsigned line, void *userdata,
                      char *err, size_t errlen);

void config_default(Config *c) {
        *c = (Config){ 0 };
        for (size_t i = 0; i < config_n_settings; i++) {
                const ConfigSetting *s = &config_settings[i];
                char err[256] = "";
                if (!s->section || !s->def)
                        continue;
                if (assignment(s->section, s->key, s->def, 0, c, err, sizeof(err)) < 0 && !s->may_be_missing) {
                        /* a row whose default its own parser refuses: tests/test-config.c fails first */
                        fprintf(stderr, "zswapd: bad default of [%s] %s: %s\n", s->section, s->key, err);
                        abort();
                }
        }
        c->daemon.set = 0; /* defaults, not given in a file */
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

/* The id of key among section's rows that have one, or -1. */
static int find_key(const char *section, const char *key) {
        const ConfigSetting *s = config_setting(section, key);
        return s && strcmp(s->section, section) == 0 ? s->id : -1;
}

/* The keys of section's rows that have an id, in id order. */
static void list_keys(const char *section, int n, char *buf, size_t len) {
        size_t o = 0;
        buf[0] = 0;
        for (int i = 0; i < n && o < len; i++)
                o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", setting_by_id(section, i)->key);
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
        int k = find_key("daemon", key);
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
                list_keys("daemon", _DKEY_MAX, keys, sizeof(keys));
                return errorf(-EINVAL, err, errlen, "unknown key '%s' in [daemon] (%s)", key, keys);
        }
        if (r == 0)
                d->set |= 1u << k;
        return r;
}

static int user_limit_assignment(UserLimits *l, uint32_t *set, const char *key, const char *value, char *err,
                                 size_t errlen) {
        int k = find_key("users", key);
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
                if (strcmp(w, "root") == 0 || strcmp(w, "0") == 0)
                        continue; /* root always may (the default "allow = root" says so) */
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
                /* the name stays when the group is unknown: the default
                 * group counts only if the system has it (may_be_missing) */
                strcpy(u->admin_group, value);
                u->has_admin_gid = false;
                if (resolve_group(value, &u->admin_gid) < 0)
                        return errorf(-EINVAL, err, errlen, "admin_group: unknown group '%s'", value);
                u->has_admin_gid = true;
                return 0;
        }
        int r = user_limit_assignment(&u->defaults, &set, key, value, err, errlen);
        if (r == -ENOENT) {
                list_keys("users", _UKEY_MAX, keys, sizeof(keys));
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
                list_keys("users", _UKEY_MAX, keys, sizeof(keys));
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
        bool pool_key = pool_section_key(key);
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
                        return errorf(-EINVAL, err, errlen, "unknown key '%s' in [pool] (pool_max, pool_accept, pool_compact, recompress_age, recompress_level, recompress_cpu, recompress_dict, dedup)", key);
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
