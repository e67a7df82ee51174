/*
 * test-dos: a local user tries to stop or monopolise the daemon's manager
 * thread, while an honest client pages 64 MiB out and reads every page
 * back. One case per attack (argv[1]):
 *
 * linger: files whose last close waits. A TCP socket with unsent
 * data and SO_LINGER set (an hour) makes close() wait until its data is
 * gone or the hour has passed; the peer here never reads. The attacker
 * (uid U_ATTACKER, not in any allow list) sends such sockets to the
 * daemon and closes its own copies, three ways:
 *  - one with a message (the daemon refuses the message and has to close
 *    the descriptor); its close must be the daemon's, the last, so the
 *    attacker runs at a real-time priority where allowed and, should the
 *    daemon still close its copy first, interrupts its own lingering
 *    close and sends another on a new connection;
 *  - twenty in one message (more than a receiver that takes only a few
 *    lets in: the kernel would drop the rest in the receiving thread);
 *  - one queued behind enough malformed messages to have the connection
 *    dropped, so that it is still queued when the daemon closes the
 *    connection (the kernel drops it then, in the closing thread).
 *
 * The honest client's work runs in a child the test waits for; a manager
 * stuck in close() would stop its connect, and after a safety timeout the
 * test fails saying how far it got. Its pages must read back identical.
 * The attacker's user, with more sockets waiting than its bound, is
 * refused new connections while they wait, and admitted again once the
 * peer resets them. The times alone and under attack are printed (a
 * ratio, never asserted: CI machines are noisy).
 *
 * maps: a client with 60,000 mappings registers and unregisters a page
 * above all of them, again and again. Checking that the range is private
 * anonymous memory must not cost the manager in proportion to the
 * mappings elsewhere in the process: the daemon's reads (rchar in
 * /proc/PID/io, the bytes its read() calls returned) per REGISTER must
 * stay under 64 KiB, where reading /proc/PID/maps from its first line
 * read megabytes each time. The honest client's work runs meanwhile.
 *
 * stall: an admitted user granted /dev/userfaultfd (userfaultfd_device)
 * makes the daemon read memory it registered, empty, on a second
 * userfaultfd of its own that it never answers. Three raw connections:
 * two choose a page to evict, and when the daemon has asked their agent
 * to move it, register their staging area on that second uffd and drop
 * the page (MADV_DONTNEED): the daemon's fault thread then cancels the
 * move by mapping the zero page at the page's staging slot; the third
 * puts its fork token in such memory and sends FORK_PREPARE, which must
 * be answered (the token comes in the message; nothing reads that page).
 * A pread() of /proc/PID/mem would wait there until the daemon is killed;
 * the honest client's pageout and read-back must complete, every page
 * identical, while the attacker still holds its uffds.
 *
 * fuse: the same user, on two connections, moves a page of its own into
 * its staging slot as the daemon asked, puts a page of a file whose FUSE
 * server (this test, as root) never answers a READ in the slot's place,
 * and touches the page: the daemon's fault threads must read the slot to
 * serve those faults. The daemon runs with a read bound longer than the
 * test. Both faults stay held, the server holding both READs, while the
 * honest client's whole job completes: no fault thread waits for a read
 * (a thread that did would hold the honest client until the bound). When
 * the server goes away the reads fail and the attacker's faults are
 * answered.
 *
 * fuse-bound: one such connection with the default bound: the read is
 * reported past its bound, the attacker is not killed but evicted no
 * more, its user refused new connections while the read waits and served
 * again once it completes; the honest client is served meanwhile.
 *
 * stuck: the same user's agent begins a page move (raises `moving` on its
 * sync page) and stops there, as an agent descheduled, stopped, throttled
 * by a CPU quota or held by valgrind does, while its program unmaps the
 * pages being moved, maps new memory at the same address and writes it.
 * The move then runs as planned before the munmap. The daemon must have
 * revoked it: the move takes no page of the new mapping (a daemon that
 * read the UNMAP once the agent had held the move for a while let it take
 * them all), every page of the new mapping is intact, and the honest
 * client is served while the move is held.
 *
 * fuse-lock: the same user maps a page of a FUSE file whose server never
 * answers, reads it through its own /proc/self/mem in a thread (the
 * kernel then waits for the server with the process's mmap lock held for
 * reading) and sends REGISTER. The daemon's UFFDIO_REGISTER needs that
 * lock for writing; made on the manager thread, it waited as long as the
 * server does, and with it every connection: root's control connection
 * must be answered within 30 s (the ioctl is a job, daemon/mm/mmjob.h). Then the server goes (the
 * read fails, the lock is free) and the REGISTER must be answered. The
 * same, the lock held, with:
 *  - fuse-lock-attach: ATTACH on a second connection of the process, with
 *    a fresh uffd and staging area (the proof registers a page of it),
 *    and while its proof waits, a PAGEOUT on the first connection of a
 *    region armed and paged in before: nothing of the user's may be
 *    planned or scanned while the proof waits (a read of the pagemap
 *    queues behind it); once answered, every page reads back intact;
 *  - fuse-lock-arm: a PAGEOUT of a region registered and written before
 *    (with WP_ASYNC the region is registered for missing faults as its
 *    first page leaves); once answered, every page reads back intact;
 *  - fuse-lock-detach: the connection closed, with pages of a region out
 *    (the daemon brings them back and unregisters the region); once it
 *    has, the process finds every page there, intact;
 *  - fuse-lock-queued: another thread of the process calls mmap(), which
 *    waits for the lock for writing (and every reader after it waits
 *    too), and the process asks for a PAGEOUT of a region one PAGEOUT
 *    armed before: a read of /proc/PID/pagemap (the plan's, the tick's
 *    count and write scan, root's STATUS) waits behind that mmap(), as
 *    any use of the lock for reading does; each is a job of the daemon's
 *    mm-job pool, none the manager's own. Once answered, every page
 *    reads back intact;
 *  - fuse-lock-moved: the same writer queued, but the PAGEOUT sent
 *    before the lock was held, its MOVE made and its MOVE_DONE sent once
 *    the writer waits: the reads of what the MOVE moved wait too;
 *  - fuse-lock-adopt: ADOPT of a store the process made itself, whose
 *    ADOPT_PAGES entries are installs a dead daemon left under way (a
 *    read of the pagemap each, to tell whether the install happened).
 *    Once its proof is done (the process sees the page the proof
 *    registered), the lock is held and the same writer queued, while
 *    the adoption walks the entries: the walk waits, and must not be the
 *    manager's. (Should the walk end before the writer waits, the attack
 *    missed, and the test says so.) Once answered, every page the store
 *    names reads as the store says;
 *  - fuse-lock-remap: a daemon with one fault thread. The process
 *    adopts a store of ADOPT_PAGES same-filled pages (as fuse-lock-adopt,
 *    but none under way), moves the region with
 *    mremap(MREMAP_DONTUNMAP), which sends no UNMAP for the old range,
 *    and takes its lock, the writer queued, while the fault thread walks
 *    the moved entries; then a thread of its faults on a moved page (the
 *    kernel sends that fault under the mapping's own lock, and the fault
 *    thread reads the uffd again). Whether the kernel has an UNMAP still
 *    to send is asked with an ioctl that takes that lock for reading: a
 *    fault thread that asked it waited, and every client's faults with
 *    it. A root client must page out and read back meanwhile, and the
 *    daemon's question must wait for the lock, in that ioctl or queued
 *    behind another job of the attacker's that waits for it (else the
 *    attack missed, and the test says so). Once the lock is free, every
 *    page reads as the store says at its new address;
 *  - fuse-lock-copy: the same on two fault threads, but the region's
 *    mapping never had a page, so it has no anon_vma, and the fault
 *    thread's copy of the page the attacker's thread faults on takes the
 *    mmap lock for reading (mm/userfaultfd.c uffd_lock_vma()), and waits.
 *    The daemon must say which fault thread waits in a call into which
 *    client, within TEST_WAIT_S; two root clients in a row (one of them
 *    at home on the waiting thread) must page out, read back and
 *    unregister meanwhile (the unregister's sync and restore are the
 *    home thread's work, which the other thread must take); once the
 *    lock is free, every page reads as the store says;
 *  - fuse-lock-copy-one: the same on one fault thread: a spare must
 *    start, serve root's faults and take the held thread's work;
 *  - fuse-lock-copies, fuse-lock-copies-together: two attackers of one
 *    user (case_fuse_lock_copies());
 *  - fuse-lock-uffd-close: the process sends userfaultfds of its own
 *    address space with a request, and closes its own copy of each (in
 *    threads made before the lock was held). The daemon's copy is then
 *    the last, and its close the uffd's release, which takes the mmap
 *    lock for writing (mm/userfaultfd.c userfaultfd_release_all()). The
 *    manager closed such a descriptor itself and waited; root must be
 *    served while a thread of the daemon waits in that release (else the
 *    attack missed, and the test says so);
 *  - fuse-lock-tier: fuse-lock-copy-one's attack on a daemon with a
 *    second tier on nbd-server, while root's reader waits on a page of
 *    the tier that the held thread's pump reads and the server stops
 *    answering; the server goes on: root must read every page while the
 *    copy still waits (case_fuse_lock_tier());
 *
 *  - fuse-lock-churn: 40 connections, each sending HELLO and ATTACH
 *    (whose proof waits for the lock) and closed at once: each waiting
 *    proof holds a daemon thread, and the user's waiting calls count
 *    against its max_connections (8 here), so the daemon refuses its
 *    connections past 8 and grows by no more than 8 threads.
 *
 * ops: the same user (no max_requests) attaches a raw client, lets its
 * first PAGEOUT's MOVE wait unanswered, and sends 100,000 more PAGEOUTs
 * of the same pages: each would wait behind that MOVE, queued in the
 * manager's memory for as long as the connection lives. The daemon must
 * refuse those past its bound (-EBUSY) and grow by less than 4 MiB.
 *
 * late: the same user's agent has not begun the page move yet (it waits
 * for the daemon's read to end, as zsync.h makes it, or is descheduled)
 * while its program moves the pages elsewhere with mremap(), maps new
 * memory at the old address and writes it. The move then runs as
 * planned, as soon as the daemon lets it (the test stops the daemon
 * from then until the move is made, as a loaded machine may). It must
 * take no page of the new mapping: the daemon, which took the moved
 * pages over at their new address, must have filled every slot of theirs
 * before it let the move start (it left that to its reads of the slots,
 * the first 32 on their way and the others to come, and the move took
 * the new mapping's pages, which then read as zeros). The moved pages
 * are intact at their new address.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "pentry.h"
#include "protocol.h"
#include "store.h"
#include "uffd-compat.h"
#include "util.h"
#include "zsync.h"

#define U_ATTACKER 60031
#define U_STALLER 60032 /* admitted, granted /dev/userfaultfd */
#define LEN ((size_t)64 << 20)
#define HONEST_TIMEOUT_S 120

static TestDaemon d;
static int fuse_fd = -1; /* case fuse: /dev/fuse, in the server process only */
static int listener = -1;
static int accepted[64];
static int naccepted;

/* A TCP connection to our listener, its send queue full (the listener's
 * side never reads), set to linger an hour on close. */
