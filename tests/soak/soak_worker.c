/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * A soak worker: one process playing a share of the soak's clients in one
 * poll loop. Each client connects (TCP or unix), takes and releases locks
 * at random with every option, and now and then misbehaves: closes with a
 * FIN or an RST, half-closes, stops reading for a while, or floods PING
 * without reading until the daemon cuts it off. It checks every reply
 * (right kind, in time) and reports grants, ends of holds, counters and
 * errors to the soak (soak.h); it never asserts, and the soak may SIGKILL
 * it at any moment.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostile_util.h"
#include "kltest.h"
#include "soak.h"

#define MAXHELD		3	/* grants one client holds at once */
#define IN_CAP		8192
#define OUT_CAP		1024

_Static_assert(sizeof(struct rec) <= PIPE_BUF, "records are atomic");

static uint64_t rng_state;

static uint32_t
rnd(uint32_t n)
{
	rng_state = mix64(rng_state);
	return n == 0 ? 0 : (uint32_t)(rng_state % n);
}

enum cstate {
	ST_OFF,		/* reconnect at wake */
	ST_CONNECTING,
	ST_IDLE,	/* next action at wake */
	ST_WAIT,	/* one request out */
	ST_STALL,	/* reads and writes nothing until wake */
	ST_HALF,	/* shut down for writing: replies, then EOF */
	ST_FLOOD	/* writes PING, never reads, until cut off */
};

enum req {
	RQ_LOCK, RQ_TRYLOCK, RQ_UNLOCK, RQ_UNLOCKALL, RQ_PING, RQ_STATS,
	RQ_INFO
};

struct grant {
	uint32_t	 gid;
	uint8_t		 nkeys;
	uint8_t		 shared;
	uint16_t	 keys[MAXK];
	uint32_t	 ttl_ms;
	uint64_t	 s_ns, a_ns;
};

struct client {
	int		 fd;
	enum cstate	 st;
	uint32_t	 id;
	uint64_t	 wake;
	char		 in[IN_CAP];
	size_t		 inlen;
	char		 out[OUT_CAP];
	size_t		 outlen;
	/* the request out */
	enum req	 rq;
	struct grant	 want;		/* keys of LOCK or UNLOCK */
	int64_t		 timeout_ms;	/* -1: none */
	bool		 max_waiters;
	bool		 lenient;	/* sent before a stall */
	uint64_t	 sent, deadline;
	uint64_t	 shut;		/* when it half-closed */
	int		 unlock_of;	/* held[] index; -1: UNLOCKALL */
	unsigned	 ua_min, ua_max;	/* UNLOCKALL's count */
	bool		 holding;	/* held something when it asked */
	/* holds */
	struct grant	 held[MAXHELD];
	int		 nheld;
	uint32_t	 next_gid;
	uint64_t	 flood_start;
};

struct worker {
	int		 pipe;
	uint32_t	 inc;
	int64_t		 slack_ms;
	struct client	*cl;
	int		 ncl;
	uint32_t	 next_client;
	int		 nflood;
	uint64_t	 cnt[NCNT];
	uint64_t	 last_count;
};

static volatile sig_atomic_t worker_stop;

static void
worker_term_cb(int sig)
{
	(void)sig;
	worker_stop = 1;
}

static void
w_send_rec(struct worker *w, struct rec *r)
{
	ssize_t	n;

	r->inc = w->inc;
	while ((n = write(w->pipe, r, sizeof(*r))) == -1 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(*r))
		_exit(3);
}

static void __attribute__((format(printf, 3, 4)))
w_error(struct worker *w, struct client *c, const char *fmt, ...)
{
	struct rec	r;
	va_list		ap;
	int		n;

	memset(&r, 0, sizeof(r));
	r.type = REC_ERROR;
	r.client = c != NULL ? c->id : 0;
	n = snprintf(r.msg, sizeof(r.msg), "worker %u client %u: ", w->inc,
	    r.client);
	va_start(ap, fmt);
	vsnprintf(r.msg + n, sizeof(r.msg) - (size_t)n, fmt, ap);
	va_end(ap);
	w_send_rec(w, &r);
}

static void
w_counts(struct worker *w)
{
	struct rec	r;

	memset(&r, 0, sizeof(r));
	r.type = REC_COUNT;
	memcpy(r.cnt, w->cnt, sizeof(r.cnt));
	w_send_rec(w, &r);
	w->last_count = kt_now_ns();
}

