/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * One socket and the clients on it: a non-blocking socket watched by two
 * raw events, requests encoded into one output buffer and written with one
 * send() per batch, replies read with one recv() per readable event into a
 * shared scratch buffer, routed to their client by channel (keylockd's
 * "@N " in front of a reply; none is channel 0) and matched, in order,
 * with that client's requests in flight. Without --channels a socket has
 * one client, on channel 0, and sends as soon as the client has queued;
 * with it, the clients are channels 1, 2, ... and the socket sends once
 * per turn of the loop what all of them queued. It speaks keylockd's line
 * protocol, Redis's RESP and (through keylock-bench-etcd.c) etcd's JSON
 * gateway; what to send next is the workload's business
 * (keylock-bench-work.c).
 */
#include <sys/socket.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "keylock-bench.h"

#define BCONN_BUF_MIN	256
#define BCONN_READ_MIN	16384		/* room for one recv() into ibuf */
#define BCONN_INPUT_MAX	(16 * 1024 * 1024)	/* longest reply kept */
#define BCONN_QUEUE_MIN	8
#define BCONN_RESP_DEPTH	8	/* nesting of RESP arrays */
#define BCONN_CHAN_PREFIX	12	/* "@4294967295 " */
#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT	24	/* linux/in.h, Linux 4.2 */
#endif

struct bresp {
	char		 kind;
	const char	*val;
	size_t		 vlen;
	int64_t		 num;
};

static void	bconn_read_cb(evutil_socket_t, short, void *);
static void	bconn_write_cb(evutil_socket_t, short, void *);

#define QUIT_WAIT_MS	2000	/* --session: most time for the QUITs */

/* Writes all of p[0..len) to a non-blocking socket, waiting for room
 * until the deadline (ns); false when that fails. */
static bool
bconn_send_all(int fd, const char *p, size_t len, uint64_t deadline)
{
	struct pollfd	 pfd = { .fd = fd, .events = POLLOUT };
	ssize_t		 n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    bench_now() < deadline && poll(&pfd, 1, 10) >= 0)
			continue;
		return false;
	}
	return true;
}

/*
 * --session's end: QUIT on every session connection (after what it has
 * not sent yet), which ends the session and releases its locks, so that
 * nothing lingers detached for its grace after the run; then each
 * connection is read to its end, since closing one with unread replies
 * would reset it, and a reset before the QUIT is read only detaches the
 * session. A connection whose LOCK still waits is not read past it by the
 * server: its session stays detached for its grace.
 */
void
bconn_quit_all(struct bench *b)
{
	struct pollfd	*pfd;
	struct bsock	*c;
	uint64_t	 deadline = bench_now() + (uint64_t)QUIT_WAIT_MS * 1000000;
	int		 n = 0, open;

	if (!b->o.session || b->nall == 0)
		return;
	if ((pfd = calloc((size_t)b->nall, sizeof(*pfd))) == NULL)
		return;
	for (int i = 0; i < b->nall; i++) {
		c = b->all[i];
		if (c->is_ctl || c->fd == -1 || !c->connected)
			continue;
		if (c->rev != NULL)
			event_del(c->rev);
		if (c->wev != NULL)
			event_del(c->wev);
		c->wev_on = false;
		if (!bconn_send_all(c->fd, c->obuf + c->ooff, c->olen - c->ooff,
		    deadline) || !bconn_send_all(c->fd, "QUIT\n", 5, deadline))
			continue;
		c->ooff = c->olen = 0;
		shutdown(c->fd, SHUT_WR);
		pfd[n].fd = c->fd;
		pfd[n++].events = POLLIN;
	}
	for (open = n; open > 0 && bench_now() < deadline;) {
		if (poll(pfd, (nfds_t)n, 10) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			ssize_t	 r;

			if (pfd[i].fd < 0 || pfd[i].revents == 0)
				continue;
			while ((r = recv(pfd[i].fd, b->scratch,
			    BENCH_SCRATCH_SIZE, 0)) > 0)
				;
			if (r == 0 || (errno != EAGAIN &&
			    errno != EWOULDBLOCK && errno != EINTR)) {
				pfd[i].fd = -1;
				open--;
			}
		}
	}
	free(pfd);
}

