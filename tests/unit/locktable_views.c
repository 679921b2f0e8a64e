/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the table reports: counters and the wait histogram, tokens, the
 * blocker of a wait, hot keys, key views and walks.
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
#include "util.h"

/* counters */

static void
expect_hist(const struct kl_hist *got, const struct kl_hist *want,
    const char *what)
{
	ck_assert_msg(kl_hist_count(got) == kl_hist_count(want),
	    "%s count %ju, want %ju", what, (uintmax_t)kl_hist_count(got),
	    (uintmax_t)kl_hist_count(want));
	ck_assert_msg(got->sum_ms == want->sum_ms, "%s sum %ju, want %ju",
	    what, (uintmax_t)got->sum_ms, (uintmax_t)want->sum_ms);
	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++)
		ck_assert_msg(got->counts[i] == want->counts[i],
		    "%s bucket %zu: %ju, want %ju", what, i,
		    (uintmax_t)got->counts[i], (uintmax_t)want->counts[i]);
}

START_TEST(counters_match)
{
	struct kl_hist	wait = { 0 }, hold = { 0 };
	const struct lt_counters *c;

	ck_assert_int_eq(cl_lock(1, "a b", 0), GRANTED);	/* grant 1 */
	kl_hist_add(&wait, 0);
	ck_assert_int_eq(cl_lock(2, "a", 5), QUEUED);
	ck_assert_int_eq(cl_lock(3, "c", 10), GRANTED);	/* grant 2 */
	kl_hist_add(&wait, 0);
	ck_assert_int_eq(cl_unlock(1, "a b", 20), KL_OK);	/* grant 3 */
	kl_hist_add(&hold, 20);
	kl_hist_add(&hold, 20);
	kl_hist_add(&wait, 15);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(cl_acq(4, "a", REQ(.has_mw = true, .mw = 0), 25),
	    KL_ERR_BUSY);
	ck_assert_int_eq(cl_lock_limit(4, "a", 2, 26), KL_ERR_CONFLICT);
	ck_assert_int_eq(cl_lock(4, "a", 30), QUEUED);
	ck_assert(cl_withdraw(4, LT_WHY_TIMEOUT, 40));
	ck_assert_int_eq(cl_lock(2, "c", 41), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 41), KL_ERR_DEADLOCK);
	ck_assert_int_eq(cl_acq(5, "d", REQ(.ttl_ms = 10), 50), GRANTED);
	kl_hist_add(&wait, 0);
	ck_assert_uint_eq(cl_expire(60), 1);
	kl_hist_add(&hold, 10);
	ck_assert_uint_eq(cl_release_owner(3, LT_WHY_DISCONNECT, 70), 1);
	kl_hist_add(&hold, 60);
	kl_hist_add(&wait, 29);
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(cl_release_owner(2, LT_WHY_UNLOCK, 80), 2);
	kl_hist_add(&hold, 60);
	kl_hist_add(&hold, 10);
	ck_assert_int_eq(cl_lock(7, "y", 80), GRANTED);
	kl_hist_add(&wait, 0);
	ck_assert_int_eq(cl_trylock(6, "y", 85), KL_ERR_LOCKED);
	ck_assert_int_eq(cl_unlock(7, "y", 3080), KL_OK);
	kl_hist_add(&hold, 3000);

	c = cl_ctr();
	ck_assert_uint_eq(c->grants, 6);
	ck_assert_uint_eq(c->releases, 5);
	ck_assert_uint_eq(c->expired, 1);
	ck_assert_uint_eq(c->disconnect_releases, 1);
	ck_assert_uint_eq(c->timeouts, 1);
	ck_assert_uint_eq(c->busy, 1);
	ck_assert_uint_eq(c->deadlocks, 1);
	ck_assert_uint_eq(c->conflicts, 1);
	ck_assert_uint_eq(c->max_waiters, 1);
	cl_expect_gauges(0, 0, 0);
	expect_hist(&c->wait_ms, &wait, "wait_ms");
	expect_hist(&c->hold_ms, &hold, "hold_ms");
}
END_TEST

