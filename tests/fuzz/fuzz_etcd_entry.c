/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libFuzzer harness for backend etcd's entry decoder
 * (ebe_entry_decode, src/backend/backend_etcd_replica.c): the input is an
 * entry read back from etcd, its key (prefix "kl/"), a NUL, then its
 * value, untrusted (another front end, or anyone who can write under the
 * prefix). An entry it takes must be one a client's LOCK could have made:
 * 1 to KL_KEYS_HARD_MAX keys, each by the key rules and inside the value,
 * its own key among them, a client id, the options within their bounds.
 * ebe_log_safe, which prints such a key in the log, must give printable
 * ASCII that fits. Seeds (corpus/etcd_entry) are entries a front end
 * wrote to a real etcd, and the shapes ereq_value writes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend_etcd_int.h"
#include "kl.h"
#include "proto.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#define PREFIXLEN	3	/* "kl/" */

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char		*k = (const char *)data, *v, *why;
	const uint8_t		*nul = memchr(data, '\0', size);
	const char		*keys[KL_KEYS_HARD_MAX];
	size_t			 keylens[KL_KEYS_HARD_MAX], klen, vlen;
	struct lt_acquire	 a;
	uint64_t		 client;
	struct echan		 ch;
	char			 safe[128];
	size_t			 n;

	if (nul == NULL)
		return 0;
	klen = (size_t)(nul - data);
	v = (const char *)nul + 1;
	vlen = size - klen - 1;

	n = ebe_log_safe(k, klen, safe, sizeof(safe));
	if (n >= sizeof(safe) || strlen(safe) != n)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)safe[i] < 0x20 ||
		    (unsigned char)safe[i] >= 0x7f)
			abort();

	why = ebe_entry_decode(k, klen, PREFIXLEN, v, vlen, &client, &ch, &a,
	    keys, keylens, KL_KEYS_HARD_MAX);
	if (why != NULL)
		return 0;
	if ((ch.chan != 0) != (ch.sclient != 0))
		abort();
	if (client < 1 || a.nkeys < 1 || a.nkeys > KL_KEYS_HARD_MAX ||
	    a.keys != keys || a.keylens != keylens ||
	    a.limit < 1 || a.limit > KL_LIMIT_MAX ||
	    (a.mode == LT_SHARED && a.limit != 1) ||
	    a.max_waiters < -1 || a.max_waiters > (int64_t)KL_LIMIT_MAX ||
	    a.max_holds > KL_LIMIT_MAX)
		abort();

	bool own = false;

	for (size_t i = 0; i < a.nkeys; i++) {
		if (keys[i] < v || keys[i] + keylens[i] > v + vlen ||
		    !proto_key_is_valid(keys[i], keylens[i], NULL, 0))
			abort();
		if (klen > PREFIXLEN + 2 + 2 * EBE_ID_HEX + 2 &&
		    keylens[i] == klen - PREFIXLEN - 2 - 2 * EBE_ID_HEX - 2 &&
		    memcmp(keys[i], k + PREFIXLEN + 2, keylens[i]) == 0)
			own = true;
	}
	if (!own)
		abort();
	return 0;
}
