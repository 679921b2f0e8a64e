/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * The commands of keylockd-protocol(7) as blocking calls over one connection:
 * build one request line, send it, read one reply line, turn it into a status.
 * Socket work (addresses, connect, deadlines) lives in keylock_io.c. No global
 * state and no signal handling: the library never touches anything but its
 * handle and its socket, so one handle per thread is safe.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "keylock.h"
#include "keylock_int.h"

#define KEYLOCK_SECRET_MAX	256	/* keylockd-protocol(7), AUTH secret */
#define KEYLOCK_USER_MAX	64	/* and the user of AUTH user secret */
#define KEYLOCK_TOKEN_MAX	INT64_MAX	/* tokens are below 2^63 */
#define KEYLOCK_NUM_MAX		24	/* bytes of " name=N" for a uint64 */

/* Indexed by enum keylock_status for the server's codes. */
static const char *const status_words[] = {
	[KEYLOCK_OK] = "OK",
	[KEYLOCK_ERR_SYNTAX] = "SYNTAX",
	[KEYLOCK_ERR_BADKEY] = "BADKEY",
	[KEYLOCK_ERR_TOOLONG] = "TOOLONG",
	[KEYLOCK_ERR_TIMEOUT] = "TIMEOUT",
	[KEYLOCK_ERR_LOCKED] = "LOCKED",
	[KEYLOCK_ERR_BUSY] = "BUSY",
	[KEYLOCK_ERR_DEADLOCK] = "DEADLOCK",
	[KEYLOCK_ERR_HELD] = "HELD",
	[KEYLOCK_ERR_NOTHELD] = "NOTHELD",
	[KEYLOCK_ERR_CONFLICT] = "CONFLICT",
	[KEYLOCK_ERR_LIMIT] = "LIMIT",
	[KEYLOCK_ERR_AUTH] = "AUTH",
	[KEYLOCK_ERR_SHUTDOWN] = "SHUTDOWN",
	[KEYLOCK_ERR_CANCELLED] = "CANCELLED",
	[KEYLOCK_ERR_BACKEND] = "BACKEND",
	[KEYLOCK_ERR_GONE] = "GONE",
	[KEYLOCK_ERR_SESSION] = "SESSION",
	[KEYLOCK_ERR_NOPERM] = "NOPERM",
	[KEYLOCK_ERR_UPGRADE] = "UPGRADE",
};
#define NSERVER_CODES	(sizeof(status_words) / sizeof(status_words[0]))

static const char *const status_texts[] = {
	[KEYLOCK_OK] = "success",
	[KEYLOCK_ERR_SYNTAX] = "the server did not understand the request",
	[KEYLOCK_ERR_BADKEY] = "a key breaks the key rules",
	[KEYLOCK_ERR_TOOLONG] = "the request line is too long",
	[KEYLOCK_ERR_TIMEOUT] = "the lock was not granted in time",
	[KEYLOCK_ERR_LOCKED] = "a key is not free",
	[KEYLOCK_ERR_BUSY] = "too many requests wait for a key",
	[KEYLOCK_ERR_DEADLOCK] = "waiting would close a deadlock",
	[KEYLOCK_ERR_HELD] = "this connection already holds a key",
	[KEYLOCK_ERR_NOTHELD] = "a key is not held by this connection",
	[KEYLOCK_ERR_CONFLICT] = "the key is in use with another limit",
	[KEYLOCK_ERR_LIMIT] = "a server limit was reached",
	[KEYLOCK_ERR_AUTH] = "authentication is required or failed",
	[KEYLOCK_ERR_SHUTDOWN] = "the server is shutting down",
	[KEYLOCK_ERR_CANCELLED] = "the lock request was cancelled",
	[KEYLOCK_ERR_BACKEND] = "the server cannot reach its lock store",
	[KEYLOCK_ERR_GONE] = "the session ended: its locks were released",
	[KEYLOCK_ERR_NOPERM] = "the server's user may not use one of the keys "
	    "or this command",
	[KEYLOCK_ERR_SESSION] = "the connection already has a session, a "
	    "lock or a wait",
	[KEYLOCK_ERR_UPGRADE] = "the live upgrade failed: the running server "
	    "carries on with everything",
};

static enum keylock_status	 connect_list(struct keylock *, const char *,
				    size_t, size_t, const char *, long);
static enum keylock_status	 connect_one(struct keylock *, const char *,
				    const char *);
