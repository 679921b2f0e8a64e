/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Commands and the limits the configuration sets: timeouts, key and
 * lock counts, waiters, ttl, AUTH; and the bounds on what a client may
 * leave unread or send ahead.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>
#include <sys/stat.h>

#include <check.h>
#include <signal.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "check_conn.h"
#include "config.h"
#include "conn.h"
#include "kl.h"
#include "server.h"
#include "stats.h"
#include "clock.h"
#include "util.h"

/* ---- commands and their limits ---- */

/* Runs the loop until k has a line or the deadline passes. */
static void
wait_blocking(struct client *k, int timeout_ms)
{
	uint64_t	deadline = cc_now_ms() + (uint64_t)timeout_ms;

	cc_rx_poll(k);
	while (cc_count_lines(k, 1) < 1 && !k->eof && cc_now_ms() < deadline) {
		struct timeval	tv = { 0, 20 * 1000 };

		event_base_loopexit(server_base(cc_srv), &tv);
		ck_assert_int_ge(event_base_loop(server_base(cc_srv), EVLOOP_ONCE), 0);
		cc_rx_poll(k);
	}
}

START_TEST(default_timeout_applies_to_lock_without_timeout)
{
	struct client	*a, *b;
	uint64_t	 start;

	cc_restart_server("--default-timeout", "40", NULL);
	a = cc_client_new();
	b = cc_client_new();
	cc_send_str(a, "LOCK dt\n");
	cc_take_token(a);
	start = cc_now_ms();
	cc_send_str(b, "LOCK dt\n");
	wait_blocking(b, WAIT_MS);
	EXPECT_PREFIX(b, "ERR TIMEOUT ");
	ck_assert_uint_ge(cc_now_ms() - start, 35);
	/* timeout=0 is a try, whatever the default */
	cc_send_str(b, "LOCK dt timeout=0\n");
	EXPECT_PREFIX(b, "ERR LOCKED ");
}
END_TEST

START_TEST(timeout_over_max_timeout_gets_limit)
{
	struct client	*a;

	cc_restart_server("--max-timeout", "100", NULL);
	a = cc_client_new();
	cc_send_str(a, "LOCK mt timeout=101\nLOCK mt timeout=100\n");
	EXPECT_PREFIX(a, "ERR LIMIT ");
	ck_assert_ptr_nonnull(strstr(cc_line, "100"));
	cc_take_token(a);
}
END_TEST

START_TEST(max_timeout_caps_a_lock_without_timeout)
{
	struct client	*a, *b;

	cc_restart_server("--max-timeout", "40", NULL);
	a = cc_client_new();
	b = cc_client_new();
	cc_send_str(a, "LOCK mc\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK mc\n");
	wait_blocking(b, WAIT_MS);
	EXPECT_PREFIX(b, "ERR TIMEOUT ");
}
END_TEST

START_TEST(keys_at_max_keys_work_and_one_more_gets_limit)
{
	struct client	*a;

	cc_restart_server("--max-keys", "3", NULL);
	a = cc_client_new();
	cc_send_str(a, "LOCK k1 k2 k3\nLOCK k4 k5 k6 k7\nUNLOCK k1 k2 k3 k4\n");
	cc_take_token(a);
	EXPECT_PREFIX(a, "ERR LIMIT ");
	EXPECT_PREFIX(a, "ERR LIMIT ");
}
END_TEST

START_TEST(locks_at_max_locks_work_and_one_more_gets_limit)
{
	struct client	*a;

	cc_restart_server("--max-locks", "2", NULL);
	a = cc_client_new();
	cc_send_str(a, "LOCK l1 l2\nLOCK l3\nUNLOCK l1\nLOCK l3\n");
	cc_take_token(a);
	EXPECT_PREFIX(a, "ERR LIMIT ");
	EXPECT_LINE(a, "OK 1");
	cc_take_token(a);
}
END_TEST

