/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The etcd client's one watch (etcd.h): a POST to /v3/watch with one
 * create_request, answered by a chunked stream of JSON replies, one per
 * line, on a connection of its own that stays open. The replies are cut
 * into lines here (evhttp hands over chunks), each line is decoded, and
 * its events are delivered in revision order, none twice: after a cut the
 * watch starts again from the revision after the last one delivered.
 * Tearing down and starting again happen from the watch's timer, never
 * from inside an evhttp callback.
 */
#include <sys/time.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>	/* body_size: see watch_chunk_cb */

#include <jansson.h>

#include "etcd_impl.h"
#include "log.h"
#include "util.h"

static void	watch_timer_cb(evutil_socket_t, short, void *);
static void	watch_chunk_cb(struct evhttp_request *, void *);
static void	watch_done_cb(struct evhttp_request *, void *);

static void
watch_timer_in(struct etcd_watch *w, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_del(w->timer);
	event_add(w->timer, &tv);
}

/* The next move, by the timer at once: drop the stream, pause for
 * pause_ms, open again (unless stopped). */
static void
watch_close_soon(struct etcd_watch *w, int pause_ms)
{
	w->state = WATCH_CLOSING;
	w->pause_ms = pause_ms;
	watch_timer_in(w, 0);
}

/* Drops the stream (only from the timer or etcd_free). */
static void
watch_close(struct etcd_watch *w)
{
	if (w->evcon != NULL)
		evhttp_connection_free(w->evcon);	/* frees w->req */
	w->evcon = NULL;
	w->req = NULL;
	if (w->line != NULL)
		evbuffer_drain(w->line, evbuffer_get_length(w->line));
}

/*
 * The stream failed: tell the user once, and watch again after a pause
 * that doubles up to ETCD_WATCH_RETRY_MAX_MS.
 */
static void
watch_cut(struct etcd *e, enum etcd_status st, const char *why)
{
	struct etcd_watch	*w = &e->w;

	if (!w->active || w->state == WATCH_CLOSING ||
	    w->state == WATCH_PAUSED)
		return;
	if (w->ep >= 0)
		etcd_endpoint_failed(e, w->ep, why);
	log_debug("etcd: watch on %s cut: %s", w->ep >= 0 ?
	    e->eps[w->ep].url : "-", why);
	watch_close_soon(w, w->backoff_ms);
	w->backoff_ms = w->backoff_ms * 2 > ETCD_WATCH_RETRY_MAX_MS ?
	    ETCD_WATCH_RETRY_MAX_MS : w->backoff_ms * 2;
	w->refused = st == ETCD_ERR_GRPC;
	if (w->cbs.down != NULL)
		w->cbs.down(w->arg, st, why);
}

static json_t *
watch_body(const struct etcd_watch *w)
{
	json_t	*cr = json_object(), *b = json_object();

	if (cr == NULL || b == NULL ||
	    json_object_set_new(cr, "key", etcd_json_b64(w->key,
	    w->keylen)) != 0 ||
	    json_object_set_new(cr, "range_end", etcd_json_b64(w->end,
	    w->endlen)) != 0 ||
	    json_object_set_new(cr, "start_revision",
	    etcd_json_i64_new(w->next_rev)) != 0) {
		json_decref(cr);
		json_decref(b);
		return NULL;
	}
	if (json_object_set_new(b, "create_request", cr) != 0) {
		json_decref(b);
		return NULL;
	}
	return b;
}

