/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the files of backend etcd share (keylockd(8), BACKEND ETCD):
 * backend_etcd.c (the seam's operations, the lease, start, loss and
 * recovery), backend_etcd_replica.c (the replicated lock table: watch events and
 * ranges applied in revision order) and backend_etcd_commit.c (group commit: the
 * writes of every client since the last transaction, in the next one).
 *
 * etcd's keys, under the prefix P:
 *   P q/KEY/FE-SEQ   one entry per key of a LOCK; all of one LOCK's in one
 *                    transaction. FE is the owner front end's lease id and
 *                    SEQ its count of LOCKs, both 16 hex digits; the value
 *                    is the request (ereq_value_*()).
 *   P fe/FE          a front end's heartbeat, rewritten every TTL/3 with
 *                    its keepalive; its watch must see each one.
 * Everything a front end writes carries its lease.
 */
#ifndef ETCD_BACKEND_H
#define ETCD_BACKEND_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "etcd.h"
#include "locktable.h"

struct event;

#define EBE_ID_HEX	16		/* digits of FE and of SEQ */
#define EBE_VALUE_VERSION "k1"
#define EBE_TOKEN_SHIFT	20		/* token: revision << 20 | n */
#define EBE_RANGE_PAGE	1000		/* entries per range while rebuilding */
#define EBE_RETRY_MS	100		/* first pause before trying again */
#define EBE_RETRY_MAX_MS 1000
#define EBE_HOLD_MS	50		/* most a batch waits for a reply */
#define EBE_LINGER_US	3000		/* most it waits after one, for the
					 * clients that reply answered */
#define EBE_LINGER_MIN	8		/* ops of a reply that make it wait */
#define EBE_MARGIN_MIN_MS 1000		/* least lease safety margin */

enum ebe_state {
	EBE_STARTING,		/* lease, heartbeat, range, watch */
	EBE_READY,
	EBE_RESYNC,		/* the watch fell behind: range again */
	EBE_LOST,		/* lease lost or at risk: clients dropped */
	EBE_STOPPING
};

enum ereq_state {
	REQ_PUTTING,		/* written, not yet decided by the table */
	REQ_WAITING,		/* queued in the table */
	REQ_HELD,		/* granted: its entries' keys are held */
	REQ_REFUSED,		/* the table said no: entries to delete */
	REQ_GONE		/* withdrawn from the table */
};

/*
 * What the replica has applied of an entry, the same on every front end:
 * ABSENT -> LIVE -> GONE, or ABSENT -> HELD -> GONE when its request is
 * granted before its put is applied (the first entry of a LOCK decides
 * for all), or LIVE -> HELD when a waiter is granted.
 */
enum eentry_rep {
	ENT_ABSENT = 0,		/* its put not applied yet */
	ENT_LIVE,		/* put applied; its key not held */
	ENT_HELD,		/* put applied; its key held in the table */
	ENT_GONE		/* its delete applied (or the table cleared) */
};

struct ereq;
struct eowner;

/* One etcd entry: one key of one LOCK. */
struct eentry {
	struct ereq	*req;
	char		*ekey;		/* the whole etcd key */
	size_t		 ekeylen;
	const char	*lkey;		/* the lock key, inside ekey */
	size_t		 lkeylen;
	enum eentry_rep	 rep;
	bool		 put_acked;	/* ours: the put is committed */
	bool		 del_queued;	/* ours: a delete is on its way */
	bool		 del_wait;	/* ours: it waits for the put */
	bool		 del_reply;	/* its ack completes the owner's
					 * UNLOCK (with del_wait) */
	bool		 releasing;	/* ours: UNLOCK, ttl or close asked */
	enum lt_why	 why;		/* ours: which (UNLOCK, EXPIRED,
					 * DISCONNECT): the counter its
					 * release bumps here */
	uint64_t	 op_gen;	/* ours: its delete's application
					 * completes the owner's open UNLOCK
					 * numbered so (eowner.op_gen) */
	uint64_t	 ttl_ms;	/* ours: the hold's ttl; 0: none */
	struct event	*ttl;		/* ours: its expiry */
	struct eentry	*hnext;		/* ebe.entries, by ekey */
	struct eentry	*knext;		/* ebe.held, by owner and lkey */
};

/* One LOCK request, ours or another front end's. */
struct ereq {
	struct ebe		*be;
	uint64_t		 fe, seq;
	struct eowner		*owner;
	enum ereq_state		 state;
	bool			 ours;
	bool			 replied;	/* ours: done() was called */
	bool			 withdrawing;	/* ours: its wait is ending */
	bool			 deadline;	/* ours: timed out undecided */
	enum lt_why		 why;		/* of the withdrawal */
	struct lt_acquire	 a;		/* keys point into ent[] */
	const char		**keys;
	size_t			*keylens;
	size_t			 nent, nlive;
	struct eentry		*ent;
	char			*value;		/* ours: what the puts write */
	size_t			 valuelen;
	uint64_t		 ttl_ms;
	int			 refs;		/* commit items holding it */
	TAILQ_ENTRY(ereq)	 entry;		/* owner->reqs */
	struct ereq		*hnext;		/* ebe.reqs, by fe and seq */
};
TAILQ_HEAD(ereqq, ereq);