struct bconn *
bconn_new(struct bench *b, int id, enum bconn_role role)
{
	struct bconn	*c;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->b = b;
	c->id = id;
	c->role = role;
	return c;
}

void
bconn_free(struct bconn *c)
{
	if (c == NULL)
		return;
	if (c->timer != NULL)
		event_free(c->timer);
	free(c->q);
	free(c);
}

struct bsock *
bsock_new(struct bench *b, int id)
{
	struct bsock	*s;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	s->b = b;
	s->id = id;
	s->fd = -1;
	return s;
}

/*
 * Puts client c on s: as channel 0 (the socket's one client, or its own
 * requests when its clients are channels), or as the next channel, 1 and
 * up. False when out of memory.
 */
bool
bsock_add(struct bsock *s, struct bconn *c, bool channel)
{
	struct bconn	**p;
	int		 cap;

	if (channel && s->nchans == s->capchans) {
		cap = s->capchans > 0 ? s->capchans * 2 : 8;
		if ((p = realloc(s->chans, (size_t)cap * sizeof(*p))) == NULL)
			return false;
		s->chans = p;
		if ((p = realloc(s->replied, (size_t)(cap + 1) *
		    sizeof(*p))) == NULL)
			return false;
		s->replied = p;
		s->capchans = cap;
		free(s->unstamped);
		s->unstamped = NULL;
	}
	if (s->unstamped == NULL && (s->unstamped = calloc((size_t)(s->capchans
	    + 1), sizeof(*s->unstamped))) == NULL)
		return false;
	c->s = s;
	if (!channel) {
		c->chan = 0;
		s->ch0 = c;
		return true;
	}
	s->chans[s->nchans++] = c;
	c->chan = (uint32_t)s->nchans;
	c->chan_prefix_len = (size_t)snprintf(c->chan_prefix,
	    sizeof(c->chan_prefix), "@%" PRIu32 " ", c->chan);
	return true;
}

static void
bsock_reset_client(struct bconn *c)
{
	if (c == NULL)
		return;
	c->qhead = c->qlen = c->qunstamped = 0;
	c->unstamped_on = c->replied_on = false;
	c->step = 0;
	c->cycle_sent = false;
}

void
bsock_close(struct bsock *s)
{
	if (s->rev != NULL)
		event_del(s->rev);
	if (s->wev != NULL)
		event_del(s->wev);
	s->wev_on = false;
	if (s->fd != -1)
		close(s->fd);
	s->fd = -1;
	s->connecting = s->connected = false;
	s->ooff = s->olen = s->ilen = 0;
	s->gen++;
	bsock_reset_client(s->ch0);
	for (int i = 0; i < s->nchans; i++)
		bsock_reset_client(s->chans[i]);
	s->nunstamped = s->nreplied = 0;
}

void
bsock_free(struct bsock *s)
{
	if (s == NULL)
		return;
	bsock_close(s);
	if (s->rev != NULL)
		event_free(s->rev);
	if (s->wev != NULL)
		event_free(s->wev);
	free(s->obuf);
	free(s->ibuf);
	free(s->chans);
	free(s->unstamped);
	free(s->replied);
	free(s);
}

/* (Re)binds the two events to c->fd. */
static bool
bconn_watch(struct bsock *c)
{
	struct event_base	*base = c->b->base;

	if (c->rev == NULL) {
		c->rev = event_new(base, c->fd, EV_READ | EV_PERSIST,
		    bconn_read_cb, c);
		c->wev = event_new(base, c->fd, EV_WRITE | EV_PERSIST,
		    bconn_write_cb, c);
		return c->rev != NULL && c->wev != NULL;
	}
	return event_assign(c->rev, base, c->fd, EV_READ | EV_PERSIST,
	    bconn_read_cb, c) == 0 && event_assign(c->wev, base, c->fd,
	    EV_WRITE | EV_PERSIST, bconn_write_cb, c) == 0;
}

static void
bconn_want_write(struct bsock *c, bool on)
{
	if (c->wev_on == on)
		return;
	if (on)
		event_add(c->wev, NULL);
	else
		event_del(c->wev);
	c->wev_on = on;
}

