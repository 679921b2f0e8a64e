/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The operations of a model sequence: acquire, release, refresh,
 * disconnect, replace, withdraw and expiry, each decided by the model,
 * run on the table, traced, and compared; lm_step() picks one at random.
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

static const char *
mode_name(enum lt_mode mode)
{
	return mode == LT_SHARED ? "shared" : "excl";
}

static const char *
res_name(int res)
{
	static const char *const err[KL_ERR__COUNT] = {
		"OK", "SYNTAX", "BADKEY", "TOOLONG", "TIMEOUT", "LOCKED",
		"BUSY", "DEADLOCK", "HELD", "NOTHELD", "CONFLICT", "LIMIT",
		"AUTH", "SHUTDOWN"
	};

	if (res == R_GRANTED)
		return "GRANTED";
	if (res == R_QUEUED)
		return "QUEUED";
	if (res >= 0 && res < KL_ERR__COUNT)
		return err[res];
	return "?";
}

static void
trace_keys(const int *raw, int n)
{
	for (int i = 0; i < n; i++)
		lm_tracef("%s%s", i > 0 ? " " : "", lm_keyname[raw[i]]);
}

/* What keylockd-protocol(7) says a request gets; why masks for HELD/CONFLICT/BUSY. */
static int
m_decide(int o, const struct m_req *r, bool try, int64_t mw,
    size_t max_holds, unsigned *mask)
{
	bool	grantable = true;

	*mask = 0;
	if (max_holds > 0 && (size_t)(m_nholds(o) + r->nk) > max_holds)
		return KL_ERR_LIMIT;
	for (int j = 0; j < r->nk; j++)
		if (m_holder_index(r->k[j], o) >= 0)
			*mask |= 1u << r->k[j];
	if (*mask != 0)
		return KL_ERR_HELD;
	for (int j = 0; j < r->nk; j++)
		if (m_exists(r->k[j]) && lm.key[r->k[j]].limit != r->limit)
			*mask |= 1u << r->k[j];
	if (*mask != 0) {
		lm.c.conflicts++;
		return KL_ERR_CONFLICT;
	}
	for (int j = 0; j < r->nk; j++)
		if (lm.key[r->k[j]].nq > 0 || !m_compatible(r->k[j], r->mode))
			grantable = false;
	if (grantable)
		return R_GRANTED;
	for (int j = 0; mw >= 0 && j < r->nk; j++)
		if (lm.key[r->k[j]].nq >= mw)
			*mask |= 1u << r->k[j];
	if (*mask != 0) {
		lm.c.busy++;
		return KL_ERR_BUSY;
	}
	if (m_would_deadlock(o, r)) {
		lm.c.deadlocks++;
		return KL_ERR_DEADLOCK;
	}
	if (try)
		return KL_ERR_LOCKED;
	return R_QUEUED;
}

