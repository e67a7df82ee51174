/*
 * requests.c: what a connection asks once it has its role.
 *
 * dispatch() takes every validated message (conn.c) to its handler: range
 * requests (REGISTER, UNREGISTER, PAGEOUT), which first wait until the
 * fault thread has handled every event the client caused (mm_sync_now(),
 * FW_SYNC and sync_done()); the fork handshake (FORK_PREPARE, FORK_DONE);
 * statistics; the eviction's hand-backs (MOVE_DONE, RELEASE_DONE); and the
 * admin's requests (pageout of a pid, limits, tunables), each allowed to
 * root, the admin group or the user that owns the client. The attach
 * family is attach.c's. Manager thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "fault.h"
#include "inject.h"
#include "log.h"
#include "trace.h"
#include "manager-internal.h"
#include "mmjob.h"
#include "reclaim.h"
#include "users.h"
#include "util.h"

static int range_check(const ZMsgRange *rg) {
        if (!page_aligned(rg->addr) || !page_aligned(rg->len) || rg->len == 0 || rg->addr == 0 ||
            rg->addr + rg->len < rg->addr || rg->addr + rg->len > PINDEX_MAX_ADDR)
                return -EINVAL;
        return 0;
}

/*
 * REGISTER: checked here against what the manager knows (its regions,
 * the ones on their way, the unregisters under way, the user's quotas),
 * then made by a job (mmjob.h: the ioctl takes the client's mmap lock
 * for writing, and the maps read that checks the range is anonymous
 * memory goes with it); register_done() answers. 1: answered later.
 */
static int do_register(Manager *m, Conn *c, MMClient *mm, uint32_t id, uint64_t s, uint64_t e) {
        uint64_t cs = s, ce = e;

        /* overlap check first, so that we never touch a range already
         * ours, or one on its way to be */
        if (mmclient_region_clip(mm, &cs, &ce) || mmjob_registering(mm, s, e, NULL, NULL))
                return -EEXIST;
        for (PageoutOp *op = mm->ops; op; op = op->next)
                if (op->unregister && op->start < e && s < op->end)
                        return -EBUSY; /* still being unregistered: ask again when that returns */
        if (s < mm->staging_addr + (uint64_t)mm->nlanes * LANE_SLOTS * ZSWAP_PAGE_SIZE && e > mm->staging_addr)
                return -EINVAL; /* the staging area is the agent's, never managed */
        int r = users_check_register(m, mm, e - s);
        if (r < 0)
                return r;
        Work *w = work_new(MW_JOB_REGISTER, mm);
        if (!w)
                return -ENOMEM;
        w->a = s;
        w->b = e;
        w->id = id;
        w->v = c->serial;
        mmjob_submit(&m->core, w);
        return 1;
}

void register_done(Manager *m, Work *w) {
        MMClient *mm = w->mm;
        Conn *c = conn_find(m, w->v);
        int r = w->status;

        TRACE(TR_REG, w->a, w->b, (int64_t)r);
        if (r >= 0 && (!c || c->mm != mm || atomic_load_explicit(&mm->dead, memory_order_relaxed))) {
                /* nobody to serve it for: off again */
                w->type = MW_JOB_UNREGISTER;
                mmjob_submit(&m->core, w);
                return;
        }
        if (r >= 0) {
                r = mmclient_region_add(mm, w->a, w->b, r > 0);
                mm->rc.measured_ms = 0; /* the next statistics count afresh */
        } else if (r == -EBUSY)
                r = -EEXIST;
        if (c)
                conn_reply(c, w->id, r < 0 ? r : 0, 0);
        if (r < 0 && w->status >= 0) {
                w->type = MW_JOB_UNREGISTER;
                mmjob_submit(&m->core, w);
                return;
        }
        work_free(w);
}

