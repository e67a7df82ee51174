/*
 * test-top: `zswapctl top` in a real terminal (a tmux pane of its own
 * server), read back as the screen shows it (tmux capture-pane).
 *
 * Two clients: this process, whose pages are paged out, and a child
 * whose pages stay resident. The view shows both rows with the figures
 * `zswapctl clients` gives; it follows a pageout; the sort keys reorder
 * the rows; faults while it runs show as a rate in the row and the
 * summary; a smaller window gets every line cut to its width (nothing
 * wraps onto the next line); when the daemon is killed the view says so,
 * and when a new one has adopted the clients their rows come back; q
 * leaves the alternate screen and puts the terminal's line discipline
 * back (stty afterwards shows icanon and echo). Without a terminal the
 * same frames come as plain text, --iterations of them, and bad options
 * are usage errors. Every page of both clients is checked at the end.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NPAGES 2048       /* this process's: paged out */
#define CHILD_NPAGES 4096 /* the child's: resident */
#define COLS 120
#define ROWS 30

static char server[64], ctl[PATH_MAX], stty_out[PATH_MAX];
static TestDaemon d;

static int tmux(const char *fmt, ...) _printf_(1, 2);
static int tmux(const char *fmt, ...) {
        char args[4 * PATH_MAX], cmd[sizeof(args) + 128];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(args, sizeof(args), fmt, ap);
        va_end(ap);
        snprintf(cmd, sizeof(cmd), "tmux -L %s %s", server, args);
        int st = system(cmd);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The tmux server's pid: killed however the test ends (test_fail()
 * aborts, and atexit handlers do not run then), and with it the pane's
 * processes, whose terminal closes. */
static volatile pid_t tmux_server;

static void tmux_cleanup(void) {
        if (tmux_server > 0)
                kill(tmux_server, SIGKILL);
}

static void on_abort(int sig) {
        tmux_cleanup();
        signal(sig, SIG_DFL);
        raise(sig);
}

/* What the pane shows now, one string, its lines as tmux prints them. */
static char screen[65536];
static const char *capture(void) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "tmux -L %s capture-pane -p -t top 2>/dev/null", server);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p);
        size_t n = fread(screen, 1, sizeof(screen) - 1, p);
        screen[n] = 0;
        pclose(p);
        return screen;
}

/* Line i (from 0) of the screen captured last, into buf. */
static const char *line_of(int i, char *buf, size_t len) {
        const char *s = screen;
        for (; i > 0 && s; i--)
                if ((s = strchr(s, '\n')))
                        s++;
        buf[0] = 0;
        if (s)
                snprintf(buf, len, "%.*s", (int)strcspn(s, "\n"), s);
        return buf;
}

typedef struct Row {
        int pid;
        char user[32], group[32], resident[32], evicted[32], pool[32], ratio[32], limit[32], flt[32], rflt[32],
                comm[32];
        int line;
} Row;

/* The row of pid on the screen captured last. */
static bool row_of(int pid, Row *r) {
        char buf[512];
        for (int i = 0; i < 200; i++) {
                line_of(i, buf, sizeof(buf));
                if (!buf[0] && i > ROWS)
                        break;
                if (sscanf(buf, "%d %31s %31s %31s %31s %31s %31s %31s %31s %31s %31s", &r->pid, r->user, r->group,
                           r->resident, r->evicted, r->pool, r->ratio, r->limit, r->flt, r->rflt, r->comm) == 11 &&
                    r->pid == pid) {
                        r->line = i;
                        return true;
                }
        }
        return false;
}

/* zswapctl's own output for args (its stdout), into out. */
static const char *ctl_out(char *out, size_t len, const char *args) {
        char cmd[PATH_MAX + 512];
        snprintf(cmd, sizeof(cmd), "%s --socket %s %s 2>&1", ctl, d.sock, args);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p);
        size_t n = fread(out, 1, len - 1, p);
        out[n] = 0;
        pclose(p);
        return out;
}

