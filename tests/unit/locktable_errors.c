/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Refusals: HELD, NOTHELD, BUSY, LIMIT in the order keylockd-protocol(7) gives,
 * and deadlock detection through holders, queues and semaphores, and its
 * bound.
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
#include "lt_impl.h"
#include "util.h"

/* errors */

START_TEST(held_key_is_held_error)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "b a", 1), KL_ERR_HELD);
	ck_assert_str_eq(cl_res_key, "a");
	ck_assert(!locktable_owner_is_waiting(cl_ow[1]));
	EXPECT_KEY("b", "-");
	cl_expect_gauges(1, 1, 0);
	ck_assert_int_eq(cl_lock_shared(1, "a", 2), KL_ERR_HELD);
	ck_assert_int_eq(cl_trylock(1, "a", 2), KL_ERR_HELD);
	/* HELD comes before CONFLICT */
	ck_assert_int_eq(cl_lock_limit(1, "a", 2, 3), KL_ERR_HELD);
	ck_assert_uint_eq(cl_ctr()->conflicts, 0);
	ck_assert_uint_eq(cl_ctr()->grants, 1);
}
END_TEST

START_TEST(unlock_of_unheld_key_releases_nothing)
{
	ck_assert_int_eq(cl_lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "c", 0), GRANTED);
	ck_assert_int_eq(cl_unlock(1, "a c", 1), KL_ERR_NOTHELD);
	ck_assert_uint_eq(cl_res_bad, 1);
	ck_assert_int_eq(cl_unlock(1, "x", 1), KL_ERR_NOTHELD);
	ck_assert_uint_eq(cl_res_bad, 0);
	EXPECT_KEY("x", "-");
	ck_assert_int_eq(cl_unlock(3, "a", 1), KL_ERR_NOTHELD);
	ck_assert_uint_eq(cl_res_bad, 0);
	cl_expect_gauges(3, 3, 0);
	ck_assert_uint_eq(cl_ctr()->releases, 0);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 2);
	ck_assert_int_eq(cl_unlock(1, "a b", 2), KL_OK);
	ck_assert_uint_eq(cl_res_n, 2);
	ck_assert_uint_eq(cl_ctr()->releases, 2);
	ck_assert_int_eq(cl_unlock(1, "a", 3), KL_ERR_NOTHELD);
}
END_TEST

START_TEST(unlock_by_waiter_of_key_is_notheld)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_unlock(2, "a", 1), KL_ERR_NOTHELD);
	ck_assert(locktable_owner_is_waiting(cl_ow[2]));
	EXPECT_KEY("a", "1 | 2");
}
END_TEST

START_TEST(refresh_of_unheld_key_is_notheld)
{
	ck_assert_int_eq(cl_acq(1, "a", REQ(.ttl_ms = 100), 0), GRANTED);
	ck_assert_int_eq(cl_refresh(1, "a b", 500, 10), KL_ERR_NOTHELD);
	ck_assert_uint_eq(cl_res_bad, 1);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 100);
	ck_assert_int_eq(cl_refresh(2, "a", 500, 10), KL_ERR_NOTHELD);
	ck_assert_uint_eq(locktable_next_expiry(cl_lt), 100);
}
END_TEST

START_TEST(busy_when_max_waiters_reached)
{
	ck_assert_int_eq(cl_acq(1, "a", REQ(.has_mw = true, .mw = 0), 0),
	    GRANTED);
	ck_assert_int_eq(cl_acq(2, "a", REQ(.has_mw = true, .mw = 0), 10),
	    KL_ERR_BUSY);
	ck_assert_str_eq(cl_res_key, "a");
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_uint_eq(cl_res_why.held_ms, 10);
	ck_assert_uint_eq(cl_res_why.nwaiters, 0);
	ck_assert_uint_eq(cl_ctr()->busy, 1);
	ck_assert(!locktable_owner_is_waiting(cl_ow[2]));
	cl_expect_gauges(1, 1, 0);

	ck_assert_int_eq(cl_lock(3, "a", 11), QUEUED);
	ck_assert_int_eq(cl_acq(4, "a", REQ(.has_mw = true, .mw = 1), 12),
	    KL_ERR_BUSY);
	ck_assert_int_eq(cl_acq(4, "b a", REQ(.has_mw = true, .mw = 1), 12),
	    KL_ERR_BUSY);
	ck_assert_str_eq(cl_res_key, "a");
	EXPECT_KEY("b", "-");
	ck_assert_uint_eq(cl_ctr()->busy, 3);
	ck_assert_int_eq(cl_acq(4, "a", REQ(.has_mw = true, .mw = 2), 13),
	    QUEUED);
	EXPECT_KEY("a", "1 | 3 4");
	/* max_waiters=0 on a free key is a plain grant */
	ck_assert_int_eq(cl_acq(5, "c", REQ(.has_mw = true, .mw = 0), 14),
	    GRANTED);
	ck_assert_int_eq(cl_acq(6, "c", REQ(.has_mw = true, .mw = 5,
	    .try = true), 14), KL_ERR_LOCKED);
	ck_assert_uint_eq(cl_ctr()->busy, 3);
}
END_TEST