/* REGIONS: mm's regions from `from` on (protocol.h) */
static int regions_reply(Conn *c, MMClient *mm, uint32_t id, uint64_t from) {
        ZMsgRegionsReply rep = { .status = 0 };
        uint64_t starts[ZSWAP_REGIONS_PER_MSG], ends[ZSWAP_REGIONS_PER_MSG];

        rep.count = (uint32_t)mmclient_regions_list(mm, from, starts, ends, ZSWAP_REGIONS_PER_MSG, &rep.next);
        for (uint32_t i = 0; i < rep.count; i++) {
                rep.span[i].start = starts[i];
                rep.span[i].end = ends[i];
        }
        zmsg_init(&rep.hdr, ZMSG_REGIONS_REPLY, id, sizeof(rep));
        reply_send(c, &rep, sizeof(rep), NULL, 0);
        return 1;
}

/* A range request, after the fault thread caught up with mm's events. */
static int range_request(Manager *m, Conn *c, MMClient *mm, int type, uint32_t id, uint64_t s, uint64_t e) {
        int r;

        if (type == ZMSG_STATS)
                return report_stats_reply(m, c, id, (uint32_t)s);
        if (type == ZMSG_FORK_DONE) {
                /* s: the fork generation at the FORK_DONE. A FORK_PREPARE
                 * since (the program forks again) set its own pause and
                 * token, which this FORK_DONE's sync, come back late,
                 * must leave alone */
                if (s != mm->fork_gen)
                        return 1;
                mmclient_fork_evented(mm, mm->fork_token_announced);
                /* a fork that failed, or one a daemon adopting us took as
                 * announced and whose event the dead one had read: no
                 * event of it will come (the fault thread is past any:
                 * the sync, or the free serve_lock, mm_sync_now(),
                 * ordered us after it; relaxed) */
                atomic_store_explicit(&mm->fork_announced, false, memory_order_relaxed);
                mm->fork_paused = false;
                evict_pump(&m->core, mm);
                return 1; /* no reply */
        }
        if (type == ZMSG_FORK_PREPARE) {
                /* nothing of ours is in flight, every event and hand-back
                 * so far is handled: the token of this fork counts now,
                 * and so do the pages held (sync_done() answers with them).
                 * Relaxed: the fault thread reads them at the fork's event,
                 * and the client forks only once it has the answer
                 * (mmclient.h) */
                atomic_store_explicit(&mm->fork_held_pages, mmclient_held_pages(mm), memory_order_relaxed);
                atomic_store_explicit(&mm->next_fork_token, mm->fork_token_announced, memory_order_relaxed);
                atomic_store_explicit(&mm->fork_announced, mm->fork_token_announced != 0, memory_order_relaxed);
                if (mm->store)
                        /* before the answer, so before the fork (release:
                         * after everything the store holds now) */
                        atomic_store_explicit(&store_super(mm->store)->fork_announced, mm->fork_token_announced,
                                              memory_order_release);
                return 0;
        }
        if (type == ZMSG_REGISTER)
                return do_register(m, c, mm, id, s, e);
        if (type == ZMSG_REGIONS)
                return regions_reply(c, mm, id, s);
        /* an UNREGISTER takes the range off the list itself (evict.c) */
        r = evict_queue(&m->core, mm, c, id, s, e, type == ZMSG_UNREGISTER);
        return r < 0 ? r : 1;
}

/*
 * FW_SYNC without the round trip: if no fault thread holds serve_lock,
 * every uffd message read so far has been handled (a reader holds it from
 * its read until the message is handled), which is all FW_SYNC waits for.
 * A fault thread that found the lock taken meanwhile left a kick for us,
 * the holder; we cannot read the uffd, so its home thread is asked to.
 * False: a fault thread is busy with this client; take the slow way.
 */