static void
w_end(struct worker *w, struct client *c, const struct grant *g,
    unsigned key, uint64_t t)
{
	struct rec	r;

	memset(&r, 0, sizeof(r));
	r.type = REC_END;
	r.client = c->id;
	r.gid = g->gid;
	r.keys[0] = (uint16_t)key;
	r.a_ns = t;
	w_send_rec(w, &r);
}

/* Every hold ends now, as far as this client can tell. */
static void
w_end_all(struct worker *w, struct client *c, uint64_t t)
{
	for (int i = 0; i < c->nheld; i++)
		w_end(w, c, &c->held[i], KEY_ALL, t);
	c->nheld = 0;
}

static void
w_drop_held(struct client *c, int i)
{
	c->held[i] = c->held[--c->nheld];
}

static void
w_go_off(struct worker *w, struct client *c, uint64_t delay_ms)
{
	if (c->st == ST_FLOOD)
		w->nflood--;
	c->fd = -1;
	c->st = ST_OFF;
	c->inlen = c->outlen = 0;
	c->nheld = 0;
	c->wake = kt_now_ns() + delay_ms * 1000000ULL;
}

static void
w_close(struct worker *w, struct client *c, bool rst)
{
	w_end_all(w, c, kt_now_ns());
	if (rst)
		hu_close_rst(c->fd);
	else
		close(c->fd);
	w_go_off(w, c, rnd(50));
}

static void
w_connect(struct worker *w, struct client *c)
{
	enum kt_transport t = rnd(2) ? KT_UNIX : KT_TCP;

	c->id = w->next_client++;
	c->next_gid = 0;
	c->nheld = 0;
	c->inlen = c->outlen = 0;
	if ((c->fd = hu_socket(kt_d, t, 0)) == -1) {
		w_error(w, c, "connect: %s", strerror(errno));
		w_go_off(w, c, 100);
		return;
	}
	w->cnt[C_CONNECTS]++;
	c->st = t == KT_TCP ? ST_CONNECTING : ST_IDLE;
	c->wake = kt_now_ns();
}

static bool
w_flush(struct worker *w, struct client *c)
{
	while (c->outlen > 0) {
		ssize_t n = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL |
		    MSG_DONTWAIT);

		if (n > 0) {
			memmove(c->out, c->out + n, c->outlen - (size_t)n);
			c->outlen -= (size_t)n;
			continue;
		}
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		if (n == -1 && errno == EINTR)
			continue;
		w_error(w, c, "send: %s", strerror(errno));
		w_close(w, c, false);
		return false;
	}
	return true;
}

static bool
w_held_has(const struct client *c, unsigned key)
{
	for (int i = 0; i < c->nheld; i++)
		for (int k = 0; k < c->held[i].nkeys; k++)
			if (c->held[i].keys[k] == key)
				return true;
	return false;
}

static unsigned
w_pick_plain(void)
{
	return rnd(4) == 0 ? rnd(NHOT) : rnd(NPLAIN);
}

/* Chooses the keys of a LOCK; false if they clash with what is held. */
static bool
w_pick_keys(struct client *c, struct grant *g)
{
	uint32_t r = rnd(100);

	g->nkeys = 0;
	g->shared = 0;
	if (r < 15) {				/* semaphore */
		unsigned k = NPLAIN + rnd(NSEM);

		g->keys[g->nkeys++] = (uint16_t)k;
		if (rnd(3) == 0)		/* same limit */
			g->keys[g->nkeys++] = (uint16_t)(NPLAIN +
			    (k - NPLAIN + 3) % NSEM);
	} else {
		unsigned n = r < 30 ? 2 + rnd(MAXK - 1) : 1;

		for (unsigned i = 0; i < n; i++) {
			unsigned k = w_pick_plain();
			bool	 dup = false;

			for (unsigned j = 0; j < g->nkeys; j++)
				dup |= g->keys[j] == k;
			if (!dup)
				g->keys[g->nkeys++] = (uint16_t)k;
		}
		g->shared = rnd(4) == 0;
	}
	for (int i = 0; i < g->nkeys; i++)
		if (w_held_has(c, g->keys[i]))
			return false;
	return true;
}

