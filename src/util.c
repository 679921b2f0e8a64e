/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Allocation seam, strict numbers, clock and randomness. Nothing here logs.
 */
#include <sys/random.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static uint64_t	clock_held_ms;
static bool	clock_held;
static uint64_t	alloc_count;
static uint64_t	alloc_fail_at;
static bool	alloc_fail_sticky;

static bool
alloc_should_fail(void)
{
	if (alloc_fail_at == 0)
		return false;
	alloc_count++;
	if (alloc_count == alloc_fail_at)
		return true;
	return alloc_fail_sticky && alloc_count > alloc_fail_at;
}

void
kl_alloc_fail_at(uint64_t n, bool sticky)
{
	alloc_count = 0;
	alloc_fail_at = n;
	alloc_fail_sticky = sticky;
}

void *
kl_malloc(size_t n)
{
	if (alloc_should_fail())
		return NULL;
	return malloc(n);
}

void *
kl_calloc(size_t nmemb, size_t size)
{
	if (alloc_should_fail())
		return NULL;
	return calloc(nmemb, size);
}

void *
kl_realloc(void *p, size_t n)
{
	if (alloc_should_fail())
		return NULL;
	return realloc(p, n);
}

char *
kl_strndup(const char *s, size_t n)
{
	char	*d;

	if ((d = kl_malloc(n + 1)) == NULL)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

void
kl_free(void *p)
{
	free(p);
}

bool
kl_parse_u64(const char *s, size_t len, uint64_t min, uint64_t max,
    uint64_t *out)
{
	uint64_t	v = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned	d;

		if (s[i] < '0' || s[i] > '9')
			return false;
		d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		return false;
	*out = v;
	return true;
}

static uint64_t
clock_read_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
kl_now_ms(void)
{
	return clock_held ? clock_held_ms : clock_read_ms();
}

void
kl_clock_hold(void)
{
	clock_held_ms = clock_read_ms();
	clock_held = true;
}

void
kl_clock_release(void)
{
	clock_held = false;
}

void
kl_random(void *buf, size_t len)
{
	unsigned char	*p = buf;
	size_t		 off = 0;

	while (off < len) {
		ssize_t	n = getrandom(p + off, len - off, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	if (off < len) {
		struct timespec	ts;
		uint64_t	x;

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
