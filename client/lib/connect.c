/*
 * connect.c: making a client and taking it apart. client_alloc() maps the
 * staging area and a sync page; connect_client() connects to a trusted
 * listener only (sock_connect()), says HELLO, makes our uffd
 * (uffd_create()), starts the agent and ATTACHes; client_free() stops the
 * agent and unmaps and closes what the client holds. The steps a fork
 * child's attach (fork.c) and a recovery (recover.c) repeat are here too:
 * hello(), attach(), staging_register(), store_accept(), sync_new().
 * Called by the thread that connects or disconnects (libzswap.c), a fork
 * child (fork.c) and the agent during a recovery.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "macro.h"
#include "protocol.h"
#include "store.h"
#include "uffd-compat.h"
#include "util.h"

/* Every connection, the first, a fork child's and a recovery's: nothing is
 * sent before the listener proved to be root or the uid we were told to
 * trust (unix_peer_trusted(), common/util.c); -EPERM otherwise. */
int sock_connect(struct zswap_client *c) {
        struct timeval tv = { .tv_sec = 10 };
        int fd = unix_connect_daemon(c->path, c->daemon_uid);

        if (fd < 0)
                return fd;
        /* never hang forever on a daemon that stopped answering */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        return fd;
}

uint32_t zswap_hello_features = ZHELLO_F_STRONG | ZHELLO_F_DICT | ZHELLO_F_SHARED;

/* HELLO; *devfd: the daemon's /dev/userfaultfd descriptor, or -1 when it
 * hands none (userfaultfd_device, zswapd.conf(5); never to a fork child). */
int hello(struct zswap_client *c, uint32_t role, int *devfd) {
        ZMsgHello h = { .role = role, .features = zswap_hello_features };
        int fds[REPLY_FDS];
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        int r = request(c, &h, sizeof(h), NULL, 0, NULL, 0, fds, NULL);
        safe_close(fds[1]);
        safe_close(fds[2]);
        *devfd = fds[0];
        return r;
}

/*
 * A new uffd of this process. Through the daemon's /dev/userfaultfd
 * descriptor if it handed one: that fd is closed here, at once and
 * whatever happens, so that it is never kept past creating the uffd (it
 * would let this process make kernel-mode uffds ever after). Without one,
 * userfaultfd(2), which the kernel allows without UFFD_USER_MODE_ONLY only
 * with vm.unprivileged_userfaultfd = 1 or CAP_SYS_PTRACE: -EPERM
 * otherwise. USER_MODE_ONLY is never used: a system call that touched an
 * evicted page (read(2) into it) would fail with EFAULT instead of waiting
 * for the page.
 */
