/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of config_load (config.h, DESIGN.md "Command line of keylockd"
 * and "Config file"): the built-in defaults, each option's range, the
 * config file's grammar, precedence default < file < command line, and
 * errors: usage problems exit EX_KL_USAGE, file problems print every one as
 * FILE:LINE: message and exit EX_KL_CONFIG. stdout and stderr are captured
 * into files of the test's mkdtemp directory. Every load but the ones
 * about the default file passes --config, so no file under SYSCONFDIR can
 * change the outcome.
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

#include "config.h"
#include "kl.h"
#include "log.h"

#define MAX_ARGS	64
#define OUT_MAX		16384

static char		 dir[PATH_MAX];	/* mkdtemp */
static char		 conf[PATH_MAX + 32];	/* dir/keylockd.conf */
static struct config	 cfg;
static bool		 loaded;
static char		*args[MAX_ARGS + 1];	/* for getopt */
static int		 nargs;
static char		 err_out[OUT_MAX];	/* config_load's stderr */
static char		 std_out[OUT_MAX];	/* and stdout */

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

	snprintf(dir, sizeof(dir), "%s/check_config.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(conf, sizeof(conf), "%s/keylockd.conf", dir);
	memset(&cfg, 0, sizeof(cfg));
	loaded = false;
	nargs = 0;
	err_out[0] = std_out[0] = '\0';
	reset_getopt();
}

static void
teardown(void)
{
	if (loaded)
		config_cleanup(&cfg);
	loaded = false;
	free_args();
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void
write_conf(const char *text)
{
	FILE	*f = fopen(conf, "w");

	ck_assert_msg(f != NULL, "%s: %s", conf, strerror(errno));
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* Points fd at a fresh file dir/name; returns the saved descriptor. */
static int
redirect(int fd, const char *name)
{
	char	path[PATH_MAX + 32];
	int	saved, tmp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
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
	snprintf(path, sizeof(path), "%s/%s", dir, name);
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
static int
load_array(int n, const char *const *a)
{
	int	rc, saved_err, saved_out;

	if (loaded)
		config_cleanup(&cfg);
	loaded = false;
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
	rc = config_load(&cfg, nargs, args);
	fflush(stdout);
	fflush(stderr);
	restore(STDOUT_FILENO, saved_out, "stdout", std_out, sizeof(std_out));
	restore(STDERR_FILENO, saved_err, "stderr", err_out, sizeof(err_out));
	loaded = true;
	return rc;
}

/* load_array with the NULL-terminated arguments. */
static int
load(const char *first, ...)
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
	return load_array(n, a);
}

static size_t
count_lines(const char *s)
{
	size_t	n = 0;

	for (; *s != '\0'; s++)
		if (*s == '\n')
			n++;
	return n;
}

static bool
ends_with(const char *s, const char *suffix)
{
	size_t	ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

#define EXPECT_OK(rc) \
	ck_assert_msg((rc) == 0, "config_load returned %d: %s", (rc), err_out)
#define EXPECT_USAGE(rc, needle) do {					\
	int rc_ = (rc);							\
	ck_assert_msg(rc_ == EX_KL_USAGE, "config_load returned %d, not " \
	    "EX_KL_USAGE", rc_);					\
	ck_assert_msg(strstr(err_out, (needle)) != NULL, "stderr \"%s\" " \
	    "lacks \"%s\"", err_out, (needle));				\
} while (0)
#define EXPECT_CONFIG_ERR(rc, needle) do {				\
	int rc_ = (rc);							\
	ck_assert_msg(rc_ == EX_KL_CONFIG, "config_load returned %d, not " \
	    "EX_KL_CONFIG", rc_);					\
	ck_assert_msg(strstr(err_out, (needle)) != NULL, "stderr \"%s\" " \
	    "lacks \"%s\"", err_out, (needle));				\
} while (0)

/* ---- defaults ---- */

START_TEST(defaults_match_the_documentation)
{
	EXPECT_OK(load("--config", "/dev/null", NULL));
	ck_assert_str_eq(cfg.file, "/dev/null");
	ck_assert_int_eq(cfg.nbinds, 1);
	ck_assert_str_eq(cfg.binds[0], "127.0.0.1");
	ck_assert_str_eq(cfg.binds[0], KL_BIND_DEFAULT);
	ck_assert_int_eq(cfg.port, 7711);
	ck_assert(!cfg.no_tcp);
	ck_assert_ptr_nonnull(cfg.unix_path);
	ck_assert_msg(ends_with(cfg.unix_path, "/keylockd/keylockd.sock"),
	    "unix path %s", cfg.unix_path);
	ck_assert_int_eq(cfg.unix_mode, 0660);
	ck_assert_ptr_null(cfg.unix_group);
	ck_assert_ptr_nonnull(cfg.state_dir);
	ck_assert_msg(ends_with(cfg.state_dir, "/lib/keylockd"),
	    "state dir %s", cfg.state_dir);
	ck_assert_ptr_null(cfg.port_file);
	ck_assert_int_eq(cfg.max_clients, 10000);
	ck_assert_int_eq(cfg.max_keys, 64);
	ck_assert_int_eq(cfg.max_locks, 10000);
	ck_assert_int_eq(cfg.max_line, 4096);
	ck_assert_int_eq(cfg.max_output, 1024 * 1024);
	ck_assert_int_eq(cfg.default_timeout, KL_NONE);
	ck_assert_int_eq(cfg.max_timeout, KL_NONE);
	ck_assert_int_eq(cfg.default_max_waiters, KL_NONE);
	ck_assert_int_eq(cfg.keepalive_idle, 60);
	ck_assert_int_eq(cfg.keepalive_interval, 10);
	ck_assert_int_eq(cfg.keepalive_count, 3);
	ck_assert_ptr_null(cfg.auth_file);
	ck_assert_ptr_null(cfg.metrics);
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_INFO);
	ck_assert(!cfg.check_config);
	ck_assert_str_eq(err_out, "");
}
END_TEST

