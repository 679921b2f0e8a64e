/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Monitoring over HTTP with evhttp. /metrics renders the same counters as
 * STATS in the Prometheus text format (version 0.0.4): names prefixed
 * keylockd_, counters ending in _total, times in seconds, histograms with
 * cumulative le buckets ending at +Inf. It only reads the server's state.
 *
 * The listener is bounded (keylockd(8), THE HTTP LISTENER): a request's
 * line and headers at METRICS_MAX_HEADERS bytes, and in within
 * METRICS_TIMEOUT_S of the connection's accept or the request's first
 * byte, no body at all, a connection idle for METRICS_TIMEOUT_S closed, at
 * most metrics-max-connections open at once, and
 * metrics-max-connections-per-address from one address (past either, a
 * new one is closed at once), GET and HEAD only, and a Host header that names this
 * listener, an address, localhost or one of metrics-hosts (DNS rebinding).
 * Out of descriptors, it pauses with the server's listeners
 * (server_accept_failed). Every reply this file or status.c sends says
 * nosniff and no-store.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "backend.h"
#include "clock.h"
#include "config.h"
#include "locktable.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "stats.h"
#include "status.h"
#include "util.h"

struct metrics {
	struct server	*srv;
	struct evhttp	*http;
	char		 host[256];	/* as configured, no brackets */
	int		 port;
	int		 fd;		/* the listening socket */
	struct evconnlistener *lev;	/* evhttp's, on fd */
	int64_t		 nconns;	/* open HTTP connections */
	struct http_conn *conns;	/* each of them */
	uint64_t	 refused;	/* past the cap since refused_ms */
	uint64_t	 refused_ms;
	uint64_t	 refused_addr;	/* past an address's, since: */
	uint64_t	 refused_addr_ms;
	uint64_t	 late;		/* past a deadline since late_ms */
	uint64_t	 late_ms;
	struct metrics	*next;		/* metrics_all */
};

/* Every listener, for metrics_accept_error, whose argument is evhttp's. */
static struct metrics	*metrics_all;

/* A connection evhttp has accepted, from http_conn_new to its end,
 * http_conn_closed (or metrics_free). */
struct http_conn {
	struct metrics		*m;
	struct bufferevent	*bev;	/* evhttp's; a reference ours */
	struct evhttp_connection *evcon; /* from http_conn_adopt on */
	struct evbuffer_cb_entry *incb;	/* http_conn_input */
	struct event		*adopt;	/* http_conn_adopt, once */
	struct event		*deadline; /* the request's line and headers */
	bool			 reading; /* a request not yet whole */
	bool			 has_peer; /* peer is known */
	unsigned char		 peer[17]; /* family, then its address */
	struct http_conn	*next;
};

struct mbuf {
	char	*p;
	size_t	 len, cap;
	int	 failed;
};

static void KL_PRINTF(2, 3)
mbuf_printf(struct mbuf *b, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		char	*p = kl_realloc(b->p, b->cap * 2 + (size_t)n);

		if (p == NULL) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = b->cap * 2 + (size_t)n;
	}
}

static void
metrics_one(struct mbuf *b, const char *name, const char *type,
    const char *help, uint64_t v)
{
	mbuf_printf(b, "# HELP keylockd_%s %s\n# TYPE keylockd_%s %s\n"
	    "keylockd_%s %" PRIu64 "\n", name, help, name, type, name, v);
}

/* A gauge the server keeps in milliseconds, in seconds. */
static void
metrics_seconds(struct mbuf *b, const char *name, const char *help,
    uint64_t ms)
{
	mbuf_printf(b, "# HELP keylockd_%s %s\n# TYPE keylockd_%s gauge\n"
	    "keylockd_%s %" PRIu64 ".%03" PRIu64 "\n", name, help, name, name,
	    ms / 1000, ms % 1000);
}

