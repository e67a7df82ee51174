/*
 * mmclient.c: per-address-space state.
 *
 * Ownership: an MMClient is reference counted. The manager's list holds one
 * reference, the fault thread that reads its uffd holds one while the uffd
 * is in its epoll set, and every worker job holds one. The last unref
 * releases every pool object the index still refers to and closes the
 * daemon's uffd reference. The client process keeps its own uffd reference,
 * so the daemon closing its own never unregisters the client's memory.
 *
 * The process: bound once (mmclient_bind(), at ATTACH, ADOPT or a fork
 * child's CHILD_ATTACH) to a pidfd and to /proc/PID/mem, pagemap and maps
 * fds, which the kernel ties to the address space of that moment, and
 * proven to be the address space of the uffd (mmclient_prove()). Nothing
 * here reads a client by pid number after that: a pid can be reused, a
 * process can exec.
 *
 * Regions (what the client registered, as moved by mremap and cut by
 * munmap) are protected by regions_lock. Only the manager thread and the
 * fault thread handling an event (the one holding serve_lock) take it;
 * the fault path proper never does. mmclient.h says who writes each of
 * the other fields.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>

#include "inject.h"
#include "uffd-compat.h"

#include "closer.h"
#include "log.h"
#include "trace.h"
#include "core.h"
#include "memread.h"
#include "mmclient.h"
#include "tier.h"
#include "age.h"
#include "pool.h"
#include "store.h"

int mmclient_new(Core *core, int uffd, MMClient **ret) {
        MMClient *mm = INJECT_ALLOC(calloc(1, sizeof(*mm)));
        int r;

        if (!mm)
                return -ENOMEM;
        atomic_init(&mm->refs, 1);
        atomic_init(&mm->quota_left, QUOTA_NONE);
        atomic_init(&mm->fork_bytes, 0);
        mm->core = core;
        mm->uffd = uffd;
        atomic_init(&mm->pid, 0);
        atomic_init(&mm->pidfd, -1);
        mm->parent_pidfd = -1;
        atomic_init(&mm->pagemap_fd, -1);
        atomic_init(&mm->mem_fd, -1);
        mm->maps_fd = -1;
        mm->bound.pidfd = mm->bound.pagemap_fd = mm->bound.mem_fd = -1;
        mm->ops_tail = &mm->ops;
        mm->rc.idle_age_ms = -1; /* the daemon's */
        mm->rc.recompress_age_ms = -1;
        mm->sync_fd = -1;
        mm->store_fd = -1;
        pthread_mutex_init(&mm->regions_lock, NULL);
        pthread_mutex_init(&mm->serve_lock, NULL);
        if (core->pools) {
                r = store_create(core->cfg.codec, core->wp_async ? STORE_F_WP_ASYNC : 0, core->daemon_id, &mm->store);
                if (r >= 0) {
                        mm->store_fd = r;
                        r = pool_new_store(core->pools, mm->store, mm->store_fd, &mm->pool);
                }
                if (r >= 0)
                        r = pindex_new_store(mm->store, &mm->index);
        } else
                r = pindex_new(&mm->index);
        mm->journal = mm->store ? store_journal(mm->store) : &mm->journal_own;
        if (r < 0) {
                mm->uffd = -1; /* the caller keeps its fd on failure */
                mmclient_unref(mm);
                return r;
        }
        *ret = mm;
        return 0;
}

/* 1: the process of pidfd fd has exited (a pidfd becomes readable then);
 * 0: it has not; -1: no pidfd. */
static int pidfd_exited(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return fd < 0 ? -1 : poll(&p, 1, 0) != 0;
}

/* /proc/PID/FILE, read-only: bound to the process's address space at
 * open (proc_mem_open()), never to a later one of the same pid. */
static int open_proc(pid_t pid, const char *file) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd;
}

int mmclient_bind(MMClient *mm, int pidfd, pid_t pid) {
        _cleanup_close_ int pfd = -1, mem = -1, pagemap = -1, maps = -1;

        if (pid <= 0 || pidfd < 0)
                return -ESRCH;
        pfd = fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
        if (pfd < 0)
                return negative_errno();
        mem = open_proc(pid, "mem");
        if (mem < 0)
                return mem;
        pagemap = open_proc(pid, "pagemap");
        if (pagemap < 0)
                return pagemap;
        maps = open_proc(pid, "maps");
        if (maps < 0)
                return maps;
        /* the pidfd names the process that connected; alive after the
         * opens, so the pid had not been reused: the fds are of that
         * process (of its address space at this moment: an exec before
         * now is caught by mmclient_prove()) */
        if (pidfd_exited(pfd) != 0)
                return -ESRCH;
        mmclient_unbind(mm);
        mm->bound.pidfd = TAKE_FD(pfd);
        mm->bound.mem_fd = TAKE_FD(mem);
        mm->bound.pagemap_fd = TAKE_FD(pagemap);
        mm->maps_fd = TAKE_FD(maps);
        mm->bound.pid = pid;
        return 0;
}

void mmclient_unbind(MMClient *mm) {
        mm->bound.pidfd = safe_close(mm->bound.pidfd);
        mm->bound.mem_fd = safe_close(mm->bound.mem_fd);
        mm->bound.pagemap_fd = safe_close(mm->bound.pagemap_fd);
        mm->bound.pid = 0;
        mm->maps_fd = safe_close(mm->maps_fd);
}

/* What mmclient_bind() opened, proven: for every thread to see. The
 * manager's; a fork child's fault threads may read these meanwhile
 * (MMClient.pid). seq_cst as their loads (mmclient_pid()): release is the
 * least a store needs (the fd is open before it is published), not
 * argued weaker. */
