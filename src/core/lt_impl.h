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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "locktable.h"

/* Pooled objects stay poisoned for AddressSanitizer while they are free. */
#if defined(__SANITIZE_ADDRESS__)
#define LT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LT_ASAN 1
#endif
#endif
#ifdef LT_ASAN
#include <sanitizer/asan_interface.h>
#define LT_POISON(p, n)		ASAN_POISON_MEMORY_REGION((p), (n))
#define LT_UNPOISON(p, n)	ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define LT_POISON(p, n)		((void)(p), (void)(n))
#define LT_UNPOISON(p, n)	((void)(p), (void)(n))
#endif

#define LT_BUCKETS_MIN_BITS 4
#define LT_BUCKETS_MIN	(1u << LT_BUCKETS_MIN_BITS)
#define LT_BUCKETS_MAX_BITS 32	/* the hash has 32 bits */
#define LT_PROBES_STACK	8	/* keys of a request looked up without malloc */
#define LT_NONE		SIZE_MAX
#define LT_NO_TTL	UINT32_MAX
/* The hash key: one word per word of the longest key and its length. */
#define LT_HASH_WORDS	32
_Static_assert(KL_KEY_MAX / 8 + 1 <= LT_HASH_WORDS,
    "the hash key covers the longest key");
/*
 * Freed objects kept for reuse, up to LT_POOL_MAX bytes, in classes of
 * 16k + 8 bytes: the sizes a 64-bit glibc malloc hands out anyway (its
 * chunks are multiples of 16 with an 8-byte header), so that pooling
 * costs no memory there.
 */
#define LT_POOL_GRAIN	16
#define LT_POOL_MAX	256
#define LT_POOL_CLASSES	((LT_POOL_MAX + 7) / LT_POOL_GRAIN + 1)
#define LT_POOL_KEEP	1024	/* per class; beyond that, back to malloc */
/* An owner with this few holds finds one by key without hashing. */
#define LT_OWNER_SCAN	4

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
	uint8_t		 sealed;	/* its key admits nobody while it
					 * lasts (locktable_owner_seal) */
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
	uint32_t	 nsealed;	/* sealed holds among holders (own
					 * not counted: its own flag says) */
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

/* A free list of one size class (see lt_alloc). */
struct lt_pool {
	void		*head;
	uint32_t	 n;
};

