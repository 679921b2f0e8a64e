/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The wire protocol's grammar: one request line into a struct request, and
 * the table of reply words. Pure: no allocation, no logging, no globals, no
 * clock; the fuzzer calls proto_parse() directly.
 */
#ifndef PROTO_H
#define PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl.h"

/*
 * The one list of commands, sorted by name, so that the enum and every
 * table built from it read in one order (proto.c tries the busiest names
 * first). Columns: name, least and most arguments (-1: up to the line),
 * what an argument is, which options the command takes.
 */
#define KL_CMD_LIST(X)							\
	X(AUTH,      1,  2, PROTO_ARG_SECRET, 0)			\
	X(CANCEL,    0,  0, PROTO_ARG_NONE,   0)			\
	X(CLIENTS,   0,  0, PROTO_ARG_NONE,   0)			\
	X(INFO,      1,  1, PROTO_ARG_KEY,    0)			\
	X(KILL,      1,  1, PROTO_ARG_ID,     0)			\
	X(LOCK,      1, -1, PROTO_ARG_KEY,    PROTO_OPTS_LOCK)		\
	X(NAME,      1,  1, PROTO_ARG_NAME,   0)			\
	X(PING,      0,  0, PROTO_ARG_NONE,   0)			\
	X(QUIT,      0,  0, PROTO_ARG_NONE,   0)			\
	X(REFRESH,   1, -1, PROTO_ARG_KEY,    OPT_TTL)			\
	X(RESUME,    1,  1, PROTO_ARG_SESSION, 0)			\
	X(SESSION,   0,  0, PROTO_ARG_NONE,   OPT_GRACE)		\
	X(STATS,     0,  0, PROTO_ARG_NONE,   0)			\
	X(TRYLOCK,   1, -1, PROTO_ARG_KEY,    PROTO_OPTS_TRYLOCK)	\
	X(UNLOCK,    1, -1, PROTO_ARG_KEY,    0)			\
	X(UNLOCKALL, 0,  0, PROTO_ARG_NONE,   0)			\
	X(UPGRADE,   0,  0, PROTO_ARG_NONE,   0)

enum cmd_id {
#define KL_CMD_ENUM(name, lo, hi, kind, opts) CMD_##name,
	KL_CMD_LIST(KL_CMD_ENUM)
#undef KL_CMD_ENUM
	CMD__COUNT,
	CMD_NONE = CMD__COUNT	/* an empty line: no reply */
};

enum proto_arg {
	PROTO_ARG_NONE = 0,
	PROTO_ARG_KEY,		/* keylockd-protocol(7), KEYS; bad ones are BADKEY */
	PROTO_ARG_NAME,		/* key byte rules, 1..KL_NAME_MAX; SYNTAX */
	PROTO_ARG_SECRET,	/* one raw token, 1..KL_SECRET_MAX; no options */
	PROTO_ARG_ID,		/* a client id: 1 to 20 digits; SYNTAX */
	PROTO_ARG_SESSION	/* a session ID: 1..KL_SESSION_ID_MAX of A-Z a-z 0-9 - _; SYNTAX */
};

enum proto_opt {
	OPT_TIMEOUT	= 1 << 0,
	OPT_MODE	= 1 << 1,
	OPT_LIMIT	= 1 << 2,
	OPT_MAX_WAITERS	= 1 << 3,
	OPT_TTL		= 1 << 4,
	OPT_GRACE	= 1 << 5	/* SESSION grace=MS */
};
#define PROTO_OPTS_TRYLOCK	(OPT_MODE | OPT_LIMIT | OPT_MAX_WAITERS | OPT_TTL)
#define PROTO_OPTS_LOCK		(PROTO_OPTS_TRYLOCK | OPT_TIMEOUT)

#define PROTO_WHY_MAX	192

struct request {
	enum cmd_id	 cmd;
	/* Arguments point into the caller's line and are copied if kept.
	 * A parse that succeeds stored all nargs, at most KL_KEYS_HARD_MAX
	 * (more is LIMIT, once every argument passed its checks). */
	size_t		 nargs;
	const char	*args[KL_KEYS_HARD_MAX];
	size_t		 arglens[KL_KEYS_HARD_MAX];
	unsigned	 opts;		/* OPT_* given on the line */
	uint64_t	 timeout_ms;
	uint64_t	 ttl_ms;	/* >= 1 when given */
	uint64_t	 grace_ms;	/* SESSION: >= 1 when given */
	uint32_t	 limit;		/* 1 unless given */
	uint32_t	 max_waiters;
	bool		 shared;	/* mode=shared */
	char		 why[PROTO_WHY_MAX];	/* the error text, if any */
};

/*
 * Parses line[0..len), LF and CR already stripped (it may hold any byte,
 * NUL included). Returns KL_OK (req->cmd is CMD_NONE for a line of only
 * spaces and tabs), KL_ERR_SYNTAX or KL_ERR_BADKEY with req->why set. The
 * first bad token from the left decides the error; checks that need the
 * whole line (argument count, mode=shared with limit=, REFRESH without
 * ttl=) come after.
 */
enum kl_err	 proto_parse(const char *line, size_t len, struct request *req);

/* Checks one key against keylockd-protocol(7)'s rules; on failure writes a reason
 * (which never echoes the bad bytes) into why. */
bool		 proto_key_is_valid(const char *key, size_t len, char *why,
		    size_t whylen);

/* The reply word of an error ("SYNTAX"), or NULL for KL_OK. */
const char	*proto_err_word(enum kl_err err);
/* The command's name in upper case. */
const char	*proto_cmd_name(enum cmd_id cmd);

#endif /* PROTO_H */
