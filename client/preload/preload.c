/*
 * preload.c: libzswap-preload.so, zswapd for programs that were never
 * linked with libzswap (zswap-run sets LD_PRELOAD to it).
 *
 * ZSWAP_ATTACH_MS (1 s) after load the shim's scanner thread connects
 * to the daemon (libzswap, linked in statically) and hands it every
 * private, anonymous, writable mapping of the process:
 * the brk heap, malloc arenas and mmap'd chunks, jemalloc/tcmalloc extents,
 * thread stacks. A scanner thread keeps that true: it reads /proc/self/maps
 * every ZSWAP_SCAN_MS (200 ms) and right after the program maps anonymous
 * memory (the interposed mmap/mremap only poke it through an eventfd), and
 * registers what is new. What leaves (munmap, mremap, MADV_DONTNEED) the
 * daemon learns from the kernel's uffd events, not from us; it counts
 * each unmap and move on the sync page, and when the count moved the
 * scanner asks for the daemon's list (REGIONS) and hands over what it
 * lacks: a mapping made again where one was unmapped, the grown part of
 * an mremap (register_new()).
 *
 * Never managed: the main thread's [stack] (it grows down, one vma that
 * changes size), file-backed and shared mappings, mlocked mappings
 * (VmFlags "lo": the program asked for them to stay in RAM), the shim's own
 * memory (libzswap's staging area and its agent's stack, the scanner's
 * stack, and every mapping the library makes for itself, named
 * "[anon:zswap]"), the .bss of loaded objects (their segments past their
 * file, from dl_iterate_phdr(): libc's holds malloc's state, and the agent
 * must reach a daemon without faulting on memory only a daemon serves),
 * and mappings under 16 KiB. The daemon needs nothing from the
 * process to serve a fault, so no other memory has to be held back.
 *
 * Interposed calls stay what they were: the real system call is made
 * directly, errno is what it set, nothing allocates, and the only extra
 * work is one write(2) to an eventfd, which is async-signal-safe.
 *
 * A process that exits before then (a compiler's passes, a shell's
 * commands, a wrapper script) never costs the daemon a client; it had no
 * cold memory to give. While the scanner connects, a fork waits for it
 * (the fork handlers then see a client or none, never half of one), and
 * so does a program that closes descriptors (close_range(), closefrom(),
 * close(), dup2()), which must not close the new ones.
 *
 * It fails open: no daemon, a refusal or an error leaves the program
 * running unmanaged, with one line on stderr. ZSWAP_LIMIT (zswap-run
 * --limit) becomes the process's resident limit in the daemon, which then
 * keeps its managed memory under it by evicting its coldest pages.
 */
/* mmap and mmap64 are both defined here: no redirection of one to the other */
#undef _FILE_OFFSET_BITS
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <linux/userfaultfd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libzswap-internal.h"
#include "protocol.h"
#include "macro.h"
#include "util.h"

#define SCAN_MS_DEFAULT 200
/* a compiler pass or a script's command ends before (the attach is the
 * dear part of the shim: a few ms each), a program worth managing lives on */
#define ATTACH_MS_DEFAULT 1000
#define MIN_SPAN (16 * 1024)        /* smaller mappings are not worth a region */
#define OWN_MAX (8 + ZSWAP_OWN_MAPS)

typedef struct Spans {
        ZswapSpan *v;
        size_t n, cap;
} Spans;

/* the scanner's, and under scan_lock anyone's (give_up()) */
static struct zswap_client *client;
/* the client whose descriptors are kept from the program: published once
 * connected (release), read by any thread (own_fds()) */
static _Atomic(struct zswap_client *) fds_client;
/* the scanner connecting: a fork (connect_prepare()) and a program
 * closing descriptors (closers_enter()) wait for connect_lock. Written
 * only under connect_lock (attach(), child_attach()), read by any thread
 * closing descriptors */
static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool connecting;
/* program threads between closers_enter() and closers_leave(): each
 * counts itself; the thread that connects waits for 0 */
static atomic_uint closers;
static int poke_fd = -1;          /* mmap/mremap -> scanner */
static atomic_bool attach_failed; /* said so: fork children do not try again */
static unsigned scan_ms = SCAN_MS_DEFAULT;
static unsigned attach_ms = ATTACH_MS_DEFAULT;
static uint64_t limit_bytes;      /* 0: no limit */
static ZswapSpan scanner_stack;
/*
 * The /proc/self files the scanner reads at every scan, opened once while
 * no program thread closes descriptors (attach(), child_attach(), a fork
 * child's handler) and kept from the program as the shim's own. Opened
 * afresh for each read, a program that closes every descriptor in a loop
 * closed them under nearly every read (the scanner saw no mapping and
 * managed nothing, for good), and a descriptor closed and made again by
 * the program meanwhile would have been read, and then closed, as ours.
 * Read with pread() from offset 0: a seq_file starts over there.
 */
enum { PROC_MAPS, PROC_STATUS, PROC_SMAPS, PROC_MAX };
static int proc_fd[PROC_MAX] = { -1, -1, -1 };
/* under scan_lock: the scanner thread, and a program thread giving memory
 * back to the program's own userfaultfd (ioctl()) */
static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;
static Spans known;               /* what the daemon manages, as far as we know */
static Spans given_up;            /* the program's own userfaultfd has it: never ours again */
/* found registered, not by the daemon (the program's own userfaultfd, or
 * a change that raced with us): not asked again until the daemon's list
 * changes */
static Spans foreign;
/* known is the daemon's own list (ZMSG_REGIONS) as of regions_seen
 * (zswap_client_regions_gen()), plus what we registered since */
static bool regions_asked;
static uint64_t regions_seen;
static bool said_nospc;

/* ---- messages: one line each, never more than once per cause ---- */

