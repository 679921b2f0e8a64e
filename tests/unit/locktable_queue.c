/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Who gets a key and when: FIFO order, shared mode, semaphores and
 * multi-key grants with one token.
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

/* fifo */

START_TEST(fifo_grants_in_arrival_order)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 1), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 2), QUEUED);
	ck_assert_int_eq(cl_lock(4, "a", 3), QUEUED);
	EXPECT_KEY("a", "1 | 2 3 4");
	cl_expect_gauges(1, 1, 3);

	ck_assert_int_eq(cl_unlock(1, "a", 10), KL_OK);
	ck_assert_uint_eq(cl_res_n, 1);
	ck_assert_uint_eq(cl_grant_waited(2), 9);
	EXPECT_GRANTS("2");
	EXPECT_KEY("a", "2 | 3 4");
	ck_assert_int_eq(cl_unlock(2, "a", 20), KL_OK);
	ck_assert_uint_eq(cl_grant_waited(3), 18);
	EXPECT_GRANTS("3");
	ck_assert_int_eq(cl_unlock(3, "a", 30), KL_OK);
	ck_assert_uint_eq(cl_grant_waited(4), 27);
	EXPECT_GRANTS("4");
	EXPECT_KEY("a", "4 |");
	ck_assert_int_eq(cl_unlock(4, "a", 40), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "-");
	cl_expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(trylock_on_key_with_waiter_but_no_holder_is_locked)
{
	ck_assert_int_eq(cl_lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b", 0), QUEUED);
	EXPECT_KEY("a", "| 2");

	ck_assert_int_eq(cl_trylock(3, "a", 5), KL_ERR_LOCKED);
	ck_assert_str_eq(cl_res_key, "a");
	ck_assert_ptr_null(cl_res_why.holder);
	ck_assert_uint_eq(cl_res_why.nholders, 0);
	ck_assert_uint_eq(cl_res_why.nwaiters, 1);
	ck_assert(!locktable_owner_is_waiting(cl_ow[3]));
	EXPECT_KEY("a", "| 2");
}
END_TEST

START_TEST(fifo_free_key_with_waiter_is_not_free)
{
	ck_assert_int_eq(cl_lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b", 1), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 2), QUEUED);
	EXPECT_KEY("a", "| 2 3");
	ck_assert_int_eq(cl_unlock(1, "b", 10), KL_OK);
	EXPECT_GRANTS("2");
	EXPECT_KEY("a", "2 | 3");
	EXPECT_KEY("b", "2 |");
	ck_assert_int_eq(cl_unlock(2, "a b", 20), KL_OK);
	ck_assert_uint_eq(cl_res_n, 2);
	EXPECT_GRANTS("3");
	EXPECT_KEY("b", "-");
}
END_TEST

START_TEST(fifo_different_keys_never_wait_for_each_other)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(4, "c d", 0), GRANTED);
	cl_expect_gauges(4, 4, 1);
}
END_TEST

START_TEST(fifo_later_request_waits_behind_blocked_multikey_head)
{
	/* 2 is at the head of a but blocked on b: 3 must not overtake */
	ck_assert_int_eq(cl_lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(4, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b", 1), QUEUED);
	ck_assert_int_eq(cl_lock(3, "a", 2), QUEUED);
	ck_assert_int_eq(cl_unlock(4, "a", 3), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "| 2 3");
	ck_assert_int_eq(cl_unlock(1, "b", 4), KL_OK);
	EXPECT_GRANTS("2");
}
END_TEST

/* shared */

START_TEST(shared_heads_are_granted_together)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 1), QUEUED);
	ck_assert_int_eq(cl_lock_shared(3, "a", 2), QUEUED);
	ck_assert_int_eq(cl_lock(4, "a", 3), QUEUED);
	ck_assert_int_eq(cl_lock_shared(5, "a", 4), QUEUED);
	EXPECT_KEY("a", "1 | 2s 3s 4 5s");

	ck_assert_int_eq(cl_unlock(1, "a", 10), KL_OK);
	ck_assert_uint_eq(cl_ngrants, 2);
	ck_assert_uint_ne(cl_grants[0].token, cl_grants[1].token);
	EXPECT_GRANTS("2 3");
	EXPECT_KEY("a", "2s 3s | 4 5s");
	ck_assert_int_eq(cl_unlock(2, "a", 11), KL_OK);
	EXPECT_GRANTS("");
	ck_assert_int_eq(cl_unlock(3, "a", 12), KL_OK);
	EXPECT_GRANTS("4");
	EXPECT_KEY("a", "4 | 5s");
	ck_assert_int_eq(cl_unlock(4, "a", 13), KL_OK);
	EXPECT_GRANTS("5");
}
END_TEST

