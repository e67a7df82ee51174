/*
 * test-nbd: the NBD client (daemon/tier/nbd.c) against a real nbd-server, and
 * against a scripted fake server for what a real one will not do.
 *
 * The fake, a child process on a Unix socket, is an old server without
 * NBD_OPT_GO or NBD_FLAG_NO_ZEROES, so the fallback to NBD_OPT_EXPORT_NAME
 * runs; it can also fail reads or writes, answer with a bad magic or
 * cookie, stop answering, or never greet. (Not a thread: under valgrind
 * 3.19 it never got to run while the client waited in io_uring_enter.)
 *
 * nbd-server is started from a config file in a temporary directory, on a
 * free loopback port and a Unix socket at once, backed by a 64 MiB file:
 * thousands of pipelined writes of known patterns are read back (by two
 * connections from two threads as well) and compared with a copy kept here
 * and with the file itself; then the server is stopped (timeouts), killed
 * (dead connections) and restarted on the same port (the data is still
 * there).
 *
 * nbd-server daemonizes; this process is a child subreaper, so the daemon
 * becomes its child and is reaped here. A reaper process forked first
 * holds the other end of a pipe: whenever this process ends (abort()
 * included), it kills every server it was told about and removes the
 * temporary directory.
 *
 * Exit 77 if nbd-server is not installed (the URI and fake-server cases
 * have run by then).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#include "harness.h"
#include "macro.h"
#include "nbd.h"
#include "test.h"
#include "util.h"

#define MIB (1024ull * 1024)
#define DISK_SIZE (64 * MIB)
#define PAGE 4096u
#define MS 1000000ull

static char dir[64];
static int reaper_fd = -1;

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

/* A pattern that says which block and which byte it is. */
static void fill(uint8_t *p, size_t len, uint64_t seed) {
        uint64_t x = seed * 0x9e3779b97f4a7c15ull | 1;
        size_t i = 0;

        for (; i + 8 <= len; i += 8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                memcpy(p + i, &x, 8);
        }
        for (; i < len; i++)
                p[i] = (uint8_t)(x >> (8 * (i & 7)));
}

static void path_in_dir(char *buf, size_t len, const char *name) {
        snprintf(buf, len, "%s/%s", dir, name);
}

static double ms_since(uint64_t t0) {
        return (double)(now_ns() - t0) / 1e6;
}

/* How late past its timeout an operation may end and still count as
 * bounded by it: a test checks that a timeout fires, not how fast (that
 * is for a benchmark). Generous, because CI runs this under TSan and
 * valgrind next to other tests on two cores, and on machines at load 10
 * (.ci/run-loaded). */
#define LATE_MS 30000.0

/* The bound on every operation of the connections to the real nbd-server
 * that are not there to time out: the safety bound, as a busy machine may
 * take seconds to move the test's 32 MiB. */
#define CONN_MS (TEST_WAIT_S * 1000)

/* ---- cleanup that survives abort() ---- */

static const char *const dir_files[] = { "fake.sock", "nbd.sock", "nbd.conf", "nbd.pid", "disk.img", "nbd.log" };

static void reaper_main(int fd) {
        pid_t pids[64];
        unsigned n = 0;
        int32_t v;

        while (read(fd, &v, sizeof(v)) == sizeof(v))
                if (v > 0 && n < 64)
                        pids[n++] = v;
        for (unsigned i = 0; i < n; i++)
                kill(-pids[i], SIGKILL), kill(pids[i], SIGKILL);
        for (size_t i = 0; i < sizeof(dir_files) / sizeof(dir_files[0]); i++) {
                char p[128];
                path_in_dir(p, sizeof(p), dir_files[i]);
                unlink(p);
        }
        rmdir(dir);
        _exit(0);
}

static void reaper_start(void) {
        int p[2];
        pid_t pid;

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                /* out of the test's process group, which meson signals on
                 * a timeout: the reaper outlives the test to clean up */
                setsid();
                close(p[1]);
                reaper_main(p[0]);
        }
        close(p[0]);
        reaper_fd = p[1];
}

static void reaper_add(pid_t pid) {
        int32_t v = pid;
        ASSERT_EQ(write(reaper_fd, &v, sizeof(v)), sizeof(v));
}

/* ---- URIs ---- */

static void uri_ok(const char *uri, const char *host, const char *port, const char *path, const char *name) {
        NbdAddr a;
        char err[256];

        if (nbd_parse(uri, &a, err, sizeof(err)) < 0)
                test_fail("nbd_parse(%s): %s", uri, err);
        ASSERT_STREQ(a.host, host);
        ASSERT_STREQ(a.port, port);
        ASSERT_STREQ(a.path, path);
        ASSERT_STREQ(a.export_name, name);
}

static void uri_bad(const char *uri, const char *why) {
        NbdAddr a;
        char err[256] = "";

        ASSERT_ERROR(nbd_parse(uri, &a, err, sizeof(err)), EINVAL);
        if (!strstr(err, why))
                test_fail("nbd_parse(%s): '%s' does not say '%s'", uri, err, why);
}

