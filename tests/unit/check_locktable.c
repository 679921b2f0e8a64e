/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of the lock table against locktable.h and PROTOCOL.md
 * ("Semantics"): FIFO, shared mode, semaphores, multi-key grants, the error
 * order, deadlock detection, ttl, cleanup, counters and the read-only views.
 * Time is an explicit now_ms: no sleeps, no clock. locktable_check() runs
 * after every step, and tokens must rise across all grants.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "kl.h"
#include "locktable.h"
#include "util.h"

#define nitems(a)	(sizeof(a) / sizeof((a)[0]))

#define NOWNERS		9	/* owners 1..8; ow[i] has id i */
#define MAXKEYS		16
#define MAXGRANTS	64
#define GRANTED		(-1)	/* acq(): granted at once */
#define QUEUED		(-2)	/* acq(): queued */

struct req {
	enum lt_mode	mode;
	uint32_t	limit;		/* 0 here means 1 */
	bool		try;
	bool		has_mw;		/* max_waiters: mw, or none */
	int64_t		mw;
	uint64_t	ttl_ms;
	size_t		max_holds;
};

#define REQ(...)	(&(const struct req){ __VA_ARGS__ })

struct keylist {
	char		 buf[256];
	const char	*p[MAXKEYS];
	size_t		 len[MAXKEYS];
	size_t		 n;
};

struct grant_rec {
	uint64_t	id;
	uint64_t	token;
	uint64_t	waited_ms;
};

static struct locktable	*lt;
static struct lt_owner	*ow[NOWNERS];
static int		 udata[NOWNERS];
static uint64_t		 next_tok;
static uint64_t		 last_tok;
static bool		 tok_broken;
static struct grant_rec	 grants[MAXGRANTS];
static size_t		 ngrants;
static bool		 grants_overflow;

/* What the last acq() left behind. */
static uint64_t		 res_token;
static struct lt_blocker res_why;
static char		 res_key[KL_KEY_MAX + 1];
static size_t		 res_n;
static size_t		 res_bad;

static const struct req	 plain;

static const struct lt_counters *ctr(void);

static uint64_t
hook_next_token(void *arg)
{
	(void)arg;
	return next_tok++;
}

static void
hook_granted(void *arg, struct lt_owner *o, uint64_t token,
    uint64_t waited_ms)
{
	(void)arg;
	if (token <= last_tok)
		tok_broken = true;
	last_tok = token;
	if (ngrants == MAXGRANTS) {
		grants_overflow = true;
		return;
	}
	grants[ngrants].id = locktable_owner_id(o);
	grants[ngrants].token = token;
	grants[ngrants].waited_ms = waited_ms;
	ngrants++;
}

#define CHECK_TABLE() do {						\
	const char *e_ = locktable_check(lt);				\
	ck_assert_msg(e_ == NULL, "locktable_check: %s", e_);		\
	ck_assert_msg(!tok_broken, "tokens not strictly increasing");	\
	ck_assert_msg(!grants_overflow, "too many grants recorded");	\
} while (0)

static void
setup(void)
{
	static const struct lt_hooks hooks = {
		.granted = hook_granted,
		.next_token = hook_next_token,
		.arg = NULL
	};

	next_tok = 1;
	last_tok = 0;
	tok_broken = false;
	ngrants = 0;
	grants_overflow = false;
	lt = locktable_new(&hooks, 42);
	ck_assert_ptr_nonnull(lt);
	for (int i = 1; i < NOWNERS; i++) {
		ow[i] = locktable_owner_new(lt, (uint64_t)i, &udata[i]);
		ck_assert_ptr_nonnull(ow[i]);
	}
	CHECK_TABLE();
}

static void
teardown(void)
{
	const struct lt_counters *c;

	for (int i = 1; i < NOWNERS; i++) {
		locktable_owner_free(lt, ow[i], 1000000);
		ow[i] = NULL;
		CHECK_TABLE();
	}
	c = locktable_counters(lt);
	ck_assert_uint_eq(c->keys, 0);
	ck_assert_uint_eq(c->held, 0);
	ck_assert_uint_eq(c->waiting, 0);
	locktable_free(lt);
	lt = NULL;
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
	size_t	n = res_why.key == NULL ? 0 : res_why.keylen;

	ck_assert_uint_le(n, KL_KEY_MAX);
	if (n > 0)
		memcpy(res_key, res_why.key, n);
	res_key[n] = '\0';
}

/* LOCK/TRYLOCK by owner i: GRANTED, QUEUED or the error. */
static int
acq(int i, const char *keys, const struct req *r, uint64_t now)
{
	struct keylist		kl;
	struct lt_acquire	a;
	struct lt_counters	before = *locktable_counters(lt);
	enum kl_err		err;
	bool			granted = false;
	size_t			ng = ngrants;

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
	memset(&res_why, 0, sizeof(res_why));
	res_token = 0;
	err = locktable_acquire(lt, ow[i], &a, now, &granted, &res_token,
	    &res_why);
	save_why_key();
	keylist_spoil(&kl);
	ck_assert_msg(ngrants == ng, "granted hook called from acquire");
	CHECK_TABLE();
	if (err != KL_OK) {
		/* a refused request leaves no trace (PROTOCOL.md, Cleanup) */
		ck_assert_uint_eq(ctr()->keys, before.keys);
		ck_assert_uint_eq(ctr()->held, before.held);
		ck_assert_uint_eq(ctr()->waiting, before.waiting);
		ck_assert_uint_eq(ctr()->grants, before.grants);
		ck_assert(!locktable_owner_is_waiting(ow[i]));
		return (int)err;
	}
	if (!granted) {
		ck_assert(locktable_owner_is_waiting(ow[i]));
		return QUEUED;
	}
	ck_assert_msg(res_token > last_tok, "token %ju not above %ju",
	    (uintmax_t)res_token, (uintmax_t)last_tok);
	ck_assert_uint_lt(res_token, (uint64_t)1 << 63);
	last_tok = res_token;
	ck_assert(!locktable_owner_is_waiting(ow[i]));
	return GRANTED;
}

static int
lock(int i, const char *keys, uint64_t now)
{
	return acq(i, keys, &plain, now);
}

static int
lock_shared(int i, const char *keys, uint64_t now)
{
	return acq(i, keys, REQ(.mode = LT_SHARED), now);
}

static int
lock_limit(int i, const char *keys, uint32_t limit, uint64_t now)
{
	return acq(i, keys, REQ(.limit = limit), now);
}

static int
trylock(int i, const char *keys, uint64_t now)
{
	return acq(i, keys, REQ(.try = true), now);
}

/* UNLOCK by owner i: the error; res_n, res_bad filled. */
static int
unlock(int i, const char *keys, uint64_t now)
{
	struct keylist	kl;
	enum kl_err	err;

	keylist_parse(&kl, keys);
	res_n = 12345;
	res_bad = 12345;
	err = locktable_release(lt, ow[i], kl.p, kl.len, kl.n, now, &res_n,
	    &res_bad);
	keylist_spoil(&kl);
	CHECK_TABLE();
	return (int)err;
}

static int
refresh(int i, const char *keys, uint64_t ttl, uint64_t now)
{
	struct keylist	kl;
	enum kl_err	err;
	size_t		ng = ngrants;

	keylist_parse(&kl, keys);
	res_n = 12345;
	res_bad = 12345;
	err = locktable_refresh(lt, ow[i], kl.p, kl.len, kl.n, ttl, now,
	    &res_n, &res_bad);
	keylist_spoil(&kl);
	ck_assert_msg(ngrants == ng, "refresh granted something");
	CHECK_TABLE();
	return (int)err;
}

static size_t
release_owner(int i, enum lt_why why, uint64_t now)
{
	size_t	n;

	n = locktable_release_owner(lt, ow[i], now, why);
	CHECK_TABLE();
	ck_assert(!locktable_owner_is_waiting(ow[i]));
	ck_assert_uint_eq(locktable_owner_nholds(ow[i]), 0);
	return n;
}

static bool
withdraw(int i, enum lt_why why, uint64_t now)
{
	bool	b;

	b = locktable_withdraw(lt, ow[i], now, why);
	CHECK_TABLE();
	ck_assert(!locktable_owner_is_waiting(ow[i]));
	return b;
}

static size_t
expire(uint64_t now)
{
	size_t	n;

	n = locktable_expire(lt, now);
	CHECK_TABLE();
	return n;
}

static const struct lt_key *
find(const char *key)
{
	return locktable_find(lt, key, strlen(key));
}

struct walk_buf {
	char	hs[256];	/* holders walked, "1s 2 " */
	char	ws[256];	/* waiters walked */
	size_t	nh;
	size_t	nw;
	struct lt_holder_view h[NOWNERS];
	struct lt_waiter_view w[NOWNERS];
	int	stop_after;	/* > 0: return false after so many */
	int	calls;
};

static void
walk_append(char *s, size_t size, uint64_t id, bool shared)
{
	size_t	len = strlen(s);

	snprintf(s + len, size - len, "%ju%s ", (uintmax_t)id,
	    shared ? "s" : "");
}

static bool
walk_holder(void *arg, const struct lt_holder_view *v)
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

static bool
walk_waiter(void *arg, const struct lt_waiter_view *v)
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
static const char *
key_state(const char *key, uint64_t now, struct walk_buf *wb)
{
	static char		 out[600];
	const struct lt_key	*k;
	struct lt_key_view	 v;
	size_t			 len;

	memset(wb, 0, sizeof(*wb));
	if ((k = find(key)) == NULL)
		return "-";
	locktable_key_view(k, &v);
	locktable_key_walk(lt, k, now, walk_holder, walk_waiter, wb);
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

#define EXPECT_KEY(key, want) do {					\
	struct walk_buf wb_;						\
	ck_assert_str_eq(key_state((key), 0, &wb_), (want));		\
} while (0)