START_TEST(shared_request_joins_shared_holders_at_once)
{
	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 1), GRANTED);
	ck_assert_int_eq(cl_acq(3, "a", REQ(.mode = LT_SHARED, .try = true), 2),
	    GRANTED);
	EXPECT_KEY("a", "1s 2s 3s |");
	cl_expect_gauges(1, 3, 0);
	ck_assert_int_eq(cl_trylock(4, "a", 3), KL_ERR_LOCKED);
}
END_TEST

/* A sealed hold (a session's lock-delay) admits nobody: shared and
 * semaphore requests wait or are LOCKED naming the sealed holder, and
 * are admitted once the sealed holds end. */
START_TEST(a_sealed_hold_admits_nobody_until_it_ends)
{
	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 1), GRANTED);
	ck_assert_int_eq(cl_lock_limit(1, "s", 3, 2), GRANTED);
	ck_assert_int_eq(cl_lock_limit(3, "s", 3, 3), GRANTED);
	ck_assert_uint_eq(locktable_owner_seal(cl_ow[1]), 2);
	ck_assert_uint_eq(locktable_owner_seal(cl_ow[1]), 0);
	CHECK_TABLE();
	ck_assert_int_eq(cl_acq(4, "a", REQ(.mode = LT_SHARED, .try = true), 4),
	    KL_ERR_LOCKED);
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_int_eq(cl_acq(4, "s", REQ(.limit = 3, .try = true), 5),
	    KL_ERR_LOCKED);
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_int_eq(cl_lock_shared(4, "a", 6), QUEUED);
	ck_assert_int_eq(cl_lock_limit(5, "s", 3, 7), QUEUED);
	CHECK_TABLE();
	/* another holder's release admits nobody while the seal lasts */
	ck_assert_int_eq(cl_unlock(2, "a", 8), KL_OK);
	ck_assert_int_eq(cl_unlock(3, "s", 9), KL_OK);
	EXPECT_GRANTS("");
	CHECK_TABLE();
	ck_assert_uint_eq(cl_release_owner(1, LT_WHY_EXPIRED, 10), 2);
	EXPECT_GRANTS("4 5");
	CHECK_TABLE();
	/* the seal went with its holds: a new holder is a plain one */
	ck_assert_int_eq(cl_lock_shared(1, "a", 11), GRANTED);
	EXPECT_KEY("a", "4s 1s |");
}
END_TEST

START_TEST(shared_behind_waiting_writer_queues)
{
	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 1), QUEUED);
	ck_assert_int_eq(cl_lock_shared(3, "a", 2), QUEUED);
	ck_assert_int_eq(cl_acq(4, "a", REQ(.mode = LT_SHARED, .try = true), 3),
	    KL_ERR_LOCKED);
	EXPECT_KEY("a", "1s | 2 3s");
	ck_assert_int_eq(cl_unlock(1, "a", 10), KL_OK);
	EXPECT_GRANTS("2");
	EXPECT_KEY("a", "2 | 3s");
	ck_assert_int_eq(cl_unlock(2, "a", 20), KL_OK);
	EXPECT_GRANTS("3");
}
END_TEST

