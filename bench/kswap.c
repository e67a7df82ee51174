/*
 * kswap.c: helpers for the kernel swap the benchmarks set up (see kswap.h).
 *
 * What they share: sysfs and procfs are written with one write() per value
 * (a sysfs store sees exactly what was written), and every step that the
 * kernel may abandon when a signal arrives (swapoff reading pages back,
 * waiting for mkswap) is retried, because the benches catch SIGINT and still
 * have to undo what they set up.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kswap.h"
#include "macro.h"

void kswap_sleep_ms(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

int kswap_write_file(const char *path, const char *s) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        size_t n = strlen(s);
        ssize_t k;

        if (fd < 0)
                return -errno;
        k = write(fd, s, n);
        if (k < 0)
                return -errno;
        return (size_t)k == n ? 0 : -EIO;
}

int kswap_read_file(const char *path, char *buf, size_t size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t k;

        if (fd < 0)
                return -errno;
        k = read(fd, buf, size - 1);
        if (k < 0)
                return -errno;
        if (k > 0 && buf[k - 1] == '\n')
                k--;
        buf[k] = 0;
        return 0;
}

int kswap_read_u64(const char *path, uint64_t *ret) {
        char buf[64];
        char *end;
        unsigned long long v;
        int r;

        r = kswap_read_file(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        errno = 0;
        v = strtoull(buf, &end, 10);
        if (errno || end == buf || *end || buf[0] == '-')
                return -EBADMSG;
        *ret = v;
        return 0;
}

int kswap_read_int(const char *path, int *ret) {
        uint64_t v;
        int r;

        r = kswap_read_u64(path, &v);
        if (r < 0)
                return r;
        if (v > INT32_MAX)
                return -EBADMSG;
        *ret = (int)v;
        return 0;
}

int kswap_mkswap(const char *dev) {
        int status;
        pid_t pid;

        /* _Fork(): no atfork handlers (libzswap's) for a child that only execs. */
        pid = _Fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

                setpgid(0, 0);
                /* Silence the "Setting up swapspace" chatter, keep errors. */
                if (null >= 0)
                        dup2(null, STDOUT_FILENO);
                execl("/sbin/mkswap", "mkswap", dev, (char *)NULL);
                execl("/usr/sbin/mkswap", "mkswap", dev, (char *)NULL);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

int kswap_swapon(const char *dev) {
        int flags = SWAP_FLAG_PREFER | ((KSWAP_PRIO << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK);

        return swapon(dev, flags) < 0 ? -errno : 0;
}

int kswap_swapoff(const char *dev) {
        int r = 0;

        for (int i = 0; i < 100; i++) {
                r = swapoff(dev) < 0 ? -errno : 0;
                if (r != -EINTR)
                        break;
        }
        return r;
}

int kswap_page_cluster_off(const char *procfs, int *saved) {
        char path[256];
        int old, r;

        snprintf(path, sizeof(path), "%s/sys/vm/page-cluster", procfs);
        r = kswap_read_int(path, &old);
        if (r < 0)
                return r;
        r = kswap_write_file(path, "0");
        if (r < 0)
                return r;
        *saved = old;
        return 0;
}

int kswap_page_cluster_restore(const char *procfs, int *saved) {
        char path[256], value[16];
        int r;

        if (*saved < 0)
                return 0;
        snprintf(path, sizeof(path), "%s/sys/vm/page-cluster", procfs);
        snprintf(value, sizeof(value), "%d", *saved);
        r = kswap_write_file(path, value);
        if (r == 0)
                *saved = -1;
        return r;
}

void kswap_signals_block(sigset_t *old) {
        sigset_t mask;

        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, old);
}

void kswap_signals_restore(const sigset_t *old) {
        pthread_sigmask(SIG_SETMASK, old, NULL);
}

int kswap_cgroup_make(KswapCgroup *cg, const char *name) {
        char ctl[256] = "";

        /* the unified hierarchy lists its controllers; v1 has no such file */
        (void)kswap_read_file("/sys/fs/cgroup/cgroup.controllers", ctl, sizeof(ctl));
        cg->v2 = strstr(ctl, "memory") != NULL;
        if (snprintf(cg->dir, sizeof(cg->dir), "/sys/fs/cgroup/%szswap-bench-%s.%d", cg->v2 ? "" : "memory/", name,
                     (int)getpid()) >= (int)sizeof(cg->dir))
                return -ENAMETOOLONG;
        if (mkdir(cg->dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static int cgroup_file(const KswapCgroup *cg, const char *v2, const char *v1, char *buf, size_t len) {
        return snprintf(buf, len, "%s/%s", cg->dir, cg->v2 ? v2 : v1) < (int)len ? 0 : -ENAMETOOLONG;
}

int kswap_cgroup_join(const KswapCgroup *cg, pid_t pid) {
        char p[320], v[32];

        snprintf(v, sizeof(v), "%d", (int)(pid ? pid : getpid()));
        return cgroup_file(cg, "cgroup.procs", "cgroup.procs", p, sizeof(p)) ?: kswap_write_file(p, v);
}

int kswap_cgroup_usage(const KswapCgroup *cg, uint64_t *ret) {
        char p[320];

        return cgroup_file(cg, "memory.current", "memory.usage_in_bytes", p, sizeof(p)) ?: kswap_read_u64(p, ret);
}

int kswap_cgroup_limit(const KswapCgroup *cg, uint64_t bytes) {
        char p[320], v[32];

        snprintf(v, sizeof(v), "%llu", (unsigned long long)bytes);
        return cgroup_file(cg, "memory.max", "memory.limit_in_bytes", p, sizeof(p)) ?: kswap_write_file(p, v);
}

int kswap_cgroup_remove(const KswapCgroup *cg) {
        return rmdir(cg->dir) < 0 ? -errno : 0;
}
