/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * check_conn, theme: what protocol 1.1 added to a connection's life
 * (keylockd-protocol(7), CANCEL and Operator commands): CANCEL read ahead
 * while a LOCK waits and answered in its turn, CLIENTS and KILL with their
 * authorisation; and the out-of-memory sweep: a whole session with the
 * Nth allocation failing, for every N, closes at most the connection that
 * paid for it and leaves nothing in the table.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>
#include <sys/stat.h>

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "check_conn.h"
#include "conn.h"
#include "server.h"
#include "stats.h"
#include "util.h"

/* ---- CANCEL ---- */

START_TEST(cancel_withdraws_the_waiting_lock_then_lines_between_then_ok_1)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	json_t		*j;

	cc_send_str(a, "LOCK k\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK k\nPING\n");
	cc_expect_silence(b);
	cc_send_str(b, "cancel \r\n");
	EXPECT_PREFIX(b, "ERR CANCELLED ");
	EXPECT_LINE(b, "OK PONG");
	EXPECT_LINE(b, "OK 1");
	/* the connection and its own locks stay */
	cc_send_str(b, "LOCK other\nINFO k\n");
	cc_take_token(b);
	j = cc_take_json(b);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "waiters")), 0);
	json_decref(j);
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "cancels"), 1);
	ck_assert_int_eq(cc_json_int(j, "waiting"), 0);
	json_decref(j);
}
END_TEST

START_TEST(cancel_with_nothing_waiting_is_ok_0)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "CANCEL\nLOCK k\nCANCEL\n");
	EXPECT_LINE(a, "OK 0");
	cc_take_token(a);
	EXPECT_LINE(a, "OK 0");
	cc_send_str(a, "CANCEL now\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
}
END_TEST

START_TEST(grant_before_the_cancel_is_read_keeps_the_lock_and_ok_0)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	uint64_t	 t;

	cc_send_str(a, "LOCK k\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK k\n");
	cc_expect_silence(b);
	cc_send_str(a, "UNLOCK k\n");
	EXPECT_LINE(a, "OK 1");
	t = cc_take_token(b);		/* granted: the CANCEL comes too late */
	cc_send_str(b, "CANCEL\nINFO k\n");
	EXPECT_LINE(b, "OK 0");
	cc_take_line(b);
	ck_assert_msg(strstr(cc_line, "\"holders\":[{") != NULL, "%s",
	    cc_line);
	cc_send_str(b, "UNLOCK k\n");
	EXPECT_LINE(b, "OK 1");
	ck_assert_uint_gt(t, 0);
}
END_TEST

START_TEST(each_cancel_read_ahead_belongs_to_one_waiting_lock)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	json_t		*j;

	cc_send_str(a, "LOCK x y\n");
	cc_take_token(a);
	/* two LOCKs pipelined, each withdrawn by one of the CANCELs */
	cc_send_str(b, "LOCK x\nLOCK y\nCANCEL\nCANCEL\nCANCEL\n");
	EXPECT_PREFIX(b, "ERR CANCELLED ");
	EXPECT_PREFIX(b, "ERR CANCELLED ");
	EXPECT_LINE(b, "OK 1");
	EXPECT_LINE(b, "OK 1");
	EXPECT_LINE(b, "OK 0");
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "cancels"), 2);
	json_decref(j);
}
END_TEST

START_TEST(cancel_behind_an_overlong_line_is_still_read_ahead)
{
	struct client	*a, *b;
	size_t		 len;
	char		*junk;

	cc_restart_server("--max-line", "64", NULL);
	a = cc_client_new();
	b = cc_client_new();
	junk = cc_repeat("x", 200, &len);
	junk[len - 1] = '\n';
	cc_send_str(a, "LOCK k\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK k\n");
	cc_send_bytes(b, junk, len);
	cc_send_str(b, "CANCEL\n\nCANCEL with words\n");
	EXPECT_PREFIX(b, "ERR CANCELLED ");
	EXPECT_PREFIX(b, "ERR TOOLONG ");
	EXPECT_LINE(b, "OK 1");
	EXPECT_PREFIX(b, "ERR SYNTAX ");
}
END_TEST

START_TEST(cancel_of_a_lock_with_a_timeout_stops_its_timer)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();

	cc_send_str(a, "LOCK k\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK k timeout=50\nCANCEL\n");
	EXPECT_PREFIX(b, "ERR CANCELLED ");
	EXPECT_LINE(b, "OK 1");
	cc_nap(b, 120);
	cc_expect_silence(b);		/* no late ERR TIMEOUT */
}
END_TEST

