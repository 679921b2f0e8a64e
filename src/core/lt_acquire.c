/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's acquire path: one LOCK or TRYLOCK. Its keys are looked up
 * once and deduplicated, checked in keylockd-protocol(7)'s order (REPLIES:
 * "Checks run in this order"), then granted on every key at one instant or
 * queued at the tail of every key's queue at one instant (SEMANTICS,
 * Multi-key requests are atomic). All a grant or a wait needs is allocated
 * before the table changes, so an error leaves the table as it was. It
 * never reads the clock, a socket or a global, and never logs.
 */
#include <string.h>

#include "locktable.h"
#include "lt_impl.h"
#include "util.h"

static bool	 probes_init(struct locktable *, struct lt_probes *,
		    const struct lt_acquire *, const struct lt_probe *);
static inline void probes_add(struct locktable *, struct lt_probes *,
		    const char *, size_t) __attribute__((always_inline));
static bool	 probes_alloc(struct locktable *, struct lt_probes *,
		    uint32_t, bool);
static void	 probes_unalloc(struct locktable *, struct lt_probes *);
static void	 probes_done(struct lt_probes *);
static struct lt_key *probe_commit(struct locktable *, struct lt_probe *);
static bool	 key_blocks(const struct lt_key *, enum lt_mode);
static inline enum kl_err acquire_validate(const struct lt_acquire *);
static enum kl_err acquire_check(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, const struct lt_probes *,
		    struct lt_blocker *);
static bool	 acquire_is_grantable(const struct lt_probes *, enum lt_mode);
static enum kl_err acquire_refuse(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, const struct lt_probes *,
		    uint64_t, struct lt_blocker *);
static enum kl_err acquire_grant(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, struct lt_probes *, uint64_t,
		    uint64_t *);
static enum kl_err acquire_queue(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, struct lt_probes *, uint64_t);
static enum kl_err acquire_probed(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, const struct lt_probe *,
		    uint64_t, bool *, uint64_t *, struct lt_blocker *)
		    __attribute__((noinline));
static inline bool acquire_is_fresh(const struct locktable *,
		    const struct lt_owner *, const struct lt_acquire *,
		    const struct lt_key *, size_t);
static inline void acquire_fresh(struct locktable *, struct lt_owner *,
		    enum lt_mode, const char *, size_t, uint32_t,
		    struct lt_key **, uint64_t, uint64_t);

/* first: the one key of a one-key request, already looked up. */
static bool
probes_init(struct locktable *lt, struct lt_probes *ps,
    const struct lt_acquire *a, const struct lt_probe *first)
{
	size_t	i, setsize = 2 * LT_PROBES_STACK;

	ps->p = ps->sp;
	ps->set = ps->sset;
	ps->n = 0;
	/* One key, the common request: nothing to deduplicate. */
	if (first != NULL) {
		ps->setsize = 0;
		ps->sp[0] = *first;
		ps->n = 1;
		return true;
	}
	if (a->nkeys > LT_PROBES_STACK) {
		while (setsize < 2 * a->nkeys)
			setsize *= 2;
		ps->p = kl_malloc(a->nkeys * sizeof(*ps->p) +
		    setsize * sizeof(*ps->set));
		if (ps->p == NULL)
			return false;
		ps->set = (void *)(ps->p + a->nkeys);
	}
	ps->setsize = setsize;
	memset(ps->set, 0xff, setsize * sizeof(*ps->set));
	for (i = 0; i < a->nkeys; i++)
		probes_add(lt, ps, a->keys[i], a->keylens[i]);
	return true;
}

/* keylockd-protocol(7): duplicate keys in one request count once. Inline:
 * every LOCK looks up its keys here. */
static inline void
probes_add(struct locktable *lt, struct lt_probes *ps, const char *key,
    size_t len)
{
	struct lt_probe	*q;
	uint32_t	 hash = lt_key_hash(lt, key, len);
	size_t		 mask = ps->setsize - 1, j;

	if (ps->setsize > 0) {
		for (j = hash & mask; ps->set[j] != UINT32_MAX;
		    j = (j + 1) & mask) {
			q = &ps->p[ps->set[j]];
			if (q->hash == hash && q->len == len &&
			    memcmp(q->key, key, len) == 0)
				return;
		}
		ps->set[j] = (uint32_t)ps->n;
	}
	q = &ps->p[ps->n++];
	q->key = key;
	q->len = len;
	q->hash = hash;
	q->xh = NULL;
	q->x = NULL;
	q->fresh = false;
	q->k = lt_key_lookup(lt, key, len, hash);
}

