/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The STATS document: every member the protocol lists with its type,
 * the counters against the lock table's, the wait histograms and the
 * hot keys.
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

START_TEST(stats_lists_every_protocol_member_with_its_type)
{
	static const char *const counters[] = {
		"uptime_ms", "clients", "keys", "held", "waiting", "grants",
		"timeouts", "busy", "deadlocks", "conflicts", "releases",
		"expired", "disconnect_releases", "max_waiters", "table_bytes"
	};
	uint64_t	counts[64], uppers[64];

	cs_stats_at(START_MS);
	ck_assert_str_eq(cs_str_member(cs_doc, "version"), TEST_VERSION);
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		cs_uint_member(cs_doc, counters[i]);
	cs_check_hist(cs_member(cs_doc, "wait_ms"), "wait_ms", counts, uppers,
	    64);
	cs_check_hist(cs_member(cs_doc, "hold_ms"), "hold_ms", counts, uppers,
	    64);
	cs_array_member(cs_doc, "hot_keys");
}
END_TEST

START_TEST(stats_of_an_empty_table_is_all_zero)
{
	cs_stats_at(START_MS + 5);
	EXPECT_U(cs_doc, "uptime_ms", 5);
	cs_expect_counters(0, 0, 0);
	EXPECT_U(cs_doc, "grants", 0);
	EXPECT_U(cs_doc, "timeouts", 0);
	EXPECT_U(cs_doc, "busy", 0);
	EXPECT_U(cs_doc, "deadlocks", 0);
	EXPECT_U(cs_doc, "conflicts", 0);
	EXPECT_U(cs_doc, "releases", 0);
	EXPECT_U(cs_doc, "expired", 0);
	EXPECT_U(cs_doc, "disconnect_releases", 0);
	EXPECT_U(cs_doc, "max_waiters", 0);
	cs_expect_hist("wait_ms", NULL, 0);
	cs_expect_hist("hold_ms", NULL, 0);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "hot_keys")),
	    0);
}
END_TEST

START_TEST(stats_uptime_counts_from_the_start)
{
	cs_stats_at(START_MS);
	EXPECT_U(cs_doc, "uptime_ms", 0);
	cs_stats_at(START_MS + 123456);
	EXPECT_U(cs_doc, "uptime_ms", 123456);
}
END_TEST

START_TEST(stats_reports_the_servers_own_counters)
{
	cs_stats_at(START_MS);
	EXPECT_U(cs_doc, "clients", 11);
	EXPECT_U(cs_doc, "connections", 17);
	EXPECT_U(cs_doc, "rejected_connections", 2);
	EXPECT_U(cs_doc, "requests", 400);
	EXPECT_U(cs_doc, "errors", 9);
	EXPECT_U(cs_doc, "auth_failures", 3);
	EXPECT_U(cs_doc, "output_closes", 1);
	EXPECT_U(cs_doc, "etcd_txns", 70);
	EXPECT_U(cs_doc, "etcd_txn_failures", 4);
	EXPECT_U(cs_doc, "etcd_rebuilds", 5);
	EXPECT_U(cs_doc, "etcd_losses", 6);
	EXPECT_U(cs_doc, "etcd_bad_entries", 7);
	EXPECT_U(cs_doc, "etcd_reaped", 8);
}
END_TEST

START_TEST(stats_is_one_compact_line)
{
	cs_busy_table();
	cs_stats_at(2000);
	ck_assert_ptr_null(strchr(cs_text, '\n'));
	ck_assert_msg(cs_text[0] == '{' && cs_text[strlen(cs_text) - 1] == '}',
	    "not one object: %s", cs_text);
	ck_assert_msg(strstr(cs_text, ": ") == NULL &&
	    strstr(cs_text, ", ") == NULL,
	    "not compact: %s", cs_text);
}
END_TEST

/* ---- STATS: gauges and counters ---- */

START_TEST(stats_gauges_count_keys_holds_and_waiting_requests)
{
	cs_busy_table();
	cs_stats_at(1100);
	cs_expect_counters(3, 4, 3);	/* a b c; 1+2+1 holds; 2,3 and 4 */
	EXPECT_U(cs_doc, "grants", 4);
	EXPECT_U(cs_doc, "max_waiters", 2);
}
END_TEST

