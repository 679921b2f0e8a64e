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
 * EBE_LINGER_US for the clients that reply answered (UNLOCK's OK, the
 * grants of its LOCKs' puts) to send their next request, until three
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
 * anew). Deletes that fail are tried again until they succeed or the
 * lease goes; a LOCK whose put fails is answered ERR BACKEND and its
 * entries deleted, in case the put was made after all.
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

struct etxn {
	struct ebe	*e;
	uint64_t	 gen;		/* e->gen when sent */
	uint64_t	 sent_ms;
	size_t		 ops;
	size_t		 n;
	struct eitem	*items[];
};

static void	commit_txn_cb(void *, const struct etcd_result *);

static struct eitem *
item_new(struct ebe *e, enum eitem_kind kind)
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
item_queue(struct ebe *e, struct eitem *it)
{
	it->queued_ms = kl_now_ms();
	TAILQ_INSERT_TAIL(&e->queue, it, entry);
	e->nqueue++;
	e->queue_ops += item_ops(it);
}

static void
item_unqueue(struct ebe *e, struct eitem *it)
{
	TAILQ_REMOVE(&e->queue, it, entry);
	e->nqueue--;
	e->queue_ops -= item_ops(it);
}

/* Drops the item's hold on its requests (they may be freed). */
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
commit_put(struct ebe *e, struct ereq *r)
{
	struct eitem *it = item_new(e, ITEM_PUT);

	if (it == NULL)
		return -1;
	it->req = r;
	r->refs++;
	item_queue(e, it);
	return 0;
}

size_t
commit_delete(struct ebe *e, struct eentry **ents, size_t n,
    struct eowner *reply)
{
	struct eitem	*it = NULL;
	size_t		 count = 0;

	for (size_t i = 0; i < n; i++) {
		struct eentry *x = ents[i];

		if (x->del_queued)
			continue;
		x->del_queued = true;
		count++;
		if (!x->put_acked) {
			/* even if seen: a put still on the wire may be tried
			 * again, and would make the entry anew after this
			 * delete; commit_unwait() sends it */
			x->del_wait = true;
			x->del_reply = reply != NULL;
			continue;
		}
		if (it == NULL && ((it = item_new(e, ITEM_DEL)) == NULL ||
		    (it->del = kl_calloc(n, sizeof(*it->del))) == NULL)) {
			item_free(it);
			ebe_lose(e, "out of memory for deletes");
			return 0;
		}
		it->del[it->ndel++] = x;
		x->req->refs++;
	}
	if (it != NULL) {
		it->reply = reply;
		item_queue(e, it);
	}
	return count;
}

void
commit_delete_req(struct ebe *e, struct ereq *r)
{
	struct eentry	*stack[16], **ents = stack;

	if (r->nent > 16 && (ents = kl_calloc(r->nent, sizeof(*ents))) ==
	    NULL) {
		ebe_lose(e, "out of memory for deletes");
		return;
	}
	for (size_t i = 0; i < r->nent; i++)
		ents[i] = &r->ent[i];
	commit_delete(e, ents, r->nent, NULL);
	if (ents != stack)
		kl_free(ents);
}

int
commit_heartbeat(struct ebe *e)
{
	struct eitem *it = item_new(e, ITEM_HEARTBEAT);

	if (it == NULL)
		return -1;
	item_queue(e, it);
	return 0;
}

/* r's entries are made (its put is acked, or the watch showed one): the
 * deletes that waited for them go. */
void
commit_unwait(struct ebe *e, struct ereq *r)
{
	struct eitem *it[2] = { NULL, NULL };	/* no reply, reply */

	for (size_t i = 0; i < r->nent; i++) {
		struct eentry	*x = &r->ent[i];
		int		 k = x->del_reply ? 1 : 0;

		if (!x->del_wait || !x->put_acked)
			continue;
		x->del_wait = x->del_reply = false;
		if (it[k] == NULL && ((it[k] = item_new(e, ITEM_DEL)) == NULL ||
		    (it[k]->del = kl_calloc(r->nent, sizeof(*it[k]->del))) ==
		    NULL)) {
			item_free(it[k]);
			ebe_lose(e, "out of memory for deletes");
			return;
		}
		it[k]->del[it[k]->ndel++] = x;
		r->refs++;
	}
	for (int k = 0; k < 2; k++)
		if (it[k] != NULL) {
			it[k]->reply = k == 1 ? r->owner : NULL;
			item_queue(e, it[k]);
		}
}

static void
commit_put_acked(struct ebe *e, struct ereq *r)
{
	for (size_t i = 0; i < r->nent; i++)
		r->ent[i].put_acked = true;
	commit_unwait(e, r);
}

