/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * Sessions (keylockd-protocol(7), Sessions; libkeylock(3), SESSIONS): the
 * handle's locks and waiting LOCK outlive a dropped connection for the
 * session's grace, and the library takes them back by itself.
 *
 * The window. The server never releases a session's lock earlier than its
 * grace after the last byte it read from the session's last connection, so
 * the locks surely last until T + grace, T the send time of the last
 * answered request; less 0.1% for clock-rate error, that is sess_until.
 * Every answered request moves it; a connection that drops does not end
 * it. Until it passes the handle is "suspended" and keeps trying RESUME on
 * the same server list, backing off; when it passes first, or RESUME says
 * GONE, the locks are lost and the call says so, never later.
 *
 * Liveness while nothing is said. An idle caller calls keylock_keepalive()
 * (no thread, no timer, no signal: the library stays what keylock.c says
 * it is), which pings every grace / 3. A reply that has not come within
 * grace / 3 of its request means the connection is dead to us (a silent
 * drop, a half-open connection): it is closed and the session resumed
 * elsewhere, which the server allows while it still thinks the old one
 * alive. A LOCK that waits cannot be pinged around (requests queue behind
 * it), so every grace / 3 of waiting the wait itself is moved with RESUME
 * onto a new connection: that proves the server alive, renews the window
 * of the locks already held, and keeps the LOCK's place in the queues.
 *
 * Reconciling the request in flight after a RESUME. If RESUME says the
 * LOCK still waits, its reply is the next one. Otherwise a PING settles
 * the order: a line before its PONG is the in-flight request's own reply,
 * moved from the old connection. With none, the request was not served or
 * its reply was lost: a LOCK or TRYLOCK whose keys are held under a token
 * newer than any seen before it was sent was granted; an UNLOCK none of
 * whose keys are held was served; anything else is sent again (a LOCK
 * with what is left of its timeout).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "keylock.h"
#include "keylock_int.h"

#define SESS_BACKOFF_MIN	20	/* ms between the first attempts */
#define SESS_BACKOFF_MAX	1000	/* ms, and at most grace / 8 */
#define SESS_PARTS		3	/* ping, and give up a reply, at grace/3 */
#define SESS_GRACE_MAX		86400000L	/* ms; the server bounds it */
#define SESS_ENV		"KEYLOCK_SESSION"
#define SESS_ITEM		"session="

#define REQ_KEYS_MAX		512	/* a request's keys that are compared */

struct req_keys {
	const char	*key[REQ_KEYS_MAX];
	size_t		 len[REQ_KEYS_MAX];
	size_t		 n;
};

enum req_kind {
	REQ_OTHER,		/* sent again after a RESUME */
	REQ_LOCK,
	REQ_TRYLOCK,
	REQ_UNLOCK,
	REQ_QUIT
};

static enum keylock_status	 sess_start(struct keylock *, long);
static enum keylock_status	 sess_resume(struct keylock *, int64_t);
static enum keylock_status	 sess_back(struct keylock *, int64_t);
static enum keylock_status	 sess_resume_once(struct keylock *);
static enum keylock_status	 sess_sync(struct keylock *, char *, size_t);
static enum keylock_status	 sess_lost(struct keylock *,
				    enum keylock_status, const char *, ...)
				    __attribute__((__format__(__printf__, 3,
				    4)));
static enum keylock_status	 sess_lock_resumed(struct keylock *,
				    uint64_t *, int *);
static enum keylock_status	 sess_lock_finish(struct keylock *,
				    uint64_t *);
static enum keylock_status	 sess_synthesize(struct keylock *,
				    const char *, ...)
				    __attribute__((__format__(__printf__, 2,
				    3)));
static void			 sess_answered(struct keylock *, int64_t);
static void			 sess_forget(struct keylock *);
static int64_t			 sess_ping_at(const struct keylock *);
static int64_t			 sess_reply_deadline(const struct keylock *,
				    int64_t);
static int			 sess_transport(const struct keylock *,
				    enum keylock_status);
static enum keylock_status	 req_save(struct keylock *);
static enum keylock_status	 req_restore(struct keylock *);
static enum req_kind		 req_kind(const struct keylock *);
static size_t			 req_keys(const struct keylock *,
				    struct req_keys *);
static int			 held_grant(const struct keylock *,
				    uint64_t *);
static int			 held_any_key(const struct keylock *);
static int			 held_has(json_t *, const char *, size_t);
static long			 parse_grace(const char *, size_t);
static enum keylock_status	 strip_item(struct keylock *, const char *,
				    char **, long *);

/* keylock_connect()'s list: the "session=MS" item out, the effective
 * grace (0: no session) decided. */
enum keylock_status
kli_session_setting(struct keylock *kl, const char *list, char **rest,
    long *grace)
{
	enum keylock_status	 st;
	const char		*env;
	long			 item = KEYLOCK_SESSION_AUTO;

	if ((st = strip_item(kl, list, rest, &item)) != KEYLOCK_OK)
		return st;
	if (**rest == '\0') {
		/* only "session=MS": the server is the usual one */
		free(*rest);
		list = getenv("KEYLOCK_SERVER");
		if (list == NULL || *list == '\0')
			list = KEYLOCK_SERVER_DEFAULT;
		if ((st = strip_item(kl, list, rest, item ==
		    KEYLOCK_SESSION_AUTO ? &item : &(long){ 0 })) !=
		    KEYLOCK_OK)
			return st;
	}
	if (kl->sess_want != KEYLOCK_SESSION_AUTO)
		*grace = kl->sess_want;
	else if (item != KEYLOCK_SESSION_AUTO)
		*grace = item;
	else if ((env = getenv(SESS_ENV)) == NULL || *env == '\0')
		*grace = 0;
	else if ((*grace = parse_grace(env, strlen(env))) < 0) {
		free(*rest);
		*rest = NULL;
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "$%s \"%.40s\": want "
		    "a grace in milliseconds, 0 for none", SESS_ENV, env);
	}
	return KEYLOCK_OK;
}