static bool mm_sync_now(MMClient *mm) {
        if (!mm->ft || pthread_mutex_trylock(&mm->serve_lock) != 0)
                return false;
        pthread_mutex_unlock(&mm->serve_lock);
        /* seq_cst: the load after the unlock in events.c service()'s
         * handshake, as its serve_unlock() makes it */
        if (atomic_load_explicit(&mm->kick, memory_order_seq_cst) && fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                log_error("pid %d: cannot wake a fault thread (out of memory)", (int)mmclient_pid(mm));
        return true;
}

/* A range request once the fault thread has caught up with mm: done,
 * and answered unless it answers later itself. */
static void range_answer(Manager *m, Conn *c, MMClient *mm, int type, uint32_t id, uint64_t s, uint64_t e) {
        int r = range_request(m, c, mm, type, id, s, e);
        /* a FORK_PREPARE's answer: 1 + the pages held (0 is what a daemon
         * that does not say gives: unknown; relaxed: stored by
         * range_request() just now, on this thread) */
        int64_t v = r == 0 && type == ZMSG_FORK_PREPARE
                            ? 1 + (int64_t)atomic_load_explicit(&mm->fork_held_pages, memory_order_relaxed)
                            : 0;
        if (r <= 0)
                conn_reply(c, id, r, v);
}

void sync_done(Manager *m, Work *w) {
        Conn *c = conn_find(m, w->v);

        w->mm->syncs_pending--;
        /* dead: our own write (mm_retire()) */
        if (c && c->mm == w->mm && !atomic_load_explicit(&w->mm->dead, memory_order_relaxed))
                range_answer(m, c, w->mm, w->status, w->id, w->a, w->b);
        work_free(w);
}

/* A request's FW_SYNC to mm's fault thread, answered by sync_done(): 1
 * (answered later), or -ENOMEM. */
static int sync_post(MMClient *mm, Conn *c, int type, uint32_t id, uint64_t a, uint64_t b) {
        int r = fault_sync_post(mm, type, id, c->serial, a, b);
        return r < 0 ? r : 1;
}

/*
 * A FORK_PREPARE answered without its round trip through the fault
 * thread: nothing of the client's is in flight, no page handed back waits
 * for the fault thread (evict_quiet()), no sync of an earlier request is
 * on its way back (a FORK_DONE's, whose return would end this fork's
 * pause), no sync page is being swapped in (the fork's child gets a copy
 * of the one in force), and every uffd message read so far is handled
 * (mm_sync_now()): all the FW_SYNC behind them would wait for. A program
 * that forks often (a shell) is not evicted from at that moment nearly
 * always, and saves two wake-ups of ours a fork.
 */
static bool fork_prepare_now(Manager *m, Conn *c, MMClient *mm, uint32_t id) {
        /* acquire: as pump_one()'s look at sync_swap */
        if (mm->syncs_pending || atomic_load_explicit(&mm->sync_swap, memory_order_acquire) || !evict_quiet(mm) ||
            !mm_sync_now(mm))
                return false;
        range_answer(m, c, mm, ZMSG_FORK_PREPARE, id, 0, 0);
        return true;
}

/*
 * zswapctl pageout PID: evict a running process's managed memory, over
 * every client it has (a process may connect more than once). Root may
 * ask for any process, other users for their own. Replied when the last
 * client's pageout is done, with the pages evicted in all. zswapctl
 * pagein PID: the other way, every page held back in the process (for a
 * debugger, a core dump: the kernel shows neither what is held out), and
 * the process out of the automatic policies; replied once all are back,
 * with the pages that were held.
 */
static int do_pageout_pid(Manager *m, Conn *c, const ZMsgPageoutPid *q, bool pagein) {
        uint64_t start = q->addr, end = q->len ? q->addr + q->len : PINDEX_MAX_ADDR;
        PageoutGroup *g;
        bool found = false, allowed = false;

        if (c->role != ZROLE_CONTROL)
                return -EPROTO;
        if (q->pid <= 0 || !page_aligned(q->addr) || !page_aligned(q->len) || end < start || end > PINDEX_MAX_ADDR)
                return -EINVAL;
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                if (mmclient_pid(mm) != q->pid || !mm->conn || atomic_load_explicit(&mm->dead, memory_order_relaxed))
                        continue;
                found = true;
                allowed |= conn_admin(m, c) || c->uid == mm->conn->uid;
        }
        if (!found)
                return -ESRCH;
        if (!allowed)
                return -EPERM;
        g = INJECT_ALLOC(calloc(1, sizeof(*g)));
        if (!g)
                return -ENOMEM;
        g->conn = c;
        g->id = q->hdr.id;
        g->ops = 1; /* ours, until every op is queued: one that finishes at once must not answer */
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                if (mmclient_pid(mm) != q->pid || !mm->conn || mm->nlanes == 0 ||
                    atomic_load_explicit(&mm->dead, memory_order_relaxed))
                        continue;
                if (pagein) {
                        /* what comes back stays: out of every automatic
                         * policy until `zswapctl set --pid PID reclaim yes` */
                        mm->rc.off = true;
                        if (mm->rc.op)
                                mm->rc.op->want = 0;
                }
                int qr = pagein ? evict_queue_pagein(&m->core, mm, g, start, end)
                                : evict_queue_group(&m->core, mm, g, start, end);
                if (qr < 0)
                        log_warn("pid %d: cannot queue a %s: %s", (int)q->pid, pagein ? "pagein" : "pageout",
                                 strerror(-qr));
        }
        if (pagein)
                log_info("pid %d: its pages come back and stay (zswapctl pagein): automatic reclaim off for it",
                         (int)q->pid);
        evict_group_done(&m->core, g, 0);
        return 1;
}

