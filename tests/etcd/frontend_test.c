/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd through the protocol only, against real processes: a
 * private 3-member etcd cluster (tests/etcd/cluster.sh, started once by
 * this program) and keylockd front ends started per test from the build
 * tree (kltest.h), each test under an etcd prefix of its own. One table
 * across front ends (LOCKED, FIFO, atomic multi-key, HELD, CONFLICT, BUSY,
 * DEADLOCK, INFO, tokens; channels as owners), CANCEL of a wait behind another front end and
 * racing a grant from it, then the failures of issue 11: a client that
 * disconnects, a front end SIGKILLed and one SIGSTOPped past its lease, a
 * member and the leader killed, a majority stopped, and a watch cut and
 * compacted. Short leases (3 s) keep the waits short; each fault test
 * starts with every member running and healthy.
 */
#include <sys/socket.h>
#include <sys/time.h>

#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "check_main.h"
#include "etcd.h"
#include "etest.h"

#define FE_TTL		"3"	/* s: etcd-lease-ttl of the fault tests */
#define FE_TTL_MS	3000
#define FE_TIMEOUT	"900"	/* ms: etcd-timeout, under a third of it */
#define FE_SLACK_MS	2500	/* the lease reaper's lag, a loaded CPU */

/* A front end of the fault tests' lease and timeout. */
static struct kt_daemon *
fe_start(void)
{
	return et_fe_start(NULL, FE_TTL, FE_TIMEOUT);
}

/*
 * Polls a fresh connection to d until LOCK key works (the front end
 * serves again); returns that connection, holding key. A LOCK answered
 * BACKEND may have been made all the same, and its entry then stays until
 * the delete the front end sends for it commits, which waits out the
 * delete's retry when etcd has just come back (seconds on a loaded
 * machine): the next LOCK of the same connection queues behind it, and
 * its TIMEOUT is retried too, until the deadline.
 */
static struct kt_conn *
fe_wait_serving(struct kt_daemon *d, const char *key, int64_t ms)
{
	uint64_t	 deadline = kt_now_ms() + (uint64_t)kt_ms(ms);
	struct kt_conn	*c = kt_connect_to(d, KT_TCP);

	for (;;) {
		kt_send(c, "LOCK %s timeout=%d", key, 1000);
		kt_recv_within(c, kt_ms(5000));
		if (kt_line_has_prefix(c, "OK "))
			return c;
		if ((!kt_line_is_err(c, "BACKEND") &&
		    !kt_line_is_err(c, "TIMEOUT")) || kt_now_ms() > deadline)
			kt_fail("%s: LOCK %s: %s", d->addr, key, c->line);
		kt_sleep_ms(200);
	}
}

/* ---- one table across front ends ---- */

START_TEST(locked_wait_and_handoff_across_front_ends)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	uint64_t		 ta, tb;
	json_t			*st;

	ta = kt_lock(ca, "LOCK k");
	kt_send(cb, "TRYLOCK k");
	kt_expect_err(cb, "LOCKED");
	kt_send(cb, "LOCK k timeout=10000");
	json_decref(kt_wait_queue(ca, "k", 1, 1));
	kt_req(ca, "OK 1", "UNLOCK k");
	tb = kt_expect_token(cb);
	ck_assert_msg(tb > ta, "token %" PRIu64 " after %" PRIu64, tb, ta);
	/* the holder on B is seen from A */
	json_decref(kt_wait_queue(ca, "k", 1, 0));
	kt_send(ca, "LOCK k timeout=300");
	kt_expect_err(ca, "TIMEOUT");
	st = kt_stats(ca);
	ck_assert_str_eq(json_string_value(json_object_get(st, "backend")),
	    "etcd");
	json_decref(st);
}
END_TEST

START_TEST(fifo_is_one_order_for_the_cluster)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*h = kt_connect_to(a, KT_TCP);
	struct kt_conn		*w[4];
	uint64_t		 last;

	last = kt_lock(h, "LOCK f");
	for (int i = 0; i < 4; i++) {
		w[i] = kt_connect_to(i % 2 == 0 ? b : a, KT_TCP);
		kt_send(w[i], "LOCK f timeout=20000");
		json_decref(kt_wait_queue(h, "f", 1, (size_t)i + 1));
	}
	kt_req(h, "OK 1", "UNLOCK f");
	for (int i = 0; i < 4; i++) {
		uint64_t t = kt_expect_token(w[i]);

		ck_assert_msg(t > last, "waiter %d: token %" PRIu64 " after %"
		    PRIu64, i, t, last);
		last = t;
		for (int j = i + 1; j < 4; j++)
			kt_expect_silence(w[j], 0);
		kt_req(w[i], "OK 1", "UNLOCK f");
	}
}
END_TEST

START_TEST(multikey_held_conflict_busy_deadlock_across_front_ends)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	json_t			*info;

	kt_lock(cb, "LOCK y");
	/* atomic: x is not taken while y waits */
	kt_send(ca, "LOCK x y timeout=400");
	kt_expect_err(ca, "TIMEOUT");
	info = kt_info(cb, "x");
	ck_assert_int_eq(kt_jint(info, "holders_total"), 0);
	json_decref(info);
	kt_send(cb, "LOCK y");
	kt_expect_err(cb, "HELD");
	kt_lock(ca, "LOCK s limit=2");
	kt_send(cb, "LOCK s limit=3");
	kt_expect_err(cb, "CONFLICT");
	kt_send(ca, "LOCK y max_waiters=0");
	kt_expect_err(ca, "BUSY");
	/* A holds x and waits for y (B's); B asking for x closes a cycle */
	kt_lock(ca, "LOCK x");
	kt_send(ca, "LOCK y timeout=10000");
	json_decref(kt_wait_queue(cb, "y", 1, 1));
	kt_send(cb, "LOCK x timeout=10000");
	kt_expect_err(cb, "DEADLOCK");
	kt_req(cb, "OK 1", "UNLOCK y");
	kt_expect_token(ca);
}
END_TEST

/* keylockd-protocol(7), CHANNELS: a channel is an owner of the replicated
 * table as a connection is. */
