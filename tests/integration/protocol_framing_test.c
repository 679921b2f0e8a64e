/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The wire protocol's transport against the real daemon (keylockd-protocol(7),
 * Transport): CR and empty lines, case, the line limit, pipelining, a
 * waiting request holding back the lines behind it, half-close, one byte
 * at a time, binary garbage, and the unix socket speaking the same
 * protocol as TCP on one lock table. Each test gets its own daemon; none
 * sleeps to synchronise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "protocol_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 11);
}

/* Counts the replies keylockd-protocol(7) promises for buf: one per line that is not
 * empty or blank after dropping one CR. */
static int
count_requests(const char *buf, size_t len)
{
	int	n = 0;
	size_t	start = 0;

	for (size_t i = 0; i < len; i++) {
		size_t	end = i;
		bool	blank = true;

		if (buf[i] != '\n')
			continue;
		if (end > start && buf[end - 1] == '\r')
			end--;
		for (size_t j = start; j < end; j++)
			if (buf[j] != ' ' && buf[j] != '\t')
				blank = false;
		n += !blank;
		start = i + 1;
	}
	return n;
}

/* framing and pipelining */

START_TEST(one_cr_before_lf_is_dropped)
{
	struct kt_conn *c = kt_connect();

	kt_send_raw(c, "PING\r\n", 6);
	kt_expect_line(c, "OK PONG");
	kt_send_raw(c, "LOCK cr:key\r\n", 13);
	kt_expect_token(c);
	kt_send_raw(c, "UNLOCK cr:key\n", 14);
	kt_expect_line(c, "OK 1");
	/* only one CR goes: "PING\r" is no command */
	kt_send_raw(c, "PING\r\r\n", 7);
	kt_expect_err(c, "SYNTAX");
	/* a CR inside a key is a control byte */
	kt_send_raw(c, "LOCK cr:a\rb\n", 12);
	kt_expect_err(c, "BADKEY");
	kt_send_raw(c, "UNLOCKALL\r\n", 11);
	kt_expect_line(c, "OK 0");
}
END_TEST

START_TEST(empty_and_blank_lines_get_no_reply)
{
	struct kt_conn	*c = kt_connect();
	const char	 blank[] = "\n\r\n   \n\t\t\n \t \r\n\n\n";

	kt_send_raw(c, blank, sizeof(blank) - 1);
	kt_expect_silence(c, 150);
	kt_send_raw(c, blank, sizeof(blank) - 1);
	kt_send_raw(c, "PING\n", 5);
	kt_expect_line(c, "OK PONG");
	kt_expect_silence(c, 100);
	/* leading and trailing blanks around a request are fine */
	kt_send_raw(c, " \t PING \t \r\n", 12);
	kt_expect_line(c, "OK PONG");
	kt_send_raw(c, "LOCK\t \tbl:a  \t bl:b \n", 21);
	kt_expect_token(c);
	kt_req(c, "OK 2", "UNLOCKALL");
}
END_TEST

START_TEST(commands_and_options_are_case_insensitive_keys_are_not)
{
	struct kt_conn *c = kt_connect(), *c2 = kt_connect();

	kt_lock(c, "lock ci:a TIMEOUT=1000 Mode=exclusive");
	kt_req(c, "OK 1", "Unlock ci:a");
	kt_lock(c, "trylock ci:b TTL=5000 MAX_WAITERS=3");
	kt_lock(c, "LoCk ci:c LIMIT=2");
	kt_req(c, "OK 2", "unlockall");
	kt_req(c, "OK", "name ci-client");
	kt_send(c, "stats");
	json_decref(kt_expect_json(c));
	kt_send(c, "info ci:a");
	kt_recv(c);
	ck_assert_msg(kt_line_has_prefix(c, "OK {") ||
	    kt_line_has_prefix(c, "ERR "), "info: %s",
	    kt_esc(c->line, c->linelen));

	kt_lock(c, "LOCK ci:Key");
	kt_lock(c2, "TRYLOCK ci:key");
	kt_lock(c2, "TRYLOCK ci:KEY");
	kt_req_err(c2, "LOCKED", "TRYLOCK ci:Key");
	kt_req(c, "OK", "QuIt");
}
END_TEST

