/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The session table (session.h; keylockd-protocol(7), SESSIONS). A
 * session is found by its ID through a hash of the ID's first 64 random
 * bits and then compared whole in constant time, so that a wrong RESUME
 * costs the same whatever it guessed. A detached session owns its lock
 * owner and one timer: the earlier of its grace's end and its waiting
 * LOCK's deadline. Its end goes through the backend's owner_free, the
 * one way out of the table that a closed connection takes too.
 */
#include <sys/queue.h>
#include <sys/random.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "config.h"
#include "conn.h"
#include "ks_sessions.h"
#include "kstate.h"
#include "locktable.h"
#include "log.h"
#include "session.h"
#include "ssl_rt.h"
#include "stats.h"
#include "util.h"

#define SESSION_RAW		24	/* random bytes of an ID */
#define SESSION_BUCKETS_MIN	64

_Static_assert(SESSION_ID_LEN == SESSION_RAW / 3 * 4, "base64 of the raw ID");
_Static_assert(SESSION_ID_LEN <= KL_SESSION_ID_MAX, "an ID fits the parser");
_Static_assert(SESSION_RAW == KS_SESSION_RAW, "the state holds an ID whole");

enum session_state {
	SESSION_ATTACHED = KS_SESSION_ATTACHED,
	SESSION_DETACHED = KS_SESSION_DETACHED,
	SESSION_DELAY = KS_SESSION_DELAY  /* ended, keys held for lock-delay */
};

/* A channel of a session's connection (keylockd-protocol(7), CHANNELS),
 * kept while the session is detached. */
struct session_chan {
	struct owner_head	 h;		/* first: the owner's udata */
	uint64_t		 wait_deadline_ms; /* 0: none */
	uint32_t		 state_owner;	/* live upgrade: its index */
};

struct session {
	struct owner_head	 h;		/* first: the owner's udata */
	struct session_chan	**chans;	/* by channel number */
	size_t			 nchans, chcap;
	TAILQ_ENTRY(session)	 entry;		/* ss->all, oldest first */
	struct session		*hnext;		/* bucket chain */
	struct sessions		*ss;
	struct conn		*conn;		/* ATTACHED: its connection */
	struct event		*timer;		/* DETACHED, DELAY */
	char			*name;		/* DETACHED, DELAY */
	uint64_t		 client;	/* the client id it keeps */
	uint64_t		 grace_ms;
	uint64_t		 since_ms;	/* its first connection's */
	int			 transport;	/* enum conn_transport */
	uint64_t		 detached_ms;	/* when it was detached */
	uint64_t		 expires_ms;	/* DETACHED: the grace's end */
	uint64_t		 wait_deadline_ms; /* DETACHED: 0 none */
	enum session_state	 state;
	unsigned char		 raw[SESSION_RAW];
	char			 peer[64];	/* the last connection's */
	char			 user[KL_NAME_MAX + 1];	/* "": none */
	uint32_t		 state_owner;	/* live upgrade: its index */
	bool			 resuming;	/* its RESUME waits for the
						 * backend (etcd) */
};

TAILQ_HEAD(session_list, session);

struct sessions {
	struct conns		*cs;		/* whose turn a timer ends */
	struct event_base	*base;
	const struct config	*cfg;
	struct stats		*st;
	struct backend		*be;
	struct session_list	 all;
	struct session		**buckets;
	size_t			 nbuckets;	/* a power of two */
	size_t			 n;
};

static void	session_timer_cb(evutil_socket_t, short, void *);

/* ---- the owner's udata ---- */

struct conn *
owner_conn(const struct lt_owner *o)
{
	const struct owner_head	*h = locktable_owner_udata(o);

	if (h == NULL || h->detached != NULL)
		return NULL;
	return (struct conn *)(uintptr_t)h;
}

/* Who an owner without udata is: the backend's answer (owner_about). */
static const struct backend	*owner_backend;

void
owner_set_backend(const struct backend *be)
{
	owner_backend = be;
}

/* What the backend says of an owner. */
struct owner_who {
	const char	*name;
	uint64_t	 fe;
	uint64_t	 client;
	uint32_t	 chan;
};

static struct owner_who
owner_about(const struct lt_owner *o)
{
	struct owner_who w = { NULL, 0, locktable_owner_id(o), 0 };

	if (owner_backend != NULL && owner_backend->ops->owner_about != NULL)
		owner_backend->ops->owner_about(owner_backend, o, &w.name,
		    &w.fe, &w.client, &w.chan);
	return w;
}

uint64_t
owner_client(const struct lt_owner *o)
{
	const struct owner_head	*h = locktable_owner_udata(o);

	if (h != NULL && h->detached == NULL)
		return conn_id((const struct conn *)(const void *)h);
	/* a detached session's channel: the session's id, as attached */
	if (h != NULL)
		return h->detached->client;
	return owner_about(o).client;
}