START_TEST(channels_are_owners_of_the_cluster_table)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	json_t			*info;
	uint64_t		 t1, t2;

	kt_send(ca, "@1 LOCK c:k");
	kt_expect_prefix(ca, "@1 OK ");
	t1 = strtoull(ca->line + 6, NULL, 10);
	kt_send(ca, "@1 LOCK c:k");
	kt_expect_prefix(ca, "@1 ERR HELD ");
	/* another channel of the same connection waits, as another
	 * connection would */
	kt_send(ca, "@2 LOCK c:k timeout=20000");
	info = kt_wait_queue(cb, "c:k", 1, 1);
	json_decref(info);
	info = kt_wait_queue(ca, "c:k", 1, 1);
	ck_assert_int_eq(kt_jint(json_array_get(json_object_get(info,
	    "holders"), 0), "channel"), 1);
	ck_assert_int_eq(kt_jint(json_array_get(json_object_get(info,
	    "waiters"), 0), "channel"), 2);
	json_decref(info);
	kt_send(cb, "TRYLOCK c:k");
	kt_expect_err(cb, "LOCKED");
	kt_send(ca, "@1 UNLOCK c:k");
	kt_recv(ca);
	if (kt_line_is(ca, "@1 OK 1")) {
		kt_expect_prefix(ca, "@2 OK ");
	} else {
		ck_assert_msg(kt_line_has_prefix(ca, "@2 OK "), "%s",
		    ca->line);
		kt_expect_line(ca, "@1 OK 1");
		kt_send(ca, "@2 PING");
		kt_expect_line(ca, "@2 OK PONG");
		kt_send(ca, "@2 INFO c:k");
		kt_expect_prefix(ca, "@2 OK ");
		kt_send(ca, "@2 UNLOCK c:k");
		kt_expect_line(ca, "@2 OK 1");
		goto cycle;
	}
	t2 = strtoull(ca->line + 6, NULL, 10);
	ck_assert_msg(t2 > t1, "token %" PRIu64 " after %" PRIu64, t2, t1);
	kt_send(ca, "@2 UNLOCK c:k");
	kt_expect_line(ca, "@2 OK 1");
cycle:
	/* channels are the waiters and holders of the cluster's graph */
	kt_send(ca, "@1 LOCK c:x");
	kt_expect_prefix(ca, "@1 OK ");
	kt_send(ca, "@2 LOCK c:y");
	kt_expect_prefix(ca, "@2 OK ");
	kt_send(ca, "@2 LOCK c:x timeout=20000");
	json_decref(kt_wait_queue(cb, "c:x", 1, 1));
	kt_send(ca, "@1 LOCK c:y timeout=20000");
	kt_expect_prefix(ca, "@1 ERR DEADLOCK ");
	/* closing the connection releases every channel, cluster-wide */
	kt_send(cb, "LOCK c:y timeout=20000");
	json_decref(kt_wait_queue(ca, "c:y", 1, 1));
	kt_conn_close(ca);
	kt_expect_prefix(cb, "OK ");
	json_decref(kt_wait_queue(cb, "c:x", 0, 0));
	kt_req(cb, "OK 1", "UNLOCK c:y");
}
END_TEST

/* ---- CANCEL (keylockd-protocol(7), CANCEL) through etcd ---- */

START_TEST(cancel_withdraws_a_wait_behind_another_front_end)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ia = kt_connect_to(a, KT_TCP);
	struct kt_conn		*hb = kt_connect_to(b, KT_TCP);
	json_t			*info;

	kt_lock(hb, "LOCK k");
	kt_lock(ca, "LOCK mine");
	kt_send(ca, "LOCK k timeout=20000");
	json_decref(kt_wait_queue(ia, "k", 1, 1));
	kt_send(ca, "CANCEL");
	kt_expect_err(ca, "CANCELLED");
	kt_expect_line(ca, "OK 1");
	/* the connection stays, and with it what it holds */
	kt_req(ca, "OK PONG", "PING");
	info = kt_info(hb, "mine");
	ck_assert_int_eq(kt_jint(info, "holders_total"), 1);
	json_decref(info);
	/* no waiter left on either front end */
	json_decref(kt_wait_queue(ia, "k", 1, 0));
	json_decref(kt_wait_queue(hb, "k", 1, 0));
	kt_req(hb, "OK 1", "UNLOCK k");
	kt_expect_silence(ca, 300);
	json_decref(kt_wait_queue(ia, "k", 0, 0));
	json_decref(kt_wait_queue(hb, "k", 0, 0));
	ck_assert_int_eq(kt_stat(ia, "cancels"), 1);
	kt_req(ca, "OK 1", "UNLOCK mine");
	kt_req(ca, "OK 0", "CANCEL");
	kt_wait_stat(ia, "keys", 0);
	kt_wait_stat(hb, "keys", 0);
}
END_TEST

/*
 * The race: B's holder UNLOCKs while A's waiter sends CANCEL, a few
 * hundred times, the CANCEL from 0 to 15 ms after the UNLOCK (or, one
 * round in four, before the LOCK is known to be queued). The replies
 * say which won, consistently: OK token then OK 0 (the grant is held:
 * UNLOCK gives OK 1), or ERR CANCELLED then OK 1 (nothing is held: B
 * takes the key again at once). Both outcomes must show up.
 */