/* Copies list without its session= item into *rest; *item its value. */
static enum keylock_status
strip_item(struct keylock *kl, const char *list, char **rest, long *item)
{
	const char	*p = list, *end, *s, *e;
	char		*out;
	size_t		 len = 0, n = strlen(SESS_ITEM);
	int		 seen = 0, kept = 0;

	if ((out = malloc(strlen(list) + 1)) == NULL)
		return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory");
	for (;;) {
		end = strchr(p, ',');
		if (end == NULL)
			end = p + strlen(p);
		for (s = p; s < end && (*s == ' ' || *s == '\t'); s++)
			;
		for (e = end; e > s && (e[-1] == ' ' || e[-1] == '\t'); e--)
			;
		if ((size_t)(e - s) > n && strncasecmp(s, SESS_ITEM, n) == 0 &&
		    memchr(s, '/', (size_t)(e - s)) == NULL) {
			if (seen++ || (*item = parse_grace(s + n,
			    (size_t)(e - s) - n)) < 0) {
				free(out);
				return kli_fail(kl, KEYLOCK_ERR_INVAL, "server "
				    "list \"%.80s\": want one session=MS, MS "
				    "the grace in milliseconds", list);
			}
		} else {
			if (kept++ > 0)
				out[len++] = ',';
			memcpy(out + len, p, (size_t)(end - p));
			len += (size_t)(end - p);
		}
		if (*end == '\0')
			break;
		p = end + 1;
	}
	out[len] = '\0';
	*rest = out;
	return KEYLOCK_OK;
}

/* Digits, 0 to SESS_GRACE_MAX; -1 otherwise. */
static long
parse_grace(const char *s, size_t len)
{
	long	n = 0;

	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		n = n * 10 + (s[i] - '0');
		if (n > SESS_GRACE_MAX)
			return -1;
	}
	return n;
}

enum keylock_status
kli_session_open(struct keylock *kl, const char *servers, const char *secret,
    long grace)
{
	enum keylock_status	st;
	char			*sv, *sc = NULL;

	if ((sv = strdup(servers)) == NULL ||
	    (secret != NULL && (sc = strdup(secret)) == NULL)) {
		free(sv);
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory");
	}
	free(kl->sess_servers);
	if (kl->sess_secret != NULL) {
		explicit_bzero(kl->sess_secret, strlen(kl->sess_secret));
		free(kl->sess_secret);
	}
	kl->sess_servers = sv;
	kl->sess_secret = sc;
	if (grace <= 0)
		return KEYLOCK_OK;
	if ((st = sess_start(kl, grace)) != KEYLOCK_OK && kl->fd != -1)
		/* asked for and refused: this server will not do */
		kli_close(kl);
	return st;
}

enum keylock_status
keylock_session(struct keylock *kl, long grace_ms)
{
	if (kl->sess_id[0] != '\0')
		return kli_fail(kl, KEYLOCK_ERR_SESSION, "this handle already "
		    "has a session");
	if (kl->fd == -1 || kl->sess_servers == NULL)
		return kli_fail(kl, KEYLOCK_ERR_CLOSED, "not connected");
	if (kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is still "
		    "waiting for its reply");
	if (grace_ms < 0 || grace_ms > SESS_GRACE_MAX)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a grace is 1 to %ld "
		    "ms, or 0 for the default", SESS_GRACE_MAX);
	return sess_start(kl, grace_ms == 0 ? KEYLOCK_SESSION_GRACE_DEFAULT :
	    grace_ms);
}

/* SESSION grace=MS on the connected handle. The grace is always sent:
 * OK ID does not say it, and the window needs it. */
static enum keylock_status
sess_start(struct keylock *kl, long grace)
{
	enum keylock_status	 st;
	const char		*value;
	char			 line[48];
	size_t			 len;
	int64_t			 sent;
	int			 n;

	n = snprintf(line, sizeof(line), "SESSION grace=%ld\n", grace);
	kl->out.len = 0;
	if ((st = kli_buf_add(kl, line, (size_t)n)) != KEYLOCK_OK)
		return st;
	sent = kli_now_ms();
	st = kli_exchange(kl, kli_deadline(kl, sent));
	if (st == KEYLOCK_PENDING) {
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "no reply to SESSION "
		    "within %ld ms; connection closed", kl->timeout_ms);
	}
	if (st != KEYLOCK_OK || (st = kli_reply_parse(kl, &value)) !=
	    KEYLOCK_OK)
		return st;
	len = strlen(value);
	if (len == 0 || len > KEYLOCK_SESSION_ID_MAX ||
	    strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789-_") != len) {
		kli_close(kl);
		return kli_fail(kl, KEYLOCK_ERR_PROTO, "SESSION answered a "
		    "malformed session id; connection closed");
	}
	memcpy(kl->sess_id, value, len + 1);
	kl->sess_grace = grace;
	kl->sess_answered = 0;
	sess_answered(kl, sent);
	kl->sess_retry_at = 0;
	kl->sess_backoff = SESS_BACKOFF_MIN;
	kl->sess_rand = (uint32_t)sent ^ (uint32_t)(uintptr_t)kl ^
	    (uint32_t)getpid() ^ 0x9e3779b9u;
	if (kl->sess_rand == 0)
		kl->sess_rand = 1;
	/* OK ID is no request's reply the caller should see */
	kl->reply = "";
	return kli_status(kl, KEYLOCK_OK);
}

