/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The commands of keylockd-protocol(7): the shared checks run once in
 * commands_execute(), in the protocol's order (the parser already did
 * SYNTAX and BADKEY: then AUTH, NOPERM, LIMIT), and each handler makes one
 * backend call and one reply, now or, when the backend completes the
 * request later, from commands_done(). Handlers never write a socket, and
 * what a backend hook calls never calls back into the backend.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "commands.h"
#include "config.h"
#include "conn.h"
#include "locktable.h"
#include "log.h"
#include "session.h"
#include "stats.h"
#include "users.h"
#include "util.h"

#define CMD_NO_AUTH	0x01	/* allowed before AUTH succeeds */
#define CMD_KEYS	0x02	/* arguments are keys: max-keys applies */
#define CMD_ADMIN	0x04	/* the operator's: unix socket or admin AUTH */
#define CMD_PERM	0x08	/* its keys must be the user's (NOPERM) */
#define CMD_CONN	0x10	/* the connection's: channel 0 only */

#define BLOCKER_MAX	(KL_KEY_MAX + KL_NAME_MAX + 160)

/* An AUTH secret: the clients' or the operator's. */
struct cmd_secret {
	char		*s;		/* NULL: none configured */
	size_t		 len;
};

struct commands {
	const struct config	*cfg;
	struct stats		*st;
	struct backend		*be;
	/* The counters of be's table (one table for the backend's life):
	 * max-table-bytes. */
	const struct lt_counters *table;
	struct cmd_secret	 client;	/* auth-file */
	struct cmd_secret	 admin;		/* admin-auth-file */
	struct users		*users;		/* user, operator-uids */
	/* A reload's: the users before it, and which version 1 secrets
	 * changed, until commands_reauth() has moved every connection. */
	struct users		*old_users;
	bool			 client_changed, admin_changed;
	bool			 need_auth;	/* a secret or a user is set */
	bool			 has_users;	/* NOPERM is possible */
	/* From how many arguments a command's request goes through
	 * cmd_execute_checked(), by cmd_apply() from the settings and
	 * the three flags above, once per configuration. */
	size_t			 check_from[CMD__COUNT];
	/* A LOCK's settings, by cmd_apply() too: its timeout without
	 * timeout= (default-timeout within max-timeout), its max_waiters
	 * without max_waiters= (default-max-waiters under max-waiters),
	 * and max-table-bytes (UINT64_MAX: none). */
	int64_t			 lock_timeout;
	int64_t			 lock_max_waiters;
	uint64_t		 table_bytes_max;
	uint64_t		 auth_log_ms;	/* last AUTH failure warning */
	/* UPGRADE starts a live upgrade through the server's hook. */
	bool			(*upgrade)(void *, struct conn *, char *,
				    size_t);
	void			*upgrade_arg;
};

/* The shared checks a command needs, and its handler. */
struct cmd_entry {
	unsigned	flags;
	void		(*run)(struct commands *, struct conn *,
			    const struct request *);
};

static void	cmd_apply(struct commands *);

/* ---- the secret ---- */

/* Reads an AUTH secret (secret_file_read(): the file's first line, a
 * private regular file of root's or the daemon's user, as a user's
 * secret-file). false with a message in err. */
static bool
cmd_read_secret(const char *setting, const char *path,
    struct cmd_secret *sec, char *err, size_t errlen)
{
	char	 buf[KL_SECRET_MAX + 1];
	size_t	 n;

	sec->s = NULL;
	sec->len = 0;
	if (path == NULL)
		return true;
	if (!secret_file_read(setting, path, buf, &n, err, errlen))
		return false;
	sec->s = kl_strndup(buf, n);
	explicit_bzero(buf, sizeof(buf));
	if (sec->s == NULL) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	sec->len = n;
	return true;
}

/* Both secrets of cfg, or neither (false, with a message). */
static bool
cmd_read_secrets(const struct config *cfg, struct cmd_secret *client,
    struct cmd_secret *admin, char *err, size_t errlen)
{
	if (!cmd_read_secret("auth-file", cfg->auth_file, client, err,
	    errlen))
		return false;
	if (!cmd_read_secret("admin-auth-file", cfg->admin_auth_file, admin,
	    err, errlen)) {
		kl_free(client->s);
		client->s = NULL;
		return false;
	}
	/* one secret for both would make every client an operator (review
	 * L2): refused, as a reload would be */
	if (client->s != NULL && admin->s != NULL &&
	    client->len == admin->len &&
	    memcmp(client->s, admin->s, client->len) == 0) {
		snprintf(err, errlen, "auth-file %s and admin-auth-file %s "
		    "hold the same secret: every client would be an operator; "
		    "give the operator a secret of its own", cfg->auth_file,
		    cfg->admin_auth_file);
		explicit_bzero(client->s, client->len);
		explicit_bzero(admin->s, admin->len);
		kl_free(client->s);
		kl_free(admin->s);
		client->s = admin->s = NULL;
		return false;
	}
	return true;
}

int
commands_check(const struct config *cfg, char *err, size_t errlen)
{
	struct cmd_secret	 client, admin;
	struct users		*us;

	if (!cmd_read_secrets(cfg, &client, &admin, err, errlen))
		return -1;
	kl_free(client.s);
	kl_free(admin.s);
	if ((us = users_load(cfg, err, errlen)) == NULL)
		return -1;
	users_free(us);
	return 0;
}