uint64_t
owner_frontend(const struct lt_owner *o)
{
	return owner_about(o).fe;
}

bool
owner_is_foreign(const struct lt_owner *o)
{
	return locktable_owner_udata(o) == NULL && owner_frontend(o) != 0;
}

const char *
owner_name(const struct lt_owner *o)
{
	const struct owner_head	*h = locktable_owner_udata(o);

	if (h == NULL)
		return owner_about(o).name;
	if (h->detached != NULL)
		return h->detached->name;
	return conn_name((const struct conn *)(const void *)h);
}

int64_t
owner_detached_ms(const struct lt_owner *o, uint64_t now_ms)
{
	const struct owner_head	*h = locktable_owner_udata(o);

	/* another front end's session: as its record says (backend etcd) */
	if (h == NULL && owner_backend != NULL &&
	    owner_backend->ops->owner_detached_ms != NULL)
		return owner_backend->ops->owner_detached_ms(owner_backend, o);
	if (h == NULL || h->detached == NULL)
		return -1;
	return now_ms > h->detached->detached_ms ?
	    (int64_t)(now_ms - h->detached->detached_ms) : 0;
}

uint32_t
owner_channel(const struct lt_owner *o)
{
	const struct owner_head	*h = locktable_owner_udata(o);

	return h != NULL ? h->chan : owner_about(o).chan;
}

bool
owner_in_lock_delay(const struct lt_owner *o)
{
	const struct owner_head	*h = locktable_owner_udata(o);

	return h != NULL && h->detached != NULL &&
	    h->detached->state == SESSION_DELAY;
}

/* ---- the table ---- */

struct sessions *
sessions_new(struct conns *cs, struct event_base *base,
    const struct config *cfg, struct stats *st, struct backend *be)
{
	struct sessions	*ss;

	if ((ss = kl_calloc(1, sizeof(*ss))) == NULL)
		return NULL;
	ss->cs = cs;
	ss->base = base;
	ss->cfg = cfg;
	ss->st = st;
	ss->be = be;
	TAILQ_INIT(&ss->all);
	return ss;
}

static uint64_t
session_locator(const unsigned char *raw)
{
	uint64_t	v;

	memcpy(&v, raw, sizeof(v));
	return v;
}

static size_t
session_bucket(const struct sessions *ss, const unsigned char *raw)
{
	return (size_t)(session_locator(raw) & (ss->nbuckets - 1));
}

/* One more session fits the buckets: they double past one per bucket. */
static bool
sessions_grow(struct sessions *ss)
{
	struct session	**nb, *s;
	size_t		  n, i;

	if (ss->n < ss->nbuckets)
		return true;
	n = ss->nbuckets == 0 ? SESSION_BUCKETS_MIN : ss->nbuckets * 2;
	if ((nb = kl_calloc(n, sizeof(*nb))) == NULL)
		return false;
	kl_free(ss->buckets);
	ss->buckets = nb;
	ss->nbuckets = n;
	TAILQ_FOREACH(s, &ss->all, entry) {
		i = session_bucket(ss, s->raw);
		s->hnext = nb[i];
		nb[i] = s;
	}
	return true;
}

static void
sessions_unlink(struct sessions *ss, struct session *s)
{
	struct session	**pp = &ss->buckets[session_bucket(ss, s->raw)];

	while (*pp != s)
		pp = &(*pp)->hnext;
	*pp = s->hnext;
	TAILQ_REMOVE(&ss->all, s, entry);
	ss->n--;
}

/* A kept channel's memory (STATS channel_bytes): its struct with
 * malloc's header and its slot. */
#define SESSION_CHAN_BYTES	(sizeof(struct session_chan) + 16 + \
				 sizeof(struct session_chan *))

/* s's kept channels leave STATS channels and channel_bytes: taken back
 * by a connection (which counts them again) or ended with s. */
static void
session_chans_uncount(struct session *s)
{
	s->ss->st->channels -= s->nchans;
	s->ss->st->channel_bytes -= s->nchans * SESSION_CHAN_BYTES;
}

/* Frees s, which owns nothing in the backend any more. */
static void
session_free(struct session *s)
{
	struct sessions	*ss = s->ss;

	sessions_unlink(ss, s);
	/* one in its lock-delay has ended: not counted (session_delay()) */
	if (!s->resuming && s->state != SESSION_DELAY)
		ss->st->sessions--;
	if (s->state == SESSION_DETACHED)
		ss->st->sessions_detached--;
	if (s->timer != NULL)
		event_free(s->timer);
	for (size_t i = 0; i < s->nchans; i++)
		kl_free(s->chans[i]);
	session_chans_uncount(s);
	kl_free(s->chans);
	kl_free(s->name);
	explicit_bzero(s->raw, sizeof(s->raw));
	kl_free(s);
}

/* Releases everything s's owner holds and frees s: a detached session's
 * end, as a closed connection's (keylockd-protocol(7), SESSIONS: Grace). */