/*
 * --sources: connection i leaves from 127.0.0.(1 + i % n). A connection
 * that the client closes first waits in TIME_WAIT, and on loopback a port
 * is reused only after a second; from one address that caps -w connect
 * near the port range per second, whatever the server. The port is still
 * chosen at connect() (IP_BIND_ADDRESS_NO_PORT).
 */
static void
bconn_bind_source(struct bsock *c)
{
	struct sockaddr_in	sin;
	int			on = 1;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(0x7f000001u +
	    (uint32_t)(c->id % c->b->o.sources));
	setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on,
	    sizeof(on));
	(void)bind(c->fd, (struct sockaddr *)&sin, sizeof(sin));
}

/*
 * Starts a non-blocking connect: returns 1 when connected at once, 0 when
 * it completes later (work_connected() is called then), -1 on failure
 * (reported with bench_fail()).
 */
int
bsock_connect(struct bsock *c)
{
	struct bench	*b = c->b;
	int		 on = 1;

	c->t_connect = bench_now();
	const struct bench_server *s = &b->srv[c->srv];

	c->fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0);
	if (c->fd == -1) {
		bench_fail(b, "socket: %s", strerror(errno));
		return -1;
	}
	if (!s->is_unix)
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (b->o.sources > 1 && s->addr.ss_family == AF_INET)
		bconn_bind_source(c);
	if (!bconn_watch(c)) {
		bench_fail(b, "out of memory for events");
		return -1;
	}
	if (connect(c->fd, (const struct sockaddr *)&s->addr, s->addrlen) ==
	    0) {
		c->connected = true;
		event_add(c->rev, NULL);
		return 1;
	}
	if (errno != EINPROGRESS) {
		bench_fail(b, "connect to %s: %s", s->name, strerror(errno));
		return -1;
	}
	c->connecting = true;
	bconn_want_write(c, true);
	return 0;
}

static bool
bconn_reserve(struct bsock *c, size_t n)
{
	size_t	 cap;
	char	*p;

	if (c->olen + n <= c->ocap)
		return true;
	if (c->ooff > 0) {
		memmove(c->obuf, c->obuf + c->ooff, c->olen - c->ooff);
		c->olen -= c->ooff;
		c->ooff = 0;
		if (c->olen + n <= c->ocap)
			return true;
	}
	cap = c->ocap > 0 ? c->ocap : BCONN_BUF_MIN;
	while (cap < c->olen + n)
		cap *= 2;
	if ((p = realloc(c->obuf, cap)) == NULL) {
		bench_fail(c->b, "out of memory for requests");
		return false;
	}
	c->obuf = p;
	c->ocap = cap;
	return true;
}

static bool
bconn_push(struct bconn *c, enum bench_rt type, bool last)
{
	struct bsock	*s = c->s;

	struct inflight	*r, *q;
	unsigned	 cap;

	if (c->qlen == c->qcap) {
		cap = c->qcap > 0 ? c->qcap * 2 : BCONN_QUEUE_MIN;
		if ((q = calloc(cap, sizeof(*q))) == NULL) {
			bench_fail(c->b, "out of memory for requests");
			return false;
		}
		for (unsigned i = 0; i < c->qlen; i++)
			q[i] = c->q[(c->qhead + i) % c->qcap];
		free(c->q);
		c->q = q;
		c->qcap = cap;
		c->qhead = 0;
	}
	r = &c->q[(c->qhead + c->qlen) % c->qcap];
	r->t_send = 0;
	r->type = (uint8_t)type;
	r->last = last;
	c->qlen++;
	c->qunstamped++;
	if (!c->unstamped_on) {
		c->unstamped_on = true;
		s->unstamped[s->nunstamped++] = c;
	}
	return true;
}

