/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Waiting under real concurrency: waiters time out while a key is held,
 * max_waiters queues exactly that many and refuses the rest with BUSY, a
 * killed holder process lets its waiter in, and connection churn of every
 * kind leaves nothing behind.
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

/* (d) timeouts while a key is held */

struct waiter {
	struct kt_conn	*c;
	int64_t		 ms;
};

static void *
timeout_worker(void *arg)
{
	struct waiter	*w = arg;
	uint64_t	 t0;

	pthread_barrier_wait(&cu_start_line);
	t0 = kt_now_ms();
	if (!cu_w_request(w->c, kt_ms(10000), "LOCK tm:k timeout=2000"))
		return NULL;
	w->ms = (int64_t)(kt_now_ms() - t0);
	if (!kt_line_is_err(w->c, "TIMEOUT"))
		cu_worker_error("LOCK tm:k timeout=2000: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
	return NULL;
}

START_TEST(waiters_time_out_while_the_key_is_held)
{
	struct kt_conn	*h = kt_connect(), *o = kt_connect(), **cs;
	struct waiter	 ws[20];
	pthread_t	 th[20];
	uint64_t	 t0;
	json_int_t	 timeouts0;
	json_t		*s, *info;

	cu_reset_errors();
	timeouts0 = kt_stat(o, "timeouts");
	kt_wait_stat(o, "clients", 2);
	cs = cu_open_many(o, 20, 2);
	t0 = kt_now_ms();
	kt_lock(h, "LOCK tm:k");
	for (int i = 0; i < 20; i++) {
		ws[i].c = cs[i];
		ws[i].ms = -1;
	}
	cu_start_workers(th, 20, timeout_worker, ws, sizeof(ws[0]));
	cu_go_and_join(th, 20);
	assert_no_worker_errors();
	for (int i = 0; i < 20; i++)
		ck_assert_msg(ws[i].ms >= 1900 && ws[i].ms <=
		    kt_upper(2000, 2600), "waiter %d: ERR TIMEOUT after %lld "
		    "ms, want 1900-%lld", i, (long long)ws[i].ms,
		    (long long)kt_upper(2000, 2600));

	/* the holder still holds; the waiters are gone */
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	ck_assert_int_eq(kt_jint(s, "keys"), 1);
	ck_assert_int_eq(kt_jint(s, "held"), 1);
	if (!kt_external())
		ck_assert_int_eq(kt_jint(s, "timeouts") - timeouts0, 20);
	json_decref(s);
	info = kt_wait_queue(o, "tm:k", 1, 0);
	ck_assert_int_ge(kt_jint(json_array_get(json_object_get(info,
	    "holders"), 0), "held_ms"), 1900);
	json_decref(info);

	for (;;) {				/* the 5 s hold */
		uint64_t held = kt_now_ms() - t0;

		if (held >= 5000)
			break;
		kt_sleep_ms(5000 - held);
	}
	kt_req(h, "OK 1", "UNLOCK tm:k");
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "keys"), 0);
	ck_assert_int_eq(kt_jint(s, "held"), 0);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	json_decref(s);
	free(cs);
}
END_TEST

/* (e) max_waiters */

static atomic_int nbusy, ngranted;
static atomic_bool released;

struct bz {
	struct kt_conn	*c;
	int64_t		 ms;
};