void
keylock_set_session(struct keylock *kl, long grace_ms)
{
	kl->sess_want = grace_ms < 0 ? KEYLOCK_SESSION_AUTO : grace_ms;
}

long
keylock_session_grace(const struct keylock *kl)
{
	return kl->sess_id[0] != '\0' ? kl->sess_grace : 0;
}

int
keylock_suspended(const struct keylock *kl)
{
	return kl->sess_id[0] != '\0' && kl->fd == -1;
}

/*
 * The caller's close: a session ends with it. QUIT goes only if it can go
 * at once (a CANCEL first, so that a waiting LOCK does not hold it up);
 * otherwise the server ends the session when its grace runs out.
 */
void
keylock_close(struct keylock *kl)
{
	static const char	bye[] = "CANCEL\nQUIT\n";
	enum keylock_status	last = kl->last;
	char			saved[KEYLOCK_MSG_MAX];
	const char		*msg = kl->message, *reply = kl->reply;
	char			buf[512];
	int			skip;

	if (kl->sess_id[0] != '\0' && kl->fd != -1) {
		memcpy(saved, kl->msgbuf, sizeof(saved));
		skip = kl->pending && !kl->cancelling ? 0 : 7;
		kl->out.len = 0;
		if (kli_buf_add(kl, bye + skip, sizeof(bye) - 1 - (size_t)skip) ==
		    KEYLOCK_OK && kli_send(kl, kli_now_ms()) == KEYLOCK_OK &&
		    kl->ssl == NULL) {
			/* Unread input would make close(2) send a reset,
			 * which may overtake the QUIT. */
			shutdown(kl->fd, SHUT_WR);
			while (recv(kl->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
				;
		}
		memcpy(kl->msgbuf, saved, sizeof(saved));
		kl->message = msg;
		kl->reply = reply;
		kl->last = last;
	}
	sess_forget(kl);
	kli_close(kl);
}

void
kli_session_free(struct keylock *kl)
{
	sess_forget(kl);
	free(kl->sess_servers);
	kl->sess_servers = NULL;
	if (kl->sess_secret != NULL) {
		explicit_bzero(kl->sess_secret, strlen(kl->sess_secret));
		free(kl->sess_secret);
		kl->sess_secret = NULL;
	}
	free(kl->sess_req.data);
	kl->sess_req.data = NULL;
}

static void
sess_forget(struct keylock *kl)
{
	explicit_bzero(kl->sess_id, sizeof(kl->sess_id));
	kl->sess_grace = 0;
	if (kl->sess_state != NULL)
		json_decref(kl->sess_state);
	kl->sess_state = NULL;
}

/* A request sent at `sent` was answered: the window reaches sent + grace,
 * less 0.1% (rounded up) for the clocks' rates. */
static void
sess_answered(struct keylock *kl, int64_t sent)
{
	if (sent <= kl->sess_answered)
		return;
	kl->sess_answered = sent;
	kl->sess_until = sent + kl->sess_grace - (kl->sess_grace + 999) / 1000;
}

static int64_t
sess_ping_at(const struct keylock *kl)
{
	int64_t	from = kl->sess_answered;

	/* a LOCK just sent is as good as an answered request, for this */
	if (kl->pending && kl->lock_sent > from)
		from = kl->lock_sent;
	return from + kl->sess_grace / SESS_PARTS;
}

/* A reply later than grace / 3 (or keylock_timeout()) leaves too little
 * of the window to resume in: the connection counts as dead. */
static int64_t
sess_reply_deadline(const struct keylock *kl, int64_t sent)
{
	int64_t	d = sent + kl->sess_grace / SESS_PARTS;

	if (kl->timeout_ms >= 0 && sent + kl->timeout_ms < d)
		d = sent + kl->timeout_ms;
	return d;
}

/* The connection failed under the request, not the request itself. */
static int
sess_transport(const struct keylock *kl, enum keylock_status st)
{
	if (kl->fd != -1)
		return 0;
	switch (st) {
	case KEYLOCK_ERR_CLOSED:
	case KEYLOCK_ERR_IO:
	case KEYLOCK_ERR_DEADLINE:
	case KEYLOCK_ERR_TLS:
	case KEYLOCK_PENDING:
		return 1;
	default:
		return 0;
	}
}

static enum keylock_status
sess_lost(struct keylock *kl, enum keylock_status st, const char *fmt, ...)
{
	va_list	ap;

	kli_close(kl);
	sess_forget(kl);
	va_start(ap, fmt);
	vsnprintf(kl->msgbuf, sizeof(kl->msgbuf), fmt, ap);
	va_end(ap);
	kl->message = kl->msgbuf;
	kl->reply = "";
	return kli_status(kl, st);
}

/*
 * sess_resume(), then the PING that a request lost in flight calls for
 * (sess_unsynced), its reply ignored: for a caller with nothing in flight
 * now.
 */
static enum keylock_status
sess_back(struct keylock *kl, int64_t budget_end)
{
	enum keylock_status	st;
	char			due[KEYLOCK_MSG_MAX];

	for (;;) {
		if (kl->fd == -1 && (st = sess_resume(kl, budget_end)) !=
		    KEYLOCK_OK)
			return st;
		if (!kl->sess_unsynced)
			return KEYLOCK_OK;
		if ((st = sess_sync(kl, due, sizeof(due))) == KEYLOCK_OK)
			return st;
		if (!sess_transport(kl, st))
			return st;
	}
}

/*
 * Until the session is back (KEYLOCK_OK), lost (its status), or, with a
 * budget_end (not -1), that instant passed (KEYLOCK_PENDING). A due
 * attempt is made even on a budget already spent.
 */
static enum keylock_status
sess_resume(struct keylock *kl, int64_t budget_end)
{
	enum keylock_status	st;
	int64_t			now, until;
	long			jitter;
	int			pending = kl->pending;
	int			cancelling = kl->cancelling;

	for (;;) {
		now = kli_now_ms();
		if (now >= kl->sess_until)
			return sess_lost(kl, KEYLOCK_ERR_CLOSED, "no RESUME "
			    "within the session's window (%ld ms of grace "
			    "after the last answered request): every lock of "
			    "the session is lost", kl->sess_grace);
		if (now >= kl->sess_retry_at) {
			st = sess_resume_once(kl);
			kl->pending = pending;
			kl->cancelling = cancelling;
			if (st == KEYLOCK_OK) {
				kl->sess_backoff = SESS_BACKOFF_MIN;
				kl->sess_retry_at = 0;
				return kli_status(kl, KEYLOCK_OK);
			}
			if (st == KEYLOCK_ERR_GONE)
				return sess_lost(kl, KEYLOCK_ERR_GONE, "RESUME: "
				    "the session has ended on the server "
				    "(%s): every lock of the session is lost",
				    kl->message);
			/* Back off, with a quarter either way of jitter so
			 * that many clients cut off at once do not come
			 * back in step. */
			kl->sess_rand ^= kl->sess_rand << 13;
			kl->sess_rand ^= kl->sess_rand >> 17;
			kl->sess_rand ^= kl->sess_rand << 5;
			jitter = kl->sess_backoff / 2 > 0 ? (long)(kl->sess_rand %
			    (uint32_t)(kl->sess_backoff / 2 + 1)) -
			    kl->sess_backoff / 4 : 0;
			now = kli_now_ms();
			kl->sess_retry_at = now + kl->sess_backoff + jitter;
			kl->sess_backoff *= 2;
			if (kl->sess_backoff > SESS_BACKOFF_MAX)
				kl->sess_backoff = SESS_BACKOFF_MAX;
			if (kl->sess_backoff > kl->sess_grace / 8 &&
			    kl->sess_grace / 8 >= SESS_BACKOFF_MIN)
				kl->sess_backoff = kl->sess_grace / 8;
			continue;
		}
		if (budget_end != -1 && now >= budget_end) {
			kli_fail(kl, KEYLOCK_PENDING, "suspended: %s",
			    *kl->message != '\0' ? kl->message :
			    "the connection dropped");
			return KEYLOCK_PENDING;
		}
		until = kl->sess_retry_at < kl->sess_until ?
		    kl->sess_retry_at : kl->sess_until;
		if (budget_end != -1 && budget_end < until)
			until = budget_end;
		if (until > now)
			poll(NULL, 0, (int)(until - now));
	}
}

/*
 * One walk of the server list: connect, AUTH, RESUME, each by the
 * connection deadline and never past the window. KEYLOCK_OK with the
 * reply in kl->sess_state; KEYLOCK_ERR_GONE; or the last failure.
 */
static enum keylock_status
sess_resume_once(struct keylock *kl)
{
	enum keylock_status	 st = KEYLOCK_ERR_CLOSED;
	const char		*p = kl->sess_servers, *value;
	char			 one[KEYLOCK_SERVER_TEXT_MAX];
	int64_t			 now, deadline, sent;
	json_t			*j, *held, *e, *w, *g;
	json_error_t		 err;
	size_t			 i;

	while (p != NULL) {
		if (kli_server_cut(&p, one, sizeof(one)) == -1)
			continue;
		now = kli_now_ms();
		if (now >= kl->sess_until)
			break;
		deadline = kli_deadline(kl, now);
		if (deadline == -1 || deadline > kl->sess_until)
			deadline = kl->sess_until;
		if ((st = kli_connect(kl, one, deadline)) != KEYLOCK_OK)
			continue;
		if (kl->sess_secret != NULL) {
			kl->out.len = 0;
			if ((st = kli_buf_add(kl, "AUTH ", 5)) != KEYLOCK_OK ||
			    (st = kli_buf_add(kl, kl->sess_secret,
			    strlen(kl->sess_secret))) != KEYLOCK_OK ||
			    (st = kli_buf_add(kl, "\n", 1)) != KEYLOCK_OK ||
			    (st = kli_exchange(kl, deadline)) != KEYLOCK_OK ||
			    (st = kli_reply_parse(kl, NULL)) != KEYLOCK_OK) {
				kli_close(kl);
				continue;
			}
		}
		kl->out.len = 0;
		if ((st = kli_buf_add(kl, "RESUME ", 7)) != KEYLOCK_OK ||
		    (st = kli_buf_add(kl, kl->sess_id, strlen(kl->sess_id))) !=
		    KEYLOCK_OK || (st = kli_buf_add(kl, "\n", 1)) != KEYLOCK_OK)
			break;
		sent = kli_now_ms();
		if ((st = kli_exchange(kl, deadline)) != KEYLOCK_OK) {
			kli_close(kl);
			continue;
		}
		if ((st = kli_reply_parse(kl, &value)) == KEYLOCK_ERR_GONE)
			return st;
		if (st != KEYLOCK_OK) {
			/* a server without sessions, a full one: the next */
			kli_close(kl);
			continue;
		}
		j = json_loads(value, 0, &err);
		held = json_object_get(j, "held");
		w = json_object_get(j, "waiting");
		g = json_object_get(j, "grace_ms");
		if (!json_is_object(j) || !json_is_array(held) || w == NULL ||
		    (!json_is_null(w) && !json_is_object(w))) {
			json_decref(j);
			kli_close(kl);
			st = kli_fail(kl, KEYLOCK_ERR_PROTO, "RESUME answered "
			    "JSON without \"held\" and \"waiting\"");
			continue;
		}
		json_array_foreach(held, i, e) {
			json_int_t	t = json_integer_value(
			    json_object_get(e, "token"));

			if (t > 0 && (uint64_t)t > kl->sess_token_max)
				kl->sess_token_max = (uint64_t)t;
		}
		if (json_is_integer(g) && json_integer_value(g) > 0 &&
		    json_integer_value(g) <= SESS_GRACE_MAX)
			kl->sess_grace = (long)json_integer_value(g);
		if (kl->sess_state != NULL)
			json_decref(kl->sess_state);
		kl->sess_state = j;
		sess_answered(kl, sent);
		return KEYLOCK_OK;
	}
	return st;
}

/*
 * After a RESUME that left nothing waiting, with a request lost in
 * flight: "PING" and "CANCEL" (nothing waits: "OK PONG", "OK 0"), and a
 * line before that pair is the request's own reply, moved from the old
 * connection (copied into due, else due is ""); a CANCEL's reply may
 * follow it. A transport failure leaves the session suspended.
 */
static enum keylock_status
sess_sync(struct keylock *kl, char *due, size_t len)
{
	enum keylock_status	st;
	char			prev[KEYLOCK_MSG_MAX] = "";
	int64_t			sent = kli_now_ms(), deadline;
	int			lines = 0;

	due[0] = '\0';
	deadline = sess_reply_deadline(kl, sent);
	kl->out.len = 0;
	if ((st = kli_buf_add(kl, "PING\nCANCEL\n", 12)) != KEYLOCK_OK ||
	    (st = kli_send(kl, deadline)) != KEYLOCK_OK)
		return st;
	for (;; lines++) {
		if ((st = kli_recv(kl, deadline)) == KEYLOCK_PENDING) {
			kli_close(kl);
			return st;
		}
		if (st != KEYLOCK_OK)
			return st;
		if (strcmp(prev, "OK PONG") == 0 && strcmp(kl->reply, "OK 0") ==
		    0)
			break;
		if (lines == 1)
			snprintf(due, len, "%s", prev);
		else if (lines == 2 && !(kl->cancelling &&
		    (strcmp(prev, "OK 0") == 0 || strcmp(prev, "OK 1") == 0))) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_PROTO, "more replies "
			    "than requests after RESUME");
		} else if (lines > 2) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_PROTO, "more replies "
			    "than requests after RESUME");
		}
		snprintf(prev, sizeof(prev), "%s", kl->reply);
	}
	kl->sess_unsynced = 0;
	sess_answered(kl, sent);
	return KEYLOCK_OK;
}

