/*
 * zram.c: the benchmark's own zram swap device.
 *
 * The machine has a /dev/zram0 of its own and maybe other swap; neither is
 * ours to touch. A device is taken from /sys/class/zram-control/hot_add,
 * whose read creates it and returns its number, and everything afterwards
 * addresses that number only. Each step of the set-up records that it
 * happened (id, configured, swap_on, page_cluster), and zram_teardown() walks
 * those records backwards, so a set-up that failed half-way, a run that
 * failed, and a run cut short by SIGINT all end with the machine as it was:
 * no swap of ours, no zram device of ours, page-cluster restored.
 *
 * What cannot be cleaned up: a SIGKILL of the benchmark leaves the device
 * and the swap behind (`swapon --show` names it; swapoff, then
 * echo 1 > /sys/block/zramN/reset and echo N > .../zram-control/hot_remove).
 *
 * Single-threaded. The caller must unmap the memory swapped to the device
 * before teardown, or swapoff has to read it all back first.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kswap.h"
#include "zram.h"

struct Zram {
        char *sysfs;
        char *procfs;
        int id;            /* number hot_add gave us; -1: no device of ours */
        char dev[32];      /* "/dev/zramN" */
        bool configured;   /* disksize written: the device needs a reset */
        bool swap_on;      /* swapon succeeded: needs swapoff */
        int page_cluster;  /* value before we wrote 0; -1: not changed */
};

/* Write s to /sys/block/zramN/<attr> of our device. */
static int zram_attr_write(const Zram *z, const char *attr, const char *s) {
        char path[256];

        snprintf(path, sizeof(path), "%s/block/zram%d/%s", z->sysfs, z->id, attr);
        return kswap_write_file(path, s);
}

static int zram_hot_add(Zram *z) {
        char path[256];

        snprintf(path, sizeof(path), "%s/class/zram-control/hot_add", z->sysfs);
        return kswap_read_int(path, &z->id);
}

static int zram_configure(Zram *z, const char *algo, uint64_t disksize) {
        char size[32];
        int r;

        /* The algorithm can only be chosen while the device has no size. */
        r = zram_attr_write(z, "comp_algorithm", algo);
        if (r < 0)
                return r;
        snprintf(size, sizeof(size), "%" PRIu64, disksize);
        r = zram_attr_write(z, "disksize", size);
        if (r < 0)
                return r;
        z->configured = true;
        return 0;
}

/* devtmpfs creates the node as the disk appears; allow it a moment anyway. */
static int wait_for_node(const char *dev) {
        for (int i = 0; i < 100; i++) {
                if (access(dev, F_OK) == 0)
                        return 0;
                kswap_sleep_ms(10);
        }
        return -ENOENT;
}

static int zram_swapon(Zram *z) {
        int r;

        r = wait_for_node(z->dev);
        if (r < 0)
                return r;
        r = kswap_mkswap(z->dev);
        if (r < 0)
                return r;
        r = kswap_swapon(z->dev);
        if (r < 0)
                return r;
        z->swap_on = true;
        return 0;
}

int zram_new(const char *sysfs, const char *procfs, const char *algo, uint64_t disksize,
             Zram **ret) {
        Zram *z;
        int r;

        /* zswap would catch every page before it reached zram: we would measure zswap. */
        if (zram_kernel_zswap_enabled(sysfs))
                return -EBUSY;
        z = calloc(1, sizeof(*z));
        if (!z)
                return -ENOMEM;
        z->id = -1;
        z->page_cluster = -1;
        z->sysfs = strdup(sysfs);
        z->procfs = strdup(procfs);
        if (!z->sysfs || !z->procfs) {
                zram_free(z);
                return -ENOMEM;
        }

        r = zram_hot_add(z);
        if (r == 0) {
                snprintf(z->dev, sizeof(z->dev), "/dev/zram%d", z->id);
                r = zram_configure(z, algo, disksize);
        }
        if (r == 0)
                r = zram_swapon(z);
        /* Readahead would bring 2^page-cluster pages per fault; zswapd brings one. */
        if (r == 0)
                r = kswap_page_cluster_off(z->procfs, &z->page_cluster);
        if (r < 0) {
                zram_free(z);
                return r;
        }
        *ret = z;
        return 0;
}