/*
 * Allocates, all or nothing, what a grant (queue false) or a wait needs
 * on every key: the missing entries; a hold, unless a fresh entry's own
 * serves; and an extension where the key will need one (a semaphore, a
 * second holder, a queue).
 */
static bool
probes_alloc(struct locktable *lt, struct lt_probes *ps, uint32_t limit,
    bool queue)
{
	struct lt_probe	*p;
	size_t		 i;

	for (i = 0; i < ps->n; i++) {
		p = &ps->p[i];
		if (p->k == NULL) {
			p->k = lt_key_new(lt, p->key, p->len, p->hash);
			if (p->k == NULL)
				break;
			p->fresh = true;
		}
		if (queue || !p->fresh) {
			p->xh = lt_alloc(lt, sizeof(*p->xh));
			if (p->xh == NULL)
				break;
		}
		if (p->k->x == NULL && (queue || !p->fresh || limit > 1) &&
		    (p->x = lt_kx_new(lt, limit)) == NULL)
			break;
	}
	if (i == ps->n)
		return true;
	probes_unalloc(lt, ps);
	return false;
}

static void
probes_unalloc(struct locktable *lt, struct lt_probes *ps)
{
	struct lt_probe	*p;
	size_t		 i;

	for (i = 0; i < ps->n; i++) {
		p = &ps->p[i];
		lt_release(lt, p->xh, sizeof(*p->xh));
		p->xh = NULL;
		lt_release(lt, p->x, sizeof(*p->x));
		p->x = NULL;
		if (p->fresh) {
			lt_release(lt, p->k, lt_key_size(p->len));
			p->k = NULL;
			p->fresh = false;
		}
	}
}

static void
probes_done(struct lt_probes *ps)
{
	if (ps->p != ps->sp)
		kl_free(ps->p);
}

/* Puts what probes_alloc() made into the table; returns the key. */
static struct lt_key *
probe_commit(struct locktable *lt, struct lt_probe *p)
{
	if (p->x != NULL) {
		lt_kx_attach(p->k, p->x);
		p->x = NULL;
	}
	if (p->fresh) {
		lt_key_insert(lt, p->k);
		p->fresh = false;
	}
	return p->k;
}

/* keylockd-protocol(7), Per-key FIFO: a key with a waiter is not free. */
static bool
key_blocks(const struct lt_key *k, enum lt_mode mode)
{
	return lt_key_nwaiters(k) > 0 || !lt_key_admits(k, mode);
}

/* Requests proto_parse() never produces; see the header. */
static inline enum kl_err
acquire_validate(const struct lt_acquire *a)
{
	size_t	i;

	if (a->nkeys == 0 || a->limit == 0 ||
	    (a->mode != LT_EXCLUSIVE && a->mode != LT_SHARED) ||
	    (a->mode == LT_SHARED && a->limit > 1))
		return KL_ERR_SYNTAX;
	if (a->nkeys > KL_KEYS_HARD_MAX)
		return KL_ERR_LIMIT;
	for (i = 0; i < a->nkeys; i++)
		if (a->keylens[i] == 0 || a->keylens[i] > KL_KEY_MAX)
			return KL_ERR_BADKEY;
	return KL_OK;
}

/* keylockd-protocol(7), REPLIES, the order of checks: LIMIT, HELD,
 * CONFLICT. */
static enum kl_err
acquire_check(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, const struct lt_probes *ps,
    struct lt_blocker *why)
{
	struct lt_key	*k;
	size_t		 i;

	if (a->max_holds != 0 && o->nholds + ps->n > a->max_holds)
		return KL_ERR_LIMIT;
	for (i = 0; i < ps->n; i++) {
		if ((k = ps->p[i].k) != NULL && lt_hold_find(k, o) != NULL) {
			why->key = k->key;
			why->keylen = k->keylen;
			return KL_ERR_HELD;
		}
	}
	for (i = 0; i < ps->n; i++) {
		if ((k = ps->p[i].k) != NULL && lt_key_limit(k) != a->limit) {
			lt->c.conflicts++;
			why->key = k->key;
			why->keylen = k->keylen;
			return KL_ERR_CONFLICT;
		}
	}
	return KL_OK;
}

static bool
acquire_is_grantable(const struct lt_probes *ps, enum lt_mode mode)
{
	size_t	i;

	for (i = 0; i < ps->n; i++)
		if (ps->p[i].k != NULL && key_blocks(ps->p[i].k, mode))
			return false;
	return true;
}

/*
 * BUSY, DEADLOCK, LOCKED for a request that cannot be granted at once.
 * BUSY names a blocking key with too many waiters: with max_waiters >= 1
 * any such key blocks, and with 0 any blocking key will do ("grant now or
 * refuse with BUSY").
 */
