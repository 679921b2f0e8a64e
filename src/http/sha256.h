/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * SHA-256 (FIPS 180-4) of a buffer, and base64 (RFC 4648, with padding),
 * for the status page's Content-Security-Policy hashes.
 */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>

#define SHA256_SIZE	32
/* base64_encode()'s output for n bytes, NUL included */
#define BASE64_SIZE(n)	(((n) + 2) / 3 * 4 + 1)

void	 sha256(const void *data, size_t len, unsigned char out[SHA256_SIZE]);
/* Writes BASE64_SIZE(len) bytes to out; returns the length before the NUL. */
size_t	 base64_encode(const unsigned char *in, size_t len, char *out);

#endif /* SHA256_H */
