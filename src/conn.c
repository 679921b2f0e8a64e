/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One client. Bytes arrive with one recv() per readable event, straight
 * into the server's scratch buffer; complete lines are handled in place and
 * only a remainder (a partial line, or lines queued behind a waiting LOCK)
 * is copied into the connection's own buffer, so an idle client holds no
 * buffer at all. Replies collect in one output buffer written with one
 * send() per turn. A line is never longer than max-line, unread output
 * never more than max-output, and conn_close() is the only way out.
 */
#include <sys/socket.h>
#include <sys/types.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "commands.h"
#include "conn.h"
#include "locktable.h"
#include "log.h"
#include "proto.h"
#include "server.h"
#include "tls.h"
#include "util.h"

#define CONN_IBUF_MIN	256
#define CONN_OBUF_MIN	512	/* kept while empty, freed when bigger */

struct conn {
	TAILQ_ENTRY(conn)	 entry;		/* srv->conns */
	TAILQ_ENTRY(conn)	 qentry;	/* srv->runq or srv->dead */
	TAILQ_ENTRY(conn)	 dentry;	/* srv->deferred */
	struct server		*srv;
	struct lt_owner		*owner;
	struct event		*rev;		/* readable (or closed) */
	struct event		*wev;		/* writable, while output waits */
	struct event		*timer;		/* the wait's timeout */
	char			*ibuf;		/* unhandled input */
	size_t			 ilen, icap;
	char			*obuf;		/* unsent replies */
	size_t			 ooff, olen, ocap;
	size_t			 produced;	/* reply bytes this turn */
	char			*name;
	struct tls_conn		*tls;		/* NULL: plain */
	uint64_t		 id;
	int			 fd;
	bool			 waiting;	/* a LOCK is queued */
	bool			 discarding;	/* inside an overlong line */
	bool			 quitting;	/* close once output is out */
	bool			 closed;
	bool			 queued;	/* on srv->runq */
	bool			 deferred;	/* on srv->deferred: turn used up */
	const char		*eof;		/* why input ended, or NULL */
	bool			 read_paused;	/* ibuf full: watch for close */
	bool			 authed;
	bool			 tls_read_wants_write;
	bool			 wev_armed;	/* wev is added */
	char			 peer[64];
};

static void	conn_read_cb(evutil_socket_t, short, void *);
static void	conn_write_cb(evutil_socket_t, short, void *);
static void	conn_timer_cb(evutil_socket_t, short, void *);
static void	conn_schedule(struct conn *c);
static void	conn_run(struct conn *c);
static void	conn_defer(struct conn *c);
static void	conn_finish(struct conn *c);

