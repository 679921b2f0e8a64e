/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The short paths of the common LOCK and UNLOCK (locktable_acquire_one(),
 * locktable_release_one()): what they do is what the full paths would do,
 * and what they decline they leave untouched, for the full paths to
 * decide. And tokens from a reserved range (locktable_reserve_tokens()):
 * strictly increasing across ranges, short and full grants and queued
 * ones, one hook call per range.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check_locktable.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"

/* A plain LOCK's invariant parts, as the commands prepare them. */
static struct lt_acquire
plain(size_t max_holds)
{
	struct lt_acquire	a;

	memset(&a, 0, sizeof(a));
	a.mode = LT_EXCLUSIVE;
	a.limit = 1;
	a.max_waiters = -1;
	a.max_holds = max_holds;
	return a;
}

static uint64_t
lock_one(struct locktable *lt, struct lt_owner *o, const struct lt_acquire *a,
    const char *key, uint64_t now)
{
	uint64_t	t = locktable_acquire_one(lt, o, a, key, strlen(key),
			    now);

	ck_assert_ptr_null(locktable_check(lt));
	return t;
}

static bool
unlock_one(struct locktable *lt, struct lt_owner *o, const char *key,
    uint64_t now)
{
	bool	b = locktable_release_one(lt, o, key, strlen(key), now);

	ck_assert_ptr_null(locktable_check(lt));
	return b;
}

/* Declined: 0 and nothing changed. */
static void
expect_declined(int i, const struct lt_acquire *a, const char *key,
    size_t len, uint64_t now)
{
	struct lt_counters	before = *cl_ctr();

	ck_assert_uint_eq(locktable_acquire_one(cl_lt, cl_ow[i], a, key, len,
	    now), 0);
	CHECK_TABLE();
	cl_expect_unchanged(&before);
}

static void
expect_kept(int i, const char *key, uint64_t now)
{
	struct lt_counters	before = *cl_ctr();

	ck_assert(!unlock_one(cl_lt, cl_ow[i], key, now));
	CHECK_TABLE();
	cl_expect_unchanged(&before);
}

/* Fills the pool of entries for short keys: a fresh table has none. */
static void
warm(void)
{
	ck_assert_int_eq(cl_lock(8, "w0 w1 w2 w3 w4 w5 w6 w7", 0), GRANTED);
	ck_assert_uint_eq(cl_release_owner(8, LT_WHY_UNLOCK, 0), 8);
}

START_TEST(short_lock_grants_as_the_full_path_does)
{
	struct lt_acquire	 a = plain(0);
	struct lt_counters	 before;
	const struct lt_key	*k;
	struct walk_buf		 wb;
	uint64_t		 t;

	warm();
	before = *cl_ctr();
	t = lock_one(cl_lt, cl_ow[1], &a, "k", 5);
	ck_assert_uint_gt(t, cl_last_tok);
	cl_last_tok = t;
	cl_expect_gauges(1, 1, 0);
	ck_assert_uint_eq(cl_ctr()->grants, before.grants + 1);
	ck_assert_uint_eq(cl_ctr()->wait_ms.count, before.wait_ms.count + 1);
	ck_assert_uint_eq(cl_ctr()->wait_ms.counts[0],
	    before.wait_ms.counts[0] + 1);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 1);
	EXPECT_KEY("k", "1 |");
	k = cl_find("k");
	ck_assert_ptr_nonnull(k);
	memset(&wb, 0, sizeof(wb));
	locktable_key_walk(cl_lt, k, 5, cl_walk_holder, cl_walk_waiter, &wb);
	ck_assert_uint_eq(wb.nh, 1);
	ck_assert_uint_eq(wb.h[0].token, t);
	ck_assert_int_eq(wb.h[0].mode, LT_EXCLUSIVE);
	ck_assert_uint_eq(wb.h[0].expires_in_ms, 0);
	/* It is a lock like any other: the full paths see it. */
	ck_assert_int_eq(cl_trylock(2, "k", 5), KL_ERR_LOCKED);
	ck_assert_int_eq(cl_lock(1, "k", 5), KL_ERR_HELD);
	ck_assert_int_eq(cl_lock(2, "k", 5), QUEUED);
	ck_assert_int_eq(cl_unlock(1, "k", 5), KL_OK);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(cl_unlock(2, "k", 5), KL_OK);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(short_lock_in_shared_mode_shares_with_the_full_path)
{
	struct lt_acquire	a = plain(0);

	warm();
	a.mode = LT_SHARED;
	ck_assert_uint_gt(lock_one(cl_lt, cl_ow[1], &a, "s", 0), 0);
	ck_assert_int_eq(cl_lock_shared(2, "s", 0), GRANTED);
	ck_assert_int_eq(cl_trylock(3, "s", 0), KL_ERR_LOCKED);
	EXPECT_KEY("s", "1s 2s |");
	ck_assert_int_eq(cl_release_owner(1, LT_WHY_UNLOCK, 0), 1);
	ck_assert_int_eq(cl_release_owner(2, LT_WHY_UNLOCK, 0), 1);
}
END_TEST

