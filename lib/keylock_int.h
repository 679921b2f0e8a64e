/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * What keylock.c and keylock_io.c share and users never see: the handle's
 * body and the socket layer. kli_ names are not exported from the shared
 * library (lib/local.mk keeps only keylock_*).
 */
#ifndef KEYLOCK_INT_H
#define KEYLOCK_INT_H

#include <sys/types.h>
#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#include "keylock.h"

#define KEYLOCK_BUF_INITIAL	4096	/* most requests and replies */
#define KEYLOCK_REPLY_MAX	(64 * 1024 * 1024)	/* INFO of a busy key */
#define KEYLOCK_MSG_MAX		1024	/* a local error text */
#define KEYLOCK_SERVER_TEXT_MAX	300	/* one server of a list, as written */
#define KEYLOCK_SESSION_ID_MAX	64	/* keylockd-protocol(7), Sessions */

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL	0	/* SO_NOSIGPIPE is set instead */
#endif

struct ssl_st;			/* OpenSSL's SSL and SSL_CTX */
struct ssl_ctx_st;
struct bio_method_st;

/* Input: data[off..len) is unread, data[scan..len) not yet searched for
 * LF. Output: data[0..len) is the request being built. */
struct keylock_buf {
	char		*data;
	size_t		 len, cap, off, scan;
};

struct keylock {
	int			 fd;
	long			 timeout_ms;	/* < 0: none */
	int			 pending;	/* a LOCK awaits its reply */
	int			 cancelling;	/* and a CANCEL was sent after it */
	int64_t			 lock_deadline;	/* monotonic ms, -1: none */
	enum keylock_status	 last;
	struct keylock_buf	 out, in;
	const char		*reply;		/* in in.data, or "" */
	const char		*message;	/* in reply, msgbuf, or "" */
	char			 msgbuf[KEYLOCK_MSG_MAX];
	/* TLS, keylock_tls.c */
	int			 tls_on;	/* keylock_set_tls(): always */
	int			 tls_fatal;	/* failed: no close_notify */
	int			 tls_heard;	/* a reply byte came over TLS */
	char			*tls_name;	/* server_name, or NULL */
	struct ssl_ctx_st	*tls_ctx;	/* NULL: made at first use */
	struct bio_method_st	*tls_bio;	/* send(2) with MSG_NOSIGNAL */
	struct ssl_st		*ssl;		/* NULL: not TLS */
	/* Sessions, keylock_session.c. The window: the locks surely last
	 * until sess_until (monotonic ms); sess_id "" is no session. */
	long			 sess_want;	/* keylock_set_session() */
	long			 sess_grace;	/* ms */
	char			 sess_id[KEYLOCK_SESSION_ID_MAX + 1];
	char			*sess_servers;	/* the list to reconnect to */
	size_t			 list_n;	/* its servers */
	size_t			 list_at;	/* the one connected, from 0 */
	size_t			 list_moves;	/* keylock_failover()s */
	char			*sess_secret;	/* or NULL */
	int64_t			 sess_until;
	int64_t			 sess_answered;	/* send time, last answered */
	int64_t			 sess_retry_at;	/* next RESUME attempt */
	long			 sess_backoff;	/* ms, doubles to a cap */
	uint32_t		 sess_rand;	/* jitter of the backoff */
	uint64_t		 sess_token_max; /* the highest token seen */
	int			 sess_unsynced;	/* a reply may be moved over */
	/* The request in flight, kept to be sent again after a RESUME. */
	struct keylock_buf	 sess_req;
	uint64_t		 sess_req_mark;	/* sess_token_max at send */
	int64_t			 lock_sent;	/* keylock_lock_send() */
	long			 lock_timeout;	/* its timeout_ms */
	struct json_t		*sess_state;	/* the last RESUME's reply */
};

int64_t		 kli_now_ms(void);
/* now + keylock_timeout(), or -1 for none. */
int64_t		 kli_deadline(const struct keylock *kl, int64_t now);
int		 kli_buf_reserve(struct keylock_buf *b, size_t len);
enum keylock_status kli_buf_add(struct keylock *kl, const char *data,
		    size_t len);

enum keylock_status kli_status(struct keylock *kl, enum keylock_status st);
/* Closes the socket; a session stays, suspended (keylock_close() ends it). */
void		 kli_close(struct keylock *kl);
/* kl->reply as "OK [value]" or "ERR CODE text"; closes on anything else. */
enum keylock_status kli_reply_parse(struct keylock *kl, const char **value);
/* Sends the output buffer and reads its reply by one deadline, without
 * any session logic; KEYLOCK_PENDING if the deadline passed (still open). */
