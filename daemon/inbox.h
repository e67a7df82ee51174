/*
 * inbox.h: a multi-producer, single-consumer work list with an eventfd.
 *
 * Producers push with one compare-and-swap; the consumer takes the whole
 * list at once with an atomic exchange, which is ABA-free because nothing
 * is ever popped singly. No producer ever waits for the consumer or for
 * another producer, so a compression worker can hand work to a fault
 * thread (and a fault thread to the manager) without a lock either side
 * could be preempted while holding.
 */
#pragma once

#include <stdatomic.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "macro.h"

typedef struct Work Work;

typedef struct Inbox {
        _Atomic(Work *) head;
        int efd;
} Inbox;

struct Work {
        Work *next;
        int type;
        struct MMClient *mm; /* holds a reference */
        uint64_t a, b, v;
        uint32_t lane;
        uint32_t id;
        int status;
};

static inline int inbox_init(Inbox *ib) {
        atomic_init(&ib->head, NULL);
        ib->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        return ib->efd < 0 ? negative_errno() : 0;
}

static inline void inbox_push(Inbox *ib, Work *w) {
        /* release: the consumer's acquire exchange sees the item's fields */
        Work *old = atomic_load_explicit(&ib->head, memory_order_relaxed);
        do
                w->next = old;
        while (!atomic_compare_exchange_weak_explicit(&ib->head, &old, w, memory_order_release,
                                                      memory_order_relaxed));
        if (!old) {
                /* the list was empty: the consumer may be asleep */
                uint64_t one = 1;
                (void)!write(ib->efd, &one, sizeof(one));
        }
}

/* Take everything, oldest first. Clear the eventfd before calling. */
static inline Work *inbox_take(Inbox *ib) {
        Work *w = atomic_exchange_explicit(&ib->head, NULL, memory_order_acquire), *rev = NULL;
        while (w) {
                Work *n = w->next;
                w->next = rev;
                rev = w;
                w = n;
        }
        return rev;
}

static inline void inbox_clear(Inbox *ib) {
        uint64_t v;
        (void)!read(ib->efd, &v, sizeof(v));
}
