/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * The phases of a run (connect, set up, hold keys, measure memory, run the
 * workload) and the workloads: what each connection sends next and what
 * it does with a reply. A cycle is the requests of one lock's life:
 * LOCK + UNLOCK on keylockd, SET NX PX + DEL (or EVALSHA of a
 * compare-and-delete script) on Redis; with -w refresh, one REFRESH of the
 * lock the client took at setup. Requests are pipelined up to -P per
 * connection, except where a request depends on the previous reply (a
 * Redis client spinning on a taken key, the seed's timed holds).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "keylock-bench.h"

#define HOLD_PIPELINE	64	/* --held: LOCKs in flight per holder */
#define TOKEN_MOD	UINT64_C(10000000000000000000)	/* 20 digits */
#define DRAIN_S		2	/* Redis: most time to finish cycles begun */
#define SEED_BATCH	10	/* seed: LOCKs written per idle loop turn */
#define REFRESH_PREFIX	"refresh:"	/* -w refresh: its keys */

/* The Redis compare-and-delete unlock: delete only our own lock. */
static const char work_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

static void	work_connect_more(struct bench *);

uint64_t
work_random(struct bench *b)
{
	/* xorshift64*: fast, and good enough to spread keys. */
	b->rng ^= b->rng >> 12;
	b->rng ^= b->rng << 25;
	b->rng ^= b->rng >> 27;
	return b->rng * 2685821657736338717ULL;
}

bool
work_rss(long pid, uint64_t *bytes)
{
	char		 path[64], line[256];
	FILE		*f;
	bool		 found = false;
	unsigned long long kb;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
			*bytes = (uint64_t)kb * 1024;
			found = true;
			break;
		}
	fclose(f);
	return found;
}

static void
work_read_rss(struct bench *b, uint64_t *bytes)
{
	if (b->o.server_pid <= 0)
		return;
	if (!work_rss(b->o.server_pid, bytes)) {
		bench_fail(b, "cannot read VmRSS of process %ld",
		    b->o.server_pid);
		return;
	}
	b->mem.have_rss = true;
}

/* A request on the control connection, encoded for the server's protocol. */
static void
work_ctl_send(struct bench *b, enum bench_rt type)
{
	char	buf[512];
	int	n;
	bool	redis = b->o.proto == BENCH_REDIS;

	switch (type) {
	case RT_SCRIPT:
		n = snprintf(buf, sizeof(buf), "*3\r\n$6\r\nSCRIPT\r\n$4\r\n"
		    "LOAD\r\n$%zu\r\n%s\r\n", sizeof(work_script) - 1,
		    work_script);
		break;
	case RT_INFO:
		n = snprintf(buf, sizeof(buf),
		    "*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n");
		break;
	case RT_STATS:
		n = snprintf(buf, sizeof(buf), "STATS\n");
		break;
	default:	/* RT_PING */
		n = snprintf(buf, sizeof(buf), redis ?
		    "*1\r\n$4\r\nPING\r\n" : "PING\n");
		break;
	}
	bconn_put_raw(b->ctl, type, buf, (size_t)n);
	b->pending++;
}

/* keylockd's own count of its table's memory, from a STATS reply. */
static uint64_t
work_stats_table_bytes(const char *val, size_t vlen, bool *ok)
{
	static const char	name[] = "\"table_bytes\":";
	const char		*p = val, *end = val + vlen;

	*ok = false;
	for (; (size_t)(end - p) > sizeof(name) - 1; p++) {
		if (memcmp(p, name, sizeof(name) - 1) == 0) {
			*ok = true;
			return strtoull(p + sizeof(name) - 1, NULL, 10);
		}
	}
	return 0;
}

static uint64_t
work_info_used(const char *val, size_t vlen, bool *ok)
{
	static const char	name[] = "used_memory:";
	const char		*p = val, *end = val + vlen;

	*ok = false;
	while (p < end) {
		const char	*nl = memchr(p, '\n', (size_t)(end - p));
		size_t		 n = (size_t)((nl != NULL ? nl : end) - p);

		if (n > sizeof(name) - 1 &&
		    memcmp(p, name, sizeof(name) - 1) == 0) {
			*ok = true;
			return strtoull(p + sizeof(name) - 1, NULL, 10);
		}
		p += n + 1;
	}
	return 0;
}

