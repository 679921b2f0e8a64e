/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The table's keyed hash (lt_hash.c) and what must not leak it: families
 * of keys a client could choose spread over the buckets as random keys
 * would, under every key of the hash tried, and no view orders keys by
 * bucket. It reaches into lt_impl.h for the hash and the bucket of a
 * table of a given size: that is what is under test.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_locktable.h"
#include "locktable.h"
#include "lt_impl.h"

#define HASH_KEYS	32768
#define HASH_BITS	12		/* 4096 buckets: 8 keys each */
#define HASH_MAX_LOAD	40		/* random keys: about 24 at most */
#define HASH_MAX_SAME	8		/* equal 32-bit hashes: 0.1 expected */

/* Writes key i of family f into buf; returns its length. */
static size_t
family_key(int f, uint32_t i, char *buf)
{
	size_t	n;

	switch (f) {
	case 0:		/* what a client numbers */
		return (size_t)sprintf(buf, "lock:%u", i);
	case 1:		/* only the top byte of each word differs */
		memset(buf, 'a', 24);
		buf[7] = (char)(0x21 + i % 90);
		buf[15] = (char)(0x21 + i / 90 % 90);
		buf[23] = (char)(0x21 + i / 8100);
		return 24;
	case 2:		/* only the low byte of each word differs */
		memset(buf, 'b', 16);
		buf[0] = (char)(0x21 + i % 90);
		buf[8] = (char)(0x21 + i / 90 % 90);
		buf[12] = (char)(0x21 + i / 8100);
		return 16;
	case 3:		/* colliding under djb2 (h * 33 + c): "Ez" = "FY" */
		for (n = 0; n < 15; n++)
			memcpy(buf + 2 * n, i >> n & 1 ? "Ez" : "FY", 2);
		return 30;
	default:	/* one byte, repeated: every length */
		n = 1 + i % KL_KEY_MAX;
		memset(buf, 0x21 + (int)(i / KL_KEY_MAX), n);
		return n;
	}
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t	x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Each family, under several keys of the hash: no bucket of 4096 holds
 * many more than random keys would put there, and 32-bit hashes repeat
 * about as rarely. */
START_TEST(chosen_keys_spread_over_the_buckets)
{
	static uint32_t		 hash[HASH_KEYS];
	static uint16_t		 load[1u << HASH_BITS];
	struct locktable	*lt;
	char			 key[KL_KEY_MAX + 1];
	size_t			 len, same, max;

	for (uint64_t seed = 1; seed <= 4; seed++) {
		ck_assert_ptr_nonnull(lt = locktable_new(NULL, seed));
		for (int f = 0; f <= 4; f++) {
			memset(load, 0, sizeof(load));
			max = 0;
			for (uint32_t i = 0; i < HASH_KEYS; i++) {
				len = family_key(f, i, key);
				hash[i] = lt_key_hash(lt, key, len);
				if (++load[hash[i] >> (32 - HASH_BITS)] > max)
					max = load[hash[i] >> (32 - HASH_BITS)];
			}
			qsort(hash, HASH_KEYS, sizeof(hash[0]), cmp_u32);
			same = 0;
			for (size_t i = 1; i < HASH_KEYS; i++)
				same += hash[i] == hash[i - 1];
			ck_assert_msg(max <= HASH_MAX_LOAD, "seed %ju family "
			    "%d: %zu keys in one bucket", (uintmax_t)seed, f,
			    max);
			ck_assert_msg(same <= HASH_MAX_SAME, "seed %ju family "
			    "%d: %zu equal hashes", (uintmax_t)seed, f, same);
		}
		locktable_free(lt);
	}
}
END_TEST

/* The key of the hash is the seed's: two seeds, two orders. */
START_TEST(hash_depends_on_the_seed)
{
	struct locktable	*a, *b;
	char			 key[32];
	size_t			 len, differ = 0;

	ck_assert_ptr_nonnull(a = locktable_new(NULL, 7));
	ck_assert_ptr_nonnull(b = locktable_new(NULL, 8));
	for (uint32_t i = 0; i < 1000; i++) {
		len = family_key(0, i, key);
		ck_assert_uint_eq(lt_key_hash(a, key, len),
		    lt_key_hash(a, key, len));
		differ += lt_key_hash(a, key, len) != lt_key_hash(b, key, len);
	}
	ck_assert_uint_ge(differ, 990);
	locktable_free(a);
	locktable_free(b);
}
END_TEST

/*
 * Keys nobody waits for fill hot_keys in grant order, the newest owner
 * and its newest hold first: nothing there follows the buckets.
 */
START_TEST(hot_keys_fill_in_grant_order)
{
	const struct lt_key	*out[8];
	struct lt_key_view	 v;
	static const char *const want[] = { "k6", "k5", "k4", "k3", "k2",
	    "k1" };
	size_t			 n;

	ck_assert_int_eq(cl_lock(1, "k1", 0), GRANTED);
	ck_assert_int_eq(cl_lock(1, "k2", 0), GRANTED);
	ck_assert_int_eq(cl_lock(2, "k3", 0), GRANTED);
	ck_assert_int_eq(cl_lock(5, "k4", 0), GRANTED);
	ck_assert_int_eq(cl_lock(8, "k5 k6", 0), GRANTED);
	n = locktable_hot_keys(cl_lt, out, 8);
	ck_assert_uint_eq(n, 6);
	for (size_t i = 0; i < n; i++) {
		locktable_key_view(out[i], &v);
		ck_assert_msg(v.keylen == strlen(want[i]) &&
		    memcmp(v.key, want[i], v.keylen) == 0,
		    "hot_keys[%zu] is %.*s, want %s", i, (int)v.keylen, v.key,
		    want[i]);
	}
	/* a shared key comes once, from its first holder */
	ck_assert_int_eq(cl_lock_shared(3, "s", 1), GRANTED);
	ck_assert_int_eq(cl_lock_shared(4, "s", 1), GRANTED);
	ck_assert_uint_eq(locktable_hot_keys(cl_lt, out, 8), 7);
}
END_TEST

/*
 * Keys of every length lock and unlock, twice, so that entries of every
 * pool class, and those too big for any, are taken, freed and taken again
 * (the sanitizers watch the pools' bounds).
 */
START_TEST(keys_of_every_length_lock_and_unlock)
{
	char	key[KL_KEY_MAX + 1];

	memset(key, 'k', sizeof(key));
	for (int round = 0; round < 2; round++)
		for (size_t len = 1; len <= KL_KEY_MAX; len++) {
			key[len] = '\0';
			ck_assert_int_eq(cl_lock(1, key, 0), GRANTED);
			ck_assert_int_eq(cl_unlock(1, key, 0), KL_OK);
			key[len] = 'k';
		}
	cl_expect_gauges(0, 0, 0);
}
END_TEST

void
cl_add_hash(Suite *s)
{
	TCase	*tc;

	tc = cl_tcase(s, "hash");
	tcase_add_test(tc, chosen_keys_spread_over_the_buckets);
	tcase_add_test(tc, hash_depends_on_the_seed);
	tcase_add_test(tc, hot_keys_fill_in_grant_order);
	tcase_add_test(tc, keys_of_every_length_lock_and_unlock);
}
