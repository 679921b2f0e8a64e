/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The wire protocol against the real daemon on real sockets, read as
 * scripts (send a line, expect an exact line): every command and the
 * shape of its reply, and AUTH with a configured secret. The other
 * protocol_*_test programs take framing, errors and limits, waits and
 * deadlocks, and server-wide state. Each test gets its own daemon; none
 * sleeps to synchronise (INFO and STATS are polled until a deadline).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/stat.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

static void
check_holder(json_t *h, json_int_t client, const char *name, uint64_t token,
    const char *mode)
{
	json_t *n = json_object_get(h, "name");

	ck_assert_int_eq(kt_jint(h, "client"), client);
	if (name == NULL)
		ck_assert_msg(json_is_null(n), "holder name should be null");
	else
		ck_assert_msg(json_is_string(n) && strcmp(json_string_value(n),
		    name) == 0, "holder name should be \"%s\"", name);
	ck_assert_int_eq(kt_jint(h, "token"), (json_int_t)token);
	ck_assert_msg(json_is_string(json_object_get(h, "mode")) &&
	    strcmp(json_string_value(json_object_get(h, "mode")), mode) == 0,
	    "holder mode should be \"%s\"", mode);
	ck_assert_int_ge(kt_jint(h, "held_ms"), 0);
}

static void
check_waiter(json_t *w, const char *name, const char *mode)
{
	json_t *n = json_object_get(w, "name");

	kt_jint(w, "client");
	if (name == NULL)
		ck_assert_msg(json_is_null(n), "waiter name should be null");
	else
		ck_assert_msg(json_is_string(n) && strcmp(json_string_value(n),
		    name) == 0, "waiter name should be \"%s\"", name);
	ck_assert_msg(json_is_string(json_object_get(w, "mode")) &&
	    strcmp(json_string_value(json_object_get(w, "mode")), mode) == 0,
	    "waiter mode should be \"%s\"", mode);
	ck_assert_int_ge(kt_jint(w, "waited_ms"), 0);
}

static void
expect_err_either(struct kt_conn *c, const char *code1, const char *code2)
{
	kt_recv(c);
	ck_assert_msg(kt_line_is_err(c, code1) || kt_line_is_err(c, code2),
	    "sent \"%s\": expected ERR %s or ERR %s, got \"%s\"", c->lastsent,
	    code1, code2, kt_esc(c->line, c->linelen));
}

/* commands and reply shapes */

START_TEST(ping_replies_pong)
{
	struct kt_conn *c = kt_connect();

	kt_req(c, "OK PONG", "PING");
	kt_req(c, "OK PONG", "ping");
	kt_req(c, "OK PONG", "PiNg");
}
END_TEST

START_TEST(tokens_strictly_increase_across_commands_and_clients)
{
	struct kt_conn	*c = kt_connect(), *c2 = kt_connect();
	struct kt_conn	*c3 = kt_connect(), *cs[3];
	uint64_t	 t1, t2, t3, prev, t;

	t1 = kt_lock(c, "LOCK tok:a");
	kt_req(c, "OK 1", "UNLOCK tok:a");
	t2 = kt_lock(c, "TRYLOCK tok:a");
	ck_assert_msg(t2 > t1, "TRYLOCK token %llu not above %llu",
	    (unsigned long long)t2, (unsigned long long)t1);
	kt_req(c, "OK 1", "UNLOCK tok:a");
	t3 = kt_lock(c, "LOCK tok:a tok:b tok:c");
	ck_assert_msg(t3 > t2, "token %llu not above %llu",
	    (unsigned long long)t3, (unsigned long long)t2);
	kt_req(c, "OK 3", "UNLOCKALL");
	kt_req(c, "OK 0", "UNLOCKALL");

	cs[0] = c;
	cs[1] = c2;
	cs[2] = c3;
	prev = t3;
	for (int i = 0; i < 60; i++) {
		struct kt_conn *x = cs[i % 3];

		t = kt_lock(x, "%s tok:k%d", i % 2 ? "TRYLOCK" : "LOCK", i % 7);
		ck_assert_msg(t > prev, "grant %d: token %llu not above the "
		    "earlier %llu", i, (unsigned long long)t,
		    (unsigned long long)prev);
		prev = t;
		kt_req(x, "OK 1", "UNLOCK tok:k%d", i % 7);
	}

	/* a grant made while serving somebody else's UNLOCK */
	t = kt_lock(c, "LOCK tok:w");
	ck_assert(t > prev);
	prev = t;
	kt_send(c2, "LOCK tok:w");
	json_decref(kt_wait_queue(c3, "tok:w", 1, 1));
	kt_req(c, "OK 1", "UNLOCK tok:w");
	t = kt_expect_token(c2);
	ck_assert_msg(t > prev, "queued grant token %llu not above %llu",
	    (unsigned long long)t, (unsigned long long)prev);
	prev = t;
	t = kt_lock(c3, "TRYLOCK tok:x");
	ck_assert_msg(t > prev, "token %llu not above %llu",
	    (unsigned long long)t, (unsigned long long)prev);
}
END_TEST

