/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * A libkeylock client for the session chaos test (tests/cli/
 * session_chaos.sh), usually behind tests/lib/faultproxy.py: for SECONDS
 * it locks one of NKEYS keys at a time (LOCK with or without a timeout,
 * or TRYLOCK), holds it for a while (sometimes past a ping interval, with
 * keylock_keepalive() driving the session), then unlocks, and idles in
 * between. Every grant it was told of is one line of HISTFILE, in the
 * format of tests/lib/histcheck.py, written when its hold ends: "unlock",
 * or "lost" when the library reported the loss. A lost session is
 * replaced by a new connection. On stdout at the end, one line of
 * figures.
 *
 *	sess_worker SERVER GRACE_MS SECONDS NKEYS HISTFILE NAME [SEED]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keylock.h"

struct worker {
	const char	*server, *name;
	long		 grace;
	FILE		*hist;
	struct keylock	*kl;
	unsigned	 seed;
	long		 grants, losses, refused, reconnects, failures;
};

static int64_t
now_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t
mono_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long
pick(struct worker *w, long lo, long hi)
{
	return lo + (long)(rand_r(&w->seed) % (unsigned)(hi - lo + 1));
}

/* The loss statuses of a session handle: anything but these is the
 * server's answer to the request. */
static int
is_loss(enum keylock_status st)
{
	return st == KEYLOCK_ERR_CLOSED || st == KEYLOCK_ERR_GONE ||
	    st == KEYLOCK_ERR_IO || st == KEYLOCK_ERR_DEADLINE ||
	    st == KEYLOCK_ERR_TLS || st == KEYLOCK_ERR_PROTO;
}

static void
record(struct worker *w, const char *key, uint64_t token, int64_t start,
    int64_t end, const char *how)
{
	fprintf(w->hist, "{\"client\":\"%s\",\"key\":\"%s\",\"token\":%"
	    PRIu64 ",\"mode\":\"exclusive\",\"start_us\":%" PRId64
	    ",\"end_us\":%" PRId64 ",\"end\":\"%s\"}\n", w->name, key, token,
	    start, end, how);
	fflush(w->hist);
}

/* A new connection with a new session; 0 if the server cannot be had
 * now (the proxy may be cutting everything). */
static int
reconnect(struct worker *w)
{
	enum keylock_status	st;

	keylock_free(w->kl);
	if ((w->kl = keylock_new()) == NULL) {
		fprintf(stderr, "%s: out of memory\n", w->name);
		exit(1);
	}
	keylock_set_timeout(w->kl, 2000);
	keylock_set_session(w->kl, w->grace);
	w->reconnects++;
	if ((st = keylock_connect(w->kl, w->server, NULL)) != KEYLOCK_OK) {
		w->failures++;
		return 0;
	}
	return 1;
}

/*
 * Holds for ms, keeping the session (keylock_keepalive()); returns 0 and
 * sets *end when the library reports the loss.
 */
static int
hold(struct worker *w, long ms, int64_t *end)
{
	int64_t			until = mono_ms() + ms, left;
	enum keylock_status	st;
	long			next;

	for (;;) {
		left = until - mono_ms();
		if (left <= 0)
			return 1;
		next = keylock_keepalive_ms(w->kl);
		if (next < 0 || next > left)
			next = left;
		if (next > 0) {
			struct timespec	ts = { next / 1000,
					    (next % 1000) * 1000000 };

			nanosleep(&ts, NULL);
			continue;
		}
		st = keylock_keepalive(w->kl, left);
		if (st != KEYLOCK_OK && st != KEYLOCK_PENDING) {
			*end = now_us();
			return 0;
		}
	}
}

static void
round_once(struct worker *w, int nkeys)
{
	char			 key[32];
	const char		*k = key;
	enum keylock_status	 st;
	uint64_t		 token = 0;
	int64_t			 start, end;
	long			 how = pick(w, 0, 9), ms;

	snprintf(key, sizeof(key), "chaos:%ld", pick(w, 0, nkeys - 1));
	if (how == 0)
		st = keylock_trylock(w->kl, &k, 1, NULL, &token);
	else if (how <= 3)
		st = keylock_lock(w->kl, &k, 1, NULL, pick(w, 50, 2000),
		    &token);
	else
		st = keylock_lock(w->kl, &k, 1, NULL, KEYLOCK_WAIT_FOREVER,
		    &token);
	if (st != KEYLOCK_OK) {
		if (is_loss(st)) {
			w->losses++;
			reconnect(w);
		} else
			w->refused++;
		return;
	}
	start = now_us();
	w->grants++;
	/* mostly short; one in eight past a ping interval */
	ms = pick(w, 0, 7) == 0 ? pick(w, w->grace / 3, w->grace) :
	    pick(w, 0, 40);
	if (!hold(w, ms, &end)) {
		record(w, key, token, start, end, "lost");
		w->losses++;
		reconnect(w);
		return;
	}
	end = now_us();
	st = keylock_unlock(w->kl, &k, 1, NULL);
	if (st == KEYLOCK_OK) {
		record(w, key, token, start, end, "unlock");
		return;
	}
	/* lost on the way: the belief ended when UNLOCK was due at the
	 * latest */
	record(w, key, token, start, end, is_loss(st) ? "lost" : "unlock");
	if (is_loss(st)) {
		w->losses++;
		reconnect(w);
	} else {
		fprintf(stderr, "%s: UNLOCK %s: %s %s\n", w->name, key,
		    keylock_status_word(st), keylock_message(w->kl));
		w->failures++;
	}
}

int
main(int argc, char **argv)
{
	struct worker	w;
	int64_t		end;
	int		nkeys;

	if (argc < 7 || argc > 8) {
		fprintf(stderr, "usage: sess_worker SERVER GRACE_MS SECONDS "
		    "NKEYS HISTFILE NAME [SEED]\n");
		return 64;
	}
	memset(&w, 0, sizeof(w));
	w.server = argv[1];
	w.grace = atol(argv[2]);
	end = mono_ms() + atol(argv[3]) * 1000;
	nkeys = atoi(argv[4]);
	w.name = argv[6];
	w.seed = argc == 8 ? (unsigned)atol(argv[7]) : (unsigned)getpid();
	if (w.grace <= 0 || nkeys <= 0 ||
	    (w.hist = fopen(argv[5], "a")) == NULL) {
		fprintf(stderr, "sess_worker: bad arguments or %s: %s\n",
		    argv[5], strerror(errno));
		return 64;
	}
	while (mono_ms() < end) {
		if ((w.kl == NULL || (!keylock_is_connected(w.kl) &&
		    !keylock_suspended(w.kl))) && !reconnect(&w)) {
			struct timespec	ts = { 0, 50 * 1000000 };

			nanosleep(&ts, NULL);
			continue;
		}
		round_once(&w, nkeys);
		if (pick(&w, 0, 3) == 0) {
			int64_t	e;

			if (!hold(&w, pick(&w, 0, 30), &e)) {
				w.losses++;
				reconnect(&w);
			}
		}
	}
	/* QUIT ends the session at once */
	if (w.kl != NULL && keylock_is_connected(w.kl))
		keylock_quit(w.kl);
	keylock_free(w.kl);
	fclose(w.hist);
	printf("%s: grants %ld, losses %ld, refused %ld, reconnects %ld, "
	    "failed connects %ld\n", w.name, w.grants, w.losses, w.refused,
	    w.reconnects, w.failures);
	return 0;
}
