/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Calls stuck on a member that cannot carry them out (etcd.h, ETCD_RETRY).
 * A follower forwards a write to the leader it knows; when that leader has
 * died, the write is lost on the way, and the follower waits for it until
 * its own request timeout (seven seconds by etcd's defaults), well past
 * ours: the call would fail although the cluster has elected a new leader
 * in a second or two. So a call that has waited stall_ms on its member
 * has the member asked for its raft status on a connection of its own
 * (POST /v3/maintenance/status, which raft does not see), again every
 * stall_ms / 2 while it waits, and the try is abandoned and the call sent
 * to the next member, under its first deadline, when the member
 *
 *  - has moved to a later raft term than the one it had when it took the
 *    call (the last term it told before the call went; for a member that
 *    told none yet, one the calls have just moved to, the newest term
 *    any member told: etcd_call's base_term): the leader changed, and
 *    the write it forwarded to the old one was either committed before
 *    the new leader's first entry, then applied and answered at once, or
 *    is lost; the new try is ordered after it;
 *  - has no leader; or
 *  - does not answer the probe within probe_ms (killed, stopped, cut off):
 *    then every call on it moves, and the member is passed over for
 *    down_ms by the calls and the watch (etcd_member_down()), so that a
 *    round of "no leader" from the others during the election does not
 *    bring a call back to it.
 *
 * The watch, when its member is found silent or without a leader so, is
 * started again on the next member, from the revision after the last it
 * brought (its stream would stay open and bring nothing); a watch whose
 * creation waits stall_ms has its member probed as a call's is.
 *
 * A try abandoned that etcd carried out after all makes the next one a
 * repeat: a put of the same value, a delete of nothing (the callers send
 * only such calls with ETCD_RETRY). A slow member that keeps its leader
 * and the term it told before is waited for, up to the deadline.
 */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/http.h>

#include <jansson.h>

#include "etcd_impl.h"
#include "log.h"

static void	stall_cb(evutil_socket_t, short, void *);

static int
clamp(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

int
etcd_probe_init(struct etcd *e)
{
	/* etcd-timeout 5000: a probe after 500 ms, every 250 ms, each
	 * given 1000 ms */
	e->stall_ms = clamp(e->o.timeout_ms / 10, 20, 500);
	e->probe_ms = clamp(e->o.timeout_ms / 5, 50, 1000);
	/* a member found silent: passed over for a call's whole deadline */
	e->down_ms = clamp(e->o.timeout_ms, 500, 30000);
	e->stall = evtimer_new(e->base, stall_cb, e);
	return e->stall != NULL ? 0 : -1;
}

void
etcd_probe_arm(struct etcd *e)
{
	struct timeval tv;

	if (evtimer_pending(e->stall, NULL))
		return;
	tv.tv_sec = 0;
	tv.tv_usec = (suseconds_t)(e->stall_ms / 2) * 1000;
	evtimer_add(e->stall, &tv);
}

void
etcd_probe_free(struct etcd *e)
{
	for (int i = 0; i < e->neps; i++)
		if (e->mem[i].probe != NULL) {
			evhttp_connection_free(e->mem[i].probe);
			e->mem[i].probe = NULL;
		}
	if (e->stall != NULL)
		event_free(e->stall);
	e->stall = NULL;
}

/* The status reply in req: what it says of the member's leader. */
static enum etcd_probe_verdict
probe_read(struct evhttp_request *req, int64_t *term)
{
	struct evbuffer	*in;
	json_t		*root, *leader;
	const char	*msg;
	int		 code;
	enum etcd_probe_verdict v = PROBE_NONE;

	if (req == NULL || evhttp_request_get_response_code(req) == 0)
		return PROBE_SILENT;
	in = evhttp_request_get_input_buffer(req);
	root = json_loadb((const char *)evbuffer_pullup(in, -1),
	    evbuffer_get_length(in), 0, NULL);
	if (root == NULL || !json_is_object(root)) {
		json_decref(root);
		return PROBE_NONE;
	}
	if (etcd_json_error(root, &code, &msg)) {
		/* "no leader" (the probe too asks for one), "stopping";
		 * anything else (auth?) says nothing */
		if (code == ETCD_GRPC_UNAVAILABLE)
			v = PROBE_NOLEADER;
	} else if (etcd_json_i64(json_object_get(root, "raftTerm"),
	    term) == 0 && *term > 0) {
		/* the leader's member id is a uint64 (as a string), absent
		 * for none: only whether there is one matters */
		leader = json_object_get(root, "leader");
		if (leader == NULL || (json_is_string(leader) &&
		    (strcmp(json_string_value(leader), "") == 0 ||
		    strcmp(json_string_value(leader), "0") == 0)))
			v = PROBE_NOLEADER;
		else if (json_is_string(leader))
			v = PROBE_TERM;
	}
	json_decref(root);
	return v;
}

static void
probe_done_cb(struct evhttp_request *req, void *arg)
{
	struct etcd_member	*m = arg;
	struct etcd		*e = m->e;

	m->verdict = probe_read(req, &m->probe_term);
	m->probe_why[0] = '\0';
	if (m->verdict == PROBE_SILENT && etcd_now_ms() - m->probe_sent_ms +
	    10 < (uint64_t)e->probe_ms) {
		/* not silence: the probe's connection failed, and the calls
		 * it moves on say how (a TLS alert, say), not "no status" */
		if (!e->eps[m - e->mem].tls || !etcd_tls_why(m->probe,
		    m->probe_why, sizeof(m->probe_why)))
			snprintf(m->probe_why, sizeof(m->probe_why),
			    "its status request failed");
	}
	m->probe_done = true;
	/* applied from the timer: the connection is freed there */
	event_active(e->stall, EV_TIMEOUT, 0);
}

static void
probe_send(struct etcd *e, int ep, uint64_t now)
{
	struct etcd_member	*m = &e->mem[ep];
	struct evhttp_request	*req;

	m->probe_last_ms = now;
	if ((m->probe = etcd_evcon_new(e, ep, e->probe_ms, 64 * 1024)) ==
	    NULL)
		return;
	req = etcd_request_new(e, ep, probe_done_cb, m, "{}", 2, e->token);
	if (req == NULL || evhttp_make_request(m->probe, req,
	    EVHTTP_REQ_POST, "/v3/maintenance/status") != 0) {
		/* evhttp_make_request frees req on failure */
		evhttp_connection_free(m->probe);
		m->probe = NULL;
		return;
	}
	m->probe_sent_ms = now;
	m->probe_done = false;
	m->verdict = PROBE_NONE;
}

/* What member ep's answer means for the tries waiting on it. */
static void
probe_apply(struct etcd *e, int ep, uint64_t now)
{
	struct etcd_member	*m = &e->mem[ep];
	struct etcd_call	*c, *next;
	char			 why[160];

	switch (m->verdict) {
	case PROBE_SILENT:
		if (m->probe_why[0] != '\0')
			snprintf(why, sizeof(why), "%s", m->probe_why);
		else
			snprintf(why, sizeof(why), "no status within %d ms",
			    e->probe_ms);
		break;
	case PROBE_NOLEADER:
		snprintf(why, sizeof(why), "no leader");
		break;
	case PROBE_TERM:
		snprintf(why, sizeof(why), "a new leader (raft term %lld)",
		    (long long)m->probe_term);
		break;
	case PROBE_NONE:
		return;
	}
	/* before the calls move: the next member is one that is not down */
	if (m->verdict == PROBE_SILENT)
		etcd_member_down(e, ep, why);
	else if (m->verdict == PROBE_TERM)
		etcd_member_up(e, ep);
	for (c = TAILQ_FIRST(&e->inflight); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		/* a silent member: every call on it moves, those sent after
		 * the probe too (they wait on the same silence; each would
		 * wait for a probe of its own otherwise) */
		if (c->state != CALL_INFLIGHT || c->ep != ep ||
		    !(c->flags & ETCD_RETRY) || (c->sent_ms >
		    m->probe_sent_ms && m->verdict != PROBE_SILENT) ||
		    now + 10 >= c->deadline_ms)
			continue;
		if (m->verdict == PROBE_TERM) {
			if (c->base_term == 0 &&
			    c->sent_ms < m->probe_sent_ms) {
				/* no term known at all when it went (the
				 * client's first calls): this one is the
				 * member's at the call or later */
				c->base_term = m->probe_term;
				continue;
			}
			if (c->base_term == 0 || m->probe_term <= c->base_term)
				continue;
		}
		etcd_call_abandon(c, why);
	}
	if (m->verdict == PROBE_TERM) {
		etcd_member_term(e, ep, m->probe_term);
	} else if (e->w.active && e->w.ep == ep && (e->w.state == WATCH_UP ||
	    (e->w.state == WATCH_OPENING &&
	    e->w.opened_ms <= m->probe_sent_ms))) {
		/* the watch on a member that is silent (stopped, or its host
		 * gone without a FIN) or without a leader brings nothing, and
		 * one being created there would wait for its whole deadline:
		 * elsewhere, from the next revision */
		log_debug("etcd: the watch's member %s: %s; watching again",
		    e->eps[ep].url, why);
		etcd_watch_restart(e);
	}
}

static void
stall_cb(evutil_socket_t fd, short what, void *arg)
{
	struct etcd		*e = arg;
	struct etcd_call	*c;
	uint64_t		 now = etcd_now_ms();
	bool			 again = false;

	for (int i = 0; i < e->neps; i++) {
		struct etcd_member *m = &e->mem[i];

		if (!m->probe_done)
			continue;
		m->probe_done = false;
		evhttp_connection_free(m->probe);
		m->probe = NULL;
		probe_apply(e, i, now);
	}
	TAILQ_FOREACH(c, &e->inflight, entry) {
		struct etcd_member *m;

		if (c->state != CALL_INFLIGHT)
			continue;
		again = true;
		if (!(c->flags & ETCD_RETRY) ||
		    now - c->sent_ms < (uint64_t)e->stall_ms)
			continue;
		m = &e->mem[c->ep];
		if (m->probe == NULL &&
		    now - m->probe_last_ms >= (uint64_t)e->stall_ms / 2)
			probe_send(e, c->ep, now);
	}
	/* the watch's creation, as a call: its stream says nothing until
	 * it is created */
	if (e->w.active && e->w.state == WATCH_OPENING && e->w.ep >= 0) {
		struct etcd_member *m = &e->mem[e->w.ep];

		again = true;
		if (now - e->w.opened_ms >= (uint64_t)e->stall_ms &&
		    m->probe == NULL &&
		    now - m->probe_last_ms >= (uint64_t)e->stall_ms / 2)
			probe_send(e, e->w.ep, now);
	}
	for (int i = 0; i < e->neps && !again; i++)
		again = e->mem[i].probe != NULL;
	if (again)
		etcd_probe_arm(e);
}
