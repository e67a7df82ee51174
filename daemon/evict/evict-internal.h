/*
 * evict-internal.h: what evict.c (planning and the lanes, on the manager
 * thread) and workers.c (the compression workers) share. Internal to
 * daemon/evict; everything else sees eviction through evict.h. The
 * function declared here is hidden (-fvisibility=hidden).
 */
#pragma once

#include "core.h"
#include "mmclient.h"

/* the Work types of jobs: a lane's compression (evict.c makes it, a
 * worker runs it and posts it back to the manager as MW_BATCH_DONE) and a
 * recompression (recompress.c: its thread runs it, back as
 * MW_RECOMP_DONE) */
enum { JOB_COMPRESS = 1, JOB_RECOMPRESS };

/* Queue a job for the workers (manager thread; the queue is under
 * Evictor.lock). w->mm and w->lane say which lane: from here until its
 * MW_BATCH_DONE the worker owns what mmclient.h's Lane says it does. */
void evictor_submit(Evictor *ev, Work *w);
