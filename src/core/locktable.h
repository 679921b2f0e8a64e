/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table: keys, their holders and FIFO wait queues, shared and
 * exclusive modes, semaphores, multi-key atomic grants, ttl expiry, the
 * deadlock check and the counters STATS reports. It is pure: it never reads
 * the clock, a socket or a global; time comes in as now_ms and later grants
 * go out through the hooks given to locktable_new(). A key's entry lives
 * only while somebody holds or waits for it.
 */
#ifndef LOCKTABLE_H
#define LOCKTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hist.h"
#include "kl.h"

struct locktable;
struct lt_owner;	/* one client (connection); created by the caller */
struct lt_key;		/* read-only outside the lt_*.c files */

enum lt_mode {
	LT_EXCLUSIVE = 0,
	LT_SHARED
};

/* Why a hold or a wait ended; picks the counter that is bumped. */
enum lt_why {
	LT_WHY_UNLOCK = 0,	/* UNLOCK / UNLOCKALL: releases */
	LT_WHY_DISCONNECT,	/* the connection ended: disconnect_releases */
	LT_WHY_TIMEOUT,		/* a wait ran out: timeouts */
	LT_WHY_CANCEL,		/* CANCEL withdrew a wait: cancels */
	LT_WHY_SHUTDOWN,	/* the server is stopping: no counter */
	LT_WHY_EXPIRED		/* a hold's ttl ran out: expired */
};

/* Either pointer may be NULL: no callback, or tokens 1, 2, 3, ... (see
 * also locktable_reserve_tokens()). */
struct lt_hooks {
	/*
	 * A queued request of owner o was granted while the table served
	 * somebody else (a release, a withdrawal, an expiry). Called from
	 * inside that call; it must not call back into the table. waited_ms
	 * is now_ms minus the request's arrival.
	 */
	void	(*granted)(void *arg, struct lt_owner *o, uint64_t token,
		    uint64_t waited_ms);
	/* Returns the next fencing token (> every earlier one, < 2^63). */
	uint64_t (*next_token)(void *arg);
	void	*arg;
	/* A hold of o ran out of its ttl (locktable_expire()), and is gone.
	 * Called from inside that call; it must not call back into the
	 * table. May be NULL. */
	void	(*expired)(void *arg, struct lt_owner *o);
};

/* One LOCK/TRYLOCK request. keys point into the caller's buffer. */
struct lt_acquire {
	const char *const *keys;
	const size_t	*keylens;
	size_t		 nkeys;		/* duplicates allowed: count once */
	enum lt_mode	 mode;
	uint32_t	 limit;		/* >= 1; 1 is a plain lock */
	bool		 try;		/* never queue: LOCKED instead */
	int64_t		 max_waiters;	/* < 0: unlimited */
	uint64_t	 ttl_ms;	/* 0: none */
	size_t		 max_holds;	/* owner's holds after grant; 0: no cap */
	uint64_t	 timeout_ms;	/* the wait's timeout, 0: none; the
					 * table ignores it (backend etcd
					 * writes it for a front end that
					 * takes the session over) */
};

/*
 * Who stands in the way, for the error texts of TIMEOUT, LOCKED, BUSY and
 * DEADLOCK. key points into the table and is valid until the next call
 * that changes the table. holder is the longest-standing conflicting holder,
 * or NULL when the key is blocked only by requests queued ahead; then
 * waiter is the owner of the first of them (NULL if none).
 */
struct lt_blocker {
	const char	*key;
	size_t		 keylen;
	struct lt_owner	*holder;
	uint64_t	 held_ms;
	struct lt_owner	*waiter;
	uint64_t	 waited_ms;
	size_t		 nholders;
	size_t		 nwaiters;
};

struct lt_counters {
	uint64_t	keys;		/* gauges */
	uint64_t	held;		/* one per key and holder */
	uint64_t	waiting;	/* queued requests */
	uint64_t	grants;		/* counters since start */
	uint64_t	timeouts;
	uint64_t	cancels;	/* waits withdrawn by CANCEL */
	uint64_t	busy;
	uint64_t	deadlocks;
	uint64_t	deadlock_searches_cut;	/* gave up: too large */
	uint64_t	conflicts;
	uint64_t	releases;
	uint64_t	expired;
	uint64_t	disconnect_releases;
	uint64_t	max_waiters;	/* most waiters one key has had */
	uint64_t	bytes;		/* gauge: the table's memory */
	struct kl_hist	wait_ms;	/* request to grant */
	struct kl_hist	hold_ms;	/* grant to release, per key hold */
};