/* A client in the replica: ours (with a connection, or gone and waiting
 * for its entries' deletes) or another front end's. */
struct eowner {
	struct ebe		*be;
	uint64_t		 fe, client;
	struct lt_owner		*lo;
	bool			 ours;
	bool			 gone;		/* ours: its connection closed */
	struct ereqq		 reqs;
	struct ereq		*open;		/* ours: the LOCK being handled */
	enum be_op		 op;		/* ours: the open operation */
	bool			 op_open;
	size_t			 op_left;	/* its deletes not yet acked */
	size_t			 op_unseen;	/* nor applied by the replica */
	uint64_t		 op_gen;	/* numbers the open operation */
	uint64_t		 op_n;		/* its result */
	TAILQ_ENTRY(eowner)	 entry;		/* ebe.owners */
	struct eowner		*hnext;		/* ebe.by_id */
	struct eowner		*pnext;		/* ebe.by_lo */
};
TAILQ_HEAD(eownerq, eowner);

/* A live entry of a range: what a rebuild applies. */
struct erange_kv {
	char	*key;
	size_t	 keylen;
	char	*value;
	size_t	 valuelen;
	int64_t	 create_revision;
	uint64_t fe, seq;
};

/* A chained hash table of one of the structs above. */
struct ehash {
	void		**b;
	size_t		  nb, n;
};

/* What goes into one transaction together. */
enum eitem_kind {
	ITEM_PUT,		/* every entry of one LOCK */
	ITEM_DEL,		/* deletes of entries */
	ITEM_HEARTBEAT		/* P fe/FE */
};

struct eitem {
	TAILQ_ENTRY(eitem)	 entry;
	enum eitem_kind		 kind;
	struct ereq		*req;		/* ITEM_PUT */
	struct eentry		**del;		/* ITEM_DEL */
	size_t			 ndel;
	struct eowner		*reply;		/* its ack completes this
						 * owner's UNLOCK */
	int			 tries;
	uint64_t		 queued_ms;
};
TAILQ_HEAD(eitemq, eitem);

struct ebe {
	struct backend		 be;		/* first: the seam's view */
	struct be_hooks		 hooks;
	struct event_base	*base;
	struct etcd		*etcd;
	enum ebe_state		 state;
	bool			 frozen;
	bool			 in_new;	/* inside backend_etcd_new() */
	bool			 revoked;	/* ebe_free(): the lease is */
	char			 why[320];	/* ERR BACKEND's text */
	char			 failed[256];	/* the last step's failure, in
						 * full: for the log and a
						 * start-up error only */
	/* entries read back from etcd and left out (ebe_entry_decode),
	 * counted in count->bad_entries */
	uint64_t		 bad_unlogged;	/* since the last warning */
	uint64_t		 bad_log_ms;	/* of the last warning */

	/* settings */
	char			*prefix;
	size_t			 prefixlen;
	int64_t			 ttl_s;
	int			 timeout_ms;
	size_t			 max_ops;
	int			 max_inflight;	/* transactions on the wire */
	uint64_t		 margin_ms;

	/* the lease; fe is its id, 0 while there is none */
	uint64_t		 fe;
	uint64_t		 old_fe;	/* to revoke after a loss */
	uint64_t		 seq;
	uint64_t		 lease_until;	/* it lasts at least until */
	struct event		*keepalive;
	struct event		*guard;		/* lease_until - margin */
	struct etcd_call	*ka_call;
	uint64_t		 ka_sent;
	uint64_t		 hb_count;
	int64_t			 hb_rev;	/* our heartbeat's revision */
	uint64_t		 hb_acked_ms;	/* its txn's ack */
	bool			 hb_seen;

	/* the replica */
	struct locktable	*lt;
	uint64_t		 seed;
	int64_t			 rev;		/* applied revision */
	uint64_t		 rev_grants;	/* grants at rev */
	bool			 rebuilding;	/* tokens are not sent */
	bool			 clearing;	/* grants are ignored */
	bool			 range_flat;	/* rebuild from the newest range
						 * alone (erange, in the
						 * replica) */
	struct eownerq		 owners;
	struct ehash		 by_id;		/* eowner by (fe, client) */
	struct ehash		 by_lo;		/* eowner by lt_owner */
	struct ehash		 reqs;		/* ereq by (fe, seq) */
	struct ehash		 entries;	/* eentry by etcd key */
	struct ehash		 held;		/* our held eentry by owner+key */

	/* rebuilding from a range */
	struct erange		*range;