static int			 connect_moves_on(const struct keylock *,
				    enum keylock_status);
static enum keylock_status	 secret_check(struct keylock *, const char *,
				    size_t *);
static enum keylock_status	 lock_cancel_reply(struct keylock *);
static enum keylock_status	 lock_build(struct keylock *, const char *,
				    const char *const *, size_t,
				    const struct keylock_lock_opts *, long);
static enum keylock_status	 command(struct keylock *, const char **);
static enum keylock_status	 command_with_arg(struct keylock *, const char *,
		    const char *, size_t);
static enum keylock_status	 build_keys(struct keylock *, const char *,
				    const char *const *, size_t);
static enum keylock_status	 parse_u64(struct keylock *, const char *,
				    uint64_t, uint64_t *);
static enum keylock_status	 parse_json(struct keylock *, const char *,
				    struct json_t **);
static int			 word_is_valid(const char *, size_t);

struct keylock *
keylock_new(void)
{
	struct keylock	*kl;

	if ((kl = calloc(1, sizeof(*kl))) == NULL)
		return NULL;
	kl->fd = -1;
	kl->timeout_ms = KEYLOCK_TIMEOUT_DEFAULT;
	kl->sess_want = KEYLOCK_SESSION_AUTO;
	kl->message = "";
	kl->reply = "";
	/* Sized for the common request and reply, so that LOCK and UNLOCK
	 * do not allocate; bigger ones grow the buffers once. */
	if (kli_buf_reserve(&kl->out, KEYLOCK_BUF_INITIAL) == -1 ||
	    kli_buf_reserve(&kl->in, KEYLOCK_BUF_INITIAL) == -1) {
		keylock_free(kl);
		return NULL;
	}
	return kl;
}

void
keylock_free(struct keylock *kl)
{
	if (kl == NULL)
		return;
	keylock_close(kl);
	kli_session_free(kl);
	kli_tls_free(kl);
	free(kl->out.data);
	free(kl->in.data);
	free(kl);
}

int
keylock_is_connected(const struct keylock *kl)
{
	return kl->fd != -1;
}

int
keylock_fd(const struct keylock *kl)
{
	return kl->fd;
}

void
keylock_set_timeout(struct keylock *kl, long ms)
{
	kl->timeout_ms = ms < 0 ? KEYLOCK_NO_DEADLINE : ms;
}

long
keylock_timeout(const struct keylock *kl)
{
	return kl->timeout_ms;
}

/*
 * A server list: each server in turn, each with a deadline of its own,
 * until one answers (libkeylock(3), SERVER LISTS). Every server is checked
 * before any is tried, so that a typo late in the list is not found only
 * the day the first ones are down. A server that answers is kept, whatever
 * AUTH then says: ERR AUTH is the caller's to fix, not the next server's.
 */
enum keylock_status
keylock_connect(struct keylock *kl, const char *server, const char *secret)
{
	enum keylock_status	 st;
	char			*list;
	size_t			 n;
	long			 grace;

	keylock_close(kl);
	server = kli_server_list(server);
	/* "session=MS" is a setting in the list, not a server */
	if ((st = kli_session_setting(kl, server, &list, &grace)) !=
	    KEYLOCK_OK)
		return st;
	if ((st = kli_servers_check(kl, list, &n)) != KEYLOCK_OK ||
	    (secret != NULL && (st = secret_check(kl, secret, NULL)) !=
	    KEYLOCK_OK)) {
		free(list);
		return st;
	}
	kl->list_moves = 0;
	st = connect_list(kl, list, n, 0, secret, grace);
	free(list);
	return st;
}

/*
 * Moves to the next server of the list: after ERR BACKEND, that front end
 * is cut off from its store and another may not be. The servers after the
 * current one are tried in order, then those before it, then itself, as
 * keylock_connect() tries a list; once every other server has been moved
 * to since keylock_connect(), the list is used up.
 */
enum keylock_status
keylock_failover(struct keylock *kl)
{
	enum keylock_status	 st;
	char			*list;

	if (kl->sess_servers == NULL)
		return kli_fail(kl, KEYLOCK_ERR_CLOSED, "not connected");
	if (kl->sess_id[0] != '\0')
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a session moves by "
		    "itself (RESUME through the list)");
	if (kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is still "
		    "waiting for its reply");
	if (kl->list_moves + 1 >= kl->list_n)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, kl->list_n == 1 ?
		    "no other server in the list" : "every server of the "
		    "list has been tried");
	if ((list = strdup(kl->sess_servers)) == NULL)
		return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory");
	kli_close(kl);
	kl->list_moves++;
	st = connect_list(kl, list, kl->list_n, kl->list_at + 1,
	    kl->sess_secret, 0);
	free(list);
	return st;
}