START_TEST(max_waiters_counter_keeps_the_peak)
{
	struct walk_buf			wb;
	const struct lt_key		*k;
	struct lt_key_view		v;

	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(4, "a b", 0), QUEUED);
	ck_assert_uint_eq(cl_ctr()->max_waiters, 3);
	ck_assert(cl_withdraw(2, LT_WHY_TIMEOUT, 1));
	ck_assert(cl_withdraw(3, LT_WHY_TIMEOUT, 1));
	ck_assert_uint_eq(cl_ctr()->max_waiters, 3);
	ck_assert_ptr_nonnull(k = cl_find("a"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.max_waiters, 3);
	ck_assert_uint_eq(v.nwaiters, 1);
	ck_assert_ptr_nonnull(k = cl_find("b"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.max_waiters, 1);
	ck_assert_str_eq(cl_key_state("a", 1, &wb), "1 | 4");
	ck_assert_uint_eq(cl_ctr()->waiting, 1);
}
END_TEST

START_TEST(shutdown_and_locked_count_nothing)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert(cl_withdraw(2, LT_WHY_SHUTDOWN, 1));
	ck_assert_int_eq(cl_trylock(2, "a", 1), KL_ERR_LOCKED);
	ck_assert_uint_eq(cl_ctr()->timeouts, 0);
	ck_assert_uint_eq(cl_ctr()->busy, 0);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
	ck_assert_uint_eq(cl_ctr()->grants, 1);
	ck_assert_uint_eq(kl_hist_count(&cl_ctr()->wait_ms), 1);
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_SHUTDOWN, 2), 1);
	ck_assert_uint_eq(cl_ctr()->releases, 0);
	ck_assert_uint_eq(cl_ctr()->disconnect_releases, 0);
	ck_assert_uint_eq(cl_ctr()->expired, 0);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(tokens_increase_across_grants)
{
	uint64_t	t1, t2;

	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	t1 = cl_res_token;
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "b", 0), GRANTED);
	t2 = cl_res_token;
	ck_assert_uint_gt(t2, t1);
	ck_assert_int_eq(cl_unlock(1, "a", 1), KL_OK);
	ck_assert_uint_eq(cl_ngrants, 1);
	ck_assert_uint_gt(cl_grants[0].token, t2);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(cl_lock(1, "a", 2), QUEUED);
	ck_assert_int_eq(cl_lock(4, "c", 3), GRANTED);
	/* one token per grant, none for anything else */
	ck_assert_uint_eq(cl_res_token, 4);
}
END_TEST

/* views */

START_TEST(blocker_names_longest_holder)
{
	struct lt_blocker	why;

	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 10), GRANTED);
	ck_assert_int_eq(cl_trylock(3, "a", 100), KL_ERR_LOCKED);
	ck_assert_str_eq(cl_res_key, "a");
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_uint_eq(cl_res_why.held_ms, 100);
	ck_assert_uint_eq(cl_res_why.nholders, 2);
	ck_assert_uint_eq(cl_res_why.nwaiters, 0);

	ck_assert(!locktable_wait_blocker(cl_lt, cl_ow[3], 100, &why));
	ck_assert_int_eq(cl_lock(3, "a", 100), QUEUED);
	memset(&why, 0, sizeof(why));
	ck_assert(locktable_wait_blocker(cl_lt, cl_ow[3], 150, &why));
	ck_assert_uint_eq(why.keylen, 1);
	ck_assert(memcmp(why.key, "a", 1) == 0);
	ck_assert_ptr_eq(why.holder, cl_ow[1]);
	ck_assert_uint_eq(why.held_ms, 150);
	ck_assert_uint_eq(why.nholders, 2);
	ck_assert_uint_eq(why.nwaiters, 1);
	ck_assert_int_eq(cl_unlock(1, "a", 160), KL_OK);
	ck_assert(locktable_wait_blocker(cl_lt, cl_ow[3], 170, &why));
	ck_assert_ptr_eq(why.holder, cl_ow[2]);
	ck_assert_uint_eq(why.held_ms, 160);
	ck_assert_uint_eq(why.nholders, 1);

	/* the first key of the request that blocks it */
	ck_assert_int_eq(cl_lock(4, "c", 200), GRANTED);
	ck_assert_int_eq(cl_trylock(5, "b c", 210), KL_ERR_LOCKED);
	ck_assert_str_eq(cl_res_key, "c");
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[4]);
	ck_assert_uint_eq(cl_res_why.held_ms, 10);
}
END_TEST

