/*
 * test-protocol: message validation and framing.
 *
 * zmsg_validate() accepts every well-formed message and nothing else: bad
 * magic, version, size field, length, type, and MOVE messages whose runs do
 * not add up. zmsg_send()/zmsg_recv() over a SOCK_SEQPACKET socketpair keep
 * the bytes, pass file descriptors (the received one is the same open file,
 * close-on-exec), never leak one (extra, truncated and control-truncated
 * messages: counted in /proc/self/fd, and a pipe whose last reader is gone
 * gives EPIPE), report the sender's pid, EOF and a full queue.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "macro.h"
#include "protocol.h"
#include "test.h"

static _Alignas(8) uint8_t msg[ZSWAP_MSG_MAX + 64];

static const uint16_t types[] = { ZMSG_HELLO,      ZMSG_ATTACH,      ZMSG_REGISTER,     ZMSG_UNREGISTER,
                                  ZMSG_PAGEOUT,    ZMSG_STATS,       ZMSG_FORK_PREPARE, ZMSG_FORK_DONE,
                                  ZMSG_CHILD_ATTACH, ZMSG_PAGEOUT_PID, ZMSG_REPLY,    ZMSG_STATS_REPLY,
                                  ZMSG_MOVE_DONE,  ZMSG_RELEASE,    ZMSG_RELEASE_DONE, ZMSG_SET_LIMIT,
                                  ZMSG_TUNABLE_SET, ZMSG_TUNABLE_GET, ZMSG_TUNABLE_REPLY, ZMSG_STATUS,
                                  ZMSG_CLIENTS,    ZMSG_STATUS_REPLY, ZMSG_CLIENTS_REPLY, ZMSG_ADOPT,
                                  ZMSG_REGIONS,    ZMSG_REGIONS_REPLY, ZMSG_SET_GROUP, ZMSG_PAGEIN_PID,
                                  ZMSG_GROUP_LIMIT };

/* A well-formed message of type t in msg; returns its length. */
static size_t build(uint16_t t) {
        size_t len = zmsg_expected_size(t);
        memset(msg, 0, sizeof(msg));
        ASSERT_TRUE(len >= sizeof(ZMsgHeader) && len <= ZSWAP_MSG_MAX);
        zmsg_init((ZMsgHeader *)msg, t, 77, len);
        return len;
}

static size_t build_move(uint32_t nruns, uint32_t per_run) {
        ZMsgMove *m = (ZMsgMove *)msg;
        memset(msg, 0, sizeof(msg));
        m->nruns = nruns;
        for (uint32_t i = 0; i < nruns && i < ZSWAP_MOVE_RUNS_MAX; i++) {
                m->runs[i] = (ZMoveRun){ .addr = 0x10000000 + i * 0x100000, .npages = per_run };
                m->npages += per_run;
        }
        zmsg_init(&m->hdr, ZMSG_MOVE, 3, zmsg_move_size(nruns));
        return zmsg_move_size(nruns);
}