int uffd_create(int *devfd) {
        int fd, r;

        if (*devfd >= 0)
                fd = ioctl(*devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        else
                fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        r = fd < 0 ? negative_errno() : fd;
        *devfd = safe_close(*devfd);
        return r;
}

/* Register the staging area on our uffd: write-protect mode, never armed,
 * only because UFFDIO_MOVE needs its destination in a range of the uffd it
 * runs on. Needs the daemon's UFFDIO_API handshake done (after ATTACH). */
int staging_register(struct zswap_client *c) {
        struct uffdio_register reg = { .range = { .start = (uintptr_t)c->staging, .len = STAGING_BYTES },
                                       .mode = UFFDIO_REGISTER_MODE_WP };

        /* a read of a slot maps the 4 KiB zero page, never a huge one that
         * would cover other slots */
        madvise(c->staging, STAGING_BYTES, MADV_NOHUGEPAGE);
        if (ioctl(c->uffd, UFFDIO_REGISTER, &reg) < 0)
                return -errno;
        return 0;
}

/* Keep fd as our store if it is one (a sealed memfd of the store's size;
 * what it holds is checked only when it is needed), and shared (-1: none)
 * as its shared store if that is one too. Anything else, or no fd (an
 * older daemon): no store, and no recovery but waiting. */
void store_accept(struct zswap_client *c, int fd, int shared) {
        uint8_t *map;

        if (shared >= 0 && (fd < 0 || store_map(shared, false, &map) < 0))
                shared = safe_close(shared);
        else if (shared >= 0)
                store_unmap(map);
        if (fd < 0)
                return;
        if (store_map(fd, false, &map) < 0) {
                safe_close(fd);
                safe_close(shared);
                return;
        }
        /* the decompression context a restore will need, made now: while
         * restoring we may not allocate (zswap_store_restore(), restore.c) */
        uint32_t codec = store_super(map)->codec;
        store_unmap(map);
        if (codec < ELEMENTSOF(c->dctx) && !c->dctx[codec] && codec_dctx_new_in((CodecKind)codec, &zswap_own_alloc, &c->dctx[codec]) < 0)
                c->dctx[codec] = NULL;
        /* under the lock: the agent reads it (agent_lost) as soon as it
         * runs, which is before an ATTACH is answered */
        pthread_mutex_lock(&c->lock);
        int old = c->store_fd, old_shared = c->shared_fd;
        c->store_fd = fd;
        c->shared_fd = shared;
        pthread_mutex_unlock(&c->lock);
        safe_close(old);
        safe_close(old_shared);
}

int attach(struct zswap_client *c, bool with_uffd) {
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging, .staging_len = STAGING_BYTES };
        int fds[2] = { c->uffd, c->sync_fd }, rfd[REPLY_FDS];
        zmsg_init(&a.hdr, ZMSG_ATTACH, 0, sizeof(a));
        int r = request(c, &a, sizeof(a), with_uffd ? fds : NULL, with_uffd ? 2 : 0, NULL, 0, rfd, NULL);
        /* [our store, its shared store]; a fork child got its store with
         * its uffd (CHILD_ATTACH) */
        if (c->store_fd < 0)
                store_accept(c, rfd[0], rfd[1]);
        else {
                safe_close(rfd[0]);
                safe_close(rfd[1]);
        }
        safe_close(rfd[2]);
        return r;
}

/* A fresh sync page (zsync.h) in place of the current one: sealed against
 * shrinking, since the daemon maps it too and must never fault on a page we
 * took away. A new daemon gets a fresh one, never counters a dead one left
 * raised. The agent, or before it runs. */
int sync_new(struct zswap_client *c) {
        int fd = memfd_create("zswap-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        void *m = MAP_FAILED;

        if (fd >= 0 && ftruncate(fd, ZSWAP_SYNC_SIZE) == 0 &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
                m = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                int r = negative_errno();
                safe_close(fd);
                return r;
        }
        /* the new page in place before the old one goes: a fork() from
         * another thread meanwhile copies a pointer to mapped memory
         * (a child once crashed on the old page, unmapped) */
        ZSync *old = c->sync;
        int old_fd = c->sync_fd;
        /* under lock: zswap_client_regions_gen() reads the page from the
         * shim's scanner */
        pthread_mutex_lock(&c->lock);
        c->sync = m;
        c->sync_fd = fd;
        pthread_mutex_unlock(&c->lock);
        if (old)
                munmap(old, ZSWAP_SYNC_SIZE);
        safe_close(old_fd);
        return 0;
}

bool recovering(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        bool r = c->recovering;
        pthread_mutex_unlock(&c->lock);
        return r;
}

static void agent_join(struct zswap_client *c) {
        /* the agent leaves on EOF; it never blocks on the daemon, but do not
         * hang a program's exit on it if it does */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        if (pthread_timedjoin_np(c->agent, NULL, &ts) == 0)
                c->agent_running = false;
        else if (recovering(c)) {
                /* restoring our pages from the store: as long as that takes */
                pthread_join(c->agent, NULL);
                c->agent_running = false;
        }
}

void client_free(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        c->closing = true; /* an agent looking for a new daemon restores at once */
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&c->send_lock);
        if (c->sock >= 0)
                shutdown(c->sock, SHUT_RDWR);
        pthread_mutex_unlock(&c->send_lock);
        if (c->agent_running) {
                agent_join(c);
                if (c->agent_running) {
                        pthread_detach(c->agent);
                        return; /* leak the client rather than free what the agent uses */
                }
        }
        safe_close(c->sock);
        if (c->staging && c->staging != MAP_FAILED) {
                /* Unregister first: munmap() of a registered range queues
                 * an UNMAP event and waits until somebody reads it, and the
                 * daemon may have stopped reading our uffd already (it does
                 * once the connection is gone). Without the range, the
                 * munmap sends nothing. */
                struct uffdio_range r = { .start = (uintptr_t)c->staging, .len = STAGING_BYTES };
                if (c->uffd >= 0)
                        (void)ioctl(c->uffd, UFFDIO_UNREGISTER, &r);
                munmap(c->staging, STAGING_BYTES);
        }
        if (!c->keep_uffd)
                safe_close(c->uffd);
        safe_close(c->store_fd);
        safe_close(c->shared_fd);
        for (size_t i = 0; i < ELEMENTSOF(c->dctx); i++)
                codec_dctx_free(c->dctx[i]);
        if (c->sync)
                munmap(c->sync, ZSWAP_SYNC_SIZE);
        safe_close(c->sync_fd);
        pthread_mutex_destroy(&c->send_lock);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        zswap_mem_free(c->ranges);
        zswap_mem_free(c);
}

