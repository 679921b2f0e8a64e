/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fuzz harness for the lock table: the input is decoded into a sequence of
 * table operations (acquire with every option, release, release-all,
 * disconnect and reconnect, timeout, ttl expiry, refresh, views) over a
 * few owners and keys, and the table's invariants are checked after every
 * step, together with what the caller can see: tokens strictly increase,
 * a deferred grant goes only to a waiting owner, and once every owner is
 * gone the table is empty. One-key requests may try the short paths first
 * (locktable_acquire_one(), locktable_release_one()), which must leave
 * what they decline untouched; tokens come one by one from next_token or,
 * for inputs of even size, in reserved ranges of 1 to 4.
 */
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "locktable.h"

#define FZ_OWNERS	6
#define FZ_KEYS		5

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fz {
	const uint8_t		*p, *end;
	struct locktable	*lt;
	struct lt_owner		*owner[FZ_OWNERS];
	uint64_t		 now;
	uint64_t		 last_token;
	uint64_t		 next_token;
	uint64_t		 range;		/* tokens per reserved range */
};

static const char *const fz_keys[FZ_KEYS] = { "a", "b", "c", "key:d", "e" };

static uint8_t
fz_byte(struct fz *f)
{
	return f->p < f->end ? *f->p++ : 0;
}

static void
fz_check(struct fz *f)
{
	const char	*why = locktable_check(f->lt);

	if (why != NULL) {
		fprintf(stderr, "invariant broken: %s\n", why);
		abort();
	}
}

static uint64_t
fz_token(void *arg)
{
	struct fz	*f = arg;

	return ++f->next_token;
}

/* Ranges with a gap of one before each: tokens need not be dense. */
static uint64_t
fz_reserve(void *arg, uint64_t *end)
{
	struct fz	*f = arg;
	uint64_t	 first = f->next_token + 2;

	*end = first + f->range;
	f->next_token = *end - 1;
	return first;
}

/* A short path declined: the counters show no change. */
static void
fz_unchanged(struct fz *f, const struct lt_counters *before)
{
	const struct lt_counters	*c = locktable_counters(f->lt);

	assert(c->keys == before->keys && c->held == before->held &&
	    c->waiting == before->waiting && c->grants == before->grants &&
	    c->releases == before->releases && c->bytes == before->bytes &&
	    c->hold_ms.count == before->hold_ms.count);
	fz_check(f);
}

static void
fz_granted(void *arg, struct lt_owner *o, uint64_t token, uint64_t waited)
{
	struct fz	*f = arg;

	/* The owner was waiting; the hook is told after the grant. */
	assert(!locktable_owner_is_waiting(o));
	assert(token > f->last_token);
	f->last_token = token;
}


static void
fz_pick_keys(struct fz *f, const char **keys, size_t *lens, size_t *n)
{
	*n = 1 + fz_byte(f) % 3;
	for (size_t i = 0; i < *n; i++) {
		keys[i] = fz_keys[fz_byte(f) % FZ_KEYS];
		lens[i] = 0;
		while (keys[i][lens[i]] != '\0')
			lens[i]++;
	}
}

static void
fz_acquire(struct fz *f, struct lt_owner *o)
{
	static const uint32_t	 limits[] = { 1, 1, 2, 3 };
	const char		*keys[3];
	size_t			 lens[3];
	struct lt_acquire	 a = { 0 };
	struct lt_blocker	 why;
	uint8_t			 flags = fz_byte(f);
	uint64_t		 token = 0;
	bool			 granted = false;
	enum kl_err		 err;

	if (locktable_owner_is_waiting(o))
		return;
	fz_pick_keys(f, keys, lens, &a.nkeys);
	a.keys = keys;
	a.keylens = lens;
	a.limit = limits[flags & 3];
	a.mode = (flags & 4) && a.limit == 1 ? LT_SHARED : LT_EXCLUSIVE;
	a.try = (flags & 8) != 0;
	a.max_waiters = (flags & 16) ? (int64_t)(fz_byte(f) % 3) : -1;
	a.ttl_ms = (flags & 32) ? 1 + fz_byte(f) % 50 : 0;
	a.max_holds = (flags & 64) ? 2 : 0;
	if (a.nkeys == 1 && (flags & 128)) {
		struct lt_counters	before = *locktable_counters(f->lt);

		token = locktable_acquire_one(f->lt, o, &a, keys[0], lens[0],
		    f->now);
		if (token != 0) {
			assert(token > f->last_token);
			f->last_token = token;
			assert(!locktable_owner_is_waiting(o));
			return;
		}
		fz_unchanged(f, &before);
	}
	err = locktable_acquire(f->lt, o, &a, f->now, &granted, &token, &why);
	if (err == KL_OK && granted) {
		assert(token > f->last_token);
		f->last_token = token;
	}
	if (err == KL_OK && !granted)
		assert(locktable_owner_is_waiting(o));
}