/* Opens the stream on the current endpoint (from the timer). */
static void
watch_open(struct etcd *e)
{
	struct etcd_watch	*w = &e->w;
	json_t			*body;
	char			*s = NULL;

	w->ep = e->cur;
	if (etcd_auth_wait(e)) {
		/* no token yet: open once it has come */
		w->state = WATCH_PAUSED;
		watch_timer_in(w, ETCD_WATCH_RETRY_MS);
		return;
	}
	w->state = WATCH_OPENING;
	w->token_gen = e->token_gen;
	body = watch_body(w);
	if (body != NULL)
		s = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	/* the stream may be idle for ever: no read timeout on it; the
	 * creation has a deadline of its own (the timer) */
	if (s == NULL ||
	    (w->evcon = etcd_evcon_new(e, w->ep, 24 * 3600 * 1000,
	    e->o.max_line)) == NULL ||
	    (w->req = etcd_request_new(e, w->ep, watch_done_cb, e, s,
	    strlen(s), e->token)) == NULL) {
		free(s);
		watch_cut(e, ETCD_ERR_NOMEM, "out of memory");
		return;
	}
	free(s);
	evhttp_request_set_chunked_cb(w->req, watch_chunk_cb);
	if (evhttp_make_request(w->evcon, w->req, EVHTTP_REQ_POST,
	    "/v3/watch") != 0) {
		w->req = NULL;
		watch_cut(e, ETCD_ERR_CONNECT, "cannot make the watch request");
		return;
	}
	watch_timer_in(w, e->o.timeout_ms);	/* creation deadline */
	/* and a probe of its member if it is not created in stall_ms */
	w->opened_ms = etcd_now_ms();
	etcd_probe_arm(e);
}

static void
watch_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct etcd		*e = arg;
	struct etcd_watch	*w = &e->w;

	switch (w->state) {
	case WATCH_CLOSING:
		watch_close(w);
		if (!w->active) {
			w->state = WATCH_IDLE;
			break;
		}
		w->state = WATCH_PAUSED;
		watch_timer_in(w, w->pause_ms);
		break;
	case WATCH_PAUSED:
		watch_open(e);
		break;
	case WATCH_OPENING:
		etcd_member_down(e, w->ep, "watch not created in time");
		watch_cut(e, ETCD_ERR_TIMEOUT, "watch not created in time");
		break;
	case WATCH_IDLE:
	case WATCH_UP:
		break;
	}
}

/* One decoded reply; false when the stream is to be cut or is over. */
static bool
watch_reply(struct etcd *e, const json_t *root)
{
	struct etcd_watch	*w = &e->w;
	const json_t		*res = json_object_get(root, "result");
	const json_t		*evs;
	int64_t			 hrev = 0, crev = 0;
	int			 code;
	const char		*msg;
	uint64_t		 gen = w->gen;
	char			 safe[256];

	if (etcd_json_error(root, &code, &msg)) {
		if (etcd_token_refused(code, msg))
			etcd_auth_refused(e, w->token_gen);
		watch_cut(e, ETCD_ERR_GRPC, etcd_text_safe(msg, safe,
		    sizeof(safe)));
		return false;
	}
	if (!json_is_object(res) ||
	    etcd_json_i64(json_object_get(json_object_get(res, "header"),
	    "revision"), &hrev) != 0 ||
	    etcd_json_i64(json_object_get(res, "compact_revision"),
	    &crev) != 0) {
		watch_cut(e, ETCD_ERR_PROTO, "malformed watch reply");
		return false;
	}
	if (json_is_true(json_object_get(res, "canceled"))) {
		if (crev > 0) {
			w->active = false;
			w->gen++;
			watch_close_soon(w, 0);
			log_debug("etcd: watch from revision %lld compacted "
			    "at %lld", (long long)w->next_rev,
			    (long long)crev);
			if (w->cbs.compacted != NULL)
				w->cbs.compacted(w->arg, crev);
			return false;
		}
		const json_t *why = json_object_get(res, "cancel_reason");

		/* etcd refuses a watch whose token has expired as it refuses
		 * one outside the user's role: the token is got again, and
		 * a refusal that remains is the role's */
		if (json_is_string(why) && strstr(json_string_value(why),
		    "permission denied") != NULL)
			etcd_auth_refused(e, w->token_gen);
		watch_cut(e, ETCD_ERR_GRPC, json_is_string(why) ?
		    etcd_text_safe(json_string_value(why), safe, sizeof(safe)) :
		    "watch canceled");
		return false;
	}
	if (json_is_true(json_object_get(res, "created"))) {
		w->state = WATCH_UP;
		w->backoff_ms = ETCD_WATCH_RETRY_MS;
		event_del(w->timer);
		if (w->cbs.created != NULL)
			w->cbs.created(w->arg, hrev);
		if (w->gen != gen || !w->active)
			return false;
	}
	evs = json_object_get(res, "events");

	size_t			 n, k = 0;
	struct etcd_event	*ev;
	int			 rc;

	if ((rc = etcd_events_decode(evs, &ev, &n)) != 0) {
		watch_cut(e, rc == -2 ? ETCD_ERR_NOMEM : ETCD_ERR_PROTO,
		    rc == -2 ? "out of memory" : "malformed watch event");
		return false;
	}
	if (n == 0)
		return true;
	/* never an event twice, even from a restarted stream */
	for (size_t i = 0; i < n; i++)
		if (ev[i].kv.mod_revision >= w->next_rev)
			ev[k++] = ev[i];
	if (k > 0) {
		w->next_rev = ev[k - 1].kv.mod_revision + 1;
		w->cbs.events(w->arg, ev, k, hrev);
	}
	kl_free(ev);
	return w->gen == gen && w->active;
}