/* The deferred grants since the last call, as sorted owner ids. */
static const char *
took_grants(void)
{
	static char	out[256];
	uint64_t	ids[MAXGRANTS];
	size_t		n = ngrants, len = 0;

	for (size_t i = 0; i < n; i++)
		ids[i] = grants[i].id;
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
	ngrants = 0;
	return out;
}

#define EXPECT_GRANTS(want) ck_assert_str_eq(took_grants(), (want))

/* Waited ms of the recorded deferred grant to owner id (not consumed). */
static uint64_t
grant_waited(uint64_t id)
{
	for (size_t i = 0; i < ngrants; i++)
		if (grants[i].id == id)
			return grants[i].waited_ms;
	ck_abort_msg("no grant recorded for owner %ju", (uintmax_t)id);
	return 0;
}

static const struct lt_counters *
ctr(void)
{
	return locktable_counters(lt);
}

static void
expect_gauges(uint64_t keys, uint64_t held, uint64_t waiting)
{
	ck_assert_uint_eq(ctr()->keys, keys);
	ck_assert_uint_eq(ctr()->held, held);
	ck_assert_uint_eq(ctr()->waiting, waiting);
}

/* fifo */

START_TEST(fifo_grants_in_arrival_order)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 1), QUEUED);
	ck_assert_int_eq(lock(3, "a", 2), QUEUED);
	ck_assert_int_eq(lock(4, "a", 3), QUEUED);
	EXPECT_KEY("a", "1 | 2 3 4");
	expect_gauges(1, 1, 3);

	ck_assert_int_eq(unlock(1, "a", 10), KL_OK);
	ck_assert_uint_eq(res_n, 1);
	ck_assert_uint_eq(grant_waited(2), 9);
	EXPECT_GRANTS("2");
	EXPECT_KEY("a", "2 | 3 4");
	ck_assert_int_eq(unlock(2, "a", 20), KL_OK);
	ck_assert_uint_eq(grant_waited(3), 18);
	EXPECT_GRANTS("3");
	ck_assert_int_eq(unlock(3, "a", 30), KL_OK);
	ck_assert_uint_eq(grant_waited(4), 27);
	EXPECT_GRANTS("4");
	EXPECT_KEY("a", "4 |");
	ck_assert_int_eq(unlock(4, "a", 40), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "-");
	expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(trylock_on_key_with_waiter_but_no_holder_is_locked)
{
	ck_assert_int_eq(lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b", 0), QUEUED);
	EXPECT_KEY("a", "| 2");

	ck_assert_int_eq(trylock(3, "a", 5), KL_ERR_LOCKED);
	ck_assert_str_eq(res_key, "a");
	ck_assert_ptr_null(res_why.holder);
	ck_assert_uint_eq(res_why.nholders, 0);
	ck_assert_uint_eq(res_why.nwaiters, 1);
	ck_assert(!locktable_owner_is_waiting(ow[3]));
	EXPECT_KEY("a", "| 2");
}
END_TEST

START_TEST(fifo_free_key_with_waiter_is_not_free)
{
	ck_assert_int_eq(lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b", 1), QUEUED);
	ck_assert_int_eq(lock(3, "a", 2), QUEUED);
	EXPECT_KEY("a", "| 2 3");
	ck_assert_int_eq(unlock(1, "b", 10), KL_OK);
	EXPECT_GRANTS("2");
	EXPECT_KEY("a", "2 | 3");
	EXPECT_KEY("b", "2 |");
	ck_assert_int_eq(unlock(2, "a b", 20), KL_OK);
	ck_assert_uint_eq(res_n, 2);
	EXPECT_GRANTS("3");
	EXPECT_KEY("b", "-");
}
END_TEST

START_TEST(fifo_different_keys_never_wait_for_each_other)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "b", 0), GRANTED);
	ck_assert_int_eq(lock(4, "c d", 0), GRANTED);
	expect_gauges(4, 4, 1);
}
END_TEST

START_TEST(fifo_later_request_waits_behind_blocked_multikey_head)
{
	/* 2 is at the head of a but blocked on b: 3 must not overtake */
	ck_assert_int_eq(lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(lock(4, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b", 1), QUEUED);
	ck_assert_int_eq(lock(3, "a", 2), QUEUED);
	ck_assert_int_eq(unlock(4, "a", 3), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "| 2 3");
	ck_assert_int_eq(unlock(1, "b", 4), KL_OK);
	EXPECT_GRANTS("2");
}
END_TEST

/* shared */

START_TEST(shared_heads_are_granted_together)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "a", 1), QUEUED);
	ck_assert_int_eq(lock_shared(3, "a", 2), QUEUED);
	ck_assert_int_eq(lock(4, "a", 3), QUEUED);
	ck_assert_int_eq(lock_shared(5, "a", 4), QUEUED);
	EXPECT_KEY("a", "1 | 2s 3s 4 5s");

	ck_assert_int_eq(unlock(1, "a", 10), KL_OK);
	ck_assert_uint_eq(ngrants, 2);
	ck_assert_uint_ne(grants[0].token, grants[1].token);
	EXPECT_GRANTS("2 3");
	EXPECT_KEY("a", "2s 3s | 4 5s");
	ck_assert_int_eq(unlock(2, "a", 11), KL_OK);
	EXPECT_GRANTS("");
	ck_assert_int_eq(unlock(3, "a", 12), KL_OK);
	EXPECT_GRANTS("4");
	EXPECT_KEY("a", "4 | 5s");
	ck_assert_int_eq(unlock(4, "a", 13), KL_OK);
	EXPECT_GRANTS("5");
}
END_TEST

START_TEST(shared_request_joins_shared_holders_at_once)
{
	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "a", 1), GRANTED);
	ck_assert_int_eq(acq(3, "a", REQ(.mode = LT_SHARED, .try = true), 2),
	    GRANTED);
	EXPECT_KEY("a", "1s 2s 3s |");
	expect_gauges(1, 3, 0);
	ck_assert_int_eq(trylock(4, "a", 3), KL_ERR_LOCKED);
}
END_TEST

START_TEST(shared_behind_waiting_writer_queues)
{
	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 1), QUEUED);
	ck_assert_int_eq(lock_shared(3, "a", 2), QUEUED);
	ck_assert_int_eq(acq(4, "a", REQ(.mode = LT_SHARED, .try = true), 3),
	    KL_ERR_LOCKED);
	EXPECT_KEY("a", "1s | 2 3s");
	ck_assert_int_eq(unlock(1, "a", 10), KL_OK);
	EXPECT_GRANTS("2");
	EXPECT_KEY("a", "2 | 3s");
	ck_assert_int_eq(unlock(2, "a", 20), KL_OK);
	EXPECT_GRANTS("3");
}
END_TEST

START_TEST(exclusive_waits_for_every_shared_holder)
{
	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "a", 0), GRANTED);
	ck_assert_int_eq(lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(unlock(1, "a", 1), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "2s | 3");
	ck_assert_int_eq(unlock(2, "a", 2), KL_OK);
	EXPECT_GRANTS("3");
	EXPECT_KEY("a", "3 |");
}
END_TEST

START_TEST(shared_waits_for_exclusive_holder)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(acq(2, "a", REQ(.mode = LT_SHARED, .try = true), 0),
	    KL_ERR_LOCKED);
	ck_assert_ptr_eq(res_why.holder, ow[1]);
	ck_assert_int_eq(lock_shared(2, "a", 0), QUEUED);
	ck_assert_int_eq(unlock(1, "a", 1), KL_OK);
	EXPECT_GRANTS("2");
}
END_TEST

/* semaphore */

START_TEST(semaphore_admits_limit_holders)
{
	ck_assert_int_eq(lock_limit(1, "a", 3, 0), GRANTED);
	ck_assert_int_eq(lock_limit(2, "a", 3, 1), GRANTED);
	ck_assert_int_eq(lock_limit(3, "a", 3, 2), GRANTED);
	ck_assert_int_eq(lock_limit(4, "a", 3, 3), QUEUED);
	ck_assert_int_eq(lock_limit(5, "a", 3, 4), QUEUED);
	EXPECT_KEY("a", "1 2 3 | 4 5");
	ck_assert_int_eq(acq(6, "a", REQ(.limit = 3, .try = true), 5),
	    KL_ERR_LOCKED);
	ck_assert_ptr_eq(res_why.holder, ow[1]);
	ck_assert_uint_eq(res_why.nholders, 3);
	ck_assert_uint_eq(res_why.nwaiters, 2);

	ck_assert_int_eq(unlock(2, "a", 10), KL_OK);
	EXPECT_GRANTS("4");
	EXPECT_KEY("a", "1 3 4 | 5");
	ck_assert_int_eq(unlock(1, "a", 11), KL_OK);
	EXPECT_GRANTS("5");
	EXPECT_KEY("a", "3 4 5 |");
	expect_gauges(1, 3, 0);
}
END_TEST

START_TEST(semaphore_with_room_but_waiters_queues)
{
	/* 4 waits for b (room) and d (full): 5 must queue behind it on b */
	ck_assert_int_eq(lock_limit(1, "d", 2, 0), GRANTED);
	ck_assert_int_eq(lock_limit(2, "d", 2, 0), GRANTED);
	ck_assert_int_eq(lock_limit(4, "b d", 2, 1), QUEUED);
	ck_assert_int_eq(lock_limit(5, "b", 2, 2), QUEUED);
	ck_assert_int_eq(acq(6, "b", REQ(.limit = 2, .try = true), 3),
	    KL_ERR_LOCKED);
	EXPECT_KEY("b", "| 4 5");
	ck_assert_int_eq(unlock(1, "d", 4), KL_OK);
	EXPECT_GRANTS("4 5");
	EXPECT_KEY("b", "4 5 |");
	EXPECT_KEY("d", "2 4 |");
	expect_gauges(2, 4, 0);
}
END_TEST

