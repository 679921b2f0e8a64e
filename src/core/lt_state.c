/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table in the live-upgrade state (kstate.h, HACKING.md, Live
 * upgrade): written from the table's own structures and rebuilt into an
 * empty table exactly, so that every holder keeps its token, mode, grant
 * time and ttl, every queue its order, every owner its holds in the order
 * it took them. The reader trusts nothing: every index is checked before
 * it is used, every object is linked into the table as soon as it is
 * allocated (so a refused state frees like any table), each entry must
 * pass lt_check_entry() as soon as it is read and each owner its checks
 * once all are placed, so that the rebuilt table passes locktable_check()
 * without a second pass over it (tests/fuzz/fuzz_ltstate.c asserts that).
 * Like the rest of the table it never reads the clock, a socket or a
 * global.
 *
 * TABLE section, version 1:
 *   u64 next token; the counters (u64 each) and the two histograms;
 *   u32 owners, each: u64 id, u32 holds, u8 waiting
 *     [u64 arrival, u64 ttl, u8 mode, u32 keys];
 *   u32 keys, each: bytes key, u8 extension [u32 limit, u32 max waiters,
 *     u64 wait total], u8 own held, u32 holders, each: u32 owner, u32 place
 *     in the owner's holds, u64 token, u64 granted, u8 mode, u8 ttl
 *     [u64 expiry]; u32 waiters, each: u32 owner, u32 slot of its request.
 * The keys come in no particular order (the writer takes them in its
 * owners' order, the reader sizes its buckets for all of them at once).
 */
#include <string.h>

#include "kstate.h"
#include "locktable.h"
#include "lt_impl.h"
#include "proto.h"
#include "util.h"

#define LS_OWNER_MIN	13	/* bytes of the smallest owner record */
#define LS_KEY_MIN	14	/* and key record */
#define LS_HOLDER_MIN	26
#define LS_WAITER_MIN	8
#define LS_AHEAD	16	/* keys read before they go in the hash table */

/* ---- writing ---- */

/* Pointers to small numbers, for the writer: open addressing. */
struct ls_map {
	const void	**keys;
	uint32_t	 *vals;
	size_t		  mask;
};

static bool
ls_map_init(struct ls_map *m, size_t n)
{
	size_t	size = 16;

	while (size < 2 * n)
		size *= 2;
	m->mask = size - 1;
	m->keys = kl_calloc(size, sizeof(*m->keys));
	m->vals = kl_calloc(size, sizeof(*m->vals));
	return m->keys != NULL && m->vals != NULL;
}

static void
ls_map_cleanup(struct ls_map *m)
{
	kl_free(m->keys);
	kl_free(m->vals);
}

static size_t
ls_map_slot(const struct ls_map *m, const void *p)
{
	uint64_t	h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL;
	size_t		i = (size_t)(h >> 32) & m->mask;

	while (m->keys[i] != NULL && m->keys[i] != p)
		i = (i + 1) & m->mask;
	return i;
}

static void
ls_map_put(struct ls_map *m, const void *p, uint32_t v)
{
	size_t	i = ls_map_slot(m, p);

	m->keys[i] = p;
	m->vals[i] = v;
}

static uint32_t
ls_map_get(const struct ls_map *m, const void *p)
{
	return m->vals[ls_map_slot(m, p)];
}

static void
ls_put_hist(struct ks_writer *w, const struct kl_hist *h)
{
	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++)
		ks_put_u64(w, h->counts[i]);
	ks_put_u64(w, kl_hist_count(h));	/* kept in the format */
	ks_put_u64(w, h->sum_ms);
}

static void
ls_put_counters(struct ks_writer *w, const struct lt_counters *c)
{
	ks_put_u64(w, c->grants);
	ks_put_u64(w, c->timeouts);
	ks_put_u64(w, c->cancels);
	ks_put_u64(w, c->busy);
	ks_put_u64(w, c->deadlocks);
	ks_put_u64(w, c->conflicts);
	ks_put_u64(w, c->releases);
	ks_put_u64(w, c->expired);
	ks_put_u64(w, c->disconnect_releases);
	ks_put_u64(w, c->max_waiters);
	ls_put_hist(w, &c->wait_ms);
	ls_put_hist(w, &c->hold_ms);
}

/*
 * Key k, written when its first holder first (of owner number oi, place
 * in its list pos) is met in the owners' lists, or with first NULL when
 * it has no holder. Only the other holders of an extended key (never a
 * key's own hold: that one is always its first) and the waiters are
 * looked up in the maps.
 */
