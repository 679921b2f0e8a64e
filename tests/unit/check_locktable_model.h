/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_locktable_model program's files share: the model's keys,
 * owners and requests, the state of one sequence (lm: the table, the
 * model, the recorded grants, the trace position), the reference model
 * (m_, locktable_model_ref.c), the checks against the table
 * (locktable_model_compare.c), the operations (locktable_model_ops.c) and
 * the driver's trace, failure report and random numbers
 * (check_locktable_model.c).
 */
#ifndef CHECK_LOCKTABLE_MODEL_H
#define CHECK_LOCKTABLE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

extern const char *const lm_keyname[M_NKEYS];
/* The limit a request for a key usually asks: keys 4 and 5 are semaphores. */
extern const uint32_t	 lm_keylimit[M_NKEYS];

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

struct lm_state {
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
};

extern struct lm_state	 lm;

/* Prints the sequence so far, the step and the model, and fails. */
void		 lm_mfail(const char *fmt, ...)
		    __attribute__((format(printf, 1, 2), noreturn));

#define MCK(cond, ...) do {						\
	if (!(cond))							\
		lm_mfail(__VA_ARGS__);					\
} while (0)

/* Appends to the trace lm_mfail() prints. */
void		 lm_tracef(const char *fmt, ...)
		    __attribute__((format(printf, 1, 2)));
/* Seeded numbers: 0..n-1, and true pct times in 100. */
int		 lm_rnd(int n);
bool		 lm_chance(int pct);

/* The reference model (locktable_model_ref.c). */
bool		 m_exists(int k);
int		 m_holder_index(int k, int o);
int		 m_nholds(int o);
/* keylockd-protocol(7), SEMANTICS: may this request join the key's holders? */
bool		 m_compatible(int k, enum lt_mode mode);
/* Does holder i of key k stand in the way of a request in mode? */
bool		 m_conflicts(int k, int i, enum lt_mode mode);
void		 m_gc(void);
/* Ends hold i of key k, counting it in *counter. */
void		 m_end_hold(int k, int i, uint64_t *counter);
void		 m_unqueue(int o);
void		 m_grant(int o, const struct m_req *r, uint64_t token);
/* Grants every queued request that heads all its keys' queues and fits
 * their holders, until nothing changes. */
void		 m_grant_loop(void);
void		 m_enqueue(int o, const struct m_req *r);
/* Least fixpoint of the owners that can proceed, starting from those that
 * wait for nothing; hyp_o waits with the new request hyp (< 0: nobody). */
void		 m_progress(int hyp_o, const struct m_req *hyp, bool *inp);
bool		 m_would_deadlock(int o, const struct m_req *r);

/* Checks against the table (locktable_model_compare.c). */
int		 lm_key_index(const char *key, size_t len);
/* why names key k (in mask) and, as holder, the longest-standing holder
 * that conflicts with mode, or NULL if none does. */
void		 lm_check_blocker(const char *what,
		    const struct lt_blocker *why, unsigned mask,
		    enum lt_mode mode);
/* Keys of r that keep it from being granted now (at its queue place). */
unsigned	 lm_blocking_keys(int o, const struct m_req *r, bool at_tail);
/* The deferred grants the table reported must be those the model made. */
void		 lm_match_grants(void);
/* Every key, owner and counter of the table against the model. */
void		 lm_compare_all(void);

/* Operations (locktable_model_ops.c). */
/* Withdraws o's wait and ends its holds, as release_owner and owner_free.
 * A shutdown bumps no counter; its holds still end in hold_ms. */
size_t		 m_release_owner(int o, enum lt_why why);
/* The earliest ttl expiry of the model, or UINT64_MAX. */
uint64_t	 m_next_expiry(void);
void		 lm_op_expire(void);
/* One step: time moves on, due holds expire, one random operation. */
void		 lm_step(void);

#endif /* CHECK_LOCKTABLE_MODEL_H */
