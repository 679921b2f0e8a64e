/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * A fixed-bucket histogram of milliseconds, as STATS shows it: counts per
 * bucket (not cumulative), the last bucket unbounded. Pure arithmetic.
 */
#ifndef HIST_H
#define HIST_H

#include <stddef.h>
#include <stdint.h>

#define KL_HIST_NBUCKETS	16	/* 15 bounded buckets and +Inf */

struct kl_hist {
	uint64_t	counts[KL_HIST_NBUCKETS];
	uint64_t	sum_ms;
};

/* Upper bound (inclusive) of bucket i in ms; UINT64_MAX for the last. */
uint64_t	kl_hist_bound(size_t i);
void		kl_hist_add_slow(struct kl_hist *h, uint64_t ms);
/* The values counted: the buckets' sum, not a second counter beside them
 * that every value would have to bump. */
uint64_t	kl_hist_count(const struct kl_hist *h);

/* Counts one value. Inline for 0 ms, the lock granted or released within
 * the millisecond it was asked for: most of them. */
static inline void
kl_hist_add(struct kl_hist *h, uint64_t ms)
{
	if (ms == 0) {
		h->counts[0]++;
		return;
	}
	kl_hist_add_slow(h, ms);
}

#endif /* HIST_H */