START_TEST(defaults_use_the_named_constants)
{
	EXPECT_OK(load("--config", "/dev/null", NULL));
	ck_assert_int_eq(cfg.port, KL_PORT_DEFAULT);
	ck_assert_int_eq(cfg.max_line, KL_MAX_LINE_DEFAULT);
	ck_assert_int_eq(cfg.max_keys, KL_MAX_KEYS_DEFAULT);
	ck_assert_int_eq(cfg.max_locks, KL_MAX_LOCKS_DEFAULT);
	ck_assert_int_eq(cfg.max_clients, KL_MAX_CLIENTS_DEFAULT);
	ck_assert_int_eq(cfg.max_output, KL_MAX_OUTPUT_DEFAULT);
}
END_TEST

START_TEST(empty_config_file_gives_the_defaults)
{
	write_conf("");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_str_eq(cfg.file, conf);
	ck_assert_int_eq(cfg.port, 7711);
	ck_assert_int_eq(cfg.nbinds, 1);
	ck_assert_str_eq(cfg.binds[0], "127.0.0.1");
}
END_TEST

/* ---- the command line ---- */

START_TEST(port_0_means_any_free_port)
{
	EXPECT_OK(load("--config", "/dev/null", "--port", "0", NULL));
	ck_assert_int_eq(cfg.port, 0);
}
END_TEST

START_TEST(port_65535_is_accepted)
{
	EXPECT_OK(load("--config", "/dev/null", "--port", "65535", NULL));
	ck_assert_int_eq(cfg.port, 65535);
}
END_TEST

START_TEST(port_65536_is_rejected_with_usage)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--port", "65536", NULL),
	    "--port");
}
END_TEST

START_TEST(port_that_is_not_a_number_is_rejected_with_usage)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--port", "77x", NULL),
	    "--port");
	EXPECT_USAGE(load("--config", "/dev/null", "--port", "-1", NULL),
	    "--port");
	EXPECT_USAGE(load("--config", "/dev/null", "--port", "", NULL),
	    "--port");
	EXPECT_USAGE(load("--config", "/dev/null", "--port", " 80", NULL),
	    "--port");
}
END_TEST

START_TEST(option_equals_value_form_is_accepted)
{
	EXPECT_OK(load("--config=/dev/null", "--port=8080", NULL));
	ck_assert_int_eq(cfg.port, 8080);
}
END_TEST

START_TEST(unknown_option_is_rejected_with_usage)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--frobnicate", NULL),
	    "usage");
}
END_TEST

START_TEST(option_missing_its_value_is_rejected_with_usage)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--port", NULL), "usage");
}
END_TEST

START_TEST(positional_argument_is_rejected_with_usage)
{
	EXPECT_USAGE(load("--config", "/dev/null", "stray", NULL), "stray");
}
END_TEST

START_TEST(help_asks_for_exit_0_and_lists_every_option)
{
	ck_assert_int_eq(load("--help", NULL), -1);
	ck_assert_ptr_nonnull(strstr(std_out, "usage"));
	ck_assert_ptr_nonnull(strstr(std_out, "--config"));
	ck_assert_ptr_nonnull(strstr(std_out, "--port"));
	ck_assert_ptr_nonnull(strstr(std_out, "--max-line"));
	ck_assert_ptr_nonnull(strstr(std_out, "--default-timeout"));
}
END_TEST

