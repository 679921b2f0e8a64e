/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The built-in defaults and the command line: each option's range and
 * form, usage errors with exit EX_KL_USAGE, --help and --version, and
 * loads that leave nothing behind for the next.
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

/* ---- defaults ---- */

START_TEST(defaults_match_the_documentation)
{
	EXPECT_OK(cf_load("--config", "/dev/null", NULL));
	ck_assert_str_eq(cf_cfg.file, "/dev/null");
	ck_assert_int_eq(cf_cfg.nbinds, 1);
	ck_assert_str_eq(cf_cfg.binds[0], "127.0.0.1");
	ck_assert_str_eq(cf_cfg.binds[0], KL_BIND_DEFAULT);
	ck_assert_int_eq(cf_cfg.port, 7711);
	ck_assert(!cf_cfg.no_tcp);
	ck_assert_ptr_nonnull(cf_cfg.unix_path);
	ck_assert_msg(cf_ends_with(cf_cfg.unix_path, "/keylockd/keylockd.sock"),
	    "unix path %s", cf_cfg.unix_path);
	ck_assert_int_eq(cf_cfg.unix_mode, 0660);
	ck_assert_ptr_null(cf_cfg.unix_group);
	ck_assert_ptr_nonnull(cf_cfg.state_dir);
	ck_assert_msg(cf_ends_with(cf_cfg.state_dir, "/lib/keylockd"),
	    "state dir %s", cf_cfg.state_dir);
	ck_assert_ptr_null(cf_cfg.port_file);
	ck_assert_int_eq(cf_cfg.max_clients, 10000);
	ck_assert_int_eq(cf_cfg.max_keys, 64);
	ck_assert_int_eq(cf_cfg.max_locks, 10000);
	ck_assert_int_eq(cf_cfg.max_line, 4096);
	ck_assert_int_eq(cf_cfg.max_output, 1024 * 1024);
	ck_assert_int_eq(cf_cfg.default_timeout, KL_NONE);
	ck_assert_int_eq(cf_cfg.max_timeout, KL_NONE);
	ck_assert_int_eq(cf_cfg.default_max_waiters, KL_NONE);
	ck_assert_int_eq(cf_cfg.keepalive_idle, 60);
	ck_assert_int_eq(cf_cfg.keepalive_interval, 10);
	ck_assert_int_eq(cf_cfg.keepalive_count, 3);
	ck_assert_ptr_null(cf_cfg.auth_file);
	ck_assert_ptr_null(cf_cfg.metrics);
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_INFO);
	ck_assert(!cf_cfg.check_config);
	ck_assert_str_eq(cf_err_out, "");
}
END_TEST

START_TEST(defaults_use_the_named_constants)
{
	EXPECT_OK(cf_load("--config", "/dev/null", NULL));
	ck_assert_int_eq(cf_cfg.port, KL_PORT_DEFAULT);
	ck_assert_int_eq(cf_cfg.max_line, KL_MAX_LINE_DEFAULT);
	ck_assert_int_eq(cf_cfg.max_keys, KL_MAX_KEYS_DEFAULT);
	ck_assert_int_eq(cf_cfg.max_locks, KL_MAX_LOCKS_DEFAULT);
	ck_assert_int_eq(cf_cfg.max_clients, KL_MAX_CLIENTS_DEFAULT);
	ck_assert_int_eq(cf_cfg.max_output, KL_MAX_OUTPUT_DEFAULT);
}
END_TEST

START_TEST(empty_config_file_gives_the_defaults)
{
	cf_write_conf("");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_str_eq(cf_cfg.file, cf_conf);
	ck_assert_int_eq(cf_cfg.port, 7711);
	ck_assert_int_eq(cf_cfg.nbinds, 1);
	ck_assert_str_eq(cf_cfg.binds[0], "127.0.0.1");
}
END_TEST

/* ---- the command line ---- */

