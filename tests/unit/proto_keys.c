/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Keys: the table of key rules, the longest key in bytes and in UTF-8,
 * the most keys, case and where keys point, and the key check against
 * the parser and the reference decoder at every offset and byte.
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
	/* past sixteen bytes the short form looks at the middle words
	 * apart (proto_parse_middle) */
	{ "control_byte_in_the_middle_of_a_long_key_is_badkey",
	    L("LOCK abcdefghijklmn\x01pqrstuvwxyz0123"), KL_ERR_BADKEY,
	    CMD_LOCK, 0, "key 1 has control byte 0x01 at offset 14" },
	{ "long_plain_key_is_ok",
	    L("LOCK abcdefghijklmnopqrstuvwxyz0123456789"), KL_OK, CMD_LOCK,
	    1, NULL },
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

START_TEST(key_table)
{
	cp_run_parse_case(&key_cases[_i]);
}
END_TEST

START_TEST(key_of_250_bytes_is_accepted)
{
	struct request	 req;
	char		*buf;

	ck_assert_int_eq(cp_parse_built("LOCK ", KL_KEY_MAX, 'k', "", &req,
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

	ck_assert_int_eq(cp_parse_built("LOCK a ", KL_KEY_MAX + 1, 'k', "",
	    &req, &buf), KL_ERR_BADKEY);
	ck_assert_str_eq(req.why, "key 2 is longer than 250 bytes");
	cp_assert_why_is_clean("key_of_251_bytes_is_badkey", &req,
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

	ck_assert_int_eq(cp_parse_built("LOCK ", 300, '\x01', "", &req, &buf),
	    KL_ERR_BADKEY);
	ck_assert_str_eq(req.why, "key 1 is longer than 250 bytes");
	free(buf);
}
END_TEST

/* Past KL_KEYS_HARD_MAX a request is LIMIT, duplicates or not, for every
 * command that takes keys (UNLOCK and REFRESH too): no handler ever sees
 * more arguments than are stored (a LOCK of 1,100 copies of one key once
 * overran the distinct-keys count's array and crashed the server). */
START_TEST(keys_past_hard_max_are_limit)
{
	static const char *const cmds[] = { "LOCK", "TRYLOCK", "UNLOCK",
	    "REFRESH" };
	struct request	 req;
	size_t		 n = KL_KEYS_HARD_MAX + 1, len = 0;
	char		*line = malloc(64 + 2 * n), *buf;

	ck_assert_ptr_nonnull(line);
	for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
		len = (size_t)sprintf(line, "%s", cmds[c]);
		for (size_t i = 0; i < n; i++)
			len += (size_t)sprintf(line + len, " a");
		len += (size_t)sprintf(line + len, "%s", c == 3 ?
		    " ttl=5" : "");
		ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf),
		    KL_ERR_LIMIT);
		ck_assert_str_eq(req.why, "1025 keys in one request: at most "
		    "1024 are read, duplicates included");
		free(buf);
		/* one fewer: parsed, every key stored */
		len = (size_t)sprintf(line, "%s", cmds[c]);
		for (size_t i = 0; i + 1 < n; i++)
			len += (size_t)sprintf(line + len, " a");
		len += (size_t)sprintf(line + len, "%s", c == 3 ?
		    " ttl=5" : "");
		ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf), KL_OK);
		ck_assert_uint_eq(req.nargs, KL_KEYS_HARD_MAX);
		free(buf);
	}
	/* SYNTAX wins over it (PROTOCOL.md, which error wins): a REFRESH
	 * without ttl=, a shared LOCK with limit= */
	len = (size_t)sprintf(line, "REFRESH");
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(line + len, " a");
	ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why, "REFRESH needs option ttl");
	free(buf);
	len = (size_t)sprintf(line, "LOCK");
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(line + len, " a");
	len += (size_t)sprintf(line + len, " mode=shared limit=2");
	ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf), KL_ERR_SYNTAX);
	ck_assert_str_eq(req.why, "option limit cannot be used with "
	    "mode=shared");
	free(buf);
	free(line);
}
END_TEST