static void
session_release(struct session *s)
{
	struct sessions	*ss = s->ss;
	struct lt_owner	*o = s->h.owner;
	uint64_t	 now = kl_now_ms();

	s->h.owner = NULL;
	if (o != NULL && ss->be->ops->session_end != NULL)
		ss->be->ops->session_end(ss->be, o);
	if (o != NULL)
		ss->be->ops->owner_free(ss->be, o, now);
	for (size_t i = 0; i < s->nchans; i++) {
		o = s->chans[i]->h.owner;
		s->chans[i]->h.owner = NULL;
		ss->be->ops->owner_free(ss->be, o, now);
	}
	session_free(s);
}

void
sessions_free(struct sessions *ss)
{
	struct session	*s;

	if (ss == NULL)
		return;
	while ((s = TAILQ_FIRST(&ss->all)) != NULL) {
		if (s->state == SESSION_ATTACHED) {
			conn_forget_session(s->conn);
			session_free(s);
		} else
			session_release(s);
	}
	kl_free(ss->buckets);
	kl_free(ss);
}

/* base64url without padding: A-Z a-z 0-9 - _ (keylockd-protocol(7)). */
static void
session_encode(const unsigned char *raw, char *out)
{
	static const char	 abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t			 i, o = 0;

	for (i = 0; i + 3 <= SESSION_RAW; i += 3) {
		uint32_t v = (uint32_t)raw[i] << 16 |
		    (uint32_t)raw[i + 1] << 8 | raw[i + 2];

		out[o++] = abc[v >> 18 & 63];
		out[o++] = abc[v >> 12 & 63];
		out[o++] = abc[v >> 6 & 63];
		out[o++] = abc[v & 63];
	}
	out[o] = '\0';
}

/* The raw bytes of an ID, or false if it is not one this server makes. */
static bool
session_decode(const char *id, size_t len, unsigned char *raw)
{
	unsigned	bad = 0;
	size_t		i, o = 0;

	if (len != SESSION_ID_LEN)
		return false;
	for (i = 0; i < len; i += 4) {
		uint32_t v = 0;

		for (size_t j = 0; j < 4; j++) {
			unsigned char	c = (unsigned char)id[i + j];
			unsigned	d;

			if (c >= 'A' && c <= 'Z')
				d = c - 'A';
			else if (c >= 'a' && c <= 'z')
				d = c - 'a' + 26;
			else if (c >= '0' && c <= '9')
				d = c - '0' + 52;
			else if (c == '-')
				d = 62;
			else if (c == '_')
				d = 63;
			else {
				d = 0;
				bad = 1;
			}
			v = v << 6 | d;
		}
		raw[o++] = (unsigned char)(v >> 16);
		raw[o++] = (unsigned char)(v >> 8);
		raw[o++] = (unsigned char)v;
	}
	return bad == 0;
}

struct session *
session_open(struct sessions *ss, struct conn *c, uint64_t grace_ms,
    char *id, bool *nomem)
{
	struct session	*s;
	size_t		 i, off = 0;

	*nomem = true;
	if (!sessions_grow(ss) || (s = kl_calloc(1, sizeof(*s))) == NULL)
		return NULL;
	if ((s->timer = evtimer_new(ss->base, session_timer_cb, s)) ==
	    NULL) {
		kl_free(s);
		return NULL;
	}
	while (off < sizeof(s->raw)) {
		ssize_t	n = getrandom(s->raw + off, sizeof(s->raw) - off, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			log_warn("getrandom");
			event_free(s->timer);
			kl_free(s);
			*nomem = false;
			return NULL;
		}
		off += (size_t)n;
	}
	/* 192 random bits never repeat in practice; this keeps it a rule. */
	for (struct session *t = ss->buckets[session_bucket(ss, s->raw)];
	    t != NULL; t = t->hnext)
		if (memcmp(t->raw, s->raw, sizeof(s->raw)) == 0) {
			event_free(s->timer);
			kl_free(s);
			*nomem = false;
			return NULL;
		}
	s->ss = ss;
	s->h.owner = NULL;	/* the connection holds it while attached */
	s->h.detached = NULL;
	s->conn = c;
	s->client = conn_id(c);
	s->grace_ms = grace_ms;
	s->since_ms = conn_since_ms(c);
	s->transport = (int)conn_transport(c);
	s->state = SESSION_ATTACHED;
	snprintf(s->peer, sizeof(s->peer), "%s", conn_peer(c));
	i = session_bucket(ss, s->raw);
	s->hnext = ss->buckets[i];
	ss->buckets[i] = s;
	TAILQ_INSERT_TAIL(&ss->all, s, entry);
	ss->n++;
	ss->st->sessions++;
	session_encode(s->raw, id);
	log_info("client %" PRIu64 " (%s) from %s: session opened, grace %"
	    PRIu64 " ms", s->client, conn_name(c) != NULL ? conn_name(c) :
	    "-", s->peer, grace_ms);
	return s;
}