/* The EVICTED cell `zswapctl clients` gives pid now. */
static bool clients_evicted(int pid, char *cell, size_t len) {
        char out[8192];
        ctl_out(out, sizeof(out), "clients --no-headings -o PID,EVICTED");
        for (const char *s = out; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL) {
                int p;
                char c[32];
                if (sscanf(s, "%d %31s", &p, c) == 2 && p == pid) {
                        snprintf(cell, len, "%s", c);
                        return true;
                }
        }
        return false;
}

static bool shows_evicted(int pid) {
        Row r;
        char want[32];
        capture();
        return row_of(pid, &r) && strcmp(r.evicted, "0B") != 0 && clients_evicted(pid, want, sizeof(want)) &&
               strcmp(r.evicted, want) == 0;
}

static bool sorted_by(const char *key, int first) {
        char pat[64], buf[512];
        Row r;
        capture();
        snprintf(pat, sizeof(pat), "sort: %s ", key);
        if (!strstr(screen, pat))
                return false;
        /* the first row is right under the header */
        for (int i = 0; i < ROWS; i++)
                if (strstr(line_of(i, buf, sizeof(buf)), "PID USER"))
                        return row_of(first, &r) && r.line == i + 1;
        return false;
}

static bool faulting_shows(struct zswap_client *c, int pid, uint8_t *buf, uint64_t *hashes) {
        static uint64_t seed = 1000;
        Row r;
        char l[512];
        /* keep it faulting: a slice written, out, and read back, again and
         * again (written each time: a page read back and still clean in
         * the pool is not counted as evicted again) */
        fill_pages(buf, 64 * ZSWAP_PAGE_SIZE, seed++);
        hash_pages(buf, 64 * ZSWAP_PAGE_SIZE, hashes);
        if (td_pageout_want(c, buf, 64 * ZSWAP_PAGE_SIZE, 1) < 0)
                test_fail("no page of the slice went out");
        if (verify_pages(buf, 64 * ZSWAP_PAGE_SIZE, hashes) != 0)
                test_fail("pages read back wrong while top ran");
        capture();
        return row_of(pid, &r) && strcmp(r.flt, "-") != 0 && atof(r.flt) > 0 &&
               strncmp(line_of(2, l, sizeof(l)), "Faults:  ", 9) == 0 && l[9] != '0' && l[9] != '-';
}

/* Every line at most cols wide, the summary where it belongs. */
static bool fits(int cols) {
        char buf[1024];
        capture();
        for (int i = 0; i < 200; i++) {
                line_of(i, buf, sizeof(buf));
                if ((int)strlen(buf) > cols)
                        return false;
        }
        return strncmp(line_of(0, buf, sizeof(buf)), "zswapctl top - ", 15) == 0 &&
               strncmp(line_of(1, buf, sizeof(buf)), "Memory:", 7) == 0 &&
               strncmp(line_of(2, buf, sizeof(buf)), "Faults:", 7) == 0 &&
               strncmp(line_of(3, buf, sizeof(buf)), "Pool:", 5) == 0 && strstr(line_of(5, buf, sizeof(buf)), "PID");
}

static void usage_errors(void) {
        static const char *const bad[] = { "top --json", "top --delay 0", "top --delay x", "top --sort size",
                                           "top --iterations 0", "status --delay 1", "clients --sort pid",
                                           "top extra" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int st = td_ctl(&d, "%s 2>/dev/null", bad[i]);
                if (st != 2)
                        test_fail("zswapctl %s: exit %d, not 2 (usage)", bad[i], st);
        }
}

/* Without a terminal: --iterations plain frames, no escape sequences. */
static void batch(pid_t child) {
        static char out[65536];
        char args[64];
        ctl_out(out, sizeof(out), "top --iterations 2 --delay 0.1 --sort pid");
        if (strchr(out, '\033'))
                test_fail("escape sequences in top's output to a pipe:\n%s", out);
        const char *a = strstr(out, "zswapctl top - "), *b = a ? strstr(a + 1, "zswapctl top - ") : NULL;
        if (!a || !b || strstr(b + 1, "zswapctl top - "))
                test_fail("not two frames:\n%s", out);
        snprintf(args, sizeof(args), "\n%7d ", (int)child);
        if (!strstr(a, args) || !strstr(b, args))
                test_fail("the child's row is not in both frames:\n%s", out);
}

