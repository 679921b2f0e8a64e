/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of the STATS and INFO JSON (stats.h, keylockd-protocol(7) "STATS"
 * and "Commands"): a real lock table is driven with explicit now_ms values,
 * then stats_to_json and stats_info_json are parsed with jansson and every
 * member the protocol lists is checked for its type and value. Both are one
 * line: they travel as "OK {json}". The tests live in stats_json.c and
 * stats_info.c; this file holds the fixture and the helpers they share (cs_
 * prefix, declared in check_stats.h), the suite and main.
 */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "check_main.h"
#include "check_stats.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"
#include "stats.h"

const struct owner_info cs_infos[NOWNERS] = {
	{ NULL }, { "alpha" }, { NULL }, { "ga\"mma\\" }, { NULL },
	{ "\xce\xb5psilon" }, { NULL }, { "eta" }, { NULL }, { "iota" },
	{ NULL }, { "lambda" }
};

struct locktable	*cs_lt;
struct lt_owner		*cs_ow[NOWNERS];
static struct stats	 st;
uint64_t		 cs_next_tok;
uint64_t		 cs_last_granted_token;
uint64_t		 cs_ngranted;
json_t			*cs_doc;	/* the last parsed JSON */
char			*cs_text;	/* and its text */

static uint64_t
hook_next_token(void *arg)
{
	(void)arg;
	return cs_next_tok++;
}

static void
hook_granted(void *arg, struct lt_owner *o, uint64_t token,
    uint64_t waited_ms)
{
	(void)arg;
	(void)o;
	(void)waited_ms;
	cs_last_granted_token = token;
	cs_ngranted++;
}

