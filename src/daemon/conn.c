/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One client, and the event-loop turn that runs all of them. Bytes arrive
 * with one recv() per readable event, straight into the set's scratch
 * buffer; complete lines are handled in place and only a remainder (a
 * partial line, or lines queued behind an open request) is copied into the
 * connection's own buffer, so an idle client holds no buffer at all.
 * Replies collect in one output buffer written with one send() per turn. A
 * line is never longer than max-line, unread output never more than
 * max-output, and conn_close() is the only way out.
 */
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
#include "proto.h"
#include "session.h"
#include "stats.h"
#include "tls.h"
#include "users.h"
#include "util.h"

#define CONN_IBUF_MIN		256
#define CONN_IBUF_SLACK		(16 * 1024)	/* unused, then shrunk */
#define CONN_OBUF_MIN		512	/* kept while empty, freed when bigger */
#define CONN_SCRATCH_SIZE	KL_READ_BYTES	/* one read per batch */
#define CONN_TURN_REQUESTS	256	/* one client's requests per turn */
#define CONN_TURN_OUTPUT	(16 * 1024)	/* and reply bytes */
#define CONN_CANCELS_MAX	64	/* CANCEL lines read ahead, unanswered */
#define CONN_PREAUTH_OUTPUT	16384	/* unread reply bytes before AUTH */
/* What a channel takes besides the table's owner and its queue: its
 * struct conn with malloc's header, and its two bucket slots at most
 * (keylockd.conf(5), max-table-bytes; STATS channel_bytes). */
#define CONN_CHAN_BYTES		(sizeof(struct conn) + 16 + \
				 2 * sizeof(struct conn *))
/* and a channel's timer, once a LOCK with a timeout made one */
#define CONN_TIMER_BYTES	(event_get_struct_event_size() + 16)

/*
 * A connection's life, in the manner of memcached's conn_states: one state
 * at a time, set only by conn_set_state(). Framing (an overlong line being
 * discarded) and I/O back-pressure are separate, smaller facts below.
 */
enum conn_state {
	/* Handles its lines as they come. */
	CONN_READY = 0,
	/*
	 * The request being handled has no reply yet: a LOCK that waits, or,
	 * over a replicated backend, any request until its commit. Whoever
	 * owns it completes it (conn_complete); later lines stay queued, only
	 * CANCEL is read ahead while a LOCK waits.
	 */
	CONN_PENDING,
	/* Used up its share of this turn: resumes in the next one. */
	CONN_DEFERRED,
	/* QUIT was answered, or input ended and every complete line before
	 * the end was handled: send what is left, then close. */
	CONN_DRAINING,
	/* Socket closed, locks released: freed at the end of the turn. */
	CONN_CLOSED
};

TAILQ_HEAD(conn_list, conn);

/*
 * The connections with a deadline of one kind, in the order their clocks
 * started, so that one timer, set for the head, serves them all: a
 * connection that has not passed AUTH (auth-timeout), one whose output
 * stopped moving (write-timeout), and, while idle-timeout is set, every
 * connection by the time it last sent something. A connection joins at the tail with the
 * time its clock starts, which is never before the tail's.
 */
enum conn_dl {
	CONN_DL_AUTH = 0,	/* since: connected */
	CONN_DL_WRITE,		/* since: output stuck */
	CONN_DL_IDLE,		/* since: the last bytes it sent */
	CONN_DL_N
};

struct conn_dl_entry {
	TAILQ_ENTRY(conn)	 e;
	uint64_t		 since;		/* the clock's start */
	bool			 on;		/* on the list */
};

struct conn_deadlines {
	struct conn_list	 list;
	struct event		*timer;		/* the head's deadline */
	struct conns		*cs;
	enum conn_dl		 kind;
};

/* The TCP and TLS connections from one address (max-clients-per-address). */
struct conn_addr {
	struct conn_addr	*next;		/* bucket chain */
	uint32_t		 n;
	char			 host[48];	/* the peer without its port */
};

#define CONN_ADDR_BUCKETS	1024

struct conns {
	/* The request being parsed; first, so that its address is the
	 * set's own and conn_exec() keeps no second pointer for it. */
	struct request		 req;
	struct event_base	*base;
	const struct config	*cfg;
	struct stats		*st;
	struct commands		*cmds;
	struct backend		*be;
	struct conn_list	 all;		/* open, oldest first */
	struct conn_list	 runq;		/* work left for this turn */
	struct conn_list	 dead;		/* closed, freed end of turn */
	struct conn_list	 deferred;	/* turn used up: next turn */
	struct conn_deadlines	 dl[CONN_DL_N];	/* see conn_dl_join() */
	struct event		*resume;	/* runs them after the poll */
	struct sessions		*sessions;	/* keylockd-protocol(7), SESSIONS */
	struct conn_addr	**addrs;	/* CONN_ADDR_BUCKETS, or NULL */
	bool			 closing;	/* shutdown: sessions end too */
	uint64_t		 next_id;
	uint64_t		 nomem_log_ms;	/* last out-of-memory warning */
	uint64_t		 budget_log_ms;	/* last max-output-total one */
	uint64_t		 input_log_ms;	/* last max-input-total one */
	struct conn_list	 input_wait;	/* not read: max-input-total */
	size_t			 out_bytes;	/* every open one's ocap */
	char			*scratch;	/* CONN_SCRATCH_SIZE bytes */
};

/*
 * A connection, or one of its channels (keylockd-protocol(7), CHANNELS).
 * A channel is a struct conn too, whose root is its connection: the lock
 * owner, the request order, the open request, its deadline and the
 * CANCEL read ahead are per channel, the rest (socket, input, output,
 * auth, name, session) is the root's, and every accessor asks the root.
 * Channel 0 is the root itself.
 */
struct conn {
	struct owner_head	 h;		/* first: conn_owner() reads it */
	struct conn		*root;		/* the connection: c itself */
	struct session		*sess;		/* attached session, or NULL */
	uint64_t		 deadline_ms;	/* the open LOCK's; 0: none */
	TAILQ_ENTRY(conn)	 entry;		/* cs->all */
	TAILQ_ENTRY(conn)	 qentry;	/* cs->runq or cs->dead */
	TAILQ_ENTRY(conn)	 dentry;	/* cs->deferred */
	TAILQ_ENTRY(conn)	 ientry;	/* cs->input_wait */
	struct conn_dl_entry	 dl[CONN_DL_N];	/* cs->dl[k] */
	struct conns		*cs;
	struct event		*rev;		/* readable (or closed) */
	struct event		*wev;		/* writable, while output waits */
	struct event		*timer;		/* the open request's deadline */
	char			*ibuf;		/* input not yet framed */
	size_t			 ilen, icap;
	/* The channel's lines queued behind its open request, each with its
	 * LF; an empty one stands for a line over max-line. */
	char			*q;
	size_t			 qlen, qcap;
	char			*obuf;		/* unsent replies */
	size_t			 ooff, olen, ocap;
	size_t			 produced;	/* reply bytes this turn */
	char			*name;
	struct tls_conn		*tls;		/* NULL: plain */
	struct conn_addr	*addr;		/* TCP, TLS: its address's count */
	const char		*eof;		/* why input ended, or NULL */
	/* The root's channels in use, by number: chained buckets. */
	struct conn		**chans;
	struct conn		*chnext;	/* a channel's bucket chain */
	uint32_t		 nchans, nbuckets;
	size_t			 nqueued;	/* root: bytes its channels queue */
	uint64_t		 id;
	uint64_t		 since_ms;
	int			 fd;
	enum conn_state		 state;
	enum conn_transport	 transport;
	/* CANCEL read ahead (keylockd-protocol(7), CANCEL): q is scanned
	 * from cancel_scan; cancel_bits holds, oldest in bit 0, whether each
	 * of the ncancels CANCEL lines found but not yet answered withdrew
	 * its LOCK; cancel_asked: one was found for the waiting LOCK. */
	size_t			 cancel_scan;
	uint64_t		 cancel_bits;
	unsigned		 ncancels;
	bool			 cancel_asked;
	bool			 pending_lock;	/* the open request is a LOCK */
	bool			 resume_wait;	/* RESUME: its LOCK still waits */
	bool			 quit_after;	/* QUIT waits for its release */
	bool			 discarding;	/* inside an overlong line */
	uint32_t		 discard_chan;	/* and the channel it names */
	bool			 queued;	/* on cs->runq */
	bool			 deferred;	/* on cs->deferred */
	bool			 read_paused;	/* ibuf full: watch for close */
	bool			 input_waits;	/* on cs->input_wait */
	bool			 tls_read_wants_write;
	bool			 wev_armed;	/* wev is added */
	bool			 authed, admin;	/* set by AUTH (commands.c) */
	bool			 admitted;	/* see conn_admit() */
	uint8_t			 auth_failures;	/* wrong AUTHs so far */
	bool			 has_cred;	/* a unix peer: uid and pid */
	const struct user	*user;		/* who AUTH made it (users.h) */
	int64_t			 uid, pid;	/* SO_PEERCRED's */
	uint8_t			 plen;		/* of prefix */
	char			 prefix[16];	/* "@N " before each reply */
	char			 peer[64];
	uint32_t		 state_owner;	/* live upgrade: its owner's index */
};

/* What one read brought. */
enum conn_io {
	CONN_IO_DATA = 0,
	CONN_IO_AGAIN,		/* nothing now */
	CONN_IO_END,		/* end of input, or an error: c->eof says */
	CONN_IO_NOMEM
};

static void	conn_read_cb(evutil_socket_t, short, void *);
static void	conn_write_cb(evutil_socket_t, short, void *);
static void	conn_timer_cb(evutil_socket_t, short, void *);
static void	conn_schedule(struct conn *c);
static void	conn_set_state(struct conn *c, enum conn_state state);
static bool	conn_flush(struct conn *c);
static void	conn_run(struct conn *c);
static bool	conns_release_closed(struct conns *cs);

/* ---- the set and the turn ---- */

static void	conns_dl_cb(evutil_socket_t, short, void *);
static void	conns_dl_arm(struct conns *, enum conn_dl);
static void	conn_dl_join(struct conn *, enum conn_dl, uint64_t);
static void	conn_dl_leave(struct conn *, enum conn_dl);
static void	conn_stall(struct conn *, bool, bool);
static void	conn_undefer(struct conn *);
static void	conn_chans_close(struct conn *);
static inline void conn_pause_reading(struct conn *, bool);
static bool	conn_chan_keep(struct conn *, struct session *);
static void	conn_scan_cancel(struct conn *);
static size_t	conn_input_cap(const struct conn *);
static void	conns_input_resume(struct conns *);

static void
conns_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conns	*cs = arg;
	struct conn	*c;

	while ((c = TAILQ_FIRST(&cs->deferred)) != NULL) {
		conn_undefer(c);
		if (c->state == CONN_DEFERRED)
			conn_set_state(c, CONN_READY);
		else
			conn_schedule(c);	/* framing, past a pending LOCK */
	}
	conns_end_turn(cs);
}

struct conns *
conns_new(struct event_base *base, const struct config *cfg,
    struct stats *st, struct commands *cmds, struct backend *be)
{
	struct conns	*cs;

	if ((cs = kl_calloc(1, sizeof(*cs))) == NULL)
		return NULL;
	cs->base = base;
	cs->cfg = cfg;
	cs->st = st;
	cs->cmds = cmds;
	cs->be = be;
	TAILQ_INIT(&cs->all);
	TAILQ_INIT(&cs->runq);
	TAILQ_INIT(&cs->dead);
	TAILQ_INIT(&cs->deferred);
	TAILQ_INIT(&cs->input_wait);
	for (int k = 0; k < CONN_DL_N; k++) {
		TAILQ_INIT(&cs->dl[k].list);
		cs->dl[k].cs = cs;
		cs->dl[k].kind = (enum conn_dl)k;
		cs->dl[k].timer = evtimer_new(base, conns_dl_cb, &cs->dl[k]);
		if (cs->dl[k].timer == NULL)
			goto fail;
	}
	if ((cs->scratch = kl_malloc(CONN_SCRATCH_SIZE)) == NULL ||
	    (cs->sessions = sessions_new(cs, base, cfg, st, be)) == NULL ||
	    (cs->resume = evtimer_new(base, conns_resume_cb, cs)) == NULL)
		goto fail;
	return cs;
fail:
	for (int k = 0; k < CONN_DL_N; k++)
		if (cs->dl[k].timer != NULL)
			event_free(cs->dl[k].timer);
	if (cs->resume != NULL)
		event_free(cs->resume);
	sessions_free(cs->sessions);
	kl_free(cs->scratch);
	kl_free(cs);
	return NULL;
}

static void
conns_free_dead(struct conns *cs)
{
	struct conn	*c;

	if (TAILQ_EMPTY(&cs->dead))
		return;
	conns_release_closed(cs);
	while ((c = TAILQ_FIRST(&cs->dead)) != NULL) {
		TAILQ_REMOVE(&cs->dead, c, qentry);
		cs->st->input_bytes -= c->qcap + c->icap;
		if (c != c->root)
			cs->st->channel_bytes -= CONN_CHAN_BYTES;
		kl_free(c->q);
		kl_free(c->ibuf);
		kl_free(c->obuf);
		kl_free(c->name);
		kl_free(c);
	}
}

