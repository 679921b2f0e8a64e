/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Randomized model test of the lock table: thousands of seeded sequences of
 * acquire, release, disconnect, timeout, expiry and refresh run against
 * locktable.c and against a small reference model written from PROTOCOL.md
 * ("Semantics") with plain arrays, a naive grant loop and a naive fixpoint
 * deadlock check. After every step the replies, the deferred grants, every
 * key's holders and waiters, the owners and the counters must agree, and
 * locktable_check() must find nothing. The seed is fixed, so a failure
 * repeats; it prints the seed, the step and the whole sequence so far.
 *
 * Rerun one sequence: LT_MODEL_SEED=s LT_MODEL_FIRST=n LT_MODEL_SEQS=1.
 */
#include <check.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "kl.h"
#include "locktable.h"

#define M_NKEYS		6
#define M_NOWNERS	8
#define M_REQKEYS	3	/* keys in one generated request, dups too */
#define M_SEQS		3000
#define M_STEPS		200
#define M_CHUNKS	10	/* loop tests, each within its timeout */
#define M_SEED		20240611ULL
#define M_HOT		10
#define M_TRACE		(64 * 1024)
#define M_MAXGOT	(M_NOWNERS * 2)

#define R_GRANTED	(-1)
#define R_QUEUED	(-2)

static const char *const keyname[M_NKEYS] = {
	"k0", "k1", "k2", "k3", "sem2", "sem3"
};
/* The limit a request for a key usually asks: keys 4 and 5 are semaphores. */
static const uint32_t keylimit[M_NKEYS] = { 1, 1, 1, 1, 2, 3 };

struct m_hold {
	int		 o;
	uint64_t	 token;		/* 0 until the table tells */
	enum lt_mode	 mode;
	uint64_t	 since;
	uint64_t	 expires;	/* 0: no ttl */
};

struct m_key {
	uint32_t	 limit;
	int		 nh;
	struct m_hold	 h[M_NOWNERS];	/* grant order */
	int		 nq;
	int		 q[M_NOWNERS];	/* owners, arrival order */
	uint64_t	 maxw;
	uint64_t	 wait_total;
};

struct m_req {
	int		 nk;		/* distinct keys */
	int		 k[M_REQKEYS];
	enum lt_mode	 mode;
	uint32_t	 limit;
	uint64_t	 ttl;
	uint64_t	 arrival;
};

struct m_owner {
	struct lt_owner	*lo;
	uint64_t	 id;
	int		 idx;		/* the owner's udata */
	bool		 waiting;
	struct m_req	 r;
};

struct m_got {
	int		 o;
	uint64_t	 token;
	uint64_t	 waited;
};

enum m_outcome {
	O_GRANTED, O_QUEUED, O_LIMIT, O_HELD, O_CONFLICT, O_BUSY,
	O_DEADLOCK, O_LOCKED, O_NOTHELD, O_DEFERRED, O_EXPIRED, O_TIMEOUT,
	O__COUNT
};

static const char *const outcome_name[O__COUNT] = {
	"granted", "queued", "limit", "held", "conflict", "busy",
	"deadlock", "locked", "notheld", "deferred", "expired", "timeout"
};

static struct {
	struct locktable	*lt;
	struct m_key		 key[M_NKEYS];
	struct m_owner		 own[M_NOWNERS];
	struct lt_counters	 c;	/* what the table must report */
	uint64_t		 now;
	uint64_t		 next_id;
	uint64_t		 next_tok;
	uint64_t		 last_tok;
	bool			 tok_broken;
	struct m_got		 got[M_MAXGOT]; /* hook calls */
	int			 ngot;
	bool			 got_overflow;
	struct m_got		 want[M_NOWNERS];	/* model grants */
	int			 nwant;
	uint64_t		 rng;
	uint64_t		 seed;
	int			 seq;
	int			 step;
	size_t			 tracelen;
	uint64_t		 outcomes[O__COUNT];
} m;

static char		 trace[M_TRACE];

static void	mfail(const char *fmt, ...)
		    __attribute__((format(printf, 1, 2), noreturn));

#define MCK(cond, ...) do {						\
	if (!(cond))							\
		mfail(__VA_ARGS__);					\
} while (0)

static void
tracef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
tracef(const char *fmt, ...)
{
	va_list	ap;
	int	n;

	if (m.tracelen >= M_TRACE - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(trace + m.tracelen, M_TRACE - m.tracelen, fmt, ap);
	va_end(ap);
	if (n > 0)
		m.tracelen += (size_t)n;
	if (m.tracelen > M_TRACE - 1)
		m.tracelen = M_TRACE - 1;
}

/* The model's state, as "k0 limit 1: 3 5s | 4 (w 6)" lines. */
static void
dump_model(void)
{
	for (int k = 0; k < M_NKEYS; k++) {
		const struct m_key	*mk = &m.key[k];

		if (mk->nh + mk->nq == 0)
			continue;
		fprintf(stderr, "  %s limit %u:", keyname[k], mk->limit);
		for (int i = 0; i < mk->nh; i++)
			fprintf(stderr, " %ju%s",
			    (uintmax_t)m.own[mk->h[i].o].id,
			    mk->h[i].mode == LT_SHARED ? "s" : "");
		fprintf(stderr, " |");
		for (int i = 0; i < mk->nq; i++)
			fprintf(stderr, " %ju%s", (uintmax_t)m.own[mk->q[i]].id,
			    m.own[mk->q[i]].r.mode == LT_SHARED ? "s" : "");
		fprintf(stderr, "\n");
	}
}

static void
mfail(const char *fmt, ...)
{
	char	msg[512];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "--- model sequence (seed %ju, sequence %d) ---\n%s"
	    "--- failed at step %d, now %ju: %s\n--- model state (holders "
	    "| waiters; s: shared):\n", (uintmax_t)m.seed, m.seq, trace,
	    m.step, (uintmax_t)m.now, msg);
	dump_model();
	ck_abort_msg("seed %ju sequence %d step %d: %s (rerun: LT_MODEL_SEED="
	    "%ju LT_MODEL_FIRST=%d LT_MODEL_SEQS=1)", (uintmax_t)m.seed, m.seq,
	    m.step, msg, (uintmax_t)m.seed, m.seq);
	abort();
}