/* --etcd: etcd's revision (RT_RANGE) or the end of a lease (RT_REVOKE,
 * key is the lease) on the control connection. */
static void
work_etcd_ctl(struct bench *b, enum bench_rt type, uint64_t key)
{
	bconn_put(b->ctl, type, false, "", key, 1);
	b->pending++;
}

/* --etcd's end: the revision the run reached, then every lease revoked,
 * which drops the locks still held or waited for; then the report. */
static void
work_etcd_revoke(struct bench *b)
{
	b->phase = PH_REVOKE;
	b->pending = 0;
	work_etcd_ctl(b, RT_RANGE, 0);
	for (int i = 0; i < b->nwork; i++)
		if (b->work[i]->lease != 0)
			work_etcd_ctl(b, RT_REVOKE, (uint64_t)b->work[i]->lease);
	bconn_flush(b->ctl);
}

static void
work_ctl_reply(struct bconn *c, const struct inflight *r,
    const struct breply *rep)
{
	struct bench	*b = c->b;
	uint64_t	 used;
	bool		 ok;

	if (b->phase == PH_REVOKE) {
		/* a lease that ran out is gone already: no failure */
		if (r->type == RT_RANGE && rep->ok)
			b->etcd_rev_after = c->erev;
		if (--b->pending == 0)
			work_finish(b);
		return;
	}
	if (!rep->ok) {
		bench_fail(b, "%s refused: %.*s", bench_rt_name(r->type),
		    (int)rep->vlen, rep->val);
		return;
	}
	switch (r->type) {
	case RT_RANGE:
		b->etcd_rev_before = c->erev;
		break;
	case RT_SCRIPT:
		if (rep->vlen != BENCH_SHA_LEN) {
			bench_fail(b, "SCRIPT LOAD: odd reply");
			return;
		}
		memcpy(b->sha, rep->val, BENCH_SHA_LEN);
		break;
	case RT_INFO:
	case RT_STATS:
		used = r->type == RT_INFO ? work_info_used(rep->val,
		    rep->vlen, &ok) : work_stats_table_bytes(rep->val,
		    rep->vlen, &ok);
		b->mem.have_used = ok;
		if (b->phase == PH_SETUP)
			b->mem.used_before = used;
		else
			b->mem.used_after = used;
		if (r->type == RT_STATS && --b->stats_left > 0) {
			b->pending--;
			work_ctl_send(b, RT_STATS);
			bconn_flush(c);
			return;
		}
		break;
	default:
		break;
	}
	if (--b->pending == 0)
		work_advance(b);
}

static void
work_hold_reply(struct bconn *c, const struct breply *rep)
{
	struct bench	*b = c->b;

	if (!rep->ok) {
		bench_fail(b, "connection %d: holding a key failed: %.*s",
		    c->id, (int)rep->vlen, rep->val);
		return;
	}
	b->held_keys++;
	if (--b->pending == 0) {
		b->t_hold_end = bench_now();
		work_advance(b);
	}
}

/* Holders take keys hold_next..hold_end-1, -P (or 64) at a time. */
static void
work_hold_fill(struct bconn *c)
{
	struct bench	*b = c->b;
	unsigned	 max = b->o.work == WORK_HOLD ? (unsigned)b->o.pipeline :
			    HOLD_PIPELINE;
	const char	*prefix = b->o.work == WORK_HOLD ? "hold:" : "held:";

	if (b->phase != PH_HOLD)
		return;
	while (c->qlen < max && c->hold_next < c->hold_end && !b->stopping) {
		snprintf(c->token, sizeof(c->token), "%0*" PRIu64,
		    BENCH_TOKEN_LEN, c->hold_next);
		bconn_put(c, b->o.proto == BENCH_REDIS ? RT_SET : RT_LOCK,
		    true, prefix, c->hold_next++, 1);
	}
}

/* A request that needs the previous reply: a Redis client spinning on a
 * taken key; etcd's unlock, which names the key its lock answered. */