START_TEST(limit_on_max_holds)
{
	ck_assert_int_eq(cl_acq(1, "a b", REQ(.max_holds = 2), 0), GRANTED);
	ck_assert_int_eq(cl_acq(1, "c", REQ(.max_holds = 2), 0), KL_ERR_LIMIT);
	ck_assert(!locktable_owner_is_waiting(cl_ow[1]));
	EXPECT_KEY("c", "-");
	ck_assert_int_eq(cl_acq(1, "c c", REQ(.max_holds = 3), 0), GRANTED);
	/* LIMIT comes before HELD */
	ck_assert_int_eq(cl_acq(1, "a", REQ(.max_holds = 3), 0), KL_ERR_LIMIT);
	ck_assert_int_eq(cl_acq(2, "d e", REQ(.max_holds = 1), 0),
	    KL_ERR_LIMIT);
	ck_assert_int_eq(cl_acq(2, "d d", REQ(.max_holds = 1), 0), GRANTED);
	/* counted on queued requests too */
	ck_assert_int_eq(cl_acq(3, "d e f", REQ(.max_holds = 2), 0),
	    KL_ERR_LIMIT);
	ck_assert_int_eq(cl_acq(3, "d e f", REQ(.max_holds = 3), 0), QUEUED);
	ck_assert_uint_eq(cl_ctr()->grants, 3);
	cl_expect_gauges(6, 4, 1);
}
END_TEST

START_TEST(errors_are_checked_in_protocol_order)
{
	/* CONFLICT before BUSY and LOCKED */
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_acq(2, "a", REQ(.limit = 2, .has_mw = true, .mw = 0,
	    .try = true), 0), KL_ERR_CONFLICT);
	/* BUSY before DEADLOCK: 2 holds b, 1 waits for b */
	ck_assert_int_eq(cl_lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "b", 0), QUEUED);
	ck_assert_int_eq(cl_acq(2, "a", REQ(.has_mw = true, .mw = 0), 0),
	    KL_ERR_BUSY);
	/* DEADLOCK before LOCKED */
	ck_assert_int_eq(cl_trylock(2, "a", 0), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(cl_ctr()->conflicts, 1);
	ck_assert_uint_eq(cl_ctr()->busy, 1);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	/* LOCKED when nothing else applies */
	ck_assert_int_eq(cl_trylock(3, "a", 0), KL_ERR_LOCKED);
	ck_assert_uint_eq(cl_ctr()->timeouts, 0);
	cl_expect_gauges(2, 2, 1);
}
END_TEST

/* deadlock */

START_TEST(deadlock_cycle_of_two_is_refused)
{
	ck_assert_int_eq(cl_lock(1, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "y", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "y", 1), QUEUED);
	ck_assert_int_eq(cl_lock(2, "x", 5), KL_ERR_DEADLOCK);
	ck_assert_str_eq(cl_res_key, "x");
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_uint_eq(cl_res_why.held_ms, 5);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	ck_assert(!locktable_owner_is_waiting(cl_ow[2]));
	ck_assert(locktable_owner_is_waiting(cl_ow[1]));
	EXPECT_KEY("x", "1 |");
	EXPECT_KEY("y", "2 | 1");
	ck_assert_int_eq(cl_unlock(2, "y", 6), KL_OK);
	EXPECT_GRANTS("1");
}
END_TEST

