/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The budgets of security review M1, M5 and M9, each on both sides of its
 * limit: write-timeout closes a client whose replies stay unread and
 * spares one that reads late; before AUTH a client's unread replies are
 * bounded at 16 KiB; one reply too large for max-output is ERR LIMIT, not
 * a closed connection; CLIENTS lists the first keys of a wait and counts
 * the rest; max-waiters is a ceiling max_waiters= cannot raise; and
 * max-table-bytes refuses LOCK while the table is full, and only then;
 * max-clients-per-address keeps one address from taking every slot;
 * idle-timeout closes a silent connection only if it has nothing at stake;
 * max-output-total closes the largest unread output first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <signal.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "hostile_test.h"
#include "hostile_util.h"
#include "kltest.h"

/* n copies of req written to fd (blocking until the daemon takes them);
 * false if the daemon closed first. */
static bool
hb_send_many(int fd, const char *req, size_t n)
{
	size_t	 len = strlen(req), total = n * len, sent = 0;
	char	*buf = malloc(total);
	bool	 ok = true;

	ck_assert_ptr_nonnull(buf);
	for (size_t i = 0; i < n; i++)
		memcpy(buf + i * len, req, len);
	while (sent < total) {
		ssize_t	r = send(fd, buf + sent, total - sent,
		    MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r > 0) {
			sent += (size_t)r;
		} else if (r == -1 && (errno == EAGAIN ||
		    errno == EWOULDBLOCK)) {
			struct pollfd	pfd = { fd, POLLOUT, 0 };

			if (poll(&pfd, 1, (int)kt_ms(20000)) != 1) {
				ok = false;
				break;
			}
		} else {
			ok = false;	/* closed by the daemon */
			break;
		}
	}
	free(buf);
	return ok;
}

/* Reads fd until its end; returns the lines read. */
static size_t
hb_read_to_end(int fd, int64_t ms)
{
	char	buf[65536];
	size_t	lines = 0;

	for (;;) {
		struct pollfd	pfd = { fd, POLLIN, 0 };
		ssize_t		r;

		ck_assert_msg(poll(&pfd, 1, (int)ms) == 1, "no end of stream");
		if ((r = recv(fd, buf, sizeof(buf), 0)) <= 0)
			return lines;
		for (ssize_t i = 0; i < r; i++)
			lines += buf[i] == '\n';
	}
}

START_TEST(write_timeout_closes_a_client_that_stopped_reading)
{
	struct kt_conn	*m;
	int		 fd;

	/* STATS replies (over 1 KB each) past what the kernel holds, far
	 * under max-output: only the write-timeout can close it. */
	kt_start("--write-timeout", "500", "--max-output", "67108864");
	m = kt_connect();
	fd = hu_socket(kt_d, KT_UNIX, 4096);
	ck_assert(fd != -1);
	hb_send_many(fd, "STATS\n", 8000);
	kt_wait_stat_ms(m, "write_timeouts", 1, 20000);
	kt_wait_stat(m, "clients", 1);
	ck_assert_int_eq(kt_stat(m, "output_closes"), 0);
	hb_read_to_end(fd, kt_ms(5000));
	close(fd);
	kt_req(m, "OK PONG", "PING");
}
END_TEST

START_TEST(write_timeout_spares_a_client_that_reads_late)
{
	struct kt_conn	*m;
	int		 fd;
	size_t		 n;

	kt_start("--write-timeout", "4000", "--max-output", "67108864");
	m = kt_connect();
	fd = hu_socket(kt_d, KT_UNIX, 4096);
	ck_assert(fd != -1);
	ck_assert(hb_send_many(fd, "STATS\n", 2000));
	shutdown(fd, SHUT_WR);
	kt_sleep_ms(1000);	/* the scenario: it reads late, not never */
	n = hb_read_to_end(fd, kt_ms(20000));
	close(fd);
	ck_assert_uint_eq(n, 2000);
	ck_assert_int_eq(kt_stat(m, "write_timeouts"), 0);
}
END_TEST

START_TEST(replies_before_auth_are_bounded_at_16_kib)
{
	const char	*dir = kt_tmpdir();
	char		 path[256];
	struct kt_conn	*m;
	json_int_t	 closes0;
	int		 fd;

	kt_secret_file(dir, "secret", "budget-secret", path, sizeof(path));
	kt_start("--auth-file", path, "--max-output", "67108864",
	    "--write-timeout", "0");
	m = kt_connect();
	kt_req(m, "OK", "AUTH budget-secret");
	closes0 = kt_stat(m, "output_closes");
	/* 29-byte refusals, never read: 16 KiB past the kernel's buffers,
	 * not 64 MiB. */
	fd = hu_socket(kt_d, KT_UNIX, 4096);
	ck_assert(fd != -1);
	hb_send_many(fd, "X\n", 400000);
	kt_wait_stat_ms(m, "output_closes", closes0 + 1, 20000);
	hb_read_to_end(fd, kt_ms(5000));
	close(fd);
	/* after AUTH the bound is max-output: the same flood is not cut
	 * while it is read */
	fd = hu_socket(kt_d, KT_UNIX, 0);
	ck_assert(fd != -1);
	ck_assert(hb_send_many(fd, "AUTH budget-secret\n", 1));
	ck_assert(hb_send_many(fd, "X\n", 2000));
	shutdown(fd, SHUT_WR);
	ck_assert_uint_eq(hb_read_to_end(fd, kt_ms(20000)), 2001);
	close(fd);
	ck_assert_int_eq(kt_stat(m, "output_closes"), closes0 + 1);
}
END_TEST