static int lingering_socket(void) {
        struct sockaddr_in sa;
        socklen_t len = sizeof(sa);
        ASSERT_OK(getsockname(listener, (struct sockaddr *)&sa, &len));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        int small = 4096;
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        static char junk[65536];
        while (send(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                ;
        struct linger lg = { .l_onoff = 1, .l_linger = 3600 };
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
        return fd;
}

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        strcpy(sa.sun_path, d.sock);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Whether the daemon took the message (it may have dropped the
 * connection already: the attack goes on regardless). */
static bool send_with(int sock, uint16_t type, const int *fds, size_t nfds) {
        _Alignas(8) uint8_t out[ZSWAP_MSG_MAX];
        memset(out, 0, sizeof(out));
        zmsg_init((ZMsgHeader *)out, type, 1, zmsg_expected_size(type));
        ((ZMsgHello *)out)->role = ZROLE_CONTROL;
        return zmsg_send(sock, out, ((ZMsgHeader *)out)->size, fds, nfds) == 0;
}

/* What the attacker tells the test (a shared page): how many lingering
 * sockets it connected to the listener, and that it has sent them all. */
typedef struct AttackShared {
        _Atomic int sockets;
        _Atomic bool sent;
        _Atomic bool go; /* the test has set our scheduling policy */
} AttackShared;
static AttackShared *attack_shared;

static int attack_socket(void) {
        int fd = lingering_socket();
        atomic_fetch_add(&attack_shared->sockets, 1);
        return fd;
}

/* A watcher of the attacker's main thread while it closes its copy of a
 * socket it sent: if that close lingers (the daemon got to close its copy
 * first: ours is the last), the watcher interrupts it with a signal. */
static struct {
        pid_t tid;              /* the main thread */
        pthread_t main;
        _Atomic bool closing;   /* main is in the close */
        _Atomic uint64_t since; /* since when (now_ns()) */
        _Atomic bool lingered;  /* and it lingered: interrupted */
} watch;

static void on_interrupt(int sig) {
        (void)sig;
}

static void *watch_main(void *arg) {
        char w[64];
        (void)arg;
        for (;; usleep(1000)) {
                if (!atomic_load(&watch.closing))
                        continue;
                task_wchan(0, watch.tid, w, sizeof(w));
                /* a close that is not the last returns at once: one
                 * still running after a second lingers, whatever wchan
                 * says (it says 0 where kernel symbols are hidden) */
                bool long_close = now_ns() - atomic_load(&watch.since) > 1000000000ull;
                if (atomic_load(&watch.closing) &&
                    (strstr(w, "wait_close") || strstr(w, "wait_woken") || long_close)) {
                        atomic_store(&watch.lingered, true);
                        pthread_kill(watch.main, SIGUSR1);
                }
        }
        return NULL;
}

/* Close our copy of a lingering socket just sent. Whether the close was
 * over at once (the daemon still holds the socket: its close will be the
 * last and linger), not interrupted lingering. */
static bool close_before_daemon(int fd) {
        atomic_store(&watch.lingered, false);
        atomic_store(&watch.since, now_ns());
        atomic_store(&watch.closing, true);
        close(fd);
        atomic_store(&watch.closing, false);
        return !atomic_load(&watch.lingered);
}

/* The attack, as U_ATTACKER; the attacker's copies closed. The three
 * connections are made first: the daemon refuses new ones of this user
 * once the second message is in. */
static int attack(void) {
        int fds[20];
        int s2 = raw_connect(), s3 = raw_connect();
        ASSERT_TRUE(s2 >= 0 && s3 >= 0);

        /* one with a message the daemon refuses (HELLO carries none). Its
         * close in the daemon must be the last, so that it lingers in the
         * closer thread and every descriptor sent from here on waits
         * behind it, our copies closed long before. Between our send and
         * our close the daemon may receive and close its copy (its threads
         * preempt us on a loaded machine): the send and the close run at a
         * real-time priority where the system allows it, and if the
         * daemon still closed first (our close lingers), the close is
         * interrupted and it all begins again on a new connection (the
         * daemon drops one that sent a HELLO with descriptors). */
        struct sigaction sa = { .sa_handler = on_interrupt }; /* no SA_RESTART */
        ASSERT_OK(sigaction(SIGUSR1, &sa, NULL));
        watch.tid = (pid_t)syscall(SYS_gettid);
        watch.main = pthread_self();
        pthread_t watcher;
        ASSERT_OK(-pthread_create(&watcher, NULL, watch_main, NULL));
        WAIT_UNTIL(atomic_load(&attack_shared->go), TEST_WAIT_S, "the test never let the attacker start");
        bool realtime = sched_getscheduler(0) == SCHED_FIFO;
        for (int tries = 0;; tries++) {
                ASSERT_TRUE(tries < 16);
                int s = raw_connect();
                ASSERT_TRUE(s >= 0);
                fds[0] = attack_socket();
                bool sent = send_with(s, ZMSG_HELLO, fds, 1);
                if (close_before_daemon(fds[0]))
                        break;
                fprintf(stderr, "attacker: our close of socket %d was the last (%s, %s); again\n", tries + 1,
                        sent ? "sent" : "the send failed", realtime ? "real-time" : "not real-time");
        }

        /* twenty in one message */
        for (int i = 0; i < 20; i++)
                fds[i] = attack_socket();
        (void)send_with(s2, ZMSG_STATUS, fds, 20);
        for (int i = 0; i < 20; i++)
                close(fds[i]);

        /* one queued behind enough garbage to have the connection dropped */
        int flags = fcntl(s3, F_GETFL);
        ASSERT_OK(fcntl(s3, F_SETFL, flags | O_NONBLOCK));
        for (int i = 0; i < 80; i++) {
                char garbage[16] = "not a message";
                if (send(s3, garbage, sizeof(garbage), MSG_NOSIGNAL) < 0)
                        break;
        }
        fds[0] = attack_socket();
        (void)send_with(s3, ZMSG_STATUS, fds, 1);
        atomic_store(&attack_shared->sent, true);
        /* the last close of this one may be ours (the daemon may have
         * dropped the connection before the send, having too many of
         * ours to close): then it lingers here, which is no matter */
        close(fds[0]);
        /* the connections stay open: the daemon decides when they close */
        for (;;)
                pause();
        return 0;
}

/* The honest client's whole job; progress in *stage. */
static int honest(volatile int *stage) {
        uint64_t *hashes = malloc(LEN / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        *stage = 1;
        struct zswap_client *c = td_connect(&d);
        *stage = 2;
        uint8_t *buf = td_region(c, LEN, 42, hashes);
        *stage = 3;
        /* Half of it evicted, however many PAGEOUTs that takes: on a busy
         * machine a read of our memory can pass the daemon's bound
         * (memread.h), and we are evicted no more until it completes, so a
         * PAGEOUT ends with what it had. Waiting is the safety timeout's. */
        int n = 0, tries = 0;
        while (n < (int)(LEN / ZSWAP_PAGE_SIZE) / 2) {
                int r = zswap_pageout(c, buf, LEN);
                if (r < 0) {
                        fprintf(stderr, "pageout: %s\n", strerror(-r));
                        return 10;
                }
                n += r;
                if (++tries > 1)
                        fprintf(stderr, "pageout %d: %d pages evicted so far\n", tries, n);
                if (n < (int)(LEN / ZSWAP_PAGE_SIZE) / 2)
                        usleep(100000);
        }
        *stage = 4;
        if (verify_pages(buf, LEN, hashes) != 0)
                return 11;
        *stage = 5;
        zswap_disconnect(c);
        munmap(buf, LEN);
        free(hashes);
        return 0;
}

static const char *stage_name[] = { "not started", "connecting", "registering", "paging out", "reading back",
                                    "disconnecting" };

/* Run honest() in a child; its time in seconds. Fails after the safety
 * timeout, saying how far it got. */
static double run_honest(const char *when) {
        volatile int *stage = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(stage != MAP_FAILED);
        uint64_t t0 = now_ns();
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(honest(stage));
        int st = 0;
        pid_t w = 0;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_ns() - t0 < HONEST_TIMEOUT_S * 1000000000ull)
                usleep(10000);
        if (w == 0) {
                int at = *stage;
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                td_log_dump(&d);
                test_fail("%s: the honest client was still %s after %d s: the daemon does not serve it", when,
                          stage_name[at], HONEST_TIMEOUT_S);
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("%s: the honest client failed (status %d)", when, st);
        munmap((void *)stage, 4096);
        return (double)(now_ns() - t0) / 1e9;
}

/* A connection by uid: whether the daemon answers its STATUS. */
static bool user_served(uid_t uid) {
        pid_t pid = td_fork_as(uid, 0);
        int st;
        if (pid == 0) {
                int s = raw_connect();
                if (s < 0)
                        _exit(1);
                struct timeval tv = { .tv_sec = 30 };
                setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                ZMsgHello h;
                memset(&h, 0, sizeof(h));
                zmsg_init(&h.hdr, ZMSG_HELLO, 7, sizeof(h));
                h.role = ZROLE_CONTROL;
                if (zmsg_send(s, &h, sizeof(h), NULL, 0) < 0)
                        _exit(1);
                _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
                ssize_t n = zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL);
                if (n <= 0 || ((ZMsgReply *)in)->status != 0)
                        _exit(1);
                /* and what zswapctl status and clients ask, which count
                 * every client's resident pages */
                ZMsgHeader q;
                zmsg_init(&q, ZMSG_STATUS, 8, sizeof(q));
                if (zmsg_send(s, &q, sizeof(q), NULL, 0) < 0 || zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL) <= 0 ||
                    ((ZMsgHeader *)in)->type != ZMSG_STATUS_REPLY)
                        _exit(1);
                ZMsgClientsReq cq;
                memset(&cq, 0, sizeof(cq));
                zmsg_init(&cq.hdr, ZMSG_CLIENTS, 9, sizeof(cq));
                if (zmsg_send(s, &cq, sizeof(cq), NULL, 0) < 0 || zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL) <= 0 ||
                    ((ZMsgHeader *)in)->type != ZMSG_CLIENTS_REPLY)
                        _exit(1);
                _exit(0);
        }
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 90);
        return WEXITSTATUS(st) == 0;
}

static void case_linger(void) {
        /* a listener with a tiny receive buffer that never reads;
         * non-blocking, so that waiting for the attacker's connections
         * has a bound (accept4's SOCK_NONBLOCK is the new socket's) */
        listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int small = 4096;
        ASSERT_OK(setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)));
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_OK(bind(listener, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(listener, 64));
        attack_shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(attack_shared != MAP_FAILED);

        double alone = run_honest("alone");

        pid_t att = td_fork_as(U_ATTACKER, 0);
        if (att == 0)
                _exit(attack());
        /* at a real-time priority where the system allows it (attack());
         * it runs only to send, close, and wait */
        struct sched_param rt = { .sched_priority = 1 };
        (void)sched_setscheduler(att, SCHED_FIFO, &rt);
        atomic_store(&attack_shared->go, true);
        /* the attacker's sockets, all sent, reach our listener */
        for (uint64_t t0 = now_ns(); !atomic_load(&attack_shared->sent) || naccepted < atomic_load(&attack_shared->sockets);
             usleep(1000)) {
                int a = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (a >= 0) {
                        ASSERT_TRUE(naccepted < (int)ELEMENTSOF(accepted));
                        accepted[naccepted++] = a;
                }
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull) {
                        td_dump_stacks(att, "the attacker");
                        test_fail("%d of the attacker's %d sockets connected in %d s (%s)", naccepted,
                                  atomic_load(&attack_shared->sockets), TEST_WAIT_S,
                                  atomic_load(&attack_shared->sent) ? "all sent" : "not all sent");
                }
        }
        /* the daemon has been handed them: the attacker's user has more
         * waiting to be closed than it may, and is turned away */
        WAIT_UNTIL(td_log_has(&d, "too many descriptors sent whose close waits"), TEST_WAIT_S,
                   "the daemon never said the attacker has too many closes waiting");
        double attacked = run_honest("under attack");
        ASSERT_TRUE(td_log_has(&d, "too many descriptors sent whose close waits"));
        ASSERT_TRUE(!user_served(U_ATTACKER));
        ASSERT_TRUE(td_log_has(&d, "refused: its user sent descriptors whose close still waits"));

        /* the peer resets the attacker's sockets: their closes end, and the
         * user is served again */
        struct linger rst = { .l_onoff = 1, .l_linger = 0 };
        for (int i = 0; i < naccepted; i++) {
                setsockopt(accepted[i], SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
                close(accepted[i]);
        }
        for (uint64_t t0 = now_ns(); !user_served(U_ATTACKER); usleep(100000))
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        test_fail("the attacker's user is still refused %d s after its closes ended", TEST_WAIT_S);

        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        fprintf(stderr, "honest 64 MiB pageout and read-back: alone %.2f s, under attack %.2f s (%.2fx)\n", alone,
                attacked, attacked / alone);
}

/* ---- maps ---- */

#define MAPPINGS 60000
#define REGISTERS 200

/* The bytes the daemon's read() calls have returned so far. */
static uint64_t daemon_rchar(void) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/io", (int)d.pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        unsigned long long v = 0;
        ASSERT_TRUE(sscanf(buf, "rchar: %llu", &v) == 1);
        return v;
}

/* A client with MAPPINGS mappings below one page it registers over and
 * over; *done counts the REGISTERs, *stop ends the loop. */
static int many_mappings(volatile uint64_t *done, volatile int *stop) {
        uint8_t *top = test_map(ZSWAP_PAGE_SIZE); /* the highest: mmap goes down */
        for (int i = 0; i < MAPPINGS; i++) {
                /* alternate protections so that none merge */
                void *p = mmap(NULL, ZSWAP_PAGE_SIZE, i & 1 ? PROT_READ : PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) {
                        fprintf(stderr, "mapping %d: %s\n", i, strerror(errno));
                        return 20;
                }
        }
        struct zswap_client *c = td_connect(&d);
        top[0] = 1;
        while (!*stop) {
                int r = zswap_register(c, top, ZSWAP_PAGE_SIZE);
                if (r < 0) {
                        fprintf(stderr, "register: %s\n", strerror(-r));
                        return 21;
                }
                ASSERT_OK(zswap_unregister(c, top, ZSWAP_PAGE_SIZE));
                (*done)++;
        }
        if (top[0] != 1)
                return 22;
        zswap_disconnect(c);
        return 0;
}

static void case_maps(void) {
        volatile uint64_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(shared != MAP_FAILED);
        volatile uint64_t *done = &shared[0];
        volatile int *stop = (volatile int *)&shared[1];

        double alone = run_honest("alone");
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                _exit(many_mappings(done, stop));
        }
        /* the first few REGISTERs, then count the daemon's reads over many */
        for (uint64_t t0 = now_ns(); *done < 3; usleep(1000))
                if (now_ns() - t0 > 120 * 1000000000ull || waitpid(pid, NULL, WNOHANG) == pid)
                        test_fail("the client with %d mappings made %llu REGISTERs", MAPPINGS,
                                  (unsigned long long)*done);
        uint64_t r0 = daemon_rchar(), n0 = *done;
        double attacked = run_honest("under attack");
        for (uint64_t t0 = now_ns(); *done < n0 + REGISTERS; usleep(1000))
                if (now_ns() - t0 > 300 * 1000000000ull)
                        test_fail("%llu of %d REGISTERs in 300 s", (unsigned long long)(*done - n0), REGISTERS);
        uint64_t r1 = daemon_rchar(), n1 = *done;
        *stop = 1;
        int st;
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        uint64_t per = (r1 - r0) / (n1 - n0);
        fprintf(stderr, "%llu REGISTERs with %d mappings: the daemon read %llu bytes each\n",
                (unsigned long long)(n1 - n0), MAPPINGS, (unsigned long long)per);
        fprintf(stderr, "honest 64 MiB pageout and read-back: alone %.2f s, under attack %.2f s (%.2fx)\n", alone,
                attacked, attacked / alone);
        if (per >= 64 * 1024)
                test_fail("the daemon read %llu bytes per REGISTER: its work grows with the client's mappings",
                          (unsigned long long)per);
}

/* ---- stall ---- */

#define STALL_PAGES 64

/* The agent's part of MOVE mv (as client/lib/agent.c makes it, without
 * its retries): each run into its staging slots, a page that cannot move
 * skipped, each page moved marked in *done; the pages moved. */
static int raw_move(int uffd, uint8_t *staging, const ZMsgMove *mv, ZMsgMoveDone *done) {
        int n = 0;

        for (uint32_t ri = 0, idx = 0; ri < mv->nruns && ri < ZSWAP_MOVE_RUNS_MAX; idx += mv->runs[ri++].npages)
                for (uint32_t i = 0; i < mv->runs[ri].npages && idx + i < ZSWAP_BATCH_MAX;) {
                        struct uffdio_move m = { .dst = (uintptr_t)staging + (uint64_t)(mv->slot0 + idx + i) * ZSWAP_PAGE_SIZE,
                                                 .src = mv->runs[ri].addr + (uint64_t)i * ZSWAP_PAGE_SIZE,
                                                 .len = (uint64_t)(mv->runs[ri].npages - i) * ZSWAP_PAGE_SIZE };
                        int r = ioctl(uffd, UFFDIO_MOVE, &m);
                        uint32_t k = m.move > 0 ? (uint32_t)(m.move / ZSWAP_PAGE_SIZE) : 0;
                        for (uint32_t j = i; j < i + k; j++)
                                done->moved[(idx + j) / 64] |= 1ull << ((idx + j) % 64);
                        n += (int)k;
                        i += k;
                        if (r < 0 && i < mv->runs[ri].npages) {
                                done->errors++;
                                i++;
                        }
                }
        return n;
}

/* The raw client that raw_request() is the agent of while it waits for a
 * reply (fuse-lock's attacker sets it): the MOVE and RELEASE commands that
 * come first are served, as the library's agent serves them. */
static struct {
        int uffd; /* -1: none; commands are left to the caller */
        uint8_t *staging;
        ZSync *sync;
} raw_agent = { .uffd = -1 };

static int64_t raw_value; /* the value of the last reply raw_request() read */

static void raw_agent_serve(int s, const void *cmd) {
        const ZMsgHeader *h = cmd;

        if (h->type == ZMSG_MOVE) {
                const ZMsgMove *mv = cmd;
                ZMsgMoveDone done = { .npages = mv->npages };
                if (zsync_move_begin(raw_agent.sync)) {
                        (void)raw_move(raw_agent.uffd, raw_agent.staging, mv, &done);
                        zsync_move_end(raw_agent.sync);
                }
                zmsg_init(&done.hdr, ZMSG_MOVE_DONE, mv->hdr.id, sizeof(done));
                (void)zmsg_send(s, &done, sizeof(done), NULL, 0);
        } else if (h->type == ZMSG_RELEASE) {
                /* the slots emptied, unregistered around the MADV_DONTNEED
                 * as the library does (else it waits for a REMOVE event to
                 * be read) */
                ZMsgRelease done = *(const ZMsgRelease *)cmd;
                ASSERT_TRUE((uint64_t)done.slot0 + done.nslots <= ZSWAP_BATCH_MAX);
                struct uffdio_range r = { (uintptr_t)raw_agent.staging + (uint64_t)done.slot0 * ZSWAP_PAGE_SIZE,
                                          (uint64_t)done.nslots * ZSWAP_PAGE_SIZE };
                struct uffdio_register reg = { .range = r, .mode = UFFDIO_REGISTER_MODE_WP };
                ASSERT_OK(ioctl(raw_agent.uffd, UFFDIO_UNREGISTER, &r));
                ASSERT_OK(madvise((void *)(uintptr_t)r.start, r.len, MADV_DONTNEED));
                ASSERT_OK(ioctl(raw_agent.uffd, UFFDIO_REGISTER, &reg));
                zmsg_init(&done.hdr, ZMSG_RELEASE_DONE, done.hdr.id, sizeof(done));
                (void)zmsg_send(s, &done, sizeof(done), NULL, 0);
        }
}

