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
 * picks the moments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/wait.h>

#include <errno.h>
#include <inttypes.h>
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

static Suite *
token_crash_suite(void)
{
	Suite	*s = suite_create("token_crash");
	TCase	*tc;

	tc = kt_tcase(s, "crash", KT_PRIVATE, 90, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc,
		    tokens_after_a_crash_are_above_every_token_before);
	return s;
}

const struct check_program check_program = {
	.name = "token_crash_test",
	.init = kt_init,
	.suites = { token_crash_suite, NULL }
};
