/*
 * uffd-compat.h: userfaultfd definitions newer than Debian 12's 6.1 headers.
 *
 * The running kernel (6.18 here) has UFFDIO_MOVE; the headers do not. Each
 * definition is guarded so that newer headers win. Features are detected at
 * run time from UFFDIO_API's answer, never from the kernel version.
 */
#pragma once

#include <linux/userfaultfd.h>
#include <sys/ioctl.h>

#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

#ifndef UFFDIO_MOVE
struct uffdio_move {
        __u64 dst;
        __u64 src;
        __u64 len;
#define UFFDIO_MOVE_MODE_DONTWAKE ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
        __u64 mode;
        __s64 move;
};
#define _UFFDIO_MOVE (0x05)
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif

/* PAGEMAP_SCAN on /proc/PID/pagemap (Linux 6.7), <linux/fs.h> of 6.7 */
#ifndef PAGEMAP_SCAN
struct page_region {
        __u64 start;
        __u64 end;
        __u64 categories;
};
struct pm_scan_arg {
        __u64 size;
        __u64 flags;
        __u64 start;
        __u64 end;
        __u64 walk_end;
        __u64 vec;
        __u64 vec_len;
        __u64 max_pages;
        __u64 category_inverted;
        __u64 category_mask;
        __u64 category_anyof_mask;
        __u64 return_mask;
};
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PAGE_IS_PFNZERO (1 << 5)
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif

/* PROCMAP_QUERY on /proc/PID/maps (Linux 6.11), <linux/fs.h> of 6.11: the
 * mapping at an address without reading every line before it */
#ifndef PROCMAP_QUERY
struct procmap_query {
        __u64 size;
        __u64 query_flags;
        __u64 query_addr;
        __u64 vma_start;
        __u64 vma_end;
        __u64 vma_flags;
        __u64 vma_page_size;
        __u64 vma_offset;
        __u64 inode;
        __u32 dev_major;
        __u32 dev_minor;
        __u32 vma_name_size;
        __u32 build_id_size;
        __u64 vma_name_addr;
        __u64 build_id_addr;
};
#define PROCMAP_QUERY_VMA_READABLE 0x01
#define PROCMAP_QUERY_VMA_WRITABLE 0x02
#define PROCMAP_QUERY_VMA_EXECUTABLE 0x04
#define PROCMAP_QUERY_VMA_SHARED 0x08
#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
#endif

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC 0xAA
#define USERFAULTFD_IOC_NEW _IO(USERFAULTFD_IOC, 0x00)
#endif

/* UFFDIO_POISON (Linux 6.6): the page reads as a hardware memory error
 * (SIGBUS), what a page the second tier lost must become */
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#endif
#ifndef UFFDIO_POISON
struct uffdio_poison {
        struct uffdio_range range;
#define UFFDIO_POISON_MODE_DONTWAKE ((__u64)1 << 0)
        __u64 mode;
        __s64 updated;
};
#define _UFFDIO_POISON (0x08)
#define UFFDIO_POISON _IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)
#endif
