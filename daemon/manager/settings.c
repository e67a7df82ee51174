/*
 * settings.c: the manager's configuration (ManagerConfig) from the table
 * of settings (daemon/conf/config.c): what main() starts from and how
 * [daemon] settings land on it.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "conf.h"
#include "macro.h"
#include "manager.h"

/* A command-line-only row's default, as written; as a number below. A
 * default its row cannot be read as is a bug in the table, which
 * tests/test-config.c catches before any daemon runs. */
static const char *cmdline_default_str(const char *option) {
        const ConfigSetting *s = config_setting(NULL, option);

        if (!s) {
                fprintf(stderr, "zswapd: no default of --%s\n", option);
                abort();
        }
        return s->def;
}

static unsigned cmdline_default(const char *option) {
        uint64_t v;

        if (conf_parse_uint(cmdline_default_str(option), &v) < 0 || v > UINT_MAX) {
                fprintf(stderr, "zswapd: bad default of --%s\n", option);
                abort();
        }
        return (unsigned)v;
}

void manager_config_apply(ManagerConfig *cfg, const DaemonConf *d, uint32_t keys, unsigned ncpu) {
#define TAKE(k) (keys & (1u << (k)))
        if (TAKE(DKEY_SOCKET))
                cfg->socket_path = d->socket;
        if (TAKE(DKEY_COMPRESSOR))
                cfg->codec = d->codec;
        if (TAKE(DKEY_LEVEL))
                cfg->level = d->level;
        if (TAKE(DKEY_WORKERS))
                cfg->workers = d->workers ? d->workers : ncpu;
        if (TAKE(DKEY_FAULT_THREADS))
                cfg->fault_threads = d->fault_threads ? d->fault_threads : ncpu;
        if (TAKE(DKEY_BATCH))
                cfg->batch_pages = d->batch;
        if (TAKE(DKEY_WORKER_NICE))
                cfg->worker_nice = d->worker_nice;
        if (TAKE(DKEY_MAX_CLIENTS))
                cfg->max_clients = d->max_clients;
        if (TAKE(DKEY_LOCK_MEMORY))
                cfg->lock_memory = d->lock_memory;
        if (TAKE(DKEY_SANDBOX))
                cfg->sandbox = d->sandbox;
#undef TAKE
}

void manager_config_defaults(ManagerConfig *cfg, const DaemonConf *d, unsigned ncpu) {
        const char *env = getenv("ZSWAP_SOCKET");

        *cfg = (ManagerConfig){
                .fault_pin = true,
                .fault_shared = true,
                /* fixed, not settings */
                .max_compressed = ZSWAP_PAGE_SIZE * 3 / 4, /* as zswap: worse than 3/4 page stays resident */
                .max_regions = 4096,                       /* per client */
                .max_registered = UINT64_MAX,
                .listen_fd = -1,
        };
        manager_config_apply(cfg, d, (1u << _DKEY_MAX) - 1, ncpu);
        if (env)
                cfg->socket_path = env;
        cfg->fault_rt_prio = cmdline_default("fault-rt-prio");
        if (fault_spin_from_string(cmdline_default_str("fault-spin-us"), &cfg->fault_spin_us) < 0 ||
            fault_wake_from_string(cmdline_default_str("fault-wake"), &cfg->fault_wake) < 0) {
                fprintf(stderr, "zswapd: bad default of --fault-spin-us or --fault-wake\n");
                abort();
        }
}