static void
write_conf(const char *path, const char *text)
{
	FILE	*f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

/* Writes text to the config file path and has the server reload it, as
 * SIGHUP does, with argv as its command line. */
static void
reload_with(char **argv, int argc, const char *path, const char *text)
{
	write_conf(path, text);
	/* the reload reads its command line again: one that stays valid */
	cc_cfg.argc = argc;
	cc_cfg.argv = argv;
	ck_assert_int_eq(raise(SIGHUP), 0);
	for (int i = 0; i < 5; i++)
		cc_pump();
}

/*
 * The plain LOCK and UNLOCK take a short path prepared from the settings
 * (max-locks, default-timeout, max-timeout, default-max-waiters): a
 * reload must reach it with the very next request.
 */
START_TEST(a_reload_reaches_the_plain_lock_at_once)
{
	char		 path[PATH_MAX + 32], prog[] = "keylockd",
			 conf[] = "--config", state[] = "--state-dir",
			 unix_[] = "--unix", none[] = "", notcp[] = "--no-tcp";
	char		*argv[] = { prog, conf, path, state, cc_dir, unix_,
			    none, notcp, NULL };
	struct client	*a, *b;

	snprintf(path, sizeof(path), "%s/reload.conf", cc_dir);
	write_conf(path, "max-locks 1\n");
	cc_restart_server("--config", path, NULL);
	a = cc_client_new();
	b = cc_client_new();
	cc_send_str(a, "LOCK r1\nLOCK r2\n");
	cc_take_token(a);
	EXPECT_PREFIX(a, "ERR LIMIT ");
	reload_with(argv, 8, path, "max-locks 2\ndefault-max-waiters 0\n");
	cc_send_str(a, "LOCK r2\nLOCK r3\n");
	cc_take_token(a);
	EXPECT_PREFIX(a, "ERR LIMIT ");
	ck_assert_ptr_nonnull(strstr(cc_line, "than 2 locks"));
	cc_send_str(b, "LOCK r1\n");
	EXPECT_PREFIX(b, "ERR BUSY ");
	reload_with(argv, 8, path, "max-locks 2\ndefault-timeout 0\n");
	cc_send_str(b, "LOCK r1\n");
	EXPECT_PREFIX(b, "ERR LOCKED ");
	cc_send_str(a, "UNLOCK r1\nUNLOCK r2\nUNLOCK r2\n");
	EXPECT_LINE(a, "OK 1");
	EXPECT_LINE(a, "OK 1");
	EXPECT_PREFIX(a, "ERR NOTHELD ");
}
END_TEST

/*
 * Which requests go through the shared checks is worked out once per
 * configuration (commands.c, cmd_apply()): a reload that lowers
 * max-keys, or sets a secret, must reach the very next LOCK.
 */
START_TEST(a_reload_reaches_the_shared_checks_at_once)
{
	char		 path[PATH_MAX + 32], secret[PATH_MAX + 32],
			 text[2 * PATH_MAX], prog[] = "keylockd",
			 conf[] = "--config", state[] = "--state-dir",
			 unix_[] = "--unix", none[] = "", notcp[] = "--no-tcp";
	char		*argv[] = { prog, conf, path, state, cc_dir, unix_,
			    none, notcp, NULL };
	struct client	*a;

	snprintf(path, sizeof(path), "%s/reload.conf", cc_dir);
	snprintf(secret, sizeof(secret), "%s/secret", cc_dir);
	write_conf(secret, "s3cret\n");
	ck_assert_int_eq(chmod(secret, 0600), 0);	/* a private secret */
	write_conf(path, "max-keys 3\n");
	cc_restart_server("--config", path, NULL);
	a = cc_client_new();
	cc_send_str(a, "LOCK s1 s2 s3\n");
	cc_take_token(a);
	reload_with(argv, 8, path, "max-keys 2\n");
	cc_send_str(a, "LOCK s4 s5 s6\nLOCK s4 s5\n");
	EXPECT_PREFIX(a, "ERR LIMIT ");
	ck_assert_ptr_nonnull(strstr(cc_line, "max-keys is 2"));
	cc_take_token(a);
	snprintf(text, sizeof(text), "max-keys 2\nauth-file %s\n", secret);
	reload_with(argv, 8, path, text);
	cc_send_str(a, "LOCK s7\n");
	EXPECT_PREFIX(a, "ERR AUTH ");
}
END_TEST

START_TEST(default_max_waiters_0_refuses_instead_of_queueing)
{
	struct client	*a, *b;
	json_t		*j;

	cc_restart_server("--default-max-waiters", "0", NULL);
	a = cc_client_new();
	b = cc_client_new();
	cc_send_str(a, "LOCK mw\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK mw\n");
	EXPECT_PREFIX(b, "ERR BUSY ");
	ck_assert_ptr_nonnull(strstr(cc_line, "client 1"));
	/* an explicit max_waiters= wins over the default */
	cc_send_str(b, "LOCK mw max_waiters=1\n");
	cc_expect_silence(b);
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "busy"), 1);
	ck_assert_int_eq(cc_json_int(j, "waiting"), 1);
	json_decref(j);
}
END_TEST

