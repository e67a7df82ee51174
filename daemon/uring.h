/*
 * uring.h: making an io_uring (the second tier's rings and every NBD
 * connection's) in a way ThreadSanitizer can live with.
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
 * to expect races on the queues. Without TSan it is io_uring_queue_init().
 */
#pragma once

#include <liburing.h>
#include <stddef.h>

#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer's own annotation (libtsan) */
void AnnotateBenignRaceSized(const char *file, int line, const volatile void *mem, size_t size, const char *desc);
#define URING_SHARED(p, n) AnnotateBenignRaceSized(__FILE__, __LINE__, (p), (n), "io_uring queue")
#else
#define URING_SHARED(p, n) ((void)0)
#endif

static inline int uring_init(unsigned entries, struct io_uring *ring, unsigned flags) {
        int r = io_uring_queue_init(entries, ring, flags);
        if (r < 0)
                return r;
        URING_SHARED(ring->sq.ring_ptr, ring->sq.ring_sz);
        URING_SHARED(ring->sq.sqes, (size_t)ring->sq.ring_entries * sizeof(struct io_uring_sqe));
        if (ring->cq.ring_ptr != ring->sq.ring_ptr)
                URING_SHARED(ring->cq.ring_ptr, ring->cq.ring_sz);
        return 0;
}
