/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Floods from one pipelining client: a million distinct keys are capped
 * by max-locks with the memory bounded, and keys that all collide under a
 * naive hash lock as fast as random keys.
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

#define PIPE_WINDOW	2048	/* requests in flight when pipelining */
#define PIPE_OUTCAP	(256 * 1024)

/*
 * Pipelining: requests 0..n-1 made by gen() are sent with at most window
 * unanswered, and each reply goes to onreply() in order. Fails the test if
 * the server closes the connection or the whole run is over timeout_ms.
 */
typedef size_t	(*gen_fn)(size_t i, char *buf, size_t cap, void *arg);
typedef void	(*reply_fn)(size_t i, const struct kt_conn *c, void *arg);

static void
pipeline_at(const char *file, int line, struct kt_conn *c, size_t n,
    size_t window, gen_fn gen, reply_fn onreply, void *arg,
    int64_t timeout_ms)
{
	char		*out = malloc(PIPE_OUTCAP);
	size_t		 olen = 0, ooff = 0, next = 0, got = 0;
	uint64_t	 deadline = kt_now_ms() + (uint64_t)timeout_ms;

	if (out == NULL)
		kt_fail_at(file, line, "out of memory");
	while (got < n) {
		struct pollfd	pfd = { c->fd, POLLIN, 0 };
		bool		progress = false;

		if (ooff == olen)
			ooff = olen = 0;
		else if (ooff > PIPE_OUTCAP / 2) {
			memmove(out, out + ooff, olen - ooff);
			olen -= ooff;
			ooff = 0;
		}
		while (next < n && next - got < window &&
		    olen + 1024 < PIPE_OUTCAP)
			olen += gen(next++, out + olen, PIPE_OUTCAP - olen,
			    arg);
		if (ooff < olen) {
			ssize_t w = kt_conn_write_some(c, out + ooff,
			    olen - ooff);

			if (w > 0) {
				ooff += (size_t)w;
				progress = true;
			} else if (errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != EINTR)
				kt_fail_at(file, line, "pipelining, after %zu "
				    "replies: send: %s", got, strerror(errno));
		}
		for (;;) {
			enum kt_read r;

			if (got == n)
				break;
			r = kt_conn_readline(c, 0);
			if (r == KT_LINE) {
				onreply(got++, c, arg);
				progress = true;
				continue;
			}
			if (r != KT_TIMEOUT)
				kt_fail_at(file, line, "pipelining, after %zu "
				    "of %zu replies: the server closed the "
				    "connection", got, n);
			break;
		}
		if (kt_now_ms() > deadline)
			kt_fail_at(file, line, "pipelining: %zu of %zu replies "
			    "within %lld ms", got, n, (long long)timeout_ms);
		if (!progress) {
			if (ooff < olen)
				pfd.events |= POLLOUT;
			poll(&pfd, 1, 50);
		}
	}
	free(out);
}
#define pipeline(c, n, gen, onreply, arg, ms) \
	pipeline_at(KT_AT, (c), (n), PIPE_WINDOW, (gen), (onreply), (arg), (ms))

/* A flood of LOCK on distinct keys from one pipelining client. */
struct flood {
	size_t		 ok, limit, max_locks;
	uint64_t	 last_token;
};

static size_t
flood_gen(size_t i, char *buf, size_t cap, void *arg)
{
	return (size_t)snprintf(buf, cap, "LOCK flood:%zu\n", i);
}

static void
flood_reply(size_t i, const struct kt_conn *c, void *arg)
{
	struct flood	*f = arg;
	uint64_t	 token;

	if (i < f->max_locks) {
		if (!kt_line_token(c, &token) || token <= f->last_token)
			kt_fail("LOCK flood:%zu (within max-locks): got \"%s\" "
			    "after token %llu", i, kt_esc(c->line, c->linelen),
			    (unsigned long long)f->last_token);
		f->last_token = token;
		f->ok++;
	} else {
		if (!kt_line_is_err(c, "LIMIT"))
			kt_fail("LOCK flood:%zu (past max-locks %zu): got "
			    "\"%s\"", i, f->max_locks, kt_esc(c->line,
			    c->linelen));
		f->limit++;
	}
}