START_TEST(stats_multi_key_grant_counts_once_but_holds_per_key)
{
	ck_assert_int_eq(cs_acq(1, "x y z", NULL, 1000, NULL), GRANTED);
	cs_stats_at(1000);
	cs_expect_counters(3, 3, 0);
	EXPECT_U(cs_doc, "grants", 1);
	cs_expect_hist("wait_ms", (const uint64_t[]){ 0 }, 1);
}
END_TEST

START_TEST(stats_counts_every_way_a_request_or_hold_ends)
{
	uint64_t	tok;

	cs_busy_table();
	/* release: 1 leaves a after 200 ms; 2 is granted after 190 ms */
	cs_unlock(1, "a", 1200);
	ck_assert_uint_eq(cs_ngranted, 1);
	ck_assert_uint_eq(cs_last_granted_token, 104);
	/* timeout: 3 gives up on a */
	ck_assert(locktable_withdraw(cs_lt, cs_ow[3], 1300, LT_WHY_TIMEOUT));
	/* busy: a already has... no waiter now; 3 queues, 6 is refused */
	ck_assert_int_eq(cs_acq(3, "a", NULL, 1310, NULL), QUEUED);
	ck_assert_int_eq(cs_acq(6, "a", OPTS(.has_mw = true, .mw = 1), 1320,
	    NULL), 10 + KL_ERR_BUSY);
	/* conflict: b is in use with limit 1 */
	ck_assert_int_eq(cs_acq(6, "b", OPTS(.limit = 2), 1330, NULL),
	    10 + KL_ERR_CONFLICT);
	/* deadlock: 1 holds c and waits for d held by 7; 7 asks for c */
	ck_assert_int_eq(cs_acq(7, "d", NULL, 1340, &tok), GRANTED);
	ck_assert_int_eq(cs_acq(1, "d", NULL, 1350, NULL), QUEUED);
	ck_assert_int_eq(cs_acq(7, "c", NULL, 1360, NULL),
	    10 + KL_ERR_DEADLOCK);
	/* try on a key that is not free counts nothing */
	ck_assert_int_eq(cs_acq(8, "d", OPTS(.try = true), 1365, NULL),
	    10 + KL_ERR_LOCKED);
	/* expiry: 9 holds e for 10 ms */
	ck_assert_int_eq(cs_acq(9, "e", OPTS(.ttl_ms = 10), 1370, &tok),
	    GRANTED);
	ck_assert_uint_eq(locktable_expire(cs_lt, 1380), 1);
	/* disconnect: 4 holds b (shared) and waits for c */
	ck_assert_uint_eq(locktable_release_owner(cs_lt, cs_ow[4], 1400,
	    LT_WHY_DISCONNECT), 1);

	cs_stats_at(1400);
	EXPECT_U(cs_doc, "grants", 7);		/* 100..103, 104, d, e */
	EXPECT_U(cs_doc, "releases", 1);
	EXPECT_U(cs_doc, "timeouts", 1);
	EXPECT_U(cs_doc, "busy", 1);
	EXPECT_U(cs_doc, "conflicts", 1);
	EXPECT_U(cs_doc, "deadlocks", 1);
	EXPECT_U(cs_doc, "expired", 1);
	EXPECT_U(cs_doc, "disconnect_releases", 1);
	/* a: 2 holds, 3 waits; b: 5; c: 1; d: 7 holds, 1 waits */
	cs_expect_counters(4, 4, 2);
	cs_expect_hist("wait_ms", (const uint64_t[]){ 0, 0, 0, 0, 190, 0, 0 },
	    7);
	cs_expect_hist("hold_ms", (const uint64_t[]){ 200, 10, 370 }, 3);
}
END_TEST

START_TEST(stats_shows_keys_0_once_everybody_left)
{
	cs_busy_table();
	for (int i = 1; i < NOWNERS; i++)
		locktable_release_owner(cs_lt, cs_ow[i], 1500,
		    LT_WHY_DISCONNECT);
	cs_stats_at(1500);
	cs_expect_counters(0, 0, 0);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "hot_keys")),
	    0);
	/* the peak stays */
	EXPECT_U(cs_doc, "max_waiters", 2);
}
END_TEST

