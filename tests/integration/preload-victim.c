/*
 * preload-victim: an unmodified program (not linked with libzswap) for
 * test-preload, run under zswap-run. Several threads allocate, check,
 * reallocate and free blocks of every size (malloc's brk heap, its arenas
 * and mmap'd chunks), and each also keeps one region of its own that it
 * grows with mremap and drops pages of with MADV_DONTNEED, checking every
 * byte against what it wrote, while the test evicts the process from
 * outside. At the end a forked child checks everything again.
 *
 *   preload-victim SECONDS THREADS [stdin]
 *
 * With "stdin" it runs SECONDS and then on until a line (or EOF) on its
 * stdin: the test says when it has evicted enough, whatever the
 * machine's speed.
 *
 * Debugging (a page that came back wrong): ZSWAP_VICTIM_OPLOG=1 keeps a
 * ring of the program's own allocations, mremaps and madvises, and
 * ZSWAP_VICTIM_TRACE_PID=PID sends SIGUSR2 to that zswapd (started with
 * ZSWAPD_TRACE) at the first bad word; what is then said on stderr (the
 * page's mapping and VmFlags in smaps, its pagemap word, the operations
 * that touched it) goes with `scripts/trace-page.py --follow TRACE PAGE`.
 *
 * Prints its pid, then "errors N" (N bad blocks, or failed errno checks of
 * the interposed mmap/mremap) at the end; exit 0 when N is 0 and the child
 * agreed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LIVE 64              /* blocks each thread keeps */
#define OWN_PAGES_MAX 1024   /* its own region grows up to 4 MiB */
#define PAGE 4096

typedef struct Block {
        uint64_t *p;
        size_t words;
        uint64_t seed;
} Block;

typedef struct Thread {
        unsigned idx;
        Block live[LIVE];
        uint8_t *own;        /* its own region, pages of version own_ver[i] (0: dropped) */
        size_t own_pages;
        uint32_t own_ver[OWN_PAGES_MAX];
} Thread;

static _Atomic uint64_t errors, ops;
static volatile int stop;

static uint64_t rnd(uint64_t *s) {
        uint64_t x = *s ? *s : 88172645463325252ull;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *s = x;
}

static void fill(uint64_t *p, size_t words, uint64_t seed) {
        for (size_t i = 0; i < words; i++)
                p[i] = seed * 0x9e3779b97f4a7c15ull + i;
}

/* Debugging aid: a ring of the program's own memory operations, and on
 * the first bad word, the mapping's smaps entry, the page's pagemap word,
 * the operations that touched the page, and SIGUSR2 to the daemon named
 * by ZSWAP_VICTIM_TRACE_PID (its ZSWAPD_TRACE dump). */
typedef struct OpRec {
        uint64_t t;
        uint32_t thr, op; /* 1 malloc, 2 realloc, 3 free, 4 own mremap, 5 own madvise, 6 own mmap */
        uint64_t a, b, len, len2; /* a: the block (the new place for 2 and 4), b: the old place;
                                   * len: the length (the old one for 2 and 4), len2: the new one */
} OpRec;
#define OPLOG (1u << 20)
static OpRec *oplog;
static _Atomic uint64_t opn;
static _Thread_local unsigned my_idx;

static uint64_t now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

static void oplog_add(unsigned op, const void *a, const void *b, size_t len, size_t len2) {
        if (!oplog)
                return;
        uint64_t i = atomic_fetch_add_explicit(&opn, 1, memory_order_relaxed);
        oplog[i % OPLOG] = (OpRec){ now_us(), my_idx, op, (uintptr_t)a, (uintptr_t)b, len, len2 };
}

