/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table: one entry per key somebody holds or waits for, with its
 * holders in grant order and its FIFO queue, the owner side of the same
 * links, a ttl heap and the deadlock check (PROTOCOL.md, Semantics). A
 * request enters every key's queue at one instant and is granted on all its
 * keys at one instant; after a release, withdrawal or expiry the keys that
 * changed are settled from a worklist. It never reads the clock, a socket or
 * a global, never logs, and never recurses: time comes in as now_ms and
 * later grants go out through hooks.granted.
 */
#include <errno.h>
#include <string.h>

#include "hist.h"
#include "locktable.h"
#include "util.h"

#define LT_BUCKETS_MIN	16	/* a power of two */
#define LT_PROBES_STACK	8	/* keys of a request looked up without malloc */
#define LT_HEAP_MIN	16
#define LT_NONE		SIZE_MAX
#define DL_GROUP	0x80000000U	/* an edge end that names an OR-group */
#define DL_NONE		0xffffffffU	/* no node: out of memory */
#define DL_MAX		0x7fffffffU	/* nodes, edges, groups per search */

/* One key held by one owner in one grant. */
struct lt_hold {
	struct lt_key	*key;
	struct lt_owner	*owner;
	struct lt_hold	*kprev, *knext;	/* the key's holders, grant order */
	struct lt_hold	*oprev, *onext;	/* the owner's holds */
	uint64_t	 token;
	uint64_t	 granted_ms;
	uint64_t	 expiry_ms;	/* 0: no ttl */
	uint32_t	 heap_idx;	/* in lt->heap while expiry_ms != 0 */
	uint8_t		 mode;		/* enum lt_mode */
	uint8_t		 mark;		/* refresh: already counted */
};

/*
 * A request's place in one key's queue. Its hold is allocated when the
 * request is queued, so that a later grant cannot fail for want of memory.
 */
struct lt_slot {
	struct lt_req	*req;
	struct lt_key	*key;
	struct lt_slot	*prev, *next;
	struct lt_hold	*hold;
};

struct lt_req {
	struct lt_owner	*owner;
	uint64_t	 arrival_ms;
	uint64_t	 ttl_ms;
	uint32_t	 nkeys;		/* distinct keys, one slot each */
	uint8_t		 mode;
	struct lt_slot	 slots[];
};

struct lt_key {
	struct lt_key	*next;		/* hash chain */
	struct lt_hold	*holders, *holders_tail;
	struct lt_slot	*qhead, *qtail;
	struct lt_key	*hot_prev, *hot_next;	/* keys with waiters */
	struct lt_key	*dirty_next;
	uint64_t	 wait_ms_total;
	uint32_t	 hash;
	uint32_t	 limit;
	uint32_t	 nholders;
	uint32_t	 nwaiters;
	uint32_t	 max_waiters;
	uint16_t	 keylen;
	uint8_t		 dirty;		/* on lt->dirty, to be settled */
	char		 key[];		/* keylen bytes and a NUL */
};

struct lt_owner {
	uint64_t	 id;
	void		*udata;
	struct locktable *lt;		/* NULL once locktable_free() ran */
	struct lt_owner	*prev, *next;	/* the table's owners */
	struct lt_hold	*holds;
	size_t		 nholds;
	struct lt_req	*wait;		/* at most one queued request */
	uint64_t	 dl_epoch;	/* the search that numbered it */
	uint32_t	 dl_node;
};

struct locktable {
	struct lt_hooks	 hooks;
	uint64_t	 sipkey[2];
	struct lt_key	**buckets;
	size_t		 nbuckets;	/* a power of two */
	struct lt_key	*hot;		/* keys with waiters */
	struct lt_key	*dirty;		/* keys to settle, a stack */
	struct lt_hold	**heap;		/* ttl holds, a min-heap on expiry */
	size_t		 heap_len;
	size_t		 heap_cap;	/* >= heap_len + ttl_reserved */
	size_t		 ttl_reserved;	/* keys of queued requests with a ttl */
	struct lt_owner	*owners;
	uint64_t	 epoch;		/* of the last deadlock search */
	uint64_t	 last_token;	/* used when hooks.next_token is NULL */
	bool		 frozen;	/* shutting down: grant nothing more */
	struct lt_counters c;
};

/* The keys of one acquire, looked up once and deduplicated. */
struct lt_probe {
	const char	*key;
	size_t		 len;
	struct lt_key	*k;		/* NULL: no entry yet */
	struct lt_hold	*h;		/* allocated for the grant */
	uint32_t	 hash;
	bool		 fresh;		/* k was allocated for this request */
};

struct lt_probes {
	struct lt_probe	*p;
	size_t		 n;
	uint32_t	*set;		/* open addressing: indexes into p */
	size_t		 setsize;
	struct lt_probe	 sp[LT_PROBES_STACK];
	uint32_t	 sset[2 * LT_PROBES_STACK];
};

struct lt_grant {
	uint64_t	 token;
	uint64_t	 now_ms;
	uint64_t	 ttl_ms;
	enum lt_mode	 mode;
};

/*
 * The deadlock search. Owners are nodes, numbered in the order they are
 * reached from the requester (node 0, whose wait is the new request).
 * Edges are stored reversed, so that "can still progress" can be pushed
 * back from the owners that wait for nothing.
 */
struct dl_node {
	struct lt_owner	*owner;
	uint32_t	 rev;		/* first reverse edge + 1; 0: none */
	uint32_t	 pending;	/* AND-edges and OR-groups still stuck */
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
	bool		 oom;
};

static uint64_t	 splitmix64(uint64_t *);
static uint64_t	 sip_rotl(uint64_t, int);
static void	 sip_round(uint64_t *);
static void	 sip_compress(uint64_t *, uint64_t);
static uint32_t	 key_hash(const struct locktable *, const char *, size_t);
static uint64_t	 ms_since(uint64_t, uint64_t);
static uint64_t	*why_counter(struct locktable *, enum lt_why);
static enum kl_err nomem(void);
static void	*array_room(void *, size_t *, size_t, size_t);
static struct lt_key *key_lookup(const struct locktable *, const char *,
		    size_t, uint32_t);
static struct lt_key *key_new(const struct lt_probe *, uint32_t);
static void	 table_resize(struct locktable *, size_t);
static void	 key_insert(struct locktable *, struct lt_key *);
static void	 key_free(struct locktable *, struct lt_key *);
static void	 key_mark_dirty(struct locktable *, struct lt_key *);
static void	 key_touch(struct locktable *, struct lt_key *);
static bool	 modes_conflict(enum lt_mode, enum lt_mode);
static bool	 key_admits(const struct lt_key *, enum lt_mode);
static bool	 key_blocks(const struct lt_key *, enum lt_mode);
static void	 blocker_fill(const struct lt_key *, enum lt_mode, uint64_t,
		    struct lt_blocker *);
static bool	 heap_reserve(struct locktable *, size_t);
static bool	 heap_less(const struct locktable *, size_t, size_t);
static void	 heap_swap(struct locktable *, size_t, size_t);
static void	 heap_up(struct locktable *, size_t);
static void	 heap_down(struct locktable *, size_t);
static void	 heap_push(struct locktable *, struct lt_hold *);
static void	 heap_remove(struct locktable *, struct lt_hold *);
static void	 heap_fix(struct locktable *, size_t);
static uint64_t	 next_token(struct locktable *);
static void	 grant_count(struct locktable *, uint64_t);
static void	 hold_grant(struct locktable *, struct lt_hold *,
		    struct lt_key *, struct lt_owner *,
		    const struct lt_grant *);