START_TEST(port_0_means_any_free_port)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--port", "0", NULL));
	ck_assert_int_eq(cf_cfg.port, 0);
}
END_TEST

START_TEST(port_65535_is_accepted)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--port", "65535", NULL));
	ck_assert_int_eq(cf_cfg.port, 65535);
}
END_TEST

START_TEST(port_65536_is_rejected_with_usage)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--port", "65536", NULL),
	    "--port");
}
END_TEST

START_TEST(port_that_is_not_a_number_is_rejected_with_usage)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--port", "77x", NULL),
	    "--port");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--port", "-1", NULL),
	    "--port");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--port", "", NULL),
	    "--port");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--port", " 80", NULL),
	    "--port");
}
END_TEST

START_TEST(option_equals_value_form_is_accepted)
{
	EXPECT_OK(cf_load("--config=/dev/null", "--port=8080", NULL));
	ck_assert_int_eq(cf_cfg.port, 8080);
}
END_TEST

START_TEST(unknown_option_is_rejected_with_usage)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--frobnicate", NULL),
	    "usage");
}
END_TEST

START_TEST(option_missing_its_value_is_rejected_with_usage)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--port", NULL), "usage");
}
END_TEST

START_TEST(positional_argument_is_rejected_with_usage)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "stray", NULL), "stray");
}
END_TEST

START_TEST(help_asks_for_exit_0_and_lists_every_option)
{
	ck_assert_int_eq(cf_load("--help", NULL), -1);
	ck_assert_ptr_nonnull(strstr(cf_std_out, "usage"));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--config"));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--port"));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--max-line"));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--default-timeout"));
}
END_TEST

/* Every option that takes a value names it, as --config FILE does. */
START_TEST(help_names_every_options_argument)
{
	const char	*p, *nl;
	int		 n = 0;

	ck_assert_int_eq(cf_load("--help", NULL), -1);
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--port N "));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--bind ADDR "));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--default-timeout MS|none "));
	ck_assert_ptr_nonnull(strstr(cf_std_out, "--metrics ADDR:PORT "));
	for (p = cf_std_out; (p = strstr(p, "\n  --")) != NULL; p = nl) {
		const char	*name = p + 5, *sp = strchr(name, ' ');

		nl = strchr(name, '\n');
		ck_assert_ptr_nonnull(sp);
		n++;
		if (strncmp(name, "no-tcp ", 7) == 0 ||
		    strncmp(name, "status-names ", 13) == 0 ||
		    strncmp(name, "check-config ", 13) == 0 ||
		    strncmp(name, "version,", 8) == 0)
			continue;
		ck_assert_msg(sp[1] >= 'A' && sp[1] <= 'Z', "no argument name: "
		    "%.*s", (int)(nl - name), name);
	}
	ck_assert_int_ge(n, 25);
}
END_TEST

START_TEST(version_asks_for_exit_0_and_prints_the_version)
{
	ck_assert_int_eq(cf_load("--version", NULL), -1);
	ck_assert_str_eq(cf_std_out, "keylockd " PACKAGE_VERSION "\n");
}
END_TEST

START_TEST(check_config_is_a_flag)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--check-config", NULL));
	ck_assert(cf_cfg.check_config);
}
END_TEST

START_TEST(no_tcp_takes_no_argument)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--no-tcp", NULL));
	ck_assert(cf_cfg.no_tcp);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--no-tcp=yes", NULL),
	    "usage");
}
END_TEST

START_TEST(unix_empty_disables_the_unix_socket)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--unix", "", NULL));
	ck_assert_str_eq(cf_cfg.unix_path, "");
}
END_TEST

