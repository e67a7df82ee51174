/*
 * bench-contention.c: fault latency under contention (inversion, readers),
 * zswapd against the kernel's zram and zswap in the same run.
 *
 * inversion  priority inversion, loads against stores (seed: zswap split
 *            requests). Per vCPU: four nice +10 workers page their buffer
 *            out and read it back in a loop, one nice 0 task spins, and one
 *            nice -19 reader pages out its own buffer and times each read
 *            of it. Reported: the slowest read per run as median (min-max)
 *            over the runs, and reads over 10 ms per run.
 * readers    reader against reader (seed: zram shared decompression
 *            streams). Per vCPU: two nice 19 readers, one nice 0 CPU hog and
 *            one nice -19 reader, every reader paging its buffer out and
 *            faulting it back. Reported: fault IOPS and latency
 *            avg/stdev/p50/p99/max of the nice -19 readers.
 *
 * Every participant is a process of its own, forked by this one after the
 * backend is set up (backend.h), pinned to its vCPU and given its nice value
 * before it opens its backend client, so the client library's threads
 * inherit both. Each process fills a private buffer with real heap pages
 * (corpus.c, at an offset of its own) so that compression is real, and
 * checks the checksum of every page it reads back.
 *
 * A read is the first touch of a page that mincore() said was out at the
 * start of the pass: one volatile byte load between two CLOCK_MONOTONIC
 * reads. Readers touch their pages in a fresh random order each pass (no
 * readahead or fault-around can hide a fault; --order seq to change that).
 * IOPS is reads over the time spent in read passes, so the cost of paging
 * out, which differs between the backends, does not count; faults per
 * second of wall time are printed beside it. A pageout returns once the
 * pages are really out (backend_pageout()): the kernel compresses in the
 * calling process, at its priority; zswapd in its own workers, at theirs.
 * So the time a reader's pageout takes is printed too: under the spinners
 * it decides how many read passes, and so how many reads, a run holds. To
 * compare slowest reads over the same number of reads, the slowest read of
 * the first pass (one full pass on every backend) is reported as well.
 *
 * This machine is small and shared: a run during which other programs took
 * more than --max-foreign % of the CPU (foreign_pct()) is measured again,
 * at most half as many times as --runs per experiment and backend; the
 * tables say how many were, and what the kept runs still lost to others.
 *
 * zswapd runs in its default configuration (only --compressor is passed),
 * one daemon per backend for all its runs; the participants are forked anew
 * for each run.
 *
 * Coordination: one MAP_SHARED page block (Shared) holds the phase, which
 * only the parent writes, and one Slot per participant, which only that
 * participant writes until it has exited. The parent waits for every
 * participant to be ready (buffer filled and paged out), starts them all,
 * sleeps --seconds, stops them and reaps them, each by its pid (never
 * waitpid(-1): the zswapd daemon is our child too). A participant that does
 * not finish within HANG_TIMEOUT_S of the stop is reported with its kernel
 * stack and killed: that is how a daemon that never serves a fault shows.
 *
 * SIGINT, SIGTERM and SIGHUP only set a flag in the parent; participants
 * ignore them and die with the parent (PR_SET_PDEATHSIG), and the parent
 * always reaps them before it tears the backend down, which turns swap off.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "corpus.h"
#include "macro.h"

#define MAX_RUNS 100
#define MAX_BACKENDS 8
#define READY_TIMEOUT_S 120     /* filling and paging out every buffer */
#define HANG_TIMEOUT_S 45       /* from the stop to the last exit; backend_pageout() gives up after 30 s */
#define SLOW_READ_NS 10000000ULL /* the seed's threshold: reads over 10 ms */

/* Log-linear latency histogram: exact below 32 ns, then 32 buckets per
 * power of two (3 % wide), so percentiles of millions of reads from many
 * processes can be merged without keeping every sample. */
#define HIST_SUB_BITS 5
#define HIST_SUB (1U << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

static volatile sig_atomic_t interrupted;

typedef enum Experiment { EXP_INVERSION, EXP_READERS, _EXP_MAX } Experiment;

static const char *const experiment_names[_EXP_MAX] = { "inversion", "readers" };

/* One kind of participant of an experiment. */
typedef struct Role {
        const char *name;
        int nice;
        unsigned per_cpu;
        bool spins;     /* burns CPU, has no buffer */
        bool timed;     /* a reader: times its reads, random order */
        bool measured;  /* the high-priority reader whose figures are reported */
} Role;

static const Role inversion_roles[] = {
        { "worker", 10, 4, false, false, false },
        { "spinner", 0, 1, true, false, false },
        { "reader", -19, 1, false, true, true },
};

static const Role readers_roles[] = {
        { "low reader", 19, 2, false, true, false },
        { "hog", 0, 1, true, false, false },
        { "high reader", -19, 1, false, true, true },
};

typedef struct Hist {
        uint64_t n;
        uint64_t over_slow; /* reads over SLOW_READ_NS */
        uint64_t max_ns;
        double sum_us, sumsq_us;
        uint64_t bucket[HIST_BUCKETS];
} Hist;

enum { SLOT_STARTING, SLOT_READY, SLOT_DONE, SLOT_FAILED };
enum { PHASE_PREPARE, PHASE_GO, PHASE_STOP };

/* Written by its participant only (the parent reads it after the exit, or
 * reads state while it waits); zeroed by the parent before the fork. */
typedef struct Slot {
        _Atomic int state;
        int error;           /* -errno when state is SLOT_FAILED */
        char what[40];       /* the call that failed */
        uint64_t passes;     /* pageout + read-back cycles completed or cut short */
        uint64_t out_pages;  /* pages out at the start of the read passes */
        uint64_t res_pages;  /* pages still resident at the start of the read passes */
        uint64_t read_ns;    /* wall time in read passes */
        uint64_t pageout_ns; /* wall time in backend_pageout() */
        uint64_t checked;    /* pages whose checksum was checked */
        uint64_t bad_pages;
        uint64_t first_bad;  /* page index of the first bad page, if any */
        uint64_t first_max_ns; /* slowest read of the first pass */
        Hist lat;            /* timed roles only */
} Slot;

typedef struct Shared {
        _Atomic int phase;   /* written by the parent only */
        Slot slot[];
} Shared;

typedef struct Options {
        const char *zswapd;
        const char *corpus;
        unsigned runs;
        double seconds;
        unsigned long size_mib;
        unsigned cpus;       /* vCPUs to scale the participants to */
        double max_foreign;  /* % of the CPU other programs may take before a run is repeated */
        bool pin;
        bool random;
        bool exp[_EXP_MAX];
        unsigned n_backends;
        struct {
                char name[32];
                BackendKind kind;
                char compressor[16];
        } backend[MAX_BACKENDS];
} Options;

/* What a participant needs, all set up before the fork. */
typedef struct Participant {
        const Options *o;
        const Corpus *corpus;
        Backend *backend;
        Shared *sh;
        Slot *slot;
        const Role *role;
        int cpu;             /* -1: not pinned */
        size_t corpus_off;   /* page i of the buffer holds corpus page corpus_index(i + corpus_off) */
        uint64_t seed;
} Participant;