/*
 * Tries the n servers of list from the one at start (wrapping round), each
 * with a deadline of its own, until one answers; the first that answers is
 * kept, with the list (and a session if grace asks for one).
 */
static enum keylock_status
connect_list(struct keylock *kl, const char *list, size_t n, size_t start,
    const char *secret, long grace)
{
	enum keylock_status	 st, worst = KEYLOCK_OK;
	const char		*p, *msg;
	char			 one[KEYLOCK_SERVER_TEXT_MAX];
	char			 why[KEYLOCK_MSG_MAX];
	size_t			 len = 0;

	why[0] = '\0';
	for (size_t k = 0; k < n; k++) {
		size_t	at = (start + k) % n;

		p = list;
		for (size_t j = 0; j <= at; j++)
			(void)kli_server_cut(&p, one, sizeof(one));
		st = connect_one(kl, one, secret);
		if (st == KEYLOCK_OK) {
			kl->list_at = at;
			kl->list_n = n;
			/* kept for a session's reconnects and a failover;
			 * then the session itself, if asked for */
			st = kli_session_open(kl, list, secret, grace);
		}
		if (st == KEYLOCK_OK || n == 1 || !connect_moves_on(kl, st))
			return st;
		/* Each part names its server, and says why, shortly. */
		msg = *kl->message != '\0' ? kl->message :
		    keylock_strstatus(st);
		if (len < sizeof(why))
			len += (size_t)snprintf(why + len, sizeof(why) - len,
			    "%s%s%s%s%s%s", len > 0 ? "; " : "",
			    strstr(msg, one) != NULL ? "" : one,
			    strstr(msg, one) != NULL ? "" : ": ",
			    st < KEYLOCK_ERR_IO ? keylock_status_word(st) : "",
			    st < KEYLOCK_ERR_IO ? " " : "", msg);
		if (worst != KEYLOCK_ERR_TLS)
			worst = st;
	}
	return kli_fail(kl, worst, "cannot reach keylockd: %s", why);
}

/* Connects to one server and authenticates, all by one deadline. */
static enum keylock_status
connect_one(struct keylock *kl, const char *server, const char *secret)
{
	enum keylock_status	st;
	int64_t			deadline = kli_deadline(kl, kli_now_ms());
	long			saved = kl->timeout_ms;

	if ((st = kli_connect(kl, server, deadline)) != KEYLOCK_OK ||
	    secret == NULL)
		return st;
	if (deadline != -1) {
		int64_t	left = deadline - kli_now_ms();

		kl->timeout_ms = left > 1 ? (long)left : 1;
	}
	st = keylock_auth(kl, secret);
	kl->timeout_ms = saved;
	/* On failure the server's reason stays readable: closing keeps
	 * the last reply. */
	if (st != KEYLOCK_OK)
		kli_close(kl);
	return st;
}

/*
 * Whether a failed server lets the next one be tried: not for a refusal
 * that every server would repeat (a wrong secret, the caller's TLS files,
 * a bad argument, no memory).
 */
static int
connect_moves_on(const struct keylock *kl, enum keylock_status st)
{
	switch (st) {
	case KEYLOCK_ERR_AUTH:
	case KEYLOCK_ERR_INVAL:
	case KEYLOCK_ERR_NOMEM:
		return 0;
	case KEYLOCK_ERR_TLS:
		/* no context: the CA or certificate files failed */
		return kl->tls_ctx != NULL;
	default:
		return 1;
	}
}

enum keylock_status
keylock_lock(struct keylock *kl, const char *const *keys, size_t nkeys,
    const struct keylock_lock_opts *opts, long timeout_ms, uint64_t *token)
{
	enum keylock_status	st;

	if ((st = keylock_lock_send(kl, keys, nkeys, opts, timeout_ms)) !=
	    KEYLOCK_OK)
		return st;
	return keylock_lock_recv(kl, KEYLOCK_WAIT_FOREVER, token);
}