START_TEST(hard_max_keys_exactly_are_all_stored)
{
	struct request	 req;
	size_t		 len;
	char		*line, *buf;

	line = cp_build_many_keys(KL_KEYS_HARD_MAX, "", &len);
	ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf), KL_OK);
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

	line = cp_build_many_keys(KL_KEYS_HARD_MAX + 10, " bad\x7f", &len);
	ck_assert_int_eq(cp_parse_exact(line, len, &req, &buf), KL_ERR_BADKEY);
	ck_assert_str_eq(req.why,
	    "key 1035 has control byte 0x7f at offset 3");
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

/*
 * The same for keys of up to 40 bytes, which the short path reads in up to
 * five words, the last reaching back over the one before: one byte other
 * than plain at every offset of every length must be found as the token
 * loop finds it.
 */
START_TEST(short_form_sees_a_bad_byte_at_every_offset)
{
	static const char *const words[] = { "LOCK", "UNLOCK", "TRYLOCK", "L" };
	static const unsigned char bytes[] = {
		0x00, '\t', ' ', '=', 0x1f, 0x7f, 0x80, 0xc3, 0xff, 'k'
	};

	for (size_t w = 0; w < NELEM(words); w++) {
		for (size_t n = 1; n <= 40; n++) {
			for (size_t k = 0; k < n; k++) {
				for (size_t c = 0; c < NELEM(bytes); c++) {
					char		a[64], b[64];
					size_t		wl = strlen(words[w]);
					struct request	ra, rb;
					enum kl_err	ea, eb;

					snprintf(a, sizeof(a), "%s ", words[w]);
					memset(a + wl + 1, 'k', n);
					a[wl + 1 + k] = (char)bytes[c];
					memcpy(b, a, wl + 1 + n);
					b[wl] = '\t';
					ea = proto_parse(a, wl + 1 + n, &ra);
					eb = proto_parse(b, wl + 1 + n, &rb);
					ck_assert_int_eq(ea, eb);
					ck_assert_str_eq(ra.why, rb.why);
					ck_assert_int_eq(ra.cmd, rb.cmd);
					ck_assert_uint_eq(ra.nargs, rb.nargs);
					if (ea == KL_OK && ra.nargs == 1) {
						ck_assert_uint_eq(ra.arglens[0],
						    rb.arglens[0]);
						ck_assert_int_eq(ra.args[0] - a,
						    rb.args[0] - b);
					}
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
	    cp_ref_key_is_valid(s, n))
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

void
cp_add_keys(Suite *s)
{
	TCase	*tc;

	tc = tcase_create("keys");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, key_table, 0, NELEM(key_cases));
	tcase_add_test(tc, key_of_250_bytes_is_accepted);
	tcase_add_test(tc, key_of_251_bytes_is_badkey);
	tcase_add_test(tc, key_of_250_bytes_of_utf8_is_accepted);
	tcase_add_test(tc, key_of_251_bytes_of_utf8_is_badkey_by_bytes);
	tcase_add_test(tc, overlong_key_with_bad_bytes_reports_length);
	tcase_add_test(tc, keys_past_hard_max_are_limit);
	tcase_add_test(tc, hard_max_keys_exactly_are_all_stored);
	tcase_add_test(tc, bad_key_past_hard_max_is_still_badkey);
	tcase_add_test(tc, keys_are_case_sensitive_and_point_into_line);
	tcase_add_test(tc, key_check_explains_each_rule);
	tcase_add_test(tc, key_check_agrees_with_parse_at_every_offset);
	tcase_add_test(tc, short_form_parses_as_the_token_loop_does);
	tcase_add_test(tc, short_form_sees_a_bad_byte_at_every_offset);
	tcase_add_test(tc, utf8_check_agrees_with_reference_decoder);
	suite_add_tcase(s, tc);
}
