/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of util.h: strict numbers (kl_parse_u64), the clock held for
 * a batch of requests (kl_clock_hold, kl_clock_release), the allocation
 * seam that the other suites use to fail an allocation on purpose
 * (kl_alloc_fail_at), kl_strndup and the decimal writer of "OK N".
 */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "clock.h"
#include "util.h"

static void
sleep_ms(long ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1)
		;
}

static bool
parse(const char *s, uint64_t min, uint64_t max, uint64_t *v)
{
	return kl_parse_u64(s, strlen(s), min, max, v);
}

START_TEST(parse_u64_takes_digits_only)
{
	uint64_t	v = 7;

	ck_assert(parse("0", 0, UINT64_MAX, &v));
	ck_assert_uint_eq(v, 0);
	ck_assert(parse("0042", 0, UINT64_MAX, &v));
	ck_assert_uint_eq(v, 42);
	ck_assert(parse("18446744073709551615", 0, UINT64_MAX, &v));
	ck_assert_uint_eq(v, UINT64_MAX);
	v = 7;
	ck_assert(!parse("", 0, UINT64_MAX, &v));
	ck_assert(!parse("18446744073709551616", 0, UINT64_MAX, &v));
	ck_assert(!parse("99999999999999999999", 0, UINT64_MAX, &v));
	ck_assert(!parse("-1", 0, UINT64_MAX, &v));
	ck_assert(!parse("+1", 0, UINT64_MAX, &v));
	ck_assert(!parse(" 1", 0, UINT64_MAX, &v));
	ck_assert(!parse("1 ", 0, UINT64_MAX, &v));
	ck_assert(!parse("1e3", 0, UINT64_MAX, &v));
	ck_assert(!parse("0x10", 0, UINT64_MAX, &v));
	ck_assert(!kl_parse_u64("1\0" "2", 3, 0, UINT64_MAX, &v));
	ck_assert_uint_eq(v, 7);	/* untouched on failure */
}
END_TEST

START_TEST(parse_u64_checks_the_bounds)
{
	uint64_t	v;

	ck_assert(parse("1", 1, 10, &v));
	ck_assert(parse("10", 1, 10, &v));
	ck_assert(!parse("0", 1, 10, &v));
	ck_assert(!parse("11", 1, 10, &v));
}
END_TEST

/* Requests read in one batch share one reading of the clock. */
START_TEST(held_clock_stands_still_until_released)
{
	uint64_t	held, live;

	kl_clock_hold();
	held = kl_now_ms();
	sleep_ms(30);
	ck_assert_uint_eq(kl_now_ms(), held);
	kl_clock_release();
	live = kl_now_ms();
	ck_assert_uint_ge(live, held + 29);
	kl_clock_hold();
	ck_assert_uint_ge(kl_now_ms(), live);
	kl_clock_release();
}
END_TEST

START_TEST(clock_is_monotonic_and_in_milliseconds)
{
	uint64_t	a = kl_now_ms(), b;

	sleep_ms(20);
	b = kl_now_ms();
	ck_assert_uint_ge(b, a + 19);
	ck_assert_uint_lt(b, a + 5000);
}
END_TEST

START_TEST(alloc_seam_fails_the_nth_allocation)
{
	void	*p[4];

	kl_alloc_fail_at(3, false);
	p[0] = kl_malloc(8);
	p[1] = kl_calloc(1, 8);
	p[2] = kl_malloc(8);
	p[3] = kl_realloc(NULL, 8);
	kl_alloc_fail_at(0, false);
	ck_assert_ptr_nonnull(p[0]);
	ck_assert_ptr_nonnull(p[1]);
	ck_assert_ptr_null(p[2]);
	ck_assert_ptr_nonnull(p[3]);
	for (int i = 0; i < 4; i++)
		kl_free(p[i]);

	kl_alloc_fail_at(2, true);
	p[0] = kl_malloc(8);
	p[1] = kl_malloc(8);
	p[2] = kl_strndup("abc", 3);
	kl_alloc_fail_at(0, false);
	ck_assert_ptr_nonnull(p[0]);
	ck_assert_ptr_null(p[1]);
	ck_assert_ptr_null(p[2]);
	kl_free(p[0]);
}
END_TEST

/* Every power of ten, one either side, 0 and the largest: as printf. */
START_TEST(decimal_matches_printf_at_every_digit_count)
{
	uint64_t	p = 1;

	for (int k = 0; k < 20; k++, p *= 10) {
		for (int d = -1; d <= 1; d++) {
			uint64_t	v = p + (uint64_t)(int64_t)d;
			char		want[32], got[32];
			size_t		n;

			snprintf(want, sizeof(want), "%" PRIu64, v);
			n = kl_u64_len(v);
			ck_assert_uint_eq(n, strlen(want));
			memset(got, '#', sizeof(got));
			kl_u64_put(got, n, v);
			ck_assert_msg(got[n] == '#', "wrote past %zu digits", n);
			got[n] = '\0';
			ck_assert_str_eq(got, want);
		}
	}
	ck_assert_uint_eq(kl_u64_len(UINT64_MAX), 20);
}
END_TEST

