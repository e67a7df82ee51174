/*
 * events.c: reading a client's uffd under its serve_lock (the kick, the
 * event journal, revoking the agent's moves) and the events it brings:
 * REMOVE, UNMAP, REMAP (FORK: fork.c). Overview: fault-internal.h.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "inject.h"
#include "fault-internal.h"
#include "log.h"
#include "stages.h"
#include "trace.h"

/*
 * Every message of a client's uffd is read into its store's journal
 * (store.h): from the moment the kernel hands an event over (and lets the
 * munmap, madvise or mremap that sent it return) until we have handled it,
 * a daemon killed at any instant leaves it to the next one (adopt.c). A
 * page fault needs no such care (the next daemon wakes every waiter) and
 * leaves the journal at once; an event leaves it through journal_done().
 * Under serve_lock. Returns what read() returned.
 */
static void journal_done(MMClient *mm) {
        /* what handling the event wrote to the store comes first, so that
         * a daemon killed right after this store leaves a store whose
         * journal is empty only once the event is applied. The journal is
         * the kernel's struct uffd_msg (linux/userfaultfd.h, event a
         * __u8), which read(2) fills whole (uffd_read_msg()) and which
         * cannot be declared _Atomic; its layout is the store's format
         * (store.c asserts where it lies). No other thread reads it: every
         * other access is the reader's, under serve_lock, or another
         * process's after this daemon died (store_journal_event(): a
         * copy). Death makes every store this thread did visible, so the
         * only order to keep is the compiler's: a signal fence (the order
         * a signal handler of this thread would see) and a volatile
         * store, which is one byte and cannot tear */
        atomic_signal_fence(memory_order_release);
        *(volatile __u8 *)&mm->journal->event = 0;
}

/*
 * Fault injection (kill_event, kill_remap): the daemon killed between
 * reading an event and finishing it, the window the journal closes. A
 * test picks the point by counting (kill_event=1/N); the kill's log line
 * names the points passed before it, so that a count that came out
 * otherwise than the test expected says why.
 */
#define KILL_SEEN 8
static _Atomic(const char *) kill_seen[KILL_SEEN];
static _Atomic unsigned kill_seen_n;

static void kill_now(const char *where) {
        char before[512];
        size_t len = 0;
        /* relaxed: this is the daemon's last word, and a point another
         * thread passes meanwhile may or may not be named */
        unsigned n = atomic_load_explicit(&kill_seen_n, memory_order_relaxed);

        before[0] = 0;
        for (unsigned i = n > KILL_SEEN ? n - KILL_SEEN : 0; i + 1 < n && len < sizeof(before); i++)
                len += (size_t)snprintf(before + len, sizeof(before) - len, " [%u] %s", i + 1,
                                        atomic_load_explicit(&kill_seen[i % KILL_SEEN], memory_order_relaxed));
        log_warn("fault injection: killed %s (kill point %u%s%s)", where, n, n > 1 ? "; before it:" : "", before);
        raise(SIGKILL);
}

static void kill_seen_add(const char *where) {
        unsigned i = atomic_fetch_add_explicit(&kill_seen_n, 1, memory_order_relaxed);
        atomic_store_explicit(&kill_seen[i % KILL_SEEN], where, memory_order_relaxed);
}

/* remap: the middle of an mremap's entries, a kill_event point and the
 * one kill_remap counts (a test that wants this very state, whatever
 * other events came before it) */
static void kill_point_of(const char *where, bool remap) {
        if (!inject_armed)
                return;
        kill_seen_add(where);
        if (INJECT(INJ_KILL_EVENT) || (remap && INJECT(INJ_KILL_REMAP)))
                kill_now(where);
}

static void kill_point(const char *where) {
        kill_point_of(where, false);
}

ssize_t uffd_read_msg(MMClient *mm, struct uffd_msg *msg) {
        /* relaxed: a hold that stops this read was set by this thread, a
         * moment ago under serve_lock (event_fork()); an end of a hold by
         * the manager, seen late, only puts the read off, which fork_held()
         * looks at again every millisecond */
        if (atomic_load_explicit(&mm->fork_hold, memory_order_relaxed) || mmclient_orphans_stopped(mm)) {
                /* held for a forked child (fork_held()), or its user has
                 * all the children not attached it may (event_fork()):
                 * read nothing */
                errno = EAGAIN;
                return -1;
        }
        ssize_t n = read(mm->uffd, mm->journal, sizeof(*msg));

        if (n != (ssize_t)sizeof(*msg))
                return n;
        *msg = *mm->journal;
        if (msg->event == UFFD_EVENT_PAGEFAULT)
                journal_done(mm);
        /* relaxed: the lanes of a fork child whose ATTACH the manager is
         * handling may be counted meanwhile, and only whether fault
         * injection may kill here depends on them */
        else if (msg->event != UFFD_EVENT_REMOVE || msg->arg.remove.start < mm->staging_addr ||
                 msg->arg.remove.start >= mm->staging_addr + (uint64_t)atomic_load_explicit(&mm->nlanes,
                                                                                            memory_order_relaxed) *
                                                                     LANE_SLOTS * ZSWAP_PAGE_SIZE)
                /* the library's own staging releases do not count */
                kill_point(msg->event == UFFD_EVENT_REMAP   ? "with an event read (REMAP)"
                           : msg->event == UFFD_EVENT_UNMAP ? "with an event read (UNMAP)"
                           : msg->event == UFFD_EVENT_FORK  ? "with an event read (FORK)"
                                                            : "with an event read (REMOVE)");
        return n;
}

