/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * A LOCK that waits holds back the lines behind it; grants, timeouts
 * and closes end the wait. QUIT, closing connections, shutdown and a
 * restart, with tokens rising throughout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>

#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "check_conn.h"
#include "config.h"
#include "conn.h"
#include "kl.h"
#include "server.h"
#include "stats.h"
#include "clock.h"
#include "util.h"

/* ---- waiting, granting, closing ---- */

START_TEST(waiting_lock_holds_back_later_lines_until_granted)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	uint64_t	 t1, t2;

	cc_send_str(a, "LOCK k\n");
	t1 = cc_take_token(a);
	cc_send_str(b, "LOCK k\nPING\n");
	cc_expect_silence(b);		/* not even the PING */
	cc_send_str(a, "UNLOCK k\n");
	EXPECT_LINE(a, "OK 1");
	t2 = cc_take_token(b);
	ck_assert_uint_gt(t2, t1);
	EXPECT_LINE(b, "OK PONG");
	cc_expect_silence(b);
}
END_TEST

START_TEST(holder_closing_grants_the_waiter_in_the_same_loop_run)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	uint64_t	 t1;

	cc_send_str(a, "LOCK k\n");
	t1 = cc_take_token(a);
	cc_send_str(b, "LOCK k\nPING\n");
	cc_expect_silence(b);
	cc_client_close(a);
	cc_pump();				/* exactly one run */
	cc_rx_poll(b);
	ck_assert_msg(cc_unread_lines(b) == 2, "after one loop run: \"%.*s\"",
	    (int)(b->rlen - b->roff), b->rx + b->roff);
	ck_assert_uint_gt(cc_take_token(b), t1);
	EXPECT_LINE(b, "OK PONG");
}
END_TEST

START_TEST(waiter_closing_withdraws_its_request)
{
	struct client	*a = cc_client_new(), *b = cc_client_new(), *c;
	json_t		*j;

	cc_send_str(a, "LOCK k\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK k\n");
	cc_expect_silence(b);
	cc_client_close(b);
	cc_pump();
	cc_send_str(a, "INFO k\n");
	j = cc_take_json(a);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "waiters")), 0);
	json_decref(j);
	cc_send_str(a, "UNLOCK k\n");
	EXPECT_LINE(a, "OK 1");
	c = cc_client_new();
	cc_send_str(c, "TRYLOCK k\n");
	cc_take_token(c);
}
END_TEST

START_TEST(tokens_rise_across_grants_and_connections)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	uint64_t	 last = 0, t;

	for (int i = 0; i < 20; i++) {
		struct client	*k = i % 2 ? a : b;

		cc_send_str(k, "LOCK t\nUNLOCK t\n");
		t = cc_take_token(k);
		EXPECT_LINE(k, "OK 1");
		ck_assert_uint_gt(t, last);
		last = t;
	}
}
END_TEST

START_TEST(timeout_reply_names_the_key_and_the_holder)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	uint64_t	 start, elapsed;

	cc_send_str(a, "LOCK tk\n");
	cc_take_token(a);
	start = cc_now_ms();
	cc_send_str(b, "LOCK tk timeout=50\nPING\n");
	/* Run the loop blocking, bounded by a deadline. */
	while (cc_unread_lines(b) < 1 && cc_now_ms() < start + WAIT_MS) {
		struct timeval	tv = { 0, 100 * 1000 };

		event_base_loopexit(server_base(cc_srv), &tv);
		ck_assert_int_ge(event_base_loop(server_base(cc_srv), EVLOOP_ONCE), 0);
		cc_rx_poll(b);
	}
	elapsed = cc_now_ms() - start;
	EXPECT_PREFIX(b, "ERR TIMEOUT ");
	ck_assert_msg(strstr(cc_line, "tk") != NULL, "\"%s\" does not name the "
	    "key", cc_line);
	ck_assert_msg(strstr(cc_line, "client 1") != NULL, "\"%s\" does not "
	    "name the holder", cc_line);
	ck_assert_msg(elapsed >= 45 && elapsed < 1000, "TIMEOUT after %" PRIu64
	    " ms", elapsed);
	EXPECT_LINE(b, "OK PONG");
	/* the holder keeps its lock and the wait left nothing behind */
	cc_send_str(a, "INFO tk\n");
	{
		json_t	*j = cc_take_json(a);

		ck_assert_uint_eq(json_array_size(json_object_get(j,
		    "holders")), 1);
		ck_assert_uint_eq(json_array_size(json_object_get(j,
		    "waiters")), 0);
		json_decref(j);
	}
}
END_TEST

START_TEST(trylock_reply_names_the_holders_name)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();

	cc_send_str(a, "NAME backup\nLOCK nk\n");
	EXPECT_LINE(a, "OK");
	cc_take_token(a);
	cc_send_str(b, "TRYLOCK nk\n");
	EXPECT_PREFIX(b, "ERR LOCKED ");
	ck_assert_msg(strstr(cc_line, "nk") != NULL &&
	    strstr(cc_line, "client 1") != NULL &&
	    strstr(cc_line, "backup") != NULL,
	    "\"%s\" does not name key, client and name", cc_line);
}
END_TEST

START_TEST(unlock_of_a_key_not_held_gets_notheld)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "UNLOCK nope\n");
	EXPECT_PREFIX(a, "ERR NOTHELD ");
	ck_assert_ptr_nonnull(strstr(cc_line, "nope"));
}
END_TEST

