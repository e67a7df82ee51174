/*
 * test-uffd-device: who gets a descriptor of /dev/userfaultfd, and that
 * nobody keeps one (userfaultfd_device in zswapd.conf, do_hello() in
 * client/lib/connect.c, uffd_create() in client/lib/libzswap.c).
 *
 * The device makes uffds that handle kernel-mode faults, which is what
 * vm.unprivileged_userfaultfd = 0 denies to unprivileged processes: a
 * process holding it can stall the kernel's copies at will, for as long
 * as it keeps the fd. The daemon hands it only to users the configuration
 * names (root always). Each case runs as a uid of the test's own (by
 * number), as test-users does.
 *
 *  - denied (allowed as a client, userfaultfd_device left at its default,
 *    no): a raw HELLO's reply carries no descriptor; zswap_connect()
 *    fails with EPERM where the sysctl is 0 (the library never falls back
 *    to UFFD_USER_MODE_ONLY), or works with a uffd of its own where it is
 *    1; the process never holds the device; the daemon's log names the key
 *  - granted ([user:N] userfaultfd_device = yes): a raw HELLO gets the
 *    device, a raw HELLO as a fork child does not. Through the library the
 *    process holds its uffd but not the device: after connect, in a forked
 *    child after CHILD_ATTACH (not under TSan, as in test-fork), after
 *    its daemon was killed and a new one adopted it (the recovery's
 *    reconnect), and after disconnect. Every page evicted reads back
 *    intact.
 */
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "util.h"

#define U_NODEV 60031
#define U_DEV 60032
#define NPAGES 128

static TestDaemon d;
static char conf_path[128];
static int sync_up[2], sync_down[2]; /* the recovery case: child -> test, test -> child */

/* Run fn as uid; its exit status. */
static int as_user(uid_t uid, int (*fn)(void)) {
        pid_t pid = fork();
        int st;

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                        _exit(90);
                prctl(PR_SET_DUMPABLE, 1); /* as a process a login started */
                _exit(fn());
        }
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* How many of this process's fds are the device, and how many uffds. */
static void count_fds(unsigned *dev, unsigned *uffds) {
        char path[PATH_MAX], target[256];
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *e;

        *dev = *uffds = 0;
        if (!dir)
                return;
        while ((e = readdir(dir))) {
                snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
                ssize_t n = readlink(path, target, sizeof(target) - 1);
                if (n <= 0)
                        continue;
                target[n] = 0;
                *dev += strcmp(target, "/dev/userfaultfd") == 0;
                *uffds += strstr(target, "[userfaultfd]") != NULL;
        }
        closedir(dir);
}

static bool holds_device(const char *when) {
        unsigned dev, uffds;
        count_fds(&dev, &uffds);
        if (dev)
                fprintf(stderr, "uid %u, pid %d: holds /dev/userfaultfd %s (%u fds)\n", getuid(), (int)getpid(), when,
                        dev);
        return dev > 0;
}

/* A raw HELLO as role: the reply's status, and how many fds came with it. */
static int raw_hello(uint32_t role, size_t *nfds) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        ZMsgHello h = { .role = role };
        int fds[2] = { -1, -1 };

        *nfds = 2;
        int s = unix_connect(d.sock);
        if (s < 0)
                return s;
        zmsg_init(&h.hdr, ZMSG_HELLO, 1, sizeof(h));
        int r = zmsg_send(s, &h, sizeof(h), NULL, 0);
        ssize_t n = r < 0 ? r : zmsg_recv(s, buf, sizeof(buf), fds, nfds, NULL);
        close(s);
        for (size_t i = 0; n > 0 && i < *nfds; i++)
                close(fds[i]);
        if (n < (ssize_t)sizeof(ZMsgReply))
                return n < 0 ? (int)n : -EPROTO;
        return ((const ZMsgReply *)buf)->status;
}

static int sysctl_unprivileged_userfaultfd(void) {
        int v = 0;
        FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "re");
        if (f) {
                if (fscanf(f, "%d", &v) != 1)
                        v = 0;
                fclose(f);
        }
        return v;
}

/* A region of real pages evicted and read back. */
static int cycle(struct zswap_client *c) {
        static uint64_t hashes[NPAGES];
        uint8_t *buf = td_region(c, NPAGES * ZSWAP_PAGE_SIZE, 3, hashes);
        if (zswap_pageout(c, buf, NPAGES * ZSWAP_PAGE_SIZE) <= 0)
                return 1;
        return verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes) ? 2 : 0;
}

static int denied_raw(void) {
        size_t nfds;
        int r = raw_hello(ZROLE_CLIENT, &nfds);
        fprintf(stderr, "denied: raw HELLO: status %d, %zu fds\n", r, nfds);
        if (r != 0)
                return 10;
        return nfds == 0 ? 0 : 11;
}

static int denied_client(void) {
        struct zswap_client *c;
        int r = zswap_connect(d.sock, &c);

        fprintf(stderr, "denied: zswap_connect: %d (%s), vm.unprivileged_userfaultfd = %d\n", r, strerror(-r),
                sysctl_unprivileged_userfaultfd());
        if (holds_device("after a refused connect"))
                return 20;
        if (sysctl_unprivileged_userfaultfd() == 0)
                return r == -EPERM ? 0 : 21;
        /* the sysctl lets it make a kernel-mode uffd of its own */
        if (r < 0)
                return 22;
        int bad = cycle(c);
        zswap_disconnect(c);
        return bad ? 23 : holds_device("after disconnect") ? 24 : 0;
}

