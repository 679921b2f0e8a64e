/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The commands of keylockd-protocol(7): the shared checks run once in
 * commands_execute(), in the protocol's order (the parser already did
 * SYNTAX and BADKEY: then AUTH, then LIMIT), and each handler makes one
 * lock-table call and one reply. Handlers never write a socket, and the
 * lock table's hooks never call back into the table.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "conn.h"
#include "locktable.h"
#include "log.h"
#include "server.h"
#include "stats.h"
#include "token.h"
#include "util.h"

#define CMD_NO_AUTH	0x01	/* allowed before AUTH succeeds */
#define CMD_KEYS	0x02	/* arguments are keys: max-keys applies */

struct cmd_entry {
	void		(*fn)(struct conn *, const struct request *);
	unsigned	flags;
};

#define BLOCKER_MAX	(KL_KEY_MAX + KL_NAME_MAX + 160)

static const char *
cmd_owner_name(const struct lt_owner *o)
{
	return conn_name(locktable_owner_udata(o));
}

/* "KEY held by client 3 (backup) for 812 ms, 2 waiting": who blocks. */
static const char *
cmd_blocker(char *buf, size_t len, const struct lt_blocker *b)
{
	int	n;

	if (b->holder != NULL) {
		const char	*name = cmd_owner_name(b->holder);

		n = snprintf(buf, len, "%.*s held by client %" PRIu64 "%s%s%s"
		    " for %" PRIu64 " ms", (int)b->keylen, b->key,
		    locktable_owner_id(b->holder), name != NULL ? " (" : "",
		    name != NULL ? name : "", name != NULL ? ")" : "",
		    b->held_ms);
		if (b->nholders > 1 && n > 0 && (size_t)n < len)
			n += snprintf(buf + n, len - (size_t)n, " and %zu "
			    "other holder%s", b->nholders - 1,
			    b->nholders > 2 ? "s" : "");
	} else {
		n = snprintf(buf, len, "%.*s has requests queued ahead",
		    (int)b->keylen, b->key);
	}
	if (b->nwaiters > 0 && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ", %zu waiting",
		    b->nwaiters);
	return buf;
}

/* The effective timeout of a LOCK: < 0 waits forever, 0 does not wait. */
static bool
cmd_timeout(struct conn *c, const struct request *req, int64_t *timeout)
{
	const struct config	*cfg = conn_server(c)->cfg;

	if (req->cmd == CMD_TRYLOCK)
		*timeout = 0;
	else if (req->opts & OPT_TIMEOUT)
		*timeout = (int64_t)req->timeout_ms;
	else
		*timeout = cfg->default_timeout;
	if (cfg->max_timeout == KL_NONE)
		return true;
	if (*timeout < 0) {
		*timeout = cfg->max_timeout;
	} else if (*timeout > cfg->max_timeout) {
		conn_reply_err(c, KL_ERR_LIMIT, "timeout %" PRId64 " ms is "
		    "over the server's max-timeout of %" PRId64 " ms",
		    *timeout, cfg->max_timeout);
		return false;
	}
	return true;
}

static void
cmd_lock_failed(struct conn *c, enum kl_err err, const struct lt_acquire *a,
    const struct lt_blocker *why)
{
	struct server		*srv = conn_server(c);
	const struct lt_key	*k;
	struct lt_key_view	 v;
	char			 b[BLOCKER_MAX];

	switch (err) {
	case KL_ERR_LIMIT:
		conn_reply_err(c, err, "this connection would hold more than "
		    "%" PRId64 " locks (max-locks)", srv->cfg->max_locks);
		break;
	case KL_ERR_HELD:
		conn_reply_err(c, err, "this connection already holds %.*s",
		    (int)why->keylen, why->key);
		break;
	case KL_ERR_CONFLICT:
		k = locktable_find(srv->lt, why->key, why->keylen);
		locktable_key_view(k, &v);
		conn_reply_err(c, err, "%.*s is in use with limit=%" PRIu32
		    ", not %" PRIu32, (int)why->keylen, why->key, v.limit,
		    a->limit);
		break;
	case KL_ERR_BUSY:
		conn_reply_err(c, err, "max_waiters=%" PRId64 " reached: %s",
		    a->max_waiters, cmd_blocker(b, sizeof(b), why));
		break;
	case KL_ERR_DEADLOCK:
		conn_reply_err(c, err, "waiting would close a cycle: %s",
		    cmd_blocker(b, sizeof(b), why));
		break;
	default:
		conn_reply_err(c, err, "%s", cmd_blocker(b, sizeof(b), why));
		break;
	}
}