/* A reply made here, as if the server had sent it. */
static enum keylock_status
sess_synthesize(struct keylock *kl, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(kl->msgbuf, sizeof(kl->msgbuf), fmt, ap);
	va_end(ap);
	kl->reply = kl->msgbuf;
	return KEYLOCK_OK;
}

enum keylock_status
kli_exchange(struct keylock *kl, int64_t deadline)
{
	enum keylock_status	st;

	kl->reply = "";
	kl->message = "";
	if ((st = kli_send(kl, deadline)) != KEYLOCK_OK)
		return st;
	return kli_recv(kl, deadline);
}

/* A request other than LOCK's two halves, with a session. */
enum keylock_status
kli_sess_command(struct keylock *kl, const char **value)
{
	enum keylock_status	st;
	enum req_kind		kind;
	char			due[KEYLOCK_MSG_MAX];
	uint64_t		t;
	int64_t			sent, deadline;
	int			inflight = 0;

	if (kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is still "
		    "waiting for its reply");
	if ((st = req_save(kl)) != KEYLOCK_OK)
		return st;
	kind = req_kind(kl);
	kl->sess_req_mark = kl->sess_token_max;
	for (;;) {
		if (kl->fd == -1) {
			if ((st = sess_resume(kl, -1)) != KEYLOCK_OK)
				return st;
			/* A raw LOCK may still wait: its reply comes. */
			if (kind == REQ_LOCK && inflight &&
			    !json_is_null(json_object_get(kl->sess_state,
			    "waiting")))
				goto receive;
			if (inflight || kl->sess_unsynced) {
				if ((st = sess_sync(kl, due, sizeof(due))) !=
				    KEYLOCK_OK) {
					if (sess_transport(kl, st))
						continue;
					return st;
				}
			}
			if (inflight) {
				if (due[0] != '\0') {
					sess_synthesize(kl, "%s", due);
					break;
				}
				if ((kind == REQ_LOCK || kind == REQ_TRYLOCK) &&
				    held_grant(kl, &t)) {
					sess_synthesize(kl, "OK %" PRIu64, t);
					break;
				}
				if (kind == REQ_UNLOCK && !held_any_key(kl)) {
					struct req_keys	rk;

					sess_synthesize(kl, "OK %zu",
					    req_keys(kl, &rk));
					break;
				}
			}
			if ((st = req_restore(kl)) != KEYLOCK_OK)
				return st;
		}
		inflight = 1;
		kl->reply = "";
		kl->message = "";
		sent = kli_now_ms();
		deadline = sess_reply_deadline(kl, sent);
		if ((st = kli_send(kl, deadline)) != KEYLOCK_OK) {
			if (sess_transport(kl, st))
				continue;
			return st;
		}
		goto receive_sent;
receive:
		sent = -1;
		deadline = sess_reply_deadline(kl, kli_now_ms());
receive_sent:
		if ((st = kli_recv(kl, deadline)) == KEYLOCK_PENDING) {
			kli_close(kl);
			continue;
		}
		if (st != KEYLOCK_OK) {
			if (sess_transport(kl, st))
				continue;
			return st;
		}
		if (sent != -1)
			sess_answered(kl, sent);
		break;
	}
	st = kli_reply_parse(kl, value);
	if (st == KEYLOCK_OK && kind == REQ_QUIT)
		sess_forget(kl);
	return st;
}