static void
ls_put_key(const struct locktable *lt, struct ks_writer *w,
    const struct lt_key *k, const struct lt_hold *first, uint32_t oi,
    uint32_t pos, const struct ls_map *owners, const struct ls_map *places)
{
	const struct lt_hold	*h;
	const struct lt_slot	*s;

	ks_put_bytes(w, k->key, k->keylen);
	ks_put_u8(w, k->x != NULL);
	if (k->x != NULL) {
		ks_put_u32(w, k->x->limit);
		ks_put_u32(w, k->x->max_waiters);
		ks_put_u64(w, k->x->wait_ms_total);
	}
	ks_put_u8(w, k->owned);
	ks_put_u32(w, lt_key_nholders(k));
	for (h = lt_key_first(k); h != NULL; h = lt_key_next(k, h)) {
		ks_put_u32(w, h == first ? oi : ls_map_get(owners, h->owner));
		ks_put_u32(w, h == first ? pos : ls_map_get(places, h));
		ks_put_u64(w, h->token);
		ks_put_u64(w, h->granted_ms);
		ks_put_u8(w, h->mode);
		ks_put_u8(w, h->heap_idx != LT_NO_TTL);
		if (h->heap_idx != LT_NO_TTL)
			ks_put_u64(w, lt_heap_expiry(lt, h));
	}
	ks_put_u32(w, lt_key_nwaiters(k));
	for (s = lt_key_qhead(k); s != NULL; s = s->next) {
		ks_put_u32(w, ls_map_get(owners, s->req->owner));
		ks_put_u32(w, (uint32_t)(s - s->req->slots));
	}
}

/* About the bytes the TABLE section takes: a key of 16 bytes with one
 * holder takes about 64. */
size_t
locktable_state_size(const struct locktable *lt)
{
	size_t	n = 0;

	for (const struct lt_owner *o = lt->owners; o != NULL; o = o->next)
		n++;
	return 1024 + n * 32 + (size_t)lt->c.keys * 64 +
	    (size_t)lt->c.held * 32;
}

bool
locktable_state_write(const struct locktable *lt, struct ks_writer *w,
    void (*each)(void *, struct lt_owner *, uint32_t), void *arg)
{
	const struct lt_owner	*o;
	const struct lt_hold	*h;
	const struct lt_key	*k;
	struct ls_map		 owners, places;
	uint32_t		 n = 0, pos;
	uint64_t		 next = lt->tok_next > 0 ? lt->tok_next : 1;
	size_t			 nx = 0, nkeys = 0;

	if (lt->dirty != NULL)
		return false;	/* only between turns: nothing to settle */
	/* The next token: above every one held, also when the table has
	 * no range reserved (a table rebuilt and not granted since). */
	for (o = lt->owners; o != NULL; o = o->next) {
		n++;
		for (h = o->holds; h != NULL; h = h->onext) {
			if (h->token >= next)
				next = h->token + 1;
			nx += !h->inkey;
		}
	}
	if (!ls_map_init(&owners, n) || !ls_map_init(&places, nx)) {
		ls_map_cleanup(&owners);
		ls_map_cleanup(&places);
		return false;
	}
	ks_writer_reserve(w, locktable_state_size(lt));
	ks_put_u64(w, next);
	ls_put_counters(w, &lt->c);
	ks_put_u32(w, n);
	n = 0;
	for (o = lt->owners; o != NULL; o = o->next) {
		if (each != NULL)
			each(arg, (struct lt_owner *)(uintptr_t)o, n);
		ls_map_put(&owners, o, n++);
		ks_put_u64(w, o->id);
		ks_put_u32(w, (uint32_t)o->nholds);
		pos = 0;
		for (h = o->holds; h != NULL; h = h->onext, pos++)
			if (!h->inkey)
				ls_map_put(&places, h, pos);
		ks_put_u8(w, o->wait != NULL);
		if (o->wait != NULL) {
			ks_put_u64(w, o->wait->arrival_ms);
			ks_put_u64(w, o->wait->ttl_ms);
			ks_put_u8(w, o->wait->mode);
			ks_put_u32(w, o->wait->nkeys);
		}
	}
	/* Each key once: the held ones in the owners' order (the order they
	 * were taken in, near each other in memory), at their first holder,
	 * then those with waiters only. */
	ks_put_u32(w, (uint32_t)lt->c.keys);
	n = 0;
	for (o = lt->owners; o != NULL; o = o->next, n++) {
		pos = 0;
		for (h = o->holds; h != NULL; h = h->onext, pos++) {
			k = lt_hold_key(h);
			if (lt_key_first(k) != h)
				continue;
			ls_put_key(lt, w, k, h, n, pos, &owners, &places);
			nkeys++;
		}
	}
	for (k = lt->hot; k != NULL; k = k->x->hot_next) {
		if (lt_key_nholders(k) != 0)
			continue;
		ls_put_key(lt, w, k, NULL, 0, 0, &owners, &places);
		nkeys++;
	}
	ls_map_cleanup(&owners);
	ls_map_cleanup(&places);
	/* every entry has a holder or a waiter (locktable_check) */
	return !w->nomem && nkeys == lt->c.keys;
}

