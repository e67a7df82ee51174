/*
 * manager-internal.h: what the manager's own files share, and only they.
 *
 * The manager thread is split by concern, one file each:
 *   loop.c      manager_new(), manager_free(), manager_run(): the fds, the
 *               event loop, signals, the tick, the inbox, the Core's calls up
 *   conn.c      connections: accept, credentials, reading, replies, the end
 *   requests.c  what a client or zswapctl asks once it is one: ranges,
 *               forks, statistics, pageout, limits and tunables; dispatch()
 *   attach.c    how a connection becomes a client: HELLO, ATTACH, ADOPT,
 *               CHILD_ATTACH
 *   clients.c   the client address spaces' life: served, linked, detached,
 *               restored, retired; fork orphans
 *   reload.c    the configuration: built at start, reread on SIGHUP
 *   notify.c    what systemd hears: STATUS= and the watchdog
 *   groups.c    groups by cgroup, and the operator's limits by group name
 * and beside them users.c, report.c, adopt.c, sandbox.c (their headers).
 * Everything here runs on the manager thread. main.c sees manager.h only;
 * the layers below see a Conn as opaque (core.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "manager.h"

/*
 * A control connection. Every field is the manager thread's: it accepts,
 * reads, answers and frees connections, and no other thread ever sees a
 * Conn (work coming back names one by its serial: sync_done()). Set at
 * accept (conn.c, conn_accept()) and constant: m, fd, pid, pidfd, uid,
 * gid, groups, ngroups, serial; the rest as each says.
 */
struct Conn {
        Manager *m;
        int fd;
        int role;          /* ZRole, 0 before HELLO (set once, do_hello()) */
        uint32_t features; /* ZHELLO_F_*, from its HELLO */
        pid_t pid;
        int pidfd;         /* the peer process, taken at connect (SO_PEERPIDFD): identity is this, not pid */
        uid_t uid;
        gid_t gid;
        gid_t *groups;     /* primary and supplementary groups (SO_PEERGROUPS) */
        size_t ngroups;
        bool scm_known;    /* scm_uid, scm_gid: the SCM_CREDENTIALS of its first message (creds_changed()) */
        uid_t scm_uid;     /* (real ids: a later message with others is refused) */
        gid_t scm_gid;
        bool throttled;    /* over its user's request rate: out of epoll until the tick (users.c) */
        MMClient *mm;      /* role CLIENT/CHILD after ATTACH (attach.c, clients.c mm_serve()) */
        bool proving;      /* its ATTACH, ADOPT or CHILD_ATTACH waits for its proof (attach.c) */
        bool dying;        /* set by conn_kill() or a read that ends it; freed by reap_conns() */
        unsigned errors;   /* protocol errors so far (conn_message()) */
        uint64_t serial;   /* unique for the daemon's life: conns are found by it */
        Conn *next;        /* m->conns (conn_accept(), conn_free()) */
};

/* ---- conn.c: connections ---- */

/* Send a reply to a request (manager thread). */
void conn_reply(Conn *c, uint32_t id, int status, int64_t value);
/* Drop a connection after a protocol violation (manager thread). */
void conn_kill(Conn *c, const char *why);
/* The live connection of that serial, or NULL. */
Conn *conn_find(Manager *m, uint64_t serial);
/* Root or a member of the admin group (zswapd.conf [users] admin_group). */
bool conn_admin(Manager *m, Conn *c);

/* ---- groups.c ---- */
/* Groups by cgroup for the clients not yet looked at (each tick). */
void groups_tick(Manager *m);
/* mm's operator limit, from the table, after it joined a group. */
void groups_apply(Manager *m, MMClient *mm);
struct ZMsgGroup;
int groups_set_limit(Manager *m, Conn *c, const struct ZMsgGroup *q);
/* Send msg with fds, unless c is going; a failed send ends c. */
void reply_send(Conn *c, const void *msg, size_t len, const int *fds, size_t nfds);
/* The listening socket is readable: accept every connection waiting. */
void conn_accept(Manager *m);
/* c is readable: read and handle its messages, up to a budget. */
void conn_readable(Manager *m, Conn *c);
/* Unlink, detach its client, close and free c. */
void conn_free(Manager *m, Conn *c);
/* Free every connection that is dying (after each round of events). */
void reap_conns(Manager *m);