START_TEST(flood_of_a_million_distinct_keys_is_capped_by_max_locks)
{
	struct flood	 f = { 0, 0, 10000, 0 };
	size_t		 n = ht_scaled(1000000, 100000);
	struct hu_probe	 probe;
	struct kt_conn	*c, *m;
	long		 rss0, hwm, rss_end;
	uint64_t	 t0, took, t1;
	json_t		*s;

	kt_start("--max-locks", "10000");
	m = kt_connect();
	kt_req(m, "OK PONG", "PING");	/* admitted: a slow flood outlasts
					 * auth-timeout */
	c = kt_connect();
	rss0 = hu_rss_kib(kt_d->pid);
	hu_probe_start(&probe, "probe:flood");
	t0 = kt_now_ms();
	pipeline(c, n, flood_gen, flood_reply, &f, kt_ms(120000));
	took = kt_now_ms() - t0;
	hwm = hu_hwm_kib(kt_d->pid);
	hu_probe_stop(&probe, "distinct-key flood", 30, ht_p99_bound());
	ck_assert_uint_eq(f.ok, 10000);
	ck_assert_uint_eq(f.limit, n - 10000);
	s = kt_stats(m);
	ck_assert_int_eq(kt_jint(s, "keys"), 10000);
	ck_assert_int_eq(kt_jint(s, "held"), 10000);
	json_decref(s);
	t1 = kt_now_ms();
	kt_conn_close(c);
	kt_wait_stat(m, "keys", 0);
	kt_wait_stat(m, "held", 0);
	rss_end = hu_rss_kib(kt_d->pid);
	fprintf(stderr, "distinct-key flood: %zu LOCKs of distinct keys "
	    "pipelined in %llu ms (%.0f/s): %zu granted, %zu ERR LIMIT "
	    "(max-locks 10000); daemon peak RSS +%ld MiB%s; after the "
	    "disconnect keys 0 in %llu ms, RSS +%ld MiB\n", n,
	    (unsigned long long)took, took ? n * 1000.0 / (double)took : 0.0,
	    f.ok, f.limit, ht_rss_mib_growth(rss0, hwm), ht_rss_note(),
	    (unsigned long long)(kt_now_ms() - t1),
	    ht_rss_mib_growth(rss0, rss_end));
	ck_assert_msg(ht_rss_mib_growth(rss0, hwm) < ht_rss_bound_mib(64),
	    "daemon peak RSS grew by %ld MiB, want under %ld",
	    ht_rss_mib_growth(rss0, hwm), ht_rss_bound_mib(64));
}
END_TEST

/* Hash flooding: keys that all collide under djb2 (h * 33 + c). */
#define HF_BLOCKS	17	/* 2^17 keys of 17 two-byte blocks */

struct hf {
	char		(*keys)[48];
	bool		 unlocking;
	size_t		 n;
};

static uint32_t
djb2(const char *s)
{
	uint32_t h = 5381;

	while (*s != '\0')
		h = h * 33 + (unsigned char)*s++;
	return h;
}

static size_t
hf_gen(size_t i, char *buf, size_t cap, void *arg)
{
	struct hf *h = arg;

	if (i < h->n)
		return (size_t)snprintf(buf, cap, "LOCK %s\n", h->keys[i]);
	return (size_t)snprintf(buf, cap, "UNLOCK %s\n", h->keys[i - h->n]);
}

static void
hf_reply(size_t i, const struct kt_conn *c, void *arg)
{
	struct hf	*h = arg;
	uint64_t	 token;

	if (i < h->n ? !kt_line_token(c, &token) : !kt_line_is(c, "OK 1"))
		kt_fail("%s %s: got \"%s\"", i < h->n ? "LOCK" : "UNLOCK",
		    h->keys[i % h->n], kt_esc(c->line, c->linelen));
}

