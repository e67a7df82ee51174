/*
 * sd-daemon.h: the parts of systemd's service protocol zswapd speaks,
 * without libsystemd: socket activation (LISTEN_FDS, sd_listen_fds(3)) and
 * readiness/watchdog notification (NOTIFY_SOCKET, sd_notify(3)).
 *
 * All of it is a no-op when the daemon was not started by systemd (or by
 * systemd-socket-activate): the environment variables are simply absent.
 */
#pragma once

#include <stdint.h>

/*
 * The sockets passed by socket activation for this process (LISTEN_PID must
 * be ours): returns how many, starting at fd 3 (SD_LISTEN_FDS_START), each
 * made close-on-exec; 0 if none; -errno if the variables are malformed.
 * Unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES so children do not
 * inherit them.
 */
int sdd_listen_fds(void);

/*
 * Send state (e.g. "READY=1\nSTATUS=serving") to $NOTIFY_SOCKET, an
 * AF_UNIX datagram socket (abstract when it starts with '@'). Returns 1 if
 * sent, 0 if there is no NOTIFY_SOCKET, -errno on failure. Safe from any
 * thread; never blocks for long (MSG_DONTWAIT).
 */
int sdd_notify(const char *state);

/* printf-style sdd_notify(). */
int sdd_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * The watchdog interval systemd expects WATCHDOG=1 within (WATCHDOG_USEC,
 * for our pid if WATCHDOG_PID is set), in microseconds; 0 if none.
 */
uint64_t sdd_watchdog_usec(void);
