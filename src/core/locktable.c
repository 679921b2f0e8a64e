/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table: one entry per key somebody holds or waits for, with its
 * holders in grant order and its FIFO queue, and the owner side of the same
 * links (keylockd-protocol(7), SEMANTICS). This file keeps those links:
 * owners, holds, queues, and the withdrawals, releases, refreshes and expiries
 * that end them; after any of these the keys that changed are settled from a
 * worklist, granting each queued request on all its keys at one instant. The
 * rest lives beside it, sharing lt_impl.h: lt_acquire.c (new requests),
 * lt_hash.c (keys), lt_heap.c (ttls), lt_deadlock.c, lt_views.c and
 * lt_check.c. None of them reads the clock, a socket or a global, logs, or
 * recurses: time comes in as now_ms and later grants go out through
 * hooks.granted.
 */
#include <string.h>

#include "hist.h"
#include "locktable.h"
#include "lt_impl.h"
#include "util.h"

static uint64_t	*why_counter(struct locktable *, enum lt_why);
static void	 key_mark_dirty(struct locktable *, struct lt_key *);
static void	 key_touch(struct locktable *, struct lt_key *);
static void	 key_add_waiter(struct locktable *, struct lt_key *);
static void	 key_remove_waiter(struct locktable *, struct lt_key *);
static void	 hold_end(struct locktable *, struct lt_hold *, uint64_t,
		    uint64_t *);
static inline struct lt_hold *owner_find_hold(const struct locktable *,
		    const struct lt_owner *, const char *, size_t)
		    __attribute__((always_inline));
static inline struct lt_hold *owner_scan_hold(const struct lt_owner *,
		    const char *, size_t);
static inline bool release_is_plain(const struct locktable *,
		    const struct lt_hold *);
static inline void release_plain(struct locktable *, struct lt_hold *,
		    uint64_t);
static enum kl_err release_keys(struct locktable *, struct lt_owner *,
		    const char *const *, const size_t *, size_t, uint64_t,
		    size_t *, size_t *) __attribute__((noinline));
static enum kl_err release_one(struct locktable *, struct lt_hold *,
		    uint64_t) __attribute__((noinline));
static inline enum kl_err release_found(struct locktable *,
		    struct lt_hold *, uint64_t, size_t *)
		    __attribute__((always_inline));
static enum kl_err release_lookup(struct locktable *, struct lt_owner *,
		    const char *const *, const size_t *, size_t, uint64_t,
		    size_t *, size_t *) __attribute__((noinline));
static void	 queue_unlink(struct locktable *, struct lt_slot *);
static void	 req_free(struct locktable *, struct lt_req *);
static void	 req_grant(struct locktable *, struct lt_req *,
		    struct lt_key *, uint64_t);
static void	 req_withdraw(struct locktable *, struct lt_req *);
static inline void settle(struct locktable *, uint64_t);
static void	 settle_dirty(struct locktable *, uint64_t);

struct locktable *
locktable_new(const struct lt_hooks *hooks, uint64_t seed)
{
	struct locktable	*lt;

	if ((lt = kl_calloc(1, sizeof(*lt))) == NULL)
		return NULL;
	lt->c.bytes = sizeof(*lt);
	lt->short_paths = true;
	if (!lt_hash_init(lt, seed)) {
		kl_free(lt);
		return NULL;
	}
	if (hooks != NULL)
		lt->hooks = *hooks;
	/* without a hook, every token: lt_next_token() never calls */
	if (lt->hooks.next_token == NULL) {
		lt->tok_next = 1;
		lt->tok_end = UINT64_C(1) << 63;
	}
	return lt;
}

void
locktable_set_short_paths(struct locktable *lt, bool on)
{
	lt->short_paths = on;
}

void
locktable_reserve_tokens(struct locktable *lt,
    uint64_t (*reserve)(void *arg, uint64_t *end))
{
	lt->reserve = reserve;
	lt->tok_next = lt->tok_end = 0;
}

