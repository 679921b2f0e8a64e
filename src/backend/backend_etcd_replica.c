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
 * itself and never calls the backend by name: answers for our own
 * clients, the deletes it wants and a lost table go up through its hooks
 * (struct replica_hooks).
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

/* A chained hash table of one of the objects. */
struct ehash {
	void		**b;
	size_t		  nb, n;
};

enum replica_mode {
	REP_APPLYING,		/* events as they come: grants are told */
	REP_BUILDING,		/* from a range: grants are not told */
	REP_CLEARING,		/* being emptied: grants are ignored */
	REP_FROZEN		/* shutdown: grants are not told */
};

struct replica {
	struct replica_hooks	 hooks;
	struct event_base	*base;		/* ttl timers */
	struct etcd		*etcd;		/* ranges */
	const char		*prefix;	/* the backend's */
	size_t			 prefixlen;
	struct be_counters	*count;		/* bad_entries */
	uint64_t		 fe;		/* our lease id; 0: none */
	uint64_t		 reap_ms;	/* another's hold or wait is
						 * reaped this long past its
						 * ttl or deadline; 0: never */
	struct locktable	*lt;
	uint64_t		 seed;
	int64_t			 rev;		/* applied revision */
	uint64_t		 rev_grants;	/* grants at rev */
	bool			 no_tokens;	/* building from the newest
						 * range alone: the grants
						 * made know no token (0) */
	enum replica_mode	 mode;
	uint64_t		 epoch;		/* replica_clear()s so far: a
						 * loop over events ends when
						 * the table is cleared under
						 * it */
	struct eownerq		 owners;
	struct ehash		 by_id;		/* eowner by (fe, client) */
	struct ehash		 by_lo;		/* eowner by lt_owner */
	struct ehash		 reqs;		/* ereq by (fe, seq) */
	struct ehash		 entries;	/* eentry by etcd key */
	struct ehash		 held;		/* our held eentry, by owner
						 * and key */
	struct ehash		 by_chan;	/* sessions' channels' eowner
						 * (chan != 0), by fe */
	struct erange		*range;		/* rebuilding from a range */
	/* entries read back from etcd and left out (ebe_entry_decode) */
	uint64_t		 bad_unlogged;	/* since the last warning */
	uint64_t		 bad_log_ms;	/* of the last warning */
};

/* ---- hash tables ---- */

/* Keyed by the replica's random seed (and a second key word made from
 * it), so that keys chosen by clients of any front end cannot be aimed
 * at one bucket (review L10). */
static uint64_t
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

static int
ehash_init(struct ehash *h)
{
	h->nb = EHASH_MIN;
	h->n = 0;
	h->b = kl_calloc(h->nb, sizeof(*h->b));
	return h->b != NULL ? 0 : -1;
}

static void
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
    uint64_t (*hashfn)(const struct replica *, const void *),
    const struct replica *rp)
{
	if (h->n >= h->nb * 2) {
		size_t	 nb = h->nb * 2;
		void	**b = kl_calloc(nb, sizeof(*b));

		if (b != NULL) {
			for (size_t i = 0; i < h->nb; i++) {
				void *x = h->b[i], *next;

				for (; x != NULL; x = next) {
					uint64_t hx = hashfn(rp, x);

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
owner_id_hash(const struct replica *rp, const void *x)
{
	const struct eowner *o = x;

	return ehash_u64(o->fe, o->client);
}

static uint64_t
owner_lo_hash(const struct replica *rp, const void *x)
{
	const struct eowner *o = x;

	return ehash_u64((uint64_t)(uintptr_t)o->lo, 0);
}

static uint64_t
owner_chan_hash(const struct replica *rp, const void *x)
{
	const struct eowner *o = x;

	return ehash_u64(o->fe, 1);
}

static uint64_t
req_hash(const struct replica *rp, const void *x)
{
	const struct ereq *r = x;

	return ehash_u64(r->fe, r->seq);
}

static uint64_t
entry_hash(const struct replica *rp, const void *x)
{
	const struct eentry *n = x;

	return ehash_bytes(n->ekey, n->ekeylen, rp->seed);
}

static uint64_t
held_hash_of(const struct replica *rp, const struct eowner *o, const char *key,
    size_t len)
{
	return ehash_bytes(key, len, rp->seed ^ (uint64_t)(uintptr_t)o);
}

static uint64_t
held_hash(const struct replica *rp, const void *x)
{
	const struct eentry *n = x;

	return held_hash_of(rp, n->req->owner, n->lkey, n->lkeylen);
}

/* ---- owners ---- */

static struct eowner *
eowner_alloc(struct replica *rp, uint64_t fe, uint64_t client, uint64_t id,
    void *udata)
{
	struct eowner *o = kl_calloc(1, sizeof(*o));

	if (o == NULL)
		return NULL;
	if ((o->lo = locktable_owner_new(rp->lt, id, udata)) == NULL) {
		kl_free(o);
		return NULL;
	}
	o->rp = rp;
	o->fe = fe;
	o->client = client;
	TAILQ_INIT(&o->reqs);
	TAILQ_INSERT_TAIL(&rp->owners, o, entry);
	ehash_insert(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext), owner_id_hash, rp);
	ehash_insert(&rp->by_lo, o, owner_lo_hash(rp, o),
	    offsetof(struct eowner, pnext), owner_lo_hash, rp);
	return o;
}

struct eowner *
eowner_get(struct replica *rp, uint64_t fe, uint64_t client, bool create)
{
	struct eowner *o = ehash_head(&rp->by_id, ehash_u64(fe, client));

	for (; o != NULL; o = o->hnext)
		if (o->fe == fe && o->client == client)
			return o;
	if (!create)
		return NULL;
	/* another front end's client, or one of ours the replica learnt
	 * of from a range and nobody answers for any more */
	return eowner_alloc(rp, fe, client, client, NULL);
}

struct eowner *
eowner_of(struct replica *rp, const struct lt_owner *lo)
{
	struct eowner *o = ehash_head(&rp->by_lo,
	    ehash_u64((uint64_t)(uintptr_t)lo, 0));

	for (; o != NULL; o = o->pnext)
		if (o->lo == lo)
			return o;
	return NULL;
}

/* The NAME after the keys of an entry's value that ebe_entry_decode()
 * took (ereq_value()); -1: out of memory. */
static int
eowner_name_set(struct eowner *o, const char *v, size_t len)
{
	const char	*nl = memchr(v, '\n', len);
	size_t		 n = nl != NULL ? len - (size_t)(nl + 1 - v) : 0;
	char		*name;

	if (n == 0) {
		kl_free(o->name);
		o->name = NULL;
		return 0;
	}
	if (o->name != NULL && strlen(o->name) == n &&
	    memcmp(o->name, nl + 1, n) == 0)
		return 0;
	if ((name = kl_malloc(n + 1)) == NULL)
		return -1;
	memcpy(name, nl + 1, n);
	name[n] = '\0';
	kl_free(o->name);
	o->name = name;
	return 0;
}

const char *
eowner_name(const struct eowner *o)
{
	return o->name;
}

/* A client of ours (fe 0 until it writes: the lease may change). */
struct eowner *
eowner_new_ours(struct replica *rp, uint64_t id, void *udata)
{
	struct eowner *o = eowner_alloc(rp, 0, id, id, udata);

	if (o != NULL)
		o->state = OWN_IDLE;
	return o;
}

void
eowner_set_lease(struct replica *rp, struct eowner *o, uint64_t lease)
{
	ehash_remove(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext));
	o->fe = o->lease = lease;
	ehash_insert(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext), owner_id_hash, rp);
}

/* o runs channel chan of the session of client sclient, whose lease
 * its fe is. */
static void
eowner_chan_set(struct replica *rp, struct eowner *o, uint32_t chan,
    uint64_t sclient)
{
	o->chan = chan;
	o->sclient = sclient;
	ehash_insert(&rp->by_chan, o, owner_chan_hash(rp, o),
	    offsetof(struct eowner, fnext), owner_chan_hash, rp);
}

/* Another front end's o is a channel of a session of ours: one that
 * front end named after the session had moved here (its channel 0's
 * owner, the session's client under the same lease, is ours). */
static bool
eowner_chan_of_ours(struct replica *rp, const struct eowner *o)
{
	const struct eowner *root;

	if (o->chan == 0)
		return false;
	root = eowner_get(rp, o->fe, o->sclient, false);
	return root != NULL && root->state != OWN_THEIRS;
}

void
eowner_set_channel(struct replica *rp, struct eowner *o, uint64_t lease,
    uint64_t client, uint32_t chan, uint64_t sclient)
{
	ehash_remove(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext));
	o->fe = o->lease = lease;
	o->client = client;
	ehash_insert(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext), owner_id_hash, rp);
	eowner_chan_set(rp, o, chan, sclient);
}