START_TEST(every_setting_is_accepted_on_the_command_line)
{
	EXPECT_OK(cf_load("--config", "/dev/null",
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
	ck_assert_int_eq(cf_cfg.nbinds, 1);
	ck_assert_str_eq(cf_cfg.binds[0], "10.1.2.3");
	ck_assert_int_eq(cf_cfg.port, 1234);
	ck_assert(cf_cfg.no_tcp);
	ck_assert_str_eq(cf_cfg.unix_path, "/tmp/kl.sock");
	ck_assert_int_eq(cf_cfg.unix_mode, 0600);
	ck_assert_str_eq(cf_cfg.unix_group, "staff");
	ck_assert_str_eq(cf_cfg.state_dir, "/tmp/klstate");
	ck_assert_str_eq(cf_cfg.port_file, "/tmp/kl.port");
	cf_expect_every_limit();
	ck_assert_str_eq(cf_cfg.auth_file, "/tmp/kl.secret");
	ck_assert_str_eq(cf_cfg.metrics, "127.0.0.1:9100");
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_DEBUG);
}
END_TEST

START_TEST(repeated_bind_appends_in_order)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--bind", "127.0.0.1",
	    "--bind", "::1", "--bind", "192.0.2.7", NULL));
	ck_assert_int_eq(cf_cfg.nbinds, 3);
	ck_assert_str_eq(cf_cfg.binds[0], "127.0.0.1");
	ck_assert_str_eq(cf_cfg.binds[1], "::1");
	ck_assert_str_eq(cf_cfg.binds[2], "192.0.2.7");
}
END_TEST

START_TEST(bind_replaces_the_default_address)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--bind", "::1", NULL));
	ck_assert_int_eq(cf_cfg.nbinds, 1);
	ck_assert_str_eq(cf_cfg.binds[0], "::1");
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
	EXPECT_OK(cf_load_array(n, a));
	ck_assert_int_eq(cf_cfg.nbinds, KL_BINDS_MAX);
	a[n++] = "--bind";
	a[n++] = "::1";
	EXPECT_USAGE(cf_load_array(n, a), "too many");
}
END_TEST

START_TEST(empty_bind_is_rejected)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--bind", "", NULL),
	    "--bind");
}
END_TEST

START_TEST(max_line_at_its_limits_works_and_one_past_fails)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-line", "64", NULL));
	ck_assert_int_eq(cf_cfg.max_line, KL_MAX_LINE_MIN);
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-line", "1048576",
	    NULL));
	ck_assert_int_eq(cf_cfg.max_line, KL_MAX_LINE_MAX);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-line", "63", NULL),
	    "--max-line");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-line", "1048577",
	    NULL), "--max-line");
}
END_TEST

START_TEST(max_output_below_4096_is_rejected)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-output", "4096",
	    NULL));
	ck_assert_int_eq(cf_cfg.max_output, 4096);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-output", "4095",
	    NULL), "--max-output");
}
END_TEST

START_TEST(max_keys_is_capped_by_the_parser_limit)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-keys", "1024", NULL));
	ck_assert_int_eq(cf_cfg.max_keys, KL_KEYS_HARD_MAX);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-keys", "1025",
	    NULL), "--max-keys");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-keys", "0", NULL),
	    "--max-keys");
}
END_TEST

START_TEST(none_is_accepted_for_timeouts_and_max_waiters)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--default-timeout", "5",
	    "--default-timeout", "none", "--max-timeout", "none",
	    "--default-max-waiters", "none", NULL));
	ck_assert_int_eq(cf_cfg.default_timeout, KL_NONE);
	ck_assert_int_eq(cf_cfg.max_timeout, KL_NONE);
	ck_assert_int_eq(cf_cfg.default_max_waiters, KL_NONE);
}
END_TEST

START_TEST(none_is_rejected_for_plain_numbers)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-clients", "none",
	    NULL), "--max-clients");
}
END_TEST

START_TEST(zero_timeout_and_zero_max_waiters_are_values)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--default-timeout", "0",
	    "--default-max-waiters", "0", NULL));
	ck_assert_int_eq(cf_cfg.default_timeout, 0);
	ck_assert_int_eq(cf_cfg.default_max_waiters, 0);
}
END_TEST

