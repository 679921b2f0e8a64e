/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of the STATS and INFO JSON (stats.h, PROTOCOL.md "STATS" and
 * "Commands"): a real lock table is driven with explicit now_ms values,
 * then stats_to_json and stats_info_json are parsed with jansson and every
 * member the protocol lists is checked for its type and value. Both are
 * one line: they travel as "OK {json}".
 */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hist.h"
#include "kl.h"
#include "locktable.h"
#include "stats.h"

#define NOWNERS		12	/* ow[1..11]; ow[i] has id i */
#define START_MS	1000
#define TEST_VERSION		"9.8.7-test"

struct owner_info {
	const char	*name;	/* NULL: no NAME given */
};

/* Odd owners are named, even ones are not; names need JSON escaping. */
static const struct owner_info infos[NOWNERS] = {
	{ NULL }, { "alpha" }, { NULL }, { "ga\"mma\\" }, { NULL },
	{ "\xce\xb5psilon" }, { NULL }, { "eta" }, { NULL }, { "iota" },
	{ NULL }, { "lambda" }
};

static struct locktable	*lt;
static struct lt_owner	*ow[NOWNERS];
static struct stats	 st;
static uint64_t		 next_tok;
static uint64_t		 last_granted_token;
static uint64_t		 ngranted;
static json_t		*doc;		/* the last parsed JSON */
static char		*text;		/* and its text */

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
	(void)o;
	(void)waited_ms;
	last_granted_token = token;
	ngranted++;
}

static const char *
owner_name(const struct lt_owner *o)
{
	const struct owner_info	*i = locktable_owner_udata(o);

	return i->name;
}

static void
setup(void)
{
	static const struct lt_hooks hooks = {
		.granted = hook_granted,
		.next_token = hook_next_token,
		.arg = NULL
	};

	next_tok = 100;
	ngranted = 0;
	last_granted_token = 0;
	doc = NULL;
	text = NULL;
	lt = locktable_new(&hooks, 12345);
	ck_assert_ptr_nonnull(lt);
	ow[0] = NULL;
	for (int i = 1; i < NOWNERS; i++) {
		ow[i] = locktable_owner_new(lt, (uint64_t)i,
		    (void *)(uintptr_t)&infos[i]);
		ck_assert_ptr_nonnull(ow[i]);
	}
	memset(&st, 0, sizeof(st));
	st.start_ms = START_MS;
	st.clients = 11;
	st.connections = 17;
	st.rejected_connections = 2;
	st.requests = 400;
	st.errors = 9;
	st.auth_failures = 3;
	st.output_closes = 1;
}

static void
teardown(void)
{
	if (doc != NULL)
		json_decref(doc);
	free(text);
	doc = NULL;
	text = NULL;
	for (int i = 1; i < NOWNERS; i++)
		locktable_owner_free(lt, ow[i], 0);
	locktable_free(lt);
	lt = NULL;
}

/* ---- driving the table ---- */

struct opts {
	enum lt_mode	mode;
	uint32_t	limit;		/* 0: 1 */
	bool		try;
	bool		has_mw;
	int64_t		mw;
	uint64_t	ttl_ms;
};

#define OPTS(...)	(&(const struct opts){ __VA_ARGS__ })
#define GRANTED		0
#define QUEUED		1

static struct lt_blocker	why;

/* Splits "a b c" into keys; the strings stay valid for the call. */
struct keys {
	char		 buf[512];
	const char	*p[16];
	size_t		 len[16];
	size_t		 n;
};

static void
split(struct keys *k, const char *s)
{
	char	*save = NULL, *t;

	snprintf(k->buf, sizeof(k->buf), "%s", s);
	k->n = 0;
	for (t = strtok_r(k->buf, " ", &save); t != NULL;
	    t = strtok_r(NULL, " ", &save)) {
		ck_assert_uint_lt(k->n, 16);
		k->p[k->n] = t;
		k->len[k->n] = strlen(t);
		k->n++;
	}
}

/* Returns GRANTED, QUEUED or the error code + 10. */
static int
acq(int o, const char *keys, const struct opts *op, uint64_t now,
    uint64_t *token)
{
	struct lt_acquire	a;
	struct keys		k;
	bool			granted = false;
	uint64_t		tok = 0;
	enum kl_err		err;

	split(&k, keys);
	memset(&a, 0, sizeof(a));
	a.keys = k.p;
	a.keylens = k.len;
	a.nkeys = k.n;
	a.mode = op != NULL ? op->mode : LT_EXCLUSIVE;
	a.limit = op != NULL && op->limit != 0 ? op->limit : 1;
	a.try = op != NULL && op->try;
	a.max_waiters = op != NULL && op->has_mw ? op->mw : -1;
	a.ttl_ms = op != NULL ? op->ttl_ms : 0;
	err = locktable_acquire(lt, ow[o], &a, now, &granted, &tok, &why);
	if (err != KL_OK)
		return 10 + (int)err;
	if (token != NULL)
		*token = granted ? tok : 0;
	return granted ? GRANTED : QUEUED;
}