enum keylock_status kli_exchange(struct keylock *kl, int64_t deadline);

/*
 * Sessions, keylock_session.c. kli_session_setting() takes a
 * "session=MS" item out of a server list (into *grace, else
 * KEYLOCK_SESSION_AUTO is left there): *rest is the list without it, to be
 * freed. The sess_ calls stand in for the plain ones while a session is
 * open (kl->sess_id[0] != '\0').
 */
enum keylock_status kli_session_setting(struct keylock *kl, const char *list,
		    char **rest, long *grace);
enum keylock_status kli_session_open(struct keylock *kl, const char *servers,
		    const char *secret, long grace);
void		 kli_session_free(struct keylock *kl);
enum keylock_status kli_sess_command(struct keylock *kl, const char **value);
enum keylock_status kli_sess_lock_send(struct keylock *kl);
enum keylock_status kli_sess_lock_recv(struct keylock *kl, long wait_ms,
		    uint64_t *token);
enum keylock_status kli_sess_check(struct keylock *kl);
/* keylock_check() of a handle without a session. */
enum keylock_status kli_check_plain(struct keylock *kl);
/* Parses a grant's "OK TOKEN" value into *token (if not NULL). */
enum keylock_status kli_lock_token(struct keylock *kl, const char *value,
		    uint64_t *token);
/* The token of a grant just answered, for the session's bookkeeping. */
void		 kli_sess_token(struct keylock *kl, uint64_t token);
enum keylock_status kli_fail(struct keylock *kl, enum keylock_status st,
		    const char *fmt, ...)
		    __attribute__((__format__(__printf__, 3, 4)));

/* At most max bytes of s for an error message, in buf: a control byte
 * (a hostile server's, for a terminal) as \xNN, "..." if cut. */
const char	*kli_quote(char *buf, size_t size, const char *s, size_t max);
/* 1: ready (or hung up), 0: the deadline passed, -1: error. */
int		 kli_wait_fd(int fd, short events, int64_t deadline);
/* strerror(err), thread-safe: in buf, or a constant. */
const char	*kli_errstr(int err, char *buf, size_t len);
/* Closes the connection and reports err as KEYLOCK_ERR_IO or _CLOSED. */
enum keylock_status kli_fail_errno(struct keylock *kl, int err,
		    const char *fmt, ...)
		    __attribute__((__format__(__printf__, 3, 4)));

/* The server list to use: server, or $KEYLOCK_SERVER, or the default. */
const char	*kli_server_list(const char *server);
/*
 * Cuts the next server of a comma-separated list from *list into buf,
 * without the blanks around it, and moves *list past its comma (to NULL
 * after the last one). -1 if it does not fit in len bytes.
 */
int		 kli_server_cut(const char **list, char *buf, size_t len);
/* Every server of the list well formed (else KEYLOCK_ERR_INVAL, naming
 * it); *count of them. Nothing is connected. */
enum keylock_status kli_servers_check(struct keylock *kl, const char *list,
		    size_t *count);
/* Closes, then connects to one server of a list, by deadline (-1: none):
 * TCP or unix, then the TLS handshake where it applies. */
enum keylock_status kli_connect(struct keylock *kl, const char *server,
		    int64_t deadline);
/* Before a request: connected, nothing in flight, the last reply gone. */
enum keylock_status kli_begin(struct keylock *kl);
/* Sends the output buffer by deadline (-1: none). */
enum keylock_status kli_send(struct keylock *kl, int64_t deadline);
/* Reads one reply line into kl->reply; KEYLOCK_PENDING when deadline
 * passes first (the connection stays open). */
enum keylock_status kli_recv(struct keylock *kl, int64_t deadline);

/*
 * TLS over kl->fd once it is connected: the handshake by deadline, then
 * reads and writes that return as recv(2) and send(2) do (EAGAIN: poll
 * for *events) or -2 when a TLS failure was reported and closed.
 */
enum keylock_status kli_tls_start(struct keylock *kl, const char *server,
		    const char *host, int64_t deadline);
ssize_t		 kli_tls_read(struct keylock *kl, void *buf, size_t len,
		    short *events);
ssize_t		 kli_tls_write(struct keylock *kl, const void *buf,
		    size_t len, short *events);
size_t		 kli_tls_pending(const struct keylock *kl);
void		 kli_tls_close(struct keylock *kl);
void		 kli_tls_free(struct keylock *kl);

#endif /* KEYLOCK_INT_H */
