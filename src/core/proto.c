/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The request grammar of keylockd-protocol(7): one line of bytes into a struct
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

#define PROTO_WORD	sizeof(uint64_t)
/* Eight bytes at p, the first lowest. */
static inline uint64_t
proto_le64(const void *p)
{
	uint64_t	w;

	memcpy(&w, p, sizeof(w));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	w = __builtin_bswap64(w);
#endif
	return w;
}

/* A command word or option name is echoed only when short and printable. */
#define PROTO_ECHO_MAX	32
/* Room for the longest command name and its NUL padding: two words. */
#define PROTO_CMD_NAME_SIZE	(2 * PROTO_WORD)

struct proto_cmd {
	char		 name[PROTO_CMD_NAME_SIZE];	/* NUL-padded */
	enum cmd_id	 id;
	size_t		 len;
	int		 lo;
	int		 hi;		/* -1: no upper bound */
	enum proto_arg	 kind;
	unsigned	 opts;
	unsigned	 needs;		/* options the command cannot go without */
	bool		 short_ok;	/* "WORD key" is a whole request */
};

struct proto_opt_def {
	const char	*name;		/* lower case */
	size_t		 len;
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

/* What proto_parse_short() made of a line. */
enum proto_short {
	SHORT_NO = 0,	/* not the short form: the token loop parses it */
	SHORT_YES,	/* the whole request, in req */
	SHORT_MIDDLE	/* in req, if the words at 16.. before the last are
			 * plain too (a key over sixteen bytes) */
};

/*
 * What the bytes of a token are, as bits ORed over the token in the one pass
 * that finds its end. A token of only PC_PLAIN bytes is a good key or label
 * if it is not too long, so most tokens need no second look.
 */
enum proto_class {
	PC_PLAIN	= 0,		/* printable ASCII but space and '=' */
	PC_EQUALS	= 1 << 0,	/* keylockd-protocol(7), OPTIONS: name=value */
	PC_OTHER	= 1 << 1,	/* control, DEL or not ASCII */
	PC_BLANK	= 1 << 2	/* space or tab: between tokens */
};

struct proto_tok {
	const char	*p;
	size_t		 len;
	unsigned	 classes;	/* its bytes' proto_class, ORed */
};

/* keylockd-protocol(7), TRANSPORT and Keys, one byte at a time. */
#define PROTO_CLASS(c)							\
	((c) == ' ' || (c) == '\t' ? PC_BLANK :				\
	 (c) == '=' ? PC_EQUALS :					\
	 (c) > 0x20 && (c) < 0x7f ? PC_PLAIN : PC_OTHER)
#define PROTO_CLASS4(c)							\
	PROTO_CLASS(c), PROTO_CLASS((c) + 1), PROTO_CLASS((c) + 2),	\
	PROTO_CLASS((c) + 3)
#define PROTO_CLASS16(c)						\
	PROTO_CLASS4(c), PROTO_CLASS4((c) + 4), PROTO_CLASS4((c) + 8),	\
	PROTO_CLASS4((c) + 12)

static const unsigned char proto_classes[256] = {
	PROTO_CLASS16(0x00), PROTO_CLASS16(0x10), PROTO_CLASS16(0x20),
	PROTO_CLASS16(0x30), PROTO_CLASS16(0x40), PROTO_CLASS16(0x50),
	PROTO_CLASS16(0x60), PROTO_CLASS16(0x70), PROTO_CLASS16(0x80),
	PROTO_CLASS16(0x90), PROTO_CLASS16(0xa0), PROTO_CLASS16(0xb0),
	PROTO_CLASS16(0xc0), PROTO_CLASS16(0xd0), PROTO_CLASS16(0xe0),
	PROTO_CLASS16(0xf0)
};

/* keylockd-protocol(7), COMMANDS: REFRESH key... ttl=MS */
#define PROTO_NEEDS(id)		((id) == CMD_REFRESH ? OPT_TTL : 0u)
/* One key and nothing else makes a request that needs no other check. */
#define PROTO_SHORT_OK(id, lo, hi, kind)				\
	((kind) == PROTO_ARG_KEY && (lo) <= 1 && (hi) != 0 &&		\
	 PROTO_NEEDS(id) == 0 && sizeof(#id) - sizeof("CMD_") < PROTO_WORD)

/* Indexed by enum cmd_id and sorted by name, as KL_CMD_LIST is. */
static const struct proto_cmd proto_cmds[] = {
#define KL_CMD_ROW(name, lo, hi, kind, opts)				\
	{ #name, CMD_##name, sizeof(#name) - 1, lo, hi, kind, opts,	\
	  PROTO_NEEDS(CMD_##name),					\
	  PROTO_SHORT_OK(CMD_##name, lo, hi, kind) },
	KL_CMD_LIST(KL_CMD_ROW)
#undef KL_CMD_ROW
};
_Static_assert(sizeof(proto_cmds) / sizeof(proto_cmds[0]) == CMD__COUNT,
    "one row per command");
#define PROTO_CMD_FITS(name, lo, hi, kind, opts)			\
	_Static_assert(sizeof(#name) <= PROTO_CMD_NAME_SIZE,		\
	    #name " fits its padded name");
KL_CMD_LIST(PROTO_CMD_FITS)
#undef PROTO_CMD_FITS

/* The names proto_find_word() tries first, the busiest; then all. Rows,
 * not indexes, so that the tries unroll into compares with constants. */
static const struct proto_cmd *const proto_cmd_busy[] = {
	&proto_cmds[CMD_LOCK], &proto_cmds[CMD_UNLOCK],
	&proto_cmds[CMD_TRYLOCK], &proto_cmds[CMD_REFRESH],
	&proto_cmds[CMD_PING]
};
#define PROTO_NBUSY	(sizeof(proto_cmd_busy) / sizeof(proto_cmd_busy[0]))

/* The longest argument of each kind whose bytes need no other check. */
static const size_t proto_arg_max[] = {
	[PROTO_ARG_NONE]	= SIZE_MAX,
	[PROTO_ARG_KEY]		= KL_KEY_MAX,
	[PROTO_ARG_NAME]	= KL_NAME_MAX,
	[PROTO_ARG_SECRET]	= KL_SECRET_MAX,
	[PROTO_ARG_ID]		= 0,
	[PROTO_ARG_SESSION]	= 0
};

/* mode= takes a word, not a number: min and max are unused. */
#define PROTO_OPT_ROW(name, bit, min, max)				\
	{ name, sizeof(name) - 1, bit, min, max }
static const struct proto_opt_def proto_opt_defs[] = {
	PROTO_OPT_ROW("grace",		OPT_GRACE,	 1, KL_MS_MAX),
	PROTO_OPT_ROW("limit",		OPT_LIMIT,	 1, KL_LIMIT_MAX),
	PROTO_OPT_ROW("max_waiters",	OPT_MAX_WAITERS, 0, KL_LIMIT_MAX),
	PROTO_OPT_ROW("mode",		OPT_MODE,	 0, 0),
	PROTO_OPT_ROW("timeout",	OPT_TIMEOUT,	 0, KL_MS_MAX),
	PROTO_OPT_ROW("ttl",		OPT_TTL,	 1, KL_MS_MAX),
};
#undef PROTO_OPT_ROW

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
	[KL_ERR_CANCELLED]	= "CANCELLED",
	[KL_ERR_BACKEND]	= "BACKEND",
	[KL_ERR_GONE]		= "GONE",
	[KL_ERR_SESSION]	= "SESSION",
	[KL_ERR_NOPERM]		= "NOPERM",
	[KL_ERR_UPGRADE]	= "UPGRADE",
};

static enum kl_err	 proto_fail(struct request *, enum kl_err,
			    const char *, ...)
			    __attribute__((format(printf, 3, 4)));
static inline uint64_t	 proto_load_tail(const unsigned char *, size_t,
			    size_t);
static inline uint64_t	 proto_plain(uint64_t);
static inline uint64_t	 proto_not_plain(uint64_t);
static size_t		 proto_skip_plain(const unsigned char *, size_t,
			    size_t);
static bool		 proto_next_token(const char *, size_t, size_t *,
			    struct proto_tok *);
static int		 proto_casecmp(const char *, size_t, const char *, int);
static const struct proto_cmd *proto_find_cmd(const char *, size_t,
			    const struct proto_tok *);
static inline const struct proto_cmd *proto_find_word(uint64_t, uint64_t,
			    size_t);
static inline bool	 proto_cmd_is(const struct proto_cmd *, uint64_t,
			    uint64_t, size_t);
static inline void	 proto_reset(struct request *);
static inline void	 proto_reset_options(struct request *);
static uint64_t		 proto_plain_words(const unsigned char *, size_t,
			    size_t);
static inline enum proto_short proto_parse_short(const char *, size_t,
			    struct request *);
static enum kl_err	 proto_parse_middle(const char *, size_t,
			    struct request *) __attribute__((noinline));
static enum kl_err	 proto_parse_tokens(const char *, size_t,
			    struct request *) __attribute__((noinline));
static enum kl_err	 proto_parse_cmd(struct request *, const char *,
			    size_t, const struct proto_tok *,
			    const struct proto_cmd **);
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

/*
 * Up to eight bytes of s[i..len) as a word, the first lowest and zeros past
 * len. It reads nothing outside s[0..len): near the end it takes the last
 * eight bytes and shifts away those before i. Inline, as the next one: they
 * run for every token.
 */
static inline uint64_t
proto_load_tail(const unsigned char *s, size_t len, size_t i)
{
	size_t		n = len - i;
	uint64_t	w = 0;

	if (n >= PROTO_WORD)
		return proto_le64(s + i);
	if (n == 0)
		return 0;
	if (len >= PROTO_WORD)
		return proto_le64(s + len - PROTO_WORD) >>
		    (8 * (PROTO_WORD - n));
	while (n-- > 0)
		w = w << 8 | s[i + n];
	return w;
}

/*
 * Bit 7 of each byte of the result is set when that byte of w is plain
 * (PC_PLAIN); the other bits are junk. Each byte is tested on its own
 * 7 bits (x), so no sum carries into the next byte: x + 0x5f reaches bit 7
 * from '!' up, (x ^ '=') + 0x7f for any x but '=', and x + 1, or w itself,
 * for DEL and the bytes past ASCII, which are not plain.
 */
static inline uint64_t
proto_plain(uint64_t w)
{
	const uint64_t	ones = 0x0101010101010101ULL;
	const uint64_t	low = ones * 0x7f;
	uint64_t	x = w & low;

	return (x + ones * 0x5f) & ((x ^ ones * '=') + low) &
	    ~((x + ones) | w);
}

/* Bit 7 of each byte of the result is set when that byte of w is not plain,
 * and no other bit. */
static inline uint64_t
proto_not_plain(uint64_t w)
{
	return ~proto_plain(w) & (0x0101010101010101ULL << 7);
}

/*
 * The offset of the first byte of s[i..len) that is not plain, or len,
 * looking at eight bytes at a time; the zeros past len stop the last word.
 */
static size_t
proto_skip_plain(const unsigned char *s, size_t len, size_t i)
{
	uint64_t	marks;

	while ((marks = proto_not_plain(proto_load_tail(s, len, i))) == 0)
		i += PROTO_WORD;
	return i + (size_t)__builtin_ctzll(marks) / 8;
}

/*
 * keylockd-protocol(7), TRANSPORT: tokens are separated by runs of spaces or
 * tabs. The pass that finds the token's end also notes what its bytes are,
 * byte by byte only from the first that is not plain.
 */
static bool
proto_next_token(const char *line, size_t len, size_t *pos,
    struct proto_tok *tok)
{
	const unsigned char	*u = (const unsigned char *)line;
	size_t			 i = *pos;
	unsigned		 c, classes = PC_PLAIN;

	while (i < len && proto_classes[u[i]] == PC_BLANK)
		i++;
	if (i == len) {
		*pos = i;
		return false;
	}
	tok->p = line + i;
	i = proto_skip_plain(u, len, i);
	while (i < len && (c = proto_classes[u[i]]) != PC_BLANK) {
		classes |= c;
		i++;
	}
	tok->len = (size_t)(line + i - tok->p);
	tok->classes = classes;
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

/*
 * The command word, a token of line[0..len), case-insensitive. Names are
 * upper-case letters, and clearing bit 5 turns a byte into such a letter
 * only if it is that letter in either case (no NUL, digit or UTF-8 byte can
 * pass), so the word is folded at once, as two words of eight bytes padded
 * with zeros as the names are, and compared whole.
 */
static const struct proto_cmd *
proto_find_cmd(const char *line, size_t len, const struct proto_tok *tok)
{
	const unsigned char	*u = (const unsigned char *)line;
	size_t			 i = (size_t)(tok->p - line);
	uint64_t		 hi = 0;

	uint64_t		 lo = proto_load_tail(u, len, i);

	if (tok->len >= PROTO_CMD_NAME_SIZE)
		return NULL;
	if (tok->len > PROTO_WORD)
		hi = proto_load_tail(u, i + tok->len, i + PROTO_WORD);
	if (tok->len < PROTO_WORD)
		lo &= (UINT64_C(1) << (8 * tok->len)) - 1;
	return proto_find_word(lo, hi, tok->len);
}

/*
 * The command named by a word of len bytes, its first eight bytes in lo
 * and the rest in hi, both zero-padded past len by the caller (who may
 * know a cheaper mask): the busiest names first, then every name.
 * Inline: it runs for every request, from two places.
 */
static inline const struct proto_cmd *
proto_find_word(uint64_t lo, uint64_t hi, size_t len)
{
	const uint64_t		 fold = ~0x2020202020202020ULL;
	const struct proto_cmd	*cmd;
	size_t			 k;

	lo &= fold;
	hi &= fold;
#pragma GCC unroll 8
	for (k = 0; k < PROTO_NBUSY; k++)
		if (proto_cmd_is(proto_cmd_busy[k], lo, hi, len))
			return proto_cmd_busy[k];
	for (cmd = proto_cmds; cmd < proto_cmds + CMD__COUNT; cmd++)
		if (proto_cmd_is(cmd, lo, hi, len))
			return cmd;
	return NULL;
}

static inline bool
proto_cmd_is(const struct proto_cmd *cmd, uint64_t lo, uint64_t hi,
    size_t len)
{
	return cmd->len == len && proto_le64(cmd->name) == lo &&
	    proto_le64(cmd->name + PROTO_WORD) == hi;
}

/* The first token: the command, or SYNTAX naming the word if it can. */
static enum kl_err
proto_parse_cmd(struct request *req, const char *line, size_t len,
    const struct proto_tok *tok, const struct proto_cmd **cmdp)
{
	const struct proto_cmd	*cmd = proto_find_cmd(line, len, tok);

	if (cmd == NULL && proto_is_echoable(tok->p, tok->len))
		return proto_fail(req, KL_ERR_SYNTAX, "unknown command %.*s",
		    (int)tok->len, tok->p);
	if (cmd == NULL)
		return proto_fail(req, KL_ERR_SYNTAX, "unknown command");
	req->cmd = (enum cmd_id)(cmd - proto_cmds);
	*cmdp = cmd;
	return KL_OK;
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
 * keylockd-protocol(7), KEYS: 1..max bytes of UTF-8 with no control byte,
 * space, DEL or '='. Returns the fault and, for a bad byte, its offset.
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

/* s[0..len) is all digits, a number over max. */
static bool
proto_is_past(const char *s, size_t len, uint64_t max)
{
	uint64_t	v;

	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return len > 0 && !kl_parse_u64(s, len, 0, max, &v);
}

/* keylockd-protocol(7), OPTIONS: name=value, the name case-insensitive. */
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
		if (proto_opt_defs[i].len == namelen &&
		    proto_casecmp(name, namelen, proto_opt_defs[i].name,
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
	if (def->bit == OPT_GRACE && proto_is_past(val, vallen, def->max)) {
		/* keylockd-protocol(7), SESSIONS: a number over
		 * session-grace-max is LIMIT, however large */
		req->grace_ms = UINT64_MAX;
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
	case OPT_GRACE:
		req->grace_ms = v;
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

/* keylockd-protocol(7), SESSIONS: the bytes of a session ID. */
static bool
proto_is_session_byte(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9') || c == '-' || c == '_';
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
	/* Most arguments: the full checks below would find nothing. */
	if (tok->classes == PC_PLAIN && tok->len <= proto_arg_max[cmd->kind])
		return KL_OK;
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
	case PROTO_ARG_ID:
		for (off = 0; off < tok->len; off++)
			if (tok->p[off] < '0' || tok->p[off] > '9')
				break;
		if (off == tok->len)	/* past 2^64: no such client */
			break;
		snprintf(req->why, sizeof(req->why), "a client id is a "
		    "number");
		return KL_ERR_SYNTAX;
	case PROTO_ARG_SESSION:
		for (off = 0; off < tok->len; off++)
			if (!proto_is_session_byte(tok->p[off]))
				break;
		if (tok->len <= KL_SESSION_ID_MAX && off == tok->len)
			break;
		snprintf(req->why, sizeof(req->why), "a session ID is 1 to "
		    "%d bytes of A-Z a-z 0-9 - _", KL_SESSION_ID_MAX);
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
	case PROTO_ARG_ID:
		return "client id";
	case PROTO_ARG_SESSION:
		return "session ID";
	case PROTO_ARG_NONE:
		break;
	}
	return "argument";
}

/* The checks that need the whole line, after every token passed. */
static enum kl_err
proto_check_line(struct request *req, const struct proto_cmd *cmd)
{
	if (req->nargs < (size_t)cmd->lo && cmd->lo == 1)
		return proto_fail(req, KL_ERR_SYNTAX, "%s needs %s %s",
		    cmd->name, cmd->hi < 0 ? "at least one" : "a",
		    proto_arg_noun(cmd->kind));
	if (req->nargs < (size_t)cmd->lo)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s needs at least %d arguments", cmd->name, cmd->lo);
	if (cmd->hi == 0 && req->nargs > 0)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s takes no arguments", cmd->name);
	if (cmd->hi == 1 && req->nargs > 1)
		return proto_fail(req, KL_ERR_SYNTAX, "%s takes only one %s",
		    cmd->name, proto_arg_noun(cmd->kind));
	if (cmd->hi > 1 && req->nargs > (size_t)cmd->hi)
		return proto_fail(req, KL_ERR_SYNTAX,
		    "%s takes at most %d arguments", cmd->name, cmd->hi);
	if (req->shared && (req->opts & OPT_LIMIT))
		return proto_fail(req, KL_ERR_SYNTAX,
		    "option limit cannot be used with mode=shared");
	if ((cmd->needs & OPT_TTL) && (req->opts & OPT_TTL) == 0)
		return proto_fail(req, KL_ERR_SYNTAX, "%s needs option ttl",
		    cmd->name);
	/* duplicates count once against max-keys, but the server keeps
	 * no more than this many, duplicates or not; last of the parser's
	 * checks (SYNTAX wins); the caller answers AUTH and NOPERM of the
	 * keys kept before it (keylockd-protocol(7), LIMITS) */
	if (req->nargs > KL_KEYS_HARD_MAX)
		return proto_fail(req, KL_ERR_LIMIT, "%zu keys in one request: "
		    "at most %d are read, duplicates included", req->nargs,
		    KL_KEYS_HARD_MAX);
	return KL_OK;
}

/* req as every parse starts it: no command, no argument, no option. */
static inline void
proto_reset(struct request *req)
{
	req->cmd = CMD_NONE;
	req->nargs = 0;
	proto_reset_options(req);
}

/* No option given, and no error text. */
static inline void
proto_reset_options(struct request *req)
{
	req->opts = 0;
	req->timeout_ms = 0;
	req->ttl_ms = 0;
	req->grace_ms = 0;
	req->limit = 1;
	req->max_waiters = 0;
	req->shared = false;
	req->why[0] = '\0';
}

/* proto_plain() of the words at s + i, s + i + 8, ... before s + end,
 * ANDed: the middle of a key longer than sixteen bytes. */
static uint64_t
proto_plain_words(const unsigned char *s, size_t i, size_t end)
{
	uint64_t	plain = ~UINT64_C(0);

	for (; i < end; i += PROTO_WORD)
		plain &= proto_plain(proto_le64(s + i));
	return plain;
}

/*
 * The common request, a command word of up to seven letters, one space and
 * one plain key ("LOCK k", "UNLOCK k"), in one pass over the line, eight
 * bytes at a time, and without the token loop. The loop would find the
 * same two plain tokens, and a command whose short_ok column says it takes
 * them as a whole request needs no other check, so the result is the
 * same; any other line is SHORT_NO, for the loop to parse (lines under
 * nine bytes too). A key with a byte that is not plain is checked once,
 * there.
 *
 * Every word is classified before any test, and the words after the
 * first ANDed: the last word ends the line and may reach back over the
 * first, where the one byte allowed to be other than plain is the space
 * (m shifted to where that word sees it). No other test
 * is needed: a space at 0 names no command, and with len at most
 * KL_KEY_MAX + 2 the key, after a word of at least one letter, is never
 * too long or empty. The words between the first sixteen bytes and the
 * last word are left to proto_parse_middle(), out of line, so that this
 * makes no call.
 */
static inline enum proto_short
proto_parse_short(const char *line, size_t len, struct request *req)
{
	const unsigned char	*u = (const unsigned char *)line;
	const struct proto_cmd	*cmd;
	uint64_t		 w, m, marks, plain;
	size_t			 sp, t = len - PROTO_WORD;

	if (t - 1 > KL_KEY_MAX + 2 - PROTO_WORD - 1)
		return SHORT_NO;
	/* the words after the first: bit 7 of every byte set if all plain */
	plain = proto_plain(proto_le64(u + t));
	if (t > PROTO_WORD)
		plain &= proto_plain(proto_le64(u + PROTO_WORD));
	/* the space: the one byte of the first eight that is not plain */
	w = proto_le64(u);
	m = proto_not_plain(w);
	sp = (size_t)__builtin_ctzll(m | UINT64_C(1) << 63) / 8;
	if (t < PROTO_WORD)
		plain |= m >> (8 * t);
	marks = ~plain & (0x0101010101010101ULL << 7);
	/* m is bit 7 of byte sp alone: (m >> 7) - 1 keeps the bytes before */
	if ((marks | (m & (m - 1))) != 0 || u[sp] != ' ' ||
	    (cmd = proto_find_word(w & ((m >> 7) - 1), 0, sp)) == NULL ||
	    !cmd->short_ok)
		return SHORT_NO;
	req->cmd = cmd->id;
	req->nargs = 1;
	req->args[0] = line + sp + 1;
	req->arglens[0] = len - sp - 1;
	proto_reset_options(req);
	return t > 2 * PROTO_WORD ? SHORT_MIDDLE : SHORT_YES;
}

/* SHORT_MIDDLE: the short form's request stands if the middle words are
 * plain; else the token loop parses the line (and writes req anew). */
static enum kl_err
proto_parse_middle(const char *line, size_t len, struct request *req)
{
	const unsigned char	*u = (const unsigned char *)line;
	uint64_t		 plain;

	plain = proto_plain_words(u, 2 * PROTO_WORD, len - PROTO_WORD);
	if ((~plain & (0x0101010101010101ULL << 7)) == 0)
		return KL_OK;
	return proto_parse_tokens(line, len, req);
}

enum kl_err
proto_parse(const char *line, size_t len, struct request *req)
{
	switch (proto_parse_short(line, len, req)) {
	case SHORT_YES:
		return KL_OK;
	case SHORT_MIDDLE:
		return proto_parse_middle(line, len, req);
	case SHORT_NO:
		break;
	}
	return proto_parse_tokens(line, len, req);
}

/* Any line, token by token; out of line, so that the short form needs
 * none of its registers or stack. */
static enum kl_err
proto_parse_tokens(const char *line, size_t len, struct request *req)
{
	const struct proto_cmd	*cmd = NULL;
	struct proto_tok	 tok;
	size_t			 pos = 0;
	enum kl_err		 err;

	proto_reset(req);
	/* One call site, so that the compiler inlines it. */
	while (proto_next_token(line, len, &pos, &tok)) {
		if (cmd == NULL)
			err = proto_parse_cmd(req, line, len, &tok, &cmd);
		/* AUTH's secret is one raw token, '=' and all. */
		else if ((tok.classes & PC_EQUALS) &&
		    cmd->kind != PROTO_ARG_SECRET)
			err = proto_parse_option(req, cmd, &tok);
		else
			err = proto_parse_arg(req, cmd, &tok);
		if (err != KL_OK)
			return err;
	}
	/* keylockd-protocol(7), TRANSPORT: lines of only spaces and tabs are empty. */
	if (cmd == NULL)
		return KL_OK;
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
