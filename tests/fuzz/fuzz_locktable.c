/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fuzz harness for the lock table: the input is decoded into a sequence of
 * table operations (acquire with every option, release, release-all,
 * disconnect and reconnect, timeout, ttl expiry, refresh, views) over a
 * few owners and keys, and the table's invariants are checked after every
 * step, together with what the caller can see: tokens strictly increase,
 * a deferred grant goes only to a waiting owner, and once every owner is
 * gone the table is empty. Tokens come one by one from next_token or, for
 * inputs of even size, in reserved ranges of 1 to 4.
 *
 * Every operation runs on two tables, one with its short paths on and one
 * with them off (locktable_set_short_paths()), and after every step the
 * two must agree on every result, every deferred grant, every counter and
 * every key: its holders (owner, token, mode, ages), its queue (owner,
 * mode, keys) and its view. The short paths may change nothing that the
 * general one would not.
 */
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locktable.h"

#define FZ_OWNERS	6
#define FZ_KEYS		5
#define FZ_SIDES	2	/* short paths on, off */
#define FZ_GRANTS	(FZ_OWNERS + 1)	/* deferred grants of one step */
#define FZ_ITEMS	8	/* holders or waiters of one key */

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One table, with its owners and what the caller saw of it. */
struct fz_side {
	struct locktable	*lt;
	struct lt_owner		*owner[FZ_OWNERS];
	uint64_t		 last_token;
	uint64_t		 next_token;
	uint64_t		 range;		/* tokens per reserved range */
	uint64_t		 grants[FZ_GRANTS];	/* this step's, owner id */
	uint64_t		 grant_tokens[FZ_GRANTS];
	size_t			 ngrants;
};

struct fz {
	const uint8_t		*p, *end;
	uint64_t		 now;
	struct fz_side		 side[FZ_SIDES];
};

/* What one call returned, to compare across the sides. */
struct fz_result {
	int			 err;
	bool			 granted;
	uint64_t		 token;
	size_t			 n, bad;
	struct lt_blocker	 why;
	uint64_t		 why_holder;	/* its id, or 0 */
};

/* A key's holders and waiters, as locktable_key_walk() gives them. */
struct fz_walk {
	uint64_t		 h[FZ_ITEMS][5];
	uint64_t		 w[FZ_ITEMS][4];
	size_t			 nh, nw;
};

static const char *const fz_keys[FZ_KEYS] = { "a", "b", "c", "key:d", "e" };

