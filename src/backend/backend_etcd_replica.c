/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd's replica of the lock table (backend_etcd_int.h): every front
 * end applies the same etcd events in the same order to its own
 * locktable, so every one reaches the same verdicts at the same revision
 * (keylockd(8), BACKEND ETCD). A LOCK's first entry decides it: granted,
 * queued or refused, exactly as backend local would at that point. A
 * delete releases a hold or withdraws a wait. Tokens are the revision of
 * the grant shifted left by EBE_TOKEN_SHIFT plus a count within it, the
 * same on every front end, with no extra write. It never writes to etcd
 * itself; replies for our own clients go out through ebe_done().
 */
#include <sys/time.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "backend_etcd_int.h"
#include "kl.h"
#include "log.h"
#include "proto.h"
#include "util.h"

#define EHASH_MIN	64

/* ---- hash tables ---- */

/* Keyed by the replica's random seed (and a second key word made from
 * it), so that keys chosen by clients of any front end cannot be aimed
 * at one bucket (review L10). */
uint64_t
ehash_bytes(const void *p, size_t len, uint64_t seed)
{
	return kl_siphash(seed, seed * 0x9e3779b97f4a7c15ULL ^
	    0x2545f4914f6cdd1dULL, p, len);
}

static uint64_t
ehash_u64(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL);

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 27);
}

int
ehash_init(struct ehash *h)
{
	h->nb = EHASH_MIN;
	h->n = 0;
	h->b = kl_calloc(h->nb, sizeof(*h->b));
	return h->b != NULL ? 0 : -1;
}

void
ehash_cleanup(struct ehash *h)
{
	kl_free(h->b);
	h->b = NULL;
	h->nb = h->n = 0;
}

#define ENEXT(elem, off)	(*(void **)((char *)(elem) + (off)))

/* Inserts elem (hash h0) whose chain pointer is at off; hashfn gives
 * the hash of any element when the table grows. */
static void
ehash_insert(struct ehash *h, void *elem, uint64_t h0, size_t off,
    uint64_t (*hashfn)(const struct ebe *, const void *), const struct ebe *e)
{
	if (h->n >= h->nb * 2) {
		size_t	 nb = h->nb * 2;
		void	**b = kl_calloc(nb, sizeof(*b));

		if (b != NULL) {
			for (size_t i = 0; i < h->nb; i++) {
				void *x = h->b[i], *next;

				for (; x != NULL; x = next) {
					uint64_t hx = hashfn(e, x);

					next = ENEXT(x, off);
					ENEXT(x, off) = b[hx & (nb - 1)];
					b[hx & (nb - 1)] = x;
				}
			}
			kl_free(h->b);
			h->b = b;
			h->nb = nb;
		}
	}
	ENEXT(elem, off) = h->b[h0 & (h->nb - 1)];
	h->b[h0 & (h->nb - 1)] = elem;
	h->n++;
}

static void
ehash_remove(struct ehash *h, void *elem, uint64_t h0, size_t off)
{
	void **pp = &h->b[h0 & (h->nb - 1)];

	for (; *pp != NULL; pp = &ENEXT(*pp, off))
		if (*pp == elem) {
			*pp = ENEXT(elem, off);
			h->n--;
			return;
		}
}

static void *
ehash_head(const struct ehash *h, uint64_t h0)
{
	return h->b[h0 & (h->nb - 1)];
}

static uint64_t
owner_id_hash(const struct ebe *e, const void *x)
{
	const struct eowner *o = x;

	return ehash_u64(o->fe, o->client);
}

static uint64_t
owner_lo_hash(const struct ebe *e, const void *x)
{
	const struct eowner *o = x;

	return ehash_u64((uint64_t)(uintptr_t)o->lo, 0);
}

static uint64_t
req_hash(const struct ebe *e, const void *x)
{
	const struct ereq *r = x;

	return ehash_u64(r->fe, r->seq);
}

static uint64_t
entry_hash(const struct ebe *e, const void *x)
{
	const struct eentry *n = x;

	return ehash_bytes(n->ekey, n->ekeylen, e->seed);
}

static uint64_t
held_hash_of(const struct ebe *e, const struct eowner *o, const char *key,
    size_t len)
{
	return ehash_bytes(key, len, e->seed ^ (uint64_t)(uintptr_t)o);
}

static uint64_t
held_hash(const struct ebe *e, const void *x)
{
	const struct eentry *n = x;

	return held_hash_of(e, n->req->owner, n->lkey, n->lkeylen);
}

/* ---- owners ---- */

static struct eowner *
eowner_alloc(struct ebe *e, uint64_t fe, uint64_t client, uint64_t id,
    void *udata)
{
	struct eowner *o = kl_calloc(1, sizeof(*o));

	if (o == NULL)
		return NULL;
	if ((o->lo = locktable_owner_new(e->lt, id, udata)) == NULL) {
		kl_free(o);
		return NULL;
	}
	o->be = e;
	o->fe = fe;
	o->client = client;
	TAILQ_INIT(&o->reqs);
	TAILQ_INSERT_TAIL(&e->owners, o, entry);
	ehash_insert(&e->by_id, o, owner_id_hash(e, o),
	    offsetof(struct eowner, hnext), owner_id_hash, e);
	ehash_insert(&e->by_lo, o, owner_lo_hash(e, o),
	    offsetof(struct eowner, pnext), owner_lo_hash, e);
	return o;
}

struct eowner *
eowner_get(struct ebe *e, uint64_t fe, uint64_t client, bool create)
{
	struct eowner *o = ehash_head(&e->by_id, ehash_u64(fe, client));

	for (; o != NULL; o = o->hnext)
		if (o->fe == fe && o->client == client)
			return o;
	if (!create)
		return NULL;
	/* another front end's client, or one of ours the replica learnt
	 * of from a range and nobody answers for any more */
	return eowner_alloc(e, fe, client, client, NULL);
}

