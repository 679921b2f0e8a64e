/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * --etcd: etcd's own lock API as the baseline for backend etcd, spoken
 * over etcd's JSON gateway on the same connections and keys as the
 * keylockd workloads. A cycle is POST /v3/lock/lock {"name", "lease"} (it
 * answers once the lock is granted, with the lock's key) then POST
 * /v3/lock/unlock {"key"}; every connection holds one lease, granted before
 * the clock starts and revoked at the end (which also drops any lock
 * still held or waited for). Requests are HTTP/1.1 on keep-alive
 * connections, one in flight each; replies are parsed here, Content-Length
 * or chunked, and their JSON read with jansson. The control connection
 * reads etcd's revision before and after the run: the writes the run
 * cost.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "keylock-bench.h"

#define BETCD_HEAD_MAX	(64 * 1024)	/* a status line and headers */
#define BETCD_BODY_MAX	(1024 * 1024)

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t
betcd_b64(char *out, const char *s, size_t len)
{
	const unsigned char	*u = (const unsigned char *)s;
	size_t			 n = 0;

	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)u[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)u[i + 1] << 8;
		if (i + 2 < len)
			v |= u[i + 2];
		out[n++] = b64[v >> 18];
		out[n++] = b64[(v >> 12) & 63];
		out[n++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
		out[n++] = i + 2 < len ? b64[v & 63] : '=';
	}
	return n;
}

/* The request line and headers of a POST of body to path, then body. */
static size_t
betcd_post(const struct bconn *c, char *p, const char *path,
    const char *body, size_t blen)
{
	int n = snprintf(p, BETCD_REQ_MAX, "POST %s HTTP/1.1\r\nHost: %s\r\n"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n"
	    "%.*s", path, c->b->srv[c->s->srv].name, blen, (int)blen, body);

	return n > 0 && n < BETCD_REQ_MAX ? (size_t)n : 0;
}

size_t
betcd_encode(struct bconn *c, char *p, enum bench_rt type,
    const char *prefix, uint64_t key)
{
	struct bench	*b = c->b;
	char		 body[BETCD_REQ_MAX / 2], name[64], nb64[96];
	int		 n;

	switch (type) {
	case RT_LOCK:
		n = snprintf(name, sizeof(name), "%s%" PRIu64, prefix, key);
		nb64[betcd_b64(nb64, name, (size_t)n)] = '\0';
		n = snprintf(body, sizeof(body), "{\"name\":\"%s\","
		    "\"lease\":\"%" PRId64 "\"}", nb64, c->lease);
		return betcd_post(c, p, "/v3/lock/lock", body, (size_t)n);
	case RT_UNLOCK:
		n = snprintf(body, sizeof(body), "{\"key\":\"%s\"}", c->ekey);
		return betcd_post(c, p, "/v3/lock/unlock", body, (size_t)n);
	case RT_GRANT:
		n = snprintf(body, sizeof(body), "{\"TTL\":\"%" PRId64 "\"}",
		    b->etcd_ttl_s);
		return betcd_post(c, p, "/v3/lease/grant", body, (size_t)n);
	case RT_REVOKE:
		n = snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}",
		    (int64_t)key);
		return betcd_post(c, p, "/v3/lease/revoke", body, (size_t)n);
	default:	/* RT_RANGE: etcd's revision, in the header */
		n = snprintf(body, sizeof(body), "{\"key\":\"a2V5bG9jay1iZW5jaA==\""
		    ",\"count_only\":true}");
		return betcd_post(c, p, "/v3/kv/range", body, (size_t)n);
	}
}

