/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Error replies and limits against the real daemon: SYNTAX, BADKEY,
 * CONFLICT, BUSY, LOCKED and which error wins when several apply; then
 * each limit option at and one past its limit, and the bound on a
 * client's unread output. Each test gets its own daemon (with options for
 * the limits); none sleeps to synchronise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

/* error codes */

START_TEST(syntax_errors)
{
	struct kt_conn	*c = kt_connect();
	static const char *const bad[] = {
		"FROB", "LOCKX a", "PING=1", "lock=a",
		"LOCK", "TRYLOCK", "UNLOCK", "REFRESH", "INFO", "NAME",
		"LOCK timeout=100", "UNLOCK timeout=100",
		"REFRESH sx:a", "REFRESH ttl=100",
		"PING extra", "UNLOCKALL sx:a", "STATS sx:a",
		"LOCK sx:a timeout=", "LOCK sx:a =5", "LOCK sx:a =",
		"LOCK sx:a timeout=abc", "LOCK sx:a timeout=-1",
		"LOCK sx:a timeout=+5", "LOCK sx:a timeout=1.5",
		"LOCK sx:a timeout=0x10", "LOCK sx:a timeout= 5",
		"LOCK sx:a timeout=99999999999999999999999",
		"LOCK sx:a bogus=1", "LOCK sx:a timeout=1 timeout=1",
		"LOCK sx:a TIMEOUT=1 timeout=2", "LOCK sx:a ttl=1 ttl=1",
		"TRYLOCK sx:a timeout=5", "TRYLOCK sx:a timeout=0",
		"LOCK sx:a ttl=0", "LOCK sx:a ttl=x", "LOCK sx:a limit=0",
		"LOCK sx:a limit=-1", "LOCK sx:a limit=x",
		"LOCK sx:a mode=shared limit=2",
		"LOCK sx:a limit=2 mode=shared", "LOCK sx:a mode=bogus",
		"LOCK sx:a mode=", "LOCK sx:a max_waiters=x",
		"LOCK sx:a max_waiters=-1", "UNLOCK sx:a ttl=5",
		"REFRESH sx:a ttl=0", "REFRESH sx:a ttl=x",
		"REFRESH sx:a ttl=5 timeout=5", "INFO sx:a mode=shared",
		NULL
	};

	for (int i = 0; bad[i] != NULL; i++)
		kt_req_err(c, "SYNTAX", "%s", bad[i]);
	/* nothing was taken, and the connection serves on */
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_req(c, "OK PONG", "PING");
	/* the valid forms of the same options */
	kt_lock(c, "LOCK sx:a timeout=0 mode=shared");
	kt_lock(c, "LOCK sx:b max_waiters=0 limit=2 ttl=60000");
	kt_lock(c, "LOCK sx:c mode=exclusive limit=1");
	kt_req(c, "OK 3", "UNLOCKALL");
}
END_TEST

START_TEST(badkey_rules)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	char		*k250 = pu_repeat("k", 250);
	char		*k251 = pu_repeat("k", 251);
	char		*e250 = pu_repeat("\xc3\xa9", 125); /* e acute */
	static const char *const bad[] = {
		"\xff", "bk:\xc0\x80", "bk:\xed\xa0\x80", "bk:\xf4\x90\x80\x80",
		"bk:\xe2\x82", "bk:\x80", "bk:\x01", "bk:\x7f", "bk:a\x1b" "b",
		"bk:\xf8\x88\x80\x80\x80", "bk:\xe0\x80\xaf", NULL
	};

	kt_lock(c, "LOCK %s", k250);
	kt_req(c, "OK 1", "UNLOCK %s", k250);
	kt_req_err(c, "BADKEY", "LOCK %s", k251);
	kt_req_err(c, "BADKEY", "TRYLOCK %s", k251);
	kt_req_err(c, "BADKEY", "UNLOCK %s", k251);
	kt_lock(c, "LOCK %s", e250);
	kt_req(c, "OK 1", "UNLOCK %s", e250);
	kt_req_err(c, "BADKEY", "LOCK %sx", e250);
	for (int i = 0; bad[i] != NULL; i++) {
		kt_req_err(c, "BADKEY", "LOCK %s", bad[i]);
		kt_req_err(c, "BADKEY", "UNLOCK %s", bad[i]);
		kt_req_err(c, "BADKEY", "INFO %s", bad[i]);
	}
	/* a NUL byte is a control byte, not the end of the key */
	kt_send_raw(c, "LOCK bk:a\0b\n", 12);
	kt_expect_err(c, "BADKEY");
	kt_req_err(c, "NOTHELD", "UNLOCK bk:a");
	/* one bad key spoils the request: nothing is taken */
	kt_req_err(c, "BADKEY", "LOCK bk:good bk:\xff");
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(o, "TRYLOCK bk:good");
	/* valid UTF-8 of every length is fine */
	kt_lock(c, "LOCK bk:\xe2\x82\xac" "uro bk:\xf0\x9f\x98\x80 "
	    "bk:\xd0\xba");
	kt_req(c, "OK 3", "UNLOCKALL");
	free(k250);
	free(k251);
	free(e250);
}
END_TEST