static void *
busy_worker(void *arg)
{
	struct bz	*w = arg;
	uint64_t	 t0;

	pthread_barrier_wait(&cu_start_line);
	t0 = kt_now_ms();
	if (!cu_w_request(w->c, kt_ms(60000), "LOCK bz:k max_waiters=100 "
	    "timeout=%lld", (long long)kt_ms(60000)))
		return NULL;
	w->ms = (int64_t)(kt_now_ms() - t0);
	if (kt_line_is_err(w->c, "BUSY")) {
		atomic_fetch_add(&nbusy, 1);
		if (atomic_load(&released))
			cu_worker_error("ERR BUSY came only after the release");
		else if (w->ms > kt_ms(2000))
			cu_worker_error("ERR BUSY took %lld ms, not at once",
			    (long long)w->ms);
		return NULL;
	}
	if (!kt_line_has_prefix(w->c, "OK ")) {
		cu_worker_error("LOCK bz:k max_waiters=100: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
		return NULL;
	}
	if (!atomic_load(&released))
		cu_worker_error("granted while the key was still held");
	atomic_fetch_add(&ngranted, 1);
	if (cu_w_request(w->c, kt_ms(60000), "UNLOCK bz:k") &&
	    !kt_line_is(w->c, "OK 1"))
		cu_worker_error("UNLOCK bz:k: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
	return NULL;
}

START_TEST(max_waiters_queues_exactly_that_many_and_refuses_the_rest)
{
	struct kt_conn	*h = kt_connect(), *o = kt_connect(), **cs;
	struct bz	*ws = calloc(1000, sizeof(*ws));
	pthread_t	*th = calloc(1000, sizeof(*th));
	uint64_t	 deadline;
	json_int_t	 busy0;
	json_t		*s;

	ck_assert_ptr_nonnull(ws);
	ck_assert_ptr_nonnull(th);
	cu_reset_errors();
	atomic_store(&nbusy, 0);
	atomic_store(&ngranted, 0);
	atomic_store(&released, false);
	kt_wait_stat(o, "clients", 2);
	busy0 = kt_stat(o, "busy");
	cs = cu_open_many(o, 1000, 2);
	kt_lock(h, "LOCK bz:k");
	for (int i = 0; i < 1000; i++)
		ws[i].c = cs[i];
	cu_start_workers(th, 1000, busy_worker, ws, sizeof(ws[0]));
	pthread_barrier_wait(&cu_start_line);

	/* all refusals come while the key is still held */
	deadline = kt_now_ms() + (uint64_t)kt_ms(20000);
	while (atomic_load(&nbusy) < 900 && kt_now_ms() < deadline &&
	    atomic_load(&cu_nerrs) == 0)
		kt_sleep_ms(10);	/* polling interval */
	kt_wait_stat(o, "waiting", 100);
	kt_sleep_ms(200);	/* room for a wrong extra reply to show */
	ck_assert_msg(atomic_load(&nbusy) == 900 && atomic_load(&ngranted) ==
	    0, "with the key held: %d ERR BUSY and %d grants, want 900 and 0 "
	    "(errors: %s)", atomic_load(&nbusy), atomic_load(&ngranted),
	    cu_first_err);
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "waiting"), 100);
	ck_assert_int_ge(kt_jint(s, "max_waiters"), 100);
	if (!kt_external())
		ck_assert_int_eq(kt_jint(s, "busy") - busy0, 900);
	json_decref(s);

	atomic_store(&released, true);
	kt_req(h, "OK 1", "UNLOCK bz:k");
	for (int i = 0; i < 1000; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&cu_start_line);
	assert_no_worker_errors();
	ck_assert_int_eq(atomic_load(&ngranted), 100);
	ck_assert_int_eq(atomic_load(&nbusy), 900);
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "keys"), 0);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	json_decref(s);
	free(cs);
	free(ws);
	free(th);
}
END_TEST

/* (g) a holder process killed */