static int zram_swapoff(Zram *z) {
        int r;

        if (!z->swap_on)
                return 0;
        r = kswap_swapoff(z->dev);
        if (r == 0)
                z->swap_on = false;
        return r;
}

/* A reset fails with EBUSY while anything (udev's probe, swap) holds the device open. */
static int zram_reset(Zram *z) {
        int r = 0;

        if (!z->configured)
                return 0;
        for (int i = 0; i < 100; i++) {
                r = zram_attr_write(z, "reset", "1");
                if (r != -EBUSY)
                        break;
                kswap_sleep_ms(20);
        }
        if (r == 0)
                z->configured = false;
        return r;
}

static int zram_hot_remove(Zram *z) {
        char path[256], id[16];
        int r = 0;

        if (z->id < 0)
                return 0;
        snprintf(path, sizeof(path), "%s/class/zram-control/hot_remove", z->sysfs);
        snprintf(id, sizeof(id), "%d", z->id);
        for (int i = 0; i < 100; i++) {
                r = kswap_write_file(path, id);
                if (r != -EBUSY)
                        break;
                kswap_sleep_ms(20);
        }
        if (r == 0)
                z->id = -1;
        return r;
}

int zram_teardown(Zram *z) {
        int r, first = 0;

        if (!z)
                return 0;
        r = kswap_page_cluster_restore(z->procfs, &z->page_cluster);
        first = first ?: r;
        r = zram_swapoff(z);
        first = first ?: r;
        /* A device still in use as swap must not be reset or removed. */
        if (!z->swap_on) {
                r = zram_reset(z);
                first = first ?: r;
        }
        if (!z->swap_on && !z->configured) {
                r = zram_hot_remove(z);
                first = first ?: r;
        }
        return first;
}

Zram *zram_free(Zram *z) {
        if (!z)
                return NULL;
        zram_teardown(z);
        free(z->sysfs);
        free(z->procfs);
        free(z);
        return NULL;
}

const char *zram_device(const Zram *z) {
        return z->dev;
}

int zram_saved_page_cluster(const Zram *z) {
        return z->page_cluster;
}

int zram_mm_stat(const Zram *z, uint64_t *ret_orig, uint64_t *ret_used) {
        char path[256], buf[512];
        uint64_t orig, compr, used;
        int r;

        snprintf(path, sizeof(path), "%s/block/zram%d/mm_stat", z->sysfs, z->id);
        r = kswap_read_file(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        /* orig_data_size compr_data_size mem_used_total mem_limit ... */
        if (sscanf(buf, "%" SCNu64 " %" SCNu64 " %" SCNu64, &orig, &compr, &used) != 3)
                return -EBADMSG;
        *ret_orig = orig;
        *ret_used = used;
        return 0;
}

bool zram_kernel_zswap_enabled(const char *sysfs) {
        char path[256], buf[16];

        snprintf(path, sizeof(path), "%s/module/zswap/parameters/enabled", sysfs);
        return kswap_read_file(path, buf, sizeof(buf)) == 0 && buf[0] == 'Y';
}

size_t zram_resident_pages(void *addr, size_t len, unsigned char *vec) {
        size_t n_pages = len / ZSWAP_PAGE_SIZE, n = 0;

        if (mincore(addr, len, vec) < 0)
                return n_pages;
        for (size_t i = 0; i < n_pages; i++)
                n += vec[i] & 1;
        return n;
}

int zram_pageout(void *addr, size_t len, unsigned char *vec, unsigned max_calls, ZramPageout *ret) {
        size_t n_pages = len / ZSWAP_PAGE_SIZE, prev;
        ZramPageout po = { .resident = n_pages };

        do {
                prev = po.resident;
                if (madvise(addr, len, MADV_PAGEOUT) < 0)
                        return -errno;
                po.resident = zram_resident_pages(addr, len, vec);
                if (po.calls++ == 0)
                        po.first_resident = po.resident;
        } while (po.resident > 0 && po.resident < prev && po.calls < max_calls);
        *ret = po;
        return (int)(n_pages - po.resident);
}
