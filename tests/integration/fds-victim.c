/*
 * fds-victim: an unmodified program that closes every descriptor it did
 * not open itself, as a daemon does, for test-preload-fds (run under
 * zswap-run).
 *
 *   fds-victim close_range|closefrom|close-loop|dup2|uffd|close-race|mlock|after-file
 *
 * It fills 16 MiB, closes its descriptors above 2 the way argv says (dup2:
 * puts /dev/null over every descriptor from 3 to 63 instead; uffd: waits
 * until the shim has registered the 16 MiB, then registers its first half
 * with a userfaultfd of its own for missing pages, and prints "uffd ok" or
 * "uffd ERRNO"; close-race: from its start, while the shim's scanner
 * attaches, closes every descriptor above 2 and forks a child that checks
 * every byte, again and again until the shim has registered the 16 MiB
 * and 50 times more, then prints "close-race children N bad M"; mlock:
 * locks the second half before anything else, waits until the shim has
 * registered the first, and prints "mlock locked-managed 0|1"; after-file:
 * its 16 MiB lie right after a page of a file mapping, where a loaded
 * object's .bss would lie, and it prints "after-file managed 0|1" once the
 * shim has registered them or 30 s have passed), prints
 * "ready PID" and waits for a line on stdin; then it checks every byte and
 * prints "ok" or "bad N" (N words differ), and exits 0 or 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEN ((size_t)16 << 20)

/* Whether the mapping holding p is registered with a userfaultfd (VmFlags
 * "um" in /proc/self/smaps, or "uw" alone for memory never evicted from).
 * close-race's closer thread closes our descriptor for smaps too, at any
 * moment: the file is read whole, in one read() after its open(), and
 * read again until one read got to its end (stdio's buffered reads of a
 * file closed under them looked like "not registered" every time while
 * the closer ran on the other CPU, and the program then forked its 20000
 * children). */
static char smaps[1 << 22];

static int uffd_registered(const void *p) {
        for (int tries = 0; tries < 100000; tries++) {
                int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
                size_t n = 0;
                ssize_t k = -1;

                if (fd < 0)
                        continue;
                while (n < sizeof(smaps) - 1 && (k = read(fd, smaps + n, sizeof(smaps) - 1 - n)) > 0)
                        n += (size_t)k;
                close(fd); /* EBADF if the closer was first */
                if (k != 0)
                        continue; /* closed under us (or too long): again */
                smaps[n] = 0;
                int in = 0;
                for (char *line = smaps, *next; line && *line; line = next) {
                        unsigned long s, e;
                        next = strchr(line, '\n');
                        if (next)
                                *next++ = 0;
                        if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' '))
                                in = (uintptr_t)p >= s && (uintptr_t)p < e;
                        else if (in && strncmp(line, "VmFlags:", 8) == 0)
                                return strstr(line, " um") != NULL || strstr(line, " uw") != NULL;
                }
                return 0;
        }
        return 0;
}

/* Until the shim has registered p, for at most tries x 10 ms: whether it has. */
static int wait_registered(const void *p, int tries) {
        for (int i = 0; i < tries && !uffd_registered(p); i++)
                usleep(10000);
        return uffd_registered(p);
}

static atomic_bool closing = true;
static atomic_long closes;

/* close-race: every descriptor above 2, closed again and again */
static void *closer_main(void *arg) {
        (void)arg;
        while (atomic_load(&closing)) {
                close_range(3, ~0U, 0);
                atomic_fetch_add(&closes, 1);
        }
        return NULL;
}

int main(int argc, char **argv) {
        if (argc != 2)
                return 2;
        uint64_t *p;
        if (strcmp(argv[1], "after-file") == 0) {
                /* as when a library loaded later (dlopen()) lands right
                 * below the program's memory */
                char *r = mmap(NULL, LEN + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
                if (r == MAP_FAILED || fd < 0 || mmap(r, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED)
                        return 2;
                close(fd);
                p = (uint64_t *)(r + 4096);
        } else if ((p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED)
                return 2;
        /* mlock: at once, long before the shim attaches (ZSWAP_ATTACH_MS) */
        if (strcmp(argv[1], "mlock") == 0 && mlock((char *)p + LEN / 2, LEN / 2) < 0) {
                printf("mlock %d\n", errno);
                return 4;
        }
        for (size_t i = 0; i < LEN / 8; i++)
                p[i] = i * 0x9e3779b97f4a7c15ull + 1;
        if (strcmp(argv[1], "close_range") == 0)
                close_range(3, ~0U, 0);
        else if (strcmp(argv[1], "closefrom") == 0)
                closefrom(3);
        else if (strcmp(argv[1], "close-loop") == 0)
                for (int fd = 3; fd < 1024; fd++)
                        close(fd);
        else if (strcmp(argv[1], "dup2") == 0) {
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);
                int refused = 0;
                for (int fd = 3; fd < 64; fd++)
                        if (fd != null && dup2(null, fd) < 0)
                                refused++;
                printf("dup2 refused %d\n", refused);
        } else if (strcmp(argv[1], "uffd") == 0) {
                if (!wait_registered(p, 3000)) {
                        printf("uffd never managed\n");
                        return 4;
                }
                int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
                struct uffdio_api api = { .api = UFFD_API };
                struct uffdio_register reg = { .range = { (uintptr_t)p, LEN / 2 },
                                               .mode = UFFDIO_REGISTER_MODE_MISSING };
                if (u < 0 || ioctl(u, UFFDIO_API, &api) < 0 || ioctl(u, UFFDIO_REGISTER, &reg) < 0)
                        printf("uffd %d\n", errno);
                else
                        printf("uffd ok\n");
        } else if (strcmp(argv[1], "mlock") == 0) {
                if (!wait_registered(p, 12000)) {
                        printf("mlock never managed\n");
                        return 4;
                }
                usleep(300000); /* a scan or two more */
                printf("mlock locked-managed %d\n", uffd_registered((char *)p + LEN / 2));
        } else if (strcmp(argv[1], "after-file") == 0) {
                printf("after-file managed %d\n", wait_registered(p, 3000));
        } else if (strcmp(argv[1], "close-race") == 0) {
                int children = 0, bad = 0, after = 0, before = 0;
                pthread_t closer;
                if (pthread_create(&closer, NULL, closer_main, NULL) != 0)
                        return 2;
                for (int i = 0; i < 20000 && after < 50; i++) {
                        int reg = uffd_registered(p);
                        after += reg;
                        before += !reg;
                        close_range(3, ~0U, 0);
                        pid_t c = fork();
                        if (c < 0)
                                return 2;
                        if (c == 0) {
                                size_t b = 0; /* a word of each page */
                                for (size_t k = 0; k < LEN / 8; k += 512)
                                        b += p[k] != k * 0x9e3779b97f4a7c15ull + 1;
                                _exit(b != 0);
                        }
                        int st;
                        if (waitpid(c, &st, 0) != c)
                                return 2;
                        children++;
                        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
                }
                atomic_store(&closing, false);
                pthread_join(closer, NULL);
                printf("close-race children %d bad %d managed %d before %d\n", children, bad, after >= 50, before);
        } else
                return 2;
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof(line), stdin))
                return 3;
        size_t bad = 0;
        for (size_t i = 0; i < LEN / 8; i++)
                bad += p[i] != i * 0x9e3779b97f4a7c15ull + 1;
        if (bad)
                printf("bad %zu\n", bad);
        else
                printf("ok\n");
        fflush(stdout);
        return bad != 0;
}
