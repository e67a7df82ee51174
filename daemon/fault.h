/*
 * fault.h: the threads that serve page faults and uffd events.
 */
#pragma once

#include "inbox.h"
#include "mmclient.h"

typedef struct FaultThread FaultThread;

enum {
        FW_REMOVE = 1, /* stop reading mm's uffd, drop the reference */
        FW_INSTALL,    /* put back the staged page at a (entry value v): incompressible or no pool room */
        FW_RESTORE,    /* install every held page of [a, b), then tell the manager (id) */
        FW_ADOPT,      /* start reading mm's uffd */
        FW_SYNC,       /* bounce back to the manager once every event read so far is handled */
};

int fault_thread_new(Manager *m, unsigned idx, FaultThread **ret);
/* Stops the thread, drops every client it holds. */
FaultThread *fault_thread_free(FaultThread *ft);

/* Queue work for the thread (any thread). Takes ownership of w. */
void fault_thread_post(FaultThread *ft, Work *w);
Work *work_new(int type, MMClient *mm); /* takes a reference on mm */
void work_free(Work *w);