START_TEST(blocker_is_null_when_only_requests_ahead_block)
{
	struct lt_blocker	why;

	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_acq(3, "a", REQ(.mode = LT_SHARED, .try = true), 5),
	    KL_ERR_LOCKED);
	ck_assert_ptr_null(cl_res_why.holder);
	ck_assert_uint_eq(cl_res_why.nholders, 1);
	ck_assert_uint_eq(cl_res_why.nwaiters, 1);
	ck_assert_int_eq(cl_lock_shared(3, "a", 5), QUEUED);
	ck_assert(locktable_wait_blocker(cl_lt, cl_ow[3], 6, &why));
	ck_assert_ptr_null(why.holder);
	ck_assert(locktable_wait_blocker(cl_lt, cl_ow[2], 6, &why));
	ck_assert_ptr_eq(why.holder, cl_ow[1]);
	ck_assert_uint_eq(why.held_ms, 6);
}
END_TEST

static const char *
view_name(const struct lt_key *k, size_t *nwaiters)
{
	static char		buf[KL_KEY_MAX + 1];
	struct lt_key_view	v;

	locktable_key_view(k, &v);
	memcpy(buf, v.key, v.keylen);
	buf[v.keylen] = '\0';
	*nwaiters = v.nwaiters;
	return buf;
}

