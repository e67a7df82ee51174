/*
 * ident-victim.c: the victim of test-ident, installed setuid to a user of
 * its own by the test. It reads that user's secret (a 0600 file) into the
 * first page of a mapping at the address it is given, as a program keeps a
 * key in memory, says "mapped" on stdout, and lives for a minute at most
 * (the test kills it sooner). Built without sanitizers (a setuid program
 * cannot re-exec itself the way their runtimes do): tests/meson.build.
 *
 * ident-victim SECRET_FILE ADDR LEN
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
        char secret[256];

        if (argc != 4)
                return 2;
        unsigned long long addr = strtoull(argv[2], NULL, 0), len = strtoull(argv[3], NULL, 0);
        int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 3;
        ssize_t n = read(fd, secret, sizeof(secret) - 1);
        close(fd);
        if (n <= 0)
                return 4;
        uint8_t *p = mmap((void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED || (uintptr_t)p != addr)
                return 5;
        for (size_t off = 0; off + (size_t)n <= 4096; off += (size_t)n)
                memcpy(p + off, secret, (size_t)n);
        /* the rest of the mapping is in use too */
        for (size_t off = 4096; off < len; off += 4096)
                p[off] = 'v';
        printf("mapped\n");
        fflush(stdout);
        for (int i = 0; i < 600; i++)
                usleep(100000);
        return 0;
}
