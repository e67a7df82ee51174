/*
 * test-group: one limit for every process a zswap-run starts.
 *
 *  group  zswap-run --limit 48M over a shell that starts three processes
 *         of 32 MiB each (group-victim): the daemon keeps their RssAnon
 *         under 48 MiB together (96 MiB in all: with a limit per process,
 *         as before, none of them was over it and nothing left), `zswapctl
 *         get --pid PID group` names the group and its processes, and
 *         every page reads back as written;
 *  each   zswap-run --limit-each 48M over the same: each process under 48
 *         MiB on its own, so nothing leaves and the sum stays over 48 MiB;
 *  cgroup the same processes under zswap-run without a limit, in a cgroup
 *         v2 group named as a systemd unit (zswap-test-PID.service, in a
 *         cgroup2 mount of the test's own): the daemon groups them as
 *         unit:zswap-test-PID.service with no limit (nothing leaves);
 *         `zswapctl limit --unit zswap-test-PID 48M` brings their RssAnon
 *         under 48 MiB together, a user who is not an admin is refused,
 *         and `none` takes the limit away again.
 *
 * RssAnon is the kernel's own count (/proc/PID/status).
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

#define VICTIMS 3
#define VICTIM_MIB 32
#define LIMIT_MIB 48

static char run_path[PATH_MAX], ctl_path[PATH_MAX], victim_path[PATH_MAX];

/*
 * A line of the group's stdout (each victim writes each of its lines
 * whole, with one write), waiting for at most TEST_WAIT_S; false, with
 * what came of it in line, if none did. Read from the socket itself, a byte
 * at a time: a stdio stream takes every line the socket holds at once, and
 * a poll() of the socket for the next line then waits for a line the
 * stream holds already (CI hung so under load: two victims' "ready"
 * lines came in with the first, and the test waited for them until its
 * timeout).
 */
static bool read_line(int fd, char *line, size_t len) {
        uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull;
        size_t n = 0;

        while (n + 1 < len) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                uint64_t now = now_ns();
                if (now >= end || poll(&p, 1, (int)((end - now) / 1000000) + 1) != 1 || read(fd, line + n, 1) != 1)
                        break;
                if (line[n++] == '\n')
                        break;
        }
        line[n] = 0;
        return n > 0 && line[n - 1] == '\n';
}

/* The whole lines waiting in socket fd, left there (a line is 14 bytes
 * at most: "ready 4194304\n", the largest pid_max) */
static unsigned lines_queued(int fd) {
        char buf[VICTIMS * 14];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
        unsigned lines = 0;

        for (ssize_t i = 0; i < n; i++)
                lines += buf[i] == '\n';
        return lines;
}

/* A row of zswapctl groups --bytes */
typedef struct GroupRow {
        unsigned procs;
        unsigned long long registered, resident, limit; /* bytes; limit 0 for "-" */
        unsigned rows;                                  /* rows in the whole table */
} GroupRow;

/* zswapctl groups: the row of group name in *ret; false if there is none */
static bool group_row(const char *sock, const char *name, GroupRow *ret) {
        char cmd[2 * PATH_MAX], line[512], gname[80], lim[40];
        GroupRow g = { 0 };
        unsigned rows = 0;
        bool found = false;
        snprintf(cmd, sizeof(cmd), "%s --socket %s groups --bytes --no-headings", ctl_path, sock);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p);
        while (fgets(line, sizeof(line), p)) {
                if (sscanf(line, "%79s %*s %u %llu %llu %*s %*s %*s %39s", gname, &g.procs, &g.registered, &g.resident,
                           lim) != 5)
                        continue;
                rows++;
                if (strcmp(gname, name) == 0) {
                        g.limit = strcmp(lim, "-") == 0 ? 0 : strtoull(lim, NULL, 10);
                        *ret = g, found = true;
                }
        }
        pclose(p);
        ret->rows = rows;
        return found;
}

