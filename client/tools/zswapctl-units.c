/*
 * zswapctl-units.c: `zswapctl enable UNIT [--limit SIZE]` and `zswapctl
 * disable UNIT`: put a systemd service under zswapd, or take it out, with
 * a drop-in (/etc/systemd/system/UNIT.d/zswap.conf) that preloads the
 * shim into the service's processes and hands them the limit (one for
 * them all: the group "unit:NAME"), the socket and nothing else. What zswap-run does for one command line, for a unit.
 *
 * The file is written whole under a temporary name and renamed into place
 * (a reader sees the old one or the new one); the unit name is checked as
 * systemd checks it, so that no name can reach outside the drop-in
 * directory. With systemd running (and no --root), `systemctl
 * daemon-reload` follows, so that the next start uses it; the processes
 * running keep the environment they were started with until a restart.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "macro.h"
#include "protocol.h"
#include "util.h"
#include "zswapctl.h"

#ifndef ZSWAP_PRELOAD_PATH
#define ZSWAP_PRELOAD_PATH "/usr/local/lib/libzswap-preload.so"
#endif

#define DROPIN_NAME "zswap.conf"

/* A service unit name as systemd accepts it (unit_name_is_valid(): the
 * characters of a name, at most 255 of them, not starting with a dot),
 * ".service" added when it has no type; false for another type, or for
 * anything that could name a path. */
static bool service_name(const char *arg, char *out, size_t cap) {
        size_t n = strlen(arg);
        const char *dot = strrchr(arg, '.');

        if (n == 0 || n > 255 || arg[0] == '.' || arg[0] == '-')
                return false;
        for (const char *p = arg; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      strchr(":-_.\\@", *p)))
                        return false;
        if (dot && strcmp(dot, ".service") != 0 &&
            (!strcmp(dot, ".socket") || !strcmp(dot, ".timer") || !strcmp(dot, ".target") || !strcmp(dot, ".mount") ||
             !strcmp(dot, ".path") || !strcmp(dot, ".slice") || !strcmp(dot, ".scope") || !strcmp(dot, ".device") ||
             !strcmp(dot, ".swap") || !strcmp(dot, ".automount")))
                return false;
        int w = snprintf(out, cap, "%s%s", arg, dot && strcmp(dot, ".service") == 0 ? "" : ".service");
        return w > 0 && (size_t)w < cap && strlen(out) <= 255;
}

/* The group name of unit arg for `limit --unit`: a service (".service"
 * added when arg has no type) or a scope; false for anything else. */
bool unit_group_name(const char *arg, char *group, size_t cap) {
        char unit[NAME_MAX + 16], base[NAME_MAX + 1];
        size_t n = strlen(arg);
        bool scope = n > 6 && strcmp(arg + n - 6, ".scope") == 0;

        if (n > 255)
                return false;
        /* a scope's name is checked as a service of that name would be */
        snprintf(base, sizeof(base), "%.*s", (int)(scope ? n - 6 : n), arg);
        if (!service_name(base, unit, sizeof(unit)))
                return false;
        if (scope)
                snprintf(unit, sizeof(unit), "%s.scope", base);
        zgroup_of_unit(unit, group, cap);
        return true;
}

/* systemd is the init here (sd_booted()'s test), and we act on this root */
static bool systemd_running(const char *root) {
        struct stat st;
        return !root && lstat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
}

/* `systemctl daemon-reload`; its own message on failure */
static void daemon_reload(void) {
        pid_t pid = fork();
        int st;

        if (pid == 0) {
                execlp("systemctl", "systemctl", "daemon-reload", (char *)NULL);
                _exit(127);
        }
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fprintf(stderr, "zswapctl: systemctl daemon-reload failed: run it before the service's next start\n");
}

static int unit_paths(const UnitOpts *u, const char *arg, char *unit, char *dir, char *file) {
        if (!service_name(arg, unit, NAME_MAX + 1)) {
                fprintf(stderr, "zswapctl: '%s' is not a service unit name (foo, foo.service, foo@bar.service)\n", arg);
                return -EINVAL;
        }
        const char *root = u->root ? u->root : "";
        if (snprintf(dir, PATH_MAX, "%s/etc/systemd/system/%s.d", root, unit) >= PATH_MAX ||
            snprintf(file, PATH_MAX, "%s/" DROPIN_NAME, dir) >= PATH_MAX) {
                fprintf(stderr, "zswapctl: --root %s: path too long\n", root);
                return -ENAMETOOLONG;
        }
        return 0;
}

/* mkdir -p of dir's last two components' parents: root/etc/systemd/system
 * exists on any systemd host; under --root it may not yet */
