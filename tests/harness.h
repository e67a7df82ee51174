/*
 * harness.h: what the integration tests share: a real zswapd started on a
 * temporary socket, corpus page data, page checksums.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"
#include "test.h"
#include "zswap.h"

/*
 * When the daemon was killed (td_kill()): each kill as the interval from
 * the kill() call until waitpid() saw the daemon gone, in now_ns() time
 * (CLOCK_MONOTONIC, the same in every process). In a memfd so that the
 * programs a test runs can read it (td_kills_map()).
 */
#define TD_KILLS_MAX 4096
typedef struct TdKills {
        _Atomic uint32_t n;
        struct {
                _Atomic uint64_t start, end; /* end 0: under way */
        } k[TD_KILLS_MAX];
} TdKills;

typedef struct TestDaemon {
        pid_t pid;
        char sock[108];
        char args[320];
        char log[128];   /* td_start_logged(): the daemon's stderr goes here */
        TdKills *kills;  /* td_kills_record(): td_kill() writes each kill here */
} TestDaemon;

/* Start $ZSWAPD (or ../daemon/zswapd next to the test) with a temporary
 * socket and extra arguments; returns once it accepts connections. Skips
 * the test (77) if not root. */
/* For the tests of unmodified programs under zswap-run: zswap-run and
 * zswapctl of $ZSWAPD's build tree into run and ctl, and the program
 * victim_name beside the test into victim (PATH_MAX bytes each). Skips
 * the test without $ZSWAPD, when not root, and in a sanitizer build (a
 * sanitized shim cannot be preloaded into a program without the
 * sanitizer's runtime, which must come first: the plain build runs
 * them). */
void td_shim_paths(char *run, char *ctl, char *victim, const char *victim_name);
/* The zswapd binary the tests run: $ZSWAPD, or the build tree's. */
const char *td_daemon_path(void);
/* The zswapctl built beside it, into ctl (PATH_MAX bytes). */
void td_ctl_path(char *ctl);
void td_start(TestDaemon *d, const char *extra_args);
/* td_start() with the socket at sock, a path of the test's choosing. */
void td_start_at(TestDaemon *d, const char *sock, const char *extra_args);
/* td_start() with the daemon's log (stderr) appended to a fresh temporary
 * file, d->log, for tests that check what it says. */
void td_start_logged(TestDaemon *d, const char *extra_args);
/* td_start_logged() with $TEST_DAEMON_ARGS, and ZSWAPD_INJECT=spec in this
 * daemon's environment alone (a td_respawn() later injects nothing). */
void td_start_injected(TestDaemon *d, const char *spec);
/* Whether the daemon's log (td_start_logged) holds needle. */
bool td_log_has(const TestDaemon *d, const char *needle);
/* How many of its lines do. */
unsigned td_log_count(const TestDaemon *d, const char *needle);
/* "Key:\tvalue" of a /proc status file (/proc/PID/status, a task's), as
 * text in out; false if the file or the key is missing. */
bool td_status_field(const char *path, const char *key, char *out, size_t len);
/* The daemon's open descriptors now (fails the test if it cannot tell). */
unsigned td_fd_count(const TestDaemon *d);
/* The daemon's VmRSS in kB now; 0 if it cannot be read. */
uint64_t td_rss_kb(const TestDaemon *d);
/* Every thread of the daemon (io_uring's workers included) holds the same
 * capabilities as its main thread: none kept from before the sandbox.
 * Fails the test otherwise; the number of threads looked at. */
unsigned td_assert_threads_unprivileged(const TestDaemon *d);
/* SIGTERM and wait; fails the test if the daemon crashed, or if it has
 * not exited after TEST_WAIT_S (its threads' kernel stacks and its log
 * are printed, and it is killed). */
void td_stop(TestDaemon *d);
/* waitpid(pid) for secs at most: true with *st once it is reaped; false
 * on the bound, after printing (as who) the state and kernel stack of
 * each of its threads, which is where a process that does not exit
 * waits. */
bool td_waitpid_for(pid_t pid, int *st, unsigned secs, const char *who);
/* The state and kernel stack of each of pid's threads, on stderr. */
void td_dump_stacks(pid_t pid, const char *who);
/* SIGKILL and wait. */
void td_kill(TestDaemon *d);
/* Restart with the same socket and arguments. */
void td_restart(TestDaemon *d);
struct zswap_client *td_connect(TestDaemon *d);

/* len bytes of fill_pages(seed) data, page hashes into hashes[len / 4096],
 * registered with c: where almost every test starts. */
uint8_t *td_region(struct zswap_client *c, size_t len, uint64_t seed, uint64_t *hashes);

