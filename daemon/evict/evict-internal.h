/*
 * evict-internal.h: what evict.c (planning and the lanes, on the manager
 * thread) and workers.c (the compression workers) share. Internal to
 * daemon/evict; everything else sees eviction through evict.h. The
 * function declared here is hidden (-fvisibility=hidden).
 */
#pragma once

#include "core.h"
#include "mmclient.h"

/* the Work type of a lane's compression job (evict.c makes it, a worker
 * runs it and posts it back to the manager as MW_BATCH_DONE) */
enum { JOB_COMPRESS = 1 };

/* Queue a job for the workers (manager thread; the queue is under
 * Evictor.lock). w->mm and w->lane say which lane: from here until its
 * MW_BATCH_DONE the worker owns what mmclient.h's Lane says it does. */
void evictor_submit(Evictor *ev, Work *w);
