/*
 * store.c: see store.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "macro.h"
#include "store.h"
#include "util.h"

#define ZONE_SIZE ((uint64_t)STORE_LEAF_ENTRIES * ZSWAP_PAGE_SIZE)
#define HANDLE_UNITS_SHIFT (STORE_SPAN_SHIFT - STORE_UNIT_SHIFT)
#define CHUNK_MIN_SIZE 4096u

static StoreClass classes[STORE_NR_CLASSES];
static pthread_once_t classes_once = PTHREAD_ONCE_INIT;

/*
 * Each class's chunk size, a multiple of 4 KiB. A class loses memory two
 * ways: the tail of each chunk its objects do not fill (a share of all
 * its bytes), and the free slots of its last chunk, half a chunk on
 * average whatever it holds. The chunk chosen costs least for a class of
 * CLASS_BYTES of objects: tail * CLASS_BYTES / cs + cs / 2, compared
 * multiplied out in integers (every binary that reads a store gets the
 * same table). On the corpus's heap pages that fits a pool of 16 MiB to
 * 512 MiB of pages better than the least tail alone, most for the small
 * pools every client has of its own.
 *
 * It is never larger than the power of two from 4 to 64 KiB with the
 * least tail, the chunk size earlier versions gave the class: their
 * libzswap (still mapped in a program started before an upgrade) checks
 * a slot by its own chunk size when it restores a store this daemon left
 * (store_object() now checks by the span), so no object may sit past it.
 * On the corpus that costs nothing.
 */
#define CLASS_BYTES (640u << 10)

/* The power of two from 4 to 64 KiB whose tail is the smallest share of
 * it (ties: the smaller). */
static uint32_t least_tail_pow2(uint32_t size) {
        uint32_t best = 0, best_waste = 0;

        for (uint32_t cs = CHUNK_MIN_SIZE; cs <= (1u << STORE_SPAN_SHIFT); cs *= 2) {
                uint32_t waste = cs - MIN(cs / size, (uint32_t)STORE_CHUNK_MAX_SLOTS) * size;
                if (best == 0 || (uint64_t)waste * best < (uint64_t)best_waste * cs) {
                        best = cs;
                        best_waste = waste;
                }
        }
        return best;
}

static void classes_init(void) {
        for (unsigned k = 0; k < STORE_NR_CLASSES; k++) {
                uint32_t size = (k + 1) << STORE_UNIT_SHIFT, best = 0, max = least_tail_pow2(size);
                uint64_t best_cost = 0;

                for (uint32_t cs = CHUNK_MIN_SIZE; cs <= max; cs += CHUNK_MIN_SIZE) {
                        uint32_t n = MIN(cs / size, (uint32_t)STORE_CHUNK_MAX_SLOTS);
                        /* cost * cs * 2, compared across chunk sizes by
                         * cross-multiplying: below 2^63 */
                        uint64_t cost = 2ull * CLASS_BYTES * (cs - n * size) + (uint64_t)cs * cs;

                        /* ties go to the smaller chunk */
                        if (best == 0 || cost * best < best_cost * cs) {
                                best = cs;
                                best_cost = cost;
                        }
                }
                classes[k] = (StoreClass){ .size = size, .chunk_size = best,
                                           .nr_slots = MIN(best / size, (uint32_t)STORE_CHUNK_MAX_SLOTS) };
        }
}

const StoreClass *store_class(unsigned k) {
        pthread_once(&classes_once, classes_init);
        return k < STORE_NR_CLASSES ? &classes[k] : NULL;
}

int store_create(uint32_t codec, uint32_t features, uint64_t daemon_id, uint8_t **map) {
        /* named for what it is in /proc/PID/fd: a client's, or its user's
         * shared store */
        _cleanup_close_ int fd = memfd_create((features & STORE_F_SHARED) ? "zswapd-shared" : "zswapd-store",
                                              MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)STORE_SIZE) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return -errno;
        void *m = mmap(NULL, STORE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (m == MAP_FAILED)
                return -errno;
        StoreSuper *s = m;
        s->magic = STORE_MAGIC;
        s->version = STORE_VERSION;
        s->super_size = sizeof(StoreSuper);
        s->size = STORE_SIZE;
        s->codec = codec;
        s->features = features;
        s->daemon_id = daemon_id;
        atomic_store_explicit(&s->state, STORE_ACTIVE, memory_order_release);
        *map = m;
        return TAKE_FD(fd);
}

int store_reopen_ro(int fd) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        int ro = open(path, O_RDONLY | O_CLOEXEC);
        return ro < 0 ? -errno : ro;
}

int store_map(int fd, bool writable, uint8_t **map) {
        struct stat st;
        int seals = fcntl(fd, F_GET_SEALS);

        if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
            (uint64_t)st.st_size != STORE_SIZE)
                return -EBADF;
        void *m = mmap(NULL, STORE_SIZE, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (m == MAP_FAILED)
                return -errno;
        *map = m;
        return 0;
}

