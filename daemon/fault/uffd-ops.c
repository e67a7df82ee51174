/*
 * uffd-ops.c: the uffd ioctls a fault thread makes, and the retries of
 * copies the kernel put off (EAGAIN) or whose page is still being read.
 * Overview: fault-internal.h.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject.h"
#include "fault-internal.h"
#include "log.h"
#include "trace.h"

/* ---- uffd ioctls ---- */

__thread FaultThread *fault_self;

/* Each fill below can wait for the client's mmap lock: the kernel locks
 * only the mapping when it can, but takes the mmap lock where the address
 * has no mapping or the mapping no anon_vma yet (mm/userfaultfd.c
 * uffd_lock_vma()). Hence call_begin() and call_end(). */
int uffd_copy(int uffd, uint64_t addr, const void *page, uint64_t mode) {
        struct uffdio_copy c = { .dst = addr, .src = (uintptr_t)page, .len = ZSWAP_PAGE_SIZE, .mode = mode };
        int inj = INJECT(INJ_UFFD_COPY);
        if (inj)
                return -inj; /* instead of the call: the kernel's state stays as that error leaves it */
        call_begin(uffd);
        int r = ioctl(uffd, UFFDIO_COPY, &c) == 0 ? 0 : c.copy < 0 ? (int)c.copy : negative_errno();
        call_end();
        return r;
}

int uffd_zeropage(int uffd, uint64_t addr) {
        struct uffdio_zeropage z = { .range = { .start = addr, .len = ZSWAP_PAGE_SIZE } };
        int inj = INJECT(INJ_UFFD_ZEROPAGE);
        if (inj)
                return -inj;
        call_begin(uffd);
        int r = ioctl(uffd, UFFDIO_ZEROPAGE, &z) == 0 ? 0 : z.zeropage < 0 ? (int)z.zeropage : negative_errno();
        call_end();
        return r;
}

void uffd_wake(int uffd, uint64_t addr) {
        struct uffdio_range r = { .start = addr, .len = ZSWAP_PAGE_SIZE };
        (void)ioctl(uffd, UFFDIO_WAKE, &r);
}

/* A page the kernel will never see again: UFFDIO_POISON makes every
 * access to it a SIGBUS, as the kernel does with a swapped-out page it
 * cannot read back. A uffd set up without the feature (an earlier
 * daemon's, adopted) cannot: the process gets SIGBUS now rather than wait
 * forever for the page. */
void uffd_poison(MMClient *mm, uint64_t addr) {
        struct uffdio_poison p = { .range = { .start = addr, .len = ZSWAP_PAGE_SIZE } };

        call_begin(mm->uffd);
        int r = ioctl(mm->uffd, UFFDIO_POISON, &p);
        call_end();
        if (r == 0)
                return;
        if (errno == EEXIST) {
                /* present after all (installed by fault-around): the
                 * waiter reads what is there */
                uffd_wake(mm->uffd, addr);
                return;
        }
        log_error("pid %d: cannot poison the lost page (%m): the process is sent SIGBUS", (int)mmclient_pid(mm));
        int pidfd = mmclient_pidfd(mm);
        if (pidfd >= 0)
                (void)syscall(SYS_pidfd_send_signal, pidfd, SIGBUS, NULL, 0);
        uffd_wake(mm->uffd, addr);
}

/* ---- owning a LOADING entry ---- */

void retry_unpin(Lane *pin) {
        if (pin)
                atomic_fetch_sub_explicit(&pin->users, 1, memory_order_release);
}

static void retry_free(FaultThread *ft, Retry *r) {
        /* acq_rel: the completion's READY (release) before we free, or our
         * CANCELLED before it frees. A read in flight keeps its slot's pin
         * until it is back: its completion unpins and frees */
        if (atomic_load_explicit(&r->state, memory_order_acquire) != RS_READY &&
            atomic_exchange_explicit(&r->state, RS_CANCELLED, memory_order_acq_rel) == RS_READING)
                return;
        retry_unpin(r->pin);
        r->pin = NULL;
        if (r->tier)
                tier_window_free(&r->tj.win);
        if (r->reserved) {
                r->next = ft->reserve;
                ft->reserve = r;
        } else
                free(r);
}

