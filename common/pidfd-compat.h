/*
 * pidfd-compat.h: process-descriptor definitions newer than Debian 12's
 * 6.1 headers. Each is guarded so that newer headers win; whether the
 * running kernel has it is found out by calling it (EINVAL/ENOPROTOOPT
 * when it does not), never from the version.
 */
#pragma once

#include <sys/socket.h>

/* getsockopt(SOL_SOCKET): a pidfd of the process that connected a Unix
 * socket, taken by the kernel at connect() (Linux 6.5). */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