#define FZ_SAME(x)							\
	do {								\
		if (!(x)) {						\
			fprintf(stderr, "short paths differ: %s (%s:%d)\n", \
			    #x, __FILE__, __LINE__);			\
			abort();					\
		}							\
	} while (0)

static uint8_t
fz_byte(struct fz *f)
{
	return f->p < f->end ? *f->p++ : 0;
}

static void
fz_check(struct fz_side *s)
{
	const char	*why = locktable_check(s->lt);

	if (why != NULL) {
		fprintf(stderr, "invariant broken: %s\n", why);
		abort();
	}
}

static uint64_t
fz_token(void *arg)
{
	struct fz_side	*s = arg;

	return ++s->next_token;
}

/* Ranges with a gap of one before each: tokens need not be dense. */
static uint64_t
fz_reserve(void *arg, uint64_t *end)
{
	struct fz_side	*s = arg;
	uint64_t	 first = s->next_token + 2;

	*end = first + s->range;
	s->next_token = *end - 1;
	return first;
}

static void
fz_granted(void *arg, struct lt_owner *o, uint64_t token, uint64_t waited)
{
	struct fz_side	*s = arg;

	(void)waited;
	/* The owner was waiting; the hook is told after the grant. */
	assert(!locktable_owner_is_waiting(o));
	assert(token > s->last_token);
	s->last_token = token;
	assert(s->ngrants < FZ_GRANTS);
	s->grants[s->ngrants] = locktable_owner_id(o);
	s->grant_tokens[s->ngrants++] = token;
}

static void
fz_pick_keys(struct fz *f, const char **keys, size_t *lens, size_t *n)
{
	*n = 1 + fz_byte(f) % 3;
	for (size_t i = 0; i < *n; i++) {
		keys[i] = fz_keys[fz_byte(f) % FZ_KEYS];
		lens[i] = strlen(keys[i]);
	}
}

static void
fz_same_results(const struct fz_result *r)
{
	const struct fz_result	*a = &r[0], *b = &r[1];

	FZ_SAME(a->err == b->err && a->granted == b->granted);
	FZ_SAME(a->token == b->token && a->n == b->n && a->bad == b->bad);
	FZ_SAME(a->why.keylen == b->why.keylen &&
	    (a->why.key == NULL) == (b->why.key == NULL));
	FZ_SAME(a->why.key == NULL ||
	    memcmp(a->why.key, b->why.key, a->why.keylen) == 0);
	FZ_SAME(a->why_holder == b->why_holder &&
	    a->why.held_ms == b->why.held_ms &&
	    a->why.nholders == b->why.nholders &&
	    a->why.nwaiters == b->why.nwaiters);
}

static void
fz_acquire(struct fz *f, int i)
{
	static const uint32_t	 limits[] = { 1, 1, 2, 3 };
	const char		*keys[3];
	size_t			 lens[3];
	struct lt_acquire	 a = { 0 };
	struct fz_result	 r[FZ_SIDES];
	uint8_t			 flags = fz_byte(f);

	fz_pick_keys(f, keys, lens, &a.nkeys);
	a.keys = keys;
	a.keylens = lens;
	a.limit = limits[flags & 3];
	a.mode = (flags & 4) && a.limit == 1 ? LT_SHARED : LT_EXCLUSIVE;
	a.try = (flags & 8) != 0;
	a.max_waiters = (flags & 16) ? (int64_t)(fz_byte(f) % 3) : -1;
	a.ttl_ms = (flags & 32) ? 1 + fz_byte(f) % 50 : 0;
	a.max_holds = (flags & 64) ? 2 : 0;
	memset(r, 0, sizeof(r));
	for (int k = 0; k < FZ_SIDES; k++) {
		struct fz_side	*s = &f->side[k];
		struct lt_owner	*o = s->owner[i];

		if (locktable_owner_is_waiting(o))
			return;		/* on both sides: compared before */
		r[k].err = locktable_acquire(s->lt, o, &a, f->now,
		    &r[k].granted, &r[k].token, &r[k].why);
		if (r[k].why.holder != NULL)
			r[k].why_holder = locktable_owner_id(r[k].why.holder);
		if (r[k].err == KL_OK && r[k].granted) {
			assert(r[k].token > s->last_token);
			s->last_token = r[k].token;
		}
		if (r[k].err == KL_OK && !r[k].granted)
			assert(locktable_owner_is_waiting(o));
	}
	fz_same_results(r);
}

static void
fz_release(struct fz *f, int i, bool refresh)
{
	const char		*keys[3];
	size_t			 lens[3], n;
	uint64_t		 ttl = 0;
	struct fz_result	 r[FZ_SIDES];

	fz_pick_keys(f, keys, lens, &n);
	if (refresh)
		ttl = 1 + fz_byte(f) % 50;
	memset(r, 0, sizeof(r));
	for (int k = 0; k < FZ_SIDES; k++) {
		struct fz_side	*s = &f->side[k];

		if (refresh)
			r[k].err = locktable_refresh(s->lt, s->owner[i], keys,
			    lens, n, ttl, f->now, &r[k].n, &r[k].bad);
		else
			r[k].err = locktable_release(s->lt, s->owner[i], keys,
			    lens, n, f->now, &r[k].n, &r[k].bad);
	}
	fz_same_results(r);
}

static void
fz_views(struct fz_side *s, uint64_t now)
{
	const struct lt_key	*hot[4];
	struct lt_blocker	 why;
	struct lt_key_view	 v;
	size_t			 n = locktable_hot_keys(s->lt, hot, 4);

	for (size_t i = 0; i < n; i++) {
		locktable_key_view(hot[i], &v);
		assert(v.nholders > 0 || v.nwaiters > 0);
	}
	for (int i = 0; i < FZ_OWNERS; i++)
		if (locktable_owner_is_waiting(s->owner[i]))
			assert(locktable_wait_blocker(s->lt, s->owner[i], now,
			    &why));
}

static bool
fz_walk_holder(void *arg, const struct lt_holder_view *h)
{
	struct fz_walk	*w = arg;

	assert(w->nh < FZ_ITEMS);
	w->h[w->nh][0] = locktable_owner_id(h->owner);
	w->h[w->nh][1] = h->token;
	w->h[w->nh][2] = (uint64_t)h->mode;
	w->h[w->nh][3] = h->held_ms;
	w->h[w->nh++][4] = h->expires_in_ms;
	return true;
}

static bool
fz_walk_waiter(void *arg, const struct lt_waiter_view *wv)
{
	struct fz_walk	*w = arg;

	assert(w->nw < FZ_ITEMS);
	w->w[w->nw][0] = locktable_owner_id(wv->owner);
	w->w[w->nw][1] = (uint64_t)wv->mode;
	w->w[w->nw][2] = wv->waited_ms;
	w->w[w->nw++][3] = wv->nkeys;
	return true;
}

/* An owner's waiting request, as a string of its keys. */
static bool
fz_wait_key(void *arg, const char *key, size_t keylen)
{
	char	*buf = arg;
	size_t	 n = strlen(buf);

	assert(n + keylen + 2 < 64);
	memcpy(buf + n, key, keylen);
	buf[n + keylen] = ' ';
	buf[n + keylen + 1] = '\0';
	return true;
}

/* The two tables, compared whole: counters, owners, every key. */
static void
fz_compare(struct fz *f)
{
	struct fz_side			*a = &f->side[0], *b = &f->side[1];
	const struct lt_counters	*ca = locktable_counters(a->lt);
	const struct lt_counters	*cb = locktable_counters(b->lt);

	FZ_SAME(ca->keys == cb->keys && ca->held == cb->held &&
	    ca->waiting == cb->waiting && ca->grants == cb->grants);
	FZ_SAME(ca->timeouts == cb->timeouts && ca->cancels == cb->cancels &&
	    ca->busy == cb->busy && ca->deadlocks == cb->deadlocks &&
	    ca->conflicts == cb->conflicts);
	FZ_SAME(ca->releases == cb->releases && ca->expired == cb->expired &&
	    ca->disconnect_releases == cb->disconnect_releases &&
	    ca->max_waiters == cb->max_waiters);
	FZ_SAME(ca->bytes == cb->bytes);
	FZ_SAME(memcmp(&ca->wait_ms, &cb->wait_ms, sizeof(ca->wait_ms)) == 0);
	FZ_SAME(memcmp(&ca->hold_ms, &cb->hold_ms, sizeof(ca->hold_ms)) == 0);
	FZ_SAME(locktable_next_expiry(a->lt) == locktable_next_expiry(b->lt));
	FZ_SAME(a->ngrants == b->ngrants && memcmp(a->grants, b->grants,
	    a->ngrants * sizeof(a->grants[0])) == 0 &&
	    memcmp(a->grant_tokens, b->grant_tokens,
	    a->ngrants * sizeof(a->grant_tokens[0])) == 0);
	a->ngrants = b->ngrants = 0;
	for (int i = 0; i < FZ_OWNERS; i++) {
		char		 wa[64] = "", wb[64] = "";
		uint64_t	 ta = 0, tb = 0;

		FZ_SAME((a->owner[i] == NULL) == (b->owner[i] == NULL));
		if (a->owner[i] == NULL)
			continue;	/* gone at the end */
		FZ_SAME(locktable_owner_nholds(a->owner[i]) ==
		    locktable_owner_nholds(b->owner[i]));
		FZ_SAME(locktable_owner_wait_walk(a->owner[i], fz_wait_key, wa,
		    &ta) == locktable_owner_wait_walk(b->owner[i], fz_wait_key,
		    wb, &tb));
		FZ_SAME(strcmp(wa, wb) == 0 && ta == tb);
	}
	for (int i = 0; i < FZ_KEYS; i++) {
		const char		*key = fz_keys[i];
		const struct lt_key	*ka, *kb;
		struct lt_key_view	 va, vb;
		struct fz_walk		 wa, wb;

		ka = locktable_find(a->lt, key, strlen(key));
		kb = locktable_find(b->lt, key, strlen(key));
		FZ_SAME((ka == NULL) == (kb == NULL));
		if (ka == NULL)
			continue;
		locktable_key_view(ka, &va);
		locktable_key_view(kb, &vb);
		FZ_SAME(va.keylen == vb.keylen && va.limit == vb.limit &&
		    va.nholders == vb.nholders && va.nwaiters == vb.nwaiters &&
		    va.max_waiters == vb.max_waiters &&
		    va.wait_ms_total == vb.wait_ms_total);
		memset(&wa, 0, sizeof(wa));
		memset(&wb, 0, sizeof(wb));
		locktable_key_walk(a->lt, ka, f->now, fz_walk_holder,
		    fz_walk_waiter, &wa);
		locktable_key_walk(b->lt, kb, f->now, fz_walk_holder,
		    fz_walk_waiter, &wb);
		FZ_SAME(memcmp(&wa, &wb, sizeof(wa)) == 0);
	}
}

static void
fz_step(struct fz *f)
{
	uint8_t		 op = fz_byte(f);
	int		 i = fz_byte(f) % FZ_OWNERS;
	uint64_t	 dt;
	size_t		 n[FZ_SIDES];

	switch (op % 9) {
	case 0:
	case 1:
		fz_acquire(f, i);
		break;
	case 2:
		fz_release(f, i, false);
		break;
	case 3:
		for (int k = 0; k < FZ_SIDES; k++)
			n[k] = locktable_release_owner(f->side[k].lt,
			    f->side[k].owner[i], f->now, LT_WHY_UNLOCK);
		FZ_SAME(n[0] == n[1]);
		break;
	case 4:
		for (int k = 0; k < FZ_SIDES; k++) {
			struct fz_side	*s = &f->side[k];

			locktable_owner_free(s->lt, s->owner[i], f->now);
			s->owner[i] = locktable_owner_new(s->lt,
			    (uint64_t)i + 1, NULL);
			assert(s->owner[i] != NULL);
		}
		break;
	case 5:
		for (int k = 0; k < FZ_SIDES; k++)
			n[k] = locktable_withdraw(f->side[k].lt,
			    f->side[k].owner[i], f->now, LT_WHY_TIMEOUT);
		FZ_SAME(n[0] == n[1]);
		break;
	case 6:
		dt = fz_byte(f) % 40;
		f->now += dt;
		for (int k = 0; k < FZ_SIDES; k++) {
			n[k] = locktable_expire(f->side[k].lt, f->now);
			assert(locktable_next_expiry(f->side[k].lt) > f->now);
		}
		FZ_SAME(n[0] == n[1]);
		break;
	case 7:
		fz_release(f, i, true);
		break;
	default:
		for (int k = 0; k < FZ_SIDES; k++)
			fz_views(&f->side[k], f->now);
		break;
	}
	for (int k = 0; k < FZ_SIDES; k++)
		fz_check(&f->side[k]);
	fz_compare(f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz	*f;

	if ((f = calloc(1, sizeof(*f))) == NULL)
		abort();
	f->p = data;
	f->end = data + size;
	f->now = 1000;
	for (int k = 0; k < FZ_SIDES; k++) {
		struct fz_side	*s = &f->side[k];
		struct lt_hooks	 hooks = { fz_granted, fz_token, s, NULL };

		s->range = 1 + size / 2 % 4;
		s->lt = locktable_new(&hooks, size);
		assert(s->lt != NULL);
		locktable_set_short_paths(s->lt, k == 0);
		if (size % 2 == 0)
			locktable_reserve_tokens(s->lt, fz_reserve);
		for (int i = 0; i < FZ_OWNERS; i++) {
			s->owner[i] = locktable_owner_new(s->lt,
			    (uint64_t)i + 1, NULL);
			assert(s->owner[i] != NULL);
		}
	}
	while (f->p < f->end)
		fz_step(f);
	for (int i = 0; i < FZ_OWNERS; i++) {
		for (int k = 0; k < FZ_SIDES; k++) {
			locktable_owner_free(f->side[k].lt,
			    f->side[k].owner[i], f->now);
			f->side[k].owner[i] = NULL;
			fz_check(&f->side[k]);
		}
		fz_compare(f);
	}
	for (int k = 0; k < FZ_SIDES; k++) {
		const struct lt_counters *c = locktable_counters(f->side[k].lt);

		assert(c->keys == 0 && c->held == 0 && c->waiting == 0);
		locktable_free(f->side[k].lt);
	}
	free(f);
	return 0;
}