static void
op_acquire(int o)
{
	struct m_owner		*mo = &lm.own[o];
	const char		*keys[M_REQKEYS];
	size_t			 lens[M_REQKEYS];
	char			 buf[M_REQKEYS][8];
	int			 raw[M_REQKEYS], nraw, want, got, k0;
	struct lt_acquire	 a;
	struct m_req		 r;
	struct lt_blocker	 why;
	bool			 granted = false;
	uint64_t		 token = 0;
	unsigned		 mask;
	enum kl_err		 err;

	memset(&r, 0, sizeof(r));
	nraw = 1 + lm_rnd(M_REQKEYS);
	for (int i = 0; i < nraw; i++) {
		int	k = lm_rnd(M_NKEYS);

		raw[i] = k;
		/* copies, spoiled after the call: the table must copy too */
		memcpy(buf[i], lm_keyname[k], strlen(lm_keyname[k]));
		keys[i] = buf[i];
		lens[i] = strlen(lm_keyname[k]);
		for (int j = 0; j < r.nk && k >= 0; j++)
			if (r.k[j] == k)
				k = -1;
		if (k >= 0)
			r.k[r.nk++] = k;
	}
	k0 = raw[0];
	memset(&a, 0, sizeof(a));
	a.keys = keys;
	a.keylens = lens;
	a.nkeys = (size_t)nraw;
	a.mode = lm_chance(30) ? LT_SHARED : LT_EXCLUSIVE;
	if (a.mode == LT_SHARED)
		a.limit = 1;
	else if (lm_chance(85))
		a.limit = lm_keylimit[k0];
	else
		a.limit = 1 + (uint32_t)lm_rnd(3);
	a.try = lm_chance(20);
	a.max_waiters = lm_chance(12) ? lm_rnd(3) : -1;
	a.ttl_ms = lm_chance(20) ? 1 + (uint64_t)lm_rnd(40) : 0;
	a.max_holds = lm_chance(8) ? 1 + (size_t)lm_rnd(4) : 0;
	r.mode = a.mode;
	r.limit = a.limit;
	r.ttl = a.ttl_ms;
	r.arrival = lm.now;

	lm_tracef("%d t=%ju: id %ju acquire [", lm.step, (uintmax_t)lm.now,
	    (uintmax_t)mo->id);
	trace_keys(raw, nraw);
	lm_tracef("] %s limit=%u%s max_waiters=%jd ttl=%ju max_holds=%zu",
	    mode_name(a.mode), a.limit, a.try ? " try" : "",
	    (intmax_t)a.max_waiters, (uintmax_t)a.ttl_ms, a.max_holds);

	want = m_decide(o, &r, a.try, a.max_waiters, a.max_holds, &mask);
	memset(&why, 0, sizeof(why));
	err = locktable_acquire(lm.lt, mo->lo, &a, lm.now, &granted, &token,
	    &why);
	for (int i = 0; i < nraw; i++)
		memset(buf[i], '#', sizeof(buf[i]));
	got = err != KL_OK ? (int)err : granted ? R_GRANTED : R_QUEUED;
	lm_tracef(" -> %s", res_name(got));
	if (got == R_GRANTED)
		lm_tracef(" token %ju", (uintmax_t)token);
	lm_tracef(" (model %s)\n", res_name(want));
	MCK(got == want, "acquire: got %s, model says %s", res_name(got),
	    res_name(want));
	MCK(lm.ngot == 0, "granted hook called from acquire");

	switch (want) {
	case R_GRANTED:
		MCK(token > lm.last_tok, "token %ju not above %ju",
		    (uintmax_t)token, (uintmax_t)lm.last_tok);
		lm.last_tok = token;
		m_grant(o, &r, token);
		lm.outcomes[O_GRANTED]++;
		break;
	case R_QUEUED:
		m_enqueue(o, &r);
		lm.outcomes[O_QUEUED]++;
		break;
	case KL_ERR_HELD:
	case KL_ERR_CONFLICT:
		MCK(why.key != NULL && lm_key_index(why.key, why.keylen) >= 0 &&
		    (mask & (1u << lm_key_index(why.key, why.keylen))) != 0,
		    "%s names the wrong key", res_name(want));
		lm.outcomes[want == KL_ERR_HELD ? O_HELD : O_CONFLICT]++;
		break;
	case KL_ERR_BUSY:
		/* a key with too many waiters that blocks the request */
		lm_check_blocker("BUSY", &why,
		    mask & lm_blocking_keys(o, &r, true), r.mode);
		lm.outcomes[O_BUSY]++;
		break;
	case KL_ERR_LOCKED:
		lm_check_blocker("LOCKED", &why, lm_blocking_keys(o, &r, true),
		    r.mode);
		lm.outcomes[O_LOCKED]++;
		break;
	case KL_ERR_DEADLOCK: {
		int	k = why.key == NULL ? -1 :
			    lm_key_index(why.key, why.keylen);
		bool	mine = false;

		for (int j = 0; j < r.nk; j++)
			mine = mine || r.k[j] == k;
		MCK(mine, "DEADLOCK names a key not in the request");
		lm.outcomes[O_DEADLOCK]++;
		break;
	}
	case KL_ERR_LIMIT:
		lm.outcomes[O_LIMIT]++;
		break;
	default:
		break;
	}
	m_gc();
}

/* 1-3 keys, mostly ones o holds; *bad: raw indexes o does not hold. */
static int
pick_held_keys(int o, int *raw, unsigned *bad, int *distinct)
{
	int	held[M_NKEYS], nheld = 0, n = 1 + lm_rnd(3);
	unsigned seen = 0;

	for (int k = 0; k < M_NKEYS; k++)
		if (m_holder_index(k, o) >= 0)
			held[nheld++] = k;
	*bad = 0;
	*distinct = 0;
	for (int i = 0; i < n; i++) {
		raw[i] = nheld > 0 && lm_chance(80) ? held[lm_rnd(nheld)] :
		    lm_rnd(M_NKEYS);
		if (m_holder_index(raw[i], o) < 0)
			*bad |= 1u << i;
		if ((seen & (1u << raw[i])) == 0)
			(*distinct)++;
		seen |= 1u << raw[i];
	}
	return n;
}

