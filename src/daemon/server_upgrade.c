/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Live upgrade, the server's part (keylockd(8), LIVE UPGRADE; HACKING.md,
 * Live upgrade): UPGRADE and SIGUSR2 start it; once the new binary passed
 * --check-config the server freezes between two turns, writes its state
 * (kstate.h: the hand-off, the lock table, the token mark, the counters,
 * the listeners, sessions and connections) and hands it to the new
 * process (upgrade.c); if that one takes over, this process exits at once,
 * touching no socket, the token mark or the unix socket's file; if not,
 * nothing here changed and it carries on, answering ERR UPGRADE. The new
 * process rebuilds everything from the state, checks it, and only then
 * reports ready.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "commands.h"
#include "config.h"
#include "conn.h"
#include "kstate.h"
#include "locktable.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "server.h"
#include "server_impl.h"
#include "session.h"
#include "stats.h"
#include "token.h"
#include "upgrade.h"
#include "util.h"

#define SU_VERSION_MAX	64
#define SU_CONN_BYTES	192	/* about a connection's record, unbuffered */
/* The heap the rebuild takes, per byte of the state: a key of the TABLE
 * section (48 bytes) takes about 100 in the table, a connection (150
 * bytes) about 900 with its events. */
#define SU_HEAP_PER_TABLE_BYTE	3
#define SU_HEAP_PER_CONN_BYTE	7

static void	server_upgrade_checked(void *, struct upgrade_check *,
		    const char *);

/* About the bytes of this server's state. */
static size_t
server_state_size(const struct server *srv)
{
	return locktable_state_size(backend_local_table(srv->be)) +
	    (size_t)srv->stats.clients * SU_CONN_BYTES;
}

/* About the heap the new process's rebuild takes. */
static size_t
server_heap_hint(const struct server *srv)
{
	return locktable_state_size(backend_local_table(srv->be)) *
	    SU_HEAP_PER_TABLE_BYTE + (size_t)srv->stats.clients *
	    SU_CONN_BYTES * SU_HEAP_PER_CONN_BYTE;
}

/* Whether this server's state can be handed over now; why if not. */
static bool
server_upgrade_possible(const struct server *srv, uint64_t requester,
    char *why, size_t whylen)
{
	if (srv->stopping) {
		snprintf(why, whylen, "the server is stopping");
		return false;
	}
	if (backend_local_table(srv->be) == NULL) {
		snprintf(why, whylen, "backend %s: its lease, replica and "
		    "commit queue are not handed over yet; restart instead",
		    backend_name(srv->be));
		return false;
	}
	return conns_state_check(srv->conns, requester, why, whylen);
}

/*
 * keylockd(8), LIVE UPGRADE: an upgrade refused before it starts (one is
 * already under way, the server is stopping, backend etcd, a TLS
 * requester) is logged as refused and not counted; one that started and
 * failed (from the new binary's --check-config on) is logged as failed
 * and counted in upgrade_failures. The same for UPGRADE and SIGUSR2.
 */
static bool
server_upgrade_refused(const char *why)
{
	log_warnx("upgrade refused: %s; this process (pid %d) carries on",
	    why, (int)getpid());
	return false;
}

static bool
server_upgrade_start(struct server *srv, uint64_t requester, char *why,
    size_t whylen)
{
	if (srv->upgrading) {
		snprintf(why, whylen, "an upgrade is already under way");
		return server_upgrade_refused(why);
	}
	if (!server_upgrade_possible(srv, requester, why, whylen))
		return server_upgrade_refused(why);
	upgrade_set_timeout((uint64_t)srv->cfg->upgrade_timeout);
	srv->upgrade_check = upgrade_check_start(srv->base, srv->cfg->argv,
	    server_heap_hint(srv), server_upgrade_checked, srv, why, whylen);
	if (srv->upgrade_check == NULL) {
		srv->stats.upgrade_failures++;
		log_warnx("upgrade failed: %s; this process (pid %d) carries "
		    "on", why, (int)getpid());
		return false;
	}
	srv->upgrading = true;
	srv->upgrade_requester = requester;
	log_info("upgrade: %s --check-config", upgrade_path());
	/* meanwhile, the state's memory, outside the freeze */
	upgrade_state_prepare(server_state_size(srv));
	return true;
}

