/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Mutual exclusion under real concurrency: a thousand connections doing
 * short critical sections on 50 keys or one (intervals never overlap),
 * increments under a lock (none lost), and transfers with multi-key locks
 * taken in random key order (the total holds, no deadlock).
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

	pthread_barrier_wait(&cu_start_line);
	if (!cu_w_request(op->c, kt_ms(60000), "LOCK cc:key%d timeout=%lld",
	    op->key, (long long)kt_ms(60000)))
		return NULL;
	if (!kt_line_token(op->c, &op->token)) {
		cu_worker_error("LOCK cc:key%d: got \"%s\"", op->key,
		    kt_esc(op->c->line, op->c->linelen));
		return NULL;
	}
	op->start = kt_now_us();
	kt_sleep_us(1000);
	op->end = kt_now_us();
	if (!cu_w_request(op->c, kt_ms(60000), "UNLOCK cc:key%d", op->key))
		return NULL;
	if (!kt_line_is(op->c, "OK 1")) {
		cu_worker_error("UNLOCK cc:key%d: got \"%s\"", op->key,
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
	cu_reset_errors();
	kt_wait_stat(o, "clients", 1);
	grants0 = kt_stat(o, "grants");
	cs = cu_open_many(o, nops, 1);
	for (int i = 0; i < nops; i++) {
		ops[i].c = cs[i];
		ops[i].key = i % nkeys;
	}
	cu_start_workers(th, nops, op_worker, ops, sizeof(*ops));
	t0 = kt_now_ms();
	cu_go_and_join(th, nops);
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

	pthread_barrier_wait(&cu_start_line);
	if (!cu_w_request(w->c, kt_ms(60000), "LOCK counter"))
		return NULL;
	if (!kt_line_has_prefix(w->c, "OK ")) {
		cu_worker_error("LOCK counter: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
		return NULL;
	}
	v = counter;
	kt_sleep_us(1000);		/* widen the read-modify-write window */
	counter = v + 1;
	if (cu_w_request(w->c, kt_ms(60000), "UNLOCK counter") &&
	    !kt_line_is(w->c, "OK 1"))
		cu_worker_error("UNLOCK counter: got \"%s\"",
		    kt_esc(w->c->line, w->c->linelen));
	return NULL;
}

START_TEST(increments_under_lock_are_never_lost)
{
	struct kt_conn	*o = kt_connect(), **cs;
	struct inc	 ws[100];
	pthread_t	 th[100];

	cu_reset_errors();
	counter = 1000;
	kt_wait_stat(o, "clients", 1);
	cs = cu_open_many(o, 100, 1);
	for (int i = 0; i < 100; i++)
		ws[i].c = cs[i];
	cu_start_workers(th, 100, inc_worker, ws, sizeof(ws[0]));
	cu_go_and_join(th, 100);
	assert_no_worker_errors();
	ck_assert_int_eq(counter, 1100);
	kt_wait_stat(o, "keys", 0);
	free(cs);
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

	pthread_barrier_wait(&cu_start_line);
	if (!cu_w_request(x->c, kt_ms(30000), "LOCK acct:%d acct:%d "
	    "timeout=%lld", k1, k2, (long long)kt_ms(30000)))
		return NULL;
	if (kt_line_is_err(x->c, "DEADLOCK"))
		atomic_fetch_add(&ndeadlocks, 1);
	if (!kt_line_has_prefix(x->c, "OK ")) {
		cu_worker_error("LOCK acct:%d acct:%d: got \"%s\"", k1, k2,
		    kt_esc(x->c->line, x->c->linelen));
		return NULL;
	}
	bs = balance[x->src];
	sched_yield();
	bd = balance[x->dst];
	kt_sleep_us(50);
	balance[x->src] = bs - x->amount;
	sched_yield();
	balance[x->dst] = bd + x->amount;
	if (cu_w_request(x->c, kt_ms(30000), "UNLOCK acct:%d acct:%d", k2,
	    k1) && !kt_line_is(x->c, "OK 2"))
		cu_worker_error("UNLOCK acct:%d acct:%d: got \"%s\"", k2, k1,
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
	cu_reset_errors();
	atomic_store(&ndeadlocks, 0);
	for (int i = 0; i < NACCT; i++)
		balance[i] = want[i] = 1000;
	kt_wait_stat(o, "clients", 1);
	cs = cu_open_many(o, NTRANSFERS, 1);
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
	cu_start_workers(th, NTRANSFERS, xfer_worker, xs, sizeof(xs[0]));
	t0 = kt_now_ms();
	cu_go_and_join(th, NTRANSFERS);
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

void
cu_add_exclusion(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "exclusion", KT_ANY, 120, NULL);
	tcase_add_test(tc, ops_on_50_keys_from_1000_connections_never_overlap);
	tcase_add_test(tc, ops_on_one_key_are_serialised);
	tcase_add_test(tc, increments_under_lock_are_never_lost);
	tcase_add_test(tc,
	    transfers_in_random_key_order_keep_the_total_and_never_deadlock);
}
