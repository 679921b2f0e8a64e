/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Framing: pipelining, bytes split across writes, CR LF, blank lines,
 * the max-line bound and its TOOLONG, binary garbage and a half-closed
 * client.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>

#include <check.h>
#include <inttypes.h>
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
#include "util.h"

/* ---- framing ---- */

START_TEST(ping_gets_pong)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "PING\n");
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(command_words_are_case_insensitive)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "ping\nPiNg\n");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(pipelined_1000_pings_get_1000_replies_in_order)
{
	struct client	*a = cc_client_new();
	size_t		 len;
	char		*req = cc_repeat("PING\n", 1000, &len);

	cc_send_bytes(a, req, len);
	cc_wait_lines(a, 1000, WAIT_MS);
	for (int i = 0; i < 1000; i++)
		EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(pipelined_requests_are_answered_in_request_order)
{
	struct client	*a = cc_client_new();
	char		*req = cc_talloc(1000 * 16), want[64];
	size_t		 len = 0;

	for (int i = 0; i < 1000; i++)
		if (i % 2)
			len += (size_t)sprintf(req + len, "INFO k%d\n", i);
		else
			len += (size_t)sprintf(req + len, "PING\n");
	cc_send_bytes(a, req, len);
	cc_wait_lines(a, 1000, WAIT_MS);
	for (int i = 0; i < 1000; i++) {
		if (i % 2 == 0) {
			EXPECT_LINE(a, "OK PONG");
			continue;
		}
		snprintf(want, sizeof(want), "OK {\"key\":\"k%d\",", i);
		EXPECT_PREFIX(a, want);
	}
}
END_TEST

START_TEST(request_split_into_single_bytes_is_answered_once)
{
	struct client	*a = cc_client_new();
	const char	*req = "PING\n";

	for (const char *p = req; *p != '\0'; p++) {
		cc_send_bytes(a, p, 1);
		cc_pump();
		cc_rx_poll(a);
		if (p[1] != '\0')
			ck_assert_msg(a->rlen == 0, "reply before the LF");
	}
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(lock_split_into_single_bytes_is_granted)
{
	struct client	*a = cc_client_new();
	const char	*req = "LOCK s:k timeout=1000\r\nUNLOCK s:k\n";

	for (const char *p = req; *p != '\0'; p++) {
		cc_send_bytes(a, p, 1);
		cc_pump();
	}
	cc_take_token(a);
	EXPECT_LINE(a, "OK 1");
}
END_TEST

START_TEST(crlf_line_is_answered_like_lf)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "PING\r\nPING\n");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(cr_split_from_its_lf_is_still_dropped)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "PING\r");
	cc_pump();
	cc_send_str(a, "\n");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(only_the_cr_before_the_lf_is_dropped)
{
	struct client	*a = cc_client_new();

	/* "PING\r" is not a command: CR is not a separator. */
	cc_send_str(a, "PING\r\r\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	cc_send_str(a, "PING\n");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(empty_and_blank_lines_get_no_reply)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "\n\r\n   \n\t\t\n \t \r\n\n");
	cc_expect_silence(a);
	cc_send_str(a, "\n \nPING\n\n");
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(line_of_exactly_max_line_bytes_is_accepted)
{
	struct client	*a = cc_client_new();
	char		*lf = cc_padded_ping(KL_MAX_LINE_DEFAULT, "\n");
	char		*crlf = cc_padded_ping(KL_MAX_LINE_DEFAULT, "\r\n");

	ck_assert_int_eq(cc_cfg.max_line, KL_MAX_LINE_DEFAULT);
	cc_send_str(a, lf);
	EXPECT_LINE(a, "OK PONG");
	cc_send_str(a, crlf);
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(line_over_max_line_gets_toolong_and_next_line_is_answered)
{
	struct client	*a = cc_client_new();
	char		*lf = cc_padded_ping(KL_MAX_LINE_DEFAULT + 1, "\n");

	cc_send_str(a, lf);
	cc_send_str(a, "PING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	ck_assert_msg(strstr(cc_line, "4096") != NULL, "TOOLONG text \"%s\" "
	    "does not name the limit", cc_line);
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

/* Every line answered is a request (STATS requests and errors), also
 * the ones answered before any command runs: TOOLONG and an @ that
 * names no channel. */
START_TEST(lines_answered_before_any_command_count_as_requests)
{
	struct client	*a = cc_client_new();
	char		*lf = cc_padded_ping(KL_MAX_LINE_DEFAULT + 1, "\n");
	json_t		*j = cc_stats_now();
	int64_t		 req = cc_json_int(j, "requests");
	int64_t		 err = cc_json_int(j, "errors");

	json_decref(j);
	cc_send_str(a, lf);
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	cc_send_str(a, "@0 PING\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	cc_send_str(a, "PING\n");
	EXPECT_LINE(a, "OK PONG");
	j = cc_stats_now();
	/* the three lines, and the STATS that counts them */
	ck_assert_int_eq(cc_json_int(j, "requests"), req + 4);
	ck_assert_int_eq(cc_json_int(j, "errors"), err + 2);
	json_decref(j);
}
END_TEST

START_TEST(crlf_line_over_max_line_gets_toolong)
{
	struct client	*a = cc_client_new();
	char		*crlf;

	crlf = cc_padded_ping(KL_MAX_LINE_DEFAULT + 1, "\r\n");
	cc_send_str(a, crlf);
	cc_send_str(a, "PING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(overlong_line_split_across_writes_gets_exactly_one_toolong)
{
	struct client	*a = cc_client_new();
	char		 chunk[100];

	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 200; i++) {		/* 20000 bytes, no LF */
		cc_send_bytes(a, chunk, sizeof(chunk));
		cc_pump();
		cc_rx_poll(a);
	}
	ck_assert_uint_eq(a->rlen, 0);		/* the LF decides */
	cc_send_str(a, "\nPING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

/* A line of 48 KiB under a max-line that allows it, sent in pieces of
 * 6 KiB: a part of a line up to 16 KiB is held before each read in the
 * scratch buffer, a longer one in the connection's own buffer, which
 * grows; either way the line is answered whole, and the next one too. */
START_TEST(a_long_line_in_pieces_is_held_across_both_buffers)
{
	struct client	*a;
	size_t		 total = 48 * 1024, piece = 6 * 1024;
	char		*l;

	cc_restart_server("--max-line", "65536", NULL);
	a = cc_client_new();
	l = cc_padded_ping(total, "\n");
	for (size_t off = 0; off < total; off += piece) {
		cc_send_bytes(a, l + off, total - off < piece ? total - off :
		    piece);
		cc_pump();
		cc_rx_poll(a);
		if (off + piece < total)
			ck_assert_uint_eq(a->rlen, 0);	/* no LF yet */
	}
	EXPECT_LINE(a, "OK PONG");
	cc_send_str(a, "PING\n");
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(line_just_under_max_split_across_writes_is_accepted)
{
	struct client	*a = cc_client_new();
	char		*l = cc_padded_ping(KL_MAX_LINE_DEFAULT, "\n");

	/* max - 1 bytes first: still a candidate; the LF completes it. */
	cc_send_bytes(a, l, KL_MAX_LINE_DEFAULT - 1);
	cc_pump();
	cc_send_str(a, "\n");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(max_line_bytes_without_lf_already_make_the_line_too_long)
{
	struct client	*a = cc_client_new();
	char		*l = cc_padded_ping(KL_MAX_LINE_DEFAULT + 1, "\n");

	cc_send_bytes(a, l, KL_MAX_LINE_DEFAULT);
	cc_pump();
	cc_send_str(a, "\nPING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(each_overlong_line_in_one_write_gets_its_own_toolong)
{
	struct client	*a = cc_client_new();
	char		*l = cc_padded_ping(KL_MAX_LINE_DEFAULT + 50, "\n");
	size_t		 n = strlen(l);
	char		*all = cc_talloc(3 * n + 16);

	memcpy(all, l, n);
	memcpy(all + n, "PING\n", 5);
	memcpy(all + n + 5, l, n);
	memcpy(all + 2 * n + 5, l, n);
	memcpy(all + 3 * n + 5, "PING\n", 5);
	cc_send_bytes(a, all, 3 * n + 10);
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(configured_max_line_is_the_bound)
{
	struct client	*a;
	char		*ok, *over;

	cc_restart_server("--max-line", "64", NULL);
	a = cc_client_new();
	ok = cc_padded_ping(64, "\n");
	over = cc_padded_ping(65, "\n");
	cc_send_str(a, ok);
	EXPECT_LINE(a, "OK PONG");
	cc_send_str(a, over);
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	ck_assert_ptr_nonnull(strstr(cc_line, "64"));
}
END_TEST

static uint64_t	rng_state;

static uint64_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Replies keylockd-protocol(7) promises for buf: one per non-blank line. */
static size_t
expected_replies(const unsigned char *buf, size_t len, size_t max)
{
	size_t	n = 0, start = 0;

	for (size_t i = 0; i < len; i++) {
		size_t	l, j;

		if (buf[i] != '\n')
			continue;
		l = i - start;		/* without the LF */
		if (l + 1 > max) {
			n++;
		} else {
			if (l > 0 && buf[start + l - 1] == '\r')
				l--;
			for (j = 0; j < l; j++)
				if (buf[start + j] != ' ' &&
				    buf[start + j] != '\t')
					break;
			if (j < l)
				n++;
		}
		start = i + 1;
	}
	return n;
}

START_TEST(binary_garbage_only_gets_err_replies)
{
	struct client	*a = cc_client_new();
	enum { GARBAGE = 48 * 1024 };
	unsigned char	*buf = cc_talloc(GARBAGE);
	size_t		 want;

	rng_state = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < GARBAGE; i++) {
		uint64_t	r = rng();

		buf[i] = (unsigned char)r;
		if ((r >> 8) % 40 == 0)
			buf[i] = '\n';
		else if ((r >> 8) % 40 == 1)
			buf[i] = (r >> 16) & 1 ? '\0' : 0xff;
	}
	/* one overlong line of garbage without LF in the middle */
	for (size_t i = 20000; i < 20000 + 5000; i++)
		if (buf[i] == '\n')
			buf[i] = 0xfe;
	buf[GARBAGE - 1] = '\n';
	want = expected_replies(buf, GARBAGE, KL_MAX_LINE_DEFAULT);
	ck_assert_uint_gt(want, 500);
	cc_send_bytes(a, (const char *)buf, GARBAGE);
	cc_send_str(a, "PING\n");
	cc_wait_lines(a, want + 1, WAIT_MS);
	for (size_t i = 0; i < want; i++) {
		const char	*l = cc_take_line(a);

		ck_assert_msg(strncmp(l, "ERR ", 4) == 0,
		    "reply %zu to garbage is \"%s\"", i, l);
		for (const char *p = l; *p != '\0'; p++)
			ck_assert_msg((unsigned char)*p >= 0x20 &&
			    (unsigned char)*p != 0x7f, "reply %zu echoes a "
			    "control byte: \"%s\"", i, l);
	}
	EXPECT_LINE(a, "OK PONG");
	cc_expect_silence(a);
}
END_TEST

START_TEST(half_closed_client_gets_replies_to_complete_lines)
{
	struct client	*a = cc_client_new();

	cc_send_str(a, "PING\nPING\nPI");
	ck_assert_int_eq(shutdown(a->fd, SHUT_WR), 0);
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(a, "OK PONG");
	cc_expect_eof(a);	/* the unterminated "PI" is no request */
}
END_TEST

/*
 * keylockd.conf(5), auth-timeout: with no secret, any complete line
 * admits a connection, whatever its reply: an @ that names no channel,
 * a line over max-line, a channel over max-channels (fuzz_commands
 * found the first closed as "no complete line").
 */
START_TEST(any_answered_line_admits_without_a_secret)
{
	struct client	*a, *b, *c, *d;
	char		*big;
	size_t		 len;
	uint64_t	 end;

	cc_restart_server("--auth-timeout", "300", "--max-channels", "0",
	    NULL);
	a = cc_client_new();
	b = cc_client_new();
	c = cc_client_new();
	d = cc_client_new();
	big = cc_repeat("x", (size_t)cc_cfg.max_line + 10, &len);
	cc_send_str(a, "@x\n");
	cc_send_bytes(b, big, len);
	cc_send_str(b, "\n");
	cc_send_str(c, "@1 PING\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	EXPECT_PREFIX(b, "ERR TOOLONG ");
	EXPECT_PREFIX(c, "@1 ERR LIMIT ");
	cc_expect_eof(d);	/* silent: closed at 300 ms */
	end = cc_now_ms() + 50;
	while (cc_now_ms() < end) {
		cc_pump();
		cc_nap(NULL, 5);
	}
	cc_send_str(a, "PING\n");
	cc_send_str(b, "PING\n");
	cc_send_str(c, "PING\n");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(b, "OK PONG");
	EXPECT_LINE(c, "OK PONG");
}
END_TEST

void
cc_add_framing(Suite *s)
{
	TCase	*tc;

	tc = cc_tcase(s, "framing", 30);
	tcase_add_test(tc, ping_gets_pong);
	tcase_add_test(tc, command_words_are_case_insensitive);
	tcase_add_test(tc, pipelined_1000_pings_get_1000_replies_in_order);
	tcase_add_test(tc, pipelined_requests_are_answered_in_request_order);
	tcase_add_test(tc, request_split_into_single_bytes_is_answered_once);
	tcase_add_test(tc, lock_split_into_single_bytes_is_granted);
	tcase_add_test(tc, crlf_line_is_answered_like_lf);
	tcase_add_test(tc, cr_split_from_its_lf_is_still_dropped);
	tcase_add_test(tc, only_the_cr_before_the_lf_is_dropped);
	tcase_add_test(tc, empty_and_blank_lines_get_no_reply);
	tcase_add_test(tc, line_of_exactly_max_line_bytes_is_accepted);
	tcase_add_test(tc,
	    line_over_max_line_gets_toolong_and_next_line_is_answered);
	tcase_add_test(tc,
	    lines_answered_before_any_command_count_as_requests);
	tcase_add_test(tc, crlf_line_over_max_line_gets_toolong);
	tcase_add_test(tc,
	    overlong_line_split_across_writes_gets_exactly_one_toolong);
	tcase_add_test(tc, line_just_under_max_split_across_writes_is_accepted);
	tcase_add_test(tc, a_long_line_in_pieces_is_held_across_both_buffers);
	tcase_add_test(tc,
	    max_line_bytes_without_lf_already_make_the_line_too_long);
	tcase_add_test(tc,
	    each_overlong_line_in_one_write_gets_its_own_toolong);
	tcase_add_test(tc, configured_max_line_is_the_bound);
	tcase_add_test(tc, binary_garbage_only_gets_err_replies);
	tcase_add_test(tc, half_closed_client_gets_replies_to_complete_lines);
	tcase_add_test(tc, any_answered_line_admits_without_a_secret);
}