START_TEST(short_lock_declines_what_it_cannot_grant_at_once)
{
	struct lt_acquire	 a = plain(0), b;
	char			 longkey[KL_KEY_MAX + 2];

	/* a fresh table's pools are empty: the first entry is malloc'd */
	expect_declined(1, &a, "p", 1, 0);
	warm();
	/* held: by another owner, by the owner itself */
	ck_assert_int_eq(cl_lock(2, "held", 0), GRANTED);
	expect_declined(1, &a, "held", 4, 0);
	expect_declined(2, &a, "held", 4, 0);
	/* the owner is waiting */
	ck_assert_int_eq(cl_lock(1, "held", 0), QUEUED);
	expect_declined(1, &a, "p", 1, 0);
	ck_assert(cl_withdraw(1, LT_WHY_TIMEOUT, 0));
	/* keys of no valid length */
	memset(longkey, 'x', sizeof(longkey));
	expect_declined(1, &a, "p", 0, 0);
	expect_declined(1, &a, longkey, KL_KEY_MAX + 1, 0);
	/* max_holds reached: LIMIT is the full path's */
	b = plain(1);
	expect_declined(2, &b, "p", 1, 0);
	ck_assert_int_eq(cl_acq(2, "p", REQ(.max_holds = 1), 0),
	    KL_ERR_LIMIT);
	b = plain(2);
	ck_assert_uint_gt(lock_one(cl_lt, cl_ow[2], &b, "p", 0), 0);
	ck_assert_int_eq(cl_unlock(2, "p", 0), KL_OK);
	/* not a plain lock */
	b = plain(0);
	b.limit = 2;
	expect_declined(1, &b, "p", 1, 0);
	b = plain(0);
	b.ttl_ms = 10;
	expect_declined(1, &b, "p", 1, 0);
	b = plain(0);
	b.mode = (enum lt_mode)7;
	expect_declined(1, &b, "p", 1, 0);
	/* an entry in use as a semaphore */
	ck_assert_int_eq(cl_lock_limit(3, "sem", 2, 0), GRANTED);
	expect_declined(1, &a, "sem", 3, 0);
	ck_assert_int_eq(cl_lock(1, "sem", 0), KL_ERR_CONFLICT);
	ck_assert_int_eq(cl_release_owner(3, LT_WHY_UNLOCK, 0), 1);
	ck_assert_int_eq(cl_release_owner(2, LT_WHY_UNLOCK, 0), 1);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(short_lock_declines_when_the_table_must_grow)
{
	struct lt_acquire	a = plain(0);
	char			key[16];
	size_t			n = 0, declined = 0;

	/* Entries for the pools first, then fill the table past the
	 * point where an insert would resize it. */
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "g%02d", i);
		ck_assert_int_eq(cl_lock(1, key, 0), GRANTED);
	}
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_UNLOCK, 0), 40);
	for (int i = 0; i < 40; i++) {
		uint64_t	t;

		snprintf(key, sizeof(key), "g%02d", i);
		if ((t = lock_one(cl_lt, cl_ow[2], &a, key, 0)) == 0) {
			declined++;
			ck_assert_int_eq(cl_lock(2, key, 0), GRANTED);
		} else {
			ck_assert_uint_gt(t, cl_last_tok);
			cl_last_tok = t;
		}
		n++;
	}
	/* 16 buckets at first: the 17th key grows the table, and so on */
	ck_assert_uint_ge(declined, 1);
	ck_assert_uint_lt(declined, n);
	cl_expect_gauges(40, 40, 0);
	ck_assert_uint_eq(cl_release_owner(2, LT_WHY_UNLOCK, 0), 40);
}
END_TEST