/* The reserved range is used up (or there is none: next_token). */
uint64_t
lt_next_token_slow(struct locktable *lt)
{
	uint64_t	first, end;

	if (lt->reserve == NULL)
		return lt->hooks.next_token != NULL ?
		    lt->hooks.next_token(lt->hooks.arg) : lt->tok_next++;
	first = lt->reserve(lt->hooks.arg, &end);
	lt->tok_next = first + 1;
	lt->tok_end = end > first ? end : first + 1;
	return first;
}

/*
 * What lt_alloc() and lt_release() do when no pooled object serves: an
 * object small enough for a pool is allocated at its class's size, so
 * that it can later serve any request of that class.
 */
void *
lt_alloc_slow(struct locktable *lt, size_t n)
{
	void	*p;

	p = kl_malloc(n - 1 < LT_POOL_MAX ? lt_pool_size(lt_pool_class(n)) : n);
	if (p != NULL)
		lt->c.bytes += n;
	return p;
}

void
lt_release_slow(struct locktable *lt, void *p, size_t n)
{
	lt->c.bytes -= n;
	kl_free(p);
}

void
locktable_trim(struct locktable *lt)
{
	struct lt_pool	*pl;
	void		*p;
	size_t		 i;

	for (i = 0; i < LT_POOL_CLASSES; i++) {
		pl = &lt->pools[i];
		while ((p = pl->head) != NULL) {
			LT_UNPOISON(p, lt_pool_size(i));
			memcpy(&pl->head, p, sizeof(pl->head));
			kl_free(p);
		}
		pl->n = 0;
	}
}

struct lt_kx *
lt_kx_new(struct locktable *lt, uint32_t limit)
{
	struct lt_kx	*x;

	if ((x = lt_zalloc(lt, sizeof(*x))) != NULL)
		x->limit = limit;
	return x;
}

/* Gives a plain entry its extension; the entry's own hold is counted. */
void
lt_kx_attach(struct lt_key *k, struct lt_kx *x)
{
	x->nholders = k->owned;
	k->x = x;
}

void
locktable_freeze(struct locktable *lt)
{
	lt->frozen = true;
}

struct lt_owner *
locktable_owner_new(struct locktable *lt, uint64_t id, void *udata)
{
	struct lt_owner	*o;

	if ((o = lt_zalloc(lt, sizeof(*o))) == NULL)
		return NULL;
	o->id = id;
	o->udata = udata;
	o->lt = lt;
	o->next = lt->owners;
	if (lt->owners != NULL)
		lt->owners->prev = o;
	lt->owners = o;
	return o;
}

uint64_t
locktable_owner_id(const struct lt_owner *o)
{
	return o->id;
}

void *
locktable_owner_udata(const struct lt_owner *o)
{
	return o->udata;
}

void
locktable_owner_set_udata(struct lt_owner *o, void *udata)
{
	o->udata = udata;
}

size_t
locktable_owner_nholds(const struct lt_owner *o)
{
	return o->nholds;
}

bool
locktable_owner_is_waiting(const struct lt_owner *o)
{
	return o->wait != NULL;
}

size_t
locktable_owner_seal(struct lt_owner *o)
{
	struct lt_hold	*h;
	size_t		 n = 0;

	for (h = o->holds; h != NULL; h = h->onext) {
		if (h->sealed)
			continue;
		h->sealed = 1;
		if (!h->inkey)
			lt_hold_key(h)->x->nsealed++;
		n++;
	}
	return n;
}

static uint64_t *
why_counter(struct locktable *lt, enum lt_why why)
{
	switch (why) {
	case LT_WHY_UNLOCK:
		return &lt->c.releases;
	case LT_WHY_DISCONNECT:
		return &lt->c.disconnect_releases;
	case LT_WHY_EXPIRED:
		return &lt->c.expired;
	case LT_WHY_TIMEOUT:
	case LT_WHY_CANCEL:
	case LT_WHY_SHUTDOWN:
		break;
	}
	return NULL;
}

/* Only keys with waiters are settled, and those have their extension. */
static void
key_mark_dirty(struct locktable *lt, struct lt_key *k)
{
	if (k->x->dirty)
		return;
	k->x->dirty = 1;
	k->x->dirty_next = lt->dirty;
	lt->dirty = k;
}

