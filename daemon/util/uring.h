/*
 * uring.h: making and unmaking an io_uring (the second tier's rings, every
 * NBD connection's, the memory readers') in a way ThreadSanitizer can live
 * with, and without a lock anyone else waits on.
 *
 * A ring's queues are memory the kernel shares with us, which liburing
 * maps with raw system calls TSan does not see. TSan then keeps whatever
 * history it had for those addresses: a test under TSan saw the writer
 * thread's first read of a new NBD connection's queue reported as a race
 * with the manager thread's mmap() of a client's sync page, unmapped long
 * before, that had been at the same address (test-tier-nbd-down-restart;
 * TSan then killed the daemon, and the test's client lost the pages it
 * had on the tier). The kernel's side of the queues is invisible to TSan
 * anyway, and each ring has one user at a time (the tier's rings: their
 * thread; an NBD connection: whoever holds it), so uring_init() tells TSan
 * to expect races on the queues.
 *
 * Under TSan only, making and unmaking are also ordered by one lock (so an
 * unmaking happens before a making at the same address), held for the
 * system calls alone, never across a connect or any I/O. The other builds
 * take no lock: the kernel orders mmap and munmap itself, and a fault
 * thread that makes a ring never waits for another thread's.
 */
#pragma once

#include <liburing.h>
#include <stddef.h>

/* io_uring_queue_init(); negative errno */
int uring_init(unsigned entries, struct io_uring *ring, unsigned flags);
/* io_uring_queue_exit() */
void uring_exit(struct io_uring *ring);