/*
 * The owners of the connections closed since the last call leave the
 * backend here, not inside conn_close(): a connection may be closed from
 * within a backend hook (a grant's reply that runs out of memory), which
 * must not call back into the backend. Returns whether any left. A
 * connection with a session hands its owner, and its waiting LOCK with
 * its deadline, to the session instead (keylockd-protocol(7), SESSIONS:
 * Detached), unless the server is stopping.
 */
static bool
conns_release_closed(struct conns *cs)
{
	struct conn	*c;
	bool		 any = false;
	uint64_t	 now;

	if (TAILQ_EMPTY(&cs->dead))
		return false;	/* most turns */
	now = kl_now_ms();
	TAILQ_FOREACH(c, &cs->dead, qentry) {
		struct session	*s = c->root->sess;

		if (c->sess != NULL && session_is_resuming(c->sess)) {
			/* its RESUME never completed: nothing to keep */
			session_end(c->sess, "its connection closed during "
			    "RESUME");
			s = NULL;
		}
		if (c->sess != NULL && cs->closing)
			session_end(c->sess, "the server is stopping");
		if (c->h.owner == NULL)
			continue;
		if (c != c->root && s != NULL && !cs->closing &&
		    conn_chan_keep(c, s))
			continue;	/* its connection comes later */
		if (c->sess != NULL) {
			session_detach(c->sess, c->h.owner, c->name, c->peer,
			    locktable_owner_is_waiting(c->h.owner) ?
			    c->deadline_ms : 0, now);
			c->sess = NULL;
			c->h.owner = NULL;
			continue;
		}
		cs->be->ops->owner_free(cs->be, c->h.owner, now);
		c->h.owner = NULL;
		any = true;
	}
	return any;
}

void
conns_end_turn(struct conns *cs)
{
	struct conn	*c;

	do {
		while ((c = TAILQ_FIRST(&cs->runq)) != NULL) {
			TAILQ_REMOVE(&cs->runq, c, qentry);
			c->queued = false;
			conn_run(c);
		}
	} while (conns_release_closed(cs));
	if (!TAILQ_EMPTY(&cs->input_wait))
		conns_input_resume(cs);
	cs->be->ops->end_turn(cs->be);
	conns_free_dead(cs);
}

void
conns_close_all(struct conns *cs, const char *reason)
{
	struct conn	*c;

	/* Withdrawing one waiter must not grant another (keylockd-protocol(7),
	 * SEMANTICS: SHUTDOWN means the request was not granted). */
	cs->be->ops->freeze(cs->be);
	cs->closing = true;
	TAILQ_FOREACH(c, &cs->all, entry) {
		if (c->state == CONN_PENDING && c->pending_lock)
			commands_shutdown_wait(cs->cmds, c);
		for (uint32_t i = 0; i < c->nbuckets; i++)
			for (struct conn *ch = c->chans[i]; ch != NULL;
			    ch = ch->chnext)
				if (ch->state == CONN_PENDING &&
				    ch->pending_lock)
					commands_shutdown_wait(cs->cmds, ch);
	}
	while ((c = TAILQ_FIRST(&cs->all)) != NULL) {
		conn_flush(c);
		conn_close(c, reason);
	}
}

void
conns_free(struct conns *cs)
{
	if (cs == NULL)
		return;
	conns_close_all(cs, "server shutdown");
	conns_free_dead(cs);
	sessions_free(cs->sessions);
	kl_free(cs->addrs);	/* every connection has let go of its own */
	event_free(cs->resume);
	for (int k = 0; k < CONN_DL_N; k++)
		event_free(cs->dl[k].timer);
	kl_free(cs->scratch);
	kl_free(cs);
}

struct conn *
conns_find(struct conns *cs, uint64_t id)
{
	struct conn	*c;

	TAILQ_FOREACH(c, &cs->all, entry)
		if (c->id == id)
			return c;
	return NULL;
}

void
conns_walk(struct conns *cs, bool (*fn)(void *, struct conn *), void *arg)
{
	struct conn	*c, *next;

	for (c = TAILQ_FIRST(&cs->all); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (!fn(arg, c))
			break;
	}
}

/* ---- state ---- */

/* The only place c->state changes: the lists follow it. */
static void
conn_set_state(struct conn *c, enum conn_state state)
{
	static const struct timeval	now = { 0, 0 };
	struct conns			*cs = c->cs;

	if (c->state == state || c->state == CONN_CLOSED)
		return;
	conn_undefer(c);
	c->state = state;
	switch (state) {
	case CONN_DEFERRED:
		c->deferred = true;
		TAILQ_INSERT_TAIL(&cs->deferred, c, dentry);
		evtimer_add(cs->resume, &now);
		break;
	case CONN_READY:
	case CONN_DRAINING:
		conn_schedule(c);
		break;
	case CONN_CLOSED:
		if (c->queued)
			TAILQ_REMOVE(&cs->runq, c, qentry);
		c->queued = false;
		if (c == c->root)
			TAILQ_REMOVE(&cs->all, c, entry);
		TAILQ_INSERT_TAIL(&cs->dead, c, qentry);
		break;
	case CONN_PENDING:
		break;
	}
}

/* Off cs->deferred: its turn came, or it changes state or closes. */
static void
conn_undefer(struct conn *c)
{
	if (!c->deferred)
		return;
	TAILQ_REMOVE(&c->cs->deferred, c, dentry);
	c->deferred = false;
}

/* The root, pending, used its share of a turn framing lines for its
 * channels: the rest waits for the next turn. */
static void
conn_defer_framing(struct conn *c)
{
	static const struct timeval	now = { 0, 0 };

	if (c->deferred)
		return;
	c->deferred = true;
	TAILQ_INSERT_TAIL(&c->cs->deferred, c, dentry);
	evtimer_add(c->cs->resume, &now);
}

static void
conn_schedule(struct conn *c)
{
	if (c->queued || c->state == CONN_CLOSED)
		return;
	c->queued = true;
	TAILQ_INSERT_TAIL(&c->cs->runq, c, qentry);
}

/* ---- create and close ---- */

/* Who the kernel says a unix peer is (keylockd-protocol(7), ACCESS
 * CONTROL: operators by uid). */
static void
conn_get_cred(struct conn *c)
{
	struct ucred	cred;
	socklen_t	len = sizeof(cred);

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
	    len == sizeof(cred)) {
		c->has_cred = true;
		c->uid = (int64_t)cred.uid;
		c->pid = (int64_t)cred.pid;
	}
}

/* ---- connections per address (keylockd.conf(5),
 * max-clients-per-address) ---- */

/* peer ("192.0.2.1:4711", "[2001:db8::1]:4711") without its port. */
static void
conn_addr_host(const char *peer, char *host, size_t len)
{
	const char	*colon = strrchr(peer, ':');
	size_t		 n = colon != NULL ? (size_t)(colon - peer) :
	    strlen(peer);

	if (n >= len)
		n = len - 1;
	memcpy(host, peer, n);
	host[n] = '\0';
}

static struct conn_addr **
conn_addr_slot(struct conns *cs, const char *host)
{
	uint32_t		 h = 2166136261u;
	struct conn_addr	**pp;

	for (const char *p = host; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	for (pp = &cs->addrs[h % CONN_ADDR_BUCKETS]; *pp != NULL;
	    pp = &(*pp)->next)
		if (strcmp((*pp)->host, host) == 0)
			break;
	return pp;
}

uint64_t
conns_clients_from(struct conns *cs, const char *peer)
{
	char			 host[48];
	struct conn_addr	**pp;

	if (cs->addrs == NULL)
		return 0;
	conn_addr_host(peer, host, sizeof(host));
	pp = conn_addr_slot(cs, host);
	return *pp != NULL ? (*pp)->n : 0;
}

/* c, over TCP or TLS, counts for its address; false on no memory. */
static bool
conn_addr_hold(struct conn *c)
{
	struct conns		*cs = c->cs;
	struct conn_addr	**pp, *a;
	char			  host[48];

	if (c->transport == CONN_UNIX)
		return true;
	if (cs->addrs == NULL && (cs->addrs = kl_calloc(CONN_ADDR_BUCKETS,
	    sizeof(*cs->addrs))) == NULL)
		return false;
	conn_addr_host(c->peer, host, sizeof(host));
	if ((a = *(pp = conn_addr_slot(cs, host))) == NULL) {
		if ((a = kl_calloc(1, sizeof(*a))) == NULL)
			return false;
		snprintf(a->host, sizeof(a->host), "%s", host);
		*pp = a;
	}
	a->n++;
	c->addr = a;
	return true;
}

static void
conn_addr_release(struct conn *c)
{
	struct conn_addr	**pp, *a = c->addr;

	if (a == NULL)
		return;
	c->addr = NULL;
	if (--a->n > 0)
		return;
	pp = conn_addr_slot(c->cs, a->host);
	*pp = a->next;
	kl_free(a);
}

struct conn *
conn_new(struct conns *cs, int fd, const char *peer,
    enum conn_transport transport)
{
	struct conn	*c;

	if ((c = kl_calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->cs = cs;
	c->root = c;
	c->fd = fd;
	c->id = ++cs->next_id;
	c->since_ms = kl_now_ms();
	c->transport = transport;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	if (transport == CONN_UNIX)
		conn_get_cred(c);
	c->rev = event_new(cs->base, fd, EV_READ | EV_PERSIST, conn_read_cb,
	    c);
	c->wev = event_new(cs->base, fd, EV_WRITE | EV_PERSIST,
	    conn_write_cb, c);
	c->h.owner = cs->be->ops->owner_new(cs->be, c->id, c);
	if (c->rev == NULL || c->wev == NULL || c->h.owner == NULL ||
	    !conn_addr_hold(c) || event_add(c->rev, NULL) == -1) {
		conn_addr_release(c);
		if (c->rev != NULL)
			event_free(c->rev);
		if (c->wev != NULL)
			event_free(c->wev);
		if (c->h.owner != NULL)
			cs->be->ops->owner_free(cs->be, c->h.owner, 0);
		kl_free(c);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&cs->all, c, entry);
	conn_dl_join(c, CONN_DL_AUTH, c->since_ms);
	if (cs->cfg->idle_timeout != 0)
		conn_dl_join(c, CONN_DL_IDLE, c->since_ms);
	cs->st->clients++;
	cs->st->connections++;
	log_debug("client %" PRIu64 ": connected from %s", c->id, c->peer);
	return c;
}

void
conn_close(struct conn *c, const char *reason)
{
	struct conns	*cs = c->cs;

	c = c->root;
	if (c->state == CONN_CLOSED)
		return;
	log_debug("client %" PRIu64 " (%s): closed: %s", c->id,
	    c->name != NULL ? c->name : "-", reason);
	conn_chans_close(c);	/* before c: see conns_release_closed() */
	for (int k = 0; k < CONN_DL_N; k++)
		conn_dl_leave(c, (enum conn_dl)k);
	conn_addr_release(c);
	if (c->input_waits)
		TAILQ_REMOVE(&cs->input_wait, c, ientry);
	cs->out_bytes -= c->ocap;	/* freed at the end of the turn */
	conn_set_state(c, CONN_CLOSED);	/* its owner leaves at end of turn */
	event_free(c->rev);
	event_free(c->wev);
	if (c->timer != NULL)
		event_free(c->timer);
	c->rev = c->wev = c->timer = NULL;
	tls_conn_free(c->tls);
	c->tls = NULL;
	close(c->fd);
	c->fd = -1;
	cs->st->clients--;
}

void
conn_close_nomem(struct conn *c, const char *what)
{
	struct conns	*cs = c->cs;
	uint64_t	 now = kl_now_ms();

	c = c->root;
	if (c->state == CONN_CLOSED)
		return;
	cs->st->nomem_closes++;
	if (now - cs->nomem_log_ms >= KL_WARN_INTERVAL_MS) {
		log_warnx("client %" PRIu64 " (%s): out of memory for %s: "
		    "closing it (%" PRIu64 " such closes so far; logged once "
		    "per %d s)", c->id, c->name != NULL ? c->name : "-", what,
		    cs->st->nomem_closes, KL_WARN_INTERVAL_MS / 1000);
		cs->nomem_log_ms = now;
	}
	conn_close(c, "out of memory");
}

bool
conn_start_tls(struct conn *c, struct tls_ctx *ctx)
{
	return (c->tls = tls_conn_new(ctx, c->fd)) != NULL;
}

/* ---- output ---- */

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
	size_t	from = c->ooff;
	ssize_t	n;

	if (c->ooff == c->olen && c->state != CONN_DRAINING)
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
			conn_stall(c, true, c->ooff != from);
			return true;
		}
		conn_close(c, n == -1 ? strerror(errno) : "send failed");
		return false;
	}
	c->ooff = c->olen = 0;
	if (c->dl[CONN_DL_WRITE].on)
		conn_stall(c, false, false);
	if (c->ocap > CONN_OBUF_MIN) {
		c->cs->out_bytes -= c->ocap;
		kl_free(c->obuf);
		c->obuf = NULL;
		c->ocap = 0;
	}
	if (!c->tls_read_wants_write)
		conn_arm_write(c, false);
	if (c->state == CONN_DRAINING) {
		conn_close(c, c->eof != NULL ? c->eof : "quit");
		return false;
	}
	return true;
}

