/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd (keylockd(8), BACKEND ETCD): the lock table as a state
 * machine replicated by etcd. A LOCK is one transaction putting one entry
 * per key (backend_etcd_commit.c); every front end applies the same watch
 * events in revision order to its own table (backend_etcd_replica.c), which
 * decides the request there; the front end whose client asked answers
 * it. Releases, withdrawals and ttl expiries are deletes of the owner's
 * entries. A LOCK and a withdrawal are BE_PENDING; an UNLOCK and an
 * UNLOCKALL are answered once their deletes are queued for the next
 * group commit (reads of the table through read_barrier wait for the
 * replica to apply them: read your own writes); a REFRESH is BE_PENDING
 * until etcd has its puts.
 *
 * Here: the seam's operations and the one place a client's answer leaves
 * (ebe_done), start-up (lease, heartbeat, range, watch;
 * backend_etcd_new() returns once the table is built), the lease kept
 * alive every TTL/3, and its loss: when etcd has not confirmed the lease
 * for TTL minus a margin, or says it is gone, every client that holds or
 * waits is disconnected (a dropped connection is the protocol's "lock
 * lost"), new requests get ERR BACKEND, and a new lease and a fresh range
 * bring the front end back by itself. struct ebe owns the lease (struct
 * elease), the replica and the committer, and connects the two through
 * their hooks.
 */
#include <sys/time.h>

#include <errno.h>
#include <time.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include <jansson.h>

#include "backend_etcd.h"
#include "clock.h"
#include "config.h"
#include "backend_etcd_int.h"
#include "kl.h"
#include "log.h"
#include "users.h"
#include "util.h"

enum ebe_state {
	EBE_STARTING,		/* lease, heartbeat, range, watch */
	EBE_READY,
	EBE_RESYNC,		/* the watch fell behind: range again */
	EBE_LOST,		/* lease lost or at risk: clients dropped */
	EBE_STOPPING,		/* ebe_free(): the lease is being revoked */
	EBE_STOPPED		/* revoked, or given up: free */
};

/* The lease: everything this front end writes carries it. */
struct elease {
	uint64_t		 fe;		/* its id; 0: none */
	uint64_t		 old_fe;	/* to revoke after a loss */
	uint64_t		 until;		/* it lasts at least until */
	int64_t			 ttl_s;
	uint64_t		 margin_ms;
	struct event		*keepalive;
	struct event		*guard;		/* until - margin */
	struct etcd_call	*ka_call;
	uint64_t		 ka_sent;
	int64_t			 hb_rev;	/* our heartbeat's revision */
	uint64_t		 hb_acked_ms;	/* its txn's ack; 0: none yet */
	bool			 hb_seen;	/* the watch brought it */
};

/* Read your own writes: the UNLOCKs answered since the first read that
 * waits for them count their entries in an epoch; a read waits for
 * every epoch up to the last closed before it. */
struct ebe_epoch {
	TAILQ_ENTRY(ebe_epoch)	 entry;
	uint64_t		 epoch;
	size_t			 left;		/* its entries not applied */
};
TAILQ_HEAD(ebe_epochq, ebe_epoch);

/* A STATS, INFO or CLIENTS that waits (read_barrier). */
struct ebe_read {
	TAILQ_ENTRY(ebe_read)	 entry;
	struct eowner		*o;
	uint64_t		 upto;		/* goes once every epoch up to
						 * this one is applied */
	uint64_t		 until;		/* or at this time (ms): a
						 * delete tried again that etcd
						 * does not take */
	uint64_t		 cmd;
	size_t			 arglen;
	char			 arg[];
};
TAILQ_HEAD(ebe_readq, ebe_read);

struct ebe {
	struct backend		 be;		/* first: the seam's view */
	struct be_hooks		 hooks;		/* end_turn NULL while
						 * backend_etcd_new() runs */
	struct event_base	*base;
	struct etcd		*etcd;
	enum ebe_state		 state;
	char			 why[320];	/* ERR BACKEND's text */
	char			 failed[256];	/* the last step's failure, in
						 * full: for the log and a
						 * start-up error only */
	char			*prefix;
	size_t			 max_ops;
	int			 timeout_ms;
	uint64_t		 seq;		/* our LOCKs so far */
	struct elease		 lease;
	struct replica		*rp;
	struct committer	*cm;
	struct event		*start;		/* steps of start/recovery */
	int			 start_pause_ms;
	struct be_counters	*count;		/* hooks.counters or own */
	struct be_counters	 own;
	uint64_t		 rd_epoch;	/* UNLOCKs answered now count
						 * their entries in it */
	size_t			 rd_open;	/* of those, not yet applied */
	struct ebe_epochq	 rd_closed;	/* earlier epochs with entries
						 * left, oldest first */
	struct ebe_readq	 rd_waiting;	/* reads, oldest first */
	struct event		*rd_timer;	/* the first one's until */
	struct esession		**sessions;	/* by the first digits of H */
	size_t			 nsessions;
	struct erevoke		*revokes;	/* put off (es_revoke_free) */
	size_t			 nrevokes, caprevokes;
	struct event		*revoke_timer;
	struct be_chan		*rchans;	/* BE_RESUME's channels */
	size_t			 caprchans;
	struct erview		**views;	/* every session's record, by
						 * the first digits of H */
	struct erview		**views_l;	/* ... and by its lease */
	struct etcd_call	*views_call;	/* their range (ev_load) */
	uint64_t		 reap_log_ms;	/* the last reap's log line */
	uint64_t		 reap_unlogged;	/* reaps since, not logged */
	struct erefresh		*refreshes;	/* REFRESHes on the wire */
};

static void	ebe_step(struct ebe *e);
static void	es_drop_all(struct ebe *e, const char *why);
static void	ebe_session_end(struct backend *be, struct lt_owner *lo);
static void	es_free_all(struct ebe *e);
static void	ev_free_all(struct ebe *e);
static void	ev_load(struct ebe *e);
static void	ebe_recover_in(struct ebe *e, int ms);
static void	ebe_fail(struct ebe *e, const char *fmt, ...)
		    __attribute__((format(printf, 2, 3)));
static bool	ebe_lease_safe(struct ebe *e);
static void	ebe_read_release(struct ebe *e);

static struct ebe *
ebe_of(struct backend *be)
{
	return (struct ebe *)be;
}

static void
tv_ms(struct timeval *tv, uint64_t ms)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

/* STATS backend_ready, /healthz: the front end can answer requests now
 * (the table is built and the lease is renewed in time). Read without
 * ebe_lease_safe()'s side effect; noted at the end of every turn. */
static void
ebe_note_ready(struct ebe *e)
{
	e->count->ready = e->state == EBE_READY && e->lease.fe != 0 &&
	    kl_now_ms() + e->lease.margin_ms < e->lease.until;
	e->count->frontend = e->lease.fe;
}

static void
ebe_end_turn(void *arg)
{
	struct ebe *e = arg;

	ebe_note_ready(e);
	if (!TAILQ_EMPTY(&e->rd_waiting) && e->state < EBE_STOPPING)
		ebe_read_release(e);
	commit_flush(e->cm);
	/* in backend_etcd_new() the caller's side is not built yet; in
	 * ebe_free() it is gone */
	if (e->hooks.end_turn != NULL && e->state < EBE_STOPPING)
		e->hooks.end_turn(e->hooks.arg);
}

/* o's open request is complete: the one way an answer leaves. */
static void
ebe_done(struct ebe *e, struct eowner *o, const struct be_result *r)
{
	if (o->state == OWN_THEIRS || o->state == OWN_GONE)
		return;
	o->open = NULL;
	o->state = OWN_IDLE;
	e->hooks.done(e->hooks.arg, o->lo, r);
}

/* Our LOCK r's answer: told if its client waits for one; after a grant
 * the client holds, after an error its entries go. */
static void
ebe_answer(void *arg, struct ereq *r, const struct be_result *res)
{
	bool awaited = ereq_awaited(r);

	r->side = res->err == KL_OK ? SIDE_ANSWERED : SIDE_ENDED;
	if (awaited)
		ebe_done(arg, r->owner, res);
}

static void
be_backend(struct be_result *r, enum be_op op, const char *text)
{
	memset(r, 0, sizeof(*r));
	r->op = op;
	r->err = KL_ERR_BACKEND;
	r->text = text;
}

/*
 * Read your own writes. An UNLOCK or UNLOCKALL is answered once its
 * deletes are queued for the next group commit, before our replica has
 * applied them; so that what a client was told is what STATS, INFO and
 * CLIENTS of this front end show next, on any connection, such a read
 * waits until the replica has applied every delete of an UNLOCK answered
 * before it came (ebe_read_barrier). The entries of the UNLOCKs answered
 * since the last read that had to wait count in the current epoch
 * (rd_open); a read that finds some closes it (rd_closed) and waits for
 * it and every earlier one, so that a stream of UNLOCKs after it cannot
 * keep it waiting. A delete whose transaction failed is tried again
 * (backend_etcd_commit.c) and still counted: the read waits for it, up
 * to twice etcd-timeout after the read came (ebe_read.until: long enough
 * for a delete sent just before it to fail, at etcd-timeout, and for its
 * next try, sent EBE_RETRY_MS later, to commit), then shows
 * the keys as our replica has them, so that reads still answer while
 * etcd cannot be reached.
 */
static void
ebe_read_count(struct ebe *e, struct eentry *x)
{
	x->barrier = e->rd_epoch;
	e->rd_open++;
}

/* Reads need not wait for x any more. */
static void
ebe_read_uncount(struct ebe *e, struct eentry *x)
{
	struct ebe_epoch *ep;

	if (x->barrier == 0)
		return;
	if (x->barrier == e->rd_epoch)
		e->rd_open--;
	else
		TAILQ_FOREACH(ep, &e->rd_closed, entry)
			if (ep->epoch == x->barrier) {
				ep->left--;
				break;
			}
	x->barrier = 0;
}

/* The replica applied the delete of our entry x (called before x's
 * request may be freed). */
static void
ebe_deleted(void *arg, struct eentry *x)
{
	struct ebe	*e = arg;
	struct eowner	*o = x->req->owner;

	ebe_read_uncount(e, x);
	if (e->hooks.released != NULL && o->lo != NULL)
		e->hooks.released(e->hooks.arg, o->lo);
}


/* A read's argument may be a session ID (RESUME): wiped, then freed. */
static void
ebe_read_free(struct ebe_read *rd)
{
	explicit_bzero(rd->arg, rd->arglen);
	kl_free(rd);
}

/* The reads whose epochs are all applied go (at the end of a turn of
 * ours, not inside the replica's events). */
static void
ebe_read_release(struct ebe *e)
{
	struct ebe_epoch	*ep;
	struct ebe_read		*rd;
	struct be_result	 r;
	struct timeval		 tv;
	uint64_t		 low, now;

	while ((ep = TAILQ_FIRST(&e->rd_closed)) != NULL && ep->left == 0) {
		TAILQ_REMOVE(&e->rd_closed, ep, entry);
		kl_free(ep);
	}
	low = ep != NULL ? ep->epoch : e->rd_epoch;
	now = kl_now_ms();
	while ((rd = TAILQ_FIRST(&e->rd_waiting)) != NULL && (rd->upto < low ||
	    rd->until <= now)) {
		TAILQ_REMOVE(&e->rd_waiting, rd, entry);
		memset(&r, 0, sizeof(r));
		r.op = BE_READ;
		r.value = rd->cmd;
		r.why.key = rd->arg;
		r.why.keylen = rd->arglen;
		ebe_done(e, rd->o, &r);
		ebe_read_free(rd);
	}
	/* the first to wait has the first until (all wait as long) */
	if ((rd = TAILQ_FIRST(&e->rd_waiting)) != NULL && e->rd_timer != NULL) {
		tv_ms(&tv, rd->until > now ? rd->until - now : 0);
		evtimer_add(e->rd_timer, &tv);
	} else if (e->rd_timer != NULL) {
		evtimer_del(e->rd_timer);
	}
}

static void
ebe_read_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	ebe_end_turn(arg);
}

/* Nothing of ours is left to apply (the replica is emptied): every read
 * goes at the end of this turn. */
static void
ebe_read_reset(struct ebe *e)
{
	struct ebe_epoch *ep;

	while ((ep = TAILQ_FIRST(&e->rd_closed)) != NULL) {
		TAILQ_REMOVE(&e->rd_closed, ep, entry);
		kl_free(ep);
	}
	e->rd_open = 0;
	e->rd_epoch++;
}

/* o's connection is gone: its read with it. */
static void
ebe_read_forget(struct ebe *e, struct eowner *o)
{
	struct ebe_read *rd;

	TAILQ_FOREACH(rd, &e->rd_waiting, entry)
		if (rd->o == o) {
			TAILQ_REMOVE(&e->rd_waiting, rd, entry);
			ebe_read_free(rd);
			return;
		}
}

/* ---- the lease ---- */

static void
guard_arm(struct ebe *e)
{
	struct timeval	tv;
	uint64_t	now = kl_now_ms(), at = e->lease.until -
	    e->lease.margin_ms;

	tv_ms(&tv, at > now ? at - now : 0);
	evtimer_add(e->lease.guard, &tv);
}

/*
 * May we act on the lease now? Not after TTL minus the margin without
 * etcd's word on it: by then etcd may have let it go and given our
 * clients' locks to others. Checked before anything is answered.
 */
static bool
ebe_lease_safe(struct ebe *e)
{
	char why[96];

	if (e->state >= EBE_LOST || e->lease.fe == 0)
		return false;
	if (kl_now_ms() + e->lease.margin_ms < e->lease.until)
		return true;
	snprintf(why, sizeof(why), "etcd has not renewed our lease for "
	    "%" PRId64 " s", e->lease.ttl_s);
	ebe_lose(e, why);
	return false;
}

static void
guard_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ebe *e = arg;

	if (ebe_lease_safe(e))
		guard_arm(e);
	ebe_end_turn(e);
}

static void
keepalive_in(struct ebe *e, uint64_t ms)
{
	struct timeval tv;

	tv_ms(&tv, ms);
	evtimer_add(e->lease.keepalive, &tv);
}

static void
keepalive_cb_done(void *arg, const struct etcd_result *r)
{
	struct ebe	*e = arg;
	uint64_t	 period = (uint64_t)e->lease.ttl_s * 1000 / 3;

	e->lease.ka_call = NULL;
	if (e->state >= EBE_LOST)
		return;
	if (r->status == ETCD_OK && r->ttl > 0) {
		e->lease.until = e->lease.ka_sent + (uint64_t)r->ttl * 1000;
		guard_arm(e);
		keepalive_in(e, period);
	} else if (r->status == ETCD_OK ||
	    (r->status == ETCD_ERR_GRPC &&
	    r->grpc_code == ETCD_GRPC_NOT_FOUND)) {
		ebe_lose(e, "etcd let our lease expire");
	} else {
		log_debug("backend etcd: keepalive: %s: %s",
		    etcd_status_name(r->status), r->message);
		keepalive_in(e, EBE_RETRY_MS * 2);	/* soon again */
	}
	ebe_end_turn(e);
}

/*
 * Every TTL/3: the keepalive, and our heartbeat put, which the watch
 * must bring back within the timeout, else the stream has gone quiet (a
 * member cut off from its peers) and is started again elsewhere.
 */
static void
keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ebe	*e = arg;
	struct elease	*l = &e->lease;
	uint64_t	 now = kl_now_ms();

	if (!ebe_lease_safe(e)) {
		ebe_end_turn(e);
		return;
	}
	if (l->ka_call == NULL) {
		l->ka_sent = now;
		l->ka_call = etcd_lease_keepalive(e->etcd, (int64_t)l->fe,
		    ETCD_RETRY, keepalive_cb_done, e);
	}
	if (replica_rev(e->rp) >= l->hb_rev)
		l->hb_seen = true;	/* the range may have been past it */
	if (e->state == EBE_READY && l->hb_acked_ms != 0 && !l->hb_seen &&
	    now - l->hb_acked_ms > (uint64_t)e->timeout_ms) {
		log_info("backend etcd: the watch did not bring our heartbeat "
		    "(revision %" PRId64 ") in %d ms: watching again",
		    l->hb_rev, e->timeout_ms);
		etcd_watch_restart(e->etcd);
		l->hb_acked_ms = 0;
	}
	if (e->state == EBE_READY && (l->hb_acked_ms == 0 || l->hb_seen))
		commit_heartbeat(e->cm);
	if (l->ka_call == NULL)
		keepalive_in(e, EBE_RETRY_MS * 2);
	ebe_end_turn(e);
}