START_TEST(toolong_at_the_line_limit)
{
	struct kt_conn	*c = kt_connect();
	char		 line[8192], *huge;
	size_t		 n;

	/* 4096 bytes with the LF: accepted */
	memset(line, ' ', sizeof(line));
	memcpy(line, "PING", 4);
	line[4095] = '\n';
	kt_send_raw(c, line, 4096);
	kt_expect_line(c, "OK PONG");
	/* 4096 with CR and LF: accepted */
	line[4094] = '\r';
	kt_send_raw(c, line, 4096);
	kt_expect_line(c, "OK PONG");
	/* 4097: TOOLONG, and the connection stays usable */
	line[4094] = ' ';
	line[4095] = ' ';
	line[4096] = '\n';
	kt_send_raw(c, line, 4097);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");
	/* 4097 counting the CR */
	line[4095] = '\r';
	kt_send_raw(c, line, 4097);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");

	/* a real request of exactly 4096 bytes: 17 keys */
	n = 0;
	n += (size_t)sprintf(line + n, "LOCK");
	for (int i = 0; i < 16; i++) {
		line[n++] = ' ';
		line[n++] = (char)('a' + i);
		memset(line + n, 'x', 249);
		n += 249;
	}
	line[n++] = ' ';
	line[n++] = 'q';
	memset(line + n, 'x', 73);
	n += 73;
	line[n++] = '\n';
	ck_assert_uint_eq(n, 4096);
	kt_send_raw(c, line, n);
	kt_expect_token(c);
	kt_req(c, "OK 17", "UNLOCKALL");
	/* one byte more: TOOLONG, nothing taken */
	memmove(line + n, line + n - 1, 1);
	line[n - 1] = 'x';
	kt_send_raw(c, line, n + 1);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK 0", "UNLOCKALL");

	/* TOOLONG before SYNTAX: an overlong line of garbage */
	memset(line, 0xff, 5000);
	line[5000] = '\n';
	kt_send_raw(c, line, 5001);
	kt_expect_err(c, "TOOLONG");

	/* 100 kB and the next request in one write: two replies */
	huge = malloc(100 * 1024 + 16);
	ck_assert_ptr_nonnull(huge);
	memset(huge, 'x', 100 * 1024);
	memcpy(huge + 100 * 1024, "\nPING\n", 6);
	kt_send_raw(c, huge, 100 * 1024 + 6);
	kt_expect_err(c, "TOOLONG");
	kt_expect_line(c, "OK PONG");
	kt_expect_silence(c, 100);
	free(huge);

	/* an overlong line arriving in pieces */
	memset(line, 'y', 3000);
	kt_send_raw(c, line, 3000);
	kt_sleep_ms(30);	/* a second segment */
	kt_send_raw(c, line, 3000);
	kt_send_raw(c, "\n", 1);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");

	/* 4095 bytes without LF may still become a valid line */
	memset(line, ' ', 4095);
	memcpy(line, "PING", 4);
	kt_send_raw(c, line, 4095);
	kt_expect_silence(c, 100);
	kt_send_raw(c, "\n", 1);
	kt_expect_line(c, "OK PONG");
	/* 4096 bytes and no LF yet: one TOOLONG in all */
	memset(line, ' ', 4096);
	memcpy(line, "PING", 4);
	kt_send_raw(c, line, 4096);
	kt_sleep_ms(30);
	kt_send_raw(c, "   \n", 4);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");
	kt_expect_silence(c, 100);
}
END_TEST

