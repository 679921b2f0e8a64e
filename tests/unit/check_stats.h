/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_stats program's theme files share: the lock table, its
 * owners and the struct stats the fixture in check_stats.c sets up for
 * every test, the helpers that drive the table, the last parsed JSON and
 * the readers of its members, and one function per theme that adds its
 * TCases to the suite, in the order main() runs them.
 */
#ifndef CHECK_STATS_H
#define CHECK_STATS_H

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <check.h>
#include <jansson.h>

#include "locktable.h"

#define NOWNERS		12	/* cs_ow[1..11]; cs_ow[i] has id i */
#define START_MS	1000
#define TEST_VERSION		"9.8.7-test"

struct owner_info {
	const char	*name;	/* NULL: no NAME given */
};

/* Odd owners are named, even ones are not; names need JSON escaping. */
extern const struct owner_info cs_infos[NOWNERS];

extern struct locktable	*cs_lt;
extern struct lt_owner	*cs_ow[NOWNERS];
extern uint64_t		 cs_next_tok;
extern uint64_t		 cs_last_granted_token;
extern uint64_t		 cs_ngranted;
extern json_t		*cs_doc;	/* the last parsed JSON */
extern char		*cs_text;	/* and its text */

/* A TCase with the fixture, added to s. */
TCase		*cs_tcase(Suite *s, const char *name);

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

/* Acquires the keys "a b c" for owner o: GRANTED, QUEUED or the error
 * code + 10; *token gets the token of a grant (may be NULL). */
int		 cs_acq(int o, const char *keys, const struct opts *op,
		    uint64_t now, uint64_t *token);
void		 cs_unlock(int o, const char *keys, uint64_t now);

/* STATS and INFO of key at now, parsed into cs_doc (text in cs_text). */
void		 cs_stats_at(uint64_t now);
void		 cs_info_at(const char *key, uint64_t now);
/* Members of o that must exist, of the type named. */
json_t		*cs_member(json_t *o, const char *name);
/* An integer member >= 0. */
uint64_t	 cs_uint_member(json_t *o, const char *name);
const char	*cs_str_member(json_t *o, const char *name);
json_t		*cs_array_member(json_t *o, const char *name);

#define EXPECT_U(o, name, want) do {					\
	uint64_t got_ = cs_uint_member((o), (name));			\
	ck_assert_msg(got_ == (uint64_t)(want), "\"%s\" is %" PRIu64	\
	    ", want %" PRIu64 " in %s", (name), got_, (uint64_t)(want),	\
	    cs_text);							\
} while (0)

/* Checks a histogram's shape: buckets is an array of [upper, count]
 * pairs, uppers rising with the last null, counts per bucket summing to
 * count. Fills counts[] and returns the number of buckets. */
size_t		 cs_check_hist(json_t *h, const char *name, uint64_t *counts,
		    uint64_t *uppers, size_t max);
/* Checks histogram member name holds exactly the values ms[0..nms). */
void		 cs_expect_hist(const char *name, const uint64_t *ms,
		    size_t nms);
void		 cs_expect_counters(uint64_t keys, uint64_t held,
		    uint64_t waiting);
/* hot_keys[i] has these members and values. */
void		 cs_expect_hot(size_t i, const char *key, uint64_t holders,
		    uint64_t waiters, uint64_t max_waiters,
		    uint64_t wait_ms_total);
/*
 * The busy scenario at t = 1000..1060:
 *   a: held by 1 (token 100), waiters 2, 3 (exclusive)
 *   b: held shared by 4 and 5 (tokens 101, 102)
 *   c: held by 1 (token 103), waiter 4
 */
void		 cs_busy_table(void);

/* members, counters, histograms, hot_keys (stats_json.c) */
void		 cs_add_stats(Suite *s);
/* info (stats_info.c) */
void		 cs_add_info(Suite *s);

#endif /* CHECK_STATS_H */