/* Writes v in decimal at p; returns the length. */
static size_t
bconn_u64(char *p, uint64_t v)
{
	char	tmp[20];
	size_t	n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	for (i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

static size_t
bconn_key(char *p, const char *prefix, uint64_t key)
{
	size_t	n = strlen(prefix);

	memcpy(p, prefix, n);
	return n + bconn_u64(p + n, key);
}

/* A RESP bulk string: $len CR LF bytes CR LF. */
static size_t
bconn_bulk(char *p, const char *s, size_t len)
{
	size_t	n = 0;

	p[n++] = '$';
	n += bconn_u64(p + n, len);
	p[n++] = '\r';
	p[n++] = '\n';
	memcpy(p + n, s, len);
	n += len;
	p[n++] = '\r';
	p[n++] = '\n';
	return n;
}

static size_t
bconn_encode_line(struct bconn *c, char *p, enum bench_rt type,
    const char *prefix, uint64_t key, int nkeys)
{
	struct bench	*b = c->b;
	const char	*word = type == RT_UNLOCK ? "UNLOCK" :
			    type == RT_TRYLOCK ? "TRYLOCK" :
			    type == RT_REFRESH ? "REFRESH" : "LOCK";
	size_t		 n = strlen(word);

	memcpy(p, word, n);
	for (int i = 0; i < nkeys; i++) {
		p[n++] = ' ';
		n += bconn_key(p + n, prefix, nkeys > 1 ?
		    (key + (uint64_t)i) % b->o.keyspace : key);
	}
	if (type != RT_UNLOCK && c->role == ROLE_WORK) {
		memcpy(p + n, b->lock_opts, b->lock_opts_len);
		n += b->lock_opts_len;
	} else if (type != RT_UNLOCK) {
		memcpy(p + n, b->hold_opts, b->hold_opts_len);
		n += b->hold_opts_len;
	}
	p[n++] = '\n';
	return n;
}

static size_t
bconn_encode_resp(struct bconn *c, char *p, enum bench_rt type,
    const char *prefix, uint64_t key)
{
	struct bench	*b = c->b;
	char		 k[64], px[24];
	size_t		 n, klen = bconn_key(k, prefix, key);

	switch (type) {
	case RT_SET:
		memcpy(p, "*6\r\n$3\r\nSET\r\n", n = 13);
		n += bconn_bulk(p + n, k, klen);
		n += bconn_bulk(p + n, c->token, BENCH_TOKEN_LEN);
		memcpy(p + n, "$2\r\nNX\r\n$2\r\nPX\r\n", 16);
		n += 16;
		n += bconn_bulk(p + n, px, bconn_u64(px, (uint64_t)(c->role ==
		    ROLE_HOLD ? b->o.hold_px_ms : b->o.px_ms)));
		return n;
	case RT_DEL:
		memcpy(p, "*2\r\n$3\r\nDEL\r\n", n = 13);
		return n + bconn_bulk(p + n, k, klen);
	default:	/* RT_EVALSHA */
		memcpy(p, "*5\r\n$7\r\nEVALSHA\r\n", n = 17);
		n += bconn_bulk(p + n, b->sha, BENCH_SHA_LEN);
		memcpy(p + n, "$1\r\n1\r\n", 7);
		n += 7;
		n += bconn_bulk(p + n, k, klen);
		return n + bconn_bulk(p + n, c->token, BENCH_TOKEN_LEN);
	}
}

/*
 * Queues one lock-cycle request on nkeys keys named prefix + number (the
 * numbers key, key+1, ... modulo the keyspace); Redis requests use c->token.
 * The bytes go out with the next bconn_flush().
 */
void
bconn_put(struct bconn *c, enum bench_rt type, bool last, const char *prefix,
    uint64_t key, int nkeys)
{
	struct bench	*b = c->b;
	struct bsock	*s = c->s;
	size_t		 max;

	max = 256 + BCONN_CHAN_PREFIX + (size_t)nkeys * (strlen(prefix) + 22) +
	    b->lock_opts_len + b->hold_opts_len;
	if (b->o.proto == BENCH_ETCD)
		max = BETCD_REQ_MAX;
	if (!bconn_reserve(s, max) || !bconn_push(c, type, last))
		return;
	if (b->o.proto == BENCH_ETCD)
		s->olen += betcd_encode(c, s->obuf + s->olen, type, prefix,
		    key);
	else if (b->o.proto == BENCH_REDIS)
		s->olen += bconn_encode_resp(c, s->obuf + s->olen, type,
		    prefix, key);
	else {
		memcpy(s->obuf + s->olen, c->chan_prefix, c->chan_prefix_len);
		s->olen += c->chan_prefix_len;
		s->olen += bconn_encode_line(c, s->obuf + s->olen, type,
		    prefix, key, nkeys);
	}
	/* the workload's requests, not its setup's (etcd's leases, -w
	 * refresh's locks) */
	if (c->role == ROLE_WORK && (b->phase == PH_RUN ||
	    b->phase == PH_DRAIN)) {
		b->issued++;
		b->outstanding++;
	}
}

/* Queues a request already encoded by the caller (after c's "@N "). */
void
bconn_put_raw(struct bconn *c, enum bench_rt type, const char *req,
    size_t len)
{
	struct bsock	*s = c->s;

	if (!bconn_reserve(s, c->chan_prefix_len + len) ||
	    !bconn_push(c, type, false))
		return;
	memcpy(s->obuf + s->olen, c->chan_prefix, c->chan_prefix_len);
	s->olen += c->chan_prefix_len;
	memcpy(s->obuf + s->olen, req, len);
	s->olen += len;
}

/* Sends what is queued, with one send(); the rest waits for EV_WRITE.
 * The requests that went out (or began to) are stamped now. */
void
bsock_flush(struct bsock *s)
{
	struct bconn	*c;
	ssize_t		 n;
	uint64_t	 now;

	if (s->fd == -1 || s->connecting || s->ooff == s->olen)
		return;
	n = send(s->fd, s->obuf + s->ooff, s->olen - s->ooff,
	    MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n == -1) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			bconn_want_write(s, true);
		else
			work_lost(s, strerror(errno));
		return;
	}
	if (s->nunstamped > 0) {
		now = bench_now();
		for (int k = 0; k < s->nunstamped; k++) {
			c = s->unstamped[k];
			for (unsigned i = c->qlen - c->qunstamped; i < c->qlen;
			    i++)
				c->q[(c->qhead + i) % c->qcap].t_send = now;
			c->qunstamped = 0;
			c->unstamped_on = false;
		}
		s->nunstamped = 0;
	}
	s->ooff += (size_t)n;
	if (s->ooff == s->olen)
		s->ooff = s->olen = 0;
	bconn_want_write(s, s->olen > 0);
}

/* --channels: the sockets marked by bconn_flush() in this turn of the
 * loop, one send() each. */
static void
bsock_sendall_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bench	*b = arg;
	struct bsock	*s;

	for (int i = 0; i < b->nmarked; i++) {
		s = b->marked[i];
		s->marked = false;
		if (!b->stopping)
			bsock_flush(s);
	}
	b->nmarked = 0;
	work_check_done(b);
}