START_TEST(stats_json_mirrors_the_lock_table_counters)
{
	const struct lt_counters	*c;

	cs_busy_table();
	cs_unlock(1, "a c", 1500);
	cs_stats_at(1600);
	c = locktable_counters(cs_lt);
	EXPECT_U(cs_doc, "keys", c->keys);
	EXPECT_U(cs_doc, "held", c->held);
	EXPECT_U(cs_doc, "waiting", c->waiting);
	EXPECT_U(cs_doc, "grants", c->grants);
	EXPECT_U(cs_doc, "releases", c->releases);
	EXPECT_U(cs_doc, "max_waiters", c->max_waiters);
	EXPECT_U(cs_member(cs_doc, "wait_ms"), "count",
	    kl_hist_count(&c->wait_ms));
	EXPECT_U(cs_member(cs_doc, "wait_ms"), "sum_ms", c->wait_ms.sum_ms);
	EXPECT_U(cs_member(cs_doc, "hold_ms"), "count",
	    kl_hist_count(&c->hold_ms));
	EXPECT_U(cs_member(cs_doc, "hold_ms"), "sum_ms", c->hold_ms.sum_ms);
}
END_TEST

/* ---- STATS: histograms ---- */

START_TEST(histogram_buckets_are_upper_count_pairs_ending_in_null)
{
	uint64_t	counts[64], uppers[64];
	size_t		n;

	cs_stats_at(START_MS);
	n = cs_check_hist(cs_member(cs_doc, "wait_ms"), "wait_ms", counts,
	    uppers, 64);
	ck_assert_uint_eq(n, KL_HIST_NBUCKETS);
	for (size_t i = 0; i + 1 < n; i++)
		ck_assert_uint_eq(uppers[i], kl_hist_bound(i));
	n = cs_check_hist(cs_member(cs_doc, "hold_ms"), "hold_ms", counts,
	    uppers, 64);
	ck_assert_uint_eq(n, KL_HIST_NBUCKETS);
}
END_TEST

START_TEST(histogram_counts_per_bucket_not_cumulative)
{
	static const uint64_t	holds[] = { 0, 1, 3, 3, 70, 250, 251,
	    999999 };
	char			key[8];

	/* One hold per value: grant at 1000, release after holds[i] ms. */
	for (size_t i = 0; i < sizeof(holds) / sizeof(holds[0]); i++) {
		snprintf(key, sizeof(key), "h%zu", i);
		ck_assert_int_eq(cs_acq(1, key, NULL, 1000, NULL), GRANTED);
		cs_unlock(1, key, 1000 + holds[i]);
	}
	cs_stats_at(2000000);
	cs_expect_hist("hold_ms", holds, sizeof(holds) / sizeof(holds[0]));
	cs_expect_hist("wait_ms", (const uint64_t[]){ 0, 0, 0, 0, 0, 0, 0, 0 },
	    8);
}
END_TEST

START_TEST(histogram_wait_is_time_from_request_to_grant)
{
	ck_assert_int_eq(cs_acq(1, "w", NULL, 1000, NULL), GRANTED);
	ck_assert_int_eq(cs_acq(2, "w", NULL, 1000, NULL), QUEUED);
	ck_assert_int_eq(cs_acq(3, "w", NULL, 1004, NULL), QUEUED);
	cs_unlock(1, "w", 1030);		/* 2 waited 30 */
	cs_unlock(2, "w", 1100);		/* 3 waited 96 */
	cs_stats_at(1100);
	cs_expect_hist("wait_ms", (const uint64_t[]){ 0, 30, 96 }, 3);
	cs_expect_hist("hold_ms", (const uint64_t[]){ 30, 70 }, 2);
}
END_TEST

/* ---- STATS: hot keys ---- */

START_TEST(hot_keys_lists_most_waiters_first_with_all_members)
{
	cs_busy_table();
	cs_stats_at(1100);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "hot_keys")),
	    3);
	cs_expect_hot(0, "a", 1, 2, 2, 0);
	cs_expect_hot(1, "c", 1, 1, 1, 0);
	cs_expect_hot(2, "b", 2, 0, 0, 0);
}
END_TEST