static void
fz_release(struct fz *f, struct lt_owner *o, bool refresh, bool one)
{
	const char	*keys[3];
	size_t		 lens[3], n, done, bad;

	fz_pick_keys(f, keys, lens, &n);
	if (!refresh && one && n == 1) {
		struct lt_counters	before = *locktable_counters(f->lt);

		if (locktable_release_one(f->lt, o, keys[0], lens[0], f->now))
			return;
		fz_unchanged(f, &before);
	}
	if (refresh)
		(void)locktable_refresh(f->lt, o, keys, lens, n,
		    1 + fz_byte(f) % 50, f->now, &done, &bad);
	else
		(void)locktable_release(f->lt, o, keys, lens, n, f->now,
		    &done, &bad);
}

static void
fz_views(struct fz *f)
{
	const struct lt_key	*hot[4];
	struct lt_blocker	 why;
	struct lt_key_view	 v;
	size_t			 n = locktable_hot_keys(f->lt, hot, 4);

	for (size_t i = 0; i < n; i++) {
		locktable_key_view(hot[i], &v);
		assert(v.nholders > 0 || v.nwaiters > 0);
	}
	for (int i = 0; i < FZ_OWNERS; i++)
		if (locktable_owner_is_waiting(f->owner[i]))
			assert(locktable_wait_blocker(f->lt, f->owner[i],
			    f->now, &why));
}

static void
fz_step(struct fz *f)
{
	uint8_t		 op = fz_byte(f);
	int		 i = fz_byte(f) % FZ_OWNERS;
	struct lt_owner	*o = f->owner[i];

	switch (op % 9) {
	case 0:
	case 1:
		fz_acquire(f, o);
		break;
	case 2:
		fz_release(f, o, false, (op / 9) & 1);
		break;
	case 3:
		(void)locktable_release_owner(f->lt, o, f->now, LT_WHY_UNLOCK);
		break;
	case 4:
		locktable_owner_free(f->lt, o, f->now);
		f->owner[i] = locktable_owner_new(f->lt, (uint64_t)i + 1, NULL);
		assert(f->owner[i] != NULL);
		break;
	case 5:
		(void)locktable_withdraw(f->lt, o, f->now, LT_WHY_TIMEOUT);
		break;
	case 6:
		f->now += fz_byte(f) % 40;
		(void)locktable_expire(f->lt, f->now);
		assert(locktable_next_expiry(f->lt) > f->now);
		break;
	case 7:
		fz_release(f, o, true, false);
		break;
	default:
		fz_views(f);
		break;
	}
	fz_check(f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz		f = { data, data + size, NULL, { NULL }, 1000,
				    0, 0, 1 + size / 2 % 4 };
	struct lt_hooks		hooks = { fz_granted, fz_token, &f };
	const struct lt_counters *c;

	f.lt = locktable_new(&hooks, size);
	assert(f.lt != NULL);
	if (size % 2 == 0)
		locktable_reserve_tokens(f.lt, fz_reserve);
	for (int i = 0; i < FZ_OWNERS; i++) {
		f.owner[i] = locktable_owner_new(f.lt, (uint64_t)i + 1, NULL);
		assert(f.owner[i] != NULL);
	}
	while (f.p < f.end)
		fz_step(&f);
	for (int i = 0; i < FZ_OWNERS; i++) {
		locktable_owner_free(f.lt, f.owner[i], f.now);
		fz_check(&f);
	}
	c = locktable_counters(f.lt);
	assert(c->keys == 0 && c->held == 0 && c->waiting == 0);
	locktable_free(f.lt);
	return 0;
}
