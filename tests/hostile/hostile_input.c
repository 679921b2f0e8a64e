/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Hostile input: 1 MiB lines get ERR TOOLONG on a connection that stays
 * usable, and every kind of bad key (control bytes, invalid UTF-8, NUL
 * bytes, overlong keys) gets ERR BADKEY or ERR SYNTAX from every
 * key-taking command, with a printable reply.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "hostile_test.h"
#include "hostile_util.h"
#include "kltest.h"

/*
 * Lines of 1 MiB: ERR TOOLONG each, the bytes are not kept, and the same
 * connection goes on working.
 */
START_TEST(one_mib_lines_get_toolong_and_the_connection_stays_usable)
{
	size_t		 mib = 1024 * 1024;
	char		*big = malloc(mib + 64);
	struct hu_probe	 probe;
	struct kt_conn	*c, *m;
	long		 rss0, hwm;
	uint64_t	 t0;

	ck_assert_ptr_nonnull(big);
	kt_start_default();
	m = kt_connect();
	c = kt_connect();
	rss0 = hu_rss_kib(kt_d->pid);
	hu_probe_start(&probe, "probe:toolong");
	t0 = kt_now_ms();

	/* a LOCK with a 1 MiB key */
	memcpy(big, "LOCK ", 5);
	memset(big + 5, 'k', mib - 6);
	big[mib - 1] = '\n';
	kt_send_raw(c, big, mib);
	kt_expect_err(c, "TOOLONG");
	kt_req(c, "OK PONG", "PING");

	/* eight more, each another kind, back to back, then a request */
	for (int kind = 0; kind < 8; kind++) {
		for (size_t i = 0; i < mib - 1; i++)
			switch (kind) {
			case 0:
				big[i] = ' ';	/* blank, but too long */
				break;
			case 1:
				big[i] = (char)(i * 131 % 255 + 1 == '\n' ?
				    'x' : i * 131 % 255 + 1);
				break;
			case 2:
				big[i] = '\0';
				break;
			default:
				big[i] = "PING "[i % 5];
				break;
			}
		big[mib - 1] = '\n';
		if (kind == 3)
			big[mib - 2] = '\r';
		if (kind == 4) {
			/* the LF arrives 200 ms later, alone */
			kt_send_raw(c, big, mib - 1);
			kt_sleep_ms(200);
			kt_send_raw(c, "\n", 1);
		} else
			kt_send_raw(c, big, mib);
	}
	kt_send(c, "PING");
	for (int kind = 0; kind < 8; kind++)
		kt_expect_err(c, "TOOLONG");
	kt_expect_line(c, "OK PONG");
	kt_lock(c, "LOCK after:toolong");
	kt_req(c, "OK 1", "UNLOCK after:toolong");
	hwm = hu_hwm_kib(kt_d->pid);
	hu_probe_stop(&probe, "1 MiB lines", 30, ht_p99_bound());
	fprintf(stderr, "1 MiB lines: 9 lines of 1 MiB in %llu ms, 9 ERR "
	    "TOOLONG, connection still usable; daemon peak RSS +%ld MiB%s\n",
	    (unsigned long long)(kt_now_ms() - t0), ht_rss_mib_growth(rss0,
	    hwm), ht_rss_note());
	ck_assert_msg(ht_rss_mib_growth(rss0, hwm) < ht_rss_bound_mib(16),
	    "daemon peak RSS grew by %ld MiB for 1 MiB lines it should discard",
	    ht_rss_mib_growth(rss0, hwm));
	ck_assert_int_eq(kt_stat(m, "keys"), 0);
	free(big);
}
END_TEST

/* Bad keys: bytes and what every key-taking command must answer. */
struct badkey {
	const char	*bytes;
	size_t		 len;
	const char	*why;
};

