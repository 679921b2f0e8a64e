/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What a connection's input and its channels cost, as the daemon counts
 * it in STATS (input_bytes, channel_bytes, channels), so that the bounds
 * hold under ASan too, where RSS says little: lines pipelined behind a
 * waiting LOCK (keylockd.conf(5), max-line: one line plus one read per
 * client), channels that wait (max-table-bytes covers them), and the
 * channels a detached session keeps (STATS channels counts them), and
 * the input of all clients together (max-input-total).
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

/* Polls STATS member m until it stays the same for 500 ms; returns it. */
static json_int_t
hm_settled(struct kt_conn *c, const char *m)
{
	json_int_t	v, prev = -1;
	uint64_t	since = kt_now_ms(), end = since + (uint64_t)kt_ms(20000);

	for (;;) {
		v = kt_stat(c, m);
		if (v != prev)
			since = kt_now_ms();
		prev = v;
		if (kt_now_ms() - since >= (uint64_t)kt_ms(500))
			return v;
		ck_assert_msg(kt_now_ms() < end, "%s never settled", m);
		kt_sleep_ms(50);
	}
}

/*
 * The hostile reader's attack, scaled down: clients that each send a
 * LOCK that waits and 40000 PINGs behind it in one go. Each is read up
 * to one line plus one read (max-line 4096 + 64 KiB), its buffers sized
 * to that, not to two 128 KiB ones; once its LOCK is granted it gets
 * every reply, and its input buffers are given back.
 */
START_TEST(input_behind_a_waiting_lock_is_one_line_plus_one_read)
{
	enum { N = 20, PINGS = 40000 };
	struct kt_conn	*h, *m;
	int		 fds[N];
	char		*msg[N];
	size_t		 len[N], off[N], lines[N];
	json_int_t	 in, bound = N * (4096 + 65536 + 8192);
	long		 rss0, rss1;

	kt_start_default();
	h = kt_connect();
	m = kt_connect();
	for (int i = 0; i < N; i++)
		kt_lock(h, "LOCK ib:%d", i);
	rss0 = hu_rss_kib(kt_d->pid);
	for (int i = 0; i < N; i++) {
		int	k;

		ck_assert_ptr_nonnull(msg[i] = malloc(64 + PINGS * 5));
		k = snprintf(msg[i], 64, "LOCK ib:%d\n", i);
		for (int j = 0; j < PINGS; j++)
			memcpy(msg[i] + k + j * 5, "PING\n", 5);
		len[i] = (size_t)k + PINGS * 5;
		off[i] = lines[i] = 0;
		fds[i] = hu_socket(kt_d, KT_UNIX, 0);
		ck_assert(fds[i] != -1);
	}
	/* all the kernel takes; the daemon reads what its bound allows */
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < N; i++) {
			ssize_t	r;

			if (off[i] == len[i])
				continue;
			r = send(fds[i], msg[i] + off[i], len[i] - off[i],
			    MSG_NOSIGNAL | MSG_DONTWAIT);
			if (r > 0)
				off[i] += (size_t)r;
			else
				ck_assert_msg(errno == EAGAIN ||
				    errno == EWOULDBLOCK, "send: %s",
				    strerror(errno));
		}
		kt_sleep_ms(20);
	}
	kt_wait_stat(m, "waiting", N);
	in = hm_settled(m, "input_bytes");
	rss1 = hu_rss_kib(kt_d->pid);
	fprintf(stderr, "input behind a wait: %d clients, %d PINGs each "
	    "behind a waiting LOCK: input_bytes %" JSON_INTEGER_FORMAT
	    " (%" JSON_INTEGER_FORMAT " per client; bound %" JSON_INTEGER_FORMAT
	    "), RSS +%ld KiB%s\n", N, PINGS, in, in / N, bound / N,
	    rss1 - rss0, ht_rss_note());
	ck_assert_msg(in >= N * 65536, "input_bytes %" JSON_INTEGER_FORMAT
	    ": the clients' input was not read up to the bound", in);
	ck_assert_msg(in <= bound, "input_bytes %" JSON_INTEGER_FORMAT
	    " over %" JSON_INTEGER_FORMAT ": more than one line plus one "
	    "read per client", in, bound);
	kt_req(m, "OK PONG", "PING");

	/* granted: every reply comes, and the buffers go */
	kt_send(h, "UNLOCKALL");
	kt_expect_prefix(h, "OK ");
	for (int i = 0; i < N; i++) {
		char	buf[65536];

		while (lines[i] < 1 + PINGS) {
			struct pollfd	pfd = { fds[i], POLLIN, 0 };
			ssize_t		r;

			if (off[i] < len[i])
				pfd.events |= POLLOUT;
			ck_assert_msg(poll(&pfd, 1, (int)kt_ms(10000)) == 1,
			    "client %d: %zu of %d replies", i, lines[i],
			    1 + PINGS);
			if ((pfd.revents & POLLOUT) && (r = send(fds[i],
			    msg[i] + off[i], len[i] - off[i], MSG_NOSIGNAL |
			    MSG_DONTWAIT)) > 0)
				off[i] += (size_t)r;
			if (!(pfd.revents & (POLLIN | POLLHUP)))
				continue;
			r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
			ck_assert_msg(r > 0 || (r == -1 && errno == EAGAIN),
			    "client %d closed after %zu replies", i, lines[i]);
			for (ssize_t k = 0; k < r; k++)
				lines[i] += buf[k] == '\n';
		}
		close(fds[i]);
		free(msg[i]);
	}
	kt_wait_stat(m, "input_bytes", 0);
	kt_wait_stat(m, "clients", 2);
}
END_TEST

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

