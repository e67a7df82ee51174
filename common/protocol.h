/*
 * protocol.h: the wire protocol between zswapd, libzswap and zswapctl.
 *
 * SOCK_SEQPACKET over a Unix socket; one message per packet; every message
 * is a fixed-size little-endian struct that starts with ZMsgHeader. A
 * message's size must equal the size its type declares (or, for the two
 * variable ones, the size its count implies); anything else is rejected
 * with EPROTO and never reaches the daemon's logic. File descriptors travel
 * with SCM_RIGHTS only on the messages that say so. The client's identity
 * is SO_PEERCRED / SCM_CREDENTIALS, never a field of a message.
 *
 * docs/protocol.md describes each message and the order they come in.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "zswap.h"

#define ZSWAP_PROTO_MAGIC 0x5057535au /* "ZSWP" little-endian */
#define ZSWAP_PROTO_VERSION 1
#define ZSWAP_MSG_MAX 2048     /* no message is larger */
#define ZSWAP_MOVE_RUNS_MAX 64 /* runs in one MOVE command */
#define ZSWAP_BATCH_MAX 512    /* pages in one batch (one staging lane) */

typedef enum ZMsgType {
        /* requests, client (or zswapctl) -> daemon; each gets one reply with the same id */
        ZMSG_HELLO = 1,        /* ZMsgHello; reply ZMsgReply + SCM_RIGHTS /dev/userfaultfd (role CLIENT/CHILD) */
        ZMSG_ATTACH,           /* ZMsgAttach + SCM_RIGHTS uffd [, sync memfd]; reply ZMsgReply + SCM_RIGHTS
                                * the client's store (store.h), which the client keeps */
        ZMSG_REGISTER,         /* ZMsgRange */
        ZMSG_UNREGISTER,       /* ZMsgRange */
        ZMSG_PAGEOUT,          /* ZMsgRange; reply value = pages evicted */
        ZMSG_STATS,            /* ZMsgStatsReq; reply ZMsgStatsReply */
        ZMSG_FORK_PREPARE,     /* ZMsgFork; reply when no eviction is in flight */
        ZMSG_FORK_DONE,        /* ZMsgHeader; no reply; eviction resumes */
        ZMSG_CHILD_ATTACH,     /* ZMsgChild; reply ZMsgReply + SCM_RIGHTS the child's uffd and store */
        ZMSG_PAGEOUT_PID,      /* ZMsgPageoutPid (role CONTROL); reply value = pages evicted */
        ZMSG_SET_LIMIT,        /* ZMsgLimit; reply ZMsgReply */
        ZMSG_TUNABLE_SET,      /* ZMsgTunable; reply ZMsgTunable (ZMSG_TUNABLE_REPLY) */
        ZMSG_TUNABLE_GET,      /* ZMsgTunable; reply ZMsgTunable (ZMSG_TUNABLE_REPLY) */
        ZMSG_STATUS,           /* ZMsgHeader (role CONTROL); reply ZMsgStatusReply */
        ZMSG_CLIENTS,          /* ZMsgClientsReq (role CONTROL); reply ZMsgClientsReply */
        ZMSG_ADOPT,            /* ZMsgAttach + SCM_RIGHTS uffd, store [, sync memfd] (role CLIENT), after
                                * the daemon that served them died; reply ZMsgReply, value = pages the
                                * store holds. -EBUSY: that daemon still owns them, ask again later;
                                * -ENOENT: it gave every page back (attach anew); -EBADMSG: the store
                                * failed a check (restore from it yourself) */
        ZMSG_REGIONS,          /* ZMsgRange, addr = where to start, len 0 (role CLIENT); reply
                                * ZMsgRegionsReply: the client's managed memory as the daemon has it */
        ZMSG_SET_GROUP,        /* ZMsgGroup (role CLIENT or CHILD): the sender joins a group whose
                                * members share one resident limit; reply ZMsgReply */
        ZMSG_PAGEIN_PID,       /* ZMsgPageoutPid (role CONTROL): every page held for process pid back
                                * in it, and it out of the automatic policies; reply value = pages
                                * that were held */
        ZMSG_GROUP_LIMIT,      /* ZMsgGroup (role CONTROL, admin): every client in a group of that
                                * name, now and later, under limit together (0: their own again);
                                * unmanaged unused (0); reply value = clients in it now */

        /* replies, daemon -> requester */
        ZMSG_REPLY = 64,       /* ZMsgReply */
        ZMSG_STATS_REPLY,      /* ZMsgStatsReply */
        ZMSG_TUNABLE_REPLY,    /* ZMsgTunable: status, and the value or an error text */
        ZMSG_STATUS_REPLY,     /* ZMsgStatusReply */
        ZMSG_CLIENTS_REPLY,    /* ZMsgClientsReply */
        ZMSG_REGIONS_REPLY,    /* ZMsgRegionsReply */

        /* commands, daemon -> agent thread; answered by the *_DONE below */
        ZMSG_MOVE = 128,       /* ZMsgMove (variable: nruns) */
        ZMSG_RELEASE,          /* ZMsgRelease */

        /* agent -> daemon */
        ZMSG_MOVE_DONE = 192,  /* ZMsgMoveDone */
        ZMSG_RELEASE_DONE,     /* ZMsgRelease */
} ZMsgType;