struct eowner *
eowner_of(struct ebe *e, const struct lt_owner *lo)
{
	struct eowner *o = ehash_head(&e->by_lo,
	    ehash_u64((uint64_t)(uintptr_t)lo, 0));

	for (; o != NULL; o = o->pnext)
		if (o->lo == lo)
			return o;
	return NULL;
}

/* A client of ours (fe 0 until it writes: the lease may change). */
struct eowner *
eowner_new_ours(struct ebe *e, uint64_t id, void *udata)
{
	struct eowner *o = eowner_alloc(e, 0, id, id, udata);

	if (o != NULL)
		o->ours = true;
	return o;
}

/* Frees o once nothing of it is left: no request, and for ours, no
 * connection. */
void
eowner_maybe_free(struct eowner *o)
{
	struct ebe *e = o->be;

	if (!TAILQ_EMPTY(&o->reqs) || (o->ours && !o->gone) || e->clearing)
		return;
	TAILQ_REMOVE(&e->owners, o, entry);
	ehash_remove(&e->by_id, o, owner_id_hash(e, o),
	    offsetof(struct eowner, hnext));
	ehash_remove(&e->by_lo, o, owner_lo_hash(e, o),
	    offsetof(struct eowner, pnext));
	locktable_owner_free(e->lt, o->lo, kl_now_ms());
	kl_free(o);
}

/* ---- requests and entries ---- */

size_t
eentry_key(const struct ebe *e, char *out, const char *lkey, size_t lkeylen,
    uint64_t fe, uint64_t seq)
{
	size_t n = 0;

	memcpy(out, e->prefix, e->prefixlen);
	n += e->prefixlen;
	memcpy(out + n, "q/", 2);
	n += 2;
	memcpy(out + n, lkey, lkeylen);
	n += lkeylen;
	n += (size_t)sprintf(out + n, "/%016" PRIx64 "-%016" PRIx64, fe, seq);
	return n;
}

static struct ereq *
ereq_find(struct ebe *e, uint64_t fe, uint64_t seq)
{
	struct ereq *r = ehash_head(&e->reqs, ehash_u64(fe, seq));

	for (; r != NULL; r = r->hnext)
		if (r->fe == fe && r->seq == seq)
			return r;
	return NULL;
}

static struct eentry *
eentry_find(struct ebe *e, const char *ekey, size_t len)
{
	struct eentry *n = ehash_head(&e->entries,
	    ehash_bytes(ekey, len, e->seed));

	for (; n != NULL; n = n->hnext)
		if (n->ekeylen == len && memcmp(n->ekey, ekey, len) == 0)
			return n;
	return NULL;
}

/*
 * A request of owner o with a's keys (duplicates once), its entries made
 * and indexed. The keys are copied; a->keys is not kept.
 */
struct ereq *
ereq_new(struct ebe *e, struct eowner *o, uint64_t fe, uint64_t seq,
    const struct lt_acquire *a)
{
	struct ereq	*r;
	size_t		 n = 0;

	if ((r = kl_calloc(1, sizeof(*r))) == NULL ||
	    (r->ent = kl_calloc(a->nkeys, sizeof(*r->ent))) == NULL ||
	    (r->keys = kl_calloc(a->nkeys, sizeof(*r->keys))) == NULL ||
	    (r->keylens = kl_calloc(a->nkeys, sizeof(*r->keylens))) == NULL)
		goto fail;
	for (size_t i = 0; i < a->nkeys; i++) {
		struct eentry	*x = &r->ent[n];
		bool		 dup = false;

		for (size_t j = 0; j < n && !dup; j++)
			dup = r->ent[j].lkeylen == a->keylens[i] &&
			    memcmp(r->ent[j].lkey, a->keys[i],
			    a->keylens[i]) == 0;
		if (dup)
			continue;
		if ((x->ekey = kl_malloc(e->prefixlen + a->keylens[i] + 64)) ==
		    NULL)
			goto fail;
		x->ekeylen = eentry_key(e, x->ekey, a->keys[i], a->keylens[i],
		    fe, seq);
		x->lkey = x->ekey + e->prefixlen + 2;
		x->lkeylen = a->keylens[i];
		x->req = r;
		r->keys[n] = x->lkey;
		r->keylens[n] = x->lkeylen;
		n++;
	}
	r->be = e;
	r->fe = fe;
	r->seq = seq;
	r->owner = o;
	r->ours = o->ours;
	r->state = REQ_PUTTING;
	r->nent = n;
	r->a = *a;
	r->a.keys = r->keys;
	r->a.keylens = r->keylens;
	r->a.nkeys = n;
	r->a.ttl_ms = 0;	/* ttl: our own timers, ending in a delete */
	r->ttl_ms = a->ttl_ms;
	for (size_t i = 0; i < n; i++)
		ehash_insert(&e->entries, &r->ent[i], entry_hash(e, &r->ent[i]),
		    offsetof(struct eentry, hnext), entry_hash, e);
	ehash_insert(&e->reqs, r, req_hash(e, r), offsetof(struct ereq, hnext),
	    req_hash, e);
	TAILQ_INSERT_TAIL(&o->reqs, r, entry);
	return r;
fail:
	if (r != NULL) {
		for (size_t i = 0; r->ent != NULL && i < a->nkeys; i++)
			kl_free(r->ent[i].ekey);
		kl_free(r->ent);
		kl_free(r->keys);
		kl_free(r->keylens);
		kl_free(r);
	}
	return NULL;
}

static void
held_add(struct ebe *e, struct eentry *x)
{
	ehash_insert(&e->held, x, held_hash(e, x),
	    offsetof(struct eentry, knext), held_hash, e);
}

