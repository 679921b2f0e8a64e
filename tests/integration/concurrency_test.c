/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Mutual exclusion, FIFO, timeouts, BUSY, deadlock freedom and disconnect
 * release under real concurrency: many connections, one worker thread
 * each, started together at a barrier. Every check asserts something a
 * wrong daemon would break (overlapping holds, lost updates, a wrong count
 * of queued requests, a grant out of order). Workers never call Check;
 * they record the first error and the main thread asserts.
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

#include "kltest.h"

#define WORKER_STACK	(256 * 1024)

/* Shared by the workers of one test */

static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char	 first_err[1024];
static atomic_int nerrs;
static pthread_barrier_t start_line;

static void	 worker_error(const char *fmt, ...)
		    __attribute__((format(printf, 1, 2)));
static bool	 w_request(struct kt_conn *c, int64_t timeout_ms,
		    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
worker_error(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&err_lock);
	if (atomic_fetch_add(&nerrs, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(first_err, sizeof(first_err), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&err_lock);
}

static void
reset_errors(void)
{
	atomic_store(&nerrs, 0);
	first_err[0] = '\0';
}

#define assert_no_worker_errors() \
	ck_assert_msg(atomic_load(&nerrs) == 0, "%d worker errors; first: %s", \
	    atomic_load(&nerrs), first_err)

static uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void
sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000),
	    (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* One request, one reply line, from a worker: false (error recorded) if
 * the send fails or no line comes within timeout_ms. */
static bool
w_request(struct kt_conn *c, int64_t timeout_ms, const char *fmt, ...)
{
	char		buf[512];
	va_list		ap;
	int		n;
	enum kt_read	r;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	buf[n] = '\n';
	if (kt_conn_send(c, buf, (size_t)n + 1, timeout_ms) != 0) {
		worker_error("sending \"%.*s\": %s", n, buf, strerror(errno));
		return false;
	}
	r = kt_conn_readline(c, timeout_ms);
	if (r != KT_LINE) {
		worker_error("\"%.*s\": %s within %lld ms", n, buf,
		    r == KT_TIMEOUT ? "no reply" : r == KT_EOF ?
		    "connection closed" : "read error", (long long)timeout_ms);
		return false;
	}
	return true;
}

/* Opens n connections first, and waits until the server counts them all
 * (plus extra ones already open). */
static struct kt_conn **
open_many(struct kt_conn *o, int n, int already)
{
	struct kt_conn **cs = calloc((size_t)n, sizeof(*cs));

	ck_assert_ptr_nonnull(cs);
	for (int i = 0; i < n; i++)
		cs[i] = kt_connect();
	kt_wait_stat(o, "clients", n + already);
	return cs;
}

static void
start_workers(pthread_t *th, int n, void *(*fn)(void *), void *args,
    size_t argsize)
{
	pthread_attr_t	attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, WORKER_STACK);
	pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		int e = pthread_create(&th[i], &attr, fn, (char *)args +
		    (size_t)i * argsize);

		ck_assert_msg(e == 0, "pthread_create %d: %s", i, strerror(e));
	}
	pthread_attr_destroy(&attr);
}

static void
go_and_join(pthread_t *th, int n)
{
	pthread_barrier_wait(&start_line);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start_line);
}

/* (a), (b): short critical sections, intervals recorded */

struct op {
	struct kt_conn	*c;
	int		 key;
	uint64_t	 start, end;	/* us: granted, before UNLOCK */
	uint64_t	 token;
	bool		 done;
};

static void *
op_worker(void *arg)
{
	struct op *op = arg;

	pthread_barrier_wait(&start_line);
	if (!w_request(op->c, kt_ms(60000), "LOCK cc:key%d timeout=%lld",
	    op->key, (long long)kt_ms(60000)))
		return NULL;
	if (!kt_line_token(op->c, &op->token)) {
		worker_error("LOCK cc:key%d: got \"%s\"", op->key,
		    kt_esc(op->c->line, op->c->linelen));
		return NULL;
	}
	op->start = now_us();
	sleep_us(1000);
	op->end = now_us();
	if (!w_request(op->c, kt_ms(60000), "UNLOCK cc:key%d", op->key))
		return NULL;
	if (!kt_line_is(op->c, "OK 1")) {
		worker_error("UNLOCK cc:key%d: got \"%s\"", op->key,
		    kt_esc(op->c->line, op->c->linelen));
		return NULL;
	}
	op->done = true;
	return NULL;
}