START_TEST(one_reply_over_max_output_is_limit_not_a_close)
{
	struct kt_conn	*c[80], *m;
	const char	*line;

	kt_start("--max-output", "4096");
	for (int i = 0; i < 80; i++) {
		c[i] = kt_connect();
		kt_lock(c[i], "LOCK big mode=shared");
	}
	m = kt_connect();
	kt_send(m, "INFO big");
	line = kt_expect_err(m, "LIMIT");
	ck_assert_msg(strstr(line, "reply too large") != NULL, "%s", line);
	kt_req(m, "OK PONG", "PING");	/* the connection stays */
	ck_assert_int_eq(kt_stat(m, "output_closes"), 0);
	kt_send(m, "INFO small");
	kt_expect_prefix(m, "OK {");	/* under the bound: as ever */
}
END_TEST

START_TEST(clients_lists_eight_keys_of_a_wait_and_counts_them_all)
{
	struct kt_conn	*a = kt_connect(), *b = kt_connect();
	struct kt_conn	*op = kt_connect_unix();
	char		 keys[20 * 8] = "";
	json_t		*r, *list, *e;
	size_t		 i, found = 0;

	for (i = 0; i < 20; i++)
		snprintf(keys + strlen(keys), sizeof(keys) - strlen(keys),
		    " w%02zu", i);
	kt_lock(a, "LOCK%s", keys);
	kt_send(b, "LOCK%s timeout=20000", keys);
	json_decref(kt_wait_queue(a, "w00", 1, 1));
	kt_send(op, "CLIENTS");
	r = kt_expect_json(op);
	list = json_object_get(r, "clients");
	for (i = 0; i < json_array_size(list); i++) {
		e = json_array_get(list, i);
		if (json_object_get(e, "waited_ms") == NULL)
			continue;
		found++;
		ck_assert_uint_eq(json_array_size(json_object_get(e,
		    "waiting_for")), 8);
		ck_assert_int_eq(kt_jint(e, "waiting_keys"), 20);
	}
	ck_assert_uint_eq(found, 1);
	json_decref(r);
}
END_TEST

START_TEST(max_waiters_is_a_ceiling_no_request_raises)
{
	struct kt_conn	*a, *b, *c;

	kt_start("--max-waiters", "1");
	a = kt_connect();
	b = kt_connect();
	c = kt_connect();
	kt_lock(a, "LOCK mw");
	kt_send(b, "LOCK mw max_waiters=50 timeout=20000");
	json_decref(kt_wait_queue(a, "mw", 1, 1));
	kt_req_err(c, "BUSY", "LOCK mw max_waiters=50");
	kt_req_err(c, "BUSY", "LOCK mw");
	kt_req(a, "OK 1", "UNLOCK mw");
	kt_expect_token(b);
	/* under the ceiling a request's own max_waiters still applies */
	kt_send(c, "LOCK mw max_waiters=1 timeout=20000");
	json_decref(kt_wait_queue(a, "mw", 1, 1));
	kt_req(b, "OK 1", "UNLOCK mw");
	kt_expect_token(c);
}
END_TEST

START_TEST(max_table_bytes_refuses_lock_while_the_table_is_full)
{
	struct kt_conn	*a, *b;
	const char	*line;
	int		 i;

	kt_start("--max-table-bytes", "65536");
	a = kt_connect();
	b = kt_connect();
	for (i = 0; i < 100000; i++) {
		kt_send(a, "LOCK tb:%06d", i);
		kt_recv(a);
		if (!kt_line_has_prefix(a, "OK "))
			break;
	}
	ck_assert_msg(i < 100000 && kt_line_is_err(a, "LIMIT"), "%s",
	    a->line);
	line = a->line;
	ck_assert_msg(strstr(line, "max-table-bytes") != NULL, "%s", line);
	ck_assert(kt_stat(b, "table_bytes") >= 65536);
	kt_req_err(b, "LIMIT", "TRYLOCK other");	/* for everyone */
	/* a key that needs no more memory too: LIMIT, not LOCKED */
	kt_req_err(b, "LIMIT", "TRYLOCK tb:000001");
	kt_req_err(b, "LIMIT", "LOCK tb:000001 timeout=10");
	kt_req(a, "OK 1", "UNLOCK tb:000000");	/* releases still work */
	kt_send(a, "UNLOCKALL");
	kt_expect_prefix(a, "OK ");
	kt_wait_stat(b, "keys", 0);
	kt_lock(b, "LOCK other");		/* and then LOCK again */
}
END_TEST