/* The race of the protocol, many times: every LOCK ends as exactly one of
 * "granted, then CANCEL OK 0" or "ERR CANCELLED, then CANCEL OK 1". */
START_TEST(cancel_racing_grants_never_loses_or_doubles_one)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	json_t		*j;
	int		 granted = 0, cancelled = 0;

	for (int i = 0; i < 2000; i++) {
		cc_send_str(a, "LOCK r\n");
		cc_take_token(a);
		/* the release and the CANCEL reach the server in one turn,
		 * in either order */
		if (i % 2 == 0) {
			cc_send_str(b, "LOCK r\n");
			cc_send_str(a, "UNLOCK r\n");
			cc_send_str(b, "CANCEL\n");
		} else {
			cc_send_str(b, "LOCK r\nCANCEL\n");
			cc_send_str(a, "UNLOCK r\n");
		}
		EXPECT_LINE(a, "OK 1");
		cc_take_line(b);
		if (strncmp(cc_line, "OK ", 3) == 0) {
			EXPECT_LINE(b, "OK 0");
			cc_send_str(b, "UNLOCK r\n");
			EXPECT_LINE(b, "OK 1");
			granted++;
		} else {
			ck_assert_msg(strncmp(cc_line, "ERR CANCELLED ", 14) ==
			    0, "reply %s", cc_line);
			EXPECT_LINE(b, "OK 1");
			cancelled++;
		}
	}
	ck_assert_int_eq(granted + cancelled, 2000);
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "keys"), 0);
	ck_assert_int_eq(cc_json_int(j, "cancels"), cancelled);
	json_decref(j);
}
END_TEST

/* ---- CLIENTS and KILL ---- */

START_TEST(clients_lists_every_connection_for_the_unix_socket)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	json_t		*j, *list, *e;

	cc_send_str(a, "NAME alice\nLOCK k\n");
	EXPECT_LINE(a, "OK");
	cc_take_token(a);
	cc_send_str(b, "LOCK k\n");
	cc_expect_silence(b);
	cc_send_str(a, "CLIENTS\n");
	j = cc_take_json(a);
	ck_assert_int_eq(cc_json_int(j, "total"), 2);
	list = json_object_get(j, "clients");
	ck_assert_uint_eq(json_array_size(list), 2);
	e = json_array_get(list, 0);
	ck_assert_str_eq(json_string_value(json_object_get(e, "name")),
	    "alice");
	ck_assert_str_eq(json_string_value(json_object_get(e, "transport")),
	    "unix");
	ck_assert_int_eq(cc_json_int(e, "held"), 1);
	e = json_array_get(list, 1);
	ck_assert(json_is_null(json_object_get(e, "name")));
	ck_assert_int_eq(cc_json_int(e, "held"), 0);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(e,
	    "waiting_for"), 0)), "k");
	json_decref(j);
}
END_TEST

START_TEST(operator_commands_need_unix_or_the_operator_secret)
{
	struct client	*t, *u;
	char		*path = cc_talloc(PATH_MAX), *apath = cc_talloc(PATH_MAX);
	FILE		*f;

	ck_assert_int_lt(snprintf(path, PATH_MAX, "%s/secret", cc_dir),
	    PATH_MAX);
	ck_assert_int_lt(snprintf(apath, PATH_MAX, "%s/admin", cc_dir),
	    PATH_MAX);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs("client-secret\n", f);
	fclose(f);
	ck_assert_ptr_nonnull(f = fopen(apath, "w"));
	fputs("operator-secret\n", f);
	fclose(f);
	ck_assert_int_eq(chmod(path, 0600), 0);	/* private secrets */
	ck_assert_int_eq(chmod(apath, 0600), 0);
	cc_restart_server("--auth-file", path, "--admin-auth-file", apath,
	    NULL);
	cc_transport = CONN_TCP;
	t = cc_client_new();
	cc_send_str(t, "CLIENTS\nAUTH client-secret\nCLIENTS\nKILL 1\n");
	EXPECT_LINE(t, "ERR AUTH authentication required");
	EXPECT_LINE(t, "OK");
	EXPECT_PREFIX(t, "ERR AUTH CLIENTS is an operator command");
	EXPECT_PREFIX(t, "ERR AUTH KILL is an operator command");
	cc_send_str(t, "AUTH operator-secret\nCLIENTS\nLOCK k\n");
	EXPECT_LINE(t, "OK");
	json_decref(cc_take_json(t));
	cc_take_token(t);
	/* the unix socket: still authenticates first, then may */
	cc_transport = CONN_UNIX;
	u = cc_client_new();
	cc_send_str(u, "CLIENTS\nAUTH client-secret\nCLIENTS\n");
	EXPECT_LINE(u, "ERR AUTH authentication required");
	EXPECT_LINE(u, "OK");
	json_decref(cc_take_json(u));
	/* the operator's secret alone admits everything over TCP */
	cc_transport = CONN_TCP;
	t = cc_client_new();
	cc_send_str(t, "AUTH operator-secret\nLOCK j\nKILL 99\n");
	EXPECT_LINE(t, "OK");
	cc_take_token(t);
	EXPECT_LINE(t, "OK 0");
}
END_TEST

