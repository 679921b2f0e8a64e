/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd's group commit (backend_etcd_int.h): what every client asked
 * for since the last transaction goes into the next one, up to etcd's
 * --max-txn-ops; that, not one commit per request, is what makes
 * throughput grow with the number of clients. While a transaction is on
 * the wire, the next one waits for its reply unless it is full (then up
 * to etcd-connections less one go at once) or has waited EBE_HOLD_MS
 * (commit_hold()): a commit of 25 operations takes etcd well under twice
 * as long as one of 1, so sending the first request that comes in after
 * a batch went would only split the batches and slow every commit (at 50
 * clients, 10 operations a transaction instead of 24, and fewer cycles
 * per second). After the reply of a transaction of EBE_LINGER_MIN or more
 * operations, with none on the wire, the queue also waits up to
 * EBE_LINGER_US for the clients it carried (the grants of its LOCKs'
 * puts, which the watch brings at about the same time; an UNLOCK is
 * answered at once, and its client's next LOCK follows it) to send their
 * next requests, until three
 * quarters of its operations have come back: otherwise the clients split
 * into two halves that take turns, each in a transaction of half the
 * size, and every commit carries half what it could (at 50 clients on a
 * machine where etcd is short of CPU, 23 operations a transaction
 * instead of 32, and fewer cycles per second).
 * Inside a transaction the deletes come first, then the puts, so every
 * replica applies a release before a LOCK written with it. A delete waits
 * for its entry's put to be acknowledged (a put and a delete of one key in
 * one transaction are refused, a delete before the put would leave the
 * entry behind, and a put tried again after the delete would make it
 * anew). A client's UNLOCK is answered once its deletes are queued here,
 * so a LOCK's puts wait for every delete of its owner's entries asked
 * before them (eowner.dels_out): they go in the same transaction, after
 * them, or in one sent after those are acked; otherwise a relock of the
 * key just unlocked could reach the replicas before its delete and be
 * refused. With nothing on the wire, an UNLOCK's deletes wait up to
 * EBE_UNLOCK_LINGER_US for one more operation (commit_linger()), so that
 * a lone client's next LOCK goes with them: one commit a cycle, not two
 * (at 1 client, 1.05 etcd writes a cycle instead of 1.93). Deletes that fail are tried again until they succeed or the
 * lease goes; a LOCK whose put fails is answered ERR BACKEND and its
 * entries deleted, in case the put was made after all.
 *
 * A put must never be made after its delete: the entry would be a lock
 * nobody holds, until the lease expires (issue 23). The etcd client may
 * give up a try on a member that is stopped or cut off and send the
 * transaction to another one; the member may still carry the first try
 * out when it is back, late. So every transaction with puts compares
 * our fence, the heartbeat key P fe/FE, with the newest revision we knew
 * when we sent it (known_rev): it goes only if the fence was not
 * written since. A put that was sent to more than one member, or failed
 * (ereq.late), has its entries' deletes rewrite the fence in their own
 * transaction; a late try of it then finds the fence moved, and fails.
 * Heartbeats move it too: a transaction sent while one is on the wire
 * may fail the compare, and is then sent again at once (nothing of it
 * was made), knowing the revision of that reply.
 *
 * It writes an entry's w (enum eentry_w), a request's refs and late and
 * an owner's dels_out; it learns nothing else of the replica, which it
 * never calls but to free a request it lets go (ereq_maybe_free); what
 * the backend must hear goes up through struct commit_hooks.
 */
#include <sys/time.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "clock.h"
#include "backend_etcd_int.h"
#include "log.h"
#include "util.h"

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
	bool			 fence;		/* ITEM_DEL: of a late put's
						 * entries: the fence moves */
	int			 tries;
	uint64_t		 queued_ms;
};
TAILQ_HEAD(eitemq, eitem);

