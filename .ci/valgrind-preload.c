/*
 * valgrind-preload.c: what Debian 12's valgrind (3.19) does not know about
 * the daemon's kernel interfaces, preloaded into zswapd under valgrind only
 * (.ci/valgrind-zswapd). Nothing here hides an error: each part gives
 * valgrind a fact it lacks, as a syscall wrapper inside valgrind would.
 *
 * pidfd_open (434) is unknown to valgrind before 3.20, which answers it
 * with ENOSYS, and the daemon refuses a client it holds no pidfd on. Our
 * syscall() makes that one call on the real CPU (VALGRIND_NON_SIMD_CALL).
 * The call reads and writes no user memory, so memcheck misses nothing.
 *
 * PAGEMAP_SCAN (Linux 6.7) is handled from its ioctl number: valgrind sees
 * the argument block, not the page_region array the kernel fills through
 * its .vec pointer. Our ioctl() marks the entries the call returned as
 * written, so reading them is not reported as reading uninitialised stack.
 *
 * Everything else goes to libc unchanged.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>

#include "uffd-compat.h"

/* the project builds with -fvisibility=hidden; these must interpose */
#define _export_ __attribute__((visibility("default")))

/* Runs on the host CPU: no libc (errno lives in the guest's TLS), a raw
 * system call returning -errno. tid is valgrind's thread id, unused. */
static long host_pidfd_open(long tid, long pid, long flags) {
        long ret;

        (void)tid;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "0"((long)SYS_pidfd_open), "D"(pid), "S"(flags)
                         : "rcx", "r11", "memory");
        return ret;
}

_export_ long syscall(long n, ...) {
        static long (*next)(long, ...);
        long a[6];
        va_list ap;

        /* libc's syscall() reads six words whatever the call; so do we */
        va_start(ap, n);
        for (int i = 0; i < 6; i++)
                a[i] = va_arg(ap, long);
        va_end(ap);
        if (n == SYS_pidfd_open && RUNNING_ON_VALGRIND) {
                long r = (long)VALGRIND_NON_SIMD_CALL2(host_pidfd_open, a[0], a[1]);
                if (r < 0) {
                        errno = (int)-r;
                        return -1;
                }
                return r;
        }
        if (!next)
                next = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
        return next(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

_export_ int ioctl(int fd, unsigned long req, ...) {
        static int (*next)(int, unsigned long, ...);
        va_list ap;
        void *arg;
        int r;

        va_start(ap, req);
        arg = va_arg(ap, void *);
        va_end(ap);
        if (!next)
                next = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
        r = next(fd, req, arg);
        if (req == PAGEMAP_SCAN && r > 0) {
                const struct pm_scan_arg *a = arg;
                VALGRIND_MAKE_MEM_DEFINED((void *)(uintptr_t)a->vec, (size_t)r * sizeof(struct page_region));
        }
        return r;
}
