/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_locktable program's theme files share: the table and its
 * owners (set up afresh for every test by the fixture in check_locktable.c),
 * the grants the hook recorded, the helpers that drive the table and check
 * it after every step, and one function per theme that adds its TCases to
 * the suite, in the order main() runs them.
 */
#ifndef CHECK_LOCKTABLE_H
#define CHECK_LOCKTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "kl.h"
#include "locktable.h"

#define nitems(a)	(sizeof(a) / sizeof((a)[0]))

#define NOWNERS		9	/* owners 1..8; cl_ow[i] has id i */
#define MAXGRANTS	64
#define GRANTED		(-1)	/* cl_acq(): granted at once */
#define QUEUED		(-2)	/* cl_acq(): queued */

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

struct grant_rec {
	uint64_t	id;
	uint64_t	token;
	uint64_t	waited_ms;
};

extern struct locktable	*cl_lt;
extern struct lt_owner	*cl_ow[NOWNERS];
extern int		 cl_udata[NOWNERS];
extern uint64_t		 cl_next_tok;
extern uint64_t		 cl_last_tok;
extern bool		 cl_tok_broken;
extern struct grant_rec	 cl_grants[MAXGRANTS];
extern size_t		 cl_ngrants;
extern bool		 cl_grants_overflow;

/* What the last cl_acq() left behind. */
extern uint64_t		 cl_res_token;
extern struct lt_blocker cl_res_why;
extern char		 cl_res_key[KL_KEY_MAX + 1];
extern size_t		 cl_res_n;
extern size_t		 cl_res_bad;

/* The default request: exclusive, limit 1, no ttl. */
extern const struct req	 cl_plain;
/* cl_acq() and cl_unlock() calls so far: every other one runs with the
 * table's short paths off (locktable_set_short_paths()), unless
 * cl_short_paths is 0 (off) or 1 (on) rather than -1. */
extern unsigned		 cl_short_calls;
extern int		 cl_short_paths;

#define CHECK_TABLE() do {						\
	const char *e_ = locktable_check(cl_lt);			\
	ck_assert_msg(e_ == NULL, "locktable_check: %s", e_);		\
	ck_assert_msg(!cl_tok_broken, "tokens not strictly increasing"); \
	ck_assert_msg(!cl_grants_overflow, "too many grants recorded");	\
} while (0)

/* A TCase with the fixture, added to s. */
TCase		*cl_tcase(Suite *s, const char *name);

/* LOCK/TRYLOCK by owner i: GRANTED, QUEUED or the error. keys are
 * separated by spaces. */
int		 cl_acq(int i, const char *keys, const struct req *r,
		    uint64_t now);
int		 cl_lock(int i, const char *keys, uint64_t now);
int		 cl_lock_shared(int i, const char *keys, uint64_t now);
int		 cl_lock_limit(int i, const char *keys, uint32_t limit,
		    uint64_t now);
int		 cl_trylock(int i, const char *keys, uint64_t now);
/* UNLOCK and REFRESH by owner i: the error; cl_res_n, cl_res_bad filled. */
int		 cl_unlock(int i, const char *keys, uint64_t now);
int		 cl_refresh(int i, const char *keys, uint64_t ttl,
		    uint64_t now);
size_t		 cl_release_owner(int i, enum lt_why why, uint64_t now);
bool		 cl_withdraw(int i, enum lt_why why, uint64_t now);
size_t		 cl_expire(uint64_t now);
const struct lt_key *cl_find(const char *key);

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

/* Walk callbacks that record into a struct walk_buf. */
bool		 cl_walk_holder(void *arg, const struct lt_holder_view *v);
bool		 cl_walk_waiter(void *arg, const struct lt_waiter_view *v);
/* The state of key as "holders | waiters" by owner id in walk order, an
 * "s" after shared ones: "1s 2s | 3 4s". "-" when the key has no entry. */
const char	*cl_key_state(const char *key, uint64_t now,
		    struct walk_buf *wb);

#define EXPECT_KEY(key, want) do {					\
	struct walk_buf wb_;						\
	ck_assert_str_eq(cl_key_state((key), 0, &wb_), (want));	\
} while (0)

/* The deferred grants since the last call, as sorted owner ids. */
const char	*cl_took_grants(void);
#define EXPECT_GRANTS(want) ck_assert_str_eq(cl_took_grants(), (want))
/* Waited ms of the recorded deferred grant to owner id (not consumed). */
uint64_t	 cl_grant_waited(uint64_t id);

const struct lt_counters *cl_ctr(void);
void		 cl_expect_gauges(uint64_t keys, uint64_t held,
		    uint64_t waiting);

/* fifo, shared, semaphore, multikey (locktable_queue.c) */
void		 cl_add_queue(Suite *s);
/* errors, deadlock (locktable_errors.c) */
void		 cl_add_errors(Suite *s);
/* ttl, cleanup (locktable_lifetime.c) */
void		 cl_add_lifetime(Suite *s);
/* counters, views (locktable_views.c) */
void		 cl_add_views(Suite *s);
/* the keyed hash, and views that must not show it (locktable_hash.c) */
void		 cl_add_hash(Suite *s);
/* locktable_short.c */
void		 cl_add_short(Suite *s);

#endif /* CHECK_LOCKTABLE_H */
