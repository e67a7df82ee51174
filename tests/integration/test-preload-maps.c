/*
 * test-preload-maps: every private anonymous mapping of a program under
 * zswap-run is managed for its whole life, whatever the program does to
 * its mappings between two looks of the shim's scanner (maps-victim):
 *
 *  - reuse: a mapping unmapped and made again at the same address at
 *    once (through libc, through raw system calls, and for the middle
 *    half of a mapping only). /proc/PID/maps then shows the line it
 *    showed before, so a shim that remembers what it registered takes the
 *    new mapping for the old one, which the daemon dropped at the unmap:
 *    the new one was never managed;
 *  - grow: a mapping grown with mremap(), moved to a new address and in
 *    place. A shim that took "the daemon already has part of this" for
 *    "all of it is managed" left the grown part out for good.
 *
 * After each change the test pages the process out, range by range,
 * until the kernel's own view says the mapping's pages left (present
 * pages counted in /proc/PID/pagemap, the mapping registered for missing
 * pages, "um" in its VmFlags), for TEST_WAIT_S at most; then the program
 * checks every page against what it wrote (maps-victim).
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

static char run_path[PATH_MAX], ctl_path[PATH_MAX], victim_path[PATH_MAX];

/* Pages of [addr, addr+len) present in pid's memory (pagemap bit 63). */
static uint64_t present_pages(pid_t pid, uint64_t addr, uint64_t len) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        uint64_t n = len / ZSWAP_PAGE_SIZE, present = 0, buf[512];
        for (uint64_t i = 0; i < n;) {
                size_t want = MIN(n - i, (uint64_t)(sizeof(buf) / sizeof(buf[0])));
                ssize_t got = pread(fd, buf, want * 8, (off_t)((addr / ZSWAP_PAGE_SIZE + i) * 8));
                ASSERT_TRUE(got > 0 && got % 8 == 0);
                for (ssize_t k = 0; k < got / 8; k++)
                        present += buf[k] >> 63;
                i += (uint64_t)got / 8;
        }
        close(fd);
        return present;
}

/* Whether every mapping of pid over [addr, addr+len) is registered with a
 * userfaultfd for missing pages ("um" in its VmFlags). */
static bool all_um(pid_t pid, uint64_t addr, uint64_t len) {
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f);
        bool in = false, all = true;
        uint64_t covered = 0;
        while (fgets(line, sizeof(line), f)) {
                unsigned long long s, e;
                if (sscanf(line, "%llx-%llx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' ')) {
                        in = s < addr + len && addr < e;
                        if (in)
                                covered += MIN(e, addr + len) - MAX(s, addr);
                } else if (in && strncmp(line, "VmFlags:", 8) == 0)
                        all = all && strstr(line, " um") != NULL;
        }
        fclose(f);
        return all && covered == len;
}

/* Page the range out until at most an eighth of its pages are present
 * and all of it is registered for missing pages. */
static void evict_range(TestDaemon *d, pid_t pid, const char *mode, const char *what, uint64_t addr, uint64_t len) {
        uint64_t t0 = now_ns(), pages = len / ZSWAP_PAGE_SIZE, present = pages;
        long evicted = 0;
        for (;;) {
                present = present_pages(pid, addr, len);
                if (present <= pages / 8 && all_um(pid, addr, len))
                        break;
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull) {
                        td_log_dump(d);
                        test_fail("%s: %s mapping %#llx+%llu: %llu of %llu pages still present, %ld evicted in %d s: "
                                  "the shim never handed it over whole", mode, what, (unsigned long long)addr,
                                  (unsigned long long)len, (unsigned long long)present, (unsigned long long)pages,
                                  evicted, TEST_WAIT_S);
                }
                long n = td_pageout_pid(d, pid, addr, len);
                evicted += n > 0 ? n : 0;
                if (n <= 0)
                        usleep(50000);
        }
        fprintf(stderr, "%s: %s mapping %#llx+%llu out (%llu of %llu pages present) after %.1f s\n", mode, what,
                (unsigned long long)addr, (unsigned long long)len, (unsigned long long)present,
                (unsigned long long)pages, (double)(now_ns() - t0) / 1e9);
}

static void run(const char *mode) {
        TestDaemon d;
        int o[2], i[2];

        fprintf(stderr, "== %s\n", mode);
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        ASSERT_OK(pipe2(o, O_CLOEXEC));
        ASSERT_OK(pipe2(i, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                dup2(i[0], 0);
                dup2(o[1], 1);
                setenv("ZSWAP_ATTACH_MS", "0", 1);
                execl(run_path, run_path, "--socket", d.sock, "--", victim_path, mode, (char *)NULL);
                _exit(127);
        }
        close(i[0]);
        close(o[1]);
        FILE *out = fdopen(o[0], "r"), *in = fdopen(i[1], "w");
        ASSERT_TRUE(out && in);
        char line[256];
        unsigned steps = 0;
        unsigned long errors = ~0ul;
        while (fgets(line, sizeof(line), out)) {
                unsigned long long addr, len;
                char what[16];
                if (sscanf(line, "done errors %lu", &errors) == 1)
                        break;
                if (sscanf(line, "%15s %llx %llu", what, &addr, &len) != 3)
                        test_fail("%s: the program said: %s", mode, line);
                evict_range(&d, pid, mode, strcmp(what, "map") == 0 ? "a" : "the changed", addr, len);
                steps++;
                fprintf(in, "next\n");
                fflush(in);
        }
        int st;
        fclose(in);
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        fclose(out);
        if (errors != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                td_log_dump(&d);
                test_fail("%s: the program read back %lu words wrong (status %#x)", mode, errors, st);
        }
        ASSERT_EQ(steps, strcmp(mode, "reuse") == 0 ? 6u : 4u);
        fprintf(stderr, "%s: %u mappings evicted whole, every page read back as written\n", mode, steps);
        td_stop(&d);
}

int main(int argc, char **argv) {
        td_shim_paths(run_path, ctl_path, victim_path, "maps-victim");
        signal(SIGPIPE, SIG_IGN);
        for (int a = 1; a < argc; a++)
                run(argv[a]);
        return 0;
}
