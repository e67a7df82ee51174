/* tier-pump.c: see tier-pump.h */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "mpsc.h"
#include "pentry.h"
#include "tier-pump.h"

struct TierPump {
        Tier *t;
        TierReader *reader; /* the pump thread's */
        CodecDCtx *dctx;    /* the pump thread's */
        int wake_fd;        /* eventfd: jobs queued, or stop */
        int done_fd;        /* the owner's eventfd: jobs back */
        _Atomic(TierJob *) queue;
        _Atomic(TierJob *) done;
        _Atomic bool stop;
        pthread_t thread;
        bool started;
};

MPSC_LIST(job_list, TierJob, next)

static void push(_Atomic(TierJob *) *head, TierJob *j, int fd) {
        if (job_list_push(head, j)) {
                uint64_t one = 1;
                (void)!write(fd, &one, sizeof(one));
        }
}

static void run_job(TierPump *p, TierJob *j) {
        const uint8_t *obj;

        j->win = (TierWindow){ 0 };
        j->res = tier_read(p->reader, &j->stub, j->owner, &obj);
        if (j->res < 0)
                return;
        if (j->stub.len == ZSWAP_PAGE_SIZE)
                memcpy(j->page, obj, ZSWAP_PAGE_SIZE); /* stored raw */
        else if (pe_decompress(p->dctx, j->dict, j->entry, obj, j->stub.len, j->page) < 0)
                j->res = -EBADMSG;
        if (j->res == 0)
                (void)tier_window_copy(p->reader, &j->win); /* without it: no neighbours */
}

static void *pump_main(void *arg) {
        TierPump *p = arg;

        tier_reader_warm(p->reader); /* here: it waits for the server */
        for (;;) {
                TierJob *j = job_list_take(&p->queue);
                if (!j) {
                        /* relaxed: the eventfd orders it */
                        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
                                break;
                        uint64_t n;
                        if (read(p->wake_fd, &n, sizeof(n)) < 0 && errno != EINTR && errno != EAGAIN)
                                log_error("tier pump: cannot wait: %m");
                        continue;
                }
                while (j) {
                        TierJob *n = j->next;
                        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
                                j->res = -ECANCELED;
                        else
                                run_job(p, j);
                        push(&p->done, j, p->done_fd);
                        j = n;
                }
        }
        return NULL;
}

int tier_pump_new(Tier *t, CodecKind codec, int done_fd, TierPump **ret) {
        TierPump *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        p->t = t;
        p->done_fd = done_fd;
        p->wake_fd = eventfd(0, EFD_CLOEXEC);
        if (p->wake_fd < 0) {
                r = negative_errno();
                goto fail;
        }
        if ((r = codec_dctx_new(codec, &p->dctx)) < 0 || (r = tier_reader_new(t, true, &p->reader)) < 0)
                goto fail;
        r = -pthread_create(&p->thread, NULL, pump_main, p);
        if (r < 0)
                goto fail;
        p->started = true;
        *ret = p;
        return 0;
fail:
        tier_pump_free(p);
        return r;
}

void tier_pump_stop(TierPump *p) {
        if (!p || !p->started)
                return;
        atomic_store_explicit(&p->stop, true, memory_order_relaxed);
        uint64_t one = 1;
        (void)!write(p->wake_fd, &one, sizeof(one));
        pthread_join(p->thread, NULL);
        p->started = false;
        /* what was queued after the thread's last look */
        for (TierJob *j = job_list_take(&p->queue); j;) {
                TierJob *n = j->next;
                j->res = -ECANCELED;
                j->win = (TierWindow){ 0 };
                push(&p->done, j, p->done_fd);
                j = n;
        }
}

TierPump *tier_pump_free(TierPump *p) {
        if (!p)
                return NULL;
        tier_pump_stop(p);
        tier_reader_free(p->reader);
        codec_dctx_free(p->dctx);
        safe_close(p->wake_fd);
        free(p);
        return NULL;
}

void tier_pump_submit(TierPump *p, TierJob *j) {
        push(&p->queue, j, p->wake_fd);
}

TierJob *tier_pump_done(TierPump *p) {
        return job_list_take(&p->done);
}