START_TEST(ttl_expiry_grants_the_next_waiter)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	uint64_t	 start;

	/* start before the grant: the ttl counts from when the server read
	 * the LOCK, which a slow machine may put well before the reply is
	 * taken */
	start = cc_now_ms();
	cc_send_str(a, "LOCK tt ttl=40\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK tt\n");
	wait_blocking(b, WAIT_MS);
	cc_take_token(b);
	ck_assert_uint_ge(cc_now_ms() - start, 39);
	cc_send_str(a, "UNLOCK tt\n");
	EXPECT_PREFIX(a, "ERR NOTHELD ");
}
END_TEST

START_TEST(refresh_restarts_the_ttl)
{
	struct client	*a = cc_client_new();
	uint64_t	 end;

	/* REFRESH every 10 ms for 2.5 ttls: the lock outlives its first
	 * ttl only if each REFRESH restarted it. The ttl is 300 ms so that a
	 * busy machine may keep this process off its CPU for a while
	 * between two REFRESHes (60 ms was lost once at a load of 19). */
	cc_send_str(a, "LOCK rf ttl=300\n");
	cc_take_token(a);
	for (end = cc_now_ms() + 750; cc_now_ms() < end;) {
		cc_send_str(a, "REFRESH rf ttl=300\n");
		EXPECT_LINE(a, "OK 1");
		cc_pump();
		cc_nap(a, 10);
	}
	cc_send_str(a, "UNLOCK rf\n");
	EXPECT_LINE(a, "OK 1");
}
END_TEST

START_TEST(unlockall_releases_every_hold)
{
	struct client	*a = cc_client_new();
	json_t		*j;

	cc_send_str(a,
	    "LOCK u1 u2\nLOCK u3 mode=shared\nUNLOCKALL\nUNLOCKALL\n");
	cc_take_token(a);
	cc_take_token(a);
	EXPECT_LINE(a, "OK 3");
	EXPECT_LINE(a, "OK 0");
	j = cc_stats_now();
	ck_assert_int_eq(cc_json_int(j, "keys"), 0);
	json_decref(j);
}
END_TEST

START_TEST(info_names_holders_and_waiters_by_client_id)
{
	struct client	*a = cc_client_new(), *b = cc_client_new();
	json_t		*j, *h, *w;

	cc_send_str(a, "NAME holder\nLOCK ik\n");
	EXPECT_LINE(a, "OK");
	cc_take_token(a);
	cc_send_str(b, "LOCK ik\n");
	cc_expect_silence(b);
	cc_send_str(a, "INFO ik\n");
	j = cc_take_json(a);
	h = json_array_get(json_object_get(j, "holders"), 0);
	w = json_array_get(json_object_get(j, "waiters"), 0);
	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(cc_json_int(h, "client"), 1);
	ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
	    "holder");
	ck_assert_int_eq(cc_json_int(w, "client"), 2);
	ck_assert(json_is_null(json_object_get(w, "name")));
	json_decref(j);
}
END_TEST