/* The owners of the channels of the session under lease, any order. */
struct eowner *
eowner_chan_first(struct replica *rp, uint64_t lease)
{
	struct eowner *o = ehash_head(&rp->by_chan, ehash_u64(lease, 1));

	while (o != NULL && o->fe != lease)
		o = o->fnext;
	return o;
}

struct eowner *
eowner_chan_next(const struct eowner *o)
{
	struct eowner *p = o->fnext;

	while (p != NULL && p->fe != o->fe)
		p = p->fnext;
	return p;
}

static void
eowner_free(struct eowner *o)
{
	struct replica *rp = o->rp;

	TAILQ_REMOVE(&rp->owners, o, entry);
	ehash_remove(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext));
	ehash_remove(&rp->by_lo, o, owner_lo_hash(rp, o),
	    offsetof(struct eowner, pnext));
	if (o->chan != 0)
		ehash_remove(&rp->by_chan, o, owner_chan_hash(rp, o),
		    offsetof(struct eowner, fnext));
	locktable_owner_free(rp->lt, o->lo, kl_now_ms());
	kl_free(o->name);
	kl_free(o);
}

/* The rule is in backend_etcd_int.h. */
void
eowner_maybe_free(struct eowner *o)
{
	if (TAILQ_EMPTY(&o->reqs) && (o->state == OWN_THEIRS ||
	    o->state == OWN_GONE) && !o->refreshing &&
	    o->rp->mode != REP_CLEARING)
		eowner_free(o);
}

/* ---- requests and entries ---- */

static size_t
eentry_key(const struct replica *rp, char *out, const char *lkey,
    size_t lkeylen, uint64_t fe, uint64_t seq)
{
	size_t n = 0;

	memcpy(out, rp->prefix, rp->prefixlen);
	n += rp->prefixlen;
	memcpy(out + n, "q/", 2);
	n += 2;
	memcpy(out + n, lkey, lkeylen);
	n += lkeylen;
	n += (size_t)sprintf(out + n, "/%016" PRIx64 "-%016" PRIx64, fe, seq);
	return n;
}

static struct ereq *
ereq_find(struct replica *rp, uint64_t fe, uint64_t seq)
{
	struct ereq *r = ehash_head(&rp->reqs, ehash_u64(fe, seq));

	for (; r != NULL; r = r->hnext)
		if (r->fe == fe && r->seq == seq)
			return r;
	return NULL;
}