/* ---- events ---- */

/* A page whose slot read is in flight, dropped or moved by an event: the
 * agent's move of it, should it not have happened, must not happen now
 * (a new mapping's page may be at its old address). moving_cancel() does
 * the same for a page nobody claimed. */
static void slot_poison(MMClient *mm, uint32_t slot);

static void retry_poison(MMClient *mm, Retry *r) {
        /* acquire: as every look at a retry's state (Retry.state) */
        if (!r->tier && atomic_load_explicit(&r->state, memory_order_acquire) == RS_READING)
                slot_poison(mm, pe_slot(r->loading));
}

/*
 * A page chosen for eviction (MOVING) in a range the program just dropped
 * or unmapped. The agent may not have moved it yet; whatever it would move
 * from now on is either the dying frame or, after munmap, a new mapping's
 * page that is not ours. Reading the slot maps the zero page there, and
 * UFFDIO_MOVE refuses a destination that is populated: the move can no
 * longer happen. If it happened already, the slot holds dead content. The
 * entry is dropped either way; the manager's and worker's CAS will fail.
 */
/*
 * Map the zero page at a staging slot, so that a move into it can no
 * longer happen (UFFDIO_MOVE refuses a populated destination). Under
 * serve_lock, while handling an event. UFFDIO_ZEROPAGE fails with EAGAIN
 * while another event is queued, unread; the agent's moves fail too until
 * it is read, and this thread reads it next: the slot waits in mm->poison
 * and is poisoned right after (drain_uffd()), before this thread lets the
 * agent move again (zsync.h). No read of the client's memory, no wait;
 * with the list full (16 slots, each an unread event's worth), the slot is
 * read instead, which maps the zero page whatever is queued (bounded,
 * memread.h).
 */
static void slot_poison(MMClient *mm, uint32_t slot) {
        if (mmclient_slot_zero(mm, slot) != -EAGAIN)
                return;
        if (mm->npoison < ELEMENTSOF(mm->poison)) {
                mm->poison[mm->npoison++] = slot;
                return;
        }
        mmclient_slot_poison(mm, slot);
}

/* The slots slot_poison() left: true once none is left. */
static bool poisons_run(MMClient *mm) {
        unsigned k = 0;

        for (unsigned i = 0; i < mm->npoison; i++)
                if (mmclient_slot_zero(mm, mm->poison[i]) == -EAGAIN)
                        mm->poison[k++] = mm->poison[i];
        mm->npoison = k;
        return k == 0;
}

static void moving_cancel(MMClient *mm, _Atomic uint64_t *e, uint64_t v) {
        TRACE(TR_CANCEL, 0, v, 0);
        for (;;) {
                unsigned st = pe_state(v);
                if (st == PE_MOVING) {
                        slot_poison(mm, pe_slot(v));
                        if (atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel,
                                                                    memory_order_acquire))
                                return;
                        continue; /* MOVE_DONE made it STAGED meanwhile */
                }
                if (st == PE_STAGED || st == PE_STORED || st == PE_SAME) {
                        /* moved before the event (and maybe compressed since):
                         * dead. Only this thread turns such an entry back into
                         * EMPTY, so it is still that page */
                        mmclient_entry_drop(mm, e);
                        return;
                }
                return;
        }
}

static int remove_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        TRACE(TR_DROP, addr, v, 0);

        if (pe_state(v) == PE_LOADING) {
                Retry **p = retry_find(c->mm, addr);
                if (p) {
                        retry_poison(c->mm, *p);
                        mmclient_release_payload(c->mm, (*p)->loading);
                        retry_drop(c->ft, p);
                        atomic_store_explicit(e, 0, memory_order_release);
                        uffd_wake(c->mm->uffd, addr);
                }
                return 0;
        }
        if (pe_state(v) == PE_MOVING) {
                moving_cancel(c->mm, e, v);
                return 0;
        }
        if (pe_state(v) == PE_REMOVED)
                return 0;
        /* STAGED: moved before the event, dead content. The worker's CAS
         * fails and it lets the page go */
        mmclient_entry_drop(c->mm, e);
        return 0;
}