struct locktable {
	struct lt_hooks	 hooks;
	uint64_t	(*reserve)(void *, uint64_t *);	/* or NULL */
	struct lt_key	**buckets;
	size_t		 nbuckets;	/* a power of two */
	size_t		 keys_low;	/* fewer keys shrink: see lt_key_free */
	unsigned	 bshift;	/* 32 - log2(nbuckets): see lt_key_bucket */
	uint64_t	 hmul[2];	/* the hash's final multiplier, odd */
	uint64_t	 hkey[LT_HASH_WORDS];	/* the hash's per-word key */
	struct lt_pool	 pools[LT_POOL_CLASSES];
	struct lt_key	*hot;		/* keys with waiters */
	struct lt_key	*dirty;		/* keys to settle, a stack */
	struct lt_ttl	*heap;		/* ttl holds, on expiry */
	size_t		 heap_len;
	size_t		 heap_cap;	/* >= heap_len + ttl_reserved */
	size_t		 ttl_reserved;	/* keys of queued requests with a ttl */
	struct lt_owner	*owners;
	uint64_t	 epoch;		/* of the last deadlock search */
	uint64_t	 dl_steps;	/* all deadlock searches' steps */
	uint64_t	 tok_next;	/* tokens [tok_next, tok_end) reserved: */
	uint64_t	 tok_end;	/* see lt_next_token */
	bool		 frozen;	/* shutting down: grant nothing more */
	/* The common LOCK and UNLOCK on their short paths (acquire_fresh(),
	 * release_plain()); off only in tests, to compare. */
	bool		 short_paths;
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

/* Out of memory, with nothing changed (locktable.h). */
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

/* Takes h off its owner's list of holds. */
static inline void
lt_owner_unlink(struct lt_owner *o, struct lt_hold *h)
{
	if (h->oprev != NULL)
		h->oprev->onext = h->onext;
	else
		o->holds = h->onext;
	if (h->onext != NULL)
		h->onext->oprev = h->oprev;
	o->nholds--;
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

	if ((k->owned && k->own.sealed) || (k->x != NULL && k->x->nsealed > 0))
		return false;	/* a sealed hold: nobody is admitted */
	if (lt_key_limit(k) > 1)
		return k->x->nholders < k->x->limit;
	first = lt_key_first(k);
	return first == NULL ||
	    !lt_modes_conflict(mode, (enum lt_mode)first->mode);
}

/* The hold that refuses everybody on k, if one does (a sealed one);
 * else first. */
static inline const struct lt_hold *
lt_key_sealed_hold(const struct lt_key *k, const struct lt_hold *first)
{
	const struct lt_xhold *xh;

	if ((k->owned && k->own.sealed) || k->x == NULL || k->x->nsealed == 0)
		return k->owned && k->own.sealed ? &k->own : first;
	for (xh = k->x->holders; xh != NULL; xh = xh->knext)
		if (xh->h.sealed)
			return &xh->h;
	return first;
}

/* A hash's bucket: its top bits, which are the well-mixed ones. */
static inline size_t
lt_key_bucket(const struct locktable *lt, uint32_t hash)
{
	return (size_t)((uint64_t)hash >> lt->bshift);
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

/* Whether a[0..n) and b[0..n) hold the same bytes: words, not a call. */
static inline bool
lt_bytes_eq(const char *a, const char *b, size_t n)
{
	uint64_t	x, y;
	uint32_t	u, v;
	size_t		i;

	if (n >= 8) {
		/* most keys: the first and the last word cover them */
		if (n <= 16) {
			memcpy(&x, a, 8);
			memcpy(&y, b, 8);
			if (x != y)
				return false;
			memcpy(&x, a + n - 8, 8);
			memcpy(&y, b + n - 8, 8);
			return x == y;
		}
		for (i = 0; i + 8 < n; i += 8) {
			memcpy(&x, a + i, 8);
			memcpy(&y, b + i, 8);
			if (x != y)
				return false;
		}
		memcpy(&x, a + n - 8, 8);
		memcpy(&y, b + n - 8, 8);
		return x == y;
	}
	if (n >= 4) {
		memcpy(&u, a, 4);
		memcpy(&v, b, 4);
		if (u != v)
			return false;
		memcpy(&u, a + n - 4, 4);
		memcpy(&v, b + n - 4, 4);
		return u == v;
	}
	return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] &&
	    a[n - 1] == b[n - 1]);
}

/* Copies n bytes; keys of up to 16 by overlapping words, not a call. */
static inline void
lt_bytes_copy(char *dst, const char *src, size_t n)
{
	uint64_t	x, y;
	uint32_t	u, v;

	if (n >= 8 && n <= 16) {
		memcpy(&x, src, 8);
		memcpy(&y, src + n - 8, 8);
		memcpy(dst, &x, 8);
		memcpy(dst + n - 8, &y, 8);
	} else if (n >= 4 && n < 8) {
		memcpy(&u, src, 4);
		memcpy(&v, src + n - 4, 4);
		memcpy(dst, &u, 4);
		memcpy(dst + n - 4, &v, 4);
	} else if (n > 0 && n < 4) {
		dst[0] = src[0];
		dst[n / 2] = src[n / 2];
		dst[n - 1] = src[n - 1];
	} else
		memcpy(dst, src, n);
}

/*
 * The table's own allocations, counted in lt->c.bytes (what is in use,
 * not what the pools keep). Objects of up to LT_POOL_MAX bytes come from
 * and go back to a free list of their 16-byte class while it has any, so
 * that a lock and its unlock cost no malloc or free; each list keeps at
 * most LT_POOL_KEEP objects, and locktable_trim() empties them.
 */
void		*lt_alloc_slow(struct locktable *, size_t);
void		 lt_release_slow(struct locktable *, void *, size_t);

