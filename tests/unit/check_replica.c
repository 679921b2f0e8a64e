/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd's replica without etcd (keylockd(8), BACKEND ETCD): every
 * front end applies the same watch events in the same order and must
 * reach the same verdicts. Two replicas (front ends A and B) are fed one
 * generated event stream, as etcd's watch would bring it: puts of LOCK
 * entries (several LOCKs of one front end in one transaction), deletes of
 * one entry or of a whole request, a lease's expiry deleting every entry
 * of a front end, and LOCKs of A's own clients made through the seam.
 * After every transaction both tables must agree on every key: holders
 * (who, token, mode) in grant order, waiters in queue order. Every token
 * A's client receives must be the token both tables show for that hold
 * (keylockd-protocol(7): the token a client got is the one INFO names,
 * on every front end). A third replica rebuilt from the live entries (as
 * after a compaction or a restart) must agree on grants and queues.
 *
 * The etcd client of each replica points at a port nobody listens on and
 * the event loop never runs: nothing leaves the process.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend_etcd_int.h"
#include "check_main.h"
#include "clock.h"
#include "config.h"
#include "locktable.h"
#include "util.h"

#define NKEYS		5
#define MAXKV		1024
#define MAXGOT		64
#define FE_A		0xa0
#define FE_B		0xb0
#define FE_C		0xc0
#define FE_S		0x5f	/* a lease both foreign front ends write
				 * under (a session's) */
#define OURS		3	/* clients of A through the seam */

struct got {
	struct lt_owner		*o;
	struct be_result	 r;
};

struct rep {
	struct event_base	*base;
	struct ebe		*e;
	struct backend		*be;		/* e's seam */
	struct replica		*rp;
	uint64_t		 fe;
	struct be_counters	 count;
	struct lt_owner		*dropped[16];
	size_t			 ndropped;
	struct got		 got[MAXGOT];
	size_t			 ngot;
	struct lt_owner		*moved[4];
	size_t			 nmoved;
	bool			 flat;		/* built from the newest range
						 * alone (compacted history) */
};

static void
rep_done(void *arg, struct lt_owner *o, const struct be_result *r)
{
	struct rep *p = arg;

	ck_assert_uint_lt(p->ngot, MAXGOT);
	p->got[p->ngot].o = o;
	p->got[p->ngot].r = *r;
	p->ngot++;
}

static void
rep_end_turn(void *arg)
{
}

static void
rep_drop(void *arg, struct lt_owner *o, const char *why)
{
	struct rep *p = arg;

	ck_assert_uint_lt(p->ndropped, 16);
	p->dropped[p->ndropped++] = o;
}

static void
rep_moved(void *arg, struct lt_owner *o)
{
	struct rep *p = arg;

	ck_assert_uint_lt(p->nmoved, 4);
	p->moved[p->nmoved++] = o;
}

/* An event base timed as the daemon's is (server.c: a precise clock, not
 * CLOCK_MONOTONIC_COARSE's 4 ms steps, by which a timer fires early
 * against kl_now_ms()). */
static struct event_base *
rt_base_new(void)
{
	struct event_config	*ec = event_config_new();
	struct event_base	*base;

	ck_assert_ptr_nonnull(ec);
	event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
	base = event_base_new_with_config(ec);
	event_config_free(ec);
	ck_assert_ptr_nonnull(base);
	return base;
}

static struct rep *
rep_new(uint64_t fe)
{
	static char	 backend[] = "etcd", endpoints[] = "127.0.0.1:9";
	static char	 prefix[] = "t/";
	struct rep	*p = calloc(1, sizeof(*p));
	struct config	 cfg;
	struct be_hooks	 hooks = { rep_done, rep_end_turn, rep_drop, NULL,
	    NULL, NULL, rep_moved, NULL, NULL };
	char		 err[256];

	ck_assert_ptr_nonnull(p);
	memset(&cfg, 0, sizeof(cfg));
	cfg.backend = backend;
	cfg.etcd_endpoints = endpoints;		/* never reached */
	cfg.etcd_prefix = prefix;
	cfg.etcd_lease_ttl = 15;
	cfg.etcd_timeout = 1000;
	cfg.etcd_max_txn_ops = 128;
	cfg.etcd_connections = 2;
	hooks.arg = p;
	hooks.counters = &p->count;
	p->base = rt_base_new();
	p->e = ebe_create(&cfg, p->base, &hooks, err, sizeof(err));
	ck_assert_msg(p->e != NULL, "%s", err);
	ebe_assume(p->e, fe);
	p->be = ebe_seam(p->e);
	p->rp = ebe_replica(p->e);
	p->fe = fe;
	return p;
}

static void
rep_free(struct rep *p)
{
	backend_free(p->be);
	event_base_free(p->base);
	free(p);
}

/* ---- etcd, as the replicas see it: the live entries and a revision ---- */

struct ekv {
	char		 key[96];
	char		 value[160];
	int64_t		 crev;
	uint64_t	 fe, seq;
	bool		 live;
	size_t		 logi;		/* its put in the log */
};

/* etcd's history: every put and delete, in revision order. */
struct lev {
	struct ekv	 kv;
	int64_t		 rev;
	int64_t		 del_rev;	/* a put's delete; INT64_MAX: none */
	bool		 is_delete;
};

struct world {
	uint64_t	 rng;
	int64_t		 rev;
	uint64_t	 seq[3];	/* per foreign front end: its writes'
					 * order, from its own base */
	struct ekv	 kv[MAXKV];
	size_t		 nkv;
	struct etcd_event ev[64];
	size_t		 nev;
	struct rep	*r[3];		/* A, B, and the rebuilt C or NULL */
	struct lt_owner	*ours[OURS];	/* A's clients */
	uint64_t	 grants;	/* tokens checked */
	uint64_t	 unknown;	/* holds a flat C said it does not
					 * know the token of (0) */
	uint64_t	 known;		/* and those it knew, the same */
	struct lev	*log;
	size_t		 nlog, caplog;
};

static uint64_t
rnd(struct world *w, uint64_t n)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng % n;
}

static const char *keyname[NKEYS] = { "k0", "k1", "k2", "k3", "k4" };

static size_t
w_log(struct world *w, const struct ekv *x, bool is_delete)
{
	struct lev *l;

	if (w->nlog == w->caplog) {
		w->caplog = w->caplog ? w->caplog * 2 : 1024;
		ck_assert_ptr_nonnull(w->log = realloc(w->log, w->caplog *
		    sizeof(*w->log)));
	}
	l = &w->log[w->nlog];
	l->kv = *x;
	l->rev = w->rev;
	l->del_rev = INT64_MAX;
	l->is_delete = is_delete;
	return w->nlog++;
}

/* An entry put in the transaction being built. */
static void
w_put(struct world *w, const char *key, size_t keylen, const char *value,
    size_t valuelen, uint64_t fe, uint64_t seq)
{
	struct ekv *x = &w->kv[w->nkv++];

	ck_assert_uint_lt(w->nkv, MAXKV);
	ck_assert_uint_lt(keylen, sizeof(x->key));
	ck_assert_uint_lt(valuelen, sizeof(x->value));
	memcpy(x->key, key, keylen);
	x->key[keylen] = '\0';
	memcpy(x->value, value, valuelen);
	x->value[valuelen] = '\0';
	x->crev = w->rev;
	x->fe = fe;
	x->seq = seq;
	x->live = true;
	x->logi = w_log(w, x, false);
	w->ev[w->nev].is_delete = false;
	w->ev[w->nev].kv.key = x->key;
	w->ev[w->nev].kv.keylen = keylen;
	w->ev[w->nev].kv.value = x->value;
	w->ev[w->nev].kv.valuelen = valuelen;
	w->ev[w->nev].kv.version = 1;
	w->ev[w->nev].kv.create_revision = w->rev;
	w->ev[w->nev].kv.mod_revision = w->rev;
	w->nev++;
	ck_assert_uint_lt(w->nev, 64);
}

static void
w_del(struct world *w, struct ekv *x)
{
	if (!x->live || w->nev >= 60)
		return;
	x->live = false;
	w->log[x->logi].del_rev = w->rev;
	w_log(w, x, true);
	memset(&w->ev[w->nev], 0, sizeof(w->ev[0]));
	w->ev[w->nev].is_delete = true;
	w->ev[w->nev].kv.key = x->key;
	w->ev[w->nev].kv.keylen = strlen(x->key);
	w->ev[w->nev].kv.mod_revision = w->rev;
	w->nev++;
}

/* A foreign LOCK of 1-2 keys, written by front end fi under lease fe
 * (its own, or one that several write under, as a session's). */
