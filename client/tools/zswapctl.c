/*
 * zswapctl.c: look at and steer a running zswapd.
 *
 * Speaks the control role of the protocol over its own connection, with
 * synchronous request/reply; it never registers memory. Tunables travel as
 * text and the daemon parses them (daemon/tunables.c), so the tool knows
 * only their names (common/tunable-keys.h); what it parses itself (pids,
 * `limit`'s size) it parses with the daemon's grammar (common/conf.h), to
 * refuse nonsense before connecting.
 *
 * Every read command prints one of three forms from the same figures:
 * text for people (sizes in K/M/G unless --bytes, latencies in us/ms),
 * JSON (--json: raw numbers, sizes in bytes, times in ns, null where a
 * figure is not known yet) and, for `metrics`, the Prometheus text format.
 * `clients` is a table like zramctl's: -o picks the columns, --no-headings
 * drops the header. Exit status: 0 done, 1 refused or failed (the message
 * says what to do), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf.h"
#include "macro.h"
#include "protocol.h"
#include "tunable-keys.h"
#include "util.h"

#ifndef ZSWAP_VERSION
#define ZSWAP_VERSION "unknown"
#endif

#define EPERM_ADMIN "permission denied: admin commands need root or group zswap"

typedef struct Opts {
        const char *path;    /* the daemon's socket */
        bool json, bytes, no_headings;
        const char *columns; /* -o, NULL: the default ones */
        int32_t pid;         /* --pid, 0: none */
} Opts;

static int ctl_request(int fd, void *msg, size_t len, void *reply, size_t cap) {
        ZMsgHeader *h = msg;
        ssize_t n;
        int r = zmsg_send(fd, msg, len, NULL, 0);
        if (r < 0)
                return r;
        n = zmsg_recv(fd, reply, cap, NULL, NULL, NULL);
        if (n <= 0)
                return n == 0 ? -ECONNRESET : (int)n;
        if (zmsg_validate(reply, (size_t)n) < 0 || ((ZMsgHeader *)reply)->id != h->id)
                return -EPROTO;
        /* TUNABLE_REPLY keeps its status after the pid; any other refusal
         * (e.g. an older daemon's -EPROTO) is a plain REPLY */
        if (((ZMsgHeader *)reply)->type == ZMSG_TUNABLE_REPLY)
                return ((ZMsgTunable *)reply)->status;
        return ((ZMsgReply *)reply)->status;
}

/* The reply must be of type want (a plain REPLY with status 0 is not). */
static int ctl_expect(int fd, void *msg, size_t len, void *reply, size_t cap, uint16_t want) {
        int r = ctl_request(fd, msg, len, reply, cap);
        if (r == 0 && ((ZMsgHeader *)reply)->type != want)
                return -EPROTO;
        return r;
}

static void human(uint64_t b, char *buf, size_t len) {
        const char *u[] = { "B", "K", "M", "G", "T" };
        double v = (double)b;
        int i = 0;
        while (v >= 1024 && i < 4) {
                v /= 1024;
                i++;
        }
        snprintf(buf, len, i ? "%.1f%s" : "%.0f%s", v, u[i]);
}

/* A duration in ns for people: 850ns, 12.3us, 4.1ms, 1.20s. */
static void human_ns(uint64_t ns, char *buf, size_t len) {
        if (ns < 1000)
                snprintf(buf, len, "%lluns", (unsigned long long)ns);
        else if (ns < 1000000)
                snprintf(buf, len, "%.1fus", (double)ns / 1e3);
        else if (ns < 1000000000)
                snprintf(buf, len, "%.1fms", (double)ns / 1e6);
        else
                snprintf(buf, len, "%.2fs", (double)ns / 1e9);
}

static void json_string(const char *s) {
        putchar('"');
        for (; *s; s++)
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if ((unsigned char)*s < 0x20)
                        printf("\\u%04x", *s);
                else
                        putchar(*s);
        putchar('"');
}

/* A control connection that said HELLO, or -1 after saying why not. */
static int ctl_connect(const char *path) {
        int fd = unix_connect(path);
        ZMsgHello h = { .role = ZROLE_CONTROL };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        uid_t peer = 0;

        /* nothing is sent to a listener that is not root nor the uid
         * $ZSWAP_DAEMON_UID names: whoever could write the socket's
         * directory could be listening there (common/util.c) */
        if (fd >= 0 && unix_peer_trusted(fd, daemon_uid_from_env(), &peer) < 0) {
                close(fd);
                fprintf(stderr,
                        "zswapctl: %s is served by uid %u, not by root: not trusted as zswapd, nothing sent "
                        "(set ZSWAP_DAEMON_UID=%u if zswapd runs as that user)\n",
                        path, (unsigned)peer, (unsigned)peer);
                return -1;
        }

        if (fd == -ENOENT || fd == -ECONNREFUSED) {
                fprintf(stderr, "zswapd is not running: start it with systemctl start zswapd (no socket at %s)\n",
                        path);
                return -1;
        }
        if (fd == -EACCES) {
                fprintf(stderr, "zswapctl: permission denied on %s: run as root or a member of group zswap\n", path);
                return -1;
        }
        if (fd < 0) {
                fprintf(stderr, "zswapctl: cannot connect to %s: %s\n", path, strerror(-fd));
                return -1;
        }
        zmsg_init(&h.hdr, ZMSG_HELLO, 1, sizeof(h));
        int r = ctl_request(fd, &h, sizeof(h), buf, sizeof(buf));
        if (r < 0) {
                fprintf(stderr, "zswapctl: %s refused the connection: %s\n", path, strerror(-r));
                close(fd);
                return -1;
        }
        return fd;
}

/* Say why a read request failed; exit status 1. */
static int read_failed(int r, const char *what) {
        if (r == -EPROTO)
                fprintf(stderr, "zswapctl: the running zswapd does not understand %s: restart it with this version\n",
                        what);
        else if (r == -EPERM)
                fprintf(stderr, "zswapctl: " EPERM_ADMIN "\n");
        else
                fprintf(stderr, "zswapctl: %s: %s\n", what, strerror(-r));
        return 1;
}