/* A reply a library request waits for (not a daemon command). */
static inline bool zmsg_is_reply(uint16_t type) {
        return type == ZMSG_REPLY || type == ZMSG_STATS_REPLY || type == ZMSG_REGIONS_REPLY;
}

/* The name of every mapping libzswap makes for itself (its client, its
 * lists, its scratch: [anon:zswap] in /proc/PID/maps). The library's agent
 * touches that memory while the daemon may be gone; managed, it could
 * fault on it with nobody to serve the fault. The daemon refuses to
 * register it. */
#define ZSWAP_OWN_NAME "zswap"

typedef struct ZMsgHeader {
        uint32_t magic;
        uint16_t version;
        uint16_t type;
        uint32_t id;   /* request id, echoed by the reply; batch id for MOVE */
        uint32_t size; /* whole message, header included */
} ZMsgHeader;

typedef enum ZRole {
        ZROLE_CLIENT = 1,  /* a process handing memory over (libzswap) */
        ZROLE_CONTROL = 2, /* zswapctl: stats and admin only */
        ZROLE_CHILD = 3,   /* a forked child taking over the uffd the daemon got from FORK */
} ZRole;

typedef struct ZMsgHello {
        ZMsgHeader hdr;
        uint32_t role;
        uint32_t features; /* ZHELLO_F_*: what the sender's library understands; 0 from an older one */
} ZMsgHello;
/* The library decodes the strong tier's zstd objects (pentry.h PE_STRONG)
 * when it restores itself from its store: without it the daemon stores
 * none for that client (a program still running an older library after
 * the daemon was upgraded) */
#define ZHELLO_F_STRONG 1u
/* The library decodes objects made with its client's zstd dictionary
 * (pentry.h PE_DICT; the store's dictionary, version 3): without it the
 * daemon trains none for that client */
#define ZHELLO_F_DICT 2u
/* The library keeps its user's shared store (pentry.h PE_SHARED; the
 * descriptor after its store's in the replies to ATTACH, ADOPT and
 * CHILD_ATTACH), hands it back with ADOPT (after the sync page's) and
 * restores from it: without it the daemon shares none of its pages */
#define ZHELLO_F_SHARED 4u

typedef struct ZMsgAttach {
        ZMsgHeader hdr;
        uint64_t staging_addr;  /* the agent's staging area (UFFDIO_MOVE destination) */
        uint64_t staging_len;
        uint64_t fork_token;    /* ADOPT: the token of the library's last fork (its
                                 * FORK_PREPARE may have gone to the dead daemon); 0: none */
} ZMsgAttach;

typedef struct ZMsgChild {
        ZMsgHeader hdr;
        uint64_t fork_token;      /* the token the child inherited */
        uint64_t reserved;        /* 0 */
        uint64_t staging_addr;    /* the inherited client's staging area: names the
                                   * client when the process has several */
} ZMsgChild;

/* FORK_PREPARE: the token the child of this fork will name at
 * CHILD_ATTACH (64 random bits, never 0). In the message, not read from
 * the client's memory: no daemon thread reads what a client may make it
 * wait for (daemon/util/memread.h). */
typedef struct ZMsgFork {
        ZMsgHeader hdr;
        uint64_t token;
} ZMsgFork;

