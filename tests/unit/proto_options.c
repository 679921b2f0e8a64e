/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Options and error order: the table of option rules and the values
 * they yield, which check wins when a line breaks several rules, and
 * error texts that never echo a bad byte.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_proto.h"
#include "kl.h"
#include "proto.h"

/* An option line and the values it must yield (checked when KL_OK). */
struct opt_case {
	const char	*rule;
	const char	*line;
	size_t		 len;
	enum kl_err	 err;
	unsigned	 opts;
	uint64_t	 timeout_ms;
	uint64_t	 ttl_ms;
	uint32_t	 limit;
	uint32_t	 max_waiters;
	bool		 shared;
	const char	*why;
};

static const struct opt_case option_cases[] = {
	{ "no_options_give_defaults", L("LOCK a"), KL_OK, 0, 0, 0, 1, 0,
	    false, NULL },
	{ "timeout_of_0_is_ok", L("LOCK a timeout=0"), KL_OK, OPT_TIMEOUT, 0,
	    0, 1, 0, false, NULL },
	{ "timeout_of_ms_max_is_ok", L("LOCK a timeout=1000000000000"), KL_OK,
	    OPT_TIMEOUT, 1000000000000ULL, 0, 1, 0, false, NULL },
	{ "timeout_over_ms_max_is_syntax", L("LOCK a timeout=1000000000001"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for timeout: must be 0 to 1000000000000" },
	{ "timeout_over_uint64_is_syntax",
	    L("LOCK a timeout=99999999999999999999999"), KL_ERR_SYNTAX, 0, 0,
	    0, 1, 0, false,
	    "bad value for timeout: must be 0 to 1000000000000" },
	{ "timeout_with_leading_zeros_is_decimal", L("LOCK a timeout=0010"),
	    KL_OK, OPT_TIMEOUT, 10, 0, 1, 0, false, NULL },
	{ "timeout_with_plus_sign_is_syntax", L("LOCK a timeout=+5"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for timeout: must be 0 to 1000000000000" },
	{ "timeout_with_minus_sign_is_syntax", L("LOCK a timeout=-5"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "timeout_of_minus_zero_is_syntax", L("LOCK a timeout=-0"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "timeout_in_hex_is_syntax", L("LOCK a timeout=0x10"), KL_ERR_SYNTAX,
	    0, 0, 0, 1, 0, false, NULL },
	{ "timeout_with_exponent_is_syntax", L("LOCK a timeout=1e3"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "timeout_with_unit_is_syntax", L("LOCK a timeout=5ms"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "timeout_with_fraction_is_syntax", L("LOCK a timeout=1.5"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "timeout_with_nul_is_syntax", L("LOCK a timeout=5\0"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "timeout_with_empty_value_is_syntax", L("LOCK a timeout="),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option timeout has no value" },
	{ "space_after_equals_leaves_value_empty", L("LOCK a timeout= 5"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option timeout has no value" },
	{ "space_before_equals_leaves_name_empty", L("LOCK a timeout =5"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option with an empty name" },
	{ "equals_twice_is_a_bad_value", L("LOCK a timeout==5"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for timeout: must be 0 to 1000000000000" },
	{ "ttl_of_0_is_syntax", L("LOCK a ttl=0"), KL_ERR_SYNTAX, 0, 0, 0, 1,
	    0, false, "bad value for ttl: must be 1 to 1000000000000" },
	{ "ttl_of_1_is_ok", L("LOCK a ttl=1"), KL_OK, OPT_TTL, 0, 1, 1, 0,
	    false, NULL },
	{ "ttl_of_ms_max_is_ok", L("LOCK a ttl=1000000000000"), KL_OK,
	    OPT_TTL, 0, 1000000000000ULL, 1, 0, false, NULL },
	{ "ttl_over_ms_max_is_syntax", L("LOCK a ttl=1000000000001"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for ttl: must be 1 to 1000000000000" },
	{ "ttl_with_plus_sign_is_syntax", L("LOCK a ttl=+1"), KL_ERR_SYNTAX,
	    0, 0, 0, 1, 0, false, NULL },
	{ "limit_of_0_is_syntax", L("LOCK a limit=0"), KL_ERR_SYNTAX, 0, 0, 0,
	    1, 0, false, "bad value for limit: must be 1 to 1000000000" },
	{ "limit_of_1_is_ok", L("LOCK a limit=1"), KL_OK, OPT_LIMIT, 0, 0, 1,
	    0, false, NULL },
	{ "limit_of_limit_max_is_ok", L("LOCK a limit=1000000000"), KL_OK,
	    OPT_LIMIT, 0, 0, 1000000000, 0, false, NULL },
	{ "limit_over_limit_max_is_syntax", L("LOCK a limit=1000000001"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for limit: must be 1 to 1000000000" },
	{ "limit_with_minus_sign_is_syntax", L("LOCK a limit=-1"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "max_waiters_of_0_is_ok", L("LOCK a max_waiters=0"), KL_OK,
	    OPT_MAX_WAITERS, 0, 0, 1, 0, false, NULL },
	{ "max_waiters_of_limit_max_is_ok",
	    L("LOCK a max_waiters=1000000000"), KL_OK, OPT_MAX_WAITERS, 0, 0,
	    1, 1000000000, false, NULL },
	{ "max_waiters_over_limit_max_is_syntax",
	    L("LOCK a max_waiters=1000000001"), KL_ERR_SYNTAX, 0, 0, 0, 1, 0,
	    false, "bad value for max_waiters: must be 0 to 1000000000" },
	{ "max_waiters_in_hex_is_syntax", L("LOCK a max_waiters=0x1"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "mode_shared_is_ok", L("LOCK a mode=shared"), KL_OK, OPT_MODE, 0, 0,
	    1, 0, true, NULL },
	{ "mode_exclusive_is_ok", L("LOCK a mode=exclusive"), KL_OK, OPT_MODE,
	    0, 0, 1, 0, false, NULL },
	{ "mode_value_is_case_insensitive", L("LOCK a mode=SHARED"), KL_OK,
	    OPT_MODE, 0, 0, 1, 0, true, NULL },
	{ "mode_value_in_mixed_case_is_ok", L("LOCK a mode=Exclusive"), KL_OK,
	    OPT_MODE, 0, 0, 1, 0, false, NULL },
	{ "mode_prefix_is_syntax", L("LOCK a mode=share"), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false,
	    "bad value for mode: must be exclusive or shared" },
	{ "mode_with_suffix_is_syntax", L("LOCK a mode=sharedx"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for mode: must be exclusive or shared" },
	{ "mode_with_second_equals_is_syntax", L("LOCK a mode=shared=1"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "bad value for mode: must be exclusive or shared" },
	{ "mode_with_empty_value_is_syntax", L("LOCK a mode="),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, "option mode has no value" },
	{ "mode_with_nul_is_syntax", L("LOCK a mode=shared\0"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, NULL },
	{ "option_names_are_case_insensitive",
	    L("LOCK a TIMEOUT=5 Ttl=6 LIMIT=2 Max_Waiters=3"), KL_OK,
	    OPT_TIMEOUT | OPT_TTL | OPT_LIMIT | OPT_MAX_WAITERS, 5, 6, 2, 3,
	    false, NULL },
	{ "mode_name_is_case_insensitive", L("LOCK a MODE=shared"), KL_OK,
	    OPT_MODE, 0, 0, 1, 0, true, NULL },
	{ "every_lock_option_at_once_is_ok",
	    L("LOCK a b timeout=10 ttl=20 limit=3 max_waiters=4 "
	    "mode=exclusive"), KL_OK, OPT_TIMEOUT | OPT_TTL | OPT_LIMIT |
	    OPT_MAX_WAITERS | OPT_MODE, 10, 20, 3, 4, false, NULL },
	{ "options_may_come_before_keys", L("LOCK timeout=5 a"), KL_OK,
	    OPT_TIMEOUT, 5, 0, 1, 0, false, NULL },
	{ "mode_exclusive_with_limit_is_ok", L("LOCK a mode=exclusive limit=3"),
	    KL_OK, OPT_MODE | OPT_LIMIT, 0, 0, 3, 0, false, NULL },
	{ "repeated_option_is_syntax", L("LOCK a timeout=1 timeout=2"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option timeout given twice" },
	{ "repeated_option_in_other_case_is_syntax",
	    L("LOCK a TTL=1 ttl=1"), KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option ttl given twice" },
	{ "repeated_mode_is_syntax", L("LOCK a mode=shared mode=exclusive"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, "option mode given twice" },
	{ "repeated_max_waiters_is_syntax",
	    L("LOCK a max_waiters=0 max_waiters=0"), KL_ERR_SYNTAX, 0, 0, 0,
	    1, 0, false, "option max_waiters given twice" },
	{ "unknown_option_is_syntax", L("LOCK a foo=1"), KL_ERR_SYNTAX, 0, 0,
	    0, 1, 0, false, "unknown option foo" },
	{ "option_name_prefix_is_unknown", L("LOCK a time=1"), KL_ERR_SYNTAX,
	    0, 0, 0, 1, 0, false, "unknown option time" },
	{ "option_name_with_suffix_is_unknown", L("LOCK a ttl_ms=1"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false, "unknown option ttl_ms" },
	{ "unknown_option_of_32_bytes_is_echoed",
	    L("LOCK a abcdefghijklmnopqrstuvwxyz012345=1"), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false,
	    "unknown option abcdefghijklmnopqrstuvwxyz012345" },
	{ "unknown_option_of_33_bytes_is_not_echoed",
	    L("LOCK a abcdefghijklmnopqrstuvwxyz0123456=1"), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false, "unknown option" },
	{ "unknown_option_with_control_byte_is_not_echoed",
	    L("LOCK a f\x01o=1"), KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "unknown option" },
	{ "unknown_option_with_utf8_is_not_echoed",
	    L("LOCK a caf\xc3\xa9=1"), KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "unknown option" },
	{ "empty_option_name_is_syntax", L("LOCK a =5"), KL_ERR_SYNTAX, 0, 0,
	    0, 1, 0, false, "option with an empty name" },
	{ "two_equals_alone_is_empty_name", L("LOCK a =="), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false, "option with an empty name" },
	{ "trylock_takes_no_timeout", L("TRYLOCK a timeout=5"), KL_ERR_SYNTAX,
	    0, 0, 0, 1, 0, false, "TRYLOCK does not take option timeout" },
	{ "trylock_takes_no_timeout_of_0", L("TRYLOCK a timeout=0"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "TRYLOCK does not take option timeout" },
	{ "trylock_takes_other_lock_options",
	    L("TRYLOCK a mode=shared ttl=5 max_waiters=0"), KL_OK,
	    OPT_MODE | OPT_TTL | OPT_MAX_WAITERS, 0, 5, 1, 0, true, NULL },
	{ "trylock_takes_limit", L("TRYLOCK a limit=4"), KL_OK, OPT_LIMIT, 0,
	    0, 4, 0, false, NULL },
	{ "unlock_takes_no_options", L("UNLOCK a ttl=5"), KL_ERR_SYNTAX, 0, 0,
	    0, 1, 0, false, "UNLOCK does not take option ttl" },
	{ "refresh_takes_no_timeout", L("REFRESH a ttl=5 timeout=1"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "REFRESH does not take option timeout" },
	{ "refresh_without_ttl_is_syntax", L("REFRESH a"), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false, "REFRESH needs option ttl" },
	{ "refresh_with_ttl_0_is_syntax", L("REFRESH a ttl=0"), KL_ERR_SYNTAX,
	    0, 0, 0, 1, 0, false,
	    "bad value for ttl: must be 1 to 1000000000000" },
	{ "refresh_ttl_is_stored", L("REFRESH a ttl=250"), KL_OK, OPT_TTL, 0,
	    250, 1, 0, false, NULL },
	{ "ping_takes_no_options", L("PING timeout=5"), KL_ERR_SYNTAX, 0, 0,
	    0, 1, 0, false, "PING does not take option timeout" },
	{ "stats_rejects_unknown_option", L("STATS foo=1"), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false, "unknown option foo" },
	{ "info_takes_no_options", L("INFO a mode=shared"), KL_ERR_SYNTAX, 0,
	    0, 0, 1, 0, false, "INFO does not take option mode" },
	{ "unlockall_takes_no_options", L("UNLOCKALL ttl=1"), KL_ERR_SYNTAX,
	    0, 0, 0, 1, 0, false, "UNLOCKALL does not take option ttl" },
	{ "name_takes_no_options", L("NAME x timeout=1"), KL_ERR_SYNTAX, 0, 0,
	    0, 1, 0, false, "NAME does not take option timeout" },
	{ "quit_takes_no_options", L("QUIT limit=2"), KL_ERR_SYNTAX, 0, 0, 0,
	    1, 0, false, "QUIT does not take option limit" },
	{ "shared_with_limit_is_syntax", L("LOCK a mode=shared limit=2"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option limit cannot be used with mode=shared" },
	{ "shared_with_limit_of_1_is_syntax", L("LOCK a limit=1 mode=shared"),
	    KL_ERR_SYNTAX, 0, 0, 0, 1, 0, false,
	    "option limit cannot be used with mode=shared" },
	{ "shared_upper_case_with_limit_is_syntax",
	    L("TRYLOCK a MODE=SHARED LIMIT=1"), KL_ERR_SYNTAX, 0, 0, 0, 1, 0,
	    false, "option limit cannot be used with mode=shared" },
};

/* Which check wins: the first bad token from the left, then the line. */
static const struct parse_case order_cases[] = {
	{ "unknown_command_wins_over_bad_key", L("FOO \x01"), KL_ERR_SYNTAX,
	    CMD_NONE, 0, "unknown command FOO" },
	{ "bad_key_before_bad_option_is_badkey", L("LOCK \x01 foo=1"),
	    KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x01 at offset 0" },
	{ "bad_option_before_bad_key_is_syntax", L("LOCK foo=1 \x01"),
	    KL_ERR_SYNTAX, CMD_LOCK, 0, "unknown option foo" },
	{ "first_of_two_bad_keys_decides", L("LOCK a\x01 b\x02"),
	    KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x01 at offset 1" },
	{ "bad_key_wins_over_missing_ttl", L("REFRESH \x01"), KL_ERR_BADKEY,
	    CMD_REFRESH, 0, "key 1 has control byte 0x01 at offset 0" },
	{ "bad_key_wins_over_too_many_keys", L("INFO a \x01"), KL_ERR_BADKEY,
	    CMD_INFO, 0, "key 2 has control byte 0x01 at offset 0" },
	{ "bad_option_wins_over_shared_with_limit",
	    L("LOCK a mode=shared limit=2 foo=1"), KL_ERR_SYNTAX, CMD_LOCK, 0,
	    "unknown option foo" },
	{ "bad_key_wins_over_shared_with_limit",
	    L("LOCK mode=shared limit=2 \x7f"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x7f at offset 0" },
	{ "missing_key_wins_over_shared_with_limit",
	    L("LOCK mode=shared limit=2"), KL_ERR_SYNTAX, CMD_LOCK, 0,
	    "LOCK needs at least one key" },
	{ "missing_key_wins_over_missing_ttl", L("REFRESH"), KL_ERR_SYNTAX,
	    CMD_REFRESH, 0, "REFRESH needs at least one key" },
	{ "option_error_wins_over_extra_argument", L("PING a timeout=1"),
	    KL_ERR_SYNTAX, CMD_PING, 0, "PING does not take option timeout" },
	{ "arguments_of_ping_are_not_keys", L("PING \x01"), KL_ERR_SYNTAX,
	    CMD_PING, 0, "PING takes no arguments" },
	{ "bad_name_wins_over_extra_label", L("NAME \x01 b"), KL_ERR_SYNTAX,
	    CMD_NAME, 0, "name has control byte 0x01 at offset 0" },
	{ "repeat_wins_over_bad_value", L("LOCK a ttl=1 ttl=0"),
	    KL_ERR_SYNTAX, CMD_LOCK, 0, "option ttl given twice" },
	{ "unaccepted_option_wins_over_bad_value", L("TRYLOCK a timeout=x"),
	    KL_ERR_SYNTAX, CMD_TRYLOCK, 0,
	    "TRYLOCK does not take option timeout" },
	{ "unknown_option_wins_over_empty_value", L("LOCK a foo="),
	    KL_ERR_SYNTAX, CMD_LOCK, 0, "unknown option foo" },
};

START_TEST(order_table)
{
	cp_run_parse_case(&order_cases[_i]);
}
END_TEST

START_TEST(option_table)
{
	const struct opt_case	*oc = &option_cases[_i];
	struct request		 req;
	enum kl_err		 err;
	char			*buf;

	err = cp_parse_exact(oc->line, oc->len, &req, &buf);
	ck_assert_msg(err == oc->err, "%s: got %s (%s), want %s", oc->rule,
	    err == KL_OK ? "OK" : proto_err_word(err), req.why,
	    oc->err == KL_OK ? "OK" : proto_err_word(oc->err));
	if (oc->why != NULL)
		ck_assert_msg(strcmp(req.why, oc->why) == 0,
		    "%s: got why \"%s\", want \"%s\"", oc->rule, req.why,
		    oc->why);
	cp_assert_why_is_clean(oc->rule, &req, err);
	cp_assert_why_has_house_style(oc->rule, &req);
	if (err == KL_OK) {
		ck_assert_msg(req.opts == oc->opts, "%s: opts %#x, want %#x",
		    oc->rule, req.opts, oc->opts);
		ck_assert_msg(req.timeout_ms == oc->timeout_ms,
		    "%s: timeout_ms", oc->rule);
		ck_assert_msg(req.ttl_ms == oc->ttl_ms, "%s: ttl_ms",
		    oc->rule);
		ck_assert_msg(req.limit == oc->limit, "%s: limit", oc->rule);
		ck_assert_msg(req.max_waiters == oc->max_waiters,
		    "%s: max_waiters", oc->rule);
		ck_assert_msg(req.shared == oc->shared, "%s: shared",
		    oc->rule);
	}
	free(buf);
}
END_TEST

START_TEST(bad_option_past_hard_max_is_still_syntax)
{
	struct request	 req;
	size_t		 len;
	char		*line, *buf;

	line = cp_build_many_keys(KL_KEYS_HARD_MAX + 1, " ttl=0", &len);
	ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why,
	    "bad value for ttl: must be 1 to 1000000000000");
	free(buf);
	free(line);
}
END_TEST

/* Any byte, in a key, a command word, an option name or value, a label
 * or a secret: the error text never carries it. */
START_TEST(why_never_echoes_a_bad_byte)
{
	static const char *const fmts[] = {
		"LOCK a%cb", "%cLOCK a", "LOCK a f%c=1", "LOCK a timeout=%c",
		"LOCK a mode=%c", "NAME x%c", "INFO a b%c", "AUTH %c a",
		"PING %c", "LOCK a%c=1", "TRYLOCK %c timeout=1",
	};
	struct request		req;

	for (size_t f = 0; f < NELEM(fmts); f++)
		for (int c = 0; c < 256; c++) {
			char	line[64];
			size_t	n = 0;

			for (const char *p = fmts[f]; *p != '\0'; p++) {
				if (p[0] == '%' && p[1] == 'c') {
					line[n++] = (char)c;
					p++;
				} else
					line[n++] = *p;
			}
			enum kl_err	err = proto_parse(line, n, &req);

			cp_assert_why_is_clean(fmts[f], &req, err);
			if (err != KL_OK && (c < 0x20 || c >= 0x7f) &&
			    c != 0 && strchr(req.why, c) != NULL)
				ck_abort_msg("%s with 0x%02x: why has it",
				    fmts[f], c);
		}
}
END_TEST

void
cp_add_options(Suite *s)
{
	TCase	*tc;

	tc = tcase_create("options");
	tcase_add_loop_test(tc, option_table, 0, NELEM(option_cases));
	tcase_add_test(tc, bad_option_past_hard_max_is_still_syntax);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_loop_test(tc, order_table, 0, NELEM(order_cases));
	tcase_add_test(tc, why_never_echoes_a_bad_byte);
	suite_add_tcase(s, tc);
}
