/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The wire protocol against the real daemon on real sockets: every command,
 * reply shape, error code, limit and option of PROTOCOL.md, read as scripts
 * (send a line, expect an exact line). Each test gets its own daemon; none
 * sleeps to synchronise (INFO and STATS are polled until a deadline).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "kltest.h"

/* Helpers */

static char *
repeat(const char *unit, size_t n)
{
	size_t	 ul = strlen(unit);
	char	*s = malloc(ul * n + 1);

	ck_assert_ptr_nonnull(s);
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * ul, unit, ul);
	s[ul * n] = '\0';
	return s;
}

/* Whether line holds the decimal number v as a word (not inside a longer
 * number). */
static bool
has_number(const char *line, json_int_t v)
{
	char		 num[32];
	const char	*p = line;
	size_t		 n;

	snprintf(num, sizeof(num), "%lld", (long long)v);
	n = strlen(num);
	while ((p = strstr(p, num)) != NULL) {
		bool before = p == line || p[-1] < '0' || p[-1] > '9';
		bool after = p[n] < '0' || p[n] > '9';

		if (before && after)
			return true;
		p++;
	}
	return false;
}

static json_t *
jarr_at(json_t *o, const char *member, size_t i)
{
	json_t *a = json_object_get(o, member);

	ck_assert_msg(json_is_array(a), "\"%s\" is not an array", member);
	ck_assert_msg(i < json_array_size(a), "\"%s\" has %zu elements, want "
	    "more than %zu", member, json_array_size(a), i);
	return json_array_get(a, i);
}

/* The client id of whoever holds key first, from INFO on connection o. */
static json_int_t
holder_id(struct kt_conn *o, const char *key)
{
	json_t		*info = kt_wait_queue(o, key, 1, 0);
	json_int_t	 id = kt_jint(jarr_at(info, "holders", 0), "client");

	json_decref(info);
	return id;
}

static void
check_blocker_text(const char *line, const char *key, json_int_t id,
    const char *name)
{
	ck_assert_msg(strstr(line, key) != NULL, "\"%s\" does not name the "
	    "key %s", line, key);
	ck_assert_msg(has_number(line, id), "\"%s\" does not name the "
	    "blocking client id %lld", line, (long long)id);
	if (name != NULL)
		ck_assert_msg(strstr(line, name) != NULL, "\"%s\" does not "
		    "name the blocker's name %s", line, name);
}

static void
expect_err_either(struct kt_conn *c, const char *code1, const char *code2)
{
	kt_recv(c);
	ck_assert_msg(kt_line_is_err(c, code1) || kt_line_is_err(c, code2),
	    "sent \"%s\": expected ERR %s or ERR %s, got \"%s\"", c->lastsent,
	    code1, code2, kt_esc(c->line, c->linelen));
}

static int64_t
elapsed_since(uint64_t t0)
{
	return (int64_t)(kt_now_ms() - t0);
}

/* Lets time pass (the scenario, not synchronisation) until t0 + ms. */
static void
sleep_until(uint64_t t0, int64_t ms)
{
	int64_t left = ms - elapsed_since(t0);

	if (left > 0)
		kt_sleep_ms((uint64_t)left);
}

