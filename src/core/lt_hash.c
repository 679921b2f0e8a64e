/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's keys: a hash keyed per process, and the chained hash
 * table of key entries (lookup, insert and free, which run per request,
 * are inline in lt_impl.h; resize is here). An entry is
 * inserted when a request commits to its key (lt_acquire.c) and freed as
 * soon as nobody holds or waits for it (locktable.c). A resize that runs
 * out of memory is not an error: the table keeps its size and chains grow
 * longer. It never reads the clock, a socket or a global (the seed comes
 * from locktable_new()).
 *
 * The hash is NH (Black et al., UMAC, 1999) over the key's 8-byte words,
 * then multiply-shift (Dietzfelbinger et al., 1997) from its 128 bits to
 * 32, both keyed per process. For two different keys, the chance over the
 * process's key that they fall into one bucket of 2^b is at most 2^-63 +
 * 2^(1-b): about what random buckets give. That defeats chosen-key
 * flooding by a client that picks its keys without knowing the hash key,
 * and no reply tells it: none depends on a hash or on bucket order
 * (locktable_hot_keys() fills its list in grant order).
 *
 * The limit: an adaptive attacker. A colliding key makes a lookup walk a
 * longer chain, so a client that times many requests (on loopback, or
 * INFO and LOCK by the thousand) can learn which of its keys share a
 * bucket, and choose the next keys from that. NH with multiply-shift is
 * universal, not a pseudorandom function: its guarantee is for keys chosen
 * before the process's key is drawn, and collisions it lets slip tell an
 * observer about that key, so such a client could in principle build a
 * chain of many keys and make every lookup of them slow (each costs a walk
 * of the chain: the damage is CPU, never a wrong answer). SipHash, the
 * pseudorandom function Redis, Python and Rust key their tables with,
 * keeps its guarantee in that setting; here it cost 114 instructions per
 * short key against about 15 (bench/instructions.sh, 3215e21), on a path
 * every request takes. The defence today is the per-process key, the
 * limits on locks per connection and on connections (max-locks,
 * max-clients) and AUTH: a server open to untrusted clients that can time
 * it should know that the hash alone does not stop them. Replacing it
 * means lt_key_hash() (lt_impl.h) and lt_key_hash_long() here, keyed the
 * same way.
 *
 * The short keys' path is inline in lt_impl.h (lt_key_hash); longer keys
 * come here.
 */
#include <string.h>

#include "locktable.h"
#include "lt_impl.h"
#include "util.h"

static uint64_t	 splitmix64(uint64_t *);
static inline uint64_t hash_tail(const unsigned char *, size_t, size_t);

/* Expands the 64-bit seed into the hash's key words. */
static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t	z;

	z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Below how many keys a table of nbuckets shrinks (see lt_key_free()). */
size_t
lt_hash_keys_low(size_t nbuckets)
{
	return nbuckets > LT_BUCKETS_MIN ? nbuckets / 4 : 0;
}

/* Allocates the buckets and keys the hash from seed; false: out of memory. */
bool
lt_hash_init(struct locktable *lt, uint64_t seed)
{
	size_t	i;

	lt->buckets = lt_zalloc(lt, LT_BUCKETS_MIN * sizeof(*lt->buckets));
	if (lt->buckets == NULL)
		return false;
	lt->nbuckets = LT_BUCKETS_MIN;
	lt->keys_low = lt_hash_keys_low(LT_BUCKETS_MIN);
	lt->bshift = 32 - LT_BUCKETS_MIN_BITS;
	for (i = 0; i < LT_HASH_WORDS; i++)
		lt->hkey[i] = splitmix64(&seed);
	lt->hmul[0] = splitmix64(&seed) | 1;
	lt->hmul[1] = splitmix64(&seed);
	return true;
}

/* Bytes p[i..len), fewer than eight, as a word: from the word that ends
 * the key, which is there to read back over. */
static inline uint64_t
hash_tail(const unsigned char *p, size_t len, size_t i)
{
	size_t	n = len - i;

	return n == 0 ? 0 : lt_hash_le64(p + len - 8) >> (8 * (8 - n));
}

/* lt_key_hash() of keys of 16 bytes or more: the words two at a time. */
uint32_t
lt_key_hash_long(const struct locktable *lt, const unsigned char *p,
    size_t len)
{
	const uint64_t	*k = lt->hkey;
	lt_u128		 acc = 0;
	uint64_t	 a, b;
	size_t		 i = 0, j = 0;

	for (; len - i >= 16; i += 16, j = (j + 2) % LT_HASH_WORDS)
		acc += (lt_u128)(lt_hash_le64(p + i) + k[j]) *
		    (lt_hash_le64(p + i + 8) + k[j + 1]);
	if (len - i < 8) {
		a = hash_tail(p, len, i) | (uint64_t)(len & 0xff) << 56;
		b = 0;
	} else {
		a = lt_hash_le64(p + i);
		b = hash_tail(p, len, i + 8) | (uint64_t)(len & 0xff) << 56;
	}
	acc += (lt_u128)(a + k[j]) * (b + k[j + 1]);
	return lt_hash_final(lt, acc);
}

/*
 * Resizes to 2^bits buckets; on allocation failure the table keeps its
 * size and chains grow longer. lt_key_insert() and lt_key_free() call it
 * to keep the load between a quarter and one.
 */
void
lt_hash_resize(struct locktable *lt, unsigned bits)
{
	struct lt_key	**nb, *k, *next;
	size_t		  i, n = (size_t)1 << bits, b;
	unsigned	  shift = 32 - bits;

	if ((nb = lt_zalloc(lt, n * sizeof(*nb))) == NULL)
		return;
	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = next) {
			next = k->next;
			b = (size_t)((uint64_t)k->hash >> shift);
			k->next = nb[b];
			nb[b] = k;
		}
	}
	lt_release(lt, lt->buckets, lt->nbuckets * sizeof(*nb));
	lt->buckets = nb;
	lt->nbuckets = n;
	lt->keys_low = lt_hash_keys_low(n);
	lt->bshift = shift;
}

/*
 * For locktable_free() only, once the owners are detached: frees every
 * entry with the holds still on it, then the buckets, counting nothing.
 */
void
lt_hash_cleanup(struct locktable *lt)
{
	struct lt_key	*k, *knext;
	struct lt_xhold	*h, *hnext;
	size_t		 i;

	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = knext) {
			knext = k->next;
			if (k->x != NULL) {
				for (h = k->x->holders; h != NULL; h = hnext) {
					hnext = h->knext;
					kl_free(h);
				}
				kl_free(k->x);
			}
			kl_free(k);
		}
	}
	kl_free(lt->buckets);
}
