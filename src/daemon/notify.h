/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * systemd's readiness protocol (sd_notify(3)) and socket activation
 * (sd_listen_fds(3)), spoken directly: a datagram to $NOTIFY_SOCKET and
 * the descriptors from 3 on that $LISTEN_FDS counts. Outside systemd both
 * do nothing. No libsystemd: the two conventions are a few lines each.
 */
#ifndef NOTIFY_H
#define NOTIFY_H

#include <stdbool.h>

/* Sends state ("READY=1", "STATUS=...") if $NOTIFY_SOCKET is set. */
void	notify_send(const char *state);
bool	notify_enabled(void);
/* Waits until systemd has handled every message sent before it, at most
 * timeout_ms (sd_notify_barrier(3)); false if it did not say so. */
bool	notify_barrier(int timeout_ms);

/* The sockets systemd passed to this process: how many (0: none), the
 * first at fd 3; names[i] is its FileDescriptorName= or "". Clears the
 * LISTEN_* variables so children do not inherit them. */
int	notify_listen_fds(const char **names, int max);

#endif /* NOTIFY_H */