START_TEST(limit_mismatch_is_conflict)
{
	ck_assert_int_eq(lock_limit(1, "a", 2, 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), KL_ERR_CONFLICT);
	ck_assert_str_eq(res_key, "a");
	ck_assert_uint_eq(ctr()->conflicts, 1);
	ck_assert_int_eq(lock_limit(2, "a", 3, 0), KL_ERR_CONFLICT);
	ck_assert_int_eq(lock_shared(2, "a", 0), KL_ERR_CONFLICT);
	ck_assert_uint_eq(ctr()->conflicts, 3);
	ck_assert(!locktable_owner_is_waiting(ow[2]));
	ck_assert_int_eq(lock_limit(2, "a", 2, 0), GRANTED);

	/* a key in use only by a waiter has the waiter's limit */
	ck_assert_int_eq(lock(3, "b", 0), GRANTED);
	ck_assert_int_eq(lock(4, "c b", 0), QUEUED);
	EXPECT_KEY("c", "| 4");
	ck_assert_int_eq(lock_limit(5, "c", 2, 0), KL_ERR_CONFLICT);
	ck_assert_str_eq(res_key, "c");
	ck_assert_int_eq(lock_limit(5, "d c", 2, 0), KL_ERR_CONFLICT);
	ck_assert_str_eq(res_key, "c");
	EXPECT_KEY("d", "-");
	ck_assert_uint_eq(ctr()->conflicts, 5);
	expect_gauges(3, 3, 1);
}
END_TEST

START_TEST(semaphore_limit_is_forgotten_when_key_empties)
{
	ck_assert_int_eq(lock_limit(1, "a", 2, 0), GRANTED);
	ck_assert_int_eq(unlock(1, "a", 1), KL_OK);
	EXPECT_KEY("a", "-");
	ck_assert_int_eq(lock(2, "a", 2), GRANTED);
	ck_assert_uint_eq(ctr()->conflicts, 0);
}
END_TEST

/* multikey */

START_TEST(multikey_grant_is_atomic_with_one_token)
{
	struct walk_buf	wb;
	uint64_t	tok;

	ck_assert_int_eq(lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b c", 0), QUEUED);
	EXPECT_KEY("a", "| 2");
	EXPECT_KEY("b", "1 | 2");
	EXPECT_KEY("c", "| 2");
	expect_gauges(3, 1, 1);
	ck_assert_uint_eq(ctr()->grants, 1);

	ck_assert_int_eq(unlock(1, "b", 10), KL_OK);
	ck_assert_uint_eq(ngrants, 1);
	tok = grants[0].token;
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(ctr()->grants, 2);
	expect_gauges(3, 3, 0);
	ck_assert_uint_eq(locktable_owner_nholds(ow[2]), 3);
	for (const char *const *k = (const char *const[]){ "a", "b", "c",
	    NULL }; *k != NULL; k++) {
		ck_assert_str_eq(key_state(*k, 10, &wb), "2 |");
		ck_assert_uint_eq(wb.h[0].token, tok);
	}
}
END_TEST

START_TEST(multikey_immediate_grant_has_one_token)
{
	struct walk_buf	wb;
	uint64_t	tok;

	ck_assert_int_eq(lock(1, "x y", 0), GRANTED);
	tok = res_token;
	ck_assert_str_eq(key_state("x", 0, &wb), "1 |");
	ck_assert_uint_eq(wb.h[0].token, tok);
	ck_assert_str_eq(key_state("y", 0, &wb), "1 |");
	ck_assert_uint_eq(wb.h[0].token, tok);
	ck_assert_uint_eq(ctr()->grants, 1);
}
END_TEST

START_TEST(multikey_opposite_orders_do_not_deadlock)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(4, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b", 1), QUEUED);
	ck_assert_int_eq(lock(3, "b a", 2), QUEUED);
	ck_assert_uint_eq(ctr()->deadlocks, 0);
	ck_assert_int_eq(unlock(4, "b", 3), KL_OK);
	EXPECT_GRANTS("");
	EXPECT_KEY("b", "| 2 3");
	ck_assert_int_eq(unlock(1, "a", 4), KL_OK);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(unlock(2, "b a", 5), KL_OK);
	EXPECT_GRANTS("3");
}
END_TEST

START_TEST(duplicate_keys_count_once)
{
	struct walk_buf	wb;

	ck_assert_int_eq(lock(1, "a a b a", 0), GRANTED);
	expect_gauges(2, 2, 0);
	ck_assert_uint_eq(locktable_owner_nholds(ow[1]), 2);
	EXPECT_KEY("a", "1 |");
	ck_assert_int_eq(lock(2, "b b", 1), QUEUED);
	ck_assert_str_eq(key_state("b", 1, &wb), "1 | 2");
	ck_assert_uint_eq(wb.w[0].nkeys, 1);
	ck_assert_int_eq(lock(3, "c b c", 2), QUEUED);
	ck_assert_str_eq(key_state("c", 2, &wb), "| 3");
	ck_assert_uint_eq(wb.w[0].nkeys, 2);
	expect_gauges(3, 2, 2);

	ck_assert_int_eq(unlock(1, "a b a b", 10), KL_OK);
	ck_assert_uint_eq(res_n, 2);
	ck_assert_uint_eq(ctr()->releases, 2);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(unlock(2, "b b", 11), KL_OK);
	ck_assert_uint_eq(res_n, 1);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(locktable_owner_nholds(ow[3]), 2);
	ck_assert_int_eq(refresh(3, "c c b", 5, 12), KL_OK);
	ck_assert_uint_eq(res_n, 2);
}
END_TEST

START_TEST(multikey_keys_can_be_released_one_by_one)
{
	ck_assert_int_eq(lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "b", 0), QUEUED);
	ck_assert_int_eq(unlock(1, "b", 1), KL_OK);
	ck_assert_uint_eq(res_n, 1);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(locktable_owner_nholds(ow[1]), 1);
	ck_assert_int_eq(unlock(1, "a", 2), KL_OK);
	EXPECT_GRANTS("2");
}
END_TEST

/* errors */

START_TEST(held_key_is_held_error)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(1, "b a", 1), KL_ERR_HELD);
	ck_assert_str_eq(res_key, "a");
	ck_assert(!locktable_owner_is_waiting(ow[1]));
	EXPECT_KEY("b", "-");
	expect_gauges(1, 1, 0);
	ck_assert_int_eq(lock_shared(1, "a", 2), KL_ERR_HELD);
	ck_assert_int_eq(trylock(1, "a", 2), KL_ERR_HELD);
	/* HELD comes before CONFLICT */
	ck_assert_int_eq(lock_limit(1, "a", 2, 3), KL_ERR_HELD);
	ck_assert_uint_eq(ctr()->conflicts, 0);
	ck_assert_uint_eq(ctr()->grants, 1);
}
END_TEST

START_TEST(unlock_of_unheld_key_releases_nothing)
{
	ck_assert_int_eq(lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "c", 0), GRANTED);
	ck_assert_int_eq(unlock(1, "a c", 1), KL_ERR_NOTHELD);
	ck_assert_uint_eq(res_bad, 1);
	ck_assert_int_eq(unlock(1, "x", 1), KL_ERR_NOTHELD);
	ck_assert_uint_eq(res_bad, 0);
	EXPECT_KEY("x", "-");
	ck_assert_int_eq(unlock(3, "a", 1), KL_ERR_NOTHELD);
	ck_assert_uint_eq(res_bad, 0);
	expect_gauges(3, 3, 0);
	ck_assert_uint_eq(ctr()->releases, 0);
	ck_assert_uint_eq(locktable_owner_nholds(ow[1]), 2);
	ck_assert_int_eq(unlock(1, "a b", 2), KL_OK);
	ck_assert_uint_eq(res_n, 2);
	ck_assert_uint_eq(ctr()->releases, 2);
	ck_assert_int_eq(unlock(1, "a", 3), KL_ERR_NOTHELD);
}
END_TEST

START_TEST(unlock_by_waiter_of_key_is_notheld)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(unlock(2, "a", 1), KL_ERR_NOTHELD);
	ck_assert(locktable_owner_is_waiting(ow[2]));
	EXPECT_KEY("a", "1 | 2");
}
END_TEST

START_TEST(refresh_of_unheld_key_is_notheld)
{
	ck_assert_int_eq(acq(1, "a", REQ(.ttl_ms = 100), 0), GRANTED);
	ck_assert_int_eq(refresh(1, "a b", 500, 10), KL_ERR_NOTHELD);
	ck_assert_uint_eq(res_bad, 1);
	ck_assert_uint_eq(locktable_next_expiry(lt), 100);
	ck_assert_int_eq(refresh(2, "a", 500, 10), KL_ERR_NOTHELD);
	ck_assert_uint_eq(locktable_next_expiry(lt), 100);
}
END_TEST