static void
op_release_or_refresh(int o, bool refresh)
{
	struct m_owner	*mo = &lm.own[o];
	const char	*keys[M_REQKEYS];
	size_t		 lens[M_REQKEYS], n = 9999, bad_index = 9999;
	int		 raw[M_REQKEYS], nraw, nd;
	unsigned	 bad, seen = 0;
	uint64_t	 ttl = 1 + (uint64_t)lm_rnd(40);
	enum kl_err	 err, want;

	nraw = pick_held_keys(o, raw, &bad, &nd);
	for (int i = 0; i < nraw; i++) {
		keys[i] = lm_keyname[raw[i]];
		lens[i] = strlen(lm_keyname[raw[i]]);
	}
	lm_tracef("%d t=%ju: id %ju %s [", lm.step, (uintmax_t)lm.now,
	    (uintmax_t)mo->id, refresh ? "refresh" : "release");
	trace_keys(raw, nraw);
	if (refresh)
		lm_tracef("] ttl=%ju", (uintmax_t)ttl);
	else
		lm_tracef("]");
	if (refresh)
		err = locktable_refresh(lm.lt, mo->lo, keys, lens,
		    (size_t)nraw, ttl, lm.now, &n, &bad_index);
	else
		err = locktable_release(lm.lt, mo->lo, keys, lens,
		    (size_t)nraw, lm.now, &n, &bad_index);
	want = bad != 0 ? KL_ERR_NOTHELD : KL_OK;
	lm_tracef(" -> %s n=%zu bad_index=%zu\n", res_name((int)err),
	    err == KL_OK ? n : 0, err == KL_OK ? 0 : bad_index);
	MCK(err == want, "%s: got %s, want %s", refresh ? "refresh" :
	    "release", res_name((int)err), res_name((int)want));
	if (err != KL_OK) {
		MCK(bad_index < (size_t)nraw &&
		    (bad & (1u << bad_index)) != 0,
		    "bad_index %zu is not an unheld key", bad_index);
		MCK(lm.ngot == 0, "NOTHELD granted something");
		lm.outcomes[O_NOTHELD]++;
		return;
	}
	MCK(n == (size_t)nd, "n %zu, want %d", n, nd);
	for (int i = 0; i < nraw; i++) {
		int	k = raw[i], h;

		if ((seen & (1u << k)) != 0)
			continue;
		seen |= 1u << k;
		h = m_holder_index(k, o);
		if (refresh)
			lm.key[k].h[h].expires = lm.now + ttl;
		else
			m_end_hold(k, h, &lm.c.releases);
	}
	if (!refresh)
		m_grant_loop();
	lm_match_grants();
}

/*
 * Withdraws o's wait and ends its holds, as release_owner and owner_free.
 * A shutdown bumps no counter; its holds still end in hold_ms.
 */
size_t
m_release_owner(int o, enum lt_why why)
{
	uint64_t	none = 0, *counter = &none;
	size_t		n = 0;

	if (why == LT_WHY_UNLOCK)
		counter = &lm.c.releases;
	else if (why == LT_WHY_DISCONNECT)
		counter = &lm.c.disconnect_releases;

	if (lm.own[o].waiting)
		m_unqueue(o);
	for (int k = 0; k < M_NKEYS; k++) {
		int	h = m_holder_index(k, o);

		if (h < 0)
			continue;
		m_end_hold(k, h, counter);
		n++;
	}
	m_grant_loop();
	return n;
}

static void
op_release_owner(int o)
{
	struct m_owner	*mo = &lm.own[o];
	enum lt_why	 why;
	size_t		 n, want;

	if (!mo->waiting && lm_chance(50))
		why = LT_WHY_UNLOCK;
	else
		why = lm_chance(85) ? LT_WHY_DISCONNECT : LT_WHY_SHUTDOWN;
	lm_tracef("%d t=%ju: id %ju release_owner %s", lm.step,
	    (uintmax_t)lm.now, (uintmax_t)mo->id,
	    why == LT_WHY_UNLOCK ? "unlock" :
	    why == LT_WHY_DISCONNECT ? "disconnect" : "shutdown");
	n = locktable_release_owner(lm.lt, mo->lo, lm.now, why);
	want = m_release_owner(o, why);
	lm_tracef(" -> %zu (model %zu)\n", n, want);
	MCK(n == want, "release_owner released %zu, want %zu", n, want);
	lm_match_grants();
}