/*
 * keylockd.conf(5), max-output-total: the output buffers of all
 * connections together. Before c's grows by more bytes past the budget,
 * the connection with the largest buffer is closed, and the next, until
 * the growth fits; that may be c itself (false: c was closed). The
 * candidates are c and the connections whose output is stuck (on the
 * write-timeout list): any other has sent all it had, or has at most a
 * turn's replies waiting for this turn's send(2).
 */
static bool
conns_output_budget(struct conns *cs, struct conn *c, size_t more)
{
	int64_t		 budget = cs->cfg->max_output_total;
	uint64_t	 now;

	while (budget != KL_NONE && cs->out_bytes + more > (size_t)budget) {
		struct conn	*v = c, *s;

		TAILQ_FOREACH(s, &cs->dl[CONN_DL_WRITE].list, dl[CONN_DL_WRITE].e)
			if (s->ocap > v->ocap)
				v = s;
		cs->st->output_budget_closes++;
		now = kl_now_ms();
		if (now - cs->budget_log_ms >= KL_WARN_INTERVAL_MS) {
			log_warnx("client %" PRIu64 " (%s) from %s: the largest "
			    "of the unsent replies (%zu bytes) when they came "
			    "to max-output-total %" PRId64 ": closing it (%"
			    PRIu64 " such closes so far; logged once per %d s)",
			    v->id, v->name != NULL ? v->name : "-", v->peer,
			    v->olen - v->ooff, budget,
			    cs->st->output_budget_closes,
			    KL_WARN_INTERVAL_MS / 1000);
			cs->budget_log_ms = now;
		}
		conn_close(v, "unsent replies over max-output-total");
		if (v == c)
			return false;
	}
	return true;
}

/* Makes room for n more output bytes; closes the client past max-output. */
static bool
conn_reserve(struct conn *c, size_t n)
{
	size_t	 need, cap, max = (size_t)c->cs->cfg->max_output;
	char	*p;

	if (c->state == CONN_CLOSED)
		return false;
	/* Before AUTH a client's replies are refusals: it gets a small
	 * share of memory for them (keylockd.conf(5), max-output). */
	if (!c->admitted && max > CONN_PREAUTH_OUTPUT)
		max = CONN_PREAUTH_OUTPUT;
	if (c->olen + n <= c->ocap)
		return true;
	if (c->ooff > 0) {
		memmove(c->obuf, c->obuf + c->ooff, c->olen - c->ooff);
		c->olen -= c->ooff;
		c->ooff = 0;
	}
	if (c->olen + n > max && !conn_flush(c))
		return false;
	need = c->olen - c->ooff + n;
	if (need > max) {
		c->cs->st->output_closes++;
		conn_close(c, c->admitted ? "unread replies over max-output" :
		    "unread replies over 16 KiB before AUTH");
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
	if (!conns_output_budget(c->cs, c, cap - c->ocap))
		return false;
	if ((p = kl_realloc(c->obuf, cap)) == NULL) {
		conn_close_nomem(c, "replies");
		return false;
	}
	c->cs->out_bytes += cap - c->ocap;
	c->obuf = p;
	c->ocap = cap;
	return true;
}

/*
 * Every reply is written in place through these two: conn_room() gives
 * room for n bytes at the end of the output of c's connection (inline
 * while the buffer has it, else conn_reserve()), after c's channel
 * prefix, or NULL if c is closed or was closed for it; conn_appended()
 * counts the n bytes written there for the turn and flushes them later.
 */
static char * __attribute__((noinline))
conn_room_chan(struct conn *c, size_t n)
{
	struct conn	*r = c->root;
	char		*p;

	n += c->plen;
	if (r->olen + n <= r->ocap && r->state != CONN_CLOSED)
		p = r->obuf + r->olen;
	else if (conn_reserve(r, n))
		p = r->obuf + r->olen;
	else
		return NULL;
	memcpy(p, c->prefix, c->plen);
	return p + c->plen;
}

static inline __attribute__((always_inline)) char *
conn_room(struct conn *c, size_t n)
{
	if (c->plen != 0)
		return conn_room_chan(c, n);	/* c is a channel */
	if (c->olen + n <= c->ocap && c->state != CONN_CLOSED)
		return c->obuf + c->olen;
	return conn_reserve(c, n) ? c->obuf + c->olen : NULL;
}

static void __attribute__((noinline))
conn_appended_chan(struct conn *c, size_t n)
{
	struct conn	*r = c->root;

	r->olen += n + c->plen;
	r->produced += n + c->plen;
	conn_schedule(r);
}

/* conn_appended() of a connection (c->plen 0): a caller that tested
 * that before writing need not test it again after its stores. */
static inline __attribute__((always_inline)) void
conn_appended_root(struct conn *c, size_t n)
{
	c->olen += n;
	c->produced += n;
	conn_schedule(c);
}

static inline __attribute__((always_inline)) void
conn_appended(struct conn *c, size_t n)
{
	if (c->plen != 0) {
		conn_appended_chan(c, n);	/* c is a channel */
		return;
	}
	conn_appended_root(c, n);
}

/* "HEAD TEXT\n", or "HEAD\n" for an empty text. */
static void __attribute__((format(printf, 3, 0)))
conn_vappend(struct conn *c, const char *head, const char *fmt, va_list ap)
{
	char	 small[512], *p;
	va_list	 ap2;
	size_t	 hlen = strlen(head), n;
	int	 rc;

	va_copy(ap2, ap);
	rc = vsnprintf(small, sizeof(small), fmt, ap2);
	va_end(ap2);
	n = rc > 0 ? (size_t)rc : 0;
	if ((p = conn_room(c, hlen + n + 2)) == NULL)
		return;
	memcpy(p, head, hlen);
	if (n > 0)
		p[hlen++] = ' ';
	if (n < sizeof(small))
		memcpy(p + hlen, small, n);
	else
		vsnprintf(p + hlen, n + 1, fmt, ap);
	p[hlen + n] = '\n';
	conn_appended(c, hlen + n + 1);
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
	size_t	 n = strlen(s);
	char	*p;

	if ((p = conn_room(c, n + 4)) == NULL)
		return;
	memcpy(p, "OK ", 3);
	memcpy(p + 3, s, n);
	p[n + 3] = '\n';
	conn_appended(c, n + 4);
}

/* conn_reply_u64() through conn_room(): a channel's line, a buffer
 * without room for the longest line, or a number of nine digits or more. */
static void __attribute__((noinline))
conn_reply_u64_room(struct conn *c, uint64_t v)
{
	char	 line[KL_U64_OK_ROOM], *p;
	size_t	 n = kl_u64_put_ok(line, v);

	if ((p = conn_room(c, n)) == NULL)
		return;
	memcpy(p, line, n);
	conn_appended(c, n);
}

/*
 * "OK N": the reply of most requests, without printf, written in place
 * while the buffer has room for the longest line (a digit, UNLOCK's
 * "OK 1" among them, is one store; no loop below 10^8); else out of
 * line, through conn_room(), so that this needs no frame.
 */
void
conn_reply_u64(struct conn *c, uint64_t v)
{
	if (c->plen == 0 && c->ocap - c->olen >= KL_U64_OK_ROOM &&
	    c->state != CONN_CLOSED && v < 100000000) {
		conn_appended_root(c, kl_u64_put_ok(c->obuf + c->olen, v));
		return;
	}
	conn_reply_u64_room(c, v);
}

void
conn_reply_err(struct conn *c, enum kl_err err, const char *fmt, ...)
{
	char	head[32];
	va_list	ap;

	c->cs->st->errors++;
	snprintf(head, sizeof(head), "ERR %s", proto_err_word(err));
	va_start(ap, fmt);
	conn_vappend(c, head, fmt, ap);
	va_end(ap);
}

/* ---- input ---- */

/* Executes one request line of c's channel (its LF, and a CR, gone); r
 * is c's connection (c->root, which its callers have at hand). A line
 * that starts with a word (a byte over '@': conn_frame()'s common line)
 * is not blank, so its caller says so and that test goes. */
static inline __attribute__((always_inline)) void
conn_exec(struct conn *r, struct conn *c, const char *line, size_t len,
    bool word)
{
	struct conns	*cs = c->cs;
	struct request	*req = &cs->req;
	enum kl_err	 err;

	err = proto_parse(line, len, req);
	if (!word && err == KL_OK && req->cmd == CMD_NONE)
		return;	/* keylockd-protocol(7), TRANSPORT: no reply */
	cs->st->requests++;
	if (!r->admitted && !commands_need_auth(cs->cmds))
		conn_admit(r);	/* a complete line, no secret set */
	if (err == KL_OK)
		commands_execute(cs->cmds, c, req);
	else if (err == KL_ERR_LIMIT)	/* after AUTH and NOPERM */
		commands_refuse_over(cs->cmds, c, req);
	else
		conn_reply_err(c, err, "%s", req->why);
}

/* A complete line answered without conn_exec() (an @ that names no
 * channel, TOOLONG, a channel over max-channels) is a request, as
 * conn_exec()'s are (STATS requests), and admits the connection as they
 * do: keylockd.conf(5), auth-timeout. */
static void
conn_admit_line(struct conn *r)
{
	r->cs->st->requests++;
	if (!r->admitted && !commands_need_auth(r->cs->cmds))
		conn_admit(r);
}

static void
conn_reply_toolong(struct conn *c)
{
	conn_admit_line(c->root);
	conn_reply_err(c, KL_ERR_TOOLONG, "request line over %" PRId64
	    " bytes", c->cs->cfg->max_line);
}

/* ---- channels (keylockd-protocol(7), CHANNELS) ---- */

static size_t
conn_chan_bucket(const struct conn *r, uint32_t n)
{
	return (size_t)((n * 2654435761u) & (r->nbuckets - 1));
}

static struct conn *
conn_chan_find(const struct conn *r, uint32_t n)
{
	struct conn	*ch;

	if (r->nchans == 0)
		return NULL;
	for (ch = r->chans[conn_chan_bucket(r, n)]; ch != NULL;
	    ch = ch->chnext)
		if (ch->h.chan == n)
			return ch;
	return NULL;
}

/* Room in r's buckets for one more channel: they double past one per
 * bucket. */
static bool
conn_chans_grow(struct conn *r)
{
	struct conn	**nb, *ch, *next;
	uint32_t	  n, i;

	if (r->nchans < r->nbuckets)
		return true;
	n = r->nbuckets == 0 ? 4 : r->nbuckets * 2;
	if ((nb = kl_calloc(n, sizeof(*nb))) == NULL)
		return false;
	for (i = 0; i < r->nbuckets; i++)
		for (ch = r->chans[i]; ch != NULL; ch = next) {
			size_t	b = (size_t)((ch->h.chan * 2654435761u) &
			    (n - 1));

			next = ch->chnext;
			ch->chnext = nb[b];
			nb[b] = ch;
		}
	kl_free(r->chans);
	r->chans = nb;
	r->nbuckets = n;
	return true;
}

/* "@N " into p (16 bytes at least); returns its length. */
static uint8_t
conn_chan_prefix(char *p, uint32_t n)
{
	char	digits[10];
	uint8_t	k = 0, len = 0;

	do {
		digits[k++] = (char)('0' + n % 10);
		n /= 10;
	} while (n > 0);
	p[len++] = '@';
	while (k > 0)
		p[len++] = digits[--k];
	p[len++] = ' ';
	return len;
}

/* Channel n of r, with owner o, or a new owner if o is NULL; NULL on no
 * memory. */
static struct conn *
conn_chan_new(struct conn *r, uint32_t n, struct lt_owner *o)
{
	struct conns	*cs = r->cs;
	struct conn	*ch;
	size_t		 b;

	if (!conn_chans_grow(r) || (ch = kl_calloc(1, sizeof(*ch))) == NULL)
		return NULL;
	/* backend etcd names a lock's holder across the cluster by its
	 * front end and client id: a channel needs an id of its own there,
	 * taken from the connections' sequence. */
	if (o == NULL && (o = cs->be->ops->owner_new(cs->be,
	    cs->be->ops->unique_ids ? ++cs->next_id : r->id, ch)) ==
	    NULL) {
		kl_free(ch);
		return NULL;
	}
	locktable_owner_set_udata(o, ch);
	ch->h.owner = o;
	ch->h.chan = n;
	ch->root = r;
	ch->cs = cs;
	ch->id = r->id;
	ch->since_ms = r->since_ms;
	ch->fd = -1;
	ch->admitted = true;
	ch->plen = conn_chan_prefix(ch->prefix, n);
	b = conn_chan_bucket(r, n);
	ch->chnext = r->chans[b];
	r->chans[b] = ch;
	r->nchans++;
	cs->st->channels++;
	cs->st->channel_bytes += CONN_CHAN_BYTES;
	return ch;
}

static void
conn_chan_unlink(struct conn *ch)
{
	struct conn	 *r = ch->root;
	struct conn	**pp = &r->chans[conn_chan_bucket(r, ch->h.chan)];

	while (*pp != ch)
		pp = &(*pp)->chnext;
	*pp = ch->chnext;
	ch->chnext = NULL;
	r->nchans--;
	ch->cs->st->channels--;
}

/* A channel that holds, waits and queues nothing is forgotten
 * (keylockd-protocol(7), CHANNELS: the table never leaks, nor do
 * channels). Never called from a backend hook: conn_released() puts
 * the channel on the turn's run queue instead. */
static void
conn_chan_idle(struct conn *ch)
{
	struct conns	*cs = ch->cs;

	if (ch == ch->root || ch->state != CONN_READY || ch->qlen > 0 ||
	    ch->ncancels > 0 || !cs->be->ops->owner_idle(cs->be, ch->h.owner))
		return;
	conn_chan_unlink(ch);
	if (ch->queued)
		TAILQ_REMOVE(&cs->runq, ch, qentry);
	conn_undefer(ch);
	cs->be->ops->owner_free(cs->be, ch->h.owner, kl_now_ms());
	if (ch->timer != NULL) {
		event_free(ch->timer);
		cs->st->channel_bytes -= CONN_TIMER_BYTES;
	}
	cs->st->input_bytes -= ch->qcap;
	cs->st->channel_bytes -= CONN_CHAN_BYTES;
	kl_free(ch->q);
	kl_free(ch);
}

/* r closes: so do its channels, first; their owners leave with r's. */
static void
conn_chans_close(struct conn *r)
{
	struct conn	*ch, *next;

	for (uint32_t i = 0; i < r->nbuckets; i++)
		for (ch = r->chans[i]; ch != NULL; ch = next) {
			next = ch->chnext;
			ch->chnext = NULL;
			if (ch->timer != NULL) {
				event_free(ch->timer);
				ch->cs->st->channel_bytes -= CONN_TIMER_BYTES;
			}
			ch->timer = NULL;
			conn_set_state(ch, CONN_CLOSED);
			ch->cs->st->channels--;
		}
	kl_free(r->chans);
	r->chans = NULL;
	r->nchans = r->nbuckets = 0;
}

/*
 * Sizes an input buffer (a connection's ibuf, a channel's queue) to cap
 * bytes, counted in STATS input_bytes; false if no memory. Growth doubles
 * but stops at what a connection may hold (conn_input_cap()), so a
 * buffer costs about what it holds: one line plus one read, as
 * keylockd.conf(5), max-line, says, not the next power of two.
 */
static bool
conn_ibuf_size(struct conns *cs, char **buf, size_t *cap, size_t ncap)
{
	char	*p;

	if (ncap == 0) {
		kl_free(*buf);
		*buf = NULL;
	} else if ((p = kl_realloc(*buf, ncap)) == NULL)
		return false;
	else
		*buf = p;
	cs->st->input_bytes += ncap;
	cs->st->input_bytes -= *cap;
	*cap = ncap;
	return true;
}

/* The size for a buffer of cap bytes that must hold need: doubled while
 * small, and past CONN_IBUF_SLACK at once to max, what a connection may
 * hold, so that a queue that fills does not leave a trail of freed
 * smaller copies behind it in the heap (never below need). */
static size_t
conn_ibuf_grown(size_t cap, size_t need, size_t max)
{
	if (cap == 0)
		cap = CONN_IBUF_MIN;
	while (cap < need)
		cap *= 2;
	if (cap > CONN_IBUF_SLACK && max > cap)
		cap = max;
	return cap > max && max >= need ? max : cap;
}

/* A buffer with more than 16 KiB it does not use gives them back (glibc
 * shrinks in place, without a copy), so that one that held a full input
 * costs what it still holds as it drains, and a connection's two buffers
 * together stay near its bound, not twice it. A smaller realloc that
 * fails keeps the larger. */
static void
conn_ibuf_shrink(struct conns *cs, char **buf, size_t *cap, size_t len)
{
	size_t	ncap;

	if (*cap - len <= CONN_IBUF_SLACK)
		return;
	ncap = (len + 4095) & ~(size_t)4095;
	(void)conn_ibuf_size(cs, buf, cap, ncap > CONN_IBUF_MIN ? ncap :
	    CONN_IBUF_MIN);
}

/* Appends a line (NULL: one over max-line) to c's queue; false if c's
 * connection was closed for it. */
static bool
conn_enqueue(struct conn *c, const char *line, size_t len)
{
	struct conn	*r = c->root;

	if (line == NULL)
		len = 0;
	if (c->qlen + len + 1 > c->qcap && !conn_ibuf_size(c->cs, &c->q,
	    &c->qcap, conn_ibuf_grown(c->qcap, c->qlen + len + 1,
	    conn_input_cap(r)))) {
		conn_close_nomem(c, "input");
		return false;
	}
	if (len > 0)
		memcpy(c->q + c->qlen, line, len);
	c->q[c->qlen + len] = '\n';
	c->qlen += len + 1;
	r->nqueued += len + 1;
	if (c->state == CONN_PENDING)
		conn_scan_cancel(c);
	return true;
}

/*
 * keylockd-protocol(7), CHANNELS: "@N " opens a line on channel N.
 * Returns the channel's number, 0 with *rest the line for channel 0, or
 * -1 after answering ERR SYNTAX on channel 0.
 */
static int64_t
conn_line_channel(struct conn *r, const char *line, size_t len,
    const char **rest, size_t *restlen, bool answer)
{
	size_t		 i = 0, j;
	uint64_t	 n = 0;

	*rest = line;
	*restlen = len;
	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (i == len || line[i] != '@')
		return 0;
	/* One pass over the digits; a number ends at a blank or the end. */
	for (j = i + 1; j < len && line[j] >= '0' && line[j] <= '9' &&
	    n <= UINT32_MAX; j++)
		n = n * 10 + (uint64_t)(line[j] - '0');
	if (j == i + 1 || n == 0 || n > UINT32_MAX ||
	    (j < len && line[j] != ' ' && line[j] != '\t')) {
		while (j < len && line[j] != ' ' && line[j] != '\t')
			j++;
		bool	echo = j - i <= 16;

		/* The token is echoed only when short and printable. */
		for (size_t k = i; echo && k < j; k++)
			echo = line[k] > ' ' && line[k] < 0x7f;
		if (answer) {
			conn_admit_line(r);
			conn_reply_err(r, KL_ERR_SYNTAX, "%.*s%sis not a "
			    "channel: @1 to @%" PRIu32 ", then a blank",
			    echo ? (int)(j - i) : 0, line + i, echo ? " " :
			    "the @ word ", UINT32_MAX);
		}
		return -1;
	}
	/* The request starts at its command word, so that the parser's
	 * one-pass short form takes "@N LOCK k" as it takes "LOCK k". */
	while (j < len && (line[j] == ' ' || line[j] == '\t'))
		j++;
	*rest = line + j;
	*restlen = len - j;
	return (int64_t)n;
}

static bool
conn_is_blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t')
			return false;
	return true;
}