static void
server_upgrade_failed(struct server *srv, const char *why)
{
	struct conn	*c;

	srv->upgrading = false;
	srv->upgrade_check = NULL;
	upgrade_state_discard();
	srv->stats.upgrade_failures++;
	token_lock_note_pid();	/* the new process may have named itself */
	log_warnx("upgrade failed: %s; this process (pid %d) carries on",
	    why, (int)getpid());
	if (srv->upgrade_requester != 0 &&
	    (c = conns_find(srv->conns, srv->upgrade_requester)) != NULL)
		commands_upgrade_failed(srv->cmds, c, why);
	srv->upgrade_requester = 0;
}

void
server_upgrade_signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct server	*srv = arg;
	char		 why[KL_UPGRADE_WHY_MAX];

	log_info("SIGUSR2: live upgrade to %s", upgrade_path());
	(void)server_upgrade_start(srv, 0, why, sizeof(why));
	server_end_turn(srv);
}

bool
server_upgrade_request(void *arg, struct conn *c, char *why, size_t whylen)
{
	struct server	*srv = arg;

	log_info("UPGRADE by client %" PRIu64 " (%s): live upgrade to %s",
	    conn_id(c), conn_peer(c), upgrade_path());
	if (conn_transport(c) == CONN_TLS) {
		snprintf(why, whylen, "TLS connections are closed by a live "
		    "upgrade, so this one could not hear the reply: ask over "
		    "the unix socket or plain TCP, or send SIGUSR2");
		return server_upgrade_refused(why);
	}
	return server_upgrade_start(srv, conn_id(c), why, whylen);
}

/* ---- the state ---- */

/*
 * The counters of struct stats since start (its gauges are rebuilt: clients,
 * sessions, channels; pid and the upgrade's own are set afresh). A new
 * counter goes here and in server_get_stats(), with a new KS_VERSION.
 */
static void
server_put_stats(struct ks_writer *w, const struct stats *st)
{
	ks_put_u64(w, st->start_ms);
	ks_put_u64(w, st->connections);
	ks_put_u64(w, st->rejected_connections);
	ks_put_u64(w, st->requests);
	ks_put_u64(w, st->errors);
	ks_put_u64(w, st->auth_failures);
	ks_put_u64(w, st->output_closes);
	ks_put_u64(w, st->nomem_closes);
	ks_put_u64(w, st->auth_timeouts);
	ks_put_u64(w, st->write_timeouts);
	ks_put_u64(w, st->idle_timeouts);
	ks_put_u64(w, st->output_budget_closes);
	ks_put_u64(w, st->input_budget_waits);
	ks_put_u64(w, st->sessions_resumed);
	ks_put_u64(w, st->sessions_expired);
	ks_put_u64(w, st->upgrade_failures);
}

static void
server_get_stats(struct ks_reader *r, struct stats *st)
{
	st->start_ms = ks_get_u64(r);
	st->connections = ks_get_u64(r);
	st->rejected_connections = ks_get_u64(r);
	st->requests = ks_get_u64(r);
	st->errors = ks_get_u64(r);
	st->auth_failures = ks_get_u64(r);
	st->output_closes = ks_get_u64(r);
	st->nomem_closes = ks_get_u64(r);
	st->auth_timeouts = ks_get_u64(r);
	st->write_timeouts = ks_get_u64(r);
	st->idle_timeouts = ks_get_u64(r);
	st->output_budget_closes = ks_get_u64(r);
	st->input_budget_waits = ks_get_u64(r);
	st->sessions_resumed = ks_get_u64(r);
	st->sessions_expired = ks_get_u64(r);
	st->upgrade_failures = ks_get_u64(r);
}

/* Each owner's number in the state, noted in its connection. */
static void
server_note_owner(void *arg, struct lt_owner *o, uint32_t index)
{
	struct conn	*c = owner_conn(o);

	(void)arg;
	if (c != NULL)
		conn_state_note(c, index);
	else
		session_state_note(o, index);	/* a detached session's */
}