static void
held_remove(struct ebe *e, struct eentry *x)
{
	ehash_remove(&e->held, x, held_hash(e, x),
	    offsetof(struct eentry, knext));
}

/* Our owner o's hold on key, or NULL. */
struct eentry *
eentry_held(struct ebe *e, const struct eowner *o, const char *key,
    size_t keylen)
{
	struct eentry *x = ehash_head(&e->held, held_hash_of(e, o, key,
	    keylen));

	for (; x != NULL; x = x->knext)
		if (x->req->owner == o && x->lkeylen == keylen &&
		    memcmp(x->lkey, key, keylen) == 0)
			return x;
	return NULL;
}

/* Frees r once its entries are gone from etcd and nothing refers to it. */
void
ereq_maybe_free(struct ereq *r)
{
	struct ebe	*e = r->be;
	struct eowner	*o = r->owner;

	if (r->nlive > 0 || r->refs > 0 || r->state == REQ_WAITING ||
	    r->state == REQ_HELD || o->open == r)
		return;
	/* ours, written: wait for the deletes to be applied */
	if (r->ours && e->state != EBE_LOST && e->state != EBE_STOPPING)
		for (size_t i = 0; i < r->nent; i++)
			if (r->ent[i].put_acked &&
			    r->ent[i].rep == ENT_ABSENT &&
			    r->state == REQ_PUTTING)
				return;
	for (size_t i = 0; i < r->nent; i++) {
		struct eentry *x = &r->ent[i];

		if (r->ours)
			held_remove(e, x);	/* if there */
		if (x->ttl != NULL)
			event_free(x->ttl);
		ehash_remove(&e->entries, x, entry_hash(e, x),
		    offsetof(struct eentry, hnext));
		kl_free(x->ekey);
	}
	ehash_remove(&e->reqs, r, req_hash(e, r), offsetof(struct ereq,
	    hnext));
	TAILQ_REMOVE(&o->reqs, r, entry);
	kl_free(r->ent);
	kl_free(r->keys);
	kl_free(r->keylens);
	kl_free(r->value);
	kl_free(r);
	eowner_maybe_free(o);
}

/*
 * The value of our request's entries: "k1 CLIENT MODE LIMIT MAXW TRY
 * MAXHOLDS NKEYS KEY... \nNAME". Keys never hold a space
 * (keylockd-protocol(7), KEYS); the name is the rest.
 */
int
ereq_value(struct ereq *r, const char *name)
{
	size_t	 len = 96 + (name != NULL ? strlen(name) : 0), n;
	char	*v;

	for (size_t i = 0; i < r->nent; i++)
		len += r->ent[i].lkeylen + 1;
	if ((v = kl_malloc(len)) == NULL)
		return -1;
	n = (size_t)snprintf(v, len, EBE_VALUE_VERSION " %" PRIu64 " %c %"
	    PRIu32 " %" PRId64 " %d %zu %zu", r->owner->client,
	    r->a.mode == LT_SHARED ? 's' : 'x', r->a.limit, r->a.max_waiters,
	    r->a.try ? 1 : 0, r->a.max_holds, r->nent);
	for (size_t i = 0; i < r->nent; i++) {
		v[n++] = ' ';
		memcpy(v + n, r->ent[i].lkey, r->ent[i].lkeylen);
		n += r->ent[i].lkeylen;
	}
	v[n++] = '\n';
	if (name != NULL) {
		memcpy(v + n, name, strlen(name));
		n += strlen(name);
	}
	r->value = v;
	r->valuelen = n;
	return 0;
}

/* Parses one decimal field of s[*off..len) (an optional '-' first). */
static bool
value_num(const char *s, size_t len, size_t *off, bool neg_ok, int64_t *out)
{
	size_t		 i = *off, start;
	bool		 neg = false;
	uint64_t	 u;

	if (i < len && s[i] == ' ')
		i++;
	if (neg_ok && i < len && s[i] == '-') {
		neg = true;
		i++;
	}
	start = i;
	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++;
	if (!kl_parse_u64(s + start, i - start, 0, INT64_MAX, &u))
		return false;
	*out = neg ? -(int64_t)u : (int64_t)u;
	*off = i;
	return true;
}

/* Another front end's request from an entry's value; keys point into
 * value. NULL, or what is wrong with it. */
static const char *
value_parse(const char *v, size_t len, uint64_t *client,
    struct lt_acquire *a, const char **keys, size_t *keylens, size_t max)
{
	size_t	off = sizeof(EBE_VALUE_VERSION) - 1;
	int64_t	c, limit, maxw, try, maxh, nkeys;