/* Is name in the comma-separated list (case-insensitive)? */
static bool list_has(const char *list, const char *name) {
        size_t n = strlen(name);
        for (const char *p = list; *p;) {
                size_t l = strcspn(p, ",");
                if (l == n && strncasecmp(p, name, n) == 0)
                        return true;
                p += l + (p[l] == ',');
        }
        return false;
}

/* ---- status ---- */

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

/* tier.h's states (the daemon's TIER_* order) */
static const char *tier_state_text(int32_t state) {
        static const char *const names[] = { "idle", "writing", "full", "error", "disconnected", "grace" };
        if (state < 0)
                return "none";
        return (size_t)state < ELEMENTSOF(names) ? names[state] : "?";
}

static size_t status_fields(const ZMsgStatusReply *st, Field *f) {
        const struct zswap_stats *s = &st->stats;
        double window = (double)st->rate_window_ms / 1000.0;
        size_t n = 0;

#define ADD(nm, k, val) f[n++] = (Field){ .name = nm, .kind = k, .v = (val) }
#define ADD_REAL(nm, val, unk) f[n++] = (Field){ .name = nm, .kind = K_REAL, .d = (val), .unknown = (unk) }
        f[n++] = (Field){ .name = "compressor", .kind = K_TEXT, .text = st->codec };
        f[n++] = (Field){ .name = "level", .kind = K_COUNT, .v = (uint64_t)(int64_t)st->level, .is_signed = true };
        ADD("pool_bytes", K_SIZE, s->pool_bytes);
        ADD("pool_limit_bytes", K_SIZE, st->pool_bound);
        ADD("compressed_bytes", K_SIZE, s->compressed_bytes);
        ADD("original_bytes", K_SIZE, s->original_bytes);
        ADD_REAL("ratio", s->pool_bytes ? (double)s->original_bytes / (double)s->pool_bytes : 0, !s->pool_bytes);
        ADD("stored_pages", K_COUNT, s->stored_pages);
        ADD("same_filled_pages", K_COUNT, s->same_pages);
        ADD("incompressible_pages", K_COUNT, s->incompressible_pages);
        ADD("staged_pages", K_COUNT, s->staged_pages);
        ADD("evictions", K_COUNT, s->evictions);
        ADD_REAL("evictions_per_s", window > 0 ? (double)st->rate_evictions / window : 0, window <= 0);
        ADD("faults", K_COUNT, s->faults);
        ADD_REAL("faults_per_s", window > 0 ? (double)st->rate_faults / window : 0, window <= 0);
        ADD("faults_zero_fill", K_COUNT, s->faults_zero);
        ADD("prefetches", K_COUNT, s->prefetches);
        ADD("fault_latency_p50_ns", K_NS, st->lat_p50_ns);
        ADD("fault_latency_p90_ns", K_NS, st->lat_p90_ns);
        ADD("fault_latency_p99_ns", K_NS, st->lat_p99_ns);
        ADD("fault_latency_p999_ns", K_NS, st->lat_p999_ns);
        ADD("fault_latency_max_ns", K_NS, st->lat_max_ns);
        ADD("faults_timed", K_COUNT, st->lat_count);
        ADD("clients", K_COUNT, s->clients);
        ADD("registered_bytes", K_SIZE, s->registered_bytes);
        ADD("resident_bytes", K_SIZE, s->resident_bytes);
        ADD("refaults", K_COUNT, s->refaults);
        ADD("reclaim_evictions", K_COUNT, s->reclaim_evictions);
        ADD("clean_pages", K_COUNT, s->clean_pages);
        ADD("clean_bytes", K_SIZE, s->clean_bytes);
        ADD("clean_reevictions", K_COUNT, s->clean_reevictions);
        ADD("thrash_backoffs", K_COUNT, s->thrash_backoffs);
        ADD("pool_full_events", K_COUNT, s->pool_full_events);
        /* what packing costs: chunk memory not holding object bytes */
        ADD("pool_overhead_bytes", K_SIZE, s->pool_bytes > s->compressed_bytes ? s->pool_bytes - s->compressed_bytes : 0);
        ADD("fault_threads", K_COUNT, st->fault_threads);
        ADD("workers", K_COUNT, st->workers);
        ADD("protocol_errors", K_COUNT, st->protocol_errors);
        ADD("moves_revoked", K_COUNT, st->moves_revoked);
        ADD("zero_ahead", K_COUNT, st->zero_ahead);
        ADD("write_scans", K_COUNT, st->write_scans);
        ADD("write_zones_out", K_COUNT, st->write_zones_out);
        /* the second tier: "none" and zeros when there is none */
        f[n++] = (Field){ .name = "tier_state", .kind = K_TEXT, .text = tier_state_text(st->tier_state) };
        f[n++] = (Field){ .name = "tier_backing", .kind = K_TEXT, .text = st->tier_state < 0 ? "-" : st->tier_backing };
        ADD("tier_capacity_bytes", K_SIZE, st->tier_capacity);
        ADD("tier_used_bytes", K_SIZE, st->tier_used_bytes);
        ADD("tier_pages", K_COUNT, st->tier_pages);
        ADD("tier_bytes", K_SIZE, st->tier_bytes);
        ADD("tier_written", K_SIZE, st->tier_written);
        ADD("tier_writes", K_COUNT, st->tier_writes);
        ADD("tier_written_pages", K_COUNT, st->tier_written_pages);
        ADD("tier_reads", K_COUNT, st->tier_reads);
        ADD("tier_read_bytes", K_SIZE, st->tier_read_bytes);
        ADD("tier_prefetched", K_COUNT, st->tier_prefetched);
        ADD("tier_errors", K_COUNT, st->tier_read_errors + st->tier_write_errors);
        ADD("tier_read_errors", K_COUNT, st->tier_read_errors);
        ADD("tier_write_errors", K_COUNT, st->tier_write_errors);
        ADD("tier_corrupt", K_COUNT, st->tier_corrupt);
        ADD("tier_full_events", K_COUNT, st->tier_full_events);
        ADD("tier_reconnects", K_COUNT, st->tier_reconnects);
#undef ADD
#undef ADD_REAL
        return n;
}

