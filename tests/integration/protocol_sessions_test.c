/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * keylockd-protocol(7), SESSIONS, sentence by sentence against a private
 * daemon: SESSION and its errors, a detached session that keeps its
 * holds and its place in a queue, a grant while detached, RESUME's reply
 * and the waiting LOCK's reply after it, a takeover of a connection the
 * server still thinks alive, grace expiry released as a disconnect,
 * session-lock-delay, QUIT, KILL and UNLOCKALL, the connection limit, AUTH
 * before RESUME, and 10,000 wrong RESUMEs that all say GONE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

/* SESSION on c: its ID, checked against the protocol's byte rules. */
static const char *
ps_session(struct kt_conn *c, const char *req, char *id, size_t idlen)
{
	kt_send(c, "%s", req);
	kt_expect_prefix(c, "OK ");
	ck_assert_msg(c->linelen - 3 >= 22 && c->linelen - 3 <= 64,
	    "an ID of 128 bits or more in 1 to 64 bytes: %s", c->line);
	for (size_t i = 3; i < c->linelen; i++)
		ck_assert_msg(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn"
		    "opqrstuvwxyz0123456789-_", c->line[i]) != NULL,
		    "ID byte %zu of %s", i, c->line);
	snprintf(id, idlen, "%s", c->line + 3);
	return id;
}

/* RESUME id on c, its JSON reply. */
static json_t *
ps_resume(struct kt_conn *c, const char *id)
{
	json_t	*r;

	kt_send(c, "RESUME %s", id);
	r = kt_expect_json(c);
	ck_assert_str_eq(json_string_value(json_object_get(r, "session")), id);
	return r;
}

START_TEST(session_opens_once_within_its_bounds)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	char		 id[80], id2[80];

	kt_req_err(a, "SYNTAX", "SESSION grace=0");
	kt_req_err(a, "SYNTAX", "SESSION grace=x");
	kt_req_err(a, "SYNTAX", "SESSION 12");
	kt_req_err(a, "SYNTAX", "SESSION timeout=5");
	kt_req_err(a, "LIMIT", "SESSION grace=60001");
	/* "a larger value is ERR LIMIT", however large */
	kt_req_err(a, "LIMIT", "SESSION grace=1000000000001");
	kt_req_err(a, "LIMIT", "SESSION grace=99999999999999999999999");
	ps_session(a, "SESSION grace=60000", id, sizeof(id));
	kt_req_err(a, "SESSION", "SESSION");
	ps_session(b, "session", id2, sizeof(id2));	/* case-insensitive */
	ck_assert_str_ne(id, id2);
	ck_assert_int_eq(kt_stat(a, "sessions"), 2);
	ck_assert_int_eq(kt_stat(a, "sessions_detached"), 0);
	kt_req(a, "OK", "QUIT");
	kt_expect_eof(a, kt_ms(1000));
	kt_wait_stat(b, "sessions", 1);
}
END_TEST

