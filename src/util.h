/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Small shared helpers: the one allocation seam (tests can make the Nth
 * allocation fail), strict number parsing, the monotonic clock.
 */
#ifndef UTIL_H
#define UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void	*kl_malloc(size_t n);
void	*kl_calloc(size_t nmemb, size_t size);
void	*kl_realloc(void *p, size_t n);
char	*kl_strndup(const char *s, size_t n);
void	 kl_free(void *p);

/* Tests: make allocation number n (1-based, counted from now) fail, and
 * every later one if sticky; 0 turns failures off. */
void	 kl_alloc_fail_at(uint64_t n, bool sticky);

/*
 * Parses s[0..len) as a decimal number: digits only, no sign, no spaces,
 * no overflow, and min <= value <= max. Returns false otherwise.
 */
bool	 kl_parse_u64(const char *s, size_t len, uint64_t min, uint64_t max,
	    uint64_t *out);

/*
 * Milliseconds of CLOCK_MONOTONIC. Between kl_clock_hold() and
 * kl_clock_release() it answers the time read at the hold: a batch of
 * requests read together costs one clock read, and every request in it
 * counts from when the batch was read (PROTOCOL.md, Timeouts).
 */
uint64_t kl_now_ms(void);
void	 kl_clock_hold(void);
void	 kl_clock_release(void);

/* Random bytes from getrandom(2), falling back to the clock and pid. */
void	 kl_random(void *buf, size_t len);

#endif /* UTIL_H */