/* ---- reading ---- */

struct ls_owner {
	struct lt_owner	 *o;
	struct lt_hold	**holds;	/* by place in the owner's list */
	uint32_t	  nholds;
	uint32_t	  held_stamp;	/* key ordinal + 1 it holds */
	uint32_t	  queued_stamp;	/* key ordinal + 1 it waits for */
};

struct ls_read {
	struct locktable *lt;
	struct ks_reader *r;
	struct ls_owner	 *owners;
	uint32_t	  nowners;
	uint64_t	  next_token;
	uint64_t	  shift_ms;
	uint64_t	  tally[6];	/* lt_check_entry()'s */
	uint32_t	  max_waiters;	/* the largest of a key's */
	/* keys read, not yet in the hash table: ls_push_key() */
	struct lt_key	 *ahead[LS_AHEAD];
	uint32_t	  nin, nout;
};

static void
ls_get_hist(struct ks_reader *r, struct kl_hist *h)
{
	uint64_t	sum = 0, count;

	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++) {
		h->counts[i] = ks_get_u64(r);
		sum += h->counts[i];
	}
	count = ks_get_u64(r);
	h->sum_ms = ks_get_u64(r);
	if (sum != count)
		ks_fail(r, "a histogram's buckets do not add up");
}

static void
ls_get_counters(struct ks_reader *r, struct lt_counters *c)
{
	c->grants = ks_get_u64(r);
	c->timeouts = ks_get_u64(r);
	c->cancels = ks_get_u64(r);
	c->busy = ks_get_u64(r);
	c->deadlocks = ks_get_u64(r);
	c->conflicts = ks_get_u64(r);
	c->releases = ks_get_u64(r);
	c->expired = ks_get_u64(r);
	c->disconnect_releases = ks_get_u64(r);
	c->max_waiters = ks_get_u64(r);
	ls_get_hist(r, &c->wait_ms);
	ls_get_hist(r, &c->hold_ms);
}

static bool
ls_read_owner(struct ls_read *rd, struct ls_owner *lo,
    bool (*adopt)(void *, struct lt_owner *), void *arg)
{
	struct ks_reader	*r = rd->r;
	struct locktable	*lt = rd->lt;
	struct lt_req		*q;
	uint64_t		 id, arrival, ttl;
	uint32_t		 nkeys;
	uint8_t			 mode;

	id = ks_get_u64(r);
	lo->nholds = ks_get_u32(r);
	if (!r->bad && lo->nholds > (r->len - r->off) / LS_HOLDER_MIN)
		return ks_fail(r, "an owner with more holds than fit");
	if (r->bad)
		return false;
	if ((lo->o = locktable_owner_new(lt, id, NULL)) == NULL)
		return ks_fail(r, "out of memory");
	if (!adopt(arg, lo->o)) {
		locktable_owner_free(lt, lo->o, 0);	/* empty yet */
		lo->o = NULL;
		return ks_fail(r, "owner %llu refused (a duplicate id, or "
		    "out of memory)", (unsigned long long)id);
	}
	if (lo->nholds > 0 &&
	    (lo->holds = kl_calloc(lo->nholds, sizeof(*lo->holds))) == NULL)
		return ks_fail(r, "out of memory");
	if (!ks_get_bool(r))
		return !r->bad;
	arrival = ks_get_u64(r);
	ttl = ks_get_u64(r);
	mode = ks_get_u8(r);
	nkeys = ks_get_u32(r);
	if (r->bad)
		return false;
	if (mode > LT_SHARED || nkeys == 0 || nkeys > KL_KEYS_HARD_MAX)
		return ks_fail(r, "a waiting request of mode %u, %u keys",
		    mode, nkeys);
	if (ttl != 0 && !lt_heap_reserve(lt, nkeys))
		return ks_fail(r, "out of memory");
	if ((q = lt_zalloc(lt, lt_req_size(nkeys))) == NULL)
		return ks_fail(r, "out of memory");
	q->owner = lo->o;
	q->arrival_ms = arrival;
	q->ttl_ms = ttl;
	q->nkeys = nkeys;
	q->mode = mode;
	lo->o->wait = q;
	lt->c.waiting++;
	if (ttl != 0)
		lt->ttl_reserved += nkeys;
	return true;
}

