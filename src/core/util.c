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

#define KL_ROTL(x, b)	(((x) << (b)) | ((x) >> (64 - (b))))

/* One SipRound over the state v[0..3]. */
static inline void
kl_sipround(uint64_t v[4])
{
	v[0] += v[1]; v[1] = KL_ROTL(v[1], 13); v[1] ^= v[0];
	v[0] = KL_ROTL(v[0], 32);
	v[2] += v[3]; v[3] = KL_ROTL(v[3], 16); v[3] ^= v[2];
	v[0] += v[3]; v[3] = KL_ROTL(v[3], 21); v[3] ^= v[0];
	v[2] += v[1]; v[1] = KL_ROTL(v[1], 17); v[1] ^= v[2];
	v[2] = KL_ROTL(v[2], 32);
}

/* Bytes p[0..n), n <= 8, as a little-endian number. */
static inline uint64_t
kl_le64(const unsigned char *p, size_t n)
{
	uint64_t	m = 0;

	for (size_t i = n; i > 0; i--)
		m = m << 8 | p[i - 1];
	return m;
}

uint64_t
kl_siphash(uint64_t k0, uint64_t k1, const void *data, size_t len)
{
	const unsigned char	*p = data;
	uint64_t		 v[4] = {
		k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
		k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL
	};
	uint64_t		 m;
	size_t			 left = len;

	for (; left >= 8; p += 8, left -= 8) {
		m = kl_le64(p, 8);
		v[3] ^= m;
		kl_sipround(v);
		kl_sipround(v);
		v[0] ^= m;
	}
	m = (uint64_t)len << 56 | kl_le64(p, left);
	v[3] ^= m;
	kl_sipround(v);
	kl_sipround(v);
	v[0] ^= m;
	v[2] ^= 0xff;
	for (int i = 0; i < 4; i++)
		kl_sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}