/*
 * A page is claimed (LOADING) only with a retry at hand should its copy be
 * put off (EAGAIN): only this thread reads the event the copy waits for,
 * so spinning cannot help, and a claimed page left without a retry would
 * stay LOADING with its thread asleep for good. True: the reserve holds
 * one (topped up here from malloc once the reserve ran dry). False: out
 * of memory, nothing may be claimed now (retry_none()).
 */
bool retry_ready(FaultThread *ft) {
        if (INJECT(INJ_RETRY_NOMEM))
                return false;
        if (ft->reserve)
                return true;
        Retry *r = INJECT_ALLOC(malloc(sizeof(*r)));
        if (!r)
                return false;
        r->reserved = true;
        r->next = NULL;
        ft->reserve = r;
        return true;
}

/* No retry to be had for the fault at addr: nothing was claimed, and the
 * thread that faulted is woken, to fault again when memory may be back.
 * Said once every 10 s. */
void retry_none(FaultThread *ft, MMClient *mm, uint64_t addr) {
        uint64_t now = now_ns();

        if (!ft->nomem_warned_ns || now - ft->nomem_warned_ns > 10ull * 1000000000) {
                log_error("pid %d: out of memory for a retry: the fault at %#llx is woken to come again",
                          (int)mmclient_pid(mm), (unsigned long long)addr);
                ft->nomem_warned_ns = now;
        }
        uffd_wake(mm->uffd, addr);
}

void retry_add(FaultThread *ft, MMClient *mm, uint64_t addr, uint64_t loading, const void *page, bool keep,
               bool refault) {
        /* a fault that only waits (loading 0) holds nothing: without a
         * retry it is woken to come again. A claimed page has one at hand
         * (retry_ready()) */
        bool none = !loading && INJECT(INJ_RETRY_NOMEM);
        Retry *r = none ? NULL : INJECT_ALLOC(malloc(sizeof(*r)));
        if (r)
                r->reserved = false;
        else if (ft->reserve && !none) {
                r = ft->reserve;
                ft->reserve = r->next;
        } else if (!loading) {
                retry_none(ft, mm, addr);
                return;
        } else {
                log_error("pid %d: page at %#llx claimed without a retry at hand: it stays pending",
                          (int)mmclient_pid(mm), (unsigned long long)addr);
                return;
        }
        r->addr = addr;
        r->loading = loading;
        r->pin = NULL;
        atomic_init(&r->state, RS_READY);
        r->keep = keep;
        r->refault = refault;
        r->mm = NULL;
        r->pin_mm = NULL;
        r->op.res = 0;
        r->tier = false;
        r->t0 = ft->fault_t0; /* the fault still waits: its time runs on */
        TRACE(TR_RETRY, addr, loading, 0);
        if (page)
                memcpy(r->page, page, ZSWAP_PAGE_SIZE);
        r->next = mm->retries;
        mm->retries = r;
        atomic_store_explicit(&mm->has_retries, true, memory_order_relaxed);
        ft->retry_due = true;
}

void fault_mm_free_retries(MMClient *mm) {
        while (mm->retries) {
                Retry *r = mm->retries;
                mm->retries = r->next;
                if (r->tier)
                        tier_window_free(&r->tj.win);
                free(r); /* reserve entries too: the thread that lent it gets by with one less */
        }
}

Retry **retry_find(MMClient *mm, uint64_t addr) {
        for (Retry **p = &mm->retries; *p; p = &(*p)->next)
                if ((*p)->addr == addr)
                        return p;
        return NULL;
}

/* Hand the pin of a page's slot on to the retry that now holds the page
 * (retry_add() of addr with loading), if there is one: true. */