START_TEST(auth_without_a_configured_secret_is_refused)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "AUTH anything\nPING\nSTATS\n");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_PREFIX(a, "OK {");
}
END_TEST

/* A server with dir/secret holding "s3cret". */
static void
start_with_secret(void)
{
	char	 path[PATH_MAX + 16];
	FILE	*f;

	snprintf(path, sizeof(path), "%s/secret", cc_dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs("s3cret\n", f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0600), 0);	/* a private secret */
	cc_restart_server("--auth-file", path, NULL);
}

START_TEST(secret_configured_every_command_but_auth_ping_quit_needs_auth)
{
	struct client	*a;

	start_with_secret();
	a = cc_client_new();
	cc_send_str(a, "STATS\nLOCK x\nINFO x\nPING\nAUTH wrong\nQUIT\n");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_LINE(a, "OK");
	cc_expect_eof(a);
}
END_TEST

START_TEST(auth_with_the_configured_secret_is_accepted)
{
	struct client	*a;

	start_with_secret();
	a = cc_client_new();
	cc_send_str(a, "AUTH s3cret\nLOCK x\n");
	EXPECT_LINE(a, "OK");
	cc_take_token(a);
}
END_TEST

/* ---- bounds ---- */

START_TEST(client_that_never_reads_is_closed_past_max_output)
{
	struct client	*a, *b;
	size_t		 len;
	char		*stats = cc_repeat("STATS\n", 200, &len);
	uint64_t	 deadline;
	json_t		*j;

	cc_restart_server("--max-output", "4096", NULL);
	a = cc_client_new_buf(4096, 4096, 0);
	b = cc_client_new();
	deadline = cc_now_ms() + WAIT_MS;
	while (server_stats(cc_srv)->output_closes == 0 && cc_now_ms() < deadline) {
		ssize_t	n = send(a->fd, stats, len, MSG_NOSIGNAL);

		ck_assert_msg(n >= 0 || errno == EAGAIN || errno == EPIPE ||
		    errno == ECONNRESET, "send: %s", strerror(errno));
		cc_pump();
		cc_nap(NULL, 1);
	}
	ck_assert_uint_eq(server_stats(cc_srv)->output_closes, 1);
	ck_assert_uint_eq(server_stats(cc_srv)->clients, 1);
	/* others are still served */
	cc_send_str(b, "PING\n");
	EXPECT_LINE(b, "OK PONG");
	/* a sees whole replies, then the end */
	deadline = cc_now_ms() + WAIT_MS;
	while (!a->eof && cc_now_ms() < deadline) {
		cc_pump();
		cc_rx_poll(a);
	}
	ck_assert(a->eof);
	while (cc_unread_lines(a) > 0)
		EXPECT_PREFIX(a, "OK {\"version\":");
	cc_send_str(b, "STATS\n");
	j = cc_take_json(b);
	ck_assert_int_eq(cc_json_int(j, "output_closes"), 1);
	json_decref(j);
}
END_TEST