static void field_text(const Field *f, bool bytes, char *buf, size_t len) {
        switch (f->kind) {
        case K_SIZE:
                if (!bytes) {
                        human(f->v, buf, len);
                        return;
                }
                break;
        case K_NS:
                if (!bytes) {
                        human_ns(f->v, buf, len);
                        return;
                }
                break;
        case K_REAL:
                if (f->unknown)
                        snprintf(buf, len, "-");
                else
                        snprintf(buf, len, "%.2f", f->d);
                return;
        case K_TEXT:
                snprintf(buf, len, "%s", f->text);
                return;
        case K_COUNT:
                if (f->is_signed) {
                        snprintf(buf, len, "%lld", (long long)(int64_t)f->v);
                        return;
                }
                break;
        }
        snprintf(buf, len, "%llu", (unsigned long long)f->v);
}

static void field_json(const Field *f) {
        if (f->kind == K_TEXT)
                json_string(f->text);
        else if (f->kind == K_REAL && f->unknown)
                printf("null");
        else if (f->kind == K_REAL)
                printf("%.3f", f->d);
        else if (f->is_signed)
                printf("%lld", (long long)(int64_t)f->v);
        else
                printf("%llu", (unsigned long long)f->v);
}

/* Check -o names against what exists; false after saying which is not. */
static bool columns_valid(const char *list, const char *const *names, size_t n, const char *what) {
        for (const char *p = list; *p;) {
                size_t l = strcspn(p, ",");
                bool ok = false;
                for (size_t i = 0; i < n && !ok; i++)
                        ok = strlen(names[i]) == l && strncasecmp(p, names[i], l) == 0;
                if (!ok || l == 0) {
                        fprintf(stderr, "zswapctl: unknown %s '%.*s'; there are:", what, (int)l, p);
                        for (size_t i = 0; i < n; i++)
                                fprintf(stderr, "%s%s", i ? "," : " ", names[i]);
                        fprintf(stderr, "\n");
                        return false;
                }
                p += l + (p[l] == ',');
        }
        return true;
}

static int status_fetch(int fd, ZMsgStatusReply *st) {
        ZMsgHeader q;
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];

        zmsg_init(&q, ZMSG_STATUS, 2, sizeof(q));
        int r = ctl_expect(fd, &q, sizeof(q), buf, sizeof(buf), ZMSG_STATUS_REPLY);
        if (r == 0)
                memcpy(st, buf, sizeof(*st));
        return r;
}

static int cmd_status(const Opts *o) {
        ZMsgStatusReply st;
        Field f[96];

        size_t n = status_fields(&(ZMsgStatusReply){ 0 }, f);
        if (o->columns) {
                const char *names[ELEMENTSOF(f)];
                for (size_t i = 0; i < n; i++)
                        names[i] = f[i].name;
                if (!columns_valid(o->columns, names, n, "status field"))
                        return 2;
        }
        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        int r = status_fetch(fd, &st);
        if (r < 0)
                return read_failed(r, "status");
        n = status_fields(&st, f);
        if (o->json)
                printf("{");
        for (size_t i = 0, shown = 0; i < n; i++) {
                char buf[64];
                if (o->columns && !list_has(o->columns, f[i].name))
                        continue;
                if (o->json) {
                        printf("%s\"%s\": ", shown++ ? ", " : "", f[i].name);
                        field_json(&f[i]);
                        continue;
                }
                field_text(&f[i], o->bytes, buf, sizeof(buf));
                if (o->no_headings)
                        printf("%s\n", buf);
                else
                        printf("%-22s %s\n", f[i].name, buf);
        }
        if (o->json)
                printf("}\n");
        return 0;
}

/* ---- clients ---- */

typedef struct Client {
        ZClientRecord r;
        char user[33];
        char comm[ZSWAP_COMM_MAX];
} Client;

/* Every client the daemon shows us, in id order; count or -errno. */
static int clients_fetch(int fd, Client **ret) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        const ZMsgClientsReply *rep = (const ZMsgClientsReply *)buf;
        ZMsgClientsReq q = { .after = 0 };
        _cleanup_free_ Client *v = NULL;
        size_t n = 0;

        for (uint32_t id = 3;; id++) {
                zmsg_init(&q.hdr, ZMSG_CLIENTS, id, sizeof(q));
                int r = ctl_expect(fd, &q, sizeof(q), buf, sizeof(buf), ZMSG_CLIENTS_REPLY);
                if (r < 0)
                        return r;
                if (rep->count > ZSWAP_CLIENTS_PER_MSG)
                        return -EPROTO;
                Client *nv = realloc(v, (n + rep->count + 1) * sizeof(*v));
                if (!nv)
                        return -ENOMEM;
                v = nv;
                for (uint32_t i = 0; i < rep->count; i++, n++) {
                        v[n] = (Client){ .r = rep->rec[i] };
                        memcpy(v[n].comm, rep->rec[i].comm, sizeof(v[n].comm));
                        v[n].comm[sizeof(v[n].comm) - 1] = 0;
                }
                if (!rep->more || rep->count == 0)
                        break;
                q.after = rep->rec[rep->count - 1].id;
        }
        for (size_t i = 0; i < n; i++) {
                struct passwd *pw = v[i].r.uid != UINT32_MAX ? getpwuid(v[i].r.uid) : NULL;
                if (pw)
                        snprintf(v[i].user, sizeof(v[i].user), "%s", pw->pw_name);
                else if (v[i].r.uid != UINT32_MAX)
                        snprintf(v[i].user, sizeof(v[i].user), "%u", v[i].r.uid);
                else
                        snprintf(v[i].user, sizeof(v[i].user), "?");
                if (!v[i].comm[0])
                        snprintf(v[i].comm, sizeof(v[i].comm), "?");
        }
        *ret = TAKE_PTR(v);
        return (int)n;
}

enum {
        COL_PID, COL_UID, COL_USER, COL_COMMAND, COL_REGISTERED, COL_RESIDENT, COL_EVICTED, COL_POOL, COL_RATIO,
        COL_FAULTS, COL_REFAULTS, COL_LIMIT, COL_STAGED, COL_INCOMPRESSIBLE, COL_ID, COL_TIER, _COL_MAX
};