/* Send a request on a raw connection and read up to its reply (any
 * command the daemon sends first is served by raw_agent if set, else left
 * in *cmd, if asked for); the reply's status, or -EPIPE if none came. */
static int raw_reply(int s, uint32_t id, int *rfd, ZMsgHeader *cmd);

static int raw_request(int s, void *m, const int *fds, size_t nfds, int *rfd, ZMsgHeader *cmd) {
        ZMsgHeader *h = m;
        static uint32_t ids = 100;

        h->id = ++ids;
        if (zmsg_send(s, m, h->size, fds, nfds) < 0)
                return -EPIPE;
        return raw_reply(s, h->id, rfd, cmd);
}

/* raw_request()'s wait for the reply to request id. */
static int raw_reply(int s, uint32_t id, int *rfd, ZMsgHeader *cmd) {
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];

        for (;;) {
                int got[4];
                size_t ngot = ELEMENTSOF(got);
                ssize_t n = zmsg_recv(s, in, sizeof(in), got, &ngot, NULL);
                if (n <= 0)
                        return -EPIPE;
                for (size_t i = 0; i < ngot; i++)
                        if (i == 0 && rfd)
                                *rfd = got[0];
                        else
                                close(got[i]);
                const ZMsgHeader *r = (const ZMsgHeader *)in;
                if (r->type == ZMSG_REPLY && r->id == id) {
                        raw_value = ((const ZMsgReply *)in)->value;
                        return ((const ZMsgReply *)in)->status;
                }
                if (raw_agent.uffd >= 0 && (r->type == ZMSG_MOVE || r->type == ZMSG_RELEASE))
                        raw_agent_serve(s, in);
                else if (cmd)
                        memcpy(cmd, in, sizeof(*cmd));
        }
}

/* HELLO as a client on a new raw connection; the /dev/userfaultfd
 * descriptor in *devfd. -1 if the daemon refused the connection (it
 * closes it unanswered). */
static int raw_hello_try(int *devfd) {
        int s = raw_connect();
        ZMsgHello h;

        ASSERT_TRUE(s >= 0);
        struct timeval tv = { .tv_sec = 60 };
        ASSERT_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        memset(&h, 0, sizeof(h));
        zmsg_init(&h.hdr, ZMSG_HELLO, 0, sizeof(h));
        h.role = ZROLE_CLIENT;
        *devfd = -1;
        int r = raw_request(s, &h, NULL, 0, devfd, NULL);
        if (r == -EPIPE) {
                close(s);
                return -1;
        }
        ASSERT_EQ(r, 0);
        ASSERT_TRUE(*devfd >= 0); /* the config grants it */
        return s;
}

static int raw_hello(int *devfd) {
        int s = raw_hello_try(devfd);
        ASSERT_TRUE(s >= 0);
        return s;
}

/* ATTACH on s of uffd, with a staging area of our choosing and a sync
 * page (zsync.h) if syncfd >= 0: the reply's status (the store it hands
 * over closed). */
static int raw_attach_on(int s, uint64_t staging, int uffd, int syncfd) {
        int store = -1, fds[2] = { uffd, syncfd };
        ZMsgAttach a;

        memset(&a, 0, sizeof(a));
        zmsg_init(&a.hdr, ZMSG_ATTACH, 0, sizeof(a));
        a.staging_addr = staging;
        a.staging_len = (uint64_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
        int r = raw_request(s, &a, fds, syncfd >= 0 ? 2 : 1, &store, NULL);
        if (store >= 0)
                close(store);
        return r;
}

/* HELLO and ATTACH on a new raw connection, with staging and fork token
 * addresses of our choosing and a sync page (zsync.h) if syncfd >= 0; the
 * /dev/userfaultfd descriptor in *devfd. */
static int raw_attach(uint64_t staging, int *devfd, int *uffdp, int syncfd) {
        int s = raw_hello(devfd);
        int uffd = ioctl(*devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        ASSERT_TRUE(uffd >= 0);
        ASSERT_EQ(raw_attach_on(s, staging, uffd, syncfd), 0);
        *uffdp = uffd; /* stays open: the daemon's reads are of our memory */
        return s;
}

/* A second, kernel-mode uffd of ours with [addr, addr + len) registered
 * for missing pages (taken off the first, uffd, which the daemon reads,
 * where its attach checks left a page); nobody reads it. */
static void trap(int devfd, int uffd, uint64_t addr, uint64_t len) {
        struct uffdio_range off = { addr, len };
        ASSERT_OK(ioctl(uffd, UFFDIO_UNREGISTER, &off));
        int u = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        ASSERT_TRUE(u >= 0);
        struct uffdio_api api = { .api = UFFD_API };
        ASSERT_OK(ioctl(u, UFFDIO_API, &api));
        struct uffdio_register reg = { .range = { addr, len }, .mode = UFFDIO_REGISTER_MODE_MISSING };
        ASSERT_OK(ioctl(u, UFFDIO_REGISTER, &reg));
}

/* On raw connection s: fill STALL_PAGES pages at mem (seed), REGISTER
 * them and send a PAGEOUT (request id) without waiting for its reply;
 * returns once the daemon's MOVE of them is in `in`. */
static void raw_pageout_to_move(int s, uint8_t *mem, uint64_t seed, uint32_t id, uint8_t *in) {
        ZMsgRange rg;

        fill_pages(mem, STALL_PAGES * ZSWAP_PAGE_SIZE, seed);
        memset(&rg, 0, sizeof(rg));
        zmsg_init(&rg.hdr, ZMSG_REGISTER, 0, sizeof(rg));
        rg.addr = (uintptr_t)mem;
        rg.len = STALL_PAGES * ZSWAP_PAGE_SIZE;
        ASSERT_EQ(raw_request(s, &rg, NULL, 0, NULL, NULL), 0);
        zmsg_init(&rg.hdr, ZMSG_PAGEOUT, 0, sizeof(rg));
        rg.hdr.id = id;
        ASSERT_OK(zmsg_send(s, &rg, sizeof(rg), NULL, 0));
        ssize_t n = zmsg_recv(s, in, ZSWAP_MSG_MAX + 8, NULL, NULL, NULL);
        ASSERT_TRUE(n > 0 && ((ZMsgHeader *)in)->type == ZMSG_MOVE);
}

/* Connection by connection, as U_STALLER; *done counts those set up, and
 * is -1 if the FORK_PREPARE was answered, -2 if it was not. */
static int stall_attack(volatile int *done) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;

        for (int i = 0; i < 2; i++) {
                /* the fault thread's read: a move cancelled by MADV_DONTNEED */
                uint8_t *staging = test_map(lane);
                uint8_t *mem = test_map(STALL_PAGES * ZSWAP_PAGE_SIZE);
                int devfd, uffd;
                int s = raw_attach((uintptr_t)staging, &devfd, &uffd, -1);
                _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
                /* the PAGEOUT's reply waits for the move we never make */
                raw_pageout_to_move(s, mem, 7, 9000 + (uint32_t)i, in);
                trap(devfd, uffd, (uintptr_t)staging, lane);
                /* the REMOVE event: the daemon cancels the move by reading
                 * the page's slot (and our madvise returns once it has the
                 * event) */
                ASSERT_OK(madvise(mem, STALL_PAGES * ZSWAP_PAGE_SIZE, MADV_DONTNEED));
                (*done)++;
        }
        /* the manager's read: the fork token */
        uint8_t *staging = test_map(lane), *token = test_map(ZSWAP_PAGE_SIZE);
        int devfd, uffd;
        int s = raw_attach((uintptr_t)staging, &devfd, &uffd, -1);
        trap(devfd, uffd, (uintptr_t)token, ZSWAP_PAGE_SIZE);
        ZMsgFork fp = { .token = 0x5eed };
        zmsg_init(&fp.hdr, ZMSG_FORK_PREPARE, 0, sizeof(fp));
        (*done)++;
        int r = raw_request(s, &fp, NULL, 0, NULL, NULL);
        *done = r == 0 ? -1 : -2;
        ZMsgHeader fd;
        zmsg_init(&fd, ZMSG_FORK_DONE, 0, sizeof(fd));
        (void)zmsg_send(s, &fd, sizeof(fd), NULL, 0);
        pause();
        return 0;
}

static void case_stall(void) {
        volatile int *done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(done != MAP_FAILED);

        double alone = run_honest("alone");
        pid_t att = td_fork_as(U_STALLER, 0);
        if (att == 0)
                _exit(stall_attack(done));
        /* the two traps are set (the fault threads have the events), the
         * FORK_PREPARE sent or answered */
        for (uint64_t t0 = now_ns(); *done >= 0 && *done < 3; usleep(10000)) {
                int st;
                if (waitpid(att, &st, WNOHANG) == att)
                        test_fail("the attacker failed (status %d) after %d connections", st, *done);
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the attacker set up %d of 3 connections in 120 s", *done);
        }
        double attacked = run_honest("under attack");
        for (int i = 0; i < TEST_WAIT_S * 100 && *done >= 0; i++)
                usleep(10000);
        if (*done != -1)
                test_fail("the attacker's FORK_PREPARE was not answered (%d)", *done);
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        fprintf(stderr, "honest 64 MiB pageout and read-back: alone %.2f s, under attack %.2f s (%.2fx)\n", alone,
                attacked, attacked / alone);
}

/* ---- fuse ---- */

#include <linux/fuse.h>
#include <sys/mount.h>
#include <sys/uio.h>

static char fuse_dir[64];
static pid_t fuse_pid;           /* the server */
/* READs it received, none answered (shared): in all, then of each file
 * by its node (2: "f", 3: "g") */
static _Atomic int *fuse_reads;

static void fuse_reply(uint64_t unique, int error, const void *data, size_t len) {
        struct fuse_out_header oh = { .len = (uint32_t)(sizeof(oh) + len), .error = error, .unique = unique };
        struct iovec iov[2] = { { &oh, sizeof(oh) }, { (void *)data, len } };
        (void)!writev(fuse_fd, iov, len ? 2 : 1);
}

static void fuse_attr(uint64_t ino, struct fuse_attr *a) {
        memset(a, 0, sizeof(*a));
        a->ino = ino;
        a->mode = ino == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0644;
        a->nlink = ino == FUSE_ROOT_ID ? 2 : 1;
        a->size = ino == FUSE_ROOT_ID ? 0 : ZSWAP_PAGE_SIZE;
        a->blocks = 8;
        a->blksize = ZSWAP_PAGE_SIZE;
}

/* A file system of one file, "f", whose READs are never answered. */
static void fuse_serve(void) {
        static _Alignas(8) uint8_t buf[(1 << 20) + 8192];
        for (;;) {
                ssize_t n = read(fuse_fd, buf, sizeof(buf));
                if (n < 0 && (errno == EINTR || errno == ENOENT))
                        continue;
                if (n < (ssize_t)sizeof(struct fuse_in_header))
                        return; /* unmounted */
                const struct fuse_in_header *ih = (const void *)buf;
                const void *in = ih + 1;
                switch (ih->opcode) {
                case FUSE_INIT: {
                        const struct fuse_init_in *ii = in;
                        struct fuse_init_out o = { .major = FUSE_KERNEL_VERSION,
                                                   .minor = ii->minor < FUSE_KERNEL_MINOR_VERSION ? ii->minor
                                                                                                  : FUSE_KERNEL_MINOR_VERSION,
                                                   .max_readahead = ii->max_readahead,
                                                   .max_write = 65536 };
                        fuse_reply(ih->unique, 0, &o, sizeof(o));
                        break;
                }
                case FUSE_LOOKUP: {
                        /* "f" and "g": a page each */
                        uint64_t ino = strcmp(in, "f") == 0 ? 2 : 3;
                        struct fuse_entry_out o = { .nodeid = ino, .generation = 1, .entry_valid = 3600,
                                                    .attr_valid = 3600 };
                        fuse_attr(ino, &o.attr);
                        if (ih->nodeid == FUSE_ROOT_ID && (strcmp(in, "f") == 0 || strcmp(in, "g") == 0))
                                fuse_reply(ih->unique, 0, &o, sizeof(o));
                        else
                                fuse_reply(ih->unique, -ENOENT, NULL, 0);
                        break;
                }
                case FUSE_GETATTR: {
                        struct fuse_attr_out o = { .attr_valid = 3600 };
                        fuse_attr(ih->nodeid, &o.attr);
                        fuse_reply(ih->unique, 0, &o, sizeof(o));
                        break;
                }
                case FUSE_OPEN: {
                        struct fuse_open_out o = { .fh = 1 };
                        fuse_reply(ih->unique, 0, &o, sizeof(o));
                        break;
                }
                case FUSE_READ:
                        (*fuse_reads)++; /* never answered */
                        if (ih->nodeid == 2 || ih->nodeid == 3)
                                fuse_reads[ih->nodeid]++;
                        break;
                case FUSE_FORGET:
                case FUSE_BATCH_FORGET:
                case FUSE_INTERRUPT:
                        break; /* no reply */
                case FUSE_FLUSH:
                case FUSE_RELEASE:
                case FUSE_ACCESS:
                        fuse_reply(ih->unique, 0, NULL, 0);
                        break;
                default:
                        fuse_reply(ih->unique, -ENOSYS, NULL, 0);
                }
        }
}

/* The server runs in a process of its own, the only one holding
 * /dev/fuse: the test's other processes are forked from a process with
 * one thread (ThreadSanitizer cannot follow a threaded fork), and a
 * process holding the device would keep the server alive for requests it
 * makes itself. Returns once the file system answers. */
static void fuse_start(void) {
        char opts[128], path[96];
        struct stat st;

        fuse_reads = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(fuse_reads != MAP_FAILED);
        snprintf(fuse_dir, sizeof(fuse_dir), "/tmp/test-dos-fuse-%d", (int)getpid());
        ASSERT_OK(mkdir(fuse_dir, 0755));
        fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
        if (fuse_fd < 0) {
                fprintf(stderr, "no /dev/fuse: %s\n", strerror(errno));
                rmdir(fuse_dir);
                exit(77);
        }
        snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fuse_fd);
        if (mount("test-dos", fuse_dir, "fuse", MS_NOSUID | MS_NODEV, opts) < 0) {
                fprintf(stderr, "cannot mount a FUSE file system: %s\n", strerror(errno));
                rmdir(fuse_dir);
                exit(77);
        }
        fuse_pid = fork();
        ASSERT_TRUE(fuse_pid >= 0);
        if (fuse_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                fuse_serve();
                _exit(0);
        }
        close(fuse_fd);
        fuse_fd = -1;
        snprintf(path, sizeof(path), "%s/f", fuse_dir);
        ASSERT_OK(stat(path, &st));
}

/* The server goes away: every request still waiting fails. */
static void fuse_stop(void) {
        umount2(fuse_dir, MNT_DETACH);
        kill(fuse_pid, SIGKILL);
        waitpid(fuse_pid, NULL, 0);
        rmdir(fuse_dir);
}