/* The mode cgroup's cgroup: a cgroup2 mount of the test's own (the same
 * hierarchy as any other) and in it a group named as a unit. */
static char cg_mount[64], cg_dir[128], cg_unit[64];

static bool cgroup_make(void) {
        snprintf(cg_mount, sizeof(cg_mount), "/tmp/test-group-cg-XXXXXX");
        ASSERT_TRUE(mkdtemp(cg_mount));
        if (mount("none", cg_mount, "cgroup2", 0, NULL) < 0) {
                fprintf(stderr, "cgroup: cannot mount cgroup2 (%s): the mode is skipped\n", strerror(errno));
                rmdir(cg_mount);
                return false;
        }
        snprintf(cg_unit, sizeof(cg_unit), "zswap-test-%d.service", (int)getpid());
        snprintf(cg_dir, sizeof(cg_dir), "%s/%s", cg_mount, cg_unit);
        ASSERT_OK(mkdir(cg_dir, 0755));
        return true;
}

static void cgroup_remove(void) {
        for (int i = 0; i < 100 && rmdir(cg_dir) < 0 && errno == EBUSY; i++)
                usleep(20000); /* the last process is still leaving */
        umount2(cg_mount, MNT_DETACH);
        rmdir(cg_mount);
}

static void run(const char *mode) {
        TestDaemon d;
        char go[] = "/tmp/test-group-go-XXXXXX", cmd[4 * PATH_MAX], line[256];
        int o[2];
        pid_t pids[VICTIMS];

        fprintf(stderr, "== %s\n", mode);
        bool by_cgroup = strcmp(mode, "cgroup") == 0;
        if (by_cgroup && !cgroup_make())
                return;
        td_start_logged(&d, "--set interval=200ms");
        ASSERT_TRUE(mkdtemp(go));
        strcat(go, "/go");
        /* $$: the shell, whose death the victims do not outlive */
        snprintf(cmd, sizeof(cmd), "for i in 1 2 3; do %s %d %s $$ & done; wait", victim_path, VICTIM_MIB, go);
        /* a stream socket rather than a pipe: lines_queued() peeks */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, o));
        pid_t self = getpid(), sh = fork();
        ASSERT_TRUE(sh >= 0);
        if (sh == 0) {
                /* never outlive the test (through zswap-run's exec and
                 * the shell's): a test that fails leaves nobody waiting
                 * for a go that never comes, holding meson's pipes until
                 * its timeout */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != self)
                        _exit(125);
                dup2(o[1], 1);
                setenv("ZSWAP_ATTACH_MS", "0", 1);
                if (by_cgroup) {
                        /* into the unit's cgroup, then zswap-run with no limit */
                        char procs[192];
                        snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg_dir);
                        FILE *f = fopen(procs, "w");
                        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
                                _exit(126);
                        execl(run_path, run_path, "--socket", d.sock, "--", "/bin/sh", "-c", cmd, (char *)NULL);
                        _exit(127);
                }
                execl(run_path, run_path, "--socket", d.sock, strcmp(mode, "group") == 0 ? "--limit" : "--limit-each",
                      "48M", "--", "/bin/sh", "-c", cmd, (char *)NULL);
                _exit(127);
        }
        close(o[1]);
        /* read once every victim's line is in, as they came in the CI run
         * that hung (the victims were quicker than the test under load):
         * every run reads lines that came together */
        WAIT_UNTIL(lines_queued(o[0]) >= VICTIMS, TEST_WAIT_S, "%s: %u of the %d victims said ready", mode,
                   lines_queued(o[0]), VICTIMS);
        for (int i = 0; i < VICTIMS; i++) {
                int p = 0;
                if (!read_line(o[0], line, sizeof(line)) || sscanf(line, "ready %d", &p) != 1)
                        test_fail("%s: %d of the %d victims said ready, then: '%s'", mode, i, VICTIMS, line);
                pids[i] = p;
        }

        uint64_t limit = (uint64_t)LIMIT_MIB << 20, sum = 0, t0 = now_ns();
        if (by_cgroup) {
                char name[80], cmd2[2 * PATH_MAX], said[512];
                GroupRow g = { .limit = 1 };
                snprintf(name, sizeof(name), "unit:%s", cg_unit);
                /* grouped by their cgroup, with no limit: nothing leaves */
                WAIT_UNTIL(group_row(d.sock, name, &g) && g.procs >= VICTIMS, TEST_WAIT_S,
                           "zswapctl groups has %s with %u processes", name, g.procs);
                ASSERT_EQ(g.limit, 0);
                for (int i = 0; i < VICTIMS; i++)
                        sum += rss_anon_bytes(pids[i]);
                fprintf(stderr, "cgroup: %s: %u processes, no limit, RssAnon %llu KiB together\n", name, g.procs,
                        (unsigned long long)sum >> 10);
                ASSERT_TRUE(sum > limit);
                /* refused to a user who is not an admin */
                snprintf(cmd2, sizeof(cmd2),
                         "setpriv --reuid 60051 --regid 60051 --clear-groups %s --socket %s limit --unit %s 1G 2>&1",
                         ctl_path, d.sock, cg_unit);
                FILE *p = popen(cmd2, "r");
                ASSERT_TRUE(p);
                size_t n = fread(said, 1, sizeof(said) - 1, p);
                said[n] = 0;
                int st = pclose(p);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(said, "permission denied"))
                        test_fail("cgroup: a user who is not an admin set a unit's limit: status %#x: %s", st, said);
                /* the operator's limit for the unit */
                snprintf(cmd2, sizeof(cmd2), "%s --socket %s limit --unit %s %dM", ctl_path, d.sock,
                         cg_unit, LIMIT_MIB);
                p = popen(cmd2, "r");
                ASSERT_TRUE(p);
                n = fread(said, 1, sizeof(said) - 1, p);
                said[n] = 0;
                ASSERT_EQ(pclose(p), 0);
                fprintf(stderr, "cgroup: %s", said);
                ASSERT_TRUE(strstr(said, name) != NULL);
        }
        if (strcmp(mode, "group") == 0 || by_cgroup) {
                /* the shell is a client too (it lives on): counted in. By
                 * cgroup the processes do not say what they hold unmanaged
                 * (the shim does in a group of zswap-run's or a unit's
                 * drop-in): the limit bounds what the daemon manages */
                for (;;) {
                        sum = rss_anon_bytes(sh);
                        for (int i = 0; i < VICTIMS; i++)
                                sum += rss_anon_bytes(pids[i]);
                        GroupRow g = { 0 };
                        char name[80];
                        snprintf(name, sizeof(name), "unit:%s", cg_unit);
                        if (by_cgroup ? group_row(d.sock, name, &g) && g.resident <= limit : sum <= limit)
                                break;
                        if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull) {
                                td_log_dump(&d);
                                test_fail("group: RssAnon of the group %llu KiB after %d s, over its limit of %u MiB",
                                          (unsigned long long)sum >> 10, TEST_WAIT_S, LIMIT_MIB);
                        }
                        usleep(50000);
                }
                fprintf(stderr, "%s: %d processes of %d MiB under one limit of %d MiB: RssAnon %llu KiB together "
                        "after %.1f s (", mode, VICTIMS, VICTIM_MIB, LIMIT_MIB, (unsigned long long)sum >> 10,
                        (double)(now_ns() - t0) / 1e9);
                for (int i = 0; i < VICTIMS; i++)
                        fprintf(stderr, "%s%llu", i ? ", " : "", (unsigned long long)rss_anon_bytes(pids[i]) >> 10);
                fprintf(stderr, " KiB each)\n");
        }
        if (by_cgroup) {
                /* none: the processes' own limits again (they have none) */
                char name[80];
                GroupRow g = { 0 };
                snprintf(name, sizeof(name), "unit:%s", cg_unit);
                ASSERT_TRUE(group_row(d.sock, name, &g));
                ASSERT_EQ(g.limit, (unsigned long long)limit);
                ASSERT_EQ(td_ctl(&d, "limit --unit %s none", cg_unit), 0);
                ASSERT_TRUE(group_row(d.sock, name, &g));
                ASSERT_EQ(g.limit, 0);
        }
        if (strcmp(mode, "group") == 0) {
                snprintf(cmd, sizeof(cmd), "%s --socket %s get --pid %d group", ctl_path, d.sock, (int)pids[0]);
                FILE *p = popen(cmd, "r");
                ASSERT_TRUE(p && fgets(line, sizeof(line), p));
                pclose(p);
                fprintf(stderr, "group: %s", line);
                /* "group = NAME: N processes, ...": NAME is run:PID:MS */
                char gname[80], user[40];
                size_t glen;
                if (strncmp(line, "group = run:", 12) != 0 || !strstr(line, " processes, ") ||
                    sscanf(line, "group = %79s", gname) != 1 || (glen = strlen(gname)) < 2 || gname[glen - 1] != ':')
                        test_fail("group: zswapctl get --pid %d group: %s", (int)pids[0], line);
                gname[glen - 1] = 0;
                /* one set of figures for the group: groups, and GROUP in clients */
                GroupRow g = { 0 };
                ASSERT_TRUE(group_row(d.sock, gname, &g));
                fprintf(stderr, "group: zswapctl groups: %u row, %s: %u processes, %llu bytes registered, limit %llu\n",
                        g.rows, gname, g.procs, g.registered, g.limit);
                ASSERT_EQ(g.rows, 1);
                ASSERT_TRUE(g.procs >= VICTIMS && g.registered >= (uint64_t)VICTIMS * VICTIM_MIB << 20);
                ASSERT_EQ(g.limit, limit);
                snprintf(cmd, sizeof(cmd), "%s --socket %s clients -o pid,group --no-headings", ctl_path, d.sock);
                p = popen(cmd, "r");
                ASSERT_TRUE(p);
                unsigned in_group = 0;
                while (fgets(line, sizeof(line), p)) {
                        int pid;
                        if (sscanf(line, "%d %79s", &pid, user) == 2 && strcmp(user, gname) == 0)
                                for (int i = 0; i < VICTIMS; i++)
                                        in_group += pid == pids[i];
                }
                pclose(p);
                ASSERT_EQ(in_group, VICTIMS);
        } else if (!by_cgroup) {
                /* each under its own: 32 MiB is under 48, nothing to take */
                uint64_t each = 0;
                for (int i = 0; i < VICTIMS; i++) {
                        uint64_t r = rss_anon_bytes(pids[i]);
                        sum += r;
                        each = MAX(each, r);
                }
                fprintf(stderr, "each: RssAnon %llu KiB together, %llu KiB at most each\n",
                        (unsigned long long)sum >> 10, (unsigned long long)each >> 10);
                ASSERT_TRUE(sum > limit && each <= limit);
        }

        /* every page back, as written */
        int fd = open(go, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        for (int i = 0; i < VICTIMS; i++) {
                int p = 0;
                if (!read_line(o[0], line, sizeof(line)) || sscanf(line, "ok %d", &p) != 1)
                        test_fail("%s: a victim read back: %s", mode, line);
        }
        int st;
        ASSERT_EQ(waitpid(sh, &st, 0), sh);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        close(o[0]);
        unlink(go);
        *strrchr(go, '/') = 0;
        rmdir(go);
        td_stop(&d);
        if (by_cgroup)
                cgroup_remove();
}

int main(int argc, char **argv) {
        td_shim_paths(run_path, ctl_path, victim_path, "group-victim");
        signal(SIGPIPE, SIG_IGN);
        for (int a = 1; a < argc; a++)
                run(argv[a]);
        return 0;
}