/* zswap_pageout() of [buf, buf + len) until at least want pages have left
 * in all: one pageout may leave some resident (a move revoked while the
 * agent was descheduled, which loses nothing: docs/page-lifecycle.md), so
 * a test that needs pages out asks again, for TEST_WAIT_S at most. The
 * pages that left, or -1 (said on stderr, with how far it got) if a
 * pageout failed or time ran out. */
long td_pageout_want(struct zswap_client *c, void *buf, size_t len, long want);

/* Anonymous private memory. */
void *test_map(size_t len);

/* This process's descriptors whose /proc/self/fd link names needle
 * ("memfd:zswapd-store"): up to max into fds; returns how many. */
size_t td_fds_named(const char *needle, int *fds, size_t max);

/*
 * A race over a region whose pages are all known (hashes): two readers
 * check whole even pages at random, a writer rewrites a byte of odd pages
 * with its own value (a write fault, same content), an evicter pages out
 * random 256-page ranges, each pausing as asked, until td_race_stop().
 * Then bad says how many reads saw a wrong page (first_bad: which).
 */
typedef struct TdRace {
        /* in */
        struct zswap_client *c;
        uint8_t *buf;
        size_t npages;            /* a multiple of 256 */
        const uint64_t *hashes;
        unsigned read_pause_us;   /* after every 8th read */
        unsigned write_pause_us, evict_pause_us;
        /* out */
        _Atomic bool stop;
        _Atomic uint64_t bad, checked, rewritten, evicted;
        _Atomic long first_bad;
        pthread_t th[4];
        struct TdRaceArg {
                struct TdRace *r;
                uint64_t seed; /* readers 1 and 2, writer 3, evicter 4 */
        } args[4];
} TdRace;
void td_race_start(TdRace *r);
void td_race_stop(TdRace *r);
/* Fill with real heap pages from the corpus (cycled), perturbed by seed so
 * that different buffers differ; synthetic compressible pages if the corpus
 * is missing. Every 50th page is zero, every 97th filled with a pattern. */
void fill_pages(void *buf, size_t len, uint64_t seed);
uint64_t page_hash(const void *page);
/* Hash every page into hashes[]. */
void hash_pages(const void *buf, size_t len, uint64_t *hashes);
/* Count pages whose hash differs. */
size_t verify_pages(const void *buf, size_t len, const uint64_t *hashes);
uint64_t rss_anon_bytes(pid_t pid);
uint64_t xorshift(uint64_t *s);
/* Global stats through a fresh control-less client query. */
void td_stats(struct zswap_client *c, struct zswap_stats *s);
/* The daemon's STATUS (what zswapctl status shows), over a control
 * connection of its own. */
struct ZMsgStatusReply;
struct ZClientRecord;
void td_status(const TestDaemon *d, struct ZMsgStatusReply *st);
/* Sum of the CLIENTS records (what zswapctl clients lists) of every
 * client (pid 0) or of pid's: pages on the second tier and their
 * compressed bytes there. */
/* The clients' records of process pid (0: all) summed: stored, compressed,
 * tier and strong-tier figures, recompressed (and the last one's
 * recompress_age_ms); checks that each record's parts add up. */
void td_clients_sum(const TestDaemon *d, pid_t pid, struct ZClientRecord *sum);
void td_clients_tier(const TestDaemon *d, pid_t pid, uint64_t *pages, uint64_t *bytes);

/*
 * Start a daemon again on d's socket, with its arguments and log, after
 * td_kill() or td_stop() (d->pid 0); returns once it accepts connections.
 * The new daemon unlinks the path the dead one left and binds it anew, so
 * clients reconnect to the same path. Safe while this process has memory
 * registered and no daemon reads its userfaultfd: the daemon is started
 * with posix_spawn() (the address space is not copied), whereas fork()
 * (td_restart()) waits in the kernel until a daemon reads the
 * UFFD_EVENT_FORK of each registered range, that is forever.
 */
void td_respawn(TestDaemon *d);
/* Append a line of the test's own to the daemon's log (td_start_logged),
 * e.g. when it killed the daemon, to read the log against. */
void td_log_mark(const TestDaemon *d, const char *fmt, ...) _printf_(2, 3);
/* Run zswapctl (the one built beside the daemon) against d with the
 * arguments given, its output on stderr; returns its exit status. */
int td_ctl(const TestDaemon *d, const char *fmt, ...) _printf_(2, 3);
/* `zswapctl pageout PID` (len 0), or of [addr, addr+len): the pages it
 * says were evicted, -1 if it failed (the process has no client yet). */
long td_pageout_pid(const TestDaemon *d, pid_t pid, uint64_t addr, uint64_t len);
/* Print the daemon's log (td_start_logged) to stderr, for a failure. */
void td_log_dump(const TestDaemon *d);
/* fork(), and in the child become uid (gid uid, the one supplementary
 * group `group` if not 0, none else) as a login would leave a process of
 * that user: dumpable, and killed with the test (PR_SET_PDEATHSIG, set
 * after the switch, which clears it). The child exits 90 if it cannot.
 * Returns as fork() does; fails the test if fork() does. */
