/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * One struct keylock is one connection to a keylockd server. Every call
 * blocks for at most a deadline, speaks keylockd-protocol(7)
 * and returns an enum keylock_status; the server's error text stays
 * readable through keylock_message(). There is no global state: use one
 * connection per thread. The socket is exposed so an event loop can wait
 * for a reply (keylock_lock_send() and keylock_lock_recv()) or for the
 * connection to drop while locks are held (keylock_check()). The manual is
 * libkeylock(3).
 */
#ifndef KEYLOCK_H
#define KEYLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct json_t;			/* jansson's json_t, for the *_json calls */
struct keylock;

/*
 * Results. The server's codes keep their protocol order and values; local
 * errors start at 100, so new server codes can join below without moving
 * them.
 */
enum keylock_status {
	KEYLOCK_OK = 0,
	KEYLOCK_ERR_SYNTAX = 1,		/* the server's ERR codes */
	KEYLOCK_ERR_BADKEY = 2,
	KEYLOCK_ERR_TOOLONG = 3,
	KEYLOCK_ERR_TIMEOUT = 4,	/* not granted within timeout= */
	KEYLOCK_ERR_LOCKED = 5,
	KEYLOCK_ERR_BUSY = 6,
	KEYLOCK_ERR_DEADLOCK = 7,
	KEYLOCK_ERR_HELD = 8,
	KEYLOCK_ERR_NOTHELD = 9,
	KEYLOCK_ERR_CONFLICT = 10,
	KEYLOCK_ERR_LIMIT = 11,
	KEYLOCK_ERR_AUTH = 12,
	KEYLOCK_ERR_SHUTDOWN = 13,
	KEYLOCK_ERR_CANCELLED = 14,	/* the LOCK was withdrawn by CANCEL */
	KEYLOCK_ERR_BACKEND = 15,	/* the server's store is unreachable */
	KEYLOCK_ERR_GONE = 16,		/* RESUME: the session ended; all lost */
	KEYLOCK_ERR_SESSION = 17,	/* SESSION twice, RESUME while in use */
	KEYLOCK_ERR_NOPERM = 18,	/* a key the user may not use */
	KEYLOCK_ERR_UPGRADE = 19,	/* UPGRADE failed; the server carries on */
	KEYLOCK_ERR_UNKNOWN = 99,	/* an ERR code this library predates */

	KEYLOCK_ERR_IO = 100,		/* a system call failed (see errno) */
	KEYLOCK_ERR_CLOSED = 101,	/* not connected, or closed by server */
	KEYLOCK_ERR_DEADLINE = 102,	/* no reply in time; now closed */
	KEYLOCK_ERR_PROTO = 103,	/* a reply that is not protocol */
	KEYLOCK_ERR_INVAL = 104,	/* a bad argument; nothing was sent */
	KEYLOCK_ERR_NOMEM = 105,
	KEYLOCK_ERR_TLS = 106,		/* TLS files, handshake, refusal */
	KEYLOCK_PENDING = 110		/* keylock_lock_recv(): no reply yet */
};

/* keylock_lock() timeout_ms: wait as long as the server lets it. */
#define KEYLOCK_WAIT_FOREVER	(-1L)
/* keylock_set_timeout(): never give up on a reply. */
#define KEYLOCK_NO_DEADLINE	(-1L)
/* Connect and reply deadline of a new handle. */
#define KEYLOCK_TIMEOUT_DEFAULT	10000L
#define KEYLOCK_SERVER_DEFAULT	"127.0.0.1:7711"
#define KEYLOCK_PORT_DEFAULT	7711
#define KEYLOCK_TLS_PORT_DEFAULT	7712	/* of "tls://host" */
#define KEYLOCK_KEY_MAX		250	/* bytes, keylockd-protocol(7), KEYS */
#define KEYLOCK_NAME_MAX	64
/* keylock_session() grace_ms 0: what the server's default is too. */
#define KEYLOCK_SESSION_GRACE_DEFAULT	10000L
/* keylock_set_session(): take the setting from the server string
 * ("session=MS") or $KEYLOCK_SESSION, as a new handle does. */
