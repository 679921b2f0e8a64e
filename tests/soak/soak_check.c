/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The soak's checker. Records from the workers become intervals, one per
 * key of a grant: [reply received, release sent), which lies inside the
 * daemon's own [grant, release]; a ttl hold ends by request sent + ttl at
 * the latest, a killed worker's holds when it was killed. If two such
 * intervals overlap where the key excludes, the daemon granted wrongly.
 * Checked: one exclusive holder per key, shared and exclusive never
 * together, semaphore counts within limit, and fencing tokens: a request
 * sent after a grant arrived gets a greater token (per key and over all
 * keys), and of two disjoint holds with an exclusive one the later has the
 * greater token. Checkpoints run during the soak over what is at least
 * LAG_NS old, then forget what is over into per-key floors, so memory
 * stays bounded however long the soak runs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "kltest.h"
#include "soak.h"

void
soak_error(struct soak *s, const char *fmt, ...)
{
	va_list	ap;

	if (s->nerrors < MAX_ERRORS) {
		va_start(ap, fmt);
		vsnprintf(s->errors[s->nerrors], sizeof(s->errors[0]), fmt, ap);
		va_end(ap);
	}
	s->nerrors++;
}

static uint64_t
grant_id(uint32_t inc, uint32_t client, uint32_t gid)
{
	return ((uint64_t)inc << 42) ^ ((uint64_t)client << 21) ^ gid;
}

static void
hmap_put(struct soak *s, uint64_t k, uint32_t v)
{
	if (s->hn * 2 >= s->hcap) {
		size_t	  ncap = s->hcap ? s->hcap * 2 : 1 << 16;
		uint64_t *nk = calloc(ncap, sizeof(*nk));
		uint32_t *nv = calloc(ncap, sizeof(*nv));

		ck_assert(nk != NULL && nv != NULL);
		for (size_t i = 0; i < s->hcap; i++) {
			size_t j;

			if (s->hkeys[i] == 0)
				continue;
			for (j = mix64(s->hkeys[i]) & (ncap - 1); nk[j] != 0;
			    j = (j + 1) & (ncap - 1))
				;
			nk[j] = s->hkeys[i];
			nv[j] = s->hvals[i];
		}
		free(s->hkeys);
		free(s->hvals);
		s->hkeys = nk;
		s->hvals = nv;
		s->hcap = ncap;
	}
	k |= 1ULL << 63;	/* never 0 */
	for (size_t j = mix64(k) & (s->hcap - 1);; j = (j + 1) & (s->hcap - 1))
		if (s->hkeys[j] == 0 || s->hkeys[j] == k) {
			s->hn += s->hkeys[j] == 0;
			s->hkeys[j] = k;
			s->hvals[j] = v;
			return;
		}
}

static bool
hmap_get(const struct soak *s, uint64_t k, uint32_t *v)
{
	k |= 1ULL << 63;
	if (s->hcap == 0)
		return false;
	for (size_t j = mix64(k) & (s->hcap - 1); s->hkeys[j] != 0;
	    j = (j + 1) & (s->hcap - 1))
		if (s->hkeys[j] == k) {
			*v = s->hvals[j];
			return true;
		}
	return false;
}

static bool
same_grant(const struct ival *x, const struct ival *y)
{
	return x->inc == y->inc && x->client == y->client && x->gid == y->gid;
}

