/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The etcd client's endpoints, connection pool and unary calls (etcd.h).
 * A call waits in e->queue until a connection of the pool is free, goes
 * out as one POST, and ends in its callback exactly once: with the reply,
 * at its deadline, or when the client is freed. One endpoint is current;
 * a failure on it moves every later call to the next, and a connection
 * still aimed at an old one is remade before its next call, from the kick
 * event, never from inside an evhttp callback. It never blocks, and never
 * calls a callback from inside the function that made the call.
 */
#include <sys/socket.h>
#include <sys/time.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <jansson.h>

#include "etcd_impl.h"
#include "log.h"
#include "util.h"

static void	call_timer_cb(evutil_socket_t, short, void *);
static void	call_done_cb(struct evhttp_request *, void *);
static void	call_error_cb(enum evhttp_request_error, void *);
static void	dispatch(struct etcd *e, bool safe);
static void	kick_cb(evutil_socket_t, short, void *);
static void	conn_closed_cb(struct evhttp_connection *, void *);
static void	auth_start(struct etcd *e);
static void	auth_wipe(struct etcd *e);

uint64_t
etcd_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool
host_is_numeric(const char *h)
{
	struct evutil_addrinfo	 hints, *res = NULL;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_flags = EVUTIL_AI_NUMERICHOST;
	if (evutil_getaddrinfo(h, NULL, &hints, &res) != 0)
		return false;
	evutil_freeaddrinfo(res);
	return true;
}

/* "http://host:port", "https://host:port" or "host:port" into ep; why
 * names the problem. */
static int
endpoint_parse(const char *s, size_t len, struct etcd_endpoint *ep,
    const char **why)
{
	char			 buf[ETCD_URL_MAX];
	struct evhttp_uri	*u;
	const char		*scheme, *host, *path;
	int			 port;

	if (len == 0) {
		*why = "empty etcd endpoint";
		return -1;
	}
	if (len + sizeof("https://") > sizeof(buf)) {
		*why = "etcd endpoint too long";
		return -1;
	}
	if (memmem(s, len, "://", 3) == NULL)
		snprintf(buf, sizeof(buf), "http://%.*s", (int)len, s);
	else
		snprintf(buf, sizeof(buf), "%.*s", (int)len, s);
	if ((u = evhttp_uri_parse(buf)) == NULL) {
		*why = "etcd endpoint is not a URL";
		return -1;
	}
	scheme = evhttp_uri_get_scheme(u);
	host = evhttp_uri_get_host(u);
	port = evhttp_uri_get_port(u);
	path = evhttp_uri_get_path(u);
	if (scheme == NULL || (strcmp(scheme, "http") != 0 &&
	    strcmp(scheme, "https") != 0))
		*why = "etcd endpoint: http:// or https://";
	else if (host == NULL || host[0] == '\0' ||
	    strlen(host) >= ETCD_HOST_MAX)
		*why = "etcd endpoint has no host";
	else if (port <= 0 || port > 65535)
		*why = "etcd endpoint needs a port (https://host:2379)";
	else if (path != NULL && path[0] != '\0' && strcmp(path, "/") != 0)
		*why = "etcd endpoint has a path";
	else if (evhttp_uri_get_query(u) != NULL ||
	    evhttp_uri_get_userinfo(u) != NULL)
		*why = "etcd endpoint has a query or user";
	else
		*why = NULL;
	if (*why == NULL) {
		/* evhttp keeps an IPv6 address's brackets; connect wants
		 * none, the Host header and the URL want them */
		size_t hl = strlen(host);
		bool v6 = hl >= 2 && host[0] == '[' && host[hl - 1] == ']';

		snprintf(ep->host, sizeof(ep->host), "%.*s",
		    (int)(v6 ? hl - 2 : hl), v6 ? host + 1 : host);
		ep->port = port;
		ep->tls = strcmp(scheme, "https") == 0;
		snprintf(ep->hosthdr, sizeof(ep->hosthdr), "%s:%d", host, port);
		snprintf(ep->url, sizeof(ep->url), "%s://%s",
		    ep->tls ? "https" : "http", ep->hosthdr);
	}
	evhttp_uri_free(u);
	return *why == NULL ? 0 : -1;
}