START_TEST(slow_reader_under_max_output_is_kept)
{
	struct client	*a;
	size_t		 len;
	char		*pings = cc_repeat("PING\n", 400, &len);

	/* 400 replies of 8 bytes: 3200 bytes, under 4096 */
	cc_restart_server("--max-output", "4096", NULL);
	a = cc_client_new_buf(4096, 4096, 0);
	cc_send_bytes(a, pings, len);
	for (int i = 0; i < 20; i++)
		cc_pump();
	ck_assert_uint_eq(server_stats(cc_srv)->output_closes, 0);
	cc_wait_lines(a, 400, WAIT_MS);
	for (int i = 0; i < 400; i++)
		EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(input_behind_a_waiting_lock_is_bounded_and_answered_after_grant)
{
	enum { NPING = 40000 };
	struct client	*a = cc_client_new();
	struct client	*b = cc_client_new_buf(0, 0, 16384);
	size_t		 plen, len, sent;
	char		*pings = cc_repeat("PING\n", NPING, &plen), *all;
	uint64_t	 deadline;

	all = cc_talloc(plen + 16);
	len = (size_t)sprintf(all, "LOCK bk\n");
	memcpy(all + len, pings, plen);
	len += plen;

	cc_send_str(a, "LOCK bk\n");
	cc_take_token(a);
	sent = cc_send_until_blocked(b, all, len);
	/* the server stopped reading: max-line + one read at most */
	ck_assert_msg(sent < len, "the server read all %zu bytes of a waiting "
	    "client", len);
	cc_rx_poll(b);
	ck_assert_uint_eq(b->rlen, 0);
	ck_assert_uint_eq(server_stats(cc_srv)->clients, 2);

	cc_send_str(a, "UNLOCK bk\n");
	EXPECT_LINE(a, "OK 1");
	deadline = cc_now_ms() + 4 * WAIT_MS;
	while (sent < len && cc_now_ms() < deadline) {
		ssize_t	n;

		n = send(b->fd, all + sent, len - sent, MSG_NOSIGNAL);
		if (n > 0)
			sent += (size_t)n;
		cc_pump();
		cc_rx_poll(b);
	}
	ck_assert_uint_eq(sent, len);
	cc_wait_lines(b, 1 + NPING, 4 * WAIT_MS);
	cc_take_token(b);
	for (int i = 0; i < NPING; i++)
		EXPECT_LINE(b, "OK PONG");
}
END_TEST

START_TEST(peer_closing_while_its_input_is_full_withdraws_its_wait)
{
	struct client	*a = cc_client_new();
	struct client	*b = cc_client_new_buf(0, 0, 16384);
	size_t		 len;
	char		*pings = cc_repeat("PING\n", 40000, &len);
	json_t		*j;

	cc_send_str(a, "LOCK pk\n");
	cc_take_token(a);
	cc_send_str(b, "LOCK pk\n");
	ck_assert_uint_lt(cc_send_until_blocked(b, pings, len), len);
	cc_client_close(b);
	for (int i = 0; i < 5; i++)
		cc_pump();
	ck_assert_uint_eq(server_stats(cc_srv)->clients, 1);
	cc_send_str(a, "INFO pk\n");
	j = cc_take_json(a);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "waiters")), 0);
	json_decref(j);
}
END_TEST

void
cc_add_commands(Suite *s)
{
	TCase	*tc;

	tc = cc_tcase(s, "commands", 30);
	tcase_add_test(tc, default_timeout_applies_to_lock_without_timeout);
	tcase_add_test(tc, timeout_over_max_timeout_gets_limit);
	tcase_add_test(tc, max_timeout_caps_a_lock_without_timeout);
	tcase_add_test(tc, keys_at_max_keys_work_and_one_more_gets_limit);
	tcase_add_test(tc, locks_at_max_locks_work_and_one_more_gets_limit);
	tcase_add_test(tc, default_max_waiters_0_refuses_instead_of_queueing);
	tcase_add_test(tc, a_reload_reaches_the_plain_lock_at_once);
	tcase_add_test(tc, a_reload_reaches_the_shared_checks_at_once);
	tcase_add_test(tc, ttl_expiry_grants_the_next_waiter);
	tcase_add_test(tc, refresh_restarts_the_ttl);
	tcase_add_test(tc, unlockall_releases_every_hold);
	tcase_add_test(tc, info_names_holders_and_waiters_by_client_id);
	tcase_add_test(tc, auth_without_a_configured_secret_is_refused);
	tcase_add_test(tc,
	    secret_configured_every_command_but_auth_ping_quit_needs_auth);
	tcase_add_test(tc, auth_with_the_configured_secret_is_accepted);

	tc = cc_tcase(s, "bounds", 60);
	tcase_add_test(tc, client_that_never_reads_is_closed_past_max_output);
	tcase_add_test(tc, slow_reader_under_max_output_is_kept);
	tcase_add_test(tc,
	    input_behind_a_waiting_lock_is_bounded_and_answered_after_grant);
	tcase_add_test(tc,
	    peer_closing_while_its_input_is_full_withdraws_its_wait);
}