struct commands *
commands_new(const struct config *cfg, struct stats *st, struct backend *be,
    char *err, size_t errlen)
{
	struct commands	*cmds;

	if ((cmds = kl_calloc(1, sizeof(*cmds))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	cmds->cfg = cfg;
	cmds->st = st;
	cmds->be = be;
	cmds->table = locktable_counters(backend_table(be));
	if (!cmd_read_secrets(cfg, &cmds->client, &cmds->admin, err,
	    errlen)) {
		kl_free(cmds);
		return NULL;
	}
	if ((cmds->users = users_load(cfg, err, errlen)) == NULL) {
		commands_free(cmds);
		return NULL;
	}
	cmds->has_users = users_count(cmds->users) > 0;
	cmds->need_auth = cmds->client.s != NULL || cmds->has_users;
	cmd_apply(cmds);
	return cmds;
}

void
commands_free(struct commands *cmds)
{
	if (cmds == NULL)
		return;
	kl_free(cmds->client.s);
	kl_free(cmds->admin.s);
	users_free(cmds->users);
	users_free(cmds->old_users);
	kl_free(cmds);
}

static void
cmd_log_secret_change(const char *what, const struct cmd_secret *old,
    const struct cmd_secret *new)
{
	/* a reload that drops a secret opens the server: said as such */
	if (old->s != NULL && new->s == NULL)
		log_warnx("reload: %s off: no secret is asked for now", what);
	else if (new->s != NULL)
		log_info("reload: %s secret read", what);
}

static bool
cmd_secret_changed(const struct cmd_secret *old, const struct cmd_secret *new)
{
	return old->s != NULL && (new->s == NULL || old->len != new->len ||
	    memcmp(old->s, new->s, old->len) != 0);
}

static void
cmd_secret_free(struct cmd_secret *sec)
{
	if (sec->s != NULL)
		explicit_bzero(sec->s, sec->len);
	kl_free(sec->s);
}

/* The connections move to the new users in commands_reauth(), which the
 * caller runs next (conns_reload()). */
bool
commands_reload(struct commands *cmds, const struct config *next, char *err,
    size_t errlen)
{
	struct cmd_secret	 client, admin;
	struct users		*us;

	if (!cmd_read_secrets(next, &client, &admin, err, errlen))
		return false;
	if ((us = users_load(next, err, errlen)) == NULL) {
		cmd_secret_free(&client);
		cmd_secret_free(&admin);
		return false;
	}
	cmd_log_secret_change("AUTH", &cmds->client, &client);
	cmd_log_secret_change("operator AUTH", &cmds->admin, &admin);
	if (users_count(us) == 0 && users_count(cmds->users) > 0)
		log_warnx("reload: 0 users: the user lines are gone");
	else if (users_count(us) > 0)
		log_info("reload: %zu user%s", users_count(us),
		    users_count(us) == 1 ? "" : "s");
	cmds->client_changed = cmd_secret_changed(&cmds->client, &client);
	cmds->admin_changed = cmd_secret_changed(&cmds->admin, &admin);
	cmd_secret_free(&cmds->client);
	cmd_secret_free(&cmds->admin);
	cmds->client = client;
	cmds->admin = admin;
	users_free(cmds->old_users);
	cmds->old_users = cmds->users;
	cmds->users = us;
	cmds->has_users = users_count(us) > 0;
	cmds->need_auth = cmds->client.s != NULL || cmds->has_users;
	return true;
}

/*
 * After a reload, c's identity: the same user if it is still there with
 * the same secret (its keys as they are now), else none, and c gets
 * ERR AUTH until it authenticates again (keylockd-protocol(7), ACCESS
 * CONTROL). Its locks and its wait stay.
 */
static bool
cmd_reauth_one(void *arg, struct conn *c)
{
	struct commands		*cmds = arg;
	const struct user	*u = conn_user(c), *next;

	if (u == NULL)
		return true;
	if (!cmds->need_auth) {
		conn_set_user(c, NULL);	/* every key, as for anyone */
		return true;
	}
	if (u == users_client_secret)
		next = cmds->client_changed ? NULL : u;
	else if (u == users_operator_secret)
		next = cmds->admin_changed ? NULL : u;
	else if (u == users_revoked)
		next = u;
	else
		next = users_successor(cmds->users, u);
	if (next == NULL) {
		log_info("client %" PRIu64 " from %s: its %s changed or is "
		    "gone: it must AUTH again", conn_id(c), conn_peer(c),
		    user_name(u) != NULL ? "user" : "secret");
		conn_set_auth(c, false, false);
		next = users_revoked;
	} else if (next != u) {
		conn_set_auth(c, true, user_is_operator(next));
	}
	conn_set_user(c, next);
	return true;
}

void
commands_reauth(struct commands *cmds, struct conns *cs)
{
	conns_walk(cs, cmd_reauth_one, cmds);
	users_free(cmds->old_users);
	cmds->old_users = NULL;
	cmds->client_changed = cmds->admin_changed = false;
	cmd_apply(cmds);	/* the live settings are the new ones now */
}

const struct users *
commands_users(const struct commands *cmds)
{
	return cmds->users;
}

bool
commands_has_secret(const struct commands *cmds, bool operator)
{
	return (operator ? cmds->admin.s : cmds->client.s) != NULL;
}

bool
commands_need_auth(const struct commands *cmds)
{
	return cmds->need_auth;
}

/* ---- the texts ---- */

static const char *
cmd_owner_name(const struct lt_owner *o, int64_t *detached_ms,
    uint64_t *client, uint32_t *channel, uint64_t *frontend)
{
	*frontend = owner_frontend(o);
	*client = owner_client(o);
	*channel = owner_channel(o);
	*detached_ms = owner_detached_ms(o, kl_now_ms());
	return owner_name(o);
}

/* "KEY held by client 3 (backup) for 812 ms, 2 waiting": who blocks. */
static const char *
cmd_blocker(char *buf, size_t len, const struct lt_blocker *b)
{
	int	n;

	if (b->holder != NULL) {
		const char	*name = owner_name(b->holder);

		char		 ch[16] = "", fe[40] = "";

		if (owner_channel(b->holder) != 0)
			snprintf(ch, sizeof(ch), "/%" PRIu32,
			    owner_channel(b->holder));
		if (owner_is_foreign(b->holder))
			snprintf(fe, sizeof(fe), " of front end %016" PRIx64,
			    owner_frontend(b->holder));
		n = snprintf(buf, len, "%.*s held by client %" PRIu64 "%s%s%s"
		    "%s%s for %" PRIu64 " ms", (int)b->keylen, b->key,
		    owner_client(b->holder), ch, name != NULL ? " (" : "",
		    name != NULL ? name : "", name != NULL ? ")" : "", fe,
		    b->held_ms);
		if (owner_in_lock_delay(b->holder) && n > 0 &&
		    (size_t)n < len)
			n += snprintf(buf + n, len - (size_t)n, " (its session "
			    "ended: session-lock-delay)");
		if (b->nholders > 1 && n > 0 && (size_t)n < len)
			n += snprintf(buf + n, len - (size_t)n, " and %zu "
			    "other holder%s", b->nholders - 1,
			    b->nholders > 2 ? "s" : "");
	} else if (b->waiter != NULL) {
		const char	*name = owner_name(b->waiter);
		char		 ch[16] = "";

		if (owner_channel(b->waiter) != 0)
			snprintf(ch, sizeof(ch), "/%" PRIu32,
			    owner_channel(b->waiter));
		n = snprintf(buf, len, "%.*s has requests queued ahead: "
		    "client %" PRIu64 "%s%s%s%s first, waiting for %" PRIu64
		    " ms", (int)b->keylen, b->key, owner_client(b->waiter), ch,
		    name != NULL ? " (" : "", name != NULL ? name : "",
		    name != NULL ? ")" : "", b->waited_ms);
	} else {
		n = snprintf(buf, len, "%.*s has requests queued ahead",
		    (int)b->keylen, b->key);
	}
	if (b->nwaiters > 0 && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ", %zu waiting",
		    b->nwaiters);
	return buf;
}

/* Who owns c's locks, in a refusal's text. */
static const char *
cmd_who(const struct conn *c)
{
	return conn_channel(c) != 0 ? "channel" : "connection";
}

/* A refused or ended LOCK, UNLOCK or REFRESH: its ERR line. */
static void
cmd_reply_refusal(struct commands *cmds, struct conn *c,
    const struct be_result *r)
{
	const struct lt_blocker	*why = &r->why;
	char			 b[BLOCKER_MAX];

	switch (r->err) {
	case KL_ERR_LIMIT:
		conn_reply_err(c, r->err, "this %s would hold more than %"
		    PRId64 " locks (max-locks)", cmd_who(c),
		    cmds->cfg->max_locks);
		break;
	case KL_ERR_HELD:
		conn_reply_err(c, r->err, "this %s already holds %.*s",
		    cmd_who(c), (int)why->keylen, why->key);
		break;
	case KL_ERR_NOTHELD:
		conn_reply_err(c, r->err, "%.*s is not held by this %s",
		    (int)why->keylen, why->key, cmd_who(c));
		break;
	case KL_ERR_CONFLICT:
		conn_reply_err(c, r->err, "%.*s is in use with limit=%" PRIu32
		    ", not %" PRIu32, (int)why->keylen, why->key, r->key_limit,
		    r->limit);
		break;
	case KL_ERR_BUSY:
		conn_reply_err(c, r->err, "max_waiters=%" PRId64 " reached: "
		    "%s", r->max_waiters, cmd_blocker(b, sizeof(b), why));
		break;
	case KL_ERR_DEADLOCK:
		conn_reply_err(c, r->err, "waiting would close a cycle: %s",
		    cmd_blocker(b, sizeof(b), why));
		break;
	case KL_ERR_TIMEOUT:
		conn_reply_err(c, r->err, "not granted in time: %s",
		    cmd_blocker(b, sizeof(b), why));
		break;
	case KL_ERR_CANCELLED:
		conn_reply_err(c, r->err, "the wait was withdrawn by CANCEL");
		break;
	case KL_ERR_SHUTDOWN:
		conn_reply_err(c, r->err, "the server is stopping");
		break;
	case KL_ERR_BACKEND:
		conn_reply_err(c, r->err, "%s", r->text != NULL ? r->text :
		    "the backend cannot be reached");
		break;
	default:
		conn_reply_err(c, r->err, "%s", cmd_blocker(b, sizeof(b),
		    why));
		break;
	}
}

/* A lock operation that did not succeed: out of line, so that the
 * handlers keep no register for it. */
static void __attribute__((noinline))
cmd_reply_failed(struct commands *cmds, struct conn *c,
    const struct be_result *r)
{
	if (r->err == KL_ERR_NOMEM)
		conn_close_nomem(c, r->op == BE_LOCK ? "a lock request" :
		    "a lock operation");
	else
		cmd_reply_refusal(cmds, c, r);
}

/* Every lock operation's reply, now or when the backend completes it. */
static inline void
cmd_reply(struct commands *cmds, struct conn *c, const struct be_result *r)
{
	if (r->err == KL_OK)
		conn_reply_u64(c, r->value);
	else
		cmd_reply_failed(cmds, c, r);
}

/* BE_PENDING keeps c's request open until commands_done(). */
static void
cmd_finish(struct commands *cmds, struct conn *c, enum be_status st,
    const struct be_result *r)
{
	if (st == BE_PENDING)
		conn_pend(c, false, -1, 0);
	else
		cmd_reply(cmds, c, r);
}

/* ---- lock handlers ---- */

/*
 * The effective timeout of a LOCK: < 0 waits forever, 0 does not wait.
 * false: over max-timeout, and answered LIMIT.
 */
static bool
cmd_timeout(struct commands *cmds, struct conn *c, const struct request *req,
    int64_t *timeout)
{
	const struct config	*cfg = cmds->cfg;

	if (req->cmd == CMD_TRYLOCK)
		*timeout = 0;
	else if (req->opts & OPT_TIMEOUT)
		*timeout = (int64_t)req->timeout_ms;
	else {
		*timeout = cmds->lock_timeout;	/* within max-timeout */
		return true;
	}
	if (cfg->max_timeout == KL_NONE ||
	    (*timeout >= 0 && *timeout <= cfg->max_timeout))
		return true;
	if (*timeout < 0) {
		*timeout = cfg->max_timeout;
		return true;
	}
	conn_reply_err(c, KL_ERR_LIMIT, "timeout %" PRId64 " ms is over the "
	    "server's max-timeout of %" PRId64 " ms", *timeout,
	    cfg->max_timeout);
	return false;
}

/* max-waiters is a ceiling no request raises (review M9). */
static int64_t
cmd_max_waiters(const struct config *cfg, int64_t n)
{
	if (cfg->max_waiters != KL_NONE && (n == KL_NONE ||
	    n > cfg->max_waiters))
		return cfg->max_waiters;
	return n;
}

static void __attribute__((noinline))
cmd_table_full(struct commands *cmds, struct conn *c)
{
	conn_reply_err(c, KL_ERR_LIMIT, "the lock table and channels use %"
	    PRIu64 " bytes, max-table-bytes is %" PRId64 ": no LOCK until "
	    "releases free some", cmds->table->bytes +
	    cmds->st->channel_bytes, cmds->cfg->max_table_bytes);
}

/* A LOCK on channel c of a session's connection: the backend makes the
 * channel's owner the session's (keylockd-protocol(7), CHANNELS: a
 * session covers every channel). false: refused, and answered. */
static bool __attribute__((noinline))
cmd_session_channel(struct commands *cmds, struct conn *c)
{
	struct backend	*be = cmds->be;
	struct conn	*root = session_conn(conn_session(c));
	const char	*text = "no session";
	enum kl_err	 err = KL_ERR_SESSION;

	if (root != NULL)
		err = be->ops->session_channel(be, conn_owner(root),
		    conn_owner(c), conn_channel(c), &text);
	if (err == KL_OK)
		return true;
	conn_reply_err(c, err, "%s", text);
	return false;
}

static void
cmd_lock(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct backend		*be = cmds->be;
	uint64_t		 now = kl_now_ms();
	struct lt_acquire	 a;
	struct be_result	 r;
	int64_t			 timeout;

	if (!cmd_timeout(cmds, c, req, &timeout))
		return;
	if (conn_channel(c) != 0 && be->ops->session_channel != NULL &&
	    conn_session(c) != NULL && !cmd_session_channel(cmds, c))
		return;
	if (cmds->table->bytes + cmds->st->channel_bytes >=
	    cmds->table_bytes_max) {
		cmd_table_full(cmds, c);
		return;
	}
	a.keys = req->args;
	a.keylens = req->arglens;
	a.nkeys = req->nargs;
	a.mode = req->shared ? LT_SHARED : LT_EXCLUSIVE;
	a.limit = req->limit;
	a.try = timeout == 0;
	a.max_waiters = (req->opts & OPT_MAX_WAITERS) ?
	    cmd_max_waiters(cmds->cfg, (int64_t)req->max_waiters) :
	    cmds->lock_max_waiters;
	a.ttl_ms = (req->opts & OPT_TTL) ? req->ttl_ms : 0;
	a.max_holds = (size_t)cmds->cfg->max_locks;
	a.timeout_ms = timeout > 0 ? (uint64_t)timeout : 0;
	if (be->ops->acquire(be, conn_owner(c), &a, now, &r) == BE_PENDING)
		conn_pend(c, true, timeout, now);
	else
		cmd_reply(cmds, c, &r);
}

static void
cmd_unlock(struct commands *cmds, struct conn *c, const struct request *req)
{
	uint64_t		 now = kl_now_ms();
	struct backend		*be = cmds->be;
	struct be_result	 r;

	cmd_finish(cmds, c, be->ops->release(be, conn_owner(c), req->args,
	    req->arglens, req->nargs, now, &r), &r);
}

static void
cmd_unlockall(struct commands *cmds, struct conn *c,
    const struct request *req)
{
	struct backend		*be = cmds->be;
	struct be_result	 r;

	cmd_finish(cmds, c, be->ops->release_owner(be, conn_owner(c),
	    kl_now_ms(), &r), &r);
}

static void
cmd_refresh(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct backend		*be = cmds->be;
	struct be_result	 r;

	cmd_finish(cmds, c, be->ops->refresh(be, conn_owner(c), req->args,
	    req->arglens, req->nargs, req->ttl_ms, kl_now_ms(), &r), &r);
}

/* In its turn: 1 if it was read ahead and withdrew the waiting LOCK
 * (keylockd-protocol(7), CANCEL), else 0. */
static void
cmd_cancel(struct commands *cmds, struct conn *c, const struct request *req)
{
	conn_reply_u64(c, conn_cancel_result(c));
}

/* ---- other handlers ---- */

/*
 * Read your own writes: a read of the table (STATS, INFO, CLIENTS) and
 * QUIT's OK wait until the table has applied every release answered
 * before them (backend etcd answers UNLOCK once its deletes are queued).
 * true: go on now; false: c's request waits (conn_pend()), and
 * commands_done() brings BE_READ to cmd_read_go(), or c is closed.
 */
static bool
cmd_read_barrier(struct commands *cmds, struct conn *c,
    const struct request *req)
{
	struct backend		*be = cmds->be;
	struct be_result	 r;

	if (be->ops->read_barrier == NULL)
		return true;
	if (be->ops->read_barrier(be, conn_owner(c), (uint64_t)req->cmd,
	    req->nargs > 0 ? req->args[0] : NULL, req->nargs > 0 ?
	    req->arglens[0] : 0, &r) == BE_PENDING) {
		conn_pend(c, false, -1, 0);
		return false;
	}
	if (r.err == KL_ERR_NOMEM) {
		conn_close_nomem(c, "a read");
		return false;
	}
	return true;
}

/* A JSON reply, or ERR LIMIT if it alone would pass max-output: a
 * client is never closed for one reply it asked for (security review
 * M5). */
static void
cmd_json_reply(struct commands *cmds, struct conn *c, char *json)
{
	size_t	n;

	if (json == NULL) {
		conn_close_nomem(c, "JSON");
		return;
	}
	if ((n = strlen(json) + 4) > (size_t)cmds->cfg->max_output)
		conn_reply_err(c, KL_ERR_LIMIT, "reply too large: %zu bytes, "
		    "max-output is %" PRId64, n, cmds->cfg->max_output);
	else
		conn_reply_ok_str(c, json);
	free(json);
}

struct cmd_keys_of {
	const struct user	*u;
};

static bool
cmd_user_may_use(void *arg, const char *key, size_t len)
{
	const struct cmd_keys_of	*k = arg;

	return user_may_use(k->u, key, len);
}

/* A user sees the counters, and only its own keys among hot_keys
 * (keylockd-protocol(7), ACCESS CONTROL). */
static void
cmd_stats(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct cmd_keys_of	 k = { conn_user(c) };
	bool			 all = k.u == NULL || user_has_all_keys(k.u);

	cmd_json_reply(cmds, c, stats_to_json_keys(cmds->st,
	    backend_table(cmds->be), kl_now_ms(), PACKAGE_VERSION,
	    backend_name(cmds->be), all ? NULL : cmd_user_may_use, &k));
}

static void
cmd_info(struct commands *cmds, struct conn *c, const struct request *req)
{
	cmd_json_reply(cmds, c, stats_info_json(backend_table(cmds->be),
	    req->args[0], req->arglens[0], kl_now_ms(), cmd_owner_name,
	    KL_INFO_LIST_MAX));
}

static void
cmd_name(struct commands *cmds, struct conn *c, const struct request *req)
{
	if (!conn_set_name(c, req->args[0], req->arglens[0])) {
		conn_close_nomem(c, "a name");
		return;
	}
	/* backend etcd: a session's NAME goes into its record too, for
	 * other front ends and a RESUME through one of them */
	if (conn_session(c) != NULL && cmds->be->ops->session_note != NULL)
		cmds->be->ops->session_note(cmds->be, conn_owner(c),
		    conn_name(c), false);
	conn_reply_ok(c, "%s", "");
}

/* Compares in time that depends only on the secret's length. */
static bool
cmd_secret_matches(const struct cmd_secret *sec, const char *given,
    size_t glen)
{
	unsigned char	diff;

	if (sec->s == NULL)
		return false;
	diff = (unsigned char)(sec->len != glen);
	for (size_t i = 0; i < sec->len; i++)
		diff |= (unsigned char)(sec->s[i] ^ (i < glen ? given[i] : 0));
	return diff == 0;
}

/* Who AUTH makes c: `AUTH user secret` a user of the configuration,
 * `AUTH secret` the version 1 client or operator secret. NULL: no one. */
static const struct user *
cmd_auth_who(struct commands *cmds, struct conn *c, const struct request *req)
{
	const char	*given = req->args[req->nargs - 1];
	size_t		 glen = req->arglens[req->nargs - 1];
	bool		 client, admin;

	if (req->nargs == 2)
		return users_auth(cmds->users, req->args[0], req->arglens[0],
		    given, glen);
	client = cmd_secret_matches(&cmds->client, given, glen);
	admin = cmd_secret_matches(&cmds->admin, given, glen);
	/* Version 1: the client secret after the operator's keeps the
	 * operator's rights. */
	if (admin || (client && conn_is_authed(c) &&
	    conn_user(c) == users_operator_secret))
		return users_operator_secret;
	return client ? users_client_secret : NULL;
}

/*
 * Whether AUTH as u would hand c's session to another user: a user name
 * other than the session's. The secrets of version 1 are no user (name
 * NULL), as for RESUME. Without a session an AUTH replaces the
 * connection's identity whatever it holds or waits for (PROTOCOL.md,
 * AUTH: OK or ERR AUTH; keylockd-protocol(7), AUTH).
 */
static bool
cmd_auth_moves(struct conn *c, const struct user *u)
{
	const char	*was, *now = user_name(u);

	if (conn_session(c) == NULL)
		return false;
	was = session_user(conn_session(c));
	return was == NULL ? now != NULL : now == NULL || strcmp(was, now) != 0;
}

/* The operator's secret also counts as AUTH for every other command
 * (keylockd-protocol(7), Operator commands). A user's AUTH replaces the
 * connection's identity, and with it the keys it may use; not while its
 * session would pass to another user. */
static void
cmd_auth(struct commands *cmds, struct conn *c, const struct request *req)
{
	const struct user	*u;
	uint64_t		 now;

	if ((u = cmd_auth_who(cmds, c, req)) != NULL &&
	    cmd_auth_moves(c, u)) {
		conn_reply_err(c, KL_ERR_SESSION, "this connection has a "
		    "session of another user: AUTH as another user on a "
		    "connection without one");
		return;
	}
	if (u != NULL) {
		conn_set_user(c, u);
		conn_set_auth(c, true, user_is_operator(u));
		if (user_name(u) != NULL)
			log_info("client %" PRIu64 " from %s: AUTH as user "
			    "%s%s", conn_id(c), conn_peer(c), user_name(u),
			    user_is_operator(u) ? " (an operator)" : "");
		else if (u == users_operator_secret)
			log_info("client %" PRIu64 " from %s: AUTH as the "
			    "operator", conn_id(c), conn_peer(c));
		conn_reply_ok(c, "%s", "");
		return;
	}
	cmds->st->auth_failures++;
	now = kl_now_ms();
	if (now - cmds->auth_log_ms >= KL_WARN_INTERVAL_MS) {
		log_warnx("client %" PRIu64 " from %s: AUTH failed (%" PRIu64
		    " failures so far)", conn_id(c), conn_peer(c),
		    cmds->st->auth_failures);
		cmds->auth_log_ms = now;
	} else
		log_debug("client %" PRIu64 " from %s: AUTH failed",
		    conn_id(c), conn_peer(c));
	if (cmds->client.s == NULL && cmds->admin.s == NULL &&
	    users_count(cmds->users) == 0) {
		conn_reply_err(c, KL_ERR_AUTH, "no secret is configured");
	} else if (conn_auth_failed(c) >= KL_AUTH_FAILURES_MAX) {
		/* Guessing costs a connection every few tries (security
		 * review M2). */
		log_info("client %" PRIu64 " from %s: %d wrong AUTHs: closing "
		    "it", conn_id(c), conn_peer(c), KL_AUTH_FAILURES_MAX);
		conn_reply_err(c, KL_ERR_AUTH, "wrong %s, %d times: closing "
		    "the connection", req->nargs == 2 ? "user or secret" :
		    "secret", KL_AUTH_FAILURES_MAX);
		conn_quit(c);
	} else
		conn_reply_err(c, KL_ERR_AUTH, "wrong %s", req->nargs == 2 ?
		    "user or secret" : "secret");
}

/* The owners of a connection's or a detached session's channels besides
 * 0, by channel number: RESUME's reply, CLIENTS. */
struct cmd_chans {
	const struct lt_owner	**list;
	size_t			  n;
};

static bool
cmd_chans_add(void *arg, struct conn *ch)
{
	struct cmd_chans	*cc = arg;

	if (conn_channel(ch) != 0)
		cc->list[cc->n++] = conn_owner(ch);
	return true;
}

static int
cmd_chans_cmp(const void *a, const void *b)
{
	uint32_t	x = owner_channel(*(const struct lt_owner *const *)a);
	uint32_t	y = owner_channel(*(const struct lt_owner *const *)b);

	return x < y ? -1 : x > y;
}

/* cc for c's channels, or for s's (c NULL). false: out of memory. */
static bool
cmd_chans_collect(struct cmd_chans *cc, struct conn *c,
    const struct session *s)
{
	size_t	n = c != NULL ? conn_nchannels(c) : session_nchannels(s);

	cc->n = 0;
	if ((cc->list = kl_calloc(n + 1, sizeof(*cc->list))) == NULL)
		return false;
	if (c != NULL)
		conn_channels_walk(c, cmd_chans_add, cc);
	else
		for (size_t i = 0; i < n; i++)
			cc->list[cc->n++] = session_channel_owner(s, i);
	if (cc->n > 1)
		qsort(cc->list, cc->n, sizeof(*cc->list), cmd_chans_cmp);
	return true;
}

/* ---- operator commands ---- */

static const char *
cmd_transport_name(enum conn_transport t)
{
	return t == CONN_UNIX ? "unix" : t == CONN_TLS ? "tls" : "tcp";
}

struct cmd_clients {
	struct stats_clients	*list;
	uint64_t		 now;
};

/* sc into the list, with the waits of its channels (c's, or s's). */
static bool
cmd_clients_put(struct cmd_clients *cl, struct stats_client *sc,
    struct conn *c, const struct session *s)
{
	struct cmd_chans	cc;

	if (!cmd_chans_collect(&cc, c, s)) {
		stats_clients_nomem(cl->list);
		return false;
	}
	sc->chans = cc.list;
	sc->nchans = cc.n;
	stats_clients_add(cl->list, sc, cl->now);
	kl_free(cc.list);
	return true;
}

static bool
cmd_clients_add(void *arg, struct conn *c)
{
	struct cmd_clients	*cl = arg;
	struct stats_client	 sc;

	sc.id = conn_id(c);
	sc.name = conn_name(c);
	sc.user = conn_user(c) != NULL ? user_name(conn_user(c)) : NULL;
	sc.uid = sc.pid = -1;
	conn_peer_cred(c, &sc.uid, &sc.pid);
	sc.transport = cmd_transport_name(conn_transport(c));
	sc.peer = conn_peer(c);
	sc.age_ms = cl->now - conn_since_ms(c);
	sc.detached_ms = -1;
	sc.channels = conn_nchannels(c);
	sc.held = conn_nholds(c);
	sc.owner = conn_owner(c);
	return cmd_clients_put(cl, &sc, c, NULL);
}

/* keylockd-protocol(7), SESSIONS: Seen by operators. */
static bool
cmd_clients_add_detached(void *arg, const struct session *s,
    struct lt_owner *owner, uint64_t detached_ms, const char *peer)
{
	struct cmd_clients	*cl = arg;
	struct stats_client	 sc;

	sc.id = session_client(s);
	sc.name = session_name(s);
	sc.user = session_user(s);
	sc.uid = sc.pid = -1;
	sc.transport = cmd_transport_name(
	    (enum conn_transport)session_transport(s));
	sc.peer = peer;
	sc.age_ms = cl->now - session_since_ms(s);
	sc.detached_ms = (int64_t)detached_ms;
	sc.channels = (uint32_t)session_nchannels(s);
	sc.held = session_nholds(s);
	sc.owner = owner;
	return cmd_clients_put(cl, &sc, NULL, s);
}

static void
cmd_clients(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct cmd_clients	cl;

	cl.now = kl_now_ms();
	if ((cl.list = stats_clients_new(KL_INFO_LIST_MAX,
	    (size_t)cmds->cfg->max_output / 2)) == NULL) {
		conn_close_nomem(c, "CLIENTS");
		return;
	}
	conns_walk(conn_set(c), cmd_clients_add, &cl);
	sessions_walk_detached(conns_sessions(conn_set(c)),
	    cmd_clients_add_detached, &cl, cl.now);
	cmd_json_reply(cmds, c, stats_clients_json(cl.list));
}

static void
cmd_kill(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct conn	*target;
	uint64_t	 id;
	char		 why[KL_NAME_MAX + 64];
	const char	*name = conn_name(c);

	struct session	*s;

	if (!kl_parse_u64(req->args[0], req->arglens[0], 0, UINT64_MAX, &id)) {
		conn_reply_u64(c, 0);
		return;
	}
	snprintf(why, sizeof(why), "killed by client %" PRIu64 "%s%s%s",
	    conn_id(c), name != NULL ? " (" : "", name != NULL ? name : "",
	    name != NULL ? ")" : "");
	if ((target = conns_find(conn_set(c), id)) == NULL) {
		/* A detached session's id ends it (keylockd-protocol(7),
		 * SESSIONS: Ending a session). */
		if ((s = sessions_find_client(conns_sessions(conn_set(c)),
		    id)) == NULL) {
			conn_reply_u64(c, 0);
			return;
		}
		log_info("client %" PRIu64 " (%s): detached session: KILL by "
		    "client %" PRIu64 " from %s", id, session_name(s) != NULL ?
		    session_name(s) : "-", conn_id(c), conn_peer(c));
		session_end(s, why);
		conn_reply_u64(c, 1);
		return;
	}
	if ((s = conn_session(target)) != NULL)
		session_end(s, why);
	log_info("client %" PRIu64 " (%s) from %s: KILL by client %" PRIu64
	    " from %s", id, conn_name(target) != NULL ? conn_name(target) :
	    "-", conn_peer(target), conn_id(c), conn_peer(c));
	conn_reply_u64(c, 1);
	if (target == c)
		conn_quit(c);	/* after its OK 1 */
	else
		conn_close(target, why);
}

/* ---- sessions (keylockd-protocol(7), SESSIONS) ---- */

/* A backend whose sessions cross front ends (etcd) says so with
 * session_open; backend local's are the daemon's alone. */
static bool
cmd_sessions_available(struct commands *cmds, struct conn *c)
{
	if (strcmp(backend_name(cmds->be), "local") == 0 ||
	    cmds->be->ops->session_open != NULL)
		return true;
	conn_reply_err(c, KL_ERR_BACKEND, "sessions are not available with "
	    "backend %s yet: nothing was changed", backend_name(cmds->be));
	return false;
}

static bool	cmd_session_backend(struct commands *, struct conn *,
		    struct session *, uint64_t);

static void
cmd_session(struct commands *cmds, struct conn *c, const struct request *req)
{
	const struct config	*cfg = cmds->cfg;
	const struct stats	*st = cmds->st;
	uint64_t		 grace = (req->opts & OPT_GRACE) ?
	    req->grace_ms : (uint64_t)cfg->session_grace;
	char			 id[SESSION_ID_LEN + 1];
	struct session		*s;
	bool			 nomem;

	if (!cmd_sessions_available(cmds, c))
		return;
	if (conn_session(c) != NULL) {
		conn_reply_err(c, KL_ERR_SESSION, "this connection already "
		    "has a session");
		return;
	}
	if (grace > (uint64_t)cfg->session_grace_max) {
		conn_reply_err(c, KL_ERR_LIMIT, "grace is over "
		    "session-grace-max %" PRId64, cfg->session_grace_max);
		return;
	}
	/* A detached session keeps its connection's slot (keylockd-
	 * protocol(7), SESSIONS: Limits); this connection has one. */
	if (st->clients + st->sessions_detached >
	    (uint64_t)cfg->max_clients) {
		conn_reply_err(c, KL_ERR_LIMIT, "%" PRIu64 " connections and "
		    "%" PRIu64 " detached sessions: no room for another "
		    "session (max-clients %" PRId64 ")", st->clients,
		    st->sessions_detached, cfg->max_clients);
		return;
	}
	if ((s = session_open(conns_sessions(conn_set(c)), c, grace, id,
	    &nomem)) == NULL) {
		if (nomem)
			conn_close_nomem(c, "a session");
		else
			conn_reply_err(c, KL_ERR_SESSION, "no session: the "
			    "kernel gave no random bytes for its ID");
		return;
	}
	session_set_user(s, conn_user(c) != NULL ?
	    user_name(conn_user(c)) : NULL);
	conn_set_session(c, s);
	if (cmds->be->ops->session_open != NULL &&
	    cmd_session_backend(cmds, c, s, grace))
		return;		/* pending, or refused */
	conn_reply_ok_str(c, id);
}

/* SESSION or RESUME refused by the backend: s is forgotten. */
static void
cmd_session_refused(struct conn *c, struct session *s,
    const struct be_result *r)
{
	session_discard(s);
	if (r->err == KL_ERR_NOMEM)
		conn_close_nomem(c, r->op == BE_SESSION ? "a session" :
		    "RESUME");
	else if (r->err == KL_ERR_GONE)
		conn_reply_err(c, KL_ERR_GONE, "no such session: it ended "
		    "and its locks were released");
	else
		conn_reply_err(c, r->err, "%s", r->text != NULL ? r->text :
		    "the backend cannot be reached");
}

/* The channels of a connection but 0, for SESSION through backend etcd. */
struct cmd_be_chans {
	struct be_chan	*list;
	size_t		 n, cap;
};

static bool
cmd_be_chans_add(void *arg, struct conn *ch)
{
	struct cmd_be_chans *bc = arg;

	if (conn_channel(ch) != 0 && bc->n < bc->cap) {
		bc->list[bc->n].n = conn_channel(ch);
		bc->list[bc->n++].owner = conn_owner(ch);
	}
	return true;
}

/* backend etcd: the session's lease and record, its holds and its
 * channels' holds and waits under it. true: pending, or answered with an
 * error. */
static bool
cmd_session_backend(struct commands *cmds, struct conn *c, struct session *s,
    uint64_t grace)
{
	struct backend		*be = cmds->be;
	struct be_result	 r;
	struct cmd_be_chans	 bc;
	enum be_status		 st;
	char			 hash[SESSION_HASH_HEX + 1], err[256];

	memset(&bc, 0, sizeof(bc));
	bc.cap = conn_nchannels(c);
	if (bc.cap > 0 && (bc.list = kl_calloc(bc.cap,
	    sizeof(*bc.list))) == NULL) {
		memset(&r, 0, sizeof(r));
		r.op = BE_SESSION;
		r.err = KL_ERR_NOMEM;
		cmd_session_refused(c, s, &r);
		return true;
	}
	conn_channels_walk(c, cmd_be_chans_add, &bc);
	if (!session_hash(s, hash, err, sizeof(err))) {
		kl_free(bc.list);
		memset(&r, 0, sizeof(r));
		r.op = BE_SESSION;
		r.err = KL_ERR_BACKEND;
		r.text = err;
		cmd_session_refused(c, s, &r);
		return true;
	}
	st = be->ops->session_open(be, conn_owner(c), bc.list, bc.n, hash,
	    grace, session_user(s), &r);
	kl_free(bc.list);
	if (st == BE_PENDING) {
		conn_pend(c, false, -1, 0);
		return true;
	}
	if (r.err == KL_OK)
		return false;
	cmd_session_refused(c, s, &r);
	return true;
}

static bool	cmd_resume_reply(struct commands *, struct conn *,
		    const struct lt_owner *, const char *, size_t, uint64_t);

/* The backend's answer to SESSION (BE_SESSION) or RESUME (BE_RESUME). */
static void
cmd_session_done(struct commands *cmds, struct conn *c,
    const struct be_result *r)
{
	struct session	*s = conn_session(c);
	char		 id[SESSION_ID_LEN + 1];
	bool		 waiting;

	if (s == NULL) {	/* KILLed meanwhile: its end says so */
		if (r->op == BE_RESUME && r->err == KL_OK) {
			cmds->be->ops->owner_free(cmds->be, r->owner,
			    kl_now_ms());
			for (size_t i = 0; i < r->nchans; i++)
				cmds->be->ops->owner_free(cmds->be,
				    r->chans[i].owner, kl_now_ms());
		}
		conn_reply_err(c, KL_ERR_GONE, "the session ended");
		return;
	}
	if (r->err != KL_OK) {
		cmd_session_refused(c, s, r);
		return;
	}
	if (r->op == BE_SESSION) {
		session_id(s, id);
		conn_reply_ok_str(c, id);
		explicit_bzero(id, sizeof(id));
		return;
	}
	session_resumed(s, r->value, r->grace_ms);
	/* the session's NAME, for a connection that gave none (keylockd-
	 * protocol(7), SESSIONS: Identity); no memory: none */
	if (r->name != NULL && conn_name(c) == NULL)
		(void)conn_set_name(c, r->name, strlen(r->name));
	if (conn_adopt_session(c, r->owner, r->chans, r->nchans,
	    &waiting) == NULL)
		return;		/* closed: no memory */
	session_id(s, id);
	cmd_resume_reply(cmds, c, r->owner, id, SESSION_ID_LEN, r->grace_ms);
	explicit_bzero(id, sizeof(id));
}

static bool
cmd_session_is_mine(struct conn *c, const struct session *s)
{
	const char	*mine = conn_user(c) != NULL ?
	    user_name(conn_user(c)) : NULL;
	const char	*its = session_user(s);

	return mine == NULL ? its == NULL : its != NULL &&
	    strcmp(mine, its) == 0;
}

/* backend etcd: RESUME of a session this front end does not have; the
 * user check is the backend's (the record names its user). */
static void
cmd_resume_backend(struct commands *cmds, struct conn *c,
    const struct request *req)
{
	struct backend		*be = cmds->be;
	struct session		*s;
	struct be_result	 r;
	char			 hash[SESSION_HASH_HEX + 1], err[256];
	bool			 nomem;

	if ((s = session_resuming(conns_sessions(conn_set(c)), c,
	    req->args[0], req->arglens[0], &nomem)) == NULL) {
		if (nomem)
			conn_close_nomem(c, "RESUME");
		else
			conn_reply_err(c, KL_ERR_GONE, "no such session: it "
			    "ended and its locks were released");
		return;
	}
	conn_set_session(c, s);
	session_set_user(s, conn_user(c) != NULL ?
	    user_name(conn_user(c)) : NULL);
	memset(&r, 0, sizeof(r));
	r.op = BE_RESUME;
	if (!session_hash(s, hash, err, sizeof(err))) {
		r.err = KL_ERR_BACKEND;
		r.text = err;
	} else if (be->ops->session_resume(be, conn_owner(c), hash,
	    session_user(s), &r) == BE_PENDING) {
		conn_pend(c, false, -1, 0);
		return;
	}
	cmd_session_refused(c, s, &r);
}

/* RESUME's OK: the session's holds and wait, channel 0's (o's) and
 * every other channel's of c. false: c closed, out of memory. */
static bool
cmd_resume_reply(struct commands *cmds, struct conn *c,
    const struct lt_owner *o, const char *id, size_t idlen, uint64_t grace)
{
	struct cmd_chans	 cc;
	char			*json;

	if (!cmd_chans_collect(&cc, c, NULL)) {
		conn_close_nomem(c, "RESUME");
		return false;
	}
	json = stats_resume_json(backend_table(cmds->be), o, id, idlen, grace,
	    kl_now_ms(), cc.list, cc.n);
	kl_free(cc.list);
	cmd_json_reply(cmds, c, json);
	return true;
}

static void
cmd_resume(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct lt_owner		*o = conn_owner(c);
	struct session		*s;
	bool			 waiting;

	if (!cmd_sessions_available(cmds, c))
		return;
	if (conn_session(c) != NULL || locktable_owner_nholds(o) > 0 ||
	    locktable_owner_is_waiting(o) || conn_nchannels(c) > 0) {
		conn_reply_err(c, KL_ERR_SESSION, "RESUME needs a connection "
		    "without a session, locks, waits or channels in use");
		return;
	}
	/* Another user's session is as unknown as one that never was
	 * (keylockd-protocol(7), ACCESS CONTROL). */
	s = sessions_find(conns_sessions(conn_set(c)), req->args[0],
	    req->arglens[0]);
	if (s != NULL && session_is_resuming(s)) {
		conn_reply_err(c, KL_ERR_BACKEND, "a RESUME of this session "
		    "is under way on this front end; try again");
		return;
	}
	if (s == NULL && cmds->be->ops->session_resume != NULL) {
		cmd_resume_backend(cmds, c, req);
		return;
	}
	if (s == NULL || !cmd_session_is_mine(c, s)) {
		conn_reply_err(c, KL_ERR_GONE, "no such session: it ended "
		    "and its locks were released");
		return;
	}
	o = conn_take_session(c, s, &waiting);
	/* backend etcd: attached again, here */
	if (cmds->be->ops->session_note != NULL)
		cmds->be->ops->session_note(cmds->be, o, conn_name(c), false);
	if (cmd_resume_reply(cmds, c, o, req->args[0], req->arglens[0],
	    session_grace(s)))
		conn_resume_wait(c);
}

static void
cmd_ping(struct commands *cmds, struct conn *c, const struct request *req)
{
	conn_reply_ok(c, "PONG");
}

/*
 * Over a replicated backend the locks go before the OK: the release is
 * committed first, so a client that read the OK knows every lock of the
 * connection is free (keylockd-protocol(7), QUIT). Whatever the release's
 * outcome, the reply is OK and the connection closes; closing releases
 * what is left.
 */
static void
cmd_quit(struct commands *cmds, struct conn *c, const struct request *req)
{
	struct backend		*be = cmds->be;
	struct be_result	 r;

	if (conn_session(c) != NULL)
		session_end(conn_session(c), "QUIT");
	/* and, where a release is answered before it is applied, QUIT
	 * waits for it (cmd_read_barrier()) */
	if (be->ops->quit_releases && (be->ops->release_owner(be,
	    conn_owner(c), kl_now_ms(), &r) == BE_PENDING ||
	    !cmd_read_barrier(cmds, c, req))) {
		conn_pend(c, false, -1, 0);
		conn_quit(c);
		return;
	}
	conn_reply_ok(c, "%s", "");
	conn_quit(c);
}

/*
 * keylockd-protocol(7), Live upgrade. The reply comes later: OK from the
 * new process, or ERR UPGRADE from this one when the new one fails
 * (commands_upgrade_failed()).
 */
static void
cmd_upgrade(struct commands *cmds, struct conn *c, const struct request *req)
{
	char	why[256];

	snprintf(why, sizeof(why), "live upgrade is not available here");
	if (cmds->upgrade == NULL ||
	    !cmds->upgrade(cmds->upgrade_arg, c, why, sizeof(why))) {
		conn_reply_err(c, KL_ERR_UPGRADE, "%s", why);
		return;
	}
	conn_pend(c, false, -1, 0);
}

void
commands_set_upgrade(struct commands *cmds,
    bool (*fn)(void *, struct conn *, char *, size_t), void *arg)
{
	cmds->upgrade = fn;
	cmds->upgrade_arg = arg;
}

void
commands_upgrade_failed(struct commands *cmds, struct conn *c,
    const char *why)
{
	(void)cmds;
	conn_reply_err(c, KL_ERR_UPGRADE, "%s", why);
	conn_complete(c, KL_ERR_UPGRADE);
}

/*
 * The reads (STATS, INFO, CLIENTS, RESUME): after the backend's read
 * barrier, now or in cmd_read_go().
 */
static void
cmd_read_now(struct commands *cmds, struct conn *c, const struct request *req)
{
	switch (req->cmd) {
	case CMD_STATS:
		cmd_stats(cmds, c, req);
		break;
	case CMD_INFO:
		cmd_info(cmds, c, req);
		break;
	case CMD_CLIENTS:
		cmd_clients(cmds, c, req);
		break;
	case CMD_RESUME:
		/* its "held" says what the answered UNLOCKs left */
		cmd_resume(cmds, c, req);
		break;
	default:
		break;
	}
}

static void
cmd_read(struct commands *cmds, struct conn *c, const struct request *req)
{
	if (cmd_read_barrier(cmds, c, req))
		cmd_read_now(cmds, c, req);
}

/*
 * Indexed by enum cmd_id. The handler is called through its row, with
 * no frame on the way (commands_execute()), so that every handler is one
 * function of its own; LOCK's and UNLOCK's are reached in one jump.
 */
static const struct cmd_entry cmd_table[CMD__COUNT] = {
	[CMD_AUTH]	= { CMD_NO_AUTH | CMD_CONN,	cmd_auth },
	[CMD_CANCEL]	= { 0,				cmd_cancel },
	[CMD_CLIENTS]	= { CMD_ADMIN | CMD_CONN,	cmd_read },
	[CMD_INFO]	= { CMD_PERM,			cmd_read },
	[CMD_KILL]	= { CMD_ADMIN | CMD_CONN,	cmd_kill },
	[CMD_LOCK]	= { CMD_KEYS | CMD_PERM,	cmd_lock },
	[CMD_NAME]	= { CMD_CONN,			cmd_name },
	[CMD_PING]	= { CMD_NO_AUTH,		cmd_ping },
	[CMD_QUIT]	= { CMD_NO_AUTH | CMD_CONN,	cmd_quit },
	[CMD_REFRESH]	= { CMD_KEYS | CMD_PERM,	cmd_refresh },
	[CMD_RESUME]	= { CMD_CONN,			cmd_read },
	[CMD_SESSION]	= { CMD_CONN,			cmd_session },
	[CMD_STATS]	= { 0,				cmd_read },
	[CMD_TRYLOCK]	= { CMD_KEYS | CMD_PERM,	cmd_lock },
	[CMD_UNLOCK]	= { CMD_KEYS | CMD_PERM,	cmd_unlock },
	[CMD_UNLOCKALL]	= { 0,				cmd_unlockall },
	[CMD_UPGRADE]	= { CMD_ADMIN | CMD_CONN,	cmd_upgrade },
};

struct cmd_span {
	const char	*p;
	size_t		 len;
};

static int
cmd_span_order(const void *a, const void *b)
{
	const struct cmd_span	*x = a, *y = b;

	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->p, y->p, x->len);
}

/* The distinct keys of req (keylockd-protocol(7), SEMANTICS: duplicate
 * keys in one request count once); only asked past max-keys. The parser
 * stored every argument: nargs <= KL_KEYS_HARD_MAX. */
static size_t __attribute__((noinline))
cmd_distinct_keys(const struct request *req)
{
	struct cmd_span	keys[KL_KEYS_HARD_MAX];
	size_t		n = 0;

	for (size_t i = 0; i < req->nargs; i++) {
		keys[i].p = req->args[i];
		keys[i].len = req->arglens[i];
	}
	qsort(keys, req->nargs, sizeof(keys[0]), cmd_span_order);
	for (size_t i = 0; i < req->nargs; i++)
		n += i == 0 || cmd_span_order(&keys[i - 1], &keys[i]) != 0;
	return n;
}

/* The refusal of a request that failed a shared check: out of line, so
 * that commands_execute() stays a few tests and a call. */
static void __attribute__((noinline))
cmd_refuse(struct commands *cmds, struct conn *c, const struct request *req,
    unsigned flag)
{
	if (flag == CMD_CONN)
		conn_reply_err(c, KL_ERR_SYNTAX, "%s belongs to the "
		    "connection: send it on channel 0, without @",
		    proto_cmd_name(req->cmd));
	else if (flag == CMD_NO_AUTH && conn_user(c) == users_revoked)
		conn_reply_err(c, KL_ERR_AUTH, "authentication required: "
		    "this connection's user or secret changed or is gone");
	else if (flag == CMD_NO_AUTH)
		conn_reply_err(c, KL_ERR_AUTH, "authentication required");
	else if (flag == CMD_ADMIN && conn_is_authed(c) &&
	    conn_user(c) != NULL && user_name(conn_user(c)) != NULL)
		conn_reply_err(c, KL_ERR_NOPERM, "%s is an operator command "
		    "and user %s is not an operator: nothing was changed",
		    proto_cmd_name(req->cmd), user_name(conn_user(c)));
	else if (flag == CMD_ADMIN)
		conn_reply_err(c, KL_ERR_AUTH, "%s is an operator command: "
		    "connect over the unix socket from an operator's uid, or "
		    "AUTH as an operator", proto_cmd_name(req->cmd));
	else
		conn_reply_err(c, KL_ERR_LIMIT, "%zu keys in one request, "
		    "max-keys is %" PRId64, cmd_distinct_keys(req),
		    cmds->cfg->max_keys);
}


/*
 * A client certificate that stands for a user (keylockd.conf(5), user
 * tls-cn=) authenticates its connection at its first request that needs
 * AUTH. false: c stays unauthenticated.
 */
static bool __attribute__((noinline))
cmd_auth_by_cert(struct commands *cmds, struct conn *c)
{
	const struct user	*u;
	char			 cn[256];

	if (conn_transport(c) != CONN_TLS || !users_have_cn(cmds->users) ||
	    conn_user(c) == users_revoked ||
	    !conn_tls_peer_cn(c, cn, sizeof(cn)) ||
	    (u = users_find_cn(cmds->users, cn)) == NULL)
		return false;
	conn_set_user(c, u);
	conn_set_auth(c, true, user_is_operator(u));
	log_info("client %" PRIu64 " from %s: certificate CN %s: user %s",
	    conn_id(c), conn_peer(c), cn, user_name(u));
	return true;
}

/* keylockd-protocol(7), ACCESS CONTROL: over the unix socket, root,
 * keylockd's own uid and operator-uids. */
static bool __attribute__((noinline))
cmd_is_operator(struct commands *cmds, struct conn *c)
{
	int64_t	uid = -1, pid;

	if (conn_is_admin(c))
		return true;
	return conn_transport(c) == CONN_UNIX && conn_peer_cred(c, &uid,
	    &pid) && users_uid_is_operator(cmds->users, (uid_t)uid);
}

/* NOPERM: a key of req that c's user may not use. Answers it. */
static bool __attribute__((noinline))
cmd_noperm(struct commands *cmds, struct conn *c, const struct request *req)
{
	const struct user	*u = conn_user(c);

	if (u == NULL || user_has_all_keys(u))
		return false;
	for (size_t i = 0; i < req->nargs && i < KL_KEYS_HARD_MAX; i++)
		if (!user_may_use(u, req->args[i], req->arglens[i])) {
			conn_reply_err(c, KL_ERR_NOPERM, "%s may not use key "
			    "%.*s: nothing was changed", user_name(u) != NULL ?
			    user_name(u) : "this connection",
			    (int)req->arglens[i], req->args[i]);
			return true;
		}
	return false;
}

/*
 * The shared checks in the protocol's order: AUTH, operator, NOPERM,
 * LIMIT; then the handler. Out of line and reached only for a request
 * that one of them may refuse (cmds->check_from, by cmd_apply()), so
 * that the handler of any other request is reached with no stack frame
 * on the way.
 */
static void __attribute__((noinline))
cmd_execute_checked(struct commands *cmds, struct conn *c,
    const struct request *req)
{
	unsigned	flags = cmd_table[req->cmd].flags;

	if ((flags & CMD_CONN) && conn_channel(c) != 0)
		cmd_refuse(cmds, c, req, CMD_CONN);
	else if (!(flags & CMD_NO_AUTH) && cmds->need_auth &&
	    !conn_is_authed(c) && !cmd_auth_by_cert(cmds, c))
		cmd_refuse(cmds, c, req, CMD_NO_AUTH);
	else if ((flags & CMD_ADMIN) && !cmd_is_operator(cmds, c))
		cmd_refuse(cmds, c, req, CMD_ADMIN);
	else if ((flags & CMD_PERM) && cmds->has_users &&
	    cmd_noperm(cmds, c, req))
		;	/* answered NOPERM */
	else if (req->nargs > KL_KEYS_HARD_MAX)	/* the parser's LIMIT */
		conn_reply_err(c, KL_ERR_LIMIT, "%s", req->why);
	else if ((flags & CMD_KEYS) &&
	    req->nargs > (size_t)cmds->cfg->max_keys &&
	    cmd_distinct_keys(req) > (size_t)cmds->cfg->max_keys)
		cmd_refuse(cmds, c, req, CMD_KEYS);
	else
		cmd_table[req->cmd].run(cmds, c, req);
}

/*
 * LOCK's settings that need no request (cmds->lock_timeout, ...), and
 * whether cmd_execute_checked() has anything to look at, for each
 * command, as the request's argument count that reaches it: 0 (always)
 * for a command of the connection's or the operator's, a server that
 * asks for AUTH or users whose keys are limited; max-keys + 1 for a
 * command of keys; else none. The part of each check that needs no
 * request, once per configuration: after commands_new(), and after a
 * reload in commands_reauth(), when the live settings are the new ones.
 */
static void
cmd_apply(struct commands *cmds)
{
	const struct config	*cfg = cmds->cfg;

	/* config_check() refuses a default-timeout over max-timeout */
	cmds->lock_timeout = cfg->default_timeout;
	if (cfg->max_timeout != KL_NONE && cmds->lock_timeout < 0)
		cmds->lock_timeout = cfg->max_timeout;
	cmds->lock_max_waiters = cmd_max_waiters(cfg,
	    cfg->default_max_waiters);
	cmds->table_bytes_max = cfg->max_table_bytes == KL_NONE ?
	    UINT64_MAX : (uint64_t)cfg->max_table_bytes;
	for (size_t i = 0; i < CMD__COUNT; i++) {
		unsigned	flags = cmd_table[i].flags;

		if ((flags & (CMD_CONN | CMD_ADMIN)) ||
		    (!(flags & CMD_NO_AUTH) && cmds->need_auth) ||
		    ((flags & CMD_PERM) && cmds->has_users))
			cmds->check_from[i] = 0;
		else if (flags & CMD_KEYS)
			cmds->check_from[i] = (size_t)cmds->cfg->max_keys + 1;
		else
			cmds->check_from[i] = SIZE_MAX;
	}
}

void
commands_execute(struct commands *cmds, struct conn *c,
    const struct request *req)
{
	if (req->nargs >= cmds->check_from[req->cmd])
		cmd_execute_checked(cmds, c, req);
	else
		cmd_table[req->cmd].run(cmds, c, req);
}

void
commands_refuse_over(struct commands *cmds, struct conn *c,
    const struct request *req)
{
	cmd_execute_checked(cmds, c, req);
}

/* ---- later completions ---- */

/* A read that waited for cmd_read_barrier(), with its argument back. */
static void
cmd_read_go(struct commands *cmds, struct conn *c, const struct be_result *r)
{
	struct request req;

	memset(&req, 0, sizeof(req));
	req.cmd = (enum cmd_id)r->value;
	req.nargs = r->why.keylen > 0 ? 1 : 0;
	req.args[0] = r->why.key;
	req.arglens[0] = r->why.keylen;
	/* not through cmd_read(): it would wait again */
	cmd_read_now(cmds, c, &req);
}

void
commands_done(struct commands *cmds, struct lt_owner *o,
    const struct be_result *r)
{
	struct conn	*c = owner_conn(o);

	if (c == NULL)
		return;	/* a detached session's: RESUME tells */
	if (r->op == BE_SESSION || r->op == BE_RESUME) {
		cmd_session_done(cmds, c, r);
		conn_complete(c, r->err);
		if (r->op == BE_RESUME && r->err == KL_OK &&
		    conn_session(c) != NULL)
			conn_resume_wait(c);
		return;
	}
	if (conn_is_quitting(c))
		conn_reply_ok(c, "%s", "");	/* QUIT's release */
	else if (r->op == BE_READ)
		cmd_read_go(cmds, c, r);
	else
		cmd_reply(cmds, c, r);
	conn_complete(c, r->err);
}

/* Withdraws c's waiting LOCK for why; replies once it is gone. */
static void
cmd_withdraw(struct commands *cmds, struct conn *c, enum lt_why why)
{
	struct backend		*be = cmds->be;
	struct be_result	 r;

	if (be->ops->withdraw(be, conn_owner(c), why, kl_now_ms(), &r) ==
	    BE_DONE && r.value > 0) {
		cmd_reply(cmds, c, &r);
		conn_complete(c, r.err);
	}
}

void
commands_deadline(struct commands *cmds, struct conn *c)
{
	cmd_withdraw(cmds, c, LT_WHY_TIMEOUT);
}

void
commands_cancel(struct commands *cmds, struct conn *c)
{
	cmd_withdraw(cmds, c, LT_WHY_CANCEL);
}

void
commands_shutdown_wait(struct commands *cmds, struct conn *c)
{
	cmd_withdraw(cmds, c, LT_WHY_SHUTDOWN);
}
