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
 * Checked: every request is answered (within ET_REPLY_MS); every LOCK
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "etest.h"

#define LD_CLIENTS	6
#define LD_KEYS		3
#define LD_BEFORE_MS	1500
#define LD_AFTER_MS	8000		/* > etcd-timeout + an election */
#define LD_TIMEOUT_MS	5000		/* the default etcd-timeout */

static struct et_client	 ld_cls[LD_CLIENTS];
static volatile int	 ld_stop;

/* The run: calls on the leader (on_leader) or on a follower; the leader
 * SIGKILLed, or SIGSTOPped (stop) until the load ends. */
static void
ld_run(bool on_leader, bool stop)
{
	struct kt_daemon	*d;
	struct et_hold		**v;
	int			 li;
	uint64_t		 kill_us, nops = 0, after = 0;
	uint64_t		 worst_lock = 0, worst_unlock = 0;
	uint64_t		 errors = 0, backend = 0, unanswered = 0;
	const char		*first = NULL;

	li = et_leader();
	/* the default etcd-timeout and etcd-lease-ttl */
	d = et_fe_start(et_endpoints_from(on_leader ? li : li % et_ec.n + 1),
	    NULL, NULL);
	ld_stop = 0;
	for (int i = 0; i < LD_CLIENTS; i++) {
		memset(&ld_cls[i], 0, sizeof(ld_cls[i]));
		ld_cls[i].id = i;
		ld_cls[i].d = d;
		snprintf(ld_cls[i].key, sizeof(ld_cls[i].key), "k%d",
		    i % LD_KEYS);
		ld_cls[i].stop = &ld_stop;
		et_client_start(&ld_cls[i]);
	}
	kt_sleep_ms(LD_BEFORE_MS);
	kill_us = kt_now_us();
	et_member(stop ? "stop" : "kill", li);
	kt_sleep_ms((uint64_t)kt_ms(LD_AFTER_MS));
	ld_stop = 1;
	for (int i = 0; i < LD_CLIENTS; i++) {
		char why[320];

		(void)et_client_join(&ld_cls[i], why, sizeof(why));
		ck_assert_msg(!ld_cls[i].oom, "%s", why);
	}
	if (stop)
		et_member("cont", li);
	for (int i = 0; i < LD_CLIENTS; i++) {
		struct et_client *cl = &ld_cls[i];

		nops += cl->nops;
		errors += cl->errors;
		backend += cl->backend;
		unanswered += cl->unanswered;
		if (first == NULL && cl->first[0] != '\0')
			first = cl->first;
		for (size_t j = 0; j < cl->nops; j++) {
			struct et_cycle *op = &cl->ops[j];

			if (op->h.reply_us - op->h.send_us > worst_lock)
				worst_lock = op->h.reply_us - op->h.send_us;
			if (op->done_us - op->h.end_us > worst_unlock)
				worst_unlock = op->done_us - op->h.end_us;
			if (op->h.send_us > kill_us + (uint64_t)kt_ms(
			    LD_AFTER_MS / 2) * 1000)
				after++;
		}
	}
	fprintf(stderr, "leader m%d %s, the front end's calls on %s: %"
	    PRIu64 " cycles, %" PRIu64 " ERR BACKEND, %" PRIu64 " other "
	    "errors, %" PRIu64 " unanswered; worst LOCK %" PRIu64 " ms, worst "
	    "UNLOCK %" PRIu64 " ms\n", li, stop ? "stopped" : "killed",
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
		char	key[8];
		size_t	n;

		snprintf(key, sizeof(key), "k%d", k);
		v = et_client_holds(ld_cls, LD_CLIENTS, key, &n);
		et_check_key(v, n, 1, key, NULL);
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

static Suite *
leader_suite(void)
{
	Suite	*s = suite_create("etcd_leader");
	TCase	*tc = tcase_create("leader");

	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
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
	.init = et_init,
	.done = et_done,
	.suites = { leader_suite, NULL }
};
