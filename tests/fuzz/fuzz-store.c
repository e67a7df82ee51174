/*
 * fuzz-store.c: a client's store (common/store.h) as a new daemon and
 * libzswap's fallback read it after the daemon that wrote it died.
 *
 * The store is a memfd the client keeps; a client that can write it (one
 * running as the daemon's user) must only ever hurt itself. Every reader
 * of a store handed back is run here on a store image the input writes
 * (fuzz-store.h gives the format): the superblock, both copies of the
 * range table, leaf directory slots, leaf entries, chunk class slots and
 * pool bytes, anywhere in the file's 68 GiB.
 *
 * The store is a real one, made once by store_create() and reused: after
 * each input everything past the superblock is punched out again
 * (FALLOC_FL_PUNCH_HOLE), which also frees what the readers faulted in,
 * and the superblock page is rewritten whole. What the input wrote is
 * also kept aside (last write wins), and from that alone a model of the
 * store says what every reader must answer:
 *
 *  - store_check(): 0 exactly for a valid superblock, else -EBADMSG with a
 *    reason in why[] (cut to any length, NUL-terminated);
 *  - store_ranges() (and adopt_ranges()): the current table exactly when it
 *    is sorted, page aligned, non-overlapping, non-empty ranges in
 *    (0, 2^48] that fit the room given, else -EBADMSG; out[] written no
 *    further than its count (ASan: an array of exactly the room given);
 *  - store_walk(): -EBADMSG for a bad directory slot or a zone named twice,
 *    before any entry is seen; else every non-zero entry of every used
 *    leaf once, with the address its slot and index say;
 *  - store_object(), for every entry's handle and length whatever its
 *    state: 0 exactly when the model finds the chunk's class and the slot
 *    valid, and then a pointer inside the pool area, at a slot boundary
 *    of that class, the object wholly inside its chunk (whose bytes are
 *    all read, as adopt_cb() copies them);
 *  - store_entry_content(): 0, 1, -EBADMSG or -EREMOTE (a second-tier stub) only, as the entry's state
 *    says; SAME pages filled; raw objects copied; a compressed object
 *    gives what codec_decompress() of it gives (lz4 or zstd, the store's
 *    codec), into a page between guard pages (the codecs are the system's
 *    libraries, which ASan does not see);
 *  - adopt_check() (daemon/manager/adopt.c), with a daemon the header describes:
 *    store_check()'s answer, then -ENOENT, -EBUSY, -EBADMSG or 0 as
 *    adopt.h says, why[] filled when not 0;
 *  - zswap_store_restore() (client/lib/restore.c), the client's own restore,
 *    with no userfaultfd (-1): it walks the store as it would, skipping a
 *    bad directory slot instead of refusing the store, and every install
 *    fails: it must return store_check()'s answer, count as bad exactly
 *    the bad slots, the entries whose content fails and the staged pages
 *    whose slot is out of range, as gone every entry it would have
 *    installed, and nothing restored, present or forked.
 *
 * The superblock is not required to pass store_check() for the range
 * table and the walk to be read: both check what they use themselves.
 * adopt_entries() needs a live client (its pagemap, a pool) and is not
 * called; what it reads of the old store is what the walk callback reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "adopt.h"
#include "codec.h"
#include "fuzz-store.h"
#include "fuzz.h"
#include "libzswap-internal.h"
#include "macro.h"
#include "manager.h"
#include "store.h"
#include "util.h"

#define ZONE_SIZE ((uint64_t)STORE_LEAF_ENTRIES * ZSWAP_PAGE_SIZE)
#define MAX_INPUT (64u << 10)
#define FILL_BUDGET (4u * STORE_RANGES_MAX) /* writes the FS_OP_FILL records of one input may make */
#define FAKE_DAEMON_ID 0x5a5a5a5a12345678ull

/* ---- the store, made once ---- */

static int store_fd = -1;
static uint8_t *map;
static CodecDCtx *dctx[CODEC_ZSTD + 1];
static uint8_t *guard_page[2]; /* 4 KiB each, between inaccessible pages */