static void test_uri(void) {
        uri_ok("nbd://example.com:10810/disk", "example.com", "10810", "", "disk");
        uri_ok("nbd://example.com/", "example.com", "10809", "", "");
        uri_ok("nbd://example.com", "example.com", "10809", "", "");
        uri_ok("nbd://example.com:/x", "example.com", "10809", "", "x");
        uri_ok("nbd://example.com//disk", "example.com", "10809", "", "/disk");
        uri_ok("nbd://example.com/hello%20world", "example.com", "10809", "", "hello world");
        uri_ok("nbd://127.0.0.1:0999/a", "127.0.0.1", "999", "", "a");
        uri_ok("nbd://[::1]:10809/x", "::1", "10809", "", "x");
        uri_ok("nbd://[fe80::1]/x", "fe80::1", "10809", "", "x");
        uri_ok("nbd+unix:///disk?socket=/run/nbd.sock", "", "10809", "/run/nbd.sock", "disk");
        uri_ok("nbd+unix:///?socket=/tmp/a%20b", "", "10809", "/tmp/a b", "");
        uri_bad("http://example.com/x", "not an NBD URI");
        uri_bad("nbds://example.com/x", "TLS");
        uri_bad("nbd://example.com/x?tls-type=x509", "TLS");
        uri_bad("nbd:///x", "no host");
        uri_bad("nbd://user@example.com/x", "user info");
        uri_bad("nbd://[::1/x", "unterminated");
        uri_bad("nbd://[::1]x/x", "junk");
        uri_bad("nbd://example.com:65536/x", "out of range");
        uri_bad("nbd://example.com:0/x", "out of range");
        uri_bad("nbd://example.com:1a/x", "bad port");
        uri_bad("nbd://example.com/%zz", "export name");
        uri_bad("nbd://example.com/a%00b", "export name");
        uri_bad("nbd://example.com/x?socket=/a", "nbd+unix");
        uri_bad("nbd://example.com/x?foo=1", "unknown URI parameter 'foo=1'");
        uri_bad("nbd+unix:///x", "needs ?socket=");
        uri_bad("nbd+unix://host/x?socket=/a", "no host");
        uri_bad("nbd+unix:///x?socket=%00abstract", "socket path");
        uri_bad("nbd+unix:///x?socket=/a&socket=/b", "more than one");
        uri_bad("nbd://example.com/x#frag", "fragment");
        {
                char uri[512];
                snprintf(uri, sizeof(uri), "nbd+unix:///x?socket=/%0200d", 0);
                uri_bad(uri, "too long");
                snprintf(uri, sizeof(uri), "nbd://h/%0300d", 0);
                uri_bad(uri, "too long");
        }
        printf("uri: ok\n");
}

/* ---- the fake server ---- */

typedef enum FakeMode {
        FAKE_SERVE,      /* reads and writes on its own 1 MiB */
        FAKE_READ_EIO,   /* every read fails with NBD_EIO */
        FAKE_ENOSPC,     /* every write fails with NBD_ENOSPC */
        FAKE_BAD_MAGIC,  /* read replies with a wrong magic */
        FAKE_BAD_COOKIE, /* read replies to a cookie never sent */
        FAKE_SILENT,     /* reads the requests, answers none */
        FAKE_MUTE,       /* not even a greeting */
} FakeMode;

#define FAKE_SIZE (1 * MIB)

/* In memory shared with the fake's process. */
typedef struct Fake {
        int listen_fd;
        char path[108];
        pid_t pid;
        atomic_int mode;
        atomic_uint client_flags;
        atomic_uint go_seen;    /* NBD_OPT_GO refused so far */
        uint8_t disk[FAKE_SIZE]; /* the fake's only */
} Fake;

static bool read_all(int fd, void *buf, size_t len) {
        for (size_t done = 0; done < len;) {
                ssize_t n = read(fd, (uint8_t *)buf + done, len - done);
                if (n <= 0)
                        return false;
                done += (size_t)n;
        }
        return true;
}

static bool write_all(int fd, const void *buf, size_t len) {
        for (size_t done = 0; done < len;) {
                ssize_t n = send(fd, (const uint8_t *)buf + done, len - done, MSG_NOSIGNAL);
                if (n <= 0)
                        return false;
                done += (size_t)n;
        }
        return true;
}

static uint64_t be64(const uint8_t *p) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
                v = v << 8 | p[i];
        return v;
}