START_TEST(keys_per_request_default_limit_is_64)
{
	struct kt_conn	*c = kt_connect();
	char		 line[2048];
	size_t		 n = 0;

	n += (size_t)sprintf(line, "LOCK");
	for (int i = 0; i < 64; i++)
		n += (size_t)sprintf(line + n, " kp:%02d", i);
	kt_send(c, "%s", line);
	kt_expect_token(c);
	kt_req(c, "OK 64", "UNLOCKALL");
	sprintf(line + n, " kp:64");
	kt_req_err(c, "LIMIT", "%s", line);
	kt_req(c, "OK 0", "UNLOCKALL");
}
END_TEST

/* PROTOCOL.md: duplicate keys count once; the server reads at most 1024
 * keys in one request, duplicates included: more is LIMIT, for UNLOCK too,
 * and the server carries on (1,100 copies of one key once crashed it). */
START_TEST(duplicates_count_once_up_to_1024_keys)
{
	struct kt_conn	*c = kt_connect();
	char		 line[4096];
	size_t		 n;

	n = (size_t)sprintf(line, "LOCK");
	for (int i = 0; i < 1024; i++)
		n += (size_t)sprintf(line + n, " q%d", i % 3);
	kt_send(c, "%s", line);
	kt_expect_token(c);
	kt_send(c, "UNLOCK%s", line + 4);
	kt_expect_line(c, "OK 3");
	kt_lock(c, "LOCK q0");
	sprintf(line + n, " q0");
	kt_req_err(c, "LIMIT", "UNLOCK%s", line + 4);
	kt_req_err(c, "LIMIT", "REFRESH%s ttl=100", line + 4);
	kt_req_err(c, "LIMIT", "%s", line);
	kt_req_err(c, "LIMIT", "TRYLOCK%s", line + 4);
	kt_req(c, "OK PONG", "PING");
	kt_req(c, "OK 1", "UNLOCK q0");
}
END_TEST

START_TEST(conflict_when_limit_differs)
{
	struct kt_conn *a = kt_connect(), *b = kt_connect();
	struct kt_conn *c = kt_connect();

	kt_lock(a, "LOCK cf:s limit=2");
	kt_req_err(b, "CONFLICT", "LOCK cf:s limit=3");
	kt_req_err(b, "CONFLICT", "LOCK cf:s");
	kt_req_err(b, "CONFLICT", "TRYLOCK cf:s limit=1");
	kt_req_err(b, "CONFLICT", "LOCK cf:s mode=shared");
	kt_lock(b, "LOCK cf:s limit=2");
	kt_req_err(c, "LOCKED", "TRYLOCK cf:s limit=2");
	kt_req_err(c, "CONFLICT", "TRYLOCK cf:s limit=4");
	/* a waiter fixes the limit as much as a holder does */
	kt_send(c, "LOCK cf:s limit=2");
	json_decref(kt_wait_queue(a, "cf:s", 2, 1));
	kt_req(a, "OK 1", "UNLOCK cf:s");
	kt_expect_token(c);
	kt_req(b, "OK 1", "UNLOCK cf:s");
	kt_req(c, "OK 1", "UNLOCK cf:s");
	/* once the key is free again, any limit goes */
	kt_lock(a, "LOCK cf:s limit=7");
	kt_req(a, "OK 1", "UNLOCKALL");
}
END_TEST