static void
op_replace_owner(int o)
{
	struct m_owner	*mo = &lm.own[o];

	lm_tracef("%d t=%ju: id %ju owner_free", lm.step, (uintmax_t)lm.now,
	    (uintmax_t)mo->id);
	locktable_owner_free(lm.lt, mo->lo, lm.now);
	(void)m_release_owner(o, LT_WHY_DISCONNECT);
	mo->id = lm.next_id++;
	lm_tracef(", new owner id %ju\n", (uintmax_t)mo->id);
	lm_match_grants();
	mo->lo = locktable_owner_new(lm.lt, mo->id, &mo->idx);
	MCK(mo->lo != NULL, "owner_new failed");
}

static void
op_withdraw(int o)
{
	struct m_owner	*mo = &lm.own[o];
	enum lt_why	 why = lm_chance(85) ? LT_WHY_TIMEOUT : LT_WHY_SHUTDOWN;
	bool		 b;

	lm_tracef("%d t=%ju: id %ju withdraw %s", lm.step, (uintmax_t)lm.now,
	    (uintmax_t)mo->id, why == LT_WHY_TIMEOUT ? "timeout" : "shutdown");
	b = locktable_withdraw(lm.lt, mo->lo, lm.now, why);
	lm_tracef(" -> %d\n", b);
	MCK(b == mo->waiting, "withdraw returned %d, model waiting %d", b,
	    mo->waiting);
	if (b) {
		m_unqueue(o);
		if (why == LT_WHY_TIMEOUT) {
			lm.c.timeouts++;
			lm.outcomes[O_TIMEOUT]++;
		}
		m_grant_loop();
	}
	lm_match_grants();
}

uint64_t
m_next_expiry(void)
{
	uint64_t	next = UINT64_MAX;

	for (int k = 0; k < M_NKEYS; k++)
		for (int i = 0; i < lm.key[k].nh; i++)
			if (lm.key[k].h[i].expires != 0 &&
			    lm.key[k].h[i].expires < next)
				next = lm.key[k].h[i].expires;
	return next;
}

void
lm_op_expire(void)
{
	size_t	n, want = 0;

	lm_tracef("%d t=%ju: expire", lm.step, (uintmax_t)lm.now);
	n = locktable_expire(lm.lt, lm.now);
	for (int k = 0; k < M_NKEYS; k++)
		for (int i = 0; i < lm.key[k].nh; )
			if (lm.key[k].h[i].expires != 0 &&
			    lm.key[k].h[i].expires <= lm.now) {
				m_end_hold(k, i, &lm.c.expired);
				want++;
			} else
				i++;
	m_grant_loop();
	lm_tracef(" -> %zu (model %zu)\n", n, want);
	MCK(n == want, "expire ended %zu holds, want %zu", n, want);
	lm.outcomes[O_EXPIRED] += (uint64_t)n;
	lm_match_grants();
}

static int
pick_owner(bool waiting)
{
	int	start = lm_rnd(M_NOWNERS);

	for (int i = 0; i < M_NOWNERS; i++) {
		int	o = (start + i) % M_NOWNERS;

		if (lm.own[o].waiting == waiting)
			return o;
	}
	return -1;
}

void
lm_step(void)
{
	int	o, r = lm_rnd(100);

	lm.now += (uint64_t)lm_rnd(4);
	if (m_next_expiry() <= lm.now)
		lm_op_expire();
	if (r < 45) {
		if ((o = pick_owner(false)) >= 0)
			op_acquire(o);
		else
			op_withdraw(lm_rnd(M_NOWNERS));
	} else if (r < 60)
		op_release_or_refresh(lm_rnd(M_NOWNERS), false);
	else if (r < 67)
		op_release_or_refresh(lm_rnd(M_NOWNERS), true);
	else if (r < 77) {
		o = pick_owner(true);
		op_withdraw(o >= 0 && lm_chance(80) ? o : lm_rnd(M_NOWNERS));
	} else if (r < 82)
		op_release_owner(lm_rnd(M_NOWNERS));
	else if (r < 85)
		op_replace_owner(lm_rnd(M_NOWNERS));
	else if (r < 92) {
		uint64_t	next = m_next_expiry();

		/* up to the next expiry, or just short of it */
		if (next != UINT64_MAX && lm_chance(70))
			lm.now = next - (uint64_t)lm_rnd(2);
		else
			lm.now += (uint64_t)lm_rnd(60);
		lm_op_expire();
	} else {
		o = pick_owner(false);
		if (o >= 0)
			op_acquire(o);
	}
	lm_compare_all();
}