/* seed keys the hash of key bytes (random per process, so chosen keys
 * cannot flood one bucket). hooks is copied and may be NULL. */
struct locktable *locktable_new(const struct lt_hooks *hooks, uint64_t seed);
/*
 * Tokens by the range rather than one hook call per grant, in place of
 * hooks.next_token; before the first grant. reserve(hooks.arg, &end)
 * returns the first token of a range [first, end), first < end, every one
 * above every earlier token and below 2^63, which the table then issues
 * in order, calling reserve again once it is used up.
 */
void		 locktable_reserve_tokens(struct locktable *lt,
		    uint64_t (*reserve)(void *arg, uint64_t *end));

/*
 * The common LOCK (one key nobody holds or waits for) and UNLOCK (of a
 * plain entry) take a short path inside locktable_acquire() and
 * locktable_release() that changes the table exactly as the general one
 * would. On by default; only the tests turn it off, to run one sequence
 * both ways and compare.
 */
void		 locktable_set_short_paths(struct locktable *lt, bool on);

/*
 * Frees every key, hold and queued request; owners stay the caller's.
 * Free them first with locktable_owner_free() to have their releases
 * counted; an owner still alive is detached (emptied, nothing counted) and
 * must still be freed with locktable_owner_free(), which then does not
 * touch lt. NULL does nothing.
 */
void		 locktable_free(struct locktable *lt);

/* Frees the objects the table keeps for reuse (see table_bytes: they are
 * not counted in it). Nothing else changes. */
void		 locktable_trim(struct locktable *lt);

/* Shutdown: from now on nothing is granted; withdrawals and releases
 * only empty the table. */
void		 locktable_freeze(struct locktable *lt);

struct lt_owner	*locktable_owner_new(struct locktable *lt, uint64_t id,
		    void *udata);
/* Releases and withdraws everything of o (as locktable_release_owner with
 * LT_WHY_DISCONNECT), then frees it. NULL does nothing. After
 * locktable_free() it only frees o. */
void		 locktable_owner_free(struct locktable *lt, struct lt_owner *o,
		    uint64_t now_ms);
uint64_t	 locktable_owner_id(const struct lt_owner *o);
void		*locktable_owner_udata(const struct lt_owner *o);
/* backend etcd: an owner that outlives its connection drops it. */
void		 locktable_owner_set_udata(struct lt_owner *o, void *udata);
size_t		 locktable_owner_nholds(const struct lt_owner *o);
bool		 locktable_owner_is_waiting(const struct lt_owner *o);
/*
 * Seals every hold of o: while a sealed hold lasts its key admits nobody,
 * whatever the mode or limit (waiters keep waiting, TRYLOCK is LOCKED,
 * the blocker named is the sealed holder). A session's lock-delay
 * (keylockd-protocol(7), SESSIONS: Grace). The holds end as any do.
 * Returns how many were sealed now.
 */
size_t		 locktable_owner_seal(struct lt_owner *o);
/* The keys of o's queued request in request order (duplicates once) to
 * fn until it returns false, and when the request arrived. false if o is
 * not waiting. */
bool		 locktable_owner_wait_walk(const struct lt_owner *o,
		    bool (*fn)(void *arg, const char *key, size_t keylen),
		    void *arg, uint64_t *arrival_ms);
/* The mode and limit of o's queued request; false if o is not waiting. */
bool		 locktable_owner_wait_mode(const struct lt_owner *o,
		    enum lt_mode *mode, uint32_t *limit);

/* One key o holds, for RESUME (keylockd-protocol(7), SESSIONS). */
struct lt_own_view {
	const char	*key;
	size_t		 keylen;
	uint64_t	 token;		/* the keys of one grant share it */
	enum lt_mode	 mode;
	uint32_t	 limit;
	uint64_t	 expires_in_ms;	/* 0: no ttl; >= 1 while it has one */
};
/* Calls fn for each key o holds, oldest grant first and the keys of one
 * grant in the order it took them, until fn returns false. */
