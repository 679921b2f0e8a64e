/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's invariant checker, for tests and fuzzers: every key
 * entry, holder list and queue, the hot list, the ttl heap and every owner
 * are checked against each other and against the gauges, and the first
 * broken invariant is named. It only reads: it never repairs, allocates
 * or aborts, and never reads the clock, a socket or a global.
 */
#include "locktable.h"
#include "lt_impl.h"

static const char *check_holders(const struct lt_key *, uint64_t *);
static const char *check_queue(const struct lt_key *, uint64_t *);
static const char *check_key(const struct locktable *, const struct lt_key *,
		    size_t, uint64_t *);
static const char *check_keys(const struct locktable *, uint64_t *);
static const char *check_hot(const struct locktable *, uint64_t);
static const char *check_heap(const struct locktable *, uint64_t);
static const char *check_owner(const struct locktable *,
		    const struct lt_owner *, uint64_t *);
static const char *check_owners(const struct locktable *, uint64_t *);

/* Walks are bounded by the counts they check, so a cycle cannot hang. */
static const char *
check_holders(const struct lt_key *k, uint64_t *tally)
{
	const struct lt_hold	*h, *first = lt_key_first(k);
	const struct lt_xhold	*xprev = NULL;
	uint32_t		 n = 0, nsealed = 0, limit = lt_key_limit(k);

	if (k->owned && !k->own.inkey)
		return "key's own hold not marked as its own";
	for (h = first; h != NULL; h = lt_key_next(k, h)) {
		if (++n > lt_key_nholders(k))
			return "key has more holders than nholders";
		if (lt_hold_key(h) != k)
			return "holder of another key";
		if (!h->inkey) {
			if (lt_xhold_of(h)->kprev != xprev)
				return "holder list links broken";
			xprev = lt_xhold_of(h);
			tally[5] += sizeof(struct lt_xhold);
		}
		if (h->mode != first->mode)
			return "shared and exclusive holders mixed";
		if (limit > 1 && h->mode != LT_EXCLUSIVE)
			return "shared holder of a semaphore";
		if (h->owner == NULL || h->mark)
			return "holder without owner, or marked";
		tally[3] += h->heap_idx != LT_NO_TTL;
		nsealed += h->sealed && !h->inkey;
	}
	if (k->x != NULL && k->x->nsealed != nsealed)
		return "key's count of sealed holds wrong";
	if (k->x == NULL && nsealed != 0)
		return "sealed extra holder without an extension";
	if (n != lt_key_nholders(k) ||
	    (k->x != NULL && k->x->holders_tail != xprev))
		return "key nholders or holder tail wrong";
	if (limit > 1 && n > limit)
		return "more holders than the semaphore's limit";
	if (limit == 1 && n > 1 && first->mode == LT_EXCLUSIVE)
		return "two exclusive holders";
	tally[1] += n;
	return NULL;
}

static const char *
check_queue(const struct lt_key *k, uint64_t *tally)
{
	const struct lt_slot	*s, *prev = NULL;
	const struct lt_req	*r;
	uint32_t		 n = 0;

	if (k->x == NULL)
		return NULL;
	for (s = k->x->qhead; s != NULL; prev = s, s = s->next) {
		if (++n > k->x->nwaiters)
			return "key has more waiters than nwaiters";
		r = s->req;
		if (s->key != k || s->prev != prev || s->hold == NULL)
			return "queue links broken";
		if (s < r->slots || s >= r->slots + r->nkeys)
			return "slot not in its request";
		if (r->owner == NULL || r->owner->wait != r)
			return "queued request not its owner's wait";
		if (k->x->limit > 1 && r->mode != LT_EXCLUSIVE)
			return "shared request on a semaphore";
		if (s == &r->slots[0]) {
			tally[2]++;
			tally[5] += lt_req_size(r->nkeys);
		}
		tally[5] += sizeof(struct lt_xhold);
	}
	if (n != k->x->nwaiters || k->x->qtail != prev)
		return "key nwaiters or queue tail wrong";
	if (k->x->max_waiters < n)
		return "key max_waiters below nwaiters";
	return NULL;
}

