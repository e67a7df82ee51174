/*
 * adopt.h: taking a client's store over from a daemon that died (adopt.c).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct Manager Manager;
typedef struct MMClient MMClient;

/* May this daemon take the (mapped, read-only) store old over? 0; -ENOENT
 * if its daemon gave every page back; -EBUSY if it is ours still;
 * -EBADMSG if it fails a check or this daemon cannot read it. why[] says
 * what. */
int adopt_check(Manager *m, uint8_t *old, char *why, size_t len);

/* The old store's range table, checked, in a new array (*ret, free()),
 * with the event its journal holds (store.h) applied: *has_ev says if
 * there was one, *ev is it. Returns the count or -errno. */
int adopt_ranges(uint8_t *old, StoreRange **ret, StoreEvent *ev, bool *has_ev, char *why, size_t len);

/* May mm (staging area, pid and uid set) take over these ranges (the
 * table adopt_live_ranges() left)? As REGISTER would admit them: mapped
 * by nothing but private anonymous writable memory (a part not mapped at
 * all passes: an munmap whose event is pending), outside the staging
 * area, within its user's max_regions and max_registered. Then mm's share of its user's max_pool
 * is set, which adopt_entries() pays from. 0; -EINVAL, -EDQUOT (why[]
 * says what), -ESRCH. Manager thread. */
int adopt_admit(Manager *m, MMClient *mm, const StoreRange *ranges, int n, char *why, size_t len);

/* Copy what old holds for the addresses in ranges into mm (its new store,
 * index and counters; mm's pid and staging area set), each entry first
 * moved or dropped by ev (the journal's event, NULL if none). The objects
 * of its PE_SHARED entries are read from shared (old's shared store,
 * checked by store_check_shared(); NULL: none, and such an entry is
 * bad) and go to mm's shared store if it is in one. *held gets
 * the pages kept. A page that its user's max_pool or the pool bound has
 * no room for is installed in the client instead (resident). 0, -EBADMSG
 * (why[] says what),
 * -ENOSPC/-ENOMEM. old_fd and shared_fd are the stores' files: what they
 * never wrote (holes, store.h StoreData) is not read, and an entry whose
 * object lies in one is bad. */
int adopt_entries(MMClient *mm, uint8_t *old, int old_fd, uint8_t *shared, int shared_fd, const StoreRange *ranges,
                  size_t nranges, const StoreEvent *ev, uint64_t *held, char *why, size_t len);

/* Cut ranges[] (n, sorted) to what is still mapped and registered in the
 * client, unless an address-space event is pending on its uffd. Returns
 * the new count (the array is rewritten in place). */
int adopt_live_ranges(MMClient *mm, StoreRange *ranges, int n);