/* basic: commands and reply shapes */

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

		ck_assert_int_eq(kt_jint(jarr_at(info, "holders", 0), "token"),
		    (json_int_t)t);
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
	sleep_until(t0, 750 * s);
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
	ida = holder_id(o, "in:k");
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
	check_holder(jarr_at(info, "holders", 0), ida, "alice", t, "exclusive");
	ck_assert_int_ge(kt_jint(jarr_at(info, "holders", 0), "held_ms"), 90);
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
	check_holder(jarr_at(info, "holders", 0), idb, NULL, t, "exclusive");
	ck_assert_int_eq(kt_jint(jarr_at(info, "waiters", 0), "client"), idc);
	ck_assert_int_eq(kt_jint(jarr_at(info, "waiters", 1), "client"), idd);
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
	char		*n64 = repeat("n", 64), *n65 = repeat("n", 65);
	json_t		*info;

	kt_req(c, "OK", "NAME worker-1");
	kt_lock(c, "LOCK nm:k");
	info = kt_info(o, "nm:k");
	ck_assert_str_eq(json_string_value(json_object_get(jarr_at(info,
	    "holders", 0), "name")), "worker-1");
	json_decref(info);
	kt_req(c, "OK", "nAmE worker-2");
	kt_req(c, "OK", "NAME %s", n64);
	info = kt_info(o, "nm:k");
	ck_assert_str_eq(json_string_value(json_object_get(jarr_at(info,
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
	ck_assert_str_eq(json_string_value(json_object_get(jarr_at(info,
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
	struct kt_conn *c3 = kt_connect(), *o = kt_connect();

	kt_req(c, "OK", "QUIT");
	kt_expect_eof(c, kt_ms(2000));

	/* nothing after QUIT is answered */
	kt_send_raw(c2, "quit\nPING\n", 10);
	kt_expect_line(c2, "OK");
	kt_expect_eof(c2, kt_ms(2000));

	/* and its locks are gone once it is closed */
	kt_lock(c3, "LOCK qt:k");
	kt_req(c3, "OK", "QUIT");
	kt_expect_eof(c3, kt_ms(2000));
	kt_lock(o, "TRYLOCK qt:k");
}
END_TEST

START_TEST(one_cr_before_lf_is_dropped)
{
	struct kt_conn *c = kt_connect();

	kt_send_raw(c, "PING\r\n", 6);
	kt_expect_line(c, "OK PONG");
	kt_send_raw(c, "LOCK cr:key\r\n", 13);
	kt_expect_token(c);
	kt_send_raw(c, "UNLOCK cr:key\n", 14);
	kt_expect_line(c, "OK 1");
	/* only one CR goes: "PING\r" is no command */
	kt_send_raw(c, "PING\r\r\n", 7);
	kt_expect_err(c, "SYNTAX");
	/* a CR inside a key is a control byte */
	kt_send_raw(c, "LOCK cr:a\rb\n", 12);
	kt_expect_err(c, "BADKEY");
	kt_send_raw(c, "UNLOCKALL\r\n", 11);
	kt_expect_line(c, "OK 0");
}
END_TEST

START_TEST(empty_and_blank_lines_get_no_reply)
{
	struct kt_conn	*c = kt_connect();
	const char	 blank[] = "\n\r\n   \n\t\t\n \t \r\n\n\n";

	kt_send_raw(c, blank, sizeof(blank) - 1);
	kt_expect_silence(c, 150);
	kt_send_raw(c, blank, sizeof(blank) - 1);
	kt_send_raw(c, "PING\n", 5);
	kt_expect_line(c, "OK PONG");
	kt_expect_silence(c, 100);
	/* leading and trailing blanks around a request are fine */
	kt_send_raw(c, " \t PING \t \r\n", 12);
	kt_expect_line(c, "OK PONG");
	kt_send_raw(c, "LOCK\t \tbl:a  \t bl:b \n", 21);
	kt_expect_token(c);
	kt_req(c, "OK 2", "UNLOCKALL");
}
END_TEST

START_TEST(commands_and_options_are_case_insensitive_keys_are_not)
{
	struct kt_conn *c = kt_connect(), *c2 = kt_connect();

	kt_lock(c, "lock ci:a TIMEOUT=1000 Mode=exclusive");
	kt_req(c, "OK 1", "Unlock ci:a");
	kt_lock(c, "trylock ci:b TTL=5000 MAX_WAITERS=3");
	kt_lock(c, "LoCk ci:c LIMIT=2");
	kt_req(c, "OK 2", "unlockall");
	kt_req(c, "OK", "name ci-client");
	kt_send(c, "stats");
	json_decref(kt_expect_json(c));
	kt_send(c, "info ci:a");
	kt_recv(c);
	ck_assert_msg(kt_line_has_prefix(c, "OK {") ||
	    kt_line_has_prefix(c, "ERR "), "info: %s",
	    kt_esc(c->line, c->linelen));

	kt_lock(c, "LOCK ci:Key");
	kt_lock(c2, "TRYLOCK ci:key");
	kt_lock(c2, "TRYLOCK ci:KEY");
	kt_req_err(c2, "LOCKED", "TRYLOCK ci:Key");
	kt_req(c, "OK", "QuIt");
}
END_TEST

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
	char		*k250 = repeat("k", 250), *k251 = repeat("k", 251);
	char		*e250 = repeat("\xc3\xa9", 125); /* e acute */
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

START_TEST(toolong_at_the_line_limit)
{
	struct kt_conn	*c = kt_connect();
	char		 line[8192], *huge;
	size_t		 n;

	/* 4096 bytes with the LF: accepted */
	memset(line, ' ', sizeof(line));
	memcpy(line, "PING", 4);
	line[4095] = '\n';
	kt_send_raw(c, line, 4096);
	kt_expect_line(c, "OK PONG");
	/* 4096 with CR and LF: accepted */
	line[4094] = '\r';
	kt_send_raw(c, line, 4096);
	kt_expect_line(c, "OK PONG");
	/* 4097: TOOLONG, and the connection stays usable */
	line[4094] = ' ';
	line[4095] = ' ';
	line[4096] = '\n';
	kt_send_raw(c, line, 4097);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");
	/* 4097 counting the CR */
	line[4095] = '\r';
	kt_send_raw(c, line, 4097);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");

	/* a real request of exactly 4096 bytes: 17 keys */
	n = 0;
	n += (size_t)sprintf(line + n, "LOCK");
	for (int i = 0; i < 16; i++) {
		line[n++] = ' ';
		line[n++] = (char)('a' + i);
		memset(line + n, 'x', 249);
		n += 249;
	}
	line[n++] = ' ';
	line[n++] = 'q';
	memset(line + n, 'x', 73);
	n += 73;
	line[n++] = '\n';
	ck_assert_uint_eq(n, 4096);
	kt_send_raw(c, line, n);
	kt_expect_token(c);
	kt_req(c, "OK 17", "UNLOCKALL");
	/* one byte more: TOOLONG, nothing taken */
	memmove(line + n, line + n - 1, 1);
	line[n - 1] = 'x';
	kt_send_raw(c, line, n + 1);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK 0", "UNLOCKALL");

	/* TOOLONG before SYNTAX: an overlong line of garbage */
	memset(line, 0xff, 5000);
	line[5000] = '\n';
	kt_send_raw(c, line, 5001);
	kt_expect_err(c, "TOOLONG");

	/* 100 kB and the next request in one write: two replies */
	huge = malloc(100 * 1024 + 16);
	ck_assert_ptr_nonnull(huge);
	memset(huge, 'x', 100 * 1024);
	memcpy(huge + 100 * 1024, "\nPING\n", 6);
	kt_send_raw(c, huge, 100 * 1024 + 6);
	kt_expect_err(c, "TOOLONG");
	kt_expect_line(c, "OK PONG");
	kt_expect_silence(c, 100);
	free(huge);

	/* an overlong line arriving in pieces */
	memset(line, 'y', 3000);
	kt_send_raw(c, line, 3000);
	kt_sleep_ms(30);	/* a second segment */
	kt_send_raw(c, line, 3000);
	kt_send_raw(c, "\n", 1);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");

	/* 4095 bytes without LF may still become a valid line */
	memset(line, ' ', 4095);
	memcpy(line, "PING", 4);
	kt_send_raw(c, line, 4095);
	kt_expect_silence(c, 100);
	kt_send_raw(c, "\n", 1);
	kt_expect_line(c, "OK PONG");
	/* 4096 bytes and no LF yet: one TOOLONG in all */
	memset(line, ' ', 4096);
	memcpy(line, "PING", 4);
	kt_send_raw(c, line, 4096);
	kt_sleep_ms(30);
	kt_send_raw(c, "   \n", 4);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");
	kt_expect_silence(c, 100);
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
	hid = holder_id(o, "bz:k");
	t0 = kt_now_ms();
	line = kt_req_err(w1, "BUSY", "LOCK bz:k max_waiters=0");
	ck_assert_int_le(elapsed_since(t0), kt_ms(500));
	check_blocker_text(line, "bz:k", hid, "busy-holder");
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

START_TEST(deadlock_between_two_clients)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*o = kt_connect();
	const char	*line;
	json_int_t	 ida;
	uint64_t	 t0;

	kt_req(a, "OK", "NAME dl-alice");
	kt_lock(a, "LOCK dl:x");
	kt_lock(b, "LOCK dl:y");
	ida = holder_id(o, "dl:x");
	kt_send(a, "LOCK dl:y");
	json_decref(kt_wait_queue(o, "dl:y", 1, 1));
	t0 = kt_now_ms();
	line = kt_req_err(b, "DEADLOCK", "LOCK dl:x");
	ck_assert_int_le(elapsed_since(t0), kt_ms(500));
	check_blocker_text(line, "dl:x", ida, "dl-alice");
	/* nothing queued, everybody else unaffected */
	json_decref(kt_wait_queue(o, "dl:x", 1, 0));
	kt_expect_silence(a, 100);
	kt_req(b, "OK PONG", "PING");
	kt_req(b, "OK 1", "UNLOCK dl:y");
	kt_expect_token(a);
	/* without a held lock, b may wait */
	kt_send(b, "LOCK dl:x");
	json_decref(kt_wait_queue(o, "dl:x", 1, 1));
	kt_req(a, "OK 2", "UNLOCKALL");
	kt_expect_token(b);
}
END_TEST

START_TEST(deadlock_in_a_three_cycle)
{
	struct kt_conn *a = kt_connect(), *b = kt_connect();
	struct kt_conn *c = kt_connect(), *o = kt_connect();

	kt_lock(a, "LOCK d3:x");
	kt_lock(b, "LOCK d3:y");
	kt_lock(c, "LOCK d3:z");
	kt_send(a, "LOCK d3:y");
	json_decref(kt_wait_queue(o, "d3:y", 1, 1));
	kt_send(b, "LOCK d3:z");
	json_decref(kt_wait_queue(o, "d3:z", 1, 1));
	kt_req_err(c, "DEADLOCK", "LOCK d3:x");
	kt_expect_silence(a, 50);
	kt_expect_silence(b, 50);
	/* a request that closes no cycle still waits */
	kt_send(o, "LOCK d3:x timeout=%lld", (long long)kt_ms(10000));
	kt_expect_silence(o, 100);
	kt_req(c, "OK 1", "UNLOCK d3:z");
	kt_expect_token(b);
	kt_req(b, "OK 2", "UNLOCKALL");
	kt_expect_token(a);
	kt_req(a, "OK 2", "UNLOCKALL");
	kt_expect_token(o);
}
END_TEST

START_TEST(deadlock_through_a_request_queued_ahead)
{
	struct kt_conn *a = kt_connect(), *b = kt_connect();
	struct kt_conn *w = kt_connect(), *o = kt_connect();

	/* b -> w (queued ahead on x) -> a (holder of x) -> b (holder of y) */
	kt_lock(a, "LOCK dq:x mode=shared");
	kt_send(w, "LOCK dq:x");
	json_decref(kt_wait_queue(o, "dq:x", 1, 1));
	kt_lock(b, "LOCK dq:y");
	kt_send(b, "LOCK dq:x mode=shared");
	json_decref(kt_wait_queue(o, "dq:x", 1, 2));
	kt_expect_silence(b, 100);	/* no overtaking the writer */
	kt_req_err(a, "DEADLOCK", "LOCK dq:y");
	kt_req(a, "OK 1", "UNLOCK dq:x");
	kt_expect_token(w);
	kt_req(w, "OK 1", "UNLOCK dq:x");
	kt_expect_token(b);
}
END_TEST

START_TEST(semaphore_wait_deadlocks_only_if_every_holder_is_in_the_cycle)
{
	struct kt_conn *a = kt_connect(), *b = kt_connect();
	struct kt_conn *c = kt_connect(), *o = kt_connect();

	/* c holds the semaphore too and waits for nothing: no cycle */
	kt_lock(a, "LOCK sd:s limit=2");
	kt_lock(c, "LOCK sd:s limit=2");
	kt_lock(b, "LOCK sd:y");
	kt_send(a, "LOCK sd:y");
	json_decref(kt_wait_queue(o, "sd:y", 1, 1));
	kt_send(b, "LOCK sd:s limit=2");
	json_decref(kt_wait_queue(o, "sd:s", 2, 1));
	kt_expect_silence(b, 100);
	kt_req(c, "OK 1", "UNLOCK sd:s");
	kt_expect_token(b);
	kt_req(b, "OK 2", "UNLOCKALL");
	kt_expect_token(a);
	kt_req(a, "OK 2", "UNLOCKALL");

	/* both holders wait for b: b's wait would close the cycle */
	kt_lock(a, "LOCK sd:t limit=2");
	kt_lock(c, "LOCK sd:t limit=2");
	kt_lock(b, "LOCK sd:z");
	kt_send(a, "LOCK sd:z");
	json_decref(kt_wait_queue(o, "sd:z", 1, 1));
	kt_send(c, "LOCK sd:z");
	json_decref(kt_wait_queue(o, "sd:z", 1, 2));
	kt_req_err(b, "DEADLOCK", "LOCK sd:t limit=2");
	kt_req(b, "OK 1", "UNLOCKALL");
	kt_expect_token(a);
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
	hid = holder_id(o, "lk:k");
	line = kt_req_err(c, "LOCKED", "TRYLOCK lk:k");
	check_blocker_text(line, "lk:k", hid, "lk-holder");
	t0 = kt_now_ms();
	kt_req_err(c, "LOCKED", "LOCK lk:k timeout=0");
	ck_assert_int_le(elapsed_since(t0), kt_ms(500));
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

		ck_assert_int_eq(kt_jint(jarr_at(ia, "holders", 0), "token"),
		    (json_int_t)t);
		ck_assert_int_eq(kt_jint(jarr_at(ib, "holders", 0), "token"),
		    (json_int_t)t);
		json_decref(ia);
		json_decref(ib);
	}
}
END_TEST

START_TEST(timeout_fails_within_window_and_names_the_blocker)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*o = kt_connect();
	const char	*line;
	json_int_t	 hid;
	int64_t		 dt;
	uint64_t	 t0;

	kt_req(h, "OK", "NAME holder-bob");
	kt_lock(h, "LOCK tmo:key-7");
	hid = holder_id(o, "tmo:key-7");
	t0 = kt_now_ms();
	kt_send(w, "LOCK tmo:key-7 timeout=200");
	line = kt_expect_err(w, "TIMEOUT");
	dt = elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 400), "timeout=200 "
	    "failed after %lld ms, want 180-%lld", (long long)dt,
	    (long long)kt_upper(200, 400));
	check_blocker_text(line, "tmo:key-7", hid, "holder-bob");
	/* the waiter is gone from the queue */
	json_decref(kt_wait_queue(o, "tmo:key-7", 1, 0));
	kt_req(w, "OK PONG", "PING");
	/* a multi-key wait names the key that blocks it */
	kt_send(w, "LOCK tmo:free tmo:key-7 timeout=100");
	line = kt_expect_err(w, "TIMEOUT");
	check_blocker_text(line, "tmo:key-7", hid, "holder-bob");
	kt_req(w, "OK 0", "UNLOCKALL");
	kt_lock(o, "TRYLOCK tmo:free");
}
END_TEST

START_TEST(grant_within_the_timeout_comes_when_released)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*o = kt_connect();
	int64_t		 dt;
	uint64_t	 t0;

	kt_lock(h, "LOCK gw:k");
	t0 = kt_now_ms();
	kt_send(w, "LOCK gw:k timeout=%lld", (long long)kt_ms(2000));
	json_decref(kt_wait_queue(o, "gw:k", 1, 1));
	sleep_until(t0, 200);	/* the hold */
	kt_req(h, "OK 1", "UNLOCK gw:k");
	kt_expect_token(w);
	dt = elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 400), "granted after "
	    "%lld ms, want 180-%lld", (long long)dt,
	    (long long)kt_upper(200, 400));
}
END_TEST

