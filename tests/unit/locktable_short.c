/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The short paths of the common LOCK and UNLOCK inside locktable_acquire()
 * and locktable_release(): what they change, on a table that takes them
 * (cl_short_paths = 1); that they change the table exactly as the general
 * path does, by the lock-table fuzzer's differential harness
 * (tests/fuzz/fuzz_locktable.c: two tables, short paths on and off,
 * compared after every step) over a seeded stream of many thousand
 * operations. And tokens from a reserved range
 * (locktable_reserve_tokens()): strictly increasing across ranges, short
 * and general grants and queued ones, one hook call per range.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_locktable.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"

/* The differential harness (tests/fuzz/fuzz_locktable.c). */
int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A plain LOCK of one key. */
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

/* Fills the pool of entries for short keys: a fresh table has none. */
static void
warm(void)
{
	ck_assert_int_eq(cl_lock(8, "w0 w1 w2 w3 w4 w5 w6 w7", 0), GRANTED);
	ck_assert_uint_eq(cl_release_owner(8, LT_WHY_UNLOCK, 0), 8);
}

START_TEST(short_lock_grants_as_the_full_path_does)
{
	struct lt_counters	 before;
	const struct lt_key	*k;
	struct walk_buf		 wb;

	warm();
	cl_short_paths = 1;
	before = *cl_ctr();
	ck_assert_int_eq(cl_lock(1, "k", 5), GRANTED);
	cl_expect_gauges(1, 1, 0);
	ck_assert_uint_eq(cl_ctr()->grants, before.grants + 1);
	ck_assert_uint_eq(kl_hist_count(&cl_ctr()->wait_ms),
	    kl_hist_count(&before.wait_ms) + 1);
	ck_assert_uint_eq(cl_ctr()->wait_ms.counts[0],
	    before.wait_ms.counts[0] + 1);
	ck_assert_uint_gt(cl_ctr()->bytes, before.bytes);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 1);
	EXPECT_KEY("k", "1 |");
	k = cl_find("k");
	ck_assert_ptr_nonnull(k);
	memset(&wb, 0, sizeof(wb));
	locktable_key_walk(cl_lt, k, 5, cl_walk_holder, cl_walk_waiter, &wb);
	ck_assert_uint_eq(wb.nh, 1);
	ck_assert_uint_eq(wb.h[0].token, cl_res_token);
	ck_assert_int_eq(wb.h[0].mode, LT_EXCLUSIVE);
	ck_assert_uint_eq(wb.h[0].expires_in_ms, 0);
	/* It is a lock like any other. */
	ck_assert_int_eq(cl_trylock(2, "k", 5), KL_ERR_LOCKED);
	ck_assert_int_eq(cl_lock(1, "k", 5), KL_ERR_HELD);
	ck_assert_int_eq(cl_lock(2, "k", 5), QUEUED);
	ck_assert_int_eq(cl_unlock(1, "k", 5), KL_OK);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(cl_unlock(2, "k", 5), KL_OK);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(short_lock_in_shared_mode_shares)
{
	warm();
	cl_short_paths = 1;
	ck_assert_int_eq(cl_lock_shared(1, "s", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "s", 0), GRANTED);
	ck_assert_int_eq(cl_trylock(3, "s", 0), KL_ERR_LOCKED);
	EXPECT_KEY("s", "1s 2s |");
	ck_assert_int_eq(cl_release_owner(1, LT_WHY_UNLOCK, 0), 1);
	ck_assert_int_eq(cl_release_owner(2, LT_WHY_UNLOCK, 0), 1);
}
END_TEST

