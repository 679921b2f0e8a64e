/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The INFO document of one key: holders with client, name, token, mode
 * and held time, waiters in queue order, shared holders and semaphores,
 * escaped keys, and lists capped at 1000 with exact totals.
 */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "check_stats.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"
#include "stats.h"

START_TEST(info_lists_holders_with_client_name_token_mode_held_ms)
{
	json_t	*h, *e;

	cs_busy_table();
	cs_info_at("a", 1100);
	ck_assert_str_eq(cs_str_member(cs_doc, "key"), "a");
	EXPECT_U(cs_doc, "limit", 1);
	h = cs_array_member(cs_doc, "holders");
	ck_assert_uint_eq(json_array_size(h), 1);
	e = json_array_get(h, 0);
	EXPECT_U(e, "client", 1);
	ck_assert_str_eq(cs_str_member(e, "name"), "alpha");
	EXPECT_U(e, "token", 100);
	ck_assert_str_eq(cs_str_member(e, "mode"), "exclusive");
	EXPECT_U(e, "held_ms", 100);
}
END_TEST

START_TEST(info_lists_waiters_in_queue_order)
{
	json_t	*w, *e;

	cs_busy_table();
	cs_info_at("a", 1100);
	w = cs_array_member(cs_doc, "waiters");
	ck_assert_uint_eq(json_array_size(w), 2);
	e = json_array_get(w, 0);
	EXPECT_U(e, "client", 2);
	ck_assert(json_is_null(cs_member(e, "name")));
	ck_assert_str_eq(cs_str_member(e, "mode"), "exclusive");
	EXPECT_U(e, "waited_ms", 90);
	e = json_array_get(w, 1);
	EXPECT_U(e, "client", 3);
	ck_assert_str_eq(cs_str_member(e, "name"), "ga\"mma\\");
	ck_assert_str_eq(cs_str_member(e, "mode"), "exclusive");
	EXPECT_U(e, "waited_ms", 80);
}
END_TEST

START_TEST(info_name_is_null_when_unnamed)
{
	json_t	*e;

	ck_assert_int_eq(cs_acq(2, "k", NULL, 1000, NULL), GRANTED);
	cs_info_at("k", 1000);
	e = json_array_get(cs_array_member(cs_doc, "holders"), 0);
	ck_assert_ptr_nonnull(e);
	ck_assert(json_is_null(cs_member(e, "name")));
	EXPECT_U(e, "held_ms", 0);
}
END_TEST

START_TEST(info_lists_shared_holders_in_grant_order)
{
	json_t	*h, *e;

	cs_busy_table();
	cs_info_at("b", 1100);
	h = cs_array_member(cs_doc, "holders");
	ck_assert_uint_eq(json_array_size(h), 2);
	e = json_array_get(h, 0);
	EXPECT_U(e, "client", 4);
	EXPECT_U(e, "token", 101);
	ck_assert_str_eq(cs_str_member(e, "mode"), "shared");
	EXPECT_U(e, "held_ms", 70);
	e = json_array_get(h, 1);
	EXPECT_U(e, "client", 5);
	ck_assert_str_eq(cs_str_member(e, "name"), "\xce\xb5psilon");
	EXPECT_U(e, "token", 102);
	ck_assert_str_eq(cs_str_member(e, "mode"), "shared");
	EXPECT_U(e, "held_ms", 60);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "waiters")),
	    0);
}
END_TEST

START_TEST(info_shows_a_shared_waiter_behind_an_exclusive_one)
{
	json_t	*w;

	cs_busy_table();
	ck_assert_int_eq(cs_acq(6, "b", NULL, 1070, NULL), QUEUED);
	ck_assert_int_eq(cs_acq(7, "b", OPTS(.mode = LT_SHARED), 1080, NULL),
	    QUEUED);
	cs_info_at("b", 1100);
	w = cs_array_member(cs_doc, "waiters");
	ck_assert_uint_eq(json_array_size(w), 2);
	EXPECT_U(json_array_get(w, 0), "client", 6);
	ck_assert_str_eq(cs_str_member(json_array_get(w, 0), "mode"),
	    "exclusive");
	EXPECT_U(json_array_get(w, 1), "client", 7);
	ck_assert_str_eq(cs_str_member(json_array_get(w, 1), "mode"), "shared");
	EXPECT_U(json_array_get(w, 1), "waited_ms", 20);
}
END_TEST

START_TEST(info_shows_the_semaphore_limit)
{
	ck_assert_int_eq(cs_acq(1, "sem", OPTS(.limit = 3), 1000, NULL),
	    GRANTED);
	ck_assert_int_eq(cs_acq(2, "sem", OPTS(.limit = 3), 1000, NULL),
	    GRANTED);
	cs_info_at("sem", 1001);
	EXPECT_U(cs_doc, "limit", 3);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "holders")),
	    2);
}
END_TEST