START_TEST(ttl_expiry_grants_the_waiter)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*o = kt_connect();
	json_t		*info;
	int64_t		 dt;
	uint64_t	 t0 = kt_now_ms(), tw;

	kt_lock(h, "LOCK ttl:k ttl=200");
	kt_send(w, "LOCK ttl:k timeout=%lld", (long long)kt_ms(5000));
	tw = kt_expect_token(w);
	dt = elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 500), "ttl=200 hold "
	    "ended after %lld ms, want 180-%lld", (long long)dt,
	    (long long)kt_upper(200, 500));
	kt_req_err(h, "NOTHELD", "UNLOCK ttl:k");
	kt_req_err(h, "NOTHELD", "REFRESH ttl:k ttl=100");
	kt_req(h, "OK 0", "UNLOCKALL");
	info = kt_info(o, "ttl:k");
	ck_assert_int_eq(kt_jint(jarr_at(info, "holders", 0), "token"),
	    (json_int_t)tw);
	json_decref(info);
	/* a ttl on a multi-key grant ends every key */
	kt_lock(h, "LOCK ttl:a ttl:b ttl=100");
	kt_lock(o, "LOCK ttl:a ttl:b timeout=%lld", (long long)kt_ms(3000));
	kt_req_err(h, "NOTHELD", "UNLOCK ttl:a");
}
END_TEST

