/*
 * libzswap.c: the public API (include/zswap.h), and the calls on a client
 * the layers above make beyond it (libzswap-internal.h). Every entry point
 * saves and restores errno and returns 0, a count or -errno. What a client
 * is and how its pieces fit together: client.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "macro.h"
#include "pageout-stages.h"
#include "protocol.h"
#include "util.h"
#include "zswap.h"

/* Every client of the process, for the fork handlers (fork.c): linked in
 * by zswap_connect() and out by zswap_disconnect(), both under
 * clients_lock; the fork handlers walk it holding clients_lock from
 * atfork_prepare() to atfork_parent()/atfork_child(). */
pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
struct zswap_client *clients;

_public_ int zswap_connect(const char *socket_path, struct zswap_client **ret) {
        int saved = errno, r;
        struct zswap_client *c;

        if (!ret)
                return -EINVAL;
        if (!socket_path)
                socket_path = getenv("ZSWAP_SOCKET");
        if (!socket_path || !*socket_path)
                socket_path = ZSWAP_DEFAULT_SOCKET;
        zswap_atfork_init();
        r = client_alloc(socket_path, &c);
        if (r == 0) {
                r = connect_client(c);
                if (r < 0)
                        client_free(c);
        }
        if (r == 0) {
                pthread_mutex_lock(&clients_lock);
                c->next_client = clients;
                clients = c;
                pthread_mutex_unlock(&clients_lock);
                *ret = c;
        }
        errno = saved;
        return r;
}

static int range_request(struct zswap_client *c, uint16_t type, void *addr, size_t len, int64_t *value) {
        ZMsgRange m = { .addr = (uintptr_t)addr, .len = len };

        if (!c || !addr || len == 0 || !page_aligned((uintptr_t)addr) || !page_aligned(len))
                return -EINVAL;
        zmsg_init(&m.hdr, type, 0, sizeof(m));
        return request(c, &m, sizeof(m), NULL, 0, NULL, 0, NULL, value);
}

_public_ int zswap_register(struct zswap_client *c, void *addr, size_t len) {
        int saved = errno, r;

        r = range_request(c, ZMSG_REGISTER, addr, len, NULL);
        if (r == 0) {
                pthread_mutex_lock(&c->lock);
                Range *n = c->nranges < RANGES_MAX ? zswap_mem_realloc(c->ranges, (c->nranges + 1) * sizeof(Range)) : NULL;
                if (n) {
                        c->ranges = n;
                        c->ranges[c->nranges++] = (Range){ (uintptr_t)addr, len };
                }
                pthread_mutex_unlock(&c->lock);
        }
        errno = saved;
        return r;
}

void ranges_forget(struct zswap_client *c, uint64_t addr, uint64_t len) {
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->nranges; i++) {
                Range *g = &c->ranges[i];
                if (g->addr == addr && g->len == len) {
                        *g = c->ranges[--c->nranges];
                        break;
                }
                if (addr >= g->addr && addr + len <= g->addr + g->len) {
                        /* a part: keep the rest (the tail becomes its own range) */
                        uint64_t tail = g->addr + g->len - (addr + len);
                        g->len = addr - g->addr;
                        Range *n = tail ? zswap_mem_realloc(c->ranges, (c->nranges + 1) * sizeof(Range)) : NULL;
                        if (n) {
                                c->ranges = n;
                                c->ranges[c->nranges++] = (Range){ addr + len, tail };
                        }
                        if (c->ranges[i].len == 0)
                                c->ranges[i] = c->ranges[--c->nranges];
                        break;
                }
        }
        pthread_mutex_unlock(&c->lock);
}

