/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * How holds end: ttl expiry and refresh, disconnects, withdrawn requests,
 * and a table left whole when an allocation fails.
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

/* ttl */

START_TEST(ttl_expiry_releases_and_grants_next)
{
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), UINT64_MAX);
	ck_assert_int_eq(cl_acq(1, "a", REQ(.ttl_ms = 100), 1000), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 1100);
	ck_assert_int_eq(cl_lock(2, "a", 1010), QUEUED);
	ck_assert_uint_eq(cl_expire(1099), 0);
	EXPECT_GRANTS("");
	ck_assert_uint_eq(cl_expire(1100), 1);
	ck_assert_uint_eq(cl_grant_waited(2), 90);
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(cl_ctr()->expired, 1);
	ck_assert_uint_eq(cl_ctr()->releases, 0);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 0);
	ck_assert_int_eq(cl_unlock(1, "a", 1101), KL_ERR_NOTHELD);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), UINT64_MAX);
	ck_assert_uint_eq(cl_expire(5000), 0);
	EXPECT_KEY("a", "2 |");
	ck_assert_uint_eq(kl_hist_count(&cl_ctr()->hold_ms), 1);
	ck_assert_uint_eq(cl_ctr()->hold_ms.sum_ms, 100);
}
END_TEST

START_TEST(refresh_extends_ttl)
{
	ck_assert_int_eq(cl_acq(1, "a b", REQ(.ttl_ms = 100), 0), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 100);
	ck_assert_int_eq(cl_refresh(1, "a", 100, 50), KL_OK);
	ck_assert_uint_eq(cl_res_n, 1);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 100);
	ck_assert_uint_eq(cl_expire(100), 1);
	EXPECT_KEY("b", "-");
	EXPECT_KEY("a", "1 |");
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 150);
	ck_assert_uint_eq(cl_expire(149), 0);
	ck_assert_uint_eq(cl_expire(150), 1);
	ck_assert_uint_eq(cl_ctr()->expired, 2);
	ck_assert_int_eq(cl_refresh(1, "a", 100, 151), KL_ERR_NOTHELD);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(refresh_gives_ttl_to_hold_without_one)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), UINT64_MAX);
	ck_assert_int_eq(cl_refresh(1, "a", 30, 10), KL_OK);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 40);
	ck_assert_uint_eq(cl_expire(40), 1);
}
END_TEST

START_TEST(ttl_of_queued_request_counts_from_grant)
{
	struct walk_buf	wb;

	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_acq(2, "a", REQ(.ttl_ms = 50), 10), QUEUED);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), UINT64_MAX);
	ck_assert_int_eq(cl_unlock(1, "a", 200), KL_OK);
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 250);
	ck_assert_str_eq(cl_key_state("a", 220, &wb), "2 |");
	ck_assert_uint_eq(wb.h[0].held_ms, 20);
	ck_assert_uint_eq(wb.h[0].expires_in_ms, 30);
	ck_assert_uint_eq(cl_expire(249), 0);
	ck_assert_uint_eq(cl_expire(250), 1);
}
END_TEST

START_TEST(multikey_ttl_expires_every_key)
{
	ck_assert_int_eq(cl_acq(1, "a b c", REQ(.ttl_ms = 10), 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "b", 1), QUEUED);
	ck_assert_int_eq(cl_acq(3, "d", REQ(.ttl_ms = 5), 2), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 7);
	ck_assert_uint_eq(cl_expire(20), 4);
	ck_assert_uint_eq(cl_ctr()->expired, 4);
	EXPECT_GRANTS("2");
	cl_expect_gauges(1, 1, 0);
}
END_TEST

START_TEST(expire_skips_holds_without_ttl)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_acq(2, "b", REQ(.ttl_ms = 1), 0), GRANTED);
	ck_assert_uint_eq(cl_expire(1000000), 1);
	EXPECT_KEY("a", "1 |");
	EXPECT_KEY("b", "-");
}
END_TEST

/* cleanup */

START_TEST(disconnect_releases_every_lock)
{
	ck_assert_int_eq(cl_lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "c", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "c", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(4, "b c", 0), QUEUED);
	EXPECT_KEY("c", "2 | 1 4");

	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_DISCONNECT, 10), 2);
	ck_assert_uint_eq(cl_ctr()->disconnect_releases, 2);
	ck_assert_uint_eq(cl_ctr()->releases, 0);
	EXPECT_GRANTS("3");
	EXPECT_KEY("c", "2 | 4");
	ck_assert_int_eq(cl_unlock(2, "c", 20), KL_OK);
	EXPECT_GRANTS("4");

	locktable_owner_free(cl_lt, cl_ow[4], 30);
	cl_ow[4] = NULL;
	CHECK_TABLE();
	ck_assert_uint_eq(cl_ctr()->disconnect_releases, 4);
	cl_expect_gauges(1, 1, 0);
	locktable_owner_free(cl_lt, cl_ow[3], 30);
	cl_ow[3] = NULL;
	CHECK_TABLE();
	cl_expect_gauges(0, 0, 0);
	ck_assert_uint_eq(cl_ctr()->disconnect_releases, 5);
	ck_assert_uint_eq(kl_hist_count(&cl_ctr()->hold_ms), 6);
}
END_TEST

