/*
 * test-systemd: systemd's service protocol with a real zswapd, the test
 * playing the service manager (daemon/util/sd-daemon.c).
 *
 *  notify      READY=1 with a STATUS=, WATCHDOG=1 at half WATCHDOG_USEC,
 *              RELOADING=1 + MONOTONIC_USEC then READY=1 around SIGHUP,
 *              STOPPING=1 on SIGTERM and exit 0; every datagram from the
 *              daemon's pid (SCM_CREDENTIALS), none from anyone else.
 *  activation  a listening socket passed as fd 3 (LISTEN_FDS, LISTEN_PID
 *              set in the child): a real client's pages go out and come
 *              back through it, the daemon made it non-blocking, bound
 *              nothing itself and left the socket file alone. Again under
 *              systemd-socket-activate, a second real activator.
 *  bad fds     a TCP socket, a stream or non-listening AF_UNIX socket, a
 *              non-socket, a closed fd 3, two fds, garbage: exit 2 and a
 *              message saying what is wrong.
 *  caps        the daemon under zswapd.service's CapabilityBoundingSet
 *              serves another user's process.
 */
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"

#define REGION_LEN (16u << 20)

extern char **environ;

static char tmpdir[64];

/* ---- the daemon, started as a service manager would ---- */

typedef struct Spawn {
        const char *notify;   /* NOTIFY_SOCKET, or NULL */
        const char *watchdog; /* WATCHDOG_USEC, or NULL */
        int listen_fd;        /* becomes fd 3 with LISTEN_FDS=1, or -1 */
        const char *listen_fds; /* LISTEN_FDS instead of "1" (with or without listen_fd) */
        const char *cap_bset; /* CapabilityBoundingSet= to apply, or NULL */
        int err_fd;           /* the daemon's stderr, or -1 */
        const char *argv[16]; /* after the program */
} Spawn;

static const char *daemon_path(void) {
        const char *p = getenv("ZSWAPD");
        if (!p)
                test_skip("ZSWAPD not set (run through meson test)");
        return p;
}

/* Drop every capability not named in a CapabilityBoundingSet= value. */
static void apply_bounding_set(const char *set) {
        for (cap_value_t cap = 0; cap <= CAP_LAST_CAP; cap++) {
                char *name = cap_to_name(cap), want[64], padded[1100];
                snprintf(want, sizeof(want), " %s ", name);
                for (char *p = want; *p; p++)
                        *p = (char)toupper((unsigned char)*p);
                cap_free(name);
                snprintf(padded, sizeof(padded), " %s ", set);
                if (!strstr(padded, want) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
                        _exit(126);
        }
}

static pid_t spawn(const Spawn *s) {
        const char *argv[20] = { daemon_path() };
        size_t n = 1;
        for (size_t i = 0; s->argv[i]; i++)
                argv[n++] = s->argv[i];

        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid > 0)
                return pid;
        /* the test is single-threaded when it forks: setenv is fine here */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        unsetenv("WATCHDOG_PID");
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        if (s->notify)
                setenv("NOTIFY_SOCKET", s->notify, 1);
        if (s->watchdog)
                setenv("WATCHDOG_USEC", s->watchdog, 1);
        if (s->err_fd >= 0)
                dup2(s->err_fd, STDERR_FILENO);
        if (s->listen_fd >= 0 || s->listen_fds) {
                char pidbuf[32];
                if (s->listen_fd >= 0 && s->listen_fd != 3 && dup2(s->listen_fd, 3) < 0)
                        _exit(125);
                if (s->listen_fd < 0)
                        close(3);
                else
                        fcntl(3, F_SETFD, 0); /* inherited across exec, as systemd passes it */
                if (s->listen_fd >= 0 && s->listen_fds && strcmp(s->listen_fds, "2") == 0)
                        dup2(3, 4); /* a second fd that is really there */
                snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
                setenv("LISTEN_PID", pidbuf, 1);
                setenv("LISTEN_FDS", s->listen_fds ? s->listen_fds : "1", 1);
        }
        if (s->cap_bset)
                apply_bounding_set(s->cap_bset);
        execv(argv[0], (char **)argv);
        _exit(127);
}