/* The committer: our heartbeat's transaction is acked at rev. */
static void
ebe_heartbeat_acked(void *arg, int64_t rev)
{
	struct ebe *e = arg;

	e->lease.hb_acked_ms = kl_now_ms();
	e->lease.hb_rev = rev;
	e->lease.hb_seen = replica_rev(e->rp) >= rev;
}

/* The replica: our heartbeat at rev is applied. */
static void
ebe_heartbeat_seen(void *arg, int64_t rev)
{
	struct ebe *e = arg;

	if (rev >= e->lease.hb_rev)
		e->lease.hb_seen = true;
}

/* ---- loss and recovery ---- */

/*
 * Disconnects every client of ours that holds, waits or has a request
 * open: after this, no lock of theirs is ours to vouch for. No
 * allocation: it must work when memory has run out, or a client would
 * believe it holds a lock etcd has released. hooks.drop may free o
 * (owner_free), never another owner: the next one is taken first.
 */
static void
drop_clients(struct ebe *e, const char *why)
{
	struct eowner	*o, *next;
	struct ereq	*r;

	for (o = TAILQ_FIRST(replica_owners(e->rp)); o != NULL; o = next) {
		bool holds = false;

		next = TAILQ_NEXT(o, entry);
		/* not for entries whose UNLOCK was answered */
		TAILQ_FOREACH(r, &o->reqs, entry)
			for (size_t i = 0; i < r->nent && !holds; i++)
				holds = r->ent[i].w < W_DEL_WAIT;
		if (o->state == OWN_LOCK || o->state == OWN_SESSION ||
		    (o->state == OWN_IDLE && holds))
			e->hooks.drop(e->hooks.arg, o->lo, why);
	}
}

/*
 * Empties the replica, and the committer first: nothing queued or on the
 * wire may refer to a request the replica drops (replies of transactions
 * on the wire are not heard). Writes go on under the lease we have.
 */
static void
ebe_clear(struct ebe *e)
{
	struct eowner *o;

	commit_drop(e->cm);
	replica_clear(e->rp);
	/* the replies of what was on the wire are not heard */
	TAILQ_FOREACH(o, replica_owners(e->rp), entry)
		o->dels_out = 0;
	ebe_read_reset(e);
	if (e->lease.fe != 0)
		commit_start(e->cm, e->lease.fe);
}

void
ebe_lose(struct ebe *e, const char *why)
{
	if (e->state >= EBE_LOST)
		return;
	log_warnx("backend etcd: %s: disconnecting the clients that hold or "
	    "wait, and starting over", why);
	snprintf(e->why, sizeof(e->why), "etcd: the front end lost its "
	    "lease; reconnecting");
	e->state = EBE_LOST;
	e->count->losses++;
	if (e->lease.fe != 0)
		e->lease.old_fe = e->lease.fe;
	e->lease.fe = 0;
	replica_set_fe(e->rp, 0);
	etcd_watch_stop(e->etcd);
	if (e->lease.ka_call != NULL)
		etcd_cancel(e->lease.ka_call);
	e->lease.ka_call = NULL;
	evtimer_del(e->lease.keepalive);
	evtimer_del(e->lease.guard);
	drop_clients(e, "lock lost: the etcd backend lost its lease");
	es_drop_all(e, "lock lost: the etcd backend lost its lease");
	ebe_clear(e);
	e->start_pause_ms = EBE_RETRY_MS;
	ebe_recover_in(e, 0);
}

/* A step of start-up or recovery failed: again after a pause. */
static void
ebe_fail(struct ebe *e, const char *fmt, ...)
{
	va_list	ap;
	char	msg[256];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (e->state == EBE_READY || e->state >= EBE_STOPPING)
		return;
	snprintf(e->why, sizeof(e->why), "etcd cannot be reached; trying "
	    "again (the server's log says why)");
	snprintf(e->failed, sizeof(e->failed), "%s", msg);
	log_warnx("backend etcd: %s; trying again", msg);
	if (e->state == EBE_RESYNC) {
		ebe_lose(e, msg);
		return;
	}
	e->state = EBE_LOST;
	ebe_recover_in(e, e->start_pause_ms);
	e->start_pause_ms = e->start_pause_ms * 2 > EBE_RETRY_MAX_MS * 4 ?
	    EBE_RETRY_MAX_MS * 4 : e->start_pause_ms * 2;
}

static void
revoke_done(void *arg, const struct etcd_result *r)
{
}

static void
grant_done(void *arg, const struct etcd_result *r)
{
	struct ebe *e = arg;

	if (e->state >= EBE_STOPPING)
		return;
	if (r->status != ETCD_OK || r->lease_id == 0) {
		ebe_fail(e, "lease grant on %s: %s: %s", r->endpoint,
		    etcd_status_name(r->status), r->message != NULL ?
		    r->message : "no lease");
		return;
	}
	e->lease.fe = (uint64_t)r->lease_id;
	e->lease.until = e->lease.ka_sent + (uint64_t)r->ttl * 1000;
	log_info("backend etcd: lease %016" PRIx64 " (%" PRId64 " s) from %s",
	    e->lease.fe, r->ttl, r->endpoint);
	guard_arm(e);
	keepalive_in(e, (uint64_t)e->lease.ttl_s * 1000 / 3);
	e->lease.hb_acked_ms = 0;
	replica_set_fe(e->rp, e->lease.fe);
	commit_start(e->cm, e->lease.fe);
	commit_heartbeat(e->cm);
	if (replica_rebuild_start(e->rp, false) != 0)
		ebe_fail(e, "out of memory");
	ebe_end_turn(e);
}

/* Start-up and recovery: a lease (the old one revoked), then the range. */
static void
ebe_step(struct ebe *e)
{
	if (e->state >= EBE_STOPPING || e->state == EBE_READY)
		return;
	if (e->lease.old_fe != 0) {
		/* its entries, of clients we disconnected, go at once */
		etcd_lease_revoke(e->etcd, (int64_t)e->lease.old_fe, ETCD_RETRY,
		    revoke_done, e);
		e->lease.old_fe = 0;
	}
	if (e->state == EBE_LOST)
		e->state = EBE_STARTING;
	e->lease.ka_sent = kl_now_ms();
	if (etcd_lease_grant(e->etcd, e->lease.ttl_s, 0, ETCD_RETRY, grant_done,
	    e) == NULL)
		ebe_fail(e, "cannot ask etcd for a lease");
}

static void
start_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ebe *e = arg;

	ebe_step(e);
	ebe_end_turn(e);
}

static void
ebe_recover_in(struct ebe *e, int ms)
{
	struct timeval tv;

	tv_ms(&tv, (uint64_t)ms);
	evtimer_add(e->start, &tv);
}

/* ---- the watch ---- */

static void
watch_created(void *arg, int64_t rev)
{
	struct ebe *e = arg;

	if (e->state == EBE_STARTING || e->state == EBE_RESYNC) {
		log_info("backend etcd: serving; table at revision %" PRId64
		    ", watching %s on %s", replica_rev(e->rp), e->prefix,
		    etcd_current_endpoint(e->etcd));
		e->state = EBE_READY;
		e->start_pause_ms = EBE_RETRY_MS;
	}
	ebe_end_turn(e);
}

/*
 * The watch's revision is compacted: events are missing. Our clients that
 * hold or wait are disconnected (their holds cannot be vouched for across
 * the gap) and the table is built again from a fresh range.
 */
static void
watch_compacted(void *arg, int64_t crev)
{
	struct ebe *e = arg;

	if (e->state == EBE_STARTING || e->state == EBE_RESYNC) {
		/* compacted since the range: from the newest one alone */
		log_info("backend etcd: the watch's first revision is "
		    "compacted (at %" PRId64 "): building the table again",
		    crev);
		ebe_clear(e);
		if (replica_rebuild_start(e->rp, true) != 0)
			ebe_fail(e, "out of memory");
		ebe_end_turn(e);
		return;
	}
	if (e->state != EBE_READY)
		return;
	log_warnx("backend etcd: the watch fell behind etcd's compaction "
	    "(revision %" PRId64 "): rebuilding the table", crev);
	snprintf(e->why, sizeof(e->why), "etcd: rebuilding the lock table");
	e->state = EBE_RESYNC;
	e->count->rebuilds++;
	/* their deletes are dropped with the rest: the range shows their
	 * entries, ours and unknown, and they are deleted then */
	drop_clients(e, "lock lost: the etcd backend rebuilds its table");
	es_drop_all(e, "lock lost: the etcd backend rebuilds its table");
	ebe_clear(e);
	if (replica_rebuild_start(e->rp, false) != 0)
		ebe_lose(e, "out of memory");
	ebe_end_turn(e);
}

static void
watch_down(void *arg, enum etcd_status st, const char *why)
{
	log_debug("backend etcd: watch cut (%s): %s; watching again",
	    etcd_status_name(st), why);
}

static void
watch_events(void *arg, const struct etcd_event *ev, size_t n, int64_t rev)
{
	replica_events(((struct ebe *)arg)->rp, ev, n, rev);
}

static const struct etcd_watch_cbs ebe_watch_cbs = {
	.events = watch_events,
	.created = watch_created,
	.compacted = watch_compacted,
	.down = watch_down
};

/* The replica's table is built at rev: watch from the next one. */
static void
ebe_built(void *arg, int64_t rev)
{
	struct ebe *e = arg;

	if (etcd_watch_start(e->etcd, e->prefix, strlen(e->prefix), rev + 1,
	    &ebe_watch_cbs, e) != 0)
		ebe_fail(e, "out of memory for the watch");
	else
		ev_load(e);	/* the sessions' records, for INFO */
}

/* ---- the seam's operations ---- */

static bool
ebe_serving(struct ebe *e, struct be_result *r, enum be_op op)
{
	if (e->state == EBE_READY && ebe_lease_safe(e))
		return true;
	be_backend(r, op, e->why[0] != '\0' ? e->why :
	    "etcd cannot be reached");
	return false;
}

static struct lt_owner *
ebe_owner_new(struct backend *be, uint64_t id, void *udata)
{
	struct eowner *o = eowner_new_ours(ebe_of(be)->rp, id, udata);

	return o != NULL ? o->lo : NULL;
}

static void
ebe_owner_free(struct backend *be, struct lt_owner *lo, uint64_t now_ms)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct ereq	*r, *next;

	if (o == NULL)
		return;
	if (o->sess != NULL)
		ebe_session_end(be, lo);
	o->state = OWN_GONE;
	o->open = NULL;
	ebe_read_forget(e, o);
	locktable_owner_set_udata(o->lo, NULL);
	for (r = TAILQ_FIRST(&o->reqs); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		r->side = SIDE_ENDED;
		r->why = LT_WHY_DISCONNECT;
		for (size_t i = 0; i < r->nent; i++)
			if (r->ent[i].w < W_DEL_WAIT)	/* not released yet */
				r->ent[i].why = LT_WHY_DISCONNECT;
		if (e->state != EBE_LOST)
			commit_delete_req(e->cm, r);
	}
	eowner_maybe_free(o);
}

static size_t
distinct_keys(const struct lt_acquire *a)
{
	size_t n = 0;

	for (size_t i = 0; i < a->nkeys; i++) {
		bool dup = false;

		for (size_t j = 0; j < i && !dup; j++)
			dup = a->keylens[j] == a->keylens[i] &&
			    memcmp(a->keys[j], a->keys[i], a->keylens[i]) == 0;
		n += !dup;
	}
	return n;
}

/*
 * The SEQ of our next LOCK: the writer's order (one transaction has one
 * writer), and never below the applied revision shifted left
 * EBE_SEQ_SHIFT bits, so that (L, SEQ) stays unique when a session's
 * lease L is written by one front end after another: the one that takes
 * a session over has applied the revision of its takeover, past every
 * LOCK the one before it wrote for L (fewer than 2^EBE_SEQ_SHIFT a
 * revision).
 */
static uint64_t
ebe_next_seq(struct ebe *e)
{
	uint64_t floor = (uint64_t)(replica_rev(e->rp) + 1) << EBE_SEQ_SHIFT;

	e->seq = e->seq + 1 > floor ? e->seq + 1 : floor;
	return e->seq;
}

static enum be_status
ebe_acquire(struct backend *be, struct lt_owner *lo,
    const struct lt_acquire *a, uint64_t now_ms, struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct ereq	*q;

	if (!ebe_serving(e, r, BE_LOCK))
		return BE_DONE;
	if (o == NULL || o->state != OWN_IDLE) {
		be_backend(r, BE_LOCK, "etcd: a LOCK is already open");
		return BE_DONE;
	}
	if (distinct_keys(a) > e->max_ops) {
		snprintf(e->why, sizeof(e->why), "a LOCK of more than %zu keys "
		    "does not fit one etcd transaction (etcd-max-txn-ops)",
		    e->max_ops);
		be_backend(r, BE_LOCK, e->why);
		return BE_DONE;
	}
	if ((q = ereq_new(e->rp, o, o->lease != 0 ? o->lease : e->lease.fe,
	    ebe_next_seq(e), a)) == NULL ||
	    ereq_value(q, e->hooks.name != NULL ?
	    e->hooks.name(e->hooks.arg, lo) : NULL) != 0 ||
	    commit_put(e->cm, q) != 0) {
		memset(r, 0, sizeof(*r));
		r->op = BE_LOCK;
		r->err = KL_ERR_NOMEM;
		if (q != NULL) {
			q->state = REQ_GONE;
			q->side = SIDE_ENDED;
			ereq_maybe_free(q);
		}
		return BE_DONE;
	}
	o->open = q;
	o->state = OWN_LOCK;
	return BE_PENDING;
}

/* Our owner's holds on keys (duplicates once) into out[]; false with
 * the key that is not held in r. */
static bool
held_entries(struct ebe *e, struct eowner *o, const char *const *keys,
    const size_t *keylens, size_t nkeys, struct eentry **out, size_t *n,
    struct be_result *r)
{
	*n = 0;
	for (size_t i = 0; i < nkeys; i++) {
		struct eentry	*x = eentry_held(e->rp, o, keys[i],
		    keylens[i]);
		bool		 dup = false;

		if (x == NULL || x->w >= W_DEL_WAIT) {	/* released already */
			for (size_t j = 0; j < *n && !dup; j++)
				dup = out[j]->lkeylen == keylens[i] &&
				    memcmp(out[j]->lkey, keys[i],
				    keylens[i]) == 0;
			if (dup)
				continue;
			r->err = KL_ERR_NOTHELD;
			r->why.key = keys[i];
			r->why.keylen = keylens[i];
			return false;
		}
		for (size_t j = 0; j < *n && !dup; j++)
			dup = out[j] == x;
		if (!dup)
			out[(*n)++] = x;
	}
	return true;
}

/*
 * Deletes ents for o's UNLOCK or UNLOCKALL, answered now that they are
 * queued for the next group commit: the client has let go, and nobody
 * else is granted the keys before the deletes are committed (every
 * replica grants the next holder at the delete's revision). A delete
 * that fails is tried again until it succeeds or the lease goes; if this
 * front end dies first, the entries stay until its lease expires, held
 * by nobody who could use them. o's next UNLOCK of these keys is
 * NOTHELD (held_entries()), and its next LOCK's puts follow the deletes
 * (commit_put()). Reads of our table wait for the replica to apply them
 * (ebe_read_barrier()).
 */
