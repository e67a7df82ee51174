/*
 * zswapctl.c: look at and steer a running zswapd.
 *
 * Speaks the control role of the protocol over its own connection, with
 * synchronous request/reply; it never registers memory. Tunables travel as
 * text and the daemon parses them (daemon/tunables.c), so the tool knows
 * only their names (common/tunable-keys.h); what it parses itself (pids,
 * `limit`'s size) it parses with the daemon's grammar (common/conf.h), to
 * refuse nonsense before connecting. Usage errors exit 2, refusals 1.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf.h"
#include "macro.h"
#include "protocol.h"
#include "tunable-keys.h"
#include "util.h"

static int ctl_request(int fd, void *msg, size_t len, void *reply, size_t cap) {
        ZMsgHeader *h = msg;
        ssize_t n;
        int r = zmsg_send(fd, msg, len, NULL, 0);
        if (r < 0)
                return r;
        n = zmsg_recv(fd, reply, cap, NULL, NULL, NULL);
        if (n <= 0)
                return n == 0 ? -ECONNRESET : (int)n;
        if (zmsg_validate(reply, (size_t)n) < 0 || ((ZMsgHeader *)reply)->id != h->id)
                return -EPROTO;
        /* TUNABLE_REPLY keeps its status after the pid; any other refusal
         * (e.g. an older daemon's -EPROTO) is a plain REPLY */
        if (((ZMsgHeader *)reply)->type == ZMSG_TUNABLE_REPLY)
                return ((ZMsgTunable *)reply)->status;
        return ((ZMsgReply *)reply)->status;
}

static void human(uint64_t b, char *buf, size_t len) {
        const char *u[] = { "B", "K", "M", "G", "T" };
        double v = (double)b;
        int i = 0;
        while (v >= 1024 && i < 4) {
                v /= 1024;
                i++;
        }
        snprintf(buf, len, i ? "%.1f%s" : "%.0f%s", v, u[i]);
}

static void print_stats(const struct zswap_stats *s, bool json, bool bytes) {
        double ratio = s->pool_bytes ? (double)s->original_bytes / (double)s->pool_bytes : 0;
        const struct {
                const char *name;
                uint64_t v;
                bool size;
        } rows[] = {
                { "pool_bytes", s->pool_bytes, true },
                { "compressed_bytes", s->compressed_bytes, true },
                { "original_bytes", s->original_bytes, true },
                { "stored_pages", s->stored_pages, false },
                { "same_filled_pages", s->same_pages, false },
                { "incompressible_pages", s->incompressible_pages, false },
                { "staged_pages", s->staged_pages, false },
                { "evictions", s->evictions, false },
                { "faults", s->faults, false },
                { "faults_zero_fill", s->faults_zero, false },
                { "prefetches", s->prefetches, false },
                { "clients", s->clients, false },
                { "registered_bytes", s->registered_bytes, true },
                { "resident_bytes", s->resident_bytes, true },
                { "refaults", s->refaults, false },
                { "reclaim_evictions", s->reclaim_evictions, false },
                { "clean_pages", s->clean_pages, false },
                { "clean_bytes", s->clean_bytes, true },
                { "clean_reevictions", s->clean_reevictions, false },
                { "thrash_backoffs", s->thrash_backoffs, false },
                { "pool_full_events", s->pool_full_events, false },
                /* what packing costs: chunk memory not holding object bytes */
                { "pool_overhead_bytes", s->pool_bytes > s->compressed_bytes ? s->pool_bytes - s->compressed_bytes : 0,
                  true },
        };

        if (json) {
                printf("{");
                for (size_t i = 0; i < ELEMENTSOF(rows); i++)
                        printf("\"%s\": %llu, ", rows[i].name, (unsigned long long)rows[i].v);
                printf("\"ratio\": %.3f}\n", ratio);
                return;
        }
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                char buf[32];
                if (rows[i].size && !bytes)
                        human(rows[i].v, buf, sizeof(buf));
                else
                        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)rows[i].v);
                printf("%-22s %s\n", rows[i].name, buf);
        }
        printf("%-22s %.2f\n", "ratio", ratio);
}