struct committer {
	struct commit_hooks	 hooks;
	struct event_base	*base;
	struct etcd		*etcd;
	const char		*prefix;	/* the backend's */
	size_t			 max_ops;
	int			 max_inflight;	/* transactions on the wire */
	struct be_counters	*count;		/* txns, txn_failures */
	uint64_t		 fe;		/* the lease writes carry; 0:
						 * none, nothing is sent */
	uint64_t		 gen;		/* commit_drop()s so far: the
						 * reply of a transaction sent
						 * before the last is unheard */
	uint64_t		 hb_count;
	int64_t			 known_rev;	/* the newest a reply gave */
	struct eitemq		 queue;
	size_t			 queue_ops;	/* etcd operations queued */
	int			 inflight;
	bool			 puts_inflight;	/* one of them has puts */
	struct event		*hold;		/* the held batch goes */
	uint64_t		 linger_until;	/* us; 0: no wait */
	size_t			 linger_ops;	/* queue_ops ending it early */
	struct event		*retry;		/* failed deletes, again */
	struct eitemq		 later;		/* waiting for retry */
};

struct etxn {
	struct committer	*cm;
	bool		 compare;	/* with puts: the fence compared */
	uint64_t	 gen;		/* cm->gen when sent */
	uint64_t	 sent_ms;
	size_t		 ops;
	size_t		 n;
	struct eitem	*items[];
};

static void	commit_txn_cb(void *, const struct etcd_result *);

static struct eitem *
item_new(struct committer *cm, enum eitem_kind kind)
{
	struct eitem *it = kl_calloc(1, sizeof(*it));

	if (it == NULL)
		return NULL;
	it->kind = kind;
	return it;
}

static void
item_free(struct eitem *it)
{
	if (it == NULL)
		return;
	kl_free(it->del);
	kl_free(it);
}

static size_t
item_ops(const struct eitem *it)
{
	switch (it->kind) {
	case ITEM_PUT:
		return it->req->nent;
	case ITEM_DEL:
		return it->ndel;
	default:
		return 1;
	}
}

static void
item_queue(struct committer *cm, struct eitem *it)
{
	it->queued_ms = kl_now_ms();
	TAILQ_INSERT_TAIL(&cm->queue, it, entry);
	cm->queue_ops += item_ops(it);
}

static void
item_unqueue(struct committer *cm, struct eitem *it)
{
	TAILQ_REMOVE(&cm->queue, it, entry);
	cm->queue_ops -= item_ops(it);
}

/* Drops the item's hold on its requests (they may be freed). */
/*
 * ctx put an entry under another lease than ours (a session's L): a
 * "lease not found" may be that lease's, revoked by the front end the
 * session moved to, not ours; the transaction then fails as any other
 * does (its LOCKs ERR BACKEND, its deletes tried again), and our own
 * lease's keepalive and guard still notice if ours is the one gone.
 */
static bool
commit_has_other_lease(const struct committer *cm, const struct etxn *ctx)
{
	for (size_t i = 0; i < ctx->n; i++)
		if (ctx->items[i]->kind == ITEM_PUT &&
		    ctx->items[i]->req->fe != cm->fe)
			return true;
	return false;
}

static void
item_release(struct eitem *it)
{
	if (it->kind == ITEM_PUT) {
		it->req->refs--;
		ereq_maybe_free(it->req);
	} else if (it->kind == ITEM_DEL) {
		for (size_t i = 0; i < it->ndel; i++) {
			it->del[i]->req->refs--;
			ereq_maybe_free(it->del[i]->req);
		}
	}
	item_free(it);
}

int
commit_put(struct committer *cm, struct ereq *r)
{
	struct eitem *it = item_new(cm, ITEM_PUT);

	if (it == NULL)
		return -1;
	it->req = r;
	r->refs++;
	item_queue(cm, it);
	return 0;
}

/* its deletes are out (sent, or failed and to be tried again): d 1; or
 * not any more (acked, or queued again): d -1 */
