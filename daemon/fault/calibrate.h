/*
 * calibrate.h: choosing how the fault threads are woken, by measuring this
 * machine at start.
 *
 * What a fault costs depends on the machine more than on the daemon: on
 * one kind of hypervisor a wake-up across vCPUs costs 55 us and a switch
 * on one vCPU 7 us; on another (or the same in another state) the switch
 * between two address spaces on one vCPU is the dear part (40 us) and a
 * handler on the other vCPU answers in 22-33 us (bench-wake). No one
 * arrangement of the fault threads is best on both (docs/benchmarks.md,
 * "Fault service"). So for each setting left at auto, the daemon measures
 * the arrangements it may use with daemon/util/wakeprobe.h before it
 * starts its threads (a fraction of a second), and takes the fastest:
 *
 *   wake   with the shared service, whether a fault wakes every fault
 *          thread (all) or one sleeping thread (one: EPOLLEXCLUSIVE)
 *   spin   whether a thread that served a fault polls for the next one
 *          (CALIBRATE_SPIN_US) before it sleeps
 *
 * Nothing is measured where nothing can be chosen: one CPU, fault threads
 * not pinned one per CPU with the shared service, both settings given, or
 * under valgrind; auto then means wake all and no spin.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define FAULT_SPIN_AUTO (~0u)   /* --fault-spin-us auto */
#define FAULT_SPIN_MAX 10000u
#define CALIBRATE_SPIN_US 50u   /* the poll auto may choose */
#define CALIBRATE_FAULTS 150u   /* faults per arrangement and round */

typedef enum FaultWake {
        FAULT_WAKE_AUTO,
        FAULT_WAKE_ALL,
        FAULT_WAKE_ONE,
} FaultWake;

typedef struct FaultCalibration {
        /* in: the layout */
        bool shared;      /* --fault-shared (else --fault-home) */
        bool pin;         /* --fault-pin */
        unsigned threads; /* fault threads */
        /* in: the settings, maybe auto; out: what the daemon runs with */
        FaultWake wake;
        unsigned spin_us;
        /* out: what was measured, for the log; empty if nothing was */
        char summary[256];
} FaultCalibration;

/* Settle wake and spin_us. Never fails: what cannot be measured falls
 * back to wake all, no spin (and says so in summary). */
void fault_calibrate(FaultCalibration *c);

const char *fault_wake_name(FaultWake w);
/* "auto", "all", "one"; -EINVAL otherwise */
int fault_wake_from_string(const char *s, FaultWake *ret);
/* "auto" (FAULT_SPIN_AUTO) or 0..FAULT_SPIN_MAX; -EINVAL otherwise */
int fault_spin_from_string(const char *s, unsigned *ret);
