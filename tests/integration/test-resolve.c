/*
 * test-resolve: an NBD export named by a host name can be reached again
 * from inside the sandbox.
 *
 * The daemon looks the name of a second tier's NBD server up at every
 * (re)connect (daemon/tier/nbd-connect.c), and the reconnects happen after
 * sandbox_enter(): the system call filter must let glibc's DNS resolver
 * through (it sends the A and AAAA queries together with sendmmsg()).
 * Otherwise a server that restarts can never be reached again, and the
 * pages on it cannot be read back.
 *
 * A child process gets a mount and a network namespace of its own: lo up,
 * /etc/resolv.conf naming 127.0.0.1 and /etc/nsswitch.conf asking files
 * then DNS, bound over the real ones there only. A DNS responder of ours,
 * forked in that namespace, answers A queries for NAME with 127.0.0.1 and
 * AAAA queries with nothing. The child enters the daemon's sandbox (with
 * the inet sockets a TCP tier gets), then looks NAME up with
 * getaddrinfo() and must get 127.0.0.1, and connects to
 * nbd://NAME:PORT/x through nbd_connect() with nothing listening there:
 * it must fail with "connection refused" (the name was resolved), not
 * "cannot resolve". The responder reports how many queries it answered,
 * and the sandbox must have refused no call on the way (its SIGSYS handler
 * logs each: the child's log is read back).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macro.h"
#include "nbd.h"
#include "sandbox.h"
#include "test.h"

#define NAME "nbd.zswapd-test.example"
#define PORT "10809"

/* A DNS answer to the query q (n bytes) in a: A queries for NAME get
 * 127.0.0.1, anything else an empty NOERROR. Its length, or 0. */
static size_t dns_answer(const uint8_t *q, size_t n, uint8_t *a, bool *is_a) {
        size_t at = 12;

        if (n < 12 || (q[2] & 0x80))
                return 0;
        while (at < n && q[at] != 0)
                at += (size_t)q[at] + 1;
        if (at + 5 > n)
                return 0;
        size_t qend = at + 5; /* the root label, qtype, qclass */
        *is_a = q[at + 1] == 0 && q[at + 2] == 1;
        memcpy(a, q, qend);
        a[2] = 0x81; /* QR, RD */
        a[3] = 0x80; /* RA, NOERROR */
        a[4] = 0, a[5] = 1;
        a[6] = 0, a[7] = *is_a ? 1 : 0;
        memset(a + 8, 0, 4); /* no authority, no additional records */
        if (!*is_a)
                return qend;
        static const uint8_t rr[] = { 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1 };
        memcpy(a + qend, rr, sizeof(rr));
        return qend + sizeof(rr);
}

/* The responder, on 127.0.0.1:53 of the namespace; writes how many A
 * queries it answered to report when killed. */
static void responder(int udp, int report) {
        uint8_t q[512], a[600];
        unsigned answered = 0;

        for (;;) {
                struct sockaddr_in from;
                socklen_t fl = sizeof(from);
                ssize_t n = recvfrom(udp, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
                bool is_a = false;
                if (n < 0)
                        continue;
                size_t len = dns_answer(q, (size_t)n, a, &is_a);
                if (len && sendto(udp, a, len, 0, (struct sockaddr *)&from, fl) == (ssize_t)len && is_a) {
                        answered++;
                        if (write(report, &answered, sizeof(answered)) < 0)
                                _exit(1);
                }
        }
}

static void lo_up(void) {
        struct ifreq ifr = { 0 };
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        ASSERT_TRUE(s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0);
        ifr.ifr_flags |= IFF_UP;
        ASSERT_OK(ioctl(s, SIOCSIFFLAGS, &ifr));
        close(s);
}

static void bind_file(const char *dir, const char *name, const char *text, const char *over) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f != NULL);
        fputs(text, f);
        ASSERT_OK(fclose(f));
        if (mount(path, over, NULL, MS_BIND, NULL) < 0)
                test_fail("bind %s over %s: %s", path, over, strerror(errno));
}