static void
unlock(int o, const char *keys, uint64_t now)
{
	struct keys	k;
	size_t		n = 0, bad = 0;

	split(&k, keys);
	ck_assert_int_eq(locktable_release(lt, ow[o], k.p, k.len, k.n, now,
	    &n, &bad), KL_OK);
}

/* ---- reading the JSON ---- */

static void
set_doc(char *s)
{
	json_error_t	err;

	if (doc != NULL)
		json_decref(doc);
	free(text);
	text = s;
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(strchr(text, '\n') == NULL, "JSON is not one line: %s",
	    text);
	ck_assert_msg(strchr(text, '\r') == NULL, "JSON holds a CR: %s", text);
	doc = json_loads(text, JSON_REJECT_DUPLICATES, &err);
	ck_assert_msg(doc != NULL, "bad JSON (%s) at %d: %s", err.text,
	    err.position, text);
	ck_assert_msg(json_is_object(doc), "not an object: %s", text);
}

static void
stats_at(uint64_t now)
{
	set_doc(stats_to_json(&st, lt, now, TEST_VERSION));
}

static void
info_at(const char *key, uint64_t now)
{
	set_doc(stats_info_json(lt, key, strlen(key), now, owner_name));
}

static json_t *
member(json_t *o, const char *name)
{
	json_t	*v = json_object_get(o, name);

	ck_assert_msg(v != NULL, "no member \"%s\" in %s", name, text);
	return v;
}

/* An integer member >= 0. */
static uint64_t
uint_member(json_t *o, const char *name)
{
	json_t	*v = member(o, name);

	ck_assert_msg(json_is_integer(v), "\"%s\" is not an integer in %s",
	    name, text);
	ck_assert_msg(json_integer_value(v) >= 0, "\"%s\" is negative", name);
	return (uint64_t)json_integer_value(v);
}

static const char *
str_member(json_t *o, const char *name)
{
	json_t	*v = member(o, name);

	ck_assert_msg(json_is_string(v), "\"%s\" is not a string in %s", name,
	    text);
	return json_string_value(v);
}

static json_t *
array_member(json_t *o, const char *name)
{
	json_t	*v = member(o, name);

	ck_assert_msg(json_is_array(v), "\"%s\" is not an array in %s", name,
	    text);
	return v;
}

#define EXPECT_U(o, name, want) do {					\
	uint64_t got_ = uint_member((o), (name));			\
	ck_assert_msg(got_ == (uint64_t)(want), "\"%s\" is %" PRIu64	\
	    ", want %" PRIu64 " in %s", (name), got_, (uint64_t)(want),	\
	    text);							\
} while (0)

/*
 * Checks a histogram's shape: buckets is an array of [upper, count]
 * pairs, uppers rising with the last null, counts per bucket summing to
 * count. Fills counts[] and returns the number of buckets.
 */
static size_t
check_hist(json_t *h, const char *name, uint64_t *counts, uint64_t *uppers,
    size_t max)
{
	json_t		*b, *pair;
	size_t		 n, i;
	uint64_t	 sum = 0, prev = 0;

	ck_assert_msg(json_is_object(h), "\"%s\" is not an object", name);
	b = array_member(h, "buckets");
	n = json_array_size(b);
	ck_assert_msg(n >= 2 && n <= max, "\"%s\" has %zu buckets", name, n);
	json_array_foreach(b, i, pair) {
		json_t	*ub, *cnt;

		ck_assert_msg(json_is_array(pair) && json_array_size(pair) == 2,
		    "%s bucket %zu is not a pair", name, i);
		ub = json_array_get(pair, 0);
		cnt = json_array_get(pair, 1);
		ck_assert_msg(json_is_integer(cnt) &&
		    json_integer_value(cnt) >= 0, "%s bucket %zu count", name,
		    i);
		counts[i] = (uint64_t)json_integer_value(cnt);
		sum += counts[i];
		if (i == n - 1) {
			ck_assert_msg(json_is_null(ub), "%s: the last upper "
			    "bound is not null", name);
			uppers[i] = UINT64_MAX;
		} else {
			ck_assert_msg(json_is_integer(ub) &&
			    json_integer_value(ub) >= 0, "%s bucket %zu upper "
			    "bound", name, i);
			uppers[i] = (uint64_t)json_integer_value(ub);
			ck_assert_msg(i == 0 || uppers[i] > prev, "%s upper "
			    "bounds do not rise at %zu", name, i);
			prev = uppers[i];
		}
	}
	ck_assert_msg(sum == uint_member(h, "count"), "%s bucket counts sum to "
	    "%" PRIu64 ", count is %" PRIu64, name, sum,
	    uint_member(h, "count"));
	uint_member(h, "sum_ms");
	ck_assert_uint_eq(json_object_size(h) >= 3, 1);
	return n;
}