static int
op_cmp(const void *a, const void *b)
{
	const struct op *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Runs nops operations over nkeys keys, one connection each, all opened
 * first; returns the wall time in ms. */
static uint64_t
run_ops(int nops, int nkeys)
{
	struct kt_conn	*o = kt_connect(), **cs;
	struct op	*ops = calloc((size_t)nops, sizeof(*ops));
	pthread_t	*th = calloc((size_t)nops, sizeof(*th));
	json_int_t	 grants0;
	uint64_t	 t0, wall;
	int		 overlaps = 0, disorder = 0, ndone = 0;
	char		 first[256] = "", firstd[160] = "";
	json_t		*s;

	ck_assert_ptr_nonnull(ops);
	ck_assert_ptr_nonnull(th);
	reset_errors();
	kt_wait_stat(o, "clients", 1);
	grants0 = kt_stat(o, "grants");
	cs = open_many(o, nops, 1);
	for (int i = 0; i < nops; i++) {
		ops[i].c = cs[i];
		ops[i].key = i % nkeys;
	}
	start_workers(th, nops, op_worker, ops, sizeof(*ops));
	t0 = kt_now_ms();
	go_and_join(th, nops);
	wall = kt_now_ms() - t0;
	assert_no_worker_errors();

	qsort(ops, (size_t)nops, sizeof(*ops), op_cmp);
	for (int i = 0; i < nops; i++) {
		ndone += ops[i].done;
		if (i == 0 || ops[i].key != ops[i - 1].key)
			continue;
		if (ops[i].start < ops[i - 1].end) {
			if (overlaps++ == 0)
				snprintf(first, sizeof(first), "cc:key%d held "
				    "[%llu,%llu] us (token %llu) and from %llu "
				    "us (token %llu)", ops[i].key,
				    (unsigned long long)ops[i - 1].start,
				    (unsigned long long)ops[i - 1].end,
				    (unsigned long long)ops[i - 1].token,
				    (unsigned long long)ops[i].start,
				    (unsigned long long)ops[i].token);
		}
		if (ops[i].token <= ops[i - 1].token && disorder++ == 0)
			snprintf(firstd, sizeof(firstd), "cc:key%d: token %llu "
			    "granted after token %llu", ops[i].key,
			    (unsigned long long)ops[i].token,
			    (unsigned long long)ops[i - 1].token);
	}
	ck_assert_int_eq(ndone, nops);
	ck_assert_msg(overlaps == 0, "%d overlapping holds; first: %s",
	    overlaps, first);
	ck_assert_msg(disorder == 0, "%d grants with a smaller token than the "
	    "one before on the same key; first: %s", disorder, firstd);

	/* every UNLOCK was answered: the table is empty now */
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "keys"), 0);
	ck_assert_int_eq(kt_jint(s, "held"), 0);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	if (!kt_external())
		ck_assert_int_eq(kt_jint(s, "grants") - grants0, nops);
	json_decref(s);
	for (int i = 0; i < nops; i++)
		kt_conn_close(cs[i]);
	free(cs);
	free(ops);
	free(th);
	return wall;
}

START_TEST(ops_on_50_keys_from_1000_connections_never_overlap)
{
	run_ops(1000, 50);
}
END_TEST

START_TEST(ops_on_one_key_are_serialised)
{
	uint64_t wall = run_ops(1000, 1);

	ck_assert_msg(wall >= 1000, "1000 holds of >= 1 ms on one key took "
	    "%llu ms in all: they cannot have been one at a time",
	    (unsigned long long)wall);
}
END_TEST

/* (c) lost updates */

static volatile int counter;

struct inc {
	struct kt_conn	*c;
};