START_TEST(held_key_is_refused_at_once)
{
	struct kt_conn *c = kt_connect(), *o = kt_connect();

	kt_lock(c, "LOCK held:a");
	kt_req_err(c, "HELD", "LOCK held:a");
	kt_req_err(c, "HELD", "TRYLOCK held:a");
	kt_req_err(c, "HELD", "LOCK held:a timeout=5000");
	kt_req_err(c, "HELD", "LOCK held:a mode=shared");
	/* a multi-key request with one held key takes none of them */
	kt_req_err(c, "HELD", "LOCK held:b held:a");
	kt_lock(o, "TRYLOCK held:b");
	kt_req(o, "OK 1", "UNLOCK held:b");
	kt_req(c, "OK 1", "UNLOCKALL");
}
END_TEST

START_TEST(unlock_of_unheld_key_releases_nothing)
{
	struct kt_conn *c = kt_connect(), *c2 = kt_connect();
	struct kt_conn *o = kt_connect();

	kt_lock(c, "LOCK nh:a nh:b");
	kt_req_err(c, "NOTHELD", "UNLOCK nh:a nh:zz");
	kt_req_err(c, "NOTHELD", "UNLOCK nh:zz nh:a");
	kt_req(c, "OK 1", "UNLOCK nh:a");
	kt_req(c, "OK 1", "UNLOCK nh:b");
	kt_req_err(c, "NOTHELD", "UNLOCK nh:b");
	kt_req_err(c, "NOTHELD", "UNLOCK nh:never");
	/* somebody else's lock is not ours to release */
	kt_lock(c2, "LOCK nh:q");
	kt_req_err(c, "NOTHELD", "UNLOCK nh:q");
	kt_req_err(o, "LOCKED", "TRYLOCK nh:q");
	kt_req(c2, "OK 1", "UNLOCK nh:q");
}
END_TEST

START_TEST(unlock_counts_duplicate_keys_once)
{
	struct kt_conn *c = kt_connect();

	kt_lock(c, "LOCK dup:a dup:b");
	kt_req(c, "OK 2", "UNLOCK dup:a dup:a dup:b dup:a");
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(c, "LOCK dup:a dup:a dup:a");
	kt_req(c, "OK 1", "UNLOCK dup:a");
	kt_req_err(c, "NOTHELD", "UNLOCK dup:a");
}
END_TEST

START_TEST(multikey_grant_has_one_token_and_releases_key_by_key)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	const char	*keys[] = { "mk:a", "mk:b", "mk:c" };
	uint64_t	 t = kt_lock(c, "LOCK mk:a mk:b mk:c");

	for (int i = 0; i < 3; i++) {
		json_t *info = kt_info(o, keys[i]);

		ck_assert_int_eq(kt_jint(pu_jarr_at(info, "holders", 0),
		    "token"), (json_int_t)t);
		json_decref(info);
	}
	kt_req(c, "OK 1", "UNLOCK mk:b");
	kt_lock(o, "TRYLOCK mk:b");
	kt_req_err(o, "LOCKED", "TRYLOCK mk:a");
	kt_req_err(o, "LOCKED", "TRYLOCK mk:c");
	kt_req(c, "OK 2", "UNLOCK mk:a mk:c");
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(o, "TRYLOCK mk:a mk:c");
	kt_req(o, "OK 3", "UNLOCKALL");
}
END_TEST

START_TEST(unlockall_releases_every_key)
{
	struct kt_conn *c = kt_connect(), *o = kt_connect();

	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(c, "LOCK ua:a");
	kt_lock(c, "LOCK ua:b ua:c");
	kt_req(c, "OK 3", "UNLOCKALL");
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(o, "TRYLOCK ua:a ua:b ua:c");
	kt_req(o, "OK 3", "UNLOCKALL");
}
END_TEST