static void
soak_record(struct soak *s, const struct rec *r)
{
	uint32_t first;

	if (r->inc >= s->nincs) {
		soak_error(s, "a record from unknown worker %u", r->inc);
		return;
	}
	switch (r->type) {
	case REC_GRANT:
		if (r->nkeys == 0 || r->nkeys > MAXK) {
			soak_error(s, "a grant of %u keys", r->nkeys);
			return;
		}
		if (s->niv + MAXK > s->ivcap) {
			size_t	 ncap = s->ivcap ? s->ivcap * 2 : 1 << 16;
			struct ival *n = realloc(s->iv, ncap * sizeof(*n));

			ck_assert_ptr_nonnull(n);
			s->iv = n;
			s->ivcap = ncap;
		}
		hmap_put(s, grant_id(r->inc, r->client, r->gid),
		    (uint32_t)s->niv);
		for (int k = 0; k < r->nkeys; k++) {
			struct ival *v = &s->iv[s->niv++];

			v->s = r->s_ns;
			v->a = r->a_ns;
			v->e = UINT64_MAX;
			v->token = r->token;
			v->inc = r->inc;
			v->client = r->client;
			v->gid = r->gid;
			v->key = r->keys[k] < NKEYS ? r->keys[k] : 0;
			v->shared = r->shared;
			v->ttl_ms = r->ttl_ms;
			if (r->keys[k] >= NKEYS)
				soak_error(s, "a grant of key number %u",
				    r->keys[k]);
		}
		s->v.nivals += r->nkeys;
		break;
	case REC_END:
		if (!hmap_get(s, grant_id(r->inc, r->client, r->gid),
		    &first)) {
			soak_error(s, "worker %u client %u: end of grant %u "
			    "that was never reported", r->inc, r->client,
			    r->gid);
			return;
		}
		for (size_t i = first; i < s->niv &&
		    same_grant(&s->iv[i], &s->iv[first]); i++)
			if ((r->keys[0] == KEY_ALL || r->keys[0] ==
			    s->iv[i].key) && r->a_ns < s->iv[i].e)
				s->iv[i].e = r->a_ns;
		break;
	case REC_COUNT:
		memcpy(s->incs[r->inc].cnt, r->cnt, sizeof(r->cnt));
		break;
	case REC_ERROR:
		soak_error(s, "%s", r->msg);
		break;
	default:
		soak_error(s, "a record of type %u", r->type);
		break;
	}
}

bool
soak_drain(struct soak *s, int fd)
{
	static char	 buf[sizeof(struct rec) * 256];
	static size_t	 have;
	ssize_t		 n;
	size_t		 off;

	for (;;) {
		n = read(fd, buf + have, sizeof(buf) - have);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return true;
		if (n <= 0)
			return false;
		have += (size_t)n;
		for (off = 0; have - off >= sizeof(struct rec);
		    off += sizeof(struct rec)) {
			struct rec r;

			memcpy(&r, buf + off, sizeof(r));
			soak_record(s, &r);
		}
		memmove(buf, buf + off, have - off);
		have -= off;
	}
}

/*
 * The end of a hold the client may have relied on: its release, its kill,
 * or (final) the soak's end; request + ttl at the latest. UINT64_MAX while
 * it lasts.
 */
static uint64_t
ival_end(const struct soak *s, const struct ival *v, bool final)
{
	uint64_t e = v->e;

	if (e == UINT64_MAX && s->incs[v->inc].killed)
		e = s->incs[v->inc].killed;
	else if (e == UINT64_MAX && final)
		e = s->term_ns;
	if (v->ttl_ms > 0 && v->s + (uint64_t)v->ttl_ms * 1000000ULL -
	    TTL_SLOP_NS < e)
		e = v->s + (uint64_t)v->ttl_ms * 1000000ULL - TTL_SLOP_NS;
	return e;
}

static bool
ival_is_known(const struct soak *s, const struct ival *v)
{
	return v->e != UINT64_MAX || s->incs[v->inc].killed != 0;
}

struct ev {
	uint64_t	 t;
	uint32_t	 iv;
	int8_t		 d;	/* +1 start, -1 end */
};

static int
ev_cmp(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->d - y->d;	/* ends first */
}

static int
u32_by_s(const void *a, const void *b, void *arg)
{
	const struct ival *iv = arg;
	uint64_t x = iv[*(const uint32_t *)a].s, y = iv[*(const uint32_t *)b].s;

	return x < y ? -1 : x > y;
}

static int
u32_by_a(const void *a, const void *b, void *arg)
{
	const struct ival *iv = arg;
	uint64_t x = iv[*(const uint32_t *)a].a, y = iv[*(const uint32_t *)b].a;

	return x < y ? -1 : x > y;
}

static const char *
ival_str(const struct soak *s, const struct ival *v, char *buf, size_t len)
{
	uint64_t e = ival_end(s, v, false);

	snprintf(buf, len, "{worker %u client %u token %" PRIu64 " %s%s "
	    "sent %.3f got %.3f end %.3f s}", v->inc, v->client, v->token,
	    v->shared ? "shared" : v->key >= NPLAIN ? "sem" : "exclusive",
	    v->ttl_ms ? " ttl" : "", (double)v->s / 1e9, (double)v->a / 1e9,
	    e == UINT64_MAX ? -1.0 : (double)e / 1e9);
	return buf;
}

/*
 * A request sent after a grant arrived gets a greater token: for each B,
 * token_B > token_A for every A with a_A < s_B, the dropped ones (fl)
 * included. Sorts by_s and by_a; returns violations.
 */