START_TEST(version_asks_for_exit_0_and_prints_the_version)
{
	ck_assert_int_eq(load("--version", NULL), -1);
	ck_assert_str_eq(std_out, "keylockd " PACKAGE_VERSION "\n");
}
END_TEST

START_TEST(check_config_is_a_flag)
{
	EXPECT_OK(load("--config", "/dev/null", "--check-config", NULL));
	ck_assert(cfg.check_config);
}
END_TEST

START_TEST(no_tcp_takes_no_argument)
{
	EXPECT_OK(load("--config", "/dev/null", "--no-tcp", NULL));
	ck_assert(cfg.no_tcp);
	EXPECT_USAGE(load("--config", "/dev/null", "--no-tcp=yes", NULL),
	    "usage");
}
END_TEST

START_TEST(unix_empty_disables_the_unix_socket)
{
	EXPECT_OK(load("--config", "/dev/null", "--unix", "", NULL));
	ck_assert_str_eq(cfg.unix_path, "");
}
END_TEST

START_TEST(every_setting_is_accepted_on_the_command_line)
{
	EXPECT_OK(load("--config", "/dev/null",
	    "--bind", "10.1.2.3", "--port", "1234", "--no-tcp",
	    "--unix", "/tmp/kl.sock", "--unix-mode", "0600",
	    "--unix-group", "staff", "--state-dir", "/tmp/klstate",
	    "--port-file", "/tmp/kl.port", "--max-clients", "50",
	    "--max-keys", "8", "--max-locks", "99", "--max-line", "128",
	    "--max-output", "8192", "--default-timeout", "1500",
	    "--max-timeout", "60000", "--default-max-waiters", "7",
	    "--tcp-keepalive-idle", "30", "--tcp-keepalive-interval", "5",
	    "--tcp-keepalive-count", "4", "--auth-file", "/tmp/kl.secret",
	    "--metrics", "127.0.0.1:9100", "--log-level", "debug", NULL));
	ck_assert_int_eq(cfg.nbinds, 1);
	ck_assert_str_eq(cfg.binds[0], "10.1.2.3");
	ck_assert_int_eq(cfg.port, 1234);
	ck_assert(cfg.no_tcp);
	ck_assert_str_eq(cfg.unix_path, "/tmp/kl.sock");
	ck_assert_int_eq(cfg.unix_mode, 0600);
	ck_assert_str_eq(cfg.unix_group, "staff");
	ck_assert_str_eq(cfg.state_dir, "/tmp/klstate");
	ck_assert_str_eq(cfg.port_file, "/tmp/kl.port");
	ck_assert_int_eq(cfg.max_clients, 50);
	ck_assert_int_eq(cfg.max_keys, 8);
	ck_assert_int_eq(cfg.max_locks, 99);
	ck_assert_int_eq(cfg.max_line, 128);
	ck_assert_int_eq(cfg.max_output, 8192);
	ck_assert_int_eq(cfg.default_timeout, 1500);
	ck_assert_int_eq(cfg.max_timeout, 60000);
	ck_assert_int_eq(cfg.default_max_waiters, 7);
	ck_assert_int_eq(cfg.keepalive_idle, 30);
	ck_assert_int_eq(cfg.keepalive_interval, 5);
	ck_assert_int_eq(cfg.keepalive_count, 4);
	ck_assert_str_eq(cfg.auth_file, "/tmp/kl.secret");
	ck_assert_str_eq(cfg.metrics, "127.0.0.1:9100");
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_DEBUG);
}
END_TEST

START_TEST(repeated_bind_appends_in_order)
{
	EXPECT_OK(load("--config", "/dev/null", "--bind", "127.0.0.1",
	    "--bind", "::1", "--bind", "192.0.2.7", NULL));
	ck_assert_int_eq(cfg.nbinds, 3);
	ck_assert_str_eq(cfg.binds[0], "127.0.0.1");
	ck_assert_str_eq(cfg.binds[1], "::1");
	ck_assert_str_eq(cfg.binds[2], "192.0.2.7");
}
END_TEST

START_TEST(bind_replaces_the_default_address)
{
	EXPECT_OK(load("--config", "/dev/null", "--bind", "::1", NULL));
	ck_assert_int_eq(cfg.nbinds, 1);
	ck_assert_str_eq(cfg.binds[0], "::1");
}
END_TEST

START_TEST(bind_at_16_addresses_works_and_17_is_rejected)
{
	const char	*a[2 + 2 * (KL_BINDS_MAX + 1)];
	int		 n = 0;

	a[n++] = "--config";
	a[n++] = "/dev/null";
	for (int i = 0; i < KL_BINDS_MAX; i++) {
		a[n++] = "--bind";
		a[n++] = "127.0.0.1";
	}
	EXPECT_OK(load_array(n, a));
	ck_assert_int_eq(cfg.nbinds, KL_BINDS_MAX);
	a[n++] = "--bind";
	a[n++] = "::1";
	EXPECT_USAGE(load_array(n, a), "too many");
}
END_TEST

