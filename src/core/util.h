/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Small shared helpers of the pure core: the one allocation seam (tests
 * can make the Nth allocation fail), strict number parsing and decimal
 * writing. The clock is in clock.h, outside the core.
 */
#ifndef UTIL_H
#define UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

void	*kl_malloc(size_t n);
void	*kl_calloc(size_t nmemb, size_t size);
void	*kl_realloc(void *p, size_t n);
char	*kl_strndup(const char *s, size_t n);
void	 kl_free(void *p);

/* Tests: make allocation number n (1-based, counted from now) fail, and
 * every later one if sticky; 0 turns failures off. */
void	 kl_alloc_fail_at(uint64_t n, bool sticky);

/*
 * SipHash-2-4 (Aumasson and Bernstein) of p[0..len) under the 128-bit key
 * k0, k1: a keyed hash for tables whose keys come from the network, so a
 * sender who does not know the key cannot aim at one bucket.
 */
uint64_t kl_siphash(uint64_t k0, uint64_t k1, const void *p, size_t len);

/*
 * Parses s[0..len) as a decimal number: digits only, no sign, no spaces,
 * no overflow, and min <= value <= max. Returns false otherwise.
 */
bool	 kl_parse_u64(const char *s, size_t len, uint64_t min, uint64_t max,
	    uint64_t *out);

/*
 * Decimal without printf, for the replies of the hot path, inline there:
 * kl_u64_len() is the number of digits of v (1 to 20), and kl_u64_put()
 * writes exactly those len digits at p, no NUL.
 */
/*
 * The number of decimal digits of v: log2 by clz, times log10(2) as
 * 1233 / 4096, then one compare (w: 0 has one digit, as 1 has).
 */
static inline size_t
kl_u64_len(uint64_t v)
{
	static const uint64_t	pow10[20] = {
		1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL,
		1000000ULL, 10000000ULL, 100000000ULL, 1000000000ULL,
		10000000000ULL, 100000000000ULL, 1000000000000ULL,
		10000000000000ULL, 100000000000000ULL, 1000000000000000ULL,
		10000000000000000ULL, 100000000000000000ULL,
		1000000000000000000ULL, 10000000000000000000ULL
	};
	uint64_t		w = v | 1;
	unsigned		bits = 64 - (unsigned)__builtin_clzll(w);
	unsigned		t = (bits * 1233) >> 12;

	return t + 1 - (w < pow10[t]);
}

/*
 * Writes the len digits of v from the left: v / 10^k (the first one or
 * two digits) and the rest as a 64-bit fraction, by one 64 x 64 -> 128-bit
 * multiplication with m = floor(2^64 / 10^k) + 1; each multiplication of
 * the fraction by 100 then brings the next two digits into the top half.
 * The fraction is too large by less than v / 2^64, which after the k
 * digits is under v * 10^k / 2^64 < 1 while v * 10^k < 2^64: for up to ten
 * digits. Longer numbers give their last four digits at a time first.
 */
static inline void
kl_u64_put(char *p, size_t len, uint64_t v)
{
	static const char	pairs[] =
	    "00010203040506070809101112131415161718192021222324252627282930"
	    "31323334353637383940414243444546474849505152535455565758596061"
	    "6263646566676869707172737475767778798081828384858687888990919293"
	    "949596979899";
	static const uint64_t	recip[10] = {	/* floor(2^64 / 10^k) + 1 */
		0, 0x199999999999999aULL, 0x28f5c28f5c28f5dULL,
		0x4189374bc6a7f0ULL, 0x68db8bac710ccULL, 0xa7c5ac471b48ULL,
		0x10c6f7a0b5eeULL, 0x1ad7f29abcbULL, 0x2af31dc462ULL, 0x44b82fa0aULL
	};
	unsigned __int128	t;
	size_t			k;
	uint32_t		r, hi;

	while (len > 10) {
		r = (uint32_t)(v % 10000);
		v /= 10000;
		hi = (r * 5243) >> 19;	/* r / 100 below 43699 */
		len -= 4;
		memcpy(p + len, pairs + 2 * hi, 2);
		memcpy(p + len + 2, pairs + 2 * (r - 100 * hi), 2);
	}
	if (len <= 2) {
		if (len == 2)
			memcpy(p, pairs + 2 * v, 2);
		else
			*p = (char)('0' + v);
		return;
	}
	k = len - 2 + (len & 1);
	t = (unsigned __int128)v * recip[k];
	if (len & 1)
		*p++ = (char)('0' + (uint64_t)(t >> 64));
	else {
		memcpy(p, pairs + 2 * (uint64_t)(t >> 64), 2);
		p += 2;
	}
	for (; k > 0; k -= 2, p += 2) {
		t = (unsigned __int128)(uint64_t)t * 100;
		memcpy(p, pairs + 2 * (uint64_t)(t >> 64), 2);
	}
}

/*
 * Eight decimal digits at once, for 1 <= v < 10^8: v as two 4-digit
 * halves in 32-bit lanes, each lane split by 100 into 16-bit lanes and
 * each of those by 10 into bytes, by multiply-shifts exact in that range
 * (x * 10486 >> 20 is x / 100 below 10^4, x * 103 >> 10 is x / 10 below
 * 100) and masks that drop what the lane above shifted in. The bytes are
 * then the digits, the first lowest; the leading zeros are the zero bytes
 * at the bottom, shifted out. Writes 8 bytes at p (the digits, then zero
 * bytes) and returns the number of digits.
 */
static inline size_t
kl_u64_put8(char *p, uint64_t v)
{
	uint64_t	x, q, y, t, z;
	unsigned	lz;

	x = v / 10000;
	x |= (v - x * 10000) << 32;
	q = (x * 10486) >> 20 & 0x0000007f0000007fULL;
	y = q | (x - q * 100) << 16;
	t = (y * 103) >> 10 & 0x000f000f000f000fULL;
	z = t | (y - t * 10) << 8;
	lz = (unsigned)__builtin_ctzll(z) & ~7u;
	z = (z + 0x3030303030303030ULL) >> lz;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	z = __builtin_bswap64(z);
#endif
	memcpy(p, &z, 8);
	return 8 - lz / 8;
}

/* The room kl_u64_put_ok() needs: "OK ", 20 digits, LF. */
#define KL_U64_OK_ROOM	24

/*
 * "OK V\n" at p, the reply of most requests, from KL_U64_OK_ROOM bytes of
 * room (it may write junk past the line within them); returns the length
 * of the line. One store below 10, no loop below 10^8 (a caller that
 * keeps larger values out of its common path inlines no more).
 */
static inline size_t
kl_u64_put_ok(char *p, uint64_t v)
{
	uint64_t	w;
	size_t		n;

	if (v < 10) {
		w = 0x0a30204bULL << 8 | 'O';	/* "OK 0\n" */
		w += v << 24;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		w = __builtin_bswap64(w);
#endif
		memcpy(p, &w, 8);
		return 5;
	}
	memcpy(p, "OK ", 4);
	if (v < 100000000)
		n = kl_u64_put8(p + 3, v);
	else
		kl_u64_put(p + 3, n = kl_u64_len(v), v);
	p[3 + n] = '\n';
	return n + 4;
}

#endif /* UTIL_H */