static void
item_dels_out(struct eitem *it, int d)
{
	for (size_t i = 0; i < it->ndel; i++)
		it->del[i]->req->owner->dels_out += (size_t)d;
}

size_t
commit_delete(struct committer *cm, struct eentry **ents, size_t n)
{
	struct eitem	*it = NULL;
	size_t		 count = 0;

	for (size_t i = 0; i < n; i++) {
		struct eentry *x = ents[i];

		if (x->w >= W_DEL_WAIT)
			continue;
		count++;
		if (x->w == W_PUTTING) {
			/* even if seen: a put still on the wire may be tried
			 * again, and would make the entry anew after this
			 * delete; commit_unwait() sends it */
			x->w = W_DEL_WAIT;
			x->req->owner->dels_out++;
			continue;
		}
		x->w = W_DELETING;
		if (it == NULL && ((it = item_new(cm, ITEM_DEL)) == NULL ||
		    (it->del = kl_calloc(n, sizeof(*it->del))) == NULL)) {
			item_free(it);
			cm->hooks.lose(cm->hooks.arg,
			    "out of memory for deletes");
			return 0;
		}
		it->del[it->ndel++] = x;
		it->fence |= x->req->late;
		x->req->refs++;
	}
	if (it != NULL)
		item_queue(cm, it);
	return count;
}

void
commit_delete_req(struct committer *cm, struct ereq *r)
{
	struct eentry	*stack[16], **ents = stack;

	if (r->nent > 16 && (ents = kl_calloc(r->nent, sizeof(*ents))) ==
	    NULL) {
		cm->hooks.lose(cm->hooks.arg, "out of memory for deletes");
		return;
	}
	for (size_t i = 0; i < r->nent; i++)
		ents[i] = &r->ent[i];
	commit_delete(cm, ents, r->nent);
	if (ents != stack)
		kl_free(ents);
}

int
commit_heartbeat(struct committer *cm)
{
	struct eitem *it = item_new(cm, ITEM_HEARTBEAT);

	if (it == NULL)
		return -1;
	item_queue(cm, it);
	return 0;
}

/* r's entries are made (its put is acked): the deletes that waited for
 * them go. */
static void
commit_unwait(struct committer *cm, struct ereq *r)
{
	struct eitem *it = NULL;

	for (size_t i = 0; i < r->nent; i++) {
		struct eentry	*x = &r->ent[i];

		if (x->w != W_DEL_WAIT)
			continue;
		x->w = W_DELETING;
		r->owner->dels_out--;		/* queued: out once sent */
		if (it == NULL && ((it = item_new(cm, ITEM_DEL)) == NULL ||
		    (it->del = kl_calloc(r->nent, sizeof(*it->del))) ==
		    NULL)) {
			item_free(it);
			cm->hooks.lose(cm->hooks.arg,
			    "out of memory for deletes");
			return;
		}
		it->del[it->ndel++] = x;
		it->fence = r->late;
		r->refs++;
	}
	if (it != NULL)
		item_queue(cm, it);
}

static void
commit_put_acked(struct committer *cm, struct ereq *r)
{
	for (size_t i = 0; i < r->nent; i++)
		if (r->ent[i].w == W_PUTTING)
			r->ent[i].w = W_PUT;
	commit_unwait(cm, r);
}

/*
 * May the queued item go in the transaction being filled? Not a LOCK's
 * puts while a delete of its owner's entries is out (sent and not acked,
 * or waiting): the replicas must apply that first. Its own entries'
 * deletes that wait for this very put do not count.
 */
static bool
item_may_go(const struct eitem *it)
{
	const struct ereq	*r = it->req;
	size_t			 own = 0;

	if (it->kind != ITEM_PUT || r->owner->dels_out == 0)
		return true;
	for (size_t i = 0; i < r->nent; i++)
		own += r->ent[i].w == W_DEL_WAIT;
	return r->owner->dels_out <= own;
}