enum keylock_status
keylock_trylock(struct keylock *kl, const char *const *keys, size_t nkeys,
    const struct keylock_lock_opts *opts, uint64_t *token)
{
	enum keylock_status	st;
	const char		*value;

	if ((st = lock_build(kl, "TRYLOCK", keys, nkeys, opts, -1)) !=
	    KEYLOCK_OK)
		return st;
	if ((st = command(kl, &value)) != KEYLOCK_OK)
		return st;
	return kli_lock_token(kl, value, token);
}

enum keylock_status
keylock_lock_send(struct keylock *kl, const char *const *keys, size_t nkeys,
    const struct keylock_lock_opts *opts, long timeout_ms)
{
	enum keylock_status	st;
	int64_t			now;

	if (kl->sess_id[0] != '\0') {
		if (kl->pending)
			return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is "
			    "still waiting for its reply");
		if ((st = lock_build(kl, "LOCK", keys, nkeys, opts,
		    timeout_ms)) != KEYLOCK_OK)
			return st;
		kl->lock_timeout = timeout_ms;
		return kli_sess_lock_send(kl);
	}
	if ((st = kli_begin(kl)) != KEYLOCK_OK)
		return st;
	if ((st = lock_build(kl, "LOCK", keys, nkeys, opts, timeout_ms)) !=
	    KEYLOCK_OK)
		return st;
	now = kli_now_ms();
	if ((st = kli_send(kl, kli_deadline(kl, now))) != KEYLOCK_OK)
		return st;
	/* The server answers TIMEOUT by itself; the local deadline is only
	 * a safety net for a server that went quiet. */
	if (timeout_ms < 0 || kl->timeout_ms < 0)
		kl->lock_deadline = -1;
	else
		kl->lock_deadline = now + timeout_ms + kl->timeout_ms;
	kl->pending = 1;
	return kli_status(kl, KEYLOCK_OK);
}

enum keylock_status
keylock_lock_cancel(struct keylock *kl)
{
	enum keylock_status	st;

	if (!kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "no LOCK is in flight");
	if (kl->cancelling)
		return kli_status(kl, KEYLOCK_OK);
	if (kl->sess_id[0] != '\0' && kl->fd == -1) {
		/* suspended: sent again after the RESUME, if still due */
		kl->cancelling = 1;
		return kli_status(kl, KEYLOCK_OK);
	}
	kl->out.len = 0;
	if ((st = kli_buf_add(kl, "CANCEL\n", 7)) != KEYLOCK_OK)
		return st;
	if ((st = kli_send(kl, kli_deadline(kl, kli_now_ms()))) !=
	    KEYLOCK_OK) {
		if (kl->sess_id[0] == '\0' || kl->fd != -1)
			return st;
		/* the connection dropped: kli_close() forgot the LOCK,
		 * the session did not */
		kl->pending = 1;
	}
	kl->cancelling = 1;
	return kli_status(kl, KEYLOCK_OK);
}

/*
 * The LOCK's reply is in kl->reply and the CANCEL's comes next ("OK 0"
 * after a grant, "OK 1" after ERR CANCELLED): read it, and keep the LOCK's
 * line as the reply keylock_reply() and keylock_message() show.
 */
static enum keylock_status
lock_cancel_reply(struct keylock *kl)
{
	char			line[KEYLOCK_MSG_MAX];
	enum keylock_status	st;

	snprintf(line, sizeof(line), "%s", kl->reply);
	st = kli_recv(kl, kli_deadline(kl, kli_now_ms()));
	if (st == KEYLOCK_PENDING) {
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "no reply to CANCEL "
		    "in time; connection closed, its locks are released");
	}
	if (st != KEYLOCK_OK)
		return st;
	if (strcmp(kl->reply, "OK 0") != 0 && strcmp(kl->reply, "OK 1") != 0) {
		char	q[280];

		kli_quote(q, sizeof(q), kl->reply, 64);
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_PROTO, "CANCEL answered \"%s\"; "
		    "connection closed", q);
	}
	memcpy(kl->msgbuf, line, sizeof(line));
	kl->reply = kl->msgbuf;
	return KEYLOCK_OK;
}