START_TEST(cancel_racing_a_grant_from_another_front_end)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ia = kt_connect_to(a, KT_TCP);
	struct kt_conn		*hb = kt_connect_to(b, KT_TCP);
	int			 rounds = (int)kt_env_int("CANCEL_ROUNDS", 300, 1,
				    1000000);
	int			 granted = 0, cancelled = 0;
	uint64_t		 last = 0, t;

	for (int i = 0; i < rounds; i++) {
		t = kt_lock(hb, "LOCK k timeout=5000");
		ck_assert_msg(t > last, "round %d: token %" PRIu64 " after %"
		    PRIu64, i, t, last);
		last = t;
		kt_send(ca, "LOCK k timeout=20000");
		if (i % 4 != 3)
			json_decref(kt_wait_queue(ia, "k", 1, 1));
		if (i % 2 == 0) {
			kt_send(hb, "UNLOCK k");
			kt_sleep_us((uint64_t)(i % 16) * 1000);
			kt_send(ca, "CANCEL");
		} else {
			kt_send(ca, "CANCEL");
			kt_sleep_us((uint64_t)(i % 16) * 500);
			kt_send(hb, "UNLOCK k");
		}
		kt_expect_line(hb, "OK 1");
		if (kt_conn_readline(ca, kt_ms(10000)) != KT_LINE)
			kt_fail("round %d (%s): no reply to the LOCK", i,
			    i % 4 == 3 ? "not known queued" : i % 2 == 0 ?
			    "UNLOCK first" : "CANCEL first");
		if (kt_line_token(ca, &t)) {
			ck_assert_msg(t > last, "round %d: token %" PRIu64
			    " after %" PRIu64, i, t, last);
			last = t;
			kt_expect_line(ca, "OK 0");
			/* a grant that won is held */
			kt_req(ca, "OK 1", "UNLOCK k");
			granted++;
		} else if (kt_line_is_err(ca, "CANCELLED")) {
			kt_expect_line(ca, "OK 1");
			cancelled++;
		} else {
			kt_fail("round %d: LOCK then CANCEL answered \"%s\"", i,
			    kt_esc(ca->line, ca->linelen));
		}
	}
	fprintf(stderr, "CANCEL racing a grant, %d rounds: %d granted, %d "
	    "cancelled\n", rounds, granted, cancelled);
	if (rounds >= 100) {
		ck_assert_int_gt(granted, 0);
		ck_assert_int_gt(cancelled, 0);
	}
	kt_req(ca, "OK 0", "CANCEL");
	json_decref(kt_wait_queue(ia, "k", 0, 0));
	json_decref(kt_wait_queue(hb, "k", 0, 0));
	kt_wait_stat(ia, "keys", 0);
	kt_wait_stat(hb, "keys", 0);
	/* a CANCEL that lost the race at etcd to a grant (applied after
	 * the withdrawal was sent) is ERR CANCELLED, but the table counts a
	 * grant (keylockd(8), documented differences) */
	ck_assert_int_le(kt_stat(ia, "cancels"), cancelled);
	ck_assert_int_gt(kt_stat(ia, "cancels"), 0);
}
END_TEST

/* ---- one front end's own view (issue 23) ---- */

#define FE_RYW_ROUNDS	300

/*
 * Read your own writes: once a client's UNLOCK (or UNLOCKALL) is
 * answered, STATS and INFO through another connection of the same front
 * end show the key free, and once its LOCK is answered, held. Every round
 * is checked; the failures are counted and reported together.
 */
START_TEST(answered_writes_are_seen_by_stats_and_info_of_the_front_end)
{
	struct kt_daemon	*a = fe_start();
	struct kt_conn		*h = kt_connect_to(a, KT_TCP);
	struct kt_conn		*o = kt_connect_to(a, KT_TCP);
	int			 bad_grant = 0, bad_release = 0;
	char			 first[160] = "";

	for (int i = 0; i < FE_RYW_ROUNDS; i++) {
		json_t	*st, *info;
		bool	 all = i % 2 == 1;

		kt_lock(h, all ? "LOCK ryw:k ryw:l" : "LOCK ryw:k");
		st = kt_stats(o);
		if (kt_jint(st, "held") != (all ? 2 : 1)) {
			if (bad_grant++ == 0)
				snprintf(first, sizeof(first), "round %d: held "
				    "%lld after the grant", i,
				    (long long)kt_jint(st, "held"));
		}
		json_decref(st);
		if (all)
			kt_req(h, "OK 2", "UNLOCKALL");
		else
			kt_req(h, "OK 1", "UNLOCK ryw:k");
		st = kt_stats(o);
		info = kt_info(o, "ryw:k");
		if (kt_jint(st, "keys") != 0 || kt_jint(st, "held") != 0 ||
		    kt_jint(info, "holders_total") != 0) {
			if (bad_release++ == 0 && first[0] == '\0')
				snprintf(first, sizeof(first), "round %d: keys "
				    "%lld held %lld holders_total %lld after "
				    "the release", i,
				    (long long)kt_jint(st, "keys"),
				    (long long)kt_jint(st, "held"),
				    (long long)kt_jint(info, "holders_total"));
		}
		json_decref(st);
		json_decref(info);
	}
	fprintf(stderr, "read your writes: %d rounds, %d grants and %d "
	    "releases not seen at once\n", FE_RYW_ROUNDS, bad_grant,
	    bad_release);
	ck_assert_msg(bad_grant == 0 && bad_release == 0, "%d of %d grants "
	    "and %d of %d releases not seen at once; first: %s", bad_grant,
	    FE_RYW_ROUNDS, bad_release, FE_RYW_ROUNDS, first);
}
END_TEST

/*
 * An UNLOCK is answered once its deletes are queued for the next commit
 * (keylockd(8), BACKEND ETCD): the same connection's next UNLOCK of the
 * key is NOTHELD and its next LOCK of it is granted, not refused as a
 * relock; UNLOCKALL, QUIT and reads right after them see the keys free;
 * a waiter on another front end is granted once the delete commits.
 * Each round is pipelined in one write, so that nothing waits between
 * its requests.
 */
