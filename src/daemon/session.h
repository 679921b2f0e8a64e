/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Sessions (keylockd-protocol(7), SESSIONS): a lock owner that outlives
 * its connection. A session is attached to one connection, which then
 * holds its owner in the backend as any connection does, or detached:
 * the session keeps the owner itself, with its holds and its wait, for its
 * grace, and ends it exactly as a closed connection would when the grace
 * runs out. The lock table never learns the difference: what it calls the
 * owner's udata is a struct owner_head, a connection's or a detached
 * session's, and the helpers below tell the two apart.
 *
 * IDs are secrets: 192 bits from getrandom(2), of which the first 64 only
 * find the session's bucket and the whole ID is compared in constant time.
 * An ID is never logged, listed or kept in any other form.
 */
#ifndef SESSION_H
#define SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl.h"

struct backend;
struct config;
struct conn;
struct conns;
struct event_base;
struct lt_owner;
struct stats;

struct session;
struct sessions;

/*
 * What the lock table's owner udata points to: the first member of struct
 * conn and of struct session. detached is NULL in a connection's head and
 * the session itself in a detached session's.
 */
struct owner_head {
	struct lt_owner	*owner;
	struct session	*detached;
	uint32_t	 chan;		/* its channel: 0, the connection's */
};

/* The text form of an ID: base64url of 24 random bytes, and a NUL. */
#define SESSION_ID_LEN	32
/* The hex SHA-256 of a raw ID: a session's name in backend etcd. */
#define SESSION_HASH_HEX 64

/* The connection that answers for o, or NULL while o's session is
 * detached (or o has no udata). */
struct conn	*owner_conn(const struct lt_owner *o);
/* The client id INFO and refusals give for o: its connection's (a
 * channel's too), its session's while detached, else the backend's
 * (another front end's client; a session's channel: the session's). */
uint64_t	 owner_client(const struct lt_owner *o);
/* o's NAME, whether its session is attached or not; NULL: none. For
 * another front end's client (backend etcd), the NAME its last LOCK
 * carried. */
const char	*owner_name(const struct lt_owner *o);
/* The backend that names owners without udata (owner_set_backend(),
 * once, by the server); o's front end (backend etcd: the lease its
 * entries carry; 0: backend local), and whether o is another front
 * end's client. */
void		 owner_set_backend(const struct backend *be);
uint64_t	 owner_frontend(const struct lt_owner *o);
bool		 owner_is_foreign(const struct lt_owner *o);
/* How long o's session has been detached, or -1 while it has a
 * connection. */
int64_t		 owner_detached_ms(const struct lt_owner *o, uint64_t now_ms);
/* o's channel (keylockd-protocol(7), CHANNELS): 0 for a connection's
 * own owner; another front end's session channel's, as the backend
 * says. */
uint32_t	 owner_channel(const struct lt_owner *o);
/* o belongs to a session that ended and holds its keys for
 * session-lock-delay. */
bool		 owner_in_lock_delay(const struct lt_owner *o);

/* The sessions of one server's connections cs. cfg, st and be stay the
 * caller's. */
struct sessions	*sessions_new(struct conns *cs, struct event_base *base,
		    const struct config *cfg, struct stats *st,
		    struct backend *be);
/* Ends every session (the server stops): detached ones release all. */
void		 sessions_free(struct sessions *ss);

/*
 * Opens a session for c with grace_ms and writes its ID (SESSION_ID_LEN
 * bytes and a NUL) to id. NULL on no memory or no random bytes from the
 * kernel (*nomem says which).
 */
struct session	*session_open(struct sessions *ss, struct conn *c,
		    uint64_t grace_ms, char *id, bool *nomem);
/* The session whose ID is id[0..len), or NULL (keylockd-protocol(7),
 * GONE). The time taken does not depend on how much of a wrong ID is
 * right. */
struct session	*sessions_find(struct sessions *ss, const char *id,
		    size_t len);
/* The live session of client id (attached or detached), or NULL. */
struct session	*sessions_find_client(struct sessions *ss, uint64_t id);

/*
 * s's connection is gone without QUIT: from now on s holds owner, whose
 * udata becomes s's head. wait_deadline_ms is when its waiting LOCK times
 * out (0: none, or no LOCK waits). name (may be NULL) and peer are the
 * connection's, copied.
 */
void		 session_detach(struct session *s, struct lt_owner *owner,
		    const char *name, const char *peer,
		    uint64_t wait_deadline_ms, uint64_t now_ms);
/*
 * keylockd-protocol(7), CHANNELS: channel n's owner, with its waiting
 * LOCK's deadline (0: none), stays with s when its connection goes. false
 * on no memory (owner is then still the caller's).
 */