struct conn *
conn_new(struct server *srv, int fd, const char *peer)
{
	struct conn	*c;

	if ((c = kl_calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->srv = srv;
	c->fd = fd;
	c->id = ++srv->next_id;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->rev = event_new(srv->base, fd, EV_READ | EV_PERSIST, conn_read_cb,
	    c);
	c->wev = event_new(srv->base, fd, EV_WRITE | EV_PERSIST,
	    conn_write_cb, c);
	c->owner = locktable_owner_new(srv->lt, c->id, c);
	if (c->rev == NULL || c->wev == NULL || c->owner == NULL ||
	    event_add(c->rev, NULL) == -1) {
		if (c->rev != NULL)
			event_free(c->rev);
		if (c->wev != NULL)
			event_free(c->wev);
		locktable_owner_free(srv->lt, c->owner, 0);
		kl_free(c);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&srv->conns, c, entry);
	srv->stats.clients++;
	srv->stats.connections++;
	log_debug("client %" PRIu64 ": connected from %s", c->id, c->peer);
	return c;
}

void
conn_close(struct conn *c, const char *reason)
{
	struct server	*srv = c->srv;

	if (c->closed)
		return;
	c->closed = true;
	log_debug("client %" PRIu64 " (%s): closed: %s", c->id,
	    c->name != NULL ? c->name : "-", reason);
	locktable_owner_free(srv->lt, c->owner, kl_now_ms());
	c->owner = NULL;
	event_free(c->rev);
	event_free(c->wev);
	if (c->timer != NULL)
		event_free(c->timer);
	c->rev = c->wev = c->timer = NULL;
	tls_conn_free(c->tls);
	c->tls = NULL;
	close(c->fd);
	c->fd = -1;
	if (c->queued)
		TAILQ_REMOVE(&srv->runq, c, qentry);
	if (c->deferred)
		TAILQ_REMOVE(&srv->deferred, c, dentry);
	c->queued = c->deferred = false;
	TAILQ_REMOVE(&srv->conns, c, entry);
	TAILQ_INSERT_TAIL(&srv->dead, c, qentry);
	srv->stats.clients--;
}

/* Watches for writability only while output waits: no epoll_ctl or
 * libevent bookkeeping per flush. */
static void
conn_arm_write(struct conn *c, bool on)
{
	if (c->wev_armed == on)
		return;
	if (on)
		event_add(c->wev, NULL);
	else
		event_del(c->wev);
	c->wev_armed = on;
}

/* One send(2), or one SSL_write; a write that waits for the peer's
 * bytes simply resumes after the next read. */
static ssize_t
conn_send(struct conn *c, const char *p, size_t n)
{
	bool	want_read;

	if (c->tls != NULL)
		return tls_write(c->tls, p, n, &want_read);
	return send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Sends what is pending; returns false if the connection was closed. */
static bool
conn_flush(struct conn *c)
{
	ssize_t	n;

	if (c->ooff == c->olen && !c->quitting)
		return true;
	while (c->ooff < c->olen) {
		n = conn_send(c, c->obuf + c->ooff, c->olen - c->ooff);
		if (n > 0) {
			c->ooff += (size_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			conn_arm_write(c, true);
			return true;
		}
		conn_close(c, n == -1 ? strerror(errno) : "send failed");
		return false;
	}
	c->ooff = c->olen = 0;
	if (c->ocap > CONN_OBUF_MIN) {
		kl_free(c->obuf);
		c->obuf = NULL;
		c->ocap = 0;
	}
	if (!c->tls_read_wants_write)
		conn_arm_write(c, false);
	if (c->quitting) {
		conn_close(c, "quit");
		return false;
	}
	return true;
}

/* Makes room for n more output bytes; closes the client past max-output. */
static bool
conn_reserve(struct conn *c, size_t n)
{
	size_t	 need, cap;
	char	*p;

	if (c->closed)
		return false;
	if (c->ooff > 0 && c->olen + n > c->ocap) {
		memmove(c->obuf, c->obuf + c->ooff, c->olen - c->ooff);
		c->olen -= c->ooff;
		c->ooff = 0;
	}
	need = c->olen + n;
	if (need <= c->ocap)
		return true;
	if (need > (size_t)c->srv->cfg->max_output && !conn_flush(c))
		return false;
	need = c->olen - c->ooff + n;
	if (need > (size_t)c->srv->cfg->max_output) {
		c->srv->stats.output_closes++;
		conn_close(c, "unread replies over max-output");
		return false;
	}
	if (c->ooff > 0) {
		memmove(c->obuf, c->obuf + c->ooff, c->olen - c->ooff);
		c->olen -= c->ooff;
		c->ooff = 0;
	}
	if (need <= c->ocap)
		return true;
	cap = c->ocap > 0 ? c->ocap : CONN_OBUF_MIN;
	while (cap < need)
		cap *= 2;
	if ((p = kl_realloc(c->obuf, cap)) == NULL) {
		log_warnx("client %" PRIu64 ": out of memory for replies",
		    c->id);
		conn_close(c, "out of memory");
		return false;
	}
	c->obuf = p;
	c->ocap = cap;
	return true;
}

static void __attribute__((format(printf, 3, 0)))
conn_vappend(struct conn *c, const char *head, const char *fmt, va_list ap)
{
	char	 small[512];
	va_list	 ap2;
	size_t	 hlen = strlen(head);
	int	 n;

	va_copy(ap2, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap2);
	va_end(ap2);
	if (n < 0)
		n = 0;
	if (!conn_reserve(c, hlen + (size_t)n + 2))
		return;
	memcpy(c->obuf + c->olen, head, hlen);
	c->olen += hlen;
	if (n > 0)
		c->obuf[c->olen++] = ' ';
	if ((size_t)n < sizeof(small))
		memcpy(c->obuf + c->olen, small, (size_t)n);
	else
		vsnprintf(c->obuf + c->olen, (size_t)n + 1, fmt, ap);
	c->olen += (size_t)n;
	c->obuf[c->olen++] = '\n';
	c->produced += hlen + (size_t)n + 2;
	conn_schedule(c);
}

void
conn_reply_ok(struct conn *c, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	conn_vappend(c, "OK", fmt, ap);
	va_end(ap);
}

void
conn_reply_ok_str(struct conn *c, const char *s)
{
	size_t	n = strlen(s);

	if (!conn_reserve(c, n + 4))
		return;
	memcpy(c->obuf + c->olen, "OK ", 3);
	memcpy(c->obuf + c->olen + 3, s, n);
	c->olen += n + 3;
	c->obuf[c->olen++] = '\n';
	c->produced += n + 4;
	conn_schedule(c);
}

/* "OK N": the reply of most requests, formatted in place without printf. */
void
conn_reply_u64(struct conn *c, uint64_t v)
{
	size_t	n = kl_u64_len(v);
	char	*p;

	if (!conn_reserve(c, n + 4))
		return;
	p = c->obuf + c->olen;
	memcpy(p, "OK ", 3);
	kl_u64_put(p + 3, n, v);
	p[3 + n] = '\n';
	c->olen += n + 4;
	c->produced += n + 4;
	conn_schedule(c);
}

void
conn_reply_err(struct conn *c, enum kl_err err, const char *fmt, ...)
{
	char	head[32];
	va_list	ap;

	c->srv->stats.errors++;
	snprintf(head, sizeof(head), "ERR %s", proto_err_word(err));
	va_start(ap, fmt);
	conn_vappend(c, head, fmt, ap);
	va_end(ap);
}

/* Handles one line (LF and one CR stripped). */
static void
conn_handle_line(struct conn *c, const char *line, size_t len)
{
	struct request	*req = &c->srv->req;
	enum kl_err	 err;

	err = proto_parse(line, len, req);
	if (err == KL_OK && req->cmd == CMD_NONE)
		return;	/* keylockd-protocol(7), TRANSPORT: empty lines get no reply */
	c->srv->stats.requests++;
	if (err != KL_OK)
		conn_reply_err(c, err, "%s", req->why);
	else
		commands_execute(c, req);
}

/*
 * Handles the complete lines in buf[0..len) until one waits; returns the
 * bytes consumed. A line longer than max-line is dropped up to its LF and
 * answered ERR TOOLONG (HACKING.md, Framing with a bound).
 */
static size_t
conn_process(struct conn *c, char *buf, size_t len)
{
	size_t	max = (size_t)c->srv->cfg->max_line, off = 0, handled = 0;

	c->produced = 0;

	while (off < len && !c->waiting && !c->closed && !c->quitting &&
	    !c->deferred) {
		char	*p = buf + off, *lf;
		size_t	 avail = len - off, n;

		/* One client's pipeline must not hold the loop: past its
		 * share of a turn, the rest waits for the next one. */
		if (handled == KL_TURN_REQUESTS ||
		    c->produced >= KL_TURN_OUTPUT) {
			conn_defer(c);
			break;
		}

		if (c->discarding) {
			if ((lf = memchr(p, '\n', avail)) == NULL)
				return len;
			off += (size_t)(lf - p) + 1;
			c->discarding = false;
			conn_reply_err(c, KL_ERR_TOOLONG,
			    "request line over %zu bytes", max);
			continue;
		}
		lf = memchr(p, '\n', avail < max ? avail : max);
		if (lf == NULL) {
			if (avail < max)
				break;
			c->discarding = true;	/* no LF in max bytes */
			off += max;
			continue;
		}
		n = (size_t)(lf - p);
		off += n + 1;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		conn_handle_line(c, p, n);
		handled++;
	}
	return off;
}

/* Keeps buf[0..len) as the unhandled input. */
static bool
conn_keep(struct conn *c, const char *buf, size_t len)
{
	size_t	 cap;
	char	*p;

	if (len == 0) {
		if (c->ibuf != NULL) {
			kl_free(c->ibuf);
			c->ibuf = NULL;
		}
		c->icap = c->ilen = 0;
		return true;
	}
	if (len > c->icap) {
		cap = c->icap > 0 ? c->icap : CONN_IBUF_MIN;
		while (cap < len)
			cap *= 2;
		if ((p = kl_realloc(c->ibuf, cap)) == NULL) {
			log_warnx("client %" PRIu64 ": out of memory for "
			    "input", c->id);
			conn_close(c, "out of memory");
			return false;
		}
		c->ibuf = p;
		c->icap = cap;
	}
	memmove(c->ibuf, buf, len);
	c->ilen = len;
	return true;
}

/* Most input held for one client: a full line plus one read's worth. */
static size_t
conn_input_cap(const struct conn *c)
{
	return (size_t)c->srv->cfg->max_line + KL_SCRATCH_SIZE;
}

/* While the input buffer is full, watch only for the peer going away. */
static void
conn_pause_reading(struct conn *c, bool pause)
{
	if (c->closed || c->read_paused == pause)
		return;
	event_del(c->rev);
	event_assign(c->rev, c->srv->base, c->fd,
	    (pause ? EV_CLOSED : EV_READ) | EV_PERSIST, conn_read_cb, c);
	event_add(c->rev, NULL);
	c->read_paused = pause;
}

/* One recv() into the scratch buffer, or after what is already held. */
static ssize_t
conn_recv(struct conn *c, char **buf, size_t *len)
{
	size_t	room, cap = conn_input_cap(c);
	ssize_t	n;

	if (c->ilen == 0) {
		*buf = c->srv->scratch;
		room = KL_SCRATCH_SIZE;
	} else {
		room = cap - c->ilen;
		if (room > KL_SCRATCH_SIZE)
			room = KL_SCRATCH_SIZE;
		if (c->ilen + room > c->icap) {
			size_t	ncap = c->icap;
			char	*p;

			while (ncap < c->ilen + room)
				ncap *= 2;
			if ((p = kl_realloc(c->ibuf, ncap)) == NULL)
				return -2;
			c->ibuf = p;
			c->icap = ncap;
		}
		*buf = c->ibuf;
	}
	if (room == 0) {
		errno = EAGAIN;
		return -1;
	}
	if (c->tls != NULL) {
		n = tls_read(c->tls, *buf + c->ilen, room,
		    &c->tls_read_wants_write);
		if (c->tls_read_wants_write)
			conn_arm_write(c, true);
	} else
		n = recv(c->fd, *buf + c->ilen, room, MSG_DONTWAIT);
	if (n > 0)
		*len = c->ilen + (size_t)n;
	return n;
}

/* Handles what is buffered and keeps the rest; false if c was closed. */
static bool
conn_consume(struct conn *c, char *buf, size_t len)
{
	size_t	used;

	if (len == 0)
		return !c->closed;	/* buf may be NULL: nothing held */
	used = c->waiting ? 0 : conn_process(c, buf, len);
	if (c->closed || !conn_keep(c, buf + used, len - used))
		return false;
	conn_pause_reading(c, c->ilen >= conn_input_cap(c));
	return true;
}

static void
conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;
	char		*buf;
	size_t		 len = 0;
	ssize_t		 n;

	kl_clock_hold();
	if (c->read_paused) {
		conn_close(c, "peer closed while its input was full");
	} else if ((n = conn_recv(c, &buf, &len)) > 0) {
		if (conn_consume(c, buf, len))
			conn_flush(c);
		if (c->tls != NULL)
			conn_schedule(c);	/* conn_run checks pending */
	} else if (n == -2) {
		log_warnx("client %" PRIu64 ": out of memory for input",
		    c->id);
		conn_close(c, "out of memory");
	} else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR)) {
		c->eof = n == 0 ? "end of input" : strerror(errno);
		event_del(c->rev);
		if (conn_consume(c, c->ibuf, c->ilen))
			conn_finish(c);
	}
	server_end_turn(c->srv);
	kl_clock_release();
}

static void
conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;

	if (c->tls_read_wants_write) {
		c->tls_read_wants_write = false;
		event_active(c->rev, EV_READ, 0);
	}
	if (conn_flush(c))
		conn_schedule(c);
	server_end_turn(c->srv);
}

