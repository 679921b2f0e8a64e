/*
 * A client of the installed libkeylock, built by tests/package/debs.sh
 * against the packages' header, pkg-config file and library: connects to
 * the server given (or $KEYLOCK_SERVER), sends PING, then takes and
 * releases one key, and prints "PONG token N". SPDX-License-Identifier: MIT
 */
#include <inttypes.h>
#include <stdio.h>

#include <keylock.h>

int
main(int argc, char **argv)
{
	struct keylock		*kl;
	const char		*keys[] = { "debs:ping" };
	const char		*server = argc > 1 ? argv[1] : NULL;
	enum keylock_status	 st;
	uint64_t		 token = 0;

	if ((kl = keylock_new()) == NULL)
		return 2;
	if ((st = keylock_connect(kl, server, NULL)) == KEYLOCK_OK &&
	    (st = keylock_ping(kl)) == KEYLOCK_OK &&
	    (st = keylock_lock(kl, keys, 1, NULL, 2000, &token)) == KEYLOCK_OK)
		st = keylock_unlock(kl, keys, 1, NULL);
	if (st != KEYLOCK_OK) {
		fprintf(stderr, "ping: %s: %s\n", keylock_strstatus(st),
		    keylock_message(kl));
		keylock_free(kl);
		return 1;
	}
	printf("PONG token %" PRIu64 "\n", token);
	keylock_free(kl);
	return 0;
}