static void
watch_chunk_cb(struct evhttp_request *req, void *arg)
{
	struct etcd		*e = arg;
	struct etcd_watch	*w = &e->w;
	struct evbuffer		*in = evhttp_request_get_input_buffer(req);
	struct evbuffer_ptr	 eol;
	size_t			 eol_len;

	if (!w->active || req != w->req ||
	    (w->state != WATCH_OPENING && w->state != WATCH_UP))
		return;
	if (evhttp_request_get_response_code(req) != 200) {
		watch_cut(e, ETCD_ERR_GRPC, "watch refused");
		return;
	}
	evbuffer_add_buffer(w->line, in);
	for (;;) {
		eol = evbuffer_search_eol(w->line, NULL, &eol_len,
		    EVBUFFER_EOL_LF);
		if (eol.pos < 0) {
			/*
			 * evhttp counts a chunked body whole against the
			 * connection's max_body (max_line here), and refuses
			 * a chunk whose size line would take it past that
			 * before reading the chunk. A stream is endless, so
			 * what it counts is set back to the part of a reply
			 * that has no LF yet: a reply, however it is cut in
			 * chunks, is refused once it is longer than
			 * max_line, before it is buffered
			 * (EVREQ_HTTP_DATA_TOO_LONG: the stream is cut and
			 * opened again).
			 */
			req->body_size = evbuffer_get_length(w->line);
			if (evbuffer_get_length(w->line) > e->o.max_line)
				watch_cut(e, ETCD_ERR_PROTO,
				    "watch reply too long");
			return;
		}

		json_error_t	 jerr;
		json_t		*root;
		bool		 more;

		if ((size_t)eol.pos > e->o.max_line) {
			watch_cut(e, ETCD_ERR_PROTO, "watch reply too long");
			return;
		}
		root = json_loadb((const char *)evbuffer_pullup(w->line,
		    eol.pos), (size_t)eol.pos, 0, &jerr);
		evbuffer_drain(w->line, (size_t)eol.pos + eol_len);
		if (root == NULL) {
			if (eol.pos == 0)
				continue;	/* an empty line */
			watch_cut(e, ETCD_ERR_PROTO, "watch reply not JSON");
			return;
		}
		more = watch_reply(e, root);
		json_decref(root);
		if (!more)
			return;
	}
}

