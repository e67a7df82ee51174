/*
 * zswapctl.c: look at a running zswapd.
 *
 * Speaks the control role of the protocol over its own connection, with
 * synchronous request/reply; it never registers memory.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macro.h"
#include "protocol.h"
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

        if (fd < 0) {
                fprintf(stderr, "zswapd is not running at %s (%s): start it with systemctl start zswapd\n", path,
                        strerror(-fd));
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
        errno = 0;
        pid = strtol(argv[0], &end, 10);
        if (errno || *end || pid <= 0 || pid > INT32_MAX) {
                fprintf(stderr, "zswapctl: '%s' is not a process id\n", argv[0]);
                return 2;
        }
        q.pid = (int32_t)pid;
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

static void help(void) {
        printf("Usage: zswapctl [OPTIONS] COMMAND\n\n"
               "Commands:\n"
               "  status              what the daemon holds and what it saves\n"
               "  pageout PID [ADDR LEN]\n"
               "                      evict a running program's managed memory (all of it,\n"
               "                      or the part in [ADDR, ADDR+LEN)); prints the pages evicted\n\n"
               "Options:\n"
               "  -s, --socket PATH   daemon socket (default %s)\n"
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
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *path = getenv("ZSWAP_SOCKET") ? getenv("ZSWAP_SOCKET") : ZSWAP_DEFAULT_SOCKET;
        bool json = false, bytes = false;
        int c;

        while ((c = getopt_long(argc, argv, "s:Jbh", opts, NULL)) >= 0) {
                switch (c) {
                case 's': path = optarg; break;
                case 'J': json = true; break;
                case 'b': bytes = true; break;
                case 'h': help(); return 0;
                default: return 2;
                }
        }
        if (optind >= argc || strcmp(argv[optind], "status") == 0)
                return cmd_status(path, json, bytes);
        if (strcmp(argv[optind], "pageout") == 0)
                return cmd_pageout(path, argc - optind - 1, argv + optind + 1, json);
        fprintf(stderr, "zswapctl: unknown command '%s' (see zswapctl --help)\n", argv[optind]);
        return 2;
}