/* Waits until the probe made `more` round trips past `from`; false if
 * it did not within ms (scaled). */
static bool
hm_probe_moves(struct hu_probe *p, size_t from, size_t more, int64_t ms)
{
	uint64_t	end = kt_now_ms() + (uint64_t)kt_ms(ms);

	while (hu_probe_done(p) < from + more) {
		if (kt_now_ms() >= end)
			return false;
		kt_sleep_ms(10);
	}
	return true;
}

/*
 * keylockd.conf(5), max-input-total: clients that each hold a partial
 * line near max-line, and clients that queue lines behind a LOCK that
 * waits, more of them than the total has room for. input_bytes stays
 * under the total (without it, 150 partial lines of 60000 bytes came to
 * 150 times that); the clients past it are not read
 * (input_budget_waits), and a probe's PING, LOCK and UNLOCK are served
 * meanwhile, over TCP and over TLS (whose bytes are looked at with
 * SSL_peek as a plain client's are with MSG_PEEK), and so is a TLS client
 * that connects while the total is near the bound (its handshake too).
 * A client whose line comes in two parts while the total is short waits,
 * and is answered once the others go.
 */
START_TEST(input_of_all_clients_stays_under_max_input_total)
{
	enum { N = 150, NQ = 20, PART = 60000, PINGS = 12000 };
	const json_int_t total = 1048576;
	struct kt_conn	*h, *m, *s;
	struct hu_probe	 probe, tprobe, tlate;
	int		 fds[N + NQ];
	char		*part, *q, cert[4096], key[4096];
	json_int_t	 in, waits;
	size_t		 k, tdone;

	kt_start("--max-line", "65536", "--max-input-total", "1048576",
	    "--tls-port", "0", "--tls-cert", hu_test_cert(cert, sizeof(cert),
	    "srv.pem"), "--tls-key", hu_test_cert(key, sizeof(key),
	    "srv.key"));
	h = kt_connect();
	m = kt_connect();
	kt_lock(h, "LOCK mit:held");
	hu_probe_start(&probe, "probe:input-total");
	hu_probe_start_tls(&tprobe, "probe:input-total-tls");
	/* each: a line (past auth-timeout's first line), then a partial
	 * one of PART bytes, all the kernel takes */
	ck_assert_ptr_nonnull(part = malloc(PART + 8));
	memcpy(part, "PING\n", 5);
	memset(part + 5, 'x', PART);
	for (int i = 0; i < N; i++) {
		fds[i] = hu_socket(kt_d, KT_TCP, 0);
		ck_assert(fds[i] != -1 && hu_connected(fds[i], kt_ms(5000)));
		ck_assert_int_eq(kt_fd_write_all(fds[i], part, PART + 5,
		    kt_ms(5000)), 0);
	}
	/* and lines queued behind a LOCK that waits */
	ck_assert_ptr_nonnull(q = malloc(32 + PINGS * 5));
	k = (size_t)snprintf(q, 32, "LOCK mit:held\n");
	for (int j = 0; j < PINGS; j++)
		memcpy(q + k + (size_t)j * 5, "PING\n", 5);
	k += PINGS * 5;
	for (int i = N; i < N + NQ; i++) {
		fds[i] = hu_socket(kt_d, KT_TCP, 0);
		ck_assert(fds[i] != -1 && hu_connected(fds[i], kt_ms(5000)));
		ck_assert_int_eq(kt_fd_write_all(fds[i], q, k, kt_ms(5000)),
		    0);
	}
	in = hm_settled(m, "input_bytes");
	waits = kt_stat(m, "input_budget_waits");
	fprintf(stderr, "input total: %d clients with a partial line of %d "
	    "bytes, %d with %d PINGs behind a waiting LOCK, max-input-total "
	    "%" JSON_INTEGER_FORMAT ": input_bytes %" JSON_INTEGER_FORMAT
	    ", input_budget_waits %" JSON_INTEGER_FORMAT "\n", N, PART, NQ,
	    PINGS, total, in, waits);
	ck_assert_msg(in <= total, "input_bytes %" JSON_INTEGER_FORMAT
	    " over max-input-total %" JSON_INTEGER_FORMAT, in, total);
	ck_assert_msg(in >= total / 2, "input_bytes %" JSON_INTEGER_FORMAT
	    ": the clients were not read up to the total", in);
	ck_assert_msg(waits > 0, "no client waited for the total");
	/* the TLS probe goes on while the total is near the bound (before
	 * SSL_peek, a TLS client was not read until the total fell) */
	tdone = hu_probe_done(&tprobe);
	ck_assert_msg(hm_probe_moves(&tprobe, tdone, 30, 5000), "TLS probe: "
	    "%zu round trips in %lld ms with input_bytes near "
	    "max-input-total, want 30", hu_probe_done(&tprobe) - tdone,
	    (long long)kt_ms(5000));
	/* and one that connects now: its handshake, then its lines */
	hu_probe_start_tls(&tlate, "probe:input-total-tls-late");
	ck_assert_msg(hm_probe_moves(&tlate, 0, 30, 5000), "new TLS client: "
	    "%zu round trips in %lld ms with input_bytes near "
	    "max-input-total, want 30", hu_probe_done(&tlate),
	    (long long)kt_ms(5000));
	in = kt_stat(m, "input_bytes");
	ck_assert_msg(in >= total / 2, "input_bytes %" JSON_INTEGER_FORMAT
	    ": no longer near the total while the TLS probes ran", in);
	/* everybody else is served: a client that sends whole lines */
	s = kt_connect();
	kt_req(s, "OK PONG", "PING");
	kt_lock(s, "LOCK mit:other");
	kt_req(s, "OK 1", "UNLOCK mit:other");
	hu_probe_stop(&probe, "input total", 30, ht_p99_bound());
	hu_probe_stop(&tprobe, "input total, TLS", 30, ht_p99_bound());
	hu_probe_stop(&tlate, "input total, TLS connected near the bound", 30,
	    ht_p99_bound());
	/* a line in two parts waits while the total is short (its first
	 * part is seen and the client left unread) ... */
	waits = kt_stat(m, "input_budget_waits");
	kt_send_raw(s, "LOCK mit:sp", 11);
	kt_wait_stat(m, "input_budget_waits", waits + 1);
	kt_send_raw(s, "lit\n", 4);
	kt_expect_silence(s, 300);
	/* ... and is read once the others go */
	for (int i = 0; i < N + NQ; i++)
		close(fds[i]);
	kt_expect_token(s);
	kt_req(s, "OK 1", "UNLOCK mit:split");
	kt_wait_stat(m, "clients", 3);
	kt_wait_stat(m, "input_bytes", 0);
	ck_assert_int_eq(kt_stat(m, "waiting"), 0);
	free(part);
	free(q);
}
END_TEST

void
ht_add_memory(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "memory", KT_PRIVATE, 120, kt_setup_none);
	tcase_add_test(tc,
	    input_behind_a_waiting_lock_is_one_line_plus_one_read);
	tcase_add_test(tc, channels_count_against_max_table_bytes);
	tcase_add_test(tc, stats_channels_counts_a_detached_sessions_channels);
	tcase_add_test(tc, input_of_all_clients_stays_under_max_input_total);
}
