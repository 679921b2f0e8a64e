/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Server-wide state against a private daemon: STATS counters with
 * absolute values, every way out of a lock freeing its key, hot keys; a
 * SIGTERM that answers waiters, closes everyone and exits 0; fencing
 * tokens that keep increasing across a restart and a crash.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

/* counters (private daemon: absolute values) */

START_TEST(stats_counters_follow_the_requests)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*o = kt_connect();
	json_t		*s;

	kt_wait_stat(o, "clients", 3);
	s = kt_stats(o);
	for (int i = 2; pu_stats_ints[i] != NULL; i++)
		ck_assert_msg(kt_jint(s, pu_stats_ints[i]) == 0,
		    "fresh daemon: \"%s\" is %lld", pu_stats_ints[i],
		    (long long)kt_jint(s, pu_stats_ints[i]));
	ck_assert_uint_eq(json_array_size(json_object_get(s, "hot_keys")), 0);
	json_decref(s);

	kt_lock(a, "LOCK c:s1");
	kt_lock(a, "LOCK c:s2 c:s3");
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "grants"), 2);	/* one per grant */
	ck_assert_int_eq(kt_jint(s, "held"), 3);	/* one per key */
	ck_assert_int_eq(kt_jint(s, "keys"), 3);
	json_decref(s);
	kt_send(b, "LOCK c:s1");
	json_decref(kt_wait_queue(o, "c:s1", 1, 1));
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "waiting"), 1);
	ck_assert_int_eq(kt_jint(s, "max_waiters"), 1);
	json_decref(s);
	kt_req(a, "OK 1", "UNLOCK c:s1");
	kt_expect_token(b);
	kt_req_err(b, "TIMEOUT", "LOCK c:s2 timeout=50");
	kt_req_err(b, "BUSY", "LOCK c:s2 max_waiters=0");
	kt_req_err(b, "CONFLICT", "LOCK c:s2 limit=2");
	kt_send(b, "LOCK c:s3");
	json_decref(kt_wait_queue(o, "c:s3", 1, 1));
	kt_req_err(a, "DEADLOCK", "LOCK c:s1");
	kt_req(a, "OK 1", "UNLOCK c:s3");
	kt_expect_token(b);
	kt_lock(a, "LOCK c:s4 ttl=50");
	kt_wait_stat(o, "expired", 1);
	kt_conn_close(b);
	kt_wait_stat(o, "disconnect_releases", 2);
	kt_req(a, "OK 1", "UNLOCKALL");
	kt_wait_stat(o, "clients", 2);

	s = kt_stats(o);
	pu_check_stats_shape(s);
	ck_assert_int_eq(kt_jint(s, "keys"), 0);
	ck_assert_int_eq(kt_jint(s, "held"), 0);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	ck_assert_int_eq(kt_jint(s, "grants"), 5);
	ck_assert_int_eq(kt_jint(s, "timeouts"), 1);
	ck_assert_int_eq(kt_jint(s, "busy"), 1);
	ck_assert_int_eq(kt_jint(s, "deadlocks"), 1);
	ck_assert_int_eq(kt_jint(s, "conflicts"), 1);
	ck_assert_int_eq(kt_jint(s, "releases"), 3);
	ck_assert_int_eq(kt_jint(s, "expired"), 1);
	ck_assert_int_eq(kt_jint(s, "disconnect_releases"), 2);
	ck_assert_int_eq(kt_jint(s, "max_waiters"), 1);
	/* every grant has a request-to-grant time; every hold a length */
	ck_assert_int_eq(kt_jint(json_object_get(s, "wait_ms"), "count"), 5);
	ck_assert_int_eq(kt_jint(json_object_get(s, "hold_ms"), "count"), 6);
	ck_assert_uint_eq(json_array_size(json_object_get(s, "hot_keys")), 0);
	json_decref(s);
}
END_TEST

START_TEST(every_exit_path_frees_the_key)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*o = kt_connect();

	/* unlock */
	kt_lock(h, "LOCK ex:a ex:b");
	kt_req(h, "OK 1", "UNLOCK ex:a");
	kt_wait_stat(o, "keys", 1);
	kt_req(h, "OK 1", "UNLOCK ex:b");
	kt_wait_stat(o, "keys", 0);
	/* timeout, busy, conflict, locked, held: only the holder's key */
	kt_lock(h, "LOCK ex:k");
	kt_req_err(w, "TIMEOUT", "LOCK ex:k ex:t1 ex:t2 timeout=30");
	kt_req_err(w, "BUSY", "LOCK ex:k ex:b1 max_waiters=0");
	kt_req_err(w, "CONFLICT", "LOCK ex:c1 ex:k limit=5");
	kt_req_err(w, "LOCKED", "TRYLOCK ex:l1 ex:k");
	kt_req_err(h, "HELD", "LOCK ex:h1 ex:k");
	kt_wait_stat(o, "keys", 1);
	kt_wait_stat(o, "waiting", 0);
	/* deadlock */
	kt_lock(w, "LOCK ex:w");
	kt_send(h, "LOCK ex:w ex:d1");
	json_decref(kt_wait_queue(o, "ex:w", 1, 1));
	kt_req_err(w, "DEADLOCK", "LOCK ex:d2 ex:k");
	kt_req(w, "OK 1", "UNLOCKALL");
	kt_expect_token(h);
	kt_req(h, "OK 3", "UNLOCKALL");
	kt_wait_stat(o, "keys", 0);
	/* ttl */
	kt_lock(h, "LOCK ex:ttl1 ex:ttl2 ttl=30");
	kt_wait_stat(o, "keys", 0);
	/* disconnect of a waiter, then of a holder */
	kt_lock(h, "LOCK ex:k");
	kt_send(w, "LOCK ex:k ex:v");
	json_decref(kt_wait_queue(o, "ex:k", 1, 1));
	kt_conn_close(w);
	kt_wait_stat(o, "keys", 1);
	kt_conn_close(h);
	kt_wait_stat(o, "keys", 0);
	kt_wait_stat(o, "held", 0);
	kt_wait_stat(o, "waiting", 0);
}
END_TEST