/*
 * MADV_DONTNEED sends REMOVE before it zaps the pages, and the zap comes
 * only after we have read the event. A page still mapped now could be
 * chosen for eviction and moved out by the agent in that window; its old
 * content would then come back after the zap. So every page still mapped
 * gets a tombstone with its frame number: the planner will not move that
 * frame. Once the page is gone or replaced by a new frame, the tombstone
 * means nothing and is overwritten.
 */
static void tombstone_mapped(MMClient *mm, uint64_t start, uint64_t end) {
        uint64_t pm[512];

        if (mmclient_pagemap_fd(mm) < 0)
                return;
        end = MIN(end, PINDEX_MAX_ADDR);
        for (uint64_t a = start; a < end;) {
                size_t n = MIN((end - a) >> ZSWAP_PAGE_SHIFT, ELEMENTSOF(pm));
                ssize_t got = pread(mmclient_pagemap_fd(mm), pm, n * 8, (off_t)(a >> ZSWAP_PAGE_SHIFT) * 8);
                if (got <= 0)
                        return;
                n = (size_t)got / 8;
                for (size_t i = 0; i < n; i++) {
                        if (!(pm[i] & PM_PRESENT))
                                continue;
                        _Atomic uint64_t *e = pindex_entry(mm->index, a + i * ZSWAP_PAGE_SIZE, true);
                        if (!e)
                                continue;
                        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
                        for (;;) {
                                unsigned st = pe_state(v);
                                if (st == PE_MOVING || st == PE_STAGED) {
                                        /* the planner chose it since remove_cb */
                                        moving_cancel(mm, e, v);
                                        break;
                                }
                                if (st != PE_EMPTY)
                                        break;
                                if (atomic_compare_exchange_weak_explicit(e, &v, pe_make_removed(), memory_order_acq_rel,
                                                                          memory_order_acquire)) {
                                        TRACE(TR_TOMB, a + i * ZSWAP_PAGE_SIZE, pm[i], 0);
                                        break;
                                }
                        }
                }
                a += n * ZSWAP_PAGE_SIZE;
        }
}

static void event_remove(FaultThread *ft, MMClient *mm, uint64_t start, uint64_t end, bool unmap) {
        RangeCtx c = { .ft = ft, .mm = mm };
        TRACE(TR_REMOVE, start, end, unmap);

        /* the region goes first: a page the planner marks after our walk is
         * then outside every region, which the planner checks (evict.c) */
        if (unmap)
                mmclient_region_remove(mm, start, end, false);
        if (inject_armed && (unmap || mmclient_region_clip(mm, &(uint64_t){ start }, &(uint64_t){ end })))
                kill_point(unmap ? "with an munmap's ranges cut, its entries not yet" : "before dropping the entries of an MADV_DONTNEED");
        pindex_walk(mm->index, start, end, remove_cb, &c);
        if (unmap)
                return;
        /* only what we manage: the staging area is registered too, and
         * MADV_DONTNEED of it (RELEASE) comes here as well */
        for (uint64_t s = start, e = end; s < end; s = e, e = end) {
                if (!mmclient_region_clip(mm, &s, &e))
                        break;
                tombstone_mapped(mm, s, e);
        }
}

