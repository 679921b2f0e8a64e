/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * A latency histogram in the manner of HdrHistogram: log-linear buckets
 * (256 exact values, then 128 buckets per power of two), so any recorded
 * value is known to within 0.8 % and a percentile is a walk over a fixed
 * array, never a sort of the samples. Values are nanoseconds.
 */
#ifndef KEYLOCK_BENCH_HIST_H
#define KEYLOCK_BENCH_HIST_H

#include <stdint.h>

#define BHIST_SUB_BITS	8			/* 2^8 exact values */
#define BHIST_SUB	(1u << BHIST_SUB_BITS)
#define BHIST_HALF	(BHIST_SUB / 2)		/* buckets per power of two */
#define BHIST_MAX_BIT	42			/* 2^42 ns: about 73 minutes */
#define BHIST_BUCKETS	(BHIST_SUB + \
			    (BHIST_MAX_BIT - BHIST_SUB_BITS + 1) * BHIST_HALF)

struct bhist {
	uint64_t	count;
	uint64_t	sum;
	uint64_t	min;
	uint64_t	max;
	uint64_t	buckets[BHIST_BUCKETS];
};

void		bhist_init(struct bhist *h);
void		bhist_record(struct bhist *h, uint64_t v);
/* The highest value of the bucket that holds the p-th percentile (0-100),
 * capped at the largest value recorded; 0 for an empty histogram. */
uint64_t	bhist_percentile(const struct bhist *h, double p);
double		bhist_mean(const struct bhist *h);

#endif /* KEYLOCK_BENCH_HIST_H */
