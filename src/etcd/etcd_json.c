/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The etcd gateway's JSON (etcd.h): base64 keys and values, int64 as
 * strings, proto3's absent defaults, the bodies of transactions and the
 * decoding of replies into struct etcd_result. Pure: no I/O, no clock.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "etcd_impl.h"
#include "util.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
etcd_b64_encode(const void *src, size_t len, char *out)
{
	const unsigned char	*s = src;
	char			*o = out;
	size_t			 i;

	for (i = 0; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 |
		    s[i + 2];

		*o++ = b64_alphabet[v >> 18];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = b64_alphabet[(v >> 6) & 63];
		*o++ = b64_alphabet[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)s[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)s[i + 1] << 8;
		*o++ = b64_alphabet[v >> 18];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return (size_t)(o - out);
}

static int
b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

long
etcd_b64_decode(const char *src, size_t len, char *out)
{
	uint32_t	acc = 0;
	int		bits = 0;
	size_t		n = 0;

	while (len > 0 && src[len - 1] == '=')
		len--;
	if (len % 4 == 1)
		return -1;
	for (size_t i = 0; i < len; i++) {
		int v = b64_value(src[i]);

		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (char)((acc >> bits) & 0xff);
		}
	}
	return (long)n;
}

size_t
etcd_prefix_end(const char *prefix, size_t len, char *out)
{
	memcpy(out, prefix, len);
	while (len > 0) {
		if ((unsigned char)out[len - 1] != 0xff) {
			out[len - 1] = (char)((unsigned char)out[len - 1] + 1);
			return len;
		}
		len--;
	}
	out[0] = '\0';
	return 1;
}

const char *
etcd_status_name(enum etcd_status st)
{
	switch (st) {
	case ETCD_OK:
		return "ok";
	case ETCD_ERR_TIMEOUT:
		return "timeout";
	case ETCD_ERR_CONNECT:
		return "unreachable";
	case ETCD_ERR_GRPC:
		return "refused";
	case ETCD_ERR_PROTO:
		return "bad reply";
	case ETCD_ERR_NOMEM:
		return "out of memory";
	case ETCD_ERR_CANCELED:
		return "canceled";
	}
	return "?";
}

/* An int64 field: a JSON string of digits (the gateway's form) or a
 * number; absent is 0. Returns -1 for anything else. */
