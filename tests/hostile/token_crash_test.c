/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fencing tokens survive crashes (issue 6; keylockd-protocol(7), Fencing
 * tokens): a grant storm from a few pipelining clients, SIGKILL of the daemon
 * at seeded random moments, a restart on the same --state-dir, and every token
 * issued after the restart must be greater than every token seen before. Every
 * other round is killed when its tokens come near the end of the first range
 * the daemon handed its table (a block), while it may be writing the next
 * mark. Between rounds the daemon is also killed during its own startup, when
 * it writes the mark first, and must start cleanly after. TOKEN_CRASH_SEED (1)
 * picks the moments. And a mark that cannot be written: new LOCKs get ERR
 * BACKEND, a queued one is still granted, no token reaches the mark on disk,
 * and LOCKs are granted again once it can be written.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "check_main.h"
#include "hostile_util.h"
#include "kltest.h"
#include "token.h"

#define NCONN		4	/* storm clients */
#define BATCH		32	/* LOCK/UNLOCK pairs per write */
#define ROUNDS		6	/* killed mid-storm; kltest runs 8 */
#define STARTUP_KILLS	3	/* killed while starting, per round */

static uint64_t rng;

static uint32_t
rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

struct storm {
	struct kt_conn	*c[NCONN];
	size_t		 replies[NCONN];	/* LOCK, UNLOCK, ... */
	size_t		 sent[NCONN];		/* requests */
	uint64_t	 last[NCONN];
	uint64_t	 min, max, grants;
	bool		 open[NCONN];
};

/* Checks one reply line of connection i. */
static void
storm_reply(struct storm *s, int i, uint64_t floor)
{
	struct kt_conn	*c = s->c[i];
	uint64_t	 token;

	if (s->replies[i]++ % 2 == 1) {
		if (!kt_line_is(c, "OK 1"))
			kt_fail("storm client %d: UNLOCK got \"%s\"", i,
			    kt_esc(c->line, c->linelen));
		return;
	}
	if (!kt_line_token(c, &token))
		kt_fail("storm client %d: LOCK got \"%s\"", i,
		    kt_esc(c->line, c->linelen));
	if (token <= floor)
		kt_fail("token %" PRIu64 " after a restart, but %" PRIu64
		    " was issued before the crash", token, floor);
	if (token <= s->last[i])
		kt_fail("storm client %d: token %" PRIu64 " after %" PRIu64, i,
		    token, s->last[i]);
	s->last[i] = token;
	if (s->grants++ == 0 || token < s->min)
		s->min = token;
	if (token > s->max)
		s->max = token;
}

/*
 * Pipelines LOCK/UNLOCK pairs on all connections for run_ms, or until a
 * token reaches until (0: no such end; both 0: until the server closes
 * every connection), and checks every token against floor.
 */
static void
storm_run(struct storm *s, uint64_t floor, uint64_t run_ms, uint64_t until)
{
	uint64_t	start = kt_now_ms();
	char		buf[BATCH * 40];

	for (;;) {
		struct pollfd	pfd[NCONN];
		int		nopen = 0;

		if (run_ms != 0 && kt_now_ms() - start >= run_ms)
			return;
		if (until != 0 && s->max >= until)
			return;
		for (int i = 0; i < NCONN; i++) {
			struct kt_conn *c = s->c[i];
			enum kt_read	r;

			pfd[i].fd = c->fd;
			pfd[i].events = 0;
			if (!s->open[i])
				continue;
			while ((r = kt_conn_readline(c, 0)) == KT_LINE)
				storm_reply(s, i, floor);
			if (r != KT_TIMEOUT) {
				s->open[i] = false;	/* the crash */
				continue;
			}
			nopen++;
			pfd[i].events = POLLIN;
			if (s->sent[i] - s->replies[i] < 4 * BATCH) {
				size_t len = 0;

				for (int b = 0; b < BATCH; b++)
					len += (size_t)snprintf(buf + len,
					    sizeof(buf) - len, "LOCK storm:%d\n"
					    "UNLOCK storm:%d\n", i, i);
				/* a crash may come mid-write: that is fine */
				if (kt_conn_send(c, buf, len, kt_ms(2000)) == 0)
					s->sent[i] += 2 * BATCH;
			}
		}
		if (nopen == 0) {
			if (run_ms == 0 && until == 0)
				return;
			kt_fail("every storm connection closed before the "
			    "storm ended");
		}
		poll(pfd, NCONN, 20);
	}
}

static void
storm_open(struct storm *s)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < NCONN; i++) {
		s->c[i] = kt_connect();
		s->open[i] = true;
	}
}

static void
storm_close(struct storm *s)
{
	for (int i = 0; i < NCONN; i++)
		kt_conn_close(s->c[i]);
}

/* Starts keylockd on statedir and kills it after delay_us: during
 * startup, maybe while it writes the token mark. */