/*
 * The clients of pid the sender may steer: root any, others their own.
 * pid 0: the sender's own client. -ESRCH, -EPERM, or how many there are.
 * (MMClient.dead, here and below, is the manager's own write, mm_retire():
 * relaxed.)
 */
/* c speaks for an address space of its own: a client, or a fork child
 * that took over the one its fork made */
static bool own_client(const Conn *c) {
        return c->mm && (c->role == ZROLE_CLIENT || c->role == ZROLE_CHILD);
}

static int steerable(Manager *m, Conn *c, int32_t pid) {
        int found = 0;
        bool allowed = false;

        if (pid == 0)
                return own_client(c) ? 1 : -ESRCH;
        if (pid < 0)
                return -EINVAL;
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                if (mmclient_pid(mm) != pid || !mm->conn || atomic_load_explicit(&mm->dead, memory_order_relaxed))
                        continue;
                found++;
                allowed |= conn_admin(m, c) || c->uid == mm->conn->uid;
        }
        return !found ? -ESRCH : !allowed ? -EPERM : found;
}

/* Is mm one of the clients a request for pid from c applies to, and may c
 * steer it? Decided per client: two clients of one pid can belong to
 * different users. */
static bool steer_target(Conn *c, MMClient *mm, int32_t pid) {
        if (pid == 0)
                return mm == c->mm;
        return mmclient_pid(mm) == pid && mm->conn && !atomic_load_explicit(&mm->dead, memory_order_relaxed) &&
               (conn_admin(c->m, c) || c->uid == mm->conn->uid);
}

/* zswapctl limit PID SIZE, zswap_set_limit(): applied at the next tick */
static int do_set_limit(Manager *m, Conn *c, const ZMsgLimit *q) {
        int r = steerable(m, c, q->pid);
        if (r < 0)
                return r;
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                if (steer_target(c, mm, q->pid)) {
                        /* said when an operator sets it, or when it comes or
                         * goes; the preload shim's adjustments to what the
                         * process holds unmanaged (about one a second while
                         * it grows) only for debugging */
                        bool news = c->role == ZROLE_CONTROL || !mm->rc.limit_set || !mm->rc.limit != !q->bytes;
                        log_msg(news ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG, "pid %d: resident limit %llu bytes%s",
                                (int)mmclient_pid(mm), (unsigned long long)q->bytes,
                                c->role == ZROLE_CONTROL ? " (zswapctl)" : "");
                        bool same = mm->rc.limit_set && mm->rc.limit == q->bytes;
                        mm->rc.limit = q->bytes;
                        mm->rc.limit_set = true;
                        mm->rc.count_soon = true;
                        if (!same)
                                reclaim_soon(&m->reclaim); /* a new limit: act on it now */
                }
        return 0;
}

/* SET_GROUP: the sender's client joins (limit > 0) or leaves a group of
 * its user's; applied at the next tick */