static void
w_lock(struct world *w, uint64_t fe, int fi)
{
	char		 value[160], key[96];
	size_t		 n, klen;
	int		 k0 = (int)rnd(w, NKEYS), k1 = (int)rnd(w, NKEYS);
	int		 nk = rnd(w, 3) == 0 && k0 != k1 ? 2 : 1;
	bool		 shared = rnd(w, 4) == 0;
	uint64_t	 seq = ++w->seq[fi];

	n = (size_t)snprintf(value, sizeof(value), "k1 %" PRIu64 " %c 1 %d "
	    "%d 0 %d %s%s%s\nname", 1 + rnd(w, 3), shared ? 's' : 'x',
	    rnd(w, 5) == 0 ? 1 : -1, rnd(w, 5) == 0, nk, keyname[k0],
	    nk == 2 ? " " : "", nk == 2 ? keyname[k1] : "");
	for (int i = 0; i < nk; i++) {
		klen = (size_t)snprintf(key, sizeof(key), "t/q/%s/%016" PRIx64
		    "-%016" PRIx64, keyname[i == 0 ? k0 : k1], fe, seq);
		w_put(w, key, klen, value, n, fe, seq);
	}
}

/* A LOCK of A's client i through the seam: its entries are put. */
static void
w_lock_ours(struct world *w, int i)
{
	struct rep		*a = w->r[0];
	struct eowner		*o = eowner_of(a->rp, w->ours[i]);
	struct lt_acquire	 acq;
	struct be_result	 res;
	const char		*keys[2];
	size_t			 keylens[2];
	int			 k0 = (int)rnd(w, NKEYS), k1 = (int)rnd(w, NKEYS);
	struct ereq		*q;

	if (o->state != OWN_IDLE || locktable_owner_is_waiting(o->lo))
		return;
	memset(&acq, 0, sizeof(acq));
	keys[0] = keyname[k0];
	keys[1] = keyname[k1];
	keylens[0] = keylens[1] = 2;
	acq.keys = keys;
	acq.keylens = keylens;
	acq.nkeys = rnd(w, 3) == 0 ? 2 : 1;
	acq.mode = rnd(w, 4) == 0 ? LT_SHARED : LT_EXCLUSIVE;
	acq.limit = 1;
	acq.max_waiters = -1;
	acq.try = rnd(w, 5) == 0;
	ck_assert_int_eq(a->be->ops->acquire(a->be, w->ours[i], &acq,
	    kl_now_ms(), &res), BE_PENDING);
	ck_assert_ptr_nonnull(q = o->open);
	for (size_t j = 0; j < q->nent; j++)
		w_put(w, q->ent[j].ekey, q->ent[j].ekeylen, q->value,
		    q->valuelen, q->fe, q->seq);
}

/* ---- comparing tables ---- */

struct entry {
	uint64_t	fe, client, token;
	int		mode;
	bool		holder;
};

struct walk {
	struct rep	*p;
	struct entry	 x[32];
	size_t		 n;
};

static void
who(struct rep *p, struct lt_owner *lo, uint64_t *fe, uint64_t *client)
{
	struct eowner *o = eowner_of(p->rp, lo);

	ck_assert_ptr_nonnull(o);
	/* a session's owner is named by its lease wherever it is */
	*fe = o->lease != 0 ? o->lease : o->state != OWN_THEIRS ? p->fe :
	    o->fe;
	*client = o->client;
}

static bool
walk_holder(void *arg, const struct lt_holder_view *h)
{
	struct walk *wk = arg;

	ck_assert_uint_lt(wk->n, 32);
	who(wk->p, h->owner, &wk->x[wk->n].fe, &wk->x[wk->n].client);
	wk->x[wk->n].token = h->token;
	wk->x[wk->n].mode = (int)h->mode;
	wk->x[wk->n].holder = true;
	wk->n++;
	return true;
}

static bool
walk_waiter(void *arg, const struct lt_waiter_view *v)
{
	struct walk *wk = arg;

	ck_assert_uint_lt(wk->n, 32);
	who(wk->p, v->owner, &wk->x[wk->n].fe, &wk->x[wk->n].client);
	wk->x[wk->n].token = 0;
	wk->x[wk->n].mode = (int)v->mode;
	wk->x[wk->n].holder = false;
	wk->n++;
	return true;
}

static void
key_walk(struct rep *p, const char *key, struct walk *wk)
{
	const struct locktable	*lt = replica_table(p->rp);
	const struct lt_key	*k = locktable_find(lt, key, strlen(key));

	memset(wk, 0, sizeof(*wk));
	wk->p = p;
	if (k != NULL)
		locktable_key_walk(lt, k, kl_now_ms(), walk_holder,
		    walk_waiter, wk);
}

/* a and b agree on every key: the same holders, with the same tokens,
 * in grant order and the same waiters in queue order. */
static void
tables_agree(struct world *w, struct rep *a, struct rep *b, int step)
{
	struct walk wa, wb;
	const char *bad;

	ck_assert_msg((bad = locktable_check(replica_table(a->rp))) == NULL,
	    "%s", bad);
	ck_assert_msg((bad = locktable_check(replica_table(b->rp))) == NULL,
	    "%s", bad);
	for (int k = 0; k < NKEYS; k++) {
		key_walk(a, keyname[k], &wa);
		key_walk(b, keyname[k], &wb);
		ck_assert_msg(wa.n == wb.n, "step %d, key %s: %zu entries "
		    "against %zu", step, keyname[k], wa.n, wb.n);
		for (size_t i = 0; i < wa.n; i++) {
			struct entry *x = &wa.x[i], *y = &wb.x[i];

			ck_assert_msg(x->fe == y->fe && x->client == y->client &&
			    x->mode == y->mode && x->holder == y->holder,
			    "step %d, key %s, place %zu: %" PRIx64 "/%" PRIu64
			    " %s against %" PRIx64 "/%" PRIu64 " %s", step,
			    keyname[k], i, x->fe, x->client, x->holder ?
			    "holds" : "waits", y->fe, y->client, y->holder ?
			    "holds" : "waits");
			/* a replica built from a compacted history reports
			 * the token every other one shows, the one the
			 * client received, or 0: not known there; never
			 * another */
			if (b->flat && y->holder && y->token == 0) {
				w->unknown++;
				continue;
			}
			if (b->flat && y->holder)
				w->known++;
			ck_assert_msg(x->token == y->token, "step %d, key %s: "
			    "token %" PRIu64 " against %" PRIu64 "%s", step,
			    keyname[k], x->token, y->token, b->flat ? " (a "
			    "replica built from a compacted history)" : "");
		}
	}
}

/* The token in r's table for client (fe, client)'s hold on key. */
static uint64_t
token_of(struct rep *p, uint64_t fe, uint64_t client, const char *key)
{
	struct walk wk;

	key_walk(p, key, &wk);
	for (size_t i = 0; i < wk.n; i++)
		if (wk.x[i].holder && wk.x[i].fe == fe &&
		    wk.x[i].client == client)
			return wk.x[i].token;
	return 0;
}

/* Every grant A's clients received names the token both tables show. */
static void
replies_agree(struct world *w, int step)
{
	struct rep *a = w->r[0];

	for (size_t i = 0; i < a->ngot; i++) {
		struct got	*g = &a->got[i];
		struct eowner	*o = eowner_of(a->rp, g->o);
		struct ereq	*q;

		if (g->r.op != BE_LOCK || g->r.err != KL_OK)
			continue;
		ck_assert_ptr_nonnull(o);
		TAILQ_FOREACH(q, &o->reqs, entry)
			if (q->state == REQ_HELD && q->nlive == q->nent)
				for (size_t j = 0; j < q->nent; j++) {
					char key[8];

					snprintf(key, sizeof(key), "%.*s",
					    (int)q->ent[j].lkeylen, q->ent[j].lkey);
					if (token_of(a, FE_A, o->client, key) !=
					    g->r.value)
						continue;	/* another grant */
					ck_assert_msg(token_of(w->r[1], FE_A,
					    o->client, key) == g->r.value,
					    "step %d: A's client %" PRIu64
					    " got token %" PRIu64 " for %s, B's "
					    "INFO says %" PRIu64, step, o->client,
					    g->r.value, key, token_of(w->r[1],
					    FE_A, o->client, key));
					w->grants++;
				}
	}
	a->ngot = 0;
}

/* One transaction: its events to every replica, then the checks. */
static void
w_commit(struct world *w, int step)
{
	for (int i = 0; i < 3; i++)
		if (w->r[i] != NULL && w->nev > 0) {
			replica_events(w->r[i]->rp, w->ev, w->nev, w->rev);
		}
	w->nev = 0;
	tables_agree(w, w->r[0], w->r[1], step);
	if (w->r[2] != NULL)
		tables_agree(w, w->r[0], w->r[2], step);
	replies_agree(w, step);
}