struct session *
sessions_find(struct sessions *ss, const char *id, size_t len)
{
	unsigned char	 raw[SESSION_RAW];
	struct session	*s, *found = NULL;

	if (ss->nbuckets == 0 || !session_decode(id, len, raw))
		return NULL;
	/* Every session of the bucket is compared whole, whatever matched:
	 * the bucket depends only on the first 64 bits. */
	for (s = ss->buckets[session_bucket(ss, raw)]; s != NULL;
	    s = s->hnext) {
		unsigned char	diff = 0;

		for (size_t i = 0; i < SESSION_RAW; i++)
			diff |= (unsigned char)(s->raw[i] ^ raw[i]);
		if (diff == 0 && s->state != SESSION_DELAY)
			found = s;
	}
	explicit_bzero(raw, sizeof(raw));
	return found;
}

struct session *
sessions_find_client(struct sessions *ss, uint64_t id)
{
	struct session	*s;

	TAILQ_FOREACH(s, &ss->all, entry)
		if (s->client == id && !s->resuming)
			return s;
	return NULL;
}

/* ---- channels ---- */

bool
session_keep_channel(struct session *s, uint32_t n, struct lt_owner *owner,
    uint64_t wait_deadline_ms)
{
	struct session_chan	*sc, **p;
	size_t			 cap;

	if (s->nchans == s->chcap) {
		cap = s->chcap == 0 ? 4 : s->chcap * 2;
		if ((p = kl_realloc(s->chans, cap * sizeof(*p))) == NULL)
			return false;
		s->chans = p;
		s->chcap = cap;
	}
	if ((sc = kl_calloc(1, sizeof(*sc))) == NULL)
		return false;
	sc->h.owner = owner;
	sc->h.detached = s;
	sc->h.chan = n;
	sc->wait_deadline_ms = wait_deadline_ms;
	locktable_owner_set_udata(owner, &sc->h);
	s->chans[s->nchans++] = sc;
	/* still in use: STATS channels and channel_bytes count it */
	s->ss->st->channels++;
	s->ss->st->channel_bytes += SESSION_CHAN_BYTES;
	return true;
}

static int
session_chan_cmp(const void *a, const void *b)
{
	uint32_t	x = (*(struct session_chan *const *)a)->h.chan;
	uint32_t	y = (*(struct session_chan *const *)b)->h.chan;

	return x < y ? -1 : x > y;
}

void
session_take_channels(struct session *s, bool (*fn)(void *, uint32_t,
    struct lt_owner *, uint64_t), void *arg)
{
	struct sessions	*ss = s->ss;
	size_t		 i;
	bool		 go = true;

	if (s->nchans > 1)
		qsort(s->chans, s->nchans, sizeof(*s->chans),
		    session_chan_cmp);
	for (i = 0; i < s->nchans; i++) {
		struct session_chan	*sc = s->chans[i];

		if (go)
			go = fn(arg, sc->h.chan, sc->h.owner,
			    sc->wait_deadline_ms);
		else	/* the connection is gone: as it would have */
			ss->be->ops->owner_free(ss->be, sc->h.owner,
			    kl_now_ms());
		kl_free(sc);
	}
	session_chans_uncount(s);
	s->nchans = 0;
}

size_t
session_nholds(const struct session *s)
{
	size_t	n = locktable_owner_nholds(s->h.owner);

	for (size_t i = 0; i < s->nchans; i++)
		n += locktable_owner_nholds(s->chans[i]->h.owner);
	return n;
}

/* ---- detached ---- */

static void
session_arm(struct session *s, uint64_t now_ms)
{
	uint64_t	at = s->expires_ms, left;
	struct timeval	tv;

	if (s->wait_deadline_ms != 0 && s->wait_deadline_ms < at)
		at = s->wait_deadline_ms;
	for (size_t i = 0; i < s->nchans; i++)
		if (s->chans[i]->wait_deadline_ms != 0 &&
		    s->chans[i]->wait_deadline_ms < at)
			at = s->chans[i]->wait_deadline_ms;
	left = at > now_ms ? at - now_ms : 0;
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	evtimer_add(s->timer, &tv);
}

void
session_detach(struct session *s, struct lt_owner *owner, const char *name,
    const char *peer, uint64_t wait_deadline_ms, uint64_t now_ms)
{
	struct sessions	*ss = s->ss;

	s->state = SESSION_DETACHED;
	s->conn = NULL;
	s->h.owner = owner;
	s->h.detached = s;
	locktable_owner_set_udata(owner, &s->h);
	kl_free(s->name);
	s->name = name != NULL ? kl_strndup(name, strlen(name)) : NULL;
	snprintf(s->peer, sizeof(s->peer), "%s", peer);
	s->detached_ms = now_ms;
	s->expires_ms = now_ms + s->grace_ms;
	s->wait_deadline_ms = wait_deadline_ms;
	ss->st->sessions_detached++;
	session_arm(s, now_ms);
	/* backend etcd: other front ends see it detached, and its NAME */
	if (ss->be->ops->session_note != NULL)
		ss->be->ops->session_note(ss->be, owner, s->name, true);
	log_info("client %" PRIu64 " (%s) from %s: session detached: %zu "
	    "keys held, %s, %zu other channels, released in %" PRIu64 " ms "
	    "unless resumed", s->client, s->name != NULL ? s->name : "-",
	    s->peer, session_nholds(s), locktable_owner_is_waiting(owner) ?
	    "waiting" : "not waiting", s->nchans, s->grace_ms);
}