static void test_validate(void) {
        ZMsgHeader *h = (ZMsgHeader *)msg;

        ASSERT_EQ(zmsg_expected_size(ZMSG_HELLO), sizeof(ZMsgHello));
        ASSERT_EQ(zmsg_expected_size(ZMSG_ATTACH), sizeof(ZMsgAttach));
        ASSERT_EQ(zmsg_expected_size(ZMSG_PAGEOUT), sizeof(ZMsgRange));
        ASSERT_EQ(zmsg_expected_size(ZMSG_FORK_DONE), sizeof(ZMsgHeader));
        ASSERT_EQ(zmsg_expected_size(ZMSG_MOVE_DONE), sizeof(ZMsgMoveDone));
        ASSERT_EQ(zmsg_expected_size(ZMSG_MOVE), 0);
        ASSERT_TRUE(sizeof(ZMsgMove) <= ZSWAP_MSG_MAX);
        /* the numbers are the wire format: they never move */
        ASSERT_EQ(ZMSG_TUNABLE_GET, 13);
        ASSERT_EQ(ZMSG_STATUS, 14);
        ASSERT_EQ(ZMSG_CLIENTS, 15);
        ASSERT_EQ(ZMSG_ADOPT, 16);
        ASSERT_EQ(zmsg_expected_size(ZMSG_ADOPT), sizeof(ZMsgAttach));
        ASSERT_EQ(ZMSG_TUNABLE_REPLY, 66);
        ASSERT_EQ(ZMSG_STATUS_REPLY, 67);
        ASSERT_EQ(ZMSG_CLIENTS_REPLY, 68);
        ASSERT_EQ(zmsg_expected_size(ZMSG_STATUS), sizeof(ZMsgHeader));
        ASSERT_EQ(zmsg_expected_size(ZMSG_CLIENTS), sizeof(ZMsgClientsReq));
        ASSERT_EQ(zmsg_expected_size(ZMSG_STATUS_REPLY), sizeof(ZMsgStatusReply));
        ASSERT_EQ(zmsg_expected_size(ZMSG_CLIENTS_REPLY), sizeof(ZMsgClientsReply));
        ASSERT_TRUE(sizeof(ZMsgStatusReply) <= ZSWAP_MSG_MAX);
        ASSERT_TRUE(sizeof(ZMsgClientsReply) <= ZSWAP_MSG_MAX);
        ASSERT_EQ(ZMSG_REGIONS, 17);
        ASSERT_EQ(ZMSG_REGIONS_REPLY, 69);
        ASSERT_EQ(ZMSG_SET_GROUP, 18);
        ASSERT_EQ(ZMSG_PAGEIN_PID, 19);
        ASSERT_EQ(ZMSG_GROUP_LIMIT, 20);
        ASSERT_EQ(zmsg_expected_size(ZMSG_GROUP_LIMIT), sizeof(ZMsgGroup));
        ASSERT_EQ(zmsg_expected_size(ZMSG_SET_GROUP), sizeof(ZMsgGroup));
        ASSERT_EQ(zmsg_expected_size(ZMSG_REGIONS), sizeof(ZMsgRange));
        ASSERT_EQ(zmsg_expected_size(ZMSG_REGIONS_REPLY), sizeof(ZMsgRegionsReply));
        ASSERT_EQ(sizeof(ZMsgRegionsReply), 1952);
        /* the replies a library request waits for, and no command */
        ASSERT_TRUE(zmsg_is_reply(ZMSG_REGIONS_REPLY) && zmsg_is_reply(ZMSG_STATS_REPLY));
        ASSERT_TRUE(!zmsg_is_reply(ZMSG_MOVE) && !zmsg_is_reply(ZMSG_RELEASE));
        /* a clients page is whole records, 8-byte aligned */
        ASSERT_EQ(sizeof(ZClientRecord) % 8, 0);
        ASSERT_EQ(offsetof(ZMsgClientsReply, rec) % 8, 0);

        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                uint16_t t = types[i];
                size_t len = build(t);
                ASSERT_EQ(h->magic, ZSWAP_PROTO_MAGIC);
                ASSERT_EQ(h->type, t);
                ASSERT_EQ(h->size, len);
                ASSERT_OK(zmsg_validate(msg, len));

                h->magic ^= 1;
                ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
                build(t);
                h->version = ZSWAP_PROTO_VERSION + 1;
                ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
                h->version = 0;
                ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
                build(t);
                /* size field disagrees with the packet, either way */
                h->size = (uint32_t)len + 8;
                ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
                ASSERT_ERROR(zmsg_validate(msg, len + 8), EPROTO); /* consistent, but not the type's size */
                h->size = (uint32_t)len - 1;
                ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
                ASSERT_ERROR(zmsg_validate(msg, len - 1), EPROTO);
                /* header only, or cut in the header */
                build(t);
                for (size_t l = 0; l < sizeof(ZMsgHeader); l++) {
                        h->size = (uint32_t)l;
                        ASSERT_ERROR(zmsg_validate(msg, l), EPROTO);
                }
                /* the right size of another type */
                build(t);
                h->type = t == ZMSG_HELLO ? ZMSG_REGISTER : ZMSG_HELLO;
                if (zmsg_expected_size(h->type) != len)
                        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        }

        /* too long, even when the size field agrees */
        build(ZMSG_HELLO);
        h->size = ZSWAP_MSG_MAX + 1;
        ASSERT_ERROR(zmsg_validate(msg, ZSWAP_MSG_MAX + 1), EPROTO);
        h->size = ZSWAP_MSG_MAX + 64;
        ASSERT_ERROR(zmsg_validate(msg, ZSWAP_MSG_MAX + 64), EPROTO);

        /* unknown types, at every size that would fit a known one */
        static const uint16_t unknown[] = { 0, 21, 22, 63, 70, 127, 130, 191, 194, 255, 0x8000, 0xffff };
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                ASSERT_EQ(zmsg_expected_size(unknown[i]), 0);
                for (size_t j = 0; j < ELEMENTSOF(types); j++) {
                        size_t len = build(types[j]);
                        h->type = unknown[i];
                        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
                }
        }

        /* MOVE: runs must add up */
        ZMsgMove *m = (ZMsgMove *)msg;
        ASSERT_OK(zmsg_validate(msg, build_move(1, 1)));
        ASSERT_OK(zmsg_validate(msg, build_move(1, ZSWAP_BATCH_MAX)));
        ASSERT_OK(zmsg_validate(msg, build_move(ZSWAP_MOVE_RUNS_MAX, ZSWAP_BATCH_MAX / ZSWAP_MOVE_RUNS_MAX)));
        ASSERT_ERROR(zmsg_validate(msg, build_move(0, 0)), EPROTO);
        size_t len = build_move(2, 1);
        m->nruns = 0;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        len = build_move(ZSWAP_MOVE_RUNS_MAX + 1, 1);
        ASSERT_TRUE(len <= ZSWAP_MSG_MAX);
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        len = build_move(ZSWAP_MOVE_RUNS_MAX, 1);
        m->nruns = UINT32_MAX;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        /* nruns says 3, the packet holds 2 (and the other way round) */
        len = build_move(2, 1);
        m->nruns = 3;
        m->npages = 3;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        len = build_move(3, 1);
        m->hdr.size = (uint32_t)zmsg_move_size(2);
        ASSERT_ERROR(zmsg_validate(msg, zmsg_move_size(2)), EPROTO);
        len = build_move(3, 1);
        m->hdr.size = (uint32_t)(len + sizeof(ZMoveRun));
        ASSERT_ERROR(zmsg_validate(msg, len + sizeof(ZMoveRun)), EPROTO);
        /* shorter than the fixed part */
        len = offsetof(ZMsgMove, runs) - 4;
        m->hdr.size = (uint32_t)len;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        /* npages is not the sum */
        len = build_move(4, 8);
        m->npages = 31;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        m->npages = 33;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
        /* more than one batch, zero pages, and a sum that wraps 32 bits */
        ASSERT_ERROR(zmsg_validate(msg, build_move(1, ZSWAP_BATCH_MAX + 1)), EPROTO);
        ASSERT_ERROR(zmsg_validate(msg, build_move(ZSWAP_MOVE_RUNS_MAX, ZSWAP_BATCH_MAX / ZSWAP_MOVE_RUNS_MAX + 1)),
                     EPROTO);
        ASSERT_ERROR(zmsg_validate(msg, build_move(3, 0)), EPROTO);
        len = build_move(2, 1);
        m->runs[0].npages = UINT32_MAX;
        m->runs[1].npages = 2;
        m->npages = 1;
        ASSERT_ERROR(zmsg_validate(msg, len), EPROTO);
}