static void bind_publish(MMClient *mm) {
        atomic_store_explicit(&mm->pidfd, TAKE_FD(mm->bound.pidfd), memory_order_seq_cst);
        atomic_store_explicit(&mm->mem_fd, TAKE_FD(mm->bound.mem_fd), memory_order_seq_cst);
        atomic_store_explicit(&mm->pagemap_fd, TAKE_FD(mm->bound.pagemap_fd), memory_order_seq_cst);
        atomic_store_explicit(&mm->pid, mm->bound.pid, memory_order_seq_cst);
        mm->bound.pid = 0;
}

/*
 * The lines of the client's /proc/PID/maps, through the fd bound to its
 * address space at mmclient_bind() (never by pid): cb(ud, line) for each
 * until it returns non-zero, which is returned. A line longer than the
 * buffer is cut (its addresses come first).
 */
static int maps_foreach(MMClient *mm, int (*cb)(void *ud, const char *line), void *ud) {
        _cleanup_free_ char *buf = NULL;
        size_t cap = 64 << 10, start = 0, have = 0; /* unread lines: buf[start, have) */
        bool eof = false;

        if (mm->maps_fd < 0)
                return -ESRCH;
        buf = INJECT_ALLOC(malloc(cap + 1));
        if (!buf)
                return -ENOMEM;
        if (lseek(mm->maps_fd, 0, SEEK_SET) < 0)
                return negative_errno();
        for (;;) {
                char *nl = memchr(buf + start, '\n', have - start);
                if (!nl && !eof) {
                        /* no whole line left: keep the part, read more */
                        memmove(buf, buf + start, have - start);
                        have -= start;
                        start = 0;
                        if (have == cap) {
                                nl = buf + cap - 1; /* a line longer than the buffer: cut */
                        } else {
                                ssize_t n = read(mm->maps_fd, buf + have, cap - have);
                                if (n < 0 && errno == EINTR)
                                        continue;
                                if (n < 0)
                                        return negative_errno();
                                eof = n == 0;
                                have += (size_t)n;
                                continue;
                        }
                }
                if (start == have)
                        return 0;
                size_t end = nl ? (size_t)(nl - buf) : have;
                buf[end] = 0;
                int r = cb(ud, buf + start);
                if (r != 0)
                        return r;
                start = nl ? end + 1 : have;
        }
}

typedef struct VmaFind {
        uint64_t start, end;
} VmaFind;

static int vma_exact_cb(void *ud, const char *line) {
        const VmaFind *f = ud;
        unsigned long long s, e;
        return sscanf(line, "%llx-%llx", &s, &e) == 2 && s == f->start && e == f->end;
}

/* Has the client's address space a mapping of exactly [start, end)? 1, 0, -errno. */
static int vma_exact(MMClient *mm, uint64_t start, uint64_t end) {
        VmaFind f = { start, end };
        return maps_foreach(mm, vma_exact_cb, &f);
}

static int uffd_register_page(MMClient *mm, uint64_t addr, uint64_t mode) {
        struct uffdio_register reg = { .range = { .start = addr, .len = ZSWAP_PAGE_SIZE }, .mode = mode };
        if (ioctl(mm->uffd, UFFDIO_REGISTER, &reg) < 0)
                return errno == ESRCH ? -ESRCH : -EPERM;
        return 0;
}

/*
 * The proof that mm->uffd acts on the address space whose mem and maps fds
 * mmclient_bind() opened. Registering one page on a uffd splits the
 * mapping around it in the uffd's address space (its flags differ from its
 * neighbours'): the daemon registers a page it picks at random in the
 * client's staging area for missing faults, and the maps fd must then show
 * a mapping of exactly that page, which it did not show before; the page
 * goes back to write-protect mode, as the client registers its staging
 * area itself (and as a fork child or a client being adopted has it). A
 * uffd made in another process splits that process's mapping, where the
 * maps fd does not look; nobody can tell which page beforehand. Nothing
 * of the client's memory is touched, and no pending uffd event stands in
 * the way (registration, unlike UFFDIO_COPY, does not wait for them).
 */
int mmclient_prove(MMClient *mm, uint64_t staging, uint64_t len) {
        uint64_t npages = len / ZSWAP_PAGE_SIZE, addr = 0;
        uint32_t pick;
        int r;

        if (mm->maps_fd < 0 || npages == 0)
                return -ESRCH;
        for (int tries = 0;; tries++) {
                if (tries == 8)
                        return -EBUSY; /* every page picked was a mapping of its own already */
                if (getrandom(&pick, sizeof(pick), 0) != sizeof(pick))
                        return -EIO;
                addr = staging + (pick % npages) * ZSWAP_PAGE_SIZE;
                r = vma_exact(mm, addr, addr + ZSWAP_PAGE_SIZE);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
        }
        r = uffd_register_page(mm, addr, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP);
        if (r < 0)
                return r;
        int seen = vma_exact(mm, addr, addr + ZSWAP_PAGE_SIZE);
        /* back to write-protect only: registering WP over a range that has
         * it already changes nothing (the kernel skips it), so off first */
        struct uffdio_range range = { .start = addr, .len = ZSWAP_PAGE_SIZE };
        r = ioctl(mm->uffd, UFFDIO_UNREGISTER, &range) < 0 ? (errno == ESRCH ? -ESRCH : -EPERM) : 0;
        if (r == 0)
                r = uffd_register_page(mm, addr, UFFDIO_REGISTER_MODE_WP);
        if (seen < 0)
                return seen;
        if (r < 0)
                return r;
        if (seen != 1)
                return -EPERM;
        if (mmclient_mem_fd(mm) < 0)
                bind_publish(mm);
        return 0;
}