enum keylock_status
keylock_lock_recv(struct keylock *kl, long wait_ms, uint64_t *token)
{
	enum keylock_status	st;
	const char		*value;
	int64_t			deadline, now;

	if (kl->sess_id[0] != '\0')
		return kli_sess_lock_recv(kl, wait_ms, token);
	if (!kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "no LOCK is in flight");
	now = kli_now_ms();
	deadline = wait_ms < 0 ? -1 : now + wait_ms;
	if (kl->lock_deadline != -1 &&
	    (deadline == -1 || kl->lock_deadline < deadline))
		deadline = kl->lock_deadline;
	st = kli_recv(kl, deadline);
	if (st == KEYLOCK_PENDING) {
		if (kl->lock_deadline == -1 ||
		    kli_now_ms() < kl->lock_deadline)
			return kli_status(kl, KEYLOCK_PENDING);
		/* The reply may still come: nobody could tell it from the
		 * next one's, so the connection must go (and its wait with
		 * it, server-side). */
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "no reply to LOCK "
		    "in time; connection closed, its locks are released");
	}
	kl->pending = 0;
	if (st == KEYLOCK_OK && kl->cancelling)
		st = lock_cancel_reply(kl);
	kl->cancelling = 0;
	if (st != KEYLOCK_OK || (st = kli_reply_parse(kl, &value)) !=
	    KEYLOCK_OK)
		return st;
	return kli_lock_token(kl, value, token);
}

enum keylock_status
kli_lock_token(struct keylock *kl, const char *value, uint64_t *token)
{
	enum keylock_status	st;
	uint64_t		t;

	if ((st = parse_u64(kl, value, KEYLOCK_TOKEN_MAX, &t)) == KEYLOCK_OK) {
		if (token != NULL)
			*token = t;
		kli_sess_token(kl, t);
	}
	return st;
}

enum keylock_status
keylock_unlock(struct keylock *kl, const char *const *keys, size_t nkeys,
    unsigned long *count)
{
	enum keylock_status	st;
	const char		*value;
	uint64_t		n;

	if ((st = build_keys(kl, "UNLOCK", keys, nkeys)) != KEYLOCK_OK ||
	    (st = kli_buf_add(kl, "\n", 1)) != KEYLOCK_OK ||
	    (st = command(kl, &value)) != KEYLOCK_OK)
		return st;
	if ((st = parse_u64(kl, value, ULONG_MAX, &n)) == KEYLOCK_OK &&
	    count != NULL)
		*count = (unsigned long)n;
	return st;
}

enum keylock_status
keylock_unlockall(struct keylock *kl, unsigned long *count)
{
	enum keylock_status	st;
	const char		*value;
	uint64_t		n;

	kl->out.len = 0;
	if ((st = kli_buf_add(kl, "UNLOCKALL\n", 10)) != KEYLOCK_OK ||
	    (st = command(kl, &value)) != KEYLOCK_OK)
		return st;
	if ((st = parse_u64(kl, value, ULONG_MAX, &n)) == KEYLOCK_OK &&
	    count != NULL)
		*count = (unsigned long)n;
	return st;
}

enum keylock_status
keylock_refresh(struct keylock *kl, const char *const *keys, size_t nkeys,
    uint64_t ttl_ms, unsigned long *count)
{
	enum keylock_status	st;
	const char		*value;
	char			opt[KEYLOCK_NUM_MAX + 8];
	uint64_t		n;
	int			len;

	if (ttl_ms == 0)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "ttl must be at "
		    "least 1 ms");
	len = snprintf(opt, sizeof(opt), " ttl=%" PRIu64 "\n", ttl_ms);
	if ((st = build_keys(kl, "REFRESH", keys, nkeys)) != KEYLOCK_OK ||
	    (st = kli_buf_add(kl, opt, (size_t)len)) != KEYLOCK_OK ||
	    (st = command(kl, &value)) != KEYLOCK_OK)
		return st;
	if ((st = parse_u64(kl, value, ULONG_MAX, &n)) == KEYLOCK_OK &&
	    count != NULL)
		*count = (unsigned long)n;
	return st;
}

enum keylock_status
keylock_stats(struct keylock *kl, const char **json)
{
	return keylock_request(kl, "STATS", json);
}

enum keylock_status
keylock_stats_json(struct keylock *kl, struct json_t **root)
{
	enum keylock_status	st;
	const char		*text;

	if ((st = keylock_stats(kl, &text)) != KEYLOCK_OK)
		return st;
	return parse_json(kl, text, root);
}

enum keylock_status
keylock_info(struct keylock *kl, const char *key, const char **json)
{
	enum keylock_status	st;

	if ((st = build_keys(kl, "INFO", &key, 1)) != KEYLOCK_OK ||
	    (st = kli_buf_add(kl, "\n", 1)) != KEYLOCK_OK)
		return st;
	return command(kl, json);
}