static int
endpoints_parse(struct etcd *e, const char *list, const char **why)
{
	const char	*p = list, *comma;

	if (list == NULL || list[0] == '\0') {
		*why = "no etcd endpoints";
		return -1;
	}
	for (;;) {
		comma = strchr(p, ',');
		size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);

		while (len > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (e->neps == ETCD_ENDPOINTS_MAX) {
			*why = "too many etcd endpoints";
			return -1;
		}
		if (endpoint_parse(p, len, &e->eps[e->neps], why) != 0)
			return -1;
		e->neps++;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

/* The TLS settings of o against the endpoints of e: the context if any
 * endpoint is https; false with why. */
static bool
etcd_tls_setup(struct etcd *e, const struct etcd_opts *o, const char **why)
{
	static char		 buf[ETCD_URL_MAX + 256];
	static const struct etcd_opts none;
	bool			 tls = false;

	for (int i = 0; i < e->neps; i++)
		tls |= e->eps[i].tls;
	if (o == NULL)
		o = &none;
	if ((o->cert_file == NULL) != (o->key_file == NULL)) {
		*why = "an etcd client certificate needs its key, and a key "
		    "its certificate";
		return false;
	}
	if (!tls && (o->ca_file != NULL || o->cert_file != NULL)) {
		*why = "an etcd CA or client certificate needs https:// "
		    "endpoints";
		return false;
	}
	if (tls && (e->tls = etcd_tls_ctx_new(o, buf, sizeof(buf))) == NULL) {
		*why = buf;
		return false;
	}
	return true;
}

struct etcd *
etcd_new(struct event_base *base, const char *endpoints,
    const struct etcd_opts *opts, const char **why)
{
	struct etcd	*e;
	const char	*dummy;
	bool		 names = false;

	if (why == NULL)
		why = &dummy;
	*why = "out of memory";
	if ((e = kl_calloc(1, sizeof(*e))) == NULL)
		return NULL;
	e->base = base;
	e->o.conns = ETCD_CONNS_DEFAULT;
	e->o.timeout_ms = ETCD_TIMEOUT_MS_DEFAULT;
	e->o.max_queue = ETCD_MAX_QUEUE_DEFAULT;
	e->o.max_body = ETCD_MAX_BODY_DEFAULT;
	e->o.max_line = ETCD_MAX_LINE_DEFAULT;
	if (opts != NULL) {
		if (opts->conns > 0)
			e->o.conns = opts->conns < ETCD_CONNS_MAX ?
			    opts->conns : ETCD_CONNS_MAX;
		if (opts->timeout_ms > 0)
			e->o.timeout_ms = opts->timeout_ms;
		if (opts->max_queue > 0)
			e->o.max_queue = opts->max_queue;
		if (opts->max_body > 0)
			e->o.max_body = opts->max_body;
		if (opts->max_line > 0)
			e->o.max_line = opts->max_line;
	}
	TAILQ_INIT(&e->queue);
	TAILQ_INIT(&e->inflight);
	e->w.ep = -1;
	if (endpoints_parse(e, endpoints, why) != 0 ||
	    !etcd_tls_setup(e, opts, why)) {
		kl_free(e);
		errno = EINVAL;
		return NULL;
	}
	*why = "out of memory";
	if (opts != NULL && opts->user != NULL) {
		if ((e->user = kl_strndup(opts->user,
		    strlen(opts->user))) == NULL ||
		    (e->password = kl_malloc(opts->passwordlen + 1)) == NULL)
			goto fail;
		memcpy(e->password, opts->password, opts->passwordlen);
		e->password[opts->passwordlen] = '\0';
		e->passwordlen = opts->passwordlen;
	}
	for (int i = 0; i < e->neps; i++)
		if (!host_is_numeric(e->eps[i].host))
			names = true;
	if (names && (e->dns = evdns_base_new(base,
	    EVDNS_BASE_INITIALIZE_NAMESERVERS)) == NULL) {
		*why = "cannot set up DNS for the etcd endpoints";
		goto fail;
	}
	if ((e->conns = kl_calloc((size_t)e->o.conns,
	    sizeof(*e->conns))) == NULL ||
	    (e->kick = event_new(base, -1, 0, kick_cb, e)) == NULL)
		goto fail;
	for (int i = 0; i < e->o.conns; i++) {
		e->conns[i].e = e;
		e->conns[i].ep = -1;
		e->conns[i].nodelay_fd = -1;
	}
	for (int i = 0; i < e->neps; i++)
		e->mem[i].e = e;
	if (etcd_probe_init(e) != 0)
		goto fail;
	*why = NULL;
	return e;
fail:
	if (e->kick != NULL)
		event_free(e->kick);
	etcd_probe_free(e);
	if (e->dns != NULL)
		evdns_base_free(e->dns, 0);
	etcd_tls_ctx_free(e->tls);
	auth_wipe(e);
	kl_free(e->conns);
	kl_free(e);
	errno = ENOMEM;
	return NULL;
}

size_t
etcd_nendpoints(const struct etcd *e)
{
	return (size_t)e->neps;
}

const char *
etcd_endpoint(const struct etcd *e, size_t i)
{
	return i < (size_t)e->neps ? e->eps[i].url : NULL;
}

const char *
etcd_current_endpoint(const struct etcd *e)
{
	return e->eps[e->cur].url;
}

size_t
etcd_pending(const struct etcd *e)
{
	return e->nqueue + e->ninflight;
}

/*
 * A failure on the current endpoint moves the client to the next member
 * that is not down (etcd_member_down()): a member found silent (stopped,
 * its host gone) costs a probe's wait once, not again at every round of
 * the endpoints while the others elect a leader, which takes a call back
 * to it after each "no leader" of theirs. With every other member down,
 * the one that went down first.
 */
void
etcd_endpoint_failed(struct etcd *e, int ep, const char *why)
{
	uint64_t	now = etcd_now_ms();
	int		next = -1;

	if (ep != e->cur || e->neps == 1)
		return;
	for (int i = 1; i < e->neps; i++) {
		int k = (ep + i) % e->neps;

		if (e->mem[k].down_until <= now) {
			next = k;
			break;
		}
		if (next < 0 || e->mem[k].down_until <
		    e->mem[next].down_until)
			next = k;
	}
	e->cur = next;
	log_debug("etcd: %s: %s; now %s", e->eps[ep].url, why,
	    e->eps[e->cur].url);
}

void
etcd_member_down(struct etcd *e, int ep, const char *why)
{
	if (e->neps == 1)
		return;
	if (e->mem[ep].down_until <= etcd_now_ms())
		log_debug("etcd: %s: %s; passed over for %d ms",
		    e->eps[ep].url, why, e->down_ms);
	e->mem[ep].down_until = etcd_now_ms() + (uint64_t)e->down_ms;
}

void
etcd_member_up(struct etcd *e, int ep)
{
	e->mem[ep].down_until = 0;
}

struct evhttp_connection *
etcd_evcon_new(struct etcd *e, int ep, int timeout_ms, size_t max_body)
{
	struct evhttp_connection *evcon;
	struct bufferevent	 *bev;
	struct timeval		  tv;

	if (e->eps[ep].tls) {
		if ((bev = etcd_tls_bev_new(e, ep)) == NULL)
			return NULL;
		evcon = evhttp_connection_base_bufferevent_new(e->base, e->dns,
		    bev, e->eps[ep].host, (unsigned short)e->eps[ep].port);
		if (evcon == NULL) {
			bufferevent_free(bev);
			return NULL;
		}
	} else {
		evcon = evhttp_connection_base_new(e->base, e->dns,
		    e->eps[ep].host, (unsigned short)e->eps[ep].port);
		if (evcon == NULL)
			return NULL;
	}
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	evhttp_connection_set_timeout_tv(evcon, &tv);
	evhttp_connection_set_retries(evcon, 0);
	/* evhttp refuses a longer reply before it reads the body (its
	 * Content-Length, or a chunk's size line): EVREQ_HTTP_DATA_TOO_LONG */
	evhttp_connection_set_max_headers_size(evcon, ETCD_MAX_HEADERS);
	evhttp_connection_set_max_body_size(evcon, max_body > EV_SSIZE_MAX ?
	    EV_SSIZE_MAX : (ev_ssize_t)max_body);
	return evcon;
}

/* A POST of body to endpoint ep, with the headers every call has; the
 * path goes to evhttp_make_request. */
struct evhttp_request *
etcd_request_new(struct etcd *e, int ep,
    void (*cb)(struct evhttp_request *, void *), void *arg,
    const char *body, size_t bodylen, const char *token)
{
	struct evhttp_request	*req;
	struct evkeyvalq	*h;

	if ((req = evhttp_request_new(cb, arg)) == NULL)
		return NULL;
	h = evhttp_request_get_output_headers(req);
	/* hasleader: a member cut off from the leader refuses the call
	 * (and ends a watch) instead of hanging; etcd's WithRequireLeader. */
	if (evhttp_add_header(h, "Host", e->eps[ep].hosthdr) != 0 ||
	    evhttp_add_header(h, "Content-Type", "application/json") != 0 ||
	    evhttp_add_header(h, "Grpc-Metadata-hasleader", "true") != 0 ||
	    (token != NULL &&
	    evhttp_add_header(h, "Authorization", token) != 0) ||
	    evbuffer_add(evhttp_request_get_output_buffer(req), body,
	    bodylen) != 0) {
		evhttp_request_free(req);
		return NULL;
	}
	return req;
}

/* Unlinks c from whichever list holds it. */
static void
call_unlink(struct etcd_call *c)
{
	struct etcd *e = c->e;

	if (c->state == CALL_QUEUED) {
		TAILQ_REMOVE(&e->queue, c, entry);
		e->nqueue--;
	} else {
		TAILQ_REMOVE(&e->inflight, c, entry);
		e->ninflight--;
	}
}

static void
call_free(struct etcd_call *c)
{
	if (c->timer != NULL)
		event_free(c->timer);
	if (c == c->e->auth) {
		/* the password is in it */
		if (c->body != NULL)
			explicit_bzero(c->body, c->bodylen);
		c->e->auth = NULL;
	}
	kl_free(c->body);
	kl_free(c);
}

/* Ends c with r (unlinked already) and frees it. */
static void
call_finish(struct etcd_call *c, struct etcd_result *r)
{
	if (r->endpoint == NULL)
		r->endpoint = c->e->eps[c->ep >= 0 ? c->ep : c->e->cur].url;
	r->tries = c->tries;
	c->cb(c->arg, r);
	call_free(c);
}

/* Why a try ended, for a call that times out never sent (truncated). */
static void
etcd_note_fail(struct etcd *e, const char *msg)
{
	size_t n = strlen(msg);

	if (n >= sizeof(e->last_fail))
		n = sizeof(e->last_fail) - 1;
	memmove(e->last_fail, msg, n);
	e->last_fail[n] = '\0';
}

static void
call_fail(struct etcd_call *c, enum etcd_status st, const char *msg)
{
	struct etcd_result r;

	memset(&r, 0, sizeof(r));
	r.status = st;
	r.message = msg;
	if (msg != NULL && msg != c->e->last_fail)
		etcd_note_fail(c->e, msg);
	call_finish(c, &r);
}

/* Ends c from its timer at once with st: for failures found inside the
 * function that made the call, whose callback must not run yet. */
static void
call_fail_later(struct etcd_call *c, enum etcd_status st, const char *msg)
{
	struct timeval zero = { 0, 0 };

	c->fail_status = st;
	snprintf(c->fail_msg, sizeof(c->fail_msg), "%s", msg);
	if (c->state == CALL_QUEUED) {
		TAILQ_REMOVE(&c->e->queue, c, entry);
		c->e->nqueue--;
		TAILQ_INSERT_TAIL(&c->e->inflight, c, entry);
		c->e->ninflight++;
	}
	c->state = CALL_FAILING;
	event_add(c->timer, &zero);
}

/* A call of body (stolen) to path, its deadline set, not queued yet;
 * NULL with errno ENOMEM. */
static struct etcd_call *
call_new(struct etcd *e, const char *path, json_t *body, unsigned flags,
    etcd_cb *cb, void *arg)
{
	struct etcd_call	*c;
	struct timeval		 tv;

	if (body == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	if ((c = kl_calloc(1, sizeof(*c))) == NULL)
		goto nomem;
	c->e = e;
	c->flags = flags;
	c->cb = cb;
	c->arg = arg;
	c->ep = -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	if ((c->body = json_dumps(body, JSON_COMPACT)) == NULL ||
	    (c->timer = evtimer_new(e->base, call_timer_cb, c)) == NULL)
		goto nomem;
	c->bodylen = strlen(c->body);
	json_decref(body);
	c->deadline_ms = etcd_now_ms() + (uint64_t)e->o.timeout_ms;
	tv.tv_sec = e->o.timeout_ms / 1000;
	tv.tv_usec = (e->o.timeout_ms % 1000) * 1000;
	event_add(c->timer, &tv);
	c->state = CALL_QUEUED;
	return c;
nomem:
	json_decref(body);
	if (c != NULL) {
		/* json_dumps allocated with malloc: free, not kl_free */
		free(c->body);
		c->body = NULL;
		call_free(c);
	}
	errno = ENOMEM;
	return NULL;
}

struct etcd_call *
etcd_post(struct etcd *e, const char *path, json_t *body, unsigned flags,
    etcd_cb *cb, void *arg)
{
	struct etcd_call *c;

	if (e->nqueue >= e->o.max_queue) {
		json_decref(body);
		errno = ENOBUFS;
		return NULL;
	}
	if ((c = call_new(e, path, body, flags, cb, arg)) == NULL)
		return NULL;
	TAILQ_INSERT_TAIL(&e->queue, c, entry);
	e->nqueue++;
	dispatch(e, false);
	return c;
}

/* ---- etcd's authentication ---- */

bool
etcd_token_refused(int grpc_code, const char *message)
{
	/* ErrInvalidAuthToken; ErrAuthOldRevision, whose code is 3 */
	return grpc_code == ETCD_GRPC_UNAUTHENTICATED ||
	    (message != NULL && strstr(message, "revision of auth store is "
	    "old") != NULL);
}

static void
auth_cb(void *arg, const struct etcd_result *r)
{
	struct etcd		*e = arg;
	struct etcd_call	*c;
	const json_t		*tok = json_object_get(r->json, "token");
	char			 msg[256];

	e->auth = NULL;
	if (r->status == ETCD_ERR_CANCELED)
		return;
	if (r->status == ETCD_OK && json_is_string(tok) &&
	    json_string_length(tok) > 0 && json_string_length(tok) < 4096 &&
	    strpbrk(json_string_value(tok), "\r\n") == NULL) {
		kl_free(e->token);
		e->token = kl_strndup(json_string_value(tok),
		    json_string_length(tok));
		e->token_gen++;
		if (e->token != NULL) {
			log_debug("etcd: authenticated as %s", e->user);
			dispatch(e, false);
			return;
		}
	}
	/* every call waiting for the token fails with the reason */
	if (r->status == ETCD_OK || r->status == ETCD_ERR_GRPC)
		snprintf(msg, sizeof(msg), "etcd authentication as %s failed: "
		    "%s", e->user, r->status == ETCD_OK ?
		    "no usable token in the reply" : r->message);
	else
		snprintf(msg, sizeof(msg), "%s", r->message != NULL ?
		    r->message : etcd_status_name(r->status));
	while ((c = TAILQ_FIRST(&e->queue)) != NULL)
		call_fail_later(c, r->status == ETCD_OK ? ETCD_ERR_PROTO :
		    r->status, msg);
}

/* Queues a /v3/auth/authenticate call first, unless one is on its way
 * or no user is set. */
static void
auth_start(struct etcd *e)
{
	json_t *b;

	if (e->user == NULL || e->token != NULL || e->auth != NULL)
		return;
	b = json_object();
	if (b == NULL || json_object_set_new(b, "name",
	    json_string(e->user)) != 0 || json_object_set_new(b, "password",
	    json_stringn(e->password, e->passwordlen)) != 0) {
		json_decref(b);
		return;
	}
	/* its calls time out, or it comes again with the next call */
	e->auth = call_new(e, "/v3/auth/authenticate", b, ETCD_RETRY, auth_cb,
	    e);
	if (e->auth == NULL)
		return;
	TAILQ_INSERT_HEAD(&e->queue, e->auth, entry);
	e->nqueue++;
}

void
etcd_auth_refused(struct etcd *e, uint64_t gen)
{
	if (e->user == NULL || gen != e->token_gen || e->token == NULL)
		return;
	log_debug("etcd: the token of %s was refused; authenticating again",
	    e->user);
	kl_free(e->token);
	e->token = NULL;
	e->token_gen++;
	auth_start(e);
	dispatch(e, false);
}

bool
etcd_auth_wait(struct etcd *e)
{
	if (e->user == NULL || e->token != NULL)
		return false;
	auth_start(e);
	dispatch(e, false);
	return true;
}

static void
auth_wipe(struct etcd *e)
{
	if (e->password != NULL)
		explicit_bzero(e->password, e->passwordlen);
	kl_free(e->password);
	kl_free(e->user);
	kl_free(e->token);
	e->password = e->user = e->token = NULL;
}

void
etcd_cancel(struct etcd_call *c)
{
	struct etcd *e;

	if (c == NULL)
		return;
	e = c->e;
	call_unlink(c);
	if (c->state == CALL_INFLIGHT) {
		struct evhttp_request *req = c->req;

		c->conn->call = NULL;
		c->conn->stale = e->eps[c->conn->ep].tls;
		c->req = NULL;
		/* resets the connection; neither callback may run now */
		evhttp_request_set_error_cb(req, NULL);
		evhttp_cancel_request(req);
	}
	call_free(c);
	dispatch(e, false);
}

/*
 * evhttp writes a request's headers and its body apart: with Nagle's
 * algorithm the body would wait for the ACK of the headers (a delayed ACK,
 * milliseconds per call). The socket exists once the request is made; a
 * reconnection makes a new one.
 */
static void
conn_nodelay(struct etcd_conn *conn)
{
	struct bufferevent	*bev = evhttp_connection_get_bufferevent(
				    conn->evcon);
	evutil_socket_t		 fd = bev != NULL ? bufferevent_getfd(bev) : -1;
	int			 on = 1;

	if (fd < 0 || fd == conn->nodelay_fd)
		return;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)) == 0)
		conn->nodelay_fd = fd;
}