static void
cmd_lock(struct conn *c, const struct request *req)
{
	struct server		*srv = conn_server(c);
	const struct config	*cfg = srv->cfg;
	struct lt_acquire	 a;
	struct lt_blocker	 why;
	uint64_t		 now = kl_now_ms(), token = 0;
	int64_t			 timeout;
	bool			 granted = false;
	enum kl_err		 err;

	if (!cmd_timeout(c, req, &timeout))
		return;
	memset(&a, 0, sizeof(a));
	a.keys = req->args;
	a.keylens = req->arglens;
	a.nkeys = req->nargs;
	a.mode = req->shared ? LT_SHARED : LT_EXCLUSIVE;
	a.limit = req->limit;
	a.try = timeout == 0;
	a.max_waiters = (req->opts & OPT_MAX_WAITERS) ?
	    (int64_t)req->max_waiters : cfg->default_max_waiters;
	a.ttl_ms = (req->opts & OPT_TTL) ? req->ttl_ms : 0;
	a.max_holds = (size_t)cfg->max_locks;
	err = locktable_acquire(srv->lt, conn_owner(c), &a, now, &granted,
	    &token, &why);
	if (err != KL_OK)
		cmd_lock_failed(c, err, &a, &why);
	else if (granted)
		conn_reply_u64(c, token);
	else
		conn_wait(c, timeout, now);
}

static void
cmd_unlock(struct conn *c, const struct request *req)
{
	struct server	*srv = conn_server(c);
	size_t		 n, bad;

	if (locktable_release(srv->lt, conn_owner(c), req->args, req->arglens,
	    req->nargs, kl_now_ms(), &n, &bad) != KL_OK)
		conn_reply_err(c, KL_ERR_NOTHELD, "%.*s is not held by this "
		    "connection", (int)req->arglens[bad], req->args[bad]);
	else
		conn_reply_u64(c, n);
}

static void
cmd_unlockall(struct conn *c, const struct request *req)
{
	struct server	*srv = conn_server(c);

	conn_reply_u64(c, locktable_release_owner(srv->lt, conn_owner(c),
	    kl_now_ms(), LT_WHY_UNLOCK));
}

static void
cmd_refresh(struct conn *c, const struct request *req)
{
	struct server	*srv = conn_server(c);
	size_t		 n, bad;

	if (locktable_refresh(srv->lt, conn_owner(c), req->args, req->arglens,
	    req->nargs, req->ttl_ms, kl_now_ms(), &n, &bad) != KL_OK)
		conn_reply_err(c, KL_ERR_NOTHELD, "%.*s is not held by this "
		    "connection", (int)req->arglens[bad], req->args[bad]);
	else
		conn_reply_u64(c, n);
}

static void
cmd_json_reply(struct conn *c, char *json)
{
	if (json == NULL) {
		log_warnx("client %" PRIu64 ": out of memory for JSON",
		    conn_id(c));
		conn_close(c, "out of memory");
		return;
	}
	conn_reply_ok_str(c, json);
	free(json);
}

static void
cmd_stats(struct conn *c, const struct request *req)
{
	struct server	*srv = conn_server(c);

	cmd_json_reply(c, stats_to_json(&srv->stats, srv->lt, kl_now_ms(),
	    PACKAGE_VERSION));
}

static void
cmd_info(struct conn *c, const struct request *req)
{
	struct server	*srv = conn_server(c);

	cmd_json_reply(c, stats_info_json(srv->lt, req->args[0],
	    req->arglens[0], kl_now_ms(), cmd_owner_name));
}

static void
cmd_name(struct conn *c, const struct request *req)
{
	if (!conn_set_name(c, req->args[0], req->arglens[0])) {
		conn_close(c, "out of memory");
		return;
	}
	conn_reply_ok(c, "%s", "");
}

/* Compares in time that depends only on the secret's length. */
static bool
cmd_secret_matches(const char *secret, size_t slen, const char *given,
    size_t glen)
{
	unsigned char	diff = (unsigned char)(slen != glen);

	for (size_t i = 0; i < slen; i++)
		diff |= (unsigned char)(secret[i] ^ (i < glen ? given[i] : 0));
	return diff == 0;
}

