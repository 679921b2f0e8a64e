/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The chaos soak (issue 6). Worker processes (soak_worker.c), each a poll
 * loop over a share of hundreds of connections, do random LOCK / TRYLOCK /
 * UNLOCK / UNLOCKALL, multi-key, shared, semaphore, ttl and timeout
 * requests; they close sockets abruptly (FIN or RST), half-close them,
 * stall without reading and flood without reading until the daemon cuts
 * them off at max-output, while this program SIGKILLs whole workers at
 * random and starts new ones. Every grant and every end of a hold comes
 * here through one pipe and is checked from the outside (soak_check.c):
 * mutual exclusion, shared versus exclusive, semaphore limits, fencing
 * token order. Workers check that every request is answered correctly and
 * in time (timeout + slack: no lost wake-up). At the end STATS must show
 * no keys, holders or waiters and the daemon's RSS must be back near where
 * it started.
 *
 * SOAK_SECONDS (60), SOAK_CLIENTS (320; 48 under KEYLOCKD_WRAPPER),
 * SOAK_WORKERS (16; 4) and SOAK_SEED (1) set the run.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
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
#include "soak.h"

#define SLACK_MS	2000	/* reply deadline past timeout= */
#define RSS_BOUND_KIB	(8 * 1024)
#define STATS_EVERY_NS	250000000ULL

static const char *const cnt_names[NCNT] = {
	"requests", "grants", "timeouts", "locked", "deadlocks", "busy",
	"ttl-notheld", "abrupt closes", "RST closes", "half-closes", "stalls",
	"floods", "floods cut at max-output", "connects",
	"max ms over timeout", "max immediate reply ms",
	"max ms a TIMEOUT came early"
};

/* One soak run: its settings, its workers, what it saw of the daemon. */
struct run {
	int64_t		 secs, nworkers, slack_ms;
	int		 per;		/* clients per worker */
	uint64_t	 seed, rng;
	struct soak	*s;
	uint32_t	*slot;		/* worker i's incarnation */
	int		 pipe[2];
	struct kt_conn	*m;		/* the soak's own STATS */
	uint64_t	 t0, t_end;
	long		 rss0, rss_warm, rss1, hwm, bound;
	enum hu_mem	 mem;
	json_int_t	 max_waiting, max_clients;
	char		 hottest[256];
};

static uint32_t
run_rnd(struct run *r, uint32_t n)
{
	r->rng = mix64(r->rng);
	return (uint32_t)(r->rng % n);
}

/* Starts a worker in slot i. */
static void
run_spawn(struct run *r, int i)
{
	uint32_t inc = soak_new_inc(r->s);
	pid_t	 pid = fork();

	ck_assert_msg(pid != -1, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(r->pipe[0]);
		worker_main(r->pipe[1], inc, r->seed, r->per, r->slack_ms);
	}
	r->s->incs[inc].pid = pid;
	r->slot[i] = inc;
}

static void
run_start(struct run *r)
{
	const char	*asan = getenv("ASAN_OPTIONS");
	char		 clients[16];

	r->secs = kt_env_int("SOAK_SECONDS", 60, 1, 86400);
	r->nworkers = kt_env_int("SOAK_WORKERS", kt_slow() > 1 ? 4 : 16, 1,
	    256);
	r->per = (int)(kt_env_int("SOAK_CLIENTS", kt_slow() > 1 ? 48 : 320, 1,
	    5000) / r->nworkers);
	if (r->per == 0)
		r->per = 1;
	r->seed = (uint64_t)kt_env_int("SOAK_SEED", 1, 0, INT64_MAX);
	r->rng = mix64(r->seed);
	r->slack_ms = kt_ms(SLACK_MS);
	r->rss_warm = -1;
	r->bound = RSS_BOUND_KIB;
	snprintf(r->hottest, sizeof(r->hottest), "none");
	snprintf(clients, sizeof(clients), "%lld",
	    (long long)r->per * r->nworkers * 2 + 100);
	/* an ASan daemon keeps 256 MiB of freed memory by default: too much
	 * to see RSS come back; a small quarantine still catches reuse */
	if (asan == NULL || strstr(asan, "quarantine_size_mb") == NULL) {
		char opts[1024];

		snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=16",
		    asan != NULL ? asan : "", asan != NULL && *asan != '\0' ?
		    ":" : "");
		setenv("ASAN_OPTIONS", opts, 1);
	}
	kt_start("--max-output", "262144", "--max-clients", clients);
	r->m = kt_connect();
	r->rss0 = hu_rss_kib(kt_d->pid);
	/* what a tool may still be filling a third of the way: ASan's
	 * quarantine (16 MiB, above), valgrind's freed blocks (20 MB) */
	if ((r->mem = hu_memory_kind(kt_d->pid)) == HU_MEM_ASAN)
		r->bound += 16 * 1024;
	else if (r->mem == HU_MEM_VALGRIND)
		r->bound = 40 * 1024;
	r->s = calloc(1, sizeof(*r->s));
	r->slot = calloc((size_t)r->nworkers, sizeof(*r->slot));
	ck_assert(r->s != NULL && r->slot != NULL);
	ck_assert(pipe(r->pipe) == 0);
	fcntl(r->pipe[0], F_SETFL, O_NONBLOCK);
	fcntl(r->pipe[0], F_SETPIPE_SZ, 1 << 20);
	fprintf(stderr, "soak: seed %llu, %lld s, %d clients in %lld worker "
	    "processes, reply slack %lld ms, daemon pid %d RSS %ld KiB\n",
	    (unsigned long long)r->seed, (long long)r->secs,
	    r->per * (int)r->nworkers, (long long)r->nworkers,
	    (long long)r->slack_ms, (int)kt_d->pid, r->rss0);
	for (int i = 0; i < r->nworkers; i++)
		run_spawn(r, i);
	r->t0 = kt_now_ns();
	r->t_end = r->t0 + (uint64_t)r->secs * 1000000000ULL;
}

