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
 *         MiB on its own, so nothing leaves and the sum stays over 48 MiB.
 *
 * RssAnon is the kernel's own count (/proc/PID/status).
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

#define VICTIMS 3
#define VICTIM_MIB 32
#define LIMIT_MIB 48

static char run_path[PATH_MAX], ctl_path[PATH_MAX], victim_path[PATH_MAX];

/* A line of the group's stdout, waiting for at most TEST_WAIT_S */
static bool read_line(FILE *f, char *line, size_t len) {
        struct pollfd p = { .fd = fileno(f), .events = POLLIN };
        return poll(&p, 1, TEST_WAIT_S * 1000) == 1 && fgets(line, (int)len, f);
}

static void run(const char *mode) {
        TestDaemon d;
        char go[] = "/tmp/test-group-go-XXXXXX", cmd[4 * PATH_MAX], line[256];
        int o[2];
        pid_t pids[VICTIMS];

        fprintf(stderr, "== %s\n", mode);
        td_start_logged(&d, "--set interval=200ms");
        ASSERT_TRUE(mkdtemp(go));
        strcat(go, "/go");
        snprintf(cmd, sizeof(cmd), "for i in 1 2 3; do %s %d %s & done; wait", victim_path, VICTIM_MIB, go);
        ASSERT_OK(pipe2(o, O_CLOEXEC));
        pid_t sh = fork();
        ASSERT_TRUE(sh >= 0);
        if (sh == 0) {
                dup2(o[1], 1);
                setenv("ZSWAP_ATTACH_MS", "0", 1);
                execl(run_path, run_path, "--socket", d.sock, strcmp(mode, "group") == 0 ? "--limit" : "--limit-each",
                      "48M", "--", "/bin/sh", "-c", cmd, (char *)NULL);
                _exit(127);
        }
        close(o[1]);
        FILE *out = fdopen(o[0], "r");
        ASSERT_TRUE(out);
        for (int i = 0; i < VICTIMS; i++) {
                int p = 0;
                if (!read_line(out, line, sizeof(line)) || sscanf(line, "ready %d", &p) != 1)
                        test_fail("%s: the victims did not start: '%s'", mode, line);
                pids[i] = p;
        }

        uint64_t limit = (uint64_t)LIMIT_MIB << 20, sum = 0, t0 = now_ns();
        if (strcmp(mode, "group") == 0) {
                /* the shell is a client too (it lives on): counted in */
                for (;;) {
                        sum = rss_anon_bytes(sh);
                        for (int i = 0; i < VICTIMS; i++)
                                sum += rss_anon_bytes(pids[i]);
                        if (sum <= limit)
                                break;
                        if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull) {
                                td_log_dump(&d);
                                test_fail("group: RssAnon of the group %llu KiB after %d s, over its limit of %u MiB",
                                          (unsigned long long)sum >> 10, TEST_WAIT_S, LIMIT_MIB);
                        }
                        usleep(50000);
                }
                fprintf(stderr, "group: %d processes of %d MiB under one limit of %d MiB: RssAnon %llu KiB together "
                        "after %.1f s (", VICTIMS, VICTIM_MIB, LIMIT_MIB, (unsigned long long)sum >> 10,
                        (double)(now_ns() - t0) / 1e9);
                for (int i = 0; i < VICTIMS; i++)
                        fprintf(stderr, "%s%llu", i ? ", " : "", (unsigned long long)rss_anon_bytes(pids[i]) >> 10);
                fprintf(stderr, " KiB each)\n");
                snprintf(cmd, sizeof(cmd), "%s --socket %s get --pid %d group", ctl_path, d.sock, (int)pids[0]);
                FILE *p = popen(cmd, "r");
                ASSERT_TRUE(p && fgets(line, sizeof(line), p));
                pclose(p);
                fprintf(stderr, "group: %s", line);
                if (strncmp(line, "group = run:", 12) != 0 || !strstr(line, " processes, "))
                        test_fail("group: zswapctl get --pid %d group: %s", (int)pids[0], line);
                /* one set of figures for the group: groups, and GROUP in clients */
                snprintf(cmd, sizeof(cmd), "%s --socket %s groups --bytes --no-headings", ctl_path, d.sock);
                p = popen(cmd, "r");
                ASSERT_TRUE(p);
                unsigned groups = 0, procs = 0;
                unsigned long long reg = 0, lim = 0;
                char gname[80], user[40];
                while (fgets(line, sizeof(line), p))
                        if (sscanf(line, "%79s %39s %u %llu %*s %*s %*s %*s %llu", gname, user, &procs, &reg, &lim) == 5)
                                groups++;
                pclose(p);
                fprintf(stderr, "group: zswapctl groups: %u row, %s: %u processes, %llu bytes registered, limit %llu\n",
                        groups, gname, procs, reg, lim);
                ASSERT_EQ(groups, 1);
                ASSERT_TRUE(strncmp(gname, "run:", 4) == 0 && procs >= VICTIMS && reg >= (uint64_t)VICTIMS * VICTIM_MIB << 20);
                ASSERT_EQ(lim, limit);
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
        } else {
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
                if (!read_line(out, line, sizeof(line)) || sscanf(line, "ok %d", &p) != 1)
                        test_fail("%s: a victim read back: %s", mode, line);
        }
        int st;
        ASSERT_EQ(waitpid(sh, &st, 0), sh);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        fclose(out);
        unlink(go);
        *strrchr(go, '/') = 0;
        rmdir(go);
        td_stop(&d);
}

int main(int argc, char **argv) {
        td_shim_paths(run_path, ctl_path, victim_path, "group-victim");
        signal(SIGPIPE, SIG_IGN);
        for (int a = 1; a < argc; a++)
                run(argv[a]);
        return 0;
}