/* --channels: the event that sends for every marked socket, and room to
 * mark each. */
bool
bsock_events(struct bench *b)
{
	if (b->o.channels == 0)
		return true;
	b->marked = calloc((size_t)b->nall + 1, sizeof(*b->marked));
	b->sendall = event_new(b->base, -1, 0, bsock_sendall_cb, b);
	return b->marked != NULL && b->sendall != NULL;
}

/*
 * c's requests are queued: a socket of one client sends them now; a socket
 * of channels is marked, and sends once, after every other callback of
 * this turn of the loop has queued its requests too.
 */
void
bconn_flush(struct bconn *c)
{
	struct bsock	*s = c->s;
	struct bench	*b = c->b;

	if (s->nchans == 0) {
		bsock_flush(s);
		return;
	}
	if (s->marked || s->ooff == s->olen)
		return;
	s->marked = true;
	b->marked[b->nmarked++] = s;
	event_active(b->sendall, EV_TIMEOUT, 1);
}

/*
 * One keylockd reply line at p[0..len): bytes used, 0 if incomplete, -1
 * if its "@N " is not one. *chan is its channel (0 without "@N ").
 */
static ssize_t
bconn_parse_line(const char *p, size_t len, struct breply *rep,
    uint32_t *chan)
{
	const char	*lf = memchr(p, '\n', len);
	const char	*line = p;
	size_t		 n, i;
	uint64_t	 ch = 0;

	if (lf == NULL)
		return 0;
	n = (size_t)(lf - p);
	if (n > 0 && p[n - 1] == '\r')
		n--;
	*chan = 0;
	if (n > 0 && p[0] == '@') {
		for (i = 1; i < n && i <= 10 && p[i] >= '0' && p[i] <= '9';
		    i++)
			ch = ch * 10 + (uint64_t)(p[i] - '0');
		if (i == 1 || i >= n || p[i] != ' ' || ch == 0 ||
		    ch > UINT32_MAX)
			return -1;
		*chan = (uint32_t)ch;
		p += i + 1;
		n -= i + 1;
	}
	rep->ok = n >= 2 && p[0] == 'O' && p[1] == 'K' &&
	    (n == 2 || p[2] == ' ');
	rep->is_error = !rep->ok;
	if (rep->ok) {
		rep->val = n > 3 ? p + 3 : "";
		rep->vlen = n > 3 ? n - 3 : 0;
	} else {
		rep->val = p;
		rep->vlen = n;
	}
	return (ssize_t)(lf - line) + 1;
}

