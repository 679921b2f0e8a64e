/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Monitoring over HTTP with evhttp. /metrics renders the same counters as
 * STATS in the Prometheus text format (version 0.0.4): names prefixed
 * keylockd_, counters ending in _total, times in seconds, histograms with
 * cumulative le buckets ending at +Inf. It only reads the server's state.
 */
#include <sys/socket.h>

#include <netinet/in.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

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
	int		 port;
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
	    "\n", name, (double)h->sum_ms / 1000.0, name, h->count);
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
#define METRICS_SUFFIX_counter	"_total"
#define METRICS_SUFFIX_gauge	""
#define METRICS_ROW(name, kind, value, help)				\
	metrics_one(&b, #name METRICS_SUFFIX_##kind, #kind, help, (value));
	KL_COUNTER_LIST(METRICS_ROW)
#undef METRICS_ROW
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
metrics_send(struct evhttp_request *req, int code, const char *type,
    const char *body)
{
	struct evbuffer	*out = evbuffer_new();

	if (out == NULL) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", type);
	evbuffer_add(out, body, strlen(body));
	evhttp_send_reply(req, code, code == 200 ? "OK" : "Not Found", out);
	evbuffer_free(out);
}

static void
metrics_request_cb(struct evhttp_request *req, void *arg)
{
	struct metrics	*m = arg;
	struct server	*srv = m->srv;
	const char	*path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(
			    req));
	char		*body = NULL;

	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET &&
	    evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
		evhttp_send_error(req, 405, "Method Not Allowed");
		return;
	}
	if (status_serve(req, path, server_stats(srv), backend_table(
	    server_backend(srv)), backend_name(server_backend(srv))) == 0)
		return;
	if (path != NULL && strcmp(path, "/metrics") == 0) {
		body = metrics_render(srv);
		if (body != NULL)
			metrics_send(req, 200, "text/plain; version=0.0.4; "
			    "charset=utf-8", body);
		kl_free(body);
	} else if (path != NULL && strcmp(path, "/stats") == 0) {
		body = stats_to_json(server_stats(srv), backend_table(
		    server_backend(srv)), kl_now_ms(), PACKAGE_VERSION,
		    backend_name(server_backend(srv)));
		if (body != NULL)
			metrics_send(req, 200, "application/json", body);
		free(body);
	} else if (path != NULL && strcmp(path, "/healthz") == 0) {
		metrics_send(req, 200, "text/plain", "ok\n");
		return;
	} else {
		metrics_send(req, 404, "text/plain", "not found\n");
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

struct metrics *
metrics_new(struct server *srv, const char *addr, char *errbuf,
    size_t errlen)
{
	struct metrics			*m;
	struct evhttp_bound_socket	*h;
	struct sockaddr_storage		 ss;
	socklen_t			 sl = sizeof(ss);
	char				 host[256];
	uint16_t			 port;

	if (metrics_split(addr, host, sizeof(host), &port) == -1) {
		snprintf(errbuf, errlen, "metrics %s: expected HOST:PORT or "
		    "[V6]:PORT", addr);
		return NULL;
	}
	if ((m = kl_calloc(1, sizeof(*m))) == NULL ||
	    (m->http = evhttp_new(server_base(srv))) == NULL) {
		kl_free(m);
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	m->srv = srv;
	/* Every method reaches metrics_request_cb, which answers 405 to
	 * all but GET and HEAD (evhttp itself would say 501). */
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
	    EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(m->http, metrics_request_cb, m);
	if ((h = evhttp_bind_socket_with_handle(m->http, host, port)) ==
	    NULL) {
		snprintf(errbuf, errlen, "metrics: cannot listen on %s",
		    addr);
		metrics_free(m);
		return NULL;
	}
	if (getsockname(evhttp_bound_socket_get_fd(h), (struct sockaddr *)&ss,
	    &sl) == 0)
		m->port = ntohs(ss.ss_family == AF_INET6 ?
		    ((struct sockaddr_in6 *)&ss)->sin6_port :
		    ((struct sockaddr_in *)&ss)->sin_port);
	log_info("metrics on http %s port %d: /metrics, /stats, /healthz, "
	    "/ (status page)", host, m->port);
	return m;
}

int
metrics_port(const struct metrics *m)
{
	return m->port;
}

void
metrics_free(struct metrics *m)
{
	if (m == NULL)
		return;
	if (m->http != NULL)
		evhttp_free(m->http);
	kl_free(m);
}