START_TEST(detached_session_keeps_holds_and_place_then_resumes)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n, *fifo;
	json_t		*r, *h, *info;
	uint64_t	 t1, t2, t3;
	char		 id[80];

	kt_req(a, "OK", "NAME worker-a");
	ps_session(a, "SESSION grace=5000", id, sizeof(id));
	t1 = kt_lock(a, "LOCK s:x s:y");
	t2 = kt_lock(a, "LOCK s:z ttl=60000 mode=shared");
	kt_lock(b, "LOCK s:w");
	kt_send(a, "LOCK s:w");
	json_decref(kt_wait_queue(b, "s:w", 1, 1));
	kt_send(a, "PING");		/* queued behind the wait: dropped */
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_detached", 1);
	ck_assert_int_eq(kt_stat(b, "clients"), 1);
	ck_assert_int_eq(kt_stat(b, "held"), 4);
	ck_assert_int_eq(kt_stat(b, "waiting"), 1);

	/* Seen by others: the same client, detached, holding and waiting. */
	info = kt_info(b, "s:x");
	h = pu_jarr_at(info, "holders", 0);
	ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
	    "worker-a");
	ck_assert(json_is_integer(json_object_get(h, "detached_ms")));
	json_decref(info);
	info = kt_info(b, "s:w");
	ck_assert(json_is_integer(json_object_get(pu_jarr_at(info,
	    "waiters", 0), "detached_ms")));
	json_decref(info);
	{
		struct kt_conn	*o = kt_connect();
		json_int_t	 ida = pu_holder_id(o, "s:y");

		kt_send(o, "TRYLOCK s:x");
		pu_check_blocker_text(kt_expect_err(o, "LOCKED"), "s:x", ida,
		    "worker-a");
		/* A detached session is a holder and a waiter for every
		 * rule: b holds what it waits for, so b waiting for what it
		 * holds closes a cycle; its wait counts for max_waiters; and
		 * FIFO puts o behind it. */
		kt_req_err(b, "DEADLOCK", "LOCK s:x");
		kt_req_err(o, "BUSY", "LOCK s:w max_waiters=1");
		kt_send(o, "LOCK s:w timeout=20000");
		json_decref(kt_wait_queue(b, "s:w", 1, 2));
		fifo = o;
	}

	n = kt_connect();
	r = ps_resume(n, id);
	ck_assert_int_eq(kt_jint(r, "grace_ms"), 5000);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 2);
	h = pu_jarr_at(r, "held", 0);
	ck_assert_uint_eq((uint64_t)kt_jint(h, "token"), t1);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(h,
	    "keys"), 0)), "s:x");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(h,
	    "keys"), 1)), "s:y");
	ck_assert_str_eq(json_string_value(json_object_get(h, "mode")),
	    "exclusive");
	ck_assert(json_is_null(json_object_get(h, "ttl_ms")));
	h = pu_jarr_at(r, "held", 1);
	ck_assert_uint_eq((uint64_t)kt_jint(h, "token"), t2);
	ck_assert_str_eq(json_string_value(json_object_get(h, "mode")),
	    "shared");
	ck_assert(kt_jint(h, "ttl_ms") > 50000 && kt_jint(h, "ttl_ms") <= 60000);
	h = json_object_get(r, "waiting");
	ck_assert(json_is_object(h));
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(h,
	    "keys"), 0)), "s:w");
	json_decref(r);
	kt_wait_stat(b, "sessions_detached", 0);
	ck_assert_int_eq(kt_stat(b, "sessions_resumed"), 1);

	/* The waiting LOCK's reply is the next on the new connection. */
	kt_send(n, "PING");
	kt_expect_silence(n, 100);
	kt_req(b, "OK 1", "UNLOCK s:w");
	t3 = kt_expect_token(n);	/* first in the queue, before fifo */
	ck_assert(t3 > t2);
	kt_expect_line(n, "OK PONG");
	kt_expect_silence(fifo, 50);
	kt_req_err(n, "HELD", "LOCK s:x");	/* its locks, its identity */
	kt_req(n, "OK 4", "UNLOCKALL");
	ck_assert(kt_expect_token(fifo) > t3);
	kt_req(fifo, "OK 1", "UNLOCK s:w");
	kt_req(n, "OK", "QUIT");
	kt_wait_stat(b, "sessions", 0);
	kt_wait_stat(b, "keys", 0);
}
END_TEST

START_TEST(a_detached_waiter_is_granted_and_resume_says_so)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n;
	json_t		*r;
	uint64_t	 t;
	char		 id[80];

	ps_session(a, "SESSION", id, sizeof(id));
	t = kt_lock(b, "LOCK g:k");
	kt_send(a, "LOCK g:k timeout=60000");
	json_decref(kt_wait_queue(b, "g:k", 1, 1));
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_detached", 1);
	kt_req(b, "OK 1", "UNLOCK g:k");
	kt_req_err(b, "LOCKED", "TRYLOCK g:k");	/* the session holds it */
	n = kt_connect();
	r = ps_resume(n, id);
	ck_assert(json_is_null(json_object_get(r, "waiting")));
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 1);
	ck_assert((uint64_t)kt_jint(pu_jarr_at(r, "held", 0), "token") > t);
	json_decref(r);
	kt_req(n, "OK PONG", "PING");	/* nothing else was due */
	kt_req(n, "OK 1", "UNLOCK g:k");
	kt_req(n, "OK", "QUIT");
	kt_wait_stat(b, "keys", 0);
}
END_TEST