/*
 * May it go in the transaction being made? A LOCK's puts go in the order
 * their requests came, for per-key FIFO among this front end's clients:
 * none overtakes an earlier one that must wait for its owner's deletes,
 * and none goes while a transaction with puts is on the wire (two could
 * commit in either order, and one whose fence moved is sent again after
 * the other). Deletes go whenever they may. *puts_stop starts as false
 * for each transaction.
 */
static bool
commit_pick(const struct committer *cm, const struct eitem *it,
    bool *puts_stop)
{
	if (it->kind != ITEM_PUT)
		return item_may_go(it);
	if (cm->puts_inflight || *puts_stop)
		return false;
	if (!item_may_go(it))
		*puts_stop = true;
	return !*puts_stop;
}

/* One transaction of what the queue has that may go; false if nothing
 * may. */
static bool
commit_send(struct committer *cm)
{
	struct etcd_txn	*t;
	struct etxn	*ctx;
	struct eitem	*it, *next;
	size_t		 ops = 0, n = 0;
	char		 key[512], val[128];
	bool		 fence = false, hb = false, stop = false;
	int		 keylen;

	TAILQ_FOREACH(it, &cm->queue, entry) {
		size_t k = item_ops(it);

		if (n > 0 && ops + k > cm->max_ops)
			break;
		if (!commit_pick(cm, it, &stop))
			continue;
		ops += k;
		n++;
	}
	if (n == 0)
		return false;
	if ((t = etcd_txn_new()) == NULL ||
	    (ctx = kl_calloc(1, sizeof(*ctx) + n * sizeof(ctx->items[0]))) ==
	    NULL) {
		etcd_txn_free(t);
		cm->hooks.lose(cm->hooks.arg,
		    "out of memory for a transaction");
		return false;
	}
	ctx->cm = cm;
	ctx->gen = cm->gen;
	ctx->sent_ms = kl_now_ms();
	ctx->ops = ops;
	/* the same items as above: nothing they look at changed */
	stop = false;
	for (it = TAILQ_FIRST(&cm->queue); it != NULL && ctx->n < n;
	    it = next) {
		next = TAILQ_NEXT(it, entry);
		if (!commit_pick(cm, it, &stop))
			continue;
		ctx->items[ctx->n++] = it;
		item_unqueue(cm, it);
	}
	for (size_t i = 0; i < n; i++) {
		it = ctx->items[i];
		if (it->kind == ITEM_DEL)
			item_dels_out(it, 1);
		ctx->compare |= it->kind == ITEM_PUT;
		fence |= it->kind == ITEM_DEL && it->fence;
		hb |= it->kind == ITEM_HEARTBEAT;
	}
	keylen = snprintf(key, sizeof(key), "%sfe/%016" PRIx64, cm->prefix,
	    cm->fe);
	if (ctx->compare && etcd_txn_compare(t, key, (size_t)keylen,
	    ETCD_CMP_MOD, ETCD_CMP_LESS, cm->known_rev + 1) != 0)
		goto nomem;
	/* deletes first: a release is applied before a LOCK written with it */
	for (size_t i = 0; i < n; i++) {
		it = ctx->items[i];
		for (size_t j = 0; it->kind == ITEM_DEL && j < it->ndel; j++)
			if (etcd_txn_delete(t, true, it->del[j]->ekey,
			    it->del[j]->ekeylen, NULL, 0) != 0)
				goto nomem;
	}
	for (size_t i = 0; i < n; i++) {
		struct ereq *r;

		it = ctx->items[i];
		switch (it->kind) {
		case ITEM_PUT:
			r = it->req;
			for (size_t j = 0; j < r->nent; j++)
				/* r->fe: our lease, or a session's */
				if (etcd_txn_put(t, true, r->ent[j].ekey,
				    r->ent[j].ekeylen, r->value, r->valuelen,
				    (int64_t)r->fe) != 0)
					goto nomem;
			break;
		case ITEM_HEARTBEAT:
			snprintf(val, sizeof(val), "keylockd %s %ld %" PRIu64,
			    PACKAGE_VERSION, (long)getpid(), ++cm->hb_count);
			if (etcd_txn_put(t, true, key, (size_t)keylen, val,
			    strlen(val), (int64_t)cm->fe) != 0)
				goto nomem;
			break;
		case ITEM_DEL:
			break;
		}
	}
	if (fence && !hb) {
		snprintf(val, sizeof(val), "keylockd %s %ld %" PRIu64,
		    PACKAGE_VERSION, (long)getpid(), ++cm->hb_count);
		if (etcd_txn_put(t, true, key, (size_t)keylen, val,
		    strlen(val), (int64_t)cm->fe) != 0)
			goto nomem;
	}
	cm->count->txns++;
	cm->inflight++;
	cm->puts_inflight |= ctx->compare;
	/* tried again on the next member when one fails: a put twice is a
	 * rewrite (replicas ignore it) or fails the fence, a delete twice
	 * nothing */
	if (etcd_txn(cm->etcd, t, ETCD_RETRY, commit_txn_cb, ctx) == NULL) {
		struct etcd_result r;

		/* the queue of the client is full: fail like etcd did */
		memset(&r, 0, sizeof(r));
		r.status = ETCD_ERR_NOMEM;
		r.message = "too many etcd calls queued";
		commit_txn_cb(ctx, &r);
	}
	return true;
nomem:
	etcd_txn_free(t);
	for (size_t i = 0; i < n; i++)
		item_release(ctx->items[i]);
	kl_free(ctx);
	cm->hooks.lose(cm->hooks.arg, "out of memory for a transaction");
	return false;
}