START_TEST(pipelined_5000_pings_get_5000_replies)
{
	struct kt_conn	*c = kt_connect();
	char		*lines = pu_repeat("PING\n", 5000);

	kt_send_raw(c, lines, 5 * 5000);
	for (int i = 0; i < 5000; i++) {
		kt_recv(c);
		ck_assert_msg(kt_line_is(c, "OK PONG"), "reply %d is \"%s\"",
		    i, kt_esc(c->line, c->linelen));
	}
	kt_expect_silence(c, 100);
	free(lines);
}
END_TEST

START_TEST(pipelined_mixed_requests_are_answered_in_order)
{
	struct kt_conn	*c = kt_connect();
	size_t		 cap = 400 * 80, n = 0;
	char		*buf = malloc(cap);
	uint64_t	 prev = 0, t;

	ck_assert_ptr_nonnull(buf);
	for (int i = 0; i < 400; i++)
		n += (size_t)snprintf(buf + n, cap - n, "LOCK pm:%d\nPING\n"
		    "UNLOCK pm:%d\nUNLOCK pm:%d\nFROB\n", i, i, i);
	kt_send_raw(c, buf, n);
	for (int i = 0; i < 400; i++) {
		t = kt_expect_token(c);
		ck_assert_msg(i == 0 || t > prev, "token order");
		prev = t;
		kt_expect_line(c, "OK PONG");
		kt_expect_line(c, "OK 1");
		kt_expect_err(c, "NOTHELD");
		kt_expect_err(c, "SYNTAX");
	}
	kt_expect_silence(c, 100);
	free(buf);
}
END_TEST

START_TEST(waiting_lock_holds_back_later_lines)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*o = kt_connect();
	const char	 script[] = "LOCK wq:k\nPING\nUNLOCK wq:k\n"
			    "TRYLOCK wq:k\nPING\nLOCK wq:other\n";
	uint64_t	 t1, t2;

	kt_lock(h, "LOCK wq:k");
	kt_send_raw(w, script, sizeof(script) - 1);
	json_decref(kt_wait_queue(o, "wq:k", 1, 1));
	kt_expect_silence(w, 200);
	/* the lines behind the wait are not run yet */
	kt_lock(o, "TRYLOCK wq:other");
	kt_req(o, "OK 1", "UNLOCK wq:other");
	kt_req(h, "OK 1", "UNLOCK wq:k");
	t1 = kt_expect_token(w);
	kt_expect_line(w, "OK PONG");
	kt_expect_line(w, "OK 1");
	t2 = kt_expect_token(w);
	ck_assert(t2 > t1);
	kt_expect_line(w, "OK PONG");
	kt_expect_token(w);
	kt_expect_silence(w, 50);
}
END_TEST

START_TEST(waiting_client_with_a_long_pipeline_gets_every_reply)
{
	struct kt_conn	*h = kt_connect(), *w = kt_connect();
	struct kt_conn	*w2 = kt_connect(), *o = kt_connect();
	char		*pings = pu_repeat("PING\n", 20000); /* 100 kB */

	kt_lock(h, "LOCK lp:k");
	kt_send(w, "LOCK lp:k");
	kt_send_raw(w, pings, 5 * 20000);
	json_decref(kt_wait_queue(o, "lp:k", 1, 1));
	kt_expect_silence(w, 100);
	/* a waiter with a full pipeline that hangs up is withdrawn too */
	kt_send(w2, "LOCK lp:k");
	kt_send_raw(w2, pings, 5 * 20000);
	json_decref(kt_wait_queue(o, "lp:k", 1, 2));
	kt_conn_close(w2);
	json_decref(kt_wait_queue(o, "lp:k", 1, 1));
	kt_req(o, "OK PONG", "PING");

	kt_req(h, "OK 1", "UNLOCK lp:k");
	kt_expect_token(w);
	for (int i = 0; i < 20000; i++) {
		kt_recv(w);
		ck_assert_msg(kt_line_is(w, "OK PONG"), "reply %d after the "
		    "grant is \"%s\"", i, kt_esc(w->line, w->linelen));
	}
	kt_req(w, "OK 1", "UNLOCK lp:k");
	kt_expect_silence(w, 50);
	free(pings);
}
END_TEST