START_TEST(hot_keys_most_waiters_first)
{
	const struct lt_key	*out[10];
	size_t			 n, nw;

	ck_assert_uint_eq(locktable_hot_keys(cl_lt, out, 10), 0);
	ck_assert_int_eq(cl_lock(1, "a b c d", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(6, "d", 0), QUEUED);
	ck_assert_int_eq(cl_lock(4, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(5, "b", 0), QUEUED);
	ck_assert_int_eq(cl_lock(7, "d", 0), QUEUED);

	n = locktable_hot_keys(cl_lt, out, 10);
	ck_assert_uint_eq(n, 4);
	ck_assert_str_eq(view_name(out[0], &nw), "a");
	ck_assert_uint_eq(nw, 3);
	ck_assert_str_eq(view_name(out[1], &nw), "d");
	ck_assert_uint_eq(nw, 2);
	ck_assert_str_eq(view_name(out[2], &nw), "b");
	ck_assert_uint_eq(nw, 1);
	ck_assert_str_eq(view_name(out[3], &nw), "c");
	ck_assert_uint_eq(nw, 0);

	ck_assert_uint_eq(locktable_hot_keys(cl_lt, out, 2), 2);
	ck_assert_str_eq(view_name(out[0], &nw), "a");
	ck_assert_str_eq(view_name(out[1], &nw), "d");

	ck_assert(cl_withdraw(2, LT_WHY_TIMEOUT, 1));
	ck_assert(cl_withdraw(3, LT_WHY_TIMEOUT, 1));
	ck_assert_uint_eq(locktable_hot_keys(cl_lt, out, 1), 1);
	ck_assert_str_eq(view_name(out[0], &nw), "d");
	ck_assert_uint_eq(locktable_hot_keys(cl_lt, out, 0), 0);
}
END_TEST

START_TEST(key_view_and_walk_report_holders_and_waiters)
{
	struct walk_buf			wb;
	const struct lt_key		*k;
	struct lt_key_view		v;
	uint64_t			t1;

	ck_assert_ptr_null(cl_find("a"));
	ck_assert_int_eq(cl_acq(1, "a", REQ(.limit = 3, .ttl_ms = 1000), 100),
	    GRANTED);
	t1 = cl_res_token;
	ck_assert_int_eq(cl_lock_limit(2, "a", 3, 110), GRANTED);
	ck_assert_int_eq(cl_lock_limit(3, "a", 3, 120), GRANTED);
	ck_assert_int_eq(cl_acq(4, "a b", REQ(.limit = 3), 130), QUEUED);
	ck_assert_ptr_nonnull(k = cl_find("a"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.limit, 3);
	ck_assert_uint_eq(v.nholders, 3);
	ck_assert_uint_eq(v.nwaiters, 1);
	ck_assert_uint_eq(v.max_waiters, 1);
	ck_assert_uint_eq(v.wait_ms_total, 0);
	ck_assert_str_eq(cl_key_state("a", 200, &wb), "1 2 3 | 4");
	ck_assert_uint_eq(wb.h[0].token, t1);
	ck_assert_int_eq(wb.h[0].mode, LT_EXCLUSIVE);
	ck_assert_uint_eq(wb.h[0].held_ms, 100);
	ck_assert_uint_eq(wb.h[0].expires_in_ms, 900);
	ck_assert_uint_eq(wb.h[1].held_ms, 90);
	ck_assert_uint_eq(wb.h[1].expires_in_ms, 0);
	ck_assert_uint_gt(wb.h[1].token, t1);
	ck_assert_uint_gt(wb.h[2].token, wb.h[1].token);
	ck_assert_ptr_eq(wb.w[0].owner, cl_ow[4]);
	ck_assert_uint_eq(wb.w[0].waited_ms, 70);
	ck_assert_uint_eq(wb.w[0].nkeys, 2);
	ck_assert_int_eq(wb.w[0].mode, LT_EXCLUSIVE);

	ck_assert_int_eq(cl_unlock(1, "a", 230), KL_OK);
	EXPECT_GRANTS("4");
	ck_assert_ptr_nonnull(k = cl_find("a"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.wait_ms_total, 100);
	ck_assert_str_eq(cl_key_state("a", 230, &wb), "2 3 4 |");
	ck_assert_ptr_nonnull(k = cl_find("b"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.limit, 3);
	ck_assert_uint_eq(v.wait_ms_total, 100);
	ck_assert_ptr_null(cl_find("ab"));
	ck_assert_ptr_null(locktable_find(cl_lt, "a", 0));
}
END_TEST

START_TEST(walk_stops_when_callback_returns_false)
{
	struct walk_buf		wb;
	const struct lt_key	*k;

	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(4, "a", 0), QUEUED);
	ck_assert_ptr_nonnull(k = cl_find("a"));
	memset(&wb, 0, sizeof(wb));
	wb.stop_after = 1;
	locktable_key_walk(cl_lt, k, 0, cl_walk_holder, cl_walk_waiter, &wb);
	ck_assert_int_eq(wb.calls, 1);
	memset(&wb, 0, sizeof(wb));
	wb.stop_after = 3;
	locktable_key_walk(cl_lt, k, 0, cl_walk_holder, cl_walk_waiter, &wb);
	ck_assert_int_eq(wb.calls, 3);
	ck_assert_str_eq(wb.hs, "1s 2s ");
	ck_assert_str_eq(wb.ws, "3 ");
}
END_TEST

START_TEST(owner_accessors_report_state)
{
	ck_assert_uint_eq(locktable_owner_id(cl_ow[5]), 5);
	ck_assert_ptr_eq(locktable_owner_udata(cl_ow[5]), &cl_udata[5]);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[5]), 0);
	ck_assert(!locktable_owner_is_waiting(cl_ow[5]));
	ck_assert_int_eq(cl_lock(5, "a b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(6, "c", 0), GRANTED);
	ck_assert_int_eq(cl_lock(5, "c", 0), QUEUED);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[5]), 2);
	ck_assert(locktable_owner_is_waiting(cl_ow[5]));
	ck_assert_int_eq(cl_unlock(6, "c", 1), KL_OK);
	EXPECT_GRANTS("5");
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[5]), 3);
	ck_assert(!locktable_owner_is_waiting(cl_ow[5]));
}
END_TEST

START_TEST(keys_are_compared_by_length_and_bytes)
{
	static const char	buf[] = "abcdef";
	const char		*keys[3] = { buf, buf, buf + 1 };
	size_t			 lens[3] = { 2, 3, 2 };
	struct lt_acquire	 a = {
		.keys = keys, .keylens = lens, .nkeys = 3,
		.mode = LT_EXCLUSIVE, .limit = 1, .max_waiters = -1
	};
	bool			 granted = false;
	uint64_t		 tok = 0;
	struct lt_blocker	 why;
	size_t			 n = 0, bad = 0;

	/* "ab", "abc", "bc", none of them NUL-terminated */
	ck_assert_int_eq(locktable_acquire(cl_lt, cl_ow[1], &a, 0, &granted,
	    &tok, &why), KL_OK);
	ck_assert(granted);
	ck_assert_uint_gt(tok, cl_last_tok);
	cl_last_tok = tok;
	CHECK_TABLE();
	cl_expect_gauges(3, 3, 0);
	EXPECT_KEY("ab", "1 |");
	EXPECT_KEY("abc", "1 |");
	EXPECT_KEY("bc", "1 |");
	ck_assert_ptr_null(cl_find("a"));
	ck_assert_ptr_null(cl_find("abcd"));
	ck_assert_ptr_null(cl_find("AB"));
	ck_assert_int_eq(cl_lock(2, "a abcd AB", 0), GRANTED);
	ck_assert_int_eq(locktable_release(cl_lt, cl_ow[1], keys, lens, 3, 1,
	    &n, &bad), KL_OK);
	ck_assert_uint_eq(n, 3);
	CHECK_TABLE();
	cl_expect_gauges(3, 3, 0);
}
END_TEST