START_TEST(short_unlock_releases_as_the_full_path_does)
{
	struct lt_counters	before;

	warm();
	ck_assert_int_eq(cl_lock(1, "u", 7), GRANTED);
	before = *cl_ctr();
	ck_assert(unlock_one(cl_lt, cl_ow[1], "u", 7));
	cl_expect_gauges(0, 0, 0);
	ck_assert_uint_eq(cl_ctr()->releases, before.releases + 1);
	ck_assert_uint_eq(cl_ctr()->hold_ms.count, before.hold_ms.count + 1);
	ck_assert_uint_eq(cl_ctr()->hold_ms.counts[0],
	    before.hold_ms.counts[0] + 1);
	ck_assert_uint_lt(cl_ctr()->bytes, before.bytes);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 0);
	ck_assert_ptr_null(cl_find("u"));
	/* gone: the next UNLOCK is the full path's NOTHELD */
	expect_kept(1, "u", 7);
	ck_assert_int_eq(cl_unlock(1, "u", 7), KL_ERR_NOTHELD);
}
END_TEST

START_TEST(short_unlock_keeps_what_it_cannot_release_at_once)
{
	char	key[16];

	warm();
	/* not held, held by another */
	expect_kept(1, "x", 0);
	ck_assert_int_eq(cl_lock(2, "x", 0), GRANTED);
	expect_kept(1, "x", 0);
	/* somebody waits: the release grants them, the full path's */
	ck_assert_int_eq(cl_lock(3, "x", 0), QUEUED);
	expect_kept(2, "x", 0);
	ck_assert_int_eq(cl_unlock(2, "x", 0), KL_OK);
	EXPECT_GRANTS("3");
	/* held a millisecond or more: the histogram's full path */
	expect_kept(3, "x", 1);
	ck_assert_int_eq(cl_unlock(3, "x", 1), KL_OK);
	/* a ttl */
	ck_assert_int_eq(cl_acq(1, "t", REQ(.ttl_ms = 50), 0), GRANTED);
	expect_kept(1, "t", 0);
	ck_assert_int_eq(cl_unlock(1, "t", 0), KL_OK);
	/* a shared key with two holders */
	ck_assert_int_eq(cl_lock_shared(1, "sh", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "sh", 0), GRANTED);
	expect_kept(1, "sh", 0);
	expect_kept(2, "sh", 0);
	ck_assert_int_eq(cl_unlock(1, "sh", 0), KL_OK);
	ck_assert_int_eq(cl_unlock(2, "sh", 0), KL_OK);
	/* an owner of more keys than it scans */
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "m%d", i);
		ck_assert_int_eq(cl_lock(4, key, 0), GRANTED);
	}
	expect_kept(4, "m0", 0);
	ck_assert_uint_eq(cl_release_owner(4, LT_WHY_UNLOCK, 0), 5);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

/* ---- tokens from a reserved range ---- */

struct ranges {
	uint64_t	next;		/* the next range starts here */
	uint64_t	size;
	unsigned	calls;
};

/* Ranges of r->size tokens with a gap of 7 between them. */
static uint64_t
reserve_range(void *arg, uint64_t *end)
{
	struct ranges	*r = arg;
	uint64_t	 first = r->next;

	*end = first + r->size;
	r->next = *end + 7;
	r->calls++;
	return first;
}

static uint64_t	rt_last;

static void
rt_granted(void *arg, struct lt_owner *o, uint64_t token, uint64_t waited)
{
	(void)arg;
	(void)o;
	(void)waited;
	ck_assert_uint_gt(token, rt_last);
	rt_last = token;
}

static uint64_t
rt_full(struct locktable *lt, struct lt_owner *o, const char *key)
{
	struct lt_acquire	a = plain(0);
	size_t			len = strlen(key);
	bool			granted = false;
	uint64_t		token = 0;

	a.keys = &key;
	a.keylens = &len;
	a.nkeys = 1;
	ck_assert_int_eq(locktable_acquire(lt, o, &a, 0, &granted, &token,
	    NULL), KL_OK);
	ck_assert_ptr_null(locktable_check(lt));
	if (!granted)
		return 0;
	ck_assert_uint_gt(token, rt_last);
	rt_last = token;
	return token;
}

static void
rt_release(struct locktable *lt, struct lt_owner *o, const char *key)
{
	size_t	len = strlen(key), n = 0, bad = 0;

	ck_assert_int_eq(locktable_release(lt, o, &key, &len, 1, 0, &n, &bad),
	    KL_OK);
	ck_assert_uint_eq(n, 1);
	ck_assert_ptr_null(locktable_check(lt));
}