START_TEST(exclusive_waits_for_every_shared_holder)
{
	ck_assert_int_eq(cl_lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock_shared(2, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(cl_unlock(1, "a", 1), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "2s | 3");
	ck_assert_int_eq(cl_unlock(2, "a", 2), KL_OK);
	EXPECT_GRANTS("3");
	EXPECT_KEY("a", "3 |");
}
END_TEST

START_TEST(shared_waits_for_exclusive_holder)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_acq(2, "a", REQ(.mode = LT_SHARED, .try = true), 0),
	    KL_ERR_LOCKED);
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_int_eq(cl_lock_shared(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_unlock(1, "a", 1), KL_OK);
	EXPECT_GRANTS("2");
}
END_TEST

/* semaphore */

START_TEST(semaphore_admits_limit_holders)
{
	ck_assert_int_eq(cl_lock_limit(1, "a", 3, 0), GRANTED);
	ck_assert_int_eq(cl_lock_limit(2, "a", 3, 1), GRANTED);
	ck_assert_int_eq(cl_lock_limit(3, "a", 3, 2), GRANTED);
	ck_assert_int_eq(cl_lock_limit(4, "a", 3, 3), QUEUED);
	ck_assert_int_eq(cl_lock_limit(5, "a", 3, 4), QUEUED);
	EXPECT_KEY("a", "1 2 3 | 4 5");
	ck_assert_int_eq(cl_acq(6, "a", REQ(.limit = 3, .try = true), 5),
	    KL_ERR_LOCKED);
	ck_assert_ptr_eq(cl_res_why.holder, cl_ow[1]);
	ck_assert_uint_eq(cl_res_why.nholders, 3);
	ck_assert_uint_eq(cl_res_why.nwaiters, 2);

	ck_assert_int_eq(cl_unlock(2, "a", 10), KL_OK);
	EXPECT_GRANTS("4");
	EXPECT_KEY("a", "1 3 4 | 5");
	ck_assert_int_eq(cl_unlock(1, "a", 11), KL_OK);
	EXPECT_GRANTS("5");
	EXPECT_KEY("a", "3 4 5 |");
	cl_expect_gauges(1, 3, 0);
}
END_TEST

START_TEST(semaphore_with_room_but_waiters_queues)
{
	/* 4 waits for b (room) and d (full): 5 must queue behind it on b */
	ck_assert_int_eq(cl_lock_limit(1, "d", 2, 0), GRANTED);
	ck_assert_int_eq(cl_lock_limit(2, "d", 2, 0), GRANTED);
	ck_assert_int_eq(cl_lock_limit(4, "b d", 2, 1), QUEUED);
	ck_assert_int_eq(cl_lock_limit(5, "b", 2, 2), QUEUED);
	ck_assert_int_eq(cl_acq(6, "b", REQ(.limit = 2, .try = true), 3),
	    KL_ERR_LOCKED);
	EXPECT_KEY("b", "| 4 5");
	ck_assert_int_eq(cl_unlock(1, "d", 4), KL_OK);
	EXPECT_GRANTS("4 5");
	EXPECT_KEY("b", "4 5 |");
	EXPECT_KEY("d", "2 4 |");
	cl_expect_gauges(2, 4, 0);
}
END_TEST

START_TEST(limit_mismatch_is_conflict)
{
	ck_assert_int_eq(cl_lock_limit(1, "a", 2, 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), KL_ERR_CONFLICT);
	ck_assert_str_eq(cl_res_key, "a");
	ck_assert_uint_eq(cl_ctr()->conflicts, 1);
	ck_assert_int_eq(cl_lock_limit(2, "a", 3, 0), KL_ERR_CONFLICT);
	ck_assert_int_eq(cl_lock_shared(2, "a", 0), KL_ERR_CONFLICT);
	ck_assert_uint_eq(cl_ctr()->conflicts, 3);
	ck_assert(!locktable_owner_is_waiting(cl_ow[2]));
	ck_assert_int_eq(cl_lock_limit(2, "a", 2, 0), GRANTED);

	/* a key in use only by a waiter has the waiter's limit */
	ck_assert_int_eq(cl_lock(3, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(4, "c b", 0), QUEUED);
	EXPECT_KEY("c", "| 4");
	ck_assert_int_eq(cl_lock_limit(5, "c", 2, 0), KL_ERR_CONFLICT);
	ck_assert_str_eq(cl_res_key, "c");
	ck_assert_int_eq(cl_lock_limit(5, "d c", 2, 0), KL_ERR_CONFLICT);
	ck_assert_str_eq(cl_res_key, "c");
	EXPECT_KEY("d", "-");
	ck_assert_uint_eq(cl_ctr()->conflicts, 5);
	cl_expect_gauges(3, 3, 1);
}
END_TEST

START_TEST(semaphore_limit_is_forgotten_when_key_empties)
{
	ck_assert_int_eq(cl_lock_limit(1, "a", 2, 0), GRANTED);
	ck_assert_int_eq(cl_unlock(1, "a", 1), KL_OK);
	EXPECT_KEY("a", "-");
	ck_assert_int_eq(cl_lock(2, "a", 2), GRANTED);
	ck_assert_uint_eq(cl_ctr()->conflicts, 0);
}
END_TEST

/* multikey */

START_TEST(multikey_grant_is_atomic_with_one_token)
{
	struct walk_buf	wb;
	uint64_t	tok;

	ck_assert_int_eq(cl_lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b c", 0), QUEUED);
	EXPECT_KEY("a", "| 2");
	EXPECT_KEY("b", "1 | 2");
	EXPECT_KEY("c", "| 2");
	cl_expect_gauges(3, 1, 1);
	ck_assert_uint_eq(cl_ctr()->grants, 1);

	ck_assert_int_eq(cl_unlock(1, "b", 10), KL_OK);
	ck_assert_uint_eq(cl_ngrants, 1);
	tok = cl_grants[0].token;
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(cl_ctr()->grants, 2);
	cl_expect_gauges(3, 3, 0);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[2]), 3);
	for (const char *const *k = (const char *const[]){ "a", "b", "c",
	    NULL }; *k != NULL; k++) {
		ck_assert_str_eq(cl_key_state(*k, 10, &wb), "2 |");
		ck_assert_uint_eq(wb.h[0].token, tok);
	}
}
END_TEST

START_TEST(multikey_immediate_grant_has_one_token)
{
	struct walk_buf	wb;
	uint64_t	tok;

	ck_assert_int_eq(cl_lock(1, "x y", 0), GRANTED);
	tok = cl_res_token;
	ck_assert_str_eq(cl_key_state("x", 0, &wb), "1 |");
	ck_assert_uint_eq(wb.h[0].token, tok);
	ck_assert_str_eq(cl_key_state("y", 0, &wb), "1 |");
	ck_assert_uint_eq(wb.h[0].token, tok);
	ck_assert_uint_eq(cl_ctr()->grants, 1);
}
END_TEST

START_TEST(multikey_opposite_orders_do_not_deadlock)
{
	ck_assert_int_eq(cl_lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(cl_lock(4, "b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a b", 1), QUEUED);
	ck_assert_int_eq(cl_lock(3, "b a", 2), QUEUED);
	ck_assert_uint_eq(cl_ctr()->deadlocks, 0);
	ck_assert_int_eq(cl_unlock(4, "b", 3), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("b", "| 2 3");
	ck_assert_int_eq(cl_unlock(1, "a", 4), KL_OK);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(cl_unlock(2, "b a", 5), KL_OK);
	EXPECT_GRANTS("3");
}
END_TEST

START_TEST(duplicate_keys_count_once)
{
	struct walk_buf	wb;

	ck_assert_int_eq(cl_lock(1, "a a b a", 0), GRANTED);
	cl_expect_gauges(2, 2, 0);
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 2);
	EXPECT_KEY("a", "1 |");
	ck_assert_int_eq(cl_lock(2, "b b", 1), QUEUED);
	ck_assert_str_eq(cl_key_state("b", 1, &wb), "1 | 2");
	ck_assert_uint_eq(wb.w[0].nkeys, 1);
	ck_assert_int_eq(cl_lock(3, "c b c", 2), QUEUED);
	ck_assert_str_eq(cl_key_state("c", 2, &wb), "| 3");
	ck_assert_uint_eq(wb.w[0].nkeys, 2);
	cl_expect_gauges(3, 2, 2);

	ck_assert_int_eq(cl_unlock(1, "a b a b", 10), KL_OK);
	ck_assert_uint_eq(cl_res_n, 2);
	ck_assert_uint_eq(cl_ctr()->releases, 2);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(cl_unlock(2, "b b", 11), KL_OK);
	ck_assert_uint_eq(cl_res_n, 1);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[3]), 2);
	ck_assert_int_eq(cl_refresh(3, "c c b", 5, 12), KL_OK);
	ck_assert_uint_eq(cl_res_n, 2);
}
END_TEST

