/*
 * fork.c: fork() of a process with clients. The pthread_atfork handlers
 * (installed once, zswap_atfork_init()): atfork_prepare() takes
 * clients_lock, draws a new fork token and sends each client's daemon
 * FORK_PREPARE, answered once no page of ours is in flight, so none is
 * half-way between us and the daemon when the address space is copied;
 * atfork_parent() says FORK_DONE and lets go of the lock. In the child,
 * atfork_child() makes each client's locks and state anew and reconnects
 * it (child_reconnect(): CHILD_ATTACH with the token, taking over the uffd
 * the daemon got from the fork event, and a new agent), or puts that off
 * (zswap_child_attach_defer()), or, if the daemon died in the fork, writes
 * the parent's evicted pages back from its store or kills the child
 * (child_lost()). Runs on the forking thread (prepare, parent), the
 * child's one thread (child), and the preload's scanner
 * (zswap_child_attach()).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "macro.h"
#include "protocol.h"
#include "store.h"
#include "util.h"

/* A fresh random value before each fork (fork_token_new()); FORK_PREPARE
 * (and ADOPT, recover.c) tell the daemon, the child names it to claim its
 * address space. Once the parent has exited, the token is all that tells a
 * child apart from another process of the same user (do_child_attach() in
 * daemon/manager.c), so it must not be guessable: never a counter. Written
 * under clients_lock by atfork_prepare() only; read by the child
 * (atfork_child(), child_lost()) and by the agent's adopt() without it. */
volatile uint64_t fork_token;

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);
static int child_attach_now(struct zswap_client *c);

static void atfork_install(void) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* pthread_once() guards it: the handlers are installed once per process */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

void zswap_atfork_init(void) {
        pthread_once(&atfork_once, atfork_install);
}

/* 64 random bits, never 0 (the daemon's "no token") nor the last one.
 * getrandom() blocks only until the kernel's generator is seeded at boot;
 * should it fail anyway (a seccomp filter, say), the clock and pid are
 * mixed in: unique, but guessable, which only matters once the parent is
 * gone. */
