/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Read-only views of the lock table for INFO and STATS: the counters, one
 * key's entry, its holders and waiters, and the keys with most waiters.
 * Nothing here changes the table or allocates; it never reads the clock
 * (now_ms is an argument), a socket or a global.
 */
#include "locktable.h"
#include "lt_impl.h"

static bool	 hot_fewer(const struct lt_key *, const struct lt_key *);
static void	 hot_swap(const struct lt_key **, size_t, size_t);
static void	 hot_up(const struct lt_key **, size_t);
static void	 hot_down(const struct lt_key **, size_t, size_t);
static size_t	 hot_offer(const struct lt_key **, size_t, size_t,
		    const struct lt_key *);

const struct lt_counters *
locktable_counters(const struct locktable *lt)
{
	return &lt->c;
}

const struct lt_key *
locktable_find(const struct locktable *lt, const char *key, size_t keylen)
{
	return lt_key_lookup(lt, key, keylen, lt_key_hash(lt, key, keylen));
}

void
locktable_key_view(const struct lt_key *k, struct lt_key_view *v)
{
	v->key = k->key;
	v->keylen = k->keylen;
	v->limit = lt_key_limit(k);
	v->nholders = lt_key_nholders(k);
	v->nwaiters = lt_key_nwaiters(k);
	v->max_waiters = k->x != NULL ? k->x->max_waiters : 0;
	v->wait_ms_total = k->x != NULL ? k->x->wait_ms_total : 0;
}

void
locktable_key_walk(const struct locktable *lt, const struct lt_key *k,
    uint64_t now_ms,
    bool (*holder)(void *, const struct lt_holder_view *),
    bool (*waiter)(void *, const struct lt_waiter_view *), void *arg)
{
	struct lt_holder_view	 hv;
	struct lt_waiter_view	 wv;
	const struct lt_hold	*h;
	const struct lt_slot	*s;
	uint64_t		 expiry;

	for (h = lt_key_first(k); h != NULL; h = lt_key_next(k, h)) {
		hv.owner = h->owner;
		hv.token = h->token;
		hv.mode = (enum lt_mode)h->mode;
		hv.held_ms = lt_ms_since(now_ms, h->granted_ms);
		hv.expires_in_ms = 0;
		if (h->heap_idx != LT_NO_TTL) {
			expiry = lt_heap_expiry(lt, h);
			hv.expires_in_ms = expiry > now_ms ?
			    expiry - now_ms : 1;
		}
		if (!holder(arg, &hv))
			return;
	}
	for (s = lt_key_qhead(k); s != NULL; s = s->next) {
		wv.owner = s->req->owner;
		wv.mode = (enum lt_mode)s->req->mode;
		wv.waited_ms = lt_ms_since(now_ms, s->req->arrival_ms);
		wv.nkeys = s->req->nkeys;
		if (!waiter(arg, &wv))
			return;
	}
}

static bool
hot_fewer(const struct lt_key *a, const struct lt_key *b)
{
	return lt_key_nwaiters(a) < lt_key_nwaiters(b);
}

static void
hot_swap(const struct lt_key **h, size_t a, size_t b)
{
	const struct lt_key	*t = h[a];

	h[a] = h[b];
	h[b] = t;
}