/*
 * What one entry must satisfy on its own, whatever the rest of the table:
 * its bytes, its gauges, its holders and its queue. The live upgrade's
 * reader (lt_state.c) checks each entry with this as it rebuilds it, so
 * that the rebuilt table needs no second pass; locktable_check() runs it
 * on every entry, so the rule is written here once.
 */
const char *
lt_check_entry(const struct lt_key *k, uint64_t *tally)
{
	const char	*err;

	if (k->keylen == 0 || k->keylen > KL_KEY_MAX || k->key[k->keylen])
		return "key bytes malformed";
	if (lt_key_nholders(k) == 0 && lt_key_nwaiters(k) == 0)
		return "empty key entry not freed";
	if (k->x != NULL && k->x->dirty)
		return "key left dirty after settling";
	if (lt_key_limit(k) == 0)
		return "key limit 0";
	if (k->owned && k->x != NULL && k->x->holders != NULL &&
	    k->x->holders->h.granted_ms < k->own.granted_ms)
		return "key's own hold younger than another holder";
	tally[5] += lt_key_size(k->keylen);
	if (k->x != NULL)
		tally[5] += sizeof(*k->x);
	if ((err = check_holders(k, tally)) != NULL)
		return err;
	if ((err = check_queue(k, tally)) != NULL)
		return err;
	tally[4] += lt_key_nwaiters(k) > 0;
	return NULL;
}

static const char *
check_key(const struct locktable *lt, const struct lt_key *k, size_t bucket,
    uint64_t *tally)
{
	const struct lt_slot	*head = lt_key_qhead(k);
	const char		*err;

	if (k->hash != lt_key_hash(lt, k->key, k->keylen) ||
	    lt_key_bucket(lt, k->hash) != bucket)
		return "key in the wrong bucket or with a wrong hash";
	if ((err = lt_check_entry(k, tally)) != NULL)
		return err;
	if (!lt->frozen && head != NULL && lt_req_is_grantable(head->req))
		return "a queued request is grantable (settling incomplete)";
	if (k->x != NULL && k->x->max_waiters > lt->c.max_waiters)
		return "counter max_waiters below a key's";
	return NULL;
}

/*
 * tally: keys, holds, requests, holds with a ttl, keys with waiters, and
 * the bytes of entries, extensions, holds and requests.
 */
static const char *
check_keys(const struct locktable *lt, uint64_t *tally)
{
	const struct lt_key	*k;
	const char		*err;
	size_t			 i;

	if (lt->dirty != NULL)
		return "dirty list not empty";
	if (lt->nbuckets < LT_BUCKETS_MIN ||
	    (lt->nbuckets & (lt->nbuckets - 1)) != 0)
		return "bucket count not a power of two";
	if (lt->bshift > 32 - LT_BUCKETS_MIN_BITS ||
	    (uint64_t)lt->nbuckets << lt->bshift != UINT64_C(1) << 32)
		return "bucket shift does not match the bucket count";
	if (lt->keys_low != lt_hash_keys_low(lt->nbuckets))
		return "shrink threshold does not match the bucket count";
	if (lt->tok_next > lt->tok_end)
		return "reserved token range reversed";
	for (i = 0; i < LT_POOL_CLASSES; i++)
		if (lt->pools[i].n > LT_POOL_KEEP ||
		    (lt->pools[i].n == 0) != (lt->pools[i].head == NULL))
			return "pool count wrong";
	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = k->next) {
			if (++tally[0] > lt->c.keys)
				return "more entries than the keys gauge";
			if ((err = check_key(lt, k, i, tally)) != NULL)
				return err;
		}
	}
	if (tally[0] != lt->c.keys)
		return "keys gauge wrong";
	if (tally[1] != lt->c.held)
		return "held gauge wrong";
	if (tally[2] != lt->c.waiting)
		return "waiting gauge wrong";
	return NULL;
}