void mmclient_set_dedup(MMClient *mm, Dedup *d) {
        mm->dedup = dedup_ref(d);
        if (mm->store)
                /* relaxed: before store_mark_shared(), which releases it */
                __atomic_store_n(&store_super(mm->store)->shared_tag, dedup_tag(d), __ATOMIC_RELAXED);
}

MMClient *mmclient_ref(MMClient *mm) {
        /* relaxed: taking a reference needs no ordering, the caller already
         * holds one (dbus-broker ref.h) */
        atomic_fetch_add_explicit(&mm->refs, 1, memory_order_relaxed);
        return mm;
}

void mmclient_release_payload(MMClient *mm, uint64_t v) {
        switch (pe_state(v)) {
        case PE_STORED:
                if (pe_is_tier(v)) {
                        /* the stub says which blocks lose a reference */
                        TierStub s = mmclient_tier_stub(mm, v);
                        if (mm->core && mm->core->tier)
                                tier_put(mm->core->tier, &s);
                        mmclient_count_tier(mm, s.len, -1);
                }
                pool_release(mmclient_pool_of(mm, v), pe_handle(v));
                mmclient_count_stored(mm, v, -1);
                break;
        case PE_SAME:
                atomic_fetch_sub_explicit(&mm->st.same_pages, 1, memory_order_relaxed);
                break;
        case PE_STAGED:
                atomic_fetch_sub_explicit(&mm->st.staged_pages, 1, memory_order_relaxed);
                break;
        case PE_CLEAN:
                if (!(v & PE_CLEAN_SAME))
                        pool_release(mmclient_pool_of(mm, v), pe_handle(v));
                atomic_fetch_sub_explicit(&mm->st.clean_pages, 1, memory_order_relaxed);
                atomic_fetch_sub_explicit(&mm->st.clean_bytes, (v & PE_CLEAN_SAME) ? 0 : pe_clen(v),
                                          memory_order_relaxed);
                break;
        case PE_LOADING:
                mmclient_release_payload(mm, pe_loading_origin(v));
                break;
        default:
                break;
        }
}

void mmclient_entry_drop(MMClient *mm, _Atomic uint64_t *e) {
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);

        do {
                /* a LOADING entry is owned by its fault thread, which decides */
                if (pe_state(v) == PE_LOADING || v == 0)
                        return;
        } while (!atomic_compare_exchange_weak_explicit(e, &v, 0, memory_order_acq_rel, memory_order_acquire));
        mmclient_release_payload(mm, v);
}

static int drop_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        /* the last reference is gone: nobody owns a LOADING entry any more */
        mmclient_release_payload(ud, atomic_exchange_explicit(e, 0, memory_order_acq_rel));
        return 0;
}

void mmclient_fork_release(MMClient *child) {
        MMClient *parent = child->fork_parent;
        uint64_t token = child->fork_token;

        if (!parent)
                return;
        child->fork_parent = NULL;
        /* relaxed: the parent's fault threads look again every millisecond */
        atomic_compare_exchange_strong_explicit(&parent->fork_hold, &token, 0, memory_order_relaxed,
                                                memory_order_relaxed);
        mmclient_unref(parent);
}

MMClient *mmclient_unref(MMClient *mm) {
        if (!mm)
                return NULL;
        /* acq_rel: release what this holder did, and the last one acquires
         * what every other holder did before the free (an acquire fence
         * would do, but ThreadSanitizer does not model fences) */
        if (atomic_fetch_sub_explicit(&mm->refs, 1, memory_order_acq_rel) != 1)
                return NULL;

        /* an orphan that never attached: its parent is served again */
        mmclient_fork_release(mm);
        /* a parent whose forked child has not attached: its store stays as
         * it is, for the child to restore itself from if we die */
        bool held = atomic_load_explicit(&mm->fork_hold, memory_order_relaxed) != 0;
        if (held)
                mm->keep_store = true;
        /* what the fault threads and eviction hang on it (retries, the
         * copies its lanes kept) */
        if (mm->core && mm->core->ops && mm->core->ops->mm_release)
                mm->core->ops->mm_release(mm);
        if (mm->index) {
                /* handed over: the entries stay for the next daemon */
                if (!mm->keep_store)
                        pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, drop_cb, mm);
                pindex_free(mm->index);
        }
        codec_dict_unref(atomic_load_explicit(&mm->dict, memory_order_relaxed));
        /* after its entries let go of their shared objects */
        dedup_unref(mm->dedup);
        pool_free(mm->pool);
        /* the client may keep its descriptor for long: free the memory
         * now, all but the superblock, whose state says what became of it */
        if (mm->store_fd >= 0 && !mm->keep_store)
                (void)fallocate(mm->store_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)STORE_SUPER_SIZE,
                                (off_t)(STORE_SIZE - STORE_SUPER_SIZE));
        store_unmap(mm->store);
        safe_close(mm->store_fd);
        if (mm->sync) {
                /* a read put off keeps `reading` raised (drain_uffd()): the
                 * process may live on with this page and a new daemon */
                if (atomic_load_explicit(&mm->read_deferred, memory_order_relaxed))
                        zsync_read_end(mm->sync);
                munmap(mm->sync, ZSWAP_SYNC_SIZE);
        }
        safe_close(mm->sync_fd);
        if (mm->core && mm->core->closer)
                /* the uffd's release takes the process's mmap lock for
                 * writing when ours is its last reference (its process
                 * closed its own copy, or a fork child's, which only we
                 * have), and the process can hold that lock, as can a read
                 * of ours (memread.h): closed where that waits for no one
                 * else (closer.c). A read of ours past its bound counts
                 * against the user, as what it sends */
                mm->uffd = atomic_load_explicit(&mm->read_stuck, memory_order_relaxed)
                                   ? closer_hand(mm->core->closer, mm->uffd, mm->uid)
                                   : closer_release(mm->core->closer, mm->uffd, mm->uid);
        else
                safe_close(mm->uffd);
        safe_close(mmclient_pidfd(mm));
        safe_close(mm->parent_pidfd);
        safe_close(mmclient_pagemap_fd(mm));
        safe_close(mmclient_mem_fd(mm));
        mmclient_unbind(mm); /* maps_fd, and what was never proven */
        pthread_mutex_destroy(&mm->regions_lock);
        pthread_mutex_destroy(&mm->serve_lock);
        free(mm->regions);
        free(mm);
        return NULL;
}

