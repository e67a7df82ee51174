/*
 * test-soak: clients that live through daemon deaths and restarts, their
 * own deaths and each other's, and lose nothing (docs/reliability.md,
 * "Soak").
 *
 * The parent starts a daemon and SOAK_CLIENTS (3) client processes: this
 * program run again as "client". Each client keeps a few regions of
 * random size registered, and a shadow copy of every page in memory it
 * never registers; it reads pages (each checked against the shadow),
 * writes them, drops them (MADV_DONTNEED), evicts them (zswap_pageout),
 * forks a child that checks its own copy, changes and evicts it (half
 * the forks right after reading every page back, so that the parent holds
 * nothing and the child attaches late, from a random moment after the
 * fork, as the preload shim's children do: zswap_child_attach_defer();
 * SOAK_LAZY_FORKS=0: never), moves a
 * region elsewhere (mremap), and replaces a region by a new one (munmap,
 * with or without zswap_unregister first, then mmap and zswap_register).
 * Meanwhile the parent, at random moments, kills the daemon with SIGKILL
 * and starts it again after 0-300 ms, or kills a client with SIGKILL and
 * starts a new one in its place. The first client (and whoever takes its
 * place, and its fork children) runs in a cgroup whose CPU quota is 10 %
 * of one CPU (SOAK_THROTTLE=0: not), so its agent is stopped for most of
 * every 100 ms, in the middle of page moves among other places.
 *
 * For SOAK_SECONDS (20; docs/reliability.md runs it for 600);
 * SOAK_DAEMON_KILLS=0 leaves the daemon alive, to tell the soak's own
 * failures from the restarts'. Then each
 * client reads every page back, disconnects, reads every page again and
 * reports what it checked through a pipe; the parent fails the test if a
 * client failed, lost a page or reported nothing, or if the daemon died on
 * its own or does not exit cleanly at the end.
 *
 * The only errors a client accepts from libzswap are -ENOTCONN (no daemon
 * at that moment) and, for a register retried after such an error,
 * -EEXIST (the first attempt reached the daemon after all). A fork child
 * whose daemon died before it attached writes its pages back from its
 * parent's store and must find its copy intact; it may die by SIGKILL
 * only where libzswap cannot do that (docs/reliability.md, "A fork racing
 * the daemon's death") and only if a daemon kill was under way between
 * the fork call and its death (the parent records each kill's interval,
 * harness.h TdKills). Those are counted ("forks lost to a daemon death
 * during the fork"), and fail the test unless SOAK_FORK_KILLS_OK=1 (the
 * soak with a second tier: a child cannot write back pages its parent
 * had on the tier).
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "libzswap-internal.h"
#include "util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* ASan does not follow mremap() (tests/integration/test-mremap.c) */
#define unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define unpoison(p, n) ((void)(p), (void)(n))
#endif

#if defined(__SANITIZE_THREAD__)
/* a fork child starts its agent thread after a multi-threaded fork, which
 * ThreadSanitizer's runtime cannot follow */
#define CLIENT_FORKS 0
#else
#define CLIENT_FORKS 1
#endif

/* ---- a client ---- */

#define REGIONS 4
#define REGION_MIN_PAGES 32
#define REGION_MAX_PAGES 512

typedef struct Region {
        uint8_t *addr;   /* where the region is now (mremap moves it) */
        uint8_t *shadow; /* what each page must read as; never registered */
        size_t npages;
        bool registered; /* zswap_register succeeded (or said EEXIST after an ENOTCONN) */
} Region;

/* What a client did lately, printed at its first failure. */
#define HISTORY 48
typedef struct Event {
        uint64_t ms;
        const char *what;
        int region, ret;
        uintptr_t addr, len, addr2;
} Event;

typedef struct Client {
        unsigned id;
        struct zswap_client *c;
        uint64_t seed;
        Region r[REGIONS];
        uint64_t reads, writes, drops, pageouts, enotconn, forks, moves, replaced, bad, api_errors;
        uint64_t forks_lost;   /* children libzswap killed: the daemon died during the fork */
        uint64_t forks_idle;   /* forks right after every page was read back */
        const TdKills *kills;  /* the parent's record of daemon kills */
        uint64_t child_since; /* in a fork child: when fork() returned in it (ms) */
        Event history[HISTORY];
        unsigned nhistory;
        bool dumped;
} Client;