static const char *
check_hot(const struct locktable *lt, uint64_t nhot)
{
	const struct lt_key	*k, *prev = NULL;
	uint64_t		 n = 0;

	for (k = lt->hot; k != NULL; prev = k, k = k->x->hot_next) {
		if (++n > nhot)
			return "hot list longer than keys with waiters";
		if (lt_key_nwaiters(k) == 0 || k->x->hot_prev != prev)
			return "hot list holds a key without waiters";
		if (locktable_find(lt, k->key, k->keylen) != k)
			return "hot list key not in the table";
	}
	return n == nhot ? NULL : "key with waiters missing from hot list";
}

static const char *
check_heap(const struct locktable *lt, uint64_t nttl)
{
	const struct lt_ttl	*t;
	size_t			 i;

	if (lt->heap_len != nttl)
		return "ttl heap size differs from holds with a ttl";
	if (lt->heap_cap < lt->heap_len + lt->ttl_reserved)
		return "ttl heap room for queued requests not reserved";
	for (i = 0; i < lt->heap_len; i++) {
		t = &lt->heap[i];
		if (t->h == NULL || t->h->heap_idx != i)
			return "ttl heap index wrong";
		if (i > 0 && t->expiry_ms < lt->heap[(i - 1) / 2].expiry_ms)
			return "ttl heap order broken";
	}
	return NULL;
}

static const char *
check_owner(const struct locktable *lt, const struct lt_owner *o,
    uint64_t *reserved)
{
	const struct lt_hold	*h, *prev = NULL;
	const struct lt_slot	*s;
	const struct lt_key	*k;
	size_t			 n = 0;
	uint32_t		 i;

	if (o->lt != lt)
		return "owner of another table";
	for (h = o->holds; h != NULL; prev = h, h = h->onext) {
		if (++n > o->nholds || h->owner != o || h->oprev != prev)
			return "owner hold list broken";
		k = lt_hold_key(h);
		if (locktable_find(lt, k->key, k->keylen) != k)
			return "owner holds a key not in the table";
	}
	if (n != o->nholds)
		return "owner nholds wrong";
	if (o->wait == NULL)
		return NULL;
	if (o->wait->owner != o || o->wait->nkeys == 0)
		return "owner's wait is somebody else's";
	for (i = 0; i < o->wait->nkeys; i++) {
		s = &o->wait->slots[i];
		if (locktable_find(lt, s->key->key, s->key->keylen) != s->key)
			return "waited key not in the table";
		if ((s->prev == NULL) != (lt_key_qhead(s->key) == s))
			return "slot not linked in its queue";
	}
	if (o->wait->ttl_ms != 0)
		*reserved += o->wait->nkeys;
	return NULL;
}

static const char *
check_owners(const struct locktable *lt, uint64_t *bytes)
{
	const struct lt_owner	*o, *prev = NULL;
	const char		*err;
	uint64_t		 held = 0, waiting = 0, reserved = 0;

	for (o = lt->owners; o != NULL; prev = o, o = o->next) {
		*bytes += sizeof(*o);
		if (o->prev != prev)
			return "owner list links broken";
		if ((err = check_owner(lt, o, &reserved)) != NULL)
			return err;
		held += o->nholds;
		waiting += o->wait != NULL;
		if (held > lt->c.held || waiting > lt->c.waiting)
			return "owners hold or wait more than the gauges";
	}
	if (held != lt->c.held || waiting != lt->c.waiting)
		return "owners' holds or waits differ from the gauges";
	if (reserved != lt->ttl_reserved)
		return "ttl reservation differs from queued ttl requests";
	return NULL;
}

const char *
locktable_check(const struct locktable *lt)
{
	uint64_t	 tally[6] = { 0, 0, 0, 0, 0, 0 };
	const char	*err;

	if ((err = check_keys(lt, tally)) != NULL)
		return err;
	if ((err = check_hot(lt, tally[4])) != NULL)
		return err;
	if ((err = check_heap(lt, tally[3])) != NULL)
		return err;
	if ((err = check_owners(lt, &tally[5])) != NULL)
		return err;
	tally[5] += sizeof(*lt) + lt->nbuckets * sizeof(*lt->buckets) +
	    lt->heap_cap * sizeof(*lt->heap);
	return tally[5] == lt->c.bytes ? NULL : "table bytes gauge wrong";
}