static const struct {
        const char *name;
        Kind kind;
} columns[_COL_MAX] = {
        [COL_PID] = { "PID", K_COUNT },           [COL_UID] = { "UID", K_COUNT },
        [COL_USER] = { "USER", K_TEXT },          [COL_COMMAND] = { "COMMAND", K_TEXT },
        [COL_REGISTERED] = { "REGISTERED", K_SIZE }, [COL_RESIDENT] = { "RESIDENT", K_SIZE },
        [COL_EVICTED] = { "EVICTED", K_SIZE },     [COL_POOL] = { "POOL", K_SIZE },
        [COL_RATIO] = { "RATIO", K_REAL },         [COL_FAULTS] = { "FAULTS", K_COUNT },
        [COL_REFAULTS] = { "REFAULTS", K_COUNT },  [COL_LIMIT] = { "LIMIT", K_SIZE },
        [COL_STAGED] = { "STAGED", K_COUNT },      [COL_INCOMPRESSIBLE] = { "INCOMPRESSIBLE", K_COUNT },
        [COL_ID] = { "ID", K_COUNT },             [COL_TIER] = { "TIER", K_SIZE },
};

#define DEFAULT_COLUMNS "PID,USER,COMMAND,REGISTERED,RESIDENT,EVICTED,POOL,RATIO,REFAULTS,LIMIT"

/* Column col of client c as a Field (name: the JSON key, lower case). */
static Field client_field(const Client *c, int col) {
        const ZClientRecord *r = &c->r;
        uint64_t held = (r->stored_pages + r->same_pages) * ZSWAP_PAGE_SIZE;
        /* what the pages take compressed: in the pool, and on the second
         * tier for those whose pool object is only a 16-byte stub */
        uint64_t compressed = r->compressed_bytes - MIN(r->compressed_bytes, r->tier_pages * 16) + r->tier_bytes;
        Field f = { .kind = columns[col].kind };

        switch (col) {
        case COL_PID: f.v = (uint64_t)r->pid; break;
        case COL_UID: f.v = r->uid; break;
        case COL_USER: f.text = c->user; break;
        case COL_COMMAND: f.text = c->comm; break;
        case COL_REGISTERED: f.v = r->registered_bytes; break;
        case COL_RESIDENT: f.v = r->resident_bytes; break;
        case COL_EVICTED: f.v = held; break;
        case COL_POOL: f.v = r->compressed_bytes; break;
        case COL_RATIO:
                f.d = compressed ? (double)held / (double)compressed : 0;
                f.unknown = !compressed;
                break;
        case COL_FAULTS: f.v = r->faults; break;
        case COL_REFAULTS: f.v = r->refaults; break;
        case COL_LIMIT: f.v = r->limit_bytes; break;
        case COL_STAGED: f.v = r->staged_pages; break;
        case COL_INCOMPRESSIBLE: f.v = r->incompressible_pages; break;
        case COL_ID: f.v = r->id; break;
        case COL_TIER: f.v = r->tier_pages * ZSWAP_PAGE_SIZE; break;
        }
        return f;
}

/* The columns -o names, in its order; count, or 0 after saying why. */
static size_t columns_pick(const char *list, int *out) {
        const char *names[_COL_MAX];
        size_t n = 0;

        for (int i = 0; i < _COL_MAX; i++)
                names[i] = columns[i].name;
        if (!columns_valid(list, names, _COL_MAX, "column"))
                return 0;
        for (const char *p = list; *p && n < 64;) {
                size_t l = strcspn(p, ",");
                for (int i = 0; i < _COL_MAX; i++)
                        if (strlen(names[i]) == l && strncasecmp(p, names[i], l) == 0)
                                out[n++] = i;
                p += l + (p[l] == ',');
        }
        return n;
}

static void cell_text(const Client *c, int col, bool bytes, char *buf, size_t len) {
        Field f = client_field(c, col);
        if (col == COL_LIMIT && f.v == 0)
                snprintf(buf, len, "-");
        else
                field_text(&f, bytes, buf, len);
}

static void clients_table(const Client *v, size_t n, const int *cols, size_t ncols, const Opts *o) {
        int width[64];
        char buf[64];

        for (size_t j = 0; j < ncols; j++) {
                width[j] = o->no_headings ? 0 : (int)strlen(columns[cols[j]].name);
                for (size_t i = 0; i < n; i++) {
                        cell_text(&v[i], cols[j], o->bytes, buf, sizeof(buf));
                        width[j] = MAX(width[j], (int)strlen(buf));
                }
        }
        for (size_t i = o->no_headings ? 1 : 0; i <= n; i++) {
                for (size_t j = 0; j < ncols; j++) {
                        bool left = columns[cols[j]].kind == K_TEXT, last = j + 1 == ncols;
                        if (i == 0)
                                snprintf(buf, sizeof(buf), "%s", columns[cols[j]].name);
                        else
                                cell_text(&v[i - 1], cols[j], o->bytes, buf, sizeof(buf));
                        printf("%s%*s", j ? " " : "", left ? -(last ? 0 : width[j]) : width[j], buf);
                }
                printf("\n");
        }
}

static void clients_json(const Client *v, size_t n, const int *cols, size_t ncols) {
        printf("[");
        for (size_t i = 0; i < n; i++) {
                printf(i ? ",\n {" : "{");
                for (size_t j = 0; j < ncols; j++) {
                        Field f = client_field(&v[i], cols[j]);
                        printf("%s\"", j ? ", " : "");
                        for (const char *p = columns[cols[j]].name; *p; p++)
                                putchar(*p - 'A' + 'a');
                        printf("\": ");
                        if (cols[j] == COL_LIMIT && f.v == 0)
                                printf("null");
                        else
                                field_json(&f);
                }
                printf("}");
        }
        printf("]\n");
}

static int cmd_clients(const Opts *o) {
        int cols[64];
        _cleanup_free_ Client *v = NULL;

        size_t ncols = columns_pick(o->columns ? o->columns : DEFAULT_COLUMNS, cols);
        if (ncols == 0)
                return 2;
        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        int n = clients_fetch(fd, &v);
        if (n < 0)
                return read_failed(n, "clients");
        if (o->json)
                clients_json(v, (size_t)n, cols, ncols);
        else
                clients_table(v, (size_t)n, cols, ncols, o);
        return 0;
}

/* ---- metrics (Prometheus text exposition format 0.0.4) ---- */