static void
metrics_hist(struct mbuf *b, const char *name, const char *help,
    const struct kl_hist *h)
{
	uint64_t	cum = 0;

	mbuf_printf(b, "# HELP keylockd_%s %s\n# TYPE keylockd_%s "
	    "histogram\n", name, help, name);
	for (size_t i = 0; i < KL_HIST_NBUCKETS; i++) {
		uint64_t	ub = kl_hist_bound(i);

		cum += h->counts[i];
		if (ub == UINT64_MAX)
			mbuf_printf(b, "keylockd_%s_bucket{le=\"+Inf\"} %"
			    PRIu64 "\n", name, cum);
		else
			mbuf_printf(b, "keylockd_%s_bucket{le=\"%g\"} %"
			    PRIu64 "\n", name, (double)ub / 1000.0, cum);
	}
	mbuf_printf(b, "keylockd_%s_sum %.3f\nkeylockd_%s_count %" PRIu64
	    "\n", name, (double)h->sum_ms / 1000.0, name, kl_hist_count(h));
}

/* The hot keys of STATS that have waiters (most first; the others would
 * be any held keys, a new set of series at each scrape) as two gauge
 * families, one series per key; with none, both are left out. Keys are
 * UTF-8 with no control byte (keylockd-protocol(7), KEYS): only \ and "
 * need escaping. */
static void
metrics_hot(struct mbuf *b, const struct locktable *lt)
{
	static const char *const	 fam[2] = { "waiters", "holders" };
	const struct lt_key		*hot[KL_HOT_KEYS];
	struct lt_key_view		 v;
	char				 key[2 * KL_KEY_MAX + 1];
	size_t				 n, len;

	n = locktable_hot_keys(lt, hot, KL_HOT_KEYS);
	for (size_t i = 0; i < n; i++) {
		locktable_key_view(hot[i], &v);
		if (v.nwaiters == 0)
			n = i;
	}
	for (int f = 0; f < 2 && n > 0; f++) {
		mbuf_printf(b, "# HELP keylockd_hot_key_%s %s of the keys with "
		    "the most waiters.\n# TYPE keylockd_hot_key_%s gauge\n",
		    fam[f], f ? "Holders" : "Waiters", fam[f]);
		for (size_t i = 0; i < n; i++) {
			locktable_key_view(hot[i], &v);
			len = 0;
			for (size_t j = 0; j < v.keylen && j < KL_KEY_MAX;
			    j++) {
				if (v.key[j] == '"' || v.key[j] == '\\')
					key[len++] = '\\';
				key[len++] = v.key[j];
			}
			key[len] = '\0';
			mbuf_printf(b, "keylockd_hot_key_%s{key=\"%s\"} %zu\n",
			    fam[f], key, f ? v.nholders : v.nwaiters);
		}
	}
}

char *
metrics_render(struct server *srv)
{
	const struct lt_counters	*c = locktable_counters(backend_table(
					    server_backend(srv)));
	const struct stats		*st = server_stats(srv);
	struct mbuf			 b = { NULL, 0, 4096, 0 };

	if ((b.p = kl_malloc(b.cap)) == NULL)
		return NULL;
	mbuf_printf(&b, "# HELP keylockd_info Version of the running "
	    "server.\n# TYPE keylockd_info gauge\n"
	    "keylockd_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	metrics_one(&b, "uptime_seconds", "gauge", "Seconds since start.",
	    (kl_now_ms() - st->start_ms) / 1000);
	metrics_one(&b, "max_clients", "gauge", "The max-clients setting.",
	    (uint64_t)server_config(srv)->max_clients);
#define METRICS_counter(name, help, value)				\
	metrics_one(&b, name "_total", "counter", help, (value));
#define METRICS_gauge(name, help, value)				\
	metrics_one(&b, name, "gauge", help, (value));
#define METRICS_gauge_ms(name, help, value)				\
	metrics_seconds(&b, name "_seconds", help, (value));
#define METRICS_ROW(name, kind, value, help)				\
	METRICS_##kind(#name, help, value)
	KL_COUNTER_LIST(METRICS_ROW)
#undef METRICS_ROW
#undef METRICS_counter
#undef METRICS_gauge
#undef METRICS_gauge_ms
	metrics_hist(&b, "wait_seconds", "Time from request to grant.",
	    &c->wait_ms);
	metrics_hist(&b, "hold_seconds", "Time from grant to release.",
	    &c->hold_ms);
	metrics_hot(&b, backend_table(server_backend(srv)));
	if (b.failed) {
		kl_free(b.p);
		return NULL;
	}
	return b.p;
}