	if (len < off || memcmp(v, EBE_VALUE_VERSION, off) != 0)
		return "not a lock entry of this version";
	if (!value_num(v, len, &off, false, &c) || c < 1)
		return "bad client id";
	if (off + 3 > len || v[off] != ' ' ||
	    (v[off + 1] != 's' && v[off + 1] != 'x'))
		return "bad mode";
	memset(a, 0, sizeof(*a));
	a->mode = v[off + 1] == 's' ? LT_SHARED : LT_EXCLUSIVE;
	off += 2;
	/* the bounds a client's LOCK meets (keylockd-protocol(7)) */
	if (!value_num(v, len, &off, false, &limit) || limit < 1 ||
	    limit > KL_LIMIT_MAX)
		return "bad limit";
	if (a->mode == LT_SHARED && limit != 1)
		return "limit with a shared mode";
	if (!value_num(v, len, &off, true, &maxw) || maxw < -1 ||
	    maxw > KL_LIMIT_MAX)
		return "bad max_waiters";
	if (!value_num(v, len, &off, false, &try) || try > 1)
		return "bad try";
	if (!value_num(v, len, &off, false, &maxh) || maxh > KL_LIMIT_MAX)
		return "bad max holds";
	if (!value_num(v, len, &off, false, &nkeys) || nkeys < 1 ||
	    (uint64_t)nkeys > max)
		return "bad number of keys";
	for (int64_t i = 0; i < nkeys; i++) {
		size_t start;

		if (off >= len || v[off] != ' ')
			return "fewer keys than it says";
		start = ++off;
		while (off < len && v[off] != ' ' && v[off] != '\n')
			off++;
		if (!proto_key_is_valid(v + start, off - start, NULL, 0))
			return "a key against the key rules";
		keys[i] = v + start;
		keylens[i] = off - start;
	}
	/* then the NAME, or nothing */
	if (off < len) {
		if (v[off] != '\n' || len - off - 1 > KL_NAME_MAX)
			return "more keys than it says, or a long name";
		for (size_t i = off + 1; i < len; i++)
			if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
				return "a control byte in the name";
	}
	*client = (uint64_t)c;
	a->limit = (uint32_t)limit;
	a->max_waiters = maxw;
	a->try = try != 0;
	a->max_holds = (size_t)maxh;
	a->keys = keys;
	a->keylens = keylens;
	a->nkeys = (size_t)nkeys;
	return NULL;
}

static bool
hex16(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < EBE_ID_HEX; i++) {
		int c = s[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return false;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return true;
}

/* P q/KEY/FE-SEQ: its id. */
static bool
ekey_parse(const struct ebe *e, const char *k, size_t len, uint64_t *fe,
    uint64_t *seq)
{
	size_t idlen = 2 * EBE_ID_HEX + 1;

	return len > e->prefixlen + 2 + 1 + idlen &&
	    memcmp(k + e->prefixlen, "q/", 2) == 0 &&
	    k[len - idlen - 1] == '/' && k[len - EBE_ID_HEX - 1] == '-' &&
	    hex16(k + len - idlen, fe) && hex16(k + len - EBE_ID_HEX, seq);
}

const char *
ebe_entry_decode(const char *k, size_t klen, size_t prefixlen,
    const char *v, size_t vlen, uint64_t *client, struct lt_acquire *a,
    const char **keys, size_t *keylens, size_t max)
{
	size_t		 idlen = 2 * EBE_ID_HEX + 1;
	const char	*lkey, *why;
	size_t		 lkeylen;

	if (klen <= prefixlen + 2 + 1 + idlen)
		return "not an entry's key";
	lkey = k + prefixlen + 2;
	lkeylen = klen - prefixlen - 2 - idlen - 1;
	if ((why = value_parse(v, vlen, client, a, keys, keylens, max)) !=
	    NULL)
		return why;
	/* its own key is one of its request's */
	for (size_t i = 0; i < a->nkeys; i++)
		if (keylens[i] == lkeylen && memcmp(keys[i], lkey,
		    lkeylen) == 0)
			return NULL;
	return "its key is not one of its request's";
}

size_t
ebe_log_safe(const char *s, size_t len, char *out, size_t cap)
{
	size_t n = 0, max = cap > 4 ? cap - 4 : 0;

	for (size_t i = 0; i < len && n < max; i++)
		out[n++] = (unsigned char)s[i] < 0x20 ||
		    (unsigned char)s[i] >= 0x7f ? '?' : s[i];
	if (n < len && cap >= 4) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	if (cap > 0)
		out[n < cap ? n : cap - 1] = '\0';
	return n;
}

/* A bad entry is left out of the table, with a warning: at most one a
 * second, with the count of those not logged. */
static void
entry_skip(struct ebe *e, const struct etcd_kv *kv, const char *why)
{
	uint64_t	now = kl_now_ms();
	char		k[128];

	e->count->bad_entries++;
	if (e->bad_log_ms != 0 && now < e->bad_log_ms + 1000) {
		e->bad_unlogged++;
		return;
	}
	ebe_log_safe(kv->key, kv->keylen, k, sizeof(k));
	log_warnx("backend etcd: entry %s left out: %s (%" PRIu64 " more "
	    "since the last warning)", k, why, e->bad_unlogged);
	e->bad_log_ms = now;
	e->bad_unlogged = 0;
}

/* ---- the table's decisions ---- */

uint64_t
replica_next_token(void *arg)
{
	struct ebe	*e = arg;
	uint64_t	 n = e->rev_grants++;

	if (n >= (1ULL << EBE_TOKEN_SHIFT))
		n = (1ULL << EBE_TOKEN_SHIFT) - 1;	/* never reached */
	return (uint64_t)e->rev << EBE_TOKEN_SHIFT | n;
}

static void
ttl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eentry	*x = arg;
	struct ebe	*e = x->req->be;

	if (x->rep == ENT_HELD && !x->releasing && ebe_lease_safe(e)) {
		x->releasing = true;
		x->why = LT_WHY_EXPIRED;
		commit_delete(e, &x, 1, NULL);
	}
	ebe_end_turn(e);
}

void
replica_ttl_arm(struct eentry *x, uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000),
	    (suseconds_t)(ms % 1000) * 1000 };

	if (x->ttl == NULL && (x->ttl = evtimer_new(x->req->be->base, ttl_cb,
	    x)) == NULL) {
		log_warnx("backend etcd: no memory for a ttl timer");
		return;
	}
	x->ttl_ms = ms;
	evtimer_add(x->ttl, &tv);
}