START_TEST(a_detached_wait_times_out_at_its_deadline)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n;
	json_t		*r;
	char		 id[80];

	ps_session(a, "SESSION grace=10000", id, sizeof(id));
	kt_lock(b, "LOCK d:k");
	kt_send(a, "LOCK d:k timeout=200");
	json_decref(kt_wait_queue(b, "d:k", 1, 1));
	kt_conn_close(a);
	kt_wait_stat_ms(b, "timeouts", 1, 3000);
	ck_assert_int_eq(kt_stat(b, "waiting"), 0);
	n = kt_connect();
	r = ps_resume(n, id);
	ck_assert(json_is_null(json_object_get(r, "waiting")));
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 0);
	json_decref(r);
	kt_req(n, "OK PONG", "PING");
}
END_TEST

START_TEST(grace_expiry_releases_as_a_disconnect)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n;
	uint64_t	 t0;
	int64_t		 waited;
	char		 id[80];

	ps_session(a, "SESSION grace=300", id, sizeof(id));
	kt_lock(a, "LOCK e:k");
	kt_send(a, "LOCK e:w");		/* granted at once: a holds two */
	kt_expect_token(a);
	kt_conn_close(a);
	t0 = kt_now_ms();
	kt_lock(b, "LOCK e:k timeout=5000");
	waited = pu_elapsed_since(t0);
	ck_assert_msg(waited >= 250, "granted %lld ms after the close, before "
	    "the grace of 300 ms", (long long)waited);
	ck_assert_msg(waited <= kt_upper(300, 1500), "granted %lld ms after "
	    "the close", (long long)waited);
	ck_assert_int_eq(kt_stat(b, "sessions_expired"), 1);
	ck_assert_int_eq(kt_stat(b, "disconnect_releases"), 2);
	ck_assert_int_eq(kt_stat(b, "sessions"), 0);
	n = kt_connect();
	kt_req_err(n, "GONE", "RESUME %s", id);
	kt_req(b, "OK 1", "UNLOCK e:k");
	kt_wait_stat(b, "keys", 0);
}
END_TEST

START_TEST(lock_delay_keeps_the_keys_after_expiry)
{
	struct kt_conn	*a, *b;
	uint64_t	 t0;
	const char	*line;
	char		 id[80];

	kt_start("--session-lock-delay", "400");
	a = kt_connect();
	b = kt_connect();
	ps_session(a, "SESSION grace=100", id, sizeof(id));
	kt_lock(a, "LOCK ld:k");
	kt_conn_close(a);
	t0 = kt_now_ms();
	kt_wait_stat(b, "sessions_expired", 1);
	line = kt_req_err(b, "LOCKED", "TRYLOCK ld:k");
	ck_assert_msg(strstr(line, "session-lock-delay") != NULL,
	    "the refusal names the delay: %s", line);
	kt_lock(b, "LOCK ld:k timeout=5000");
	ck_assert_msg(pu_elapsed_since(t0) >= 450, "granted %lld ms after the "
	    "close: grace 100 + delay 400", (long long)pu_elapsed_since(t0));
	a = kt_connect();
	kt_req_err(a, "GONE", "RESUME %s", id);
	kt_req(b, "OK 1", "UNLOCK ld:k");
	kt_wait_stat(b, "keys", 0);
	kt_wait_stat(b, "sessions", 0);
}
END_TEST

/* "the keys it held stay unavailable to everyone": shared and semaphore
 * requests too; the ended session is no session (STATS, CLIENTS), and
 * KILL of its client id ends the delay. */