struct lt_owner *
session_attach(struct session *s, struct conn *c, const char *peer,
    uint64_t *wait_deadline_ms)
{
	struct sessions	*ss = s->ss;
	struct lt_owner	*o = s->h.owner;

	*wait_deadline_ms = 0;
	if (s->state == SESSION_DETACHED) {
		evtimer_del(s->timer);
		*wait_deadline_ms = s->wait_deadline_ms;
		ss->st->sessions_detached--;
		log_info("client %" PRIu64 " (%s): session resumed from %s "
		    "after %" PRIu64 " ms detached", s->client,
		    s->name != NULL ? s->name : "-", peer,
		    kl_now_ms() - s->detached_ms);
	} else {
		log_info("client %" PRIu64 " (%s): session moved from %s to "
		    "%s", s->client, s->name != NULL ? s->name : "-", s->peer,
		    peer);
	}
	ss->st->sessions_resumed++;
	s->state = SESSION_ATTACHED;
	s->conn = c;
	s->h.owner = NULL;
	s->h.detached = NULL;
	s->wait_deadline_ms = 0;
	s->transport = (int)conn_transport(c);
	snprintf(s->peer, sizeof(s->peer), "%s", peer);
	return o;
}

void
session_end(struct session *s, const char *why)
{
	struct backend	*be = s->ss->be;

	/* a RESUME on its way (backend etcd) ends, not the session: that
	 * is left as its last connection left it, for its grace */
	log_info("client %" PRIu64 " (%s): %s: %s", s->client,
	    s->name != NULL ? s->name : s->conn != NULL &&
	    conn_name(s->conn) != NULL ? conn_name(s->conn) : "-",
	    s->resuming ? "RESUME given up" : "session ended", why);
	if (s->state == SESSION_ATTACHED) {
		/* backend etcd: its lease goes, its holds with it */
		if (be->ops->session_end != NULL)
			be->ops->session_end(be, conn_owner(s->conn));
		conn_forget_session(s->conn);
		session_free(s);
	} else
		session_release(s);
}

/* ---- sessions across front ends (backend etcd) ---- */