/*
 * The whole state into w (upgrade_state_writer's), and in fds every
 * descriptor it names. false on no memory.
 */
static bool
server_write_state(struct server *srv, struct ks_writer *w,
    uint64_t freeze_ms, uint64_t tls_closed, int *fds, size_t *nfds)
{
	struct locktable	*lt = backend_local_table(srv->be);

	ks_section_begin(w, KS_TAG_HANDOFF);
	ks_put_u32(w, (uint32_t)getpid());
	ks_put_u64(w, freeze_ms);
	ks_put_u64(w, srv->stats.upgrades);
	ks_put_str(w, PACKAGE_VERSION);
	/* the client that asked may have gone meanwhile */
	ks_put_u64(w, srv->upgrade_requester != 0 &&
	    conns_find(srv->conns, srv->upgrade_requester) != NULL ?
	    srv->upgrade_requester : 0);
	ks_put_u64(w, tls_closed);
	ks_section_begin(w, KS_TAG_TABLE);
	if (!locktable_state_write(lt, w, server_note_owner, srv))
		return false;
	ks_section_begin(w, KS_TAG_TOKEN);
	ks_put_u64(w, backend_local_next_token(srv->be));
	ks_section_begin(w, KS_TAG_STATS);
	server_put_stats(w, &srv->stats);
	ks_section_begin(w, KS_TAG_LISTENERS);
	ks_put_u32(w, (uint32_t)srv->nlisteners);
	*nfds = 0;
	for (int i = 0; i < srv->nlisteners; i++) {
		const struct listener	*l = &srv->listeners[i];

		ks_put_u32(w, (uint32_t)*nfds);	/* its index in fds */
		ks_put_u8(w, (uint8_t)l->transport);
		ks_put_u8(w, l->adopted);
		ks_put_str(w, l->name);
		fds[(*nfds)++] = l->fd;
	}
	ks_put_u8(w, srv->metrics != NULL);
	if (srv->metrics != NULL) {
		ks_put_u32(w, (uint32_t)*nfds);
		fds[(*nfds)++] = metrics_fd(srv->metrics);
	}
	ks_section_begin(w, KS_TAG_SESSIONS);
	sessions_state_write(conns_sessions(srv->conns), w);
	ks_section_begin(w, KS_TAG_CONNS);
	conns_state_write(srv->conns, w, fds, nfds);
	return ks_writer_finish(w);
}

/* The new process is ready: under systemd it becomes the main process
 * before this one exits, told by this one (the main one, which
 * NotifyAccess=main admits), and systemd has handled it by the barrier. */
static void
server_upgrade_ready(pid_t child)
{
	char	buf[64];

	if (!notify_enabled())
		return;
	snprintf(buf, sizeof(buf), "MAINPID=%d", (int)child);
	notify_send(buf);
	if (!notify_barrier(1000))
		log_warnx("upgrade: systemd did not confirm MAINPID=%d",
		    (int)child);
}

/* Frozen between two turns, uc's new process waiting: the state out, the
 * verdict in. */
