/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend and the etcd settings (keylockd.conf(5), BACKEND ETCD): their
 * defaults, each from the file and the command line, each limit at its
 * bound and one past it, and the checks that need several of them:
 * backend etcd needs etcd-endpoints, etcd-timeout under a third of the
 * lease, and a LOCK of max-keys keys must fit one etcd transaction.
 * Nothing here reaches etcd (server_check does, keylockd(8)).
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_config.h"
#include "config.h"

START_TEST(backend_defaults_to_local_with_the_documented_etcd_defaults)
{
	EXPECT_OK(cf_load("--config", "/dev/null", NULL));
	ck_assert_str_eq(cf_cfg.backend, "local");
	ck_assert_ptr_null(cf_cfg.etcd_endpoints);
	ck_assert_str_eq(cf_cfg.etcd_prefix, "keylock/");
	ck_assert_str_eq(cf_cfg.etcd_prefix, KL_ETCD_PREFIX_DEFAULT);
	ck_assert_int_eq(cf_cfg.etcd_lease_ttl, 15);
	ck_assert_int_eq(cf_cfg.etcd_timeout, 5000);
	ck_assert_int_eq(cf_cfg.etcd_max_txn_ops, 128);
	ck_assert_int_eq(cf_cfg.etcd_connections, 4);
}
END_TEST

START_TEST(file_sets_every_etcd_setting_and_the_command_line_wins)
{
	cf_write_conf("backend etcd\n"
	    "etcd-endpoints http://10.0.0.1:2379,http://10.0.0.2:2379\n"
	    "etcd-prefix locks/prod/\n"
	    "etcd-lease-ttl 30\n"
	    "etcd-timeout 2000\n"
	    "etcd-max-txn-ops 256\n"
	    "etcd-connections 8\n");
	EXPECT_OK(cf_load("--config", cf_conf, NULL));
	ck_assert_str_eq(cf_cfg.backend, "etcd");
	ck_assert_str_eq(cf_cfg.etcd_endpoints,
	    "http://10.0.0.1:2379,http://10.0.0.2:2379");
	ck_assert_str_eq(cf_cfg.etcd_prefix, "locks/prod/");
	ck_assert_int_eq(cf_cfg.etcd_lease_ttl, 30);
	ck_assert_int_eq(cf_cfg.etcd_timeout, 2000);
	ck_assert_int_eq(cf_cfg.etcd_max_txn_ops, 256);
	ck_assert_int_eq(cf_cfg.etcd_connections, 8);
	EXPECT_OK(cf_load("--config", cf_conf, "--backend", "local",
	    "--etcd-endpoints", "127.0.0.1:2379", "--etcd-prefix", "x/",
	    "--etcd-lease-ttl", "10", "--etcd-timeout", "1000",
	    "--etcd-max-txn-ops", "64", "--etcd-connections", "2", NULL));
	ck_assert_str_eq(cf_cfg.backend, "local");
	ck_assert_str_eq(cf_cfg.etcd_endpoints, "127.0.0.1:2379");
	ck_assert_str_eq(cf_cfg.etcd_prefix, "x/");
	ck_assert_int_eq(cf_cfg.etcd_lease_ttl, 10);
	ck_assert_int_eq(cf_cfg.etcd_timeout, 1000);
	ck_assert_int_eq(cf_cfg.etcd_max_txn_ops, 64);
	ck_assert_int_eq(cf_cfg.etcd_connections, 2);
}
END_TEST

START_TEST(backend_other_than_local_or_etcd_is_a_config_error)
{
	EXPECT_CONFIG_ERR(cf_load("--config", "/dev/null", "--backend",
	    "redis", NULL), "backend redis: local or etcd");
}
END_TEST

START_TEST(backend_etcd_without_endpoints_is_a_config_error)
{
	EXPECT_CONFIG_ERR(cf_load("--config", "/dev/null", "--backend", "etcd",
	    NULL), "backend etcd needs etcd-endpoints");
	EXPECT_OK(cf_load("--config", "/dev/null", "--backend", "etcd",
	    "--etcd-endpoints", "127.0.0.1:2379", NULL));
}
END_TEST

START_TEST(etcd_limits_work_at_their_bounds_and_fail_one_past)
{
	static const struct {
		const char	*opt, *low, *high, *below, *above;
	} lim[] = {
		{ "--etcd-lease-ttl", "2", "3600", "1", "3601" },
		{ "--etcd-timeout", "100", "600000", "99", "600001" },
		{ "--etcd-max-txn-ops", "1", "100000", "0", "100001" },
		{ "--etcd-connections", "1", "64", "0", "65" },
	};

	for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
		EXPECT_OK(cf_load("--config", "/dev/null", lim[i].opt,
		    lim[i].low, NULL));
		EXPECT_OK(cf_load("--config", "/dev/null", lim[i].opt,
		    lim[i].high, NULL));
		EXPECT_USAGE(cf_load("--config", "/dev/null", lim[i].opt,
		    lim[i].below, NULL), "out of range");
		EXPECT_USAGE(cf_load("--config", "/dev/null", lim[i].opt,
		    lim[i].above, NULL), "out of range");
	}
	EXPECT_USAGE(cf_load("--config", "/dev/null", "--etcd-prefix", "",
	    NULL), "empty value");
}
END_TEST

START_TEST(etcd_timeout_over_a_third_of_the_lease_is_a_config_error)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--backend", "etcd",
	    "--etcd-endpoints", "127.0.0.1:2379", "--etcd-lease-ttl", "3",
	    "--etcd-timeout", "1000", NULL));
	EXPECT_CONFIG_ERR(cf_load("--config", "/dev/null", "--backend", "etcd",
	    "--etcd-endpoints", "127.0.0.1:2379", "--etcd-lease-ttl", "3",
	    "--etcd-timeout", "1001", NULL), "over a third of etcd-lease-ttl");
	/* backend local does not care */
	EXPECT_OK(cf_load("--config", "/dev/null", "--etcd-lease-ttl", "3",
	    "--etcd-timeout", "1001", NULL));
}
END_TEST

START_TEST(max_keys_over_etcd_max_txn_ops_is_a_config_error)
{
	EXPECT_OK(cf_load("--config", "/dev/null", "--backend", "etcd",
	    "--etcd-endpoints", "127.0.0.1:2379", "--max-keys", "64",
	    "--etcd-max-txn-ops", "64", NULL));
	EXPECT_CONFIG_ERR(cf_load("--config", "/dev/null", "--backend", "etcd",
	    "--etcd-endpoints", "127.0.0.1:2379", "--max-keys", "65",
	    "--etcd-max-txn-ops", "64", NULL), "a LOCK is one etcd "
	    "transaction");
	EXPECT_OK(cf_load("--config", "/dev/null", "--max-keys", "65",
	    "--etcd-max-txn-ops", "64", NULL));
}
END_TEST

void
cf_add_etcd(Suite *s)
{
	TCase	*tc = cf_tcase(s, "etcd");

	tcase_add_test(tc,
	    backend_defaults_to_local_with_the_documented_etcd_defaults);
	tcase_add_test(tc,
	    file_sets_every_etcd_setting_and_the_command_line_wins);
	tcase_add_test(tc, backend_other_than_local_or_etcd_is_a_config_error);
	tcase_add_test(tc, backend_etcd_without_endpoints_is_a_config_error);
	tcase_add_test(tc, etcd_limits_work_at_their_bounds_and_fail_one_past);
	tcase_add_test(tc,
	    etcd_timeout_over_a_third_of_the_lease_is_a_config_error);
	tcase_add_test(tc, max_keys_over_etcd_max_txn_ops_is_a_config_error);
}