static int wait_exit(pid_t pid) {
        int st;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st))
                test_fail("zswapd died: status %#x", st);
        return WEXITSTATUS(st);
}

/* ---- the notification socket ---- */

static int notify_socket(const char *name, bool abstract, char *addr, size_t addrlen) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int one = 1, fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        socklen_t len;

        ASSERT_OK(fd);
        if (abstract) {
                snprintf(addr, addrlen, "@zswapd-test-%d-%s", (int)getpid(), name);
                memcpy(sa.sun_path + 1, addr + 1, strlen(addr) - 1);
                len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(addr));
        } else {
                snprintf(addr, addrlen, "%s/%s", tmpdir, name);
                strcpy(sa.sun_path, addr);
                len = sizeof(sa);
        }
        ASSERT_OK(bind(fd, (struct sockaddr *)&sa, len));
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)));
        return fd;
}

/*
 * The next datagram: its text in buf, its sender checked against pid. The
 * timeout only keeps a broken daemon from hanging the test.
 */
static void notify_recv(int fd, pid_t pid, char *buf, size_t len) {
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(struct ucred))];
        } cm;
        struct iovec iov = { .iov_base = buf, .iov_len = len - 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &cm, .msg_controllen = sizeof(cm) };
        struct pollfd p = { .fd = fd, .events = POLLIN };

        if (poll(&p, 1, 60000) != 1)
                test_fail("no notification from zswapd within a minute");
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        ASSERT_OK(n);
        buf[n] = 0;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (!c || c->cmsg_type != SCM_CREDENTIALS)
                test_fail("notification without credentials: \"%s\"", buf);
        struct ucred cred;
        memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        if (cred.pid != pid)
                test_fail("notification \"%s\" from pid %d, not zswapd's %d", buf, (int)cred.pid, (int)pid);
        ASSERT_EQ(cred.uid, getuid());
}

/* Does the datagram hold this line ("READY=1")? */
static bool has_line(const char *msg, const char *line) {
        size_t n = strlen(line);
        for (const char *p = msg; p; p = strchr(p, '\n')) {
                if (*p == '\n')
                        p++;
                if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == 0))
                        return true;
        }
        return false;
}

static const char *line_value(const char *msg, const char *key) {
        size_t n = strlen(key);
        for (const char *p = msg; p; p = strchr(p, '\n')) {
                if (*p == '\n')
                        p++;
                if (strncmp(p, key, n) == 0)
                        return p + n;
        }
        return NULL;
}

/*
 * Wait for a datagram with the line `want`, counting WATCHDOG=1 pings on
 * the way; any other datagram must be a STATUS= update alone.
 */
static void expect(int fd, pid_t pid, const char *want, char *buf, size_t len, unsigned *pings) {
        for (;;) {
                notify_recv(fd, pid, buf, len);
                fprintf(stderr, "  <- %s\n", buf);
                if (has_line(buf, want))
                        return;
                if (strcmp(buf, "WATCHDOG=1") == 0) {
                        if (pings)
                                ++*pings;
                        continue;
                }
                if (strncmp(buf, "STATUS=", 7) == 0 && !strchr(buf, '\n'))
                        continue;
                test_fail("waiting for %s, got \"%s\"", want, buf);
        }
}