static enum be_status
ebe_release_ents(struct ebe *e, struct eowner *o, enum be_op op,
    struct eentry **ents, size_t n, struct be_result *r)
{
	r->op = op;
	r->value = n;
	for (size_t i = 0; i < n; i++) {
		if (ents[i]->ttl != NULL)
			evtimer_del(ents[i]->ttl);
		if (ents[i]->rep == ENT_LIVE || ents[i]->rep == ENT_HELD)
			ebe_read_count(e, ents[i]);
	}
	if (n > 0 && commit_delete(e->cm, ents, n) > 0)
		commit_linger(e->cm, EBE_UNLOCK_LINGER_US);
	return BE_DONE;
}

static enum be_status
ebe_release(struct backend *be, struct lt_owner *lo, const char *const *keys,
    const size_t *keylens, size_t nkeys, uint64_t now_ms,
    struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct eentry	*stack[16], **ents = stack;
	enum be_status	 st;
	size_t		 n;

	memset(r, 0, sizeof(*r));
	r->op = BE_UNLOCK;
	if (!ebe_serving(e, r, BE_UNLOCK))
		return BE_DONE;
	if (nkeys > 16 && (ents = kl_calloc(nkeys, sizeof(*ents))) == NULL) {
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	if (o == NULL || !held_entries(e, o, keys, keylens, nkeys, ents, &n,
	    r))
		st = BE_DONE;
	else
		st = ebe_release_ents(e, o, BE_UNLOCK, ents, n, r);
	if (ents != stack)
		kl_free(ents);
	return st;
}

static enum be_status
ebe_release_owner(struct backend *be, struct lt_owner *lo, uint64_t now_ms,
    struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct eentry	**ents;
	struct ereq	*q;
	size_t		 n = 0, cap = 0;
	enum be_status	 st;

	memset(r, 0, sizeof(*r));
	r->op = BE_UNLOCKALL;
	if (!ebe_serving(e, r, BE_UNLOCKALL))
		return BE_DONE;
	if (o == NULL)
		return BE_DONE;
	TAILQ_FOREACH(q, &o->reqs, entry)
		cap += q->nent;
	if (cap == 0)
		return BE_DONE;
	if ((ents = kl_calloc(cap, sizeof(*ents))) == NULL) {
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	TAILQ_FOREACH(q, &o->reqs, entry)
		for (size_t i = 0; q->state == REQ_HELD && i < q->nent; i++)
			if (q->ent[i].rep == ENT_HELD &&
			    q->ent[i].w < W_DEL_WAIT)
				ents[n++] = &q->ent[i];
	st = ebe_release_ents(e, o, BE_UNLOCKALL, ents, n, r);
	kl_free(ents);
	return st;
}

/*
 * A REFRESH on its way to etcd: answered when etcd
 * has it (ebe_refreshed()). It points to its owner, which stays while
 * o->refreshing (eowner_maybe_free()); its entries are found again by
 * their etcd key and create revision, since any may end meanwhile.
 */
struct erefresh {
	struct ebe		*e;
	struct eowner		*o;
	struct erefresh		*next;		/* e->refreshes */
	struct erefresh		**pprev;
	struct etcd_call	*call;
	uint64_t		 ttl_ms;
	size_t			 n;
	struct eentry		**found;	/* n: the entries again */
	struct erefresh_ent {
		char		*ekey;
		size_t		 ekeylen;
		size_t		 lkeyoff, lkeylen;
		int64_t		 crev;
	}			 ent[];
};

static void
erefresh_free(struct erefresh *f)
{
	if (f->pprev != NULL) {
		*f->pprev = f->next;
		if (f->next != NULL)
			f->next->pprev = f->pprev;
	}
	for (size_t i = 0; i < f->n; i++)
		kl_free(f->ent[i].ekey);
	kl_free(f->found);
	kl_free(f);
}

/* o's entry that f's i-th was: still held, not being deleted; or NULL. */
static struct eentry *
erefresh_find(const struct erefresh *f, size_t i)
{
	const struct erefresh_ent	*fe = &f->ent[i];
	struct ereq			*q;

	TAILQ_FOREACH(q, &f->o->reqs, entry)
		for (size_t j = 0; q->state == REQ_HELD && j < q->nent; j++) {
			struct eentry *x = &q->ent[j];

			if (x->crev == fe->crev && x->ekeylen == fe->ekeylen &&
			    memcmp(x->ekey, fe->ekey, fe->ekeylen) == 0)
				return x->rep == ENT_HELD && x->w < W_DEL_WAIT ?
				    x : NULL;
		}
	return NULL;
}

/*
 * The reply to a REFRESH: made, each entry as we applied it (its
 * create revision), so every replica restarts its ttl at the put
 * (apply_rewrite()) and so do we, now (replica_refresh()): OK. A key no
 * longer held (its old ttl ran out meanwhile): NOTHELD. Not made (etcd
 * did not answer in time, or an entry is not the one we applied: another
 * front end ended it, and the watch brings its delete): ERR BACKEND, and
 * the ttl stays as it was here (a try etcd carries out later, after all,
 * restarts it on every other replica at that put; here it ends at the old
 * ttl, which deletes the entry everywhere).
 */
static void
ebe_refreshed(void *arg, const struct etcd_result *r)
{
	struct erefresh		*f = arg;
	struct ebe		*e = f->e;
	struct eowner		*o = f->o;
	struct be_result	 res;

	o->refreshing = false;
	if (e->state >= EBE_STOPPING) {
		erefresh_free(f);
		return;
	}
	if (o->state == OWN_THEIRS || o->state == OWN_GONE) {
		/* its connection closed, or its session moved away */
		erefresh_free(f);
		eowner_maybe_free(o);
		ebe_end_turn(e);
		return;
	}
	memset(&res, 0, sizeof(res));
	res.op = BE_REFRESH;
	for (size_t i = 0; i < f->n; i++)
		if ((f->found[i] = erefresh_find(f, i)) == NULL) {
			res.err = KL_ERR_NOTHELD;
			res.why.key = f->ent[i].ekey + f->ent[i].lkeyoff;
			res.why.keylen = f->ent[i].lkeylen;
			break;
		}
	if (res.err != KL_OK) {
		/* NOTHELD */
	} else if (r->status != ETCD_OK) {
		log_info("backend etcd: a REFRESH not written: %s",
		    r->message != NULL ? r->message :
		    etcd_status_name(r->status));
		be_backend(&res, BE_REFRESH, "etcd did not take the REFRESH "
		    "in time; the ttl is as it was");
	} else if (!r->succeeded) {
		be_backend(&res, BE_REFRESH, "etcd no longer has the hold as "
		    "this front end applied it (another front end ended it?); "
		    "the ttl is as it was");
	} else {
		replica_refresh(e->rp, o, f->found, f->n, f->ttl_ms);
		res.value = f->n;
	}
	ebe_done(e, o, &res);	/* o is idle: its REFRESH is its request */
	erefresh_free(f);
	ebe_end_turn(e);
}

/* The REFRESH f of o, from n entries: their keys and revisions. NULL on
 * no memory. */
static struct erefresh *
erefresh_new(struct ebe *e, struct eowner *o, struct eentry **ents,
    size_t n, uint64_t ttl_ms)
{
	struct erefresh *f;

	if ((f = kl_calloc(1, sizeof(*f) + n * sizeof(f->ent[0]))) == NULL)
		return NULL;
	f->e = e;
	f->o = o;
	f->ttl_ms = ttl_ms;
	if ((f->found = kl_calloc(n, sizeof(*f->found))) == NULL) {
		kl_free(f);
		return NULL;
	}
	for (; f->n < n; f->n++) {
		struct erefresh_ent	*fe = &f->ent[f->n];
		struct eentry		*x = ents[f->n];

		if ((fe->ekey = kl_malloc(x->ekeylen)) == NULL) {
			erefresh_free(f);
			return NULL;
		}
		memcpy(fe->ekey, x->ekey, x->ekeylen);
		fe->ekeylen = x->ekeylen;
		fe->lkeyoff = (size_t)(x->lkey - x->ekey);
		fe->lkeylen = x->lkeylen;
		fe->crev = x->crev;
	}
	return f;
}

/*
 * A REFRESH for every other front end: the one that may take a session
 * over (keylockd-protocol(7), SESSIONS: Across front ends), and those
 * that end a hold whose front end died (ebe_reap()). Each refreshed
 * entry put again under the lease it has (a session's L, else our own)
 * with its value and " r=TTL", on the condition that it is still the
 * entry every replica applied (its create revision), so that a try
 * landing late, after its delete, makes nothing. Every replica restarts
 * that key's ttl then (apply_rewrite()). One transaction, apart from the
 * group commit; the REFRESH is answered when etcd replies
 * (ebe_refreshed(): BE_PENDING), or now with what kept it from being
 * sent (BE_DONE, r).
 */
static enum be_status
ebe_refresh_put(struct ebe *e, struct eowner *o, struct eentry **ents,
    size_t n, uint64_t ttl_ms, struct be_result *r)
{
	struct etcd_txn	*t;
	struct erefresh	*f;

	if ((t = etcd_txn_new()) == NULL) {
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	for (size_t i = 0; i < n; i++) {
		struct eentry	*x = ents[i];
		struct ereq	*q = x->req;
		const char	*nl;
		char		*v, tag[64];
		size_t		 at, tl = 0, len;
		int		 rc;

		if (x->crev <= 0 || q->value == NULL) {
			/* never: a hold was applied, and keeps its value */
			etcd_txn_free(t);
			be_backend(r, BE_REFRESH, "etcd: the hold is not known "
			    "to this front end as etcd has it");
			return BE_DONE;
		}
		nl = memchr(q->value, '\n', q->valuelen);
		at = nl != NULL ? (size_t)(nl - q->value) : q->valuelen;
		/* a channel's put again by SESSION names its channel, which
		 * its first value did not */
		if (o->chan != 0 && memmem(q->value, at, " @", 2) == NULL)
			tl = (size_t)snprintf(tag, sizeof(tag), " @%" PRIu32
			    ":%" PRIu64, o->chan, o->sclient);
		len = q->valuelen + tl + 32;
		if ((v = kl_malloc(len)) == NULL) {
			etcd_txn_free(t);
			r->err = KL_ERR_NOMEM;
			return BE_DONE;
		}
		memcpy(v, q->value, at);
		memcpy(v + at, tag, tl);
		at += tl;
		at += (size_t)snprintf(v + at, len - at, " r=%" PRIu64, ttl_ms);
		if (nl != NULL) {
			size_t rest = q->valuelen - (size_t)(nl - q->value);

			memcpy(v + at, nl, rest);
			at += rest;
		}
		rc = etcd_txn_compare(t, x->ekey, x->ekeylen, ETCD_CMP_CREATE,
		    ETCD_CMP_EQUAL, x->crev) != 0 || etcd_txn_put(t, true,
		    x->ekey, x->ekeylen, v, at, (int64_t)(o->lease != 0 ?
		    o->lease : q->fe)) != 0 ? -1 : 0;
		kl_free(v);
		if (rc != 0) {
			etcd_txn_free(t);
			r->err = KL_ERR_NOMEM;
			return BE_DONE;
		}
	}
	if ((f = erefresh_new(e, o, ents, n, ttl_ms)) == NULL) {
		etcd_txn_free(t);
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	/* etcd_txn() takes t, sent or not */
	if ((f->call = etcd_txn(e->etcd, t, ETCD_RETRY, ebe_refreshed, f)) ==
	    NULL) {
		erefresh_free(f);
		be_backend(r, BE_REFRESH, "etcd: no room to send the REFRESH "
		    "now");
		return BE_DONE;
	}
	o->refreshing = true;
	f->pprev = &e->refreshes;
	if ((f->next = e->refreshes) != NULL)
		f->next->pprev = &f->next;
	e->refreshes = f;
	return BE_PENDING;
}

/* REFRESH: the entries again (ebe_refresh_put()), answered once etcd has
 * them, when our own ttl timers and table restart too. */
static enum be_status
ebe_refresh(struct backend *be, struct lt_owner *lo, const char *const *keys,
    const size_t *keylens, size_t nkeys, uint64_t ttl_ms, uint64_t now_ms,
    struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct eentry	*stack[16], **ents = stack;
	enum be_status	 st = BE_DONE;
	size_t		 n = 0;

	memset(r, 0, sizeof(*r));
	r->op = BE_REFRESH;
	if (!ebe_serving(e, r, BE_REFRESH))
		return BE_DONE;
	if (ttl_ms == 0) {
		r->err = KL_ERR_SYNTAX;
		return BE_DONE;
	}
	if (nkeys > 16 && (ents = kl_calloc(nkeys, sizeof(*ents))) == NULL) {
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	if (o != NULL && held_entries(e, o, keys, keylens, nkeys, ents, &n,
	    r)) {
		if (n > 0)
			st = ebe_refresh_put(e, o, ents, n, ttl_ms, r);
	}
	if (ents != stack)
		kl_free(ents);
	return st;
}

/*
 * The end of o's waiting LOCK. Undecided yet: the verdict at its
 * revision decides (a grant then wins the race). Queued: its entries are
 * deleted, and the answer goes out when the watch brings the delete. A
 * TRYLOCK's deadline (0) is not a withdrawal: its verdict is coming.
 */
static enum be_status
ebe_withdraw(struct backend *be, struct lt_owner *lo, enum lt_why why,
    uint64_t now_ms, struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct ereq	*q = o != NULL ? o->open : NULL;

	memset(r, 0, sizeof(*r));
	r->op = BE_LOCK;
	if (q == NULL || q->side != SIDE_ASKED ||
	    (why == LT_WHY_TIMEOUT && q->a.try))
		return BE_DONE;
	q->why = why;
	if (why == LT_WHY_SHUTDOWN || e->state != EBE_READY) {
		/* no wait for etcd: the lease goes with us */
		q->side = SIDE_ENDED;
		o->open = NULL;
		o->state = OWN_IDLE;
		r->err = why == LT_WHY_SHUTDOWN ? KL_ERR_SHUTDOWN :
		    KL_ERR_BACKEND;
		r->text = e->why;
		r->value = 1;
		if (e->state == EBE_READY)
			commit_delete_req(e->cm, q);
		return BE_DONE;
	}
	if (q->state == REQ_PUTTING) {
		q->side = SIDE_DEADLINE;
		return BE_PENDING;
	}
	q->side = SIDE_WITHDRAWING;
	commit_delete_req(e->cm, q);
	return BE_PENDING;
}

static const struct locktable *
ebe_table(const struct backend *be)
{
	return replica_table(((const struct ebe *)be)->rp);
}

/* The seam's read_barrier (read your own writes, above). */
static enum be_status
ebe_read_barrier(struct backend *be, struct lt_owner *lo, uint64_t cmd,
    const char *arg, size_t arglen, struct be_result *r)
{
	struct ebe		*e = ebe_of(be);
	struct eowner		*o = eowner_of(e->rp, lo);
	struct ebe_epoch	*ep = NULL;
	struct ebe_read		*rd;

	memset(r, 0, sizeof(*r));
	r->op = BE_READ;
	r->value = cmd;
	if (o == NULL || (e->rd_open == 0 && TAILQ_EMPTY(&e->rd_closed)))
		return BE_DONE;
	if ((rd = kl_calloc(1, sizeof(*rd) + arglen + 1)) == NULL ||
	    (e->rd_open > 0 && (ep = kl_calloc(1, sizeof(*ep))) == NULL)) {
		kl_free(rd);
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	if (ep != NULL) {
		ep->epoch = e->rd_epoch++;
		ep->left = e->rd_open;
		e->rd_open = 0;
		TAILQ_INSERT_TAIL(&e->rd_closed, ep, entry);
	}
	rd->o = o;
	rd->upto = TAILQ_LAST(&e->rd_closed, ebe_epochq)->epoch;
	rd->until = kl_now_ms() + 2 * (uint64_t)e->timeout_ms;
	if (e->rd_timer != NULL && !evtimer_pending(e->rd_timer, NULL)) {
		struct timeval tv;

		tv_ms(&tv, 2 * (uint64_t)e->timeout_ms);
		evtimer_add(e->rd_timer, &tv);
	}
	rd->cmd = cmd;
	rd->arglen = arglen;
	if (arglen > 0)
		memcpy(rd->arg, arg, arglen);
	TAILQ_INSERT_TAIL(&e->rd_waiting, rd, entry);
	return BE_PENDING;
}

static void
ebe_freeze(struct backend *be)
{
	replica_freeze(ebe_of(be)->rp);
}

static void
ebe_op_end_turn(struct backend *be)
{
	ebe_note_ready(ebe_of(be));
	commit_flush(ebe_of(be)->cm);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
}

/* Runs the loop for up to ms, or until the state changes (start-up and
 * stop only: a tick of its own, never event_base_loopexit(), which would
 * end the daemon's own loop later). */
static void
ebe_run_until(struct ebe *e, int ms)
{
	uint64_t	 deadline = kl_now_ms() + (uint64_t)ms;
	struct timeval	 tv = { 0, 50000 };
	struct event	*tick = evtimer_new(e->base, tick_cb, NULL);
	enum ebe_state	 was = e->state;

	if (tick == NULL)
		return;
	while (e->state == was && kl_now_ms() < deadline) {
		evtimer_add(tick, &tv);
		event_base_loop(e->base, EVLOOP_ONCE);
	}
	event_free(tick);
}

static void
stop_revoked(void *arg, const struct etcd_result *r)
{
	struct ebe *e = arg;

	e->state = EBE_STOPPED;
}

static void
ebe_free(struct backend *be)
{
	struct ebe	*e = ebe_of(be);
	enum ebe_state	 was = e->state;
	struct ebe_read	*rd;

	e->state = EBE_STOPPING;
	if (e->lease.keepalive != NULL)
		evtimer_del(e->lease.keepalive);
	if (e->lease.guard != NULL)
		evtimer_del(e->lease.guard);
	if (e->start != NULL)
		evtimer_del(e->start);
	if (e->revoke_timer != NULL)
		evtimer_del(e->revoke_timer);
	/* transactions still on the wire end unheard */
	if (e->cm != NULL)
		commit_drop(e->cm);
	es_free_all(e);
	ev_free_all(e);
	if (e->lease.fe != 0 && e->etcd != NULL && was != EBE_LOST) {
		/* our entries go now, not at the lease's expiry */
		etcd_watch_stop(e->etcd);
		if (etcd_lease_revoke(e->etcd, (int64_t)e->lease.fe, 0,
		    stop_revoked, e) != NULL)
			ebe_run_until(e, e->timeout_ms);
	}
	e->state = EBE_STOPPED;
	if (e->cm != NULL)
		commit_drop(e->cm);	/* what the loop queued */
	ebe_read_reset(e);
	while ((rd = TAILQ_FIRST(&e->rd_waiting)) != NULL) {
		TAILQ_REMOVE(&e->rd_waiting, rd, entry);
		ebe_read_free(rd);
	}
	while (e->refreshes != NULL) {	/* unanswered, as a LOCK's */
		etcd_cancel(e->refreshes->call);
		e->refreshes->o->refreshing = false;
		erefresh_free(e->refreshes);
	}
	replica_free(e->rp);
	etcd_free(e->etcd);
	commit_free(e->cm);
	if (e->lease.keepalive != NULL)
		event_free(e->lease.keepalive);
	if (e->lease.guard != NULL)
		event_free(e->lease.guard);
	if (e->start != NULL)
		event_free(e->start);
	if (e->rd_timer != NULL)
		event_free(e->rd_timer);
	if (e->revoke_timer != NULL)
		event_free(e->revoke_timer);
	kl_free(e->prefix);
	kl_free(e);
}

/* ---- sessions across front ends ---- */

/*
 * keylockd-protocol(7), SESSIONS: Across front ends. A session is a
 * record P s/H (H the hex SHA-256 of its raw ID, which never leaves the
 * daemon) under a lease L of its own, which every entry of its owner
 * carries too: its holds and its wait last as long as L does, whatever
 * becomes of the front end they were asked through. L's TTL is
 * ceil(3/2 x grace) s (etcd raises it to its minimum), kept alive every
 * TTL/4 by the front end the record names, so that when that front end
 * dies L goes between grace and TTL after the last byte it read. The
 * daemon keeps the session itself (its ID, its grace timer while
 * detached, src/daemon/session.c); struct esession keeps L, the record
 * and the takeover:
 *   SESSION: L granted, the record put if there is none (ES_OPENING),
 *   then ES_OURS: the owner's entries carry L (eowner_set_lease).
 *   RESUME of a session this front end does not have: the record read,
 *   put again naming us if it has not changed since (a compare of its mod
 *   revision: of two RESUMEs one wins; the other reads it again and moves
 *   it on, as a second RESUME does in backend local) (ES_RESUMING); once
 *   our watch brings that put, the owner the replica has built from the
 *   session's entries becomes ours (replica_adopt) and the connection
 *   adopts it. The front end it moved from sees the same put, forgets
 *   the session without a release (hooks.moved, replica_disown) and stops
 *   keeping L alive.
 *   Ended here (QUIT, KILL, its grace, a lock lost): L revoked, which
 *   deletes its record and its entries at once, on every replica.
 */

enum esession_state {
	ES_OPENING,		/* SESSION: L, then the record */
	ES_RESUMING,		/* RESUME: the record read, then taken */
	ES_OURS			/* its record names us: we keep L alive */
};

struct esession {
	struct ebe		*e;
	struct esession		*next;		/* e->sessions' chain */
	enum esession_state	 state;
	char			 hash[EBE_HASH_HEX + 1];
	uint64_t		 lease;		/* L; 0 before its grant */
	uint64_t		 client;
	uint64_t		 grace_ms;
	char			 user[KL_NAME_MAX + 1];	/* "": none */
	struct eowner		*o;		/* ES_OURS: the session's */
	struct eowner		*req;		/* OPENING, RESUMING: whose
						 * SESSION or RESUME waits;
						 * NULL once it has gone */
	bool			 closed;	/* its record deleted: in
						 * session-lock-delay */
	int64_t			 seen_rev;	/* RESUMING: the record read */
	int64_t			 rec_rev;	/* our record's revision */
	char			 name[KL_NAME_MAX + 1];	/* its NAME in the
						 * record; "": none */
	uint64_t		 detached_at;	/* the record's DETACHED */
	bool			 dirty;		/* ES_OURS: the record is to
						 * be written again once es->call
						 * is answered */
	int			 tries;
	int64_t			 ttl_s;
	uint64_t		 until;		/* L lasts at least until */
	uint64_t		 ka_sent;
	struct event		*ka;		/* every TTL/4 */
	struct event		*guard;		/* until - margin */
	struct event		*retry;		/* OPENING: es_open_try() */
	uint64_t		 open_until;	/* OPENING: tries end */
	struct es_chan		*chans;		/* OPENING: the connection's
						 * other channels */
	size_t			 nchans;
	struct etcd_call	*call;		/* grant, range or txn */
	struct etcd_call	*ka_call;
};

/* A channel of a SESSION's connection: its number and its owner's id
 * (ours: found as (0, id) while it is not the session's). */
struct es_chan {
	uint32_t	 n;
	uint64_t	 client;
};

#define ES_BUCKETS	4096		/* by the first 3 digits of H */
#define ES_MARGIN_MIN_MS 250
#define ES_TRIES	3		/* takeovers lost to another RESUME */

static size_t
es_bucket(const char *hash)
{
	size_t b = 0;

	for (int i = 0; i < 3; i++) {
		int c = (unsigned char)hash[i];

		b = b << 4 | (size_t)(c >= 'a' ? c - 'a' + 10 : c - '0');
	}
	return b & (ES_BUCKETS - 1);
}

static struct esession *
es_find(struct ebe *e, const char *hash)
{
	struct esession *es;

	if (e->sessions == NULL)
		return NULL;
	for (es = e->sessions[es_bucket(hash)]; es != NULL; es = es->next)
		if (memcmp(es->hash, hash, EBE_HASH_HEX) == 0)
			return es;
	return NULL;
}

/* L's TTL for a grace: etcd lets L go at least 3/4 TTL after the last
 * keepalive we sent, which is at most TTL/4 before the last byte. */
static int64_t
es_ttl_s(uint64_t grace_ms)
{
	uint64_t s = (grace_ms * 3 / 2 + 999) / 1000;

	return s < 1 ? 1 : (int64_t)s;
}

static uint64_t
es_margin(const struct esession *es)
{
	uint64_t m = (uint64_t)es->ttl_s * 1000 / 4;

	return m < ES_MARGIN_MIN_MS ? ES_MARGIN_MIN_MS : m;
}

static void	es_ka_cb(evutil_socket_t, short, void *);
static void	es_guard_cb(evutil_socket_t, short, void *);
static void	es_retry_cb(evutil_socket_t, short, void *);

static struct esession *
es_new(struct ebe *e, const char *hash)
{
	struct esession	*es;
	size_t		 b = es_bucket(hash);

	if (e->sessions == NULL && (e->sessions = kl_calloc(ES_BUCKETS,
	    sizeof(*e->sessions))) == NULL)
		return NULL;
	if ((es = kl_calloc(1, sizeof(*es))) == NULL)
		return NULL;
	if ((es->ka = evtimer_new(e->base, es_ka_cb, es)) == NULL ||
	    (es->guard = evtimer_new(e->base, es_guard_cb, es)) == NULL ||
	    (es->retry = evtimer_new(e->base, es_retry_cb, es)) == NULL) {
		if (es->ka != NULL)
			event_free(es->ka);
		if (es->guard != NULL)
			event_free(es->guard);
		kl_free(es);
		return NULL;
	}
	es->e = e;
	memcpy(es->hash, hash, EBE_HASH_HEX);
	es->next = e->sessions[b];
	e->sessions[b] = es;
	e->nsessions++;
	return es;
}

/* Forgets es (L is left as it is). */
static void
es_free(struct esession *es)
{
	struct ebe	*e = es->e;
	struct esession	**pp = &e->sessions[es_bucket(es->hash)];

	while (*pp != es)
		pp = &(*pp)->next;
	*pp = es->next;
	e->nsessions--;
	if (es->call != NULL)
		etcd_cancel(es->call);
	if (es->ka_call != NULL)
		etcd_cancel(es->ka_call);
	event_free(es->ka);
	event_free(es->guard);
	event_free(es->retry);
	kl_free(es->chans);
	if (es->o != NULL && es->o->sess == es)
		es->o->sess = NULL;
	if (es->req != NULL && es->req->sess == es)
		es->req->sess = NULL;
	kl_free(es);
}

static size_t
es_key(const struct esession *es, char *out, size_t cap)
{
	return (size_t)snprintf(out, cap, "%ss/%s", es->e->prefix, es->hash);
}

/* A session lease whose revoke is put off until at_ms. */
struct erevoke {
	uint64_t	lease;
	uint64_t	at_ms;
};

static void
revokes_arm(struct ebe *e)
{
	struct timeval	tv;
	uint64_t	now = kl_now_ms(), at = UINT64_MAX;

	for (size_t i = 0; i < e->nrevokes; i++)
		if (e->revokes[i].at_ms < at)
			at = e->revokes[i].at_ms;
	if (at == UINT64_MAX)
		return;
	tv_ms(&tv, at > now ? at - now : 0);
	evtimer_add(e->revoke_timer, &tv);
}

/* The revokes that are due (all of them: now is UINT64_MAX). */
static void
revokes_run(struct ebe *e, uint64_t now)
{
	size_t n = 0;

	for (size_t i = 0; i < e->nrevokes; i++)
		if (e->revokes[i].at_ms <= now)
			etcd_lease_revoke(e->etcd,
			    (int64_t)e->revokes[i].lease, ETCD_RETRY,
			    revoke_done, NULL);
		else
			e->revokes[n++] = e->revokes[i];
	e->nrevokes = n;
}

static void
revoke_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ebe *e = arg;

	revokes_run(e, kl_now_ms());
	revokes_arm(e);
	ebe_end_turn(e);
}

/* Does a put under es's lease wait for etcd's answer (queued, or on the
 * wire, where the etcd client may try it again until etcd-timeout)? */
static bool
eowner_puts_on_the_way(const struct eowner *o)
{
	const struct ereq *r;

	TAILQ_FOREACH(r, &o->reqs, entry)
		for (size_t i = 0; r->refs > 0 && i < r->nent; i++)
			if (r->ent[i].w == W_PUTTING)
				return true;
	return false;
}

/* ... of its channel 0's owner, or of one of its channels' (gone from
 * their connections or not). */
static bool
es_puts_on_the_way(const struct esession *es)
{
	const struct eowner *o;

	if (es->o == NULL)
		return false;
	if (eowner_puts_on_the_way(es->o))
		return true;
	for (o = eowner_chan_first(es->e->rp, es->lease); o != NULL;
	    o = eowner_chan_next(o))
		if (o->state != OWN_THEIRS && eowner_puts_on_the_way(o))
			return true;
	return false;
}

/*
 * Ends the session: L revoked deletes its record and every entry. While
 * a put under L is on its way, L goes only once etcd-timeout has passed
 * (that put would fail for want of L, and with it every write of its
 * transaction, which etcd then answers "lease not found", our own
 * lease's loss): the record goes at once, so that RESUME is ERR GONE,
 * and the owner's deletes release the rest meanwhile.
 */
static void
es_revoke_free(struct esession *es)
{
	struct ebe	*e = es->e;
	struct erevoke	*p = e->revokes;
	char		 key[512];
	size_t		 klen;

	if (es->lease != 0 && es_puts_on_the_way(es) &&
	    e->state < EBE_STOPPING && (e->nrevokes < e->caprevokes ||
	    (p = kl_realloc(e->revokes, (e->caprevokes * 2 + 4) *
	    sizeof(*p))) != NULL)) {
		if (e->nrevokes == e->caprevokes) {
			e->revokes = p;
			e->caprevokes = e->caprevokes * 2 + 4;
		}
		e->revokes[e->nrevokes].lease = es->lease;
		e->revokes[e->nrevokes++].at_ms = kl_now_ms() +
		    (uint64_t)e->timeout_ms + EBE_RETRY_MAX_MS;
		revokes_arm(e);
		klen = es_key(es, key, sizeof(key));
		etcd_deleterange(e->etcd, key, klen, NULL, 0, ETCD_RETRY,
		    revoke_done, NULL);
	} else if (es->lease != 0) {
		etcd_lease_revoke(e->etcd, (int64_t)es->lease, ETCD_RETRY,
		    revoke_done, NULL);
	}
	es_free(es);
}

static size_t
es_value(const struct esession *es, uint64_t fe, char *out, size_t cap)
{
	return (size_t)snprintf(out, cap, EBE_RECORD_VERSION " %" PRIu64 " %"
	    PRIu64 " %016" PRIx64 " %" PRIu64 "%s%s%s%s", es->client,
	    es->grace_ms, fe, es->detached_at, es->user[0] != '\0' ? " " : "",
	    es->user, es->name[0] != '\0' ? "\n" : "", es->name);
}

/* Wall-clock ms: a record's DETACHED, read by other hosts. */
static uint64_t
es_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The SESSION or RESUME waiting for es is answered. */
static void
es_answer(struct esession *es, const struct be_result *res)
{
	struct eowner *o = es->req;

	es->req = NULL;
	if (o == NULL)
		return;
	if (o->sess == es)
		o->sess = NULL;
	if (o->state == OWN_SESSION)
		ebe_done(es->e, o, res);
}

/*
 * SESSION or RESUME cannot be carried out now: ERR BACKEND. A SESSION's
 * lease and record go with es (nothing was changed). A RESUME may have
 * moved the record already (moved: its takeover was sent): nobody keeps
 * the session alive from now on, and it lasts its grace, for a RESUME
 * through any front end to take it.
 */
static void
es_fail(struct esession *es, const char *why, bool moved)
{
	struct ebe		*e = es->e;
	struct be_result	 r;

	log_info("backend etcd: a %s failed: %s", es->state == ES_OPENING ?
	    "SESSION" : "RESUME", why);
	if (es->state == ES_OPENING || !moved)
		snprintf(e->why, sizeof(e->why), "etcd did not take the %s in "
		    "time; nothing was changed", es->state == ES_OPENING ?
		    "SESSION" : "RESUME");
	else
		snprintf(e->why, sizeof(e->why), "etcd did not complete the "
		    "RESUME in time; the session may have moved here but is "
		    "not attached: it is kept for its grace, RESUME again");
	be_backend(&r, es->state == ES_OPENING ? BE_SESSION : BE_RESUME,
	    e->why);
	es_answer(es, &r);
	if (es->state == ES_OPENING)
		es_revoke_free(es);
	else
		es_free(es);
}

/* RESUME of a session that does not exist, or is another user's. */
static void
es_gone(struct esession *es)
{
	struct be_result r;

	memset(&r, 0, sizeof(r));
	r.op = BE_RESUME;
	r.err = KL_ERR_GONE;
	es_answer(es, &r);
	es_free(es);
}

/* Our session's lease is gone, or at risk: its client's locks are lost
 * (its connection closes, its session ends). */
static void
es_lost(struct esession *es, const char *why)
{
	struct ebe	*e = es->e;
	struct eowner	*o = es->o;

	if (es->state == ES_RESUMING) {
		es_gone(es);
		return;
	}
	if (es->state != ES_OURS) {
		es_fail(es, why, false);
		return;
	}
	log_warnx("backend etcd: client %" PRIu64 ": %s: its session ends",
	    es->client, why);
	es_revoke_free(es);
	if (locktable_owner_udata(o->lo) != NULL)
		e->hooks.drop(e->hooks.arg, o->lo, "lock lost: the session's "
		    "etcd lease ended");
}

static void
es_guard_arm(struct esession *es)
{
	struct timeval	tv;
	uint64_t	now = kl_now_ms(), at = es->until - es_margin(es);

	tv_ms(&tv, at > now ? at - now : 0);
	evtimer_add(es->guard, &tv);
}

static void
es_guard_cb(evutil_socket_t fd, short what, void *arg)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;

	if (es->state == ES_OURS &&
	    kl_now_ms() + es_margin(es) >= es->until)
		es_lost(es, "etcd has not renewed the session's lease in time");
	ebe_end_turn(e);
}

static void
es_ka_done(void *arg, const struct etcd_result *r)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;
	struct timeval	 tv;

	es->ka_call = NULL;
	if (r->status == ETCD_OK && r->ttl > 0) {
		es->ttl_s = r->ttl;
		es->until = es->ka_sent + (uint64_t)r->ttl * 1000;
		es_guard_arm(es);
		tv_ms(&tv, (uint64_t)r->ttl * 1000 / 4);
	} else if (r->status == ETCD_OK || (r->status == ETCD_ERR_GRPC &&
	    r->grpc_code == ETCD_GRPC_NOT_FOUND)) {
		es_lost(es, "etcd let the session's lease expire");
		ebe_end_turn(e);
		return;
	} else {
		tv_ms(&tv, EBE_RETRY_MS * 2);
	}
	evtimer_add(es->ka, &tv);
	ebe_end_turn(e);
}

static void
es_ka_cb(evutil_socket_t fd, short what, void *arg)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;
	struct timeval	 tv;

	if (es->ka_call == NULL) {
		es->ka_sent = kl_now_ms();
		es->ka_call = etcd_lease_keepalive(e->etcd,
		    (int64_t)es->lease, ETCD_RETRY, es_ka_done, es);
	}
	if (es->ka_call == NULL) {
		tv_ms(&tv, EBE_RETRY_MS * 2);
		evtimer_add(es->ka, &tv);
	}
	ebe_end_turn(e);
}

/* Keeps L alive from now on: a keepalive at once, then every TTL/4. */
static void
es_ka_start(struct esession *es)
{
	struct timeval tv = { 0, 0 };

	evtimer_add(es->ka, &tv);
	if (es->until != 0)
		es_guard_arm(es);
}

/* ---- SESSION and RESUME: what they share ---- */

static void
es_name_set(struct esession *es, const char *name)
{
	snprintf(es->name, sizeof(es->name), "%s", name != NULL ? name : "");
}

/*
 * The session o asks for (SESSION, op BE_SESSION; RESUME, BE_RESUME) of
 * hash, new, or NULL with the answer in r: o must hold, wait for and
 * have nothing yet (the daemon checks it first, with the client's
 * words), and no session of this ID may be on its way here.
 */
static struct esession *
es_precheck(struct ebe *e, struct eowner *o, const char *hash, enum be_op op,
    struct be_result *r)
{
	struct esession *es;

	memset(r, 0, sizeof(*r));
	r->op = op;
	if (!ebe_serving(e, r, op))
		return NULL;
	/* SESSION takes the connection's holds along (es_open_put());
	 * RESUME needs a connection with nothing */
	if (o == NULL || o->state != OWN_IDLE || o->sess != NULL ||
	    o->lease != 0 || (op == BE_RESUME && !TAILQ_EMPTY(&o->reqs))) {
		r->err = KL_ERR_SESSION;
		r->text = op == BE_SESSION ? "through backend etcd, SESSION "
		    "needs a connection without a wait or a session" : "RESUME "
		    "needs a connection without a session, locks or waits";
		return NULL;
	}
	if (es_find(e, hash) != NULL) {
		if (op == BE_SESSION) {
			r->err = KL_ERR_SESSION;
			r->text = "no session: its ID is in use";
		} else {
			be_backend(r, op, "a RESUME of this session is under "
			    "way on this front end; try again");
		}
		return NULL;
	}
	if ((es = es_new(e, hash)) == NULL)
		r->err = KL_ERR_NOMEM;
	return es;
}

/* es's SESSION or RESUME, asked by o, is on its way. */
static enum be_status
es_pend(struct esession *es, struct eowner *o)
{
	es->req = o;
	o->sess = es;
	o->state = OWN_SESSION;
	return BE_PENDING;
}

/*
 * Puts es's record naming us under L if its cmp (ETCD_CMP_CREATE or
 * ETCD_CMP_MOD) revision is rev: SESSION's record where there is none
 * (rev 0), RESUME's takeover of the record it read. done hears the
 * answer; -1: no memory.
 */
static int
es_record_put(struct esession *es, enum etcd_cmp_target cmp, int64_t rev,
    etcd_cb *done)
{
	struct ebe	*e = es->e;
	struct etcd_txn	*t;
	char		 key[512], val[320];
	size_t		 klen = es_key(es, key, sizeof(key));
	size_t		 vlen = es_value(es, e->lease.fe, val, sizeof(val));

	if ((t = etcd_txn_new()) == NULL)
		return -1;
	if (etcd_txn_compare(t, key, klen, cmp, ETCD_CMP_EQUAL, rev) != 0 ||
	    etcd_txn_put(t, true, key, klen, val, vlen,
	    (int64_t)es->lease) != 0) {
		etcd_txn_free(t);
		return -1;
	}
	/* etcd_txn() takes t, sent or not */
	es->call = etcd_txn(e->etcd, t, ETCD_RETRY, done, es);
	return es->call != NULL ? 0 : -1;
}

static void	es_record_write(struct esession *es);

static void
es_rewritten(void *arg, const struct etcd_result *r)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;

	es->call = NULL;
	if (r->status == ETCD_OK && r->succeeded && r->revision > es->rec_rev)
		es->rec_rev = r->revision;
	else if (r->status != ETCD_OK)
		log_info("backend etcd: client %" PRIu64 ": the session's record "
		    "was not rewritten: %s", es->client, r->message != NULL ?
		    r->message : etcd_status_name(r->status));
	/* not succeeded: it moved on (another front end took it, or it
	 * ended), which the watch brings */
	if (es->dirty)
		es_record_write(es);
	ebe_end_turn(e);
}

/*
 * Our session's record again, with its NAME and whether it is detached
 * now (keylockd-protocol(7), SESSIONS: Across front ends): what other
 * front ends show in INFO, and what a RESUME through one of them gives
 * back. Only over the record we last wrote (a compare of its mod
 * revision), so never over another front end's takeover; one write at a
 * time, the last state winning.
 */
static void
es_record_write(struct esession *es)
{
	struct ebe	*e = es->e;

	es->dirty = false;
	if (es->state != ES_OURS || es->closed || e->state != EBE_READY)
		return;
	if (es->call != NULL) {
		es->dirty = true;
		return;
	}
	if (es_record_put(es, ETCD_CMP_MOD, es->rec_rev, es_rewritten) != 0)
		log_warnx("backend etcd: client %" PRIu64 ": no memory to "
		    "rewrite the session's record", es->client);
}

/* ---- SESSION ---- */

static void	es_recorded(void *, const struct etcd_result *);

/* An entry SESSION moves under L: put and applied, not let go of. */
static bool
es_moves(const struct eentry *x)
{
	return (x->rep == ENT_HELD || x->rep == ENT_LIVE) && x->w == W_PUT &&
	    x->crev > 0;
}

/* Our channel c of the connection opening es, not the session's yet;
 * NULL: gone. */
static struct eowner *
es_chan_owner(struct esession *es, const struct es_chan *c)
{
	struct eowner *ch = eowner_get(es->e->rp, 0, c->client, false);

	return ch != NULL && ch->state != OWN_THEIRS &&
	    ch->state != OWN_GONE && ch->lease == 0 ? ch : NULL;
}

/* r's held or queued entries, again under L in t, with r's value, and
 * " @chan:client" in it when chan is not 0 (a channel's). 0: done (or
 * nothing to move); -1: no memory. */
static int
es_put_again(struct esession *es, struct etcd_txn *t, struct ereq *r,
    uint32_t chan, bool *fence)
{
	const char	*v = r->value, *nl;
	char		*w = NULL;
	size_t		 vlen = r->valuelen, moved = 0;
	int		 rc = -1;

	if (r->state != REQ_HELD && r->state != REQ_WAITING)
		return 0;
	for (size_t i = 0; i < r->nent; i++)
		moved += es_moves(&r->ent[i]);
	if (moved == 0)
		return 0;
	if (v == NULL)		/* never: ours wrote it */
		return -1;
	if (chan != 0) {
		char	 tag[48];
		size_t	 tl = (size_t)snprintf(tag, sizeof(tag), " @%" PRIu32
			    ":%" PRIu64, chan, es->client);
		size_t	 at;

		nl = memchr(v, '\n', vlen);
		at = nl != NULL ? (size_t)(nl - v) : vlen;
		if ((w = kl_malloc(vlen + tl)) == NULL)
			return -1;
		memcpy(w, v, at);
		memcpy(w + at, tag, tl);
		memcpy(w + at + tl, v + at, vlen - at);
		v = w;
		vlen += tl;
	}
	for (size_t i = 0; i < r->nent; i++) {
		struct eentry *x = &r->ent[i];

		if (!es_moves(x))
			continue;
		if (etcd_txn_compare(t, x->ekey, x->ekeylen, ETCD_CMP_CREATE,
		    ETCD_CMP_EQUAL, x->crev) != 0 || etcd_txn_put(t, true,
		    x->ekey, x->ekeylen, v, vlen, (int64_t)es->lease) != 0)
			goto out;
	}
	*fence |= r->late;
	rc = 0;
out:
	kl_free(w);
	return rc;
}

/* May o's requests be put again now: none of them has a write on its
 * way (a try of a put landing after the rewrite would undo it)? */
static bool
es_settled(const struct eowner *o)
{
	const struct ereq *r;

	if (o->open != NULL && o->open->state == REQ_PUTTING)
		return false;
	TAILQ_FOREACH(r, &o->reqs, entry)
		if ((r->state == REQ_HELD || r->state == REQ_WAITING) &&
		    r->refs > 0)
			return false;
	return true;
}

/*
 * SESSION's transaction (keylockd-protocol(7), SESSIONS: the session
 * covers every lock the connection holds or waits for, already): the
 * record, where there is none, and every held entry of o's, and every
 * held or queued entry of the connection's other channels, put again
 * under L, each on the condition that it is still the entry the replica
 * applied (its create revision): same key, same value (a channel's with
 * its channel and the session's client added), so the same request and
 * verdict, and the same token, on every replica (a token is the
 * revision of its grant, which a rewrite does not change). A rewrite of
 * a put that may still land late (ereq.late) moves our fence too, as its
 * delete would (backend_etcd_commit.c): a late try of that put would put
 * the entry back under our lease. 1: sent; 0: not now, a write of these
 * requests is on its way; -1: no memory.
 */
static int
es_open_put(struct esession *es, struct eowner *o)
{
	struct ebe	*e = es->e;
	struct etcd_txn	*t;
	struct ereq	*r;
	struct eowner	*ch;
	char		 key[512], val[320];
	size_t		 klen = es_key(es, key, sizeof(key));
	size_t		 vlen = es_value(es, e->lease.fe, val, sizeof(val));
	bool		 fence = false;

	if (!es_settled(o))
		return 0;
	for (size_t i = 0; i < es->nchans; i++)
		if ((ch = es_chan_owner(es, &es->chans[i])) != NULL &&
		    !es_settled(ch))
			return 0;
	if ((t = etcd_txn_new()) == NULL)
		return -1;
	if (etcd_txn_compare(t, key, klen, ETCD_CMP_CREATE, ETCD_CMP_EQUAL,
	    0) != 0 || etcd_txn_put(t, true, key, klen, val, vlen,
	    (int64_t)es->lease) != 0)
		goto nomem;
	TAILQ_FOREACH(r, &o->reqs, entry)
		if (r->state == REQ_HELD &&
		    es_put_again(es, t, r, 0, &fence) != 0)
			goto nomem;
	for (size_t i = 0; i < es->nchans; i++) {
		if ((ch = es_chan_owner(es, &es->chans[i])) == NULL)
			continue;
		TAILQ_FOREACH(r, &ch->reqs, entry)
			if (es_put_again(es, t, r, es->chans[i].n,
			    &fence) != 0)
				goto nomem;
	}
	if (fence) {
		klen = (size_t)snprintf(key, sizeof(key), "%sfe/%016" PRIx64,
		    e->prefix, e->lease.fe);
		vlen = (size_t)snprintf(val, sizeof(val), "keylockd session "
		    "%" PRIu64, es->client);
		if (etcd_txn_put(t, true, key, klen, val, vlen,
		    (int64_t)e->lease.fe) != 0)
			goto nomem;
	}
	/* etcd_txn() takes t, sent or not */
	es->call = etcd_txn(e->etcd, t, ETCD_RETRY, es_recorded, es);
	return es->call != NULL ? 1 : -1;
nomem:
	etcd_txn_free(t);
	return -1;
}

/* SESSION's transaction now, or once the writes of o's holds on their
 * way are answered (until etcd-timeout: then ERR BACKEND). */
static void
es_open_try(struct esession *es)
{
	struct timeval	 tv;
	int		 rc;

	if (es->req == NULL) {
		es_revoke_free(es);
		return;
	}
	if ((rc = es_open_put(es, es->req)) > 0)
		return;
	if (rc < 0) {
		es_fail(es, "out of memory for the session's record", false);
	} else if (kl_now_ms() >= es->open_until) {
		es_fail(es, "the connection's last writes to etcd were not "
		    "answered in time", false);
	} else {
		tv_ms(&tv, 10);
		evtimer_add(es->retry, &tv);
	}
}

static void
es_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;

	if (es->state == ES_OPENING && es->call == NULL) {
		if (e->state != EBE_READY)
			es_fail(es, "the front end is not serving", false);
		else
			es_open_try(es);
	}
	ebe_end_turn(e);
}

