/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock and what comes back: a fake server that is silent, sends
 * garbage, an unknown error code or half a reply, or closes; long replies;
 * the deadlines; and the parsed STATS and INFO, raw requests, QUIT and
 * the status words and texts.
 */
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "keylock.h"
#include "libkeylock_util.h"

/* failures */

START_TEST(silent_server_hits_the_deadline_and_closes)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);
	uint64_t		 t0;

	keylock_set_timeout(kl, 200);
	t0 = kt_now_ms();
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_DEADLINE);
	ck_assert_window(150, 200, 1500, kt_now_ms() - t0);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_CLOSED);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(lock_deadline_is_its_timeout_plus_the_reply_timeout)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);
	const char	*key = "k";
	char		 buf[128];
	ssize_t		 n;
	uint64_t		 t0;

	keylock_set_timeout(kl, 200);
	t0 = kt_now_ms();
	ck_assert_st(kl, keylock_lock(kl, &key, 1, NULL, 300, NULL),
	    KEYLOCK_ERR_DEADLINE);
	ck_assert_window(450, 500, 2000, kt_now_ms() - t0);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	/* the request asked the server for the timeout itself */
	ck_assert_int_gt(n = read(sfd, buf, sizeof(buf) - 1), 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "LOCK k timeout=300\n");
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(options_are_sent_as_the_protocol_spells_them)
{
	struct keylock_lock_opts o = { .flags = KEYLOCK_SHARED |
	    KEYLOCK_MAX_WAITERS, .max_waiters = 0, .ttl_ms = 1500 };
	struct keylock_lock_opts sem = { .limit = 4 };
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);
	const char	*keys[] = { "a", "b" };
	char		 buf[256];
	uint64_t	 t = 0;
	ssize_t		 n;

	ck_assert_int_eq(write(sfd, "OK 7\nOK 8\nOK 2\n", 15), 15);
	ck_assert_st(kl, keylock_lock(kl, keys, 2, &o, KEYLOCK_WAIT_FOREVER,
	    &t), KEYLOCK_OK);
	ck_assert_uint_eq(t, 7);
	ck_assert_st(kl, keylock_trylock(kl, keys, 1, &sem, &t), KEYLOCK_OK);
	ck_assert_uint_eq(t, 8);
	ck_assert_st(kl, keylock_refresh(kl, keys, 2, 900, NULL),
	    KEYLOCK_OK);
	kt_sleep_ms(50);
	ck_assert_int_gt(n = read(sfd, buf, sizeof(buf) - 1), 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "LOCK a b mode=shared max_waiters=0 ttl=1500\n"
	    "TRYLOCK a limit=4\nREFRESH a b ttl=900\n");
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(garbage_reply_is_proto_and_closes)
{
	static const char *const garbage[] = { "HELLO\n", "OK PONG\n",
	    "OK 12x\n", "OK 9223372036854775808\n", "OK\n" };
	static const int	 is_ping[] = { 1, 0, 0, 0, 0 };

	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		struct keylock	*kl = keylock_new();
		int		 lfd, sfd = lk_fake_pair(kl, &lfd);
		const char	*key = "k";

		ck_assert_int_eq(write(sfd, garbage[i], strlen(garbage[i])),
		    (ssize_t)strlen(garbage[i]));
		if (is_ping[i])
			ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_PROTO);
		else
			ck_assert_st(kl, keylock_trylock(kl, &key, 1, NULL,
			    NULL), KEYLOCK_ERR_PROTO);
		ck_assert_int_eq(keylock_is_connected(kl), 0);
		keylock_free(kl);
		close(sfd);
		close(lfd);
	}
}
END_TEST

/* A NUL cuts no reply short of what it says, and a control byte of a
 * hostile server reaches no terminal through keylock_message(): both
 * are PROTO, quoted with \xNN. */
#define R(s)	s, sizeof(s) - 1	/* a reply with its NULs */
START_TEST(nul_and_control_bytes_are_proto_and_quoted)
{
	static const struct {
		const char	*reply;
		size_t		 len;
		const char	*message;
	} cases[] = {
		{ R("OK 1\0 junk\n"), "a reply line with a NUL byte at byte 5, "
		    "after \"OK 1\"" },
		{ R("\0\n"), "a reply line with a NUL byte at byte 1, after "
		    "\"\"" },
		{ R("\x1b[31mHI\n"), "unexpected reply \"\\x1b[31mHI\"" },
		{ R("OK 7\x07\n"), "reply \"OK 7\\x07\" does not hold a "
		    "number" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct keylock	*kl = keylock_new();
		int		 lfd, sfd = lk_fake_pair(kl, &lfd);
		const char	*key = "k";

		ck_assert_int_eq(write(sfd, cases[i].reply, cases[i].len),
		    (ssize_t)cases[i].len);
		ck_assert_st(kl, keylock_trylock(kl, &key, 1, NULL, NULL),
		    KEYLOCK_ERR_PROTO);
		ck_assert_str_eq(keylock_message(kl), cases[i].message);
		ck_assert_int_eq(keylock_is_connected(kl), 0);
		keylock_free(kl);
		close(sfd);
		close(lfd);
	}
}
END_TEST
#undef R

START_TEST(unknown_error_code_keeps_the_connection)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);
	const char	*msg = "ERR NEWCODE from a newer server\r\nOK PONG\n";

	ck_assert_int_eq(write(sfd, msg, strlen(msg)), (ssize_t)strlen(msg));
	ck_assert_st(kl, keylock_request(kl, "FROB", NULL),
	    KEYLOCK_ERR_UNKNOWN);
	ck_assert_str_eq(keylock_message(kl), "NEWCODE from a newer server");
	ck_assert_str_eq(keylock_reply(kl),
	    "ERR NEWCODE from a newer server");
	ck_assert_int_eq(keylock_is_connected(kl), 1);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