START_TEST(shared_readers_together_writer_waits_reader_queues_behind_it)
{
	struct kt_conn	*r1 = kt_connect(), *r2 = kt_connect();
	struct kt_conn	*w = kt_connect(), *r3 = kt_connect();
	struct kt_conn	*r4 = kt_connect(), *o = kt_connect();
	json_t		*info;

	kt_lock(r1, "LOCK sh:k mode=shared");
	kt_lock(r2, "LOCK sh:k mode=shared");
	kt_send(w, "LOCK sh:k");
	json_decref(kt_wait_queue(o, "sh:k", 2, 1));
	kt_send(r3, "LOCK sh:k mode=shared");
	json_decref(kt_wait_queue(o, "sh:k", 2, 2));
	kt_expect_silence(r3, 100);
	kt_req_err(r4, "LOCKED", "TRYLOCK sh:k mode=shared");
	kt_req(r1, "OK 1", "UNLOCK sh:k");
	kt_expect_silence(w, 100);
	kt_req(r2, "OK 1", "UNLOCK sh:k");
	kt_expect_token(w);
	kt_expect_silence(r3, 100);
	kt_req(w, "OK 1", "UNLOCK sh:k");
	kt_expect_token(r3);
	info = kt_info(o, "sh:k");
	ck_assert_str_eq(json_string_value(json_object_get(jarr_at(info,
	    "holders", 0), "mode")), "shared");
	json_decref(info);
	kt_lock(r4, "TRYLOCK sh:k mode=shared");
	kt_req_err(o, "LOCKED", "TRYLOCK sh:k");
}
END_TEST

START_TEST(semaphore_admits_limit_holders_in_arrival_order)
{
	struct kt_conn *s[6], *o = kt_connect();

	for (int i = 0; i < 6; i++)
		s[i] = kt_connect();
	for (int i = 0; i < 3; i++)
		kt_lock(s[i], "LOCK sem:k limit=3");
	kt_send(s[3], "LOCK sem:k limit=3");
	json_decref(kt_wait_queue(o, "sem:k", 3, 1));
	kt_send(s[5], "LOCK sem:k limit=3");
	json_decref(kt_wait_queue(o, "sem:k", 3, 2));
	kt_req_err(s[4], "LOCKED", "TRYLOCK sem:k limit=3");
	kt_req(s[1], "OK 1", "UNLOCK sem:k");
	kt_expect_token(s[3]);
	kt_expect_silence(s[5], 100);
	json_decref(kt_wait_queue(o, "sem:k", 3, 1));
	kt_req_err(s[4], "LOCKED", "TRYLOCK sem:k limit=3");
	kt_req(s[0], "OK 1", "UNLOCK sem:k");
	kt_expect_token(s[5]);
	kt_req(s[2], "OK 1", "UNLOCK sem:k");
	kt_lock(s[4], "TRYLOCK sem:k limit=3");
}
END_TEST

START_TEST(disconnect_releases_locks_and_withdraws_the_wait)
{
	struct kt_conn	*h = kt_connect(), *w1 = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	json_t		*info;

	kt_req(w2, "OK", "NAME second");
	kt_lock(h, "LOCK dc:k dc:other");
	kt_send(w1, "LOCK dc:k");
	json_decref(kt_wait_queue(o, "dc:k", 1, 1));
	kt_send(w2, "LOCK dc:k");
	json_decref(kt_wait_queue(o, "dc:k", 1, 2));
	kt_conn_close(w1);
	info = kt_wait_queue(o, "dc:k", 1, 1);
	ck_assert_str_eq(json_string_value(json_object_get(jarr_at(info,
	    "waiters", 0), "name")), "second");
	json_decref(info);
	kt_conn_close(h);
	kt_expect_token(w2);
	kt_lock(o, "LOCK dc:other timeout=%lld", (long long)kt_ms(3000));
	kt_conn_close(w2);
	kt_lock(o, "LOCK dc:k timeout=%lld", (long long)kt_ms(3000));
}
END_TEST