static void
kill_during_startup(const char *statedir, uint64_t delay_us)
{
	struct kt_daemon *d;

	d = kt_daemon_launch_at(KT_AT, statedir, KT_ARGS("--log-level",
	    "error"));
	kt_sleep_us(delay_us);
	kt_daemon_signal(d, SIGKILL);
	kt_daemon_wait_at(KT_AT, d, false);
	kt_daemon_free(d);
}

START_TEST(tokens_after_a_crash_are_above_every_token_before)
{
	const char	*state = kt_tmpdir();
	const char	*seedenv = getenv("TOKEN_CRASH_SEED");
	uint64_t	 floor = 0, t0;
	struct storm	 s;
	char		 rounds[ROUNDS + 1][300];
	int		 st;

	ck_assert_ptr_nonnull(state);
	rng = 0x9e3779b97f4a7c15ULL ^ (seedenv != NULL ?
	    strtoull(seedenv, NULL, 10) : 1);
	for (int r = 0; r <= ROUNDS; r++) {
		uint64_t kill_ms = 50 + rnd(450), startup_us[STARTUP_KILLS];
		uint64_t near = rnd(40000);	/* either side of the end */
		bool	 at_mark;
		size_t	 n = 0;

		/* a few deaths before the daemon is even up */
		for (int k = 0; r > 0 && k < STARTUP_KILLS; k++) {
			startup_us[k] = rnd(30000) * kt_slow();
			kill_during_startup(state, startup_us[k]);
		}
		kt_d = kt_daemon_start_at(KT_AT, state, NULL);
		/* a million grants take seconds under ASan, too long under
		 * valgrind: one such round, or none */
		at_mark = r % 2 == 1 && kt_slow() == 1 && (r == 1 ||
		    hu_memory_kind(kt_d->pid) == HU_MEM_PLAIN);
		storm_open(&s);
		t0 = kt_now_ms();
		if (r == ROUNDS) {
			/* the last one lives, and stops cleanly */
			storm_run(&s, floor, 300, 0);
			n = (size_t)snprintf(rounds[r], sizeof(rounds[r]),
			    "final: %" PRIu64 " grants, tokens %" PRIu64 "..%"
			    PRIu64, s.grants, s.min, s.max);
		} else {
			if (at_mark) {
				/* the first token was the stored mark: the
				 * next mark is written when the first range,
				 * a block, is used up */
				storm_run(&s, floor, 0, 1);
				storm_run(&s, floor, kt_ms(60000), s.min +
				    (uint64_t)KL_TOKEN_BLOCK - 20000 + near);
			} else
				storm_run(&s, floor, kill_ms * kt_slow(), 0);
			kt_daemon_signal(kt_d, SIGKILL);
			/* what was in flight */
			storm_run(&s, floor, 0, 0);
			st = kt_daemon_wait_at(KT_AT, kt_d, false);
			ck_assert_msg(WIFSIGNALED(st) &&
			    WTERMSIG(st) == SIGKILL, "the daemon ended with "
			    "status 0x%x, not by SIGKILL", st);
			n = (size_t)snprintf(rounds[r], sizeof(rounds[r]),
			    "killed at %llu ms%s: %" PRIu64 " grants, tokens %"
			    PRIu64 "..%" PRIu64 " (the first range ends at %"
			    PRIu64 ")", (unsigned long long)(kt_now_ms() - t0),
			    at_mark ? " near the end of the first range" : "",
			    s.grants, s.min, s.max,
			    s.min + (uint64_t)KL_TOKEN_BLOCK - 1);
		}
		if (r > 0)
			snprintf(rounds[r] + n, sizeof(rounds[r]) - n,
			    " (after %d kills during startup)",
			    STARTUP_KILLS);
		ck_assert_msg(s.grants > 0, "round %d: no grant before the "
		    "kill", r);
		ck_assert_uint_gt(s.min, floor);
		floor = s.max;
		storm_close(&s);
	}
	for (int r = 0; r <= ROUNDS; r++)
		fprintf(stderr, "token crash: round %d: %s\n", r, rounds[r]);
	fprintf(stderr, "token crash: %d SIGKILLs mid-storm and %d during "
	    "startup on one state dir; every token after each restart was "
	    "above every token before\n", ROUNDS, ROUNDS * STARTUP_KILLS);
}
END_TEST