enum keylock_status
kli_sess_lock_send(struct keylock *kl)
{
	enum keylock_status	st;

	if ((st = req_save(kl)) != KEYLOCK_OK)
		return st;
	kl->sess_req_mark = kl->sess_token_max;
	kl->lock_deadline = -1;		/* liveness is the session's */
	kl->lock_sent = kli_now_ms();
	if ((st = sess_back(kl, -1)) != KEYLOCK_OK)
		return st;
	if ((st = kli_begin(kl)) != KEYLOCK_OK)
		return st;
	if ((st = req_restore(kl)) != KEYLOCK_OK)
		return st;
	kl->lock_sent = kli_now_ms();
	st = kli_send(kl, sess_reply_deadline(kl, kl->lock_sent));
	if (st != KEYLOCK_OK && !sess_transport(kl, st))
		return st;
	/* sent or not, keylock_lock_recv() sees it through */
	kl->pending = 1;
	kl->cancelling = 0;
	return kli_status(kl, KEYLOCK_OK);
}

enum keylock_status
kli_sess_lock_recv(struct keylock *kl, long wait_ms, uint64_t *token)
{
	enum keylock_status	st;
	int64_t			now, call_end, probe_at, deadline;
	int			cancelling, done;

	if (!kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "no LOCK is in flight");
	now = kli_now_ms();
	call_end = wait_ms < 0 ? -1 : now + wait_ms;
	for (;;) {
		cancelling = kl->cancelling;
		if (kl->fd == -1) {
			st = sess_resume(kl, call_end);
			if (st == KEYLOCK_PENDING)
				return st;
			if (st != KEYLOCK_OK) {
				kl->pending = kl->cancelling = 0;
				return st;
			}
			st = sess_lock_resumed(kl, token, &done);
			if (done)
				return st;
			continue;
		}
		probe_at = sess_ping_at(kl);
		deadline = call_end == -1 || probe_at < call_end ? probe_at :
		    call_end;
		st = kli_recv(kl, deadline);
		if (st == KEYLOCK_OK) {
			sess_answered(kl, kl->lock_sent);
			return sess_lock_finish(kl, token);
		}
		if (st == KEYLOCK_PENDING) {
			if (kli_now_ms() < probe_at)
				return kli_status(kl, KEYLOCK_PENDING);
			/* Waited grace / 3: move the wait to a new
			 * connection (see the top of this file). */
			kli_close(kl);
		} else if (!sess_transport(kl, st)) {
			kl->pending = kl->cancelling = 0;
			return st;
		}
		kl->pending = 1;
		kl->cancelling = cancelling;
	}
}

