/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of the lock table against locktable.h and keylockd-protocol(7)
 * ("Semantics"): FIFO, shared mode, semaphores, multi-key grants, the error
 * order, deadlock detection, ttl, cleanup, counters and the read-only views.
 * Time is an explicit now_ms: no sleeps, no clock. locktable_check() runs
 * after every step, and tokens must rise across all grants. The tests live
 * in locktable_*.c by theme; this file holds the fixture and the helpers
 * they share (cl_ prefix, declared in check_locktable.h), the suite and
 * main. Every other LOCK and UNLOCK runs with the table's short paths
 * off (locktable_set_short_paths()), so that every test runs through
 * both.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_locktable.h"
#include "check_main.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"
#include "util.h"

#define MAXKEYS		16

struct keylist {
	char		 buf[256];
	const char	*p[MAXKEYS];
	size_t		 len[MAXKEYS];
	size_t		 n;
};

struct locktable	*cl_lt;
struct lt_owner		*cl_ow[NOWNERS];
int			 cl_udata[NOWNERS];
uint64_t		 cl_next_tok;
uint64_t		 cl_last_tok;
bool			 cl_tok_broken;
struct grant_rec	 cl_grants[MAXGRANTS];
size_t			 cl_ngrants;
bool			 cl_grants_overflow;

uint64_t		 cl_res_token;
struct lt_blocker	 cl_res_why;
char			 cl_res_key[KL_KEY_MAX + 1];
size_t			 cl_res_n;
size_t			 cl_res_bad;

const struct req	 cl_plain;
unsigned		 cl_short_calls;
int			 cl_short_paths;

/* The table's short paths for the next request: on for every other one,
 * unless a test chose (cl_short_paths). */
static void
cl_set_short_paths(void)
{
	bool	on = cl_short_calls++ % 2 == 0;

	if (cl_short_paths >= 0)
		on = cl_short_paths != 0;
	locktable_set_short_paths(cl_lt, on);
}

/* Tokens in ranges of 3, one after another: 1, 2, 3 | 4, 5, 6 | ... */
static uint64_t
hook_reserve_tokens(void *arg, uint64_t *end)
{
	uint64_t	first = cl_next_tok;

	(void)arg;
	*end = cl_next_tok = first + 3;
	return first;
}

static void
hook_granted(void *arg, struct lt_owner *o, uint64_t token,
    uint64_t waited_ms)
{
	(void)arg;
	if (token <= cl_last_tok)
		cl_tok_broken = true;
	cl_last_tok = token;
	if (cl_ngrants == MAXGRANTS) {
		cl_grants_overflow = true;
		return;
	}
	cl_grants[cl_ngrants].id = locktable_owner_id(o);
	cl_grants[cl_ngrants].token = token;
	cl_grants[cl_ngrants].waited_ms = waited_ms;
	cl_ngrants++;
}

static void
setup(void)
{
	static const struct lt_hooks hooks = {
		.granted = hook_granted,
		.next_token = NULL,
		.arg = NULL
	};

	cl_next_tok = 1;
	cl_last_tok = 0;
	cl_tok_broken = false;
	cl_ngrants = 0;
	cl_grants_overflow = false;
	cl_short_calls = 0;
	cl_short_paths = -1;
	cl_lt = locktable_new(&hooks, 42);
	ck_assert_ptr_nonnull(cl_lt);
	locktable_reserve_tokens(cl_lt, hook_reserve_tokens);
	for (int i = 1; i < NOWNERS; i++) {
		cl_ow[i] = locktable_owner_new(cl_lt, (uint64_t)i,
		    &cl_udata[i]);
		ck_assert_ptr_nonnull(cl_ow[i]);
	}
	CHECK_TABLE();
}

static void
teardown(void)
{
	const struct lt_counters *c;

	for (int i = 1; i < NOWNERS; i++) {
		locktable_owner_free(cl_lt, cl_ow[i], 1000000);
		cl_ow[i] = NULL;
		CHECK_TABLE();
	}
	c = locktable_counters(cl_lt);
	ck_assert_uint_eq(c->keys, 0);
	ck_assert_uint_eq(c->held, 0);
	ck_assert_uint_eq(c->waiting, 0);
	locktable_free(cl_lt);
	cl_lt = NULL;
}

static void
keylist_parse(struct keylist *kl, const char *s)
{
	size_t	i = 0;

	ck_assert_uint_lt(strlen(s), sizeof(kl->buf));
	memcpy(kl->buf, s, strlen(s) + 1);
	kl->n = 0;
	while (kl->buf[i] != '\0') {
		if (kl->buf[i] == ' ') {
			i++;
			continue;
		}
		ck_assert_uint_lt(kl->n, MAXKEYS);
		kl->p[kl->n] = &kl->buf[i];
		while (kl->buf[i] != '\0' && kl->buf[i] != ' ')
			i++;
		kl->len[kl->n] = (size_t)(&kl->buf[i] - kl->p[kl->n]);
		kl->n++;
	}
}

