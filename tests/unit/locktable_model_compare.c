/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Checks of the table against the model after every step: the blocker
 * of a refused request, the deferred grants, every key's holders and
 * waiters through the views and walks, the owners, the counters, the
 * wait histogram and the hot keys.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_locktable_model.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"

int
lm_key_index(const char *key, size_t len)
{
	for (int k = 0; k < M_NKEYS; k++)
		if (strlen(lm_keyname[k]) == len &&
		    memcmp(lm_keyname[k], key, len) == 0)
			return k;
	return -1;
}

/*
 * why names key k (in mask) and, as holder, the longest-standing holder
 * that conflicts with mode, or NULL if none does.
 */
void
lm_check_blocker(const char *what, const struct lt_blocker *why,
    unsigned mask, enum lt_mode mode)
{
	const struct m_key	*mk;
	int			 k, best = -1;

	MCK(why->key != NULL, "%s: no key", what);
	k = lm_key_index(why->key, why->keylen);
	MCK(k >= 0 && (mask & (1u << k)) != 0, "%s: key %.*s does not block",
	    what, (int)why->keylen, why->key);
	mk = &lm.key[k];
	MCK(why->nholders == (size_t)mk->nh && why->nwaiters ==
	    (size_t)mk->nq, "%s: key %s has %d holders %d waiters, not "
	    "%zu %zu", what, lm_keyname[k], mk->nh, mk->nq, why->nholders,
	    why->nwaiters);
	for (int i = 0; i < mk->nh; i++)
		if (m_conflicts(k, i, mode) &&
		    (best < 0 || mk->h[i].since < mk->h[best].since))
			best = i;
	if (best < 0) {
		MCK(why->holder == NULL, "%s: key %s: holder named but none "
		    "conflicts", what, lm_keyname[k]);
		return;
	}
	MCK(why->holder != NULL, "%s: key %s: no holder named", what,
	    lm_keyname[k]);
	for (int i = 0; i < mk->nh; i++)
		if (lm.own[mk->h[i].o].lo == why->holder) {
			MCK(m_conflicts(k, i, mode) &&
			    mk->h[i].since == mk->h[best].since,
			    "%s: key %s: holder %ju is not the longest "
			    "conflicting one (%ju)", what, lm_keyname[k],
			    (uintmax_t)lm.own[mk->h[i].o].id,
			    (uintmax_t)lm.own[mk->h[best].o].id);
			MCK(why->held_ms == lm.now - mk->h[i].since,
			    "%s: held_ms %ju, want %ju", what,
			    (uintmax_t)why->held_ms,
			    (uintmax_t)(lm.now - mk->h[i].since));
			return;
		}
	lm_mfail("%s: key %s: holder is not a holder", what, lm_keyname[k]);
}

/* Keys of r that keep it from being granted now (at its queue place). */
unsigned
lm_blocking_keys(int o, const struct m_req *r, bool at_tail)
{
	unsigned	mask = 0;

	for (int j = 0; j < r->nk; j++) {
		int	k = r->k[j];

		if ((at_tail ? lm.key[k].nq > 0 : lm.key[k].q[0] != o) ||
		    !m_compatible(k, r->mode))
			mask |= 1u << k;
	}
	return mask;
}

/* The deferred grants the table reported must be those the model made. */
void
lm_match_grants(void)
{
	MCK(!lm.got_overflow, "too many granted hook calls");
	MCK(!lm.tok_broken, "tokens not strictly increasing");
	MCK(lm.ngot == lm.nwant, "%d deferred grants, model made %d", lm.ngot,
	    lm.nwant);
	for (int i = 0; i < lm.ngot; i++) {
		int	j = 0;

		while (j < lm.nwant && lm.want[j].o != lm.got[i].o)
			j++;
		MCK(j < lm.nwant, "granted owner %ju, model did not",
		    (uintmax_t)lm.own[lm.got[i].o].id);
		MCK(lm.got[i].waited == lm.want[j].waited, "owner %ju waited "
		    "%ju ms, want %ju", (uintmax_t)lm.own[lm.got[i].o].id,
		    (uintmax_t)lm.got[i].waited, (uintmax_t)lm.want[j].waited);
		lm.want[j].o = -1;
		for (int k = 0; k < M_NKEYS; k++) {
			int	h = m_holder_index(k, lm.got[i].o);

			if (h >= 0 && lm.key[k].h[h].token == 0)
				lm.key[k].h[h].token = lm.got[i].token;
		}
		lm_tracef("    granted id %ju token %ju waited %ju\n",
		    (uintmax_t)lm.own[lm.got[i].o].id,
		    (uintmax_t)lm.got[i].token, (uintmax_t)lm.got[i].waited);
	}
	lm.outcomes[O_DEFERRED] += (uint64_t)lm.ngot;
	lm.ngot = 0;
	lm.nwant = 0;
}

