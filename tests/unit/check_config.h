/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_config program's theme files share: the test's mkdtemp
 * directory and config file, the struct config of the last load and what
 * it printed, the helpers that write the file and run config_load, and
 * one function per theme that adds its TCases to the suite, in the order
 * main() runs them.
 */
#ifndef CHECK_CONFIG_H
#define CHECK_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <check.h>

#include "config.h"

#define OUT_MAX		16384

extern char		 cf_dir[PATH_MAX];	/* mkdtemp */
extern char		 cf_conf[PATH_MAX + 32];	/* dir/keylockd.conf */
extern struct config	 cf_cfg;
extern bool		 cf_loaded;
extern char		 cf_err_out[OUT_MAX];	/* config_load's stderr */
extern char		 cf_std_out[OUT_MAX];	/* and stdout */

/* A TCase with the fixture, added to s. */
TCase		*cf_tcase(Suite *s, const char *name);

/* Writes text to cf_conf. */
void		 cf_write_conf(const char *text);
/* config_load with argv "keylockd" followed by a[0..n); stdout and stderr
 * go to cf_std_out and cf_err_out. A second load in one test cleans up the
 * first. */
int		 cf_load_array(int n, const char *const *a);
/* cf_load_array with the NULL-terminated arguments. */
int		 cf_load(const char *first, ...);
/* The numeric limits that both "every setting" tests set alike. */
void		 cf_expect_every_limit(void);
size_t		 cf_count_lines(const char *s);
bool		 cf_ends_with(const char *s, const char *suffix);

#define EXPECT_OK(rc) \
	ck_assert_msg((rc) == 0, "config_load returned %d: %s", (rc),	\
	    cf_err_out)
#define EXPECT_USAGE(rc, needle) do {					\
	int rc_ = (rc);							\
	ck_assert_msg(rc_ == EX_KL_USAGE, "config_load returned %d, not " \
	    "EX_KL_USAGE", rc_);					\
	ck_assert_msg(strstr(cf_err_out, (needle)) != NULL,		\
	    "stderr \"%s\" lacks \"%s\"", cf_err_out, (needle));	\
} while (0)
#define EXPECT_CONFIG_ERR(rc, needle) do {				\
	int rc_ = (rc);							\
	ck_assert_msg(rc_ == EX_KL_CONFIG, "config_load returned %d, not " \
	    "EX_KL_CONFIG", rc_);					\
	ck_assert_msg(strstr(cf_err_out, (needle)) != NULL,		\
	    "stderr \"%s\" lacks \"%s\"", cf_err_out, (needle));	\
} while (0)

/* defaults, command_line (config_cmdline.c) */
void		 cf_add_cmdline(Suite *s);
/* file, precedence (config_file.c) */
void		 cf_add_file(Suite *s);
/* etcd: backend and the etcd settings (config_etcd.c) */
void		 cf_add_etcd(Suite *s);

#endif /* CHECK_CONFIG_H */