/* keylockd-protocol(7), Live upgrade: the old process answers a failed
 * UPGRADE; the connection is its, and stays. */
START_TEST(err_upgrade_is_its_own_status)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);
	const char	*msg = "ERR UPGRADE the new process exited with status "
			    "1 before it was ready\nOK PONG\n";

	ck_assert_int_eq(write(sfd, msg, strlen(msg)), (ssize_t)strlen(msg));
	ck_assert_st(kl, keylock_request(kl, "UPGRADE", NULL),
	    KEYLOCK_ERR_UPGRADE);
	ck_assert_str_eq(keylock_message(kl), "the new process exited with "
	    "status 1 before it was ready");
	ck_assert_str_eq(keylock_status_word(KEYLOCK_ERR_UPGRADE), "UPGRADE");
	ck_assert_int_eq(keylock_is_connected(kl), 1);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_OK);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(server_closing_mid_reply_is_closed)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);

	ck_assert_int_eq(write(sfd, "OK PO", 5), 5);
	close(sfd);
	ck_assert_st(kl, keylock_ping(kl), KEYLOCK_ERR_CLOSED);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
	close(lfd);
}
END_TEST

START_TEST(long_reply_is_read_whole)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);
	const char	*value;
	size_t		 len = 60000;
	char		*big = malloc(len + 5);

	memcpy(big, "OK ", 3);
	memset(big + 3, 'j', len);
	big[len + 3] = '\n';
	ck_assert_int_eq(write(sfd, big, len + 4), (ssize_t)len + 4);
	ck_assert_st(kl, keylock_stats(kl, &value), KEYLOCK_OK);
	ck_assert_uint_eq(strlen(value), len);
	free(big);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

START_TEST(check_reports_the_server_going_away)
{
	struct keylock	*kl = lk_client(NULL);
	const char	*key = "k";
	struct pollfd	 pfd;

	ck_assert_st(kl, keylock_lock(kl, &key, 1, NULL, 0, NULL),
	    KEYLOCK_OK);
	pfd.fd = keylock_fd(kl);
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 100), 0);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_OK);
	kt_daemon_signal(kt_d, SIGKILL);
	kt_daemon_wait_at(KT_AT, kt_d, false);
	ck_assert_int_eq(poll(&pfd, 1, 3000), 1);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_ERR_CLOSED);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
}
END_TEST

START_TEST(check_reports_unasked_bytes)
{
	struct keylock	*kl = keylock_new();
	int		 lfd, sfd = lk_fake_pair(kl, &lfd);

	ck_assert_st(kl, keylock_check(kl), KEYLOCK_OK);
	ck_assert_int_eq(write(sfd, "OK 1\n", 5), 5);
	kt_sleep_ms(50);
	ck_assert_st(kl, keylock_check(kl), KEYLOCK_ERR_PROTO);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
	close(sfd);
	close(lfd);
}
END_TEST

/* json and raw text */

START_TEST(stats_json_has_the_protocol_members)
{
	static const char *const members[] = { "version", "uptime_ms",
	    "clients", "keys", "held", "waiting", "grants", "timeouts",
	    "busy", "deadlocks", "conflicts", "releases", "expired",
	    "disconnect_releases", "wait_ms", "hold_ms", "max_waiters",
	    "hot_keys" };
	struct keylock	*kl = lk_client(NULL);
	const char	*key = "hot", *text;
	json_t		*root;

	ck_assert_st(kl, keylock_lock(kl, &key, 1, NULL, 0, NULL), KEYLOCK_OK);
	ck_assert_st(kl, keylock_stats_json(kl, &root), KEYLOCK_OK);
	for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++)
		ck_assert_msg(json_object_get(root, members[i]) != NULL,
		    "STATS has no %s", members[i]);
	ck_assert_int_eq(json_integer_value(json_object_get(root, "held")),
	    1);
	json_decref(root);
	ck_assert_st(kl, keylock_stats(kl, &text), KEYLOCK_OK);
	ck_assert_msg(text[0] == '{' && strstr(text, "\"keys\":1") != NULL,
	    "raw STATS \"%.80s\"", text);
	ck_assert_msg(strncmp(keylock_reply(kl), "OK {", 4) == 0, "reply");
	keylock_free(kl);
}
END_TEST