bool
session_hash(const struct session *s, char *out, char *err, size_t errlen)
{
	static const char	hex[] = "0123456789abcdef";
	unsigned char		md[SHA256_DIGEST_LENGTH];

	if (!ssl_rt_load("sessions through backend etcd", err, errlen))
		return false;
	ssl_rt.SHA256(s->raw, sizeof(s->raw), md);
	for (size_t i = 0; i < sizeof(md); i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[2 * sizeof(md)] = '\0';
	return true;
}

void
session_id(const struct session *s, char *out)
{
	session_encode(s->raw, out);
}

struct session *
session_resuming(struct sessions *ss, struct conn *c, const char *id,
    size_t len, bool *nomem)
{
	struct session	*s;
	size_t		 i;

	*nomem = false;
	if ((s = kl_calloc(1, sizeof(*s))) == NULL) {
		*nomem = true;
		return NULL;
	}
	if (!session_decode(id, len, s->raw)) {
		kl_free(s);
		return NULL;
	}
	if (!sessions_grow(ss) || (s->timer = evtimer_new(ss->base,
	    session_timer_cb, s)) == NULL) {
		explicit_bzero(s->raw, sizeof(s->raw));
		kl_free(s);
		*nomem = true;
		return NULL;
	}
	s->ss = ss;
	s->conn = c;
	s->client = conn_id(c);	/* its log lines' until it is resumed */
	s->resuming = true;
	s->state = SESSION_ATTACHED;
	s->since_ms = conn_since_ms(c);
	s->transport = (int)conn_transport(c);
	snprintf(s->peer, sizeof(s->peer), "%s", conn_peer(c));
	i = session_bucket(ss, s->raw);
	s->hnext = ss->buckets[i];
	ss->buckets[i] = s;
	TAILQ_INSERT_TAIL(&ss->all, s, entry);
	ss->n++;
	return s;
}

bool
session_is_resuming(const struct session *s)
{
	return s->resuming;
}

void
session_resumed(struct session *s, uint64_t client, uint64_t grace_ms)
{
	s->resuming = false;
	s->client = client;
	s->grace_ms = grace_ms;
	s->ss->st->sessions++;
	s->ss->st->sessions_resumed++;
	log_info("client %" PRIu64 ": session resumed from %s through this "
	    "front end", client, s->peer);
}

void
session_discard(struct session *s)
{
	if (s->state == SESSION_ATTACHED && s->conn != NULL)
		conn_forget_session(s->conn);
	session_free(s);
}

void
session_moved(struct session *s)
{
	log_info("client %" PRIu64 " (%s): session resumed through another "
	    "front end", s->client, session_name(s) != NULL ?
	    session_name(s) : "-");
	if (s->state == SESSION_ATTACHED && s->conn != NULL)
		conn_forget_session(s->conn);
	s->h.owner = NULL;	/* the backend's: nothing is released */
	session_free(s);
}

/*
 * s has ended and its keys stay for its lock-delay: they admit nobody
 * else meanwhile, shared or semaphore requests included (where the
 * backend can: backend etcd cannot, keylockd-protocol(7) says so). It is
 * no session any more: STATS and CLIENTS do not count it, RESUME is
 * GONE; KILL of its client id ends the delay at once.
 */
static void
session_seal(struct session *s)
{
	struct backend *be = s->ss->be;

	if (be->ops->seal == NULL)
		return;
	be->ops->seal(be, s->h.owner);
	for (size_t i = 0; i < s->nchans; i++)
		be->ops->seal(be, s->chans[i]->h.owner);
}

/*
 * The grace ran out: release as a closed connection does, or, with
 * session-lock-delay, withdraw the wait now and hold the keys for the
 * delay first (keylockd-protocol(7), SESSIONS: Grace).
 */
static void
session_expire(struct session *s, uint64_t now_ms)
{
	struct sessions		*ss = s->ss;
	struct be_result	 r;
	uint64_t		 delay = (uint64_t)ss->cfg->session_lock_delay;

	size_t			 held = session_nholds(s);

	ss->st->sessions_expired++;
	log_info("client %" PRIu64 " (%s) from %s: session expired after %"
	    PRIu64 " ms detached: %zu keys released%s", s->client,
	    s->name != NULL ? s->name : "-", s->peer, now_ms - s->detached_ms,
	    held, delay > 0 && held > 0 ? " after lock-delay" : "");
	if (delay == 0 || held == 0) {
		session_release(s);
		return;
	}
	if (ss->be->ops->session_close != NULL)
		ss->be->ops->session_close(ss->be, s->h.owner);
	ss->be->ops->withdraw(ss->be, s->h.owner, LT_WHY_TIMEOUT, now_ms, &r);
	for (size_t i = 0; i < s->nchans; i++) {
		ss->be->ops->withdraw(ss->be, s->chans[i]->h.owner,
		    LT_WHY_TIMEOUT, now_ms, &r);
		s->chans[i]->wait_deadline_ms = 0;
	}
	ss->st->sessions--;
	ss->st->sessions_detached--;
	s->state = SESSION_DELAY;
	s->expires_ms = now_ms + delay;
	s->wait_deadline_ms = 0;
	session_seal(s);
	session_arm(s, now_ms);
}

static void
session_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session		*s = arg;
	struct sessions		*ss = s->ss;
	struct be_result	 r;
	uint64_t		 now = kl_now_ms();

	if (s->state == SESSION_DELAY) {
		session_release(s);
	} else if (s->state == SESSION_DETACHED) {
		if (now >= s->expires_ms) {
			session_expire(s, now);
		} else {
			/* A waiting LOCK's deadline: it ends as it would
			 * have on its connection, and RESUME says so. */
			if (s->wait_deadline_ms != 0 &&
			    s->wait_deadline_ms <= now) {
				if (locktable_owner_is_waiting(s->h.owner))
					ss->be->ops->withdraw(ss->be,
					    s->h.owner, LT_WHY_TIMEOUT, now,
					    &r);
				s->wait_deadline_ms = 0;
			}
			for (size_t i = 0; i < s->nchans; i++) {
				struct session_chan	*sc = s->chans[i];

				if (sc->wait_deadline_ms == 0 ||
				    sc->wait_deadline_ms > now)
					continue;
				if (locktable_owner_is_waiting(sc->h.owner))
					ss->be->ops->withdraw(ss->be,
					    sc->h.owner, LT_WHY_TIMEOUT, now,
					    &r);
				sc->wait_deadline_ms = 0;
			}
			session_arm(s, now);
		}
	}
	conns_end_turn(ss->cs);
}

/* ---- accessors ---- */

struct conn *
session_conn(const struct session *s)
{
	return s->state == SESSION_ATTACHED ? s->conn : NULL;
}

uint64_t
session_client(const struct session *s)
{
	return s->client;
}

size_t
session_nchannels(const struct session *s)
{
	return s->nchans;
}

const struct lt_owner *
session_channel_owner(const struct session *s, size_t i)
{
	return s->chans[i]->h.owner;
}

