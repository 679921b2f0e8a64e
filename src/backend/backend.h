/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The backend: the order in which lock operations reach the lock table,
 * and the one seam between the commands and that table. `backend local`
 * applies an operation to the table at once; a replicated backend (etcd)
 * applies it after a commit and a watch event, on every front end alike.
 *
 * Every operation either completes at once, returning BE_DONE with *res
 * filled in, or returns BE_PENDING: the backend then calls hooks.done
 * exactly once for that owner, later, from one of its own events, and the
 * caller keeps the request open until then (conn_pend()). Locally only a
 * LOCK that has to wait is pending, so the common path costs one indirect
 * call and no allocation; over etcd every operation is pending, because
 * each one completes after a network round trip. One request per owner is
 * open at a time (keylockd-protocol(7), TRANSPORT: one at a time per
 * connection), so the owner alone names the request being completed.
 */
#ifndef BACKEND_H
#define BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl.h"
#include "locktable.h"

struct backend;
struct config;
struct event_base;

enum be_status {
	BE_DONE = 0,	/* *res holds the result */
	BE_PENDING	/* hooks.done brings it later */
};

/* Which request a result answers: picks the reply's form. */
enum be_op {
	BE_LOCK = 0,	/* LOCK, TRYLOCK: OK token */
	BE_UNLOCK,	/* UNLOCK: OK n */
	BE_UNLOCKALL,	/* UNLOCKALL: OK n */
	BE_REFRESH,	/* REFRESH: OK n */
	BE_READ,	/* read_barrier: the read may go now; value the
			 * command, why.key and why.keylen its argument */
	BE_SESSION,	/* SESSION: OK ID (the ID is the daemon's) */
	BE_RESUME	/* RESUME: the session's owner, to adopt */
};

/* A session's channel other than 0 (keylockd-protocol(7), CHANNELS): its
 * number and its owner. */
struct be_chan {
	uint32_t	 n;
	struct lt_owner	*owner;
};

struct be_result {
	enum be_op	 op;
	enum kl_err	 err;
	uint64_t	 value;		/* KL_OK: the token, or n */
	/*
	 * Who stands in the way (TIMEOUT, LOCKED, BUSY, DEADLOCK) or which
	 * key was refused (HELD, CONFLICT, NOTHELD: why.key). Points into the
	 * table: valid only until the next backend call.
	 */
	struct lt_blocker why;
	/* LOCK: the request's limit= and max_waiters (as given to the
	 * backend), and for CONFLICT the limit the key is in use with. */
	uint32_t	 limit;
	uint32_t	 key_limit;
	int64_t		 max_waiters;
	const char	*text;		/* BACKEND, SESSION: what went wrong */
	/* BE_RESUME: the session's owner (its holds and wait) that the
	 * connection takes over, its client id (value) and grace, and the
	 * owners of its other channels, by channel number (the backend's
	 * memory: valid until the next backend call). */
	struct lt_owner	*owner;
	uint64_t	 grace_ms;
	const struct be_chan *chans;
	size_t		 nchans;
	/* BE_RESUME: the session's NAME as its record keeps it (NULL:
	 * none), for a connection that gives none of its own. */
	const char	*name;
};

/* What a backend counts, in its caller's memory (STATS, /metrics);
 * backend local counts nothing here. */
struct be_counters {
	uint64_t	txns;		/* etcd transactions sent */
	uint64_t	txn_failures;	/* of those, not taken */
	uint64_t	rebuilds;	/* the table built again from a range */
	uint64_t	losses;		/* lease lost: clients dropped */
	uint64_t	bad_entries;	/* etcd entries left out: invalid */
	uint64_t	reaped;		/* etcd: another front end's holds
					 * and waits we deleted */
	uint64_t	ready;		/* 1: serving (etcd: a lease, a quorum) */
	uint64_t	frontend;	/* etcd: this front end's id, its
					 * lease (0 while it has none) */
};

