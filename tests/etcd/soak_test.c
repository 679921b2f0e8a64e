/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * backend etcd under faults, judged by a history checker (issue 11).
 *
 * The run. Two front ends on a private 3-member cluster serve 12 client
 * threads. Each client connects to either front end, names the connection
 * (NAME c<client>.<n>, so INFO says whose entries it shows), and loops:
 * LOCK one of three exclusive keys (x0 is the busy one) or the semaphore
 * sem (limit=2), always one key per request, timeout=2000; it holds for
 * 0-20 ms (1 in 12: 200-800 ms) and UNLOCKs (expecting OK 1). Now and then
 * it drops the connection while holding (1 in 20), or while its LOCK waits
 * (1 in 12: it gives up after 0-40 ms without a reply and closes, or
 * sends CANCEL, and expects OK token then OK 0, or ERR CANCELLED then
 * OK 1).
 * Meanwhile the main thread injects faults one after another, 2-4 s apart:
 * SIGKILL of a front end (and a new one in its place), SIGSTOP of a front
 * end for its lease TTL plus 1.5 s, then SIGCONT, and SIGKILL of an etcd
 * member (m1..m3, so the leader too), restarted 2 s later. Between and
 * during faults it samples INFO of every key on every front end it may
 * ask.
 *
 * The record. Every LOCK is kept with its send time, its reply's arrival
 * (or the drop) and its outcome; a grant's hold runs from the arrival of
 * its OK to the sending of its UNLOCK (or the close, or the moment the
 * client, watching its connection while it holds, sees the front end drop
 * it: the protocol's "lock lost"). That client interval lies inside the
 * server's own hold [grant applied, delete committed], since the reply is
 * sent after the grant and the delete is made after the UNLOCK is read.
 * Exception: a front end that is SIGKILLed or SIGSTOPped cannot keep its
 * holds (etcd ends them at its lease); its clients learn that only when
 * they see the connection drop, which is the window fencing tokens exist
 * for. So a hold ends at the latest when its front end was cut (a reply
 * read up to 1 s after the cut left the server before it and counts as a
 * hold of no length). And a drop the client sees (a front end that lost
 * its lease closes its holders, then lets etcd release them) is seen
 * after the close by however late the client's thread runs, which can be
 * after the release and another client's grant: such a hold ends
 * SK_DROP_SLACK_MS before it was seen (never before its grant), well
 * under the lease's safety margin (1 s): a front end that vouched for a
 * hold longer after etcd released it is still caught.
 *

 *
 * What is checked, and why it is sound:
 *
 * 1. Exclusion: on each exclusive key no two holds overlap; on the
 *    semaphore never more than two at once (a sweep in grant order).
 * 2. Tokens rise with time per key: on an exclusive key, a hold that
 *    ended before another was granted has a smaller token (exclusion
 *    puts its server-side release, hence its grant's revision, before
 *    the other's grant).
 * 3. Tokens rise with time across the cluster: a LOCK sent after another
 *    LOCK's OK token arrived, on any key and any front end, gets a larger
 *    token if granted. Its entry is committed after that grant's revision
 *    (etcd's revision is one counter for the cluster) and it is granted
 *    at or after its entry's revision; a token is revision << 16 | n.
 * 4. FIFO per key: the grant order among waiters whose LOCKs were
 *    committed in a known order. INFO reads the front end's replica, which
 *    lists a key's waiters in the order their entries were committed to
 *    etcd (the one order of the cluster), and lists an entry only once it
 *    is committed. So when a sample shows waiter A ahead of waiter B, A's
 *    LOCK was committed before B's; single-key requests of one mode (all
 *    exclusive on x0..x2, all limit=2 on sem) are then granted in that
 *    order, and if both were granted, A's token is smaller (a grant's
 *    token rises with its revision and, within one, with the order of
 *    grants). Waiters are matched to LOCKs by their connection's NAME,
 *    and only for connections to the front end sampled (INFO names only
 *    its own live connections; and its replica had them waiting when it
 *    answered, so their replies came later: the LOCK is the one of that
 *    connection whose interval meets the sample's, when there is exactly
 *    one). A waiter that left the queue (timeout, drop, its front end
 *    cut) is not judged: only pairs where both LOCKs were granted are. B
 *    granted while A still waits, with A granted later, is caught; B
 *    granted while A waits and A then timing out is not.
 * 5. No grant reaches a connection that has already closed, nor stays
 *    queued for one: our clients hold for at most 800 ms and wait for at
 *    most their timeout=2000, and a client that disconnects from a live
 *    front end is released at once (one of a dead or stopped front end
 *    within its lease TTL plus the reaper's lag). So a holder in any INFO
 *    sample held longer than 800 ms + SK_ORPHAN_MS, or a waiter waiting
 *    longer than 2000 ms + SK_ORPHAN_MS, is kept for nobody: a grant or a
 *    wait of a closed connection. A front end is not sampled from its
 *    SIGSTOP until 5 s after its SIGCONT (its replica is stale until it
 *    rebuilds). At the end, with every client gone, every key on every
 *    front end must be free within SK_ORPHAN_MS.
 * 6. Every LOCK is answered within 8 s (timeout=2000) unless a fault
 *    cut its front end or an etcd member was down; an UNLOCK of a hold
 *    that was not cut is answered OK 1 (no grant is lost); an UNLOCK sent
 *    (100 ms or more) into its front end's SIGSTOP sees the connection
 *    drop, after ERR BACKEND at most: etcd ended the
 *    lease meanwhile and may have given the key away, so the front end
 *    must not answer for the lock (OK, NOTHELD), only drop it (lost).
 *    And the run made progress: grants on every key, FIFO pairs.
 *
 * SOAK_SECONDS (default 120) sets the length of the faulty part; the
 * program takes about 30 s more (the cluster, the final checks). Every
 * process it starts goes with it however it ends: front ends are killed
 * at exit and on their test process's death (kltest), a stopped one is
 * continued by a helper process that outlives the test, and the etcd
 * members are brought down by cluster.sh's watchdog.
 */
#include <sys/socket.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "check_main.h"
#include "etest.h"
#include "kltest_impl.h"

#define SK_FRONTENDS	2
#define SK_CLIENTS	12
#define SK_KEYS		4		/* x0 x1 x2 exclusive, then sem */
#define SK_SEM		3		/* index of the semaphore */
#define SK_SEM_LIMIT	2
#define SK_TTL		"3"
#define SK_TTL_MS	3000
#define SK_TIMEOUT	"900"
#define SK_HOLD_MS	20		/* a client's hold, mostly */
#define SK_LONG_MS	800		/* and at most */
#define SK_WAIT_MS	2000		/* LOCK timeout= */
#define SK_STOP_RACE_US	100000		/* read before the stop took */
#define SK_READ_LAG_US	1000000		/* read that late: sent before */
#define SK_ORPHAN_MS	6000		/* TTL, reaper, a loaded CPU */
#define SK_QUIET_MS	5000		/* no samples after a SIGCONT */
#define SK_CUTS_MAX	4096
#define SK_SAMPLE_MS	100
#define SK_NAMES_MAX	16		/* per sampled list */

static const char *const sk_keys[SK_KEYS] = { "x0", "x1", "x2", "sem" };

enum sk_outcome {
	SK_GRANTED = 1,
	SK_REFUSED,		/* ERR ...: not granted */
	SK_LOST			/* no reply: dropped while waiting */
};

enum sk_unlock {
	SK_UNLOCK_OK = 1,	/* OK 1 */
	SK_UNLOCK_NONE,		/* not sent: dropped while holding */
	SK_UNLOCK_NOREPLY,	/* the connection went */
	SK_UNLOCK_OTHER,	/* anything else, e.g. OK 0 */
	SK_UNLOCK_DROPPED	/* not sent: the front end dropped it */
};

/* How late a client's thread may see its front end's drop (1.3 ms median,
 * 51 ms at most in 200 drops measured at load 10; more under ASan at 20) */
#define SK_DROP_SLACK_MS	250

/* One LOCK request and, if granted, its hold. Times in µs. */
struct sk_op {
	struct et_hold	h;		/* first: the checker's view. Its
					 * reply_us: the reply read, or given
					 * up; end_us: UNLOCK sent or close,
					 * capped */
	uint32_t	conn;		/* the connection's number */
	uint32_t	epoch;		/* of the slot's front end */
	uint8_t		key, outcome, unlock, fe;
	bool		impatient;	/* gave up on purpose */
	char		unlock_reply[24];
};

struct sk_client {
	pthread_t	 th;
	int		 id;
	uint64_t	 rng;
	struct sk_op	*ops;
	size_t		 nops, capops;
	size_t		 nconns;
	uint64_t	 cancels, anomalies;
	char		 anomaly[160];	/* the first */
	uint64_t	 refusals, backend_errs, drops_holding, drops_waiting,
			 lost;
	bool		 oom;
};

/* A front-end slot; a SIGKILLed front end is replaced (a new epoch). */
struct sk_fe {
	struct kt_daemon *d;
	int		 port;		/* 0 while there is none */
	unsigned	 epoch;
	uint64_t	 quiet_until_us; /* not sampled before (stopped: max) */
	/* when its front end of an epoch stopped or died */
	uint64_t	 cut_us[SK_CUTS_MAX];
	unsigned	 cut_epoch[SK_CUTS_MAX];
	bool		 cut_stop[SK_CUTS_MAX];	/* SIGSTOP, not SIGKILL */
	uint64_t	 stopped_us[SK_CUTS_MAX];	/* SIGSTOP: kill() returned */
	int		 ncut;
};

/* What one INFO sample showed. */
struct sk_sample {
	uint64_t	send_us, recv_us;
	unsigned	epoch;		/* of the front end sampled */
	uint8_t		key, fe, nw;
	int16_t		wclient[SK_NAMES_MAX];	/* waiters, queue order */
	uint32_t	wconn[SK_NAMES_MAX];
};

static struct sk_fe	 sk_fes[SK_FRONTENDS];
static struct sk_client	 sk_cls[SK_CLIENTS];
static pthread_mutex_t	 sk_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile int	 sk_stop;
static uint64_t		 sk_mfault[SK_CUTS_MAX][2];	/* member down */
static int		 sk_nmfault;
static struct sk_sample	*sk_samples;
static size_t		 sk_nsamples, sk_capsamples;
static uint64_t		 sk_orphan_checks;

static uint64_t
sk_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

/* ---- a blocking line client (threads: no Check asserts) ---- */

struct sk_conn {
	int	fd;
	size_t	len;
	char	buf[16384];
};

static bool
sk_connect(struct sk_conn *c, int port)
{
	struct sockaddr_in	sin;
	int			on = 1;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->len = 0;
	if ((c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return false;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (connect(c->fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
		return true;
	close(c->fd);
	c->fd = -1;
	return false;
}

static void
sk_close(struct sk_conn *c)
{
	if (c->fd != -1)
		close(c->fd);
	c->fd = -1;
}

static bool
sk_send(struct sk_conn *c, const char *line)
{
	size_t n = strlen(line);

	return send(c->fd, line, n, MSG_NOSIGNAL) == (ssize_t)n;
}

enum sk_rd { SK_RD_LINE, SK_RD_TIMEOUT, SK_RD_GONE };

/* One reply line into out within ms. */
static enum sk_rd
sk_recv(struct sk_conn *c, char *out, size_t outlen, int ms)
{
	uint64_t deadline = kt_now_ms() + (uint64_t)ms;

	for (;;) {
		char		*lf = memchr(c->buf, '\n', c->len);
		struct pollfd	 p = { c->fd, POLLIN, 0 };
		uint64_t	 now = kt_now_ms();
		ssize_t		 n;
		int		 r;

		if (lf != NULL) {
			size_t l = (size_t)(lf - c->buf);

			snprintf(out, outlen, "%.*s", (int)l, c->buf);
			memmove(c->buf, lf + 1, c->len - l - 1);
			c->len -= l + 1;
			return SK_RD_LINE;
		}
		if (c->len == sizeof(c->buf))
			return SK_RD_GONE;
		if (now >= deadline)
			return SK_RD_TIMEOUT;
		r = poll(&p, 1, (int)(deadline - now));
		if (r == -1 && errno == EINTR)
			continue;
		if (r == 0)
			return SK_RD_TIMEOUT;
		n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
		if (n <= 0)
			return SK_RD_GONE;
		c->len += (size_t)n;
	}
}

/*
 * Holds for ms, watching the connection as a client that cares about
 * "lock lost" does (keylock(1) kills its child then): false, at once, if
 * the front end drops it meanwhile.
 */
static bool
sk_hold(struct sk_conn *c, uint64_t ms)
{
	uint64_t end = kt_now_ms() + ms;

	for (;;) {
		struct pollfd	p = { c->fd, POLLIN, 0 };
		uint64_t	now = kt_now_ms();
		ssize_t		n;

		if (now >= end) {
			/* a drop that came while this thread did not run is
			 * a drop, not an UNLOCK sent after it */
			char	b;

			return poll(&p, 1, 0) != 1 ||
			    recv(c->fd, &b, 1, MSG_PEEK) > 0;
		}
		if (poll(&p, 1, (int)(end - now)) <= 0)
			continue;
		if (c->len == sizeof(c->buf))
			return false;
		n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
		if (n <= 0)
			return false;
		c->len += (size_t)n;	/* not ours to answer: left there */
	}
}

/* ---- the clients ---- */

static void
sk_anomaly(struct sk_client *cl, const char *what, const char *line)
{
	if (cl->anomalies++ == 0)
		snprintf(cl->anomaly, sizeof(cl->anomaly), "%.60s: \"%.80s\"",
		    what, line);
}

/*
 * The CANCEL's own reply, after the LOCK's (keylockd-protocol(7),
 * CANCEL): OK 0 after a grant, OK 1 after ERR CANCELLED, either after
 * another end (a timeout, ERR BACKEND). False if it did not come.
 */
static bool
sk_cancel_reply(struct sk_client *cl, struct sk_conn *c, const char *lock)
{
	char		line[512];
	const char	*want = strncmp(lock, "OK ", 3) == 0 ? "OK 0" :
			    strncmp(lock, "ERR CANCELLED", 13) == 0 ? "OK 1" :
			    NULL;

	cl->cancels++;
	if (sk_recv(c, line, sizeof(line), 8000) != SK_RD_LINE)
		return false;
	if (want != NULL ? strcmp(line, want) != 0 : strcmp(line, "OK 0") != 0 &&
	    strcmp(line, "OK 1") != 0)
		sk_anomaly(cl, lock, line);
	return true;
}

static bool
sk_grow(void **p, size_t *cap, size_t n, size_t size)
{
	void	*q;
	size_t	 ncap;

	if (n < *cap)
		return true;
	ncap = *cap == 0 ? 256 : *cap * 2;
	if ((q = realloc(*p, ncap * size)) == NULL)
		return false;
	*p = q;
	*cap = ncap;
	return true;
}

/* A connection number of cl's. */
static uint32_t
sk_conn_new(struct sk_client *cl)
{
	return (uint32_t)cl->nconns++;
}

static int
sk_pick_key(uint64_t *rng)
{
	unsigned r = (unsigned)(sk_rand(rng) % 10);

	return r < 4 ? 0 : r < 6 ? 1 : r < 8 ? 2 : SK_SEM;
}

static void *
sk_client_main(void *arg)
{
	struct sk_client	*cl = arg;
	struct sk_conn		*c;
	char			 line[512], req[128];
	int			 fe = 0, port = 0;
	unsigned		 epoch = 0;
	uint32_t		 cn = 0;

	if ((c = calloc(1, sizeof(*c))) == NULL) {
		cl->oom = true;
		return NULL;
	}
	c->fd = -1;
	while (!sk_stop) {
		if (c->fd == -1) {
			fe = (int)(sk_rand(&cl->rng) % SK_FRONTENDS);
			pthread_mutex_lock(&sk_mu);
			port = sk_fes[fe].port;
			epoch = sk_fes[fe].epoch;
			pthread_mutex_unlock(&sk_mu);
			if (port == 0 || !sk_connect(c, port)) {
				kt_sleep_ms(50);
				continue;
			}
			cn = sk_conn_new(cl);
			snprintf(req, sizeof(req), "NAME c%d.%" PRIu32 "\n",
			    cl->id, cn);
			if (!sk_send(c, req) || sk_recv(c, line, sizeof(line),
			    8000) != SK_RD_LINE || strcmp(line, "OK") != 0) {
				sk_close(c);
				kt_sleep_ms(50);
				continue;
			}
		}
		if (!sk_grow((void **)&cl->ops, &cl->capops, cl->nops,
		    sizeof(struct sk_op))) {
			cl->oom = true;
			break;
		}

		struct sk_op	*op = &cl->ops[cl->nops];
		int		 key = sk_pick_key(&cl->rng);
		bool		 impatient = sk_rand(&cl->rng) % 12 == 0;
		enum sk_rd	 rd;

		memset(op, 0, sizeof(*op));
		op->key = (uint8_t)key;
		op->conn = cn;
		op->fe = (uint8_t)fe;
		op->epoch = epoch;
		op->impatient = impatient;
		snprintf(req, sizeof(req), key == SK_SEM ?
		    "LOCK sem limit=%d timeout=2000\n" :
		    "LOCK x%d timeout=2000\n", key == SK_SEM ? SK_SEM_LIMIT :
		    key);
		op->h.send_us = kt_now_us();
		if (!sk_send(c, req)) {
			sk_close(c);
			continue;
		}
		cl->nops++;
		rd = sk_recv(c, line, sizeof(line), impatient ?
		    (int)(sk_rand(&cl->rng) % 40) : 8000);
		if (rd == SK_RD_TIMEOUT && impatient && sk_rand(&cl->rng) % 2) {
			/* half of them CANCEL instead, and wait for it */
			op->impatient = false;
			rd = sk_send(c, "CANCEL\n") ? sk_recv(c, line,
			    sizeof(line), 8000) : SK_RD_GONE;
			if (rd == SK_RD_LINE && !sk_cancel_reply(cl, c, line))
				rd = SK_RD_GONE;
		}
		op->h.reply_us = kt_now_us();
		if (rd != SK_RD_LINE) {
			/* dropped while waiting (or lost, or stuck) */
			op->outcome = SK_LOST;
			if (rd == SK_RD_TIMEOUT && impatient)
				cl->drops_waiting++;
			else
				cl->lost++;
			sk_close(c);
			continue;
		}
		if (strncmp(line, "OK ", 3) != 0) {
			op->outcome = SK_REFUSED;
			cl->refusals++;
			if (strncmp(line, "ERR BACKEND", 11) == 0) {
				cl->backend_errs++;
				kt_sleep_ms(100);
			}
			continue;
		}
		op->outcome = SK_GRANTED;
		op->h.token = strtoull(line + 3, NULL, 10);
		/* now and then a long hold, for a fault to land in */
		if (!sk_hold(c, sk_rand(&cl->rng) % 12 == 0 ? SK_LONG_MS / 4 +
		    sk_rand(&cl->rng) % (SK_LONG_MS * 3 / 4 + 1) :
		    sk_rand(&cl->rng) % (SK_HOLD_MS + 1))) {
			/* lock lost: the front end let go of us, before
			 * now by however late this thread ran */
			op->h.end_us = kt_now_us();
			op->h.end_us = op->h.end_us > op->h.reply_us +
			    SK_DROP_SLACK_MS * 1000 ? op->h.end_us -
			    SK_DROP_SLACK_MS * 1000 : op->h.reply_us;
			op->unlock = SK_UNLOCK_DROPPED;
			sk_close(c);
			cl->lost++;
			continue;
		}
		if (sk_rand(&cl->rng) % 20 == 0) {
			/* the client dies holding it: the hold ends before
			 * the close (taken after it, a thread held up
			 * between the two would stretch it past the grant
			 * the close causes) */
			op->unlock = SK_UNLOCK_NONE;
			op->h.end_us = kt_now_us();
			sk_close(c);
			cl->drops_holding++;
			continue;
		}
		snprintf(req, sizeof(req), "UNLOCK %s\n", sk_keys[key]);
		op->h.end_us = kt_now_us();
		if (!sk_send(c, req) || sk_recv(c, line, sizeof(line), 8000) !=
		    SK_RD_LINE) {
			op->unlock = SK_UNLOCK_NOREPLY;
			sk_close(c);
			continue;
		}
		op->unlock = strcmp(line, "OK 1") == 0 ? SK_UNLOCK_OK :
		    SK_UNLOCK_OTHER;
		snprintf(op->unlock_reply, sizeof(op->unlock_reply), "%.20s",
		    line);
	}
	sk_close(c);
	free(c);
	return NULL;
}

/* ---- the sampler (main thread) ---- */

static struct sk_conn	sk_sconn[SK_FRONTENDS];
static int		sk_sport[SK_FRONTENDS];
static unsigned		sk_sepoch[SK_FRONTENDS];

/* "c<id>.<n>" */
static bool
sk_parse_name(const char *s, int *id, uint32_t *n)
{
	char		*end;
	unsigned long	 a, b;

	if (s == NULL || s[0] != 'c')
		return false;
	a = strtoul(s + 1, &end, 10);
	if (*end != '.' || a >= SK_CLIENTS)
		return false;
	b = strtoul(end + 1, &end, 10);
	if (*end != '\0')
		return false;
	*id = (int)a;
	*n = (uint32_t)b;
	return true;
}

/*
 * 5: no entry of list (holders or waiters) is older than max_ms. Our
 * clients hold for at most 20 ms and wait for at most timeout=2000; a
 * hold or wait older than that plus SK_ORPHAN_MS belongs to nobody: a
 * grant or wait kept for a connection that has closed (names cannot say
 * it: INFO names only the sampled front end's live connections).
 */
static void
sk_orphans(json_t *list, const char *field, int fe, int key, int64_t max_ms)
{
	size_t	 i;
	json_t	*x;

	json_array_foreach(list, i, x) {
		json_int_t	 age = json_integer_value(json_object_get(x,
				    field));
		char		*dump;

		sk_orphan_checks++;
		if (age <= max_ms)
			continue;
		dump = json_dumps(x, JSON_COMPACT);
		kt_fail("no grant to a closed connection: INFO %s on front end "
		    "%d shows %s (%s over %" PRId64 " ms: nobody's)",
		    sk_keys[key], fe, dump, field, max_ms);
	}
}

/* One INFO of key on front end fe, recorded; false if not answered. */
static bool
sk_sample_one(int fe, int key)
{
	struct sk_conn	*c = &sk_sconn[fe];
	struct sk_sample s;
	char		 req[64], why[128];
	char		*line;
	json_t		*o, *w;
	size_t		 i;
	json_t		*x;
	bool		 ok = false;

	if ((line = malloc(sizeof(c->buf))) == NULL)
		return false;
	memset(&s, 0, sizeof(s));
	s.key = (uint8_t)key;
	s.fe = (uint8_t)fe;
	s.epoch = sk_sepoch[fe];
	snprintf(req, sizeof(req), "INFO %s\n", sk_keys[key]);
	s.send_us = kt_now_us();
	if (!sk_send(c, req) || sk_recv(c, line, sizeof(c->buf), 2000) !=
	    SK_RD_LINE) {
		sk_close(c);
		free(line);
		return false;
	}
	s.recv_us = kt_now_us();
	o = kt_parse_ok_json(line, strlen(line), why, sizeof(why));
	if (o == NULL) {
		/* ERR BACKEND while it rebuilds, say: not a sample */
		ck_assert_msg(strncmp(line, "ERR ", 4) == 0, "INFO %s: %s: %s",
		    sk_keys[key], why, line);
		goto out;
	}
	sk_orphans(json_object_get(o, "holders"), "held_ms", fe, key,
	    SK_LONG_MS + SK_ORPHAN_MS);
	w = json_object_get(o, "waiters");
	sk_orphans(w, "waited_ms", fe, key, SK_WAIT_MS + SK_ORPHAN_MS);
	json_array_foreach(w, i, x) {
		int		id;
		uint32_t	n;

		if (s.nw == SK_NAMES_MAX)
			break;
		if (!sk_parse_name(json_string_value(json_object_get(x,
		    "name")), &id, &n))
			continue;
		s.wclient[s.nw] = (int16_t)id;
		s.wconn[s.nw] = n;
		s.nw++;
	}
	if (s.nw >= 2 && sk_grow((void **)&sk_samples,
	    &sk_capsamples, sk_nsamples, sizeof(s)))
		sk_samples[sk_nsamples++] = s;
	json_decref(o);
	ok = true;
out:
	free(line);
	return ok;
}

/* Samples every key on every front end that may be asked. */
static void
sk_sample_round(void)
{
	for (int fe = 0; fe < SK_FRONTENDS; fe++) {
		uint64_t	now = kt_now_us();
		int		port;
		bool		quiet;

		pthread_mutex_lock(&sk_mu);
		port = sk_fes[fe].port;
		sk_sepoch[fe] = sk_fes[fe].epoch;
		quiet = now < sk_fes[fe].quiet_until_us;
		pthread_mutex_unlock(&sk_mu);
		if (port == 0 || quiet)
			continue;
		if (sk_sport[fe] != port)
			sk_close(&sk_sconn[fe]);
		if (sk_sconn[fe].fd == -1) {
			if (!sk_connect(&sk_sconn[fe], port))
				continue;
			sk_sport[fe] = port;
		}
		for (int key = 0; key < SK_KEYS; key++)
			if (!sk_sample_one(fe, key))
				break;
	}
}

/* Samples for ms (instead of sleeping). */
static void
sk_sample_for(uint64_t ms)
{
	uint64_t end = kt_now_ms() + ms;

	while (kt_now_ms() < end) {
		sk_sample_round();
		kt_sleep_ms(SK_SAMPLE_MS);
	}
}

/* ---- faults (the main thread) ---- */

static void
sk_cut(int i, bool stopped)
{
	struct sk_fe *f = &sk_fes[i];

	pthread_mutex_lock(&sk_mu);
	if (f->ncut < SK_CUTS_MAX) {
		f->cut_us[f->ncut] = kt_now_us();
		f->cut_epoch[f->ncut] = f->epoch;
		f->cut_stop[f->ncut] = stopped;
		f->ncut++;
	}
	if (stopped)
		f->quiet_until_us = UINT64_MAX;
	pthread_mutex_unlock(&sk_mu);
}

static void
sk_fe_start(int i)
{
	struct kt_daemon *d = et_fe_start_with(NULL, SK_TTL, SK_TIMEOUT,
	    "--log-level", "info");

	pthread_mutex_lock(&sk_mu);
	sk_fes[i].d = d;
	sk_fes[i].port = d->port;
	sk_fes[i].epoch++;
	pthread_mutex_unlock(&sk_mu);
}

/*
 * SIGSTOP for ms, then SIGCONT, by a process of its own: if this test
 * dies meanwhile (a timeout, a crash), the front end is still continued,
 * and so gets the SIGTERM its parent's death sent it.
 */
/* Stops front end i (its cut just recorded) for ms, sampling the others
 * meanwhile. The stop is sent here and its time kept once kill() has
 * returned: an UNLOCK sent after that reached a stopped process, however
 * long a loaded machine kept this thread from sending it after the cut. */
static void
sk_stop_for(int i, uint64_t ms)
{
	struct sk_fe	*f = &sk_fes[i];
	pid_t		 pid;
	int		 st;

	ck_assert_int_eq(kill(f->d->pid, SIGSTOP), 0);
	pthread_mutex_lock(&sk_mu);
	if (f->ncut > 0 && f->cut_stop[f->ncut - 1])
		f->stopped_us[f->ncut - 1] = kt_now_us();
	pthread_mutex_unlock(&sk_mu);
	pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		kt_sleep_ms(ms);
		kill(f->d->pid, SIGCONT);
		_exit(0);
	}
	while (waitpid(pid, &st, WNOHANG) == 0)
		sk_sample_for(SK_SAMPLE_MS);
}

static void
sk_fault(uint64_t *rng, int n)
{
	int		i = (int)(sk_rand(rng) % SK_FRONTENDS), m;
	uint64_t	now = kt_now_us();

	fprintf(stderr, "%" PRIu64 ".%06" PRIu64 " ", now / 1000000,
	    now % 1000000);

	switch (n % 3) {
	case 0:
		fprintf(stderr, "fault %d: SIGKILL front end %d\n", n, i);
		sk_cut(i, false);
		kt_daemon_signal(sk_fes[i].d, SIGKILL);
		kt_daemon_wait_at(KT_AT, sk_fes[i].d, false);
		kt_daemon_free(sk_fes[i].d);
		pthread_mutex_lock(&sk_mu);
		sk_fes[i].port = 0;
		sk_fes[i].d = NULL;
		pthread_mutex_unlock(&sk_mu);
		sk_sample_for(500);
		sk_fe_start(i);
		break;
	case 1:
		fprintf(stderr, "fault %d: SIGSTOP front end %d past its "
		    "lease\n", n, i);
		sk_cut(i, true);
		sk_stop_for(i, SK_TTL_MS + 1500);
		now = kt_now_us();
		fprintf(stderr, "%" PRIu64 ".%06" PRIu64 " front end %d "
		    "continued\n", now / 1000000, now % 1000000, i);
		pthread_mutex_lock(&sk_mu);
		sk_fes[i].quiet_until_us = now + SK_QUIET_MS * 1000;
		pthread_mutex_unlock(&sk_mu);
		break;
	default:
		m = (int)(sk_rand(rng) % 3) + 1;
		fprintf(stderr, "fault %d: SIGKILL etcd member m%d\n", n, m);
		if (sk_nmfault < SK_CUTS_MAX)
			sk_mfault[sk_nmfault][0] = kt_now_us();
		et_member("kill", m);
		sk_sample_for(2000);
		et_member("restart", m);
		ck_assert_int_eq(ec_wait_healthy(&et_ec, 30), 0);
		if (sk_nmfault < SK_CUTS_MAX)
			sk_mfault[sk_nmfault++][1] = kt_now_us();
		break;
	}
}

/* ---- the checker ---- */

/* Ends a hold at the first cut of its front end after its grant; the
 * time its SIGSTOP was sent into *stop_us if it was one. */
static void
sk_cap(struct sk_op *h, uint64_t *stop_us)
{
	const struct sk_fe *f = &sk_fes[h->fe];

	*stop_us = 0;
	for (int k = 0; k < f->ncut; k++)
		if (f->cut_epoch[k] == h->epoch &&
		    f->cut_us[k] + SK_READ_LAG_US >= h->h.reply_us &&
		    f->cut_us[k] < h->h.end_us) {
			h->h.end_us = f->cut_us[k] > h->h.reply_us ?
			    f->cut_us[k] : h->h.reply_us;
			*stop_us = f->cut_stop[k] ? f->stopped_us[k] : 0;
		}
}

static const char *
sk_who(const struct sk_op *h)
{
	static __thread char	buf[4][160];
	static __thread int	k;
	char			*b = buf[k++ % 4];

	static const char	*ends[] = {
		[SK_UNLOCK_OK] = "UNLOCK sent",
		[SK_UNLOCK_NONE] = "closed holding",
		[SK_UNLOCK_NOREPLY] = "dropped or cut",
		[SK_UNLOCK_OTHER] = "UNLOCK sent",
		[SK_UNLOCK_DROPPED] = "dropped, seen up to 250 ms later"
	};

	snprintf(b, sizeof(buf[0]), "%s token %" PRIu64 " on front end %u "
	    "(epoch %" PRIu32 ", conn %" PRIu32 ") held %" PRIu64 ".%06" PRIu64
	    " to %" PRIu64 ".%06" PRIu64 " (%s)", sk_keys[h->key], h->h.token,
	    h->fe, h->epoch, h->conn, h->h.reply_us / 1000000,
	    h->h.reply_us % 1000000, h->h.end_us / 1000000,
	    h->h.end_us % 1000000, h->unlock >= SK_UNLOCK_OK &&
	    h->unlock <= SK_UNLOCK_DROPPED ? ends[h->unlock] : "holding");
	return b;
}

/* sk_who for the checker, which sees the hold at the head of an sk_op */
static const char *
sk_who_hold(const struct et_hold *h)
{
	return sk_who((const struct sk_op *)h);
}

/* Whether op's front end was cut while op waited (or a SIGSTOP up to 9 s
 * before it was sent: a stopped front end still takes connections, and
 * one that continued rebuilds; or a SIGKILL at any time before it was
 * sent on a connection of that process: the client's thread may send
 * into a socket the kernel is closing), or an etcd member was down (or
 * healthy again for less than 3 s) (an election on a loaded machine can
 * outlast the lease's margin: the front end then drops its clients). */
static bool
sk_cut_during(const struct sk_op *op)
{
	const struct sk_fe *f = &sk_fes[op->fe];

	for (int k = 0; k < sk_nmfault; k++)
		if (sk_mfault[k][0] <= op->h.reply_us &&
		    sk_mfault[k][1] + 3000000 >= op->h.send_us)
			return true;

	for (int k = 0; k < f->ncut; k++)
		if (f->cut_epoch[k] == op->epoch && (!f->cut_stop[k] ||
		    f->cut_us[k] + SK_TTL_MS * 1000 * 3ULL >=
		    op->h.send_us) && f->cut_us[k] <= op->h.reply_us)
			return true;
	return false;
}

/* The one LOCK of connection (id, n) that can have waited during s, or
 * NULL; only a connection to the front end sampled: its reply left after
 * the table it answers from had it waiting (another front end's replica
 * may lag behind the replies of the waiter's own). */
static const struct sk_op *
sk_op_in(const struct sk_sample *s, int id, uint32_t n)
{
	const struct sk_client	*cl = &sk_cls[id];
	const struct sk_op	*found = NULL;

	for (size_t j = 0; j < cl->nops; j++) {
		const struct sk_op *op = &cl->ops[j];

		if (op->conn != n || op->h.send_us >= s->recv_us ||
		    op->h.reply_us <= s->send_us)
			continue;
		if (found != NULL || op->key != s->key || op->fe != s->fe ||
		    op->epoch != s->epoch)
			return NULL;	/* ambiguous, or not this one */
		found = op;
	}
	return found;
}

/* 4: FIFO among waiters seen queued, both granted. */
static size_t
sk_check_fifo(void)
{
	size_t pairs = 0;

	for (size_t i = 0; i < sk_nsamples; i++) {
		const struct sk_sample	*s = &sk_samples[i];
		const struct sk_op	*w[SK_NAMES_MAX];

		for (int j = 0; j < s->nw; j++)
			w[j] = sk_op_in(s, s->wclient[j], s->wconn[j]);
		for (int a = 0; a < s->nw; a++)
			for (int b = a + 1; b < s->nw; b++) {
				if (w[a] == NULL || w[b] == NULL ||
				    w[a]->outcome != SK_GRANTED ||
				    w[b]->outcome != SK_GRANTED)
					continue;
				pairs++;
				ck_assert_msg(w[a]->h.token < w[b]->h.token,
				    "FIFO: INFO %s on front end %u at %" PRIu64
				    " us had c%d.%" PRIu32 " queued ahead of c%d.%"
				    PRIu32 ", but %s came after %s",
				    sk_keys[s->key], s->fe, s->send_us,
				    s->wclient[a], s->wconn[a], s->wclient[b],
				    s->wconn[b], sk_who(w[a]), sk_who(w[b]));
			}
	}
	return pairs;
}

static void
sk_check(void)
{
	size_t		  total = 0, ng = 0, n, fifo, ncut = 0, nstop = 0;
	struct sk_op	**v2;
	struct et_hold	**hv, **hv2;
	size_t		  per[SK_KEYS];

	for (int i = 0; i < SK_CLIENTS; i++)
		total += sk_cls[i].nops;
	v2 = calloc(total + 1, sizeof(*v2));
	hv = calloc(total + 1, sizeof(*hv));
	hv2 = calloc(total + 1, sizeof(*hv2));
	ck_assert_ptr_nonnull(v2);
	ck_assert_ptr_nonnull(hv);
	ck_assert_ptr_nonnull(hv2);
	/* 6: no grant lost on an UNLOCK */
	for (int i = 0; i < SK_CLIENTS; i++)
		for (size_t j = 0; j < sk_cls[i].nops; j++) {
			struct sk_op	*h = &sk_cls[i].ops[j];
			uint64_t	 end, stop;

			/* 6: every LOCK is answered (timeout=2000, an etcd
			 * request 900) but where a fault cut its front end */
			ck_assert_msg(h->outcome != SK_LOST || h->impatient ||
			    sk_cut_during(h), "client %d: LOCK %s sent at %"
			    PRIu64 " us on front end %u (conn %" PRIu32 ") had "
			    "no reply in 8 s, and no fault there", i,
			    sk_keys[h->key], h->h.send_us, h->fe, h->conn);
			if (h->outcome != SK_GRANTED)
				continue;
			end = h->h.end_us;
			sk_cap(h, &stop);
			ncut += h->h.end_us < end;
			nstop += stop != 0 && end >= stop + SK_STOP_RACE_US &&
			    h->unlock != SK_UNLOCK_NONE;
			ck_assert_msg(h->unlock != SK_UNLOCK_OTHER ||
			    h->h.end_us < end || strncmp(h->unlock_reply,
			    "ERR BACKEND", 11) == 0, "client %d: UNLOCK of %s "
			    "(not cut) answered %s", i, sk_who(h),
			    h->unlock_reply);
			/* 6: an UNLOCK sent while its front end was stopped
			 * (past its lease: etcd may give the key away) sees
			 * the connection drop (after ERR BACKEND at most) */
			ck_assert_msg(stop == 0 || end < stop + SK_STOP_RACE_US ||
			    h->unlock == SK_UNLOCK_NOREPLY ||
			    h->unlock == SK_UNLOCK_DROPPED ||
			    h->unlock == SK_UNLOCK_NONE || strncmp(
			    h->unlock_reply, "ERR BACKEND", 11) == 0, "client "
			    "%d: UNLOCK sent %" PRIu64 " ms into its front end's "
			    "SIGSTOP answered %s after the lease: %s", i,
			    (end - stop) / 1000, h->unlock == SK_UNLOCK_OK ?
			    "OK 1" : h->unlock_reply, sk_who(h));
			v2[ng++] = h;
		}
	/* 3: tokens across the cluster; 1 and 2: per key */
	for (size_t j = 0; j < ng; j++)
		hv[j] = hv2[j] = &v2[j]->h;
	et_check_cluster_tokens(hv, hv2, ng, sk_who_hold);
	for (int key = 0; key < SK_KEYS; key++) {
		n = 0;
		for (size_t j = 0; j < ng; j++)
			if (v2[j]->key == key)
				hv[n++] = &v2[j]->h;
		per[key] = et_check_key(hv, n, key == SK_SEM ? SK_SEM_LIMIT :
		    1, sk_keys[key], sk_who_hold);
	}
	fifo = sk_check_fifo();
	fprintf(stderr, "checked: %zu LOCKs, %zu grants (x0 %zu, x1 %zu, "
	    "x2 %zu, sem %zu), tokens across the cluster, %zu FIFO pairs in "
	    "%zu samples, %" PRIu64 " INFO entries for orphans; %zu holds cut "
	    "by a fault, %zu UNLOCKs sent into a SIGSTOP\n", total, ng,
	    per[0], per[1], per[2], per[3], fifo, sk_nsamples,
	    sk_orphan_checks, ncut, nstop);
	for (int key = 0; key < SK_KEYS; key++)
		ck_assert_msg(per[key] > 20, "only %zu grants of %s",
		    per[key], sk_keys[key]);
	ck_assert_msg(fifo > 0, "no FIFO pair to judge");
	free(v2);
	free(hv);
	free(hv2);
}

/* A front end the end's check needs is gone (it exited, or its process
 * is a zombie): fails with its log's tail, which says why. */
static void
sk_fe_check_alive(int fe)
{
	struct kt_daemon	*d = sk_fes[fe].d;
	char			 path[64], stat[512], state = '?', *p;
	FILE			*f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)d->pid);
	if ((f = fopen(path, "r")) != NULL) {
		if (fgets(stat, sizeof(stat), f) != NULL &&
		    (p = strrchr(stat, ')')) != NULL && p[1] == ' ')
			state = p[2];
		fclose(f);
		if (state != 'Z')
			return;
	}
	kt_print_log_tail(d, 40);
	kt_fail("front end %d (pid %d, port %d) has exited before the end's "
	    "check (its log's tail above)", fe, (int)d->pid, d->port);
}

/* 5, at the end: every key free on every front end (clients all gone),
 * once no front end is in its quiet time after a SIGCONT. */
static void
sk_check_all_free(void)
{
	uint64_t	 quiet = 0, deadline;
	char		 why[128];

	for (int fe = 0; fe < SK_FRONTENDS; fe++)
		if (sk_fes[fe].quiet_until_us > quiet)
			quiet = sk_fes[fe].quiet_until_us;
	while (kt_now_us() < quiet)
		kt_sleep_ms(50);
	deadline = kt_now_ms() + SK_ORPHAN_MS;
	for (int fe = 0; fe < SK_FRONTENDS; fe++) {
		struct kt_conn *c;

		sk_fe_check_alive(fe);
		c = kt_connect_to(sk_fes[fe].d, KT_TCP);

		for (int key = 0; key < SK_KEYS; key++)
			for (;;) {
				json_t	*o = NULL;

				if (kt_conn_sendf(c, "INFO %s", sk_keys[key]) ==
				    0 && kt_conn_readline(c, kt_ms(3000)) ==
				    KT_LINE)
					o = kt_parse_ok_json(c->line,
					    c->linelen, why, sizeof(why));
				if (o != NULL && json_integer_value(
				    json_object_get(o, "holders_total")) == 0 &&
				    json_integer_value(json_object_get(o,
				    "waiters_total")) == 0) {
					json_decref(o);
					break;
				}
				json_decref(o);
				if (kt_now_ms() > deadline)
					kt_fail("no grant to a closed connection:"
					    " INFO %s on front end %d, %d ms after "
					    "the last client closed: %s",
					    sk_keys[key], fe, SK_ORPHAN_MS,
					    c->line != NULL ? c->line : "no reply");
				kt_sleep_ms(100);
			}
		kt_conn_close(c);
	}
}

START_TEST(history_holds_under_client_front_end_and_member_faults)
{
	int64_t		 secs = kt_env_int("SOAK_SECONDS", 120, 20, 86400);
	uint64_t	 rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL | 1;
	uint64_t	 t0, next;
	int		 nfault = 0;
	uint64_t	 ops = 0, refusals = 0, backend = 0, dh = 0, dw = 0,
			 lost = 0, cancels = 0;

	for (int i = 0; i < SK_FRONTENDS; i++) {
		sk_sconn[i].fd = -1;
		sk_fe_start(i);
	}
	for (int i = 0; i < SK_CLIENTS; i++) {
		sk_cls[i].id = i;
		sk_cls[i].rng = rng + (uint64_t)i * 7919;
		ck_assert_int_eq(pthread_create(&sk_cls[i].th, NULL,
		    sk_client_main, &sk_cls[i]), 0);
	}
	t0 = kt_now_ms();
	next = t0 + 2000 + sk_rand(&rng) % 2000;
	while (kt_now_ms() - t0 < (uint64_t)secs * 1000) {
		sk_sample_for(SK_SAMPLE_MS);
		if (kt_now_ms() >= next) {
			sk_fault(&rng, nfault++);
			next = kt_now_ms() + 2000 + sk_rand(&rng) % 2000;
		}
	}
	sk_stop = 1;
	for (int i = 0; i < SK_CLIENTS; i++)
		pthread_join(sk_cls[i].th, NULL);
	for (int i = 0; i < SK_FRONTENDS; i++)
		sk_close(&sk_sconn[i]);
	for (int i = 0; i < SK_CLIENTS; i++) {
		ck_assert_msg(!sk_cls[i].oom, "client %d: out of memory", i);
		ck_assert_msg(sk_cls[i].anomalies == 0, "client %d: %" PRIu64
		    " CANCEL replies out of order, the first after %s", i,
		    sk_cls[i].anomalies, sk_cls[i].anomaly);
		cancels += sk_cls[i].cancels;
		ops += sk_cls[i].nops;
		refusals += sk_cls[i].refusals;
		backend += sk_cls[i].backend_errs;
		dh += sk_cls[i].drops_holding;
		dw += sk_cls[i].drops_waiting;
		lost += sk_cls[i].lost;
	}
	fprintf(stderr, "%" PRId64 " s, %d faults: %" PRIu64 " LOCKs, %"
	    PRIu64 " refused (%" PRIu64 " ERR BACKEND), %" PRIu64 " dropped "
	    "while holding, %" PRIu64 " while waiting, %" PRIu64 " CANCELs, %"
	    PRIu64 " lost to a fault\n", secs, nfault, ops, refusals, backend,
	    dh, dw, cancels, lost);
	ck_assert_int_ge(nfault, 3);
	sk_check_all_free();
	sk_check();
	for (int i = 0; i < SK_CLIENTS; i++) {
		free(sk_cls[i].ops);
	}
	free(sk_samples);
}
END_TEST

static Suite *
soak_suite(void)
{
	Suite	*s = suite_create("etcd_soak");
	TCase	*tc = tcase_create("faults");

	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, (double)kt_env_int("SOAK_SECONDS", 120, 20,
	    86400) + 300);
	tcase_add_test(tc, history_holds_under_client_front_end_and_member_faults);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "soak_test",
	.init = et_init,
	.done = et_done,
	.suites = { soak_suite, NULL }
};