static void prom_family(const char *name, const char *type, const char *help) {
        printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_label_value(const char *s) {
        putchar('"');
        for (; *s; s++)
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if (*s == '\n')
                        printf("\\n");
                else
                        putchar(*s);
        putchar('"');
}

static void prom_u64(const char *name, const char *type, const char *help, uint64_t v) {
        prom_family(name, type, help);
        printf("%s %llu\n", name, (unsigned long long)v);
}

static void prom_seconds(const char *name, const char *help, uint64_t ns) {
        prom_family(name, "gauge", help);
        printf("%s %.9f\n", name, (double)ns / 1e9);
}

static void metrics_daemon(const ZMsgStatusReply *st) {
        const struct zswap_stats *s = &st->stats;
        const struct {
                const char *name, *type, *help;
                uint64_t v;
        } plain[] = {
                { "zswapd_pool_bytes", "gauge", "Memory the compressed pool occupies.", s->pool_bytes },
                { "zswapd_pool_limit_bytes", "gauge", "Bytes the pool may take (0: no bound).", st->pool_bound },
                { "zswapd_compressed_bytes", "gauge", "Sum of the compressed pages' sizes.", s->compressed_bytes },
                { "zswapd_original_bytes", "gauge", "Original size of the pages held (stored and same-filled).",
                  s->original_bytes },
                { "zswapd_stored_pages", "gauge", "Pages held compressed.", s->stored_pages },
                { "zswapd_same_filled_pages", "gauge", "Pages held as one repeated value, without pool space.",
                  s->same_pages },
                { "zswapd_incompressible_pages", "gauge", "Pages found incompressible and kept resident.",
                  s->incompressible_pages },
                { "zswapd_staged_pages", "gauge", "Pages moved out and not yet compressed.", s->staged_pages },
                { "zswapd_clients", "gauge", "Connected client processes.", s->clients },
                { "zswapd_registered_bytes", "gauge", "Memory the clients handed to the daemon.", s->registered_bytes },
                { "zswapd_resident_bytes", "gauge", "Of the registered memory, what is resident.", s->resident_bytes },
                { "zswapd_clean_pages", "gauge", "Resident pages whose compressed copy is kept.", s->clean_pages },
                { "zswapd_clean_bytes", "gauge", "Pool bytes the kept copies take.", s->clean_bytes },
                { "zswapd_fault_threads", "gauge", "Threads serving faults.", st->fault_threads },
                { "zswapd_workers", "gauge", "Compression worker threads.", st->workers },
                { "zswapd_evictions_total", "counter", "Pages evicted.", s->evictions },
                { "zswapd_faults_total", "counter", "Faults served with content the daemon held.", s->faults },
                { "zswapd_zero_fill_faults_total", "counter", "Faults served with a zero page.", s->faults_zero },
                { "zswapd_prefetches_total", "counter", "Pages installed ahead of a sequential reader.",
                  s->prefetches },
                { "zswapd_refaults_total", "counter", "Faults that brought back a page the daemon held.", s->refaults },
                { "zswapd_reclaim_evictions_total", "counter",
                  "Pages evicted by the daemon's own policies (limit, idle, pressure).", s->reclaim_evictions },
                { "zswapd_clean_reevictions_total", "counter", "Evictions that reused a kept copy.",
                  s->clean_reevictions },
                { "zswapd_thrash_backoffs_total", "counter", "Times a zone was backed off for refaulting too fast.",
                  s->thrash_backoffs },
                { "zswapd_pool_full_events_total", "counter", "Times eviction stopped at the pool bound.",
                  s->pool_full_events },
                { "zswapd_protocol_errors_total", "counter", "Malformed or unexpected messages received.",
                  st->protocol_errors },
                { "zswapd_moves_revoked_total", "counter",
                  "Page moves a client's agent left unfinished, revoked so its faults could be served.",
                  st->moves_revoked },
                { "zswapd_zero_ahead_pages_total", "counter",
                  "Fresh pages mapped to the zero page after a first touch (faults the programs did not take).",
                  st->zero_ahead },
                { "zswapd_write_scans_total", "counter", "Write-tracking scans of a client's memory.", st->write_scans },
                { "zswapd_write_zones_out_total", "counter",
                  "Zones (2 MiB) left out of a write scan because they are written all the time.", st->write_zones_out },
                { "zswapd_tier_capacity_bytes", "gauge", "Bytes of the second tier's backing store for pages (0: none).",
                  st->tier_capacity },
                { "zswapd_tier_used_bytes", "gauge", "Blocks of the second tier holding live pages, in bytes.",
                  st->tier_used_bytes },
                { "zswapd_tier_pages", "gauge", "Pages whose data is on the second tier.", st->tier_pages },
                { "zswapd_tier_bytes", "gauge", "Compressed bytes of the pages on the second tier.", st->tier_bytes },
                { "zswapd_tier_written_bytes_total", "counter", "Bytes written to the second tier.", st->tier_written },
                { "zswapd_tier_written_pages_total", "counter", "Pages written to the second tier.",
                  st->tier_written_pages },
                { "zswapd_tier_reads_total", "counter", "Reads from the second tier (one per fault on it).",
                  st->tier_reads },
                { "zswapd_tier_read_bytes_total", "counter", "Bytes read from the second tier.", st->tier_read_bytes },
                { "zswapd_tier_prefetched_total", "counter", "Pages installed from another page's read of the second tier.",
                  st->tier_prefetched },
                { "zswapd_tier_read_errors_total", "counter", "Reads of the second tier that failed (the fault waits and retries).",
                  st->tier_read_errors },
                { "zswapd_tier_write_errors_total", "counter", "Writes to the second tier that failed (the pages stayed in RAM).",
                  st->tier_write_errors },
                { "zswapd_tier_corrupt_total", "counter", "Pages whose second-tier data failed its checksum (lost, poisoned).",
                  st->tier_corrupt },
                { "zswapd_tier_full_events_total", "counter", "Times writeback stopped for want of free blocks.",
                  st->tier_full_events },
                { "zswapd_tier_reconnects_total", "counter", "Connections to the NBD server made again.",
                  st->tier_reconnects },
        };

        prom_family("zswapd_info", "gauge", "The running daemon's compressor and level, and zswapctl's version.");
        printf("zswapd_info{version=\"%s\",compressor=", ZSWAP_VERSION);
        prom_label_value(st->codec);
        printf(",level=\"%d\"} 1\n", (int)st->level);
        for (size_t i = 0; i < ELEMENTSOF(plain); i++)
                prom_u64(plain[i].name, plain[i].type, plain[i].help, plain[i].v);
        /* no sample until the daemon has a rate (a second after start) */
        prom_family("zswapd_evictions_per_second", "gauge", "Pages evicted per second over the last 1-5 seconds.");
        if (st->rate_window_ms)
                printf("zswapd_evictions_per_second %.3f\n",
                       (double)st->rate_evictions * 1000.0 / (double)st->rate_window_ms);
}

static void metrics_latency(const ZMsgStatusReply *st) {
        prom_family("zswapd_fault_latency_seconds", "histogram",
                    "Fault service time, from the fault thread's read of the fault to the page installed.");
        for (unsigned i = 0; i < ZSWAP_LAT_LE_N; i++)
                printf("zswapd_fault_latency_seconds_bucket{le=\"%.9g\"} %llu\n",
                       (double)(1ull << (ZSWAP_LAT_LE_MIN_SHIFT + i)) / 1e9, (unsigned long long)st->lat_le[i]);
        printf("zswapd_fault_latency_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)st->lat_count);
        printf("zswapd_fault_latency_seconds_sum %.9f\n", (double)st->lat_sum_ns / 1e9);
        printf("zswapd_fault_latency_seconds_count %llu\n", (unsigned long long)st->lat_count);
        prom_seconds("zswapd_fault_latency_p50_seconds", "Median fault service time since start (within 12.5%).",
                     st->lat_p50_ns);
        prom_seconds("zswapd_fault_latency_p99_seconds", "99th percentile fault service time since start (within 12.5%).",
                     st->lat_p99_ns);
        prom_seconds("zswapd_fault_latency_max_seconds", "Longest fault service time since start.", st->lat_max_ns);
}

static void metrics_clients(const Client *v, size_t n) {
        static const struct {
                const char *name, *type, *help;
                int col;
        } per[] = {
                { "zswapd_client_registered_bytes", "gauge", "Memory the client handed to the daemon.", COL_REGISTERED },
                { "zswapd_client_resident_bytes", "gauge", "Of that, what is resident.", COL_RESIDENT },
                { "zswapd_client_evicted_bytes", "gauge", "Original size of the client's pages the daemon holds.",
                  COL_EVICTED },
                { "zswapd_client_pool_bytes", "gauge", "Compressed size of the client's pages.", COL_POOL },
                { "zswapd_client_tier_bytes", "gauge", "Original size of the client's pages on the second tier.",
                  COL_TIER },
                { "zswapd_client_limit_bytes", "gauge", "The client's resident limit (0: none).", COL_LIMIT },
                { "zswapd_client_faults_total", "counter", "Faults served to the client.", COL_FAULTS },
                { "zswapd_client_refaults_total", "counter", "Faults that brought back a page the daemon held.",
                  COL_REFAULTS },
        };

        for (size_t k = 0; k < ELEMENTSOF(per); k++) {
                prom_family(per[k].name, per[k].type, per[k].help);
                for (size_t i = 0; i < n; i++) {
                        printf("%s{pid=\"%d\",user=", per[k].name, (int)v[i].r.pid);
                        prom_label_value(v[i].user);
                        printf(",command=");
                        prom_label_value(v[i].comm);
                        printf("} %llu\n", (unsigned long long)client_field(&v[i], per[k].col).v);
                }
        }
}

static int cmd_metrics(const Opts *o) {
        ZMsgStatusReply st;
        _cleanup_free_ Client *v = NULL;

        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return 1;
        int r = status_fetch(fd, &st);
        if (r < 0)
                return read_failed(r, "status");
        int n = clients_fetch(fd, &v);
        if (n < 0)
                return read_failed(n, "clients");
        metrics_daemon(&st);
        metrics_latency(&st);
        metrics_clients(v, (size_t)n);
        return 0;
}

/* A process id, or 0 after saying why not. */
static int32_t parse_pid(const char *s) {
        uint64_t pid;

        if (conf_parse_uint(s, &pid) < 0 || pid == 0 || pid > INT32_MAX) {
                fprintf(stderr, "zswapctl: '%s' is not a process id\n", s);
                return 0;
        }
        return (int32_t)pid;
}

/* pageout PID [ADDR LEN]: evict a running program's managed memory */
static int cmd_pageout(const char *path, int argc, char **argv, bool json) {
        ZMsgPageoutPid q = { 0 };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        char *end;
        long pid;

        if (argc != 1 && argc != 3) {
                fprintf(stderr, "zswapctl: usage: zswapctl pageout PID [ADDR LEN]\n");
                return 2;
        }
        q.pid = parse_pid(argv[0]);
        if (q.pid == 0)
                return 2;
        pid = q.pid;
        if (argc == 3) {
                errno = 0;
                q.addr = strtoull(argv[1], &end, 0);
                if (errno || *end || parse_size(argv[2], &q.len) < 0 || q.len == 0) {
                        fprintf(stderr, "zswapctl: ADDR is an address (0x...), LEN a size (4096, 64M, ...)\n");
                        return 2;
                }
        }
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, ZMSG_PAGEOUT_PID, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r == -ESRCH) {
                fprintf(stderr, "zswapctl: process %ld has no memory managed by zswapd\n", pid);
                return 1;
        }
        if (r == -EPERM) {
                fprintf(stderr, "zswapctl: " EPERM_ADMIN " (process %ld is another user's)\n", pid);
                return 1;
        }
        if (r < 0) {
                fprintf(stderr, "zswapctl: pageout of process %ld: %s\n", pid, strerror(-r));
                return 1;
        }
        uint64_t pages = (uint64_t)((ZMsgReply *)buf)->value;
        if (json)
                printf("{\"pid\": %ld, \"evicted_pages\": %llu}\n", pid, (unsigned long long)pages);
        else
                printf("process %ld: %llu pages evicted\n", pid, (unsigned long long)pages);
        return 0;
}

/* Say why the daemon refused a request about process pid (0: the daemon). */
static int refused(int r, int32_t pid, bool change, const char *what, const char *msg) {
        if (r == -ESRCH)
                fprintf(stderr, "zswapctl: no zswapd client with pid %d\n", (int)pid);
        else if (r == -EPERM && pid)
                fprintf(stderr, "zswapctl: " EPERM_ADMIN " (process %d is another user's)\n", (int)pid);
        else if (r == -EPERM)
                fprintf(stderr, "zswapctl: " EPERM_ADMIN " (%s)\n",
                        change ? "changing daemon settings" : "reading daemon settings");
        else if (r == -EPROTO)
                fprintf(stderr, "zswapctl: the running zswapd does not understand %s: restart it with this version\n",
                        what);
        else if (msg && *msg)
                fprintf(stderr, "zswapctl: %s\n", msg);
        else
                fprintf(stderr, "zswapctl: %s: %s\n", what, strerror(-r));
        return 1;
}

/* limit PID SIZE: keep a program's resident managed memory under SIZE */
static int cmd_limit(const char *path, int argc, char **argv, bool json) {
        ZMsgLimit q = { 0 };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        char size[32];

        if (argc != 2) {
                fprintf(stderr, "zswapctl: usage: zswapctl limit PID SIZE\n");
                return 2;
        }
        q.pid = parse_pid(argv[0]);
        if (q.pid == 0)
                return 2;
        if (conf_parse_size(argv[1], conf_ram_bytes(), &q.bytes) < 0) {
                fprintf(stderr, "zswapctl: '%s' is not a size: use bytes or K, M, G, T (64M, 1.5G), a percentage "
                        "of RAM (10%%), or none to remove the limit\n", argv[1]);
                return 2;
        }
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 2, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r < 0)
                return refused(r, q.pid, true, "limit", NULL);
        conf_format_size(q.bytes, size, sizeof(size));
        if (json)
                printf("{\"pid\": %d, \"limit\": %llu}\n", (int)q.pid, (unsigned long long)q.bytes);
        else if (q.bytes)
                printf("process %d: limit %s\n", (int)q.pid, size);
        else
                printf("process %d: no limit\n", (int)q.pid);
        return 0;
}