void store_unmap(uint8_t *map) {
        if (map)
                munmap(map, STORE_SIZE);
}

int store_check(const uint8_t *map, char *why, size_t len) {
        const StoreSuper *s = (const StoreSuper *)map;
        const char *bad = NULL;

        /* relaxed: the writer is gone or is the client itself; each field is
         * checked on its own, and later readers check what they use again */
        if (s->magic != STORE_MAGIC)
                bad = "bad magic";
        else if (s->version < STORE_VERSION || s->version > STORE_VERSION_SHARED ||
                 s->super_size != sizeof(StoreSuper))
                bad = "another version";
        else if (s->size != STORE_SIZE)
                bad = "bad size";
        else if (s->codec > CODEC_ZSTD)
                bad = "unknown codec";
        else if (s->features & ~(STORE_F_WP_ASYNC | STORE_F_SHARED))
                bad = "unknown features";
        else if (atomic_load_explicit(&((StoreSuper *)s)->ranges_cur, memory_order_relaxed) > 1)
                bad = "bad range table index";
        else if (atomic_load_explicit(&((StoreSuper *)s)->leaves, memory_order_relaxed) > STORE_LEAVES_MAX)
                bad = "bad leaf count";
        else {
                uint32_t st = atomic_load_explicit(&((StoreSuper *)s)->state, memory_order_relaxed);
                if (st != STORE_ACTIVE && st != STORE_RELEASED)
                        bad = "bad state";
        }
        if (!bad)
                return 0;
        if (why)
                snprintf(why, len, "%s", bad);
        return -EBADMSG;
}

_Static_assert(STORE_JOURNAL_OFF >= sizeof(StoreSuper) && STORE_JOURNAL_OFF + sizeof(struct uffd_msg) <= STORE_SUPER_SIZE,
               "the journal lies in the superblock's page, after the superblock");

static bool span_ok(uint64_t start, uint64_t len) {
        return start % ZSWAP_PAGE_SIZE == 0 && len % ZSWAP_PAGE_SIZE == 0 && len > 0 && start < PINDEX_MAX_ADDR &&
               len <= PINDEX_MAX_ADDR - start;
}

int store_journal_event(const uint8_t *map, StoreEvent *ev) {
        struct uffd_msg m;

        /* a copy: the store may be written behind our back (a root client) */
        memcpy(&m, map + STORE_JOURNAL_OFF, sizeof(m));
        switch (m.event) {
        case 0:
        case UFFD_EVENT_PAGEFAULT:
        case UFFD_EVENT_FORK:
                return 0;
        case UFFD_EVENT_REMOVE:
        case UFFD_EVENT_UNMAP:
                if (m.arg.remove.end <= m.arg.remove.start ||
                    !span_ok(m.arg.remove.start, m.arg.remove.end - m.arg.remove.start))
                        return -EBADMSG;
                *ev = (StoreEvent){ m.arg.remove.start, m.arg.remove.end, STORE_EVENT_GONE,
                                    m.event == UFFD_EVENT_UNMAP };
                return 1;
        case UFFD_EVENT_REMAP: {
                uint64_t from = m.arg.remap.from, to = m.arg.remap.to, len = m.arg.remap.len;
                if (!span_ok(from, len) || !span_ok(to, len) || (to < from + len && from < to + len))
                        return -EBADMSG;
                *ev = (StoreEvent){ from, from + len, to, true };
                return 1;
        }
        default:
                return -EBADMSG;
        }
}

int store_ranges(uint8_t *map, StoreRange *out, size_t max) {
        StoreSuper *s = store_super(map);
        /* acquire: pairs with store_set_ranges(), the copy is complete */
        uint32_t cur = atomic_load_explicit(&s->ranges_cur, memory_order_acquire);
        if (cur > 1)
                return -EBADMSG;
        uint32_t n = atomic_load_explicit(&s->nranges[cur], memory_order_relaxed);
        const StoreRange *t = (const StoreRange *)(map + STORE_RANGES_OFF) + (size_t)cur * STORE_RANGES_MAX;
        if (n > STORE_RANGES_MAX || n > max)
                return -EBADMSG;
        uint64_t prev_end = 0;
        for (uint32_t i = 0; i < n; i++) {
                StoreRange r = t[i];
                if (r.start == 0 || r.start % ZSWAP_PAGE_SIZE || r.end % ZSWAP_PAGE_SIZE || r.end <= r.start ||
                    r.end > PINDEX_MAX_ADDR || r.start < prev_end)
                        return -EBADMSG;
                out[i] = r;
                prev_end = r.end;
        }
        return (int)n;
}

