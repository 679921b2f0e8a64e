/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Names shared by every module: the protocol's error codes and the limits
 * with their defaults. Plain constants only; nothing here allocates or does
 * I/O.
 */
#ifndef KL_H
#define KL_H

/* keylockd-protocol(7), REPLIES: one enum, one table of wire words (proto.c). */
enum kl_err {
	KL_OK = 0,
	KL_ERR_SYNTAX,
	KL_ERR_BADKEY,
	KL_ERR_TOOLONG,
	KL_ERR_TIMEOUT,
	KL_ERR_LOCKED,
	KL_ERR_BUSY,
	KL_ERR_DEADLOCK,
	KL_ERR_HELD,
	KL_ERR_NOTHELD,
	KL_ERR_CONFLICT,
	KL_ERR_LIMIT,
	KL_ERR_AUTH,
	KL_ERR_SHUTDOWN,
	KL_ERR_CANCELLED,
	KL_ERR_BACKEND,
	KL_ERR_GONE,
	KL_ERR_SESSION,
	KL_ERR_NOPERM,		/* keylockd-protocol(7), ACCESS CONTROL */
	KL_ERR_UPGRADE,
	KL_ERR__COUNT,		/* the wire codes end here */
	/*
	 * Inside the daemon only, never on the wire: an allocation failed.
	 * Whoever sees it closes that one connection (conn_close_nomem()).
	 */
	KL_ERR_NOMEM = KL_ERR__COUNT
};

#define KL_KEY_MAX		250	/* bytes in a key (keylockd-protocol(7), KEYS) */
#define KL_NAME_MAX		64	/* bytes in a NAME label */
#define KL_SECRET_MAX		256	/* bytes in an AUTH secret */
#define KL_SESSION_ID_MAX	64	/* bytes in a session ID (A-Z a-z 0-9 - _) */
#define KL_KEYS_HARD_MAX	1024	/* keys one parsed request can carry */

#define KL_MAX_LINE_DEFAULT	4096	/* request line, CR and LF included */
#define KL_MAX_LINE_MIN		64
#define KL_MAX_LINE_MAX		(1024 * 1024)
#define KL_MAX_KEYS_DEFAULT	64	/* keys per request */
#define KL_MAX_LOCKS_DEFAULT	10000	/* keys held per connection */
#define KL_MAX_CHANNELS_DEFAULT	65536	/* channels per connection, besides 0 */
#define KL_WRITE_TIMEOUT_DEFAULT 30000	/* ms unsent replies may stay stuck */
#define KL_IDLE_TIMEOUT_DEFAULT	0	/* ms an idle connection may stay: off */
#define KL_MAX_TABLE_BYTES_DEFAULT ((int64_t)1 << 30)	/* lock table memory */
#define KL_MAX_CLIENTS_DEFAULT	10000
#define KL_RESERVED_SLOTS_DEFAULT 4	/* unix connections past max-clients */
#define KL_MAX_OUTPUT_DEFAULT	(1024 * 1024)	/* unread reply bytes */
#define KL_MAX_OUTPUT_TOTAL_DEFAULT ((int64_t)256 << 20)	/* all clients' */
#define KL_MAX_INPUT_TOTAL_DEFAULT ((int64_t)64 << 20)	/* all clients' input */
#define KL_READ_BYTES		(64 * 1024)	/* one read of a client's input */
#define KL_PORT_DEFAULT		7711
#define KL_TLS_PORT_DEFAULT	7712
#define KL_BIND_DEFAULT		"127.0.0.1"
#define KL_SESSION_GRACE_DEFAULT	10000	/* ms a detached session lingers */
#define KL_SESSION_GRACE_MAX_DEFAULT	60000	/* the most SESSION grace= may ask */
#define KL_UPGRADE_TIMEOUT_DEFAULT	10000	/* ms a live upgrade's new process has */
#define KL_AUTH_TIMEOUT_DEFAULT	10000	/* ms to AUTH, or a line with no secret */
#define KL_AUTH_FAILURES_MAX	3	/* wrong AUTHs before the close */
#define KL_WARN_INTERVAL_MS	10000	/* one warning per 10 s of a kind */

/* Option values in milliseconds stop here (about 31 years): no overflow. */
#define KL_MS_MAX		1000000000000ULL
#define KL_LIMIT_MAX		1000000000U	/* limit= and max_waiters= */

#endif /* KL_H */
