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
        ZMSG_ATTACH,           /* ZMsgAttach + SCM_RIGHTS uffd; reply ZMsgReply */
        ZMSG_REGISTER,         /* ZMsgRange */
        ZMSG_UNREGISTER,       /* ZMsgRange */
        ZMSG_PAGEOUT,          /* ZMsgRange; reply value = pages evicted */
        ZMSG_STATS,            /* ZMsgStatsReq; reply ZMsgStatsReply */
        ZMSG_FORK_PREPARE,     /* ZMsgHeader; reply when no eviction is in flight */
        ZMSG_FORK_DONE,        /* ZMsgHeader; no reply; eviction resumes */
        ZMSG_CHILD_ATTACH,     /* ZMsgChild; reply ZMsgReply + SCM_RIGHTS the child's uffd */
        ZMSG_PAGEOUT_PID,      /* ZMsgPageoutPid (role CONTROL); reply value = pages evicted */
        ZMSG_SET_LIMIT,        /* ZMsgLimit; reply ZMsgReply */
        ZMSG_TUNABLE_SET,      /* ZMsgTunable; reply ZMsgTunable (ZMSG_TUNABLE_REPLY) */
        ZMSG_TUNABLE_GET,      /* ZMsgTunable; reply ZMsgTunable (ZMSG_TUNABLE_REPLY) */

        /* replies, daemon -> requester */
        ZMSG_REPLY = 64,       /* ZMsgReply */
        ZMSG_STATS_REPLY,      /* ZMsgStatsReply */
        ZMSG_TUNABLE_REPLY,    /* ZMsgTunable: status, and the value or an error text */

        /* commands, daemon -> agent thread; answered by the *_DONE below */
        ZMSG_MOVE = 128,       /* ZMsgMove (variable: nruns) */
        ZMSG_RELEASE,          /* ZMsgRelease */

        /* agent -> daemon */
        ZMSG_MOVE_DONE = 192,  /* ZMsgMoveDone */
        ZMSG_RELEASE_DONE,     /* ZMsgRelease */
} ZMsgType;

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
        uint32_t reserved;
} ZMsgHello;

typedef struct ZMsgAttach {
        ZMsgHeader hdr;
        uint64_t staging_addr;  /* the agent's staging area (UFFDIO_MOVE destination) */
        uint64_t staging_len;
        uint64_t fork_token_addr; /* where the library keeps its fork token (uint64_t) */
} ZMsgAttach;

typedef struct ZMsgChild {
        ZMsgHeader hdr;
        uint64_t fork_token;      /* the token the child inherited */
        uint64_t fork_token_addr;
        uint64_t staging_addr;    /* the inherited client's staging area: names the
                                   * client when the process has several */
} ZMsgChild;

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

/*
 * Send one message with up to 4 fds. Non-blocking sockets return -EAGAIN
 * when the peer's queue is full. Returns 0 or -errno.
 */
int zmsg_send(int fd, const void *msg, size_t len, const int *fds, size_t nfds);

/*
 * Receive one message into buf (cap >= ZSWAP_MSG_MAX). Received fds go to
 * fds[] (up to *nfds, which is updated); any beyond that are closed. If
 * sender_pid is not NULL and the socket has SO_PASSCRED, it gets the sender's
 * pid (0 if none came). Returns the message length, 0 on EOF, -EMSGSIZE for
 * a truncated message (fds closed), or -errno.
 */
ssize_t zmsg_recv(int fd, void *buf, size_t cap, int *fds, size_t *nfds, pid_t *sender_pid);