/*
 * Channel N is not in use and may not be: its line (NULL: one over
 * max-line) is refused on it. keylockd-protocol(7), ERRORS: TOOLONG and
 * SYNTAX/BADKEY come before LIMIT.
 */
static void
conn_chan_limit(struct conn *r, uint32_t n, const char *line, size_t len)
{
	struct request	*req = &r->cs->req;
	char		*p, text[PROTO_WHY_MAX + 64];
	int		 k;
	enum kl_err	 err = line != NULL ? proto_parse(line, len, req) :
			    KL_ERR_TOOLONG;

	r->cs->st->errors++;
	conn_admit_line(r);
	if (line == NULL)
		k = snprintf(text, sizeof(text), "@%" PRIu32 " ERR TOOLONG "
		    "request line over %" PRId64 " bytes\n", n,
		    r->cs->cfg->max_line);
	else if (err != KL_OK)
		k = snprintf(text, sizeof(text), "@%" PRIu32 " ERR %s %s\n",
		    n, proto_err_word(err), req->why);
	else
		k = snprintf(text, sizeof(text), "@%" PRIu32 " ERR LIMIT %"
		    PRIu32 " channels in use on this connection "
		    "(max-channels)\n", n, r->nchans);
	if (k < 0 || (size_t)k >= sizeof(text))
		k = (int)sizeof(text) - 1;
	text[k - 1] = '\n';
	if ((p = conn_room(r, (size_t)k)) == NULL)
		return;
	memcpy(p, text, (size_t)k);
	conn_appended(r, (size_t)k);
}

/* A line of channel 0 that starts with an @ that names no channel:
 * ERR SYNTAX in its turn (conn_line_channel() says why). */
static bool
conn_is_bad_at(const char *p, size_t n)
{
	size_t	i = 0;

	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	return i < n && p[i] == '@';
}

/*
 * A framed line of the connection r (NULL: one over max-line, whose
 * channel was chan): to its channel, served now if the channel is free,
 * else queued behind its open request.
 */
static void
conn_route(struct conn *r, const char *line, size_t len, uint32_t chan)
{
	const char	*rest = line;
	size_t		 restlen = len;
	int64_t		 n = chan;
	struct conn	*ch = r;

	if (line != NULL && (n = conn_line_channel(r, line, len, &rest,
	    &restlen, false)) < 0) {
		/* channel 0's error, after what channel 0 has queued */
		if (r->state != CONN_READY || r->qlen > 0)
			conn_enqueue(r, line, len);
		else
			conn_line_channel(r, line, len, &rest, &restlen, true);
		return;
	}
	if (line != NULL && conn_is_blank(rest, restlen))
		return;	/* keylockd-protocol(7), TRANSPORT: no reply */
	if (n != 0 && (ch = conn_chan_find(r, (uint32_t)n)) == NULL) {
		if (r->nchans >= (uint64_t)r->cs->cfg->max_channels) {
			conn_chan_limit(r, (uint32_t)n, line != NULL ? rest :
			    NULL, restlen);
			return;
		}
		if ((ch = conn_chan_new(r, (uint32_t)n, NULL)) == NULL) {
			conn_close_nomem(r, "a channel");
			return;
		}
	}
	if (ch->state != CONN_READY || ch->qlen > 0) {
		conn_enqueue(ch, line != NULL ? rest : NULL, restlen);
		return;
	}
	if (line == NULL)
		conn_reply_toolong(ch);
	else
		conn_exec(r, ch, rest, restlen, false);
	conn_chan_idle(ch);
}

/*
 * The rest of r's overlong line, from buf[*off]: dropped up to its LF and
 * answered ERR TOOLONG on its channel, *off moved past the LF. false: no
 * LF in buf[*off..len), and all of it is dropped.
 */
static bool
conn_discard(struct conn *r, char *buf, size_t len, size_t *off)
{
	char	*lf = memchr(buf + *off, '\n', len - *off);

	if (lf == NULL)
		return false;
	*off = (size_t)(lf - buf) + 1;
	r->discarding = false;
	conn_route(r, NULL, 0, r->discard_chan);
	return true;
}

/*
 * Frames the complete lines in buf[0..len) of the connection r and
 * routes each to its channel; returns the bytes consumed. Framing goes
 * on while channel 0 waits, so that other channels are served; it stops
 * at r's share of a turn, or when r stops taking lines (QUIT, closed). A
 * line longer than max-line is dropped up to its LF and answered ERR
 * TOOLONG on its channel (HACKING.md, Framing with a bound).
 */
static size_t
conn_frame(struct conn *r, char *buf, size_t len)
{
	struct conns	*cs = r->cs;
	size_t		 max = (size_t)cs->cfg->max_line, off = 0, handled = 0;
	const char	*rest;
	size_t		 restlen;

	r->produced = 0;
	/* the rest of an overlong line that the last read cut */
	if (r->discarding) {
		if (!conn_discard(r, buf, len, &off))
			return len;
		handled++;
	}
	while (off < len && (r->state == CONN_READY ||
	    r->state == CONN_PENDING)) {
		char	*p = buf + off, *lf;
		size_t	 avail = len - off, n;

		/* One client's pipeline must not hold the loop: past its
		 * share of a turn, the rest waits for the next one. */
		if (handled == CONN_TURN_REQUESTS ||
		    r->produced >= CONN_TURN_OUTPUT) {
			if (r->state == CONN_READY)
				conn_set_state(r, CONN_DEFERRED);
			else
				conn_defer_framing(r);
			break;
		}
		lf = memchr(p, '\n', avail < max ? avail : max);
		if (lf == NULL) {
			int64_t	ch;

			if (avail < max)
				break;
			/* No LF in max bytes: the line names its channel in
			 * its first bytes, or is channel 0's. */
			ch = conn_line_channel(r, p, max, &rest, &restlen,
			    false);
			r->discarding = true;
			r->discard_chan = ch > 0 ? (uint32_t)ch : 0;
			off += max;
			if (!conn_discard(r, buf, len, &off))
				return len;
			handled++;
			continue;
		}
		n = (size_t)(lf - p);
		off += n + 1;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		/* The common case: a command word, for channel 0, free. Every
		 * other line ('@', blanks, bytes below '@') is routed. */
		if ((unsigned char)p[0] > '@' && r->state == CONN_READY &&
		    r->qlen == 0)
			conn_exec(r, r, p, n, true);
		else
			conn_route(r, p, n, 0);
		handled++;
	}
	return off;
}

/*
 * Serves the lines queued on c's channel while it is ready, up to its
 * share of the turn; the rest stays queued. A line over max-line was
 * queued as an empty one.
 */