static size_t
check_token_order(struct soak *s, uint32_t *by_s, uint32_t *by_a, size_t n,
    const struct floor *fl, const char *scope)
{
	size_t		 j = 0, bad = 0;
	uint64_t	 max = 0;
	char		 b1[200];

	qsort_r(by_s, n, sizeof(*by_s), u32_by_s, s->iv);
	qsort_r(by_a, n, sizeof(*by_a), u32_by_a, s->iv);
	for (size_t i = 0; i < n; i++) {
		const struct ival *b = &s->iv[by_s[i]];
		uint64_t	   m;

		for (; j < n && s->iv[by_a[j]].a < b->s; j++)
			if (s->iv[by_a[j]].token > max)
				max = s->iv[by_a[j]].token;
		m = fl->any && b->s > fl->a_max && fl->tok_max > max ?
		    fl->tok_max : max;
		if (m != 0 && b->token <= m && bad++ == 0)
			soak_error(s, "%s: token %" PRIu64 " for a request "
			    "sent after token %" PRIu64 " was received: %s",
			    scope, b->token, m, ival_str(s, b, b1,
			    sizeof(b1)));
	}
	return bad;
}

/*
 * The checks of one key over its holds idx[0..n): no overlap where the
 * key excludes, tokens in order. Holds that began at or after cut are left
 * for a later checkpoint: the end of a hold before them may be on its way.
 */
static void
check_key(struct soak *s, unsigned key, uint32_t *idx, size_t n, bool final,
    uint64_t cut)
{
	struct floor	*fl = &s->floors[key];
	struct verdict	*v = &s->v;
	struct ev	*ev = calloc(2 * n + 1, sizeof(*ev));
	uint32_t	*by_a = malloc((n + 1) * sizeof(*by_a));
	uint32_t	 active[256];
	size_t		 nev = 0, nact = 0;
	unsigned	 ex = 0, sh = 0, limit = sem_limit(key);
	uint64_t	 max_all = 0, max_ex = 0;
	char		 b1[200], b2[200], kname[16];
	bool		 reported = false, treported = false;

	ck_assert(ev != NULL && by_a != NULL);
	key_name(kname, sizeof(kname), key);
	for (size_t i = 0; i < n; i++) {
		const struct ival *iv = &s->iv[idx[i]];
		uint64_t e = ival_end(s, iv, final);

		if (iv->a >= e || (!final && iv->a >= cut))
			continue;	/* empty, or for later */
		ev[nev++] = (struct ev){ iv->a, idx[i], 1 };
		ev[nev++] = (struct ev){ e, idx[i], -1 };
	}
	qsort(ev, nev, sizeof(*ev), ev_cmp);
	for (size_t i = 0; i < nev; i++) {
		const struct ival *iv = &s->iv[ev[i].iv];
		bool	 excl = key < NPLAIN && !iv->shared;
		uint64_t before = excl ? max_all : max_ex;

		if (ev[i].d < 0) {
			ex -= excl;
			sh -= !excl;
			for (size_t j = 0; j < nact; j++)
				if (active[j] == ev[i].iv) {
					active[j] = active[--nact];
					break;
				}
			continue;
		}
		/* tokens against disjoint earlier holds, dropped ones too */
		if (fl->nonempty && iv->a > fl->e_max && (excl ?
		    fl->max_all : fl->max_ex) > before)
			before = excl ? fl->max_all : fl->max_ex;
		if (key < NPLAIN && before >= iv->token) {
			v->token_bad++;
			if (!treported)
				soak_error(s, "%s: hold with token %" PRIu64
				    " begins after a disjoint %s hold with "
				    "token %" PRIu64 ": %s", kname, iv->token,
				    excl ? "earlier" : "exclusive", before,
				    ival_str(s, iv, b1, sizeof(b1)));
			treported = true;
		}
		ex += excl;
		sh += !excl;
		if (nact < sizeof(active) / sizeof(active[0]))
			active[nact++] = ev[i].iv;
		if (ex + sh > v->max_holders[key])
			v->max_holders[key] = ex + sh;
		if ((key < NPLAIN && ex > 0 && ex + sh > 1) ||
		    (key >= NPLAIN && sh > limit)) {
			const struct ival *other = &s->iv[active[0] ==
			    ev[i].iv && nact > 1 ? active[1] : active[0]];

			v->overlaps++;
			if (!reported)
				soak_error(s, "%s: %u exclusive and %u other "
				    "holders at once (limit %u): %s while %s",
				    kname, ex, sh, limit, ival_str(s, iv, b1,
				    sizeof(b1)), ival_str(s, other, b2,
				    sizeof(b2)));
			reported = true;
		}
		if (iv->token > max_all)
			max_all = iv->token;
		if (excl && iv->token > max_ex)
			max_ex = iv->token;
	}
	memcpy(by_a, idx, n * sizeof(*by_a));
	v->token_bad += check_token_order(s, idx, by_a, n, fl, kname);
	free(ev);
	free(by_a);
}