StoreRange *store_ranges_begin(uint8_t *map) {
        uint32_t next = 1 - atomic_load_explicit(&store_super(map)->ranges_cur, memory_order_relaxed);
        return (StoreRange *)(map + STORE_RANGES_OFF) + (size_t)next * STORE_RANGES_MAX;
}

void store_ranges_commit(uint8_t *map, size_t n) {
        StoreSuper *s = store_super(map);
        uint32_t next = 1 - atomic_load_explicit(&s->ranges_cur, memory_order_relaxed);

        atomic_store_explicit(&s->nranges[next], (uint32_t)MIN(n, (size_t)STORE_RANGES_MAX), memory_order_relaxed);
        /* release: the copy before the index that makes it current */
        atomic_store_explicit(&s->ranges_cur, next, memory_order_release);
}

int store_object(uint8_t *map, uint32_t handle, uint32_t clen, const void **obj, unsigned *cls) {
        uint32_t id = handle >> HANDLE_UNITS_SHIFT;
        uint32_t off = (handle & ((1u << HANDLE_UNITS_SHIFT) - 1)) << STORE_UNIT_SHIFT;

        if (id == 0 || id >= STORE_POOL_IDS)
                return -EBADMSG;
        /* relaxed: a value like any other, checked before use */
        uint16_t c = atomic_load_explicit(&store_chunk_class(map)[id], memory_order_relaxed);
        if (c == 0 || c > STORE_NR_CLASSES)
                return -EBADMSG;
        /* by the class's object size, not its chunk size: a store made by
         * a daemon whose classes had other chunk sizes is adopted whole. A
         * slot is anywhere in the chunk's span */
        const StoreClass *k = store_class(c - 1u);
        if (off % k->size || off / k->size >= STORE_CHUNK_MAX_SLOTS || off + k->size > (1u << STORE_SPAN_SHIFT) ||
            clen == 0 || clen > k->size)
                return -EBADMSG;
        *obj = store_pool(map) + ((uint64_t)id << STORE_SPAN_SHIFT) + off;
        if (cls)
                *cls = c - 1u;
        return 0;
}

bool store_data_at(StoreData *d, uint64_t off) {
        if (!d || d->fd < 0)
                return true;
        if (off >= d->from && off < d->to)
                return d->data;
        off_t s = lseek(d->fd, (off_t)off, SEEK_DATA);
        d->from = off;
        if (s < 0) {
                /* ENXIO: no data from here to the end; anything else: read nothing */
                d->to = errno == ENXIO ? UINT64_MAX : off + 1;
                d->data = false;
        } else if ((uint64_t)s > off) {
                d->to = (uint64_t)s;
                d->data = false;
        } else {
                off_t e = lseek(d->fd, (off_t)off, SEEK_HOLE);
                d->to = e > (off_t)off ? (uint64_t)e : off + 1;
                d->data = e > (off_t)off;
        }
        return d->data;
}

bool store_object_data(StoreData *d, uint32_t handle, uint32_t clen) {
        uint32_t id = handle >> HANDLE_UNITS_SHIFT;
        uint64_t off = (uint64_t)(handle & ((1u << HANDLE_UNITS_SHIFT) - 1)) << STORE_UNIT_SHIFT;

        if (!d || d->fd < 0 || id == 0 || id >= STORE_POOL_IDS || clen == 0 || clen > ZSWAP_PAGE_SIZE)
                return true;
        uint64_t obj = STORE_POOL_OFF + ((uint64_t)id << STORE_SPAN_SHIFT) + off;
        /* an object spans two pages at most: both ends tell */
        return store_data_at(d, STORE_CLASS_OFF + (uint64_t)id * 2) && store_data_at(d, obj) &&
               store_data_at(d, obj + clen - 1);
}

int store_walk(uint8_t *map, StoreEntryFn fn, void *ud) {
        return store_walk_data(map, NULL, fn, ud);
}