void cond_init_monotonic(pthread_cond_t *cond) {
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(cond, &a);
        pthread_condattr_destroy(&a);
}

/* $ZSWAP_RECONNECT_TIMEOUT: seconds, decimal; unset or not a number: the default. */
static unsigned reconnect_ms_from_env(void) {
        const char *v = getenv("ZSWAP_RECONNECT_TIMEOUT");
        char *end;

        if (!v || !*v)
                return RECONNECT_DEFAULT_MS;
        double sec = strtod(v, &end);
        if (*end || !isfinite(sec) || sec < 0)
                return RECONNECT_DEFAULT_MS;
        return sec * 1000.0 >= (double)UINT32_MAX ? UINT32_MAX : (unsigned)(sec * 1000.0 + 0.5);
}

/* $ZSWAP_RECOVERY_FD: a descriptor number the library writes one line to
 * per recovery (for tests and debugging; the library prints nothing else). */
static int report_fd_from_env(void) {
        const char *v = getenv("ZSWAP_RECOVERY_FD");
        char *end;

        if (!v || !*v)
                return -1;
        long fd = strtol(v, &end, 10);
        return *end || fd < 0 || fd > INT32_MAX || fcntl((int)fd, F_GETFD) < 0 ? -1 : (int)fd;
}

int client_alloc(const char *path, struct zswap_client **ret) {
        struct zswap_client *c = zswap_mem_alloc(sizeof(*c));
        int r;

        if (!c)
                return -ENOMEM;
        c->sock = c->uffd = c->sync_fd = c->store_fd = c->shared_fd = -1;
        c->report_fd = report_fd_from_env();
        c->daemon_uid = daemon_uid_from_env(); /* read once: the agent reconnects with it */
        c->recovery.last_adopt_status = 1;
        atomic_init(&c->reconnect_ms, reconnect_ms_from_env());
        pthread_mutex_init(&c->send_lock, NULL);
        pthread_mutex_init(&c->lock, NULL);
        cond_init_monotonic(&c->cond);
        snprintf(c->path, sizeof(c->path), "%s", path);
        c->staging = mmap(NULL, STAGING_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c->staging == MAP_FAILED) {
                c->staging = NULL;
                client_free(c);
                return -ENOMEM;
        }
        r = sync_new(c);
        if (r < 0) {
                client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

static int connect_steps(struct zswap_client *c) {
        int devfd = -1, r;

        c->sock = sock_connect(c);
        if (c->sock < 0)
                return c->sock;
        r = hello(c, ZROLE_CLIENT, &devfd);
        if (r < 0) {
                safe_close(devfd);
                return r;
        }
        r = uffd_create(&devfd);
        if (r < 0)
                return r;
        c->uffd = r;
        r = agent_start(c);
        if (r < 0)
                return r;
        r = attach(c, true);
        if (r < 0)
                return r;
        /* the daemon moves nothing before our first PAGEOUT, which can only
         * come after this */
        return staging_register(c);
}

/* The agent runs from before ATTACH: a daemon that dies as it answers it
 * is gone before we took the store from the reply. The agent waits for us
 * (agent_lost()) until we have it, or know we have not. */
int connect_client(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        c->connecting = true;
        pthread_mutex_unlock(&c->lock);
        int r = connect_steps(c);
        pthread_mutex_lock(&c->lock);
        c->connecting = false;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return r;
}