/* A control connection that said HELLO, or -1 after saying why not. */
static int ctl_connect(const char *path) {
        int fd = unix_connect(path);
        ZMsgHello h = { .role = ZROLE_CONTROL };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        if (fd == -ENOENT || fd == -ECONNREFUSED) {
                fprintf(stderr, "zswapd is not running (no socket at %s): start it with systemctl start zswapd\n",
                        path);
                return -1;
        }
        if (fd == -EACCES) {
                fprintf(stderr, "zswapctl: permission denied on %s: run as root\n", path);
                return -1;
        }
        if (fd < 0) {
                fprintf(stderr, "zswapctl: cannot connect to %s: %s\n", path, strerror(-fd));
                return -1;
        }
        zmsg_init(&h.hdr, ZMSG_HELLO, 1, sizeof(h));
        int r = ctl_request(fd, &h, sizeof(h), buf, sizeof(buf));
        if (r < 0) {
                fprintf(stderr, "zswapctl: %s refused the connection: %s\n", path, strerror(-r));
                close(fd);
                return -1;
        }
        return fd;
}

static int cmd_status(const char *path, bool json, bool bytes) {
        _cleanup_close_ int fd = ctl_connect(path);
        ZMsgStatsReq q = { .scope = ZSWAP_STATS_GLOBAL };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, ZMSG_STATS, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r < 0) {
                fprintf(stderr, "zswapctl: %s\n", strerror(-r));
                return 1;
        }
        print_stats(&((ZMsgStatsReply *)buf)->stats, json, bytes);
        return 0;
}

/* A process id, or 0 after saying why not. */
static int32_t parse_pid(const char *s) {
        uint64_t pid;

        if (conf_parse_uint(s, &pid) < 0 || pid == 0 || pid > INT32_MAX) {
                fprintf(stderr, "zswapctl: '%s' is not a process id\n", s);
                return 0;
        }
        return (int32_t)pid;
}

/* pageout PID [ADDR LEN]: evict a running program's managed memory */
static int cmd_pageout(const char *path, int argc, char **argv, bool json) {
        ZMsgPageoutPid q = { 0 };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        char *end;
        long pid;

        if (argc != 1 && argc != 3) {
                fprintf(stderr, "zswapctl: usage: zswapctl pageout PID [ADDR LEN]\n");
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
        zmsg_init(&q.hdr, ZMSG_PAGEOUT_PID, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r == -ESRCH) {
                fprintf(stderr, "zswapctl: process %ld has no memory managed by zswapd\n", pid);
                return 1;
        }
        if (r == -EPERM) {
                fprintf(stderr, "zswapctl: permission denied: process %ld is another user's (run as root)\n", pid);
                return 1;
        }
        if (r < 0) {
                fprintf(stderr, "zswapctl: pageout of process %ld: %s\n", pid, strerror(-r));
                return 1;
        }
        uint64_t pages = (uint64_t)((ZMsgReply *)buf)->value;
        if (json)
                printf("{\"pid\": %ld, \"evicted_pages\": %llu}\n", pid, (unsigned long long)pages);
        else
                printf("process %ld: %llu pages evicted\n", pid, (unsigned long long)pages);
        return 0;
}

/* Say why the daemon refused a request about process pid (0: the daemon). */
static int refused(int r, int32_t pid, bool change, const char *what, const char *msg) {
        if (r == -ESRCH)
                fprintf(stderr, "zswapctl: no zswapd client with pid %d\n", (int)pid);
        else if (r == -EPERM && pid)
                fprintf(stderr, "zswapctl: permission denied: process %d is another user's (run as root)\n", (int)pid);
        else if (r == -EPERM)
                fprintf(stderr, "zswapctl: permission denied: %s needs root\n",
                        change ? "changing daemon settings" : "reading daemon settings");
        else if (r == -EPROTO)
                fprintf(stderr, "zswapctl: the running zswapd does not understand %s: restart it with this version\n",
                        what);
        else if (msg && *msg)
                fprintf(stderr, "zswapctl: %s\n", msg);
        else
                fprintf(stderr, "zswapctl: %s: %s\n", what, strerror(-r));
        return 1;
}

/* limit PID SIZE: keep a program's resident managed memory under SIZE */
static int cmd_limit(const char *path, int argc, char **argv, bool json) {
        ZMsgLimit q = { 0 };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        char size[32];

        if (argc != 2) {
                fprintf(stderr, "zswapctl: usage: zswapctl limit PID SIZE\n");
                return 2;
        }
        q.pid = parse_pid(argv[0]);
        if (q.pid == 0)
                return 2;
        if (conf_parse_size(argv[1], conf_ram_bytes(), &q.bytes) < 0) {
                fprintf(stderr, "zswapctl: '%s' is not a size: use bytes or K, M, G, T (64M, 1.5G), a percentage "
                        "of RAM (10%%), or none to remove the limit\n", argv[1]);
                return 2;
        }
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r < 0)
                return refused(r, q.pid, true, "limit", NULL);
        conf_format_size(q.bytes, size, sizeof(size));
        if (json)
                printf("{\"pid\": %d, \"limit\": %llu}\n", (int)q.pid, (unsigned long long)q.bytes);
        else if (q.bytes)
                printf("process %d: limit %s\n", (int)q.pid, size);
        else
                printf("process %d: no limit\n", (int)q.pid);
        return 0;
}