static void say(const char *fmt, ...) {
        char buf[512];
        va_list ap;
        int n = snprintf(buf, sizeof(buf), "zswap: pid %d: ", (int)getpid());

        va_start(ap, fmt);
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(buf) - 2)
                n = (int)sizeof(buf) - 2;
        buf[n++] = '\n';
        (void)!write(STDERR_FILENO, buf, (size_t)n);
}

/* ---- interposed calls ---- */

static void poke(void) {
        uint64_t one = 1;
        int saved = errno;

        if (poke_fd >= 0)
                (void)!write(poke_fd, &one, sizeof(one));
        errno = saved;
}

_public_ void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
        long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);

        if (r == -1)
                return MAP_FAILED;
        if ((flags & MAP_ANONYMOUS) && (flags & MAP_PRIVATE) && (prot & PROT_WRITE) && len >= MIN_SPAN)
                poke();
        return (void *)r;
}

_public_ void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
        return mmap(addr, len, prot, flags, fd, off);
}

_public_ void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
        void *new_addr = NULL;
        va_list ap;

        if (flags & MREMAP_FIXED) {
                va_start(ap, flags);
                new_addr = va_arg(ap, void *);
                va_end(ap);
        }
        long r = syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
        if (r == -1)
                return MAP_FAILED;
        /* a move is followed by the daemon (REMAP event); growth is new memory */
        if (new_len > old_len)
                poke();
        return (void *)r;
}

/*
 * The descriptors the shim lives on (libzswap's socket, uffd, store and
 * sync page, the scanner's eventfd) are kept from the program: a program
 * that closes every descriptor it does not know (daemon-style
 * close_range(3, ~0U), closefrom(), a close() loop) would close the
 * process's own reference to its uffd, and once the daemon died every
 * evicted page would read as zeros. close() of one of ours does nothing
 * and says 0; close_range() and closefrom() close all around them;
 * dup2()/dup3() over one of ours is refused with EBUSY, with one line.
 */
#define OWN_FDS (8 + PROC_MAX)

static size_t own_fds(int *out) {
        struct zswap_client *c = atomic_load_explicit(&fds_client, memory_order_acquire);
        size_t n = c ? zswap_client_fds(c, out, OWN_FDS - 1 - PROC_MAX) : 0;
        if (poke_fd >= 0)
                out[n++] = poke_fd;
        for (size_t i = 0; i < PROC_MAX; i++)
                if (proc_fd[i] >= 0)
                        out[n++] = proc_fd[i];
        return n;
}

/*
 * A program thread about to close or replace descriptors: never while the
 * scanner connects, whose new descriptors are not known yet. Either this
 * thread sees `connecting` and waits for the connect to end, or the
 * scanner sees this thread counted and waits for it to leave before it
 * makes any (seq_cst on both sides: one of the two sees the other).
 */
static void closers_enter(void) {
        for (;;) {
                /* seq_cst, both: our half of the handshake (a store then a
                 * load, each side), which release and acquire would let
                 * pass each other */
                atomic_fetch_add_explicit(&closers, 1, memory_order_seq_cst);
                if (!atomic_load_explicit(&connecting, memory_order_seq_cst))
                        return;
                /* seq_cst: the handshake's counter; not argued weaker */
                atomic_fetch_sub_explicit(&closers, 1, memory_order_seq_cst);
                pthread_mutex_lock(&connect_lock);
                pthread_mutex_unlock(&connect_lock);
        }
}

static void closers_leave(void) {
        /* seq_cst: the handshake's counter, which a connect reads seq_cst.
         * Release would do under C++20's model (and C23's), where a load
         * that reads an older value is ordered before the newer store; C11
         * alone does not say so for a value from a release, so not argued
         * weaker */
        atomic_fetch_sub_explicit(&closers, 1, memory_order_seq_cst);
}

static bool is_own(int fd) {
        int own[OWN_FDS];
        size_t n = own_fds(own);
        for (size_t i = 0; i < n; i++)
                if (own[i] == fd)
                        return true;
        return false;
}

_public_ int close(int fd) {
        if (fd < 0 || zswap_self)
                return (int)syscall(SYS_close, fd);
        closers_enter();
        if (is_own(fd)) {
                closers_leave();
                return 0; /* silently: every subprocess Python starts does this before its exec */
        }
        int r = (int)syscall(SYS_close, fd);
        closers_leave();
        return r;
}

static int int_cmp(const void *a, const void *b) {
        return *(const int *)a - *(const int *)b;
}

static int close_range_around(unsigned first, unsigned last, int flags) {
        int own[OWN_FDS];
        size_t n = zswap_self ? 0 : own_fds(own);
        unsigned lo = first;
        int saved = errno;

        qsort(own, n, sizeof(*own), int_cmp);
        for (size_t i = 0; i < n; i++) {
                unsigned o = (unsigned)own[i];
                if (o < lo || o > last)
                        continue;
                if (o > lo && syscall(SYS_close_range, lo, o - 1, flags) < 0)
                        return -1;
                flags &= ~CLOSE_RANGE_UNSHARE; /* done by the first call */
                lo = o + 1;
                if (lo == 0) /* o was ~0U */
                        return 0;
        }
        if (lo <= last && syscall(SYS_close_range, lo, last, flags) < 0)
                return -1;
        errno = saved;
        return 0;
}

_public_ int close_range(unsigned first, unsigned last, int flags) {
        if (flags & CLOSE_RANGE_CLOEXEC) /* ours are close-on-exec already */
                return (int)syscall(SYS_close_range, first, last, flags);
        if (zswap_self)
                return close_range_around(first, last, flags);
        closers_enter();
        int r = close_range_around(first, last, flags);
        int saved = errno;
        closers_leave();
        errno = saved;
        return r;
}

_public_ void closefrom(int lowfd) {
        int saved = errno;
        (void)close_range(lowfd < 0 ? 0 : (unsigned)lowfd, ~0U, 0);
        errno = saved;
}

