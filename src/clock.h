/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The monotonic clock, held once per batch of requests, and random bytes.
 * Not part of the pure core: the lock table and the parser never call it.
 */
#ifndef CLOCK_H
#define CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Milliseconds of CLOCK_MONOTONIC. Between kl_clock_hold() and
 * kl_clock_release() it answers the time read at the hold: a batch of
 * requests read together costs one clock read, and every request in it
 * counts from when the batch was read (keylockd-protocol(7), Timeouts).
 */
uint64_t kl_now_ms(void);
void	 kl_clock_hold(void);
void	 kl_clock_release(void);

/* Random bytes from getrandom(2), falling back to the clock and pid. */
void	 kl_random(void *buf, size_t len);

#endif /* CLOCK_H */
