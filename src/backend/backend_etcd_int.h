/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the files of backend etcd share (keylockd(8), BACKEND ETCD). Three
 * owners, each struct private to its file: backend_etcd.c (struct ebe:
 * the seam's operations, the lease, start, loss and recovery) holds a
 * struct replica (backend_etcd_replica.c: the lock table every front end
 * builds from the same watch events and ranges; it never writes to etcd)
 * and a struct committer (backend_etcd_commit.c: group commit, every
 * client's writes since the last transaction in the next one). The two
 * never call each other; each reports to the backend through its hooks,
 * and the backend connects them. The objects they pass are below, each
 * field written by one of them (its comment says which).
 *
 * etcd's keys, under the prefix P:
 *   P q/KEY/FE-SEQ   one entry per key of a LOCK; all of one LOCK's in one
 *                    transaction. FE is the owner front end's lease id and
 *                    SEQ its count of LOCKs, both 16 hex digits; the value
 *                    is the request (ereq_value_*()).
 *   P fe/FE          a front end's heartbeat, rewritten every TTL/3 with
 *                    its keepalive; its watch must see each one. Also its
 *                    fence: every transaction with puts requires that
 *                    it has not been written since the newest revision
 *                    the front end knew when it sent it, and the deletes
 *                    of a LOCK whose put may land late rewrite it, so
 *                    that such a put, landing after them, fails.
 *   P s/H            a session (keylockd-protocol(7), SESSIONS: Across
 *                    front ends): H the hex SHA-256 of its raw ID, the
 *                    value "s2 CLIENT GRACE_MS FE DETACHED USER\nNAME"
 *                    (FE the front end it is attached to, 16 hex
 *                    digits; DETACHED the wall-clock ms at which its
 *                    connection there ended, 0 while attached; USER and
 *                    NAME may be empty, and then so is their separator),
 *                    under the session's own lease L; "s1 CLIENT
 *                    GRACE_MS FE USER" from earlier front ends.
 * Everything a front end writes carries its lease, but a session's: its
 * record and its owners' entries (P q/KEY/L-SEQ) carry L, those of its
 * channels too (keylockd-protocol(7), CHANNELS): each channel's owner is
 * (L, X), X a client id of its own (EBE_CHAN_CLIENT), and its entries'
 * value names its channel and the session's client. A SESSION after the
 * connection's LOCKs puts the record and its held entries again (same
 * keys, same values) under L, in one transaction: an owner is named by
 * the lease its entries carry (FE until then, L from then on), and an
 * entry's key keeps naming its request (FE-SEQ).
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
#define EBE_SEQ_SHIFT	24		/* SEQ >= applied revision << 24 */
#define EBE_RANGE_PAGE	1000		/* entries per range while rebuilding */
#define EBE_RETRY_MS	100		/* first pause before trying again */
#define EBE_RETRY_MAX_MS 1000
#define EBE_HOLD_MS	50		/* most a batch waits for a reply */
#define EBE_LINGER_US	3000		/* most it waits after one, for the
					 * clients that reply answered */
#define EBE_LINGER_MIN	8		/* ops of a reply that make it wait */
#define EBE_UNLOCK_LINGER_US 1000	/* most an UNLOCK's deletes wait, with
					 * nothing on the wire, for the
					 * client's next LOCK */
#define EBE_MARGIN_MIN_MS 1000		/* least lease safety margin */
#define EBE_REAP_LAG_MS	1000		/* a session's hold or wait that
					 * outlived its ttl or deadline by
					 * etcd-timeout and this much is
					 * ended by any front end (its own
					 * would have ended it by then): the
					 * watch's lag between two front
					 * ends, and the owner's commit */
#define EBE_CHAN_CLIENT	(UINT64_C(1) << 62)	/* a session channel's
					 * client id: this bit, and a SEQ
					 * (unique under L, as SEQ is); no
					 * connection's id has it */

/*
 * What the replica has applied of an entry, the same on every front end:
 * ABSENT -> LIVE -> GONE, or ABSENT -> HELD -> GONE when its request is
 * granted before its put is applied (the first entry of a LOCK decides
 * for all), or LIVE -> HELD when a waiter is granted. Written by the
 * replica alone.
 */
enum eentry_rep {
	ENT_ABSENT = 0,		/* its put not applied yet */
	ENT_LIVE,		/* put applied; its key not held */
	ENT_HELD,		/* put applied; its key held in the table */
	ENT_GONE		/* its delete applied (or the table cleared) */
};

/*
 * What we have asked of etcd for an entry of ours, written by the
 * committer alone: PUTTING -> PUT -> DELETING, or PUTTING -> DEL_WAIT ->
 * DELETING when the delete is asked before the put is acked (it waits:
 * a put and a delete of one key in one transaction are refused, and a
 * put tried again after its delete would make the entry anew).
 * Another front end's entries stay PUTTING.
 */
enum eentry_w {
	W_PUTTING = 0,		/* the put is not known to be made */
	W_PUT,			/* the put is committed */
	W_DEL_WAIT,		/* its delete waits for the put's ack */
	W_DELETING		/* its delete is queued or sent */
};

/* The table's verdict on a request, the same on every front end;
 * written by the replica alone. */
enum ereq_state {
	REQ_PUTTING,		/* written, not yet decided by the table */
	REQ_WAITING,		/* queued in the table */
	REQ_HELD,		/* granted: its entries' keys are held */
	REQ_REFUSED,		/* the table said no: entries to delete */
	REQ_GONE		/* withdrawn from the table */
};

/*
 * What our client has been told of its LOCK: ASKED -> ANSWERED (a grant
 * it holds) or ENDED (an error: its entries go); ASKED -> DEADLINE (its
 * wait ran out before the verdict: a grant still wins, a queue turns it
 * into WITHDRAWING); ASKED -> WITHDRAWING (CANCEL or a timeout: answered
 * when its delete is applied) -> ENDED; ANSWERED -> ENDED when the
 * connection closes. Written where the client is answered (ebe_answer())
 * and where a withdrawal starts.
 */
enum ereq_side {
	SIDE_THEIRS = 0,	/* another front end's: nobody to tell here */
	SIDE_ASKED,
	SIDE_DEADLINE,
	SIDE_WITHDRAWING,
	SIDE_ANSWERED,
	SIDE_ENDED		/* told, or nobody to tell: its entries go */
};

/* A client in the replica; ours move IDLE -> LOCK or RELEASE -> IDLE
 * while connected, then GONE. Written by backend_etcd.c. */
enum eowner_state {
	OWN_THEIRS = 0,		/* another front end's, or one of ours that a
				 * range shows and nobody answers for */
	OWN_IDLE,		/* ours, connected, nothing open */
	OWN_LOCK,		/* ours: its LOCK (open) waits for a verdict */
	OWN_SESSION,		/* ours: its SESSION or RESUME waits */
	OWN_GONE		/* ours: the connection closed; freed with its
				 * last request */
};

struct ereq;
struct eowner;
struct esession;

/* One etcd entry: one key of one LOCK. */
struct eentry {
	struct ereq	*req;
	char		*ekey;		/* the whole etcd key */
	size_t		 ekeylen;
	const char	*lkey;		/* the lock key, inside ekey */
	size_t		 lkeylen;
	enum eentry_rep	 rep;
	enum eentry_w	 w;
	enum lt_why	 why;		/* ours: what asked its delete
					 * (UNLOCK, EXPIRED, DISCONNECT): the
					 * counter its release bumps here */
	uint64_t	 barrier;	/* ours: an UNLOCK that asked its
					 * delete is answered, and reads of
					 * the table wait for the replica to
					 * apply it: the reads' epoch it
					 * counts in (backend_etcd.c); 0:
					 * none */
	struct event	*ttl;		/* its ttl's end: ours, its
					 * expiry; another's, a session's
					 * hold its front end has not
					 * ended (replica_ttl_arm()) */
	uint64_t	 due_ms;	/* the replica's clock when its
					 * ttl runs out; 0: none */
	int64_t		 crev;		/* the replica's: its put's
					 * revision (0: not applied) */
	int64_t		 mrev;		/* the replica's: the revision of
					 * its last put (a REFRESH's) */
	struct eentry	*hnext;		/* replica's entries, by ekey */
	struct eentry	*knext;		/* replica's held, by owner, lkey */
};

/* One LOCK request, ours or another front end's. */
struct ereq {
	struct replica		*rp;
	uint64_t		 fe, seq;
	struct eowner		*owner;
	enum ereq_state		 state;
	enum ereq_side		 side;
	enum lt_why		 why;		/* of the withdrawal */
	struct lt_acquire	 a;		/* keys point into ent[] */
	const char		**keys;
	size_t			*keylens;
	size_t			 nent, nlive;
	struct eentry		*ent;
	char			*value;		/* ours: what the puts write */
	size_t			 valuelen;
	uint64_t		 ttl_ms;	/* its grant's ttl (the
						 * value's t=), 0: none */
	uint64_t		 put_ms;	/* the replica's clock when
						 * its first put was applied
						 * here (its wait's start) */
	struct event		*wait;		/* its wait's deadline
						 * (a.timeout_ms, the value's
						 * w=): ours, taken over with
						 * a session; another's, a
						 * session's wait its front
						 * end has not ended
						 * (replica_wait_arm()) */
	int			 refs;		/* commit items holding it */
	bool			 late;		/* the committer's: a try of
						 * its put may be carried out
						 * late, after its delete: that
						 * delete moves our fence */
	TAILQ_ENTRY(ereq)	 entry;		/* owner->reqs */
	struct ereq		*hnext;		/* replica's reqs, by fe, seq */
};
TAILQ_HEAD(ereqq, ereq);

/* Does our client wait for r's answer? */
static inline bool
ereq_awaited(const struct ereq *r)
{
	return r->side == SIDE_ASKED || r->side == SIDE_DEADLINE ||
	    r->side == SIDE_WITHDRAWING;
}

struct eowner {
	struct replica		*rp;
	uint64_t		 fe, client;
	struct lt_owner		*lo;
	enum eowner_state	 state;
	struct ereqq		 reqs;
	struct ereq		*open;		/* OWN_LOCK: that LOCK */
	size_t			 dels_out;	/* the committer's: deletes of
						 * its entries sent, or waiting
						 * for their put's ack or to be
						 * tried again, and not acked:
						 * its puts wait for them */
	uint64_t		 lease;		/* its entries': 0, the front
						 * end's; a session's L */
	struct esession		*sess;		/* ours: its session's, on
						 * channel 0 */
	bool			 refreshing;	/* ours: its REFRESH's put on
						 * the wire (backend_etcd.c's
						 * struct erefresh points to
						 * it): kept until its reply */
	uint32_t		 chan;		/* a session's channel N (its
						 * entries' "@N"); 0: channel
						 * 0, or no session's */
	uint64_t		 sclient;	/* chan != 0: the session's
						 * client id */
	struct eowner		*fnext;		/* replica's by_chan */
	char			*name;		/* THEIRS: the NAME its last
						 * LOCK carried; NULL: none */
	TAILQ_ENTRY(eowner)	 entry;		/* replica's owners */
	struct eowner		*hnext;		/* replica's by_id */
	struct eowner		*pnext;		/* replica's by_lo */
};
TAILQ_HEAD(eownerq, eowner);

/* What an entry's value says of a session's channel (chan 0: none). */
struct echan {
	uint32_t	 chan;
	uint64_t	 sclient;
};

/* A session's record (P s/H), decoded. */
struct erecord {
	uint64_t	 client;
	uint64_t	 grace_ms;
	uint64_t	 fe;		/* the front end it is attached to */
	uint64_t	 lease;		/* L, the record's own */
	uint64_t	 detached_at;	/* wall-clock ms; 0: attached */
	const char	*user;		/* into the value; NULL: none */
	size_t		 userlen;
	const char	*name;		/* into the value; NULL: none */
	size_t		 namelen;
};

#define EBE_HASH_HEX	64		/* digits of H */
#define EBE_RECORD_VERSION "s2"
#define EBE_RECORD_V1	"s1"		/* read, never written */

/* A live entry of a range: what a rebuild applies. */
struct erange_kv {
	char	*key;
	size_t	 keylen;
	char	*value;
	size_t	 valuelen;
	int64_t	 create_revision;
	int64_t	 mod_revision;
	int64_t	 lease;		/* the lease it carries now */
	uint64_t fe, seq;
};

/* ---- backend_etcd.c: the seam, the lease, start-up and loss ---- */

struct config;
struct ebe;

/* The backend before its start-up: settings, the etcd client (nothing
 * sent yet), an empty replica and committer. */
struct ebe	*ebe_create(const struct config *cfg, struct event_base *base,
		    const struct be_hooks *hooks, char *err, size_t errlen);
/* The replica's tests: serve as front end fe with a lease that lasts,
 * without etcd. */
void		 ebe_assume(struct ebe *e, uint64_t fe);
/* And sessions (backend_etcd.c, "sessions across front ends"): lo's
 * session hash (EBE_HASH_HEX digits) is ours under lease, recorded at
 * rev; or lo resumes client's session hash, its record read at rev and
 * put again naming us. */
void		 ebe_assume_session(struct ebe *e, struct lt_owner *lo,
		    const char *hash, uint64_t lease, uint64_t grace_ms,
		    int64_t rev);
void		 ebe_assume_resume(struct ebe *e, struct lt_owner *lo,
		    const char *hash, uint64_t lease, uint64_t client,
		    uint64_t grace_ms, int64_t rev);
bool		 ebe_lost(const struct ebe *e);
void		 ebe_lose(struct ebe *e, const char *why);
struct replica	*ebe_replica(struct ebe *e);
struct backend	*ebe_seam(struct ebe *e);

/* ---- backend_etcd_replica.c: the replicated table ---- */

/* What the replica reports to the backend. */
struct replica_hooks {
	/* Our request r's LOCK is answered res (r->side says whether one
	 * is waited for). */
	void	(*answer)(void *arg, struct ereq *r,
		    const struct be_result *res);
	/* Our r is queued in the table (its client waits for others). */
	void	(*queued)(void *arg, struct ereq *r);
	/* Our entries to delete: x, or every one of r's (x NULL). */
	void	(*del)(void *arg, struct ereq *r, struct eentry *x);
	/* The delete of our entry x is applied (before r may be freed). */
	void	(*deleted)(void *arg, struct eentry *x);
	/* The table is built at rev from a range: watch from rev + 1. */
	void	(*built)(void *arg, int64_t rev);
	/* Our heartbeat at rev is seen. */
	void	(*heartbeat)(void *arg, int64_t rev);
	/* Session record hash is put (rec) or deleted (NULL) at rev. */
	void	(*record)(void *arg, const char *hash,
		    const struct erecord *rec, int64_t rev);
	/* Front end fe's heartbeat is deleted: its lease has ended. May
	 * be NULL. */
	void	(*fe_gone)(void *arg, uint64_t fe);
	/*
	 * Another front end's r outlived its ttl (x, a hold) or its wait's
	 * deadline (x NULL) by the reap margin (every REFRESH is
	 * written, so every replica counts the same ttl): delete x, or
	 * r's live entries, each on the condition that it is still the put
	 * this replica applied (x->mrev). True if that was asked (the
	 * replica asks again later, until the delete is applied); false:
	 * not, nor later. May be NULL.
	 */
	bool	(*reap)(void *arg, struct ereq *r, struct eentry *x);
	/* Our o's hold was deleted by someone else before its ttl ran out
	 * here (or it has none): its client's locks are lost. May be
	 * NULL. */
	void	(*lost)(void *arg, struct eowner *o);
	/* May a grant be told to a client now (ebe_lease_safe)? */
	bool	(*lease_safe)(void *arg);
	void	(*lose)(void *arg, const char *why);	/* everything */
	void	(*fail)(void *arg, const char *why);	/* a range */
	void	(*end_turn)(void *arg);
	void	*arg;
};

/* Another front end's client o (OWN_THEIRS): its NAME as its last LOCK
 * carried it, or NULL. */
const char	*eowner_name(const struct eowner *o);
struct replica	*replica_new(struct event_base *base, struct etcd *etcd,
		    const char *prefix, struct be_counters *count,
		    const struct replica_hooks *hooks);
void		 replica_free(struct replica *rp);
/* Our lease id (0: none): our requests' entries are named by it. */
void		 replica_set_fe(struct replica *rp, uint64_t fe);
/* How long past its ttl or deadline another front end's hold or wait
 * is left to it before hooks.reap (0: never). */
void		 replica_set_reap(struct replica *rp, uint64_t ms);
/* Shutdown: no grant is told to a client from now on. */
void		 replica_freeze(struct replica *rp);
const struct locktable *replica_table(const struct replica *rp);
int64_t		 replica_rev(const struct replica *rp);	/* applied */
struct eownerq	*replica_owners(struct replica *rp);
void		 replica_events(struct replica *rp,
		    const struct etcd_event *ev, size_t n,
		    int64_t header_revision);
/* Drops every request and every owner but our connected ones. */
void		 replica_clear(struct replica *rp);
/* A fresh range of every entry, then the table from it (hooks.built);
 * flat: from the newest range alone (the watch's start is compacted). */
int		 replica_rebuild_start(struct replica *rp, bool flat);
/* The table from the live entries of a range at rev (sorted here);
 * exact: rev is before every one of them (else the grants made know no
 * token: 0). */
void		 replica_build(struct replica *rp, struct erange_kv *kvs,
		    size_t n, int64_t rev, bool exact);

struct eowner	*eowner_get(struct replica *rp, uint64_t fe, uint64_t client,
		    bool create);
struct eowner	*eowner_of(struct replica *rp, const struct lt_owner *lo);
struct eowner	*eowner_new_ours(struct replica *rp, uint64_t id,
		    void *udata);
/* Our o's entries carry lease from now on, and name it (fe, client). */
void		 eowner_set_lease(struct replica *rp, struct eowner *o,
		    uint64_t lease);
/* Our o becomes channel chan of the session of client sclient under
 * lease: its entries carry lease, and name it (lease, client). */
void		 eowner_set_channel(struct replica *rp, struct eowner *o,
		    uint64_t lease, uint64_t client, uint32_t chan,
		    uint64_t sclient);
/* The owners of the channels (chan != 0) of the session under lease,
 * ours and others', in no order: the first, and the one after o; NULL
 * at the end. */
struct eowner	*eowner_chan_first(struct replica *rp, uint64_t lease);
struct eowner	*eowner_chan_next(const struct eowner *o);
/* Sessions moving between front ends: another front end's o becomes
 * ours (its held requests answered, its waiting one asked: o->open),
 * or ours becomes another's (THEIRS; it may be freed). */
void		 replica_adopt(struct replica *rp, struct eowner *o);
void		 replica_disown(struct replica *rp, struct eowner *o);
/* A session's record value, or what is wrong with it. */
const char	*ebe_record_decode(const char *v, size_t len,
		    struct erecord *rec);
/*
 * Where requests and owners are freed, and the one rule for it: a request
 * goes once no entry of it is live in the table, it neither waits nor
 * holds, no commit item refers to it, its client waits for no answer
 * (side ASKED, DEADLINE, WITHDRAWING) and, ours, the watch is not yet to
 * bring a put of it that etcd made; an owner, once it has no request,
 * is not ours and connected, and no REFRESH of it is on the wire
 * (refreshing). Called wherever one of these clears.
 */
void		 ereq_maybe_free(struct ereq *r);
void		 eowner_maybe_free(struct eowner *o);
struct ereq	*ereq_new(struct replica *rp, struct eowner *o, uint64_t fe,
		    uint64_t seq, const struct lt_acquire *a);
struct eentry	*eentry_held(struct replica *rp, const struct eowner *o,
		    const char *key, size_t keylen);
int		 ereq_value(struct ereq *r, const char *name);
/*
 * The one rule of a hold's ttl and a wait's deadline, as this replica
 * counts them: x's ttl runs out ms from now, r's wait put_ms +
 * a.timeout_ms. Ours end then (a delete asked, a timeout); another
 * front end's are left to it for the reap margin more, then reaped.
 */
void		 replica_ttl_arm(struct eentry *x, uint64_t ms);
void		 replica_wait_arm(struct ereq *r);
/* REFRESH of our ents: their ttl timers and the table's ttl restart. */
void		 replica_refresh(struct replica *rp, struct eowner *o,
		    struct eentry **ents, size_t n, uint64_t ttl_ms);
/*
 * An entry read back from etcd, prefix q/KEY/FE-SEQ (its shape checked by
 * the caller) with the value ereq_value() writes: its request into
 * client, ch (a session's channel, or chan 0), a, keys and keylens (max keys, pointing into v), checked as a
 * client's LOCK is (the key rules, the options' bounds) and its own KEY
 * one of the request's. NULL, or what is wrong: such an entry is left out
 * of the table with a warning, as if it were not there (a front end that
 * wrote it is broken, or someone forged it).
 */
const char	*ebe_entry_decode(const char *k, size_t klen, size_t prefixlen,
		    const char *v, size_t vlen, uint64_t *client,
		    struct echan *ch, struct lt_acquire *a, const char **keys,
		    size_t *keylens, size_t max);
/* s for a log line: control and non-ASCII bytes as '?', cut to fit cap
 * with "...". Returns the length written. */
size_t		 ebe_log_safe(const char *s, size_t len, char *out,
		    size_t cap);

/* ---- backend_etcd_commit.c: the group commit ---- */

/* What the committer reports to the backend. */
struct commit_hooks {
	/* r's put failed (made or not): true if it was made after all (the
	 * client holds what the watch brought); else its entries are
	 * deleted, and its client is to be answered here. */
	bool	(*put_failed)(void *arg, struct ereq *r, const char *why);
	/* Our heartbeat's transaction is acked at rev. */
	void	(*heartbeat)(void *arg, int64_t rev);
	void	(*lose)(void *arg, const char *why);
	void	(*end_turn)(void *arg);
	void	*arg;
};

struct committer *commit_new(struct event_base *base, struct etcd *etcd,
		    const char *prefix, size_t max_ops, int max_inflight,
		    struct be_counters *count,
		    const struct commit_hooks *hooks);
void		 commit_free(struct committer *cm);
/* Writes go under lease fe from now on (after a commit_drop()). */
void		 commit_start(struct committer *cm, uint64_t fe);
/* A LOCK's puts; they go after every delete of its owner's entries
 * asked before (in the same transaction, or once those are acked), so
 * that every replica applies an UNLOCK before the owner's next LOCK. */
int		 commit_put(struct committer *cm, struct ereq *r);
/* Deletes of entries (those not already on their way), until they
 * succeed or the lease goes. Returns how many were queued now or wait
 * for their put's ack. */
size_t		 commit_delete(struct committer *cm, struct eentry **ents,
		    size_t n);
void		 commit_delete_req(struct committer *cm, struct ereq *r);
int		 commit_heartbeat(struct committer *cm);
void		 commit_flush(struct committer *cm);
/* With nothing on the wire, the queue waits up to us for one more
 * operation (an UNLOCK's client's next LOCK, which then goes in the
 * transaction of its deletes rather than after their ack). */
void		 commit_linger(struct committer *cm, uint64_t us);
/* After a loss, and at a stop: nothing queued survives, replies of
 * transactions on the wire are not heard, nothing is sent until the
 * next commit_start(). */
void		 commit_drop(struct committer *cm);

#endif /* ETCD_BACKEND_H */