static int remap_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RangeCtx *c = ud;
        uint64_t to = addr + (uint64_t)c->delta;
        _Atomic uint64_t *ne = pindex_entry(c->mm->index, to, true);

        if (!ne) {
                c->errors++;
                return 0;
        }
        /* the kernel unmapped the destination first: what we held there is
         * dead, including a retry of ours */
        if (pe_state(atomic_load_explicit(ne, memory_order_acquire)) == PE_LOADING) {
                Retry **p = retry_find(c->mm, to);
                if (p) {
                        retry_poison(c->mm, *p);
                        mmclient_release_payload(c->mm, (*p)->loading);
                        retry_drop(c->ft, p);
                        atomic_store_explicit(ne, 0, memory_order_release);
                }
        }
        mmclient_entry_drop(c->mm, ne);
        /*
         * The entry is written at its new place before it leaves the old
         * one: a daemon killed in between leaves it at both, and the next
         * one keeps the one the journal's mremap carries, this one
         * (adopt.c). Taken from the old place first, a kill in between
         * left the page at neither, and it read as zeros (test-soak). A
         * CAS that fails (a worker, the manager or reclaim changed the
         * entry meanwhile) writes the new place again. An entry the next
         * daemon drops anyway (CLEAN: resident; REMOVED; EMPTY) leaves the
         * old place first, so that reclaim never finds a kept copy twice.
         */
        uint64_t v = atomic_load_explicit(e, memory_order_acquire), nv;
        for (;;) {
                /* a page the tier's writer is copying comes here without
                 * its mark: the writer knows a page by its address and
                 * value, and another page of the same value (a reused pool
                 * handle) may have been marked at this address before
                 * (docs/tier.md) */
                nv = pe_state(v) == PE_STORED ? v & ~PE_MARKS : v;
                if (pe_state(v) == PE_CLEAN || pe_state(v) == PE_REMOVED || pe_state(v) == PE_EMPTY) {
                        if (!atomic_compare_exchange_weak_explicit(e, &v, 0, memory_order_acq_rel,
                                                                   memory_order_acquire))
                                continue;
                        atomic_store_explicit(ne, nv, memory_order_release);
                        break;
                }
                atomic_store_explicit(ne, nv, memory_order_release);
                if (c->kill_at && addr >= c->kill_at) {
                        c->kill_at = 0;
                        kill_point_of("with an mremap's entry at its old place and its new one", true);
                }
                if (atomic_compare_exchange_weak_explicit(e, &v, 0, memory_order_acq_rel, memory_order_acquire))
                        break;
        }
        v = nv;
        if (pe_state(v) == PE_LOADING) {
                Retry **p = retry_find(c->mm, addr);
                if (p) {
                        retry_poison(c->mm, *p);
                        (*p)->addr = to;
                }
                uffd_wake(c->mm->uffd, addr);
        } else if (pe_state(v) == PE_MOVING || pe_state(v) == PE_STAGED) {
                /* the worker and the manager know the page by its old
                 * address; take it over now and install it where it went.
                 * A MOVING page's slot is filled first, as an UNMAP's
                 * (moving_cancel()): the agent's move, made for the old
                 * address, may not have run yet, and once mremap()
                 * returns a new mapping may be there. serve() alone left
                 * it to a slot read still in flight, or to no read at all
                 * (too many in flight), when the agent could move again,
                 * and the move took the new mapping's page (test-dos
                 * late) */
                if (pe_state(v) == PE_MOVING)
                        slot_poison(c->mm, pe_slot(v));
                serve(c->ft, c->mm, to, false, false);
        }
        return 0;
}

/*
 * The UNMAP of an mremap's old range. The kernel unmaps [from, from + len)
 * before it sends the REMAP (mm/mremap.c: move_vma() calls
 * unmap_source_vma() under the mmap lock; do_mremap() then waits for the
 * REMAP to be read, mremap_userfaultfd_complete(), and only after that
 * sends the UNMAP, userfaultfd_unmap_complete()). So that UNMAP comes once
 * the mremap's thread runs again, and another thread may have moved a
 * mapping of its own into the freed range meanwhile, whose REMAP came
 * first. Taken as any UNMAP, the late one dropped the pages just moved
 * there, and those held compressed read as zeros (test-preload churn,
 * test-remap-order). The REMAP emptied the old range already (remap_cb(),
 * mmclient_region_move()), so an UNMAP of exactly a range a REMAP left is
 * that mremap's own and changes nothing.
 *
 * An mremap with MREMAP_DONTUNMAP sends no UNMAP. A range is forgotten
 * as soon as the kernel has no event under way (remap_src_expire()):
 * every UNMAP still to come was begun before, and keeps the kernel's
 * mmap_changing raised until it is read.
 */
static void remap_src_add(MMClient *mm, uint64_t start, uint64_t end) {
        if (mm->nremap_src == ELEMENTSOF(mm->remap_src)) {
                /* more mremaps under way than threads are likely to make:
                 * the oldest one's UNMAP is taken as any */
                memmove(&mm->remap_src[0], &mm->remap_src[1], (mm->nremap_src - 1) * sizeof(mm->remap_src[0]));
                mm->nremap_src--;
        }
        mm->remap_src[mm->nremap_src].start = start;
        mm->remap_src[mm->nremap_src].end = end;
        mm->remap_src[mm->nremap_src].seq = ++mm->remap_seq;
        mm->nremap_src++;
}

static void remap_src_forget(MMClient *mm);

/* Is [start, end) the old range of an mremap handled already? Then it is
 * taken off the list: true. */
static bool remap_src_take(MMClient *mm, uint64_t start, uint64_t end) {
        /* not a range whose UNMAP was read before the kernel last said
         * none was under way: this UNMAP is another's */
        remap_src_forget(mm);
        for (unsigned i = 0; i < mm->nremap_src; i++)
                if (mm->remap_src[i].start == start && mm->remap_src[i].end == end) {
                        memmove(&mm->remap_src[i], &mm->remap_src[i + 1],
                                (mm->nremap_src - i - 1) * sizeof(mm->remap_src[0]));
                        mm->nremap_src--;
                        return true;
                }
        return false;
}

