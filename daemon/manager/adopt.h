/*
 * adopt.h: taking a client's store over from a daemon that died (adopt.c).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "mmjob.h"
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
 * table adopt_walk() left, which checked they are mapped by nothing but
 * private anonymous writable memory)? As REGISTER would admit them:
 * outside the staging area, within its user's max_regions and
 * max_registered. 0; -EINVAL, -EDQUOT (why[] says what). Manager thread. */
int adopt_admit(Manager *m, MMClient *mm, const StoreRange *ranges, int n, char *why, size_t len);

/*
 * What an adoption reads of its client, and what it copies, made on an
 * mm-job thread (MW_JOB_ADOPT, mmjob.h): the client's smaps and maps, its
 * pagemap at each page the dead daemon left in flight, those pages'
 * staging slots, and the installs (UFFDIO_COPY) of pages with no room;
 * each of them waits for the client's mmap lock, which the client may
 * hold for as long as it likes. The manager fills the first part, sets
 * mm's share of its user's max_pool (which the copies are paid from),
 * and submits it with mm, its staging area, pid and uid set, not served
 * yet; when the job is back, r says how it went.
 *
 * In the job: ranges[] is cut to what is still mapped and registered in
 * the client unless an address-space event is pending on its uffd
 * (adopt_live_ranges()); -EINVAL if a range is mapped by anything but
 * private anonymous writable memory (a part not mapped at all passes: an
 * munmap whose event is pending), -ESRCH if the client's maps cannot be
 * read; then what old holds for those ranges is copied into mm (its new
 * store, index and counters), each entry first moved or dropped by the
 * journal's event. The objects of PE_SHARED entries are read from shared
 * (old's shared store, checked by store_check_shared(); NULL: none, and
 * such an entry is bad) and go to mm's shared store if it is in one. A
 * page that its user's max_pool or the pool bound has no room for is
 * installed in the client instead (resident). old_fd and shared_fd are
 * the stores' files: what they never wrote (holes, store.h StoreData) is
 * not read, and an entry whose object lies in one is bad. r: 0 and held
 * (the pages kept), or -EBADMSG (why[] says what), -EINVAL, -ESRCH,
 * -ENOSPC, -ENOMEM.
 */
typedef struct AdoptWalk {
        MMJobCall call; /* adopt_walk_init() */
        /* the manager's, before */
        uint8_t *old, *shared;
        int old_fd, shared_fd;
        StoreRange *ranges; /* n of them, sorted; room for STORE_RANGES_MAX */
        int n;
        StoreEvent ev; /* the journal's event, if has_ev */
        bool has_ev;
        CodecKind codec;
        int level;
        /* the job's */
        int r;
        uint64_t held;
        char why[160];
} AdoptWalk;

/* w's call is the walk. */
void adopt_walk_init(AdoptWalk *w);

/* Cut ranges[] (n, sorted) to what is still mapped and registered in the
 * client, unless an address-space event is pending on its uffd. Returns
 * the new count (the array is rewritten in place). Reads the client's
 * smaps: an mm-job thread's. */
int adopt_live_ranges(MMClient *mm, StoreRange *ranges, int n);