#define KEYLOCK_SESSION_AUTO	(-1L)

/* struct keylock_lock_opts flags */
#define KEYLOCK_SHARED		0x01	/* mode=shared (a reader) */
#define KEYLOCK_MAX_WAITERS	0x02	/* send max_waiters= */

/* Options of LOCK and TRYLOCK. All zero is a plain exclusive lock. */
struct keylock_lock_opts {
	unsigned	 flags;
	unsigned	 limit;		/* > 0: limit=N, a semaphore */
	unsigned	 max_waiters;	/* with KEYLOCK_MAX_WAITERS */
	uint64_t	 ttl_ms;	/* > 0: ttl=MS, the grant expires */
};

/*
 * TLS. NULL fields fall back to $KEYLOCK_TLS_CA, $KEYLOCK_TLS_CERT and
 * $KEYLOCK_TLS_KEY; with no CA file the system's store is trusted. The key
 * file defaults to the certificate file.
 */
struct keylock_tls_opts {
	const char	*ca_file;	/* PEM CAs for the server's cert */
	const char	*cert_file;	/* PEM client cert, for mutual TLS */
	const char	*key_file;
	const char	*server_name;	/* checked name; NULL: the host given */
	int		 insecure;	/* nonzero: no certificate check */
};

/* A handle, not connected yet; NULL when out of memory. */
struct keylock	*keylock_new(void);
/* Closes the connection (releasing its locks) and frees; NULL is fine. */
void		 keylock_free(struct keylock *kl);

/*
 * Connects to server: "host:port", "host", "[v6addr]:port", "v6addr", or a
 * unix socket path (anything with a '/'). NULL or "" means $KEYLOCK_SERVER,
 * or 127.0.0.1:7711 when that is unset. A "tls://" prefix speaks TLS (port
 * 7712 by default), as does every connection after keylock_set_tls().
 * Closes an earlier connection first. With a secret, AUTH is sent and must
 * succeed; "user secret" (one space) authenticates as that user of the
 * server (keylockd-protocol(7), ACCESS CONTROL). The deadline covers the TCP and TLS handshakes and AUTH; name
 * resolution may block longer.
 *
 * A comma-separated list ("fe1:7711,fe2:7711") is tried in order, with a
 * deadline per server, and the first that answers is kept; a wrong secret
 * (KEYLOCK_ERR_AUTH) ends the walk. When none answers, keylock_message()
 * names each and why. libkeylock(3), "Server lists".
 */
enum keylock_status keylock_connect(struct keylock *kl, const char *server,
		    const char *secret);
/*
 * Closes the connection (the server releases its locks) and connects to
 * the next server of keylock_connect()'s list, trying the others in list
 * order from there: for KEYLOCK_ERR_BACKEND, a front end cut off from the
 * store that another front end of the list may still reach. Each server
 * of the list is moved to at most once per keylock_connect(), then
 * KEYLOCK_ERR_INVAL; so is a handle with a session (it moves by itself)
 * or a LOCK in flight. libkeylock(3), "Server lists".
 */
enum keylock_status keylock_failover(struct keylock *kl);
/*
 * Loads the TLS settings for the next keylock_connect(), which then always
 * uses TLS; NULL goes back to TLS for "tls://" servers only, with the
 * defaults. KEYLOCK_ERR_TLS when a file cannot be read or used.
 */
enum keylock_status keylock_set_tls(struct keylock *kl,
		    const struct keylock_tls_opts *opts);
/*
 * Closes the connection (the server releases its locks); the handle stays.
 * A session is ended too: QUIT is sent first where it can go at once.
 */
void		 keylock_close(struct keylock *kl);
int		 keylock_is_connected(const struct keylock *kl);
/* The socket (non-blocking, close-on-exec), or -1. Poll it; never read,
 * write or close it. Under TLS it may turn readable for TLS records that
 * carry no reply (keylock_check() says KEYLOCK_OK). */
int		 keylock_fd(const struct keylock *kl);