static void
conn_run_queue(struct conn *c)
{
	struct conn	*r = c->root;
	size_t		 off = 0, handled = 0, base = r->produced, restlen;
	const char	*rest;

	while (off < c->qlen && c->state == CONN_READY) {
		char	*p = c->q + off, *lf;
		size_t	 n;

		if (handled == CONN_TURN_REQUESTS ||
		    r->produced - base >= CONN_TURN_OUTPUT) {
			conn_set_state(c, CONN_DEFERRED);
			break;
		}
		lf = memchr(p, '\n', c->qlen - off);
		n = (size_t)(lf - p);
		off += n + 1;
		if (n == 0)
			conn_reply_toolong(c);
		else if (c == r && conn_is_bad_at(p, n))
			conn_line_channel(c, p, n, &rest, &restlen, true);
		else
			conn_exec(r, c, p, n, false);
		handled++;
	}
	if (c->state == CONN_CLOSED || off == 0)
		return;
	memmove(c->q, c->q + off, c->qlen - off);
	c->qlen -= off;
	r->nqueued -= off;
	c->cancel_scan = c->cancel_scan > off ? c->cancel_scan - off : 0;
	if (c->qlen == 0 && c->qcap > CONN_IBUF_MIN)
		(void)conn_ibuf_size(c->cs, &c->q, &c->qcap, 0);
	else
		conn_ibuf_shrink(c->cs, &c->q, &c->qcap, c->qlen);
	conn_scan_cancel(c);
	conn_pause_reading(r, r->ilen + r->nqueued >= conn_input_cap(r));
}

/* Keeps buf[0..len) as the input not yet framed. */
static bool
conn_keep(struct conn *c, const char *buf, size_t len)
{
	if (len == 0) {
		/* nothing held before either (the common case): no free() */
		if (c->ibuf != NULL)
			(void)conn_ibuf_size(c->cs, &c->ibuf, &c->icap, 0);
		c->ilen = 0;
		return true;
	}
	/* buf is the scratch buffer when ibuf has to grow: conn_recv()
	 * reads into ibuf only with room for the read */
	if (len > c->icap && !conn_ibuf_size(c->cs, &c->ibuf, &c->icap,
	    conn_ibuf_grown(c->icap, len, conn_input_cap(c)))) {
		conn_close_nomem(c, "input");
		return false;
	}
	memmove(c->ibuf, buf, len);
	c->ilen = len;
	conn_ibuf_shrink(c->cs, &c->ibuf, &c->icap, len);
	return true;
}

/* Most input held for one client, framed or not: a full line plus one
 * read's worth. */
static size_t
conn_input_cap(const struct conn *c)
{
	return (size_t)c->cs->cfg->max_line + CONN_SCRATCH_SIZE;
}

static void
conn_watch_input(struct conn *c, bool pause)
{
	event_del(c->rev);
	event_assign(c->rev, c->cs->base, c->fd,
	    (pause ? EV_CLOSED : EV_READ) | EV_PERSIST, conn_read_cb, c);
	event_add(c->rev, NULL);
	c->read_paused = pause;
}

/* While the input is full, watch only for the peer going away; inline,
 * as every read asks and almost none changes it. */
static inline void
conn_pause_reading(struct conn *c, bool pause)
{
	if (c->state != CONN_CLOSED && c->read_paused != pause)
		conn_watch_input(c, pause);
}

/* Is line[0..n) a CANCEL: blanks, the word, blanks? */
static bool
conn_is_cancel(const char *p, size_t n)
{
	size_t	i = 0;

	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	while (n > i && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	return n - i == 6 && strncasecmp(p + i, "cancel", 6) == 0;
}

/*
 * keylockd-protocol(7), CANCEL: while a channel's LOCK waits, the first
 * CANCEL line queued behind it withdraws it. The lines were framed on
 * their way in, so a line taken for a CANCEL here is one the channel
 * will serve as a CANCEL.
 */
static void
conn_scan_cancel(struct conn *c)
{
	while (c->state == CONN_PENDING && c->pending_lock &&
	    !c->cancel_asked && c->ncancels < CONN_CANCELS_MAX &&
	    c->cancel_scan < c->qlen) {
		char	*p = c->q + c->cancel_scan;
		char	*lf = memchr(p, '\n', c->qlen - c->cancel_scan);

		c->cancel_scan += (size_t)(lf - p) + 1;
		if (conn_is_cancel(p, (size_t)(lf - p))) {
			c->cancel_asked = true;
			c->ncancels++;
			commands_cancel(c->cs->cmds, c);
		}
	}
}

/*
 * keylockd.conf(5), max-input-total: whether the input buffers of all
 * connections are within one connection's bound (and `more` besides) of
 * it, so that a read that filled a connection's buffers might pass it.
 */
static bool
conns_input_short(const struct conns *cs, size_t more)
{
	int64_t	total = cs->cfg->max_input_total;

	return total != KL_NONE && cs->st->input_bytes + more +
	    (size_t)cs->cfg->max_line + CONN_SCRATCH_SIZE > (uint64_t)total;
}

/* c is not read until the total falls (conns_input_resume()). */
static enum conn_io
conn_input_wait(struct conn *c)
{
	struct conns	*cs = c->cs;
	uint64_t	 now;

	conn_pause_reading(c, true);
	if (c->input_waits)
		return CONN_IO_AGAIN;
	TAILQ_INSERT_TAIL(&cs->input_wait, c, ientry);
	c->input_waits = true;
	cs->st->input_budget_waits++;
	now = kl_now_ms();
	if (now - cs->input_log_ms >= KL_WARN_INTERVAL_MS) {
		log_warnx("client %" PRIu64 " (%s) from %s: the input of all "
		    "clients (%" PRIu64 " bytes) is near max-input-total %"
		    PRId64 ": not read until it falls (%" PRIu64 " such "
		    "waits so far; logged once per %d s)", c->id,
		    c->name != NULL ? c->name : "-", c->peer,
		    cs->st->input_bytes, cs->cfg->max_input_total,
		    cs->st->input_budget_waits, KL_WARN_INTERVAL_MS / 1000);
		cs->input_log_ms = now;
	}
	return CONN_IO_AGAIN;
}

/* At the end of a turn: the waiting connections are read again, oldest
 * first, as many as the total has room for, each at its bound. */
static void
conns_input_resume(struct conns *cs)
{
	struct conn	*c;
	size_t		 more = 0;

	while ((c = TAILQ_FIRST(&cs->input_wait)) != NULL &&
	    !conns_input_short(cs, more)) {
		TAILQ_REMOVE(&cs->input_wait, c, ientry);
		c->input_waits = false;
		conn_pause_reading(c, c->ilen + c->nqueued >=
		    conn_input_cap(c));
		/* what OpenSSL holds has no socket event to say so */
		if (c->tls != NULL && !c->read_paused && tls_pending(c->tls))
			event_active(c->rev, EV_READ, 0);
		more += conn_input_cap(c);
	}
}

/*
 * How conn_recv_short() reads a connection's bytes, one pair per
 * transport: look at them (they stay to be taken), then take as many of
 * them. Each is one recv(2), or SSL_peek and SSL_read, with recv's
 * results: > 0 bytes, 0 at the end of input, -1 with errno (EAGAIN: none
 * now). On TLS both look at decrypted bytes, those OpenSSL holds first
 * (tls_pending()), and both may have to write (a key update): then c
 * watches for writability, and conn_write_cb() reads it again.
 */
struct conn_rx {
	ssize_t	(*peek)(struct conn *, void *, size_t);
	ssize_t	(*take)(struct conn *, void *, size_t);
};

static ssize_t
conn_plain_peek(struct conn *c, void *buf, size_t len)
{
	return recv(c->fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
}

static ssize_t
conn_plain_take(struct conn *c, void *buf, size_t len)
{
	return recv(c->fd, buf, len, MSG_DONTWAIT);
}

static ssize_t
conn_tls_in(struct conn *c, ssize_t n)
{
	if (c->tls_read_wants_write)
		conn_arm_write(c, true);
	return n;
}

static ssize_t
conn_tls_peek(struct conn *c, void *buf, size_t len)
{
	return conn_tls_in(c, tls_peek(c->tls, buf, len,
	    &c->tls_read_wants_write));
}

static ssize_t
conn_tls_take(struct conn *c, void *buf, size_t len)
{
	return conn_tls_in(c, tls_read(c->tls, buf, len,
	    &c->tls_read_wants_write));
}

static const struct conn_rx conn_rx_plain = {
	conn_plain_peek, conn_plain_take
};
static const struct conn_rx conn_rx_tls = {
	conn_tls_peek, conn_tls_take
};

/*
 * A read while the total is short (conns_input_short()), which must not
 * make an input buffer grow: c takes, looking first at what it sent
 * (conn_rx), its bytes up to the end of its line (handled at once: no
 * tail is left, and its buffer goes), or, with no LF among them, what
 * the buffer it has can hold. One whose partial line would grow waits
 * (conn_input_wait()), and so does one whose lines could be kept (a
 * request open, channels in use, lines queued or left to frame). Plain
 * and TLS alike; on TLS what is looked at may stop at the end of a record,
 * so a line that spans records is taken as a partial one, into the room
 * its buffer has.
 */
static enum conn_io
conn_recv_short(struct conn *c, char **buf, size_t *len, size_t room)
{
	const struct conn_rx	*rx;
	bool			 inplace = c->ilen > CONN_SCRATCH_SIZE / 4;
	size_t			 pre = inplace ? 0 : c->ilen, take;
	char			*p = c->cs->scratch + pre, *lf;
	ssize_t			 n;

	if (c->state != CONN_READY || c->deferred || c->nchans > 0 ||
	    c->nqueued > 0)
		return conn_input_wait(c);
	rx = c->tls != NULL ? &conn_rx_tls : &conn_rx_plain;
	if (room > CONN_SCRATCH_SIZE - pre)
		room = CONN_SCRATCH_SIZE - pre;
	n = rx->peek(c, p, room);
	if (n <= 0) {
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		    errno == EINTR))
			return CONN_IO_AGAIN;
		c->eof = n == 0 ? "end of input" : strerror(errno);
		return CONN_IO_END;
	}
	lf = memchr(p, '\n', (size_t)n);
	take = lf != NULL ? (size_t)(lf - p) + 1 : (size_t)n;
	/* an overlong line's bytes up to its LF are dropped, not kept */
	if (!c->discarding && (lf == NULL || inplace) &&
	    take > c->icap - c->ilen)
		take = c->icap - c->ilen;
	/* Nothing it may take: not read again until the total falls (so
	 * bytes looked at again and again do not spin the loop). */
	if (take == 0)
		return conn_input_wait(c);
	if (inplace)
		*buf = c->ibuf;
	else {
		if (c->ilen > 0)
			memcpy(c->cs->scratch, c->ibuf, c->ilen);
		*buf = c->cs->scratch;
	}
	n = rx->take(c, *buf + c->ilen, take);
	if (n <= 0)
		return CONN_IO_AGAIN;	/* it was there: the next turn */
	*len = c->ilen + (size_t)n;
	return CONN_IO_DATA;
}

/* One recv() into the scratch buffer, or after what is already held. */
static enum conn_io
conn_recv(struct conn *c, char **buf, size_t *len)
{
	size_t	room, cap = conn_input_cap(c), held = c->ilen + c->nqueued;
	ssize_t	n;

	/* A read takes no more than fits under the connection's bound with
	 * what it holds already, queued lines included: one line plus one
	 * read in all (keylockd.conf(5), max-line), not that per buffer. */
	if (held >= cap) {
		conn_pause_reading(c, true);	/* max-line made smaller */
		return CONN_IO_AGAIN;
	}
	if (conns_input_short(c->cs, 0))
		return conn_recv_short(c, buf, len, cap - held);
	if (c->ilen == 0) {
		*buf = c->cs->scratch;
		room = CONN_SCRATCH_SIZE;
	} else if (c->ilen <= CONN_SCRATCH_SIZE / 4) {
		/* A part of a line held (a batch cut mid-line, a trickler's
		 * two bytes) goes before the read in the scratch buffer, so
		 * that the connection's own buffer stays the size of what it
		 * holds, not of a read: a slow sender costs its bytes, not
		 * 64 KiB. ibuf is left as it is until conn_keep(). */
		memcpy(c->cs->scratch, c->ibuf, c->ilen);
		*buf = c->cs->scratch;
		room = CONN_SCRATCH_SIZE - c->ilen;
	} else {
		/* a large part held: the read goes after it, in ibuf */
		*buf = NULL;
		room = CONN_SCRATCH_SIZE;
	}
	if (room > cap - held)
		room = cap - held;
	if (*buf == NULL) {
		if (c->ilen + room > c->icap && !conn_ibuf_size(c->cs,
		    &c->ibuf, &c->icap, conn_ibuf_grown(c->icap,
		    c->ilen + room, cap)))
			return CONN_IO_NOMEM;
		*buf = c->ibuf;
	}
	if (c->tls != NULL)
		n = conn_tls_take(c, *buf + c->ilen, room);
	else
		n = conn_plain_take(c, *buf + c->ilen, room);
	if (n > 0) {
		*len = c->ilen + (size_t)n;
		return CONN_IO_DATA;
	}
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		return CONN_IO_AGAIN;
	c->eof = n == 0 ? "end of input" : strerror(errno);
	return CONN_IO_END;
}

/* Frames what is buffered and keeps the rest; false if c was closed. */
static bool
conn_consume(struct conn *c, char *buf, size_t len)
{
	size_t	used = 0;

	if (len == 0)
		return c->state != CONN_CLOSED;	/* buf may be NULL */
	if ((c->state == CONN_READY || c->state == CONN_PENDING) &&
	    !c->deferred)
		used = conn_frame(c, buf, len);
	if (c->state == CONN_CLOSED || !conn_keep(c, buf + used, len - used))
		return false;
	conn_pause_reading(c, c->ilen + c->nqueued >= conn_input_cap(c));
	return true;
}