static uint64_t monotonic_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void test_notify(void) {
        char addr[108], sock[128], conf[128], buf[4096];
        unsigned pings = 0;
        int nfd = notify_socket("notify", false, addr, sizeof(addr));

        fprintf(stderr, "notify: %s\n", addr);
        snprintf(sock, sizeof(sock), "%s/notify.sock", tmpdir);
        snprintf(conf, sizeof(conf), "%s/zswapd.conf", tmpdir);
        FILE *f = fopen(conf, "we");
        ASSERT_TRUE(f);
        fprintf(f, "[reclaim]\nidle_age = 0\n");
        fclose(f);
        Spawn s = { .notify = addr, .watchdog = "400000", .listen_fd = -1, .err_fd = -1,
                    .argv = { "--socket", sock, "--config", conf, "-w", "2", "-t", "2" } };
        pid_t pid = spawn(&s);

        expect(nfd, pid, "READY=1", buf, sizeof(buf), &pings);
        const char *status = line_value(buf, "STATUS=");
        if (!status || !strstr(status, "0 clients"))
                test_fail("READY=1 without a STATUS= summary: \"%s\"", buf);
        /* the socket serves once READY=1 is out */
        struct zswap_client *c = NULL;
        ASSERT_OK(zswap_connect(sock, &c));
        zswap_disconnect(c);

        /* two pings, each alone in its datagram (at half of 400 ms) */
        unsigned before = pings;
        while (pings < before + 2) {
                notify_recv(nfd, pid, buf, sizeof(buf));
                if (strncmp(buf, "STATUS=", 7) == 0 && !strchr(buf, '\n'))
                        continue;
                if (strcmp(buf, "WATCHDOG=1") != 0)
                        test_fail("expected WATCHDOG=1, got \"%s\"", buf);
                pings++;
        }

        /* a reload: RELOADING=1 stamped with the monotonic clock, then READY=1 */
        uint64_t t0 = monotonic_usec();
        ASSERT_OK(kill(pid, SIGHUP));
        expect(nfd, pid, "RELOADING=1", buf, sizeof(buf), &pings);
        uint64_t t1 = monotonic_usec();
        const char *mono = line_value(buf, "MONOTONIC_USEC=");
        if (!mono)
                test_fail("RELOADING=1 without MONOTONIC_USEC=: \"%s\"", buf);
        uint64_t usec = strtoull(mono, NULL, 10);
        if (usec < t0 || usec > t1)
                test_fail("MONOTONIC_USEC=%llu not between the SIGHUP (%llu) and its receipt (%llu)",
                          (unsigned long long)usec, (unsigned long long)t0, (unsigned long long)t1);
        expect(nfd, pid, "READY=1", buf, sizeof(buf), &pings);
        ASSERT_TRUE(line_value(buf, "STATUS=") != NULL);
        ASSERT_TRUE(line_value(buf, "RELOADING=") == NULL);

        /* still pinging after the reload */
        expect(nfd, pid, "WATCHDOG=1", buf, sizeof(buf), NULL);
        pings++;

        ASSERT_OK(kill(pid, SIGTERM));
        expect(nfd, pid, "STOPPING=1", buf, sizeof(buf), &pings);
        ASSERT_EQ(wait_exit(pid), 0);
        struct stat st;
        ASSERT_ERROR(stat(sock, &st), ENOENT); /* its own socket: removed */
        fprintf(stderr, "notify: ok (%u watchdog pings)\n", pings);
        close(nfd);
}

/* ---- socket activation ---- */

static int listen_seqpacket(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0); /* blocking: zswapd must fix that */

        ASSERT_OK(fd);
        ASSERT_TRUE(strlen(path) < sizeof(sa.sun_path));
        memcpy(sa.sun_path, path, strlen(path));
        ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(chmod(path, 0666));
        ASSERT_OK(listen(fd, 16));
        return fd;
}

/* A client's whole life through the socket: pages out and back, every one checked. */
static void client_roundtrip(const char *sock, uint64_t seed) {
        uint64_t *hashes = malloc(REGION_LEN / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        struct zswap_client *c = NULL;

        ASSERT_TRUE(hashes);
        ASSERT_OK(zswap_connect(sock, &c));
        uint8_t *buf = td_region(c, REGION_LEN, seed, hashes);
        int n = zswap_pageout(c, buf, REGION_LEN);
        ASSERT_OK(n);
        ASSERT_TRUE(n > (int)(REGION_LEN / ZSWAP_PAGE_SIZE) * 9 / 10);
        struct zswap_stats s;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, (uint64_t)n);
        ASSERT_EQ(verify_pages(buf, REGION_LEN, hashes), 0);
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);
        zswap_disconnect(c);
        munmap(buf, REGION_LEN);
        free(hashes);
        fprintf(stderr, "  %d pages out and back through %s\n", n, sock);
}