/* The state of the request of an entry in A's replica. */
static enum ereq_state
req_state(struct world *w, const struct ekv *x)
{
	struct replica	*rp = w->r[0]->rp;
	const char	*v = x->value + 3;
	uint64_t	 client = strtoull(v, NULL, 10);
	struct eowner	*o;
	struct ereq	*q;

	if (x->fe == FE_A) {
		TAILQ_FOREACH(o, replica_owners(rp), entry)
			TAILQ_FOREACH(q, &o->reqs, entry)
				if (q->fe == x->fe && q->seq == x->seq)
					return q->state;
		return REQ_GONE;
	}
	if ((o = eowner_get(rp, x->fe, client, false)) == NULL)
		return REQ_GONE;
	TAILQ_FOREACH(q, &o->reqs, entry)
		if (q->seq == x->seq)
			return q->state;
	return REQ_GONE;
}

/* The entries live at revision rev, as a range at rev gives them. */
static size_t
w_range(struct world *w, int64_t rev, struct erange_kv *kvs)
{
	size_t n = 0;

	for (size_t i = 0; i < w->nlog; i++) {
		struct lev *l = &w->log[i];

		if (l->is_delete || l->rev > rev || l->del_rev <= rev)
			continue;
		kvs[n].key = l->kv.key;
		kvs[n].keylen = strlen(l->kv.key);
		kvs[n].value = l->kv.value;
		kvs[n].valuelen = strlen(l->kv.value);
		kvs[n].create_revision = l->rev;
		kvs[n].mod_revision = l->rev;	/* never put again here */
		kvs[n].fe = l->kv.fe;
		kvs[n].seq = l->kv.seq;
		n++;
	}
	return n;
}

/*
 * A replica C rebuilt as a front end does (replica_rebuild_start): the
 * newest range gives the oldest live entry's revision M; the table is
 * built from the range at M - 1 and the watch brings every event from M
 * on again. flat: M - 1 is compacted, and the table is built from the
 * newest range alone (range_flat()), the watch going on from there.
 */