	/* group commit */
	struct eitemq		 queue;
	size_t			 nqueue;
	size_t			 queue_ops;	/* etcd operations queued */
	int			 inflight;
	struct event		*hold;		/* the held batch goes */
	uint64_t		 linger_until;	/* us; 0: no wait after a reply */
	size_t			 linger_ops;	/* queue_ops that end it early */
	struct event		*retry;		/* failed deletes, again */
	struct eitemq		 later;		/* waiting for retry */
	struct event		*start;		/* steps of start/recovery */
	int			 start_pause_ms;

	/* losses and stops so far: a transaction sent under an older one is
	 * stale when its reply comes */
	uint64_t		 gen;
	struct be_counters	*count;		/* hooks.counters or own */
	struct be_counters	 own;
};

/* backend_etcd.c */
struct config;
struct ebe	*ebe_create(const struct config *cfg, struct event_base *base,
		    const struct be_hooks *hooks, char *err, size_t errlen);
void		 ebe_fail(struct ebe *e, const char *fmt, ...)
		    __attribute__((format(printf, 2, 3)));
bool		 ebe_lease_safe(struct ebe *e);
void		 ebe_lose(struct ebe *e, const char *why);
void		 ebe_done(struct ebe *e, struct eowner *o,
		    const struct be_result *r);
void		 ebe_end_turn(struct ebe *e);
void		 ebe_ready(struct ebe *e, int64_t rev);
void		 ebe_release_acked(struct ebe *e, struct eowner *o, size_t n,
		    const char *why);
void		 ebe_release_applied(struct ebe *e, struct eentry *x);

/* backend_etcd_replica.c */
int		 ehash_init(struct ehash *h);
void		 ehash_cleanup(struct ehash *h);
uint64_t	 ehash_bytes(const void *p, size_t len, uint64_t seed);
struct eowner	*eowner_get(struct ebe *e, uint64_t fe, uint64_t client,
		    bool create);
struct eowner	*eowner_of(struct ebe *e, const struct lt_owner *lo);
struct eowner	*eowner_new_ours(struct ebe *e, uint64_t id, void *udata);
void		 eowner_maybe_free(struct eowner *o);
struct ereq	*ereq_new(struct ebe *e, struct eowner *o, uint64_t fe,
		    uint64_t seq, const struct lt_acquire *a);
void		 ereq_maybe_free(struct ereq *r);
struct eentry	*eentry_held(struct ebe *e, const struct eowner *o,
		    const char *key, size_t keylen);
int		 ereq_value(struct ereq *r, const char *name);
void		 replica_ttl_arm(struct eentry *x, uint64_t ms);
void		 replica_events(void *arg, const struct etcd_event *ev,
		    size_t n, int64_t header_revision);
void		 replica_clear(struct ebe *e);
/* The table from the live entries of a range at rev (sorted here). */
/*
 * An entry read back from etcd, prefix q/KEY/FE-SEQ (its shape checked by
 * the caller) with the value ereq_value() writes: its request into
 * client, a, keys and keylens (max keys, pointing into v), checked as a
 * client's LOCK is (the key rules, the options' bounds) and its own KEY
 * one of the request's. NULL, or what is wrong: such an entry is left out
 * of the table with a warning, as if it were not there (a front end that
 * wrote it is broken, or someone forged it).
 */
const char	*ebe_entry_decode(const char *k, size_t klen, size_t prefixlen,
		    const char *v, size_t vlen, uint64_t *client,
		    struct lt_acquire *a, const char **keys, size_t *keylens,
		    size_t max);
/* s for a log line: control and non-ASCII bytes as '?', cut to fit cap
 * with "...". Returns the length written. */
size_t		 ebe_log_safe(const char *s, size_t len, char *out,
		    size_t cap);
void		 replica_build(struct ebe *e, struct erange_kv *kvs, size_t n,
		    int64_t rev);
int		 replica_rebuild_start(struct ebe *e);
void		 replica_free(struct ebe *e);
int		 replica_new(struct ebe *e);
uint64_t	 replica_next_token(void *arg);
void		 replica_granted(void *arg, struct lt_owner *o, uint64_t token,
		    uint64_t waited_ms);
/* Applied revision and the lock entry's key for a lock key and id. */
size_t		 eentry_key(const struct ebe *e, char *out, const char *lkey,
		    size_t lkeylen, uint64_t fe, uint64_t seq);

/* backend_etcd_commit.c */
int		 commit_put(struct ebe *e, struct ereq *r);
/* Deletes of entries (those not already on their way); reply: whose
 * open operation completes with their ack, or NULL. Returns how many
 * were queued now or wait for their put's ack. */
size_t		 commit_delete(struct ebe *e, struct eentry **ents, size_t n,
		    struct eowner *reply);
void		 commit_delete_req(struct ebe *e, struct ereq *r);
/* r's put is known to be made: the deletes that waited for it go. */
void		 commit_unwait(struct ebe *e, struct ereq *r);
int		 commit_heartbeat(struct ebe *e);
void		 commit_flush(struct ebe *e);
void		 commit_drop(struct ebe *e);

#endif /* ETCD_BACKEND_H */