START_TEST(busy_when_max_waiters_reached)
{
	struct kt_conn	*h = kt_connect(), *w1 = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	const char	*line;
	json_int_t	 hid;
	uint64_t	 t0;

	kt_req(h, "OK", "NAME busy-holder");
	kt_lock(h, "LOCK bz:k");
	hid = pu_holder_id(o, "bz:k");
	t0 = kt_now_ms();
	line = kt_req_err(w1, "BUSY", "LOCK bz:k max_waiters=0");
	ck_assert_int_le(pu_elapsed_since(t0), kt_ms(500));
	pu_check_blocker_text(line, "bz:k", hid, "busy-holder");
	kt_send(w1, "LOCK bz:k max_waiters=1");
	json_decref(kt_wait_queue(o, "bz:k", 1, 1));
	kt_req_err(w2, "BUSY", "LOCK bz:k max_waiters=1");
	/* any key of the request counts; nothing was queued */
	kt_req_err(w2, "BUSY", "LOCK bz:other bz:k max_waiters=1");
	kt_req(w2, "OK 0", "UNLOCKALL");
	kt_lock(o, "TRYLOCK bz:other");
	kt_send(w2, "LOCK bz:k max_waiters=2");
	json_decref(kt_wait_queue(o, "bz:k", 1, 2));
	kt_req(h, "OK 1", "UNLOCK bz:k");
	kt_expect_token(w1);
	kt_req(w1, "OK 1", "UNLOCK bz:k");
	kt_expect_token(w2);
}
END_TEST

START_TEST(locked_for_trylock_and_timeout_zero)
{
	struct kt_conn	*h = kt_connect(), *c = kt_connect();
	struct kt_conn	*w = kt_connect(), *o = kt_connect();
	const char	*line;
	json_int_t	 hid;
	uint64_t	 t, t0;

	kt_req(h, "OK", "NAME lk-holder");
	kt_lock(h, "LOCK lk:k");
	hid = pu_holder_id(o, "lk:k");
	line = kt_req_err(c, "LOCKED", "TRYLOCK lk:k");
	pu_check_blocker_text(line, "lk:k", hid, "lk-holder");
	t0 = kt_now_ms();
	kt_req_err(c, "LOCKED", "LOCK lk:k timeout=0");
	ck_assert_int_le(pu_elapsed_since(t0), kt_ms(500));
	kt_req_err(c, "LOCKED", "TRYLOCK lk:free lk:k");
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(c, "TRYLOCK lk:free");
	kt_lock(c, "LOCK lk:free2 timeout=0");
	kt_req(c, "OK 2", "UNLOCKALL");

	/* a key with a waiter is not free, even with no holder */
	kt_lock(h, "LOCK lk:b");
	kt_send(w, "LOCK lk:a lk:b");
	json_decref(kt_wait_queue(o, "lk:a", 0, 1));
	json_decref(kt_wait_queue(o, "lk:b", 1, 1));
	kt_req_err(c, "LOCKED", "TRYLOCK lk:a");
	kt_req_err(c, "LOCKED", "LOCK lk:a timeout=0");
	kt_req(h, "OK 1", "UNLOCK lk:b");
	t = kt_expect_token(w);
	{
		json_t *ia = kt_info(o, "lk:a"), *ib = kt_info(o, "lk:b");

		ck_assert_int_eq(kt_jint(pu_jarr_at(ia, "holders", 0), "token"),
		    (json_int_t)t);
		ck_assert_int_eq(kt_jint(pu_jarr_at(ib, "holders", 0), "token"),
		    (json_int_t)t);
		json_decref(ia);
		json_decref(ib);
	}
}
END_TEST