static bool
ls_read_holder(struct ls_read *rd, struct lt_key *k, uint32_t stamp,
    bool own)
{
	struct ks_reader	*r = rd->r;
	struct locktable	*lt = rd->lt;
	struct ls_owner		*lo;
	struct lt_grant		 g;
	struct lt_hold		*h;
	uint32_t		 oi, place;
	uint64_t		 expiry = 0;
	uint8_t			 mode;
	bool			 ttl;

	oi = ks_get_u32(r);
	place = ks_get_u32(r);
	g.token = ks_get_u64(r);
	g.now_ms = ks_get_u64(r);
	mode = ks_get_u8(r);
	if ((ttl = ks_get_bool(r)))
		expiry = ks_get_u64(r);
	if (r->bad)
		return false;
	if (oi >= rd->nowners || place >= rd->owners[oi].nholds ||
	    rd->owners[oi].holds[place] != NULL)
		return ks_fail(r, "a holder of %s names no free hold", k->key);
	lo = &rd->owners[oi];
	if (lo->held_stamp == stamp)
		return ks_fail(r, "an owner holds %s twice", k->key);
	if (g.token == 0 || g.token >= rd->next_token || mode > LT_SHARED)
		return ks_fail(r, "a holder of %s with token %llu, mode %u",
		    k->key, (unsigned long long)g.token, mode);
	if (ttl && (expiry > UINT64_MAX - rd->shift_ms ||
	    !lt_heap_reserve(lt, 1)))
		return ks_fail(r, "a ttl that cannot be kept");
	if (own) {
		h = &k->own;
	} else if (k->x == NULL) {
		return ks_fail(r, "%s has holders but no extension", k->key);
	} else {
		struct lt_xhold	*xh = lt_alloc(lt, sizeof(*xh));

		if (xh == NULL)
			return ks_fail(r, "out of memory");
		h = &xh->h;
	}
	g.ttl_ms = 0;
	g.mode = (enum lt_mode)mode;
	lt_hold_grant(lt, h, k, lo->o, &g);
	if (ttl)
		lt_heap_set(lt, h, expiry + rd->shift_ms);
	lo->holds[place] = h;
	lo->held_stamp = stamp;
	return true;
}

static bool
ls_read_waiter(struct ls_read *rd, struct lt_key *k, uint32_t stamp)
{
	struct ks_reader	*r = rd->r;
	struct ls_owner		*lo;
	struct lt_slot		*s;
	uint32_t		 oi, si;

	oi = ks_get_u32(r);
	si = ks_get_u32(r);
	if (r->bad)
		return false;
	if (k->x == NULL)
		return ks_fail(r, "%s has waiters but no extension", k->key);
	if (oi >= rd->nowners || rd->owners[oi].o->wait == NULL ||
	    si >= rd->owners[oi].o->wait->nkeys)
		return ks_fail(r, "a waiter of %s names no request", k->key);
	lo = &rd->owners[oi];
	s = &lo->o->wait->slots[si];
	if (s->key != NULL || lo->queued_stamp == stamp ||
	    lo->held_stamp == stamp)
		return ks_fail(r, "a waiter of %s already in place", k->key);
	if ((s->hold = lt_alloc(rd->lt, sizeof(*s->hold))) == NULL)
		return ks_fail(r, "out of memory");
	s->req = lo->o->wait;
	lt_queue_append(rd->lt, k, s);
	lo->queued_stamp = stamp;
	return true;
}

/*
 * Into the hash table: k, checked first not to be there (false if it is,
 * and k is inserted all the same, to be freed with the table), or not
 * checked when check is false (a refused state's).
 */
static bool
ls_insert(struct ls_read *rd, struct lt_key *k, bool check)
{
	bool	twice = check &&
		    lt_key_lookup(rd->lt, k->key, k->keylen, k->hash) != NULL;

	lt_key_insert(rd->lt, k);
	return twice ? ks_fail(rd->r, "%s twice", k->key) : true;
}