void		 locktable_owner_hold_walk(const struct locktable *lt,
		    const struct lt_owner *o, uint64_t now_ms,
		    bool (*fn)(void *arg, const struct lt_own_view *v),
		    void *arg);

/*
 * Asks for every key of a at once. Checks, in keylockd-protocol(7) order: LIMIT
 * (max_holds), HELD, CONFLICT, then, if the request cannot be granted at
 * once: BUSY, DEADLOCK, LOCKED (try). Returns KL_OK with *granted true and
 * *token set, or KL_OK with *granted false when the request was queued
 * (granted later through hooks.granted, or ended by locktable_withdraw), or
 * an error with *why filled (for BUSY, DEADLOCK, LOCKED) or the offending
 * key in why->key (HELD, CONFLICT). o must not be waiting already.
 *
 * The key in *why: for LOCKED the first key, in request order, that is not
 * free; for BUSY the first such key with max_waiters waiters; for DEADLOCK
 * the first key through which the request would wait on a cycle. why may
 * be NULL; a grant at once may leave it as it was, any other result
 * zeroes it first. Nothing is left in the table after an error.
 *
 * Requests proto_parse() never makes get SYNTAX (no keys, limit 0, shared
 * with limit > 1), BADKEY (a key of 0 or over KL_KEY_MAX bytes) or LIMIT
 * (over KL_KEYS_HARD_MAX keys, or o already waiting). KL_ERR_NOMEM when
 * memory ran out, with nothing changed.
 */
enum kl_err	 locktable_acquire(struct locktable *lt, struct lt_owner *o,
		    const struct lt_acquire *a, uint64_t now_ms, bool *granted,
		    uint64_t *token, struct lt_blocker *why);

/* Fills *why for o's queued request: the first of its keys that blocks it.
 * Returns false if o is not waiting. */
bool		 locktable_wait_blocker(struct locktable *lt,
		    const struct lt_owner *o, uint64_t now_ms,
		    struct lt_blocker *why);

/* Ends o's queued request (timeout, shutdown). Grants whoever it held
 * back. Returns false if o was not waiting. */
bool		 locktable_withdraw(struct locktable *lt, struct lt_owner *o,
		    uint64_t now_ms, enum lt_why why);

/*
 * Releases o's holds on these keys (duplicates count once). If any key is
 * not held by o, releases nothing and returns KL_ERR_NOTHELD with
 * *bad_index set to that key's index. Otherwise *n is the number released.
 * Neither n nor bad_index may be NULL.
 */
enum kl_err	 locktable_release(struct locktable *lt, struct lt_owner *o,
		    const char *const *keys, const size_t *keylens,
		    size_t nkeys, uint64_t now_ms, size_t *n, size_t *bad_index);

/*
 * Ends o's hold on one key, counted as ended for why: LT_WHY_UNLOCK in
 * releases, LT_WHY_DISCONNECT in disconnect_releases, LT_WHY_EXPIRED in
 * expired (backend etcd applies a release whose cause only the owner's
 * front end knows). false if o does not hold key.
 */
bool		 locktable_release_why(struct locktable *lt,
		    struct lt_owner *o, const char *key, size_t keylen,
		    uint64_t now_ms, enum lt_why why);

/* Withdraws o's wait and releases every hold; returns the holds released. */
size_t		 locktable_release_owner(struct locktable *lt,
		    struct lt_owner *o, uint64_t now_ms, enum lt_why why);

/* REFRESH: restarts the ttl of o's holds on these keys (all or nothing, as
 * locktable_release). ttl_ms >= 1, else SYNTAX. Out of memory:
 * KL_ERR_NOMEM, nothing changed. */
enum kl_err	 locktable_refresh(struct locktable *lt, struct lt_owner *o,
		    const char *const *keys, const size_t *keylens,
		    size_t nkeys, uint64_t ttl_ms, uint64_t now_ms, size_t *n,
		    size_t *bad_index);