START_TEST(error_precedence)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*o = kt_connect();
	char		 line[5000];

	kt_lock(a, "LOCK ep:a");
	/* HELD before CONFLICT before BUSY; SYNTAX and BADKEY before HELD */
	kt_req_err(a, "HELD", "LOCK ep:a limit=3");
	kt_req_err(b, "CONFLICT", "LOCK ep:a limit=3");
	kt_req_err(b, "CONFLICT", "LOCK ep:a limit=3 max_waiters=0");
	kt_req_err(a, "SYNTAX", "LOCK ep:a bogus=1");
	kt_req_err(a, "BADKEY", "LOCK ep:a ep:\x01");
	/* BUSY before DEADLOCK */
	kt_lock(b, "LOCK ep:y");
	kt_send(a, "LOCK ep:y");
	json_decref(kt_wait_queue(o, "ep:y", 1, 1));
	kt_req_err(b, "BUSY", "LOCK ep:a max_waiters=0");
	kt_req_err(b, "DEADLOCK", "LOCK ep:a");
	kt_req_err(b, "HELD", "LOCK ep:y ep:a");	/* before DEADLOCK */
	/* TOOLONG before everything */
	memset(line, 'z', sizeof(line));
	memcpy(line, "FROB ", 5);
	line[sizeof(line) - 1] = '\n';
	kt_send_raw(b, line, sizeof(line));
	kt_expect_err(b, "TOOLONG");
	kt_req(b, "OK 1", "UNLOCKALL");
	kt_expect_token(a);
}
END_TEST

/* limits (private daemons with options) and the output bound */

START_TEST(max_keys_per_request)
{
	struct kt_conn *c;

	kt_start("--max-keys", "4");
	c = kt_connect();
	kt_lock(c, "LOCK mx:a mx:b mx:c mx:d");
	kt_req(c, "OK 4", "UNLOCKALL");
	kt_req_err(c, "LIMIT", "LOCK mx:a mx:b mx:c mx:d mx:e");
	kt_req_err(c, "LIMIT", "TRYLOCK mx:a mx:b mx:c mx:d mx:e");
	kt_req(c, "OK 0", "UNLOCKALL");
	/* LIMIT comes before HELD */
	kt_lock(c, "LOCK mx:a");
	kt_req_err(c, "LIMIT", "LOCK mx:a mx:b mx:c mx:d mx:e");
	kt_req_err(c, "LIMIT", "UNLOCK mx:a mx:b mx:c mx:d mx:e");
	kt_req(c, "OK 1", "UNLOCK mx:a");
	/* duplicate keys count once (keylockd-protocol(7), SEMANTICS) */
	kt_lock(c, "LOCK mx:a mx:a mx:a mx:a mx:a mx:a");
	kt_req(c, "OK 1", "UNLOCK mx:a mx:a mx:a mx:a mx:a");
	kt_lock(c, "LOCK mx:a mx:b mx:a mx:c mx:b mx:d mx:a");
	kt_send(c, "UNLOCK mx:a mx:b mx:c mx:e mx:d mx:a");
	kt_expect_prefix(c, "ERR LIMIT 5 keys in one request");
	kt_req(c, "OK 4", "UNLOCK mx:d mx:a mx:b mx:c mx:d mx:a");
}
END_TEST

START_TEST(max_locks_per_connection)
{
	struct kt_conn *c, *c2;

	kt_start("--max-locks", "3");
	c = kt_connect();
	c2 = kt_connect();
	kt_lock(c, "LOCK ml:a ml:b");
	kt_lock(c, "LOCK ml:c");
	kt_req_err(c, "LIMIT", "LOCK ml:d");
	kt_req_err(c, "LIMIT", "TRYLOCK ml:d");
	kt_req(c, "OK 1", "UNLOCK ml:a");
	kt_lock(c, "LOCK ml:d");
	kt_req(c, "OK 3", "UNLOCKALL");
	kt_req_err(c, "LIMIT", "LOCK ml:a ml:b ml:c ml:d");
	kt_req(c, "OK 0", "UNLOCKALL");
	kt_lock(c, "LOCK ml:a ml:b ml:c");
	/* per connection */
	kt_lock(c2, "LOCK ml:x ml:y ml:z");
	/* LIMIT comes before HELD */
	kt_req_err(c, "LIMIT", "LOCK ml:a");
}
END_TEST

