/*
 * test-preload-fds: a program under zswap-run that closes every
 * descriptor it did not open (close_range(3, ~0U), closefrom(3), a close()
 * loop), or puts /dev/null over descriptors 3 to 63 with dup2, keeps its
 * memory. The shim keeps the descriptors libzswap lives on (its socket,
 * its uffd, its store, its sync page) from the program, so that:
 *  - the process still holds its own reference to its uffd (a link to
 *    anon_inode:[userfaultfd] in /proc/PID/fd): the kernel drops evicted
 *    pages to zeros at the last close of the uffd, so without it a daemon
 *    that dies takes every evicted page of the program with it;
 *  - the daemon can still evict the program (its agent still talks to it),
 *    and once it is killed and a new one starts, every byte reads back as
 *    written (the new daemon adopts what the old one held).
 * Without that, the program closed both, and nothing could be evicted.
 * dup2 over one of the shim's descriptors is refused with EBUSY and one
 * line on stderr.
 *
 * close-race: the program closes every descriptor and forks, again and
 * again, from its start while the shim attaches (ZSWAP_ATTACH_MS=200; the
 * other cases attach before main, so that the program closes what the
 * shim lives on): the shim's new descriptors are made while no close runs
 * and no fork sees a half-made client, so the program ends up managed
 * and every child reads its memory intact.
 *
 * mlock: the program mlocks half of its memory before the shim attaches:
 * the shim registers the other half and never the locked one (the
 * program asked for it to stay in RAM).
 *
 * no-daemon: nobody serves the socket; the shim keeps no descriptor of
 * its own from the program (dup2 over each of 3..63 succeeds).
 *
 * after-file: the program's memory lies right after a file mapping,
 * where a loaded object's .bss would lie (as when a library loaded later
 * lands right below it): the shim manages it, since it tells a .bss by
 * the objects' own segments, not by where a mapping lies.
 *
 * uffd: the program registers half of its memory with a userfaultfd of
 * its own after the shim has registered it (the kernel allows one uffd per
 * range: EBUSY). The shim gives that memory up, its pages back first, says
 * so once, and the program's UFFDIO_REGISTER succeeds; the other half is
 * evicted and read back as in the other cases, the first half is never
 * taken again (a read of it would wait forever on the program's uffd).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include "harness.h"
#include "util.h"

#define LEN ((size_t)16 << 20)
#define EVICT_MIN ((size_t)1 << 20)

static char run_path[PATH_MAX], ctl_path[PATH_MAX], victim_path[PATH_MAX];

/* Whether pid holds a userfaultfd among its descriptors. */
static bool holds_uffd(pid_t pid) {
        char dir[64], path[PATH_MAX], target[64];
        snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
        DIR *d = opendir(dir);
        bool found = false;
        ASSERT_TRUE(d);
        for (struct dirent *e; !found && (e = readdir(d));) {
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                ssize_t n = readlink(path, target, sizeof(target) - 1);
                if (n > 0) {
                        target[n] = 0;
                        found = strcmp(target, "anon_inode:[userfaultfd]") == 0;
                }
        }
        closedir(d);
        return found;
}

/* fds-victim under zswap-run: its stdout and stdin as streams, its stderr
 * a descriptor */
typedef struct Victim {
        pid_t pid;
        FILE *out, *in;
        int err;
} Victim;

/* fds-victim MODE under zswap-run on SOCK, attaching ATTACH_MS after its
 * start (ZSWAP_ATTACH_MS) */