START_TEST(an_unlock_answered_before_its_commit_keeps_every_rule)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*c = kt_connect_to(a, KT_TCP);
	struct kt_conn		*o = kt_connect_to(a, KT_TCP);
	struct kt_conn		*w = kt_connect_to(b, KT_TCP);
	const char		 round[] = "LOCK uq:k\nUNLOCK uq:k\n"
				    "UNLOCK uq:k\nLOCK uq:k uq:l\n"
				    "UNLOCK uq:l\nUNLOCK uq:l\nUNLOCKALL\n"
				    "STATS\nUNLOCKALL\n";
	json_t			*st;
	uint64_t		 t1, t2;

	for (int i = 0; i < 50; i++) {
		kt_send_raw(c, round, sizeof(round) - 1);
		kt_expect_token(c);
		kt_expect_line(c, "OK 1");
		kt_expect_err(c, "NOTHELD");
		kt_expect_token(c);	/* the relock */
		kt_expect_line(c, "OK 1");
		kt_expect_err(c, "NOTHELD");
		kt_expect_line(c, "OK 1");	/* uq:k alone is left */
		st = kt_expect_json(c);
		ck_assert_int_eq(kt_jint(st, "keys"), 0);
		ck_assert_int_eq(kt_jint(st, "held"), 0);
		json_decref(st);
		kt_expect_line(c, "OK 0");
	}
	/* and through another connection, and INFO */
	kt_lock(c, "LOCK uq:a uq:b");
	kt_req(c, "OK 2", "UNLOCKALL");
	st = kt_stats(o);
	ck_assert_int_eq(kt_jint(st, "keys"), 0);
	json_decref(st);
	st = kt_info(o, "uq:a");
	ck_assert_int_eq(kt_jint(st, "holders_total"), 0);
	json_decref(st);
	/* a waiter on b is granted by the delete, after the holder's OK */
	t1 = kt_lock(c, "LOCK uq:h");
	kt_send(w, "LOCK uq:h timeout=20000");
	json_decref(kt_wait_queue(o, "uq:h", 1, 1));
	kt_req(c, "OK 1", "UNLOCK uq:h");
	t2 = kt_expect_token(w);
	ck_assert_uint_gt(t2, t1);
	kt_req(w, "OK 1", "UNLOCK uq:h");
	/* QUIT's OK comes once its releases are applied here */
	kt_lock(c, "LOCK uq:q");
	kt_send(c, "QUIT");
	kt_expect_line(c, "OK");
	st = kt_stats(o);
	ck_assert_int_eq(kt_jint(st, "keys"), 0);
	json_decref(st);
}
END_TEST

/*
 * STATS counts a ttl expiry in expired and a connection's end in
 * disconnect_releases on the owner's front end, as backend local does;
 * another front end learns only that the entries were deleted, and
 * counts plain releases.
 */
START_TEST(expiries_and_disconnects_are_counted_as_in_backend_local)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*c = kt_connect_to(a, KT_TCP);
	struct kt_conn		*o = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	json_t			*st;

	kt_lock(c, "LOCK cnt:u");
	kt_req(c, "OK 1", "UNLOCK cnt:u");
	kt_lock(c, "LOCK cnt:t ttl=100");
	kt_wait_stat(o, "expired", 1);
	kt_lock(c, "LOCK cnt:d1 cnt:d2");
	kt_lock(c, "LOCK cnt:d3 ttl=60000");
	kt_conn_close(c);
	kt_wait_stat(o, "disconnect_releases", 3);
	st = kt_stats(o);
	ck_assert_int_eq(kt_jint(st, "releases"), 1);
	ck_assert_int_eq(kt_jint(st, "expired"), 1);
	ck_assert_int_eq(kt_jint(st, "disconnect_releases"), 3);
	ck_assert_int_eq(kt_jint(st, "keys"), 0);
	json_decref(st);
	kt_wait_stat(ob, "releases", 5);
	st = kt_stats(ob);
	ck_assert_int_eq(kt_jint(st, "expired"), 0);
	ck_assert_int_eq(kt_jint(st, "disconnect_releases"), 0);
	ck_assert_int_eq(kt_jint(st, "keys"), 0);
	json_decref(st);
}
END_TEST

/*
 * printf 'LOCK k\nUNLOCK k\n' | nc -N: a connection whose input ends
 * while its requests wait for their commits gets every reply, as through
 * backend local; a LOCK that then waits behind another client is
 * withdrawn by the close, as backend local withdraws it.
 */
START_TEST(a_half_closed_connection_gets_its_replies)
{
	struct kt_daemon	*a = fe_start();
	struct kt_conn		*o = kt_connect_to(a, KT_TCP);
	const char		 script[] = "LOCK hc:k\nUNLOCK hc:k\n"
				    "LOCK hc:k hc:l\nPING\n";

	for (int i = 0; i < 20; i++) {
		struct kt_conn *c = kt_connect_to(a, KT_TCP);

		kt_send_raw(c, script, sizeof(script) - 1);
		ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
		kt_expect_token(c);
		kt_expect_line(c, "OK 1");
		kt_expect_token(c);
		kt_expect_line(c, "OK PONG");
		kt_expect_eof(c, kt_ms(5000));
		kt_conn_close(c);
		/* and the connection's end released what it held */
		kt_wait_stat(o, "keys", 0);
	}
	/* a LOCK queued behind another client is withdrawn at the close */
	kt_lock(o, "LOCK hc:k");
	{
		struct kt_conn	*c = kt_connect_to(a, KT_TCP);
		const char	 wait[] = "LOCK hc:k\n";
		json_t		*info;

		kt_send_raw(c, wait, sizeof(wait) - 1);
		ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
		kt_expect_eof(c, kt_ms(5000));
		kt_conn_close(c);
		info = kt_wait_queue(o, "hc:k", 1, 0);
		json_decref(info);
	}
	kt_req(o, "OK 1", "UNLOCK hc:k");
}
END_TEST

/*
 * STATS names the front end that answered, as its entries in etcd name
 * it (its lease, 16 hex digits), and shows the cluster's table: keys
 * held through another front end count.
 */