static void
es_recorded(void *arg, const struct etcd_result *r)
{
	struct esession		*es = arg;
	struct ebe		*e = es->e;
	struct eowner		*o = es->req;
	struct be_result	 res;

	es->call = NULL;
	if (r->status == ETCD_OK && !r->succeeded && o != NULL &&
	    o->state == OWN_SESSION && e->state == EBE_READY &&
	    ++es->tries < ES_TRIES) {
		/* a held entry's delete (a ttl) came first: again, with
		 * what is held now */
		es_open_try(es);
	} else if (r->status != ETCD_OK || !r->succeeded) {
		es_fail(es, r->status != ETCD_OK ? (r->message != NULL ?
		    r->message : etcd_status_name(r->status)) :
		    "the record is there already, or the connection's locks "
		    "kept changing", false);
	} else if (o == NULL || o->state != OWN_SESSION ||
	    e->state != EBE_READY) {
		es_revoke_free(es);	/* nobody to tell: it ends */
	} else {
		es->req = NULL;
		es->state = ES_OURS;
		es->rec_rev = r->revision;
		es->o = o;
		o->sess = es;
		eowner_set_lease(e->rp, o, es->lease);
		/* the channels, whose entries the transaction moved: named
		 * (L, their id) and their channel from now on */
		for (size_t i = 0; i < es->nchans; i++) {
			struct eowner *ch = es_chan_owner(es, &es->chans[i]);

			if (ch != NULL)
				eowner_set_channel(e->rp, ch, es->lease,
				    ch->client, es->chans[i].n, es->client);
		}
		kl_free(es->chans);
		es->chans = NULL;
		es->nchans = 0;
		es_ka_start(es);
		log_info("backend etcd: client %" PRIu64 ": session under lease "
		    "%016" PRIx64 " (%" PRId64 " s)", es->client, es->lease,
		    es->ttl_s);
		memset(&res, 0, sizeof(res));
		res.op = BE_SESSION;
		ebe_done(e, o, &res);
	}
	ebe_end_turn(e);
}