/*
 * One connection of U_STALLER's, in a process of its own: the daemon asks
 * it to move a batch of pages, it moves the first page into its staging
 * slot itself (as an agent would), puts a page of FUSE file `name` in that
 * slot's place, and touches the page: a fault on a page in flight, which
 * the daemon serves by reading the slot. *state: 1 while the touch waits,
 * 2 once the daemon answered it.
 */
static int fuse_attack(const char *name, volatile int *state) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
        uint8_t *staging = test_map(lane), *mem = test_map(STALL_PAGES * ZSWAP_PAGE_SIZE);
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
        char path[96];
        int devfd, uffd;

        int s = raw_attach((uintptr_t)staging, &devfd, &uffd, -1);
        /* the staging area on our uffd, as the library registers it */
        struct uffdio_register reg = { .range = { (uintptr_t)staging, lane }, .mode = UFFDIO_REGISTER_MODE_WP };
        ASSERT_OK(ioctl(uffd, UFFDIO_REGISTER, &reg));
        raw_pageout_to_move(s, mem, 9, 9100, in);
        const ZMsgMove *mv = (const ZMsgMove *)in;
        uint64_t page = mv->runs[0].addr, slot = (uintptr_t)staging + (uint64_t)mv->slot0 * ZSWAP_PAGE_SIZE;
        struct uffdio_move m = { .dst = slot, .src = page, .len = ZSWAP_PAGE_SIZE };
        ASSERT_OK(ioctl(uffd, UFFDIO_MOVE, &m));
        snprintf(path, sizeof(path), "%s/%s", fuse_dir, name);
        int f = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(f >= 0);
        ASSERT_TRUE(mmap((void *)slot, ZSWAP_PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_FIXED, f, 0) == (void *)slot);
        *state = 1;
        (void)*(volatile uint8_t *)page;
        *state = 2;
        pause();
        return 0;
}

static pid_t fuse_attacker(const char *name, volatile int *state) {
        pid_t pid = td_fork_as(U_STALLER, 0);
        if (pid == 0)
                _exit(fuse_attack(name, state));
        return pid;
}

/* Until the server has n READs, none answered (the attacker's touches
 * are held in the daemon's reads of their slots). */
static void fuse_wait_reads(int n, const pid_t *att, int natt) {
        for (uint64_t t0 = now_ns(); *fuse_reads < n; usleep(10000)) {
                for (int i = 0; i < natt; i++) {
                        int st;
                        if (waitpid(att[i], &st, WNOHANG) == att[i])
                                test_fail("attacker %d ended (status %d) before the daemon read its slot", i, st);
                }
                if (now_ns() - t0 > 120 * 1000000000ull) {
                        td_log_dump(&d);
                        test_fail("the daemon read %d of %d slots in 120 s", *fuse_reads, n);
                }
        }
}

/* The daemon runs with a read bound far longer than the test: two faults
 * on pages whose slots are held by FUSE may not hold any fault thread. */
static void case_fuse(void) {
        volatile int *state = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(state != MAP_FAILED);

        double alone = run_honest("alone");
        fuse_start();
        pid_t att[2] = { fuse_attacker("f", &state[0]), fuse_attacker("g", &state[1]) };
        fuse_wait_reads(2, att, 2);
        double attacked = run_honest("with two slot reads held by FUSE");
        /* served while both reads still waited: no thread waited for them */
        ASSERT_EQ(*fuse_reads, 2);
        for (int i = 0; i < 2; i++) {
                ASSERT_EQ(waitpid(att[i], NULL, WNOHANG), 0);
                ASSERT_EQ(state[i], 1);
        }
        ASSERT_TRUE(!td_log_has(&d, "has waited"));
        /* the server goes: the reads fail, and the touches are answered
         * (the page was the attacker's own to lose: it reads zeros) */
        fuse_stop();
        for (uint64_t t0 = now_ns(); state[0] != 2 || state[1] != 2; usleep(10000))
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the attacker's faults were not answered after their reads failed (%d %d)",
                                  state[0], state[1]);
        for (int i = 0; i < 2; i++) {
                kill(att[i], SIGKILL);
                waitpid(att[i], NULL, 0);
        }
        fprintf(stderr, "honest 64 MiB pageout and read-back: alone %.2f s, with two slot reads held by FUSE %.2f s "
                        "(%.2fx)\n",
                alone, attacked, attacked / alone);
}

/* With the default bound: the client whose slot read waits past it is
 * not killed (a read may wait for reasons that are nobody's attack) but
 * evicted no more, and its user is refused new connections while the read
 * waits; other users are served; once the read completes (here: the
 * server goes away), the user is served again. */
static void case_fuse_bound(void) {
        volatile int *state = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(state != MAP_FAILED);

        fuse_start();
        pid_t att = fuse_attacker("f", &state[0]);
        fuse_wait_reads(1, &att, 1);
        for (uint64_t t0 = now_ns(); !td_log_has(&d, "has waited"); usleep(10000))
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the slot read was not reported past its bound in 120 s");
        ASSERT_TRUE(td_log_has(&d, "it is evicted no more"));
        ASSERT_TRUE(!user_served(U_STALLER));
        ASSERT_TRUE(td_log_has(&d, "refused: a read of its user's memory waited past its bound"));
        double t = run_honest("while a slot read waits past its bound");
        /* the process lives on, its touch still waiting on its own file */
        ASSERT_EQ(waitpid(att, NULL, WNOHANG), 0);
        ASSERT_EQ(state[0], 1);
        fuse_stop();
        for (uint64_t t0 = now_ns(); state[0] != 2; usleep(10000))
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the attacker's fault was not answered after its read failed");
        /* the read completed soon after its bound: no penalty */
        for (uint64_t t0 = now_ns(); !user_served(U_STALLER); usleep(100000))
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the user is still refused 120 s after its read completed");
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        fprintf(stderr, "honest 64 MiB pageout and read-back while a slot read waits: %.2f s\n", t);
}

/* ---- stuck ---- */

/* A raw client with a sync page of its own (*sync), attached with
 * staging (one lane) registered on its uffd as the library registers it:
 * its socket. */
static int raw_sync_client(uint8_t *staging, size_t lane, int *devfd, int *uffd, ZSync **sync) {
        int syncfd = memfd_create("zswap-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ASSERT_TRUE(syncfd >= 0);
        ASSERT_OK(ftruncate(syncfd, ZSWAP_SYNC_SIZE));
        ASSERT_OK(fcntl(syncfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
        *sync = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, syncfd, 0);
        ASSERT_TRUE(*sync != MAP_FAILED);
        int s = raw_attach((uintptr_t)staging, devfd, uffd, syncfd);
        struct uffdio_register reg = { .range = { (uintptr_t)staging, lane }, .mode = UFFDIO_REGISTER_MODE_WP };
        ASSERT_OK(madvise(staging, lane, MADV_NOHUGEPAGE));
        ASSERT_OK(ioctl(*uffd, UFFDIO_REGISTER, &reg));
        return s;
}

/* As U_STALLER: *moved is set to the pages the held move took, *bad to
 * the pages of the new mapping that differ (-1 until done). */
static int stuck_client(volatile int *moved, volatile int *bad) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE, len = STALL_PAGES * ZSWAP_PAGE_SIZE;
        uint8_t *staging = test_map(lane), *mem = test_map(len);
        uint64_t hashes[STALL_PAGES];
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
        int devfd, uffd;

        ZSync *sync;
        int s = raw_sync_client(staging, lane, &devfd, &uffd, &sync);
        raw_pageout_to_move(s, mem, 11, 9200, in);
        const ZMsgMove *mv = (const ZMsgMove *)in;

        /* the agent begins the move and stops there */
        atomic_fetch_add(&sync->moving, 1);
        /* the program: gone, and new memory at the same place at once
         * (munmap() returns once the daemon has read the UNMAP event) */
        ASSERT_OK(munmap(mem, len));
        ASSERT_TRUE(mmap(mem, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) ==
                    mem);
        fill_pages(mem, len, 12);
        hash_pages(mem, len, hashes);
        /* the agent goes on: the move it was told to make, page by page */
        ZMsgMoveDone done = { .npages = mv->npages };
        int n = 0;
        for (uint32_t ri = 0, idx = 0; ri < mv->nruns && ri < ZSWAP_MOVE_RUNS_MAX; idx += mv->runs[ri++].npages)
                for (uint32_t i = 0; i < mv->runs[ri].npages && idx + i < ZSWAP_BATCH_MAX; i++) {
                        struct uffdio_move m = { .dst = (uintptr_t)staging + (uint64_t)(mv->slot0 + idx + i) * ZSWAP_PAGE_SIZE,
                                                 .src = mv->runs[ri].addr + (uint64_t)i * ZSWAP_PAGE_SIZE,
                                                 .len = ZSWAP_PAGE_SIZE };
                        if (ioctl(uffd, UFFDIO_MOVE, &m) == 0) {
                                done.moved[(idx + i) / 64] |= 1ull << ((idx + i) % 64);
                                n++;
                        } else
                                done.errors++;
                }
        atomic_fetch_sub(&sync->moving, 1);
        zmsg_init(&done.hdr, ZMSG_MOVE_DONE, mv->hdr.id, sizeof(done));
        (void)zmsg_send(s, &done, sizeof(done), NULL, 0);
        *moved = n;
        *bad = (int)verify_pages(mem, len, hashes);
        pause();
        return 0;
}

/* ---- late ---- */

#define LATE_PAGES ZSWAP_BATCH_MAX

/* As U_STALLER: res[0] is set to the pages the late move took, res[1] to
 * the pages of the new mapping that differ, res[2] to the moved pages
 * that differ (-1 until done). */
static int late_client(volatile int *res) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE, len = LATE_PAGES * ZSWAP_PAGE_SIZE;
        uint8_t *staging = test_map(lane), *mem = test_map(len), *other = test_map(len);
        static uint64_t hashes[LATE_PAGES];
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
        int devfd, uffd;
        ZMsgRange rg;

        ZSync *sync;
        int s = raw_sync_client(staging, lane, &devfd, &uffd, &sync);
        ASSERT_OK(madvise(mem, len, MADV_NOHUGEPAGE));
        fill_pages(mem, len, 13);
        hash_pages(mem, len, hashes);
        memset(&rg, 0, sizeof(rg));
        zmsg_init(&rg.hdr, ZMSG_REGISTER, 0, sizeof(rg));
        rg.addr = (uintptr_t)mem;
        rg.len = len;
        ASSERT_EQ(raw_request(s, &rg, NULL, 0, NULL, NULL), 0);
        zmsg_init(&rg.hdr, ZMSG_PAGEOUT, 0, sizeof(rg));
        rg.hdr.id = 9300;
        ASSERT_OK(zmsg_send(s, &rg, sizeof(rg), NULL, 0));
        ssize_t got = zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL);
        ASSERT_TRUE(got > 0 && ((ZMsgHeader *)in)->type == ZMSG_MOVE);
        const ZMsgMove *mv = (const ZMsgMove *)in;

        /* the program, before its agent began: the pages moved elsewhere,
         * and new memory at the old place at once (mremap() returns once
         * the daemon has read its events) */
        ASSERT_TRUE(mremap(mem, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, other) == other);
        /* the daemon lets moves run again (it has handled the events),
         * and then does nothing more until the move is made (the test
         * stops it): whatever it left to finish later, a read of a slot
         * on its way or still to come, comes too late */
        for (;;) {
                while (atomic_load(&sync->reading))
                        sched_yield();
                res[3] = 1;
                while (res[3] != 2)
                        sched_yield();
                if (!atomic_load(&sync->reading))
                        break;
                /* a fault thread began a read before the daemon stopped
                 * (a busy machine): let it end, and stop it again */
                res[3] = 5;
                while (res[3] != 6)
                        sched_yield();
        }
        ASSERT_TRUE(mmap(mem, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) ==
                    mem);
        for (size_t off = 0; off < len; off += ZSWAP_PAGE_SIZE)
                mem[off] = 0xee; /* quick: the daemon's own reads of the slots race this */
        /* the agent: the move it was told to make, once the daemon lets it,
         * a page it cannot move skipped, as the library's agent does */
        ZMsgMoveDone done = { .npages = mv->npages };
        ASSERT_TRUE(zsync_move_begin(sync));
        int n = raw_move(uffd, staging, mv, &done);
        zsync_move_end(sync);
        res[3] = 3;
        zmsg_init(&done.hdr, ZMSG_MOVE_DONE, mv->hdr.id, sizeof(done));
        (void)zmsg_send(s, &done, sizeof(done), NULL, 0);
        res[0] = n;
        res[2] = (int)verify_pages(other, len, hashes);
        res[1] = 0;
        for (size_t off = 0; off < len; off += ZSWAP_PAGE_SIZE)
                res[1] += mem[off] != 0xee;
        pause();
        return 0;
}

static void case_late(void) {
        volatile int *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(res != MAP_FAILED);
        res[0] = res[1] = res[2] = -1;
        res[3] = 0;

        pid_t att = td_fork_as(U_STALLER, 0);
        if (att == 0)
                _exit(late_client(res));
        for (uint64_t t0 = now_ns(); res[1] < 0; usleep(res[3] ? 0 : 1000)) {
                if (res[3] == 1) {
                        /* the daemon stopped while the late move runs */
                        ASSERT_OK(kill(d.pid, SIGSTOP));
                        res[3] = 2;
                } else if (res[3] == 3) {
                        ASSERT_OK(kill(d.pid, SIGCONT));
                        res[3] = 4;
                } else if (res[3] == 5) {
                        ASSERT_OK(kill(d.pid, SIGCONT));
                        res[3] = 6;
                }
                int st;
                if (waitpid(att, &st, WNOHANG) == att)
                        test_fail("the client failed (status %d)", st);
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the client's mremap() or its late move has not returned in 120 s");
        }
        if (res[3] != 4)
                ASSERT_OK(kill(d.pid, SIGCONT)); /* the client was done before we looked */
        fprintf(stderr, "the late move took %d pages; %d of the new mapping's %d pages differ, %d of the moved ones\n",
                res[0], res[1], LATE_PAGES, res[2]);
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        ASSERT_EQ(res[0], 0);
        ASSERT_EQ(res[1], 0);
        ASSERT_EQ(res[2], 0);
}

static void case_stuck(void) {
        volatile int *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(res != MAP_FAILED);
        res[0] = res[1] = -1;

        pid_t att = td_fork_as(U_STALLER, 0);
        if (att == 0)
                _exit(stuck_client(&res[0], &res[1]));
        for (uint64_t t0 = now_ns(); res[1] < 0; usleep(10000)) {
                int st;
                if (waitpid(att, &st, WNOHANG) == att)
                        test_fail("the client failed (status %d)", st);
                if (now_ns() - t0 > 120 * 1000000000ull)
                        test_fail("the client's munmap() or its held move has not returned in 120 s");
        }
        fprintf(stderr, "the held move took %d pages; %d of the new mapping's %d pages differ\n", res[0], res[1],
                STALL_PAGES);
        ASSERT_EQ(res[0], 0);
        ASSERT_EQ(res[1], 0);
        ASSERT_TRUE(td_log_has(&d, "such moves are revoked"));
        double t = run_honest("after the held move");
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        fprintf(stderr, "honest 64 MiB pageout and read-back: %.2f s\n", t);
}

/* ---- ops ---- */

#define OPS_SENT 100000

static _Atomic uint64_t ops_replies;