START_TEST(withdrawn_wait_lets_the_requests_behind_it_in)
{
	struct kt_conn	*h = kt_connect(), *w1 = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	uint64_t	 t0;

	/* w1 waits for a and b; a has no holder but w1 stands first */
	kt_lock(h, "LOCK wd:b");
	kt_send(w1, "LOCK wd:a wd:b");
	json_decref(kt_wait_queue(o, "wd:a", 0, 1));
	kt_send(w2, "LOCK wd:a");
	json_decref(kt_wait_queue(o, "wd:a", 0, 2));
	kt_expect_silence(w2, 100);
	/* w1 goes away: w2 is granted at once */
	kt_conn_close(w1);
	kt_expect_token(w2);
	kt_req(w2, "OK 1", "UNLOCK wd:a");

	/* the same when w1's wait times out */
	w1 = kt_connect();
	kt_send(w1, "LOCK wd:a wd:b timeout=300");
	json_decref(kt_wait_queue(o, "wd:a", 0, 1));
	t0 = kt_now_ms();
	kt_send(w2, "LOCK wd:a");
	json_decref(kt_wait_queue(o, "wd:a", 0, 2));
	kt_expect_err(w1, "TIMEOUT");
	kt_expect_token(w2);
	ck_assert_int_le(elapsed_since(t0), kt_upper(300, 600));
	kt_req(w2, "OK 1", "UNLOCK wd:a");

	/* a reader behind a writer that gives up joins the readers */
	kt_lock(h, "LOCK wd:r mode=shared");
	kt_send(w1, "LOCK wd:r timeout=300");
	json_decref(kt_wait_queue(o, "wd:r", 1, 1));
	kt_send(w2, "LOCK wd:r mode=shared");
	json_decref(kt_wait_queue(o, "wd:r", 1, 2));
	kt_expect_silence(w2, 100);
	kt_expect_err(w1, "TIMEOUT");
	kt_expect_token(w2);
	json_decref(kt_wait_queue(o, "wd:r", 2, 0));
}
END_TEST

START_TEST(multikey_wait_needs_every_key_free)
{
	struct kt_conn *h = kt_connect(), *w = kt_connect();
	struct kt_conn *o = kt_connect();

	kt_lock(h, "LOCK mw:a mw:b");
	kt_send(w, "LOCK mw:b mw:a");
	json_decref(kt_wait_queue(o, "mw:a", 1, 1));
	kt_req(h, "OK 1", "UNLOCK mw:a");
	kt_expect_silence(w, 150);
	json_decref(kt_wait_queue(o, "mw:a", 0, 1));
	kt_req(h, "OK 1", "UNLOCK mw:b");
	kt_expect_token(w);
	json_decref(kt_wait_queue(o, "mw:a", 1, 0));
	json_decref(kt_wait_queue(o, "mw:b", 1, 0));
}
END_TEST

/* pipelining and framing */

START_TEST(waiting_client_with_a_long_pipeline_gets_every_reply)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	char		*pings = repeat("PING\n", 20000); /* 100 kB */

	kt_lock(h, "LOCK lp:k");
	kt_send(w, "LOCK lp:k");
	kt_send_raw(w, pings, 5 * 20000);
	json_decref(kt_wait_queue(o, "lp:k", 1, 1));
	kt_expect_silence(w, 100);
	/* a waiter with a full pipeline that hangs up is withdrawn too */
	kt_send(w2, "LOCK lp:k");
	kt_send_raw(w2, pings, 5 * 20000);
	json_decref(kt_wait_queue(o, "lp:k", 1, 2));
	kt_conn_close(w2);
	json_decref(kt_wait_queue(o, "lp:k", 1, 1));
	kt_req(o, "OK PONG", "PING");

	kt_req(h, "OK 1", "UNLOCK lp:k");
	kt_expect_token(w);
	for (int i = 0; i < 20000; i++) {
		kt_recv(w);
		ck_assert_msg(kt_line_is(w, "OK PONG"), "reply %d after the "
		    "grant is \"%s\"", i, kt_esc(w->line, w->linelen));
	}
	kt_req(w, "OK 1", "UNLOCK lp:k");
	kt_expect_silence(w, 50);
	free(pings);
}
END_TEST

START_TEST(half_closed_connection_gets_its_replies)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	const char	 script[] = "PING\nLOCK hc:k\nSTATS\n";

	/* echo ... | nc -N: the requests are sent, then the write side
	 * is shut; every request still gets its reply */
	kt_send_raw(c, script, sizeof(script) - 1);
	ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
	kt_expect_line(c, "OK PONG");
	kt_expect_token(c);
	json_decref(kt_expect_json(c));
	kt_expect_eof(c, kt_ms(3000));
	/* and the connection's end released its lock */
	kt_lock(o, "LOCK hc:k timeout=%lld", (long long)kt_ms(3000));
}
END_TEST

START_TEST(pipelined_5000_pings_get_5000_replies)
{
	struct kt_conn	*c = kt_connect();
	char		*lines = repeat("PING\n", 5000);

	kt_send_raw(c, lines, 5 * 5000);
	for (int i = 0; i < 5000; i++) {
		kt_recv(c);
		ck_assert_msg(kt_line_is(c, "OK PONG"), "reply %d is \"%s\"",
		    i, kt_esc(c->line, c->linelen));
	}
	kt_expect_silence(c, 100);
	free(lines);
}
END_TEST

START_TEST(pipelined_mixed_requests_are_answered_in_order)
{
	struct kt_conn	*c = kt_connect();
	size_t		 cap = 400 * 80, n = 0;
	char		*buf = malloc(cap);
	uint64_t	 prev = 0, t;

	ck_assert_ptr_nonnull(buf);
	for (int i = 0; i < 400; i++)
		n += (size_t)snprintf(buf + n, cap - n, "LOCK pm:%d\nPING\n"
		    "UNLOCK pm:%d\nUNLOCK pm:%d\nFROB\n", i, i, i);
	kt_send_raw(c, buf, n);
	for (int i = 0; i < 400; i++) {
		t = kt_expect_token(c);
		ck_assert_msg(i == 0 || t > prev, "token order");
		prev = t;
		kt_expect_line(c, "OK PONG");
		kt_expect_line(c, "OK 1");
		kt_expect_err(c, "NOTHELD");
		kt_expect_err(c, "SYNTAX");
	}
	kt_expect_silence(c, 100);
	free(buf);
}
END_TEST

