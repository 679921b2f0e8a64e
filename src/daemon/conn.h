/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One client connection, and the set of them with the event-loop turn that
 * runs them. A connection does non-blocking socket I/O with one read and
 * one write per batch of pipelined requests, bounded line framing, and
 * handles one request at a time: a request the commands leave open
 * (conn_pend) holds back the lines behind it until conn_complete(), so
 * replies stay in request order whoever completes the request. While a
 * LOCK waits, CANCEL is read ahead. conn_close() is the one way out.
 */
#ifndef CONN_H
#define CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "kl.h"
#include "log.h"
#include "session.h"

struct backend;
struct commands;
struct config;
struct event_base;
struct lt_owner;
struct stats;
struct tls_ctx;
struct user;

struct conns;

enum conn_transport {
	CONN_TCP = 0,
	CONN_UNIX,
	CONN_TLS
};

/* Every connection and the turn scheduler. base, cfg, st, cmds and be stay
 * the caller's and must outlive the set. NULL on no memory. */
struct conns	*conns_new(struct event_base *base, const struct config *cfg,
		    struct stats *st, struct commands *cmds,
		    struct backend *be);
/* Closes every connection (conns_close_all) and frees the set. */
void		 conns_free(struct conns *cs);
/*
 * The end of every top-level event callback, the daemon's and the
 * backend's: handles the lines of every connection with work left and
 * writes their replies, lets the backend send what this turn batched and
 * arm its timers, then frees the connections closed this turn.
 */
void		 conns_end_turn(struct conns *cs);
/* Shutdown: every waiting LOCK gets ERR SHUTDOWN, then every client is
 * closed after one last attempt to send its replies. */
void		 conns_close_all(struct conns *cs, const char *reason);
struct conn	*conns_find(struct conns *cs, uint64_t id);
/* The open TCP and TLS connections from peer's address (its port is
 * left out): keylockd.conf(5), max-clients-per-address. */
uint64_t	 conns_clients_from(struct conns *cs, const char *peer);
/* Calls fn for each open connection, oldest first, until it returns
 * false. */
void		 conns_walk(struct conns *cs,
		    bool (*fn)(void *arg, struct conn *c), void *arg);

/* A connection on fd, or NULL on no memory (fd is then the caller's). */
struct conn	*conn_new(struct conns *cs, int fd, const char *peer,
		    enum conn_transport transport);
/* Speaks TLS on c from its first byte; false on no memory. */
bool		 conn_start_tls(struct conn *c, struct tls_ctx *ctx);
/* Releases everything the client holds or waits for, closes the socket
 * and frees the connection at the end of the event-loop turn. */
void		 conn_close(struct conn *c, const char *reason);
/* Out of memory for what (e.g. "replies"): logs it and closes c, the only
 * client that pays for it. */
void		 conn_close_nomem(struct conn *c, const char *what);

/* Replies, appended in request order; flushed once per turn. */
void		 conn_reply_ok(struct conn *c, const char *fmt, ...)
		    KL_PRINTF(2, 3);
void		 conn_reply_err(struct conn *c, enum kl_err err,
		    const char *fmt, ...) KL_PRINTF(3, 4);
void		 conn_reply_u64(struct conn *c, uint64_t v);
/* "OK " + s (s is one line, no LF). */
void		 conn_reply_ok_str(struct conn *c, const char *s);

/*
 * The request being handled gets its reply later: stop handling c's lines
 * until conn_complete(). is_lock: it is a LOCK, which CANCEL may withdraw
 * (CANCEL lines are then read ahead). timeout_ms >= 0 arms its deadline,
 * counted from start_ms: then commands_deadline() runs.
 */
void		 conn_pend(struct conn *c, bool is_lock, int64_t timeout_ms,
		    uint64_t start_ms);
/* The open request's reply (err) was written: resume c's lines. */
void		 conn_complete(struct conn *c, enum kl_err err);
/* c's open LOCK, pending on the backend's round trip, now waits in the
 * lock table: if c's input has ended, c drains and closes, which
 * withdraws it. */
void		 conn_lock_queued(struct conn *c);
/* c let go of holds outside an answer to it (a ttl, an applied delete):
 * a channel that holds and waits for nothing now is forgotten at the end
 * of the turn. Safe inside the backend's events. */
void		 conn_released(struct conn *c);
/* For the CANCEL handler: 1 if this CANCEL line was read ahead and
 * withdrew a LOCK, else 0. */
uint64_t	 conn_cancel_result(struct conn *c);
/* The request's reply is the last: after it is sent, close. Called while
 * the request is pending, once it completes. */
void		 conn_quit(struct conn *c);
bool		 conn_is_quitting(const struct conn *c);

uint64_t	 conn_id(const struct conn *c);
const char	*conn_name(const struct conn *c);
/* false on no memory (the old name stays). */
bool		 conn_set_name(struct conn *c, const char *name, size_t len);

/*
 * The first member of every struct conn (session.h: struct owner_head),
 * the one part other modules read inline: its owner in the backend, which
 * every lock request passes. The rest of the struct is conn.c's.
 */
static inline struct lt_owner *
conn_owner(const struct conn *c)
{
	return ((const struct owner_head *)(const void *)c)->owner;
}

/* keylockd-protocol(7), CHANNELS. A request runs on a channel of its
 * connection, a struct conn of its own: its number (0: the connection's
 * own), read inline as the owner is. */