static void
conn_schedule(struct conn *c)
{
	if (c->queued || c->closed)
		return;
	c->queued = true;
	TAILQ_INSERT_TAIL(&c->srv->runq, c, qentry);
}

/*
 * After the peer's end of input: answer the complete lines that came before
 * it, then go (keylockd-protocol(7): closing releases everything, a waiting
 * LOCK included).
 */
static void
conn_finish(struct conn *c)
{
	if (c->closed || c->eof == NULL || c->deferred)
		return;
	if (conn_flush(c))
		conn_close(c, c->eof);
}

static void
conn_run(struct conn *c)
{
	if (c->ilen > 0 && !c->waiting && !conn_consume(c, c->ibuf, c->ilen))
		return;
	if (c->eof != NULL) {
		conn_finish(c);
		return;
	}
	if (c->closed || !conn_flush(c))
		return;
	/* OpenSSL may hold decrypted bytes no socket event will announce. */
	if (c->tls != NULL && !c->waiting && !c->read_paused &&
	    tls_pending(c->tls))
		event_active(c->rev, EV_READ, 0);
}

bool
conn_start_tls(struct conn *c, struct tls_ctx *ctx)
{
	return (c->tls = tls_conn_new(ctx, c->fd)) != NULL;
}

static void
conn_defer(struct conn *c)
{
	static const struct timeval	now = { 0, 0 };

	if (c->deferred || c->closed)
		return;
	c->deferred = true;
	TAILQ_INSERT_TAIL(&c->srv->deferred, c, dentry);
	evtimer_add(c->srv->resume, &now);
}