#define BK(s, why)	{ s, sizeof(s) - 1, why }
static const struct badkey badkeys[] = {
	BK("a\x01" "b", "control 0x01"),
	BK("\x1f", "control 0x1f"),
	BK("a\rb", "CR inside a key"),
	BK("a\x0b" "b", "vertical tab"),
	BK("a\x0c" "b", "form feed"),
	BK("\x1b[31m", "escape"),
	BK("a\x7f", "DEL"),
	BK("a\0b", "NUL inside"),
	BK("\0", "lone NUL"),
	BK("ab\0", "trailing NUL"),
	BK("\x80", "stray continuation"),
	BK("a\xbf" "b", "stray continuation inside"),
	BK("\xc0\xaf", "overlong /"),
	BK("\xc1\xbf", "overlong 2-byte"),
	BK("\xe0\x80\xaf", "overlong 3-byte"),
	BK("\xe0\x9f\xbf", "overlong 3-byte, top"),
	BK("\xf0\x80\x80\xaf", "overlong 4-byte"),
	BK("\xf0\x8f\xbf\xbf", "overlong 4-byte, top"),
	BK("\xed\xa0\x80", "surrogate U+D800"),
	BK("\xed\xbf\xbf", "surrogate U+DFFF"),
	BK("\xf4\x90\x80\x80", "U+110000"),
	BK("\xf5\x80\x80\x80", "lead 0xf5"),
	BK("\xf8\x88\x80\x80\x80", "5-byte form"),
	BK("\xfc\x84\x80\x80\x80\x80", "6-byte form"),
	BK("\xfe", "byte 0xfe"),
	BK("\xff", "byte 0xff"),
	BK("\xfe\xff", "UTF-16 BOM"),
	BK("\xc3", "truncated 2-byte"),
	BK("\xe2\x82", "truncated 3-byte"),
	BK("\xe2\x82z", "truncated 3-byte, then ASCII"),
	BK("\xf0\x9f\x98", "truncated 4-byte"),
	BK("\xf0\x9f\x98\x80\x80", "extra continuation"),
	BK("ok\xc3\x28", "bad second byte"),
};
#undef BK

/* Valid edge cases that must work byte for byte. */
static const char *const goodkeys[] = {
	"\xc2\x80",			/* U+0080: a C1 control, valid */
	"\xed\x9f\xbf",			/* U+D7FF */
	"\xee\x80\x80",			/* U+E000 */
	"\xef\xbb\xbf",			/* U+FEFF, BOM */
	"\xf0\x90\x80\x80",		/* U+10000 */
	"\xf4\x8f\xbf\xbf",		/* U+10FFFF */
	"~!@#$%^&*()_+[]{}|;:'\",.<>/?\\`",
	"\xe2\x82\xac\xf0\x9f\x94\x92",	/* euro, lock */
};

static bool
line_is_printable(const struct kt_conn *c)
{
	for (size_t i = 0; i < c->linelen; i++)
		if ((unsigned char)c->line[i] < 0x20 ||
		    (unsigned char)c->line[i] > 0x7e)
			return false;
	return true;
}

static void
expect_err_printable_at(const char *file, int line, struct kt_conn *c,
    const char *code, const char *what)
{
	kt_recv_at(file, line, c, kt_ms(KT_REPLY_MS));
	if (!kt_line_is_err(c, code))
		kt_fail_at(file, line, "%s: expected ERR %s, got \"%s\"", what,
		    code, kt_esc(c->line, c->linelen));
	if (!line_is_printable(c))
		kt_fail_at(file, line, "%s: the reply echoes raw bytes: \"%s\"",
		    what, kt_esc(c->line, c->linelen));
}
#define expect_err_printable(c, code, what) \
	expect_err_printable_at(KT_AT, (c), (code), (what))

/* Appends "head" + bytes + "tail" + LF to buf at *len. */
static void
put_req(char *buf, size_t *len, const char *head, const void *bytes,
    size_t n, const char *tail)
{
	size_t	h = strlen(head), t = strlen(tail);

	memcpy(buf + *len, head, h);
	memcpy(buf + *len + h, bytes, n);
	memcpy(buf + *len + h + n, tail, t);
	buf[*len + h + n + t] = '\n';
	*len += h + n + t + 1;
}

