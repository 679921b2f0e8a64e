/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * libFuzzer harness for proto_parse(): any bytes in, and the result must
 * keep the promises of proto.h and keylockd-protocol(7); and its short
 * form ("LOCK k", one space) must parse as the token loop does, which the
 * same line with its spaces turned into tabs goes through. It also links
 * with replay.c, so make check runs the seed corpus without libFuzzer. It
 * checks with abort(), not assert(), so NDEBUG cannot turn it off.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define FUZZ_CHECK(cond) do {						\
	if (!(cond))							\
		fuzz_fail(#cond, __LINE__);				\
} while (0)

struct fuzz_cmd {
	int		 lo;
	int		 hi;
	enum proto_arg	 kind;
	unsigned	 opts;
};

static const struct fuzz_cmd fuzz_cmds[] = {
#define FUZZ_CMD_ROW(name, lo, hi, kind, opts) { lo, hi, kind, opts },
	KL_CMD_LIST(FUZZ_CMD_ROW)
#undef FUZZ_CMD_ROW
};

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static void	fuzz_fail(const char *, int) __attribute__((noreturn));
static void	fuzz_check_why(const struct request *, enum kl_err);
static void	fuzz_check_args(const struct request *, const char *, size_t);
static void	fuzz_check_ok(const struct request *, const char *, size_t);

static void
fuzz_fail(const char *what, int line)
{
	fprintf(stderr, "fuzz_proto.c:%d: invariant broken: %s\n", line,
	    what);
	abort();
}

/* The why is NUL-terminated, printable ASCII (it goes into a reply line
 * and must never carry a byte of the request that broke a rule). */
static void
fuzz_check_why(const struct request *req, enum kl_err err)
{
	const char	*nul = memchr(req->why, '\0', sizeof(req->why));
	size_t		 len;

	FUZZ_CHECK(nul != NULL);
	len = (size_t)(nul - req->why);
	FUZZ_CHECK((err == KL_OK) == (len == 0));
	for (size_t i = 0; i < len; i++)
		FUZZ_CHECK(req->why[i] >= 0x20 && req->why[i] <= 0x7e);
}

/* Stored arguments are whole tokens of the input, in order, whatever the
 * result. */
static void
fuzz_check_args(const struct request *req, const char *line, size_t len)
{
	size_t		 stored;
	const char	*prev_end = line;

	stored = req->nargs < KL_KEYS_HARD_MAX ? req->nargs :
	    KL_KEYS_HARD_MAX;
	FUZZ_CHECK(req->nargs >= stored);
	for (size_t i = 0; i < stored; i++) {
		const char	*a = req->args[i];
		size_t		 n = req->arglens[i];

		FUZZ_CHECK(n >= 1);
		FUZZ_CHECK(a > line && a >= prev_end);
		FUZZ_CHECK(n <= len && a <= line + len - n);
		FUZZ_CHECK(a[-1] == ' ' || a[-1] == '\t');
		FUZZ_CHECK(a + n == line + len || a[n] == ' ' ||
		    a[n] == '\t');
		FUZZ_CHECK(memchr(a, ' ', n) == NULL &&
		    memchr(a, '\t', n) == NULL);
		prev_end = a + n;
	}
}

static void
fuzz_check_ok(const struct request *req, const char *line, size_t len)
{
	const struct fuzz_cmd	*c;
	char			 why[PROTO_WHY_MAX];
	size_t			 stored;

	if (req->cmd == CMD_NONE) {
		for (size_t i = 0; i < len; i++)
			FUZZ_CHECK(line[i] == ' ' || line[i] == '\t');
		FUZZ_CHECK(req->nargs == 0 && req->opts == 0);
		return;
	}
	c = &fuzz_cmds[req->cmd];
	FUZZ_CHECK(req->nargs >= (size_t)c->lo);
	FUZZ_CHECK(c->hi < 0 || req->nargs <= (size_t)c->hi);
	FUZZ_CHECK((req->opts & ~c->opts) == 0);
	FUZZ_CHECK(proto_cmd_name(req->cmd) != NULL);

	stored = req->nargs < KL_KEYS_HARD_MAX ? req->nargs :
	    KL_KEYS_HARD_MAX;
	for (size_t i = 0; i < stored; i++) {
		const char	*a = req->args[i];
		size_t		 n = req->arglens[i];

		if (c->kind == PROTO_ARG_KEY)
			FUZZ_CHECK(proto_key_is_valid(a, n, why, sizeof(why)));
		if (c->kind == PROTO_ARG_NAME)
			FUZZ_CHECK(n <= KL_NAME_MAX &&
			    proto_key_is_valid(a, n, why, sizeof(why)));
		if (c->kind == PROTO_ARG_SECRET)
			FUZZ_CHECK(n <= KL_SECRET_MAX);
		if (c->kind != PROTO_ARG_SECRET)
			FUZZ_CHECK(memchr(a, '=', n) == NULL);
		if (c->kind == PROTO_ARG_SESSION) {
			FUZZ_CHECK(n >= 1 && n <= KL_SESSION_ID_MAX);
			for (size_t j = 0; j < n; j++)
				FUZZ_CHECK(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				    "abcdefghijklmnopqrstuvwxyz0123456789-_",
				    a[j]) != NULL && a[j] != '\0');
		}
	}

	FUZZ_CHECK(req->timeout_ms <= KL_MS_MAX);
	FUZZ_CHECK((req->opts & OPT_TIMEOUT) || req->timeout_ms == 0);
	FUZZ_CHECK((req->opts & OPT_TTL) ? req->ttl_ms >= 1 &&
	    req->ttl_ms <= KL_MS_MAX : req->ttl_ms == 0);
	FUZZ_CHECK((req->opts & OPT_GRACE) ? req->grace_ms >= 1 &&
	    req->grace_ms <= KL_MS_MAX : 1);
	FUZZ_CHECK(req->limit >= 1 && req->limit <= KL_LIMIT_MAX);
	FUZZ_CHECK((req->opts & OPT_LIMIT) || req->limit == 1);
	FUZZ_CHECK(req->max_waiters <= KL_LIMIT_MAX);
	FUZZ_CHECK((req->opts & OPT_MAX_WAITERS) || req->max_waiters == 0);
	FUZZ_CHECK(!req->shared || (req->opts & OPT_MODE));
	FUZZ_CHECK(!(req->shared && (req->opts & OPT_LIMIT)));
	FUZZ_CHECK(req->cmd != CMD_REFRESH || (req->opts & OPT_TTL));
	FUZZ_CHECK(req->cmd != CMD_TRYLOCK || !(req->opts & OPT_TIMEOUT));
}