static void
es_granted(void *arg, const struct etcd_result *r)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;

	es->call = NULL;
	if (r->status != ETCD_OK || r->lease_id == 0) {
		es_fail(es, r->message != NULL ? r->message : "no lease",
		    false);
		ebe_end_turn(e);
		return;
	}
	es->lease = (uint64_t)r->lease_id;
	es->ttl_s = r->ttl;
	es->until = es->ka_sent + (uint64_t)r->ttl * 1000;
	if (es->req == NULL || e->state != EBE_READY) {
		es_revoke_free(es);
	} else {
		es->open_until = kl_now_ms() + (uint64_t)e->timeout_ms;
		es_open_try(es);
	}
	ebe_end_turn(e);
}

static enum be_status
ebe_session_open(struct backend *be, struct lt_owner *lo,
    const struct be_chan *chans, size_t nchans, const char *hash,
    uint64_t grace_ms, const char *user, struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es;

	if ((es = es_precheck(e, o, hash, BE_SESSION, r)) == NULL)
		return BE_DONE;
	if (nchans > 0 && (es->chans = kl_calloc(nchans,
	    sizeof(*es->chans))) == NULL) {
		es_free(es);
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	for (size_t i = 0; i < nchans; i++) {
		es->chans[es->nchans].n = chans[i].n;
		es->chans[es->nchans++].client =
		    locktable_owner_id(chans[i].owner);
	}
	es->state = ES_OPENING;
	es->client = o->client;
	es->grace_ms = grace_ms;
	snprintf(es->user, sizeof(es->user), "%s", user != NULL ? user : "");
	es_name_set(es, e->hooks.name != NULL ? e->hooks.name(e->hooks.arg,
	    lo) : NULL);
	es->ttl_s = es_ttl_s(grace_ms);
	es->ka_sent = kl_now_ms();
	if ((es->call = etcd_lease_grant(e->etcd, es->ttl_s, 0, ETCD_RETRY,
	    es_granted, es)) == NULL) {
		es_free(es);
		be_backend(r, BE_SESSION, "etcd cannot be asked for a lease "
		    "now; nothing was changed");
		return BE_DONE;
	}
	return es_pend(es, o);
}

/* ---- RESUME through another front end ---- */

/*
 * The connection whose RESUME es is on its way has gone (closed, KILLed,
 * out of memory) after the takeover was sent: the session is left as a
 * dropped connection leaves it. Nobody here renews L from now on, so its
 * holds last until etcd lets L go, never earlier than the grace (the
 * client's rule), and a RESUME through any front end takes it again.
 */
static void
es_abandon(struct esession *es)
{
	log_info("backend etcd: client %" PRIu64 ": its RESUME's connection "
	    "closed during the takeover: the session is left to its grace",
	    es->client);
	es_free(es);
}

/* e->rchans holds every channel of es's session (-1: no memory). */
static int
es_chans_room(struct esession *es)
{
	struct ebe	*e = es->e;
	struct eowner	*o;
	struct be_chan	*p;
	size_t		 n = 0;

	for (o = eowner_chan_first(e->rp, es->lease); o != NULL;
	    o = eowner_chan_next(o))
		n++;
	if (n <= e->caprchans)
		return 0;
	if ((p = kl_realloc(e->rchans, n * sizeof(*p))) == NULL)
		return -1;
	e->rchans = p;
	e->caprchans = n;
	return 0;
}

static int
be_chan_cmp(const void *a, const void *b)
{
	const struct be_chan	*x = a, *y = b;
	uint64_t		 cx = locktable_owner_id(x->owner);
	uint64_t		 cy = locktable_owner_id(y->owner);

	if (x->n != y->n)
		return x->n < y->n ? -1 : 1;
	return cx < cy ? -1 : cx > cy;
}

/*
 * The owners of es's channels (keylockd-protocol(7), CHANNELS), which the
 * replica built from their entries as it built channel 0's, become ours
 * too; into e->rchans (room made by es_chans_room()), by channel number.
 * What holds and waits for nothing is left over, and released as a
 * closed channel is; so is every owner of a channel but its newest (a
 * higher client id: one named anew once the one before had let go).
 * Returns how many are handed over.
 */
static size_t
es_chans_adopt(struct esession *es)
{
	struct ebe	*e = es->e;
	struct eowner	*o, *next;
	size_t		 n = 0, m = 0;

	for (o = eowner_chan_first(e->rp, es->lease); o != NULL; o = next) {
		next = eowner_chan_next(o);
		if (o->state != OWN_THEIRS)
			continue;
		replica_adopt(e->rp, o);
		o->lease = es->lease;
		e->rchans[n].n = o->chan;
		e->rchans[n++].owner = o->lo;
	}
	if (n > 1)
		qsort(e->rchans, n, sizeof(*e->rchans), be_chan_cmp);
	for (size_t i = 0; i < n; i++) {
		struct lt_owner *lo = e->rchans[i].owner;

		if ((i + 1 < n && e->rchans[i + 1].n == e->rchans[i].n) ||
		    (locktable_owner_nholds(lo) == 0 &&
		    !locktable_owner_is_waiting(lo) &&
		    eowner_of(e->rp, lo)->open == NULL))
			ebe_owner_free(&e->be, lo, kl_now_ms());
		else
			e->rchans[m++] = e->rchans[i];
	}
	return m;
}

/* Our watch brought our takeover's put at rev: the session's owner,
 * built by the replica from its entries, becomes ours. */
static void
es_adopt(struct esession *es, int64_t rev)
{
	struct ebe		*e = es->e;
	struct eowner		*req = es->req, *o;
	struct be_result	 res;

	if (req == NULL || req->state != OWN_SESSION) {
		es_abandon(es);
		return;
	}
	if ((o = eowner_get(e->rp, es->lease, es->client, true)) == NULL ||
	    o->state != OWN_THEIRS || es_chans_room(es) != 0) {
		es_fail(es, o == NULL || o->state == OWN_THEIRS ? "out of "
		    "memory for the session's owners" : "the session's owner "
		    "is still ours", true);
		return;
	}
	replica_adopt(e->rp, o);
	o->lease = es->lease;
	o->sess = es;
	es->o = o;
	es->state = ES_OURS;
	es->rec_rev = rev;
	es->req = NULL;
	req->sess = NULL;
	if (es->ka_call == NULL && !evtimer_pending(es->ka, NULL))
		es_ka_start(es);
	log_info("backend etcd: client %" PRIu64 ": session taken over at "
	    "revision %" PRId64 ": %zu keys held, %s", es->client, rev,
	    locktable_owner_nholds(o->lo), o->open != NULL ? "waiting" :
	    "not waiting");
	memset(&res, 0, sizeof(res));
	res.op = BE_RESUME;
	res.owner = o->lo;
	res.value = es->client;
	res.grace_ms = es->grace_ms;
	res.chans = e->rchans;
	res.nchans = es_chans_adopt(es);
	res.name = es->name[0] != '\0' ? es->name : NULL;
	ebe_done(e, req, &res);
}

static int	es_read(struct esession *es);

static void
es_taken(void *arg, const struct etcd_result *r)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;

	es->call = NULL;
	if (es->state == ES_OURS) {
		/* the watch brought the put first */
		if (r->status == ETCD_OK && r->succeeded &&
		    r->revision > es->rec_rev)
			es->rec_rev = r->revision;
		if (es->dirty)
			es_record_write(es);
	}
	else if (r->status == ETCD_ERR_GRPC &&
	    r->grpc_code == ETCD_GRPC_NOT_FOUND)
		es_gone(es);	/* L expired under us */
	else if (es->req == NULL)
		es_abandon(es);	/* taken or not: its connection is gone */
	else if (r->status != ETCD_OK)
		es_fail(es, r->message != NULL ? r->message :
		    etcd_status_name(r->status), true);
	else if (!r->succeeded && ++es->tries < ES_TRIES) {
		if (es_read(es) != 0)
			es_fail(es, "out of memory for a range", false);
	} else if (!r->succeeded)
		es_fail(es, "the session kept moving to other front ends",
		    false);
	else	/* the watch brings the put at r->revision: es_adopt() */
		es->rec_rev = r->revision;
	ebe_end_turn(e);
}