START_TEST(kill_of_a_holder_grants_its_waiter_in_the_same_run)
{
	struct client	*op = cc_client_new(), *a = cc_client_new();
	struct client	*b = cc_client_new();
	char		 req[64];
	uint64_t	 t;

	cc_send_str(a, "LOCK k\n");
	t = cc_take_token(a);
	cc_send_str(b, "LOCK k\nPING\n");
	cc_expect_silence(b);
	snprintf(req, sizeof(req), "KILL %" PRIu64 "\n", conn_id(a->c));
	cc_send_str(op, req);
	EXPECT_LINE(op, "OK 1");
	ck_assert_uint_gt(cc_take_token(b), t);	/* granted, same run */
	EXPECT_LINE(b, "OK PONG");
	cc_expect_eof(a);
}
END_TEST

START_TEST(kill_of_a_waiter_withdraws_it_and_of_oneself_answers_first)
{
	struct client	*op = cc_client_new(), *a = cc_client_new();
	struct client	*b = cc_client_new();
	char		 req[64];
	json_t		*j;

	cc_send_str(a, "LOCK k\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK k\n");
	cc_expect_silence(b);
	snprintf(req, sizeof(req), "KILL %" PRIu64 "\nKILL 0\n",
	    conn_id(b->c));
	cc_send_str(op, req);
	EXPECT_LINE(op, "OK 1");
	EXPECT_LINE(op, "OK 0");
	cc_expect_eof(b);
	cc_send_str(a, "INFO k\n");
	j = cc_take_json(a);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "waiters")), 0);
	json_decref(j);
	snprintf(req, sizeof(req), "KILL %" PRIu64 "\nPING\n", conn_id(a->c));
	cc_send_str(a, req);
	EXPECT_LINE(a, "OK 1");
	cc_expect_eof(a);		/* the PING after it is not served */
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "keys"), 0);
	json_decref(j);
}
END_TEST

/* ---- out of memory ---- */

/* A client of the sweep: a socketpair not counted among cc_ clients. */
struct sweep_client {
	int	fd;
	char	rx[65536];
	size_t	rlen;
	bool	eof;
};

static bool
sweep_open(struct sweep_client *k)
{
	int	fds[2];

	memset(k, 0, sizeof(*k));
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0, fds), 0);
	k->fd = fds[1];
	if (conn_new(server_conns(cc_srv), fds[0], "sweep", CONN_UNIX) ==
	    NULL) {
		close(fds[0]);	/* the accept path: the server says so */
		k->eof = true;
		return false;
	}
	return true;
}

static void
sweep_send(struct sweep_client *k, const char *s)
{
	if (!k->eof && send(k->fd, s, strlen(s), MSG_NOSIGNAL) == -1)
		k->eof = true;
}

/* Runs the loop until k has n lines or its connection closed. */
static void
sweep_wait(struct sweep_client *k, size_t n)
{
	uint64_t	deadline = cc_now_ms() + WAIT_MS;
	size_t		lines;

	for (;;) {
		ssize_t	r = 1;	/* nothing read: not an end */

		cc_pump();
		while (!k->eof && (r = recv(k->fd, k->rx + k->rlen,
		    sizeof(k->rx) - 1 - k->rlen, MSG_DONTWAIT)) != 0) {
			if (r < 0)
				break;
			k->rlen += (size_t)r;
		}
		if (r == 0 || (r < 0 && errno != EAGAIN))
			k->eof = true;
		lines = 0;
		for (size_t i = 0; i < k->rlen; i++)
			lines += k->rx[i] == '\n';
		if (k->eof || lines >= n)
			return;
		ck_assert_msg(cc_now_ms() < deadline, "no %zu replies, and "
		    "the connection stays open: \"%.*s\"", n, (int)k->rlen,
		    k->rx);
		cc_nap(NULL, 5);
	}
}

