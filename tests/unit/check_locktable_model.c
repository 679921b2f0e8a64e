/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Randomized model test of the lock table: thousands of seeded sequences of
 * acquire, release, disconnect, timeout, expiry and refresh run against
 * locktable.c and against a small reference model written from
 * keylockd-protocol(7) ("Semantics") with plain arrays, a naive grant loop and
 * a naive fixpoint deadlock check. After every step the replies, the deferred
 * grants, every key's holders and waiters, the owners and the counters must
 * agree, and locktable_check() must find nothing. The seed is fixed, so a
 * failure repeats; it prints the seed, the step and the whole sequence so far.
 *
 * Rerun one sequence: LT_MODEL_SEED=s LT_MODEL_FIRST=n LT_MODEL_SEQS=1.
 *
 * The model lives in locktable_model_ref.c, the checks against the table
 * in locktable_model_compare.c and the operations in locktable_model_ops.c
 * (declared in check_locktable_model.h); this file holds the state, the
 * trace, the seeded numbers, the sequence driver, the test and main.
 */
#include <check.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_locktable_model.h"
#include "check_main.h"
#include "hist.h"
#include "kl.h"
#include "locktable.h"

const char *const lm_keyname[M_NKEYS] = {
	"k0", "k1", "k2", "k3", "sem2", "sem3"
};
const uint32_t lm_keylimit[M_NKEYS] = { 1, 1, 1, 1, 2, 3 };

static const char *const outcome_name[O__COUNT] = {
	"granted", "queued", "limit", "held", "conflict", "busy",
	"deadlock", "locked", "notheld", "deferred", "expired", "timeout"
};

struct lm_state		 lm;

static char		 trace[M_TRACE];

void
lm_tracef(const char *fmt, ...)
{
	va_list	ap;
	int	n;

	if (lm.tracelen >= M_TRACE - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(trace + lm.tracelen, M_TRACE - lm.tracelen, fmt, ap);
	va_end(ap);
	if (n > 0)
		lm.tracelen += (size_t)n;
	if (lm.tracelen > M_TRACE - 1)
		lm.tracelen = M_TRACE - 1;
}

/* The model's state, as "k0 limit 1: 3 5s | 4 (w 6)" lines. */
static void
dump_model(void)
{
	for (int k = 0; k < M_NKEYS; k++) {
		const struct m_key	*mk = &lm.key[k];

		if (mk->nh + mk->nq == 0)
			continue;
		fprintf(stderr, "  %s limit %u:", lm_keyname[k], mk->limit);
		for (int i = 0; i < mk->nh; i++)
			fprintf(stderr, " %ju%s",
			    (uintmax_t)lm.own[mk->h[i].o].id,
			    mk->h[i].mode == LT_SHARED ? "s" : "");
		fprintf(stderr, " |");
		for (int i = 0; i < mk->nq; i++)
			fprintf(stderr, " %ju%s",
			    (uintmax_t)lm.own[mk->q[i]].id,
			    lm.own[mk->q[i]].r.mode == LT_SHARED ? "s" : "");
		fprintf(stderr, "\n");
	}
}

void
lm_mfail(const char *fmt, ...)
{
	char	msg[512];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "--- model sequence (seed %ju, sequence %d) ---\n%s"
	    "--- failed at step %d, now %ju: %s\n--- model state (holders "
	    "| waiters; s: shared):\n", (uintmax_t)lm.seed, lm.seq, trace,
	    lm.step, (uintmax_t)lm.now, msg);
	dump_model();
	ck_abort_msg("seed %ju sequence %d step %d: %s (rerun: LT_MODEL_SEED="
	    "%ju LT_MODEL_FIRST=%d LT_MODEL_SEQS=1)", (uintmax_t)lm.seed,
	    lm.seq, lm.step, msg, (uintmax_t)lm.seed, lm.seq);
	abort();
}