/*
 * After k lost a holder or a waiter: settle it later if somebody waits, else
 * free it as soon as it is empty (keylockd-protocol(7), Cleanup). An entry on
 * the dirty list is freed when settle() pops it.
 */
static void
key_touch(struct locktable *lt, struct lt_key *k)
{
	if (lt_key_nwaiters(k) > 0)
		key_mark_dirty(lt, k);
	else if (lt_key_nholders(k) == 0 && (k->x == NULL || !k->x->dirty))
		lt_key_free(lt, k);
}

static void
key_add_waiter(struct locktable *lt, struct lt_key *k)
{
	struct lt_kx	*x = k->x;

	if (x->nwaiters++ == 0) {
		x->hot_prev = NULL;
		x->hot_next = lt->hot;
		if (lt->hot != NULL)
			lt->hot->x->hot_prev = k;
		lt->hot = k;
	}
	if (x->nwaiters > x->max_waiters)
		x->max_waiters = x->nwaiters;
	if (x->nwaiters > lt->c.max_waiters)
		lt->c.max_waiters = x->nwaiters;
}

static void
key_remove_waiter(struct locktable *lt, struct lt_key *k)
{
	struct lt_kx	*x = k->x;

	if (--x->nwaiters > 0)
		return;
	if (x->hot_prev != NULL)
		x->hot_prev->x->hot_next = x->hot_next;
	else
		lt->hot = x->hot_next;
	if (x->hot_next != NULL)
		x->hot_next->x->hot_prev = x->hot_prev;
	x->hot_prev = x->hot_next = NULL;
}

/*
 * Holders are kept in grant order, so when they stand in the way the first
 * is the longest-standing; when they do not, only the queue does.
 */
void
lt_blocker_fill(const struct lt_key *k, enum lt_mode mode, uint64_t now_ms,
    struct lt_blocker *why)
{
	const struct lt_hold	*first = lt_key_first(k);

	why->key = k->key;
	why->keylen = k->keylen;
	why->holder = NULL;
	why->held_ms = 0;
	why->waiter = NULL;
	why->waited_ms = 0;
	if (first != NULL && !lt_key_admits(k, mode)) {
		first = lt_key_sealed_hold(k, first);
		why->holder = first->owner;
		why->held_ms = lt_ms_since(now_ms, first->granted_ms);
	} else if (k->x != NULL && k->x->qhead != NULL) {
		why->waiter = k->x->qhead->req->owner;
		why->waited_ms = lt_ms_since(now_ms,
		    k->x->qhead->req->arrival_ms);
	}
	why->nholders = lt_key_nholders(k);
	why->nwaiters = lt_key_nwaiters(k);
}

/* Ends one hold, whatever the cause; counter names the cause, if counted. */
static void
hold_end(struct locktable *lt, struct lt_hold *h, uint64_t now_ms,
    uint64_t *counter)
{
	struct lt_key	*k = lt_hold_key(h);
	struct lt_owner	*o = h->owner;
	struct lt_xhold	*xh;

	if (h->inkey) {
		k->owned = 0;
	} else {
		xh = lt_xhold_of(h);
		if (xh->kprev != NULL)
			xh->kprev->knext = xh->knext;
		else
			k->x->holders = xh->knext;
		if (xh->knext != NULL)
			xh->knext->kprev = xh->kprev;
		else
			k->x->holders_tail = xh->kprev;
	}
	if (k->x != NULL) {
		k->x->nholders--;
		if (h->sealed && !h->inkey)
			k->x->nsealed--;
	}
	h->sealed = 0;
	lt_owner_unlink(o, h);
	if (h->heap_idx != LT_NO_TTL)
		lt_heap_remove(lt, h);
	lt->c.held--;
	kl_hist_add(&lt->c.hold_ms, lt_ms_since(now_ms, h->granted_ms));
	if (counter != NULL)
		(*counter)++;
	if (!h->inkey)
		lt_release(lt, h, sizeof(struct lt_xhold));
	key_touch(lt, k);
}