/* r is granted: its keys are held. */
static void
req_held(struct ebe *e, struct ereq *r, uint64_t token)
{
	struct be_result res;

	r->state = REQ_HELD;
	for (size_t i = 0; i < r->nent; i++) {
		struct eentry *x = &r->ent[i];

		if (x->rep == ENT_LIVE)
			x->rep = ENT_HELD;	/* ABSENT: at its put */
		if (r->ours) {
			held_add(e, x);
			if (r->ttl_ms > 0)
				replica_ttl_arm(x, r->ttl_ms);
		}
	}
	if (!r->ours || r->replied || r->withdrawing || r->owner->gone)
		return;		/* a hold that ends at our delete */
	if (e->rebuilding || e->frozen || !ebe_lease_safe(e)) {
		/* never a token from a rebuild: end it instead */
		r->replied = true;
		r->withdrawing = true;
		memset(&res, 0, sizeof(res));
		res.op = BE_LOCK;
		res.err = KL_ERR_BACKEND;
		res.text = "etcd: rebuilding the lock table; try again";
		ebe_done(e, r->owner, &res);
		commit_delete_req(e, r);
		return;
	}
	r->replied = true;
	memset(&res, 0, sizeof(res));
	res.op = BE_LOCK;
	res.value = token;
	ebe_done(e, r->owner, &res);
}

void
replica_granted(void *arg, struct lt_owner *lo, uint64_t token,
    uint64_t waited_ms)
{
	struct ebe	*e = arg;
	struct eowner	*o;
	struct ereq	*r;

	if (e->clearing || (o = eowner_of(e, lo)) == NULL)
		return;
	TAILQ_FOREACH(r, &o->reqs, entry)
		if (r->state == REQ_WAITING) {
			req_held(e, r, token);
			return;
		}
}

/* The table's verdict on r, at its first entry's revision. */
static void
req_decide(struct ebe *e, struct ereq *r)
{
	struct lt_blocker	 why;
	struct be_result	 res;
	struct lt_key_view	 v;
	bool			 granted = false;
	uint64_t		 token = 0;
	enum kl_err		 err;

	memset(&why, 0, sizeof(why));
	if (locktable_owner_is_waiting(r->owner->lo))
		err = KL_ERR_LIMIT;	/* two waits at once: not ours */
	else
		err = locktable_acquire(e->lt, r->owner->lo, &r->a, kl_now_ms(),
		    &granted, &token, &why);
	if (err == KL_OK && granted) {
		req_held(e, r, token);
		return;
	}
	if (err == KL_OK) {
		r->state = REQ_WAITING;
		if (r->ours && (r->deadline || r->owner->gone || e->rebuilding)) {
			if (e->rebuilding && !r->replied && !r->owner->gone) {
				r->replied = true;
				memset(&res, 0, sizeof(res));
				res.op = BE_LOCK;
				res.err = KL_ERR_BACKEND;
				res.text = "etcd: rebuilding the lock table; "
				    "try again";
				ebe_done(e, r->owner, &res);
			}
			r->withdrawing = true;
			commit_delete_req(e, r);
		} else if (r->ours && !r->replied && !r->withdrawing &&
		    !r->owner->gone && e->hooks.queued != NULL)
			e->hooks.queued(e->hooks.arg, r->owner->lo);
		return;
	}
	r->state = REQ_REFUSED;
	if (!r->ours)
		return;
	if (!r->replied && !r->owner->gone) {
		memset(&res, 0, sizeof(res));
		res.op = BE_LOCK;
		res.err = err;
		res.why = why;
		res.limit = r->a.limit;
		res.max_waiters = r->a.max_waiters;
		if (err == KL_ERR_CONFLICT) {
			locktable_key_view(locktable_find(e->lt, why.key,
			    why.keylen), &v);
			res.key_limit = v.limit;
		}
		r->replied = true;
		ebe_done(e, r->owner, &res);
	}
	commit_delete_req(e, r);
}

/* ---- applying events ---- */

/*
 * Keeps of keys[0..n) those a live entry of the request still has (a
 * range's entries of one request): an UNLOCK of some keys of a grant
 * deletes their entries alone, and a rebuilt table must not hold them
 * again. Returns how many are kept.
 */
static size_t
live_keys(const struct ebe *e, const char **keys, size_t *keylens, size_t n,
    const struct erange_kv *live, size_t nlive)
{
	size_t kept = 0, idlen = 2 * EBE_ID_HEX + 2;	/* "/FE-SEQ" */

	for (size_t i = 0; i < n; i++) {
		bool found = false;

		for (size_t k = 0; k < nlive && !found; k++)
			found = live[k].keylen == e->prefixlen + 2 +
			    keylens[i] + idlen && memcmp(live[k].key +
			    e->prefixlen + 2, keys[i], keylens[i]) == 0;
		if (found) {
			keys[kept] = keys[i];
			keylens[kept++] = keylens[i];
		}
	}
	return kept;
}

/* A put; while rebuilding, live holds the range's entries of its
 * request (NULL from the watch, which brings all of them at once). */
