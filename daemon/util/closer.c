/*
 * closer.c: closing descriptors a client chose, off the manager thread.
 *
 * The last close of a file runs its release, and some releases wait on
 * whatever is at the other end: a TCP socket with unsent data and
 * SO_LINGER waits up to the linger time, a FUSE file for its server's
 * answer to FLUSH, a tty for its output to drain. Every descriptor that
 * comes with a message is a client's choice, and so is every descriptor
 * still queued on a connection the daemon closes (the kernel drops those
 * in the closing thread), and every descriptor queued inside a socket the
 * client sent (dropped when that socket goes). If the manager closed such
 * a file itself, any local user could stop it for as long as it likes.
 *
 * A userfaultfd is such a file too: the release of its last reference
 * takes the mmap lock of the address space it serves for writing, and a
 * process can hold its own lock for as long as a FUSE server of its own
 * lets it (docs/security.md). The library keeps a copy of its uffd, but
 * a hostile process closes its copy first, and the daemon holds the only
 * reference to a fork child's.
 *
 * So the manager closes inline only what cannot wait (fd_close_is_safe():
 * the anonymous inodes other than userfaultfds, pidfds, memfds and tmpfs
 * files, pipes that the protocol carries), and hands anything else to the
 * closer threads. The handlers see only what fd_may_be_kept() takes (a
 * userfaultfd for ATTACH; its close is always handed over, mmclient.c),
 * so nothing of another kind is ever kept. A connection is shut for
 * reading and drained before its socket is closed (closer_close_conn()):
 * after shutdown(SHUT_RD) the peer's sends fail with EPIPE, so once the
 * queue reads empty nothing can be left in it.
 *
 * A close may take as long as the client makes it. A user's descriptors
 * are closed one at a time, each by one of up to CLOSER_THREADS threads,
 * started as they are needed (a user's descriptor waits and every thread
 * is closing another user's): a user whose close waits holds one thread,
 * and other users' closes go on on the others. What waits is counted per
 * user: a user with CLOSER_USER_MAX waiting has its connections dropped
 * and new ones refused (manager.c), so what one user can make the daemon
 * hold is bounded, and it costs no other user anything until
 * CLOSER_THREADS users hold one each.
 *
 * Threads: closer_drop(), closer_close_conn() on the manager thread,
 * closer_hand() and closer_release() on any; closer_pending() anywhere;
 * the closer threads take and close. `lock` guards the queue, the per-user counts and who is
 * closing for whom, and is held by nobody while a close runs.
 */
#include <errno.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "closer.h"
#include "log.h"
#include "macro.h"
#include "protocol.h"
#include "util.h"

#ifndef PID_FS_MAGIC
#define PID_FS_MAGIC 0x50494446 /* pidfs, Linux 6.9 */
#endif

#define CLOSER_USERS 64 /* users with descriptors waiting at once */

typedef struct CloseItem {
        int fd;
        uid_t uid;
        bool counted; /* in users[] */
        struct CloseItem *next;
} CloseItem;

struct Closer {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        CloseItem *head, **tail; /* lock */
        bool stop;               /* lock */
        unsigned nthreads, idle; /* lock: threads started, and of them waiting for an item */
        pthread_t threads[CLOSER_THREADS];
        /* lock: the user each thread is closing a descriptor of, while it
         * is (a user's descriptors are closed one at a time) */
        struct {
                uid_t uid;
                bool busy;
        } closing[CLOSER_THREADS];
        struct {
                uid_t uid;
                unsigned n; /* 0: a free slot */
        } users[CLOSER_USERS];    /* lock */
};

static bool fd_kind_safe(int fd) {
        struct statfs sf;

        if (fd < 0 || fstatfs(fd, &sf) < 0)
                return false;
        switch ((unsigned long)sf.f_type) {
        case ANON_INODE_FS_MAGIC: /* eventfd, epoll, userfaultfd (fd_close_is_safe()), ... */
        case PID_FS_MAGIC:
        case TMPFS_MAGIC:         /* memfd, /dev/shm */
        case HUGETLBFS_MAGIC:
        case PIPEFS_MAGIC:
                return true;
        default:
                return false;
        }
}

/* A userfaultfd: the release of its last reference takes the mmap lock of
 * the address space it serves for writing (mm/userfaultfd.c
 * userfaultfd_release_all()) while that address space lives, and its
 * process can hold that lock as long as it likes (docs/security.md). One
 * whose kind cannot be told is taken for one. */
