/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The config file (its grammar, every bad line reported as FILE:LINE:
 * message with exit EX_KL_CONFIG) and precedence: default < file <
 * command line.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_config.h"
#include "config.h"
#include "kl.h"
#include "log.h"

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
	cf_write_conf(every_setting);
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_str_eq(cf_cfg.file, cf_conf);
	ck_assert_int_eq(cf_cfg.nbinds, 2);
	ck_assert_str_eq(cf_cfg.binds[0], "10.0.0.1");
	ck_assert_str_eq(cf_cfg.binds[1], "::1");
	ck_assert_int_eq(cf_cfg.port, 1234);
	ck_assert(cf_cfg.no_tcp);
	ck_assert_str_eq(cf_cfg.unix_path, "/tmp/x.sock");
	ck_assert_int_eq(cf_cfg.unix_mode, 0600);
	ck_assert_str_eq(cf_cfg.unix_group, "wheel");
	ck_assert_str_eq(cf_cfg.state_dir, "/tmp/state");
	ck_assert_str_eq(cf_cfg.port_file, "/tmp/port");
	cf_expect_every_limit();
	ck_assert_str_eq(cf_cfg.auth_file, "/etc/keylockd/secret");
	ck_assert_str_eq(cf_cfg.metrics, "127.0.0.1:9100");
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_DEBUG);
	ck_assert_str_eq(cf_err_out, "");
}
END_TEST