struct walk_ctx {
	int		 k;
	int		 nh;
	int		 nw;
	int		 nexcl;
	int		 nshared;
	uint64_t	 last_waited;
};

static bool
walk_holder(void *arg, const struct lt_holder_view *v)
{
	struct walk_ctx		*w = arg;
	const struct m_key	*mk = &lm.key[w->k];
	const struct m_hold	*h;

	MCK(w->nw == 0, "%s: holder after a waiter", lm_keyname[w->k]);
	MCK(w->nh < mk->nh, "%s: more holders than %d", lm_keyname[w->k],
	    mk->nh);
	h = &mk->h[w->nh];
	MCK(v->owner == lm.own[h->o].lo, "%s: holder %d is id %ju, want %ju",
	    lm_keyname[w->k], w->nh, (uintmax_t)locktable_owner_id(v->owner),
	    (uintmax_t)lm.own[h->o].id);
	MCK(v->token == h->token, "%s: holder id %ju token %ju, want %ju",
	    lm_keyname[w->k], (uintmax_t)lm.own[h->o].id, (uintmax_t)v->token,
	    (uintmax_t)h->token);
	MCK(v->mode == h->mode, "%s: holder mode", lm_keyname[w->k]);
	MCK(v->held_ms == lm.now - h->since, "%s: held_ms %ju, want %ju",
	    lm_keyname[w->k], (uintmax_t)v->held_ms,
	    (uintmax_t)(lm.now - h->since));
	MCK(v->expires_in_ms == (h->expires ? h->expires - lm.now : 0),
	    "%s: holder id %ju expires_in_ms %ju, want %ju", lm_keyname[w->k],
	    (uintmax_t)lm.own[h->o].id, (uintmax_t)v->expires_in_ms,
	    (uintmax_t)(h->expires ? h->expires - lm.now : 0));
	if (v->mode == LT_EXCLUSIVE)
		w->nexcl++;
	else
		w->nshared++;
	w->nh++;
	return true;
}

static bool
walk_waiter(void *arg, const struct lt_waiter_view *v)
{
	struct walk_ctx		*w = arg;
	const struct m_key	*mk = &lm.key[w->k];
	const struct m_owner	*mo;

	MCK(w->nw < mk->nq, "%s: more waiters than %d", lm_keyname[w->k],
	    mk->nq);
	mo = &lm.own[mk->q[w->nw]];
	MCK(v->owner == mo->lo, "%s: waiter %d is id %ju, want %ju",
	    lm_keyname[w->k], w->nw, (uintmax_t)locktable_owner_id(v->owner),
	    (uintmax_t)mo->id);
	MCK(v->mode == mo->r.mode, "%s: waiter mode", lm_keyname[w->k]);
	MCK(v->waited_ms == lm.now - mo->r.arrival, "%s: waited_ms",
	    lm_keyname[w->k]);
	MCK(v->nkeys == (size_t)mo->r.nk, "%s: waiter nkeys %zu, want %d",
	    lm_keyname[w->k], v->nkeys, mo->r.nk);
	MCK(w->nw == 0 || v->waited_ms <= w->last_waited,
	    "%s: queue not in arrival order", lm_keyname[w->k]);
	w->last_waited = v->waited_ms;
	w->nw++;
	return true;
}