static uint64_t
commit_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void
hold_cb(evutil_socket_t fd, short what, void *arg)
{
	struct committer *cm = arg;

	commit_flush(cm);
	cm->hooks.end_turn(cm->hooks.arg);
}

static bool
commit_hold_timer(struct committer *cm)
{
	return cm->hold != NULL || (cm->hold = evtimer_new(cm->base, hold_cb,
	    cm)) != NULL;
}

/* With a transaction on the wire, the queue waits for its reply (which
 * sends it, commit_txn_cb) unless it is full, or it has waited
 * EBE_HOLD_MS: a commit that hangs costs the requests behind it that
 * much, not a timeout of their own on top of its. With none on the wire,
 * it waits while the linger after a reply lasts (commit_txn_cb). */
static bool
commit_hold(struct committer *cm)
{
	uint64_t	age, now;
	struct timeval	tv;

	if (cm->queue_ops >= cm->max_ops) {
		cm->linger_until = 0;
		return false;
	}
	if (cm->inflight == 0) {
		if (cm->linger_until == 0)
			return false;
		now = commit_now_us();
		if (now >= cm->linger_until ||
		    cm->queue_ops >= cm->linger_ops ||
		    !commit_hold_timer(cm)) {
			cm->linger_until = 0;
			return false;
		}
		tv.tv_sec = 0;
		tv.tv_usec = (suseconds_t)(cm->linger_until - now);
		evtimer_add(cm->hold, &tv);
		return true;
	}
	age = kl_now_ms() - TAILQ_FIRST(&cm->queue)->queued_ms;
	if (age >= EBE_HOLD_MS)
		return false;
	if (!commit_hold_timer(cm))
		return false;
	if (!evtimer_pending(cm->hold, NULL)) {
		tv.tv_sec = 0;
		tv.tv_usec = (suseconds_t)(EBE_HOLD_MS - age) * 1000;
		evtimer_add(cm->hold, &tv);
	}
	return true;
}

void
commit_linger(struct committer *cm, uint64_t us)
{
	if (cm->inflight > 0 || cm->linger_until != 0)
		return;
	cm->linger_until = commit_now_us() + us;
	cm->linger_ops = cm->queue_ops + 1;
}