START_TEST(deadlock_cycle_of_three_is_refused)
{
	ck_assert_int_eq(cl_lock(1, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "y", 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "z", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "y", 0), QUEUED);
	ck_assert_int_eq(cl_lock(2, "z", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "w x", 0), KL_ERR_DEADLOCK);
	ck_assert_str_eq(cl_res_key, "x");
	EXPECT_KEY("w", "-");
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	cl_expect_gauges(3, 3, 2);
	/* a chain that ends in a free owner is no cycle */
	ck_assert_int_eq(cl_lock(4, "x", 0), QUEUED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
}
END_TEST

START_TEST(deadlock_through_request_queued_ahead_is_refused)
{
	/* 2 waits for 1 on a and sits ahead of 1 on the free key c */
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a c", 0), QUEUED);
	EXPECT_KEY("c", "| 2");
	ck_assert_int_eq(cl_lock(1, "c", 0), KL_ERR_DEADLOCK);
	ck_assert_str_eq(cl_res_key, "c");
	ck_assert_ptr_null(cl_res_why.holder);
	ck_assert_int_eq(cl_lock(3, "c", 0), QUEUED);
}
END_TEST

START_TEST(deadlock_counts_every_conflicting_holder)
{
	/*
	 * 3 waits for x behind 2 (shared, itself blocked on z) and for the
	 * shared holder 1 it conflicts with; 1 asking for m held by 3 closes
	 * 1 -> 3 -> 1. keylockd-protocol(7): a waiting request depends on every
	 * holder it conflicts with and on every request queued ahead.
	 */
	ck_assert_int_eq(cl_lock_shared(1, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(5, "z", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "x z", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "m", 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "x", 0), QUEUED);
	EXPECT_KEY("x", "1s | 2s 3");
	ck_assert_int_eq(cl_lock(1, "m", 0), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
}
END_TEST

START_TEST(semaphore_wait_deadlocks_only_if_all_holders_in_cycle)
{
	ck_assert_int_eq(cl_lock_limit(1, "s", 2, 0), GRANTED);
	ck_assert_int_eq(cl_lock_limit(2, "s", 2, 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "x", 0), QUEUED);
	/* 2 is free, so a wait on s can still end */
	ck_assert_int_eq(cl_lock_limit(3, "s", 2, 0), QUEUED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
	ck_assert(cl_withdraw(3, LT_WHY_TIMEOUT, 1));
	ck_assert_int_eq(cl_lock(2, "x", 2), QUEUED);
	/* now both holders of s wait for 3 */
	ck_assert_int_eq(cl_lock_limit(3, "s", 2, 3), KL_ERR_DEADLOCK);
	ck_assert_str_eq(cl_res_key, "s");
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	ck_assert_int_eq(cl_acq(3, "s", REQ(.limit = 2, .try = true), 3),
	    KL_ERR_DEADLOCK);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 2);
	EXPECT_KEY("s", "1 2 |");
}
END_TEST

START_TEST(semaphore_with_room_is_no_deadlock)
{
	ck_assert_int_eq(cl_lock_limit(1, "s", 3, 0), GRANTED);
	ck_assert_int_eq(cl_lock_limit(2, "s", 3, 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "x", 0), QUEUED);
	ck_assert_int_eq(cl_lock(2, "x", 0), QUEUED);
	ck_assert_int_eq(cl_lock_limit(3, "s", 3, 0), GRANTED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
}
END_TEST

START_TEST(grantable_request_is_never_deadlock)
{
	/* 1 waits for 2; 2 asks for a shared key 1 holds shared: granted */
	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "b", 0), QUEUED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 0), GRANTED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
	/* but exclusive on a would wait for 1: a cycle */
	ck_assert_int_eq(cl_unlock(2, "a", 0), KL_OK);
	ck_assert_int_eq(cl_lock(2, "a", 0), KL_ERR_DEADLOCK);
}
END_TEST

START_TEST(trylock_that_would_deadlock_gets_deadlock)
{
	ck_assert_int_eq(cl_lock(1, "x", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "y", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "y", 0), QUEUED);
	ck_assert_int_eq(cl_trylock(2, "x", 0), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	ck_assert_int_eq(cl_trylock(3, "x", 0), KL_ERR_LOCKED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
}
END_TEST

START_TEST(waiter_without_holds_never_deadlocks)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "b a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(4, "a b", 0), QUEUED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
}
END_TEST

/* LOCK key by o, exclusive, with no check of the table after it (the
 * graphs below are too large for CHECK_TABLE at every step). */
static int
dl_lock(struct lt_owner *o, const char *key)
{
	const char		*keys[1] = { key };
	size_t			 lens[1] = { strlen(key) };
	struct lt_acquire	 a;
	struct lt_blocker	 why;
	uint64_t		 token;
	bool			 granted = false;
	enum kl_err		 err;

	memset(&a, 0, sizeof(a));
	a.keys = keys;
	a.keylens = lens;
	a.nkeys = 1;
	a.mode = LT_EXCLUSIVE;
	a.limit = 1;
	a.max_waiters = -1;
	err = locktable_acquire(cl_lt, o, &a, 0, &granted, &token, &why);
	return err != KL_OK ? (int)err : granted ? GRANTED : QUEUED;
}

/*
 * A chain of n owners: c[i] holds d<i> and waits for d<i-1>, c[0] waits
 * for r, which owner 1 holds. Owner 1's LOCK of d<n-1> would close a cycle
 * of n + 1 owners; the search takes about 2n + 2 steps (a key looked at
 * and an edge per owner). Returns its answer; *steps: the steps it took.
 */
static int
dl_chain(size_t n, uint64_t *steps)
{
	struct lt_owner	**c = calloc(n, sizeof(*c));
	char		  key[32];
	uint64_t	  before;
	int		  rc;

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(cl_lock(1, "r", 0), GRANTED);
	for (size_t i = 0; i < n; i++) {
		c[i] = locktable_owner_new(cl_lt, 100 + i, NULL);
		ck_assert_ptr_nonnull(c[i]);
		snprintf(key, sizeof(key), "d%zu", i);
		ck_assert_int_eq(dl_lock(c[i], key), GRANTED);
	}
	/* from the end of the chain, so that each of these searches stops
	 * at once: the owner waited for waits for nothing yet */
	for (size_t i = n; i-- > 0;) {
		snprintf(key, sizeof(key), i > 0 ? "d%zu" : "r", i - 1);
		ck_assert_int_eq(dl_lock(c[i], key), QUEUED);
	}
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
	before = cl_lt->dl_steps;
	snprintf(key, sizeof(key), "d%zu", n - 1);
	rc = dl_lock(cl_ow[1], key);
	*steps = cl_lt->dl_steps - before;
	/* nothing more is granted while the chain goes */
	locktable_freeze(cl_lt);
	for (size_t i = 0; i < n; i++)
		locktable_owner_free(cl_lt, c[i], 1);
	free(c);
	return rc;
}

START_TEST(deadlock_in_a_long_chain_under_the_bound_is_refused)
{
	uint64_t	steps;
	size_t		n = (LT_DL_STEPS_MAX - 10) / 2;

	ck_assert_int_eq(dl_chain(n, &steps), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 1);
	ck_assert_uint_eq(cl_ctr()->deadlock_searches_cut, 0);
	ck_assert_uint_le(steps, LT_DL_STEPS_MAX);
	ck_assert_uint_ge(steps, 2 * n);
}
END_TEST

/* keylockd-protocol(7), Deadlock detection: past its bound the search
 * gives up and the request waits, as if there were no cycle (its timeout
 * ends the wait); its cost stays at the bound however large the graph. */
START_TEST(deadlock_search_over_the_bound_gives_up_and_the_request_waits)
{
	uint64_t	steps;

	ck_assert_int_eq(dl_chain(4 * LT_DL_STEPS_MAX, &steps), QUEUED);
	ck_assert_uint_eq(steps, LT_DL_STEPS_MAX);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
	ck_assert_uint_eq(cl_ctr()->deadlock_searches_cut, 1);
	ck_assert(locktable_owner_is_waiting(cl_ow[1]));
	ck_assert(locktable_withdraw(cl_lt, cl_ow[1], 2, LT_WHY_TIMEOUT));
	ck_assert_uint_eq(cl_ctr()->timeouts, 1);
}
END_TEST

void
cl_add_errors(Suite *s)
{
	TCase	*tc;

	tc = cl_tcase(s, "errors");
	tcase_add_test(tc, held_key_is_held_error);
	tcase_add_test(tc, unlock_of_unheld_key_releases_nothing);
	tcase_add_test(tc, unlock_by_waiter_of_key_is_notheld);
	tcase_add_test(tc, refresh_of_unheld_key_is_notheld);
	tcase_add_test(tc, busy_when_max_waiters_reached);
	tcase_add_test(tc, limit_on_max_holds);
	tcase_add_test(tc, errors_are_checked_in_protocol_order);

	tc = cl_tcase(s, "deadlock");
	tcase_add_test(tc, deadlock_cycle_of_two_is_refused);
	tcase_add_test(tc, deadlock_cycle_of_three_is_refused);
	tcase_add_test(tc, deadlock_through_request_queued_ahead_is_refused);
	tcase_add_test(tc, deadlock_counts_every_conflicting_holder);
	tcase_add_test(tc,
	    semaphore_wait_deadlocks_only_if_all_holders_in_cycle);
	tcase_add_test(tc, semaphore_with_room_is_no_deadlock);
	tcase_add_test(tc, grantable_request_is_never_deadlock);
	tcase_add_test(tc, trylock_that_would_deadlock_gets_deadlock);
	tcase_add_test(tc, waiter_without_holds_never_deadlocks);
	tcase_add_test(tc, deadlock_in_a_long_chain_under_the_bound_is_refused);
	tcase_add_test(tc,
	    deadlock_search_over_the_bound_gives_up_and_the_request_waits);
}