struct be_hooks {
	/* The open request of o is complete; r->op says which it was. */
	void	(*done)(void *arg, struct lt_owner *o,
		    const struct be_result *r);
	/* The end of each of the backend's own event callbacks. */
	void	(*end_turn)(void *arg);
	/*
	 * o's locks are lost (backend etcd: the lease expired, or the table
	 * is rebuilt): disconnect its client, the protocol's "lock lost". A
	 * backend calls it for every such owner in one go, with no
	 * allocation, so that running out of memory cannot leave a client
	 * believing it holds a lock the cluster has released. It may call
	 * owner_free(o) before it returns, never another owner's.
	 */
	void	(*drop)(void *arg, struct lt_owner *o, const char *why);
	struct be_counters *counters;	/* NULL: the backend keeps its own */
	void	*arg;
	/*
	 * o's open LOCK has just been queued in the table, after acquire
	 * returned BE_PENDING (backend etcd: at its revision; backend local
	 * queues before acquire returns and never calls it). Until now it
	 * was on its way; from now on it waits for others. May be NULL.
	 */
	void	(*queued)(void *arg, struct lt_owner *o);
	/*
	 * o's session was resumed through another front end (backend
	 * etcd): o is no longer this one's to answer for or to release.
	 * Its connection is closed without a release, or its detached
	 * session forgotten; o itself stays the backend's. May be NULL.
	 */
	void	(*moved)(void *arg, struct lt_owner *o);
	/* o's NAME, or NULL; written with its LOCKs so that other front
	 * ends can show it (backend etcd). May be NULL. */
	const char *(*name)(void *arg, const struct lt_owner *o);
	/*
	 * o let go of holds outside an answer to it: a ttl ran out, or
	 * (backend etcd) the delete of an UNLOCK answered before it was
	 * applied is applied. o may hold and wait for nothing now (a
	 * channel is then forgotten). Called from inside the backend's
	 * events: it must not call the backend. May be NULL.
	 */
	void	(*released)(void *arg, struct lt_owner *o);
};

struct backend_ops {
	const char	*name;		/* "local", as config spells it */
	/* Releases complete after a commit: QUIT releases before its OK,
	 * not by the close after it (keylockd-protocol(7), QUIT). */
	bool		 quit_releases;
	/* Other processes name an owner by its id: each owner needs an id
	 * of its own (a channel's too, keylockd-protocol(7), CHANNELS). */
	bool		 unique_ids;
	struct lt_owner	*(*owner_new)(struct backend *, uint64_t id,
			    void *udata);
	/* The owner is gone (its connection closed): everything it holds is
	 * released and its wait withdrawn; never pending for the caller. */
	void		 (*owner_free)(struct backend *, struct lt_owner *,
			    uint64_t now_ms);
	enum be_status	 (*acquire)(struct backend *, struct lt_owner *,
			    const struct lt_acquire *, uint64_t now_ms,
			    struct be_result *);
	enum be_status	 (*release)(struct backend *, struct lt_owner *,
			    const char *const *keys, const size_t *keylens,
			    size_t nkeys, uint64_t now_ms, struct be_result *);
	enum be_status	 (*release_owner)(struct backend *, struct lt_owner *,
			    uint64_t now_ms, struct be_result *);
	enum be_status	 (*refresh)(struct backend *, struct lt_owner *,
			    const char *const *keys, const size_t *keylens,
			    size_t nkeys, uint64_t ttl_ms, uint64_t now_ms,
			    struct be_result *);
	/*
	 * Ends o's waiting LOCK for why (LT_WHY_TIMEOUT, LT_WHY_CANCEL,
	 * LT_WHY_SHUTDOWN): the LOCK's result is TIMEOUT (with the blocker),
	 * CANCELLED or SHUTDOWN, or, if the grant won the race, OK. BE_DONE
	 * with res->value 0 and err KL_OK when o has no waiting LOCK.
	 */
	enum be_status	 (*withdraw)(struct backend *, struct lt_owner *,
			    enum lt_why why, uint64_t now_ms,
			    struct be_result *);
	/*
	 * Sessions across front ends (keylockd-protocol(7), SESSIONS:
	 * Across front ends); NULL where a session is the daemon's alone
	 * (backend local). hash is the hex SHA-256 of the session's raw ID
	 * (64 digits): the ID itself never leaves the daemon. session_open
	 * makes o, which waits for nothing, a session's owner, with what it
	 * holds, and the owners of the connection's other channels, chans
	 * (by number; the backend keeps no pointer to them), its channels'
	 * (BE_SESSION); session_resume finds the session hash names, checks
	 * it is user's (NULL: none), takes it over from the front end it is
	 * attached to and hands back its owner (BE_RESUME: KL_ERR_GONE when
	 * there is no such session of user's). session_end: o's session
	 * ends (QUIT, KILL, its grace, the server stopping), called before
	 * o's owner_free; its holds go at once.
	 */
	enum be_status	 (*session_open)(struct backend *, struct lt_owner *,
			    const struct be_chan *chans, size_t nchans,
			    const char *hash, uint64_t grace_ms,
			    const char *user, struct be_result *);
	enum be_status	 (*session_resume)(struct backend *,
			    struct lt_owner *, const char *hash,
			    const char *user, struct be_result *);
	void		 (*session_end)(struct backend *, struct lt_owner *);
	/*
	 * ch, the owner of channel n of the connection whose owner o has a
	 * session, is about to LOCK: from now on its holds and waits are
	 * the session's too (backend etcd: its entries carry the session's
	 * lease). KL_OK; KL_ERR_SESSION with *text while the session's
	 * SESSION or RESUME is on its way. NULL where a session is the
	 * daemon's alone (backend local).
	 */
	enum kl_err	 (*session_channel)(struct backend *, struct lt_owner *o,
			    struct lt_owner *ch, uint32_t n, const char **text);
	/* o's session can no longer be resumed, its holds staying for
	 * session-lock-delay until session_end. */
	void		 (*session_close)(struct backend *, struct lt_owner *);
	/*
	 * o's holds admit nobody, whatever the mode or limit, until they end
	 * (a session's lock-delay; locktable_owner_seal()). NULL where the
	 * table is not the daemon's alone (backend etcd: other front ends'
	 * replicas decide their grants; keylockd-protocol(7) says so).
	 */
	void		 (*seal)(struct backend *, struct lt_owner *o);
	/*
	 * Who o is, for an owner the table has with no udata: another front
	 * end's client (backend etcd): *name its NAME as its last LOCK
	 * carried it (NULL: none), *frontend the front end that wrote it
	 * (its lease id), and, for a session's channel, its session's
	 * client id (*client; else left as it is) and its channel (*chan;
	 * else 0). NULL where every owner has udata (backend local).
	 */
	void		 (*owner_about)(const struct backend *,
			    const struct lt_owner *, const char **name,
			    uint64_t *frontend, uint64_t *client,
			    uint32_t *chan);
	/*
	 * How long the session of an owner with no udata (another front
	 * end's) has been detached, in ms; -1: attached, or no session's
	 * (backend etcd: as the session's record says). May be NULL.
	 */
	int64_t		 (*owner_detached_ms)(const struct backend *,
			    const struct lt_owner *);
	/*
	 * o's session's NAME (NULL: none) is now name, and it is detached
	 * (detached) or attached on this front end: written where other
	 * front ends read it (backend etcd: the session's record). May be
	 * NULL.
	 */
	void		 (*session_note)(struct backend *, struct lt_owner *o,
			    const char *name, bool detached);
	/*
	 * o holds nothing it has not let go of and waits for nothing: a
	 * channel of it may be forgotten. Backend etcd answers an UNLOCK
	 * before its delete is applied: those holds count as let go.
	 */
	bool		 (*owner_idle)(const struct backend *,
			    const struct lt_owner *);
	/* The table INFO and STATS read: the local one, or the replica;
	 * the same one for the backend's life. */
	const struct locktable *(*table)(const struct backend *);
	/*
	 * Read your own writes, where a release is answered before the
	 * table applies it (backend etcd): may o's read of the table (cmd,
	 * STATS, INFO or CLIENTS, with its argument) go now? BE_DONE: yes
	 * (res->err KL_OK; KL_ERR_NOMEM: no memory to wait); BE_PENDING:
	 * hooks.done brings BE_READ, with cmd and a copy of arg, once the
	 * table has applied every release answered before this call. NULL:
	 * reads always go at once.
	 */
	enum be_status	 (*read_barrier)(struct backend *, struct lt_owner *,
			    uint64_t cmd, const char *arg, size_t arglen,
			    struct be_result *);
	/* Shutdown: nothing is granted from now on. */
	void		 (*freeze)(struct backend *);
	/* End of an event-loop turn: arm timers, send what was batched. */
	void		 (*end_turn)(struct backend *);
	void		 (*free)(struct backend *);
};