/* The bucket index an ms value belongs to (upper bounds are inclusive). */
static size_t
bucket_of(const uint64_t *uppers, size_t n, uint64_t ms)
{
	for (size_t i = 0; i < n; i++)
		if (ms <= uppers[i])
			return i;
	return n - 1;
}

/* Checks histogram member name holds exactly the values ms[0..nms). */
static void
expect_hist(const char *name, const uint64_t *ms, size_t nms)
{
	uint64_t	counts[64], uppers[64], want[64] = { 0 }, sum = 0;
	size_t		n;
	json_t		*h = member(doc, name);

	n = check_hist(h, name, counts, uppers, 64);
	for (size_t i = 0; i < nms; i++) {
		want[bucket_of(uppers, n, ms[i])]++;
		sum += ms[i];
	}
	EXPECT_U(h, "count", nms);
	EXPECT_U(h, "sum_ms", sum);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(counts[i] == want[i], "%s bucket %zu (upper "
		    "%" PRIu64 ") has %" PRIu64 ", want %" PRIu64 " in %s",
		    name, i, uppers[i], counts[i], want[i], text);
}

static void
expect_counters(uint64_t keys, uint64_t held, uint64_t waiting)
{
	EXPECT_U(doc, "keys", keys);
	EXPECT_U(doc, "held", held);
	EXPECT_U(doc, "waiting", waiting);
}

/* hot_keys[i] has these members and values. */
static void
expect_hot(size_t i, const char *key, uint64_t holders, uint64_t waiters,
    uint64_t max_waiters, uint64_t wait_ms_total)
{
	json_t	*hot = array_member(doc, "hot_keys"), *e;

	ck_assert_msg(i < json_array_size(hot), "hot_keys has no entry %zu: "
	    "%s", i, text);
	e = json_array_get(hot, i);
	ck_assert_msg(json_is_object(e), "hot_keys[%zu] is not an object", i);
	ck_assert_str_eq(str_member(e, "key"), key);
	EXPECT_U(e, "holders", holders);
	EXPECT_U(e, "waiters", waiters);
	EXPECT_U(e, "max_waiters", max_waiters);
	EXPECT_U(e, "wait_ms_total", wait_ms_total);
}

/*
 * The busy scenario at t = 1000..1060:
 *   a: held by 1 (token 100), waiters 2, 3 (exclusive)
 *   b: held shared by 4 and 5 (tokens 101, 102)
 *   c: held by 1 (token 103), waiter 4
 */
static void
busy_table(void)
{
	uint64_t	tok;

	ck_assert_int_eq(acq(1, "a", NULL, 1000, &tok), GRANTED);
	ck_assert_uint_eq(tok, 100);
	ck_assert_int_eq(acq(2, "a", NULL, 1010, NULL), QUEUED);
	ck_assert_int_eq(acq(3, "a", NULL, 1020, NULL), QUEUED);
	ck_assert_int_eq(acq(4, "b", OPTS(.mode = LT_SHARED), 1030, &tok),
	    GRANTED);
	ck_assert_uint_eq(tok, 101);
	ck_assert_int_eq(acq(5, "b", OPTS(.mode = LT_SHARED), 1040, &tok),
	    GRANTED);
	ck_assert_uint_eq(tok, 102);
	ck_assert_int_eq(acq(1, "c", NULL, 1050, &tok), GRANTED);
	ck_assert_uint_eq(tok, 103);
	ck_assert_int_eq(acq(4, "c", NULL, 1060, NULL), QUEUED);
}

/* ---- STATS: members and types ---- */

START_TEST(stats_lists_every_protocol_member_with_its_type)
{
	static const char *const counters[] = {
		"uptime_ms", "clients", "keys", "held", "waiting", "grants",
		"timeouts", "busy", "deadlocks", "conflicts", "releases",
		"expired", "disconnect_releases", "max_waiters", "table_bytes"
	};
	uint64_t	counts[64], uppers[64];

	stats_at(START_MS);
	ck_assert_str_eq(str_member(doc, "version"), TEST_VERSION);
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		uint_member(doc, counters[i]);
	check_hist(member(doc, "wait_ms"), "wait_ms", counts, uppers, 64);
	check_hist(member(doc, "hold_ms"), "hold_ms", counts, uppers, 64);
	array_member(doc, "hot_keys");
}
END_TEST