/* ---- requests.c, attach.c: requests ---- */

/* A message of c, validated, credentials checked: < 0 to reply with that
 * error, 0 to reply success, 1 if replied or no reply is due. */
int dispatch(Manager *m, Conn *c, const void *buf, int *fds, size_t nfds);
/* MW_SYNC_DONE: answer the request that waited for the fault thread. */
void sync_done(Manager *m, Work *w);
/* MW_JOB_REGISTER: the range is registered (or not): answer. */
void register_done(Manager *m, Work *w);
/* MW_JOB_PROVE: go on with the ATTACH, ADOPT or CHILD_ATTACH that waited
 * for it (attach.c). */
void prove_done(Manager *m, Work *w);
void adopt_walked(Manager *m, Work *w);
/* HELLO, ATTACH, ADOPT, CHILD_ATTACH (attach.c); as dispatch() returns. */
int do_hello(Manager *m, Conn *c, const ZMsgHello *h);
int do_attach(Manager *m, Conn *c, const ZMsgAttach *a, int *fds, size_t nfds);
int do_adopt(Manager *m, Conn *c, const ZMsgAttach *a, int *fds, size_t nfds);
int do_child_attach(Manager *m, Conn *c, const ZMsgChild *ch, int *fds, size_t nfds);

/* ---- clients.c: client address spaces ---- */

void mm_link(Manager *m, MMClient *mm);
/* Serve mm as connection c's client: an id, a fault thread, the list. */
int mm_serve(Manager *m, Conn *c, MMClient *mm);
/* Forget mm: its fault thread stops reading it, our reference goes. */
void mm_retire(Manager *m, MMClient *mm);
/* mm's connection c went away: give a live process its pages back. */
void mm_detach(Manager *m, MMClient *mm, Conn *c);
/* MW_RESTORE_DONE: the end of a restore (mm_detach()'s, or a request's). */
void restore_done(Manager *m, Work *w);
/* MW_JOB_UNREGISTER_ALL: the end of a detach, once its ranges are
 * unregistered. */
void unregister_all_done(Manager *m, Work *w);
/* Once a second: ask whether each orphan's process still exists. */
void tick_orphans(Manager *m);
/* MW_JOB_ALIVE: retire the orphan if its process exited. */
void orphan_probe_done(Manager *m, Work *w);

/* ---- reload.c, notify.c ---- */

/* SIGHUP: reread the configuration file. */
void reload_config(Manager *m);

/* dedups.c: the users' shared stores (daemon/mm/dedup.h) */
/* uid's shared store, or NULL */
Dedup *dedups_find(Manager *m, uid_t uid);
/* mm (its uid, process and store set, not served yet) joins its user's
 * shared store if it may (its library announced features): the store
 * made if need be; else it stays out, and shares nothing */
void dedups_join(Manager *m, MMClient *mm, uint32_t features);
/* Every tick: sweep the tables, forget the stores nobody holds */
void dedups_tick(Manager *m);
/* The bytes of uid's shared store's objects (its max_pool counts them) */
uint64_t dedups_user_bytes(Manager *m, uid_t uid);
void dedups_stats(Manager *m, DedupStats *sum);
void dedups_free(Manager *m);
/* Tell systemd state ("READY=1\n", ...) with STATUS=; with state NULL,
 * STATUS= only, and only if it changed. */
void notify_status(Manager *m, const char *state);
/* Every tick: the watchdog, and the status every few seconds. */
void notify_tick(Manager *m);