START_TEST(waiting_lock_holds_back_later_lines)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*o = kt_connect();
	const char	 script[] = "LOCK wq:k\nPING\nUNLOCK wq:k\n"
			    "TRYLOCK wq:k\nPING\nLOCK wq:other\n";
	uint64_t	 t1, t2;

	kt_lock(h, "LOCK wq:k");
	kt_send_raw(w, script, sizeof(script) - 1);
	json_decref(kt_wait_queue(o, "wq:k", 1, 1));
	kt_expect_silence(w, 200);
	/* the lines behind the wait are not run yet */
	kt_lock(o, "TRYLOCK wq:other");
	kt_req(o, "OK 1", "UNLOCK wq:other");
	kt_req(h, "OK 1", "UNLOCK wq:k");
	t1 = kt_expect_token(w);
	kt_expect_line(w, "OK PONG");
	kt_expect_line(w, "OK 1");
	t2 = kt_expect_token(w);
	ck_assert(t2 > t1);
	kt_expect_line(w, "OK PONG");
	kt_expect_token(w);
	kt_expect_silence(w, 50);
}
END_TEST

START_TEST(request_sent_one_byte_at_a_time)
{
	struct kt_conn	*c = kt_connect();
	const char	*lines[] = { "LOCK bb:key timeout=5000\n",
			    "UNLOCK bb:key\n", "PING\r\n" };
	const char	*want[] = { NULL, "OK 1", "OK PONG" };

	for (int l = 0; l < 3; l++) {
		size_t len = strlen(lines[l]);

		for (size_t i = 0; i < len; i++) {
			if (i == len - 1)
				kt_expect_silence(c, 20);
			kt_send_raw(c, lines[l] + i, 1);
			kt_sleep_ms(2);	/* one segment per byte */
		}
		if (want[l] == NULL)
			kt_expect_token(c);
		else
			kt_expect_line(c, want[l]);
	}
}
END_TEST

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 11);
}

/* Counts the replies PROTOCOL.md promises for buf: one per line that is not
 * empty or blank after dropping one CR. */
static int
count_requests(const char *buf, size_t len)
{
	int	n = 0;
	size_t	start = 0;

	for (size_t i = 0; i < len; i++) {
		size_t	end = i;
		bool	blank = true;

		if (buf[i] != '\n')
			continue;
		if (end > start && buf[end - 1] == '\r')
			end--;
		for (size_t j = start; j < end; j++)
			if (buf[j] != ' ' && buf[j] != '\t')
				blank = false;
		n += !blank;
		start = i + 1;
	}
	return n;
}

START_TEST(binary_garbage_gets_err_lines_and_service_goes_on)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	size_t		 cap = 300 * 200 + 64 * 1024 + 32, n = 0;
	char		*buf = malloc(cap);
	int		 want;

	ck_assert_ptr_nonnull(buf);
	/* lines that cannot start a command: NUL, controls, 8-bit bytes */
	for (int i = 0; i < 300; i++) {
		static const char first[] = { '\0', '\x01', '\x1b', '\x7f',
		    '\x80', '\xc0', '\xff', '!', '{', '=' };
		int len = (int)(rng() % 150);

		buf[n++] = first[rng() % sizeof(first)];
		for (int j = 0; j < len; j++) {
			char ch = (char)(rng() & 0xff);

			buf[n++] = ch == '\n' ? '\0' : ch;
		}
		buf[n++] = '\n';
	}
	want = count_requests(buf, n);
	ck_assert_int_eq(want, 300);
	kt_send_raw(c, buf, n);
	for (int i = 0; i < want; i++) {
		kt_recv(c);
		ck_assert_msg(kt_line_is_err(c, "SYNTAX"), "garbage line %d "
		    "got \"%s\", want ERR SYNTAX", i,
		    kt_esc(c->line, c->linelen));
	}
	kt_req(c, "OK PONG", "PING");

	/* then 64 kB of anything, LFs included, some lines overlong */
	n = 0;
	for (int i = 0; i < 64 * 1024; i++) {
		uint32_t r = rng();

		buf[n++] = r % 61 == 0 ? '\n' : (char)(r >> 8);
		if (i % 16384 == 8000) {
			memset(buf + n, (int)(r & 0x7f) | 0x80, 5000);
			n += 5000;
		}
	}
	buf[n++] = '\n';
	want = count_requests(buf, n);
	kt_send_raw(c, buf, n);
	for (int i = 0; i < want; i++) {
		kt_recv(c);
		ck_assert_msg(kt_line_has_prefix(c, "ERR ") &&
		    (kt_line_is_err(c, "SYNTAX") || kt_line_is_err(c, "BADKEY")
		    || kt_line_is_err(c, "TOOLONG")), "random line %d of %d "
		    "got \"%s\"", i, want, kt_esc(c->line, c->linelen));
	}
	kt_req(c, "OK PONG", "PING");
	kt_expect_silence(c, 50);
	kt_req(o, "OK PONG", "PING");
	/* NUL is no terminator */
	kt_send_raw(c, "PING\0\n", 6);
	kt_expect_err(c, "SYNTAX");
	kt_send_raw(c, "PING\0PING\n", 10);
	kt_expect_err(c, "SYNTAX");
	kt_req(c, "OK 0", "UNLOCKALL");
	free(buf);
}
END_TEST

/* STATS */

static void
check_hist(json_t *stats, const char *member)
{
	json_t		*h = json_object_get(stats, member), *b;
	json_int_t	 sum = 0, prev = -1;
	size_t		 n;

	ck_assert_msg(json_is_object(h), "\"%s\" is not an object", member);
	b = json_object_get(h, "buckets");
	ck_assert_msg(json_is_array(b) && json_array_size(b) >= 2,
	    "\"%s\".buckets is not an array of buckets", member);
	n = json_array_size(b);
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(b, i);
		json_t *up = json_array_get(e, 0), *cnt = json_array_get(e, 1);

		ck_assert_msg(json_is_array(e) && json_array_size(e) == 2,
		    "\"%s\" bucket %zu is not [upper, count]", member, i);
		if (i == n - 1)
			ck_assert_msg(json_is_null(up), "\"%s\": last bucket's "
			    "upper bound must be null", member);
		else {
			ck_assert_msg(json_is_integer(up), "\"%s\" bucket %zu: "
			    "upper bound is not an integer", member, i);
			ck_assert_msg(json_integer_value(up) > prev, "\"%s\" "
			    "bucket bounds must increase", member);
			prev = json_integer_value(up);
		}
		ck_assert_msg(json_is_integer(cnt) &&
		    json_integer_value(cnt) >= 0, "\"%s\" bucket %zu: count",
		    member, i);
		sum += json_integer_value(cnt);
	}
	ck_assert_msg(kt_jint(h, "count") == sum, "\"%s\".count %lld is not "
	    "the sum of the bucket counts %lld (counts are per bucket)",
	    member, (long long)kt_jint(h, "count"), (long long)sum);
	ck_assert_int_ge(kt_jint(h, "sum_ms"), 0);
}