START_TEST(stats_of_an_empty_table_is_all_zero)
{
	stats_at(START_MS + 5);
	EXPECT_U(doc, "uptime_ms", 5);
	expect_counters(0, 0, 0);
	EXPECT_U(doc, "grants", 0);
	EXPECT_U(doc, "timeouts", 0);
	EXPECT_U(doc, "busy", 0);
	EXPECT_U(doc, "deadlocks", 0);
	EXPECT_U(doc, "conflicts", 0);
	EXPECT_U(doc, "releases", 0);
	EXPECT_U(doc, "expired", 0);
	EXPECT_U(doc, "disconnect_releases", 0);
	EXPECT_U(doc, "max_waiters", 0);
	expect_hist("wait_ms", NULL, 0);
	expect_hist("hold_ms", NULL, 0);
	ck_assert_uint_eq(json_array_size(array_member(doc, "hot_keys")), 0);
}
END_TEST

START_TEST(stats_uptime_counts_from_the_start)
{
	stats_at(START_MS);
	EXPECT_U(doc, "uptime_ms", 0);
	stats_at(START_MS + 123456);
	EXPECT_U(doc, "uptime_ms", 123456);
}
END_TEST

START_TEST(stats_reports_the_servers_own_counters)
{
	stats_at(START_MS);
	EXPECT_U(doc, "clients", 11);
	EXPECT_U(doc, "connections", 17);
	EXPECT_U(doc, "rejected_connections", 2);
	EXPECT_U(doc, "requests", 400);
	EXPECT_U(doc, "errors", 9);
	EXPECT_U(doc, "auth_failures", 3);
	EXPECT_U(doc, "output_closes", 1);
}
END_TEST

START_TEST(stats_is_one_compact_line)
{
	busy_table();
	stats_at(2000);
	ck_assert_ptr_null(strchr(text, '\n'));
	ck_assert_msg(text[0] == '{' && text[strlen(text) - 1] == '}',
	    "not one object: %s", text);
	ck_assert_msg(strstr(text, ": ") == NULL && strstr(text, ", ") == NULL,
	    "not compact: %s", text);
}
END_TEST

/* ---- STATS: gauges and counters ---- */

START_TEST(stats_gauges_count_keys_holds_and_waiting_requests)
{
	busy_table();
	stats_at(1100);
	expect_counters(3, 4, 3);	/* a b c; 1+2+1 holds; 2,3 and 4 */
	EXPECT_U(doc, "grants", 4);
	EXPECT_U(doc, "max_waiters", 2);
}
END_TEST

START_TEST(stats_multi_key_grant_counts_once_but_holds_per_key)
{
	ck_assert_int_eq(acq(1, "x y z", NULL, 1000, NULL), GRANTED);
	stats_at(1000);
	expect_counters(3, 3, 0);
	EXPECT_U(doc, "grants", 1);
	expect_hist("wait_ms", (const uint64_t[]){ 0 }, 1);
}
END_TEST

START_TEST(stats_counts_every_way_a_request_or_hold_ends)
{
	uint64_t	tok;

	busy_table();
	/* release: 1 leaves a after 200 ms; 2 is granted after 190 ms */
	unlock(1, "a", 1200);
	ck_assert_uint_eq(ngranted, 1);
	ck_assert_uint_eq(last_granted_token, 104);
	/* timeout: 3 gives up on a */
	ck_assert(locktable_withdraw(lt, ow[3], 1300, LT_WHY_TIMEOUT));
	/* busy: a already has... no waiter now; 3 queues, 6 is refused */
	ck_assert_int_eq(acq(3, "a", NULL, 1310, NULL), QUEUED);
	ck_assert_int_eq(acq(6, "a", OPTS(.has_mw = true, .mw = 1), 1320,
	    NULL), 10 + KL_ERR_BUSY);
	/* conflict: b is in use with limit 1 */
	ck_assert_int_eq(acq(6, "b", OPTS(.limit = 2), 1330, NULL),
	    10 + KL_ERR_CONFLICT);
	/* deadlock: 1 holds c and waits for d held by 7; 7 asks for c */
	ck_assert_int_eq(acq(7, "d", NULL, 1340, &tok), GRANTED);
	ck_assert_int_eq(acq(1, "d", NULL, 1350, NULL), QUEUED);
	ck_assert_int_eq(acq(7, "c", NULL, 1360, NULL),
	    10 + KL_ERR_DEADLOCK);
	/* try on a key that is not free counts nothing */
	ck_assert_int_eq(acq(8, "d", OPTS(.try = true), 1365, NULL),
	    10 + KL_ERR_LOCKED);
	/* expiry: 9 holds e for 10 ms */
	ck_assert_int_eq(acq(9, "e", OPTS(.ttl_ms = 10), 1370, &tok),
	    GRANTED);
	ck_assert_uint_eq(locktable_expire(lt, 1380), 1);
	/* disconnect: 4 holds b (shared) and waits for c */
	ck_assert_uint_eq(locktable_release_owner(lt, ow[4], 1400,
	    LT_WHY_DISCONNECT), 1);

	stats_at(1400);
	EXPECT_U(doc, "grants", 7);		/* 100..103, 104, d, e */
	EXPECT_U(doc, "releases", 1);
	EXPECT_U(doc, "timeouts", 1);
	EXPECT_U(doc, "busy", 1);
	EXPECT_U(doc, "conflicts", 1);
	EXPECT_U(doc, "deadlocks", 1);
	EXPECT_U(doc, "expired", 1);
	EXPECT_U(doc, "disconnect_releases", 1);
	/* a: 2 holds, 3 waits; b: 5; c: 1; d: 7 holds, 1 waits */
	expect_counters(4, 4, 2);
	expect_hist("wait_ms", (const uint64_t[]){ 0, 0, 0, 0, 190, 0, 0 }, 7);
	expect_hist("hold_ms", (const uint64_t[]){ 200, 10, 370 }, 3);
}
END_TEST