/* The table must copy the key bytes it keeps: spoil the caller's buffer. */
static void
keylist_spoil(struct keylist *kl)
{
	memset(kl->buf, '#', sizeof(kl->buf));
}

static void
save_why_key(void)
{
	size_t	n = cl_res_why.key == NULL ? 0 : cl_res_why.keylen;

	ck_assert_uint_le(n, KL_KEY_MAX);
	if (n > 0)
		memcpy(cl_res_key, cl_res_why.key, n);
	cl_res_key[n] = '\0';
}

/* LOCK/TRYLOCK by owner i: GRANTED, QUEUED or the error. */
int
cl_acq(int i, const char *keys, const struct req *r, uint64_t now)
{
	struct keylist		kl;
	struct lt_acquire	a;
	struct lt_counters	before = *locktable_counters(cl_lt);
	enum kl_err		err;
	bool			granted = false;
	size_t			ng = cl_ngrants;

	keylist_parse(&kl, keys);
	memset(&a, 0, sizeof(a));
	a.keys = kl.p;
	a.keylens = kl.len;
	a.nkeys = kl.n;
	a.mode = r->mode;
	a.limit = r->limit == 0 ? 1 : r->limit;
	a.try = r->try;
	a.max_waiters = r->has_mw ? r->mw : -1;
	a.ttl_ms = r->ttl_ms;
	a.max_holds = r->max_holds;
	memset(&cl_res_why, 0, sizeof(cl_res_why));
	cl_res_token = 0;
	cl_set_short_paths();
	err = locktable_acquire(cl_lt, cl_ow[i], &a, now, &granted,
	    &cl_res_token, &cl_res_why);
	save_why_key();
	keylist_spoil(&kl);
	ck_assert_msg(cl_ngrants == ng, "granted hook called from acquire");
	CHECK_TABLE();
	if (err != KL_OK) {
		/* a refused request leaves no trace (keylockd-protocol(7), Cleanup) */
		ck_assert_uint_eq(cl_ctr()->keys, before.keys);
		ck_assert_uint_eq(cl_ctr()->held, before.held);
		ck_assert_uint_eq(cl_ctr()->waiting, before.waiting);
		ck_assert_uint_eq(cl_ctr()->grants, before.grants);
		ck_assert(!locktable_owner_is_waiting(cl_ow[i]));
		return (int)err;
	}
	if (!granted) {
		ck_assert(locktable_owner_is_waiting(cl_ow[i]));
		return QUEUED;
	}
	ck_assert_msg(cl_res_token > cl_last_tok, "token %ju not above %ju",
	    (uintmax_t)cl_res_token, (uintmax_t)cl_last_tok);
	ck_assert_uint_lt(cl_res_token, (uint64_t)1 << 63);
	cl_last_tok = cl_res_token;
	ck_assert(!locktable_owner_is_waiting(cl_ow[i]));
	return GRANTED;
}

int
cl_lock(int i, const char *keys, uint64_t now)
{
	return cl_acq(i, keys, &cl_plain, now);
}

int
cl_lock_shared(int i, const char *keys, uint64_t now)
{
	return cl_acq(i, keys, REQ(.mode = LT_SHARED), now);
}

int
cl_lock_limit(int i, const char *keys, uint32_t limit, uint64_t now)
{
	return cl_acq(i, keys, REQ(.limit = limit), now);
}

int
cl_trylock(int i, const char *keys, uint64_t now)
{
	return cl_acq(i, keys, REQ(.try = true), now);
}

/* UNLOCK by owner i: the error; res_n, res_bad filled. */
int
cl_unlock(int i, const char *keys, uint64_t now)
{
	struct keylist		kl;
	enum kl_err		err;

	keylist_parse(&kl, keys);
	cl_res_n = 12345;
	cl_res_bad = 12345;
	cl_set_short_paths();
	err = locktable_release(cl_lt, cl_ow[i], kl.p, kl.len, kl.n, now,
	    &cl_res_n, &cl_res_bad);
	keylist_spoil(&kl);
	CHECK_TABLE();
	return (int)err;
}

int
cl_refresh(int i, const char *keys, uint64_t ttl, uint64_t now)
{
	struct keylist	kl;
	enum kl_err	err;
	size_t		ng = cl_ngrants;

	keylist_parse(&kl, keys);
	cl_res_n = 12345;
	cl_res_bad = 12345;
	err = locktable_refresh(cl_lt, cl_ow[i], kl.p, kl.len, kl.n, ttl, now,
	    &cl_res_n, &cl_res_bad);
	keylist_spoil(&kl);
	ck_assert_msg(cl_ngrants == ng, "refresh granted something");
	CHECK_TABLE();
	return (int)err;
}

size_t
cl_release_owner(int i, enum lt_why why, uint64_t now)
{
	size_t	n;

	n = locktable_release_owner(cl_lt, cl_ow[i], now, why);
	CHECK_TABLE();
	ck_assert(!locktable_owner_is_waiting(cl_ow[i]));
	ck_assert_uint_eq(locktable_owner_nholds(cl_ow[i]), 0);
	return n;
}

