/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The etcd leader SIGKILLed under load costs latency, not errors (issue
 * 23; keylockd(8), FAILURES). A front end with the default etcd settings
 * (etcd-timeout 5000 ms, etcd-lease-ttl 15 s) on a private 3-member
 * cluster serves LD_CLIENTS threads, each on a connection of its own,
 * cycling LOCK and UNLOCK on one of LD_KEYS keys (two clients a key, so
 * grants pass between them). After LD_BEFORE_MS the leader is SIGKILLed;
 * the load goes on for LD_AFTER_MS, past etcd-timeout, so that a request
 * stuck on a member would have failed by then. Three times: with the
 * front end's calls and watch on the leader (its first endpoint), then on
 * a follower, and with the leader SIGSTOPped instead (a host gone without
 * a FIN to its connections) under the front end's calls and watch.
 *
 * Checked: every request is answered (within LD_REPLY_MS); every LOCK
 * gets OK and a token, every UNLOCK OK 1 (no ERR BACKEND, nor any other
 * error); no UNLOCK takes longer than etcd-timeout, nor a LOCK (which may
 * wait for the other client's UNLOCK) twice that; no two holds of a key
 * overlap, and a key's tokens rise from hold to hold (a client's hold,
 * from its OK to its UNLOCK, lies within the front end's, from the grant
 * to the delete's commit); grants go on after the kill. The worst LOCK
 * and UNLOCK latencies across the kill go to stderr.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "ec.h"
#include "kltest.h"

#define LD_CLIENTS	6
#define LD_KEYS		3
#define LD_BEFORE_MS	1500
#define LD_AFTER_MS	8000		/* > etcd-timeout + an election */
#define LD_REPLY_MS	30000		/* "answered": far past any */
#define LD_TIMEOUT_MS	5000		/* the default etcd-timeout */

struct ld_op {
	uint64_t	send_us;	/* LOCK sent */
	uint64_t	grant_us;	/* its OK read */
	uint64_t	end_us;		/* UNLOCK sent */
	uint64_t	done_us;	/* UNLOCK's reply read */
	uint64_t	token;
};

struct ld_client {
	pthread_t	 th;
	int		 id;
	const struct kt_daemon *d;
	struct ld_op	*ops;
	size_t		 nops, cap;
	uint64_t	 errors, backend, unanswered;
	char		 first[200];	/* the first wrong reply */
	bool		 oom;
};

static struct ec	 ld_ec;
static struct ld_client	 ld_cls[LD_CLIENTS];
static volatile int	 ld_stop;
static char		 ld_prefix[64];

static void
ld_wrong(struct ld_client *cl, const char *req, const char *line)
{
	if (line != NULL && strncmp(line, "ERR BACKEND", 11) == 0)
		cl->backend++;
	if (line == NULL)
		cl->unanswered++;
	else
		cl->errors++;
	if (cl->first[0] == '\0')
		snprintf(cl->first, sizeof(cl->first), "client %d, %s: %s",
		    cl->id, req, line != NULL ? line : "no reply");
}

static void *
ld_client_main(void *arg)
{
	struct ld_client	*cl = arg;
	struct kt_conn		*c;
	char			 key[8];

	snprintf(key, sizeof(key), "k%d", cl->id % LD_KEYS);
	if ((c = kt_conn_open(cl->d, KT_TCP, kt_ms(5000))) == NULL) {
		ld_wrong(cl, "connect", NULL);
		return NULL;
	}
	while (!ld_stop) {
		struct ld_op	op;

		memset(&op, 0, sizeof(op));
		op.send_us = kt_now_us();
		if (kt_conn_sendf(c, "LOCK %s", key) != 0 ||
		    kt_conn_readline(c, LD_REPLY_MS) != KT_LINE) {
			ld_wrong(cl, "LOCK", NULL);
			break;
		}
		op.grant_us = kt_now_us();
		if (!kt_line_token(c, &op.token)) {
			ld_wrong(cl, "LOCK", c->line);
			continue;
		}
		op.end_us = kt_now_us();
		if (kt_conn_sendf(c, "UNLOCK %s", key) != 0 ||
		    kt_conn_readline(c, LD_REPLY_MS) != KT_LINE) {
			ld_wrong(cl, "UNLOCK", NULL);
			break;
		}
		op.done_us = kt_now_us();
		if (!kt_line_is(c, "OK 1"))
			ld_wrong(cl, "UNLOCK", c->line);
		if (cl->nops == cl->cap) {
			size_t		 cap = cl->cap ? cl->cap * 2 : 4096;
			struct ld_op	*p = realloc(cl->ops, cap * sizeof(*p));

			if (p == NULL) {
				cl->oom = true;
				break;
			}
			cl->ops = p;
			cl->cap = cap;
		}
		cl->ops[cl->nops++] = op;
	}
	kt_conn_close(c);
	return NULL;
}

static int
ld_cmp_grant(const void *a, const void *b)
{
	const struct ld_op *x = *(const struct ld_op *const *)a;
	const struct ld_op *y = *(const struct ld_op *const *)b;

	return x->grant_us < y->grant_us ? -1 : x->grant_us > y->grant_us;
}

static void
ld_setup(void)
{
	ck_assert_msg(ec_run(&ld_ec, NULL, 0, "heal", NULL) == 0,
	    "the etcd cluster did not heal");
	kt_setup_none();
}

/* The endpoint list with member first first. */
static const char *
ld_endpoints_from(int first)
{
	static char	buf[EC_ENDPOINTS_MAX];
	size_t		n = 0;

	n += (size_t)snprintf(buf, sizeof(buf), "%s", ec_url(&ld_ec, first));
	for (int i = 1; i <= ld_ec.n; i++)
		if (i != first)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, ",%s",
			    ec_url(&ld_ec, i));
	return buf;
}