int zswap_client_regions(struct zswap_client *c, uint64_t from, ZswapSpan spans[ZSWAP_REGIONS_BATCH],
                         uint64_t *next) {
        _Static_assert(ZSWAP_REGIONS_BATCH == ZSWAP_REGIONS_PER_MSG, "one reply fills the caller's spans");
        ZMsgRange m = { .addr = from, .len = 0 };
        ZMsgRegionsReply rep;
        int saved = errno, r;

        memset(&rep, 0, sizeof(rep));
        zmsg_init(&m.hdr, ZMSG_REGIONS, 0, sizeof(m));
        r = request(c, &m, sizeof(m), NULL, 0, &rep, sizeof(rep), NULL, NULL);
        errno = saved;
        if (r < 0)
                return r;
        if (rep.hdr.type != ZMSG_REGIONS_REPLY || rep.count > ZSWAP_REGIONS_PER_MSG)
                return -EPROTO;
        /* in order, each past the one before, and a next that moves on:
         * the caller's loop ends */
        uint64_t at = from;
        for (uint32_t i = 0; i < rep.count; i++) {
                if (rep.span[i].start < at || rep.span[i].end <= rep.span[i].start)
                        return -EPROTO;
                spans[i] = (ZswapSpan){ rep.span[i].start, rep.span[i].end };
                at = rep.span[i].end;
        }
        if (rep.next && (rep.count == 0 || rep.next < at))
                return -EPROTO;
        *next = rep.next;
        return (int)rep.count;
}

uint64_t zswap_client_regions_gen(struct zswap_client *c) {
        pthread_mutex_lock(&c->lock);
        uint64_t g = c->gen << 32;
        if (c->sync)
                /* acquire: the daemon's count after its change of the regions */
                g |= atomic_load_explicit(&c->sync->regions_gen, memory_order_acquire);
        pthread_mutex_unlock(&c->lock);
        return g;
}

void zswap_client_ranges_set(struct zswap_client *c, const ZswapSpan *spans, size_t n) {
        Range *r = n ? zswap_mem_alloc(MIN(n, (size_t)RANGES_MAX) * sizeof(*r)) : NULL;

        if (n && !r)
                return; /* the old list stays: at worst a range too many is asked again */
        for (size_t i = 0; i < n && i < RANGES_MAX; i++)
                r[i] = (Range){ spans[i].start, spans[i].end - spans[i].start };
        pthread_mutex_lock(&c->lock);
        Range *old = c->ranges;
        c->ranges = r;
        c->nranges = MIN(n, (size_t)RANGES_MAX);
        pthread_mutex_unlock(&c->lock);
        zswap_mem_free(old);
}

_public_ int zswap_unregister(struct zswap_client *c, void *addr, size_t len) {
        int saved = errno, r;

        r = range_request(c, ZMSG_UNREGISTER, addr, len, NULL);
        if (r == 0)
                ranges_forget(c, (uintptr_t)addr, len);
        errno = saved;
        return r;
}

_public_ int zswap_pageout(struct zswap_client *c, void *addr, size_t len) {
        int saved = errno, r;
        int64_t value = 0;

        PAGEOUT_STAGE(PS_SENT);
        r = range_request(c, ZMSG_PAGEOUT, addr, len, &value);
        PAGEOUT_STAGES_FILE();
        errno = saved;
        if (r < 0)
                return r;
        return value > INT32_MAX ? INT32_MAX : (int)value;
}

_public_ int zswap_set_limit(struct zswap_client *c, uint64_t bytes) {
        ZMsgLimit q = { .pid = 0, .bytes = bytes };
        int saved = errno, r;

        if (!c)
                return -EINVAL;
        zmsg_init(&q.hdr, ZMSG_SET_LIMIT, 0, sizeof(q));
        r = request(c, &q, sizeof(q), NULL, 0, NULL, 0, NULL, NULL);
        if (r == 0) {
                /* a daemon that attaches us anew after a restart gets it again */
                pthread_mutex_lock(&c->lock);
                c->limit_set = true;
                c->limit_bytes = bytes;
                pthread_mutex_unlock(&c->lock);
        }
        errno = saved;
        return r;
}