int mmclient_store_fd_ro(MMClient *mm) {
        return mm->store_fd < 0 ? -EBADF : store_reopen_ro(mm->store_fd);
}

bool mmclient_sync_fd_ok(int fd) {
        struct stat st;
        struct statfs sf;
        int seals = fcntl(fd, F_GET_SEALS);

        /* a file the client could shrink, or a hugetlbfs one whose page it
         * could take away, would fault us with SIGBUS: plain shmem only */
        return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)ZSWAP_SYNC_SIZE && seals >= 0 &&
               (seals & F_SEAL_SHRINK) && fstatfs(fd, &sf) == 0 && sf.f_type == TMPFS_MAGIC;
}

int mmclient_set_sync(MMClient *mm, int fd) {
        if (!mmclient_sync_fd_ok(fd)) {
                safe_close(fd);
                return -EBADF;
        }
        void *p = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
                safe_close(fd);
                return -EBADF;
        }
        mm->sync = p;
        mm->sync_fd = fd;
        return 0;
}

int mmclient_map_sync(int fd, ZSync **ret) {
        void *p = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
                safe_close(fd);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

void mmclient_swap_sync(MMClient *mm, ZSync *p, int fd) {
        ZSync *old = mm->sync;
        int old_fd = mm->sync_fd;
        if (old && atomic_load_explicit(&mm->read_deferred, memory_order_relaxed)) {
                zsync_read_end(old); /* a read put off held it raised */
                atomic_store_explicit(&mm->read_deferred, false, memory_order_relaxed);
        }
        /* the new page's agent has moved nothing yet (reads of a
         * revocation still in flight are waited for all the same) */
        mm->revoking = false;
        mm->revoke_left = 0;
        mm->agent_slow = false;
        mm->sync = p;
        mm->sync_fd = fd;
        if (old)
                munmap(old, ZSWAP_SYNC_SIZE);
        safe_close(old_fd);
}

/* Does the address space the pagemap fd is bound to still exist? Asked
 * without its mmap lock: a read of a length that is not a whole entry
 * fails with EINVAL once the kernel has taken a reference on the address
 * space, and reads nothing if it could not (fs/proc/task_mmu.c,
 * pagemap_read(): mmget_not_zero() comes first), whoever holds or waits
 * for the lock. */
static bool pagemap_alive(int fd) {
        uint8_t b;
        return pread(fd, &b, 1, 0) != 0;
}

bool mmclient_alive(MMClient *mm) {
        /* an exec gives the process another address space and ends the
         * one the uffd and the mem fd are bound to: not alive for us.
         * The uffd's probe takes the mmap lock, which the client may hold
         * (mmjob.h): only for a client never bound, which has no pagemap fd */
        int pm = mmclient_pagemap_fd(mm);
        return pidfd_exited(mmclient_pidfd(mm)) == 0 && (pm >= 0 ? pagemap_alive(pm) : uffd_mm_alive(mm->uffd));
}

bool mmclient_orphans_stopped(MMClient *mm) {
        /* relaxed: hints; the manager kicks the fault thread after it
         * clears the stop, and sets orphans_unbounded before it exits */
        return atomic_load_explicit(&mm->orphans_stop, memory_order_relaxed) &&
               !atomic_load_explicit(&mm->core->orphans_unbounded, memory_order_relaxed);
}

bool mmclient_parent_gone(const MMClient *mm) {
        return pidfd_exited(mm->parent_pidfd) == 1;
}

int mmclient_read_view(MMClient *mm, uint64_t addr, size_t len, const uint8_t **out) {
        if (mmclient_mem_fd(mm) < 0)
                return -ESRCH;
        /* through the fd bound to the address space proven at attach,
         * never by pid (a pid can be reused and a process can exec), and
         * never waiting on the client past a bound (memread.h) */
        int r = memread_view(mmclient_mem_fd(mm), addr, len, mm->uid, out);
        if (r == -ETIMEDOUT)
                mmclient_read_overdue(mm, addr);
        return r;
}

void mmclient_read_overdue(MMClient *mm, uint64_t addr) {
        /* Something waits in the kernel where we read: a file system the
         * client mapped there that does not answer, or only the client's
         * own mmap lock, held long (a fork of a large process), or a host
         * that swaps. Never a reason to kill a process: this client is
         * evicted no more (its pages stay where they are, those in flight
         * are handed back), and its user is refused new connections while
         * the read waits (memread_stuck()) */
        if (atomic_exchange_explicit(&mm->read_stuck, true, memory_order_relaxed))
                return;
        log_error("pid %d (uid %u): a read of its memory at %#llx has waited %u ms: it is evicted no more while it waits, and its "
                  "user is refused new connections while the read waits",
                  (int)mmclient_pid(mm), mm->uid, (unsigned long long)addr, memread_bound_ms());
}

int mmclient_read(MMClient *mm, uint64_t addr, void *buf, size_t len) {
        const uint8_t *p;
        int r = mmclient_read_view(mm, addr, len, &p);

        if (r == 0)
                memcpy(buf, p, len);
        return r;
}

int mmclient_pagemap(MMClient *mm, uint64_t start, size_t npages, uint64_t *pm) {
        ssize_t n =
                pread(mmclient_pagemap_fd(mm), pm, npages * sizeof(uint64_t), (off_t)(start >> ZSWAP_PAGE_SHIFT) * 8);
        if (n < 0)
                return negative_errno();
        if ((size_t)n != npages * sizeof(uint64_t))
                return -EIO;
        return 0;
}

int mmclient_slot_zero(MMClient *mm, uint32_t slot) {
        struct uffdio_zeropage z = { .range = { .start = mmclient_slot_addr(mm, slot), .len = ZSWAP_PAGE_SIZE } };

        /* through the client's uffd (its staging area is registered
         * there): no read of the client's memory, nothing a client can
         * make wait */
        return ioctl(mm->uffd, UFFDIO_ZEROPAGE, &z) == 0 ? 0 : negative_errno();
}

void mmclient_slot_poison(MMClient *mm, uint32_t slot) {
        uint8_t byte;

        /* EEXIST: the slot is populated already (the move happened, or an
         * earlier poison); ENOENT, EINVAL: the client took its staging
         * area off its uffd, and no move of its agent can land there
         * either; ESRCH: it is gone. EAGAIN: an event of the client's is
         * queued, unread. Its agent's moves fail meanwhile too, but not
         * once it has been read, which may be before we could poison:
         * read the slot instead, which maps the zero page whatever is
         * queued (bounded, memread.h) */
        if (mmclient_slot_zero(mm, slot) == -EAGAIN)
                mmclient_read(mm, mmclient_slot_addr(mm, slot), &byte, 1);
}

/* ---- regions (sorted, non-overlapping) ---- */

/* Write the regions to the store's range table (under regions_lock): what
 * a new daemon, or the client's own fallback, knows is registered. */
static void regions_persist(MMClient *mm) {
        if (!mm->store)
                return;
        StoreRange *t = store_ranges_begin(mm->store);
        size_t n = MIN(mm->nregions, (size_t)STORE_RANGES_MAX);
        for (size_t i = 0; i < n; i++)
                t[i] = (StoreRange){ mm->regions[i].start, mm->regions[i].end };
        if (n < mm->nregions)
                log_warn("pid %d: %zu regions, the store keeps the first %zu", (int)mmclient_pid(mm), mm->nregions, n);
        store_ranges_commit(mm->store, n);
}

static int regions_insert(MMClient *mm, size_t at, uint64_t start, uint64_t end, uint32_t stamp, bool armed) {
        Region *n = INJECT_ALLOC(realloc(mm->regions, (mm->nregions + 1) * sizeof(Region)));
        if (!n)
                return -ENOMEM;
        mm->regions = n;
        memmove(&n[at + 1], &n[at], (mm->nregions - at) * sizeof(Region));
        n[at] = (Region){ start, end, stamp, armed };
        mm->nregions++;
        return 0;
}

static int region_add_locked(MMClient *mm, uint64_t start, uint64_t end, uint32_t stamp, bool armed) {
        size_t i = 0;

        while (i < mm->nregions && mm->regions[i].end <= start)
                i++;
        if (i < mm->nregions && mm->regions[i].start < end)
                return -EEXIST;
        if (mm->nregions >= mm->core->cfg.max_regions)
                return -ENOSPC;
        if (mm->registered_bytes + (end - start) > mm->core->cfg.max_registered)
                return -ENOSPC;
        int r = regions_insert(mm, i, start, end, stamp, armed);
        if (r < 0)
                return r;
        mm->registered_bytes += end - start;
        atomic_store_explicit(&mm->st.registered, mm->registered_bytes, memory_order_relaxed);
        return 0;
}

size_t mmclient_regions_list(MMClient *mm, uint64_t from, uint64_t *starts, uint64_t *ends, size_t max,
                             uint64_t *next) {
        size_t n = 0, i = 0;

        pthread_mutex_lock(&mm->regions_lock);
        while (i < mm->nregions && mm->regions[i].end <= from)
                i++;
        for (; i < mm->nregions && n < max; i++, n++) {
                starts[n] = MAX(mm->regions[i].start, from);
                ends[n] = mm->regions[i].end;
        }
        *next = i < mm->nregions && n > 0 ? ends[n - 1] : 0;
        pthread_mutex_unlock(&mm->regions_lock);
        return n;
}

int mmclient_region_add(MMClient *mm, uint64_t start, uint64_t end, bool armed) {
        pthread_mutex_lock(&mm->regions_lock);
        /* a page never seen used counts as used when it was registered */
        int r = region_add_locked(mm, start, end, age_stamp(), armed);
        regions_persist(mm);
        pthread_mutex_unlock(&mm->regions_lock);
        return r;
}

static int region_remove_locked(MMClient *mm, uint64_t start, uint64_t end, bool must_exist) {
        mm->regions_cut++;
        if (must_exist) {
                /* the whole range must be registered, in one region */
                size_t i = 0;
                while (i < mm->nregions && mm->regions[i].end <= start)
                        i++;
                if (i == mm->nregions || mm->regions[i].start > start || mm->regions[i].end < end)
                        return -EINVAL;
        }
        for (size_t i = 0; i < mm->nregions;) {
                Region *g = &mm->regions[i];
                if (g->end <= start || g->start >= end) {
                        i++;
                        continue;
                }
                if (g->start < start && g->end > end) {
                        /* cut a hole: split in two */
                        uint64_t old_end = g->end;
                        g->end = start;
                        int r = regions_insert(mm, i + 1, end, old_end, g->stamp, g->armed);
                        if (r < 0) {
                                g->end = old_end;
                                return r;
                        }
                        mm->registered_bytes -= end - start;
                        atomic_store_explicit(&mm->st.registered, mm->registered_bytes, memory_order_relaxed);
                        return 0;
                }
                uint64_t cs = MAX(g->start, start), ce = MIN(g->end, end);
                mm->registered_bytes -= ce - cs;
                atomic_store_explicit(&mm->st.registered, mm->registered_bytes, memory_order_relaxed);
                if (g->start < start) {
                        g->end = start;
                        i++;
                } else if (g->end > end) {
                        g->start = end;
                        i++;
                } else {
                        memmove(g, g + 1, (mm->nregions - i - 1) * sizeof(Region));
                        mm->nregions--;
                }
        }
        return 0;
}

int mmclient_region_remove(MMClient *mm, uint64_t start, uint64_t end, bool must_exist) {
        pthread_mutex_lock(&mm->regions_lock);
        int r = region_remove_locked(mm, start, end, must_exist);
        regions_persist(mm);
        pthread_mutex_unlock(&mm->regions_lock);
        return r;
}

int mmclient_region_move(MMClient *mm, uint64_t from, uint64_t to, uint64_t len) {
        int r = 0;

        pthread_mutex_lock(&mm->regions_lock);
        /* collect the registered parts of [from, from+len) and re-add them
         * at the same offsets from `to` */
        Region parts[64];
        size_t nparts = 0;
        for (size_t i = 0; i < mm->nregions && nparts < ELEMENTSOF(parts); i++) {
                Region *g = &mm->regions[i];
                uint64_t cs = MAX(g->start, from), ce = MIN(g->end, from + len);
                if (cs < ce)
                        parts[nparts++] = (Region){ cs, ce, g->stamp, g->armed };
        }
        region_remove_locked(mm, from, from + len, false);
        for (size_t i = 0; i < nparts; i++) {
                uint64_t s = parts[i].start - from + to, e = parts[i].end - from + to;
                /* the destination may already be registered (it was mapped
                 * over): the kernel moved the registration, so do we */
                region_remove_locked(mm, s, e, false);
                int q = region_add_locked(mm, s, e, parts[i].stamp, parts[i].armed);
                if (q < 0 && r == 0)
                        r = q;
        }
        regions_persist(mm);
        pthread_mutex_unlock(&mm->regions_lock);
        return r;
}

int mmclient_regions_copy(MMClient *dst, MMClient *src) {
        int r = 0;

        pthread_mutex_lock(&src->regions_lock);
        if (src->nregions) {
                dst->regions = INJECT_ALLOC(malloc(src->nregions * sizeof(Region)));
                if (dst->regions) {
                        memcpy(dst->regions, src->regions, src->nregions * sizeof(Region));
                        dst->nregions = src->nregions;
                        dst->registered_bytes = src->registered_bytes;
                        atomic_store_explicit(&dst->st.registered, dst->registered_bytes, memory_order_relaxed);
                } else
                        r = -ENOMEM;
        }
        pthread_mutex_unlock(&src->regions_lock);
        /* dst is not shared yet: nobody else takes its lock */
        pthread_mutex_lock(&dst->regions_lock);
        regions_persist(dst);
        pthread_mutex_unlock(&dst->regions_lock);
        return r;
}

bool mmclient_region_has_locked(MMClient *mm, uint64_t addr) {
        size_t lo = 0, hi = mm->nregions;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (mm->regions[mid].end <= addr)
                        lo = mid + 1;
                else if (mm->regions[mid].start > addr)
                        hi = mid;
                else
                        return true;
        }
        return false;
}