START_TEST(lock_delay_admits_nobody_and_is_no_session)
{
	struct kt_conn	*a, *b, *c, *op = NULL;
	uint64_t	 t0;
	const char	*line;
	json_int_t	 ida;
	char		 id[80];

	kt_start("--session-lock-delay", "700");
	a = kt_connect();
	b = kt_connect();
	c = kt_connect();
	ps_session(a, "SESSION grace=100", id, sizeof(id));
	kt_lock(a, "LOCK ld:sh mode=shared");
	kt_send(a, "@3 LOCK ld:sem limit=3");
	kt_expect_prefix(a, "@3 OK ");
	kt_lock(c, "LOCK ld:sem limit=3");	/* a slot of three is left */
	kt_conn_close(a);
	t0 = kt_now_ms();
	kt_wait_stat(b, "sessions_expired", 1);
	ck_assert_int_eq(kt_stat(b, "sessions"), 0);
	ck_assert_int_eq(kt_stat(b, "sessions_detached"), 0);
	line = kt_req_err(b, "LOCKED", "TRYLOCK ld:sh mode=shared");
	ck_assert_msg(strstr(line, "session-lock-delay") != NULL,
	    "the refusal names the delay: %s", line);
	line = kt_req_err(b, "LOCKED", "TRYLOCK ld:sem limit=3");
	ck_assert_msg(strstr(line, "session-lock-delay") != NULL,
	    "the refusal names the delay, not b's own slot: %s", line);
	if (kt_have_unix()) {
		json_t	*cl;
		char	*text;

		op = kt_connect_unix();
		kt_send(op, "CLIENTS");
		cl = kt_expect_json(op);
		text = json_dumps(cl, JSON_COMPACT);
		ck_assert_msg(text != NULL && strstr(text, "detached_ms") ==
		    NULL, "an ended session is listed by CLIENTS: %s", text);
		free(text);
		json_decref(cl);
	}
	/* a shared waiter is granted once the delay is over */
	kt_lock(b, "LOCK ld:sh mode=shared timeout=5000");
	ck_assert_msg(kt_now_ms() - t0 >= 750, "granted %llu ms after the "
	    "close: grace 100 + delay 700", (unsigned long long)(kt_now_ms() -
	    t0));
	kt_req(b, "OK 1", "UNLOCK ld:sh");
	kt_req(c, "OK 1", "UNLOCK ld:sem");
	kt_wait_stat(b, "keys", 0);
	if (op == NULL)
		return;
	/* KILL of the ended session's client id ends its delay at once */
	a = kt_connect();
	ps_session(a, "SESSION grace=100", id, sizeof(id));
	kt_lock(a, "LOCK ld:k mode=shared");
	ida = pu_holder_id(op, "ld:k");
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_expired", 2);
	kt_req_err(b, "LOCKED", "TRYLOCK ld:k mode=shared");
	kt_req(op, "OK 1", "KILL %lld", (long long)ida);
	kt_lock(b, "TRYLOCK ld:k mode=shared");
	kt_req(op, "OK 0", "KILL %lld", (long long)ida);
}
END_TEST

START_TEST(resume_takes_over_a_live_connection_and_its_wait)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n;
	json_t		*r;
	char		 id[80];

	ps_session(a, "SESSION", id, sizeof(id));
	kt_lock(a, "LOCK t:held");
	kt_lock(b, "LOCK t:k");
	kt_send(a, "LOCK t:k");
	json_decref(kt_wait_queue(b, "t:k", 1, 1));
	n = kt_connect();
	r = ps_resume(n, id);	/* a is half-open, as far as anyone knows */
	ck_assert(json_is_object(json_object_get(r, "waiting")));
	json_decref(r);
	kt_expect_eof(a, kt_ms(2000));
	ck_assert_int_eq(kt_stat(b, "held"), 2);	/* nothing released */
	/* CANCEL withdraws the resumed wait as usual. */
	kt_send(n, "CANCEL");
	kt_expect_err(n, "CANCELLED");
	kt_expect_line(n, "OK 1");
	kt_req_err(n, "HELD", "LOCK t:held");
	kt_req(n, "OK", "QUIT");
	kt_wait_stat(b, "held", 1);
	kt_req(b, "OK 1", "UNLOCK t:k");
	kt_wait_stat(b, "keys", 0);
}
END_TEST

