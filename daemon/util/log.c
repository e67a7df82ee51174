/*
 * log.c: one line per message on stderr with a syslog priority prefix
 * ("<3>"), which journald understands. Callable from any thread: each
 * message is formatted into one buffer and written with a single write(2),
 * so lines from different threads never interleave. The fault path does not
 * log except on errors, and then with a rate limit kept by the caller.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"

static _Atomic int max_level = LOG_LEVEL_INFO; /* written by main only, relaxed */

void log_set_level(int level) {
        atomic_store_explicit(&max_level, level, memory_order_relaxed);
}

void log_msg(int level, const char *fmt, ...) {
        char buf[1024];
        va_list ap;
        int n;

        if (level > atomic_load_explicit(&max_level, memory_order_relaxed))
                return;
        n = snprintf(buf, sizeof(buf), "<%d>zswapd: ", level);
        va_start(ap, fmt);
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(buf) - 2)
                n = (int)sizeof(buf) - 2;
        buf[n++] = '\n';
        (void)!write(STDERR_FILENO, buf, (size_t)n);
}