/* The socket outlived the daemon: the file is there and the kernel still queues connects on it. */
static void check_socket_kept(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;

        ASSERT_OK(stat(path, &st));
        ASSERT_TRUE(S_ISSOCK(st.st_mode));
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(strlen(path) < sizeof(sa.sun_path));
        memcpy(sa.sun_path, path, strlen(path));
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        close(fd);
}

static void test_activation(void) {
        char addr[108], path[128], own[128], buf[4096];
        int nfd = notify_socket("act", true, addr, sizeof(addr)); /* and the abstract form */
        struct stat st;

        snprintf(path, sizeof(path), "%s/activated.sock", tmpdir);
        snprintf(own, sizeof(own), "%s/not-bound.sock", tmpdir);
        int lfd = listen_seqpacket(path);
        Spawn s = { .notify = addr, .listen_fd = lfd, .err_fd = -1,
                    .argv = { "--socket", own, "-w", "2", "-t", "2" } };
        pid_t pid = spawn(&s);

        expect(nfd, pid, "READY=1", buf, sizeof(buf), NULL);
        /* fd 3 is our socket's open file description: its flags are ours to see */
        ASSERT_TRUE(fcntl(lfd, F_GETFL) & O_NONBLOCK);
        ASSERT_ERROR(stat(own, &st), ENOENT);
        client_roundtrip(path, 11);
        client_roundtrip(path, 12); /* and a second connection */

        ASSERT_OK(kill(pid, SIGTERM));
        expect(nfd, pid, "STOPPING=1", buf, sizeof(buf), NULL);
        ASSERT_EQ(wait_exit(pid), 0);
        check_socket_kept(path);
        ASSERT_ERROR(stat(own, &st), ENOENT);
        close(lfd);
        ASSERT_OK(unlink(path));
        close(nfd);
        fprintf(stderr, "activation: ok\n");
}

/* Is a socket bound at path listening? /proc/net/unix marks it with
 * __SO_ACCEPTCON (0x10000) in its flags column. */
static bool unix_listening(const char *path) {
        FILE *f = fopen("/proc/net/unix", "re");
        char line[512];
        bool found = false;

        ASSERT_TRUE(f != NULL);
        while (!found && fgets(line, sizeof(line), f)) {
                unsigned long flags;
                char name[256];
                if (sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %255s", &flags, name) == 2 &&
                    strcmp(name, path) == 0 && (flags & 0x10000))
                        found = true;
        }
        fclose(f);
        return found;
}