START_TEST(quit_ends_and_unlockall_keeps)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect(), *n;
	json_t		*r;
	char		 id[80];

	ps_session(a, "SESSION", id, sizeof(id));
	kt_lock(a, "LOCK q:1");
	kt_req(a, "OK 1", "UNLOCKALL");
	kt_lock(a, "LOCK q:2");
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_detached", 1);
	n = kt_connect();
	r = ps_resume(n, id);		/* UNLOCKALL kept the session */
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 1);
	json_decref(r);
	kt_req(n, "OK", "QUIT");
	kt_wait_stat(b, "sessions", 0);
	kt_wait_stat(b, "keys", 0);
	n = kt_connect();
	kt_req_err(n, "GONE", "RESUME %s", id);
}
END_TEST

START_TEST(kill_ends_a_session_attached_or_not)
{
	struct kt_conn	*a = kt_connect(), *c = kt_connect(), *op, *n;
	json_int_t	 ida, idc;
	char		 id[80], idc_s[80];

	if (!kt_have_unix())
		return;
	op = kt_connect_unix();
	ps_session(a, "SESSION", id, sizeof(id));
	kt_lock(a, "LOCK k:a");
	ida = pu_holder_id(op, "k:a");
	kt_conn_close(a);
	kt_wait_stat(op, "sessions_detached", 1);
	kt_req(op, "OK 1", "KILL %lld", (long long)ida);
	ck_assert_int_eq(kt_stat(op, "sessions"), 0);
	ck_assert_int_eq(kt_stat(op, "keys"), 0);
	kt_req(op, "OK 0", "KILL %lld", (long long)ida);
	/* "OK 0 if there is no such connection or session": past 2^64 too */
	kt_req(op, "OK 0", "KILL 18446744073709551616");
	kt_req(op, "OK 0", "KILL 999999999999999999999999999999");
	kt_req_err(op, "SYNTAX", "KILL 12x");
	n = kt_connect();
	kt_req_err(n, "GONE", "RESUME %s", id);

	ps_session(c, "SESSION", idc_s, sizeof(idc_s));
	kt_lock(c, "LOCK k:c");
	idc = pu_holder_id(op, "k:c");
	kt_req(op, "OK 1", "KILL %lld", (long long)idc);
	kt_expect_eof(c, kt_ms(2000));
	kt_wait_stat(op, "keys", 0);
	ck_assert_int_eq(kt_stat(op, "sessions"), 0);
	kt_req_err(n, "GONE", "RESUME %s", idc_s);
}
END_TEST

START_TEST(clients_lists_detached_sessions)
{
	struct kt_conn	*a = kt_connect(), *op;
	json_t		*r, *list, *e;
	json_int_t	 ida;
	char		 id[80];
	bool		 seen = false;

	if (!kt_have_unix())
		return;
	op = kt_connect_unix();
	kt_req(a, "OK", "NAME gone-for-now");
	ps_session(a, "SESSION", id, sizeof(id));
	kt_lock(a, "LOCK cl:k");
	/* held counts every channel's holds, attached or detached */
	kt_send(a, "@1 LOCK cl:c1 cl:c2");
	kt_expect_prefix(a, "@1 OK ");
	ida = pu_holder_id(op, "cl:k");
	for (int detached = 0; detached < 2; detached++) {
		if (detached) {
			kt_conn_close(a);
			kt_wait_stat(op, "sessions_detached", 1);
		}
		kt_send(op, "CLIENTS");
		r = kt_expect_json(op);
		list = json_object_get(r, "clients");
		ck_assert_int_eq(kt_jint(r, "total"), 2);
		seen = false;
		for (size_t i = 0; i < json_array_size(list); i++) {
			e = json_array_get(list, i);
			if (kt_jint(e, "id") != ida)
				continue;
			seen = true;
			ck_assert(json_is_integer(json_object_get(e,
			    "detached_ms")) == (detached == 1));
			ck_assert_int_eq(kt_jint(e, "held"), 3);
			ck_assert_int_eq(kt_jint(e, "channels"), 1);
			ck_assert_str_eq(json_string_value(json_object_get(e,
			    "name")), "gone-for-now");
		}
		ck_assert_msg(seen, "CLIENTS lists the session");
		json_decref(r);
	}
}
END_TEST