/*
 * The ranges whose UNMAP cannot come any more are forgotten. Once the
 * kernel had no event under way at some moment (uffd_event_under_way():
 * UFFDIO_WRITEPROTECT refuses with EAGAIN while one is, mmap_changing),
 * every UNMAP an mremap handled before then was to send had been read,
 * and so handled by us (a message is handled under serve_lock before the
 * next is read): those of its ranges left belong to none.
 *
 * That ioctl takes the client's mmap lock for reading
 * (mwriteprotect_range()), which a client can keep from us for as long as
 * it likes (a FUSE read of its own with a writer of its own queued behind
 * it, docs/security.md). A fault thread that waited there would leave
 * every client it serves waiting with it, so the question is a job of
 * the manager's (MW_EVENTS_ASK, then MW_JOB_EVENTS), one at a time, and
 * the answer covers the ranges added before it was asked
 * (remap_probed); a later drain forgets them. Meanwhile the list only
 * waits: at its bound the oldest range goes first (remap_src_add()).
 */
static void remap_src_forget(MMClient *mm) {
        uint64_t probed = atomic_load_explicit(&mm->remap_probed, memory_order_relaxed);
        unsigned k = 0;

        for (unsigned i = 0; i < mm->nremap_src; i++)
                if (mm->remap_src[i].seq > probed)
                        mm->remap_src[k++] = mm->remap_src[i];
        mm->nremap_src = k;
}

static void remap_src_expire(MMClient *mm) {
        remap_src_forget(mm);
        if (!mm->nremap_src || atomic_exchange_explicit(&mm->remap_probing, true, memory_order_relaxed))
                return;
        Work *w = work_new(MW_EVENTS_ASK, mm);
        if (!w) {
                /* out of memory: the next drain asks again */
                atomic_store_explicit(&mm->remap_probing, false, memory_order_relaxed);
                return;
        }
        w->a = mm->remap_seq;
        core_post(mm->core, w);
}

static void event_remap(FaultThread *ft, MMClient *mm, uint64_t from, uint64_t to, uint64_t len) {
        RangeCtx c = { .ft = ft, .mm = mm, .delta = (int64_t)(to - from) };
        TRACE(TR_REMAP, from, to, len);

        if (to > from && to < from + len) {
                /* overlapping move to higher addresses: walk would revisit moved
                 * entries; the kernel never does this (mremap needs disjoint
                 * ranges), so just refuse to guess */
                log_error("pid %d: overlapping remap %#llx -> %#llx", (int)mmclient_pid(mm), (unsigned long long)from,
                          (unsigned long long)to);
                return;
        }
        if (inject_armed)
                c.kill_at = from + len / 2;
        pindex_walk(mm->index, from, from + len, remap_cb, &c);
        if (c.kill_at) /* no entry held content from the middle on: the injection's count stays the same */
                kill_point_of("with an mremap's entries moved, none past the middle of its range", true);
        kill_point("with an mremap's entries moved, its ranges not yet");
        if (c.errors)
                log_error("pid %d: out of memory moving %d entries on mremap", (int)mmclient_pid(mm), c.errors);
        mmclient_region_move(mm, from, to, len);
        remap_src_add(mm, from, from + len);
}

/* Tell the client's scanner (under the preload shim) that what it
 * registered is no longer all managed where it was: it asks for the list
 * again (ZMSG_REGIONS) and hands over a mapping made since where one was
 * taken away, or the part of a grown one the daemon never had. Under
 * serve_lock, which keeps mm->sync; the page is the client's to write
 * too, so nothing here reads it back. */
static void regions_changed(MMClient *mm) {
        if (mm->sync)
                atomic_fetch_add_explicit(&mm->sync->regions_gen, 1, memory_order_release);
}

static void handle_msg(FaultThread *ft, MMClient *mm, const struct uffd_msg *msg) {
        switch (msg->event) {
        case UFFD_EVENT_PAGEFAULT:
                mm->fault_tid = msg->arg.pagefault.feat.ptid;
                serve(ft, mm, msg->arg.pagefault.address & ~(ZSWAP_PAGE_SIZE - 1),
                      msg->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE, true);
                break;
        case UFFD_EVENT_FORK:
                event_fork(ft, mm, (int)msg->arg.fork.ufd);
                break;
        case UFFD_EVENT_REMAP:
                event_remap(ft, mm, msg->arg.remap.from, msg->arg.remap.to, msg->arg.remap.len);
                regions_changed(mm);
                break;
        case UFFD_EVENT_REMOVE:
                event_remove(ft, mm, msg->arg.remove.start, msg->arg.remove.end, false);
                break;
        case UFFD_EVENT_UNMAP:
                if (remap_src_take(mm, msg->arg.remove.start, msg->arg.remove.end)) {
                        TRACE(TR_REMOVE, msg->arg.remove.start, msg->arg.remove.end, 2);
                        break; /* an mremap's own, late: its REMAP did it */
                }
                event_remove(ft, mm, msg->arg.remove.start, msg->arg.remove.end, true);
                regions_changed(mm);
                break;
        default:
                break;
        }
}