static void
es_read_done(void *arg, const struct etcd_result *r)
{
	struct esession	*es = arg;
	struct ebe	*e = es->e;
	struct erecord	 rec;
	size_t		 ulen = strlen(es->user);

	es->call = NULL;
	if (es->req == NULL) {
		es_free(es);	/* its connection is gone: nothing taken */
		ebe_end_turn(e);
		return;
	}
	if (e->state != EBE_READY) {
		es_fail(es, "the front end is not serving", false);
		ebe_end_turn(e);
		return;
	}
	if (r->status != ETCD_OK) {
		es_fail(es, r->message != NULL ? r->message :
		    etcd_status_name(r->status), false);
		ebe_end_turn(e);
		return;
	}
	/* another user's session is as unknown as one that never was */
	if (r->nkvs != 1 || r->kvs[0].lease == 0 ||
	    ebe_record_decode(r->kvs[0].value, r->kvs[0].valuelen,
	    &rec) != NULL || rec.userlen != ulen ||
	    (ulen > 0 && memcmp(rec.user, es->user, ulen) != 0)) {
		es_gone(es);
		ebe_end_turn(e);
		return;
	}
	es->client = rec.client;
	es->grace_ms = rec.grace_ms;
	es->lease = (uint64_t)r->kvs[0].lease;
	/* the session's NAME, which a connection without one of its own
	 * takes (keylockd-protocol(7), SESSIONS: Identity); attached here */
	es->detached_at = 0;
	es->name[0] = '\0';
	if (rec.name != NULL && rec.namelen < sizeof(es->name)) {
		memcpy(es->name, rec.name, rec.namelen);
		es->name[rec.namelen] = '\0';
	}
	if (e->hooks.name != NULL && e->hooks.name(e->hooks.arg,
	    es->req->lo) != NULL)
		es_name_set(es, e->hooks.name(e->hooks.arg, es->req->lo));
	es->seen_rev = r->kvs[0].mod_revision;
	if (es->ttl_s == 0)
		es->ttl_s = es_ttl_s(es->grace_ms);
	/* L renewed first: whatever is left of it, it lasts a TTL more
	 * once we have it (a keepalive of a session we do not take is
	 * harmless) */
	if (es->ka_call == NULL && !evtimer_pending(es->ka, NULL))
		es_ka_start(es);
	if (es_record_put(es, ETCD_CMP_MOD, es->seen_rev, es_taken) != 0)
		es_fail(es, "out of memory for the takeover", false);
	ebe_end_turn(e);
}

static int
es_read(struct esession *es)
{
	char			key[512];
	struct etcd_range	rg;

	memset(&rg, 0, sizeof(rg));
	rg.key = key;
	rg.keylen = es_key(es, key, sizeof(key));
	es->call = etcd_range(es->e->etcd, &rg, ETCD_RETRY, es_read_done, es);
	return es->call != NULL ? 0 : -1;
}

static enum be_status
ebe_session_resume(struct backend *be, struct lt_owner *lo,
    const char *hash, const char *user, struct be_result *r)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es;

	if ((es = es_precheck(e, o, hash, BE_RESUME, r)) == NULL)
		return BE_DONE;
	es->state = ES_RESUMING;
	snprintf(es->user, sizeof(es->user), "%s", user != NULL ? user : "");
	if (es_read(es) != 0) {
		es_free(es);
		r->err = KL_ERR_NOMEM;
		return BE_DONE;
	}
	return es_pend(es, o);
}

/* ---- every session's record, for INFO (views) ---- */

/*
 * What this front end knows of each session of the cluster from its
 * record, to show another front end's session as its own front end
 * would (keylockd-protocol(7), SESSIONS: Seen by operators): whether it
 * is detached, and since when, and its NAME. Found by H (a record's
 * delete names only its key) and by L (an owner's entries name L).
 */
struct erview {
	struct erview	*hnext, *lnext;
	char		 hash[EBE_HASH_HEX + 1];
	uint64_t	 lease;
	uint64_t	 fe;		/* the front end its record names */
	uint64_t	 detached_at;	/* wall-clock ms; 0: attached */
	int64_t		 mod_rev;	/* of the record it shows */
	char		 name[KL_NAME_MAX + 1];	/* "": none */
};

static size_t
ev_lbucket(uint64_t lease)
{
	return (size_t)((lease * 0x9e3779b97f4a7c15ULL) >> 52) &
	    (ES_BUCKETS - 1);
}

static struct erview *
ev_find(const struct ebe *e, const char *hash)
{
	struct erview *v;

	if (e->views == NULL)
		return NULL;
	for (v = e->views[es_bucket(hash)]; v != NULL; v = v->hnext)
		if (memcmp(v->hash, hash, EBE_HASH_HEX) == 0)
			return v;
	return NULL;
}

static struct erview *
ev_of_lease(const struct ebe *e, uint64_t lease)
{
	struct erview *v;

	if (e->views_l == NULL || lease == 0)
		return NULL;
	for (v = e->views_l[ev_lbucket(lease)]; v != NULL; v = v->lnext)
		if (v->lease == lease)
			return v;
	return NULL;
}

static void
ev_unlink_lease(struct ebe *e, struct erview *v)
{
	struct erview **pp = &e->views_l[ev_lbucket(v->lease)];

	while (*pp != v)
		pp = &(*pp)->lnext;
	*pp = v->lnext;
}

static void
ev_remove(struct ebe *e, struct erview *v)
{
	struct erview **pp = &e->views[es_bucket(v->hash)];

	while (*pp != v)
		pp = &(*pp)->hnext;
	*pp = v->hnext;
	ev_unlink_lease(e, v);
	kl_free(v);
}

/* Record hash is rec (NULL: deleted). Out of memory, INFO just shows
 * less. */
static void
ev_update(struct ebe *e, const char *hash, const struct erecord *rec,
    int64_t rev)
{
	struct erview	*v = ev_find(e, hash);
	size_t		 b;

	if (rec == NULL) {
		if (v != NULL)
			ev_remove(e, v);
		return;
	}
	if (v == NULL) {
		if ((e->views == NULL && (e->views = kl_calloc(ES_BUCKETS,
		    sizeof(*e->views))) == NULL) || (e->views_l == NULL &&
		    (e->views_l = kl_calloc(ES_BUCKETS,
		    sizeof(*e->views_l))) == NULL) ||
		    (v = kl_calloc(1, sizeof(*v))) == NULL)
			return;
		memcpy(v->hash, hash, EBE_HASH_HEX);
		b = es_bucket(hash);
		v->hnext = e->views[b];
		e->views[b] = v;
	} else {
		ev_unlink_lease(e, v);
	}
	v->lease = rec->lease;
	b = ev_lbucket(v->lease);
	v->lnext = e->views_l[b];
	e->views_l[b] = v;
	v->fe = rec->fe;
	v->mod_rev = rev;
	v->detached_at = rec->detached_at;
	v->name[0] = '\0';
	if (rec->name != NULL && rec->namelen < sizeof(v->name)) {
		memcpy(v->name, rec->name, rec->namelen);
		v->name[rec->namelen] = '\0';
	}
}

