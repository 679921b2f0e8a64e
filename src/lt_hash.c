/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's keys: SipHash keyed per process, and the chained hash
 * table of key entries (lookup, insert, resize, free). An entry is
 * inserted when a request commits to its key (lt_acquire.c) and freed as
 * soon as nobody holds or waits for it (locktable.c). A resize that runs
 * out of memory is not an error: the table keeps its size and chains grow
 * longer. It never reads the clock, a socket or a global (the seed comes
 * from locktable_new()).
 */
#include <string.h>

#include "locktable.h"
#include "lt_impl.h"
#include "util.h"

static uint64_t	 splitmix64(uint64_t *);
static inline uint64_t sip_load(const unsigned char *, size_t);
static inline uint64_t sip_rotl(uint64_t, int);
static inline void sip_round(uint64_t *);
static inline void sip_compress(uint64_t *, uint64_t);
static void	 table_resize(struct locktable *, size_t);

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

/* Allocates the buckets and keys the hash from seed; false: out of memory. */
bool
lt_hash_init(struct locktable *lt, uint64_t seed)
{
	lt->buckets = lt_zalloc(lt, LT_BUCKETS_MIN * sizeof(*lt->buckets));
	if (lt->buckets == NULL)
		return false;
	lt->nbuckets = LT_BUCKETS_MIN;
	lt->sipkey[0] = splitmix64(&seed);
	lt->sipkey[1] = splitmix64(&seed);
	return true;
}

/* n <= 8 bytes as a little-endian word, whatever the host's order. */
static inline uint64_t
sip_load(const unsigned char *p, size_t n)
{
	uint64_t	m = 0;

	if (n == 8) {
		memcpy(&m, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		m = __builtin_bswap64(m);
#endif
		return m;
	}
	while (n-- > 0)
		m |= (uint64_t)p[n] << (8 * n);
	return m;
}

static inline uint64_t
sip_rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static inline void
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

static inline void
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
uint32_t
lt_key_hash(const struct locktable *lt, const char *key, size_t len)
{
	const unsigned char *p = (const unsigned char *)key;
	uint64_t	 v[4], m;
	size_t		 i;

	v[0] = lt->sipkey[0] ^ 0x736f6d6570736575ULL;
	v[1] = lt->sipkey[1] ^ 0x646f72616e646f6dULL;
	v[2] = lt->sipkey[0] ^ 0x6c7967656e657261ULL;
	v[3] = lt->sipkey[1] ^ 0x7465646279746573ULL;
	for (i = 0; i + 8 <= len; i += 8)
		sip_compress(v, sip_load(p + i, 8));
	/* The last len - i bytes: from a word ending at the key's end, not
	 * byte by byte, when the key has eight bytes to read back over. */
	if (len >= 8 && i < len)
		m = sip_load(p + len - 8, 8) >> (8 * (8 - (len - i)));
	else
		m = sip_load(p + i, len - i);
	sip_compress(v, m | (uint64_t)len << 56);
	v[2] ^= 0xff;
	sip_round(v);
	sip_round(v);
	sip_round(v);
	m = v[0] ^ v[1] ^ v[2] ^ v[3];
	return (uint32_t)(m ^ (m >> 32));
}

struct lt_key *
lt_key_lookup(const struct locktable *lt, const char *key, size_t len,
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

/* A fresh entry, not yet in the table, with its own hold free. */
struct lt_key *
lt_key_new(struct locktable *lt, const struct lt_probe *p)
{
	struct lt_key	*k;

	if ((k = lt_alloc(lt, lt_key_size(p->len))) == NULL)
		return NULL;
	k->next = NULL;
	k->x = NULL;
	k->hash = p->hash;
	k->keylen = (uint16_t)p->len;
	k->owned = 0;
	memcpy(k->key, p->key, p->len);
	k->key[p->len] = '\0';
	return k;
}

/* On allocation failure the table keeps its size: chains grow longer. */
static void
table_resize(struct locktable *lt, size_t nbuckets)
{
	struct lt_key	**nb, *k, *next;
	size_t		  i;

	if ((nb = lt_zalloc(lt, nbuckets * sizeof(*nb))) == NULL)
		return;
	for (i = 0; i < lt->nbuckets; i++) {
		for (k = lt->buckets[i]; k != NULL; k = next) {
			next = k->next;
			k->next = nb[k->hash & (nbuckets - 1)];
			nb[k->hash & (nbuckets - 1)] = k;
		}
	}
	lt_release(lt, lt->buckets, lt->nbuckets * sizeof(*nb));
	lt->buckets = nb;
	lt->nbuckets = nbuckets;
}

void
lt_key_insert(struct locktable *lt, struct lt_key *k)
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
void
lt_key_free(struct locktable *lt, struct lt_key *k)
{
	struct lt_key	**pp;

	pp = &lt->buckets[k->hash & (lt->nbuckets - 1)];
	while (*pp != k)
		pp = &(*pp)->next;
	*pp = k->next;
	lt->c.keys--;
	lt_release(lt, k->x, sizeof(*k->x));
	lt_release(lt, k, lt_key_size(k->keylen));
	if (lt->nbuckets > LT_BUCKETS_MIN && lt->c.keys < lt->nbuckets / 4)
		table_resize(lt, lt->nbuckets / 2);
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