START_TEST(info_json_lists_holders_then_waiters_in_order)
{
	struct keylock	*a = lk_client("alpha"), *b = lk_client("beta"),
			*c = lk_client(NULL);
	const char	*key = "k", *text;
	json_t		*root, *h, *w;
	uint64_t	 t = 0;

	ck_assert_st(a, keylock_lock(a, &key, 1, NULL, 0, &t), KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_send(b, &key, 1, NULL, 5000),
	    KEYLOCK_OK);
	ck_assert_st(b, keylock_lock_recv(b, 100, NULL), KEYLOCK_PENDING);
	ck_assert_st(c, keylock_info_json(c, key, &root), KEYLOCK_OK);
	ck_assert_str_eq(json_string_value(json_object_get(root, "key")),
	    "k");
	h = json_array_get(json_object_get(root, "holders"), 0);
	w = json_array_get(json_object_get(root, "waiters"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
	    "alpha");
	ck_assert_uint_eq(json_integer_value(json_object_get(h, "token")), t);
	ck_assert_str_eq(json_string_value(json_object_get(w, "name")),
	    "beta");
	json_decref(root);
	ck_assert_st(c, keylock_info(c, "nobody", &text), KEYLOCK_OK);
	ck_assert_msg(strstr(text, "\"holders\":[]") != NULL, "%s", text);
	keylock_free(a);
	keylock_free(b);
	keylock_free(c);
}
END_TEST

START_TEST(raw_request_and_quit)
{
	struct keylock	*kl = lk_client(NULL);
	const char	*value;

	ck_assert_st(kl, keylock_request(kl, "ping", &value), KEYLOCK_OK);
	ck_assert_str_eq(value, "PONG");
	ck_assert_st(kl, keylock_request(kl, "FROB", &value),
	    KEYLOCK_ERR_SYNTAX);
	ck_assert_st(kl, keylock_quit(kl), KEYLOCK_OK);
	ck_assert_int_eq(keylock_is_connected(kl), 0);
	keylock_free(kl);
}
END_TEST

START_TEST(every_status_has_a_word_and_a_text)
{
	static const enum keylock_status all[] = { KEYLOCK_OK,
	    KEYLOCK_ERR_SYNTAX, KEYLOCK_ERR_BADKEY, KEYLOCK_ERR_TOOLONG,
	    KEYLOCK_ERR_TIMEOUT, KEYLOCK_ERR_LOCKED, KEYLOCK_ERR_BUSY,
	    KEYLOCK_ERR_DEADLOCK, KEYLOCK_ERR_HELD, KEYLOCK_ERR_NOTHELD,
	    KEYLOCK_ERR_CONFLICT, KEYLOCK_ERR_LIMIT, KEYLOCK_ERR_AUTH,
	    KEYLOCK_ERR_SHUTDOWN, KEYLOCK_ERR_CANCELLED, KEYLOCK_ERR_BACKEND,
	    KEYLOCK_ERR_GONE, KEYLOCK_ERR_SESSION, KEYLOCK_ERR_NOPERM,
	    KEYLOCK_ERR_UPGRADE, KEYLOCK_ERR_UNKNOWN, KEYLOCK_ERR_IO,
	    KEYLOCK_ERR_CLOSED, KEYLOCK_ERR_DEADLINE, KEYLOCK_ERR_PROTO,
	    KEYLOCK_ERR_INVAL, KEYLOCK_ERR_NOMEM, KEYLOCK_ERR_TLS,
	    KEYLOCK_PENDING };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		ck_assert_str_ne(keylock_status_word(all[i]), "?");
		ck_assert_str_ne(keylock_strstatus(all[i]), "unknown status");
	}
	ck_assert_str_eq(keylock_status_word(KEYLOCK_ERR_LOCKED), "LOCKED");
	ck_assert_str_eq(keylock_status_word((enum keylock_status)42), "?");
}
END_TEST

void
lk_add_failures(Suite *s)
{
	TCase	*tc;

	tc = lk_tcase(s, "failures");
	tcase_add_test(tc, silent_server_hits_the_deadline_and_closes);
	tcase_add_test(tc, lock_deadline_is_its_timeout_plus_the_reply_timeout);
	tcase_add_test(tc, options_are_sent_as_the_protocol_spells_them);
	tcase_add_test(tc, garbage_reply_is_proto_and_closes);
	tcase_add_test(tc, nul_and_control_bytes_are_proto_and_quoted);
	tcase_add_test(tc, unknown_error_code_keeps_the_connection);
	tcase_add_test(tc, err_upgrade_is_its_own_status);
	tcase_add_test(tc, server_closing_mid_reply_is_closed);
	tcase_add_test(tc, long_reply_is_read_whole);
	tcase_add_test(tc, check_reports_the_server_going_away);
	tcase_add_test(tc, check_reports_unasked_bytes);
}

void
lk_add_replies(Suite *s)
{
	TCase	*tc;

	tc = lk_tcase(s, "replies");
	tcase_add_test(tc, stats_json_has_the_protocol_members);
	tcase_add_test(tc, info_json_lists_holders_then_waiters_in_order);
	tcase_add_test(tc, raw_request_and_quit);
	tcase_add_test(tc, every_status_has_a_word_and_a_text);
}