START_TEST(stats_shows_keys_0_once_everybody_left)
{
	busy_table();
	for (int i = 1; i < NOWNERS; i++)
		locktable_release_owner(lt, ow[i], 1500, LT_WHY_DISCONNECT);
	stats_at(1500);
	expect_counters(0, 0, 0);
	ck_assert_uint_eq(json_array_size(array_member(doc, "hot_keys")), 0);
	/* the peak stays */
	EXPECT_U(doc, "max_waiters", 2);
}
END_TEST

START_TEST(stats_json_mirrors_the_lock_table_counters)
{
	const struct lt_counters	*c;

	busy_table();
	unlock(1, "a c", 1500);
	stats_at(1600);
	c = locktable_counters(lt);
	EXPECT_U(doc, "keys", c->keys);
	EXPECT_U(doc, "held", c->held);
	EXPECT_U(doc, "waiting", c->waiting);
	EXPECT_U(doc, "grants", c->grants);
	EXPECT_U(doc, "releases", c->releases);
	EXPECT_U(doc, "max_waiters", c->max_waiters);
	EXPECT_U(member(doc, "wait_ms"), "count", c->wait_ms.count);
	EXPECT_U(member(doc, "wait_ms"), "sum_ms", c->wait_ms.sum_ms);
	EXPECT_U(member(doc, "hold_ms"), "count", c->hold_ms.count);
	EXPECT_U(member(doc, "hold_ms"), "sum_ms", c->hold_ms.sum_ms);
}
END_TEST

/* ---- STATS: histograms ---- */

START_TEST(histogram_buckets_are_upper_count_pairs_ending_in_null)
{
	uint64_t	counts[64], uppers[64];
	size_t		n;

	stats_at(START_MS);
	n = check_hist(member(doc, "wait_ms"), "wait_ms", counts, uppers, 64);
	ck_assert_uint_eq(n, KL_HIST_NBUCKETS);
	for (size_t i = 0; i + 1 < n; i++)
		ck_assert_uint_eq(uppers[i], kl_hist_bound(i));
	n = check_hist(member(doc, "hold_ms"), "hold_ms", counts, uppers, 64);
	ck_assert_uint_eq(n, KL_HIST_NBUCKETS);
}
END_TEST

START_TEST(histogram_counts_per_bucket_not_cumulative)
{
	static const uint64_t	holds[] = { 0, 1, 3, 3, 70, 250, 251,
	    999999 };
	char			key[8];

	/* One hold per value: grant at 1000, release after holds[i] ms. */
	for (size_t i = 0; i < sizeof(holds) / sizeof(holds[0]); i++) {
		snprintf(key, sizeof(key), "h%zu", i);
		ck_assert_int_eq(acq(1, key, NULL, 1000, NULL), GRANTED);
		unlock(1, key, 1000 + holds[i]);
	}
	stats_at(2000000);
	expect_hist("hold_ms", holds, sizeof(holds) / sizeof(holds[0]));
	expect_hist("wait_ms", (const uint64_t[]){ 0, 0, 0, 0, 0, 0, 0, 0 },
	    8);
}
END_TEST

START_TEST(histogram_wait_is_time_from_request_to_grant)
{
	ck_assert_int_eq(acq(1, "w", NULL, 1000, NULL), GRANTED);
	ck_assert_int_eq(acq(2, "w", NULL, 1000, NULL), QUEUED);
	ck_assert_int_eq(acq(3, "w", NULL, 1004, NULL), QUEUED);
	unlock(1, "w", 1030);		/* 2 waited 30 */
	unlock(2, "w", 1100);		/* 3 waited 96 */
	stats_at(1100);
	expect_hist("wait_ms", (const uint64_t[]){ 0, 30, 96 }, 3);
	expect_hist("hold_ms", (const uint64_t[]){ 30, 70 }, 2);
}
END_TEST

