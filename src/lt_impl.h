/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's private header, shared only by locktable.c and the
 * lt_*.c files that implement locktable.h with it: the structures behind
 * its opaque types, the limits they are sized by, and the few functions one
 * piece calls in another, all named lt_*. No other module includes it
 * (HACKING.md, Headers); like the code it serves it declares nothing that
 * reads the clock, a socket or a global.
 */
#ifndef LT_IMPL_H
#define LT_IMPL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locktable.h"

#define LT_BUCKETS_MIN	16	/* a power of two */
#define LT_PROBES_STACK	8	/* keys of a request looked up without malloc */
#define LT_NONE		SIZE_MAX
#define LT_NO_TTL	UINT32_MAX

/*
 * One key held by one owner in one grant. The first holder of a key lives
 * inside the key's entry (inkey), so the common lock, one holder and
 * nobody waiting, costs one allocation; any other hold is a struct
 * lt_xhold of its own.
 */
struct lt_hold {
	struct lt_owner	*owner;
	struct lt_hold	*oprev, *onext;	/* the owner's holds */
	uint64_t	 token;
	uint64_t	 granted_ms;
	uint32_t	 heap_idx;	/* in lt->heap; LT_NO_TTL: no ttl */
	uint8_t		 mode;		/* enum lt_mode */
	uint8_t		 mark;		/* refresh: already counted */
	uint8_t		 inkey;		/* it is lt_key.own */
};

/* A hold beyond a key's own: another holder, or a queued request's. */
struct lt_xhold {
	struct lt_hold	 h;		/* first, for lt_xhold_of() */
	struct lt_key	*key;
	struct lt_xhold	*kprev, *knext;	/* key's other holders */
};

/*
 * A request's place in one key's queue. Its hold is allocated when the
 * request is queued, so that a later grant cannot fail for want of memory.
 */
struct lt_slot {
	struct lt_req	*req;
	struct lt_key	*key;
	struct lt_slot	*prev, *next;
	struct lt_xhold	*hold;
};

struct lt_req {
	struct lt_owner	*owner;
	uint64_t	 arrival_ms;
	uint64_t	 ttl_ms;
	uint32_t	 nkeys;		/* distinct keys, one slot each */
	uint8_t		 mode;
	struct lt_slot	 slots[];
};

/*
 * What a key needs beyond one holder: allocated with its first waiter,
 * second holder, or with the key if it is a semaphore; freed with the key.
 */
struct lt_kx {
	struct lt_xhold	*holders, *holders_tail;	/* after own */
	struct lt_slot	*qhead, *qtail;
	struct lt_key	*hot_prev, *hot_next;	/* keys with waiters */
	struct lt_key	*dirty_next;
	uint64_t	 wait_ms_total;
	uint32_t	 limit;
	uint32_t	 nholders;	/* own included */
	uint32_t	 nwaiters;
	uint32_t	 max_waiters;
	uint8_t		 dirty;		/* on lt->dirty, to be settled */
};

/*
 * A key's entry. Without x it is a plain lock: limit 1, nobody waiting and
 * at most one holder, own. Own is only ever granted to a fresh entry, so
 * while it is held it is the longest-standing holder (grant order is own,
 * then x->holders).
 */
struct lt_key {
	struct lt_key	*next;		/* hash chain */
	struct lt_kx	*x;		/* NULL: a plain lock */
	uint32_t	 hash;
	uint16_t	 keylen;
	uint8_t		 owned;		/* own is held */
	struct lt_hold	 own;
	char		 key[];		/* keylen bytes and a NUL */
};