START_TEST(hot_keys_lists_the_ten_most_waited_for_keys)
{
	struct kt_conn	*h = kt_connect(), *o = kt_connect(), *w[18];
	json_t		*s, *hk;
	int		 nw = 0;

	/* 12 keys held; key i has i % 4 waiters (18 in all) */
	for (int i = 0; i < 12; i++)
		kt_lock(h, "LOCK hk:%02d", i);
	for (int i = 0; i < 12; i++)
		for (int j = 0; j < i % 4; j++) {
			char key[16];

			w[nw] = kt_connect();
			kt_send(w[nw++], "LOCK hk:%02d", i);
			snprintf(key, sizeof(key), "hk:%02d", i);
			json_decref(kt_wait_queue(o, key, 1, (size_t)j + 1));
		}
	ck_assert_int_eq(nw, 18);
	s = kt_stats(o);
	pu_check_stats_shape(s);
	hk = json_object_get(s, "hot_keys");
	ck_assert_uint_eq(json_array_size(hk), 10);
	for (size_t i = 0; i < 10; i++) {
		json_t		*k = json_array_get(hk, i);
		const char	*name = json_string_value(json_object_get(k,
				    "key"));
		int		 idx = name != NULL && strlen(name) == 5 ?
				    atoi(name + 3) : -1;
		json_int_t	 want = i < 3 ? 3 : i < 6 ? 2 : i < 9 ? 1 : 0;

		ck_assert_msg(idx >= 0 && idx < 12, "hot_keys[%zu] is \"%s\"",
		    i, name != NULL ? name : "?");
		ck_assert_int_eq(kt_jint(k, "waiters"), want);
		ck_assert_int_eq(kt_jint(k, "waiters"), idx % 4);
		ck_assert_int_eq(kt_jint(k, "holders"), 1);
		ck_assert_int_ge(kt_jint(k, "max_waiters"), want);
	}
	ck_assert_int_eq(kt_jint(s, "max_waiters"), 3);
	ck_assert_int_eq(kt_jint(s, "waiting"), 18);
	ck_assert_int_eq(kt_jint(s, "keys"), 12);
	json_decref(s);
}
END_TEST

/* lifecycle */

START_TEST(sigterm_answers_waiters_closes_everyone_and_exits_zero)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*idle = kt_connect(), *u = kt_connect_unix();
	struct kt_conn	*o = kt_connect();

	kt_lock(h, "LOCK sd:k");
	kt_send(w, "LOCK sd:k");
	kt_send(u, "LOCK sd:k timeout=60000");
	json_decref(kt_wait_queue(o, "sd:k", 1, 2));
	kt_daemon_signal(kt_d, SIGTERM);
	kt_expect_err(w, "SHUTDOWN");
	kt_expect_err(u, "SHUTDOWN");
	kt_expect_eof(w, kt_ms(3000));
	kt_expect_eof(u, kt_ms(3000));
	kt_expect_eof(h, kt_ms(3000));
	kt_expect_eof(idle, kt_ms(3000));
	kt_expect_eof(o, kt_ms(3000));
	kt_daemon_wait(kt_d);
}
END_TEST

/* restart */

START_TEST(tokens_increase_across_restart_and_crash)
{
	const char	*state = kt_tmpdir();
	struct kt_daemon *d;
	struct kt_conn	*c;
	uint64_t	 max = 0, t;

	ck_assert_ptr_nonnull(state);
	for (int round = 0; round < 3; round++) {
		d = kt_d = kt_daemon_start_at(__FILE__, __LINE__, state, NULL);
		c = kt_connect();
		for (int i = 0; i < 10; i++) {
			t = kt_lock(c, "LOCK rs:k%d", i);
			ck_assert_msg(t > max, "round %d: token %llu not above "
			    "%llu from before", round, (unsigned long long)t,
			    (unsigned long long)max);
			max = t;
		}
		kt_conn_close(c);
		if (round == 0)
			kt_daemon_stop(d);
		else {
			kt_daemon_signal(d, SIGKILL);	/* a crash */
			kt_daemon_wait_at(__FILE__, __LINE__, d, false);
		}
	}
}
END_TEST

static Suite *
protocol_server_suite(void)
{
	Suite	*s = suite_create("protocol_server");
	TCase	*tc;

	tc = kt_tcase(s, "counters", KT_PRIVATE, 30, NULL);
	if (tc != NULL) {
		tcase_add_test(tc, stats_counters_follow_the_requests);
		tcase_add_test(tc, every_exit_path_frees_the_key);
		tcase_add_test(tc, hot_keys_lists_the_ten_most_waited_for_keys);
	}

	tc = kt_tcase(s, "lifecycle", KT_PRIVATE, 30, NULL);
	if (tc != NULL)
		tcase_add_test(tc,
		    sigterm_answers_waiters_closes_everyone_and_exits_zero);

	tc = kt_tcase(s, "restart", KT_PRIVATE, 30, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc, tokens_increase_across_restart_and_crash);
	return s;
}

const struct check_program check_program = {
	.name = "protocol_server_test",
	.init = kt_init,
	.suites = { protocol_server_suite, NULL }
};