/* ---- STATS: hot keys ---- */

START_TEST(hot_keys_lists_most_waiters_first_with_all_members)
{
	busy_table();
	stats_at(1100);
	ck_assert_uint_eq(json_array_size(array_member(doc, "hot_keys")), 3);
	expect_hot(0, "a", 1, 2, 2, 0);
	expect_hot(1, "c", 1, 1, 1, 0);
	expect_hot(2, "b", 2, 0, 0, 0);
}
END_TEST

START_TEST(hot_keys_wait_total_adds_the_waits_of_grants)
{
	busy_table();
	unlock(1, "a", 1200);		/* 2 waited 190 */
	unlock(2, "a", 1250);		/* 3 waited 230 */
	stats_at(1250);
	expect_hot(0, "c", 1, 1, 1, 0);
	ck_assert_uint_eq(json_array_size(array_member(doc, "hot_keys")), 3);
	for (size_t i = 1; i < 3; i++) {
		json_t	*e = json_array_get(member(doc, "hot_keys"), i);

		if (strcmp(str_member(e, "key"), "a") == 0)
			expect_hot(i, "a", 1, 0, 2, 420);
		else
			expect_hot(i, "b", 2, 0, 0, 0);
	}
}
END_TEST

START_TEST(hot_keys_stops_at_10)
{
	char	key[16];

	/* 15 keys; key kN has N waiters for N = 0..14 (owner 1 holds). */
	for (int k = 0; k < 15; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		ck_assert_int_eq(acq(1, key, NULL, 1000, NULL), GRANTED);
	}
	for (int w = 2; w < NOWNERS; w++) {
		/* owner w waits for every key with more than w - 2 waiters
		 * wanted: one multi-key request per owner */
		char	keys[256] = "";

		for (int k = w - 1; k < 15; k++) {
			snprintf(key, sizeof(key), "%sk%d", keys[0] ? " " : "",
			    k);
			strncat(keys, key, sizeof(keys) - strlen(keys) - 1);
		}
		ck_assert_int_eq(acq(w, keys, NULL, 1001, NULL), QUEUED);
	}
	stats_at(1002);
	ck_assert_uint_eq(json_array_size(array_member(doc, "hot_keys")),
	    KL_HOT_KEYS);
	/* k10..k14 have 10 waiters (owners 2..11); k9 has 9 ... */
	for (size_t i = 0; i < KL_HOT_KEYS; i++) {
		json_t		*hot = member(doc, "hot_keys");
		json_t		*e = json_array_get(hot, i);
		uint64_t	 w = uint_member(e, "waiters");
		const char	*k = str_member(e, "key");
		int		 kn = atoi(k + 1);

		ck_assert_uint_eq(w, kn >= 10 ? 10 : (uint64_t)kn);
		if (i > 0) {
			json_t	*p = json_array_get(hot, i - 1);

			ck_assert_uint_le(w, uint_member(p, "waiters"));
		}
	}
}
END_TEST

START_TEST(hot_keys_escapes_key_bytes)
{
	static const char	key[] = "q\"uo\\te/\xc3\xa9";

	ck_assert_int_eq(acq(1, key, NULL, 1000, NULL), GRANTED);
	stats_at(1000);
	expect_hot(0, key, 1, 0, 0, 0);
}
END_TEST

/* ---- INFO ---- */

START_TEST(info_lists_holders_with_client_name_token_mode_held_ms)
{
	json_t	*h, *e;

	busy_table();
	info_at("a", 1100);
	ck_assert_str_eq(str_member(doc, "key"), "a");
	EXPECT_U(doc, "limit", 1);
	h = array_member(doc, "holders");
	ck_assert_uint_eq(json_array_size(h), 1);
	e = json_array_get(h, 0);
	EXPECT_U(e, "client", 1);
	ck_assert_str_eq(str_member(e, "name"), "alpha");
	EXPECT_U(e, "token", 100);
	ck_assert_str_eq(str_member(e, "mode"), "exclusive");
	EXPECT_U(e, "held_ms", 100);
}
END_TEST

START_TEST(info_lists_waiters_in_queue_order)
{
	json_t	*w, *e;

	busy_table();
	info_at("a", 1100);
	w = array_member(doc, "waiters");
	ck_assert_uint_eq(json_array_size(w), 2);
	e = json_array_get(w, 0);
	EXPECT_U(e, "client", 2);
	ck_assert(json_is_null(member(e, "name")));
	ck_assert_str_eq(str_member(e, "mode"), "exclusive");
	EXPECT_U(e, "waited_ms", 90);
	e = json_array_get(w, 1);
	EXPECT_U(e, "client", 3);
	ck_assert_str_eq(str_member(e, "name"), "ga\"mma\\");
	ck_assert_str_eq(str_member(e, "mode"), "exclusive");
	EXPECT_U(e, "waited_ms", 80);
}
END_TEST