static void
conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;
	struct conns	*cs = c->cs;
	char		*buf = NULL;
	size_t		 len = 0;

	kl_clock_hold();
	if (c->read_paused) {
		conn_close(c, c->input_waits ? "peer closed while its input "
		    "waited for max-input-total" : "peer closed while its "
		    "input was full");
	} else {
		switch (conn_recv(c, &buf, &len)) {
		case CONN_IO_DATA:
			if (cs->cfg->idle_timeout != 0)
				conn_dl_join(c, CONN_DL_IDLE, kl_now_ms());
			if (conn_consume(c, buf, len))
				conn_flush(c);
			if (c->tls != NULL)
				conn_schedule(c);	/* conn_run: pending */
			break;
		case CONN_IO_AGAIN:
			break;
		case CONN_IO_NOMEM:
			conn_close_nomem(c, "input");
			break;
		case CONN_IO_END:
			event_del(c->rev);
			conn_schedule(c);	/* conn_run answers the rest */
			break;
		}
	}
	conns_end_turn(cs);
	kl_clock_release();
}

static void
conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;
	struct conns	*cs = c->cs;

	if (c->tls_read_wants_write) {
		c->tls_read_wants_write = false;
		event_active(c->rev, EV_READ, 0);
	}
	if (conn_flush(c))
		conn_schedule(c);
	conns_end_turn(cs);
}

/* One channel's part of conn_eof_drains(): its lines answered, up to a
 * LOCK that waits in the lock table. */
static bool
conn_eof_answered(const struct conn *c)
{
	return (c->state == CONN_READY && c->qlen == 0) ||
	    (c->state == CONN_PENDING && c->pending_lock &&
	    c->h.owner != NULL && locktable_owner_is_waiting(c->h.owner));
}

/*
 * After the end of r's input: drain now? Once the lines of every channel
 * are answered, up to a LOCK that waits in the lock table, which the
 * close withdraws (keylockd-protocol(7): closing releases everything, a
 * waiting LOCK included). A request pending on the backend's round trip
 * (backend etcd: every request until its commit) is answered first, as
 * backend local answers it at once: on channel 0 and on every other
 * channel (printf '@1 LOCK k\n' | nc -N got no reply through backend
 * etcd, its connection drained while the LOCK's put was on its way).
 * A channel's request that completes, or a LOCK that starts to wait,
 * runs r again (conn_complete(), conn_lock_queued()).
 */
static bool
conn_eof_drains(const struct conn *r)
{
	if (r->deferred || !conn_eof_answered(r))
		return false;	/* deferred: lines to frame, or to serve */
	for (uint32_t i = 0; i < r->nbuckets; i++)
		for (const struct conn *ch = r->chans[i]; ch != NULL;
		    ch = ch->chnext)
			if (!conn_eof_answered(ch))
				return false;
	return true;
}

/*
 * c's share of the turn: its channel's queued lines, then, for a
 * connection, its input not yet framed, then, after the end of its input
 * and its lines answered (conn_eof_drains()), draining; then its output.
 * A channel left with nothing is forgotten.
 */
static void
conn_run(struct conn *c)
{
	if (c != c->root) {
		if (c->state == CONN_READY && c->qlen > 0)
			conn_run_queue(c);
		/* its lines answered: its connection may drain */
		if (c->root->eof != NULL)
			conn_schedule(c->root);
		if (c->state != CONN_CLOSED)
			conn_chan_idle(c);
		return;
	}
	if (c->state == CONN_READY && c->qlen > 0)
		conn_run_queue(c);
	if ((c->state == CONN_READY || c->state == CONN_PENDING) &&
	    c->ilen > 0 && !c->deferred && !conn_consume(c, c->ibuf, c->ilen))
		return;
	if (c->eof != NULL && conn_eof_drains(c))
		conn_set_state(c, CONN_DRAINING);
	if (c->state == CONN_CLOSED || !conn_flush(c))
		return;
	/* OpenSSL may hold decrypted bytes no socket event will announce. */
	if (c->tls != NULL && c->state == CONN_READY && !c->read_paused &&
	    tls_pending(c->tls))
		event_active(c->rev, EV_READ, 0);
}

/* ---- the open request ---- */

void
conn_pend(struct conn *c, bool is_lock, int64_t timeout_ms,
    uint64_t start_ms)
{
	struct timeval	tv;
	uint64_t	now = kl_now_ms(), left;

	if (c->state != CONN_READY)
		return;
	conn_set_state(c, CONN_PENDING);
	c->pending_lock = is_lock;
	c->cancel_asked = false;
	c->deadline_ms = 0;
	if (timeout_ms < 0)
		return;
	c->deadline_ms = start_ms + (uint64_t)timeout_ms;
	if (c->timer == NULL) {
		if ((c->timer = evtimer_new(c->cs->base, conn_timer_cb, c)) ==
		    NULL) {
			conn_close_nomem(c, "a timer");
			return;
		}
		if (c != c->root)	/* kept while the channel is */
			c->cs->st->channel_bytes += CONN_TIMER_BYTES;
	}
	left = (uint64_t)timeout_ms;
	left = now - start_ms >= left ? 0 : left - (now - start_ms);
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	evtimer_add(c->timer, &tv);
}

void
conn_complete(struct conn *c, enum kl_err err)
{
	if (c->state != CONN_PENDING)
		return;
	if (c->cancel_asked) {
		if (err == KL_ERR_CANCELLED)
			c->cancel_bits |= 1ULL << (c->ncancels - 1);
		c->cancel_asked = false;
	}
	c->pending_lock = false;
	if (c->timer != NULL)
		evtimer_del(c->timer);
	conn_set_state(c, c->quit_after ? CONN_DRAINING : CONN_READY);
	/* a channel's answer: its connection, whose input has ended, may
	 * drain once the channel's lines are answered (after it in the
	 * turn) */
	if (c != c->root && c->root->eof != NULL)
		conn_schedule(c->root);
}

void
conn_lock_queued(struct conn *c)
{
	if (c->root->eof != NULL)
		conn_schedule(c->root);
}

void
conn_released(struct conn *c)
{
	if (c != c->root)
		conn_schedule(c);	/* conn_run(): conn_chan_idle() */
}

static void
conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;
	struct conns	*cs = c->cs;

	if (c->state == CONN_PENDING)
		commands_deadline(cs->cmds, c);
	conns_end_turn(cs);
}

uint64_t
conn_cancel_result(struct conn *c)
{
	uint64_t	won;

	if (c->ncancels == 0)
		return 0;
	won = c->cancel_bits & 1;
	c->cancel_bits >>= 1;
	c->ncancels--;
	return won;
}

void
conn_quit(struct conn *c)
{
	c = c->root;
	if (c->state == CONN_PENDING)
		c->quit_after = true;
	else
		conn_set_state(c, CONN_DRAINING);
}

bool
conn_is_quitting(const struct conn *c)
{
	return c->quit_after || c->state == CONN_DRAINING;
}

/* ---- accessors ---- */

uint64_t
conn_id(const struct conn *c)
{
	return c->root->id;
}

const char *
conn_name(const struct conn *c)
{
	return c->root->name;
}

bool
conn_set_name(struct conn *c, const char *name, size_t len)
{
	char	*n;

	c = c->root;
	if ((n = kl_strndup(name, len)) == NULL)
		return false;
	kl_free(c->name);
	c->name = n;
	return true;
}

struct conns *
conn_set(const struct conn *c)
{
	return c->cs;
}

const char *
conn_peer(const struct conn *c)
{
	return c->root->peer;
}

enum conn_transport
conn_transport(const struct conn *c)
{
	return c->root->transport;
}

uint64_t
conn_since_ms(const struct conn *c)
{
	return c->root->since_ms;
}

bool
conn_is_authed(const struct conn *c)
{
	return c->root->authed;
}

bool
conn_is_admin(const struct conn *c)
{
	return c->root->admin;
}

uint32_t
conn_nchannels(const struct conn *c)
{
	return c->root->nchans;
}

size_t
conn_nholds(const struct conn *c)
{
	const struct conn	*r = c->root, *ch;
	size_t			 n = locktable_owner_nholds(r->h.owner);

	for (uint32_t i = 0; i < r->nbuckets; i++)
		for (ch = r->chans[i]; ch != NULL; ch = ch->chnext)
			n += locktable_owner_nholds(ch->h.owner);
	return n;
}

void
conn_set_auth(struct conn *c, bool authed, bool admin)
{
	c = c->root;
	c->authed = authed;
	c->admin = admin;
	if (authed)
		conn_admit(c);
}

const struct user *
conn_user(const struct conn *c)
{
	return c->root->user;
}

void
conn_set_user(struct conn *c, const struct user *u)
{
	c->root->user = u;
}

bool
conn_peer_cred(const struct conn *c, int64_t *uid, int64_t *pid)
{
	c = c->root;
	if (!c->has_cred)
		return false;
	*uid = c->uid;
	*pid = c->pid;
	return true;
}

bool
conn_tls_peer_cn(const struct conn *c, char *buf, size_t len)
{
	c = c->root;
	return c->tls != NULL && tls_peer_cn(c->tls, buf, len);
}

unsigned
conn_auth_failed(struct conn *c)
{
	c = c->root;
	if (c->auth_failures < UINT8_MAX)
		c->auth_failures++;
	return c->auth_failures;
}

/* ---- deadlines: auth-timeout, write-timeout, idle-timeout
 * (keylockd.conf(5)) ---- */

static uint64_t
conns_dl_limit(const struct conns *cs, enum conn_dl k)
{
	switch (k) {
	case CONN_DL_AUTH:
		return (uint64_t)cs->cfg->auth_timeout;
	case CONN_DL_WRITE:
		return (uint64_t)cs->cfg->write_timeout;
	case CONN_DL_IDLE:
		return (uint64_t)cs->cfg->idle_timeout;
	case CONN_DL_N:
		break;
	}
	return 0;
}

/* The timer of list k, for its head; off while the list is empty or its
 * setting is 0. */
static void
conns_dl_arm(struct conns *cs, enum conn_dl k)
{
	struct conn	*c = TAILQ_FIRST(&cs->dl[k].list);
	uint64_t	 limit = conns_dl_limit(cs, k), now, at;
	struct timeval	 tv;

	if (c == NULL || limit == 0) {
		evtimer_del(cs->dl[k].timer);
		return;
	}
	now = kl_now_ms();
	at = c->dl[k].since + limit;
	at = at > now ? at - now : 0;
	tv.tv_sec = (time_t)(at / 1000);
	tv.tv_usec = (suseconds_t)(at % 1000) * 1000;
	evtimer_add(cs->dl[k].timer, &tv);
}

/*
 * c's clock of kind k starts (again) at since: c goes to the tail of list
 * k. The timer is set again only when the head changed: re-adding a timer
 * that is due would take it off libevent's active queue, and a busy loop
 * would never run it.
 */
static void
conn_dl_join(struct conn *c, enum conn_dl k, uint64_t since)
{
	struct conns	*cs = c->cs;
	bool		 first = false;

	if (c->dl[k].on) {
		first = TAILQ_FIRST(&cs->dl[k].list) == c;
		TAILQ_REMOVE(&cs->dl[k].list, c, dl[k].e);
	}
	c->dl[k].since = since;
	c->dl[k].on = true;
	TAILQ_INSERT_TAIL(&cs->dl[k].list, c, dl[k].e);
	if (first || TAILQ_FIRST(&cs->dl[k].list) == c)
		conns_dl_arm(cs, k);
}

/* c's clock of kind k stops. */
static void
conn_dl_leave(struct conn *c, enum conn_dl k)
{
	struct conns	*cs = c->cs;
	bool		 first;

	if (!c->dl[k].on)
		return;
	first = TAILQ_FIRST(&cs->dl[k].list) == c;
	TAILQ_REMOVE(&cs->dl[k].list, c, dl[k].e);
	c->dl[k].on = false;
	if (first)
		conns_dl_arm(cs, k);
}

/*
 * idle-timeout closes only a connection that loses nothing by it: it
 * holds no lock, waits for none, has no request open or queued, no
 * channel in use (an idle channel is forgotten at once) and no session.
 * A lock may be held for days over a silent connection.
 */
static bool
conn_is_idle(const struct conn *c)
{
	return c->state == CONN_READY && c->qlen == 0 && c->nchans == 0 &&
	    c->sess == NULL && c->h.owner != NULL &&
	    locktable_owner_nholds(c->h.owner) == 0 &&
	    !locktable_owner_is_waiting(c->h.owner);
}

/* c's deadline of kind k has passed: c leaves list k (closed, or, for
 * idle-timeout, to its tail if it is not idle). */