static uint8_t *guarded_page(void) {
        uint8_t *p = mmap(NULL, 3 * ZSWAP_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        FUZZ_CHECK(p != MAP_FAILED, "mmap: %m");
        FUZZ_CHECK(mprotect(p, ZSWAP_PAGE_SIZE, PROT_NONE) == 0 &&
                           mprotect(p + 2 * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, PROT_NONE) == 0,
                   "mprotect: %m");
        return p + ZSWAP_PAGE_SIZE;
}

static void setup(void) {
        if (map)
                return;
        store_fd = store_create(CODEC_LZ4, 0, 1, &map);
        FUZZ_CHECK(store_fd >= 0, "store_create: %s", strerror(-store_fd));
        for (int k = 0; k <= CODEC_ZSTD; k++)
                FUZZ_CHECK(codec_dctx_new((CodecKind)k, &dctx[k]) == 0, "codec_dctx_new(%d)", k);
        guard_page[0] = guarded_page();
        guard_page[1] = guarded_page();

        /* the class geometry store_object() checks by: what pool.c relies on */
        for (unsigned k = 0; k < STORE_NR_CLASSES; k++) {
                const StoreClass *c = store_class(k);
                FUZZ_CHECK(c && c->size == (k + 1) << STORE_UNIT_SHIFT && c->chunk_size >= 4096 &&
                                   c->chunk_size <= (1u << STORE_SPAN_SHIFT) && c->chunk_size % 4096 == 0 &&
                                   c->nr_slots >= 1 &&
                                   c->nr_slots <= STORE_CHUNK_MAX_SLOTS &&
                                   (uint64_t)c->nr_slots * c->size <= c->chunk_size,
                           "class %u: size %u chunk %u slots %u", k, c ? c->size : 0, c ? c->chunk_size : 0,
                           c ? c->nr_slots : 0);
                /* no slot past those of the chunk earlier versions gave the
                 * class (the power of two with the least tail), by which
                 * their libzswap checks a store it restores */
                uint32_t old = 0;
                for (uint32_t cs = 4096; cs <= (1u << STORE_SPAN_SHIFT); cs *= 2) {
                        uint32_t n = MIN(cs / c->size, (uint32_t)STORE_CHUNK_MAX_SLOTS), on = MIN(old / c->size, (uint32_t)STORE_CHUNK_MAX_SLOTS);
                        if (!old || (uint64_t)(cs - n * c->size) * old < (uint64_t)(old - on * c->size) * cs)
                                old = cs;
                }
                FUZZ_CHECK(c->nr_slots <= MIN(old / c->size, (uint32_t)STORE_CHUNK_MAX_SLOTS),
                           "class %u: %u slots, more than an older library's %u", k, c->nr_slots,
                           MIN(old / c->size, (uint32_t)STORE_CHUNK_MAX_SLOTS));
        }
        FUZZ_CHECK(store_class(STORE_NR_CLASSES) == NULL, "a class past the last");
}

/* [off, off + len) and the rest of its pages: punching part of a page
 * zeroes that part and keeps the page */
static void punch(uint64_t off, uint64_t len) {
        if (len == 0)
                return;
        len = ALIGN_TO(off + len, (uint64_t)ZSWAP_PAGE_SIZE) - (off & ~(ZSWAP_PAGE_SIZE - 1));
        off &= ~(ZSWAP_PAGE_SIZE - 1);
        FUZZ_CHECK(fallocate(store_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0,
                   "punch %#llx+%#llx: %m", (unsigned long long)off, (unsigned long long)len);
}

/* ---- what the input wrote: (key, value), the last write of a key wins ---- */

typedef struct Write {
        uint64_t key, value;
        uint32_t seq;
} Write;

typedef struct Writes {
        Write *w;
        size_t n;
} Writes;

static int cmp_write(const void *a, const void *b) {
        const Write *x = a, *y = b;
        if (x->key != y->key)
                return x->key < y->key ? -1 : 1;
        return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* sorted by key, one per key: the last written */
static void writes_final(Writes *ws) {
        size_t out = 0;

        qsort(ws->w, ws->n, sizeof(*ws->w), cmp_write);
        for (size_t i = 0; i < ws->n; i++) {
                if (out > 0 && ws->w[out - 1].key == ws->w[i].key)
                        ws->w[out - 1] = ws->w[i];
                else
                        ws->w[out++] = ws->w[i];
        }
        ws->n = out;
}

static uint64_t writes_get(const Writes *ws, uint64_t key) {
        size_t lo = 0, hi = ws->n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (ws->w[mid].key < key)
                        lo = mid + 1;
                else if (ws->w[mid].key > key)
                        hi = mid;
                else
                        return ws->w[mid].value;
        }
        return 0; /* a hole reads zeros */
}

typedef struct Model {
        FuzzStoreHdr h;
        StoreSuper s;
        Writes ranges; /* key: copy << 32 | index; value: index into rvals */
        StoreRange *rvals;
        Writes dir;     /* key: slot */
        Writes entries; /* key: leaf << 9 | index */
        Writes classes; /* key: chunk id */
        Writes pool;    /* key: file offset; value: length (not a map: every write) */
        uint8_t jevent; /* the journal's last write */
        uint64_t jarg[3];
} Model;

/* ---- the input ---- */

static uint64_t get(const uint8_t **p, size_t n) {
        uint64_t v = 0;
        memcpy(&v, *p, n); /* little endian */
        *p += n;
        return v;
}

static void add(Writes *ws, uint64_t key, uint64_t value) {
        ws->w[ws->n] = (Write){ .key = key, .value = value, .seq = (uint32_t)ws->n };
        ws->n++;
}

static void build(Model *m, const uint8_t *data, size_t size) {
        const uint8_t *p = data + MIN(size, (size_t)FUZZ_STORE_HDR_SIZE), *end = data + size;
        size_t maxrec = size / 2 + 1 + FILL_BUDGET, fill_left = FILL_BUDGET;
        StoreSuper *s = &m->s;

        memcpy(&m->h, data, MIN(size, (size_t)FUZZ_STORE_HDR_SIZE));
        *s = (StoreSuper){
                .magic = STORE_MAGIC ^ m->h.magic_x,
                .version = STORE_VERSION ^ m->h.version_x,
                .super_size = (uint32_t)sizeof(StoreSuper) ^ m->h.super_size_x,
                .size = STORE_SIZE ^ m->h.size_x,
                .codec = m->h.codec,
                .features = m->h.features,
                .daemon_id = m->h.daemon_id,
                .state = STORE_ACTIVE ^ m->h.state_x,
                .ranges_cur = m->h.ranges_cur,
                .nranges = { m->h.nranges[0], m->h.nranges[1] },
                .leaves = m->h.leaves,
        };
        memset(map, 0, STORE_SUPER_SIZE);
        memcpy(map, s, sizeof(*s));

        m->ranges.w = calloc(maxrec, sizeof(Write));
        m->rvals = calloc(maxrec, sizeof(StoreRange));
        m->dir.w = calloc(maxrec, sizeof(Write));
        m->entries.w = calloc(maxrec, sizeof(Write));
        m->classes.w = calloc(maxrec, sizeof(Write));
        m->pool.w = calloc(maxrec, sizeof(Write));
        FUZZ_CHECK(m->ranges.w && m->rvals && m->dir.w && m->entries.w && m->classes.w && m->pool.w, "calloc");

        while (p < end) {
                unsigned op = *p >= FS_OP_JOURNAL_BYTE ? FS_OP_JOURNAL
                              : *p >= FS_OP_FILL_BYTE  ? FS_OP_FILL
                                                       : *p % FS_OP_JOURNAL;
                p++;
                size_t left = (size_t)(end - p);

                switch (op) {
                case FS_OP_RANGE: {
                        if (left < 19)
                                return;
                        unsigned copy = (unsigned)get(&p, 1) & 1, idx = (unsigned)get(&p, 2) % STORE_RANGES_MAX;
                        StoreRange r = { .start = get(&p, 8), .end = get(&p, 8) };
                        memcpy((StoreRange *)(map + STORE_RANGES_OFF) + (size_t)copy * STORE_RANGES_MAX + idx, &r,
                               sizeof(r));
                        m->rvals[m->ranges.n] = r;
                        add(&m->ranges, (uint64_t)copy << 32 | idx, m->ranges.n);
                        break;
                }
                case FS_OP_DIR: {
                        if (left < 12)
                                return;
                        uint32_t slot = (uint32_t)get(&p, 4) % STORE_LEAVES_MAX;
                        uint64_t v = get(&p, 8);
                        atomic_store_explicit(&store_dir(map)[slot], v, memory_order_relaxed);
                        add(&m->dir, slot, v);
                        break;
                }
                case FS_OP_ENTRY: {
                        if (left < 14)
                                return;
                        uint32_t leaf = (uint32_t)get(&p, 4) % STORE_LEAVES_MAX;
                        unsigned j = (unsigned)get(&p, 2) % STORE_LEAF_ENTRIES;
                        uint64_t v = get(&p, 8);
                        atomic_store_explicit(&store_leaf(map, leaf)[j], v, memory_order_relaxed);
                        add(&m->entries, (uint64_t)leaf << 9 | j, v);
                        break;
                }
                case FS_OP_CLASS: {
                        if (left < 6)
                                return;
                        uint32_t id = (uint32_t)get(&p, 4) % STORE_POOL_IDS;
                        uint16_t v = (uint16_t)get(&p, 2);
                        atomic_store_explicit(&store_chunk_class(map)[id], v, memory_order_relaxed);
                        add(&m->classes, id, v);
                        break;
                }
                case FS_OP_OBJECT: {
                        if (left < 20)
                                return;
                        uint32_t leaf = (uint32_t)get(&p, 4) % STORE_LEAVES_MAX;
                        unsigned j = (unsigned)get(&p, 2) % STORE_LEAF_ENTRIES, how = (unsigned)get(&p, 1) % 3;
                        uint32_t id = (uint32_t)get(&p, 4) % STORE_POOL_IDS;
                        uint16_t c = (uint16_t)get(&p, 2);
                        uint32_t slot = (uint32_t)get(&p, 2), skew = (uint32_t)get(&p, 1);
                        uint32_t clen = (uint32_t)get(&p, 2) & 0x1fff;
                        size_t len = (size_t)get(&p, 2);
                        uint32_t handle = (id << (STORE_SPAN_SHIFT - STORE_UNIT_SHIFT)) + slot * c + skew;
                        uint64_t e = pe_make_stored(handle, clen);
                        uint64_t pos = STORE_POOL_OFF + ((uint64_t)handle << STORE_UNIT_SHIFT);

                        e = how == 1 ? pe_make_loading(e) : how == 2 ? pe_make_clean(e) : e;
                        atomic_store_explicit(&store_chunk_class(map)[id], c, memory_order_relaxed);
                        add(&m->classes, id, c);
                        atomic_store_explicit(&store_leaf(map, leaf)[j], e, memory_order_relaxed);
                        add(&m->entries, (uint64_t)leaf << 9 | j, e);
                        len = MIN(len, (size_t)(end - p));
                        len = MIN(len, (size_t)(STORE_SIZE - pos));
                        memcpy(map + pos, p, len);
                        p += len;
                        m->pool.w[m->pool.n++] = (Write){ .key = pos, .value = len };
                        break;
                }
                case FS_OP_JOURNAL: {
                        if (left < 25)
                                return;
                        struct uffd_msg msg = { .event = (uint8_t)get(&p, 1) };
                        uint64_t arg[3] = { get(&p, 8), get(&p, 8), get(&p, 8) };
                        memcpy(&msg.arg, arg, sizeof(arg));
                        memcpy(map + STORE_JOURNAL_OFF, &msg, sizeof(msg));
                        m->jevent = msg.event;
                        memcpy(m->jarg, arg, sizeof(arg));
                        break;
                }
                case FS_OP_FILL: {
                        if (left < 23)
                                return;
                        unsigned what = (unsigned)get(&p, 1);
                        size_t count = (size_t)get(&p, 2);
                        uint32_t first = (uint32_t)get(&p, 4);
                        uint64_t base = get(&p, 8), stride = get(&p, 4), len = get(&p, 4);
                        if (what & FS_FILL_ENTRIES) {
                                count = MIN(count % (FS_FILL_ENTRIES_MAX + 1), fill_left);
                                for (size_t i = 0; i < count; i++) {
                                        uint32_t k = first + (uint32_t)i, leaf = (k >> 9) % STORE_LEAVES_MAX;
                                        uint64_t v = base + i * stride;
                                        atomic_store_explicit(&store_leaf(map, leaf)[k & 511], v,
                                                              memory_order_relaxed);
                                        add(&m->entries, (uint64_t)leaf << 9 | (k & 511), v);
                                }
                        } else {
                                unsigned copy = what & FS_FILL_COPY;
                                StoreRange *t = (StoreRange *)(map + STORE_RANGES_OFF) + (size_t)copy * STORE_RANGES_MAX;
                                count = count % (STORE_RANGES_MAX + 2); /* one past the table: refused */
                                if (what & FS_FILL_COUNT) {
                                        /* the superblock's count too: a full table in one record */
                                        atomic_store_explicit(&s->nranges[copy], (uint32_t)count, memory_order_relaxed);
                                        memcpy(map, s, sizeof(*s));
                                }
                                count = MIN(count, fill_left);
                                for (size_t i = 0; i < count; i++) {
                                        unsigned idx = (first + (unsigned)i) % STORE_RANGES_MAX;
                                        uint64_t a = (base + i * stride) * ZSWAP_PAGE_SIZE;
                                        StoreRange r = { a, a + len * ZSWAP_PAGE_SIZE };
                                        memcpy(t + idx, &r, sizeof(r));
                                        m->rvals[m->ranges.n] = r;
                                        add(&m->ranges, (uint64_t)copy << 32 | idx, m->ranges.n);
                                }
                        }
                        fill_left -= count;
                        break;
                }
                case FS_OP_POOL: {
                        if (left < 6)
                                return;
                        uint64_t pos = STORE_POOL_OFF + ((uint64_t)(uint32_t)get(&p, 4) << STORE_UNIT_SHIFT);
                        size_t len = (size_t)get(&p, 2); /* not inside MIN(): it would read twice */
                        len = MIN(len, (size_t)(end - p));
                        len = MIN(len, (size_t)(STORE_SIZE - pos));
                        memcpy(map + pos, p, len);
                        p += len;
                        m->pool.w[m->pool.n++] = (Write){ .key = pos, .value = len };
                        break;
                }
                }
        }
}

/* ---- the model's answers ---- */

static bool model_super_ok(const StoreSuper *s) {
        return s->magic == STORE_MAGIC && s->version >= STORE_VERSION && s->version <= STORE_VERSION_SHARED &&
               s->super_size == sizeof(StoreSuper) &&
               s->size == STORE_SIZE && s->codec <= CODEC_ZSTD && !(s->features & ~(STORE_F_WP_ASYNC | STORE_F_SHARED)) &&
               s->ranges_cur <= 1 && s->leaves <= STORE_LEAVES_MAX &&
               (s->state == STORE_ACTIVE || s->state == STORE_RELEASED);
}

static StoreRange model_range(const Model *m, unsigned copy, unsigned idx) {
        size_t lo = 0, hi = m->ranges.n;
        uint64_t key = (uint64_t)copy << 32 | idx;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (m->ranges.w[mid].key < key)
                        lo = mid + 1;
                else if (m->ranges.w[mid].key > key)
                        hi = mid;
                else
                        return m->rvals[m->ranges.w[mid].value];
        }
        return (StoreRange){ 0, 0 };
}

/* the count store_ranges(max) must return, or -EBADMSG */
static int model_ranges(const Model *m, size_t max) {
        uint32_t cur = m->s.ranges_cur, n;
        uint64_t prev_end = 0;

        if (cur > 1)
                return -EBADMSG;
        n = m->s.nranges[cur];
        if (n > STORE_RANGES_MAX || n > max)
                return -EBADMSG;
        for (uint32_t i = 0; i < n; i++) {
                StoreRange r = model_range(m, cur, i);
                if (r.start == 0 || !page_aligned(r.start) || !page_aligned(r.end) || r.end <= r.start ||
                    r.end > PINDEX_MAX_ADDR || r.start < prev_end)
                        return -EBADMSG;
                prev_end = r.end;
        }
        return (int)n;
}

static bool dir_slot_ok(uint64_t d) {
        uint64_t zone = d & ~STORE_DIR_USED;
        return (d & STORE_DIR_USED) && zone % ZONE_SIZE == 0 && zone < PINDEX_MAX_ADDR;
}

/* Where handle/clen's object is, or false: the chunk's class and the slot
 * checked as store.h says (a slot of the class's size anywhere in the
 * span: a store from a daemon with other chunk sizes is read too). */
static bool model_object(const Model *m, uint32_t handle, uint32_t clen, uint64_t *off, unsigned *cls) {
        uint32_t id = handle >> (STORE_SPAN_SHIFT - STORE_UNIT_SHIFT);
        uint32_t in = (handle << STORE_UNIT_SHIFT) & ((1u << STORE_SPAN_SHIFT) - 1);

        if (id == 0 || id >= STORE_POOL_IDS)
                return false;
        uint64_t c = writes_get(&m->classes, id);
        if (c == 0 || c > STORE_NR_CLASSES)
                return false;
        const StoreClass *k = store_class((unsigned)c - 1);
        if (in % k->size || in / k->size >= STORE_CHUNK_MAX_SLOTS || in + k->size > (1u << STORE_SPAN_SHIFT) ||
            clen == 0 || clen > k->size)
                return false;
        *off = ((uint64_t)id << STORE_SPAN_SHIFT) + in;
        *cls = (unsigned)c - 1;
        return true;
}

/* What store_entry_content(e) must return, and in want[] the page when 1. */
static int model_content(const Model *m, CodecDCtx *d, uint64_t e, uint8_t *want) {
        uint8_t copy[ZSWAP_PAGE_SIZE];
        uint64_t off;
        unsigned cls;

        if (pe_state(e) == PE_LOADING)
                e = pe_loading_origin(e);
        else if (pe_state(e) == PE_CLEAN)
                e = pe_clean_origin(e);
        if (pe_state(e) == PE_SAME) {
                for (size_t i = 0; i < ZSWAP_PAGE_SIZE; i += 4)
                        memcpy(want + i, &(uint32_t){ pe_fill(e) }, 4);
                return 1;
        }
        if (pe_state(e) != PE_STORED)
                return 0;
        /* an object of a shared store (bit 26): none is given here */
        if (e & ((uint64_t)1 << 26))
                return -EBADMSG;
        if (e & PE_TIER)
                return -EREMOTE; /* the second tier's: only the daemon reads it */
        if (!model_object(m, pe_handle(e), pe_clen(e), &off, &cls))
                return -EBADMSG;
        if (pe_clen(e) == ZSWAP_PAGE_SIZE) {
                memcpy(want, store_pool(map) + off, ZSWAP_PAGE_SIZE);
                return 1;
        }
        /* the object's bytes are the input's; the model's own decoding of
         * them is the codec's answer: zstd for the strong tier's (bit 22),
         * the store's codec for the others */
        /* made with a dictionary (bit 25): the model's superblock names
         * none, so no reader can decode it */
        if (e & ((uint64_t)1 << 25))
                return -EBADMSG;
        memcpy(copy, store_pool(map) + off, pe_clen(e));
        CodecKind kind = (e & ((uint64_t)1 << 22)) ? CODEC_ZSTD : codec_dctx_kind(d);
        return codec_decompress_as(d, kind, copy, pe_clen(e), want) < 0 ? -EBADMSG : 1;
}

/* ---- the readers ---- */

static void check_super(const Model *m) {
        char why[81];
        bool ok = model_super_ok(&m->s);
        size_t len = m->h.why_len % 80 ? m->h.why_len % 80 : 80;

        memset(why, 'x', sizeof(why));
        int r = store_check(map, why, len);
        FUZZ_CHECK(r == (ok ? 0 : -EBADMSG), "store_check = %d, the model says %s", r, ok ? "valid" : "invalid");
        if (r == 0)
                FUZZ_CHECK(why[0] == 'x', "store_check wrote why[] for a valid store");
        else if (len > 0)
                FUZZ_CHECK(memchr(why, 0, len) && (len == 1 || why[0] != 0) && why[len] == 'x',
                           "store_check: why[] of %zu bytes: \"%.*s\"", len, (int)len, why);
        FUZZ_CHECK(store_check(map, NULL, 0) == r, "store_check without why[]");
}

/* What store_journal_event() must answer, from the kernel's rules: an
 * madvise() or munmap() range is page aligned and not empty, an mremap()
 * moves a page-aligned range to a disjoint one, all below 2^48. */
static int model_journal(const Model *m, StoreEvent *ev) {
        const uint64_t a = m->jarg[0], b = m->jarg[1], c = m->jarg[2], top = PINDEX_MAX_ADDR;

        switch (m->jevent) {
        case 0:
        case UFFD_EVENT_PAGEFAULT:
        case UFFD_EVENT_FORK:
                return 0;
        case UFFD_EVENT_REMOVE:
        case UFFD_EVENT_UNMAP:
                if (!page_aligned(a) || !page_aligned(b) || a >= b || b > top)
                        return -EBADMSG;
                *ev = (StoreEvent){ a, b, STORE_EVENT_GONE, m->jevent == UFFD_EVENT_UNMAP };
                return 1;
        case UFFD_EVENT_REMAP:
                if (!page_aligned(a) || !page_aligned(b) || !page_aligned(c) || c == 0 || a > top || b > top ||
                    c > top - a || c > top - b || (a < b + c && b < a + c))
                        return -EBADMSG;
                *ev = (StoreEvent){ a, a + c, b, true };
                return 1;
        default:
                return -EBADMSG;
        }
}

/* t sorted and disjoint (a table store_ranges() accepted, or one checked
 * so): with STORE_RANGES_MAX ranges a linear search per probe costs more
 * than the rest of the input */
static bool in_table(const StoreRange *t, int n, uint64_t x) {
        for (int lo = 0, hi = n; lo < hi;) {
                int mid = lo + (hi - lo) / 2;
                if (t[mid].end <= x)
                        lo = mid + 1;
                else if (t[mid].start > x)
                        hi = mid;
                else
                        return true;
        }
        return false;
}

/* Whether the page at x is in the table t (n ranges) after ev (an
 * MADV_DONTNEED leaves the table as it is). */
static bool model_in(const StoreRange *t, int n, const StoreEvent *ev, uint64_t x) {
        if (!ev->unmapped)
                return in_table(t, n, x);
        return (in_table(t, n, x) && (x < ev->start || x >= ev->end)) ||
               (ev->to != STORE_EVENT_GONE && x >= ev->to && x - ev->to < ev->end - ev->start &&
                in_table(t, n, ev->start + (x - ev->to)));
}

/* How many ranges the table after ev has: the pages in it whose page
 * below is not, among every place a range can start. */
static int model_pieces(const StoreRange *t, int n, const StoreEvent *ev) {
        uint64_t *c = malloc((3 * (size_t)n + 1) * sizeof(*c));
        size_t nc = 0;
        int pieces = 0;

        FUZZ_CHECK(c, "malloc");
        for (int i = 0; i < n; i++) {
                c[nc++] = t[i].start;
                c[nc++] = ev->end;
                if (ev->to != STORE_EVENT_GONE && t[i].end > ev->start && t[i].start < ev->end)
                        c[nc++] = ev->to + (MAX(t[i].start, ev->start) - ev->start);
        }
        qsort(c, nc, sizeof(*c), cmp_u64);
        for (size_t i = 0; i < nc; i++)
                if ((i == 0 || c[i] != c[i - 1]) && c[i] < PINDEX_MAX_ADDR && model_in(t, n, ev, c[i]) &&
                    (c[i] < ZSWAP_PAGE_SIZE || !model_in(t, n, ev, c[i] - ZSWAP_PAGE_SIZE)))
                        pieces++;
        free(c);
        return pieces;
}

/* adopt_ranges()'s table against the store's and the journal's event: at
 * every address where either changes (and a page either side), a page is
 * in it exactly when the store's table had it outside the event's range,
 * or (an mremap) had the page it came from inside; sorted, disjoint and
 * merged where they touch. */
static void check_journal_ranges(const Model *m, const StoreEvent *ev, const StoreRange *got, int n) {
        int n0 = model_ranges(m, STORE_RANGES_MAX);
        StoreRange *t = malloc((size_t)MAX(n0, 1) * sizeof(*t));
        const uint64_t P = ZSWAP_PAGE_SIZE;

        FUZZ_CHECK(t, "malloc");
        for (int i = 0; i < n0; i++)
                t[i] = model_range(m, m->s.ranges_cur, (unsigned)i);
        for (int i = 0; i < n; i++)
                FUZZ_CHECK(got[i].start < got[i].end && page_aligned(got[i].start) && page_aligned(got[i].end) &&
                                   got[i].end <= PINDEX_MAX_ADDR && (i == 0 || got[i - 1].end < got[i].start),
                           "adopt_ranges with a journal: range %d %#llx-%#llx", i, (unsigned long long)got[i].start,
                           (unsigned long long)got[i].end);
        uint64_t probes[8];
        size_t np;
        for (int i = -1; i < n0 + n; i++) {
                np = 0;
                if (i < 0) {
                        probes[np++] = ev->start;
                        probes[np++] = ev->end;
                        if (ev->to != STORE_EVENT_GONE) {
                                probes[np++] = ev->to;
                                probes[np++] = ev->to + (ev->end - ev->start);
                        }
                } else {
                        const StoreRange *r = i < n0 ? &t[i] : &got[i - n0];
                        probes[np++] = r->start;
                        probes[np++] = r->end;
                        if (i < n0 && ev->to != STORE_EVENT_GONE && r->start >= ev->start && r->start < ev->end)
                                probes[np++] = ev->to + (r->start - ev->start);
                        if (i < n0 && ev->to != STORE_EVENT_GONE && r->end > ev->start && r->end <= ev->end)
                                probes[np++] = ev->to + (r->end - ev->start);
                }
                for (size_t k = 0; k < np; k++)
                        for (int d = -1; d <= 0; d++) {
                                uint64_t x = probes[k] + (uint64_t)(int64_t)d * P;
                                if (x >= PINDEX_MAX_ADDR || x + P < x)
                                        continue;
                                bool want = model_in(t, n0, ev, x);
                                FUZZ_CHECK(in_table(got, n, x) == want, "adopt_ranges with a journal: %#llx %s",
                                           (unsigned long long)x, want ? "missing" : "added");
                        }
        }
        FUZZ_CHECK(n == model_pieces(t, n0, ev), "adopt_ranges with a journal: %d ranges, the model says %d", n,
                   model_pieces(t, n0, ev));
        free(t);
}

static void check_journal(const Model *m) {
        StoreEvent ev = { 0 }, want_ev = { 0 };
        int want = model_journal(m, &want_ev), r = store_journal_event(map, &ev);

        FUZZ_CHECK(r == want, "store_journal_event = %d, the model says %d (event %#x)", r, want, m->jevent);
        FUZZ_CHECK(r != 1 || (ev.start == want_ev.start && ev.end == want_ev.end && ev.to == want_ev.to &&
                              ev.unmapped == want_ev.unmapped),
                   "store_journal_event: [%#llx, %#llx) -> %#llx", (unsigned long long)ev.start,
                   (unsigned long long)ev.end, (unsigned long long)ev.to);
}

static void check_ranges(const Model *m) {
        size_t max = m->h.max_ranges ? m->h.max_ranges : STORE_RANGES_MAX;
        StoreRange *out = malloc(max * sizeof(*out)); /* exactly: ASan sees a write past it */
        int want = model_ranges(m, max), r;

        FUZZ_CHECK(out, "malloc");
        r = store_ranges(map, out, max);
        FUZZ_CHECK(r == want, "store_ranges(%zu) = %d, the model says %d", max, r, want);
        for (int i = 0; i < r; i++) {
                StoreRange t = model_range(m, m->s.ranges_cur, (unsigned)i);
                FUZZ_CHECK(out[i].start == t.start && out[i].end == t.end, "range %d: %#llx-%#llx, not %#llx-%#llx",
                           i, (unsigned long long)out[i].start, (unsigned long long)out[i].end,
                           (unsigned long long)t.start, (unsigned long long)t.end);
                /* what every reader relies on: sorted, disjoint, aligned, in
                 * the index's address space */
                FUZZ_CHECK(out[i].start > 0 && out[i].start < out[i].end && out[i].end <= PINDEX_MAX_ADDR &&
                                   page_aligned(out[i].start) && page_aligned(out[i].end) &&
                                   (i == 0 || out[i - 1].end <= out[i].start),
                           "range %d accepted: %#llx-%#llx", i, (unsigned long long)out[i].start,
                           (unsigned long long)out[i].end);
        }
        free(out);

        /* the daemon's copy of it, with the journal's event applied */
        StoreRange *t = NULL;
        StoreEvent ev = { 0 }, jev;
        bool has_ev = false;
        char why[64] = "";
        int j = model_journal(m, &jev);
        want = model_ranges(m, STORE_RANGES_MAX);
        if (want >= 0 && j < 0)
                want = j;
        r = adopt_ranges(map, &t, &ev, &has_ev, why, sizeof(why));
        if (want >= 0 && j > 0 && r == -EBADMSG) {
                /* refused only if the result does not fit a store's table */
                StoreRange *t0 = malloc((size_t)MAX(want, 1) * sizeof(*t0));
                FUZZ_CHECK(t0, "malloc");
                for (int i = 0; i < want; i++)
                        t0[i] = model_range(m, m->s.ranges_cur, (unsigned)i);
                int pieces = model_pieces(t0, want, &jev);
                free(t0);
                FUZZ_CHECK(pieces > STORE_RANGES_MAX, "adopt_ranges refused %d ranges and an event (%d after it)",
                           want, pieces);
        } else if (want >= 0 && j > 0) {
                FUZZ_CHECK(r >= 0 && has_ev && ev.start == jev.start && ev.end == jev.end && ev.to == jev.to &&
                                   ev.unmapped == jev.unmapped,
                           "adopt_ranges = %d with the journal's event", r);
                if (jev.unmapped)
                        check_journal_ranges(m, &jev, t, r);
                else {
                        /* MADV_DONTNEED: the table as the store has it */
                        FUZZ_CHECK(r == want, "adopt_ranges = %d with an MADV_DONTNEED, the model says %d", r, want);
                        for (int i = 0; i < r; i++) {
                                StoreRange x = model_range(m, m->s.ranges_cur, (unsigned)i);
                                FUZZ_CHECK(t[i].start == x.start && t[i].end == x.end,
                                           "adopt_ranges with an MADV_DONTNEED changed range %d", i);
                        }
                }
        } else
                FUZZ_CHECK(r == want && !has_ev, "adopt_ranges = %d, the model says %d", r, want);
        FUZZ_CHECK(r >= 0 ? t != NULL : why[0] != 0, "adopt_ranges = %d: no table or no reason", r);
        if (r >= 0)
                free(t);
}

static void check_adopt(const Model *m) {
        Manager *mgr = calloc(1, sizeof(*mgr));
        char why[128] = "";
        int want, r;

        FUZZ_CHECK(mgr, "calloc");
        mgr->cfg.codec = m->h.flags & FS_F_DAEMON_ZSTD ? CODEC_ZSTD : CODEC_LZ4;
        mgr->core.wp_async = m->h.flags & FS_F_DAEMON_WP_ASYNC;
        mgr->core.daemon_id = m->h.flags & FS_F_DAEMON_SAME_ID ? m->s.daemon_id : FAKE_DAEMON_ID;
        if (!model_super_ok(&m->s))
                want = -EBADMSG;
        else if (m->s.state == STORE_RELEASED)
                want = -ENOENT;
        else if (m->s.daemon_id == mgr->core.daemon_id)
                want = -EBUSY;
        else if (m->s.codec != (uint32_t)mgr->cfg.codec || ((m->s.features & STORE_F_WP_ASYNC) && !mgr->core.wp_async))
                want = -EBADMSG;
        else
                want = 0;
        r = adopt_check(mgr, map, why, sizeof(why));
        FUZZ_CHECK(r == want, "adopt_check = %d, the model says %d", r, want);
        FUZZ_CHECK(r == 0 || (why[0] && memchr(why, 0, sizeof(why))), "adopt_check = %d without a reason", r);
        free(mgr);
}

typedef struct Walk {
        const Model *m;
        CodecDCtx *d;
        uint64_t seen;
        uint8_t *want;
} Walk;

static void check_object(const Model *m, uint64_t e) {
        uint32_t handle = pe_handle(e), clen = pe_clen(e);
        const void *obj = NULL, *obj2 = NULL;
        uint64_t off = 0;
        unsigned cls = ~0u, mcls = 0;
        bool ok = model_object(m, handle, clen, &off, &mcls);
        int r = store_object(map, handle, clen, &obj, &cls);

        FUZZ_CHECK(r == (ok ? 0 : -EBADMSG), "store_object(%#x, %u) = %d, the model says %s", handle, clen, r,
                   ok ? "valid" : "invalid");
        FUZZ_CHECK(store_object(map, handle, clen, &obj2, NULL) == r, "store_object without cls");
        if (r < 0)
                return;
        const uint8_t *pool = store_pool(map), *o = obj;
        FUZZ_CHECK(o >= pool + ((uint64_t)1 << STORE_SPAN_SHIFT) && o + clen <= pool + STORE_POOL_SIZE && obj2 == obj,
                   "object of %#x at %p: outside the pool [%p, %p)", handle, obj, (const void *)pool,
                   (const void *)(pool + STORE_POOL_SIZE));
        uint64_t at = (uint64_t)(o - pool), in = at & ((1u << STORE_SPAN_SHIFT) - 1);
        const StoreClass *k = store_class(cls);
        uint16_t c = atomic_load_explicit(&store_chunk_class(map)[at >> STORE_SPAN_SHIFT], memory_order_relaxed);
        FUZZ_CHECK(at == off && cls == mcls && k && c == cls + 1 && in % k->size == 0 && in / k->size < STORE_CHUNK_MAX_SLOTS &&
                           in + k->size <= (1u << STORE_SPAN_SHIFT) &&
                           clen <= k->size,
                   "object of %#x/%u at pool+%#llx, class %u (chunk says %u): not a slot of its chunk", handle, clen,
                   (unsigned long long)at, cls, c);
        /* every byte of it, as adopt_cb() copies it */
        volatile uint8_t sum = 0;
        for (uint32_t i = 0; i < clen; i++)
                sum ^= o[i];
        (void)sum;
}

static void check_content(const Model *m, CodecDCtx *d, uint64_t e) {
        uint8_t *page = guard_page[0], *want = guard_page[1];
        int w = model_content(m, d, e, want);
        int r = store_entry_content(map, NULL, d, NULL, e, page);

        FUZZ_CHECK(r == 0 || r == 1 || r == -EBADMSG || r == -EREMOTE, "store_entry_content(%#llx) = %d", (unsigned long long)e, r);
        FUZZ_CHECK(r == w, "store_entry_content(%#llx) = %d, the model says %d", (unsigned long long)e, r, w);
        if (r == 1)
                FUZZ_CHECK(memcmp(page, want, ZSWAP_PAGE_SIZE) == 0, "store_entry_content(%#llx): another page",
                           (unsigned long long)e);
}

static int walk_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        Walk *w = ud;
        const Model *m = w->m;
        uint64_t at = (uint64_t)((uint8_t *)e - map);

        FUZZ_CHECK(at >= STORE_LEAF_OFF && at < STORE_POOL_OFF && at % 8 == 0, "entry at %#llx: not in a leaf",
                   (unsigned long long)at);
        uint32_t leaf = (uint32_t)((at - STORE_LEAF_OFF) / 4096), j = (uint32_t)((at - STORE_LEAF_OFF) % 4096 / 8);
        uint64_t d = writes_get(&m->dir, leaf), v = atomic_load_explicit(e, memory_order_relaxed);
        FUZZ_CHECK(leaf < m->s.leaves && d != 0 && dir_slot_ok(d), "entry of leaf %u (slot %#llx, %u leaves)", leaf,
                   (unsigned long long)d, m->s.leaves);
        FUZZ_CHECK(addr == (d & ~STORE_DIR_USED) + (uint64_t)j * ZSWAP_PAGE_SIZE,
                   "entry %u of leaf %u at %#llx: the address is %#llx", j, leaf, (unsigned long long)at,
                   (unsigned long long)addr);
        FUZZ_CHECK(v != 0 && v == writes_get(&m->entries, (uint64_t)leaf << 9 | j), "entry %u of leaf %u: %#llx", j,
                   leaf, (unsigned long long)v);
        w->seen++;
        check_object(m, v);
        check_content(m, w->d, v);
        return 0;
}