START_TEST(info_name_is_null_when_unnamed)
{
	json_t	*e;

	ck_assert_int_eq(acq(2, "k", NULL, 1000, NULL), GRANTED);
	info_at("k", 1000);
	e = json_array_get(array_member(doc, "holders"), 0);
	ck_assert_ptr_nonnull(e);
	ck_assert(json_is_null(member(e, "name")));
	EXPECT_U(e, "held_ms", 0);
}
END_TEST

START_TEST(info_lists_shared_holders_in_grant_order)
{
	json_t	*h, *e;

	busy_table();
	info_at("b", 1100);
	h = array_member(doc, "holders");
	ck_assert_uint_eq(json_array_size(h), 2);
	e = json_array_get(h, 0);
	EXPECT_U(e, "client", 4);
	EXPECT_U(e, "token", 101);
	ck_assert_str_eq(str_member(e, "mode"), "shared");
	EXPECT_U(e, "held_ms", 70);
	e = json_array_get(h, 1);
	EXPECT_U(e, "client", 5);
	ck_assert_str_eq(str_member(e, "name"), "\xce\xb5psilon");
	EXPECT_U(e, "token", 102);
	ck_assert_str_eq(str_member(e, "mode"), "shared");
	EXPECT_U(e, "held_ms", 60);
	ck_assert_uint_eq(json_array_size(array_member(doc, "waiters")), 0);
}
END_TEST

START_TEST(info_shows_a_shared_waiter_behind_an_exclusive_one)
{
	json_t	*w;

	busy_table();
	ck_assert_int_eq(acq(6, "b", NULL, 1070, NULL), QUEUED);
	ck_assert_int_eq(acq(7, "b", OPTS(.mode = LT_SHARED), 1080, NULL),
	    QUEUED);
	info_at("b", 1100);
	w = array_member(doc, "waiters");
	ck_assert_uint_eq(json_array_size(w), 2);
	EXPECT_U(json_array_get(w, 0), "client", 6);
	ck_assert_str_eq(str_member(json_array_get(w, 0), "mode"),
	    "exclusive");
	EXPECT_U(json_array_get(w, 1), "client", 7);
	ck_assert_str_eq(str_member(json_array_get(w, 1), "mode"), "shared");
	EXPECT_U(json_array_get(w, 1), "waited_ms", 20);
}
END_TEST

START_TEST(info_shows_the_semaphore_limit)
{
	ck_assert_int_eq(acq(1, "sem", OPTS(.limit = 3), 1000, NULL),
	    GRANTED);
	ck_assert_int_eq(acq(2, "sem", OPTS(.limit = 3), 1000, NULL),
	    GRANTED);
	info_at("sem", 1001);
	EXPECT_U(doc, "limit", 3);
	ck_assert_uint_eq(json_array_size(array_member(doc, "holders")), 2);
}
END_TEST

START_TEST(info_of_a_key_not_in_the_table_has_no_holders_or_waiters)
{
	info_at("nobody", 1000);
	ck_assert_str_eq(str_member(doc, "key"), "nobody");
	EXPECT_U(doc, "limit", 1);
	ck_assert_uint_eq(json_array_size(array_member(doc, "holders")), 0);
	ck_assert_uint_eq(json_array_size(array_member(doc, "waiters")), 0);
	ck_assert_ptr_nonnull(strstr(text, "\"holders\":[]"));
	ck_assert_ptr_nonnull(strstr(text, "\"waiters\":[]"));
}
END_TEST

START_TEST(info_of_a_released_key_has_no_holders_or_waiters)
{
	ck_assert_int_eq(acq(1, "gone", NULL, 1000, NULL), GRANTED);
	unlock(1, "gone", 1001);
	info_at("gone", 1002);
	ck_assert_uint_eq(json_array_size(array_member(doc, "holders")), 0);
	ck_assert_uint_eq(json_array_size(array_member(doc, "waiters")), 0);
}
END_TEST

START_TEST(info_key_is_escaped_and_round_trips)
{
	static const char	key[] = "a\"b\\c/\xe2\x82\xac";

	ck_assert_int_eq(acq(3, key, NULL, 1000, NULL), GRANTED);
	info_at(key, 1000);
	ck_assert_str_eq(str_member(doc, "key"), key);
	ck_assert_uint_eq(json_array_size(array_member(doc, "holders")), 1);
}
END_TEST