bool		 session_keep_channel(struct session *s, uint32_t n,
		    struct lt_owner *owner, uint64_t wait_deadline_ms);
/* RESUME: hands each kept channel to fn, in channel order, and forgets
 * it; the owner is fn's from then on. Stops when fn returns false. */
void		 session_take_channels(struct session *s,
		    bool (*fn)(void *arg, uint32_t n, struct lt_owner *o,
		    uint64_t wait_deadline_ms), void *arg);

/*
 * c takes over s (RESUME): returns the owner and, through *wait_deadline_ms,
 * the deadline of its waiting LOCK (0: none), and s is attached to c. If s
 * was attached to another connection, the caller has already taken the
 * owner from it: owner is then the one passed in.
 */
struct lt_owner	*session_attach(struct session *s, struct conn *c,
		    const char *peer, uint64_t *wait_deadline_ms);
/* s ends now (QUIT, KILL): a detached s releases everything at once; an
 * attached one is only forgotten, its connection's close releases. */
void		 session_end(struct session *s, const char *why);

/*
 * Sessions across front ends (backend etcd; keylockd-protocol(7),
 * SESSIONS: Across front ends). The backend knows a session by the hex
 * SHA-256 of its raw ID (out: 64 digits and a NUL), never by the ID;
 * false with err when libcrypto cannot be loaded.
 */
bool		 session_hash(const struct session *s, char *out, char *err,
		    size_t errlen);
/* Its ID's text (SESSION_ID_LEN bytes and a NUL). */
void		 session_id(const struct session *s, char *out);
/* RESUME of an ID this front end does not have: a session for c whose
 * owner the backend is to hand over (session_resumed()), or NULL: not an
 * ID this server makes (GONE), or *nomem. */
struct session	*session_resuming(struct sessions *ss, struct conn *c,
		    const char *id, size_t len, bool *nomem);
bool		 session_is_resuming(const struct session *s);
void		 session_resumed(struct session *s, uint64_t client,
		    uint64_t grace_ms);
/* Forgets s, which the backend refused, without a word to it. */
void		 session_discard(struct session *s);
/* s was resumed through another front end: forgotten, its owner (the
 * backend's) released by nobody; its connection is the caller's. */
void		 session_moved(struct session *s);

struct conn	*session_conn(const struct session *s);
uint64_t	 session_client(const struct session *s);
uint64_t	 session_grace(const struct session *s);
/* Channels kept while detached, besides channel 0; the owner of the
 * i-th (0 to session_nchannels() - 1, in no set order). */
size_t		 session_nchannels(const struct session *s);
const struct lt_owner *session_channel_owner(const struct session *s,
		    size_t i);
/* Every hold of s's owners, channel 0's and its channels'. */
size_t		 session_nholds(const struct session *s);
/* When its first connection connected, and the enum conn_transport of
 * its last one. */
uint64_t	 session_since_ms(const struct session *s);
int		 session_transport(const struct session *s);
/* Its connection's NAME while attached, the last one's while not. */
const char	*session_name(const struct session *s);
/* The user who opened it (keylockd-protocol(7), ACCESS CONTROL), or NULL:
 * a version 1 secret, or no AUTH. */
void		 session_set_user(struct session *s, const char *user);
const char	*session_user(const struct session *s);

/* CLIENTS: every detached session, oldest first, until fn returns
 * false. */
void		 sessions_walk_detached(struct sessions *ss,
		    bool (*fn)(void *arg, const struct session *s,
		    struct lt_owner *owner, uint64_t detached_ms,
		    const char *peer), void *arg, uint64_t now_ms);

/*
 * Live upgrade (keylockd(8), LIVE UPGRADE; ks_sessions.h): each owner a
 * session holds learns its index in the TABLE section (the table's
 * writer calls session_state_note() for every owner no connection
 * answers for); then every session goes into the SESSIONS section.
 */
struct ks_reader;
struct ks_writer;
void		 session_state_note(struct lt_owner *o, uint32_t index);
void		 sessions_state_write(struct sessions *ss, struct ks_writer *w);
/*
 * The new process: rebuilds every session into the empty ss, claiming
 * (setting to NULL) the owners in owners[0..nowners) it holds; a detached
 * session's grace and lock-delay are extended by now_ms - freeze_ms.
 * Then, once the connections are read, sessions_state_link() gives each
 * attached session its connection, by client id. false with the reason
 * in r->why.
 */
bool		 sessions_state_read(struct sessions *ss, struct ks_reader *r,
		    struct lt_owner **owners, size_t nowners,
		    uint64_t freeze_ms, uint64_t now_ms);
bool		 sessions_state_link(struct sessions *ss, struct conns *cs,
		    struct ks_reader *r);

#endif /* SESSION_H */