static void
compare_key(int k)
{
	const struct lt_key	*lk;
	const struct m_key	*mk = &lm.key[k];
	struct lt_key_view	 v;
	struct walk_ctx		 w;

	lk = locktable_find(lm.lt, lm_keyname[k], strlen(lm_keyname[k]));
	if (!m_exists(k)) {
		MCK(lk == NULL, "key %s has an entry, model has none",
		    lm_keyname[k]);
		return;
	}
	MCK(lk != NULL, "key %s has no entry (model: %d holders, %d "
	    "waiters)", lm_keyname[k], mk->nh, mk->nq);
	locktable_key_view(lk, &v);
	MCK(v.keylen == strlen(lm_keyname[k]) &&
	    memcmp(v.key, lm_keyname[k], v.keylen) == 0, "key view name");
	MCK(v.limit == mk->limit, "%s: limit %u, want %u", lm_keyname[k],
	    v.limit, mk->limit);
	MCK(v.nholders == (size_t)mk->nh, "%s: %zu holders, want %d",
	    lm_keyname[k], v.nholders, mk->nh);
	MCK(v.nwaiters == (size_t)mk->nq, "%s: %zu waiters, want %d",
	    lm_keyname[k], v.nwaiters, mk->nq);
	MCK(v.max_waiters == mk->maxw, "%s: max_waiters %ju, want %ju",
	    lm_keyname[k], (uintmax_t)v.max_waiters, (uintmax_t)mk->maxw);
	MCK(v.wait_ms_total == mk->wait_total, "%s: wait_ms_total %ju, want "
	    "%ju", lm_keyname[k], (uintmax_t)v.wait_ms_total,
	    (uintmax_t)mk->wait_total);
	memset(&w, 0, sizeof(w));
	w.k = k;
	locktable_key_walk(lm.lt, lk, lm.now, walk_holder, walk_waiter, &w);
	MCK(w.nh == mk->nh && w.nw == mk->nq, "%s: walk saw %d/%d, want "
	    "%d/%d", lm_keyname[k], w.nh, w.nw, mk->nh, mk->nq);
	/* invariants, whatever the model says */
	MCK(v.limit == 1 || ((uint32_t)w.nh <= v.limit && w.nshared == 0),
	    "%s: %d holders (%d shared) over limit %u", lm_keyname[k], w.nh,
	    w.nshared, v.limit);
	MCK(w.nexcl <= 1 || v.limit > 1, "%s: two exclusive holders",
	    lm_keyname[k]);
	MCK(w.nexcl == 0 || w.nshared == 0, "%s: shared and exclusive "
	    "holders together", lm_keyname[k]);
}

static void
compare_hist(const char *what, const struct kl_hist *got,
    const struct kl_hist *want)
{
	MCK(kl_hist_count(got) == kl_hist_count(want) &&
	    got->sum_ms == want->sum_ms,
	    "%s: count %ju sum %ju, want %ju %ju", what,
	    (uintmax_t)kl_hist_count(got), (uintmax_t)got->sum_ms,
	    (uintmax_t)kl_hist_count(want), (uintmax_t)want->sum_ms);
	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++)
		MCK(got->counts[i] == want->counts[i], "%s: bucket %zu", what,
		    i);
}

#define CMP_CTR(f) MCK(c->f == lm.c.f, "counter " #f " %ju, want %ju",	\
	(uintmax_t)c->f, (uintmax_t)lm.c.f)