static void	 hold_end(struct locktable *, struct lt_hold *, uint64_t,
		    uint64_t *);
static struct lt_hold *hold_find(const struct lt_key *,
		    const struct lt_owner *);
static struct lt_hold *owner_find_hold(const struct locktable *,
		    const struct lt_owner *, const char *, size_t);
static void	 queue_append(struct locktable *, struct lt_key *,
		    struct lt_slot *);
static void	 queue_unlink(struct locktable *, struct lt_slot *);
static void	 req_free(struct lt_req *);
static bool	 req_is_grantable(const struct lt_req *);
static void	 req_grant(struct locktable *, struct lt_req *,
		    struct lt_key *, uint64_t);
static void	 req_withdraw(struct locktable *, struct lt_req *);
static void	 settle(struct locktable *, uint64_t);
static bool	 probes_init(struct locktable *, struct lt_probes *,
		    const struct lt_acquire *);
static void	 probes_add(struct locktable *, struct lt_probes *,
		    const char *, size_t);
static bool	 probes_alloc(struct lt_probes *, uint32_t);
static void	 probes_unalloc(struct lt_probes *);
static void	 probes_done(struct lt_probes *);
static struct lt_key *probe_commit(struct locktable *, struct lt_probe *);
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
static size_t	 dl_search(struct locktable *, struct lt_owner *,
		    const struct lt_probes *, enum lt_mode);
static enum kl_err acquire_validate(const struct lt_acquire *);
static enum kl_err acquire_check(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, const struct lt_probes *,
		    struct lt_blocker *);
static bool	 acquire_is_grantable(const struct lt_probes *, enum lt_mode);
static enum kl_err acquire_refuse(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, const struct lt_probes *,
		    uint64_t, struct lt_blocker *);
static enum kl_err acquire_grant(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, struct lt_probes *, uint64_t,
		    uint64_t *);
static enum kl_err acquire_queue(struct locktable *, struct lt_owner *,
		    const struct lt_acquire *, struct lt_probes *, uint64_t);
static void	 hot_swap(const struct lt_key **, size_t, size_t);
static void	 hot_up(const struct lt_key **, size_t);
static void	 hot_down(const struct lt_key **, size_t, size_t);
static size_t	 hot_offer(const struct lt_key **, size_t, size_t,
		    const struct lt_key *);
static const char *check_holders(const struct lt_key *, uint64_t *,
		    uint64_t *);
static const char *check_queue(const struct lt_key *, uint64_t *);
static const char *check_key(const struct locktable *, const struct lt_key *,
		    size_t, uint64_t *);
static const char *check_keys(const struct locktable *, uint64_t *);
static const char *check_hot(const struct locktable *, uint64_t);
static const char *check_heap(const struct locktable *, uint64_t);
static const char *check_owner(const struct locktable *,
		    const struct lt_owner *, uint64_t *);
static const char *check_owners(const struct locktable *);

/* Expands the 64-bit seed into the 128-bit SipHash key. */
static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t	z;

	z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t
sip_rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static void
sip_round(uint64_t *v)
{
	v[0] += v[1];
	v[1] = sip_rotl(v[1], 13);
	v[1] ^= v[0];
	v[0] = sip_rotl(v[0], 32);
	v[2] += v[3];
	v[3] = sip_rotl(v[3], 16);
	v[3] ^= v[2];
	v[0] += v[3];
	v[3] = sip_rotl(v[3], 21);
	v[3] ^= v[0];
	v[2] += v[1];
	v[1] = sip_rotl(v[1], 17);
	v[1] ^= v[2];
	v[2] = sip_rotl(v[2], 32);
}

static void
sip_compress(uint64_t *v, uint64_t m)
{
	v[3] ^= m;
	sip_round(v);
	v[0] ^= m;
}

/*
 * SipHash-1-3 (Aumasson and Bernstein; the variant Rust and Python use for
 * hash tables), keyed per process so that chosen keys cannot flood one
 * bucket. Words are read bytewise: little-endian on every host.
 */
static uint32_t
key_hash(const struct locktable *lt, const char *key, size_t len)
{
	const unsigned char *p = (const unsigned char *)key;
	uint64_t	 v[4], m;
	size_t		 i, j;

	v[0] = lt->sipkey[0] ^ 0x736f6d6570736575ULL;
	v[1] = lt->sipkey[1] ^ 0x646f72616e646f6dULL;
	v[2] = lt->sipkey[0] ^ 0x6c7967656e657261ULL;
	v[3] = lt->sipkey[1] ^ 0x7465646279746573ULL;
	for (i = 0; i + 8 <= len; i += 8) {
		m = 0;
		for (j = 0; j < 8; j++)
			m |= (uint64_t)p[i + j] << (8 * j);
		sip_compress(v, m);
	}
	m = (uint64_t)len << 56;
	for (j = 0; i + j < len; j++)
		m |= (uint64_t)p[i + j] << (8 * j);
	sip_compress(v, m);
	v[2] ^= 0xff;
	sip_round(v);
	sip_round(v);
	sip_round(v);
	m = v[0] ^ v[1] ^ v[2] ^ v[3];
	return (uint32_t)(m ^ (m >> 32));
}

struct locktable *
locktable_new(const struct lt_hooks *hooks, uint64_t seed)
{
	struct locktable	*lt;

	if ((lt = kl_calloc(1, sizeof(*lt))) == NULL)
		return NULL;
	lt->buckets = kl_calloc(LT_BUCKETS_MIN, sizeof(*lt->buckets));
	if (lt->buckets == NULL) {
		kl_free(lt);
		return NULL;
	}
	lt->nbuckets = LT_BUCKETS_MIN;
	if (hooks != NULL)
		lt->hooks = *hooks;
	lt->sipkey[0] = splitmix64(&seed);
	lt->sipkey[1] = splitmix64(&seed);
	return lt;
}

void
locktable_freeze(struct locktable *lt)
{
	lt->frozen = true;
}

struct lt_owner *
locktable_owner_new(struct locktable *lt, uint64_t id, void *udata)
{
	struct lt_owner	*o;

	if ((o = kl_calloc(1, sizeof(*o))) == NULL)
		return NULL;
	o->id = id;
	o->udata = udata;
	o->lt = lt;
	o->next = lt->owners;
	if (lt->owners != NULL)
		lt->owners->prev = o;
	lt->owners = o;
	return o;
}

uint64_t
locktable_owner_id(const struct lt_owner *o)
{
	return o->id;
}

void *
locktable_owner_udata(const struct lt_owner *o)
{
	return o->udata;
}

size_t
locktable_owner_nholds(const struct lt_owner *o)
{
	return o->nholds;
}

bool
locktable_owner_is_waiting(const struct lt_owner *o)
{
	return o->wait != NULL;
}

static uint64_t
ms_since(uint64_t now_ms, uint64_t then_ms)
{
	return now_ms > then_ms ? now_ms - then_ms : 0;
}

static uint64_t *
why_counter(struct locktable *lt, enum lt_why why)
{
	switch (why) {
	case LT_WHY_UNLOCK:
		return &lt->c.releases;
	case LT_WHY_DISCONNECT:
		return &lt->c.disconnect_releases;
	case LT_WHY_TIMEOUT:
	case LT_WHY_SHUTDOWN:
		break;
	}
	return NULL;
}

/* The header's convention for running out of memory: LIMIT and ENOMEM. */
static enum kl_err
nomem(void)
{
	errno = ENOMEM;
	return KL_ERR_LIMIT;
}

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

