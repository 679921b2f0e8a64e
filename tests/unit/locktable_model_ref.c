/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The reference model of the lock table, written from keylockd-protocol(7)
 * ("Semantics") with plain arrays in lm: who holds and who waits for each
 * key, a naive grant loop and a naive fixpoint deadlock check. It never
 * calls the table; the driver compares the two.
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

bool
m_exists(int k)
{
	return lm.key[k].nh + lm.key[k].nq > 0;
}

int
m_holder_index(int k, int o)
{
	for (int i = 0; i < lm.key[k].nh; i++)
		if (lm.key[k].h[i].o == o)
			return i;
	return -1;
}

int
m_nholds(int o)
{
	int	n = 0;

	for (int k = 0; k < M_NKEYS; k++)
		n += m_holder_index(k, o) >= 0;
	return n;
}

/* keylockd-protocol(7), SEMANTICS: may this request join the key's holders? */
bool
m_compatible(int k, enum lt_mode mode)
{
	const struct m_key	*mk = &lm.key[k];

	if (mk->nh == 0)
		return true;
	if (mk->limit > 1)
		return (uint32_t)mk->nh < mk->limit;
	if (mode == LT_EXCLUSIVE)
		return false;
	for (int i = 0; i < mk->nh; i++)
		if (mk->h[i].mode == LT_EXCLUSIVE)
			return false;
	return true;
}

/* Does holder i of key k stand in the way of a request in mode? */
bool
m_conflicts(int k, int i, enum lt_mode mode)
{
	const struct m_key	*mk = &lm.key[k];

	if (mk->limit > 1)
		return (uint32_t)mk->nh >= mk->limit;
	return mode == LT_EXCLUSIVE || mk->h[i].mode == LT_EXCLUSIVE;
}

void
m_gc(void)
{
	for (int k = 0; k < M_NKEYS; k++)
		if (!m_exists(k))
			memset(&lm.key[k], 0, sizeof(lm.key[k]));
}

static void
m_add_hold(int k, int o, enum lt_mode mode, uint64_t token, uint64_t ttl)
{
	struct m_key	*mk = &lm.key[k];
	struct m_hold	*h = &mk->h[mk->nh++];

	h->o = o;
	h->token = token;
	h->mode = mode;
	h->since = lm.now;
	h->expires = ttl > 0 ? lm.now + ttl : 0;
	lm.c.held++;
}

/* Ends hold i of key k, counting it in *counter. */
void
m_end_hold(int k, int i, uint64_t *counter)
{
	struct m_key	*mk = &lm.key[k];

	kl_hist_add(&lm.c.hold_ms, lm.now - mk->h[i].since);
	(*counter)++;
	lm.c.held--;
	memmove(&mk->h[i], &mk->h[i + 1],
	    (size_t)(mk->nh - i - 1) * sizeof(mk->h[0]));
	mk->nh--;
}

void
m_unqueue(int o)
{
	struct m_owner	*mo = &lm.own[o];

	for (int j = 0; j < mo->r.nk; j++) {
		struct m_key	*mk = &lm.key[mo->r.k[j]];
		int		 i = 0;

		while (i < mk->nq && mk->q[i] != o)
			i++;
		if (i == mk->nq)
			lm_mfail("model: owner %d not in queue", o);
		memmove(&mk->q[i], &mk->q[i + 1],
		    (size_t)(mk->nq - i - 1) * sizeof(mk->q[0]));
		mk->nq--;
	}
	mo->waiting = false;
	lm.c.waiting--;
}

void
m_grant(int o, const struct m_req *r, uint64_t token)
{
	uint64_t	waited = lm.now - r->arrival;

	for (int j = 0; j < r->nk; j++) {
		if (!m_exists(r->k[j]))
			lm.key[r->k[j]].limit = r->limit;
		m_add_hold(r->k[j], o, r->mode, token, r->ttl);
		lm.key[r->k[j]].wait_total += waited;
	}
	lm.c.grants++;
	kl_hist_add(&lm.c.wait_ms, waited);
}

