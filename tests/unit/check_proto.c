/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of proto: tables of {line, expected result} per rule of
 * PROTOCOL.md, edge tests built at run time (the longest key, the most
 * keys), an exhaustive comparison of the UTF-8 check with a reference
 * decoder, and the case directories in tests/unit/proto-cases, which are
 * also the fuzz seed corpus. Every error text is checked to be printable
 * ASCII or clean UTF-8, so no bad byte of a request can reach a reply.
 */
#define _POSIX_C_SOURCE 200809L

#include <sys/types.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto.h"

#define L(s)		(s), sizeof(s) - 1
#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))
#define CASES_DIR	"tests/unit/proto-cases"
#define CASES_MIN	30
#define NOT_UTF8(key, off)						\
	"key " #key " is not valid UTF-8 at offset " #off

/* Line, expected result, count of arguments (checked when err is KL_OK),
 * and the exact error text (NULL: only checked to be clean). */
struct parse_case {
	const char	*rule;
	const char	*line;
	size_t		 len;
	enum kl_err	 err;
	enum cmd_id	 cmd;
	size_t		 nargs;
	const char	*why;
};

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

static const struct parse_case command_cases[] = {
	{ "lock_with_one_key_is_ok", L("LOCK a"), KL_OK, CMD_LOCK, 1, NULL },
	{ "lock_with_three_keys_is_ok", L("LOCK a b c"), KL_OK, CMD_LOCK, 3,
	    NULL },
	{ "command_in_lower_case_is_ok", L("lock a"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "command_in_mixed_case_is_ok", L("LoCk a"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "trylock_with_keys_is_ok", L("TRYLOCK a b"), KL_OK, CMD_TRYLOCK, 2,
	    NULL },
	{ "unlock_with_keys_is_ok", L("UNLOCK a b"), KL_OK, CMD_UNLOCK, 2,
	    NULL },
	{ "unlockall_alone_is_ok", L("UNLOCKALL"), KL_OK, CMD_UNLOCKALL, 0,
	    NULL },
	{ "unlockall_in_lower_case_is_ok", L("unlockall"), KL_OK,
	    CMD_UNLOCKALL, 0, NULL },
	{ "unlock_all_in_two_words_unlocks_key_all", L("UNLOCK ALL"), KL_OK,
	    CMD_UNLOCK, 1, NULL },
	{ "refresh_with_ttl_is_ok", L("REFRESH a b ttl=5"), KL_OK,
	    CMD_REFRESH, 2, NULL },
	{ "stats_alone_is_ok", L("STATS"), KL_OK, CMD_STATS, 0, NULL },
	{ "info_with_one_key_is_ok", L("INFO a"), KL_OK, CMD_INFO, 1, NULL },
	{ "name_with_one_label_is_ok", L("NAME worker-1"), KL_OK, CMD_NAME,
	    1, NULL },
	{ "auth_with_one_secret_is_ok", L("AUTH s3cret"), KL_OK, CMD_AUTH, 1,
	    NULL },
	{ "ping_alone_is_ok", L("PING"), KL_OK, CMD_PING, 0, NULL },
	{ "ping_in_lower_case_is_ok", L("ping"), KL_OK, CMD_PING, 0, NULL },
	{ "quit_alone_is_ok", L("QUIT"), KL_OK, CMD_QUIT, 0, NULL },
	{ "tabs_separate_tokens", L("LOCK\ta\tb"), KL_OK, CMD_LOCK, 2, NULL },
	{ "runs_of_blanks_separate_tokens", L("LOCK  \t a \t\t b"), KL_OK,
	    CMD_LOCK, 2, NULL },
	{ "leading_blanks_are_ignored", L(" \t PING"), KL_OK, CMD_PING, 0,
	    NULL },
	{ "trailing_blanks_are_ignored", L("PING \t "), KL_OK, CMD_PING, 0,
	    NULL },
	{ "duplicate_keys_are_each_counted", L("LOCK a a"), KL_OK, CMD_LOCK,
	    2, NULL },
	{ "empty_line_is_no_command", L(""), KL_OK, CMD_NONE, 0, NULL },
	{ "line_of_spaces_is_no_command", L("    "), KL_OK, CMD_NONE, 0,
	    NULL },
	{ "line_of_tabs_is_no_command", L("\t\t"), KL_OK, CMD_NONE, 0, NULL },
	{ "line_of_mixed_blanks_is_no_command", L(" \t \t "), KL_OK, CMD_NONE,
	    0, NULL },
	{ "auth_secret_with_equals_is_a_secret", L("AUTH a=b"), KL_OK,
	    CMD_AUTH, 1, NULL },
	{ "auth_secret_like_an_option_is_a_secret", L("AUTH timeout=5"),
	    KL_OK, CMD_AUTH, 1, NULL },
	{ "auth_secret_of_equals_alone_is_a_secret", L("AUTH ="), KL_OK,
	    CMD_AUTH, 1, NULL },
	{ "auth_secret_is_raw_bytes", L("AUTH \x01\xff"), KL_OK, CMD_AUTH, 1,
	    NULL },
	{ "unknown_command_is_syntax", L("FOO a"), KL_ERR_SYNTAX, CMD_NONE, 0,
	    "unknown command FOO" },
	{ "unknown_command_is_echoed_as_given", L("frob"), KL_ERR_SYNTAX,
	    CMD_NONE, 0, "unknown command frob" },
	{ "command_prefix_is_unknown", L("LOC a"), KL_ERR_SYNTAX, CMD_NONE, 0,
	    "unknown command LOC" },
	{ "command_with_extra_letters_is_unknown", L("LOCKS a"),
	    KL_ERR_SYNTAX, CMD_NONE, 0, "unknown command LOCKS" },
	{ "command_beyond_the_table_is_unknown", L("ZZZ"), KL_ERR_SYNTAX,
	    CMD_NONE, 0, "unknown command ZZZ" },
	{ "command_before_the_table_is_unknown", L("AAA"), KL_ERR_SYNTAX,
	    CMD_NONE, 0, "unknown command AAA" },
	{ "option_as_command_is_unknown_command", L("timeout=5"),
	    KL_ERR_SYNTAX, CMD_NONE, 0, "unknown command timeout=5" },
	{ "command_with_nul_is_unknown_and_not_echoed", L("PI\0NG"),
	    KL_ERR_SYNTAX, CMD_NONE, 0, "unknown command" },
	{ "command_with_trailing_nul_is_unknown", L("PING\0"), KL_ERR_SYNTAX,
	    CMD_NONE, 0, "unknown command" },
	{ "command_with_cr_is_unknown_and_not_echoed", L("PING\r"),
	    KL_ERR_SYNTAX, CMD_NONE, 0, "unknown command" },
	{ "command_with_utf8_is_not_echoed", L("L\xc3\x96" "CK a"),
	    KL_ERR_SYNTAX, CMD_NONE, 0, "unknown command" },
	{ "command_of_32_bytes_is_echoed",
	    L("ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"), KL_ERR_SYNTAX, CMD_NONE, 0,
	    "unknown command ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" },
	{ "command_of_33_bytes_is_not_echoed",
	    L("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456"), KL_ERR_SYNTAX, CMD_NONE,
	    0, "unknown command" },
	{ "ping_with_an_argument_is_syntax", L("PING x"), KL_ERR_SYNTAX,
	    CMD_PING, 0, "PING takes no arguments" },
	{ "quit_with_an_argument_is_syntax", L("QUIT now"), KL_ERR_SYNTAX,
	    CMD_QUIT, 0, "QUIT takes no arguments" },
	{ "stats_with_an_argument_is_syntax", L("STATS a"), KL_ERR_SYNTAX,
	    CMD_STATS, 0, "STATS takes no arguments" },
	{ "unlockall_with_an_argument_is_syntax", L("UNLOCKALL a"),
	    KL_ERR_SYNTAX, CMD_UNLOCKALL, 0, "UNLOCKALL takes no arguments" },
	{ "lock_without_key_is_syntax", L("LOCK"), KL_ERR_SYNTAX, CMD_LOCK, 0,
	    "LOCK needs at least one key" },
	{ "lock_with_only_blanks_after_is_syntax", L("LOCK \t "),
	    KL_ERR_SYNTAX, CMD_LOCK, 0, "LOCK needs at least one key" },
	{ "lock_with_only_options_is_syntax", L("LOCK timeout=5"),
	    KL_ERR_SYNTAX, CMD_LOCK, 0, "LOCK needs at least one key" },
	{ "trylock_without_key_is_syntax", L("TRYLOCK"), KL_ERR_SYNTAX,
	    CMD_TRYLOCK, 0, "TRYLOCK needs at least one key" },
	{ "unlock_without_key_is_syntax", L("UNLOCK"), KL_ERR_SYNTAX,
	    CMD_UNLOCK, 0, "UNLOCK needs at least one key" },
	{ "refresh_without_key_is_syntax", L("REFRESH ttl=5"), KL_ERR_SYNTAX,
	    CMD_REFRESH, 0, "REFRESH needs at least one key" },
	{ "info_without_key_is_syntax", L("INFO"), KL_ERR_SYNTAX, CMD_INFO, 0,
	    "INFO needs a key" },
	{ "info_with_two_keys_is_syntax", L("INFO a b"), KL_ERR_SYNTAX,
	    CMD_INFO, 0, "INFO takes only one key" },
	{ "name_without_label_is_syntax", L("NAME"), KL_ERR_SYNTAX, CMD_NAME,
	    0, "NAME needs a label" },
	{ "name_with_two_labels_is_syntax", L("NAME a b"), KL_ERR_SYNTAX,
	    CMD_NAME, 0, "NAME takes only one label" },
	{ "auth_without_secret_is_syntax", L("AUTH"), KL_ERR_SYNTAX, CMD_AUTH,
	    0, "AUTH needs a secret" },
	{ "auth_with_two_secrets_is_syntax", L("AUTH a b"), KL_ERR_SYNTAX,
	    CMD_AUTH, 0, "AUTH takes only one secret" },
	{ "auth_takes_no_options", L("AUTH s timeout=5"), KL_ERR_SYNTAX,
	    CMD_AUTH, 0, "AUTH takes only one secret" },
};

static const struct parse_case key_cases[] = {
	{ "ascii_key_is_ok", L("LOCK balance:42"), KL_OK, CMD_LOCK, 1, NULL },
	{ "one_byte_key_is_ok", L("LOCK x"), KL_OK, CMD_LOCK, 1, NULL },
	{ "key_of_all_printable_punctuation_is_ok",
	    L("LOCK !\"#$%&'()*+,-./:;<>?@[\\]^_`{|}~"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "key_with_two_byte_utf8_is_ok", L("LOCK caf\xc3\xa9"), KL_OK,
	    CMD_LOCK, 1, NULL },
	{ "key_with_three_byte_utf8_is_ok", L("LOCK \xe2\x82\xac"), KL_OK,
	    CMD_LOCK, 1, NULL },
	{ "key_with_four_byte_utf8_is_ok", L("LOCK \xf0\x9f\x94\x92"), KL_OK,
	    CMD_LOCK, 1, NULL },
	{ "key_u0080_c1_control_is_ok", L("LOCK \xc2\x80"), KL_OK, CMD_LOCK,
	    1, NULL },
	{ "key_u07ff_is_ok", L("LOCK \xdf\xbf"), KL_OK, CMD_LOCK, 1, NULL },
	{ "key_u0800_is_ok", L("LOCK \xe0\xa0\x80"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "key_ud7ff_below_surrogates_is_ok", L("LOCK \xed\x9f\xbf"), KL_OK,
	    CMD_LOCK, 1, NULL },
	{ "key_ue000_above_surrogates_is_ok", L("LOCK \xee\x80\x80"), KL_OK,
	    CMD_LOCK, 1, NULL },
	{ "key_ufeff_bom_is_ok", L("LOCK \xef\xbb\xbf"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "key_uffff_noncharacter_is_ok", L("LOCK \xef\xbf\xbf"), KL_OK,
	    CMD_LOCK, 1, NULL },
	{ "key_u10000_is_ok", L("LOCK \xf0\x90\x80\x80"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "key_u10ffff_is_ok", L("LOCK \xf4\x8f\xbf\xbf"), KL_OK, CMD_LOCK, 1,
	    NULL },
	{ "overlong_c0_80_is_badkey", L("LOCK \xc0\x80"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "overlong_c1_bf_is_badkey", L("LOCK ab\xc1\xbf"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, NOT_UTF8(1, 2) },
	{ "overlong_three_byte_slash_is_badkey", L("LOCK \xe0\x80\xaf"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "overlong_three_byte_u07ff_is_badkey", L("LOCK \xe0\x9f\xbf"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "overlong_four_byte_slash_is_badkey", L("LOCK \xf0\x80\x80\xaf"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "overlong_four_byte_uffff_is_badkey", L("LOCK \xf0\x8f\xbf\xbf"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "surrogate_ud800_is_badkey", L("LOCK \xed\xa0\x80"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "surrogate_udfff_is_badkey", L("LOCK x\xed\xbf\xbf"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, NOT_UTF8(1, 1) },
	{ "surrogate_pair_in_cesu8_is_badkey",
	    L("LOCK \xed\xa0\xbd\xed\xb8\x80"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    NOT_UTF8(1, 0) },
	{ "code_point_u110000_is_badkey", L("LOCK \xf4\x90\x80\x80"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "lead_byte_f5_is_badkey", L("LOCK \xf5\x80\x80\x80"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "five_byte_form_is_badkey", L("LOCK \xf8\x88\x80\x80\x80"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "six_byte_form_is_badkey", L("LOCK \xfc\x84\x80\x80\x80\x80"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "byte_fe_is_badkey", L("LOCK \xfe"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    NOT_UTF8(1, 0) },
	{ "byte_ff_is_badkey", L("LOCK a\xff"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    NOT_UTF8(1, 1) },
	{ "truncated_two_byte_at_end_is_badkey", L("LOCK ab\xc3"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 2) },
	{ "truncated_three_byte_at_end_is_badkey", L("LOCK ab\xe2\x82"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 2) },
	{ "truncated_four_byte_at_end_is_badkey", L("LOCK \xf0\x9f\x94"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "truncated_two_byte_before_ascii_is_badkey", L("LOCK \xc3" "A"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "truncated_three_byte_before_ascii_is_badkey",
	    L("LOCK \xe2\x82" "A"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    NOT_UTF8(1, 0) },
	{ "truncated_four_byte_before_key_end_is_badkey",
	    L("LOCK \xf0\x9f\x94 b"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    NOT_UTF8(1, 0) },
	{ "stray_continuation_at_start_is_badkey", L("LOCK \x80" "abc"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 0) },
	{ "stray_continuation_in_middle_is_badkey", L("LOCK ab\xbf" "cd"),
	    KL_ERR_BADKEY, CMD_LOCK, 0, NOT_UTF8(1, 2) },
	{ "extra_continuation_after_sequence_is_badkey",
	    L("LOCK \xc3\xa9\xa9"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    NOT_UTF8(1, 2) },
	{ "nul_in_middle_is_badkey", L("LOCK a\0b"), KL_ERR_BADKEY, CMD_LOCK,
	    0, "key 1 has control byte 0x00 at offset 1" },
	{ "nul_at_end_is_badkey", L("LOCK ab\0"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x00 at offset 2" },
	{ "nul_as_whole_key_is_badkey", L("LOCK \0"), KL_ERR_BADKEY, CMD_LOCK,
	    0, "key 1 has control byte 0x00 at offset 0" },
	{ "cr_in_middle_is_badkey", L("LOCK a\rb"), KL_ERR_BADKEY, CMD_LOCK,
	    0, "key 1 has control byte 0x0d at offset 1" },
	{ "lf_in_middle_is_badkey", L("LOCK a\nb"), KL_ERR_BADKEY, CMD_LOCK,
	    0, "key 1 has control byte 0x0a at offset 1" },
	{ "byte_01_is_badkey", L("LOCK \x01"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x01 at offset 0" },
	{ "byte_1f_is_badkey", L("LOCK abc\x1f"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x1f at offset 3" },
	{ "vertical_tab_is_badkey", L("LOCK a\vb"), KL_ERR_BADKEY, CMD_LOCK,
	    0, "key 1 has control byte 0x0b at offset 1" },
	{ "form_feed_is_badkey", L("LOCK a\fb"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x0c at offset 1" },
	{ "escape_is_badkey", L("LOCK \x1b[31m"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x1b at offset 0" },
	{ "del_is_badkey", L("LOCK a\x7f"), KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x7f at offset 1" },
	{ "control_byte_after_utf8_has_byte_offset", L("LOCK \xc3\xa9\x01"),
	    KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 1 has control byte 0x01 at offset 2" },
	{ "bad_second_key_is_named_key_2", L("LOCK good b\x01" "ad"),
	    KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 2 has control byte 0x01 at offset 1" },
	{ "bad_third_key_is_named_key_3", L("LOCK a b c\xff"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, NOT_UTF8(3, 1) },
	{ "key_number_skips_options", L("LOCK a timeout=1 \x7f"),
	    KL_ERR_BADKEY, CMD_LOCK, 0,
	    "key 2 has control byte 0x7f at offset 0" },
	{ "bad_key_of_trylock_is_badkey", L("TRYLOCK \x01"), KL_ERR_BADKEY,
	    CMD_TRYLOCK, 0, NULL },
	{ "bad_key_of_unlock_is_badkey", L("UNLOCK \xc0\x80"), KL_ERR_BADKEY,
	    CMD_UNLOCK, 0, NULL },
	{ "bad_key_of_refresh_is_badkey", L("REFRESH \x7f ttl=5"),
	    KL_ERR_BADKEY, CMD_REFRESH, 0, NULL },
	{ "bad_key_of_info_is_badkey", L("INFO \xed\xa0\x80"), KL_ERR_BADKEY,
	    CMD_INFO, 0, NULL },
	{ "key_with_equals_is_an_option", L("LOCK a=b"), KL_ERR_SYNTAX,
	    CMD_LOCK, 0, "unknown option a" },
	{ "key_ending_in_equals_is_an_option", L("LOCK ab="), KL_ERR_SYNTAX,
	    CMD_LOCK, 0, "unknown option ab" },
	{ "key_of_equals_alone_is_an_option", L("LOCK ="), KL_ERR_SYNTAX,
	    CMD_LOCK, 0, "option with an empty name" },
	{ "name_with_utf8_is_ok", L("NAME caf\xc3\xa9"), KL_OK, CMD_NAME, 1,
	    NULL },
	{ "name_with_bad_utf8_is_syntax", L("NAME \xc0\x80"), KL_ERR_SYNTAX,
	    CMD_NAME, 0, "name is not valid UTF-8 at offset 0" },
	{ "name_with_control_byte_is_syntax", L("NAME a\x01"), KL_ERR_SYNTAX,
	    CMD_NAME, 0, "name has control byte 0x01 at offset 1" },
	{ "name_with_nul_is_syntax", L("NAME a\0"), KL_ERR_SYNTAX, CMD_NAME,
	    0, "name has control byte 0x00 at offset 1" },
	{ "name_with_del_is_syntax", L("NAME a\x7f"), KL_ERR_SYNTAX, CMD_NAME,
	    0, "name has control byte 0x7f at offset 1" },
	{ "name_with_equals_is_an_option", L("NAME a=b"), KL_ERR_SYNTAX,
	    CMD_NAME, 0, "unknown option a" },
	{ "bad_second_name_argument_is_named", L("NAME a \x01"),
	    KL_ERR_SYNTAX, CMD_NAME, 0,
	    "argument 2 has control byte 0x01 at offset 0" },
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

/* Case directories, found when main() builds the suite. */
static char	**case_names;
static int	  ncases;

/* A decoder written apart from proto.c's, to check it against. */
static bool
ref_utf8_is_valid(const unsigned char *s, size_t len)
{
	size_t	i = 0;

	while (i < len) {
		uint32_t	cp, min;
		size_t		n;

		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if ((s[i] & 0xe0) == 0xc0) {
			n = 2;
			cp = s[i] & 0x1f;
			min = 0x80;
		} else if ((s[i] & 0xf0) == 0xe0) {
			n = 3;
			cp = s[i] & 0x0f;
			min = 0x800;
		} else if ((s[i] & 0xf8) == 0xf0) {
			n = 4;
			cp = s[i] & 0x07;
			min = 0x10000;
		} else
			return false;
		if (len - i < n)
			return false;
		for (size_t k = 1; k < n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n;
	}
	return true;
}

static bool
ref_key_is_valid(const unsigned char *s, size_t len)
{
	if (len == 0 || len > KL_KEY_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] == 0x7f || s[i] == ' ' || s[i] == '=')
			return false;
	return ref_utf8_is_valid(s, len);
}

/* An error text is NUL-terminated and clean: printable, valid UTF-8. */
static void
assert_why_is_clean(const char *rule, const struct request *req,
    enum kl_err err)
{
	const unsigned char	*w = (const unsigned char *)req->why;
	const char		*nul;
	size_t			 len;

	if ((nul = memchr(req->why, '\0', sizeof(req->why))) == NULL)
		ck_abort_msg("%s: why is not NUL-terminated", rule);
	len = (size_t)(nul - req->why);
	if (err == KL_OK && len != 0)
		ck_abort_msg("%s: why is set on OK: %s", rule, req->why);
	if (err == KL_OK)
		return;
	if (len == 0)
		ck_abort_msg("%s: error without a why", rule);
	if (w[len - 1] == ' ')
		ck_abort_msg("%s: why ends in a space", rule);
	for (size_t i = 0; i < len; i++)
		if (w[i] < 0x20 || w[i] == 0x7f)
			ck_abort_msg("%s: why has control byte 0x%02x", rule,
			    w[i]);
	if (!ref_utf8_is_valid(w, len))
		ck_abort_msg("%s: why is not UTF-8", rule);
}

/* STYLE.md, Replies: no trailing period, no capital but a command word. */
static void
assert_why_has_house_style(const char *rule, const struct request *req)
{
	const char	*name = proto_cmd_name(req->cmd);
	size_t		 len = strlen(req->why), first;

	if (len == 0)
		return;
	ck_assert_msg(req->why[len - 1] != '.', "%s: why ends in a period",
	    rule);
	if (req->why[0] < 'A' || req->why[0] > 'Z')
		return;
	first = strcspn(req->why, " ");
	ck_assert_msg(name != NULL && strlen(name) == first &&
	    memcmp(req->why, name, first) == 0,
	    "%s: why starts with a capital: %s", rule, req->why);
}

/*
 * Parses a copy of line that is exactly len bytes long, so that the
 * sanitizers catch any read past it. The caller frees *bufp.
 */
static enum kl_err
parse_exact(const char *line, size_t len, struct request *req, char **bufp)
{
	char	*buf;

	buf = malloc(len > 0 ? len : 1);
	ck_assert_ptr_nonnull(buf);
	memcpy(buf, line, len);
	*bufp = buf;
	return proto_parse(buf, len, req);
}

static void
run_parse_case(const struct parse_case *pc)
{
	struct request	 req;
	enum kl_err	 err;
	char		*buf;

	err = parse_exact(pc->line, pc->len, &req, &buf);
	ck_assert_msg(err == pc->err, "%s: got %s (%s), want %s", pc->rule,
	    err == KL_OK ? "OK" : proto_err_word(err), req.why,
	    pc->err == KL_OK ? "OK" : proto_err_word(pc->err));
	ck_assert_msg(req.cmd == pc->cmd, "%s: got command %d, want %d",
	    pc->rule, (int)req.cmd, (int)pc->cmd);
	if (err == KL_OK)
		ck_assert_msg(req.nargs == pc->nargs,
		    "%s: got %zu arguments, want %zu", pc->rule, req.nargs,
		    pc->nargs);
	if (pc->why != NULL)
		ck_assert_msg(strcmp(req.why, pc->why) == 0,
		    "%s: got why \"%s\", want \"%s\"", pc->rule, req.why,
		    pc->why);
	assert_why_is_clean(pc->rule, &req, err);
	assert_why_has_house_style(pc->rule, &req);
	for (size_t i = 0; err == KL_OK && i < req.nargs; i++)
		ck_assert_msg(req.args[i] >= buf &&
		    req.args[i] + req.arglens[i] <= buf + pc->len,
		    "%s: argument %zu lies outside the line", pc->rule, i + 1);
	free(buf);
}

START_TEST(command_table)
{
	run_parse_case(&command_cases[_i]);
}
END_TEST

START_TEST(key_table)
{
	run_parse_case(&key_cases[_i]);
}
END_TEST

START_TEST(order_table)
{
	run_parse_case(&order_cases[_i]);
}
END_TEST

START_TEST(option_table)
{
	const struct opt_case	*oc = &option_cases[_i];
	struct request		 req;
	enum kl_err		 err;
	char			*buf;

	err = parse_exact(oc->line, oc->len, &req, &buf);
	ck_assert_msg(err == oc->err, "%s: got %s (%s), want %s", oc->rule,
	    err == KL_OK ? "OK" : proto_err_word(err), req.why,
	    oc->err == KL_OK ? "OK" : proto_err_word(oc->err));
	if (oc->why != NULL)
		ck_assert_msg(strcmp(req.why, oc->why) == 0,
		    "%s: got why \"%s\", want \"%s\"", oc->rule, req.why,
		    oc->why);
	assert_why_is_clean(oc->rule, &req, err);
	assert_why_has_house_style(oc->rule, &req);
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

/* Builds "CMD " + n copies of byte c (+ tail) and parses it. */
static enum kl_err
parse_built(const char *cmd, size_t n, char c, const char *tail,
    struct request *req, char **bufp)
{
	size_t		 cl = strlen(cmd), tl = strlen(tail), len;
	char		*line;
	enum kl_err	 err;

	len = cl + n + tl;
	line = malloc(len);
	ck_assert_ptr_nonnull(line);
	memcpy(line, cmd, cl);
	memset(line + cl, c, n);
	memcpy(line + cl + n, tail, tl);
	err = parse_exact(line, len, req, bufp);
	free(line);
	return err;
}

START_TEST(key_of_250_bytes_is_accepted)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("LOCK ", KL_KEY_MAX, 'k', "", &req,
	    &buf), KL_OK);
	ck_assert_uint_eq(req.nargs, 1);
	ck_assert_uint_eq(req.arglens[0], KL_KEY_MAX);
	ck_assert_ptr_eq(req.args[0], buf + 5);
	free(buf);
}
END_TEST

START_TEST(key_of_251_bytes_is_badkey)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("LOCK a ", KL_KEY_MAX + 1, 'k', "",
	    &req, &buf), KL_ERR_BADKEY);
	ck_assert_str_eq(req.why, "key 2 is longer than 250 bytes");
	assert_why_is_clean("key_of_251_bytes_is_badkey", &req,
	    KL_ERR_BADKEY);
	free(buf);
}
END_TEST

START_TEST(key_of_250_bytes_of_utf8_is_accepted)
{
	char		 line[5 + KL_KEY_MAX];
	struct request	 req;

	memcpy(line, "LOCK ", 5);
	for (size_t i = 0; i < KL_KEY_MAX / 2; i++)
		memcpy(line + 5 + 2 * i, "\xc3\xa9", 2);
	ck_assert_int_eq(proto_parse(line, sizeof(line), &req), KL_OK);
	ck_assert_uint_eq(req.arglens[0], KL_KEY_MAX);
}
END_TEST

START_TEST(key_of_251_bytes_of_utf8_is_badkey_by_bytes)
{
	char		 line[5 + KL_KEY_MAX + 1];
	struct request	 req;

	memcpy(line, "LOCK ", 5);
	line[5] = 'x';
	for (size_t i = 0; i < KL_KEY_MAX / 2; i++)
		memcpy(line + 6 + 2 * i, "\xc3\xa9", 2);
	ck_assert_int_eq(proto_parse(line, sizeof(line), &req),
	    KL_ERR_BADKEY);
	ck_assert_str_eq(req.why, "key 1 is longer than 250 bytes");
}
END_TEST

START_TEST(overlong_key_with_bad_bytes_reports_length)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("LOCK ", 300, '\x01', "", &req, &buf),
	    KL_ERR_BADKEY);
	ck_assert_str_eq(req.why, "key 1 is longer than 250 bytes");
	free(buf);
}
END_TEST

START_TEST(name_of_64_bytes_is_accepted)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("NAME ", KL_NAME_MAX, 'n', "", &req,
	    &buf), KL_OK);
	ck_assert_int_eq(req.cmd, CMD_NAME);
	ck_assert_uint_eq(req.arglens[0], KL_NAME_MAX);
	free(buf);
}
END_TEST

START_TEST(name_of_65_bytes_is_syntax)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("NAME ", KL_NAME_MAX + 1, 'n', "", &req,
	    &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why, "name is longer than 64 bytes");
	free(buf);
}
END_TEST

START_TEST(secret_of_256_bytes_is_accepted)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("AUTH ", KL_SECRET_MAX, '=', "", &req,
	    &buf), KL_OK);
	ck_assert_int_eq(req.cmd, CMD_AUTH);
	ck_assert_uint_eq(req.arglens[0], KL_SECRET_MAX);
	free(buf);
}
END_TEST

START_TEST(secret_of_257_bytes_is_syntax)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(parse_built("AUTH ", KL_SECRET_MAX + 1, 's', "",
	    &req, &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why, "secret is longer than 256 bytes");
	free(buf);
}
END_TEST

/* Builds "LOCK k0 k1 ... k(n-1)" + tail; every key is distinct. */
static char *
build_many_keys(size_t n, const char *tail, size_t *lenp)
{
	size_t	 cap = 5 + n * 12 + strlen(tail) + 1, len;
	char	*line;

	line = malloc(cap);
	ck_assert_ptr_nonnull(line);
	len = (size_t)snprintf(line, cap, "LOCK");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(line + len, cap - len, " k%zu", i);
	len += (size_t)snprintf(line + len, cap - len, "%s", tail);
	*lenp = len;
	return line;
}

START_TEST(keys_past_hard_max_are_counted_not_stored)
{
	struct request	 req;
	size_t		 len, n = KL_KEYS_HARD_MAX + 500;
	char		*line, *buf, want[16];

	line = build_many_keys(n, " timeout=5", &len);
	ck_assert_int_eq(parse_exact(line, len, &req, &buf), KL_OK);
	ck_assert_uint_eq(req.nargs, n);
	ck_assert_uint_eq(req.timeout_ms, 5);
	for (size_t i = 0; i < KL_KEYS_HARD_MAX; i++) {
		snprintf(want, sizeof(want), "k%zu", i);
		if (req.arglens[i] != strlen(want) ||
		    memcmp(req.args[i], want, strlen(want)) != 0 ||
		    req.args[i] < buf || req.args[i] >= buf + len)
			ck_abort_msg("key %zu is not %s", i + 1, want);
	}
	free(buf);
	free(line);
}
END_TEST

START_TEST(hard_max_keys_exactly_are_all_stored)
{
	struct request	 req;
	size_t		 len;
	char		*line, *buf;

	line = build_many_keys(KL_KEYS_HARD_MAX, "", &len);
	ck_assert_int_eq(parse_exact(line, len, &req, &buf), KL_OK);
	ck_assert_uint_eq(req.nargs, KL_KEYS_HARD_MAX);
	ck_assert_uint_eq(req.arglens[KL_KEYS_HARD_MAX - 1], 5);
	ck_assert(memcmp(req.args[KL_KEYS_HARD_MAX - 1], "k1023", 5) == 0);
	free(buf);
	free(line);
}
END_TEST

START_TEST(bad_key_past_hard_max_is_still_badkey)
{
	struct request	 req;
	size_t		 len;
	char		*line, *buf;

	line = build_many_keys(KL_KEYS_HARD_MAX + 10, " bad\x7f", &len);
	ck_assert_int_eq(parse_exact(line, len, &req, &buf), KL_ERR_BADKEY);
	ck_assert_str_eq(req.why,
	    "key 1035 has control byte 0x7f at offset 3");
	free(buf);
	free(line);
}
END_TEST

START_TEST(bad_option_past_hard_max_is_still_syntax)
{
	struct request	 req;
	size_t		 len;
	char		*line, *buf;

	line = build_many_keys(KL_KEYS_HARD_MAX + 1, " ttl=0", &len);
	ck_assert_int_eq(parse_exact(line, len, &req, &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why,
	    "bad value for ttl: must be 1 to 1000000000000");
	free(buf);
	free(line);
}
END_TEST

START_TEST(keys_are_case_sensitive_and_point_into_line)
{
	static const char	line[] = "lock\tAbc  abc \xc3\xa9 ";
	struct request		req;

	ck_assert_int_eq(proto_parse(line, sizeof(line) - 1, &req), KL_OK);
	ck_assert_int_eq(req.cmd, CMD_LOCK);
	ck_assert_uint_eq(req.nargs, 3);
	ck_assert_ptr_eq(req.args[0], line + 5);
	ck_assert_uint_eq(req.arglens[0], 3);
	ck_assert(memcmp(req.args[0], "Abc", 3) == 0);
	ck_assert_ptr_eq(req.args[1], line + 10);
	ck_assert(memcmp(req.args[1], "abc", 3) == 0);
	ck_assert_ptr_eq(req.args[2], line + 14);
	ck_assert_uint_eq(req.arglens[2], 2);
}
END_TEST

START_TEST(reused_request_is_reset_to_defaults)
{
	struct request	req;

	ck_assert_int_eq(proto_parse(L("LOCK a b timeout=1 ttl=2 limit=3 "
	    "max_waiters=4"), &req), KL_OK);
	ck_assert_int_eq(proto_parse(L("TRYLOCK x mode=shared"), &req),
	    KL_OK);
	ck_assert_int_eq(proto_parse(L("foo"), &req), KL_ERR_SYNTAX);
	ck_assert_int_eq(proto_parse(L("LOCK c"), &req), KL_OK);
	ck_assert_int_eq(req.cmd, CMD_LOCK);
	ck_assert_uint_eq(req.nargs, 1);
	ck_assert_uint_eq(req.opts, 0);
	ck_assert_uint_eq(req.timeout_ms, 0);
	ck_assert_uint_eq(req.ttl_ms, 0);
	ck_assert_uint_eq(req.limit, 1);
	ck_assert_uint_eq(req.max_waiters, 0);
	ck_assert(!req.shared);
	ck_assert_str_eq(req.why, "");
	ck_assert_int_eq(proto_parse(L(" "), &req), KL_OK);
	ck_assert_int_eq(req.cmd, CMD_NONE);
	ck_assert_uint_eq(req.nargs, 0);
}
END_TEST

/* Every command of KL_CMD_LIST parses in upper, lower and mixed case. */
static const char *const all_names[] = {
#define NAME_ROW(name, lo, hi, kind, opts) #name,
	KL_CMD_LIST(NAME_ROW)
#undef NAME_ROW
};

START_TEST(every_command_word_is_case_insensitive)
{
	for (size_t i = 0; i < NELEM(all_names); i++) {
		char		line[32];
		size_t		n = strlen(all_names[i]);
		struct request	req;

		for (int form = 0; form < 3; form++) {
			for (size_t k = 0; k < n; k++) {
				char	c = all_names[i][k];

				if (form == 1 || (form == 2 && k % 2))
					c = (char)(c - 'A' + 'a');
				line[k] = c;
			}
			proto_parse(line, n, &req);
			ck_assert_msg(req.cmd == (enum cmd_id)i,
			    "%.*s parsed as %d", (int)n, line, (int)req.cmd);
		}
	}
}
END_TEST

/* proto.c folds a command word by clearing bit 5 of each byte, which is
 * exact only while every name is upper-case letters; no byte but the
 * letter in either case may stand in for it, NUL and UTF-8 included. */
START_TEST(command_word_matches_only_its_letters)
{
	for (size_t i = 0; i < NELEM(all_names); i++) {
		const char	*name = proto_cmd_name((enum cmd_id)i);
		size_t		 n = strlen(name);
		char		 line[32];
		struct request	 req;

		for (size_t k = 0; k < n; k++)
			ck_assert_msg(name[k] >= 'A' && name[k] <= 'Z',
			    "%s is not upper-case letters", name);
		for (size_t k = 0; k < n; k++) {
			for (int c = 0; c < 256; c++) {
				bool	same = c == name[k] || c == name[k] + 32;

				memcpy(line, name, n);
				line[k] = (char)c;
				proto_parse(line, n, &req);
				ck_assert_msg((req.cmd == (enum cmd_id)i) == same,
				    "%s with byte 0x%02x at %zu parsed as %d",
				    name, c, k, (int)req.cmd);
			}
		}
	}
}
END_TEST

START_TEST(command_list_is_sorted_by_name)
{
	ck_assert_uint_eq(NELEM(all_names), CMD__COUNT);
	for (size_t i = 1; i < NELEM(all_names); i++)
		ck_assert_msg(strcmp(all_names[i - 1], all_names[i]) < 0,
		    "%s sorts after %s", all_names[i - 1], all_names[i]);
}
END_TEST

START_TEST(cmd_name_is_the_upper_case_word)
{
	for (int i = 0; i < CMD__COUNT; i++)
		ck_assert_str_eq(proto_cmd_name((enum cmd_id)i),
		    all_names[i]);
	ck_assert_str_eq(proto_cmd_name(CMD_LOCK), "LOCK");
	ck_assert_str_eq(proto_cmd_name(CMD_UNLOCKALL), "UNLOCKALL");
	ck_assert_ptr_null(proto_cmd_name(CMD_NONE));
}
END_TEST

START_TEST(err_word_names_every_code)
{
	static const char *const words[KL_ERR__COUNT] = {
		NULL, "SYNTAX", "BADKEY", "TOOLONG", "TIMEOUT", "LOCKED",
		"BUSY", "DEADLOCK", "HELD", "NOTHELD", "CONFLICT", "LIMIT",
		"AUTH", "SHUTDOWN"
	};

	ck_assert_ptr_null(proto_err_word(KL_OK));
	for (int i = 1; i < KL_ERR__COUNT; i++)
		ck_assert_str_eq(proto_err_word((enum kl_err)i), words[i]);
	ck_assert_str_eq(proto_err_word(KL_ERR_NOTHELD), "NOTHELD");
	ck_assert_ptr_null(proto_err_word(KL_ERR__COUNT));
}
END_TEST

/* proto.c checks keys of plain bytes eight at a time and the rest byte by
 * byte: both must agree with proto_key_is_valid() for any byte at any
 * offset, on either side of a word boundary and at the end of the line. */
START_TEST(key_check_agrees_with_parse_at_every_offset)
{
	for (size_t n = 1; n <= 20; n++) {
		for (size_t k = 0; k < n; k++) {
			for (int c = 0; c < 256; c++) {
				char		line[32] = "LOCK ", why[PROTO_WHY_MAX];
				char		*key = line + 5;
				struct request	req;
				enum kl_err	err;
				bool		valid;

				if (c == ' ' || c == '\t' || c == '=')
					continue;
				memset(key, 'k', n);
				key[k] = (char)c;
				valid = proto_key_is_valid(key, n, why, sizeof(why));
				err = proto_parse(line, 5 + n, &req);
				ck_assert_int_eq(err, valid ? KL_OK : KL_ERR_BADKEY);
				if (!valid)
					ck_assert_str_eq(req.why + strlen("key 1"),
					    why + strlen("key"));
			}
		}
	}
}
END_TEST

/*
 * "WORD key" with one space takes proto.c's short path; with a tab it
 * takes the token loop. Both must give the same request and the same
 * error, whatever the word and whatever byte sits anywhere in the key.
 */
START_TEST(short_form_parses_as_the_token_loop_does)
{
	static const char *const words[] = {
		"LOCK", "unlock", "TryLock", "INFO", "REFRESH", "PING", "NAME",
		"UNLOCKALL", "LOCKS", "L"
	};

	for (size_t w = 0; w < NELEM(words); w++) {
		for (size_t n = 1; n <= 19; n++) {
			for (int c = 0; c < 256; c += (n % 3) + 1) {
				char		a[64], b[64];
				size_t		wl = strlen(words[w]), k = c % n;
				struct request	ra, rb;
				enum kl_err	ea, eb;

				snprintf(a, sizeof(a), "%s ", words[w]);
				memset(a + wl + 1, 'k', n);
				a[wl + 1 + k] = (char)c;
				memcpy(b, a, wl + 1 + n);
				b[wl] = '\t';
				ea = proto_parse(a, wl + 1 + n, &ra);
				eb = proto_parse(b, wl + 1 + n, &rb);
				ck_assert_int_eq(ea, eb);
				ck_assert_str_eq(ra.why, rb.why);
				ck_assert_int_eq(ra.cmd, rb.cmd);
				ck_assert_uint_eq(ra.nargs, rb.nargs);
				ck_assert_uint_eq(ra.opts, rb.opts);
				if (ea == KL_OK && ra.nargs == 1) {
					ck_assert_uint_eq(ra.arglens[0],
					    rb.arglens[0]);
					ck_assert_mem_eq(ra.args[0], rb.args[0],
					    ra.arglens[0]);
				}
			}
		}
	}
}
END_TEST

START_TEST(key_check_explains_each_rule)
{
	char	why[PROTO_WHY_MAX];

	ck_assert(proto_key_is_valid(L("balance:42"), why, sizeof(why)));
	ck_assert(!proto_key_is_valid(L(""), why, sizeof(why)));
	ck_assert_str_eq(why, "key is empty");
	ck_assert(!proto_key_is_valid(L("a b"), why, sizeof(why)));
	ck_assert_str_eq(why, "key has a space at offset 1");
	ck_assert(!proto_key_is_valid(L("a=b"), why, sizeof(why)));
	ck_assert_str_eq(why, "key has '=' at offset 1");
	ck_assert(!proto_key_is_valid(L("a\tb"), why, sizeof(why)));
	ck_assert_str_eq(why, "key has control byte 0x09 at offset 1");
	ck_assert(!proto_key_is_valid(L("\xed\xa0\x80"), why, sizeof(why)));
	ck_assert_str_eq(why, "key is not valid UTF-8 at offset 0");
	ck_assert(!proto_key_is_valid(L("\x01"), why, 4));
	ck_assert_str_eq(why, "key");
}
END_TEST

static void
check_key_agrees(const unsigned char *s, size_t n)
{
	char	why[PROTO_WHY_MAX];

	if (proto_key_is_valid((const char *)s, n, why, sizeof(why)) !=
	    ref_key_is_valid(s, n))
		ck_abort_msg("%zu bytes %02x %02x %02x %02x", n, s[0], s[1],
		    s[2], s[3]);
}

/* Three- and four-byte strings on a..b, with each bound of a third byte
 * and of a fourth byte, from either side. */
static void
check_tails_agree(unsigned a, unsigned b)
{
	static const unsigned char	thirds[] = { 0x41, 0x7f, 0x80, 0x8f,
					    0x90, 0x9f, 0xa0, 0xbf, 0xc0 };
	static const unsigned char	fourths[] = { 0x41, 0x80, 0xbf, 0xc0 };
	unsigned char			s[4];

	s[0] = (unsigned char)a;
	s[1] = (unsigned char)b;
	for (size_t c = 0; c < NELEM(thirds); c++)
		for (size_t d = 0; d < NELEM(fourths); d++) {
			s[2] = thirds[c];
			s[3] = fourths[d];
			check_key_agrees(s, 3);
			check_key_agrees(s, 4);
		}
}

/* Every two-byte string, and every lead byte from 0xc0 with every second
 * byte, agree with the reference decoder. */
START_TEST(utf8_check_agrees_with_reference_decoder)
{
	unsigned char	s[4] = { 0 };

	for (unsigned a = 0; a < 256; a++)
		for (unsigned b = 0; b < 256; b++) {
			s[0] = (unsigned char)a;
			s[1] = (unsigned char)b;
			check_key_agrees(s, 2);
			if (a >= 0xc0)
				check_tails_agree(a, b);
		}
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

			assert_why_is_clean(fmts[f], &req, err);
			if (err != KL_OK && (c < 0x20 || c >= 0x7f) &&
			    c != 0 && strchr(req.why, c) != NULL)
				ck_abort_msg("%s with 0x%02x: why has it",
				    fmts[f], c);
		}
}
END_TEST

START_TEST(case_directory_has_enough_cases)
{
	ck_assert_msg(ncases >= CASES_MIN,
	    "found %d cases in $srcdir/" CASES_DIR ", want %d", ncases,
	    CASES_MIN);
}
END_TEST

static char *
read_file(const char *path, size_t *lenp)
{
	FILE	*f;
	char	*buf = NULL;
	size_t	 cap = 0, len = 0, n;

	if ((f = fopen(path, "rb")) == NULL)
		return NULL;
	do {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	*lenp = len;
	return buf;
}

static const char *
cases_dir(void)
{
	static char	 path[4096];
	const char	*srcdir = getenv("srcdir");

	if (srcdir == NULL || *srcdir == '\0')
		srcdir = ".";
	snprintf(path, sizeof(path), "%s/%s", srcdir, CASES_DIR);
	return path;
}

START_TEST(case_directory)
{
	const char	*name = case_names[_i];
	char		 path[4096], got[64], *req_bytes, *want, *buf;
	size_t		 reqlen, wantlen;
	struct request	 req;
	enum kl_err	 err;

	if (snprintf(path, sizeof(path), "%s/%s/request", cases_dir(),
	    name) >= (int)sizeof(path))
		ck_abort_msg("%s: path too long", name);
	req_bytes = read_file(path, &reqlen);
	ck_assert_msg(req_bytes != NULL, "%s: cannot read %s", name, path);
	if (snprintf(path, sizeof(path), "%s/%s/expect", cases_dir(),
	    name) >= (int)sizeof(path))
		ck_abort_msg("%s: path too long", name);
	want = read_file(path, &wantlen);
	ck_assert_msg(want != NULL, "%s: cannot read %s", name, path);
	while (wantlen > 0 && (want[wantlen - 1] == '\n' ||
	    want[wantlen - 1] == ' '))
		wantlen--;

	err = parse_exact(req_bytes, reqlen, &req, &buf);
	if (err != KL_OK)
		snprintf(got, sizeof(got), "%s", proto_err_word(err));
	else if (req.cmd == CMD_NONE)
		snprintf(got, sizeof(got), "OK");
	else
		snprintf(got, sizeof(got), "OK %s", proto_cmd_name(req.cmd));
	ck_assert_msg(strlen(got) == wantlen &&
	    memcmp(got, want, wantlen) == 0, "%s: got \"%s\" (%s), want "
	    "\"%.*s\"", name, got, req.why, (int)wantlen, want);
	assert_why_is_clean(name, &req, err);
	free(buf);
	free(want);
	free(req_bytes);
}
END_TEST

static int
case_name_filter(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

static void
load_cases(void)
{
	struct dirent	**list;
	int		  n;

	if ((n = scandir(cases_dir(), &list, case_name_filter,
	    alphasort)) < 0)
		return;
	if ((case_names = calloc((size_t)n + 1, sizeof(*case_names))) == NULL)
		abort();
	for (int i = 0; i < n; i++) {
		if ((case_names[i] = strdup(list[i]->d_name)) == NULL)
			abort();
		free(list[i]);
	}
	free(list);
	ncases = n;
}

static Suite *
proto_suite(void)
{
	Suite	*s = suite_create("proto");
	TCase	*tc;

	tc = tcase_create("commands");
	tcase_add_loop_test(tc, command_table, 0, NELEM(command_cases));
	tcase_add_test(tc, every_command_word_is_case_insensitive);
	tcase_add_test(tc, command_word_matches_only_its_letters);
	tcase_add_test(tc, command_list_is_sorted_by_name);
	tcase_add_test(tc, cmd_name_is_the_upper_case_word);
	tcase_add_test(tc, err_word_names_every_code);
	tcase_add_test(tc, reused_request_is_reset_to_defaults);
	tcase_add_test(tc, name_of_64_bytes_is_accepted);
	tcase_add_test(tc, name_of_65_bytes_is_syntax);
	tcase_add_test(tc, secret_of_256_bytes_is_accepted);
	tcase_add_test(tc, secret_of_257_bytes_is_syntax);
	suite_add_tcase(s, tc);

	tc = tcase_create("keys");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, key_table, 0, NELEM(key_cases));
	tcase_add_test(tc, key_of_250_bytes_is_accepted);
	tcase_add_test(tc, key_of_251_bytes_is_badkey);
	tcase_add_test(tc, key_of_250_bytes_of_utf8_is_accepted);
	tcase_add_test(tc, key_of_251_bytes_of_utf8_is_badkey_by_bytes);
	tcase_add_test(tc, overlong_key_with_bad_bytes_reports_length);
	tcase_add_test(tc, keys_past_hard_max_are_counted_not_stored);
	tcase_add_test(tc, hard_max_keys_exactly_are_all_stored);
	tcase_add_test(tc, bad_key_past_hard_max_is_still_badkey);
	tcase_add_test(tc, keys_are_case_sensitive_and_point_into_line);
	tcase_add_test(tc, key_check_explains_each_rule);
	tcase_add_test(tc, key_check_agrees_with_parse_at_every_offset);
	tcase_add_test(tc, short_form_parses_as_the_token_loop_does);
	tcase_add_test(tc, utf8_check_agrees_with_reference_decoder);
	suite_add_tcase(s, tc);

	tc = tcase_create("options");
	tcase_add_loop_test(tc, option_table, 0, NELEM(option_cases));
	tcase_add_test(tc, bad_option_past_hard_max_is_still_syntax);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_loop_test(tc, order_table, 0, NELEM(order_cases));
	tcase_add_test(tc, why_never_echoes_a_bad_byte);
	suite_add_tcase(s, tc);

	tc = tcase_create("cases");
	tcase_add_test(tc, case_directory_has_enough_cases);
	tcase_add_loop_test(tc, case_directory, 0, ncases);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr;
	int	 failed;

	load_cases();
	sr = srunner_create(proto_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	for (int i = 0; i < ncases; i++)
		free(case_names[i]);
	free(case_names);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
