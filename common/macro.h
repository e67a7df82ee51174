/*
 * macro.h: small helpers both the daemon and the client library use.
 *
 * Cleanup attributes in the systemd style: a variable declared with
 * _cleanup_free_ or _cleanup_close_ is released when it leaves scope, and
 * TAKE_PTR()/TAKE_FD() hand ownership on without releasing it. Nothing here
 * allocates or logs; every helper is safe to call from any thread.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define _public_ __attribute__((visibility("default")))
#define _unused_ __attribute__((unused))
#define _noreturn_ __attribute__((noreturn))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)
#define _cleanup_(f) __attribute__((cleanup(f)))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define DIV_ROUND_UP(x, y) (((x) + (y) - 1) / (y))
#define ALIGN_TO(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))

#define ZSWAP_PAGE_SIZE 4096UL
#define ZSWAP_PAGE_SHIFT 12

static inline void freep(void *p) {
        free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

/* Close fd if valid, preserving errno; always returns -1 so that
 * `fd = safe_close(fd);` leaves the variable invalid. */
static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}

static inline void closep(int *fd) {
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

#define TAKE_PTR(p)                          \
        ({                                   \
                __typeof__(p) _tp = (p);     \
                (p) = NULL;                  \
                _tp;                         \
        })
#define TAKE_FD(fd)                          \
        ({                                   \
                int _tf = (fd);              \
                (fd) = -1;                   \
                _tf;                         \
        })

/* Read errno as a negative value right after a failed libc call; never 0,
 * so that a caller that forgot to check still sees a failure. */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}

static inline bool page_aligned(uint64_t x) {
        return (x & (ZSWAP_PAGE_SIZE - 1)) == 0;
}