bool
cl_withdraw(int i, enum lt_why why, uint64_t now)
{
	bool	b;

	b = locktable_withdraw(cl_lt, cl_ow[i], now, why);
	CHECK_TABLE();
	ck_assert(!locktable_owner_is_waiting(cl_ow[i]));
	return b;
}

size_t
cl_expire(uint64_t now)
{
	size_t	n;

	n = locktable_expire(cl_lt, now);
	CHECK_TABLE();
	return n;
}

const struct lt_key *
cl_find(const char *key)
{
	return locktable_find(cl_lt, key, strlen(key));
}

static void
walk_append(char *s, size_t size, uint64_t id, bool shared)
{
	size_t	len = strlen(s);

	snprintf(s + len, size - len, "%ju%s ", (uintmax_t)id,
	    shared ? "s" : "");
}

bool
cl_walk_holder(void *arg, const struct lt_holder_view *v)
{
	struct walk_buf	*wb = arg;

	ck_assert_msg(wb->nw == 0, "holder walked after a waiter");
	if (wb->nh < NOWNERS)
		wb->h[wb->nh] = *v;
	wb->nh++;
	walk_append(wb->hs, sizeof(wb->hs), locktable_owner_id(v->owner),
	    v->mode == LT_SHARED);
	wb->calls++;
	return wb->stop_after == 0 || wb->calls < wb->stop_after;
}

bool
cl_walk_waiter(void *arg, const struct lt_waiter_view *v)
{
	struct walk_buf	*wb = arg;

	if (wb->nw < NOWNERS)
		wb->w[wb->nw] = *v;
	wb->nw++;
	walk_append(wb->ws, sizeof(wb->ws), locktable_owner_id(v->owner),
	    v->mode == LT_SHARED);
	wb->calls++;
	return wb->stop_after == 0 || wb->calls < wb->stop_after;
}

/*
 * The state of key as "holders | waiters" by owner id in walk order, an "s"
 * after shared ones: "1s 2s | 3 4s". "-" when the key has no entry.
 */
const char *
cl_key_state(const char *key, uint64_t now, struct walk_buf *wb)
{
	static char		 out[600];
	const struct lt_key	*k;
	struct lt_key_view	 v;
	size_t			 len;

	memset(wb, 0, sizeof(*wb));
	if ((k = cl_find(key)) == NULL)
		return "-";
	locktable_key_view(k, &v);
	locktable_key_walk(cl_lt, k, now, cl_walk_holder, cl_walk_waiter, wb);
	snprintf(out, sizeof(out), "%s| %s", wb->hs, wb->ws);
	len = strlen(out);
	while (len > 0 && out[len - 1] == ' ')
		out[--len] = '\0';
	ck_assert_uint_eq(v.nholders, wb->nh);
	ck_assert_uint_eq(v.nwaiters, wb->nw);
	ck_assert_uint_eq(v.keylen, strlen(key));
	ck_assert(memcmp(v.key, key, v.keylen) == 0);
	ck_assert_uint_gt(wb->nh + wb->nw, 0);
	return out;
}

/* The deferred grants since the last call, as sorted owner ids. */
const char *
cl_took_grants(void)
{
	static char	out[256];
	uint64_t	ids[MAXGRANTS];
	size_t		n = cl_ngrants, len = 0;

	for (size_t i = 0; i < n; i++)
		ids[i] = cl_grants[i].id;
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
			uint64_t t = ids[j];
			ids[j] = ids[j - 1];
			ids[j - 1] = t;
		}
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%ju",
		    i > 0 ? " " : "", (uintmax_t)ids[i]);
	cl_ngrants = 0;
	return out;
}

/* Waited ms of the recorded deferred grant to owner id (not consumed). */
uint64_t
cl_grant_waited(uint64_t id)
{
	for (size_t i = 0; i < cl_ngrants; i++)
		if (cl_grants[i].id == id)
			return cl_grants[i].waited_ms;
	ck_abort_msg("no grant recorded for owner %ju", (uintmax_t)id);
	return 0;
}

const struct lt_counters *
cl_ctr(void)
{
	return locktable_counters(cl_lt);
}

void
cl_expect_gauges(uint64_t keys, uint64_t held, uint64_t waiting)
{
	ck_assert_uint_eq(cl_ctr()->keys, keys);
	ck_assert_uint_eq(cl_ctr()->held, held);
	ck_assert_uint_eq(cl_ctr()->waiting, waiting);
}

TCase *
cl_tcase(Suite *s, const char *name)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	/* a pure table, but thousands of checked steps on a loaded machine */
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *
locktable_suite(void)
{
	Suite	*s = suite_create("locktable");

	cl_add_queue(s);
	cl_add_errors(s);
	cl_add_lifetime(s);
	cl_add_views(s);
	cl_add_hash(s);
	cl_add_short(s);
	return s;
}

const struct check_program check_program = {
	.name = "check_locktable",
	.suites = { locktable_suite, NULL }
};