START_TEST(resume_needs_a_bare_connection_and_a_real_id)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	char		 id[80], bad[80];

	ps_session(a, "SESSION", id, sizeof(id));
	kt_req_err(a, "SESSION", "RESUME %s", id);	/* has a session */
	kt_lock(b, "LOCK r:k");
	kt_req_err(b, "SESSION", "RESUME %s", id);	/* holds a lock */
	kt_req(b, "OK 1", "UNLOCK r:k");
	kt_req_err(b, "SYNTAX", "RESUME");
	kt_req_err(b, "SYNTAX", "RESUME a b");
	kt_req_err(b, "SYNTAX", "RESUME abc!def");
	kt_req_err(b, "SYNTAX", "RESUME x=1");
	{
		char	*long_id = pu_repeat("A", 65);

		kt_send(b, "RESUME %s", long_id);
		free(long_id);
		kt_expect_err(b, "SYNTAX");
	}
	kt_req_err(b, "GONE", "RESUME A");
	snprintf(bad, sizeof(bad), "%s", id);
	bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == 'A' ? 'B' : 'A';
	kt_req_err(b, "GONE", "RESUME %s", bad);
	bad[0] = bad[0] == 'A' ? 'B' : 'A';
	kt_req_err(b, "GONE", "RESUME %s", bad);
	ck_assert_int_eq(kt_stat(b, "sessions_resumed"), 0);
}
END_TEST

START_TEST(ten_thousand_wrong_resumes_are_all_gone)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	char		 id[80], bad[80];
	json_t		*s0, *s1;
	enum { N = 10000, BATCH = 500 };

	ps_session(a, "SESSION", id, sizeof(id));
	/* the table's owners are a's and b's alone (under valgrind the
	 * harness's readiness probe may still be closing) */
	kt_wait_stat(a, "clients", 2);
	s0 = kt_stats(a);
	for (int i = 0; i < N; i += BATCH) {
		char	*buf = NULL;
		size_t	 len = 0;
		FILE	*f = open_memstream(&buf, &len);

		for (int j = 0; j < BATCH; j++) {
			snprintf(bad, sizeof(bad), "%s", id);
			/* a different byte each time, the first or the last */
			bad[(i + j) % 2 == 0 ? 0 : strlen(bad) - 1] =
			    "0123456789"[(i + j) % 10] == bad[0] ? 'z' :
			    "0123456789"[(i + j) % 10];
			if (strcmp(bad, id) == 0)
				bad[1] = bad[1] == 'q' ? 'r' : 'q';
			fprintf(f, "RESUME %s\n", bad);
		}
		fclose(f);
		kt_send_raw(b, buf, len);
		free(buf);
		for (int j = 0; j < BATCH; j++)
			kt_expect_err(b, "GONE");
	}
	s1 = kt_stats(a);
	ck_assert_int_eq(kt_jint(s1, "sessions"), 1);
	ck_assert_int_eq(kt_jint(s1, "sessions_resumed"), 0);
	ck_assert_int_eq(kt_jint(s1, "table_bytes"), kt_jint(s0, "table_bytes"));
	json_decref(s0);
	json_decref(s1);
	kt_req(b, "OK PONG", "PING");	/* still served */
}
END_TEST

/* A connection that the server keeps (not one over max-clients, refused
 * while it has not yet seen an earlier one close). */
static struct kt_conn *
ps_connect_room(void)
{
	struct kt_conn	*c;
	uint64_t	 t0 = kt_now_ms();

	for (;; kt_sleep_ms(20)) {
		c = kt_conn_open(kt_d, KT_TCP, kt_ms(KT_REPLY_MS));
		ck_assert(c != NULL);
		if (kt_conn_sendf(c, "PING") == 0 && kt_conn_readline(c,
		    kt_ms(KT_REPLY_MS)) == KT_LINE && kt_line_is(c, "OK PONG"))
			return c;
		kt_conn_close(c);
		ck_assert_msg(pu_elapsed_since(t0) < kt_ms(5000),
		    "no room for a connection");
	}
}