static void
compare_hot_keys(void)
{
	const struct lt_key	*out[M_HOT];
	struct lt_key_view	 v;
	size_t			 n, nkeys = 0, prev = SIZE_MAX;
	unsigned		 seen = 0;
	int			 want[M_NKEYS], nwant = 0;

	for (int k = 0; k < M_NKEYS; k++)
		if (m_exists(k))
			want[nwant++] = lm.key[k].nq;
	/* sort the model's waiter counts, most first */
	for (int i = 1; i < nwant; i++)
		for (int j = i; j > 0 && want[j - 1] < want[j]; j--) {
			int t = want[j];
			want[j] = want[j - 1];
			want[j - 1] = t;
		}
	nkeys = (size_t)nwant;
	n = locktable_hot_keys(lm.lt, out, M_HOT);
	MCK(n == (nkeys < M_HOT ? nkeys : M_HOT), "hot_keys gave %zu of %zu",
	    n, nkeys);
	for (size_t i = 0; i < n; i++) {
		int	k;

		locktable_key_view(out[i], &v);
		k = lm_key_index(v.key, v.keylen);
		MCK(k >= 0 && (seen & (1u << k)) == 0, "hot_keys: bad or "
		    "repeated key");
		seen |= 1u << k;
		MCK(v.nwaiters <= prev, "hot_keys: not most waiters first");
		MCK(v.nwaiters == (size_t)want[i], "hot_keys: entry %zu has "
		    "%zu waiters, want %d", i, v.nwaiters, want[i]);
		prev = v.nwaiters;
	}
	if (nkeys > 1) {
		n = locktable_hot_keys(lm.lt, out, 1);
		MCK(n == 1, "hot_keys(1) gave %zu", n);
		locktable_key_view(out[0], &v);
		MCK(v.nwaiters == (size_t)want[0], "hot_keys(1): %zu waiters, "
		    "want %d", v.nwaiters, want[0]);
	}
}

void
lm_compare_all(void)
{
	const struct lt_counters *c = locktable_counters(lm.lt);
	const char		*e = locktable_check(lm.lt);
	uint64_t		 next = UINT64_MAX, keys = 0;
	bool			 inp[M_NOWNERS];

	MCK(e == NULL, "locktable_check: %s", e);
	MCK(lm.ngot == 0, "unmatched granted hook calls");
	for (int k = 0; k < M_NKEYS; k++) {
		keys += m_exists(k);
		compare_key(k);
		for (int i = 0; i < lm.key[k].nh; i++)
			if (lm.key[k].h[i].expires != 0 &&
			    lm.key[k].h[i].expires < next)
				next = lm.key[k].h[i].expires;
	}
	lm.c.keys = keys;
	CMP_CTR(keys);
	CMP_CTR(held);
	CMP_CTR(waiting);
	CMP_CTR(grants);
	CMP_CTR(timeouts);
	CMP_CTR(busy);
	CMP_CTR(deadlocks);
	CMP_CTR(conflicts);
	CMP_CTR(releases);
	CMP_CTR(expired);
	CMP_CTR(disconnect_releases);
	CMP_CTR(max_waiters);
	compare_hist("wait_ms", &c->wait_ms, &lm.c.wait_ms);
	compare_hist("hold_ms", &c->hold_ms, &lm.c.hold_ms);
	MCK(locktable_next_expiry(lm.lt) == next, "next_expiry %ju, want %ju",
	    (uintmax_t)locktable_next_expiry(lm.lt), (uintmax_t)next);
	for (int o = 0; o < M_NOWNERS; o++) {
		struct m_owner		*mo = &lm.own[o];
		struct lt_blocker	 why;
		bool			 w;

		MCK(locktable_owner_nholds(mo->lo) == (size_t)m_nholds(o),
		    "owner id %ju holds %zu, want %d", (uintmax_t)mo->id,
		    locktable_owner_nholds(mo->lo), m_nholds(o));
		MCK(locktable_owner_is_waiting(mo->lo) == mo->waiting,
		    "owner id %ju waiting %d, want %d", (uintmax_t)mo->id,
		    locktable_owner_is_waiting(mo->lo), mo->waiting);
		memset(&why, 0, sizeof(why));
		w = locktable_wait_blocker(lm.lt, mo->lo, lm.now, &why);
		MCK(w == mo->waiting, "wait_blocker of id %ju",
		    (uintmax_t)mo->id);
		if (w)
			lm_check_blocker("wait_blocker", &why,
			    lm_blocking_keys(o, &mo->r, false), mo->r.mode);
	}
	compare_hot_keys();
	/* model self-check: refusing cycles leaves no stuck owner */
	m_progress(-1, NULL, inp);
	for (int o = 0; o < M_NOWNERS; o++)
		MCK(inp[o], "model: owner id %ju is deadlocked",
		    (uintmax_t)lm.own[o].id);
}