START_TEST(busy_when_max_waiters_reached)
{
	ck_assert_int_eq(acq(1, "a", REQ(.has_mw = true, .mw = 0), 0),
	    GRANTED);
	ck_assert_int_eq(acq(2, "a", REQ(.has_mw = true, .mw = 0), 10),
	    KL_ERR_BUSY);
	ck_assert_str_eq(res_key, "a");
	ck_assert_ptr_eq(res_why.holder, ow[1]);
	ck_assert_uint_eq(res_why.held_ms, 10);
	ck_assert_uint_eq(res_why.nwaiters, 0);
	ck_assert_uint_eq(ctr()->busy, 1);
	ck_assert(!locktable_owner_is_waiting(ow[2]));
	expect_gauges(1, 1, 0);

	ck_assert_int_eq(lock(3, "a", 11), QUEUED);
	ck_assert_int_eq(acq(4, "a", REQ(.has_mw = true, .mw = 1), 12),
	    KL_ERR_BUSY);
	ck_assert_int_eq(acq(4, "b a", REQ(.has_mw = true, .mw = 1), 12),
	    KL_ERR_BUSY);
	ck_assert_str_eq(res_key, "a");
	EXPECT_KEY("b", "-");
	ck_assert_uint_eq(ctr()->busy, 3);
	ck_assert_int_eq(acq(4, "a", REQ(.has_mw = true, .mw = 2), 13),
	    QUEUED);
	EXPECT_KEY("a", "1 | 3 4");
	/* max_waiters=0 on a free key is a plain grant */
	ck_assert_int_eq(acq(5, "c", REQ(.has_mw = true, .mw = 0), 14),
	    GRANTED);
	ck_assert_int_eq(acq(6, "c", REQ(.has_mw = true, .mw = 5,
	    .try = true), 14), KL_ERR_LOCKED);
	ck_assert_uint_eq(ctr()->busy, 3);
}
END_TEST

START_TEST(limit_on_max_holds)
{
	ck_assert_int_eq(acq(1, "a b", REQ(.max_holds = 2), 0), GRANTED);
	ck_assert_int_eq(acq(1, "c", REQ(.max_holds = 2), 0), KL_ERR_LIMIT);
	ck_assert(!locktable_owner_is_waiting(ow[1]));
	EXPECT_KEY("c", "-");
	ck_assert_int_eq(acq(1, "c c", REQ(.max_holds = 3), 0), GRANTED);
	/* LIMIT comes before HELD */
	ck_assert_int_eq(acq(1, "a", REQ(.max_holds = 3), 0), KL_ERR_LIMIT);
	ck_assert_int_eq(acq(2, "d e", REQ(.max_holds = 1), 0),
	    KL_ERR_LIMIT);
	ck_assert_int_eq(acq(2, "d d", REQ(.max_holds = 1), 0), GRANTED);
	/* counted on queued requests too */
	ck_assert_int_eq(acq(3, "d e f", REQ(.max_holds = 2), 0),
	    KL_ERR_LIMIT);
	ck_assert_int_eq(acq(3, "d e f", REQ(.max_holds = 3), 0), QUEUED);
	ck_assert_uint_eq(ctr()->grants, 3);
	expect_gauges(6, 4, 1);
}
END_TEST

START_TEST(errors_are_checked_in_protocol_order)
{
	/* CONFLICT before BUSY and LOCKED */
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(acq(2, "a", REQ(.limit = 2, .has_mw = true, .mw = 0,
	    .try = true), 0), KL_ERR_CONFLICT);
	/* BUSY before DEADLOCK: 2 holds b, 1 waits for b */
	ck_assert_int_eq(lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(lock(1, "b", 0), QUEUED);
	ck_assert_int_eq(acq(2, "a", REQ(.has_mw = true, .mw = 0), 0),
	    KL_ERR_BUSY);
	/* DEADLOCK before LOCKED */
	ck_assert_int_eq(trylock(2, "a", 0), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(ctr()->conflicts, 1);
	ck_assert_uint_eq(ctr()->busy, 1);
	ck_assert_uint_eq(ctr()->deadlocks, 1);
	/* LOCKED when nothing else applies */
	ck_assert_int_eq(trylock(3, "a", 0), KL_ERR_LOCKED);
	ck_assert_uint_eq(ctr()->timeouts, 0);
	expect_gauges(2, 2, 1);
}
END_TEST

/* deadlock */

START_TEST(deadlock_cycle_of_two_is_refused)
{
	ck_assert_int_eq(lock(1, "x", 0), GRANTED);
	ck_assert_int_eq(lock(2, "y", 0), GRANTED);
	ck_assert_int_eq(lock(1, "y", 1), QUEUED);
	ck_assert_int_eq(lock(2, "x", 5), KL_ERR_DEADLOCK);
	ck_assert_str_eq(res_key, "x");
	ck_assert_ptr_eq(res_why.holder, ow[1]);
	ck_assert_uint_eq(res_why.held_ms, 5);
	ck_assert_uint_eq(ctr()->deadlocks, 1);
	ck_assert(!locktable_owner_is_waiting(ow[2]));
	ck_assert(locktable_owner_is_waiting(ow[1]));
	EXPECT_KEY("x", "1 |");
	EXPECT_KEY("y", "2 | 1");
	ck_assert_int_eq(unlock(2, "y", 6), KL_OK);
	EXPECT_GRANTS("1");
}
END_TEST

START_TEST(deadlock_cycle_of_three_is_refused)
{
	ck_assert_int_eq(lock(1, "x", 0), GRANTED);
	ck_assert_int_eq(lock(2, "y", 0), GRANTED);
	ck_assert_int_eq(lock(3, "z", 0), GRANTED);
	ck_assert_int_eq(lock(1, "y", 0), QUEUED);
	ck_assert_int_eq(lock(2, "z", 0), QUEUED);
	ck_assert_int_eq(lock(3, "w x", 0), KL_ERR_DEADLOCK);
	ck_assert_str_eq(res_key, "x");
	EXPECT_KEY("w", "-");
	ck_assert_uint_eq(ctr()->deadlocks, 1);
	expect_gauges(3, 3, 2);
	/* a chain that ends in a free owner is no cycle */
	ck_assert_int_eq(lock(4, "x", 0), QUEUED);
	ck_assert_uint_eq(ctr()->deadlocks, 1);
}
END_TEST

START_TEST(deadlock_through_request_queued_ahead_is_refused)
{
	/* 2 waits for 1 on a and sits ahead of 1 on the free key c */
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a c", 0), QUEUED);
	EXPECT_KEY("c", "| 2");
	ck_assert_int_eq(lock(1, "c", 0), KL_ERR_DEADLOCK);
	ck_assert_str_eq(res_key, "c");
	ck_assert_ptr_null(res_why.holder);
	ck_assert_int_eq(lock(3, "c", 0), QUEUED);
}
END_TEST

START_TEST(deadlock_counts_every_conflicting_holder)
{
	/*
	 * 3 waits for x behind 2 (shared, itself blocked on z) and for the
	 * shared holder 1 it conflicts with; 1 asking for m held by 3 closes
	 * 1 -> 3 -> 1. PROTOCOL.md: a waiting request depends on every
	 * holder it conflicts with and on every request queued ahead.
	 */
	ck_assert_int_eq(lock_shared(1, "x", 0), GRANTED);
	ck_assert_int_eq(lock(5, "z", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "x z", 0), QUEUED);
	ck_assert_int_eq(lock(3, "m", 0), GRANTED);
	ck_assert_int_eq(lock(3, "x", 0), QUEUED);
	EXPECT_KEY("x", "1s | 2s 3");
	ck_assert_int_eq(lock(1, "m", 0), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(ctr()->deadlocks, 1);
}
END_TEST

START_TEST(semaphore_wait_deadlocks_only_if_all_holders_in_cycle)
{
	ck_assert_int_eq(lock_limit(1, "s", 2, 0), GRANTED);
	ck_assert_int_eq(lock_limit(2, "s", 2, 0), GRANTED);
	ck_assert_int_eq(lock(3, "x", 0), GRANTED);
	ck_assert_int_eq(lock(1, "x", 0), QUEUED);
	/* 2 is free, so a wait on s can still end */
	ck_assert_int_eq(lock_limit(3, "s", 2, 0), QUEUED);
	ck_assert_uint_eq(ctr()->deadlocks, 0);
	ck_assert(withdraw(3, LT_WHY_TIMEOUT, 1));
	ck_assert_int_eq(lock(2, "x", 2), QUEUED);
	/* now both holders of s wait for 3 */
	ck_assert_int_eq(lock_limit(3, "s", 2, 3), KL_ERR_DEADLOCK);
	ck_assert_str_eq(res_key, "s");
	ck_assert_uint_eq(ctr()->deadlocks, 1);
	ck_assert_int_eq(acq(3, "s", REQ(.limit = 2, .try = true), 3),
	    KL_ERR_DEADLOCK);
	ck_assert_uint_eq(ctr()->deadlocks, 2);
	EXPECT_KEY("s", "1 2 |");
}
END_TEST

START_TEST(semaphore_with_room_is_no_deadlock)
{
	ck_assert_int_eq(lock_limit(1, "s", 3, 0), GRANTED);
	ck_assert_int_eq(lock_limit(2, "s", 3, 0), GRANTED);
	ck_assert_int_eq(lock(3, "x", 0), GRANTED);
	ck_assert_int_eq(lock(1, "x", 0), QUEUED);
	ck_assert_int_eq(lock(2, "x", 0), QUEUED);
	ck_assert_int_eq(lock_limit(3, "s", 3, 0), GRANTED);
	ck_assert_uint_eq(ctr()->deadlocks, 0);
}
END_TEST

START_TEST(grantable_request_is_never_deadlock)
{
	/* 1 waits for 2; 2 asks for a shared key 1 holds shared: granted */
	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(lock(1, "b", 0), QUEUED);
	ck_assert_int_eq(lock_shared(2, "a", 0), GRANTED);
	ck_assert_uint_eq(ctr()->deadlocks, 0);
	/* but exclusive on a would wait for 1: a cycle */
	ck_assert_int_eq(unlock(2, "a", 0), KL_OK);
	ck_assert_int_eq(lock(2, "a", 0), KL_ERR_DEADLOCK);
}
END_TEST

START_TEST(trylock_that_would_deadlock_gets_deadlock)
{
	ck_assert_int_eq(lock(1, "x", 0), GRANTED);
	ck_assert_int_eq(lock(2, "y", 0), GRANTED);
	ck_assert_int_eq(lock(1, "y", 0), QUEUED);
	ck_assert_int_eq(trylock(2, "x", 0), KL_ERR_DEADLOCK);
	ck_assert_uint_eq(ctr()->deadlocks, 1);
	ck_assert_int_eq(trylock(3, "x", 0), KL_ERR_LOCKED);
	ck_assert_uint_eq(ctr()->deadlocks, 1);
}
END_TEST

START_TEST(waiter_without_holds_never_deadlocks)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "b a", 0), QUEUED);
	ck_assert_int_eq(lock(4, "a b", 0), QUEUED);
	ck_assert_uint_eq(ctr()->deadlocks, 0);
}
END_TEST