/* The mark in state/token. */
static uint64_t
mark_of(const char *state)
{
	char		 path[PATH_MAX], buf[32];
	FILE		*f;
	size_t		 n;
	uint64_t	 v;

	snprintf(path, sizeof(path), "%s/%s", state, KL_TOKEN_FILE);
	ck_assert_msg((f = fopen(path, "r")) != NULL, "%s: %s", path,
	    strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	ck_assert_msg(sscanf(buf, "%" SCNu64, &v) == 1, "%s: %s", path, buf);
	return v;
}

/* A LOCK reply of the storm: a token below mark, or false on ERR BACKEND. */
static bool
failing_lock_reply(struct kt_conn *c, uint64_t mark, uint64_t *last)
{
	uint64_t	t;

	if (kt_line_is_err(c, "BACKEND"))
		return false;
	if (!kt_line_token(c, &t))
		kt_fail("LOCK got \"%s\"", kt_esc(c->line, c->linelen));
	if (t <= *last || t >= mark)
		kt_fail("token %" PRIu64 " after %" PRIu64 ", mark on disk %"
		    PRIu64, t, *last, mark);
	*last = t;
	return true;
}

START_TEST(a_mark_that_cannot_be_written_refuses_new_locks)
{
	const char	*state = kt_tmpdir();
	char		 tmp[PATH_MAX], buf[BATCH * 24];
	struct kt_conn	*c, *holder, *waiter;
	const char	*line;
	uint64_t	 mark, last = 0, t, grants = 0, deadline;
	size_t		 sent = 0, got = 0, len;
	bool		 refused = false;

	/* a million grants: seconds under ASan, too long under valgrind */
	if (kt_slow() > 1)
		return;
	ck_assert_ptr_nonnull(state);
	kt_d = kt_daemon_start_at(KT_AT, state, KT_ARGS("--log-level",
	    "error"));
	mark = mark_of(state);
	/* the temporary file's path a directory: the write fails, as root
	 * too */
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", state, KL_TOKEN_FILE);
	ck_assert_int_eq(mkdir(tmp, 0700), 0);
	c = kt_connect();
	holder = kt_connect();
	waiter = kt_connect();
	kt_lock(holder, "LOCK queued");
	kt_send(waiter, "LOCK queued");
	json_decref(kt_wait_queue(c, "queued", 1, 1));

	/* LOCK/UNLOCK pairs until the table's first range (a block) is used
	 * up, the mark cannot be raised, and LOCK is refused */
	len = 0;
	for (int b = 0; b < BATCH; b++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len,
		    "LOCK s\nUNLOCK s\n");
	deadline = kt_now_ms() + (uint64_t)kt_ms(120000);
	while (!refused || got < sent) {
		if (!refused && sent - got < 8 * BATCH) {
			kt_send_raw(c, buf, len);
			sent += BATCH;
		}
		if (kt_conn_readline(c, kt_ms(10000)) != KT_LINE)
			kt_fail("no reply after %zu pairs", got);
		if (failing_lock_reply(c, mark, &last)) {
			grants++;
			kt_expect_line(c, "OK 1");
		} else {
			refused = true;
			kt_expect_err(c, "NOTHELD");
		}
		got++;
		ck_assert_msg(kt_now_ms() < deadline, "%" PRIu64 " grants "
		    "and no refusal", grants);
	}
	ck_assert_uint_ge(grants, KL_TOKEN_BLOCK - 1);
	ck_assert_uint_eq(mark_of(state), mark);
	line = kt_req_err(c, "BACKEND", "LOCK other");
	ck_assert_msg(strstr(line, "fencing-token mark") != NULL, "%s", line);
	/* a request already queued is granted, below the mark on disk */
	kt_req(holder, "OK 1", "UNLOCK queued");
	t = kt_expect_token(waiter);
	ck_assert_uint_gt(t, last);
	ck_assert_uint_lt(t, mark);
	fprintf(stderr, "token crash: %" PRIu64 " grants, then ERR BACKEND; "
	    "the queued LOCK got %" PRIu64 ", the mark on disk is %" PRIu64
	    "\n", grants, t, mark);

	/* writable again: LOCK is granted within a second or so */
	ck_assert_int_eq(rmdir(tmp), 0);
	deadline = kt_now_ms() + (uint64_t)kt_ms(5000);
	for (;;) {
		kt_send(c, "LOCK other");
		if (kt_conn_readline(c, kt_ms(KT_REPLY_MS)) != KT_LINE)
			kt_fail("no reply to LOCK other");
		if (!kt_line_is_err(c, "BACKEND"))
			break;
		ck_assert_msg(kt_now_ms() < deadline, "still ERR BACKEND "
		    "with the mark writable");
		kt_sleep_ms(100);
	}
	ck_assert_msg(kt_line_token(c, &t), "LOCK other: %s",
	    kt_esc(c->line, c->linelen));
	ck_assert_uint_gt(t, last);
	ck_assert_uint_gt(mark_of(state), mark);
}
END_TEST

static Suite *
token_crash_suite(void)
{
	Suite	*s = suite_create("token_crash");
	TCase	*tc;

	tc = kt_tcase(s, "crash", KT_PRIVATE, 90, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc,
		    tokens_after_a_crash_are_above_every_token_before);
	tc = kt_tcase(s, "failed_mark", KT_PRIVATE, 120, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc,
		    a_mark_that_cannot_be_written_refuses_new_locks);
	return s;
}

const struct check_program check_program = {
	.name = "token_crash_test",
	.init = kt_init,
	.suites = { token_crash_suite, NULL }
};