enum keylock_status
keylock_info_json(struct keylock *kl, const char *key, struct json_t **root)
{
	enum keylock_status	st;
	const char		*text;

	if ((st = keylock_info(kl, key, &text)) != KEYLOCK_OK)
		return st;
	return parse_json(kl, text, root);
}

/* Sends "WORD arg" (word ends in a space) and reads its reply. */
static enum keylock_status
command_with_arg(struct keylock *kl, const char *word, const char *arg,
    size_t len)
{
	enum keylock_status	st;

	kl->out.len = 0;
	if ((st = kli_buf_add(kl, word, strlen(word))) != KEYLOCK_OK ||
	    (st = kli_buf_add(kl, arg, len)) != KEYLOCK_OK ||
	    (st = kli_buf_add(kl, "\n", 1)) != KEYLOCK_OK)
		return st;
	return command(kl, NULL);
}

enum keylock_status
keylock_name(struct keylock *kl, const char *label)
{
	size_t			len = label != NULL ? strlen(label) : 0;

	if (len == 0 || len > KEYLOCK_NAME_MAX || !word_is_valid(label, len))
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a name is 1 to %d "
		    "bytes without spaces, control bytes or '='",
		    KEYLOCK_NAME_MAX);
	return command_with_arg(kl, "NAME ", label, len);
}

enum keylock_status
keylock_auth(struct keylock *kl, const char *secret)
{
	enum keylock_status	st;
	size_t			len;

	if ((st = secret_check(kl, secret, &len)) != KEYLOCK_OK)
		return st;
	return command_with_arg(kl, "AUTH ", secret, len);
}

/* The secret is one raw token: it may hold '=', not blanks. */
static enum keylock_status
secret_check(struct keylock *kl, const char *secret, size_t *lenp)
{
	size_t	len = secret != NULL ? strlen(secret) : 0;
	size_t	sp = 0;		/* "user secret": the space's offset */

	for (size_t i = 0; i < len; i++)
		if (secret[i] == ' ' && sp == 0 && i > 0 &&
		    i <= KEYLOCK_USER_MAX && i + 1 < len)
			sp = i;
		else if ((unsigned char)secret[i] <= ' ' ||
		    secret[i] == 0x7f)
			len = 0;
	if (len == 0 || len - (sp > 0 ? sp + 1 : 0) > KEYLOCK_SECRET_MAX)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a secret is 1 to %d "
		    "bytes without spaces or control bytes, after a user name "
		    "of up to %d bytes and a space if any", KEYLOCK_SECRET_MAX,
		    KEYLOCK_USER_MAX);
	if (lenp != NULL)
		*lenp = len;
	return KEYLOCK_OK;
}

enum keylock_status
keylock_ping(struct keylock *kl)
{
	enum keylock_status	st;
	const char		*value;

	if ((st = keylock_request(kl, "PING", &value)) != KEYLOCK_OK)
		return st;
	if (strcmp(value, "PONG") != 0) {
		char	q[176];

		kli_quote(q, sizeof(q), value, 40);
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_PROTO, "PING got \"OK %s\"", q);
	}
	return st;
}

enum keylock_status
keylock_quit(struct keylock *kl)
{
	enum keylock_status	st;

	if ((st = keylock_request(kl, "QUIT", NULL)) == KEYLOCK_OK)
		keylock_close(kl);
	return st;
}

enum keylock_status
keylock_request(struct keylock *kl, const char *line, const char **value)
{
	enum keylock_status	st;
	size_t			len = line != NULL ? strlen(line) : 0;

	if (len == 0 || memchr(line, '\n', len) != NULL ||
	    memchr(line, '\r', len) != NULL)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a request is one "
		    "non-empty line without CR or LF");
	kl->out.len = 0;
	if ((st = kli_buf_add(kl, line, len)) != KEYLOCK_OK ||
	    (st = kli_buf_add(kl, "\n", 1)) != KEYLOCK_OK)
		return st;
	return command(kl, value);
}

const char *
keylock_message(const struct keylock *kl)
{
	return kl->message;
}

const char *
keylock_reply(const struct keylock *kl)
{
	return kl->reply;
}

enum keylock_status
keylock_last_status(const struct keylock *kl)
{
	return kl->last;
}