int zswap_client_set_group(struct zswap_client *c, const char *name, uint64_t limit, uint64_t unmanaged) {
        ZMsgGroup q = { .limit = limit, .unmanaged = unmanaged };
        int saved = errno, r;

        if (!c || !name || strlen(name) >= sizeof(q.name))
                return -EINVAL;
        memcpy(q.name, name, strlen(name) + 1);
        zmsg_init(&q.hdr, ZMSG_SET_GROUP, 0, sizeof(q));
        r = request(c, &q, sizeof(q), NULL, 0, NULL, 0, NULL, NULL);
        if (r == 0) {
                pthread_mutex_lock(&c->lock);
                memcpy(c->group, q.name, sizeof(c->group));
                c->group_limit = limit;
                c->group_unmanaged = unmanaged;
                pthread_mutex_unlock(&c->lock);
        }
        errno = saved;
        return r;
}

_public_ int zswap_set_reconnect_timeout(struct zswap_client *c, unsigned timeout_ms) {
        if (!c)
                return -EINVAL;
        /* relaxed: a setting read once at the next loss, nothing else hangs on it */
        atomic_store_explicit(&c->reconnect_ms, timeout_ms, memory_order_relaxed);
        return 0;
}

void zswap_client_recovery(struct zswap_client *c, ZswapRecovery *ret) {
        pthread_mutex_lock(&c->lock);
        *ret = c->recovery;
        pthread_mutex_unlock(&c->lock);
}

size_t zswap_client_fds(struct zswap_client *c, int *out, size_t cap) {
        const int fds[] = { c->sock, c->uffd, c->store_fd, c->shared_fd, c->sync_fd };
        size_t n = 0;

        for (size_t i = 0; i < ELEMENTSOF(fds) && n < cap; i++)
                if (fds[i] >= 0)
                        out[n++] = fds[i];
        return n;
}

bool zswap_client_recovering(struct zswap_client *c) {
        return c && recovering(c);
}

_public_ int zswap_get_stats(struct zswap_client *c, enum zswap_stats_scope scope, struct zswap_stats *ret) {
        ZMsgStatsReq q = { .scope = (uint32_t)scope };
        ZMsgStatsReply rep;
        int saved = errno, r;

        if (!c || !ret)
                return -EINVAL;
        memset(&rep, 0, sizeof(rep));
        zmsg_init(&q.hdr, ZMSG_STATS, 0, sizeof(q));
        r = request(c, &q, sizeof(q), NULL, 0, &rep, sizeof(rep), NULL, NULL);
        if (r == 0) {
                if (rep.hdr.type != ZMSG_STATS_REPLY)
                        r = -EPROTO;
                else
                        *ret = rep.stats;
        }
        errno = saved;
        return r;
}

_public_ void zswap_disconnect(struct zswap_client *c) {
        int saved = errno;

        if (!c)
                return;
        PAGEOUT_STAGES_REPORT();
        pthread_mutex_lock(&clients_lock);
        for (struct zswap_client **p = &clients; *p; p = &(*p)->next_client)
                if (*p == c) {
                        *p = c->next_client;
                        break;
                }
        pthread_mutex_unlock(&clients_lock);
        /* every page comes back before we let go */
        for (;;) {
                Range g;
                pthread_mutex_lock(&c->lock);
                bool any = c->nranges > 0;
                if (any)
                        g = c->ranges[c->nranges - 1];
                pthread_mutex_unlock(&c->lock);
                if (!any)
                        break;
                int r = range_request(c, ZMSG_UNREGISTER, (void *)(uintptr_t)g.addr, g.len, NULL);
                if (r < 0) {
                        /* The daemon is gone or not answering: our uffd must
                         * stay open, so that the memory stays registered and
                         * an evicted page waits rather than reading as zeros.
                         * Any other refusal (the program unmapped part of the
                         * range itself, say) leaves nothing of ours held
                         * there: the daemon restores every page it holds for
                         * us when the connection closes. */
                        bool gone = r == -ENOTCONN || r == -ETIMEDOUT || r == -ECONNRESET || r == -EPIPE;
                        pthread_mutex_lock(&c->lock);
                        c->nranges--;
                        if (gone)
                                c->keep_uffd = true;
                        pthread_mutex_unlock(&c->lock);
                        continue;
                }
                ranges_forget(c, g.addr, g.len);
        }
        client_free(c);
        errno = saved;
}