static int refuse_dup(int newfd) {
        static atomic_bool said;
        if (!atomic_exchange_explicit(&said, true, memory_order_relaxed))
                say("the program wants descriptor %d, which zswap lives on: dup2/dup3 over it refused (EBUSY)",
                    newfd);
        errno = EBUSY;
        return -1;
}

_public_ int dup2(int oldfd, int newfd) {
        if (oldfd == newfd || newfd < 0 || zswap_self)
                return (int)syscall(SYS_dup2, oldfd, newfd);
        closers_enter();
        int r = is_own(newfd) ? refuse_dup(newfd) : (int)syscall(SYS_dup2, oldfd, newfd);
        int saved = errno;
        closers_leave();
        errno = saved;
        return r;
}

_public_ int dup3(int oldfd, int newfd, int flags) {
        if (newfd < 0 || zswap_self)
                return (int)syscall(SYS_dup3, oldfd, newfd, flags);
        closers_enter();
        int r = is_own(newfd) ? refuse_dup(newfd) : (int)syscall(SYS_dup3, oldfd, newfd, flags);
        int saved = errno;
        closers_leave();
        errno = saved;
        return r;
}

static int spans_add(Spans *s, uint64_t start, uint64_t end);
static int spans_subtract(Spans *out, const Spans *a, const ZswapSpan *b, size_t nb);
static int span_cmp(const void *a, const void *b);

/* The program registers [start, end) with a userfaultfd of its own, and
 * the kernel allows one per range: the shim's came first (EBUSY). The
 * shim lets that memory go (libzswap brings its evicted pages back first)
 * and never takes it again. Whether anything was let go. */
static bool give_up(uint64_t start, uint64_t end) {
        static atomic_bool said;
        bool any = false;

        pthread_mutex_lock(&scan_lock);
        for (size_t i = 0; i < known.n && client; i++) {
                uint64_t s = MAX(start, known.v[i].start), e = MIN(end, known.v[i].end);
                if (s < e && zswap_unregister(client, (void *)(uintptr_t)s, e - s) == 0)
                        any = true;
        }
        Spans rest = { 0 };
        ZswapSpan gone = { start, end };
        if (any && spans_subtract(&rest, &known, &gone, 1) == 0) {
                free(known.v);
                known = rest;
        }
        if (spans_add(&given_up, start, end) == 0)
                qsort(given_up.v, given_up.n, sizeof(*given_up.v), span_cmp);
        pthread_mutex_unlock(&scan_lock);
        if (any && !atomic_exchange_explicit(&said, true, memory_order_relaxed))
                say("the program registers memory with userfaultfd itself: zswap no longer manages it");
        return any;
}

_public_ int ioctl(int fd, unsigned long req, ...) {
        va_list ap;
        va_start(ap, req);
        void *arg = va_arg(ap, void *);
        va_end(ap);
        long r = syscall(SYS_ioctl, fd, req, arg);
        if (r < 0 && errno == EBUSY && req == UFFDIO_REGISTER && arg && client && !zswap_self) {
                const struct uffdio_register *reg = arg;
                if (give_up(reg->range.start, reg->range.start + reg->range.len))
                        r = syscall(SYS_ioctl, fd, req, arg);
        }
        return (int)r;
}

/* ---- span sets (scanner thread) ---- */

static int spans_add(Spans *s, uint64_t start, uint64_t end) {
        if (start >= end)
                return 0;
        if (s->n && s->v[s->n - 1].end == start) {
                s->v[s->n - 1].end = end; /* callers add in address order */
                return 0;
        }
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 64;
                ZswapSpan *v = realloc(s->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->v = v;
                s->cap = cap;
        }
        s->v[s->n++] = (ZswapSpan){ start, end };
        return 0;
}