/* Walks whichever list is shorter: the key's holders or the owner's. */
struct lt_hold *
lt_hold_find(const struct lt_key *k, const struct lt_owner *o)
{
	struct lt_hold	*h;

	if (o->nholds <= lt_key_nholders(k)) {
		for (h = o->holds; h != NULL; h = h->onext)
			if (lt_hold_key(h) == k)
				return h;
	} else {
		for (h = lt_key_first(k); h != NULL; h = lt_key_next(k, h))
			if (h->owner == o)
				return h;
	}
	return NULL;
}

/* o's hold on key: among its holds by the keys' bytes when it has a few
 * (cheaper than hashing), else through the key's entry. Inline: every
 * UNLOCK looks its key up here. */
static inline struct lt_hold *
owner_find_hold(const struct locktable *lt, const struct lt_owner *o,
    const char *key, size_t len)
{
	struct lt_key	*k;

	if (o->nholds <= LT_OWNER_SCAN)
		return owner_scan_hold(o, key, len);
	k = lt_key_lookup(lt, key, len, lt_key_hash(lt, key, len));
	return k == NULL ? NULL : lt_hold_find(k, o);
}

/* owner_find_hold() for an owner of a few holds: its holds, by the keys'
 * bytes, and no call. */
static inline struct lt_hold *
owner_scan_hold(const struct lt_owner *o, const char *key, size_t len)
{
	struct lt_hold	*h;
	struct lt_key	*k;

	for (h = o->holds; h != NULL; h = h->onext) {
		k = lt_hold_key(h);
		if (k->keylen == len && lt_bytes_eq(k->key, key, len))
			return h;
	}
	return NULL;
}

/* k has its extension: a queued request allocates it. */
void
lt_queue_append(struct locktable *lt, struct lt_key *k, struct lt_slot *s)
{
	struct lt_kx	*x = k->x;

	s->key = k;
	s->next = NULL;
	s->prev = x->qtail;
	if (x->qtail != NULL)
		x->qtail->next = s;
	else
		x->qhead = s;
	x->qtail = s;
	key_add_waiter(lt, k);
}

static void
queue_unlink(struct locktable *lt, struct lt_slot *s)
{
	struct lt_key	*k = s->key;
	struct lt_kx	*x = k->x;

	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		x->qhead = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	else
		x->qtail = s->prev;
	s->prev = s->next = NULL;
	key_remove_waiter(lt, k);
}

static void
req_free(struct locktable *lt, struct lt_req *r)
{
	uint32_t	i;

	for (i = 0; i < r->nkeys; i++)
		lt_release(lt, r->slots[i].hold, sizeof(struct lt_xhold));
	lt_release(lt, r, lt_req_size(r->nkeys));
}

/* keylockd-protocol(7), Per-key FIFO: at the head of every queue, and admitted. */
bool
lt_req_is_grantable(const struct lt_req *r)
{
	uint32_t	i;

	for (i = 0; i < r->nkeys; i++)
		if (r->slots[i].prev != NULL ||
		    !lt_key_admits(r->slots[i].key, (enum lt_mode)r->mode))
			return false;
	return true;
}

/*
 * Grants a queued request on all its keys as one grant. Its other keys may
 * now have a grantable head (a shared batch, say), so they are settled too;
 * the key being settled is not pushed again. The owner hears of it once
 * the table is consistent for this grant.
 */
static void
req_grant(struct locktable *lt, struct lt_req *r, struct lt_key *settling,
    uint64_t now_ms)
{
	struct lt_owner	*o = r->owner;
	struct lt_grant	 g;
	struct lt_slot	*s;
	uint64_t	 waited = lt_ms_since(now_ms, r->arrival_ms);
	uint32_t	 i;

	g.token = lt_next_token(lt);
	g.now_ms = now_ms;
	g.ttl_ms = r->ttl_ms;
	g.mode = (enum lt_mode)r->mode;
	o->wait = NULL;
	lt->c.waiting--;
	if (r->ttl_ms != 0)
		lt->ttl_reserved -= r->nkeys;
	for (i = 0; i < r->nkeys; i++) {
		s = &r->slots[i];
		queue_unlink(lt, s);
		lt_hold_grant(lt, &s->hold->h, s->key, o, &g);
		s->hold = NULL;
		s->key->x->wait_ms_total += waited;
		if (s->key != settling && s->key->x->nwaiters > 0)
			key_mark_dirty(lt, s->key);
	}
	lt_grant_count(lt, waited);
	lt_release(lt, r, lt_req_size(r->nkeys));
	if (lt->hooks.granted != NULL)
		lt->hooks.granted(lt->hooks.arg, o, g.token, waited);
}