static void
server_upgrade_handoff(struct server *srv, struct upgrade_check *uc)
{
	struct ks_writer	 w;
	int			*fds;
	size_t			 nfds = 0, tls_closed;
	uint64_t		 freeze_ms, done_ms;
	char			 why[KL_UPGRADE_WHY_MAX];
	pid_t			 child;

	if (!server_upgrade_possible(srv, srv->upgrade_requester, why,
	    sizeof(why))) {
		upgrade_check_cancel(uc);
		server_upgrade_failed(srv, why);
		return;
	}
	/* TLS cannot move: those clients go now, their locks released at
	 * the end of this turn, which ends here. */
	if ((tls_closed = conns_close_tls(srv->conns)) > 0) {
		log_info("upgrade: closed %zu TLS connections", tls_closed);
		server_end_turn(srv);
	}
	freeze_ms = kl_clock_read_ms();
	upgrade_mark("frozen");
	if ((fds = kl_calloc((size_t)srv->nlisteners + 1 +
	    (size_t)srv->stats.clients, sizeof(*fds))) == NULL) {
		upgrade_check_cancel(uc);
		server_upgrade_failed(srv, "out of memory for the state");
		return;
	}
	if (!upgrade_state_writer(&w, server_state_size(srv), why,
	    sizeof(why))) {
		kl_free(fds);
		upgrade_check_cancel(uc);
		server_upgrade_failed(srv, why);
		return;
	}
	if (!server_write_state(srv, &w, freeze_ms, tls_closed, fds, &nfds)) {
		kl_free(fds);
		upgrade_state_end(&w);
		upgrade_check_cancel(uc);
		server_upgrade_failed(srv, "out of memory for the state");
		return;
	}
	upgrade_mark("state written");
	if (!upgrade_handoff(uc, &w, fds, nfds,
	    freeze_ms + (uint64_t)srv->cfg->upgrade_timeout, server_upgrade_ready, &child,
	    why, sizeof(why))) {
		kl_free(fds);
		upgrade_state_end(&w);
		server_upgrade_failed(srv, why);
		return;
	}
	kl_free(fds);		/* the new process has them now */
	done_ms = kl_clock_read_ms();
	log_info("upgrade: pid %d took over (%zu bytes of state, frozen "
	    "%" PRIu64 " ms); pid %d exits", (int)child, w.len,
	    done_ms - freeze_ms, (int)getpid());
	/* No shutdown(2), no close, no unlink, no token write: the sockets
	 * and the files are the new process's now. */
	_exit(0);
}

/* --check-config passed and the new process waits for the state (uc),
 * or either failed (why). */
static void
server_upgrade_checked(void *arg, struct upgrade_check *uc, const char *why)
{
	struct server	*srv = arg;

	srv->upgrade_check = NULL;
	if (uc == NULL)
		server_upgrade_failed(srv, why);
	else
		server_upgrade_handoff(srv, uc);
	server_end_turn(srv);
}

/* ---- the new process ---- */

/* The table's owners, in order, for the connections to claim. */
struct server_owners {
	struct lt_owner	**o;
	size_t		  n, cap;
};

static bool
server_adopt_owner(void *arg, struct lt_owner *o)
{
	struct server_owners	*so = arg;
	struct lt_owner		**p;

	if (so->n == so->cap) {
		so->cap = so->cap == 0 ? 64 : so->cap * 2;
		if ((p = kl_realloc(so->o, so->cap * sizeof(*p))) == NULL)
			return false;
		so->o = p;
	}
	so->o[so->n++] = o;
	return true;
}

static bool
server_is_listener(int fd, enum conn_transport transport)
{
	int		 v = 0;
	socklen_t	 sl = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &sl) == -1 ||
	    v != 1)
		return false;
	sl = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &sl) == -1)
		return false;
	return (v == AF_UNIX) == (transport == CONN_UNIX);
}

static void
server_adopt_listeners(struct server *srv, struct upgrade_in *in,
    struct ks_reader *r, int *metrics_fd)
{
	struct sockaddr_storage	 ss;
	socklen_t		 sl;
	const char		*name;
	char			 buf[128];
	size_t			 len;
	uint32_t		 n, idx;
	uint8_t			 transport;
	bool			 adopted;
	int			 fd;