START_TEST(refresh_restarts_the_ttl)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	int64_t		 s = kt_slow();
	uint64_t	 t0;

	kt_req_err(c, "NOTHELD", "REFRESH rf:zz ttl=100");
	t0 = kt_now_ms();
	kt_lock(c, "LOCK rf:a ttl=%lld", (long long)(500 * s));
	kt_req_err(c, "SYNTAX", "REFRESH rf:a");
	kt_req_err(c, "SYNTAX", "REFRESH rf:a ttl=0");
	kt_req_err(c, "NOTHELD", "REFRESH rf:a rf:zz ttl=1000");
	kt_sleep_ms((uint64_t)(250 * s));	/* let part of the ttl pass */
	kt_req(c, "OK 1", "REFRESH rf:a ttl=%lld", (long long)(1000 * s));
	pu_sleep_until(t0, 750 * s);
	/* past the first ttl, inside the refreshed one */
	kt_req_err(o, "LOCKED", "TRYLOCK rf:a");
	kt_req(c, "OK 1", "UNLOCK rf:a");

	kt_lock(c, "LOCK rf:b rf:c ttl=%lld", (long long)(200 * s));
	kt_req(c, "OK 2", "REFRESH rf:b rf:c ttl=%lld", (long long)(200 * s));
	kt_req(c, "OK 1", "REFRESH rf:b rf:b ttl=%lld", (long long)(200 * s));
	/* then it runs out */
	kt_lock(o, "LOCK rf:b timeout=%lld", (long long)kt_ms(3000));
	kt_req_err(c, "NOTHELD", "UNLOCK rf:b");
	kt_req_err(c, "NOTHELD", "REFRESH rf:b ttl=1000");
}
END_TEST

START_TEST(info_shows_holders_and_waiters_in_queue_order)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*c = kt_connect(), *d = kt_connect();
	struct kt_conn	*o = kt_connect();
	json_t		*info, *w;
	json_int_t	 ida, idb, idc, idd;
	uint64_t	 t;

	kt_req(a, "OK", "NAME alice");
	kt_req(c, "OK", "NAME carol");
	t = kt_lock(a, "LOCK in:k");
	ida = pu_holder_id(o, "in:k");
	kt_send(b, "LOCK in:k");
	json_decref(kt_wait_queue(o, "in:k", 1, 1));
	kt_send(c, "LOCK in:k mode=shared");
	json_decref(kt_wait_queue(o, "in:k", 1, 2));
	kt_send(d, "LOCK in:k");
	kt_sleep_ms(100);	/* let held_ms grow */
	info = kt_wait_queue(o, "in:k", 1, 3);

	ck_assert_msg(json_is_string(json_object_get(info, "key")) &&
	    strcmp(json_string_value(json_object_get(info, "key")), "in:k")
	    == 0, "INFO key member");
	ck_assert_int_eq(kt_jint(info, "limit"), 1);
	ck_assert_uint_eq(json_array_size(json_object_get(info, "holders")), 1);
	check_holder(pu_jarr_at(info, "holders", 0), ida, "alice", t,
	    "exclusive");
	ck_assert_int_ge(kt_jint(pu_jarr_at(info, "holders", 0), "held_ms"),
	    90);
	w = json_object_get(info, "waiters");
	check_waiter(json_array_get(w, 0), NULL, "exclusive");
	check_waiter(json_array_get(w, 1), "carol", "shared");
	check_waiter(json_array_get(w, 2), NULL, "exclusive");
	idb = kt_jint(json_array_get(w, 0), "client");
	idc = kt_jint(json_array_get(w, 1), "client");
	idd = kt_jint(json_array_get(w, 2), "client");
	ck_assert_msg(ida != idb && ida != idc && ida != idd && idb != idc &&
	    idb != idd && idc != idd, "client ids must differ");
	ck_assert_int_ge(kt_jint(json_array_get(w, 0), "waited_ms"),
	    kt_jint(json_array_get(w, 2), "waited_ms"));
	json_decref(info);

	/* the queue moves: b holds, c and d wait in order */
	kt_req(a, "OK 1", "UNLOCK in:k");
	t = kt_expect_token(b);
	info = kt_wait_queue(o, "in:k", 1, 2);
	check_holder(pu_jarr_at(info, "holders", 0), idb, NULL, t, "exclusive");
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "waiters", 0), "client"),
	    idc);
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "waiters", 1), "client"),
	    idd);
	json_decref(info);

	/* a semaphore shows its limit */
	kt_lock(a, "LOCK in:sem limit=3");
	kt_lock(o, "LOCK in:sem limit=3");
	info = kt_info(o, "in:sem");
	ck_assert_int_eq(kt_jint(info, "limit"), 3);
	ck_assert_uint_eq(json_array_size(json_object_get(info, "holders")), 2);
	ck_assert_uint_eq(json_array_size(json_object_get(info, "waiters")), 0);
	json_decref(info);

	kt_req_err(o, "SYNTAX", "INFO");
	kt_req_err(o, "SYNTAX", "INFO in:k in:sem");
	kt_req_err(o, "BADKEY", "INFO in:\x01");
}
END_TEST