START_TEST(reserved_tokens_rise_across_ranges_and_paths)
{
	struct ranges		 r = { 100, 3, 0 };
	struct lt_hooks		 h = { rt_granted, NULL, &r };
	struct lt_acquire	 a = plain(0);
	struct locktable	*lt = locktable_new(&h, 7);
	struct lt_owner		*o1, *o2;
	uint64_t		 t;
	unsigned		 shorts = 0;

	ck_assert_ptr_nonnull(lt);
	locktable_reserve_tokens(lt, reserve_range);
	o1 = locktable_owner_new(lt, 1, NULL);
	o2 = locktable_owner_new(lt, 2, NULL);
	rt_last = 0;
	/* nothing is reserved before the first grant */
	ck_assert_uint_eq(r.calls, 0);
	ck_assert_uint_eq(rt_full(lt, o1, "a"), 100);
	ck_assert_uint_eq(r.calls, 1);
	rt_release(lt, o1, "a");
	for (int i = 0; i < 30; i++) {
		/* short, full and queued grants take turns */
		if ((t = lock_one(lt, o1, &a, "a", 0)) != 0) {
			ck_assert_uint_gt(t, rt_last);
			rt_last = t;
			shorts++;
		} else
			ck_assert_uint_gt(rt_full(lt, o1, "a"), 0);
		ck_assert_uint_eq(rt_full(lt, o2, "a"), 0);	/* queued */
		rt_release(lt, o1, "a");			/* grants o2 */
		rt_release(lt, o2, "a");
	}
	/* 61 grants in ranges of 3: 100-102, 110-112, ... */
	ck_assert_uint_eq(r.calls, (61 + 2) / 3);
	ck_assert_uint_eq(rt_last, 100 + (uint64_t)(r.calls - 1) * 10 +
	    (61 - 1) % 3);
	/* the short path declines only at the end of a range */
	ck_assert_uint_ge(shorts, 10);
	ck_assert_uint_lt(shorts, 30);
	locktable_owner_free(lt, o1, 0);
	locktable_owner_free(lt, o2, 0);
	locktable_free(lt);
}
END_TEST

START_TEST(without_a_hook_both_paths_count_from_1)
{
	struct lt_acquire	 a = plain(0);
	struct locktable	*lt = locktable_new(NULL, 1);
	struct lt_owner		*o = locktable_owner_new(lt, 1, NULL);

	rt_last = 0;
	ck_assert_uint_eq(rt_full(lt, o, "a"), 1);
	rt_release(lt, o, "a");
	ck_assert_uint_eq(lock_one(lt, o, &a, "a", 0), 2);
	ck_assert(unlock_one(lt, o, "a", 0));
	ck_assert_uint_eq(rt_full(lt, o, "b"), 3);
	locktable_owner_free(lt, o, 0);
	locktable_free(lt);
}
END_TEST

static uint64_t
next_of(void *arg)
{
	uint64_t	*next = arg;

	return (*next)++;
}

START_TEST(with_next_token_the_short_path_declines)
{
	uint64_t		 next = 500;
	struct lt_acquire	 a = plain(0);
	struct lt_hooks		 h = { NULL, next_of, &next };
	struct locktable	*lt = locktable_new(&h, 1);
	struct lt_owner		*o = locktable_owner_new(lt, 1, NULL);

	rt_last = 0;
	ck_assert_uint_eq(rt_full(lt, o, "a"), 500);
	rt_release(lt, o, "a");
	/* a token per grant means a call per grant: the full path's */
	ck_assert_uint_eq(lock_one(lt, o, &a, "a", 0), 0);
	ck_assert_uint_eq(rt_full(lt, o, "a"), 501);
	ck_assert(unlock_one(lt, o, "a", 0));
	locktable_owner_free(lt, o, 0);
	locktable_free(lt);
}
END_TEST

void
cl_add_short(Suite *s)
{
	TCase	*tc = cl_tcase(s, "short paths");

	tcase_add_test(tc, short_lock_grants_as_the_full_path_does);
	tcase_add_test(tc, short_lock_in_shared_mode_shares_with_the_full_path);
	tcase_add_test(tc, short_lock_declines_what_it_cannot_grant_at_once);
	tcase_add_test(tc, short_lock_declines_when_the_table_must_grow);
	tcase_add_test(tc, short_unlock_releases_as_the_full_path_does);
	tcase_add_test(tc, short_unlock_keeps_what_it_cannot_release_at_once);
	tcase_add_test(tc, reserved_tokens_rise_across_ranges_and_paths);
	tcase_add_test(tc, without_a_hook_both_paths_count_from_1);
	tcase_add_test(tc, with_next_token_the_short_path_declines);
}