/* Reads and counts the replies (and commands) on s until it ends. */
static void *ops_reader(void *arg) {
        int s = (int)(intptr_t)arg;
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
        uint64_t busy = 0;
        for (;;) {
                ssize_t n = zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL);
                if (n <= 0)
                        break;
                const ZMsgHeader *h = (const ZMsgHeader *)in;
                if (h->type == ZMSG_REPLY && ((const ZMsgReply *)in)->status == -EBUSY)
                        busy++;
                if (h->type == ZMSG_REPLY)
                        atomic_fetch_add(&ops_replies, 1);
        }
        return (void *)(uintptr_t)busy;
}

/* As U_STALLER (no max_requests): one raw client whose agent never
 * answers the MOVE of its first PAGEOUT, then OPS_SENT more PAGEOUTs of
 * the same pages, none of which can go on while the lane waits. *res:
 * the replies -EBUSY it got, once all are sent and a second has passed
 * (-1 before). */
static int ops_attack(volatile long *res) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
        uint8_t *staging = test_map(lane), *mem = test_map(STALL_PAGES * ZSWAP_PAGE_SIZE);
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
        int devfd, uffd;
        int s = raw_attach((uintptr_t)staging, &devfd, &uffd, -1);
        struct timeval tv = { .tv_sec = 0 };
        pthread_t th;
        ZMsgRange rg;

        raw_pageout_to_move(s, mem, 11, 7000, in);
        ASSERT_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        ASSERT_OK(-pthread_create(&th, NULL, ops_reader, (void *)(intptr_t)s));
        memset(&rg, 0, sizeof(rg));
        zmsg_init(&rg.hdr, ZMSG_PAGEOUT, 0, sizeof(rg));
        rg.addr = (uintptr_t)mem;
        rg.len = STALL_PAGES * ZSWAP_PAGE_SIZE;
        for (uint32_t i = 0; i < OPS_SENT; i++) {
                /* the daemon drops a client whose socket is full of
                 * replies it did not read: no more than 32 refusals
                 * unread (none come for the EVICT_OPS_MAX requests
                 * queued), however slowly our reader runs */
                uint64_t t0 = now_ns();
                while (atomic_load(&ops_replies) + 256 + 32 < i && now_ns() - t0 < (uint64_t)TEST_WAIT_S * 1000000000)
                        usleep(200);
                if (atomic_load(&ops_replies) + 256 + 32 < i)
                        break; /* no refusals come: nothing bounds the queue (the test says so) */
                rg.hdr.id = 10000 + i;
                if (zmsg_send(s, &rg, sizeof(rg), NULL, 0) < 0)
                        return 90;
        }
        sleep(1);
        shutdown(s, SHUT_RD);
        void *busy;
        pthread_join(th, &busy);
        *res = (long)(uintptr_t)busy;
        pause();
        return 0;
}

/*
 * ops: requests that wait for a lane whose MOVE the agent never answers
 * queue up on the client (evict.c, queue_op()): each PAGEOUT held is
 * memory of the manager's, locked, for as long as the connection lives.
 * A bound on what one client may have queued must turn the surplus away
 * (-EBUSY) and keep the daemon's memory where it was.
 */
static void case_ops(void) {
        volatile long *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(res != MAP_FAILED);
        *res = -1;
        uint64_t rss0 = td_rss_kb(&d);
        pid_t att = td_fork_as(U_STALLER, 0);
        if (att == 0)
                _exit(ops_attack(res));
        for (uint64_t t0 = now_ns(); *res < 0; usleep(10000)) {
                int st;
                if (waitpid(att, &st, WNOHANG) == att)
                        test_fail("the attacker failed (status %d)", st);
                if (now_ns() - t0 > 200 * 1000000000ull)
                        test_fail("the attacker has not sent its requests in 200 s");
        }
        uint64_t rss1 = td_rss_kb(&d);
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        fprintf(stderr,
                "%d PAGEOUTs behind a MOVE never answered: %ld refused (-EBUSY); daemon VmRSS %llu -> %llu kB\n",
                OPS_SENT, *res, (unsigned long long)rss0, (unsigned long long)rss1);
        if (rss1 > rss0 + 4096)
                test_fail("the daemon grew by %llu kB for one client's queued requests",
                          (unsigned long long)(rss1 - rss0));
        ASSERT_TRUE(*res > 0);
}

/* ---- fuse-lock ---- */

/* What the attacker has the daemon do while its mmap lock is held, a case
 * each: the manager's ioctls that take that lock for writing, and a read
 * of its pagemap while a writer waits for the lock. */
enum {
        LOCK_REGISTER, /* UFFDIO_REGISTER of the region */
        LOCK_ATTACH,   /* the proof's UFFDIO_REGISTER, on a second connection */
        LOCK_ARM,      /* the region armed for missing faults at its first PAGEOUT */
        LOCK_DETACH,   /* UFFDIO_UNREGISTER once the closed connection's pages are back */
        LOCK_QUEUED,   /* a PAGEOUT's /proc/PID/pagemap, behind a writer of ours */
        LOCK_CHURN,    /* ATTACHes whose proofs wait, each connection closed at once */
        LOCK_MOVED,    /* the pagemap reads that tell what a MOVE moved, behind a writer of ours */
        LOCK_ADOPT,    /* an ADOPT's reads of its address space, behind a writer of ours */
        LOCK_REMAP,    /* the fault thread's question whether an event is under way, after an mremap */
        LOCK_COPY,     /* a fault thread's copy into a mapping with no anon_vma */
        LOCK_COPIES,   /* the same by two processes of one user, one after the other */
        LOCK_UFFD,     /* the release of a uffd of ours sent with a request, our copy closed */
        LOCK_CASES,
};
static const char *const lock_case[LOCK_CASES] = { "fuse-lock",        "fuse-lock-attach", "fuse-lock-arm",
                                                   "fuse-lock-detach", "fuse-lock-queued", "fuse-lock-churn",
                                                   "fuse-lock-moved",  "fuse-lock-adopt",  "fuse-lock-remap",
                                                   "fuse-lock-copy",   "fuse-lock-copies", "fuse-lock-uffd-close" };
static const char *const lock_what[LOCK_CASES] = { "REGISTER",
                                                   "ATTACH",
                                                   "first PAGEOUT",
                                                   "close",
                                                   "PAGEOUT behind a queued mmap()",
                                                   "ATTACHes, closed at once",
                                                   "MOVE_DONE behind a queued mmap()",
                                                   "ADOPT behind a queued mmap()",
                                                   "mremap with a queued mmap() after it",
                                                   "fault in a mapping with no anon_vma",
                                                   "faults in mappings with no anon_vma",
                                                   "requests with uffds of ours, our copies closed" };
#define CHURN_MAX_CONNECTIONS 8 /* the attacker's max_connections in fuse-lock-churn */
#define CHURN_TRIES 40

/* fuse-lock-churn: up to CHURN_TRIES connections that each send HELLO and
 * ATTACH and close at once; how many the daemon took before it refused
 * our user. Each ATTACH hands over one of uffds[], made by the process
 * whose mmap lock is held (we fork from it before): the proof's
 * registration waits for that lock, while we, another address space, do
 * not wait for it. */
static int churn(uint8_t *staging, const int *uffds) {
        int made = 0;

        for (int i = 0; i < CHURN_TRIES; i++) {
                int devfd, s = raw_hello_try(&devfd);
                ZMsgAttach a;

                if (s < 0)
                        continue;
                close(devfd);
                memset(&a, 0, sizeof(a));
                zmsg_init(&a.hdr, ZMSG_ATTACH, 2, sizeof(a));
                a.staging_addr = (uintptr_t)staging + (uint64_t)i * ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
                a.staging_len = (uint64_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
                ASSERT_OK(zmsg_send(s, &a, sizeof(a), &uffds[i], 1));
                /* the daemon reads it before the close, which it reads
                 * after it (it sends nothing back before the proof) */
                close(s);
                made++;
        }
        return made;
}

/* The attacker's page shared with the test. */
typedef struct LockShared {
        _Atomic int stage;     /* how far the attacker got: lock_stage[] */
        _Atomic bool released; /* the test: the FUSE read has ended */
        _Atomic bool churned;  /* fuse-lock-churn: the connections are made */
        int status;            /* the request's reply (stage 2 on) */
        int64_t value;
        int bad;               /* pages of the region that differ (stage 3) */
        _Atomic int step;      /* within stage 0: the last of lock_step[] begun */
        bool missed;           /* fuse-lock-adopt: the walk ended before our writer waited */
        /* fuse-lock-copies: the attacker, its region moved, says ready and
         * takes its lock and faults once go is set */
        bool wait_go;
        _Atomic bool ready, go;
        _Atomic bool landed; /* fuse-lock-uffd-close: a daemon thread waits in a uffd's release */
        _Atomic int toucher_tid; /* fuse-lock-remap, -copy: the thread that faults */
} LockShared;
static const char *const lock_stage[] = { "setting up", "waiting for it to be done", "checking its pages", "done" };
enum { STEP_CLIENT, STEP_PAGEOUT, STEP_MAPPER, STEP_PROOF, STEP_READ, STEP_QUEUE };
static const char *const lock_step[] = { "connecting", "paging out and back", "starting its mapper",
                                         "waiting for its ADOPT's proof", "getting its READ to the server",
                                         "queueing its mmap()" };

static void *mem_reader(void *arg) {
        uint8_t b;
        int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
                (void)!pread(fd, &b, 1, (off_t)(uintptr_t)arg);
        return NULL;
}

/* fuse-lock-queued: once told, a thread of the attacker maps a page; its
 * mmap() waits for the mmap lock for writing, and every reader after it
 * waits behind it. */
static _Atomic bool mapper_go, mapper_done;
static _Atomic pid_t mapper_tid;

static void *mapper(void *arg) {
        (void)arg;
        atomic_store(&mapper_tid, (pid_t)syscall(SYS_gettid));
        while (!atomic_load(&mapper_go))
                usleep(1000);
        ASSERT_TRUE(mmap(NULL, ZSWAP_PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED);
        atomic_store(&mapper_done, true);
        return NULL;
}

/* Whether the mapper waits in the kernel (state D: for our mmap lock, all
 * it does); /proc/PID/task/TID/stat is read without that lock. */
static bool mapper_waits(void) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)atomic_load(&mapper_tid));
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
                close(fd);
        buf[n > 0 ? n : 0] = 0;
        const char *p = strrchr(buf, ')');
        return p && p[1] == ' ' && p[2] == 'D';
}

/* The mapper started: its stack mapped and, in the sanitizers' builds,
 * its runtime's thread state, which is mapped by the new thread itself
 * (were that later, its mmap() would be the queued writer, before ours). */
static void mapper_start(void) {
        pthread_t th;

        ASSERT_OK(-pthread_create(&th, NULL, mapper, NULL));
        while (!atomic_load(&mapper_tid))
                usleep(1000);
}

/* The FUSE file an attacker's lock waits on: "f", or "g" for a second
 * attacker (an open of a file waits for a read of it under way). */
static const char *fuse_file = "f";

/* A page of FUSE file fuse_file mapped, not read yet. */
static void *fuse_page(void) {
        char path[96];

        snprintf(path, sizeof(path), "%s/%s", fuse_dir, fuse_file);
        int f = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(f >= 0);
        void *p = mmap(NULL, ZSWAP_PAGE_SIZE, PROT_READ, MAP_PRIVATE, f, 0);
        ASSERT_TRUE(p != MAP_FAILED);
        return p;
}

/* Our mmap lock held for reading: a thread of ours reads page p of the
 * FUSE file through /proc/self/mem, and the server has the READ. */
static void lock_hold(void *p) {
        pthread_t th;
        int node = strcmp(fuse_file, "g") == 0 ? 3 : 2, before = fuse_reads[node];

        ASSERT_OK(-pthread_create(&th, NULL, mem_reader, p));
        while (fuse_reads[node] <= before)
                usleep(1000);
}

/* The mapper's mmap() queued behind the read: a writer of ours waits. */
static void lock_queue(void) {
        atomic_store(&mapper_go, true);
        while (!mapper_waits()) {
                if (atomic_load(&mapper_done))
                        test_fail("our mmap() did not wait for our mmap lock");
                usleep(1000);
        }
}

/* On raw connection s: a request of type for [mem, mem + len); its status. */
static int raw_range(int s, uint16_t type, void *mem, size_t len) {
        ZMsgRange rg;

        memset(&rg, 0, sizeof(rg));
        zmsg_init(&rg.hdr, type, 0, sizeof(rg));
        rg.addr = (uintptr_t)mem;
        rg.len = len;
        return raw_request(s, &rg, NULL, 0, NULL, NULL);
}

/*
 * fuse-lock-attach: ATTACH on a connection of its own, sent and answered
 * by the main thread. (A thread made for it would be one more thread that
 * could take our mmap lock for writing once it is held: the sanitizers'
 * runtimes map memory lazily, and that mmap() would queue behind the
 * FUSE read, a writer of our own, fuse-lock-queued's case.)
 */
static int attach_send(int s, void *staging, int uffd) {
        ZMsgAttach a;

        memset(&a, 0, sizeof(a));
        zmsg_init(&a.hdr, ZMSG_ATTACH, 7, sizeof(a));
        a.staging_addr = (uintptr_t)staging;
        a.staging_len = (uint64_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
        return zmsg_send(s, &a, sizeof(a), &uffd, 1);
}

/* The ATTACH's answer on s: its status. */
static int attach_answer(int s) {
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];

        for (;;) {
                int got[4];
                size_t ngot = ELEMENTSOF(got);
                if (zmsg_recv(s, in, sizeof(in), got, &ngot, NULL) <= 0)
                        return -EPIPE;
                for (size_t i = 0; i < ngot; i++)
                        close(got[i]);
                const ZMsgReply *r = (const ZMsgReply *)in;
                if (r->hdr.type == ZMSG_REPLY && r->hdr.id == 7)
                        return r->status;
        }
}

/* fuse-lock-uffd-close: threads made before our lock is held (a thread
 * made after would wait for it: its stack is an mmap()), each closing
 * the descriptor it is given. A close that is the last is the uffd's
 * release, which waits for our lock: only that thread waits. */
#define UFFD_TRIES 8
static _Atomic int uffd_to_close[UFFD_TRIES];

static void *uffd_closer(void *arg) {
        _Atomic int *slot = arg;
        int fd;
        while (!(fd = atomic_load(slot)))
                sched_yield();
        close(fd - 1);
        return NULL;
}

/*
 * As U_STALLER: a raw client (its agent raw_agent) with STALL_PAGES pages
 * of known content, set up for case kind; then a page of FUSE file "f"
 * mapped and read by a thread of ours through /proc/self/mem (the kernel
 * holds our mmap lock for reading while it waits for the server), and,
 * once the server has the READ, the request made. When the test says the
 * read has ended: the pages checked. Progress in st.
 */