static void
apply_put(struct ebe *e, const struct etcd_kv *kv,
    const struct erange_kv *live, size_t nlive)
{
	const char		*keys[KL_KEYS_HARD_MAX];
	size_t			 keylens[KL_KEYS_HARD_MAX];
	struct lt_acquire	 a;
	struct ereq		*r;
	struct eentry		*x;
	uint64_t		 fe, seq, client;

	if (kv->version != 1)
		return;		/* a rewrite */
	if (!ekey_parse(e, kv->key, kv->keylen, &fe, &seq)) {
		entry_skip(e, kv, "not an entry's key");
		return;
	}
	if ((r = ereq_find(e, fe, seq)) == NULL) {
		struct eowner *o;

		const char *why = ebe_entry_decode(kv->key, kv->keylen,
		    e->prefixlen, kv->value, kv->valuelen, &client, &a, keys,
		    keylens, KL_KEYS_HARD_MAX);

		if (why != NULL) {
			entry_skip(e, kv, why);
			return;
		}
		if (live != NULL && (a.nkeys = live_keys(e, keys, keylens,
		    a.nkeys, live, nlive)) == 0)
			return;
		if ((o = eowner_get(e, fe, client, true)) == NULL ||
		    (r = ereq_new(e, o, fe, seq, &a)) == NULL) {
			ebe_lose(e, "out of memory for the lock table");
			return;
		}
		if (fe == e->fe) {
			/* ours, but unknown here: nobody waits for it */
			r->ours = true;
			r->replied = true;
			r->withdrawing = true;
			for (size_t i = 0; i < r->nent; i++)
				r->ent[i].put_acked = true;
		}
	}
	if ((x = eentry_find(e, kv->key, kv->keylen)) == NULL ||
	    x->rep != ENT_ABSENT)
		return;
	x->rep = r->state == REQ_HELD ? ENT_HELD : ENT_LIVE;
	r->nlive++;
	if (r->state == REQ_PUTTING)
		req_decide(e, r);
	/* ours and unknown, or left over: delete it */
	if (r->ours && r->withdrawing && r->state != REQ_WAITING)
		commit_delete_req(e, r);
}

/* Fills res for the end of our wait r: TIMEOUT, CANCELLED, SHUTDOWN. */
static void
wait_result(struct ebe *e, struct ereq *r, struct be_result *res)
{
	memset(res, 0, sizeof(*res));
	res->op = BE_LOCK;
	res->value = 1;
	switch (r->why) {
	case LT_WHY_CANCEL:
		res->err = KL_ERR_CANCELLED;
		break;
	case LT_WHY_SHUTDOWN:
		res->err = KL_ERR_SHUTDOWN;
		break;
	default:
		res->err = KL_ERR_TIMEOUT;
		if (locktable_wait_blocker(e->lt, r->owner->lo, kl_now_ms(),
		    &res->why) && res->why.nwaiters > 0)
			res->why.nwaiters--;	/* not this one */
		break;
	}
}

static void
apply_delete(struct ebe *e, const struct etcd_kv *kv)
{
	struct eentry		*x = eentry_find(e, kv->key, kv->keylen);
	struct ereq		*r;
	struct be_result	 res;
	bool			 held;

	if (x == NULL || (x->rep != ENT_LIVE && x->rep != ENT_HELD))
		return;
	r = x->req;
	held = x->rep == ENT_HELD;
	x->rep = ENT_GONE;
	r->nlive--;
	switch (r->state) {
	case REQ_HELD:
		if (held) {
			/* counted as backend local counts it on the owner's
			 * front end; another's release is a plain one here */
			locktable_release_why(e->lt, r->owner->lo, x->lkey,
			    x->lkeylen, kl_now_ms(), r->ours ? x->why :
			    LT_WHY_UNLOCK);
			if (r->ours)
				held_remove(e, x);
			if (x->ttl != NULL)
				evtimer_del(x->ttl);
		}
		if (r->nlive > 0)
			break;
		r->state = REQ_GONE;
		if (r->ours && r->withdrawing && !r->replied &&
		    !r->owner->gone) {
			/* granted while our withdrawal (CANCEL, timeout) was
			 * on its way: req_held() kept that from the client,
			 * and the LOCK ends as the withdrawal said */
			wait_result(e, r, &res);
			r->replied = true;
			ebe_done(e, r->owner, &res);
		}
		break;
	case REQ_WAITING:
		if (r->ours && !r->replied && !r->owner->gone) {
			wait_result(e, r, &res);
			r->replied = true;
			ebe_done(e, r->owner, &res);
		}
		locktable_withdraw(e->lt, r->owner->lo, kl_now_ms(),
		    r->ours ? r->why : LT_WHY_TIMEOUT);
		r->state = REQ_GONE;
		break;
	default:
		break;
	}
	if (r->ours)
		ebe_release_applied(e, x);
	ereq_maybe_free(r);
}

static void
apply_heartbeat(struct ebe *e, const struct etcd_event *ev)
{
	uint64_t fe;

	if (ev->kv.keylen == e->prefixlen + 3 + EBE_ID_HEX &&
	    hex16(ev->kv.key + e->prefixlen + 3, &fe) && fe == e->fe &&
	    ev->kv.mod_revision >= e->hb_rev)
		e->hb_seen = true;
}

/* The watch's events, in revision order. */
void
replica_events(void *arg, const struct etcd_event *ev, size_t n,
    int64_t hrev)
{
	struct ebe *e = arg;

	if (!ebe_lease_safe(e) || e->state == EBE_LOST)
		return;
	kl_clock_hold();
	for (size_t i = 0; i < n && e->state != EBE_LOST; i++) {
		const struct etcd_kv *kv = &ev[i].kv;

		if (kv->mod_revision != e->rev) {
			e->rev = kv->mod_revision;
			e->rev_grants = 0;
		}
		if (kv->keylen > e->prefixlen + 3 &&
		    memcmp(kv->key + e->prefixlen, "fe/", 3) == 0) {
			if (!ev[i].is_delete)
				apply_heartbeat(e, &ev[i]);
		} else if (ev[i].is_delete) {
			apply_delete(e, kv);
		} else {
			apply_put(e, kv, NULL, 0);
		}
	}
	kl_clock_release();
	ebe_end_turn(e);
}

/* ---- the table itself ---- */

int
replica_new(struct ebe *e)
{
	struct lt_hooks lh = { replica_granted, replica_next_token, e };

	kl_random(&e->seed, sizeof(e->seed));
	TAILQ_INIT(&e->owners);
	if ((e->lt = locktable_new(&lh, e->seed)) == NULL ||
	    ehash_init(&e->by_id) != 0 || ehash_init(&e->by_lo) != 0 ||
	    ehash_init(&e->reqs) != 0 || ehash_init(&e->entries) != 0 ||
	    ehash_init(&e->held) != 0)
		return -1;
	return 0;
}

