/*
 * zswapctl-top.c: `zswapctl top`, a live view of the daemon and its
 * clients that refreshes itself, like top(1).
 *
 * On a terminal it takes the alternate screen and draws a frame every
 * --delay seconds (and at once on a key or a resize): four summary lines
 * (memory held and saved, faults and evictions per second, fault latency,
 * the pool and the tier), then one row per client, sorted, as many as the
 * screen holds. Per-client rates are the difference of its counters
 * between two frames (matched by the client's id, which the daemon never
 * reuses), so they show "-" in the first frame. Keys: q quits; e, r, p,
 * f, n sort by evicted, resident, pool, fault rate, pid; space redraws.
 * The terminal is put back (screen, cursor, line discipline) however the
 * view ends: q, ^C, SIGTERM, SIGHUP.
 *
 * Elsewhere (stdout not a terminal) it prints the same frames as plain
 * text, every client, one after another, for a log or a script; both end
 * after --iterations frames if that is given. When the daemon goes away
 * the view says so and connects again every period; a daemon that does
 * not answer within 5 s counts as gone.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "protocol.h"
#include "zswapctl.h"

#define TOP_REPLY_TIMEOUT_S 5

typedef enum Sort { SORT_EVICTED, SORT_RESIDENT, SORT_POOL, SORT_FAULTS, SORT_PID } Sort;

static const struct {
        const char *name;
        char key;
} sorts[] = {
        [SORT_EVICTED] = { "evicted", 'e' }, [SORT_RESIDENT] = { "resident", 'r' }, [SORT_POOL] = { "pool", 'p' },
        [SORT_FAULTS] = { "faults", 'f' },   [SORT_PID] = { "pid", 'n' },
};

/* One client in a frame: its record and its rates since the last frame. */
typedef struct Row {
        const Client *c;
        double faults_s, refaults_s; /* < 0: not known yet */
} Row;

/* What the last frame saw of a client, to take rates from. */
typedef struct Seen {
        uint64_t id, faults, refaults;
} Seen;

typedef struct Top {
        const Opts *o;
        bool tty;
        int fd;              /* the control connection, -1: none now */
        char why[512];       /* why there is none */
        Sort sort;
        Seen *seen;          /* the last frame's clients, in id order */
        size_t nseen;
        struct timespec seen_at;
        struct termios saved;
        bool termios_saved;
        bool keys;           /* keys are read from stdin */
} Top;

static volatile sig_atomic_t stop_signal, resized;

static void on_stop(int sig) {
        stop_signal = sig;
}

static void on_winch(int sig) {
        (void)sig;
        resized = 1;
}