static inline uint32_t
conn_channel(const struct conn *c)
{
	return ((const struct owner_head *)(const void *)c)->chan;
}
/* How many channels besides channel 0 c's connection has in use. */
uint32_t	 conn_nchannels(const struct conn *c);
/* Every hold of c's connection, channel 0's and its channels'. */
size_t		 conn_nholds(const struct conn *c);
/* Calls fn for c's connection and then each of its channels in use
 * until it returns false. */
void		 conn_channels_walk(struct conn *c,
		    bool (*fn)(void *arg, struct conn *ch), void *arg);

/* keylockd-protocol(7), SESSIONS. The session attached to c, or NULL. */
struct session	*conn_session(const struct conn *c);
/* SESSION: c now has session s, which its close detaches rather than
 * ends, unless QUIT or KILL ended it first. */
void		 conn_set_session(struct conn *c, struct session *s);
/* The session was ended (QUIT, KILL, shutdown): c closes as a plain
 * connection. */
void		 conn_forget_session(struct conn *c);
/*
 * RESUME on c, which holds and waits for nothing: c takes over session s
 * with its client id, name, owner and waiting LOCK; a connection s is
 * still attached to is closed without releasing anything. Returns the
 * owner; *waiting says whether its LOCK still waits, whose reply c gives
 * next once the caller has answered the RESUME and called
 * conn_resume_wait().
 */
struct lt_owner	*conn_take_session(struct conn *c, struct session *s,
		    bool *waiting);
/* After the RESUME's reply: the open request of c and of each of its
 * channels is its waiting LOCK, if any, with the deadline it had. */
void		 conn_resume_wait(struct conn *c);
/*
 * backend etcd: c, whose session (conn_session(), resuming) the backend
 * has taken over from another front end, adopts its owner o in place of
 * its own (freed), and its other channels' owners (chans, by channel
 * number) as its channels; *waiting as for conn_take_session(). NULL:
 * c is closed (no memory), the session detached with what it has.
 */
struct be_chan;
struct lt_owner	*conn_adopt_session(struct conn *c, struct lt_owner *o,
		    const struct be_chan *chans, size_t nchans,
		    bool *waiting);
/* c's session was resumed through another front end: c closes without
 * releasing anything, on any of its channels. */
void		 conn_session_moved(struct conn *c);
/* The sessions of the set. */
struct sessions	*conns_sessions(struct conns *cs);

struct conns	*conn_set(const struct conn *c);
const char	*conn_peer(const struct conn *c);
enum conn_transport conn_transport(const struct conn *c);
uint64_t	 conn_since_ms(const struct conn *c);	/* when it connected */
/* What AUTH established; the commands decide what it admits. */
bool		 conn_is_authed(const struct conn *c);
bool		 conn_is_admin(const struct conn *c);
void		 conn_set_auth(struct conn *c, bool authed, bool admin);
/* Who AUTH (or a client certificate) made c: a user of users.h, one of
 * its version 1 secrets, or NULL (no AUTH yet, or none needed). */
const struct user *conn_user(const struct conn *c);
void		 conn_set_user(struct conn *c, const struct user *u);
/* A unix peer's uid and pid, as the kernel gave them at connect; false
 * for other transports. */
bool		 conn_peer_cred(const struct conn *c, int64_t *uid,
		    int64_t *pid);
/* The common name of a TLS peer's verified certificate; false if none. */
bool		 conn_tls_peer_cn(const struct conn *c, char *buf,
		    size_t len);
/* A wrong AUTH on c: how many so far (commands.c closes c at a few). */
unsigned	 conn_auth_failed(struct conn *c);
/* c passed the auth-timeout's test: AUTH, or a line with no secret set
 * (keylockd.conf(5), auth-timeout). */
void		 conn_admit(struct conn *c);
/* The settings changed: auth-timeout is read again. */
void		 conns_reload(struct conns *cs);

/*
 * Live upgrade (keylockd(8), LIVE UPGRADE; server_upgrade.c). Whether
 * every connection can be handed over (TLS ones aside, which
 * conns_close_tls() closes first); requester is the client whose UPGRADE
 * is open. false with why.
 */
struct ks_writer;
struct ks_reader;
bool		 conns_state_check(struct conns *cs, uint64_t requester,
		    char *why, size_t whylen);
/* Closes every TLS connection; returns how many. */
size_t		 conns_close_tls(struct conns *cs);
/* c's owner is the table's owner number owner_index in the state. */
void		 conn_state_note(struct conn *c, uint32_t owner_index);
/* Every connection with its channels, buffers and open requests, after
 * conn_state_note() for each channel; its descriptors are added to fds,
 * and the state names each by its index there. */
void		 conns_state_write(struct conns *cs, struct ks_writer *w,
		    int *fds, size_t *nfds);
/*
 * The new process: the connections of the state, each channel taking its
 * owner from owners[] (the table's, in order; each exactly once), each
 * connection its descriptor from fd_of(fd_arg, index) (-1: none, or
 * taken already). The connection whose UPGRADE is open, if requester_id
 * is not 0, goes to *requester, pending. false with the reason in r->why.
 */
bool		 conns_state_read(struct conns *cs, struct ks_reader *r,
		    struct lt_owner **owners, size_t nowners,
		    int (*fd_of)(void *fd_arg, uint32_t index), void *fd_arg,
		    struct conn **requester, uint64_t requester_id);

#endif /* CONN_H */
