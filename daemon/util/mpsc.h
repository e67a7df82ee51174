/*
 * mpsc.h: a list any thread pushes onto and one consumer takes whole.
 *
 * MPSC_LIST(name, Type, link) defines, for items of Type chained through
 * their `Type *link` field:
 *
 *   bool name_push(_Atomic(Type *) *head, Type *item)
 *           one compare-and-swap; true when the list was empty, so that the
 *           caller wakes a consumer that may be asleep (an eventfd) only
 *           then. Never waits for the consumer or for another producer.
 *   Type *name_take(_Atomic(Type *) *head)
 *           everything pushed so far, oldest first, in one exchange.
 *
 * It is a Treiber stack without a single pop: with only push and take-all
 * there is no ABA (a push links to whatever the head is when its CAS
 * succeeds, and nothing is ever removed from the middle). The push's CAS
 * is release and the take's exchange acquire, so the consumer sees every
 * field the producer wrote before pushing; a failed CAS only retries with
 * the head it read, through which nothing is read, so relaxed. The
 * daemon's work inboxes (inbox.h), the tier pump's job queues and the
 * manager's fork orphans are such lists.
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define MPSC_LIST(name, Type, link)                                                                    \
        static inline bool name##_push(_Atomic(Type *) *head, Type *item) {                            \
                Type *old = atomic_load_explicit(head, memory_order_relaxed);                          \
                do                                                                                     \
                        item->link = old;                                                              \
                while (!atomic_compare_exchange_weak_explicit(head, &old, item, memory_order_release,  \
                                                              memory_order_relaxed));                  \
                return old == NULL;                                                                    \
        }                                                                                              \
        static inline Type *name##_take(_Atomic(Type *) *head) {                                       \
                Type *item = atomic_exchange_explicit(head, NULL, memory_order_acquire), *fifo = NULL; \
                while (item) {                                                                         \
                        Type *next = item->link;                                                       \
                        item->link = fifo;                                                             \
                        fifo = item;                                                                   \
                        item = next;                                                                   \
                }                                                                                      \
                return fifo;                                                                           \
        }