START_TEST(timeouts_over_kl_ms_max_are_rejected)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-timeout",
	    "1000000000000", NULL));
	ck_assert_int_eq(cf_cfg.max_timeout, (int64_t)KL_MS_MAX);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--max-timeout",
	    "1000000000001", NULL), "--max-timeout");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--default-timeout",
	    "99999999999999999999999", NULL), "--default-timeout");
}
END_TEST

START_TEST(unix_mode_is_octal_up_to_0777)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--unix-mode", "0777",
	    NULL));
	ck_assert_int_eq(cf_cfg.unix_mode, 0777);
	EXPECT_OK(cf_load("--config", "/dev/null", "--unix-mode", "600", NULL));
	ck_assert_int_eq(cf_cfg.unix_mode, 0600);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--unix-mode", "0800",
	    NULL), "--unix-mode");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--unix-mode", "01000",
	    NULL), "--unix-mode");
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--unix-mode", "", NULL),
	    "--unix-mode");
}
END_TEST

START_TEST(log_level_takes_the_four_names)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--log-level", "error",
	    NULL));
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_ERROR);
	EXPECT_OK(cf_load("--config", "/dev/null", "--log-level", "warn",
	    NULL));
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_WARN);
	EXPECT_OK(cf_load("--config", "/dev/null", "--log-level", "info",
	    NULL));
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_INFO);
	EXPECT_OK(cf_load("--config", "/dev/null", "--log-level", "debug",
	    NULL));
	ck_assert_int_eq(cf_cfg.log_level, LOG_LEVEL_DEBUG);
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--log-level", "loud",
	    NULL), "--log-level");
}
END_TEST

START_TEST(empty_string_settings_are_rejected)
{
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--state-dir", "", NULL),
	    "--state-dir");
}
END_TEST

START_TEST(rejected_bundled_short_option_does_not_leak_into_next_load)
{
	/* getopt keeps its place inside "-xy" after rejecting x; the next
	 * config_load (a reload, or the next test) must start afresh. */
	EXPECT_USAGE(cf_load("-xy", NULL), "usage");
	EXPECT_OK(cf_load("--config", "/dev/null", "--port", "5", NULL));
	ck_assert_int_eq(cf_cfg.port, 5);
}
END_TEST

START_TEST(loading_twice_gives_the_same_result)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--port", "4242", NULL));
	ck_assert_int_eq(cf_cfg.port, 4242);
	EXPECT_OK(cf_load("--config", "/dev/null", NULL));
	ck_assert_int_eq(cf_cfg.port, 7711);
}
END_TEST

START_TEST(cleanup_twice_is_harmless)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--bind", "::1", NULL));
	config_cleanup(&cf_cfg);
	config_cleanup(&cf_cfg);
	ck_assert_int_eq(cf_cfg.nbinds, 0);
	ck_assert_ptr_null(cf_cfg.state_dir);
	cf_loaded = false;
}
END_TEST

void
cf_add_cmdline(Suite *s)
{
	TCase	*tc;

	tc = cf_tcase(s, "defaults");
	tcase_add_test(tc, defaults_match_the_documentation);
	tcase_add_test(tc, defaults_use_the_named_constants);
	tcase_add_test(tc, empty_config_file_gives_the_defaults);

	tc = cf_tcase(s, "command_line");
	tcase_add_test(tc, port_0_means_any_free_port);
	tcase_add_test(tc, port_65535_is_accepted);
	tcase_add_test(tc, port_65536_is_rejected_with_usage);
	tcase_add_test(tc, port_that_is_not_a_number_is_rejected_with_usage);
	tcase_add_test(tc, option_equals_value_form_is_accepted);
	tcase_add_test(tc, unknown_option_is_rejected_with_usage);
	tcase_add_test(tc, option_missing_its_value_is_rejected_with_usage);
	tcase_add_test(tc, positional_argument_is_rejected_with_usage);
	tcase_add_test(tc, help_asks_for_exit_0_and_lists_every_option);
	tcase_add_test(tc, help_names_every_options_argument);
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
}
