/*
 * test-proc: the readers of system-wide memory state (common/util.c) that
 * the pressure and free-memory policies act on, fed fixture files.
 *
 * Each directory of tests/unit/fixtures/ is a root holding proc/meminfo
 * and proc/pressure/memory as a kernel writes them, or as one must never
 * be trusted to: busy and idle (real files of a machine, numbers chosen),
 * no-psi (a kernel without CONFIG_PSI: no proc/pressure), old-kernel (no
 * MemAvailable, before 3.14), malformed, out-of-range, empty, and
 * full-first (the lines swapped). Every reader gives the parsed value or
 * its documented "unknown" (-1, -errno, 0), never a number it made up.
 * The fixtures' directory is argv[1] (tests/meson.build), else found
 * beside this source.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>

#include "test.h"
#include "util.h"

static char fixtures[PATH_MAX];

static const char *root(const char *name) {
        static char buf[PATH_MAX + 64];
        snprintf(buf, sizeof(buf), "%s/%s", fixtures, name);
        return buf;
}

/* what each reader gives for one root */
static void expect(const char *name, double some, int total_r, uint64_t total, uint64_t avail) {
        uint64_t t = 0xdeadbeef;
        double v = proc_psi_memory_some(root(name));
        int r = proc_psi_memory_some_total(root(name), &t);
        uint64_t a = proc_mem_available(root(name));

        fprintf(stderr, "%s: some avg10 %.2f, total %d/%llu, MemAvailable %llu\n", name, v, r,
                (unsigned long long)t, (unsigned long long)a);
        if (fabs(v - some) > 1e-9)
                test_fail("%s: some avg10 %f, expected %f", name, v, some);
        ASSERT_EQ(r, total_r);
        /* a failed read leaves the caller's value alone */
        ASSERT_EQ(t, total_r == 0 ? total : 0xdeadbeef);
        ASSERT_EQ(a, avail);
}

int main(int argc, char **argv) {
        if (argc > 1)
                snprintf(fixtures, sizeof(fixtures), "%s", argv[1]);
        else
                test_source_path(__FILE__, "fixtures", fixtures, sizeof(fixtures));

        expect("busy", 12.34, 0, 987654321, 8123456ull * 1024);
        expect("idle", 0, 0, 0, 23970424ull * 1024);
        /* no PSI: unknown pressure, memory still read */
        expect("no-psi", -1, -ENOENT, 0, 23970424ull * 1024);
        /* no MemAvailable: unknown free memory, pressure still read */
        expect("old-kernel", 0.5, 0, 4242, 0);
        /* "avg10=abc", "total=12x", "MemAvailable: lots kB" */
        expect("malformed", -1, -EIO, 0, 0);
        /* avg10 below 0 (or above 100), a negative total, kB that overflow bytes */
        expect("out-of-range", -1, -EIO, 0, 0);
        expect("empty", -1, -EIO, 0, 0);
        /* "some" must be the first line: "full" is not read for it */
        expect("full-first", -1, -EIO, 0, 1024ull * 1024);
        /* no such root at all */
        expect("absent", -1, -ENOENT, 0, 0);

        /* the running system: "/" and NULL read the same files; the
         * values move, so only their ranges are checked */
        double live = proc_psi_memory_some("/");
        ASSERT_TRUE(live == -1 || (live >= 0 && live <= 100));
        live = proc_psi_memory_some(NULL);
        ASSERT_TRUE(live == -1 || (live >= 0 && live <= 100));
        ASSERT_TRUE(proc_mem_available("/") > 0);
        ASSERT_TRUE(proc_mem_available(NULL) > 0);
        uint64_t t;
        int r = proc_psi_memory_some_total("/", &t);
        ASSERT_TRUE(r == 0 || r == -ENOENT || r == -EOPNOTSUPP);
        return 0;
}