/* Figures of one run. NAN where they do not apply. */
typedef struct RunResult {
        bool ok;
        double slowest_ms, slowest1_ms, over_10ms, reads, avg_us, stdev_us, p50_us, p99_us, max_us;
        double iops, wall_iops, low_iops, low_p99_us, out_pct, daemon_cpu_s;
        double foreign_pct; /* CPU that neither the bench nor its daemon used, % of all CPUs */
        double worker_passes, reader_passes, pageout_ms; /* pageout_ms: per pass of the nice -19 readers */
        uint64_t bad_pages;
} RunResult;

typedef struct Series {
        unsigned n;
        unsigned repeated; /* runs measured again: other programs took too much CPU */
        RunResult run[MAX_RUNS];
} Series;

static Series results[MAX_BACKENDS][_EXP_MAX];

static void on_signal(int sig) {
        interrupted = sig;
}

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
        struct timespec ts = { ns / 1000000000ULL, ns % 1000000000ULL };

        nanosleep(&ts, NULL);
}

/* Busy and stolen CPU time of the whole machine, from /proc/stat, in seconds. */
static double machine_cpu_s(void) {
        unsigned long long v[8] = {};
        FILE *f = fopen("/proc/stat", "re");
        int n;

        if (!f)
                return NAN;
        /* user nice system idle iowait irq softirq steal */
        n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]);
        fclose(f);
        if (n != 8)
                return NAN;
        return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / sysconf(_SC_CLK_TCK);
}