static struct lt_key *
key_lookup(const struct locktable *lt, const char *key, size_t len,
    uint32_t hash)
{
	struct lt_key	*k;

	k = lt->buckets[hash & (lt->nbuckets - 1)];
	for (; k != NULL; k = k->next)
		if (k->hash == hash && k->keylen == len &&
		    memcmp(k->key, key, len) == 0)
			return k;
	return NULL;
}

static struct lt_key *
key_new(const struct lt_probe *p, uint32_t limit)
{
	struct lt_key	*k;

	if ((k = kl_calloc(1, sizeof(*k) + p->len + 1)) == NULL)
		return NULL;
	k->hash = p->hash;
	k->limit = limit;
	k->keylen = (uint16_t)p->len;
	memcpy(k->key, p->key, p->len);
	return k;
}

/* On allocation failure the table keeps its size: chains grow longer. */
static void
table_resize(struct locktable *lt, size_t nbuckets)
{
	struct lt_key	**nb, *k, *next;
	size_t		  i;

	if ((nb = kl_calloc(nbuckets, sizeof(*nb))) == NULL)
		return;
	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = next) {
			next = k->next;
			k->next = nb[k->hash & (nbuckets - 1)];
			nb[k->hash & (nbuckets - 1)] = k;
		}
	}
	kl_free(lt->buckets);
	lt->buckets = nb;
	lt->nbuckets = nbuckets;
}

static void
key_insert(struct locktable *lt, struct lt_key *k)
{
	struct lt_key	**b;

	b = &lt->buckets[k->hash & (lt->nbuckets - 1)];
	k->next = *b;
	*b = k;
	lt->c.keys++;
	if (lt->c.keys > lt->nbuckets)
		table_resize(lt, lt->nbuckets * 2);
}

/*
 * Shrinking keeps the load above a quarter, so that walking the buckets in
 * locktable_hot_keys() costs about the keys it finds.
 */
static void
key_free(struct locktable *lt, struct lt_key *k)
{
	struct lt_key	**pp;

	pp = &lt->buckets[k->hash & (lt->nbuckets - 1)];
	while (*pp != k)
		pp = &(*pp)->next;
	*pp = k->next;
	lt->c.keys--;
	kl_free(k);
	if (lt->nbuckets > LT_BUCKETS_MIN && lt->c.keys < lt->nbuckets / 4)
		table_resize(lt, lt->nbuckets / 2);
}

static void
key_mark_dirty(struct locktable *lt, struct lt_key *k)
{
	if (k->dirty)
		return;
	k->dirty = 1;
	k->dirty_next = lt->dirty;
	lt->dirty = k;
}

/*
 * After k lost a holder or a waiter: settle it later if somebody waits,
 * else free it as soon as it is empty (PROTOCOL.md, Cleanup). An entry on
 * the dirty list is freed when settle() pops it.
 */
static void
key_touch(struct locktable *lt, struct lt_key *k)
{
	if (k->nwaiters > 0)
		key_mark_dirty(lt, k);
	else if (k->nholders == 0 && !k->dirty)
		key_free(lt, k);
}

static void
key_add_waiter(struct locktable *lt, struct lt_key *k)
{
	if (k->nwaiters++ == 0) {
		k->hot_prev = NULL;
		k->hot_next = lt->hot;
		if (lt->hot != NULL)
			lt->hot->hot_prev = k;
		lt->hot = k;
	}
	if (k->nwaiters > k->max_waiters)
		k->max_waiters = k->nwaiters;
	if (k->nwaiters > lt->c.max_waiters)
		lt->c.max_waiters = k->nwaiters;
}

static void
key_remove_waiter(struct locktable *lt, struct lt_key *k)
{
	if (--k->nwaiters > 0)
		return;
	if (k->hot_prev != NULL)
		k->hot_prev->hot_next = k->hot_next;
	else
		lt->hot = k->hot_next;
	if (k->hot_next != NULL)
		k->hot_next->hot_prev = k->hot_prev;
	k->hot_prev = k->hot_next = NULL;
}

static bool
modes_conflict(enum lt_mode a, enum lt_mode b)
{
	return a == LT_EXCLUSIVE || b == LT_EXCLUSIVE;
}

/* Whether k's holders leave room for one more of this mode. Holders of
 * one key never mix modes, so the first one speaks for all. */
static bool
key_admits(const struct lt_key *k, enum lt_mode mode)
{
	if (k->limit > 1)
		return k->nholders < k->limit;
	return k->holders == NULL ||
	    !modes_conflict(mode, (enum lt_mode)k->holders->mode);
}

/* PROTOCOL.md, Per-key FIFO: a key with a waiter is not free. */
static bool
key_blocks(const struct lt_key *k, enum lt_mode mode)
{
	return k->nwaiters > 0 || !key_admits(k, mode);
}

/*
 * Holders are kept in grant order, so when they stand in the way the first
 * is the longest-standing; when they do not, only the queue does.
 */
static void
blocker_fill(const struct lt_key *k, enum lt_mode mode, uint64_t now_ms,
    struct lt_blocker *why)
{
	why->key = k->key;
	why->keylen = k->keylen;
	why->holder = NULL;
	why->held_ms = 0;
	if (k->holders != NULL && !key_admits(k, mode)) {
		why->holder = k->holders->owner;
		why->held_ms = ms_since(now_ms, k->holders->granted_ms);
	}
	why->nholders = k->nholders;
	why->nwaiters = k->nwaiters;
}

/*
 * Makes room for n more holds with a ttl beyond those already promised to
 * queued requests, so that pushing in a later grant never allocates.
 */
static bool
heap_reserve(struct locktable *lt, size_t n)
{
	struct lt_hold	**heap;
	size_t		  need, cap;

	need = lt->heap_len + lt->ttl_reserved + n;
	if (need <= lt->heap_cap)
		return true;
	cap = lt->heap_cap < LT_HEAP_MIN ? LT_HEAP_MIN : lt->heap_cap;
	while (cap < need)
		cap *= 2;
	if ((heap = kl_realloc(lt->heap, cap * sizeof(*heap))) == NULL)
		return false;
	lt->heap = heap;
	lt->heap_cap = cap;
	return true;
}

static bool
heap_less(const struct locktable *lt, size_t a, size_t b)
{
	return lt->heap[a]->expiry_ms < lt->heap[b]->expiry_ms;
}

static void
heap_swap(struct locktable *lt, size_t a, size_t b)
{
	struct lt_hold	*h = lt->heap[a];

	lt->heap[a] = lt->heap[b];
	lt->heap[b] = h;
	lt->heap[a]->heap_idx = (uint32_t)a;
	lt->heap[b]->heap_idx = (uint32_t)b;
}

