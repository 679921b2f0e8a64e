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
void	 kl_clock_hold(void);
void	 kl_clock_release(void);
uint64_t kl_clock_read_ms(void);	/* the clock itself, never held */

/* What kl_clock_hold() read; only clock.c writes it. Inline below: every
 * request reads the time. */
struct kl_clock_hold {
	uint64_t	 ms;
	bool		 held;
};
extern struct kl_clock_hold kl_clock_held;

/* A harness that drives the daemon's timers itself (tests/fuzz/
 * fuzz_commands.c) sets the time here: while it is not 0 the clock
 * answers it. The daemon never writes it. */
extern uint64_t	kl_clock_fixed_ms;

static inline uint64_t
kl_now_ms(void)
{
	return kl_clock_held.held ? kl_clock_held.ms : kl_clock_read_ms();
}

/* Random bytes from getrandom(2), falling back to the clock and pid. */
void	 kl_random(void *buf, size_t len);

#endif /* CLOCK_H */
