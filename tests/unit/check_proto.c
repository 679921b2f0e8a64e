/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of proto: tables of {line, expected result} per rule of
 * keylockd-protocol(7), edge tests built at run time (the longest key, the most
 * keys), an exhaustive comparison of the UTF-8 check with a reference
 * decoder, and the case directories in tests/unit/proto-cases, which are
 * also the fuzz seed corpus. Every error text is checked to be printable
 * ASCII or clean UTF-8, so no bad byte of a request can reach a reply.
 * The tests live in proto_*.c by theme; this file holds the checks and
 * parsers they share (cp_ prefix, declared in check_proto.h), the suite
 * and main.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_main.h"
#include "check_proto.h"
#include "proto.h"

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

/* The key rules of keylockd-protocol(7), checked apart from proto.c's. */
bool
cp_ref_key_is_valid(const unsigned char *s, size_t len)
{
	if (len == 0 || len > KL_KEY_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] == 0x7f || s[i] == ' ' || s[i] == '=')
			return false;
	return ref_utf8_is_valid(s, len);
}

/* An error text is NUL-terminated and clean: printable, valid UTF-8. */
void
cp_assert_why_is_clean(const char *rule, const struct request *req,
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

/* HACKING.md, Replies: no trailing period, no capital but a command word. */
void
cp_assert_why_has_house_style(const char *rule, const struct request *req)
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
enum kl_err
cp_parse_exact(const char *line, size_t len, struct request *req, char **bufp)
{
	char	*buf;

	buf = malloc(len > 0 ? len : 1);
	ck_assert_ptr_nonnull(buf);
	memcpy(buf, line, len);
	*bufp = buf;
	return proto_parse(buf, len, req);
}

/* Parses pc's line and checks the result against pc. */
void
cp_run_parse_case(const struct parse_case *pc)
{
	struct request	 req;
	enum kl_err	 err;
	char		*buf;

	err = cp_parse_exact(pc->line, pc->len, &req, &buf);
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
	cp_assert_why_is_clean(pc->rule, &req, err);
	cp_assert_why_has_house_style(pc->rule, &req);
	for (size_t i = 0; err == KL_OK && i < req.nargs; i++)
		ck_assert_msg(req.args[i] >= buf &&
		    req.args[i] + req.arglens[i] <= buf + pc->len,
		    "%s: argument %zu lies outside the line", pc->rule, i + 1);
	free(buf);
}

/* Builds "CMD " + n copies of byte c (+ tail) and parses it. */
enum kl_err
cp_parse_built(const char *cmd, size_t n, char c, const char *tail,
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
	err = cp_parse_exact(line, len, req, bufp);
	free(line);
	return err;
}

/* Builds "LOCK k0 k1 ... k(n-1)" + tail; every key is distinct. */
char *
cp_build_many_keys(size_t n, const char *tail, size_t *lenp)
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

static Suite *
proto_suite(void)
{
	Suite	*s = suite_create("proto");

	cp_add_commands(s);
	cp_add_keys(s);
	cp_add_options(s);
	cp_add_cases(s);
	return s;
}

static void
proto_init(const char *name)
{
	(void)name;
	cp_load_cases();
}

const struct check_program check_program = {
	.name = "check_proto",
	.init = proto_init,
	.done = cp_free_cases,
	.suites = { proto_suite, NULL }
};
