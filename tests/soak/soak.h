/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The chaos soak's shared parts: the keys it uses, the records a worker
 * process sends the soak through one pipe, and the checker's state. The
 * workers (soak_worker.c) play clients and report grants and the ends of
 * holds; the checker (soak_check.c) turns those into intervals and checks
 * them; soak.c runs the daemon, the workers and the chaos around them.
 */
#ifndef SOAK_H
#define SOAK_H

#include <sys/types.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NPLAIN		96	/* keys k:0.., shared or exclusive */
#define NHOT		6	/* the first keys are picked more often */
#define NSEM		12	/* keys s:0.. with limit 2 + i % 3 */
#define NKEYS		(NPLAIN + NSEM)
#define MAXK		4	/* keys per request */
#define TTL_SLOP_NS	5000000ULL	/* a ttl may end 5 ms early */
/* A timeout may fire 10 ms early: libevent's default clock is
 * CLOCK_MONOTONIC_COARSE (4 ms ticks here), and the daemon trusts its timer
 * (6 ms early seen under load) */
#define TIMEOUT_SLOP_NS	10000000ULL
#define MAX_ERRORS	10
#define LAG_NS		5000000000ULL	/* records are in by then */
#define CHECK_EVERY_NS	2000000000ULL	/* between checkpoints */
#define KEY_ALL		0xffff	/* REC_END: the whole grant */

static inline uint64_t
mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint32_t
sem_limit(unsigned key)
{
	return key >= NPLAIN ? 2 + (key - NPLAIN) % 3 : 1;
}

static inline int
key_name(char *buf, size_t len, unsigned key)
{
	return key < NPLAIN ? snprintf(buf, len, "k:%u", key) :
	    snprintf(buf, len, "s:%u", key - NPLAIN);
}

/* Records, worker to soak: one write() each, under PIPE_BUF (asserted in
 * soak_worker.c), so atomic. */
enum rec_type {
	REC_GRANT = 1,
	REC_END,
	REC_COUNT,
	REC_ERROR
};

/* A worker's counters; from C_LATE_US_MAX on, maxima in microseconds. */
enum cnt {
	C_OPS, C_GRANTS, C_TIMEOUTS, C_LOCKED, C_DEADLOCKS, C_BUSY,
	C_NOTHELD_TTL, C_CLOSES, C_RSTS, C_HALFCLOSES, C_STALLS, C_FLOODS,
	C_FLOOD_CUT, C_CONNECTS, C_LATE_US_MAX, C_WAIT_US_MAX, C_EARLY_US_MAX,
	NCNT
};

struct rec {
	uint8_t		 type;
	uint8_t		 nkeys;
	uint8_t		 shared;
	uint8_t		 pad;
	uint32_t	 inc;		/* worker incarnation */
	uint32_t	 client;	/* connection within the incarnation */
	uint32_t	 gid;		/* grant within the connection */
	uint16_t	 keys[MAXK];	/* REC_END: keys[0], or KEY_ALL */
	uint32_t	 ttl_ms;
	uint64_t	 s_ns;		/* request sent */
	uint64_t	 a_ns;		/* reply came; REC_END: the end */
	uint64_t	 token;
	uint64_t	 cnt[NCNT];	/* REC_COUNT, cumulative */
	char		 msg[240];	/* REC_ERROR */
};

/* soak_worker.c: plays nclients clients until SIGTERM; never returns. */
void		 worker_main(int pipefd, uint32_t inc, uint64_t seed,
		    int nclients, int64_t slack_ms)
		    __attribute__((noreturn));

/* soak_check.c */
struct ival {
	uint64_t	 s, a, e;	/* e: UINT64_MAX while open */
	uint64_t	 token;
	uint32_t	 inc, client, gid;
	uint16_t	 key;
	uint8_t		 shared;
	uint32_t	 ttl_ms;
};

/*
 * What holds dropped after a checkpoint leave for the checks of later
 * ones: they all ended before the holds still to come began.
 */
struct floor {
	uint64_t	 max_all, max_ex;	/* tokens of non-empty holds */
	uint64_t	 e_max;			/* their latest end */
	uint64_t	 tok_max, a_max;	/* of every grant */
	bool		 nonempty, any;
};

struct inc {
	pid_t		 pid;
	uint64_t	 killed;	/* SIGKILL sent, or 0 */
	uint64_t	 cnt[NCNT];
};

struct verdict {
	size_t		 nivals, nonempty, overlaps, token_bad, checks;
	size_t		 most_kept;
	unsigned	 max_holders[NKEYS];
};

struct soak {
	struct ival	*iv;
	size_t		 niv, ivcap;
	/* (inc, client, gid) -> first ival of the grant */
	uint64_t	*hkeys;
	uint32_t	*hvals;
	size_t		 hcap, hn;
	struct inc	*incs;		/* by incarnation */
	size_t		 nincs, inccap;
	struct floor	 floors[NKEYS], gfloor;
	struct verdict	 v;
	char		 errors[MAX_ERRORS][300];
	size_t		 nerrors;
	uint64_t	 term_ns;	/* workers told to stop */
	uint64_t	 kills, killed_clients;
};

void		 soak_error(struct soak *, const char *, ...)
		    __attribute__((format(printf, 2, 3)));
/* A new incarnation's slot in s->incs. */
uint32_t	 soak_new_inc(struct soak *);
/* Reads every whole record in the pipe now; false at EOF. */
bool		 soak_drain(struct soak *, int fd);
/* A checkpoint: mid-run (final false) over the holds that began before
 * cut, then forgetting those over before cut; at the end over all. */
void		 soak_check(struct soak *, bool final, uint64_t cut);
void		 soak_free(struct soak *);

#endif /* SOAK_H */