START_TEST(empty_bind_is_rejected)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--bind", "", NULL),
	    "--bind");
}
END_TEST

START_TEST(max_line_at_its_limits_works_and_one_past_fails)
{
	EXPECT_OK(load("--config", "/dev/null", "--max-line", "64", NULL));
	ck_assert_int_eq(cfg.max_line, KL_MAX_LINE_MIN);
	EXPECT_OK(load("--config", "/dev/null", "--max-line", "1048576",
	    NULL));
	ck_assert_int_eq(cfg.max_line, KL_MAX_LINE_MAX);
	EXPECT_USAGE(load("--config", "/dev/null", "--max-line", "63", NULL),
	    "--max-line");
	EXPECT_USAGE(load("--config", "/dev/null", "--max-line", "1048577",
	    NULL), "--max-line");
}
END_TEST

START_TEST(max_output_below_4096_is_rejected)
{
	EXPECT_OK(load("--config", "/dev/null", "--max-output", "4096",
	    NULL));
	ck_assert_int_eq(cfg.max_output, 4096);
	EXPECT_USAGE(load("--config", "/dev/null", "--max-output", "4095",
	    NULL), "--max-output");
}
END_TEST

START_TEST(max_keys_is_capped_by_the_parser_limit)
{
	EXPECT_OK(load("--config", "/dev/null", "--max-keys", "1024", NULL));
	ck_assert_int_eq(cfg.max_keys, KL_KEYS_HARD_MAX);
	EXPECT_USAGE(load("--config", "/dev/null", "--max-keys", "1025",
	    NULL), "--max-keys");
	EXPECT_USAGE(load("--config", "/dev/null", "--max-keys", "0", NULL),
	    "--max-keys");
}
END_TEST

START_TEST(none_is_accepted_for_timeouts_and_max_waiters)
{
	EXPECT_OK(load("--config", "/dev/null", "--default-timeout", "5",
	    "--default-timeout", "none", "--max-timeout", "none",
	    "--default-max-waiters", "none", NULL));
	ck_assert_int_eq(cfg.default_timeout, KL_NONE);
	ck_assert_int_eq(cfg.max_timeout, KL_NONE);
	ck_assert_int_eq(cfg.default_max_waiters, KL_NONE);
}
END_TEST

START_TEST(none_is_rejected_for_plain_numbers)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--max-clients", "none",
	    NULL), "--max-clients");
}
END_TEST

START_TEST(zero_timeout_and_zero_max_waiters_are_values)
{
	EXPECT_OK(load("--config", "/dev/null", "--default-timeout", "0",
	    "--default-max-waiters", "0", NULL));
	ck_assert_int_eq(cfg.default_timeout, 0);
	ck_assert_int_eq(cfg.default_max_waiters, 0);
}
END_TEST

START_TEST(timeouts_over_kl_ms_max_are_rejected)
{
	EXPECT_OK(load("--config", "/dev/null", "--max-timeout",
	    "1000000000000", NULL));
	ck_assert_int_eq(cfg.max_timeout, (int64_t)KL_MS_MAX);
	EXPECT_USAGE(load("--config", "/dev/null", "--max-timeout",
	    "1000000000001", NULL), "--max-timeout");
	EXPECT_USAGE(load("--config", "/dev/null", "--default-timeout",
	    "99999999999999999999999", NULL), "--default-timeout");
}
END_TEST

START_TEST(unix_mode_is_octal_up_to_0777)
{
	EXPECT_OK(load("--config", "/dev/null", "--unix-mode", "0777", NULL));
	ck_assert_int_eq(cfg.unix_mode, 0777);
	EXPECT_OK(load("--config", "/dev/null", "--unix-mode", "600", NULL));
	ck_assert_int_eq(cfg.unix_mode, 0600);
	EXPECT_USAGE(load("--config", "/dev/null", "--unix-mode", "0800",
	    NULL), "--unix-mode");
	EXPECT_USAGE(load("--config", "/dev/null", "--unix-mode", "01000",
	    NULL), "--unix-mode");
	EXPECT_USAGE(load("--config", "/dev/null", "--unix-mode", "", NULL),
	    "--unix-mode");
}
END_TEST

START_TEST(log_level_takes_the_four_names)
{
	EXPECT_OK(load("--config", "/dev/null", "--log-level", "error", NULL));
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_ERROR);
	EXPECT_OK(load("--config", "/dev/null", "--log-level", "warn", NULL));
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_WARN);
	EXPECT_OK(load("--config", "/dev/null", "--log-level", "info", NULL));
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_INFO);
	EXPECT_OK(load("--config", "/dev/null", "--log-level", "debug", NULL));
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_DEBUG);
	EXPECT_USAGE(load("--config", "/dev/null", "--log-level", "loud",
	    NULL), "--log-level");
}
END_TEST