static uint32_t be32(const uint8_t *p) {
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be(uint8_t *p, uint64_t v, int bytes) {
        for (int i = bytes - 1; i >= 0; i--, v >>= 8)
                p[i] = (uint8_t)v;
}

/* Options until NBD_OPT_EXPORT_NAME; false to hang up. */
static bool fake_handshake(Fake *f, int fd) {
        uint8_t b[18], opt[16], data[600];

        put_be(b, 0x4e42444d41474943ull, 8);
        put_be(b + 8, 0x49484156454f5054ull, 8);
        put_be(b + 16, 1, 2); /* NBD_FLAG_FIXED_NEWSTYLE, no NO_ZEROES */
        if (!write_all(fd, b, 18) || !read_all(fd, b, 4))
                return false;
        atomic_store(&f->client_flags, be32(b));
        if (be32(b) != 1)
                return false; /* a flag we did not offer */
        for (;;) {
                uint32_t code, len;
                uint8_t rep[20];

                if (!read_all(fd, opt, 16) || be64(opt) != 0x49484156454f5054ull)
                        return false;
                code = be32(opt + 8);
                len = be32(opt + 12);
                if (len > sizeof(data) || !read_all(fd, data, len))
                        return false;
                if (code == 1) { /* NBD_OPT_EXPORT_NAME */
                        uint8_t r[8 + 2 + 124] = { 0 };
                        if (len != 4 || memcmp(data, "fake", 4) != 0)
                                return false;
                        put_be(r, FAKE_SIZE, 8);
                        put_be(r + 8, 1 | 4, 2); /* HAS_FLAGS | SEND_FLUSH */
                        return write_all(fd, r, sizeof(r));
                }
                if (code == 7)
                        atomic_fetch_add(&f->go_seen, 1);
                put_be(rep, 0x3e889045565a9ull, 8);
                put_be(rep + 8, code, 4);
                put_be(rep + 12, 0x80000001u, 4); /* NBD_REP_ERR_UNSUP */
                put_be(rep + 16, 0, 4);
                if (!write_all(fd, rep, sizeof(rep)))
                        return false;
        }
}

static bool fake_reply(int fd, uint32_t magic, uint32_t error, const uint8_t *cookie, const void *data, size_t len) {
        uint8_t r[16];

        put_be(r, magic, 4);
        put_be(r + 4, error, 4);
        memcpy(r + 8, cookie, 8);
        return write_all(fd, r, 16) && (len == 0 || write_all(fd, data, len));
}

static void fake_serve(Fake *f, int fd) {
        FakeMode mode = atomic_load(&f->mode);
        uint8_t q[28];

        if (mode == FAKE_MUTE) {
                while (read(fd, q, sizeof(q)) > 0)
                        ;
                return;
        }
        if (!fake_handshake(f, fd))
                return;
        while (read_all(fd, q, 28) && be32(q) == 0x25609513u) {
                uint32_t type = (uint32_t)q[6] << 8 | q[7], len = be32(q + 24), magic = 0x67446698u;
                uint64_t off = be64(q + 16);
                const uint8_t *cookie = q + 8;
                uint8_t bad[8];

                if (type == 2) /* NBD_CMD_DISC */
                        return;
                if (off > FAKE_SIZE || len > FAKE_SIZE - off)
                        return;
                if (type == 1) { /* write */
                        if (!read_all(fd, f->disk + off, len))
                                return;
                        if (!fake_reply(fd, magic, mode == FAKE_ENOSPC ? 28 : 0, cookie, NULL, 0))
                                return;
                        continue;
                }
                if (type != 0) { /* flush */
                        if (!fake_reply(fd, magic, 0, cookie, NULL, 0))
                                return;
                        continue;
                }
                if (mode == FAKE_SILENT)
                        continue;
                if (mode == FAKE_READ_EIO) {
                        if (!fake_reply(fd, magic, 5, cookie, NULL, 0))
                                return;
                        continue;
                }
                if (mode == FAKE_BAD_MAGIC)
                        magic = 0x12345678u;
                if (mode == FAKE_BAD_COOKIE) {
                        put_be(bad, be64(cookie) + 1000, 8);
                        cookie = bad;
                }
                if (!fake_reply(fd, magic, 0, cookie, f->disk + off, len))
                        return;
        }
}

/* One connection at a time, until killed. */
static void fake_main(Fake *f) {
        for (;;) {
                int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EINTR)
                                continue;
                        _exit(1);
                }
                fake_serve(f, fd);
                close(fd);
        }
}

/* timeout_ms: the connection's bound on every operation. Only the case
 * that waits for it to fire uses a short one: any other operation must
 * not fail for a fake server slowed down (valgrind, a loaded machine) */
static NbdConn *fake_connect(Fake *f, FakeMode mode, const char *name, int timeout_ms) {
        char uri[256], err[256];
        NbdConn *c = NULL;
        NbdAddr a;
        int r;

        atomic_store(&f->mode, mode);
        snprintf(uri, sizeof(uri), "nbd+unix:///%s?socket=%s", name, f->path);
        ASSERT_OK(nbd_parse(uri, &a, err, sizeof(err)));
        r = nbd_connect(&a, timeout_ms, &c, err, sizeof(err));
        if (r < 0)
                test_fail("connecting to the fake: %s (%s)", err, strerror(-r));
        return c;
}

static void test_fake_protocol_errors(Fake *f) {
        static const FakeMode modes[] = { FAKE_BAD_MAGIC, FAKE_BAD_COOKIE };
        uint8_t buf[PAGE];
        NbdWrite w = { buf, PAGE, 0 };

        for (size_t i = 0; i < 2; i++) {
                NbdConn *c = fake_connect(f, modes[i], "fake", TEST_WAIT_S * 1000);
                ASSERT_ERROR(nbd_pread(c, buf, PAGE, 0), EPROTO);
                ASSERT_TRUE(nbd_dead(c));
                ASSERT_ERROR(nbd_pread(c, buf, PAGE, 0), ENOTCONN);
                ASSERT_ERROR(nbd_pwrite_batch(c, &w, 1), ENOTCONN);
                ASSERT_ERROR(nbd_flush(c), ENOTCONN);
                nbd_close(c);
        }
}