static const struct {
	const char	*head, *tail, *code;
} badkey_cmds[] = {
	{ "LOCK ", "", "BADKEY" },
	{ "LOCK ok:first ", " timeout=10", "BADKEY" },
	{ "TRYLOCK ", " mode=shared", "BADKEY" },
	{ "UNLOCK ", "", "BADKEY" },
	{ "REFRESH ", " ttl=100", "BADKEY" },
	{ "INFO ", "", "BADKEY" },
	{ "NAME ", "", "SYNTAX" },	/* a label, not a key */
};

/* Lines with NUL bytes or '=' where the grammar has no room for them. */
#define RAW(s)	{ s, sizeof(s) - 1, NULL }
static const struct badkey syntax_lines[] = {
	RAW("\0"),
	RAW("\0\0\0\0"),
	RAW("LO\0CK a"),
	RAW("PING\0"),
	RAW("\0PING"),
	RAW("LOCK a timeout=1\0"),
	RAW("LOCK a timeout=\0" "1"),
	RAW("LOCK a mo\0de=shared"),
	RAW("LOCK a=b"),
	RAW("LOCK ="),
	RAW("LOCK =x"),
	RAW("LOCK a mode=shared\xff"),
	RAW("LOCK \xff=1"),
	RAW("\xc0\xafLOCK a"),
	RAW("LOCK a ttl=0"),
	RAW("LOCK a limit=0"),
	RAW("LOCK a timeout=-1"),
	RAW("LOCK a timeout=99999999999999999999999"),
};
#undef RAW

/* The requests of the bad-key test and what each must get. */
struct badreq {
	char		*buf;		/* requests not yet sent */
	size_t		 len;
	const char	*code[512];
	const char	*what[512];
	size_t		 n;		/* replies expected */
	bool		 one_by_one;
};

static void
badreq_add_at(const char *file, int line, struct kt_conn *c,
    struct badreq *b, const char *head, const void *bytes, size_t n,
    const char *tail, const char *code, const char *what)
{
	put_req(b->buf, &b->len, head, bytes, n, tail);
	if (b->one_by_one) {
		kt_send_raw_at(file, line, c, b->buf, b->len);
		b->len = 0;
		expect_err_printable_at(file, line, c, code, what);
		return;
	}
	if (b->n == sizeof(b->code) / sizeof(b->code[0]))
		kt_fail_at(file, line, "too many bad requests");
	b->code[b->n] = code;
	b->what[b->n++] = what;
}
#define badreq_add(c, b, head, bytes, n, tail, code, what) \
	badreq_add_at(KT_AT, (c), (b), (head), (bytes), (n), (tail), (code), \
	    (what))