/* One TUNABLE_SET (value != NULL) or TUNABLE_GET; the reply's value (the
 * value in force, or why not) goes to out. Returns the daemon's status. */
static int tunable_request(int fd, int32_t pid, const char *key, const char *value, char *out, size_t len) {
        static uint32_t id = 2;
        ZMsgTunable q = { .pid = pid };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX] = { 0 };
        const ZMsgTunable *rep = (const ZMsgTunable *)buf;
        size_t n = 0;

        snprintf(q.key, sizeof(q.key), "%s", key);
        snprintf(q.value, sizeof(q.value), "%s", value ? value : "");
        zmsg_init(&q.hdr, value ? ZMSG_TUNABLE_SET : ZMSG_TUNABLE_GET, id++, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r != -EPROTO && rep->hdr.type == ZMSG_TUNABLE_REPLY)
                n = MIN(strnlen(rep->value, sizeof(rep->value)), len - 1);
        memcpy(out, rep->value, n);
        out[n] = 0;
        return r;
}

static void json_string(const char *s) {
        putchar('"');
        for (; *s; s++)
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if ((unsigned char)*s < 0x20)
                        printf("\\u%04x", *s);
                else
                        putchar(*s);
        putchar('"');
}

/* "key = value" lines, as the configuration file has them, or one JSON
 * object key -> value string. */
static void print_pairs(const char *const *keys, char (*values)[ZSWAP_TUNABLE_VALUE_MAX], size_t n, bool json) {
        int width = 0;

        for (size_t i = 0; i < n; i++)
                width = MAX(width, (int)strlen(keys[i]));
        for (size_t i = 0; i < n; i++) {
                if (!json) {
                        printf("%-*s = %s\n", width, keys[i], values[i]);
                        continue;
                }
                printf(i ? ", " : "{");
                json_string(keys[i]);
                printf(": ");
                json_string(values[i]);
        }
        if (json)
                printf(n ? "}\n" : "{}\n");
}

static bool tunable_args_fit(const char *key, const char *value) {
        if (strlen(key) >= ZSWAP_TUNABLE_KEY_MAX) {
                fprintf(stderr, "zswapctl: unknown key '%s' (zswapctl get lists them)\n", key);
                return false;
        }
        if (value && strlen(value) >= ZSWAP_TUNABLE_VALUE_MAX) {
                fprintf(stderr, "zswapctl: %s: value too long (%d bytes at most)\n", key, ZSWAP_TUNABLE_VALUE_MAX - 1);
                return false;
        }
        return true;
}

/* set [--pid PID] KEY VALUE: prints the value now in force */
static int cmd_set(const char *path, int32_t pid, int argc, char **argv, bool json) {
        char value[1][ZSWAP_TUNABLE_VALUE_MAX];

        if (argc != 2) {
                fprintf(stderr, "zswapctl: usage: zswapctl set [--pid PID] KEY VALUE\n");
                return 2;
        }
        if (!tunable_args_fit(argv[0], argv[1]))
                return 2;
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        int r = tunable_request(fd, pid, argv[0], argv[1], value[0], sizeof(value[0]));
        if (r < 0)
                return refused(r, pid, true, argv[0], value[0]);
        print_pairs((const char *const *)argv, value, 1, json);
        return 0;
}

