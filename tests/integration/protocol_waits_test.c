/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Waiting for a lock against the real daemon: deadlock detection (two-
 * and three-client cycles, through a queued request, semaphores), and the
 * semantics of a wait: timeouts that name the blocker, grants on release
 * and on TTL expiry, shared and semaphore modes in arrival order, and a
 * disconnect withdrawing its wait. Timing is checked in windows; nothing
 * sleeps to synchronise (INFO is polled until a deadline).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

/* deadlock */

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
	ida = pu_holder_id(o, "dl:x");
	kt_send(a, "LOCK dl:y");
	json_decref(kt_wait_queue(o, "dl:y", 1, 1));
	t0 = kt_now_ms();
	line = kt_req_err(b, "DEADLOCK", "LOCK dl:x");
	ck_assert_int_le(pu_elapsed_since(t0), kt_ms(500));
	pu_check_blocker_text(line, "dl:x", ida, "dl-alice");
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

/* waits, timeouts, TTL, modes and disconnects */

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
	hid = pu_holder_id(o, "tmo:key-7");
	t0 = kt_now_ms();
	kt_send(w, "LOCK tmo:key-7 timeout=200");
	line = kt_expect_err(w, "TIMEOUT");
	dt = pu_elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 400), "timeout=200 "
	    "failed after %lld ms, want 180-%lld", (long long)dt,
	    (long long)kt_upper(200, 400));
	pu_check_blocker_text(line, "tmo:key-7", hid, "holder-bob");
	/* the waiter is gone from the queue */
	json_decref(kt_wait_queue(o, "tmo:key-7", 1, 0));
	kt_req(w, "OK PONG", "PING");
	/* a multi-key wait names the key that blocks it */
	kt_send(w, "LOCK tmo:free tmo:key-7 timeout=100");
	line = kt_expect_err(w, "TIMEOUT");
	pu_check_blocker_text(line, "tmo:key-7", hid, "holder-bob");
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
	pu_sleep_until(t0, 200);	/* the hold */
	kt_req(h, "OK 1", "UNLOCK gw:k");
	kt_expect_token(w);
	dt = pu_elapsed_since(t0);
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
	dt = pu_elapsed_since(t0);
	ck_assert_msg(dt >= 180 && dt <= kt_upper(200, 500), "ttl=200 hold "
	    "ended after %lld ms, want 180-%lld", (long long)dt,
	    (long long)kt_upper(200, 500));
	kt_req_err(h, "NOTHELD", "UNLOCK ttl:k");
	kt_req_err(h, "NOTHELD", "REFRESH ttl:k ttl=100");
	kt_req(h, "OK 0", "UNLOCKALL");
	info = kt_info(o, "ttl:k");
	ck_assert_int_eq(kt_jint(pu_jarr_at(info, "holders", 0), "token"),
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

	const char	*text;

	kt_lock(r1, "LOCK sh:k mode=shared");
	kt_lock(r2, "LOCK sh:k mode=shared");
	kt_req(w, "OK", "NAME writer");
	kt_send(w, "LOCK sh:k");
	json_decref(kt_wait_queue(o, "sh:k", 2, 1));
	kt_send(r3, "LOCK sh:k mode=shared");
	json_decref(kt_wait_queue(o, "sh:k", 2, 2));
	kt_expect_silence(r3, 100);
	/* the text names who blocks: the writer queued ahead */
	text = kt_req_err(r4, "LOCKED", "TRYLOCK sh:k mode=shared");
	ck_assert_msg(strstr(text, "sh:k has requests queued ahead: client ")
	    != NULL && strstr(text, " (writer) first, waiting for ") != NULL,
	    "got \"%s\"", text);
	kt_req(r1, "OK 1", "UNLOCK sh:k");
	kt_expect_silence(w, 100);
	kt_req(r2, "OK 1", "UNLOCK sh:k");
	kt_expect_token(w);
	kt_expect_silence(r3, 100);
	kt_req(w, "OK 1", "UNLOCK sh:k");
	kt_expect_token(r3);
	info = kt_info(o, "sh:k");
	ck_assert_str_eq(json_string_value(json_object_get(pu_jarr_at(info,
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
	ck_assert_str_eq(json_string_value(json_object_get(pu_jarr_at(info,
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
	ck_assert_int_le(pu_elapsed_since(t0), kt_upper(300, 600));
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

static Suite *
protocol_waits_suite(void)
{
	Suite	*s = suite_create("protocol_waits");
	TCase	*tc;

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
	return s;
}

const struct check_program check_program = {
	.name = "protocol_waits_test",
	.init = kt_init,
	.suites = { protocol_waits_suite, NULL }
};