/* Milliseconds of CLOCK_MONOTONIC: the parent's kill times and the
 * clients' events on one scale. */
static unsigned long long ms_now(void) {
        return (unsigned long long)(now_ns() / 1000000);
}

static void note(Client *cl, const char *what, int region, const void *addr, size_t len, uintptr_t addr2, int ret) {
        cl->history[cl->nhistory++ % HISTORY] = (Event){ ms_now(), what, region, ret, (uintptr_t)addr, len, addr2 };
}

/* The first failure: what this client did before it, and the daemon kills
 * around it (each from the kill() call until the daemon was reaped). */
static int result_fd = -1; /* the client's report pipe */

static void dump_history(Client *cl) {
        static const char early[] = "failed_early ";
        if (cl->dumped)
                return;
        cl->dumped = true;
        /* the parent learns of the failure even if it kills us first */
        (void)!write(result_fd, early, sizeof(early) - 1);
        fprintf(stderr, "client %u (pid %d): at %llu ms, its last events:\n", cl->id, (int)getpid(), ms_now());
        for (unsigned i = cl->nhistory > HISTORY ? cl->nhistory - HISTORY : 0; i < cl->nhistory; i++) {
                const Event *e = &cl->history[i % HISTORY];
                fprintf(stderr, "  %llu ms: %s region %d [%#lx, %#lx)", (unsigned long long)e->ms, e->what, e->region,
                        (unsigned long)e->addr, (unsigned long)(e->addr + e->len));
                if (e->addr2)
                        fprintf(stderr, " -> %#lx", (unsigned long)e->addr2);
                fprintf(stderr, ": %d\n", e->ret);
        }
        uint32_t n = cl->kills ? atomic_load(&cl->kills->n) : 0;
        for (uint32_t i = n > 8 ? n - 8 : 0; i < n; i++)
                fprintf(stderr, "  daemon kill %u: %llu..%llu ms\n", i,
                        (unsigned long long)(atomic_load(&cl->kills->k[i].start) / 1000000),
                        (unsigned long long)(atomic_load(&cl->kills->k[i].end) / 1000000));
}

static size_t len_of(const Region *r) {
        return r->npages * ZSWAP_PAGE_SIZE;
}

static int index_of(const Client *cl, const Region *r) {
        return (int)(r - cl->r);
}

/* New content for a page: real heap data most of the time, sometimes a
 * same-filled page (held without pool space) or zeros. */
static void make_content(Client *cl, uint8_t *dst) {
        unsigned kind = (unsigned)(xorshift(&cl->seed) % 100);
        if (kind < 4)
                memset(dst, 0, ZSWAP_PAGE_SIZE);
        else if (kind < 8)
                memset(dst, (int)(xorshift(&cl->seed) & 0xff), ZSWAP_PAGE_SIZE);
        else
                fill_pages(dst, ZSWAP_PAGE_SIZE, xorshift(&cl->seed));
}

static bool check_page(Client *cl, unsigned ri, size_t p) {
        const Region *r = &cl->r[ri];
        const uint8_t *page = r->addr + p * ZSWAP_PAGE_SIZE, *want = r->shadow + p * ZSWAP_PAGE_SIZE;
        if (memcmp(page, want, ZSWAP_PAGE_SIZE) == 0)
                return true;
        size_t off = 0, zeros = 0;
        while (off < ZSWAP_PAGE_SIZE && page[off] == want[off])
                off++;
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE; i++)
                zeros += page[i] == 0;
        char flags[256] = "?";
        vma_flags(page, flags, sizeof(flags));
        fprintf(stderr, "client %u (pid %d%s): region %u page %zu of %zu at %p (%sregistered) differs from "
                        "byte %zu on: %#x instead of %#x; %zu zero bytes; at %llu ms; VmFlags %s\n",
                cl->id, (int)getpid(), cl->child_since ? ", a fork child" : "", ri, p, r->npages, (void *)page,
                r->registered ? "" : "not ", off, page[off], want[off], zeros, ms_now(), flags);
        if (cl->child_since)
                fprintf(stderr, "  the fork returned in the child at %llu ms; its parent now: %d\n",
                        (unsigned long long)cl->child_since, (int)getppid());
        dump_history(cl);
        return false;
}

static size_t check_all(Client *cl) {
        size_t bad = 0;
        for (unsigned ri = 0; ri < REGIONS; ri++)
                for (size_t p = 0; p < cl->r[ri].npages; p++)
                        bad += !check_page(cl, ri, p);
        return bad;
}