START_TEST(detached_sessions_keep_their_slots)
{
	struct kt_conn	*o, *a, *b, *n;
	json_t		*r;
	char		 ida[80], idb[80];

	/* keylockd-protocol(7), SESSIONS: Limits: a detached session
	 * counts against max-clients until it ends */
	kt_start("--max-clients", "3");
	o = ps_connect_room();
	a = ps_connect_room();
	ps_session(a, "SESSION", ida, sizeof(ida));
	kt_lock(a, "LOCK m:a");
	kt_conn_close(a);
	kt_wait_stat(o, "sessions_detached", 1);
	b = ps_connect_room();		/* 2 open + 1 detached: full */
	n = kt_connect();
	kt_expect_line(n, "ERR LIMIT too many connections");
	kt_conn_close(n);
	ps_session(b, "SESSION", idb, sizeof(idb));
	kt_conn_close(b);
	kt_wait_stat(o, "sessions_detached", 2);
	n = kt_connect();		/* 1 open + 2 detached: full */
	kt_expect_line(n, "ERR LIMIT too many connections");
	kt_conn_close(n);
	/* a RESUME gives the slot back to a connection */
	r = ps_resume(o, ida);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "held")), 1);
	json_decref(r);
	n = ps_connect_room();
	r = ps_resume(n, idb);
	json_decref(r);
	ck_assert_int_eq(kt_stat(n, "sessions_detached"), 0);
	kt_req(o, "OK", "QUIT");
	kt_req(n, "OK", "QUIT");
}
END_TEST

START_TEST(resume_needs_auth_first)
{
	struct kt_conn	*a, *b;
	char		 path[256], id[80];

	kt_secret_file(kt_tmpdir(), "secret", "s3cret", path, sizeof(path));
	kt_start("--auth-file", path);
	a = kt_connect();
	kt_req_err(a, "AUTH", "SESSION");
	kt_req(a, "OK", "AUTH s3cret");
	ps_session(a, "SESSION", id, sizeof(id));
	kt_lock(a, "LOCK au:k");
	kt_conn_close(a);
	b = kt_connect();
	kt_req_err(b, "AUTH", "RESUME %s", id);
	kt_req(b, "OK", "AUTH s3cret");
	json_decref(ps_resume(b, id));
	kt_req(b, "OK", "QUIT");
}
END_TEST

static Suite *
protocol_sessions_suite(void)
{
	Suite	*s = suite_create("protocol_sessions");
	TCase	*tc;

	tc = kt_tcase(s, "sessions", KT_PRIVATE, 60, NULL);
	if (tc != NULL) {
		tcase_add_test(tc, session_opens_once_within_its_bounds);
		tcase_add_test(tc,
		    detached_session_keeps_holds_and_place_then_resumes);
		tcase_add_test(tc,
		    a_detached_waiter_is_granted_and_resume_says_so);
		tcase_add_test(tc, a_detached_wait_times_out_at_its_deadline);
		tcase_add_test(tc, grace_expiry_releases_as_a_disconnect);
		tcase_add_test(tc,
		    resume_takes_over_a_live_connection_and_its_wait);
		tcase_add_test(tc, quit_ends_and_unlockall_keeps);
		tcase_add_test(tc, kill_ends_a_session_attached_or_not);
		tcase_add_test(tc, clients_lists_detached_sessions);
		tcase_add_test(tc,
		    resume_needs_a_bare_connection_and_a_real_id);
		tcase_add_test(tc, ten_thousand_wrong_resumes_are_all_gone);
	}
	tc = kt_tcase(s, "settings", KT_PRIVATE, 60, kt_setup_none);
	if (tc != NULL) {
		tcase_add_test(tc, lock_delay_keeps_the_keys_after_expiry);
		tcase_add_test(tc, lock_delay_admits_nobody_and_is_no_session);
		tcase_add_test(tc, detached_sessions_keep_their_slots);
		tcase_add_test(tc, resume_needs_auth_first);
	}
	return s;
}

const struct check_program check_program = {
	.name = "protocol_sessions_test",
	.init = kt_init,
	.suites = { protocol_sessions_suite, NULL }
};
