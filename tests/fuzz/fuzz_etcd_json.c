/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libFuzzer harness for the etcd client's decoders (src/etcd/etcd_json.c):
 * the input is one reply of etcd's JSON gateway, untrusted (a member, or
 * anyone on a plain-HTTP path to it). It goes through what a unary call
 * does with it (etcd_result_decode: header, counts, lease fields, the
 * kvs and their base64) and what the watch does with a reply line
 * (etcd_json_error, etcd_events_decode). Checked: whatever is decoded
 * lies inside the allocation the decoder sized for it (ASan), a success
 * has its kvs and events whole, and a refused reply says why. Seeds
 * (corpus/etcd_json) are replies of a real etcd 3.4 to the calls and the
 * watch backend etcd makes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "etcd_impl.h"
#include "util.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static volatile unsigned char	sink;

/* Reads every byte of p (ASan checks each). */
static void
touch(const char *p, size_t n)
{
	unsigned char x = 0;

	for (size_t i = 0; i < n; i++)
		x ^= (unsigned char)p[i];
	sink = x;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t		 jerr;
	json_t			*root;
	struct etcd_result	 r;
	struct etcd_event	*ev;
	void			*arena = NULL;
	size_t			 n;
	int			 code;
	const char		*msg;

	root = json_loadb((const char *)data, size, 0, &jerr);
	if (root == NULL)
		return 0;
	memset(&r, 0, sizeof(r));
	if (etcd_result_decode(root, &r, &arena) == 0) {
		if (r.status != ETCD_OK && r.status != ETCD_ERR_GRPC)
			abort();
		if (r.status == ETCD_ERR_GRPC && r.message == NULL)
			abort();
		for (size_t i = 0; i < r.nkvs; i++) {
			touch(r.kvs[i].key, r.kvs[i].keylen);
			touch(r.kvs[i].value, r.kvs[i].valuelen);
		}
	} else if (r.message == NULL) {
		abort();
	}
	kl_free(arena);

	if (etcd_json_error(root, &code, &msg) && msg == NULL)
		abort();
	switch (etcd_events_decode(json_object_get(json_object_get(root,
	    "result"), "events"), &ev, &n)) {
	case 0:
		for (size_t i = 0; i < n; i++) {
			touch(ev[i].kv.key, ev[i].kv.keylen);
			touch(ev[i].kv.value, ev[i].kv.valuelen);
			if (ev[i].kv.mod_revision <= 0 || (i > 0 &&
			    ev[i].kv.mod_revision < ev[i - 1].kv.mod_revision))
				abort();
		}
		kl_free(ev);
		break;
	case -1:
	case -2:
		if (ev != NULL)
			abort();
		break;
	default:
		abort();
	}
	json_decref(root);
	return 0;
}