static double since(const struct timespec *a, const struct timespec *b) {
        return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void fmt(Kind kind, uint64_t v, bool bytes, char *buf, size_t len) {
        Field f = { .kind = kind, .v = v };
        field_text(&f, bytes, buf, len);
}

static void rate_text(double r, char *buf, size_t len) {
        if (r < 0)
                snprintf(buf, len, "-");
        else if (r < 10000)
                snprintf(buf, len, "%.0f", r);
        else
                snprintf(buf, len, "%.0fk", r / 1000);
}

static const Seen *seen_find(const Top *t, uint64_t id) {
        size_t lo = 0, hi = t->nseen;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (t->seen[mid].id == id)
                        return &t->seen[mid];
                if (t->seen[mid].id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

static Sort sort_by; /* qsort has no context argument */

static int row_cmp(const void *a, const void *b) {
        const Row *x = a, *y = b;
        const ZClientRecord *p = &x->c->r, *q = &y->c->r;
        double u = 0, v = 0;

        switch (sort_by) {
        case SORT_EVICTED:
                u = (double)client_field(x->c, COL_EVICTED).v, v = (double)client_field(y->c, COL_EVICTED).v;
                break;
        case SORT_RESIDENT: u = (double)p->resident_bytes, v = (double)q->resident_bytes; break;
        case SORT_POOL: u = (double)p->compressed_bytes, v = (double)q->compressed_bytes; break;
        case SORT_FAULTS: u = x->faults_s, v = y->faults_s; break;
        case SORT_PID: return p->pid < q->pid ? -1 : p->pid > q->pid;
        }
        if (u != v)
                return u > v ? -1 : 1; /* largest first */
        return p->pid < q->pid ? -1 : p->pid > q->pid;
}

/* Frame output: on a terminal each line is cut at the screen's width and
 * clears what an earlier frame left to its right. */
typedef struct Screen {
        bool tty;
        int cols, rows, line;
} Screen;

static void put_line(Screen *s, const char *text, bool inverse) {
        if (!s->tty) {
                printf("%s\n", text);
                return;
        }
        if (s->line >= s->rows)
                return;
        int n = (int)strlen(text);
        if (n > s->cols)
                n = s->cols;
        printf("%s%.*s%s\033[K%s", inverse ? "\033[7m" : "", n, text, inverse ? "\033[0m" : "",
               s->line + 1 < s->rows ? "\r\n" : "");
        s->line++;
}

static void screen_size(Screen *s) {
        struct winsize w;
        s->cols = 80, s->rows = 24;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 && w.ws_row > 0)
                s->cols = w.ws_col, s->rows = w.ws_row;
}

static void summary(Screen *s, const Top *t, const ZMsgStatusReply *st, size_t nclients) {
        const struct zswap_stats *z = &st->stats;
        bool b = t->o->bytes;
        char line[512], reg[32], res[32], held[32], pool[32], saved[32], p50[32], p99[32], max[32], lim[32];
        double window = (double)st->rate_window_ms / 1000.0;
        time_t now = time(NULL);
        struct tm tm;

        localtime_r(&now, &tm);
        snprintf(line, sizeof(line), "zswapctl top - %02d:%02d:%02d  every %gs  sort: %s  %zu client%s%s", tm.tm_hour,
                 tm.tm_min, tm.tm_sec, t->o->delay, sorts[t->sort].name, nclients, nclients == 1 ? "" : "s",
                 t->tty ? "  (q quit; e r p f n sort)" : "");
        put_line(s, line, false);

        fmt(K_SIZE, z->registered_bytes, b, reg, sizeof(reg));
        fmt(K_SIZE, z->resident_bytes, b, res, sizeof(res));
        fmt(K_SIZE, z->original_bytes, b, held, sizeof(held));
        fmt(K_SIZE, z->pool_bytes, b, pool, sizeof(pool));
        fmt(K_SIZE, z->original_bytes > z->pool_bytes ? z->original_bytes - z->pool_bytes : 0, b, saved, sizeof(saved));
        char ratio[16] = "-";
        if (z->compressed_bytes)
                snprintf(ratio, sizeof(ratio), "%.2f", (double)z->original_bytes / (double)z->compressed_bytes);
        snprintf(line, sizeof(line), "Memory:  registered %s  resident %s  evicted %s  pool %s  saved %s  ratio %s", reg,
                 res, held, pool, saved, ratio);
        put_line(s, line, false);

        fmt(K_NS, st->lat_p50_ns, b, p50, sizeof(p50));
        fmt(K_NS, st->lat_p99_ns, b, p99, sizeof(p99));
        fmt(K_NS, st->lat_max_ns, b, max, sizeof(max));
        char fr[32] = "-", er[32] = "-";
        if (window > 0) {
                rate_text((double)st->rate_faults / window, fr, sizeof(fr));
                rate_text((double)st->rate_evictions / window, er, sizeof(er));
        }
        snprintf(line, sizeof(line), "Faults:  %s/s  latency p50 %s p99 %s max %s  evictions %s/s  refaults %llu", fr,
                 st->lat_count ? p50 : "-", st->lat_count ? p99 : "-", st->lat_count ? max : "-", er,
                 (unsigned long long)z->refaults);
        put_line(s, line, false);

        if (st->pool_bound)
                fmt(K_SIZE, st->pool_bound, b, lim, sizeof(lim));
        else
                snprintf(lim, sizeof(lim), "none");
        /* the strong tier, while recompression is on: what zstd holds */
        char strong[48] = "", sb[32];
        if (st->recompress_age_ms) {
                fmt(K_SIZE, st->strong_bytes, b, sb, sizeof(sb));
                snprintf(strong, sizeof(strong), "+zstd %s", sb);
        }
        int n = snprintf(line, sizeof(line), "Pool:    %s%s  limit %s  staged %llu  incompressible %llu  tier ", st->codec,
                         strong, lim, (unsigned long long)z->staged_pages, (unsigned long long)z->incompressible_pages);
        if (st->tier_state < 0) {
                snprintf(line + n, sizeof(line) - (size_t)n, "none");
        } else {
                static const char *const states[] = { "idle", "writing", "full", "error", "disconnected", "grace" };
                char used[32], cap[32];
                fmt(K_SIZE, st->tier_used_bytes, b, used, sizeof(used));
                fmt(K_SIZE, st->tier_capacity, b, cap, sizeof(cap));
                snprintf(line + n, sizeof(line) - (size_t)n, "%s %s of %s",
                         (size_t)st->tier_state < ELEMENTSOF(states) ? states[st->tier_state] : "?", used, cap);
        }
        put_line(s, line, false);
}

static void rows_print(Screen *s, const Top *t, Row *rows, size_t n) {
        char line[512];
        bool b = t->o->bytes;

        put_line(s, "", false);
        snprintf(line, sizeof(line), "%7s %-8s %-16s %8s %8s %8s %5s %8s %6s %6s %s", "PID", "USER", "GROUP", "RESIDENT",
                 "EVICTED", "POOL", "RATIO", "LIMIT", "FLT/s", "RFLT/s", "COMMAND");
        if (s->tty) /* the header's inverse bar runs the screen's width */
                snprintf(line + strlen(line), sizeof(line) - strlen(line), "%*s",
                         MAX(0, s->cols - (int)strlen(line)), "");
        put_line(s, line, true);
        for (size_t i = 0; i < n; i++) {
                const ZClientRecord *r = &rows[i].c->r;
                char res[32], held[32], pool[32], lim[32], ratio[16] = "-", fr[16], rr[16];
                fmt(K_SIZE, r->resident_bytes, b, res, sizeof(res));
                fmt(K_SIZE, client_field(rows[i].c, COL_EVICTED).v, b, held, sizeof(held));
                fmt(K_SIZE, r->compressed_bytes, b, pool, sizeof(pool));
                Field lf = client_field(rows[i].c, COL_LIMIT);
                if (lf.v)
                        field_text(&lf, b, lim, sizeof(lim));
                else
                        snprintf(lim, sizeof(lim), "-");
                Field rf = client_field(rows[i].c, COL_RATIO);
                if (!rf.unknown)
                        snprintf(ratio, sizeof(ratio), "%.2f", rf.d);
                rate_text(rows[i].faults_s, fr, sizeof(fr));
                rate_text(rows[i].refaults_s, rr, sizeof(rr));
                snprintf(line, sizeof(line), "%7d %-8.8s %-16.16s %8s %8s %8s %5s %8s %6s %6s %s", (int)r->pid,
                         rows[i].c->user, rows[i].c->group, res, held, pool, ratio, lim, fr, rr, rows[i].c->comm);
                put_line(s, line, false);
        }
}

/* One frame from the daemon's figures now; false when the connection is
 * gone (t->why says why). */
static bool frame(Top *t) {
        ZMsgStatusReply st;
        _cleanup_free_ Client *v = NULL;
        _cleanup_free_ Row *rows = NULL;
        struct timespec now;
        Screen s = { .tty = t->tty };
        int r, n;

        if ((r = status_fetch(t->fd, &st)) < 0 || (n = r = clients_fetch(t->fd, &v)) < 0) {
                snprintf(t->why, sizeof(t->why), "zswapd stopped answering: %s",
                         r == -EAGAIN ? "no reply in 5 s" : strerror(-r));
                return false;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        /* read only for a client the last frame saw (was != NULL below),
         * so seen_at is then that frame's time */
        double dt = since(&t->seen_at, &now);
        rows = calloc((size_t)n + 1, sizeof(*rows));
        Seen *seen = calloc((size_t)n + 1, sizeof(*seen));
        if (!rows || !seen) {
                free(seen);
                snprintf(t->why, sizeof(t->why), "out of memory");
                return false;
        }
        for (int i = 0; i < n; i++) {
                const Seen *was = seen_find(t, v[i].r.id);
                rows[i] = (Row){ .c = &v[i], .faults_s = -1, .refaults_s = -1 };
                if (was && dt > 0) {
                        rows[i].faults_s = (double)(v[i].r.faults - MIN(v[i].r.faults, was->faults)) / dt;
                        rows[i].refaults_s = (double)(v[i].r.refaults - MIN(v[i].r.refaults, was->refaults)) / dt;
                }
                seen[i] = (Seen){ .id = v[i].r.id, .faults = v[i].r.faults, .refaults = v[i].r.refaults };
        }
        free(t->seen);
        t->seen = seen, t->nseen = (size_t)n, t->seen_at = now;
        sort_by = t->sort;
        qsort(rows, (size_t)n, sizeof(*rows), row_cmp);

        if (t->tty) {
                screen_size(&s);
                printf("\033[H");
        }
        summary(&s, t, &st, (size_t)n);
        rows_print(&s, t, rows, (size_t)n);
        if (t->tty)
                printf("\033[J");
        else
                printf("\n");
        fflush(stdout);
        return true;
}

static void gone(Top *t) {
        if (t->tty) {
                Screen s = { .tty = true };
                screen_size(&s);
                printf("\033[H");
                put_line(&s, t->why, false);
                put_line(&s, "connecting again every period (q quits)", false);
                printf("\033[J");
        } else {
                printf("%s\n\n", t->why);
        }
        fflush(stdout);
}

static void connect_again(Top *t) {
        if (t->fd >= 0)
                return;
        t->fd = ctl_open(t->o->path, t->why, sizeof(t->why));
        if (t->fd >= 0) {
                struct timeval tv = { .tv_sec = TOP_REPLY_TIMEOUT_S };
                (void)setsockopt(t->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                free(t->seen); /* a new daemon: its counters start again */
                t->seen = NULL, t->nseen = 0, t->seen_at = (struct timespec){ 0 };
        }
}

static void terminal_enter(Top *t) {
        struct termios raw;
        if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
                t->termios_saved = true;
                raw = t->saved;
                raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
                raw.c_cc[VMIN] = 0, raw.c_cc[VTIME] = 0;
                t->keys = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
        }
        printf("\033[?1049h\033[?25l\033[H\033[J"); /* alternate screen, no cursor */
        fflush(stdout);
}

static void terminal_leave(Top *t) {
        printf("\033[?25h\033[?1049l");
        fflush(stdout);
        if (t->termios_saved)
                (void)tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
}

/* A key pressed: false to quit. */
static bool key(Top *t, char k) {
        if (k == 'q' || k == 'Q' || k == 3 /* ^C in raw mode */)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(sorts); i++)
                if (k == sorts[i].key)
                        t->sort = (Sort)i;
        return true;
}

int cmd_top(const Opts *o) {
        Top t = { .o = o, .tty = isatty(STDOUT_FILENO), .fd = -1 };
        struct sigaction sa = { .sa_handler = on_stop }; /* no SA_RESTART: poll returns */
        unsigned long frames = 0;

        if (o->sort) {
                size_t i = 0;
                while (i < ELEMENTSOF(sorts) && strcmp(o->sort, sorts[i].name) != 0)
                        i++;
                if (i == ELEMENTSOF(sorts)) {
                        fprintf(stderr, "zswapctl: --sort takes evicted, resident, pool, faults or pid, not '%s'\n",
                                o->sort);
                        return 2;
                }
                t.sort = (Sort)i;
        }
        /* the first connection fails as any command does, before the screen is taken */
        connect_again(&t);
        if (t.fd < 0) {
                fprintf(stderr, "%s\n", t.why);
                return 1;
        }
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        sa.sa_handler = on_winch;
        sigaction(SIGWINCH, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        if (t.tty)
                terminal_enter(&t);

        while (!stop_signal) {
                connect_again(&t);
                if (t.fd >= 0 && !frame(&t)) {
                        close(t.fd);
                        t.fd = -1;
                }
                if (t.fd < 0)
                        gone(&t);
                if (o->iterations && ++frames >= o->iterations)
                        break;
                /* wait the period, or less for a key or a resize */
                struct timespec start, now;
                clock_gettime(CLOCK_MONOTONIC, &start);
                bool redraw = false, quit = false;
                while (!redraw && !quit && !stop_signal) {
                        clock_gettime(CLOCK_MONOTONIC, &now);
                        double left = o->delay - since(&start, &now);
                        if (left <= 0)
                                break;
                        struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
                        int r = poll(&p, t.keys ? 1 : 0, (int)(left * 1000) + 1);
                        if (r < 0 && errno == EINTR && resized) {
                                resized = 0;
                                redraw = true;
                        }
                        if (r > 0 && (p.revents & POLLIN)) {
                                char k;
                                if (read(STDIN_FILENO, &k, 1) == 1) {
                                        quit = !key(&t, k);
                                        redraw = true;
                                }
                        } else if (r > 0) {
                                t.keys = false; /* stdin hung up: no more keys */
                        }
                }
                if (quit)
                        break;
        }
        if (t.tty)
                terminal_leave(&t);
        if (t.fd >= 0)
                close(t.fd);
        free(t.seen);
        return 0;
}