/*
 * The line with its spaces turned into tabs, which only the token loop
 * takes: a line the short form took (or any other that parsed) gives the
 * same request, every field alike.
 */
static void
fuzz_check_tabs(const char *line, size_t size, const struct request *want)
{
	static struct request	 got;
	char			*tabbed;

	if ((tabbed = malloc(size > 0 ? size : 1)) == NULL)
		abort();
	for (size_t i = 0; i < size; i++)
		tabbed[i] = line[i] == ' ' ? '\t' : line[i];
	FUZZ_CHECK(proto_parse(tabbed, size, &got) == KL_OK);
	FUZZ_CHECK(got.cmd == want->cmd && got.nargs == want->nargs);
	for (size_t i = 0; i < got.nargs && i < KL_KEYS_HARD_MAX; i++)
		FUZZ_CHECK(got.args[i] - tabbed == want->args[i] - line &&
		    got.arglens[i] == want->arglens[i]);
	FUZZ_CHECK(got.opts == want->opts && got.limit == want->limit &&
	    got.shared == want->shared && got.timeout_ms == want->timeout_ms &&
	    got.ttl_ms == want->ttl_ms && got.max_waiters == want->max_waiters);
	FUZZ_CHECK(got.why[0] == '\0' && want->why[0] == '\0');
	free(tabbed);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct request	 req, again;
	const char		*line = (const char *)data;
	enum kl_err		 err;

	err = proto_parse(line, size, &req);
	FUZZ_CHECK(err == KL_OK || err == KL_ERR_SYNTAX ||
	    err == KL_ERR_BADKEY || err == KL_ERR_LIMIT);
	/* LIMIT: more arguments than the parser stores, each one good. */
	FUZZ_CHECK(err != KL_ERR_LIMIT || req.nargs > KL_KEYS_HARD_MAX);
	FUZZ_CHECK(req.cmd == CMD_NONE || (unsigned)req.cmd < CMD__COUNT);
	fuzz_check_why(&req, err);
	fuzz_check_args(&req, line, size);
	if (err == KL_OK)
		fuzz_check_ok(&req, line, size);
	/* BADKEY is only ever about a key. */
	FUZZ_CHECK(err != KL_ERR_BADKEY || (req.cmd != CMD_NONE &&
	    fuzz_cmds[req.cmd].kind == PROTO_ARG_KEY));

	if (err == KL_OK)
		fuzz_check_tabs(line, size, &req);

	/* Pure: the same bytes give the same answer. */
	FUZZ_CHECK(proto_parse(line, size, &again) == err);
	FUZZ_CHECK(strcmp(req.why, again.why) == 0);
	FUZZ_CHECK(req.cmd == again.cmd && req.nargs == again.nargs &&
	    req.opts == again.opts);
	return 0;
}
