/*
 * inbox.h: a multi-producer, single-consumer work list with an eventfd.
 *
 * An MPSC_LIST (mpsc.h): producers push with one compare-and-swap, the
 * consumer takes the whole list at once. The take is one exchange, so
 * another thread may take it all too (a fault thread takes the inbox of
 * one a call into a client holds: fault/work.c, work_steal()): each take
 * gets its own items. No producer ever waits for the consumer or for
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
#include "mpsc.h"

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
        void *data; /* a job's own memory (malloc'd), freed with the item */
};

MPSC_LIST(work_list, Work, next)

static inline int inbox_init(Inbox *ib) {
        atomic_init(&ib->head, NULL);
        ib->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        return ib->efd < 0 ? negative_errno() : 0;
}

static inline void inbox_push(Inbox *ib, Work *w) {
        if (work_list_push(&ib->head, w)) {
                /* the list was empty: the consumer may be asleep */
                uint64_t one = 1;
                (void)!write(ib->efd, &one, sizeof(one));
        }
}

/* Take everything, oldest first. Clear the eventfd before calling. */
static inline Work *inbox_take(Inbox *ib) {
        return work_list_take(&ib->head);
}

static inline void inbox_clear(Inbox *ib) {
        uint64_t v;
        (void)!read(ib->efd, &v, sizeof(v));
}