static void
w_rebuild(struct world *w, bool flat)
{
	struct erange_kv	*kvs = calloc(w->nlog + 1, sizeof(*kvs));
	struct etcd_event	*ev = calloc(w->nlog + 1, sizeof(*ev));
	int64_t			 oldest = w->rev;
	size_t			 n = w_range(w, w->rev, kvs), nev = 0;

	ck_assert_ptr_nonnull(kvs);
	ck_assert_ptr_nonnull(ev);
	if (w->r[2] != NULL)
		rep_free(w->r[2]);
	w->r[2] = rep_new(FE_C);
	if (flat) {
		w->r[2]->flat = true;
		replica_build(w->r[2]->rp, kvs, n, w->rev, n == 0);
		free(ev);
		free(kvs);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (kvs[i].create_revision < oldest)
			oldest = kvs[i].create_revision;
	n = w_range(w, oldest - 1, kvs);
	replica_build(w->r[2]->rp, kvs, n, oldest - 1, true);
	for (size_t i = 0; i <= w->nlog; i++) {
		struct lev *l = i < w->nlog ? &w->log[i] : NULL;

		if (nev > 0 && (l == NULL || l->rev != ev[0].kv.mod_revision)) {
			replica_events(w->r[2]->rp, ev, nev,
			    ev[0].kv.mod_revision);
			nev = 0;
		}
		if (l == NULL || l->rev < oldest)
			continue;
		memset(&ev[nev], 0, sizeof(ev[0]));
		ev[nev].is_delete = l->is_delete;
		ev[nev].kv.key = l->kv.key;
		ev[nev].kv.keylen = strlen(l->kv.key);
		if (!l->is_delete) {
			ev[nev].kv.value = l->kv.value;
			ev[nev].kv.valuelen = strlen(l->kv.value);
			ev[nev].kv.version = 1;
			ev[nev].kv.create_revision = l->rev;
		}
		ev[nev].kv.mod_revision = l->rev;
		nev++;
	}
	free(ev);
	free(kvs);
}

/* Forgets the entries no longer live, keeping w->kv small. */
static void
w_compact(struct world *w)
{
	size_t n = 0;

	for (size_t i = 0; i < w->nkv; i++)
		if (w->kv[i].live)
			w->kv[n++] = w->kv[i];
	w->nkv = n;
}

static void
run_stream(uint64_t seed, int steps, bool ours, bool rebuild,
    uint64_t *unknown)
{
	struct world	*w = calloc(1, sizeof(*w));
	uint64_t	 fes[2] = { 0x1f, 0x2f };

	ck_assert_ptr_nonnull(w);
	w->rng = seed | 1;
	w->rev = 100;
	w->seq[0] = 1ULL << 32;
	w->seq[1] = 2ULL << 32;
	w->r[0] = rep_new(FE_A);
	w->r[1] = rep_new(FE_B);
	for (int i = 0; i < OURS; i++)
		ck_assert_ptr_nonnull(w->ours[i] = w->r[0]->be->ops->owner_new(
		    w->r[0]->be, (uint64_t)(i + 1), NULL));
	for (int step = 0; step < steps; step++) {
		uint64_t	 what = rnd(w, 10);
		bool		 refused = false;

		w->rev++;
		/* the owner front end deletes a refused request at once,
		 * before anything else it writes */
		for (size_t i = 0; i < w->nkv; i++)
			if (w->kv[i].live && req_state(w, &w->kv[i]) ==
			    REQ_REFUSED) {
				w_del(w, &w->kv[i]);
				refused = true;
			}
		if (refused) {
			w_commit(w, step);
			w->rev++;
		}
		if (rebuild && what == 0) {
			w_rebuild(w, rnd(w, 2) == 0);
			tables_agree(w, w->r[0], w->r[2], step);
			continue;
		}
		if (what <= 3) {
			/* one front end's group commit: 1-3 LOCKs */
			int fi = (int)rnd(w, 2), nl = 1 + (int)rnd(w, 3);

			for (int i = 0; i < nl && w->nev < 50; i++)
				w_lock(w, rnd(w, 3) == 0 ? FE_S : fes[fi], fi);
		} else if (what == 4 && ours) {
			w_lock_ours(w, (int)rnd(w, OURS));
		} else if (what <= 7 && w->nkv > 0) {
			/* a release or withdrawal: one request's entries, or
			 * an UNLOCK of one of its keys */
			struct ekv *x = &w->kv[rnd(w, w->nkv)];

			if (rnd(w, 3) == 0 && req_state(w, x) == REQ_HELD)
				w_del(w, x);	/* UNLOCK of one key, or its ttl */
			else
				for (size_t i = 0; i < w->nkv; i++)
					if (w->kv[i].fe == x->fe &&
					    w->kv[i].seq == x->seq)
						w_del(w, &w->kv[i]);
		} else if (what == 8) {
			/* a lease expires: all of one front end's entries */
			uint64_t fe = rnd(w, 3) == 0 && ours ? FE_A :
			    rnd(w, 3) == 0 ? FE_S : fes[rnd(w, 2)];

			for (size_t i = 0; i < w->nkv; i++)
				if (w->kv[i].fe == fe)
					w_del(w, &w->kv[i]);
		}
		w_commit(w, step);
		w_compact(w);
	}
	ck_assert_uint_gt(w->rev, 100);
	if (ours)
		ck_assert_uint_gt(w->grants, 0);
	if (unknown != NULL) {
		unknown[0] += w->unknown;
		unknown[1] += w->known;
	}
	for (int i = 0; i < OURS; i++)
		w->r[0]->be->ops->owner_free(w->r[0]->be, w->ours[i],
		    kl_now_ms());
	for (int i = 0; i < 3; i++)
		if (w->r[i] != NULL)
			rep_free(w->r[i]);
	free(w->log);
	free(w);
}

START_TEST(two_replicas_agree_on_every_foreign_event)
{
	for (uint64_t seed = 1; seed <= 20; seed++)
		run_stream(seed * 0x9e3779b97f4a7c15ULL, 400, false, false,
		    NULL);
}
END_TEST

START_TEST(a_client_token_is_the_one_every_replica_shows)
{
	for (uint64_t seed = 1; seed <= 20; seed++)
		run_stream(seed * 0x2545f4914f6cdd1dULL, 400, true, false,
		    NULL);
}
END_TEST

/* ... also one built from the newest range alone (a compacted history):
 * for every hold it reports the token its client received or 0 (not
 * known there), and it knows the token of the grants it applies after
 * its build. */
START_TEST(a_rebuilt_replica_agrees_on_grants_and_queues)
{
	uint64_t n[2] = { 0, 0 };

	for (uint64_t seed = 1; seed <= 20; seed++)
		run_stream(seed * 0xd1342543de82ef95ULL, 400, true, true, n);
	ck_assert_uint_gt(n[0], 0);
	ck_assert_uint_gt(n[1], 0);
	fprintf(stderr, "replicas built from a compacted history: %" PRIu64
	    " holds shown with token 0 (not known there), %" PRIu64 " with "
	    "the token every replica shows\n", n[0], n[1]);
}
END_TEST

/*
 * The lease is lost while memory has run out: every client of ours that
 * holds or waits is still dropped (hooks.drop), none left believing it
 * holds a lock etcd has released.
 */
START_TEST(losing_the_lease_drops_every_client_without_memory)
{
	struct world	*w = calloc(1, sizeof(*w));
	struct rep	*a;

	ck_assert_ptr_nonnull(w);
	w->rng = 7;
	w->rev = 100;
	w->r[0] = a = rep_new(FE_A);
	w->r[1] = rep_new(FE_B);
	for (int i = 0; i < OURS; i++)
		ck_assert_ptr_nonnull(w->ours[i] = a->be->ops->owner_new(
		    a->be, (uint64_t)(i + 1), NULL));
	for (int i = 0; i < OURS; i++) {
		w->rev++;
		w_lock_ours(w, i);
		w_commit(w, i);
	}
	for (int i = 0; i < OURS; i++)
		ck_assert(!TAILQ_EMPTY(&eowner_of(a->rp, w->ours[i])->reqs));
	kl_alloc_fail_at(1, true);
	ebe_lose(a->e, "test: the lease is gone");
	kl_alloc_fail_at(0, false);
	ck_assert(ebe_lost(a->e));
	ck_assert_uint_eq(a->count.losses, 1);
	ck_assert_uint_eq(a->ndropped, OURS);
	for (int i = 0; i < OURS; i++)
		ck_assert_ptr_eq(a->dropped[i], w->ours[i]);
	for (int i = 0; i < OURS; i++)
		a->be->ops->owner_free(a->be, w->ours[i], kl_now_ms());
	rep_free(w->r[0]);
	rep_free(w->r[1]);
	free(w->log);
	free(w);
}
END_TEST

/* One put of key (prefix t/q/LKEY/FE-SEQ) with value, as the watch
 * brings it, at revision rev. */
static void
put_one(struct rep *p, const char *lkey, size_t lkeylen, uint64_t seq,
    const char *value, size_t valuelen, int64_t rev)
{
	char			key[512];
	struct etcd_event	ev;
	int			n;

	n = snprintf(key, sizeof(key), "t/q/%.*s/%016" PRIx64 "-%016" PRIx64,
	    (int)lkeylen, lkey, (uint64_t)FE_B, seq);
	ck_assert_int_lt(n, (int)sizeof(key));
	memset(&ev, 0, sizeof(ev));
	ev.kv.key = key;
	ev.kv.keylen = (size_t)n;
	ev.kv.value = value;
	ev.kv.valuelen = valuelen;
	ev.kv.version = 1;
	ev.kv.create_revision = ev.kv.mod_revision = rev;
	replica_events(p->rp, &ev, 1, rev);
}

static size_t
holders(struct rep *p, const char *key, size_t len)
{
	const struct locktable	*lt = replica_table(p->rp);
	const struct lt_key	*k = locktable_find(lt, key, len);
	struct walk		 wk;

	if (k == NULL)
		return 0;
	memset(&wk, 0, sizeof(wk));
	wk.p = p;
	locktable_key_walk(lt, k, kl_now_ms(), walk_holder,
	    walk_waiter, &wk);
	return wk.n;
}

/*
 * Entries read back from etcd are checked as a client's LOCK is (issue
 * 24, review L8): one that breaks a rule (a key against the key rules,
 * an option out of its bounds, a client id 0, fewer or more keys than it
 * says, its own key not among them, a control byte in its name) is left
 * out of the table with a warning, and a good one after it is taken.
 */
START_TEST(entries_against_the_rules_are_left_out)
{
	static const struct {
		const char	*lkey;	/* NULL: the value's first key */
		const char	*value;
	} bad[] = {
		{ NULL, "k1 1 x 1 -1 0 0 1 \x01ctl\nname" },
		{ NULL, "k1 1 x 1 -1 0 0 1 bad\xff\xfeutf8\nname" },
		{ NULL, "k1 1 x 1 -1 0 0 1 \nname" },
		{ NULL, "k1 0 x 1 -1 0 0 1 a\nname" },
		{ NULL, "k1 1 z 1 -1 0 0 1 a\nname" },
		{ NULL, "k1 1 x 0 -1 0 0 1 a\nname" },
		{ NULL, "k1 1 x 2000000000 -1 0 0 1 a\nname" },
		{ NULL, "k1 1 s 2 -1 0 0 1 a\nname" },
		{ NULL, "k1 1 x 1 -2 0 0 1 a\nname" },
		{ NULL, "k1 1 x 1 2000000000 0 0 1 a\nname" },
		{ NULL, "k1 1 x 1 -1 2 0 1 a\nname" },
		{ NULL, "k1 1 x 1 -1 0 2000000000 1 a\nname" },
		{ NULL, "k1 1 x 1 -1 0 0 2 a\nname" },
		{ NULL, "k1 1 x 1 -1 0 0 1 a b\nname" },
		{ "a", "k1 1 x 1 -1 0 0 0\nname" },
		{ NULL, "k1 1 x 1 -1 0 0 1 a\nna\x1bme" },
		{ "other", "k1 1 x 1 -1 0 0 1 a\nname" },
		{ NULL, "k9 1 x 1 -1 0 0 1 a\nname" },
		{ NULL, "k1 1 x 1 -1 0 0 1 a" },	/* no name: good */
	};
	struct rep	*p = rep_new(FE_A);
	char		 value[1024], longkey[300];
	int64_t		 rev = 10;
	uint64_t	 seq = 1;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char	*v = bad[i].value, *k = bad[i].lkey;
		size_t		 klen;
		bool		 good = i == sizeof(bad) / sizeof(bad[0]) - 1;

		if (k == NULL) {	/* the value's first key */
			const char *sp = v;

			for (int f = 0; f < 8 && sp != NULL; f++)
				sp = strchr(sp + 1, ' ');
			ck_assert_ptr_nonnull(sp);
			k = sp + 1;
			klen = strcspn(k, " \n");
		} else
			klen = strlen(k);
		put_one(p, k, klen, seq++, v, strlen(v), rev++);
		ck_assert_msg(p->count.bad_entries == (good ? i : i + 1),
		    "entry %zu (%s): bad_entries %" PRIu64, i, v,
		    p->count.bad_entries);
		ck_assert_msg(holders(p, k, klen) == (good ? 1 : 0),
		    "entry %zu (%s) in the table", i, v);
	}
	/* a key over KL_KEY_MAX bytes */
	memset(longkey, 'k', sizeof(longkey));
	snprintf(value, sizeof(value), "k1 1 x 1 -1 0 0 1 %.*s\nname",
	    (int)sizeof(longkey), longkey);
	put_one(p, longkey, sizeof(longkey), seq++, value, strlen(value),
	    rev++);
	ck_assert_uint_eq(holders(p, longkey, sizeof(longkey)), 0);
	ck_assert_uint_eq(p->count.bad_entries, sizeof(bad) / sizeof(bad[0]));
	rep_free(p);
}
END_TEST

#define SESS_L		0x5e55
#define SESS_L_HEX	"0000000000005e55"
#define SESS_HASH	"5e55f00d5e55f00d5e55f00d5e55f00d" \
			"5e55f00d5e55f00d5e55f00d5e55f00d"

/* The grants and waits of owner lo (a key at most each) in p's replies
 * so far: how many BE_LOCK results it got, the last one in *r. */
static size_t
replies_of(struct rep *p, struct lt_owner *lo, struct be_result *r)
{
	size_t n = 0;

	for (size_t i = 0; i < p->ngot; i++)
		if (p->got[i].o == lo && p->got[i].r.op == BE_LOCK) {
			*r = p->got[i].r;
			n++;
		}
	return n;
}

/* The record event P s/H naming front end fe, under the session's lease. */
static void
w_record(struct world *w, uint64_t client, uint64_t fe)
{
	static char	key[] = "t/s/" SESS_HASH;
	static char	value[96];
	int		n = snprintf(value, sizeof(value), "s1 %" PRIu64 " 5000 "
			    "%016" PRIx64, client, fe);

	memset(&w->ev[w->nev], 0, sizeof(w->ev[0]));
	w->ev[w->nev].kv.key = key;
	w->ev[w->nev].kv.keylen = strlen(key);
	w->ev[w->nev].kv.value = value;
	w->ev[w->nev].kv.valuelen = (size_t)n;
	w->ev[w->nev].kv.version = 2;
	w->ev[w->nev].kv.create_revision = 50;
	w->ev[w->nev].kv.mod_revision = w->rev;
	w->ev[w->nev].kv.lease = SESS_L;
	w->nev++;
}