START_TEST(empty_string_settings_are_rejected)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--state-dir", "", NULL),
	    "--state-dir");
}
END_TEST

START_TEST(rejected_bundled_short_option_does_not_leak_into_next_load)
{
	/* getopt keeps its place inside "-xy" after rejecting x; the next
	 * config_load (a reload, or the next test) must start afresh. */
	EXPECT_USAGE(load("-xy", NULL), "usage");
	EXPECT_OK(load("--config", "/dev/null", "--port", "5", NULL));
	ck_assert_int_eq(cfg.port, 5);
}
END_TEST

START_TEST(loading_twice_gives_the_same_result)
{
	EXPECT_OK(load("--config", "/dev/null", "--port", "4242", NULL));
	ck_assert_int_eq(cfg.port, 4242);
	EXPECT_OK(load("--config", "/dev/null", NULL));
	ck_assert_int_eq(cfg.port, 7711);
}
END_TEST

START_TEST(cleanup_twice_is_harmless)
{
	EXPECT_OK(load("--config", "/dev/null", "--bind", "::1", NULL));
	config_cleanup(&cfg);
	config_cleanup(&cfg);
	ck_assert_int_eq(cfg.nbinds, 0);
	ck_assert_ptr_null(cfg.state_dir);
	loaded = false;
}
END_TEST

/* ---- the config file ---- */

static const char every_setting[] =
	"bind 10.0.0.1\n"
	"bind ::1\n"
	"port 1234\n"
	"no-tcp yes\n"
	"unix /tmp/x.sock\n"
	"unix-mode 0600\n"
	"unix-group wheel\n"
	"state-dir /tmp/state\n"
	"port-file /tmp/port\n"
	"max-clients 50\n"
	"max-keys 8\n"
	"max-locks 99\n"
	"max-line 128\n"
	"max-output 8192\n"
	"default-timeout 1500\n"
	"max-timeout 60000\n"
	"default-max-waiters 7\n"
	"tcp-keepalive-idle 30\n"
	"tcp-keepalive-interval 5\n"
	"tcp-keepalive-count 4\n"
	"auth-file /etc/keylockd/secret\n"
	"metrics 127.0.0.1:9100\n"
	"log-level debug\n";

START_TEST(file_sets_every_setting)
{
	write_conf(every_setting);
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_str_eq(cfg.file, conf);
	ck_assert_int_eq(cfg.nbinds, 2);
	ck_assert_str_eq(cfg.binds[0], "10.0.0.1");
	ck_assert_str_eq(cfg.binds[1], "::1");
	ck_assert_int_eq(cfg.port, 1234);
	ck_assert(cfg.no_tcp);
	ck_assert_str_eq(cfg.unix_path, "/tmp/x.sock");
	ck_assert_int_eq(cfg.unix_mode, 0600);
	ck_assert_str_eq(cfg.unix_group, "wheel");
	ck_assert_str_eq(cfg.state_dir, "/tmp/state");
	ck_assert_str_eq(cfg.port_file, "/tmp/port");
	ck_assert_int_eq(cfg.max_clients, 50);
	ck_assert_int_eq(cfg.max_keys, 8);
	ck_assert_int_eq(cfg.max_locks, 99);
	ck_assert_int_eq(cfg.max_line, 128);
	ck_assert_int_eq(cfg.max_output, 8192);
	ck_assert_int_eq(cfg.default_timeout, 1500);
	ck_assert_int_eq(cfg.max_timeout, 60000);
	ck_assert_int_eq(cfg.default_max_waiters, 7);
	ck_assert_int_eq(cfg.keepalive_idle, 30);
	ck_assert_int_eq(cfg.keepalive_interval, 5);
	ck_assert_int_eq(cfg.keepalive_count, 4);
	ck_assert_str_eq(cfg.auth_file, "/etc/keylockd/secret");
	ck_assert_str_eq(cfg.metrics, "127.0.0.1:9100");
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_DEBUG);
	ck_assert_str_eq(err_out, "");
}
END_TEST

