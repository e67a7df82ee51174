/*
 * dedups.c: the shared stores (daemon/mm/dedup.h), one per user whose
 * clients may share pages, and who joins one.
 *
 * A member can read every object of its user's shared store through the
 * descriptor it holds, so a client joins only where the kernel would let
 * any process of its user read its memory anyway (docs/security.md): the
 * same user (there is no store across users), a process that is dumpable
 * (the files of its /proc/PID are its user's: a process that made itself non-dumpable,
 * or runs a setuid program, keeps its pages to itself), and no Yama
 * ptrace_scope above 0 (with 1, processes of one user may not read each
 * other's memory unless one is the other's ancestor). And only a library
 * that keeps the descriptor and restores from it (ZHELLO_F_SHARED).
 *
 * Manager thread only. The tick sweeps each store's table (objects no
 * entry names any more) and lets go of a store no client holds;
 * manager_pool_reclaim() gives back its empty chunks with the clients'.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "log.h"
#include "manager-internal.h"

#define SWEEP_PER_TICK 4096 /* table records looked at per store per tick */

/* May processes of one user read each other's memory (Yama)? */
static bool ptrace_open(void) {
        FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
        int v = -1;

        if (!f)
                return errno == ENOENT; /* no Yama: the classic rules; unreadable: assume the worst */
        if (fscanf(f, "%d", &v) != 1)
                v = -1;
        fclose(f);
        return v == 0;
}

/* A process whose memory its user can read: the files of its /proc/PID
 * are its user's (the kernel gives root those of a process that is not
 * dumpable; the directory itself stays the process's user's). */
static bool dumpable(pid_t pid, uid_t uid) {
        char path[32];
        struct stat st;

        if (uid == 0)
                return true;
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        return stat(path, &st) == 0 && st.st_uid == uid;
}

Dedup *dedups_find(Manager *m, uid_t uid) {
        for (size_t i = 0; i < m->ndedups; i++)
                if (dedup_uid(m->dedups[i]) == uid)
                        return m->dedups[i];
        return NULL;
}

void dedups_join(Manager *m, MMClient *mm, uint32_t features) {
        Dedup *d;

        if (!(features & ZHELLO_F_SHARED) || !m->reclaim.tun.dedup || !mm->store || mm->dedup)
                return;
        if (!ptrace_open() || !dumpable(mmclient_pid(mm), mm->uid)) {
                log_debug("pid %d: shares no pages with its user's other processes (not dumpable, or Yama)",
                          (int)mmclient_pid(mm));
                return;
        }
        d = dedups_find(m, mm->uid);
        if (!d) {
                Dedup **n = realloc(m->dedups, (m->ndedups + 1) * sizeof(*n));
                if (!n)
                        return;
                m->dedups = n;
                int r = dedup_new(m->core.pools, (uint32_t)m->core.cfg.codec, mm->uid, m->core.daemon_id, &d);
                if (r < 0) {
                        log_warn("uid %u: no shared store (%s): its processes share no pages", mm->uid, strerror(-r));
                        return;
                }
                m->dedups[m->ndedups++] = d;
        }
        mmclient_set_dedup(mm, d);
}

void dedups_tick(Manager *m) {
        for (size_t i = 0; i < m->ndedups;) {
                Dedup *d = m->dedups[i];
                dedup_sweep(d, SWEEP_PER_TICK);
                DedupStats st;
                dedup_stats(d, &st);
                if (dedup_unused(d) && st.objects == 0) {
                        /* nobody holds it and nothing is left in it */
                        dedup_unref(d);
                        m->dedups[i] = m->dedups[--m->ndedups];
                        continue;
                }
                i++;
        }
}

uint64_t dedups_user_bytes(Manager *m, uid_t uid) {
        Dedup *d = dedups_find(m, uid);
        DedupStats st;

        if (!d)
                return 0;
        dedup_stats(d, &st);
        return st.bytes;
}

void dedups_stats(Manager *m, DedupStats *sum) {
        *sum = (DedupStats){ 0 };
        for (size_t i = 0; i < m->ndedups; i++) {
                DedupStats st;
                dedup_stats(m->dedups[i], &st);
                sum->objects += st.objects;
                sum->bytes += st.bytes;
                sum->pool_bytes += st.pool_bytes;
                sum->hits += st.hits;
                sum->stored += st.stored;
                sum->swept += st.swept;
        }
}

void dedups_free(Manager *m) {
        for (size_t i = 0; i < m->ndedups; i++)
                dedup_unref(m->dedups[i]);
        free(m->dedups);
        m->dedups = NULL;
        m->ndedups = 0;
}