const char *
keylock_status_word(enum keylock_status st)
{
	if ((size_t)st < NSERVER_CODES && status_words[st] != NULL)
		return status_words[st];
	switch (st) {
	case KEYLOCK_ERR_UNKNOWN:	return "UNKNOWN";
	case KEYLOCK_ERR_IO:		return "IO";
	case KEYLOCK_ERR_CLOSED:	return "CLOSED";
	case KEYLOCK_ERR_DEADLINE:	return "DEADLINE";
	case KEYLOCK_ERR_PROTO:		return "PROTO";
	case KEYLOCK_ERR_INVAL:		return "INVAL";
	case KEYLOCK_ERR_NOMEM:		return "NOMEM";
	case KEYLOCK_ERR_TLS:		return "TLS";
	case KEYLOCK_PENDING:		return "PENDING";
	default:			return "?";
	}
}

const char *
keylock_strstatus(enum keylock_status st)
{
	if ((size_t)st < NSERVER_CODES && status_texts[st] != NULL)
		return status_texts[st];
	switch (st) {
	case KEYLOCK_ERR_UNKNOWN:
		return "the server sent an error code this library predates";
	case KEYLOCK_ERR_IO:
		return "a system call failed";
	case KEYLOCK_ERR_CLOSED:
		return "not connected, or the server closed the connection";
	case KEYLOCK_ERR_DEADLINE:
		return "no reply in time; the connection was closed";
	case KEYLOCK_ERR_PROTO:
		return "the server's reply is not keylockd protocol";
	case KEYLOCK_ERR_INVAL:
		return "invalid argument";
	case KEYLOCK_ERR_NOMEM:
		return "out of memory";
	case KEYLOCK_ERR_TLS:
		return "TLS failed: files, handshake or a refused certificate";
	case KEYLOCK_PENDING:
		return "no reply yet";
	default:
		return "unknown status";
	}
}

/*
 * Fills the output buffer with "CMD key... [options]\n". timeout_ms < 0
 * sends no timeout=.
 */
static enum keylock_status
lock_build(struct keylock *kl, const char *cmd, const char *const *keys,
    size_t nkeys, const struct keylock_lock_opts *opts, long timeout_ms)
{
	static const struct keylock_lock_opts	 none;
	enum keylock_status			 st;
	char					 num[4 * KEYLOCK_NUM_MAX + 32];
	int					 len = 0;

	if (opts == NULL)
		opts = &none;
	if ((st = build_keys(kl, cmd, keys, nkeys)) != KEYLOCK_OK)
		return st;
	if (timeout_ms >= 0)
		len += snprintf(num + len, sizeof(num) - (size_t)len,
		    " timeout=%ld", timeout_ms);
	if (opts->flags & KEYLOCK_SHARED)
		len += snprintf(num + len, sizeof(num) - (size_t)len,
		    " mode=shared");
	if (opts->limit > 0)
		len += snprintf(num + len, sizeof(num) - (size_t)len,
		    " limit=%u", opts->limit);
	if (opts->flags & KEYLOCK_MAX_WAITERS)
		len += snprintf(num + len, sizeof(num) - (size_t)len,
		    " max_waiters=%u", opts->max_waiters);
	if (opts->ttl_ms > 0)
		len += snprintf(num + len, sizeof(num) - (size_t)len,
		    " ttl=%" PRIu64, opts->ttl_ms);
	len += snprintf(num + len, sizeof(num) - (size_t)len, "\n");
	return kli_buf_add(kl, num, (size_t)len);
}

/* Starts the output buffer with cmd and the keys, each checked. */
static enum keylock_status
build_keys(struct keylock *kl, const char *cmd, const char *const *keys,
    size_t nkeys)
{
	enum keylock_status	st;

	if (keys == NULL || nkeys == 0)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "no key given");
	kl->out.len = 0;
	if ((st = kli_buf_add(kl, cmd, strlen(cmd))) != KEYLOCK_OK)
		return st;
	for (size_t i = 0; i < nkeys; i++) {
		size_t	len = keys[i] != NULL ? strlen(keys[i]) : 0;

		/* A blank or '=' would make the server read another key or
		 * an option: refuse here with the server's own code. Bytes
		 * that only break UTF-8 are the server's to judge. */
		if (len == 0 || len > KEYLOCK_KEY_MAX ||
		    !word_is_valid(keys[i], len))
			return kli_fail(kl, KEYLOCK_ERR_BADKEY, "key %zu of "
			    "%zu is empty, over %d bytes, or holds a space, "
			    "a control byte or '='", i + 1, nkeys,
			    KEYLOCK_KEY_MAX);
		if ((st = kli_buf_add(kl, " ", 1)) != KEYLOCK_OK ||
		    (st = kli_buf_add(kl, keys[i], len)) != KEYLOCK_OK)
			return st;
	}
	return KEYLOCK_OK;
}