/*
 * The deadline, in ms, for connecting and for each reply that does not wait
 * for a lock; KEYLOCK_NO_DEADLINE waits forever. A call that runs out of
 * time closes the connection (its reply could still come and would be
 * taken for the next one's) and returns KEYLOCK_ERR_DEADLINE.
 */
void		 keylock_set_timeout(struct keylock *kl, long ms);
long		 keylock_timeout(const struct keylock *kl);

/*
 * LOCK keys atomically. timeout_ms: KEYLOCK_WAIT_FOREVER, or the longest
 * wait, sent as timeout= so that the server answers KEYLOCK_ERR_TIMEOUT
 * itself and the connection stays usable; the local deadline is that plus
 * keylock_timeout(). opts may be NULL. On KEYLOCK_OK, *token (if not NULL)
 * is the grant's fencing token.
 */
enum keylock_status keylock_lock(struct keylock *kl, const char *const *keys,
		    size_t nkeys, const struct keylock_lock_opts *opts,
		    long timeout_ms, uint64_t *token);
/* TRYLOCK: KEYLOCK_ERR_LOCKED at once if a key is not free. */
enum keylock_status keylock_trylock(struct keylock *kl,
		    const char *const *keys, size_t nkeys,
		    const struct keylock_lock_opts *opts, uint64_t *token);

/*
 * keylock_lock() in two halves, for an event loop: _send() queues the
 * request, then _recv() waits up to wait_ms (0: just look) and returns
 * KEYLOCK_PENDING while the server has not answered. Nothing else may be
 * sent meanwhile; keylock_close() withdraws the wait.
 */
enum keylock_status keylock_lock_send(struct keylock *kl,
		    const char *const *keys, size_t nkeys,
		    const struct keylock_lock_opts *opts, long timeout_ms);
enum keylock_status keylock_lock_recv(struct keylock *kl, long wait_ms,
		    uint64_t *token);
/*
 * Gives up the LOCK of keylock_lock_send() and keeps the connection, with
 * every lock it holds (CANCEL, keylockd-protocol(7)). Then keep calling
 * keylock_lock_recv(): it returns KEYLOCK_ERR_CANCELLED when the wait was
 * withdrawn, or KEYLOCK_OK with the token when the grant came first (the
 * lock is then held and must be released); it reads the CANCEL's own reply
 * too. KEYLOCK_ERR_INVAL when no LOCK is in flight.
 */
enum keylock_status keylock_lock_cancel(struct keylock *kl);

/* UNLOCK; *count (if not NULL) is the number of keys released. */
enum keylock_status keylock_unlock(struct keylock *kl, const char *const *keys,
		    size_t nkeys, unsigned long *count);
enum keylock_status keylock_unlockall(struct keylock *kl, unsigned long *count);
/* REFRESH: restarts the ttl of held keys. */
enum keylock_status keylock_refresh(struct keylock *kl,
		    const char *const *keys, size_t nkeys, uint64_t ttl_ms,
		    unsigned long *count);

/*
 * STATS and INFO. The raw forms point *json at the JSON text inside the
 * handle, valid until the next call on it. The _json forms give a parsed
 * object the caller json_decref()s; link jansson to use them.
 */
enum keylock_status keylock_stats(struct keylock *kl, const char **json);
enum keylock_status keylock_stats_json(struct keylock *kl,
		    struct json_t **root);
enum keylock_status keylock_info(struct keylock *kl, const char *key,
		    const char **json);
enum keylock_status keylock_info_json(struct keylock *kl, const char *key,
		    struct json_t **root);

/* NAME: the label INFO, error texts and the server's logs show. */
enum keylock_status keylock_name(struct keylock *kl, const char *label);
enum keylock_status keylock_auth(struct keylock *kl, const char *secret);
enum keylock_status keylock_ping(struct keylock *kl);
/* QUIT, then close. */
enum keylock_status keylock_quit(struct keylock *kl);