static bool
work_is_dependent(const struct bench *b)
{
	return (b->o.proto == BENCH_REDIS && b->o.work == WORK_CONTENDED) ||
	    b->o.proto == BENCH_ETCD;
}

/* May c start a new cycle? Never while draining. */
static bool
work_budget(const struct bench *b)
{
	return b->phase == PH_RUN && (b->o.requests == 0 ||
	    b->issued < b->o.requests);
}

/* Writes the next request of c's cycle. */
static void
work_step(struct bconn *c)
{
	struct bench	*b = c->b;
	enum bench_rt	 type;
	bool		 last;

	if (b->o.work == WORK_REFRESH) {	/* a cycle: one REFRESH */
		bconn_put(c, RT_REFRESH, true, REFRESH_PREFIX, c->key, 1);
		return;
	}
	if (c->step == 0) {
		c->key = b->o.keyspace > 1 ? work_random(b) % b->o.keyspace :
		    0;
		if (b->o.proto == BENCH_REDIS)
			snprintf(c->token, sizeof(c->token), "%0*" PRIu64,
			    BENCH_TOKEN_LEN, work_random(b) % TOKEN_MOD);
	}
	if (b->o.proto == BENCH_REDIS) {
		type = c->step == 0 ? RT_SET : b->o.redis_script ?
		    RT_EVALSHA : RT_DEL;
		last = c->step == 1;
	} else {
		type = c->step == 1 ? RT_UNLOCK :
		    b->o.work == WORK_TRYLOCK ? RT_TRYLOCK : RT_LOCK;
		last = c->step == 1 || b->o.work == WORK_CONNECT;
	}
	bconn_put(c, type, last, "lock:", c->key, b->o.keys_per_lock);
	c->step = last ? 0 : c->step + 1;
	if (last && b->o.work == WORK_CONNECT)
		c->cycle_sent = true;
}

void
work_fill(struct bconn *c)
{
	struct bench	*b = c->b;
	unsigned	 max = (unsigned)b->o.pipeline;

	if (c->role == ROLE_HOLD) {
		work_hold_fill(c);
		return;
	}
	if (c->role != ROLE_WORK || (b->phase != PH_RUN &&
	    b->phase != PH_DRAIN) || b->stopping || !c->s->connected ||
	    b->o.work == WORK_SEED)
		return;
	if (work_is_dependent(b)) {
		if (c->qlen == 0 && (c->step != 0 || work_budget(b)))
			work_step(c);
		return;
	}
	while (c->qlen < max && !c->cycle_sent &&
	    (c->step != 0 || work_budget(b)))
		work_step(c);
}

/* The seed's LOCKs, in connection order, until connection last's. */
static void
work_seed_lock_upto(struct bench *b, int last)
{
	struct bconn	*c;

	while (b->seed_next <= last && b->seed_next < b->nwork &&
	    !b->stopping) {
		c = b->work[b->seed_next];
		c->seed_index = b->seed_next;
		c->key = (uint64_t)b->seed_next++ % b->o.keyspace;
		bconn_put(c, RT_LOCK, false, "seed:", c->key, 1);
		bconn_flush(c);
	}
	if (b->seed_next == b->nwork && b->seed_locks_written == 0)
		b->seed_locks_written = bench_now() - b->t_start;
}

/*
 * A hold is over: UNLOCK. The key's next connection has written its LOCK
 * before that, so that the lock is handed over by the server's queue, not
 * granted to whoever asks first once it is free.
 */
static void
work_seed_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bconn	*c = arg;
	struct bench	*b = c->b;
	uint64_t	 held = bench_now() - c->t_granted;
	uint64_t	 hold = (uint64_t)b->o.hold_ms * 1000000;

	bhist_record(&b->seed_overrun, held > hold ? held - hold : 0);
	work_seed_lock_upto(b, c->seed_index + (int)b->o.keyspace);
	if (b->seed_holder[c->key] == c->id)
		b->seed_holder[c->key] = -1;
	bconn_put(c, RT_UNLOCK, true, "seed:", c->key, 1);
	bconn_flush(c);
	b->seed_released[c->key] = bench_now();
}