/* Sends c on conn (connected to e->cur); false if evhttp refused. */
static bool
call_send(struct etcd_conn *conn, struct etcd_call *c)
{
	struct etcd		*e = conn->e;
	struct evhttp_request	*req;

	req = etcd_request_new(e, conn->ep, call_done_cb, c, c->body,
	    c->bodylen, c == e->auth ? NULL : e->token);
	if (req == NULL)
		return false;
	c->token_gen = e->token_gen;
	evhttp_request_set_error_cb(req, call_error_cb);
	c->req = req;
	c->conn = conn;
	c->ep = conn->ep;
	c->tries++;
	c->sent_ms = etcd_now_ms();
	/* a member not heard from yet (the calls just moved to it when
	 * their member's leader was stopped, the election under way):
	 * the newest term the cluster told, else a change of term between
	 * this try and the first probe of it would go unseen, the try
	 * waiting on a write forwarded to the old leader, and lost, until
	 * its deadline (tests/etcd/leader_test saw ERR BACKEND so) */
	c->base_term = e->mem[conn->ep].term != 0 ? e->mem[conn->ep].term :
	    e->term_max;
	c->got_error_cb = false;
	conn->call = c;
	TAILQ_REMOVE(&e->queue, c, entry);
	e->nqueue--;
	c->state = CALL_INFLIGHT;
	TAILQ_INSERT_TAIL(&e->inflight, c, entry);
	e->ninflight++;
	if (evhttp_make_request(conn->evcon, req, EVHTTP_REQ_POST,
	    c->path) != 0) {
		/* evhttp freed req */
		conn->call = NULL;
		c->req = NULL;
		c->conn = NULL;
		TAILQ_REMOVE(&e->inflight, c, entry);
		e->ninflight--;
		c->state = CALL_QUEUED;
		TAILQ_INSERT_HEAD(&e->queue, c, entry);
		e->nqueue++;
		return false;
	}
	conn_nodelay(conn);
	etcd_probe_arm(e);
	return true;
}