/* get [--pid PID] [KEY]: every key (the daemon's, or a client's own) or one */
static int cmd_get(const char *path, int32_t pid, int argc, char **argv, bool json) {
        const char *const *keys = pid ? tunable_client_names : tunable_names;
        size_t n = _TUNABLE_KEY_MAX;
        char values[_TUNABLE_KEY_MAX][ZSWAP_TUNABLE_VALUE_MAX];

        if (argc > 1) {
                fprintf(stderr, "zswapctl: usage: zswapctl get [--pid PID] [KEY]\n");
                return 2;
        }
        if (argc == 1) {
                if (!tunable_args_fit(argv[0], NULL))
                        return 2;
                keys = (const char *const *)argv;
                n = 1;
        } else if (pid)
                for (n = 0; tunable_client_names[n] && n < _TUNABLE_KEY_MAX; n++)
                        ;
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        for (size_t i = 0; i < n; i++) {
                int r = tunable_request(fd, pid, keys[i], NULL, values[i], sizeof(values[i]));
                if (r < 0)
                        return refused(r, pid, false, keys[i], values[i]);
        }
        print_pairs(keys, values, n, json);
        return 0;
}

static void help(void) {
        printf("Usage: zswapctl [OPTIONS] COMMAND\n\n"
               "Commands:\n"
               "  status              what the daemon holds and what it saves\n"
               "  pageout PID [ADDR LEN]\n"
               "                      evict a running program's managed memory (all of it,\n"
               "                      or the part in [ADDR, ADDR+LEN)); prints the pages evicted\n"
               "  limit PID SIZE      keep a program's resident managed memory under SIZE\n"
               "                      (64M, 1.5G, 10%% of RAM; 0 or none: no limit)\n"
               "  set KEY VALUE       change a daemon-wide tunable (root); prints the value in force\n"
               "  set --pid PID KEY VALUE\n"
               "                      a program's own limit, idle_age or reclaim (yes/no)\n"
               "  get [--pid PID] [KEY]\n"
               "                      tunables in force, all or one, as key = value lines\n\n"
               "Options:\n"
               "  -s, --socket PATH   daemon socket (default %s)\n"
               "  -p, --pid PID       set/get: a program's own settings, not the daemon's\n"
               "  -J, --json          machine-readable output\n"
               "  -b, --bytes         sizes in bytes\n"
               "  -h, --help          this help\n\n"
               "See zswapctl(8).\n",
               ZSWAP_DEFAULT_SOCKET);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'J' },
                { "bytes", no_argument, NULL, 'b' },
                { "pid", required_argument, NULL, 'p' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *path = getenv("ZSWAP_SOCKET") ? getenv("ZSWAP_SOCKET") : ZSWAP_DEFAULT_SOCKET;
        bool json = false, bytes = false;
        int32_t pid = 0;
        int c;

        while ((c = getopt_long(argc, argv, "s:Jbp:h", opts, NULL)) >= 0) {
                switch (c) {
                case 's': path = optarg; break;
                case 'J': json = true; break;
                case 'b': bytes = true; break;
                case 'p':
                        if ((pid = parse_pid(optarg)) == 0)
                                return 2;
                        break;
                case 'h': help(); return 0;
                default: return 2;
                }
        }
        const char *cmd = optind < argc ? argv[optind] : "status";
        int n = argc - optind - 1;
        char **args = argv + optind + 1;
        if (pid && strcmp(cmd, "set") != 0 && strcmp(cmd, "get") != 0) {
                fprintf(stderr, "zswapctl: --pid is for set and get (limit and pageout take PID as an argument)\n");
                return 2;
        }
        if (strcmp(cmd, "status") == 0)
                return cmd_status(path, json, bytes);
        if (strcmp(cmd, "pageout") == 0)
                return cmd_pageout(path, n, args, json);
        if (strcmp(cmd, "limit") == 0)
                return cmd_limit(path, n, args, json);
        if (strcmp(cmd, "set") == 0)
                return cmd_set(path, pid, n, args, json);
        if (strcmp(cmd, "get") == 0)
                return cmd_get(path, pid, n, args, json);
        fprintf(stderr, "zswapctl: unknown command '%s' (see zswapctl --help)\n", argv[optind]);
        return 2;
}