/*
 * Sends one raw request line (no LF) and reads its reply; *value (if not
 * NULL) points at what follows "OK ", valid until the next call. For
 * commands this library has no call for; it cannot wait longer than
 * keylock_timeout().
 */
enum keylock_status keylock_request(struct keylock *kl, const char *line,
		    const char **value);

/*
 * Reads what the server sent without waiting. For a caller that polls
 * keylock_fd() while holding locks and no request is in flight: KEYLOCK_OK
 * means nothing happened; any other status means the connection is closed
 * and every lock it held is gone. With a session, a dropped connection is
 * KEYLOCK_OK while the window lasts: the handle is suspended
 * (keylock_fd() is -1) until keylock_keepalive() resumes it.
 */
enum keylock_status keylock_check(struct keylock *kl);

/*
 * Sessions (keylockd-protocol(7), Sessions; libkeylock(3), SESSIONS): the
 * locks and the waiting LOCK of a session outlive a dropped connection by
 * its grace. The library then reconnects by itself, to the same server
 * list with the same secret, backing off between attempts, and sends
 * RESUME; the calls see nothing of it but the time it takes. It counts on
 * the locks until the send time of the last answered request plus the
 * grace, less 0.1%: when that instant passes with no successful RESUME, or
 * RESUME answers GONE, the locks are lost and the call under way (or the
 * next keylock_check() or keylock_keepalive()) says so, with
 * KEYLOCK_ERR_CLOSED or KEYLOCK_ERR_GONE, and the handle has no session
 * any more.
 *
 * keylock_session() opens one on the connected handle; grace_ms 0 is
 * KEYLOCK_SESSION_GRACE_DEFAULT. keylock_set_session() says what every
 * later keylock_connect() does: open a session of grace_ms (> 0), none
 * (0), or KEYLOCK_SESSION_AUTO: as "session=MS" in the server list says,
 * else as $KEYLOCK_SESSION does (unset, empty or 0: none).
 */
enum keylock_status keylock_session(struct keylock *kl, long grace_ms);
void		 keylock_set_session(struct keylock *kl, long grace_ms);
/* The session's grace in ms, or 0 without a session. */
long		 keylock_session_grace(const struct keylock *kl);
/* Nonzero while a session's connection is down and its window still
 * open: the locks still count, a RESUME is due. */
int		 keylock_suspended(const struct keylock *kl);
/*
 * What a session needs while the caller is idle, driven by the caller: no
 * helper thread, no timer, no signal. Pings when a third of the grace has
 * passed since the last answered request, notices a dropped connection,
 * and resumes a suspended session, trying for about wait_ms (< 0: until it
 * succeeds or the window ends; an attempt in progress may run over by up
 * to keylock_timeout(), never past the window). KEYLOCK_OK: the session
 * and its locks are there; KEYLOCK_PENDING: still suspended, call again;
 * anything else: the locks are lost. Without a session it only says
 * whether the handle is connected. KEYLOCK_ERR_INVAL while a LOCK is in
 * flight: keylock_lock_recv() keeps the session then.
 */
enum keylock_status keylock_keepalive(struct keylock *kl, long wait_ms);
/* Milliseconds until keylock_keepalive() is next due (0: now), or -1
 * without a session: the timeout of the caller's poll(2). */
long		 keylock_keepalive_ms(const struct keylock *kl);

/*
 * The text of the last failure: the server's text after the code word
 * ("balance:42 held by client 3 ..."), or a local description such as
 * "connect 127.0.0.1:7711: Connection refused". Valid until the next call.
 */
const char	*keylock_message(const struct keylock *kl);
/* The last reply line as received (no LF), or "". */
const char	*keylock_reply(const struct keylock *kl);
/* The last status this handle returned. */
enum keylock_status keylock_last_status(const struct keylock *kl);

/* The protocol's word for a status ("LOCKED"), or a local one ("IO"). */
const char	*keylock_status_word(enum keylock_status st);
/* A short description of a status, in English. */
const char	*keylock_strstatus(enum keylock_status st);

#ifdef __cplusplus
}
#endif

#endif /* KEYLOCK_H */