/* A hold with a ttl, in the min-heap on expiry. */
struct lt_ttl {
	uint64_t	 expiry_ms;
	struct lt_hold	*h;
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
	struct lt_ttl	*heap;		/* ttl holds, on expiry */
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
	struct lt_xhold	*xh;		/* the hold, unless own */
	struct lt_kx	*x;		/* allocated for k, to attach */
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

static inline uint64_t
lt_ms_since(uint64_t now_ms, uint64_t then_ms)
{
	return now_ms > then_ms ? now_ms - then_ms : 0;
}

/* The header's convention for running out of memory: LIMIT and ENOMEM. */
static inline enum kl_err
lt_nomem(void)
{
	return KL_ERR_NOMEM;
}

static inline bool
lt_modes_conflict(enum lt_mode a, enum lt_mode b)
{
	return a == LT_EXCLUSIVE || b == LT_EXCLUSIVE;
}

static inline uint32_t
lt_key_nholders(const struct lt_key *k)
{
	return k->x != NULL ? k->x->nholders : k->owned;
}

static inline uint32_t
lt_key_nwaiters(const struct lt_key *k)
{
	return k->x != NULL ? k->x->nwaiters : 0;
}

static inline uint32_t
lt_key_limit(const struct lt_key *k)
{
	return k->x != NULL ? k->x->limit : 1;
}

static inline struct lt_slot *
lt_key_qhead(const struct lt_key *k)
{
	return k->x != NULL ? k->x->qhead : NULL;
}

static inline struct lt_xhold *
lt_xhold_of(const struct lt_hold *h)
{
	return (struct lt_xhold *)(uintptr_t)h;
}

static inline struct lt_key *
lt_hold_key(const struct lt_hold *h)
{
	if (h->inkey)
		return (struct lt_key *)(uintptr_t)((const char *)h -
		    offsetof(struct lt_key, own));
	return lt_xhold_of(h)->key;
}

static inline struct lt_hold *
lt_xfirst(const struct lt_key *k)
{
	return k->x != NULL && k->x->holders != NULL ? &k->x->holders->h :
	    NULL;
}

/* The holders of k in grant order: for (h = lt_key_first(k); h != NULL;
 * h = lt_key_next(k, h)). */
static inline struct lt_hold *
lt_key_first(const struct lt_key *k)
{
	return k->owned ? (struct lt_hold *)(uintptr_t)&k->own : lt_xfirst(k);
}

static inline struct lt_hold *
lt_key_next(const struct lt_key *k, const struct lt_hold *h)
{
	struct lt_xhold	*n;

	if (h->inkey)
		return lt_xfirst(k);
	n = lt_xhold_of(h)->knext;
	return n != NULL ? &n->h : NULL;
}

/* Whether k's holders leave room for one more of this mode. Holders of
 * one key never mix modes, so the first one speaks for all. */
static inline bool
lt_key_admits(const struct lt_key *k, enum lt_mode mode)
{
	const struct lt_hold	*first;

	if (lt_key_limit(k) > 1)
		return k->x->nholders < k->x->limit;
	first = lt_key_first(k);
	return first == NULL ||
	    !lt_modes_conflict(mode, (enum lt_mode)first->mode);
}

static inline size_t
lt_req_size(size_t nkeys)
{
	return sizeof(struct lt_req) + nkeys * sizeof(struct lt_slot);
}

static inline size_t
lt_key_size(size_t keylen)
{
	return sizeof(struct lt_key) + keylen + 1;
}

/* The table's own allocations, counted in lt->c.bytes. */
void		*lt_alloc(struct locktable *, size_t);
void		*lt_zalloc(struct locktable *, size_t);
void		 lt_release(struct locktable *, void *, size_t);

/* locktable.c */
void		 lt_blocker_fill(const struct lt_key *, enum lt_mode, uint64_t,
		    struct lt_blocker *);
uint64_t	 lt_next_token(struct locktable *);
void		 lt_grant_count(struct locktable *, uint64_t);
void		 lt_hold_grant(struct locktable *, struct lt_hold *,
		    struct lt_key *, struct lt_owner *,
		    const struct lt_grant *);
struct lt_hold	*lt_hold_find(const struct lt_key *, const struct lt_owner *);
struct lt_kx	*lt_kx_new(struct locktable *, uint32_t);
void		 lt_kx_attach(struct lt_key *, struct lt_kx *);
void		 lt_queue_append(struct locktable *, struct lt_key *,
		    struct lt_slot *);
bool		 lt_req_is_grantable(const struct lt_req *);

/* lt_hash.c */
bool		 lt_hash_init(struct locktable *, uint64_t);
void		 lt_hash_cleanup(struct locktable *);
uint32_t	 lt_key_hash(const struct locktable *, const char *, size_t);
struct lt_key	*lt_key_lookup(const struct locktable *, const char *, size_t,
		    uint32_t);
struct lt_key	*lt_key_new(struct locktable *, const struct lt_probe *);
void		 lt_key_insert(struct locktable *, struct lt_key *);
void		 lt_key_free(struct locktable *, struct lt_key *);

/* lt_heap.c */
bool		 lt_heap_reserve(struct locktable *, size_t);
void		 lt_heap_set(struct locktable *, struct lt_hold *,
		    uint64_t);
void		 lt_heap_remove(struct locktable *, struct lt_hold *);
uint64_t	 lt_heap_expiry(const struct locktable *,
		    const struct lt_hold *);

/* lt_deadlock.c */
size_t		 lt_dl_search(struct locktable *, struct lt_owner *,
		    const struct lt_probes *, enum lt_mode);

#endif /* LT_IMPL_H */