/* splitmix64: small, fast, and the same on every platform. */
static uint64_t
rnd64(void)
{
	uint64_t	z = (m.rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int
rnd(int n)
{
	return (int)(rnd64() % (uint64_t)n);
}

static bool
chance(int pct)
{
	return rnd(100) < pct;
}

/* hooks */

static uint64_t
hook_next_token(void *arg)
{
	(void)arg;
	return m.next_tok++;
}

static void
hook_granted(void *arg, struct lt_owner *o, uint64_t token,
    uint64_t waited_ms)
{
	(void)arg;
	if (token <= m.last_tok)
		m.tok_broken = true;
	m.last_tok = token;
	if (m.ngot == M_MAXGOT) {
		m.got_overflow = true;
		return;
	}
	m.got[m.ngot].o = *(int *)locktable_owner_udata(o);
	m.got[m.ngot].token = token;
	m.got[m.ngot].waited = waited_ms;
	m.ngot++;
}

/* the reference model */

static bool
m_exists(int k)
{
	return m.key[k].nh + m.key[k].nq > 0;
}

static int
m_holder_index(int k, int o)
{
	for (int i = 0; i < m.key[k].nh; i++)
		if (m.key[k].h[i].o == o)
			return i;
	return -1;
}

static int
m_nholds(int o)
{
	int	n = 0;

	for (int k = 0; k < M_NKEYS; k++)
		n += m_holder_index(k, o) >= 0;
	return n;
}

/* PROTOCOL.md, Semantics: may this request join the key's holders? */
static bool
m_compatible(int k, enum lt_mode mode)
{
	const struct m_key	*mk = &m.key[k];

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
static bool
m_conflicts(int k, int i, enum lt_mode mode)
{
	const struct m_key	*mk = &m.key[k];

	if (mk->limit > 1)
		return (uint32_t)mk->nh >= mk->limit;
	return mode == LT_EXCLUSIVE || mk->h[i].mode == LT_EXCLUSIVE;
}

static void
m_gc(void)
{
	for (int k = 0; k < M_NKEYS; k++)
		if (!m_exists(k))
			memset(&m.key[k], 0, sizeof(m.key[k]));
}

static void
m_add_hold(int k, int o, enum lt_mode mode, uint64_t token, uint64_t ttl)
{
	struct m_key	*mk = &m.key[k];
	struct m_hold	*h = &mk->h[mk->nh++];

	h->o = o;
	h->token = token;
	h->mode = mode;
	h->since = m.now;
	h->expires = ttl > 0 ? m.now + ttl : 0;
	m.c.held++;
}

/* Ends hold i of key k, counting it in *counter. */
static void
m_end_hold(int k, int i, uint64_t *counter)
{
	struct m_key	*mk = &m.key[k];

	kl_hist_add(&m.c.hold_ms, m.now - mk->h[i].since);
	(*counter)++;
	m.c.held--;
	memmove(&mk->h[i], &mk->h[i + 1],
	    (size_t)(mk->nh - i - 1) * sizeof(mk->h[0]));
	mk->nh--;
}

static void
m_unqueue(int o)
{
	struct m_owner	*mo = &m.own[o];

	for (int j = 0; j < mo->r.nk; j++) {
		struct m_key	*mk = &m.key[mo->r.k[j]];
		int		 i = 0;

		while (i < mk->nq && mk->q[i] != o)
			i++;
		if (i == mk->nq)
			mfail("model: owner %d not in queue", o);
		memmove(&mk->q[i], &mk->q[i + 1],
		    (size_t)(mk->nq - i - 1) * sizeof(mk->q[0]));
		mk->nq--;
	}
	mo->waiting = false;
	m.c.waiting--;
}

static void
m_grant(int o, const struct m_req *r, uint64_t token)
{
	uint64_t	waited = m.now - r->arrival;

	for (int j = 0; j < r->nk; j++) {
		if (!m_exists(r->k[j]))
			m.key[r->k[j]].limit = r->limit;
		m_add_hold(r->k[j], o, r->mode, token, r->ttl);
		m.key[r->k[j]].wait_total += waited;
	}
	m.c.grants++;
	kl_hist_add(&m.c.wait_ms, waited);
}

/*
 * Grants every queued request that heads all its keys' queues and fits
 * their holders, until nothing changes. Granting only touches the granted
 * request's keys, so the order of this scan does not change the outcome.
 */
static void
m_grant_loop(void)
{
	bool	changed = true;

	while (changed) {
		changed = false;
		for (int o = 0; o < M_NOWNERS; o++) {
			struct m_owner	*mo = &m.own[o];
			bool		 ok = mo->waiting;

			for (int j = 0; ok && j < mo->r.nk; j++) {
				int	k = mo->r.k[j];

				ok = m.key[k].q[0] == o &&
				    m_compatible(k, mo->r.mode);
			}
			if (!ok)
				continue;
			m_unqueue(o);
			m_grant(o, &mo->r, 0);
			m.want[m.nwant].o = o;
			m.want[m.nwant].waited = m.now - mo->r.arrival;
			m.nwant++;
			changed = true;
		}
	}
	m_gc();
}

static void
m_enqueue(int o, const struct m_req *r)
{
	m.own[o].waiting = true;
	m.own[o].r = *r;
	m.c.waiting++;
	for (int j = 0; j < r->nk; j++) {
		struct m_key	*mk = &m.key[r->k[j]];

		if (!m_exists(r->k[j]))
			mk->limit = r->limit;
		mk->q[mk->nq++] = o;
		if ((uint64_t)mk->nq > mk->maxw)
			mk->maxw = (uint64_t)mk->nq;
		if ((uint64_t)mk->nq > m.c.max_waiters)
			m.c.max_waiters = (uint64_t)mk->nq;
	}
}

/*
 * Can owner w's wait ever end, given which owners can (inp)? PROTOCOL.md:
 * a waiting request depends on every request queued ahead of it on any of
 * its keys and on every holder it conflicts with; a wait on a full
 * semaphore depends on all of its holders together. A new request (at_tail)
 * stands behind everybody queued on its keys.
 */
static bool
m_can_proceed(int w, const struct m_req *r, bool at_tail, const bool *inp)
{
	for (int j = 0; j < r->nk; j++) {
		const struct m_key	*mk = &m.key[r->k[j]];
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
static void
m_progress(int hyp_o, const struct m_req *hyp, bool *inp)
{
	bool	changed = true;

	for (int o = 0; o < M_NOWNERS; o++)
		inp[o] = !m.own[o].waiting && o != hyp_o;
	while (changed) {
		changed = false;
		for (int o = 0; o < M_NOWNERS; o++) {
			bool	ok;

			if (inp[o])
				continue;
			if (o == hyp_o)
				ok = m_can_proceed(o, hyp, true, inp);
			else
				ok = m_can_proceed(o, &m.own[o].r, false, inp);
			if (ok) {
				inp[o] = true;
				changed = true;
			}
		}
	}
}

static bool
m_would_deadlock(int o, const struct m_req *r)
{
	bool	inp[M_NOWNERS];

	m_progress(o, r, inp);
	return !inp[o];
}

/* checks against the table */

static int
key_index(const char *key, size_t len)
{
	for (int k = 0; k < M_NKEYS; k++)
		if (strlen(keyname[k]) == len &&
		    memcmp(keyname[k], key, len) == 0)
			return k;
	return -1;
}

/*
 * why names key k (in mask) and, as holder, the longest-standing holder
 * that conflicts with mode, or NULL if none does.
 */
static void
check_blocker(const char *what, const struct lt_blocker *why,
    unsigned mask, enum lt_mode mode)
{
	const struct m_key	*mk;
	int			 k, best = -1;

	MCK(why->key != NULL, "%s: no key", what);
	k = key_index(why->key, why->keylen);
	MCK(k >= 0 && (mask & (1u << k)) != 0, "%s: key %.*s does not block",
	    what, (int)why->keylen, why->key);
	mk = &m.key[k];
	MCK(why->nholders == (size_t)mk->nh && why->nwaiters ==
	    (size_t)mk->nq, "%s: key %s has %d holders %d waiters, not "
	    "%zu %zu", what, keyname[k], mk->nh, mk->nq, why->nholders,
	    why->nwaiters);
	for (int i = 0; i < mk->nh; i++)
		if (m_conflicts(k, i, mode) &&
		    (best < 0 || mk->h[i].since < mk->h[best].since))
			best = i;
	if (best < 0) {
		MCK(why->holder == NULL, "%s: key %s: holder named but none "
		    "conflicts", what, keyname[k]);
		return;
	}
	MCK(why->holder != NULL, "%s: key %s: no holder named", what,
	    keyname[k]);
	for (int i = 0; i < mk->nh; i++)
		if (m.own[mk->h[i].o].lo == why->holder) {
			MCK(m_conflicts(k, i, mode) &&
			    mk->h[i].since == mk->h[best].since,
			    "%s: key %s: holder %ju is not the longest "
			    "conflicting one (%ju)", what, keyname[k],
			    (uintmax_t)m.own[mk->h[i].o].id,
			    (uintmax_t)m.own[mk->h[best].o].id);
			MCK(why->held_ms == m.now - mk->h[i].since,
			    "%s: held_ms %ju, want %ju", what,
			    (uintmax_t)why->held_ms,
			    (uintmax_t)(m.now - mk->h[i].since));
			return;
		}
	mfail("%s: key %s: holder is not a holder", what, keyname[k]);
}

/* Keys of r that keep it from being granted now (at its queue place). */
static unsigned
blocking_keys(int o, const struct m_req *r, bool at_tail)
{
	unsigned	mask = 0;

	for (int j = 0; j < r->nk; j++) {
		int	k = r->k[j];

		if ((at_tail ? m.key[k].nq > 0 : m.key[k].q[0] != o) ||
		    !m_compatible(k, r->mode))
			mask |= 1u << k;
	}
	return mask;
}

/* The deferred grants the table reported must be those the model made. */
static void
match_grants(void)
{
	MCK(!m.got_overflow, "too many granted hook calls");
	MCK(!m.tok_broken, "tokens not strictly increasing");
	MCK(m.ngot == m.nwant, "%d deferred grants, model made %d", m.ngot,
	    m.nwant);
	for (int i = 0; i < m.ngot; i++) {
		int	j = 0;

		while (j < m.nwant && m.want[j].o != m.got[i].o)
			j++;
		MCK(j < m.nwant, "granted owner %ju, model did not",
		    (uintmax_t)m.own[m.got[i].o].id);
		MCK(m.got[i].waited == m.want[j].waited, "owner %ju waited "
		    "%ju ms, want %ju", (uintmax_t)m.own[m.got[i].o].id,
		    (uintmax_t)m.got[i].waited, (uintmax_t)m.want[j].waited);
		m.want[j].o = -1;
		for (int k = 0; k < M_NKEYS; k++) {
			int	h = m_holder_index(k, m.got[i].o);

			if (h >= 0 && m.key[k].h[h].token == 0)
				m.key[k].h[h].token = m.got[i].token;
		}
		tracef("    granted id %ju token %ju waited %ju\n",
		    (uintmax_t)m.own[m.got[i].o].id,
		    (uintmax_t)m.got[i].token, (uintmax_t)m.got[i].waited);
	}
	m.outcomes[O_DEFERRED] += (uint64_t)m.ngot;
	m.ngot = 0;
	m.nwant = 0;
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
	const struct m_key	*mk = &m.key[w->k];
	const struct m_hold	*h;

	MCK(w->nw == 0, "%s: holder after a waiter", keyname[w->k]);
	MCK(w->nh < mk->nh, "%s: more holders than %d", keyname[w->k],
	    mk->nh);
	h = &mk->h[w->nh];
	MCK(v->owner == m.own[h->o].lo, "%s: holder %d is id %ju, want %ju",
	    keyname[w->k], w->nh, (uintmax_t)locktable_owner_id(v->owner),
	    (uintmax_t)m.own[h->o].id);
	MCK(v->token == h->token, "%s: holder id %ju token %ju, want %ju",
	    keyname[w->k], (uintmax_t)m.own[h->o].id, (uintmax_t)v->token,
	    (uintmax_t)h->token);
	MCK(v->mode == h->mode, "%s: holder mode", keyname[w->k]);
	MCK(v->held_ms == m.now - h->since, "%s: held_ms %ju, want %ju",
	    keyname[w->k], (uintmax_t)v->held_ms,
	    (uintmax_t)(m.now - h->since));
	MCK(v->expires_in_ms == (h->expires ? h->expires - m.now : 0),
	    "%s: holder id %ju expires_in_ms %ju, want %ju", keyname[w->k],
	    (uintmax_t)m.own[h->o].id, (uintmax_t)v->expires_in_ms,
	    (uintmax_t)(h->expires ? h->expires - m.now : 0));
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
	const struct m_key	*mk = &m.key[w->k];
	const struct m_owner	*mo;

	MCK(w->nw < mk->nq, "%s: more waiters than %d", keyname[w->k],
	    mk->nq);
	mo = &m.own[mk->q[w->nw]];
	MCK(v->owner == mo->lo, "%s: waiter %d is id %ju, want %ju",
	    keyname[w->k], w->nw, (uintmax_t)locktable_owner_id(v->owner),
	    (uintmax_t)mo->id);
	MCK(v->mode == mo->r.mode, "%s: waiter mode", keyname[w->k]);
	MCK(v->waited_ms == m.now - mo->r.arrival, "%s: waited_ms",
	    keyname[w->k]);
	MCK(v->nkeys == (size_t)mo->r.nk, "%s: waiter nkeys %zu, want %d",
	    keyname[w->k], v->nkeys, mo->r.nk);
	MCK(w->nw == 0 || v->waited_ms <= w->last_waited,
	    "%s: queue not in arrival order", keyname[w->k]);
	w->last_waited = v->waited_ms;
	w->nw++;
	return true;
}

static void
compare_key(int k)
{
	const struct lt_key	*lk;
	const struct m_key	*mk = &m.key[k];
	struct lt_key_view	 v;
	struct walk_ctx		 w;

	lk = locktable_find(m.lt, keyname[k], strlen(keyname[k]));
	if (!m_exists(k)) {
		MCK(lk == NULL, "key %s has an entry, model has none",
		    keyname[k]);
		return;
	}
	MCK(lk != NULL, "key %s has no entry (model: %d holders, %d "
	    "waiters)", keyname[k], mk->nh, mk->nq);
	locktable_key_view(lk, &v);
	MCK(v.keylen == strlen(keyname[k]) &&
	    memcmp(v.key, keyname[k], v.keylen) == 0, "key view name");
	MCK(v.limit == mk->limit, "%s: limit %u, want %u", keyname[k],
	    v.limit, mk->limit);
	MCK(v.nholders == (size_t)mk->nh, "%s: %zu holders, want %d",
	    keyname[k], v.nholders, mk->nh);
	MCK(v.nwaiters == (size_t)mk->nq, "%s: %zu waiters, want %d",
	    keyname[k], v.nwaiters, mk->nq);
	MCK(v.max_waiters == mk->maxw, "%s: max_waiters %ju, want %ju",
	    keyname[k], (uintmax_t)v.max_waiters, (uintmax_t)mk->maxw);
	MCK(v.wait_ms_total == mk->wait_total, "%s: wait_ms_total %ju, want "
	    "%ju", keyname[k], (uintmax_t)v.wait_ms_total,
	    (uintmax_t)mk->wait_total);
	memset(&w, 0, sizeof(w));
	w.k = k;
	locktable_key_walk(m.lt, lk, m.now, walk_holder, walk_waiter, &w);
	MCK(w.nh == mk->nh && w.nw == mk->nq, "%s: walk saw %d/%d, want "
	    "%d/%d", keyname[k], w.nh, w.nw, mk->nh, mk->nq);
	/* invariants, whatever the model says */
	MCK(v.limit == 1 || ((uint32_t)w.nh <= v.limit && w.nshared == 0),
	    "%s: %d holders (%d shared) over limit %u", keyname[k], w.nh,
	    w.nshared, v.limit);
	MCK(w.nexcl <= 1 || v.limit > 1, "%s: two exclusive holders",
	    keyname[k]);
	MCK(w.nexcl == 0 || w.nshared == 0, "%s: shared and exclusive "
	    "holders together", keyname[k]);
}

static void
compare_hist(const char *what, const struct kl_hist *got,
    const struct kl_hist *want)
{
	MCK(got->count == want->count && got->sum_ms == want->sum_ms,
	    "%s: count %ju sum %ju, want %ju %ju", what,
	    (uintmax_t)got->count, (uintmax_t)got->sum_ms,
	    (uintmax_t)want->count, (uintmax_t)want->sum_ms);
	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++)
		MCK(got->counts[i] == want->counts[i], "%s: bucket %zu", what,
		    i);
}

#define CMP_CTR(f) MCK(c->f == m.c.f, "counter " #f " %ju, want %ju",	\
	(uintmax_t)c->f, (uintmax_t)m.c.f)

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
			want[nwant++] = m.key[k].nq;
	/* sort the model's waiter counts, most first */
	for (int i = 1; i < nwant; i++)
		for (int j = i; j > 0 && want[j - 1] < want[j]; j--) {
			int t = want[j];
			want[j] = want[j - 1];
			want[j - 1] = t;
		}
	nkeys = (size_t)nwant;
	n = locktable_hot_keys(m.lt, out, M_HOT);
	MCK(n == (nkeys < M_HOT ? nkeys : M_HOT), "hot_keys gave %zu of %zu",
	    n, nkeys);
	for (size_t i = 0; i < n; i++) {
		int	k;

		locktable_key_view(out[i], &v);
		k = key_index(v.key, v.keylen);
		MCK(k >= 0 && (seen & (1u << k)) == 0, "hot_keys: bad or "
		    "repeated key");
		seen |= 1u << k;
		MCK(v.nwaiters <= prev, "hot_keys: not most waiters first");
		MCK(v.nwaiters == (size_t)want[i], "hot_keys: entry %zu has "
		    "%zu waiters, want %d", i, v.nwaiters, want[i]);
		prev = v.nwaiters;
	}
	if (nkeys > 1) {
		n = locktable_hot_keys(m.lt, out, 1);
		MCK(n == 1, "hot_keys(1) gave %zu", n);
		locktable_key_view(out[0], &v);
		MCK(v.nwaiters == (size_t)want[0], "hot_keys(1): %zu waiters, "
		    "want %d", v.nwaiters, want[0]);
	}
}

static void
compare_all(void)
{
	const struct lt_counters *c = locktable_counters(m.lt);
	const char		*e = locktable_check(m.lt);
	uint64_t		 next = UINT64_MAX, keys = 0;
	bool			 inp[M_NOWNERS];

	MCK(e == NULL, "locktable_check: %s", e);
	MCK(m.ngot == 0, "unmatched granted hook calls");
	for (int k = 0; k < M_NKEYS; k++) {
		keys += m_exists(k);
		compare_key(k);
		for (int i = 0; i < m.key[k].nh; i++)
			if (m.key[k].h[i].expires != 0 &&
			    m.key[k].h[i].expires < next)
				next = m.key[k].h[i].expires;
	}
	m.c.keys = keys;
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
	compare_hist("wait_ms", &c->wait_ms, &m.c.wait_ms);
	compare_hist("hold_ms", &c->hold_ms, &m.c.hold_ms);
	MCK(locktable_next_expiry(m.lt) == next, "next_expiry %ju, want %ju",
	    (uintmax_t)locktable_next_expiry(m.lt), (uintmax_t)next);
	for (int o = 0; o < M_NOWNERS; o++) {
		struct m_owner		*mo = &m.own[o];
		struct lt_blocker	 why;
		bool			 w;

		MCK(locktable_owner_nholds(mo->lo) == (size_t)m_nholds(o),
		    "owner id %ju holds %zu, want %d", (uintmax_t)mo->id,
		    locktable_owner_nholds(mo->lo), m_nholds(o));
		MCK(locktable_owner_is_waiting(mo->lo) == mo->waiting,
		    "owner id %ju waiting %d, want %d", (uintmax_t)mo->id,
		    locktable_owner_is_waiting(mo->lo), mo->waiting);
		memset(&why, 0, sizeof(why));
		w = locktable_wait_blocker(m.lt, mo->lo, m.now, &why);
		MCK(w == mo->waiting, "wait_blocker of id %ju",
		    (uintmax_t)mo->id);
		if (w)
			check_blocker("wait_blocker", &why,
			    blocking_keys(o, &mo->r, false), mo->r.mode);
	}
	compare_hot_keys();
	/* model self-check: refusing cycles leaves no stuck owner */
	m_progress(-1, NULL, inp);
	for (int o = 0; o < M_NOWNERS; o++)
		MCK(inp[o], "model: owner id %ju is deadlocked",
		    (uintmax_t)m.own[o].id);
}

/* operations */

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
		tracef("%s%s", i > 0 ? " " : "", keyname[raw[i]]);
}

/* What PROTOCOL.md says a request gets; why masks for HELD/CONFLICT/BUSY. */
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
		if (m_exists(r->k[j]) && m.key[r->k[j]].limit != r->limit)
			*mask |= 1u << r->k[j];
	if (*mask != 0) {
		m.c.conflicts++;
		return KL_ERR_CONFLICT;
	}
	for (int j = 0; j < r->nk; j++)
		if (m.key[r->k[j]].nq > 0 || !m_compatible(r->k[j], r->mode))
			grantable = false;
	if (grantable)
		return R_GRANTED;
	for (int j = 0; mw >= 0 && j < r->nk; j++)
		if (m.key[r->k[j]].nq >= mw)
			*mask |= 1u << r->k[j];
	if (*mask != 0) {
		m.c.busy++;
		return KL_ERR_BUSY;
	}
	if (m_would_deadlock(o, r)) {
		m.c.deadlocks++;
		return KL_ERR_DEADLOCK;
	}
	if (try)
		return KL_ERR_LOCKED;
	return R_QUEUED;
}

