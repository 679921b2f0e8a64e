/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libkeylock against a real keylockd: every test gets a private daemon
 * (port 0, a unix socket, state in a mkdtemp directory), started by the
 * fixture and killed and reaped by it. Readiness is the port file, polled
 * with a deadline. Failure paths the daemon will not produce (silence,
 * garbage, an unknown error code) come from a fake server: a listening
 * socket in the test itself. KEYLOCKD names the daemon; without it the
 * suite is skipped (77). The tests live in libkeylock_*.c by theme and
 * share the harness in libkeylock_util.c; this file holds the suite and
 * main.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

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
	return s;
}

int
main(void)
{
	SRunner	*sr;
	int	 failed;

	lk_keylockd = getenv("KEYLOCKD");
	if (lk_keylockd == NULL || *lk_keylockd == '\0') {
		fprintf(stderr, "check_libkeylock: SKIP: KEYLOCKD is not set "
		    "(make check sets it)\n");
		return 77;
	}
	if (access(lk_keylockd, X_OK) != 0) {
		fprintf(stderr, "check_libkeylock: KEYLOCKD=%s: %s\n",
		    lk_keylockd, strerror(errno));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	strcpy(lk_topdir, "/tmp/check_libkeylock.XXXXXX");
	if (mkdtemp(lk_topdir) == NULL) {
		fprintf(stderr, "check_libkeylock: mkdtemp: %s\n",
		    strerror(errno));
		return 1;
	}
	sr = srunner_create(libkeylock_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	/* a failed test's daemon log is worth a look */
	if (failed == 0 || getenv("KEYLOCKD_KEEP_FAILED") == NULL)
		lk_remove_tree(lk_topdir);
	else
		fprintf(stderr, "check_libkeylock: logs kept in %s\n",
		    lk_topdir);
	return failed == 0 ? 0 : 1;
}