/* The same under systemd's own activator: it binds, listens and execs zswapd. */
static void test_socket_activate_tool(void) {
        static const char *tools[] = { "/usr/bin/systemd-socket-activate", "/bin/systemd-socket-activate",
                                       "/lib/systemd/systemd-activate" };
        const char *tool = NULL;
        char addr[108], path[128], own[128], notify_env[160], buf[4096];
        struct stat st;

        for (size_t i = 0; i < ELEMENTSOF(tools) && !tool; i++)
                if (access(tools[i], X_OK) == 0)
                        tool = tools[i];
        if (!tool) {
                fprintf(stderr, "systemd-socket-activate: not installed, that part skipped\n");
                return;
        }
        int nfd = notify_socket("tool", false, addr, sizeof(addr));
        snprintf(path, sizeof(path), "%s/tool.sock", tmpdir);
        snprintf(own, sizeof(own), "%s/tool-not-bound.sock", tmpdir);
        snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s", addr);

        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                /* it passes on only the variables it is told to (-E) */
                const char *argv[24] = { tool, "--seqpacket", "--listen", path, "-E", notify_env };
                size_t n = 6;
                static const char *keep[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS",
                                              "ZSWAPD_CONFIG" };
                for (size_t i = 0; i < ELEMENTSOF(keep); i++)
                        if (getenv(keep[i])) {
                                argv[n++] = "-E";
                                argv[n++] = keep[i];
                        }
                argv[n++] = daemon_path();
                argv[n++] = "--socket";
                argv[n++] = own;
                argv[n++] = "-w";
                argv[n++] = "2";
                argv[n++] = "-t";
                argv[n++] = "2";
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                execv(tool, (char **)argv);
                _exit(127);
        }
        /* It listens, and execs zswapd (in its own process: same pid) at
         * the first connection: the client's connect starts the daemon.
         * The file is there from its bind(); a connect before its listen()
         * is refused, so wait for the kernel to list it as listening. */
        for (unsigned i = 0; !unix_listening(path); i++) {
                if (i == 6000)
                        test_fail("%s never listened on %s", tool, path);
                usleep(10000);
        }
        client_roundtrip(path, 21);
        expect(nfd, pid, "READY=1", buf, sizeof(buf), NULL);
        ASSERT_ERROR(stat(own, &st), ENOENT);
        ASSERT_OK(kill(pid, SIGTERM));
        expect(nfd, pid, "STOPPING=1", buf, sizeof(buf), NULL);
        ASSERT_EQ(wait_exit(pid), 0);
        /* the activator made the socket; zswapd leaves it where it found it */
        ASSERT_OK(stat(path, &st));
        ASSERT_TRUE(S_ISSOCK(st.st_mode));
        unlink(path);
        close(nfd);
        fprintf(stderr, "systemd-socket-activate: ok\n");
}

/* ---- what a service manager could get wrong ---- */

static void expect_refused(const char *what, int fd, const char *listen_fds, const char *message) {
        char own[128], out[4096] = "";
        int pipefd[2];
        struct stat st;

        snprintf(own, sizeof(own), "%s/refused.sock", tmpdir);
        ASSERT_OK(pipe2(pipefd, O_CLOEXEC));
        Spawn s = { .listen_fd = fd, .listen_fds = listen_fds, .err_fd = pipefd[1],
                    .argv = { "--socket", own, "-w", "1", "-t", "1" } };
        pid_t pid = spawn(&s);
        close(pipefd[1]);
        size_t len = 0;
        for (ssize_t n; (n = read(pipefd[0], out + len, sizeof(out) - 1 - len)) > 0;)
                len += (size_t)n;
        out[len] = 0;
        close(pipefd[0]);
        int code = wait_exit(pid);
        fprintf(stderr, "%s: exit %d: %s", what, code, out);
        if (code != 2)
                test_fail("%s: exit %d, expected 2", what, code);
        if (!strstr(out, message))
                test_fail("%s: message lacks \"%s\"", what, message);
        ASSERT_ERROR(stat(own, &st), ENOENT); /* it did not fall back to a socket of its own */
}