bool mmclient_region_clip(MMClient *mm, uint64_t *start, uint64_t *end) {
        return mmclient_region_clip_stamp(mm, start, end, NULL, NULL);
}

bool mmclient_region_clip_stamp(MMClient *mm, uint64_t *start, uint64_t *end, uint32_t *stamp, bool *armed) {
        bool found = false;

        pthread_mutex_lock(&mm->regions_lock);
        for (size_t i = 0; i < mm->nregions; i++) {
                Region *g = &mm->regions[i];
                if (g->end <= *start)
                        continue;
                if (g->start >= *end)
                        break;
                *start = MAX(*start, g->start);
                *end = MIN(*end, g->end);
                if (stamp)
                        *stamp = g->stamp;
                if (armed)
                        *armed = g->armed;
                found = true;
                break;
        }
        pthread_mutex_unlock(&mm->regions_lock);
        return found;
}

/* The name of an anonymous mapping: none, or one the kernel gives it, but
 * never libzswap's own (ZSWAP_OWN_NAME, protocol.h). name ends at a NUL or
 * a newline (a maps line). */
static bool anon_name_ok(const char *name) {
        static const char own[] = "[anon:" ZSWAP_OWN_NAME "]";
        if (strncmp(name, own, sizeof(own) - 1) == 0 && (name[sizeof(own) - 1] == 0 || name[sizeof(own) - 1] == '\n'))
                return false;
        return *name == '\n' || *name == 0 || strncmp(name, "[heap]", 6) == 0 || strncmp(name, "[anon:", 6) == 0 ||
               strncmp(name, "[stack]", 7) == 0;
}