START_TEST(stats_names_its_front_end_and_counts_the_cluster)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	struct kt_conn		*ia = kt_connect_to(a, KT_TCP);
	json_t			*sa, *sb, *sa2, *info, *h, *w;
	const char		*ida, *idb, *text;

	kt_req(cb, "OK", "NAME beta-host");
	kt_lock(cb, "LOCK fe:k fe:l");
	sa = kt_stats(ca);
	sb = kt_stats(cb);
	ida = json_string_value(json_object_get(sa, "frontend"));
	idb = json_string_value(json_object_get(sb, "frontend"));
	ck_assert_msg(ida != NULL && idb != NULL, "no \"frontend\" in STATS");
	ck_assert_uint_eq(strlen(ida), 16);
	ck_assert_uint_eq(strspn(ida, "0123456789abcdef"), 16);
	ck_assert_str_ne(ida, idb);
	ck_assert_int_eq(kt_jint(sa, "keys"), 2);
	ck_assert_int_eq(kt_jint(sa, "held"), 2);
	sa2 = kt_stats(ca);
	ck_assert_str_eq(json_string_value(json_object_get(sa2, "frontend")),
	    ida);
	/* INFO names every front end's holders and waiters, through either
	 * front end: client, NAME, front end (issue 23, "One view") */
	kt_req(ca, "OK", "NAME alpha");
	kt_send(ca, "LOCK fe:k timeout=20000");
	json_decref(kt_wait_queue(ia, "fe:k", 1, 1));
	for (int i = 0; i < 2; i++) {
		info = kt_wait_queue(i == 0 ? ia : cb, "fe:k", 1, 1);
		h = json_array_get(json_object_get(info, "holders"), 0);
		w = json_array_get(json_object_get(info, "waiters"), 0);
		ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
		    "beta-host");
		ck_assert_str_eq(json_string_value(json_object_get(h,
		    "frontend")), idb);
		ck_assert_str_eq(json_string_value(json_object_get(w, "name")),
		    "alpha");
		ck_assert_str_eq(json_string_value(json_object_get(w,
		    "frontend")), ida);
		json_decref(info);
	}
	/* and so do the texts of a refusal: who holds it, where */
	text = kt_req_err(ia, "LOCKED", "TRYLOCK fe:l");
	ck_assert_msg(strstr(text, "(beta-host) of front end ") != NULL &&
	    strstr(text, idb) != NULL, "got \"%s\"", text);
	kt_req(cb, "OK 2", "UNLOCKALL");
	kt_expect_token(ca);
	kt_req(ca, "OK 1", "UNLOCK fe:k");
	json_decref(sa);
	json_decref(sa2);
	json_decref(sb);
}
END_TEST

/* ---- failures ---- */

START_TEST(a_disconnect_releases_at_once)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	uint64_t		 t0;

	kt_lock(ca, "LOCK d");
	kt_send(cb, "LOCK d timeout=20000");
	json_decref(kt_wait_queue(ca, "d", 1, 1));
	t0 = kt_now_ms();
	kt_conn_close(ca);
	kt_expect_token(cb);
	ck_assert_uint_lt(kt_now_ms() - t0, (uint64_t)kt_ms(1500));
}
END_TEST

/*
 * A client that closes its connection, or half-closes it, while its
 * LOCK's put is on its way to etcd: the close is acted on when the
 * LOCK's verdict comes, not when something else wakes the front end.
 * Default settings (lease 15 s, its keepalive every 5 s; etcd-timeout
 * 5000 ms), so that no timer of the front end's own comes within the
 * bound. Each round, through front end a, one of:
 *
 *  - LOCK, then close(): the grant's connection is gone, the key is
 *    released;
 *  - LOCK, then shutdown(SHUT_WR) (nc -N): the grant is answered, then
 *    the connection closes and releases it;
 *  - LOCK behind a holder on front end b, then close(): the wait is
 *    withdrawn, so the holder's UNLOCK hands the key to nobody;
 *  - "@1 LOCK" (a channel's), then shutdown(SHUT_WR): the channel's
 *    grant is answered before the connection drains (it drained at once,
 *    the reply lost, while the LOCK's put was on its way), then released;
 *
 * and a LOCK of the key through front end b must be granted within
 * CL_BOUND_MS of the close (or of the holder's UNLOCK).
 */
#define CL_ROUNDS	16
#define CL_MODES	4
#define CL_BOUND_MS	1500

START_TEST(a_close_while_a_lock_is_on_its_way_releases_at_once)
{
	struct kt_daemon	*a = et_fe_start(NULL, NULL, NULL);
	struct kt_daemon	*b = et_fe_start(NULL, NULL, NULL);
	struct kt_conn		*h = kt_connect_to(b, KT_TCP);
	static const char *const what[CL_MODES] = { "close", "half-close",
				    "close while waiting", "a channel's, "
				    "half-close" };
	uint64_t		 worst[CL_MODES] = { 0, 0, 0, 0 };

	for (int i = 0; i < CL_ROUNDS; i++) {
		int		 mode = i % CL_MODES;
		struct kt_conn	*c = kt_connect_to(a, KT_TCP);
		uint64_t	 t0, dt;
		char		 key[16], lock[32];

		/* a key a round: nothing of the last round's (its UNLOCK's
		 * delete is answered before it commits) is in the way */
		snprintf(key, sizeof(key), "cl:k%d", i);
		snprintf(lock, sizeof(lock), "%sLOCK %s\n", mode == 3 ? "@1 " :
		    "", key);
		if (mode == 2)
			kt_lock(h, "LOCK %s", key);
		kt_send_raw(c, lock, strlen(lock));
		if (mode == 1 || mode == 3) {
			ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
			t0 = kt_now_ms();
			kt_recv_within(c, kt_ms(CL_BOUND_MS));
			ck_assert_msg(kt_line_has_prefix(c, mode == 3 ?
			    "@1 OK " : "OK "), "round %d: the half-closed "
			    "connection's LOCK of %s: %s", i, key, c->line);
			kt_expect_eof(c, kt_ms(CL_BOUND_MS));
		} else {
			/* the LOCK reaches the front end first: a close at
			 * once is one while its put is on its way */
			kt_sleep_ms(5);
			kt_conn_close(c);
			c = NULL;
			if (mode == 2) {
				/* its wait is in place, or the close came
				 * first: either way it must not hold things
				 * up */
				kt_sleep_ms(50);
				kt_req(h, "OK 1", "UNLOCK %s", key);
			}
			t0 = kt_now_ms();
		}
		kt_send(h, "LOCK %s timeout=30000", key);
		kt_recv_within(h, kt_ms(30000));
		dt = kt_now_ms() - t0;
		ck_assert_msg(kt_line_has_prefix(h, "OK "), "round %d: LOCK "
		    "through the other front end: %s", i, h->line);
		ck_assert_msg(dt < (uint64_t)kt_ms(CL_BOUND_MS), "round %d "
		    "(%s): the other front end's LOCK was granted %" PRIu64
		    " ms after the close", i, what[mode], dt);
		if (dt > worst[mode])
			worst[mode] = dt;
		kt_req(h, "OK 1", "UNLOCK %s", key);
		kt_conn_close(c);
	}
	fprintf(stderr, "a close while its LOCK is on its way: the other front "
	    "end's LOCK granted within %" PRIu64 " ms (%s), %" PRIu64
	    " ms (%s), %" PRIu64 " ms (%s), %" PRIu64 " ms (%s)\n",
	    worst[0], what[0], worst[1], what[1], worst[2], what[2],
	    worst[3], what[3]);
}
END_TEST

