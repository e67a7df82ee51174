/*
 * zswapctl-clients.c: `zswapctl clients`, one row per client process,
 * a table like zramctl's: -o picks the columns, --no-headings drops the
 * header, --json gives an array of objects. clients_fetch() pages through
 * the daemon's list; client_field() is a cell as a Field, which metrics
 * uses for its per-client series.
 */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macro.h"
#include "protocol.h"
#include "zswapctl.h"

/* Every client the daemon shows us, in id order; count or -errno. */
int clients_fetch(int fd, Client **ret) {
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
                        memcpy(v[n].group, rep->rec[i].group, sizeof(v[n].group));
                        v[n].group[sizeof(v[n].group) - 1] = 0;
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
                if (!v[i].group[0])
                        snprintf(v[i].group, sizeof(v[i].group), "-");
        }
        *ret = TAKE_PTR(v);
        return (int)n;
}

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
        [COL_GROUP] = { "GROUP", K_TEXT },        [COL_STRONG] = { "STRONG", K_SIZE },
};

/* Column col of client c as a Field (name: the JSON key, lower case). */
Field client_field(const Client *c, int col) {
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
        case COL_GROUP: f.text = c->group; break;
        case COL_STRONG: f.v = r->strong_pages * ZSWAP_PAGE_SIZE; break;
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

/* Every client, from a connection of its own; count, or -1 after saying
 * why not */
static int clients_load(const Opts *o, Client **v) {
        _cleanup_close_ int fd = ctl_connect(o->path);
        if (fd < 0)
                return -1;
        int n = clients_fetch(fd, v);
        if (n < 0) {
                read_failed(n, "clients");
                return -1;
        }
        return n;
}

int cmd_clients(const Opts *o) {
        int cols[64];
        _cleanup_free_ Client *v = NULL;

        size_t ncols = columns_pick(o->columns ? o->columns : DEFAULT_COLUMNS, cols);
        if (ncols == 0)
                return 2;
        int n = clients_load(o, &v);
        if (n < 0)
                return 1;
        if (o->json)
                clients_json(v, (size_t)n, cols, ncols);
        else
                clients_table(v, (size_t)n, cols, ncols, o);
        return 0;
}

/* ---- groups: the clients that share a limit, one row each ---- */

typedef struct Group {
        const char *name, *user;
        uint32_t uid;
        unsigned processes;
        uint64_t registered, resident, held, pool, refaults, limit;
} Group;

/* groups: one row per group (zswap-run --limit, a unit under zswapctl
 * enable --limit), its processes' figures summed: the service's view of
 * what clients shows per process */
int cmd_groups(const Opts *o) {
        _cleanup_free_ Client *v = NULL;
        _cleanup_free_ Group *g = NULL;
        size_t ng = 0;

        int n = clients_load(o, &v);
        if (n < 0)
                return 1;
        g = calloc((size_t)n + 1, sizeof(*g));
        if (!g) {
                fprintf(stderr, "zswapctl: out of memory\n");
                return 1;
        }
        for (int i = 0; i < n; i++) {
                const ZClientRecord *r = &v[i].r;
                if (!r->group[0])
                        continue;
                size_t k = 0;
                while (k < ng && !(g[k].uid == r->uid && strcmp(g[k].name, v[i].group) == 0))
                        k++;
                if (k == ng)
                        g[ng++] = (Group){ .name = v[i].group, .user = v[i].user, .uid = r->uid };
                g[k].processes++;
                g[k].registered += r->registered_bytes;
                g[k].resident += r->resident_bytes;
                g[k].held += (r->stored_pages + r->same_pages) * ZSWAP_PAGE_SIZE;
                g[k].pool += r->compressed_bytes;
                g[k].refaults += r->refaults;
                g[k].limit = MAX(g[k].limit, r->group_limit);
        }
        if (o->json) {
                printf("[");
                for (size_t k = 0; k < ng; k++) {
                        printf("%s{\"group\": ", k ? ",\n " : "");
                        json_string(g[k].name);
                        printf(", \"user\": ");
                        json_string(g[k].user);
                        printf(", \"processes\": %u, \"registered\": %llu, \"resident\": %llu, \"evicted\": %llu, "
                               "\"pool\": %llu, \"refaults\": %llu, \"limit\": %llu}",
                               g[k].processes, (unsigned long long)g[k].registered, (unsigned long long)g[k].resident,
                               (unsigned long long)g[k].held, (unsigned long long)g[k].pool,
                               (unsigned long long)g[k].refaults, (unsigned long long)g[k].limit);
                }
                printf("]\n");
                return 0;
        }
        if (!o->no_headings)
                printf("%-24s %-10s %9s %10s %10s %10s %10s %9s %10s\n", "GROUP", "USER", "PROCESSES", "REGISTERED",
                       "RESIDENT", "EVICTED", "POOL", "REFAULTS", "LIMIT");
        for (size_t k = 0; k < ng; k++) {
                char c[5][32];
                Field f = { .kind = K_SIZE };
                uint64_t vals[5] = { g[k].registered, g[k].resident, g[k].held, g[k].pool, g[k].limit };
                for (int j = 0; j < 5; j++) {
                        f.v = vals[j];
                        field_text(&f, o->bytes, c[j], sizeof(c[j]));
                }
                if (!g[k].limit) /* a group by cgroup nobody gave a limit */
                        snprintf(c[4], sizeof(c[4]), "-");
                printf("%-24s %-10s %9u %10s %10s %10s %10s %9llu %10s\n", g[k].name, g[k].user, g[k].processes, c[0],
                       c[1], c[2], c[3], (unsigned long long)g[k].refaults, c[4]);
        }
        return 0;
}
