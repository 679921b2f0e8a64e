/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The daemon's clock and its randomness, apart from util.c so that the pure
 * core (parser, lock table, histogram) cannot link against them: time
 * reaches the table only as an argument.
 */
#include <sys/random.h>

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

struct kl_clock_hold kl_clock_held;
uint64_t	kl_clock_fixed_ms;

uint64_t
kl_clock_read_ms(void)
{
	struct timespec	ts;

	if (kl_clock_fixed_ms != 0)
		return kl_clock_fixed_ms;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void
kl_clock_hold(void)
{
	kl_clock_held.ms = kl_clock_read_ms();
	kl_clock_held.held = true;
}

void
kl_clock_release(void)
{
	kl_clock_held.held = false;
}

void
kl_random(void *buf, size_t len)
{
	unsigned char	*p = buf;
	size_t		 off = 0;
	int		 n_err = 0;

	while (off < len) {
		ssize_t	n = getrandom(p + off, len - off, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			n_err = n < 0 ? errno : 0;
			break;
		}
		off += (size_t)n;
	}
	if (off < len) {
		struct timespec	ts;
		uint64_t	x;

		/* said, not silent (review L9): a seed from the clock and the
		 * pid can be guessed, so a flood of chosen keys could be aimed
		 * at one bucket (CPU, never a wrong answer) */
		log_warnx("getrandom: %s; a hash seed comes from the clock "
		    "and the pid instead", n_err != 0 ? strerror(n_err) :
		    "short read");
		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
		    ((uint64_t)getpid() << 40);
		for (; off < len; off++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			p[off] = (unsigned char)x;
		}
	}
}