/* The value of header name (case-insensitive) in head[0..len), or NULL. */
static const char *
betcd_header(const char *head, size_t len, const char *name, size_t *vlen)
{
	size_t		 nl = strlen(name);
	const char	*p = head, *end = head + len, *eol;

	while (p < end && (eol = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		p = eol + 1;
		if ((size_t)(end - p) > nl + 1 && strncasecmp(p, name, nl) == 0 &&
		    p[nl] == ':') {
			const char *v = p + nl + 1;

			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			eol = memchr(v, '\n', (size_t)(end - v));
			if (eol == NULL)
				return NULL;
			*vlen = (size_t)(eol - v);
			if (*vlen > 0 && v[*vlen - 1] == '\r')
				(*vlen)--;
			return v;
		}
	}
	return NULL;
}

/*
 * A chunked body at p[0..len): its length into *blen (copied together into
 * out, of BETCD_BODY_MAX bytes) and the bytes used, 0 if incomplete, -1 if
 * malformed. Trailers are skipped.
 */
static ssize_t
betcd_chunked(const char *p, size_t len, char *out, size_t *blen)
{
	size_t	off = 0;

	*blen = 0;
	for (;;) {
		const char	*lf = memchr(p + off, '\n', len - off);
		char		*end;
		unsigned long	 sz;

		if (lf == NULL)
			return 0;
		sz = strtoul(p + off, &end, 16);
		if (end == p + off || sz > BETCD_BODY_MAX - *blen)
			return -1;
		off = (size_t)(lf - p) + 1;
		if (sz == 0) {
			/* trailers up to an empty line */
			for (;;) {
				lf = memchr(p + off, '\n', len - off);
				if (lf == NULL)
					return 0;
				size_t ll = (size_t)(lf - (p + off));

				off = (size_t)(lf - p) + 1;
				if (ll == 0 || (ll == 1 && lf[-1] == '\r'))
					return (ssize_t)off;
			}
		}
		if (len - off < sz + 2)
			return 0;
		memcpy(out + *blen, p + off, sz);
		*blen += sz;
		off += sz;
		off += p[off] == '\r' ? 2 : 1;
	}
}

/* Reads what the workload needs from a reply's JSON into c. */
static void
betcd_reply_json(struct bconn *c, enum bench_rt type, int status,
    const char *body, size_t blen, struct breply *rep)
{
	json_error_t	 jerr;
	json_t		*top = json_loadb(body, blen, 0, &jerr);
	json_t		*root = top, *v, *res;

	rep->ok = false;
	rep->is_error = true;
	rep->val = c->eerr;
	if (root == NULL) {
		snprintf(c->eerr, sizeof(c->eerr), "HTTP %d: %.*s", status,
		    (int)(blen < 80 ? blen : 80), body);
		rep->vlen = strlen(c->eerr);
		return;
	}
	res = json_object_get(root, "result");
	if (json_is_object(res))
		root = res;
	if ((v = json_object_get(root, "error")) != NULL || status != 200) {
		json_t *msg = json_is_object(v) ? json_object_get(v,
		    "message") : v;

		snprintf(c->eerr, sizeof(c->eerr), "HTTP %d: %s", status,
		    json_is_string(msg) ? json_string_value(msg) : "error");
	} else {
		rep->ok = true;
		rep->is_error = false;
		c->eerr[0] = '\0';
		if (type == RT_LOCK && json_is_string(v = json_object_get(root,
		    "key")) && json_string_length(v) < sizeof(c->ekey)) {
			snprintf(c->ekey, sizeof(c->ekey), "%s",
			    json_string_value(v));
			rep->val = c->ekey;
		} else if (type == RT_LOCK) {
			rep->ok = false;
			rep->is_error = true;
			snprintf(c->eerr, sizeof(c->eerr), "lock: no key");
		}
		if (type == RT_GRANT && json_is_string(v = json_object_get(root,
		    "ID")))
			c->lease = strtoll(json_string_value(v), NULL, 10);
		if (type == RT_RANGE && json_is_string(v = json_object_get(
		    json_object_get(root, "header"), "revision")))
			c->erev = strtoll(json_string_value(v), NULL, 10);
	}
	rep->vlen = strlen(rep->val);
	json_decref(top);
}

ssize_t
betcd_parse(struct bconn *c, const char *p, size_t len, enum bench_rt type,
    struct breply *rep)
{
	const char	*hend = NULL, *v;
	size_t		 hl, vlen, blen;
	int		 status;
	ssize_t		 n;

	for (size_t i = 3; i < len && i < BETCD_HEAD_MAX; i++)
		if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n') {
			hend = p + i + 1;
			break;
		}
	if (hend == NULL)
		return len >= BETCD_HEAD_MAX ? -1 : 0;
	hl = (size_t)(hend - p);
	if (hl < 12 || memcmp(p, "HTTP/1.", 7) != 0)
		return -1;
	status = atoi(p + 9);
	if ((v = betcd_header(p, hl, "Content-Length", &vlen)) != NULL) {
		blen = strtoul(v, NULL, 10);
		if (blen > BETCD_BODY_MAX)
			return -1;
		if (len - hl < blen)
			return 0;
		betcd_reply_json(c, type, status, hend, blen, rep);
		return (ssize_t)(hl + blen);
	}
	if ((v = betcd_header(p, hl, "Transfer-Encoding", &vlen)) == NULL ||
	    vlen != 7 || strncasecmp(v, "chunked", 7) != 0)
		return -1;
	if (c->b->ebody == NULL &&
	    (c->b->ebody = malloc(BETCD_BODY_MAX)) == NULL)
		return -1;
	if ((n = betcd_chunked(hend, len - hl, c->b->ebody, &blen)) <= 0)
		return n;
	betcd_reply_json(c, type, status, c->b->ebody, blen, rep);
	return (ssize_t)hl + n;
}