/* One TUNABLE_SET (value != NULL) or TUNABLE_GET; the reply's value (the
 * value in force, or why not) goes to out. Returns the daemon's status. */
static int tunable_request(int fd, int32_t pid, const char *key, const char *value, char *out, size_t len) {
        static uint32_t id = 2;
        ZMsgTunable q = { .pid = pid };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX] = { 0 };
        const ZMsgTunable *rep = (const ZMsgTunable *)buf;
        size_t n = 0;

        snprintf(q.key, sizeof(q.key), "%s", key);
        snprintf(q.value, sizeof(q.value), "%s", value ? value : "");
        zmsg_init(&q.hdr, value ? ZMSG_TUNABLE_SET : ZMSG_TUNABLE_GET, id++, sizeof(q));
        int r = ctl_request(fd, &q, sizeof(q), buf, sizeof(buf));
        if (r != -EPROTO && rep->hdr.type == ZMSG_TUNABLE_REPLY)
                n = MIN(strnlen(rep->value, sizeof(rep->value)), len - 1);
        memcpy(out, rep->value, n);
        out[n] = 0;
        return r;
}

/* "key = value" lines, as the configuration file has them, or one JSON
 * object key -> value string. */
static void print_pairs(const char *const *keys, char (*values)[ZSWAP_TUNABLE_VALUE_MAX], size_t n, bool json) {
        int width = 0;

        for (size_t i = 0; i < n; i++)
                width = MAX(width, (int)strlen(keys[i]));
        for (size_t i = 0; i < n; i++) {
                if (!json) {
                        printf("%-*s = %s\n", width, keys[i], values[i]);
                        continue;
                }
                printf(i ? ", " : "{");
                json_string(keys[i]);
                printf(": ");
                json_string(values[i]);
        }
        if (json)
                printf(n ? "}\n" : "{}\n");
}

