/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The request grammar of PROTOCOL.md: one line of bytes into a struct
 * request. Pure: it never allocates, logs, reads the clock or touches
 * anything but its arguments and the const tables below, because the fuzzer
 * calls it with arbitrary bytes. An error text never echoes a byte that broke
 * a rule: it ends up in a reply line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "util.h"

/* A command word or option name is echoed only when short and printable. */
#define PROTO_ECHO_MAX	32

struct proto_cmd {
	const char	*name;
	size_t		 len;
	int		 lo;
	int		 hi;		/* -1: no upper bound */
	enum proto_arg	 kind;
	unsigned	 opts;
};

struct proto_opt_def {
	const char	*name;		/* lower case */
	unsigned	 bit;
	uint64_t	 min;
	uint64_t	 max;
};

enum proto_fault {
	FAULT_NONE = 0,
	FAULT_EMPTY,
	FAULT_LONG,
	FAULT_CONTROL,
	FAULT_SPACE,
	FAULT_EQUALS,
	FAULT_UTF8
};

struct proto_tok {
	const char	*p;
	size_t		 len;
};

/* Indexed by enum cmd_id and sorted by name, as KL_CMD_LIST is. */
static const struct proto_cmd proto_cmds[] = {
#define KL_CMD_ROW(name, lo, hi, kind, opts)				\
	{ #name, sizeof(#name) - 1, lo, hi, kind, opts },
	KL_CMD_LIST(KL_CMD_ROW)
#undef KL_CMD_ROW
};
_Static_assert(sizeof(proto_cmds) / sizeof(proto_cmds[0]) == CMD__COUNT,
    "one row per command");

/* mode= takes a word, not a number: min and max are unused. */
static const struct proto_opt_def proto_opt_defs[] = {
	{ "limit",		OPT_LIMIT,		1, KL_LIMIT_MAX },
	{ "max_waiters",	OPT_MAX_WAITERS,	0, KL_LIMIT_MAX },
	{ "mode",		OPT_MODE,		0, 0 },
	{ "timeout",		OPT_TIMEOUT,		0, KL_MS_MAX },
	{ "ttl",		OPT_TTL,		1, KL_MS_MAX },
};

#define PROTO_NOPTS	(sizeof(proto_opt_defs) / sizeof(proto_opt_defs[0]))

static const char *const proto_err_words[KL_ERR__COUNT] = {
	[KL_OK]			= NULL,
	[KL_ERR_SYNTAX]		= "SYNTAX",
	[KL_ERR_BADKEY]		= "BADKEY",
	[KL_ERR_TOOLONG]	= "TOOLONG",
	[KL_ERR_TIMEOUT]	= "TIMEOUT",
	[KL_ERR_LOCKED]		= "LOCKED",
	[KL_ERR_BUSY]		= "BUSY",
	[KL_ERR_DEADLOCK]	= "DEADLOCK",
	[KL_ERR_HELD]		= "HELD",
	[KL_ERR_NOTHELD]	= "NOTHELD",
	[KL_ERR_CONFLICT]	= "CONFLICT",
	[KL_ERR_LIMIT]		= "LIMIT",
	[KL_ERR_AUTH]		= "AUTH",
	[KL_ERR_SHUTDOWN]	= "SHUTDOWN",
};

static enum kl_err	 proto_fail(struct request *, enum kl_err,
			    const char *, ...)
			    __attribute__((format(printf, 3, 4)));
static bool		 proto_is_blank(char);
static bool		 proto_next_token(const char *, size_t, size_t *,
			    struct proto_tok *);
static int		 proto_casecmp(const char *, size_t, const char *, int);
static const struct proto_cmd *proto_find_cmd(const struct proto_tok *);
static bool		 proto_is_echoable(const char *, size_t);
static size_t		 proto_utf8_seq(const unsigned char *, size_t);
static enum proto_fault	 proto_label_scan(const char *, size_t, size_t,
			    size_t *);
static void		 proto_label_why(char *, size_t, const char *, size_t,
			    enum proto_fault, const char *, size_t, size_t);
static enum kl_err	 proto_parse_option(struct request *,
			    const struct proto_cmd *, const struct proto_tok *);
static enum kl_err	 proto_parse_arg(struct request *,
			    const struct proto_cmd *, const struct proto_tok *);
static enum kl_err	 proto_check_line(struct request *,
			    const struct proto_cmd *);
static const char	*proto_arg_noun(enum proto_arg);

static enum kl_err
proto_fail(struct request *req, enum kl_err err, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(req->why, sizeof(req->why), fmt, ap);
	va_end(ap);
	return err;
}

/* PROTOCOL.md, Transport: tokens are separated by runs of spaces or tabs. */
static bool
proto_is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool
proto_next_token(const char *line, size_t len, size_t *pos,
    struct proto_tok *tok)
{
	size_t	i = *pos;

	while (i < len && proto_is_blank(line[i]))
		i++;
	if (i == len) {
		*pos = i;
		return false;
	}
	tok->p = line + i;
	while (i < len && !proto_is_blank(line[i]))
		i++;
	tok->len = (size_t)(line + i - tok->p);
	*pos = i;
	return true;
}

/*
 * Compares s[0..len) with the NUL-terminated name, ASCII letters folded to
 * upper (fold > 0) or lower case (fold < 0). Any byte may be in s, NUL too.
 */
static int
proto_casecmp(const char *s, size_t len, const char *name, int fold)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char	a = (unsigned char)s[i];
		unsigned char	b = (unsigned char)name[i];

		if (b == '\0')
			return 1;
		if (fold > 0 && a >= 'a' && a <= 'z')
			a = (unsigned char)(a - 'a' + 'A');
		else if (fold < 0 && a >= 'A' && a <= 'Z')
			a = (unsigned char)(a - 'A' + 'a');
		if (a != b)
			return a < b ? -1 : 1;
	}
	return name[len] == '\0' ? 0 : -1;
}