/*
 * Grants every queued request that heads all its keys' queues and fits
 * their holders, until nothing changes. Granting only touches the granted
 * request's keys, so the order of this scan does not change the outcome.
 */
void
m_grant_loop(void)
{
	bool	changed = true;

	while (changed) {
		changed = false;
		for (int o = 0; o < M_NOWNERS; o++) {
			struct m_owner	*mo = &lm.own[o];
			bool		 ok = mo->waiting;

			for (int j = 0; ok && j < mo->r.nk; j++) {
				int	k = mo->r.k[j];

				ok = lm.key[k].q[0] == o &&
				    m_compatible(k, mo->r.mode);
			}
			if (!ok)
				continue;
			m_unqueue(o);
			m_grant(o, &mo->r, 0);
			lm.want[lm.nwant].o = o;
			lm.want[lm.nwant].waited = lm.now - mo->r.arrival;
			lm.nwant++;
			changed = true;
		}
	}
	m_gc();
}

void
m_enqueue(int o, const struct m_req *r)
{
	lm.own[o].waiting = true;
	lm.own[o].r = *r;
	lm.c.waiting++;
	for (int j = 0; j < r->nk; j++) {
		struct m_key	*mk = &lm.key[r->k[j]];

		if (!m_exists(r->k[j]))
			mk->limit = r->limit;
		mk->q[mk->nq++] = o;
		if ((uint64_t)mk->nq > mk->maxw)
			mk->maxw = (uint64_t)mk->nq;
		if ((uint64_t)mk->nq > lm.c.max_waiters)
			lm.c.max_waiters = (uint64_t)mk->nq;
	}
}

/*
 * Can owner w's wait ever end, given which owners can (inp)?
 * keylockd-protocol(7): a waiting request depends on every request queued
 * ahead of it on any of its keys and on every holder it conflicts with; a wait
 * on a full semaphore depends on all of its holders together. A new request
 * (at_tail) stands behind everybody queued on its keys.
 */
static bool
m_can_proceed(int w, const struct m_req *r, bool at_tail, const bool *inp)
{
	for (int j = 0; j < r->nk; j++) {
		const struct m_key	*mk = &lm.key[r->k[j]];
		int			 pos = 0;
		bool			 any = false;

		if (at_tail)
			pos = mk->nq;
		else
			while (mk->q[pos] != w)
				pos++;
		for (int i = 0; i < pos; i++)
			if (!inp[mk->q[i]])
				return false;
		if (mk->nh == 0)
			continue;
		if (mk->limit > 1) {
			if ((uint32_t)mk->nh < mk->limit)
				continue;
			for (int i = 0; i < mk->nh; i++)
				any = any || inp[mk->h[i].o];
			if (!any)
				return false;
			continue;
		}
		for (int i = 0; i < mk->nh; i++)
			if (m_conflicts(r->k[j], i, r->mode) &&
			    !inp[mk->h[i].o])
				return false;
	}
	return true;
}

/*
 * Least fixpoint of the owners that can proceed, starting from those that
 * wait for nothing; hyp_o waits with the new request hyp (< 0: nobody).
 */
void
m_progress(int hyp_o, const struct m_req *hyp, bool *inp)
{
	bool	changed = true;

	for (int o = 0; o < M_NOWNERS; o++)
		inp[o] = !lm.own[o].waiting && o != hyp_o;
	while (changed) {
		changed = false;
		for (int o = 0; o < M_NOWNERS; o++) {
			bool	ok;

			if (inp[o])
				continue;
			if (o == hyp_o)
				ok = m_can_proceed(o, hyp, true, inp);
			else
				ok = m_can_proceed(o, &lm.own[o].r, false, inp);
			if (ok) {
				inp[o] = true;
				changed = true;
			}
		}
	}
}

bool
m_would_deadlock(int o, const struct m_req *r)
{
	bool	inp[M_NOWNERS];

	m_progress(o, r, inp);
	return !inp[o];
}