START_TEST(max_clients_per_address_leaves_slots_for_others)
{
	struct kt_conn	*c[3], *u;
	int		 fd;
	char		 buf[256];
	ssize_t		 n;
	struct pollfd	 pfd;

	kt_start("--max-clients-per-address", "3");
	for (int i = 0; i < 3; i++) {
		c[i] = kt_connect();
		kt_req(c[i], "OK PONG", "PING");
	}
	/* the fourth from 127.0.0.1 is told and closed */
	fd = hu_socket(kt_d, KT_TCP, 0);
	ck_assert(fd != -1 && hu_connected(fd, kt_ms(3000)));
	pfd.fd = fd;
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, (int)kt_ms(3000)), 1);
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	ck_assert(n > 0);
	buf[n] = '\0';
	ck_assert_msg(strncmp(buf, "ERR LIMIT too many connections from this "
	    "address", 47) == 0, "%s", buf);
	close(fd);
	/* the unix socket does not count; one closed frees its slot */
	u = kt_connect_unix();
	ck_assert_int_eq(kt_stat(u, "rejected_connections"), 1);
	kt_conn_close(c[0]);
	kt_wait_stat(u, "clients", 3);
	c[0] = kt_connect();
	kt_req(c[0], "OK PONG", "PING");
}
END_TEST

/* keylockd.conf(5), idle-timeout, both sides: a silent connection with
 * nothing at stake is closed at the limit and not before; one that holds,
 * one that waits, one with a session, one with a channel in use and one
 * that keeps talking stay, however long. */
START_TEST(idle_timeout_closes_only_what_holds_and_waits_for_nothing)
{
	struct kt_conn	*idle, *holder, *waiter, *sess, *chan, *talker;
	uint64_t	 t0, end;
	int64_t		 took;

	kt_start("--idle-timeout", "800");
	idle = kt_connect();
	kt_req(idle, "OK PONG", "PING");
	t0 = kt_now_ms();
	holder = kt_connect();
	kt_lock(holder, "LOCK idle:k");
	waiter = kt_connect();
	kt_send(waiter, "LOCK idle:k");
	sess = kt_connect();
	kt_send(sess, "SESSION");
	kt_expect_prefix(sess, "OK ");
	chan = kt_connect();
	kt_send(chan, "@1 LOCK idle:c");
	kt_expect_prefix(chan, "@1 OK ");
	talker = kt_connect();
	json_decref(kt_wait_queue(talker, "idle:k", 1, 1));
	/* (closed here: silent while the idle one is awaited, it could
	 * reach its own idle-timeout in the same turn) */
	kt_conn_close(talker);
	/* the idle one goes at 800 ms, not before */
	kt_expect_eof(idle, kt_ms(5000));
	took = (int64_t)(kt_now_ms() - t0);
	ck_assert_msg(took >= 700, "closed after %lld ms, idle-timeout is "
	    "800", (long long)took);
	/* three more idle-timeouts: the others stay */
	talker = kt_connect();
	end = kt_now_ms() + 2400;
	while (kt_now_ms() < end) {
		kt_req(talker, "OK PONG", "PING");
		kt_sleep_ms(100);
	}
	ck_assert_int_eq(kt_stat(talker, "idle_timeouts"), 1);
	ck_assert_int_eq(kt_stat(talker, "clients"), 5);
	/* holder lets go: the waiter has it, and both still work */
	kt_req(holder, "OK 1", "UNLOCK idle:k");
	kt_expect_token(waiter);
	kt_req(waiter, "OK PONG", "PING");
	kt_req(sess, "OK PONG", "PING");
	kt_req(chan, "@1 OK 1", "@1 UNLOCK idle:c");
	/* now holding nothing, the old holder and the channel's connection
	 * go too, and so does the talker, silent since */
	kt_expect_eof(holder, kt_ms(5000));
	kt_expect_eof(chan, kt_ms(5000));
	kt_expect_eof(talker, kt_ms(5000));
	talker = kt_connect_unix();
	ck_assert_int_eq(kt_stat(talker, "idle_timeouts"), 4);
	kt_req(waiter, "OK PONG", "PING");	/* it holds idle:k now */
	kt_req(sess, "OK PONG", "PING");
}
END_TEST

/* idle-timeout is off by default, and a reload turns it on (counting
 * from the reload) and off again. */