static void
op_acquire(int o)
{
	struct m_owner		*mo = &m.own[o];
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
	nraw = 1 + rnd(M_REQKEYS);
	for (int i = 0; i < nraw; i++) {
		int	k = rnd(M_NKEYS);

		raw[i] = k;
		/* copies, spoiled after the call: the table must copy too */
		memcpy(buf[i], keyname[k], strlen(keyname[k]));
		keys[i] = buf[i];
		lens[i] = strlen(keyname[k]);
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
	a.mode = chance(30) ? LT_SHARED : LT_EXCLUSIVE;
	if (a.mode == LT_SHARED)
		a.limit = 1;
	else if (chance(85))
		a.limit = keylimit[k0];
	else
		a.limit = 1 + (uint32_t)rnd(3);
	a.try = chance(20);
	a.max_waiters = chance(12) ? rnd(3) : -1;
	a.ttl_ms = chance(20) ? 1 + (uint64_t)rnd(40) : 0;
	a.max_holds = chance(8) ? 1 + (size_t)rnd(4) : 0;
	r.mode = a.mode;
	r.limit = a.limit;
	r.ttl = a.ttl_ms;
	r.arrival = m.now;

	tracef("%d t=%ju: id %ju acquire [", m.step, (uintmax_t)m.now,
	    (uintmax_t)mo->id);
	trace_keys(raw, nraw);
	tracef("] %s limit=%u%s max_waiters=%jd ttl=%ju max_holds=%zu",
	    mode_name(a.mode), a.limit, a.try ? " try" : "",
	    (intmax_t)a.max_waiters, (uintmax_t)a.ttl_ms, a.max_holds);

	want = m_decide(o, &r, a.try, a.max_waiters, a.max_holds, &mask);
	memset(&why, 0, sizeof(why));
	err = locktable_acquire(m.lt, mo->lo, &a, m.now, &granted, &token,
	    &why);
	for (int i = 0; i < nraw; i++)
		memset(buf[i], '#', sizeof(buf[i]));
	got = err != KL_OK ? (int)err : granted ? R_GRANTED : R_QUEUED;
	tracef(" -> %s", res_name(got));
	if (got == R_GRANTED)
		tracef(" token %ju", (uintmax_t)token);
	tracef(" (model %s)\n", res_name(want));
	MCK(got == want, "acquire: got %s, model says %s", res_name(got),
	    res_name(want));
	MCK(m.ngot == 0, "granted hook called from acquire");

	switch (want) {
	case R_GRANTED:
		MCK(token > m.last_tok, "token %ju not above %ju",
		    (uintmax_t)token, (uintmax_t)m.last_tok);
		m.last_tok = token;
		m_grant(o, &r, token);
		m.outcomes[O_GRANTED]++;
		break;
	case R_QUEUED:
		m_enqueue(o, &r);
		m.outcomes[O_QUEUED]++;
		break;
	case KL_ERR_HELD:
	case KL_ERR_CONFLICT:
		MCK(why.key != NULL && key_index(why.key, why.keylen) >= 0 &&
		    (mask & (1u << key_index(why.key, why.keylen))) != 0,
		    "%s names the wrong key", res_name(want));
		m.outcomes[want == KL_ERR_HELD ? O_HELD : O_CONFLICT]++;
		break;
	case KL_ERR_BUSY:
		/* a key with too many waiters that blocks the request */
		check_blocker("BUSY", &why, mask & blocking_keys(o, &r, true),
		    r.mode);
		m.outcomes[O_BUSY]++;
		break;
	case KL_ERR_LOCKED:
		check_blocker("LOCKED", &why, blocking_keys(o, &r, true),
		    r.mode);
		m.outcomes[O_LOCKED]++;
		break;
	case KL_ERR_DEADLOCK: {
		int	k = why.key == NULL ? -1 :
			    key_index(why.key, why.keylen);
		bool	mine = false;

		for (int j = 0; j < r.nk; j++)
			mine = mine || r.k[j] == k;
		MCK(mine, "DEADLOCK names a key not in the request");
		m.outcomes[O_DEADLOCK]++;
		break;
	}
	case KL_ERR_LIMIT:
		m.outcomes[O_LIMIT]++;
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
	int	held[M_NKEYS], nheld = 0, n = 1 + rnd(3);
	unsigned seen = 0;

	for (int k = 0; k < M_NKEYS; k++)
		if (m_holder_index(k, o) >= 0)
			held[nheld++] = k;
	*bad = 0;
	*distinct = 0;
	for (int i = 0; i < n; i++) {
		raw[i] = nheld > 0 && chance(80) ? held[rnd(nheld)] :
		    rnd(M_NKEYS);
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
	struct m_owner	*mo = &m.own[o];
	const char	*keys[M_REQKEYS];
	size_t		 lens[M_REQKEYS], n = 9999, bad_index = 9999;
	int		 raw[M_REQKEYS], nraw, nd;
	unsigned	 bad, seen = 0;
	uint64_t	 ttl = 1 + (uint64_t)rnd(40);
	enum kl_err	 err, want;

	nraw = pick_held_keys(o, raw, &bad, &nd);
	for (int i = 0; i < nraw; i++) {
		keys[i] = keyname[raw[i]];
		lens[i] = strlen(keyname[raw[i]]);
	}
	tracef("%d t=%ju: id %ju %s [", m.step, (uintmax_t)m.now,
	    (uintmax_t)mo->id, refresh ? "refresh" : "release");
	trace_keys(raw, nraw);
	if (refresh)
		tracef("] ttl=%ju", (uintmax_t)ttl);
	else
		tracef("]");
	if (refresh)
		err = locktable_refresh(m.lt, mo->lo, keys, lens,
		    (size_t)nraw, ttl, m.now, &n, &bad_index);
	else
		err = locktable_release(m.lt, mo->lo, keys, lens,
		    (size_t)nraw, m.now, &n, &bad_index);
	want = bad != 0 ? KL_ERR_NOTHELD : KL_OK;
	tracef(" -> %s n=%zu bad_index=%zu\n", res_name((int)err),
	    err == KL_OK ? n : 0, err == KL_OK ? 0 : bad_index);
	MCK(err == want, "%s: got %s, want %s", refresh ? "refresh" :
	    "release", res_name((int)err), res_name((int)want));
	if (err != KL_OK) {
		MCK(bad_index < (size_t)nraw &&
		    (bad & (1u << bad_index)) != 0,
		    "bad_index %zu is not an unheld key", bad_index);
		MCK(m.ngot == 0, "NOTHELD granted something");
		m.outcomes[O_NOTHELD]++;
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
			m.key[k].h[h].expires = m.now + ttl;
		else
			m_end_hold(k, h, &m.c.releases);
	}
	if (!refresh)
		m_grant_loop();
	match_grants();
}

/*
 * Withdraws o's wait and ends its holds, as release_owner and owner_free.
 * A shutdown bumps no counter; its holds still end in hold_ms.
 */
static size_t
m_release_owner(int o, enum lt_why why)
{
	uint64_t	none = 0, *counter = &none;
	size_t		n = 0;

	if (why == LT_WHY_UNLOCK)
		counter = &m.c.releases;
	else if (why == LT_WHY_DISCONNECT)
		counter = &m.c.disconnect_releases;

	if (m.own[o].waiting)
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
	struct m_owner	*mo = &m.own[o];
	enum lt_why	 why;
	size_t		 n, want;

	if (!mo->waiting && chance(50))
		why = LT_WHY_UNLOCK;
	else
		why = chance(85) ? LT_WHY_DISCONNECT : LT_WHY_SHUTDOWN;
	tracef("%d t=%ju: id %ju release_owner %s", m.step, (uintmax_t)m.now,
	    (uintmax_t)mo->id, why == LT_WHY_UNLOCK ? "unlock" :
	    why == LT_WHY_DISCONNECT ? "disconnect" : "shutdown");
	n = locktable_release_owner(m.lt, mo->lo, m.now, why);
	want = m_release_owner(o, why);
	tracef(" -> %zu (model %zu)\n", n, want);
	MCK(n == want, "release_owner released %zu, want %zu", n, want);
	match_grants();
}

static void
op_replace_owner(int o)
{
	struct m_owner	*mo = &m.own[o];

	tracef("%d t=%ju: id %ju owner_free", m.step, (uintmax_t)m.now,
	    (uintmax_t)mo->id);
	locktable_owner_free(m.lt, mo->lo, m.now);
	(void)m_release_owner(o, LT_WHY_DISCONNECT);
	mo->id = m.next_id++;
	tracef(", new owner id %ju\n", (uintmax_t)mo->id);
	match_grants();
	mo->lo = locktable_owner_new(m.lt, mo->id, &mo->idx);
	MCK(mo->lo != NULL, "owner_new failed");
}

static void
op_withdraw(int o)
{
	struct m_owner	*mo = &m.own[o];
	enum lt_why	 why = chance(85) ? LT_WHY_TIMEOUT : LT_WHY_SHUTDOWN;
	bool		 b;

	tracef("%d t=%ju: id %ju withdraw %s", m.step, (uintmax_t)m.now,
	    (uintmax_t)mo->id, why == LT_WHY_TIMEOUT ? "timeout" : "shutdown");
	b = locktable_withdraw(m.lt, mo->lo, m.now, why);
	tracef(" -> %d\n", b);
	MCK(b == mo->waiting, "withdraw returned %d, model waiting %d", b,
	    mo->waiting);
	if (b) {
		m_unqueue(o);
		if (why == LT_WHY_TIMEOUT) {
			m.c.timeouts++;
			m.outcomes[O_TIMEOUT]++;
		}
		m_grant_loop();
	}
	match_grants();
}

static uint64_t
m_next_expiry(void)
{
	uint64_t	next = UINT64_MAX;

	for (int k = 0; k < M_NKEYS; k++)
		for (int i = 0; i < m.key[k].nh; i++)
			if (m.key[k].h[i].expires != 0 &&
			    m.key[k].h[i].expires < next)
				next = m.key[k].h[i].expires;
	return next;
}

static void
op_expire(void)
{
	size_t	n, want = 0;

	tracef("%d t=%ju: expire", m.step, (uintmax_t)m.now);
	n = locktable_expire(m.lt, m.now);
	for (int k = 0; k < M_NKEYS; k++)
		for (int i = 0; i < m.key[k].nh; )
			if (m.key[k].h[i].expires != 0 &&
			    m.key[k].h[i].expires <= m.now) {
				m_end_hold(k, i, &m.c.expired);
				want++;
			} else
				i++;
	m_grant_loop();
	tracef(" -> %zu (model %zu)\n", n, want);
	MCK(n == want, "expire ended %zu holds, want %zu", n, want);
	m.outcomes[O_EXPIRED] += (uint64_t)n;
	match_grants();
}

static int
pick_owner(bool waiting)
{
	int	start = rnd(M_NOWNERS);

	for (int i = 0; i < M_NOWNERS; i++) {
		int	o = (start + i) % M_NOWNERS;

		if (m.own[o].waiting == waiting)
			return o;
	}
	return -1;
}

static void
step(void)
{
	int	o, r = rnd(100);

	m.now += (uint64_t)rnd(4);
	if (m_next_expiry() <= m.now)
		op_expire();
	if (r < 45) {
		if ((o = pick_owner(false)) >= 0)
			op_acquire(o);
		else
			op_withdraw(rnd(M_NOWNERS));
	} else if (r < 60)
		op_release_or_refresh(rnd(M_NOWNERS), false);
	else if (r < 67)
		op_release_or_refresh(rnd(M_NOWNERS), true);
	else if (r < 77) {
		o = pick_owner(true);
		op_withdraw(o >= 0 && chance(80) ? o : rnd(M_NOWNERS));
	} else if (r < 82)
		op_release_owner(rnd(M_NOWNERS));
	else if (r < 85)
		op_replace_owner(rnd(M_NOWNERS));
	else if (r < 92) {
		uint64_t	next = m_next_expiry();

		/* up to the next expiry, or just short of it */
		if (next != UINT64_MAX && chance(70))
			m.now = next - (uint64_t)rnd(2);
		else
			m.now += (uint64_t)rnd(60);
		op_expire();
	} else {
		o = pick_owner(false);
		if (o >= 0)
			op_acquire(o);
	}
	compare_all();
}

static void
run_sequence(uint64_t seed, int seq)
{
	static const struct lt_hooks hooks = {
		.granted = hook_granted,
		.next_token = hook_next_token,
		.arg = NULL
	};
	uint64_t outcomes[O__COUNT];

	memcpy(outcomes, m.outcomes, sizeof(outcomes));
	memset(&m, 0, sizeof(m));
	memcpy(m.outcomes, outcomes, sizeof(outcomes));
	trace[0] = '\0';
	m.seed = seed;
	m.seq = seq;
	m.rng = seed * 0x100000001b3ULL + (uint64_t)seq;
	m.next_tok = 1;
	m.next_id = 1;
	m.now = 1000 + (uint64_t)rnd(1000);
	m.lt = locktable_new(&hooks, rnd64());
	MCK(m.lt != NULL, "locktable_new failed");
	for (int o = 0; o < M_NOWNERS; o++) {
		m.own[o].idx = o;
		m.own[o].id = m.next_id++;
		m.own[o].lo = locktable_owner_new(m.lt, m.own[o].id,
		    &m.own[o].idx);
		MCK(m.own[o].lo != NULL, "owner_new failed");
	}
	compare_all();
	for (m.step = 1; m.step <= M_STEPS; m.step++)
		step();
	/* everybody leaves: nothing may stay behind */
	for (int o = 0; o < M_NOWNERS; o++) {
		m.now += (uint64_t)rnd(3);
		if (m_next_expiry() <= m.now)
			op_expire();
		tracef("end t=%ju: id %ju owner_free\n", (uintmax_t)m.now,
		    (uintmax_t)m.own[o].id);
		locktable_owner_free(m.lt, m.own[o].lo, m.now);
		(void)m_release_owner(o, LT_WHY_DISCONNECT);
		match_grants();
		m.own[o].lo = locktable_owner_new(m.lt, m.next_id++,
		    &m.own[o].idx);
		m.own[o].id = m.next_id - 1;
		compare_all();
	}
	{
		const struct lt_counters *c = locktable_counters(m.lt);

		MCK(c->keys == 0 && c->held == 0 && c->waiting == 0,
		    "left behind: keys %ju held %ju waiting %ju",
		    (uintmax_t)c->keys, (uintmax_t)c->held,
		    (uintmax_t)c->waiting);
	}
	for (int o = 0; o < M_NOWNERS; o++)
		locktable_owner_free(m.lt, m.own[o].lo, m.now);
	locktable_free(m.lt);
	m.lt = NULL;
}

static uint64_t
env_u64(const char *name, uint64_t dflt)
{
	const char	*s = getenv(name);
	char		*end;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return dflt;
	v = strtoull(s, &end, 0);
	if (*end != '\0')
		return dflt;
	return (uint64_t)v;
}

START_TEST(model_matches_reference)
{
	uint64_t	seed = env_u64("LT_MODEL_SEED", M_SEED);
	int		first, nseqs;
	bool		chosen = getenv("LT_MODEL_FIRST") != NULL ||
			    getenv("LT_MODEL_SEQS") != NULL;

	memset(m.outcomes, 0, sizeof(m.outcomes));
	if (chosen) {
		if (_i != 0)
			return;
		first = (int)env_u64("LT_MODEL_FIRST", 0);
		nseqs = (int)env_u64("LT_MODEL_SEQS", M_SEQS);
	} else {
		nseqs = M_SEQS / M_CHUNKS;
		first = _i * nseqs;
	}
	for (int seq = first; seq < first + nseqs; seq++)
		run_sequence(seed, seq);
	if (getenv("LT_MODEL_VERBOSE") != NULL) {
		printf("model sequences %d-%d:", first, first + nseqs - 1);
		for (int i = 0; i < O__COUNT; i++)
			printf(" %s=%ju", outcome_name[i],
			    (uintmax_t)m.outcomes[i]);
		printf("\n");
	}
	/* the run must have met every outcome, or it proves little */
	if (nseqs >= 100)
		for (int i = 0; i < O__COUNT; i++)
			ck_assert_msg(m.outcomes[i] > 0, "no %s outcome in "
			    "sequences %d-%d", outcome_name[i], first,
			    first + nseqs - 1);
}
END_TEST

static Suite *
locktable_model_suite(void)
{
	Suite	*s = suite_create("locktable");
	TCase	*tc = tcase_create("model");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, model_matches_reference, 0, M_CHUNKS);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr;
	int	 nfailed;

	sr = srunner_create(locktable_model_suite());
	srunner_run_all(sr, CK_NORMAL);
	nfailed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfailed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