START_TEST(max_clients_refuses_the_extra_connection)
{
	struct kt_conn	*c[3], *extra, *o;
	uint64_t	 deadline;

	kt_start("--max-clients", "3");
	for (int i = 0; i < 3; i++) {
		c[i] = kt_connect();
		kt_req(c[i], "OK PONG", "PING");
	}
	extra = kt_connect();
	kt_expect_line(extra, "ERR LIMIT too many connections");
	kt_expect_eof(extra, kt_ms(2000));
	kt_conn_close(extra);
	for (int i = 0; i < 3; i++)
		kt_req(c[i], "OK PONG", "PING");
	kt_wait_stat(c[0], "clients", 3);

	/* a freed slot can be used again */
	kt_conn_close(c[2]);
	deadline = kt_now_ms() + (uint64_t)kt_ms(5000);
	for (;;) {
		o = kt_connect();
		kt_send(o, "PING");
		kt_recv(o);
		if (kt_line_is(o, "OK PONG"))
			break;
		ck_assert_msg(kt_line_is(o, "ERR LIMIT too many connections"),
		    "got \"%s\"", kt_esc(o->line, o->linelen));
		kt_conn_close(o);
		ck_assert_msg(kt_now_ms() < deadline, "slot never freed");
		kt_sleep_ms(10);	/* polling interval */
	}
	kt_wait_stat(o, "clients", 3);

	/* keylockd-protocol(7), SESSIONS: a detached session keeps its
	 * connection's slot until it ends */
	kt_req(c[0], "OK PONG", "PING");
	kt_send(c[0], "SESSION grace=60000");
	kt_expect_prefix(c[0], "OK ");
	kt_conn_close(c[0]);
	kt_wait_stat(o, "sessions_detached", 1);
	extra = kt_connect();
	kt_expect_line(extra, "ERR LIMIT too many connections");
	kt_conn_close(extra);
	kt_conn_close(c[1]);
	kt_wait_stat(o, "clients", 1);
	extra = kt_connect();
	kt_req(extra, "OK PONG", "PING");
	o = kt_connect();
	kt_expect_line(o, "ERR LIMIT too many connections");
}
END_TEST

/* keylockd.conf(5), reserved-slots: silent network clients that took
 * every slot do not lock the operator out of the unix socket, which may go
 * that many past max-clients and no further. */
START_TEST(the_unix_socket_keeps_slots_for_operators)
{
	struct kt_conn	*c[3], *extra, *op[2], *ok;
	json_t		*r;
	json_int_t	 victim;

	if (!kt_have_unix())
		return;
	kt_start("--max-clients", "3", "--reserved-slots", "2");
	for (int i = 0; i < 3; i++) {
		c[i] = kt_connect();
		kt_req(c[i], "OK PONG", "PING");
	}
	kt_lock(c[0], "LOCK rs:k");
	extra = kt_connect();
	kt_expect_line(extra, "ERR LIMIT too many connections");
	for (int i = 0; i < 2; i++) {
		op[i] = kt_connect_unix();
		kt_req(op[i], "OK PONG", "PING");
	}
	extra = kt_connect_unix();	/* past the reserve too */
	kt_expect_line(extra, "ERR LIMIT too many connections");
	kt_send(op[0], "CLIENTS");
	r = kt_expect_json(op[0]);
	ck_assert_int_eq(kt_jint(r, "total"), 5);
	json_decref(r);
	victim = pu_holder_id(op[0], "rs:k");
	kt_req(op[0], "OK 1", "KILL %lld", (long long)victim);
	kt_expect_eof(c[0], kt_ms(2000));
	kt_wait_stat(op[1], "keys", 0);
	/* The network's slots count the operators too: one frees when two
	 * more connections go. */
	kt_conn_close(op[1]);
	kt_conn_close(c[1]);
	kt_wait_stat(op[0], "clients", 2);
	ok = kt_connect();
	kt_req(ok, "OK PONG", "PING");
}
END_TEST

/* keylockd.conf(5), auth-timeout, both sides: with no secret, a silent
 * connection is closed at the limit and not before; one that sent a line
 * stays. */