/* Every value below 200,000 and a spread of larger ones: as printf. */
START_TEST(decimal_matches_printf_across_values)
{
	uint64_t	v = 0, x = 0x9e3779b97f4a7c15ULL;

	for (int i = 0; i < 400000; i++) {
		char	want[32], got[32];
		size_t	n;

		if (i >= 200000) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			v = x >> (x % 64);
		}
		/* one check per value: each ck_assert costs a message */
		snprintf(want, sizeof(want), "%" PRIu64, v);
		n = kl_u64_len(v);
		memset(got, '#', sizeof(got));
		kl_u64_put(got, n, v);
		if (n != strlen(want) || got[n] != '#' ||
		    memcmp(got, want, n) != 0)
			ck_abort_msg("%" PRIu64 ": \"%.*s\"", v, (int)n, got);
		v++;
	}
}
END_TEST

/*
 * "OK N\n" as printf writes it: every value below 200,000, every power of
 * ten and its neighbours (8 digits, kl_u64_put8()'s last, and 9), and a
 * spread of larger ones; nothing written past KL_U64_OK_ROOM.
 */
START_TEST(ok_line_matches_printf)
{
	uint64_t	v, x = 0x9e3779b97f4a7c15ULL, p = 1;

	for (int i = 0; i < 200000 + 3 * 20 + 200000; i++) {
		char	want[32], got[KL_U64_OK_ROOM + 8];
		size_t	n;

		if (i < 200000) {
			v = (uint64_t)i;
		} else if (i < 200000 + 3 * 20) {
			int	k = (i - 200000) / 3, d = (i - 200000) % 3 - 1;

			if (d == -1)
				for (p = 1; k > 0; k--)
					p *= 10;
			v = p + (uint64_t)(int64_t)d;
		} else {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			v = x >> (x % 64);
		}
		snprintf(want, sizeof(want), "OK %" PRIu64 "\n", v);
		memset(got, '#', sizeof(got));
		n = kl_u64_put_ok(got, v);
		if (n != strlen(want) || memcmp(got, want, n) != 0 ||
		    got[KL_U64_OK_ROOM] != '#')
			ck_abort_msg("%" PRIu64 ": \"%.*s\"", v, (int)n, got);
	}
}
END_TEST

START_TEST(strndup_copies_n_bytes_and_a_nul)
{
	char	*s = kl_strndup("ab\0cd", 5);

	ck_assert_ptr_nonnull(s);
	ck_assert_mem_eq(s, "ab\0cd", 6);
	kl_free(s);
	s = kl_strndup("xyz", 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, "");
	kl_free(s);
}
END_TEST

/* SipHash-2-4 against the paper's vectors (key 00..0f, messages 00..):
 * the empty message and the 15-byte one of its appendix. */
START_TEST(siphash_matches_the_reference_vectors)
{
	unsigned char	 msg[64];
	uint64_t	 k0 = 0x0706050403020100ULL, k1 = 0x0f0e0d0c0b0a0908ULL;

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)i;
	ck_assert_uint_eq(kl_siphash(k0, k1, msg, 0), 0x726fdb47dd0e0e31ULL);
	ck_assert_uint_eq(kl_siphash(k0, k1, msg, 15), 0xa129ca6149be45e5ULL);
	/* every length its own value, and another key another value */
	for (size_t n = 1; n < sizeof(msg); n++) {
		ck_assert_uint_ne(kl_siphash(k0, k1, msg, n),
		    kl_siphash(k0, k1, msg, n - 1));
		ck_assert_uint_ne(kl_siphash(k0, k1, msg, n),
		    kl_siphash(k0 + 1, k1, msg, n));
	}
}
END_TEST

static Suite *
util_suite(void)
{
	Suite	*s = suite_create("util");
	TCase	*tc = tcase_create("util");

	tcase_add_test(tc, parse_u64_takes_digits_only);
	tcase_add_test(tc, parse_u64_checks_the_bounds);
	tcase_add_test(tc, held_clock_stands_still_until_released);
	tcase_add_test(tc, clock_is_monotonic_and_in_milliseconds);
	tcase_add_test(tc, alloc_seam_fails_the_nth_allocation);
	tcase_add_test(tc, decimal_matches_printf_at_every_digit_count);
	tcase_add_test(tc, decimal_matches_printf_across_values);
	tcase_add_test(tc, ok_line_matches_printf);
	tcase_add_test(tc, strndup_copies_n_bytes_and_a_nul);
	tcase_add_test(tc, siphash_matches_the_reference_vectors);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "check_util",
	.suites = { util_suite, NULL }
};