/* ttl */

START_TEST(ttl_expiry_releases_and_grants_next)
{
	ck_assert_uint_eq(locktable_next_expiry(lt), UINT64_MAX);
	ck_assert_int_eq(acq(1, "a", REQ(.ttl_ms = 100), 1000), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(lt), 1100);
	ck_assert_int_eq(lock(2, "a", 1010), QUEUED);
	ck_assert_uint_eq(expire(1099), 0);
	EXPECT_GRANTS("");
	ck_assert_uint_eq(expire(1100), 1);
	ck_assert_uint_eq(grant_waited(2), 90);
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(ctr()->expired, 1);
	ck_assert_uint_eq(ctr()->releases, 0);
	ck_assert_uint_eq(locktable_owner_nholds(ow[1]), 0);
	ck_assert_int_eq(unlock(1, "a", 1101), KL_ERR_NOTHELD);
	ck_assert_uint_eq(locktable_next_expiry(lt), UINT64_MAX);
	ck_assert_uint_eq(expire(5000), 0);
	EXPECT_KEY("a", "2 |");
	ck_assert_uint_eq(ctr()->hold_ms.count, 1);
	ck_assert_uint_eq(ctr()->hold_ms.sum_ms, 100);
}
END_TEST

START_TEST(refresh_extends_ttl)
{
	ck_assert_int_eq(acq(1, "a b", REQ(.ttl_ms = 100), 0), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(lt), 100);
	ck_assert_int_eq(refresh(1, "a", 100, 50), KL_OK);
	ck_assert_uint_eq(res_n, 1);
	ck_assert_uint_eq(locktable_next_expiry(lt), 100);
	ck_assert_uint_eq(expire(100), 1);
	EXPECT_KEY("b", "-");
	EXPECT_KEY("a", "1 |");
	ck_assert_uint_eq(locktable_next_expiry(lt), 150);
	ck_assert_uint_eq(expire(149), 0);
	ck_assert_uint_eq(expire(150), 1);
	ck_assert_uint_eq(ctr()->expired, 2);
	ck_assert_int_eq(refresh(1, "a", 100, 151), KL_ERR_NOTHELD);
	expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(refresh_gives_ttl_to_hold_without_one)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(lt), UINT64_MAX);
	ck_assert_int_eq(refresh(1, "a", 30, 10), KL_OK);
	ck_assert_uint_eq(locktable_next_expiry(lt), 40);
	ck_assert_uint_eq(expire(40), 1);
}
END_TEST

START_TEST(ttl_of_queued_request_counts_from_grant)
{
	struct walk_buf	wb;

	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(acq(2, "a", REQ(.ttl_ms = 50), 10), QUEUED);
	ck_assert_uint_eq(locktable_next_expiry(lt), UINT64_MAX);
	ck_assert_int_eq(unlock(1, "a", 200), KL_OK);
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(locktable_next_expiry(lt), 250);
	ck_assert_str_eq(key_state("a", 220, &wb), "2 |");
	ck_assert_uint_eq(wb.h[0].held_ms, 20);
	ck_assert_uint_eq(wb.h[0].expires_in_ms, 30);
	ck_assert_uint_eq(expire(249), 0);
	ck_assert_uint_eq(expire(250), 1);
}
END_TEST

START_TEST(multikey_ttl_expires_every_key)
{
	ck_assert_int_eq(acq(1, "a b c", REQ(.ttl_ms = 10), 0), GRANTED);
	ck_assert_int_eq(lock(2, "b", 1), QUEUED);
	ck_assert_int_eq(acq(3, "d", REQ(.ttl_ms = 5), 2), GRANTED);
	ck_assert_uint_eq(locktable_next_expiry(lt), 7);
	ck_assert_uint_eq(expire(20), 4);
	ck_assert_uint_eq(ctr()->expired, 4);
	EXPECT_GRANTS("2");
	expect_gauges(1, 1, 0);
}
END_TEST

START_TEST(expire_skips_holds_without_ttl)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(acq(2, "b", REQ(.ttl_ms = 1), 0), GRANTED);
	ck_assert_uint_eq(expire(1000000), 1);
	EXPECT_KEY("a", "1 |");
	EXPECT_KEY("b", "-");
}
END_TEST

/* cleanup */

START_TEST(disconnect_releases_every_lock)
{
	ck_assert_int_eq(lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "c", 0), GRANTED);
	ck_assert_int_eq(lock(1, "c", 0), QUEUED);
	ck_assert_int_eq(lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(lock(4, "b c", 0), QUEUED);
	EXPECT_KEY("c", "2 | 1 4");

	ck_assert_uint_eq(release_owner(1, LT_WHY_DISCONNECT, 10), 2);
	ck_assert_uint_eq(ctr()->disconnect_releases, 2);
	ck_assert_uint_eq(ctr()->releases, 0);
	EXPECT_GRANTS("3");
	EXPECT_KEY("c", "2 | 4");
	ck_assert_int_eq(unlock(2, "c", 20), KL_OK);
	EXPECT_GRANTS("4");

	locktable_owner_free(lt, ow[4], 30);
	ow[4] = NULL;
	CHECK_TABLE();
	ck_assert_uint_eq(ctr()->disconnect_releases, 4);
	expect_gauges(1, 1, 0);
	locktable_owner_free(lt, ow[3], 30);
	ow[3] = NULL;
	CHECK_TABLE();
	expect_gauges(0, 0, 0);
	ck_assert_uint_eq(ctr()->disconnect_releases, 5);
	ck_assert_uint_eq(ctr()->hold_ms.count, 6);
}
END_TEST

START_TEST(owner_free_of_waiting_owner_withdraws_its_request)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "a b", 0), QUEUED);
	locktable_owner_free(lt, ow[2], 5);
	ow[2] = NULL;
	CHECK_TABLE();
	EXPECT_GRANTS("");
	EXPECT_KEY("a", "1 | 3");
	ck_assert_int_eq(unlock(1, "a", 6), KL_OK);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(ctr()->timeouts, 0);
	locktable_owner_free(lt, NULL, 7);
	CHECK_TABLE();
}
END_TEST