/* The LOCK's reply is in kl->reply (and a CANCEL's may follow). */
static enum keylock_status
sess_lock_finish(struct keylock *kl, uint64_t *token)
{
	enum keylock_status	 st;
	const char		*value;

	kl->pending = 0;
	if (kl->cancelling && kl->fd != -1) {
		/* keylock.c's lock_cancel_reply(), through lock_recv's
		 * plain path: read the CANCEL's own reply. */
		char	line[KEYLOCK_MSG_MAX];

		snprintf(line, sizeof(line), "%s", kl->reply);
		st = kli_recv(kl, sess_reply_deadline(kl, kli_now_ms()));
		if (st == KEYLOCK_PENDING)
			kli_close(kl);
		else if (st == KEYLOCK_OK && strcmp(kl->reply, "OK 0") != 0 &&
		    strcmp(kl->reply, "OK 1") != 0)
			kli_close(kl);
		/* whatever came of the CANCEL, the LOCK's reply counts; a
		 * dropped connection is resumed by the next call */
		memcpy(kl->msgbuf, line, sizeof(line));
		kl->reply = kl->msgbuf;
	}
	kl->cancelling = 0;
	if ((st = kli_reply_parse(kl, &value)) != KEYLOCK_OK)
		return st;
	return kli_lock_token(kl, value, token);
}

/*
 * After a RESUME with a LOCK in flight: *done with the LOCK's outcome, or
 * not done (it waits on the new connection, or the connection dropped
 * again).
 */
