/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The libkeylock clients of tests/service/upgrade_load.sh: one connection
 * that cycles LOCK and UNLOCK over NKEYS shared keys "load:N" (starting
 * at key FIRST) until the file STOP exists, while the daemon is upgraded
 * under it. Each grant is one line on stdout when its hold ends:
 *
 *	G key token granted_us released_us
 *
 * (CLOCK_MONOTONIC microseconds, read after the grant's reply and before
 * UNLOCK is sent), for upgrade_load.py's history check. Any failure
 * (a connection lost, a reply out of order, a refusal) is one line
 * "FAIL why" and exit status 1: a live upgrade drops no plain connection.
 *
 *	upgrade_load_client SERVER NAME FIRST NKEYS STOP
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keylock.h"

#define REPLY_MS	60000	/* for each reply: an upgrade under valgrind */
#define WAIT_MS		30000	/* for a lock */

static int64_t
mono_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
fail(struct keylock *kl, const char *what, enum keylock_status st)
{
	printf("FAIL %s: %s (%s)\n", what, keylock_strstatus(st),
	    keylock_message(kl) != NULL ? keylock_message(kl) : "-");
	fflush(stdout);
	keylock_free(kl);
	return 1;
}

int
main(int argc, char *argv[])
{
	struct keylock		*kl;
	enum keylock_status	 st;
	char			 key[32];
	const char		*keys[1] = { key };
	uint64_t		 token;
	unsigned long		 count;
	int64_t			 t0, t1;
	long			 first, nkeys, i;

	if (argc != 6 || (first = atol(argv[3])) < 0 ||
	    (nkeys = atol(argv[4])) <= 0) {
		fprintf(stderr, "usage: upgrade_load_client SERVER NAME FIRST "
		    "NKEYS STOP\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((kl = keylock_new()) == NULL) {
		printf("FAIL out of memory\n");
		return 1;
	}
	keylock_set_timeout(kl, REPLY_MS);
	if ((st = keylock_connect(kl, argv[1], NULL)) != KEYLOCK_OK)
		return fail(kl, "connect", st);
	if ((st = keylock_name(kl, argv[2])) != KEYLOCK_OK)
		return fail(kl, "NAME", st);
	for (i = 0; access(argv[5], F_OK) != 0; i++) {
		snprintf(key, sizeof(key), "load:%ld", (first + i) % nkeys);
		st = keylock_lock(kl, keys, 1, NULL, WAIT_MS, &token);
		if (st != KEYLOCK_OK)
			return fail(kl, "LOCK", st);
		t0 = mono_us();
		t1 = mono_us();
		if ((st = keylock_unlock(kl, keys, 1, &count)) != KEYLOCK_OK)
			return fail(kl, "UNLOCK", st);
		printf("G %s %" PRIu64 " %" PRId64 " %" PRId64 "\n", key,
		    token, t0, t1);
		if (count != 1) {
			printf("FAIL UNLOCK %s released %lu\n", key, count);
			keylock_free(kl);
			return 1;
		}
	}
	if ((st = keylock_quit(kl)) != KEYLOCK_OK)
		return fail(kl, "QUIT", st);
	keylock_free(kl);
	return 0;
}