static const char *
owner_name(const struct lt_owner *o, int64_t *detached_ms, uint64_t *client,
    uint32_t *channel, uint64_t *frontend)
{
	(void)detached_ms;	/* the stats module's defaults stay */
	(void)client;
	(void)channel;
	(void)frontend;
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

	cs_next_tok = 100;
	cs_ngranted = 0;
	cs_last_granted_token = 0;
	cs_doc = NULL;
	cs_text = NULL;
	cs_lt = locktable_new(&hooks, 12345);
	ck_assert_ptr_nonnull(cs_lt);
	cs_ow[0] = NULL;
	for (int i = 1; i < NOWNERS; i++) {
		cs_ow[i] = locktable_owner_new(cs_lt, (uint64_t)i,
		    (void *)(uintptr_t)&cs_infos[i]);
		ck_assert_ptr_nonnull(cs_ow[i]);
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
	st.be.txns = 70;
	st.be.txn_failures = 4;
	st.be.rebuilds = 5;
	st.be.losses = 6;
	st.be.bad_entries = 7;
	st.be.reaped = 8;
}

static void
teardown(void)
{
	if (cs_doc != NULL)
		json_decref(cs_doc);
	free(cs_text);
	cs_doc = NULL;
	cs_text = NULL;
	for (int i = 1; i < NOWNERS; i++)
		locktable_owner_free(cs_lt, cs_ow[i], 0);
	locktable_free(cs_lt);
	cs_lt = NULL;
}

/* ---- driving the table ---- */

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
int
cs_acq(int o, const char *keys, const struct opts *op, uint64_t now,
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
	err = locktable_acquire(cs_lt, cs_ow[o], &a, now, &granted, &tok, &why);
	if (err != KL_OK)
		return 10 + (int)err;
	if (token != NULL)
		*token = granted ? tok : 0;
	return granted ? GRANTED : QUEUED;
}

void
cs_unlock(int o, const char *keys, uint64_t now)
{
	struct keys	k;
	size_t		n = 0, bad = 0;

	split(&k, keys);
	ck_assert_int_eq(locktable_release(cs_lt, cs_ow[o], k.p, k.len, k.n,
	    now,
	    &n, &bad), KL_OK);
}

/* ---- reading the JSON ---- */

static void
set_doc(char *s)
{
	json_error_t	err;

	if (cs_doc != NULL)
		json_decref(cs_doc);
	free(cs_text);
	cs_text = s;
	ck_assert_ptr_nonnull(cs_text);
	ck_assert_msg(strchr(cs_text, '\n') == NULL, "JSON is not one line: %s",
	    cs_text);
	ck_assert_msg(strchr(cs_text, '\r') == NULL, "JSON holds a CR: %s",
	    cs_text);
	cs_doc = json_loads(cs_text, JSON_REJECT_DUPLICATES, &err);
	ck_assert_msg(cs_doc != NULL, "bad JSON (%s) at %d: %s", err.text,
	    err.position, cs_text);
	ck_assert_msg(json_is_object(cs_doc), "not an object: %s", cs_text);
}

void
cs_stats_at(uint64_t now)
{
	set_doc(stats_to_json(&st, cs_lt, now, TEST_VERSION, "local"));
}

void
cs_info_at(const char *key, uint64_t now)
{
	set_doc(stats_info_json(cs_lt, key, strlen(key), now, owner_name,
	    KL_INFO_LIST_MAX));
}

json_t *
cs_member(json_t *o, const char *name)
{
	json_t	*v = json_object_get(o, name);

	ck_assert_msg(v != NULL, "no member \"%s\" in %s", name, cs_text);
	return v;
}

/* An integer member >= 0. */
uint64_t
cs_uint_member(json_t *o, const char *name)
{
	json_t	*v = cs_member(o, name);

	ck_assert_msg(json_is_integer(v), "\"%s\" is not an integer in %s",
	    name, cs_text);
	ck_assert_msg(json_integer_value(v) >= 0, "\"%s\" is negative", name);
	return (uint64_t)json_integer_value(v);
}

const char *
cs_str_member(json_t *o, const char *name)
{
	json_t	*v = cs_member(o, name);

	ck_assert_msg(json_is_string(v), "\"%s\" is not a string in %s", name,
	    cs_text);
	return json_string_value(v);
}

json_t *
cs_array_member(json_t *o, const char *name)
{
	json_t	*v = cs_member(o, name);

	ck_assert_msg(json_is_array(v), "\"%s\" is not an array in %s", name,
	    cs_text);
	return v;
}

/*
 * Checks a histogram's shape: buckets is an array of [upper, count]
 * pairs, uppers rising with the last null, counts per bucket summing to
 * count. Fills counts[] and returns the number of buckets.
 */
size_t
cs_check_hist(json_t *h, const char *name, uint64_t *counts, uint64_t *uppers,
    size_t max)
{
	json_t		*b, *pair;
	size_t		 n, i;
	uint64_t	 sum = 0, prev = 0;

	ck_assert_msg(json_is_object(h), "\"%s\" is not an object", name);
	b = cs_array_member(h, "buckets");
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
	ck_assert_msg(sum == cs_uint_member(h, "count"),
	    "%s bucket counts sum to "
	    "%" PRIu64 ", count is %" PRIu64, name, sum,
	    cs_uint_member(h, "count"));
	cs_uint_member(h, "sum_ms");
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
void
cs_expect_hist(const char *name, const uint64_t *ms, size_t nms)
{
	uint64_t	counts[64], uppers[64], want[64] = { 0 }, sum = 0;
	size_t		n;
	json_t		*h = cs_member(cs_doc, name);

	n = cs_check_hist(h, name, counts, uppers, 64);
	for (size_t i = 0; i < nms; i++) {
		want[bucket_of(uppers, n, ms[i])]++;
		sum += ms[i];
	}
	EXPECT_U(h, "count", nms);
	EXPECT_U(h, "sum_ms", sum);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(counts[i] == want[i], "%s bucket %zu (upper "
		    "%" PRIu64 ") has %" PRIu64 ", want %" PRIu64 " in %s",
		    name, i, uppers[i], counts[i], want[i], cs_text);
}

void
cs_expect_counters(uint64_t keys, uint64_t held, uint64_t waiting)
{
	EXPECT_U(cs_doc, "keys", keys);
	EXPECT_U(cs_doc, "held", held);
	EXPECT_U(cs_doc, "waiting", waiting);
}

/* hot_keys[i] has these members and values. */
void
cs_expect_hot(size_t i, const char *key, uint64_t holders, uint64_t waiters,
    uint64_t max_waiters, uint64_t wait_ms_total)
{
	json_t	*hot = cs_array_member(cs_doc, "hot_keys"), *e;

	ck_assert_msg(i < json_array_size(hot), "hot_keys has no entry %zu: "
	    "%s", i, cs_text);
	e = json_array_get(hot, i);
	ck_assert_msg(json_is_object(e), "hot_keys[%zu] is not an object", i);
	ck_assert_str_eq(cs_str_member(e, "key"), key);
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
void
cs_busy_table(void)
{
	uint64_t	tok;

	ck_assert_int_eq(cs_acq(1, "a", NULL, 1000, &tok), GRANTED);
	ck_assert_uint_eq(tok, 100);
	ck_assert_int_eq(cs_acq(2, "a", NULL, 1010, NULL), QUEUED);
	ck_assert_int_eq(cs_acq(3, "a", NULL, 1020, NULL), QUEUED);
	ck_assert_int_eq(cs_acq(4, "b", OPTS(.mode = LT_SHARED), 1030, &tok),
	    GRANTED);
	ck_assert_uint_eq(tok, 101);
	ck_assert_int_eq(cs_acq(5, "b", OPTS(.mode = LT_SHARED), 1040, &tok),
	    GRANTED);
	ck_assert_uint_eq(tok, 102);
	ck_assert_int_eq(cs_acq(1, "c", NULL, 1050, &tok), GRANTED);
	ck_assert_uint_eq(tok, 103);
	ck_assert_int_eq(cs_acq(4, "c", NULL, 1060, NULL), QUEUED);
}

TCase *
cs_tcase(Suite *s, const char *name)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *
stats_suite(void)
{
	Suite	*s = suite_create("stats");

	cs_add_stats(s);
	cs_add_info(s);
	return s;
}

const struct check_program check_program = {
	.name = "check_stats",
	.suites = { stats_suite, NULL }
};