START_TEST(many_keys_and_waiters_stay_consistent)
{
	char	buf[32];

	for (int i = 0; i < 200; i++) {
		snprintf(buf, sizeof(buf), "key:%d", i);
		ck_assert_int_eq(cl_lock(1 + i % 2, buf, (uint64_t)i), GRANTED);
	}
	cl_expect_gauges(200, 200, 0);
	ck_assert_int_eq(cl_lock(3, "key:0 key:1 key:199", 300), QUEUED);
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_UNLOCK, 301), 100);
	EXPECT_GRANTS("");
	ck_assert_uint_eq(cl_release_owner(2, LT_WHY_UNLOCK, 302), 100);
	EXPECT_GRANTS("3");
	cl_expect_gauges(3, 3, 0);
}
END_TEST

/*
 * A plain lock is one entry with its hold inside: the table grows by the
 * entry, its key bytes and a share of the buckets, and shrinks back to the
 * byte when the keys go (CHECK_TABLE recounts the gauge on every call).
 */
START_TEST(plain_locks_cost_one_compact_entry_each)
{
	enum { N = 4096 };
	char		buf[32];
	uint64_t	before = cl_ctr()->bytes, per_key;

	ck_assert_uint_gt(before, 0);
	for (int i = 0; i < N; i++) {
		snprintf(buf, sizeof(buf), "b:%04d", i);
		ck_assert_int_eq(cl_lock(1, buf, 1), GRANTED);
	}
	per_key = (cl_ctr()->bytes - before) / N;
	ck_assert_msg(per_key <= 96, "%ju bytes per held key",
	    (uintmax_t)per_key);
	ck_assert_int_eq(cl_lock_shared(2, "s", 2), GRANTED);
	ck_assert_int_eq(cl_lock_shared(3, "s", 2), GRANTED);
	ck_assert_int_eq(cl_lock(4, "s", 3), QUEUED);
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_UNLOCK, 4), N);
	ck_assert_uint_eq(cl_release_owner(2, LT_WHY_UNLOCK, 5), 1);
	ck_assert_uint_eq(cl_release_owner(3, LT_WHY_UNLOCK, 6), 1);
	EXPECT_GRANTS("4");
	ck_assert_int_eq(cl_unlock(4, "s", 7), KL_OK);
	ck_assert_uint_eq(cl_ctr()->bytes, before);
}
END_TEST

void
cl_add_views(Suite *s)
{
	TCase	*tc;

	tc = cl_tcase(s, "counters");
	tcase_add_test(tc, counters_match);
	tcase_add_test(tc, max_waiters_counter_keeps_the_peak);
	tcase_add_test(tc, shutdown_and_locked_count_nothing);
	tcase_add_test(tc, tokens_increase_across_grants);

	tc = cl_tcase(s, "views");
	tcase_add_test(tc, blocker_names_longest_holder);
	tcase_add_test(tc, blocker_is_null_when_only_requests_ahead_block);
	tcase_add_test(tc, hot_keys_most_waiters_first);
	tcase_add_test(tc, key_view_and_walk_report_holders_and_waiters);
	tcase_add_test(tc, walk_stops_when_callback_returns_false);
	tcase_add_test(tc, owner_accessors_report_state);
	tcase_add_test(tc, keys_are_compared_by_length_and_bytes);
	tcase_add_test(tc, many_keys_and_waiters_stay_consistent);
	tcase_add_test(tc, plain_locks_cost_one_compact_entry_each);
}