START_TEST(file_comments_and_blank_lines_are_ignored)
{
	write_conf("# keylockd.conf\n"
	    "\n"
	    "   \n"
	    "\t\n"
	    "  # indented comment\n"
	    "port 1111\n"
	    "#port 2222\n"
	    "\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_int_eq(cfg.port, 1111);
	ck_assert_str_eq(err_out, "");
}
END_TEST

START_TEST(file_comment_after_a_value_is_ignored)
{
	write_conf("port 1111   # the test port\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_int_eq(cfg.port, 1111);
}
END_TEST

START_TEST(file_tolerates_spacing_and_crlf)
{
	write_conf("  port \t 1111 \t\r\n"
	    "state-dir\t/tmp/a dir\r\n"
	    "max-keys 9");	/* no final LF */
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_int_eq(cfg.port, 1111);
	ck_assert_str_eq(cfg.state_dir, "/tmp/a dir");
	ck_assert_int_eq(cfg.max_keys, 9);
}
END_TEST

START_TEST(file_none_sets_no_default_timeout)
{
	write_conf("default-timeout none\n"
	    "max-timeout none\n"
	    "default-max-waiters none\n");
	EXPECT_OK(load("--config", conf, "--default-timeout", "none", NULL));
	ck_assert_int_eq(cfg.default_timeout, KL_NONE);
	ck_assert_int_eq(cfg.max_timeout, KL_NONE);
	ck_assert_int_eq(cfg.default_max_waiters, KL_NONE);
}
END_TEST

START_TEST(file_none_overrides_an_earlier_number)
{
	write_conf("default-timeout 500\n"
	    "default-timeout none\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_int_eq(cfg.default_timeout, KL_NONE);
}
END_TEST

START_TEST(file_flag_takes_yes_or_no)
{
	write_conf("no-tcp no\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert(!cfg.no_tcp);
	write_conf("no-tcp true\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert(cfg.no_tcp);
	write_conf("no-tcp perhaps\n");
	EXPECT_CONFIG_ERR(load("--config", conf, NULL), ":1: no-tcp:");
}
END_TEST

START_TEST(file_unix_with_no_value_disables_the_unix_socket)
{
	write_conf("unix\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_str_eq(cfg.unix_path, "");
}
END_TEST

START_TEST(file_setting_without_value_is_an_error)
{
	write_conf("port\n");
	EXPECT_CONFIG_ERR(load("--config", conf, NULL), ":1: port:");
}
END_TEST

START_TEST(file_command_line_only_names_are_unknown)
{
	write_conf("config /etc/other.conf\n");
	EXPECT_CONFIG_ERR(load("--config", conf, NULL), ":1: config:");
}
END_TEST

START_TEST(file_reports_every_bad_line_with_file_and_line)
{
	char	want[PATH_MAX + 64];
	int	rc;

	write_conf("port 1234\n"		/* 1 */
	    "port 99999\n"			/* 2: out of range */
	    "# fine\n"				/* 3 */
	    "frobnicate yes\n"			/* 4: unknown */
	    "max-keys 8\n"			/* 5 */
	    "log-level loud\n"			/* 6: bad value */
	    "\n");				/* 7 */
	rc = load("--config", conf, NULL);
	ck_assert_int_eq(rc, EX_KL_CONFIG);
	ck_assert_int_eq(rc, 78);
	snprintf(want, sizeof(want), "%s:2: ", conf);
	ck_assert_msg(strstr(err_out, want) != NULL, "no %s in: %s", want,
	    err_out);
	snprintf(want, sizeof(want), "%s:4: ", conf);
	ck_assert_msg(strstr(err_out, want) != NULL, "no %s in: %s", want,
	    err_out);
	snprintf(want, sizeof(want), "%s:6: ", conf);
	ck_assert_msg(strstr(err_out, want) != NULL, "no %s in: %s", want,
	    err_out);
	ck_assert_msg(count_lines(err_out) == 3, "expected 3 lines: %s",
	    err_out);
	/* Each line is FILE:LINE: message. */
	for (const char *p = err_out; *p != '\0'; p = strchr(p, '\n') + 1) {
		ck_assert_msg(strncmp(p, conf, strlen(conf)) == 0 &&
		    p[strlen(conf)] == ':', "line without the file: %s", p);
	}
}
END_TEST

START_TEST(file_with_bad_lines_stops_before_the_command_line)
{
	write_conf("port nope\n");
	EXPECT_CONFIG_ERR(load("--config", conf, "--port", "1", NULL),
	    ":1: port:");
}
END_TEST

START_TEST(missing_config_file_is_an_error)
{
	char	missing[PATH_MAX + 32];

	snprintf(missing, sizeof(missing), "%s/nope.conf", dir);
	EXPECT_CONFIG_ERR(load("--config", missing, NULL), missing);
	ck_assert_ptr_nonnull(strstr(err_out, "No such file"));
}
END_TEST

START_TEST(config_that_is_a_directory_is_an_error)
{
	int	rc = load("--config", dir, NULL);

	ck_assert_int_ne(rc, 0);
	ck_assert_int_ne(rc, -1);
	ck_assert_msg(strstr(err_out, dir) != NULL, "stderr: %s", err_out);
}
END_TEST

/* ---- precedence ---- */

START_TEST(precedence_is_default_then_file_then_command_line)
{
	write_conf("port 1000\n"
	    "max-keys 5\n");
	EXPECT_OK(load("--config", conf, "--port", "2000", NULL));
	ck_assert_int_eq(cfg.port, 2000);		/* command line */
	ck_assert_int_eq(cfg.max_keys, 5);		/* file */
	ck_assert_int_eq(cfg.max_clients, 10000);	/* default */
}
END_TEST

START_TEST(command_line_wins_even_before_config)
{
	write_conf("port 1000\n");
	EXPECT_OK(load("--port", "2000", "--config", conf, NULL));
	ck_assert_int_eq(cfg.port, 2000);
}
END_TEST

START_TEST(command_line_flag_wins_over_file)
{
	write_conf("no-tcp no\n");
	EXPECT_OK(load("--config", conf, "--no-tcp", NULL));
	ck_assert(cfg.no_tcp);
}
END_TEST

START_TEST(command_line_bind_replaces_the_files_binds)
{
	write_conf("bind 10.0.0.1\n"
	    "bind 10.0.0.2\n");
	EXPECT_OK(load("--config", conf, "--bind", "::1", "--bind",
	    "127.0.0.2", NULL));
	ck_assert_int_eq(cfg.nbinds, 2);
	ck_assert_str_eq(cfg.binds[0], "::1");
	ck_assert_str_eq(cfg.binds[1], "127.0.0.2");
}
END_TEST

START_TEST(file_binds_replace_the_default_and_stay_without_command_line)
{
	write_conf("bind 10.0.0.1\n"
	    "bind 10.0.0.2\n");
	EXPECT_OK(load("--config", conf, "--port", "1", NULL));
	ck_assert_int_eq(cfg.nbinds, 2);
	ck_assert_str_eq(cfg.binds[0], "10.0.0.1");
	ck_assert_str_eq(cfg.binds[1], "10.0.0.2");
}
END_TEST

START_TEST(last_config_option_names_the_file)
{
	char	other[PATH_MAX + 32];
	FILE	*f;

	write_conf("port 1000\n");
	snprintf(other, sizeof(other), "%s/other.conf", dir);
	ck_assert_ptr_nonnull(f = fopen(other, "w"));
	fputs("port 3000\n", f);
	fclose(f);
	EXPECT_OK(load("--config", conf, "--config", other, NULL));
	ck_assert_str_eq(cfg.file, other);
	ck_assert_int_eq(cfg.port, 3000);
}
END_TEST

/* ---- issue 3 review: what --check-config must catch ---- */

START_TEST(bind_line_with_two_addresses_gives_two_binds)
{
	write_conf("bind 127.0.0.1 ::1\n");
	EXPECT_OK(load("--config", conf, NULL));
	ck_assert_int_eq(cfg.nbinds, 2);
	ck_assert_str_eq(cfg.binds[0], "127.0.0.1");
	ck_assert_str_eq(cfg.binds[1], "::1");
}
END_TEST

START_TEST(overlong_config_line_is_one_error_and_lines_stay_numbered)
{
	char	*text = malloc(6000);

	ck_assert_ptr_nonnull(text);
	memset(text, '#', 5000);
	strcpy(text + 5000, "\nmax-keys x\n");
	write_conf(text);
	free(text);
	EXPECT_CONFIG_ERR(load("--config", conf, NULL), ":1: line longer");
	ck_assert_msg(strstr(err_out, ":2: max-keys") != NULL, "stderr \"%s\"",
	    err_out);
	ck_assert_int_eq(count_lines(err_out), 2);
}
END_TEST

START_TEST(default_timeout_over_max_timeout_is_a_config_error)
{
	EXPECT_CONFIG_ERR(load("--config", "/dev/null", "--default-timeout",
	    "5000", "--max-timeout", "3000", NULL), "default-timeout");
	EXPECT_OK(load("--config", "/dev/null", "--default-timeout", "3000",
	    "--max-timeout", "3000", NULL));
}
END_TEST

START_TEST(abbreviated_option_is_refused)
{
	EXPECT_USAGE(load("--config", "/dev/null", "--auth", "x", NULL),
	    "--auth-file");
	EXPECT_USAGE(load("--config", "/dev/null", "--max-k=3", NULL),
	    "--max-keys");
	EXPECT_OK(load("--config", "/dev/null", "--max-keys=3", NULL));
	ck_assert_int_eq(cfg.max_keys, 3);
}
END_TEST

static Suite *
config_suite(void)
{
	Suite	*s = suite_create("config");
	TCase	*tc;

	tc = tcase_create("defaults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, defaults_match_the_documentation);
	tcase_add_test(tc, defaults_use_the_named_constants);
	tcase_add_test(tc, empty_config_file_gives_the_defaults);
	suite_add_tcase(s, tc);

	tc = tcase_create("command_line");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, port_0_means_any_free_port);
	tcase_add_test(tc, port_65535_is_accepted);
	tcase_add_test(tc, port_65536_is_rejected_with_usage);
	tcase_add_test(tc, port_that_is_not_a_number_is_rejected_with_usage);
	tcase_add_test(tc, option_equals_value_form_is_accepted);
	tcase_add_test(tc, unknown_option_is_rejected_with_usage);
	tcase_add_test(tc, option_missing_its_value_is_rejected_with_usage);
	tcase_add_test(tc, positional_argument_is_rejected_with_usage);
	tcase_add_test(tc, help_asks_for_exit_0_and_lists_every_option);
	tcase_add_test(tc, version_asks_for_exit_0_and_prints_the_version);
	tcase_add_test(tc, check_config_is_a_flag);
	tcase_add_test(tc, no_tcp_takes_no_argument);
	tcase_add_test(tc, unix_empty_disables_the_unix_socket);
	tcase_add_test(tc, every_setting_is_accepted_on_the_command_line);
	tcase_add_test(tc, repeated_bind_appends_in_order);
	tcase_add_test(tc, bind_replaces_the_default_address);
	tcase_add_test(tc, bind_at_16_addresses_works_and_17_is_rejected);
	tcase_add_test(tc, empty_bind_is_rejected);
	tcase_add_test(tc, max_line_at_its_limits_works_and_one_past_fails);
	tcase_add_test(tc, max_output_below_4096_is_rejected);
	tcase_add_test(tc, max_keys_is_capped_by_the_parser_limit);
	tcase_add_test(tc, none_is_accepted_for_timeouts_and_max_waiters);
	tcase_add_test(tc, none_is_rejected_for_plain_numbers);
	tcase_add_test(tc, zero_timeout_and_zero_max_waiters_are_values);
	tcase_add_test(tc, timeouts_over_kl_ms_max_are_rejected);
	tcase_add_test(tc, unix_mode_is_octal_up_to_0777);
	tcase_add_test(tc, log_level_takes_the_four_names);
	tcase_add_test(tc, empty_string_settings_are_rejected);
	tcase_add_test(tc,
	    rejected_bundled_short_option_does_not_leak_into_next_load);
	tcase_add_test(tc, loading_twice_gives_the_same_result);
	tcase_add_test(tc, cleanup_twice_is_harmless);
	suite_add_tcase(s, tc);

	tc = tcase_create("file");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, file_sets_every_setting);
	tcase_add_test(tc, file_comments_and_blank_lines_are_ignored);
	tcase_add_test(tc, file_comment_after_a_value_is_ignored);
	tcase_add_test(tc, file_tolerates_spacing_and_crlf);
	tcase_add_test(tc, file_none_sets_no_default_timeout);
	tcase_add_test(tc, file_none_overrides_an_earlier_number);
	tcase_add_test(tc, file_flag_takes_yes_or_no);
	tcase_add_test(tc, file_unix_with_no_value_disables_the_unix_socket);
	tcase_add_test(tc, file_setting_without_value_is_an_error);
	tcase_add_test(tc, file_command_line_only_names_are_unknown);
	tcase_add_test(tc, file_reports_every_bad_line_with_file_and_line);
	tcase_add_test(tc, file_with_bad_lines_stops_before_the_command_line);
	tcase_add_test(tc, missing_config_file_is_an_error);
	tcase_add_test(tc, config_that_is_a_directory_is_an_error);
	suite_add_tcase(s, tc);

	tc = tcase_create("precedence");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, precedence_is_default_then_file_then_command_line);
	tcase_add_test(tc, command_line_wins_even_before_config);
	tcase_add_test(tc, command_line_flag_wins_over_file);
	tcase_add_test(tc, command_line_bind_replaces_the_files_binds);
	tcase_add_test(tc,
	    file_binds_replace_the_default_and_stay_without_command_line);
	tcase_add_test(tc, last_config_option_names_the_file);
	tcase_add_test(tc, bind_line_with_two_addresses_gives_two_binds);
	tcase_add_test(tc,
	    overlong_config_line_is_one_error_and_lines_stay_numbered);
	tcase_add_test(tc, default_timeout_over_max_timeout_is_a_config_error);
	tcase_add_test(tc, abbreviated_option_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr = srunner_create(config_suite());
	int	 nfailed;

	srunner_run_all(sr, CK_NORMAL);
	nfailed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfailed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