/* What store_walk() must return, the entries it must show; and what the
 * restore must count (it skips a bad slot, does not look for zones named
 * twice, and takes CLEAN as resident). */
static int model_walk(const Model *m, CodecDCtx *d, size_t nslots, uint64_t *entries, uint64_t *bad, uint64_t *gone,
                      uint64_t *tier) {
        uint32_t nl = m->s.leaves;
        uint64_t *zones = malloc((m->dir.n + 1) * sizeof(*zones));
        size_t nz = 0;
        int ret = nl > STORE_LEAVES_MAX ? -EBADMSG : 0;

        FUZZ_CHECK(zones, "malloc");
        *entries = *bad = *gone = *tier = 0;
        nl = MIN(nl, STORE_LEAVES_MAX);
        for (size_t i = 0; i < m->dir.n; i++) {
                const Write *dw = &m->dir.w[i];
                if (dw->key >= nl || dw->value == 0)
                        continue;
                if (!dir_slot_ok(dw->value)) {
                        ret = -EBADMSG;
                        (*bad)++;
                        continue;
                }
                zones[nz++] = dw->value & ~STORE_DIR_USED;
                /* the slot's entries: keys leaf << 9 | j, sorted */
                size_t lo = 0, hi = m->entries.n;
                while (lo < hi) {
                        size_t mid = (lo + hi) / 2;
                        if (m->entries.w[mid].key < dw->key << 9)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                for (size_t k = lo; k < m->entries.n && m->entries.w[k].key >> 9 == dw->key; k++) {
                        const Write *ew = &m->entries.w[k];
                        uint64_t e = ew->value, o = pe_state(e) == PE_LOADING ? pe_loading_origin(e) : e;
                        if (e == 0)
                                continue;
                        (*entries)++;
                        switch (pe_state(o)) {
                        case PE_MOVING:
                        case PE_STAGED:
                                if (pe_slot(o) >= nslots)
                                        (*bad)++;
                                else
                                        (*gone)++;
                                break;
                        case PE_STORED:
                        case PE_SAME: {
                                int r = model_content(m, d, e, guard_page[1]);
                                /* a second-tier stub: poisoned, counted apart */
                                *tier += r == -EREMOTE;
                                *bad += r < 0 && r != -EREMOTE;
                                *gone += r > 0;
                                break;
                        }
                        }
                }
        }
        qsort(zones, nz, sizeof(*zones), cmp_u64);
        for (size_t i = 1; i < nz; i++)
                if (zones[i] == zones[i - 1])
                        ret = -EBADMSG;
        free(zones);
        return ret;
}

static void check_walk(const Model *m) {
        CodecDCtx *d = dctx[m->s.codec & 1]; /* a bad codec: the walk is still safe */
        uint64_t entries, bad, gone, tier;
        int want = model_walk(m, d, 0, &entries, &bad, &gone, &tier);
        Walk w = { .m = m, .d = d };
        int r = store_walk(map, walk_cb, &w);

        FUZZ_CHECK(r == want, "store_walk = %d, the model says %d", r, want);
        FUZZ_CHECK(w.seen == (r == 0 ? entries : 0), "store_walk = %d showed %llu entries, the model %llu", r,
                   (unsigned long long)w.seen, (unsigned long long)entries);
}

static void check_restore(const Model *m) {
        /* never dereferenced: the copies from it go to uffd -1 */
        const uint64_t staging = 0x600000000000ull;
        size_t nslots = m->h.nslots;
        ZswapRestoreStats st = { 0 };
        uint64_t entries, bad, gone, tier;
        bool ok = model_super_ok(&m->s);

        int r = zswap_store_restore(-1, store_fd, -1, dctx, staging, nslots * ZSWAP_PAGE_SIZE, NULL, 0, &st);
        FUZZ_CHECK(r == (ok ? 0 : -EBADMSG), "zswap_store_restore = %d, the model says %s", r,
                   ok ? "valid" : "invalid");
        if (!ok) {
                FUZZ_CHECK(!st.restored && !st.present && !st.gone && !st.bad && !st.children && !st.tier,
                           "zswap_store_restore of a refused store counted something");
                return;
        }
        /* a forked child's restore of the same store, with no range of
         * ours to write to: it decodes what it meets and writes nothing */
        ZswapRestoreStats fst = { 0 };
        (void)zswap_store_restore_forked(store_fd, -1, dctx, 1, staging, nslots * ZSWAP_PAGE_SIZE, NULL, 0, &fst);
        FUZZ_CHECK(!fst.restored && !fst.present && !fst.children,
                   "zswap_store_restore_forked wrote %llu pages outside every range", (unsigned long long)fst.restored);
        model_walk(m, dctx[m->s.codec], nslots, &entries, &bad, &gone, &tier);
        FUZZ_CHECK(!st.restored && !st.present && !st.children && st.bad == bad && st.gone == gone && st.tier == tier,
                   "zswap_store_restore: restored %llu present %llu children %llu bad %llu gone %llu tier %llu; the "
                   "model says bad %llu gone %llu tier %llu",
                   (unsigned long long)st.restored, (unsigned long long)st.present, (unsigned long long)st.children,
                   (unsigned long long)st.bad, (unsigned long long)st.gone, (unsigned long long)st.tier,
                   (unsigned long long)bad, (unsigned long long)gone, (unsigned long long)tier);
}

/* Everything but the superblock back to a hole: what the input wrote and
 * what the readers faulted in (a read of a hole of a shared memfd mapping
 * allocates a page). Punching the whole file costs some 300 us, more than
 * the rest of an input, so the areas the model knows were written or read
 * are punched, and if anything is left (SEEK_DATA finds it) the rest. */
static void reset(const Model *m) {
        uint64_t off, nl = MIN(m->s.leaves, STORE_LEAVES_MAX);
        unsigned cls;

        /* range tables, class table, directory: 10 MiB */
        punch(STORE_RANGES_OFF, STORE_LEAF_OFF - STORE_RANGES_OFF);
        /* the leaves written, and those of used slots the walks read */
        for (size_t i = 0; i < m->entries.n; i++) {
                uint64_t leaf = m->entries.w[i].key >> 9;
                if (i == 0 || leaf != m->entries.w[i - 1].key >> 9)
                        punch(STORE_LEAF_OFF + leaf * 4096, 4096);
        }
        for (size_t i = 0; i < m->dir.n; i++)
                if (m->dir.w[i].key < nl && m->dir.w[i].value)
                        punch(STORE_LEAF_OFF + m->dir.w[i].key * 4096, 4096);
        /* the pool bytes written, and the objects the entries name */
        for (size_t i = 0; i < m->pool.n; i++)
                punch(m->pool.w[i].key, m->pool.w[i].value);
        for (size_t i = 0; i < m->entries.n; i++) {
                uint64_t e = m->entries.w[i].value;
                if (model_object(m, pe_handle(e), pe_clen(e), &off, &cls))
                        punch(STORE_POOL_OFF + off, pe_clen(e));
        }
        if (lseek(store_fd, (off_t)STORE_SUPER_SIZE, SEEK_DATA) >= 0)
                punch(STORE_SUPER_SIZE, STORE_SIZE - STORE_SUPER_SIZE);
        FUZZ_CHECK(lseek(store_fd, (off_t)STORE_SUPER_SIZE, SEEK_DATA) < 0 && errno == ENXIO,
                   "the store keeps data past its superblock: %m");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Model m = { 0 };

        if (size > MAX_INPUT)
                return 0;
        setup();
        build(&m, data, size);
        writes_final(&m.ranges);
        writes_final(&m.dir);
        writes_final(&m.entries);
        writes_final(&m.classes);

        check_super(&m);
        check_journal(&m);
        check_adopt(&m);
        check_ranges(&m);
        check_walk(&m);
        check_restore(&m);

        reset(&m);
        free(m.ranges.w);
        free(m.rvals);
        free(m.dir.w);
        free(m.entries.w);
        free(m.classes.w);
        free(m.pool.w);
        return 0;
}