static void *
inc_worker(void *arg)
{
	struct inc	*w = arg;
	int		 v;

	pthread_barrier_wait(&start_line);
	if (!w_request(w->c, kt_ms(60000), "LOCK counter"))
		return NULL;
	if (!kt_line_has_prefix(w->c, "OK ")) {
		worker_error("LOCK counter: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
		return NULL;
	}
	v = counter;
	sleep_us(1000);		/* widen the read-modify-write window */
	counter = v + 1;
	if (w_request(w->c, kt_ms(60000), "UNLOCK counter") &&
	    !kt_line_is(w->c, "OK 1"))
		worker_error("UNLOCK counter: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
	return NULL;
}

START_TEST(increments_under_lock_are_never_lost)
{
	struct kt_conn	*o = kt_connect(), **cs;
	struct inc	 ws[100];
	pthread_t	 th[100];

	reset_errors();
	counter = 1000;
	kt_wait_stat(o, "clients", 1);
	cs = open_many(o, 100, 1);
	for (int i = 0; i < 100; i++)
		ws[i].c = cs[i];
	start_workers(th, 100, inc_worker, ws, sizeof(ws[0]));
	go_and_join(th, 100);
	assert_no_worker_errors();
	ck_assert_int_eq(counter, 1100);
	kt_wait_stat(o, "keys", 0);
	free(cs);
}
END_TEST

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

	pthread_barrier_wait(&start_line);
	t0 = kt_now_ms();
	if (!w_request(w->c, kt_ms(10000), "LOCK tm:k timeout=2000"))
		return NULL;
	w->ms = (int64_t)(kt_now_ms() - t0);
	if (!kt_line_is_err(w->c, "TIMEOUT"))
		worker_error("LOCK tm:k timeout=2000: got \"%s\"",
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

	reset_errors();
	timeouts0 = kt_stat(o, "timeouts");
	kt_wait_stat(o, "clients", 2);
	cs = open_many(o, 20, 2);
	t0 = kt_now_ms();
	kt_lock(h, "LOCK tm:k");
	for (int i = 0; i < 20; i++) {
		ws[i].c = cs[i];
		ws[i].ms = -1;
	}
	start_workers(th, 20, timeout_worker, ws, sizeof(ws[0]));
	go_and_join(th, 20);
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

	pthread_barrier_wait(&start_line);
	t0 = kt_now_ms();
	if (!w_request(w->c, kt_ms(60000), "LOCK bz:k max_waiters=100 "
	    "timeout=%lld", (long long)kt_ms(60000)))
		return NULL;
	w->ms = (int64_t)(kt_now_ms() - t0);
	if (kt_line_is_err(w->c, "BUSY")) {
		atomic_fetch_add(&nbusy, 1);
		if (atomic_load(&released))
			worker_error("ERR BUSY came only after the release");
		else if (w->ms > kt_ms(2000))
			worker_error("ERR BUSY took %lld ms, not at once",
			    (long long)w->ms);
		return NULL;
	}
	if (!kt_line_has_prefix(w->c, "OK ")) {
		worker_error("LOCK bz:k max_waiters=100: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
		return NULL;
	}
	if (!atomic_load(&released))
		worker_error("granted while the key was still held");
	atomic_fetch_add(&ngranted, 1);
	if (w_request(w->c, kt_ms(60000), "UNLOCK bz:k") &&
	    !kt_line_is(w->c, "OK 1"))
		worker_error("UNLOCK bz:k: got \"%s\"",
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
	reset_errors();
	atomic_store(&nbusy, 0);
	atomic_store(&ngranted, 0);
	atomic_store(&released, false);
	kt_wait_stat(o, "clients", 2);
	busy0 = kt_stat(o, "busy");
	cs = open_many(o, 1000, 2);
	kt_lock(h, "LOCK bz:k");
	for (int i = 0; i < 1000; i++)
		ws[i].c = cs[i];
	start_workers(th, 1000, busy_worker, ws, sizeof(ws[0]));
	pthread_barrier_wait(&start_line);

	/* all refusals come while the key is still held */
	deadline = kt_now_ms() + (uint64_t)kt_ms(20000);
	while (atomic_load(&nbusy) < 900 && kt_now_ms() < deadline &&
	    atomic_load(&nerrs) == 0)
		kt_sleep_ms(10);	/* polling interval */
	kt_wait_stat(o, "waiting", 100);
	kt_sleep_ms(200);	/* room for a wrong extra reply to show */
	ck_assert_msg(atomic_load(&nbusy) == 900 && atomic_load(&ngranted) ==
	    0, "with the key held: %d ERR BUSY and %d grants, want 900 and 0 "
	    "(errors: %s)", atomic_load(&nbusy), atomic_load(&ngranted),
	    first_err);
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
	pthread_barrier_destroy(&start_line);
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

/* (f) transfers with multi-key locks in random key order */

#define NACCT		10
#define NTRANSFERS	1000

static volatile long balance[NACCT];
static atomic_int ndeadlocks;

struct xfer {
	struct kt_conn	*c;
	int		 src, dst, amount;
	bool		 dst_first;
};

static void *
xfer_worker(void *arg)
{
	struct xfer	*x = arg;
	int		 k1 = x->dst_first ? x->dst : x->src;
	int		 k2 = x->dst_first ? x->src : x->dst;
	long		 bs, bd;

	pthread_barrier_wait(&start_line);
	if (!w_request(x->c, kt_ms(30000), "LOCK acct:%d acct:%d "
	    "timeout=%lld", k1, k2, (long long)kt_ms(30000)))
		return NULL;
	if (kt_line_is_err(x->c, "DEADLOCK"))
		atomic_fetch_add(&ndeadlocks, 1);
	if (!kt_line_has_prefix(x->c, "OK ")) {
		worker_error("LOCK acct:%d acct:%d: got \"%s\"", k1, k2,
		    kt_esc(x->c->line, x->c->linelen));
		return NULL;
	}
	bs = balance[x->src];
	sched_yield();
	bd = balance[x->dst];
	sleep_us(50);
	balance[x->src] = bs - x->amount;
	sched_yield();
	balance[x->dst] = bd + x->amount;
	if (w_request(x->c, kt_ms(30000), "UNLOCK acct:%d acct:%d", k2, k1) &&
	    !kt_line_is(x->c, "OK 2"))
		worker_error("UNLOCK acct:%d acct:%d: got \"%s\"", k2, k1,
		    kt_esc(x->c->line, x->c->linelen));
	return NULL;
}

START_TEST(transfers_in_random_key_order_keep_the_total_and_never_deadlock)
{
	struct kt_conn	*o = kt_connect(), **cs;
	struct xfer	*xs = calloc(NTRANSFERS, sizeof(*xs));
	pthread_t	*th = calloc(NTRANSFERS, sizeof(*th));
	long		 want[NACCT], total = 0;
	unsigned	 seed = 12345;
	uint64_t	 t0;

	ck_assert_ptr_nonnull(xs);
	ck_assert_ptr_nonnull(th);
	reset_errors();
	atomic_store(&ndeadlocks, 0);
	for (int i = 0; i < NACCT; i++)
		balance[i] = want[i] = 1000;
	kt_wait_stat(o, "clients", 1);
	cs = open_many(o, NTRANSFERS, 1);
	for (int i = 0; i < NTRANSFERS; i++) {
		xs[i].c = cs[i];
		xs[i].src = rand_r(&seed) % NACCT;
		xs[i].dst = (xs[i].src + 1 + rand_r(&seed) % (NACCT - 1)) %
		    NACCT;
		xs[i].amount = 1 + rand_r(&seed) % 50;
		xs[i].dst_first = rand_r(&seed) % 2;
		want[xs[i].src] -= xs[i].amount;
		want[xs[i].dst] += xs[i].amount;
	}
	start_workers(th, NTRANSFERS, xfer_worker, xs, sizeof(xs[0]));
	t0 = kt_now_ms();
	go_and_join(th, NTRANSFERS);
	ck_assert_int_eq(atomic_load(&ndeadlocks), 0);
	assert_no_worker_errors();
	ck_assert_msg(kt_now_ms() - t0 <= (uint64_t)kt_ms(30000), "took %llu "
	    "ms", (unsigned long long)(kt_now_ms() - t0));
	for (int i = 0; i < NACCT; i++) {
		ck_assert_msg(balance[i] == want[i], "account %d is %ld, want "
		    "%ld (a lost update)", i, balance[i], want[i]);
		total += balance[i];
	}
	ck_assert_int_eq(total, NACCT * 1000);
	kt_wait_stat(o, "keys", 0);
	free(cs);
	free(xs);
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

	pthread_barrier_wait(&start_line);
	for (int it = 0; it < 50; it++) {
		struct kt_conn	*c = kt_conn_open(kt_d, it % 2 &&
				    kt_have_unix() ? KT_UNIX : KT_TCP,
				    kt_ms(5000));
		int		 k = (w->idx + it) % 5;

		if (c == NULL) {
			worker_error("connect: %s", strerror(errno));
			return NULL;
		}
		switch (it % 4) {
		case 0:		/* hold, then hang up */
			if (w_request(c, kt_ms(30000), "LOCK churn:%d", k) &&
			    !kt_line_has_prefix(c, "OK "))
				worker_error("LOCK churn:%d: \"%s\"", k,
				    kt_esc(c->line, c->linelen));
			break;
		case 1:		/* ask, and hang up before the reply */
			kt_conn_sendf(c, "LOCK churn:%d churn:%d\nSTATS\n"
			    "PING", k, (k + 1) % 5);
			break;
		case 2:		/* a clean exit */
			if (w_request(c, kt_ms(30000), "LOCK churn:%d ttl=50",
			    k) && w_request(c, kt_ms(30000), "UNLOCKALL") &&
			    !kt_line_has_prefix(c, "OK "))
				worker_error("UNLOCKALL: \"%s\"",
				    kt_esc(c->line, c->linelen));
			break;
		default:	/* QUIT while others wait */
			if (w_request(c, kt_ms(30000), "TRYLOCK churn:x%d",
			    k) && w_request(c, kt_ms(30000), "QUIT") &&
			    !kt_line_is(c, "OK"))
				worker_error("QUIT: \"%s\"",
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

	reset_errors();
	for (int i = 0; i < 20; i++)
		ws[i].idx = i;
	start_workers(th, 20, churn_worker, ws, sizeof(ws[0]));
	go_and_join(th, 20);
	assert_no_worker_errors();
	kt_wait_stat(o, "clients", 1);
	kt_wait_stat(o, "keys", 0);
	s = kt_stats(o);
	ck_assert_int_eq(kt_jint(s, "held"), 0);
	ck_assert_int_eq(kt_jint(s, "waiting"), 0);
	json_decref(s);
	kt_req(o, "OK PONG", "PING");
	kt_lock(o, "LOCK churn:0 churn:1 churn:2 churn:3 churn:4");
}
END_TEST

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

static Suite *
concurrency_suite(void)
{
	Suite	*s = suite_create("concurrency");
	TCase	*tc;

	tc = kt_tcase(s, "exclusion", KT_ANY, 120, NULL);
	tcase_add_test(tc, ops_on_50_keys_from_1000_connections_never_overlap);
	tcase_add_test(tc, ops_on_one_key_are_serialised);
	tcase_add_test(tc, increments_under_lock_are_never_lost);
	tcase_add_test(tc,
	    transfers_in_random_key_order_keep_the_total_and_never_deadlock);

	tc = kt_tcase(s, "waiting", KT_ANY, 120, NULL);
	tcase_add_test(tc, waiters_time_out_while_the_key_is_held);
	tcase_add_test(tc,
	    max_waiters_queues_exactly_that_many_and_refuses_the_rest);
	tcase_add_test(tc, killed_holder_process_lets_the_waiter_in);
	tcase_add_test(tc, connection_churn_leaves_nothing_behind);

	tc = kt_tcase(s, "order", KT_ANY, 120, NULL);
	tcase_add_test(tc, grants_follow_arrival_order);
	tcase_add_test(tc,
	    readers_are_batched_and_a_writer_between_them_is_not_starved);
	tcase_add_test(tc, three_way_cycle_race_yields_exactly_one_deadlock);
	return s;
}

int
main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	kt_init("concurrency_test");
	return kt_run(concurrency_suite());
}