/* The replica: front end fe's lease has ended. Its sessions are
 * detached from then on, as far as anyone can tell. */
static void
ebe_fe_gone(void *arg, uint64_t fe)
{
	struct ebe	*e = arg;
	uint64_t	 now = es_wall_ms();

	for (size_t b = 0; e->views != NULL && b < ES_BUCKETS; b++)
		for (struct erview *v = e->views[b]; v != NULL; v = v->hnext)
			if (v->fe == fe && v->detached_at == 0)
				v->detached_at = now;
}

static void
ev_loaded(void *arg, const struct etcd_result *r)
{
	struct ebe	*e = arg;
	size_t		 plen = strlen(e->prefix) + 2;
	char		 hash[EBE_HASH_HEX + 1];
	struct erecord	 rec;

	e->views_call = NULL;
	if (r->status != ETCD_OK) {
		log_info("backend etcd: the sessions' records were not read "
		    "(%s): INFO shows other front ends' sessions from their "
		    "next change", r->message != NULL ? r->message :
		    etcd_status_name(r->status));
		ebe_end_turn(e);
		return;
	}
	for (size_t i = 0; i < r->nkvs; i++) {
		const struct etcd_kv	*kv = &r->kvs[i];
		const struct erview	*v;

		if (kv->keylen != plen + EBE_HASH_HEX ||
		    ebe_record_decode(kv->value, kv->valuelen, &rec) != NULL)
			continue;
		memcpy(hash, kv->key + plen, EBE_HASH_HEX);
		hash[EBE_HASH_HEX] = '\0';
		/* the watch may have brought a newer one first */
		if ((v = ev_find(e, hash)) != NULL &&
		    v->mod_rev >= kv->mod_revision)
			continue;
		rec.lease = (uint64_t)kv->lease;
		ev_update(e, hash, &rec, kv->mod_revision);
	}
	ebe_end_turn(e);
}

/*
 * Every session's record, once the table is built (at start-up, or
 * again): the watch brings their changes from then on, but not what was
 * written before. A record deleted while this range is on its way may be
 * shown again, of a lease no owner has: it costs its memory, nothing in
 * INFO.
 */
static void
ev_load(struct ebe *e)
{
	char			key[512], end[512];
	size_t			klen = (size_t)snprintf(key, sizeof(key),
				    "%ss/", e->prefix);
	struct etcd_range	rg;

	if (e->views_call != NULL)
		etcd_cancel(e->views_call);
	memset(&rg, 0, sizeof(rg));
	rg.key = key;
	rg.keylen = klen;
	rg.end = end;
	rg.endlen = etcd_prefix_end(key, klen, end);
	e->views_call = etcd_range(e->etcd, &rg, ETCD_RETRY, ev_loaded, e);
}

static void
ev_free_all(struct ebe *e)
{
	if (e->views_call != NULL)
		etcd_cancel(e->views_call);
	e->views_call = NULL;
	for (size_t b = 0; e->views != NULL && b < ES_BUCKETS; b++)
		while (e->views[b] != NULL)
			ev_remove(e, e->views[b]);
	kl_free(e->views);
	kl_free(e->views_l);
	e->views = e->views_l = NULL;
}

/* The replica: record hash is put (rec) or deleted (NULL) at rev. */
static void
ebe_record(void *arg, const char *hash, const struct erecord *rec,
    int64_t rev)
{
	struct ebe	*e = arg;
	struct esession	*es = es_find(e, hash);
	struct eowner	*o, *next;
	struct lt_owner	*lo;
	uint64_t	 lease;

	ev_update(e, hash, rec, rev);
	if (es == NULL)
		return;
	if (es->state == ES_RESUMING) {
		if (es->seen_rev == 0 || rev <= es->seen_rev)
			return;
		if (rec == NULL)
			es_gone(es);
		else if (rec->fe == e->lease.fe && e->lease.fe != 0)
			es_adopt(es, rev);
		/* else another front end took it first: our compare fails
		 * and we read it again */
		return;
	}
	if (es->state != ES_OURS || rev <= es->rec_rev)
		return;
	if (rec == NULL && es->closed)
		return;		/* ebe_session_close()'s delete */
	if (rec == NULL) {
		es_lost(es, "the session's etcd lease ended");
	} else if (rec->fe != e->lease.fe) {
		/* resumed through another front end: forgotten here, with
		 * nothing released; it keeps L alive from now on */
		o = es->o;
		lo = o->lo;
		lease = es->lease;
		log_info("backend etcd: client %" PRIu64 ": session resumed "
		    "through front end %016" PRIx64, es->client, rec->fe);
		es_free(es);
		/* its channels go with it (the daemon lets go of them
		 * with channel 0's) */
		if (e->hooks.moved != NULL &&
		    locktable_owner_udata(lo) != NULL)
			e->hooks.moved(e->hooks.arg, lo);
		ebe_read_forget(e, o);	/* o may be freed */
		replica_disown(e->rp, o);
		for (o = eowner_chan_first(e->rp, lease); o != NULL;
		    o = next) {
			next = eowner_chan_next(o);
			if (o->state == OWN_IDLE || o->state == OWN_LOCK) {
				ebe_read_forget(e, o);
				replica_disown(e->rp, o);
			}
		}
	} else {
		es->rec_rev = rev;
	}
}

/* o's session ends here (QUIT, KILL, grace, lock lost), or o, whose
 * SESSION or RESUME is on its way, has gone: that one ends unanswered. */
static void
ebe_session_end(struct backend *be, struct lt_owner *lo)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es;

	if (o == NULL || (es = o->sess) == NULL)
		return;
	if (es->o == o) {
		es_revoke_free(es);
		return;
	}
	es->req = NULL;
	o->sess = NULL;
	if (o->state == OWN_SESSION)
		o->state = OWN_IDLE;
}

/* o's session's grace ran out and its keys stay for session-lock-delay:
 * its record goes now (RESUME is ERR GONE), L with session_end. */
static void
ebe_session_close(struct backend *be, struct lt_owner *lo)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es;
	char		 key[512];
	size_t		 klen;

	if (o == NULL || (es = o->sess) == NULL || es->o != o || es->closed)
		return;
	es->closed = true;
	klen = es_key(es, key, sizeof(key));
	etcd_deleterange(e->etcd, key, klen, NULL, 0, ETCD_RETRY, revoke_done,
	    NULL);
}

/* The front end lost its lease or rebuilds its table: every session of
 * ours ends (its locks could not be vouched for); a SESSION or RESUME
 * on its way ends with its connection (drop_clients()). */
static void
es_drop_all(struct ebe *e, const char *why)
{
	for (size_t b = 0; e->sessions != NULL && b < ES_BUCKETS; b++) {
		struct esession *es, *next;

		for (es = e->sessions[b]; es != NULL; es = next) {
			struct eowner *o = es->o;

			next = es->next;
			if (es->state != ES_OURS) {
				if (es->req != NULL &&
				    es->req->state == OWN_SESSION)
					es->req->state = OWN_IDLE;
				if (es->state == ES_OPENING)
					es_revoke_free(es);
				else
					es_free(es);
				continue;
			}
			es_revoke_free(es);
			if (locktable_owner_udata(o->lo) != NULL)
				e->hooks.drop(e->hooks.arg, o->lo, why);
		}
	}
}

/* The replica's tests, without etcd: lo's session hash under lease,
 * recorded at rev, is ours (as after SESSION)... */
void
ebe_assume_session(struct ebe *e, struct lt_owner *lo, const char *hash,
    uint64_t lease, uint64_t grace_ms, int64_t rev)
{
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es = es_new(e, hash);

	es->state = ES_OURS;
	es->lease = lease;
	es->client = o->client;
	es->grace_ms = grace_ms;
	es->rec_rev = rev;
	es->o = o;
	o->sess = es;
	eowner_set_lease(e->rp, o, lease);
}

/* ... or lo's RESUME of it has read the record at rev and put it again
 * naming us (the watch is to bring that put). */
void
ebe_assume_resume(struct ebe *e, struct lt_owner *lo, const char *hash,
    uint64_t lease, uint64_t client, uint64_t grace_ms, int64_t rev)
{
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es = es_new(e, hash);

	es->state = ES_RESUMING;
	es->lease = lease;
	es->client = client;
	es->grace_ms = grace_ms;
	es->seen_rev = rev;
	es->req = o;
	o->sess = es;
	o->state = OWN_SESSION;
}

/* The stop: every session of ours ends (as in backend local). */
static void
es_free_all(struct ebe *e)
{
	for (size_t b = 0; e->sessions != NULL && b < ES_BUCKETS; b++)
		while (e->sessions[b] != NULL) {
			struct esession *es = e->sessions[b];

			if (es->state == ES_RESUMING)
				es_free(es);
			else
				es_revoke_free(es);
		}
	kl_free(e->sessions);
	e->sessions = NULL;
	if (e->etcd != NULL)
		revokes_run(e, UINT64_MAX);
	kl_free(e->revokes);
	e->revokes = NULL;
	e->nrevokes = e->caprevokes = 0;
	kl_free(e->rchans);
	e->rchans = NULL;
	e->caprchans = 0;
}

static void
ebe_owner_about(const struct backend *be, const struct lt_owner *lo,
    const char **name, uint64_t *frontend, uint64_t *client, uint32_t *chan)
{
	struct ebe	*e = (struct ebe *)(uintptr_t)be;
	struct eowner	*o = eowner_of(e->rp, lo);

	*name = NULL;
	*frontend = 0;
	*chan = 0;
	if (o == NULL)
		return;
	if (o->state == OWN_THEIRS) {
		const struct erview *v = ev_of_lease(e, o->fe);

		/* a session's NAME as its record has it: a NAME sent after
		 * its last LOCK too */
		*name = v != NULL && v->name[0] != '\0' ? v->name :
		    eowner_name(o);
	}
	*frontend = o->fe != 0 ? o->fe : e->lease.fe;
	if (o->chan != 0) {
		*client = o->sclient;
		*chan = o->chan;
	}
}

/* Another front end's session's owner: detached for how long, as its
 * record says (or since its front end's lease ended); -1: attached. */
static int64_t
ebe_owner_detached_ms(const struct backend *be, const struct lt_owner *lo)
{
	struct ebe		*e = (struct ebe *)(uintptr_t)be;
	struct eowner		*o = eowner_of(e->rp, lo);
	const struct erview	*v;
	uint64_t		 now;

	if (o == NULL || o->state != OWN_THEIRS ||
	    (v = ev_of_lease(e, o->fe)) == NULL || v->detached_at == 0)
		return -1;
	now = es_wall_ms();
	return now > v->detached_at ? (int64_t)(now - v->detached_at) : 0;
}

/* Our session's NAME, and whether it is detached here: into its
 * record, for other front ends. */
static void
ebe_session_note(struct backend *be, struct lt_owner *lo, const char *name,
    bool detached)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct esession	*es = o != NULL ? o->sess : NULL;
	uint64_t	 at = detached ? es_wall_ms() : 0;

	if (es == NULL || es->o != o || es->state != ES_OURS)
		return;
	if ((at == 0) == (es->detached_at == 0) &&
	    strcmp(es->name, name != NULL ? name : "") == 0)
		return;		/* nothing new */
	es->detached_at = at;
	es_name_set(es, name);
	es_record_write(es);
}

/*
 * A LOCK on channel n of a session's connection (keylockd-protocol(7),
 * CHANNELS: a session covers every channel): the channel's owner ch is
 * named (L, X) from its first LOCK on, X a client id of its own (a SEQ
 * with EBE_CHAN_CLIENT: unique under L as SEQ is, across the front ends
 * that write for L in turn), and its entries carry L and say "@n" and the
 * session's client, so that the front end that takes the session over
 * finds the channel and gives it back by number.
 */
static enum kl_err
ebe_session_channel(struct backend *be, struct lt_owner *lo,
    struct lt_owner *chlo, uint32_t n, const char **text)
{
	struct ebe	*e = ebe_of(be);
	struct eowner	*o = eowner_of(e->rp, lo);
	struct eowner	*ch = eowner_of(e->rp, chlo);
	struct esession	*es = o != NULL ? o->sess : NULL;

	if (ch == NULL || ch->lease != 0)
		return KL_OK;	/* the session's already */
	if (es == NULL || es->o != o || es->state != ES_OURS) {
		*text = "the session's SESSION or RESUME is on its way: no "
		    "LOCK on a channel until it is answered";
		return KL_ERR_SESSION;
	}
	if (ch->state != OWN_IDLE || !TAILQ_EMPTY(&ch->reqs)) {
		*text = "this channel's locks were taken before the session";
		return KL_ERR_SESSION;
	}
	eowner_set_channel(e->rp, ch, es->lease, EBE_CHAN_CLIENT |
	    ebe_next_seq(e), n, es->client);
	return KL_OK;
}

/* Nothing open, and every hold told to the client let go of (its
 * entries' deletes asked: an answered UNLOCK, a ttl run out). */
static bool
ebe_owner_idle(const struct backend *be, const struct lt_owner *lo)
{
	struct ebe	*e = (struct ebe *)(uintptr_t)be;
	struct eowner	*o = eowner_of(e->rp, lo);
	struct ereq	*r;

	if (o == NULL)
		return true;
	if (o->state != OWN_IDLE)
		return false;
	TAILQ_FOREACH(r, &o->reqs, entry) {
		if (r->side == SIDE_ENDED)
			continue;
		if (r->side != SIDE_ANSWERED)
			return false;
		for (size_t i = 0; i < r->nent; i++)
			if (r->ent[i].w < W_DEL_WAIT &&
			    r->ent[i].rep != ENT_GONE)
				return false;
	}
	return true;
}

static const struct backend_ops ebe_ops = {
	.name = "etcd",
	.quit_releases = true,
	.unique_ids = true,
	.owner_new = ebe_owner_new,
	.owner_free = ebe_owner_free,
	.owner_idle = ebe_owner_idle,
	.acquire = ebe_acquire,
	.release = ebe_release,
	.release_owner = ebe_release_owner,
	.refresh = ebe_refresh,
	.withdraw = ebe_withdraw,
	.session_open = ebe_session_open,
	.session_resume = ebe_session_resume,
	.session_end = ebe_session_end,
	.session_channel = ebe_session_channel,
	.session_close = ebe_session_close,
	.owner_about = ebe_owner_about,
	.owner_detached_ms = ebe_owner_detached_ms,
	.session_note = ebe_session_note,
	.table = ebe_table,
	.read_barrier = ebe_read_barrier,
	.freeze = ebe_freeze,
	.end_turn = ebe_op_end_turn,
	.free = ebe_free,
};

/*
 * The etcd client of cfg: endpoints, https files, etcd's user and the
 * password from its file (checked as a user's secret-file is, and wiped
 * once the client has its copy). NULL with err.
 */
static struct etcd *
ebe_etcd_new(const struct config *cfg, struct event_base *base,
    const char *endpoints, struct etcd_opts *eo, char *err, size_t errlen)
{
	char		 pw[KL_SECRET_MAX + 1];
	size_t		 pwlen = 0;
	const char	*why = NULL;
	struct etcd	*etcd;

	eo->ca_file = cfg->etcd_ca;
	eo->cert_file = cfg->etcd_cert;
	eo->key_file = cfg->etcd_key;
	if (cfg->etcd_user != NULL) {
		if (!secret_file_read("etcd-password-file",
		    cfg->etcd_password_file, pw, &pwlen, err, errlen))
			return NULL;
		eo->user = cfg->etcd_user;
		eo->password = pw;
		eo->passwordlen = pwlen;
	}
	etcd = etcd_new(base, endpoints, eo, &why);
	explicit_bzero(pw, sizeof(pw));
	eo->password = NULL;
	if (etcd == NULL)
		snprintf(err, errlen, "etcd-endpoints %s: %s", endpoints,
		    why != NULL ? why : "out of memory");
	return etcd;
}

/* ---- what the replica and the committer report ---- */