/* Drops the holds that ended before cut into the floors. */
static void
soak_prune(struct soak *s, uint64_t cut)
{
	size_t	keep = 0;

	for (size_t i = 0; i < s->niv; i++) {
		const struct ival *v = &s->iv[i];
		struct floor	  *fl = &s->floors[v->key];
		uint64_t	   e = ival_end(s, v, false);

		if (!ival_is_known(s, v) || e >= cut) {
			s->iv[keep++] = *v;
			continue;
		}
		if (v->a < e) {
			s->v.nonempty++;
			fl->nonempty = true;
			if (v->token > fl->max_all)
				fl->max_all = v->token;
			if (v->key < NPLAIN && !v->shared &&
			    v->token > fl->max_ex)
				fl->max_ex = v->token;
			if (e > fl->e_max)
				fl->e_max = e;
		}
		fl->any = s->gfloor.any = true;
		if (v->token > fl->tok_max)
			fl->tok_max = v->token;
		if (v->a > fl->a_max)
			fl->a_max = v->a;
		if (v->token > s->gfloor.tok_max)
			s->gfloor.tok_max = v->token;
		if (v->a > s->gfloor.a_max)
			s->gfloor.a_max = v->a;
	}
	s->niv = keep;
	memset(s->hkeys, 0, s->hcap * sizeof(*s->hkeys));
	s->hn = 0;
	for (size_t i = 0; i < s->niv; i++)
		if (i == 0 || !same_grant(&s->iv[i - 1], &s->iv[i]))
			hmap_put(s, grant_id(s->iv[i].inc, s->iv[i].client,
			    s->iv[i].gid), (uint32_t)i);
}

void
soak_check(struct soak *s, bool final, uint64_t cut)
{
	uint32_t	*idx[NKEYS], *all_s, *all_a;
	size_t		 cnt[NKEYS] = { 0 }, fill[NKEYS] = { 0 }, ngr = 0;

	if (s->niv > s->v.most_kept)
		s->v.most_kept = s->niv;
	for (size_t i = 0; i < s->niv; i++)
		cnt[s->iv[i].key]++;
	for (unsigned k = 0; k < NKEYS; k++) {
		idx[k] = malloc((cnt[k] + 1) * sizeof(*idx[k]));
		ck_assert_ptr_nonnull(idx[k]);
	}
	all_s = malloc((s->niv + 1) * sizeof(*all_s));
	all_a = malloc((s->niv + 1) * sizeof(*all_a));
	ck_assert(all_s != NULL && all_a != NULL);
	for (size_t i = 0; i < s->niv; i++) {
		idx[s->iv[i].key][fill[s->iv[i].key]++] = (uint32_t)i;
		/* one entry per grant for the order over all keys */
		if (i == 0 || !same_grant(&s->iv[i - 1], &s->iv[i]))
			all_s[ngr++] = (uint32_t)i;
	}
	for (unsigned k = 0; k < NKEYS; k++) {
		check_key(s, k, idx[k], fill[k], final, cut);
		free(idx[k]);
	}
	memcpy(all_a, all_s, ngr * sizeof(*all_a));
	s->v.token_bad += check_token_order(s, all_s, all_a, ngr, &s->gfloor,
	    "all keys");
	free(all_s);
	free(all_a);
	s->v.checks++;
	if (final) {
		for (size_t i = 0; i < s->niv; i++)
			s->v.nonempty += s->iv[i].a < ival_end(s, &s->iv[i],
			    true);
	} else
		soak_prune(s, cut);
}

uint32_t
soak_new_inc(struct soak *s)
{
	if (s->nincs == s->inccap) {
		size_t	     ncap = s->inccap ? s->inccap * 2 : 64;
		struct inc  *n = realloc(s->incs, ncap * sizeof(*n));

		ck_assert_ptr_nonnull(n);
		s->incs = n;
		s->inccap = ncap;
	}
	memset(&s->incs[s->nincs], 0, sizeof(s->incs[0]));
	return (uint32_t)s->nincs++;
}

void
soak_free(struct soak *s)
{
	if (s == NULL)
		return;
	free(s->iv);
	free(s->hkeys);
	free(s->hvals);
	free(s->incs);
	free(s);
}