/* SIGKILLs a worker: its connections die with it. */
static void
run_kill_one(struct run *r)
{
	int	    i = (int)run_rnd(r, (uint32_t)r->nworkers);
	struct inc *w = &r->s->incs[r->slot[i]];
	int	    status;

	w->killed = kt_now_ns();
	kill(w->pid, SIGKILL);
	waitpid(w->pid, &status, 0);
	r->s->kills++;
	r->s->killed_clients += (uint64_t)r->per;
	run_spawn(r, i);
}

/* A worker that died by itself is an error; it is replaced. */
static void
run_reap(struct run *r)
{
	for (int i = 0; i < r->nworkers; i++) {
		struct inc *w = &r->s->incs[r->slot[i]];
		int	    status;

		if (waitpid(w->pid, &status, WNOHANG) != w->pid)
			continue;
		w->killed = kt_now_ns();	/* its holds end no later */
		soak_error(r->s, "worker %u died by itself, status 0x%x",
		    r->slot[i], status);
		run_spawn(r, i);
	}
}

static void
run_sample(struct run *r)
{
	json_t	*st;

	if (r->rss_warm < 0 && kt_now_ns() > r->t0 + (r->t_end - r->t0) / 3)
		r->rss_warm = hu_rss_kib(kt_d->pid);
	st = kt_stats(r->m);
	if (kt_jint(st, "waiting") > r->max_waiting) {
		json_t	*hk = json_array_get(json_object_get(st,
			    "hot_keys"), 0);
		char	*d = hk != NULL ? json_dumps(hk, JSON_COMPACT) :
			    NULL;

		r->max_waiting = kt_jint(st, "waiting");
		snprintf(r->hottest, sizeof(r->hottest), "%s", d != NULL ? d :
		    "none");
		free(d);
	}
	if (kt_jint(st, "clients") > r->max_clients)
		r->max_clients = kt_jint(st, "clients");
	json_decref(st);
}

/* The chaos: until the time is up or something failed. */
static void
run_loop(struct run *r)
{
	uint64_t next_kill = r->t0 + (300 + run_rnd(r, 700)) * 1000000ULL;
	uint64_t next_stats = r->t0;
	uint64_t next_check = r->t0 + LAG_NS + CHECK_EVERY_NS;

	while (kt_now_ns() < r->t_end && r->s->nerrors == 0) {
		struct pollfd pfd = { r->pipe[0], POLLIN, 0 };

		poll(&pfd, 1, 20);
		soak_drain(r->s, r->pipe[0]);
		if (kt_now_ns() >= next_kill) {
			run_kill_one(r);
			next_kill = kt_now_ns() + (200 + run_rnd(r, 800)) *
			    1000000ULL;
		}
		run_reap(r);
		if (kt_now_ns() >= next_check) {
			/* check, and forget what is over */
			soak_check(r->s, false, kt_now_ns() - LAG_NS);
			next_check = kt_now_ns() + CHECK_EVERY_NS;
		}
		if (kt_now_ns() >= next_stats) {
			run_sample(r);
			next_stats = kt_now_ns() + STATS_EVERY_NS;
		}
	}
}