static void
hot_up(const struct lt_key **h, size_t i)
{
	while (i > 0 && hot_fewer(h[i], h[(i - 1) / 2])) {
		hot_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void
hot_down(const struct lt_key **h, size_t n, size_t i)
{
	size_t	c;

	while ((c = 2 * i + 1) < n) {
		if (c + 1 < n && hot_fewer(h[c + 1], h[c]))
			c++;
		if (!hot_fewer(h[c], h[i]))
			break;
		hot_swap(h, c, i);
		i = c;
	}
}

/* Keeps the max keys with most waiters seen so far, as a min-heap. */
static size_t
hot_offer(const struct lt_key **h, size_t n, size_t max,
    const struct lt_key *k)
{
	if (n < max) {
		h[n] = k;
		hot_up(h, n);
		return n + 1;
	}
	if (hot_fewer(h[0], k)) {
		h[0] = k;
		hot_down(h, n, 0);
	}
	return n;
}

/*
 * The keys with no waiters that fill the rest are taken from their first
 * holders, owner by owner (newest first), and not by bucket: an order that
 * a client can see must not tell it anything about the hash (lt_hash.c).
 * Each such key has one first holder, so it comes once.
 */
size_t
locktable_hot_keys(const struct locktable *lt, const struct lt_key **out,
    size_t max)
{
	return locktable_hot_keys_filter(lt, out, max, NULL, NULL);
}

size_t
locktable_hot_keys_filter(const struct locktable *lt,
    const struct lt_key **out, size_t max,
    bool (*keep)(void *, const char *, size_t), void *arg)
{
	const struct lt_owner	*o;
	const struct lt_hold	*h;
	const struct lt_key	*k;
	size_t			 n = 0, i;

	if (max == 0)
		return 0;
	for (k = lt->hot; k != NULL; k = k->x->hot_next)
		if (keep == NULL || keep(arg, k->key, k->keylen))
			n = hot_offer(out, n, max, k);
	/* Heapsort: popping the fewest to the end leaves most first. */
	for (i = n; i > 1; i--) {
		hot_swap(out, 0, i - 1);
		hot_down(out, i - 1, 0);
	}
	for (o = lt->owners; o != NULL && n < max; o = o->next)
		for (h = o->holds; h != NULL && n < max; h = h->onext) {
			k = lt_hold_key(h);
			if (lt_key_nwaiters(k) == 0 && lt_key_first(k) == h &&
			    (keep == NULL || keep(arg, k->key, k->keylen)))
				out[n++] = k;
		}
	return n;
}

bool
locktable_owner_wait_walk(const struct lt_owner *o,
    bool (*fn)(void *, const char *, size_t), void *arg,
    uint64_t *arrival_ms)
{
	const struct lt_req	*r = o->wait;

	if (r == NULL)
		return false;
	if (arrival_ms != NULL)
		*arrival_ms = r->arrival_ms;
	for (uint32_t i = 0; i < r->nkeys; i++)
		if (!fn(arg, r->slots[i].key->key, r->slots[i].key->keylen))
			break;
	return true;
}

bool
locktable_owner_wait_mode(const struct lt_owner *o, enum lt_mode *mode,
    uint32_t *limit)
{
	const struct lt_req	*r = o->wait;
	const struct lt_key	*k;

	if (r == NULL)
		return false;
	k = r->slots[0].key;
	*mode = (enum lt_mode)r->mode;
	*limit = lt_key_limit(k);
	return true;
}

void
locktable_owner_hold_walk(const struct locktable *lt,
    const struct lt_owner *o, uint64_t now_ms,
    bool (*fn)(void *, const struct lt_own_view *), void *arg)
{
	const struct lt_hold	*h, *last = NULL;
	const struct lt_key	*k;
	struct lt_own_view	 v;
	uint64_t		 expiry;

	/* Holds are pushed at the head: the oldest is the last. */
	for (h = o->holds; h != NULL; h = h->onext)
		last = h;
	for (h = last; h != NULL; h = h->oprev) {
		k = lt_hold_key(h);
		v.key = k->key;
		v.keylen = k->keylen;
		v.token = h->token;
		v.mode = (enum lt_mode)h->mode;
		v.limit = lt_key_limit(k);
		v.expires_in_ms = 0;
		if (h->heap_idx != LT_NO_TTL) {
			expiry = lt_heap_expiry(lt, h);
			v.expires_in_ms = expiry > now_ms ? expiry - now_ms : 1;
		}
		if (!fn(arg, &v))
			return;
	}
}
