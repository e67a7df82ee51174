/*
 * zswapctl.c: look at and steer a running zswapd; this file parses the
 * command line and runs one command (zswapctl.h: where each lives).
 *
 * Speaks the control role of the protocol over its own connection, with
 * synchronous request/reply; it never registers memory. Tunables travel as
 * text and the daemon parses them (daemon/conf/tunables.c), so the tool knows
 * only their names (common/tunable-keys.h); what it parses itself (pids,
 * `limit`'s size) it parses with the daemon's grammar (common/conf.h), to
 * refuse nonsense before connecting.
 *
 * Every read command prints one of three forms from the same figures:
 * text for people (sizes in K/M/G unless --bytes, latencies in us/ms),
 * JSON (--json: raw numbers, sizes in bytes, times in ns, null where a
 * figure is not known yet) and, for `metrics`, the Prometheus text format.
 * `clients` is a table like zramctl's: -o picks the columns, --no-headings
 * drops the header. Exit status: 0 done, 1 refused or failed (the message
 * says what to do), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "protocol.h"
#include "zswapctl.h"

#ifndef ZSWAP_PRELOAD_PATH
#define ZSWAP_PRELOAD_PATH "/usr/local/lib/libzswap-preload.so"
#endif

#ifndef ZSWAP_VERSION
#define ZSWAP_VERSION "unknown"
#endif

static void help(void) {
        printf("Usage: zswapctl [OPTIONS] [COMMAND [ARGS]]\n\n"
               "Commands:\n"
               "  status              what the daemon holds and saves, fault latency, rates (default)\n"
               "  clients             one row per client process\n"
               "  groups              one row per group of processes sharing a limit (zswap-run\n"
               "                      --limit, a unit under enable --limit), their figures summed\n"
               "  metrics             every counter in the Prometheus text format\n"
               "  top                 a live view of the pool and the clients, refreshed like top\n"
               "                      (keys: q quit; e r p f n sort by evicted, resident, pool,\n"
               "                      fault rate, pid)\n"
               "  pageout PID [ADDR LEN]\n"
               "                      evict a running program's managed memory (all of it,\n"
               "                      or the part in [ADDR, ADDR+LEN)); prints the pages evicted\n"
               "  pagein PID [ADDR LEN]\n"
               "                      bring every page of it back and keep it there (for a\n"
               "                      debugger or a core dump); reclaim is off for it after\n"
               "  limit PID SIZE|none keep a program's resident managed memory under SIZE\n"
               "                      (64M, 1.5G, 10%% of RAM; 0 or none: no limit)\n"
               "  limit --unit UNIT SIZE|none\n"
               "                      the same for a systemd unit's processes together (admin;\n"
               "                      --group NAME for any group); none: their own limits again\n"
               "  set KEY VALUE       change a daemon-wide tunable (admin; KEY=VALUE too); prints the value in force\n"
               "  set --pid PID KEY VALUE\n"
               "                      a program's own limit, idle_age or reclaim (yes/no)\n"
               "  get [--pid PID] [KEY]\n"
               "                      tunables in force, all or one, as key = value lines\n"
               "  enable UNIT [--limit SIZE]\n"
               "                      put a systemd service under zswapd (a drop-in in\n"
               "                      /etc/systemd/system/UNIT.d/zswap.conf; applies at its next start)\n"
               "  disable UNIT        remove that drop-in\n\n"
               "Options:\n"
               "  -s, --socket PATH   daemon socket (default $ZSWAP_SOCKET or %s)\n"
               "  -p, --pid PID       set/get: a program's own settings, not the daemon's\n"
               "  -J, --json          machine-readable output (sizes in bytes, times in ns)\n"
               "  -b, --bytes         sizes in bytes, times in ns\n"
               "  -o, --output LIST   clients: columns to print, comma-separated; status: fields\n"
               "  -n, --no-headings   clients: no header line; status: values only\n"
               "      --limit SIZE    enable: the resident limit of the service's processes together\n"
               "      --root DIR      enable, disable: the system's files under DIR, not /\n"
               "      --preload PATH  enable: the shim to preload (default %s)\n"
               "      --textfile FILE metrics: into FILE, whole (for node_exporter's textfile collector)\n"
               "      --unit UNIT     limit: a systemd unit's processes (--group NAME: a group's)\n"
               "  -d, --delay SECONDS top: seconds between frames (default 2)\n"
               "      --iterations N  top: stop after N frames\n"
               "      --sort KEY      top: evicted (default), resident, pool, faults or pid\n"
               "  -h, --help          this help\n"
               "  -V, --version       the version\n\n"
               "Columns of clients (default " DEFAULT_COLUMNS "):\n"
               "  PID UID USER COMMAND   the process, its owner, its name\n"
               "  REGISTERED RESIDENT    memory handed to the daemon, of that what is resident\n"
               "  EVICTED POOL RATIO     what the daemon holds, the pool memory it takes, their ratio\n"
               "  FAULTS REFAULTS        faults served, of them pages brought back after eviction\n"
               "  LIMIT                  resident limit (- for none)\n"
               "  STAGED INCOMPRESSIBLE  pages awaiting compression, pages kept as incompressible\n"
               "  ID                     the daemon's id of the client (a process may have several)\n"
               "  TIER                   of what the daemon holds, what is on the second tier\n"
               "  GROUP                  the group it shares its limit with (- for none)\n"
               "  STRONG                 of what the daemon holds, what the strong tier (zstd) holds\n\n"
               "Admin commands (another user's process, daemon-wide settings) need root or\n"
               "group zswap. Exit status: 0 done, 1 refused or failed, 2 usage.\n\n"
               "See zswapctl(8).\n",
               ZSWAP_DEFAULT_SOCKET, ZSWAP_PRELOAD_PATH);
}

/* Options that only some commands take: a usage error elsewhere. */
static bool options_fit(const char *cmd, const Opts *o, const UnitOpts *u) {
        bool table = strcmp(cmd, "clients") == 0 || strcmp(cmd, "status") == 0;
        bool headed = table || strcmp(cmd, "groups") == 0;

        if (o->pid && strcmp(cmd, "set") != 0 && strcmp(cmd, "get") != 0) {
                fprintf(stderr, "zswapctl: --pid is for set and get (limit and pageout take PID as an argument)\n");
                return false;
        }
        if ((o->columns && !table) || (o->no_headings && !headed)) {
                fprintf(stderr, "zswapctl: -o is for clients and status, --no-headings for them and groups\n");
                return false;
        }
        if ((u->limit || u->preload) && strcmp(cmd, "enable") != 0) {
                fprintf(stderr, "zswapctl: --limit and --preload are for enable (limit takes PID SIZE)\n");
                return false;
        }
        if ((o->unit || o->group) && strcmp(cmd, "limit") != 0) {
                fprintf(stderr, "zswapctl: --unit and --group are for limit\n");
                return false;
        }
        if (o->textfile && strcmp(cmd, "metrics") != 0) {
                fprintf(stderr, "zswapctl: --textfile is for metrics\n");
                return false;
        }
        if (u->root && strcmp(cmd, "enable") != 0 && strcmp(cmd, "disable") != 0) {
                fprintf(stderr, "zswapctl: --root is for enable and disable\n");
                return false;
        }
        if ((o->delay_given || o->iterations || o->sort) && strcmp(cmd, "top") != 0) {
                fprintf(stderr, "zswapctl: --delay, --iterations and --sort are for top\n");
                return false;
        }
        if (o->json && (strcmp(cmd, "metrics") == 0 || strcmp(cmd, "top") == 0)) {
                fprintf(stderr, "zswapctl: %s has one format (%s): no --json\n", cmd,
                        cmd[0] == 'm' ? "Prometheus text" : "a screen");
                return false;
        }
        return true;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'J' },
                { "bytes", no_argument, NULL, 'b' },
                { "pid", required_argument, NULL, 'p' },
                { "output", required_argument, NULL, 'o' },
                { "no-headings", no_argument, NULL, 'n' },
                { "noheadings", no_argument, NULL, 'n' }, /* zramctl's spelling */
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                { "limit", required_argument, NULL, 'L' },
                { "root", required_argument, NULL, 'R' },
                { "preload", required_argument, NULL, 'P' },
                { "textfile", required_argument, NULL, 'T' },
                { "delay", required_argument, NULL, 'd' },
                { "iterations", required_argument, NULL, 'I' },
                { "sort", required_argument, NULL, 'S' },
                { "unit", required_argument, NULL, 'U' },
                { "group", required_argument, NULL, 'G' },
                {}
        };
        Opts o = { .path = getenv("ZSWAP_SOCKET") ? getenv("ZSWAP_SOCKET") : ZSWAP_DEFAULT_SOCKET, .delay = 2 };
        UnitOpts u = { .socket = getenv("ZSWAP_SOCKET") };
        int c;

        while ((c = getopt_long(argc, argv, "s:Jbp:o:nhVd:", opts, NULL)) >= 0) {
                switch (c) {
                case 's': o.path = u.socket = optarg; break;
                case 'L': u.limit = optarg; break;
                case 'R': u.root = optarg; break;
                case 'P': u.preload = optarg; break;
                case 'T': o.textfile = optarg; break;
                case 'd': {
                        char *end;
                        errno = 0;
                        o.delay = strtod(optarg, &end);
                        if (errno || end == optarg || *end || !(o.delay >= 0.1 && o.delay <= 3600)) {
                                fprintf(stderr, "zswapctl: --delay takes seconds from 0.1 to 3600, not '%s'\n", optarg);
                                return 2;
                        }
                        o.delay_given = true;
                        break;
                }
                case 'I': {
                        char *end;
                        errno = 0;
                        unsigned long long v = strtoull(optarg, &end, 10);
                        if (errno || end == optarg || *end || *optarg == '-' || v == 0 || v > UINT32_MAX) {
                                fprintf(stderr, "zswapctl: --iterations takes a count of frames, not '%s'\n", optarg);
                                return 2;
                        }
                        o.iterations = (unsigned long)v;
                        break;
                }
                case 'S': o.sort = optarg; break;
                case 'U': o.unit = optarg; break;
                case 'G': o.group = optarg; break;
                case 'J': o.json = true; break;
                case 'b': o.bytes = true; break;
                case 'o': o.columns = optarg; break;
                case 'n': o.no_headings = true; break;
                case 'p':
                        if ((o.pid = parse_pid(optarg)) == 0)
                                return 2;
                        break;
                case 'h': help(); return 0;
                case 'V': printf("zswapctl %s\n", ZSWAP_VERSION); return 0;
                default:
                        fprintf(stderr, "See zswapctl --help.\n");
                        return 2;
                }
        }
        const char *cmd = optind < argc ? argv[optind] : "status";
        int n = optind < argc ? argc - optind - 1 : 0;
        char **args = argv + optind + 1;
        if (!options_fit(cmd, &o, &u))
                return 2;
        static const char *const with_args[] = { "pageout", "pagein", "limit", "set", "get", "enable", "disable" };
        bool takes_args = false;
        for (size_t i = 0; i < ELEMENTSOF(with_args); i++)
                takes_args |= strcmp(cmd, with_args[i]) == 0;
        if (n > 0 && !takes_args) {
                fprintf(stderr, "zswapctl: %s takes no arguments (see zswapctl --help)\n", cmd);
                return 2;
        }
        if (strcmp(cmd, "status") == 0)
                return cmd_status(&o);
        if (strcmp(cmd, "clients") == 0)
                return cmd_clients(&o);
        if (strcmp(cmd, "groups") == 0)
                return cmd_groups(&o);
        if (strcmp(cmd, "metrics") == 0)
                return cmd_metrics(&o);
        if (strcmp(cmd, "top") == 0)
                return cmd_top(&o);
        if (strcmp(cmd, "pageout") == 0 || strcmp(cmd, "pagein") == 0)
                return cmd_pageout(o.path, n, args, o.json, strcmp(cmd, "pagein") == 0);
        if (strcmp(cmd, "limit") == 0)
                return cmd_limit(&o, n, args);
        if (strcmp(cmd, "set") == 0)
                return cmd_set(o.path, o.pid, n, args, o.json);
        if (strcmp(cmd, "get") == 0)
                return cmd_get(o.path, o.pid, n, args, o.json);
        if (strcmp(cmd, "enable") == 0)
                return cmd_enable(&u, n, args);
        if (strcmp(cmd, "disable") == 0)
                return cmd_disable(&u, n, args);
        fprintf(stderr, "zswapctl: unknown command '%s' (see zswapctl --help)\n", cmd);
        return 2;
}