static int fuse_lock_attack(int kind, LockShared *st) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE, len = STALL_PAGES * ZSWAP_PAGE_SIZE;
        uint8_t *staging = test_map(lane), *staging2 = test_map(lane), *mem = test_map(len);
        uint64_t hashes[STALL_PAGES];
        int devfd, s2 = -1, uffd2 = -1;

        atomic_store(&st->stage, 0); /* the shared page faulted in while nothing waits for our lock */
        ASSERT_OK(madvise(mem, len, MADV_NOHUGEPAGE));
        int s = raw_sync_client(staging, lane, &devfd, &raw_agent.uffd, &raw_agent.sync);
        raw_agent.staging = staging;
        fill_pages(mem, len, 17);
        hash_pages(mem, len, hashes);
        bool queued = kind == LOCK_QUEUED || kind == LOCK_MOVED;
        atomic_store(&st->step, STEP_PAGEOUT);
        if (kind == LOCK_ATTACH || kind == LOCK_ARM || kind == LOCK_DETACH || queued)
                ASSERT_EQ(raw_range(s, ZMSG_REGISTER, mem, len), 0);
        if (kind == LOCK_ATTACH || kind == LOCK_DETACH || queued) {
                /* pages out (for the detach to bring back), the region armed */
                ASSERT_EQ(raw_range(s, ZMSG_PAGEOUT, mem, len), 0);
                ASSERT_TRUE(raw_value > 0);
        }
        if (kind == LOCK_ATTACH || queued)
                /* and back in, for the next PAGEOUT to take */
                ASSERT_EQ(verify_pages(mem, len, hashes), 0);
        atomic_store(&st->step, STEP_MAPPER);
        if (queued)
                mapper_start();
        pid_t churner = -1;
        if (kind == LOCK_CHURN) {
                /* the uffds of our address space, to a process of its own
                 * that churns once our lock is held (stage 1) */
                int uffds[CHURN_TRIES];
                for (int i = 0; i < CHURN_TRIES; i++)
                        ASSERT_TRUE((uffds[i] = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK)) >= 0);
                churner = fork();
                ASSERT_TRUE(churner >= 0);
                if (churner == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        uint8_t *staging3 = test_map(CHURN_TRIES * lane);
                        while (atomic_load(&st->stage) < 1)
                                usleep(10000);
                        st->value = churn(staging3, uffds);
                        /* said before we exit: closing the uffds of an
                         * address space takes its mmap lock */
                        atomic_store(&st->churned, true);
                        pause();
                        _exit(0);
                }
                for (int i = 0; i < CHURN_TRIES; i++)
                        close(uffds[i]);
        }
        if (kind == LOCK_UFFD)
                for (int i = 0; i < UFFD_TRIES; i++) {
                        pthread_t th;
                        ASSERT_OK(-pthread_create(&th, NULL, uffd_closer, &uffd_to_close[i]));
                        pthread_detach(th);
                }
        if (kind == LOCK_ATTACH) {
                s2 = raw_hello(&devfd);
                uffd2 = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
                ASSERT_TRUE(uffd2 >= 0);
        }

        ZMsgRange moved_rq;
        ZMsgMoveDone moved_done;
        if (kind == LOCK_MOVED) {
                /* a PAGEOUT whose MOVE we make now and answer (MOVE_DONE)
                 * only once our lock is held and our writer waits: the
                 * daemon then reads what moved */
                _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
                memset(&moved_rq, 0, sizeof(moved_rq));
                zmsg_init(&moved_rq.hdr, ZMSG_PAGEOUT, 555, sizeof(moved_rq));
                moved_rq.addr = (uintptr_t)mem;
                moved_rq.len = len;
                ASSERT_OK(zmsg_send(s, &moved_rq, sizeof(moved_rq), NULL, 0));
                do
                        ASSERT_TRUE(zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL) > 0);
                while (((ZMsgHeader *)in)->type != ZMSG_MOVE);
                const ZMsgMove *mv = (const ZMsgMove *)in;
                moved_done = (ZMsgMoveDone){ .npages = mv->npages };
                ASSERT_TRUE(zsync_move_begin(raw_agent.sync));
                ASSERT_TRUE(raw_move(raw_agent.uffd, raw_agent.staging, mv, &moved_done) > 0);
                zsync_move_end(raw_agent.sync);
                zmsg_init(&moved_done.hdr, ZMSG_MOVE_DONE, mv->hdr.id, sizeof(moved_done));
        }

        atomic_store(&st->step, STEP_READ);
        lock_hold(fuse_page());
        usleep(100 * 1000);
        atomic_store(&st->step, STEP_QUEUE);
        if (queued)
                lock_queue();
        /* the answer may wait as long as the test lets it */
        struct timeval tv = { .tv_sec = 0 };
        ASSERT_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        if (s2 >= 0)
                ASSERT_OK(setsockopt(s2, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        atomic_store(&st->stage, 1);
        raw_value = 0;
        if (kind == LOCK_ATTACH) {
                /* the ATTACH's proof waits for our lock; meanwhile the
                 * first connection's PAGEOUT must not be planned (its
                 * pagemap read would queue behind the proof) */
                ASSERT_OK(attach_send(s2, staging2, uffd2));
                usleep(200 * 1000);
                int r = raw_range(s, ZMSG_PAGEOUT, mem, len);
                int ra = attach_answer(s2);
                st->status = r ? r : ra;
        } else if (kind == LOCK_UFFD) {
                /* a uffd of ours with a request the daemon answers
                 * without it, our copy closed at once: once the daemon's
                 * copy is the last (its close did not come first), its
                 * close waits for our lock. Requests without one go
                 * first, so that the daemon reads ours late: 96 of them,
                 * a few ms of the manager's work (32 were not always
                 * enough on a busy 2-CPU machine under ASan: each of 8
                 * tries lost that race). Again until the test sees a
                 * thread of the daemon wait in that release */
                for (int i = 0; i < UFFD_TRIES && !atomic_load(&st->landed); i++) {
                        int u = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
                        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
                        ZMsgStatsReq q;
                        /* the answers so far read: a socket we do not read
                         * is one the daemon drops */
                        while (recv(s, in, sizeof(in), MSG_DONTWAIT) > 0)
                                ;
                        ASSERT_TRUE(u >= 0);
                        memset(&q, 0, sizeof(q));
                        zmsg_init(&q.hdr, ZMSG_STATS, 900 + i, sizeof(q));
                        for (int k = 0; k < 96; k++)
                                ASSERT_OK(zmsg_send(s, &q, sizeof(q), NULL, 0));
                        ASSERT_OK(zmsg_send(s, &q, sizeof(q), &u, 1));
                        atomic_store(&uffd_to_close[i], u + 1);
                        st->value = i + 1; /* uffds sent */
                        for (int w = 0; w < 50 && !atomic_load(&st->landed); w++)
                                usleep(10000);
                }
                while (!atomic_load(&st->released))
                        usleep(10000);
                st->status = 0;
        } else if (kind == LOCK_DETACH) {
                close(s);
                /* no answer: done once the daemon has unregistered the
                 * region (a look at our mappings takes our mmap lock:
                 * not before the read has ended) */
                while (!atomic_load(&st->released))
                        usleep(10000);
                while (vma_uffd_registered(mem))
                        usleep(10000);
                st->status = 0;
        } else if (kind == LOCK_CHURN) {
                while (!atomic_load(&st->churned))
                        usleep(10000);
                st->status = 0;
        } else if (kind == LOCK_MOVED) {
                ASSERT_OK(zmsg_send(s, &moved_done, sizeof(moved_done), NULL, 0));
                st->status = raw_reply(s, moved_rq.hdr.id, NULL, NULL);
        } else
                st->status = raw_range(s, kind == LOCK_REGISTER ? ZMSG_REGISTER : ZMSG_PAGEOUT, mem, len);
        if (kind != LOCK_CHURN)
                st->value = raw_value;
        atomic_store(&st->stage, 2);
        while (!atomic_load(&st->released))
                usleep(10000);
        st->bad = (int)verify_pages(mem, len, hashes);
        atomic_store(&st->stage, 3);
        pause();
        return 0;
}

/* fuse-lock-adopt: the entries of the store we hand over, each an install
 * of a same-filled page a dead daemon left under way (PE_LOADING): the
 * adoption reads the pagemap of each to tell whether it happened. */
#define ADOPT_PAGES (512u * 1024)
#define ADOPT_FILL 0x5a17c0deu

/* Is the page the proof registered (write-protect only, in [lo, hi)) in
 * our smaps: is the proof done? */
static bool proof_done(uintptr_t lo, uintptr_t hi) {
        FILE *f = fopen("/proc/self/smaps", "re");
        char line[512];
        bool in = false, done = false;

        ASSERT_TRUE(f != NULL);
        while (!done && fgets(line, sizeof(line), f)) {
                unsigned long long s, e;
                if (sscanf(line, "%llx-%llx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' '))
                        in = s >= lo && e <= hi;
                else if (in && strncmp(line, "VmFlags:", 8) == 0)
                        done = strstr(line, " uw") && !strstr(line, " um");
        }
        fclose(f);
        return done;
}

/*
 * As U_STALLER: a store of our own, of ADOPT_PAGES entries over a region
 * registered on a uffd of ours, handed over by ADOPT. Once the proof is
 * done, a page of FUSE file "f" read by a thread of ours through
 * /proc/self/mem (our mmap lock held for reading) and the mapper's mmap()
 * queued behind it, while the adoption walks the entries. When the test
 * says the read has ended: the ADOPT's answer, and a page in every 256
 * checked. Progress in st.
 */
/*
 * A store of our own for ADOPT on a new raw connection (returned), of
 * ADOPT_PAGES entries each `entry`, over a region at *mem registered for
 * missing faults on a uffd of ours with the given features; the ADOPT
 * sent (id 9, staging area *staging), its answer not read. With touched,
 * a page of the region was written and dropped before: its mapping has
 * its anon_vma, so that a copy into it takes only the mapping's own lock,
 * not the mmap lock (mm/userfaultfd.c uffd_lock_vma()).
 */
static int adopt_forged(uint64_t entry, uint64_t features, bool touched, uint8_t **mem_out,
                        uint8_t **staging_out) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE, len = (size_t)ADOPT_PAGES * ZSWAP_PAGE_SIZE;
        const size_t zone = (size_t)STORE_LEAF_ENTRIES * ZSWAP_PAGE_SIZE;
        uint8_t *staging = test_map(lane), *map = NULL;
        int devfd;

        /* the region at a leaf's boundary (a leaf covers a zone) */
        uint8_t *raw = mmap(NULL, len + zone, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
        ASSERT_TRUE(raw != MAP_FAILED);
        uint8_t *mem = (uint8_t *)ALIGN_TO((uintptr_t)raw, zone);
        if (touched) {
                mem[0] = 1;
                ASSERT_OK(madvise(mem, ZSWAP_PAGE_SIZE, MADV_DONTNEED));
        }
        int s = raw_hello(&devfd);
        int uffd = ioctl(devfd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        ASSERT_TRUE(uffd >= 0);
        close(devfd);
        ASSERT_OK(ioctl(uffd, UFFDIO_API, &(struct uffdio_api){ .api = UFFD_API, .features = features }));
        struct uffdio_register rg = { .range = { .start = (uintptr_t)mem, .len = len },
                                      .mode = UFFDIO_REGISTER_MODE_MISSING };
        ASSERT_OK(ioctl(uffd, UFFDIO_REGISTER, &rg));
        int sfd = store_create(CODEC_LZ4, 0, 0x5eed, &map);
        ASSERT_TRUE(sfd >= 0);
        StoreRange *t = store_ranges_begin(map);
        t[0] = (StoreRange){ (uintptr_t)mem, (uintptr_t)mem + len };
        store_ranges_commit(map, 1);
        const uint32_t leaves = ADOPT_PAGES / STORE_LEAF_ENTRIES;
        for (uint32_t l = 0; l < leaves; l++) {
                atomic_store(&store_dir(map)[l], ((uintptr_t)mem + l * zone) | STORE_DIR_USED);
                for (uint32_t j = 0; j < STORE_LEAF_ENTRIES; j++)
                        atomic_store(&store_leaf(map, l)[j], entry);
        }
        atomic_store(&store_super(map)->leaves, leaves);

        ZMsgAttach a;
        memset(&a, 0, sizeof(a));
        zmsg_init(&a.hdr, ZMSG_ADOPT, 9, sizeof(a));
        a.staging_addr = (uintptr_t)staging;
        a.staging_len = lane;
        struct timeval tv = { .tv_sec = 0 };
        ASSERT_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
        ASSERT_OK(zmsg_send(s, &a, sizeof(a), (int[]){ uffd, sfd }, 2));
        close(uffd);
        close(sfd);
        *mem_out = mem;
        *staging_out = staging;
        return s;
}

/* Pages of [mem, mem + ADOPT_PAGES pages) that do not read as ADOPT_FILL,
 * one in every 256 looked at. */
static int adopt_fill_bad(const uint8_t *mem) {
        int bad = 0;

        for (size_t i = 0; i < ADOPT_PAGES; i += 256) {
                const uint32_t *w = (const uint32_t *)(mem + i * ZSWAP_PAGE_SIZE);
                for (size_t k = 0; k < ZSWAP_PAGE_SIZE / sizeof(*w); k++)
                        if (w[k] != ADOPT_FILL) {
                                bad++;
                                break;
                        }
        }
        return bad;
}

static int fuse_lock_adopt(LockShared *st) {
        const size_t lane = (size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE;
        uint8_t *mem, *staging;

        atomic_store(&st->step, STEP_MAPPER);
        mapper_start();
        void *p = fuse_page();
        int s = adopt_forged(pe_make_loading(pe_make_same(ADOPT_FILL)), 0, false, &mem, &staging);
        atomic_store(&st->step, STEP_PROOF);
        while (!proof_done((uintptr_t)staging, (uintptr_t)staging + lane))
                usleep(1000);
        atomic_store(&st->step, STEP_READ);
        lock_hold(p);
        atomic_store(&st->step, STEP_QUEUE);
        lock_queue();
        /* answered already: the walk was done before our writer waited */
        st->missed = poll(&(struct pollfd){ .fd = s, .events = POLLIN }, 1, 0) != 0;
        atomic_store(&st->stage, 1);
        raw_value = 0;
        st->status = raw_reply(s, 9, NULL, NULL);
        st->value = raw_value;
        atomic_store(&st->stage, 2);
        while (!atomic_load(&st->released))
                usleep(10000);
        st->bad = st->status == 0 ? adopt_fill_bad(mem) : 0;
        atomic_store(&st->stage, 3);
        pause();
        return 0;
}

/* fuse-lock-remap: once given a page, a thread of the attacker reads it
 * (a fault, once the page is moved); what it read in toucher_read. */
static _Atomic(volatile uint32_t *) toucher_page;
static _Atomic uint32_t toucher_read;

static void *toucher(void *arg) {
        LockShared *st = arg;
        volatile uint32_t *w;

        atomic_store(&st->toucher_tid, (int)syscall(SYS_gettid));
        while (!(w = atomic_load(&toucher_page)))
                usleep(1000);
        atomic_store(&toucher_read, *w);
        return NULL;
}

/*
 * As U_STALLER, on a daemon with one fault thread: a store of ours of
 * ADOPT_PAGES same-filled pages adopted, the region moved with
 * mremap(MREMAP_DONTUNMAP) (no UNMAP of the old range follows), and at
 * once our lock held and the mapper's mmap() queued, while the fault
 * thread walks the moved entries. When the test says the read has
 * ended: a page in every 256 at the new address checked. Progress in st.
 */
static int fuse_lock_remap(LockShared *st, bool touched) {
        const size_t len = (size_t)ADOPT_PAGES * ZSWAP_PAGE_SIZE;
        uint8_t *mem, *staging;

        atomic_store(&st->step, STEP_MAPPER);
        mapper_start();
        pthread_t th;
        ASSERT_OK(-pthread_create(&th, NULL, toucher, st));
        void *p = fuse_page();
        int s = adopt_forged(pe_make_same(ADOPT_FILL),
                             UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
                                     UFFD_FEATURE_MOVE | UFFD_FEATURE_THREAD_ID,
                             touched, &mem, &staging);
        st->status = raw_reply(s, 9, NULL, NULL);
        ASSERT_EQ(st->status, 0);
        st->value = raw_value;
        atomic_store(&st->step, STEP_READ);
        /* the new address named (NULL: any), or glibc passes the kernel
         * whatever its register held, a hint it may refuse */
        uint8_t *moved = mremap(mem, len, len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
        if (moved == MAP_FAILED) {
                char fl[256] = "";
                int e = errno;
                vma_flags(mem, fl, sizeof(fl));
                test_fail("mremap(MREMAP_DONTUNMAP) of the adopted region at %p: %s; its mapping's flags: %s", mem,
                          strerror(e), fl);
        }
        atomic_store(&st->ready, true);
        while (st->wait_go && !atomic_load(&st->go))
                usleep(1000);
        lock_hold(p);
        atomic_store(&st->step, STEP_QUEUE);
        lock_queue();
        /* and a fault of ours, which the kernel sends under the
         * mapping's own lock, not the mmap lock: the fault thread reads
         * our uffd again and asks again whether the kernel has an UNMAP
         * to send, should the walk have ended before our writer waited.
         * (Once served, the fault is retried under the mmap lock: the
         * toucher waits there until the lock is free.) */
        atomic_store(&toucher_page, (volatile uint32_t *)(moved + 7 * ZSWAP_PAGE_SIZE));
        atomic_store(&st->stage, 1);
        atomic_store(&st->stage, 2);
        while (!atomic_load(&st->released))
                usleep(10000);
        ASSERT_OK(-pthread_join(th, NULL));
        ASSERT_EQ(atomic_load(&toucher_read), ADOPT_FILL);
        st->bad = adopt_fill_bad(moved);
        atomic_store(&st->stage, 3);
        pause();
        return 0;
}

/* The daemon's threads now. */
static unsigned daemon_threads(void) {
        char path[64], v[64];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
        ASSERT_TRUE(td_status_field(path, "Threads", v, sizeof(v)));
        return (unsigned)strtoul(v, NULL, 10);
}

/* Whether a thread of process pid waits in the kernel function fn (its
 * kernel stack, /proc/PID/task/TID/stack, names it). */
static bool pid_waits_in(pid_t pid, const char *fn) {
        char path[96], line[256];
        bool found = false;
        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        DIR *dir = opendir(path);

        ASSERT_TRUE(dir != NULL);
        for (struct dirent *e; !found && (e = readdir(dir));) {
                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stack", (int)pid, e->d_name);
                FILE *f = fopen(path, "re");
                while (f && !found && fgets(line, sizeof(line), f))
                        found = strstr(line, fn) != NULL;
                if (f)
                        fclose(f);
        }
        closedir(dir);
        return found;
}

/* As root, with libzswap, in a process of its own: 1 MiB paged out and
 * read back, and with unregister, paged out again, unregistered (a sync
 * and a restore: its home thread's work) and read again, intact within
 * 30 s; or not (said). */
static bool root_served(uint64_t seed, bool unregister) {
        pid_t pid = fork();
        int st;

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                size_t len = 1 << 20;
                uint64_t hashes[256];
                struct zswap_client *c;

                alarm(30);
                if (zswap_connect(d.sock, &c) < 0)
                        _exit(1);
                uint8_t *buf = td_region(c, len, seed, hashes);
                if (td_pageout_want(c, buf, len, 1) <= 0)
                        _exit(2);
                if (verify_pages(buf, len, hashes) != 0)
                        _exit(3);
                if (!unregister)
                        _exit(0);
                if (td_pageout_want(c, buf, len, 1) <= 0)
                        _exit(4);
                if (zswap_unregister(c, buf, len) < 0)
                        _exit(5);
                _exit(verify_pages(buf, len, hashes) == 0 ? 0 : 6);
        }
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return true;
        fprintf(stderr, "root's client (seed %llu): %s %d\n", (unsigned long long)seed,
                WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return false;
}

/* Root's faults served: a client pages out and reads back. */
static bool faults_served(void) {
        return root_served(5, false);
}

/* Root's faults and its home threads' work served: two clients in a row
 * (with two fault threads, one of them is home to each) page out, read
 * back and unregister. */
static bool home_work_served(void) {
        return root_served(11, true) && root_served(12, true);
}

static bool lock_wait(pid_t att, LockShared *st, int stage, unsigned seconds);

/* Has the daemon said that a fault thread waits in a call into pid (within
 * TEST_WAIT_S)? */
static bool held_said(pid_t pid) {
        char said[128];
        snprintf(said, sizeof(said), "has waited more than a second in a call into pid %d (uid %d)", (int)pid,
                 U_STALLER);
        for (int i = 0; i < TEST_WAIT_S * 10; i++) {
                if (td_log_has(&d, said))
                        return true;
                usleep(100 * 1000);
        }
        return false;
}

/* Why the case was skipped (main says so once the daemon is stopped). */
static const char *skipped;
#define COPY_NOT_SENT                                                                                              \
        "this kernel takes the mmap lock for a fault in a registered mapping with no anon_vma: the attacker's "    \
        "fault waits for its own lock in the page fault and never reaches the daemon, so no copy can be made to "  \
        "wait for it (the attack needs the fault sent under the mapping's own lock)"

/*
 * fuse-lock-copy's attack, once the attacker (st, att) has faulted:
 * whether the kernel sent the fault to the daemon (its thread waits in
 * handle_userfault, and the daemon's copy is what waits for the lock).
 * False if the thread waits for the attacker's own mmap lock in the page
 * fault itself (lock_mm_and_find_vma): one 6.18 build here takes the mmap
 * lock for such a fault, another sends it under the mapping's own lock.
 * Waits for either, up to TEST_WAIT_S; neither: true, and the case's own
 * checks say what happened.
 */
static bool copy_fault_sent(LockShared *st, pid_t att) {
        char path[96], line[256];

        for (int i = 0; i < TEST_WAIT_S * 100; i++, usleep(10000)) {
                int tid = atomic_load(&st->toucher_tid), where = -1;
                if (!tid || atomic_load(&st->stage) < 2)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%d/stack", (int)att, tid);
                FILE *f = fopen(path, "re");
                while (f && where < 0 && fgets(line, sizeof(line), f))
                        where = strstr(line, "handle_userfault") ? 1 : strstr(line, "lock_mm_and_find_vma") ? 0 : -1;
                if (f)
                        fclose(f);
                if (where >= 0)
                        return where;
        }
        return true;
}

/*
 * fuse-lock-copies: fuse-lock-copy's attack by two processes of one user,
 * on two fault threads, the second once the first holds its thread. The
 * second must not get the other thread too, or no thread would be left
 * for root's faults, syncs and restores: while the first's call lasts, no
 * thread reads the second's uffd (Core.held_uid), and its fault waits (as
 * every event and fault of that user's processes). With together, both
 * fault at once, each holds a thread before the manager sees either, and
 * a spare thread must start. Once the locks are free, both attackers'
 * pages read as their stores say.
 */
static void case_fuse_lock_copies(bool together) {
        LockShared *st[2];
        pid_t att[2];

        /* both set up (a store adopted, the region moved) before either
         * holds its lock: a job of the user's that waits for one's lock
         * holds up the user's other jobs (mmjob.h) */
        fuse_start();
        for (int k = 0; k < 2; k++) {
                st[k] = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
                ASSERT_TRUE(st[k] != MAP_FAILED);
                st[k]->bad = -1;
                st[k]->wait_go = true;
                att[k] = td_fork_as(U_STALLER, 0);
                if (att[k] == 0) {
                        fuse_file = k ? "g" : "f";
                        _exit(fuse_lock_remap(st[k], false));
                }
        }
        for (int k = 0; k < 2; k++) {
                uint64_t t0 = now_ns();
                while (!atomic_load(&st[k]->ready)) {
                        if (now_ns() - t0 > 60 * 1000000000ull) {
                                td_dump_stacks(att[k], "an attacker");
                                test_fail("attacker %d was still %s in 60 s", k, lock_step[atomic_load(&st[k]->step)]);
                        }
                        if (waitpid(att[k], NULL, WNOHANG) == att[k])
                                test_fail("attacker %d failed when %s", k, lock_step[atomic_load(&st[k]->step)]);
                        usleep(10000);
                }
        }
        atomic_store(&st[0]->go, true);
        if (together)
                atomic_store(&st[1]->go, true);
        if (!copy_fault_sent(st[0], att[0])) {
                fuse_stop();
                for (int k = 0; k < 2; k++) {
                        atomic_store(&st[k]->released, true);
                        kill(att[k], SIGKILL);
                        waitpid(att[k], NULL, 0);
                }
                skipped = COPY_NOT_SENT;
                return;
        }
        if (together) {
                /* both fault at once: each holds a thread before the
                 * manager sees either held, and a spare starts */
                bool both = held_said(att[0]) && held_said(att[1]);
                fprintf(stderr, "%s\n", both ? "both attackers hold a fault thread"
                                            : "the attackers' faults did not come together: one holds a thread, the "
                                              "other's waits");
        } else {
                if (!held_said(att[0])) {
                        td_dump_stacks(d.pid, "zswapd");
                        td_log_dump(&d);
                        test_fail("the daemon did not say that a fault thread waits in a copy into the first attacker");
                }
                atomic_store(&st[1]->go, true);
                if (!lock_wait(att[1], st[1], 2, 60)) {
                        td_dump_stacks(att[1], "the second attacker");
                        test_fail("the second attacker was still %s in 60 s", lock_step[atomic_load(&st[1]->step)]);
                }
                usleep(500 * 1000); /* its fault is sent */
        }
        bool served = home_work_served();
        fprintf(stderr, "with two attackers' mmap locks held by FUSE, a fault in a mapping with no anon_vma made by "
                        "each, %s: root's faults, syncs and restores %s\n",
                together ? "at once" : "one after the other", served ? "served" : "not served in 30 s");
        if (!served)
                td_dump_stacks(d.pid, "zswapd");
        /* the server goes: the reads fail, and the locks are let go */
        fuse_stop();
        for (int k = 0; k < 2; k++)
                atomic_store(&st[k]->released, true);
        bool done = true;
        for (int k = 0; k < 2; k++) {
                bool ok = lock_wait(att[k], st[k], 3, TEST_WAIT_S);
                fprintf(stderr, "once the reads ended: attacker %d %s (%d, value %lld); %d of %d pages differ\n", k,
                        ok ? "done" : "not done", st[k]->status, (long long)st[k]->value, st[k]->bad,
                        (int)(ADOPT_PAGES / 256));
                done &= ok;
        }
        for (int k = 0; k < 2; k++) {
                kill(att[k], SIGKILL);
                waitpid(att[k], NULL, 0);
        }
        if (!served)
                test_fail("two processes of one user held both fault threads");
        if (!done)
                test_fail("an attacker's fault was not served once its lock was free");
        for (int k = 0; k < 2; k++) {
                ASSERT_EQ(st[k]->status, 0);
                ASSERT_EQ(st[k]->bad, 0);
                ASSERT_EQ(st[k]->value, (int64_t)ADOPT_PAGES);
        }
}

/*
 * fuse-lock-tier: a daemon with one fault thread and a second tier on
 * nbd-server. Root's client has pages on the tier; the server stops
 * answering (SIGSTOP) while root's reader waits in a fault on one of
 * them, whose read is the fault thread's (its pump). Then the attacker
 * holds that thread in a copy (fuse-lock-copy's attack), and the server
 * goes on: the read comes back to a thread held in a call. Another thread
 * (a spare) must take what came back and install it, and root's reader
 * must read every page while the call still holds the thread (a daemon
 * that left the read's completion to the thread that made it served
 * root's page only once the attacker let its lock go).
 */
#define TIER_POOL (4u << 20)
#define TIER_DATA (4 * TIER_POOL)
#define TIER_NPAGES ((unsigned)(TIER_DATA / ZSWAP_PAGE_SIZE))

static TdNbd nbd;
static pid_t nbd_owner;

/* At exit, however the case ends: the servers, and the tier's key. */
static void nbd_cleanup(void) {
        char key[64];

        if (getpid() != nbd_owner)
                return;
        td_nbd_remove(&nbd);
        snprintf(key, sizeof(key), "/tmp/test-dos-%d.key", (int)getpid());
        unlink(key);
}

/* Before the daemon starts: the server, and its [tier] in conf. */
static void tier_conf(FILE *conf) {
        if (!td_nbd_installed())
                test_skip("nbd-server is not installed (scripts/setup-deps.sh installs it)");
        nbd_owner = getpid();
        atexit(nbd_cleanup);
        td_nbd_start(&nbd);
        /* a read stalls as long as the server does: no timeout ends it */
        fprintf(conf, "[tier]\nbacking = nbd://127.0.0.1:%d/tier\nkey = /tmp/test-dos-%d.key\ntimeout = 10m\nsize = 64M\n",
                nbd.port, (int)getpid());
}

static void case_fuse_lock_tier(void) {
        static uint64_t hashes[TIER_NPAGES];
        LockShared *st = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(st != MAP_FAILED);
        st->bad = -1;
        st->wait_go = true;
        uint64_t begun = now_ns();
#define SAY(...) (fprintf(stderr, "[%5.1f s] ", (double)(now_ns() - begun) / 1e9), fprintf(stderr, __VA_ARGS__))

        /* the attacker set up (a store adopted, the region moved) first,
         * forked before root's client has a region to fork */
        fuse_start();
        pid_t att = td_fork_as(U_STALLER, 0);
        if (att == 0)
                _exit(fuse_lock_remap(st, false));
        for (uint64_t t0 = now_ns(); !atomic_load(&st->ready); usleep(10000)) {
                if (now_ns() - t0 > 60 * 1000000000ull) {
                        td_dump_stacks(att, "the attacker");
                        test_fail("the attacker was still %s in 60 s", lock_step[atomic_load(&st->step)]);
                }
                if (waitpid(att, NULL, WNOHANG) == att)
                        test_fail("the attacker failed when %s", lock_step[atomic_load(&st->step)]);
        }

        SAY("the attacker is set up\n");
        /* root's pages, four times the pool: most of them on the tier */
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, TIER_DATA, 0x71e4, hashes);
        ZMsgStatusReply s;
        td_tier_fill(&d, c, buf, TIER_DATA, TIER_NPAGES / 4);
        /* the writer settled: little of ours is written while stopped */
        td_tier_settled(&d, &s);

        SAY("%llu of root's pages on the tier\n", (unsigned long long)s.tier_pages);
        /* the server stops; root's reader waits at a page of the tier
         * (its progress stands still for a second) */
        td_nbd_pause(&nbd);
        TdPageReader r = { .buf = buf, .hashes = hashes, .npages = TIER_NPAGES };
        pthread_t th;
        ASSERT_OK(-pthread_create(&th, NULL, td_page_reader, &r));
        size_t waited_at = td_page_reader_stall(&r, "root's reader, the tier stopped");
        SAY("root's reader waits at page %zu for the stopped tier\n", waited_at);

        /* the attacker holds the fault thread in a copy */
        atomic_store(&st->go, true);
        if (!copy_fault_sent(st, att)) {
                td_nbd_resume(&nbd);
                ASSERT_OK(-pthread_join(th, NULL));
                ASSERT_EQ(atomic_load(&r.bad), 0);
                fuse_stop();
                atomic_store(&st->released, true);
                kill(att, SIGKILL);
                waitpid(att, NULL, 0);
                zswap_disconnect(c);
                skipped = COPY_NOT_SENT;
                return;
        }
        if (!held_said(att)) {
                td_dump_stacks(d.pid, "zswapd");
                td_log_dump(&d);
                test_fail("the daemon did not say that its fault thread waits in a copy into the attacker");
        }
        ASSERT_EQ(atomic_load(&r.at), waited_at); /* still waiting for the tier */
        SAY("the fault thread is held in a call into the attacker\n");

        /* the server goes on: the read comes back to the held thread */
        td_log_mark(&d, "the nbd server goes on, the fault thread held");
        td_nbd_resume(&nbd);
        for (uint64_t t0 = now_ns(); !atomic_load(&r.done); usleep(10000)) {
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull) {
                        td_dump_stacks(d.pid, "zswapd");
                        td_log_dump(&d);
                        test_fail("with the fault thread held in a call into the attacker, root's reader, which "
                                  "waited at page %zu for the tier, read %zu of %u pages in %d s",
                                  waited_at, atomic_load(&r.at), TIER_NPAGES, TEST_WAIT_S);
                }
        }
        /* the call held the thread all along: the FUSE server still
         * answers nothing */
        bool held = atomic_load(&st->stage) < 3 && pid_waits_in(att, "fuse");
        td_status(&d, &s);
        SAY("root's reader, which waited at page %zu for the stopped tier, read all %u pages (%zu differ) "
                        "with the fault thread held in a call into the attacker%s; %llu items of held threads taken\n",
                waited_at, TIER_NPAGES, atomic_load(&r.bad), held ? "" : " (no longer?)",
                (unsigned long long)s.work_taken);
        ASSERT_OK(-pthread_join(th, NULL));
        ASSERT_EQ(atomic_load(&r.bad), 0);
        ASSERT_TRUE(s.work_taken > 0);

        SAY("the attacker's FUSE server goes\n");
        fuse_stop();
        atomic_store(&st->released, true);
        bool done = lock_wait(att, st, 3, TEST_WAIT_S);
        fprintf(stderr, "once the read ended: the attacker %s (%d, value %lld); %d of %d pages differ\n",
                done ? "done" : "not done", st->status, (long long)st->value, st->bad, (int)(ADOPT_PAGES / 256));
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        if (!done)
                test_fail("the attacker's fault was not served once its lock was free");
        ASSERT_EQ(st->status, 0);
        ASSERT_EQ(st->bad, 0);
        ASSERT_EQ(st->value, (int64_t)ADOPT_PAGES);
        ASSERT_EQ(verify_pages(buf, TIER_DATA, hashes), 0u); /* and still */
        zswap_disconnect(c);
#undef SAY
}

/* Until the attacker is at stage (true) or seconds have passed (false);
 * fails the test if the attacker ends. */
static bool lock_wait(pid_t att, LockShared *st, int stage, unsigned seconds) {
        for (uint64_t t0 = now_ns(); atomic_load(&st->stage) < stage; usleep(10000)) {
                int status;
                if (waitpid(att, &status, WNOHANG) == att)
                        test_fail("the attacker failed (status %d) when %s", status,
                                  lock_stage[atomic_load(&st->stage)]);
                if (now_ns() - t0 > seconds * 1000000000ull)
                        return false;
        }
        return true;
}

/*
 * fuse-lock*: a process that waits in the kernel for a FUSE server with
 * its mmap lock held (a read of its own /proc/self/mem at a page of a file
 * whose server never answers) has the daemon take that lock: for writing
 * (REGISTER, ATTACH's proof, arming at the first PAGEOUT, UNREGISTER at
 * detach) or, behind a writer of its own that waits for it, for reading
 * (a PAGEOUT's pagemap). The manager must not wait for it: another user's
 * control connection must be answered meanwhile. Once the server goes
 * (the read fails), the request must be done and the pages intact.
 */
static void case_fuse_lock(int kind) {
        LockShared *st = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(st != MAP_FAILED);
        st->bad = -1;
        unsigned threads0 = daemon_threads();
        fuse_start();
        pid_t att = td_fork_as(U_STALLER, 0);
        if (att == 0)
                _exit(kind == LOCK_ADOPT   ? fuse_lock_adopt(st)
                      : kind == LOCK_REMAP ? fuse_lock_remap(st, true)
                      : kind == LOCK_COPY  ? fuse_lock_remap(st, false)
                                           : fuse_lock_attack(kind, st));
        if (!lock_wait(att, st, 1, 60)) {
                td_dump_stacks(att, "the attacker");
                test_fail("the attacker was still %s in 60 s", lock_step[atomic_load(&st->step)]);
        }
        if (kind == LOCK_CHURN) {
                /* each ATTACH whose proof waits is a daemon thread that
                 * waits: no more of them than the user's connections */
                if (!lock_wait(att, st, 2, TEST_WAIT_S))
                        test_fail("the attacker's %d connections were not made in %d s", CHURN_TRIES, TEST_WAIT_S);
                unsigned threads = daemon_threads();
                fprintf(stderr, "%lld of %d connections taken; the daemon's threads: %u before, %u now\n",
                        (long long)st->value, CHURN_TRIES, threads0, threads);
                ASSERT_TRUE(st->value <= CHURN_MAX_CONNECTIONS);
                ASSERT_TRUE(threads <= threads0 + CHURN_MAX_CONNECTIONS);
                ASSERT_TRUE(td_log_has(&d, "its user's max_connections"));
        }
        bool landed = true, faulted = true;
        if (kind == LOCK_REMAP) {
                /* the question waits for the lock (the attack landed):
                 * in UFFDIO_WRITEPROTECT, or queued behind another job
                 * of the attacker's that waits for it (the tick's count
                 * of its pages, logged after a second), on a thread
                 * that is no fault thread: root's faults are served
                 * meanwhile */
                char queued[64];
                snprintf(queued, sizeof(queued), "pid %d (uid %d): its read of its page tables waits", (int)att,
                         U_STALLER);
                landed = false;
                for (int i = 0; i < 1000 && !landed; i++) {
                        landed = pid_waits_in(d.pid, "mwriteprotect_range") || td_log_has(&d, queued);
                        usleep(10000);
                }
                faulted = faults_served();
                fprintf(stderr, "the daemon's question %s; root's faults %s\n",
                        pid_waits_in(d.pid, "mwriteprotect_range") ? "waits for the attacker's lock in UFFDIO_WRITEPROTECT"
                        : landed ? "waits behind a read of the attacker's page tables, which waits for its lock"
                                 : "never waited for the attacker's lock",
                        faulted ? "served" : "not served in 30 s");
        }
        if (kind == LOCK_COPY && !copy_fault_sent(st, att)) {
                fuse_stop();
                atomic_store(&st->released, true);
                kill(att, SIGKILL);
                waitpid(att, NULL, 0);
                skipped = COPY_NOT_SENT;
                return;
        }
        if (kind == LOCK_COPY) {
                /* the fault thread whose copy waits for the lock is said,
                 * with the client; the other thread takes the work handed
                 * to it: root's faults, syncs and restores are served */
                char said[128];
                snprintf(said, sizeof(said), "has waited more than a second in a call into pid %d (uid %d)",
                         (int)att, U_STALLER);
                landed = false;
                for (int i = 0; i < TEST_WAIT_S * 10 && !landed; i++) {
                        landed = td_log_has(&d, said);
                        usleep(100 * 1000);
                }
                fprintf(stderr, "the daemon %s\n",
                        landed ? "says which fault thread waits in a copy into the attacker"
                               : "never said that a fault thread waits in a copy into the attacker");
                if (!landed) {
                        td_dump_stacks(d.pid, "zswapd");
                        td_dump_stacks(att, "the attacker");
                        td_log_dump(&d);
                }
                faulted = home_work_served();
                fprintf(stderr, "root's faults, syncs and restores %s\n", faulted ? "served" : "not served in 30 s");
        }
        if (kind == LOCK_UFFD) {
                /* a thread of the daemon closes a uffd of the attacker's
                 * whose release waits for the attacker's lock */
                landed = false;
                for (int i = 0; i < TEST_WAIT_S * 100 && !landed && atomic_load(&st->stage) < 2; i++) {
                        landed = pid_waits_in(d.pid, "userfaultfd_release");
                        usleep(10000);
                }
                atomic_store(&st->landed, landed);
                fprintf(stderr, "%s\n", landed ? "a thread of the daemon waits in the release of a uffd of the attacker's"
                                                : "no thread of the daemon waited in the release of the attacker's uffds");
                if (!landed) {
                        td_dump_stacks(d.pid, "zswapd");
                        td_dump_stacks(att, "the attacker");
                }
        }
        usleep(500 * 1000);
        bool served = user_served(0) && faulted;
        fprintf(stderr, "with the attacker's mmap lock held by FUSE and its %s made: root %s\n", lock_what[kind],
                served ? "served" : "not served in 30 s");
        if (!served) {
                td_dump_stacks(d.pid, "zswapd");
                td_dump_stacks(att, "the attacker");
        }
        /* the server goes: the read fails, and our lock is let go */
        fuse_stop();
        atomic_store(&st->released, true);
        bool done = lock_wait(att, st, 3, TEST_WAIT_S);
        if (done)
                fprintf(stderr, "once the read ended: %s done (%d, value %lld); %d of %d pages differ\n",
                        lock_what[kind], st->status, (long long)st->value, st->bad,
                        kind == LOCK_ADOPT || kind == LOCK_REMAP || kind == LOCK_COPY ? (int)(ADOPT_PAGES / 256)
                                                                                       : STALL_PAGES);
        else
                fprintf(stderr, "%d s after the read ended, the attacker's %s: still %s\n", TEST_WAIT_S,
                        lock_what[kind], lock_stage[atomic_load(&st->stage)]);
        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        if (st->missed)
                test_fail("the adoption's walk ended before the attacker's writer waited: the attack missed "
                          "(ADOPT_PAGES too few for this machine)");
        if (!landed && kind == LOCK_COPY)
                test_fail("the daemon did not say that a fault thread waits in a copy into the attacker");
        if (!landed && kind == LOCK_UFFD)
                test_fail("no thread of the daemon waited in the release of a uffd of the attacker's: the attack "
                          "missed (the daemon's close of each came before the attacker's)");
        if (!landed)
                test_fail("no thread of the daemon waited for the attacker's lock: the attack missed (the walk of "
                          "the moved entries ended before its writer waited: ADOPT_PAGES too few for this machine)");
        if (!served)
                test_fail("%s waited for a client's mmap lock", kind == LOCK_REMAP  ? "a fault thread"
                                                                : kind == LOCK_COPY ? "the work handed to a fault thread"
                                                                                    : "the manager");
        if (!done)
                test_fail("the attacker's %s was not done once its lock was free", lock_what[kind]);
        ASSERT_EQ(st->status, 0);
        ASSERT_EQ(st->bad, 0);
        if (kind == LOCK_ARM || kind == LOCK_QUEUED || kind == LOCK_MOVED)
                ASSERT_TRUE(st->value > 0);
        if (kind == LOCK_ADOPT || kind == LOCK_REMAP || kind == LOCK_COPY)
                ASSERT_EQ(st->value, (int64_t)ADOPT_PAGES);
}

int main(int argc, char **argv) {
        test_require_root();
        signal(SIGPIPE, SIG_IGN);
        if (argc != 2)
                test_fail("usage: test-dos linger|maps|stall|fuse|fuse-bound|stuck|late|ops|fuse-lock"
                          "|fuse-lock-attach|fuse-lock-arm|fuse-lock-detach|fuse-lock-queued|fuse-lock-churn"
                          "|fuse-lock-moved|fuse-lock-adopt|fuse-lock-remap|fuse-lock-copy|fuse-lock-copy-one"
                          "|fuse-lock-copies|fuse-lock-copies-together|fuse-lock-uffd-close|fuse-lock-tier");
        char conf[64] = "", args[320];
        int lock = -1;
        for (int i = 0; i < LOCK_CASES; i++)
                if (strcmp(argv[1], lock_case[i]) == 0)
                        lock = i;
        /* fuse-lock-copy on one fault thread: a spare takes its work */
        bool one = strcmp(argv[1], "fuse-lock-copy-one") == 0;
        if (one)
                lock = LOCK_COPY;
        if (strcmp(argv[1], "fuse-lock-copies-together") == 0)
                lock = LOCK_COPIES;
        bool tier = strcmp(argv[1], "fuse-lock-tier") == 0;
        bool staller = tier || strcmp(argv[1], "stall") == 0 || strcmp(argv[1], "fuse") == 0 ||
                       strcmp(argv[1], "fuse-bound") == 0 || strcmp(argv[1], "stuck") == 0 ||
                       strcmp(argv[1], "late") == 0 || strcmp(argv[1], "ops") == 0 || lock >= 0;
        if (staller) {
                /* the attacker is admitted and granted /dev/userfaultfd */
                snprintf(conf, sizeof(conf), "/tmp/test-dos-%d.conf", (int)getpid());
                FILE *f = fopen(conf, "we");
                ASSERT_TRUE(f != NULL);
                fprintf(f, "[users]\nallow = %d\n[user:%d]\nuserfaultfd_device = yes\n%s", U_STALLER, U_STALLER,
                        strcmp(argv[1], "ops") == 0 ? "max_requests = 0\n" : "");
                if (lock == LOCK_CHURN)
                        fprintf(f, "max_connections = %d\n", CHURN_MAX_CONNECTIONS);
                if (tier)
                        tier_conf(f);
                ASSERT_OK(fclose(f));
        }
        const char *extra = getenv("TEST_DAEMON_ARGS");
        snprintf(args, sizeof(args), "%s%s%s%s", extra ? extra : "", conf[0] ? " --config " : "", conf,
                 strcmp(argv[1], "fuse") == 0    ? " --read-bound-ms 600000"
                 : lock == LOCK_REMAP ? " --fault-threads 1" /* one stuck, all wait */
                 : one ? " --fault-threads 1" /* it is stuck: a spare starts */
                 : tier ? " --fault-threads 1 --pool-max 4194304" /* the same, and most pages on the tier */
                 : lock == LOCK_COPY || lock == LOCK_COPIES ? " --fault-threads 2" /* one stuck, the other takes its work */
                                      : "");
        td_start_logged(&d, args);
        if (strcmp(argv[1], "linger") == 0)
                case_linger();
        else if (strcmp(argv[1], "maps") == 0)
                case_maps();
        else if (strcmp(argv[1], "stall") == 0)
                case_stall();
        else if (strcmp(argv[1], "fuse") == 0)
                case_fuse();
        else if (strcmp(argv[1], "fuse-bound") == 0)
                case_fuse_bound();
        else if (strcmp(argv[1], "stuck") == 0)
                case_stuck();
        else if (strcmp(argv[1], "late") == 0)
                case_late();
        else if (strcmp(argv[1], "ops") == 0)
                case_ops();
        else if (tier)
                case_fuse_lock_tier();
        else if (lock == LOCK_COPIES)
                case_fuse_lock_copies(strcmp(argv[1], "fuse-lock-copies-together") == 0);
        else if (lock >= 0)
                case_fuse_lock(lock);
        else
                test_fail("no case %s", argv[1]);
        if (conf[0])
                unlink(conf);
        td_stop(&d);
        if (skipped)
                test_skip("%s", skipped);
        return 0;
}