void
commit_flush(struct committer *cm)
{
	while (cm->inflight < cm->max_inflight && !TAILQ_EMPTY(&cm->queue) &&
	    cm->fe != 0 &&
	    !commit_hold(cm))
		if (!commit_send(cm))
			break;	/* puts that wait for their owners' deletes */
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct committer	*cm = arg;
	struct eitem	*it;

	while ((it = TAILQ_FIRST(&cm->later)) != NULL) {
		TAILQ_REMOVE(&cm->later, it, entry);
		item_dels_out(it, -1);	/* out again once sent */
		item_queue(cm, it);
	}
	commit_flush(cm);
	cm->hooks.end_turn(cm->hooks.arg);
}

/* A failed delete: again after a pause (deletes are idempotent). */
static void
item_later(struct committer *cm, struct eitem *it)
{
	int		ms = EBE_RETRY_MS << (it->tries < 4 ? it->tries : 4);
	struct timeval	tv;

	if (ms > EBE_RETRY_MAX_MS)
		ms = EBE_RETRY_MAX_MS;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	it->tries++;
	TAILQ_INSERT_TAIL(&cm->later, it, entry);
	if (cm->retry == NULL)
		cm->retry = evtimer_new(cm->base, retry_cb, cm);
	if (cm->retry != NULL && !evtimer_pending(cm->retry, NULL))
		evtimer_add(cm->retry, &tv);
}

static void
commit_item_ok(struct committer *cm, struct eitem *it,
    const struct etcd_result *res)
{
	switch (it->kind) {
	case ITEM_PUT:
		commit_put_acked(cm, it->req);
		break;
	case ITEM_DEL:
		item_dels_out(it, -1);
		break;
	case ITEM_HEARTBEAT:
		cm->hooks.heartbeat(cm->hooks.arg, res->revision);
		break;
	}
	item_release(it);
}

static void
commit_item_failed(struct committer *cm, struct eitem *it, const char *why)
{
	switch (it->kind) {
	case ITEM_PUT:
		it->req->late = true;	/* made, or maybe later */
		if (cm->hooks.put_failed(cm->hooks.arg, it->req, why)) {
			commit_put_acked(cm, it->req);
			item_release(it);
			break;
		}
		/* made or not: delete its entries to be sure */
		commit_put_acked(cm, it->req);
		commit_delete_req(cm, it->req);
		item_release(it);
		break;
	case ITEM_DEL:
		/* its UNLOCK was answered when it was queued: it stays out
		 * (its owner's next puts wait) until it is acked */
		if (it->tries == 0)
			log_info("backend etcd: %zu deletes failed: %s; they "
			    "are tried again", it->ndel, why);
		item_later(cm, it);
		break;
	case ITEM_HEARTBEAT:
		item_release(it);
		break;
	}
}