static void victim_start(Victim *v, const char *sock, const char *mode, const char *attach_ms) {
        int o[2], i[2], e[2];

        ASSERT_OK(pipe2(o, O_CLOEXEC));
        ASSERT_OK(pipe2(i, O_CLOEXEC));
        ASSERT_OK(pipe2(e, O_CLOEXEC));
        v->pid = fork();
        ASSERT_TRUE(v->pid >= 0);
        if (v->pid == 0) {
                dup2(i[0], 0);
                dup2(o[1], 1);
                dup2(e[1], 2);
                setenv("ZSWAP_ATTACH_MS", attach_ms, 1);
                execl(run_path, run_path, "--socket", sock, "--", victim_path, mode, (char *)NULL);
                _exit(127);
        }
        close(i[0]);
        close(o[1]);
        close(e[1]);
        v->out = fdopen(o[0], "r");
        v->in = fdopen(i[1], "w");
        v->err = e[0];
        ASSERT_TRUE(v->out && v->in);
}

/* "check": the victim's answer in line, what it wrote to stderr in err;
 * its exit status */
static int victim_check(Victim *v, char *line, size_t line_len, char *err, size_t err_len) {
        int st;

        fprintf(v->in, "check\n");
        fflush(v->in);
        ASSERT_TRUE(fgets(line, (int)line_len, v->out));
        fclose(v->in);
        ssize_t n = read(v->err, err, err_len - 1);
        err[n > 0 ? n : 0] = 0;
        ASSERT_EQ(waitpid(v->pid, &st, 0), v->pid);
        fclose(v->out);
        close(v->err);
        return st;
}

static void run(const char *mode) {
        TestDaemon d;
        Victim v;
        char line[128], err[4096] = "";

        fprintf(stderr, "== %s\n", mode);
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        /* close-race: attach while the program runs; mlock: long after it
         * locked; the others before main */
        victim_start(&v, d.sock, mode,
                     strcmp(mode, "close-race") == 0 ? "200" : strcmp(mode, "mlock") == 0 ? "1000" : "0");
        pid_t pid = v.pid;
        FILE *out = v.out;
        if (strcmp(mode, "dup2") == 0) {
                int refused = -1;
                ASSERT_TRUE(fgets(line, sizeof(line), out) && sscanf(line, "dup2 refused %d", &refused) == 1);
                ASSERT_TRUE(refused > 0); /* the shim's own are among 3..63 */
        }
        if (strcmp(mode, "uffd") == 0) {
                /* the program's own registration over memory the shim has */
                ASSERT_TRUE(fgets(line, sizeof(line), out));
                if (strcmp(line, "uffd ok\n") != 0)
                        test_fail("uffd: the program's UFFDIO_REGISTER: %s", line);
        }
        if (strcmp(mode, "mlock") == 0) {
                int managed = -1;
                ASSERT_TRUE(fgets(line, sizeof(line), out));
                if (sscanf(line, "mlock locked-managed %d", &managed) != 1 || managed != 0)
                        test_fail("mlock: %s", line);
        }
        if (strcmp(mode, "after-file") == 0) {
                int managed = -1;
                ASSERT_TRUE(fgets(line, sizeof(line), out));
                if (sscanf(line, "after-file managed %d", &managed) != 1 || managed != 1)
                        test_fail("after-file: the program's memory right after a file mapping: %s", line);
        }
        if (strcmp(mode, "close-race") == 0) {
                int children = 0, bad = -1, managed = 0, before = 0;
                struct pollfd pf = { .fd = fileno(out), .events = POLLIN };
                if (poll(&pf, 1, TEST_WAIT_S * 1000) != 1) {
                        td_log_dump(&d);
                        test_fail("close-race: the program did not finish in %d s (hung while the shim attached)",
                                  TEST_WAIT_S);
                }
                ASSERT_TRUE(fgets(line, sizeof(line), out) &&
                            sscanf(line, "close-race children %d bad %d managed %d before %d", &children, &bad, &managed,
                                   &before) == 4);
                fprintf(stderr, "close-race: %d children (%d before the shim had registered the memory), %d read "
                        "their memory wrong; managed %d\n", children, before, bad, managed);
                if (bad || !managed) {
                        td_log_dump(&d);
                        test_fail("close-race: %d of %d children read wrong, the program %s managed", bad, children,
                                  managed ? "is" : "never got");
                }
        }
        int vpid = 0;
        ASSERT_TRUE(fgets(line, sizeof(line), out) && sscanf(line, "ready %d", &vpid) == 1);
        ASSERT_EQ(vpid, pid); /* zswap-run execs the program */

        /* the shim's scanner registers the region; then pages go out (a
         * shimmed program's pageouts evict few pages a call for now: its
         * agent's moves are slow, so 1 MiB is enough to show the point) */
        long total = 0;
        for (uint64_t t0 = now_ns(); total < (long)(EVICT_MIN / ZSWAP_PAGE_SIZE); usleep(100000)) {
                long n = td_pageout_pid(&d, pid, 0, 0);
                total += n > 0 ? n : 0;
                if (now_ns() - t0 > 120 * 1000000000ull) {
                        td_log_dump(&d);
                        test_fail("%s: %ld pages evicted in 120 s: the program's agent is gone", mode, total);
                }
        }
        if (!holds_uffd(pid)) {
                td_log_dump(&d);
                test_fail("%s: the process no longer holds its uffd", mode);
        }
        /* the daemon dies; a new one starts and adopts what is held (the
         * agent's own state is off the heap it manages: it can reach the
         * new daemon without faulting on a page only that daemon serves) */
        td_kill(&d);
        td_respawn(&d);
        int st = victim_check(&v, line, sizeof(line), err, sizeof(err));
        if (strcmp(line, "ok\n") != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                td_log_dump(&d);
                test_fail("%s: the program read back: %s (status %#x), stderr: %s", mode, line, st, err);
        }
        fprintf(stderr, "%s: %ld pages evicted, its uffd held, all read back after the daemon was replaced; stderr: %s", mode,
                total, err);
        if (strcmp(mode, "dup2") == 0) /* refused once, said once */
                ASSERT_TRUE(strstr(err, "refused (EBUSY)") && strchr(err, '\n') == strrchr(err, '\n'));
        if (strcmp(mode, "uffd") == 0) /* let go, said once */
                ASSERT_TRUE(strstr(err, "registers memory with userfaultfd itself") &&
                            strchr(err, '\n') == strrchr(err, '\n'));
        td_stop(&d);
}

