/*
 * reload.c: the configuration in force.
 *
 * Built at start from the defaults, zswapd.conf and each --set
 * (manager_build_config()), and reread on SIGHUP (reload_config()): the
 * policies and the users' rules change without dropping anyone; what
 * needs a restart is said and stays. Manager thread only.
 */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "manager-internal.h"
#include "reclaim.h"
#include "users.h"

int manager_build_config(const ManagerConfig *cfg, Config *ret, char *err, size_t len) {
        int r;

        config_default(ret);
        if (cfg->config_path && (r = config_load(ret, cfg->config_path, err, len)) < 0) {
                config_free(ret);
                return r;
        }
        for (size_t i = 0; i < cfg->nsets; i++) {
                char key[ZSWAP_TUNABLE_KEY_MAX], why[256];
                const char *eq = strchr(cfg->sets[i], '=');
                size_t kl = eq ? (size_t)(eq - cfg->sets[i]) : 0;
                if (!eq || kl == 0 || kl >= sizeof(key)) {
                        snprintf(err, len, "--set %s: expected KEY=VALUE", cfg->sets[i]);
                        config_free(ret);
                        return -EINVAL;
                }
                memcpy(key, cfg->sets[i], kl);
                key[kl] = 0;
                if ((r = tunable_set(&ret->tun, key, eq + 1, why, sizeof(why))) < 0) {
                        snprintf(err, len, "--set %s: %s", cfg->sets[i], r == -ENOENT ? "unknown key" : why);
                        config_free(ret);
                        return r;
                }
        }
        return 0;
}

/* The [daemon] keys a reload would change: they need a restart. The
 * command line's own win anyway, so only the file's are compared. */
static void reload_daemon_keys(Manager *m, const DaemonConf *now, const DaemonConf *new) {
        for (DaemonKey k = 0; k < _DKEY_MAX; k++) {
                bool same;
                if (m->cfg.cli_set & (1u << k))
                        continue;
                switch (k) {
                case DKEY_SOCKET: same = strcmp(now->socket, new->socket) == 0; break;
                case DKEY_COMPRESSOR: same = now->codec == new->codec; break;
                case DKEY_LEVEL: same = now->level == new->level; break;
                case DKEY_WORKERS: same = now->workers == new->workers; break;
                case DKEY_FAULT_THREADS: same = now->fault_threads == new->fault_threads; break;
                case DKEY_BATCH: same = now->batch == new->batch; break;
                case DKEY_WORKER_NICE: same = now->worker_nice == new->worker_nice; break;
                case DKEY_LOCK_MEMORY: same = now->lock_memory == new->lock_memory; break;
                case DKEY_SANDBOX: same = now->sandbox == new->sandbox; break;
                case DKEY_MAX_CLIENTS: same = now->max_clients == new->max_clients; break;
                default: same = true;
                }
                if (!same)
                        log_warn("SIGHUP: [daemon] %s changed: it needs a restart (systemctl restart zswapd); "
                                 "the running value stays", config_daemon_key(k));
        }
}

/* SIGHUP: reread the file. A bad file changes nothing and says why; a good
 * one applies the policies and the users' rules without dropping anyone. */
void reload_config(Manager *m) {
        char err[512];
        Config c;

        if (!m->cfg.config_path) {
                log_info("SIGHUP: no configuration file to reload (--config)");
                return;
        }
        int r = manager_build_config(&m->cfg, &c, err, sizeof(err));
        if (r < 0) {
                log_error("SIGHUP: %s; the running configuration stays", err);
                return;
        }
        reload_daemon_keys(m, &m->conf.daemon, &c.daemon);
        if (memcmp(&m->conf.tier, &c.tier, sizeof(c.tier)) != 0)
                log_warn("SIGHUP: [tier] changed: it needs a restart (systemctl restart zswapd); the running "
                         "second tier stays as it is");
        c.daemon = m->conf.daemon; /* [daemon] is read at start only */
        config_free(&m->conf);
        m->conf = c;
        m->reclaim.tun = c.tun;
        users_apply(m);
        reclaim_apply(&m->reclaim);
        reclaim_soon(&m->reclaim);
        log_info("SIGHUP: %s reloaded", m->cfg.config_path);
}
