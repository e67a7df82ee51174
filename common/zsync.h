/*
 * zsync.h: the page a client shares with the daemon, and the handshake
 * that keeps the agent's page moves apart from the daemon's reading of
 * the client's uffd (docs/page-lifecycle.md, "munmap and a move in
 * flight").
 *
 * munmap() returns once the daemon has *read* the UNMAP event, not once
 * it has handled it. A move the daemon planned before could then take a
 * page of a new mapping the program put at the same address. So a move
 * never runs while a daemon thread is between reading a message and
 * having handled it: Dekker's handshake on two counters in a sealed memfd
 * page mapped by both. The agent steps back when it sees a reader; the
 * reader waits for moves in progress (64 pages at most each), so an UNMAP
 * is handled before any later move can start, and a move that started
 * before the read finished before munmap() could return.
 *
 * Counters, not flags: a forked child shares the page with its parent
 * until it attaches with a page of its own.
 *
 * An agent that finds a reader sleeps on `reading` (a futex shared by the
 * two mappings of the page) and the reader that brings it to 0 wakes it,
 * but only if `waiting` says an agent sleeps, so that a read costs no
 * system call while no move waits. Each sleep is bounded (ZSYNC_SLEEP_NS):
 * a daemon that does not wake (an older one, or one that died) only makes
 * the agent look again a millisecond later.
 *
 * The daemon never trusts the page, and never waits for a move: a read
 * that finds one under way is put off (zsync_read_begin() with wait_ns 0)
 * and tried again while the fault thread serves others, and a move still
 * under way after ZSYNC_READ_WAIT_NS is revoked (daemon/fault/fault.c,
 * revoke_moves(): every slot it may be moving into is filled, so the move
 * fails when it runs), and the uffd is read then. However long an agent
 * stays descheduled, stopped or frozen, only its own faults wait, and
 * only for the revocation.
 */
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ZSWAP_SYNC_SIZE 4096
#define ZSYNC_READ_WAIT_NS (2 * 1000 * 1000ull)  /* daemon: how long a read is put off for a move before it revokes it */
#define ZSYNC_MOVE_WAIT_NS (20 * 1000 * 1000ull) /* agent: longest wait for a reader */
#define ZSYNC_MOVE_CHUNK 64                      /* pages per move between checks */
#define ZSYNC_SLEEP_NS (1000 * 1000ull)          /* agent: longest sleep before it looks again */

typedef struct ZSync {
        _Atomic uint32_t moving;  /* agent threads inside a UFFDIO_MOVE */
        _Atomic uint32_t reading; /* daemon threads between a read of the uffd and its handling */
        _Atomic uint32_t waiting; /* agent threads asleep on `reading` until it falls to 0 */
        /* +1 each time the daemon drops or moves a part of the client's
         * managed memory on the kernel's word (an UNMAP or REMAP event):
         * the preload shim's scanner then asks for the list again
         * (ZMSG_REGIONS). Written by the daemon, read by the client;
         * nothing of the daemon depends on its value */
        _Atomic uint32_t regions_gen;
} ZSync;

static inline uint64_t zsync_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Agent: before a move. false: a reader stayed too long; skip the move. */
static inline bool zsync_move_begin(ZSync *s) {
        uint64_t t0 = 0;
        if (!s)
                return true;
        for (;;) {
                atomic_fetch_add_explicit(&s->moving, 1, memory_order_seq_cst);
                if (atomic_load_explicit(&s->reading, memory_order_seq_cst) == 0)
                        return true;
                atomic_fetch_sub_explicit(&s->moving, 1, memory_order_seq_cst);
                if (!t0)
                        t0 = zsync_now_ns();
                uint32_t r;
                while ((r = atomic_load_explicit(&s->reading, memory_order_seq_cst)) != 0) {
                        uint64_t waited = zsync_now_ns() - t0;
                        if (waited > ZSYNC_MOVE_WAIT_NS)
                                return false;
                        uint64_t ns = ZSYNC_MOVE_WAIT_NS - waited;
                        struct timespec ts = { 0, (long)(ns < ZSYNC_SLEEP_NS ? ns : ZSYNC_SLEEP_NS) };
                        /* seq_cst, against zsync_read_end(): either the
                         * reader sees us waiting and wakes us, or we see
                         * `reading` changed and do not sleep (and the
                         * futex checks the value once more) */
                        atomic_fetch_add_explicit(&s->waiting, 1, memory_order_seq_cst);
                        if (atomic_load_explicit(&s->reading, memory_order_seq_cst) == r)
                                syscall(SYS_futex, &s->reading, FUTEX_WAIT, r, &ts, NULL, 0);
                        atomic_fetch_sub_explicit(&s->waiting, 1, memory_order_seq_cst);
                }
        }
}

static inline void zsync_move_end(ZSync *s) {
        if (s)
                atomic_fetch_sub_explicit(&s->moving, 1, memory_order_seq_cst);
}

/* Daemon: before reading the uffd. Raises `reading` (unless `held`: a
 * call that returned false left it raised) and waits up to wait_ns for a
 * move in progress to end. False if it did not: the reader must not read
 * now, and keeps `reading` raised, so that the agent starts no new move,
 * until the move is over or revoked. Reading before could let an munmap()
 * return while a move the daemon planned before it is still under way,
 * and that move could take a page of a new mapping at the same address. */
static inline bool zsync_read_begin(ZSync *s, uint64_t wait_ns, bool held) {
        uint64_t t0 = 0;
        if (!s)
                return true;
        if (!held)
                atomic_fetch_add_explicit(&s->reading, 1, memory_order_seq_cst);
        while (atomic_load_explicit(&s->moving, memory_order_seq_cst) != 0) {
                /* sleep, not spin: the agent may need this very CPU (a
                 * pinned, perhaps SCHED_FIFO, fault thread would starve it) */
                struct timespec ts = { 0, 5000 };
                if (!t0)
                        t0 = zsync_now_ns();
                if (zsync_now_ns() - t0 >= wait_ns)
                        return false;
                nanosleep(&ts, NULL);
        }
        return true;
}

/* Daemon: the messages read are handled. The last reader wakes the
 * agents asleep for it; a client that claims sleepers it does not have
 * costs its own reader a futex wake per read, nothing more. */
static inline void zsync_read_end(ZSync *s) {
        if (s && atomic_fetch_sub_explicit(&s->reading, 1, memory_order_seq_cst) == 1 &&
            atomic_load_explicit(&s->waiting, memory_order_seq_cst) != 0)
                syscall(SYS_futex, &s->reading, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}
