/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The allocation seam and strict numbers: part of the pure core, so
 * nothing here logs, reads the clock or makes a system call of its own.
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"

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
