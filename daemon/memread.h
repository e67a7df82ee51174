/*
 * memread.h: reads of a client's memory that no client can make wait.
 *
 * The daemon reads a client's staging slots and its fork token through
 * /proc/PID/mem. Such a read faults the page in, in the reading thread,
 * and the client chooses what is mapped at those addresses: memory it
 * registered on a userfaultfd of its own that it never answers, or a file
 * of a FUSE server it runs. A plain pread() would then wait as long as the
 * client likes, and only a fatal signal to the waiting thread would end
 * it: a fault thread or the manager held, every client stalled.
 *
 * So no daemon thread makes that read itself. memread() submits it to an
 * io_uring of the calling thread's, forced to the ring's kernel worker
 * (IOSQE_ASYNC), into a buffer of the ring's, and waits for its completion
 * at most MEMREAD_BOUND_MS. A read that has not completed by then is
 * abandoned: its ring and buffer are set aside (the kernel may still write
 * that buffer) and the thread goes on with a new ring. memread_reap()
 * frees what was set aside once its read has completed, and not before
 * MEMREAD_PENALTY_MS have passed: memread_stuck() counts a user's set
 * aside reads, and the manager refuses that user's connections while any
 * is left (manager.c), so that an attacker cannot hold a thread for the
 * bound again and again.
 *
 * Linux 6.18 fails a read that an io_uring worker makes of memory
 * registered on a userfaultfd with EIO at once (it waits when a plain
 * pread() makes it), so that attack costs the daemon nothing; the bound is
 * for what may wait anyway, such as a FUSE server that never answers.
 * Without io_uring (io_uring_setup() refused, kernel.io_uring_disabled),
 * memread() falls back to pread(), unbounded, and says so once.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MEMREAD_BOUND_MS 1000u
#define MEMREAD_PENALTY_MS 60000u

/*
 * len bytes at offset off of fd (a /proc/PID/mem descriptor) into buf.
 * 0; -EFAULT if part of the range cannot be read (unmapped, or a page the
 * kernel would not fault in); -ESRCH if nothing could be read at all (the
 * address space is gone); -ETIMEDOUT if the read did not complete within
 * MEMREAD_BOUND_MS: it is abandoned, counted against uid. Any thread.
 */
int memread(int fd, uint64_t off, void *buf, size_t len, uid_t uid);

/* Make the calling thread's ring now (each thread that reads clients'
 * memory has one; made lazily otherwise): its descriptor is there from the
 * thread's start, not from its first read. */
void memread_thread_init(void);

/* memread() into a buffer of the calling thread's, *out, valid until its
 * next memread*() call: no copy. */
int memread_view(int fd, uint64_t off, size_t len, uid_t uid, const uint8_t **out);

/* Reads abandoned for uid (memread) not yet freed by memread_reap(). */
unsigned memread_stuck(uid_t uid);

/* Free abandoned reads that have completed and served their penalty.
 * Manager thread, each tick. */
void memread_reap(void);

/* At exit: the calling thread's ring, and every abandoned read whose
 * completion has come (the rest stay: the kernel may write them still). */
void memread_free(void);