static bool tunable_args_fit(const char *key, const char *value) {
        if (strlen(key) >= ZSWAP_TUNABLE_KEY_MAX) {
                fprintf(stderr, "zswapctl: unknown key '%s' (zswapctl get lists them)\n", key);
                return false;
        }
        if (value && strlen(value) >= ZSWAP_TUNABLE_VALUE_MAX) {
                fprintf(stderr, "zswapctl: %s: value too long (%d bytes at most)\n", key, ZSWAP_TUNABLE_VALUE_MAX - 1);
                return false;
        }
        return true;
}

/* set [--pid PID] KEY VALUE: prints the value now in force */
static int cmd_set(const char *path, int32_t pid, int argc, char **argv, bool json) {
        char value[1][ZSWAP_TUNABLE_VALUE_MAX];

        if (argc != 2) {
                fprintf(stderr, "zswapctl: usage: zswapctl set [--pid PID] KEY VALUE\n");
                return 2;
        }
        if (!tunable_args_fit(argv[0], argv[1]))
                return 2;
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        int r = tunable_request(fd, pid, argv[0], argv[1], value[0], sizeof(value[0]));
        if (r < 0)
                return refused(r, pid, true, argv[0], value[0]);
        print_pairs((const char *const *)argv, value, 1, json);
        return 0;
}

/* get [--pid PID] [KEY]: every key (the daemon's, or a client's own) or one */
static int cmd_get(const char *path, int32_t pid, int argc, char **argv, bool json) {
        const char *const *keys = pid ? tunable_client_names : tunable_names;
        size_t n = _TUNABLE_KEY_MAX;
        char values[_TUNABLE_KEY_MAX][ZSWAP_TUNABLE_VALUE_MAX];

        if (argc > 1) {
                fprintf(stderr, "zswapctl: usage: zswapctl get [--pid PID] [KEY]\n");
                return 2;
        }
        if (argc == 1) {
                if (!tunable_args_fit(argv[0], NULL))
                        return 2;
                keys = (const char *const *)argv;
                n = 1;
        } else if (pid)
                for (n = 0; tunable_client_names[n] && n < _TUNABLE_KEY_MAX; n++)
                        ;
        _cleanup_close_ int fd = ctl_connect(path);
        if (fd < 0)
                return 1;
        for (size_t i = 0; i < n; i++) {
                int r = tunable_request(fd, pid, keys[i], NULL, values[i], sizeof(values[i]));
                if (r < 0)
                        return refused(r, pid, false, keys[i], values[i]);
        }
        print_pairs(keys, values, n, json);
        return 0;
}