START_TEST(half_closed_connection_gets_its_replies)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	const char	 script[] = "PING\nLOCK hc:k\nSTATS\n";

	/* echo ... | nc -N: the requests are sent, then the write side
	 * is shut; every request still gets its reply */
	kt_send_raw(c, script, sizeof(script) - 1);
	ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
	kt_expect_line(c, "OK PONG");
	kt_expect_token(c);
	json_decref(kt_expect_json(c));
	kt_expect_eof(c, kt_ms(3000));
	/* and the connection's end released its lock */
	kt_lock(o, "LOCK hc:k timeout=%lld", (long long)kt_ms(3000));
}
END_TEST

START_TEST(request_sent_one_byte_at_a_time)
{
	struct kt_conn	*c = kt_connect();
	const char	*lines[] = { "LOCK bb:key timeout=5000\n",
			    "UNLOCK bb:key\n", "PING\r\n" };
	const char	*want[] = { NULL, "OK 1", "OK PONG" };

	for (int l = 0; l < 3; l++) {
		size_t len = strlen(lines[l]);

		for (size_t i = 0; i < len; i++) {
			if (i == len - 1)
				kt_expect_silence(c, 20);
			kt_send_raw(c, lines[l] + i, 1);
			kt_sleep_ms(2);	/* one segment per byte */
		}
		if (want[l] == NULL)
			kt_expect_token(c);
		else
			kt_expect_line(c, want[l]);
	}
}
END_TEST

START_TEST(binary_garbage_gets_err_lines_and_service_goes_on)
{
	struct kt_conn	*c = kt_connect(), *o = kt_connect();
	size_t		 cap = 300 * 200 + 64 * 1024 + 32, n = 0;
	char		*buf = malloc(cap);
	int		 want;

	ck_assert_ptr_nonnull(buf);
	/* lines that cannot start a command: NUL, controls, 8-bit bytes */
	for (int i = 0; i < 300; i++) {
		static const char first[] = { '\0', '\x01', '\x1b', '\x7f',
		    '\x80', '\xc0', '\xff', '!', '{', '=' };
		int len = (int)(rng() % 150);

		buf[n++] = first[rng() % sizeof(first)];
		for (int j = 0; j < len; j++) {
			char ch = (char)(rng() & 0xff);

			buf[n++] = ch == '\n' ? '\0' : ch;
		}
		buf[n++] = '\n';
	}
	want = count_requests(buf, n);
	ck_assert_int_eq(want, 300);
	kt_send_raw(c, buf, n);
	for (int i = 0; i < want; i++) {
		kt_recv(c);
		ck_assert_msg(kt_line_is_err(c, "SYNTAX"), "garbage line %d "
		    "got \"%s\", want ERR SYNTAX", i,
		    kt_esc(c->line, c->linelen));
	}
	kt_req(c, "OK PONG", "PING");

	/* then 64 kB of anything, LFs included, some lines overlong */
	n = 0;
	for (int i = 0; i < 64 * 1024; i++) {
		uint32_t r = rng();

		buf[n++] = r % 61 == 0 ? '\n' : (char)(r >> 8);
		if (i % 16384 == 8000) {
			memset(buf + n, (int)(r & 0x7f) | 0x80, 5000);
			n += 5000;
		}
	}
	buf[n++] = '\n';
	want = count_requests(buf, n);
	kt_send_raw(c, buf, n);
	for (int i = 0; i < want; i++) {
		kt_recv(c);
		ck_assert_msg(kt_line_has_prefix(c, "ERR ") &&
		    (kt_line_is_err(c, "SYNTAX") || kt_line_is_err(c, "BADKEY")
		    || kt_line_is_err(c, "TOOLONG")), "random line %d of %d "
		    "got \"%s\"", i, want, kt_esc(c->line, c->linelen));
	}
	kt_req(c, "OK PONG", "PING");
	kt_expect_silence(c, 50);
	kt_req(o, "OK PONG", "PING");
	/* NUL is no terminator */
	kt_send_raw(c, "PING\0\n", 6);
	kt_expect_err(c, "SYNTAX");
	kt_send_raw(c, "PING\0PING\n", 10);
	kt_expect_err(c, "SYNTAX");
	kt_req(c, "OK 0", "UNLOCKALL");
	free(buf);
}
END_TEST

