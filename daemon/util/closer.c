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
 * So the manager closes inline only what cannot wait (fd_close_is_safe():
 * the anonymous inodes, pidfds, memfds and tmpfs files, pipes that the
 * protocol carries), and hands anything else to one closer thread. The
 * handlers never see such a descriptor at all (conn_readable()), so
 * nothing of another kind is ever kept. A connection is shut for reading
 * and drained before its socket is closed (closer_close_conn()): after
 * shutdown(SHUT_RD) the peer's sends fail with EPIPE, so once the queue
 * reads empty nothing can be left in it.
 *
 * A close in the closer thread may take as long as the client makes it;
 * only descriptors that a client sent wait behind it, and honest clients
 * send none. What waits is counted per user: a user with CLOSER_USER_MAX
 * waiting has its connections dropped and new ones refused (manager.c),
 * so what one user can make the daemon hold is bounded, and it costs no
 * other user anything.
 *
 * Threads: closer_drop(), closer_close_conn() on the manager thread,
 * closer_hand() on any;
 * closer_pending() anywhere; the closer thread pops and closes. `lock`
 * guards the queue and the per-user counts, and is held by nobody while
 * a close runs.
 */
#include <errno.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "closer.h"
#include "log.h"
#include "macro.h"
#include "protocol.h"

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
        pthread_t thread;
        bool started;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        CloseItem *head, **tail; /* lock */
        bool stop;               /* lock */
        struct {
                uid_t uid;
                unsigned n; /* 0: a free slot */
        } users[CLOSER_USERS];    /* lock */
};

bool fd_close_is_safe(int fd) {
        struct statfs sf;

        if (fd < 0 || fstatfs(fd, &sf) < 0)
                return false;
        switch ((unsigned long)sf.f_type) {
        case ANON_INODE_FS_MAGIC: /* userfaultfd, eventfd, epoll, ... */
        case PID_FS_MAGIC:
        case TMPFS_MAGIC:         /* memfd, /dev/shm */
        case HUGETLBFS_MAGIC:
        case PIPEFS_MAGIC:
                return true;
        default:
                return false;
        }
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

static void *closer_main(void *arg) {
        Closer *cl = arg;

        pthread_setname_np(pthread_self(), "zswapd-closer");
        pthread_mutex_lock(&cl->lock);
        for (;;) {
                while (!cl->head && !cl->stop)
                        pthread_cond_wait(&cl->cond, &cl->lock);
                CloseItem *it = cl->head;
                if (!it)
                        break;
                cl->head = it->next;
                if (!cl->head)
                        cl->tail = &cl->head;
                pthread_mutex_unlock(&cl->lock);
                close(it->fd); /* may wait as long as the client makes it */
                pthread_mutex_lock(&cl->lock);
                unsigned *n = it->counted ? user_count(cl, it->uid, false) : NULL;
                if (n)
                        (*n)--;
                free(it);
        }
        pthread_mutex_unlock(&cl->lock);
        return NULL;
}

int closer_new(Closer **ret) {
        Closer *cl = calloc(1, sizeof(*cl));
        int r;

        if (!cl)
                return -ENOMEM;
        pthread_mutex_init(&cl->lock, NULL);
        pthread_cond_init(&cl->cond, NULL);
        cl->tail = &cl->head;
        r = -pthread_create(&cl->thread, NULL, closer_main, cl);
        if (r < 0) {
                closer_free(cl);
                return r;
        }
        cl->started = true;
        *ret = cl;
        return 0;
}

/* At exit: a close still waiting would hold the daemon's exit, so the
 * thread is only joined once its queue is empty; otherwise it is left to
 * the process's exit, which ends it. */
Closer *closer_free(Closer *cl) {
        if (!cl)
                return NULL;
        if (!cl->started) {
                free(cl);
                return NULL;
        }
        pthread_mutex_lock(&cl->lock);
        cl->stop = true;
        bool idle = !cl->head;
        for (unsigned i = 0; i < CLOSER_USERS; i++)
                idle &= cl->users[i].n == 0;
        pthread_cond_signal(&cl->cond);
        pthread_mutex_unlock(&cl->lock);
        if (!idle) {
                log_warn("exiting with descriptors a client sent still being closed");
                return NULL; /* the thread still uses cl: leaked on purpose */
        }
        pthread_join(cl->thread, NULL);
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

int closer_hand(Closer *cl, int fd, uid_t uid) {
        if (fd < 0)
                return -1;
        CloseItem *it = malloc(sizeof(*it));
        if (!it) {
                /* keep the manager from waiting anyway, at the cost of
                 * this descriptor */
                log_error("uid %u: a descriptor it sent cannot be queued for closing: left open", (unsigned)uid);
                return -1;
        }
        pthread_mutex_lock(&cl->lock);
        unsigned *n = user_count(cl, uid, true);
        if (n)
                (*n)++;
        else /* CLOSER_USERS users at once: closed, but not counted */
                log_warn("uid %u: a descriptor it sent waits to be closed, uncounted", (unsigned)uid);
        *it = (CloseItem){ .fd = fd, .uid = uid, .counted = n != NULL };
        *cl->tail = it;
        cl->tail = &it->next;
        pthread_cond_signal(&cl->cond);
        pthread_mutex_unlock(&cl->lock);
        return -1;
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