/*
 * Empties the table, keeping our connected owners (the seam holds their
 * lt_owner): every request is dropped, every other owner freed. Grants
 * that the releases cause are ignored, and released again, until nothing
 * is held or waited for.
 */
void
replica_clear(struct ebe *e)
{
	struct eowner	*o, *next;
	bool		 busy = true;
	uint64_t	 now = kl_now_ms();

	e->clearing = true;
	while (busy) {
		busy = false;
		TAILQ_FOREACH(o, &e->owners, entry)
			if (locktable_owner_nholds(o->lo) > 0 ||
			    locktable_owner_is_waiting(o->lo)) {
				locktable_release_owner(e->lt, o->lo, now,
				    LT_WHY_SHUTDOWN);
				busy = true;
			}
	}
	/* owners stay until the end (eowner_maybe_free waits) */
	TAILQ_FOREACH(o, &e->owners, entry) {
		struct ereq *r;

		while ((r = TAILQ_FIRST(&o->reqs)) != NULL) {
			r->state = REQ_GONE;
			r->nlive = 0;
			r->refs = 0;
			if (o->open == r)
				o->open = NULL;
			for (size_t i = 0; i < r->nent; i++) {
				r->ent[i].put_acked = false;
				r->ent[i].rep = ENT_GONE;
			}
			ereq_maybe_free(r);
		}
	}
	e->clearing = false;
	for (o = TAILQ_FIRST(&e->owners); o != NULL; o = next) {
		next = TAILQ_NEXT(o, entry);
		if (!o->ours)
			eowner_maybe_free(o);
		else if (o->gone)
			eowner_maybe_free(o);
	}
}

void
replica_free(struct ebe *e)
{
	struct eowner *o;

	if (e->lt == NULL)
		return;
	replica_clear(e);
	/* what is left: our connected owners; the seam frees them first */
	while ((o = TAILQ_FIRST(&e->owners)) != NULL) {
		TAILQ_REMOVE(&e->owners, o, entry);
		locktable_owner_free(e->lt, o->lo, kl_now_ms());
		kl_free(o);
	}
	locktable_free(e->lt);
	e->lt = NULL;
	ehash_cleanup(&e->by_id);
	ehash_cleanup(&e->by_lo);
	ehash_cleanup(&e->reqs);
	ehash_cleanup(&e->entries);
	ehash_cleanup(&e->held);
}

/* ---- rebuilding from a range ---- */

/*
 * A token is the revision at which its grant was made, and a range
 * cannot say which that was for a hold granted after its put (when a
 * delete freed its keys): a table built from the newest range would
 * give such holds tokens their clients never received. So the range is
 * taken twice: at the newest revision R, which gives the oldest live
 * entry's revision M, then at M - 1, and the watch goes on from M: every
 * grant a live hold has was made at M or later, and the watch brings
 * those events again in order, so each is made at its own revision, as
 * every other replica made it. When M - 1 is compacted (or the second
 * range fails), the table is built from R's entries: holds carried then
 * have R's revision as their token's (replica_build).
 */
struct erange {
	struct ebe		*e;
	int64_t			 rev;	/* of the first page; 0 before */
	struct erange_kv	*kvs;
	size_t			 n, cap;
	char			*next;	/* key to go on from */
	size_t			 nextlen;
	struct etcd_call	*call;
	bool			 back;	/* the second range, at M - 1 */
	struct erange_kv	*flat;	/* the first's entries, at flat_rev */
	size_t			 nflat;
	int64_t			 flat_rev;
};

static void	range_page(struct erange *g);

static void
range_kvs_free(struct erange_kv *kvs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		kl_free(kvs[i].key);
		kl_free(kvs[i].value);
	}
	kl_free(kvs);
}

static void
range_free(struct erange *g)
{
	if (g == NULL)
		return;
	if (g->call != NULL)
		etcd_cancel(g->call);
	range_kvs_free(g->kvs, g->n);
	range_kvs_free(g->flat, g->nflat);
	kl_free(g->next);
	kl_free(g);
}

static int
range_kv_cmp(const void *pa, const void *pb)
{
	const struct erange_kv *a = pa, *b = pb;

	if (a->create_revision != b->create_revision)
		return a->create_revision < b->create_revision ? -1 : 1;
	if (a->fe != b->fe)
		return a->fe < b->fe ? -1 : 1;
	if (a->seq != b->seq)
		return a->seq < b->seq ? -1 : 1;
	return 0;
}

/*
 * Every live entry, in the order etcd wrote them: revision, then, inside
 * one transaction (one front end's), its LOCKs in their order. Applying
 * the live requests in that order gives the table incremental replicas
 * have: per-key FIFO admits no request ahead of an earlier one. kvs is
 * sorted in place; the table is then at rev.
 */
void
replica_build(struct ebe *e, struct erange_kv *kvs, size_t n, int64_t rev)
{
	struct etcd_kv kv;

	if (n > 0)
		qsort(kvs, n, sizeof(*kvs), range_kv_cmp);
	e->rebuilding = true;
	kl_clock_hold();
	for (size_t i = 0, first = 0, end = 0; i < n &&
	    e->state != EBE_LOST; i++) {
		if (i == end) {		/* the entries of one request */
			first = i;
			for (end = i + 1; end < n && kvs[end].fe ==
			    kvs[first].fe && kvs[end].seq == kvs[first].seq;
			    end++)
				;
		}
		memset(&kv, 0, sizeof(kv));
		kv.key = kvs[i].key;
		kv.keylen = kvs[i].keylen;
		kv.value = kvs[i].value;
		kv.valuelen = kvs[i].valuelen;
		kv.version = 1;
		kv.create_revision = kv.mod_revision = kvs[i].create_revision;
		e->rev = rev;
		apply_put(e, &kv, &kvs[first], end - first);
	}
	kl_clock_release();
	e->rebuilding = false;
	e->rev = rev;
	e->rev_grants = 0;
	log_info("backend etcd: lock table built from %zu entries at revision "
	    "%" PRId64, n, rev);
}