START_TEST(syntax_error_is_answered_and_the_connection_stays)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "FROB x\nLOCK\nPING\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(quit_replies_ok_then_closes)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "QUIT\nPING\n");
	EXPECT_LINE(a, "OK");
	cc_expect_eof(a);		/* and the PING is never answered */
}
END_TEST

START_TEST(quit_releases_the_locks_of_the_connection)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();

	cc_send_str(a, "LOCK q1 q2\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK q2\n");
	cc_expect_silence(b);
	cc_send_str(a, "QUIT\n");
	EXPECT_LINE(a, "OK");
	cc_expect_eof(a);
	cc_take_token(b);
}
END_TEST

START_TEST(stats_shows_keys_0_after_all_connections_closed)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	struct client	*c = cc_client_new();
	json_t		*j;

	cc_send_str(a, "LOCK s1 s2\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK s1 timeout=60000\n");
	cc_send_str(c, "LOCK s3 mode=shared ttl=60000\nLOCK s2\n");
	cc_take_token(c);
	cc_expect_silence(b);
	cc_expect_silence(c);
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "keys"), 3);
	ck_assert_int_eq(cc_json_int(j, "waiting"), 2);
	json_decref(j);
	cc_client_close(a);
	cc_client_close(b);
	cc_client_close(c);
	cc_pump();
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "keys"), 0);
	ck_assert_int_eq(cc_json_int(j, "held"), 0);
	ck_assert_int_eq(cc_json_int(j, "waiting"), 0);
	ck_assert_int_eq(cc_json_int(j, "clients"), 1);
	json_decref(j);
	ck_assert_uint_eq(server_stats(cc_srv)->clients, 0);
}
END_TEST

START_TEST(shutdown_gives_a_waiting_client_err_shutdown)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();

	cc_send_str(a, "LOCK sk\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK sk\nPING\n");
	cc_expect_silence(b);
	conns_close_all(server_conns(cc_srv), "test shutdown");
	server_end_turn(cc_srv);
	EXPECT_PREFIX(b, "ERR SHUTDOWN ");
	cc_expect_eof(b);
	cc_expect_eof(a);
	ck_assert_uint_eq(server_stats(cc_srv)->clients, 0);
}
END_TEST

START_TEST(shutdown_grants_nobody)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	struct client	*c = cc_client_new();

	/* b waits for x (held by a) and is queued on y; c waits on y behind
	 * b. Withdrawing b must not hand y to c while the server stops. */
	cc_send_str(a, "LOCK x\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK x y\n");
	cc_expect_silence(b);
	cc_send_str(c, "LOCK y\n");
	cc_expect_silence(c);
	conns_close_all(server_conns(cc_srv), "test shutdown");
	server_end_turn(cc_srv);
	EXPECT_PREFIX(b, "ERR SHUTDOWN ");
	EXPECT_PREFIX(c, "ERR SHUTDOWN ");
	cc_expect_eof(b);
	cc_expect_eof(c);
	cc_expect_eof(a);
}
END_TEST

START_TEST(server_free_closes_open_connections)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();

	cc_send_str(a, "LOCK f\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK f\n");
	cc_expect_silence(b);
	cc_stop_server();
	cc_start_server(NULL, 0);
	cc_rx_poll(a);
	cc_rx_poll(b);
	ck_assert(a->eof);
	ck_assert(b->eof);
	EXPECT_PREFIX(b, "ERR SHUTDOWN ");
}
END_TEST

START_TEST(tokens_rise_across_a_server_restart)
{
	struct client	*a = cc_client_new();
	uint64_t	 t1, t2;

	cc_send_str(a, "LOCK r\n");
	t1 = cc_take_token(a);
	cc_stop_server();
	cc_start_server(NULL, 0);	/* same state dir */
	cc_client_close(a);
	a = cc_client_new();
	cc_send_str(a, "LOCK r\n");
	t2 = cc_take_token(a);
	ck_assert_uint_gt(t2, t1);
}
END_TEST

void
cc_add_waiting(Suite *s)
{
	TCase	*tc;

	tc = cc_tcase(s, "waiting", 30);
	tcase_add_test(tc, waiting_lock_holds_back_later_lines_until_granted);
	tcase_add_test(tc,
	    holder_closing_grants_the_waiter_in_the_same_loop_run);
	tcase_add_test(tc, waiter_closing_withdraws_its_request);
	tcase_add_test(tc, tokens_rise_across_grants_and_connections);
	tcase_add_test(tc, timeout_reply_names_the_key_and_the_holder);
	tcase_add_test(tc, trylock_reply_names_the_holders_name);
	tcase_add_test(tc, unlock_of_a_key_not_held_gets_notheld);
	tcase_add_test(tc, syntax_error_is_answered_and_the_connection_stays);

	tc = cc_tcase(s, "closing", 30);
	tcase_add_test(tc, quit_replies_ok_then_closes);
	tcase_add_test(tc, quit_releases_the_locks_of_the_connection);
	tcase_add_test(tc, stats_shows_keys_0_after_all_connections_closed);
	tcase_add_test(tc, shutdown_gives_a_waiting_client_err_shutdown);
	tcase_add_test(tc, shutdown_grants_nobody);
	tcase_add_test(tc, server_free_closes_open_connections);
	tcase_add_test(tc, tokens_rise_across_a_server_restart);
}
