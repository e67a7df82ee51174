/*
 * tier-writer.h: writeback, the thread that moves cold objects from the
 * pools to the second tier (tier-writer.c).
 *
 * It sits above the client state it walks (mmclient.h) and the tier it
 * writes to (tier.h, whose internals it shares: tier-internal.h). The
 * manager starts it once the tier is open and the sandbox is in place,
 * and hands it the clients to look at every tick.
 */
#pragma once

#include <stddef.h>

#include "core.h"
#include "tier.h"

/* Start the writer thread of t, which reads the pool bound from core.
 * After tier_start(). 0, or -errno with why in err. */
int tier_writer_start(Tier *t, Core *core, char *err, size_t errlen);

/* Manager tick: writeback is wanted while the pool is over its resume
 * mark; hands the writer the clients to look at (references taken) if it
 * is idle. mms: the manager's list. */
void tier_tick(Tier *t, MMClient *mms);
