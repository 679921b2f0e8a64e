/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * main() for every Check program (check_main.h): the program's own part
 * is its check_program.
 */
#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "check_main.h"

int
main(void)
{
	const struct check_program *p = &check_program;
	SRunner	*sr;
	int	 nfailed;

	if (p->suites[0] == NULL) {
		fprintf(stderr, "%s: no suites\n", p->name);
		return EXIT_FAILURE;
	}
	/* Check's default is 4 s from the fork until the child has exited,
	 * and under ASan a forked test's exit runs LeakSanitizer's check:
	 * 6.7 s for check_proto's 63 one-line cases at load 5 (1.3 s
	 * without it), so cases timed out at load 17. A test case that
	 * sets no timeout gets 30 s; one that hangs still fails. */
	setenv("CK_DEFAULT_TIMEOUT", "30", 0);
	if (p->init != NULL)
		p->init(p->name);
	sr = srunner_create(p->suites[0]());
	for (int i = 1; p->suites[i] != NULL; i++)
		srunner_add_suite(sr, p->suites[i]());
	srunner_run_all(sr, CK_ENV);
	nfailed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (p->done != NULL)
		p->done();
	return nfailed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
