/*
 * work.c: work from other threads (the FW_* items of fault.h) and the
 * thread's inbox. Overview: fault-internal.h.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "inject.h"
#include "age.h"
#include "fault-internal.h"
#include "log.h"

Work *work_new(int type, MMClient *mm) {
        Work *w = INJECT_ALLOC(calloc(1, sizeof(*w)));
        if (!w)
                return NULL;
        w->type = type;
        w->mm = mm ? mmclient_ref(mm) : NULL;
        return w;
}

void work_free(Work *w) {
        if (!w)
                return;
        mmclient_unref(w->mm);
        free(w->data);
        free(w);
}

void fault_thread_post(FaultThread *ft, Work *w) {
        inbox_push(&ft->inbox, w);
}

int fault_post_mm(FaultThread *ft, int type, MMClient *mm) {
        Work *w = work_new(type, mm);
        if (!w)
                return -ENOMEM;
        fault_thread_post(ft, w);
        return 0;
}

int fault_sync_post(MMClient *mm, int type, uint32_t id, uint64_t serial, uint64_t a, uint64_t b) {
        Work *w = work_new(FW_SYNC, mm);
        if (!w)
                return -ENOMEM;
        w->a = a;
        w->b = b;
        w->id = id;
        w->status = type;
        w->v = serial;
        mm->syncs_pending++;
        fault_thread_post(mm->ft, w);
        return 0;
}

int fault_watch(Core *core, MMClient *mm) {
        /* the home thread first: if the others cannot be told, it alone
         * still serves every message, only not always on the faulting CPU */
        int r = fault_post_mm(mm->ft, FW_ADOPT, mm);
        if (r < 0 || !core->cfg.fault_shared)
                return r;
        for (unsigned i = 0; i < core->nfts; i++)
                if (core->fts[i] != mm->ft && fault_post_mm(core->fts[i], FW_ADOPT, mm) < 0)
                        log_warn("pid %d: a fault thread cannot watch the client (out of memory)",
                                 (int)mmclient_pid(mm));
        return 0;
}

void fault_unwatch(Core *core, MMClient *mm) {
        /* a thread that misses this keeps a reference and an epoll entry
         * until it stops: the client's memory is not lost, only kept */
        for (unsigned i = 0; i < core->nfts; i++)
                if (fault_post_mm(core->fts[i], FW_REMOVE, mm) < 0)
                        log_error("pid %d: fault thread %u cannot let the client go (out of memory)",
                                  (int)mmclient_pid(mm), i);
}

/* ---- installs from workers, syncs, restores ---- */

/* False if another thread holds serve_lock: the caller tries again later
 * (run_deferred()), since its holder may be in a second tier's read. */
static bool work_install(FaultThread *ft, Work *w) {
        MMClient *mm = w->mm;
        _Atomic uint64_t *e = pindex_entry(mm->index, w->a, false);
        uint64_t v = w->v;

        if (mmclient_serve_trylock(mm) != 0)
                return false;
        if (e && atomic_load_explicit(e, memory_order_acquire) == v) {
                /* the worker found the page incompressible (or the pool full):
                 * it goes back where it was, marked so we do not retry it on
                 * every pass */
                uint64_t final = (w->status == -E2BIG) ? PE_FLAG_INCOMPRESSIBLE : 0;
                serve_slot(ft, mm, w->a, e, v, final, false);
        }
        serve_unlock(ft, mm);
        /* the worker pinned the lane for us until now */
        atomic_fetch_sub_explicit(&mm->lanes[w->lane].users, 1, memory_order_release);
        return true;
}

/* FW_SYNC: every uffd message read before it was posted has been handled
 * completely once serve_lock is ours (a reader holds it from its read
 * until the message is handled). False: taken, try again later. */
static bool work_sync(FaultThread *ft, Work *w) {
        /* injected (tests): a FORK_DONE's sync is late, and the manager has
         * its answer before this thread reads the client's uffd again */
        bool late = w->status == ZMSG_FORK_DONE && INJECT(INJ_FORK_DONE_LATE);

        if (late)
                usleep(FORK_DONE_LATE_MS * 1000);
        if (mmclient_serve_trylock(w->mm) != 0)
                return false;
        serve_unlock(ft, w->mm);
        w->type = MW_SYNC_DONE;
        core_post(ft->core, w);
        if (late)
                usleep(FORK_DONE_LATE_MS * 1000);
        return true;
}

