/*
 * mmjob.h: the calls on a client's address space that wait for its mmap
 * lock, made off the manager thread.
 *
 * UFFDIO_REGISTER and UFFDIO_UNREGISTER take the client's mmap lock for
 * writing, and the client decides how long it holds that lock: a thread
 * of its own that reads its /proc/self/mem at a page of a FUSE file
 * whose server never answers waits in the kernel with the lock held for
 * reading, for as long as its server likes, and no signal of ours ends
 * the ioctl. Made on the manager thread, such a call stopped every
 * connection. So the manager makes none of them: it hands each to a job
 * (a Work of type MW_JOB_*), runs it on a thread of this pool, and
 * finishes the request that needed it when the job comes back through
 * the inbox (manager.c's run_inbox(), mmjob_done()).
 *
 * The jobs of one client run one at a time, in the order they were
 * given (mmjob_submit() queues behind the running one): a REGISTER, the
 * arming of its region and its UNREGISTER reach the kernel in order.
 * While a job of a user's that takes the lock for writing runs, nothing of
 * that user's clients is planned for eviction, scanned or counted
 * (mmjob_user_busy()): the scans and the check of what a MOVE moved read
 * /proc/PID/pagemap on the manager thread, which takes the same lock for
 * reading and would wait behind our own job's wait for it (the plan's
 * read is a job of its own, MW_JOB_PAGEMAP); and the address space a job
 * waits for may be another client's of the same user (a second
 * connection of one process, a uffd one process made and another
 * handed over, which the proof then refuses).
 *
 * A job that waits is a thread that waits: each job gets a thread of its
 * own when no idle one is there, up to MMJOB_THREADS_MAX. A client's
 * jobs run one at a time, so a client holds one thread at most; a
 * non-root user's clients with a job running that no connection counts
 * for count against its max_connections (mmjob_unconnected(): the manager
 * refuses its new connections at the bound), so that a user who closes
 * each connection as its job waits does not make a thread per
 * connection. A job that ran MMJOB_LATE_MS or longer
 * is logged (mmjob_tick()). Idle threads beyond one end after
 * MMJOB_IDLE_MS.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "core.h"

enum {
        MW_JOB_REGISTER = 200,  /* check [a, b) is anonymous memory, register it: status 0/1 (armed) or -errno */
        MW_JOB_ARM,             /* mmclient_region_arm(mm, a) */
        MW_JOB_UNREGISTER,      /* unregister [a, b) */
        MW_JOB_UNREGISTER_ALL,  /* unregister every region mm has */
        MW_JOB_PROVE,           /* mmclient_prove(mm, a, b - a), after mmclient_bind() */
        MW_JOB_ALIVE,           /* does mm's address space exist (its uffd's probe)? status 1 or 0 */
        MW_JOB_EVENTS,          /* has mm's uffd an event under way (uffd_event_under_way())? status 1 or 0 */
        MW_JOB_PAGEMAP,         /* the pagemap words of [a, b) into data (a pageout's plan; v: its op) */
        MW_JOB_MOVED,           /* which pages a MOVE moved: data is an MMJobCall (evict.c, MovedCheck) */
        MW_JOB_SCAN,            /* a count, and the write scan: data is an MMJobCall (reclaim.c, ScanJob) */
        MW_JOB_ADOPT,           /* an ADOPT's reads and copies: data is an MMJobCall (adopt.h, AdoptWalk) */
        MW_JOB_LAST = MW_JOB_ADOPT,
};

/* What data starts with for the jobs whose work is a layer above this
 * one's: the pool's thread calls fn(mm, data). */
typedef struct MMJobCall MMJobCall;
struct MMJobCall {
        void (*fn)(MMClient *mm, MMJobCall *self);
};

#define MMJOB_THREADS_MAX 256
#define MMJOB_LATE_MS 1000u
#define MMJOB_IDLE_MS 10000u

static inline bool mmjob_is(int type) {
        return type >= MW_JOB_REGISTER && type <= MW_JOB_LAST;
}

/* Manager thread: run w (type MW_JOB_*, w->mm its client) once mm's
 * earlier jobs are done; w comes back through core's inbox with its
 * result in w->status (and w->lane holding the client's pid, for logs:
 * what the job was given in w->lane is lost).
 * Never waits. */
void mmjob_submit(Core *core, Work *w);

/* Manager thread, for a job back from the pool (before the caller
 * finishes what it was for): mm's next job starts. */
void mmjob_done(Core *core, Work *w);

/* Manager thread: has mm a job queued or running? */
bool mmjob_busy(const MMClient *mm);

/* Manager thread: is a job of mm's user running (mm's or another
 * client's) that takes the mmap lock for writing? Nothing of mm is
 * planned, scanned or counted meanwhile. (A job that only reads, the
 * plan's pagemap read, queues no writer: it holds up nothing.) */
bool mmjob_user_busy(const MMClient *mm);

/* Manager thread: does a registration of mm on its way (MW_JOB_REGISTER,
 * queued or running) overlap [start, end)? Adds how many there are, and
 * their bytes, to *n and *bytes (each may be NULL). */
bool mmjob_registering(const MMClient *mm, uint64_t start, uint64_t end, uint64_t *n, uint64_t *bytes);

/* Does a job of this type take the client's mmap lock for writing (not
 * only read its page tables)? */
bool mmjob_writes(int type);

/* Manager thread: jobs of uid's clients running now that take the mmap
 * lock for writing. */
unsigned mmjob_writing(uid_t uid);

/* Manager thread: uid's clients with a job running that no connection
 * counts for: no connection (a proof's, before it is served; one whose
 * connection closed while its job waits), and not a fork child that has
 * not attached (its user's bound on such children counts it). Each holds
 * a thread while its job waits (one job of a client runs at a time). */
unsigned mmjob_unconnected(uid_t uid);

/* Manager thread, each tick: log each job running MMJOB_LATE_MS or longer
 * (once). */
void mmjob_tick(void);

/* At exit, after the manager took back every job it waits for: a thread
 * still in a call posts nothing more (what it holds is left to the
 * exit). */
void mmjob_stop(void);
