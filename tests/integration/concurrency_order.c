/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Order under real concurrency: grants follow arrival order, readers are
 * batched without starving a writer queued between them, and a cycle
 * attempted by three clients at once yields exactly one DEADLOCK.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/wait.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "concurrency_util.h"
#include "kltest.h"

/* (h) FIFO */

/* Reads any ready line among cs; returns its index, or -1 if none came
 * within ms. */
static int
wait_any(struct kt_conn **cs, int n, int64_t ms)
{
	uint64_t	deadline = kt_now_ms() + (uint64_t)ms;
	struct pollfd	pfd[64];

	ck_assert_int_le(n, 64);
	for (;;) {
		int64_t left;

		for (int i = 0; i < n; i++) {
			enum kt_read r;

			if (cs[i] == NULL)
				continue;
			r = kt_conn_readline(cs[i], 0);
			if (r == KT_LINE)
				return i;
			ck_assert_msg(r == KT_TIMEOUT, "connection %d closed",
			    i);
		}
		left = (int64_t)deadline - (int64_t)kt_now_ms();
		if (left <= 0)
			return -1;
		for (int i = 0; i < n; i++) {
			pfd[i].fd = cs[i] != NULL ? cs[i]->fd : -1;
			pfd[i].events = POLLIN;
		}
		poll(pfd, (nfds_t)n, (int)left);
	}
}

START_TEST(grants_follow_arrival_order)
{
	struct kt_conn	*h = kt_connect(), *o = kt_connect(), *cs[20];
	uint64_t	 prev = 0, t;
	char		 name[16];
	json_t		*info;

	for (int i = 0; i < 20; i++) {
		cs[i] = kt_connect();
		kt_req(cs[i], "OK", "NAME fifo-%02d", i);
	}
	kt_lock(h, "LOCK ff:k");
	for (int i = 0; i < 20; i++) {
		kt_send(cs[i], "LOCK ff:k timeout=%lld",
		    (long long)kt_ms(30000));
		info = kt_wait_queue(o, "ff:k", 1, (size_t)i + 1);
		snprintf(name, sizeof(name), "fifo-%02d", i);
		ck_assert_str_eq(json_string_value(json_object_get(
		    json_array_get(json_object_get(info, "waiters"),
		    (size_t)i), "name")), name);
		json_decref(info);
	}
	kt_req(h, "OK 1", "UNLOCK ff:k");
	for (int i = 0; i < 20; i++) {
		int got = wait_any(cs, 20, kt_ms(3000));

		ck_assert_msg(got == i, "grant %d went to fifo-%02d, want "
		    "fifo-%02d", i, got, i);
		ck_assert_msg(kt_line_token(cs[i], &t) && t > prev,
		    "fifo-%02d got \"%s\"", i, kt_esc(cs[i]->line,
		    cs[i]->linelen));
		prev = t;
		kt_expect_silence(cs[i], 0);
		kt_req(cs[i], "OK 1", "UNLOCK ff:k");
		cs[i] = NULL;
	}
	kt_wait_stat(o, "keys", 0);
}
END_TEST

