/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the C tests of backend etcd through the protocol share (the
 * front end tests: frontend_test, leader_test, soak_test, sessions_test),
 * so that a new one is its scenario and little else:
 *
 * - the program's private 3-member cluster (ec.h), started by et_init
 *   before the suites and brought down by et_done; et_setup, a test's
 *   fixture, heals it (every member running and healthy) and gives the
 *   test an etcd prefix of its own;
 * - front ends on it (kltest daemons with --backend etcd), the endpoint
 *   list turned so that a chosen member comes first, members killed,
 *   stopped and restarted by index, the leader's index;
 * - cycling clients: worker threads, each on a connection of its own,
 *   that LOCK and UNLOCK one key until told to stop, keeping every hold
 *   and counting every wrong reply (they never assert: threads);
 * - the history checker: holds (a LOCK's send, its grant's arrival, the
 *   UNLOCK's sending, the token) judged per key for exclusion (or a
 *   semaphore's limit) and rising tokens, and across the cluster for
 *   tokens that rise with time.
 *
 * Asserting functions (et_fe_start, et_member, et_leader, et_check_*)
 * belong to the test's main thread, as kltest.h's kt_*() do.
 */
#ifndef ETEST_H
#define ETEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ec.h"
#include "kltest.h"

/* ---- the cluster and the test's prefix ---- */

extern struct ec	et_ec;		/* the program's cluster */
extern char		et_prefix[64];	/* "kltest-<pid>/", per test */

/* check_program.init and .done: kt_init and a 3-member cluster; exits
 * 77 without etcd, 1 if the cluster does not come up. */
void		 et_init(const char *prog);
void		 et_done(void);
/* The fixture: every member running and healthy, a prefix of the test's
 * own (its process id), no daemon (kt_setup_none); kt_teardown after. */
void		 et_setup(void);

/* ---- front ends and members ---- */

/* A front end on endpoints (the cluster's when NULL) under et_prefix,
 * with --etcd-lease-ttl ttl (s) and --etcd-timeout timeout (ms) when not
 * NULL (the defaults otherwise), then extra (NULL-terminated, may be
 * NULL). Ready when it returns; kt_teardown stops it. */
struct kt_daemon *et_fe_start_at(const char *file, int line,
		    const char *endpoints, const char *ttl,
		    const char *timeout, const char *const *extra);
#define et_fe_start(ep, ttl, to) \
	et_fe_start_at(KT_AT, (ep), (ttl), (to), NULL)
#define et_fe_start_with(ep, ttl, to, ...) \
	et_fe_start_at(KT_AT, (ep), (ttl), (to), KT_ARGS(__VA_ARGS__))
/* The cluster's endpoint list with member first (1-based) first, so a
 * front end's calls and watch go there; a static buffer. */
const char	*et_endpoints_from(int first);
/* cluster.sh's kill, stop, cont or restart of member i (1-based). */
void		 et_member(const char *cmd, int i);
/* The leader's index (1-based). */
int		 et_leader(void);
/* The first reply of a front end (default settings, a prefix of its own,
 * started for the question and stopped) to request, into reply ("(no
 * reply)" if none came): for check_program.init, to skip a program whose
 * feature backend etcd does not serve yet, saying so. */
void		 et_ask(const char *request, char *reply, size_t len);

/* ---- holds, and the history checker ---- */

struct et_hold {
	uint64_t	send_us;	/* LOCK sent */
	uint64_t	reply_us;	/* its reply read: the grant, if one */
	uint64_t	end_us;		/* UNLOCK sent, or the hold
					 * otherwise ended (a close, a cut) */
	uint64_t	token;
};

/* Describes a hold for a failure message (a static or thread buffer). */
typedef const char *et_who_fn(const struct et_hold *h);

/*
 * One key's holds (v, n of them; sorted here by grant): never more than
 * limit at once (a sweep in grant order: a hold is over when its end is
 * at or before the next's grant), and, on an exclusive key (limit 1),
 * each hold's token above every token of the holds that ended before it
 * was granted. Fails the test naming both holds (who, or times and
 * tokens when NULL). Returns n.
 */
size_t		 et_check_key(struct et_hold **v, size_t n, int limit,
		    const char *key, et_who_fn *who);
/*
 * Tokens rise with time across the cluster: a LOCK sent after another
 * LOCK's grant arrived, on any key and through any front end, is granted
 * a larger token (etcd's revision is one counter; a token is
 * revision << 16 | n). byreply and bysend hold the same n grants; both
 * are sorted here.
 */
void		 et_check_cluster_tokens(struct et_hold **byreply,
		    struct et_hold **bysend, size_t n, et_who_fn *who);

/* ---- cycling clients (threads; they never assert) ---- */

struct et_cycle {
	struct et_hold	h;
	uint64_t	done_us;	/* UNLOCK's reply read */
};

struct et_client {
	pthread_t		 th;
	int			 id;
	const struct kt_daemon	*d;
	char			 key[64];
	unsigned		 hold_ms;	/* between OK and UNLOCK */
	struct et_cycle		*ops;
	size_t			 nops, cap;
	uint64_t		 errors;	/* wrong replies */
	uint64_t		 backend;	/* of them ERR BACKEND */
	uint64_t		 unanswered;	/* no reply in ET_REPLY_MS */
	char			 first[200];	/* the first wrong reply */
	bool			 oom;
	volatile int		*stop;
};

#define ET_REPLY_MS	30000	/* "answered": far past any wait here */

/* Starts cl (id, d, key, hold_ms and stop filled in by the caller):
 * connect, then LOCK key / hold hold_ms / UNLOCK key (OK token, then OK
 * 1) until *stop. A wrong reply is counted and the cycle goes on; no
 * reply at all ends the client. */
void		 et_client_start(struct et_client *cl);
/* Joins cl; true if it ran clean (no error, nothing unanswered, memory
 * for its history); otherwise why in *why. */
bool		 et_client_join(struct et_client *cl, char *why, size_t len);
/* The holds of the clients of cls (n of them) on key, into a new array
 * (free it) of pointers; their number in *count. */
struct et_hold	**et_client_holds(struct et_client *cls, int n,
		    const char *key, size_t *count);

#endif /* ETEST_H */