/*
 * Puts queued calls on free connections. A connection aimed at an
 * endpoint that is no longer current is remade, but only when safe (from
 * the kick event): freeing an evhttp_connection inside its own callback
 * is not.
 */
static void
dispatch(struct etcd *e, bool safe)
{
	bool need_kick = false;

	if (e == NULL)
		return;
	for (int i = 0; i < e->o.conns && e->nqueue > 0; i++) {
		struct etcd_conn *conn = &e->conns[i];

		struct etcd_call *next = TAILQ_FIRST(&e->queue);

		if (conn->call != NULL)
			continue;
		/* with etcd auth, nothing goes before the token */
		if (e->user != NULL && e->token == NULL) {
			auth_start(e);
			if (e->auth == NULL || e->auth->state != CALL_QUEUED)
				break;
			next = e->auth;
		}
		if (conn->evcon != NULL && (conn->ep != e->cur || conn->stale)) {
			if (!safe) {
				need_kick = true;
				continue;
			}
			evhttp_connection_free(conn->evcon);
			conn->evcon = NULL;
			conn->nodelay_fd = -1;
			conn->stale = false;
		}
		if (conn->evcon == NULL) {
			conn->ep = e->cur;
			conn->evcon = etcd_evcon_new(e, e->cur,
			    e->o.timeout_ms + 1000, e->o.max_body);
			if (conn->evcon == NULL) {
				call_fail_later(next, ETCD_ERR_NOMEM,
				    e->eps[e->cur].tls ? "cannot set up TLS" :
				    "out of memory");
				continue;
			}
			if (e->eps[e->cur].tls)
				evhttp_connection_set_closecb(conn->evcon,
				    conn_closed_cb, conn);
		}
		if (!call_send(conn, next))
			call_fail_later(next, ETCD_ERR_NOMEM,
			    "cannot make an HTTP request");
	}
	if (need_kick)
		event_active(e->kick, 0, 0);
}