START_TEST(auth_timeout_closes_silent_connections_only)
{
	struct kt_conn	*quiet, *half, *talker;
	uint64_t	 t0;
	int64_t		 took;

	kt_start("--auth-timeout", "400");
	t0 = kt_now_ms();
	quiet = kt_connect();
	half = kt_connect();
	talker = kt_connect();
	kt_send_raw(half, "PIN", 3);	/* no complete line */
	kt_req(talker, "OK PONG", "PING");
	kt_expect_eof(quiet, kt_ms(3000));
	took = pu_elapsed_since(t0);
	ck_assert_msg(took >= 350, "closed after %lld ms, auth-timeout is "
	    "400", (long long)took);
	kt_expect_eof(half, kt_ms(3000));
	kt_sleep_ms(200);
	kt_req(talker, "OK PONG", "PING");	/* past the limit, kept */
	ck_assert_int_eq(kt_stat(talker, "auth_timeouts"), 2);
	ck_assert_int_eq(kt_stat(talker, "clients"), 1);
}
END_TEST

/* With a secret: PING before AUTH does not count, AUTH does; the third
 * wrong secret closes the connection. */
START_TEST(auth_timeout_and_failures_with_a_secret)
{
	struct kt_conn	*pinger, *authed, *guesser, *lucky;
	char		 path[256];

	kt_secret_file(kt_tmpdir(), "secret", "s3cret", path, sizeof(path));
	kt_start("--auth-file", path, "--auth-timeout", "400");
	pinger = kt_connect();
	authed = kt_connect();
	kt_req(pinger, "OK PONG", "PING");
	kt_req(authed, "OK", "AUTH s3cret");
	kt_expect_eof(pinger, kt_ms(3000));
	kt_sleep_ms(200);
	kt_req(authed, "OK PONG", "PING");

	guesser = kt_connect();
	kt_req_err(guesser, "AUTH", "AUTH guess1");
	kt_req_err(guesser, "AUTH", "AUTH guess2");
	kt_req_err(guesser, "AUTH", "AUTH guess3");
	kt_expect_eof(guesser, kt_ms(2000));
	lucky = kt_connect();
	kt_req_err(lucky, "AUTH", "AUTH guess1");
	kt_req_err(lucky, "AUTH", "AUTH guess2");
	kt_req(lucky, "OK", "AUTH s3cret");	/* two wrong, then right */
	kt_req(lucky, "OK PONG", "PING");
}
END_TEST

START_TEST(max_line_option_sets_the_limit)
{
	struct kt_conn	*c;
	char		 line[128];

	kt_start("--max-line", "100");
	c = kt_connect();
	memset(line, ' ', sizeof(line));
	memcpy(line, "PING", 4);
	line[99] = '\n';
	kt_send_raw(c, line, 100);
	kt_expect_line(c, "OK PONG");
	line[99] = ' ';
	line[100] = '\n';
	kt_send_raw(c, line, 101);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");
}
END_TEST

START_TEST(default_timeout_option_applies_without_timeout)
{
	struct kt_conn	*h, *w;
	uint64_t	 t0;
	int64_t		 dt;

	kt_start("--default-timeout", "200");
	h = kt_connect();
	w = kt_connect();
	kt_lock(h, "LOCK dt:k");
	t0 = kt_now_ms();
	kt_req_err(w, "TIMEOUT", "LOCK dt:k");
	dt = pu_elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 400), "default "
	    "timeout 200 ended after %lld ms", (long long)dt);
	t0 = kt_now_ms();
	kt_req_err(w, "TIMEOUT", "LOCK dt:k timeout=600");
	dt = pu_elapsed_since(t0);
	ck_assert_msg(dt >= 580 && dt <= kt_upper(600, 900), "timeout=600 "
	    "ended after %lld ms", (long long)dt);
}
END_TEST