static inline size_t
lt_pool_class(size_t n)
{
	return (n + 7) / LT_POOL_GRAIN;
}

/* The size a pooled object of class c is allocated at. */
static inline size_t
lt_pool_size(size_t c)
{
	return c * LT_POOL_GRAIN + 8;
}

static inline void *
lt_alloc(struct locktable *lt, size_t n)
{
	struct lt_pool	*pl;
	void		*p;

	if (n - 1 < LT_POOL_MAX &&
	    (p = (pl = &lt->pools[lt_pool_class(n)])->head) != NULL) {
		LT_UNPOISON(p, lt_pool_size(lt_pool_class(n)));
		memcpy(&pl->head, p, sizeof(pl->head));
		pl->n--;
		lt->c.bytes += n;
		return p;
	}
	return lt_alloc_slow(lt, n);
}

static inline void *
lt_zalloc(struct locktable *lt, size_t n)
{
	void	*p;

	if ((p = lt_alloc(lt, n)) != NULL)
		memset(p, 0, n);
	return p;
}

static inline void
lt_release(struct locktable *lt, void *p, size_t n)
{
	struct lt_pool	*pl;

	if (p == NULL)
		return;
	if (n - 1 < LT_POOL_MAX &&
	    (pl = &lt->pools[lt_pool_class(n)])->n < LT_POOL_KEEP) {
		memcpy(p, &pl->head, sizeof(pl->head));
		pl->head = p;
		pl->n++;
		lt->c.bytes -= n;
		LT_POISON(p, lt_pool_size(lt_pool_class(n)));
		return;
	}
	lt_release_slow(lt, p, n);
}

/* locktable.c */
void		 lt_blocker_fill(const struct lt_key *, enum lt_mode, uint64_t,
		    struct lt_blocker *);
struct lt_hold	*lt_hold_find(const struct lt_key *, const struct lt_owner *);
struct lt_kx	*lt_kx_new(struct locktable *, uint32_t);
void		 lt_kx_attach(struct lt_key *, struct lt_kx *);
void		 lt_queue_append(struct locktable *, struct lt_key *,
		    struct lt_slot *);
bool		 lt_req_is_grantable(const struct lt_req *);

/* lt_check.c: one entry's own invariants (locktable_check() and the live
 * upgrade's reader); tally as locktable_check()'s, NULL if they hold. */
const char	*lt_check_entry(const struct lt_key *, uint64_t *tally);

/* lt_hash.c */
bool		 lt_hash_init(struct locktable *, uint64_t);
size_t		 lt_hash_keys_low(size_t);
void		 lt_hash_cleanup(struct locktable *);
void		 lt_hash_resize(struct locktable *, unsigned);
uint32_t	 lt_key_hash_long(const struct locktable *, const unsigned char *,
		    size_t);

/*
 * The keyed hash of lt_hash.c (see there why it is safe), inline for keys
 * under 16 bytes: every request hashes one. The key is read as words
 * m[0..w) with w = len / 8 + 1: its bytes, zeros, and len in the top byte
 * of the last word, so that different keys give different words. NH sums
 * (m[2i] + k[2i]) * (m[2i+1] + k[2i+1]) in 128 bits (a missing last word
 * is 0); multiply-shift keeps the top 32 bits of that sum times an odd
 * 128-bit multiplier. A key under 16 bytes is one product.
 */
typedef unsigned __int128 lt_u128;

/* Eight bytes as a little-endian word, whatever the host's order. */
static inline uint64_t
lt_hash_le64(const unsigned char *p)
{
	uint64_t	w;

	memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	w = __builtin_bswap64(w);
#endif
	return w;
}

/* A key of 0 to 7 bytes as a word: two overlapping 4-byte loads, or the
 * first, middle and last byte. */
static inline uint64_t
lt_hash_short(const unsigned char *p, size_t n)
{
	uint32_t	a, b;

	if (n >= 4) {
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		a = __builtin_bswap32(a);
		b = __builtin_bswap32(b);
#endif
		return (uint64_t)a | (uint64_t)b << (8 * (n - 4));
	}
	if (n == 0)
		return 0;
	return (uint64_t)p[0] | (uint64_t)p[n / 2] << (8 * (n / 2)) |
	    (uint64_t)p[n - 1] << (8 * (n - 1));
}