START_TEST(file_comments_and_blank_lines_are_ignored)
{
	cf_write_conf("# keylockd.conf\n"
	    "\n"
	    "   \n"
	    "\t\n"
	    "  # indented comment\n"
	    "port 1111\n"
	    "#port 2222\n"
	    "\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_int_eq(cf_cfg.port, 1111);
	ck_assert_str_eq(cf_err_out, "");
}
END_TEST

START_TEST(file_comment_after_a_value_is_ignored)
{
	cf_write_conf("port 1111   # the test port\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_int_eq(cf_cfg.port, 1111);
}
END_TEST

START_TEST(file_tolerates_spacing_and_crlf)
{
	cf_write_conf("  port \t 1111 \t\r\n"
	    "state-dir\t/tmp/a dir\r\n"
	    "max-keys 9");	/* no final LF */
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_int_eq(cf_cfg.port, 1111);
	ck_assert_str_eq(cf_cfg.state_dir, "/tmp/a dir");
	ck_assert_int_eq(cf_cfg.max_keys, 9);
}
END_TEST

START_TEST(file_none_sets_no_default_timeout)
{
	cf_write_conf("default-timeout none\n"
	    "max-timeout none\n"
	    "default-max-waiters none\n");
	EXPECT_OK(cf_load("--config", cf_conf, "--default-timeout", "none",
	    NULL));
	ck_assert_int_eq(cf_cfg.default_timeout, KL_NONE);
	ck_assert_int_eq(cf_cfg.max_timeout, KL_NONE);
	ck_assert_int_eq(cf_cfg.default_max_waiters, KL_NONE);
}
END_TEST

START_TEST(file_none_overrides_an_earlier_number)
{
	cf_write_conf("default-timeout 500\n"
	    "default-timeout none\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_int_eq(cf_cfg.default_timeout, KL_NONE);
}
END_TEST

START_TEST(file_flag_takes_yes_or_no)
{
	cf_write_conf("no-tcp no\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert(!cf_cfg.no_tcp);
	cf_write_conf("no-tcp true\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert(cf_cfg.no_tcp);
	cf_write_conf("no-tcp perhaps\n");
	EXPECT_CONFIG_ERR(cf_load("--config", cf_conf, NULL), ":1: no-tcp:");
}
END_TEST

START_TEST(file_unix_with_no_value_disables_the_unix_socket)
{
	cf_write_conf("unix\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_str_eq(cf_cfg.unix_path, "");
}
END_TEST

START_TEST(file_setting_without_value_is_an_error)
{
	cf_write_conf("port\n");
	EXPECT_CONFIG_ERR(cf_load("--config", cf_conf, NULL), ":1: port:");
}
END_TEST

START_TEST(file_command_line_only_names_are_unknown)
{
	cf_write_conf("config /etc/other.conf\n");
	EXPECT_CONFIG_ERR(cf_load("--config", cf_conf, NULL), ":1: config:");
}
END_TEST

START_TEST(file_reports_every_bad_line_with_file_and_line)
{
	char	want[PATH_MAX + 64];
	int	rc;

	cf_write_conf("port 1234\n"		/* 1 */
	    "port 99999\n"			/* 2: out of range */
	    "# fine\n"				/* 3 */
	    "frobnicate yes\n"			/* 4: unknown */
	    "max-keys 8\n"			/* 5 */
	    "log-level loud\n"			/* 6: bad value */
	    "\n");				/* 7 */
	rc = cf_load("--config", cf_conf, NULL);
	ck_assert_int_eq(rc, EX_KL_CONFIG);
	ck_assert_int_eq(rc, 78);
	snprintf(want, sizeof(want), "%s:2: ", cf_conf);
	ck_assert_msg(strstr(cf_err_out, want) != NULL, "no %s in: %s", want,
	    cf_err_out);
	snprintf(want, sizeof(want), "%s:4: ", cf_conf);
	ck_assert_msg(strstr(cf_err_out, want) != NULL, "no %s in: %s", want,
	    cf_err_out);
	snprintf(want, sizeof(want), "%s:6: ", cf_conf);
	ck_assert_msg(strstr(cf_err_out, want) != NULL, "no %s in: %s", want,
	    cf_err_out);
	ck_assert_msg(cf_count_lines(cf_err_out) == 3, "expected 3 lines: %s",
	    cf_err_out);
	/* Each line is FILE:LINE: message. */
	for (const char *p = cf_err_out; *p != '\0'; p = strchr(p, '\n') + 1) {
		ck_assert_msg(strncmp(p, cf_conf, strlen(cf_conf)) == 0 &&
		    p[strlen(cf_conf)] == ':', "line without the file: %s", p);
	}
}
END_TEST

/* A bad metrics value is reported where it is, as every other setting's:
 * its syntax when the file is read; whether it resolves and can be bound
 * at the start, which names the line from metrics_where. */
START_TEST(file_reports_a_bad_metrics_address_with_file_and_line)
{
	static const char *const bad[][2] = {
		{ "127.0.0.1:99999", "port \"99999\": expected a number" },
		{ "127.0.0.1", "expected HOST:PORT or [V6]:PORT" },
		{ "127.0.0.1:", "port \"\": expected a number" },
		{ ":9771", "no host before the port" },
		{ "300.1.2.3:9771", "not an IPv4 address" },
		{ "::1:9771", "an IPv6 address goes in brackets" },
		{ "[::1:9771", "expected [V6]:PORT" },
		{ "[zz::x]:9771", "not an IPv6 address in brackets" },
		{ "mon_1:9771", "not a host name or an address" },
	};
	char	text[1024], want[PATH_MAX + 128];
	size_t	off = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		off += (size_t)snprintf(text + off, sizeof(text) - off,
		    "port 1\nmetrics %s\n", bad[i][0]);
	cf_write_conf(text);
	ck_assert_int_eq(cf_load("--config", cf_conf, NULL), EX_KL_CONFIG);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(want, sizeof(want), "%s:%zu: metrics: %s", cf_conf,
		    2 * i + 2, bad[i][1]);
		ck_assert_msg(strstr(cf_err_out, want) != NULL, "no \"%s\" "
		    "in: %s", want, cf_err_out);
	}
	ck_assert_int_eq(cf_count_lines(cf_err_out),
	    sizeof(bad) / sizeof(bad[0]));
	/* good ones; the last says where it was set */
	cf_write_conf("metrics [::1]:0\n\nmetrics localhost:9771\n"
	    "metrics mon-1.example:80\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	snprintf(want, sizeof(want), "%s:4: metrics", cf_conf);
	ck_assert_str_eq(cf_cfg.metrics_where, want);
	EXPECT_OK(cf_load("--config", cf_conf, "--metrics", "127.0.0.1:0",
	    NULL));
	ck_assert_str_eq(cf_cfg.metrics_where, "--metrics");
	EXPECT_USAGE(cf_load("--config", cf_conf, "--metrics", "::1:0",
	    NULL), "--metrics ::1:0: an IPv6 address goes in brackets");
}
END_TEST

START_TEST(file_with_bad_lines_stops_before_the_command_line)
{
	cf_write_conf("port nope\n");
	EXPECT_CONFIG_ERR(cf_load("--config", cf_conf, "--port", "1", NULL),
	    ":1: port:");
}
END_TEST

START_TEST(missing_config_file_is_an_error)
{
	char	missing[PATH_MAX + 32];

	snprintf(missing, sizeof(missing), "%s/nope.conf", cf_dir);
	EXPECT_CONFIG_ERR(cf_load("--config", missing, NULL), missing);
	ck_assert_ptr_nonnull(strstr(cf_err_out, "No such file"));
}
END_TEST

START_TEST(config_that_is_a_directory_is_an_error)
{
	int	rc = cf_load("--config", cf_dir, NULL);

	ck_assert_int_ne(rc, 0);
	ck_assert_int_ne(rc, -1);
	ck_assert_msg(strstr(cf_err_out, cf_dir) != NULL, "stderr: %s",
	    cf_err_out);
}
END_TEST

/* ---- precedence ---- */

START_TEST(precedence_is_default_then_file_then_command_line)
{
	cf_write_conf("port 1000\n"
	    "max-keys 5\n");
	EXPECT_OK(cf_load("--config", cf_conf, "--port", "2000", NULL));
	ck_assert_int_eq(cf_cfg.port, 2000);		/* command line */
	ck_assert_int_eq(cf_cfg.max_keys, 5);		/* file */
	ck_assert_int_eq(cf_cfg.max_clients, 10000);	/* default */
}
END_TEST

START_TEST(command_line_wins_even_before_config)
{
	cf_write_conf("port 1000\n");
	EXPECT_OK(cf_load("--port", "2000", "--config", cf_conf, NULL));
	ck_assert_int_eq(cf_cfg.port, 2000);
}
END_TEST

START_TEST(command_line_flag_wins_over_file)
{
	cf_write_conf("no-tcp no\n");
	EXPECT_OK(cf_load("--config", cf_conf, "--no-tcp", NULL));
	ck_assert(cf_cfg.no_tcp);
}
END_TEST

START_TEST(command_line_bind_replaces_the_files_binds)
{
	cf_write_conf("bind 10.0.0.1\n"
	    "bind 10.0.0.2\n");
	EXPECT_OK(cf_load("--config", cf_conf, "--bind", "::1", "--bind",
	    "127.0.0.2", NULL));
	ck_assert_int_eq(cf_cfg.nbinds, 2);
	ck_assert_str_eq(cf_cfg.binds[0], "::1");
	ck_assert_str_eq(cf_cfg.binds[1], "127.0.0.2");
}
END_TEST

START_TEST(file_binds_replace_the_default_and_stay_without_command_line)
{
	cf_write_conf("bind 10.0.0.1\n"
	    "bind 10.0.0.2\n");
	EXPECT_OK(cf_load("--config", cf_conf, "--port", "1", NULL));
	ck_assert_int_eq(cf_cfg.nbinds, 2);
	ck_assert_str_eq(cf_cfg.binds[0], "10.0.0.1");
	ck_assert_str_eq(cf_cfg.binds[1], "10.0.0.2");
}
END_TEST

START_TEST(last_config_option_names_the_file)
{
	char	other[PATH_MAX + 32];
	FILE	*f;

	cf_write_conf("port 1000\n");
	snprintf(other, sizeof(other), "%s/other.conf", cf_dir);
	ck_assert_ptr_nonnull(f = fopen(other, "w"));
	fputs("port 3000\n", f);
	fclose(f);
	EXPECT_OK(cf_load("--config", cf_conf, "--config", other, NULL));
	ck_assert_str_eq(cf_cfg.file, other);
	ck_assert_int_eq(cf_cfg.port, 3000);
}
END_TEST

/* ---- issue 3 review: what --check-config must catch ---- */

START_TEST(bind_line_with_two_addresses_gives_two_binds)
{
	cf_write_conf("bind 127.0.0.1 ::1\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_int_eq(cf_cfg.nbinds, 2);
	ck_assert_str_eq(cf_cfg.binds[0], "127.0.0.1");
	ck_assert_str_eq(cf_cfg.binds[1], "::1");
}
END_TEST

START_TEST(overlong_config_line_is_one_error_and_lines_stay_numbered)
{
	char	*text = malloc(6000);

	ck_assert_ptr_nonnull(text);
	memset(text, '#', 5000);
	strcpy(text + 5000, "\nmax-keys x\n");
	cf_write_conf(text);
	free(text);
	EXPECT_CONFIG_ERR(cf_load("--config", cf_conf, NULL),
	    ":1: line longer");
	ck_assert_msg(strstr(cf_err_out, ":2: max-keys") != NULL,
	    "stderr \"%s\"", cf_err_out);
	ck_assert_int_eq(cf_count_lines(cf_err_out), 2);
}
END_TEST

START_TEST(default_timeout_over_max_timeout_is_a_config_error)
{
	EXPECT_CONFIG_ERR(cf_load("--config", "/dev/null", "--default-timeout",
	    "5000", "--max-timeout", "3000", NULL), "default-timeout");
	EXPECT_OK(cf_load("--config", "/dev/null", "--default-timeout", "3000",
	    "--max-timeout", "3000", NULL));
}
END_TEST

START_TEST(abbreviated_option_is_refused)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--auth", "x", NULL),
	    "--auth-file");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-k=3", NULL),
	    "--max-keys");
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-keys=3", NULL));
	ck_assert_int_eq(cf_cfg.max_keys, 3);
}
END_TEST

void
cf_add_file(Suite *s)
{
	TCase	*tc;

	tc = cf_tcase(s, "file");
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
	tcase_add_test(tc,
	    file_reports_a_bad_metrics_address_with_file_and_line);
	tcase_add_test(tc, file_with_bad_lines_stops_before_the_command_line);
	tcase_add_test(tc, missing_config_file_is_an_error);
	tcase_add_test(tc, config_that_is_a_directory_is_an_error);

	tc = cf_tcase(s, "precedence");
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
}
