/*
 * zswap-run: run a program with its memory managed by zswapd.
 *
 *   zswap-run [--socket PATH] [--limit SIZE | --limit-each SIZE] [--] CMD [ARGS...]
 *
 * --limit: one resident limit for CMD and every process it starts (one
 * group, ZSWAP_GROUP, named after this pid and the time); --limit-each:
 * the same limit for each of them on its own.
 *
 * Puts libzswap-preload.so in front of LD_PRELOAD (keeping what the user
 * had there) and executes CMD. The shim does the rest (preload.c); if no
 * daemon answers, CMD runs unmanaged with one line on stderr. A statically
 * linked CMD is not managed (nothing can be preloaded into it): said in
 * one line, and it runs all the same.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "zswap.h"

#ifndef ZSWAP_PRELOAD_PATH
#define ZSWAP_PRELOAD_PATH "/usr/local/lib/libzswap-preload.so"
#endif

/* Where execvp() finds cmd: itself if it names a path, else the first
 * executable file of that name in $PATH; false if none. */
static bool resolve(const char *cmd, char *out, size_t cap) {
        if (strchr(cmd, '/'))
                return snprintf(out, cap, "%s", cmd) < (int)cap;
        const char *path = getenv("PATH");
        if (!path || !*path)
                path = "/usr/local/bin:/usr/bin:/bin";
        for (const char *p = path, *end; *p; p = *end ? end + 1 : end) {
                end = strchrnul(p, ':');
                int n = snprintf(out, cap, "%.*s%s%s", (int)(end - p), p, end > p ? "/" : "", cmd);
                if (n > 0 && n < (int)cap && access(out, X_OK) == 0)
                        return true;
        }
        return false;
}

/* Whether the file is an ELF executable with no program interpreter
 * (statically linked, static-pie included): no dynamic loader runs in
 * it, so LD_PRELOAD reaches nothing. Scripts and anything unreadable:
 * false (their interpreter, or the exec, decides). */
static bool is_static_elf(const char *file) {
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        Elf64_Ehdr eh;
        bool interp = false, elf = false;

        if (fd < 0)
                return false;
        if (pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
            eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum < 4096 &&
            (eh.e_type == ET_EXEC || eh.e_type == ET_DYN)) {
                elf = true;
                for (unsigned i = 0; i < eh.e_phnum && !interp; i++) {
                        Elf64_Phdr ph;
                        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) != (ssize_t)sizeof(ph)) {
                                elf = false;
                                break;
                        }
                        interp = ph.p_type == PT_INTERP;
                }
        }
        close(fd);
        return elf && !interp;
}

static void help(void) {
        printf("Usage: zswap-run [OPTIONS] [--] CMD [ARGS...]\n\n"
               "Run CMD with its anonymous memory managed (compressed when cold) by zswapd.\n\n"
               "  -s, --socket PATH   daemon socket (default $ZSWAP_SOCKET, then %s)\n"
               "  -l, --limit SIZE    keep the resident anonymous memory of CMD and every process\n"
               "                      it starts under SIZE, together (e.g. 512M)\n"
               "      --limit-each SIZE\n"
               "                      keep each of those processes under SIZE on its own\n"
               "  -h, --help          this help\n\n"
               "See zswap-run(1).\n",
               ZSWAP_DEFAULT_SOCKET);
}

/* The shim beside this program (a build tree, or an install with both in
 * one place), else where it was installed. */
static const char *preload_path(void) {
        static char path[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);

        if (n > 0) {
                path[n] = 0;
                char *slash = strrchr(path, '/');
                if (slash) {
                        strcpy(slash + 1, "libzswap-preload.so");
                        if (access(path, R_OK) == 0)
                                return path;
                }
        }
        return ZSWAP_PRELOAD_PATH;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "limit", required_argument, NULL, 'l' },
                { "limit-each", required_argument, NULL, 'e' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        uint64_t limit;
        int c;

        /* '+': options end at CMD, whose own options are its own */
        while ((c = getopt_long(argc, argv, "+s:l:h", opts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        setenv("ZSWAP_SOCKET", optarg, 1);
                        break;
                case 'l':
                case 'e':
                        if (parse_size(optarg, &limit) < 0 || limit == 0) {
                                fprintf(stderr, "zswap-run: --%s takes a size such as 512M or 2G, not '%s'\n",
                                        c == 'l' ? "limit" : "limit-each", optarg);
                                return 2;
                        }
                        setenv("ZSWAP_LIMIT", optarg, 1);
                        if (c == 'l') {
                                /* one group for the tree we start: this pid and
                                 * when, so that no later zswap-run of the same
                                 * pid joins it */
                                char group[64];
                                snprintf(group, sizeof(group), "run:%d:%llu", (int)getpid(),
                                         (unsigned long long)(now_ns() / 1000000));
                                setenv("ZSWAP_GROUP", group, 1);
                        } else
                                unsetenv("ZSWAP_GROUP");
                        break;
                case 'h':
                        help();
                        return 0;
                default:
                        return 2;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "zswap-run: no command given (see zswap-run --help)\n");
                return 2;
        }
        const char *shim = preload_path(), *old = getenv("LD_PRELOAD");
        char file[PATH_MAX];
        if (resolve(argv[optind], file, sizeof(file)) && is_static_elf(file))
                fprintf(stderr, "zswap-run: %s is statically linked: nothing can be preloaded into it, so zswapd "
                                "cannot manage its memory; running it unmanaged\n", argv[optind]);
        if (access(shim, R_OK) < 0) {
                fprintf(stderr, "zswap-run: %s: %s; running %s unmanaged\n", shim, strerror(errno), argv[optind]);
        } else {
                size_t len = strlen(shim) + (old ? strlen(old) + 1 : 0) + 1;
                char *v = malloc(len);
                if (!v) {
                        fprintf(stderr, "zswap-run: out of memory\n");
                        return 1;
                }
                snprintf(v, len, "%s%s%s", shim, old && *old ? " " : "", old ? old : "");
                setenv("LD_PRELOAD", v, 1);
                free(v);
        }
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "zswap-run: %s: %s\n", argv[optind], strerror(errno));
        return errno == ENOENT ? 127 : 126;
}