/* The seed's operation: LOCK, hold hold_ms, UNLOCK; overlaps counted. */
static void
work_seed_reply(struct bconn *c, const struct inflight *r,
    const struct breply *rep, uint64_t now)
{
	struct bench	*b = c->b;
	struct timeval	 tv;
	uint64_t	 token;

	if (!rep->ok) {
		bench_fail(b, "seed: %s refused: %.*s", bench_rt_name(r->type),
		    (int)rep->vlen, rep->val);
		return;
	}
	if (r->type == RT_UNLOCK) {
		b->cycles++;
		if (--b->seed_left == 0) {
			b->t_end = now;
			work_finish(b);
		}
		return;
	}
	c->t_granted = now;
	if (b->seed_first_grant == 0)
		b->seed_first_grant = now - b->t_start;
	if (b->seed_released[c->key] != 0 && now > b->seed_released[c->key])
		bhist_record(&b->seed_handoff, now -
		    b->seed_released[c->key]);
	if (b->seed_holder[c->key] != -1)
		b->seed_overlaps++;
	b->seed_holder[c->key] = c->id;
	token = strtoull(rep->val, NULL, 10);
	if (token <= b->seed_token[c->key])
		b->seed_token_errors++;
	b->seed_token[c->key] = token;
	if (c->timer == NULL && (c->timer = evtimer_new(b->base,
	    work_seed_timer_cb, c)) == NULL) {
		bench_fail(b, "out of memory for a timer");
		return;
	}
	tv.tv_sec = b->o.hold_ms / 1000;
	tv.tv_usec = (b->o.hold_ms % 1000) * 1000;
	evtimer_add(c->timer, &tv);
}

static bool
work_is_cycle_type(enum bench_rt t)
{
	return t == RT_LOCK || t == RT_TRYLOCK || t == RT_UNLOCK ||
	    t == RT_SET || t == RT_DEL || t == RT_EVALSHA || t == RT_REFRESH;
}

static void
work_account(struct bconn *c, const struct inflight *r,
    const struct breply *rep, uint64_t now)
{
	struct bench	*b = c->b;
	enum bench_rt	 t = r->type;
	bool		 cycle = work_is_cycle_type(t);

	if (cycle && (c->role != ROLE_WORK || b->phase != PH_RUN))
		return;		/* holding keys is not measured per request */
	if (t == RT_STATS && b->phase == PH_SETUP)
		return;		/* only STATS with the keys held is timed */
	if (t == RT_GRANT || t == RT_REVOKE || t == RT_RANGE)
		return;		/* --etcd's setup and end */
	if (r->t_send != 0 && now >= r->t_send) {
		bhist_record(&b->hist[t], now - r->t_send);
		if (cycle)
			bhist_record(&b->all_hist, now - r->t_send);
	}
	b->count[t]++;
	if (!rep->ok)
		b->fail[t]++;
	if (rep->is_error) {
		b->errors++;
		if (b->first_error[0] == '\0')
			snprintf(b->first_error, sizeof(b->first_error),
			    "%s: %.*s", bench_rt_name(t), (int)(rep->vlen <
			    120 ? rep->vlen : 120), rep->val);
	}
}

/* -w refresh: the setup's TRYLOCK of the key the client refreshes. */
static bool
work_refresh_lock(const struct bconn *c, const struct inflight *r)
{
	return r->type == RT_TRYLOCK && c->b->phase == PH_SETUP &&
	    c->role == ROLE_WORK;
}

static void
work_reconnect(struct bconn *c)
{
	bsock_close(c->s);
	if (bsock_connect(c->s) == 1)
		work_connected(c->s);
}