static bool maps_line_ok(const char *line, uint64_t *s, uint64_t *e) {
        unsigned long long ls, le, off, inode;
        char perms[8], dev[16];
        int n = 0;

        if (sscanf(line, "%llx-%llx %7s %llx %15s %llu %n", &ls, &le, perms, &off, dev, &inode, &n) < 6)
                return false;
        *s = ls;
        *e = le;
        const char *path = line + n;
        if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || inode != 0)
                return false;
        return anon_name_ok(path);
}

/*
 * [covered, end) through PROCMAP_QUERY (Linux 6.11): one query per mapping
 * of the range, whatever the number of mappings elsewhere in the process.
 * Reading /proc/PID/maps from its first line instead costs the manager time
 * in proportion to every mapping below the range: a client with 60,000
 * mappings made each REGISTER cost ~57 ms of the thread every client waits
 * on. 1: the kernel does not know the query (fall back to reading).
 */
static int check_anon_query(int fd, uint64_t covered, uint64_t end) {
        char name[PATH_MAX]; /* a longer name says ENAMETOOLONG */

        while (covered < end) {
                struct procmap_query q = { .size = sizeof(q), .query_addr = covered,
                                           .vma_name_size = sizeof(name), .vma_name_addr = (uintptr_t)name };
                name[0] = 0;
                if (ioctl(fd, PROCMAP_QUERY, &q) < 0) {
                        if (errno == ENOTTY || errno == EOPNOTSUPP)
                                return 1;
                        return errno == ENOENT ? -EINVAL : negative_errno();
                }
                const uint64_t rwp = PROCMAP_QUERY_VMA_READABLE | PROCMAP_QUERY_VMA_WRITABLE;
                if ((q.vma_flags & (rwp | PROCMAP_QUERY_VMA_SHARED)) != rwp || q.inode != 0 ||
                    q.vma_start > covered || q.vma_end <= covered)
                        return -EINVAL;
                if (q.vma_name_size > 0 && !anon_name_ok(name))
                        return -EINVAL;
                covered = q.vma_end;
        }
        return 0;
}

