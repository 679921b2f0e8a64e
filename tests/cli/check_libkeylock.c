/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock against a real keylockd: every test gets a private daemon
 * from the C tests' harness (kltest.h: port 0, a unix socket, state in a
 * mkdtemp directory, --config /dev/null, no KEYLOCK_* variable from the
 * caller), started by the fixture and stopped by it. Failure paths the
 * daemon will not produce (silence, garbage, an unknown error code) come
 * from a fake server: a listening socket in the test itself. KEYLOCKD
 * names the daemon; without it the suite is skipped (77). The tests live
 * in libkeylock_*.c by theme and share libkeylock_util.c; this file holds
 * the suite and main.
 */
#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "check_main.h"
#include "kltest.h"
#include "libkeylock_util.h"

static Suite *
libkeylock_suite(void)
{
	Suite	*s = suite_create("libkeylock");

	lk_add_connect(s);
	lk_add_lock(s);
	lk_add_async(s);
	lk_add_failures(s);
	lk_add_replies(s);
	lk_add_tls(s);
	lk_add_session(s);
	return s;
}

static void
libkeylock_init(const char *name)
{
	kt_init(name);
	if (kt_external()) {
		fprintf(stderr, "%s: SKIP: every test needs a private daemon, "
		    "not KEYLOCKD_TEST_ADDR\n", name);
		exit(77);
	}
}

const struct check_program check_program = {
	.name = "check_libkeylock",
	.init = libkeylock_init,
	.suites = { libkeylock_suite, NULL }
};