static uint64_t fork_token_new(uint64_t last) {
        uint64_t t = 0;
        ssize_t n;

        do
                n = getrandom(&t, sizeof(t), 0);
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(t)) {
                t = now_ns() ^ ((uint64_t)getpid() << 32) ^ last;
                t = (t ^ (t >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finish */
                t = (t ^ (t >> 27)) * 0x94d049bb133111ebull;
                t ^= t >> 31;
        }
        return t == 0 || t == last ? ~last | 1 : t;
}

uint64_t zswap_fork_token_last(void) {
        return fork_token;
}

static void atfork_prepare(void) {
        pthread_mutex_lock(&clients_lock);
        /* a child that has not attached yet forks: it attaches now, so
         * that its own child is forked from a client the daemon knows */
        for (struct zswap_client *c = clients; c; c = c->next_client)
                if (c->child_pending)
                        child_attach_now(c);
        fork_token = fork_token_new(fork_token);
        for (struct zswap_client *c = clients; c; c = c->next_client) {
                ZMsgFork h = { .token = fork_token };
                int64_t held = 0;
                /* While the agent looks for a new daemon, the fork waits for
                 * the outcome (it would wait in the kernel anyway, until
                 * somebody reads its event): only a daemon that got our
                 * FORK_PREPARE knows the token the child will name. The
                 * agent never takes clients_lock. */
                uint64_t gen;
                int r;
                for (int tries = 0;; tries++) {
                        pthread_mutex_lock(&c->lock);
                        while (c->recovering)
                                pthread_cond_wait(&c->cond, &c->lock);
                        gen = c->gen;
                        bool dead = c->dead;
                        pthread_mutex_unlock(&c->lock);
                        zmsg_init(&h.hdr, ZMSG_FORK_PREPARE, 0, sizeof(h));
                        /* waits until no page of ours is in flight; a dead
                         * daemon answers at once with ENOTCONN, a stuck one
                         * times out */
                        r = request_timed(c, &h, sizeof(h), NULL, 0, NULL, 0, NULL, &held, 10);
                        if (r != -ENOTCONN || dead || tries == 2)
                                break;
                        /* the daemon died before it answered (pages of ours
                         * may have been in flight): to the next one, once
                         * the agent has seen the loss (a second at most) and
                         * found it; a child can restore itself only from a
                         * store whose daemon the fork was announced to */
                        struct timespec until;
                        clock_gettime(CLOCK_MONOTONIC, &until);
                        until.tv_sec += 1;
                        pthread_mutex_lock(&c->lock);
                        while (c->gen == gen && !c->dead &&
                               pthread_cond_timedwait(&c->cond, &c->lock, &until) != ETIMEDOUT)
                                ;
                        bool seen = c->gen != gen;
                        pthread_mutex_unlock(&c->lock);
                        if (!seen)
                                break;
                }
                /* answered: its daemon wrote our token into its store
                 * before it answered, whatever happened to it since */
                pthread_mutex_lock(&c->lock);
                c->fork_ok = r == 0;
                c->fork_held = r == 0 && held > 0 ? held : 0;
                pthread_mutex_unlock(&c->lock);
        }
}

static void atfork_parent(void) {
        for (struct zswap_client *c = clients; c; c = c->next_client) {
                ZMsgHeader h;
                zmsg_init(&h, ZMSG_FORK_DONE, new_id(c), sizeof(h));
                /* only to a live connection: a daemon that took over since
                 * never got our FORK_PREPARE */
                pthread_mutex_lock(&c->send_lock);
                pthread_mutex_lock(&c->lock);
                bool live = !c->dead && !c->recovering;
                pthread_mutex_unlock(&c->lock);
                if (live)
                        zmsg_send(c->sock, &h, sizeof(h), NULL, 0);
                pthread_mutex_unlock(&c->send_lock);
        }
        pthread_mutex_unlock(&clients_lock);
}

static bool ranges_registered(struct zswap_client *c);

/* In the child: take over the address space the daemon tracks for us. */
static int child_reconnect(struct zswap_client *c) {
        ZMsgChild ch = { .fork_token = c->child_token,
                         .staging_addr = (uintptr_t)c->staging };
        int devfd = -1, r;

        c->sock = sock_connect(c);
        if (c->sock < 0)
                return c->sock;
        r = hello(c, ZROLE_CHILD, &devfd);
        /* our uffd comes from the fork event: a device an older daemon
         * hands a child too is never needed, closed at once */
        safe_close(devfd);
        if (r < 0)
                return r;
        /* a sync page of our own (zsync.h), given with the attach: the one
         * we inherited is the parent's, and the parent may have replaced
         * it (a recovery) after the daemon read our fork event with the
         * old one, or around our fork */
        if (sync_new(c) < 0) {
                pthread_mutex_lock(&c->lock);
                c->sync = NULL; /* no handshake rather than a page we may not have */
                pthread_mutex_unlock(&c->lock);
                c->sync_fd = safe_close(c->sync_fd);
        }
        /* the daemon may still be handling the fork event that created our
         * address space (it copies what the parent had evicted): up to 5 s */
        for (int i = 0; i < 1000; i++) {
                int rfd[REPLY_FDS];
                zmsg_init(&ch.hdr, ZMSG_CHILD_ATTACH, 0, sizeof(ch));
                r = request(c, &ch, sizeof(ch), &c->sync_fd, c->sync_fd >= 0 ? 1 : 0, NULL, 0, rfd, NULL);
                /* [our uffd, our store, its shared store]; an older daemon
                 * sends no store */
                c->uffd = rfd[0];
                store_accept(c, rfd[1], rfd[2]);
                if (r != -ESRCH)
                        break;
                /* a daemon that does not know us, and our memory no longer
                 * registered: our uffd went with the daemon that read our
                 * fork event, and no daemon will ever know us */
                if (i % 10 == 9 && !ranges_registered(c))
                        break;
                usleep(5000);
        }
        if (r == 0 && c->uffd < 0)
                r = -EPROTO;
        if (r < 0)
                return r;
        /* the staging area came with the fork, registered on our new uffd,
         * with whatever the parent had in it: free that first */
        staging_free(c, 0, STAGING_BYTES);
        r = staging_register(c);
        if (r < 0)
                return r;
        r = agent_start(c);
        if (r < 0)
                return r;
        return attach(c, false);
}

static int held_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        unsigned st = pe_state(atomic_load_explicit(e, memory_order_relaxed));
        return st == PE_STORED || st == PE_SAME || st == PE_MOVING || st == PE_STAGED || st == PE_LOADING;
}

/* Did the parent's store (inherited) hold pages out of memory? Those are
 * missing in our address space too. */
static bool parent_held_pages(int store_fd) {
        uint8_t *map;
        bool held = false;

        if (store_fd < 0)
                return false;
        /* a descriptor we do not have (the agent received it between the
         * fork's copy of our descriptors and its copy of our memory), or
         * not a store: it may have held pages, which we cannot tell */
        if (store_map(store_fd, false, &map) < 0)
                return true;
        if (store_check(map, NULL, 0) == 0)
                held = store_walk(map, held_cb, NULL) == 1;
        store_unmap(map);
        return held;
}

/* The daemon at the other end of the connection we inherited: most likely
 * the one that read our fork event and holds our uffd. A pidfd, or -1. */
static int peer_pidfd(int sock) {
        struct ucred cr;
        socklen_t len = sizeof(cr);

        if (sock < 0 || getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.pid <= 0)
                return -1;
        return (int)syscall(SYS_pidfd_open, cr.pid, 0);
}

