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

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC 0xAA
#define USERFAULTFD_IOC_NEW _IO(USERFAULTFD_IOC, 0x00)
#endif