static enum kl_err
acquire_refuse(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, const struct lt_probes *ps, uint64_t now_ms,
    struct lt_blocker *why)
{
	struct lt_key	*k;
	size_t		 i;

	for (i = 0; i < ps->n && a->max_waiters >= 0; i++) {
		k = ps->p[i].k;
		if (k != NULL && key_blocks(k, a->mode) &&
		    (int64_t)lt_key_nwaiters(k) >= a->max_waiters) {
			lt->c.busy++;
			lt_blocker_fill(k, a->mode, now_ms, why);
			return KL_ERR_BUSY;
		}
	}
	/* Nobody can wait on an owner that holds nothing. */
	if (o->nholds > 0 &&
	    (i = lt_dl_search(lt, o, ps, a->mode)) != LT_NONE) {
		lt->c.deadlocks++;
		lt_blocker_fill(ps->p[i].k, a->mode, now_ms, why);
		return KL_ERR_DEADLOCK;
	}
	if (!a->try)
		return KL_OK;
	for (i = 0; i < ps->n; i++) {
		k = ps->p[i].k;
		if (k != NULL && key_blocks(k, a->mode)) {
			lt_blocker_fill(k, a->mode, now_ms, why);
			break;
		}
	}
	return KL_ERR_LOCKED;
}

/* Allocates everything first, so that failure leaves the table as it was. */
static enum kl_err
acquire_grant(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, struct lt_probes *ps, uint64_t now_ms,
    uint64_t *token)
{
	struct lt_grant	 g;
	struct lt_probe	*p;
	struct lt_key	*k;
	size_t		 i;

	if (a->ttl_ms != 0 && !lt_heap_reserve(lt, ps->n))
		return lt_nomem();
	if (!probes_alloc(lt, ps, a->limit, false))
		return lt_nomem();
	g.token = lt_next_token(lt);
	g.now_ms = now_ms;
	g.ttl_ms = a->ttl_ms;
	g.mode = a->mode;
	for (i = 0; i < ps->n; i++) {
		p = &ps->p[i];
		k = probe_commit(lt, p);
		lt_hold_grant(lt, p->xh != NULL ? &p->xh->h : &k->own, k, o,
		    &g);
		p->xh = NULL;
	}
	lt_grant_count(lt, 0);
	*token = g.token;
	return KL_OK;
}

/*
 * Queues the request at the tail of every key's queue at once
 * (keylockd-protocol(7), Multi-key requests are atomic), with the holds its
 * grant will need.
 */
static enum kl_err
acquire_queue(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, struct lt_probes *ps, uint64_t now_ms)
{
	struct lt_req	*r;
	struct lt_slot	*s;
	size_t		 i;

	if (a->ttl_ms != 0 && !lt_heap_reserve(lt, ps->n))
		return lt_nomem();
	if ((r = lt_alloc(lt, lt_req_size(ps->n))) == NULL)
		return lt_nomem();
	if (!probes_alloc(lt, ps, a->limit, true)) {
		lt_release(lt, r, lt_req_size(ps->n));
		return lt_nomem();
	}
	r->owner = o;
	r->arrival_ms = now_ms;
	r->ttl_ms = a->ttl_ms;
	r->nkeys = (uint32_t)ps->n;
	r->mode = (uint8_t)a->mode;
	for (i = 0; i < ps->n; i++) {
		s = &r->slots[i];
		s->req = r;
		s->hold = ps->p[i].xh;
		ps->p[i].xh = NULL;
		lt_queue_append(lt, probe_commit(lt, &ps->p[i]), s);
	}
	o->wait = r;
	lt->c.waiting++;
	if (a->ttl_ms != 0)
		lt->ttl_reserved += ps->n;
	return KL_OK;
}

/*
 * The common request, on the table's short path (lt->short_paths): one
 * key that has no entry, a plain lock without a ttl, max_holds with room.
 * Nothing can be in its way, and its fresh entry comes from its pool and
 * goes in without a resize, and its token from the reserved range, so
 * acquire_fresh() grants it with no call (a call on the way would keep
 * the entry's size, pool and chain on the stack across it).
 */
static inline bool
acquire_is_fresh(const struct locktable *lt, const struct lt_owner *o,
    const struct lt_acquire *a, const struct lt_key *k, size_t len)
{
	return lt->short_paths && k == NULL && a->limit == 1 &&
	    a->ttl_ms == 0 &&
	    (a->max_holds == 0 || o->nholds < a->max_holds) &&
	    lt_fresh_fits(lt, len) && lt_token_fits(lt);
}