/* unix socket */

START_TEST(unix_socket_speaks_the_same_protocol)
{
	struct kt_conn	*u = kt_connect_unix();
	char		*lines = pu_repeat("PING\n", 1000);

	kt_req(u, "OK PONG", "PING");
	kt_lock(u, "LOCK ux:a ux:b");
	json_decref(kt_info(u, "ux:a"));
	kt_req(u, "OK 1", "UNLOCK ux:a");
	kt_req(u, "OK 1", "UNLOCKALL");
	kt_send(u, "STATS");
	json_decref(kt_expect_json(u));
	kt_req_err(u, "SYNTAX", "FROB");
	kt_send_raw(u, lines, 5000);
	for (int i = 0; i < 1000; i++)
		kt_expect_line(u, "OK PONG");
	kt_req(u, "OK", "QUIT");
	kt_expect_eof(u, kt_ms(2000));
	free(lines);
}
END_TEST

START_TEST(tcp_and_unix_clients_share_one_table)
{
	struct kt_conn *u = kt_connect_unix(), *t = kt_connect();
	struct kt_conn *o = kt_connect_unix();

	kt_lock(u, "LOCK xs:k");
	kt_req_err(t, "LOCKED", "TRYLOCK xs:k");
	kt_send(t, "LOCK xs:k");
	json_decref(kt_wait_queue(o, "xs:k", 1, 1));
	kt_req(u, "OK 1", "UNLOCK xs:k");
	kt_expect_token(t);
	kt_lock(u, "LOCK xs:y");
	kt_send(t, "LOCK xs:y");
	json_decref(kt_wait_queue(o, "xs:y", 1, 1));
	kt_req_err(u, "DEADLOCK", "LOCK xs:k");
	kt_conn_close(u);
	kt_expect_token(t);
}
END_TEST

static Suite *
protocol_framing_suite(void)
{
	Suite	*s = suite_create("protocol_framing");
	TCase	*tc;

	tc = kt_tcase(s, "framing", KT_ANY, 30, NULL);
	tcase_add_test(tc, one_cr_before_lf_is_dropped);
	tcase_add_test(tc, empty_and_blank_lines_get_no_reply);
	tcase_add_test(tc,
	    commands_and_options_are_case_insensitive_keys_are_not);
	tcase_add_test(tc, toolong_at_the_line_limit);
	tcase_add_test(tc, pipelined_5000_pings_get_5000_replies);
	tcase_add_test(tc, pipelined_mixed_requests_are_answered_in_order);
	tcase_add_test(tc, waiting_lock_holds_back_later_lines);
	tcase_add_test(tc,
	    waiting_client_with_a_long_pipeline_gets_every_reply);
	tcase_add_test(tc, half_closed_connection_gets_its_replies);
	tcase_add_test(tc, request_sent_one_byte_at_a_time);
	tcase_add_test(tc, binary_garbage_gets_err_lines_and_service_goes_on);

	tc = kt_tcase(s, "unix", kt_have_unix() ? KT_ANY : KT_PRIVATE, 30,
	    NULL);
	if (tc != NULL) {
		tcase_add_test(tc, unix_socket_speaks_the_same_protocol);
		tcase_add_test(tc, tcp_and_unix_clients_share_one_table);
	}
	return s;
}

const struct check_program check_program = {
	.name = "protocol_framing_test",
	.init = kt_init,
	.suites = { protocol_framing_suite, NULL }
};
