/*
 * group-victim: one process of a group for test-group (run under
 * zswap-run, several at once from a shell).
 *
 *   group-victim MIB GO PARENT
 *
 * Maps MIB MiB, writes every page (a pattern of its own, by pid and
 * offset), prints "ready PID", waits until the file GO exists, then checks
 * every page and prints "ok PID" or "bad PID N" (N pages differ), and
 * exits 0 or 1. Killed when its parent, the shell PARENT, dies (which dies
 * with the test): a test that fails never creates GO.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

static uint64_t word(uint64_t seed, size_t off) {
        uint64_t x = seed ^ ((off + 1) * 0x9e3779b97f4a7c15ull);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        return x ^ (x >> 29);
}

int main(int argc, char **argv) {
        if (argc != 4)
                return 2;
        /* the shell's death kills us, unless it died before we asked */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != (pid_t)atoi(argv[3]))
                return 2;
        size_t len = (size_t)atoi(argv[1]) << 20;
        uint64_t seed = (uint64_t)getpid();
        uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return 2;
        for (size_t off = 0; off < len; off += 4096)
                for (size_t w = 0; w < 4096; w += 256) /* compressible, distinct per page */
                        *(uint64_t *)(p + off + w) = word(seed, off);
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        while (access(argv[2], F_OK) < 0)
                usleep(10000);
        unsigned long bad = 0;
        for (size_t off = 0; off < len; off += 4096)
                for (size_t w = 0; w < 4096; w += 256)
                        bad += *(uint64_t *)(p + off + w) != word(seed, off);
        if (bad)
                printf("bad %d %lu\n", (int)getpid(), bad);
        else
                printf("ok %d\n", (int)getpid());
        fflush(stdout);
        return bad != 0;
}