static void test_fake_timeouts(Fake *f) {
        char uri[256], err[256] = "";
        uint8_t buf[PAGE];
        NbdConn *c;
        NbdAddr a;
        uint64_t t0;
        double ms;

        /* a server that stops answering: -ETIMEDOUT after the timeout */
        c = fake_connect(f, FAKE_SILENT, "fake", 300);
        t0 = now_ns();
        ASSERT_ERROR(nbd_pread(c, buf, PAGE, 0), ETIMEDOUT);
        ms = ms_since(t0);
        if (ms < 250 || ms > 300 + LATE_MS)
                test_fail("a read of a silent server took %.0f ms for a 300 ms timeout", ms);
        ASSERT_TRUE(nbd_dead(c));
        ASSERT_ERROR(nbd_pread(c, buf, PAGE, 0), ENOTCONN);
        nbd_close(c);

        /* one that never greets: the handshake is bounded as well */
        atomic_store(&f->mode, FAKE_MUTE);
        snprintf(uri, sizeof(uri), "nbd+unix:///fake?socket=%s", f->path);
        ASSERT_OK(nbd_parse(uri, &a, err, sizeof(err)));
        t0 = now_ns();
        c = NULL;
        ASSERT_ERROR(nbd_connect(&a, 300, &c, err, sizeof(err)), ETIMEDOUT);
        ms = ms_since(t0);
        ASSERT_TRUE(c == NULL);
        if (ms < 250 || ms > 300 + LATE_MS || !strstr(err, "timed out"))
                test_fail("connecting to a mute server: %.0f ms, '%s'", ms, err);
        printf("fake: timeouts ok (%s)\n", err);
}

/* Start the fake in a child process; its state is shared memory. */
static Fake *fake_start(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Fake *f = mmap(NULL, sizeof(Fake), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pid_t pid;

        ASSERT_TRUE(f != MAP_FAILED);
        path_in_dir(f->path, sizeof(f->path), "fake.sock");
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
        f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_OK(f->listen_fd);
        ASSERT_OK(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(f->listen_fd, 8));
        pid = fork(); /* not into f->pid: the child would write 0 there */
        ASSERT_OK(pid);
        if (pid == 0)
                fake_main(f);
        f->pid = pid;
        reaper_add(pid);
        close(f->listen_fd);
        return f;
}

static void fake_stop(Fake *f) {
        ASSERT_TRUE(f->pid > 0);
        ASSERT_OK(kill(f->pid, SIGKILL));
        ASSERT_EQ(waitpid(f->pid, NULL, 0), f->pid);
        unlink(f->path);
        ASSERT_OK(munmap(f, sizeof(*f)));
}

static void test_fake(void) {
        uint8_t *buf = malloc(FAKE_SIZE), *back = calloc(1, FAKE_SIZE);
        Fake *f = fake_start();
        NbdWrite w[40];
        char uri[256], err[256] = "";
        NbdConn *c;
        NbdAddr a;

        ASSERT_TRUE(buf && back);
        /* an old server: NBD_OPT_GO refused, NBD_OPT_EXPORT_NAME with the
         * 124 zero bytes after it */
        c = fake_connect(f, FAKE_SERVE, "fake", TEST_WAIT_S * 1000);
        ASSERT_EQ(atomic_load(&f->go_seen), 1);
        ASSERT_EQ(atomic_load(&f->client_flags), 1); /* no NO_ZEROES: not offered */
        ASSERT_EQ(nbd_size(c), FAKE_SIZE);
        ASSERT_TRUE(nbd_can_flush(c) && !nbd_multi_conn(c) && !nbd_read_only(c));
        fill(buf, FAKE_SIZE, 77);
        for (unsigned i = 0; i < 40; i++) /* 40: more than one window */
                w[i] = (NbdWrite) { buf + i * 2 * PAGE, PAGE + i, (uint64_t)i * 2 * PAGE };
        ASSERT_OK(nbd_pwrite_batch(c, w, 40));
        ASSERT_OK(nbd_flush(c));
        for (unsigned i = 0; i < 40; i++) {
                ASSERT_OK(nbd_pread(c, back, w[i].len, w[i].off));
                ASSERT_TRUE(memcmp(back, w[i].buf, w[i].len) == 0);
        }
        nbd_close(c);

        /* the old way has no error reply: the server hangs up */
        atomic_store(&f->mode, FAKE_SERVE);
        snprintf(uri, sizeof(uri), "nbd+unix:///nope?socket=%s", f->path);
        ASSERT_OK(nbd_parse(uri, &a, err, sizeof(err)));
        c = NULL;
        ASSERT_ERROR(nbd_connect(&a, 300, &c, err, sizeof(err)), ENOENT);
        ASSERT_TRUE(c == NULL && strstr(err, "'nope'"));

        /* the server's errors: the connection lives on */
        c = fake_connect(f, FAKE_READ_EIO, "fake", TEST_WAIT_S * 1000);
        ASSERT_ERROR(nbd_pread(c, back, PAGE, 0), EIO);
        ASSERT_TRUE(!nbd_dead(c));
        ASSERT_OK(nbd_pwrite_batch(c, w, 3));
        ASSERT_ERROR(nbd_pread(c, back, PAGE, 0), EIO);
        nbd_close(c);
        c = fake_connect(f, FAKE_ENOSPC, "fake", TEST_WAIT_S * 1000);
        ASSERT_ERROR(nbd_pwrite_batch(c, w, 20), ENOSPC);
        ASSERT_TRUE(!nbd_dead(c));
        ASSERT_OK(nbd_pread(c, back, w[5].len, w[5].off));
        ASSERT_TRUE(memcmp(back, w[5].buf, w[5].len) == 0);
        nbd_close(c);

        test_fake_protocol_errors(f);
        test_fake_timeouts(f);

        fake_stop(f);
        free(buf);
        free(back);
        printf("fake: fallback, server errors, protocol errors ok\n");
}

/* ---- nbd-server ---- */

typedef struct Server {
        char exe[256];
        char conf[128], pidfile[128], sock[128], disk[128], log[128];
        int port;
        pid_t pid;
} Server;

static bool find_program(const char *name, char *buf, size_t len) {
        const char *path = getenv("PATH");
        char dirs[4096];

        snprintf(dirs, sizeof(dirs), "%s:/usr/sbin:/sbin", path ? path : "/usr/bin:/bin");
        for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                snprintf(buf, len, "%s/%s", d, name);
                if (access(buf, X_OK) == 0)
                        return true;
        }
        return false;
}