/* A TLS connection closed: its SSL served that TCP connection only. */
static void
conn_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct etcd_conn *conn = arg;

	conn->stale = true;
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	dispatch(arg, true);
}

static void
call_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct etcd_call	*c = arg;
	struct etcd		*e = c->e;
	char			 msg[400];

	if (c->state == CALL_FAILING) {
		call_unlink(c);
		call_fail(c, c->fail_status, c->fail_msg);
		return;
	}
	if (c->state == CALL_PAUSED && etcd_now_ms() + 10 < c->deadline_ms) {
		/* the pause is over: its next try, by the deadline */
		uint64_t	left = c->deadline_ms - etcd_now_ms();
		struct timeval	tv;

		TAILQ_REMOVE(&e->inflight, c, entry);
		e->ninflight--;
		c->state = CALL_QUEUED;
		TAILQ_INSERT_HEAD(&e->queue, c, entry);
		e->nqueue++;
		tv.tv_sec = (time_t)(left / 1000);
		tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
		event_add(c->timer, &tv);
		dispatch(e, true);
		return;
	}
	call_unlink(c);
	if (c->state == CALL_INFLIGHT) {
		struct evhttp_request *req = c->req;

		c->conn->call = NULL;
		c->conn->stale = e->eps[c->conn->ep].tls;
		c->req = NULL;
		evhttp_request_set_error_cb(req, NULL);
		evhttp_cancel_request(req);
		etcd_member_down(e, c->ep, "no reply in time");
		etcd_endpoint_failed(e, c->ep, "no reply in time");
		/* a try that failed before this one says why, as below:
		 * etcd refusing a TLS 1.3 client's certificate ends each
		 * try after its handshake, and a deadline meeting the
		 * next try would hide it */
		snprintf(msg, sizeof(msg), "no reply from %s within %d ms%s%s%s",
		    e->eps[c->ep].url, e->o.timeout_ms,
		    c->fail_msg[0] != '\0' ? " (the try before: " : "",
		    c->fail_msg, c->fail_msg[0] != '\0' ? ")" : "");
	} else if (c->fail_msg[0] != '\0') {
		/* tried, and tried again: what ended the last try */
		snprintf(msg, sizeof(msg), "no reply within %d ms (%s)",
		    e->o.timeout_ms, c->fail_msg);
	} else if (e->last_fail[0] != '\0') {
		/* never sent: queued behind calls whose tries failed (the
		 * authentication's, say), for the reason the last one did */
		snprintf(msg, sizeof(msg), "no connection free within %d ms "
		    "(the last try: %s)", e->o.timeout_ms, e->last_fail);
	} else {
		snprintf(msg, sizeof(msg), "no connection free within %d ms",
		    e->o.timeout_ms);
	}
	call_fail(c, ETCD_ERR_TIMEOUT, msg);
	dispatch(e, false);
}