void
conn_resume_deferred(struct server *srv)
{
	struct conn	*c;

	while ((c = TAILQ_FIRST(&srv->deferred)) != NULL) {
		TAILQ_REMOVE(&srv->deferred, c, dentry);
		c->deferred = false;
		conn_schedule(c);
	}
}

void
conn_run_queue(struct server *srv)
{
	struct conn	*c;

	while ((c = TAILQ_FIRST(&srv->runq)) != NULL) {
		TAILQ_REMOVE(&srv->runq, c, qentry);
		c->queued = false;
		conn_run(c);
	}
}

void
conn_free_dead(struct server *srv)
{
	struct conn	*c;

	while ((c = TAILQ_FIRST(&srv->dead)) != NULL) {
		TAILQ_REMOVE(&srv->dead, c, qentry);
		kl_free(c->ibuf);
		kl_free(c->obuf);
		kl_free(c->name);
		kl_free(c);
	}
}

void
conn_wait(struct conn *c, int64_t timeout_ms, uint64_t start_ms)
{
	struct timeval	tv;
	uint64_t	now = kl_now_ms(), left;

	c->waiting = true;
	if (timeout_ms < 0)
		return;
	if (c->timer == NULL && (c->timer = evtimer_new(c->srv->base,
	    conn_timer_cb, c)) == NULL) {
		log_warnx("client %" PRIu64 ": out of memory for a timer",
		    c->id);
		conn_close(c, "out of memory");
		return;
	}
	left = (uint64_t)timeout_ms;
	left = now - start_ms >= left ? 0 : left - (now - start_ms);
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	evtimer_add(c->timer, &tv);
}