static void
range_apply(struct erange *g)
{
	struct ebe *e = g->e;

	replica_build(e, g->kvs, g->n, g->rev);
	e->range = NULL;
	if (e->state != EBE_LOST)
		ebe_ready(e, g->rev);
	range_free(g);
}

/* The first range is complete: the second goes back to M - 1. False
 * when there is none to take (no entry, or M - 1 before revision 1). */
static bool
range_back(struct erange *g)
{
	int64_t oldest = g->rev;

	if (g->e->range_flat)
		return false;
	for (size_t i = 0; i < g->n; i++)
		if (g->kvs[i].create_revision < oldest)
			oldest = g->kvs[i].create_revision;
	if (g->n == 0 || oldest - 1 < 1)
		return false;
	g->flat = g->kvs;
	g->nflat = g->n;
	g->flat_rev = g->rev;
	g->kvs = NULL;
	g->n = g->cap = 0;
	kl_free(g->next);
	g->next = NULL;
	g->back = true;
	g->rev = oldest - 1;
	range_page(g);
	return true;
}

/* The second range failed: the table from the first one's entries. */
static void
range_flat(struct erange *g, const char *why)
{
	log_info("backend etcd: no range at revision %" PRId64 " (%s): the "
	    "table is built at revision %" PRId64 ", the tokens of the holds "
	    "it carries from there", g->rev, why, g->flat_rev);
	range_kvs_free(g->kvs, g->n);
	g->kvs = g->flat;
	g->n = g->nflat;
	g->rev = g->flat_rev;
	g->flat = NULL;
	g->nflat = 0;
	g->back = false;
	range_apply(g);
}

static void
range_cb(void *arg, const struct etcd_result *res)
{
	struct erange	*g = arg;
	struct ebe	*e = g->e;

	g->call = NULL;
	if (res->status != ETCD_OK && g->back) {
		range_flat(g, res->message != NULL ? res->message :
		    etcd_status_name(res->status));
		return;
	}
	if (res->status != ETCD_OK) {
		e->range = NULL;
		range_free(g);
		ebe_fail(e, "range of %s: %s: %s", e->prefix,
		    etcd_status_name(res->status), res->message);
		return;
	}
	if (g->rev == 0)
		g->rev = res->revision;
	for (size_t i = 0; i < res->nkvs; i++) {
		const struct etcd_kv	*kv = &res->kvs[i];
		struct erange_kv	*d;

		if (g->n == g->cap) {
			size_t			 cap = g->cap ? g->cap * 2 : 256;
			struct erange_kv	*p = kl_realloc(g->kvs,
			    cap * sizeof(*p));

			if (p == NULL)
				goto nomem;
			g->kvs = p;
			g->cap = cap;
		}
		d = &g->kvs[g->n];
		if (!ekey_parse(e, kv->key, kv->keylen, &d->fe, &d->seq)) {
			entry_skip(e, kv, "not an entry's key");
			continue;
		}
		d->key = kl_strndup(kv->key, kv->keylen);
		d->value = kl_strndup(kv->value, kv->valuelen);
		if (d->key == NULL || d->value == NULL) {
			kl_free(d->key);
			kl_free(d->value);
			goto nomem;
		}
		d->keylen = kv->keylen;
		d->valuelen = kv->valuelen;
		d->create_revision = kv->create_revision;
		g->n++;
	}
	if (res->more && res->nkvs > 0) {
		const struct etcd_kv *last = &res->kvs[res->nkvs - 1];

		kl_free(g->next);
		if ((g->next = kl_malloc(last->keylen + 1)) == NULL)
			goto nomem;
		memcpy(g->next, last->key, last->keylen);
		g->next[last->keylen] = '\0';	/* just after it */
		g->nextlen = last->keylen + 1;
		range_page(g);
		return;
	}
	if (!g->back && range_back(g))
		return;
	range_apply(g);
	return;
nomem:
	e->range = NULL;
	range_free(g);
	ebe_fail(e, "out of memory for the range");
}

static void
range_page(struct erange *g)
{
	struct ebe		*e = g->e;
	char			 key[512], end[512];
	size_t			 klen = e->prefixlen + 2;
	struct etcd_range	 rg;

	memcpy(key, e->prefix, e->prefixlen);
	memcpy(key + e->prefixlen, "q/", 2);
	memset(&rg, 0, sizeof(rg));
	rg.end = end;
	rg.endlen = etcd_prefix_end(key, klen, end);
	rg.key = g->next != NULL ? g->next : key;
	rg.keylen = g->next != NULL ? g->nextlen : klen;
	rg.revision = g->rev;
	rg.limit = EBE_RANGE_PAGE;
	if ((g->call = etcd_range(e->etcd, &rg, ETCD_RETRY, range_cb,
	    g)) == NULL) {
		e->range = NULL;
		range_free(g);
		ebe_fail(e, "cannot ask etcd for a range");
	}
}

/* A fresh range of every entry, then the table from it (ebe_ready()). */
int
replica_rebuild_start(struct ebe *e)
{
	struct erange *g;

	range_free(e->range);
	e->range = NULL;
	if ((g = kl_calloc(1, sizeof(*g))) == NULL)
		return -1;
	g->e = e;
	e->range = g;
	range_page(g);
	return 0;
}