START_TEST(default_max_waiters_option_applies)
{
	struct kt_conn *h, *w1, *w2, *o;

	kt_start("--default-max-waiters", "1");
	h = kt_connect();
	w1 = kt_connect();
	w2 = kt_connect();
	o = kt_connect();
	kt_lock(h, "LOCK dm:k");
	kt_send(w1, "LOCK dm:k");
	json_decref(kt_wait_queue(o, "dm:k", 1, 1));
	kt_req_err(w2, "BUSY", "LOCK dm:k");
	kt_send(w2, "LOCK dm:k max_waiters=2");
	json_decref(kt_wait_queue(o, "dm:k", 1, 2));
	kt_req(h, "OK 1", "UNLOCK dm:k");
	kt_expect_token(w1);
}
END_TEST

/*
 * What a PING may wait while n clients pipeline STATS and never read: the
 * server serves each at most a turn's share (256 requests) before it reads
 * the next (their replies go to the kernel's buffers, megabytes on
 * loopback, until max-output closes them), so the PING waits about one
 * turn, n x 256 STATS. One STATS is timed here, 256 of them on y, 16 at a
 * time (their replies fit max-output), so that a loaded or sanitized build
 * is judged by its own speed: twice that turn, never less than 500 ms
 * (scaled). A server that served a flooder's pipeline to its end before
 * the PING would keep it for 10922 STATS, 42 turns' worth.
 */
static int64_t
ping_bound_ms(struct kt_conn *y, int n)
{
	char		*batch = pu_repeat("STATS\n", 16);
	uint64_t	 t0 = kt_now_us();
	int64_t		 turn_ms;

	for (int i = 0; i < 256 / 16; i++) {
		kt_send_raw(y, batch, 16 * 6);
		for (int j = 0; j < 16; j++)
			json_decref(kt_expect_json(y));
	}
	turn_ms = (int64_t)(kt_now_us() - t0) * n / 1000;
	free(batch);
	return 2 * turn_ms > kt_cpu_ms(500) ? 2 * turn_ms : kt_cpu_ms(500);
}

START_TEST(client_that_never_reads_is_closed_others_are_served)
{
	struct kt_conn	*x, *y;
	char		*reqs = pu_repeat("STATS\n", 1000);
	uint64_t	 deadline, t0;
	size_t		 written = 0;
	bool		 closed = false;
	int64_t		 worst = 0, bound;

	kt_start("--max-output", "65536");
	y = kt_connect();
	x = kt_connect();
	kt_wait_stat(y, "clients", 2);
	bound = ping_bound_ms(y, 1);
	/* the flooder is closed after about 3,700 unread STATS replies (the
	 * socket buffers fill first); an ASan daemon at load 17 serves
	 * 250-300 a second: 15 s was just enough */
	deadline = kt_now_ms() + (uint64_t)kt_cpu_ms(60000);
	while (!closed && kt_now_ms() < deadline) {
		ssize_t n = kt_conn_write_some(x, reqs, 6000);

		if (n > 0)
			written += (size_t)n;
		else if (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK)
			closed = true;	/* EPIPE, ECONNRESET */
		t0 = kt_now_ms();
		kt_req(y, "OK PONG", "PING");
		if (pu_elapsed_since(t0) > worst)
			worst = pu_elapsed_since(t0);
		ck_assert_msg(pu_elapsed_since(t0) <= bound,
		    "PING took %lld ms (bound %lld) while another client "
		    "floods", (long long)pu_elapsed_since(t0),
		    (long long)bound);
		if (kt_stat(y, "clients") == 1)
			closed = true;
		if (n <= 0)
			kt_sleep_ms(5);	/* pacing */
	}
	ck_assert_msg(closed, "the server never closed a client that sent %zu "
	    "bytes of STATS requests and read nothing (--max-output 65536)",
	    written);
	kt_wait_stat(y, "clients", 1);
	/* the flooder sees the end after what was already delivered */
	for (;;) {
		enum kt_read r = kt_conn_readline(x, kt_ms(5000));

		if (r == KT_EOF)
			break;
		ck_assert_msg(r == KT_LINE, "flooder: %s", r == KT_TIMEOUT ?
		    "no EOF" : "read error");
	}
	kt_req(y, "OK PONG", "PING");
	free(reqs);
}
END_TEST