/* The top half of (hmul * acc) mod 2^128: multiply-shift's 32 bits. */
static inline uint32_t
lt_hash_final(const struct locktable *lt, lt_u128 acc)
{
	uint64_t	lo = (uint64_t)acc, hi = (uint64_t)(acc >> 64);

	hi = (uint64_t)(((lt_u128)lt->hmul[0] * lo) >> 64) +
	    lt->hmul[0] * hi + lt->hmul[1] * lo;
	return (uint32_t)(hi >> 32);
}

static inline uint32_t
lt_key_hash(const struct locktable *lt, const char *key, size_t len)
{
	const unsigned char	*p = (const unsigned char *)key;
	const uint64_t		*k = lt->hkey;
	uint64_t		 a, b, top = (uint64_t)(len & 0xff) << 56;

	if (len >= 16)
		return lt_key_hash_long(lt, p, len);
	if (len >= 8) {
		/* the last len - 8 bytes: none when the shift is 64 */
		a = lt_hash_le64(p);
		b = (lt_hash_le64(p + len - 8) >> (63 - 8 * (len - 8)) >> 1) |
		    top;
	} else {
		a = lt_hash_short(p, len) | top;
		b = 0;
	}
	return lt_hash_final(lt, (lt_u128)(a + k[0]) * (b + k[1]));
}

/* The chain a hash's entries are on. */
static inline struct lt_key **
lt_key_chain(const struct locktable *lt, uint32_t hash)
{
	return &lt->buckets[lt_key_bucket(lt, hash)];
}

/* The entry of the key on the chain that starts at k, or NULL. */
static inline struct lt_key *
lt_chain_find(struct lt_key *k, const char *key, size_t len, uint32_t hash)
{
	for (; k != NULL; k = k->next)
		if (k->hash == hash && k->keylen == len &&
		    lt_bytes_eq(k->key, key, len))
			return k;
	return NULL;
}

/* The entries of the hash table, inline: every request looks one up, and
 * most lock or free one. */
static inline struct lt_key *
lt_key_lookup(const struct locktable *lt, const char *key, size_t len,
    uint32_t hash)
{
	return lt_chain_find(*lt_key_chain(lt, hash), key, len, hash);
}

/* A fresh entry, not yet in the table, with its own hold free. */
static inline struct lt_key *
lt_key_new(struct locktable *lt, const char *key, size_t len, uint32_t hash)
{
	struct lt_key	*k;

	if ((k = lt_alloc(lt, lt_key_size(len))) == NULL)
		return NULL;
	k->next = NULL;
	k->x = NULL;
	k->hash = hash;
	k->keylen = (uint16_t)len;
	k->owned = 0;
	lt_bytes_copy(k->key, key, len);
	k->key[len] = '\0';
	return k;
}

static inline void
lt_key_insert(struct locktable *lt, struct lt_key *k)
{
	struct lt_key	**b;

	b = &lt->buckets[lt_key_bucket(lt, k->hash)];
	k->next = *b;
	*b = k;
	if (++lt->c.keys > lt->nbuckets &&
	    lt->bshift > 32 - LT_BUCKETS_MAX_BITS)
		lt_hash_resize(lt, 32 - lt->bshift + 1);
}

/*
 * Whether a fresh entry for a key of len bytes comes from its pool and
 * inserting it needs no resize: then neither makes a call.
 */
static inline bool
lt_fresh_fits(const struct locktable *lt, size_t len)
{
	size_t	n = lt_key_size(len);

	return n <= LT_POOL_MAX && lt->pools[lt_pool_class(n)].head != NULL &&
	    lt->c.keys < lt->nbuckets;
}

/* Whether freeing k returns it to its pool and needs no resize. */
static inline bool
lt_free_fits(const struct locktable *lt, const struct lt_key *k)
{
	size_t	n = lt_key_size(k->keylen);

	return n <= LT_POOL_MAX && lt->pools[lt_pool_class(n)].n <
	    LT_POOL_KEEP && k->x == NULL && lt->c.keys > lt->keys_low;
}