START_TEST(info_of_a_key_not_in_the_table_has_no_holders_or_waiters)
{
	cs_info_at("nobody", 1000);
	ck_assert_str_eq(cs_str_member(cs_doc, "key"), "nobody");
	EXPECT_U(cs_doc, "limit", 1);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "holders")),
	    0);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "waiters")),
	    0);
	ck_assert_ptr_nonnull(strstr(cs_text, "\"holders\":[]"));
	ck_assert_ptr_nonnull(strstr(cs_text, "\"waiters\":[]"));
}
END_TEST

START_TEST(info_of_a_released_key_has_no_holders_or_waiters)
{
	ck_assert_int_eq(cs_acq(1, "gone", NULL, 1000, NULL), GRANTED);
	cs_unlock(1, "gone", 1001);
	cs_info_at("gone", 1002);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "holders")),
	    0);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "waiters")),
	    0);
}
END_TEST

START_TEST(info_key_is_escaped_and_round_trips)
{
	static const char	key[] = "a\"b\\c/\xe2\x82\xac";

	ck_assert_int_eq(cs_acq(3, key, NULL, 1000, NULL), GRANTED);
	cs_info_at(key, 1000);
	ck_assert_str_eq(cs_str_member(cs_doc, "key"), key);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "holders")),
	    1);
}
END_TEST

START_TEST(info_lists_stop_at_1000_and_totals_stay_exact)
{
	struct lt_owner		*many[1100];
	struct lt_acquire	 a;
	const char		*keys[] = { "hot" };
	size_t			 lens[] = { 3 };
	uint64_t		 tok;
	bool			 granted;
	json_t			*w;

	memset(&a, 0, sizeof(a));
	a.keys = keys;
	a.keylens = lens;
	a.nkeys = 1;
	a.limit = 1;
	a.max_waiters = -1;
	for (size_t i = 0; i < 1100; i++) {
		many[i] = locktable_owner_new(cs_lt, 100 + i,
		    (void *)(uintptr_t)&cs_infos[0]);
		ck_assert_ptr_nonnull(many[i]);
		ck_assert_int_eq(locktable_acquire(cs_lt, many[i], &a, START_MS,
		    &granted, &tok, NULL), KL_OK);
		ck_assert(granted == (i == 0));
	}
	cs_info_at("hot", START_MS + 5);
	w = cs_array_member(cs_doc, "waiters");
	ck_assert_uint_eq(json_array_size(w), KL_INFO_LIST_MAX);
	EXPECT_U(json_array_get(w, 0), "client", 101);
	EXPECT_U(cs_doc, "waiters_total", 1099);
	EXPECT_U(cs_doc, "holders_total", 1);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "holders")),
	    1);
	for (size_t i = 0; i < 1100; i++)
		locktable_owner_free(cs_lt, many[i], START_MS + 6);
	ck_assert_uint_eq(locktable_counters(cs_lt)->keys, 0);
}
END_TEST

START_TEST(info_is_one_line)
{
	cs_busy_table();
	cs_info_at("a", 1100);
	ck_assert_ptr_null(strchr(cs_text, '\n'));
	ck_assert_msg(cs_text[0] == '{' && cs_text[strlen(cs_text) - 1] == '}',
	    "not one object: %s", cs_text);
}
END_TEST

START_TEST(info_tokens_are_json_integers)
{
	json_t	*e;

	cs_next_tok = (UINT64_C(1) << 62) + 7;
	ck_assert_int_eq(cs_acq(1, "big", NULL, 1000, NULL), GRANTED);
	cs_info_at("big", 1000);
	e = json_array_get(cs_array_member(cs_doc, "holders"), 0);
	EXPECT_U(e, "token", (UINT64_C(1) << 62) + 7);
}
END_TEST

void
cs_add_info(Suite *s)
{
	TCase	*tc;

	tc = cs_tcase(s, "info");
	tcase_add_test(tc,
	    info_lists_holders_with_client_name_token_mode_held_ms);
	tcase_add_test(tc, info_lists_waiters_in_queue_order);
	tcase_add_test(tc, info_name_is_null_when_unnamed);
	tcase_add_test(tc, info_lists_shared_holders_in_grant_order);
	tcase_add_test(tc, info_shows_a_shared_waiter_behind_an_exclusive_one);
	tcase_add_test(tc, info_shows_the_semaphore_limit);
	tcase_add_test(tc,
	    info_of_a_key_not_in_the_table_has_no_holders_or_waiters);
	tcase_add_test(tc, info_of_a_released_key_has_no_holders_or_waiters);
	tcase_add_test(tc, info_key_is_escaped_and_round_trips);
	tcase_add_test(tc, info_is_one_line);
	tcase_add_test(tc, info_lists_stop_at_1000_and_totals_stay_exact);
	tcase_add_test(tc, info_tokens_are_json_integers);
}