typedef struct ZMsgRange {
        ZMsgHeader hdr;
        uint64_t addr;
        uint64_t len;
} ZMsgRange;

/* Evict the managed memory of process pid in [addr, addr+len) (len 0: all
 * of it), over every client that process has. Root, or the process's own
 * user. */
typedef struct ZMsgPageoutPid {
        ZMsgHeader hdr;
        int32_t pid;
        uint32_t reserved;
        uint64_t addr;
        uint64_t len;
} ZMsgPageoutPid;

/* Resident limit of a client (reclaim keeps its resident managed memory
 * under it). pid 0: the sender's own client (role CLIENT); else every
 * client of process pid (root, or the process's own user). bytes 0: none. */
typedef struct ZMsgLimit {
        ZMsgHeader hdr;
        int32_t pid;
        uint32_t reserved;
        uint64_t bytes;
} ZMsgLimit;

#define ZSWAP_TUNABLE_KEY_MAX 32
#define ZSWAP_TUNABLE_VALUE_MAX 160
/* Set or read a run-time tunable (docs/reclaim.md lists them). pid 0: the
 * daemon-wide value (set: root only); else the per-client override for
 * every client of process pid (keys "limit", "idle_age", "reclaim"). key
 * and value are NUL-terminated within their arrays. The reply carries the
 * value now in force, or on error (status < 0) a message saying why. */
typedef struct ZMsgTunable {
        ZMsgHeader hdr;
        int32_t pid;
        int32_t status; /* replies only */
        char key[ZSWAP_TUNABLE_KEY_MAX];
        char value[ZSWAP_TUNABLE_VALUE_MAX];
} ZMsgTunable;

typedef struct ZMsgStatsReq {
        ZMsgHeader hdr;
        uint32_t scope; /* enum zswap_stats_scope */
        uint32_t reserved;
} ZMsgStatsReq;

typedef struct ZMsgReply {
        ZMsgHeader hdr;
        int32_t status; /* 0 or -errno */
        uint32_t reserved;
        int64_t value;
} ZMsgReply;

typedef struct ZMsgStatsReply {
        ZMsgHeader hdr;
        int32_t status;
        uint32_t reserved;
        struct zswap_stats stats;
} ZMsgStatsReply;

/*
 * zswapctl status: the global counters and what only the daemon as a whole
 * knows. Fault latency is the time from the fault thread's read of a page
 * fault to the end of the UFFDIO_COPY that resolved it, over every fault
 * served with content the daemon held (zero fills are not counted), since
 * the daemon started. lat_le[i] counts those of at most 2^(10+i) ns
 * (1.024 us .. 8.6 s), cumulative like a Prometheus histogram; quantiles are
 * the upper bound of their bucket (1/8 of a power of two wide: within
 * 12.5 %), never above lat_max_ns. Rates: the counters' growth over the
 * last rate_window_ms (1-5 s; 0 right after start: no rate yet).
 */
#define ZSWAP_LAT_LE_MIN_SHIFT 10 /* lat_le[0]: <= 2^10 ns */
#define ZSWAP_LAT_LE_N 24
#define ZSWAP_CODEC_NAME_MAX 16
/* ZMsgStatusReply.fault_service: the fault threads' wake-up and poll, as
 * the daemon chose them (daemon/fault/calibrate.h) */
#define ZSTATUS_FAULT_KNOWN (1u << 31)   /* the daemon filled the field */
#define ZSTATUS_FAULT_WAKE_ONE (1u << 30) /* a fault wakes one thread, not all */
#define ZSTATUS_FAULT_HOME (1u << 29)    /* each client served by its home thread only */
#define ZSTATUS_FAULT_SPIN_MASK 0xffffu  /* microseconds of polling after a fault */

