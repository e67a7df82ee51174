/*
 * kzswap.c: kernel zswap in front of a swapfile of the benchmark's own.
 *
 * zswap is not a device: it catches pages on their way to any swap device
 * and keeps them compressed in memory, and a page it refuses goes on to the
 * device. So the reference needs a real swap device behind it (a swapfile on
 * the local disk, at the highest priority so our pages go there) and zswap's
 * module parameters set for the run: the compressor, the caller's pool limit
 * (high enough for the whole data set, or a small one with writeback), the
 * shrinker off (it would write pool pages on to the disk) unless the caller
 * wants exactly that, and enabled. Those parameters belong to the machine, so
 * every value is read before it is changed and written back at teardown.
 *
 * A SIGKILL cannot be caught, so the values found are also written to a
 * state file before anything changes; kzswap_new() finds the state file of
 * a run that was killed and undoes that run first (the caller holds the
 * benchmarks' lock, so a state file there is never a live run's). The file
 * goes only once teardown has put everything back.
 *
 * Each step records that it happened (file_created, swap_on, page_cluster,
 * changed[]), and kzswap_teardown() walks those records backwards, so a
 * half-done set-up and an interrupted run end the same way.
 *
 * Single-threaded. The caller must unmap the memory swapped out before
 * teardown, or swapoff has to read it all back first.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kswap.h"
#include "kzswap.h"

/* The parameters we set, in the order we set them; restored in reverse. */
static const char *const kzswap_params[] = { "compressor", "max_pool_percent", "shrinker_enabled", "enabled" };
#define N_PARAMS ELEMENTSOF(kzswap_params)

struct KZswap {
        char *sysfs, *procfs, *swapfile, *state;
        bool state_written;      /* the state file is ours to delete */
        bool file_created;       /* the swapfile is ours to delete */
        bool swap_on;            /* swapon succeeded: needs swapoff */
        int page_cluster;        /* value before we wrote 0; -1: not changed */
        char saved[N_PARAMS][64]; /* each parameter as found */
        bool changed[N_PARAMS];   /* written (or tried): restore saved[] */
        uint64_t rejected0, written_back0, limit_hit0; /* debugfs counters at set-up */
        char describe[512];
};

static void param_path(const char *sysfs, const char *name, char *path, size_t size) {
        snprintf(path, size, "%s/module/zswap/parameters/%s", sysfs, name);
}

static int param_write(const char *sysfs, const char *name, const char *value) {
        char path[256];

        param_path(sysfs, name, path, sizeof(path));
        return kswap_write_file(path, value);
}

/*
 * Undo a killed run from its state file: the parameters (enabled first, so
 * zswap stops taking pages before the rest changes), page-cluster, the
 * swap, the file. Lines are "key=value"; unknown keys are ignored.
 */
int kzswap_recover(const char *sysfs, const char *procfs, const char *state) {
        _cleanup_free_ char *swapfile = NULL;
        char line[512], path[1024];
        int r, first = 0;
        FILE *f;

        f = fopen(state, "re");
        if (!f)
                return errno == ENOENT ? 0 : -errno;
        while (fgets(line, sizeof(line), f)) {
                char *eq = strchr(line, '=');

                line[strcspn(line, "\n")] = 0;
                if (!eq)
                        continue;
                *eq = 0;
                if (strcmp(line, "swapfile") == 0) {
                        free(swapfile);
                        swapfile = strdup(eq + 1);
                        continue;
                }
                if (strcmp(line, "page-cluster") == 0)
                        snprintf(path, sizeof(path), "%s/sys/vm/page-cluster", procfs);
                else
                        param_path(sysfs, line, path, sizeof(path));
                r = kswap_write_file(path, eq + 1);
                first = first ?: r;
        }
        fclose(f);
        if (swapfile) {
                r = kswap_swapoff(swapfile);
                first = first ?: (r == -EINVAL || r == -ENOENT ? 0 : r);
                if (unlink(swapfile) < 0 && errno != ENOENT)
                        first = first ?: -errno;
        }
        if (first == 0 && unlink(state) < 0)
                first = -errno;
        return first;
}

/* Read every value we are going to change and put it in the state file. */
static int kzswap_save(KZswap *k) {
        char path[256], tmp[300];
        int page_cluster, r;
        FILE *f;

        for (size_t i = 0; i < N_PARAMS; i++) {
                param_path(k->sysfs, kzswap_params[i], path, sizeof(path));
                r = kswap_read_file(path, k->saved[i], sizeof(k->saved[i]));
                if (r < 0)
                        return r == -ENOENT ? -ENODEV : r;
        }
        snprintf(path, sizeof(path), "%s/sys/vm/page-cluster", k->procfs);
        r = kswap_read_int(path, &page_cluster);
        if (r < 0)
                return r;

        /* Written whole and renamed: a kill half-way leaves no torn state file. */
        snprintf(tmp, sizeof(tmp), "%s.new", k->state);
        f = fopen(tmp, "we");
        if (!f)
                return -errno;
        fprintf(f, "swapfile=%s\npage-cluster=%d\n", k->swapfile, page_cluster);
        for (size_t i = N_PARAMS; i-- > 0;)
                fprintf(f, "%s=%s\n", kzswap_params[i], k->saved[i]);
        if (fclose(f) != 0 || rename(tmp, k->state) < 0) {
                r = -errno;
                unlink(tmp);
                return r;
        }
        k->state_written = true;
        return 0;
}