/* no-daemon: fds-victim dup2 under zswap-run with nobody at the socket.
 * The shim does not attach and keeps no descriptor of its own: every
 * dup2() over 3..63 succeeds (the /proc files its scanner would have read
 * are given up with the scanner), and the program runs and reads its
 * memory as without the shim. */
static void run_no_daemon(void) {
        char sock[64], line[128], err[4096] = "";
        Victim v;
        int refused = -1;

        fprintf(stderr, "== no-daemon\n");
        snprintf(sock, sizeof(sock), "/tmp/zswap-test-nobody-%d.sock", (int)getpid());
        victim_start(&v, sock, "dup2", "0");
        ASSERT_TRUE(fgets(line, sizeof(line), v.out) && sscanf(line, "dup2 refused %d", &refused) == 1);
        ASSERT_TRUE(fgets(line, sizeof(line), v.out) && strncmp(line, "ready ", 6) == 0);
        int st = victim_check(&v, line, sizeof(line), err, sizeof(err));
        if (refused != 0 || strcmp(line, "ok\n") != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("no-daemon: %d of dup2 refused, the program read back %s(status %#x), stderr: %s", refused,
                          line, st, err);
        ASSERT_TRUE(strstr(err, "not managing memory") && !strstr(err, "EBUSY"));
        fprintf(stderr, "no-daemon: no dup2 refused, every byte read back; stderr: %s", err);
}

int main(int argc, char **argv) {
        td_shim_paths(run_path, ctl_path, victim_path, "fds-victim");
        signal(SIGPIPE, SIG_IGN);
        for (int a = 1; a < argc; a++)
                if (strcmp(argv[a], "no-daemon") == 0)
                        run_no_daemon();
                else
                        run(argv[a]);
        return 0;
}