static void api_error(Client *cl, const char *what, int r) {
        fprintf(stderr, "client %u (pid %d): %s: %d (%s)\n", cl->id, (int)getpid(), what, r, strerror(-r));
        cl->api_errors++;
        dump_history(cl);
}

static void region_register(Client *cl, Region *r, bool retry) {
        int ret = zswap_register(cl->c, r->addr, len_of(r));
        note(cl, retry ? "register (retry)" : "register", index_of(cl, r), r->addr, len_of(r), 0, ret);
        if (ret == 0 || (retry && ret == -EEXIST))
                r->registered = true;
        else if (ret != -ENOTCONN)
                api_error(cl, "zswap_register", ret);
}

static void region_new(Client *cl, Region *r) {
        r->npages = REGION_MIN_PAGES + xorshift(&cl->seed) % (REGION_MAX_PAGES - REGION_MIN_PAGES + 1);
        r->addr = test_map(len_of(r));
        r->shadow = test_map(len_of(r));
        for (size_t p = 0; p < r->npages; p++)
                make_content(cl, r->shadow + p * ZSWAP_PAGE_SIZE);
        memcpy(r->addr, r->shadow, len_of(r));
        r->registered = false;
        region_register(cl, r, false);
}

/* Gone with or without unregistering first, and a new one in its place. */
static void region_replace(Client *cl, Region *r) {
        if (r->registered && xorshift(&cl->seed) % 2) {
                int ret = zswap_unregister(cl->c, r->addr, len_of(r));
                note(cl, "unregister", index_of(cl, r), r->addr, len_of(r), 0, ret);
                if (ret < 0 && ret != -ENOTCONN)
                        api_error(cl, "zswap_unregister", ret);
        }
        ASSERT_OK(munmap(r->addr, len_of(r)));
        note(cl, r->registered ? "munmap (registered)" : "munmap", index_of(cl, r), r->addr, len_of(r), 0, 0);
        ASSERT_OK(munmap(r->shadow, len_of(r)));
        region_new(cl, r);
        cl->replaced++;
}

/* To a fresh address, evicted pages and all. */
static void region_move(Client *cl, Region *r) {
        const size_t len = len_of(r), extra = 2 << 20;
        /* onto a reservation, which MREMAP_FIXED replaces: an munmap()ed
         * hole could meanwhile take a mapping of libzswap's agent (its
         * restore's event table, say), which the move would then destroy */
        uint8_t *res = test_map(len + extra);
        size_t skip = (xorshift(&cl->seed) % (extra / ZSWAP_PAGE_SIZE)) * ZSWAP_PAGE_SIZE;
        uint8_t *target = res + skip;
        uint8_t *moved = mremap(r->addr, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
        ASSERT_TRUE(moved == target);
        if (skip)
                ASSERT_OK(munmap(res, skip));
        if (extra - skip)
                ASSERT_OK(munmap(target + len, extra - skip));
        note(cl, "mremap", index_of(cl, r), r->addr, len, (uintptr_t)moved, 0);
        unpoison(moved, len);
        r->addr = moved;
        cl->moves++;
}

static void pageout(Client *cl, int region, void *addr, size_t len) {
        int r = zswap_pageout(cl->c, addr, len);
        note(cl, "pageout", region, addr, len, 0, r);
        if (r >= 0)
                cl->pageouts++;
        else if (r == -ENOTCONN)
                cl->enotconn++;
        else
                api_error(cl, "zswap_pageout", r);
}

/* In a forked child: its copy as it was at the fork, then changed and
 * evicted through the child's own client, and checked again. */
static int fork_child(Client *cl) {
        cl->child_since = ms_now();
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        cl->api_errors = 0; /* the parent's, until now */
        if (zswap_child_pending(cl->c)) {
                /* its parent held nothing: it attaches when it likes, and
                 * a daemon killed meanwhile leaves it unmanaged, every
                 * page in place (pageouts then say -ENOTCONN) */
                usleep((useconds_t)(xorshift(&cl->seed) % 20000));
                int r = zswap_child_attach(cl->c);
                note(cl, "late attach", -1, NULL, 0, 0, r);
        }
        size_t bad = check_all(cl);
        if (bad) {
                fprintf(stderr, "client %u fork child: %zu pages differ from the copy at the fork\n", cl->id, bad);
                return 1;
        }
        Region *r = &cl->r[xorshift(&cl->seed) % REGIONS];
        for (size_t p = 0; p < r->npages; p += 3) {
                make_content(cl, r->shadow + p * ZSWAP_PAGE_SIZE);
                memcpy(r->addr + p * ZSWAP_PAGE_SIZE, r->shadow + p * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
        }
        pageout(cl, index_of(cl, r), r->addr, len_of(r));
        bad = check_all(cl);
        if (bad || cl->api_errors) {
                fprintf(stderr, "client %u fork child: %zu pages differ after its own pageout, %llu errors\n", cl->id,
                        bad, (unsigned long long)cl->api_errors);
                return 2;
        }
        return 0;
}

static void client_fork(Client *cl) {
        int st;
        uint64_t t0 = now_ns();
        if (xorshift(&cl->seed) % 2) {
                /* every page back in first: the parent holds nothing */
                cl->bad += check_all(cl);
                cl->forks_idle++;
        }
        note(cl, "fork", -1, NULL, 0, 0, 0);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(fork_child(cl));
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        note(cl, "fork (child's status)", -1, NULL, 0, (uintptr_t)pid, st);
        /* libzswap kills a child whose daemon died before it attached (the
         * pages evicted at the fork are lost to it): that alone, and only
         * if a daemon kill was under way between the fork call and now */
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && td_killed_between(cl->kills, t0, now_ns())) {
                fprintf(stderr, "client %u: fork child %d killed itself: the daemon died during the fork\n", cl->id,
                        (int)pid);
                cl->forks_lost++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "client %u: fork child %d failed: status %#x\n", cl->id, (int)pid, st);
                cl->api_errors++;
                dump_history(cl);
        }
        cl->forks++;
}