static void
watch_done_cb(struct evhttp_request *req, void *arg)
{
	struct etcd		*e = arg;
	struct etcd_watch	*w = &e->w;

	/* one request per connection: this is the stream's end (req is
	 * NULL when the connection failed) */
	w->req = NULL;		/* evhttp frees it after this */
	if (!w->active ||
	    (w->state != WATCH_OPENING && w->state != WATCH_UP))
		return;
	char why[240];

	if (w->ep >= 0 && e->eps[w->ep].tls &&
	    etcd_tls_why(w->evcon, why, sizeof(why)))
		watch_cut(e, ETCD_ERR_CONNECT, why);
	else
		watch_cut(e, ETCD_ERR_CONNECT, req == NULL ||
		    evhttp_request_get_response_code(req) == 0 ?
		    "watch connection lost" : "watch stream ended");
}

int
etcd_watch_start(struct etcd *e, const char *prefix, size_t prefixlen,
    int64_t start_revision, const struct etcd_watch_cbs *cbs, void *arg)
{
	struct etcd_watch	*w = &e->w;
	char			*key, *end = NULL;

	if ((key = kl_malloc(prefixlen + 1)) == NULL ||
	    (end = kl_malloc(prefixlen + 1)) == NULL ||
	    (w->line == NULL && (w->line = evbuffer_new()) == NULL) ||
	    (w->timer == NULL &&
	    (w->timer = evtimer_new(e->base, watch_timer_cb, e)) == NULL)) {
		kl_free(key);
		kl_free(end);
		errno = ENOMEM;
		return -1;
	}
	memcpy(key, prefix, prefixlen);
	w->endlen = etcd_prefix_end(prefix, prefixlen, end);
	kl_free(w->key);
	kl_free(w->end);
	w->key = key;
	w->keylen = prefixlen;
	w->end = end;
	w->next_rev = start_revision > 0 ? start_revision : 1;
	w->cbs = *cbs;
	w->arg = arg;
	w->active = true;
	w->gen++;
	w->backoff_ms = ETCD_WATCH_RETRY_MS;
	watch_close_soon(w, 0);	/* the caller may be inside a callback */
	return 0;
}

void
etcd_watch_stop(struct etcd *e)
{
	struct etcd_watch *w = &e->w;

	if (!w->active)
		return;
	w->active = false;
	w->gen++;
	watch_close_soon(w, 0);
}

/*
 * While the members elect a leader, each refuses the watch ("no leader"),
 * and its pause doubles up to ETCD_WATCH_RETRY_MAX_MS: the watch would
 * open up to a second after the election, every grant waiting for it
 * (tests/etcd/leader_test saw 3.1 s for a LOCK after a leader's SIGSTOP,
 * 1.4 of them the watch's pauses). A call carried out says the leader
 * is there: the watch opens now, once per refusal.
 */
void
etcd_watch_leader_seen(struct etcd *e)
{
	struct etcd_watch *w = &e->w;

	if (!w->active || !w->refused || w->state != WATCH_PAUSED)
		return;
	w->refused = false;
	watch_timer_in(w, 0);
}

void
etcd_watch_restart(struct etcd *e)
{
	struct etcd_watch *w = &e->w;

	if (!w->active)
		return;
	w->gen++;
	if (w->ep >= 0)
		etcd_endpoint_failed(e, w->ep, "watch restarted");
	watch_close_soon(w, 0);
}

int64_t
etcd_watch_next_revision(const struct etcd *e)
{
	return e->w.next_rev;
}

bool
etcd_watch_is_up(const struct etcd *e)
{
	return e->w.active && e->w.state == WATCH_UP;
}

void
etcd_watch_free(struct etcd *e)
{
	struct etcd_watch *w = &e->w;

	w->active = false;
	if (w->timer != NULL)
		event_free(w->timer);
	w->timer = NULL;
	watch_close(w);
	if (w->line != NULL)
		evbuffer_free(w->line);
	w->line = NULL;
	kl_free(w->key);
	kl_free(w->end);
	w->key = w->end = NULL;
}