static void help(void) {
        printf("Usage: zswapctl [OPTIONS] [COMMAND [ARGS]]\n\n"
               "Commands:\n"
               "  status              what the daemon holds and saves, fault latency, rates (default)\n"
               "  clients             one row per client process\n"
               "  metrics             every counter in the Prometheus text format\n"
               "  pageout PID [ADDR LEN]\n"
               "                      evict a running program's managed memory (all of it,\n"
               "                      or the part in [ADDR, ADDR+LEN)); prints the pages evicted\n"
               "  limit PID SIZE|none keep a program's resident managed memory under SIZE\n"
               "                      (64M, 1.5G, 10%% of RAM; 0 or none: no limit)\n"
               "  set KEY VALUE       change a daemon-wide tunable (admin); prints the value in force\n"
               "  set --pid PID KEY VALUE\n"
               "                      a program's own limit, idle_age or reclaim (yes/no)\n"
               "  get [--pid PID] [KEY]\n"
               "                      tunables in force, all or one, as key = value lines\n\n"
               "Options:\n"
               "  -s, --socket PATH   daemon socket (default $ZSWAP_SOCKET or %s)\n"
               "  -p, --pid PID       set/get: a program's own settings, not the daemon's\n"
               "  -J, --json          machine-readable output (sizes in bytes, times in ns)\n"
               "  -b, --bytes         sizes in bytes, times in ns\n"
               "  -o, --output LIST   clients: columns to print, comma-separated; status: fields\n"
               "  -n, --no-headings   clients: no header line; status: values only\n"
               "  -h, --help          this help\n"
               "  -V, --version       the version\n\n"
               "Columns of clients (default " DEFAULT_COLUMNS "):\n"
               "  PID UID USER COMMAND   the process, its owner, its name\n"
               "  REGISTERED RESIDENT    memory handed to the daemon, of that what is resident\n"
               "  EVICTED POOL RATIO     what the daemon holds, the pool memory it takes, their ratio\n"
               "  FAULTS REFAULTS        faults served, of them pages brought back after eviction\n"
               "  LIMIT                  resident limit (- for none)\n"
               "  STAGED INCOMPRESSIBLE  pages awaiting compression, pages kept as incompressible\n"
               "  ID                     the daemon's id of the client (a process may have several)\n"
               "  TIER                   of what the daemon holds, what is on the second tier\n\n"
               "Admin commands (another user's process, daemon-wide settings) need root or\n"
               "group zswap. Exit status: 0 done, 1 refused or failed, 2 usage.\n\n"
               "See zswapctl(8).\n",
               ZSWAP_DEFAULT_SOCKET);
}

/* Options that only some commands take: a usage error elsewhere. */
static bool options_fit(const char *cmd, const Opts *o) {
        bool table = strcmp(cmd, "clients") == 0 || strcmp(cmd, "status") == 0;

        if (o->pid && strcmp(cmd, "set") != 0 && strcmp(cmd, "get") != 0) {
                fprintf(stderr, "zswapctl: --pid is for set and get (limit and pageout take PID as an argument)\n");
                return false;
        }
        if ((o->columns || o->no_headings) && !table) {
                fprintf(stderr, "zswapctl: -o and --no-headings are for clients and status\n");
                return false;
        }
        if (o->json && strcmp(cmd, "metrics") == 0) {
                fprintf(stderr, "zswapctl: metrics has one format (Prometheus text): no --json\n");
                return false;
        }
        return true;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'J' },
                { "bytes", no_argument, NULL, 'b' },
                { "pid", required_argument, NULL, 'p' },
                { "output", required_argument, NULL, 'o' },
                { "no-headings", no_argument, NULL, 'n' },
                { "noheadings", no_argument, NULL, 'n' }, /* zramctl's spelling */
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {}
        };
        Opts o = { .path = getenv("ZSWAP_SOCKET") ? getenv("ZSWAP_SOCKET") : ZSWAP_DEFAULT_SOCKET };
        int c;

        while ((c = getopt_long(argc, argv, "s:Jbp:o:nhV", opts, NULL)) >= 0) {
                switch (c) {
                case 's': o.path = optarg; break;
                case 'J': o.json = true; break;
                case 'b': o.bytes = true; break;
                case 'o': o.columns = optarg; break;
                case 'n': o.no_headings = true; break;
                case 'p':
                        if ((o.pid = parse_pid(optarg)) == 0)
                                return 2;
                        break;
                case 'h': help(); return 0;
                case 'V': printf("zswapctl %s\n", ZSWAP_VERSION); return 0;
                default:
                        fprintf(stderr, "See zswapctl --help.\n");
                        return 2;
                }
        }
        const char *cmd = optind < argc ? argv[optind] : "status";
        int n = optind < argc ? argc - optind - 1 : 0;
        char **args = argv + optind + 1;
        if (!options_fit(cmd, &o))
                return 2;
        bool takes_args = strcmp(cmd, "pageout") == 0 || strcmp(cmd, "limit") == 0 || strcmp(cmd, "set") == 0 ||
                          strcmp(cmd, "get") == 0;
        if (n > 0 && !takes_args) {
                fprintf(stderr, "zswapctl: %s takes no arguments (see zswapctl --help)\n", cmd);
                return 2;
        }
        if (strcmp(cmd, "status") == 0)
                return cmd_status(&o);
        if (strcmp(cmd, "clients") == 0)
                return cmd_clients(&o);
        if (strcmp(cmd, "metrics") == 0)
                return cmd_metrics(&o);
        if (strcmp(cmd, "pageout") == 0)
                return cmd_pageout(o.path, n, args, o.json);
        if (strcmp(cmd, "limit") == 0)
                return cmd_limit(o.path, n, args, o.json);
        if (strcmp(cmd, "set") == 0)
                return cmd_set(o.path, o.pid, n, args, o.json);
        if (strcmp(cmd, "get") == 0)
                return cmd_get(o.path, o.pid, n, args, o.json);
        fprintf(stderr, "zswapctl: unknown command '%s' (see zswapctl --help)\n", cmd);
        return 2;
}