START_TEST(info_lists_stop_at_1000_and_totals_stay_exact)
{
	struct lt_owner		*many[1100];
	struct lt_acquire	 a;
	const char		*keys[] = { "hot" };
	size_t			 lens[] = { 3 };
	uint64_t		 tok;
	bool			 granted;
	json_t			*w;

	memset(&a, 0, sizeof(a));
	a.keys = keys;
	a.keylens = lens;
	a.nkeys = 1;
	a.limit = 1;
	a.max_waiters = -1;
	for (size_t i = 0; i < 1100; i++) {
		many[i] = locktable_owner_new(lt, 100 + i,
		    (void *)(uintptr_t)&infos[0]);
		ck_assert_ptr_nonnull(many[i]);
		ck_assert_int_eq(locktable_acquire(lt, many[i], &a, START_MS,
		    &granted, &tok, NULL), KL_OK);
		ck_assert(granted == (i == 0));
	}
	info_at("hot", START_MS + 5);
	w = array_member(doc, "waiters");
	ck_assert_uint_eq(json_array_size(w), KL_INFO_LIST_MAX);
	EXPECT_U(json_array_get(w, 0), "client", 101);
	EXPECT_U(doc, "waiters_total", 1099);
	EXPECT_U(doc, "holders_total", 1);
	ck_assert_uint_eq(json_array_size(array_member(doc, "holders")), 1);
	for (size_t i = 0; i < 1100; i++)
		locktable_owner_free(lt, many[i], START_MS + 6);
	ck_assert_uint_eq(locktable_counters(lt)->keys, 0);
}
END_TEST

START_TEST(info_is_one_line)
{
	busy_table();
	info_at("a", 1100);
	ck_assert_ptr_null(strchr(text, '\n'));
	ck_assert_msg(text[0] == '{' && text[strlen(text) - 1] == '}',
	    "not one object: %s", text);
}
END_TEST

START_TEST(info_tokens_are_json_integers)
{
	json_t	*e;

	next_tok = (UINT64_C(1) << 62) + 7;
	ck_assert_int_eq(acq(1, "big", NULL, 1000, NULL), GRANTED);
	info_at("big", 1000);
	e = json_array_get(array_member(doc, "holders"), 0);
	EXPECT_U(e, "token", (UINT64_C(1) << 62) + 7);
}
END_TEST

static Suite *
stats_suite(void)
{
	Suite	*s = suite_create("stats");
	TCase	*tc;

	tc = tcase_create("members");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, stats_lists_every_protocol_member_with_its_type);
	tcase_add_test(tc, stats_of_an_empty_table_is_all_zero);
	tcase_add_test(tc, stats_uptime_counts_from_the_start);
	tcase_add_test(tc, stats_reports_the_servers_own_counters);
	tcase_add_test(tc, stats_is_one_compact_line);
	suite_add_tcase(s, tc);

	tc = tcase_create("counters");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, stats_gauges_count_keys_holds_and_waiting_requests);
	tcase_add_test(tc, stats_multi_key_grant_counts_once_but_holds_per_key);
	tcase_add_test(tc, stats_counts_every_way_a_request_or_hold_ends);
	tcase_add_test(tc, stats_shows_keys_0_once_everybody_left);
	tcase_add_test(tc, stats_json_mirrors_the_lock_table_counters);
	suite_add_tcase(s, tc);

	tc = tcase_create("histograms");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc,
	    histogram_buckets_are_upper_count_pairs_ending_in_null);
	tcase_add_test(tc, histogram_counts_per_bucket_not_cumulative);
	tcase_add_test(tc, histogram_wait_is_time_from_request_to_grant);
	suite_add_tcase(s, tc);

	tc = tcase_create("hot_keys");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, hot_keys_lists_most_waiters_first_with_all_members);
	tcase_add_test(tc, hot_keys_wait_total_adds_the_waits_of_grants);
	tcase_add_test(tc, hot_keys_stops_at_10);
	tcase_add_test(tc, hot_keys_escapes_key_bytes);
	suite_add_tcase(s, tc);

	tc = tcase_create("info");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc,
	    info_lists_holders_with_client_name_token_mode_held_ms);
	tcase_add_test(tc, info_lists_waiters_in_queue_order);
	tcase_add_test(tc, info_name_is_null_when_unnamed);
	tcase_add_test(tc, info_lists_shared_holders_in_grant_order);
	tcase_add_test(tc, info_shows_a_shared_waiter_behind_an_exclusive_one);
	tcase_add_test(tc, info_shows_the_semaphore_limit);
	tcase_add_test(tc,
	    info_of_a_key_not_in_the_table_has_no_holders_or_waiters);
	tcase_add_test(tc, info_of_a_released_key_has_no_holders_or_waiters);
	tcase_add_test(tc, info_key_is_escaped_and_round_trips);
	tcase_add_test(tc, info_is_one_line);
	tcase_add_test(tc, info_lists_stop_at_1000_and_totals_stay_exact);
	tcase_add_test(tc, info_tokens_are_json_integers);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr = srunner_create(stats_suite());
	int	 nfailed;

	srunner_run_all(sr, CK_NORMAL);
	nfailed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfailed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