typedef struct AnonCheck {
        uint64_t covered, end;
} AnonCheck;

static int anon_cb(void *ud, const char *line) {
        AnonCheck *a = ud;
        uint64_t s = 0, e = 0;
        bool ok = maps_line_ok(line, &s, &e);
        if (e <= a->covered)
                return 0;
        if (s > a->covered || !ok)
                return 1;
        a->covered = e;
        return a->covered >= a->end;
}

int mmclient_check_anon(MMClient *mm, uint64_t start, uint64_t end) {
        if (mm->maps_fd < 0)
                return -ESRCH;
        int r = check_anon_query(mm->maps_fd, start, end);
        if (r <= 0)
                return r;
        AnonCheck a = { start, end };
        r = maps_foreach(mm, anon_cb, &a);
        if (r < 0)
                return r;
        return a.covered >= end ? 0 : -EINVAL;
}

int mmclient_check_anon_ranges(MMClient *mm, const StoreRange *r, size_t n) {
        char path[64], line[4096];
        size_t i = 0;
        int ret = 0;
        FILE *f;

        if (n == 0)
                return 0;
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)mmclient_pid(mm));
        f = fopen(path, "re");
        if (!f)
                return negative_errno();
        /* both sorted: one pass over maps, each mapping against the first
         * range that does not end before it (if it overlaps none of that
         * one, it overlaps none after) */
        while (i < n && fgets(line, sizeof(line), f)) {
                uint64_t s = 0, e = 0;
                bool ok = maps_line_ok(line, &s, &e);
                if (e == 0)
                        continue; /* the rest of a long line */
                while (i < n && r[i].end <= s)
                        i++;
                if (i < n && r[i].start < e && !ok) {
                        ret = -EINVAL;
                        break;
                }
        }
        fclose(f);
        return ret;
}

/* UFFDIO_WRITEPROTECT of a page nothing maps, which the kernel leaves
 * alone: its errno (0: none) is all that is asked of it. */
static int wp_probe(int uffd) {
        struct uffdio_writeprotect wp = { .range = { .start = 0x10000, .len = ZSWAP_PAGE_SIZE }, .mode = 0 };

        return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) < 0 ? errno : 0;
}

bool uffd_mm_alive(int uffd) {
        int inj = INJECT(INJ_UFFD_WP);
        if (inj)
                return inj != ESRCH;
        return wp_probe(uffd) != ESRCH;
}

/*
 * Has the kernel an event of this uffd under way: an munmap, mremap,
 * madvise or fork begun whose message is still unread, or read while its
 * thread has not run since (the kernel counts it out then)?
 * UFFDIO_WRITEPROTECT refuses with EAGAIN while one is (mmap_changing,
 * mm/userfaultfd.c mwriteprotect_range(), checked before it looks for a
 * mapping).
 */
bool uffd_event_under_way(int uffd) {
        return wp_probe(uffd) == EAGAIN;
}

/*
 * Where the uffd has WP_ASYNC a range is registered for write-protect
 * faults only: writes never stop the program (the kernel resolves them),
 * PAGEMAP_SCAN tells which pages were written (reclaim.c), and the events
 * (UNMAP, REMOVE, REMAP, FORK) come as for any registered range, while
 * every first touch of fresh memory is the kernel's own fault, never a
 * round trip to us. Missing faults are added when a page first has to
 * leave the range (mmclient_region_arm()). Without WP_ASYNC: missing
 * faults at once (armed).
 */
static int uffd_register(MMClient *mm, uint64_t start, uint64_t end, bool missing) {
        struct uffdio_register reg = { .range = { .start = start, .len = end - start },
                                       .mode = (missing ? UFFDIO_REGISTER_MODE_MISSING : 0) |
                                               (mm->wp_async ? UFFDIO_REGISTER_MODE_WP : 0) };
        int inj = INJECT(INJ_UFFD_REGISTER);
        if (inj)
                return -inj;
        if (ioctl(mm->uffd, UFFDIO_REGISTER, &reg) < 0)
                return negative_errno();
        return missing;
}

int mmclient_uffd_register(MMClient *mm, uint64_t start, uint64_t end) {
        return uffd_register(mm, start, end, !mm->wp_async);
}

