/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Mutual exclusion, FIFO, timeouts, BUSY, deadlock freedom and disconnect
 * release under real concurrency: many connections, one worker thread
 * each, started together at a barrier. Every check asserts something a
 * wrong daemon would break (overlapping holds, lost updates, a wrong count
 * of queued requests, a grant out of order). Workers never call Check;
 * they record the first error and the main thread asserts. The tests
 * live in concurrency_*.c by theme; this file holds the suite and main.
 */
#include <check.h>

#include "check_main.h"
#include "concurrency_util.h"
#include "kltest.h"

static Suite *
concurrency_suite(void)
{
	Suite	*s = suite_create("concurrency");

	cu_add_exclusion(s);
	cu_add_waiting(s);
	cu_add_order(s);
	return s;
}

const struct check_program check_program = {
	.name = "concurrency_test",
	.init = kt_init,
	.suites = { concurrency_suite, NULL }
};