/*
 * Shrinking keeps the load above a quarter: memory follows the keys. The
 * table shrinks when it has fewer than keys_low keys: a quarter of its
 * buckets, or 0 at its smallest (lt_hash_keys_low()).
 */
static inline void
lt_key_free(struct locktable *lt, struct lt_key *k)
{
	struct lt_key	**pp;

	pp = &lt->buckets[lt_key_bucket(lt, k->hash)];
	while (*pp != k)
		pp = &(*pp)->next;
	*pp = k->next;
	if (k->x != NULL)
		lt_release(lt, k->x, sizeof(*k->x));
	lt_release(lt, k, lt_key_size(k->keylen));
	if (--lt->c.keys < lt->keys_low)
		lt_hash_resize(lt, 32 - lt->bshift - 1);
}

/* lt_heap.c */
bool		 lt_heap_reserve(struct locktable *, size_t);
void		 lt_heap_set(struct locktable *, struct lt_hold *,
		    uint64_t);
void		 lt_heap_remove(struct locktable *, struct lt_hold *);
uint64_t	 lt_heap_expiry(const struct locktable *,
		    const struct lt_hold *);

/* lt_deadlock.c: a search gives up (no deadlock found) past this many
 * steps, a step being one key of a wait looked at or one edge to an owner
 * waited on (keylockd-protocol(7), Deadlock detection). */
#define LT_DL_STEPS_MAX	10000
size_t		 lt_dl_search(struct locktable *, struct lt_owner *,
		    const struct lt_probes *, enum lt_mode);

/*
 * h is k's own hold (only for a fresh entry: see struct lt_key) or an
 * xhold, appended to the extension's holders. Inline: every grant runs it,
 * and for a fresh entry most of it folds away.
 */
static inline void
lt_hold_grant(struct locktable *lt, struct lt_hold *h, struct lt_key *k,
    struct lt_owner *o, const struct lt_grant *g)
{
	struct lt_xhold	*xh;
	struct lt_kx	*x = k->x;

	h->owner = o;
	h->token = g->token;
	h->granted_ms = g->now_ms;
	h->heap_idx = LT_NO_TTL;
	h->mode = (uint8_t)g->mode;
	h->mark = 0;
	h->inkey = h == &k->own;
	h->sealed = 0;
	if (h->inkey) {
		k->owned = 1;
	} else {
		xh = lt_xhold_of(h);
		xh->key = k;
		xh->knext = NULL;
		xh->kprev = x->holders_tail;
		if (x->holders_tail != NULL)
			x->holders_tail->knext = xh;
		else
			x->holders = xh;
		x->holders_tail = xh;
	}
	if (x != NULL)
		x->nholders++;
	h->oprev = NULL;
	h->onext = o->holds;
	if (o->holds != NULL)
		o->holds->oprev = h;
	o->holds = h;
	o->nholds++;
	lt->c.held++;
	if (g->ttl_ms != 0)
		lt_heap_set(lt, h, g->now_ms + g->ttl_ms);
}

/*
 * Tokens come from the range [tok_next, tok_end) without a call; when it
 * is used up, lt_next_token_slow() asks lt->reserve for the next
 * range, or hooks.next_token for each token (the range stays empty). With
 * neither hook the range is every token from 1 up.
 */
uint64_t	 lt_next_token_slow(struct locktable *);

/* Whether the next token comes from the range, without a call. */
static inline bool
lt_token_fits(const struct locktable *lt)
{
	return lt->tok_next < lt->tok_end;
}

static inline uint64_t
lt_next_token(struct locktable *lt)
{
	if (lt_token_fits(lt))
		return lt->tok_next++;
	return lt_next_token_slow(lt);
}

/* One grant, however many keys (keylockd-protocol(7), STATS). */
static inline void
lt_grant_count(struct locktable *lt, uint64_t waited_ms)
{
	lt->c.grants++;
	kl_hist_add(&lt->c.wait_ms, waited_ms);
}

#endif /* LT_IMPL_H */