typedef struct ZMsgStatusReply {
        ZMsgHeader hdr;
        int32_t status;
        uint32_t reserved;
        struct zswap_stats stats;          /* as ZMSG_STATS, scope GLOBAL */
        char codec[ZSWAP_CODEC_NAME_MAX];  /* "lz4", "zstd"; NUL-terminated */
        int32_t level;                     /* as configured; 0: the codec's default */
        uint32_t fault_threads;
        uint32_t workers;
        uint32_t fault_service;            /* ZSTATUS_FAULT_*: how faults are served; 0 from a daemon that does not say */
        uint64_t pool_bound;               /* bytes the pool may take, 0: no bound */
        uint64_t protocol_errors;          /* malformed messages since start */
        uint64_t rate_window_ms;
        uint64_t rate_evictions;           /* pages evicted during the window */
        uint64_t rate_faults;              /* faults served during the window */
        uint64_t lat_count;                /* faults timed */
        uint64_t lat_sum_ns;
        uint64_t lat_p50_ns, lat_p90_ns, lat_p99_ns, lat_p999_ns;
        uint64_t lat_max_ns;
        uint64_t lat_le[ZSWAP_LAT_LE_N];
        /* the second tier (daemon/tier/tier.h); tier_state -1: none configured */
        int32_t tier_state;
        uint32_t reserved3;
        char tier_backing[128];            /* what it is, as the log says it */
        uint64_t tier_capacity, tier_used_bytes, tier_pages, tier_bytes;
        uint64_t tier_written, tier_writes, tier_written_pages;
        uint64_t tier_reads, tier_read_bytes, tier_prefetched;
        uint64_t tier_read_errors, tier_write_errors, tier_corrupt, tier_full_events, tier_reconnects;
        /* times a client's agent left a page move unfinished and the
         * daemon revoked it to read that client's uffd (page-lifecycle.md) */
        uint64_t moves_revoked;
        /* fresh pages mapped to the zero page after a first touch, each
         * a fault the program did not take (serve.c zero_ahead()) */
        uint64_t zero_ahead;
        /* write tracking (reclaim.md): write scans of a client made, and
         * zones that sat one out (densely written: left unprotected) */
        uint64_t write_scans, write_zones_out;
        /* pool compaction (pool.h): passes that emptied chunks, objects
         * moved, bytes of chunk memory given back */
        uint64_t compactions, compact_moved, compact_freed;
        /* pages brought back ahead of use (reclaim.md, "Refill") */
        uint64_t refilled;
        /* the strong tier (reclaim.md, "Recompression"): its objects in
         * the pool and their bytes (of stored_pages and compressed_bytes);
         * pages recompressed since start, the pool bytes that saved, the
         * CPU time it took; incompressible pages the strong codec stored.
         * Its settings: recompress_age (0: off) and the zstd level */
        uint64_t strong_pages, strong_bytes;
        uint64_t recompressed, recompress_saved, recompress_cpu_ns, strong_rescued;
        uint64_t recompress_age_ms;
        int32_t recompress_level;
        uint32_t reserved4;
        /* pages lost because their pool object failed to decompress
         * (poisoned: SIGBUS on access), as tier_corrupt for the tier */
        uint64_t pool_corrupt;
        /* dictionaries (docs/reclaim.md "Dictionaries"): clients with one
         * and the bytes they take in the pool; objects made with one and
         * their bytes (of strong_pages, strong_bytes); dictionaries
         * trained and kept, refused, and the training's CPU time */
        uint64_t dicts, dict_mem, dict_pages, dict_bytes;
        uint64_t dicts_trained, dicts_refused, dict_train_cpu_ns;
        /* the users' shared stores (docs/reclaim.md "Deduplication"):
         * pages whose entry names a shared object (of stored_pages), the
         * objects and their compressed bytes, the stores' chunk memory
         * (in pool_bytes), pages that found their object there, objects
         * stored, objects let go when no entry named them any more */
        uint64_t dedup_pages, dedup_objects, dedup_bytes, dedup_pool_bytes;
        uint64_t dedup_hits, dedup_stored, dedup_swept;
        /* pages a fault brought back because they had faulted after it
         * before (docs/design.md "Fault history"; of stats.prefetches) */
        uint64_t history_prefetched;
        /* faults that followed a page whose history was sure: the page it
         * foresaw, or another (chains are followed only while most are
         * right) */
        uint64_t history_right, history_wrong;
        /* fault threads held in a call into a client (its mmap lock
         * taken: docs/security.md): calls that lasted long enough for
         * another thread to take the work handed to the held one, and the
         * items taken (fault/work.c work_steal()) */
        uint64_t calls_held, work_taken;
} ZMsgStatusReply;