START_TEST(release_owner_with_unlock_counts_releases)
{
	ck_assert_int_eq(lock(1, "a b c", 0), GRANTED);
	ck_assert_uint_eq(release_owner(1, LT_WHY_UNLOCK, 5), 3);
	ck_assert_uint_eq(ctr()->releases, 3);
	ck_assert_uint_eq(ctr()->disconnect_releases, 0);
	ck_assert_uint_eq(release_owner(1, LT_WHY_UNLOCK, 6), 0);
	expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(withdraw_on_timeout_grants_those_behind)
{
	ck_assert_int_eq(lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b", 0), QUEUED);
	ck_assert_int_eq(lock(3, "a", 5), QUEUED);
	ck_assert(!withdraw(1, LT_WHY_TIMEOUT, 10));
	ck_assert(withdraw(2, LT_WHY_TIMEOUT, 10));
	ck_assert_uint_eq(grant_waited(3), 5);
	EXPECT_GRANTS("3");
	ck_assert_uint_eq(ctr()->timeouts, 1);
	ck_assert(!withdraw(2, LT_WHY_TIMEOUT, 11));
	ck_assert_uint_eq(ctr()->timeouts, 1);
	EXPECT_KEY("b", "1 |");
	expect_gauges(2, 2, 0);
}
END_TEST

START_TEST(withdraw_of_shared_head_grants_shared_behind)
{
	ck_assert_int_eq(lock(1, "b", 0), GRANTED);
	ck_assert_int_eq(lock_shared(4, "a", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "a b", 1), QUEUED);
	ck_assert_int_eq(lock_shared(3, "a", 2), QUEUED);
	ck_assert(withdraw(2, LT_WHY_TIMEOUT, 3));
	EXPECT_GRANTS("3");
	EXPECT_KEY("a", "4s 3s |");
}
END_TEST

/*
 * Runs a little of everything; with allocation n failing, calls may fail
 * (acq() then checks that nothing changed) but the table stays whole.
 */
static void
alloc_scenario(void)
{
	(void)acq(1, "a b", REQ(.ttl_ms = 50), 0);
	(void)lock(2, "b c", 1);
	(void)acq(3, "x", REQ(.ttl_ms = 5), 2);
	(void)lock(3, "c", 3);
	(void)lock(1, "x", 3);		/* DEADLOCK */
	(void)acq(4, "d e f g h i j k l m", REQ(.mode = LT_SHARED), 4);
	(void)acq(5, "m l k j i h g f e d d", REQ(.mode = LT_SHARED), 4);
	(void)lock(6, "d", 5);
	(void)refresh(1, "a b", 5, 6);
	(void)refresh(6, "d", 5, 6);
	(void)unlock(1, "a", 7);
	(void)withdraw(2, LT_WHY_TIMEOUT, 8);
	(void)expire(10);
	(void)release_owner(4, LT_WHY_UNLOCK, 11);
	(void)release_owner(1, LT_WHY_DISCONNECT, 12);
	(void)lock(7, "n", 13);
	(void)lock_limit(8, "o", 2, 13);
}

START_TEST(allocation_failure_leaves_table_whole)
{
	/* without failures the scenario meets what it is meant to */
	alloc_scenario();
	ck_assert_uint_eq(ctr()->deadlocks, 1);
	ck_assert_uint_eq(ctr()->expired, 1);
	ck_assert_uint_eq(ctr()->grants, 7);
	EXPECT_GRANTS("3");
	for (int i = 1; i < NOWNERS; i++)
		(void)release_owner(i, LT_WHY_DISCONNECT, 20);
	expect_gauges(0, 0, 0);
	for (uint64_t n = 1; n <= 150; n++) {
		kl_alloc_fail_at(n, _i == 1);
		alloc_scenario();
		kl_alloc_fail_at(0, false);
		for (int i = 1; i < NOWNERS; i++)
			(void)release_owner(i, LT_WHY_DISCONNECT, 20);
		expect_gauges(0, 0, 0);
		ngrants = 0;
	}
}
END_TEST

/* Every exit path leaves no entry behind: PROTOCOL.md, Cleanup. */
START_TEST(keys_zero_after_every_exit_path)
{
	/* unlock */
	ck_assert_int_eq(lock(1, "a b", 0), GRANTED);
	ck_assert_int_eq(unlock(1, "b a", 1), KL_OK);
	expect_gauges(0, 0, 0);
	/* timeout */
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a b", 0), QUEUED);
	ck_assert(withdraw(2, LT_WHY_TIMEOUT, 1));
	expect_gauges(1, 1, 0);
	/* shutdown (no counter) */
	ck_assert_int_eq(lock(2, "c a", 0), QUEUED);
	ck_assert(withdraw(2, LT_WHY_SHUTDOWN, 1));
	expect_gauges(1, 1, 0);
	ck_assert_uint_eq(ctr()->timeouts, 1);
	/* busy */
	ck_assert_int_eq(acq(2, "b a", REQ(.has_mw = true, .mw = 0), 1),
	    KL_ERR_BUSY);
	expect_gauges(1, 1, 0);
	/* locked */
	ck_assert_int_eq(trylock(2, "b a", 1), KL_ERR_LOCKED);
	expect_gauges(1, 1, 0);
	/* conflict */
	ck_assert_int_eq(lock_limit(2, "b a", 2, 1), KL_ERR_CONFLICT);
	expect_gauges(1, 1, 0);
	/* held */
	ck_assert_int_eq(lock(1, "b a", 1), KL_ERR_HELD);
	expect_gauges(1, 1, 0);
	/* limit */
	ck_assert_int_eq(acq(1, "b c", REQ(.max_holds = 2), 1), KL_ERR_LIMIT);
	expect_gauges(1, 1, 0);
	/* deadlock */
	ck_assert_int_eq(lock(2, "d", 1), GRANTED);
	ck_assert_int_eq(lock(1, "d", 1), QUEUED);
	ck_assert_int_eq(lock(2, "b a", 1), KL_ERR_DEADLOCK);
	expect_gauges(2, 2, 1);
	/* disconnect */
	ck_assert_uint_eq(release_owner(2, LT_WHY_DISCONNECT, 2), 1);
	EXPECT_GRANTS("1");
	ck_assert_uint_eq(release_owner(1, LT_WHY_DISCONNECT, 2), 2);
	expect_gauges(0, 0, 0);
	/* ttl */
	ck_assert_int_eq(acq(3, "e f", REQ(.ttl_ms = 5), 10), GRANTED);
	ck_assert_uint_eq(expire(15), 2);
	expect_gauges(0, 0, 0);
	/* expiry of a waiter's blocker, then its own ttl */
	ck_assert_int_eq(acq(3, "e", REQ(.ttl_ms = 5), 20), GRANTED);
	ck_assert_int_eq(acq(4, "e g", REQ(.ttl_ms = 5), 20), QUEUED);
	ck_assert_uint_eq(expire(25), 1);
	EXPECT_GRANTS("4");
	ck_assert_uint_eq(expire(30), 2);
	expect_gauges(0, 0, 0);
	ck_assert_uint_eq(locktable_next_expiry(lt), UINT64_MAX);
}
END_TEST

/* counters */

static void
expect_hist(const struct kl_hist *got, const struct kl_hist *want,
    const char *what)
{
	ck_assert_msg(got->count == want->count, "%s count %ju, want %ju",
	    what, (uintmax_t)got->count, (uintmax_t)want->count);
	ck_assert_msg(got->sum_ms == want->sum_ms, "%s sum %ju, want %ju",
	    what, (uintmax_t)got->sum_ms, (uintmax_t)want->sum_ms);
	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++)
		ck_assert_msg(got->counts[i] == want->counts[i],
		    "%s bucket %zu: %ju, want %ju", what, i,
		    (uintmax_t)got->counts[i], (uintmax_t)want->counts[i]);
}

START_TEST(counters_match)
{
	struct kl_hist	wait = { 0 }, hold = { 0 };
	const struct lt_counters *c;

	ck_assert_int_eq(lock(1, "a b", 0), GRANTED);	/* grant 1 */
	kl_hist_add(&wait, 0);
	ck_assert_int_eq(lock(2, "a", 5), QUEUED);
	ck_assert_int_eq(lock(3, "c", 10), GRANTED);	/* grant 2 */
	kl_hist_add(&wait, 0);
	ck_assert_int_eq(unlock(1, "a b", 20), KL_OK);	/* grant 3 */
	kl_hist_add(&hold, 20);
	kl_hist_add(&hold, 20);
	kl_hist_add(&wait, 15);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(acq(4, "a", REQ(.has_mw = true, .mw = 0), 25),
	    KL_ERR_BUSY);
	ck_assert_int_eq(lock_limit(4, "a", 2, 26), KL_ERR_CONFLICT);
	ck_assert_int_eq(lock(4, "a", 30), QUEUED);
	ck_assert(withdraw(4, LT_WHY_TIMEOUT, 40));
	ck_assert_int_eq(lock(2, "c", 41), QUEUED);
	ck_assert_int_eq(lock(3, "a", 41), KL_ERR_DEADLOCK);
	ck_assert_int_eq(acq(5, "d", REQ(.ttl_ms = 10), 50), GRANTED);
	kl_hist_add(&wait, 0);
	ck_assert_uint_eq(expire(60), 1);
	kl_hist_add(&hold, 10);
	ck_assert_uint_eq(release_owner(3, LT_WHY_DISCONNECT, 70), 1);
	kl_hist_add(&hold, 60);
	kl_hist_add(&wait, 29);
	EXPECT_GRANTS("2");
	ck_assert_uint_eq(release_owner(2, LT_WHY_UNLOCK, 80), 2);
	kl_hist_add(&hold, 60);
	kl_hist_add(&hold, 10);
	ck_assert_int_eq(lock(7, "y", 80), GRANTED);
	kl_hist_add(&wait, 0);
	ck_assert_int_eq(trylock(6, "y", 85), KL_ERR_LOCKED);
	ck_assert_int_eq(unlock(7, "y", 3080), KL_OK);
	kl_hist_add(&hold, 3000);

	c = ctr();
	ck_assert_uint_eq(c->grants, 6);
	ck_assert_uint_eq(c->releases, 5);
	ck_assert_uint_eq(c->expired, 1);
	ck_assert_uint_eq(c->disconnect_releases, 1);
	ck_assert_uint_eq(c->timeouts, 1);
	ck_assert_uint_eq(c->busy, 1);
	ck_assert_uint_eq(c->deadlocks, 1);
	ck_assert_uint_eq(c->conflicts, 1);
	ck_assert_uint_eq(c->max_waiters, 1);
	expect_gauges(0, 0, 0);
	expect_hist(&c->wait_ms, &wait, "wait_ms");
	expect_hist(&c->hold_ms, &hold, "hold_ms");
}
END_TEST

START_TEST(max_waiters_counter_keeps_the_peak)
{
	struct walk_buf			wb;
	const struct lt_key		*k;
	struct lt_key_view		v;

	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(lock(4, "a b", 0), QUEUED);
	ck_assert_uint_eq(ctr()->max_waiters, 3);
	ck_assert(withdraw(2, LT_WHY_TIMEOUT, 1));
	ck_assert(withdraw(3, LT_WHY_TIMEOUT, 1));
	ck_assert_uint_eq(ctr()->max_waiters, 3);
	ck_assert_ptr_nonnull(k = find("a"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.max_waiters, 3);
	ck_assert_uint_eq(v.nwaiters, 1);
	ck_assert_ptr_nonnull(k = find("b"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.max_waiters, 1);
	ck_assert_str_eq(key_state("a", 1, &wb), "1 | 4");
	ck_assert_uint_eq(ctr()->waiting, 1);
}
END_TEST

START_TEST(shutdown_and_locked_count_nothing)
{
	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert(withdraw(2, LT_WHY_SHUTDOWN, 1));
	ck_assert_int_eq(trylock(2, "a", 1), KL_ERR_LOCKED);
	ck_assert_uint_eq(ctr()->timeouts, 0);
	ck_assert_uint_eq(ctr()->busy, 0);
	ck_assert_uint_eq(ctr()->deadlocks, 0);
	ck_assert_uint_eq(ctr()->grants, 1);
	ck_assert_uint_eq(ctr()->wait_ms.count, 1);
	ck_assert_uint_eq(release_owner(1, LT_WHY_SHUTDOWN, 2), 1);
	ck_assert_uint_eq(ctr()->releases, 0);
	ck_assert_uint_eq(ctr()->disconnect_releases, 0);
	ck_assert_uint_eq(ctr()->expired, 0);
	expect_gauges(0, 0, 0);
}
END_TEST

START_TEST(tokens_increase_across_grants)
{
	uint64_t	t1, t2;

	ck_assert_int_eq(lock(1, "a", 0), GRANTED);
	t1 = res_token;
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "b", 0), GRANTED);
	t2 = res_token;
	ck_assert_uint_gt(t2, t1);
	ck_assert_int_eq(unlock(1, "a", 1), KL_OK);
	ck_assert_uint_eq(ngrants, 1);
	ck_assert_uint_gt(grants[0].token, t2);
	EXPECT_GRANTS("2");
	ck_assert_int_eq(lock(1, "a", 2), QUEUED);
	ck_assert_int_eq(lock(4, "c", 3), GRANTED);
	ck_assert_uint_eq(next_tok, 5);
}
END_TEST

/* views */

START_TEST(blocker_names_longest_holder)
{
	struct lt_blocker	why;

	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "a", 10), GRANTED);
	ck_assert_int_eq(trylock(3, "a", 100), KL_ERR_LOCKED);
	ck_assert_str_eq(res_key, "a");
	ck_assert_ptr_eq(res_why.holder, ow[1]);
	ck_assert_uint_eq(res_why.held_ms, 100);
	ck_assert_uint_eq(res_why.nholders, 2);
	ck_assert_uint_eq(res_why.nwaiters, 0);

	ck_assert(!locktable_wait_blocker(lt, ow[3], 100, &why));
	ck_assert_int_eq(lock(3, "a", 100), QUEUED);
	memset(&why, 0, sizeof(why));
	ck_assert(locktable_wait_blocker(lt, ow[3], 150, &why));
	ck_assert_uint_eq(why.keylen, 1);
	ck_assert(memcmp(why.key, "a", 1) == 0);
	ck_assert_ptr_eq(why.holder, ow[1]);
	ck_assert_uint_eq(why.held_ms, 150);
	ck_assert_uint_eq(why.nholders, 2);
	ck_assert_uint_eq(why.nwaiters, 1);
	ck_assert_int_eq(unlock(1, "a", 160), KL_OK);
	ck_assert(locktable_wait_blocker(lt, ow[3], 170, &why));
	ck_assert_ptr_eq(why.holder, ow[2]);
	ck_assert_uint_eq(why.held_ms, 160);
	ck_assert_uint_eq(why.nholders, 1);

	/* the first key of the request that blocks it */
	ck_assert_int_eq(lock(4, "c", 200), GRANTED);
	ck_assert_int_eq(trylock(5, "b c", 210), KL_ERR_LOCKED);
	ck_assert_str_eq(res_key, "c");
	ck_assert_ptr_eq(res_why.holder, ow[4]);
	ck_assert_uint_eq(res_why.held_ms, 10);
}
END_TEST

