/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_proto program's theme files share: the shape of a table
 * case, the checks every error text must pass, the ways to parse a line
 * (an exact-length copy, a built one, one with many keys), the reference
 * key check, and one function per theme that adds its TCases to the
 * suite, in the order main() runs them.
 */
#ifndef CHECK_PROTO_H
#define CHECK_PROTO_H

#include <stdbool.h>
#include <stddef.h>

#include <check.h>

#include "proto.h"

#define L(s)		(s), sizeof(s) - 1
#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))
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

/* The key rules of keylockd-protocol(7), checked apart from proto.c's. */
bool		 cp_ref_key_is_valid(const unsigned char *s, size_t len);
/* An error text is NUL-terminated and clean: printable, valid UTF-8. */
void		 cp_assert_why_is_clean(const char *rule,
		    const struct request *req, enum kl_err err);
/* HACKING.md, Replies: no trailing period, no capital but a command word. */
void		 cp_assert_why_has_house_style(const char *rule,
		    const struct request *req);
/* Parses a copy of line that is exactly len bytes long, so that the
 * sanitizers catch any read past it. The caller frees *bufp. */
enum kl_err	 cp_parse_exact(const char *line, size_t len,
		    struct request *req, char **bufp);
/* Parses pc's line and checks the result against pc. */
void		 cp_run_parse_case(const struct parse_case *pc);
/* Builds "CMD " + n copies of byte c (+ tail) and parses it. */
enum kl_err	 cp_parse_built(const char *cmd, size_t n, char c,
		    const char *tail, struct request *req, char **bufp);
/* Builds "LOCK k0 k1 ... k(n-1)" + tail; every key is distinct. */
char		*cp_build_many_keys(size_t n, const char *tail, size_t *lenp);

/* commands (proto_commands.c) */
void		 cp_add_commands(Suite *s);
/* keys (proto_keys.c) */
void		 cp_add_keys(Suite *s);
/* options, errors (proto_options.c) */
void		 cp_add_options(Suite *s);
/* cases (proto_cases.c); cp_load_cases() runs first, cp_free_cases()
 * after the run. */
void		 cp_load_cases(void);
void		 cp_free_cases(void);
void		 cp_add_cases(Suite *s);

#endif /* CHECK_PROTO_H */