int store_walk_data(uint8_t *map, StoreData *data, StoreEntryFn fn, void *ud) {
        StoreSuper *s = store_super(map);
        uint32_t nl = atomic_load_explicit(&s->leaves, memory_order_acquire);
        _Atomic uint64_t *dir = store_dir(map);
        _cleanup_free_ uint64_t *zones = NULL;
        size_t nz = 0;

        if (nl > STORE_LEAVES_MAX)
                return -EBADMSG;
        zones = malloc((size_t)MAX(nl, 1u) * sizeof(*zones));
        if (!zones)
                return -ENOMEM;
        /* every directory slot checked before any entry is looked at */
        for (uint32_t i = 0; i < nl; i++) {
                if (!store_data_at(data, STORE_DIR_OFF + (uint64_t)i * 8))
                        continue; /* a hole: zero */
                uint64_t d = atomic_load_explicit(&dir[i], memory_order_acquire);
                if (d == 0)
                        continue;
                uint64_t zone = d & ~STORE_DIR_USED;
                if (!(d & STORE_DIR_USED) || zone % ZONE_SIZE || zone >= PINDEX_MAX_ADDR)
                        return -EBADMSG;
                zones[nz++] = zone;
        }
        qsort(zones, nz, sizeof(*zones), cmp_u64);
        for (size_t i = 1; i < nz; i++)
                if (zones[i] == zones[i - 1])
                        return -EBADMSG;
        for (uint32_t i = 0; i < nl; i++) {
                if (!store_data_at(data, STORE_DIR_OFF + (uint64_t)i * 8))
                        continue;
                uint64_t d = atomic_load_explicit(&dir[i], memory_order_acquire);
                if (d == 0 || !store_data_at(data, STORE_LEAF_OFF + (uint64_t)i * 4096))
                        continue; /* unused, or a leaf never written: no entry */
                uint64_t zone = d & ~STORE_DIR_USED;
                _Atomic uint64_t *leaf = store_leaf(map, i);
                for (unsigned j = 0; j < STORE_LEAF_ENTRIES; j++) {
                        if (atomic_load_explicit(&leaf[j], memory_order_acquire) == 0)
                                continue;
                        int r = fn(ud, zone + (uint64_t)j * ZSWAP_PAGE_SIZE, &leaf[j]);
                        if (r)
                                return r;
                }
        }
        return 0;
}

int store_check_shared(const uint8_t *shared, const uint8_t *member, char *why, size_t len) {
        const StoreSuper *s = (const StoreSuper *)shared, *m = (const StoreSuper *)member;
        int r = store_check(shared, why, len);

        if (r < 0)
                return r;
        /* relaxed loads: both written once, before what names them */
        uint32_t tag = __atomic_load_n(&m->shared_tag, __ATOMIC_RELAXED);
        const char *bad = NULL;
        if (!(s->features & STORE_F_SHARED))
                bad = "its shared store is not one";
        else if (tag == 0 || __atomic_load_n(&s->shared_tag, __ATOMIC_RELAXED) != tag)
                bad = "its shared store is another one";
        else if (s->codec != m->codec)
                bad = "its shared store is of another codec";
        if (!bad)
                return 0;
        if (why)
                snprintf(why, len, "%s", bad);
        return -EBADMSG;
}

int store_dict(uint8_t *map, uint8_t *buf) {
        const StoreSuper *s = store_super(map);
        /* relaxed: written once before the version that says so, which the
         * caller read (store_check()); checked like every other value */
        uint32_t len = __atomic_load_n(&s->dict_len, __ATOMIC_RELAXED);

        if (s->version < STORE_VERSION_DICT || len == 0)
                return 0;
        if (len > CODEC_DICT_MAX || len > STORE_DICT_OBJS * ZSWAP_PAGE_SIZE)
                return -EBADMSG;
        for (uint32_t off = 0, i = 0; off < len; off += ZSWAP_PAGE_SIZE, i++) {
                uint32_t n = MIN(len - off, (uint32_t)ZSWAP_PAGE_SIZE);
                const void *obj;
                if (store_object(map, __atomic_load_n(&s->dict_handle[i], __ATOMIC_RELAXED), n, &obj, NULL) < 0)
                        return -EBADMSG;
                memcpy(buf + off, obj, n);
        }
        return (int)len;
}

int store_entry_content(uint8_t *map, uint8_t *shared, CodecDCtx *dctx, const CodecDict *dict, uint64_t e,
                        void *page) {
        if (pe_state(e) == PE_LOADING)
                e = pe_loading_origin(e);
        else if (pe_state(e) == PE_CLEAN)
                e = pe_clean_origin(e);
        if (pe_state(e) == PE_SAME) {
                page_fill(page, pe_fill(e));
                return 1;
        }
        if (pe_state(e) != PE_STORED)
                return 0;
        if ((e & PE_SHARED) && (!shared || (e & (PE_TIER | PE_DICT))))
                return -EBADMSG; /* no such entry is made */
        if (pe_is_tier(e))
                return -EREMOTE; /* on the daemon's second tier: only a daemon can read it */
        const void *obj;
        uint8_t copy[(size_t)STORE_NR_CLASSES << STORE_UNIT_SHIFT];
        uint32_t clen = pe_clen(e);
        if (store_object((e & PE_SHARED) ? shared : map, pe_handle(e), clen, &obj, NULL) < 0)
                return -EBADMSG;
        if (clen == ZSWAP_PAGE_SIZE) {
                memcpy(page, obj, ZSWAP_PAGE_SIZE); /* kept as it was */
                return 1;
        }
        /* decompress from a private copy: somebody may be writing the
         * object while we read it */
        memcpy(copy, obj, clen);
        return pe_decompress(dctx, dict, e, copy, clen, page) < 0 ? -EBADMSG : 1;
}