/* ---- revoking the agent's moves ---- */

/*
 * A move the agent began before we raised `reading` has not ended: its
 * thread is descheduled, stopped, traced or throttled by a CPU quota, or
 * it waits for a system call of its own process that waits for this very
 * read (valgrind runs one thread of a process at a time). Waiting for it
 * lets it hold its client's faults as long as it stays stuck; reading the
 * uffd while it may still run lets an munmap() return and the move take a
 * page of a new mapping at the same address. So the move is revoked: every
 * slot of every lane the agent may be moving into is read through
 * /proc/PID/mem. A read of an empty slot maps the zero page there, so the
 * move fails (EEXIST) when it runs and the page stays where it is
 * (evict.c, moved_check(): slot filled, source still there); a slot the
 * move filled already is read and left as it is. The read is of the
 * client's memory, so it goes through the thread's queue (memread.h) and
 * only this client waits for it. Its lanes' slots are released with the
 * lane (the zero pages with the rest).
 */

#define REVOKE_LEN ((size_t)LANE_SLOTS * ZSWAP_PAGE_SIZE)

/* Read lane li of mm for a revocation; false: not now. Under serve_lock. */
static bool revoke_submit(FaultThread *ft, MMClient *mm, unsigned li) {
        uint64_t off = mmclient_slot_addr(mm, li * LANE_SLOTS);

        if (mmclient_mem_fd(mm) < 0)
                return false; /* nothing to read it with: the agent is waited for */
        if (!ft->reads) {
                /* no io_uring: a read bounded by the read bound (memread.h) */
                const uint8_t *p;
                int r = memread_view(mmclient_mem_fd(mm), off, REVOKE_LEN, mm->uid, &p);
                if (r < 0)
                        log_debug("pid %d: reading lane %u to revoke a move: %s", (int)mmclient_pid(mm), li,
                                  strerror(-r));
                return true;
        }
        if (!memread_queue_has_room(ft->reads))
                return false;
        if (!ft->revoke_buf && !(ft->revoke_buf = INJECT_ALLOC(malloc(REVOKE_LEN))))
                return false;
        RevokeRead *rr = INJECT_ALLOC(malloc(sizeof(*rr)));
        if (!rr)
                return false;
        rr->mm = mmclient_ref(mm);
        atomic_fetch_add_explicit(&mm->revoke_reads, 1, memory_order_relaxed);
        if (!read_submit(ft, mm, &rr->op, off, ft->revoke_buf, REVOKE_LEN, READ_REVOKE)) {
                atomic_fetch_sub_explicit(&mm->revoke_reads, 1, memory_order_relaxed);
                mmclient_unref(mm);
                free(rr);
                return false;
        }
        return true;
}

/* A revocation's read is back (or given up at exit). A read that failed
 * did so because the slots are not memory the agent can move into (the
 * client unmapped or replaced its staging area, or is gone). */
void revoke_read_done(FaultThread *ft, MemReadOp *op) {
        RevokeRead *rr = container_of(op, RevokeRead, op);

        close(op->fd);
        if (op->res < 0 && op->res != -ECANCELED)
                log_debug("pid %d: reading a lane at %#llx to revoke a move: %s", (int)mmclient_pid(rr->mm),
                          (unsigned long long)op->off, strerror(-op->res));
        /* release: to drain_uffd(), which reads the uffd once it sees 0 */
        atomic_fetch_sub_explicit(&rr->mm->revoke_reads, 1, memory_order_release);
        ft->retry_due = true; /* run_due_retries() looks at the read put off */
        mmclient_unref(rr->mm);
        free(rr);
}

/* Are the moves the agent may still make revoked? The first call after a
 * read of the uffd starts the revocation; under serve_lock, with our
 * `reading` raised, so the lanes seen here are all a move under way can
 * go to (zsync.h: the agent began it before it saw `reading`, and the
 * lane's bit was set before it was told to). */
