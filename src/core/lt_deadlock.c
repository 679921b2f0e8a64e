/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's deadlock check (keylockd-protocol(7), Deadlock detection):
 * before a request waits, the owners it would wait on, directly or through
 * their own waits, are numbered and linked by AND-edges and OR-groups, and the
 * search decides whether the requester could never progress. It only reads the
 * table (besides numbering owners per search), frees all it allocates before
 * returning, and fails open when memory runs out or the search has taken
 * LT_DL_STEPS_MAX steps. It never reads the clock, a socket or a global, and
 * never recurses.
 */
#include <string.h>

#include "locktable.h"
#include "lt_impl.h"
#include "util.h"

#define DL_GROUP	0x80000000U	/* an edge end that names an OR-group */
#define DL_NONE		0xffffffffU	/* no node: out of memory */
#define DL_MAX		0x7fffffffU	/* nodes, edges, groups per search */

/*
 * The deadlock search. Owners are nodes, numbered in the order they are
 * reached from the requester (node 0, whose wait is the new request).
 * Edges are stored reversed, so that "can still progress" can be pushed
 * back from the owners that wait for nothing.
 */
struct dl_node {
	struct lt_owner	*owner;
	uint32_t	 rev;		/* first reverse edge + 1; 0: none */
	uint32_t	 pending;	/* AND-edges, OR-groups still stuck */
	bool		 free;		/* can still progress */
};

struct dl_edge {
	uint32_t	 next;		/* next reverse edge + 1; 0: none */
	uint32_t	 from;		/* a node, or a group | DL_GROUP */
};

struct dl_group {
	uint32_t	 node;		/* whose wait it is */
	bool		 free;		/* some member can progress */
};

struct dl_src {
	uint32_t	 probe;		/* a key of the new request */
	uint32_t	 to;		/* a node, or a group | DL_GROUP */
};

struct dl {
	uint64_t	 epoch;
	struct dl_node	*node;
	size_t		 nnode, capnode;
	struct dl_edge	*edge;
	size_t		 nedge, capedge;
	struct dl_group	*group;
	size_t		 ngroup, capgroup;
	struct dl_src	*src;
	size_t		 nsrc, capsrc;
	uint32_t	 steps;		/* keys looked at, edges made */
	bool		 oom;		/* or out of steps: gives up */
	bool		 cut;		/* out of steps */
};

/* One more step of the search; false (and the search gives up) past
 * LT_DL_STEPS_MAX. */
static inline bool
dl_step(struct dl *d)
{
	if (d->steps < LT_DL_STEPS_MAX) {
		d->steps++;
		return true;
	}
	d->cut = d->oom = true;
	return false;
}

static void	*array_room(void *, size_t *, size_t, size_t);
static uint32_t	 dl_node_of(struct dl *, struct lt_owner *);
static void	 dl_edge_add(struct dl *, uint32_t, uint32_t);
static void	 dl_src_add(struct dl *, uint32_t, uint32_t);
static void	 dl_and(struct dl *, uint32_t, uint32_t, struct lt_owner *);
static void	 dl_or(struct dl *, uint32_t, uint32_t, const struct lt_key *);
static void	 dl_key(struct dl *, uint32_t, uint32_t, const struct lt_key *,
		    enum lt_mode, const struct lt_slot *);
static void	 dl_expand(struct dl *);
static bool	 dl_propagate(struct dl *);
static size_t	 dl_verdict(const struct dl *);

/* Returns a with room for element n (growing it), or NULL: a is intact. */
static void *
array_room(void *a, size_t *cap, size_t n, size_t size)
{
	size_t	 ncap;
	void	*na;

	if (n < *cap)
		return a;
	if (n >= DL_MAX)
		return NULL;
	ncap = *cap == 0 ? 16 : *cap * 2;
	if ((na = kl_realloc(a, ncap * size)) == NULL)
		return NULL;
	*cap = ncap;
	return na;
}

