/*
 * tier-seal.c: the second tier's objects, sealed.
 *
 * Whoever reads or writes the backing store (a file or device, an NBD
 * server, the network to it) must learn nothing of a page but its size,
 * and must not get a page of its making installed: each object is
 * encrypted and authenticated with XChaCha20-Poly1305 (libsodium) under a
 * key the backing store never sees. On the store each object is a record:
 *
 *     8 random bytes | 16-byte tag | the object, encrypted
 *
 * The nonce is those 8 bytes, the record's offset, the stub's generation
 * and the tier's id; the associated data binds the tier's id, the offset,
 * the length, the generation and the user whose page it is (a stub forged
 * into one user's store never opens another user's record, even with its
 * generation guessed). The generation (TierStub.gen) is drawn
 * at random for each write and lives in the client's store with the stub,
 * not on the backing store: a record replayed from an earlier write at the
 * same place, moved from another place or another tier, or altered in any
 * bit fails to open and is never installed (the page is poisoned, as a
 * CRC mismatch was). Two writes never share a nonce under a key unless 64
 * random bits and a 32-bit generation both repeat at one offset.
 *
 * The key: 32 random bytes in a file only root can read ([tier] key,
 * default TIER_DEFAULT_KEY), made at the first start and read again by
 * every later daemon, which must open the records an earlier one wrote
 * (stubs adopted from the clients' stores).
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "tier-internal.h"
#include "util.h"

_Static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == TIER_KEY_BYTES, "a 32-byte key");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24, "a 24-byte nonce");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == 16, "a 16-byte tag");
_Static_assert(TIER_SEAL == 8 + 16, "a record's head: random bytes and tag");

/* A new key file: written whole, then linked in (another daemon starting
 * at the same time reads either nothing or all of it). */
static int key_make(const char *path, char *err, size_t errlen) {
        char dir[512];
        uint8_t k[TIER_KEY_BYTES];

        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return errorf(-EINVAL, err, errlen, "key %s: not a file in a directory", path);
        *slash = 0;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return errorf(-errno, err, errlen, "key %s: cannot make %s: %s", path, dir, strerror(errno));
        int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (fd < 0)
                return errorf(-errno, err, errlen, "key %s: %s", path, strerror(errno));
        randombytes_buf(k, sizeof(k));
        ssize_t n = write(fd, k, sizeof(k));
        sodium_memzero(k, sizeof(k));
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        int r = n == (ssize_t)sizeof(k) && fsync(fd) == 0 ? 0 : -EIO;
        if (r == 0 && linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0)
                r = errno == EEXIST ? 0 : -errno; /* another daemon made it first: theirs it is */
        close(fd);
        if (r < 0)
                return errorf(r, err, errlen, "key %s: cannot write it: %s", path, strerror(-r));
        log_info("second tier: a new key in %s", path);
        return 0;
}

int tier_key_load(const char *path, uint8_t key[TIER_KEY_BYTES], char *err, size_t errlen) {
        struct stat st;

        if (sodium_init() < 0)
                return errorf(-EIO, err, errlen, "libsodium cannot start");
        if (!*path)
                path = TIER_DEFAULT_KEY;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
                int r = key_make(path, err, errlen);
                if (r < 0)
                        return r;
                fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0)
                return errorf(-errno, err, errlen, "key %s: %s", path, strerror(errno));
        /* a key others could read or replace is no key */
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) ||
            st.st_size != TIER_KEY_BYTES) {
                close(fd);
                return errorf(-EPERM, err, errlen,
                              "key %s: must be a regular file of %u bytes, owned by the daemon's user, mode 0600",
                              path, TIER_KEY_BYTES);
        }
        ssize_t n = read(fd, key, TIER_KEY_BYTES);
        close(fd);
        if (n != TIER_KEY_BYTES)
                return errorf(-EIO, err, errlen, "key %s: cannot read it", path);
        return 0;
}

static void nonce_ad(const Tier *t, const TierStub *s, uint32_t owner, const uint8_t rnd[8], uint8_t nonce[24],
                     uint8_t ad[28]) {
        uint32_t id_lo = (uint32_t)t->id, len = s->len;

        memcpy(nonce, rnd, 8);
        memcpy(nonce + 8, &s->off, 8);
        memcpy(nonce + 16, &s->gen, 4);
        memcpy(nonce + 20, &id_lo, 4);
        memcpy(ad, &t->id, 8);
        memcpy(ad + 8, &s->off, 8);
        memcpy(ad + 16, &len, 4);
        memcpy(ad + 20, &s->gen, 4);
        memcpy(ad + 24, &owner, 4);
}

void tier_seal(const Tier *t, const TierStub *s, uint32_t owner, uint8_t *rec, const void *obj) {
        uint8_t nonce[24], ad[28];

        randombytes_buf(rec, 8);
        nonce_ad(t, s, owner, rec, nonce, ad);
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(rec + TIER_SEAL, rec + 8, NULL, obj, s->len, ad,
                                                            sizeof(ad), NULL, nonce, t->key);
}

bool tier_unseal(const Tier *t, const TierStub *s, uint32_t owner, const uint8_t *rec, uint8_t *out) {
        uint8_t nonce[24], ad[28];

        nonce_ad(t, s, owner, rec, nonce, ad);
        return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(out, NULL, rec + TIER_SEAL, s->len, rec + 8, ad,
                                                                   sizeof(ad), nonce, t->key) == 0;
}

uint32_t tier_gen_new(void) {
        return randombytes_random();
}