/*
 * keylockd-protocol(7), SESSIONS: Across front ends. A session's owner
 * on A holds one key and waits for another behind a third front end's
 * hold; its record, put again naming B (a RESUME through B), moves it: on
 * A it becomes another front end's, with nothing released and its
 * connection told to go (hooks.moved); on B it becomes the resuming
 * client's, with the grant it had (the token A's client received) and the
 * wait, whose grant B alone answers, once, when the third front end
 * releases; a channel of the session's connection (its grant under the
 * session's lease, named by the session's client id and its channel on
 * every replica) moves with it. Both tables agree at every step.
 */
/* The events of the transaction being built, to A and B; then they
 * must agree. */
static void
w_apply(struct world *w, int step)
{
	for (int i = 0; i < 2; i++)
		replica_events(w->r[i]->rp, w->ev, w->nev, w->rev);
	w->nev = 0;
	tables_agree(w, w->r[0], w->r[1], step);
}

START_TEST(a_session_moves_from_one_replica_to_another)
{
	static int		 conn_a, conn_b, conn_ch;	/* the daemon's */
	struct world		*w = calloc(1, sizeof(*w));
	struct rep		*a, *b;
	struct lt_owner		*lo, *req, *lo_b, *ch, *ch_b;
	struct eowner		*o;
	struct ereq		*q;
	struct lt_acquire	 acq;
	struct be_result	 r, got;
	const char		*keys[1], *text = NULL, *name;
	size_t			 keylens[1] = { 2 }, foreign;
	uint64_t		 t0, tc, x, fe, client;
	uint32_t		 chan;
	static const char	 late_key[] = "t/q/k3/" SESS_L_HEX
				    "-7fff000000000001";
	static const char	 late_value[] = "k1 4611686018427387999 x 1 "
				    "-1 0 0 1 k3 @4:7\n";

	ck_assert_ptr_nonnull(w);
	w->rng = 11;
	w->rev = 100;
	w->r[0] = a = rep_new(FE_A);
	w->r[1] = b = rep_new(FE_B);
	ck_assert_ptr_nonnull(lo = a->be->ops->owner_new(a->be, 7, &conn_a));
	ebe_assume_session(a->e, lo, SESS_HASH, SESS_L, 5000, ++w->rev);
	/* a third front end holds k1 */
	w->rev++;
	foreign = w->nkv;
	w_put(w, "t/q/k1/000000000000001f-0000000000000001", 40,
	    "k1 3 x 1 -1 0 0 1 k1\nname", 25, 0x1f, 1);
	w_apply(w, 0);
	/* the session's client on A: LOCK k0 (granted), LOCK k1 (waits),
	 * each written under the session's lease */
	memset(&acq, 0, sizeof(acq));
	acq.keys = keys;
	acq.keylens = keylens;
	acq.nkeys = 1;
	acq.mode = LT_EXCLUSIVE;
	acq.limit = 1;
	acq.max_waiters = -1;
	for (int k = 0; k < 2; k++) {
		keys[0] = keyname[k];
		ck_assert_int_eq(a->be->ops->acquire(a->be, lo, &acq,
		    kl_now_ms(), &r), BE_PENDING);
		ck_assert_ptr_nonnull(q = eowner_of(a->rp, lo)->open);
		ck_assert_uint_eq(q->fe, SESS_L);
		w->rev++;
		w_put(w, q->ent[0].ekey, q->ent[0].ekeylen, q->value,
		    q->valuelen, q->fe, q->seq);
		w_apply(w, 1 + k);
	}
	ck_assert_uint_eq(replies_of(a, lo, &got), 1);
	ck_assert_int_eq(got.err, KL_OK);
	t0 = got.value;
	ck_assert(locktable_owner_is_waiting(lo));
	ck_assert_uint_eq(token_of(a, SESS_L, 7, "k0"), t0);
	ck_assert_uint_eq(token_of(b, SESS_L, 7, "k0"), t0);

	/* channel 3 of the session's connection (a client id of its own,
	 * 8, from the daemon): its LOCK k2, under the session's lease,
	 * names the channel and the session's client */
	ck_assert_ptr_nonnull(ch = a->be->ops->owner_new(a->be, 8, &conn_ch));
	ck_assert_int_eq(a->be->ops->session_channel(a->be, lo, ch, 3,
	    &text), KL_OK);
	keys[0] = keyname[2];
	ck_assert_int_eq(a->be->ops->acquire(a->be, ch, &acq, kl_now_ms(),
	    &r), BE_PENDING);
	ck_assert_ptr_nonnull(q = eowner_of(a->rp, ch)->open);
	ck_assert_uint_eq(q->fe, SESS_L);
	x = eowner_of(a->rp, ch)->client;
	ck_assert_uint_eq(x & EBE_CHAN_CLIENT, EBE_CHAN_CLIENT);
	ck_assert_ptr_nonnull(memmem(q->value, q->valuelen, " @3:7\n", 6));
	w->rev++;
	w_put(w, q->ent[0].ekey, q->ent[0].ekeylen, q->value, q->valuelen,
	    q->fe, q->seq);
	w_apply(w, 3);
	ck_assert_uint_eq(replies_of(a, ch, &got), 1);
	ck_assert_int_eq(got.err, KL_OK);
	tc = got.value;
	ck_assert_uint_eq(token_of(b, SESS_L, x, "k2"), tc);
	/* B names it as A does: the session's client id, the channel */
	ck_assert_ptr_nonnull(o = eowner_get(b->rp, SESS_L, x, false));
	client = 0;
	b->be->ops->owner_about(b->be, o->lo, &name, &fe, &client, &chan);
	ck_assert_uint_eq(client, 7);
	ck_assert_uint_eq(chan, 3);
	ck_assert_uint_eq(fe, SESS_L);
	a->ngot = 0;

	/* RESUME through B: its record put again, naming B */
	ck_assert_ptr_nonnull(req = b->be->ops->owner_new(b->be, 50,
	    &conn_b));
	ebe_assume_resume(b->e, req, SESS_HASH, SESS_L, 7, 5000, w->rev);
	w->rev++;
	w_record(w, 7, FE_B);
	w_apply(w, 3);
	/* A: the session moved; nothing released, its connection to go */
	ck_assert_uint_eq(a->nmoved, 1);
	ck_assert_ptr_eq(a->moved[0], lo);
	ck_assert_ptr_nonnull(o = eowner_get(a->rp, SESS_L, 7, false));
	ck_assert_int_eq(o->state, OWN_THEIRS);
	ck_assert_ptr_null(locktable_owner_udata(o->lo));
	ck_assert_uint_eq(a->ndropped, 0);
	/* B: the RESUME hands over the owner, with its grant and wait */
	ck_assert_uint_eq(b->ngot, 1);
	ck_assert_ptr_eq(b->got[0].o, req);
	r = b->got[0].r;
	ck_assert_int_eq(r.op, BE_RESUME);
	ck_assert_int_eq(r.err, KL_OK);
	ck_assert_uint_eq(r.value, 7);
	ck_assert_uint_eq(r.grace_ms, 5000);
	ck_assert_ptr_nonnull(lo_b = r.owner);
	ck_assert_ptr_nonnull(o = eowner_of(b->rp, lo_b));
	ck_assert_int_eq(o->state, OWN_LOCK);
	ck_assert_ptr_nonnull(o->open);
	ck_assert(locktable_owner_is_waiting(lo_b));
	ck_assert_uint_eq(token_of(b, SESS_L, 7, "k0"), t0);
	ck_assert_ptr_nonnull(eentry_held(b->rp, o, "k0", 2));
	/* and its channel, with its grant */
	ck_assert_uint_eq(r.nchans, 1);
	ck_assert_uint_eq(r.chans[0].n, 3);
	ck_assert_ptr_nonnull(ch_b = r.chans[0].owner);
	ck_assert_ptr_nonnull(o = eowner_of(b->rp, ch_b));
	ck_assert_int_eq(o->state, OWN_IDLE);
	ck_assert_uint_eq(o->client, x);
	ck_assert_ptr_nonnull(eentry_held(b->rp, o, "k2", 2));
	ck_assert_uint_eq(token_of(b, SESS_L, x, "k2"), tc);
	/* on A, another front end's now, nothing released */
	ck_assert_ptr_nonnull(o = eowner_get(a->rp, SESS_L, x, false));
	ck_assert_int_eq(o->state, OWN_THEIRS);
	ck_assert_ptr_null(locktable_owner_udata(o->lo));
	ck_assert_uint_eq(token_of(a, SESS_L, x, "k2"), tc);
	b->ngot = 0;
	/* a channel A named after the move, its LOCK landing late: B,
	 * where the session's channel 0 is ours now, deletes it; A leaves
	 * it to B */
	w->rev++;
	w_put(w, late_key, strlen(late_key), late_value, strlen(late_value),
	    SESS_L, 0x7fff000000000001);
	w_apply(w, 4);
	ck_assert_ptr_nonnull(o = eowner_get(b->rp, SESS_L,
	    4611686018427387999ULL, false));
	ck_assert_uint_eq(o->chan, 4);
	q = TAILQ_FIRST(&o->reqs);
	ck_assert_ptr_nonnull(q);
	ck_assert_int_eq(q->side, SIDE_ENDED);
	ck_assert_int_ge(q->ent[0].w, W_DEL_WAIT);
	ck_assert_ptr_nonnull(o = eowner_get(a->rp, SESS_L,
	    4611686018427387999ULL, false));
	ck_assert_int_eq(TAILQ_FIRST(&o->reqs)->side, SIDE_THEIRS);
	/* what the daemon does with the RESUME's connection's own owner */
	locktable_owner_set_udata(lo_b, &conn_b);
	b->be->ops->owner_free(b->be, req, kl_now_ms());

	/* the third front end releases k1: B answers the wait, once */
	w->rev++;
	w_del(w, &w->kv[foreign]);
	w_apply(w, 4);
	ck_assert_uint_eq(a->ngot, 0);
	ck_assert_uint_eq(replies_of(b, lo_b, &got), 1);
	ck_assert_int_eq(got.err, KL_OK);
	ck_assert_uint_eq(token_of(a, SESS_L, 7, "k1"), got.value);
	ck_assert_uint_eq(token_of(b, SESS_L, 7, "k1"), got.value);
	ck_assert_uint_gt(got.value, t0);
	ck_assert_uint_eq(b->ngot, 1);

	b->be->ops->owner_free(b->be, lo_b, kl_now_ms());
	b->be->ops->owner_free(b->be, ch_b, kl_now_ms());
	rep_free(a);
	rep_free(b);
	free(w->log);
	free(w);
}
END_TEST