static void
call_error_cb(enum evhttp_request_error err, void *arg)
{
	struct etcd_call *c = arg;

	c->got_error_cb = true;
	c->http_error = (int)err;
}

static const char *
http_error_name(int err)
{
	switch (err) {
	case EVREQ_HTTP_TIMEOUT:
		return "timed out";
	case EVREQ_HTTP_EOF:
		return "connection closed";
	case EVREQ_HTTP_INVALID_HEADER:
		return "bad HTTP header";
	case EVREQ_HTTP_BUFFER_ERROR:
		return "connection error";
	case EVREQ_HTTP_DATA_TOO_LONG:
		return "reply too long";
	default:
		return "request failed";
	}
}

/*
 * Queues c again (in e->inflight, not linked to a connection), for the
 * next endpoint, if it may and time is left: a try that sent nothing
 * always, until every endpoint has refused it in a row; one that may have
 * reached its member only with ETCD_RETRY, until the deadline, with a
 * pause after each round of the endpoints (a member without a leader
 * says so at once, and an election takes a second or two). why: what
 * ended the try, for the error at the deadline.
 */
static bool
call_retry(struct etcd_call *c, bool unsent, const char *why)
{
	struct etcd	*e = c->e;
	uint64_t	 now = etcd_now_ms(), pause;
	struct timeval	 tv;

	if (!(unsent || (c->flags & ETCD_RETRY)) ||
	    now + 10 >= c->deadline_ms)
		return false;
	if (why != c->fail_msg)
		snprintf(c->fail_msg, sizeof(c->fail_msg), "%s: %s",
		    e->eps[c->ep].url, why);
	etcd_note_fail(e, c->fail_msg);
	if (unsent) {
		if (++c->refused >= e->neps)
			return false;
	} else {
		c->refused = 0;
	}
	if (!unsent && c->tries % e->neps == 0) {
		pause = ETCD_RETRY_PAUSE_MS;
		if (now + pause + 10 >= c->deadline_ms)
			pause = c->deadline_ms - now - 10;
		c->state = CALL_PAUSED;
		tv.tv_sec = 0;
		tv.tv_usec = (suseconds_t)pause * 1000;
		event_add(c->timer, &tv);
		return true;
	}
	TAILQ_REMOVE(&e->inflight, c, entry);
	e->ninflight--;
	c->state = CALL_QUEUED;
	TAILQ_INSERT_HEAD(&e->queue, c, entry);
	e->nqueue++;
	return true;
}