static const char *const stats_ints[] = {
	"uptime_ms", "clients", "keys", "held", "waiting", "grants",
	"timeouts", "busy", "deadlocks", "conflicts", "releases", "expired",
	"disconnect_releases", "max_waiters", NULL
};

static void
check_stats_shape(json_t *s)
{
	json_t *hk = json_object_get(s, "hot_keys");

	ck_assert_msg(json_is_string(json_object_get(s, "version")) &&
	    json_string_length(json_object_get(s, "version")) > 0,
	    "\"version\" must be a non-empty string");
	for (int i = 0; stats_ints[i] != NULL; i++)
		ck_assert_int_ge(kt_jint(s, stats_ints[i]), 0);
	check_hist(s, "wait_ms");
	check_hist(s, "hold_ms");
	ck_assert_msg(json_is_array(hk) && json_array_size(hk) <= 10,
	    "\"hot_keys\" must be an array of at most 10");
	for (size_t i = 0; i < json_array_size(hk); i++) {
		json_t *k = json_array_get(hk, i);

		ck_assert_msg(json_is_string(json_object_get(k, "key")),
		    "hot_keys[%zu].key", i);
		kt_jint(k, "holders");
		kt_jint(k, "waiters");
		kt_jint(k, "max_waiters");
		kt_jint(k, "wait_ms_total");
		if (i > 0)
			ck_assert_msg(kt_jint(k, "waiters") <= kt_jint(
			    json_array_get(hk, i - 1), "waiters"),
			    "hot_keys not ordered by waiters");
	}
}

START_TEST(stats_has_every_member_with_its_type)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	json_t		*s, *hk;
	json_int_t	 up;

	s = kt_stats(o);
	check_stats_shape(s);
	up = kt_jint(s, "uptime_ms");
	json_decref(s);

	kt_lock(h, "LOCK st:hot st:cold");
	kt_send(w, "LOCK st:hot");
	kt_send(w2, "LOCK st:hot");
	json_decref(kt_wait_queue(o, "st:hot", 1, 2));
	kt_sleep_ms(20);
	s = kt_stats(o);
	check_stats_shape(s);
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

/* counters (private daemon: absolute values) */

START_TEST(stats_counters_follow_the_requests)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*o = kt_connect();
	json_t		*s;

	kt_wait_stat(o, "clients", 3);
	s = kt_stats(o);
	for (int i = 2; stats_ints[i] != NULL; i++)
		ck_assert_msg(kt_jint(s, stats_ints[i]) == 0, "fresh daemon: "
		    "\"%s\" is %lld", stats_ints[i],
		    (long long)kt_jint(s, stats_ints[i]));
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
	check_stats_shape(s);
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
	check_stats_shape(s);
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

