/*
 * users.h: per-user admission and limits ([users] and [user:NAME] of
 * zswapd.conf(5)), so that no user's clients can exhaust the daemon for
 * the others.
 *
 * A UserState exists for every non-root user with a connection or a
 * client; it holds what the limits are checked against: connections,
 * regions, registered bytes and pool bytes of all the user's clients
 * together, and a token bucket of requests. Manager thread only; the one
 * thing other threads see is MMClient.quota_full, which the workers read
 * before storing a page.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "manager.h"

typedef struct UserState {
        uid_t uid;
        UserLimits lim;         /* config_user_limits() as of the last reload */
        double tokens;          /* requests it may make now (max_requests per second, burst 1 s) */
        uint64_t refill_ms;
        uint64_t pool_bytes;    /* its clients' compressed bytes, as of the last tick */
        bool pool_full;
        uint64_t throttled;     /* times its connections were paused for the request rate */
        uint64_t refused;       /* requests refused for a quota */
        struct UserState *next;
} UserState;

/* The state of uid, created if need be (NULL: out of memory). */
UserState *users_get(Manager *m, uid_t uid);

/* May a new connection of c's user be accepted (max_connections)? */
bool users_may_connect(Manager *m, uid_t uid);

/* Count one request of c against its user's rate; false if the connection
 * must pause until the next tick (it has been taken out of epoll). */
bool users_take_request(Manager *m, Conn *c);

/* Would registering len more bytes in one more region put mm's user over
 * its max_regions or max_registered? 0 or -EDQUOT (logged). */
int users_check_register(Manager *m, MMClient *mm, uint64_t len);

/* Would taking over a store's ranges (regions of bytes in all) put mm's
 * user over its max_regions or max_registered? mm is not in the manager's
 * list yet. 0 or -EDQUOT (logged). */
int users_check_adopt(Manager *m, MMClient *mm, uint64_t regions, uint64_t bytes);

/* Pool bytes uid's clients may still take under its max_pool, counted
 * now (QUOTA_NONE: no max_pool, or root). Manager thread. */
int64_t users_pool_left(Manager *m, uid_t uid);


/* A client's default resident limit from its user's rules (0: none). */
uint64_t users_default_limit(Manager *m, uid_t uid);

/* A client joins the manager's list (mm->uid set): its default limit and
 * its share of its user's max_pool, before its first pageout. */
void users_link(Manager *m, MMClient *mm);

/* Every tick: refill the buckets, resume paused connections, sum the
 * pool bytes and set quota_full, forget users with nothing left. */
void users_tick(Manager *m);
/* The bound of uid's forked children not attached yet (its
 * max_connections; 0: none, root), for MMClient.orphans_max. */
uint32_t users_orphans_max(Manager *m, uid_t uid);
/* Fork child mm attached or exited: no longer counted for its user. */
void users_orphan_gone(Manager *m, MMClient *mm);
/* The daemon exits: nothing is held for the bound any more. */
void users_orphans_release(Manager *m);

/* After the [users] rules changed (reload): every user's limits anew. */
void users_apply(Manager *m);

void users_free(Manager *m);