	n = ks_get_count(r, 10);
	if (!r->bad && (n == 0 || n > KL_LISTENERS_MAX))
		ks_fail(r, "%u listeners", n);
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		idx = ks_get_u32(r);
		transport = ks_get_u8(r);
		adopted = ks_get_bool(r);
		name = ks_get_bytes(r, &len, sizeof(buf) - 1);
		if (r->bad)
			break;
		if (transport > CONN_TLS || (fd = upgrade_in_fd(in, idx)) == -1 ||
		    !server_is_listener(fd, transport)) {
			ks_fail(r, "listener %u is not a listening socket of "
			    "its kind handed over once", idx);
			break;
		}
		if (transport == CONN_TLS && srv->tls == NULL)
			ks_fail(r, "a TLS listener, and no tls-cert here");
		if (r->bad)
			break;
		memcpy(buf, name, len);
		buf[len] = '\0';
		server_add_listener(srv, fd, (enum conn_transport)transport,
		    buf)->adopted = adopted;
		sl = sizeof(ss);
		if (transport != CONN_UNIX && getsockname(fd,
		    (struct sockaddr *)&ss, &sl) == 0) {
			int	*first = transport == CONN_TLS ?
				    &srv->tls_port : &srv->tcp_port;

			if (*first == 0)
				*first = ntohs(ss.ss_family == AF_INET ?
				    ((struct sockaddr_in *)&ss)->sin_port :
				    ((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	*metrics_fd = -1;
	if (ks_get_bool(r)) {
		idx = ks_get_u32(r);
		if (!r->bad && ((fd = upgrade_in_fd(in, idx)) == -1 ||
		    !server_is_listener(fd, CONN_TCP)))
			ks_fail(r, "the metrics listener %u is not one", idx);
		if (!r->bad && srv->cfg->metrics == NULL)
			ks_fail(r, "a metrics listener, and no metrics here");
		if (!r->bad)
			*metrics_fd = fd;
	}
	if (!r->bad && srv->cfg->metrics != NULL && *metrics_fd == -1)
		ks_fail(r, "metrics is set here, and no listener was handed "
		    "over");
}

static int
server_adopt_fd(void *arg, uint32_t index)
{
	return upgrade_in_fd(arg, index);
}

/* The state's sections, in order; every failure is fatal to this
 * process and reported to the old one, which carries on. */
void
server_upgrade_adopt(struct server *srv, struct upgrade_in *in)
{
	struct ks_reader	 r, s;
	struct locktable	*lt = backend_local_table(srv->be);
	struct server_owners	 so = { NULL, 0, 0 };
	struct conn		*requester = NULL;
	uint64_t		 freeze_ms, next = 0, old_next, upgrades, now;
	uint64_t		 requester_id, tls_closed;
	uint32_t		 old_pid;
	const char		*version;
	char			 oldver[SU_VERSION_MAX + 1], err[512], buf[64];
	size_t			 len;
	int			 metrics_fd = -1;

	if (!ks_reader_open(&r, in->state, in->len))
		upgrade_in_fail(in, "%s", r.why);
	if (lt == NULL)
		upgrade_in_fail(in, "backend %s here: it takes no state",
		    backend_name(srv->be));
	if (!ks_section_next(&r, KS_TAG_HANDOFF, &s))
		upgrade_in_fail(in, "%s", r.why);
	old_pid = ks_get_u32(&s);
	freeze_ms = ks_get_u64(&s);
	upgrades = ks_get_u64(&s);
	version = ks_get_bytes(&s, &len, SU_VERSION_MAX);
	requester_id = ks_get_u64(&s);
	tls_closed = ks_get_u64(&s);
	if (!ks_section_done(&s))
		upgrade_in_fail(in, "hand-off: %s", s.why);
	memcpy(oldver, version, len);
	oldver[len] = '\0';
	now = kl_clock_read_ms();
	if (freeze_ms > now)
		upgrade_in_fail(in, "frozen in the future");
	upgrade_mark("hand-off read");
	if (!ks_section_next(&r, KS_TAG_TABLE, &s))
		upgrade_in_fail(in, "%s", r.why);
	if (!locktable_state_read(lt, &s, now - freeze_ms, server_adopt_owner,
	    &so, &next) || !ks_section_done(&s))
		upgrade_in_fail(in, "lock table: %s", r.bad ? r.why : s.why);
	upgrade_mark("table rebuilt and checked");
	if (!ks_section_next(&r, KS_TAG_TOKEN, &s))
		upgrade_in_fail(in, "%s", r.why);
	old_next = ks_get_u64(&s);
	if (!ks_section_done(&s))
		upgrade_in_fail(in, "token: %s", s.why);
	if (backend_local_next_token(srv->be) < old_next ||
	    backend_local_next_token(srv->be) < next)
		upgrade_in_fail(in, "the token mark in %s is below the running "
		    "server's (%" PRIu64 " < %" PRIu64 "): not the same "
		    "state-dir, or it took a new block of tokens while this "
		    "process started?", srv->cfg->state_dir,
		    backend_local_next_token(srv->be), old_next);
	/* this process raised the mark before the freeze, while the old
	 * one still served and could raise its own over it */
	if (!backend_local_token_recheck(srv->be, err, sizeof(err)))
		upgrade_in_fail(in, "%s", err);
	if (!ks_section_next(&r, KS_TAG_STATS, &s))
		upgrade_in_fail(in, "%s", r.why);
	server_get_stats(&s, &srv->stats);
	if (!ks_section_done(&s))
		upgrade_in_fail(in, "counters: %s", s.why);
	if (!ks_section_next(&r, KS_TAG_LISTENERS, &s))
		upgrade_in_fail(in, "%s", r.why);
	server_adopt_listeners(srv, in, &s, &metrics_fd);
	if (!ks_section_done(&s))
		upgrade_in_fail(in, "listeners: %s", s.why);
	upgrade_mark("token, counters, listeners read");
	if (!ks_section_next(&r, KS_TAG_SESSIONS, &s))
		upgrade_in_fail(in, "%s", r.why);
	if (!sessions_state_read(conns_sessions(srv->conns), &s, so.o, so.n,
	    freeze_ms, now) || !ks_section_done(&s))
		upgrade_in_fail(in, "sessions: %s", s.why);
	if (!ks_section_next(&r, KS_TAG_CONNS, &s))
		upgrade_in_fail(in, "%s", r.why);
	if (!conns_state_read(srv->conns, &s, so.o, so.n, server_adopt_fd, in,
	    &requester, requester_id) || !ks_section_done(&s))
		upgrade_in_fail(in, "connections: %s", s.why);
	if (!upgrade_in_fds_claimed(in))
		upgrade_in_fail(in, "%zu descriptors handed over that the state "
		    "does not name", in->nfds - in->nclaimed);
	if (!sessions_state_link(conns_sessions(srv->conns), srv->conns, &s))
		upgrade_in_fail(in, "sessions: %s", s.why);
	kl_free(so.o);
	upgrade_heap_done();
	upgrade_mark("connections rebuilt");
	if (!ks_reader_done(&r))
		upgrade_in_fail(in, "%s", r.why);
	if (metrics_fd != -1 && (srv->metrics = metrics_new(srv,
	    srv->cfg->metrics, metrics_fd, err, sizeof(err))) == NULL)
		upgrade_in_fail(in, "metrics %s: %s", srv->cfg->metrics, err);
	/* Ready: from GO on, the sockets are this process's. */
	upgrade_in_ready(in);
	token_lock_note_pid();
	now = kl_clock_read_ms();
	srv->stats.upgrades = upgrades + 1;
	srv->stats.upgrade_pause_ms = now - freeze_ms;
	log_info("upgrade: took over from pid %" PRIu32 " (keylockd %s) after "
	    "a pause of %" PRIu64 " ms; %" PRIu64 " keys, %" PRIu64 " held",
	    old_pid, oldver, now - freeze_ms, locktable_counters(lt)->keys,
	    locktable_counters(lt)->held);
	if (requester != NULL) {
		conn_reply_ok(requester, "{\"pid\":%d,\"version\":\"%s\","
		    "\"pause_ms\":%" PRIu64 ",\"connections\":%" PRIu64 ","
		    "\"tls_closed\":%" PRIu64 "}", (int)getpid(),
		    PACKAGE_VERSION, now - freeze_ms, srv->stats.clients,
		    tls_closed);
		conn_complete(requester, KL_OK);
	}
	if (srv->cfg->port_file != NULL)
		server_write_port_file(srv, srv->cfg->port_file);
	if (notify_enabled()) {
		struct timeval	tv = { STATUS_INTERVAL_S, 0 };

		snprintf(buf, sizeof(buf), "MAINPID=%d\nREADY=1",
		    (int)getpid());
		notify_send(buf);	/* MAINPID again: harmless, and said */
		server_status_cb(-1, 0, srv);
		event_add(srv->status, &tv);
	}
	/* the first turn: replies the old process had not sent, lines it
	 * had not handled */
	server_end_turn(srv);
}