/* Takes a queued request out of every queue; the caller settles. */
static void
req_withdraw(struct locktable *lt, struct lt_req *r)
{
	struct lt_key	*k;
	uint32_t	 i;

	for (i = 0; i < r->nkeys; i++) {
		k = r->slots[i].key;
		queue_unlink(lt, &r->slots[i]);
		key_touch(lt, k);
	}
	r->owner->wait = NULL;
	lt->c.waiting--;
	if (r->ttl_ms != 0)
		lt->ttl_reserved -= r->nkeys;
	req_free(lt, r);
}

/*
 * Grants whatever became grantable: every key whose holders or queue head
 * changed is on the dirty list; each is popped and its head granted for as
 * long as it can be. Granting only adds holders and moves heads, so a head
 * refused here can become grantable only through another dirty key. Entries
 * left empty are freed as they are popped.
 */
static inline void
settle(struct locktable *lt, uint64_t now_ms)
{
	if (lt->dirty != NULL)
		settle_dirty(lt, now_ms);
}

static void
settle_dirty(struct locktable *lt, uint64_t now_ms)
{
	struct lt_key	*k;
	struct lt_kx	*x;

	while ((k = lt->dirty) != NULL) {
		x = k->x;
		lt->dirty = x->dirty_next;
		x->dirty_next = NULL;
		x->dirty = 0;
		while (!lt->frozen && x->qhead != NULL &&
		    lt_req_is_grantable(x->qhead->req))
			req_grant(lt, x->qhead->req, k, now_ms);
		if (x->nholders == 0 && x->nwaiters == 0 && !x->dirty)
			lt_key_free(lt, k);
	}
}

bool
locktable_wait_blocker(struct locktable *lt, const struct lt_owner *o,
    uint64_t now_ms, struct lt_blocker *why)
{
	const struct lt_req	*r = o->wait;
	const struct lt_slot	*s;
	uint32_t		 i;

	(void)lt;
	if (r == NULL)
		return false;
	for (i = 0; i < r->nkeys; i++) {
		s = &r->slots[i];
		if (s->prev != NULL ||
		    !lt_key_admits(s->key, (enum lt_mode)r->mode))
			break;
	}
	/* A settled table has no grantable request; be safe anyway. */
	if (i == r->nkeys)
		i = 0;
	lt_blocker_fill(r->slots[i].key, (enum lt_mode)r->mode, now_ms, why);
	return true;
}

bool
locktable_withdraw(struct locktable *lt, struct lt_owner *o, uint64_t now_ms,
    enum lt_why why)
{
	if (o->wait == NULL)
		return false;
	req_withdraw(lt, o->wait);
	if (why == LT_WHY_TIMEOUT)
		lt->c.timeouts++;
	else if (why == LT_WHY_CANCEL)
		lt->c.cancels++;
	settle(lt, now_ms);
	return true;
}

/*
 * The common UNLOCK, on the table's short path (lt->short_paths): the hold
 * is its entry's own on a plain entry (no extension: nobody waits for it
 * and nobody else holds it), without a ttl, and the entry goes back to
 * its pool with the table keeping its size (lt_free_fits()).
 */
static inline bool
release_is_plain(const struct locktable *lt, const struct lt_hold *h)
{
	return lt->short_paths && h->inkey && h->heap_idx == LT_NO_TTL &&
	    lt_free_fits(lt, lt_hold_key(h));
}

/*
 * What hold_end(), key_touch() and lt_key_free() do for the common
 * UNLOCK, with what they test known: nothing is left to settle. The
 * differential test (tests/unit/locktable_short.c) runs every operation
 * with and without it and compares the tables.
 */