static int make_dirs(const char *dir) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s", dir);
        for (char *s = p + 1; *s; s++)
                if (*s == '/') {
                        *s = 0;
                        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *s = '/';
                }
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int cmd_enable(const UnitOpts *u, int argc, char **argv) {
        char unit[NAME_MAX + 1], dir[PATH_MAX], file[PATH_MAX], tmp[PATH_MAX + 16], preload[PATH_MAX];
        uint64_t limit = 0;

        if (argc != 1) {
                fprintf(stderr, "zswapctl: usage: zswapctl enable UNIT [--limit SIZE]\n");
                return 2;
        }
        if (u->limit && conf_parse_size(u->limit, conf_ram_bytes(), &limit) < 0) {
                fprintf(stderr, "zswapctl: '%s' is not a size: use bytes or K, M, G, T (64M, 1.5G) or a percentage "
                                "of RAM (10%%)\n", u->limit);
                return 2;
        }
        if (unit_paths(u, argv[0], unit, dir, file) < 0)
                return 2;
        const char *lib = u->preload ? u->preload : ZSWAP_PRELOAD_PATH;
        snprintf(preload, sizeof(preload), "%s%s", u->root ? u->root : "", lib);
        if (lib[0] != '/' || strpbrk(lib, " \t\n\"'\\%$") || access(preload, R_OK) < 0) {
                fprintf(stderr, "zswapctl: the preload library %s %s: install zswapd first, or name it with --preload "
                                "(an absolute path, no spaces or quotes)\n", preload,
                        lib[0] != '/' || strpbrk(lib, " \t\n\"'\\%$") ? "is not a plain absolute path" : "is not there");
                return 1;
        }
        const char *sock = u->socket && strcmp(u->socket, ZSWAP_DEFAULT_SOCKET) != 0 ? u->socket : NULL;
        if (sock && (sock[0] != '/' || strpbrk(sock, " \t\n\"'\\%$"))) {
                fprintf(stderr, "zswapctl: --socket %s: an absolute path without spaces or quotes, please\n", sock);
                return 2;
        }
        int r = make_dirs(dir);
        if (r < 0) {
                fprintf(stderr, "zswapctl: %s: %s\n", dir, strerror(-r));
                return 1;
        }
        snprintf(tmp, sizeof(tmp), "%s.%d.tmp", file, (int)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
                fprintf(stderr, "zswapctl: %s: %s\n", tmp, strerror(errno));
                if (fd >= 0)
                        close(fd);
                return 1;
        }
        fprintf(f, "# zswapd manages the memory of %s's processes: zswapctl enable wrote this\n"
                   "# file, zswapctl disable %s removes it (zswapctl(8)).\n"
                   "[Unit]\n"
                   "Wants=zswapd.socket\n"
                   "After=zswapd.socket\n"
                   "\n"
                   "[Service]\n"
                   "Environment=\"LD_PRELOAD=%s\"\n",
                unit, unit, lib);
        if (limit) {
                char group[ZSWAP_GROUP_NAME_MAX];
                zgroup_of_unit(unit, group, sizeof(group));
                fprintf(f, "# one resident limit for the service's processes together\n"
                           "Environment=\"ZSWAP_LIMIT=%llu\"\n"
                           "Environment=\"ZSWAP_GROUP=%s\"\n",
                        (unsigned long long)limit, group);
        }
        if (sock)
                fprintf(f, "Environment=\"ZSWAP_SOCKET=%s\"\n", sock);
        if (fflush(f) != 0 || fsync(fileno(f)) < 0 || fclose(f) != 0 || rename(tmp, file) < 0) {
                fprintf(stderr, "zswapctl: %s: %s\n", file, strerror(errno));
                unlink(tmp);
                return 1;
        }
        if (systemd_running(u->root)) {
                daemon_reload();
                printf("%s: enabled (%s); its processes started from now on are managed: "
                       "systemctl restart %s for the running ones\n", unit, file, unit);
        } else
                printf("%s: enabled (%s); systemd reads it when %s next starts\n", unit, file, unit);
        return 0;
}

int cmd_disable(const UnitOpts *u, int argc, char **argv) {
        char unit[NAME_MAX + 1], dir[PATH_MAX], file[PATH_MAX];

        if (argc != 1) {
                fprintf(stderr, "zswapctl: usage: zswapctl disable UNIT\n");
                return 2;
        }
        if (unit_paths(u, argv[0], unit, dir, file) < 0)
                return 2;
        if (unlink(file) < 0) {
                if (errno == ENOENT)
                        fprintf(stderr, "zswapctl: %s is not enabled (no %s)\n", unit, file);
                else
                        fprintf(stderr, "zswapctl: %s: %s\n", file, strerror(errno));
                return 1;
        }
        (void)rmdir(dir); /* only if nothing else is in it */
        if (systemd_running(u->root)) {
                daemon_reload();
                printf("%s: disabled; its running processes stay managed until they exit: "
                       "systemctl restart %s to have them start unmanaged\n", unit, unit);
        } else
                printf("%s: disabled (%s removed)\n", unit, file);
        return 0;
}