static bool revoke_moves(FaultThread *ft, MMClient *mm) {
        if (!mm->revoking) {
                mm->revoking = true;
                /* acquire: pairs with the manager's release when it marks
                 * a lane moving (evict.c, lane_set_state()) */
                mm->revoke_left = atomic_load_explicit(&mm->lanes_moving, memory_order_acquire);
                /* counted as it begins: before any move it revokes can
                 * fail, so before the pageout that made the move returns */
                atomic_fetch_add_explicit(&ft->core->moves_revoked, 1, memory_order_relaxed);
        }
        while (mm->revoke_left) {
                unsigned li = (unsigned)__builtin_ctz(mm->revoke_left);
                if (li < mm->nlanes && !revoke_submit(ft, mm, li))
                        return false;
                mm->revoke_left &= ~(1u << li);
        }
        /* acquire: the kernel's read is done before we read the uffd */
        return atomic_load_explicit(&mm->revoke_reads, memory_order_acquire) == 0;
}

/* Read and handle messages until the uffd is empty. One message per read:
 * the kernel lets a munmap() or madvise() return once its event is read,
 * so an event must be handled right after it is read, not after a batch
 * of faults read with it. */
static void drain_messages(FaultThread *ft, MMClient *mm, uint64_t now) {
        struct uffd_msg msg;

        for (;;) {
                if (mm->has_stash) {
                        /* read by fault-around, handled now, in order */
                        msg = mm->stash;
                        mm->has_stash = false;
                        ft->fault_t0 = ft->stash_t0;
                        ft->stash_t0 = 0;
                        now = 0;
                        handle_msg(ft, mm, &msg);
                        /* an event stays in the journal while stashed,
                         * also one fault-around just stashed */
                        if (!mm->has_stash)
                                journal_done(mm);
                        ft->fault_t0 = 0;
                        continue;
                }
                ssize_t n = uffd_read_msg(mm, &msg);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
                                /* a fork event, whose child's uffd the kernel
                                 * could not install in our table: it keeps the
                                 * event, and the forking process waits in
                                 * fork(), but the epoll edge is spent. Look
                                 * again every millisecond (run_due_retries())
                                 * until descriptors are free */
                                if (!mm->fork_fd_warned)
                                        log_warn("pid %d: a fork event cannot be read: %m (the daemon's "
                                                 "descriptors): its fork waits until some are free",
                                                 (int)mmclient_pid(mm));
                                mm->fork_fd_warned = true;
                                atomic_store_explicit(&mm->fork_unread, true, memory_order_relaxed);
                                ft->retry_due = true;
                        }
                        return; /* EAGAIN: empty */
                }
                if (mm->fork_fd_warned)
                        mm->fork_fd_warned = false;
                if (n != sizeof(msg))
                        return;
                TRACE(TR_READ, msg.arg.pagefault.address, msg.event, msg.arg.pagefault.flags);
                /* the fault's latency starts here (the kernel's message
                 * carries no time of its own); for the first message, at
                 * the clock read drain_uffd() made just before, which
                 * saves the fault path a read */
                ft->fault_t0 = msg.event == UFFD_EVENT_PAGEFAULT ? (now ? now : now_ns()) : 0;
                if (msg.event == UFFD_EVENT_PAGEFAULT)
                        STAGE(ST_READ);
                now = 0;
                handle_msg(ft, mm, &msg);
                /* a fault's fault-around may have read an event (mm->stash):
                 * it stays in the journal until it is handled */
                if (!mm->has_stash)
                        journal_done(mm);
                ft->fault_t0 = 0; /* a zero fill or an EEXIST: not timed */
        }
}

/* Every read of the uffd happens in here (fault-around's look-ahead
 * too), so no agent move runs between a read and the handling of what it
 * read (zsync.h): an UNMAP is handled before the program can map anew. */