/*
 * connect, NAME, LOCK, wait, grant, REFRESH, UNLOCK, INFO, STATS, CLIENTS,
 * close: allocation n fails. Whatever failed, the other connection is
 * served to the end, and a failure closes, never misreports: every reply
 * a connection gets before its close is the right one.
 */
static void
sweep_session(void)
{
	struct sweep_client	a, b;
	static const char *const a_want[] = { "OK", "OK ", "OK 1", "OK {",
	    "OK {", "OK {", "OK 2" };
	static const char *const b_want[] = { "OK ", "OK 1", "OK 1" };

	sweep_open(&a);
	sweep_open(&b);
	sweep_send(&a, "NAME sweeper\nLOCK k x\nREFRESH k ttl=60000\n");
	sweep_wait(&a, 3);
	sweep_send(&b, "LOCK k timeout=5000\n");
	sweep_send(&a, "INFO k\nSTATS\nCLIENTS\nUNLOCK k x\n");
	sweep_wait(&a, 7);
	sweep_wait(&b, 1);
	sweep_send(&b, "REFRESH k ttl=100000\nUNLOCK k\n");
	sweep_wait(&b, 3);
	for (int w = 0; w < 2; w++) {
		struct sweep_client	*k = w == 0 ? &a : &b;
		const char *const	*want = w == 0 ? a_want : b_want;
		char			*p = k->rx, *lf;

		k->rx[k->rlen] = '\0';
		for (size_t i = 0; (lf = strchr(p, '\n')) != NULL; i++) {
			ck_assert_msg(strncmp(p, want[i], strlen(want[i])) == 0,
			    "reply %zu: \"%.*s\", want \"%s...\"", i,
			    (int)(lf - p), p, want[i]);
			p = lf + 1;
		}
		close(k->fd);
	}
	cc_pump();
}

/* STATS over a sweep client of its own (the cc_ clients are few). */
static json_t *
sweep_stats(void)
{
	struct sweep_client	k;
	json_t			*j;

	ck_assert(sweep_open(&k));
	sweep_send(&k, "STATS\n");
	sweep_wait(&k, 1);
	k.rx[k.rlen] = '\0';
	ck_assert_msg(strncmp(k.rx, "OK {", 4) == 0, "%s", k.rx);
	ck_assert_ptr_nonnull(j = json_loads(k.rx + 3, 0, NULL));
	close(k.fd);
	cc_pump();
	return j;
}

START_TEST(every_failed_allocation_of_a_session_closes_one_connection)
{
	json_t	*j;
	int	 closes = 0;

	for (uint64_t n = 1; n <= 160; n++) {
		kl_alloc_fail_at(n, false);
		sweep_session();
		kl_alloc_fail_at(0, false);
		j = sweep_stats();
		ck_assert_msg(cc_json_int(j, "keys") == 0 &&
		    cc_json_int(j, "waiting") == 0 &&
		    cc_json_int(j, "clients") == 1, "allocation %ju failed: "
		    "keys %jd, waiting %jd, clients %jd left", (uintmax_t)n,
		    (intmax_t)cc_json_int(j, "keys"),
		    (intmax_t)cc_json_int(j, "waiting"),
		    (intmax_t)cc_json_int(j, "clients"));
		closes = (int)cc_json_int(j, "nomem_closes");
		json_decref(j);
	}
	/* the sweep reached the request path, not only the accepts */
	ck_assert_int_ge(closes, 5);
}
END_TEST

/* Every line k got before its end starts as want[i] does. */
static void
sweep_check(struct sweep_client *k, const char *const *want, size_t nwant)
{
	char	*p = k->rx, *lf;

	k->rx[k->rlen] = '\0';
	for (size_t i = 0; (lf = strchr(p, '\n')) != NULL; i++) {
		ck_assert_msg(i < nwant && strncmp(p, want[i],
		    strlen(want[i])) == 0, "reply %zu: \"%.*s\", want \"%s...\"",
		    i, (int)(lf - p), p, i < nwant ? want[i] : "(none)");
		p = lf + 1;
	}
}

/*
 * keylockd-protocol(7), SESSIONS, with allocation n failing: a opens a
 * session and holds a key, b waits for it, a's connection ends (detach),
 * c resumes the session and unlocks, b is granted, c quits. A failure
 * closes one connection and never misreports; a session left detached by
 * a failure expires within its grace, and then nothing is left.
 */