static struct eentry *
eentry_find(struct replica *rp, const char *ekey, size_t len)
{
	struct eentry *n = ehash_head(&rp->entries,
	    ehash_bytes(ekey, len, rp->seed));

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
ereq_new(struct replica *rp, struct eowner *o, uint64_t fe, uint64_t seq,
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
		if ((x->ekey = kl_malloc(rp->prefixlen + a->keylens[i] + 64)) ==
		    NULL)
			goto fail;
		x->ekeylen = eentry_key(rp, x->ekey, a->keys[i], a->keylens[i],
		    fe, seq);
		x->lkey = x->ekey + rp->prefixlen + 2;
		x->lkeylen = a->keylens[i];
		x->req = r;
		r->keys[n] = x->lkey;
		r->keylens[n] = x->lkeylen;
		n++;
	}
	r->rp = rp;
	r->fe = fe;
	r->seq = seq;
	r->owner = o;
	r->side = o->state != OWN_THEIRS ? SIDE_ASKED : SIDE_THEIRS;
	r->state = REQ_PUTTING;
	r->nent = n;
	r->a = *a;
	r->a.keys = r->keys;
	r->a.keylens = r->keylens;
	r->a.nkeys = n;
	/* the table keeps the grant's ttl on every replica, for INFO and
	 * RESUME (its time left), but never ends a hold itself (nobody
	 * calls locktable_expire() here): the owner's timer ends it with
	 * a delete */
	r->ttl_ms = a->ttl_ms;
	for (size_t i = 0; i < n; i++)
		ehash_insert(&rp->entries, &r->ent[i],
		    entry_hash(rp, &r->ent[i]), offsetof(struct eentry, hnext),
		    entry_hash, rp);
	ehash_insert(&rp->reqs, r, req_hash(rp, r),
	    offsetof(struct ereq, hnext), req_hash, rp);
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
held_add(struct replica *rp, struct eentry *x)
{
	ehash_insert(&rp->held, x, held_hash(rp, x),
	    offsetof(struct eentry, knext), held_hash, rp);
}

static void
held_remove(struct replica *rp, struct eentry *x)
{
	ehash_remove(&rp->held, x, held_hash(rp, x),
	    offsetof(struct eentry, knext));
}

/* Our owner o's hold on key, or NULL. */
struct eentry *
eentry_held(struct replica *rp, const struct eowner *o, const char *key,
    size_t keylen)
{
	struct eentry *x = ehash_head(&rp->held, held_hash_of(rp, o, key,
	    keylen));

	for (; x != NULL; x = x->knext)
		if (x->req->owner == o && x->lkeylen == keylen &&
		    memcmp(x->lkey, key, keylen) == 0)
			return x;
	return NULL;
}

/* The rule is in backend_etcd_int.h. */
void
ereq_maybe_free(struct ereq *r)
{
	struct replica	*rp = r->rp;
	struct eowner	*o = r->owner;

	if (r->nlive > 0 || r->refs > 0 || r->state == REQ_WAITING ||
	    r->state == REQ_HELD || ereq_awaited(r))
		return;
	/* ours, made: the watch brings the put, then its delete */
	for (size_t i = 0; r->state == REQ_PUTTING && i < r->nent; i++)
		if ((r->ent[i].w == W_PUT || r->ent[i].w == W_DELETING) &&
		    r->ent[i].rep == ENT_ABSENT)
			return;
	for (size_t i = 0; i < r->nent; i++) {
		struct eentry *x = &r->ent[i];

		if (r->side != SIDE_THEIRS)
			held_remove(rp, x);	/* if there */
		if (x->ttl != NULL)
			event_free(x->ttl);
		ehash_remove(&rp->entries, x, entry_hash(rp, x),
		    offsetof(struct eentry, hnext));
		kl_free(x->ekey);
	}
	if (r->wait != NULL)
		event_free(r->wait);
	ehash_remove(&rp->reqs, r, req_hash(rp, r), offsetof(struct ereq,
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
 * MAXHOLDS NKEYS KEY... [t=TTL] [w=TIMEOUT] [@CHAN:SCLIENT]\nNAME" (the
 * fields after the keys in any order). Keys never hold a space
 * (keylockd-protocol(7), KEYS); the name is the rest. t= and w=, only
 * when the LOCK gave a ttl or a timeout (so the others' entries stay as
 * short as before): the grant's ttl and the wait's timeout, in ms, which
 * every replica counts from when it applies the grant and the put, so
 * that a front end that takes the session over ends them as the one
 * asked would have (keylockd-protocol(7), SESSIONS: Across front ends).
 * " r=TTL" only in an entry put again by a REFRESH
 * (ebe_refresh_put()): its ttl restarted then.
 * @CHAN:SCLIENT: the owner is channel CHAN of the session of client
 * SCLIENT (the lease in its key is the session's), for a front end that
 * takes the session over, and for INFO.
 */
int
ereq_value(struct ereq *r, const char *name)
{
	size_t	 len = 192 + (name != NULL ? strlen(name) : 0), n;
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
	if (r->ttl_ms > 0)
		n += (size_t)snprintf(v + n, len - n, " t=%" PRIu64,
		    r->ttl_ms);
	if (r->a.timeout_ms > 0 && !r->a.try)
		n += (size_t)snprintf(v + n, len - n, " w=%" PRIu64,
		    r->a.timeout_ms);
	if (r->owner->chan != 0)
		n += (size_t)snprintf(v + n, len - n, " @%" PRIu32 ":%" PRIu64,
		    r->owner->chan, r->owner->sclient);
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
value_parse(const char *v, size_t len, uint64_t *client, struct echan *ch,
    struct lt_acquire *a, const char **keys, size_t *keylens, size_t max,
    uint64_t *refresh)
{
	size_t	off = sizeof(EBE_VALUE_VERSION) - 1;
	int64_t	c, limit, maxw, try, maxh, nkeys, chan = 0, sclient = 0;
	int64_t	ttl = 0, wait = 0, ref = 0;

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
	/* a session's channel, the grant's ttl, the wait's timeout, a
	 * REFRESH's ttl: each at most once, in any order */
	while (off + 2 < len && v[off] == ' ') {
		static const struct {
			char		 letter;
			const char	*bad;
		} ms[] = { { 't', "bad ttl" }, { 'w', "bad timeout" },
		    { 'r', "bad refresh" } };
		int64_t		*msv[] = { &ttl, &wait, &ref };
		size_t		 f;

		for (f = 0; f < sizeof(ms) / sizeof(ms[0]); f++)
			if (v[off + 1] == ms[f].letter && v[off + 2] == '=' &&
			    *msv[f] == 0)
				break;
		if (f < sizeof(ms) / sizeof(ms[0])) {
			off += 3;
			if (!value_num(v, len, &off, false, msv[f]) ||
			    *msv[f] < 1 || (uint64_t)*msv[f] > KL_MS_MAX)
				return ms[f].bad;
		} else if (v[off + 1] == '@' && chan == 0) {
			off += 2;
			if (!value_num(v, len, &off, false, &chan) ||
			    chan < 1 || chan > UINT32_MAX || off >= len ||
			    v[off] != ':')
				return "bad channel";
			off++;
			if (!value_num(v, len, &off, false, &sclient) ||
			    sclient < 1)
				return "bad session client id";
		} else {
			break;
		}
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
	ch->chan = (uint32_t)chan;
	ch->sclient = (uint64_t)sclient;
	a->limit = (uint32_t)limit;
	a->max_waiters = maxw;
	a->try = try != 0;
	a->max_holds = (size_t)maxh;
	/* a REFRESH's (its entries put again): the ttl from then on */
	a->ttl_ms = ref != 0 ? (uint64_t)ref : (uint64_t)ttl;
	a->timeout_ms = (uint64_t)wait;
	if (refresh != NULL)
		*refresh = (uint64_t)ref;
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
ekey_parse(const struct replica *rp, const char *k, size_t len, uint64_t *fe,
    uint64_t *seq)
{
	size_t idlen = 2 * EBE_ID_HEX + 1;

	return len > rp->prefixlen + 2 + 1 + idlen &&
	    memcmp(k + rp->prefixlen, "q/", 2) == 0 &&
	    k[len - idlen - 1] == '/' && k[len - EBE_ID_HEX - 1] == '-' &&
	    hex16(k + len - idlen, fe) && hex16(k + len - EBE_ID_HEX, seq);
}

const char *
ebe_entry_decode(const char *k, size_t klen, size_t prefixlen,
    const char *v, size_t vlen, uint64_t *client, struct echan *ch,
    struct lt_acquire *a, const char **keys, size_t *keylens, size_t max)
{
	size_t		 idlen = 2 * EBE_ID_HEX + 1;
	const char	*lkey, *why;
	size_t		 lkeylen;

	if (klen <= prefixlen + 2 + 1 + idlen)
		return "not an entry's key";
	lkey = k + prefixlen + 2;
	lkeylen = klen - prefixlen - 2 - idlen - 1;
	if ((why = value_parse(v, vlen, client, ch, a, keys, keylens,
	    max, NULL)) != NULL)
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
entry_skip(struct replica *rp, const struct etcd_kv *kv, const char *why)
{
	uint64_t	now = kl_now_ms();
	char		k[128];

	rp->count->bad_entries++;
	if (rp->bad_log_ms != 0 && now < rp->bad_log_ms + 1000) {
		rp->bad_unlogged++;
		return;
	}
	ebe_log_safe(kv->key, kv->keylen, k, sizeof(k));
	log_warnx("backend etcd: entry %s left out: %s (%" PRIu64 " more "
	    "since the last warning)", k, why, rp->bad_unlogged);
	rp->bad_log_ms = now;
	rp->bad_unlogged = 0;
}

/* ---- the table's decisions ---- */

#define REBUILDING	"etcd: rebuilding the lock table; try again"

/* Our client's answer for r, through the backend (which tells it only
 * when it waits for one). */
static void
req_answer(struct replica *rp, struct ereq *r, enum kl_err err,
    uint64_t token, const char *text)
{
	struct be_result res;

	memset(&res, 0, sizeof(res));
	res.op = BE_LOCK;
	res.err = err;
	res.value = token;
	res.text = text;
	rp->hooks.answer(rp->hooks.arg, r, &res);
}

static void
req_delete(struct replica *rp, struct ereq *r)
{
	rp->hooks.del(rp->hooks.arg, r, NULL);
}

static uint64_t
replica_next_token(void *arg)
{
	struct replica	*rp = arg;
	uint64_t	 n = rp->rev_grants++;

	if (rp->no_tokens)
		return 0;	/* not known here: see replica_build() */
	if (n >= (1ULL << EBE_TOKEN_SHIFT))
		n = (1ULL << EBE_TOKEN_SHIFT) - 1;	/* never reached */
	return (uint64_t)rp->rev << EBE_TOKEN_SHIFT | n;
}

/*
 * Another front end's r outlived its ttl or deadline by the reap margin
 * (replica_ttl_arm(), replica_wait_arm()): its own front end would have
 * ended it by now if it were running and reached etcd, so it is dead or
 * cut off. Its hold or wait (a session's or a plain connection's: every
 * REFRESH is written for every replica) is deleted by us, as its front
 * end would have at its ttl or deadline;
 * asked again a while later until the delete is applied (a failed or
 * lost transaction). Only while we apply events with a safe lease: a
 * front end cut off from etcd reaps nothing.
 */
static void
reap_due(struct replica *rp, struct ereq *r, struct eentry *x)
{
	struct event	*ev = x != NULL ? x->ttl : r->wait;
	struct timeval	 tv = { EBE_RETRY_MAX_MS / 1000,
	    (EBE_RETRY_MAX_MS % 1000) * 1000 };

	if (rp->hooks.reap == NULL)
		return;
	if (rp->mode == REP_APPLYING && rp->hooks.lease_safe(rp->hooks.arg) &&
	    !rp->hooks.reap(rp->hooks.arg, r, x))
		return;		/* not a session's: its lease ends it */
	evtimer_add(ev, &tv);
}

static void
ttl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eentry	*x = arg;
	struct replica	*rp = x->req->rp;

	if (x->rep == ENT_HELD && x->req->side == SIDE_THEIRS)
		reap_due(rp, x->req, x);
	else if (x->rep == ENT_HELD && x->w < W_DEL_WAIT &&
	    rp->hooks.lease_safe(rp->hooks.arg)) {
		x->why = LT_WHY_EXPIRED;
		rp->hooks.del(rp->hooks.arg, x->req, x);
	}
	rp->hooks.end_turn(rp->hooks.arg);
}

static bool
timer_arm(struct replica *rp, struct event **ev, event_callback_fn cb,
    void *arg, uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000),
	    (suseconds_t)(ms % 1000) * 1000 };

	if (*ev == NULL && (*ev = evtimer_new(rp->base, cb, arg)) == NULL)
		return false;
	evtimer_add(*ev, &tv);
	return true;
}

void
replica_ttl_arm(struct eentry *x, uint64_t ms)
{
	struct replica	*rp = x->req->rp;
	bool		 theirs = x->req->side == SIDE_THEIRS;

	x->due_ms = kl_now_ms() + ms;
	if (theirs && rp->reap_ms == 0) {
		if (x->ttl != NULL)
			evtimer_del(x->ttl);
		return;
	}
	if (!timer_arm(rp, &x->ttl, ttl_cb, x, ms + (theirs ? rp->reap_ms :
	    0)))
		log_warnx("backend etcd: no memory for a ttl timer");
}

/* x's ttl timer again, from the time its ttl has left (a hold moving
 * between ours and another front end's); none: none. */
static void
ttl_rearm(struct eentry *x, uint64_t now)
{
	if (x->due_ms == 0)
		return;
	replica_ttl_arm(x, x->due_ms > now ? x->due_ms - now : 0);
}

void
replica_refresh(struct replica *rp, struct eowner *o, struct eentry **ents,
    size_t n, uint64_t ttl_ms)
{
	uint64_t now = kl_now_ms();

	for (size_t i = 0; i < n; i++) {
		const char *key = ents[i]->lkey;

		replica_ttl_arm(ents[i], ttl_ms);
		/* the table's, for INFO and RESUME here (every key: held;
		 * out of memory leaves the view as it was) */
		(void)locktable_refresh(rp->lt, o->lo, &key,
		    &ents[i]->lkeylen, 1, ttl_ms, now, &(size_t){ 0 },
		    &(size_t){ 0 });
	}
}

/* The deadline of a wait: ours (taken over with its session) ends as a
 * timeout the daemon asked (ebe_withdraw()) would; another front end's
 * is reaped. */
static void
wait_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ereq	*r = arg;
	struct replica	*rp = r->rp;

	if (r->side == SIDE_THEIRS && r->state == REQ_WAITING)
		reap_due(rp, r, NULL);
	else if (r->side == SIDE_ASKED && r->owner->open == r &&
	    (r->state == REQ_WAITING || r->state == REQ_PUTTING) &&
	    rp->mode == REP_APPLYING && rp->hooks.lease_safe(rp->hooks.arg)) {
		r->why = LT_WHY_TIMEOUT;
		if (r->state == REQ_PUTTING) {
			r->side = SIDE_DEADLINE;
		} else {
			r->side = SIDE_WITHDRAWING;
			req_delete(rp, r);
		}
	}
	rp->hooks.end_turn(rp->hooks.arg);
}

void
replica_wait_arm(struct ereq *r)
{
	struct replica	*rp = r->rp;
	bool		 theirs = r->side == SIDE_THEIRS;
	uint64_t	 now = kl_now_ms(), end;

	if (r->a.timeout_ms == 0 || r->a.try || (theirs && rp->reap_ms == 0))
		return;
	end = r->put_ms + r->a.timeout_ms + (theirs ? rp->reap_ms : 0);
	if (!timer_arm(rp, &r->wait, wait_cb, r, end > now ? end - now : 0))
		log_warnx("backend etcd: no memory for a wait's deadline");
}

/* The timers of o's holds and of its wait r (NULL: none), from the time
 * they have left as this replica counts them since their grant and put:
 * o just became ours (its session was resumed here: they end as they
 * would have on the front end they were asked through) or another's. */
static void
owner_timers(struct replica *rp, struct eowner *o, struct ereq *r)
{
	uint64_t	 now = kl_now_ms();
	struct ereq	*q;

	TAILQ_FOREACH(q, &o->reqs, entry)
		for (size_t i = 0; q->state == REQ_HELD && i < q->nent; i++)
			if (q->ent[i].rep == ENT_HELD &&
			    q->ent[i].w < W_DEL_WAIT)
				ttl_rearm(&q->ent[i], now);
	if (r != NULL)
		replica_wait_arm(r);
}

/* r is granted: its keys are held. */
static void
req_held(struct replica *rp, struct ereq *r, uint64_t token)
{
	r->state = REQ_HELD;
	for (size_t i = 0; i < r->nent; i++) {
		struct eentry *x = &r->ent[i];

		if (x->rep == ENT_LIVE)
			x->rep = ENT_HELD;	/* ABSENT: at its put */
		if (r->side != SIDE_THEIRS)
			held_add(rp, x);
		if (r->ttl_ms > 0)
			replica_ttl_arm(x, r->ttl_ms);
	}
	if (r->wait != NULL)
		evtimer_del(r->wait);
	if (r->side != SIDE_ASKED && r->side != SIDE_DEADLINE)
		return;		/* a hold that ends at our delete */
	if (rp->mode != REP_APPLYING || !rp->hooks.lease_safe(rp->hooks.arg)) {
		/* never a token from a rebuild: end it instead */
		req_answer(rp, r, KL_ERR_BACKEND, 0, REBUILDING);
		req_delete(rp, r);
		return;
	}
	req_answer(rp, r, KL_OK, token, NULL);
}

static void
replica_granted(void *arg, struct lt_owner *lo, uint64_t token,
    uint64_t waited_ms)
{
	struct replica	*rp = arg;
	struct eowner	*o;
	struct ereq	*r;

	if (rp->mode == REP_CLEARING || (o = eowner_of(rp, lo)) == NULL)
		return;
	TAILQ_FOREACH(r, &o->reqs, entry)
		if (r->state == REQ_WAITING) {
			req_held(rp, r, token);
			return;
		}
}

/* The table's verdict on r, at its first entry's revision. */
static void
req_decide(struct replica *rp, struct ereq *r)
{
	struct lt_blocker	 why;
	struct be_result	 res;
	struct lt_key_view	 v;
	bool			 granted = false;
	uint64_t		 token = 0;
	enum kl_err		 err;

	memset(&why, 0, sizeof(why));
	r->put_ms = kl_now_ms();
	if (locktable_owner_is_waiting(r->owner->lo))
		err = KL_ERR_LIMIT;	/* two waits at once: not ours */
	else
		err = locktable_acquire(rp->lt, r->owner->lo, &r->a,
		    kl_now_ms(), &granted, &token, &why);
	if (err == KL_OK && granted) {
		req_held(rp, r, token);
		return;
	}
	if (err == KL_OK) {
		r->state = REQ_WAITING;
		if (r->side == SIDE_THEIRS) {
			replica_wait_arm(r);
			return;
		}
		if (r->side == SIDE_ASKED && rp->mode != REP_BUILDING) {
			rp->hooks.queued(rp->hooks.arg, r);
			return;
		}
		/* its wait ended before the verdict, nobody waits for it, or
		 * no verdict is told while rebuilding: the wait ends */
		if (rp->mode == REP_BUILDING)
			req_answer(rp, r, KL_ERR_BACKEND, 0, REBUILDING);
		else if (r->side == SIDE_DEADLINE)
			r->side = SIDE_WITHDRAWING;
		req_delete(rp, r);
		return;
	}
	r->state = REQ_REFUSED;
	if (r->side == SIDE_THEIRS)
		return;
	memset(&res, 0, sizeof(res));
	res.op = BE_LOCK;
	res.err = err;
	res.why = why;
	res.limit = r->a.limit;
	res.max_waiters = r->a.max_waiters;
	if (err == KL_ERR_CONFLICT) {
		locktable_key_view(locktable_find(rp->lt, why.key,
		    why.keylen), &v);
		res.key_limit = v.limit;
	}
	rp->hooks.answer(rp->hooks.arg, r, &res);
	req_delete(rp, r);
}

/* ---- sessions moving between front ends ---- */

/*
 * Another front end's o becomes ours: the session it belongs to was
 * resumed here. Its requests keep their verdicts, the same on every
 * replica; what changes is who answers for them: a grant is one our
 * client holds (its entries ours to delete), the waiting LOCK one our
 * client waits for (o->open), and what is neither is left over from the
 * other front end and deleted.
 */
void
replica_adopt(struct replica *rp, struct eowner *o)
{
	struct ereq *r, *next;

	o->state = OWN_IDLE;
	o->open = NULL;
	for (r = TAILQ_FIRST(&o->reqs); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		for (size_t i = 0; i < r->nent; i++)
			if (r->ent[i].w == W_PUTTING)
				r->ent[i].w = W_PUT;	/* made, or gone */
		switch (r->state) {
		case REQ_HELD:
			r->side = SIDE_ANSWERED;
			for (size_t i = 0; i < r->nent; i++)
				if (r->ent[i].rep == ENT_HELD)
					held_add(rp, &r->ent[i]);
			break;
		case REQ_WAITING:
			if (o->open == NULL) {
				r->side = SIDE_ASKED;
				o->open = r;
				o->state = OWN_LOCK;
				break;
			}
			r->side = SIDE_ENDED;	/* a second wait: not ours */
			req_delete(rp, r);
			break;
		default:
			r->side = SIDE_ENDED;
			if (r->nlive > 0)
				req_delete(rp, r);
			break;
		}
	}
	owner_timers(rp, o, o->open);
}

/* Ours o becomes another front end's: its session was resumed there.
 * Nothing is released or answered here; o may be freed. */
void
replica_disown(struct replica *rp, struct eowner *o)
{
	struct ereq *r, *next;

	o->open = NULL;
	o->state = OWN_THEIRS;
	o->sess = NULL;
	locktable_owner_set_udata(o->lo, NULL);
	TAILQ_FOREACH(r, &o->reqs, entry) {
		if (r->side == SIDE_THEIRS)
			continue;
		for (size_t i = 0; i < r->nent; i++) {
			held_remove(rp, &r->ent[i]);	/* if there */
			if (r->ent[i].ttl != NULL)
				evtimer_del(r->ent[i].ttl);
		}
		if (r->wait != NULL)
			evtimer_del(r->wait);
		r->side = SIDE_THEIRS;
		/* the front end it moved to ends them; if it dies, we */
		for (size_t i = 0; r->state == REQ_HELD && i < r->nent; i++)
			if (r->ent[i].rep == ENT_HELD)
				ttl_rearm(&r->ent[i], kl_now_ms());
		if (r->state == REQ_WAITING)
			replica_wait_arm(r);
	}
	if (TAILQ_EMPTY(&o->reqs)) {
		eowner_maybe_free(o);
		return;
	}
	/* the last request freed frees o: o is not read after it */
	for (r = TAILQ_FIRST(&o->reqs); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		ereq_maybe_free(r);
	}
}

/* ---- applying events ---- */

/*
 * Keeps of keys[0..n) those a live entry of the request still has (a
 * range's entries of one request): an UNLOCK of some keys of a grant
 * deletes their entries alone, and a rebuilt table must not hold them
 * again. Returns how many are kept.
 */
static size_t
live_keys(const struct replica *rp, const char **keys, size_t *keylens,
    size_t n, const struct erange_kv *live, size_t nlive)
{
	size_t kept = 0, idlen = 2 * EBE_ID_HEX + 2;	/* "/FE-SEQ" */

	for (size_t i = 0; i < n; i++) {
		bool found = false;

		for (size_t k = 0; k < nlive && !found; k++)
			found = live[k].keylen == rp->prefixlen + 2 +
			    keylens[i] + idlen && memcmp(live[k].key +
			    rp->prefixlen + 2, keys[i], keylens[i]) == 0;
		if (found) {
			keys[kept] = keys[i];
			keylens[kept++] = keylens[i];
		}
	}
	return kept;
}

/*
 * A live entry put again (version > 1): a SESSION after its connection's
 * LOCKs moved it under the session's lease L (keys, verdicts and values
 * unchanged, but a channel's, which names its channel now: tokens
 * unchanged too). Another front end's owner is named by L from then on,
 * and a channel's by its channel, so that RESUME through any front end
 * finds these holds and waits with the session's; ours was renamed when
 * the SESSION was answered. Or a REFRESH's (" r=TTL"), of any owner.
 */
static void
apply_rewrite(struct replica *rp, const struct etcd_kv *kv)
{
	const char		*keys[KL_KEYS_HARD_MAX];
	size_t			 keylens[KL_KEYS_HARD_MAX];
	struct lt_acquire	 a;
	struct echan		 ch;
	struct ereq		*r;
	struct eowner		*o;
	uint64_t		 fe, seq, client;

	uint64_t		 refresh = 0;
	struct eentry		*x;

	if (kv->lease <= 0 || !ekey_parse(rp, kv->key, kv->keylen, &fe,
	    &seq) || (r = ereq_find(rp, fe, seq)) == NULL)
		return;
	o = r->owner;
	if ((x = eentry_find(rp, kv->key, kv->keylen)) != NULL &&
	    (x->rep == ENT_LIVE || x->rep == ENT_HELD))
		x->mrev = kv->mod_revision;	/* what a reap compares */
	/* a REFRESH of a hold, put again with r=TTL: its ttl
	 * restarts here too (for INFO, for the front end that takes the
	 * session over, and for the reap of a hold whose front end died);
	 * ours restarted when etcd answered the REFRESH (replica_refresh(),
	 * ebe_refreshed()), and not at a put whose REFRESH was told it
	 * failed: a try etcd carried out late */
	if (r->state == REQ_HELD && value_parse(kv->value, kv->valuelen,
	    &client, &ch, &a, keys, keylens, KL_KEYS_HARD_MAX, &refresh) ==
	    NULL && refresh > 0 && x != NULL && x->rep == ENT_HELD) {
		if (r->side == SIDE_THEIRS) {
			(void)locktable_refresh(rp->lt, o->lo, &x->lkey,
			    &x->lkeylen, 1, refresh, kl_now_ms(),
			    &(size_t){ 0 }, &(size_t){ 0 });
			replica_ttl_arm(x, refresh);
		}
	} else if (r->side == SIDE_THEIRS && x != NULL &&
	    x->rep == ENT_HELD) {
		/* put again under a session's lease: reaped if need be */
		ttl_rearm(x, kl_now_ms());
	}
	if (r->side == SIDE_THEIRS && r->state == REQ_WAITING)
		replica_wait_arm(r);
	if (o->state != OWN_THEIRS || o->fe != fe ||
	    (uint64_t)kv->lease == fe)
		return;
	if (eowner_get(rp, (uint64_t)kv->lease, o->client, false) != NULL) {
		log_warnx("backend etcd: client %" PRIu64 " of front end %016"
		    PRIx64 " moved under lease %016" PRIx64 ", which has an "
		    "owner of that id already: left as it was", o->client, fe,
		    (uint64_t)kv->lease);
		return;
	}
	ehash_remove(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext));
	o->fe = (uint64_t)kv->lease;
	ehash_insert(&rp->by_id, o, owner_id_hash(rp, o),
	    offsetof(struct eowner, hnext), owner_id_hash, rp);
	/* a channel of the session's connection: its value names it now */
	if (o->chan == 0 && ebe_entry_decode(kv->key, kv->keylen,
	    rp->prefixlen, kv->value, kv->valuelen, &client, &ch, &a, keys,
	    keylens, KL_KEYS_HARD_MAX) == NULL && ch.chan != 0)
		eowner_chan_set(rp, o, ch.chan, ch.sclient);
}

/* A put; while rebuilding, live holds the range's entries of its
 * request (NULL from the watch, which brings all of them at once). */
static void
apply_put(struct replica *rp, const struct etcd_kv *kv,
    const struct erange_kv *live, size_t nlive)
{
	const char		*keys[KL_KEYS_HARD_MAX];
	size_t			 keylens[KL_KEYS_HARD_MAX];
	struct lt_acquire	 a;
	struct ereq		*r;
	struct eentry		*x;
	struct echan		 ch;
	uint64_t		 fe, seq, client;

	if (kv->version != 1) {
		apply_rewrite(rp, kv);
		return;
	}
	if (!ekey_parse(rp, kv->key, kv->keylen, &fe, &seq)) {
		entry_skip(rp, kv, "not an entry's key");
		return;
	}
	if ((r = ereq_find(rp, fe, seq)) == NULL) {
		struct eowner *o;

		const char *why = ebe_entry_decode(kv->key, kv->keylen,
		    rp->prefixlen, kv->value, kv->valuelen, &client, &ch, &a,
		    keys, keylens, KL_KEYS_HARD_MAX);

		if (why != NULL) {
			entry_skip(rp, kv, why);
			return;
		}
		if (live != NULL && (a.nkeys = live_keys(rp, keys, keylens,
		    a.nkeys, live, nlive)) == 0)
			return;
		/* the owner: named by the lease the entry carries (a
		 * session's L, for entries put again under it) */
		if ((o = eowner_get(rp, kv->lease > 0 ? (uint64_t)kv->lease :
		    fe, client, true)) == NULL ||
		    (r = ereq_new(rp, o, fe, seq, &a)) == NULL ||
		    (o->state == OWN_THEIRS && eowner_name_set(o, kv->value,
		    kv->valuelen) != 0)) {
			rp->hooks.lose(rp->hooks.arg,
			    "out of memory for the lock table");
			return;
		}
		if (o->state == OWN_THEIRS && ch.chan != 0 && o->chan == 0)
			eowner_chan_set(rp, o, ch.chan, ch.sclient);
		if (fe == rp->fe || o->state != OWN_THEIRS ||
		    eowner_chan_of_ours(rp, o)) {
			/* ours (our lease's, or a session's of ours: one
			 * the front end it moved from wrote late, on
			 * channel 0 or another), but unknown here: nobody
			 * waits for it, and its put is made (the one write
			 * of w here) */
			r->side = SIDE_ENDED;
			for (size_t i = 0; i < r->nent; i++)
				r->ent[i].w = W_PUT;
		}
	}
	if ((x = eentry_find(rp, kv->key, kv->keylen)) == NULL ||
	    x->rep != ENT_ABSENT)
		return;
	x->rep = r->state == REQ_HELD ? ENT_HELD : ENT_LIVE;
	x->crev = kv->create_revision;
	x->mrev = kv->mod_revision;
	r->nlive++;
	if (r->state == REQ_PUTTING)
		req_decide(rp, r);
	/* ours and unknown, or left over: delete it */
	if ((r->side == SIDE_WITHDRAWING || r->side == SIDE_ENDED) &&
	    r->state != REQ_WAITING)
		req_delete(rp, r);
}

/* Fills res for the end of our wait r: TIMEOUT, CANCELLED, SHUTDOWN. */
static void
wait_result(struct replica *rp, struct ereq *r, struct be_result *res)
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
		if (locktable_wait_blocker(rp->lt, r->owner->lo, kl_now_ms(),
		    &res->why) && res->why.nwaiters > 0)
			res->why.nwaiters--;	/* not this one */
		break;
	}
}

static void
apply_delete(struct replica *rp, const struct etcd_kv *kv)
{
	struct eentry		*x = eentry_find(rp, kv->key, kv->keylen);
	struct ereq		*r;
	struct eowner		*lost = NULL;
	struct be_result	 res;
	bool			 held;

	if (x == NULL || (x->rep != ENT_LIVE && x->rep != ENT_HELD))
		return;
	r = x->req;
	held = x->rep == ENT_HELD;
	x->rep = ENT_GONE;
	r->nlive--;
	if (r->side != SIDE_THEIRS && x->w < W_DEL_WAIT) {
		/* ours, deleted by someone else: another front end ended
		 * it past its ttl or deadline (reap_due()), or its lease
		 * ended. Our client's wait ends as a timeout; a hold whose
		 * ttl ran out here too ends as its expiry would; one that
		 * our client may still believe it has is lost (its
		 * connection closes: no client holds what the cluster let
		 * go) */
		if (r->state == REQ_WAITING && r->side == SIDE_ASKED)
			r->why = LT_WHY_TIMEOUT;
		else if (!held || r->side != SIDE_ANSWERED)
			;	/* no client of ours has it */
		else if (x->due_ms != 0 && kl_now_ms() >= x->due_ms)
			x->why = LT_WHY_EXPIRED;
		else if (r->owner->state != OWN_THEIRS &&
		    r->owner->state != OWN_GONE)
			lost = r->owner;	/* not freed below */
	}
	switch (r->state) {
	case REQ_HELD:
		if (held) {
			/* counted as backend local counts it on the owner's
			 * front end; another's release is a plain one here */
			locktable_release_why(rp->lt, r->owner->lo, x->lkey,
			    x->lkeylen, kl_now_ms(), r->side != SIDE_THEIRS ?
			    x->why : LT_WHY_UNLOCK);
			if (r->side != SIDE_THEIRS)
				held_remove(rp, x);
			if (x->ttl != NULL)
				evtimer_del(x->ttl);
		}
		if (r->nlive > 0)
			break;
		r->state = REQ_GONE;
		if (r->side == SIDE_WITHDRAWING) {
			/* granted while our withdrawal (CANCEL, timeout) was
			 * on its way: req_held() kept that from the client,
			 * and the LOCK ends as the withdrawal said */
			wait_result(rp, r, &res);
			rp->hooks.answer(rp->hooks.arg, r, &res);
		}
		break;
	case REQ_WAITING:
		if (ereq_awaited(r)) {
			wait_result(rp, r, &res);
			rp->hooks.answer(rp->hooks.arg, r, &res);
		}
		locktable_withdraw(rp->lt, r->owner->lo, kl_now_ms(),
		    r->side != SIDE_THEIRS ? r->why : LT_WHY_TIMEOUT);
		r->state = REQ_GONE;
		break;
	default:
		break;
	}
	if (r->side != SIDE_THEIRS)
		rp->hooks.deleted(rp->hooks.arg, x);
	ereq_maybe_free(r);
	if (lost != NULL && rp->hooks.lost != NULL)
		rp->hooks.lost(rp->hooks.arg, lost);
}

static void
apply_heartbeat(struct replica *rp, const struct etcd_event *ev)
{
	uint64_t fe;

	if (ev->kv.keylen == rp->prefixlen + 3 + EBE_ID_HEX &&
	    hex16(ev->kv.key + rp->prefixlen + 3, &fe) && fe == rp->fe)
		rp->hooks.heartbeat(rp->hooks.arg, ev->kv.mod_revision);
}

/* P fe/FE deleted: that front end's lease has ended (the sessions it
 * had are no longer kept alive by anyone: INFO calls them detached). */
static void
apply_fe_gone(struct replica *rp, const struct etcd_event *ev)
{
	uint64_t fe;

	if (rp->hooks.fe_gone != NULL &&
	    ev->kv.keylen == rp->prefixlen + 3 + EBE_ID_HEX &&
	    hex16(ev->kv.key + rp->prefixlen + 3, &fe))
		rp->hooks.fe_gone(rp->hooks.arg, fe);
}

/* P s/H: a session's record, for the backend. */
static void
apply_record(struct replica *rp, const struct etcd_event *ev)
{
	const struct etcd_kv	*kv = &ev->kv;
	char			 hash[EBE_HASH_HEX + 1];
	struct erecord		 rec;
	const char		*why;

	if (kv->keylen != rp->prefixlen + 2 + EBE_HASH_HEX) {
		entry_skip(rp, kv, "not a session's key");
		return;
	}
	memcpy(hash, kv->key + rp->prefixlen + 2, EBE_HASH_HEX);
	hash[EBE_HASH_HEX] = '\0';
	if (ev->is_delete) {
		rp->hooks.record(rp->hooks.arg, hash, NULL, kv->mod_revision);
		return;
	}
	if ((why = ebe_record_decode(kv->value, kv->valuelen, &rec)) !=
	    NULL) {
		entry_skip(rp, kv, why);
		return;
	}
	rec.lease = (uint64_t)kv->lease;
	rp->hooks.record(rp->hooks.arg, hash, &rec, kv->mod_revision);
}

/* A record's USER or NAME: 1 to KL_NAME_MAX bytes, no blank or control
 * byte. */
static bool
record_word_ok(const char *s, size_t len)
{
	if (len == 0 || len > KL_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* "s2 CLIENT GRACE_MS FE DETACHED USER\nNAME", USER and NAME possibly
 * empty (with their separators), or "s1 CLIENT GRACE_MS FE USER". */
const char *
ebe_record_decode(const char *v, size_t len, struct erecord *rec)
{
	size_t		 off = sizeof(EBE_RECORD_VERSION) - 1, end;
	int64_t		 c, g, d = 0;
	bool		 v1;
	const char	*nl;

	memset(rec, 0, sizeof(*rec));
	if (len < off || (memcmp(v, EBE_RECORD_VERSION, off) != 0 &&
	    memcmp(v, EBE_RECORD_V1, off) != 0))
		return "not a session record of this version";
	v1 = memcmp(v, EBE_RECORD_V1, off) == 0;
	if (!value_num(v, len, &off, false, &c) || c < 1 ||
	    !value_num(v, len, &off, false, &g) || g < 1)
		return "bad client id or grace";
	if (off + 1 + EBE_ID_HEX > len || v[off] != ' ' ||
	    !hex16(v + off + 1, &rec->fe))
		return "bad front end";
	off += 1 + EBE_ID_HEX;
	if (!v1 && !value_num(v, len, &off, false, &d))
		return "bad detached time";
	nl = v1 ? NULL : memchr(v + off, '\n', len - off);
	end = nl != NULL ? (size_t)(nl - v) : len;
	if (off < end) {
		if (v[off] != ' ' || !record_word_ok(v + off + 1,
		    end - off - 1))
			return "bad user";
		rec->user = v + off + 1;
		rec->userlen = end - off - 1;
	}
	if (nl != NULL && end + 1 < len) {
		if (!record_word_ok(v + end + 1, len - end - 1))
			return "bad name";
		rec->name = v + end + 1;
		rec->namelen = len - end - 1;
	}
	rec->client = (uint64_t)c;
	rec->grace_ms = (uint64_t)g;
	rec->detached_at = (uint64_t)d;
	return NULL;
}

/* The watch's events, in revision order. */
void
replica_events(struct replica *rp, const struct etcd_event *ev, size_t n,
    int64_t hrev)
{
	uint64_t epoch = rp->epoch;

	if (!rp->hooks.lease_safe(rp->hooks.arg))
		return;
	kl_clock_hold();
	for (size_t i = 0; i < n && rp->epoch == epoch; i++) {
		const struct etcd_kv *kv = &ev[i].kv;

		if (kv->mod_revision != rp->rev) {
			rp->rev = kv->mod_revision;
			rp->rev_grants = 0;
		}
		if (kv->keylen > rp->prefixlen + 3 &&
		    memcmp(kv->key + rp->prefixlen, "fe/", 3) == 0) {
			if (!ev[i].is_delete)
				apply_heartbeat(rp, &ev[i]);
			else
				apply_fe_gone(rp, &ev[i]);
		} else if (kv->keylen > rp->prefixlen + 2 &&
		    memcmp(kv->key + rp->prefixlen, "s/", 2) == 0) {
			apply_record(rp, &ev[i]);
		} else if (ev[i].is_delete) {
			apply_delete(rp, kv);
		} else {
			apply_put(rp, kv, NULL, 0);
		}
	}
	kl_clock_release();
	rp->hooks.end_turn(rp->hooks.arg);
}

/* ---- the table itself ---- */

static void	range_free(struct erange *g);

struct replica *
replica_new(struct event_base *base, struct etcd *etcd, const char *prefix,
    struct be_counters *count, const struct replica_hooks *hooks)
{
	struct replica	*rp = kl_calloc(1, sizeof(*rp));
	struct lt_hooks	 lh = { replica_granted, replica_next_token, rp, NULL };

	if (rp == NULL)
		return NULL;
	rp->hooks = *hooks;
	rp->base = base;
	rp->etcd = etcd;
	rp->prefix = prefix;
	rp->prefixlen = strlen(prefix);
	rp->count = count;
	kl_random(&rp->seed, sizeof(rp->seed));
	TAILQ_INIT(&rp->owners);
	if ((rp->lt = locktable_new(&lh, rp->seed)) == NULL ||
	    ehash_init(&rp->by_id) != 0 || ehash_init(&rp->by_lo) != 0 ||
	    ehash_init(&rp->reqs) != 0 || ehash_init(&rp->entries) != 0 ||
	    ehash_init(&rp->held) != 0 || ehash_init(&rp->by_chan) != 0) {
		replica_free(rp);
		return NULL;
	}
	return rp;
}

void
replica_set_fe(struct replica *rp, uint64_t fe)
{
	rp->fe = fe;
}

void
replica_set_reap(struct replica *rp, uint64_t ms)
{
	rp->reap_ms = ms;
}

void
replica_freeze(struct replica *rp)
{
	rp->mode = REP_FROZEN;
}

const struct locktable *
replica_table(const struct replica *rp)
{
	return rp->lt;
}

int64_t
replica_rev(const struct replica *rp)
{
	return rp->rev;
}

struct eownerq *
replica_owners(struct replica *rp)
{
	return &rp->owners;
}

/*
 * Empties the table, keeping our connected owners (the seam holds their
 * lt_owner): every request is dropped, every other owner freed. Grants
 * that the releases cause are ignored, and released again, until nothing
 * is held or waited for.
 */
void
replica_clear(struct replica *rp)
{
	struct eowner	*o, *next;
	bool		 busy = true;
	uint64_t	 now = kl_now_ms();
	enum replica_mode was = rp->mode;

	rp->mode = REP_CLEARING;
	rp->epoch++;
	while (busy) {
		busy = false;
		TAILQ_FOREACH(o, &rp->owners, entry)
			if (locktable_owner_nholds(o->lo) > 0 ||
			    locktable_owner_is_waiting(o->lo)) {
				locktable_release_owner(rp->lt, o->lo, now,
				    LT_WHY_SHUTDOWN);
				busy = true;
			}
	}
	/* owners stay until the end (eowner_maybe_free waits) */
	TAILQ_FOREACH(o, &rp->owners, entry) {
		struct ereq *r;

		while ((r = TAILQ_FIRST(&o->reqs)) != NULL) {
			r->state = REQ_GONE;
			r->nlive = 0;
			r->refs = 0;
			if (r->side != SIDE_THEIRS)
				r->side = SIDE_ENDED;
			if (o->open == r) {	/* a LOCK open: it ends here */
				o->open = NULL;
				o->state = OWN_IDLE;
			}
			for (size_t i = 0; i < r->nent; i++)
				r->ent[i].rep = ENT_GONE;
			ereq_maybe_free(r);
		}
	}
	rp->mode = was;
	for (o = TAILQ_FIRST(&rp->owners); o != NULL; o = next) {
		next = TAILQ_NEXT(o, entry);
		eowner_maybe_free(o);
	}
}

void
replica_free(struct replica *rp)
{
	if (rp == NULL)
		return;
	range_free(rp->range);
	if (rp->lt != NULL) {
		replica_clear(rp);
		/* what is left: our connected owners (the seam frees them
		 * first, at a stop) */
		while (!TAILQ_EMPTY(&rp->owners))
			eowner_free(TAILQ_FIRST(&rp->owners));
		locktable_free(rp->lt);
	}
	ehash_cleanup(&rp->by_id);
	ehash_cleanup(&rp->by_lo);
	ehash_cleanup(&rp->reqs);
	ehash_cleanup(&rp->entries);
	ehash_cleanup(&rp->held);
	ehash_cleanup(&rp->by_chan);
	kl_free(rp);
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
 * range fails), the table is built from R's entries: the holds carried
 * then have no token known here, 0 (replica_build).
 */
struct erange {
	struct replica		*rp;
	int64_t			 rev;	/* of the first page; 0 before */
	struct erange_kv	*kvs;
	size_t			 n, cap;
	char			*next;	/* key to go on from */
	size_t			 nextlen;
	struct etcd_call	*call;
	bool			 back;	/* the second range, at M - 1 */
	bool			 exact;	/* at M - 1, or no live entry */
	bool			 flat_only;	/* no second range */
	struct erange_kv	*flat;	/* the first's entries, at flat_rev */
	size_t			 nflat;
	int64_t			 flat_rev;
};

static void	range_page(struct erange *g);

/* A step failed: the backend starts over after a pause. */
static void
range_fail(struct erange *g, const char *why)
{
	struct replica *rp = g->rp;

	rp->range = NULL;
	range_free(g);
	rp->hooks.fail(rp->hooks.arg, why);
}

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
	if (a->seq != b->seq)
		return a->seq < b->seq ? -1 : 1;
	if (a->fe != b->fe)
		return a->fe < b->fe ? -1 : 1;
	return 0;
}

/*
 * Every live entry, in the order etcd wrote them: revision, then, inside
 * one transaction (one front end's), its LOCKs in their order, which is
 * SEQ's (the writer's count), whatever lease each entry carries. Applying
 * the live requests in that order gives the table incremental replicas
 * have: per-key FIFO admits no request ahead of an earlier one. kvs is
 * sorted in place; the table is then at rev.
 *
 * exact: rev is older than every live entry (M - 1, the watch replays
 * every grant from M at its own revision). Otherwise (the newest range
 * alone: M - 1 compacted) the grants made here are of holds whose token
 * no range can give (the revision of a grant after a delete, the count
 * of grants before it in its revision, neither is written anywhere):
 * they get token 0, which INFO and RESUME show as "not known here"
 * (keylockd(8), BACKEND ETCD), rather than a token their clients never
 * received. Grants the watch brings afterwards have their tokens.
 */
void
replica_build(struct replica *rp, struct erange_kv *kvs, size_t n,
    int64_t rev, bool exact)
{
	struct etcd_kv		kv;
	uint64_t		epoch = rp->epoch;
	enum replica_mode	was = rp->mode;

	if (n > 0)
		qsort(kvs, n, sizeof(*kvs), range_kv_cmp);
	rp->mode = REP_BUILDING;
	rp->no_tokens = !exact;
	kl_clock_hold();
	for (size_t i = 0, first = 0, end = 0; i < n &&
	    rp->epoch == epoch; i++) {
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
		kv.create_revision = kvs[i].create_revision;
		kv.mod_revision = kvs[i].mod_revision;
		kv.lease = kvs[i].lease;
		rp->rev = rev;
		apply_put(rp, &kv, &kvs[first], end - first);
	}
	kl_clock_release();
	rp->no_tokens = false;
	rp->mode = was;
	rp->rev = rev;
	rp->rev_grants = 0;
	log_info("backend etcd: lock table built from %zu entries at revision "
	    "%" PRId64 "%s", n, rev, exact ? "" : ", the tokens of the holds it "
	    "carries not known here (0)");
}

static void
range_apply(struct erange *g)
{
	struct replica	*rp = g->rp;
	uint64_t	 epoch = rp->epoch;

	replica_build(rp, g->kvs, g->n, g->rev, g->exact || g->n == 0);
	rp->range = NULL;
	if (rp->epoch == epoch)
		rp->hooks.built(rp->hooks.arg, g->rev);
	range_free(g);
}

/* The first range is complete: the second goes back to M - 1. False
 * when there is none to take (no entry, or M - 1 before revision 1). */
static bool
range_back(struct erange *g)
{
	int64_t oldest = g->rev;

	if (g->flat_only)
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
	g->back = g->exact = true;
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
	    "it carries not known here", g->rev, why, g->flat_rev);
	range_kvs_free(g->kvs, g->n);
	g->kvs = g->flat;
	g->n = g->nflat;
	g->rev = g->flat_rev;
	g->flat = NULL;
	g->nflat = 0;
	g->back = g->exact = false;
	range_apply(g);
}

static void
range_cb(void *arg, const struct etcd_result *res)
{
	struct erange	*g = arg;
	struct replica	*rp = g->rp;

	g->call = NULL;
	if (res->status != ETCD_OK && g->back) {
		range_flat(g, res->message != NULL ? res->message :
		    etcd_status_name(res->status));
		return;
	}
	if (res->status != ETCD_OK) {
		char why[256];

		snprintf(why, sizeof(why), "range of %s: %s: %s", rp->prefix,
		    etcd_status_name(res->status), res->message != NULL ?
		    res->message : "");
		range_fail(g, why);
		return;
	}
	if (g->rev == 0)
		g->rev = res->revision;
	for (size_t i = 0; i < res->nkvs; i++) {
		const struct etcd_kv	*kv = &res->kvs[i];
		struct erange_kv	*d;

		if (g->n == g->cap) {
			size_t			 cap = g->cap ? g->cap * 2 :
			    256;
			struct erange_kv	*p = kl_realloc(g->kvs,
			    cap * sizeof(*p));

			if (p == NULL)
				goto nomem;
			g->kvs = p;
			g->cap = cap;
		}
		d = &g->kvs[g->n];
		if (!ekey_parse(rp, kv->key, kv->keylen, &d->fe, &d->seq)) {
			entry_skip(rp, kv, "not an entry's key");
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
		d->mod_revision = kv->mod_revision;
		d->lease = kv->lease;
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
	range_fail(g, "out of memory for the range");
}

static void
range_page(struct erange *g)
{
	struct replica		*rp = g->rp;
	char			 key[512], end[512];
	size_t			 klen = rp->prefixlen + 2;
	struct etcd_range	 rg;

	memcpy(key, rp->prefix, rp->prefixlen);
	memcpy(key + rp->prefixlen, "q/", 2);
	memset(&rg, 0, sizeof(rg));
	rg.end = end;
	rg.endlen = etcd_prefix_end(key, klen, end);
	rg.key = g->next != NULL ? g->next : key;
	rg.keylen = g->next != NULL ? g->nextlen : klen;
	rg.revision = g->rev;
	rg.limit = EBE_RANGE_PAGE;
	if ((g->call = etcd_range(rp->etcd, &rg, ETCD_RETRY, range_cb,
	    g)) == NULL)
		range_fail(g, "cannot ask etcd for a range");
}

int
replica_rebuild_start(struct replica *rp, bool flat)
{
	struct erange *g;

	range_free(rp->range);
	rp->range = NULL;
	if ((g = kl_calloc(1, sizeof(*g))) == NULL)
		return -1;
	g->rp = rp;
	g->flat_only = flat;
	rp->range = g;
	range_page(g);
	return 0;
}