static void
commit_send(struct ebe *e)
{
	struct etcd_txn	*t;
	struct etxn	*ctx;
	struct eitem	*it;
	size_t		 ops = 0, n = 0;
	char		 key[512], val[128];

	TAILQ_FOREACH(it, &e->queue, entry) {
		size_t k = item_ops(it);

		if (n > 0 && ops + k > e->max_ops)
			break;
		ops += k;
		n++;
	}
	if (n == 0)
		return;
	if ((t = etcd_txn_new()) == NULL ||
	    (ctx = kl_calloc(1, sizeof(*ctx) + n * sizeof(ctx->items[0]))) ==
	    NULL) {
		etcd_txn_free(t);
		ebe_lose(e, "out of memory for a transaction");
		return;
	}
	ctx->e = e;
	ctx->gen = e->gen;
	ctx->sent_ms = kl_now_ms();
	ctx->ops = ops;
	for (size_t i = 0; i < n; i++) {
		ctx->items[i] = it = TAILQ_FIRST(&e->queue);
		item_unqueue(e, it);
	}
	ctx->n = n;
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
		int len;

		it = ctx->items[i];
		switch (it->kind) {
		case ITEM_PUT:
			r = it->req;
			for (size_t j = 0; j < r->nent; j++)
				if (etcd_txn_put(t, true, r->ent[j].ekey,
				    r->ent[j].ekeylen, r->value, r->valuelen,
				    (int64_t)e->fe) != 0)
					goto nomem;
			break;
		case ITEM_HEARTBEAT:
			len = snprintf(key, sizeof(key), "%sfe/%016" PRIx64,
			    e->prefix, e->fe);
			snprintf(val, sizeof(val), "keylockd %s %ld %" PRIu64,
			    PACKAGE_VERSION, (long)getpid(), ++e->hb_count);
			if (etcd_txn_put(t, true, key, (size_t)len, val,
			    strlen(val), (int64_t)e->fe) != 0)
				goto nomem;
			break;
		case ITEM_DEL:
			break;
		}
	}
	e->count->txns++;
	e->inflight++;
	/* tried again on the next member when one fails: a put twice is a
	 * rewrite (replicas ignore it), a delete twice nothing */
	if (etcd_txn(e->etcd, t, ETCD_RETRY, commit_txn_cb, ctx) == NULL) {
		struct etcd_result r;

		/* the queue of the client is full: fail like etcd did */
		memset(&r, 0, sizeof(r));
		r.status = ETCD_ERR_NOMEM;
		r.message = "too many etcd calls queued";
		commit_txn_cb(ctx, &r);
	}
	return;
nomem:
	etcd_txn_free(t);
	for (size_t i = 0; i < n; i++)
		item_release(ctx->items[i]);
	kl_free(ctx);
	ebe_lose(e, "out of memory for a transaction");
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
	struct ebe *e = arg;

	commit_flush(e);
	ebe_end_turn(e);
}

static bool
commit_hold_timer(struct ebe *e)
{
	return e->hold != NULL || (e->hold = evtimer_new(e->base, hold_cb,
	    e)) != NULL;
}

/* With a transaction on the wire, the queue waits for its reply (which
 * sends it, commit_txn_cb) unless it is full, or it has waited
 * EBE_HOLD_MS: a commit that hangs costs the requests behind it that
 * much, not a timeout of their own on top of its. With none on the wire,
 * it waits while the linger after a reply lasts (commit_txn_cb). */
static bool
commit_hold(struct ebe *e)
{
	uint64_t	age, now;
	struct timeval	tv;

	if (e->queue_ops >= e->max_ops) {
		e->linger_until = 0;
		return false;
	}
	if (e->inflight == 0) {
		if (e->linger_until == 0)
			return false;
		now = commit_now_us();
		if (now >= e->linger_until || e->queue_ops >= e->linger_ops ||
		    !commit_hold_timer(e)) {
			e->linger_until = 0;
			return false;
		}
		tv.tv_sec = 0;
		tv.tv_usec = (suseconds_t)(e->linger_until - now);
		evtimer_add(e->hold, &tv);
		return true;
	}
	age = kl_now_ms() - TAILQ_FIRST(&e->queue)->queued_ms;
	if (age >= EBE_HOLD_MS)
		return false;
	if (!commit_hold_timer(e))
		return false;
	if (!evtimer_pending(e->hold, NULL)) {
		tv.tv_sec = 0;
		tv.tv_usec = (suseconds_t)(EBE_HOLD_MS - age) * 1000;
		evtimer_add(e->hold, &tv);
	}
	return true;
}

void
commit_flush(struct ebe *e)
{
	while (e->inflight < e->max_inflight && !TAILQ_EMPTY(&e->queue) &&
	    e->fe != 0 && e->state != EBE_LOST && e->state != EBE_STOPPING &&
	    !commit_hold(e))
		commit_send(e);
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ebe	*e = arg;
	struct eitem	*it;

	while ((it = TAILQ_FIRST(&e->later)) != NULL) {
		TAILQ_REMOVE(&e->later, it, entry);
		item_queue(e, it);
	}
	commit_flush(e);
	ebe_end_turn(e);
}