START_TEST(name_labels_the_connection)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	char		*n64 = pu_repeat("n", 64), *n65 = pu_repeat("n", 65);
	json_t		*info;

	kt_req(c, "OK", "NAME worker-1");
	kt_lock(c, "LOCK nm:k");
	info = kt_info(o, "nm:k");
	ck_assert_str_eq(json_string_value(json_object_get(pu_jarr_at(info,
	    "holders", 0), "name")), "worker-1");
	json_decref(info);
	kt_req(c, "OK", "nAmE worker-2");
	kt_req(c, "OK", "NAME %s", n64);
	info = kt_info(o, "nm:k");
	ck_assert_str_eq(json_string_value(json_object_get(pu_jarr_at(info,
	    "holders", 0), "name")), n64);
	json_decref(info);

	kt_send(c, "NAME %s", n65);
	expect_err_either(c, "SYNTAX", "BADKEY");
	kt_send(c, "NAME bad\x01name");
	expect_err_either(c, "SYNTAX", "BADKEY");
	kt_send(c, "NAME \xff\xfe");
	expect_err_either(c, "SYNTAX", "BADKEY");
	kt_req_err(c, "SYNTAX", "NAME");
	kt_req_err(c, "SYNTAX", "NAME a b");
	kt_req_err(c, "SYNTAX", "NAME a=b");
	info = kt_info(o, "nm:k");
	ck_assert_str_eq(json_string_value(json_object_get(pu_jarr_at(info,
	    "holders", 0), "name")), n64);
	json_decref(info);
	free(n64);
	free(n65);
}
END_TEST

START_TEST(auth_without_a_configured_secret_is_refused)
{
	struct kt_conn *c = kt_connect();

	kt_req_err(c, "AUTH", "AUTH hunter2");
	kt_req_err(c, "SYNTAX", "AUTH");
	/* no secret configured: everything else works */
	kt_lock(c, "LOCK au:k");
	kt_req(c, "OK 1", "UNLOCK au:k");
	kt_req(c, "OK PONG", "PING");
}
END_TEST

START_TEST(quit_replies_ok_then_closes)
{
	struct kt_conn *c = kt_connect(), *c2 = kt_connect();
	struct kt_conn *c3, *o = kt_connect();

	kt_req(c, "OK", "QUIT");
	kt_expect_eof(c, kt_ms(2000));

	/* nothing after QUIT is answered */
	kt_send_raw(c2, "quit\nPING\n", 10);
	kt_expect_line(c2, "OK");
	kt_expect_eof(c2, kt_ms(2000));

	/*
	 * and its locks are gone once its OK is read, every time (through
	 * backend etcd the release is committed before the OK)
	 */
	for (int i = 0; i < 20; i++) {
		c3 = kt_connect();
		kt_lock(c3, "LOCK qt:k");
		kt_req(c3, "OK", "QUIT");
		kt_lock(o, "TRYLOCK qt:k");
		kt_req(o, "OK 1", "UNLOCK qt:k");
		kt_expect_eof(c3, kt_ms(2000));
		kt_conn_close(c3);
	}
}
END_TEST

