/*
 * tier-pump.h: the second tier's reads, off the fault path.
 *
 * Each fault thread has a pump: a thread of its own with its own reader
 * (tier.h: ring, buffer, NBD connection) that reads the objects the fault
 * thread asks for, opens and decompresses them, and hands them back. A
 * backing store that stalls (an NBD server that stops answering, a device
 * that hangs, a reconnect) holds the pump, never the fault thread: every
 * other fault, this client's pages in the pool included, is served
 * meanwhile. Only the faults waiting for the tier wait for it.
 *
 * Threads: tier_pump_submit() from the owning fault thread only;
 * tier_pump_done() from it, or from a thread that takes its work while a
 * call into a client holds it (each take is one exchange, so two takers
 * get each job once); the pump's thread does the rest. Jobs cross by two
 * lock-free lists taken whole by their consumer (MPSC_LIST, mpsc.h).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"
#include "tier.h"

typedef struct TierPump TierPump;

typedef struct TierJob {
        struct TierJob *next;
        TierStub stub;  /* in: the object's stub (checked again by the read) */
        uint32_t owner; /* in: its owner's uid (tier-seal.c) */
        uint8_t *page;  /* in: where its page goes (ZSWAP_PAGE_SIZE bytes) */
        uint64_t entry; /* in: the entry's value (its PE_STRONG, PE_DICT say the object's codec) */
        const CodecDict *dict; /* in: its client's dictionary, or NULL (the job's owner holds the client) */
        /* out: 0: page holds it; -EBADMSG: lost (fails to open or to
         * decompress); -ECANCELED: the pump stopped first; another -errno:
         * the backing store could not be read, try again later */
        int res;
        TierWindow win; /* out, res 0: what the read brought (the neighbours), or empty */
} TierJob;

/* A pump for tier t, decompressing with codec; done_fd (an eventfd the
 * owner watches) is written when jobs are back. */
int tier_pump_new(Tier *t, CodecKind codec, int done_fd, TierPump **ret);
/* Stop the pump (a read under way ends within the tier's timeout) and
 * free it; jobs it still had come back through tier_pump_done() first,
 * -ECANCELED, for the owner to take before this returns: the owner calls
 * tier_pump_stop() then tier_pump_done() then tier_pump_free(). */
void tier_pump_stop(TierPump *p);
TierPump *tier_pump_free(TierPump *p);
/* Queue a read; it comes back through tier_pump_done(). */
void tier_pump_submit(TierPump *p, TierJob *j);
/* The jobs that are back, in the order they were submitted. */
TierJob *tier_pump_done(TierPump *p);