pid_t td_fork_as(uid_t uid, gid_t group);
/* A new cgroup whose CPU quota is pct % of one CPU: cgroup v2's cpu.max
 * where its cpu controller is available (real hosts), v1's
 * cpu.cfs_quota_us otherwise. Its directory in dir; false if neither. */
bool td_quota_cgroup(unsigned pct, char *dir, size_t len);
/* Move process pid, every thread of it, into cgroup dir. */
bool td_cgroup_join(const char *dir, pid_t pid);
/* Remove cgroup dir once its members have gone (a few seconds at most). */
void td_cgroup_remove(const char *dir);
/* Where a task waits in the kernel (its wchan): thread tid of process
 * pid, pid 0 this process, tid 0 the process as a whole. Into buf, ""
 * when it cannot be read (a kernel that hides its symbols says "0");
 * returns buf. */
const char *task_wchan(pid_t pid, pid_t tid, char *buf, size_t len);
/* Whether thread tid of this process waits in handle_userfault(). */
bool task_in_userfault(pid_t tid);
/* The VmFlags line of the mapping that contains addr (/proc/self/smaps)
 * into buf, without the "VmFlags:" prefix; false if no mapping does. */
bool vma_flags(const void *addr, char *buf, size_t len);
/* Whether that mapping is registered with a userfaultfd for missing
 * pages (VmFlags "um"), or at all ("um" or "uw": a range the daemon never
 * evicted from is registered for write-protect faults only). */
bool vma_uffd_missing(const void *addr);
bool vma_uffd_registered(const void *addr);

/* From now on, td_kill(d) records each kill in a memfd (close-on-exec):
 * returns its descriptor, for td_kills_map() in a program the test runs. */
int td_kills_record(TestDaemon *d);
/* Map a record that td_kills_record() made, read-only. */
const TdKills *td_kills_map(int fd);
/* Whether a kill in k was under way at any moment from..to (now_ns()):
 * the daemon may have died in that interval. */
bool td_killed_between(const TdKills *k, uint64_t from, uint64_t to);

/* A port on 127.0.0.1 nothing listens on (now). */
int td_free_port(void);

/* nbd-server on a free loopback port, exporting a 64 MiB file of its
 * directory (/var/tmp/zswap-test-nbd-PID) as "tier". nbd-server forks a
 * process per connection: they are found by their command line, which
 * names the directory's configuration file. */
typedef struct TdNbd {
        char dir[96];
        int port;
        bool running;
        pid_t stopped[16]; /* td_nbd_pause()'s */
        unsigned nstopped;
} TdNbd;
/* Whether nbd-server is installed. */
bool td_nbd_installed(void);
/* Start it (again: the same directory, port and data). */
void td_nbd_start(TdNbd *n);
/* SIGKILL to every process of it, until none is left. */
void td_nbd_stop(TdNbd *n);
/* SIGSTOP to every process of it: it keeps its connections open and
 * answers nothing (no new connection either), until td_nbd_resume(),
 * which sends SIGCONT to the same processes without looking for them
 * again: reading another process's command line waits for its mmap lock,
 * which a test's attacker may hold. */
void td_nbd_pause(TdNbd *n);
void td_nbd_resume(TdNbd *n);
/* Stopped if running, and its directory removed. */
void td_nbd_remove(TdNbd *n);

/* With a second tier: page all of buf (len bytes, registered on c) out
 * until the daemon holds nine tenths of its pages (the tier's writer
 * makes room in the pool as eviction fills it) and the tier holds at
 * least min_tier pages; fails the test after TEST_WAIT_S, saying how far
 * it got. */
void td_tier_fill(const TestDaemon *d, struct zswap_client *c, uint8_t *buf, size_t len, uint64_t min_tier);
/* The status once the tier's writer has written nothing for 200 ms, or
 * after 20 s if it keeps writing (eviction at the pool's bound). */
void td_tier_settled(const TestDaemon *d, struct ZMsgStatusReply *st);

/* A thread that reads npages pages of buf in order, each checked against
 * hashes (hash_pages()), its progress published for the test to watch:
 * pthread_create(..., td_page_reader, r). */
typedef struct TdPageReader {
        const uint8_t *buf;
        const uint64_t *hashes;
        size_t npages;
        _Atomic size_t at;  /* pages read so far */
        _Atomic size_t bad; /* of them, those that differ */
        _Atomic bool done;
} TdPageReader;
void *td_page_reader(void *arg);
/* Until r's progress has stood still for a second (it waits in a fault
 * that does not come back): the pages it had read. Fails the test (what,
 * saying how far r got) if r ends first, or after TEST_WAIT_S. */
size_t td_page_reader_stall(TdPageReader *r, const char *what);