static int do_set_group(Manager *m, Conn *c, const ZMsgGroup *q) {
        MMClient *mm = c->mm;
        if (!own_client(c))
                return -ENOTCONN;
        if (q->limit && !zgroup_name_valid(q->name, sizeof(q->name)))
                return -EINVAL;
        bool joins = q->limit && strcmp(mm->rc.group, q->name) != 0;
        if (q->limit) {
                memcpy(mm->rc.group, q->name, sizeof(mm->rc.group));
                mm->rc.group_limit = q->limit;
                mm->rc.group_unmanaged = q->unmanaged;
        } else
                mm->rc.group[0] = 0;
        if (joins || !q->limit) {
                mm->rc.group_share = 0;
                mm->rc.group_tick = 0;
        }
        mm->rc.cgroup_read = true; /* its own group, not its cgroup's */
        groups_apply(m, mm);
        mm->rc.count_soon = true;
        /* said once a group, when its first process joins: a build's
         * thousand short processes are one line */
        bool first = joins;
        for (MMClient *x = m->mms; first && x; x = x->next)
                first = x == mm || !mmclient_same_group(x, mm);
        if (first)
                log_info("group %s of uid %u: resident limit %llu bytes for its processes together (pid %d first)",
                         mm->rc.group, (unsigned)mm->uid, (unsigned long long)q->limit, (int)mmclient_pid(mm));
        else if (joins)
                log_debug("pid %d: in group %s", (int)mmclient_pid(mm), mm->rc.group);
        else
                log_debug("pid %d: group %s: limit %llu, unmanaged %llu bytes", (int)mmclient_pid(mm),
                          q->limit ? mm->rc.group : "-", (unsigned long long)q->limit,
                          (unsigned long long)q->unmanaged);
        if (joins || !q->limit)
                reclaim_soon(&m->reclaim); /* the group's shares anew */
        return 0;
}

static void tunable_reply(Conn *c, const ZMsgTunable *q, int status, const char *value) {
        ZMsgTunable rep = { .pid = q->pid, .status = status };
        zmsg_init(&rep.hdr, ZMSG_TUNABLE_REPLY, q->hdr.id, sizeof(rep));
        memcpy(rep.key, q->key, sizeof(rep.key));
        snprintf(rep.value, sizeof(rep.value), "%s", value);
        reply_send(c, &rep, sizeof(rep), NULL, 0);
}

/* Per-client keys: limit, idle_age, recompress_age, reclaim, group. Format
 * or set them on mm. */
static int client_tunable(MMClient *mm, const char *key, const char *value, char *out, size_t len) {
        Tunables t = manager_of(mm->core)->reclaim.tun; /* parse with the daemon's parser, into a scratch copy */
        char err[ZSWAP_TUNABLE_VALUE_MAX];
        int r;

        if (strcmp(key, "limit") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "limit", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "%s", err), r;
                        mm->rc.limit = t.limit;
                        mm->rc.limit_set = true;
                }
                t.limit = reclaim_client_limit(&manager_of(mm->core)->reclaim, mm);
                return tunable_get(&t, "limit", out, len);
        }
        if (strcmp(key, "idle_age") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "idle_age", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "%s", err), r;
                        mm->rc.idle_age_ms = (int64_t)t.idle_age_ms;
                }
                t.idle_age_ms = mm->rc.idle_age_ms >= 0 ? (uint64_t)mm->rc.idle_age_ms : manager_of(mm->core)->reclaim.tun.idle_age_ms;
                return tunable_get(&t, "idle_age", out, len);
        }
        if (strcmp(key, "recompress_age") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "recompress_age", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "%s", err), r;
                        mm->rc.recompress_age_ms = (int64_t)t.recompress_age_ms;
                        mm->rc.recompress_walked_ms = 0; /* walk again now */
                }
                /* in force: the daemon's 0 wins over the client's own */
                t.recompress_age_ms = recompress_age(
                        mm, &(RecompConf){ .age_ms = manager_of(mm->core)->reclaim.tun.recompress_age_ms });
                return tunable_get(&t, "recompress_age", out, len);
        }
        if (strcmp(key, "group") == 0) {
                unsigned n;
                uint64_t res, unm, lim;
                if (value)
                        return snprintf(out, len, "group: set by the process (zswap-run, ZSWAP_GROUP)"), -EPERM;
                if (!reclaim_group_of(&manager_of(mm->core)->reclaim, mm, &n, &res, &unm, &lim))
                        return snprintf(out, len, "none") < 0 ? -EINVAL : 0;
                return snprintf(out, len, "%s: %u processes, %llu bytes managed resident (at the last count) and %llu unmanaged, "
                                "limit %llu bytes", mm->rc.group, n, (unsigned long long)res, (unsigned long long)unm,
                                (unsigned long long)lim) < 0 ? -EINVAL : 0;
        }
        if (strcmp(key, "reclaim") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "keep_clean", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "reclaim: '%.32s' is not yes/no", value), r;
                        mm->rc.off = !t.keep_clean;
                }
                return snprintf(out, len, "%s", mm->rc.off ? "no" : "yes") < 0 ? -EINVAL : 0;
        }
        snprintf(out, len, "%s: not a per-client key (limit, idle_age, recompress_age, reclaim, group)", key);
        return -ENOENT;
}