static inline void
release_plain(struct locktable *lt, struct lt_hold *h, uint64_t now_ms)
{
	struct lt_key	*k = lt_hold_key(h);
	struct lt_owner	*o = h->owner;
	struct lt_key	**pp;
	size_t		 size = lt_key_size(k->keylen);
	struct lt_pool	*pl = &lt->pools[lt_pool_class(size)];

	k->owned = 0;
	lt_owner_unlink(o, h);
	lt->c.held--;
	kl_hist_add(&lt->c.hold_ms, lt_ms_since(now_ms, h->granted_ms));
	lt->c.releases++;
	pp = &lt->buckets[lt_key_bucket(lt, k->hash)];
	while (*pp != k)
		pp = &(*pp)->next;
	*pp = k->next;
	lt->c.keys--;
	memcpy(k, &pl->head, sizeof(pl->head));
	pl->head = k;
	pl->n++;
	lt->c.bytes -= size;
	LT_POISON(k, lt_pool_size(lt_pool_class(size)));
}

/*
 * Checks every key before releasing any. A key seen again after its hold
 * ended is a duplicate (o cannot regain it: nothing settles in between).
 * Out of line, so that the common UNLOCK needs none of its registers.
 */
static enum kl_err
release_keys(struct locktable *lt, struct lt_owner *o,
    const char *const *keys, const size_t *keylens, size_t nkeys,
    uint64_t now_ms, size_t *n, size_t *bad_index)
{
	struct lt_hold	*h;
	size_t		 i, done = 0;

	for (i = 0; i < nkeys; i++) {
		if (owner_find_hold(lt, o, keys[i], keylens[i]) == NULL) {
			*bad_index = i;
			return KL_ERR_NOTHELD;
		}
	}
	for (i = 0; i < nkeys; i++) {
		if ((h = owner_find_hold(lt, o, keys[i], keylens[i])) != NULL) {
			hold_end(lt, h, now_ms, &lt->c.releases);
			done++;
		}
	}
	settle(lt, now_ms);
	*n = done;
	return KL_OK;
}

/* One hold of a one-key UNLOCK that is not plain. */
static enum kl_err
release_one(struct locktable *lt, struct lt_hold *h, uint64_t now_ms)
{
	hold_end(lt, h, now_ms, &lt->c.releases);
	settle(lt, now_ms);
	return KL_OK;
}

/* The one hold of a one-key UNLOCK, found. */
static inline enum kl_err
release_found(struct locktable *lt, struct lt_hold *h, uint64_t now_ms,
    size_t *n)
{
	*n = 1;
	if (!release_is_plain(lt, h))
		return release_one(lt, h, now_ms);
	release_plain(lt, h, now_ms);
	return KL_OK;
}

/* Any UNLOCK but one key among a few holds: a key of an owner with more
 * holds is hashed and looked up once, here; other requests go to
 * release_keys(). */
static enum kl_err
release_lookup(struct locktable *lt, struct lt_owner *o,
    const char *const *keys, const size_t *keylens, size_t nkeys,
    uint64_t now_ms, size_t *n, size_t *bad_index)
{
	struct lt_hold	*h;

	if (nkeys == 1 && o->nholds > LT_OWNER_SCAN &&
	    (h = owner_find_hold(lt, o, keys[0], keylens[0])) != NULL)
		return release_found(lt, h, now_ms, n);
	return release_keys(lt, o, keys, keylens, nkeys, now_ms, n,
	    bad_index);
}

/*
 * The common UNLOCK, one key of an owner with a few holds, finds its hold
 * among them without a call; any other goes to release_lookup(), out of
 * line with the hashing, so that the common path keeps fewer values on
 * the stack. Every call is the last thing done (n is written first).
 */
enum kl_err
locktable_release(struct locktable *lt, struct lt_owner *o,
    const char *const *keys, const size_t *keylens, size_t nkeys,
    uint64_t now_ms, size_t *n, size_t *bad_index)
{
	struct lt_hold	*h;

	if (nkeys == 1 && o->nholds <= LT_OWNER_SCAN &&
	    (h = owner_scan_hold(o, keys[0], keylens[0])) != NULL)
		return release_found(lt, h, now_ms, n);
	return release_lookup(lt, o, keys, keylens, nkeys, now_ms, n,
	    bad_index);
}

