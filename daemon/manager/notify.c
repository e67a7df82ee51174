/*
 * notify.c: what systemd hears from the daemon (sd-daemon.c): the
 * one-line STATUS= and the watchdog. Manager thread only; the Manager's
 * watchdog_* and status* fields are this file's.
 */
#include <stdio.h>
#include <string.h>

#include "manager-internal.h"
#include "sd-daemon.h"
#include "util.h"

/* The one-line summary systemctl status shows: clients, what they hold out, the pool. */
void notify_status(Manager *m, const char *state) {
        uint64_t pages = 0;
        unsigned clients = 0;
        PoolStats ps;
        char status[sizeof(m->status)];

        /* counters, relaxed: a status line, nothing is ordered by them (mmclient.h) */
        for (MMClient *mm = m->mms; mm; mm = mm->next, clients++)
                pages += atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed) +
                         atomic_load_explicit(&mm->st.same_pages, memory_order_relaxed);
        pool_shared_stats(m->core.pools, &ps);
        snprintf(status, sizeof(status), "%u client%s, %.1f MiB held out in a %.1f MiB pool", clients,
                 clients == 1 ? "" : "s", (double)(pages * ZSWAP_PAGE_SIZE) / (1 << 20),
                 (double)ps.pool_bytes / (1 << 20));
        m->status_last_ns = now_ns();
        if (!state && strcmp(status, m->status) == 0)
                return;
        strcpy(m->status, status);
        sdd_notifyf("%sSTATUS=%s", state ? state : "", status);
}

/* systemd's watchdog hears from the manager thread's own loop: a stuck loop is a dead daemon. */
void notify_tick(Manager *m) {
        uint64_t now = now_ns();

        if (m->watchdog_ns && now - m->watchdog_last_ns >= m->watchdog_ns) {
                sdd_notify("WATCHDOG=1");
                m->watchdog_last_ns = now;
        }
        if (now - m->status_last_ns >= 5ull * 1000000000)
                notify_status(m, NULL);
}