static void client_step(Client *cl) {
        unsigned ri = (unsigned)(xorshift(&cl->seed) % REGIONS), op = (unsigned)(xorshift(&cl->seed) % 1000);
        Region *r = &cl->r[ri];
        size_t p = xorshift(&cl->seed) % r->npages;
        uint8_t *page = r->addr + p * ZSWAP_PAGE_SIZE, *shadow = r->shadow + p * ZSWAP_PAGE_SIZE;

        if (!r->registered && op % 8 == 0)
                region_register(cl, r, true);
        if (op < 450) {
                cl->bad += !check_page(cl, ri, p);
                cl->reads++;
        } else if (op < 850) {
                make_content(cl, shadow);
                memcpy(page, shadow, ZSWAP_PAGE_SIZE);
                cl->writes++;
        } else if (op < 880) {
                ASSERT_OK(madvise(page, ZSWAP_PAGE_SIZE, MADV_DONTNEED));
                memset(shadow, 0, ZSWAP_PAGE_SIZE);
                cl->drops++;
        } else if (op < 960) {
                size_t n = 1 + xorshift(&cl->seed) % (r->npages - p);
                if (op % 4 == 0)
                        pageout(cl, (int)ri, r->addr, len_of(r));
                else
                        pageout(cl, (int)ri, page, n * ZSWAP_PAGE_SIZE);
        } else if (op < 975) {
                for (size_t q = 0; q < r->npages; q++)
                        cl->bad += !check_page(cl, ri, q);
                cl->reads += r->npages;
        } else if (op < 982) {
                if (CLIENT_FORKS)
                        client_fork(cl);
        } else if (op < 991) {
                region_move(cl, r);
        } else {
                region_replace(cl, r);
        }
}

static int client_connect(Client *cl, const char *sock) {
        uint64_t t0 = now_ns();
        int r;
        /* the daemon may be between a kill and its restart */
        while ((r = zswap_connect(sock, &cl->c)) < 0 && now_ns() - t0 < TEST_WAIT_S * 1000000000ull)
                usleep(20000);
        return r;
}

