/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The one main() of the Check programs (tests/unit, tests/integration,
 * tests/hostile, tests/soak, check_libkeylock in tests/cli). A program
 * defines check_program: its name, what runs once before its suites and
 * after them, and the suites in the order they run. main() runs them in
 * one SRunner, printing as CK_VERBOSITY says (normal when unset), and
 * exits 0 only if every test passed. It links as tests/lib/libcheck_main.a.
 */
#ifndef CHECK_MAIN_H
#define CHECK_MAIN_H

#include <check.h>

#define CHECK_MAX_SUITES	8

struct check_program {
	const char	*name;
	/* Before the suites, given name; may exit (77: skipped). */
	void		(*init)(const char *name);
	/* After them, whatever the verdict. */
	void		(*done)(void);
	/* Each builds one suite; NULL after the last. */
	Suite		*(*suites[CHECK_MAX_SUITES + 1])(void);
};

extern const struct check_program check_program;

#endif /* CHECK_MAIN_H */