START_TEST(a_killed_front_end_is_released_by_its_lease)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	struct kt_conn		*cc = kt_connect_to(b, KT_TCP);
	uint64_t		 t0, dt;
	json_t			*info;

	kt_lock(ca, "LOCK k");
	kt_lock(cc, "LOCK other");
	kt_send(cb, "LOCK k timeout=30000");
	json_decref(kt_wait_queue(cc, "k", 1, 1));
	kt_daemon_signal(a, SIGKILL);
	t0 = kt_now_ms();
	kt_daemon_wait_at(KT_AT, a, false);
	kt_daemon_free(a);
	kt_recv_within(cb, FE_TTL_MS + kt_ms(FE_SLACK_MS));
	ck_assert_msg(kt_line_has_prefix(cb, "OK "), "%s", cb->line);
	dt = kt_now_ms() - t0;
	ck_assert_msg(dt >= FE_TTL_MS / 3, "granted %" PRIu64 " ms after the "
	    "kill: before the lease could expire", dt);
	/* nobody else's locks are touched */
	info = kt_info(cc, "other");
	ck_assert_int_eq(kt_jint(info, "holders_total"), 1);
	json_decref(info);
	kt_req(cc, "OK 1", "UNLOCK other");
}
END_TEST

START_TEST(a_stopped_front_end_drops_its_clients_and_serves_again)
{
	struct kt_daemon	*a = fe_start(), *b = fe_start();
	struct kt_conn		*ca = kt_connect_to(a, KT_TCP);
	struct kt_conn		*cb = kt_connect_to(b, KT_TCP);
	struct kt_conn		*c2;
	json_t			*info;

	kt_lock(ca, "LOCK k");
	kt_send(cb, "LOCK k timeout=30000");
	json_decref(kt_wait_queue(ca, "k", 1, 1));
	kt_daemon_signal(a, SIGSTOP);
	kt_recv_within(cb, FE_TTL_MS + kt_ms(FE_SLACK_MS));
	ck_assert_msg(kt_line_has_prefix(cb, "OK "), "%s", cb->line);
	kt_daemon_signal(a, SIGCONT);
	/* A must not go on vouching for a lock etcd gave away */
	kt_expect_eof(ca, kt_ms(3000));
	c2 = fe_wait_serving(a, "fresh", 10000);
	kt_req(c2, "OK 1", "UNLOCK fresh");
	info = kt_info(c2, "k");
	ck_assert_int_eq(kt_jint(info, "holders_total"), 1);
	json_decref(info);
	kt_send(c2, "TRYLOCK k");
	kt_expect_err(c2, "LOCKED");
}
END_TEST

/* LOCK/UNLOCK cycles on c for ms: every reply OK. */
#define FE_LATE_ROUNDS	8

/*
 * A put given up on a stopped member may still be carried out when the
 * member is back (etcd 3.4 did so in about one round in five here): it
 * must not make the entry anew after its UNLOCK's delete (issue 23).
 * Each round: a front end with a follower f first, f stopped (not the
 * leader: no election), a LOCK (its transaction is given up on f and
 * sent to the next member) and its UNLOCK, then f continued. Another
 * front end's table counts every grant it makes, a lingering put's too:
 * only the rounds' grants.
 */
START_TEST(a_put_given_up_on_a_stopped_member_never_lands_after_its_delete)
{
	struct kt_daemon	*b;
	struct kt_conn		*ob;
	json_int_t		 g0;
	int			 l, f;

	l = et_leader();
	f = l % 3 + 1;
	b = et_fe_start(et_endpoints_from(l), FE_TTL, FE_TIMEOUT);
	ob = kt_connect_to(b, KT_TCP);
	g0 = kt_stat(ob, "grants");
	for (int i = 0; i < FE_LATE_ROUNDS; i++) {
		struct kt_daemon	*a = et_fe_start(et_endpoints_from(f),
					    FE_TTL, FE_TIMEOUT);
		struct kt_conn		*c = kt_connect_to(a, KT_TCP);

		et_member("stop", f);
		kt_send(c, "LOCK late:k");
		kt_recv_within(c, kt_ms(10000));
		if (!kt_line_has_prefix(c, "OK "))
			kt_fail("round %d: LOCK late:k: %s", i, c->line);
		kt_req(c, "OK 1", "UNLOCK late:k");
		kt_wait_stat(ob, "keys", 0);
		et_member("cont", f);
		kt_sleep_ms((uint64_t)kt_ms(1000));	/* the late try's chance */
		kt_conn_close(c);
		kt_daemon_stop(a);
		kt_daemon_free(a);
	}
	kt_wait_stat(ob, "keys", 0);
	ck_assert_int_eq(kt_stat(ob, "grants") - g0, FE_LATE_ROUNDS);
}
END_TEST

static int
cycles_for(struct kt_conn *c, const char *key, int64_t ms, void (*at)(void),
    int64_t at_ms)
{
	uint64_t	t0 = kt_now_ms();
	int		n = 0;
	bool		done = false;

	while ((int64_t)(kt_now_ms() - t0) < ms) {
		if (!done && (int64_t)(kt_now_ms() - t0) >= at_ms) {
			at();
			done = true;
		}
		kt_send(c, "LOCK %s", key);
		kt_recv_within(c, kt_ms(10000));
		ck_assert_msg(kt_line_has_prefix(c, "OK "), "cycle %d: %s", n,
		    c->line);
		kt_req(c, "OK 1", "UNLOCK %s", key);
		n++;
	}
	return n;
}