static void
conn_dl_expire(struct conn *c, enum conn_dl k, uint64_t limit, uint64_t now)
{
	struct conns	*cs = c->cs;

	switch (k) {
	case CONN_DL_IDLE:
		if (!conn_is_idle(c)) {
			conn_dl_join(c, k, now);	/* look again */
			break;
		}
		log_info("client %" PRIu64 " (%s) from %s: silent for "
		    "idle-timeout %" PRIu64 " ms, holding and waiting for "
		    "nothing: closing it", c->id, c->name != NULL ? c->name :
		    "-", c->peer, limit);
		cs->st->idle_timeouts++;
		conn_close(c, "idle-timeout");
		break;
	case CONN_DL_AUTH:
		log_info("client %" PRIu64 " from %s: no %s within "
		    "auth-timeout %" PRIu64 " ms: closing it", c->id, c->peer,
		    commands_need_auth(cs->cmds) ? "AUTH" : "complete line",
		    limit);
		cs->st->auth_timeouts++;
		conn_close(c, "auth-timeout");
		break;
	case CONN_DL_WRITE:
		log_info("client %" PRIu64 " (%s) from %s: %zu reply bytes "
		    "unread for write-timeout %" PRIu64 " ms: closing it",
		    c->id, c->name != NULL ? c->name : "-", c->peer,
		    c->olen - c->ooff, limit);
		cs->st->write_timeouts++;
		conn_close(c, "write-timeout");
		break;
	case CONN_DL_N:
		break;
	}
}

static void
conns_dl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn_deadlines	*d = arg;
	struct conns		*cs = d->cs;
	struct conn		*c;
	uint64_t		 limit = conns_dl_limit(cs, d->kind);
	uint64_t		 now = kl_now_ms();

	while (limit > 0 && (c = TAILQ_FIRST(&d->list)) != NULL &&
	    c->dl[d->kind].since + limit <= now)
		conn_dl_expire(c, d->kind, limit, now);	/* leaves the head */
	conns_dl_arm(cs, d->kind);
	conns_end_turn(cs);
}

/*
 * A connection is admitted once it passed AUTH or, with no client secret
 * set, sent a complete line. Until then it is on the auth-timeout list,
 * from the time it came: silent connections, half lines and half TLS
 * handshakes cannot hold slots for ever.
 */
void
conn_admit(struct conn *c)
{
	if (c->admitted)
		return;
	c->admitted = true;
	conn_dl_leave(c, CONN_DL_AUTH);
}

/*
 * c's output is stuck (the kernel took no more of it) or flowing again.
 * A connection whose unsent replies have not moved for write-timeout is
 * closed: a peer that stopped reading cannot pin its output for ever. A
 * connection joins the list only when a send(2) would block, and goes to
 * its end whenever some of its bytes went out.
 */
static void
conn_stall(struct conn *c, bool stuck, bool moved)
{
	if (!stuck)
		conn_dl_leave(c, CONN_DL_WRITE);
	else if (!c->dl[CONN_DL_WRITE].on || moved)
		conn_dl_join(c, CONN_DL_WRITE, kl_now_ms());
}

void
conns_reload(struct conns *cs)
{
	struct conn	*c;
	uint64_t	 now = kl_now_ms();

	/* idle-timeout turned on: every connection's clock starts now;
	 * turned off: none has one. */
	TAILQ_FOREACH(c, &cs->all, entry)
		if (cs->cfg->idle_timeout == 0)
			conn_dl_leave(c, CONN_DL_IDLE);
		else if (!c->dl[CONN_DL_IDLE].on)
			conn_dl_join(c, CONN_DL_IDLE, now);
	for (int k = 0; k < CONN_DL_N; k++)
		conns_dl_arm(cs, (enum conn_dl)k);
	commands_reauth(cs->cmds, cs);
}

/* ---- sessions (keylockd-protocol(7), SESSIONS) ---- */

struct sessions *
conns_sessions(struct conns *cs)
{
	return cs->sessions;
}

struct session *
conn_session(const struct conn *c)
{
	return c->root->sess;
}

void
conn_set_session(struct conn *c, struct session *s)
{
	c->sess = s;
}

void
conn_forget_session(struct conn *c)
{
	c->sess = NULL;
}

/*
 * Channel c's holds and wait go to its connection's session s instead of
 * ending with c (keylockd-protocol(7), CHANNELS: sessions cover every
 * channel), and so does a LOCK on its way to the table (backend etcd:
 * it may yet be granted, as channel 0's). false: c has nothing to keep,
 * or no memory to keep it (its owner then ends as without a session).
 */
static bool
conn_chan_keep(struct conn *c, struct session *s)
{
	struct lt_owner	*o = c->h.owner;
	bool		 lock = c->pending_lock;	/* still, once closed */

	if (locktable_owner_nholds(o) == 0 &&
	    !locktable_owner_is_waiting(o) && !lock)
		return false;
	if (!session_keep_channel(s, c->h.chan, o, lock ? c->deadline_ms :
	    0))
		return false;
	c->h.owner = NULL;
	return true;
}

/* RESUME: channel n of the session comes back to c with owner o. */
static bool
conn_chan_adopt(void *arg, uint32_t n, struct lt_owner *o,
    uint64_t deadline_ms)
{
	struct conn	*c = arg, *ch;

	if (c->cs->be->ops->owner_idle(c->cs->be, o)) {
		/* its holds and wait ended while the session was detached
		 * (a ttl, a timeout): forgotten, as conn_chan_idle() would
		 * have forgotten it on a connection */
		c->cs->be->ops->owner_free(c->cs->be, o, kl_now_ms());
		return true;
	}
	if ((ch = conn_chan_new(c, n, o)) == NULL) {
		c->cs->be->ops->owner_free(c->cs->be, o, kl_now_ms());
		conn_close_nomem(c, "a channel");
		return false;
	}
	ch->deadline_ms = deadline_ms;
	ch->resume_wait = locktable_owner_is_waiting(o);
	return true;
}

struct lt_owner *
conn_take_session(struct conn *c, struct session *s, bool *waiting)
{
	struct conns	*cs = c->cs;
	struct conn	*old = session_conn(s), *ch;
	struct lt_owner	*o;
	const char	*name = session_name(s);
	uint64_t	 deadline = 0;

	if (c->name == NULL && name != NULL)
		conn_set_name(c, name, strlen(name));	/* no memory: none */
	if (old != NULL) {
		/* A connection the server has not yet seen die: its owners
		 * and their waiting LOCKs move, its queued lines are
		 * dropped. */
		o = old->h.owner;
		if (old->state == CONN_PENDING && old->pending_lock)
			deadline = old->deadline_ms;
		for (uint32_t i = 0; i < old->nbuckets; i++)
			for (ch = old->chans[i]; ch != NULL; ch = ch->chnext)
				conn_chan_keep(ch, s);
		old->h.owner = NULL;
		old->sess = NULL;
		session_attach(s, c, c->peer, &(uint64_t){ 0 });
		conn_close(old, "its session was resumed by another "
		    "connection");
	} else {
		o = session_attach(s, c, c->peer, &deadline);
	}
	cs->be->ops->owner_free(cs->be, c->h.owner, kl_now_ms());
	c->h.owner = o;
	locktable_owner_set_udata(o, &c->h);
	c->id = session_client(s);
	c->sess = s;
	c->deadline_ms = deadline;
	c->resume_wait = *waiting = locktable_owner_is_waiting(o);
	session_take_channels(s, conn_chan_adopt, c);
	return o;
}

static bool	conn_resume_unwait(void *, struct conn *);

struct lt_owner *
conn_adopt_session(struct conn *c, struct lt_owner *o,
    const struct be_chan *chans, size_t nchans, bool *waiting)
{
	struct conns	*cs = c->cs;
	struct session	*s = c->sess;
	struct conn	*ch;
	size_t		 i;

	cs->be->ops->owner_free(cs->be, c->h.owner, kl_now_ms());
	c->h.owner = o;
	locktable_owner_set_udata(o, &c->h);
	c->id = session_client(s);
	c->deadline_ms = 0;	/* another front end's deadline: unknown */
	c->resume_wait = *waiting = locktable_owner_is_waiting(o);
	for (i = 0; i < nchans; i++) {
		if (conn_chan_find(c, chans[i].n) != NULL ||
		    (ch = conn_chan_new(c, chans[i].n, chans[i].owner)) ==
		    NULL)
			break;
		ch->resume_wait = locktable_owner_is_waiting(chans[i].owner);
	}
	if (i == nchans)
		return o;
	/* no memory, or a channel in use while the RESUME was on its way:
	 * the rest stay the session's, and the connection closes (the
	 * session is detached, for a RESUME again) */
	for (; i < nchans; i++)
		if (!session_keep_channel(s, chans[i].n, chans[i].owner, 0))
			cs->be->ops->owner_free(cs->be, chans[i].owner,
			    kl_now_ms());
	conn_channels_walk(c, conn_resume_unwait, NULL);
	*waiting = false;
	conn_close_nomem(c, "a session's channels");
	return NULL;
}

static bool
conn_chan_forget(void *arg, struct conn *ch)
{
	(void)arg;
	ch->h.owner = NULL;	/* the backend's, released by nobody */
	return true;
}

void
conn_session_moved(struct conn *c)
{
	struct session *s = c->root->sess;

	conn_channels_walk(c, conn_chan_forget, NULL);
	if (s != NULL)
		session_moved(s);
	conn_close(c->root, "its session was resumed through another front "
	    "end");
}

static bool
conn_resume_unwait(void *arg, struct conn *c)
{
	(void)arg;
	c->resume_wait = false;
	return true;
}

static bool
conn_resume_wait1(void *arg, struct conn *c)
{
	uint64_t	now = *(const uint64_t *)arg, deadline = c->deadline_ms;

	if (!c->resume_wait)
		return true;
	c->resume_wait = false;
	if (deadline == 0)
		conn_pend(c, true, -1, now);
	else
		conn_pend(c, true, deadline > now ? (int64_t)(deadline - now) :
		    0, now);
	return c->root->state != CONN_CLOSED;
}

/* After the RESUME's reply: each channel's open request is its waiting
 * LOCK, with the deadline it had. */
void
conn_resume_wait(struct conn *c)
{
	uint64_t	now = kl_now_ms();

	conn_channels_walk(c, conn_resume_wait1, &now);
}

void
conn_channels_walk(struct conn *c, bool (*fn)(void *, struct conn *),
    void *arg)
{
	struct conn	*ch, *next;

	c = c->root;
	if (!fn(arg, c))
		return;
	for (uint32_t i = 0; i < c->nbuckets; i++)
		for (ch = c->chans[i]; ch != NULL; ch = next) {
			next = ch->chnext;
			if (!fn(arg, ch))
				return;
		}
}

/* ---- live upgrade (keylockd(8), LIVE UPGRADE; server_upgrade.c) ---- */

#define CONN_STATE_ROOT_MIN	60	/* bytes of the smallest records */
#define CONN_STATE_CHAN_MIN	42

struct conn_state_check {
	uint64_t	 requester;
	char		*why;
	size_t		 whylen;
	bool		 ok;
};

static bool
conn_state_check_chan(void *arg, struct conn *ch)
{
	struct conn_state_check	*sc = arg;

	if (ch->resume_wait) {
		snprintf(sc->why, sc->whylen, "client %" PRIu64 " is resuming "
		    "a session", ch->id);
		sc->ok = false;
	} else if (ch->state == CONN_PENDING && !ch->pending_lock &&
	    (ch != ch->root || ch->id != sc->requester)) {
		snprintf(sc->why, sc->whylen, "client %" PRIu64 " has a "
		    "request in flight", ch->id);
		sc->ok = false;
	}
	return sc->ok;
}

bool
conns_state_check(struct conns *cs, uint64_t requester, char *why,
    size_t whylen)
{
	struct conn_state_check	 sc = { requester, why, whylen, true };
	struct conn		*c;

	TAILQ_FOREACH(c, &cs->all, entry) {
		if (c->tls != NULL)
			continue;	/* closed before the state is written */
		conn_channels_walk(c, conn_state_check_chan, &sc);
		if (!sc.ok)
			return false;
	}
	return true;
}

size_t
conns_close_tls(struct conns *cs)
{
	struct conn	*c, *next;
	size_t		 n = 0;

	for (c = TAILQ_FIRST(&cs->all); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (c->tls == NULL)
			continue;
		conn_close(c, "live upgrade: TLS connections are not handed "
		    "over");
		n++;
	}
	return n;
}

void
conn_state_note(struct conn *c, uint32_t owner_index)
{
	c->state_owner = owner_index;
}

static bool
conn_state_put_chan(void *arg, struct conn *ch)
{
	struct ks_writer	*w = arg;

	ks_put_u32(w, ch->h.chan);
	ks_put_u32(w, ch->state_owner);
	ks_put_u8(w, (uint8_t)(ch->state == CONN_DEFERRED ? CONN_READY :
	    ch->state));
	ks_put_bytes(w, ch->q, ch->qlen);
	ks_put_u8(w, ch->pending_lock);
	ks_put_u64(w, ch->deadline_ms);
	ks_put_u64(w, ch->cancel_scan);
	ks_put_u64(w, ch->cancel_bits);
	ks_put_u32(w, ch->ncancels);
	ks_put_u8(w, ch->cancel_asked);
	ks_put_u8(w, ch->quit_after);
	return true;
}

