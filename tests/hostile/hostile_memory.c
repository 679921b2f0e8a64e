/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What a connection's input and its channels cost, as the daemon counts
 * it in STATS (channel_bytes, channels), so that the bounds hold under
 * ASan too, where RSS says little: channels that wait (max-table-bytes
 * covers them), and the channels a detached session keeps (STATS
 * channels counts them).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>

#include <errno.h>
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

/*
 * keylockd.conf(5), max-table-bytes covers the channels: 3000 channels
 * that each wait for one key cost their struct besides the table's
 * waiter; the LOCK that finds both together at the bound gets ERR LIMIT,
 * and what is counted stays near the bound (the hostile reader's 65536
 * channels per connection took 840 bytes each, 224 of them counted).
 */
START_TEST(channels_count_against_max_table_bytes)
{
	enum { NCH = 3000 };
	struct kt_conn	*h, *a, *m;
	char		*buf, *p;
	int		 limits = 0;
	json_int_t	 tb, cb, nch;

	kt_start("--max-table-bytes", "1000000");
	h = kt_connect();
	a = kt_connect();
	m = kt_connect();
	kt_lock(h, "LOCK cw");
	ck_assert_ptr_nonnull(buf = malloc(NCH * 24));
	p = buf;
	for (int i = 1; i <= NCH; i++)
		p += sprintf(p, "@%d LOCK cw\n", i);
	kt_send_raw(a, buf, (size_t)(p - buf));
	free(buf);
	/* the waiting ones say nothing; the refused ones ERR LIMIT */
	while (kt_conn_readline(a, kt_ms(2000)) == KT_LINE) {
		ck_assert_msg(strstr(a->line, " ERR LIMIT ") != NULL &&
		    strstr(a->line, "max-table-bytes") != NULL, "%s",
		    a->line);
		limits++;
	}
	nch = kt_stat(m, "channels");
	tb = kt_stat(m, "table_bytes");
	cb = kt_stat(m, "channel_bytes");
	fprintf(stderr, "channels: %d channels each waiting, max-table-bytes "
	    "1000000: %d got ERR LIMIT, %" JSON_INTEGER_FORMAT " wait; "
	    "table_bytes %" JSON_INTEGER_FORMAT ", channel_bytes %"
	    JSON_INTEGER_FORMAT "\n", NCH, limits, nch, tb, cb);
	ck_assert_int_eq(nch + limits, NCH);
	ck_assert_int_eq(kt_stat(m, "waiting"), nch);
	ck_assert_msg(limits > 0, "no ERR LIMIT: channels not counted");
	ck_assert_msg(cb >= nch * 500, "channel_bytes %" JSON_INTEGER_FORMAT
	    " for %" JSON_INTEGER_FORMAT " channels", cb, nch);
	ck_assert_msg(tb + cb > 1000000 - 4096 && tb + cb < 1000000 + 4096,
	    "table_bytes + channel_bytes %" JSON_INTEGER_FORMAT, tb + cb);
	/* gone with their connection: LOCK again */
	kt_conn_close(a);
	kt_wait_stat(m, "channels", 0);
	ck_assert_int_eq(kt_stat(m, "channel_bytes"), 0);
	kt_lock(m, "LOCK other");
	/* a channel's timer counts too, as long as the channel */
	a = kt_connect();
	kt_send(a, "@1 LOCK cw timeout=60000");
	kt_wait_stat(m, "waiting", 1);
	cb = kt_stat(m, "channel_bytes");
	kt_send(a, "@2 LOCK cw");
	kt_wait_stat(m, "waiting", 2);
	ck_assert_msg(cb > kt_stat(m, "channel_bytes") / 2, "channel_bytes "
	    "%" JSON_INTEGER_FORMAT " with a timer, %" JSON_INTEGER_FORMAT
	    " with another channel without", cb, kt_stat(m, "channel_bytes"));
	kt_conn_close(a);
	kt_wait_stat(m, "channels", 0);
	ck_assert_int_eq(kt_stat(m, "channel_bytes"), 0);
}
END_TEST

/* keylockd-protocol(7), STATS: channels counts the channels a detached
 * session keeps (they hold and wait), until the session is resumed or
 * ends; the hostile reader saw 0 while CLIENTS showed 2. */
START_TEST(stats_channels_counts_a_detached_sessions_channels)
{
	struct kt_conn	*a, *b, *n;
	char		 id[80];

	kt_start_default();
	a = kt_connect();
	b = kt_connect();
	kt_send(a, "SESSION grace=60000");
	snprintf(id, sizeof(id), "%s", kt_expect_prefix(a, "OK ") + 3);
	kt_send(a, "@1 LOCK sc:a");
	kt_expect_prefix(a, "@1 OK ");
	kt_send(a, "@2 LOCK sc:b");
	kt_expect_prefix(a, "@2 OK ");
	ck_assert_int_eq(kt_stat(b, "channels"), 2);
	kt_conn_close(a);
	kt_wait_stat(b, "sessions_detached", 1);
	ck_assert_int_eq(kt_stat(b, "held"), 2);
	ck_assert_int_eq(kt_stat(b, "channels"), 2);
	ck_assert_int_gt(kt_stat(b, "channel_bytes"), 0);
	/* resumed: the connection has them, counted once */
	n = kt_connect();
	kt_send(n, "RESUME %s", id);
	json_decref(kt_expect_json(n));
	ck_assert_int_eq(kt_stat(b, "channels"), 2);
	/* ended: none */
	kt_req(n, "OK", "QUIT");	/* ends the session */
	kt_expect_eof(n, kt_ms(5000));
	kt_conn_close(n);
	kt_wait_stat(b, "held", 0);
	kt_wait_stat(b, "channels", 0);
	ck_assert_int_eq(kt_stat(b, "channel_bytes"), 0);
}
END_TEST

void
ht_add_memory(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "memory", KT_PRIVATE, 120, kt_setup_none);
	tcase_add_test(tc, channels_count_against_max_table_bytes);
	tcase_add_test(tc, stats_channels_counts_a_detached_sessions_channels);
}