static enum keylock_status
sess_lock_resumed(struct keylock *kl, uint64_t *token, int *done)
{
	enum keylock_status	 st;
	json_t			*w = json_object_get(kl->sess_state,
				    "waiting");
	char			 due[KEYLOCK_MSG_MAX];
	uint64_t		 t;
	int64_t			 left;
	int			 cancelling = kl->cancelling;

	*done = 0;
	if (!json_is_null(w)) {
		/* still waiting: its reply is the next one */
		if (cancelling) {
			kl->out.len = 0;
			if ((st = kli_buf_add(kl, "CANCEL\n", 7)) != KEYLOCK_OK)
				goto fail;
			if ((st = kli_send(kl, sess_reply_deadline(kl,
			    kli_now_ms()))) != KEYLOCK_OK &&
			    !sess_transport(kl, st))
				goto fail;
		}
		kl->pending = 1;
		kl->cancelling = cancelling;
		return KEYLOCK_OK;
	}
	st = sess_sync(kl, due, sizeof(due));
	kl->pending = 1;
	kl->cancelling = cancelling;
	if (st != KEYLOCK_OK) {
		if (sess_transport(kl, st))
			return KEYLOCK_OK;
		goto fail;
	}
	*done = 1;
	kl->cancelling = 0;
	if (due[0] != '\0') {
		sess_synthesize(kl, "%s", due);
		return sess_lock_finish(kl, token);
	}
	if (held_grant(kl, &t)) {
		sess_synthesize(kl, "OK %" PRIu64, t);
		return sess_lock_finish(kl, token);
	}
	/* Neither held nor waiting: never read, or ended without a grant
	 * while detached (its reply lost). */
	if (cancelling) {
		sess_synthesize(kl, "ERR CANCELLED the LOCK was withdrawn "
		    "while the connection was down");
		return sess_lock_finish(kl, token);
	}
	left = kl->lock_timeout < 0 ? -1 : kl->lock_timeout -
	    (kli_now_ms() - kl->lock_sent);
	if (kl->lock_timeout >= 0 && left <= 0) {
		sess_synthesize(kl, "ERR TIMEOUT not granted within %ld ms "
		    "(the connection dropped while the LOCK waited)",
		    kl->lock_timeout);
		return sess_lock_finish(kl, token);
	}
	/* Asked again, for what is left of its timeout. */
	*done = 0;
	if ((st = req_restore(kl)) != KEYLOCK_OK)
		goto fail_done;
	if (left >= 0) {
		char	*p = strstr(kl->out.data, " timeout="), num[32];
		size_t	 n, tail;

		if (p != NULL && (size_t)(p - kl->out.data) < kl->out.len) {
			n = strcspn(p + 1, " \n") + 1;
			tail = kl->out.len - (size_t)(p - kl->out.data) - n;
			snprintf(num, sizeof(num), " timeout=%" PRId64, left);
			if (kli_buf_reserve(&kl->out, kl->out.len + strlen(num))
			    == -1) {
				st = kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of "
				    "memory");
				goto fail_done;
			}
			p = kl->out.data + (kl->out.len - tail - n);
			memmove(p + strlen(num), p + n, tail);
			memcpy(p, num, strlen(num));
			kl->out.len = kl->out.len - n + strlen(num);
		}
	}
	st = kli_send(kl, sess_reply_deadline(kl, kli_now_ms()));
	if (st != KEYLOCK_OK && !sess_transport(kl, st))
		goto fail_done;
	kl->pending = 1;
	kl->cancelling = 0;
	return KEYLOCK_OK;
fail_done:
fail:
	*done = 1;
	kl->pending = kl->cancelling = 0;
	return st;
}

enum keylock_status
kli_sess_check(struct keylock *kl)
{
	enum keylock_status	st;

	if (kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is in flight: "
		    "use keylock_lock_recv()");
	if (kl->fd != -1) {
		st = kli_check_plain(kl);
		if (st == KEYLOCK_OK || kl->fd != -1)
			return st;
	}
	/* suspended: the locks count until the window ends */
	if (kli_now_ms() >= kl->sess_until)
		return sess_lost(kl, KEYLOCK_ERR_CLOSED, "the connection "
		    "dropped and the session's window (%ld ms of grace "
		    "after the last answered request) has ended: every lock "
		    "of the session is lost", kl->sess_grace);
	return kli_status(kl, KEYLOCK_OK);
}

enum keylock_status
keylock_keepalive(struct keylock *kl, long wait_ms)
{
	enum keylock_status	st;
	int64_t			now = kli_now_ms();

	if (kl->sess_id[0] == '\0')
		return kl->fd == -1 ? kli_fail(kl, KEYLOCK_ERR_CLOSED, "not "
		    "connected") : kli_status(kl, KEYLOCK_OK);
	if ((st = kli_sess_check(kl)) != KEYLOCK_OK)
		return st;
	if (kl->fd != -1 && !kl->sess_unsynced) {
		if (now < sess_ping_at(kl))
			return kli_status(kl, KEYLOCK_OK);
		kl->out.len = 0;
		if ((st = kli_buf_add(kl, "PING\n", 5)) != KEYLOCK_OK)
			return st;
		st = kli_exchange(kl, sess_reply_deadline(kl, now));
		if (st == KEYLOCK_OK && strcmp(kl->reply, "OK PONG") == 0) {
			sess_answered(kl, now);
			return kli_status(kl, KEYLOCK_OK);
		}
		if (st == KEYLOCK_OK || st == KEYLOCK_PENDING)
			kli_close(kl);
		else if (!sess_transport(kl, st))
			return st;
		/* its PONG may yet come on the next connection */
		kl->sess_unsynced = 1;
	}
	return sess_back(kl, wait_ms < 0 ? -1 : now + wait_ms);
}

