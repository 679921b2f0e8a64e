/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One client connection: non-blocking socket I/O with one read and one
 * write per batch of pipelined requests, bounded line framing, the wait of
 * its current LOCK (and its timer), and conn_close(), the one way out.
 */
#ifndef CONN_H
#define CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "kl.h"
#include "log.h"

struct server;
struct lt_owner;
struct tls_ctx;

struct conn	*conn_new(struct server *srv, int fd, const char *peer);
/* Speaks TLS on c from its first byte; false on no memory. */
bool		 conn_start_tls(struct conn *c, struct tls_ctx *ctx);
/* Releases everything the client holds or waits for, closes the socket
 * and frees the connection at the end of the event-loop turn. */
void		 conn_close(struct conn *c, const char *reason);

/* Replies, appended in request order; flushed once per turn. */
void		 conn_reply_ok(struct conn *c, const char *fmt, ...)
		    KL_PRINTF(2, 3);
void		 conn_reply_err(struct conn *c, enum kl_err err,
		    const char *fmt, ...) KL_PRINTF(3, 4);
void		 conn_reply_u64(struct conn *c, uint64_t v);
/* "OK " + s (s is one line, no LF). */
void		 conn_reply_ok_str(struct conn *c, const char *s);

/* The current LOCK was queued: stop handling this client's lines until
 * conn_wait_done(); timeout_ms < 0 waits forever. */
void		 conn_wait(struct conn *c, int64_t timeout_ms,
		    uint64_t start_ms);
/* The wait ended (granted, timed out, shut down): resume its lines. */
void		 conn_wait_done(struct conn *c);
bool		 conn_is_waiting(const struct conn *c);
/* The request may not get its reply yet: after QUIT's OK, close. */
void		 conn_quit(struct conn *c);

/* End of turn: handle the lines of every connection with work left and
 * write their replies; then free the connections closed this turn. */
void		 conn_run_queue(struct server *srv);
void		 conn_free_dead(struct server *srv);
/* Next turn: the connections that used up their share of the last one. */
void		 conn_resume_deferred(struct server *srv);
/* Shutdown: every waiter gets ERR SHUTDOWN, then every client is closed
 * after one last attempt to send its replies. */
void		 conn_close_all(struct server *srv, const char *reason);

uint64_t	 conn_id(const struct conn *c);
const char	*conn_name(const struct conn *c);
bool		 conn_set_name(struct conn *c, const char *name, size_t len);
struct lt_owner	*conn_owner(const struct conn *c);
struct server	*conn_server(const struct conn *c);
const char	*conn_peer(const struct conn *c);
bool		 conn_is_authed(const struct conn *c);
void		 conn_set_authed(struct conn *c, bool authed);

#endif /* CONN_H */