/* FW_SYNC_SWAP: the manager found serve_lock taken. False: still taken. */
static bool work_sync_swap(FaultThread *ft, Work *w) {
        if (mmclient_serve_trylock(w->mm) != 0)
                return false;
        mmclient_swap_sync(w->mm, (ZSync *)(uintptr_t)w->v, (int)w->a);
        w->v = 0;
        /* release: the planner that sees it clear sees the new page */
        atomic_store_explicit(&w->mm->sync_swap, false, memory_order_release);
        serve_unlock(ft, w->mm);
        work_free(w);
        return true;
}

/* A work item dropped undone (the thread is going away): what it holds. */
void work_discard(Work *w) {
        if (w->type == FW_SYNC_SWAP && w->v) {
                munmap((void *)(uintptr_t)w->v, ZSWAP_SYNC_SIZE);
                close((int)w->a);
        }
        work_free(w);
}

/* ---- the thread's lists (FaultThread.work_lock) ---- */

static void list_append(Work **list, Work *w) {
        while (*list)
                list = &(*list)->next;
        *list = w;
}

static size_t list_len(const Work *w) {
        size_t n = 0;
        for (; w; w = w->next)
                n++;
        return n;
}

/* At the tail of ft's list: each keeps the order its items came in. */
static void push_locked(FaultThread *ft, Work **list, Work *w) {
        w->next = NULL;
        pthread_mutex_lock(&ft->work_lock);
        list_append(list, w);
        pthread_mutex_unlock(&ft->work_lock);
}

static Work *pop_locked(FaultThread *ft, Work **list) {
        pthread_mutex_lock(&ft->work_lock);
        Work *w = *list;
        if (w)
                *list = w->next;
        pthread_mutex_unlock(&ft->work_lock);
        if (w)
                w->next = NULL;
        return w;
}

static size_t len_locked(FaultThread *ft, Work **list) {
        pthread_mutex_lock(&ft->work_lock);
        size_t n = list_len(*list);
        pthread_mutex_unlock(&ft->work_lock);
        return n;
}

bool work_waits(FaultThread *ft) {
        pthread_mutex_lock(&ft->work_lock);
        bool waits = ft->restores || ft->deferred;
        pthread_mutex_unlock(&ft->work_lock);
        return waits;
}

void work_list_discard(Work **list) {
        while (*list) {
                Work *n = (*list)->next;
                work_discard(*list);
                *list = n;
        }
}

/* Run an install or a sync, or keep it for later: no fault thread waits
 * for a serve_lock another thread holds, so one client's slow page (a
 * second tier's read) never stops the clients this thread serves. */
static void work_locked(FaultThread *ft, Work *w) {
        int type = w->type;
        if (type == FW_INSTALL ? work_install(ft, w) : type == FW_SYNC ? work_sync(ft, w) : work_sync_swap(ft, w)) {
                if (type == FW_INSTALL)
                        work_free(w);
                return;
        }
        push_locked(ft, &ft->deferred, w);
}

/* One item at a time off the list, so that what is not run yet stays
 * where another thread can take it should a call hold this one. */
void run_deferred(FaultThread *ft) {
        for (size_t n = len_locked(ft, &ft->deferred); n > 0; n--) {
                Work *w = pop_locked(ft, &ft->deferred);
                if (!w)
                        break; /* taken by another thread */
                work_locked(ft, w);
        }
}

typedef struct RestoreCtx {
        FaultThread *ft;
        MMClient *mm;
        unsigned budget;
        uint64_t next;
        int busy;
        uint32_t since; /* a refill: only pages used at this stamp or later */
        uint32_t left;  /* a refill: pages it may still bring back */
        uint32_t got;   /* a refill: pages brought back */
        uint64_t skip;  /* a refill: the end of the run it tried last */
        uint32_t looks; /* a refill: entries it may still look at in this slice */
} RestoreCtx;

/*
 * A refill brings back pages nobody faulted on yet: only those held in
 * the pool (STORED, SAME; not the second tier's, not in flight), used at
 * c->since or later, in runs of consecutive ones (refill_run(): one
 * UFFDIO_COPY each).
 */
static int refill_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RestoreCtx *c = ud;
        (void)e;

        if (c->budget == 0 || c->left == 0 || c->looks == 0) {
                c->next = addr;
                return 1;
        }
        c->looks--;
        if (addr < c->skip)
                return 0; /* in the run just tried: what was not installed stays */
        unsigned got, n = refill_run(c->ft, c->mm, addr, MIN(c->left, c->budget), c->since, &got);
        c->skip = addr + (uint64_t)MAX(n, 1u) * ZSWAP_PAGE_SIZE;
        c->budget -= MIN(c->budget, n);
        c->left -= got;
        c->got += got;
        return 0;
}