void drain_uffd(FaultThread *ft, MMClient *mm) {
        /* A fault thread never sleeps for a client's agent. A read that
         * finds a move under way is put off, our `reading` raised so that
         * the agent starts no other move, and looked at again every
         * READ_RECHECK_NS while this thread serves the others. A move
         * still under way after 2 ms is revoked (revoke_moves()), and the
         * uffd is read once the revocation's reads are back
         * (run_due_retries() looks every millisecond, and when they come).
         * No grace at all where no lane is moving (a move then has
         * nowhere to go), or for an agent that was this slow at the last
         * read: it is revoked at once. */
        if (fork_held(ft, mm) || mmclient_orphans_stopped(mm))
                return; /* the manager kicks us once the user is under its bound */
        atomic_store_explicit(&mm->fork_unread, false, memory_order_relaxed);
        uint64_t now = now_ns();
        bool held = atomic_load_explicit(&mm->read_deferred, memory_order_relaxed);
        /* relaxed: only whether to wait a while rather than revoke at
         * once; zsync_read_begin() is what orders us against the agent */
        bool may_wait = !mm->revoking && !mm->agent_slow && atomic_load_explicit(&mm->lanes_moving, memory_order_relaxed);

        if (!zsync_read_begin(mm->sync, 0, held)) {
                if (!held)
                        mm->read_wait_t0 = now;
                if (may_wait && now - mm->read_wait_t0 < ZSYNC_READ_WAIT_NS) {
                        atomic_store_explicit(&mm->read_deferred, true, memory_order_relaxed);
                        ft->read_soon = true;
                        return;
                }
                if (may_wait && !mm->sync_warned) {
                        log_warn("pid %d: its agent left a page move unfinished for over %llu ms: such moves are revoked "
                                 "(their pages stay resident)",
                                 (int)mmclient_pid(mm), ZSYNC_READ_WAIT_NS / 1000000);
                        mm->sync_warned = true;
                }
                if (!revoke_moves(ft, mm)) {
                        atomic_store_explicit(&mm->read_deferred, true, memory_order_relaxed);
                        ft->retry_due = true;
                        return;
                }
                mm->agent_slow = true;
        } else
                mm->agent_slow = false;
        /* `reading` is raised, and no move can take a page any more */
        mm->revoking = false;
        mm->revoke_left = 0;
        atomic_store_explicit(&mm->read_deferred, false, memory_order_relaxed);
        drain_messages(ft, mm, now);
        if (mm->nremap_src)
                remap_src_expire(mm);
        if (mm->npoison && !poisons_run(mm)) {
                /* the events before them are read, but their waiters have
                 * not run yet (the kernel counts them out then): our
                 * `reading` stays raised, so no move starts, and we look
                 * again in a millisecond, as for a read put off */
                atomic_store_explicit(&mm->read_deferred, true, memory_order_relaxed);
                mm->revoking = true; /* nothing to revoke: nothing began since */
                ft->retry_due = true;
                return;
        }
        zsync_read_end(mm->sync);
}

/*
 * Read and handle mm's messages if no other thread holds serve_lock. A
 * thread that finds the lock taken walks away after leaving a kick: the
 * holder, which may be a fault thread busy with something else or the
 * manager, reads the uffd again (or has it read) once it lets go. The edge
 * this thread consumed is not needed after that.
 */
void service(FaultThread *ft, MMClient *mm) {
        if (core_user_held(mm->core, mm->uid)) {
                /* another thread waits in a call into a client of this
                 * user: not this thread too. The manager kicks us once it
                 * is done */
                atomic_store_explicit(&mm->parked, true, memory_order_relaxed);
                atomic_store_explicit(&mm->core->parked_any, true, memory_order_release);
                return;
        }
        /* kick first, then try: if the lock is taken, its holder lets go
         * after our store and sees the kick (serve_unlock). seq_cst: a
         * store-buffering handshake (we store the kick, then look at the
         * lock; the holder lets the lock go, then loads the kick), where
         * neither store may pass the load after it, which release and
         * acquire allow. The lock's half is the mutex's own acquire and
         * release, so C11 alone does not promise it; glibc's mutex keeps
         * it (x86: locked instructions; ARMv8: no load-acquire passes an
         * earlier store-release) */
        atomic_store_explicit(&mm->kick, true, memory_order_seq_cst);
        if (pthread_mutex_trylock(&mm->serve_lock) != 0)
                return;
        STAGE(ST_LOCK);
        /* seq_cst: the clear must not pass the read of the uffd after it,
         * or it could erase a kick left for a message that read missed;
         * not argued weaker */
        atomic_store_explicit(&mm->kick, false, memory_order_seq_cst);
        drain_uffd(ft, mm);
        if (mm->retries)
                run_retries(ft, mm);
        serve_unlock(ft, mm);
}

/*
 * Let go of mm->serve_lock, then read what a thread that found it taken
 * left for us (service()'s kick). A copy that met EAGAIN waits for an
 * event still unread, so retries also read the uffd first.
 */
void serve_unlock(FaultThread *ft, MMClient *mm) {
        for (;;) {
                pthread_mutex_unlock(&mm->serve_lock);
                /* seq_cst: the other half of service()'s handshake, the
                 * load after our unlock */
                if (!atomic_load_explicit(&mm->kick, memory_order_seq_cst))
                        return;
                if (pthread_mutex_trylock(&mm->serve_lock) != 0)
                        return; /* the new holder sees the kick when it lets go */
                /* seq_cst: before the read of the uffd, as in service() */
                atomic_store_explicit(&mm->kick, false, memory_order_seq_cst);
                drain_uffd(ft, mm);
                if (mm->retries)
                        run_retries(ft, mm);
        }
}