/*
 * SESSION after LOCKs (keylockd-protocol(7), SESSIONS: the session
 * covers the locks the connection already holds): the record and the
 * held entry put again under the session's lease L in one transaction
 * (same key, same value). On every replica the owner is then named by L,
 * the token stays the one the client received, and a RESUME through B
 * finds the grant under the session.
 */
START_TEST(a_session_after_a_lock_keeps_its_token)
{
	static int		 conn_a, conn_b, conn_ch;	/* the daemon's */
	struct world		*w = calloc(1, sizeof(*w));
	struct rep		*a, *b;
	struct lt_owner		*lo, *req, *lo_b, *ch;
	struct eowner		*o;
	struct ereq		*q;
	struct lt_acquire	 acq;
	struct be_result	 r, got;
	const char		*keys[1] = { "k0" };
	size_t			 keylens[1] = { 2 };
	uint64_t		 t0, t1;
	struct etcd_event	*ev;
	char			 chval[160];
	const char		*nl;

	ck_assert_ptr_nonnull(w);
	w->rng = 13;
	w->rev = 100;
	w->r[0] = a = rep_new(FE_A);
	w->r[1] = b = rep_new(FE_B);
	ck_assert_ptr_nonnull(lo = a->be->ops->owner_new(a->be, 7, &conn_a));
	memset(&acq, 0, sizeof(acq));
	acq.keys = keys;
	acq.keylens = keylens;
	acq.nkeys = 1;
	acq.mode = LT_EXCLUSIVE;
	acq.limit = 1;
	acq.max_waiters = -1;
	ck_assert_int_eq(a->be->ops->acquire(a->be, lo, &acq, kl_now_ms(),
	    &r), BE_PENDING);
	ck_assert_ptr_nonnull(q = eowner_of(a->rp, lo)->open);
	ck_assert_uint_eq(q->fe, FE_A);
	w->rev++;
	w_put(w, q->ent[0].ekey, q->ent[0].ekeylen, q->value, q->valuelen,
	    q->fe, q->seq);
	w_apply(w, 1);
	ck_assert_uint_eq(replies_of(a, lo, &got), 1);
	ck_assert_int_eq(got.err, KL_OK);
	t0 = got.value;
	ck_assert_uint_eq(token_of(b, FE_A, 7, "k0"), t0);
	/* channel 3 of the same connection (its owner id 8) holds k1 */
	ck_assert_ptr_nonnull(ch = a->be->ops->owner_new(a->be, 8, &conn_ch));
	keys[0] = "k1";
	ck_assert_int_eq(a->be->ops->acquire(a->be, ch, &acq, kl_now_ms(),
	    &r), BE_PENDING);
	ck_assert_ptr_nonnull(q = eowner_of(a->rp, ch)->open);
	w->rev++;
	w_put(w, q->ent[0].ekey, q->ent[0].ekeylen, q->value, q->valuelen,
	    q->fe, q->seq);
	w_apply(w, 1);
	ck_assert_uint_eq(replies_of(a, ch, &got), 1);
	t1 = got.value;
	a->ngot = 0;

	/* SESSION: the record and the entries again, under L, at one
	 * revision, the channel's naming it; A's own owners are renamed
	 * when it is answered */
	ebe_assume_session(a->e, lo, SESS_HASH, SESS_L, 5000, ++w->rev);
	eowner_set_channel(a->rp, eowner_of(a->rp, ch), SESS_L, 8, 3, 7);
	w_record(w, 7, FE_A);
	nl = strchr(w->kv[1].value, '\n');
	ck_assert_ptr_nonnull(nl);
	snprintf(chval, sizeof(chval), "%.*s @3:7%s",
	    (int)(nl - w->kv[1].value), w->kv[1].value, nl);
	ev = &w->ev[w->nev++];
	memset(ev, 0, sizeof(*ev));
	ev->kv.key = w->kv[1].key;
	ev->kv.keylen = strlen(w->kv[1].key);
	ev->kv.value = chval;
	ev->kv.valuelen = strlen(chval);
	ev->kv.version = 2;
	ev->kv.create_revision = w->kv[1].crev;
	ev->kv.mod_revision = w->rev;
	ev->kv.lease = SESS_L;
	ev = &w->ev[w->nev++];
	memset(ev, 0, sizeof(*ev));
	ev->kv.key = w->kv[0].key;
	ev->kv.keylen = strlen(w->kv[0].key);
	ev->kv.value = w->kv[0].value;
	ev->kv.valuelen = strlen(w->kv[0].value);
	ev->kv.version = 2;
	ev->kv.create_revision = w->kv[0].crev;
	ev->kv.mod_revision = w->rev;
	ev->kv.lease = SESS_L;
	w_apply(w, 2);
	ck_assert_uint_eq(a->ngot, 0);
	ck_assert_uint_eq(token_of(a, SESS_L, 7, "k0"), t0);
	ck_assert_uint_eq(token_of(b, SESS_L, 7, "k0"), t0);
	ck_assert_ptr_null(eowner_get(b->rp, FE_A, 7, false));
	ck_assert_ptr_nonnull(o = eowner_get(b->rp, SESS_L, 7, false));
	ck_assert_int_eq(o->state, OWN_THEIRS);
	/* the channel: named (L, 8), channel 3 of client 7, its token */
	ck_assert_ptr_null(eowner_get(b->rp, FE_A, 8, false));
	ck_assert_ptr_nonnull(o = eowner_get(b->rp, SESS_L, 8, false));
	ck_assert_uint_eq(o->chan, 3);
	ck_assert_uint_eq(o->sclient, 7);
	ck_assert_uint_eq(token_of(b, SESS_L, 8, "k1"), t1);
	ck_assert_uint_eq(token_of(a, SESS_L, 8, "k1"), t1);

	/* RESUME through B: the grant, with its token */
	ck_assert_ptr_nonnull(req = b->be->ops->owner_new(b->be, 50,
	    &conn_b));
	ebe_assume_resume(b->e, req, SESS_HASH, SESS_L, 7, 5000, w->rev);
	w->rev++;
	w_record(w, 7, FE_B);
	w_apply(w, 3);
	ck_assert_uint_eq(a->nmoved, 1);
	ck_assert_uint_eq(b->ngot, 1);
	r = b->got[0].r;
	ck_assert_int_eq(r.op, BE_RESUME);
	ck_assert_int_eq(r.err, KL_OK);
	ck_assert_ptr_nonnull(lo_b = r.owner);
	ck_assert_ptr_nonnull(o = eowner_of(b->rp, lo_b));
	ck_assert_ptr_nonnull(eentry_held(b->rp, o, "k0", 2));
	ck_assert_uint_eq(token_of(b, SESS_L, 7, "k0"), t0);
	ck_assert_uint_eq(token_of(a, SESS_L, 7, "k0"), t0);
	ck_assert_uint_eq(r.nchans, 1);
	ck_assert_uint_eq(r.chans[0].n, 3);
	ck_assert_ptr_nonnull(o = eowner_of(b->rp, r.chans[0].owner));
	ck_assert_ptr_nonnull(eentry_held(b->rp, o, "k1", 2));
	ck_assert_uint_eq(token_of(b, SESS_L, 8, "k1"), t1);
	locktable_owner_set_udata(lo_b, &conn_b);
	b->be->ops->owner_free(b->be, req, kl_now_ms());
	b->be->ops->owner_free(b->be, lo_b, kl_now_ms());
	b->be->ops->owner_free(b->be, r.chans[0].owner, kl_now_ms());
	rep_free(a);
	rep_free(b);
	free(w->log);
	free(w);
}
END_TEST