static void
sweep_protocol_session(uint64_t n)
{
	struct sweep_client	a, b, c;
	static const char *const a_want[] = { "OK ", "OK " };
	static const char *const b_want[] = { "OK ", "OK 1" };
	static const char *const c_want[] = { "OK {", "OK 1", "OK" };
	char			 req[128], id[80] = "";

	sweep_open(&a);
	sweep_open(&b);
	snprintf(req, sizeof(req), "SESSION grace=100\nLOCK ps:%ju\n",
	    (uintmax_t)n);
	sweep_send(&a, req);
	sweep_wait(&a, 2);
	a.rx[a.rlen] = '\0';
	sscanf(a.rx, "OK %79[A-Za-z0-9_-]", id);
	sweep_check(&a, a_want, 2);
	snprintf(req, sizeof(req), "LOCK ps:%ju timeout=5000\n", (uintmax_t)n);
	sweep_send(&b, req);
	close(a.fd);
	cc_pump();
	sweep_open(&c);
	if (id[0] == '\0')
		c.eof = true;	/* no session: a's end released all */
	snprintf(req, sizeof(req), "RESUME %s\nUNLOCK ps:%ju\n", id,
	    (uintmax_t)n);
	sweep_send(&c, req);
	sweep_wait(&c, 2);
	sweep_wait(&b, 1);
	snprintf(req, sizeof(req), "UNLOCK ps:%ju\n", (uintmax_t)n);
	sweep_send(&b, req);
	sweep_wait(&b, 2);
	sweep_send(&c, "QUIT\n");
	sweep_wait(&c, 3);
	sweep_check(&b, b_want, 2);
	sweep_check(&c, c_want, 3);
	close(b.fd);
	close(c.fd);
	cc_pump();
}

/*
 * Runs scenario(n) with allocation n failing, for n = 1 to points; after
 * each, waits for any session a failure left detached to expire and
 * asserts that nothing is left: no key, wait, channel or second client.
 * Returns how many connections the failures closed.
 */
static int64_t
sweep_scenario(void (*scenario)(uint64_t), uint64_t points)
{
	json_t		*j;
	uint64_t	 deadline;
	int64_t		 closes0 = -1, closes = 0;

	for (uint64_t n = 1; n <= points; n++) {
		kl_alloc_fail_at(n, false);
		scenario(n);
		kl_alloc_fail_at(0, false);
		deadline = cc_now_ms() + WAIT_MS;
		for (;;) {
			j = sweep_stats();
			if (cc_json_int(j, "sessions") == 0)
				break;
			ck_assert_msg(cc_json_int(j, "sessions") ==
			    cc_json_int(j, "sessions_detached"), "allocation "
			    "%ju failed: a session is attached to nobody",
			    (uintmax_t)n);
			ck_assert_msg(cc_now_ms() < deadline, "allocation %ju "
			    "failed: a detached session outlives its grace",
			    (uintmax_t)n);
			json_decref(j);
			cc_nap(NULL, 20);
			cc_pump();
		}
		ck_assert_msg(cc_json_int(j, "keys") == 0 &&
		    cc_json_int(j, "waiting") == 0 &&
		    cc_json_int(j, "channels") == 0 &&
		    cc_json_int(j, "clients") == 1, "allocation %ju failed: "
		    "keys %jd, waiting %jd, channels %jd, clients %jd left",
		    (uintmax_t)n, (intmax_t)cc_json_int(j, "keys"),
		    (intmax_t)cc_json_int(j, "waiting"),
		    (intmax_t)cc_json_int(j, "channels"),
		    (intmax_t)cc_json_int(j, "clients"));
		if (closes0 < 0)
			closes0 = cc_json_int(j, "nomem_closes");
		closes = cc_json_int(j, "nomem_closes");
		json_decref(j);
	}
	return closes - closes0;
}

START_TEST(every_failed_allocation_around_a_protocol_session_closes_one)
{
	/* the sweep reached SESSION, the detach and RESUME, not only the
	 * accepts */
	ck_assert_int_ge(sweep_scenario(sweep_protocol_session, 120), 5);
}
END_TEST

/* Every line k got before its end is a reply: OK or ERR, on channel 0
 * or after @N. */