/* Does somebody still hold our uffd (and serve our faults)? When its last
 * reference goes the kernel unregisters every range of it at once, so one
 * range still registered ("um" in VmFlags, or "uw" for a range registered
 * for write-protect faults only), or the staging area ("uw"), says so. One is enough:
 * our list of ranges does not follow mremap(), and may name a place a
 * range left (a child whose live daemon was still copying its pages gave
 * up attaching, took that for its memory unregistered, and was killed). */
static bool ranges_registered(struct zswap_client *c) {
        uint64_t lo = 0, hi = 0, staging = (uintptr_t)c->staging;
        char line[512];
        bool ok = false;

        if (c->nranges == 0 && !c->staging)
                return true;
        FILE *f = fopen("/proc/self/smaps", "re");
        if (!f)
                return true; /* cannot tell: do not kill on a guess */
        while (!ok && fgets(line, sizeof(line), f)) {
                unsigned long long s, e;
                if (sscanf(line, "%llx-%llx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' ')) {
                        lo = s;
                        hi = e;
                        continue;
                }
                if (strncmp(line, "VmFlags:", 8))
                        continue;
                /* missing faults (armed) or write-protect ones alone
                 * (never evicted from: daemon/mm/mmclient.c) */
                if (vmflags_uffd_registered(line))
                        for (size_t i = 0; i < c->nranges && !ok; i++)
                                ok = c->ranges[i].addr >= lo && c->ranges[i].addr < hi;
                /* the staging area: registered for write-protect faults */
                if (staging && staging >= lo && staging < hi && vmflags_uffd_registered(line))
                        ok = true;
        }
        fclose(f);
        return ok;
}

/*
 * A fork whose daemon died before we held our own uffd: the kernel gave
 * the only reference to that daemon, so when it died it unregistered our
 * memory, and the pages the parent had evicted at the fork are missing
 * from our address space (they would read as zeros). The daemon kept the
 * parent's store, which we inherited, as it was at the fork until we
 * attached (daemon/fault/fork.c, fork_held()): we write those pages back in
 * place from it (zswap_store_restore_forked()) and carry on unmanaged.
 * That store is as it was at the fork only if our fork was announced
 * (FORK_PREPARE answered: announced) and the store names it: its daemon
 * answered that FORK_PREPARE, or adopted the parent between the answer
 * and the fork and took the fork as announced to itself (daemon/manager.c
 * do_adopt(): it evicted nothing until the fork was done). A daemon that
 * took the parent over otherwise may have evicted into a store we do not
 * hold. If the daemon died before it answered, the FORK_PREPARE went to
 * the next (atfork_prepare()). Only if that cannot be done
 * (not announced so, the daemon served the parent again after waiting for
 * us too long, a page was on its second tier, the store is broken) is the
 * loss never let pass silently: we say so and die, as a
 * process whose memory the kernel could not give back would. The test is
 * on our own memory, once that daemon is surely gone (its pidfd, up to
 * 2 s): a range no longer registered while the parent held pages at the
 * fork (held, looked at before we tried to attach). A daemon that is
 * alive still serves us through the uffd it holds, whatever else failed.
 */
static void child_lost(struct zswap_client *c, bool held, bool announced, int daemon_pidfd, int parent_store,
                       int parent_shared) {
        static const char msg[] = "libzswap: zswapd died while this process was being forked; "
                                  "the memory it held for the parent is lost to the child: killing it\n";
        struct pollfd p = { .fd = daemon_pidfd, .events = POLLIN };
        ZswapRestoreStats st = { 0 };
        char line[256];

        if (!held)
                return;
        if (daemon_pidfd >= 0)
                (void)poll(&p, 1, 2000);
        if (ranges_registered(c))
                return;
        /* any address the store names (our list of ranges does not follow
         * mremap(), the store does): only anonymous memory with nothing in
         * place is written */
        static const ZswapSpan all = { 0, PINDEX_MAX_ADDR };
        int r = !announced ? -ESTALE
                           : zswap_store_restore_forked(parent_store, parent_shared, c->dctx, fork_token,
                                                        (uintptr_t)c->staging,
                                                        STAGING_BYTES, &all, 1, &st);
        if (r == 0) {
                int n = snprintf(line, sizeof(line),
                                 "libzswap: zswapd died while this process was being forked; the %llu pages it "
                                 "held for the parent were written back from the parent's store: running unmanaged\n",
                                 (unsigned long long)st.restored);
                (void)!write(STDERR_FILENO, line, (size_t)MIN(n, (int)sizeof(line) - 1));
                return;
        }
        (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
        raise(SIGKILL);
}

/* The child's attach failed: it carries on unmanaged, and the daemon still
 * serves the pages it holds for us through the uffd it got. Before our
 * agent runs the connection is ours to close. Once it runs (only ATTACH,
 * the last step, failed) the connection is the agent's: closed under it,
 * its recvmsg() would go on reading the old socket, and its next one
 * whatever file the program opens under that number. It is shut down
 * instead; the agent sees it end and recovers or leaves as when a daemon
 * goes (agent_main()), and marks the client dead itself. */
static void child_unmanaged(struct zswap_client *c) {
        if (c->agent_running) {
                pthread_mutex_lock(&c->send_lock);
                shutdown(c->sock, SHUT_RDWR);
                pthread_mutex_unlock(&c->send_lock);
                return;
        }
        c->sock = safe_close(c->sock);
        c->dead = true;
}

/* A child that put off attaching (child_pending) attaches. Under
 * clients_lock; 0, or the error that leaves it unmanaged: the daemon
 * still serves what it holds through the uffd it got. */
static int child_attach_now(struct zswap_client *c) {
        int r;

        c->child_pending = false;
        c->dead = false;
        r = child_reconnect(c);
        if (r < 0)
                child_unmanaged(c);
        return r;
}

/* zswap_child_attach_defer() was called: written by it under clients_lock,
 * read by atfork_child() (clients_lock held since atfork_prepare()). */
static bool child_attach_deferred;

void zswap_child_attach_defer(void) {
        pthread_mutex_lock(&clients_lock);
        child_attach_deferred = true;
        pthread_mutex_unlock(&clients_lock);
}

bool zswap_child_pending(struct zswap_client *c) {
        pthread_mutex_lock(&clients_lock);
        bool pending = c && c->child_pending;
        pthread_mutex_unlock(&clients_lock);
        return pending;
}

int zswap_child_attach(struct zswap_client *c) {
        int saved = errno;
        pthread_mutex_lock(&clients_lock);
        int r = c && c->child_pending ? child_attach_now(c) : 0;
        pthread_mutex_unlock(&clients_lock);
        errno = saved;
        return r;
}

static void atfork_child(void) {
        int saved = errno;

        for (struct zswap_client *c = clients; c; c = c->next_client) {
                /* a parent with no uffd (detached after a restore) had no
                 * fork event: the daemon knows nothing of us */
                bool managed = c->uffd >= 0 && !c->dead;
                /* what we inherited belongs to the parent: whether the
                 * daemon held pages out for it at the fork (its answer to
                 * our FORK_PREPARE, or else the parent's store now), and
                 * who its daemon is, in case we cannot attach */
                bool held = managed && (c->fork_held > 0 ? c->fork_held > 1 : parent_held_pages(c->store_fd));
                /* our fork was announced: whether the store we hold is
                 * as at the fork, the store says (it names our fork only
                 * if its daemon answered our FORK_PREPARE, or adopted the
                 * parent while it forked: zswap_store_restore_forked()) */
                bool announced = c->fork_ok;
                /* the agent between two daemons at the fork: the next
                 * one may be serving the parent already while the store
                 * we hold is the last one's, which events (an unmap, a
                 * DONTNEED) no longer reach: not to be trusted */
                bool adopting = c->recovering;
                int daemon_pidfd = managed ? peer_pidfd(c->sock) : -1;
                int parent_store = c->store_fd, parent_shared = c->shared_fd;
                c->store_fd = c->shared_fd = -1;
                c->sock = safe_close(c->sock);
                c->uffd = safe_close(c->uffd);
                c->agent_running = false;
                c->pending = NULL;
                c->dead = false;
                c->recovering = false;
                c->closing = false;
                c->connecting = false;
                c->gen = 0;
                c->staging_stale = false;
                c->recovery = (ZswapRecovery){ .last_adopt_status = 1 };
                pthread_mutex_init(&c->send_lock, NULL);
                pthread_mutex_init(&c->lock, NULL);
                cond_init_monotonic(&c->cond);
                c->child_token = fork_token;
                c->child_pending = false;
                if (managed && !held && announced && !adopting && child_attach_deferred) {
                        /* nothing of ours is out of memory, and the daemon
                         * holds no parent for us: attach later, if we live
                         * that long (a shell's child execs first) */
                        safe_close(daemon_pidfd);
                        safe_close(parent_store);
                        safe_close(parent_shared);
                        c->child_pending = true;
                        c->dead = true; /* until then */
                        continue;
                }
                int r = managed ? child_reconnect(c) : -ENOTCONN;
                if (managed && r < 0)
                        child_lost(c, held, announced && !adopting, daemon_pidfd, parent_store, parent_shared);
                safe_close(daemon_pidfd);
                safe_close(parent_store);
                safe_close(parent_shared);
                if (r < 0)
                        child_unmanaged(c);
        }
        pthread_mutex_unlock(&clients_lock);
        errno = saved;
}
