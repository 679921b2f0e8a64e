/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * SHA-256 as FIPS 180-4 defines it, for the status page's CSP hashes
 * (status.c): one call over a buffer held in memory. It is here so that
 * the daemon needs no crypto library unless TLS is configured (tls.c).
 */
#include <stdint.h>
#include <string.h>

#include "sha256.h"

/* FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the
 * cube roots of the first 64 primes. */
static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b,
	0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
	0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
	0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152,
	0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
	0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
	0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
	0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
};

static inline uint32_t
sha256_ror(uint32_t x, unsigned n)
{
	return x >> n | x << (32 - n);
}

static inline uint32_t
sha256_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* FIPS 180-4, 6.2.2: one 64-byte block into the state h. */
static void
sha256_block(uint32_t h[8], const unsigned char *block)
{
	uint32_t	w[64], a, b, c, d, e, f, g, k, t1, t2;
	int		i;

	for (i = 0; i < 16; i++)
		w[i] = sha256_be32(block + 4 * i);
	for (; i < 64; i++)
		w[i] = (sha256_ror(w[i - 2], 17) ^ sha256_ror(w[i - 2], 19) ^
		    w[i - 2] >> 10) + w[i - 7] +
		    (sha256_ror(w[i - 15], 7) ^ sha256_ror(w[i - 15], 18) ^
		    w[i - 15] >> 3) + w[i - 16];
	a = h[0], b = h[1], c = h[2], d = h[3];
	e = h[4], f = h[5], g = h[6], k = h[7];
	for (i = 0; i < 64; i++) {
		t1 = k + (sha256_ror(e, 6) ^ sha256_ror(e, 11) ^
		    sha256_ror(e, 25)) + ((e & f) ^ (~e & g)) + sha256_k[i] +
		    w[i];
		t2 = (sha256_ror(a, 2) ^ sha256_ror(a, 13) ^
		    sha256_ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		k = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void
sha256(const void *data, size_t len, unsigned char out[SHA256_SIZE])
{
	/* FIPS 180-4, 5.3.3: the initial hash value */
	uint32_t		 h[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
	};
	const unsigned char	*p = data;
	unsigned char		 tail[128];
	uint64_t		 bits = (uint64_t)len * 8;
	size_t			 rest, padded;
	int			 i;

	for (; len >= 64; p += 64, len -= 64)
		sha256_block(h, p);
	/* FIPS 180-4, 5.1.1: a 1 bit, zeros, the length in bits, to a
	 * multiple of 64 bytes */
	rest = len;
	padded = rest + 1 + 8 <= 64 ? 64 : 128;
	memset(tail, 0, sizeof(tail));
	memcpy(tail, p, rest);
	tail[rest] = 0x80;
	for (i = 0; i < 8; i++)
		tail[padded - 1 - i] = (unsigned char)(bits >> (8 * i));
	sha256_block(h, tail);
	if (padded == 128)
		sha256_block(h, tail + 64);
	for (i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(h[i] >> 8);
		out[4 * i + 3] = (unsigned char)h[i];
	}
}

size_t
base64_encode(const unsigned char *in, size_t len, char *out)
{
	static const char	 digits[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char			*o = out;
	uint32_t		 v;

	for (; len >= 3; in += 3, len -= 3) {
		v = (uint32_t)in[0] << 16 | (uint32_t)in[1] << 8 | in[2];
		*o++ = digits[v >> 18];
		*o++ = digits[v >> 12 & 63];
		*o++ = digits[v >> 6 & 63];
		*o++ = digits[v & 63];
	}
	if (len > 0) {
		v = (uint32_t)in[0] << 16 | (len > 1 ? (uint32_t)in[1] << 8 : 0);
		*o++ = digits[v >> 18];
		*o++ = digits[v >> 12 & 63];
		*o++ = len > 1 ? digits[v >> 6 & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return (size_t)(o - out);
}