bool fd_close_is_safe(int fd) {
        return fd_kind_safe(fd) && fd_is_userfaultfd(fd) == 0;
}

bool fd_may_be_kept(int fd) {
        return fd_kind_safe(fd);
}

/* lock held; the slot of uid, or a free one if add */
static unsigned *user_count(Closer *cl, uid_t uid, bool add) {
        for (unsigned i = 0; i < CLOSER_USERS; i++)
                if (cl->users[i].n && cl->users[i].uid == uid)
                        return &cl->users[i].n;
        for (unsigned i = 0; add && i < CLOSER_USERS; i++)
                if (!cl->users[i].n) {
                        cl->users[i].uid = uid;
                        return &cl->users[i].n;
                }
        return NULL;
}

/* lock held: is a thread closing a descriptor of uid? */
static bool user_closing(const Closer *cl, uid_t uid) {
        for (unsigned i = 0; i < cl->nthreads; i++)
                if (cl->closing[i].busy && cl->closing[i].uid == uid)
                        return true;
        return false;
}

/* lock held: take the first item of a user no thread is closing for */
static CloseItem *take(Closer *cl) {
        for (CloseItem **p = &cl->head; *p; p = &(*p)->next) {
                CloseItem *it = *p;
                if (user_closing(cl, it->uid))
                        continue;
                *p = it->next;
                if (!*p)
                        cl->tail = p;
                it->next = NULL;
                return it;
        }
        return NULL;
}

typedef struct CloserThread {
        Closer *cl;
        unsigned idx;
} CloserThread;

static void *closer_main(void *arg) {
        Closer *cl = ((CloserThread *)arg)->cl;
        unsigned idx = ((CloserThread *)arg)->idx;

        free(arg);
        pthread_setname_np(pthread_self(), "zswapd-closer");
        pthread_mutex_lock(&cl->lock);
        for (;;) { /* counted idle (closer_start()) while it looks */
                CloseItem *it;
                while (!(it = take(cl)) && !(cl->stop && !cl->head))
                        pthread_cond_wait(&cl->cond, &cl->lock);
                cl->idle--;
                if (!it)
                        break;
                cl->closing[idx].uid = it->uid;
                cl->closing[idx].busy = true;
                pthread_mutex_unlock(&cl->lock);
                close(it->fd); /* may wait as long as the client makes it */
                pthread_mutex_lock(&cl->lock);
                cl->closing[idx].busy = false;
                unsigned *n = it->counted ? user_count(cl, it->uid, false) : NULL;
                if (n)
                        (*n)--;
                free(it);
                cl->idle++;
                /* that user's next descriptor may be taken now */
                pthread_cond_broadcast(&cl->cond);
        }
        pthread_mutex_unlock(&cl->lock);
        return NULL;
}

/* lock held: the users with a descriptor waiting that no thread is
 * closing for, each counted once (its first item) */
static unsigned users_waiting(const Closer *cl) {
        unsigned n = 0;

        for (const CloseItem *it = cl->head; it; it = it->next) {
                bool first = !user_closing(cl, it->uid);
                for (const CloseItem *o = cl->head; first && o != it; o = o->next)
                        first = o->uid != it->uid;
                n += first;
        }
        return n;
}

/* lock held: start a thread, counted as waiting for an item from now */
static bool closer_start(Closer *cl) {
        CloserThread *t = malloc(sizeof(*t));
        if (!t)
                return false;
        *t = (CloserThread){ .cl = cl, .idx = cl->nthreads };
        if (pthread_create(&cl->threads[cl->nthreads], NULL, closer_main, t) != 0) {
                free(t);
                if (!cl->nthreads)
                        log_error("cannot start a thread to close descriptors clients sent: %m");
                return false;
        }
        cl->nthreads++;
        cl->idle++;
        return true;
}

/* lock held: threads enough for the users waiting, up to CLOSER_THREADS;
 * at least one. A thread woken but not yet running counts as waiting for
 * an item (idle), so one item each is what they will take. A thread that
 * cannot be started leaves the items to the threads there are. */
static void closer_grow(Closer *cl) {
        while (cl->nthreads < CLOSER_THREADS && (!cl->nthreads || users_waiting(cl) > cl->idle))
                if (!closer_start(cl))
                        return;
}

int closer_new(Closer **ret) {
        Closer *cl = calloc(1, sizeof(*cl));

        if (!cl)
                return -ENOMEM;
        pthread_mutex_init(&cl->lock, NULL);
        pthread_cond_init(&cl->cond, NULL);
        cl->tail = &cl->head;
        pthread_mutex_lock(&cl->lock);
        closer_grow(cl);
        unsigned started = cl->nthreads;
        pthread_mutex_unlock(&cl->lock);
        if (!started) {
                closer_free(cl);
                return -EAGAIN;
        }
        *ret = cl;
        return 0;
}

