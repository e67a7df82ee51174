/*
 * groups.c: groups the operator sees and sets, beside those clients ask
 * for themselves (SET_GROUP, requests.c).
 *
 * By cgroup: a client in no group is put, the first time the manager's
 * tick looks at it, in the group of its systemd unit: the last part of
 * its cgroup v2 path (the "0::" line of /proc/PID/cgroup) when that is a
 * unit (".service", ".scope"), as "unit:NAME" - the name `zswapctl
 * enable` gives a unit's processes through ZSWAP_GROUP, so that a unit
 * is one group whichever way its processes came to zswapd. On a cgroup
 * v1 host every process is at "/" there, and none is grouped this way.
 * Such a group has no limit of its own until the operator gives it one.
 *
 * Limits by name (GROUP_LIMIT, `zswapctl limit --unit UNIT SIZE`): kept
 * in a table of GROUP_LIMITS_MAX names for the daemon's life, applied to
 * every client in a group of that name, of any user, now and whenever one
 * joins; over what the clients asked for themselves. Admins only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "manager-internal.h"
#include "mmclient.h"
#include "protocol.h"

/* The unit of pid's cgroup v2 path as a group name (zgroup_of_unit(): as
 * `zswapctl enable` names it), or false: not in a unit. */
static bool cgroup_unit(pid_t pid, char *group, size_t len) {
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = 0;
        char *line = strncmp(buf, "0::", 3) == 0 ? buf : strstr(buf, "\n0::");
        if (!line)
                return false;
        line += line == buf ? 3 : 4;
        line[strcspn(line, "\n")] = 0;
        const char *unit = strrchr(line, '/');
        unit = unit ? unit + 1 : line;
        size_t l = strlen(unit);
        bool is_unit = (l > 8 && strcmp(unit + l - 8, ".service") == 0) || (l > 6 && strcmp(unit + l - 6, ".scope") == 0);
        if (!is_unit || l > 255)
                return false;
        zgroup_of_unit(unit, group, len);
        return zgroup_name_valid(group, len);
}

/* The index of name's limit in m->group_limits, or -1: none. An index,
 * not a pointer, so that readers and groups_set_limit(), which writes
 * the entry, share one lookup without casting away const. */
static int limit_find(const Manager *m, const char *name) {
        for (unsigned i = 0; i < m->ngroup_limits; i++)
                if (strcmp(m->group_limits[i].name, name) == 0)
                        return (int)i;
        return -1;
}

void groups_apply(Manager *m, MMClient *mm) {
        int i = mm->rc.group[0] ? limit_find(m, mm->rc.group) : -1;
        mm->rc.group_op_limit = i >= 0 ? m->group_limits[i].limit : 0;
}

void groups_tick(Manager *m) {
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                if (mm->rc.cgroup_read || !mm->conn || mm->nlanes == 0)
                        continue;
                mm->rc.cgroup_read = true;
                pid_t pid = mmclient_pid(mm);
                char name[ZSWAP_GROUP_NAME_MAX];
                if (mm->rc.group[0] || pid <= 0 || !cgroup_unit(pid, name, sizeof(name)) || !mmclient_alive(mm))
                        continue;
                memcpy(mm->rc.group, name, sizeof(mm->rc.group));
                mm->rc.group_limit = 0;
                mm->rc.group_share = 0;
                mm->rc.group_tick = 0;
                groups_apply(m, mm);
                mm->rc.count_soon = true;
                log_debug("pid %d: in group %s (its cgroup)", (int)pid, mm->rc.group);
        }
}

/* GROUP_LIMIT: every client in a group of that name under limit (0:
 * the clients' own again); reply value = the clients it applies to now */
int groups_set_limit(Manager *m, Conn *c, const ZMsgGroup *q) {
        if (!conn_admin(m, c))
                return -EPERM;
        if (!zgroup_name_valid(q->name, sizeof(q->name)))
                return -EINVAL;
        int i = limit_find(m, q->name);
        GroupLimit *g = i >= 0 ? &m->group_limits[i] : NULL;
        if (q->limit && !g) {
                if (m->ngroup_limits == GROUP_LIMITS_MAX)
                        return -ENOSPC;
                g = &m->group_limits[m->ngroup_limits++];
                memcpy(g->name, q->name, sizeof(g->name));
        }
        if (q->limit)
                g->limit = q->limit;
        else if (g)
                *g = m->group_limits[--m->ngroup_limits]; /* the last one in its place */
        int64_t n = 0;
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                if (mm->rc.group[0] && strcmp(mm->rc.group, q->name) == 0) {
                        groups_apply(m, mm);
                        mm->rc.group_share = 0;
                        mm->rc.count_soon = true;
                        n++;
                }
        log_info("group %s: resident limit %llu bytes for its processes together, set by uid %u (%lld now)", q->name,
                 (unsigned long long)q->limit, (unsigned)c->uid, (long long)n);
        reclaim_soon(&m->reclaim);
        conn_reply(c, q->hdr.id, 0, n);
        return 1;
}