START_TEST(owner_free_of_waiting_owner_withdraws_its_request)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a b", 0), QUEUED);
	locktable_owner_free(cl_lt, cl_ow[2], 5);
	cl_ow[2] = NULL;
	CHECK_TABLE();
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "1 | 3");
	ck_assert_int_eq(cl_unlock(1, "a", 6), KL_OK);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(cl_ctr()->timeouts, 0);
	locktable_owner_free(cl_lt, NULL, 7);
	CHECK_TABLE();
}
END_TEST

START_TEST(release_owner_with_unlock_counts_releases)
{
	ck_assert_int_eq(cl_lock(1, "a b c", 0), GRANTED);
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_UNLOCK, 5), 3);
	ck_assert_uint_eq(cl_ctr()->releases, 3);
	ck_assert_uint_eq(cl_ctr()->disconnect_releases, 0);
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_UNLOCK, 6), 0);
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(withdraw_on_timeout_grants_those_behind)
{
	ck_assert_int_eq(cl_lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 5), QUEUED);
	ck_assert(!cl_withdraw(1, LT_WHY_TIMEOUT, 10));
	ck_assert(cl_withdraw(2, LT_WHY_TIMEOUT, 10));
	ck_assert_uint_eq(cl_grant_waited(3), 5);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(cl_ctr()->timeouts, 1);
	ck_assert(!cl_withdraw(2, LT_WHY_TIMEOUT, 11));
	ck_assert_uint_eq(cl_ctr()->timeouts, 1);
	EXPECT_KEY("b", "1 |");
	cl_expect_gauges(2, 2, 0);
}
END_TEST