static void
heap_up(struct locktable *lt, size_t i)
{
	while (i > 0 && heap_less(lt, i, (i - 1) / 2)) {
		heap_swap(lt, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void
heap_down(struct locktable *lt, size_t i)
{
	size_t	c;

	while ((c = 2 * i + 1) < lt->heap_len) {
		if (c + 1 < lt->heap_len && heap_less(lt, c + 1, c))
			c++;
		if (!heap_less(lt, c, i))
			break;
		heap_swap(lt, c, i);
		i = c;
	}
}

static void
heap_fix(struct locktable *lt, size_t i)
{
	if (i > 0 && heap_less(lt, i, (i - 1) / 2))
		heap_up(lt, i);
	else
		heap_down(lt, i);
}

/* The room was made by heap_reserve(). */
static void
heap_push(struct locktable *lt, struct lt_hold *h)
{
	h->heap_idx = (uint32_t)lt->heap_len;
	lt->heap[lt->heap_len++] = h;
	heap_up(lt, h->heap_idx);
}

static void
heap_remove(struct locktable *lt, struct lt_hold *h)
{
	size_t	i = h->heap_idx, last = --lt->heap_len;

	if (i == last)
		return;
	lt->heap[i] = lt->heap[last];
	lt->heap[i]->heap_idx = (uint32_t)i;
	heap_fix(lt, i);
}

static uint64_t
next_token(struct locktable *lt)
{
	if (lt->hooks.next_token != NULL)
		return lt->hooks.next_token(lt->hooks.arg);
	return ++lt->last_token;
}

/* One grant, however many keys (PROTOCOL.md, STATS). */
static void
grant_count(struct locktable *lt, uint64_t waited_ms)
{
	lt->c.grants++;
	kl_hist_add(&lt->c.wait_ms, waited_ms);
}

static void
hold_grant(struct locktable *lt, struct lt_hold *h, struct lt_key *k,
    struct lt_owner *o, const struct lt_grant *g)
{
	memset(h, 0, sizeof(*h));
	h->key = k;
	h->owner = o;
	h->token = g->token;
	h->granted_ms = g->now_ms;
	h->mode = (uint8_t)g->mode;
	h->kprev = k->holders_tail;
	if (k->holders_tail != NULL)
		k->holders_tail->knext = h;
	else
		k->holders = h;
	k->holders_tail = h;
	k->nholders++;
	h->onext = o->holds;
	if (o->holds != NULL)
		o->holds->oprev = h;
	o->holds = h;
	o->nholds++;
	lt->c.held++;
	if (g->ttl_ms != 0) {
		h->expiry_ms = g->now_ms + g->ttl_ms;
		heap_push(lt, h);
	}
}

/* Ends one hold, whatever the cause; counter names the cause, if counted. */
static void
hold_end(struct locktable *lt, struct lt_hold *h, uint64_t now_ms,
    uint64_t *counter)
{
	struct lt_key	*k = h->key;
	struct lt_owner	*o = h->owner;

	if (h->kprev != NULL)
		h->kprev->knext = h->knext;
	else
		k->holders = h->knext;
	if (h->knext != NULL)
		h->knext->kprev = h->kprev;
	else
		k->holders_tail = h->kprev;
	k->nholders--;
	if (h->oprev != NULL)
		h->oprev->onext = h->onext;
	else
		o->holds = h->onext;
	if (h->onext != NULL)
		h->onext->oprev = h->oprev;
	o->nholds--;
	if (h->expiry_ms != 0)
		heap_remove(lt, h);
	lt->c.held--;
	kl_hist_add(&lt->c.hold_ms, ms_since(now_ms, h->granted_ms));
	if (counter != NULL)
		(*counter)++;
	kl_free(h);
	key_touch(lt, k);
}

/* Walks whichever list is shorter: the key's holders or the owner's. */
static struct lt_hold *
hold_find(const struct lt_key *k, const struct lt_owner *o)
{
	struct lt_hold	*h;

	if (o->nholds <= k->nholders) {
		for (h = o->holds; h != NULL; h = h->onext)
			if (h->key == k)
				return h;
	} else {
		for (h = k->holders; h != NULL; h = h->knext)
			if (h->owner == o)
				return h;
	}
	return NULL;
}

static struct lt_hold *
owner_find_hold(const struct locktable *lt, const struct lt_owner *o,
    const char *key, size_t len)
{
	struct lt_key	*k;

	k = key_lookup(lt, key, len, key_hash(lt, key, len));
	return k == NULL ? NULL : hold_find(k, o);
}

static void
queue_append(struct locktable *lt, struct lt_key *k, struct lt_slot *s)
{
	s->key = k;
	s->next = NULL;
	s->prev = k->qtail;
	if (k->qtail != NULL)
		k->qtail->next = s;
	else
		k->qhead = s;
	k->qtail = s;
	key_add_waiter(lt, k);
}

static void
queue_unlink(struct locktable *lt, struct lt_slot *s)
{
	struct lt_key	*k = s->key;

	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		k->qhead = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	else
		k->qtail = s->prev;
	s->prev = s->next = NULL;
	key_remove_waiter(lt, k);
}

static void
req_free(struct lt_req *r)
{
	uint32_t	i;

	for (i = 0; i < r->nkeys; i++)
		kl_free(r->slots[i].hold);
	kl_free(r);
}

/* PROTOCOL.md, Per-key FIFO: at the head of every queue, and admitted. */
static bool
req_is_grantable(const struct lt_req *r)
{
	uint32_t	i;

	for (i = 0; i < r->nkeys; i++)
		if (r->slots[i].prev != NULL ||
		    !key_admits(r->slots[i].key, (enum lt_mode)r->mode))
			return false;
	return true;
}

/*
 * Grants a queued request on all its keys as one grant. Its other keys may
 * now have a grantable head (a shared batch, say), so they are settled too;
 * the key being settled is not pushed again. The owner hears of it once
 * the table is consistent for this grant.
 */
static void
req_grant(struct locktable *lt, struct lt_req *r, struct lt_key *settling,
    uint64_t now_ms)
{
	struct lt_owner	*o = r->owner;
	struct lt_grant	 g;
	struct lt_slot	*s;
	uint64_t	 waited = ms_since(now_ms, r->arrival_ms);
	uint32_t	 i;

	g.token = next_token(lt);
	g.now_ms = now_ms;
	g.ttl_ms = r->ttl_ms;
	g.mode = (enum lt_mode)r->mode;
	o->wait = NULL;
	lt->c.waiting--;
	if (r->ttl_ms != 0)
		lt->ttl_reserved -= r->nkeys;
	for (i = 0; i < r->nkeys; i++) {
		s = &r->slots[i];
		queue_unlink(lt, s);
		hold_grant(lt, s->hold, s->key, o, &g);
		s->hold = NULL;
		s->key->wait_ms_total += waited;
		if (s->key != settling && s->key->nwaiters > 0)
			key_mark_dirty(lt, s->key);
	}
	grant_count(lt, waited);
	kl_free(r);
	if (lt->hooks.granted != NULL)
		lt->hooks.granted(lt->hooks.arg, o, g.token, waited);
}

/* Takes a queued request out of every queue; the caller settles. */
static void
req_withdraw(struct locktable *lt, struct lt_req *r)
{
	struct lt_key	*k;
	uint32_t	 i;

	for (i = 0; i < r->nkeys; i++) {
		k = r->slots[i].key;
		queue_unlink(lt, &r->slots[i]);
		key_touch(lt, k);
	}
	r->owner->wait = NULL;
	lt->c.waiting--;
	if (r->ttl_ms != 0)
		lt->ttl_reserved -= r->nkeys;
	req_free(r);
}

/*
 * Grants whatever became grantable: every key whose holders or queue head
 * changed is on the dirty list; each is popped and its head granted for as
 * long as it can be. Granting only adds holders and moves heads, so a head
 * refused here can become grantable only through another dirty key. Entries
 * left empty are freed as they are popped.
 */
static void
settle(struct locktable *lt, uint64_t now_ms)
{
	struct lt_key	*k;

	while ((k = lt->dirty) != NULL) {
		lt->dirty = k->dirty_next;
		k->dirty_next = NULL;
		k->dirty = 0;
		while (!lt->frozen && k->qhead != NULL &&
		    req_is_grantable(k->qhead->req))
			req_grant(lt, k->qhead->req, k, now_ms);
		if (k->nholders == 0 && k->nwaiters == 0 && !k->dirty)
			key_free(lt, k);
	}
}

static bool
probes_init(struct locktable *lt, struct lt_probes *ps,
    const struct lt_acquire *a)
{
	size_t	i, setsize = 2 * LT_PROBES_STACK;

	ps->p = ps->sp;
	ps->set = ps->sset;
	ps->n = 0;
	if (a->nkeys > LT_PROBES_STACK) {
		while (setsize < 2 * a->nkeys)
			setsize *= 2;
		ps->p = kl_malloc(a->nkeys * sizeof(*ps->p) +
		    setsize * sizeof(*ps->set));
		if (ps->p == NULL)
			return false;
		ps->set = (void *)(ps->p + a->nkeys);
	}
	ps->setsize = setsize;
	memset(ps->set, 0xff, setsize * sizeof(*ps->set));
	for (i = 0; i < a->nkeys; i++)
		probes_add(lt, ps, a->keys[i], a->keylens[i]);
	return true;
}

/* PROTOCOL.md: duplicate keys in one request count once. */
static void
probes_add(struct locktable *lt, struct lt_probes *ps, const char *key,
    size_t len)
{
	struct lt_probe	*q;
	uint32_t	 hash = key_hash(lt, key, len);
	size_t		 mask = ps->setsize - 1, j;

	for (j = hash & mask; ps->set[j] != UINT32_MAX; j = (j + 1) & mask) {
		q = &ps->p[ps->set[j]];
		if (q->hash == hash && q->len == len &&
		    memcmp(q->key, key, len) == 0)
			return;
	}
	ps->set[j] = (uint32_t)ps->n;
	q = &ps->p[ps->n++];
	q->key = key;
	q->len = len;
	q->hash = hash;
	q->h = NULL;
	q->fresh = false;
	q->k = key_lookup(lt, key, len, hash);
}

/* Allocates a hold per key and the missing entries, all or nothing. */
static bool
probes_alloc(struct lt_probes *ps, uint32_t limit)
{
	struct lt_probe	*p;
	size_t		 i;

	for (i = 0; i < ps->n; i++) {
		p = &ps->p[i];
		if ((p->h = kl_malloc(sizeof(*p->h))) == NULL)
			break;
		if (p->k != NULL)
			continue;
		if ((p->k = key_new(p, limit)) == NULL)
			break;
		p->fresh = true;
	}
	if (i == ps->n)
		return true;
	probes_unalloc(ps);
	return false;
}

static void
probes_unalloc(struct lt_probes *ps)
{
	struct lt_probe	*p;
	size_t		 i;

	for (i = 0; i < ps->n; i++) {
		p = &ps->p[i];
		kl_free(p->h);
		p->h = NULL;
		if (p->fresh) {
			kl_free(p->k);
			p->k = NULL;
			p->fresh = false;
		}
	}
}

static void
probes_done(struct lt_probes *ps)
{
	if (ps->p != ps->sp)
		kl_free(ps->p);
}

static struct lt_key *
probe_commit(struct locktable *lt, struct lt_probe *p)
{
	if (p->fresh) {
		key_insert(lt, p->k);
		p->fresh = false;
	}
	return p->k;
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
 * holder is (PROTOCOL.md, Deadlock detection). */
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
	for (h = k->holders; h != NULL && !d->oom; h = h->knext) {
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
	struct lt_hold	*h;
	enum lt_mode	 held;

	if (pred != NULL)
		dl_and(d, from, probe, pred->req->owner);
	if (k->holders == NULL)
		return;
	if (k->limit > 1) {
		if (pred == NULL && k->nholders >= k->limit)
			dl_or(d, from, probe, k);
		return;
	}
	held = (enum lt_mode)k->holders->mode;
	if (!modes_conflict(mode, held) || (pred != NULL &&
	    modes_conflict((enum lt_mode)pred->req->mode, held)))
		return;
	for (h = k->holders; h != NULL && !d->oom; h = h->knext)
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
 * PROTOCOL.md, Deadlock detection: would o, waiting with its new request
 * at the tail of each key's queue, be stuck for good? The stuck owners are
 * the largest set in which everybody waits on a member through an AND-edge
 * or on all members of an OR-group; it is found as the complement of those
 * that can progress. A least fixpoint of "depends on o" would miss a cycle
 * that also loops through an OR-group member other than o. Since every
 * request that would close a cycle is refused, o can only be stuck in one
 * it closes itself.
 * If memory runs out the check fails open: the request may wait, as on a
 * server without the check, and its timeout still ends the wait.
 */
static size_t
dl_search(struct locktable *lt, struct lt_owner *o,
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
			dl_key(&d, 0, (uint32_t)i, k, mode, k->qtail);
	dl_expand(&d);
	if (!d.oom && dl_propagate(&d))
		found = dl_verdict(&d);
	kl_free(d.node);
	kl_free(d.edge);
	kl_free(d.group);
	kl_free(d.src);
	return found;
}

/* Requests proto_parse() never produces; see the header. */
static enum kl_err
acquire_validate(const struct lt_acquire *a)
{
	size_t	i;

	if (a->nkeys == 0 || a->limit == 0 ||
	    (a->mode != LT_EXCLUSIVE && a->mode != LT_SHARED) ||
	    (a->mode == LT_SHARED && a->limit > 1))
		return KL_ERR_SYNTAX;
	if (a->nkeys > KL_KEYS_HARD_MAX) {
		errno = 0;
		return KL_ERR_LIMIT;
	}
	for (i = 0; i < a->nkeys; i++)
		if (a->keylens[i] == 0 || a->keylens[i] > KL_KEY_MAX)
			return KL_ERR_BADKEY;
	return KL_OK;
}

/* PROTOCOL.md, Which error wins: LIMIT, HELD, CONFLICT. */
static enum kl_err
acquire_check(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, const struct lt_probes *ps,
    struct lt_blocker *why)
{
	struct lt_key	*k;
	size_t		 i;

	if (a->max_holds != 0 && o->nholds + ps->n > a->max_holds) {
		errno = 0;
		return KL_ERR_LIMIT;
	}
	for (i = 0; i < ps->n; i++) {
		if ((k = ps->p[i].k) != NULL && hold_find(k, o) != NULL) {
			why->key = k->key;
			why->keylen = k->keylen;
			return KL_ERR_HELD;
		}
	}
	for (i = 0; i < ps->n; i++) {
		if ((k = ps->p[i].k) != NULL && k->limit != a->limit) {
			lt->c.conflicts++;
			why->key = k->key;
			why->keylen = k->keylen;
			return KL_ERR_CONFLICT;
		}
	}
	return KL_OK;
}

static bool
acquire_is_grantable(const struct lt_probes *ps, enum lt_mode mode)
{
	size_t	i;

	for (i = 0; i < ps->n; i++)
		if (ps->p[i].k != NULL && key_blocks(ps->p[i].k, mode))
			return false;
	return true;
}

/*
 * BUSY, DEADLOCK, LOCKED for a request that cannot be granted at once.
 * BUSY names a blocking key with too many waiters: with max_waiters >= 1
 * any such key blocks, and with 0 any blocking key will do ("grant now or
 * refuse with BUSY").
 */
static enum kl_err
acquire_refuse(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, const struct lt_probes *ps, uint64_t now_ms,
    struct lt_blocker *why)
{
	struct lt_key	*k;
	size_t		 i;

	for (i = 0; i < ps->n && a->max_waiters >= 0; i++) {
		k = ps->p[i].k;
		if (k != NULL && key_blocks(k, a->mode) &&
		    (int64_t)k->nwaiters >= a->max_waiters) {
			lt->c.busy++;
			blocker_fill(k, a->mode, now_ms, why);
			return KL_ERR_BUSY;
		}
	}
	/* Nobody can wait on an owner that holds nothing. */
	if (o->nholds > 0 && (i = dl_search(lt, o, ps, a->mode)) != LT_NONE) {
		lt->c.deadlocks++;
		blocker_fill(ps->p[i].k, a->mode, now_ms, why);
		return KL_ERR_DEADLOCK;
	}
	if (!a->try)
		return KL_OK;
	for (i = 0; i < ps->n; i++) {
		k = ps->p[i].k;
		if (k != NULL && key_blocks(k, a->mode)) {
			blocker_fill(k, a->mode, now_ms, why);
			break;
		}
	}
	return KL_ERR_LOCKED;
}

/* Allocates everything first, so that failure leaves the table as it was. */
static enum kl_err
acquire_grant(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, struct lt_probes *ps, uint64_t now_ms,
    uint64_t *token)
{
	struct lt_grant	 g;
	struct lt_probe	*p;
	size_t		 i;

	if (a->ttl_ms != 0 && !heap_reserve(lt, ps->n))
		return nomem();
	if (!probes_alloc(ps, a->limit))
		return nomem();
	g.token = next_token(lt);
	g.now_ms = now_ms;
	g.ttl_ms = a->ttl_ms;
	g.mode = a->mode;
	for (i = 0; i < ps->n; i++) {
		p = &ps->p[i];
		hold_grant(lt, p->h, probe_commit(lt, p), o, &g);
		p->h = NULL;
	}
	grant_count(lt, 0);
	*token = g.token;
	return KL_OK;
}

/*
 * Queues the request at the tail of every key's queue at once (PROTOCOL.md,
 * Multi-key requests are atomic), with the holds its grant will need.
 */
static enum kl_err
acquire_queue(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, struct lt_probes *ps, uint64_t now_ms)
{
	struct lt_req	*r;
	struct lt_slot	*s;
	size_t		 i;

	if (a->ttl_ms != 0 && !heap_reserve(lt, ps->n))
		return nomem();
	r = kl_malloc(sizeof(*r) + ps->n * sizeof(r->slots[0]));
	if (r == NULL)
		return nomem();
	if (!probes_alloc(ps, a->limit)) {
		kl_free(r);
		return nomem();
	}
	r->owner = o;
	r->arrival_ms = now_ms;
	r->ttl_ms = a->ttl_ms;
	r->nkeys = (uint32_t)ps->n;
	r->mode = (uint8_t)a->mode;
	for (i = 0; i < ps->n; i++) {
		s = &r->slots[i];
		s->req = r;
		s->hold = ps->p[i].h;
		ps->p[i].h = NULL;
		queue_append(lt, probe_commit(lt, &ps->p[i]), s);
	}
	o->wait = r;
	lt->c.waiting++;
	if (a->ttl_ms != 0)
		lt->ttl_reserved += ps->n;
	return KL_OK;
}

enum kl_err
locktable_acquire(struct locktable *lt, struct lt_owner *o,
    const struct lt_acquire *a, uint64_t now_ms, bool *granted,
    uint64_t *token, struct lt_blocker *why)
{
	struct lt_probes	ps;
	struct lt_blocker	dummy;
	enum kl_err		err;

	if (why == NULL)
		why = &dummy;
	memset(why, 0, sizeof(*why));
	*granted = false;
	*token = 0;
	if ((err = acquire_validate(a)) != KL_OK)
		return err;
	if (o->wait != NULL) {
		errno = EBUSY;
		return KL_ERR_LIMIT;
	}
	if (!probes_init(lt, &ps, a))
		return nomem();
	if ((err = acquire_check(lt, o, a, &ps, why)) == KL_OK) {
		if (acquire_is_grantable(&ps, a->mode)) {
			err = acquire_grant(lt, o, a, &ps, now_ms, token);
			*granted = err == KL_OK;
		} else if ((err = acquire_refuse(lt, o, a, &ps, now_ms,
		    why)) == KL_OK)
			err = acquire_queue(lt, o, a, &ps, now_ms);
	}
	probes_done(&ps);
	return err;
}

bool
locktable_wait_blocker(struct locktable *lt, const struct lt_owner *o,
    uint64_t now_ms, struct lt_blocker *why)
{
	const struct lt_req	*r = o->wait;
	const struct lt_slot	*s;
	uint32_t		 i;

	(void)lt;
	if (r == NULL)
		return false;
	for (i = 0; i < r->nkeys; i++) {
		s = &r->slots[i];
		if (s->prev != NULL ||
		    !key_admits(s->key, (enum lt_mode)r->mode))
			break;
	}
	/* A settled table has no grantable request; be safe anyway. */
	if (i == r->nkeys)
		i = 0;
	blocker_fill(r->slots[i].key, (enum lt_mode)r->mode, now_ms, why);
	return true;
}

bool
locktable_withdraw(struct locktable *lt, struct lt_owner *o, uint64_t now_ms,
    enum lt_why why)
{
	if (o->wait == NULL)
		return false;
	req_withdraw(lt, o->wait);
	if (why == LT_WHY_TIMEOUT)
		lt->c.timeouts++;
	settle(lt, now_ms);
	return true;
}

/*
 * Checks every key before releasing any. A key seen again after its hold
 * ended is a duplicate (o cannot regain it: nothing settles in between).
 */
enum kl_err
locktable_release(struct locktable *lt, struct lt_owner *o,
    const char *const *keys, const size_t *keylens, size_t nkeys,
    uint64_t now_ms, size_t *n, size_t *bad_index)
{
	struct lt_hold	*h;
	size_t		 i, done = 0;

	for (i = 0; i < nkeys; i++) {
		if (owner_find_hold(lt, o, keys[i], keylens[i]) == NULL) {
			if (bad_index != NULL)
				*bad_index = i;
			return KL_ERR_NOTHELD;
		}
	}
	for (i = 0; i < nkeys; i++) {
		if ((h = owner_find_hold(lt, o, keys[i], keylens[i])) != NULL) {
			hold_end(lt, h, now_ms, &lt->c.releases);
			done++;
		}
	}
	settle(lt, now_ms);
	if (n != NULL)
		*n = done;
	return KL_OK;
}

size_t
locktable_release_owner(struct locktable *lt, struct lt_owner *o,
    uint64_t now_ms, enum lt_why why)
{
	uint64_t	*counter = why_counter(lt, why);
	size_t		 n = 0;

	if (o->wait != NULL)
		req_withdraw(lt, o->wait);
	while (o->holds != NULL) {
		hold_end(lt, o->holds, now_ms, counter);
		n++;
	}
	settle(lt, now_ms);
	return n;
}

/*
 * All or nothing, as locktable_release(). The mark counts duplicates once
 * and is cleared before returning.
 */
enum kl_err
locktable_refresh(struct locktable *lt, struct lt_owner *o,
    const char *const *keys, const size_t *keylens, size_t nkeys,
    uint64_t ttl_ms, uint64_t now_ms, size_t *n, size_t *bad_index)
{
	struct lt_hold	*h;
	size_t		 i, need = 0, done = 0;

	if (ttl_ms == 0)
		return KL_ERR_SYNTAX;
	for (i = 0; i < nkeys; i++) {
		if ((h = owner_find_hold(lt, o, keys[i], keylens[i])) == NULL) {
			if (bad_index != NULL)
				*bad_index = i;
			return KL_ERR_NOTHELD;
		}
		need += h->expiry_ms == 0;
	}
	if (!heap_reserve(lt, need))
		return nomem();
	for (i = 0; i < nkeys; i++) {
		h = owner_find_hold(lt, o, keys[i], keylens[i]);
		if (h->mark)
			continue;
		h->mark = 1;
		done++;
		if (h->expiry_ms == 0) {
			h->expiry_ms = now_ms + ttl_ms;
			heap_push(lt, h);
		} else {
			h->expiry_ms = now_ms + ttl_ms;
			heap_fix(lt, h->heap_idx);
		}
	}
	for (i = 0; i < nkeys; i++)
		owner_find_hold(lt, o, keys[i], keylens[i])->mark = 0;
	if (n != NULL)
		*n = done;
	return KL_OK;
}

size_t
locktable_expire(struct locktable *lt, uint64_t now_ms)
{
	size_t	n = 0;

	while (lt->heap_len > 0 && lt->heap[0]->expiry_ms <= now_ms) {
		hold_end(lt, lt->heap[0], now_ms, &lt->c.expired);
		n++;
	}
	settle(lt, now_ms);
	return n;
}

uint64_t
locktable_next_expiry(const struct locktable *lt)
{
	return lt->heap_len > 0 ? lt->heap[0]->expiry_ms : UINT64_MAX;
}

const struct lt_counters *
locktable_counters(const struct locktable *lt)
{
	return &lt->c;
}

const struct lt_key *
locktable_find(const struct locktable *lt, const char *key, size_t keylen)
{
	return key_lookup(lt, key, keylen, key_hash(lt, key, keylen));
}

void
locktable_key_view(const struct lt_key *k, struct lt_key_view *v)
{
	v->key = k->key;
	v->keylen = k->keylen;
	v->limit = k->limit;
	v->nholders = k->nholders;
	v->nwaiters = k->nwaiters;
	v->max_waiters = k->max_waiters;
	v->wait_ms_total = k->wait_ms_total;
}

void
locktable_key_walk(const struct lt_key *k, uint64_t now_ms,
    bool (*holder)(void *, const struct lt_holder_view *),
    bool (*waiter)(void *, const struct lt_waiter_view *), void *arg)
{
	struct lt_holder_view	 hv;
	struct lt_waiter_view	 wv;
	const struct lt_hold	*h;
	const struct lt_slot	*s;

	for (h = k->holders; h != NULL; h = h->knext) {
		hv.owner = h->owner;
		hv.token = h->token;
		hv.mode = (enum lt_mode)h->mode;
		hv.held_ms = ms_since(now_ms, h->granted_ms);
		hv.expires_in_ms = 0;
		if (h->expiry_ms != 0)
			hv.expires_in_ms = h->expiry_ms > now_ms ?
			    h->expiry_ms - now_ms : 1;
		if (!holder(arg, &hv))
			return;
	}
	for (s = k->qhead; s != NULL; s = s->next) {
		wv.owner = s->req->owner;
		wv.mode = (enum lt_mode)s->req->mode;
		wv.waited_ms = ms_since(now_ms, s->req->arrival_ms);
		wv.nkeys = s->req->nkeys;
		if (!waiter(arg, &wv))
			return;
	}
}

static void
hot_swap(const struct lt_key **h, size_t a, size_t b)
{
	const struct lt_key	*t = h[a];

	h[a] = h[b];
	h[b] = t;
}

static void
hot_up(const struct lt_key **h, size_t i)
{
	while (i > 0 && h[i]->nwaiters < h[(i - 1) / 2]->nwaiters) {
		hot_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void
hot_down(const struct lt_key **h, size_t n, size_t i)
{
	size_t	c;

	while ((c = 2 * i + 1) < n) {
		if (c + 1 < n && h[c + 1]->nwaiters < h[c]->nwaiters)
			c++;
		if (h[c]->nwaiters >= h[i]->nwaiters)
			break;
		hot_swap(h, c, i);
		i = c;
	}
}

/* Keeps the max keys with most waiters seen so far, as a min-heap. */
static size_t
hot_offer(const struct lt_key **h, size_t n, size_t max,
    const struct lt_key *k)
{
	if (n < max) {
		h[n] = k;
		hot_up(h, n);
		return n + 1;
	}
	if (k->nwaiters > h[0]->nwaiters) {
		h[0] = k;
		hot_down(h, n, 0);
	}
	return n;
}

size_t
locktable_hot_keys(const struct locktable *lt, const struct lt_key **out,
    size_t max)
{
	const struct lt_key	*k;
	size_t			 n = 0, i;

	if (max == 0)
		return 0;
	for (k = lt->hot; k != NULL; k = k->hot_next)
		n = hot_offer(out, n, max, k);
	/* Heapsort: popping the fewest to the end leaves most first. */
	for (i = n; i > 1; i--) {
		hot_swap(out, 0, i - 1);
		hot_down(out, i - 1, 0);
	}
	for (i = 0; i < lt->nbuckets && n < max; i++)
		for (k = lt->buckets[i]; k != NULL && n < max; k = k->next)
			if (k->nwaiters == 0)
				out[n++] = k;
	return n;
}

/* Walks are bounded by the counts they check, so a cycle cannot hang. */
static const char *
check_holders(const struct lt_key *k, uint64_t *held, uint64_t *ttl)
{
	const struct lt_hold	*h, *prev = NULL;
	uint32_t		 n = 0;

	for (h = k->holders; h != NULL; prev = h, h = h->knext) {
		if (++n > k->nholders)
			return "key has more holders than nholders";
		if (h->key != k || h->kprev != prev)
			return "holder list links broken";
		if (h->mode != k->holders->mode)
			return "shared and exclusive holders mixed";
		if (k->limit > 1 && h->mode != LT_EXCLUSIVE)
			return "shared holder of a semaphore";
		if (h->owner == NULL || h->mark)
			return "holder without owner, or marked";
		*ttl += h->expiry_ms != 0;
	}
	if (n != k->nholders || k->holders_tail != prev)
		return "key nholders or holder tail wrong";
	if (k->limit > 1 && n > k->limit)
		return "more holders than the semaphore's limit";
	if (k->limit == 1 && n > 1 && k->holders->mode == LT_EXCLUSIVE)
		return "two exclusive holders";
	*held += n;
	return NULL;
}

static const char *
check_queue(const struct lt_key *k, uint64_t *nreq)
{
	const struct lt_slot	*s, *prev = NULL;
	const struct lt_req	*r;
	uint32_t		 n = 0;

	for (s = k->qhead; s != NULL; prev = s, s = s->next) {
		if (++n > k->nwaiters)
			return "key has more waiters than nwaiters";
		r = s->req;
		if (s->key != k || s->prev != prev || s->hold == NULL)
			return "queue links broken";
		if (s < r->slots || s >= r->slots + r->nkeys)
			return "slot not in its request";
		if (r->owner == NULL || r->owner->wait != r)
			return "queued request not its owner's wait";
		if (k->limit > 1 && r->mode != LT_EXCLUSIVE)
			return "shared request on a semaphore";
		*nreq += s == &r->slots[0];
	}
	if (n != k->nwaiters || k->qtail != prev)
		return "key nwaiters or queue tail wrong";
	if (k->max_waiters < n)
		return "key max_waiters below nwaiters";
	return NULL;
}

static const char *
check_key(const struct locktable *lt, const struct lt_key *k, size_t bucket,
    uint64_t *tally)
{
	const char	*err;

	if (k->hash != key_hash(lt, k->key, k->keylen) ||
	    (k->hash & (lt->nbuckets - 1)) != bucket)
		return "key in the wrong bucket or with a wrong hash";
	if (k->keylen == 0 || k->keylen > KL_KEY_MAX || k->key[k->keylen])
		return "key bytes malformed";
	if (k->nholders == 0 && k->nwaiters == 0)
		return "empty key entry not freed";
	if (k->dirty)
		return "key left dirty after settling";
	if (k->limit == 0)
		return "key limit 0";
	if ((err = check_holders(k, &tally[1], &tally[3])) != NULL)
		return err;
	if ((err = check_queue(k, &tally[2])) != NULL)
		return err;
	if (!lt->frozen && k->qhead != NULL && req_is_grantable(k->qhead->req))
		return "a queued request is grantable (settling incomplete)";
	if (k->max_waiters > lt->c.max_waiters)
		return "counter max_waiters below a key's";
	tally[4] += k->nwaiters > 0;
	return NULL;
}

/* tally: keys, holds, requests, holds with a ttl, keys with waiters. */
static const char *
check_keys(const struct locktable *lt, uint64_t *tally)
{
	const struct lt_key	*k;
	const char		*err;
	size_t			 i;

	if (lt->dirty != NULL)
		return "dirty list not empty";
	if (lt->nbuckets < LT_BUCKETS_MIN ||
	    (lt->nbuckets & (lt->nbuckets - 1)) != 0)
		return "bucket count not a power of two";
	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = k->next) {
			if (++tally[0] > lt->c.keys)
				return "more entries than the keys gauge";
			if ((err = check_key(lt, k, i, tally)) != NULL)
				return err;
		}
	}
	if (tally[0] != lt->c.keys)
		return "keys gauge wrong";
	if (tally[1] != lt->c.held)
		return "held gauge wrong";
	if (tally[2] != lt->c.waiting)
		return "waiting gauge wrong";
	return NULL;
}

static const char *
check_hot(const struct locktable *lt, uint64_t nhot)
{
	const struct lt_key	*k, *prev = NULL;
	uint64_t		 n = 0;

	for (k = lt->hot; k != NULL; prev = k, k = k->hot_next) {
		if (++n > nhot)
			return "hot list longer than keys with waiters";
		if (k->nwaiters == 0 || k->hot_prev != prev)
			return "hot list holds a key without waiters";
		if (locktable_find(lt, k->key, k->keylen) != k)
			return "hot list key not in the table";
	}
	return n == nhot ? NULL : "key with waiters missing from hot list";
}

static const char *
check_heap(const struct locktable *lt, uint64_t nttl)
{
	const struct lt_hold	*h;
	size_t			 i;

	if (lt->heap_len != nttl)
		return "ttl heap size differs from holds with a ttl";
	if (lt->heap_cap < lt->heap_len + lt->ttl_reserved)
		return "ttl heap room for queued requests not reserved";
	for (i = 0; i < lt->heap_len; i++) {
		h = lt->heap[i];
		if (h->heap_idx != i || h->expiry_ms == 0)
			return "ttl heap index wrong";
		if (i > 0 && h->expiry_ms < lt->heap[(i - 1) / 2]->expiry_ms)
			return "ttl heap order broken";
	}
	return NULL;
}

static const char *
check_owner(const struct locktable *lt, const struct lt_owner *o,
    uint64_t *reserved)
{
	const struct lt_hold	*h, *prev = NULL;
	const struct lt_slot	*s;
	size_t			 n = 0;
	uint32_t		 i;

	if (o->lt != lt)
		return "owner of another table";
	for (h = o->holds; h != NULL; prev = h, h = h->onext) {
		if (++n > o->nholds || h->owner != o || h->oprev != prev)
			return "owner hold list broken";
		if (locktable_find(lt, h->key->key, h->key->keylen) != h->key)
			return "owner holds a key not in the table";
	}
	if (n != o->nholds)
		return "owner nholds wrong";
	if (o->wait == NULL)
		return NULL;
	if (o->wait->owner != o || o->wait->nkeys == 0)
		return "owner's wait is somebody else's";
	for (i = 0; i < o->wait->nkeys; i++) {
		s = &o->wait->slots[i];
		if (locktable_find(lt, s->key->key, s->key->keylen) != s->key)
			return "waited key not in the table";
		if ((s->prev == NULL) != (s->key->qhead == s))
			return "slot not linked in its queue";
	}
	if (o->wait->ttl_ms != 0)
		*reserved += o->wait->nkeys;
	return NULL;
}

static const char *
check_owners(const struct locktable *lt)
{
	const struct lt_owner	*o, *prev = NULL;
	const char		*err;
	uint64_t		 held = 0, waiting = 0, reserved = 0;

	for (o = lt->owners; o != NULL; prev = o, o = o->next) {
		if (o->prev != prev)
			return "owner list links broken";
		if ((err = check_owner(lt, o, &reserved)) != NULL)
			return err;
		held += o->nholds;
		waiting += o->wait != NULL;
		if (held > lt->c.held || waiting > lt->c.waiting)
			return "owners hold or wait more than the gauges";
	}
	if (held != lt->c.held || waiting != lt->c.waiting)
		return "owners' holds or waits differ from the gauges";
	if (reserved != lt->ttl_reserved)
		return "ttl reservation differs from queued ttl requests";
	return NULL;
}

const char *
locktable_check(const struct locktable *lt)
{
	uint64_t	 tally[5] = { 0, 0, 0, 0, 0 };
	const char	*err;

	if ((err = check_keys(lt, tally)) != NULL)
		return err;
	if ((err = check_hot(lt, tally[4])) != NULL)
		return err;
	if ((err = check_heap(lt, tally[3])) != NULL)
		return err;
	return check_owners(lt);
}

void
locktable_owner_free(struct locktable *lt, struct lt_owner *o,
    uint64_t now_ms)
{
	if (o == NULL)
		return;
	if (o->lt != NULL) {
		locktable_release_owner(lt, o, now_ms, LT_WHY_DISCONNECT);
		if (o->prev != NULL)
			o->prev->next = o->next;
		else
			lt->owners = o->next;
		if (o->next != NULL)
			o->next->prev = o->prev;
	}
	kl_free(o);
}

/*
 * Owners outlive the table: each is detached (holds and wait dropped,
 * nothing counted) and later freed by locktable_owner_free(), which then
 * does not touch the table.
 */
void
locktable_free(struct locktable *lt)
{
	struct lt_owner	*o, *onext;
	struct lt_key	*k, *knext;
	struct lt_hold	*h, *hnext;
	size_t		 i;

	if (lt == NULL)
		return;
	for (o = lt->owners; o != NULL; o = onext) {
		onext = o->next;
		if (o->wait != NULL)
			req_free(o->wait);
		o->wait = NULL;
		o->holds = NULL;
		o->nholds = 0;
		o->lt = NULL;
		o->prev = o->next = NULL;
	}
	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = knext) {
			knext = k->next;
			for (h = k->holders; h != NULL; h = hnext) {
				hnext = h->knext;
				kl_free(h);
			}
			kl_free(k);
		}
	}
	kl_free(lt->buckets);
	kl_free(lt->heap);
	kl_free(lt);
}