START_TEST(idle_timeout_is_off_by_default_and_live)
{
	struct kt_conn	*quiet, *m;
	char		 conf[256];
	FILE		*f;

	snprintf(conf, sizeof(conf), "%s/idle.conf", kt_tmpdir());
	ck_assert_ptr_nonnull(f = fopen(conf, "w"));
	ck_assert_int_eq(fclose(f), 0);
	kt_start("--config", conf);
	quiet = kt_connect();
	kt_req(quiet, "OK PONG", "PING");
	m = kt_connect_unix();
	kt_sleep_ms(1500);
	kt_req(quiet, "OK PONG", "PING");	/* default: no limit */
	kt_sleep_ms(1500);
	ck_assert_ptr_nonnull(f = fopen(conf, "w"));
	fputs("idle-timeout 500\n", f);
	ck_assert_int_eq(fclose(f), 0);
	kt_daemon_signal(kt_d, SIGHUP);
	kt_expect_eof(quiet, kt_ms(5000));
	kt_expect_eof(m, kt_ms(5000));	/* silent too */
	m = kt_connect_unix();
	ck_assert_int_eq(kt_stat(m, "idle_timeouts"), 2);
	/* off again, a quiet one stays */
	ck_assert_ptr_nonnull(f = fopen(conf, "w"));
	ck_assert_int_eq(fclose(f), 0);
	kt_daemon_signal(kt_d, SIGHUP);
	kt_sleep_ms(300);
	quiet = kt_connect();
	kt_req(quiet, "OK PONG", "PING");
	kt_sleep_ms(1200);
	kt_req(quiet, "OK PONG", "PING");
	kt_req(m, "OK PONG", "PING");
	ck_assert_int_eq(kt_stat(m, "idle_timeouts"), 2);
}
END_TEST

/* keylockd.conf(5), max-output-total, both sides: two clients that do
 * not read, each under max-output (as large as the total may have it);
 * when their buffers together come to the budget the one with the most
 * is closed, and the other keeps all its replies. */
START_TEST(max_output_total_closes_the_largest_unread_output)
{
	struct kt_conn	*m;
	int		 small, big;

	kt_start("--max-output-total", "4194304", "--max-output", "4194304",
	    "--write-timeout", "0");
	m = kt_connect();
	/* about 260 KB of STATS replies: past the kernel's buffers, under
	 * a quarter of the budget */
	small = hu_socket(kt_d, KT_UNIX, 4096);
	ck_assert(small != -1);
	ck_assert(hb_send_many(small, "STATS\n", 250));
	for (uint64_t end = kt_now_ms() + (uint64_t)kt_ms(5000);
	    kt_stat(m, "requests") < 251; kt_sleep_ms(20))
		ck_assert_msg(kt_now_ms() < end, "250 STATS not handled");
	ck_assert_int_eq(kt_stat(m, "output_budget_closes"), 0);
	/* about 8 MB: its buffer is the largest when the total passes */
	big = hu_socket(kt_d, KT_UNIX, 4096);
	ck_assert(big != -1);
	hb_send_many(big, "STATS\n", 8000);
	kt_wait_stat_ms(m, "output_budget_closes", 1, 20000);
	hb_read_to_end(big, kt_ms(5000));
	close(big);
	shutdown(small, SHUT_WR);
	ck_assert_uint_eq(hb_read_to_end(small, kt_ms(20000)), 250);
	close(small);
	ck_assert_int_eq(kt_stat(m, "output_budget_closes"), 1);
	ck_assert_int_eq(kt_stat(m, "output_closes"), 0);
	kt_req(m, "OK PONG", "PING");
}
END_TEST

void
ht_add_budgets(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "budgets", KT_PRIVATE, 120, kt_setup_none);
	tcase_add_test(tc, write_timeout_closes_a_client_that_stopped_reading);
	tcase_add_test(tc, write_timeout_spares_a_client_that_reads_late);
	tcase_add_test(tc, replies_before_auth_are_bounded_at_16_kib);
	tcase_add_test(tc, one_reply_over_max_output_is_limit_not_a_close);
	tcase_add_test(tc, max_waiters_is_a_ceiling_no_request_raises);
	tcase_add_test(tc, max_table_bytes_refuses_lock_while_the_table_is_full);
	tcase_add_test(tc, max_clients_per_address_leaves_slots_for_others);
	tcase_add_test(tc,
	    idle_timeout_closes_only_what_holds_and_waits_for_nothing);
	tcase_add_test(tc, idle_timeout_is_off_by_default_and_live);
	tcase_add_test(tc, max_output_total_closes_the_largest_unread_output);
	tc = kt_tcase(s, "budgets_default", KT_PRIVATE, 60, NULL);
	tcase_add_test(tc,
	    clients_lists_eight_keys_of_a_wait_and_counts_them_all);
}