START_TEST(withdraw_of_shared_head_grants_shared_behind)
{
	ck_assert_int_eq(cl_lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(4, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a b", 1), QUEUED);
	ck_assert_int_eq(cl_lock_shared(3, "a", 2), QUEUED);
	ck_assert(cl_withdraw(2, LT_WHY_TIMEOUT, 3));
	EXPECT_GRANTS("3");
	EXPECT_KEY("a", "4s 3s |");
}
END_TEST

/*
 * Runs a little of everything; with allocation n failing, calls may fail
 * (acq() then checks that nothing changed) but the table stays whole.
 */
static void
alloc_scenario(void)
{
	(void)cl_acq(1, "a b", REQ(.ttl_ms = 50), 0);
	(void)cl_lock(2, "b c", 1);
	(void)cl_acq(3, "x", REQ(.ttl_ms = 5), 2);
	(void)cl_lock(3, "c", 3);
	(void)cl_lock(1, "x", 3);		/* DEADLOCK */
	(void)cl_acq(4, "d e f g h i j k l m", REQ(.mode = LT_SHARED), 4);
	(void)cl_acq(5, "m l k j i h g f e d d", REQ(.mode = LT_SHARED), 4);
	(void)cl_lock(6, "d", 5);
	(void)cl_refresh(1, "a b", 5, 6);
	(void)cl_refresh(6, "d", 5, 6);
	(void)cl_unlock(1, "a", 7);
	(void)cl_withdraw(2, LT_WHY_TIMEOUT, 8);
	(void)cl_expire(10);
	(void)cl_release_owner(4, LT_WHY_UNLOCK, 11);
	(void)cl_release_owner(1, LT_WHY_DISCONNECT, 12);
	(void)cl_lock(7, "n", 13);
	(void)cl_lock_limit(8, "o", 2, 13);
}

START_TEST(allocation_failure_leaves_table_whole)
{
	/* without failures the scenario meets what it is meant to */
	alloc_scenario();
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	ck_assert_uint_eq(cl_ctr()->expired, 1);
	ck_assert_uint_eq(cl_ctr()->grants, 7);
	EXPECT_GRANTS("3");
	for (int i = 1; i < NOWNERS; i++)
		(void)cl_release_owner(i, LT_WHY_DISCONNECT, 20);
	cl_expect_gauges(0, 0, 0);
	for (uint64_t n = 1; n <= 150; n++) {
		/* pooled objects never fail: start each run with none */
		locktable_trim(cl_lt);
		kl_alloc_fail_at(n, _i == 1);
		alloc_scenario();
		kl_alloc_fail_at(0, false);
		for (int i = 1; i < NOWNERS; i++)
			(void)cl_release_owner(i, LT_WHY_DISCONNECT, 20);
		cl_expect_gauges(0, 0, 0);
		cl_ngrants = 0;
	}
}
END_TEST

/* Every exit path leaves no entry behind: keylockd-protocol(7), Cleanup. */
START_TEST(keys_zero_after_every_exit_path)
{
	/* unlock */
	ck_assert_int_eq(cl_lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(cl_unlock(1, "b a", 1), KL_OK);
	cl_expect_gauges(0, 0, 0);
	/* timeout */
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b", 0), QUEUED);
	ck_assert(cl_withdraw(2, LT_WHY_TIMEOUT, 1));
	cl_expect_gauges(1, 1, 0);
	/* shutdown (no counter) */
	ck_assert_int_eq(cl_lock(2, "c a", 0), QUEUED);
	ck_assert(cl_withdraw(2, LT_WHY_SHUTDOWN, 1));
	cl_expect_gauges(1, 1, 0);
	ck_assert_uint_eq(cl_ctr()->timeouts, 1);
	/* busy */
	ck_assert_int_eq(cl_acq(2, "b a", REQ(.has_mw = true, .mw = 0), 1),
	    KL_ERR_BUSY);
	cl_expect_gauges(1, 1, 0);
	/* locked */
	ck_assert_int_eq(cl_trylock(2, "b a", 1), KL_ERR_LOCKED);
	cl_expect_gauges(1, 1, 0);
	/* conflict */
	ck_assert_int_eq(cl_lock_limit(2, "b a", 2, 1), KL_ERR_CONFLICT);
	cl_expect_gauges(1, 1, 0);
	/* held */
	ck_assert_int_eq(cl_lock(1, "b a", 1), KL_ERR_HELD);
	cl_expect_gauges(1, 1, 0);
	/* limit */
	ck_assert_int_eq(cl_acq(1, "b c", REQ(.max_holds = 2), 1),
	    KL_ERR_LIMIT);
	cl_expect_gauges(1, 1, 0);
	/* deadlock */
	ck_assert_int_eq(cl_lock(2, "d", 1), GRANTED);
	ck_assert_int_eq(cl_lock(1, "d", 1), QUEUED);
	ck_assert_int_eq(cl_lock(2, "b a", 1), KL_ERR_DEADLOCK);
	cl_expect_gauges(2, 2, 1);
	/* disconnect */
	ck_assert_uint_eq(cl_release_owner(2, LT_WHY_DISCONNECT, 2), 1);
	EXPECT_GRANTS("1");
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_DISCONNECT, 2), 2);
	cl_expect_gauges(0, 0, 0);
	/* ttl */
	ck_assert_int_eq(cl_acq(3, "e f", REQ(.ttl_ms = 5), 10), GRANTED);
	ck_assert_uint_eq(cl_expire(15), 2);
	cl_expect_gauges(0, 0, 0);
	/* expiry of a waiter's blocker, then its own ttl */
	ck_assert_int_eq(cl_acq(3, "e", REQ(.ttl_ms = 5), 20), GRANTED);
	ck_assert_int_eq(cl_acq(4, "e g", REQ(.ttl_ms = 5), 20), QUEUED);
	ck_assert_uint_eq(cl_expire(25), 1);
	EXPECT_GRANTS("4");
	ck_assert_uint_eq(cl_expire(30), 2);
	cl_expect_gauges(0, 0, 0);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), UINT64_MAX);
}
END_TEST

void
cl_add_lifetime(Suite *s)
{
	TCase	*tc;

	tc = cl_tcase(s, "ttl");
	tcase_add_test(tc, ttl_expiry_releases_and_grants_next);
	tcase_add_test(tc, refresh_extends_ttl);
	tcase_add_test(tc, refresh_gives_ttl_to_hold_without_one);
	tcase_add_test(tc, ttl_of_queued_request_counts_from_grant);
	tcase_add_test(tc, multikey_ttl_expires_every_key);
	tcase_add_test(tc, expire_skips_holds_without_ttl);

	tc = cl_tcase(s, "cleanup");
	tcase_add_test(tc, disconnect_releases_every_lock);
	tcase_add_test(tc, owner_free_of_waiting_owner_withdraws_its_request);
	tcase_add_test(tc, release_owner_with_unlock_counts_releases);
	tcase_add_test(tc, withdraw_on_timeout_grants_those_behind);
	tcase_add_test(tc, withdraw_of_shared_head_grants_shared_behind);
	tcase_add_test(tc, keys_zero_after_every_exit_path);
	tcase_add_loop_test(tc, allocation_failure_leaves_table_whole, 0, 2);
}