bool
locktable_release_why(struct locktable *lt, struct lt_owner *o,
    const char *key, size_t keylen, uint64_t now_ms, enum lt_why why)
{
	struct lt_hold *h = owner_find_hold(lt, o, key, keylen);

	if (h == NULL)
		return false;
	hold_end(lt, h, now_ms, why_counter(lt, why));
	settle(lt, now_ms);
	return true;
}

size_t
locktable_release_owner(struct locktable *lt, struct lt_owner *o,
    uint64_t now_ms, enum lt_why why)
{
	uint64_t	*counter = why_counter(lt, why);
	size_t		 n = 0;

	if (o->wait != NULL)
		req_withdraw(lt, o->wait);
	while (o->holds != NULL) {
		hold_end(lt, o->holds, now_ms, counter);
		n++;
	}
	settle(lt, now_ms);
	return n;
}

/*
 * All or nothing, as locktable_release(). The mark counts duplicates once
 * and is cleared before returning.
 */
enum kl_err
locktable_refresh(struct locktable *lt, struct lt_owner *o,
    const char *const *keys, const size_t *keylens, size_t nkeys,
    uint64_t ttl_ms, uint64_t now_ms, size_t *n, size_t *bad_index)
{
	struct lt_hold	*h;
	size_t		 i, need = 0, done = 0;

	if (ttl_ms == 0)
		return KL_ERR_SYNTAX;
	for (i = 0; i < nkeys; i++) {
		if ((h = owner_find_hold(lt, o, keys[i], keylens[i])) == NULL) {
			if (bad_index != NULL)
				*bad_index = i;
			return KL_ERR_NOTHELD;
		}
		need += h->heap_idx == LT_NO_TTL;
	}
	if (!lt_heap_reserve(lt, need))
		return lt_nomem();
	for (i = 0; i < nkeys; i++) {
		h = owner_find_hold(lt, o, keys[i], keylens[i]);
		if (h->mark)
			continue;
		h->mark = 1;
		done++;
		lt_heap_set(lt, h, now_ms + ttl_ms);
	}
	for (i = 0; i < nkeys; i++)
		owner_find_hold(lt, o, keys[i], keylens[i])->mark = 0;
	if (n != NULL)
		*n = done;
	return KL_OK;
}

size_t
locktable_expire(struct locktable *lt, uint64_t now_ms)
{
	size_t	n = 0;

	while (lt->heap_len > 0 && lt->heap[0].expiry_ms <= now_ms) {
		struct lt_owner	*o = lt->heap[0].h->owner;

		hold_end(lt, lt->heap[0].h, now_ms, &lt->c.expired);
		if (lt->hooks.expired != NULL)
			lt->hooks.expired(lt->hooks.arg, o);
		n++;
	}
	settle(lt, now_ms);
	return n;
}

void
locktable_owner_free(struct locktable *lt, struct lt_owner *o,
    uint64_t now_ms)
{
	if (o == NULL)
		return;
	if (o->lt != NULL) {
		locktable_release_owner(lt, o, now_ms, LT_WHY_DISCONNECT);
		if (o->prev != NULL)
			o->prev->next = o->next;
		else
			lt->owners = o->next;
		if (o->next != NULL)
			o->next->prev = o->prev;
		lt_release(lt, o, sizeof(*o));
		return;
	}
	kl_free(o);
}

/*
 * Owners outlive the table: each is detached (holds and wait dropped,
 * nothing counted) and later freed by locktable_owner_free(), which then
 * does not touch the table.
 */
void
locktable_free(struct locktable *lt)
{
	struct lt_owner	*o, *onext;

	if (lt == NULL)
		return;
	for (o = lt->owners; o != NULL; o = onext) {
		onext = o->next;
		if (o->wait != NULL)
			req_free(lt, o->wait);
		o->wait = NULL;
		o->holds = NULL;
		o->nholds = 0;
		o->lt = NULL;
		o->prev = o->next = NULL;
	}
	lt_hash_cleanup(lt);
	locktable_trim(lt);
	kl_free(lt->heap);
	kl_free(lt);
}