/* splitmix64: small, fast, and the same on every platform. */
static uint64_t
rnd64(void)
{
	uint64_t	z = (lm.rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

int
lm_rnd(int n)
{
	return (int)(rnd64() % (uint64_t)n);
}

bool
lm_chance(int pct)
{
	return lm_rnd(100) < pct;
}

/* hooks */

static uint64_t
hook_next_token(void *arg)
{
	(void)arg;
	return lm.next_tok++;
}

static void
hook_granted(void *arg, struct lt_owner *o, uint64_t token,
    uint64_t waited_ms)
{
	(void)arg;
	if (token <= lm.last_tok)
		lm.tok_broken = true;
	lm.last_tok = token;
	if (lm.ngot == M_MAXGOT) {
		lm.got_overflow = true;
		return;
	}
	lm.got[lm.ngot].o = *(int *)locktable_owner_udata(o);
	lm.got[lm.ngot].token = token;
	lm.got[lm.ngot].waited = waited_ms;
	lm.ngot++;
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

	memcpy(outcomes, lm.outcomes, sizeof(outcomes));
	memset(&lm, 0, sizeof(lm));
	memcpy(lm.outcomes, outcomes, sizeof(outcomes));
	trace[0] = '\0';
	lm.seed = seed;
	lm.seq = seq;
	lm.rng = seed * 0x100000001b3ULL + (uint64_t)seq;
	lm.next_tok = 1;
	lm.next_id = 1;
	lm.now = 1000 + (uint64_t)lm_rnd(1000);
	lm.lt = locktable_new(&hooks, rnd64());
	MCK(lm.lt != NULL, "locktable_new failed");
	for (int o = 0; o < M_NOWNERS; o++) {
		lm.own[o].idx = o;
		lm.own[o].id = lm.next_id++;
		lm.own[o].lo = locktable_owner_new(lm.lt, lm.own[o].id,
		    &lm.own[o].idx);
		MCK(lm.own[o].lo != NULL, "owner_new failed");
	}
	lm_compare_all();
	for (lm.step = 1; lm.step <= M_STEPS; lm.step++)
		lm_step();
	/* everybody leaves: nothing may stay behind */
	for (int o = 0; o < M_NOWNERS; o++) {
		lm.now += (uint64_t)lm_rnd(3);
		if (m_next_expiry() <= lm.now)
			lm_op_expire();
		lm_tracef("end t=%ju: id %ju owner_free\n", (uintmax_t)lm.now,
		    (uintmax_t)lm.own[o].id);
		locktable_owner_free(lm.lt, lm.own[o].lo, lm.now);
		(void)m_release_owner(o, LT_WHY_DISCONNECT);
		lm_match_grants();
		lm.own[o].lo = locktable_owner_new(lm.lt, lm.next_id++,
		    &lm.own[o].idx);
		lm.own[o].id = lm.next_id - 1;
		lm_compare_all();
	}
	{
		const struct lt_counters *c = locktable_counters(lm.lt);

		MCK(c->keys == 0 && c->held == 0 && c->waiting == 0,
		    "left behind: keys %ju held %ju waiting %ju",
		    (uintmax_t)c->keys, (uintmax_t)c->held,
		    (uintmax_t)c->waiting);
	}
	for (int o = 0; o < M_NOWNERS; o++)
		locktable_owner_free(lm.lt, lm.own[o].lo, lm.now);
	locktable_free(lm.lt);
	lm.lt = NULL;
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

	memset(lm.outcomes, 0, sizeof(lm.outcomes));
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
			    (uintmax_t)lm.outcomes[i]);
		printf("\n");
	}
	/* the run must have met every outcome, or it proves little */
	if (nseqs >= 100)
		for (int i = 0; i < O__COUNT; i++)
			ck_assert_msg(lm.outcomes[i] > 0, "no %s outcome in "
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

const struct check_program check_program = {
	.name = "check_locktable_model",
	.suites = { locktable_model_suite, NULL }
};