static int	killed;

static void
kill_follower(void)
{
	killed = et_leader() % 3 + 1;
	et_member("kill", killed);
}

static void
kill_leader(void)
{
	killed = et_leader();
	et_member("kill", killed);
}

START_TEST(killed_members_cost_latency_not_errors_or_locks)
{
	/* an election takes a second or two, more on a loaded machine: a
	 * longer timeout than the default's */
	struct kt_daemon	*a = et_fe_start(NULL, "30", "8000");
	struct kt_conn		*h = kt_connect_to(a, KT_TCP);
	struct kt_conn		*c = kt_connect_to(a, KT_TCP);
	json_t			*info;
	int			 n;

	kt_lock(h, "LOCK held");
	n = cycles_for(c, "m", 3000, kill_follower, 500);
	fprintf(stderr, "a follower (m%d) killed: %d cycles, no error\n",
	    killed, n);
	et_member("restart", killed);
	ck_assert_int_eq(ec_wait_healthy(&et_ec, 30), 0);
	n = cycles_for(c, "m", 4000, kill_leader, 500);
	fprintf(stderr, "the leader (m%d) killed: %d cycles, no error\n",
	    killed, n);
	info = kt_info(c, "held");
	ck_assert_int_eq(kt_jint(info, "holders_total"), 1);
	json_decref(info);
	kt_req(h, "OK 1", "UNLOCK held");
}
END_TEST

START_TEST(a_lost_majority_fails_writes_in_time_and_drops_holders)
{
	struct kt_daemon	*a = fe_start();
	struct kt_conn		*h = kt_connect_to(a, KT_TCP);
	struct kt_conn		*c = kt_connect_to(a, KT_TCP);
	struct kt_conn		*c2;
	uint64_t		 t0;

	kt_lock(h, "LOCK held");
	et_member("stop", 2);
	et_member("stop", 3);
	t0 = kt_now_ms();
	kt_send(c, "LOCK z");
	kt_expect_err(c, "BACKEND");
	ck_assert_uint_lt(kt_now_ms() - t0, (uint64_t)kt_ms(900 + 1500));
	/* the holder goes before its lease could expire */
	kt_expect_eof(h, FE_TTL_MS);
	/* and the front end says it is cut off (STATS, /metrics,
	 * /healthz: backend_ready) while it still accepts connections */
	{
		struct kt_conn	*s = kt_connect_to(a, KT_TCP);

		kt_wait_stat(s, "backend_ready", 0);
		kt_conn_close(s);
	}
	et_member("cont", 2);
	et_member("cont", 3);
	c2 = fe_wait_serving(a, "z", 15000);
	kt_wait_stat(c2, "backend_ready", 1);
	kt_req(c2, "OK 1", "UNLOCK z");
}
END_TEST

