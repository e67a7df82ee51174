/*
 * zswapctl-process.c: the commands about one running program, named by
 * its pid: `pageout PID [ADDR LEN]` evicts its managed memory now,
 * `pagein PID [ADDR LEN]` brings it all back and keeps it there,
 * `limit PID SIZE` keeps its resident managed memory under SIZE. Sizes and
 * pids are parsed with the daemon's grammar (common/conf.h) before
 * anything is sent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "macro.h"
#include "protocol.h"
#include "util.h"
#include "zswapctl.h"

/* A process id, or 0 after saying why not. */
int32_t parse_pid(const char *s) {
        uint64_t pid;

        if (conf_parse_uint(s, &pid) < 0 || pid == 0 || pid > INT32_MAX) {
                fprintf(stderr, "zswapctl: '%s' is not a process id\n", s);
                return 0;
        }
        return (int32_t)pid;
}

/* pageout PID [ADDR LEN]: evict a running program's managed memory;
 * pagein PID [ADDR LEN]: every page of it held back in it, and it out of
 * the automatic policies (for a debugger, a core dump) */
int cmd_pageout(const char *path, int argc, char **argv, bool json, bool pagein) {
        ZMsgPageoutPid q = { 0 };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        const char *what = pagein ? "pagein" : "pageout";
        char *end;
        long pid;

        if (argc != 1 && argc != 3) {
                fprintf(stderr, "zswapctl: usage: zswapctl %s PID [ADDR LEN]\n", what);
                return 2;
        }
        q.pid = parse_pid(argv[0]);
        if (q.pid == 0)
                return 2;
        pid = q.pid;
        if (argc == 3) {
                errno = 0;
                q.addr = strtoull(argv[1], &end, 0);
                if (errno || *end || parse_size(argv[2], &q.len) < 0 || q.len == 0) {
                        fprintf(stderr, "zswapctl: ADDR is an address (0x...), LEN a size (4096, 64M, ...)\n");
                        return 2;
                }
        }
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, pagein ? ZMSG_PAGEIN_PID : ZMSG_PAGEOUT_PID, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r == -ESRCH) {
                no_client(pid);
                return 1;
        }
        if (r == -EPERM) {
                fprintf(stderr, "zswapctl: " EPERM_ADMIN " (process %ld is another user's)\n", pid);
                return 1;
        }
        if (r == -EPROTO && pagein) {
                fprintf(stderr, "zswapctl: the running zswapd does not understand pagein: restart it with this "
                                "version\n");
                return 1;
        }
        if (r < 0) {
                fprintf(stderr, "zswapctl: %s of process %ld: %s\n", what, pid, strerror(-r));
                return 1;
        }
        uint64_t pages = (uint64_t)((ZMsgReply *)buf)->value;
        if (json)
                printf("{\"pid\": %ld, \"%s\": %llu}\n", pid, pagein ? "held_pages" : "evicted_pages",
                       (unsigned long long)pages);
        else if (pagein)
                printf("process %ld: every page back (%llu were held); automatic reclaim is off for it until "
                       "zswapctl set --pid %ld reclaim yes\n", pid, (unsigned long long)pages, pid);
        else
                printf("process %ld: %llu pages evicted\n", pid, (unsigned long long)pages);
        return 0;
}


/* limit PID SIZE: keep a program's resident managed memory under SIZE */
/* limit --unit UNIT SIZE, --group NAME SIZE: every process of the group,
 * now and later, together (admin) */
static int cmd_limit_group(const Opts *o, const char *name, uint64_t bytes) {
        ZMsgGroup q = { .limit = bytes };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        char size[32];

        snprintf(q.name, sizeof(q.name), "%s", name);
        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, ZMSG_GROUP_LIMIT, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r == -ENOSPC) {
                fprintf(stderr, "zswapctl: zswapd keeps limits for 64 groups at most: remove one (limit --group "
                                "NAME none)\n");
                return 1;
        }
        if (r < 0)
                return refused(r, 0, true, "limit --group", NULL);
        long long now = (long long)((ZMsgReply *)buf)->value;
        conf_format_size(bytes, size, sizeof(size));
        if (o->json)
                printf("{\"group\": \"%s\", \"limit\": %llu, \"processes\": %lld}\n", q.name,
                       (unsigned long long)bytes, now);
        else if (bytes)
                printf("group %s: limit %s for its processes together (%lld now)\n", q.name, size, now);
        else
                printf("group %s: no limit of the operator's (%lld processes now)\n", q.name, now);
        return 0;
}

int cmd_limit(const Opts *o, int argc, char **argv) {
        ZMsgLimit q = { 0 };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        char size[32], group[ZSWAP_GROUP_NAME_MAX];
        bool by_group = o->unit || o->group;

        if (argc != (by_group ? 1 : 2) || (o->unit && o->group)) {
                fprintf(stderr, "zswapctl: usage: zswapctl limit PID SIZE, limit --unit UNIT SIZE or "
                                "limit --group NAME SIZE\n");
                return 2;
        }
        if (o->unit && !unit_group_name(o->unit, group, sizeof(group))) {
                fprintf(stderr, "zswapctl: '%s' is not a service or scope unit name\n", o->unit);
                return 2;
        }
        if (o->group && !zgroup_name_valid(o->group, strlen(o->group) + 1)) {
                fprintf(stderr, "zswapctl: '%s' is not a group name (1-63 of A-Z a-z 0-9 . _ : @ -)\n", o->group);
                return 2;
        }
        if (o->group)
                snprintf(group, sizeof(group), "%s", o->group);
        if (!by_group && (q.pid = parse_pid(argv[0])) == 0)
                return 2;
        const char *arg = argv[by_group ? 0 : 1];
        if (conf_parse_size(arg, conf_ram_bytes(), &q.bytes) < 0) {
                fprintf(stderr, "zswapctl: '%s' is not a size: use bytes or K, M, G, T (64M, 1.5G), a percentage "
                        "of RAM (10%%), or none to remove the limit\n", arg);
                return 2;
        }
        if (by_group)
                return cmd_limit_group(o, group, q.bytes);
        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r < 0)
                return refused(r, q.pid, true, "limit", NULL);
        conf_format_size(q.bytes, size, sizeof(size));
        if (o->json)
                printf("{\"pid\": %d, \"limit\": %llu}\n", (int)q.pid, (unsigned long long)q.bytes);
        else if (q.bytes)
                printf("process %d: limit %s\n", (int)q.pid, size);
        else
                printf("process %d: no limit\n", (int)q.pid);
        return 0;
}