/* Locks all n keys, holding them all, then unlocks them; us per op. */
static double
hf_run(struct kt_conn *c, struct hf *h)
{
	uint64_t t0 = kt_now_ms();

	pipeline(c, 2 * h->n, hf_gen, hf_reply, h, kt_ms(120000));
	return (double)(kt_now_ms() - t0) * 1000.0 / (double)(2 * h->n);
}

START_TEST(hash_flooding_keys_lock_as_fast_as_random_keys)
{
	size_t		 n = ht_scaled(100000, 20000);
	struct hf	 col = { NULL, false, n }, rnd = { NULL, false, n };
	struct hu_probe	 probe;
	struct kt_conn	*c, *m;
	double		 us_col, us_rnd, us_rnd2, base;
	uint32_t	 h0;
	uint64_t	 seed = 0x9e3779b97f4a7c15ULL;
	char		 maxlocks[32];

	col.keys = calloc(n, sizeof(*col.keys));
	rnd.keys = calloc(n, sizeof(*rnd.keys));
	ck_assert(col.keys != NULL && rnd.keys != NULL);
	for (size_t i = 0; i < n; i++) {
		char *p = col.keys[i], *q = rnd.keys[i];

		memcpy(p, "hf:", 3);
		memcpy(q, "hf:", 3);
		for (int b = 0; b < HF_BLOCKS; b++) {
			/* "Ez" and "FY" hash alike: 69*33+122 = 70*33+89 */
			memcpy(p + 3 + 2 * b, (i >> b) & 1 ? "FY" : "Ez", 2);
			for (int k = 0; k < 2; k++) {
				seed ^= seed << 13;
				seed ^= seed >> 7;
				seed ^= seed << 17;
				q[3 + 2 * b + k] = "EFYz"[seed % 4];
			}
		}
		p[3 + 2 * HF_BLOCKS] = q[3 + 2 * HF_BLOCKS] = '\0';
	}
	h0 = djb2(col.keys[0]);
	for (size_t i = 1; i < n; i++)
		ck_assert_msg(djb2(col.keys[i]) == h0, "key generator: %s and "
		    "%s do not collide", col.keys[0], col.keys[i]);

	snprintf(maxlocks, sizeof(maxlocks), "%zu", n + 10);
	kt_start("--max-locks", maxlocks);
	m = kt_connect();
	/* a first line now: the runs below take over auth-timeout's 10 s
	 * in a sanitized build on a loaded machine, and a connection that
	 * has sent no complete line by then is closed */
	kt_req(m, "OK PONG", "PING");
	c = kt_connect();
	hu_probe_start(&probe, "probe:hash");
	us_rnd = hf_run(c, &rnd);
	us_col = hf_run(c, &col);
	us_rnd2 = hf_run(c, &rnd);
	hu_probe_stop(&probe, "hash flooding", 30, ht_p99_bound());
	base = us_rnd < us_rnd2 ? us_rnd : us_rnd2;
	fprintf(stderr, "hash flooding: %zu keys colliding under djb2, all "
	    "held at once, then released: %.2f us per LOCK/UNLOCK; random "
	    "keys of the same length and alphabet: %.2f and %.2f us (ratio "
	    "%.2f, bound 5)\n", n, us_col, us_rnd, us_rnd2, us_col / base);
	ck_assert_msg(us_col < 5 * base + 2.0, "colliding keys: %.2f us per "
	    "op, random keys %.2f us: over 5 times slower", us_col, base);
	ck_assert_int_eq(kt_stat(m, "keys"), 0);
	free(col.keys);
	free(rnd.keys);
}
END_TEST

void
ht_add_flood(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "flood", KT_PRIVATE, 120, kt_setup_none);
	tcase_add_test(tc,
	    flood_of_a_million_distinct_keys_is_capped_by_max_locks);
	tcase_add_test(tc, hash_flooding_keys_lock_as_fast_as_random_keys);
}
