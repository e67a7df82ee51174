/*
 * mmjob.c: a pool of threads for the calls that wait for a client's mmap
 * lock (mmjob.h).
 *
 * The pool's queue and its threads' slots are under `lock`; a thread runs
 * one job at a time outside it. Each client's own queue (MMClient.jobs,
 * job_running) and the per-user counts are the manager's alone.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mmclient.h"
#include "mmjob.h"
#include "util.h"

typedef struct Slot {
        bool used;
        bool logged;
        Work *cur;    /* the job it runs, or NULL */
        uint64_t since_ns;
} Slot;

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        Work *head, **tail; /* jobs given to the pool, oldest first */
        unsigned threads, idle;
        bool stopping;
        Core *core;
        Slot slots[MMJOB_THREADS_MAX];
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* the manager's: per user, its running jobs that take the mmap lock for
 * writing (mmjob_writing(); an entry at 0 is free for another user) */
typedef struct UserJobs {
        uid_t uid;
        unsigned writers;
} UserJobs;
static UserJobs *users;
static size_t nusers;

/* the manager's: the clients with a job running (mm->job_cur) */
static MMClient **running;
static size_t nrunning, running_cap;

static void running_add(MMClient *mm) {
        if (nrunning == running_cap) {
                size_t cap = running_cap ? 2 * running_cap : 16;
                MMClient **p = realloc(running, cap * sizeof(*p));
                if (!p)
                        return; /* uncounted: the bound errs towards admitting */
                running = p;
                running_cap = cap;
        }
        running[nrunning++] = mm;
}

static void running_remove(MMClient *mm) {
        for (size_t i = 0; i < nrunning; i++)
                if (running[i] == mm) {
                        running[i] = running[--nrunning];
                        return;
                }
}

unsigned mmjob_unconnected(uid_t uid) {
        unsigned n = 0;
        for (size_t i = 0; i < nrunning; i++)
                n += running[i]->uid == uid && !running[i]->conn && !running[i]->forked;
        return n;
}

static UserJobs *user_jobs(uid_t uid, bool add) {
        for (size_t i = 0; i < nusers; i++)
                if (users[i].uid == uid)
                        return &users[i];
        if (!add)
                return NULL;
        for (size_t i = 0; i < nusers; i++)
                if (users[i].writers == 0) {
                        users[i] = (UserJobs){ .uid = uid };
                        return &users[i];
                }
        void *p = realloc(users, (nusers + 1) * sizeof(*users));
        if (!p)
                return NULL; /* uncounted: its user's plans and counts are not held back for it */
        users = p;
        users[nusers] = (UserJobs){ .uid = uid };
        return &users[nusers++];
}

bool mmjob_writes(int type) {
        return type != MW_JOB_ALIVE && type != MW_JOB_EVENTS && type != MW_JOB_PAGEMAP && type != MW_JOB_MOVED &&
               type != MW_JOB_SCAN && type != MW_JOB_ADOPT;
}

unsigned mmjob_writing(uid_t uid) {
        UserJobs *u = user_jobs(uid, false);
        return u ? u->writers : 0;
}

static const char *job_name(int type) {
        switch (type) {
        case MW_JOB_REGISTER:
                return "registration";
        case MW_JOB_ARM:
                return "registration for missing faults";
        case MW_JOB_UNREGISTER:
        case MW_JOB_UNREGISTER_ALL:
                return "unregistration";
        case MW_JOB_ALIVE:
                return "liveness probe";
        case MW_JOB_EVENTS:
                return "probe for events under way";
        case MW_JOB_PAGEMAP:
        case MW_JOB_MOVED:
        case MW_JOB_SCAN:
                return "read of its page tables";
        case MW_JOB_ADOPT:
                return "adoption of its store";
        default:
                return "proof of its address space";
        }
}

static void job_run(Work *w) {
        MMClient *mm = w->mm;
        int r = 0;

        switch (w->type) {
        case MW_JOB_REGISTER:
                r = mmclient_check_anon(mm, w->a, w->b);
                if (r == 0)
                        r = mmclient_uffd_register(mm, w->a, w->b);
                break;
        case MW_JOB_ARM:
                r = mmclient_region_arm(mm, w->a);
                break;
        case MW_JOB_UNREGISTER:
                r = mmclient_uffd_unregister(mm, w->a, w->b);
                break;
        case MW_JOB_UNREGISTER_ALL:
                mmclient_uffd_unregister_all(mm);
                break;
        case MW_JOB_PROVE:
                r = mmclient_prove(mm, w->a, w->b - w->a);
                break;
        case MW_JOB_ALIVE:
                r = uffd_mm_alive(mm->uffd);
                break;
        case MW_JOB_EVENTS:
                r = uffd_event_under_way(mm->uffd);
                break;
        case MW_JOB_PAGEMAP:
                r = mmclient_pagemap(mm, w->a, (size_t)((w->b - w->a) >> ZSWAP_PAGE_SHIFT), w->data);
                break;
        case MW_JOB_MOVED:
        case MW_JOB_SCAN:
        case MW_JOB_ADOPT: {
                MMJobCall *c = w->data;
                c->fn(mm, c);
                break;
        }
        }
        w->status = r;
}