void
etcd_member_term(struct etcd *e, int ep, int64_t term)
{
	if (term > e->mem[ep].term)
		e->mem[ep].term = term;
	if (term > e->term_max)
		e->term_max = term;
}

void
etcd_call_abandon(struct etcd_call *c, const char *why)
{
	struct etcd		*e = c->e;
	struct evhttp_request	*req = c->req;
	int			 ep = c->ep;

	c->conn->call = NULL;
	c->conn->stale = e->eps[c->conn->ep].tls;
	c->conn = NULL;
	c->req = NULL;
	/* resets the connection; neither callback may run now */
	evhttp_request_set_error_cb(req, NULL);
	evhttp_cancel_request(req);
	snprintf(c->fail_msg, sizeof(c->fail_msg), "%s: %s", e->eps[ep].url,
	    why);
	log_debug("etcd: %s on %s waited %llu ms: %s; tried again", c->path,
	    e->eps[ep].url, (unsigned long long)(etcd_now_ms() - c->sent_ms),
	    why);
	etcd_endpoint_failed(e, ep, why);
	if (!call_retry(c, false, c->fail_msg)) {
		char msg[sizeof(c->fail_msg)];

		snprintf(msg, sizeof(msg), "%s", c->fail_msg);
		call_fail_later(c, ETCD_ERR_TIMEOUT, msg);
	}
	dispatch(e, false);
}

static void
call_reply(struct etcd_call *c, struct evhttp_request *req)
{
	struct etcd		*e = c->e;
	struct evbuffer		*in = evhttp_request_get_input_buffer(req);
	size_t			 len = evbuffer_get_length(in);
	int			 code = evhttp_request_get_response_code(req);
	struct etcd_result	 r;
	json_t			*root;
	json_error_t		 jerr;
	void			*arena = NULL;
	char			 msg[300], safe[256];

	memset(&r, 0, sizeof(r));
	r.endpoint = e->eps[c->ep].url;
	root = json_loadb((const char *)evbuffer_pullup(in, -1), len, 0,
	    &jerr);
	if (root == NULL) {
		/* what it says instead, cut, without control bytes */
		char	 text[100];
		size_t	 n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;

		evbuffer_copyout(in, text, n);
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
				text[i] = ' ';
		while (n > 0 && text[n - 1] == ' ')
			n--;
		text[n] = '\0';
		snprintf(msg, sizeof(msg), "HTTP %d from %s without JSON%s%s",
		    code, r.endpoint, n > 0 ? ": " : "", text);
		call_unlink(c);
		call_fail(c, ETCD_ERR_PROTO, msg);
		return;
	}
	etcd_result_decode(root, &r, &arena);
	etcd_member_up(e, c->ep);
	etcd_member_term(e, c->ep, r.raft_term);
	r.message = etcd_text_safe(r.message, safe, sizeof(safe));
	if (r.status == ETCD_ERR_GRPC && c != e->auth && e->user != NULL &&
	    etcd_token_refused(r.grpc_code, r.message)) {
		/* an expired token: once more, with a new one */
		etcd_auth_refused(e, c->token_gen);
		if (!c->reauthed && etcd_now_ms() + 10 < c->deadline_ms) {
			c->reauthed = true;
			call_unlink(c);
			c->state = CALL_QUEUED;
			TAILQ_INSERT_HEAD(&e->queue, c, entry);
			e->nqueue++;
			json_decref(root);
			kl_free(arena);
			return;
		}
	}
	if (r.status == ETCD_OK)
		etcd_watch_leader_seen(e);
	if (r.status == ETCD_ERR_GRPC && r.grpc_code == ETCD_GRPC_UNAVAILABLE) {
		etcd_endpoint_failed(e, c->ep, r.message);
		if (call_retry(c, false, r.message != NULL ? r.message :
		    "unavailable")) {
			json_decref(root);
			kl_free(arena);
			return;
		}
	}
	call_unlink(c);
	call_finish(c, &r);
	json_decref(root);
	kl_free(arena);
}

static void
call_done_cb(struct evhttp_request *req, void *arg)
{
	struct etcd_call	*c = arg;
	struct etcd		*e = c->e;
	struct etcd_conn	*conn = c->conn;
	char			 msg[300], tlswhy[240];

	conn->call = NULL;
	c->conn = NULL;
	c->req = NULL;
	if (req != NULL && evhttp_request_get_response_code(req) != 0) {
		call_reply(c, req);
	} else {
		/* without the error callback: the connect failed (or, for
		 * https, its handshake), nothing was sent */
		bool unsent = !c->got_error_cb;
		const char *why = unsent ? "cannot connect" :
		    http_error_name(c->http_error);

		if (e->eps[conn->ep].tls) {
			conn->stale = true;
			if (etcd_tls_why(conn->evcon, tlswhy, sizeof(tlswhy)))
				why = tlswhy;
			else if (unsent)
				why = "cannot connect, or the TLS handshake "
				    "failed (etcd's log says why)";
		}

		if (unsent)
			etcd_member_down(e, c->ep, why);
		etcd_endpoint_failed(e, c->ep, why);
		if (!call_retry(c, unsent, why)) {
			snprintf(msg, sizeof(msg), "%s: %s",
			    e->eps[c->ep].url, why);
			call_unlink(c);
			call_fail(c, ETCD_ERR_CONNECT, msg);
		}
	}
	dispatch(e, false);
}