/*
 * zswapctl clients: one record per client (a connection that attached
 * memory), in the order of their ids. Paged: ask with after = 0, then with
 * after = the last record's id while the reply says more. A client that
 * comes or goes between two pages is listed or not, never twice. Root (and
 * the admin group) see every client, other users only their own.
 */
#define ZSWAP_CLIENTS_PER_MSG 8
#define ZSWAP_COMM_MAX 16
#define ZSWAP_GROUP_NAME_MAX 64 /* a group's name and its NUL (SET_GROUP) */
/* the characters of a group's name */
#define ZSWAP_GROUP_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@-"
typedef struct ZMsgClientsReq {
        ZMsgHeader hdr;
        uint64_t after; /* list clients with a larger id */
} ZMsgClientsReq;

typedef struct ZClientRecord {
        uint64_t id;                   /* unique for the daemon's life */
        int32_t pid;
        uint32_t uid;                  /* (uint32_t)-1: not known */
        char comm[ZSWAP_COMM_MAX];     /* /proc/PID/comm as the daemon read it; "" if it could not */
        uint64_t registered_bytes;
        uint64_t resident_bytes;       /* as of the last reclaim measure (<= 100 ms old) */
        uint64_t stored_pages;         /* held compressed */
        uint64_t same_pages;           /* held as a fill value */
        uint64_t staged_pages;         /* moved out, not yet compressed */
        uint64_t incompressible_pages; /* found incompressible, kept resident */
        uint64_t compressed_bytes;     /* pool bytes of its pages (object sizes) */
        uint64_t faults;
        uint64_t refaults;
        uint64_t limit_bytes;          /* resident limit in force, 0: none */
        uint64_t tier_pages;           /* of stored_pages, those on the second tier */
        uint64_t tier_bytes;           /* their compressed bytes there (compressed_bytes has their stubs) */
        char group[ZSWAP_GROUP_NAME_MAX]; /* the group it shares its limit with (SET_GROUP); "": none */
        uint64_t group_limit;          /* that group's limit, 0: none */
        uint64_t strong_pages;         /* of stored_pages, those of the strong tier in the pool (zstd) */
        uint64_t strong_bytes;         /* their compressed bytes (of compressed_bytes) */
        uint64_t recompressed;         /* pages recompressed since it attached */
        uint64_t recompress_age_ms;    /* its recompress_age in force, 0: off */
} ZClientRecord;

/* SET_GROUP: the sender's client joins the group `name` of its user (the
 * processes one zswap-run started, a systemd unit's), whose members'
 * managed resident memory is kept under `limit` less what they hold
 * unmanaged, together, as a cgroup's memory.high keeps a service's
 * (docs/reclaim.md, "Groups"). `unmanaged`: what this process holds that
 * the daemon does not manage (its stack, small and locked mappings),
 * sent again when it changes. name: 1-63 of [A-Za-z0-9._:@-], NUL
 * after; limit 0 leaves the group. */
typedef struct ZMsgGroup {
        ZMsgHeader hdr;
        uint64_t limit;
        uint64_t unmanaged;
        char name[ZSWAP_GROUP_NAME_MAX];
} ZMsgGroup;

/* REGIONS: the client's memory the daemon manages (what REGISTER took,
 * less what munmap(), mremap() or UNREGISTER took away since, moved where
 * mremap() moved it), in address order from the address asked on, after
 * every event of the client read so far was handled. The preload shim
 * asks when the sync page's regions_gen changed (zsync.h), so that a
 * mapping made at an address the daemon let go of is handed over again. */
#define ZSWAP_REGIONS_PER_MSG 120
typedef struct ZMsgRegionsReply {
        ZMsgHeader hdr;
        int32_t status;
        uint32_t count;                /* spans used */
        uint64_t next;                 /* ask again from here for more; 0: that was all */
        struct {
                uint64_t start, end;
        } span[ZSWAP_REGIONS_PER_MSG];
} ZMsgRegionsReply;
_Static_assert(sizeof(ZMsgRegionsReply) <= ZSWAP_MSG_MAX, "a REGIONS reply fits a message");

typedef struct ZMsgClientsReply {
        ZMsgHeader hdr;
        int32_t status;
        uint32_t count;                /* records used */
        uint32_t more;                 /* 1: ask again with after = rec[count - 1].id */
        uint32_t reserved;
        ZClientRecord rec[ZSWAP_CLIENTS_PER_MSG];
} ZMsgClientsReply;
_Static_assert(sizeof(ZMsgClientsReply) <= ZSWAP_MSG_MAX, "a CLIENTS reply fits a message");