/* limits (private daemons with options) */

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
	dt = elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 400), "default "
	    "timeout 200 ended after %lld ms", (long long)dt);
	t0 = kt_now_ms();
	kt_req_err(w, "TIMEOUT", "LOCK dt:k timeout=600");
	dt = elapsed_since(t0);
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
	FILE		*f;

	ck_assert_ptr_nonnull(dir);
	snprintf(path, sizeof(path), "%s/secret", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("s3cret=token\n", f);	/* the LF is not part of it */
	fclose(f);
	chmod(path, 0600);
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

/* output bound */

START_TEST(client_that_never_reads_is_closed_others_are_served)
{
	struct kt_conn	*x, *y;
	char		*reqs = repeat("STATS\n", 1000);
	uint64_t	 deadline, t0;
	size_t		 written = 0;
	bool		 closed = false;
	int64_t		 worst = 0;

	kt_start("--max-output", "65536");
	y = kt_connect();
	x = kt_connect();
	kt_wait_stat(y, "clients", 2);
	deadline = kt_now_ms() + (uint64_t)kt_ms(15000);
	while (!closed && kt_now_ms() < deadline) {
		ssize_t n = kt_conn_write_some(x, reqs, 6000);

		if (n > 0)
			written += (size_t)n;
		else if (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK)
			closed = true;	/* EPIPE, ECONNRESET */
		t0 = kt_now_ms();
		kt_req(y, "OK PONG", "PING");
		if (elapsed_since(t0) > worst)
			worst = elapsed_since(t0);
		ck_assert_msg(elapsed_since(t0) <= kt_cpu_ms(500), "PING took "
		    "%lld ms while another client floods", (long long)
		    elapsed_since(t0));
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
	char		*reqs = repeat("STATS\n", 10922);	/* 64 kB */
	bool		 open[8];
	int		 nopen = 8;
	int64_t		 worst = 0, dt;
	uint64_t	 deadline, t0;

	/* PROTOCOL.md is silent; DESIGN.md: no input from the network can
	 * make the server stop serving others */
	kt_start("--max-output", "65536");
	y = kt_connect();
	for (int i = 0; i < 8; i++) {
		x[i] = kt_connect();
		open[i] = true;
	}
	kt_wait_stat(y, "clients", 9);
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
		dt = elapsed_since(t0);
		worst = dt > worst ? dt : worst;
		ck_assert_msg(kt_line_is(y, "OK PONG"), "got \"%s\"",
		    kt_esc(y->line, y->linelen));
		ck_assert_msg(dt <= kt_cpu_ms(500), "PING took %lld ms while "
		    "8 clients pipeline STATS and never read", (long long)dt);
	}
	kt_wait_stat(y, "clients", 1);
	free(reqs);
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

/* unix socket */

START_TEST(unix_socket_speaks_the_same_protocol)
{
	struct kt_conn	*u = kt_connect_unix();
	char		*lines = repeat("PING\n", 1000);

	kt_req(u, "OK PONG", "PING");
	kt_lock(u, "LOCK ux:a ux:b");
	json_decref(kt_info(u, "ux:a"));
	kt_req(u, "OK 1", "UNLOCK ux:a");
	kt_req(u, "OK 1", "UNLOCKALL");
	kt_send(u, "STATS");
	json_decref(kt_expect_json(u));
	kt_req_err(u, "SYNTAX", "FROB");
	kt_send_raw(u, lines, 5000);
	for (int i = 0; i < 1000; i++)
		kt_expect_line(u, "OK PONG");
	kt_req(u, "OK", "QUIT");
	kt_expect_eof(u, kt_ms(2000));
	free(lines);
}
END_TEST

START_TEST(tcp_and_unix_clients_share_one_table)
{
	struct kt_conn *u = kt_connect_unix(), *t = kt_connect();
	struct kt_conn *o = kt_connect_unix();

	kt_lock(u, "LOCK xs:k");
	kt_req_err(t, "LOCKED", "TRYLOCK xs:k");
	kt_send(t, "LOCK xs:k");
	json_decref(kt_wait_queue(o, "xs:k", 1, 1));
	kt_req(u, "OK 1", "UNLOCK xs:k");
	kt_expect_token(t);
	kt_lock(u, "LOCK xs:y");
	kt_send(t, "LOCK xs:y");
	json_decref(kt_wait_queue(o, "xs:y", 1, 1));
	kt_req_err(u, "DEADLOCK", "LOCK xs:k");
	kt_conn_close(u);
	kt_expect_token(t);
}
END_TEST

static Suite *
protocol_suite(void)
{
	Suite	*s = suite_create("protocol");
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

	tc = kt_tcase(s, "framing", KT_ANY, 30, NULL);
	tcase_add_test(tc, one_cr_before_lf_is_dropped);
	tcase_add_test(tc, empty_and_blank_lines_get_no_reply);
	tcase_add_test(tc,
	    commands_and_options_are_case_insensitive_keys_are_not);
	tcase_add_test(tc, toolong_at_the_line_limit);
	tcase_add_test(tc, pipelined_5000_pings_get_5000_replies);
	tcase_add_test(tc, pipelined_mixed_requests_are_answered_in_order);
	tcase_add_test(tc, waiting_lock_holds_back_later_lines);
	tcase_add_test(tc,
	    waiting_client_with_a_long_pipeline_gets_every_reply);
	tcase_add_test(tc, half_closed_connection_gets_its_replies);
	tcase_add_test(tc, request_sent_one_byte_at_a_time);
	tcase_add_test(tc, binary_garbage_gets_err_lines_and_service_goes_on);

	tc = kt_tcase(s, "errors", KT_ANY, 30, NULL);
	tcase_add_test(tc, syntax_errors);
	tcase_add_test(tc, badkey_rules);
	tcase_add_test(tc, keys_per_request_default_limit_is_64);
	tcase_add_test(tc, conflict_when_limit_differs);
	tcase_add_test(tc, busy_when_max_waiters_reached);
	tcase_add_test(tc, locked_for_trylock_and_timeout_zero);
	tcase_add_test(tc, error_precedence);

	tc = kt_tcase(s, "deadlock", KT_ANY, 30, NULL);
	tcase_add_test(tc, deadlock_between_two_clients);
	tcase_add_test(tc, deadlock_in_a_three_cycle);
	tcase_add_test(tc, deadlock_through_a_request_queued_ahead);
	tcase_add_test(tc,
	    semaphore_wait_deadlocks_only_if_every_holder_is_in_the_cycle);

	tc = kt_tcase(s, "semantics", KT_ANY, 30, NULL);
	tcase_add_test(tc, timeout_fails_within_window_and_names_the_blocker);
	tcase_add_test(tc, grant_within_the_timeout_comes_when_released);
	tcase_add_test(tc, ttl_expiry_grants_the_waiter);
	tcase_add_test(tc,
	    shared_readers_together_writer_waits_reader_queues_behind_it);
	tcase_add_test(tc, semaphore_admits_limit_holders_in_arrival_order);
	tcase_add_test(tc, disconnect_releases_locks_and_withdraws_the_wait);
	tcase_add_test(tc, withdrawn_wait_lets_the_requests_behind_it_in);
	tcase_add_test(tc, multikey_wait_needs_every_key_free);

	tc = kt_tcase(s, "counters", KT_PRIVATE, 30, NULL);
	if (tc != NULL) {
		tcase_add_test(tc, stats_counters_follow_the_requests);
		tcase_add_test(tc, every_exit_path_frees_the_key);
		tcase_add_test(tc, hot_keys_lists_the_ten_most_waited_for_keys);
	}

	tc = kt_tcase(s, "limits", KT_PRIVATE, 30, kt_setup_none);
	if (tc != NULL) {
		tcase_add_test(tc, max_keys_per_request);
		tcase_add_test(tc, max_locks_per_connection);
		tcase_add_test(tc, max_clients_refuses_the_extra_connection);
		tcase_add_test(tc, max_line_option_sets_the_limit);
		tcase_add_test(tc,
		    default_timeout_option_applies_without_timeout);
		tcase_add_test(tc, default_max_waiters_option_applies);
		tcase_add_test(tc,
		    client_that_never_reads_is_closed_others_are_served);
		tcase_add_test(tc,
		    clients_that_never_read_do_not_stall_the_others);
	}

	tc = kt_tcase(s, "auth", KT_PRIVATE, 30, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc,
		    configured_secret_gates_all_but_auth_ping_quit);

	tc = kt_tcase(s, "lifecycle", KT_PRIVATE, 30, NULL);
	if (tc != NULL)
		tcase_add_test(tc,
		    sigterm_answers_waiters_closes_everyone_and_exits_zero);
	tc = kt_tcase(s, "restart", KT_PRIVATE, 30, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc, tokens_increase_across_restart_and_crash);

	tc = kt_tcase(s, "unix", kt_have_unix() ? KT_ANY : KT_PRIVATE, 30,
	    NULL);
	if (tc != NULL) {
		tcase_add_test(tc, unix_socket_speaks_the_same_protocol);
		tcase_add_test(tc, tcp_and_unix_clients_share_one_table);
	}
	return s;
}

int
main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	kt_init("protocol_test");
	return kt_run(protocol_suite());
}
