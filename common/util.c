/*
 * util.c: helpers without state, callable from any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "macro.h"
#include "util.h"

uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

bool vmflags_uffd_registered(const char *line) {
        return strstr(line, " um") || strstr(line, " uw");
}

int fd_is_userfaultfd(int fd) {
        char path[64], target[64];
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
                return negative_errno();
        target[n] = 0;
        return strcmp(target, "anon_inode:[userfaultfd]") == 0;
}

/* /proc/PID/stat into buf; the fields after comm (which may hold spaces
 * and parentheses: they start after the last ')') in *after. */
static int proc_stat_fields(pid_t pid, char *buf, size_t len, char **after) {
        char path[64];
        _cleanup_close_ int fd = -1;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = read(fd, buf, len - 1);
        if (n <= 0)
                return n < 0 ? negative_errno() : -EIO;
        buf[n] = 0;
        *after = strrchr(buf, ')');
        return *after ? 0 : -EIO;
}

int proc_ppid(pid_t pid, pid_t *ret) {
        char buf[512], *p;
        int ppid, r = proc_stat_fields(pid, buf, sizeof(buf), &p);
        char state;

        if (r < 0)
                return r;
        if (sscanf(p + 1, " %c %d", &state, &ppid) != 2)
                return -EIO;
        *ret = ppid;
        return 0;
}

int proc_start_ticks(pid_t pid, uint64_t *ret) {
        char buf[1024], *p;
        unsigned long long start;
        int r = proc_stat_fields(pid, buf, sizeof(buf), &p);

        if (r < 0)
                return r;
        /* field 22, the 20th after comm: state ppid pgrp session tty_nr
         * tpgid flags minflt cminflt majflt cmajflt utime stime cutime
         * cstime priority nice num_threads itrealvalue starttime */
        if (sscanf(p + 1, " %*c" " %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                   &start) != 1)
                return -EIO;
        *ret = start;
        return 0;
}

int proc_status_kb(pid_t pid, const char *key, uint64_t *ret_bytes) {
        char path[64], line[256];
        FILE *f;
        size_t klen = strlen(key);
        int r = -ENOENT;

        if (pid == 0)
                snprintf(path, sizeof(path), "/proc/self/status");
        else
                snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return negative_errno();
        while (fgets(line, sizeof(line), f)) {
                unsigned long long kb;
                if (strncmp(line, key, klen) == 0 && line[klen] == ':' &&
                    sscanf(line + klen + 1, "%llu", &kb) == 1) {
                        *ret_bytes = kb * 1024;
                        r = 0;
                        break;
                }
        }
        fclose(f);
        return r;
}

int fd_set_nonblock(int fd, bool nonblock) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0)
                return negative_errno();
        fl = nonblock ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
        if (fcntl(fd, F_SETFL, fl) < 0)
                return negative_errno();
        return 0;
}

int parse_size(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v;
        uint64_t mul = 1;

        if (!s || !isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -EINVAL;
        switch (*end) {
        case 0: break;
        case 'k': case 'K': mul = 1ull << 10; end++; break;
        case 'm': case 'M': mul = 1ull << 20; end++; break;
        case 'g': case 'G': mul = 1ull << 30; end++; break;
        case 't': case 'T': mul = 1ull << 40; end++; break;
        default: return -EINVAL;
        }
        if (*end == 'i' && end[1] == 'B')
                end += 2;
        else if (*end == 'B')
                end++;
        if (*end)
                return -EINVAL;
        if (v > UINT64_MAX / mul)
                return -ERANGE;
        *ret = v * mul;
        return 0;
}

int unix_connect(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = negative_errno();
                close(fd);
                return r;
        }
        return fd;
}

/*
 * Who may be at the other end of a client's socket. The socket's path is
 * only a name: whoever can write its directory can put a listener of their
 * own there once the daemon is gone (a hand-over, a crash, a stale path),
 * and a client hands its daemon its userfaultfd and its store, that is,
 * the power to read and rewrite its memory. So before anything is sent the
 * listener's credentials (SO_PEERCRED: the process that called listen(),
 * or systemd's for a socket it activates) must be root's, or those of the
 * one uid the user said to trust instead ($ZSWAP_DAEMON_UID: a daemon run
 * by hand as a user of its own).
 */