START_TEST(short_lock_leaves_limits_to_the_general_path)
{
	warm();
	cl_short_paths = 1;
	ck_assert_int_eq(cl_lock(2, "p", 0), GRANTED);
	ck_assert_int_eq(cl_acq(2, "q", REQ(.max_holds = 1), 0),
	    KL_ERR_LIMIT);
	ck_assert_int_eq(cl_acq(2, "q", REQ(.max_holds = 2), 0), GRANTED);
	ck_assert_int_eq(cl_lock_limit(3, "sem", 2, 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "sem", 0), KL_ERR_CONFLICT);
	ck_assert_int_eq(cl_acq(1, "t", REQ(.ttl_ms = 10), 0), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 10);
	ck_assert_int_eq(cl_release_owner(1, LT_WHY_UNLOCK, 0), 1);
	ck_assert_int_eq(cl_release_owner(2, LT_WHY_UNLOCK, 0), 2);
	ck_assert_int_eq(cl_release_owner(3, LT_WHY_UNLOCK, 0), 1);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(short_lock_grows_the_table_when_it_must)
{
	char	key[16];

	/* Entries for the pools first, then fill the table past the
	 * point where an insert resizes it: 16 buckets at first. */
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "g%02d", i);
		ck_assert_int_eq(cl_lock(1, key, 0), GRANTED);
	}
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_UNLOCK, 0), 40);
	cl_short_paths = 1;
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "g%02d", i);
		ck_assert_int_eq(cl_lock(2, key, 0), GRANTED);
	}
	cl_expect_gauges(40, 40, 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "g%02d", i);
		ck_assert_int_eq(cl_unlock(2, key, 0), KL_OK);
	}
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(short_unlock_releases_as_the_full_path_does)
{
	struct lt_counters	before;

	warm();
	cl_short_paths = 1;
	ck_assert_int_eq(cl_lock(1, "u", 7), GRANTED);
	before = *cl_ctr();
	/* held 23 ms: the histogram has it, whatever the path */
	ck_assert_int_eq(cl_unlock(1, "u", 30), KL_OK);
	ck_assert_uint_eq(cl_res_n, 1);
	cl_expect_gauges(0, 0, 0);
	ck_assert_uint_eq(cl_ctr()->releases, before.releases + 1);
	ck_assert_uint_eq(kl_hist_count(&cl_ctr()->hold_ms),
	    kl_hist_count(&before.hold_ms) + 1);
	ck_assert_uint_eq(cl_ctr()->hold_ms.counts[0],
	    before.hold_ms.counts[0]);
	ck_assert_uint_eq(cl_ctr()->hold_ms.sum_ms, before.hold_ms.sum_ms + 23);
	ck_assert_uint_lt(cl_ctr()->bytes, before.bytes);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 0);
	ck_assert_ptr_null(cl_find("u"));
	ck_assert_int_eq(cl_unlock(1, "u", 30), KL_ERR_NOTHELD);
	ck_assert_uint_eq(cl_res_bad, 0);
}
END_TEST

START_TEST(short_unlock_leaves_the_rest_to_the_general_path)
{
	char	key[16];

	warm();
	cl_short_paths = 1;
	/* somebody waits: the release grants them */
	ck_assert_int_eq(cl_lock(2, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "x", 0), QUEUED);
	ck_assert_int_eq(cl_unlock(2, "x", 0), KL_OK);
	EXPECT_GRANTS("3");
	ck_assert_int_eq(cl_unlock(3, "x", 1), KL_OK);
	/* a ttl */
	ck_assert_int_eq(cl_acq(1, "t", REQ(.ttl_ms = 50), 0), GRANTED);
	ck_assert_int_eq(cl_unlock(1, "t", 0), KL_OK);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), UINT64_MAX);
	/* a shared key with two holders */
	ck_assert_int_eq(cl_lock_shared(1, "sh", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "sh", 0), GRANTED);
	ck_assert_int_eq(cl_unlock(1, "sh", 0), KL_OK);
	EXPECT_KEY("sh", "2s |");
	ck_assert_int_eq(cl_unlock(2, "sh", 0), KL_OK);
	/* an owner of more keys than it scans: found through the entry */
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "m%d", i);
		ck_assert_int_eq(cl_lock(4, key, 0), GRANTED);
	}
	ck_assert_int_eq(cl_unlock(4, "m3", 0), KL_OK);
	ck_assert_ptr_null(cl_find("m3"));
	ck_assert_uint_eq(cl_release_owner(4, LT_WHY_UNLOCK, 0), 4);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