/* How many lines of d's log have text. */
static int
fe_log_count(const struct kt_daemon *d, const char *text)
{
	FILE	*f = fopen(d->log, "r");
	char	 line[2048];
	int	 n = 0;

	ck_assert_msg(f != NULL, "%s", d->log);
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

/*
 * Read your own writes when an UNLOCK's delete fails (issue 23): the
 * majority is stopped right after a LOCK, the UNLOCK is answered (its
 * delete queued), and a STATS through the same front end waits for it;
 * the delete's transaction fails at etcd-timeout and is tried again,
 * the members come back, and STATS answers only then, with the key
 * free: never with the key the client was told it had released. (A
 * lease long enough that the front end keeps it throughout: its loss
 * would empty the table, and a read with it; etcd-timeout 5000, as by
 * default: the read waits up to 10 s, of which the retried delete has
 * about 5 s after the failure, for the members to elect a leader again
 * on a loaded machine.)
 */
START_TEST(a_read_waits_for_an_unlocks_delete_tried_again)
{
	struct kt_daemon	*a = et_fe_start(NULL, "30", "5000");
	struct kt_conn		*h = kt_connect_to(a, KT_TCP);
	struct kt_conn		*o = kt_connect_to(a, KT_TCP);
	uint64_t		 deadline, failed_ms, answered_ms, t0;
	char			 why[160];
	json_t			*st;

	kt_lock(h, "LOCK ryw:f");
	et_member("stop", 2);
	et_member("stop", 3);
	t0 = kt_now_ms();
	kt_req(h, "OK 1", "UNLOCK ryw:f");
	kt_send(o, "STATS");
	deadline = kt_now_ms() + (uint64_t)kt_ms(15000);
	while (fe_log_count(a, "deletes failed") == 0) {
		if (kt_now_ms() > deadline)
			kt_fail("the UNLOCK's delete never failed");
		kt_sleep_ms(20);
	}
	failed_ms = kt_now_ms() - t0;
	et_member("cont", 2);
	et_member("cont", 3);
	kt_recv_within(o, kt_ms(20000));
	answered_ms = kt_now_ms() - t0;
	st = kt_parse_ok_json(o->line, o->linelen, why, sizeof(why));
	ck_assert_msg(st != NULL, "STATS: %s: %s", why, o->line);
	/* The read waits up to twice etcd-timeout (10 s) from the UNLOCK:
	 * with the key still held it may be answered only once that bound
	 * has passed (the members had not elected a leader again in time,
	 * as once in CI at 10037 ms), never before (the old code answered
	 * at once: 3096 ms, keys 1). */
	if (kt_jint(st, "keys") != 0 || kt_jint(st, "held") != 0) {
		ck_assert_msg(answered_ms >= 10000, "STATS after an answered "
		    "UNLOCK whose delete failed (at %" PRIu64 " ms) showed "
		    "keys %lld held %lld, %" PRIu64 " ms after it, before "
		    "twice etcd-timeout", failed_ms,
		    (long long)kt_jint(st, "keys"),
		    (long long)kt_jint(st, "held"), answered_ms);
		fprintf(stderr, "a read after an UNLOCK whose delete failed at "
		    "%" PRIu64 " ms: answered at %" PRIu64 " ms, the bound, "
		    "the delete not yet applied\n", failed_ms, answered_ms);
		json_decref(st);
		kt_req(h, "OK PONG", "PING");
		return;
	}
	fprintf(stderr, "a read after an UNLOCK whose delete failed at %"
	    PRIu64 " ms: answered at %" PRIu64 " ms, the key free\n",
	    failed_ms, kt_now_ms() - t0);
	json_decref(st);
	kt_req(h, "OK PONG", "PING");
}
END_TEST

struct compact_res {
	bool	done;
	int64_t	rev;
	int	st;
};

static void
compact_cb(void *arg, const struct etcd_result *res)
{
	struct compact_res *r = arg;

	r->done = true;
	r->rev = res->revision;
	r->st = res->status;
}

/* Compacts etcd at its newest revision, through member first; returns
 * the revision. */
static int64_t
etcd_revision_and_compact(int first)
{
	struct event_base	*base = event_base_new();
	struct etcd		*e = etcd_new(base, et_endpoints_from(first),
				    NULL, NULL);
	struct compact_res	 r = { 0 };
	struct etcd_range	 rg = { .key = "x", .keylen = 1,
	    .count_only = true };
	char			 buf[24];
	json_t			*b;

	ck_assert_ptr_nonnull(e);
	etcd_range(e, &rg, ETCD_RETRY, compact_cb, &r);
	while (!r.done)
		event_base_loop(base, EVLOOP_ONCE);
	ck_assert_int_eq(r.st, ETCD_OK);
	snprintf(buf, sizeof(buf), "%" PRId64, r.rev);
	b = json_object();
	json_object_set_new(b, "revision", json_string(buf));
	r.done = false;
	etcd_post(e, "/v3/kv/compaction", b, ETCD_RETRY, compact_cb, &r);
	while (!r.done)
		event_base_loop(base, EVLOOP_ONCE);
	ck_assert_int_eq(r.st, ETCD_OK);
	etcd_free(e);
	event_base_free(base);
	return r.rev;
}

START_TEST(a_cut_and_compacted_watch_rebuilds_without_a_wrong_grant)
{
	struct kt_daemon	*a, *b;
	struct kt_conn		*ca, *cb, *c2;
	json_t			*info;
	enum kt_read		 r;
	int			 f;

	/* A works through a follower, which is stopped; B through the
	 * other follower, so its writes go on (no election) */
	f = et_leader() % 3 + 1;
	a = et_fe_start(et_endpoints_from(f), "4", FE_TIMEOUT);
	b = et_fe_start(et_endpoints_from(f % 3 + 1), "4", FE_TIMEOUT);
	ca = kt_connect_to(a, KT_TCP);
	cb = kt_connect_to(b, KT_TCP);
	kt_lock(cb, "LOCK k");
	kt_send(ca, "LOCK k timeout=30000");
	json_decref(kt_wait_queue(cb, "k", 1, 1));
	et_member("stop", f);
	/* history A's watch will not get: then compacted */
	for (int i = 0; i < 5; i++) {
		kt_lock(cb, "LOCK churn");
		kt_req(cb, "OK 1", "UNLOCK churn");
	}
	etcd_revision_and_compact(f % 3 + 1);
	/* A's waiter is dropped, never granted k while B holds it */
	r = kt_conn_readline(ca, kt_ms(15000));
	ck_assert_msg(r != KT_TIMEOUT, "A's waiter neither dropped nor "
	    "answered");
	ck_assert_msg(r != KT_LINE || !kt_line_has_prefix(ca, "OK "),
	    "A granted k while B holds it: %s", ca->line);
	et_member("cont", f);
	c2 = fe_wait_serving(a, "fresh", 15000);
	info = kt_info(c2, "k");
	ck_assert_int_eq(kt_jint(info, "holders_total"), 1);
	json_decref(info);
	kt_send(c2, "TRYLOCK k");
	kt_expect_err(c2, "LOCKED");
}
END_TEST

static Suite *
frontend_suite(void)
{
	Suite	*s = suite_create("frontend");
	TCase	*tc;

	tc = tcase_create("one_table");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, locked_wait_and_handoff_across_front_ends);
	tcase_add_test(tc, fifo_is_one_order_for_the_cluster);
	tcase_add_test(tc,
	    multikey_held_conflict_busy_deadlock_across_front_ends);
	tcase_add_test(tc, channels_are_owners_of_the_cluster_table);
	suite_add_tcase(s, tc);

	tc = tcase_create("cancel");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, cancel_withdraws_a_wait_behind_another_front_end);
	tcase_add_test(tc, cancel_racing_a_grant_from_another_front_end);
	suite_add_tcase(s, tc);

	tc = tcase_create("own_view");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc,
	    answered_writes_are_seen_by_stats_and_info_of_the_front_end);
	tcase_add_test(tc,
	    an_unlock_answered_before_its_commit_keeps_every_rule);
	tcase_add_test(tc,
	    expiries_and_disconnects_are_counted_as_in_backend_local);
	tcase_add_test(tc, a_half_closed_connection_gets_its_replies);
	tcase_add_test(tc, stats_names_its_front_end_and_counts_the_cluster);
	suite_add_tcase(s, tc);

	tc = tcase_create("failures");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, a_disconnect_releases_at_once);
	tcase_add_test(tc, a_killed_front_end_is_released_by_its_lease);
	tcase_add_test(tc,
	    a_stopped_front_end_drops_its_clients_and_serves_again);
	tcase_add_test(tc, killed_members_cost_latency_not_errors_or_locks);
	tcase_add_test(tc,
	    a_lost_majority_fails_writes_in_time_and_drops_holders);
	tcase_add_test(tc, a_read_waits_for_an_unlocks_delete_tried_again);
	tcase_add_test(tc,
	    a_cut_and_compacted_watch_rebuilds_without_a_wrong_grant);
	suite_add_tcase(s, tc);

	tc = tcase_create("close");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc,
	    a_close_while_a_lock_is_on_its_way_releases_at_once);
	suite_add_tcase(s, tc);

	tc = tcase_create("late_put");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc,
	    a_put_given_up_on_a_stopped_member_never_lands_after_its_delete);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "frontend_test",
	.init = et_init,
	.done = et_done,
	.suites = { frontend_suite, NULL }
};