START_TEST(readers_are_batched_and_a_writer_between_them_is_not_starved)
{
	struct kt_conn	*w0 = kt_connect(), *o = kt_connect();
	struct kt_conn	*r1 = kt_connect(), *r2 = kt_connect();
	struct kt_conn	*w1 = kt_connect(), *r3 = kt_connect();
	struct kt_conn	*r4 = kt_connect(), *r5 = kt_connect();
	struct kt_conn	*r6 = kt_connect();

	kt_lock(w0, "LOCK rw:k");
	kt_send(r1, "LOCK rw:k mode=shared");
	json_decref(kt_wait_queue(o, "rw:k", 1, 1));
	kt_send(r2, "LOCK rw:k mode=shared");
	json_decref(kt_wait_queue(o, "rw:k", 1, 2));
	kt_send(w1, "LOCK rw:k");
	json_decref(kt_wait_queue(o, "rw:k", 1, 3));
	kt_send(r3, "LOCK rw:k mode=shared");
	json_decref(kt_wait_queue(o, "rw:k", 1, 4));
	kt_send(r4, "LOCK rw:k mode=shared");
	json_decref(kt_wait_queue(o, "rw:k", 1, 5));

	/* the two readers at the head go in together */
	kt_req(w0, "OK 1", "UNLOCK rw:k");
	kt_expect_token(r1);
	kt_expect_token(r2);
	json_decref(kt_wait_queue(o, "rw:k", 2, 3));
	kt_expect_silence(w1, 100);
	kt_expect_silence(r3, 0);
	kt_expect_silence(r4, 0);
	/* a new reader does not overtake the waiting writer */
	kt_send(r5, "LOCK rw:k mode=shared");
	json_decref(kt_wait_queue(o, "rw:k", 2, 4));
	kt_expect_silence(r5, 100);
	kt_req_err(r6, "LOCKED", "TRYLOCK rw:k mode=shared");

	kt_req(r1, "OK 1", "UNLOCK rw:k");
	kt_expect_silence(w1, 100);
	kt_req(r2, "OK 1", "UNLOCK rw:k");
	kt_expect_token(w1);
	kt_expect_silence(r3, 100);
	/* the writer leaves: the three readers behind it go in together */
	kt_req(w1, "OK 1", "UNLOCK rw:k");
	kt_expect_token(r3);
	kt_expect_token(r4);
	kt_expect_token(r5);
	json_decref(kt_wait_queue(o, "rw:k", 3, 0));
}
END_TEST

/* (i) a cycle attempted by three clients at once */

START_TEST(three_way_cycle_race_yields_exactly_one_deadlock)
{
	struct kt_conn	*c[3], *o = kt_connect();
	const char	*own[3] = { "x", "y", "z" };
	const char	*want[3] = { "y", "z", "x" };
	json_int_t	 dl0 = kt_stat(o, "deadlocks");
	int		 rounds = 20;

	for (int i = 0; i < 3; i++)
		c[i] = kt_connect();
	for (int r = 0; r < rounds; r++) {
		struct kt_conn	*pending[3];
		int		 ndl = 0, dl = -1, got;

		for (int i = 0; i < 3; i++)
			kt_lock(c[i], "LOCK cy%d:%s", r, own[i]);
		/* three requests, back to back, each closing the ring */
		for (int i = 0; i < 3; i++)
			kt_send(c[(i + r) % 3], "LOCK cy%d:%s timeout=%lld", r,
			    want[(i + r) % 3], (long long)kt_ms(30000));
		for (int i = 0; i < 3; i++)
			pending[i] = c[i];
		got = wait_any(pending, 3, kt_ms(2000));
		ck_assert_msg(got >= 0, "round %d: nobody got ERR DEADLOCK", r);
		for (;;) {
			ck_assert_msg(kt_line_is_err(c[got], "DEADLOCK"),
			    "round %d: client %d got \"%s\" while the others "
			    "wait", r, got, kt_esc(c[got]->line,
			    c[got]->linelen));
			ndl++;
			dl = got;
			pending[got] = NULL;
			got = wait_any(pending, 3, 150);
			if (got < 0)
				break;
		}
		ck_assert_msg(ndl == 1, "round %d: %d ERR DEADLOCK, want 1", r,
		    ndl);
		/* the refused one lets go; the others finish in turn */
		kt_req(c[dl], "OK 1", "UNLOCKALL");
		for (int left = 2; left > 0; left--) {
			got = wait_any(pending, 3, kt_ms(3000));
			ck_assert_msg(got >= 0, "round %d: a waiter was never "
			    "granted", r);
			ck_assert_msg(kt_line_has_prefix(c[got], "OK "),
			    "round %d: client %d got \"%s\"", r, got,
			    kt_esc(c[got]->line, c[got]->linelen));
			pending[got] = NULL;
			kt_req(c[got], "OK 2", "UNLOCKALL");
		}
	}
	kt_wait_stat(o, "keys", 0);
	if (!kt_external())
		ck_assert_int_eq(kt_stat(o, "deadlocks") - dl0, rounds);
}
END_TEST

void
cu_add_order(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "order", KT_ANY, 120, NULL);
	tcase_add_test(tc, grants_follow_arrival_order);
	tcase_add_test(tc,
	    readers_are_batched_and_a_writer_between_them_is_not_starved);
	tcase_add_test(tc, three_way_cycle_race_yields_exactly_one_deadlock);
}
