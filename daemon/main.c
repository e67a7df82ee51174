/*
 * main.c: zswapd's command line. Everything else lives in manager.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "inject.h"
#include "log.h"
#include "manager.h"
#include "memread.h"
#include "sd-daemon.h"
#include "trace.h"
#include "util.h"

/* A setting's default as config_settings[] has it, for --help. */
static const char *def(const char *section, const char *key) {
        const ConfigSetting *s = config_setting(section, key);
        return s && s->def ? s->def : "";
}

static void help(void) {
        printf("Usage: zswapd [OPTIONS]\n\n"
               "Compress the cold anonymous memory of client processes into a pool.\n\n"
               "  -s, --socket PATH       listen on PATH (default %s)\n"
               "  -c, --compressor NAME   %s (default) or zstd\n"
               "  -l, --level N           compression level (zstd; lz4 acceleration)\n"
               "  -w, --workers N         compression worker threads (default: CPUs)\n"
               "  -t, --fault-threads N   fault-serving threads (default: CPUs)\n"
               "  -p, --pool-max SIZE     largest pool, e.g. 4G (default: unlimited)\n"
               "  -S, --fault-spin-us N   after a fault, poll N us before sleeping (default %s: 0 or 50,\n"
               "                          whichever is faster here, measured at start; 0: off)\n"
               "      --fault-wake WHICH  a fault wakes all fault threads or one (default %s: measured)\n"
               "  -F, --fault-shared      every fault thread watches every client, pinned one per CPU,\n"
               "                          so a fault is served on the CPU that took it (default)\n"
               "  -H, --fault-home        each client is served by one fault thread only, unpinned\n"
               "  -P, --no-fault-pin      do not pin the fault threads\n"
               "  -R, --fault-rt-prio N   fault threads SCHED_FIFO at priority N (0: time-shared)\n"
               "  -b, --batch N           pages per eviction batch, 1..%d (default %s)\n"
               "  -n, --worker-nice N     nice value of the compression workers (default %s)\n"
               "  -I, --worker-idle       run the compression workers SCHED_IDLE instead\n"
               "  -u, --allow-users       admit clients that are not root\n"
               "  -C, --config FILE       read zswapd.conf(5) from FILE (default %s if it exists,\n"
               "                          or $ZSWAPD_CONFIG); reread on SIGHUP\n"
               "      --no-config         read no configuration file\n"
               "      --check-config      check the configuration file and the options, then exit\n"
               "                          (0: good; 2: the first error, as file:line: why)\n"
               "      --no-mlock          do not lock the daemon's memory\n"
               "      --no-sandbox        keep every capability, install no system call filter\n"
               "      --read-bound-ms N   a read of a client's memory that waits N ms ends that client\n"
               "                          (default %s)\n"
               "  -o, --set KEY=VALUE     set one policy key (zswapd.conf(5)); wins over the file\n"
               "  -f, --foreground        stay in the foreground (always; for compatibility)\n"
               "  -v, --verbose           log debug messages\n"
               "  -h, --help              show this help\n"
               "      --version           show the version\n\n"
               "Command-line options win over the file's [daemon] section.\n"
               "See zswapd(8) and zswapd.conf(5).\n",
               def("daemon", "socket"), def("daemon", "compressor"), def(NULL, "fault-spin-us"), def(NULL, "fault-wake"), ZSWAP_BATCH_MAX,
               def("daemon", "batch"), def("daemon", "worker_nice"), CONFIG_DEFAULT_PATH, def(NULL, "read-bound-ms"));
}

static bool no_config;    /* --no-config: not even the default file */
static bool check_config; /* --check-config: read the configuration, say if it is good, exit */