START_TEST(hot_keys_wait_total_adds_the_waits_of_grants)
{
	cs_busy_table();
	cs_unlock(1, "a", 1200);		/* 2 waited 190 */
	cs_unlock(2, "a", 1250);		/* 3 waited 230 */
	cs_stats_at(1250);
	cs_expect_hot(0, "c", 1, 1, 1, 0);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "hot_keys")),
	    3);
	for (size_t i = 1; i < 3; i++) {
		json_t	*e = json_array_get(cs_member(cs_doc, "hot_keys"), i);

		if (strcmp(cs_str_member(e, "key"), "a") == 0)
			cs_expect_hot(i, "a", 1, 0, 2, 420);
		else
			cs_expect_hot(i, "b", 2, 0, 0, 0);
	}
}
END_TEST

START_TEST(hot_keys_stops_at_10)
{
	char	key[16];

	/* 15 keys; key kN has N waiters for N = 0..14 (owner 1 holds). */
	for (int k = 0; k < 15; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		ck_assert_int_eq(cs_acq(1, key, NULL, 1000, NULL), GRANTED);
	}
	for (int w = 2; w < NOWNERS; w++) {
		/* owner w waits for every key with more than w - 2 waiters
		 * wanted: one multi-key request per owner */
		char	keys[256] = "";

		for (int k = w - 1; k < 15; k++) {
			snprintf(key, sizeof(key), "%sk%d", keys[0] ? " " : "",
			    k);
			strncat(keys, key, sizeof(keys) - strlen(keys) - 1);
		}
		ck_assert_int_eq(cs_acq(w, keys, NULL, 1001, NULL), QUEUED);
	}
	cs_stats_at(1002);
	ck_assert_uint_eq(json_array_size(cs_array_member(cs_doc, "hot_keys")),
	    KL_HOT_KEYS);
	/* k10..k14 have 10 waiters (owners 2..11); k9 has 9 ... */
	for (size_t i = 0; i < KL_HOT_KEYS; i++) {
		json_t		*hot = cs_member(cs_doc, "hot_keys");
		json_t		*e = json_array_get(hot, i);
		uint64_t	 w = cs_uint_member(e, "waiters");
		const char	*k = cs_str_member(e, "key");
		int		 kn = atoi(k + 1);

		ck_assert_uint_eq(w, kn >= 10 ? 10 : (uint64_t)kn);
		if (i > 0) {
			json_t	*p = json_array_get(hot, i - 1);

			ck_assert_uint_le(w, cs_uint_member(p, "waiters"));
		}
	}
}
END_TEST

START_TEST(hot_keys_escapes_key_bytes)
{
	static const char	key[] = "q\"uo\\te/\xc3\xa9";

	ck_assert_int_eq(cs_acq(1, key, NULL, 1000, NULL), GRANTED);
	cs_stats_at(1000);
	cs_expect_hot(0, key, 1, 0, 0, 0);
}
END_TEST

void
cs_add_stats(Suite *s)
{
	TCase	*tc;

	tc = cs_tcase(s, "members");
	tcase_add_test(tc, stats_lists_every_protocol_member_with_its_type);
	tcase_add_test(tc, stats_of_an_empty_table_is_all_zero);
	tcase_add_test(tc, stats_uptime_counts_from_the_start);
	tcase_add_test(tc, stats_reports_the_servers_own_counters);
	tcase_add_test(tc, stats_is_one_compact_line);

	tc = cs_tcase(s, "counters");
	tcase_add_test(tc, stats_gauges_count_keys_holds_and_waiting_requests);
	tcase_add_test(tc, stats_multi_key_grant_counts_once_but_holds_per_key);
	tcase_add_test(tc, stats_counts_every_way_a_request_or_hold_ends);
	tcase_add_test(tc, stats_shows_keys_0_once_everybody_left);
	tcase_add_test(tc, stats_json_mirrors_the_lock_table_counters);

	tc = cs_tcase(s, "histograms");
	tcase_add_test(tc,
	    histogram_buckets_are_upper_count_pairs_ending_in_null);
	tcase_add_test(tc, histogram_counts_per_bucket_not_cumulative);
	tcase_add_test(tc, histogram_wait_is_time_from_request_to_grant);

	tc = cs_tcase(s, "hot_keys");
	tcase_add_test(tc, hot_keys_lists_most_waiters_first_with_all_members);
	tcase_add_test(tc, hot_keys_wait_total_adds_the_waits_of_grants);
	tcase_add_test(tc, hot_keys_stops_at_10);
	tcase_add_test(tc, hot_keys_escapes_key_bytes);
}