/* A decimal number in p[0..end); false if it is not one. */
static bool
bconn_resp_int(const char *p, const char *end, int64_t *v)
{
	bool	neg = false;

	*v = 0;
	if (p < end && *p == '-') {
		neg = true;
		p++;
	}
	if (p >= end)
		return false;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9' || *v > INT64_MAX / 10 - 10)
			return false;
		*v = *v * 10 + (*p - '0');
	}
	if (neg)
		*v = -*v;
	return true;
}

/*
 * Measures one RESP value at p[0..len): its size, 0 if incomplete, -1 if
 * malformed. Sets the kind ('+', '-', ':', '$', '*', or 'n' for nil) and,
 * for a simple, error or bulk string, its bytes.
 */
static ssize_t
bconn_resp(const char *p, size_t len, int depth, struct bresp *v)
{
	const char	*lf = len > 0 ? memchr(p, '\n', len) : NULL;
	struct bresp	 sub;
	size_t		 hl, used;
	ssize_t		 n;

	if (lf == NULL)
		return 0;
	hl = (size_t)(lf - p) + 1;
	if (hl < 3 || lf[-1] != '\r' || depth > BCONN_RESP_DEPTH)
		return -1;
	v->kind = p[0];
	v->val = p + 1;
	v->vlen = hl - 3;
	v->num = 0;
	switch (p[0]) {
	case '+':
	case '-':
		return (ssize_t)hl;
	case ':':
		return bconn_resp_int(p + 1, lf - 1, &v->num) ? (ssize_t)hl :
		    -1;
	case '$':
	case '*':
		if (!bconn_resp_int(p + 1, lf - 1, &v->num))
			return -1;
		if (v->num < 0) {
			v->kind = 'n';
			return (ssize_t)hl;
		}
		if ((uint64_t)v->num > BCONN_INPUT_MAX)
			return -1;
		break;
	default:
		return -1;
	}
	if (p[0] == '$') {
		if (len < hl + (size_t)v->num + 2)
			return 0;
		v->val = p + hl;
		v->vlen = (size_t)v->num;
		return (ssize_t)(hl + (size_t)v->num + 2);
	}
	used = hl;
	for (int64_t i = 0; i < v->num; i++) {
		if ((n = bconn_resp(p + used, len - used, depth + 1, &sub)) <= 0)
			return n;
		used += (size_t)n;
	}
	return (ssize_t)used;
}

/* One Redis reply: bytes used, 0 if incomplete, -1 if malformed. */
static ssize_t
bconn_parse_resp(const char *p, size_t len, struct breply *rep)
{
	struct bresp	v;
	ssize_t		n;

	if ((n = bconn_resp(p, len, 0, &v)) <= 0)
		return n;
	/* SET NX answers nil when the key is taken; DEL and the
	 * compare-and-delete script answer 0 when nothing was deleted. */
	rep->ok = v.kind != '-' && v.kind != 'n' &&
	    !(v.kind == ':' && v.num == 0);
	rep->is_error = v.kind == '-';
	rep->val = v.val;
	rep->vlen = v.vlen;
	return n;
}

/*
 * Handles the complete replies in buf[0..len); returns the bytes used.
 * Stops early if the workload closed s (its generation changed). With
 * channels, each client that had a reply is listed in s->replied[].
 */