typedef struct ZMoveRun {
        uint64_t addr;   /* first page in the client */
        uint32_t npages; /* pages, moved to consecutive slots */
        uint32_t reserved;
} ZMoveRun;

typedef struct ZMsgMove {
        ZMsgHeader hdr;
        uint32_t slot0;  /* first staging slot of the batch */
        uint32_t npages; /* sum of runs[].npages, <= ZSWAP_BATCH_MAX */
        uint32_t nruns;  /* <= ZSWAP_MOVE_RUNS_MAX */
        uint32_t reserved;
        ZMoveRun runs[ZSWAP_MOVE_RUNS_MAX];
} ZMsgMove;

typedef struct ZMsgMoveDone {
        ZMsgHeader hdr;
        uint32_t npages;
        uint32_t errors;                         /* pages left in place after an error */
        uint64_t moved[ZSWAP_BATCH_MAX / 64];    /* bit i: page i of the batch moved */
} ZMsgMoveDone;

typedef struct ZMsgRelease {
        ZMsgHeader hdr;
        uint32_t slot0;
        uint32_t nslots;
} ZMsgRelease;

/* Size a message of this type must have; 0 for unknown types. For ZMSG_MOVE
 * the size depends on nruns: use zmsg_validate(). */
size_t zmsg_expected_size(uint16_t type);

/* Fill a header. */
void zmsg_init(ZMsgHeader *h, uint16_t type, uint32_t id, size_t size);

/* Check magic, version, size against the type. Returns 0 or -EPROTO. */
int zmsg_validate(const void *buf, size_t len);

/* Byte size of a MOVE message with nruns runs. */
static inline size_t zmsg_move_size(uint32_t nruns) {
        return offsetof(ZMsgMove, runs) + (size_t)nruns * sizeof(ZMoveRun);
}

/* The most fds one message can carry (the kernel's SCM_MAX_FD). */
#define ZMSG_FDS_MAX 253

/* Whether name is a group's name: 1 to ZSWAP_GROUP_NAME_MAX - 1 of
 * ZSWAP_GROUP_NAME_CHARS, its NUL within the first cap bytes. */
bool zgroup_name_valid(const char *name, size_t cap);
/* The group of systemd unit `unit`'s processes (cap >= ZSWAP_GROUP_NAME_MAX):
 * "unit:NAME", or for a name too long or with characters a group name has
 * not, its first part made plain and a hash of the whole. What `zswapctl
 * enable` puts in ZSWAP_GROUP, and the daemon's group of a process whose
 * cgroup is that unit's. */
void zgroup_of_unit(const char *unit, char *out, size_t cap);

/*
 * Send one message with up to ZMSG_FDS_MAX fds. Non-blocking sockets return -EAGAIN
 * when the peer's queue is full. Returns 0 or -errno.
 */
int zmsg_send(int fd, const void *msg, size_t len, const int *fds, size_t nfds);

/*
 * Receive one message into buf (cap >= ZSWAP_MSG_MAX). Received fds go to
 * fds[] (up to *nfds, which is updated); any beyond that are closed. If
 * sender is not NULL and the socket has SO_PASSCRED, it gets the message's
 * SCM_CREDENTIALS: the sender's pid, real uid and real gid when it sent it
 * (pid 0 and uid, gid -1 if none came). Returns the message length, 0 on
 * EOF, -EMSGSIZE for a truncated message (fds closed), or -errno.
 */
struct ucred;
ssize_t zmsg_recv(int fd, void *buf, size_t cap, int *fds, size_t *nfds, struct ucred *sender);

/*
 * As zmsg_recv(), for a receiver that must decide how each fd is closed
 * (the daemon: the last close of a client's file may wait, closer.c): fds
 * has room for ZMSG_FDS_MAX, so the kernel never drops one of them in
 * this thread, and no fd is closed here. A truncated message (-EMSGSIZE)
 * returns its fds too.
 */
ssize_t zmsg_recv_all(int fd, void *buf, size_t cap, int *fds, size_t *nfds, struct ucred *sender);