uid_t daemon_uid_from_env(void) {
        const char *v = getenv("ZSWAP_DAEMON_UID");
        char *end;

        if (!v || !*v || !isdigit((unsigned char)*v))
                return (uid_t)-1;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (errno || *end || u >= (uid_t)-1)
                return (uid_t)-1;
        return (uid_t)u;
}

int unix_peer_trusted(int fd, uid_t trusted, uid_t *ret_uid) {
        struct ucred cr;
        socklen_t len = sizeof(cr);

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
                return negative_errno();
        if (ret_uid)
                *ret_uid = cr.uid;
        if (len < sizeof(cr) || (cr.uid != 0 && (trusted == (uid_t)-1 || cr.uid != trusted)))
                return -EPERM;
        return 0;
}

int unix_connect_daemon(const char *path, uid_t trusted) {
        int fd = unix_connect(path);

        if (fd < 0)
                return fd;
        int r = unix_peer_trusted(fd, trusted, NULL);
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

/* root/rel, root being "/" (or NULL) on a running system: no "//" */
static int root_path(char *buf, size_t len, const char *root, const char *rel) {
        if (!root || strcmp(root, "/") == 0)
                root = "";
        int n = snprintf(buf, len, "%s/%s", root, rel);
        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static FILE *root_fopen(const char *root, const char *rel) {
        char path[4096];
        if (root_path(path, sizeof(path), root, rel) < 0) {
                errno = ENAMETOOLONG;
                return NULL;
        }
        return fopen(path, "re");
}

/* The first line of proc/pressure/memory: "some avg10=A avg60=B
 * avg300=C total=T" (Documentation/accounting/psi.rst). */
static int psi_some_line(const char *root, char *buf, size_t len) {
        FILE *f = root_fopen(root, "proc/pressure/memory");
        if (!f)
                return -errno;
        int r = fgets(buf, len, f) && strncmp(buf, "some ", 5) == 0 ? 0 : -EIO;
        fclose(f);
        return r;
}

double proc_psi_memory_some(const char *root) {
        char buf[256];
        double v;
        if (psi_some_line(root, buf, sizeof(buf)) < 0 || sscanf(buf, "some avg10=%lf", &v) != 1)
                return -1;
        /* a share of time: anything else is not what the kernel writes */
        return v >= 0 && v <= 100 ? v : -1;
}

int proc_psi_memory_some_total(const char *root, uint64_t *total_us) {
        char buf[256], *end;
        const char *p;
        int r = psi_some_line(root, buf, sizeof(buf));
        if (r < 0)
                return r;
        if (!(p = strstr(buf, " total=")) || !isdigit((unsigned char)p[7]))
                return -EIO;
        errno = 0;
        unsigned long long t = strtoull(p + 7, &end, 10);
        if (errno || (*end && !isspace((unsigned char)*end)))
                return -EIO;
        *total_us = t;
        return 0;
}

uint64_t proc_mem_available(const char *root) {
        char line[256], *end;
        unsigned long long kb = 0;
        FILE *f = root_fopen(root, "proc/meminfo");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "MemAvailable:", 13) != 0)
                        continue;
                const char *p = line + 13;
                while (*p == ' ' || *p == '\t')
                        p++;
                errno = 0;
                kb = isdigit((unsigned char)*p) ? strtoull(p, &end, 10) : 0;
                if (!isdigit((unsigned char)*p) || errno || strncmp(end, " kB", 3) != 0 || kb > UINT64_MAX / 1024)
                        kb = 0;
                break;
        }
        fclose(f);
        return (uint64_t)kb * 1024;
}

int errorf(int r, char *err, size_t len, const char *fmt, ...) {
        va_list ap;

        if (err && len) {
                va_start(ap, fmt);
                vsnprintf(err, len, fmt, ap);
                va_end(ap);
        }
        return r;
}