void
work_reply(struct bconn *c, const struct inflight *r,
    const struct breply *rep, uint64_t now)
{
	struct bench	*b = c->b;

	if (b->stopping)
		return;
	work_account(c, r, rep, now);
	if (r->type == RT_GRANT && !rep->ok) {
		bench_fail(b, "connection %d: lease grant refused: %.*s",
		    c->id, (int)rep->vlen, rep->val);
		return;
	}
	if (r->type == RT_SESSION) {
		if (!rep->ok) {
			bench_fail(b, "connection %d: SESSION refused: %.*s",
			    c->id, (int)rep->vlen, rep->val);
			return;
		}
		b->sessions++;
		if (--b->pending == 0)
			work_advance(b);
		return;
	}
	if (work_refresh_lock(c, r) && !rep->ok) {
		bench_fail(b, "connection %d: taking " REFRESH_PREFIX "%" PRIu64
		    " to refresh failed: %.*s", c->id, c->key,
		    (int)rep->vlen, rep->val);
		return;
	}
	/* the setup's round trips: PING, etcd's lease, -w refresh's lock */
	if (r->type == RT_PING || r->type == RT_GRANT ||
	    work_refresh_lock(c, r)) {
		if (--b->pending == 0)
			work_advance(b);
		return;
	}
	switch (c->role) {
	case ROLE_HOLD:
		work_hold_reply(c, rep);
		return;
	case ROLE_IDLE:
	case ROLE_CHAN0:
		return;
	case ROLE_CTL:
		work_ctl_reply(c, r, rep);
		return;
	case ROLE_WORK:
		break;
	}
	b->outstanding--;
	if (b->phase == PH_DRAIN) {
		if (work_is_dependent(b) && !rep->ok && r->type == RT_SET)
			c->step = 0;	/* not taken: nothing to undo */
		return;
	}
	if (b->phase != PH_RUN)
		return;
	b->requests++;
	if (!rep->ok && (r->type == RT_LOCK || r->type == RT_TRYLOCK ||
	    r->type == RT_SET))
		b->lock_failures++;
	if (b->o.work == WORK_SEED) {
		work_seed_reply(c, r, rep, now);
		return;
	}
	if (work_is_dependent(b) && !rep->ok && r->type == RT_SET) {
		b->retries++;
		c->step = 0;		/* taken: try again */
		return;
	}
	if (b->o.proto == BENCH_ETCD && !rep->ok && r->type == RT_LOCK) {
		c->step = 0;		/* not held: nothing to unlock */
		return;
	}
	if (!r->last)
		return;
	b->cycles++;
	if (b->o.work == WORK_CONNECT)
		work_reconnect(c);
}

void
work_connected(struct bsock *s)
{
	struct bench	*b = s->b;
	struct bconn	*c = s->ch0;
	uint64_t	 now;

	if (b->phase == PH_CONNECT) {
		b->connecting--;
		b->pending--;
		work_connect_more(b);
		return;
	}
	if (b->phase != PH_RUN || c->role != ROLE_WORK)
		return;
	now = bench_now();
	bhist_record(&b->hist[RT_CONNECT], now - s->t_connect);
	b->count[RT_CONNECT]++;
	work_fill(c);
	bconn_flush(c);
}

void
work_lost(struct bsock *c, const char *why)
{
	struct bench	*b = c->b;

	if (b->stopping)
		return;
	if (b->first_error[0] != '\0')
		bench_fail(b, "connection %d: %s (after %s)", c->id, why,
		    b->first_error);
	else
		bench_fail(b, "connection %d: %s", c->id, why);
}

/* -w connect opens its own sockets, in the workload. */
static bool
work_opens_itself(const struct bench *b, const struct bsock *s)
{
	return b->o.work == WORK_CONNECT && s->ch0 != NULL &&
	    s->ch0->role == ROLE_WORK;
}

/* PH_CONNECT: keeps BENCH_CONNECT_WINDOW connects in flight. */
static void
work_connect_more(struct bench *b)
{
	struct bsock	*c;

	while (b->next_connect < b->nall &&
	    b->connecting < BENCH_CONNECT_WINDOW && !b->stopping) {
		c = b->all[b->next_connect++];
		if (work_opens_itself(b, c))
			continue;
		switch (bsock_connect(c)) {
		case -1:
			return;
		case 1:
			b->pending--;
			break;
		default:
			b->connecting++;
			break;
		}
	}
	if (b->pending == 0)
		work_advance(b);
}

static void
work_session(struct bench *b)
{
	char	req[64];
	int	n;

	n = b->o.session_grace_ms > 0 ? snprintf(req, sizeof(req),
	    "SESSION grace=%" PRId64 "\n", b->o.session_grace_ms) :
	    snprintf(req, sizeof(req), "SESSION\n");
	for (int i = 0; i < b->nall; i++) {
		struct bsock	*s = b->all[i];

		if (s->is_ctl || s->fd == -1)
			continue;
		bconn_put_raw(s->ch0, RT_SESSION, req, (size_t)n);
		bconn_flush(s->ch0);
		b->pending++;
	}
}

