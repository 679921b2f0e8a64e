/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Hostile and broken clients against a private daemon each (issue 6): a
 * slow sender, ten thousand idle connections, a pipeliner that never reads,
 * 1 MiB lines, every kind of bad key, a flood of distinct keys, keys that
 * collide under a naive hash, descriptor exhaustion and a stopped holder.
 * Each test asserts that the damage stays with the hostile client, and
 * measures, with a probe client timing PING / LOCK / UNLOCK in a thread,
 * that everybody else was unaffected; the figures go to stderr. The tests
 * live in hostile_*.c by theme; this file holds the bounds they share, the
 * suite and main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <check.h>

#include "check_main.h"
#include "hostile_test.h"
#include "hostile_util.h"
#include "kltest.h"

#define P99_BOUND_MS	200.0	/* probe p99, times kt_slow() */

double
ht_p99_bound(void)
{
	return P99_BOUND_MS * kt_slow();
}

/* Sizes shrink under KEYLOCKD_WRAPPER (valgrind) to keep the run bounded. */
size_t
ht_scaled(size_t n, size_t under_wrapper)
{
	return kt_slow() > 1 ? under_wrapper : n;
}

long
ht_rss_mib_growth(long base_kib, long now_kib)
{
	return (now_kib - base_kib) / 1024;
}

/*
 * A bound on the daemon's RSS growth in MiB: bound for a plain build; an
 * instrumented daemon keeps freed blocks (ASan's quarantine is 256 MiB by
 * default, valgrind's queue and shadow memory) and gets that much more.
 */
long
ht_rss_bound_mib(long bound)
{
	return hu_memory_is_instrumented(kt_d->pid) ? bound + 320 : bound;
}

const char *
ht_rss_note(void)
{
	return hu_memory_is_instrumented(kt_d->pid) ? " (instrumented "
	    "daemon: freed memory is held back, bound raised by 320 MiB)" : "";
}

static Suite *
hostile_suite(void)
{
	Suite	*s = suite_create("hostile");

	ht_add_clients(s);
	ht_add_output(s);
	ht_add_input(s);
	ht_add_flood(s);
	ht_add_resources(s);
	ht_add_budgets(s);
	ht_add_memory(s);
	return s;
}

const struct check_program check_program = {
	.name = "hostile_test",
	.init = kt_init,
	.suites = { hostile_suite, NULL }
};