START_TEST(stats_has_every_member_with_its_type)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	json_t		*s, *hk;
	json_int_t	 up;

	s = kt_stats(o);
	pu_check_stats_shape(s);
	up = kt_jint(s, "uptime_ms");
	json_decref(s);

	kt_lock(h, "LOCK st:hot st:cold");
	kt_send(w, "LOCK st:hot");
	kt_send(w2, "LOCK st:hot");
	json_decref(kt_wait_queue(o, "st:hot", 1, 2));
	kt_sleep_ms(20);
	s = kt_stats(o);
	pu_check_stats_shape(s);
	ck_assert_int_ge(kt_jint(s, "uptime_ms"), up + 15);
	ck_assert_int_ge(kt_jint(s, "clients"), 4);
	ck_assert_int_ge(kt_jint(s, "keys"), 2);
	ck_assert_int_ge(kt_jint(s, "held"), 2);
	ck_assert_int_ge(kt_jint(s, "waiting"), 2);
	ck_assert_int_ge(kt_jint(s, "max_waiters"), 2);
	hk = json_array_get(json_object_get(s, "hot_keys"), 0);
	ck_assert_msg(hk != NULL, "hot_keys is empty with st:hot waited for");
	ck_assert_str_eq(json_string_value(json_object_get(hk, "key")),
	    "st:hot");
	ck_assert_int_eq(kt_jint(hk, "holders"), 1);
	ck_assert_int_eq(kt_jint(hk, "waiters"), 2);
	ck_assert_int_ge(kt_jint(hk, "max_waiters"), 2);
	json_decref(s);
}
END_TEST

/* authentication (private daemon with --auth-file) */

START_TEST(configured_secret_gates_all_but_auth_ping_quit)
{
	const char	*dir = kt_tmpdir();
	char		 path[256];
	struct kt_conn	*c, *c2;
	static const char *const gated[] = {
		"LOCK au:k", "TRYLOCK au:k", "UNLOCK au:k", "UNLOCKALL",
		"REFRESH au:k ttl=100", "STATS", "INFO au:k", "NAME someone",
		NULL
	};

	ck_assert_ptr_nonnull(dir);
	/* the LF is not part of it */
	kt_secret_file(dir, "secret", "s3cret=token", path, sizeof(path));
	kt_start("--auth-file", path);
	c = kt_connect();
	c2 = kt_connect();

	kt_req(c, "OK PONG", "PING");
	for (int i = 0; gated[i] != NULL; i++)
		kt_req_err(c, "AUTH", "%s", gated[i]);
	/* SYNTAX and BADKEY come before AUTH */
	kt_req_err(c, "SYNTAX", "FROB");
	kt_req_err(c, "BADKEY", "LOCK au:\x01");
	kt_req_err(c, "AUTH", "AUTH wrong");
	kt_req_err(c, "AUTH", "AUTH s3cret");
	kt_req_err(c, "AUTH", "LOCK au:k");
	kt_req(c, "OK", "AUTH s3cret=token");
	kt_lock(c, "LOCK au:k");
	kt_send(c, "STATS");
	json_decref(kt_expect_json(c));
	/* per connection */
	kt_req_err(c2, "AUTH", "TRYLOCK au:k");
	kt_req(c2, "OK", "QUIT");
	kt_expect_eof(c2, kt_ms(2000));
}
END_TEST

static Suite *
protocol_commands_suite(void)
{
	Suite	*s = suite_create("protocol_commands");
	TCase	*tc;

	tc = kt_tcase(s, "commands", KT_ANY, 30, NULL);
	tcase_add_test(tc, ping_replies_pong);
	tcase_add_test(tc,
	    tokens_strictly_increase_across_commands_and_clients);
	tcase_add_test(tc, held_key_is_refused_at_once);
	tcase_add_test(tc, unlock_of_unheld_key_releases_nothing);
	tcase_add_test(tc, unlock_counts_duplicate_keys_once);
	tcase_add_test(tc,
	    multikey_grant_has_one_token_and_releases_key_by_key);
	tcase_add_test(tc, unlockall_releases_every_key);
	tcase_add_test(tc, refresh_restarts_the_ttl);
	tcase_add_test(tc, info_shows_holders_and_waiters_in_queue_order);
	tcase_add_test(tc, name_labels_the_connection);
	tcase_add_test(tc, auth_without_a_configured_secret_is_refused);
	tcase_add_test(tc, quit_replies_ok_then_closes);
	tcase_add_test(tc, stats_has_every_member_with_its_type);

	tc = kt_tcase(s, "auth", KT_PRIVATE, 30, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc,
		    configured_secret_gates_all_but_auth_ping_quit);
	return s;
}

const struct check_program check_program = {
	.name = "protocol_commands_test",
	.init = kt_init,
	.suites = { protocol_commands_suite, NULL }
};