/* The run: calls on the leader (on_leader) or on a follower; the leader
 * SIGKILLed, or SIGSTOPped (stop) until the load ends. */
static void
ld_run(bool on_leader, bool stop)
{
	struct kt_daemon	*d;
	struct ld_op		**v;
	char			 leader[16], name[8];
	int			 li;
	uint64_t		 kill_us, nops = 0, after = 0;
	uint64_t		 worst_lock = 0, worst_unlock = 0;
	uint64_t		 errors = 0, backend = 0, unanswered = 0;
	const char		*first = NULL;

	ck_assert_int_eq(ec_leader(&ld_ec, leader, sizeof(leader)), 0);
	li = atoi(leader + 1);
	snprintf(ld_prefix, sizeof(ld_prefix), "kltest-%ld-%d%d/",
	    (long)getpid(), on_leader, stop);
	/* the default etcd-timeout and etcd-lease-ttl */
	d = kt_daemon_start_at(KT_AT, NULL, KT_ARGS("--backend", "etcd",
	    "--etcd-endpoints", ld_endpoints_from(on_leader ? li :
	    li % ld_ec.n + 1), "--etcd-prefix", ld_prefix));
	ld_stop = 0;
	for (int i = 0; i < LD_CLIENTS; i++) {
		memset(&ld_cls[i], 0, sizeof(ld_cls[i]));
		ld_cls[i].id = i;
		ld_cls[i].d = d;
		ck_assert_int_eq(pthread_create(&ld_cls[i].th, NULL,
		    ld_client_main, &ld_cls[i]), 0);
	}
	kt_sleep_ms(LD_BEFORE_MS);
	snprintf(name, sizeof(name), "m%d", li);
	kill_us = kt_now_us();
	ck_assert_int_eq(ec_member(&ld_ec, stop ? "stop" : "kill", name), 0);
	kt_sleep_ms((uint64_t)kt_ms(LD_AFTER_MS));
	ld_stop = 1;
	for (int i = 0; i < LD_CLIENTS; i++)
		pthread_join(ld_cls[i].th, NULL);
	if (stop)
		ck_assert_int_eq(ec_member(&ld_ec, "cont", name), 0);
	for (int i = 0; i < LD_CLIENTS; i++) {
		struct ld_client *cl = &ld_cls[i];

		ck_assert_msg(!cl->oom, "out of memory for the history");
		nops += cl->nops;
		errors += cl->errors;
		backend += cl->backend;
		unanswered += cl->unanswered;
		if (first == NULL && cl->first[0] != '\0')
			first = cl->first;
		for (size_t j = 0; j < cl->nops; j++) {
			struct ld_op *op = &cl->ops[j];

			if (op->grant_us - op->send_us > worst_lock)
				worst_lock = op->grant_us - op->send_us;
			if (op->done_us - op->end_us > worst_unlock)
				worst_unlock = op->done_us - op->end_us;
			if (op->send_us > kill_us + (uint64_t)kt_ms(
			    LD_AFTER_MS / 2) * 1000)
				after++;
		}
	}
	fprintf(stderr, "leader %s %s, the front end's calls on %s: %"
	    PRIu64 " cycles, %" PRIu64 " ERR BACKEND, %" PRIu64 " other "
	    "errors, %" PRIu64 " unanswered; worst LOCK %" PRIu64 " ms, worst "
	    "UNLOCK %" PRIu64 " ms\n", leader, stop ? "stopped" : "killed",
	    on_leader ? "it" : "a follower", nops, backend, errors - backend,
	    unanswered, worst_lock / 1000, worst_unlock / 1000);
	ck_assert_msg(errors == 0 && unanswered == 0, "%" PRIu64 " wrong "
	    "replies (%" PRIu64 " ERR BACKEND), %" PRIu64 " unanswered; the "
	    "first: %s", errors, backend, unanswered, first);
	ck_assert_msg(worst_unlock < (uint64_t)kt_ms(LD_TIMEOUT_MS) * 1000 &&
	    worst_lock < (uint64_t)kt_ms(2 * LD_TIMEOUT_MS) * 1000,
	    "a request as slow as a timeout: worst UNLOCK %" PRIu64 " ms, "
	    "LOCK %" PRIu64 " ms", worst_unlock / 1000, worst_lock / 1000);
	ck_assert_msg(after > 0, "no cycle in the second half after the "
	    "kill");

	/* the history: per key, holds in grant order */
	for (int k = 0; k < LD_KEYS; k++) {
		size_t n = 0;

		for (int i = k; i < LD_CLIENTS; i += LD_KEYS)
			n += ld_cls[i].nops;
		ck_assert_ptr_nonnull(v = calloc(n + 1, sizeof(*v)));
		n = 0;
		for (int i = k; i < LD_CLIENTS; i += LD_KEYS)
			for (size_t j = 0; j < ld_cls[i].nops; j++)
				v[n++] = &ld_cls[i].ops[j];
		qsort(v, n, sizeof(*v), ld_cmp_grant);
		for (size_t j = 1; j < n; j++) {
			ck_assert_msg(v[j - 1]->end_us <= v[j]->grant_us,
			    "k%d: a hold (token %" PRIu64 ") overlaps the next "
			    "(token %" PRIu64 ") by %" PRIu64 " us", k,
			    v[j - 1]->token, v[j]->token, v[j - 1]->end_us -
			    v[j]->grant_us);
			ck_assert_msg(v[j - 1]->token < v[j]->token,
			    "k%d: token %" PRIu64 " then %" PRIu64, k,
			    v[j - 1]->token, v[j]->token);
		}
		free(v);
	}
	for (int i = 0; i < LD_CLIENTS; i++)
		free(ld_cls[i].ops);
}

START_TEST(a_killed_leader_under_the_front_ends_calls_costs_no_error)
{
	ld_run(true, false);
}
END_TEST

START_TEST(a_killed_leader_behind_a_follower_costs_no_error)
{
	ld_run(false, false);
}
END_TEST

START_TEST(a_stopped_leader_under_the_front_ends_watch_costs_no_error)
{
	ld_run(true, true);
}
END_TEST

static void
ld_init(const char *prog)
{
	kt_init(prog);
	if (ec_start(&ld_ec, 3) != 0)
		exit(1);
}

static void
ld_done(void)
{
	ec_down(&ld_ec);
}

static Suite *
leader_suite(void)
{
	Suite	*s = suite_create("etcd_leader");
	TCase	*tc = tcase_create("leader");

	tcase_add_checked_fixture(tc, ld_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc,
	    a_killed_leader_under_the_front_ends_calls_costs_no_error);
	tcase_add_test(tc, a_killed_leader_behind_a_follower_costs_no_error);
	tcase_add_test(tc,
	    a_stopped_leader_under_the_front_ends_watch_costs_no_error);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "leader_test",
	.init = ld_init,
	.done = ld_done,
	.suites = { leader_suite, NULL }
};