/* argv: client ID SOCKET DEADLINE_NS SEED RESULT_FD KILLS_FD */
static int client_main(int argc, char **argv) {
        Client cl = { 0 };
        size_t verified = 0, lost = 0;
        char line[512];

        if (argc != 8)
                test_fail("usage: client ID SOCKET DEADLINE_NS SEED RESULT_FD KILLS_FD");
        cl.id = (unsigned)strtoul(argv[2], NULL, 10);
        uint64_t deadline = strtoull(argv[4], NULL, 10);
        cl.seed = strtoull(argv[5], NULL, 10);
        int fd = result_fd = atoi(argv[6]);
        cl.kills = td_kills_map(atoi(argv[7]));
        close(atoi(argv[7]));
        if (test_env_uint("SOAK_LAZY_FORKS", 1))
                zswap_child_attach_defer();
        int r = client_connect(&cl, argv[3]);
        if (r < 0)
                test_fail("client %u: zswap_connect: %d (%s)", cl.id, r, strerror(-r));
        for (unsigned ri = 0; ri < REGIONS; ri++)
                region_new(&cl, &cl.r[ri]);
        /* to the deadline, or the first failure: a client the parent
         * kills later would take it along */
        while (now_ns() < deadline && !cl.bad && !cl.api_errors)
                for (int i = 0; i < 64; i++)
                        client_step(&cl);

        /* the parent has the daemon up by now */
        lost = check_all(&cl);
        for (unsigned ri = 0; ri < REGIONS; ri++)
                verified += cl.r[ri].npages;
        zswap_disconnect(cl.c);
        lost += check_all(&cl);
        verified *= 2;
        snprintf(line, sizeof(line),
                 "verified=%zu lost=%zu bad_reads=%llu api_errors=%llu reads=%llu writes=%llu drops=%llu "
                 "pageouts=%llu enotconn=%llu forks=%llu forks_idle=%llu forks_lost=%llu moves=%llu replaced=%llu\n",
                 verified, lost, (unsigned long long)cl.bad, (unsigned long long)cl.api_errors,
                 (unsigned long long)cl.reads, (unsigned long long)cl.writes, (unsigned long long)cl.drops,
                 (unsigned long long)cl.pageouts, (unsigned long long)cl.enotconn, (unsigned long long)cl.forks,
                 (unsigned long long)cl.forks_idle, (unsigned long long)cl.forks_lost, (unsigned long long)cl.moves, (unsigned long long)cl.replaced);
        fprintf(stderr, "client %u (pid %d): %s", cl.id, (int)getpid(), line);
        ASSERT_EQ(write(fd, line, strlen(line)), (long long)strlen(line));
        return lost || cl.bad || cl.api_errors ? 1 : 0;
}

/* ---- the parent ---- */

typedef struct Slot {
        pid_t pid;
        const char *cgroup; /* its client runs there (a CPU quota), or NULL */
        unsigned id;
        int result;  /* read end of the client's result pipe */
        bool exited; /* reaped at the deadline already, with status */
        int status;
} Slot;

typedef struct Soak {
        TestDaemon d;
        int kills_fd; /* td_kills_record(): when the daemon was killed, for the clients */
        uint64_t deadline, seed;
        unsigned next_id;
        unsigned daemon_kills, client_kills, clients_started, client_failures;
        size_t verified, lost, forks_lost;
} Soak;

static void slot_spawn(Soak *s, Slot *slot) {
        int p[2];
        char id[16], deadline[32], seed[32], fd[16], kfd[16];

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        slot->id = s->next_id++;
        snprintf(id, sizeof(id), "%u", slot->id);
        snprintf(deadline, sizeof(deadline), "%llu", (unsigned long long)s->deadline);
        snprintf(seed, sizeof(seed), "%llu", (unsigned long long)(s->seed + slot->id * 7919));
        slot->pid = fork();
        ASSERT_TRUE(slot->pid >= 0);
        if (slot->pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (slot->cgroup && !td_cgroup_join(slot->cgroup, getpid()))
                        _exit(126);
                snprintf(fd, sizeof(fd), "%d", dup(p[1]));
                snprintf(kfd, sizeof(kfd), "%d", dup(s->kills_fd));
                execl("/proc/self/exe", "test-soak", "client", id, s->d.sock, deadline, seed, fd, kfd, (char *)NULL);
                _exit(127);
        }
        close(p[1]);
        slot->result = p[0];
        slot->exited = false;
        s->clients_started++;
}

/* The line a client wrote before it exited, if any. */
static bool slot_result(Slot *slot, char *buf, size_t len) {
        ASSERT_OK(fcntl(slot->result, F_SETFL, O_NONBLOCK));
        ssize_t n = read(slot->result, buf, len - 1);
        close(slot->result);
        slot->result = -1;
        buf[n > 0 ? n : 0] = 0;
        return n > 0;
}

static unsigned long long report_field(const char *buf, const char *key) {
        const char *f = strstr(buf, key);
        return f ? strtoull(f + strlen(key), NULL, 10) : 0;
}

