/*
 * main.c: zswapd's command line. Everything else lives in manager.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "log.h"
#include "manager.h"
#include "trace.h"
#include "util.h"

static void help(void) {
        printf("Usage: zswapd [OPTIONS]\n\n"
               "Compress the cold anonymous memory of client processes into a pool.\n\n"
               "  -s, --socket PATH       listen on PATH (default %s)\n"
               "  -c, --compressor NAME   lz4 (default) or zstd\n"
               "  -l, --level N           compression level (zstd; lz4 acceleration)\n"
               "  -w, --workers N         compression worker threads (default: CPUs)\n"
               "  -t, --fault-threads N   fault-serving threads (default: CPUs)\n"
               "  -p, --pool-max SIZE     largest pool, e.g. 4G (default: unlimited)\n"
               "  -S, --fault-spin-us N   after a fault, poll N us before sleeping (default 50, 0: off)\n"
               "  -F, --fault-shared      every fault thread watches every client, pinned one per CPU,\n"
               "                          so a fault is served on the CPU that took it (default)\n"
               "  -H, --fault-home        each client is served by one fault thread only, unpinned\n"
               "  -P, --no-fault-pin      do not pin the fault threads\n"
               "  -R, --fault-rt-prio N   fault threads SCHED_FIFO at priority N (0: time-shared)\n"
               "  -b, --batch N           pages per eviction batch, 1..512 (default 512)\n"
               "  -n, --worker-nice N     nice value of the compression workers (default 10)\n"
               "  -I, --worker-idle       run the compression workers SCHED_IDLE instead\n"
               "  -u, --allow-users       admit clients that are not root\n"
               "  -C, --config FILE       read the policies ([reclaim], [pool]) from FILE; reread on SIGHUP\n"
               "  -o, --set KEY=VALUE     set one policy key (zswapd.conf(5)); wins over the file\n"
               "  -f, --foreground        stay in the foreground (always; for compatibility)\n"
               "  -v, --verbose           log debug messages\n"
               "  -h, --help              show this help\n\n"
               "See zswapd(8).\n",
               ZSWAP_DEFAULT_SOCKET);
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *ret) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (!*s || *end || v < lo || v > hi)
                return -EINVAL;
        *ret = (unsigned)v;
        return 0;
}

static int parse_args(int argc, char **argv, ManagerConfig *cfg) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },      { "compressor", required_argument, NULL, 'c' },
                { "level", required_argument, NULL, 'l' },       { "workers", required_argument, NULL, 'w' },
                { "fault-threads", required_argument, NULL, 't' }, { "pool-max", required_argument, NULL, 'p' },
                { "allow-users", no_argument, NULL, 'u' },
                { "batch", required_argument, NULL, 'b' },       { "worker-nice", required_argument, NULL, 'n' },
                { "worker-idle", no_argument, NULL, 'I' },      { "no-fault-pin", no_argument, NULL, 'P' },
                { "fault-shared", no_argument, NULL, 'F' },     { "fault-home", no_argument, NULL, 'H' },
                { "fault-rt-prio", required_argument, NULL, 'R' },
                { "fault-spin-us", required_argument, NULL, 'S' },       { "foreground", no_argument, NULL, 'f' },
                { "verbose", no_argument, NULL, 'v' },           { "help", no_argument, NULL, 'h' },
                { "config", required_argument, NULL, 'C' },      { "set", required_argument, NULL, 'o' },
                {}
        };
        unsigned level;
        int c;

        while ((c = getopt_long(argc, argv, "s:c:l:w:t:p:S:b:n:IPFHR:ufvhC:o:", opts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        cfg->socket_path = optarg;
                        break;
                case 'c':
                        if (codec_from_string(optarg, &cfg->codec) < 0) {
                                fprintf(stderr, "zswapd: unknown compressor '%s' (lz4, zstd)\n", optarg);
                                return -EINVAL;
                        }
                        break;
                case 'l':
                        if (parse_uint(optarg, 1, 22, &level) < 0) {
                                fprintf(stderr, "zswapd: --level takes 1..22\n");
                                return -EINVAL;
                        }
                        cfg->level = (int)level;
                        break;
                case 'w':
                case 't':
                        if (parse_uint(optarg, 1, 64, c == 'w' ? &cfg->workers : &cfg->fault_threads) < 0) {
                                fprintf(stderr, "zswapd: --%s takes 1..64\n", c == 'w' ? "workers" : "fault-threads");
                                return -EINVAL;
                        }
                        break;
                case 'p':
                        if (parse_size(optarg, &cfg->pool_max) < 0) {
                                fprintf(stderr, "zswapd: bad size '%s'\n", optarg);
                                return -EINVAL;
                        }
                        break;
                case 'u':
                        cfg->allow_users = true;
                        break;
                case 'b':
                        if (parse_uint(optarg, 1, ZSWAP_BATCH_MAX, &cfg->batch_pages) < 0) {
                                fprintf(stderr, "zswapd: --batch takes 1..%d pages\n", ZSWAP_BATCH_MAX);
                                return -EINVAL;
                        }
                        break;
                case 'n': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (!*optarg || *end || v < -20 || v > 19) {
                                fprintf(stderr, "zswapd: --worker-nice takes -20..19\n");
                                return -EINVAL;
                        }
                        cfg->worker_nice = (int)v;
                        break;
                }
                case 'I':
                        cfg->worker_sched_idle = true;
                        break;
                case 'P':
                        cfg->fault_pin = false;
                        break;
                case 'F':
                        cfg->fault_shared = true;
                        break;
                case 'H':
                        cfg->fault_shared = false;
                        break;
                case 'R':
                        if (parse_uint(optarg, 0, 99, &cfg->fault_rt_prio) < 0) {
                                fprintf(stderr, "zswapd: --fault-rt-prio takes 0..99\n");
                                return -EINVAL;
                        }
                        break;
                case 'S':
                        if (parse_uint(optarg, 0, 10000, &cfg->fault_spin_us) < 0) {
                                fprintf(stderr, "zswapd: --fault-spin-us takes 0..10000\n");
                                return -EINVAL;
                        }
                        break;
                case 'f':
                        break;
                case 'C':
                        cfg->config_path = optarg;
                        break;
                case 'o': {
                        char **n = realloc(cfg->sets, (cfg->nsets + 1) * sizeof(char *));
                        if (!n)
                                return -ENOMEM;
                        cfg->sets = n;
                        cfg->sets[cfg->nsets++] = optarg;
                        break;
                }
                case 'v':
                        log_set_level(LOG_LEVEL_DEBUG);
                        break;
                case 'h':
                        help();
                        exit(EXIT_SUCCESS);
                default:
                        return -EINVAL;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "zswapd: unexpected argument '%s'\n", argv[optind]);
                return -EINVAL;
        }
        return 0;
}

int main(int argc, char **argv) {
        trace_init();
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        ManagerConfig cfg = {
                .socket_path = getenv("ZSWAP_SOCKET") ? getenv("ZSWAP_SOCKET") : ZSWAP_DEFAULT_SOCKET,
                .codec = CODEC_LZ4,
                .workers = ncpu > 0 ? (unsigned)ncpu : 1,
                .batch_pages = ZSWAP_BATCH_MAX,
                .worker_nice = 10,
                .fault_threads = ncpu > 0 ? (unsigned)ncpu : 1,
                .fault_spin_us = 50,
                .fault_pin = true,
                .fault_shared = true,
                .max_compressed = ZSWAP_PAGE_SIZE * 3 / 4, /* as zswap: worse than 3/4 page stays resident */
                .max_regions = 4096,
                .max_registered = UINT64_MAX,
                .max_clients = 1024,
                .max_conns_per_user = 64,
                .listen_fd = -1,
        };
        Manager *m = NULL;
        int r;

        tunables_default(&cfg.tun);
        if (parse_args(argc, argv, &cfg) < 0)
                return 2;
        cfg.tun.pool_max = cfg.pool_max; /* --pool-max bounds the pool as pool_max does */
        {
                char err[512];
                Tunables t;
                if (manager_build_tunables(&cfg, &t, err, sizeof(err)) < 0) {
                        fprintf(stderr, "zswapd: %s\n", err);
                        return 2;
                }
        }
        /* every client costs a connection, a uffd, a pidfd and a pagemap fd */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        /* TODO(issue 6): lock the daemon's own memory; mlockall() would make
         * the pool's MADV_DONTNEED fail, so the pool must be exempted first */
        r = manager_new(&cfg, &m);
        if (r < 0) {
                log_error("cannot start: %s", strerror(-r));
                return 1;
        }
        r = manager_run(m);
        manager_free(m);
        free(cfg.sets);
        return r < 0 ? 1 : 0;
}
