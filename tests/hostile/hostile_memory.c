/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What a connection's input and its channels cost, as the daemon counts
 * it in STATS, so that the bounds hold under ASan too, where RSS says
 * little: the channels a detached session keeps (STATS channels counts
 * them).
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
}
END_TEST

void
ht_add_memory(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "memory", KT_PRIVATE, 120, kt_setup_none);
	tcase_add_test(tc, stats_channels_counts_a_detached_sessions_channels);
}