static int restore_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RestoreCtx *c = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);

        if (c->budget == 0) {
                c->next = addr;
                return 1;
        }
        switch (pe_state(v)) {
        case PE_STORED:
        case PE_SAME:
        case PE_MOVING:
        case PE_STAGED:
                c->budget--;
                if (!serve(c->ft, c->mm, addr, false, false)) {
                        c->busy++; /* out of memory for a retry: left as it was, tried again */
                        break;
                }
                v = atomic_load_explicit(e, memory_order_acquire);
                /* LOADING: in a retry; on the second tier still: it could
                 * not be read, and is tried again */
                if (pe_state(v) == PE_LOADING || (pe_state(v) == PE_STORED && pe_is_tier(v)))
                        c->busy++;
                break;
        case PE_LOADING:
                c->busy++;
                break;
        case PE_CLEAN:
                /* resident: the kept copy has no use once unregistered */
                mmclient_entry_drop(c->mm, e);
                break;
        default:
                break;
        }
        return 0;
}

#define REFILL_SLICE 64        /* pages a refill brings back between two looks at the uffds */
#define REFILL_SLICE_LOOKS 4096 /* and entries it looks at, at most (those too old are passed over) */

/* A slice of a refill; true when it is done (its pages brought back, or
 * the index walked to the end). w->v is the cursor, w->lane the pages
 * still wanted, w->a the pages brought back. */
static bool work_refill(FaultThread *ft, Work *w) {
        RestoreCtx c = { .ft = ft, .mm = w->mm, .budget = REFILL_SLICE, .since = w->id, .left = w->lane,
                         .looks = REFILL_SLICE_LOOKS };

        if (atomic_load_explicit(&w->mm->dead, memory_order_relaxed))
                return true;
        if (mmclient_serve_trylock(w->mm) != 0)
                return false; /* its holder may be in a slow read: the next pass */
        int more = pindex_walk(w->mm->index, w->v, PINDEX_MAX_ADDR, refill_cb, &c);
        serve_unlock(ft, w->mm);
        w->lane = c.left;
        w->a += c.got;
        atomic_fetch_add_explicit(&w->mm->st.refilled, c.got, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->mm->core->refilled, c.got, memory_order_relaxed);
        if (more && c.left) {
                w->v = c.next;
                /* the next slice as soon as the uffds were looked at once
                 * (run_restores() clears it each time it runs) */
                ft->refill_more = true;
                return false;
        }
        return true;
}

/* Restore a slice of the range; true when the whole range is done. */
static bool work_restore(FaultThread *ft, Work *w) {
        RestoreCtx c = { .ft = ft, .mm = w->mm, .budget = 256 };

        /* w->v is the cursor: a and b stay what the manager asked for;
         * w->lane counts the pages of this pass, slice by slice, that are
         * not back yet */
        if (w->v < w->a)
                w->v = w->a;
        if (mmclient_serve_trylock(w->mm) != 0)
                return false; /* its holder may be in a slow read: the next pass */
        int more = pindex_walk(w->mm->index, w->v, w->b, restore_cb, &c);
        serve_unlock(ft, w->mm);
        w->lane += (uint32_t)c.busy;
        if (more) {
                w->v = c.next;
                return false;
        }
        w->v = w->a;
        bool busy = w->lane > 0;
        w->lane = 0;
        if (busy && !atomic_load_explicit(&w->mm->dead, memory_order_relaxed)) {
                /* pages still held in retries, or on a second tier that
                 * could not be read: a new pass after they are in (the
                 * range is unregistered only once a whole pass found
                 * nothing left, else those pages would read as zeros) */
                return false;
        }
        return true;
}

/* The items only the thread they were sent to can run: its watch list
 * (FW_ADOPT, FW_REMOVE) and its stop's wake-up. */
static bool work_own(const Work *w) {
        return w->type == FW_ADOPT || w->type == FW_REMOVE || w->type == 0;
}

static void work_steal(FaultThread *ft, FaultThread *x);

static void run_item(FaultThread *ft, Work *w) {
        switch (w->type) {
        case FW_REMOVE:
                fault_thread_disown(ft, w->mm);
                work_free(w);
                break;
        case FW_ADOPT:
                fault_thread_own(ft, w->mm);
                /* edges that came before we watched are not ours:
                 * look once */
                service(ft, w->mm);
                work_free(w);
                break;
        case FW_INSTALL:
        case FW_SYNC:
        case FW_SYNC_SWAP:
                work_locked(ft, w);
                break;
        case FW_KICK:
                service(ft, w->mm);
                work_free(w);
                break;
        case FW_RESTORE:
        case FW_REFILL:
                push_locked(ft, &ft->restores, w);
                break;
        case FW_STEAL:
                work_steal(ft, (FaultThread *)(uintptr_t)w->v);
                work_free(w);
                break;
        default:
                work_free(w);
                break;
        }
}