static int granted_raw(void) {
        size_t nfds;
        int r = raw_hello(ZROLE_CLIENT, &nfds);
        if (r != 0 || nfds != 1) {
                fprintf(stderr, "granted: raw HELLO: status %d, %zu fds\n", r, nfds);
                return 30;
        }
        /* a fork child gets its uffd from the fork event, never the device */
        r = raw_hello(ZROLE_CHILD, &nfds);
        if (r != 0 || nfds != 0) {
                fprintf(stderr, "granted: raw HELLO as a child: status %d, %zu fds\n", r, nfds);
                return 31;
        }
        return 0;
}

static int granted_client(void) {
        static uint64_t hashes[NPAGES];
        struct zswap_client *c;
        unsigned dev, uffds;
        char b;

        int r = zswap_connect(d.sock, &c);
        if (r < 0) {
                fprintf(stderr, "granted: zswap_connect: %s\n", strerror(-r));
                return 40;
        }
        count_fds(&dev, &uffds);
        if (dev || uffds != 1) {
                fprintf(stderr, "granted: after connect: %u device fds, %u uffds\n", dev, uffds);
                return 41;
        }
        uint8_t *buf = td_region(c, NPAGES * ZSWAP_PAGE_SIZE, 9, hashes);
        if (zswap_pageout(c, buf, NPAGES * ZSWAP_PAGE_SIZE) <= 0)
                return 42;
#if defined(__SANITIZE_THREAD__)
        /* a fork child starts its agent thread after a multi-threaded
         * fork, which ThreadSanitizer's runtime cannot follow */
        pid_t pid = -2;
#else
        pid_t pid = fork();
#endif
        if (pid == -1)
                return 43;
        if (pid == 0) {
                /* attached (CHILD_ATTACH) by now, in the atfork handler */
                int bad = holds_device("in a fork child after attach") ? 1 : 0;
                bad |= verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes) ? 2 : 0;
                zswap_disconnect(c);
                bad |= holds_device("in a fork child after disconnect") ? 4 : 0;
                _exit(bad);
        }
        int st = 0;
        if (pid > 0 && (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
                fprintf(stderr, "granted: fork child: status %#x\n", st);
                return 44;
        }
        if (verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes))
                return 45;
        /* evicted again; the test kills the daemon and starts a new one,
         * which adopts us through the agent's reconnection */
        if (zswap_pageout(c, buf, NPAGES * ZSWAP_PAGE_SIZE) <= 0)
                return 46;
        if (write(sync_up[1], "k", 1) != 1 || read(sync_down[0], &b, 1) != 1)
                return 47;
        if (verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes))
                return 48;
        if (holds_device("after the recovery"))
                return 49;
        zswap_disconnect(c);
        return holds_device("after disconnect") ? 50 : 0;
}

static void start(const char *users) {
        char args[256];
        FILE *f = fopen(conf_path, "we");

        ASSERT_TRUE(f != NULL);
        fprintf(f, "%s", users);
        ASSERT_OK(fclose(f));
        snprintf(args, sizeof(args), "--config %s", conf_path);
        td_start_logged(&d, args);
}

int main(void) {
        char users[256];
        int r;

        test_require_root();
        snprintf(conf_path, sizeof(conf_path), "/tmp/test-uffd-device-%d.conf", (int)getpid());

        /* both allowed; neither granted the device: the default */
        snprintf(users, sizeof(users), "[users]\nallow = %d %d\n", U_NODEV, U_DEV);
        start(users);
        r = as_user(U_NODEV, denied_raw);
        if (r)
                test_fail("denied user, raw HELLO: case failed (%d)", r);
        r = as_user(U_NODEV, denied_client);
        if (r)
                test_fail("denied user, zswap_connect: case failed (%d)", r);
        if (!td_log_has(&d, "userfaultfd_device = no")) {
                td_log_dump(&d);
                test_fail("the daemon's log does not name userfaultfd_device");
        }
        td_stop(&d);
        unlink(d.log);

        /* one user granted it */
        snprintf(users, sizeof(users), "[users]\nallow = %d %d\n[user:%d]\nuserfaultfd_device = yes\n", U_NODEV, U_DEV,
                 U_DEV);
        start(users);
        r = as_user(U_DEV, granted_raw);
        if (r)
                test_fail("granted user, raw HELLO: case failed (%d)", r);
        ASSERT_OK(pipe2(sync_up, O_CLOEXEC));
        ASSERT_OK(pipe2(sync_down, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(as_user(U_DEV, granted_client));
        char b;
        int st;
        if (read(sync_up[0], &b, 1) == 1) {
                td_kill(&d);
                td_respawn(&d);
                fprintf(stderr, "granted: the daemon killed and started again under the client\n");
                ASSERT_EQ(write(sync_down[1], "g", 1), 1);
        }
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                td_log_dump(&d);
                test_fail("granted user, through the library: case failed (status %#x)", st);
        }
        td_stop(&d);
        unlink(d.log);
        unlink(conf_path);
        return 0;
}