struct etcd_call *
etcd_range(struct etcd *e, const struct etcd_range *rg, unsigned flags,
    etcd_cb *cb, void *arg)
{
	json_t	*b = json_object();
	bool	 ok = b != NULL &&
	    json_object_set_new(b, "key", etcd_json_b64(rg->key,
	    rg->keylen)) == 0 &&
	    (rg->end == NULL || json_object_set_new(b, "range_end",
	    etcd_json_b64(rg->end, rg->endlen)) == 0) &&
	    (rg->revision == 0 || json_object_set_new(b, "revision",
	    etcd_json_i64_new(rg->revision)) == 0) &&
	    (rg->limit == 0 || json_object_set_new(b, "limit",
	    etcd_json_i64_new(rg->limit)) == 0) &&
	    (!rg->keys_only || json_object_set_new(b, "keys_only",
	    json_true()) == 0) &&
	    (!rg->count_only || json_object_set_new(b, "count_only",
	    json_true()) == 0);

	if (!ok) {
		json_decref(b);
		b = NULL;
	}
	return etcd_post(e, "/v3/kv/range", b, flags, cb, arg);
}

struct etcd_call *
etcd_put(struct etcd *e, const char *key, size_t keylen, const char *value,
    size_t valuelen, int64_t lease, unsigned flags, etcd_cb *cb, void *arg)
{
	json_t	*b = json_object();
	bool	 ok = b != NULL &&
	    json_object_set_new(b, "key", etcd_json_b64(key, keylen)) == 0 &&
	    json_object_set_new(b, "value", etcd_json_b64(value,
	    valuelen)) == 0 &&
	    (lease == 0 || json_object_set_new(b, "lease",
	    etcd_json_i64_new(lease)) == 0);

	if (!ok) {
		json_decref(b);
		b = NULL;
	}
	return etcd_post(e, "/v3/kv/put", b, flags, cb, arg);
}

struct etcd_call *
etcd_deleterange(struct etcd *e, const char *key, size_t keylen,
    const char *end, size_t endlen, unsigned flags, etcd_cb *cb, void *arg)
{
	json_t	*b = json_object();
	bool	 ok = b != NULL &&
	    json_object_set_new(b, "key", etcd_json_b64(key, keylen)) == 0 &&
	    (end == NULL || json_object_set_new(b, "range_end",
	    etcd_json_b64(end, endlen)) == 0);

	if (!ok) {
		json_decref(b);
		b = NULL;
	}
	return etcd_post(e, "/v3/kv/deleterange", b, flags, cb, arg);
}

static json_t *
lease_body(const char *name, int64_t v, const char *name2, int64_t v2)
{
	json_t	*b = json_object();

	if (b == NULL ||
	    json_object_set_new(b, name, etcd_json_i64_new(v)) != 0 ||
	    (name2 != NULL && v2 != 0 &&
	    json_object_set_new(b, name2, etcd_json_i64_new(v2)) != 0)) {
		json_decref(b);
		return NULL;
	}
	return b;
}

struct etcd_call *
etcd_lease_grant(struct etcd *e, int64_t ttl, int64_t id, unsigned flags,
    etcd_cb *cb, void *arg)
{
	return etcd_post(e, "/v3/lease/grant", lease_body("TTL", ttl, "ID",
	    id), flags, cb, arg);
}

struct etcd_call *
etcd_lease_keepalive(struct etcd *e, int64_t id, unsigned flags,
    etcd_cb *cb, void *arg)
{
	return etcd_post(e, "/v3/lease/keepalive", lease_body("ID", id, NULL,
	    0), flags, cb, arg);
}

struct etcd_call *
etcd_lease_revoke(struct etcd *e, int64_t id, unsigned flags, etcd_cb *cb,
    void *arg)
{
	return etcd_post(e, "/v3/lease/revoke", lease_body("ID", id, NULL, 0),
	    flags, cb, arg);
}

struct etcd_call *
etcd_txn(struct etcd *e, struct etcd_txn *t, unsigned flags, etcd_cb *cb,
    void *arg)
{
	json_t *body = etcd_txn_json(t);

	etcd_txn_free(t);
	return etcd_post(e, "/v3/kv/txn", body, flags, cb, arg);
}

void
etcd_free(struct etcd *e)
{
	struct etcd_call *c;

	if (e == NULL)
		return;
	etcd_watch_free(e);
	while ((c = TAILQ_FIRST(&e->inflight)) != NULL ||
	    (c = TAILQ_FIRST(&e->queue)) != NULL) {
		call_unlink(c);
		if (c->state == CALL_INFLIGHT) {
			c->conn->call = NULL;
			c->req = NULL;
		}
		call_fail(c, ETCD_ERR_CANCELED, "etcd client closed");
	}
	for (int i = 0; i < e->o.conns; i++)
		if (e->conns[i].evcon != NULL)
			evhttp_connection_free(e->conns[i].evcon);
	etcd_probe_free(e);
	if (e->kick != NULL)
		event_free(e->kick);
	if (e->dns != NULL)
		evdns_base_free(e->dns, 0);
	etcd_tls_ctx_free(e->tls);
	auth_wipe(e);
	kl_free(e->conns);
	kl_free(e);
}