/*
 * zswapctl set/get. Daemon-wide keys: anyone reads, root sets. Per-client
 * keys (pid != 0): root or the process's own user.
 */
static int do_tunable(Manager *m, Conn *c, const ZMsgTunable *q) {
        char key[ZSWAP_TUNABLE_KEY_MAX + 1] = "", value[ZSWAP_TUNABLE_VALUE_MAX + 1] = "";
        char out[ZSWAP_TUNABLE_VALUE_MAX] = "";
        bool set = q->hdr.type == ZMSG_TUNABLE_SET;
        int r = 0;

        memcpy(key, q->key, sizeof(q->key));
        memcpy(value, q->value, sizeof(q->value));
        if (q->pid != 0) {
                r = steerable(m, c, q->pid);
                if (r < 0) {
                        snprintf(out, sizeof(out), "%s", r == -ESRCH ? "no such client" : "permission denied");
                        tunable_reply(c, q, r, out);
                        return 1;
                }
                r = -ESRCH;
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        if (steer_target(c, mm, q->pid)) {
                                r = client_tunable(mm, key, set ? value : NULL, out, sizeof(out));
                                if (r < 0)
                                        break;
                        }
                if (r == 0 && set) {
                        log_info("pid %d: %s = %s", (int)q->pid, key, out);
                        reclaim_soon(&m->reclaim);
                }
                tunable_reply(c, q, r, out);
                return 1;
        }
        if (strcmp(key, "status") == 0 && !set) {
                reclaim_status(&m->reclaim, out, sizeof(out));
                tunable_reply(c, q, 0, out);
                return 1;
        }
        if (set && !conn_admin(m, c)) {
                tunable_reply(c, q, -EPERM, "permission denied: admin commands need root or group zswap");
                return 1;
        }
        if (set) {
                r = tunable_set(&m->reclaim.tun, key, value, out, sizeof(out));
                if (r == 0) {
                        reclaim_apply(&m->reclaim);
                        reclaim_soon(&m->reclaim);
                }
        }
        if (r == 0)
                r = tunable_get(&m->reclaim.tun, key, out, sizeof(out));
        if (r == -ENOENT && !out[0])
                snprintf(out, sizeof(out), "unknown key '%s'", key);
        if (r == 0 && set)
                log_info("set %s = %s", key, out);
        else if (r < 0 && set)
                log_warn("set %s = %s refused: %s", key, value, out);
        tunable_reply(c, q, r, out);
        return 1;
}

/* Returns < 0 to reply with that error, 0 to reply success, 1 if replied or
 * no reply is due. */