static void
ebe_queued(void *arg, struct ereq *r)
{
	struct ebe *e = arg;

	if (e->hooks.queued != NULL)
		e->hooks.queued(e->hooks.arg, r->owner->lo);
}

static void
ebe_del(void *arg, struct ereq *r, struct eentry *x)
{
	struct ebe *e = arg;

	if (x == NULL)
		commit_delete_req(e->cm, r);
	else
		commit_delete(e->cm, &x, 1);
}

static bool
ebe_put_failed(void *arg, struct ereq *q, const char *why)
{
	struct ebe		*e = arg;
	struct be_result	 r;

	if (q->state == REQ_HELD && q->side == SIDE_ANSWERED)
		/* the watch brought its put and the client has its token:
		 * the put was made, whatever this reply says, and deleting
		 * it now would end a hold the client still has (the next
		 * waiter granted while it holds). A copy of it tried again
		 * elsewhere that lands after our delete is a leftover,
		 * deleted when it is seen. */
		return true;
	if (ereq_awaited(q)) {
		log_info("backend etcd: a LOCK's put failed: %s", why);
		snprintf(e->why, sizeof(e->why), "etcd did not take the LOCK "
		    "in time");
		be_backend(&r, BE_LOCK, e->why);
		ebe_answer(e, q, &r);
	}
	q->side = SIDE_ENDED;
	return false;
}

static bool
ebe_lease_safe_cb(void *arg)
{
	return ebe_lease_safe(arg);
}

static void
ebe_lose_cb(void *arg, const char *why)
{
	ebe_lose(arg, why);
}

static void
ebe_fail_cb(void *arg, const char *why)
{
	ebe_fail(arg, "%s", why);
}

/* The end of a reap's transaction: made (STATS etcd_reaped: one hold or
 * one wait, see ebe_reap()), or found the entry gone or put again (a
 * REFRESH's, its front end alive after all; or our own earlier try's),
 * or failed (the replica asks again while the entry lives). */
static void
ebe_reaped(void *arg, const struct etcd_result *r)
{
	struct ebe	*e = arg;

	if (r->status == ETCD_OK && r->succeeded)
		e->count->reaped++;
	else if (r->status != ETCD_OK)
		log_debug("backend etcd: a reap's delete failed: %s",
		    r->message != NULL ? r->message :
		    etcd_status_name(r->status));
	ebe_end_turn(arg);
}

/*
 * The replica: another front end's r outlived its ttl (x) or its wait's
 * deadline (x NULL) by the reap margin, so that front end is dead or cut
 * off (reap_due() in the replica says when). Whose REFRESH every replica
 * sees (ebe_refresh_put()), a session's or a plain connection's, it is
 * deleted here as its front end would have deleted it: the hold ends, the wait is withdrawn, on
 * every replica, at the delete's revision, as an UNLOCK's delete does.
 * Each entry only if it is still the put this replica applied (its mod
 * revision): a REFRESH that etcd took meanwhile, a delete by its own
 * front end or another reaper's make this one do nothing. Apart from the
 * group commit (a failed compare fails the whole transaction): deletes
 * alone, which no put of ours waits for. One transaction deletes one hold
 * (x, one key) or one wait (its every key).
 */
static bool
ebe_reap(void *arg, struct ereq *r, struct eentry *x)
{
	struct ebe	*e = arg;
	struct etcd_txn	*t;
	uint64_t	 now = kl_now_ms(), late;
	size_t		 n = 0;
	char		 key[96];

	if (e->state != EBE_READY || (t = etcd_txn_new()) == NULL)
		return true;		/* asked again */
	for (size_t i = 0; i < r->nent; i++) {
		struct eentry *y = &r->ent[i];

		if ((x != NULL && y != x) || (y->rep != ENT_LIVE &&
		    y->rep != ENT_HELD) || y->mrev <= 0)
			continue;
		if (etcd_txn_compare(t, y->ekey, y->ekeylen, ETCD_CMP_MOD,
		    ETCD_CMP_EQUAL, y->mrev) != 0 || etcd_txn_delete(t, true,
		    y->ekey, y->ekeylen, NULL, 0) != 0) {
			etcd_txn_free(t);
			return true;
		}
		n++;
	}
	if (n == 0 || etcd_txn_nops(t) > e->max_ops * 2) {
		etcd_txn_free(t);
		return n > 0;
	}
	if (etcd_txn(e->etcd, t, ETCD_RETRY, ebe_reaped, e) == NULL)
		return true;
	if (e->reap_log_ms != 0 && now < e->reap_log_ms + 1000) {
		e->reap_unlogged++;
		return true;
	}
	x = x != NULL ? x : &r->ent[0];
	late = x->due_ms != 0 && now > x->due_ms ? now - x->due_ms :
	    now - r->put_ms - r->a.timeout_ms;
	ebe_log_safe(x->lkey, x->lkeylen, key, sizeof(key));
	log_info("backend etcd: client %" PRIu64 " of %s %016" PRIx64 ": its %s %s outlived its %s by %" PRIu64 " ms, and its "
	    "front end has not ended it: deleting it (%" PRIu64 " more since "
	    "the last such line)", r->owner->client, ev_of_lease(e,
	    r->owner->fe) != NULL ? "session lease" : "front end",
	    r->owner->fe,
	    r->state == REQ_HELD ? "hold on" : "wait for", key,
	    r->state == REQ_HELD ? "ttl" : "deadline", late,
	    e->reap_unlogged);
	e->reap_log_ms = now;
	e->reap_unlogged = 0;
	return true;
}

/* The replica: our o's hold was deleted by someone else while its
 * client may still believe it has it: its locks are lost. */
static void
ebe_lost_cb(void *arg, struct eowner *o)
{
	struct ebe	*e = arg;
	const char	*why = "lock lost: etcd deleted a hold of it before "
			    "its ttl ran out here";

	log_warnx("backend etcd: client %" PRIu64 ": %s", o->client, why);
	if (o->sess != NULL)
		es_lost(o->sess, why);
	else if (locktable_owner_udata(o->lo) != NULL)
		e->hooks.drop(e->hooks.arg, o->lo, why);
}

static const struct replica_hooks ebe_replica_hooks = {
	.answer = ebe_answer,
	.queued = ebe_queued,
	.del = ebe_del,
	.deleted = ebe_deleted,
	.built = ebe_built,
	.heartbeat = ebe_heartbeat_seen,
	.record = ebe_record,
	.fe_gone = ebe_fe_gone,
	.reap = ebe_reap,
	.lost = ebe_lost_cb,
	.lease_safe = ebe_lease_safe_cb,
	.lose = ebe_lose_cb,
	.fail = ebe_fail_cb,
	.end_turn = ebe_end_turn,
};

static const struct commit_hooks ebe_commit_hooks = {
	.put_failed = ebe_put_failed,
	.heartbeat = ebe_heartbeat_acked,
	.lose = ebe_lose_cb,
	.end_turn = ebe_end_turn,
};

/*
 * The backend before its start-up: settings, the etcd client (nothing
 * sent yet), an empty replica and committer, state EBE_STARTING.
 * backend_etcd_new() starts it; the replica's tests
 * (tests/unit/check_replica.c) feed it events without etcd.
 */
struct ebe *
ebe_create(const struct config *cfg, struct event_base *base,
    const struct be_hooks *hooks, char *err, size_t errlen)
{
	struct ebe		*e;
	struct etcd_opts	 eo;
	struct replica_hooks	 rh = ebe_replica_hooks;
	struct commit_hooks	 ch = ebe_commit_hooks;

	if ((e = kl_calloc(1, sizeof(*e))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e->be.ops = &ebe_ops;
	e->hooks = *hooks;
	e->rd_epoch = 1;
	TAILQ_INIT(&e->rd_closed);
	TAILQ_INIT(&e->rd_waiting);
	e->count = hooks->counters != NULL ? hooks->counters : &e->own;
	e->base = base;
	e->state = EBE_STARTING;
	e->lease.ttl_s = cfg->etcd_lease_ttl;
	e->timeout_ms = (int)cfg->etcd_timeout;
	e->max_ops = (size_t)cfg->etcd_max_txn_ops;
	e->lease.margin_ms = (uint64_t)e->lease.ttl_s * 1000 / 4;
	if (e->lease.margin_ms < EBE_MARGIN_MIN_MS)
		e->lease.margin_ms = EBE_MARGIN_MIN_MS;
	e->start_pause_ms = EBE_RETRY_MS;
	memset(&eo, 0, sizeof(eo));
	eo.conns = (int)cfg->etcd_connections;
	eo.timeout_ms = e->timeout_ms;
	if ((e->etcd = ebe_etcd_new(cfg, base, cfg->etcd_endpoints, &eo, err,
	    errlen)) == NULL)
		goto fail;
	rh.arg = ch.arg = e;
	if ((e->prefix = kl_strndup(cfg->etcd_prefix,
	    strlen(cfg->etcd_prefix))) == NULL ||
	    (e->rp = replica_new(base, e->etcd, e->prefix, e->count,
	    &rh)) == NULL ||
	    /* one connection of the pool stays free for keepalives */
	    (e->cm = commit_new(base, e->etcd, e->prefix, e->max_ops,
	    cfg->etcd_connections > 1 ? (int)cfg->etcd_connections - 1 : 1,
	    e->count, &ch)) == NULL ||
	    (e->lease.keepalive = evtimer_new(base, keepalive_cb, e)) == NULL ||
	    (e->lease.guard = evtimer_new(base, guard_cb, e)) == NULL ||
	    (e->start = evtimer_new(base, start_cb, e)) == NULL ||
	    (e->rd_timer = evtimer_new(base, ebe_read_timer_cb, e)) == NULL ||
	    (e->revoke_timer = evtimer_new(base, revoke_timer_cb, e)) ==
	    NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* past what a live front end needs to end its own (its commit,
	 * etcd-timeout at most, and the watch's lag) */
	replica_set_reap(e->rp, (uint64_t)e->timeout_ms + EBE_REAP_LAG_MS);
	return e;
fail:
	ebe_free(&e->be);
	return NULL;
}

void
ebe_assume(struct ebe *e, uint64_t fe)
{
	e->state = EBE_READY;
	e->lease.fe = fe;
	e->lease.until = kl_now_ms() + 3600 * 1000;
	replica_set_fe(e->rp, fe);
	commit_start(e->cm, fe);
}

bool
ebe_lost(const struct ebe *e)
{
	return e->state == EBE_LOST;
}

struct replica *
ebe_replica(struct ebe *e)
{
	return e->rp;
}

struct backend *
ebe_seam(struct ebe *e)
{
	return &e->be;
}

struct backend *
backend_etcd_new(const struct config *cfg, struct event_base *base,
    const struct be_hooks *hooks, char *err, size_t errlen)
{
	struct ebe	*e;
	uint64_t	 deadline;

	if ((e = ebe_create(cfg, base, hooks, err, errlen)) == NULL)
		return NULL;
	log_info("backend etcd: endpoints %s, prefix %s, lease %" PRId64
	    " s, timeout %d ms", cfg->etcd_endpoints, e->prefix, e->lease.ttl_s,
	    e->timeout_ms);
	/* start-up runs on the loop; the daemon is ready once the table is
	 * built (READY=1 follows backend_new()) */
	e->hooks.end_turn = NULL;	/* the caller's side is not built yet */
	ebe_step(e);
	deadline = kl_now_ms() + (uint64_t)cfg->etcd_timeout * 10;
	while (e->state != EBE_READY && kl_now_ms() < deadline) {
		ebe_run_until(e, 50);
		commit_flush(e->cm);
	}
	e->hooks.end_turn = hooks->end_turn;
	if (e->state != EBE_READY) {
		snprintf(err, errlen, "backend etcd: not ready within %" PRId64
		    " ms: %s", cfg->etcd_timeout * 10, e->failed[0] != '\0' ?
		    e->failed : "no answer from etcd");
		ebe_free(&e->be);
		return NULL;
	}
	e->why[0] = '\0';
	return &e->be;
}

/* ---- --check-config ---- */

struct echeck {
	int		 left;
	bool		 ok[ETCD_ENDPOINTS_MAX];
	char		 what[ETCD_ENDPOINTS_MAX][160];
	uint64_t	 cluster[ETCD_ENDPOINTS_MAX];
};

struct echeck_one {
	struct echeck	*c;
	int		 i;
};

static void
check_cb(void *arg, const struct etcd_result *r)
{
	struct echeck_one	*one = arg;
	struct echeck		*c = one->c;
	const json_t		*hdr = json_object_get(r->json, "header");
	const json_t		*cid = json_object_get(hdr, "cluster_id");
	uint64_t		 leader = 0, me = 0;

	c->left--;
	if (r->status != ETCD_OK) {
		snprintf(c->what[one->i], sizeof(c->what[0]), "%s: %s",
		    etcd_status_name(r->status), r->message != NULL ?
		    r->message : "");
		return;
	}
	if (json_is_string(cid))
		c->cluster[one->i] = strtoull(json_string_value(cid), NULL,
		    10);
	/* ids are uint64 in etcd's protobuf, decimal strings in its JSON:
	 * half of them are past INT64_MAX */
	if (json_is_string(json_object_get(r->json, "leader")))
		leader = strtoull(json_string_value(json_object_get(r->json,
		    "leader")), NULL, 10);
	if (json_is_string(json_object_get(hdr, "member_id")))
		me = strtoull(json_string_value(json_object_get(hdr,
		    "member_id")), NULL, 10);
	c->ok[one->i] = true;
	snprintf(c->what[one->i], sizeof(c->what[0]), "revision %" PRId64
	    "%s", r->revision, leader == 0 ? ", no leader" : leader == me ?
	    ", the leader" : "");
}

int
backend_etcd_check(const struct config *cfg, char *err, size_t errlen)
{
	struct event_base	*base;
	struct etcd		*all, *one[ETCD_ENDPOINTS_MAX];
	struct echeck_one	 arg[ETCD_ENDPOINTS_MAX];
	struct echeck		 c;
	struct etcd_opts	 eo = { .conns = 1,
	    .timeout_ms = (int)cfg->etcd_timeout };
	int			 n, reached = 0, rc = 0;
	uint64_t		 first = 0;

	if (strcmp(cfg->backend, "etcd") != 0)
		return 0;
	memset(&c, 0, sizeof(c));
	if ((base = event_base_new()) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if ((all = ebe_etcd_new(cfg, base, cfg->etcd_endpoints, &eo, err,
	    errlen)) == NULL) {
		event_base_free(base);
		return -1;
	}
	n = (int)etcd_nendpoints(all);
	for (int i = 0; i < n; i++) {
		char	ignored[64];

		one[i] = ebe_etcd_new(cfg, base, etcd_endpoint(all, (size_t)i),
		    &eo, ignored, sizeof(ignored));
		arg[i].c = &c;
		arg[i].i = i;
		if (one[i] != NULL && etcd_post(one[i],
		    "/v3/maintenance/status", json_object(), 0, check_cb,
		    &arg[i]) != NULL)
			c.left++;
		else
			snprintf(c.what[i], sizeof(c.what[0]), "out of memory");
	}
	while (c.left > 0)
		event_base_loop(base, EVLOOP_ONCE);
	for (int i = 0; i < n; i++) {
		if (c.ok[i] && reached++ == 0)
			first = c.cluster[i];
		else if (c.ok[i] && c.cluster[i] != first) {
			snprintf(err, errlen, "etcd-endpoints: %s belongs to "
			    "another etcd cluster than the others",
			    etcd_endpoint(all, (size_t)i));
			rc = -1;
		}
		if (c.ok[i])
			log_info("backend etcd: %s reached: %s",
			    etcd_endpoint(all, (size_t)i), c.what[i]);
		else
			log_warnx("backend etcd: %s not reached: %s",
			    etcd_endpoint(all, (size_t)i), c.what[i]);
		etcd_free(one[i]);
	}
	if (rc == 0 && reached == 0) {
		snprintf(err, errlen, "etcd-endpoints: none of %s answered "
		    "within %" PRId64 " ms", cfg->etcd_endpoints,
		    cfg->etcd_timeout);
		rc = -1;
	}
	etcd_free(all);
	event_base_free(base);
	return rc;
}