START_TEST(clients_that_never_read_do_not_stall_the_others)
{
	struct kt_conn	*x[8], *y;
	char		*reqs = pu_repeat("STATS\n", 10922);	/* 64 kB */
	bool		 open[8];
	int		 nopen = 8;
	int64_t		 worst = 0, dt, bound;
	uint64_t	 deadline, t0;

	/* keylockd-protocol(7) is silent; keylockd(8), SECURITY: no input from the network can
	 * make the server stop serving others */
	kt_start("--max-output", "65536");
	y = kt_connect();
	for (int i = 0; i < 8; i++) {
		x[i] = kt_connect();
		open[i] = true;
	}
	kt_wait_stat(y, "clients", 9);
	bound = ping_bound_ms(y, 8);
	/* Each flooder is closed only once the kernel's buffers (megabytes
	 * on loopback) and max-output are full of STATS replies, at one
	 * share of a turn each: give a loaded, sanitized build time. */
	deadline = kt_now_ms() + (uint64_t)kt_cpu_ms(60000);
	while (nopen > 0 && kt_now_ms() < deadline) {
		for (int i = 0; i < 8; i++) {
			ssize_t n;

			if (!open[i])
				continue;
			n = kt_conn_write_some(x[i], reqs, 6 * 10922);
			if (n == -1 && errno != EAGAIN &&
			    errno != EWOULDBLOCK) {
				open[i] = false;
				nopen--;
			}
		}
		t0 = kt_now_ms();
		kt_send(y, "PING");
		kt_recv_within(y, kt_cpu_ms(15000));
		dt = pu_elapsed_since(t0);
		worst = dt > worst ? dt : worst;
		ck_assert_msg(kt_line_is(y, "OK PONG"), "got \"%s\"",
		    kt_esc(y->line, y->linelen));
		ck_assert_msg(dt <= bound, "PING took %lld ms (bound %lld) "
		    "while 8 clients pipeline STATS and never read",
		    (long long)dt, (long long)bound);
	}
	kt_wait_stat(y, "clients", 1);
	free(reqs);
}
END_TEST

static Suite *
protocol_errors_suite(void)
{
	Suite	*s = suite_create("protocol_errors");
	TCase	*tc;

	tc = kt_tcase(s, "errors", KT_ANY, 30, NULL);
	tcase_add_test(tc, syntax_errors);
	tcase_add_test(tc, badkey_rules);
	tcase_add_test(tc, keys_per_request_default_limit_is_64);
	tcase_add_test(tc, duplicates_count_once_up_to_1024_keys);
	tcase_add_test(tc, conflict_when_limit_differs);
	tcase_add_test(tc, busy_when_max_waiters_reached);
	tcase_add_test(tc, locked_for_trylock_and_timeout_zero);
	tcase_add_test(tc, error_precedence);

	tc = kt_tcase(s, "limits", KT_PRIVATE, 30, kt_setup_none);
	if (tc != NULL) {
		tcase_add_test(tc, the_unix_socket_keeps_slots_for_operators);
		tcase_add_test(tc, auth_timeout_closes_silent_connections_only);
		tcase_add_test(tc, auth_timeout_and_failures_with_a_secret);
		tcase_add_test(tc, max_keys_per_request);
		tcase_add_test(tc, max_locks_per_connection);
		tcase_add_test(tc, max_clients_refuses_the_extra_connection);
		tcase_add_test(tc, max_line_option_sets_the_limit);
		tcase_add_test(tc,
		    default_timeout_option_applies_without_timeout);
		tcase_add_test(tc, default_max_waiters_option_applies);
	}
	/* Flooders are closed once the kernel's buffers (megabytes) hold
	 * their replies: tens of thousands of STATS each, seconds of a
	 * sanitized build, more on a loaded machine. */
	tc = kt_tcase(s, "floods", KT_PRIVATE, 90, kt_setup_none);
	if (tc != NULL) {
		tcase_add_test(tc,
		    client_that_never_reads_is_closed_others_are_served);
		tcase_add_test(tc,
		    clients_that_never_read_do_not_stall_the_others);
	}
	return s;
}

const struct check_program check_program = {
	.name = "protocol_errors_test",
	.init = kt_init,
	.suites = { protocol_errors_suite, NULL }
};