static uint32_t
dl_node_of(struct dl *d, struct lt_owner *o)
{
	struct dl_node	*n;

	if (o->dl_epoch == d->epoch)
		return o->dl_node;
	n = array_room(d->node, &d->capnode, d->nnode, sizeof(*n));
	if (n == NULL) {
		d->oom = true;
		return DL_NONE;
	}
	d->node = n;
	n[d->nnode].owner = o;
	n[d->nnode].rev = 0;
	n[d->nnode].pending = 0;
	n[d->nnode].free = false;
	o->dl_epoch = d->epoch;
	o->dl_node = (uint32_t)d->nnode;
	return (uint32_t)d->nnode++;
}

/* Records "from waits on node to", reversed for the propagation. */
static void
dl_edge_add(struct dl *d, uint32_t from, uint32_t to)
{
	struct dl_edge	*e;

	if (!dl_step(d))
		return;
	e = array_room(d->edge, &d->capedge, d->nedge, sizeof(*e));
	if (e == NULL) {
		d->oom = true;
		return;
	}
	d->edge = e;
	e[d->nedge].next = d->node[to].rev;
	e[d->nedge].from = from;
	d->node[to].rev = (uint32_t)++d->nedge;
}

/* Remembers which key of the new request each of its edges comes from. */
static void
dl_src_add(struct dl *d, uint32_t probe, uint32_t to)
{
	struct dl_src	*s;

	s = array_room(d->src, &d->capsrc, d->nsrc, sizeof(*s));
	if (s == NULL) {
		d->oom = true;
		return;
	}
	d->src = s;
	s[d->nsrc].probe = probe;
	s[d->nsrc].to = to;
	d->nsrc++;
}

/* An AND-edge: from is stuck while o is. */
static void
dl_and(struct dl *d, uint32_t from, uint32_t probe, struct lt_owner *o)
{
	uint32_t	to = dl_node_of(d, o);

	if (d->oom)
		return;
	d->node[from].pending++;
	if (from == 0)
		dl_src_add(d, probe, to);
	dl_edge_add(d, from, to);
}

/* An OR-group: a wait on a full semaphore is stuck only while every
 * holder is (keylockd-protocol(7), Deadlock detection). */
static void
dl_or(struct dl *d, uint32_t from, uint32_t probe, const struct lt_key *k)
{
	struct dl_group	*g;
	struct lt_hold	*h;
	uint32_t	 gi, to;

	g = array_room(d->group, &d->capgroup, d->ngroup, sizeof(*g));
	if (g == NULL) {
		d->oom = true;
		return;
	}
	d->group = g;
	gi = (uint32_t)d->ngroup++;
	g[gi].node = from;
	g[gi].free = false;
	d->node[from].pending++;
	if (from == 0)
		dl_src_add(d, probe, gi | DL_GROUP);
	for (h = lt_key_first(k); h != NULL && !d->oom;
	    h = lt_key_next(k, h)) {
		to = dl_node_of(d, h->owner);
		if (!d->oom)
			dl_edge_add(d, gi | DL_GROUP, to);
	}
}

/*
 * The edges of one wait on key k, by node from (node 0: the new request,
 * as if queued at the tail, so pred is the tail). The request right ahead
 * stands for every request ahead, as it waits on them in turn. Holders the
 * wait conflicts with count too, even from behind others: a shared request
 * ahead may be compatible with shared holders that block this exclusive
 * one. Their edges are skipped only when the request ahead conflicts with
 * them as well, since it carries them already.
 */
static void
dl_key(struct dl *d, uint32_t from, uint32_t probe, const struct lt_key *k,
    enum lt_mode mode, const struct lt_slot *pred)
{
	struct lt_hold	*h, *first = lt_key_first(k);
	enum lt_mode	 held;

	if (!dl_step(d))
		return;
	if (pred != NULL)
		dl_and(d, from, probe, pred->req->owner);
	if (first == NULL)
		return;
	if (lt_key_limit(k) > 1) {
		if (pred == NULL && k->x->nholders >= k->x->limit)
			dl_or(d, from, probe, k);
		return;
	}
	held = (enum lt_mode)first->mode;
	if (!lt_modes_conflict(mode, held) || (pred != NULL &&
	    lt_modes_conflict((enum lt_mode)pred->req->mode, held)))
		return;
	for (h = first; h != NULL && !d->oom; h = lt_key_next(k, h))
		dl_and(d, from, probe, h->owner);
}