long
keylock_keepalive_ms(const struct keylock *kl)
{
	int64_t	now = kli_now_ms(), at;

	if (kl->sess_id[0] == '\0')
		return -1;
	if (kl->fd == -1)
		at = kl->sess_retry_at < kl->sess_until ? kl->sess_retry_at :
		    kl->sess_until;
	else
		at = sess_ping_at(kl);
	return at <= now ? 0 : at - now > 0x7fffffff ? 0x7fffffff :
	    (long)(at - now);
}

void
kli_sess_token(struct keylock *kl, uint64_t token)
{
	if (token > kl->sess_token_max)
		kl->sess_token_max = token;
}

/* The request being sent, kept for after a RESUME. */
static enum keylock_status
req_save(struct keylock *kl)
{
	if (kli_buf_reserve(&kl->sess_req, kl->out.len + 1) == -1)
		return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory");
	memcpy(kl->sess_req.data, kl->out.data, kl->out.len);
	kl->sess_req.len = kl->out.len;
	kl->sess_req.data[kl->sess_req.len] = '\0';
	return KEYLOCK_OK;
}

static enum keylock_status
req_restore(struct keylock *kl)
{
	enum keylock_status	st;

	kl->out.len = 0;
	if ((st = kli_buf_add(kl, kl->sess_req.data, kl->sess_req.len + 1)) !=
	    KEYLOCK_OK)
		return st;
	kl->out.len--;		/* the NUL stays after it, for strstr() */
	return KEYLOCK_OK;
}

static enum req_kind
req_kind(const struct keylock *kl)
{
	static const struct {
		const char	*word;
		enum req_kind	 kind;
	} kinds[] = {
		{ "LOCK", REQ_LOCK }, { "TRYLOCK", REQ_TRYLOCK },
		{ "UNLOCK", REQ_UNLOCK }, { "QUIT", REQ_QUIT },
	};
	const char	*s = kl->sess_req.data;
	size_t		 n;

	s += strspn(s, " \t");
	n = strcspn(s, " \t\r\n");
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strlen(kinds[i].word) == n &&
		    strncasecmp(s, kinds[i].word, n) == 0)
			return kinds[i].kind;
	return REQ_OTHER;
}

/* The request's distinct keys (tokens after the command word without
 * '='), up to REQ_KEYS_MAX of them; returns how many it has. */
static size_t
req_keys(const struct keylock *kl, struct req_keys *rk)
{
	const char	*s = kl->sess_req.data, *k;
	size_t		 len, i;
	int		 dup;

	rk->n = 0;
	s += strspn(s, " \t");
	s += strcspn(s, " \t\r\n");
	for (;;) {
		s += strspn(s, " \t");
		if ((len = strcspn(s, " \t\r\n")) == 0)
			break;
		k = s;
		s += len;
		if (memchr(k, '=', len) != NULL)
			continue;
		for (dup = 0, i = 0; i < rk->n && i < REQ_KEYS_MAX; i++)
			if (rk->len[i] == len && memcmp(rk->key[i], k, len) == 0)
				dup = 1;
		if (dup)
			continue;
		if (rk->n < REQ_KEYS_MAX) {
			rk->key[rk->n] = k;
			rk->len[rk->n] = len;
		}
		rk->n++;
	}
	return rk->n;
}

static int
held_has(json_t *keys, const char *k, size_t len)
{
	size_t	 i;
	json_t	*v;

	json_array_foreach(keys, i, v)
		if (json_is_string(v) && json_string_length(v) == len &&
		    memcmp(json_string_value(v), k, len) == 0)
			return 1;
	return 0;
}

/* A grant newer than the request, on exactly its keys: the request's. */
static int
held_grant(const struct keylock *kl, uint64_t *token)
{
	struct req_keys	 rk;
	size_t		 n, i, j;
	json_t		*held = json_object_get(kl->sess_state, "held"), *e,
			*ek;
	json_int_t	 t;
	int		 all;

	n = req_keys(kl, &rk);
	if (n == 0 || n > REQ_KEYS_MAX)
		return 0;
	json_array_foreach(held, i, e) {
		t = json_integer_value(json_object_get(e, "token"));
		ek = json_object_get(e, "keys");
		if (t <= 0 || (uint64_t)t <= kl->sess_req_mark ||
		    !json_is_array(ek) || json_array_size(ek) > n)
			continue;
		all = 1;
		for (j = 0; j < n && all; j++)
			all = held_has(ek, rk.key[j], rk.len[j]);
		if (all && json_array_size(ek) >= 1) {
			*token = (uint64_t)t;
			return 1;
		}
	}
	return 0;
}

/* Whether the session holds any key of the request. */
static int
held_any_key(const struct keylock *kl)
{
	struct req_keys	 rk;
	size_t		 n, i, j;
	json_t		*held = json_object_get(kl->sess_state, "held"), *e;

	n = req_keys(kl, &rk);
	if (n > REQ_KEYS_MAX)
		return 1;	/* cannot tell: send it again */
	json_array_foreach(held, i, e)
		for (j = 0; j < n; j++)
			if (held_has(json_object_get(e, "keys"), rk.key[j],
			    rk.len[j]))
				return 1;
	return 0;
}