/*
 * A key just read goes in the hash table LS_AHEAD keys later: its bucket
 * is fetched into the cache now, the entry at its head half way, so that
 * the lookup that refuses a key twice and the insertion do not each wait
 * for memory (they were most of the rebuild of a large table, in the
 * pause of a live upgrade). Nothing else needs the hash table while the
 * table is read; each key is in rd->ahead or in the table, so that a
 * refused state is freed whole (ls_drain()).
 */
static bool
ls_push_key(struct ls_read *rd, struct lt_key *k)
{
	struct locktable	*lt = rd->lt;
	struct lt_key		*m, *head;

	__builtin_prefetch(&lt->buckets[lt_key_bucket(lt, k->hash)], 1);
	rd->ahead[rd->nin++ % LS_AHEAD] = k;
	if (rd->nin - rd->nout > LS_AHEAD / 2) {
		m = rd->ahead[(rd->nin - 1 - LS_AHEAD / 2) % LS_AHEAD];
		if ((head = lt->buckets[lt_key_bucket(lt, m->hash)]) != NULL)
			__builtin_prefetch(head);
	}
	if (rd->nin - rd->nout < LS_AHEAD)
		return true;
	return ls_insert(rd, rd->ahead[rd->nout++ % LS_AHEAD], true);
}

/* The keys still ahead into the table; check as ls_insert(). */
static bool
ls_drain(struct ls_read *rd, bool check)
{
	bool	ok = true;

	while (rd->nout < rd->nin)
		if (!ls_insert(rd, rd->ahead[rd->nout++ % LS_AHEAD],
		    check && ok))
			ok = false;
	return ok;
}

static bool
ls_read_key(struct ls_read *rd, uint32_t stamp)
{
	struct ks_reader	*r = rd->r;
	struct locktable	*lt = rd->lt;
	struct lt_key		*k;
	struct lt_kx		*x;
	const char		*key, *e;
	char			 why[PROTO_WHY_MAX];
	size_t			 len;
	uint32_t		 hash, n, i;
	bool			 owned;

	key = ks_get_bytes(r, &len, KL_KEY_MAX);
	if (key == NULL)
		return false;
	if (!proto_key_is_valid(key, len, why, sizeof(why)))
		return ks_fail(r, "a key the protocol refuses: %s", why);
	hash = lt_key_hash(lt, key, len);
	if ((k = lt_key_new(lt, key, len, hash)) == NULL)
		return ks_fail(r, "out of memory");
	if (!ls_push_key(rd, k))
		return false;
	if (ks_get_bool(r)) {
		if ((x = lt_kx_new(lt, 1)) == NULL)
			return ks_fail(r, "out of memory");
		lt_kx_attach(k, x);
		x->limit = ks_get_u32(r);
		x->max_waiters = ks_get_u32(r);
		x->wait_ms_total = ks_get_u64(r);
		if (x->limit == 0)
			return ks_fail(r, "%s with limit 0", k->key);
	}
	owned = ks_get_bool(r);
	n = ks_get_count(r, LS_HOLDER_MIN);
	if (r->bad)
		return false;
	if (owned && n == 0)
		return ks_fail(r, "%s held by its own hold, with no holder",
		    k->key);
	for (i = 0; i < n; i++)
		if (!ls_read_holder(rd, k, stamp, i == 0 && owned))
			return false;
	n = ks_get_count(r, LS_WAITER_MIN);
	for (i = 0; i < n && !r->bad; i++)
		if (!ls_read_waiter(rd, k, stamp))
			return false;
	if (r->bad)
		return false;
	if (lt_key_nholders(k) == 0 && lt_key_nwaiters(k) == 0)
		return ks_fail(r, "%s: an entry with nobody in it", k->key);
	/* the entry's own invariants now, while it is in the cache: the
	 * whole table then needs no second pass (locktable_state_read) */
	if ((e = lt_check_entry(k, rd->tally)) != NULL)
		return ks_fail(r, "%s: %s", k->key, e);
	if (k->x != NULL && k->x->max_waiters > rd->max_waiters)
		rd->max_waiters = k->x->max_waiters;
	return true;
}

/* Every hold and every slot placed: the owners' lists, in their order.
 * Checked first, so that a refusal leaves every owner in lt->owners. */