START_TEST(bad_keys_invalid_utf8_and_nul_bytes_get_badkey_or_syntax)
{
	struct hu_probe	 probe;
	struct kt_conn	*c, *m;
	struct badreq	*b;
	char		 key[300], *all, lng[3][300], synwhat[32][200];
	size_t		 nall;
	const size_t	 ncmds = sizeof(badkey_cmds) /
			    sizeof(badkey_cmds[0]);
	const size_t	 nbad = sizeof(badkeys) / sizeof(badkeys[0]);
	const size_t	 nsyn = sizeof(syntax_lines) /
			    sizeof(syntax_lines[0]);

	kt_start_default();
	m = kt_connect();
	c = kt_connect();
	hu_probe_start(&probe, "probe:badkey");
	b = calloc(1, sizeof(*b));
	all = malloc(256 * 1024);
	ck_assert(b != NULL && all != NULL);
	b->buf = all;
	memset(lng[0], 'k', 251);		/* 251 bytes */
	for (int i = 0; i < 63; i++)	/* 63 four-byte chars: 252 */
		memcpy(lng[1] + 4 * i, "\xf0\x9f\x94\x92", 4);
	memset(lng[2], 'n', 65);		/* a 65-byte NAME label */
	ck_assert_uint_le(nsyn, 32);
	for (size_t k = 0; k < nsyn; k++)
		snprintf(synwhat[k], sizeof(synwhat[k]), "\"%s\"",
		    kt_esc(syntax_lines[k].bytes, syntax_lines[k].len));

	/* pass 0: one request at a time; pass 1: all in one write */
	for (int pass = 0; pass < 2; pass++) {
		b->one_by_one = pass == 0;
		b->len = b->n = 0;
		for (size_t k = 0; k < nbad; k++)
			for (size_t i = 0; i < ncmds; i++)
				badreq_add(c, b, badkey_cmds[i].head,
				    badkeys[k].bytes, badkeys[k].len,
				    badkey_cmds[i].tail, badkey_cmds[i].code,
				    badkeys[k].why);
		badreq_add(c, b, "LOCK ", lng[0], 251, "", "BADKEY",
		    "251-byte key");
		badreq_add(c, b, "TRYLOCK ", lng[1], 252, "", "BADKEY",
		    "252-byte key of 4-byte characters");
		badreq_add(c, b, "NAME ", lng[2], 65, "", "SYNTAX",
		    "65-byte label");
		for (size_t k = 0; k < nsyn; k++)
			badreq_add(c, b, "", syntax_lines[k].bytes,
			    syntax_lines[k].len, "", "SYNTAX", synwhat[k]);
		if (pass == 1) {
			put_req(all, &b->len, "PING", "", 0, "");
			kt_send_raw(c, all, b->len);
			for (size_t i = 0; i < b->n; i++)
				expect_err_printable(c, b->code[i],
				    b->what[i]);
			kt_expect_line(c, "OK PONG");
		}
	}
	kt_req(c, "OK PONG", "PING");
	/* nothing got in: at most the probe's own key */
	ck_assert_int_le(kt_stat(m, "keys"), 1);

	/* the edges that are valid work byte for byte */
	for (size_t g = 0; g < sizeof(goodkeys) / sizeof(goodkeys[0]); g++) {
		json_t	*info;
		size_t	 n = strlen(goodkeys[g]);

		nall = 0;
		put_req(all, &nall, "LOCK ", goodkeys[g], n, "");
		kt_send_raw(c, all, nall);
		kt_expect_token(c);
		nall = 0;
		put_req(all, &nall, "INFO ", goodkeys[g], n, "");
		kt_send_raw(m, all, nall);
		info = kt_expect_json(m);
		ck_assert_msg(json_string_length(json_object_get(info,
		    "key")) == n && memcmp(json_string_value(json_object_get(
		    info, "key")), goodkeys[g], n) == 0, "INFO of \"%s\" names "
		    "another key", kt_esc(goodkeys[g], n));
		json_decref(info);
		nall = 0;
		put_req(all, &nall, "UNLOCK ", goodkeys[g], n, "");
		kt_send_raw(c, all, nall);
		kt_expect_line(c, "OK 1");
	}
	/* 250 bytes, mostly four-byte characters: the longest valid key */
	for (int i = 0; i < 62; i++)
		memcpy(key + 4 * i, "\xf0\x9f\x94\x92", 4);
	memcpy(key + 248, "ab", 2);
	nall = 0;
	put_req(all, &nall, "LOCK ", key, 250, "");
	put_req(all, &nall, "UNLOCK ", key, 250, "");
	kt_send_raw(c, all, nall);
	kt_expect_token(c);
	kt_expect_line(c, "OK 1");

	hu_probe_stop(&probe, "bad keys", 30, ht_p99_bound());
	fprintf(stderr, "bad keys: %zu bad keys x %zu commands, 3 over-long "
	    "keys or labels and %zu malformed lines (NUL bytes, '=', bad "
	    "values), one by one and then pipelined: all %zu refused with "
	    "BADKEY or SYNTAX, no bad byte echoed; %zu valid edge keys "
	    "work\n", nbad, ncmds, nsyn, b->n, sizeof(goodkeys) /
	    sizeof(goodkeys[0]) + 1);
	ck_assert_int_eq(kt_stat(m, "keys"), 0);
	free(all);
	free(b);
}
END_TEST

void
ht_add_input(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "input", KT_PRIVATE, 60, kt_setup_none);
	tcase_add_test(tc,
	    one_mib_lines_get_toolong_and_the_connection_stays_usable);
	tcase_add_test(tc,
	    bad_keys_invalid_utf8_and_nul_bytes_get_badkey_or_syntax);
}