/* keylockd-protocol(7), KEYS: no control byte, no space, no DEL, no '='. */
static int
word_is_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char	c = (unsigned char)s[i];

		if (c <= ' ' || c == 0x7f || c == '=')
			return 0;
	}
	return 1;
}

/* Sends the output buffer and reads its reply within keylock_timeout(). */
static enum keylock_status
command(struct keylock *kl, const char **value)
{
	enum keylock_status	st;
	int64_t			deadline;

	if (kl->sess_id[0] != '\0')
		return kli_sess_command(kl, value);
	if ((st = kli_begin(kl)) != KEYLOCK_OK)
		return st;
	deadline = kli_deadline(kl, kli_now_ms());
	if ((st = kli_send(kl, deadline)) != KEYLOCK_OK)
		return st;
	if ((st = kli_recv(kl, deadline)) == KEYLOCK_PENDING) {
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "no reply within "
		    "%ld ms; connection closed, its locks are released",
		    kl->timeout_ms);
	}
	if (st != KEYLOCK_OK)
		return st;
	return kli_reply_parse(kl, value);
}

/*
 * Turns the reply line (kl->reply) into a status: "OK [value]" or
 * "ERR CODE text". Anything else closes the connection: what follows could
 * not be trusted to line up with the requests.
 */
enum keylock_status
kli_reply_parse(struct keylock *kl, const char **value)
{
	const char	*r = kl->reply, *code, *end;
	size_t		 len;
	char		 q[256];

	if (strncmp(r, "OK", 2) == 0 && (r[2] == '\0' || r[2] == ' ')) {
		r += 2;
		while (*r == ' ' || *r == '\t')
			r++;
		if (value != NULL)
			*value = r;
		kl->message = "";
		return kli_status(kl, KEYLOCK_OK);
	}
	if (strncmp(r, "ERR ", 4) == 0) {
		code = r + 4;
		for (end = code; *end != '\0' && *end != ' '; end++)
			;
		len = (size_t)(end - code);
		kl->message = *end == ' ' ? end + 1 : end;
		for (size_t i = 1; i < NSERVER_CODES; i++)
			if (strlen(status_words[i]) == len &&
			    memcmp(status_words[i], code, len) == 0)
				return kli_status(kl, (enum keylock_status)i);
		/* An error from a newer server: still an error, and the
		 * connection is still in step. */
		kl->message = code;
		return kli_status(kl, KEYLOCK_ERR_UNKNOWN);
	}
	kli_quote(q, sizeof(q), kl->reply, 60);
	kli_close(kl);
	return kli_fail(kl, KEYLOCK_ERR_PROTO, "unexpected reply \"%s\"", q);
}

/* Strict decimal: digits only, no sign, at most max. */
static enum keylock_status
parse_u64(struct keylock *kl, const char *s, uint64_t max, uint64_t *out)
{
	uint64_t	n = 0;
	const char	*p = s;
	char		 q[176];

	if (*p == '\0')
		goto bad;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned	d = (unsigned)(*p - '0');

		if (n > (max - d) / 10)
			goto bad;
		n = n * 10 + d;
	}
	if (*p != '\0')
		goto bad;
	*out = n;
	return KEYLOCK_OK;
bad:
	kli_quote(q, sizeof(q), s, 40);
	kli_close(kl);
	return kli_fail(kl, KEYLOCK_ERR_PROTO, "reply \"OK %s\" does not "
	    "hold a number", q);
}

static enum keylock_status
parse_json(struct keylock *kl, const char *text, struct json_t **root)
{
	json_error_t	 err;
	json_t		*j;

	if ((j = json_loads(text, 0, &err)) == NULL)
		return kli_fail(kl, KEYLOCK_ERR_PROTO, "reply is not JSON: %s "
		    "at column %d", err.text, err.column);
	if (!json_is_object(j)) {
		json_decref(j);
		return kli_fail(kl, KEYLOCK_ERR_PROTO, "reply is not a JSON "
		    "object");
	}
	*root = j;
	return KEYLOCK_OK;
}