static size_t
bconn_parse(struct bsock *s, const char *buf, size_t len, uint64_t now)
{
	struct bench	*b = s->b;
	struct bconn	*c = s->ch0;
	struct inflight	 r;
	struct breply	 rep;
	unsigned	 gen = s->gen;
	size_t		 off = 0;
	ssize_t		 n;
	uint32_t	 chan = 0;

	while (off < len && s->gen == gen && !b->stopping) {
		if (b->o.proto == BENCH_ETCD)
			n = c->qlen > 0 ? betcd_parse(c, buf + off, len - off,
			    (enum bench_rt)c->q[c->qhead].type, &rep) : -1;
		else if (b->o.proto == BENCH_REDIS)
			n = bconn_parse_resp(buf + off, len - off, &rep);
		else
			n = bconn_parse_line(buf + off, len - off, &rep, &chan);
		if (n < 0) {
			bench_fail(b, "connection %d: malformed reply: %.40s",
			    s->id, buf + off);
			return len;
		}
		if (n == 0)
			break;
		c = chan == 0 ? s->ch0 : chan <= (uint32_t)s->nchans ?
		    s->chans[chan - 1] : NULL;
		if (c == NULL || c->qlen == 0 || c->qlen == c->qunstamped) {
			bench_fail(b, "connection %d: a reply nobody asked "
			    "for on channel %" PRIu32 ": %.*s", s->id, chan,
			    (int)(rep.vlen < 60 ? rep.vlen : 60), rep.val);
			return len;
		}
		r = c->q[c->qhead];
		c->qhead = (c->qhead + 1) % c->qcap;
		c->qlen--;
		off += (size_t)n;
		if (s->nchans > 0 && !c->replied_on) {
			c->replied_on = true;
			s->replied[s->nreplied++] = c;
		}
		work_reply(c, &r, &rep, now);
	}
	return off;
}

static bool
bconn_keep(struct bsock *c, const char *buf, size_t len)
{
	size_t	 cap;
	char	*p;

	if (len > BCONN_INPUT_MAX) {
		bench_fail(c->b, "connection %d: a reply over %d bytes",
		    c->id, BCONN_INPUT_MAX);
		return false;
	}
	if (len + BCONN_READ_MIN > c->icap) {
		cap = c->icap > 0 ? c->icap : BCONN_READ_MIN;
		while (cap < len + BCONN_READ_MIN)
			cap *= 2;
		if ((p = realloc(c->ibuf, cap)) == NULL) {
			bench_fail(c->b, "out of memory for replies");
			return false;
		}
		c->ibuf = p;
		c->icap = cap;
	}
	memmove(c->ibuf, buf, len);
	c->ilen = len;
	return true;
}

/* The clients that had replies may send again; then the socket sends. */
static void
bsock_refill(struct bsock *s)
{
	struct bconn	*c;

	if (s->nchans == 0) {
		work_fill(s->ch0);
		bconn_flush(s->ch0);
		return;
	}
	for (int i = 0; i < s->nreplied; i++) {
		c = s->replied[i];
		c->replied_on = false;
		work_fill(c);
	}
	s->nreplied = 0;
	bconn_flush(s->ch0);	/* marks s: sends for all its channels */
}

static void
bconn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bsock	*c = arg;
	struct bench	*b = c->b;
	char		*buf;
	size_t		 room, used, len;
	ssize_t		 n;
	unsigned	 gen;

	if (c->ilen == 0) {
		buf = b->scratch;
		room = BENCH_SCRATCH_SIZE;
	} else {
		buf = c->ibuf;
		room = c->icap - c->ilen;
	}
	n = recv(fd, buf + c->ilen, room, MSG_DONTWAIT);
	if (n <= 0) {
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		    errno == EINTR))
			return;
		work_lost(c, n == 0 ? "closed by the server" :
		    strerror(errno));
		work_check_done(b);
		return;
	}
	len = c->ilen + (size_t)n;
	gen = c->gen;
	used = bconn_parse(c, buf, len, bench_now());
	if (c->gen == gen && !b->stopping) {
		if (!bconn_keep(c, buf + used, len - used))
			return;
		bsock_refill(c);
	}
	work_check_done(b);
}

static void
bconn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bsock	*c = arg;
	int		 err = 0;
	socklen_t	 len = sizeof(err);

	if (c->connecting) {
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
			err = errno;
		if (err != 0) {
			bench_fail(c->b, "connect to %s: %s",
			    c->b->srv[c->srv].name, strerror(err));
			return;
		}
		c->connecting = false;
		c->connected = true;
		bconn_want_write(c, false);
		event_add(c->rev, NULL);
		work_connected(c);
	} else
		bsock_flush(c);
	work_check_done(c->b);
}
