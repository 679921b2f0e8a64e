/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * The log-linear latency histogram. Recording is a few shifts and one
 * increment; it never allocates and never sorts.
 */
#include <string.h>

#include "keylock-bench-hist.h"

static unsigned
bhist_index(uint64_t v)
{
	unsigned	e;

	if (v < BHIST_SUB)
		return (unsigned)v;
	e = 63 - (unsigned)__builtin_clzll(v);	/* e >= BHIST_SUB_BITS */
	if (e > BHIST_MAX_BIT)
		return BHIST_BUCKETS - 1;
	return BHIST_SUB + (e - BHIST_SUB_BITS) * BHIST_HALF +
	    (unsigned)(v >> (e - BHIST_SUB_BITS + 1)) - BHIST_HALF;
}

/* The highest value that falls into bucket i. */
static uint64_t
bhist_upper(unsigned i)
{
	unsigned	g, shift;
	uint64_t	s;

	if (i < BHIST_SUB)
		return i;
	g = (i - BHIST_SUB) / BHIST_HALF;
	s = (i - BHIST_SUB) % BHIST_HALF + BHIST_HALF;
	shift = g + 1;
	return ((s + 1) << shift) - 1;
}

void
bhist_init(struct bhist *h)
{
	memset(h, 0, sizeof(*h));
}

void
bhist_record(struct bhist *h, uint64_t v)
{
	if (h->count == 0 || v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->count++;
	h->sum += v;
	h->buckets[bhist_index(v)]++;
}

uint64_t
bhist_percentile(const struct bhist *h, double p)
{
	uint64_t	rank, seen = 0, v;

	if (h->count == 0)
		return 0;
	if (p >= 100.0)
		return h->max;
	rank = (uint64_t)(p / 100.0 * (double)h->count + 0.999999);
	if (rank == 0)
		rank = 1;
	for (unsigned i = 0; i < BHIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank) {
			v = bhist_upper(i);
			return v > h->max ? h->max : v;
		}
	}
	return h->max;
}

double
bhist_mean(const struct bhist *h)
{
	return h->count > 0 ? (double)h->sum / (double)h->count : 0.0;
}
