/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Hostile clients that are merely slow or many: fifty senders of one byte
 * every ~10 ms, and ten thousand idle connections. The daemon answers each
 * correctly, keeps little memory per connection, and a probe client keeps
 * its latency throughout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
 * A client sending one byte every ~10 ms of a long request (fifty of them
 * at once): the daemon waits for the LF without blocking anybody and then
 * answers each correctly.
 */
START_TEST(slow_senders_one_byte_per_10ms_leave_others_unaffected)
{
	enum { NSLOW = 50 };
	struct hu_probe	 probe;
	struct kt_conn	*m;
	char		 req[NSLOW][160], buf[8192];
	size_t		 len[NSLOW], maxlen = 0;
	int		 fds[NSLOW];
	uint64_t	 t0, took;

	kt_start_default();
	m = kt_connect();
	for (int i = 0; i < NSLOW; i++) {
		len[i] = (size_t)snprintf(req[i], sizeof(req[i]), "LOCK "
		    "slow:%02d:%.*s slow:%02d:b timeout=%lld\n", i, 64,
		    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
		    "abcdef", i, (long long)kt_ms(5000));
		if (len[i] > maxlen)
			maxlen = len[i];
		fds[i] = hu_socket(kt_d, i % 4 == 3 ? KT_UNIX : KT_TCP, 0);
		ck_assert_msg(fds[i] != -1, "socket: %s", strerror(errno));
		ck_assert(hu_connected(fds[i], kt_ms(3000)));
	}
	kt_wait_stat(m, "clients", NSLOW + 1);
	hu_probe_start(&probe, "probe:slow");
	t0 = kt_now_ms();
	for (size_t b = 0; b < maxlen; b++) {
		for (int i = 0; i < NSLOW; i++)
			if (b < len[i])
				ck_assert_int_eq(send(fds[i], req[i] + b, 1,
				    MSG_NOSIGNAL), 1);
		if (b == maxlen / 2) {
			/* half-way: nothing was taken, nobody is waiting */
			json_t *s = kt_stats(m);

			ck_assert_int_eq(kt_jint(s, "waiting"), 0);
			ck_assert_int_eq(kt_jint(s, "clients"), NSLOW + 2);
			json_decref(s);
		}
		kt_sleep_ms(10);
	}
	took = kt_now_ms() - t0;
	for (int i = 0; i < NSLOW; i++) {
		struct pollfd	pfd = { fds[i], POLLIN, 0 };
		ssize_t		n;

		ck_assert_int_eq(poll(&pfd, 1, (int)kt_ms(KT_REPLY_MS)), 1);
		n = recv(fds[i], buf, sizeof(buf) - 1, 0);
		ck_assert_msg(n > 3 && memcmp(buf, "OK ", 3) == 0 &&
		    buf[n - 1] == '\n', "slow client %d: got \"%s\"", i,
		    kt_esc(buf, n > 0 ? (size_t)n : 0));
	}
	hu_probe_stop(&probe, "slow senders", 30, ht_p99_bound());
	fprintf(stderr, "slow senders: %d clients sent %zu-byte requests one "
	    "byte per 10 ms (%llu ms each); all were granted\n", NSLOW,
	    maxlen, (unsigned long long)took);
	ck_assert_int_eq(kt_stat(m, "keys"), 2 * NSLOW);
	for (int i = 0; i < NSLOW; i++)
		close(fds[i]);
	kt_wait_stat(m, "keys", 0);
}
END_TEST

/*
 * Tricklers: many connections that each sent one byte, then another, of
 * a line they do not finish. Each costs the daemon about what it sent,
 * not a read's buffer (64 KiB: 133 KiB of address space each, before),
 * and each line, once finished, is answered.
 */
START_TEST(tricklers_cost_their_bytes_not_a_read)
{
	size_t		 want = ht_scaled(400, 100);
	struct kt_conn	*m;
	long		 vm0, vm1;
	char		 buf[64];
	int		*fds;

	kt_start("--auth-timeout", "0");
	m = kt_connect();
	fds = calloc(want, sizeof(*fds));
	ck_assert_ptr_nonnull(fds);
	for (size_t i = 0; i < want; i++) {
		fds[i] = hu_socket(kt_d, KT_TCP, 0);
		ck_assert_msg(fds[i] != -1 && hu_connected(fds[i],
		    kt_ms(5000)), "connection %zu: %s", i, strerror(errno));
	}
	kt_wait_stat(m, "clients", (json_int_t)want + 1);
	vm0 = hu_vmsize_kib(kt_d->pid);
	/* the second byte is read after the first is held */
	for (size_t i = 0; i < want; i++)
		ck_assert_int_eq(send(fds[i], "P", 1, MSG_NOSIGNAL), 1);
	kt_sleep_ms((uint64_t)kt_ms(300));
	kt_req(m, "OK PONG", "PING");
	for (size_t i = 0; i < want; i++)
		ck_assert_int_eq(send(fds[i], "I", 1, MSG_NOSIGNAL), 1);
	kt_sleep_ms((uint64_t)kt_ms(300));
	kt_req(m, "OK PONG", "PING");
	vm1 = hu_vmsize_kib(kt_d->pid);
	fprintf(stderr, "tricklers: %zu connections holding 2 bytes each: "
	    "daemon VmSize %ld -> %ld KiB, %.0f bytes each%s\n", want, vm0,
	    vm1, (double)(vm1 - vm0) * 1024 / (double)want,
	    hu_memory_is_instrumented(kt_d->pid) ? " (instrumented build: "
	    "its allocator reserved its space at start, so this shows "
	    "nothing)" : "");
	ck_assert_msg((vm1 - vm0) * 1024 / (long)want < 16 * 1024,
	    "%zu tricklers took %ld KiB of address space: %ld bytes each",
	    want, vm1 - vm0, (vm1 - vm0) * 1024 / (long)want);
	for (size_t i = 0; i < want; i++) {
		struct pollfd	pfd = { fds[i], POLLIN, 0 };
		ssize_t		n;

		ck_assert_int_eq(send(fds[i], "NG\n", 3, MSG_NOSIGNAL), 3);
		ck_assert_int_eq(poll(&pfd, 1, (int)kt_ms(KT_REPLY_MS)), 1);
		n = recv(fds[i], buf, sizeof(buf), 0);
		ck_assert_msg(n == 8 && memcmp(buf, "OK PONG\n", 8) == 0,
		    "trickler %zu: got \"%s\"", i,
		    kt_esc(buf, n > 0 ? (size_t)n : 0));
	}
	for (size_t i = 0; i < want; i++)
		close(fds[i]);
	free(fds);
	kt_wait_stat(m, "clients", 1);
}
END_TEST