static void server_config(Server *s) {
        FILE *f;
        int fd;

        path_in_dir(s->conf, sizeof(s->conf), "nbd.conf");
        path_in_dir(s->pidfile, sizeof(s->pidfile), "nbd.pid");
        path_in_dir(s->sock, sizeof(s->sock), "nbd.sock");
        path_in_dir(s->disk, sizeof(s->disk), "disk.img");
        path_in_dir(s->log, sizeof(s->log), "nbd.log");
        s->port = td_free_port();
        fd = open(s->disk, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_OK(fd);
        ASSERT_OK(ftruncate(fd, (off_t)DISK_SIZE));
        close(fd);
        /* the daemon chdirs to /: absolute paths only */
        f = fopen(s->conf, "we");
        ASSERT_TRUE(f);
        fprintf(f, "[generic]\n"
                   "port = %d\n"
                   "listenaddr = 127.0.0.1\n"
                   "unixsock = %s\n"
                   "duallisten = true\n"
                   "[disk]\n"
                   "exportname = %s\n"
                   "flush = true\n"
                   "[ro]\n"
                   "exportname = %s\n"
                   "readonly = true\n",
                s->port, s->sock, s->disk, s->disk);
        ASSERT_OK(fclose(f));
}

static int connect_uri(const char *uri, int timeout_ms, NbdConn **ret, char *err, size_t errlen) {
        NbdAddr a;
        int r = nbd_parse(uri, &a, err, errlen);

        return r < 0 ? r : nbd_connect(&a, timeout_ms, ret, err, errlen);
}

static void tcp_uri(const Server *s, const char *name, char *buf, size_t len) {
        snprintf(buf, len, "nbd://127.0.0.1:%d/%s", s->port, name);
}

static void server_start(Server *s) {
        char uri[256], err[256] = "";
        uint64_t t0 = now_ns();
        int status, log;
        pid_t child;

        /* a socket file left by a killed server makes the next one exit */
        unlink(s->sock);
        unlink(s->pidfile);
        child = fork();
        ASSERT_OK(child);
        if (child == 0) {
                log = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
                if (log >= 0) {
                        dup2(log, 1);
                        dup2(log, 2);
                }
                execl(s->exe, "nbd-server", "-C", s->conf, "-p", s->pidfile, (char *)NULL);
                _exit(127);
        }
        ASSERT_EQ(waitpid(child, &status, 0), child);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                test_fail("nbd-server exited with status %#x (see %s)", status, s->log);
        s->pid = 0;
        tcp_uri(s, "disk", uri, sizeof(uri));
        for (;;) {
                FILE *f = fopen(s->pidfile, "re");
                NbdConn *c = NULL;

                if (s->pid <= 0 && f && fscanf(f, "%d", &s->pid) == 1 && s->pid > 0)
                        reaper_add(s->pid);
                if (f)
                        fclose(f);
                if (s->pid > 0 && connect_uri(uri, 200, &c, err, sizeof(err)) == 0) {
                        nbd_close(c);
                        break;
                }
                if (ms_since(t0) > TEST_WAIT_S * 1000ull)
                        test_fail("nbd-server not ready after %d s (pid %d): %s", TEST_WAIT_S, s->pid, err);
                usleep(10000);
        }
}

/* Signal the server and every connection it forked: it made itself a
 * session (and group) leader when it daemonized. */
static void server_signal(const Server *s, int sig) {
        ASSERT_OK(kill(-s->pid, sig));
}

static void server_kill(Server *s) {
        server_signal(s, SIGKILL);
        /* its parent exited when it daemonized: it is ours (subreaper) */
        ASSERT_EQ(waitpid(s->pid, NULL, 0), s->pid);
        for (int i = 0; i < 20; i++) {
                while (waitpid(-1, NULL, WNOHANG) > 0)
                        ;
                usleep(1000);
        }
        s->pid = 0;
}

/* ---- data ---- */

typedef struct Block {
        uint64_t off;
        uint32_t len;
} Block;

static uint8_t *shadow; /* what the export must hold */
static Block *blocks;
static unsigned nblocks;

/* Batches of up to 40 writes that do not overlap each other (a server may
 * carry a batch out in any order), filled in the shadow copy: the writes
 * send straight from it. Most are 4..64 KiB and page-aligned; every 50th
 * has an odd size and place. */
static void write_blocks(NbdConn *c, unsigned n) {
        static uint8_t used[DISK_SIZE / PAGE];
        NbdWrite w[40];

        blocks = calloc(n, sizeof(*blocks));
        ASSERT_TRUE(blocks);
        nblocks = n;
        for (unsigned at = 0; at < n;) {
                unsigned k = 1 + (unsigned)(rnd() % 40);

                k = MIN(k, n - at);
                memset(used, 0, sizeof(used));
                for (unsigned i = 0; i < k; i++) {
                        Block *b = &blocks[at + i];
                        uint64_t first, last;

                        do {
                                if ((at + i) % 50 == 49) {
                                        b->len = 1 + (uint32_t)(rnd() % 5000);
                                        b->off = rnd() % (DISK_SIZE - b->len);
                                } else {
                                        b->len = PAGE * (1 + (uint32_t)(rnd() % 16));
                                        b->off = PAGE * (rnd() % ((DISK_SIZE - b->len) / PAGE + 1));
                                }
                                first = b->off / PAGE;
                                last = (b->off + b->len - 1) / PAGE;
                        } while (memchr(used + first, 1, last - first + 1));
                        memset(used + first, 1, last - first + 1);
                        fill(shadow + b->off, b->len, at + i);
                        w[i] = (NbdWrite) { shadow + b->off, b->len, b->off };
                }
                ASSERT_OK(nbd_pwrite_batch(c, w, k));
                at += k;
        }
}

typedef struct Verify {
        NbdConn *c;
        const char *name;
} Verify;

static void *verify_blocks(void *arg) {
        const Verify *v = arg;
        uint8_t *buf = malloc(16 * PAGE);

        ASSERT_TRUE(buf);
        memset(buf, 0, 16 * PAGE);
        for (unsigned i = 0; i < nblocks; i++) {
                const Block *b = &blocks[i];
                int r = nbd_pread(v->c, buf, b->len, b->off);
                if (r < 0)
                        test_fail("%s: read of block %u (%u bytes at %" PRIu64 "): %s", v->name, i, b->len, b->off,
                                  strerror(-r));
                if (memcmp(buf, shadow + b->off, b->len) != 0)
                        test_fail("%s: block %u (%u bytes at %" PRIu64 ") reads back wrong", v->name, i, b->len,
                                  b->off);
        }
        free(buf);
        return NULL;
}

static void verify_file(const Server *s) {
        uint8_t *buf = malloc(MIB);
        int fd = open(s->disk, O_RDONLY | O_CLOEXEC);

        ASSERT_TRUE(buf);
        ASSERT_OK(fd);
        for (uint64_t off = 0; off < DISK_SIZE; off += MIB) {
                ASSERT_EQ(pread(fd, buf, MIB, (off_t)off), (ssize_t)MIB);
                if (memcmp(buf, shadow + off, MIB) != 0)
                        test_fail("the backing file differs in the MiB at %" PRIu64, off);
        }
        close(fd);
        free(buf);
}

static void test_bounds(NbdConn *c) {
        uint8_t *big = malloc(NBD_MAX_REQUEST), buf[PAGE];
        NbdWrite w[3];

        ASSERT_TRUE(big);
        ASSERT_ERROR(nbd_pread(c, buf, 0, 0), EINVAL);
        ASSERT_ERROR(nbd_pread(c, big, NBD_MAX_REQUEST + 1, 0), EINVAL);
        ASSERT_ERROR(nbd_pread(c, buf, PAGE, DISK_SIZE - PAGE + 1), EINVAL);
        ASSERT_ERROR(nbd_pread(c, buf, PAGE, UINT64_MAX - 10), EINVAL);
        ASSERT_ERROR(nbd_pread(c, NULL, PAGE, 0), EINVAL);
        ASSERT_OK(nbd_pread(c, buf, 1, DISK_SIZE - 1));
        ASSERT_EQ(buf[0], shadow[DISK_SIZE - 1]);
        /* one bad entry: nothing of the batch is written */
        memset(buf, 0xa5, sizeof(buf));
        w[0] = (NbdWrite) { buf, PAGE, 0 };
        w[1] = (NbdWrite) { buf, PAGE, DISK_SIZE };
        w[2] = (NbdWrite) { buf, PAGE, 2 * PAGE };
        ASSERT_ERROR(nbd_pwrite_batch(c, w, 3), EINVAL);
        w[1].len = 0;
        w[1].off = 0;
        ASSERT_ERROR(nbd_pwrite_batch(c, w, 3), EINVAL);
        ASSERT_OK(nbd_pwrite_batch(c, w, 0));
        ASSERT_OK(nbd_pread(c, buf, PAGE, 0));
        ASSERT_TRUE(memcmp(buf, shadow, PAGE) == 0);
        ASSERT_TRUE(!nbd_dead(c));

        /* the largest request both ways: many partial sends and receives */
        fill(shadow, NBD_MAX_REQUEST, 4242);
        w[0] = (NbdWrite) { shadow, NBD_MAX_REQUEST, 0 };
        ASSERT_OK(nbd_pwrite_batch(c, w, 1));
        memset(big, 0, NBD_MAX_REQUEST);
        ASSERT_OK(nbd_pread(c, big, NBD_MAX_REQUEST, 0));
        ASSERT_TRUE(memcmp(big, shadow, NBD_MAX_REQUEST) == 0);
        free(big);
        printf("server: bounds and 32 MiB requests ok\n");
}

static void measure_latency(NbdConn *c) {
        enum { N = 1000, WARM = 100 };
        static uint64_t ns[N];
        uint8_t buf[PAGE];

        for (unsigned i = 0; i < N + WARM; i++) {
                uint64_t off = PAGE * (rnd() % (DISK_SIZE / PAGE)), t0 = now_ns();
                ASSERT_OK(nbd_pread(c, buf, PAGE, off));
                if (i >= WARM)
                        ns[i - WARM] = now_ns() - t0;
                ASSERT_TRUE(memcmp(buf, shadow + off, PAGE) == 0);
        }
        qsort(ns, N, sizeof(ns[0]), cmp_u64);
        printf("server: 4 KiB nbd_pread latency over %d: median %.1f us, p90 %.1f us, p99 %.1f us\n", N,
               (double)ns[N / 2] / 1e3, (double)ns[N * 9 / 10] / 1e3, (double)ns[N * 99 / 100] / 1e3);
}

static void test_connect_errors(const Server *s) {
        char uri[256], err[256] = "";
        NbdConn *c = NULL;
        uint64_t t0;
        int r;

        tcp_uri(s, "nope", uri, sizeof(uri));
        ASSERT_ERROR(connect_uri(uri, 1000, &c, err, sizeof(err)), ENOENT);
        if (!strstr(err, "export 'nope' not found"))
                test_fail("unknown export: '%s'", err);
        printf("server: unknown export: %s\n", err);
        snprintf(uri, sizeof(uri), "nbd://127.0.0.1:%d/disk", td_free_port());
        ASSERT_ERROR(connect_uri(uri, 1000, &c, err, sizeof(err)), ECONNREFUSED);
        if (!strstr(err, "connection refused"))
                test_fail("refused: '%s'", err);
        ASSERT_TRUE(c == NULL);
        ASSERT_TRUE(nbd_close(NULL) == NULL);

        /* a name that cannot resolve: an answer, or the timeout (no DNS) */
        t0 = now_ns();
        r = connect_uri("nbd://no-such-host.invalid/disk", 500, &c, err, sizeof(err));
        if ((r != -EHOSTUNREACH && r != -ETIMEDOUT) || ms_since(t0) > 500 + LATE_MS)
                test_fail("unresolvable host: %d after %.0f ms: '%s'", r, ms_since(t0), err);
        printf("server: unresolvable host: %s\n", err);

        /* A stopped server: the kernel completes connects into its
         * listen backlog (10), the greeting never comes; once the backlog
         * is full, the connect itself times out. */
        snprintf(uri, sizeof(uri), "nbd://localhost:%d/disk", s->port);
        server_signal(s, SIGSTOP);
        for (int i = 0, greeting = 0, connect = 0; i < 20; i++) {
                t0 = now_ns();
                r = connect_uri(uri, 20, &c, err, sizeof(err));
                if (r != -ETIMEDOUT || ms_since(t0) > 20 + LATE_MS)
                        test_fail("connect to a stopped server: %d after %.0f ms: '%s'", r, ms_since(t0), err);
                greeting += strstr(err, "greeting") != NULL;
                connect += strstr(err, "greeting") == NULL;
                if (i == 19)
                        printf("server: stopped: %d connects timed out in the handshake, %d in connect (%s)\n",
                               greeting, connect, err);
        }
        server_signal(s, SIGCONT);
}

static void test_read_only(const Server *s) {
        char uri[256], err[256] = "";
        uint8_t buf[PAGE];
        NbdWrite w = { buf, PAGE, 0 };
        NbdConn *c = NULL;

        tcp_uri(s, "ro", uri, sizeof(uri));
        ASSERT_OK(connect_uri(uri, 1000, &c, err, sizeof(err)));
        ASSERT_TRUE(nbd_read_only(c));
        ASSERT_ERROR(nbd_pwrite_batch(c, &w, 1), EPERM);
        ASSERT_OK(nbd_pread(c, buf, PAGE, 5 * PAGE));
        ASSERT_TRUE(memcmp(buf, shadow + 5 * PAGE, PAGE) == 0);
        nbd_close(c);
}

/* Concurrently: every block from two connections, TCP and Unix socket. */
static void verify_two(NbdConn *tcp, NbdConn *unx) {
        Verify v[2] = { { tcp, "tcp" }, { unx, "unix" } };
        pthread_t t[2];

        for (int i = 0; i < 2; i++)
                ASSERT_EQ(pthread_create(&t[i], NULL, verify_blocks, &v[i]), 0);
        for (int i = 0; i < 2; i++)
                ASSERT_EQ(pthread_join(t[i], NULL), 0);
}

/* Stopped server: -ETIMEDOUT; killed server: an error at once. */
static void test_server_death(Server *s, NbdConn *c, NbdConn *c2) {
        char uri[256], err[256] = "";
        uint8_t buf[PAGE];
        NbdWrite w = { buf, PAGE, 0 };
        NbdConn *slow = NULL;
        uint64_t t0;
        double ms;
        int r;

        tcp_uri(s, "disk", uri, sizeof(uri));
        ASSERT_OK(connect_uri(uri, 300, &slow, err, sizeof(err)));
        server_signal(s, SIGSTOP);
        t0 = now_ns();
        ASSERT_ERROR(nbd_pread(slow, buf, PAGE, 0), ETIMEDOUT);
        ms = ms_since(t0);
        ASSERT_TRUE(nbd_dead(slow));
        server_signal(s, SIGCONT);
        nbd_close(slow);
        if (ms < 250 || ms > 300 + LATE_MS)
                test_fail("a read of a stopped server took %.0f ms for a 300 ms timeout", ms);
        printf("server: stopped: -ETIMEDOUT after %.0f ms (timeout 300 ms)\n", ms);

        server_kill(s);
        t0 = now_ns();
        r = nbd_pread(c, buf, PAGE, 0);
        ms = ms_since(t0);
        /* the peer's reset, not the connection's timeout */
        if (r >= 0 || r == -ETIMEDOUT || ms > CONN_MS + LATE_MS)
                test_fail("read after the server died: %d (%s) after %.0f ms", r, strerror(-r), ms);
        ASSERT_TRUE(nbd_dead(c));
        printf("server: killed: nbd_pread %s after %.1f ms\n", strerror(-r), ms);
        ASSERT_ERROR(nbd_pread(c, buf, PAGE, 0), ENOTCONN);
        ASSERT_ERROR(nbd_pwrite_batch(c, &w, 1), ENOTCONN);
        ASSERT_ERROR(nbd_flush(c), ENOTCONN);
        /* the writer's way to find out: nothing, however it fails, raises SIGPIPE */
        r = nbd_pwrite_batch(c2, &w, 1);
        ASSERT_TRUE(r < 0 && nbd_dead(c2));
        printf("server: killed: nbd_pwrite_batch %s\n", strerror(-r));
}

static void test_server(const char *exe) {
        Server s = {};
        char uri[256], err[256] = "";
        NbdConn *c = NULL, *c2 = NULL;
        unsigned n = RUNNING_ON_VALGRIND ? 300 : 3000;
        uint64_t t0;

        snprintf(s.exe, sizeof(s.exe), "%s", exe);
        shadow = calloc(1, DISK_SIZE);
        ASSERT_TRUE(shadow);
        server_config(&s);
        server_start(&s);

        tcp_uri(&s, "disk", uri, sizeof(uri));
        ASSERT_OK(connect_uri(uri, CONN_MS, &c, err, sizeof(err)));
        ASSERT_EQ(nbd_size(c), DISK_SIZE);
        ASSERT_TRUE(!nbd_read_only(c) && nbd_can_flush(c));
        printf("server: nbd-server flags: multi_conn=%d can_flush=%d read_only=%d\n", nbd_multi_conn(c),
               nbd_can_flush(c), nbd_read_only(c));
        test_connect_errors(&s);

        t0 = now_ns();
        write_blocks(c, n);
        printf("server: %u pipelined writes in %.0f ms\n", n, ms_since(t0));
        verify_blocks(&(Verify) { c, "tcp" });
        test_bounds(c);
        verify_blocks(&(Verify) { c, "tcp" });
        ASSERT_OK(nbd_flush(c));
        verify_file(&s);
        test_read_only(&s);

        snprintf(uri, sizeof(uri), "nbd+unix:///disk?socket=%s", s.sock);
        ASSERT_OK(connect_uri(uri, CONN_MS, &c2, err, sizeof(err)));
        ASSERT_EQ(nbd_size(c2), DISK_SIZE);
        t0 = now_ns();
        verify_two(c, c2);
        printf("server: %u blocks read back by two threads (TCP, Unix socket) in %.0f ms\n", n, ms_since(t0));
        /* a name, not an address: the resolver thread (::1 may refuse) */
        nbd_close(c2);
        snprintf(uri, sizeof(uri), "nbd://localhost:%d/disk", s.port);
        ASSERT_OK(connect_uri(uri, CONN_MS, &c2, err, sizeof(err)));
        measure_latency(c);

        test_server_death(&s, c, c2);
        nbd_close(c);
        nbd_close(c2);

        /* the same port again: the data is still there */
        server_start(&s);
        tcp_uri(&s, "disk", uri, sizeof(uri));
        ASSERT_OK(connect_uri(uri, CONN_MS, &c, err, sizeof(err)));
        verify_blocks(&(Verify) { c, "restarted" });
        nbd_close(c);
        server_kill(&s);
        printf("server: restarted on port %d, every block read back\n", s.port);
        free(blocks);
        free(shadow);
}

int main(void) {
        char exe[256];
        uint64_t t0 = now_ns();

        setvbuf(stdout, NULL, _IOLBF, 0);
        /* SIGPIPE stays fatal: a send without MSG_NOSIGNAL to a dead
         * server would end the test */
        snprintf(dir, sizeof(dir), "/tmp/test-nbd.XXXXXX");
        ASSERT_TRUE(mkdtemp(dir));
        reaper_start();
        rng ^= ((uint64_t)getpid() << 20 ^ now_ns()) | 1;
        printf("seed %#" PRIx64 "\n", rng);

        test_uri();
        test_fake();
        if (!find_program("nbd-server", exe, sizeof(exe)))
                test_skip("nbd-server is not installed (apt-get install nbd-server)");
        ASSERT_OK(prctl(PR_SET_CHILD_SUBREAPER, 1));
        test_server(exe);
        printf("all ok in %.1f s\n", ms_since(t0) / 1e3);
        return 0;
}