void run_inbox(FaultThread *ft) {
        inbox_clear(&ft->inbox);
        Work *batch = inbox_take(&ft->inbox);

        /* what another thread took from our inbox and gave back first
         * (it came before what the inbox holds now), then the batch, one
         * item at a time off pending */
        pthread_mutex_lock(&ft->work_lock);
        Work *mine = ft->mine;
        ft->mine = NULL;
        list_append(&ft->pending, batch);
        pthread_mutex_unlock(&ft->work_lock);
        while (mine) {
                Work *w = mine;
                mine = w->next;
                w->next = NULL;
                run_item(ft, w);
        }
        for (Work *w; (w = pop_locked(ft, &ft->pending));)
                run_item(ft, w);
}

/*
 * FW_STEAL: thread x has been in one call into a client for a while (the
 * client's mmap lock, which it can hold as long as it likes, holds the
 * call: docs/security.md). The work handed to x is ours now: its inbox,
 * the items it took and has not run, its restores and deferred installs
 * and syncs; every item of it runs on any thread as well (each takes its
 * client's serve_lock with a trylock). The items only x can run go back
 * to it, to be run when its call ends. Retries and reads x put off are on
 * their clients, which we watch too: we look. The slot and tier reads x
 * submitted that are back are run here (fault_thread_reap()): their pages
 * are installed by whoever serves their clients next. Only the item its
 * call is for waits for x.
 */
static void work_steal(FaultThread *ft, FaultThread *x) {
        if (x == ft)
                return;
        Work *taken = inbox_take(&x->inbox); /* x's eventfd stays set: x looks once when it is back */
        pthread_mutex_lock(&x->work_lock);
        Work *list = x->pending, *restores = x->restores, *deferred = x->deferred;
        x->pending = x->restores = x->deferred = NULL;
        list_append(&list, taken); /* pending came first */
        Work *ours = NULL, **tail = &ours;
        bool back = false;
        while (list) {
                Work *w = list;
                list = w->next;
                w->next = NULL;
                if (work_own(w)) {
                        list_append(&x->mine, w);
                        back = true;
                } else {
                        *tail = w;
                        tail = &w->next;
                }
        }
        pthread_mutex_unlock(&x->work_lock);
        if (back)
                (void)!write(x->inbox.efd, &(uint64_t){ 1 }, sizeof(uint64_t));
        size_t reads = fault_thread_reap(ft, x);
        if (ours || restores || deferred || reads) {
                size_t n = list_len(ours), nr = list_len(restores), nd = list_len(deferred);
                atomic_fetch_add_explicit(&ft->core->work_taken, n + nr + nd + reads, memory_order_relaxed);
                log_debug("fault thread %u takes %zu items, %zu restores, %zu put-off items and %zu reads back of "
                          "fault thread %u, held in a call into a client",
                          ft->idx, n, nr, nd, reads, x->idx);
        }
        pthread_mutex_lock(&ft->work_lock);
        list_append(&ft->pending, ours); /* run_inbox()'s loop, which runs this item, runs them next */
        list_append(&ft->restores, restores);
        list_append(&ft->deferred, deferred);
        pthread_mutex_unlock(&ft->work_lock);
        ft->retry_due = true;
}

bool fault_thread_steal(FaultThread *to, FaultThread *from) {
        Work *w = work_new(FW_STEAL, NULL);
        if (!w)
                return false;
        w->v = (uintptr_t)from;
        fault_thread_post(to, w);
        return true;
}

/* Restores and refills a slice each, one item at a time off the list (as
 * run_deferred()). */
void run_restores(FaultThread *ft) {
        ft->refill_more = false;

        for (size_t n = len_locked(ft, &ft->restores); n > 0; n--) {
                Work *w = pop_locked(ft, &ft->restores);
                if (!w)
                        break; /* taken by another thread */
                /* acquire, as fork_held()'s own load (said there) */
                if (atomic_load_explicit(&w->mm->fork_hold, memory_order_acquire)) {
                        /* its store is held for a forked child (fork_held()):
                         * the restore waits until the child attached */
                        push_locked(ft, &ft->restores, w);
                        ft->retry_due = true;
                        continue;
                }
                if (w->type == FW_REFILL ? work_refill(ft, w) : work_restore(ft, w)) {
                        if (w->type == FW_REFILL)
                                w->type = MW_REFILL_DONE;
                        else
                                w->type = MW_RESTORE_DONE;
                        core_post(ft->core, w);
                } else
                        push_locked(ft, &ft->restores, w);
        }
}
