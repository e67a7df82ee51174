/*
 * trace.c: see trace.h. Records are five words: time (CLOCK_MONOTONIC ns),
 * op | thread id << 32, addr, a, b. The dump is the write position
 * followed by the whole ring.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "trace.h"

#define TRACE_N (1u << 22)
#define TRACE_WORDS 5

uint64_t *trace_buf;
static _Atomic uint64_t trace_pos;
static const char *trace_path;

void trace_add(unsigned op, uint64_t addr, uint64_t a, uint64_t b) {
        uint64_t i = atomic_fetch_add_explicit(&trace_pos, 1, memory_order_relaxed) & (TRACE_N - 1);
        uint64_t *r = trace_buf + i * TRACE_WORDS;
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        r[0] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        r[1] = (uint64_t)op | (uint64_t)syscall(SYS_gettid) << 32;
        r[2] = addr;
        r[3] = a;
        r[4] = b;
}

/* SIGUSR2: only async-signal-safe calls */
static void trace_dump(int sig) {
        (void)sig;
        int fd = open(trace_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return;
        /* relaxed: a snapshot for the dump, which orders nothing (the
         * ring's words are plain stores, and records may be half written) */
        uint64_t pos = atomic_load_explicit(&trace_pos, memory_order_relaxed);
        size_t total = (size_t)TRACE_N * TRACE_WORDS * sizeof(uint64_t);
        if (write(fd, &pos, sizeof(pos)) == sizeof(pos))
                for (size_t off = 0; off < total;) {
                        ssize_t n = write(fd, (char *)trace_buf + off, total - off);
                        if (n <= 0)
                                break;
                        off += (size_t)n;
                }
        close(fd);
}

void trace_init(void) {
        trace_path = getenv("ZSWAPD_TRACE");
        if (!trace_path || !*trace_path)
                return;
        trace_buf = calloc((size_t)TRACE_N * TRACE_WORDS, sizeof(uint64_t));
        if (!trace_buf) {
                log_warn("ZSWAPD_TRACE: no memory for the trace ring; tracing off");
                return;
        }
        signal(SIGUSR2, trace_dump);
        log_warn("tracing page events to %s on SIGUSR2 (ZSWAPD_TRACE)", trace_path);
}