void
conns_state_write(struct conns *cs, struct ks_writer *w, int *fds,
    size_t *nfds)
{
	struct conn	*c;
	uint32_t	 n = 0;

	TAILQ_FOREACH(c, &cs->all, entry)
		n++;
	ks_put_u64(w, cs->next_id);
	ks_put_u32(w, n);
	TAILQ_FOREACH(c, &cs->all, entry) {
		ks_put_u64(w, c->id);
		ks_put_u32(w, (uint32_t)*nfds);	/* its index in fds */
		ks_put_u8(w, (uint8_t)c->transport);
		ks_put_u64(w, c->since_ms);
		ks_put_str(w, c->peer);
		ks_put_str(w, c->name);
		ks_put_u8(w, c->authed);
		ks_put_u8(w, c->admin);
		ks_put_u8(w, c->admitted);
		ks_put_u8(w, c->auth_failures);
		ks_put_u8(w, c->has_cred);
		ks_put_u64(w, (uint64_t)c->uid);
		ks_put_u64(w, (uint64_t)c->pid);
		/* who AUTH made it: by name (users.h) */
		ks_put_u8(w, (uint8_t)users_state_tag(c->user));
		ks_put_str(w, c->user != NULL ? user_name(c->user) : NULL);
		ks_put_u8(w, c->eof != NULL);
		ks_put_bytes(w, c->ibuf, c->ilen);
		ks_put_bytes(w, c->obuf + c->ooff, c->olen - c->ooff);
		ks_put_u8(w, c->discarding);
		ks_put_u32(w, c->discard_chan);
		ks_put_u32(w, c->nchans + 1);
		conn_channels_walk(c, conn_state_put_chan, w);
		fds[(*nfds)++] = c->fd;
	}
}

/* A string of the state into a fixed buffer; false (bad) if too long. */
/* The new process's view of who c is: its user by name in this
 * configuration; a user it no longer has must AUTH again, as after a
 * reload (keylockd-protocol(7), ACCESS CONTROL). */
static void
conn_state_user(struct conns *cs, struct conn *c, unsigned tag,
    const char *name)
{
	const struct user	*u;

	u = users_from_state(commands_users(cs->cmds), tag, name);
	if (u == NULL || !commands_need_auth(cs->cmds)) {
		c->user = NULL;
		return;
	}
	if ((u == users_client_secret && !commands_has_secret(cs->cmds,
	    false)) || (u == users_operator_secret &&
	    !commands_has_secret(cs->cmds, true)))
		u = users_revoked;
	c->user = u;
	if (u == users_revoked) {
		c->authed = c->admin = false;
	} else if (user_name(u) != NULL) {
		c->admin = user_is_operator(u);
	}
}

static bool
conn_state_str(struct ks_reader *r, char *buf, size_t size, bool *null)
{
	const void	*p;
	size_t		 n;
	uint32_t	 len;
	size_t		 save = r->off;

	len = ks_get_u32(r);
	if (null != NULL && !r->bad && len == UINT32_MAX) {
		*null = true;
		return true;
	}
	r->off = save;
	if (null != NULL)
		*null = false;
	if ((p = ks_get_bytes(r, &n, size - 1)) == NULL)
		return false;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return true;
}

static bool
conn_state_bytes(struct ks_reader *r, char **buf, size_t *len, size_t *cap,
    size_t max)
{
	const void	*p;
	size_t		 n;

	if ((p = ks_get_bytes(r, &n, max)) == NULL)
		return false;
	*len = n;
	if (n == 0)
		return true;
	if ((*buf = kl_malloc(n)) == NULL)
		return ks_fail(r, "out of memory");
	memcpy(*buf, p, n);
	*cap = n;
	return true;
}

/* One channel's record into ch (the root itself for channel 0). */
static bool
conn_state_get_chan(struct conns *cs, struct ks_reader *r, struct conn *ch)
{
	struct timeval	tv;
	uint64_t	now = kl_now_ms(), left;
	uint8_t		state;

	state = ks_get_u8(r);
	if (!conn_state_bytes(r, &ch->q, &ch->qlen, &ch->qcap,
	    (size_t)cs->cfg->max_line + CONN_SCRATCH_SIZE))
		return false;
	cs->st->input_bytes += ch->qcap;
	ch->pending_lock = ks_get_bool(r);
	ch->deadline_ms = ks_get_u64(r);
	ch->cancel_scan = (size_t)ks_get_u64(r);
	ch->cancel_bits = ks_get_u64(r);
	ch->ncancels = ks_get_u32(r);
	ch->cancel_asked = ks_get_bool(r);
	ch->quit_after = ks_get_bool(r);
	if (r->bad)
		return false;
	if (state != CONN_READY && state != CONN_PENDING &&
	    state != CONN_DRAINING)
		return ks_fail(r, "client %" PRIu64 ": state %u", ch->id,
		    state);
	if (ch->cancel_scan > ch->qlen || ch->ncancels > CONN_CANCELS_MAX)
		return ks_fail(r, "client %" PRIu64 ": CANCEL read ahead "
		    "beyond its queue", ch->id);
	if (ch->qlen > 0 && ch->q[ch->qlen - 1] != '\n')
		return ks_fail(r, "client %" PRIu64 ": a queue that does not "
		    "end a line", ch->id);
	if (locktable_owner_is_waiting(ch->h.owner) !=
	    (state == CONN_PENDING && ch->pending_lock))
		return ks_fail(r, "client %" PRIu64 ": its channel %u and "
		    "the table disagree on its waiting LOCK", ch->id,
		    ch->h.chan);
	if (state == CONN_PENDING && !ch->pending_lock && ch != ch->root)
		return ks_fail(r, "client %" PRIu64 ": channel %u waits for "
		    "a reply that is not a LOCK's", ch->id, ch->h.chan);
	ch->root->nqueued += ch->qlen;
	ch->state = (enum conn_state)state;
	if (state == CONN_PENDING && ch->deadline_ms != 0) {
		if ((ch->timer = evtimer_new(cs->base, conn_timer_cb, ch)) ==
		    NULL)
			return ks_fail(r, "out of memory");
		if (ch != ch->root)
			cs->st->channel_bytes += CONN_TIMER_BYTES;
		left = ch->deadline_ms > now ? ch->deadline_ms - now : 0;
		tv.tv_sec = (time_t)(left / 1000);
		tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
		evtimer_add(ch->timer, &tv);
	}
	if (state != CONN_PENDING)
		conn_schedule(ch);
	return true;
}

/* The owner at index i, once. */
static struct lt_owner *
conn_state_owner(struct ks_reader *r, struct lt_owner **owners,
    bool *claimed, size_t nowners)
{
	uint32_t	i = ks_get_u32(r);

	if (r->bad)
		return NULL;
	if (i >= nowners || claimed[i] || owners[i] == NULL) {
		ks_fail(r, "a channel names owner %u, which is not free", i);
		return NULL;
	}
	claimed[i] = true;
	return owners[i];
}

static bool
conn_state_get_root(struct conns *cs, struct ks_reader *r,
    struct lt_owner **owners, bool *claimed, size_t nowners,
    int (*fd_of)(void *, uint32_t), void *fd_arg, uint64_t *max_id)
{
	struct conn	*c, *ch;
	char		 name[KL_NAME_MAX + 1], uname[KL_NAME_MAX + 1];
	uint32_t	 idx, nch, num;
	int		 fd;
	uint8_t		 transport, utag;
	bool		 noname, eof, nouser;

	if ((c = kl_calloc(1, sizeof(*c))) == NULL)
		return ks_fail(r, "out of memory");
	c->cs = cs;
	c->root = c;
	c->fd = -1;
	c->id = ks_get_u64(r);
	idx = ks_get_u32(r);
	transport = ks_get_u8(r);
	c->since_ms = ks_get_u64(r);
	c->transport = (enum conn_transport)transport;
	if (!conn_state_str(r, c->peer, sizeof(c->peer), NULL) ||
	    !conn_state_str(r, name, sizeof(name), &noname)) {
		kl_free(c);
		return false;
	}
	c->authed = ks_get_bool(r);
	c->admin = ks_get_bool(r);
	c->admitted = ks_get_bool(r);
	c->auth_failures = ks_get_u8(r);
	c->has_cred = ks_get_bool(r);
	c->uid = (int64_t)ks_get_u64(r);
	c->pid = (int64_t)ks_get_u64(r);
	utag = ks_get_u8(r);
	if (!conn_state_str(r, uname, sizeof(uname), &nouser)) {
		kl_free(c);
		return false;
	}
	conn_state_user(cs, c, utag, nouser ? NULL : uname);
	eof = ks_get_bool(r);
	/* The descriptor is the old process's word: it handed this one
	 * over for this connection, received close-on-exec (SCM_RIGHTS,
	 * MSG_CMSG_CLOEXEC); each is taken once. No system call asks the
	 * kernel again what the old process knew. */
	if (r->bad || transport > CONN_UNIX || c->id == 0 ||
	    (fd = fd_of(fd_arg, idx)) == -1) {
		kl_free(c);
		return ks_fail(r, "client %" PRIu64 ": descriptor %u was not "
		    "handed over, or is taken", c->id, idx);
	}
	c->fd = fd;
	if (!noname && (c->name = kl_strndup(name, strlen(name))) == NULL) {
		kl_free(c);
		return ks_fail(r, "out of memory");
	}
	if (eof)
		c->eof = "end of input";
	c->rev = event_new(cs->base, c->fd, EV_READ | EV_PERSIST,
	    conn_read_cb, c);
	c->wev = event_new(cs->base, c->fd, EV_WRITE | EV_PERSIST,
	    conn_write_cb, c);
	TAILQ_INSERT_TAIL(&cs->all, c, entry);
	cs->st->clients++;
	if (!conn_addr_hold(c))
		return ks_fail(r, "out of memory");
	if (!c->admitted)
		conn_dl_join(c, CONN_DL_AUTH, c->since_ms);
	if (cs->cfg->idle_timeout != 0)
		conn_dl_join(c, CONN_DL_IDLE, kl_now_ms());
	if (c->rev == NULL || c->wev == NULL ||
	    (!eof && event_add(c->rev, NULL) == -1))
		return ks_fail(r, "out of memory");
	if (c->id > *max_id)
		*max_id = c->id;
	if (!conn_state_bytes(r, &c->ibuf, &c->ilen, &c->icap,
	    conn_input_cap(c)))
		return false;
	cs->st->input_bytes += c->icap;
	if (!conn_state_bytes(r, &c->obuf, &c->olen, &c->ocap,
	    (size_t)cs->cfg->max_output + CONN_TURN_OUTPUT))
		return false;
	cs->out_bytes += c->ocap;
	c->discarding = ks_get_bool(r);
	c->discard_chan = ks_get_u32(r);
	nch = ks_get_count(r, CONN_STATE_CHAN_MIN);
	if (!r->bad && (nch == 0 || nch - 1 > (uint32_t)cs->cfg->max_channels))
		return ks_fail(r, "client %" PRIu64 ": %u channels", c->id,
		    nch);
	for (uint32_t i = 0; i < nch && !r->bad; i++) {
		struct lt_owner	*o;

		num = ks_get_u32(r);
		if ((o = conn_state_owner(r, owners, claimed, nowners)) ==
		    NULL)
			return false;
		if ((i == 0) != (num == 0) || (num != 0 &&
		    conn_chan_find(c, num) != NULL))
			return ks_fail(r, "client %" PRIu64 ": channel %u out "
			    "of place", c->id, num);
		if (i == 0) {
			ch = c;
			c->h.owner = o;
			locktable_owner_set_udata(o, c);
		} else if ((ch = conn_chan_new(c, num, o)) == NULL)
			return ks_fail(r, "out of memory");
		if (!conn_state_get_chan(cs, r, ch))
			return false;
	}
	if (r->bad)
		return false;
	if (c->olen > 0 || c->ilen > 0 || c->state == CONN_DRAINING)
		conn_schedule(c);
	if (!eof)
		conn_pause_reading(c, c->ilen + c->nqueued >=
		    conn_input_cap(c));
	return true;
}

bool
conns_state_read(struct conns *cs, struct ks_reader *r,
    struct lt_owner **owners, size_t nowners,
    int (*fd_of)(void *, uint32_t), void *fd_arg, struct conn **requester,
    uint64_t requester_id)
{
	bool		*claimed;
	uint64_t	 next_id, max_id = 0;
	uint32_t	 n;
	struct conn	*c;

	*requester = NULL;
	next_id = ks_get_u64(r);
	n = ks_get_count(r, CONN_STATE_ROOT_MIN);
	if (r->bad)
		return false;
	if ((claimed = kl_calloc(nowners + 1, sizeof(*claimed))) == NULL)
		return ks_fail(r, "out of memory");
	for (uint32_t i = 0; i < n && !r->bad; i++)
		conn_state_get_root(cs, r, owners, claimed, nowners, fd_of,
		    fd_arg, &max_id);
	for (size_t i = 0; i < nowners && !r->bad; i++)
		if (!claimed[i] && owners[i] != NULL)	/* NULL: a session's */
			ks_fail(r, "owner %zu of the table belongs to no "
			    "connection", i);
	kl_free(claimed);
	if (r->bad)
		return false;
	TAILQ_FOREACH(c, &cs->all, entry)
		if (c->state == CONN_PENDING && !c->pending_lock &&
		    c->id != requester_id)
			return ks_fail(r, "client %" PRIu64 " waits for a reply "
			    "that is not a LOCK's", c->id);
	cs->next_id = next_id > max_id ? next_id : max_id;
	if (requester_id != 0 &&
	    ((c = conns_find(cs, requester_id)) == NULL ||
	    c->state != CONN_PENDING || c->pending_lock))
		return ks_fail(r, "the client that asked for UPGRADE (%" PRIu64
		    ") is not waiting for its reply", requester_id);
	if (requester_id != 0)
		*requester = conns_find(cs, requester_id);
	return true;
}