/* out = a minus b (both sorted, disjoint); out is appended to. */
static int spans_subtract(Spans *out, const Spans *a, const ZswapSpan *b, size_t nb) {
        size_t j = 0;

        for (size_t i = 0; i < a->n; i++) {
                uint64_t s = a->v[i].start, e = a->v[i].end;
                while (j < nb && b[j].end <= s)
                        j++;
                for (size_t k = j; k < nb && b[k].start < e && s < e; k++) {
                        if (b[k].start > s && spans_add(out, s, b[k].start) < 0)
                                return -ENOMEM;
                        s = MAX(s, b[k].end);
                }
                if (s < e && spans_add(out, s, e) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* out = a intersected with b */
static int spans_intersect(Spans *out, const Spans *a, const Spans *b) {
        for (size_t i = 0, j = 0; i < a->n && j < b->n;) {
                uint64_t s = MAX(a->v[i].start, b->v[j].start), e = MIN(a->v[i].end, b->v[j].end);
                if (s < e && spans_add(out, s, e) < 0)
                        return -ENOMEM;
                if (a->v[i].end < b->v[j].end)
                        i++;
                else
                        j++;
        }
        return 0;
}

static int span_cmp(const void *a, const void *b) {
        const ZswapSpan *x = a, *y = b;
        return x->start < y->start ? -1 : x->start > y->start;
}

/* ---- reading /proc/self ---- */

/* Opens what proc_fd[] lacks; the caller holds off the program's closes
 * (or is a fork child's only thread). */
static void proc_open(void) {
        static const char *const path[PROC_MAX] = { "/proc/self/maps", "/proc/self/status", "/proc/self/smaps" };

        for (size_t i = 0; i < PROC_MAX; i++)
                if (proc_fd[i] < 0)
                        proc_fd[i] = open(path[i], O_RDONLY | O_CLOEXEC);
}

/* A fork child's inherited ones show its parent (the files name the mm
 * they were opened on). */
static void proc_close(void) {
        for (size_t i = 0; i < PROC_MAX; i++)
                if (proc_fd[i] >= 0) {
                        (void)syscall(SYS_close, proc_fd[i]);
                        proc_fd[i] = -1;
                }
}

/* The whole of one, NUL-terminated, or NULL (errno) */
static char *read_proc(int which, size_t *len) {
        int fd = proc_fd[which];
        size_t cap = 1 << 16, n = 0;
        char *buf = NULL;

        if (fd < 0) {
                errno = EBADF;
                return NULL;
        }
        for (;;) {
                if (n + 4096 > cap || !buf) {
                        char *b = realloc(buf, buf ? cap *= 2 : cap);
                        if (!b) {
                                free(buf);
                                return NULL;
                        }
                        buf = b;
                }
                ssize_t r = pread(fd, buf + n, cap - n - 1, (off_t)n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        int e = errno;
                        free(buf);
                        errno = e;
                        return NULL;
                }
                if (r == 0)
                        break;
                n += (size_t)r;
        }
        buf[n] = 0;
        *len = n;
        return buf;
}

/* A maps/smaps header line: "start-end perms offset dev inode [path]". */
static bool parse_vma(const char *line, uint64_t *start, uint64_t *end, bool *candidate, bool *file) {
        char perms[8] = "", path[64] = "";
        unsigned long long s, e, off, inode;
        unsigned maj, min;

        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %63s", &s, &e, perms, &off, &maj, &min, &inode, path) < 7)
                return false;
        *start = s;
        *end = e;
        *file = inode != 0;
        /* the library's own mappings are named "[anon:zswap]" (restore.c) */
        *candidate = perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && inode == 0 &&
                     (path[0] == 0 || strcmp(path, "[heap]") == 0 || strncmp(path, "[anon:", 6) == 0) &&
                     strcmp(path, "[anon:" ZSWAP_OWN_NAME "]") != 0;
        return true;
}

/* Private anonymous writable mappings, in address order. */
static int read_candidates(Spans *out) {
        size_t len;
        char *buf = read_proc(PROC_MAPS, &len);
        int r = 0;

        if (!buf)
                return -errno;
        for (char *line = buf, *nl; *line && r == 0; line = nl + 1) {
                uint64_t s, e;
                bool cand, file;
                nl = strchr(line, '\n');
                if (!nl)
                        break;
                *nl = 0;
                if (parse_vma(line, &s, &e, &cand, &file) && cand)
                        r = spans_add(out, s, e);
        }
        free(buf);
        return r;
}

/* The part of each loaded object's segments past what its file holds
 * (.bss), page-aligned: an anonymous mapping of its own, right after the
 * object's last file mapping. libc's holds malloc's state, which the
 * agent uses to reach a daemon: never managed. Told by the objects
 * themselves, not by where a mapping lies: memory the program maps right
 * after a library loaded later (dlopen(), libzswap's codecs) is the
 * program's. */
static int bss_of(struct dl_phdr_info *info, size_t size, void *arg) {
        Spans *out = arg;

        (void)size;
        for (size_t i = 0; i < info->dlpi_phnum; i++) {
                const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
                if (ph->p_type != PT_LOAD || ph->p_memsz <= ph->p_filesz)
                        continue;
                uint64_t s = info->dlpi_addr + ph->p_vaddr + ph->p_filesz;
                uint64_t e = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
                if (spans_add(out, s & ~(ZSWAP_PAGE_SIZE - 1), ALIGN_TO(e, ZSWAP_PAGE_SIZE)) < 0)
                        return -1;
        }
        return 0;
}

/* dl_iterate_phdr() holds the loader's lock meanwhile; connect_lock keeps
 * a fork (connect_prepare()) from copying it held into a child. */
static int read_bss(Spans *out) {
        pthread_mutex_lock(&connect_lock);
        int r = dl_iterate_phdr(bss_of, out);
        pthread_mutex_unlock(&connect_lock);
        if (r < 0)
                return -ENOMEM;
        qsort(out->v, out->n, sizeof(*out->v), span_cmp);
        return 0;
}

/* A field of /proc/self/status, in kB ("VmLck", "RssAnon"); 0 if absent. */
static uint64_t status_kb(const char *field) {
        size_t len, n = strlen(field);
        char *buf = read_proc(PROC_STATUS, &len), *p = buf;
        uint64_t kb = 0;

        while (p && (p = strstr(p, field)))
                if ((p == buf || p[-1] == '\n') && p[n] == ':') {
                        kb = strtoull(p + n + 1, NULL, 10);
                        break;
                } else
                        p += n;
        free(buf);
        return kb;
}

/* Mappings the program mlocked (smaps VmFlags "lo"), in address order.
 * smaps walks every page of every mapping (a read costs time in
 * proportion to the process's resident memory: with a heap of 200 MB,
 * most of a busy python's system time), so it is read only when the
 * process has locked memory at all (VmLck counts the size of every
 * mlocked mapping, resident or not). */
static int read_locked(Spans *out) {
        size_t len;
        if (status_kb("VmLck") == 0)
                return 0;
        char *buf = read_proc(PROC_SMAPS, &len);
        uint64_t s = 0, e = 0;
        int r = 0;

        if (!buf)
                return -errno;
        for (char *line = buf, *nl; *line && r == 0; line = nl + 1) {
                bool cand, file;
                nl = strchr(line, '\n');
                if (!nl)
                        break;
                *nl = 0;
                if (strncmp(line, "VmFlags:", 8) == 0) {
                        if (strstr(line, " lo"))
                                r = spans_add(out, s, e);
                } else if (line[0] != ' ' && strchr(line, '-'))
                        parse_vma(line, &s, &e, &cand, &file);
        }
        free(buf);
        return r;
}

/* ---- the scanner ---- */

static void deactivate(const char *why) {
        say("no longer managing memory: %s", why);
        client = NULL; /* the connection stays: its pages are restored by libzswap or wait */
}

/* known := what the daemon manages now, asked whole (ZMSG_REGIONS).
 * False if it could not say. Under scan_lock. */
static bool ask_regions(void) {
        ZswapSpan batch[ZSWAP_REGIONS_BATCH];
        Spans got = { 0 };
        uint64_t g = zswap_client_regions_gen(client), from = 0, next;

        for (;;) {
                int n = zswap_client_regions(client, from, batch, &next);
                if (n == -ENOTCONN && !zswap_client_recovering(client))
                        deactivate("zswapd went away");
                if (n < 0) {
                        free(got.v);
                        return false;
                }
                for (int i = 0; i < n; i++)
                        if (spans_add(&got, batch[i].start, batch[i].end) < 0) {
                                free(got.v);
                                return false;
                        }
                if (!next)
                        break;
                from = next;
        }
        free(known.v);
        known = got;
        free(foreign.v);
        foreign = (Spans){ 0 };
        /* libzswap's list too: what it registers again with a new daemon */
        zswap_client_ranges_set(client, known.v, known.n);
        regions_asked = true;
        regions_seen = g;
        return true;
}

/* Hand [sp) over to the daemon; what the daemon answered. Under scan_lock. */
static int hand_over(const ZswapSpan *sp) {
        int r = zswap_register(client, (void *)(uintptr_t)sp->start, sp->end - sp->start);
        if (r == 0)
                spans_add(&known, sp->start, sp->end);
        else if (r == -ENOTCONN && !zswap_client_recovering(client))
                deactivate("zswapd went away");
        /* -ENOTCONN while libzswap looks for a new daemon:
         * the next scan tries again */
        else if (r == -ENOSPC && !said_nospc) {
                said_nospc = true;
                say("zswapd refuses more memory of this process (a per-client limit)");
        }
        /* -EINVAL: changed under us; the next scan sees what it became */
        return r;
}

/*
 * Under scan_lock; bss: read_bss()'s.
 *
 * What we registered is not what the daemon manages for good: an
 * munmap() takes a mapping away (a new one may come at the same address
 * before we look again, and /proc/self/maps then shows the line it
 * showed), an mremap() moves one and may grow it. The daemon counts such
 * changes on the sync page (regions_gen); when the count moved, we ask
 * for its list and hand over what it lacks. A REGISTER that finds part of
 * a mapping managed already (EEXIST: a grown mapping, or a change we have
 * not heard of yet) makes us ask too, and the rest is handed over alone.
 */
static void register_new(const Spans *bss) {
        Spans cand = { 0 }, fresh = { 0 }, unlocked = { 0 }, locked = { 0 }, next = { 0 }, overlap = { 0 };
        ZswapSpan own[OWN_MAX];
        size_t nown;

        if ((!regions_asked || zswap_client_regions_gen(client) != regions_seen) && !ask_regions())
                goto out; /* the next scan asks again */
        if (!client || read_candidates(&cand) < 0)
                goto out;
        nown = zswap_client_own_memory(client, own, OWN_MAX - 1);
        own[nown++] = scanner_stack;
        qsort(own, nown, sizeof(*own), span_cmp);
        /* what is new: candidates minus the objects' .bss minus what we
         * hold minus our own memory minus what the program's own
         * userfaultfd took */
        Spans prog = { 0 }, mine = { 0 }, theirs = { 0 }, ours = { 0 };
        if (spans_subtract(&prog, &cand, bss->v, bss->n) < 0 || spans_subtract(&mine, &prog, own, nown) < 0 ||
            spans_subtract(&theirs, &mine, known.v, known.n) < 0 ||
            spans_subtract(&ours, &theirs, given_up.v, given_up.n) < 0 ||
            spans_subtract(&fresh, &ours, foreign.v, foreign.n) < 0) {
                free(prog.v);
                free(mine.v);
                free(theirs.v);
                free(ours.v);
                goto out;
        }
        free(prog.v);
        free(mine.v);
        free(theirs.v);
        free(ours.v);
        if (fresh.n > 0) {
                if (read_locked(&locked) < 0 || spans_subtract(&unlocked, &fresh, locked.v, locked.n) < 0)
                        goto out;
                for (size_t i = 0; i < unlocked.n && client; i++) {
                        ZswapSpan *sp = &unlocked.v[i];
                        if (sp->end - sp->start >= MIN_SPAN && hand_over(sp) == -EEXIST)
                                spans_add(&overlap, sp->start, sp->end);
                }
                qsort(known.v, known.n, sizeof(*known.v), span_cmp);
        }
        /* part of it is managed: which part, the daemon says; the rest
         * goes alone, and what is still refused is someone else's */
        if (overlap.n && client && ask_regions()) {
                Spans holes = { 0 };
                if (spans_subtract(&holes, &overlap, known.v, known.n) == 0)
                        for (size_t i = 0; i < holes.n && client; i++) {
                                ZswapSpan *sp = &holes.v[i];
                                if (sp->end - sp->start >= MIN_SPAN && hand_over(sp) == -EEXIST &&
                                    spans_add(&foreign, sp->start, sp->end) == 0)
                                        qsort(foreign.v, foreign.n, sizeof(*foreign.v), span_cmp);
                        }
                free(holes.v);
                qsort(known.v, known.n, sizeof(*known.v), span_cmp);
        }
        /* forget what is no longer mapped; keep it sorted and merged */
        Spans merged = { 0 };
        for (size_t i = 0; i < known.n; i++)
                if (merged.n && merged.v[merged.n - 1].end >= known.v[i].start)
                        merged.v[merged.n - 1].end = MAX(merged.v[merged.n - 1].end, known.v[i].end);
                else
                        spans_add(&merged, known.v[i].start, known.v[i].end);
        if (spans_intersect(&next, &merged, &cand) == 0) {
                free(known.v);
                known = next;
                next = (Spans){ 0 };
        }
        /* what the program's uffd took and then unmapped may be ours again */
        if (given_up.n && spans_intersect(&next, &given_up, &cand) == 0) {
                free(given_up.v);
                given_up = next;
                next = (Spans){ 0 };
        }
        if (foreign.n && spans_intersect(&next, &foreign, &cand) == 0) {
                free(foreign.v);
                foreign = next;
                next = (Spans){ 0 };
        }
        free(merged.v);
out:
        free(cand.v);
        free(fresh.v);
        free(unlocked.v);
        free(locked.v);
        free(next.v);
        free(overlap.v);
}


static uint64_t rss_anon(void) {
        return status_kb("RssAnon") * 1024;
}

/*
 * ZSWAP_LIMIT: the daemon keeps this process's *managed* resident memory
 * under the limit it is given, evicting the coldest pages (its reclaim
 * policies, docs/reclaim.md). The user asked for RssAnon, which also
 * counts what is not managed (the main stack, small and mlocked mappings,
 * pages in the staging area between a move and its release). So each scan
 * hands the daemon the limit minus that part and 256 KiB, never less than
 * a quarter of the limit: again when it fell by 64 KiB or more (what is
 * not managed grew), or rose by 1 MiB or more. Never raised by less, so
 * that the daemon is not asked at every scan; never lowered late, so that
 * RssAnon stays under the limit (a fall of up to 1 MiB left unsent let
 * the unmanaged part take RssAnon over it).
 */
static uint64_t limit_sent;
/* ZSWAP_GROUP: the limit is the group's (every process zswap-run started,
 * a systemd unit's), shared with its other members by the daemon
 * (docs/reclaim.md, "Groups"); this process tells what it holds unmanaged,
 * again when that fell by 1 MiB or rose by 64 KiB */
static char group_name[ZSWAP_GROUP_NAME_MAX];
static uint64_t unmanaged_sent;

static bool limit_nudge; /* scan_wait(): the process grew fast; send, whatever changed */

static void apply_limit(void) {
        struct zswap_stats st;
        uint64_t rss, unmanaged = 0, want;
        bool nudge = limit_nudge;
        int r;

        limit_nudge = false;
        if (!limit_bytes || !client)
                return;
        rss = rss_anon();
        if (limit_sent && zswap_get_stats(client, ZSWAP_STATS_CLIENT, &st) == 0 && rss > st.resident_bytes)
                unmanaged = rss - st.resident_bytes;
        unmanaged += 256u << 10;
        if (group_name[0]) {
                if (limit_sent && !nudge &&
                    (unmanaged > unmanaged_sent ? unmanaged - unmanaged_sent < (64u << 10)
                                                : unmanaged_sent - unmanaged < (1u << 20)))
                        return;
                if ((r = zswap_client_set_group(client, group_name, limit_bytes, unmanaged)) < 0) {
                        say("zswapd refuses the limit of group %s: %s; running without one", group_name,
                            strerror(-r));
                        limit_bytes = 0;
                        return;
                }
                limit_sent = limit_bytes;
                unmanaged_sent = unmanaged;
                return;
        }
        want = limit_bytes > unmanaged + limit_bytes / 4 ? limit_bytes - unmanaged : limit_bytes / 4;
        if (limit_sent && !nudge &&
            (want > limit_sent ? want - limit_sent < (1u << 20) : limit_sent - want < (64u << 10)))
                return;
        if ((r = zswap_set_limit(client, want)) < 0) {
                say("zswapd refuses the limit: %s; running without one", strerror(-r));
                limit_bytes = 0;
                return;
        }
        limit_sent = want;
}

/*
 * Between two scans: until the next is due (scan_ms), a poke of the
 * interposed mmap/mremap comes (then 2 ms for a burst to end), or, under
 * a limit and holding half of it or more, RssAnon has grown by a
 * sixteenth of it since the last scan while over seven eighths of it.
 * A program allocating fast (malloc's own mmap and brk are not
 * interposed) grew past its limit by what it allocated in a whole scan
 * period: now the new memory is handed over, and the daemon asked to
 * count the process at once (limit_nudge), every sixteenth of the limit.
 * 1 GiB in 1 MiB mallocs under --limit 200M peaked at 287-304 MiB
 * (VmHWM), 403-455 MiB before; what is left over is the eviction's pace
 * against the program's. RssAnon is read between scans (every WATCH_MS)
 * only while the process holds half its limit: a service of a hundred
 * processes under one limit (a group) has at most two of them each
 * holding half of it, and a process well under its limit pays nothing.
 */
#define WATCH_MS 10

static void scan_wait(void) {
        struct pollfd p = { .fd = poke_fd, .events = POLLIN };
        uint64_t v, start = now_ns(), rss0 = limit_bytes ? rss_anon() : 0;
        bool watch = limit_bytes && rss0 >= limit_bytes / 2;

        for (;;) {
                uint64_t waited = (now_ns() - start) / 1000000;
                if (waited >= scan_ms)
                        return;
                int ms = watch ? (int)MIN((uint64_t)WATCH_MS, scan_ms - waited) : (int)(scan_ms - waited);
                if (poll(&p, 1, ms) > 0) {
                        (void)!read(poke_fd, &v, sizeof(v));
                        usleep(2000); /* let a burst of mappings finish */
                        return;
                }
                if (!watch)
                        continue;
                uint64_t rss = rss_anon();
                if (rss > limit_bytes - limit_bytes / 8 && rss >= rss0 + limit_bytes / 16) {
                        limit_nudge = true; /* the scan's apply_limit() asks for a count now */
                        return;
                }
        }
}

/* Connect (the scanner, once attach_ms have passed): the new client's
 * descriptors are made while no program thread closes any, and no fork
 * runs meanwhile (connect_prepare()). True: connected. */
static bool attach(void) {
        struct zswap_client *c = NULL;

        pthread_mutex_lock(&connect_lock);
        /* seq_cst, both: our half of closers_enter()'s handshake */
        atomic_store_explicit(&connecting, true, memory_order_seq_cst);
        while (atomic_load_explicit(&closers, memory_order_seq_cst))
                sched_yield(); /* a close under way: it sees `connecting` next time */
        proc_open();
        int r = zswap_connect(NULL, &c);
        if (r == 0) {
                pthread_mutex_lock(&scan_lock);
                client = c;
                pthread_mutex_unlock(&scan_lock);
                atomic_store_explicit(&fds_client, c, memory_order_release);
        } else
                proc_close(); /* no scanner reads them: the program's again */
        /* release: the client's descriptors are made before a closer that
         * reads false (seq_cst, so acquire) goes on. The handshake needs
         * no more: every store of `connecting` is made under connect_lock,
         * so this one happens before the next connect's seq_cst store of
         * true, and a closer's seq_cst load that reads this false is
         * before that store in the single order */
        atomic_store_explicit(&connecting, false, memory_order_release);
        pthread_mutex_unlock(&connect_lock);
        if (r < 0) {
                /* relaxed: a flag on its own, which publishes nothing; a
                 * fork at this moment may see either value whatever the
                 * order */
                atomic_store_explicit(&attach_failed, true, memory_order_relaxed);
                const char *sock = getenv("ZSWAP_SOCKET");
                say("not managing memory: %s (zswapd at %s)%s", strerror(-r), sock && *sock ? sock : ZSWAP_DEFAULT_SOCKET,
                    r == -EPERM ? ": the socket is not served by root (nor $ZSWAP_DAEMON_UID), or zswapd does not "
                                  "admit this user or hands it no /dev/userfaultfd (allow, userfaultfd_device in "
                                  "zswapd.conf(5)); its log says which"
                                : "");
                return false;
        }
        return true;
}

/* A fork child that put off attaching (libzswap's zswap_child_attach())
 * attaches, as attach() connects: no program thread closes a descriptor
 * meanwhile. 0, or why it is not managed (-errno). scanner: called by the
 * scanner, which stops if it fails, and then gives the /proc files up. */
static int child_attach(bool scanner) {
        /* seq_cst, both: as in attach() */
        atomic_store_explicit(&connecting, true, memory_order_seq_cst);
        while (atomic_load_explicit(&closers, memory_order_seq_cst))
                sched_yield();
        proc_open();
        int r = zswap_child_attach(client);
        if (r < 0 && scanner)
                proc_close(); /* the scanner stops: the program's again */
        /* release: as in attach() (the child's new descriptors) */
        atomic_store_explicit(&connecting, false, memory_order_release);
        return r;
}

/* The CPUs the thread that started the scanner may run on: the scanner
 * runs on one of them until it first wakes (scanner_start()). Written
 * before the scanner starts, then the scanner's. */
static cpu_set_t starter_cpus;
static bool starter_cpus_set;

static void scanner_unpin(void) {
        if (starter_cpus_set)
                (void)sched_setaffinity(0, sizeof(starter_cpus), &starter_cpus);
        starter_cpus_set = false;
}

/* Sleep until attach_ms after start (pokes before then change nothing:
 * the first scan sees every mapping); then the scanner may run anywhere
 * the thread that started it could. */
static void attach_wait(uint64_t start_ns) {
        for (;;) {
                uint64_t now = now_ns(), due = start_ns + (uint64_t)attach_ms * 1000000ull;
                if (now >= due) {
                        scanner_unpin();
                        return;
                }
                struct pollfd p = { .fd = poke_fd, .events = POLLIN };
                uint64_t v;
                if (poll(&p, 1, (int)((due - now + 999999) / 1000000)) > 0)
                        (void)!read(poke_fd, &v, sizeof(v));
        }
}

static uint64_t loaded_ns; /* when this process (or fork child) started its scanner */

static void *scanner_main(void *arg) {
        zswap_self = true; /* the library's own work */
        pthread_attr_t a;
        void *stack;
        size_t size;

        (void)arg;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
                if (pthread_attr_getstack(&a, &stack, &size) == 0)
                        scanner_stack = (ZswapSpan){ (uintptr_t)stack, (uintptr_t)stack + size };
                pthread_attr_destroy(&a);
        }
        if (!client) {
                attach_wait(loaded_ns);
                if (!attach())
                        return NULL;
                apply_limit();
        } else if (zswap_child_pending(client)) {
                /* a fork child whose parent held nothing out: it attaches
                 * now, unless it has exec'd or exited meanwhile (a fork
                 * before then attaches in connect_prepare()) */
                attach_wait(loaded_ns);
                pthread_mutex_lock(&connect_lock);
                int r = child_attach(true);
                pthread_mutex_unlock(&connect_lock);
                if (r < 0) {
                        /* the daemon still serves what it holds for us
                         * through the uffd it got; nothing new is handed.
                         * No client: a child of ours connects on its own */
                        say("the fork child could not attach to zswapd (%s): new memory stays unmanaged",
                            strerror(-r));
                        pthread_mutex_lock(&scan_lock);
                        client = NULL;
                        pthread_mutex_unlock(&scan_lock);
                        return NULL;
                }
                apply_limit();
        }
        scanner_unpin(); /* a client from the start: no wait */
        while (client) {
                Spans bss = { 0 };

                if (read_bss(&bss) == 0) {
                        pthread_mutex_lock(&scan_lock);
                        register_new(&bss);
                        pthread_mutex_unlock(&scan_lock);
                }
                free(bss.v);
                apply_limit();
                scan_wait();
        }
        return NULL;
}

/*
 * The scanner starts on the CPU of the thread that starts it, and stays
 * there until it first wakes (attach_wait()). Most processes that load
 * the shim end before then: a shell's commands, a compiler's passes, a
 * fork child that execs. A thread running on another CPU makes each of
 * them pay for it at every change of its page tables and at its exit or
 * exec (a flush of the other CPU's TLB, an interrupt there; dear where
 * the machine is a VM): 1.3 ms more a fork and exit of a process with 64
 * MiB of heap on a 2-vCPU PVM guest, where the same thread on the same
 * CPU costs 0.6 ms (docs/benchmarks.md). Without the pinning (a CPU we
 * cannot name, or one we may not run on) it starts as any thread.
 */
static int scanner_start(void) {
        sigset_t all, old;
        pthread_attr_t at;
        cpu_set_t one;
        pthread_t t;
        int cpu = sched_getcpu(), r;

        pthread_attr_init(&at);
        starter_cpus_set = cpu >= 0 && cpu < CPU_SETSIZE &&
                           sched_getaffinity(0, sizeof(starter_cpus), &starter_cpus) == 0;
        if (starter_cpus_set) {
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                starter_cpus_set = pthread_attr_setaffinity_np(&at, sizeof(one), &one) == 0;
        }
        sigfillset(&all); /* the program's signals go to the program's threads */
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = pthread_create(&t, &at, scanner_main, NULL);
        if (r != 0 && starter_cpus_set) {
                starter_cpus_set = false;
                r = pthread_create(&t, NULL, scanner_main, NULL);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&at);
        if (r == 0)
                pthread_detach(t);
        return -r;
}

/* Runs first in a fork child (registered before libzswap's handlers), so
 * that libzswap's own child handler may close what the child inherited. */
static void atfork_child_first(void) {
        zswap_self = true;
        /* the parent's scanner may have held it at the fork */
        pthread_mutex_init(&scan_lock, NULL);
}

/* Around a fork (registered after libzswap's handlers, so this prepare
 * runs before theirs and this parent handler after theirs): never while
 * the scanner connects, so that libzswap's handlers and ours see the
 * client whole or not at all. */
static void connect_prepare(void) {
        pthread_mutex_lock(&connect_lock);
        /* a child that has not attached yet forks: it attaches first, so
         * that its own child is forked from a client the daemon knows.
         * The library's own work on the program's thread: its close() of
         * what it replaces must not wait for `connecting` (ours) */
        if (client && zswap_child_pending(client)) {
                bool self = zswap_self;
                zswap_self = true;
                (void)child_attach(false);
                zswap_self = self;
        }
}

static void connect_parent(void) {
        pthread_mutex_unlock(&connect_lock);
}

/* The child of a fork: libzswap's own handler has attached the child's
 * client if the parent had one; only our thread is missing. A parent
 * that had not connected yet leaves the child to connect on its own. */
static void atfork_child(void) {
        pthread_mutex_init(&connect_lock, NULL);
        /* relaxed, both: the child has this one thread yet (the scanner
         * it starts below gets what it wrote through pthread_create()) */
        atomic_store_explicit(&closers, 0, memory_order_relaxed);
        proc_close();
        if (poke_fd >= 0 && !atomic_load_explicit(&attach_failed, memory_order_relaxed)) {
                safe_close(poke_fd);
                poke_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                limit_sent = 0;
                loaded_ns = now_ns();
                if (client && !zswap_child_pending(client)) {
                        proc_open(); /* no other thread yet: none closes */
                        apply_limit(); /* the child is a client of its own */
                }
                if (poke_fd < 0 || scanner_start() < 0)
                        say("cannot start the scanner in the child: new memory stays unmanaged");
        }
        zswap_self = false; /* the program's thread again */
}

static bool is_daemon(void) {
        char exe[256];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return false;
        exe[n] = 0;
        const char *base = strrchr(exe, '/');
        return strcmp(base ? base + 1 : exe, "zswapd") == 0;
}

__attribute__((constructor)) static void preload_init(void) {
        int saved = errno;
        const char *v;

        if (is_daemon())
                return; /* the daemon must never wait on a fault of its own */
        if ((v = getenv("ZSWAP_SCAN_MS")) && atoi(v) > 0)
                scan_ms = (unsigned)atoi(v);
        if ((v = getenv("ZSWAP_LIMIT")) && *v && parse_size(v, &limit_bytes) < 0) {
                say("ZSWAP_LIMIT=%s is not a size: no limit", v);
                limit_bytes = 0;
        }
        if ((v = getenv("ZSWAP_GROUP")) && *v) {
                if (zgroup_name_valid(v, sizeof(group_name)))
                        snprintf(group_name, sizeof(group_name), "%s", v);
                else
                        say("ZSWAP_GROUP=%s is not a group name (1-63 of A-Z a-z 0-9 . _ : @ -): the limit is this "
                            "process's alone", v);
        }
        if ((v = getenv("ZSWAP_ATTACH_MS")) && *v)
                attach_ms = (unsigned)MIN(strtoul(v, NULL, 10), 60000ul);
        zswap_self = true;
        pthread_atfork(NULL, NULL, atfork_child_first);
        zswap_atfork_init();
        zswap_child_attach_defer(); /* the scanner attaches fork children */
        pthread_atfork(connect_prepare, connect_parent, atfork_child);
        loaded_ns = now_ns();
        poke_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (attach_ms == 0) {
                /* now, before main() */
                if (!attach())
                        poke_fd = safe_close(poke_fd);
                else
                        apply_limit();
        }
        zswap_self = false;
        if (poke_fd >= 0 && scanner_start() < 0) {
                say("cannot start the scanner: not managing memory");
                pthread_mutex_lock(&scan_lock);
                client = NULL;
                pthread_mutex_unlock(&scan_lock);
        }
        errno = saved;
}
