/*
 * fds-victim: an unmodified program that closes every descriptor it did
 * not open itself, as a daemon does, for test-preload-fds (run under
 * zswap-run).
 *
 *   fds-victim close_range|closefrom|close-loop|dup2
 *
 * It fills 16 MiB, closes its descriptors above 2 the way argv says (dup2:
 * puts /dev/null over every descriptor from 3 to 63 instead), prints
 * "ready PID" and waits for a line on stdin; then it checks every byte and
 * prints "ok" or "bad N" (N words differ), and exits 0 or 1.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEN ((size_t)16 << 20)

int main(int argc, char **argv) {
        if (argc != 2)
                return 2;
        uint64_t *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return 2;
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
