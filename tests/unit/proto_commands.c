/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Command words: the table of command rules, case-insensitive words of
 * every command in KL_CMD_LIST, the name tables, a reused request, and
 * the bounds of NAME and AUTH arguments.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_proto.h"
#include "proto.h"

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
	{ "upgrade_alone_is_ok", L("UPGRADE"), KL_OK, CMD_UPGRADE, 0,
	    NULL },
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
	{ "upgrade_with_an_argument_is_syntax", L("UPGRADE now"),
	    KL_ERR_SYNTAX, CMD_UPGRADE, 0, "UPGRADE takes no arguments" },
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
	{ "auth_with_user_and_secret_is_ok", L("AUTH alice s3cret"), KL_OK,
	    CMD_AUTH, 2, NULL },
	{ "auth_with_three_words_is_syntax", L("AUTH a b c"), KL_ERR_SYNTAX,
	    CMD_AUTH, 0, "AUTH takes at most 2 arguments" },
	{ "auth_takes_no_options_its_secret_is_raw", L("AUTH s timeout=5"),
	    KL_OK, CMD_AUTH, 2, NULL },
};

START_TEST(command_table)
{
	cp_run_parse_case(&command_cases[_i]);
}
END_TEST

START_TEST(name_of_64_bytes_is_accepted)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(cp_parse_built("NAME ", KL_NAME_MAX, 'n', "", &req,
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

	ck_assert_int_eq(cp_parse_built("NAME ", KL_NAME_MAX + 1, 'n', "", &req,
	    &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why, "name is longer than 64 bytes");
	free(buf);
}
END_TEST

START_TEST(secret_of_256_bytes_is_accepted)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(cp_parse_built("AUTH ", KL_SECRET_MAX, '=', "", &req,
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

	ck_assert_int_eq(cp_parse_built("AUTH ", KL_SECRET_MAX + 1, 's', "",
	    &req, &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why, "secret is longer than 256 bytes");
	free(buf);
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
		"AUTH", "SHUTDOWN", "CANCELLED", "BACKEND", "GONE", "SESSION",
		"NOPERM",
		"UPGRADE"
	};

	ck_assert_ptr_null(proto_err_word(KL_OK));
	for (int i = 1; i < KL_ERR__COUNT; i++)
		ck_assert_str_eq(proto_err_word((enum kl_err)i), words[i]);
	ck_assert_str_eq(proto_err_word(KL_ERR_NOTHELD), "NOTHELD");
	ck_assert_ptr_null(proto_err_word(KL_ERR__COUNT));
}
END_TEST

void
cp_add_commands(Suite *s)
{
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
}
