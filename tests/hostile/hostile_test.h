/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the hostile_test program's theme files share: the bounds every
 * test measures against (hostile_test.c), and one function per theme
 * that adds its TCases to the suite, in the order main() runs them.
 */
#ifndef HOSTILE_TEST_H
#define HOSTILE_TEST_H

#include <stddef.h>

#include <check.h>

/* The probe's p99 bound in ms, times kt_slow(). */
double		 ht_p99_bound(void);
/* n, or under_wrapper when the daemon runs under KEYLOCKD_WRAPPER. */
size_t		 ht_scaled(size_t n, size_t under_wrapper);
/* RSS growth from base_kib to now_kib in MiB. */
long		 ht_rss_mib_growth(long base_kib, long now_kib);
/* bound, raised for a daemon under ASan or valgrind, and a note saying so
 * for the figures on stderr ("" otherwise). */
long		 ht_rss_bound_mib(long bound);
const char	*ht_rss_note(void);

/* slow senders, idle connections (hostile_clients.c) */
void		 ht_add_clients(Suite *s);
/* replies never read (hostile_output.c) */
void		 ht_add_output(Suite *s);
/* long lines, bad keys (hostile_input.c) */
void		 ht_add_input(Suite *s);
/* distinct and colliding keys (hostile_flood.c) */
void		 ht_add_flood(Suite *s);
/* descriptor exhaustion, a stopped holder (hostile_resources.c) */
void		 ht_add_resources(Suite *s);
/* hostile_budgets.c: write-timeout, output before AUTH, reply too large,
 * CLIENTS' cut, max-waiters, max-table-bytes */
void		 ht_add_budgets(Suite *s);
/* hostile_memory.c: input behind a waiting LOCK, channels' memory and
 * count */
void		 ht_add_memory(Suite *s);

#endif /* HOSTILE_TEST_H */