static void
sweep_check_replies(struct sweep_client *k)
{
	char	*p = k->rx, *lf;

	k->rx[k->rlen] = '\0';
	for (; (lf = strchr(p, '\n')) != NULL; p = lf + 1) {
		char	*q = p;

		if (*q == '@') {
			q++;
			while (*q >= '0' && *q <= '9')
				q++;
			ck_assert_msg(q > p + 1 && *q == ' ', "\"%.*s\"",
			    (int)(lf - p), p);
			q++;
		}
		ck_assert_msg(strncmp(q, "OK", 2) == 0 ||
		    strncmp(q, "ERR ", 4) == 0, "\"%.*s\"", (int)(lf - p), p);
	}
}

/*
 * keylockd-protocol(7), CHANNELS, with allocation n failing: a opens a
 * session, holds a key on channel 1, waits behind b on channel 2 with a
 * line queued, and ends (detach with both channels); c resumes and
 * releases on both, b gives way, c quits. A failure closes one
 * connection, never misreports, and leaves no channel, key or wait.
 */
static void
sweep_channels(uint64_t n)
{
	struct sweep_client	a, b, c;
	char			req[256], id[80] = "";

	sweep_open(&a);
	sweep_open(&b);
	snprintf(req, sizeof(req), "LOCK pb:%ju\n", (uintmax_t)n);
	sweep_send(&b, req);
	sweep_wait(&b, 1);
	snprintf(req, sizeof(req), "SESSION grace=100\n@1 LOCK pa:%ju\n"
	    "@2 LOCK pb:%ju timeout=5000\n@2 PING\n@3 PING\n",
	    (uintmax_t)n, (uintmax_t)n);
	sweep_send(&a, req);
	sweep_wait(&a, 3);
	a.rx[a.rlen] = '\0';
	sscanf(a.rx, "OK %79[A-Za-z0-9_-]", id);
	sweep_check_replies(&a);
	close(a.fd);
	cc_pump();
	sweep_open(&c);
	if (id[0] == '\0')
		c.eof = true;	/* no session: a's end released all */
	snprintf(req, sizeof(req), "RESUME %s\n@1 UNLOCK pa:%ju\n"
	    "@2 CANCEL\n", id, (uintmax_t)n);
	sweep_send(&c, req);
	sweep_wait(&c, 3);
	snprintf(req, sizeof(req), "UNLOCK pb:%ju\n", (uintmax_t)n);
	sweep_send(&b, req);
	sweep_wait(&b, 2);
	sweep_send(&c, "@4 UNLOCKALL\n@2 UNLOCKALL\nQUIT\n");
	sweep_wait(&c, 7);
	sweep_check_replies(&b);
	sweep_check_replies(&c);
	close(b.fd);
	close(c.fd);
	cc_pump();
}

START_TEST(every_failed_allocation_around_channels_closes_one)
{
	/* the sweep reached the channels, the detach and RESUME */
	ck_assert_int_ge(sweep_scenario(sweep_channels, 140), 5);
}
END_TEST

void
cc_add_cancel(Suite *s)
{
	TCase	*tc;

	tc = cc_tcase(s, "cancel", 30);
	tcase_add_test(tc,
	    cancel_withdraws_the_waiting_lock_then_lines_between_then_ok_1);
	tcase_add_test(tc, cancel_with_nothing_waiting_is_ok_0);
	tcase_add_test(tc,
	    grant_before_the_cancel_is_read_keeps_the_lock_and_ok_0);
	tcase_add_test(tc, each_cancel_read_ahead_belongs_to_one_waiting_lock);
	tcase_add_test(tc, cancel_behind_an_overlong_line_is_still_read_ahead);
	tcase_add_test(tc, cancel_of_a_lock_with_a_timeout_stops_its_timer);
	tcase_add_test(tc, cancel_racing_grants_never_loses_or_doubles_one);
	tc = cc_tcase(s, "operator", 30);
	tcase_add_test(tc, clients_lists_every_connection_for_the_unix_socket);
	tcase_add_test(tc, operator_commands_need_unix_or_the_operator_secret);
	tcase_add_test(tc, kill_of_a_holder_grants_its_waiter_in_the_same_run);
	tcase_add_test(tc,
	    kill_of_a_waiter_withdraws_it_and_of_oneself_answers_first);
	tc = cc_tcase(s, "nomem", 120);
	tcase_add_test(tc,
	    every_failed_allocation_of_a_session_closes_one_connection);
	tcase_add_test(tc,
	    every_failed_allocation_around_a_protocol_session_closes_one);
	tcase_add_test(tc, every_failed_allocation_around_channels_closes_one);
}