static bool
ls_link(struct ls_read *rd)
{
	struct locktable	*lt = rd->lt;
	struct ls_owner		*lo;
	struct lt_hold		*h, *prev;
	uint32_t		 i, j;

	for (i = 0; i < rd->nowners; i++) {
		lo = &rd->owners[i];
		if (lo->o->wait != NULL) {
			for (j = 0; j < lo->o->wait->nkeys; j++)
				if (lo->o->wait->slots[j].key == NULL)
					return ks_fail(rd->r, "a waiting "
					    "request missing from a queue");
			/* settled: no request waits that could be granted
			 * (locktable_check's rule, at the head of a queue) */
			if (!lt->frozen && lt_req_is_grantable(lo->o->wait))
				return ks_fail(rd->r, "a waiting request "
				    "that could be granted");
		}
		for (j = 0; j < lo->nholds; j++)
			if (lo->holds[j] == NULL)
				return ks_fail(rd->r, "an owner's hold "
				    "missing from its key");
	}
	lt->owners = NULL;
	for (i = rd->nowners; i-- > 0;) {
		lo = &rd->owners[i];
		prev = NULL;
		lo->o->holds = NULL;
		for (j = 0; j < lo->nholds; j++) {
			h = lo->holds[j];
			h->oprev = prev;
			h->onext = NULL;
			if (prev != NULL)
				prev->onext = h;
			else
				lo->o->holds = h;
			prev = h;
		}
		lo->o->prev = NULL;
		lo->o->next = lt->owners;
		if (lt->owners != NULL)
			lt->owners->prev = lo->o;
		lt->owners = lo->o;
		lo->o->dl_epoch = 0;
		lo->o->dl_node = 0;
	}
	return true;
}

bool
locktable_state_read(struct locktable *lt, struct ks_reader *r,
    uint64_t shift_ms, bool (*adopt)(void *arg, struct lt_owner *o),
    void *arg, uint64_t *next_token)
{
	struct ls_read		 rd;
	struct lt_counters	 c;
	uint32_t		 nkeys, i;
	unsigned		 bits;
	bool			 ok = false;

	memset(&rd, 0, sizeof(rd));
	rd.lt = lt;
	rd.r = r;
	rd.shift_ms = shift_ms;
	if (lt->owners != NULL || lt->c.keys != 0)
		return ks_fail(r, "the table is not empty");
	rd.next_token = ks_get_u64(r);
	memset(&c, 0, sizeof(c));
	ls_get_counters(r, &c);
	if (!r->bad && (rd.next_token == 0 ||
	    rd.next_token > UINT64_C(1) << 63))
		ks_fail(r, "a next token of %llu",
		    (unsigned long long)rd.next_token);
	rd.nowners = ks_get_count(r, LS_OWNER_MIN);
	if (r->bad)
		return false;
	if (rd.nowners > 0 &&
	    (rd.owners = kl_calloc(rd.nowners, sizeof(*rd.owners))) == NULL)
		return ks_fail(r, "out of memory");
	for (i = 0; i < rd.nowners; i++)
		if (!ls_read_owner(&rd, &rd.owners[i], adopt, arg))
			goto done;
	nkeys = ks_get_count(r, LS_KEY_MIN);
	/* the buckets the keys end in, at once rather than doubling */
	for (bits = 32 - lt->bshift; bits < LT_BUCKETS_MAX_BITS &&
	    ((size_t)1 << bits) < nkeys; bits++)
		continue;
	if (!r->bad && bits > 32 - lt->bshift)
		lt_hash_resize(lt, bits);
	for (i = 0; i < nkeys && !r->bad; i++)
		if (!ls_read_key(&rd, i + 1))
			break;
	if (!ls_drain(&rd, !r->bad) || r->bad || !ls_link(&rd))
		goto done;
	c.keys = lt->c.keys;
	c.held = lt->c.held;
	c.waiting = lt->c.waiting;
	c.bytes = lt->c.bytes;
	if (lt->c.max_waiters > c.max_waiters)
		c.max_waiters = lt->c.max_waiters;
	lt->c = c;
	/* Each entry was checked as it was read (lt_check_entry), each
	 * owner and waiting request by ls_link(); the rest of what
	 * locktable_check() asks (hash chains, the hot list, the ttl heap,
	 * the gauges, the bytes) holds by construction: everything above
	 * was built with the table's own calls. fuzz_ltstate checks that
	 * whatever this accepts passes locktable_check(). */
	if (rd.max_waiters > c.max_waiters) {
		ks_fail(r, "a key's max waiters above the table's");
		goto done;
	}
	*next_token = rd.next_token;
	ok = true;
done:
	for (i = 0; i < rd.nowners; i++)
		kl_free(rd.owners[i].holds);
	kl_free(rd.owners);
	return ok;
}