static void test_bad_fds(void) {
        static const char *wrong_socket = "fd 3 is not a listening AF_UNIX SOCK_SEQPACKET socket";
        char path[128];

        int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in in = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_OK(tcp);
        ASSERT_OK(bind(tcp, (struct sockaddr *)&in, sizeof(in)));
        ASSERT_OK(listen(tcp, 4));
        expect_refused("TCP socket", tcp, NULL, wrong_socket);
        close(tcp);

        int stream = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(path, sizeof(path), "%s/stream.sock", tmpdir);
        strcpy(sa.sun_path, path);
        ASSERT_OK(bind(stream, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(stream, 4));
        expect_refused("AF_UNIX stream socket", stream, NULL, wrong_socket);
        close(stream);
        unlink(path);

        int quiet = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        snprintf(path, sizeof(path), "%s/quiet.sock", tmpdir);
        strcpy(sa.sun_path, path);
        ASSERT_OK(bind(quiet, (struct sockaddr *)&sa, sizeof(sa)));
        expect_refused("seqpacket socket not listening", quiet, NULL, wrong_socket);
        close(quiet);
        unlink(path);

        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        expect_refused("not a socket", null, NULL, wrong_socket);
        close(null);

        snprintf(path, sizeof(path), "%s/two.sock", tmpdir);
        int two = listen_seqpacket(path); /* passed as fds 3 and 4 */
        expect_refused("LISTEN_FDS=2", two, "2", "LISTEN_FDS=2: socket activation passes one socket");
        close(two);
        unlink(path);

        expect_refused("fd 3 closed", -1, "1", "bad LISTEN_PID/LISTEN_FDS");
        expect_refused("LISTEN_FDS=x", -1, "x", "bad LISTEN_PID/LISTEN_FDS");
        fprintf(stderr, "bad fds: ok\n");
}

/* ---- the unit's capability set ---- */

static bool unit_bounding_set(char *set, size_t len) {
        char path[PATH_MAX], line[1024];
        const char *dir = getenv("UNIT_BUILDDIR");
        bool found = false;

        if (!dir)
                return false;
        snprintf(path, sizeof(path), "%s/zswapd.service", dir);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "CapabilityBoundingSet=", 22) == 0) {
                        line[strcspn(line, "\n")] = 0;
                        snprintf(set, len, "%s", line + 22);
                        found = true;
                }
        fclose(f);
        return found;
}

/* Another user's process, served by a daemon holding only the unit's capabilities. */
static void test_unit_capabilities(void) {
        char set[1024], path[128], addr[108], buf[4096];

        if (!unit_bounding_set(set, sizeof(set)))
                test_fail("no CapabilityBoundingSet= in $UNIT_BUILDDIR/zswapd.service");
        fprintf(stderr, "caps: %s\n", set);
        int nfd = notify_socket("caps", false, addr, sizeof(addr));
        snprintf(path, sizeof(path), "%s/caps.sock", tmpdir);
        int lfd = listen_seqpacket(path);
        /* nobody gets /dev/userfaultfd: the sysctl may deny it a
         * kernel-mode userfaultfd of its own (zswapd.conf(5)) */
        char conf[128];
        snprintf(conf, sizeof(conf), "%s/caps.conf", tmpdir);
        FILE *cf = fopen(conf, "we");
        ASSERT_TRUE(cf != NULL);
        fputs("[users]\nuserfaultfd_device = yes\n", cf);
        ASSERT_OK(fclose(cf));
        Spawn s = { .notify = addr, .listen_fd = lfd, .cap_bset = set, .err_fd = -1,
                    .argv = { "--allow-users", "--config", conf, "-w", "2", "-t", "2" } };
        pid_t pid = spawn(&s);
        expect(nfd, pid, "READY=1", buf, sizeof(buf), NULL);

        pid_t client = fork();
        ASSERT_TRUE(client >= 0);
        if (client == 0) {
                fill_pages(test_map(ZSWAP_PAGE_SIZE), ZSWAP_PAGE_SIZE, 1); /* the corpus, read as root */
                if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
                        _exit(3);
                /* as a program nobody exec'd: dumpable, so its /proc/PID files
                 * are nobody's (a uid change made them root's) */
                if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
                        _exit(4);
                client_roundtrip(path, 31);
                _exit(0);
        }
        int st;
        ASSERT_EQ(waitpid(client, &st, 0), client);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("the client as nobody failed: status %#x", st);
        ASSERT_OK(kill(pid, SIGTERM));
        ASSERT_EQ(wait_exit(pid), 0);
        close(lfd);
        unlink(path);
        unlink(conf);
        close(nfd);
        fprintf(stderr, "caps: ok\n");
}

int main(void) {
        test_require_root();
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/zswapd-systemd-XXXXXX");
        ASSERT_TRUE(mkdtemp(tmpdir));
        ASSERT_OK(chmod(tmpdir, 0755)); /* the unprivileged client reaches its socket */

        test_bad_fds();
        test_notify();
        test_activation();
        test_socket_activate_tool();
        test_unit_capabilities();

        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
        ASSERT_EQ(system(cmd), 0);
        return 0;
}