START_TEST(multikey_keys_can_be_released_one_by_one)
{
	ck_assert_int_eq(cl_lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(cl_lock(3, "b", 0), QUEUED);
	ck_assert_int_eq(cl_unlock(1, "b", 1), KL_OK);
	ck_assert_uint_eq(cl_res_n, 1);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[1]), 1);
	ck_assert_int_eq(cl_unlock(1, "a", 2), KL_OK);
	EXPECT_GRANTS("2");
}
END_TEST

void
cl_add_queue(Suite *s)
{
	TCase	*tc;

	tc = cl_tcase(s, "fifo");
	tcase_add_test(tc, fifo_grants_in_arrival_order);
	tcase_add_test(tc, trylock_on_key_with_waiter_but_no_holder_is_locked);
	tcase_add_test(tc, fifo_free_key_with_waiter_is_not_free);
	tcase_add_test(tc, fifo_different_keys_never_wait_for_each_other);
	tcase_add_test(tc,
	    fifo_later_request_waits_behind_blocked_multikey_head);

	tc = cl_tcase(s, "shared");
	tcase_add_test(tc, shared_heads_are_granted_together);
	tcase_add_test(tc, shared_request_joins_shared_holders_at_once);
	tcase_add_test(tc, shared_behind_waiting_writer_queues);
	tcase_add_test(tc, exclusive_waits_for_every_shared_holder);
	tcase_add_test(tc, shared_waits_for_exclusive_holder);

	tc = cl_tcase(s, "semaphore");
	tcase_add_test(tc, semaphore_admits_limit_holders);
	tcase_add_test(tc, semaphore_with_room_but_waiters_queues);
	tcase_add_test(tc, limit_mismatch_is_conflict);
	tcase_add_test(tc, semaphore_limit_is_forgotten_when_key_empties);

	tc = cl_tcase(s, "multikey");
	tcase_add_test(tc, multikey_grant_is_atomic_with_one_token);
	tcase_add_test(tc, multikey_immediate_grant_has_one_token);
	tcase_add_test(tc, multikey_opposite_orders_do_not_deadlock);
	tcase_add_test(tc, duplicate_keys_count_once);
	tcase_add_test(tc, multikey_keys_can_be_released_one_by_one);
	tcase_add_test(tc, a_sealed_hold_admits_nobody_until_it_ends);
}