static void *job_thread(void *arg) {
        Slot *s = arg;

        (void)pthread_setname_np(pthread_self(), "zswapd-mmjob");
        pthread_mutex_lock(&P.lock);
        for (;;) {
                if (P.stopping)
                        break;
                if (P.head) {
                        Work *w = P.head;
                        P.head = w->next;
                        if (!P.head)
                                P.tail = &P.head;
                        w->next = NULL;
                        s->cur = w;
                        s->since_ns = now_ns();
                        s->logged = false;
                        P.idle--;
                        pthread_mutex_unlock(&P.lock);
                        job_run(w);
                        pthread_mutex_lock(&P.lock);
                        s->cur = NULL;
                        P.idle++;
                        if (P.stopping)
                                break; /* the manager takes nothing more: w is the exit's */
                        core_post(P.core, w);
                        continue;
                }
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += MMJOB_IDLE_MS / 1000;
                if (pthread_cond_timedwait(&P.cond, &P.lock, &until) == ETIMEDOUT && !P.head && P.threads > 1)
                        break;
        }
        P.threads--;
        P.idle--;
        s->used = false;
        pthread_mutex_unlock(&P.lock);
        return NULL;
}

/* Another thread, if none is idle and the bound allows. Under P.lock. */
static void pool_grow(void) {
        Slot *s = NULL;
        pthread_attr_t attr;
        pthread_t th;
        sigset_t all, old;

        if (P.idle > 0 || P.threads >= MMJOB_THREADS_MAX)
                return;
        for (unsigned i = 0; !s && i < MMJOB_THREADS_MAX; i++)
                if (!P.slots[i].used)
                        s = &P.slots[i];
        if (!s || pthread_attr_init(&attr) != 0)
                return;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        /* no signal is ever ours: the manager reads them (signalfd) */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        s->used = true;
        int r = pthread_create(&th, &attr, job_thread, s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                s->used = false;
                if (P.threads == 0)
                        log_error("cannot start a thread for the calls that wait for a client's mmap lock: %s",
                                  strerror(r));
                return;
        }
        P.threads++;
        P.idle++;
}

static void pool_start(Core *core, Work *w) {
        MMClient *mm = w->mm;
        UserJobs *u = mmjob_writes(w->type) ? user_jobs(mm->uid, true) : NULL;

        if (u)
                u->writers++;
        /* for the log: a proof's client is bound, not published yet (the
         * job writes that) */
        w->lane = (uint32_t)(mmclient_pid(mm) ? mmclient_pid(mm) : mm->bound.pid);
        mm->job_cur = w;
        running_add(mm);
        pthread_mutex_lock(&P.lock);
        P.core = core;
        w->next = NULL;
        if (!P.tail)
                P.tail = &P.head;
        *P.tail = w;
        P.tail = &w->next;
        pool_grow();
        pthread_cond_signal(&P.cond);
        bool none = P.threads == 0;
        pthread_mutex_unlock(&P.lock);
        if (none)
                /* no thread at all: the job waits for the next submit's */
                log_error("pid %d: a %s waits: no thread to make it", (int)mmclient_pid(mm), job_name(w->type));
}

void mmjob_submit(Core *core, Work *w) {
        MMClient *mm = w->mm;

        if (!mm->job_cur) {
                pool_start(core, w);
                return;
        }
        w->next = NULL;
        Work **p = &mm->jobs;
        while (*p)
                p = &(*p)->next;
        *p = w;
}

void mmjob_done(Core *core, Work *w) {
        MMClient *mm = w->mm;
        UserJobs *u = mmjob_writes(w->type) ? user_jobs(mm->uid, false) : NULL;

        if (u && u->writers > 0)
                u->writers--;
        running_remove(mm);
        mm->job_cur = NULL;
        Work *next = mm->jobs;
        if (next) {
                mm->jobs = next->next;
                pool_start(core, next);
        }
}

bool mmjob_busy(const MMClient *mm) {
        return mm->job_cur != NULL;
}

bool mmjob_user_busy(const MMClient *mm) {
        return mmjob_writing(mm->uid) > 0;
}

bool mmjob_registering(const MMClient *mm, uint64_t start, uint64_t end, uint64_t *n, uint64_t *bytes) {
        bool overlap = false;

        for (const Work *w = mm->job_cur; w; w = w == mm->job_cur ? mm->jobs : w->next) {
                if (w->type != MW_JOB_REGISTER)
                        continue;
                overlap |= w->a < end && start < w->b;
                if (n)
                        (*n)++;
                if (bytes)
                        *bytes += w->b - w->a;
        }
        return overlap;
}

void mmjob_tick(void) {
        pthread_mutex_lock(&P.lock);
        /* read under the lock: a job that started after a read made
         * before it would seem to have run for 2^64 ns */
        uint64_t now = now_ns();
        for (unsigned i = 0; i < MMJOB_THREADS_MAX; i++) {
                Slot *s = &P.slots[i];
                if (!s->used || !s->cur || s->logged || now - s->since_ns < MMJOB_LATE_MS * 1000000ull)
                        continue;
                s->logged = true;
                /* ADOPT copies too: a large store takes a while */
                bool adopt = s->cur->type == MW_JOB_ADOPT;
                log_msg(adopt ? LOG_LEVEL_INFO : LOG_LEVEL_WARN,
                         "pid %d (uid %u): its %s %s for %llu ms so far (%s): its requests wait, the daemon does not",
                         (int)s->cur->lane, s->cur->mm->uid, job_name(s->cur->type),
                         adopt ? "has run" : "waits for its mmap lock",
                         (unsigned long long)((now - s->since_ns) / 1000000),
                         adopt ? "a large store, or its mmap lock held"
                               : "a FUSE server of its own that does not answer?");
        }
        pthread_mutex_unlock(&P.lock);
}

void mmjob_stop(void) {
        pthread_mutex_lock(&P.lock);
        P.stopping = true;
        pthread_cond_broadcast(&P.cond);
        pthread_mutex_unlock(&P.lock);
        free(users);
        users = NULL;
        nusers = 0;
}