/* A session's record: this version's (detached time, user, NAME), the
 * one before (no time, no NAME), and what is refused. */
START_TEST(session_records_decode)
{
	static const struct {
		const char	*v;
		const char	*user, *name;
		uint64_t	 detached;
		bool		 ok;
	} c[] = {
		{ "s2 7 10000 00000000000000ab 0", NULL, NULL, 0, true },
		{ "s2 7 10000 00000000000000ab 1764940000123 alice\nbilling",
		    "alice", "billing", 1764940000123ULL, true },
		{ "s2 7 10000 00000000000000ab 5\nbilling", NULL, "billing",
		    5, true },
		{ "s2 7 10000 00000000000000ab 0 alice", "alice", NULL, 0,
		    true },
		{ "s1 7 10000 00000000000000ab alice", "alice", NULL, 0,
		    true },
		{ "s1 7 10000 00000000000000ab", NULL, NULL, 0, true },
		{ "s2 7 10000 00000000000000ab", NULL, NULL, 0, false },
		{ "s2 7 10000 00000000000000ab x", NULL, NULL, 0, false },
		{ "s2 7 10000 00000000000000ab 0 a b", NULL, NULL, 0, false },
		{ "s2 7 10000 00000000000000ab 0\nbill ing", NULL, NULL, 0,
		    false },
		{ "s2 7 10000 00000000000000ab 0\nbill\x01", NULL, NULL, 0,
		    false },
		{ "s3 7 10000 00000000000000ab 0", NULL, NULL, 0, false },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct erecord	 rec;
		const char	*why = ebe_record_decode(c[i].v, strlen(c[i].v),
				    &rec);

		ck_assert_msg((why == NULL) == c[i].ok, "%zu: %s", i,
		    why != NULL ? why : "accepted");
		if (!c[i].ok)
			continue;
		ck_assert_uint_eq(rec.client, 7);
		ck_assert_uint_eq(rec.grace_ms, 10000);
		ck_assert_uint_eq(rec.fe, 0xab);
		ck_assert_uint_eq(rec.detached_at, c[i].detached);
		ck_assert_msg(c[i].user == NULL ? rec.user == NULL :
		    rec.userlen == strlen(c[i].user) && memcmp(rec.user,
		    c[i].user, rec.userlen) == 0, "%zu: user", i);
		ck_assert_msg(c[i].name == NULL ? rec.name == NULL :
		    rec.namelen == strlen(c[i].name) && memcmp(rec.name,
		    c[i].name, rec.namelen) == 0, "%zu: name", i);
	}
}
END_TEST

/*
 * keylockd-protocol(7), SESSIONS: Across front ends: a session's hold and
 * wait whose front end is dead end at their ttl and deadline. A replica
 * alone (hooks of the test's, the reap margin 100 ms), B, applies
 * another front end's session (lease SESS_L): client 7 holds k0 with
 * ttl=150 ms, client 8 waits for k0 with timeout=150 ms; and a plain
 * connection's hold of k1 with ttl=150 ms (front end C). Its REFRESH
 * (k0 put again, r=300) restarts the hold's ttl here. hooks.reap is
 * asked for the wait at its deadline + the margin, for the hold at the
 * REFRESH + 300 + the margin, each with the mod revision this replica
 * applied, never earlier; for the plain connection's once (the hook here
 * declines it, as backend etcd does when it has nothing to delete, and
 * it is not asked again); once the deletes are applied, nothing more.
 */
struct reaped {
	uint64_t	client;
	bool		hold;		/* a hold (x), or a wait */
	int64_t		mrev;
	uint64_t	at_ms;
};

struct reap_test {
	struct reaped	got[16];
	size_t		n;
};

static void	rt_answer(void *arg, struct ereq *r,
		    const struct be_result *res) { }
static void	rt_queued(void *arg, struct ereq *r) { }
static void	rt_del(void *arg, struct ereq *r, struct eentry *x) { }
static void	rt_deleted(void *arg, struct eentry *x) { }
static void	rt_built(void *arg, int64_t rev) { }
static void	rt_heartbeat(void *arg, int64_t rev) { }
static void	rt_record(void *arg, const char *hash,
		    const struct erecord *rec, int64_t rev) { }
static bool	rt_safe(void *arg) { return true; }
static void	rt_lose(void *arg, const char *why) { ck_abort_msg("%s", why); }
static void	rt_end_turn(void *arg) { }

static bool
rt_reap(void *arg, struct ereq *r, struct eentry *x)
{
	struct reap_test *t = arg;

	ck_assert_uint_lt(t->n, 16);
	t->got[t->n].client = r->owner->client;
	t->got[t->n].hold = x != NULL;
	t->got[t->n].mrev = x != NULL ? x->mrev : r->ent[0].mrev;
	t->got[t->n].at_ms = kl_now_ms();
	t->n++;
	return r->owner->fe == SESS_L;	/* a session's */
}

static void
rt_event(struct etcd_event *ev, const char *key, const char *value,
    int64_t crev, int64_t mrev, int64_t version, int64_t lease)
{
	memset(ev, 0, sizeof(*ev));
	ev->is_delete = value == NULL;
	ev->kv.key = key;
	ev->kv.keylen = strlen(key);
	ev->kv.value = value;
	ev->kv.valuelen = value != NULL ? strlen(value) : 0;
	ev->kv.create_revision = crev;
	ev->kv.mod_revision = mrev;
	ev->kv.version = version;
	ev->kv.lease = lease;
}