static void
work_setup(struct bench *b)
{
	if (b->o.proto == BENCH_REDIS && b->o.redis_script)
		work_ctl_send(b, RT_SCRIPT);
	if (b->o.proto == BENCH_ETCD) {
		/* a lease per connection: the round trip that shows the
		 * connection is accepted, as PING does */
		work_etcd_ctl(b, RT_RANGE, 0);
		for (int i = 0; i < b->nwork; i++) {
			bconn_put(b->work[i], RT_GRANT, false, "", 0, 1);
			bconn_flush(b->work[i]);
			b->pending++;
		}
		bconn_flush(b->ctl);
		return;
	}
	if (b->nholders > 0) {
		work_read_rss(b, &b->mem.rss_before);
		b->stats_left = 1;
		work_ctl_send(b, b->o.proto == BENCH_REDIS ? RT_INFO :
		    RT_STATS);
	}
	/* --session: SESSION first on every connection but the control
	 * one, pipelined with the PING below. */
	if (b->o.session)
		work_session(b);
	/* One round trip each, so that the server has accepted every
	 * connection before the clock starts ("already open"); with -w
	 * refresh, the TRYLOCK of the client's own key, refresh:N with N
	 * from a random first one (TRYLOCK: a key taken by another run
	 * fails this one rather than waits). */
	if (b->o.work == WORK_REFRESH) {
		uint64_t	first = work_random(b) % b->o.keyspace;

		for (int i = 0; i < b->nwork; i++) {
			struct bconn	*c = b->work[i];

			c->key = (first + (uint64_t)i) % b->o.keyspace;
			bconn_put(c, RT_TRYLOCK, false, REFRESH_PREFIX, c->key,
			    1);
			bconn_flush(c);
			b->pending++;
		}
	} else if (b->o.work != WORK_CONNECT)
		for (int i = 0; i < b->nwork; i++) {
			bconn_put_raw(b->work[i], RT_PING, b->o.proto ==
			    BENCH_REDIS ? "*1\r\n$4\r\nPING\r\n" : "PING\n",
			    b->o.proto == BENCH_REDIS ? 14 : 5);
			bconn_flush(b->work[i]);
			b->pending++;
		}
	if (b->ctl != NULL)
		bconn_flush(b->ctl);
}

static void
work_hold(struct bench *b)
{
	if (b->nholders == 0)
		return;
	b->t_hold_start = bench_now();
	b->pending = b->held_total;
	for (int i = 0; i < b->nholders; i++) {
		work_hold_fill(b->holders[i]);
		bconn_flush(b->holders[i]);
	}
}

static void
work_measure(struct bench *b)
{
	if (b->nholders == 0 && b->o.work != WORK_IDLE)
		return;
	work_read_rss(b, &b->mem.rss_after);
	if (b->nholders == 0)
		return;
	if (b->o.proto == BENCH_REDIS) {
		work_ctl_send(b, RT_INFO);
	} else {
		b->stats_left = BENCH_STATS_SAMPLES;
		work_ctl_send(b, RT_STATS);
	}
	bconn_flush(b->ctl);
}

/*
 * The seed's LOCKs, SEED_BATCH per turn of the loop: 1,000 independent
 * clients would not wait for each other's writes, so grants are read, and
 * their holds timed, between batches rather than after all 1,000 writes.
 * The next batch is a timer due at once, not an event made active: libevent
 * runs an active event in the same pass over its queue, before it polls
 * again, which wrote all 1,000 LOCKs before reading the first grant (about
 * 9 ms of writes before any hold began). It has the lowest priority, so it
 * runs only in a turn with no reply and no hold's end to handle.
 */
static void
work_seed_burst_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bench	*b = arg;
	struct timeval	 now = { 0, 0 };

	work_seed_lock_upto(b, b->seed_next + SEED_BATCH - 1);
	if (b->seed_next < b->nwork && !b->stopping)
		evtimer_add(b->seed_burst, &now);
}