/*
 * What acquire_grant() does for the common request: lt_key_new(),
 * lt_key_insert() and lt_hold_grant() on the entry's own hold, each field
 * written once, as their tests are known. The differential test
 * (tests/unit/locktable_short.c) runs every operation with and without
 * it and compares the tables.
 */
static inline void
acquire_fresh(struct locktable *lt, struct lt_owner *o, enum lt_mode mode,
    const char *key, size_t len, uint32_t hash, struct lt_key **b,
    uint64_t now_ms, uint64_t token)
{
	size_t		 size = lt_key_size(len);
	struct lt_pool	*pl = &lt->pools[lt_pool_class(size)];
	struct lt_key	*k = pl->head;
	struct lt_hold	*h = &k->own;

	LT_UNPOISON(k, lt_pool_size(lt_pool_class(size)));
	memcpy(&pl->head, k, sizeof(pl->head));
	pl->n--;
	lt->c.bytes += size;
	lt->c.keys++;
	lt->c.held++;
	k->next = *b;
	*b = k;
	k->x = NULL;
	k->hash = hash;
	k->keylen = (uint16_t)len;
	k->owned = 1;
	h->owner = o;
	h->oprev = NULL;
	h->onext = o->holds;
	h->token = token;
	h->granted_ms = now_ms;
	h->heap_idx = LT_NO_TTL;
	h->mode = (uint8_t)mode;
	h->mark = 0;
	h->inkey = 1;
	h->sealed = 0;
	lt_bytes_copy(k->key, key, len);
	k->key[len] = '\0';
	if (o->holds != NULL)
		o->holds->oprev = h;
	o->holds = h;
	o->nholds++;
	lt_grant_count(lt, 0);
}

/*
 * Every request but the common one. first NULL: nothing is checked or
 * looked up yet (a request of several keys, or one the header's checks
 * refuse); first: the one key of a one-key request, looked up by the
 * caller after those checks passed. It writes every result the common
 * path leaves alone. Out of line, so that the common request needs none
 * of its stack or registers.
 */
static enum kl_err
acquire_probed(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, const struct lt_probe *first, uint64_t now_ms,
    bool *granted, uint64_t *token, struct lt_blocker *why)
{
	struct lt_blocker	dummy;
	struct lt_probes	ps;
	enum kl_err		err;

	*granted = false;
	*token = 0;
	if (why == NULL)
		why = &dummy;
	memset(why, 0, sizeof(*why));
	if (first == NULL && (err = acquire_validate(a)) != KL_OK)
		return err;
	if (first == NULL && o->wait != NULL)
		return KL_ERR_LIMIT;
	if (!probes_init(lt, &ps, a, first))
		return lt_nomem();
	if ((err = acquire_check(lt, o, a, &ps, why)) == KL_OK) {
		if (acquire_is_grantable(&ps, a->mode)) {
			err = acquire_grant(lt, o, a, &ps, now_ms, token);
			*granted = err == KL_OK;
		} else if ((err = acquire_refuse(lt, o, a, &ps, now_ms,
		    why)) == KL_OK)
			err = acquire_queue(lt, o, a, &ps, now_ms);
	}
	probes_done(&ps);
	return err;
}

/*
 * Each key is hashed and looked up once: the one key of a one-key request
 * here, any other in probes_init(). A request the checks refuse is
 * answered by acquire_probed() too, which checks it again, in order.
 */
enum kl_err
locktable_acquire(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, uint64_t now_ms, bool *granted,
    uint64_t *token, struct lt_blocker *why)
{
	struct lt_probe		p;
	const char		*key;
	size_t			 len;
	uint32_t		 hash;
	struct lt_key		*k, **b;

	if (a->nkeys != 1 || o->wait != NULL || acquire_validate(a) != KL_OK)
		return acquire_probed(lt, o, a, NULL, now_ms, granted, token,
		    why);
	key = a->keys[0];
	len = a->keylens[0];
	hash = lt_key_hash(lt, key, len);
	b = lt_key_chain(lt, hash);
	k = lt_chain_find(*b, key, len, hash);
	if (!acquire_is_fresh(lt, o, a, k, len)) {
		p.key = key;
		p.len = len;
		p.hash = hash;
		p.k = k;
		p.xh = NULL;
		p.x = NULL;
		p.fresh = false;
		return acquire_probed(lt, o, a, &p, now_ms, granted, token,
		    why);
	}
	acquire_fresh(lt, o, a->mode, key, len, hash, b, now_ms,
	    *token = lt_next_token(lt));
	*granted = true;
	return KL_OK;
}