static void
w_append(struct client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
w_append(struct client *c, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vsnprintf(c->out + c->outlen, OUT_CAP - c->outlen, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < OUT_CAP - c->outlen)
		c->outlen += (size_t)n;
}

static void
w_append_keys(struct client *c, const struct grant *g)
{
	char	name[16];

	for (int i = 0; i < g->nkeys; i++) {
		key_name(name, sizeof(name), g->keys[i]);
		w_append(c, " %s", name);
	}
}

/* Sends the request built in c->out and starts its clock. */
static void
w_sent(struct worker *w, struct client *c, enum req rq, int64_t timeout_ms)
{
	c->rq = rq;
	c->timeout_ms = timeout_ms;
	c->sent = kt_now_ns();
	c->lenient = false;
	c->holding = c->nheld > 0;
	c->deadline = c->sent + (uint64_t)((timeout_ms > 0 ? timeout_ms : 0) +
	    w->slack_ms) * 1000000ULL;
	c->st = ST_WAIT;
	w->cnt[C_OPS]++;
	w_flush(w, c);
}

static void
w_request_lock(struct worker *w, struct client *c)
{
	struct grant	*g = &c->want;
	uint32_t	 r = rnd(100);
	int64_t		 timeout = -1;
	enum req	 rq = RQ_LOCK;

	if (c->nheld >= MAXHELD || !w_pick_keys(c, g)) {
		w_append(c, "PING\n");
		w_sent(w, c, RQ_PING, 0);
		return;
	}
	if (r < 20)
		rq = RQ_TRYLOCK;
	else if (r < 25)
		timeout = 0;
	else
		timeout = 10 + rnd(1000);
	g->ttl_ms = rnd(5) == 0 ? 100 + rnd(900) : 0;
	g->s_ns = 0;
	c->max_waiters = rnd(20) == 0;
	w_append(c, "%s", rq == RQ_TRYLOCK ? "TRYLOCK" : "LOCK");
	w_append_keys(c, g);
	if (timeout >= 0)
		w_append(c, " timeout=%lld", (long long)timeout);
	if (g->shared)
		w_append(c, " mode=shared");
	if (g->keys[0] >= NPLAIN)
		w_append(c, " limit=%u", sem_limit(g->keys[0]));
	if (g->ttl_ms)
		w_append(c, " ttl=%u", g->ttl_ms);
	if (c->max_waiters)
		w_append(c, " max_waiters=%u", rnd(4));
	w_append(c, "\n");
	w_sent(w, c, rq, rq == RQ_TRYLOCK ? 0 : timeout);
}

static void
w_request_release(struct worker *w, struct client *c)
{
	int		 i = (int)rnd((uint32_t)c->nheld);
	struct grant	*h = &c->held[i];
	uint32_t	 r = rnd(100);
	uint64_t	 t = kt_now_ns();

	if (r < 10) {
		/* a hold with a ttl may be gone already */
		c->ua_min = c->ua_max = 0;
		for (int j = 0; j < c->nheld; j++) {
			c->ua_max += c->held[j].nkeys;
			c->ua_min += c->held[j].ttl_ms ? 0 : c->held[j].nkeys;
		}
		w_append(c, "UNLOCKALL\n");
		c->unlock_of = -1;
		w_end_all(w, c, t);
		w_sent(w, c, RQ_UNLOCKALL, 0);
		return;
	}
	c->unlock_of = i;
	c->want = *h;
	if (r < 25 && h->nkeys > 1) {
		/* one key of a multi-key grant */
		c->want.nkeys = 1;
		c->want.keys[0] = h->keys[rnd(h->nkeys)];
	}
	w_append(c, "UNLOCK");
	w_append_keys(c, &c->want);
	w_append(c, "\n");
	for (int k = 0; k < c->want.nkeys; k++)
		w_end(w, c, h, c->want.keys[k], t);
	w_sent(w, c, RQ_UNLOCK, 0);
}

/* The chaos one client does to itself; true if it did something. */
static bool
w_chaos(struct worker *w, struct client *c)
{
	uint32_t r = rnd(1000);

	if (r < 4) {
		w->cnt[C_CLOSES]++;
		w_close(w, c, false);
	} else if (r < 7) {
		w->cnt[C_RSTS]++;
		w_close(w, c, true);
	} else if (r < 10) {
		/* half-close, sometimes right after a LOCK */
		w->cnt[C_HALFCLOSES]++;
		c->rq = RQ_PING;
		if (rnd(2) && c->nheld < MAXHELD && w_pick_keys(c, &c->want)) {
			unsigned tmo = 10 + rnd(500);

			c->want.ttl_ms = 0;
			c->max_waiters = false;
			w_append(c, "LOCK");
			w_append_keys(c, &c->want);
			if (c->want.shared)
				w_append(c, " mode=shared");
			if (c->want.keys[0] >= NPLAIN)
				w_append(c, " limit=%u",
				    sem_limit(c->want.keys[0]));
			w_append(c, " timeout=%u\n", tmo);
			w_sent(w, c, RQ_LOCK, tmo);
			if (c->fd == -1)
				return true;
		}
		c->shut = kt_now_ns();
		w_end_all(w, c, c->shut);
		shutdown(c->fd, SHUT_WR);
		c->st = ST_HALF;
		c->deadline = c->shut + (uint64_t)w->slack_ms * 1000000ULL;
	} else if (r < 13) {
		/* stop reading, sometimes with a LOCK out */
		w->cnt[C_STALLS]++;
		c->lenient = false;
		if (rnd(2)) {
			w_request_lock(w, c);
			if (c->fd == -1)
				return true;
			c->lenient = true;
		}
		c->st = ST_STALL;
		c->wake = kt_now_ns() + (100 + rnd(1400)) * 1000000ULL;
	} else if (r < 14 && w->nflood == 0) {
		w->cnt[C_FLOODS]++;
		w->nflood++;
		c->flood_start = kt_now_ns();
		w_end_all(w, c, c->flood_start);
		c->st = ST_FLOOD;
		c->deadline = c->flood_start + (uint64_t)(20000 +
		    w->slack_ms) * 1000000ULL;
	} else
		return false;
	return true;
}

static void
w_idle(struct worker *w, struct client *c)
{
	uint32_t r;

	if (worker_stop || w_chaos(w, c))
		return;
	r = rnd(100);
	if (c->nheld > 0 && (r < 85 || c->nheld >= MAXHELD))
		w_request_release(w, c);
	else if (r < 92 || c->nheld > 0)
		w_request_lock(w, c);
	else if (r < 95) {
		w_append(c, "STATS\n");
		w_sent(w, c, RQ_STATS, 0);
	} else if (r < 97) {
		char name[16];

		key_name(name, sizeof(name), rnd(NKEYS));
		w_append(c, "INFO %s\n", name);
		w_sent(w, c, RQ_INFO, 0);
	} else {
		w_append(c, "PING\n");
		w_sent(w, c, RQ_PING, 0);
	}
}

static bool
line_is(const char *line, size_t len, const char *s)
{
	return len == strlen(s) && memcmp(line, s, len) == 0;
}

static bool
line_err(const char *line, size_t len, const char *code)
{
	size_t n = strlen(code);

	return len > 5 + n && memcmp(line, "ERR ", 4) == 0 &&
	    memcmp(line + 4, code, n) == 0 && line[4 + n] == ' ';
}

static bool
line_ok_num(const char *line, size_t len, uint64_t *v)
{
	char	 buf[32];
	char	*end;

	if (len < 4 || len > 24 || memcmp(line, "OK ", 3) != 0)
		return false;
	memcpy(buf, line + 3, len - 3);
	buf[len - 3] = '\0';
	errno = 0;
	*v = strtoull(buf, &end, 10);
	return errno == 0 && *end == '\0' && buf[0] >= '0' && buf[0] <= '9';
}

static void
w_reply_lock(struct worker *w, struct client *c, const char *line,
    size_t len, uint64_t t)
{
	struct grant	*g = &c->want;
	uint64_t	 token;

	if (line_ok_num(line, len, &token)) {
		struct rec r;

		memset(&r, 0, sizeof(r));
		r.type = REC_GRANT;
		r.client = c->id;
		r.gid = c->next_gid++;
		r.nkeys = g->nkeys;
		r.shared = g->shared;
		memcpy(r.keys, g->keys, sizeof(r.keys));
		r.ttl_ms = g->ttl_ms;
		r.s_ns = c->sent;
		r.a_ns = t;
		r.token = token;
		w_send_rec(w, &r);
		w->cnt[C_GRANTS]++;
		if (c->st == ST_HALF) {
			w_end(w, c, &(struct grant){ .gid = r.gid }, KEY_ALL,
			    c->shut);
			return;
		}
		g->gid = r.gid;
		g->s_ns = c->sent;
		g->a_ns = t;
		c->held[c->nheld++] = *g;
		return;
	}
	if (line_err(line, len, "TIMEOUT") && c->rq == RQ_LOCK &&
	    c->timeout_ms > 0) {
		uint64_t due = c->sent + (uint64_t)c->timeout_ms * 1000000ULL;

		if (t < due && (due - t) / 1000 > w->cnt[C_EARLY_US_MAX])
			w->cnt[C_EARLY_US_MAX] = (due - t) / 1000;
		if (t + TIMEOUT_SLOP_NS < due)
			w_error(w, c, "ERR TIMEOUT after %.1f ms for timeout="
			    "%lld", (double)(t - c->sent) / 1e6,
			    (long long)c->timeout_ms);
		w->cnt[C_TIMEOUTS]++;
	} else if (line_err(line, len, "LOCKED") && (c->rq == RQ_TRYLOCK ||
	    c->timeout_ms == 0))
		w->cnt[C_LOCKED]++;
	else if (line_err(line, len, "DEADLOCK") && c->holding)
		w->cnt[C_DEADLOCKS]++;
	else if (line_err(line, len, "BUSY") && c->max_waiters)
		w->cnt[C_BUSY]++;
	else
		w_error(w, c, "%s: unexpected \"%s\"", c->rq == RQ_LOCK ?
		    "LOCK" : "TRYLOCK", kt_esc(line, len));
}

static void
w_reply_unlock(struct worker *w, struct client *c, const char *line,
    size_t len, uint64_t t)
{
	struct grant	*h = &c->held[c->unlock_of];
	uint64_t	 n;

	if (line_ok_num(line, len, &n) && n == c->want.nkeys) {
		/* the keys are gone; a multi-key grant may keep some */
		for (int k = 0; k < c->want.nkeys; k++)
			for (int j = 0; j < h->nkeys; j++)
				if (h->keys[j] == c->want.keys[k]) {
					h->keys[j] = h->keys[--h->nkeys];
					break;
				}
		if (h->nkeys == 0)
			w_drop_held(c, c->unlock_of);
		return;
	}
	if (line_err(line, len, "NOTHELD") && h->ttl_ms > 0) {
		/* it expired: only once request + ttl has passed */
		if (t + TTL_SLOP_NS < h->s_ns + (uint64_t)h->ttl_ms *
		    1000000ULL)
			w_error(w, c, "ERR NOTHELD %.1f ms after a request "
			    "with ttl=%u", (double)(t - h->s_ns) / 1e6,
			    h->ttl_ms);
		w->cnt[C_NOTHELD_TTL]++;
		w_end(w, c, h, KEY_ALL, t);
		w_drop_held(c, c->unlock_of);
		return;
	}
	w_error(w, c, "UNLOCK of %u keys: unexpected \"%s\"", c->want.nkeys,
	    kt_esc(line, len));
	w_end(w, c, h, KEY_ALL, t);
	w_drop_held(c, c->unlock_of);
}

/* Handles one reply line of c; t is when it was read. */
static void
w_reply(struct worker *w, struct client *c, const char *line, size_t len,
    uint64_t t)
{
	uint64_t lat = t - c->sent, n;

	if (c->st != ST_WAIT && c->st != ST_HALF && c->st != ST_STALL) {
		w_error(w, c, "a reply nobody asked for: \"%s\"",
		    kt_esc(line, len));
		return;
	}
	if (c->rq == RQ_LOCK || c->rq == RQ_TRYLOCK) {
		uint64_t tmo_us = (uint64_t)c->timeout_ms * 1000;

		if (c->timeout_ms > 0 && !c->lenient && lat / 1000 > tmo_us &&
		    lat / 1000 - tmo_us > w->cnt[C_LATE_US_MAX])
			w->cnt[C_LATE_US_MAX] = lat / 1000 - tmo_us;
		w_reply_lock(w, c, line, len, t);
	} else if (c->rq == RQ_UNLOCK)
		w_reply_unlock(w, c, line, len, t);
	else if (c->rq == RQ_UNLOCKALL) {
		if (!line_ok_num(line, len, &n) || n < c->ua_min ||
		    n > c->ua_max)
			w_error(w, c, "UNLOCKALL holding %u keys (%u without "
			    "ttl): unexpected \"%s\"", c->ua_max, c->ua_min,
			    kt_esc(line, len));
	} else if (c->rq == RQ_PING) {
		if (!line_is(line, len, "OK PONG"))
			w_error(w, c, "PING: unexpected \"%s\"",
			    kt_esc(line, len));
	} else if (len < 4 || memcmp(line, "OK {", 4) != 0) {
		/* INFO of a key not in the table may be an error */
		if (c->rq != RQ_INFO || memcmp(line, "ERR ", 4) != 0)
			w_error(w, c, "%s: unexpected \"%s\"", c->rq ==
			    RQ_INFO ? "INFO" : "STATS", kt_esc(line, len));
	}
	if ((c->timeout_ms <= 0 || c->rq != RQ_LOCK) && !c->lenient &&
	    lat / 1000 > w->cnt[C_WAIT_US_MAX])
		w->cnt[C_WAIT_US_MAX] = lat / 1000;
	if (t > c->deadline)
		w_error(w, c, "reply %.0f ms after the request (timeout %lld "
		    "ms, slack %lld ms): \"%s\"", (double)lat / 1e6,
		    (long long)c->timeout_ms, (long long)w->slack_ms,
		    kt_esc(line, len));
	if (c->st == ST_WAIT) {
		c->st = ST_IDLE;
		/* hold a fresh grant a little; otherwise think briefly */
		c->wake = t + (uint64_t)(c->rq == RQ_LOCK ||
		    c->rq == RQ_TRYLOCK ? rnd(40) : rnd(10)) * 1000000ULL;
	}
}

/* Reads what is there; false if the connection ended. */
static bool
w_read(struct worker *w, struct client *c)
{
	uint64_t	t;
	ssize_t		n;
	char		*lf;

	n = recv(c->fd, c->in + c->inlen, IN_CAP - c->inlen, MSG_DONTWAIT);
	t = kt_now_ns();
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		return true;
	if (n <= 0) {
		if (c->st != ST_HALF)
			w_error(w, c, "the daemon closed a well-behaved "
			    "client (%s, state %d, %zu bytes unread)",
			    n == 0 ? "EOF" : strerror(errno), c->st,
			    c->inlen);
		else if (t > c->deadline)
			w_error(w, c, "EOF %.0f ms after the half-close",
			    (double)(t - c->shut) / 1e6);
		w_end_all(w, c, t);
		close(c->fd);
		w_go_off(w, c, rnd(50));
		return false;
	}
	c->inlen += (size_t)n;
	while ((lf = memchr(c->in, '\n', c->inlen)) != NULL) {
		size_t len = (size_t)(lf - c->in);

		w_reply(w, c, c->in, len, t);
		memmove(c->in, lf + 1, c->inlen - len - 1);
		c->inlen -= len + 1;
	}
	if (c->inlen == IN_CAP) {
		w_error(w, c, "a reply line over %d bytes", IN_CAP);
		w_close(w, c, false);
		return false;
	}
	return true;
}

static void
w_flood(struct worker *w, struct client *c)
{
	static const char batch[] = "PING\nPING\nPING\nPING\nPING\nPING\n"
	    "PING\nPING\nPING\nPING\nPING\nPING\nPING\nPING\nPING\nPING\n";
	ssize_t	n;

	for (int i = 0; i < 64; i++) {
		n = send(c->fd, batch, sizeof(batch) - 1, MSG_NOSIGNAL |
		    MSG_DONTWAIT);
		if (n > 0)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		/* cut off: EPIPE or ECONNRESET, as max-output promises */
		w->cnt[C_FLOOD_CUT]++;
		close(c->fd);
		w_go_off(w, c, rnd(50));
		return;
	}
	if (kt_now_ns() > c->deadline) {
		w_error(w, c, "flooding without reading for %.0f s and not "
		    "cut off at max-output", (double)(kt_now_ns() -
		    c->flood_start) / 1e9);
		close(c->fd);
		w_go_off(w, c, 0);
	}
}

/*
 * One client's turn before the poll: whatever is due now. Returns the
 * events to poll for (0: none) and lowers *next to its next deadline.
 */
static short
w_step(struct worker *w, struct client *c, uint64_t t, uint64_t *next)
{
	bool timed = c->st == ST_OFF || c->st == ST_IDLE || c->st == ST_STALL;

	if (timed && c->wake <= t) {
		if (c->st == ST_OFF)
			w_connect(w, c);
		else if (c->st == ST_IDLE)
			w_idle(w, c);
		else {
			/* the stall is over: a LOCK sent before it is due */
			c->st = c->lenient ? ST_WAIT : ST_IDLE;
			c->deadline = t + (uint64_t)((c->timeout_ms > 0 ?
			    c->timeout_ms : 0) + w->slack_ms) * 1000000ULL;
		}
	}
	if (c->st == ST_FLOOD)
		w_flood(w, c);
	if (c->st == ST_WAIT || c->st == ST_HALF) {
		uint64_t due = c->deadline + 100000000ULL;

		if (t > due) {
			w_error(w, c, "no %s within %.0f ms (a lost wake-up?)",
			    c->st == ST_HALF ? "EOF after a half-close" :
			    "reply", (double)(t - (c->st == ST_HALF ? c->shut :
			    c->sent)) / 1e6);
			w_close(w, c, false);
		} else if (due < *next)
			*next = due;
	}
	if ((c->st == ST_OFF || c->st == ST_IDLE || c->st == ST_STALL) &&
	    c->wake < *next)
		*next = c->wake;
	if (c->fd == -1 || c->st == ST_STALL)
		return 0;
	if (c->st == ST_FLOOD)
		return POLLOUT;
	return c->st == ST_CONNECTING || c->outlen > 0 ? POLLIN | POLLOUT :
	    POLLIN;
}

/* One client's turn after the poll. */
static void
w_events(struct worker *w, struct client *c, short revents)
{
	if (c->st == ST_CONNECTING) {
		if (!hu_connected(c->fd, 0)) {
			w_error(w, c, "TCP connect failed");
			close(c->fd);
			w_go_off(w, c, 100);
			return;
		}
		c->st = ST_IDLE;
	}
	if (c->st == ST_FLOOD)
		return;
	if ((revents & POLLOUT) && !w_flush(w, c))
		return;
	if (revents & (POLLIN | POLLHUP | POLLERR))
		w_read(w, c);
}

void
worker_main(int pipefd, uint32_t inc, uint64_t seed, int nclients,
    int64_t slack_ms)
{
	struct worker	 w;
	struct pollfd	*pfd;
	int		*map;

	signal(SIGTERM, worker_term_cb);
	signal(SIGPIPE, SIG_IGN);
	memset(&w, 0, sizeof(w));
	w.pipe = pipefd;
	w.inc = inc;
	w.slack_ms = slack_ms;
	w.ncl = nclients;
	rng_state = mix64(seed ^ ((uint64_t)inc << 32));
	w.cl = calloc((size_t)nclients, sizeof(*w.cl));
	pfd = calloc((size_t)nclients, sizeof(*pfd));
	map = calloc((size_t)nclients, sizeof(*map));
	if (w.cl == NULL || pfd == NULL || map == NULL)
		_exit(4);
	for (int i = 0; i < nclients; i++) {
		w.cl[i].st = ST_OFF;
		w.cl[i].fd = -1;
		w.cl[i].wake = kt_now_ns() + rnd(200) * 1000000ULL;
	}
	while (!worker_stop) {
		uint64_t t = kt_now_ns(), next = t + 100000000ULL;
		int	 np = 0;

		for (int i = 0; i < nclients; i++) {
			short ev = w_step(&w, &w.cl[i], t, &next);

			if (ev == 0)
				continue;
			pfd[np] = (struct pollfd){ w.cl[i].fd, ev, 0 };
			map[np++] = i;
		}
		t = kt_now_ns();
		if (poll(pfd, (nfds_t)np, next > t ? (int)((next - t) /
		    1000000) : 0) == -1 && errno != EINTR)
			_exit(5);
		for (int j = 0; j < np; j++)
			if (pfd[j].revents != 0 && w.cl[map[j]].fd == pfd[j].fd)
				w_events(&w, &w.cl[map[j]], pfd[j].revents);
		if (kt_now_ns() - w.last_count > 500000000ULL)
			w_counts(&w);
	}
	for (int i = 0; i < nclients; i++)
		if (w.cl[i].fd != -1) {
			w_end_all(&w, &w.cl[i], kt_now_ns());
			close(w.cl[i].fd);
		}
	w_counts(&w);
	_exit(0);
}