static bool report_failed(const char *buf) {
        return strstr(buf, "failed_early") || report_field(buf, " lost=") || report_field(buf, "bad_reads=") || report_field(buf, "api_errors=");
}

static void slot_kill(Soak *s, Slot *slot) {
        char buf[512];
        int st;

        kill(slot->pid, SIGKILL);
        ASSERT_EQ(waitpid(slot->pid, &st, 0), slot->pid);
        bool reported = slot_result(slot, buf, sizeof(buf));
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
                /* it failed before the kill reached it */
                fprintf(stderr, "client %u (pid %d) had exited: status %#x %s\n", slot->id, (int)slot->pid, st,
                        reported ? buf : "");
                s->client_failures++;
        } else if (reported && report_failed(buf)) {
                /* a client writes its report at the deadline or at its
                 * first failure: one that failed is not let off by the kill */
                fprintf(stderr, "client %u (pid %d) had failed: %s", slot->id, (int)slot->pid, buf);
                s->client_failures++;
        }
        s->client_kills++;
}

/* A client that exits before the deadline failed. */
static void reap_early(Soak *s, Slot *slots, unsigned n) {
        char buf[512];
        for (unsigned i = 0; i < n; i++) {
                int st;
                if (waitpid(slots[i].pid, &st, WNOHANG) != slots[i].pid)
                        continue;
                if (now_ns() >= s->deadline) {
                        /* done in time: slot_finish() reads its report */
                        slots[i].exited = true;
                        slots[i].status = st;
                        continue;
                }
                slot_result(&slots[i], buf, sizeof(buf));
                fprintf(stderr, "client %u (pid %d) exited early: status %#x %s\n", slots[i].id, (int)slots[i].pid,
                        st, buf);
                s->client_failures++;
                slot_spawn(s, &slots[i]);
        }
}

static void daemon_assert_alive(Soak *s) {
        int st;
        if (waitpid(s->d.pid, &st, WNOHANG) == s->d.pid) {
                td_log_dump(&s->d);
                test_fail("zswapd died on its own: status %#x", st);
        }
}

static void dump_tasks(pid_t pid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        DIR *dir = opendir(path);
        struct dirent *e;

        while (dir && (e = readdir(dir))) {
                char wpath[300], w[64] = "";
                if (e->d_name[0] == '.')
                        continue;
                snprintf(wpath, sizeof(wpath), "/proc/%d/task/%s/wchan", (int)pid, e->d_name);
                FILE *f = fopen(wpath, "re");
                if (f) {
                        (void)!fgets(w, sizeof(w), f);
                        fclose(f);
                }
                fprintf(stderr, "  task %s waits in %s\n", e->d_name, w[0] ? w : "?");
        }
        if (dir)
                closedir(dir);
}

/* Wait for a client at the end (until end_ns); it reports what it checked. */
static void slot_finish(Soak *s, Slot *slot, uint64_t end_ns) {
        char buf[512];
        int st;
        pid_t r;

        st = slot->status;
        r = slot->exited ? slot->pid : 0;
        while (r == 0 && (r = waitpid(slot->pid, &st, WNOHANG)) == 0 && now_ns() < end_ns)
                usleep(20000);
        if (r != slot->pid) {
                fprintf(stderr, "client %u (pid %d) did not finish in time:\n", slot->id, (int)slot->pid);
                dump_tasks(slot->pid);
                kill(slot->pid, SIGKILL);
                waitpid(slot->pid, &st, 0);
        }
        bool reported = slot_result(slot, buf, sizeof(buf));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !reported) {
                fprintf(stderr, "client %u (pid %d) failed: status %#x, report: %s\n", slot->id, (int)slot->pid, st,
                        reported ? buf : "none");
                s->client_failures++;
        }
        const char *v = strstr(buf, "verified="), *l = strstr(buf, " lost="), *f = strstr(buf, "forks_lost=");
        if (v)
                s->verified += strtoull(v + 9, NULL, 10);
        if (l)
                s->lost += strtoull(l + 6, NULL, 10);
        if (f)
                s->forks_lost += strtoull(f + 11, NULL, 10);
}