static void
cmd_auth(struct conn *c, const struct request *req)
{
	struct server	*srv = conn_server(c);
	uint64_t	 now;

	if (srv->secret != NULL && cmd_secret_matches(srv->secret,
	    srv->secret_len, req->args[0], req->arglens[0])) {
		conn_set_authed(c, true);
		conn_reply_ok(c, "%s", "");
		return;
	}
	srv->stats.auth_failures++;
	now = kl_now_ms();
	if (now - srv->auth_log_ms >= KL_WARN_INTERVAL_MS) {
		log_warnx("client %" PRIu64 " from %s: AUTH failed (%" PRIu64
		    " failures so far)", conn_id(c), conn_peer(c),
		    srv->stats.auth_failures);
		srv->auth_log_ms = now;
	} else
		log_debug("client %" PRIu64 " from %s: AUTH failed",
		    conn_id(c), conn_peer(c));
	if (srv->secret == NULL)
		conn_reply_err(c, KL_ERR_AUTH, "no secret is configured");
	else
		conn_reply_err(c, KL_ERR_AUTH, "wrong secret");
}

static void
cmd_ping(struct conn *c, const struct request *req)
{
	conn_reply_ok(c, "PONG");
}

static void
cmd_quit(struct conn *c, const struct request *req)
{
	conn_reply_ok(c, "%s", "");
	conn_quit(c);
}

static const struct cmd_entry cmd_table[CMD__COUNT] = {
	[CMD_AUTH]	= { cmd_auth,		CMD_NO_AUTH },
	[CMD_INFO]	= { cmd_info,		0 },
	[CMD_LOCK]	= { cmd_lock,		CMD_KEYS },
	[CMD_NAME]	= { cmd_name,		0 },
	[CMD_PING]	= { cmd_ping,		CMD_NO_AUTH },
	[CMD_QUIT]	= { cmd_quit,		CMD_NO_AUTH },
	[CMD_REFRESH]	= { cmd_refresh,	CMD_KEYS },
	[CMD_STATS]	= { cmd_stats,		0 },
	[CMD_TRYLOCK]	= { cmd_lock,		CMD_KEYS },
	[CMD_UNLOCK]	= { cmd_unlock,		CMD_KEYS },
	[CMD_UNLOCKALL]	= { cmd_unlockall,	0 },
};

void
commands_execute(struct conn *c, const struct request *req)
{
	const struct cmd_entry	*e = &cmd_table[req->cmd];
	const struct config	*cfg = conn_server(c)->cfg;

	if (!(e->flags & CMD_NO_AUTH) && !conn_is_authed(c)) {
		conn_reply_err(c, KL_ERR_AUTH, "authentication required");
		return;
	}
	if ((e->flags & CMD_KEYS) && req->nargs > (size_t)cfg->max_keys) {
		conn_reply_err(c, KL_ERR_LIMIT, "%zu keys in one request, "
		    "max-keys is %" PRId64, req->nargs, cfg->max_keys);
		return;
	}
	e->fn(c, req);
}

static void
cmd_granted_hook(void *arg, struct lt_owner *o, uint64_t token,
    uint64_t waited_ms)
{
	struct conn	*c = locktable_owner_udata(o);

	conn_reply_u64(c, token);
	conn_wait_done(c);
}

static uint64_t
cmd_token_hook(void *arg)
{
	struct server	*srv = arg;

	return token_next(srv->tokens);
}

void
commands_hooks(struct server *srv, struct lt_hooks *hooks)
{
	hooks->granted = cmd_granted_hook;
	hooks->next_token = cmd_token_hook;
	hooks->arg = srv;
}

void
commands_timeout(struct conn *c)
{
	struct server		*srv = conn_server(c);
	struct lt_blocker	 why;
	char			 b[BLOCKER_MAX];
	uint64_t		 now = kl_now_ms();

	if (!locktable_wait_blocker(srv->lt, conn_owner(c), now, &why))
		return;
	if (why.nwaiters > 0)
		why.nwaiters--;		/* not counting the one timing out */
	cmd_blocker(b, sizeof(b), &why);
	locktable_withdraw(srv->lt, conn_owner(c), now, LT_WHY_TIMEOUT);
	conn_reply_err(c, KL_ERR_TIMEOUT, "not granted in time: %s", b);
	conn_wait_done(c);
}

void
commands_shutdown_wait(struct conn *c)
{
	struct server	*srv = conn_server(c);

	locktable_withdraw(srv->lt, conn_owner(c), kl_now_ms(),
	    LT_WHY_SHUTDOWN);
	conn_reply_err(c, KL_ERR_SHUTDOWN, "the server is stopping");
	conn_wait_done(c);
}