/* lock held: nothing queued or being closed */
static bool closer_idle(const Closer *cl) {
        bool idle = !cl->head;
        for (unsigned i = 0; i < CLOSER_USERS; i++)
                idle &= cl->users[i].n == 0;
        for (unsigned i = 0; i < cl->nthreads; i++)
                idle &= !cl->closing[i].busy;
        return idle;
}

/* At exit: what was handed over last (the uffds of the clients let go on
 * the way out) is given CLOSER_EXIT_WAIT_MS to close. A close still
 * waiting then would hold the daemon's exit, so the threads are only
 * joined once nothing is queued or being closed; otherwise they are left
 * to the process's exit, which ends them. */
#define CLOSER_EXIT_WAIT_MS 2000

Closer *closer_free(Closer *cl) {
        struct timespec until;

        if (!cl)
                return NULL;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += CLOSER_EXIT_WAIT_MS / 1000;
        pthread_mutex_lock(&cl->lock);
        cl->stop = true;
        pthread_cond_broadcast(&cl->cond);
        while (!closer_idle(cl) && pthread_cond_timedwait(&cl->cond, &cl->lock, &until) == 0)
                ;
        bool idle = closer_idle(cl);
        unsigned n = cl->nthreads;
        pthread_cond_broadcast(&cl->cond);
        pthread_mutex_unlock(&cl->lock);
        if (!idle) {
                log_warn("exiting with descriptors a client sent still being closed");
                return NULL; /* the threads still use cl: leaked on purpose */
        }
        for (unsigned i = 0; i < n; i++)
                pthread_join(cl->threads[i], NULL);
        pthread_mutex_destroy(&cl->lock);
        pthread_cond_destroy(&cl->cond);
        free(cl);
        return NULL;
}

int closer_drop(Closer *cl, int fd, uid_t uid) {
        if (fd < 0)
                return -1;
        if (fd_close_is_safe(fd) || !cl) {
                close(fd);
                return -1;
        }
        return closer_hand(cl, fd, uid);
}

static int closer_queue(Closer *cl, int fd, uid_t uid, bool count) {
        if (fd < 0)
                return -1;
        CloseItem *it = malloc(sizeof(*it));
        if (!it) {
                /* keep the manager from waiting anyway, at the cost of
                 * this descriptor */
                log_error("uid %u: a descriptor of its cannot be queued for closing: left open", (unsigned)uid);
                return -1;
        }
        pthread_mutex_lock(&cl->lock);
        unsigned *n = count ? user_count(cl, uid, true) : NULL;
        if (n)
                (*n)++;
        else if (count) /* CLOSER_USERS users at once: closed, but not counted */
                log_warn("uid %u: a descriptor it sent waits to be closed, uncounted", (unsigned)uid);
        *it = (CloseItem){ .fd = fd, .uid = uid, .counted = n != NULL };
        *cl->tail = it;
        cl->tail = &it->next;
        closer_grow(cl);
        pthread_cond_broadcast(&cl->cond);
        pthread_mutex_unlock(&cl->lock);
        return -1;
}

int closer_hand(Closer *cl, int fd, uid_t uid) {
        return closer_queue(cl, fd, uid, true);
}

int closer_release(Closer *cl, int fd, uid_t uid) {
        return closer_queue(cl, fd, uid, false);
}

unsigned closer_pending(Closer *cl, uid_t uid) {
        if (!cl)
                return 0;
        pthread_mutex_lock(&cl->lock);
        unsigned *n = user_count(cl, uid, false);
        unsigned r = n ? *n : 0;
        pthread_mutex_unlock(&cl->lock);
        return r;
}

int closer_close_conn(Closer *cl, int fd, uid_t uid) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX + 8];

        if (fd < 0)
                return -1;
        (void)shutdown(fd, SHUT_RD);
        for (;;) {
                int fds[ZMSG_FDS_MAX];
                size_t nfds = ELEMENTSOF(fds);
                ssize_t n = zmsg_recv_all(fd, buf, sizeof(buf), fds, &nfds, NULL);
                for (size_t i = 0; i < nfds; i++)
                        closer_drop(cl, fds[i], uid);
                if (n == 0 || (n < 0 && n != -EMSGSIZE))
                        break;
        }
        close(fd);
        return -1;
}
