/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The C tests' launcher keeps its daemons and clients hermetic (kltest.h):
 * a daemon reads /dev/null as its config file, never the one this build
 * would read by default (KL_SYSCONFDIR/keylockd/keylockd.conf, where an
 * installed keylockd keeps the operator's settings); a test's own --config
 * still wins; and no KEYLOCK_* variable of the caller's reaches the test or
 * its daemons. main() plants such variables before kt_init(), as a shell
 * with KEYLOCK_SERVER exported would.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "check_main.h"
#include "kltest.h"

#ifndef KL_SYSCONFDIR
#define KL_SYSCONFDIR	"/etc"
#endif
#define OPERATOR_CONFIG	KL_SYSCONFDIR "/keylockd/keylockd.conf"

/* What main() sets before kt_init(): the ways a caller's environment could
 * aim a test's clients elsewhere. They follow each other in environ, and
 * one more comes after a variable that must stay. */
static const char *const planted[] = {
	"KEYLOCK_SERVER", "KEYLOCK_AUTH_FILE", "KEYLOCK_TLS_CA",
	"KEYLOCK_TLS_CERT", "KEYLOCK_TLS_KEY", NULL
};

/* The whole of a small file, NUL-terminated (NULs inside become LF); the
 * caller frees it. */
static char *
slurp(const char *path)
{
	char	*buf;
	ssize_t	 n;
	size_t	 len = 0, cap = 65536;
	int	 fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		kt_fail("%s: %s", path, strerror(errno));
	ck_assert_ptr_nonnull(buf = malloc(cap + 1));
	while (len < cap && (n = read(fd, buf + len, cap - len)) > 0)
		len += (size_t)n;
	close(fd);
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '\0')
			buf[i] = '\n';
	buf[len] = '\0';
	return buf;
}

START_TEST(a_daemon_reads_dev_null_not_the_operators_config)
{
	char	*log = slurp(kt_d->log);

	ck_assert_msg(strstr(log, "starting, config /dev/null\n") != NULL,
	    "the daemon did not say it read /dev/null: %s", log);
	ck_assert_msg(strstr(log, OPERATOR_CONFIG) == NULL, "the daemon "
	    "names the operator's %s: %s", OPERATOR_CONFIG, log);
	fprintf(stderr, "harness: the daemon read /dev/null, not %s (%s)\n",
	    OPERATOR_CONFIG, access(OPERATOR_CONFIG, F_OK) == 0 ? "present" :
	    "absent here");
	free(log);
}
END_TEST

START_TEST(a_tests_own_config_wins)
{
	const char	*dir = kt_tmpdir();
	char		 path[256], want[300], *log;
	struct kt_conn	*c;
	FILE		*f;

	ck_assert_ptr_nonnull(dir);
	snprintf(path, sizeof(path), "%s/own.conf", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fprintf(f, "max-keys 2\n");
	fclose(f);
	kt_start("--config", path);
	c = kt_connect();
	kt_lock(c, "LOCK a b");
	kt_req_err(c, "LIMIT", "LOCK c d e");
	log = slurp(kt_d->log);
	snprintf(want, sizeof(want), "starting, config %s\n", path);
	ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in: %s", want,
	    log);
	free(log);
}
END_TEST

START_TEST(no_keylock_variable_reaches_the_test_or_its_daemon)
{
	char	path[64], *env;

	for (int i = 0; planted[i] != NULL; i++)
		ck_assert_msg(getenv(planted[i]) == NULL, "%s=%s survived "
		    "kt_init()", planted[i], getenv(planted[i]));
	for (char **e = environ; *e != NULL; e++)
		ck_assert_msg(strncmp(*e, "KEYLOCK_", 8) != 0, "%s survived "
		    "kt_init()", *e);
	/* not too much: the harness's own settings stay */
	ck_assert_ptr_nonnull(getenv("KEYLOCKD"));
	ck_assert_str_eq(getenv("KEYLOCKD_HARNESS_KEPT"), "yes");

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)kt_d->pid);
	env = slurp(path);
	ck_assert_msg(strstr(env, "\nKEYLOCK_") == NULL && strncmp(env,
	    "KEYLOCK_", 8) != 0, "the daemon's environment holds a "
	    "KEYLOCK_* variable: %s", strstr(env, "KEYLOCK_"));
	ck_assert_ptr_nonnull(strstr(env, "KEYLOCKD_HARNESS_KEPT=yes"));
	free(env);
}
END_TEST

static Suite *
harness_suite(void)
{
	Suite	*s = suite_create("harness");
	TCase	*tc;

	if ((tc = kt_tcase(s, "hermetic", KT_PRIVATE, 20, NULL)) != NULL) {
		tcase_add_test(tc,
		    a_daemon_reads_dev_null_not_the_operators_config);
		tcase_add_test(tc,
		    no_keylock_variable_reaches_the_test_or_its_daemon);
	}
	if ((tc = kt_tcase(s, "own config", KT_PRIVATE, 20,
	    kt_setup_none)) != NULL)
		tcase_add_test(tc, a_tests_own_config_wins);
	return s;
}

/* Plants what a caller's environment might hold, then starts the harness. */
static void
harness_init(const char *name)
{
	for (int i = 0; planted[i] != NULL; i++)
		setenv(planted[i], "/nonexistent/planted-by-harness_test", 1);
	setenv("KEYLOCKD_HARNESS_KEPT", "yes", 1);
	setenv("KEYLOCK_AFTER_A_KEPT_ONE", "1", 1);
	kt_init(name);
}

const struct check_program check_program = {
	.name = "harness_test",
	.init = harness_init,
	.suites = { harness_suite, NULL }
};