int
etcd_json_i64(const json_t *v, int64_t *out)
{
	*out = 0;
	if (v == NULL)
		return 0;
	if (json_is_integer(v)) {
		*out = (int64_t)json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -1;

	const char	*s = json_string_value(v);
	size_t		 len = json_string_length(v);
	bool		 neg = len > 0 && s[0] == '-';
	uint64_t	 u;

	if (!kl_parse_u64(s + neg, len - neg, 0,
	    neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &u))
		return -1;
	*out = neg ? (int64_t)(0 - u) : (int64_t)u;
	return 0;
}

json_t *
etcd_json_i64_new(int64_t v)
{
	char	buf[24];
	size_t	n = 0;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	if (v < 0)
		buf[n++] = '-';
	size_t	d = kl_u64_len(u);

	kl_u64_put(buf + n, d, u);
	return json_stringn(buf, n + d);
}

json_t *
etcd_json_b64(const char *p, size_t len)
{
	char	*buf;
	size_t	 n;
	json_t	*j;

	if ((buf = kl_malloc(4 * ((len + 2) / 3) + 1)) == NULL)
		return NULL;
	n = etcd_b64_encode(p, len, buf);
	j = json_stringn(buf, n);
	kl_free(buf);
	return j;
}

const char *
etcd_text_safe(const char *s, char *buf, size_t len)
{
	size_t n = 0;

	if (s == NULL || len == 0)
		return s;
	for (; s[n] != '\0' && n < len - 1; n++)
		buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' :
		    s[n];
	buf[n] = '\0';
	return buf;
}

bool
etcd_json_error(const json_t *root, int *code, const char **message)
{
	const json_t	*err = json_object_get(root, "error");
	int64_t		 c;

	if (err == NULL)
		return false;
	*message = "etcd error";
	if (json_is_object(err)) {	/* a stream's error */
		if (etcd_json_i64(json_object_get(err, "grpc_code"), &c) != 0)
			c = 0;
		if (json_is_string(json_object_get(err, "message")))
			*message = json_string_value(json_object_get(err,
			    "message"));
	} else {
		if (etcd_json_i64(json_object_get(root, "code"), &c) != 0)
			c = 0;
		if (json_is_string(err))
			*message = json_string_value(err);
	}
	*code = (int)c;
	return true;
}

size_t
etcd_kv_size(const json_t *v)
{
	size_t	n = 0;

	for (int i = 0; i < 2; i++) {
		const json_t *s = json_object_get(v, i == 0 ? "key" : "value");

		if (json_is_string(s))
			n += json_string_length(s) / 4 * 3 + 3;
	}
	return n;
}

static int
kv_bytes(const json_t *v, const char *name, const char **out, size_t *len,
    char **p)
{
	const json_t	*s = json_object_get(v, name);
	long		 n;

	*out = *p;
	*len = 0;
	if (s == NULL)
		return 0;
	if (!json_is_string(s))
		return -1;
	n = etcd_b64_decode(json_string_value(s), json_string_length(s), *p);
	if (n < 0)
		return -1;
	*len = (size_t)n;
	*p += n;
	return 0;
}

int
etcd_kv_decode(const json_t *v, struct etcd_kv *kv, char **p)
{
	if (!json_is_object(v) ||
	    kv_bytes(v, "key", &kv->key, &kv->keylen, p) != 0 ||
	    kv_bytes(v, "value", &kv->value, &kv->valuelen, p) != 0 ||
	    etcd_json_i64(json_object_get(v, "create_revision"),
	    &kv->create_revision) != 0 ||
	    etcd_json_i64(json_object_get(v, "mod_revision"),
	    &kv->mod_revision) != 0 ||
	    etcd_json_i64(json_object_get(v, "version"), &kv->version) != 0 ||
	    etcd_json_i64(json_object_get(v, "lease"), &kv->lease) != 0)
		return -1;
	return 0;
}

int
etcd_events_decode(const json_t *evs, struct etcd_event **out, size_t *n)
{
	size_t			 bytes = 0;
	struct etcd_event	*ev;
	char			*p;

	*out = NULL;
	*n = 0;
	if (evs == NULL)
		return 0;
	if (!json_is_array(evs))
		return -1;
	if (json_array_size(evs) == 0)
		return 0;
	for (size_t i = 0; i < json_array_size(evs); i++)
		bytes += etcd_kv_size(json_object_get(json_array_get(evs, i),
		    "kv"));
	if ((ev = kl_malloc(json_array_size(evs) * sizeof(*ev) + bytes +
	    1)) == NULL)
		return -2;
	p = (char *)(ev + json_array_size(evs));
	for (size_t i = 0; i < json_array_size(evs); i++) {
		const json_t	*je = json_array_get(evs, i);
		const json_t	*type = json_object_get(je, "type");

		ev[i].is_delete = json_is_string(type) &&
		    strcmp(json_string_value(type), "DELETE") == 0;
		if (etcd_kv_decode(json_object_get(je, "kv"), &ev[i].kv,
		    &p) != 0 || ev[i].kv.mod_revision <= 0 ||
		    (i > 0 && ev[i].kv.mod_revision <
		    ev[i - 1].kv.mod_revision)) {
			kl_free(ev);
			return -1;
		}
	}
	*out = ev;
	*n = json_array_size(evs);
	return 0;
}

static int
decode_kvs(const json_t *kvs, struct etcd_result *r, void **arena)
{
	size_t			 n = json_array_size(kvs), bytes = 0;
	struct etcd_kv		*out;
	char			*p;

	if (kvs == NULL)
		return 0;
	if (!json_is_array(kvs))
		return -1;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		bytes += etcd_kv_size(json_array_get(kvs, i));
	if ((*arena = kl_malloc(n * sizeof(*out) + bytes + 1)) == NULL) {
		r->status = ETCD_ERR_NOMEM;
		return -1;
	}
	out = *arena;
	p = (char *)(out + n);
	for (size_t i = 0; i < n; i++)
		if (etcd_kv_decode(json_array_get(kvs, i), &out[i], &p) != 0)
			return -1;
	r->kvs = out;
	r->nkvs = n;
	return 0;
}

int
etcd_result_decode(const json_t *root, struct etcd_result *r, void **arena)
{
	const json_t	*hdr, *v;

	*arena = NULL;
	if (!json_is_object(root)) {
		r->status = ETCD_ERR_PROTO;
		r->message = "reply is not a JSON object";
		return -1;
	}
	if ((v = json_object_get(root, "result")) != NULL && json_is_object(v))
		root = v;	/* a stream's reply (keepalive) */
	r->json = root;
	if (etcd_json_error(root, &r->grpc_code, &r->message)) {
		r->status = ETCD_ERR_GRPC;
		return 0;
	}
	hdr = json_object_get(root, "header");
	if ((hdr != NULL && !json_is_object(hdr)) ||
	    etcd_json_i64(json_object_get(hdr, "revision"), &r->revision) ||
	    etcd_json_i64(json_object_get(hdr, "raft_term"), &r->raft_term) ||
	    etcd_json_i64(json_object_get(root, "count"), &r->count) ||
	    etcd_json_i64(json_object_get(root, "deleted"), &r->deleted) ||
	    etcd_json_i64(json_object_get(root, "ID"), &r->lease_id) ||
	    etcd_json_i64(json_object_get(root, "TTL"), &r->ttl) ||
	    decode_kvs(json_object_get(root, "kvs"), r, arena) != 0) {
		if (r->status != ETCD_ERR_NOMEM) {
			r->status = ETCD_ERR_PROTO;
			r->message = "malformed reply";
		}
		return -1;
	}
	r->more = json_is_true(json_object_get(root, "more"));
	r->succeeded = json_is_true(json_object_get(root, "succeeded"));
	r->status = ETCD_OK;
	return 0;
}

/* Transactions: {"compare":[...],"success":[...],"failure":[...]}. */
struct etcd_txn {
	json_t	*compare;
	json_t	*success;
	json_t	*failure;
	size_t	 nops;
};

struct etcd_txn *
etcd_txn_new(void)
{
	struct etcd_txn *t = kl_calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->compare = json_array();
	t->success = json_array();
	t->failure = json_array();
	if (t->compare == NULL || t->success == NULL || t->failure == NULL) {
		etcd_txn_free(t);
		errno = ENOMEM;
		return NULL;
	}
	return t;
}

void
etcd_txn_free(struct etcd_txn *t)
{
	if (t == NULL)
		return;
	json_decref(t->compare);
	json_decref(t->success);
	json_decref(t->failure);
	kl_free(t);
}

size_t
etcd_txn_nops(const struct etcd_txn *t)
{
	return t->nops;
}

/* Appends op (which it steals) to arr; ok false: op is already freed.
 * -1 with ENOMEM. */
static int
txn_append(struct etcd_txn *t, json_t *arr, json_t *op, bool ok)
{
	if (!ok || json_array_append_new(arr, op) != 0) {
		errno = ENOMEM;
		return -1;
	}
	t->nops++;
	return 0;
}

int
etcd_txn_compare(struct etcd_txn *t, const char *key, size_t keylen,
    enum etcd_cmp_target target, enum etcd_cmp_result result, int64_t value)
{
	static const char *const targets[] = { "VERSION", "CREATE", "MOD",
	    "LEASE" };
	static const char *const fields[] = { "version", "create_revision",
	    "mod_revision", "lease" };
	static const char *const results[] = { "EQUAL", "GREATER", "LESS",
	    "NOT_EQUAL" };
	json_t	*c = json_object();
	bool	 ok = c != NULL &&
	    json_object_set_new(c, "key", etcd_json_b64(key, keylen)) == 0 &&
	    json_object_set_new(c, "target", json_string(targets[target])) == 0 &&
	    json_object_set_new(c, "result", json_string(results[result])) == 0 &&
	    json_object_set_new(c, fields[target], etcd_json_i64_new(value)) == 0;

	if (!ok)
		json_decref(c);
	return txn_append(t, t->compare, c, ok);
}

int
etcd_txn_put(struct etcd_txn *t, bool success, const char *key,
    size_t keylen, const char *value, size_t valuelen, int64_t lease)
{
	json_t	*put = json_object(), *op = json_object();
	bool	 ok = put != NULL && op != NULL &&
	    json_object_set_new(put, "key", etcd_json_b64(key, keylen)) == 0 &&
	    json_object_set_new(put, "value",
	    etcd_json_b64(value, valuelen)) == 0 &&
	    (lease == 0 || json_object_set_new(put, "lease",
	    etcd_json_i64_new(lease)) == 0);

	if (ok) {
		ok = json_object_set_new(op, "request_put", put) == 0;
		put = NULL;
	}
	json_decref(put);
	if (!ok)
		json_decref(op);
	return txn_append(t, success ? t->success : t->failure, op, ok);
}

int
etcd_txn_delete(struct etcd_txn *t, bool success, const char *key,
    size_t keylen, const char *end, size_t endlen)
{
	json_t	*del = json_object(), *op = json_object();
	bool	 ok = del != NULL && op != NULL &&
	    json_object_set_new(del, "key", etcd_json_b64(key, keylen)) == 0 &&
	    (end == NULL || json_object_set_new(del, "range_end",
	    etcd_json_b64(end, endlen)) == 0);

	if (ok) {
		ok = json_object_set_new(op, "request_delete_range", del) == 0;
		del = NULL;
	}
	json_decref(del);
	if (!ok)
		json_decref(op);
	return txn_append(t, success ? t->success : t->failure, op, ok);
}

/* The body of t; t keeps nothing of it. */
json_t *
etcd_txn_json(struct etcd_txn *t)
{
	json_t	*body = json_object();

	if (body == NULL)
		return NULL;
	if ((json_array_size(t->compare) > 0 &&
	    json_object_set(body, "compare", t->compare) != 0) ||
	    json_object_set(body, "success", t->success) != 0 ||
	    (json_array_size(t->failure) > 0 &&
	    json_object_set(body, "failure", t->failure) != 0)) {
		json_decref(body);
		return NULL;
	}
	return body;
}