/* CPU time of the reaped participants. */
static double children_cpu_s(void) {
        struct rusage ru;

        getrusage(RUSAGE_CHILDREN, &ru);
        return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
 * What the machine spent on others while a run lasted: its busy and stolen
 * time less that of the participants and of the daemon. Other programs on
 * this small machine change the figures a lot; this says when they did.
 */
typedef struct Foreign {
        double machine, children, daemon;
        uint64_t t;
} Foreign;

static void foreign_start(Foreign *f, const Backend *b) {
        f->machine = machine_cpu_s();
        f->children = children_cpu_s();
        f->daemon = backend_daemon_cpu_s(b);
        f->t = now_ns();
}

static double foreign_pct(const Foreign *f, const Backend *b) {
        double daemon = backend_daemon_cpu_s(b) - f->daemon;
        double other = machine_cpu_s() - f->machine - (children_cpu_s() - f->children) - (isfinite(daemon) ? daemon : 0);
        double all = sysconf(_SC_NPROCESSORS_ONLN) * (now_ns() - f->t) / 1e9;

        return all > 0 ? 100.0 * MAX(other, 0.0) / all : NAN;
}

/* ---- histogram ---- */

static unsigned hist_bucket(uint64_t ns) {
        unsigned msb;

        if (ns < HIST_SUB)
                return (unsigned)ns;
        msb = 63 - __builtin_clzll(ns);
        return (msb - HIST_SUB_BITS + 1) * HIST_SUB + ((ns >> (msb - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/* The middle of bucket i, in ns. */
static double hist_value(unsigned i) {
        unsigned shift;

        if (i < HIST_SUB)
                return i;
        shift = i / HIST_SUB - 1;
        return (double)((uint64_t)(HIST_SUB + i % HIST_SUB) << shift) + ((1ULL << shift) - 1) / 2.0;
}

static void hist_add(Hist *h, uint64_t ns) {
        double us = ns / 1e3;

        h->n++;
        h->bucket[hist_bucket(ns)]++;
        h->sum_us += us;
        h->sumsq_us += us * us;
        h->max_ns = MAX(h->max_ns, ns);
        if (ns > SLOW_READ_NS)
                h->over_slow++;
}

static void hist_merge(Hist *into, const Hist *h) {
        into->n += h->n;
        into->over_slow += h->over_slow;
        into->max_ns = MAX(into->max_ns, h->max_ns);
        into->sum_us += h->sum_us;
        into->sumsq_us += h->sumsq_us;
        for (unsigned i = 0; i < HIST_BUCKETS; i++)
                into->bucket[i] += h->bucket[i];
}

/* Nearest-rank percentile in us; never above the exact maximum. */
static double hist_percentile_us(const Hist *h, double p) {
        uint64_t rank = (uint64_t)ceil(p * h->n), seen = 0;

        if (h->n == 0)
                return NAN;
        rank = MAX(rank, 1);
        for (unsigned i = 0; i < HIST_BUCKETS; i++) {
                seen += h->bucket[i];
                if (seen >= rank)
                        return MIN(hist_value(i), (double)h->max_ns) / 1e3;
        }
        return h->max_ns / 1e3;
}

/* ---- participants (run in the forked processes) ---- */

static int phase(const Participant *p) {
        /* acquire: pairs with the parent's release store of the phase */
        return atomic_load_explicit(&p->sh->phase, memory_order_acquire);
}

static bool stopping(const Participant *p) {
        /* relaxed: checked between reads; nothing is read on its strength */
        return atomic_load_explicit(&p->sh->phase, memory_order_relaxed) == PHASE_STOP;
}

static uint64_t xorshift(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static void shuffle(size_t *perm, size_t n, uint64_t *seed) {
        for (size_t i = 0; i < n; i++)
                perm[i] = i;
        for (size_t i = n; i > 1; i--) {
                size_t j = xorshift(seed) % i, t = perm[i - 1];

                perm[i - 1] = perm[j];
                perm[j] = t;
        }
}

typedef struct Buffer {
        uint8_t *mem;
        size_t len, n_pages;
        unsigned char *vec; /* mincore() */
        size_t *order;
} Buffer;

static void check_page(const Participant *p, const Buffer *b, size_t pg) {
        uint64_t want = p->corpus->sums[corpus_index(pg + p->corpus_off)];

        p->slot->checked++;
        if (corpus_checksum(b->mem + pg * ZSWAP_PAGE_SIZE) == want)
                return;
        if (p->slot->bad_pages++ == 0)
                p->slot->first_bad = pg;
}

static int buffer_pageout(const Participant *p, BackendClient *c, Buffer *b) {
        uint64_t t0 = now_ns();
        int r;

        r = backend_pageout(c, b->mem, b->len);
        p->slot->pageout_ns += now_ns() - t0;
        return r < 0 ? r : 0;
}

/*
 * One read pass: touch every page in b->order, timing the touches of pages
 * that were out, then check every page touched. Stops early when the run
 * stops.
 */
static void buffer_read(const Participant *p, Buffer *b, uint64_t *seed) {
        size_t k, out = 0;
        uint64_t t0;

        if (mincore(b->mem, b->len, b->vec) < 0)
                memset(b->vec, 1, b->n_pages); /* unknown: time nothing */
        if (p->role->timed && p->o->random)
                shuffle(b->order, b->n_pages, seed);
        t0 = now_ns();
        for (k = 0; k < b->n_pages && !stopping(p); k++) {
                const volatile uint8_t *q = b->mem + b->order[k] * ZSWAP_PAGE_SIZE;
                uint64_t a, z;

                if (b->vec[b->order[k]] & 1)
                        continue;
                out++;
                if (!p->role->timed) {
                        (void)*q;
                        continue;
                }
                a = now_ns();
                (void)*q;
                z = now_ns();
                hist_add(&p->slot->lat, z - a);
                if (p->slot->passes == 0)
                        p->slot->first_max_ns = MAX(p->slot->first_max_ns, z - a);
        }
        p->slot->read_ns += now_ns() - t0;
        p->slot->out_pages += out;
        p->slot->res_pages += k - out;
        for (size_t i = 0; i < k; i++)
                check_page(p, b, b->order[i]);
}

static int buffer_new(const Participant *p, Buffer *b) {
        size_t n = p->o->size_mib << 8;

        b->len = n * ZSWAP_PAGE_SIZE;
        b->n_pages = n;
        b->vec = malloc(n);
        b->order = malloc(n * sizeof(*b->order));
        if (!b->vec || !b->order)
                return -ENOMEM;
        b->mem = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b->mem == MAP_FAILED) {
                b->mem = NULL;
                return -errno;
        }
        (void)madvise(b->mem, b->len, MADV_NOHUGEPAGE); /* one fault, one page */
        for (size_t i = 0; i < n; i++) {
                memcpy(b->mem + i * ZSWAP_PAGE_SIZE,
                       p->corpus->data + corpus_index(i + p->corpus_off) * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
                b->order[i] = i;
        }
        return 0;
}

static void wait_for_go(const Participant *p) {
        /* release: the parent reads the slot's other fields only after the exit */
        atomic_store_explicit(&p->slot->state, SLOT_READY, memory_order_release);
        while (phase(p) == PHASE_PREPARE)
                sleep_ns(1000000);
}

static _noreturn_ void participant_fail(const Participant *p, const char *what, int r) {
        p->slot->error = r;
        snprintf(p->slot->what, sizeof(p->slot->what), "%s", what);
        atomic_store_explicit(&p->slot->state, SLOT_FAILED, memory_order_release);
        _exit(1);
}

static int participant_setup(const Participant *p, pid_t parent) {
        signal(SIGINT, SIG_IGN); /* ^C is for the parent, which stops us in order */
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                return -ESRCH;
        if (p->cpu >= 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(p->cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0)
                        return -errno;
        }
        /* this thread only, inherited by the client library's threads started later */
        if (setpriority(PRIO_PROCESS, 0, p->role->nice) < 0)
                return -errno;
        return 0;
}

static _noreturn_ void participant_main(const Participant *p, pid_t parent) {
        BackendClient *c = NULL;
        uint64_t seed = p->seed;
        Buffer b = {};
        int r;

        r = participant_setup(p, parent);
        if (r < 0)
                participant_fail(p, "setup (affinity, nice)", r);
        if (p->role->spins) {
                wait_for_go(p);
                while (!stopping(p))
                        ;
                atomic_store_explicit(&p->slot->state, SLOT_DONE, memory_order_release);
                _exit(0);
        }
        r = backend_client_new(p->backend, &c);
        if (r < 0)
                participant_fail(p, "backend_client_new", r);
        r = buffer_new(p, &b);
        if (r < 0)
                participant_fail(p, "buffer", r);
        r = backend_attach(c, b.mem, b.len);
        if (r < 0)
                participant_fail(p, "backend_attach", r);
        r = buffer_pageout(p, c, &b);
        if (r < 0)
                participant_fail(p, "backend_pageout", r);
        p->slot->pageout_ns = 0;
        wait_for_go(p);
        while (!stopping(p)) {
                buffer_read(p, &b, &seed);
                p->slot->passes++;
                if (stopping(p))
                        break;
                r = buffer_pageout(p, c, &b);
                if (r < 0)
                        participant_fail(p, "backend_pageout", r);
        }
        /*
         * Exit with the buffer still attached, as a program that ends does:
         * detaching (or backend_client_free(), which detaches) would first
         * read every evicted page back, after the run.
         */
        atomic_store_explicit(&p->slot->state, SLOT_DONE, memory_order_release);
        _exit(0);
}

/* ---- one run (parent) ---- */

typedef struct Run {
        const Options *o;
        Experiment exp;
        const Role *roles;
        size_t n_roles;
        size_t n;            /* participants */
        Participant *part;
        pid_t *pid;
} Run;

static size_t run_count(const Run *run) {
        size_t n = 0;

        for (size_t i = 0; i < run->n_roles; i++)
                n += run->roles[i].per_cpu * run->o->cpus;
        return n;
}

static void run_layout(Run *run, const Corpus *corpus, Backend *b, Shared *sh, unsigned k, int *cpus) {
        size_t j = 0;

        for (unsigned cpu = 0; cpu < run->o->cpus; cpu++)
                for (size_t i = 0; i < run->n_roles; i++)
                        for (unsigned m = 0; m < run->roles[i].per_cpu; m++, j++)
                                run->part[j] = (Participant) {
                                        .o = run->o,
                                        .corpus = corpus,
                                        .backend = b,
                                        .sh = sh,
                                        .slot = &sh->slot[j],
                                        .role = &run->roles[i],
                                        .cpu = run->o->pin ? cpus[cpu] : -1,
                                        .corpus_off = j * 3 * 331,
                                        .seed = 0x5eed2024ULL + j * 7919 + k * 104729,
                                };
}

static const char *slot_state_name(int s) {
        return s == SLOT_STARTING ? "starting" : s == SLOT_READY ? "ready" : s == SLOT_DONE ? "done" : "failed";
}

/* What the kernel says a stuck process is doing, for the report. */
static void print_stuck(const char *name, pid_t pid) {
        char path[64], buf[2048];
        FILE *f;
        size_t k;

        printf("    %s pid %d:", name, (int)pid);
        snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
        f = fopen(path, "re");
        if (f) {
                k = fread(buf, 1, sizeof(buf) - 1, f);
                buf[k] = 0;
                printf(" wchan %s", buf);
                fclose(f);
        }
        printf("\n");
        snprintf(path, sizeof(path), "/proc/%d/stack", (int)pid);
        f = fopen(path, "re");
        if (f) {
                while (fgets(buf, sizeof(buf), f))
                        printf("      %s", buf);
                fclose(f);
        }
}

static void print_daemon_threads(const Backend *b) {
        char cmd[128];
        pid_t d = backend_daemon_pid(b);

        if (d <= 0)
                return;
        printf("    daemon %d threads (tid state wchan):\n", (int)d);
        fflush(stdout);
        snprintf(cmd, sizeof(cmd),
                 "for t in /proc/%d/task/*; do echo \"      ${t##*/} $(cut -d' ' -f3 $t/stat) $(cat $t/wchan)\"; done",
                 (int)d);
        if (system(cmd) != 0)
                printf("      (could not list them)\n");
}

/*
 * Wait until every participant's slot has left state `from` or it has
 * exited, for at most timeout_s. Returns how many are still in `from`.
 */
static size_t run_wait_state(Run *run, int from, double timeout_s, bool reap) {
        uint64_t end = now_ns() + (uint64_t)(timeout_s * 1e9);
        size_t left;

        for (;;) {
                left = 0;
                for (size_t j = 0; j < run->n; j++) {
                        int status;

                        if (run->pid[j] <= 0)
                                continue;
                        if (waitpid(run->pid[j], &status, WNOHANG) == run->pid[j]) {
                                int st = atomic_load_explicit(&run->part[j].slot->state, memory_order_acquire);

                                if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && st != SLOT_FAILED)
                                        printf("    %s %zu (pid %d) died: wait status 0x%x, state %s\n",
                                               run->part[j].role->name, j, (int)run->pid[j], status,
                                               slot_state_name(st));
                                run->pid[j] = -1;
                                continue;
                        }
                        if (reap || atomic_load_explicit(&run->part[j].slot->state, memory_order_acquire) == from)
                                left++;
                }
                if (left == 0 || now_ns() > end || (interrupted && from == SLOT_STARTING))
                        return left;
                sleep_ns(10000000);
        }
}

static void run_kill_all(Run *run, Backend *b, const char *why) {
        bool stuck = false;

        for (size_t j = 0; j < run->n; j++) {
                if (run->pid[j] <= 0)
                        continue;
                if (!stuck)
                        printf("  HANG: %s; participants still running:\n", why);
                stuck = true;
                print_stuck(run->part[j].role->name, run->pid[j]);
        }
        if (stuck && backend_daemon_pid(b) > 0) {
                print_daemon_threads(b);
                backend_keep_log(b);
                printf("    daemon log (kept): %s\n", backend_log(b));
        }
        for (size_t j = 0; j < run->n; j++)
                if (run->pid[j] > 0) {
                        kill(run->pid[j], SIGKILL);
                        waitpid(run->pid[j], NULL, 0);
                        run->pid[j] = -1;
                }
}

static int run_fork(Run *run) {
        pid_t parent = getpid();

        fflush(stdout);
        for (size_t j = 0; j < run->n; j++) {
                run->pid[j] = fork();
                if (run->pid[j] < 0)
                        return -errno;
                if (run->pid[j] == 0)
                        participant_main(&run->part[j], parent);
        }
        return 0;
}

/* Turn the participants' slots into the run's figures. */
static void run_collect(const Run *run, double seconds, RunResult *res) {
        static Hist hi, lo; /* large: not on the stack */
        double iops = 0, low_iops = 0, wall_faults = 0, out = 0, all = 0, wpass = 0, rpass = 0, po_ns = 0;
        uint64_t first_max = 0;
        unsigned n_workers = 0, n_readers = 0;

        memset(&hi, 0, sizeof(hi));
        memset(&lo, 0, sizeof(lo));
        for (size_t j = 0; j < run->n; j++) {
                const Slot *s = run->part[j].slot;
                const Role *role = run->part[j].role;
                double rate = s->read_ns ? s->lat.n / (s->read_ns / 1e9) : 0;

                res->bad_pages += s->bad_pages;
                if (s->bad_pages)
                        printf("    BAD PAGES: %s %zu: %" PRIu64 " of %" PRIu64 " checked (first: page %" PRIu64 ")\n",
                               role->name, j, s->bad_pages, s->checked, s->first_bad);
                if (role->spins)
                        continue;
                out += s->out_pages;
                all += s->out_pages + s->res_pages;
                if (!role->timed) {
                        wpass += s->passes;
                        n_workers++;
                } else if (role->measured) {
                        hist_merge(&hi, &s->lat);
                        iops += rate;
                        wall_faults += s->lat.n;
                        rpass += s->passes;
                        po_ns += s->pageout_ns;
                        first_max = MAX(first_max, s->first_max_ns);
                        n_readers++;
                } else {
                        hist_merge(&lo, &s->lat);
                        low_iops += rate;
                }
        }
        res->reads = hi.n;
        res->slowest_ms = hi.n ? hi.max_ns / 1e6 : NAN;
        res->slowest1_ms = hi.n ? first_max / 1e6 : NAN;
        res->over_10ms = hi.over_slow;
        res->avg_us = hi.n ? hi.sum_us / hi.n : NAN;
        res->stdev_us = hi.n > 1 ? sqrt(MAX(0.0, (hi.sumsq_us - hi.sum_us * hi.sum_us / hi.n) / (hi.n - 1))) : NAN;
        res->p50_us = hist_percentile_us(&hi, 0.5);
        res->p99_us = hist_percentile_us(&hi, 0.99);
        res->max_us = hi.n ? hi.max_ns / 1e3 : NAN;
        res->iops = iops;
        res->wall_iops = wall_faults / seconds;
        res->low_iops = lo.n ? low_iops : NAN;
        res->low_p99_us = hist_percentile_us(&lo, 0.99);
        res->out_pct = all ? 100.0 * out / all : NAN;
        res->worker_passes = n_workers ? wpass / n_workers : NAN;
        res->reader_passes = n_readers ? rpass / n_readers : NAN;
        res->pageout_ms = rpass ? po_ns / rpass / 1e6 : NAN;
}

static void run_print(const Run *run, const char *backend, unsigned k, const RunResult *r) {
        printf("  %s %s run %u/%u: %.0f reads, slowest %.3f ms (first pass %.3f), >10 ms: %.0f, avg %.2f us, "
               "p50 %.2f, p99 %.2f; IOPS %.0f (wall %.0f)",
               backend, experiment_names[run->exp], k + 1, run->o->runs, r->reads, r->slowest_ms, r->slowest1_ms,
               r->over_10ms, r->avg_us, r->p50_us, r->p99_us, r->iops, r->wall_iops);
        if (run->exp == EXP_READERS)
                printf(", low readers IOPS %.0f p99 %.2f us", r->low_iops, r->low_p99_us);
        else
                printf(", worker passes %.1f", r->worker_passes);
        printf("; reader passes %.1f (pageout %.1f ms each), %.1f %% out; daemon CPU %.2f s; foreign CPU %.1f %%; "
               "bad pages %" PRIu64 "%s\n",
               r->reader_passes, r->pageout_ms, r->out_pct, r->daemon_cpu_s, r->foreign_pct, r->bad_pages,
               r->ok ? "" : "; FAILED, not counted");
}

/* What the backend holds with every buffer out: the compression is real. */
static void print_memory(Backend *b, const char *name) {
        uint64_t orig, used;
        char report[512];

        if (backend_memory(b, &orig, &used) < 0)
                return;
        printf("  %s, all buffers out: %.1f MiB held in %.1f MiB (ratio %.2f)", name, orig / 1048576.0,
               used / 1048576.0, used ? (double)orig / used : NAN);
        if (backend_report(b, report, sizeof(report)) >= 0)
                printf("; %s", report);
        printf("\n");
}

/* Every participant should be in state want: report those that failed. */
static int run_check(const Run *run, int want) {
        int r = 0;

        for (size_t j = 0; j < run->n; j++) {
                const Slot *s = run->part[j].slot;
                int st = atomic_load_explicit(&s->state, memory_order_acquire);

                if (st == want)
                        continue;
                if (st == SLOT_FAILED) {
                        printf("  %s %zu failed in %s: %s\n", run->part[j].role->name, j, s->what, strerror(-s->error));
                        r = r ?: s->error ?: -EIO;
                } else {
                        r = r ?: -ECHILD; /* died or was killed: said above */
                }
        }
        return r;
}

/* Stop, reap and, if need be, kill every participant; returns r. */
static int run_abort(Run *run, Backend *b, int r) {
        atomic_store_explicit(&run->part[0].sh->phase, PHASE_STOP, memory_order_release);
        if (run_wait_state(run, -1, HANG_TIMEOUT_S, true))
                run_kill_all(run, b, "participants did not stop after a failed start");
        return r;
}

static int run_once(Run *run, Backend *b, const char *name, unsigned k, RunResult *res) {
        Shared *sh = run->part[0].sh;
        Foreign foreign;
        double cpu0, seconds;
        uint64_t t0;
        size_t left;
        int r, rc;

        memset(sh->slot, 0, run->n * sizeof(Slot));
        atomic_store_explicit(&sh->phase, PHASE_PREPARE, memory_order_relaxed);
        *res = (RunResult) { .daemon_cpu_s = NAN };
        foreign_start(&foreign, b);
        r = run_fork(run);
        left = r < 0 ? 0 : run_wait_state(run, SLOT_STARTING, READY_TIMEOUT_S, false);
        if (r == 0 && interrupted)
                r = -EINTR;
        if (r == 0 && left) {
                printf("  %zu participants not ready after %d s\n", left, READY_TIMEOUT_S);
                r = -ETIMEDOUT;
        }
        if (r == 0)
                r = run_check(run, SLOT_READY);
        if (r < 0)
                return run_abort(run, b, r);

        if (k == 0)
                print_memory(b, name);
        cpu0 = backend_daemon_cpu_s(b);
        t0 = now_ns();
        /* release: the participants' acquire load sees the reset slots */
        atomic_store_explicit(&sh->phase, PHASE_GO, memory_order_release);
        sleep_ns((uint64_t)(run->o->seconds * 1e9));
        atomic_store_explicit(&sh->phase, PHASE_STOP, memory_order_release);
        seconds = (now_ns() - t0) / 1e9;
        if (interrupted)
                r = -EINTR; /* a short run: not counted */

        left = run_wait_state(run, -1, HANG_TIMEOUT_S, true);
        if (left) {
                char why[96];

                snprintf(why, sizeof(why), "%zu participants did not finish within %d s of the stop", left,
                         HANG_TIMEOUT_S);
                run_kill_all(run, b, why);
                r = -ETIMEDOUT;
        }
        rc = run_check(run, SLOT_DONE);
        r = r ?: rc;
        res->daemon_cpu_s = backend_daemon_cpu_s(b) - cpu0;
        res->foreign_pct = foreign_pct(&foreign, b);
        run_collect(run, seconds, res);
        res->ok = r == 0;
        run_print(run, name, k, res);
        return r;
}

/* Every run of one experiment on one backend. */
static int experiment_run(const Options *o, Experiment exp, const Corpus *corpus, Backend *b, const char *name,
                          Shared *sh, int *cpus, Series *ser) {
        Run run = { .o = o, .exp = exp };
        int r = 0;

        run.roles = exp == EXP_INVERSION ? inversion_roles : readers_roles;
        run.n_roles = exp == EXP_INVERSION ? ELEMENTSOF(inversion_roles) : ELEMENTSOF(readers_roles);
        run.n = run_count(&run);
        run.part = calloc(run.n, sizeof(*run.part));
        run.pid = calloc(run.n, sizeof(*run.pid));
        if (!run.part || !run.pid) {
                free(run.part);
                free(run.pid);
                return -ENOMEM;
        }
        for (unsigned k = 0; k < o->runs && !interrupted; k++) {
                RunResult *res = &ser->run[ser->n];

                run_layout(&run, corpus, b, sh, k, cpus);
                r = run_once(&run, b, name, k, res);
                /* at most half as many repetitions as runs: a busy machine costs at most 1.5x the time */
                if (r == 0 && res->foreign_pct > o->max_foreign && ser->repeated < (o->runs + 1) / 2) {
                        printf("  (%.0f %% of the CPU went to other programs, over --max-foreign %.0f: run %u again)\n",
                               res->foreign_pct, o->max_foreign, k + 1);
                        ser->repeated++;
                        k--;
                        continue;
                }
                ser->n++;
                if (r == -ETIMEDOUT || r == -EINTR || (backend_daemon_pid(b) > 0 && kill(backend_daemon_pid(b), 0) < 0))
                        break; /* a hang or a dead daemon: the backend is not worth more runs */
        }
        free(run.part);
        free(run.pid);
        return r;
}

/* ---- summary ---- */

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

typedef struct Stat {
        unsigned n;
        double median, min, max;
} Stat;

/* Median (min-max) over the completed runs of a series of one field. */
static Stat series_stat(const Series *s, size_t offset) {
        double v[MAX_RUNS];
        Stat st = { .median = NAN, .min = NAN, .max = NAN };

        for (unsigned i = 0; i < s->n; i++) {
                double x = *(const double *)((const char *)&s->run[i] + offset);

                if (s->run[i].ok && isfinite(x))
                        v[st.n++] = x;
        }
        if (st.n == 0)
                return st;
        qsort(v, st.n, sizeof(double), cmp_double);
        st.min = v[0];
        st.max = v[st.n - 1];
        st.median = st.n % 2 ? v[st.n / 2] : (v[st.n / 2 - 1] + v[st.n / 2]) / 2;
        return st;
}

#define STAT(s, field) series_stat((s), offsetof(RunResult, field))

static uint64_t series_bad(const Series *s) {
        uint64_t bad = 0;

        for (unsigned i = 0; i < s->n; i++)
                bad += s->run[i].bad_pages;
        return bad;
}

static unsigned series_failed(const Series *s) {
        unsigned n = 0;

        for (unsigned i = 0; i < s->n; i++)
                n += !s->run[i].ok;
        return n;
}

/* Three significant digits without an exponent; integers as integers. */
static void fmt_num(char *buf, size_t size, bool integer, double v) {
        double a = fabs(v);

        snprintf(buf, size, integer || a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3f", v);
}

/* "median (min-max)", or "-". */
static const char *fmt_stat(char *buf, size_t size, bool integer, Stat st) {
        char a[24], b[24], c[24];

        if (st.n == 0)
                return snprintf(buf, size, "-"), buf;
        fmt_num(a, sizeof(a), integer, st.median);
        fmt_num(b, sizeof(b), integer, st.min);
        fmt_num(c, sizeof(c), integer, st.max);
        snprintf(buf, size, "%s (%s-%s)", a, b, c);
        return buf;
}

static bool is_kernel(const Options *o, unsigned i) {
        return o->backend[i].kind != BACKEND_ZSWAPD;
}

/* Ratios zswapd / kernel of the medians of one field, one line per zswapd backend. */
static void print_ratios(const Options *o, Experiment exp, const char *label, size_t offset) {
        for (unsigned z = 0; z < o->n_backends; z++) {
                bool any = false;

                if (is_kernel(o, z))
                        continue;
                for (unsigned k = 0; k < o->n_backends; k++) {
                        Stat a = series_stat(&results[z][exp], offset), b = series_stat(&results[k][exp], offset);

                        if (!is_kernel(o, k))
                                continue;
                        if (!any)
                                printf("  %-22s %-12s", label, o->backend[z].name);
                        any = true;
                        if (a.n && b.n && b.median > 0)
                                printf("  /%s %.3g", o->backend[k].name, a.median / b.median);
                        else
                                printf("  /%s -", o->backend[k].name);
                }
                if (any)
                        printf("\n");
        }
}

static void print_goal(const char *backend, const char *goal, bool ok, const char *fmt, ...) _printf_(4, 5);
static void print_goal(const char *backend, const char *goal, bool ok, const char *fmt, ...) {
        va_list ap;

        printf("  %-12s %-46s %-6s ", backend, goal, ok ? "met" : "MISSED");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
}

/* Whether zswapd's median of a field is below (or above) every kernel's. */
static bool beats_kernels(const Options *o, Experiment exp, unsigned z, size_t offset, bool lower, char *why,
                          size_t size) {
        Stat a = series_stat(&results[z][exp], offset);
        bool ok = a.n > 0, any = false;
        char va[24], vb[24];
        size_t k = 0;

        why[0] = 0;
        for (unsigned i = 0; i < o->n_backends; i++) {
                Stat b = series_stat(&results[i][exp], offset);

                if (!is_kernel(o, i) || b.n == 0)
                        continue;
                any = true;
                ok = ok && (lower ? a.median < b.median : a.median >= b.median);
                fmt_num(va, sizeof(va), false, a.median);
                fmt_num(vb, sizeof(vb), false, b.median);
                k += snprintf(why + k, k < size ? size - k : 0, "%s%s %s vs %s %s", k ? "; " : "",
                              o->backend[z].name, va, o->backend[i].name, vb);
        }
        if (!any)
                snprintf(why, size, "no kernel reference in this run");
        return ok && any;
}

static void print_inversion(const Options *o) {
        Experiment e = EXP_INVERSION;
        char s1[80], s2[80], s3[80], s4[80], s5[80];

        printf("\ninversion: priority inversion, loads vs stores. Per vCPU (%u): 4 workers nice +10 paging out and\n"
               "reading back, 1 spinner nice 0, 1 reader nice -19 timing each read; %u runs of %.1f s, %lu MiB per\n"
               "process, %s order. Figures: median (min-max) over the runs; reads = faults of the nice -19 readers;\n"
               "first pass = the readers' first read pass only (the same number of reads on every backend);\n"
               "rep = runs measured again because other programs took over %.0f %% of the CPU.\n\n",
               o->cpus, o->runs, o->seconds, o->size_mib, o->random ? "random" : "sequential", o->max_foreign);
        printf("%-12s %-24s %-24s %-18s %-24s\n", "backend", "slowest read ms", "slowest, first pass ms",
               "reads >10ms/run", "reads/run");
        for (unsigned i = 0; i < o->n_backends; i++) {
                const Series *s = &results[i][e];

                if (s->n == 0)
                        continue;
                printf("%-12s %-24s %-24s %-18s %-24s\n", o->backend[i].name,
                       fmt_stat(s1, sizeof(s1), false, STAT(s, slowest_ms)),
                       fmt_stat(s2, sizeof(s2), false, STAT(s, slowest1_ms)),
                       fmt_stat(s3, sizeof(s3), true, STAT(s, over_10ms)),
                       fmt_stat(s4, sizeof(s4), true, STAT(s, reads)));
        }
        printf("\n%-12s %-20s %-20s %-22s %-18s %-18s %5s %5s %5s\n", "backend", "p50 us", "p99 us",
               "reader pageout ms", "daemon CPU s/run", "foreign CPU %", "bad", "fail", "rep");
        for (unsigned i = 0; i < o->n_backends; i++) {
                const Series *s = &results[i][e];

                if (s->n == 0)
                        continue;
                printf("%-12s %-20s %-20s %-22s %-18s %-18s %5" PRIu64 " %5u %5u\n", o->backend[i].name,
                       fmt_stat(s1, sizeof(s1), false, STAT(s, p50_us)),
                       fmt_stat(s2, sizeof(s2), false, STAT(s, p99_us)),
                       fmt_stat(s3, sizeof(s3), false, STAT(s, pageout_ms)),
                       is_kernel(o, i) ? "-" : fmt_stat(s5, sizeof(s5), false, STAT(s, daemon_cpu_s)),
                       fmt_stat(s4, sizeof(s4), false, STAT(s, foreign_pct)), series_bad(s), series_failed(s),
                       s->repeated);
        }
        printf("\nratios zswapd/kernel of the medians (lower is better):\n");
        print_ratios(o, e, "slowest read", offsetof(RunResult, slowest_ms));
        print_ratios(o, e, "slowest, first pass", offsetof(RunResult, slowest1_ms));
        print_ratios(o, e, "p99", offsetof(RunResult, p99_us));
        printf("\ngoals:\n");
        for (unsigned z = 0; z < o->n_backends; z++) {
                const Series *s = &results[z][e];
                Stat slow = STAT(s, slowest_ms), over = STAT(s, over_10ms);
                char why[256];
                bool ok;

                if (is_kernel(o, z) || s->n == 0)
                        continue;
                if (slow.n == 0) {
                        print_goal(o->backend[z].name, "all goals", false, "no completed run");
                        continue;
                }
                print_goal(o->backend[z].name, "slowest read < 1 ms (median of runs)", slow.n && slow.median < 1.0,
                           "%.3g ms (worst run %.3g ms)", slow.median, slow.max);
                print_goal(o->backend[z].name, "no read > 10 ms in any run", over.n && over.max == 0,
                           "%.0f in the worst run", over.max);
                ok = beats_kernels(o, e, z, offsetof(RunResult, slowest_ms), true, why, sizeof(why));
                print_goal(o->backend[z].name, "slowest read below the kernel's", ok, "%s", why);
        }
}

static void print_readers(const Options *o) {
        Experiment e = EXP_READERS;
        char s1[80], s2[80], s3[80], s4[80], s5[80], s6[80], s7[80];

        printf("\nreaders: reader vs reader. Per vCPU (%u): 2 readers nice 19, 1 CPU hog nice 0, 1 reader\n"
               "nice -19; %u runs of %.1f s, %lu MiB per process, %s order. Figures of the nice -19 readers:\n"
               "median (min-max) over the runs. IOPS = faults / time in read passes, summed over the readers;\n"
               "rep = runs measured again because other programs took over %.0f %% of the CPU.\n\n",
               o->cpus, o->runs, o->seconds, o->size_mib, o->random ? "random" : "sequential", o->max_foreign);
        printf("%-12s %-22s %-17s %-17s %-17s %-17s %-24s %-20s %5s %4s %4s\n", "backend", "IOPS", "avg us",
               "stdev us", "p50 us", "p99 us", "max us", "low-prio IOPS", "bad", "fail", "rep");
        for (unsigned i = 0; i < o->n_backends; i++) {
                const Series *s = &results[i][e];

                if (s->n == 0)
                        continue;
                printf("%-12s %-22s %-17s %-17s %-17s %-17s %-24s %-20s %5" PRIu64 " %4u %4u\n", o->backend[i].name,
                       fmt_stat(s1, sizeof(s1), true, STAT(s, iops)),
                       fmt_stat(s2, sizeof(s2), false, STAT(s, avg_us)),
                       fmt_stat(s3, sizeof(s3), false, STAT(s, stdev_us)),
                       fmt_stat(s4, sizeof(s4), false, STAT(s, p50_us)),
                       fmt_stat(s5, sizeof(s5), false, STAT(s, p99_us)),
                       fmt_stat(s6, sizeof(s6), false, STAT(s, max_us)),
                       fmt_stat(s7, sizeof(s7), true, STAT(s, low_iops)), series_bad(s), series_failed(s),
                       s->repeated);
        }
        printf("\n%-12s %-22s %-22s %-22s %-18s %-18s\n", "backend", "faults/s (wall)", "reader pageout ms",
               "slowest read ms", "daemon CPU s/run", "foreign CPU %");
        for (unsigned i = 0; i < o->n_backends; i++) {
                const Series *s = &results[i][e];

                if (s->n == 0)
                        continue;
                printf("%-12s %-22s %-22s %-22s %-18s %-18s\n", o->backend[i].name,
                       fmt_stat(s1, sizeof(s1), true, STAT(s, wall_iops)),
                       fmt_stat(s3, sizeof(s3), false, STAT(s, pageout_ms)),
                       fmt_stat(s4, sizeof(s4), false, STAT(s, slowest_ms)),
                       is_kernel(o, i) ? "-" : fmt_stat(s2, sizeof(s2), false, STAT(s, daemon_cpu_s)),
                       fmt_stat(s5, sizeof(s5), false, STAT(s, foreign_pct)));
        }
        printf("\nratios zswapd/kernel of the medians (IOPS: higher is better; latency: lower):\n");
        print_ratios(o, e, "IOPS", offsetof(RunResult, iops));
        print_ratios(o, e, "avg", offsetof(RunResult, avg_us));
        print_ratios(o, e, "stdev", offsetof(RunResult, stdev_us));
        print_ratios(o, e, "p99", offsetof(RunResult, p99_us));
        print_ratios(o, e, "max", offsetof(RunResult, max_us));
        printf("\ngoals:\n");
        for (unsigned z = 0; z < o->n_backends; z++) {
                const Series *s = &results[z][e];
                Stat max = STAT(s, max_us), p50 = STAT(s, p50_us);
                char why[256];
                bool ok;

                if (is_kernel(o, z) || s->n == 0)
                        continue;
                if (max.n == 0) {
                        print_goal(o->backend[z].name, "all goals", false, "no completed run");
                        continue;
                }
                print_goal(o->backend[z].name, "max latency <= 10x median (medians of runs)",
                           max.n && p50.n && max.median <= 10 * p50.median, "max %.0f us, p50 %.1f us: %.0fx",
                           max.median, p50.median, max.median / p50.median);
                ok = beats_kernels(o, e, z, offsetof(RunResult, iops), false, why, sizeof(why));
                print_goal(o->backend[z].name, "IOPS >= the kernel's", ok, "%s", why);
        }
}

/* ---- main ---- */

static void help(void) {
        printf("bench-contention inversion|readers|all [--runs N] [--seconds S] [--size MiB]\n"
               "                 [--backends zswapd-lz4,zswapd-zstd,zram-lz4,zswap-lzo] [--cpus N]\n"
               "                 [--no-pin] [--order random|seq] [--max-foreign PCT] [--zswapd PATH]\n"
               "                 [--corpus DIR]\n\n"
               "Fault latency under contention, inversion (priority inversion: loads vs stores) and\n"
               "readers (reader vs reader): zswapd (default configuration) against kernel zram and\n"
               "zswap, in one run. Run as root.\n"
               "A run in which other programs took more than --max-foreign %% of the CPU (default 20)\n"
               "is measured again, at most half as many times as --runs per experiment and backend.\n");
}

static int parse_backends(const char *arg, Options *o) {
        _cleanup_free_ char *copy = strdup(arg);
        char *save = NULL;

        if (!copy)
                return -ENOMEM;
        o->n_backends = 0;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                const char *dash = strchr(t, '-');
                size_t k = dash ? (size_t)(dash - t) : 0;

                if (o->n_backends == MAX_BACKENDS || !dash || !dash[1] || strlen(dash + 1) >= 16 || strlen(t) >= 32)
                        return -EINVAL;
                if (k == 6 && strncmp(t, "zswapd", k) == 0)
                        o->backend[o->n_backends].kind = BACKEND_ZSWAPD;
                else if (k == 4 && strncmp(t, "zram", k) == 0)
                        o->backend[o->n_backends].kind = BACKEND_ZRAM;
                else if (k == 5 && strncmp(t, "zswap", k) == 0)
                        o->backend[o->n_backends].kind = BACKEND_KZSWAP;
                else
                        return -EINVAL;
                snprintf(o->backend[o->n_backends].name, sizeof(o->backend[0].name), "%s", t);
                snprintf(o->backend[o->n_backends].compressor, sizeof(o->backend[0].compressor), "%s", dash + 1);
                o->n_backends++;
        }
        return o->n_backends ? 0 : -EINVAL;
}

static int parse_argv(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "help", no_argument, NULL, 'h' },       { "runs", required_argument, NULL, 'r' },
                { "seconds", required_argument, NULL, 't' }, { "size", required_argument, NULL, 's' },
                { "backends", required_argument, NULL, 'b' }, { "cpus", required_argument, NULL, 'c' },
                { "no-pin", no_argument, NULL, 'P' },     { "order", required_argument, NULL, 'o' },
                { "zswapd", required_argument, NULL, 'd' }, { "corpus", required_argument, NULL, 'C' },
                { "max-foreign", required_argument, NULL, 'F' },
                {}
        };
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 'r':
                        o->runs = strtoul(optarg, &end, 10);
                        if (*end || o->runs < 1 || o->runs > MAX_RUNS)
                                return fprintf(stderr, "bad --runs: %s (1..%d)\n", optarg, MAX_RUNS), -EINVAL;
                        break;
                case 't':
                        o->seconds = strtod(optarg, &end);
                        if (*end || !(o->seconds >= 0.1 && o->seconds <= 3600))
                                return fprintf(stderr, "bad --seconds: %s\n", optarg), -EINVAL;
                        break;
                case 's':
                        o->size_mib = strtoul(optarg, &end, 10);
                        if (*end || o->size_mib < 1 || o->size_mib > 4096)
                                return fprintf(stderr, "bad --size: %s\n", optarg), -EINVAL;
                        break;
                case 'b':
                        if (parse_backends(optarg, o) < 0)
                                return fprintf(stderr, "bad --backends: %s\n", optarg), -EINVAL;
                        break;
                case 'c':
                        o->cpus = strtoul(optarg, &end, 10);
                        if (*end || o->cpus < 1 || o->cpus > CPU_SETSIZE)
                                return fprintf(stderr, "bad --cpus: %s\n", optarg), -EINVAL;
                        break;
                case 'P':
                        o->pin = false;
                        break;
                case 'o':
                        if (strcmp(optarg, "random") != 0 && strcmp(optarg, "seq") != 0)
                                return fprintf(stderr, "bad --order: %s\n", optarg), -EINVAL;
                        o->random = strcmp(optarg, "random") == 0;
                        break;
                case 'd':
                        o->zswapd = optarg;
                        break;
                case 'F':
                        o->max_foreign = strtod(optarg, &end);
                        if (*end || !(o->max_foreign >= 0 && o->max_foreign <= 100))
                                return fprintf(stderr, "bad --max-foreign: %s (0..100; 100: never repeat)\n", optarg),
                                       -EINVAL;
                        break;
                case 'C':
                        o->corpus = optarg;
                        break;
                default:
                        return -EINVAL;
                }
        }
        if (optind + 1 != argc)
                return fprintf(stderr, "which experiment? inversion, readers or all (--help)\n"), -EINVAL;
        if (strcmp(argv[optind], "all") == 0)
                o->exp[EXP_INVERSION] = o->exp[EXP_READERS] = true;
        else if (strcmp(argv[optind], "inversion") == 0)
                o->exp[EXP_INVERSION] = true;
        else if (strcmp(argv[optind], "readers") == 0)
                o->exp[EXP_READERS] = true;
        else
                return fprintf(stderr, "unknown experiment: %s\n", argv[optind]), -EINVAL;
        return 1;
}

/* The CPUs this process may run on, the first o->cpus of them for pinning. */
static int pick_cpus(Options *o, int *cpus) {
        cpu_set_t set;
        unsigned n = 0;

        if (sched_getaffinity(0, sizeof(set), &set) < 0)
                return -errno;
        for (int i = 0; i < CPU_SETSIZE; i++)
                if (CPU_ISSET(i, &set))
                        cpus[n++] = i;
        if (o->cpus == 0)
                o->cpus = n;
        if (o->pin && o->cpus > n)
                return fprintf(stderr, "--cpus %u: only %u CPUs to pin to (--no-pin?)\n", o->cpus, n), -EINVAL;
        return 0;
}

/* Participants with a buffer, over both experiments: what swap must hold. */
static uint64_t swap_needed(const Options *o) {
        uint64_t inv = 0, rd = 0;

        for (size_t i = 0; i < ELEMENTSOF(inversion_roles); i++)
                inv += inversion_roles[i].spins ? 0 : inversion_roles[i].per_cpu;
        for (size_t i = 0; i < ELEMENTSOF(readers_roles); i++)
                rd += readers_roles[i].spins ? 0 : readers_roles[i].per_cpu;
        /* twice the data: room for a run's pages while the last run's are freed */
        return 2 * MAX(inv, rd) * o->cpus * ((uint64_t)o->size_mib << 20);
}

static int backend_run(const Options *o, unsigned i, const char *exe_dir, const Corpus *corpus, Shared *sh,
                       int *cpus) {
        _cleanup_free_ char *path = NULL;
        BackendConfig cfg = {
                .kind = o->backend[i].kind,
                .compressor = o->backend[i].compressor,
                .size_bytes = swap_needed(o),
        };
        Backend *b = NULL;
        int r, rt;

        if (o->zswapd)
                path = strdup(o->zswapd);
        else if (asprintf(&path, "%s/../daemon/zswapd", exe_dir) < 0)
                path = NULL;
        if (!path)
                return -ENOMEM;
        cfg.zswapd_path = path; /* default configuration: no extra arguments */
        fflush(stdout);
        r = backend_setup(&cfg, &b);
        if (r < 0) {
                printf("%s: set-up failed: %s\n", o->backend[i].name, strerror(-r));
                return r;
        }
        printf("%s: %s\n", o->backend[i].name, backend_describe(b));
        for (int e = 0; e < _EXP_MAX && !interrupted; e++)
                if (o->exp[e]) {
                        r = experiment_run(o, e, corpus, b, o->backend[i].name, sh, cpus, &results[i][e]);
                        if (r == -ETIMEDOUT || r == -EINTR)
                                break;
                }
        rt = backend_teardown(b);
        if (rt < 0)
                printf("%s: TEARDOWN FAILED: %s; %s\n", o->backend[i].name, strerror(-rt),
                       is_kernel(o, i) ? "check swapon --show" : "the daemon did not end cleanly (its log is kept)");
        return r ?: rt;
}

static void print_machine(const Options *o, const char *corpus_dir) {
        struct utsname u;

        uname(&u);
        printf("machine: %ld CPUs online, Linux %s %s; %u vCPUs used%s; corpus %s\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine, o->cpus,
               o->pin ? ", participants pinned per vCPU" : ", not pinned", corpus_dir);
}

static void install_signals(void) {
        struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: the run's sleep ends early */

        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv) {
        Options o = { .runs = 5, .seconds = 3, .size_mib = 16, .pin = true, .random = true, .max_foreign = 20 };
        _cleanup_free_ char *exe = NULL, *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        _cleanup_free_ int *cpus = malloc(CPU_SETSIZE * sizeof(int));
        size_t max_part = 0, sh_len;
        const char *exe_dir;
        Shared *sh;
        int r, failed = 0;
        uint64_t bad = 0;

        parse_backends("zswapd-lz4,zswapd-zstd,zram-lz4,zswap-lzo", &o);
        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        if (!cpus || pick_cpus(&o, cpus) < 0)
                return 2;
        exe = realpath("/proc/self/exe", NULL);
        exe_dir = exe ? dirname(exe) : ".";
        r = o.corpus ? ((corpus_dir = realpath(o.corpus, NULL)) ? 0 : -errno)
                     : corpus_find_dir(exe_dir, &corpus_dir);
        if (r == 0)
                r = corpus_load(corpus_dir, &corpus);
        if (r < 0)
                return fprintf(stderr, "cannot load the corpus (%s): %s; try --corpus or $ZSWAP_CORPUS\n",
                               corpus_dir ?: o.corpus ?: "not found", strerror(-r)), 1;
        if (geteuid() != 0)
                printf("not root: nice -19 and the kernel references will fail\n");

        for (int e = 0; e < _EXP_MAX; e++) {
                Run run = { .o = &o, .roles = e == EXP_INVERSION ? inversion_roles : readers_roles,
                            .n_roles = e == EXP_INVERSION ? ELEMENTSOF(inversion_roles) : ELEMENTSOF(readers_roles) };

                max_part = MAX(max_part, run_count(&run));
        }
        sh_len = ALIGN_TO(sizeof(Shared) + max_part * sizeof(Slot), ZSWAP_PAGE_SIZE);
        sh = mmap(NULL, sh_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
                return fprintf(stderr, "mmap: %m\n"), 1;
        install_signals();
        print_machine(&o, corpus_dir);

        for (unsigned i = 0; i < o.n_backends && !interrupted; i++)
                failed |= backend_run(&o, i, exe_dir, corpus, sh, cpus) < 0;
        munmap(sh, sh_len);

        if (o.exp[EXP_INVERSION])
                print_inversion(&o);
        if (o.exp[EXP_READERS])
                print_readers(&o);
        for (unsigned i = 0; i < o.n_backends; i++)
                for (int e = 0; e < _EXP_MAX; e++)
                        bad += series_bad(&results[i][e]);
        if (bad)
                printf("\nVERIFICATION FAILED: %" PRIu64 " pages read back differ from what was written\n", bad);
        if (interrupted)
                return printf("interrupted by signal %d\n", (int)interrupted), 130;
        return failed || bad ? 1 : 0;
}
