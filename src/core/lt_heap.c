/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The lock table's ttl heap: every hold with a ttl in a min-heap on its
 * expiry, each hold knowing its index so that it can be moved or removed
 * in O(log n). Room is reserved before a request is granted or queued, so
 * pushing never allocates and a later grant cannot fail. It never reads
 * the clock (expiry times are the caller's now_ms plus a ttl), a socket or
 * a global.
 */
#include "locktable.h"
#include "lt_impl.h"
#include "util.h"

#define LT_HEAP_MIN	16

static bool	 heap_less(const struct locktable *, size_t, size_t);
static void	 heap_swap(struct locktable *, size_t, size_t);
static void	 heap_up(struct locktable *, size_t);
static void	 heap_down(struct locktable *, size_t);
static void	 heap_fix(struct locktable *, size_t);

/*
 * Makes room for n more holds with a ttl beyond those already promised to
 * queued requests, so that pushing in a later grant never allocates.
 */
bool
lt_heap_reserve(struct locktable *lt, size_t n)
{
	struct lt_ttl	*heap;
	size_t		 need, cap;

	need = lt->heap_len + lt->ttl_reserved + n;
	if (need <= lt->heap_cap)
		return true;
	cap = lt->heap_cap < LT_HEAP_MIN ? LT_HEAP_MIN : lt->heap_cap;
	while (cap < need)
		cap *= 2;
	if ((heap = kl_realloc(lt->heap, cap * sizeof(*heap))) == NULL)
		return false;
	lt->c.bytes += (cap - lt->heap_cap) * sizeof(*heap);
	lt->heap = heap;
	lt->heap_cap = cap;
	return true;
}

static bool
heap_less(const struct locktable *lt, size_t a, size_t b)
{
	return lt->heap[a].expiry_ms < lt->heap[b].expiry_ms;
}

static void
heap_swap(struct locktable *lt, size_t a, size_t b)
{
	struct lt_ttl	t = lt->heap[a];

	lt->heap[a] = lt->heap[b];
	lt->heap[b] = t;
	lt->heap[a].h->heap_idx = (uint32_t)a;
	lt->heap[b].h->heap_idx = (uint32_t)b;
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

/*
 * Gives h a ttl ending at expiry_ms, or moves the one it has (REFRESH).
 * Room for a new one was made by lt_heap_reserve().
 */
void
lt_heap_set(struct locktable *lt, struct lt_hold *h, uint64_t expiry_ms)
{
	if (h->heap_idx == LT_NO_TTL) {
		h->heap_idx = (uint32_t)lt->heap_len++;
		lt->heap[h->heap_idx].h = h;
	}
	lt->heap[h->heap_idx].expiry_ms = expiry_ms;
	heap_fix(lt, h->heap_idx);
}

void
lt_heap_remove(struct locktable *lt, struct lt_hold *h)
{
	size_t	i = h->heap_idx, last = --lt->heap_len;

	h->heap_idx = LT_NO_TTL;
	if (i == last)
		return;
	lt->heap[i] = lt->heap[last];
	lt->heap[i].h->heap_idx = (uint32_t)i;
	heap_fix(lt, i);
}

/* When h's ttl runs out; h has one. */
uint64_t
lt_heap_expiry(const struct locktable *lt, const struct lt_hold *h)
{
	return lt->heap[h->heap_idx].expiry_ms;
}

uint64_t
locktable_next_expiry(const struct locktable *lt)
{
	return lt->heap_len > 0 ? lt->heap[0].expiry_ms : UINT64_MAX;
}