static void diagnose(const void *addr) {
        uintptr_t pg = (uintptr_t)addr & ~(uintptr_t)(PAGE - 1);
        char line[512];
        const char *pid = getenv("ZSWAP_VICTIM_TRACE_PID");
        if (pid && *pid)
                kill(atoi(pid), SIGUSR2);
        fprintf(stderr, "preload-victim: DIAG page %#lx at %llu us\n", (unsigned long)pg, (unsigned long long)now_us());
        int fd = open("/proc/self/pagemap", O_RDONLY);
        if (fd >= 0) {
                uint64_t w = 0, w2[3] = { 0 };
                pread(fd, &w, 8, (off_t)(pg / PAGE) * 8);
                pread(fd, w2, 24, (off_t)(pg / PAGE - 1) * 8);
                fprintf(stderr, "preload-victim: DIAG pagemap %#llx (prev/this/next %#llx %#llx %#llx)\n",
                        (unsigned long long)w, (unsigned long long)w2[0], (unsigned long long)w2[1],
                        (unsigned long long)w2[2]);
                close(fd);
        }
        FILE *f = fopen("/proc/self/smaps", "re");
        bool in = false;
        while (f && fgets(line, sizeof(line), f)) {
                unsigned long s, e;
                if (((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) &&
                    sscanf(line, "%lx-%lx ", &s, &e) == 2) {
                        in = pg >= s && pg < e;
                        if (s <= pg + (1 << 21) && e + (1 << 21) >= pg)
                                fprintf(stderr, "preload-victim: DIAG map%s %s", in ? "*" : "", line);
                        continue;
                }
                if (in && (strncmp(line, "VmFlags", 7) == 0 || strncmp(line, "Rss", 3) == 0 ||
                           strncmp(line, "Anonymous", 9) == 0))
                        fprintf(stderr, "preload-victim: DIAG   %s", line);
        }
        if (f)
                fclose(f);
        uint64_t n = atomic_load(&opn), from = n > OPLOG ? n - OPLOG : 0;
        unsigned shown = 0;
        for (uint64_t i = from; i < n && oplog; i++) {
                OpRec *r = &oplog[i % OPLOG];
                uintptr_t lo1 = r->a, hi1 = r->a + (r->op == 2 || r->op == 4 ? r->len2 : r->len);
                uintptr_t lo2 = r->b, hi2 = r->b + r->len;
                bool hit = (pg < hi1 + PAGE && pg + PAGE > lo1) || (r->b && pg < hi2 + PAGE && pg + PAGE > lo2);
                if (hit && shown++ < 200)
                        fprintf(stderr, "preload-victim: DIAG op t %llu thr %u op %u a %#llx b %#llx len %#llx len2 %#llx\n",
                                (unsigned long long)r->t, r->thr, r->op, (unsigned long long)r->a,
                                (unsigned long long)r->b, (unsigned long long)r->len, (unsigned long long)r->len2);
        }
        fflush(stderr);
}

/* The first bad word found is described on stderr (a few more are
 * counted only): where it is and what it holds tells a page that came
 * back zeroed, from another page, or from an older version. */
static _Atomic unsigned told;

static void tell(const char *what, const void *base, size_t i, uint64_t got, uint64_t want) {
        if (atomic_fetch_add(&told, 1) < 4)
                fprintf(stderr, "preload-victim: bad %s at %p (word %zu, page %p): %#llx, not %#llx\n", what,
                        (const void *)((const uint64_t *)base + i), i,
                        (void *)((uintptr_t)((const uint64_t *)base + i) & ~(uintptr_t)(PAGE - 1)),
                        (unsigned long long)got, (unsigned long long)want);
        if (atomic_load(&told) == 1)
                diagnose((const uint64_t *)base + i);
}

static int check(const uint64_t *p, size_t words, uint64_t seed) {
        for (size_t i = 0; i < words; i++)
                if (p[i] != seed * 0x9e3779b97f4a7c15ull + i) {
                        tell("word", p, i, p[i], seed * 0x9e3779b97f4a7c15ull + i);
                        return -1;
                }
        return 0;
}

static size_t block_words(uint64_t *s) {
        /* mostly small (brk heap, arenas), sometimes above the mmap threshold */
        unsigned r = (unsigned)(rnd(s) % 100);
        if (r < 70)
                return 2 + rnd(s) % 512;
        if (r < 95)
                return 512 + rnd(s) % 16384;
        return 32768 + rnd(s) % 262144;
}

static void own_page_fill(Thread *t, size_t i) {
        fill((uint64_t *)(t->own + i * PAGE), PAGE / 8, ((uint64_t)t->idx << 40) | ((uint64_t)i << 20) | t->own_ver[i]);
}

static int own_page_check(const Thread *t, size_t i) {
        const uint64_t *p = (const uint64_t *)(t->own + i * PAGE);
        if (t->own_ver[i] == 0) {
                for (size_t w = 0; w < PAGE / 8; w++)
                        if (p[w]) {
                                tell("dropped page", p, w, p[w], 0);
                                return -1;
                        }
                return 0;
        }
        return check(p, PAGE / 8, ((uint64_t)t->idx << 40) | ((uint64_t)i << 20) | t->own_ver[i]);
}

static void own_step(Thread *t, uint64_t *s) {
        unsigned op = (unsigned)(rnd(s) % 10);
        if (op == 0 && t->own_pages < OWN_PAGES_MAX) {
                /* grow: may move the region */
                size_t n = t->own_pages + 1 + rnd(s) % 64;
                if (n > OWN_PAGES_MAX)
                        n = OWN_PAGES_MAX;
                void *q = mremap(t->own, t->own_pages * PAGE, n * PAGE, MREMAP_MAYMOVE);
                if (q == MAP_FAILED)
                        return;
                oplog_add(4, q, t->own, t->own_pages * PAGE, n * PAGE);
                t->own = q;
                for (size_t i = t->own_pages; i < n; i++) {
                        t->own_ver[i] = 1;
                        own_page_fill(t, i);
                }
                t->own_pages = n;
        } else if (op == 1) {
                size_t i = rnd(s) % t->own_pages;
                madvise(t->own + i * PAGE, PAGE, MADV_DONTNEED);
                oplog_add(5, t->own + i * PAGE, NULL, PAGE, 0);
                t->own_ver[i] = 0;
        } else if (op < 5) {
                size_t i = rnd(s) % t->own_pages;
                t->own_ver[i]++;
                own_page_fill(t, i);
        } else {
                size_t i = rnd(s) % t->own_pages;
                if (own_page_check(t, i) < 0)
                        atomic_fetch_add(&errors, 1);
        }
}

static void *worker(void *arg) {
        Thread *t = arg;
        uint64_t s = 1234567 + t->idx;
        my_idx = t->idx;

        t->own_pages = 16;
        t->own = mmap(NULL, t->own_pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (t->own == MAP_FAILED)
                abort();
        oplog_add(6, t->own, NULL, t->own_pages * PAGE, 0);
        for (size_t i = 0; i < t->own_pages; i++) {
                t->own_ver[i] = 1;
                own_page_fill(t, i);
        }
        while (!stop) {
                Block *b = &t->live[rnd(&s) % LIVE];
                unsigned op = (unsigned)(rnd(&s) % 10);
                if (b->p && check(b->p, b->words, b->seed) < 0)
                        atomic_fetch_add(&errors, 1);
                if (op < 2 && b->p) {
                        /* realloc: the old prefix must survive */
                        size_t words = block_words(&s);
                        uint64_t *q = realloc(b->p, words * 8);
                        if (!q)
                                continue;
                        oplog_add(2, q, b->p, b->words * 8, words * 8);
                        size_t keep = words < b->words ? words : b->words;
                        if (check(q, keep, b->seed) < 0)
                                atomic_fetch_add(&errors, 1);
                        b->p = q;
                        b->words = words;
                        fill(b->p, b->words, b->seed);
                } else if (op < 6) {
                        if (b->p)
                                oplog_add(3, b->p, NULL, b->words * 8, 0);
                        free(b->p);
                        b->words = block_words(&s);
                        b->seed = rnd(&s);
                        b->p = malloc(b->words * 8);
                        oplog_add(1, b->p, NULL, b->words * 8, 0);
                        if (b->p)
                                fill(b->p, b->words, b->seed);
                } else
                        own_step(t, &s);
                atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed);
        }
        return NULL;
}

static uint64_t check_all(Thread *ts, unsigned n) {
        uint64_t bad = 0;
        for (unsigned k = 0; k < n; k++) {
                for (unsigned i = 0; i < LIVE; i++)
                        if (ts[k].live[i].p && check(ts[k].live[i].p, ts[k].live[i].words, ts[k].live[i].seed) < 0)
                                bad++;
                for (size_t i = 0; i < ts[k].own_pages; i++)
                        bad += own_page_check(&ts[k], i) < 0;
        }
        return bad;
}

/* The interposed calls leave errno as the kernel set it: untouched on
 * success (even with the shim's eventfd poke), the error on failure. */
static uint64_t errno_checks(void) {
        uint64_t bad = 0;

        errno = ERANGE;
        void *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        bad += p == MAP_FAILED || errno != ERANGE;
        errno = 0;
        bad += mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED || errno != EINVAL;
        errno = ERANGE;
        void *q = mremap(p, 1 << 20, 2 << 20, MREMAP_MAYMOVE);
        bad += q == MAP_FAILED || errno != ERANGE;
        errno = 0;
        bad += mremap(q, 2 << 20, 4 << 20, 0x40 /* no such flag */) != MAP_FAILED || errno != EINVAL;
        munmap(q, 2 << 20);
        if (bad)
                fprintf(stderr, "preload-victim: %llu errno checks failed\n", (unsigned long long)bad);
        return bad;
}

int main(int argc, char **argv) {
        unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 5, n = argc > 2 ? (unsigned)atoi(argv[2]) : 4;
        pthread_t th[16];
        static Thread ts[16];
        int st;

        if (n < 1 || n > 16)
                n = 4;
        if (getenv("ZSWAP_VICTIM_OPLOG")) {
                oplog = mmap(NULL, OPLOG * sizeof(OpRec), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0); /* never managed */
                if (oplog == MAP_FAILED)
                        oplog = NULL;
        }
        printf("%d\n", (int)getpid());
        fflush(stdout);
        for (unsigned i = 0; i < n; i++) {
                ts[i].idx = i;
                pthread_create(&th[i], NULL, worker, &ts[i]);
        }
        sleep(seconds);
        if (argc > 3 && strcmp(argv[3], "stdin") == 0)
                while (getchar() != '\n' && !feof(stdin))
                        ;
        stop = 1;
        for (unsigned i = 0; i < n; i++)
                pthread_join(th[i], NULL);
        uint64_t bad = atomic_load(&errors) + check_all(ts, n) + errno_checks();

        /* a forked child sees every page as the parent does */
        pid_t child = fork();
        if (child == 0)
                _exit(check_all(ts, n) == 0 ? 0 : 1);
        if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "preload-victim: the forked child found bad data (status %#x)\n", st);
                bad++;
        }
        printf("errors %llu ops %llu\n", (unsigned long long)bad, (unsigned long long)atomic_load(&ops));
        return bad ? 1 : 0;
}