/* In the namespaces, sandboxed: the checks. Its exit status. */
static int sandboxed(void) {
        const struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
        struct addrinfo *res = NULL;
        char err[256] = "";
        NbdAddr a;
        NbdConn *c = NULL;

        if (sandbox_enter(&(SandboxConfig){ .tier_inet = true }) < 0)
                return 10;
        int g = getaddrinfo(NAME, PORT, &hints, &res);
        if (g != 0) {
                fprintf(stderr, "in the sandbox: getaddrinfo(%s): %s (%s)\n", NAME, gai_strerror(g),
                        g == EAI_SYSTEM ? strerror(errno) : "-");
                return 11;
        }
        bool local = false;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
                if (ai->ai_family == AF_INET &&
                    ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK))
                        local = true;
        freeaddrinfo(res);
        if (!local) {
                fprintf(stderr, "in the sandbox: %s did not resolve to 127.0.0.1\n", NAME);
                return 12;
        }
        /* the daemon's own path: its lookup thread, then the connect */
        if (nbd_parse("nbd://" NAME ":" PORT "/x", &a, err, sizeof(err)) < 0)
                return 13;
        int r = nbd_connect(&a, TEST_WAIT_S * 1000, &c, err, sizeof(err));
        fprintf(stderr, "in the sandbox: nbd_connect(%s): %s\n", NAME, r < 0 ? err : "connected");
        if (c)
                nbd_close(c);
        return r == -ECONNREFUSED ? 0 : 14;
}

static int child_main(const char *dir, int report) {
        if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0) {
                fprintf(stderr, "unshare: %s\n", strerror(errno));
                return 77;
        }
        ASSERT_OK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
        lo_up();
        bind_file(dir, "resolv.conf", "nameserver 127.0.0.1\noptions timeout:2 attempts:3\n", "/etc/resolv.conf");
        bind_file(dir, "nsswitch.conf", "hosts: files dns\n", "/etc/nsswitch.conf");

        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(udp >= 0);
        ASSERT_OK(bind(udp, (struct sockaddr *)&sa, sizeof(sa)));
        pid_t dns = fork();
        ASSERT_TRUE(dns >= 0);
        if (dns == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                responder(udp, report);
        }
        close(udp);
        close(report);
        /* the responder answers outside the sandbox first: the setup works */
        struct addrinfo *res = NULL;
        int g = getaddrinfo(NAME, PORT, &(struct addrinfo){ .ai_socktype = SOCK_STREAM }, &res);
        if (g != 0)
                test_fail("the responder does not answer outside the sandbox: %s", gai_strerror(g));
        freeaddrinfo(res);
        /* the responder dies with us (PR_SET_PDEATHSIG): kill() is not
         * one of the sandbox's calls */
        return sandboxed();
}

int main(void) {
        char dir[] = "/tmp/zswap-resolve-XXXXXX";
        int p[2];

        test_require_root();
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        char log[256];
        snprintf(log, sizeof(log), "%s/child.log", dir);
        if (pid == 0) {
                close(p[0]);
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                        _exit(20);
                _exit(child_main(dir, p[1]));
        }
        close(p[1]);
        int st;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        unsigned answered = 0, n;
        while (read(p[0], &n, sizeof(n)) == (ssize_t)sizeof(n))
                answered = n;
        close(p[0]);
        char text[16384];
        FILE *f = fopen(log, "re");
        size_t tn = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
        text[tn] = 0;
        if (f)
                fclose(f);
        fputs(text, stderr);
        unlink(log);
        char path[256];
        snprintf(path, sizeof(path), "%s/resolv.conf", dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/nsswitch.conf", dir);
        unlink(path);
        rmdir(dir);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
                test_skip("no mount or network namespace here");
        fprintf(stderr, "the responder answered %u A queries\n", answered);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("the sandboxed lookup failed: child status %#x", st);
        /* outside, in the sandbox, and nbd_connect()'s lookup */
        ASSERT_TRUE(answered >= 3);
        if (strstr(text, "refused system call"))
                test_fail("the sandbox refused a call of the lookup");
        return 0;
}