static void
work_run(struct bench *b)
{
	struct timeval	tv;
	struct bconn	*c;

	b->t_start = b->t_tick = bench_now();
	if (b->o.requests == 0 && b->o.work != WORK_SEED) {
		tv.tv_sec = (time_t)b->o.seconds;
		tv.tv_usec = (suseconds_t)((b->o.seconds -
		    (double)tv.tv_sec) * 1e6);
		evtimer_add(b->deadline, &tv);
	}
	if (b->o.work == WORK_IDLE) {
		b->ctl->role = ROLE_WORK;
		work_fill(b->ctl);
		bconn_flush(b->ctl);
		return;
	}
	if (b->o.work == WORK_SEED) {
		b->seed_left = b->nwork;
		if ((b->seed_burst = evtimer_new(b->base, work_seed_burst_cb,
		    b)) == NULL) {
			bench_fail(b, "out of memory for an event");
			return;
		}
		event_priority_set(b->seed_burst, BENCH_PRIORITIES - 1);
		work_seed_burst_cb(-1, EV_TIMEOUT, b);
		return;
	}
	for (int i = 0; i < b->nwork && !b->stopping; i++) {
		c = b->work[i];
		if (b->o.work == WORK_CONNECT) {
			if (bsock_connect(c->s) == 1)
				work_connected(c->s);
			continue;
		}
		work_fill(c);
		bconn_flush(c);
	}
}

/* Enters the next phase whose work is not done at once. */
void
work_advance(struct bench *b)
{
	while (!b->stopping && b->pending == 0) {
		switch (b->phase) {
		case PH_CONNECT:
			b->phase = PH_SETUP;
			work_setup(b);
			break;
		case PH_SETUP:
			b->phase = PH_HOLD;
			work_hold(b);
			break;
		case PH_HOLD:
			b->phase = PH_MEASURE;
			work_measure(b);
			break;
		case PH_MEASURE:
			if (b->o.work == WORK_HOLD) {
				work_finish(b);
				return;
			}
			b->phase = PH_RUN;
			work_run(b);
			return;
		case PH_RUN:
		case PH_DRAIN:
		case PH_REVOKE:
		case PH_DONE:
			return;
		}
	}
}

void
work_check_done(struct bench *b)
{
	if (b->stopping || b->outstanding > 0)
		return;
	if (b->phase == PH_DRAIN || (b->phase == PH_RUN &&
	    b->o.requests > 0 && b->o.work != WORK_SEED &&
	    b->issued >= b->o.requests))
		work_stop(b);
}

/*
 * Ends the measured window. keylockd releases a lock when its connection
 * closes; a Redis lock stays until its PX runs out, and would refuse the
 * next run's clients, so on Redis every cycle begun is finished first
 * (unmeasured, for DRAIN_S at most).
 */
void
work_stop(struct bench *b)
{
	struct timeval	tv = { DRAIN_S, 0 };

	if (b->stopping)
		return;
	if (b->phase == PH_RUN)
		b->t_end = bench_now();
	if (b->phase == PH_RUN && b->o.proto == BENCH_ETCD) {
		evtimer_add(b->deadline, &tv);
		work_etcd_revoke(b);
		return;
	}
	if (b->phase != PH_RUN || b->o.proto != BENCH_REDIS ||
	    b->outstanding == 0) {
		work_finish(b);
		return;
	}
	b->phase = PH_DRAIN;
	evtimer_add(b->deadline, &tv);
	for (int i = 0; i < b->nwork; i++) {
		work_fill(b->work[i]);
		bconn_flush(b->work[i]);
	}
}

/* Ends the run: the loop stops at the end of this callback. */
void
work_finish(struct bench *b)
{
	if (b->stopping)
		return;
	b->stopping = true;
	if (b->t_end == 0)
		b->t_end = bench_now();
	b->phase = PH_DONE;
	event_base_loopbreak(b->base);
}

/* Starts the run: PH_CONNECT opens every connection but -w connect's. */
void
work_start(struct bench *b)
{
	b->phase = PH_CONNECT;
	for (int i = 0; i < b->nall; i++)
		if (!work_opens_itself(b, b->all[i]))
			b->pending++;
	work_connect_more(b);
}