int mmclient_region_arm(MMClient *mm, uint64_t addr) {
        uint64_t s = 0, e = 0, cut;
        bool found = false, armed = false;

        pthread_mutex_lock(&mm->regions_lock);
        for (size_t i = 0; !found && i < mm->nregions; i++)
                if (mm->regions[i].start <= addr && addr < mm->regions[i].end) {
                        /* with every region touching it on either side: a
                         * region grown in place by mremap() is one vma in
                         * the kernel, whose new part was registered as a
                         * region of its own; arming only a part would split
                         * that vma, and the program's next mremap() of the
                         * whole would fail (EFAULT) */
                        size_t lo = i, hi = i;
                        while (lo > 0 && mm->regions[lo - 1].end == mm->regions[lo].start)
                                lo--;
                        while (hi + 1 < mm->nregions && mm->regions[hi + 1].start == mm->regions[hi].end)
                                hi++;
                        s = mm->regions[lo].start;
                        e = mm->regions[hi].end;
                        armed = true;
                        for (size_t k = lo; k <= hi; k++)
                                armed = armed && mm->regions[k].armed;
                        found = true;
                }
        cut = mm->regions_cut;
        pthread_mutex_unlock(&mm->regions_lock);
        if (!found)
                return -ENOENT;
        if (armed)
                return 0;
        /* the whole run of regions, as registered: a part would split its
         * vma. An event handled meanwhile may have taken the range away or
         * moved another here: then the mark waits for the next try */
        int r = uffd_register(mm, s, e, true);
        TRACE(TR_ARM, s, e, (int64_t)r);
        if (r < 0)
                return r;
        r = -EAGAIN;
        pthread_mutex_lock(&mm->regions_lock);
        for (size_t i = 0; mm->regions_cut == cut && i < mm->nregions; i++)
                if (mm->regions[i].start >= s && mm->regions[i].end <= e) {
                        mm->regions[i].armed = true;
                        if (mm->regions[i].start <= addr && addr < mm->regions[i].end)
                                r = 0;
                }
        pthread_mutex_unlock(&mm->regions_lock);
        if (r == 0)
                log_debug("pid %d: [%#llx, %#llx) registered for missing faults: its pages may leave",
                          (int)mmclient_pid(mm), (unsigned long long)s, (unsigned long long)e);
        return r;
}

int mmclient_uffd_unregister(MMClient *mm, uint64_t start, uint64_t end) {
        struct uffdio_range r = { .start = start, .len = end - start };
        int inj = INJECT(INJ_UFFD_UNREGISTER);
        if (inj)
                return -inj;
        if (ioctl(mm->uffd, UFFDIO_UNREGISTER, &r) < 0)
                return negative_errno();
        return 0;
}

/* The ioctls take the client's mmap lock for writing, which the client
 * may hold a long time: never under regions_lock, which fault threads
 * take to handle the client's events (a copy is made under it). Without
 * memory for a copy, one region at a time, looked up again each time. */
void mmclient_uffd_unregister_all(MMClient *mm) {
        pthread_mutex_lock(&mm->regions_lock);
        size_t n = mm->nregions;
        Region *copy = n ? malloc(n * sizeof(*copy)) : NULL;
        if (copy)
                memcpy(copy, mm->regions, n * sizeof(*copy));
        pthread_mutex_unlock(&mm->regions_lock);
        if (copy || n == 0) {
                for (size_t i = 0; i < n; i++)
                        mmclient_uffd_unregister(mm, copy[i].start, copy[i].end);
                free(copy);
                return;
        }
        for (size_t i = 0;; i++) {
                Region g;
                pthread_mutex_lock(&mm->regions_lock);
                bool any = i < mm->nregions;
                if (any)
                        g = mm->regions[i];
                pthread_mutex_unlock(&mm->regions_lock);
                if (!any)
                        return;
                mmclient_uffd_unregister(mm, g.start, g.end);
        }
}

int mmclient_dict_set(MMClient *mm, CodecDict *d) {
        PoolHandle h[STORE_DICT_OBJS] = { 0 };
        uint32_t n = 0;
        int r = 0;

        if (atomic_load_explicit(&mm->dict, memory_order_relaxed))
                return -EEXIST;
        if (d->len > STORE_DICT_OBJS * ZSWAP_PAGE_SIZE)
                return -EINVAL;
        /* past the pool's bound if need be: a dictionary is a few pages and
         * is what makes the pool smaller */
        for (uint32_t off = 0; mm->pool && off < d->len && r == 0; off += ZSWAP_PAGE_SIZE, n++) {
                uint32_t len = MIN(d->len - off, (uint32_t)ZSWAP_PAGE_SIZE);
                r = pool_alloc_over(mm->pool, len, &h[n]);
                if (r == 0)
                        memcpy(pool_map(mm->pool, h[n]), d->bytes + off, len);
        }
        if (r < 0) {
                for (uint32_t i = 0; i < n; i++)
                        pool_release(mm->pool, h[i]);
                return r;
        }
        if (mm->store) {
                StoreSuper *s = store_super(mm->store);
                memcpy(s->dict_handle, h, sizeof(h));
                s->dict_len = d->len;
                store_mark_dict(mm->store); /* release: the above first */
        }
        mm->dict_handles = n;
        memcpy(mm->dict_h, h, sizeof(h));
        atomic_store_explicit(&mm->dict, d, memory_order_release);
        return 0;
}

int mmclient_serve_trylock(MMClient *mm) {
        if (INJECT(INJ_LOCK_BUSY) || core_user_held(mm->core, mm->uid))
                return EBUSY;
        return pthread_mutex_trylock(&mm->serve_lock);
}
