/*
 * calibrate.c: see calibrate.h.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "calibrate.h"
#include "conf.h"
#include "macro.h"
#include "wakeprobe.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define ROUNDS 2

const char *fault_wake_name(FaultWake w) {
        return w == FAULT_WAKE_ONE ? "one" : w == FAULT_WAKE_ALL ? "all" : "auto";
}

int fault_wake_from_string(const char *s, FaultWake *ret) {
        if (strcmp(s, "auto") == 0)
                *ret = FAULT_WAKE_AUTO;
        else if (strcmp(s, "all") == 0)
                *ret = FAULT_WAKE_ALL;
        else if (strcmp(s, "one") == 0)
                *ret = FAULT_WAKE_ONE;
        else
                return -EINVAL;
        return 0;
}

int fault_spin_from_string(const char *s, unsigned *ret) {
        uint64_t v;

        if (strcmp(s, "auto") == 0) {
                *ret = FAULT_SPIN_AUTO;
                return 0;
        }
        if (conf_parse_uint(s, &v) < 0 || v > FAULT_SPIN_MAX)
                return -EINVAL;
        *ret = (unsigned)v;
        return 0;
}

typedef struct Candidate {
        WakeArr arr;
        FaultWake wake;
        unsigned spin_us;
        double best_us; /* the lowest median over the rounds */
} Candidate;

/* auto as the defaults; and with the home service there is one thread to
 * wake, which is "all" */
static void settle(FaultCalibration *c) {
        if (c->wake == FAULT_WAKE_AUTO || !c->shared)
                c->wake = FAULT_WAKE_ALL;
        if (c->spin_us == FAULT_SPIN_AUTO)
                c->spin_us = 0;
}

void fault_calibrate(FaultCalibration *c) {
        Candidate cand[4];
        size_t n = 0;
        cpu_set_t allowed;
        int ncpu;

        c->summary[0] = 0;
        if (c->wake != FAULT_WAKE_AUTO && c->spin_us != FAULT_SPIN_AUTO) {
                settle(c);
                return;
        }
        if (RUNNING_ON_VALGRIND || sched_getaffinity(0, sizeof(allowed), &allowed) < 0 ||
            (ncpu = CPU_COUNT(&allowed)) < 2) {
                settle(c);
                return;
        }
        /* the arrangements the daemon would run, as wakeprobe.h has them */
        unsigned spins[2] = { 0, CALIBRATE_SPIN_US }, nspins = 2;
        if (c->spin_us != FAULT_SPIN_AUTO) {
                spins[0] = c->spin_us;
                nspins = 1;
        }
        for (unsigned s = 0; s < nspins; s++) {
                unsigned spin = spins[s];
                if (!c->shared) {
                        cand[n++] = (Candidate){ spin ? WAKE_UNPINNED_SPIN : WAKE_UNPINNED, FAULT_WAKE_ALL, spin, 0 };
                        continue;
                }
                if (!c->pin || (unsigned)ncpu != c->threads)
                        break; /* no probe models unpinned shared threads */
                for (FaultWake w = FAULT_WAKE_ALL; w <= FAULT_WAKE_ONE; w++) {
                        if (c->wake != FAULT_WAKE_AUTO && c->wake != w)
                                continue;
                        WakeArr a = w == FAULT_WAKE_ONE ? (spin ? WAKE_PERCPU_ONE_SPIN : WAKE_PERCPU_ONE)
                                                        : (spin ? WAKE_PERCPU_SPIN : WAKE_PERCPU);
                        cand[n++] = (Candidate){ a, w, spin, 0 };
                }
        }
        if (n < 2) {
                settle(c);
                return;
        }
        /* rounds, the candidates taking turns, so that a burst of other
         * work on the machine falls on one measurement of each rather
         * than on all of one */
        for (int round = 0; round < ROUNDS; round++)
                for (size_t i = 0; i < n; i++) {
                        WakeProbe p;
                        WakeProbeOpts o = { .nfaults = CALIBRATE_FAULTS, .spin_us = cand[i].spin_us, .cpus = &allowed };
                        int r = wake_probe(cand[i].arr, &o, &p);
                        if (r < 0) {
                                snprintf(c->summary, sizeof(c->summary), "not measured (%s: %s)",
                                         wake_arr_names[cand[i].arr], strerror(-r));
                                settle(c);
                                return;
                        }
                        if (round == 0 || p.median_us < cand[i].best_us)
                                cand[i].best_us = p.median_us;
                }
        size_t best = 0, len = 0;
        for (size_t i = 1; i < n; i++)
                if (cand[i].best_us < cand[best].best_us)
                        best = i;
        for (size_t i = 0; i < n && len < sizeof(c->summary); i++)
                len += (size_t)snprintf(c->summary + len, sizeof(c->summary) - len, "%s%s %.1f us", i ? ", " : "",
                                        wake_arr_names[cand[i].arr], cand[i].best_us);
        c->wake = cand[best].wake;
        c->spin_us = cand[best].spin_us;
        settle(c);
}
