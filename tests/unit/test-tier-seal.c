/*
 * test-tier-seal: the second tier's records on their own
 * (daemon/tier/tier-seal.c).
 *
 * A record opens into exactly what was sealed, for the page's owner, and
 * for nothing else: not for another user (a stub forged into one user's
 * store that names another user's record, generation guessed), not with
 * another generation (an earlier write at the same place replayed), not
 * at another offset or in another tier (a record moved or misdirected),
 * not under another key, and not with any bit of the record flipped. Two
 * seals of the same object at the same place differ (fresh random bytes).
 * The key file: made 0600 at the first load, the same key read again, and
 * refused when others may read it or it has the wrong size.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"
#include "test.h"
#include "tier-internal.h"
#include "util.h"

static Tier t;

static uint64_t xorshift(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static bool opens(const TierStub *s, uint32_t owner, const uint8_t *rec, const uint8_t *want) {
        uint8_t out[ZSWAP_PAGE_SIZE];
        memset(out, 0xee, sizeof(out));
        bool ok = tier_unseal(&t, s, owner, rec, out);
        if (ok)
                ASSERT_TRUE(memcmp(out, want, s->len) == 0);
        return ok;
}

static void records(void) {
        static uint8_t obj[ZSWAP_PAGE_SIZE], rec[ZSWAP_PAGE_SIZE + TIER_SEAL], rec2[ZSWAP_PAGE_SIZE + TIER_SEAL];
        uint64_t x = 3;
        for (size_t i = 0; i < sizeof(obj); i++)
                obj[i] = (uint8_t)(i * 7 + (i >> 5));
        for (size_t i = 0; i < TIER_KEY_BYTES; i++)
                t.key[i] = (uint8_t)(i * 31 + 1);
        t.id = 0x1234567890abcdefull;

        for (uint16_t len = 1; len <= ZSWAP_PAGE_SIZE; len = len < 64 ? len + 21 : (uint16_t)(len * 2 < 4096 ? len * 2 : 4096)) {
                TierStub s = { .off = 8192 + len, .gen = 77, .len = len, .magic = TIER_STUB_MAGIC };
                tier_seal(&t, &s, 1000, rec, obj);
                ASSERT_TRUE(opens(&s, 1000, rec, obj));
                /* the object is not in the record in clear */
                if (len >= 32)
                        ASSERT_TRUE(memmem(rec, tier_rec_len(&s), obj, 32) == NULL);
                ASSERT_TRUE(!opens(&s, 1001, rec, obj)); /* another user's stub */
                ASSERT_TRUE(!opens(&s, 0, rec, obj));
                TierStub g = s;
                g.gen = 78; /* an earlier write replayed */
                ASSERT_TRUE(!opens(&g, 1000, rec, obj));
                TierStub o = s;
                o.off += 16; /* moved */
                ASSERT_TRUE(!opens(&o, 1000, rec, obj));
                if (len > 1) {
                        TierStub l = s;
                        l.len--; /* cut short */
                        ASSERT_TRUE(!opens(&l, 1000, rec, obj));
                }
                t.id ^= 1; /* another tier */
                ASSERT_TRUE(!opens(&s, 1000, rec, obj));
                t.id ^= 1;
                t.key[5] ^= 1; /* another key */
                ASSERT_TRUE(!opens(&s, 1000, rec, obj));
                t.key[5] ^= 1;
                /* any bit of the record */
                for (int k = 0; k < 64; k++) {
                        size_t bit = (size_t)(xorshift(&x) % (tier_rec_len(&s) * 8));
                        rec[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                        ASSERT_TRUE(!opens(&s, 1000, rec, obj));
                        rec[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                }
                ASSERT_TRUE(opens(&s, 1000, rec, obj));
                /* sealed again, the same object at the same place: new bytes */
                tier_seal(&t, &s, 1000, rec2, obj);
                ASSERT_TRUE(memcmp(rec, rec2, tier_rec_len(&s)) != 0);
                ASSERT_TRUE(opens(&s, 1000, rec2, obj));
                if (len == ZSWAP_PAGE_SIZE)
                        break;
        }
}

static void key_file(void) {
        char dir[] = "/tmp/test-tier-seal-XXXXXX", path[64], err[256];
        uint8_t k1[TIER_KEY_BYTES], k2[TIER_KEY_BYTES];
        struct stat st;

        ASSERT_TRUE(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/sub/tier.key", dir);
        ASSERT_OK(tier_key_load(path, k1, err, sizeof(err)));
        ASSERT_OK(stat(path, &st));
        ASSERT_TRUE(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600 && st.st_size == TIER_KEY_BYTES);
        ASSERT_OK(tier_key_load(path, k2, err, sizeof(err)));
        ASSERT_TRUE(memcmp(k1, k2, sizeof(k1)) == 0);
        ASSERT_OK(chmod(path, 0644));
        ASSERT_EQ(tier_key_load(path, k2, err, sizeof(err)), -EPERM);
        fprintf(stderr, "a readable key: %s\n", err);
        ASSERT_OK(chmod(path, 0600));
        ASSERT_OK(truncate(path, 16));
        ASSERT_EQ(tier_key_load(path, k2, err, sizeof(err)), -EPERM);
        unlink(path);
        snprintf(path, sizeof(path), "%s/sub", dir);
        rmdir(path);
        rmdir(dir);
}

int main(void) {
        records();
        key_file();
        return 0;
}