/* The command word, case-insensitive. Eleven names: comparing length and
 * first letter before the rest beats bsearch on the per-request path. */
static const struct proto_cmd *
proto_find_cmd(const struct proto_tok *tok)
{
	unsigned char	first = (unsigned char)tok->p[0] & (unsigned char)~0x20;

	for (size_t i = 0; i < CMD__COUNT; i++) {
		const struct proto_cmd	*cmd = &proto_cmds[i];

		if (cmd->len == tok->len && (unsigned char)cmd->name[0] ==
		    first && proto_casecmp(tok->p, tok->len, cmd->name, 1) == 0)
			return cmd;
	}
	return NULL;
}

static bool
proto_is_echoable(const char *s, size_t len)
{
	if (len == 0 || len > PROTO_ECHO_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/*
 * The length of the well-formed UTF-8 sequence that starts s[0..len), or 0
 * (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing past
 * U+10FFFF, no truncated sequence, no stray continuation byte).
 */
static size_t
proto_utf8_seq(const unsigned char *s, size_t len)
{
	unsigned char	lo = 0x80, hi = 0xbf;
	size_t		n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		if (s[0] == 0xe0)
			lo = 0xa0;
		else if (s[0] == 0xed)
			hi = 0x9f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		if (s[0] == 0xf0)
			lo = 0x90;
		else if (s[0] == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (len < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/*
 * PROTOCOL.md, Keys: 1..max bytes of UTF-8 with no control byte, space, DEL
 * or '='. Returns the fault and, for a bad byte, its offset.
 */
static enum proto_fault
proto_label_scan(const char *s, size_t len, size_t max, size_t *off)
{
	const unsigned char	*u = (const unsigned char *)s;
	size_t			 i, n;

	if (len == 0)
		return FAULT_EMPTY;
	if (len > max)
		return FAULT_LONG;
	for (i = 0; i < len; i += n) {
		/* printable ASCII other than space and '=': most keys */
		if (u[i] > 0x20 && u[i] < 0x7f && u[i] != '=') {
			n = 1;
			continue;
		}
		*off = i;
		if (u[i] < 0x20 || u[i] == 0x7f)
			return FAULT_CONTROL;
		if (u[i] == ' ')
			return FAULT_SPACE;
		if (u[i] == '=')
			return FAULT_EQUALS;
		if (u[i] < 0x80)
			n = 1;		/* the common case, without a call */
		else if ((n = proto_utf8_seq(u + i, len - i)) == 0)
			return FAULT_UTF8;
	}
	return FAULT_NONE;
}

/*
 * Explains a fault of argument idx ("key 2"; idx 0: no number) by offset,
 * never by echoing the bytes: the text goes into a reply line.
 */
static void
proto_label_why(char *why, size_t whylen, const char *what, size_t idx,
    enum proto_fault fault, const char *s, size_t off, size_t max)
{
	char	arg[48];

	if (idx > 0)
		snprintf(arg, sizeof(arg), "%s %zu", what, idx);
	else
		snprintf(arg, sizeof(arg), "%s", what);
	switch (fault) {
	case FAULT_EMPTY:
		snprintf(why, whylen, "%s is empty", arg);
		break;
	case FAULT_LONG:
		snprintf(why, whylen, "%s is longer than %zu bytes", arg, max);
		break;
	case FAULT_CONTROL:
		snprintf(why, whylen,
		    "%s has control byte 0x%02x at offset %zu", arg,
		    (unsigned char)s[off], off);
		break;
	case FAULT_SPACE:
		snprintf(why, whylen, "%s has a space at offset %zu", arg, off);
		break;
	case FAULT_EQUALS:
		snprintf(why, whylen, "%s has '=' at offset %zu", arg, off);
		break;
	case FAULT_UTF8:
		snprintf(why, whylen, "%s is not valid UTF-8 at offset %zu",
		    arg, off);
		break;
	case FAULT_NONE:
		why[0] = '\0';
		break;
	}
}

bool
proto_key_is_valid(const char *key, size_t len, char *why, size_t whylen)
{
	enum proto_fault	fault;
	size_t			off = 0;

	if ((fault = proto_label_scan(key, len, KL_KEY_MAX, &off)) ==
	    FAULT_NONE)
		return true;
	if (why != NULL && whylen > 0)
		proto_label_why(why, whylen, "key", 0, fault, key, off,
		    KL_KEY_MAX);
	return false;
}

/* PROTOCOL.md, Options: name=value, the name case-insensitive. */
static enum kl_err
proto_parse_option(struct request *req, const struct proto_cmd *cmd,
    const struct proto_tok *tok)
{
	const struct proto_opt_def	*def = NULL;
	const char			*name = tok->p, *val;
	size_t				 namelen, vallen;
	uint64_t			 v;

	val = memchr(tok->p, '=', tok->len);
	namelen = (size_t)(val - name);
	val++;
	vallen = tok->len - namelen - 1;
	if (namelen == 0)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "option with an empty name");
	for (size_t i = 0; i < PROTO_NOPTS; i++)
		if (proto_casecmp(name, namelen, proto_opt_defs[i].name,
		    -1) == 0)
			def = &proto_opt_defs[i];
	if (def == NULL && proto_is_echoable(name, namelen))
		return proto_fail(req, KL_ERR_SYNTAX, "unknown option %.*s",
		    (int)namelen, name);
	if (def == NULL)
		return proto_fail(req, KL_ERR_SYNTAX, "unknown option");
	if ((cmd->opts & def->bit) == 0)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s does not take option %s", cmd->name, def->name);
	if (req->opts & def->bit)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "option %s given twice", def->name);
	if (vallen == 0)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "option %s has no value", def->name);
	req->opts |= def->bit;

	if (def->bit == OPT_MODE) {
		if (proto_casecmp(val, vallen, "shared", -1) == 0)
			req->shared = true;
		else if (proto_casecmp(val, vallen, "exclusive", -1) != 0)
			return proto_fail(req, KL_ERR_SYNTAX, "bad value for "
			    "mode: must be exclusive or shared");
		return KL_OK;
	}
	if (!kl_parse_u64(val, vallen, def->min, def->max, &v))
		return proto_fail(req, KL_ERR_SYNTAX,
		    "bad value for %s: must be %llu to %llu", def->name,
		    (unsigned long long)def->min,
		    (unsigned long long)def->max);
	switch (def->bit) {
	case OPT_TIMEOUT:
		req->timeout_ms = v;
		break;
	case OPT_TTL:
		req->ttl_ms = v;
		break;
	case OPT_LIMIT:
		req->limit = (uint32_t)v;
		break;
	case OPT_MAX_WAITERS:
		req->max_waiters = (uint32_t)v;
		break;
	}
	return KL_OK;
}

/* Every argument is counted and checked; the first KL_KEYS_HARD_MAX kept. */
static enum kl_err
proto_parse_arg(struct request *req, const struct proto_cmd *cmd,
    const struct proto_tok *tok)
{
	enum proto_fault	fault;
	size_t			idx = ++req->nargs, off = 0;

	if (idx <= KL_KEYS_HARD_MAX) {
		req->args[idx - 1] = tok->p;
		req->arglens[idx - 1] = tok->len;
	}
	switch (cmd->kind) {
	case PROTO_ARG_KEY:
		fault = proto_label_scan(tok->p, tok->len, KL_KEY_MAX, &off);
		if (fault == FAULT_NONE)
			break;
		proto_label_why(req->why, sizeof(req->why), "key", idx, fault,
		    tok->p, off, KL_KEY_MAX);
		return KL_ERR_BADKEY;
	case PROTO_ARG_NAME:
		/* Not a key, so a bad label is SYNTAX, not BADKEY. */
		fault = proto_label_scan(tok->p, tok->len, KL_NAME_MAX, &off);
		if (fault == FAULT_NONE)
			break;
		proto_label_why(req->why, sizeof(req->why),
		    idx == 1 ? "name" : "argument", idx == 1 ? 0 : idx, fault,
		    tok->p, off, KL_NAME_MAX);
		return KL_ERR_SYNTAX;
	case PROTO_ARG_SECRET:
		if (tok->len <= KL_SECRET_MAX)
			break;
		proto_label_why(req->why, sizeof(req->why),
		    idx == 1 ? "secret" : "argument", idx == 1 ? 0 : idx,
		    FAULT_LONG, tok->p, 0, KL_SECRET_MAX);
		return KL_ERR_SYNTAX;
	case PROTO_ARG_NONE:
		break;
	}
	return KL_OK;
}

static const char *
proto_arg_noun(enum proto_arg kind)
{
	switch (kind) {
	case PROTO_ARG_KEY:
		return "key";
	case PROTO_ARG_NAME:
		return "label";
	case PROTO_ARG_SECRET:
		return "secret";
	case PROTO_ARG_NONE:
		break;
	}
	return "argument";
}

/* The checks that need the whole line, after every token passed. */
static enum kl_err
proto_check_line(struct request *req, const struct proto_cmd *cmd)
{
	const char	*noun = proto_arg_noun(cmd->kind);

	if (req->nargs < (size_t)cmd->lo && cmd->lo == 1)
		return proto_fail(req, KL_ERR_SYNTAX, "%s needs %s %s",
		    cmd->name, cmd->hi < 0 ? "at least one" : "a", noun);
	if (req->nargs < (size_t)cmd->lo)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s needs at least %d arguments", cmd->name, cmd->lo);
	if (cmd->hi == 0 && req->nargs > 0)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s takes no arguments", cmd->name);
	if (cmd->hi == 1 && req->nargs > 1)
		return proto_fail(req, KL_ERR_SYNTAX, "%s takes only one %s",
		    cmd->name, noun);
	if (cmd->hi > 1 && req->nargs > (size_t)cmd->hi)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s takes at most %d arguments", cmd->name, cmd->hi);
	if (req->shared && (req->opts & OPT_LIMIT))
		return proto_fail(req, KL_ERR_SYNTAX,
		    "option limit cannot be used with mode=shared");
	/* PROTOCOL.md, Commands: REFRESH key... ttl=MS */
	if (req->cmd == CMD_REFRESH && (req->opts & OPT_TTL) == 0)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "REFRESH needs option ttl");
	return KL_OK;
}

enum kl_err
proto_parse(const char *line, size_t len, struct request *req)
{
	const struct proto_cmd	*cmd;
	struct proto_tok	 tok;
	size_t			 pos = 0;
	enum kl_err		 err;

	req->cmd = CMD_NONE;
	req->nargs = 0;
	req->opts = 0;
	req->timeout_ms = 0;
	req->ttl_ms = 0;
	req->limit = 1;
	req->max_waiters = 0;
	req->shared = false;
	req->why[0] = '\0';

	/* PROTOCOL.md, Transport: lines of only spaces and tabs are empty. */
	if (!proto_next_token(line, len, &pos, &tok))
		return KL_OK;
	cmd = proto_find_cmd(&tok);
	if (cmd == NULL && proto_is_echoable(tok.p, tok.len))
		return proto_fail(req, KL_ERR_SYNTAX, "unknown command %.*s",
		    (int)tok.len, tok.p);
	if (cmd == NULL)
		return proto_fail(req, KL_ERR_SYNTAX, "unknown command");
	req->cmd = (enum cmd_id)(cmd - proto_cmds);

	while (proto_next_token(line, len, &pos, &tok)) {
		/* AUTH's secret is one raw token, '=' and all. */
		if (cmd->kind != PROTO_ARG_SECRET &&
		    memchr(tok.p, '=', tok.len) != NULL)
			err = proto_parse_option(req, cmd, &tok);
		else
			err = proto_parse_arg(req, cmd, &tok);
		if (err != KL_OK)
			return err;
	}
	return proto_check_line(req, cmd);
}

const char *
proto_err_word(enum kl_err err)
{
	if ((unsigned)err >= KL_ERR__COUNT)
		return NULL;
	return proto_err_words[err];
}

const char *
proto_cmd_name(enum cmd_id cmd)
{
	if ((unsigned)cmd >= CMD__COUNT)
		return NULL;
	return proto_cmds[cmd].name;
}