START_TEST(blocker_is_null_when_only_requests_ahead_block)
{
	struct lt_blocker	why;

	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(acq(3, "a", REQ(.mode = LT_SHARED, .try = true), 5),
	    KL_ERR_LOCKED);
	ck_assert_ptr_null(res_why.holder);
	ck_assert_uint_eq(res_why.nholders, 1);
	ck_assert_uint_eq(res_why.nwaiters, 1);
	ck_assert_int_eq(lock_shared(3, "a", 5), QUEUED);
	ck_assert(locktable_wait_blocker(lt, ow[3], 6, &why));
	ck_assert_ptr_null(why.holder);
	ck_assert(locktable_wait_blocker(lt, ow[2], 6, &why));
	ck_assert_ptr_eq(why.holder, ow[1]);
	ck_assert_uint_eq(why.held_ms, 6);
}
END_TEST

static const char *
view_name(const struct lt_key *k, size_t *nwaiters)
{
	static char		buf[KL_KEY_MAX + 1];
	struct lt_key_view	v;

	locktable_key_view(k, &v);
	memcpy(buf, v.key, v.keylen);
	buf[v.keylen] = '\0';
	*nwaiters = v.nwaiters;
	return buf;
}

START_TEST(hot_keys_most_waiters_first)
{
	const struct lt_key	*out[10];
	size_t			 n, nw;

	ck_assert_uint_eq(locktable_hot_keys(lt, out, 10), 0);
	ck_assert_int_eq(lock(1, "a b c d", 0), GRANTED);
	ck_assert_int_eq(lock(2, "a", 0), QUEUED);
	ck_assert_int_eq(lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(lock(6, "d", 0), QUEUED);
	ck_assert_int_eq(lock(4, "a", 0), QUEUED);
	ck_assert_int_eq(lock(5, "b", 0), QUEUED);
	ck_assert_int_eq(lock(7, "d", 0), QUEUED);

	n = locktable_hot_keys(lt, out, 10);
	ck_assert_uint_eq(n, 4);
	ck_assert_str_eq(view_name(out[0], &nw), "a");
	ck_assert_uint_eq(nw, 3);
	ck_assert_str_eq(view_name(out[1], &nw), "d");
	ck_assert_uint_eq(nw, 2);
	ck_assert_str_eq(view_name(out[2], &nw), "b");
	ck_assert_uint_eq(nw, 1);
	ck_assert_str_eq(view_name(out[3], &nw), "c");
	ck_assert_uint_eq(nw, 0);

	ck_assert_uint_eq(locktable_hot_keys(lt, out, 2), 2);
	ck_assert_str_eq(view_name(out[0], &nw), "a");
	ck_assert_str_eq(view_name(out[1], &nw), "d");

	ck_assert(withdraw(2, LT_WHY_TIMEOUT, 1));
	ck_assert(withdraw(3, LT_WHY_TIMEOUT, 1));
	ck_assert_uint_eq(locktable_hot_keys(lt, out, 1), 1);
	ck_assert_str_eq(view_name(out[0], &nw), "d");
	ck_assert_uint_eq(locktable_hot_keys(lt, out, 0), 0);
}
END_TEST

START_TEST(key_view_and_walk_report_holders_and_waiters)
{
	struct walk_buf			wb;
	const struct lt_key		*k;
	struct lt_key_view		v;
	uint64_t			t1;

	ck_assert_ptr_null(find("a"));
	ck_assert_int_eq(acq(1, "a", REQ(.limit = 3, .ttl_ms = 1000), 100),
	    GRANTED);
	t1 = res_token;
	ck_assert_int_eq(lock_limit(2, "a", 3, 110), GRANTED);
	ck_assert_int_eq(lock_limit(3, "a", 3, 120), GRANTED);
	ck_assert_int_eq(acq(4, "a b", REQ(.limit = 3), 130), QUEUED);
	ck_assert_ptr_nonnull(k = find("a"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.limit, 3);
	ck_assert_uint_eq(v.nholders, 3);
	ck_assert_uint_eq(v.nwaiters, 1);
	ck_assert_uint_eq(v.max_waiters, 1);
	ck_assert_uint_eq(v.wait_ms_total, 0);
	ck_assert_str_eq(key_state("a", 200, &wb), "1 2 3 | 4");
	ck_assert_uint_eq(wb.h[0].token, t1);
	ck_assert_int_eq(wb.h[0].mode, LT_EXCLUSIVE);
	ck_assert_uint_eq(wb.h[0].held_ms, 100);
	ck_assert_uint_eq(wb.h[0].expires_in_ms, 900);
	ck_assert_uint_eq(wb.h[1].held_ms, 90);
	ck_assert_uint_eq(wb.h[1].expires_in_ms, 0);
	ck_assert_uint_gt(wb.h[1].token, t1);
	ck_assert_uint_gt(wb.h[2].token, wb.h[1].token);
	ck_assert_ptr_eq(wb.w[0].owner, ow[4]);
	ck_assert_uint_eq(wb.w[0].waited_ms, 70);
	ck_assert_uint_eq(wb.w[0].nkeys, 2);
	ck_assert_int_eq(wb.w[0].mode, LT_EXCLUSIVE);

	ck_assert_int_eq(unlock(1, "a", 230), KL_OK);
	EXPECT_GRANTS("4");
	ck_assert_ptr_nonnull(k = find("a"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.wait_ms_total, 100);
	ck_assert_str_eq(key_state("a", 230, &wb), "2 3 4 |");
	ck_assert_ptr_nonnull(k = find("b"));
	locktable_key_view(k, &v);
	ck_assert_uint_eq(v.limit, 3);
	ck_assert_uint_eq(v.wait_ms_total, 100);
	ck_assert_ptr_null(find("ab"));
	ck_assert_ptr_null(locktable_find(lt, "a", 0));
}
END_TEST

START_TEST(walk_stops_when_callback_returns_false)
{
	struct walk_buf		wb;
	const struct lt_key	*k;

	ck_assert_int_eq(lock_shared(1, "a", 0), GRANTED);
	ck_assert_int_eq(lock_shared(2, "a", 0), GRANTED);
	ck_assert_int_eq(lock(3, "a", 0), QUEUED);
	ck_assert_int_eq(lock(4, "a", 0), QUEUED);
	ck_assert_ptr_nonnull(k = find("a"));
	memset(&wb, 0, sizeof(wb));
	wb.stop_after = 1;
	locktable_key_walk(lt, k, 0, walk_holder, walk_waiter, &wb);
	ck_assert_int_eq(wb.calls, 1);
	memset(&wb, 0, sizeof(wb));
	wb.stop_after = 3;
	locktable_key_walk(lt, k, 0, walk_holder, walk_waiter, &wb);
	ck_assert_int_eq(wb.calls, 3);
	ck_assert_str_eq(wb.hs, "1s 2s ");
	ck_assert_str_eq(wb.ws, "3 ");
}
END_TEST

START_TEST(owner_accessors_report_state)
{
	ck_assert_uint_eq(locktable_owner_id(ow[5]), 5);
	ck_assert_ptr_eq(locktable_owner_udata(ow[5]), &udata[5]);
	ck_assert_uint_eq(locktable_owner_nholds(ow[5]), 0);
	ck_assert(!locktable_owner_is_waiting(ow[5]));
	ck_assert_int_eq(lock(5, "a b", 0), GRANTED);
	ck_assert_int_eq(lock(6, "c", 0), GRANTED);
	ck_assert_int_eq(lock(5, "c", 0), QUEUED);
	ck_assert_uint_eq(locktable_owner_nholds(ow[5]), 2);
	ck_assert(locktable_owner_is_waiting(ow[5]));
	ck_assert_int_eq(unlock(6, "c", 1), KL_OK);
	EXPECT_GRANTS("5");
	ck_assert_uint_eq(locktable_owner_nholds(ow[5]), 3);
	ck_assert(!locktable_owner_is_waiting(ow[5]));
}
END_TEST

START_TEST(keys_are_compared_by_length_and_bytes)
{
	static const char	buf[] = "abcdef";
	const char		*keys[3] = { buf, buf, buf + 1 };
	size_t			 lens[3] = { 2, 3, 2 };
	struct lt_acquire	 a = {
		.keys = keys, .keylens = lens, .nkeys = 3,
		.mode = LT_EXCLUSIVE, .limit = 1, .max_waiters = -1
	};
	bool			 granted = false;
	uint64_t		 tok = 0;
	struct lt_blocker	 why;
	size_t			 n = 0, bad = 0;

	/* "ab", "abc", "bc", none of them NUL-terminated */
	ck_assert_int_eq(locktable_acquire(lt, ow[1], &a, 0, &granted, &tok,
	    &why), KL_OK);
	ck_assert(granted);
	ck_assert_uint_gt(tok, last_tok);
	last_tok = tok;
	CHECK_TABLE();
	expect_gauges(3, 3, 0);
	EXPECT_KEY("ab", "1 |");
	EXPECT_KEY("abc", "1 |");
	EXPECT_KEY("bc", "1 |");
	ck_assert_ptr_null(find("a"));
	ck_assert_ptr_null(find("abcd"));
	ck_assert_ptr_null(find("AB"));
	ck_assert_int_eq(lock(2, "a abcd AB", 0), GRANTED);
	ck_assert_int_eq(locktable_release(lt, ow[1], keys, lens, 3, 1, &n,
	    &bad), KL_OK);
	ck_assert_uint_eq(n, 3);
	CHECK_TABLE();
	expect_gauges(3, 3, 0);
}
END_TEST

START_TEST(many_keys_and_waiters_stay_consistent)
{
	char	buf[32];

	for (int i = 0; i < 200; i++) {
		snprintf(buf, sizeof(buf), "key:%d", i);
		ck_assert_int_eq(lock(1 + i % 2, buf, (uint64_t)i), GRANTED);
	}
	expect_gauges(200, 200, 0);
	ck_assert_int_eq(lock(3, "key:0 key:1 key:199", 300), QUEUED);
	ck_assert_uint_eq(release_owner(1, LT_WHY_UNLOCK, 301), 100);
	EXPECT_GRANTS("");
	ck_assert_uint_eq(release_owner(2, LT_WHY_UNLOCK, 302), 100);
	EXPECT_GRANTS("3");
	expect_gauges(3, 3, 0);
}
END_TEST

/*
 * A plain lock is one entry with its hold inside: the table grows by the
 * entry, its key bytes and a share of the buckets, and shrinks back to the
 * byte when the keys go (CHECK_TABLE recounts the gauge on every call).
 */
START_TEST(plain_locks_cost_one_compact_entry_each)
{
	enum { N = 4096 };
	char		buf[32];
	uint64_t	before = ctr()->bytes, per_key;

	ck_assert_uint_gt(before, 0);
	for (int i = 0; i < N; i++) {
		snprintf(buf, sizeof(buf), "b:%04d", i);
		ck_assert_int_eq(lock(1, buf, 1), GRANTED);
	}
	per_key = (ctr()->bytes - before) / N;
	ck_assert_msg(per_key <= 96, "%ju bytes per held key",
	    (uintmax_t)per_key);
	ck_assert_int_eq(lock_shared(2, "s", 2), GRANTED);
	ck_assert_int_eq(lock_shared(3, "s", 2), GRANTED);
	ck_assert_int_eq(lock(4, "s", 3), QUEUED);
	ck_assert_uint_eq(release_owner(1, LT_WHY_UNLOCK, 4), N);
	ck_assert_uint_eq(release_owner(2, LT_WHY_UNLOCK, 5), 1);
	ck_assert_uint_eq(release_owner(3, LT_WHY_UNLOCK, 6), 1);
	EXPECT_GRANTS("4");
	ck_assert_int_eq(unlock(4, "s", 7), KL_OK);
	ck_assert_uint_eq(ctr()->bytes, before);
}
END_TEST

static Suite *
locktable_suite(void)
{
	Suite	*s = suite_create("locktable");
	TCase	*tc;

#define TCASE(name) do {						\
	tc = tcase_create(name);					\
	tcase_add_checked_fixture(tc, setup, teardown);			\
	suite_add_tcase(s, tc);						\
} while (0)

	TCASE("fifo");
	tcase_add_test(tc, fifo_grants_in_arrival_order);
	tcase_add_test(tc, trylock_on_key_with_waiter_but_no_holder_is_locked);
	tcase_add_test(tc, fifo_free_key_with_waiter_is_not_free);
	tcase_add_test(tc, fifo_different_keys_never_wait_for_each_other);
	tcase_add_test(tc,
	    fifo_later_request_waits_behind_blocked_multikey_head);

	TCASE("shared");
	tcase_add_test(tc, shared_heads_are_granted_together);
	tcase_add_test(tc, shared_request_joins_shared_holders_at_once);
	tcase_add_test(tc, shared_behind_waiting_writer_queues);
	tcase_add_test(tc, exclusive_waits_for_every_shared_holder);
	tcase_add_test(tc, shared_waits_for_exclusive_holder);

	TCASE("semaphore");
	tcase_add_test(tc, semaphore_admits_limit_holders);
	tcase_add_test(tc, semaphore_with_room_but_waiters_queues);
	tcase_add_test(tc, limit_mismatch_is_conflict);
	tcase_add_test(tc, semaphore_limit_is_forgotten_when_key_empties);

	TCASE("multikey");
	tcase_add_test(tc, multikey_grant_is_atomic_with_one_token);
	tcase_add_test(tc, multikey_immediate_grant_has_one_token);
	tcase_add_test(tc, multikey_opposite_orders_do_not_deadlock);
	tcase_add_test(tc, duplicate_keys_count_once);
	tcase_add_test(tc, multikey_keys_can_be_released_one_by_one);

	TCASE("errors");
	tcase_add_test(tc, held_key_is_held_error);
	tcase_add_test(tc, unlock_of_unheld_key_releases_nothing);
	tcase_add_test(tc, unlock_by_waiter_of_key_is_notheld);
	tcase_add_test(tc, refresh_of_unheld_key_is_notheld);
	tcase_add_test(tc, busy_when_max_waiters_reached);
	tcase_add_test(tc, limit_on_max_holds);
	tcase_add_test(tc, errors_are_checked_in_protocol_order);

	TCASE("deadlock");
	tcase_add_test(tc, deadlock_cycle_of_two_is_refused);
	tcase_add_test(tc, deadlock_cycle_of_three_is_refused);
	tcase_add_test(tc, deadlock_through_request_queued_ahead_is_refused);
	tcase_add_test(tc, deadlock_counts_every_conflicting_holder);
	tcase_add_test(tc,
	    semaphore_wait_deadlocks_only_if_all_holders_in_cycle);
	tcase_add_test(tc, semaphore_with_room_is_no_deadlock);
	tcase_add_test(tc, grantable_request_is_never_deadlock);
	tcase_add_test(tc, trylock_that_would_deadlock_gets_deadlock);
	tcase_add_test(tc, waiter_without_holds_never_deadlocks);

	TCASE("ttl");
	tcase_add_test(tc, ttl_expiry_releases_and_grants_next);
	tcase_add_test(tc, refresh_extends_ttl);
	tcase_add_test(tc, refresh_gives_ttl_to_hold_without_one);
	tcase_add_test(tc, ttl_of_queued_request_counts_from_grant);
	tcase_add_test(tc, multikey_ttl_expires_every_key);
	tcase_add_test(tc, expire_skips_holds_without_ttl);

	TCASE("cleanup");
	tcase_add_test(tc, disconnect_releases_every_lock);
	tcase_add_test(tc, owner_free_of_waiting_owner_withdraws_its_request);
	tcase_add_test(tc, release_owner_with_unlock_counts_releases);
	tcase_add_test(tc, withdraw_on_timeout_grants_those_behind);
	tcase_add_test(tc, withdraw_of_shared_head_grants_shared_behind);
	tcase_add_test(tc, keys_zero_after_every_exit_path);
	tcase_add_loop_test(tc, allocation_failure_leaves_table_whole, 0, 2);

	TCASE("counters");
	tcase_add_test(tc, counters_match);
	tcase_add_test(tc, max_waiters_counter_keeps_the_peak);
	tcase_add_test(tc, shutdown_and_locked_count_nothing);
	tcase_add_test(tc, tokens_increase_across_grants);

	TCASE("views");
	tcase_add_test(tc, blocker_names_longest_holder);
	tcase_add_test(tc, blocker_is_null_when_only_requests_ahead_block);
	tcase_add_test(tc, hot_keys_most_waiters_first);
	tcase_add_test(tc, key_view_and_walk_report_holders_and_waiters);
	tcase_add_test(tc, walk_stops_when_callback_returns_false);
	tcase_add_test(tc, owner_accessors_report_state);
	tcase_add_test(tc, keys_are_compared_by_length_and_bytes);
	tcase_add_test(tc, many_keys_and_waiters_stay_consistent);
	tcase_add_test(tc, plain_locks_cost_one_compact_entry_each);
#undef TCASE
	return s;
}

int
main(void)
{
	SRunner	*sr;
	int	 nfailed;

	sr = srunner_create(locktable_suite());
	srunner_run_all(sr, CK_NORMAL);
	nfailed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfailed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