/* Numbers every owner reachable from the new request, breadth first. */
static void
dl_expand(struct dl *d)
{
	struct lt_owner	*w;
	struct lt_req	*r;
	struct lt_slot	*s;
	size_t		 i;
	uint32_t	 j;

	for (i = 1; i < d->nnode && !d->oom; i++) {
		w = d->node[i].owner;
		if ((r = w->wait) == NULL)
			continue;
		for (j = 0; j < r->nkeys && !d->oom; j++) {
			s = &r->slots[j];
			dl_key(d, (uint32_t)i, 0, s->key,
			    (enum lt_mode)r->mode, s->prev);
		}
	}
}

/*
 * "Can still progress", a least fixpoint pushed back from the owners that
 * wait for nothing: a node is free once every AND-edge leads to a free
 * node and every OR-group has a free member. Each edge is crossed once.
 * Returns false if out of memory.
 */
static bool
dl_propagate(struct dl *d)
{
	struct dl_group	*g;
	uint32_t	*work, t, e, from;
	size_t		 i, n = 0;

	if ((work = kl_malloc(d->nnode * sizeof(*work))) == NULL)
		return false;
	for (i = 0; i < d->nnode; i++)
		if (d->node[i].pending == 0) {
			d->node[i].free = true;
			work[n++] = (uint32_t)i;
		}
	while (n > 0) {
		t = work[--n];
		for (e = d->node[t].rev; e != 0; e = d->edge[e - 1].next) {
			from = d->edge[e - 1].from;
			if (from & DL_GROUP) {
				g = &d->group[from & ~DL_GROUP];
				if (g->free)
					continue;
				g->free = true;
				from = g->node;
			}
			if (--d->node[from].pending == 0) {
				d->node[from].free = true;
				work[n++] = from;
			}
		}
	}
	kl_free(work);
	return true;
}

/* The first key, in request order, through which the requester is stuck;
 * LT_NONE if it can progress. */
static size_t
dl_verdict(const struct dl *d)
{
	uint32_t	to;
	size_t		i;
	bool		free;

	if (d->node[0].free)
		return LT_NONE;
	for (i = 0; i < d->nsrc; i++) {
		to = d->src[i].to;
		if (to & DL_GROUP)
			free = d->group[to & ~DL_GROUP].free;
		else
			free = d->node[to].free;
		if (!free)
			return d->src[i].probe;
	}
	return LT_NONE;
}

/*
 * keylockd-protocol(7), Deadlock detection: would o, waiting with its new
 * request at the tail of each key's queue, be stuck for good? The stuck owners
 * are the largest set in which everybody waits on a member through an AND-edge
 * or on all members of an OR-group; it is found as the complement of those
 * that can progress. A least fixpoint of "depends on o" would miss a cycle
 * that also loops through an OR-group member other than o. Since every request
 * that would close a cycle is refused, o can only be stuck in one it closes
 * itself. If memory runs out the check fails open: the request may wait, as on
 * a server without the check, and its timeout still ends the wait. So it does
 * past LT_DL_STEPS_MAX steps (a key looked at, an edge made), so that a client
 * that builds a huge wait graph cannot make every LOCK walk it; the search
 * cut is counted (deadlock_searches_cut).
 */
size_t
lt_dl_search(struct locktable *lt, struct lt_owner *o,
    const struct lt_probes *ps, enum lt_mode mode)
{
	struct dl	d;
	struct lt_key	*k;
	size_t		i, found = LT_NONE;

	memset(&d, 0, sizeof(d));
	d.epoch = ++lt->epoch;
	(void)dl_node_of(&d, o);
	for (i = 0; i < ps->n && !d.oom; i++)
		if ((k = ps->p[i].k) != NULL)
			dl_key(&d, 0, (uint32_t)i, k, mode,
			    k->x != NULL ? k->x->qtail : NULL);
	dl_expand(&d);
	if (!d.oom && dl_propagate(&d))
		found = dl_verdict(&d);
	if (d.cut)
		lt->c.deadlock_searches_cut++;
	lt->dl_steps += d.steps;
	kl_free(d.node);
	kl_free(d.edge);
	kl_free(d.group);
	kl_free(d.src);
	return found;
}