/*
 * The differential harness over a seeded stream: 200 inputs of 2,000
 * random bytes, about 130,000 operations, each run on a table with its
 * short paths and one without and the two compared after every step (it
 * aborts on the first difference).
 */
START_TEST(short_paths_change_what_the_general_path_changes)
{
	static uint8_t	buf[2000];
	uint64_t	x = 0x9e3779b97f4a7c15ULL;

	for (int run = 0; run < 200; run++) {
		for (size_t i = 0; i < sizeof(buf); i++) {
			/* xorshift64 */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = (uint8_t)(x >> 32);
		}
		/* odd and even sizes: tokens one by one, then by range */
		ck_assert_int_eq(LLVMFuzzerTestOneInput(buf,
		    sizeof(buf) - (size_t)(run & 1)), 0);
	}
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
	struct lt_hooks		 h = { rt_granted, NULL, &r, NULL };
	struct locktable	*lt = locktable_new(&h, 7);
	struct lt_owner		*o1, *o2;

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
		/* short, general and queued grants take turns */
		locktable_set_short_paths(lt, i % 2 == 0);
		ck_assert_uint_gt(rt_full(lt, o1, "a"), 0);
		ck_assert_uint_eq(rt_full(lt, o2, "a"), 0);	/* queued */
		rt_release(lt, o1, "a");			/* grants o2 */
		rt_release(lt, o2, "a");
	}
	/* 61 grants in ranges of 3: 100-102, 110-112, ... */
	ck_assert_uint_eq(r.calls, (61 + 2) / 3);
	ck_assert_uint_eq(rt_last, 100 + (uint64_t)(r.calls - 1) * 10 +
	    (61 - 1) % 3);
	locktable_owner_free(lt, o1, 0);
	locktable_owner_free(lt, o2, 0);
	locktable_free(lt);
}
END_TEST

START_TEST(without_a_hook_both_paths_count_from_1)
{
	struct locktable	*lt = locktable_new(NULL, 1);
	struct lt_owner		*o = locktable_owner_new(lt, 1, NULL);

	rt_last = 0;
	locktable_set_short_paths(lt, false);
	ck_assert_uint_eq(rt_full(lt, o, "a"), 1);
	rt_release(lt, o, "a");
	locktable_set_short_paths(lt, true);
	ck_assert_uint_eq(rt_full(lt, o, "a"), 2);
	rt_release(lt, o, "a");
	locktable_set_short_paths(lt, false);
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

START_TEST(with_next_token_every_grant_asks_the_hook)
{
	uint64_t		 next = 500;
	struct lt_hooks		 h = { NULL, next_of, &next, NULL };
	struct locktable	*lt = locktable_new(&h, 1);
	struct lt_owner		*o = locktable_owner_new(lt, 1, NULL);

	rt_last = 0;
	for (uint64_t t = 500; t < 510; t++) {
		locktable_set_short_paths(lt, t % 2 == 0);
		ck_assert_uint_eq(rt_full(lt, o, "a"), t);
		rt_release(lt, o, "a");
	}
	locktable_owner_free(lt, o, 0);
	locktable_free(lt);
}
END_TEST

void
cl_add_short(Suite *s)
{
	TCase	*tc = cl_tcase(s, "short paths");

	tcase_add_test(tc, short_lock_grants_as_the_full_path_does);
	tcase_add_test(tc, short_lock_in_shared_mode_shares);
	tcase_add_test(tc, short_lock_leaves_limits_to_the_general_path);
	tcase_add_test(tc, short_lock_grows_the_table_when_it_must);
	tcase_add_test(tc, short_unlock_releases_as_the_full_path_does);
	tcase_add_test(tc, short_unlock_leaves_the_rest_to_the_general_path);
	tcase_add_test(tc, short_paths_change_what_the_general_path_changes);
	tcase_add_test(tc, reserved_tokens_rise_across_ranges_and_paths);
	tcase_add_test(tc, without_a_hook_both_paths_count_from_1);
	tcase_add_test(tc, with_next_token_every_grant_asks_the_hook);
}
