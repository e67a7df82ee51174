/*
 * closer.h: descriptors from clients, closed where a close that waits
 * cannot hold up the daemon.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

typedef struct Closer Closer;

/* Descriptors one user may have waiting to be closed; past it the user's
 * connections are dropped and new ones refused until the count falls. */
#define CLOSER_USER_MAX 16u
/* Threads that close, each for one user at a time (closer.c) */
#define CLOSER_THREADS 8u

int closer_new(Closer **ret);
Closer *closer_free(Closer *cl);

/* Whether closing fd can never wait: its file is of a kind whose last
 * close does no I/O and takes no lock another process can hold (an
 * anonymous inode other than a userfaultfd, a pidfd, a memfd or tmpfs
 * file, a pipe). */
bool fd_close_is_safe(int fd);
/* Whether a handler may keep fd: a file fd_close_is_safe() takes, or a
 * userfaultfd, whose close waits only for the mmap lock of the address
 * space it serves, and which only the closer threads close (through
 * closer_drop(), closer_hand() or closer_release()). */
bool fd_may_be_kept(int fd);

/* Close fd here if fd_close_is_safe(), else hand it to the closer threads,
 * counted against uid until it is closed. Returns -1. Manager thread. */
int closer_drop(Closer *cl, int fd, uid_t uid);

/* Hand fd to the closer threads whatever its kind, counted against uid:
 * for a descriptor whose close may wait (a client's userfaultfd, whose
 * release takes the mmap lock of the address space it serves for writing,
 * which its process, or a read of ours, may hold: memread.h). Returns -1.
 * Any thread. */
int closer_hand(Closer *cl, int fd, uid_t uid);
/* The same for the uffd of a client the daemon lets go (mmclient.c): closed
 * one of uid's at a time as the others, but not counted against uid's
 * bound, which is for what clients send (a process that forks a thousand
 * children lets a thousand uffds go at once). Returns -1. Any thread. */
int closer_release(Closer *cl, int fd, uid_t uid);

/* Descriptors of uid still waiting to be closed. Any thread. */
unsigned closer_pending(Closer *cl, uid_t uid);

/* Shut a connection's socket for reading, take every descriptor still
 * queued on it (each through closer_drop()), then close it: the kernel
 * would otherwise drop the queued ones' last references in this thread.
 * Returns -1. */
int closer_close_conn(Closer *cl, int fd, uid_t uid);