static void
commit_txn_cb(void *arg, const struct etcd_result *res)
{
	struct etxn	*ctx = arg;
	struct committer	*cm = ctx->cm;
	char		 why[160];

	if (ctx->gen != cm->gen) {
		/* from before a loss: the requests are gone */
		for (size_t i = 0; i < ctx->n; i++)
			item_free(ctx->items[i]);
		kl_free(ctx);
		return;
	}
	cm->inflight--;
	if (ctx->compare)
		cm->puts_inflight = false;
	if (log_is_debug())
		log_debug("backend etcd: transaction of %zu operations at "
		    "revision %" PRId64 ": %s in %" PRIu64 " ms", ctx->ops,
		    res->revision, etcd_status_name(res->status),
		    kl_now_ms() - ctx->sent_ms);
	if (res->status == ETCD_OK && res->revision > cm->known_rev)
		cm->known_rev = res->revision;
	if (res->status == ETCD_OK && ctx->compare && !res->succeeded) {
		/* the fence moved since we sent it: nothing was made; again,
		 * in the same order, ahead of what came since */
		log_debug("backend etcd: a transaction of %zu items found the "
		    "fence moved; sending it again", ctx->n);
		for (size_t i = ctx->n; i-- > 0;) {
			struct eitem *it = ctx->items[i];

			if (it->kind == ITEM_DEL)
				item_dels_out(it, -1);
			it->queued_ms = kl_now_ms();
			TAILQ_INSERT_HEAD(&cm->queue, it, entry);
			cm->queue_ops += item_ops(it);
		}
	} else if (res->status == ETCD_OK) {
		/* a try given up on a member may still be made, late: the
		 * deletes of these puts' entries will move the fence */
		for (size_t i = 0; res->tries > 1 && i < ctx->n; i++)
			if (ctx->items[i]->kind == ITEM_PUT)
				ctx->items[i]->req->late = true;
		if (cm->inflight == 0 && ctx->ops >= EBE_LINGER_MIN) {
			/* its clients' next requests: wait a little for them */
			cm->linger_until = commit_now_us() + EBE_LINGER_US;
			cm->linger_ops = cm->queue_ops + ctx->ops * 3 / 4;
		}
		for (size_t i = 0; i < ctx->n; i++)
			commit_item_ok(cm, ctx->items[i], res);
	} else if (res->status == ETCD_ERR_GRPC &&
	    res->grpc_code == ETCD_GRPC_NOT_FOUND && !commit_has_other_lease(cm,
	    ctx)) {
		for (size_t i = 0; i < ctx->n; i++)
			item_release(ctx->items[i]);
		kl_free(ctx);
		cm->hooks.lose(cm->hooks.arg, "etcd: our lease is gone");
		cm->hooks.end_turn(cm->hooks.arg);
		return;
	} else {
		cm->count->txn_failures++;
		snprintf(why, sizeof(why), "%s%s%s", etcd_status_name(
		    res->status), res->message != NULL ? ": " : "",
		    res->message != NULL ? res->message : "");
		log_debug("backend etcd: a transaction of %zu items failed: %s",
		    ctx->n, why);
		for (size_t i = 0; i < ctx->n; i++)
			commit_item_failed(cm, ctx->items[i], why);
	}
	kl_free(ctx);
	commit_flush(cm);
	cm->hooks.end_turn(cm->hooks.arg);
}

void
commit_drop(struct committer *cm)
{
	struct eitem *it;

	cm->gen++;
	cm->fe = 0;
	while ((it = TAILQ_FIRST(&cm->queue)) != NULL) {
		item_unqueue(cm, it);
		item_release(it);
	}
	while ((it = TAILQ_FIRST(&cm->later)) != NULL) {
		TAILQ_REMOVE(&cm->later, it, entry);
		item_release(it);
	}
	cm->inflight = 0;
	cm->puts_inflight = false;
	cm->linger_until = 0;
	if (cm->retry != NULL)
		evtimer_del(cm->retry);
	if (cm->hold != NULL)
		evtimer_del(cm->hold);
}

void
commit_start(struct committer *cm, uint64_t fe)
{
	cm->fe = fe;
}

struct committer *
commit_new(struct event_base *base, struct etcd *etcd, const char *prefix,
    size_t max_ops, int max_inflight, struct be_counters *count,
    const struct commit_hooks *hooks)
{
	struct committer *cm = kl_calloc(1, sizeof(*cm));

	if (cm == NULL)
		return NULL;
	cm->hooks = *hooks;
	cm->base = base;
	cm->etcd = etcd;
	cm->prefix = prefix;
	cm->max_ops = max_ops;
	cm->max_inflight = max_inflight;
	cm->count = count;
	TAILQ_INIT(&cm->queue);
	TAILQ_INIT(&cm->later);
	return cm;
}

/* After commit_drop() and etcd_free() (whose last callbacks are heard
 * as stale ones). */
void
commit_free(struct committer *cm)
{
	if (cm == NULL)
		return;
	if (cm->retry != NULL)
		event_free(cm->retry);
	if (cm->hold != NULL)
		event_free(cm->hold);
	kl_free(cm);
}
