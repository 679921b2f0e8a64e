/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of config_load (config.h, keylockd(8), OPTIONS
 * and "Config file"): the built-in defaults, each option's range, the
 * config file's grammar, precedence default < file < command line, and
 * errors: usage problems exit EX_KL_USAGE, file problems print every one as
 * FILE:LINE: message and exit EX_KL_CONFIG. stdout and stderr are captured
 * into files of the test's mkdtemp directory. Every load but the ones
 * about the default file passes --config, so no file under SYSCONFDIR can
 * change the outcome. The tests live in config_cmdline.c and config_file.c;
 * this file holds the fixture and the helpers they share (cf_ prefix,
 * declared in check_config.h), the suite and main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* nftw, mkdtemp */
#endif
#include <sys/stat.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_config.h"
#include "check_main.h"
#include "config.h"
#include "kl.h"
#include "log.h"

#define MAX_ARGS	64

char			 cf_dir[PATH_MAX];	/* mkdtemp */
char			 cf_conf[PATH_MAX + 32];	/* dir/keylockd.conf */
struct config		 cf_cfg;
bool			 cf_loaded;
static char		*args[MAX_ARGS + 1];	/* for getopt */
static int		 nargs;
char			 cf_err_out[OUT_MAX];	/* config_load's stderr */
char			 cf_std_out[OUT_MAX];	/* and stdout */

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void
free_args(void)
{
	for (int i = 0; i < nargs; i++)
		free(args[i]);
	nargs = 0;
	args[0] = NULL;
}

/* Forgets where getopt stopped in an earlier test's argv (glibc resets
 * fully only for optind = 0), so tests stay independent under CK_FORK=no. */
static void
reset_getopt(void)
{
	static char	 prog[] = "keylockd";
	static char	*none[] = { prog, NULL };

	optind = 0;
	opterr = 0;
	while (getopt(1, none, "") != -1)
		continue;
	optind = 1;
}

static void
setup(void)
{
	const char	*tmp = getenv("TMPDIR");

	snprintf(cf_dir, sizeof(cf_dir), "%s/check_config.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(cf_dir));
	snprintf(cf_conf, sizeof(cf_conf), "%s/keylockd.conf", cf_dir);
	memset(&cf_cfg, 0, sizeof(cf_cfg));
	cf_loaded = false;
	nargs = 0;
	cf_err_out[0] = cf_std_out[0] = '\0';
	reset_getopt();
}

static void
teardown(void)
{
	if (cf_loaded)
		config_cleanup(&cf_cfg);
	cf_loaded = false;
	free_args();
	nftw(cf_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void
cf_write_conf(const char *text)
{
	FILE	*f = fopen(cf_conf, "w");

	ck_assert_msg(f != NULL, "%s: %s", cf_conf, strerror(errno));
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* Points fd at a fresh file dir/name; returns the saved descriptor. */
static int
redirect(int fd, const char *name)
{
	char	path[PATH_MAX + 32];
	int	saved, tmp;

	snprintf(path, sizeof(path), "%s/%s", cf_dir, name);
	ck_assert_int_ge(saved = dup(fd), 0);
	tmp = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(tmp, 0);
	ck_assert_int_ge(dup2(tmp, fd), 0);
	close(tmp);
	return saved;
}

static void
restore(int fd, int saved, const char *name, char *buf, size_t len)
{
	char	path[PATH_MAX + 32];
	FILE	*f;
	size_t	 n;

	dup2(saved, fd);
	close(saved);
	snprintf(path, sizeof(path), "%s/%s", cf_dir, name);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/*
 * config_load with argv "keylockd" followed by a[0..n); stdout and stderr
 * go to std_out and err_out. A second load in one test cleans up the first.
 */
int
cf_load_array(int n, const char *const *a)
{
	int	rc, saved_err, saved_out;

	if (cf_loaded)
		config_cleanup(&cf_cfg);
	cf_loaded = false;
	free_args();
	ck_assert_int_lt(n, MAX_ARGS);
	args[nargs++] = strdup("keylockd");
	for (int i = 0; i < n; i++)
		args[nargs++] = strdup(a[i]);
	args[nargs] = NULL;

	fflush(stdout);
	fflush(stderr);
	saved_err = redirect(STDERR_FILENO, "stderr");
	saved_out = redirect(STDOUT_FILENO, "stdout");
	rc = config_load(&cf_cfg, nargs, args);
	fflush(stdout);
	fflush(stderr);
	restore(STDOUT_FILENO, saved_out, "stdout", cf_std_out,
	    sizeof(cf_std_out));
	restore(STDERR_FILENO, saved_err, "stderr", cf_err_out,
	    sizeof(cf_err_out));
	cf_loaded = true;
	return rc;
}

/* load_array with the NULL-terminated arguments. */
int
cf_load(const char *first, ...)
{
	const char	*a[MAX_ARGS];
	va_list		 ap;
	int		 n = 0;

	va_start(ap, first);
	for (const char *p = first; p != NULL; p = va_arg(ap, const char *)) {
		ck_assert_int_lt(n, MAX_ARGS - 1);
		a[n++] = p;
	}
	va_end(ap);
	return cf_load_array(n, a);
}

void
cf_expect_every_limit(void)
{
	ck_assert_int_eq(cf_cfg.max_clients, 50);
	ck_assert_int_eq(cf_cfg.max_keys, 8);
	ck_assert_int_eq(cf_cfg.max_locks, 99);
	ck_assert_int_eq(cf_cfg.max_line, 128);
	ck_assert_int_eq(cf_cfg.max_output, 8192);
	ck_assert_int_eq(cf_cfg.default_timeout, 1500);
	ck_assert_int_eq(cf_cfg.max_timeout, 60000);
	ck_assert_int_eq(cf_cfg.default_max_waiters, 7);
	ck_assert_int_eq(cf_cfg.keepalive_idle, 30);
	ck_assert_int_eq(cf_cfg.keepalive_interval, 5);
	ck_assert_int_eq(cf_cfg.keepalive_count, 4);
}

size_t
cf_count_lines(const char *s)
{
	size_t	n = 0;

	for (; *s != '\0'; s++)
		if (*s == '\n')
			n++;
	return n;
}

bool
cf_ends_with(const char *s, const char *suffix)
{
	size_t	ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

TCase *
cf_tcase(Suite *s, const char *name)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *
config_suite(void)
{
	Suite	*s = suite_create("config");

	cf_add_cmdline(s);
	cf_add_file(s);
	cf_add_etcd(s);
	return s;
}

const struct check_program check_program = {
	.name = "check_config",
	.suites = { config_suite, NULL }
};