static void
rt_run(struct event_base *base, uint64_t until_ms)
{
	uint64_t	now = kl_now_ms();
	struct timeval	tv = { 0, 0 };

	if (until_ms > now) {
		tv.tv_sec = (time_t)((until_ms - now) / 1000);
		tv.tv_usec = (suseconds_t)((until_ms - now) % 1000) * 1000;
	}
	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

static const struct reaped *
rt_find(const struct reap_test *t, uint64_t client, size_t *count)
{
	const struct reaped *first = NULL;

	*count = 0;
	for (size_t i = 0; i < t->n; i++)
		if (t->got[i].client == client) {
			if (first == NULL)
				first = &t->got[i];
			(*count)++;
		}
	return first;
}

START_TEST(a_dead_session_hold_and_wait_are_reaped)
{
	static const char	 k0[] = "t/q/k0/" SESS_L_HEX "-0000000000000001";
	static const char	 w0[] = "t/q/k0/" SESS_L_HEX "-0000000000000002";
	static const char	 k1[] = "t/q/k1/00000000000000c0-0000000000000001";
	struct reap_test	 t;
	struct replica_hooks	 h = { rt_answer, rt_queued, rt_del,
	    rt_deleted, rt_built, rt_heartbeat, rt_record, NULL, rt_reap, NULL,
	    rt_safe, rt_lose, rt_lose, rt_end_turn, &t };
	struct be_counters	 count;
	struct event_base	*base = rt_base_new();
	struct replica		*rp;
	struct etcd_event	 ev[3];
	const struct reaped	*g;
	uint64_t		 t0, refreshed;
	size_t			 n;

	memset(&t, 0, sizeof(t));
	memset(&count, 0, sizeof(count));
	ck_assert_ptr_nonnull(base);
	ck_assert_ptr_nonnull(rp = replica_new(base, NULL, "t/", &count, &h));
	replica_set_fe(rp, FE_B);
	replica_set_reap(rp, 100);
	t0 = kl_now_ms();
	rt_event(&ev[0], k0, "k1 7 x 1 -1 0 0 1 k0 t=150\n", 10, 10, 1,
	    SESS_L);
	rt_event(&ev[1], k1, "k1 3 x 1 -1 0 0 1 k1 t=150\n", 10, 10, 1,
	    FE_C);
	replica_events(rp, ev, 2, 10);
	rt_event(&ev[0], w0, "k1 8 x 1 -1 0 0 1 k0 w=150\n", 11, 11, 1,
	    SESS_L);
	replica_events(rp, ev, 1, 11);
	ck_assert_uint_eq(locktable_counters(replica_table(rp))->waiting, 1);
	/* the session's REFRESH of k0, 50 ms on */
	rt_run(base, t0 + 50);
	ck_assert_uint_eq(t.n, 0);
	refreshed = kl_now_ms();
	rt_event(&ev[0], k0, "k1 7 x 1 -1 0 0 1 k0 t=150 r=300\n", 10, 12, 2,
	    SESS_L);
	replica_events(rp, ev, 1, 12);

	/* nothing before a deadline and the margin (the loop may wake
	 * late on a busy machine, and the reaps due then come with it) */
	rt_run(base, t0 + 240);
	for (size_t i = 0; i < t.n; i++)
		ck_assert_msg(t.got[i].at_ms >= t0 + 250, "a reap %" PRIu64
		    " ms in, before 250", t.got[i].at_ms - t0);
	/* the wait, and the plain connection's (declined: not asked again) */
	rt_run(base, refreshed + 380);
	g = rt_find(&t, 8, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert(!g->hold);
	ck_assert_int_eq(g->mrev, 11);
	ck_assert_uint_ge(g->at_ms, t0 + 250);
	g = rt_find(&t, 3, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert(g->hold);
	ck_assert_uint_ge(g->at_ms, t0 + 250);
	g = rt_find(&t, 7, &n);
	ck_assert_msg(n == 0 || g->at_ms >= refreshed + 400, "the REFRESHed "
	    "hold reaped %" PRIu64 " ms after its REFRESH",
	    g != NULL ? g->at_ms - refreshed : 0);
	/* the hold: 300 ms after its REFRESH, and the margin */
	rt_run(base, refreshed + 700);
	g = rt_find(&t, 7, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert(g->hold);
	ck_assert_int_eq(g->mrev, 12);
	ck_assert_uint_ge(g->at_ms, refreshed + 400);
	/* the deletes applied (a reap's, say): nothing more is asked; the
	 * plain connection's hold, declined, is not asked for again */
	rt_event(&ev[0], k0, NULL, 0, 13, 0, 0);
	rt_event(&ev[1], w0, NULL, 0, 13, 0, 0);
	replica_events(rp, ev, 2, 13);
	ck_assert_uint_eq(locktable_counters(replica_table(rp))->waiting, 0);
	n = t.n;
	rt_run(base, kl_now_ms() + EBE_RETRY_MAX_MS + 300);
	ck_assert_uint_eq(t.n, n);
	(void)rt_find(&t, 3, &n);
	ck_assert_uint_eq(n, 1);

	replica_clear(rp);
	replica_free(rp);
	event_base_free(base);
}
END_TEST

/*
 * Ours, deleted by someone else (another front end's reap, or a lease's
 * end): on A, the owner's front end, a hold whose ttl ran out here ends
 * as its expiry (expired 1, no drop); a wait ends ERR TIMEOUT (timeouts
 * 1); a hold whose ttl has not run out here is lost: the client is
 * dropped (it must not believe it holds what the cluster let go).
 */
static void
ours_lock(struct world *w, struct rep *a, struct lt_owner *lo,
    const char *key, uint64_t ttl_ms)
{
	struct lt_acquire	 acq;
	struct be_result	 r;
	struct ereq		*q;
	const char		*keys[1] = { key };
	size_t			 keylens[1] = { strlen(key) };

	memset(&acq, 0, sizeof(acq));
	acq.keys = keys;
	acq.keylens = keylens;
	acq.nkeys = 1;
	acq.mode = LT_EXCLUSIVE;
	acq.limit = 1;
	acq.max_waiters = -1;
	acq.ttl_ms = ttl_ms;
	ck_assert_int_eq(a->be->ops->acquire(a->be, lo, &acq, kl_now_ms(),
	    &r), BE_PENDING);
	ck_assert_ptr_nonnull(q = eowner_of(a->rp, lo)->open);
	w->rev++;
	w_put(w, q->ent[0].ekey, q->ent[0].ekeylen, q->value, q->valuelen,
	    q->fe, q->seq);
	w_apply(w, (int)w->rev);
}

START_TEST(ours_deleted_by_another_front_end_ends_as_its_ttl_or_is_lost)
{
	static int		 conn_a, conn_b;	/* the daemon's */
	struct world		*w = calloc(1, sizeof(*w));
	struct rep		*a, *b;
	struct lt_owner		*lo, *lw;
	struct be_result	 got;
	size_t			 k0, k1, k2, foreign;

	ck_assert_ptr_nonnull(w);
	w->rng = 5;
	w->rev = 100;
	w->r[0] = a = rep_new(FE_A);
	w->r[1] = b = rep_new(FE_B);
	ck_assert_ptr_nonnull(lo = a->be->ops->owner_new(a->be, 7, &conn_a));
	ck_assert_ptr_nonnull(lw = a->be->ops->owner_new(a->be, 9, &conn_b));
	/* k0 with ttl=50, k1 with ttl=60000; k2 held by a third front end,
	 * waited for by lw */
	k0 = w->nkv;
	ours_lock(w, a, lo, "k0", 50);
	k1 = w->nkv;
	ours_lock(w, a, lo, "k1", 60000);
	w->rev++;
	foreign = w->nkv;
	w_put(w, "t/q/k2/000000000000001f-0000000000000001", 40,
	    "k1 3 x 1 -1 0 0 1 k2\n", 21, 0x1f, 1);
	w_apply(w, 1);
	k2 = w->nkv;
	ours_lock(w, a, lw, "k2", 0);
	ck_assert_uint_eq(replies_of(a, lo, &got), 2);
	ck_assert(locktable_owner_is_waiting(lw));
	a->ngot = 0;

	/* k0 past its ttl here, deleted by someone else: its expiry */
	usleep(80 * 1000);
	w->rev++;
	w_del(w, &w->kv[k0]);
	w_apply(w, 2);
	ck_assert_uint_eq(locktable_counters(replica_table(a->rp))->expired,
	    1);
	ck_assert_uint_eq(locktable_counters(replica_table(b->rp))->expired,
	    0);
	ck_assert_uint_eq(a->ndropped, 0);
	/* lw's wait, deleted: ERR TIMEOUT */
	w->rev++;
	w_del(w, &w->kv[k2]);
	w_apply(w, 3);
	ck_assert_uint_eq(replies_of(a, lw, &got), 1);
	ck_assert_int_eq(got.err, KL_ERR_TIMEOUT);
	ck_assert_uint_eq(locktable_counters(replica_table(a->rp))->timeouts,
	    1);
	ck_assert(!locktable_owner_is_waiting(lw));
	/* k1, long before its ttl: lost, lo's client dropped */
	w->rev++;
	w_del(w, &w->kv[k1]);
	w_apply(w, 4);
	ck_assert_uint_eq(a->ndropped, 1);
	ck_assert_ptr_eq(a->dropped[0], lo);
	ck_assert_uint_eq(locktable_counters(replica_table(a->rp))->expired,
	    1);

	a->be->ops->owner_free(a->be, lo, kl_now_ms());
	a->be->ops->owner_free(a->be, lw, kl_now_ms());
	w->rev++;
	w_del(w, &w->kv[foreign]);
	w_apply(w, 5);
	rep_free(a);
	rep_free(b);
	free(w->log);
	free(w);
}
END_TEST

static Suite *
replica_suite(void)
{
	Suite	*s = suite_create("replica");
	TCase	*tc = tcase_create("replica");

	/* a_rebuilt_replica_agrees_on_grants_and_queues took 38 s of its
	 * 60 under ASan at load 17 (an outside run beside the suite) */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, losing_the_lease_drops_every_client_without_memory);
	tcase_add_test(tc, entries_against_the_rules_are_left_out);
	tcase_add_test(tc, two_replicas_agree_on_every_foreign_event);
	tcase_add_test(tc, a_client_token_is_the_one_every_replica_shows);
	tcase_add_test(tc, a_rebuilt_replica_agrees_on_grants_and_queues);
	tcase_add_test(tc, a_session_moves_from_one_replica_to_another);
	tcase_add_test(tc, session_records_decode);
	tcase_add_test(tc, a_session_after_a_lock_keeps_its_token);
	tcase_add_test(tc, a_dead_session_hold_and_wait_are_reaped);
	tcase_add_test(tc,
	    ours_deleted_by_another_front_end_ends_as_its_ttl_or_is_lost);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "check_replica",
	.suites = { replica_suite, NULL }
};