bool retry_keep_pin(MMClient *mm, uint64_t addr, uint64_t loading, Lane *pin) {
        Retry **p = pin ? retry_find(mm, addr) : NULL;
        if (!p || (*p)->loading != loading || (*p)->pin)
                return false;
        (*p)->pin = pin;
        return true;
}

void retry_drop(FaultThread *ft, Retry **p) {
        Retry *r = *p;
        *p = r->next;
        retry_free(ft, r);
}

/* ---- retries ---- */

/* Under mm->serve_lock. A copy that fails again goes back on the list. */
void run_retries(FaultThread *ft, MMClient *mm) {
        if (fork_held(ft, mm))
                return; /* an install would change the held store */
        Retry *list = mm->retries;
        mm->retries = NULL;
        /* seq_cst, the store and the loads of state below: a read's
         * completion (slot_read_done(), tier_read_done(), on another
         * thread) writes state, then has_retries; we write has_retries,
         * then read state. Weaker, both could miss the other (store
         * buffering, which x86 does): we see READING and keep the retry,
         * our false lands after its true, and nobody runs the retry (its
         * fault waits until the client's uffd says something) */
        atomic_store_explicit(&mm->has_retries, false, memory_order_seq_cst);

        while (list) {
                Retry *r = list;
                list = r->next;
                /* and the page the read put there (slot_read_done()) */
                if (atomic_load_explicit(&r->state, memory_order_seq_cst) == RS_READING) {
                        /* its read is still in flight: it stays */
                        r->next = mm->retries;
                        mm->retries = r;
                        continue;
                }
                if (r->loading && !retry_ready(ft)) {
                        /* its install could be put off with no retry to
                         * keep it in: it waits on the list for memory */
                        r->next = mm->retries;
                        mm->retries = r;
                        atomic_store_explicit(&mm->has_retries, true, memory_order_relaxed);
                        ft->retry_due = true;
                        continue;
                }
                ft->fault_t0 = r->t0;
                if (!r->loading)
                        serve(ft, mm, r->addr, true, false);
                else if (r->tier) {
                        /* the pump's read is back: the page, or why not */
                        _Atomic uint64_t *e = pindex_entry(mm->index, r->addr, false);
                        if (e && atomic_load_explicit(e, memory_order_acquire) == r->loading) {
                                if (r->tj.res < 0) {
                                        tier_failed(ft, mm, r->addr, e, pe_loading_origin(r->loading), r->loading,
                                                    r->tj.res);
                                } else {
                                        install(ft, mm, r->addr, e, r->loading, r->page, 0, false, r->refault);
                                        tier_around(ft, mm, r->addr, &r->tj.win);
                                }
                        }
                } else if (r->op.res < 0) {
                        /* the slot read failed: the client is gone or broke
                         * its staging area; nothing to install */
                        _Atomic uint64_t *e = pindex_entry(mm->index, r->addr, false);
                        if (e && atomic_load_explicit(e, memory_order_acquire) == r->loading) {
                                mmclient_release_payload(mm, r->loading);
                                atomic_store_explicit(e, 0, memory_order_release);
                                uffd_wake(mm->uffd, r->addr);
                        }
                } else {
                        _Atomic uint64_t *e = pindex_entry(mm->index, r->addr, false);
                        Lane *pin = r->pin;
                        r->pin = NULL;
                        if (e && atomic_load_explicit(e, memory_order_acquire) == r->loading)
                                install(ft, mm, r->addr, e, r->loading, r->page,
                                        (r->loading & PE_FLAG_INCOMPRESSIBLE) ? PE_FLAG_INCOMPRESSIBLE : 0, r->keep,
                                        r->refault);
                        /* put off again: the new retry keeps the slot */
                        if (!retry_keep_pin(mm, r->addr, r->loading, pin))
                                retry_unpin(pin);
                }
                ft->fault_t0 = 0;
                retry_free(ft, r);
        }
}