/* ---- framing ---- */

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        ASSERT_TRUE(d);
        for (struct dirent *e; (e = readdir(d));)
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
}

static bool same_file(int a, int b) {
        struct stat sa, sb;
        ASSERT_OK(fstat(a, &sa));
        ASSERT_OK(fstat(b, &sb));
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Is any reader of the pipe left? Writing to one without gives EPIPE. */
static bool pipe_has_reader(int wfd) {
        char c = 'x';
        ssize_t n = write(wfd, &c, 1);
        ASSERT_TRUE(n == 1 || errno == EPIPE);
        return n == 1;
}

static void make_pipes(int (*p)[2], size_t n) {
        for (size_t i = 0; i < n; i++)
                ASSERT_OK(pipe2(p[i], O_CLOEXEC | O_NONBLOCK));
}

static void test_framing(void) {
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 64];
        int sp[2], pipes[20][2], fds[8];
        size_t nfds;
        struct ucred sender;

        signal(SIGPIPE, SIG_IGN);
        ASSERT_OK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp));

        /* content survives, no fds come with a plain message */
        ZMsgRange rg = { .addr = 0x7f1234560000, .len = 0x200000 };
        zmsg_init(&rg.hdr, ZMSG_REGISTER, 0xabcdef01, sizeof(rg));
        ASSERT_OK(zmsg_send(sp[0], &rg, sizeof(rg), NULL, 0));
        nfds = ELEMENTSOF(fds);
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), fds, &nfds, &sender), sizeof(rg));
        ASSERT_EQ(nfds, 0);
        ASSERT_EQ(sender.pid, 0); /* no SO_PASSCRED yet */
        ASSERT_EQ(sender.uid, (uid_t)-1);
        ASSERT_EQ(memcmp(in, &rg, sizeof(rg)), 0);
        ASSERT_OK(zmsg_validate(in, sizeof(rg)));

        /* the largest message, every byte */
        for (size_t i = 0; i < ZSWAP_MSG_MAX; i++)
                msg[i] = (uint8_t)(i * 7 + 1);
        ASSERT_OK(zmsg_send(sp[0], msg, ZSWAP_MSG_MAX, NULL, 0));
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, NULL), ZSWAP_MSG_MAX);
        ASSERT_EQ(memcmp(in, msg, ZSWAP_MSG_MAX), 0);

        /* an fd arrives as the same open file, close-on-exec */
        int base = count_fds();
        make_pipes(pipes, 4);
        ASSERT_OK(zmsg_send(sp[0], &rg, sizeof(rg), &pipes[0][0], 1));
        nfds = ELEMENTSOF(fds);
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), fds, &nfds, NULL), sizeof(rg));
        ASSERT_EQ(nfds, 1);
        ASSERT_TRUE(fds[0] != pipes[0][0]);
        ASSERT_TRUE(same_file(fds[0], pipes[0][0]));
        ASSERT_TRUE(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
        ASSERT_EQ(write(pipes[0][1], "hello", 5), 5);
        char got[8] = {};
        ASSERT_EQ(read(fds[0], got, sizeof(got)), 5);
        ASSERT_EQ(memcmp(got, "hello", 5), 0);
        close(fds[0]);
        ASSERT_EQ(count_fds(), base + 8);

        /* four fds, room for two: the other two are closed */
        int four[4] = { pipes[0][0], pipes[1][0], pipes[2][0], pipes[3][0] };
        ASSERT_OK(zmsg_send(sp[0], &rg, sizeof(rg), four, 4));
        ASSERT_ERROR(zmsg_send(sp[0], &rg, sizeof(rg), four, ZMSG_FDS_MAX + 1), EINVAL);
        for (int i = 0; i < 4; i++)
                pipes[i][0] = safe_close(pipes[i][0]); /* only the copies in flight are left */
        nfds = 2;
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), fds, &nfds, NULL), sizeof(rg));
        ASSERT_EQ(nfds, 2);
        ASSERT_EQ(count_fds(), base + 4 + 2);
        ASSERT_TRUE(pipe_has_reader(pipes[0][1]));
        ASSERT_TRUE(pipe_has_reader(pipes[1][1]));
        ASSERT_TRUE(!pipe_has_reader(pipes[2][1]));
        ASSERT_TRUE(!pipe_has_reader(pipes[3][1]));
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; i < 4; i++)
                close(pipes[i][1]);
        ASSERT_EQ(count_fds(), base);

        /* fds but no room at all (nfds NULL), and more than the control
         * buffer holds (8): all closed */
        for (size_t want = 0; want <= 1; want++) {
                size_t n = want ? 20 : 3;
                make_pipes(pipes, n);
                int rd[20];
                for (size_t i = 0; i < n; i++)
                        rd[i] = pipes[i][0];
                ASSERT_OK(zmsg_send(sp[0], &rg, sizeof(rg), rd, n));
                for (size_t i = 0; i < n; i++)
                        pipes[i][0] = safe_close(pipes[i][0]);
                nfds = ELEMENTSOF(fds);
                ssize_t r = zmsg_recv(sp[1], in, sizeof(in), want ? fds : NULL, want ? &nfds : NULL, NULL);
                if (want) {
                        ASSERT_EQ(r, -EMSGSIZE); /* MSG_CTRUNC */
                        ASSERT_EQ(nfds, 0);
                } else
                        ASSERT_EQ(r, sizeof(rg));
                ASSERT_EQ(count_fds(), base + (int)n);
                for (size_t i = 0; i < n; i++) {
                        ASSERT_TRUE(!pipe_has_reader(pipes[i][1]));
                        close(pipes[i][1]);
                }
        }
        ASSERT_EQ(count_fds(), base);

        /* a truncated message is refused and its fds closed */
        make_pipes(pipes, 2);
        int two[2] = { pipes[0][0], pipes[1][0] };
        ASSERT_OK(zmsg_send(sp[0], msg, 100, two, 2));
        pipes[0][0] = safe_close(pipes[0][0]);
        pipes[1][0] = safe_close(pipes[1][0]);
        nfds = ELEMENTSOF(fds);
        ASSERT_EQ(zmsg_recv(sp[1], in, 50, fds, &nfds, NULL), -EMSGSIZE);
        ASSERT_EQ(nfds, 0);
        ASSERT_TRUE(!pipe_has_reader(pipes[0][1]));
        ASSERT_TRUE(!pipe_has_reader(pipes[1][1]));
        close(pipes[0][1]);
        close(pipes[1][1]);
        ASSERT_EQ(count_fds(), base);
        /* the rest of it is gone: the next message reads whole */
        ASSERT_OK(zmsg_send(sp[0], &rg, sizeof(rg), NULL, 0));
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, NULL), sizeof(rg));
        ASSERT_EQ(memcmp(in, &rg, sizeof(rg)), 0);

        /* zmsg_recv_all(): every fd of a message, twenty here, and those of
         * a truncated one too; it closes none (the daemon decides how) */
        for (size_t trunc = 0; trunc <= 1; trunc++) {
                int rd[20], all[ZMSG_FDS_MAX];
                make_pipes(pipes, 20);
                for (size_t i = 0; i < 20; i++)
                        rd[i] = pipes[i][0];
                ASSERT_OK(zmsg_send(sp[0], trunc ? (const void *)msg : &rg, trunc ? 100 : sizeof(rg), rd, 20));
                for (size_t i = 0; i < 20; i++)
                        pipes[i][0] = safe_close(pipes[i][0]);
                nfds = ELEMENTSOF(all);
                ssize_t r = zmsg_recv_all(sp[1], in, trunc ? 50 : sizeof(in), all, &nfds, NULL);
                ASSERT_EQ(r, trunc ? -EMSGSIZE : (ssize_t)sizeof(rg));
                ASSERT_EQ(nfds, 20);
                for (size_t i = 0; i < 20; i++) {
                        ASSERT_TRUE(pipe_has_reader(pipes[i][1]));
                        close(all[i]);
                        ASSERT_TRUE(!pipe_has_reader(pipes[i][1]));
                        close(pipes[i][1]);
                }
                ASSERT_EQ(count_fds(), base);
        }

        /* the sender's credentials, ours and a child's; then a child's
         * that changed its uid after it had the socket */
        int one = 1;
        ASSERT_OK(setsockopt(sp[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)));
        ASSERT_OK(zmsg_send(sp[0], &rg, sizeof(rg), NULL, 0));
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, &sender), sizeof(rg));
        ASSERT_EQ(sender.pid, getpid());
        ASSERT_EQ(sender.uid, getuid());
        ASSERT_EQ(sender.gid, getgid());
        for (int drop = 0; drop < 2; drop++) {
                if (drop && geteuid() != 0)
                        break;
                pid_t child = fork();
                ASSERT_TRUE(child >= 0);
                if (child == 0) {
                        if (drop && (setgid(60041) < 0 || setuid(60041) < 0))
                                _exit(2);
                        _exit(zmsg_send(sp[0], &rg, sizeof(rg), NULL, 0) == 0 ? 0 : 1);
                }
                int st;
                ASSERT_EQ(waitpid(child, &st, 0), child);
                ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, &sender), sizeof(rg));
                ASSERT_EQ(sender.pid, child);
                ASSERT_EQ(sender.uid, drop ? 60041 : getuid());
                ASSERT_EQ(sender.gid, drop ? 60041 : getgid());
        }

        /* empty non-blocking socket, then a full queue */
        ASSERT_OK(fcntl(sp[1], F_SETFL, O_NONBLOCK));
        ASSERT_ERROR(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, NULL), EAGAIN);
        ASSERT_OK(fcntl(sp[0], F_SETFL, O_NONBLOCK));
        int sent = 0, r;
        while ((r = zmsg_send(sp[0], &rg, sizeof(rg), NULL, 0)) == 0)
                ASSERT_TRUE(++sent < 1000000);
        ASSERT_EQ(r, -EAGAIN);
        ASSERT_TRUE(sent > 0);
        for (int i = 0; i < sent; i++)
                ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, NULL), sizeof(rg));
        ASSERT_ERROR(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, NULL), EAGAIN);

        /* EOF, and sending to a closed peer */
        close(sp[0]);
        nfds = 3;
        ASSERT_EQ(zmsg_recv(sp[1], in, sizeof(in), fds, &nfds, NULL), 0);
        ASSERT_EQ(zmsg_send(sp[1], &rg, sizeof(rg), NULL, 0), -EPIPE);
        close(sp[1]);
        ASSERT_ERROR(zmsg_recv(sp[1], in, sizeof(in), NULL, NULL, NULL), EBADF);
        ASSERT_EQ(count_fds(), base - 2);
}

int main(void) {
        test_validate();
        test_framing();
        fprintf(stderr, "protocol: ok\n");
        return 0;
}