int main(void) {
        char run[4 * PATH_MAX];
        uint64_t hashes[NPAGES], child_hashes[CHILD_NPAGES];
        int go[2], done[2];

        test_require_root();
        if (system("command -v tmux >/dev/null") != 0)
                test_skip("tmux is not installed");
        td_ctl_path(ctl);
        snprintf(server, sizeof(server), "zswap-test-top-%d", (int)getpid());
        snprintf(stty_out, sizeof(stty_out), "/tmp/zswap-test-top-%d.stty", (int)getpid());
        atexit(tmux_cleanup);
        signal(SIGABRT, on_abort);
        td_start(&d, "");

        /* the child: its own client, its pages resident, until told */
        ASSERT_OK(pipe2(go, O_CLOEXEC)); /* not into tmux, which outlives us */
        ASSERT_OK(pipe2(done, O_CLOEXEC));
        pid_t child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0) {
                char x;
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(go[1]);
                close(done[0]);
                struct zswap_client *cc = td_connect(&d);
                uint8_t *cb = td_region(cc, CHILD_NPAGES * ZSWAP_PAGE_SIZE, 77, child_hashes);
                ASSERT_EQ(write(done[1], "r", 1), 1);
                if (read(go[0], &x, 1) != 1)
                        _exit(20);
                _exit(verify_pages(cb, CHILD_NPAGES * ZSWAP_PAGE_SIZE, child_hashes) ? 21 : 0);
        }
        close(go[0]);
        close(done[1]);
        char x;
        ASSERT_EQ(read(done[0], &x, 1), 1);

        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, NPAGES * ZSWAP_PAGE_SIZE, 42, hashes);

        usage_errors();
        batch(child);

        /* the view, in a 120x30 terminal; the shell after it records the
         * line discipline top left behind, and its exit status is top's */
        snprintf(run, sizeof(run), "sh -c '%s --socket %s top --delay 0.2; s=\\$?; stty -a >%s; echo \\$s >%s.rc'", ctl,
                 d.sock, stty_out, stty_out);
        ASSERT_EQ(tmux("new-session -d -s top -x %d -y %d \"%s\"", COLS, ROWS, run), 0);
        ASSERT_EQ(tmux("set-option -t top remain-on-exit on"), 0); /* to read its screen after */
        char cmd[256], pidtext[32] = "";
        snprintf(cmd, sizeof(cmd), "tmux -L %s display-message -p '#{pid}'", server);
        FILE *pp = popen(cmd, "r");
        ASSERT_TRUE(pp && fgets(pidtext, sizeof(pidtext), pp));
        pclose(pp);
        tmux_server = (pid_t)atoi(pidtext);
        ASSERT_TRUE(tmux_server > 0);
        Row r;
        WAIT_UNTIL((capture(), row_of(getpid(), &r) && row_of(child, &r)), TEST_WAIT_S,
                   "the two clients' rows; the screen:\n%s", screen);
        ASSERT_TRUE(fits(COLS));

        /* a pageout shows: EVICTED as clients gives it */
        ASSERT_TRUE(td_pageout_want(c, buf, NPAGES * ZSWAP_PAGE_SIZE, NPAGES / 2) > 0);
        WAIT_UNTIL(shows_evicted(getpid()), TEST_WAIT_S, "this process's EVICTED as clients shows it; the screen:\n%s",
                   screen);

        /* sort keys: evicted (default) puts this process first, resident
         * the child (everything of it resident), pid the lower pid */
        WAIT_UNTIL(sorted_by("evicted", getpid()), TEST_WAIT_S, "evicted order; the screen:\n%s", screen);
        ASSERT_EQ(tmux("send-keys -t top r"), 0);
        WAIT_UNTIL(sorted_by("resident", child), TEST_WAIT_S, "resident order; the screen:\n%s", screen);
        ASSERT_EQ(tmux("send-keys -t top n"), 0);
        WAIT_UNTIL(sorted_by("pid", getpid() < child ? getpid() : child), TEST_WAIT_S, "pid order; the screen:\n%s",
                   screen);
        ASSERT_EQ(tmux("send-keys -t top e"), 0);

        /* faults while it runs: a rate in this process's row and in the summary */
        WAIT_UNTIL(faulting_shows(c, getpid(), buf, hashes), TEST_WAIT_S, "a fault rate; the screen:\n%s", screen);
        ASSERT_EQ(verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes), 0);
        ASSERT_TRUE(td_pageout_want(c, buf, NPAGES * ZSWAP_PAGE_SIZE, NPAGES / 2) > 0);

        /* a narrower, shorter window: every line cut, nothing wraps */
        ASSERT_EQ(tmux("resize-window -t top -x 64 -y 10"), 0);
        WAIT_UNTIL(fits(64) && strstr(screen, "every 0.2s"), TEST_WAIT_S, "lines of 64 columns at most; the screen:\n%s",
                   screen);
        ASSERT_EQ(tmux("resize-window -t top -x %d -y %d", COLS, ROWS), 0);

        /* the daemon goes: the view says so; a new one adopts the clients,
         * and their rows are back */
        td_kill(&d);
        WAIT_UNTIL((capture(), strstr(screen, "zswapd stopped answering") || strstr(screen, "zswapd is not running")),
                   TEST_WAIT_S, "the daemon gone; the screen:\n%s", screen);
        td_respawn(&d);
        WAIT_UNTIL((capture(), row_of(getpid(), &r) && row_of(child, &r)), TEST_WAIT_S,
                   "the rows after the restart; the screen:\n%s", screen);

        /* q: top exits 0, the normal screen is back, and so is the line
         * discipline (the shell after top writes stty's view, then top's
         * exit status) */
        ASSERT_EQ(tmux("send-keys -t top q"), 0);
        char status_path[PATH_MAX + 8], st_text[32] = "";
        snprintf(status_path, sizeof(status_path), "%s.rc", stty_out);
        for (uint64_t end = test_now_ns() + TEST_WAIT_S * 1000000000ull; test_now_ns() < end; usleep(20000)) {
                FILE *p = fopen(status_path, "r");
                bool got = p && fgets(st_text, sizeof(st_text), p) && strchr(st_text, '\n');
                if (p)
                        fclose(p);
                if (got)
                        break;
        }
        unlink(status_path);
        if (strcmp(st_text, "0\n") != 0)
                test_fail("after q: top's exit status '%s', not 0; the screen:\n%s", st_text, capture());
        capture();
        if (strstr(screen, "Memory:") || strstr(screen, "PID USER"))
                test_fail("after q the view is still on the screen (alternate screen not left):\n%s", screen);
        FILE *f = fopen(stty_out, "r");
        ASSERT_TRUE(f);
        char modes[8192];
        size_t n = fread(modes, 1, sizeof(modes) - 1, f);
        modes[n] = 0;
        fclose(f);
        unlink(stty_out);
        if (strstr(modes, "-icanon") || strstr(modes, "-echo ") || !strstr(modes, "icanon") || !strstr(modes, " echo "))
                test_fail("the terminal was left without icanon or echo:\n%s", modes);

        /* every page of both clients */
        ASSERT_EQ(verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes), 0);
        ASSERT_EQ(write(go[1], "g", 1), 1);
        int st;
        ASSERT_EQ(waitpid(child, &st, 0), child);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("the child: status %#x (21: its pages read back wrong)", st);
        zswap_disconnect(c);
        td_stop(&d);
        printf("ok: top showed both clients, a pageout, three orders, a fault rate, a resize, a restart; q put the "
               "terminal back\n");
        return 0;
}
