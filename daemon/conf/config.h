/*
 * config.h: zswapd.conf(5), the whole file.
 *
 * One table, config_settings[], lists every setting with its default; one
 * parse reads every section: [daemon] (start-time settings), [pool] and
 * [reclaim] (run-time policies; their types and ranges are
 * daemon/conf/tunables.c, the run-time half of this module), [tier] (the
 * second tier), [users] (who may be a client, the admin group, the
 * defaults of every non-root user's limits) and [user:NAME] (one user's
 * own). An unknown section or key is an
 * error with its file:line, so that a typo never silently leaves a default
 * in force. config_load() parses into a copy: on error the Config it was
 * given is unchanged, which is what lets SIGHUP keep the running
 * configuration when the new file is bad.
 *
 * User and group names are resolved when the file is read (getpwnam,
 * getgrnam): an unknown name is an error, and a user renamed later keeps
 * the rules of its uid until the next reload.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "codec.h"
#include "tier.h"
#include "tunable-keys.h"
#include "tunables.h"

#define CONFIG_DEFAULT_PATH "/etc/zswapd/zswapd.conf"

/* [daemon]: read at start; a reload that changes one says it needs a restart */
typedef enum DaemonKey {
        DKEY_SOCKET,
        DKEY_COMPRESSOR,
        DKEY_LEVEL,
        DKEY_WORKERS,
        DKEY_FAULT_THREADS,
        DKEY_BATCH,
        DKEY_WORKER_NICE,
        DKEY_LOCK_MEMORY,
        DKEY_SANDBOX,
        DKEY_MAX_CLIENTS,
        _DKEY_MAX,
} DaemonKey;

typedef struct DaemonConf {
        char socket[108];
        CodecKind codec;
        int level;              /* 0: the codec's default */
        unsigned workers;       /* 0: one per CPU */
        unsigned fault_threads; /* 0: one per CPU */
        unsigned batch;
        int worker_nice;
        bool lock_memory;
        bool sandbox;
        unsigned max_clients;
        uint32_t set;           /* bit DKEY_*: given in the file */
} DaemonConf;

/* The limits of one user's clients taken together. 0 means none, except
 * for max_connections and max_regions, which are never unlimited. */
typedef enum UserKey {
        UKEY_MAX_CONNECTIONS,
        UKEY_MAX_REGIONS,
        UKEY_MAX_REGISTERED,
        UKEY_MAX_POOL,
        UKEY_MAX_REQUESTS,
        UKEY_LIMIT,
        _UKEY_MAX,
} UserKey;

typedef struct UserLimits {
        uint64_t v[_UKEY_MAX];
} UserLimits;

/* [user:NAME]: one user's own rules; keys it does not set come from [users] */
typedef struct UserRule {
        uid_t uid;
        int allow;              /* -1: as [users] allow says; 0 no; 1 yes */
        int uffd_device;        /* userfaultfd_device; -1: as [users] says */
        UserLimits lim;
        uint32_t set;           /* bit UKEY_*: given in the section */
} UserRule;

typedef struct UsersConf {
        bool allow_all;         /* allow = * */
        uid_t *allow_uids;
        size_t n_allow_uids;
        gid_t *allow_gids;      /* allow = @group */
        size_t n_allow_gids;
        bool uffd_device;       /* userfaultfd_device: hand out /dev/userfaultfd (default no) */
        bool has_admin_gid;
        gid_t admin_gid;
        char admin_group[64];   /* as written, for messages */
        UserLimits defaults;
        UserRule *rules;
        size_t nrules;
} UsersConf;

typedef struct Config {
        DaemonConf daemon;
        TierConf tier;          /* [tier]: the second tier; backing "" none (docs/tier.md) */
        UsersConf users;
        Tunables tun;
} Config;

/*
 * Every setting, one row each: the single table of zswapd's settings and
 * their defaults. config_default() is each row's default parsed by the
 * same code a file's line goes through, the command line starts from the
 * same Config (manager_config_defaults(), daemon/manager), zswapd --help and
 * `zswapctl get` show the same values, and the shipped systemd/zswapd.conf
 * is checked against it (tests/test-config.c). A new setting is a row
 * here plus its parsing in its section's function in config.c (for
 * [reclaim] and [pool]: its type and range in daemon/conf/tunables.c, its name
 * in common/tunable-keys.c).
 */
typedef enum ConfigWhen {
        CONFIG_AT_START,  /* [daemon], [tier]: read at start; a reload that changes it says it needs a restart */
        CONFIG_RUN_TIME,  /* [reclaim], [pool]: applied on reload, by --set and by `zswapctl set` */
        CONFIG_ON_RELOAD, /* [users]: applied on reload, without dropping anyone */
        CONFIG_CMDLINE,   /* a command-line option only, no key in the file */
} ConfigWhen;

typedef struct ConfigSetting {
        const char *section; /* "daemon", "reclaim", "pool" (also taken in [reclaim]), "tier", "users";
                              * NULL: a command-line option only, key is its long name */
        const char *key;
        int id;              /* DKEY_*, TUNABLE_*, UKEY_* in its section, or -1 */
        const char *def;     /* the default, written as in the file ("2s", "yes"); NULL: empty, none */
        ConfigWhen when;
        bool may_be_missing; /* the default names what the system may lack (the group zswap):
                              * it counts only where it exists */
        const char *help;    /* one line: what it does */
} ConfigSetting;

extern const ConfigSetting config_settings[];
extern const size_t config_n_settings;

/* The row of key in section ([reclaim] also finds [pool]'s keys; NULL
 * section: the command-line options), or NULL. */
const ConfigSetting *config_setting(const char *section, const char *key);
/* The row of a run-time tunable. */
const ConfigSetting *config_tunable_setting(TunableKey k);

/* Defaults: what an empty file means, from config_settings[]. users must
 * be config_free()d. */
void config_default(Config *c);
void config_free(Config *c);
/* Deep copy (the users' arrays). 0 or -ENOMEM. */
int config_copy(Config *dst, const Config *src);

/*
 * Read path on top of *c (which holds the defaults, or the command line's
 * base). 0, or -errno with "path:line: why" in err; *c is unchanged on
 * error.
 */
int config_load(Config *c, const char *path, char *err, size_t errlen);


/* The key names, for messages and the documentation checks. */
const char *config_daemon_key(DaemonKey k);
const char *config_user_key(UserKey k);

/*
 * What applies to uid: whether it may be a client (groups: its primary
 * and supplementary groups) and its limits. Root is always allowed and
 * never limited (every limit 0, max_connections and max_regions
 * UINT64_MAX).
 */
bool config_user_allowed(const UsersConf *u, uid_t uid, const gid_t *groups, size_t ngroups);
void config_user_limits(const UsersConf *u, uid_t uid, UserLimits *ret);
/*
 * Whether uid's clients get a descriptor of /dev/userfaultfd at HELLO
 * (userfaultfd_device), with which they create uffds that handle
 * kernel-mode faults whatever vm.unprivileged_userfaultfd says. Root
 * always does.
 */
bool config_user_uffd_device(const UsersConf *u, uid_t uid);
/* Whether one of groups is the admin group (root is always an admin). */
bool config_is_admin(const UsersConf *u, uid_t uid, const gid_t *groups, size_t ngroups);