static void
metrics_send(struct evhttp_request *req, int code, const char *reason,
    const char *type, const char *body)
{
	struct evbuffer	*out = evbuffer_new();
	size_t		 len = strlen(body);

	/* libevent 2.1 would send a body after HEAD's headers. */
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
		len = 0;
	if (out == NULL || evbuffer_add(out, body, len) == -1) {
		if (out != NULL)
			evbuffer_free(out);
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", type);
	evhttp_send_reply(req, code, reason, out);
	evbuffer_free(out);
}

/* A comma-separated list holds name (ASCII case ignored); "*" holds all. */
static bool
metrics_list_has(const char *list, const char *name, size_t len)
{
	const char	*p = list, *e;

	while (p != NULL && *p != '\0') {
		while (*p == ' ' || *p == ',')
			p++;
		e = p + strcspn(p, ", ");
		if ((e - p == 1 && *p == '*') || ((size_t)(e - p) == len &&
		    len > 0 && strncasecmp(p, name, len) == 0))
			return true;
		p = e;
	}
	return false;
}

/*
 * DNS rebinding: a page from a name its attacker controls, resolved to
 * this listener, sends that name as its Host. Admitted: no Host (HTTP/1.0;
 * a browser always sends one), an IPv4 or [IPv6] literal (a browser sends
 * one only when its URL had it), localhost, the listener's own configured
 * host, and the names in metrics-hosts; a port, if given, must be a
 * number.
 */
bool
metrics_host_ok(const char *hdr, const char *own, const char *hosts)
{
	char		 name[256];
	const char	*port = NULL, *h = hdr;
	size_t		 len;
	unsigned char	 a[16];

	if (hdr == NULL)
		return true;
	if (*h == '[') {
		const char	*rb = strchr(h, ']');

		if (rb == NULL || (size_t)(rb - h - 1) >= sizeof(name))
			return false;
		len = (size_t)(rb - h - 1);
		memcpy(name, h + 1, len);
		name[len] = '\0';
		if (rb[1] == ':')
			port = rb + 2;
		else if (rb[1] != '\0')
			return false;
		if (inet_pton(AF_INET6, name, a) != 1)
			return false;
	} else {
		len = strcspn(h, ":");
		if (len >= sizeof(name) || len == 0)
			return false;
		memcpy(name, h, len);
		name[len] = '\0';
		if (h[len] == ':')
			port = h + len + 1;
	}
	if (port != NULL && (*port == '\0' || strlen(port) > 5 ||
	    strspn(port, "0123456789") != strlen(port)))
		return false;
	if (*h == '[' || inet_pton(AF_INET, name, a) == 1)
		return true;
	/* a trailing dot names the same host */
	if (len > 1 && name[len - 1] == '.')
		name[--len] = '\0';
	return strcasecmp(name, "localhost") == 0 ||
	    (own != NULL && strcasecmp(name, own) == 0) ||
	    (hosts != NULL && metrics_list_has(hosts, name, len));
}

static void	http_conn_whole(struct metrics *, struct evhttp_connection *);

static void
metrics_request_cb(struct evhttp_request *req, void *arg)
{
	struct metrics	*m = arg;
	struct server	*srv = m->srv;
	const char	*path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(
			    req));
	const struct config *cfg = server_config(srv);
	struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
	char		*body = NULL;

	http_conn_whole(m, evhttp_request_get_connection(req));
	/* on every reply, errors too: nothing here is to be cached or
	 * read as another type than it says */
	evhttp_add_header(oh, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(oh, "Cache-Control", "no-store");
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET &&
	    evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
		evhttp_add_header(oh, "Allow", "GET, HEAD");
		metrics_send(req, 405, "Method Not Allowed", "text/plain",
		    "method not allowed\n");
		return;
	}
	if (!metrics_host_ok(evhttp_find_header(
	    evhttp_request_get_input_headers(req), "Host"), m->host,
	    cfg->metrics_hosts)) {
		metrics_send(req, 403, "Forbidden", "text/plain",
		    "Host not allowed (keylockd.conf(5), metrics-hosts)\n");
		return;
	}
	if (status_serve(req, path, server_stats(srv), backend_table(
	    server_backend(srv)), backend_name(server_backend(srv)),
	    cfg->status_names) == 0)
		return;
	if (path != NULL && strcmp(path, "/metrics") == 0) {
		body = metrics_render(srv);
		if (body != NULL)
			metrics_send(req, 200, "OK", "text/plain; "
			    "version=0.0.4; charset=utf-8", body);
		kl_free(body);
	} else if (path != NULL && strcmp(path, "/stats") == 0) {
		body = stats_to_json(server_stats(srv), backend_table(
		    server_backend(srv)), kl_now_ms(), PACKAGE_VERSION,
		    backend_name(server_backend(srv)));
		if (body != NULL)
			metrics_send(req, 200, "OK", "application/json", body);
		free(body);
	} else if (path != NULL && strcmp(path, "/healthz") == 0) {
		/* A front end cut off from etcd says so to whatever routes
		 * clients to it (keylockd(8), MONITORING). */
		if (server_stats(srv)->be.ready)
			metrics_send(req, 200, "OK", "text/plain", "ok\n");
		else
			metrics_send(req, 503, "Service Unavailable",
			    "text/plain", "backend not ready\n");
		return;
	} else {
		metrics_send(req, 404, "Not Found", "text/plain",
		    "not found\n");
		return;
	}
	if (body == NULL)
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

int
metrics_split(const char *addr, char *host, size_t hostlen, uint16_t *port)
{
	const char	*colon, *h = addr, *he;
	uint64_t	 p;

	if ((colon = strrchr(addr, ':')) == NULL)
		return -1;
	he = colon;
	if (*h == '[') {
		h++;
		if (he == h || he[-1] != ']')
			return -1;
		he--;
	}
	if ((size_t)(he - h) >= hostlen || he == h ||
	    !kl_parse_u64(colon + 1, strlen(colon + 1), 0, 65535, &p))
		return -1;
	memcpy(host, h, (size_t)(he - h));
	host[he - h] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* Counts a connection closed for a reason, and says how many at most once
 * per KL_WARN_INTERVAL_MS. */
static void
metrics_count_close(uint64_t *n, uint64_t *warned_ms, const char *why)
{
	uint64_t	now = kl_now_ms();

	(*n)++;
	if (*warned_ms == 0 || now - *warned_ms >= KL_WARN_INTERVAL_MS) {
		log_warnx("metrics: %" PRIu64 " HTTP connection(s) %s", *n,
		    why);
		*n = 0;
		*warned_ms = now;
	}
}

static void
http_conn_free(struct http_conn *hc)
{
	struct http_conn	**pp;

	for (pp = &hc->m->conns; *pp != hc; pp = &(*pp)->next)
		continue;
	*pp = hc->next;
	evbuffer_remove_cb_entry(bufferevent_get_input(hc->bev), hc->incb);
	if (hc->adopt != NULL)
		event_free(hc->adopt);
	event_free(hc->deadline);
	bufferevent_decref(hc->bev);
	kl_free(hc);
}

/* An open HTTP connection ends (evhttp_connection_free). */
static void
http_conn_closed(struct evhttp_connection *evcon, void *arg)
{
	struct http_conn	*hc = arg;

	(void)evcon;
	hc->m->nconns--;
	http_conn_free(hc);
}

/* A request begins: its line and headers have METRICS_TIMEOUT_S. */
static void
http_conn_begin(struct http_conn *hc)
{
	struct timeval	tv = { METRICS_TIMEOUT_S, 0 };

	hc->reading = true;
	evtimer_add(hc->deadline, &tv);
}

/* Bytes came in; the first since the last request was whole begin one. */
static void
http_conn_input(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct http_conn	*hc = arg;

	(void)buf;
	if (info->n_added > 0 && !hc->reading)
		http_conn_begin(hc);
}

/* evcon's request is whole (metrics_request_cb): its deadline is off, and
 * a next one's, if any of it came with it, on. */
static void
http_conn_whole(struct metrics *m, struct evhttp_connection *evcon)
{
	struct http_conn	*hc;

	for (hc = m->conns; hc != NULL && hc->evcon != evcon; hc = hc->next)
		continue;
	if (hc == NULL)
		return;
	hc->reading = false;
	evtimer_del(hc->deadline);
	if (evbuffer_get_length(bufferevent_get_input(hc->bev)) > 0)
		http_conn_begin(hc);
}

/* A request's line and headers are not in after METRICS_TIMEOUT_S (a
 * slow sender would have kept evhttp's idle timeout from ending it for as
 * long as its 8192 bytes lasted): the connection ends, unanswered, as an
 * idle one does. */
static void
http_conn_late(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn	*hc = arg;
	char			 why[128];

	(void)fd;
	(void)what;
	if (hc->evcon == NULL)
		return;
	snprintf(why, sizeof(why), "closed: a request's line and headers "
	    "not in within %d s", METRICS_TIMEOUT_S);
	metrics_count_close(&hc->m->late, &hc->m->late_ms, why);
	evhttp_connection_free(hc->evcon);	/* and hc */
}

/* hc's peer address (an IPv4-mapped IPv6 one as IPv4), as its family and
 * its bytes; false if the kernel does not say. */
static bool
http_conn_peer(struct http_conn *hc)
{
	struct sockaddr_storage	 ss;
	socklen_t		 sl = sizeof(ss);
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;

	memset(hc->peer, 0, sizeof(hc->peer));
	if (getpeername(bufferevent_getfd(hc->bev), (struct sockaddr *)&ss,
	    &sl) == -1)
		return false;
	if (ss.ss_family == AF_INET) {
		hc->peer[0] = 4;
		memcpy(hc->peer + 1, &((const struct sockaddr_in *)&ss)->
		    sin_addr, 4);
	} else if (ss.ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		hc->peer[0] = 4;
		memcpy(hc->peer + 1, s6->sin6_addr.s6_addr + 12, 4);
	} else if (ss.ss_family == AF_INET6) {
		hc->peer[0] = 6;
		memcpy(hc->peer + 1, s6->sin6_addr.s6_addr, 16);
	} else
		return false;
	return true;
}

/*
 * Whether hc's address has per or more other connections open
 * (keylockd.conf(5), metrics-max-connections-per-address); the list is
 * at most metrics-max-connections long, as every connection past that is
 * closed when it is adopted.
 */
static bool
http_conn_addr_full(const struct http_conn *hc, int64_t per)
{
	const struct http_conn	*o;
	int64_t			 n = 0;

	if (per == 0 || !hc->has_peer)
		return false;
	for (o = hc->m->conns; o != NULL; o = o->next)
		if (o != hc && o->evcon != NULL && o->has_peer &&
		    memcmp(o->peer, hc->peer, sizeof(o->peer)) == 0 &&
		    ++n >= per)
			return true;
	return false;
}

/* Once per accepted connection, after evhttp has made it: the
 * bufferevent's callback argument is evhttp's connection, whose end
 * http_conn_closed counts; past the cap, or its address's, it ends
 * here. */
static void
http_conn_adopt(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn		*hc = arg;
	struct metrics			*m = hc->m;
	bufferevent_event_cb		 ecb;
	void				*cbarg;
	const struct config		*cfg = server_config(m->srv);
	int64_t				 cap = cfg->metrics_max_connections;
	char				 why[160], host[INET6_ADDRSTRLEN];

	(void)fd;
	(void)what;
	event_free(hc->adopt);
	hc->adopt = NULL;
	bufferevent_getcb(hc->bev, NULL, NULL, &ecb, &cbarg);
	if (ecb == NULL || cbarg == NULL) {
		m->nconns--;	/* evhttp has freed it already */
		http_conn_free(hc);
		return;
	}
	hc->evcon = cbarg;
	evhttp_connection_set_closecb(hc->evcon, http_conn_closed, hc);
	if (m->nconns > cap) {
		snprintf(why, sizeof(why), "refused: metrics-max-connections "
		    "%" PRId64 " are open", cap);
		metrics_count_close(&m->refused, &m->refused_ms, why);
		/* no reply: it would cost what the cap saves */
		evhttp_connection_free(hc->evcon);	/* and hc */
		return;
	}
	hc->has_peer = http_conn_peer(hc);
	if (http_conn_addr_full(hc, cfg->metrics_max_per_address)) {
		if (inet_ntop(hc->peer[0] == 4 ? AF_INET : AF_INET6,
		    hc->peer + 1, host, sizeof(host)) == NULL)
			snprintf(host, sizeof(host), "?");
		snprintf(why, sizeof(why), "refused: "
		    "metrics-max-connections-per-address %" PRId64 " are "
		    "open from %s",
		    cfg->metrics_max_per_address, host);
		metrics_count_close(&m->refused_addr, &m->refused_addr_ms,
		    why);
		evhttp_connection_free(hc->evcon);	/* and hc */
	}
}

/* evhttp's bufferevent for a connection it has just accepted (libevent
 * 2.1 has no other hook there); it is counted from now, its first
 * request's deadline runs from now, and it is adopted as soon as the loop
 * runs again. */
static struct bufferevent *
http_conn_new(struct event_base *base, void *arg)
{
	struct metrics		*m = arg;
	struct http_conn	*hc;

	if ((hc = kl_calloc(1, sizeof(*hc))) == NULL)
		return NULL;
	hc->m = m;
	if ((hc->bev = bufferevent_socket_new(base, -1,
	    BEV_OPT_CLOSE_ON_FREE)) == NULL ||
	    (hc->adopt = evtimer_new(base, http_conn_adopt, hc)) == NULL ||
	    (hc->deadline = evtimer_new(base, http_conn_late, hc)) == NULL ||
	    (hc->incb = evbuffer_add_cb(bufferevent_get_input(hc->bev),
	    http_conn_input, hc)) == NULL) {
		if (hc->adopt != NULL)
			event_free(hc->adopt);
		if (hc->deadline != NULL)
			event_free(hc->deadline);
		if (hc->bev != NULL)
			bufferevent_free(hc->bev);
		kl_free(hc);
		return NULL;
	}
	bufferevent_incref(hc->bev);	/* until http_conn_free */
	hc->next = m->conns;
	m->conns = hc;
	m->nconns++;
	http_conn_begin(hc);
	event_active(hc->adopt, EV_TIMEOUT, 1);
	return hc->bev;
}

/* evhttp's listener could not accept: out of descriptors, it pauses with
 * the others (server_accept_failed), where libevent would try again and
 * log each failure as long as a connection waits. */
static void
metrics_accept_error(struct evconnlistener *lev, void *arg)
{
	struct metrics	*m;
	int		 err = EVUTIL_SOCKET_ERROR();

	(void)arg;	/* evhttp's */
	for (m = metrics_all; m != NULL && m->lev != lev; m = m->next)
		continue;
	if (m == NULL)
		return;
	errno = err;
	server_accept_failed(m->srv, "the metrics listener");
}

void
metrics_pause(struct metrics *m, bool pause)
{
	if (pause)
		evconnlistener_disable(m->lev);
	else
		evconnlistener_enable(m->lev);
}

/* Whether the configured host is a loopback address or localhost. */
static bool
metrics_host_is_loopback(const char *host)
{
	struct in_addr	 a4;
	struct in6_addr	 a6;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return strcasecmp(host, "localhost") == 0;
}

struct metrics *
metrics_new(struct server *srv, const char *addr, int fd, char *errbuf,
    size_t errlen)
{
	struct metrics			*m;
	struct evhttp_bound_socket	*h;
	struct sockaddr_storage		 ss;
	socklen_t			 sl = sizeof(ss);
	struct evutil_addrinfo		 hints, *ai = NULL;
	char				 host[256], service[8];
	uint16_t			 port;
	int				 r;

	if (metrics_split(addr, host, sizeof(host), &port) == -1) {
		snprintf(errbuf, errlen, "expected HOST:PORT or [V6]:PORT");
		return NULL;
	}
	/* evhttp would say only that it failed, and why on its own line */
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICSERV;
	snprintf(service, sizeof(service), "%u", port);
	if (fd == -1 && (r = evutil_getaddrinfo(host, service, &hints,
	    &ai)) != 0) {
		snprintf(errbuf, errlen, "cannot resolve %s: %s", host,
		    evutil_gai_strerror(r));
		return NULL;
	}
	if (ai != NULL)
		evutil_freeaddrinfo(ai);
	if ((m = kl_calloc(1, sizeof(*m))) == NULL ||
	    (m->http = evhttp_new(server_base(srv))) == NULL) {
		kl_free(m);
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	m->srv = srv;
	snprintf(m->host, sizeof(m->host), "%s", host);
	/* Every method reaches metrics_request_cb, which answers 405 to
	 * all but GET and HEAD (evhttp itself would say 501): all 16 bits,
	 * the nine methods evhttp knows and bit 15, which libevent 2.1 gives
	 * any other (EVHTTP_REQ_UNKNOWN_, in its private http-internal.h).
	 * With no body admitted, evhttp refuses one (413) before reading
	 * it. */
	evhttp_set_allowed_methods(m->http, UINT16_MAX);
	evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, 0);
	evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
	evhttp_set_bevcb(m->http, http_conn_new, m);
	evhttp_set_gencb(m->http, metrics_request_cb, m);
	if ((h = fd != -1 ? evhttp_accept_socket_with_handle(m->http, fd) :
	    evhttp_bind_socket_with_handle(m->http, host, port)) == NULL) {
		snprintf(errbuf, errlen, "cannot listen: %s",
		    strerror(errno));
		metrics_free(m);
		return NULL;
	}
	m->fd = evhttp_bound_socket_get_fd(h);
	m->lev = evhttp_bound_socket_get_listener(h);
	evconnlistener_set_error_cb(m->lev, metrics_accept_error);
	m->next = metrics_all;
	metrics_all = m;
	if (getsockname(m->fd, (struct sockaddr *)&ss, &sl) == 0)
		m->port = ntohs(ss.ss_family == AF_INET6 ?
		    ((struct sockaddr_in6 *)&ss)->sin6_port :
		    ((struct sockaddr_in *)&ss)->sin_port);
	log_info("metrics on http %s port %d: /metrics, /stats, /healthz, "
	    "/ (status page)", host, m->port);
	if (!metrics_host_is_loopback(host))
		log_warnx("metrics %s is not a loopback address: anyone who "
		    "can reach it reads the counters, the hot keys' names "
		    "and their holders (keylockd(8), THE HTTP LISTENER)",
		    addr);
	return m;
}

int
metrics_port(const struct metrics *m)
{
	return m->port;
}

int
metrics_fd(const struct metrics *m)
{
	return m->fd;
}

void
metrics_free(struct metrics *m)
{
	struct metrics	**pp;

	if (m == NULL)
		return;
	for (pp = &metrics_all; *pp != NULL; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	/* evhttp_free ends the adopted connections (http_conn_closed);
	 * the others are let go here. */
	if (m->http != NULL)
		evhttp_free(m->http);
	while (m->conns != NULL)
		http_conn_free(m->conns);
	kl_free(m);
}
