/* uring.c: see uring.h */
#include "uring.h"

#if defined(__SANITIZE_THREAD__)
#include <pthread.h>

/* ThreadSanitizer's own annotation (libtsan) */
void AnnotateBenignRaceSized(const char *file, int line, const volatile void *mem, size_t size, const char *desc);
#define URING_SHARED(p, n) AnnotateBenignRaceSized(__FILE__, __LINE__, (p), (n), "io_uring queue")

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
#define ORDER_LOCK() pthread_mutex_lock(&order_lock)
#define ORDER_UNLOCK() pthread_mutex_unlock(&order_lock)
#else
#define URING_SHARED(p, n) ((void)0)
#define ORDER_LOCK() ((void)0)
#define ORDER_UNLOCK() ((void)0)
#endif

int uring_init(unsigned entries, struct io_uring *ring, unsigned flags) {
        ORDER_LOCK();
        int r = io_uring_queue_init(entries, ring, flags);
        ORDER_UNLOCK();
        if (r < 0)
                return r;
        URING_SHARED(ring->sq.ring_ptr, ring->sq.ring_sz);
        URING_SHARED(ring->sq.sqes, (size_t)ring->sq.ring_entries * sizeof(struct io_uring_sqe));
        if (ring->cq.ring_ptr != ring->sq.ring_ptr)
                URING_SHARED(ring->cq.ring_ptr, ring->cq.ring_sz);
        return 0;
}

void uring_exit(struct io_uring *ring) {
        ORDER_LOCK();
        io_uring_queue_exit(ring);
        ORDER_UNLOCK();
}