/* Stops the workers (they report the end of what they hold) and reads
 * their last records. */
static void
run_stop(struct run *r)
{
	r->s->term_ns = kt_now_ns();
	for (int i = 0; i < r->nworkers; i++)
		kill(r->s->incs[r->slot[i]].pid, SIGTERM);
	close(r->pipe[1]);
	for (int i = 0; i < r->nworkers; i++) {
		struct inc *w = &r->s->incs[r->slot[i]];
		int	    status;

		while (waitpid(w->pid, &status, WNOHANG) == 0) {
			soak_drain(r->s, r->pipe[0]);
			kt_sleep_ms(2);
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			soak_error(r->s, "worker %u ended with status 0x%x",
			    r->slot[i], status);
	}
	while (soak_drain(r->s, r->pipe[0]))
		kt_sleep_ms(1);
	close(r->pipe[0]);
}

static void
run_report(struct run *r, json_t *st, const uint64_t *tot)
{
	const struct verdict *v = &r->s->v;

	fprintf(stderr, "soak: %.1f s, %zu worker incarnations, %llu workers "
	    "SIGKILLed (%llu clients)\n", (double)(kt_now_ns() - r->t0) / 1e9,
	    r->s->nincs, (unsigned long long)r->s->kills,
	    (unsigned long long)r->s->killed_clients);
	fprintf(stderr, "soak: client side:");
	for (int c = 0; c < NCNT; c++)
		fprintf(stderr, "%s %s %.*f", c ? "," : "", cnt_names[c],
		    c >= C_LATE_US_MAX ? 1 : 0, c >= C_LATE_US_MAX ?
		    (double)tot[c] / 1000.0 : (double)tot[c]);
	fprintf(stderr, "\n");
	fprintf(stderr, "soak: daemon: grants %lld, timeouts %lld, deadlocks "
	    "%lld, busy %lld, expired %lld, disconnect_releases %lld, "
	    "output_closes %lld, connections %lld, max_waiters %lld; sampled "
	    "max waiting %lld (hottest key then %s), max clients %lld\n",
	    (long long)kt_jint(st, "grants"), (long long)kt_jint(st,
	    "timeouts"), (long long)kt_jint(st, "deadlocks"),
	    (long long)kt_jint(st, "busy"), (long long)kt_jint(st, "expired"),
	    (long long)kt_jint(st, "disconnect_releases"),
	    (long long)kt_jint(st, "output_closes"), (long long)kt_jint(st,
	    "connections"), (long long)kt_jint(st, "max_waiters"),
	    (long long)r->max_waiting, r->hottest, (long long)r->max_clients);
	fprintf(stderr, "soak: checked %zu holds (%zu non-empty) on %d keys "
	    "in %zu checkpoints (at most %zu kept at once): %zu overlaps, %zu "
	    "token-order violations; most holders at once: k:0 %u, s:0 %u "
	    "(limit %u), s:1 %u (limit %u)\n", v->nivals, v->nonempty, NKEYS,
	    v->checks, v->most_kept, v->overlaps, v->token_bad,
	    v->max_holders[0], v->max_holders[NPLAIN], sem_limit(NPLAIN),
	    v->max_holders[NPLAIN + 1], sem_limit(NPLAIN + 1));
	fprintf(stderr, "soak: daemon RSS %ld KiB at start, %ld KiB a third "
	    "of the way, %ld KiB at the end, peak %ld KiB; bound: +%ld MiB "
	    "from the %s\n", r->rss0, r->rss_warm, r->rss1, r->hwm,
	    r->bound / 1024, r->mem != HU_MEM_PLAIN ? "third (instrumented "
	    "daemon: freed memory is held back and the start is no "
	    "baseline)" : "start");
	for (size_t i = 0; i < r->s->nerrors && i < MAX_ERRORS; i++)
		fprintf(stderr, "soak: FAIL: %s\n", r->s->errors[i]);
}

/*
 * A full make check once saw this process end by SIGTERM mid-run ("Received
 * signal 15"), which nothing here sends to itself. Who sent it is said
 * before it takes effect: its pid and command line, from the signal's
 * siginfo (async-signal-safe calls only), then the default action.
 */
/* appends n bytes of p to buf, as room allows (async-signal-safe) */
static void
soak_cat(char *buf, size_t cap, size_t *len, const char *p, size_t n)
{
	for (size_t i = 0; i < n && *len < cap; i++)
		buf[(*len)++] = p[i];
}

static void
soak_term_cb(int sig, siginfo_t *si, void *ctx)
{
	char		 msg[600], path[48], num[16], digits[16];
	size_t		 len = 0, plen = 0, nd = 0;
	unsigned long	 p = si != NULL && si->si_pid > 0 ?
			    (unsigned long)si->si_pid : 0;
	ssize_t		 r;
	int		 fd;

	(void)ctx;
	do
		digits[nd++] = (char)('0' + p % 10);
	while ((p /= 10) > 0);
	for (size_t i = 0; i < nd; i++)
		num[i] = digits[nd - 1 - i];
	soak_cat(msg, sizeof(msg) - 1, &len, "soak: SIGTERM from pid ", 23);
	soak_cat(msg, sizeof(msg) - 1, &len, num, nd);
	soak_cat(msg, sizeof(msg) - 1, &len, ": ", 2);
	soak_cat(path, sizeof(path) - 1, &plen, "/proc/", 6);
	soak_cat(path, sizeof(path) - 1, &plen, num, nd);
	soak_cat(path, sizeof(path) - 1, &plen, "/cmdline", 8);
	path[plen] = '\0';
	if ((fd = open(path, O_RDONLY)) != -1) {
		r = read(fd, msg + len, sizeof(msg) - 1 - len);
		for (ssize_t i = 0; i < r; i++)
			if (msg[len + (size_t)i] == '\0')
				msg[len + (size_t)i] = ' ';
		if (r > 0)
			len += (size_t)r;
		close(fd);
	} else {
		soak_cat(msg, sizeof(msg) - 1, &len, "(gone)", 6);
	}
	msg[len++] = '\n';
	(void)!write(2, msg, len);
	signal(sig, SIG_DFL);
	raise(sig);
}

START_TEST(chaos_soak_keeps_every_invariant)
{
	struct run		 r;
	uint64_t		 tot[NCNT] = { 0 };
	json_t			*st;
	long			 base;
	struct sigaction	 sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = soak_term_cb;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	memset(&r, 0, sizeof(r));
	run_start(&r);
	run_loop(&r);
	run_stop(&r);

	/* the daemon forgets everybody */
	kt_wait_stat(r.m, "clients", 1);
	kt_wait_stat(r.m, "keys", 0);
	st = kt_stats(r.m);
	r.rss1 = hu_rss_kib(kt_d->pid);
	r.hwm = hu_hwm_kib(kt_d->pid);
	if (r.rss_warm < 0)
		r.rss_warm = r.rss0;
	soak_check(r.s, true, 0);
	for (size_t i = 0; i < r.s->nincs; i++)
		for (int c = 0; c < NCNT; c++) {
			uint64_t x = r.s->incs[i].cnt[c];

			if (c >= C_LATE_US_MAX)
				tot[c] = tot[c] > x ? tot[c] : x;
			else
				tot[c] += x;
		}
	run_report(&r, st, tot);

	ck_assert_int_eq(kt_jint(st, "keys"), 0);
	ck_assert_int_eq(kt_jint(st, "held"), 0);
	ck_assert_int_eq(kt_jint(st, "waiting"), 0);
	json_decref(st);
	ck_assert_msg(r.s->nerrors == 0, "%zu failures; first: %s",
	    r.s->nerrors, r.s->errors[0]);
	ck_assert_msg(tot[C_GRANTS] > 0 && r.s->v.nonempty > 0,
	    "nothing granted");
	base = r.mem != HU_MEM_PLAIN ? r.rss_warm : r.rss0;
	ck_assert_msg(r.rss1 - base < r.bound, "daemon RSS grew from %ld to "
	    "%ld KiB, over %ld MiB", base, r.rss1, r.bound / 1024);
	soak_free(r.s);
	free(r.slot);
}
END_TEST

static Suite *
soak_suite(void)
{
	Suite	*s = suite_create("soak");
	TCase	*tc;

	tc = kt_tcase(s, "chaos", KT_PRIVATE, (double)kt_env_int("SOAK_SECONDS",
	    60, 1, 86400) + 60, kt_setup_none);
	if (tc != NULL)
		tcase_add_test(tc, chaos_soak_keeps_every_invariant);
	return s;
}

const struct check_program check_program = {
	.name = "soak",
	.init = kt_init,
	.suites = { soak_suite, NULL }
};
