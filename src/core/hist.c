/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Millisecond histogram buckets. Never allocates.
 */
#include "hist.h"

static const uint64_t hist_bounds[KL_HIST_NBUCKETS - 1] = {
	0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000
};

uint64_t
kl_hist_bound(size_t i)
{
	if (i >= KL_HIST_NBUCKETS - 1)
		return UINT64_MAX;
	return hist_bounds[i];
}

void
kl_hist_add_slow(struct kl_hist *h, uint64_t ms)
{
	size_t	i = 0;

	while (i < KL_HIST_NBUCKETS - 1 && ms > hist_bounds[i])
		i++;
	h->counts[i]++;
	h->sum_ms += ms;
}

uint64_t
kl_hist_count(const struct kl_hist *h)
{
	uint64_t	n = 0;

	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++)
		n += h->counts[i];
	return n;
}