/* Waits until STATS "clients" is at least want; returns it. */
static json_int_t
wait_clients_at_least(struct kt_conn *m, json_int_t want, int64_t ms)
{
	uint64_t	deadline = kt_now_ms() + (uint64_t)ms;
	json_int_t	v;

	while ((v = kt_stat(m, "clients")) < want && kt_now_ms() < deadline)
		kt_sleep_ms(5);
	return v;
}

/*
 * Ten thousand connections opened and held idle: the daemon's memory per
 * idle connection is small, and a normal client keeps its latency both
 * while they arrive and while they sit there.
 */
START_TEST(ten_thousand_idle_connections_keep_latency)
{
	size_t		 want = ht_scaled(10000, 2000), n = 0;
	struct rlimit	 own, dl;
	struct hu_probe	 probe;
	struct kt_conn	*m;
	struct hu_lat	 lat;
	long		 rss0, rss1, rss2;
	uint64_t	 t0, took;
	int		*fds;

	/* Their cost idle, not auth-timeout's (protocol_errors_test has
	 * that): opening them may take longer than its 10 s here. */
	kt_start("--max-clients", "20000", "--auth-timeout", "0");
	/* kt_init raised our soft limit to the hard one; the daemon got it */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &own), 0);
	ck_assert_int_eq(prlimit(kt_d->pid, RLIMIT_NOFILE, NULL, &dl), 0);
	if (own.rlim_cur < want + 64 || dl.rlim_cur < want + 64) {
		size_t lim = own.rlim_cur < dl.rlim_cur ? own.rlim_cur :
		    dl.rlim_cur;

		want = lim > 128 ? lim - 64 : 64;
		fprintf(stderr, "idle connections: RLIMIT_NOFILE is %llu "
		    "here and %llu in the daemon: testing %zu connections, "
		    "not 10000\n", (unsigned long long)own.rlim_cur,
		    (unsigned long long)dl.rlim_cur, want);
	}
	fds = calloc(want, sizeof(*fds));
	ck_assert_ptr_nonnull(fds);
	m = kt_connect();
	kt_wait_stat(m, "clients", 1);
	rss0 = hu_rss_kib(kt_d->pid);
	hu_probe_start(&probe, "probe:idle");
	t0 = kt_now_ms();
	while (n < want) {
		size_t batch = want - n < 512 ? want - n : 512;

		for (size_t i = n; i < n + batch; i++) {
			fds[i] = hu_socket(kt_d, KT_TCP, 0);
			ck_assert_msg(fds[i] != -1, "connection %zu: %s", i,
			    strerror(errno));
		}
		for (size_t i = n; i < n + batch; i++)
			ck_assert_msg(hu_connected(fds[i], kt_ms(5000)),
			    "connection %zu did not complete", i);
		n += batch;
		ck_assert_int_eq(wait_clients_at_least(m, (json_int_t)n + 2,
		    kt_ms(10000)), (json_int_t)n + 2);
	}
	took = kt_now_ms() - t0;
	kt_sleep_ms(1000);	/* idle: the probe keeps measuring */
	rss1 = hu_rss_kib(kt_d->pid);
	lat = hu_probe_stop(&probe, "idle connections", 100, ht_p99_bound());
	ck_assert_int_eq(kt_stat(m, "clients"), (json_int_t)want + 1);
	kt_req(m, "OK PONG", "PING");
	fprintf(stderr, "idle connections: %zu opened in %llu ms and held "
	    "idle; daemon RSS %ld -> %ld KiB, %.0f bytes per idle connection"
	    "%s; probe p99 %.2f ms\n", want, (unsigned long long)took, rss0,
	    rss1, (double)(rss1 - rss0) * 1024 / (double)want,
	    hu_memory_is_instrumented(kt_d->pid) ? " (instrumented build: "
	    "includes sanitizer overhead)" : "", lat.p99_ms);
	for (size_t i = 0; i < want; i++)
		close(fds[i]);
	free(fds);
	kt_wait_stat(m, "clients", 1);
	kt_wait_stat(m, "keys", 0);
	rss2 = hu_rss_kib(kt_d->pid);
	fprintf(stderr, "idle connections: all closed, daemon RSS %ld KiB\n",
	    rss2);
}
END_TEST

void
ht_add_clients(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "slow", KT_PRIVATE, 60, kt_setup_none);
	tcase_add_test(tc,
	    slow_senders_one_byte_per_10ms_leave_others_unaffected);
	tcase_add_test(tc, tricklers_cost_their_bytes_not_a_read);
	tc = kt_tcase(s, "idle", KT_PRIVATE, 90, kt_setup_none);
	tcase_add_test(tc, ten_thousand_idle_connections_keep_latency);
}
