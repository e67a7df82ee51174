/*
 * maps-victim: an unmodified program for test-preload-maps (run under
 * zswap-run) that changes its mappings the ways that once left memory
 * out of the shim's sight.
 *
 *   maps-victim reuse|grow
 *
 * reuse: a mapping is unmapped and a new one made at the same address
 * before the shim's scanner looks again; three times: through libc's
 * mmap() and munmap() (interposed), through raw system calls (seen by
 * nothing but the periodic scan), and for the middle half of a mapping
 * only.
 * grow: a mapping is grown with mremap(), once moved to a new address
 * (the next page is taken, it cannot grow where it is) and once where it
 * lies.
 *
 * Each mapping lies between two PROT_NONE pages, so that it never merges
 * with a neighbour and /proc/PID/smaps shows it alone. For each step it
 * fills the mapping with a pattern of its own, prints "map ADDR LEN" (a
 * mapping the shim is to manage) and waits for a line on stdin (the test
 * has seen pages of it evicted); then it makes the change, fills what is
 * new, prints "changed ADDR LEN" (the mapping the shim is to manage now,
 * whole) and waits again. Every byte of every mapping it still has is
 * checked after each wait. At the end: "done errors N", exit 0 when N
 * is 0.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096ul
#define MIB (1ul << 20)

static unsigned long errors;

/* The word at offset off of a mapping filled with seed: by offset, not
 * address, so that a moved mapping reads as it was written */
static uint64_t word(uint64_t seed, size_t off) {
        uint64_t x = seed ^ ((off + 1) * 0x9e3779b97f4a7c15ull);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        return x ^ (x >> 29);
}

/* A few words a page: enough to tell every page from every other and
 * from zeros, cheap enough for 32 MiB at a time. */
static void fill(uint8_t *p, size_t len, uint64_t seed) {
        for (size_t off = 0; off < len; off += 512)
                *(uint64_t *)(p + off) = word(seed, off);
}

/* p is at offset `at` of the mapping filled with seed */
static void check_at(const char *what, const uint8_t *p, size_t len, uint64_t seed, size_t at) {
        unsigned long bad = 0;
        for (size_t off = 0; off < len; off += 512)
                bad += *(const uint64_t *)(p + off) != word(seed, at + off);
        if (bad)
                fprintf(stderr, "maps-victim: %s at %p: %lu words wrong\n", what, (const void *)p, bad);
        errors += bad;
}

static void check(const char *what, const uint8_t *p, size_t len, uint64_t seed) {
        check_at(what, p, len, seed, 0);
}

static void wait_line(void) {
        char line[64];
        if (!fgets(line, sizeof(line), stdin))
                exit(3);
}

static void say(const char *what, const void *p, size_t len) {
        printf("%s %lx %zu\n", what, (unsigned long)(uintptr_t)p, len);
        fflush(stdout);
        wait_line();
}

/* len bytes of read-write memory between two PROT_NONE pages, and room
 * for `room` more bytes behind it, PROT_NONE too */
static uint8_t *guarded(size_t len, size_t room) {
        uint8_t *g = mmap(NULL, len + room + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (g == MAP_FAILED) {
                perror("maps-victim: mmap");
                exit(2);
        }
        uint8_t *p = g + PAGE;
        if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p) {
                perror("maps-victim: mmap");
                exit(2);
        }
        return p;
}

static void *raw_mmap(void *addr, size_t len) {
        return (void *)syscall(SYS_mmap, addr, len, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
}

static void reuse(void) {
        const size_t len = 8 * MIB;
        uint64_t seed = 1;

        for (int way = 0; way < 3; way++) {
                uint8_t *p = guarded(len, 0);
                fill(p, len, seed);
                say("map", p, len);
                check("before", p, len, seed);
                /* at once, no scan between: the same maps line as before */
                uint8_t *at = way == 2 ? p + len / 4 : p;
                size_t n = way == 2 ? len / 2 : len;
                void *q;
                if (way == 0) {
                        munmap(at, n);
                        q = mmap(at, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                                 -1, 0);
                } else {
                        syscall(SYS_munmap, at, n);
                        q = raw_mmap(at, n);
                }
                if (q != at) {
                        fprintf(stderr, "maps-victim: mmap at %p: %p (%s)\n", (void *)at, q, strerror(errno));
                        exit(2);
                }
                uint64_t fresh = seed + 100;
                /* a fresh mapping reads zeros */
                for (size_t off = 0; off < n; off += PAGE)
                        if (*(uint64_t *)(at + off) != 0)
                                errors++;
                fill(at, n, fresh);
                say("changed", p, len);
                if (way == 2) {
                        check("head", p, len / 4, seed);
                        check("middle", at, n, fresh);
                        check_at("tail", p + 3 * len / 4, len / 4, seed, 3 * len / 4);
                } else
                        check("after", p, len, fresh);
                seed += 1000;
        }
}

static void grow(void) {
        const size_t len = 8 * MIB, grown = 32 * MIB;
        uint64_t seed = 7;

        for (int way = 0; way < 2; way++) {
                /* moved: the page after it is taken (PROT_NONE); in
                 * place: room behind it, given back just before */
                uint8_t *p = guarded(len, way == 1 ? grown - len : 0);
                fill(p, len, seed);
                say("map", p, len);
                check("before", p, len, seed);
                if (way == 1)
                        munmap(p + len, grown - len);
                uint8_t *q = mremap(p, len, grown, way == 0 ? MREMAP_MAYMOVE : 0);
                if (q == MAP_FAILED) {
                        fprintf(stderr, "maps-victim: mremap: %s\n", strerror(errno));
                        exit(2);
                }
                if ((way == 0) == (q == p)) {
                        fprintf(stderr, "maps-victim: mremap %s\n", way == 0 ? "did not move" : "moved");
                        exit(2);
                }
                check("moved", q, len, seed);
                fill(q + len, grown - len, seed + 1);
                say("changed", q, grown);
                check("old part", q, len, seed);
                check("grown part", q + len, grown - len, seed + 1);
                seed += 1000;
        }
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: maps-victim reuse|grow\n");
                return 2;
        }
        if (strcmp(argv[1], "reuse") == 0)
                reuse();
        else if (strcmp(argv[1], "grow") == 0)
                grow();
        else
                return 2;
        printf("done errors %lu\n", errors);
        fflush(stdout);
        return errors != 0;
}