START_TEST(killed_holder_process_lets_the_waiter_in)
{
	struct kt_conn	*w, *o;
	int		 fds[2];
	char		 ok = 0;
	pid_t		 pid;
	uint64_t	 t0;
	int64_t		 dt;
	struct pollfd	 pfd;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		struct kt_conn *c = kt_conn_open(kt_d, KT_TCP, 5000);

		close(fds[0]);
		ok = c != NULL && kt_conn_sendf(c, "LOCK proc:k") == 0 &&
		    kt_conn_readline(c, 5000) == KT_LINE &&
		    kt_line_has_prefix(c, "OK ") ? '1' : '0';
		if (write(fds[1], &ok, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	pfd.fd = fds[0];
	pfd.events = POLLIN;
	ck_assert_msg(poll(&pfd, 1, (int)kt_ms(5000)) == 1 &&
	    read(fds[0], &ok, 1) == 1 && ok == '1', "the child could not lock");
	close(fds[0]);

	w = kt_connect();
	o = kt_connect();
	kt_send(w, "LOCK proc:k timeout=%lld", (long long)kt_ms(10000));
	json_decref(kt_wait_queue(o, "proc:k", 1, 1));
	t0 = kt_now_ms();
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	kt_expect_token(w);
	dt = (int64_t)(kt_now_ms() - t0);
	ck_assert_msg(dt <= kt_ms(200), "waiter granted %lld ms after its "
	    "holder was killed, want <= %lld", (long long)dt,
	    (long long)kt_ms(200));
	kt_wait_stat(o, "held", 1);
}
END_TEST

/* connection churn: every way of leaving, many times over */

struct churn {
	int	idx;
};

static void *
churn_worker(void *arg)
{
	struct churn	*w = arg;

	pthread_barrier_wait(&cu_start_line);
	for (int it = 0; it < 50; it++) {
		struct kt_conn	*c = kt_conn_open(kt_d, it % 2 &&
				    kt_have_unix() ? KT_UNIX : KT_TCP,
				    kt_ms(5000));
		int		 k = (w->idx + it) % 5;

		if (c == NULL) {
			cu_worker_error("connect: %s", strerror(errno));
			return NULL;
		}
		switch (it % 4) {
		case 0:		/* hold, then hang up */
			if (cu_w_request(c, kt_ms(30000), "LOCK churn:%d", k) &&
			    !kt_line_has_prefix(c, "OK "))
				cu_worker_error("LOCK churn:%d: \"%s\"", k,
				    kt_esc(c->line, c->linelen));
			break;
		case 1:		/* ask, and hang up before the reply */
			kt_conn_sendf(c, "LOCK churn:%d churn:%d\nSTATS\n"
			    "PING", k, (k + 1) % 5);
			break;
		case 2:		/* a clean exit */
			if (cu_w_request(c, kt_ms(30000),
			    "LOCK churn:%d ttl=50", k) &&
			    cu_w_request(c, kt_ms(30000), "UNLOCKALL") &&
			    !kt_line_has_prefix(c, "OK "))
				cu_worker_error("UNLOCKALL: \"%s\"",
				    kt_esc(c->line, c->linelen));
			break;
		default:	/* QUIT while others wait */
			if (cu_w_request(c, kt_ms(30000), "TRYLOCK churn:x%d",
			    k) && cu_w_request(c, kt_ms(30000), "QUIT") &&
			    !kt_line_is(c, "OK"))
				cu_worker_error("QUIT: \"%s\"",
				    kt_esc(c->line, c->linelen));
			break;
		}
		kt_conn_close(c);
	}
	return NULL;
}

START_TEST(connection_churn_leaves_nothing_behind)
{
	struct kt_conn	*o = kt_connect();
	struct churn	 ws[20];
	pthread_t	 th[20];
	json_t		*s;

	cu_reset_errors();
	for (int i = 0; i < 20; i++)
		ws[i].idx = i;
	cu_start_workers(th, 20, churn_worker, ws, sizeof(ws[0]));
	cu_go_and_join(th, 20);
	assert_no_worker_errors();
	kt_wait_stat(o, "clients", 1);
	/*
	 * Through backend etcd a put the client retried can land after the
	 * delete of the LOCK its connection closed on: the front end then
	 * sees an entry of its own that nobody waits for, and deletes it.
	 * So the table empties, held last.
	 */
	kt_wait_stat(o, "keys", 0);
	kt_wait_stat(o, "held", 0);
	kt_wait_stat(o, "keys", 0);
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "held"), 0);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	json_decref(s);
	kt_req(o, "OK PONG", "PING");
	kt_lock(o, "LOCK churn:0 churn:1 churn:2 churn:3 churn:4");
}
END_TEST

void
cu_add_waiting(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "waiting", KT_ANY, 120, NULL);
	tcase_add_test(tc, waiters_time_out_while_the_key_is_held);
	tcase_add_test(tc,
	    max_waiters_queues_exactly_that_many_and_refuses_the_rest);
	tcase_add_test(tc, killed_holder_process_lets_the_waiter_in);
	tcase_add_test(tc, connection_churn_leaves_nothing_behind);
}