enum { OPT_NO_MLOCK = 0x100, OPT_NO_SANDBOX, OPT_CHECK_CONFIG, OPT_READ_BOUND, OPT_FAULT_WAKE }; /* long options only */

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
                { "no-config", no_argument, NULL, 'N' },         { "version", no_argument, NULL, 'V' },
                { "no-mlock", no_argument, NULL, OPT_NO_MLOCK }, { "no-sandbox", no_argument, NULL, OPT_NO_SANDBOX },
                { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
                { "read-bound-ms", required_argument, NULL, OPT_READ_BOUND },
                { "fault-wake", required_argument, NULL, OPT_FAULT_WAKE },
                {}
        };
        unsigned level;
        int c;

        while ((c = getopt_long(argc, argv, "s:c:l:w:t:p:S:b:n:IPFHR:ufvhC:o:NV", opts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        cfg->socket_path = optarg;
                        cfg->cli_set |= 1u << DKEY_SOCKET;
                        break;
                case 'c':
                        if (codec_from_string(optarg, &cfg->codec) < 0) {
                                fprintf(stderr, "zswapd: unknown compressor '%s' (lz4, zstd)\n", optarg);
                                return -EINVAL;
                        }
                        cfg->cli_set |= 1u << DKEY_COMPRESSOR;
                        break;
                case 'l':
                        if (parse_uint(optarg, 1, 22, &level) < 0) {
                                fprintf(stderr, "zswapd: --level takes 1..22\n");
                                return -EINVAL;
                        }
                        cfg->level = (int)level;
                        cfg->cli_set |= 1u << DKEY_LEVEL;
                        break;
                case 'w':
                case 't':
                        if (parse_uint(optarg, 1, 64, c == 'w' ? &cfg->workers : &cfg->fault_threads) < 0) {
                                fprintf(stderr, "zswapd: --%s takes 1..64\n", c == 'w' ? "workers" : "fault-threads");
                                return -EINVAL;
                        }
                        cfg->cli_set |= 1u << (c == 'w' ? DKEY_WORKERS : DKEY_FAULT_THREADS);
                        break;
                case 'p': {
                        /* the allocator's hard cap, and the same as --set
                         * pool_max=SIZE (the policy bound, which a reload
                         * or zswapctl set may lower but not lift past it) */
                        static char set[64];
                        if (strlen(optarg) > 40 || parse_size(optarg, &cfg->pool_max) < 0) {
                                fprintf(stderr, "zswapd: bad size '%s'\n", optarg);
                                return -EINVAL;
                        }
                        snprintf(set, sizeof(set), "pool_max=%s", optarg);
                        optarg = set;
                        goto add_set;
                }
                case 'u':
                        cfg->allow_all = true;
                        break;
                case 'b':
                        if (parse_uint(optarg, 1, ZSWAP_BATCH_MAX, &cfg->batch_pages) < 0) {
                                fprintf(stderr, "zswapd: --batch takes 1..%d pages\n", ZSWAP_BATCH_MAX);
                                return -EINVAL;
                        }
                        cfg->cli_set |= 1u << DKEY_BATCH;
                        break;
                case 'n': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (!*optarg || *end || v < -20 || v > 19) {
                                fprintf(stderr, "zswapd: --worker-nice takes -20..19\n");
                                return -EINVAL;
                        }
                        cfg->worker_nice = (int)v;
                        cfg->cli_set |= 1u << DKEY_WORKER_NICE;
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
                        if (fault_spin_from_string(optarg, &cfg->fault_spin_us) < 0) {
                                fprintf(stderr, "zswapd: --fault-spin-us takes auto or 0..10000\n");
                                return -EINVAL;
                        }
                        break;
                case 'f':
                        break;
                case 'C':
                        cfg->config_path = optarg;
                        break;
                case 'N':
                        cfg->config_path = NULL;
                        no_config = true;
                        break;
                case 'V':
                        printf("zswapd %s\n", ZSWAP_VERSION);
                        exit(EXIT_SUCCESS);
                case 'o':
                add_set: {
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
                case OPT_NO_MLOCK:
                        cfg->lock_memory = false;
                        cfg->cli_set |= 1u << DKEY_LOCK_MEMORY;
                        break;
                case OPT_CHECK_CONFIG:
                        check_config = true;
                        break;
                case OPT_FAULT_WAKE:
                        if (fault_wake_from_string(optarg, &cfg->fault_wake) < 0) {
                                fprintf(stderr, "zswapd: --fault-wake takes auto, all or one\n");
                                return -EINVAL;
                        }
                        break;
                case OPT_READ_BOUND: {
                        unsigned ms;
                        if (parse_uint(optarg, 10, 3600000, &ms) < 0) {
                                fprintf(stderr, "zswapd: --read-bound-ms takes 10..3600000\n");
                                return -EINVAL;
                        }
                        memread_set_bound_ms(ms);
                        break;
                }
                case OPT_NO_SANDBOX:
                        cfg->sandbox = false;
                        cfg->cli_set |= 1u << DKEY_SANDBOX;
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

/*
 * Socket activation (zswapd.socket): the listening socket systemd passed as
 * fd 3, or -1 if none was. Anything but one listening AF_UNIX
 * SOCK_SEQPACKET socket is a configuration error (exit 2): serving the
 * wrong socket would fail every client in ways far from the cause.
 */
static int activation_socket(const char **path) {
        static struct sockaddr_un sa;
        socklen_t len = sizeof(sa);
        int domain = 0, type = 0, listening = 0;
        socklen_t ilen = sizeof(int);
        int n = sdd_listen_fds();

        if (n == 0)
                return -1;
        if (n < 0) {
                fprintf(stderr, "zswapd: bad LISTEN_PID/LISTEN_FDS from the service manager: %s\n", strerror(-n));
                return -EINVAL;
        }
        if (n > 1) {
                fprintf(stderr, "zswapd: LISTEN_FDS=%d: socket activation passes one socket (zswapd.socket)\n", n);
                return -EINVAL;
        }
        if (getsockopt(3, SOL_SOCKET, SO_DOMAIN, &domain, &ilen) < 0 ||
            getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &ilen) < 0 ||
            getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen) < 0 || domain != AF_UNIX ||
            type != SOCK_SEQPACKET || !listening) {
                fprintf(stderr, "zswapd: LISTEN_FDS: fd 3 is not a listening AF_UNIX SOCK_SEQPACKET socket "
                                "(zswapd.socket needs ListenSequentialPacket=)\n");
                return -EINVAL;
        }
        int r = fd_set_nonblock(3, true); /* the accept loop runs until EAGAIN */
        if (r < 0) {
                fprintf(stderr, "zswapd: LISTEN_FDS: cannot make fd 3 non-blocking: %s\n", strerror(-r));
                return r;
        }
        if (getsockname(3, (struct sockaddr *)&sa, &len) == 0 && sa.sun_path[0] == '/')
                *path = sa.sun_path; /* for the log; the socket is systemd's: never unlinked */
        return 3;
}

/* The file's [daemon] settings, where the command line did not give them
 * ($ZSWAP_SOCKET wins over the file's socket too). */
static void apply_daemon_conf(ManagerConfig *cfg, const DaemonConf *d, unsigned ncpu) {
        uint32_t keys = d->set & ~cfg->cli_set;

        if (getenv("ZSWAP_SOCKET"))
                keys &= ~(1u << DKEY_SOCKET);
        manager_config_apply(cfg, d, keys, ncpu);
}

/* Each armed fault injection site (common/inject.h), once at start and
 * with its counts at exit: tests read the exit line to know it fired. */
static void inject_log(const char *when) {
        char line[160];
        for (unsigned i = 0; i < _INJ_MAX; i++)
                if (inject_describe(i, line, sizeof(line)))
                        log_warn("fault injection %s: %s", when, line);
}

int main(int argc, char **argv) {
        trace_init();
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        Config defaults; /* config_settings[]: cfg.socket_path may point into it */
        ManagerConfig cfg;

        config_default(&defaults);
        manager_config_defaults(&cfg, &defaults.daemon, ncpu > 0 ? (unsigned)ncpu : 1);
        Manager *m = NULL;
        Config conf;
        char err[512];
        int r;

        if (parse_args(argc, argv, &cfg) < 0)
                return 2;
        if (!cfg.config_path && !no_config) {
                const char *env = getenv("ZSWAPD_CONFIG");
                if (env)
                        cfg.config_path = *env ? env : NULL; /* empty: none */
                else if (access(CONFIG_DEFAULT_PATH, F_OK) == 0)
                        cfg.config_path = CONFIG_DEFAULT_PATH;
        }
        if (manager_build_config(&cfg, &conf, err, sizeof(err)) < 0) {
                fprintf(stderr, "zswapd: %s\n", err);
                return 2;
        }
        apply_daemon_conf(&cfg, &conf.daemon, ncpu > 0 ? (unsigned)ncpu : 1);
        if (check_config) {
                printf("%s: good\n", cfg.config_path ? cfg.config_path : "no configuration file; options");
                config_free(&conf);
                return 0;
        }
        cfg.conf = &conf;
        /* every client costs a connection, a uffd, a pidfd and a pagemap fd */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        /* opens the notification socket before the sandbox forbids socket() */
        sdd_notify("STATUS=starting");
        cfg.listen_fd = activation_socket(&cfg.socket_path);
        if (cfg.listen_fd < -1)
                return 2;
        r = inject_setup(getenv("ZSWAPD_INJECT"), getenv("ZSWAPD_INJECT_SEED"), err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "zswapd: ZSWAPD_INJECT: %s\n", err);
                return 2;
        }
        inject_log("armed");
        r = manager_new(&cfg, &m);
        if (r < 0) {
                log_error("cannot start: %s", strerror(-r));
                return 1;
        }
        r = manager_run(m);
        bool handover = r >= 0 && m->handover;
        manager_free(m);
        inject_log("at exit");
        config_free(&conf);
        config_free(&defaults);
        free(cfg.sets);
        /* after a hand-over the service manager should start the next
         * daemon (RestartForceExitStatus= in zswapd.service) */
        return r < 0 ? 1 : handover ? ZSWAPD_EXIT_HANDOVER : 0;
}