int dispatch(Manager *m, Conn *c, const void *buf, int *fds, size_t nfds) {
        const ZMsgHeader *h = buf;
        MMClient *mm = c->mm;
        /* dead: the manager's own write (mm_retire()), relaxed */
        bool ready = mm && mm->nlanes > 0 && !atomic_load_explicit(&mm->dead, memory_order_relaxed);

        if (c->proving && (h->type == ZMSG_ATTACH || h->type == ZMSG_CHILD_ATTACH || h->type == ZMSG_ADOPT))
                return -EBUSY; /* one at a time */
        switch (h->type) {
        case ZMSG_HELLO:
                return do_hello(m, c, buf);
        case ZMSG_ATTACH:
                return do_attach(m, c, buf, fds, nfds);
        case ZMSG_CHILD_ATTACH:
                return do_child_attach(m, c, buf, fds, nfds);
        case ZMSG_ADOPT:
                return do_adopt(m, c, buf, fds, nfds);
        case ZMSG_PAGEOUT_PID:
        case ZMSG_PAGEIN_PID:
                return do_pageout_pid(m, c, buf, h->type == ZMSG_PAGEIN_PID);
        case ZMSG_SET_LIMIT:
                return do_set_limit(m, c, buf);
        case ZMSG_SET_GROUP:
                return do_set_group(m, c, buf);
        case ZMSG_GROUP_LIMIT:
                if (c->role != ZROLE_CONTROL)
                        return -EPROTO;
                return groups_set_limit(m, c, buf);
        case ZMSG_TUNABLE_SET:
        case ZMSG_TUNABLE_GET:
                return do_tunable(m, c, buf);
        case ZMSG_STATUS:
                return report_status(m, c, buf);
        case ZMSG_CLIENTS:
                return report_clients(m, c, buf);
        case ZMSG_STATS:
                if (((const ZMsgStatsReq *)buf)->scope > ZSWAP_STATS_GLOBAL)
                        return -EINVAL;
                if (ready) {
                        /* counters as of after every event the client caused */
                        if (mm_sync_now(mm))
                                return report_stats_reply(m, c, h->id, ((const ZMsgStatsReq *)buf)->scope);
                        return sync_post(mm, c, h->type, h->id, ((const ZMsgStatsReq *)buf)->scope, 0);
                }
                return report_stats_reply(m, c, h->id, ((const ZMsgStatsReq *)buf)->scope);
        case ZMSG_REGISTER:
        case ZMSG_UNREGISTER:
        case ZMSG_PAGEOUT:
        case ZMSG_REGIONS: {
                const ZMsgRange *rg = buf;
                int r = h->type != ZMSG_REGIONS ? range_check(rg)
                        : rg->len != 0 || !page_aligned(rg->addr) || rg->addr >= PINDEX_MAX_ADDR ? -EINVAL
                                                                                                   : 0;
                if (!ready)
                        return -ENOTCONN;
                if (r < 0)
                        return r;
                /* The client's view of its address space may be ahead of
                 * ours: munmap() returns once the UNMAP event is read, not
                 * once it is handled. Let the fault thread catch up first. */
                if (mm_sync_now(mm))
                        return range_request(m, c, mm, h->type, h->id, rg->addr, rg->addr + rg->len);
                return sync_post(mm, c, h->type, h->id, rg->addr, rg->addr + rg->len);
        }
        case ZMSG_FORK_PREPARE:
                if (!ready)
                        return -ENOTCONN;
                mm->fork_token_announced = ((const ZMsgFork *)buf)->token;
                mm->fork_paused = true;
                mm->fork_paused_at = now_ns();
                mm->fork_gen++;
                mm->fork_reply_id = 0; /* one fork at a time: an older question is not waited for */
                if (fork_prepare_now(m, c, mm, h->id))
                        return 1;
                mm->fork_reply_id = h->id;
                mm->fork_reply_serial = c->serial;
                evict_pump(&m->core, mm);
                return 1;
        case ZMSG_FORK_DONE:
                if (!mm)
                        return 1;
                /* Resume only once the fork's event is handled: fork()
                 * returned once the fault thread *read* it, and that thread
                 * may still be walking our index for the child; a page
                 * planned now would look to it like one in flight at the
                 * fork. A sync orders us after the handling. */
                if (ready && (INJECT(INJ_FORK_DONE_LATE) || !mm_sync_now(mm)) &&
                    sync_post(mm, c, h->type, h->id, mm->fork_gen, 0) > 0)
                        return 1;
                /* at once: the fault thread is past the fork's event
                 * (mm_sync_now()), the client is not ready, or there was
                 * no memory for the sync */
                return range_request(m, c, mm, ZMSG_FORK_DONE, h->id, mm->fork_gen, 0);
        case ZMSG_MOVE_DONE:
                if (!ready || evict_move_done(&m->core, mm, h->id, buf) < 0)
                        return -EPROTO;
                return 1;
        case ZMSG_RELEASE_DONE:
                if (!ready || evict_release_done(&m->core, mm, h->id) < 0)
                        return -EPROTO;
                return 1;
        default:
                return -EPROTO;
        }
}