struct backend {
	const struct backend_ops *ops;
};

/* The backend cfg names, or NULL with a message in err. */
struct backend	*backend_new(const struct config *cfg,
		    struct event_base *base, const struct be_hooks *hooks,
		    char *err, size_t errlen);
/* --check-config and start-up: what the backend cfg names can be set up
 * (backend etcd: every endpoint answers, with one etcd cluster); -1 with
 * a message in err otherwise. */
int		 backend_check(const struct config *cfg, char *err,
		    size_t errlen);

/* backend local (backend_local.c): the table in this process. */
struct backend	*backend_local_new(const struct config *cfg,
		    struct event_base *base, const struct be_hooks *hooks,
		    char *err, size_t errlen);

/* Live upgrade (keylockd(8), LIVE UPGRADE): backend local's table, to be
 * written or rebuilt, or NULL for any other backend; and the first token
 * its mark on disk leaves to hand out. */
struct locktable *backend_local_table(struct backend *be);
uint64_t	 backend_local_next_token(const struct backend *be);
/* A live upgrade's new process, the old one frozen: token_recheck(). */
bool		 backend_local_token_recheck(struct backend *be, char *err,
		    size_t errlen);

static inline const char *
backend_name(const struct backend *be)
{
	return be->ops->name;
}

static inline const struct locktable *
backend_table(const struct backend *be)
{
	return be->ops->table(be);
}

static inline void
backend_free(struct backend *be)
{
	if (be != NULL)
		be->ops->free(be);
}

#endif /* BACKEND_H */