uint64_t
session_grace(const struct session *s)
{
	return s->grace_ms;
}

uint64_t
session_since_ms(const struct session *s)
{
	return s->since_ms;
}

int
session_transport(const struct session *s)
{
	return s->transport;
}

void
session_set_user(struct session *s, const char *user)
{
	snprintf(s->user, sizeof(s->user), "%s", user != NULL ? user : "");
}

const char *
session_user(const struct session *s)
{
	return s->user[0] != '\0' ? s->user : NULL;
}

const char *
session_name(const struct session *s)
{
	if (s->state == SESSION_ATTACHED && s->conn != NULL)
		return conn_name(s->conn);
	return s->name;
}

void
sessions_walk_detached(struct sessions *ss,
    bool (*fn)(void *, const struct session *, struct lt_owner *, uint64_t,
    const char *), void *arg, uint64_t now_ms)
{
	struct session	*s;

	TAILQ_FOREACH(s, &ss->all, entry) {
		if (s->state != SESSION_DETACHED)
			continue;	/* attached, or ended (lock-delay) */
		if (!fn(arg, s, s->h.owner, now_ms - s->detached_ms, s->peer))
			return;
	}
}

/* ---- live upgrade (keylockd(8), LIVE UPGRADE; ks_sessions.h) ---- */

_Static_assert(sizeof(((struct session *)0)->peer) == KS_SESSION_PEER_MAX + 1,
    "a peer fits the state");

void
session_state_note(struct lt_owner *o, uint32_t index)
{
	struct owner_head	*h = locktable_owner_udata(o);

	if (h == NULL || h->detached == NULL)
		return;
	if (h == &h->detached->h)
		h->detached->state_owner = index;
	else	/* a kept channel's: its head is its first member */
		((struct session_chan *)(void *)h)->state_owner = index;
}

void
sessions_state_write(struct sessions *ss, struct ks_writer *w)
{
	struct ks_session	 ks;
	struct ks_session_chan	 kc;
	struct session		*s;

	ks_put_u32(w, (uint32_t)ss->n);
	TAILQ_FOREACH(s, &ss->all, entry) {
		memset(&ks, 0, sizeof(ks));
		memcpy(ks.raw, s->raw, sizeof(ks.raw));
		ks.client = s->client;
		ks.state = (uint8_t)s->state;
		ks.transport = (uint8_t)s->transport;
		ks.grace_ms = s->grace_ms;
		ks.since_ms = s->since_ms;
		ks.owner = KS_NO_OWNER;
		ks.peer = s->peer;
		ks.name = s->state == SESSION_ATTACHED ? NULL : s->name;
		ks.user = session_user(s);
		if (s->state != SESSION_ATTACHED) {
			ks.detached_ms = s->detached_ms;
			ks.expires_ms = s->expires_ms;
			ks.wait_deadline_ms = s->wait_deadline_ms;
			ks.owner = s->state_owner;
			ks.nchans = (uint32_t)s->nchans;
		}
		ks_session_put(w, &ks);
		if (ks.nchans > 1)
			qsort(s->chans, s->nchans, sizeof(*s->chans),
			    session_chan_cmp);
		for (uint32_t i = 0; i < ks.nchans; i++) {
			kc.n = s->chans[i]->h.chan;
			kc.owner = s->chans[i]->state_owner;
			kc.wait_deadline_ms = s->chans[i]->wait_deadline_ms;
			ks_session_put_chan(w, &kc);
		}
	}
	explicit_bzero(&ks, sizeof(ks));
}

/* The reader's state: the session being rebuilt, and the pause. */
struct sessions_in {
	struct sessions	*ss;
	struct session	*last;
	uint64_t	 shift_ms;
};

static bool
sessions_state_session(void *arg, const struct ks_session *ks,
    struct lt_owner *owner)
{
	struct sessions_in	*in = arg;
	struct sessions		*ss = in->ss;
	struct session		*s;
	size_t			 i;

	if (!sessions_grow(ss) || (s = kl_calloc(1, sizeof(*s))) == NULL)
		return false;
	if ((s->timer = evtimer_new(ss->base, session_timer_cb, s)) ==
	    NULL || (ks->name != NULL &&
	    (s->name = kl_strndup(ks->name, strlen(ks->name))) == NULL)) {
		if (s->timer != NULL)
			event_free(s->timer);
		kl_free(s);
		return false;
	}
	memcpy(s->raw, ks->raw, sizeof(s->raw));
	s->ss = ss;
	s->client = ks->client;
	s->grace_ms = ks->grace_ms;
	s->since_ms = ks->since_ms;
	s->transport = ks->transport;
	s->state = (enum session_state)ks->state;
	snprintf(s->peer, sizeof(s->peer), "%s", ks->peer);
	session_set_user(s, ks->user);
	if (s->state != SESSION_ATTACHED) {
		/* The grace and the lock-delay do not run down for the
		 * pause; a waiting LOCK keeps its deadline, as on a
		 * connection. */
		s->detached_ms = ks->detached_ms;
		s->expires_ms = ks->expires_ms + in->shift_ms;
		s->wait_deadline_ms = ks->wait_deadline_ms;
		s->h.owner = owner;
		s->h.detached = s;
		locktable_owner_set_udata(owner, &s->h);
		ss->st->sessions_detached += s->state == SESSION_DETACHED;
	}
	i = session_bucket(ss, s->raw);
	s->hnext = ss->buckets[i];
	ss->buckets[i] = s;
	TAILQ_INSERT_TAIL(&ss->all, s, entry);
	ss->n++;
	ss->st->sessions += s->state != SESSION_DELAY;
	in->last = s;
	return true;
}