/* Give the file its blocks up front: swap must not meet a hole. */
static int swapfile_fill(int fd, uint64_t size) {
        static const uint8_t zeros[1 << 16];

        if (fallocate(fd, 0, 0, (off_t)size) == 0)
                return 0;
        if (errno != EOPNOTSUPP)
                return -errno;
        for (uint64_t off = 0; off < size;) {
                ssize_t n = pwrite(fd, zeros, MIN(sizeof(zeros), size - off), (off_t)off);

                if (n < 0 && errno != EINTR)
                        return -errno;
                if (n > 0)
                        off += (uint64_t)n;
        }
        return 0;
}

static int swapfile_create(KZswap *k, uint64_t size) {
        _cleanup_close_ int fd = -1;
        int r;

        /* Ours by name and by the lock; a file left behind is stale. */
        (void)kswap_swapoff(k->swapfile);
        if (unlink(k->swapfile) < 0 && errno != ENOENT)
                return -errno;
        fd = open(k->swapfile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        k->file_created = true;
        r = swapfile_fill(fd, ALIGN_TO(size, ZSWAP_PAGE_SIZE));
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        return r;
}

static int kzswap_swapon(KZswap *k) {
        int r;

        r = kswap_mkswap(k->swapfile);
        if (r < 0)
                return r;
        r = kswap_swapon(k->swapfile);
        if (r < 0)
                return r;
        k->swap_on = true;
        return 0;
}

static int kzswap_params_set(KZswap *k, const KZswapSetup *s) {
        char pct[16];
        const char *values[N_PARAMS] = { s->compressor, pct, s->writeback ? "Y" : "N", "Y" };
        int r;

        snprintf(pct, sizeof(pct), "%u", s->max_pool_percent);
        for (size_t i = 0; i < N_PARAMS; i++) {
                k->changed[i] = true;
                r = param_write(k->sysfs, kzswap_params[i], values[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int kzswap_init(KZswap *k, const KZswapSetup *s) {
        KZswapStats st;
        int r;

        r = kzswap_recover(k->sysfs, k->procfs, k->state);
        if (r == 0)
                r = kzswap_save(k);
        if (r == 0)
                r = swapfile_create(k, s->size);
        if (r == 0)
                r = kzswap_swapon(k);
        if (r == 0)
                r = kswap_page_cluster_off(k->procfs, &k->page_cluster);
        if (r == 0)
                r = kzswap_params_set(k, s);
        if (r < 0)
                return r;
        /* debugfs counters count since boot: keep where they stand now. */
        if (kzswap_stats(k, &st) == 0 && st.debugfs) {
                k->rejected0 = st.rejected;
                k->written_back0 = st.written_back;
                k->limit_hit0 = st.pool_limit_hit;
        }
        snprintf(k->describe, sizeof(k->describe),
                 "%s, %" PRIu64 " MiB, swap priority %d, page-cluster %d -> 0; zswap compressor %s -> %s, "
                 "max_pool_percent %s -> %u, shrinker_enabled %s -> %s, enabled %s -> Y",
                 k->swapfile, s->size >> 20, KSWAP_PRIO, k->page_cluster, k->saved[0], s->compressor,
                 k->saved[1], s->max_pool_percent, k->saved[2], s->writeback ? "Y" : "N", k->saved[3]);
        return 0;
}

int kzswap_new(const KZswapSetup *s, KZswap **ret) {
        _cleanup_kzswap_ KZswap *k = NULL;
        int r;

        k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        k->page_cluster = -1;
        k->sysfs = strdup(s->sysfs);
        k->procfs = strdup(s->procfs);
        k->swapfile = strdup(s->swapfile);
        k->state = strdup(s->state);
        if (!k->sysfs || !k->procfs || !k->swapfile || !k->state)
                return -ENOMEM;
        r = kzswap_init(k, s);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(k);
        return 0;
}

static int kzswap_params_restore(KZswap *k) {
        int r, first = 0;

        for (size_t i = N_PARAMS; i-- > 0;) {
                if (!k->changed[i])
                        continue;
                r = param_write(k->sysfs, kzswap_params[i], k->saved[i]);
                if (r == 0)
                        k->changed[i] = false;
                first = first ?: r;
        }
        return first;
}

int kzswap_teardown(KZswap *k) {
        int r, first = 0;

        if (!k)
                return 0;
        r = kzswap_params_restore(k);
        first = first ?: r;
        r = kswap_page_cluster_restore(k->procfs, &k->page_cluster);
        first = first ?: r;
        if (k->swap_on) {
                r = kswap_swapoff(k->swapfile);
                if (r == 0)
                        k->swap_on = false;
                first = first ?: r;
        }
        /* A file still in use as swap must not go. */
        if (!k->swap_on && k->file_created) {
                r = unlink(k->swapfile) < 0 && errno != ENOENT ? -errno : 0;
                if (r == 0)
                        k->file_created = false;
                first = first ?: r;
        }
        /* Anything not undone stays in the state file for the next run to finish. */
        if (first == 0 && k->state_written) {
                r = unlink(k->state) < 0 && errno != ENOENT ? -errno : 0;
                if (r == 0)
                        k->state_written = false;
                first = r;
        }
        return first;
}

KZswap *kzswap_free(KZswap *k) {
        if (!k)
                return NULL;
        kzswap_teardown(k);
        free(k->sysfs);
        free(k->procfs);
        free(k->swapfile);
        free(k->state);
        free(k);
        return NULL;
}

const char *kzswap_describe(const KZswap *k) {
        return k->describe;
}

/* Sum of the counters of dir/zswap that exist; UINT64_MAX if none does. */
static uint64_t debugfs_sum(const char *dir, const char *const *names, size_t n) {
        uint64_t sum = 0, v;
        bool any = false;
        char path[256];

        for (size_t i = 0; i < n; i++) {
                snprintf(path, sizeof(path), "%s/zswap/%s", dir, names[i]);
                if (kswap_read_u64(path, &v) == 0) {
                        sum += v;
                        any = true;
                }
        }
        return any ? sum : UINT64_MAX;
}

static int debugfs_read(const char *dir, KZswapStats *ret) {
        static const char *const rejects[] = { "reject_compress_poor", "reject_compress_fail", "reject_alloc_fail",
                                               "reject_kmemcache_fail", "reject_reclaim_fail" };
        static const char *const written[] = { "written_back_pages" };
        static const char *const limit_hit[] = { "pool_limit_hit" };
        char path[256];
        int r;

        snprintf(path, sizeof(path), "%s/zswap/stored_pages", dir);
        r = kswap_read_u64(path, &ret->stored_pages);
        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "%s/zswap/pool_total_size", dir);
        r = kswap_read_u64(path, &ret->pool_bytes);
        if (r < 0)
                return r;
        ret->rejected = debugfs_sum(dir, rejects, ELEMENTSOF(rejects));
        ret->written_back = debugfs_sum(dir, written, ELEMENTSOF(written));
        ret->pool_limit_hit = debugfs_sum(dir, limit_hit, ELEMENTSOF(limit_hit));
        ret->debugfs = true;
        return 0;
}

/* debugfs is not mounted here: mount it on a directory of our own for the read. */
static int debugfs_read_private(KZswapStats *ret) {
        char dir[] = "/tmp/zswap-bench-debugfs.XXXXXX";
        int r;

        if (!mkdtemp(dir))
                return -errno;
        if (mount("debugfs", dir, "debugfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
                r = -errno;
                rmdir(dir);
                return r;
        }
        r = debugfs_read(dir, ret);
        umount2(dir, MNT_DETACH);
        rmdir(dir);
        return r;
}

static int meminfo_read(const char *procfs, KZswapStats *ret) {
        unsigned long long kib, pool = 0, orig = 0;
        char path[256], line[256];
        int found = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/meminfo", procfs);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "Zswap: %llu kB", &kib) == 1)
                        pool = kib * 1024, found |= 1;
                else if (sscanf(line, "Zswapped: %llu kB", &kib) == 1)
                        orig = kib * 1024, found |= 2;
        }
        fclose(f);
        if (found != 3)
                return -ENODATA;
        *ret = (KZswapStats) { .stored_pages = orig / ZSWAP_PAGE_SIZE, .pool_bytes = pool,
                               .rejected = UINT64_MAX, .written_back = UINT64_MAX,
                               .pool_limit_hit = UINT64_MAX };
        return 0;
}

int kzswap_stats(const KZswap *k, KZswapStats *ret) {
        KZswapStats st = {};
        char dir[256];
        int r;

        snprintf(dir, sizeof(dir), "%s/kernel/debug", k->sysfs);
        r = debugfs_read(dir, &st);
        if (r < 0)
                r = debugfs_read_private(&st);
        if (r < 0)
                return meminfo_read(k->procfs, ret);
        if (st.rejected != UINT64_MAX)
                st.rejected -= MIN(st.rejected, k->rejected0);
        if (st.written_back != UINT64_MAX)
                st.written_back -= MIN(st.written_back, k->written_back0);
        if (st.pool_limit_hit != UINT64_MAX)
                st.pool_limit_hit -= MIN(st.pool_limit_hit, k->limit_hit0);
        *ret = st;
        return 0;
}
