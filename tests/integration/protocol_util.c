/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Helpers shared by the protocol_*_test programs (protocol_util.h): they
 * read INFO and STATS replies and the text of errors that name a blocker,
 * and assert through Check, so they are for a test's main thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "protocol_util.h"

char *
pu_repeat(const char *unit, size_t n)
{
	size_t	 ul = strlen(unit);
	char	*s = malloc(ul * n + 1);

	ck_assert_ptr_nonnull(s);
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * ul, unit, ul);
	s[ul * n] = '\0';
	return s;
}

/* Whether line holds the decimal number v as a word (not inside a longer
 * number). */
static bool
has_number(const char *line, json_int_t v)
{
	char		 num[32];
	const char	*p = line;
	size_t		 n;

	snprintf(num, sizeof(num), "%lld", (long long)v);
	n = strlen(num);
	while ((p = strstr(p, num)) != NULL) {
		bool before = p == line || p[-1] < '0' || p[-1] > '9';
		bool after = p[n] < '0' || p[n] > '9';

		if (before && after)
			return true;
		p++;
	}
	return false;
}

json_t *
pu_jarr_at(json_t *o, const char *member, size_t i)
{
	json_t *a = json_object_get(o, member);

	ck_assert_msg(json_is_array(a), "\"%s\" is not an array", member);
	ck_assert_msg(i < json_array_size(a), "\"%s\" has %zu elements, want "
	    "more than %zu", member, json_array_size(a), i);
	return json_array_get(a, i);
}

json_int_t
pu_holder_id(struct kt_conn *o, const char *key)
{
	json_t		*info = kt_wait_queue(o, key, 1, 0);
	json_int_t	 id = kt_jint(pu_jarr_at(info, "holders", 0), "client");

	json_decref(info);
	return id;
}

void
pu_check_blocker_text(const char *line, const char *key, json_int_t id,
    const char *name)
{
	ck_assert_msg(strstr(line, key) != NULL, "\"%s\" does not name the "
	    "key %s", line, key);
	ck_assert_msg(has_number(line, id), "\"%s\" does not name the "
	    "blocking client id %lld", line, (long long)id);
	if (name != NULL)
		ck_assert_msg(strstr(line, name) != NULL, "\"%s\" does not "
		    "name the blocker's name %s", line, name);
}

int64_t
pu_elapsed_since(uint64_t t0)
{
	return (int64_t)(kt_now_ms() - t0);
}

void
pu_sleep_until(uint64_t t0, int64_t ms)
{
	int64_t left = ms - pu_elapsed_since(t0);

	if (left > 0)
		kt_sleep_ms((uint64_t)left);
}

static void
check_hist(json_t *stats, const char *member)
{
	json_t		*h = json_object_get(stats, member), *b;
	json_int_t	 sum = 0, prev = -1;
	size_t		 n;

	ck_assert_msg(json_is_object(h), "\"%s\" is not an object", member);
	b = json_object_get(h, "buckets");
	ck_assert_msg(json_is_array(b) && json_array_size(b) >= 2,
	    "\"%s\".buckets is not an array of buckets", member);
	n = json_array_size(b);
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(b, i);
		json_t *up = json_array_get(e, 0), *cnt = json_array_get(e, 1);

		ck_assert_msg(json_is_array(e) && json_array_size(e) == 2,
		    "\"%s\" bucket %zu is not [upper, count]", member, i);
		if (i == n - 1)
			ck_assert_msg(json_is_null(up), "\"%s\": last bucket's "
			    "upper bound must be null", member);
		else {
			ck_assert_msg(json_is_integer(up), "\"%s\" bucket %zu: "
			    "upper bound is not an integer", member, i);
			ck_assert_msg(json_integer_value(up) > prev, "\"%s\" "
			    "bucket bounds must increase", member);
			prev = json_integer_value(up);
		}
		ck_assert_msg(json_is_integer(cnt) &&
		    json_integer_value(cnt) >= 0, "\"%s\" bucket %zu: count",
		    member, i);
		sum += json_integer_value(cnt);
	}
	ck_assert_msg(kt_jint(h, "count") == sum, "\"%s\".count %lld is not "
	    "the sum of the bucket counts %lld (counts are per bucket)",
	    member, (long long)kt_jint(h, "count"), (long long)sum);
	ck_assert_int_ge(kt_jint(h, "sum_ms"), 0);
}

const char *const pu_stats_ints[] = {
	"uptime_ms", "clients", "keys", "held", "waiting", "grants",
	"timeouts", "busy", "deadlocks", "conflicts", "releases", "expired",
	"disconnect_releases", "max_waiters", NULL
};

void
pu_check_stats_shape(json_t *s)
{
	json_t *hk = json_object_get(s, "hot_keys");

	ck_assert_msg(json_is_string(json_object_get(s, "version")) &&
	    json_string_length(json_object_get(s, "version")) > 0,
	    "\"version\" must be a non-empty string");
	for (int i = 0; pu_stats_ints[i] != NULL; i++)
		ck_assert_int_ge(kt_jint(s, pu_stats_ints[i]), 0);
	check_hist(s, "wait_ms");
	check_hist(s, "hold_ms");
	ck_assert_msg(json_is_array(hk) && json_array_size(hk) <= 10,
	    "\"hot_keys\" must be an array of at most 10");
	for (size_t i = 0; i < json_array_size(hk); i++) {
		json_t *k = json_array_get(hk, i);

		ck_assert_msg(json_is_string(json_object_get(k, "key")),
		    "hot_keys[%zu].key", i);
		kt_jint(k, "holders");
		kt_jint(k, "waiters");
		kt_jint(k, "max_waiters");
		kt_jint(k, "wait_ms_total");
		if (i > 0)
			ck_assert_msg(kt_jint(k, "waiters") <= kt_jint(
			    json_array_get(hk, i - 1), "waiters"),
			    "hot_keys not ordered by waiters");
	}
}