static bool
sessions_state_chan(void *arg, const struct ks_session *ks,
    const struct ks_session_chan *kc, struct lt_owner *owner)
{
	struct sessions_in	*in = arg;

	(void)ks;
	return session_keep_channel(in->last, kc->n, owner,
	    kc->wait_deadline_ms);
}

bool
sessions_state_read(struct sessions *ss, struct ks_reader *r,
    struct lt_owner **owners, size_t nowners, uint64_t freeze_ms,
    uint64_t now_ms)
{
	struct ks_sessions_limits	 lim;
	struct sessions_in		 in = { ss, NULL, 0 };
	struct session			*s, *t;

	lim.freeze_ms = freeze_ms;
	lim.max_channels = (uint64_t)ss->cfg->max_channels;
	lim.transport_max = CONN_TLS;
	in.shift_ms = now_ms > freeze_ms ? now_ms - freeze_ms : 0;
	if (!ks_sessions_read(r, &lim, owners, nowners,
	    sessions_state_session, sessions_state_chan, &in))
		return false;
	/* An ID is one session's (sessions_find() would find either). */
	TAILQ_FOREACH(s, &ss->all, entry)
		for (t = ss->buckets[session_bucket(ss, s->raw)]; t != NULL;
		    t = t->hnext)
			if (t != s && memcmp(t->raw, s->raw,
			    sizeof(s->raw)) == 0)
				return ks_fail(r, "two sessions of one ID");
	TAILQ_FOREACH(s, &ss->all, entry) {
		if (s->state == SESSION_DELAY)
			session_seal(s);	/* its channels are kept now */
		if (s->state != SESSION_ATTACHED)
			session_arm(s, now_ms);
	}
	return true;
}

static int
session_client_cmp(const void *a, const void *b)
{
	uint64_t	x = (*(struct session *const *)a)->client;
	uint64_t	y = (*(struct session *const *)b)->client;

	return x < y ? -1 : x > y;
}

/* The sessions by client id, for the connections to find theirs. */
struct sessions_link {
	struct session	**by_client;
	size_t		  n, linked;
	struct ks_reader *r;
};

static bool
sessions_link_conn(void *arg, struct conn *c)
{
	struct sessions_link	*sl = arg;
	struct session		 key, *kp = &key, **found;

	key.client = conn_id(c);
	if ((found = bsearch(&kp, sl->by_client, sl->n, sizeof(*found),
	    session_client_cmp)) == NULL)
		return true;
	if ((*found)->state != SESSION_ATTACHED || (*found)->conn != NULL)
		return ks_fail(sl->r, "client %" PRIu64 " is a connection and "
		    "a session that is not its", conn_id(c));
	(*found)->conn = c;
	conn_set_session(c, *found);
	sl->linked++;
	return true;
}

bool
sessions_state_link(struct sessions *ss, struct conns *cs,
    struct ks_reader *r)
{
	struct sessions_link	 sl = { NULL, 0, 0, r };
	struct session		*s;
	size_t			 attached = 0;

	if (ss->n == 0)
		return true;
	if ((sl.by_client = kl_calloc(ss->n, sizeof(*sl.by_client))) == NULL)
		return ks_fail(r, "out of memory");
	TAILQ_FOREACH(s, &ss->all, entry) {
		sl.by_client[sl.n++] = s;
		if (s->state == SESSION_ATTACHED)
			attached++;
	}
	qsort(sl.by_client, sl.n, sizeof(*sl.by_client), session_client_cmp);
	for (size_t i = 1; i < sl.n; i++)
		if (sl.by_client[i - 1]->client == sl.by_client[i]->client)
			ks_fail(r, "two sessions of client %" PRIu64,
			    sl.by_client[i]->client);
	if (!r->bad)
		conns_walk(cs, sessions_link_conn, &sl);
	kl_free(sl.by_client);
	if (!r->bad && sl.linked != attached)
		ks_fail(r, "%zu attached sessions, %zu of them with their "
		    "connection", attached, sl.linked);
	if (!r->bad)
		log_info("upgrade: %zu sessions taken over, %zu of them "
		    "detached", ss->n, ss->n - attached);
	return !r->bad;
}
