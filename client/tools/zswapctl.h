/*
 * zswapctl.h: what the pieces of zswapctl share. zswapctl.c parses the
 * command line and runs one command; zswapctl-conn.c is the control
 * connection (HELLO, request/reply, saying why a request failed);
 * zswapctl-output.c the three output forms' common parts (Field as text
 * or JSON, -o lists); then one file per command or family of commands:
 * zswapctl-status.c, zswapctl-clients.c (with the clients table, which
 * metrics reuses), zswapctl-metrics.c, zswapctl-process.c (pageout,
 * limit, pagein), zswapctl-tunables.c (set, get), zswapctl-units.c
 * (enable, disable), zswapctl-top.c (top). The tool is one thread and
 * depends on common/ only (the wire protocol, the configuration grammar,
 * tunable names), never on libzswap.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

#define EPERM_ADMIN "permission denied: admin commands need root or group zswap"

typedef struct Opts {
        const char *path;    /* the daemon's socket */
        bool json, bytes, no_headings;
        const char *columns; /* -o, NULL: the default ones */
        int32_t pid;         /* --pid, 0: none */
        const char *textfile; /* metrics --textfile: written whole, then renamed into place */
        double delay;        /* top --delay: seconds between frames */
        bool delay_given;
        unsigned long iterations; /* top --iterations: frames, 0: until q */
        const char *sort;    /* top --sort, NULL: evicted */
        const char *unit, *group; /* limit --unit, --group: a group's limit, not a process's */
} Opts;

/* One figure of a read command, in the kind that says how to print it. */
typedef enum Kind {
        K_COUNT, /* a number */
        K_SIZE,  /* bytes */
        K_NS,    /* a duration in ns */
        K_REAL,  /* a rate or ratio (d); may be unknown */
        K_TEXT,
} Kind;

typedef struct Field {
        const char *name;
        Kind kind;
        uint64_t v;
        double d;
        bool unknown;     /* K_REAL: not known (yet): "-", null */
        bool is_signed;   /* K_COUNT: v holds an int64_t */
        const char *text; /* K_TEXT */
} Field;

/* One client as the daemon shows it, with its user's name. */
typedef struct Client {
        ZClientRecord r;
        char user[33];
        char comm[ZSWAP_COMM_MAX];
        char group[ZSWAP_GROUP_NAME_MAX]; /* "-": none */
} Client;

/* The columns of `clients` (zswapctl-clients.c); metrics reads its
 * per-client series through them (client_field()). */
enum {
        COL_PID, COL_UID, COL_USER, COL_COMMAND, COL_REGISTERED, COL_RESIDENT, COL_EVICTED, COL_POOL, COL_RATIO,
        COL_FAULTS, COL_REFAULTS, COL_LIMIT, COL_STAGED, COL_INCOMPRESSIBLE, COL_ID, COL_TIER, COL_GROUP, COL_STRONG, _COL_MAX
};

#define DEFAULT_COLUMNS "PID,USER,COMMAND,REGISTERED,RESIDENT,EVICTED,POOL,RATIO,REFAULTS,LIMIT"

#pragma GCC visibility push(hidden)

/* enable/disable's options */
typedef struct UnitOpts {
        const char *limit;   /* --limit, NULL: none */
        const char *root;    /* --root, NULL: / */
        const char *preload; /* --preload, NULL: the installed shim */
        const char *socket;  /* --socket or $ZSWAP_SOCKET if given, else NULL */
} UnitOpts;

/* ---- zswapctl-units.c ---- */
int cmd_enable(const UnitOpts *u, int argc, char **argv);
bool unit_group_name(const char *arg, char *group, size_t cap);
int cmd_disable(const UnitOpts *u, int argc, char **argv);

/* ---- zswapctl-conn.c ---- */
int ctl_request(int fd, void *msg, size_t len, void *reply, size_t cap);
int ctl_expect(int fd, void *msg, size_t len, void *reply, size_t cap, uint16_t want);
int ctl_connect(const char *path);
int ctl_open(const char *path, char *why, size_t len);
int read_failed(int r, const char *what);
int refused(int r, int32_t pid, bool change, const char *what, const char *msg);
void no_client(long pid);

/* ---- zswapctl-output.c ---- */
void json_string(const char *s);
bool list_has(const char *list, const char *name);
void field_text(const Field *f, bool bytes, char *buf, size_t len);
void field_json(const Field *f);
bool columns_valid(const char *list, const char *const *names, size_t n, const char *what);

/* ---- commands, one file each ---- */
int status_fetch(int fd, ZMsgStatusReply *st);
int cmd_status(const Opts *o);
int clients_fetch(int fd, Client **ret);
Field client_field(const Client *c, int col);
int cmd_clients(const Opts *o);
int cmd_groups(const Opts *o);
int cmd_metrics(const Opts *o);
int cmd_top(const Opts *o);
int32_t parse_pid(const char *s);
int cmd_pageout(const char *path, int argc, char **argv, bool json, bool pagein);
int cmd_limit(const Opts *o, int argc, char **argv);
int cmd_set(const char *path, int32_t pid, int argc, char **argv, bool json);
int cmd_get(const char *path, int32_t pid, int argc, char **argv, bool json);

#pragma GCC visibility pop