int main(int argc, char **argv) {
        if (argc >= 2 && strcmp(argv[1], "client") == 0)
                return client_main(argc, argv);

        unsigned seconds = test_env_uint("SOAK_SECONDS", 20), nclients = test_env_uint("SOAK_CLIENTS", 3);
        bool kill_daemon = test_env_uint("SOAK_DAEMON_KILLS", 1) != 0;
        const char *env_seed = getenv("TEST_SEED");
        Slot slots[16];
        Soak s = { 0 };

        if (nclients < 1 || nclients > 16)
                nclients = 3;
        s.seed = env_seed ? strtoull(env_seed, NULL, 0) : now_ns() ^ (uint64_t)getpid() << 32;
        fprintf(stderr, "soak: %u s, %u clients, TEST_SEED=%#llx, starts at %llu ms\n", seconds, nclients,
                (unsigned long long)s.seed, ms_now());
        char quota[512];
        bool throttled = test_env_uint("SOAK_THROTTLE", 1) && td_quota_cgroup(10, quota, sizeof(quota));
        td_start_logged(&s.d, getenv("TEST_DAEMON_ARGS"));
        s.kills_fd = td_kills_record(&s.d);
        s.deadline = now_ns() + (uint64_t)seconds * 1000000000ull;
        for (unsigned i = 0; i < nclients; i++) {
                slots[i].cgroup = i == 0 && throttled ? quota : NULL;
                slot_spawn(&s, &slots[i]);
        }

        uint64_t rnd = s.seed;
        while (now_ns() < s.deadline) {
                usleep(100000 + xorshift(&rnd) % 500000);
                daemon_assert_alive(&s);
                reap_early(&s, slots, nclients);
                if (now_ns() >= s.deadline)
                        break;
                unsigned action = (unsigned)(xorshift(&rnd) % 100);
                if (action < 35) {
                        if (!kill_daemon)
                                continue;
                        pid_t old = s.d.pid;
                        td_kill(&s.d);
                        s.daemon_kills++;
                        fprintf(stderr, "%llu ms: daemon %d killed\n", ms_now(), (int)old);
                        td_log_mark(&s.d, "%llu ms: daemon %d killed", ms_now(), (int)old);
                        usleep(xorshift(&rnd) % 300001);
                        td_respawn(&s.d);
                        fprintf(stderr, "%llu ms: daemon %d accepts connections\n", ms_now(), (int)s.d.pid);
                        td_log_mark(&s.d, "%llu ms: daemon %d accepts connections", ms_now(), (int)s.d.pid);
                } else if (action < 45) {
                        Slot *slot = &slots[xorshift(&rnd) % nclients];
                        pid_t killed = slot->pid;
                        slot_kill(&s, slot);
                        fprintf(stderr, "%llu ms: client %u (pid %d) killed\n", ms_now(), slot->id, (int)killed);
                        slot_spawn(&s, slot);
                        fprintf(stderr, "%llu ms: client %u (pid %d) started\n", ms_now(), slot->id, (int)slot->pid);
                        td_log_mark(&s.d, "%llu ms: client pid %d killed, client %u (pid %d) started", ms_now(),
                                    (int)killed, slot->id, (int)slot->pid);
                }
        }
        /* a client reads back a few MiB, twice: seconds, even under TSan;
         * the bound is for a machine at load 10, and the throttled one
         * gets a tenth of a CPU for it */
        uint64_t finish = now_ns() + (throttled ? 3 : 1) * TEST_WAIT_S * 1000000000ull;
        for (unsigned i = 0; i < nclients; i++)
                slot_finish(&s, &slots[i], finish);
        daemon_assert_alive(&s);
        if (s.client_failures)
                td_log_dump(&s.d);
        td_stop(&s.d);
        if (throttled)
                td_cgroup_remove(quota);

        fprintf(stderr, "soak: %u s: %u daemon kills and restarts, %u clients killed, %u started; %u clients failed; "
                        "%zu pages verified at the end, %zu lost\n",
                seconds, s.daemon_kills, s.client_kills, s.clients_started, s.client_failures, s.verified, s.lost);
        fprintf(stderr, "soak: forks lost to a daemon death during the fork: %zu (clients that lived to the end)\n",
                s.forks_lost);
        ASSERT_EQ(s.client_failures, 0);
        ASSERT_EQ(s.lost, 0);
        ASSERT_TRUE(s.verified > 0);
        const char *kills_ok = getenv("SOAK_FORK_KILLS_OK");
        if (!kills_ok || strcmp(kills_ok, "1") != 0)
                ASSERT_EQ(s.forks_lost, 0);
        return 0;
}