/* Ends every hold whose ttl ran out by now_ms; returns how many. */
size_t		 locktable_expire(struct locktable *lt, uint64_t now_ms);
/* When the next ttl runs out, or UINT64_MAX if no hold has a ttl. */
uint64_t	 locktable_next_expiry(const struct locktable *lt);

const struct lt_counters *locktable_counters(const struct locktable *lt);

/* Read-only views for INFO and STATS. */
const struct lt_key *locktable_find(const struct locktable *lt,
		    const char *key, size_t keylen);

struct lt_holder_view {
	struct lt_owner	*owner;
	uint64_t	 token;
	enum lt_mode	 mode;
	uint64_t	 held_ms;
	uint64_t	 expires_in_ms;	/* 0: no ttl; >= 1 while it has one */
};
struct lt_waiter_view {
	struct lt_owner	*owner;
	enum lt_mode	 mode;
	uint64_t	 waited_ms;
	size_t		 nkeys;		/* keys of the whole request */
};
struct lt_key_view {
	const char	*key;
	size_t		 keylen;
	uint32_t	 limit;
	size_t		 nholders;
	size_t		 nwaiters;
	uint64_t	 max_waiters;	/* most waiters this entry has had */
	uint64_t	 wait_ms_total;	/* waits of grants on this entry */
};
void		 locktable_key_view(const struct lt_key *k,
		    struct lt_key_view *v);
/* Calls fn for each holder in grant order, then each waiter in queue
 * order; stops early if fn returns false. */
void		 locktable_key_walk(const struct locktable *lt,
		    const struct lt_key *k, uint64_t now_ms,
		    bool (*holder)(void *, const struct lt_holder_view *),
		    bool (*waiter)(void *, const struct lt_waiter_view *),
		    void *arg);

/* Up to max keys, most waiters first (ties: any order); keys with no
 * waiters fill the rest, in no order that depends on the hash. Returns
 * how many were stored. Cost: the number of keys with waiters, plus max,
 * plus the owners that hold nothing; not the size of the table. */
size_t		 locktable_hot_keys(const struct locktable *lt,
		    const struct lt_key **out, size_t max);
/* The same over the keys keep() accepts (keylockd-protocol(7), ACCESS
 * CONTROL: a user's STATS); the keys with no waiters that fill the rest
 * may then cost a walk over every hold. */
size_t		 locktable_hot_keys_filter(const struct locktable *lt,
		    const struct lt_key **out, size_t max,
		    bool (*keep)(void *, const char *, size_t), void *arg);

/*
 * Live upgrade (lt_state.c, kstate.h): the whole table, its owners in
 * order with their holds and waits, and its counters, into w; each (or
 * NULL) learns each owner's number in that order, by which the caller's
 * own state names it. Only between event-loop turns (nothing left to
 * settle); false on no memory.
 */
struct ks_writer;
struct ks_reader;
size_t		 locktable_state_size(const struct locktable *lt);	/* about */
bool		 locktable_state_write(const struct locktable *lt,
		    struct ks_writer *w, void (*each)(void *arg,
		    struct lt_owner *o, uint32_t index), void *arg);
/*
 * Rebuilds what locktable_state_write() wrote into lt, which must be
 * empty. Each owner is created with its id and NULL udata and handed to
 * adopt(arg, o), in the order written; adopt returns false to refuse the
 * state. shift_ms is added to every ttl expiry (the pause of the
 * hand-off). *next_token is the next token the writer would have issued:
 * every token in the table is below it. false with the reason in r->why:
 * lt is then half built, to be freed with locktable_free(), and then each
 * adopted owner with locktable_owner_free().
 */
bool		 locktable_state_read(struct locktable *lt, struct ks_reader *r,
		    uint64_t shift_ms, bool (*adopt)(void *arg,
		    struct lt_owner *o), void *arg, uint64_t *next_token);

/* Checks every internal invariant (indexes, counts, FIFO, compatibility,
 * no grantable request left queued); for tests and fuzzers. Returns NULL
 * or a static description of the first broken one. */
const char	*locktable_check(const struct locktable *lt);

#endif /* LOCKTABLE_H */