void
conn_wait_done(struct conn *c)
{
	c->waiting = false;
	if (c->timer != NULL)
		evtimer_del(c->timer);
	conn_schedule(c);
}

static void
conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;

	if (c->waiting)
		commands_timeout(c);
	server_end_turn(c->srv);
}

bool
conn_is_waiting(const struct conn *c)
{
	return c->waiting;
}

void
conn_quit(struct conn *c)
{
	c->quitting = true;
	conn_schedule(c);
}

void
conn_close_all(struct server *srv, const char *reason)
{
	struct conn	*c;

	/* Withdrawing one waiter must not grant another (keylockd-protocol(7):
	 * SHUTDOWN means the request was not granted). */
	locktable_freeze(srv->lt);
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (c->waiting)
			commands_shutdown_wait(c);
	while ((c = TAILQ_FIRST(&srv->conns)) != NULL) {
		conn_flush(c);
		conn_close(c, reason);
	}
}

uint64_t
conn_id(const struct conn *c)
{
	return c->id;
}

const char *
conn_name(const struct conn *c)
{
	return c->name;
}

bool
conn_set_name(struct conn *c, const char *name, size_t len)
{
	char	*n;

	if ((n = kl_strndup(name, len)) == NULL)
		return false;
	kl_free(c->name);
	c->name = n;
	return true;
}

struct lt_owner *
conn_owner(const struct conn *c)
{
	return c->owner;
}

struct server *
conn_server(const struct conn *c)
{
	return c->srv;
}

const char *
conn_peer(const struct conn *c)
{
	return c->peer;
}

bool
conn_is_authed(const struct conn *c)
{
	return c->authed || c->srv->secret == NULL;
}

void
conn_set_authed(struct conn *c, bool authed)
{
	c->authed = authed;
}
