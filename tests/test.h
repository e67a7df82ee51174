/*
 * test.h: assertions for the test programs.
 *
 * One program per behaviour: exit 0 passes, 77 skips (meson reads it), any
 * other status fails. Each assertion prints the expression, its value and
 * errno before aborting, so a CI log says what went wrong without a rerun.
 */
#pragma once

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TEST_SKIP 77

#define test_fail(...)                                                          \
        do {                                                                    \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                 \
                fprintf(stderr, __VA_ARGS__);                                   \
                fprintf(stderr, "\n");                                          \
                fflush(stderr);                                                 \
                abort();                                                        \
        } while (0)

#define test_skip(...)                                                          \
        do {                                                                    \
                fprintf(stderr, "SKIP: ");                                      \
                fprintf(stderr, __VA_ARGS__);                                   \
                fprintf(stderr, "\n");                                          \
                exit(TEST_SKIP);                                                \
        } while (0)

/* expr returns >= 0 on success, -errno (or -1 + errno) on failure. */
#define ASSERT_OK(expr)                                                         \
        do {                                                                    \
                long long _r = (long long)(expr);                               \
                if (_r < 0)                                                     \
                        test_fail("%s failed: %lld (%s), errno=%d (%s)", #expr, \
                                  _r, strerror((int)-_r), errno, strerror(errno)); \
        } while (0)

/* expr must fail with exactly -err (or -1 and errno == err). */
#define ASSERT_ERROR(expr, err)                                                 \
        do {                                                                    \
                errno = 0;                                                      \
                long long _r = (long long)(expr);                               \
                int _e = _r == -1 && errno ? errno : (int)-_r;                  \
                if (_e != (err))                                                \
                        test_fail("%s: expected error %s, got %lld (%s)", #expr, \
                                  strerror(err), _r, strerror(_e));             \
        } while (0)

#define ASSERT_EQ(a, b)                                                         \
        do {                                                                    \
                long long _a = (long long)(a), _b = (long long)(b);             \
                if (_a != _b)                                                   \
                        test_fail("%s == %s failed: %lld != %lld", #a, #b, _a, _b); \
        } while (0)

#define ASSERT_TRUE(expr)                                                       \
        do {                                                                    \
                if (!(expr))                                                    \
                        test_fail("%s is false (errno=%d %s)", #expr, errno,    \
                                  strerror(errno));                             \
        } while (0)

#define ASSERT_LE(a, b)                                                         \
        do {                                                                    \
                long long _a = (long long)(a), _b = (long long)(b);             \
                if (!(_a <= _b))                                                \
                        test_fail("%s <= %s failed: %lld > %lld", #a, #b, _a, _b); \
        } while (0)

/*
 * Waiting for a condition, not for a time. A test that waits for the
 * daemon (a teardown, an eviction, a process it started) polls until
 * what it waits for holds; the bound is a safety net only, far above what
 * a machine at load 10 under a sanitizer needs, so that a test that
 * cannot get there fails with a message (what it saw last) rather than
 * at meson's timeout with none. Idle runs never wait for it.
 */
#ifndef TEST_WAIT_S /* -DTEST_WAIT_S=3 to see what a failure says */
#define TEST_WAIT_S 120
#endif

static inline uint64_t test_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Poll cond every 10 ms until it holds; after seconds, fail, saying how
 * far it got (fmt and its arguments: what was seen last). */
#define WAIT_UNTIL(cond, seconds, fmt, ...)                                     \
        do {                                                                    \
                uint64_t _end = test_now_ns() + (uint64_t)(seconds) * 1000000000ull; \
                while (!(cond)) {                                               \
                        if (test_now_ns() > _end)                               \
                                test_fail("%s still false after %u s: " fmt,    \
                                          #cond, (unsigned)(seconds), ##__VA_ARGS__); \
                        usleep(10000);                                          \
                }                                                               \
        } while (0)

/* A test's size knob from the environment: name's value, or dflt when
 * unset (the CI sizes some tests down under valgrind and the sanitizers). */
static inline unsigned test_env_uint(const char *name, unsigned dflt) {
        const char *v = getenv(name);
        return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

/* Is case name among the comma-separated names of the environment
 * variable var? Unset or empty: every case runs (the CI runs fewer of a
 * long test's cases under TSan). */
static inline bool test_case_selected(const char *var, const char *name) {
        const char *v = getenv(var);
        size_t n = strlen(name);
        if (!v || !*v)
                return true;
        for (const char *p = v;; p++) {
                if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0))
                        return true;
                if (!(p = strchr(p, ',')))
                        return false;
        }
}

/* Does reading p raise SIGBUS (a page poisoned with UFFDIO_POISON, lost
 * rather than read as zeros)? The caller's SIGBUS handler is put back. */
static inline sigjmp_buf *test_bus_jmp(void) {
        static sigjmp_buf j;
        return &j;
}
static inline void test_on_sigbus(int sig) {
        (void)sig;
        siglongjmp(*test_bus_jmp(), 1);
}
static inline bool test_page_poisoned(const void *p) {
        struct sigaction sa = { .sa_handler = test_on_sigbus }, old;
        volatile bool bus = true;
        sigaction(SIGBUS, &sa, &old);
        if (!sigsetjmp(*test_bus_jmp(), 1)) {
                (void)*(const volatile uint8_t *)p;
                bus = false;
        }
        sigaction(SIGBUS, &old, NULL);
        return bus;
}

static inline void test_require_root(void) {
        if (geteuid() != 0)
                test_skip("needs root (userfaultfd events, /dev/userfaultfd)");
}

#define ASSERT_STREQ(a, b)                                                      \
        do {                                                                    \
                const char *_a = (a), *_b = (b);                                \
                if (strcmp(_a, _b) != 0)                                        \
                        test_fail("%s == %s failed:\n  '%s'\n  '%s'", #a, #b, _a, _b); \
        } while (0)

/*
 * The path of rel, relative to the directory of source (a test's
 * __FILE__), e.g. "../../systemd/zswapd.conf". __FILE__ is absolute, or
 * relative to the build directory, the grandparent of this program
 * (build/tests/test-NAME).
 */
static inline void test_source_path(const char *source, const char *rel, char *buf, size_t len) {
        char root[4096] = "";

        if (source[0] != '/') {
                ssize_t n = readlink("/proc/self/exe", root, sizeof(root) - 1);
                if (n <= 0)
                        test_fail("readlink /proc/self/exe");
                root[n] = 0;
                for (int i = 0; i < 2; i++)
                        *strrchr(root, '/') = 0;
        }
        snprintf(buf, len, "%s%s%s", root, root[0] ? "/" : "", source);
        *strrchr(buf, '/') = 0;
        strncat(buf, "/", len - strlen(buf) - 1);
        strncat(buf, rel, len - strlen(buf) - 1);
}