/* A failed delete: again after a pause (deletes are idempotent). */
static void
item_later(struct ebe *e, struct eitem *it)
{
	int		ms = EBE_RETRY_MS << (it->tries < 4 ? it->tries : 4);
	struct timeval	tv;

	if (ms > EBE_RETRY_MAX_MS)
		ms = EBE_RETRY_MAX_MS;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	it->tries++;
	TAILQ_INSERT_TAIL(&e->later, it, entry);
	if (e->retry == NULL)
		e->retry = evtimer_new(e->base, retry_cb, e);
	if (e->retry != NULL && !evtimer_pending(e->retry, NULL))
		evtimer_add(e->retry, &tv);
}

static void
commit_item_ok(struct ebe *e, struct eitem *it, const struct etcd_result *res)
{
	switch (it->kind) {
	case ITEM_PUT:
		commit_put_acked(e, it->req);
		break;
	case ITEM_DEL:
		if (it->reply != NULL)
			ebe_release_acked(e, it->reply, it->ndel, NULL);
		break;
	case ITEM_HEARTBEAT:
		e->hb_acked_ms = kl_now_ms();
		e->hb_rev = res->revision;
		e->hb_seen = e->rev >= res->revision;
		break;
	}
	item_release(it);
}

static void
commit_item_failed(struct ebe *e, struct eitem *it, const char *why)
{
	struct be_result	 r;
	struct ereq		*q;

	switch (it->kind) {
	case ITEM_PUT:
		q = it->req;
		if (q->state == REQ_HELD && q->replied && !q->withdrawing) {
			/* the watch brought its put and the client has its
			 * token: the put was made, whatever this reply says,
			 * and deleting it now would end a hold the client
			 * still has (the next waiter granted while it holds).
			 * A copy of it tried again elsewhere that lands after
			 * our delete is a leftover, deleted when it is seen. */
			commit_put_acked(e, q);
			item_release(it);
			break;
		}
		if (!q->replied && !q->owner->gone) {
			memset(&r, 0, sizeof(r));
			r.op = BE_LOCK;
			r.err = KL_ERR_BACKEND;
			r.text = e->why;
			log_info("backend etcd: a LOCK's put failed: %s", why);
			snprintf(e->why, sizeof(e->why), "etcd did not take the "
			    "LOCK in time");
			q->replied = true;
			ebe_done(e, q->owner, &r);
		}
		/* made or not: delete its entries to be sure */
		q->withdrawing = true;
		for (size_t i = 0; i < q->nent; i++)
			q->ent[i].put_acked = true;
		commit_delete_req(e, q);
		commit_unwait(e, q);
		item_release(it);
		break;
	case ITEM_DEL:
		if (it->reply != NULL) {
			ebe_release_acked(e, it->reply, it->ndel, why);
			it->reply = NULL;
		}
		item_later(e, it);
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
	struct ebe	*e = ctx->e;
	char		 why[160];

	if (ctx->gen != e->gen) {
		/* from before a loss: the requests are gone */
		for (size_t i = 0; i < ctx->n; i++)
			item_free(ctx->items[i]);
		kl_free(ctx);
		return;
	}
	e->inflight--;
	if (log_is_debug())
		log_debug("backend etcd: transaction of %zu operations at "
		    "revision %" PRId64 ": %s in %" PRIu64 " ms", ctx->ops,
		    res->revision, etcd_status_name(res->status),
		    kl_now_ms() - ctx->sent_ms);
	if (res->status == ETCD_OK) {
		if (e->inflight == 0 && ctx->ops >= EBE_LINGER_MIN) {
			/* its clients' next requests: wait a little for them */
			e->linger_until = commit_now_us() + EBE_LINGER_US;
			e->linger_ops = e->queue_ops + ctx->ops * 3 / 4;
		}
		for (size_t i = 0; i < ctx->n; i++)
			commit_item_ok(e, ctx->items[i], res);
	} else if (res->status == ETCD_ERR_GRPC &&
	    res->grpc_code == ETCD_GRPC_NOT_FOUND) {
		for (size_t i = 0; i < ctx->n; i++)
			item_release(ctx->items[i]);
		kl_free(ctx);
		ebe_lose(e, "etcd: our lease is gone");
		ebe_end_turn(e);
		return;
	} else {
		e->count->txn_failures++;
		snprintf(why, sizeof(why), "%s%s%s", etcd_status_name(
		    res->status), res->message != NULL ? ": " : "",
		    res->message != NULL ? res->message : "");
		log_debug("backend etcd: a transaction of %zu items failed: %s",
		    ctx->n, why);
		for (size_t i = 0; i < ctx->n; i++)
			commit_item_failed(e, ctx->items[i], why);
	}
	kl_free(ctx);
	commit_flush(e);
	ebe_end_turn(e);
}

/* After a loss: nothing queued survives; our requests are dropped. */
void
commit_drop(struct ebe *e)
{
	struct eitem *it;

	while ((it = TAILQ_FIRST(&e->queue)) != NULL) {
		item_unqueue(e, it);
		item_release(it);
	}
	while ((it = TAILQ_FIRST(&e->later)) != NULL) {
		TAILQ_REMOVE(&e->later, it, entry);
		item_release(it);
	}
	e->inflight = 0;
	e->linger_until = 0;
	if (e->retry != NULL)
		evtimer_del(e->retry);
	if (e->hold != NULL)
		evtimer_del(e->hold);
}
