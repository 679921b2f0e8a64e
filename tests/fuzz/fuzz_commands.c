/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fuzz harness for the whole command layer: a real server (connections,
 * channels, sessions, users and AUTH, backend local and its lock table)
 * with up to four clients on socketpairs, as tests/unit/check_conn.c
 * builds them, whose input lines, hang-ups and the passing of time come
 * from the fuzz data. The daemon's clock is the harness's
 * (kl_clock_fixed_ms) and the event loop's timers are fired by the
 * harness when that clock reaches them, so waits time out, ttls and
 * session graces run out, with no sleeping.
 *
 * The input is text, one step per line (LF):
 *
 *   first byte '0'..'9'  the server's settings (FC_NCFG sets), if present
 *   aTEXT .. dTEXT       client a..d sends TEXT and LF
 *   ATEXT .. DTEXT       client a..d sends TEXT alone (a partial line)
 *   +MS                  the clock moves MS milliseconds on
 *   xa .. xd             client a..d hangs up; a new client takes its slot
 *   ha .. hd             client a..d shuts down its writing side
 *   sa .. sd, ra .. rd   client a..d stops reading its replies, reads again
 *   *N                   the last send, N more times (N <= 2000)
 *   [ and ]              steps between them run no turn of the loop, so
 *                        the server reads them in one batch
 *   anything else        ignored
 *
 * In TEXT, $0..$9 stands for the session ID of the N-th SESSION reply
 * and %a..%d for the client id of a slot's connection.
 *
 * After every step: the lock table's own check passes, and every reply
 * line read so far answers one request of its channel in order, in a
 * form keylockd-protocol(7) allows (OK with the value the command
 * returns, or ERR with a listed code). At the end the clock runs past
 * every timeout: every request of a connection still open has had
 * exactly one reply. Then every client hangs up and every session's
 * grace passes: no client, channel, session, key or waiter is left.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* memmem */
#endif
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "backend.h"
#include "clock.h"
#include "commands.h"
#include "config.h"
#include "conn.h"
#include "locktable.h"
#include "log.h"
#include "server.h"
#include "server_impl.h"
#include "stats.h"

#define FC_CONNS	4
#define FC_NCFG		3
#define FC_IDS		10
#define FC_TIMERS	512
#define FC_END_MS	(400 * 1000)	/* past every timeout and grace */
#define FC_MAX_STEP_MS	(100 * 1000 * 1000)

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a request's reply must look like. */
enum fc_kind {
	FK_OTHER = 0,	/* no command this harness knows: ERR */
	FK_TOKEN,	/* LOCK, TRYLOCK, a resumed wait: OK TOKEN */
	FK_COUNT,	/* UNLOCK, UNLOCKALL, REFRESH: OK N */
	FK_BIT,		/* KILL: OK 0 or OK 1 */
	FK_CANCEL,	/* OK 1 after its LOCK's ERR CANCELLED, or OK 0 */
	FK_JSON,	/* STATS, INFO, CLIENTS: OK {json} */
	FK_RESUME,	/* OK {json}, which may hand over waits */
	FK_BARE,	/* NAME: OK */
	FK_AUTH,	/* AUTH: OK */
	FK_QUIT,	/* OK, then the connection ends */
	FK_PING,	/* OK PONG */
	FK_SESSION,	/* OK ID */
	FK_UPGRADE,	/* refused here: ERR UPGRADE */
	FK_TOOLONG,	/* ERR TOOLONG */
	FK_BADAT	/* an @ that names no channel: ERR SYNTAX */
};

struct fc_chan {
	uint32_t	 n;
	uint8_t		*q;		/* expected replies, [head, tail) */
	size_t		 head, tail, cap;
	uint64_t	 last_token;
	uint64_t	 cancelled;	/* ERR CANCELLED not yet its OK 1 */
};

struct fc_client {
	int		 fd;		/* -1: none */
	uint64_t	 id;
	bool		 eof;		/* the server closed it */
	bool		 wclosed;	/* we shut down our side */
	bool		 quit;		/* QUIT was answered OK */
	bool		 stalled;	/* not reading its replies */
	bool		 was_stalled;	/* or was, or sent a batch unread */
	bool		 told;		/* an ERR said the server closes it */
	bool		 admitted;	/* AUTH OK, or any reply where none is
					 * needed */
	uint64_t	 opened_ms;
	char		 rx[65536];	/* the reply line being read */
	size_t		 rxlen;
	bool		 rxlong;
	char		*tx;		/* the request line being written */
	size_t		 txlen;
	bool		 discarding;
	uint32_t	 discard_chan;
	struct fc_chan	*chans;
	size_t		 nchans;
};

struct fc_timer {
	struct event	*ev;
	struct timeval	 parked;	/* the expiry this harness set */
	uint64_t	 due;		/* on kl_clock_fixed_ms */
};

static struct config	 fc_cfg[FC_NCFG];
static bool		 fc_ready;
static char		 fc_dir[64];
static struct server	*fc_srv;
static struct fc_client	 fc_cl[FC_CONNS];
static char		 fc_ids[FC_IDS][80];
static size_t		 fc_nids;
static struct fc_timer	 fc_timers[FC_TIMERS];
static size_t		 fc_ntimers;
static size_t		 fc_max_line;
static uint64_t		 fc_nreplies;
static bool		 fc_hold;	/* inside [ ] */
static bool		 fc_kills;	/* a KILL or RESUME was sent */
static bool		 fc_said_null;	/* a line said "(null)": a name or key
					 * that others' replies may name */
static const struct config *fc_cur;
static const uint8_t	*fc_last;	/* the last send step */
static size_t		 fc_lastlen;
static bool		 fc_trace;	/* FUZZ_COMMANDS_TRACE set: to stderr */

/* ---- the settings ---- */

static void
fc_cleanup(void)
{
	static const char *const files[] = { "token", "secret", "admin",
			    "alice", "ops" };
	char	path[sizeof(fc_dir) + 16];

	if (fc_dir[0] == '\0')
		return;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fc_dir, files[i]);
		unlink(path);
	}
	rmdir(fc_dir);
}

static void
fc_write_file(const char *name, const char *text, char *path, size_t len)
{
	FILE	*f;

	snprintf(path, len, "%s/%s", fc_dir, name);
	if ((f = fopen(path, "w")) == NULL || fputs(text, f) < 0 ||
	    fclose(f) != 0 || chmod(path, 0600) != 0)
		abort();
}

static void
fc_load(struct config *cfg, const char *const *extra, int nextra)
{
	static const char *const common[] = { "keylockd", "--config",
			    "/dev/null", "--state-dir", fc_dir, "--unix", "",
			    "--no-tcp", "--log-level", "error",
			    "--max-timeout", "100000" };
	int	 ncommon = (int)(sizeof(common) / sizeof(common[0]));
	int	 argc = ncommon + nextra;
	char	**argv;

	if ((argv = calloc((size_t)argc + 1, sizeof(*argv))) == NULL)
		abort();
	for (int i = 0; i < argc; i++)
		if ((argv[i] = strdup(i < ncommon ? common[i] :
		    extra[i - ncommon])) == NULL)
			abort();
	if (config_load(cfg, argc, argv) != 0)
		abort();
}

static void
fc_init(void)
{
	char	secret[128], admin[128], alice[128], ops[128];
	char	ualice[256], uops[256];

	/* tmpfs when there is one: the token mark's fsync is the cost. */
	snprintf(fc_dir, sizeof(fc_dir), "%s/kl-fuzz-commands-XXXXXX",
	    access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (mkdtemp(fc_dir) == NULL)
		abort();
	atexit(fc_cleanup);
	fc_write_file("secret", "sekret\n", secret, sizeof(secret));
	fc_write_file("admin", "adm1n\n", admin, sizeof(admin));
	fc_write_file("alice", "alicepw\n", alice, sizeof(alice));
	fc_write_file("ops", "opspw\n", ops, sizeof(ops));
	snprintf(ualice, sizeof(ualice), "alice secret-file=%s keys=a* "
	    "keys=k", alice);
	snprintf(uops, sizeof(uops), "ops secret-file=%s keys=* "
	    "operator=yes", ops);
	{
		/* 0: open, small limits that requests can reach */
		const char *const x[] = { "--max-locks", "16",
		    "--max-channels", "4", "--max-clients", "8",
		    "--session-grace-max", "60000" };

		fc_load(&fc_cfg[0], x, (int)(sizeof(x) / sizeof(x[0])));
	}
	{
		/* 1: the client and operator secrets; timeouts by default,
		 * a lock delay after a session ends, bounded queues */
		const char *const x[] = { "--auth-file", secret,
		    "--admin-auth-file", admin, "--default-timeout", "1000",
		    "--session-lock-delay", "500", "--default-max-waiters",
		    "2", "--max-waiters", "4", "--idle-timeout", "30000",
		    "--auth-timeout", "5000", "--session-grace", "2000" };

		fc_load(&fc_cfg[1], x, (int)(sizeof(x) / sizeof(x[0])));
	}
	{
		/* 2: users with key patterns, short lines, few of all */
		const char *const x[] = { "--user", ualice, "--user", uops,
		    "--max-line", "256", "--max-channels", "2",
		    "--max-locks", "4", "--max-keys", "8",
		    "--session-grace-max", "5000", "--session-grace", "3000" };

		fc_load(&fc_cfg[2], x, (int)(sizeof(x) / sizeof(x[0])));
	}
	fc_trace = getenv("FUZZ_COMMANDS_TRACE") != NULL;
	log_set_level(fc_trace ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR);
	fc_ready = true;
}

/* UPGRADE would start a new process: here it is refused, which takes
 * the ERR UPGRADE path. */
static bool
fc_no_upgrade(void *arg, struct conn *c, char *why, size_t whylen)
{
	(void)arg;
	(void)c;
	snprintf(why, whylen, "not in the fuzz harness");
	return false;
}

/* ---- the clock and the timers ---- */

static int64_t
fc_tv_us(const struct timeval *tv)
{
	return (int64_t)tv->tv_sec * 1000000 + tv->tv_usec;
}

struct fc_seen {
	struct event	*ev[FC_TIMERS];
	struct timeval	 tv[FC_TIMERS];
	size_t		 n;
};

static int
fc_collect(const struct event_base *base, const struct event *ev, void *arg)
{
	struct fc_seen	*s = arg;
	struct timeval	 tv;

	(void)base;
	if ((event_get_events(ev) & EV_PERSIST) != 0 ||
	    !event_pending(ev, EV_TIMEOUT, &tv) || s->n == FC_TIMERS)
		return 0;
	s->ev[s->n] = (struct event *)(uintptr_t)ev;
	s->tv[s->n++] = tv;
	return 0;
}

/*
 * Every timer the daemon armed since the last look gets its due time on
 * the harness's clock (now + what libevent has left of it) and is parked
 * a day ahead, so that only fc_fire() runs it.
 */
static void
fc_scan_timers(void)
{
	static struct fc_seen	 s;
	struct fc_timer		 next[FC_TIMERS];
	size_t			 nnext = 0;
	struct timeval		 now, park = { 86400, 0 };

	s.n = 0;
	event_base_foreach_event(server_base(fc_srv), fc_collect, &s);
	evutil_gettimeofday(&now, NULL);
	for (size_t i = 0; i < s.n; i++) {
		struct fc_timer	*t = NULL;

		for (size_t j = 0; j < fc_ntimers; j++)
			if (fc_timers[j].ev == s.ev[i] &&
			    fc_tv_us(&fc_timers[j].parked) ==
			    fc_tv_us(&s.tv[i]))
				t = &fc_timers[j];
		if (t != NULL) {
			next[nnext++] = *t;
			continue;
		}
		/* armed anew: left, in whole milliseconds */
		int64_t	left = fc_tv_us(&s.tv[i]) - fc_tv_us(&now);

		next[nnext].ev = s.ev[i];
		next[nnext].due = kl_clock_fixed_ms + (left > 0 ?
		    (uint64_t)((left + 999) / 1000) : 0);
		event_add(s.ev[i], &park);
		if (!event_pending(s.ev[i], EV_TIMEOUT, &next[nnext].parked))
			abort();
		nnext++;
	}
	memcpy(fc_timers, next, nnext * sizeof(next[0]));
	fc_ntimers = nnext;
}

/* Runs every parked timer due by now; true if one ran. */
static bool
fc_fire(void)
{
	bool	ran = false;

	for (size_t i = 0; i < fc_ntimers; i++) {
		if (fc_timers[i].due > kl_clock_fixed_ms)
			continue;
		event_active(fc_timers[i].ev, EV_TIMEOUT, 1);
		fc_timers[i] = fc_timers[--fc_ntimers];
		i--;
		ran = true;
	}
	return ran;
}

/* ---- the replies ---- */

static struct fc_chan *
fc_chan(struct fc_client *k, uint32_t n, bool make)
{
	struct fc_chan	*p;

	for (size_t i = 0; i < k->nchans; i++)
		if (k->chans[i].n == n)
			return &k->chans[i];
	if (!make)
		return NULL;
	if ((p = realloc(k->chans, (k->nchans + 1) * sizeof(*p))) == NULL)
		abort();
	k->chans = p;
	p = &k->chans[k->nchans++];
	memset(p, 0, sizeof(*p));
	p->n = n;
	return p;
}

static void
fc_expect(struct fc_client *k, uint32_t n, unsigned kind, bool front)
{
	struct fc_chan	*ch = fc_chan(k, n, true);

	if (ch->tail == ch->cap) {
		if (ch->head > 0) {
			memmove(ch->q, ch->q + ch->head, ch->tail - ch->head);
			ch->tail -= ch->head;
			ch->head = 0;
		}
		if (ch->tail == ch->cap) {
			ch->cap = ch->cap ? ch->cap * 2 : 16;
			if ((ch->q = realloc(ch->q, ch->cap)) == NULL)
				abort();
		}
	}
	if (front) {
		memmove(ch->q + ch->head + 1, ch->q + ch->head,
		    ch->tail - ch->head);
		ch->tail++;
		ch->q[ch->head] = (uint8_t)kind;
	} else
		ch->q[ch->tail++] = (uint8_t)kind;
}

static size_t
fc_pending(const struct fc_client *k)
{
	size_t	n = 0;

	for (size_t i = 0; i < k->nchans; i++)
		n += k->chans[i].tail - k->chans[i].head;
	return n;
}

static bool
fc_digits(const char *p, size_t n, uint64_t *v)
{
	uint64_t	x = 0;

	if (n == 0 || n > 19 || (p[0] == '0' && n > 1))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(p[i] - '0');
	}
	*v = x;
	return true;
}

/* keylockd-protocol(7), Replies: the codes the protocol lists. */
static bool
fc_known_code(const char *p, size_t n)
{
	static const char *const codes[] = { "SYNTAX", "BADKEY", "TOOLONG",
			    "TIMEOUT", "LOCKED", "BUSY", "DEADLOCK", "HELD",
			    "NOTHELD", "CONFLICT", "LIMIT", "AUTH", "NOPERM",
			    "SHUTDOWN", "CANCELLED", "BACKEND", "GONE",
			    "SESSION", "UPGRADE" };

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strlen(codes[i]) == n && memcmp(codes[i], p, n) == 0)
			return true;
	return false;
}

/* Codes that only some commands can get (keylockd-protocol(7), Replies
 * and Commands). */
static bool
fc_code_fits(enum fc_kind kind, const char *p, size_t n)
{
	static const struct {
		const char	*code;
		enum fc_kind	 kind;
	} only[] = {
		{ "TIMEOUT", FK_TOKEN }, { "LOCKED", FK_TOKEN },
		{ "BUSY", FK_TOKEN }, { "DEADLOCK", FK_TOKEN },
		{ "HELD", FK_TOKEN }, { "CONFLICT", FK_TOKEN },
		{ "CANCELLED", FK_TOKEN }, { "NOTHELD", FK_COUNT },
		{ "GONE", FK_RESUME }, { "UPGRADE", FK_UPGRADE },
	};

	/* keylockd-protocol(7): a second SESSION, RESUME on a connection
	 * with a session, a hold or a wait, AUTH as another user than
	 * the session's (backend local: a LOCK on a channel never) */
	if (n == 7 && memcmp(p, "SESSION", 7) == 0)
		return kind == FK_SESSION || kind == FK_RESUME ||
		    kind == FK_AUTH;
	for (size_t i = 0; i < sizeof(only) / sizeof(only[0]); i++)
		if (strlen(only[i].code) == n &&
		    memcmp(only[i].code, p, n) == 0)
			return kind == only[i].kind;
	return true;
}

static void __attribute__((noreturn))
fc_fail(const struct fc_client *k, const char *line, size_t len,
    const char *why)
{
	fprintf(stderr, "fuzz_commands: client %" PRIu64 ": reply \"%.*s\": "
	    "%s\n", k->id, (int)(len > 300 ? 300 : len), line, why);
	abort();
}

/* No "(null)" from a printf (unless a line said it: names and keys come
 * back in others' replies), no duration that wrapped below 0: "N ms"
 * with N of 17 digits or more (the harness's clock stays far below). */
static void
fc_text_sane(const struct fc_client *k, const char *line, size_t len)
{
	size_t	run = 0;

	if (!fc_said_null && memmem(line, len, "(null)", 6) != NULL)
		fc_fail(k, line, len, "(null) in a reply");
	for (size_t i = 0; i < len; i++) {
		if (line[i] >= '0' && line[i] <= '9') {
			run++;
			continue;
		}
		if (run >= 17 && i + 2 < len && memcmp(line + i, " ms", 3) == 0)
			fc_fail(k, line, len, "a duration below 0");
		run = 0;
	}
}

/* Every integer in a reply's JSON is a count, an id, a token or a
 * duration: none below 0, none past 2^53 (a wrapped subtraction). */
static void
fc_json_sane(const struct fc_client *k, const char *line, size_t len,
    json_t *j, int depth)
{
	const char	*name;
	json_t		*v;
	size_t		 i;

	if (depth > 16)
		return;
	if (json_is_integer(j) && (json_integer_value(j) < 0 ||
	    json_integer_value(j) > (json_int_t)1 << 53))
		fc_fail(k, line, len, "a JSON integer below 0 or past 2^53");
	if (json_is_object(j))
		json_object_foreach(j, name, v)
			fc_json_sane(k, line, len, v, depth + 1);
	if (json_is_array(j))
		json_array_foreach(j, i, v)
			fc_json_sane(k, line, len, v, depth + 1);
}

static json_t *
fc_json(const struct fc_client *k, const char *line, size_t len)
{
	json_t		*j;
	json_error_t	 e;

	if (len < 4 || line[2] != ' ' || line[3] != '{' ||
	    (j = json_loadb(line + 3, len - 3, 0, &e)) == NULL ||
	    !json_is_object(j))
		fc_fail(k, line, len, "not OK {json}");
	fc_json_sane(k, line, len, j, 0);
	return j;
}

/* RESUME handed over the session's waits: each one's reply comes next
 * on its channel. */
static void
fc_resumed(struct fc_client *k, json_t *j)
{
	json_t	*chans = json_object_get(j, "channels"), *c;
	size_t	 i;

	if (json_is_object(json_object_get(j, "waiting")))
		fc_expect(k, 0, FK_TOKEN, true);
	json_array_foreach(chans, i, c) {
		json_int_t	n = json_integer_value(json_object_get(c,
				    "channel"));

		if (n < 1 || n > UINT32_MAX)
			fc_fail(k, "", 0, "RESUME names a bad channel");
		if (json_is_object(json_object_get(c, "waiting")))
			fc_expect(k, (uint32_t)n, FK_TOKEN, true);
	}
}

static void
fc_reply(struct fc_client *k, const char *line, size_t len)
{
	const char	*l = line;
	size_t		 n = len, i = 1;
	uint64_t	 chn = 0, v;
	struct fc_chan	*ch;
	enum fc_kind	 kind;

	if (n > 0 && l[0] == '@') {
		while (i < n && i < 12 && l[i] >= '0' && l[i] <= '9')
			i++;
		if (!fc_digits(l + 1, i - 1, &chn) || chn == 0 ||
		    chn > UINT32_MAX || i == n || l[i] != ' ')
			fc_fail(k, line, len, "bad @N");
		l += i + 1;
		n -= i + 1;
	}
	if (fc_trace)
		fprintf(stderr, "%" PRIu64 " <- %.*s\n", k->id, (int)len,
		    line);
	ch = fc_chan(k, (uint32_t)chn, false);
	if (ch == NULL || ch->head == ch->tail)
		fc_fail(k, line, len, "a reply to no request");
	if (!commands_need_auth(fc_srv->cmds))
		k->admitted = true;
	kind = (enum fc_kind)ch->q[ch->head++];
	fc_nreplies++;
	if (n >= 4 && memcmp(l, "ERR ", 4) == 0) {
		size_t	e = 4;

		while (e < n && l[e] != ' ')
			e++;
		if (!fc_known_code(l + 4, e - 4))
			fc_fail(k, line, len, "an ERR code the protocol "
			    "does not list");
		if (!fc_code_fits(kind, l + 4, e - 4))
			fc_fail(k, line, len, "a code this command cannot "
			    "get");
		if (e - 4 == 9 && memcmp(l + 4, "CANCELLED", 9) == 0)
			ch->cancelled++;
		fc_text_sane(k, line, len);
		if (memmem(l, n, "closing the connection", 22) != NULL)
			k->told = true;	/* the third wrong AUTH */
		if (kind == FK_TOOLONG && (e - 4 != 7 ||
		    memcmp(l + 4, "TOOLONG", 7) != 0))
			fc_fail(k, line, len, "not ERR TOOLONG");
		if (kind == FK_BADAT && (e - 4 != 6 ||
		    memcmp(l + 4, "SYNTAX", 6) != 0))
			fc_fail(k, line, len, "not ERR SYNTAX");
		for (size_t m = 0; m < n; m++)
			if ((unsigned char)l[m] < ' ' && l[m] != '\t')
				fc_fail(k, line, len, "a control byte");
		return;
	}
	if (n < 2 || memcmp(l, "OK", 2) != 0 || (n > 2 && l[2] != ' '))
		fc_fail(k, line, len, "neither OK nor ERR");
	switch (kind) {
	case FK_OTHER:
	case FK_UPGRADE:
	case FK_TOOLONG:
	case FK_BADAT:
		fc_fail(k, line, len, "OK to a request that must fail");
		break;
	case FK_TOKEN:
		if (n < 4 || !fc_digits(l + 3, n - 3, &v) || v == 0 ||
		    v >= (UINT64_C(1) << 63))
			fc_fail(k, line, len, "not OK TOKEN");
		if (v <= ch->last_token)
			fc_fail(k, line, len, "a token not above the last");
		ch->last_token = v;
		break;
	case FK_COUNT:
	case FK_BIT:
	case FK_CANCEL:
		if (n < 4 || !fc_digits(l + 3, n - 3, &v))
			fc_fail(k, line, len, "not OK N");
		if (kind != FK_COUNT && v > 1)
			fc_fail(k, line, len, "not OK 0 or OK 1");
		/* keylockd-protocol(7), CANCEL: the LOCK's ERR CANCELLED
		 * comes first, on the same channel */
		if (kind == FK_CANCEL && v == 1 && ch->cancelled-- == 0)
			fc_fail(k, line, len, "OK 1 with no LOCK cancelled");
		break;
	case FK_JSON:
		json_decref(fc_json(k, l, n));
		break;
	case FK_RESUME: {
		json_t	*j = fc_json(k, l, n);

		fc_resumed(k, j);
		json_decref(j);
		break;
	}
	case FK_BARE:
	case FK_AUTH:
	case FK_QUIT:
		if (n != 2)
			fc_fail(k, line, len, "not a bare OK");
		k->admitted = true;	/* AUTH, NAME: past AUTH */
		if (kind == FK_QUIT)
			k->quit = true;
		break;
	case FK_PING:
		if (n != 7 || memcmp(l, "OK PONG", 7) != 0)
			fc_fail(k, line, len, "not OK PONG");
		break;
	case FK_SESSION:
		if (n < 4 || n > 3 + 64)
			fc_fail(k, line, len, "not OK ID");
		for (size_t m = 3; m < n; m++)
			if (!((l[m] >= 'A' && l[m] <= 'Z') ||
			    (l[m] >= 'a' && l[m] <= 'z') ||
			    (l[m] >= '0' && l[m] <= '9') || l[m] == '-' ||
			    l[m] == '_'))
				fc_fail(k, line, len, "a bad session ID");
		memmove(fc_ids[1], fc_ids[0], sizeof(fc_ids[0]) *
		    (FC_IDS - 1));
		snprintf(fc_ids[0], sizeof(fc_ids[0]), "%.*s", (int)(n - 3),
		    l + 3);
		if (fc_nids < FC_IDS)
			fc_nids++;
		break;
	}
}

/*
 * The server closed k: only for a reason (keylockd-protocol(7),
 * keylockd.conf(5)): QUIT, our own end closed, KILL or a RESUME that
 * moved a session, auth-timeout before AUTH or a first line,
 * idle-timeout, replies left unread (write-timeout, max-output, 16 KiB
 * before AUTH).
 */
static void
fc_eof(const struct fc_client *k)
{
	const struct config	*cfg = fc_cur;

	if (k->quit || k->told || k->wclosed || fc_kills || k->was_stalled ||
	    cfg->idle_timeout != 0 || (!k->admitted && cfg->auth_timeout !=
	    0 && kl_clock_fixed_ms - k->opened_ms >=
	    (uint64_t)cfg->auth_timeout))
		return;
	fc_fail(k, "", 0, "the server closed the connection for no reason");
}

/* Reads what the server sent k. */
static bool
fc_drain(struct fc_client *k)
{
	char	buf[4096];
	ssize_t	n;
	bool	got = false;

	while (k->fd != -1 && !k->eof && !k->stalled) {
		if ((n = read(k->fd, buf, sizeof(buf))) == -1) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			if (errno != ECONNRESET)
				abort();
			n = 0;
		}
		if (n == 0) {
			k->eof = true;
			fc_eof(k);
			break;
		}
		got = true;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (k->rxlen < sizeof(k->rx))
					k->rx[k->rxlen++] = buf[i];
				else
					k->rxlong = true;
				continue;
			}
			if (k->rxlong)
				fc_fail(k, k->rx, k->rxlen, "a reply over "
				    "64 KiB (what the harness reads)");
			fc_reply(k, k->rx, k->rxlen);
			k->rxlen = 0;
		}
	}
	return got;
}

/* Turns of the loop, reads, timers due, until nothing moves. */
static void
fc_run(void)
{
	for (int round = 0; round < 64; round++) {
		bool	moved = false;

		event_base_loop(server_base(fc_srv), EVLOOP_NONBLOCK);
		for (int i = 0; i < FC_CONNS; i++)
			if (fc_drain(&fc_cl[i]))
				moved = true;
		fc_scan_timers();
		if (fc_fire())
			moved = true;
		/* one more turn after the last news: writes it caused */
		if (!moved && round > 0)
			break;
	}
	assert(locktable_check(backend_table(server_backend(fc_srv))) ==
	    NULL);
}

/* The clock moves ms on, stopping at each timer due on the way. */
static void
fc_advance(uint64_t ms)
{
	uint64_t	end = kl_clock_fixed_ms + ms;

	for (int guard = 0; guard < 10000; guard++) {
		uint64_t	due = end;

		fc_scan_timers();
		for (size_t i = 0; i < fc_ntimers; i++)
			if (fc_timers[i].due < due)
				due = fc_timers[i].due;
		if (due > kl_clock_fixed_ms)
			kl_clock_fixed_ms = due;
		fc_run();
		if (kl_clock_fixed_ms == end)
			return;
	}
}

/* ---- the requests ---- */

/* What the reply to rest[0..n) (a line of one channel) must be. */
static enum fc_kind
fc_kind_of(const char *p, size_t n)
{
	static const struct {
		const char	*word;
		enum fc_kind	 kind;
	} words[] = {
		{ "LOCK", FK_TOKEN }, { "TRYLOCK", FK_TOKEN },
		{ "UNLOCK", FK_COUNT }, { "UNLOCKALL", FK_COUNT },
		{ "REFRESH", FK_COUNT }, { "STATS", FK_JSON },
		{ "INFO", FK_JSON }, { "CLIENTS", FK_JSON },
		{ "NAME", FK_BARE }, { "AUTH", FK_AUTH }, { "PING", FK_PING },
		{ "QUIT", FK_QUIT }, { "CANCEL", FK_CANCEL }, { "KILL", FK_BIT },
		{ "SESSION", FK_SESSION }, { "RESUME", FK_RESUME },
		{ "UPGRADE", FK_UPGRADE },
	};
	size_t	i = 0, j;

	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	for (j = i; j < n && p[j] != ' ' && p[j] != '\t'; j++)
		;
	for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
		if (strlen(words[w].word) == j - i &&
		    strncasecmp(words[w].word, p + i, j - i) == 0)
			return words[w].kind;
	return FK_OTHER;
}

/* conn.c's reading of "@N ": the channel, 0, or -1 (not a channel). */
static int64_t
fc_line_channel(const char *line, size_t len, size_t *restoff)
{
	size_t		i = 0, j;
	uint64_t	n = 0;

	*restoff = 0;
	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (i == len || line[i] != '@')
		return 0;
	for (j = i + 1; j < len && line[j] >= '0' && line[j] <= '9' &&
	    n <= UINT32_MAX; j++)
		n = n * 10 + (uint64_t)(line[j] - '0');
	if (j == i + 1 || n == 0 || n > UINT32_MAX ||
	    (j < len && line[j] != ' ' && line[j] != '\t'))
		return -1;
	while (j < len && (line[j] == ' ' || line[j] == '\t'))
		j++;
	*restoff = j;
	return (int64_t)n;
}

/* A whole line the server will read from k: the reply it is due. */
static void
fc_line(struct fc_client *k, const char *line, size_t len)
{
	size_t		off, i;
	int64_t		n;

	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (memmem(line, len, "(null)", 6) != NULL)
		fc_said_null = true;
	if ((n = fc_line_channel(line, len, &off)) < 0) {
		fc_expect(k, 0, FK_BADAT, false);
		return;
	}
	for (i = off; i < len && (line[i] == ' ' || line[i] == '\t'); i++)
		;
	if (i == len)
		return;		/* blank: no reply */
	if (fc_kind_of(line + off, len - off) == FK_BIT ||
	    fc_kind_of(line + off, len - off) == FK_RESUME)
		fc_kills = true;
	fc_expect(k, (uint32_t)n, fc_kind_of(line + off, len - off), false);
}

/* The bytes k wrote, framed as conn.c frames them. */
static void
fc_framed(struct fc_client *k, const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (k->discarding) {
			if (p[i] == '\n') {
				fc_expect(k, k->discard_chan, FK_TOOLONG,
				    false);
				k->discarding = false;
			}
			continue;
		}
		if (p[i] == '\n') {
			fc_line(k, k->tx, k->txlen);
			k->txlen = 0;
			continue;
		}
		k->tx[k->txlen++] = p[i];
		if (k->txlen == fc_max_line) {
			size_t	off;
			int64_t	ch = fc_line_channel(k->tx, k->txlen, &off);

			k->discarding = true;
			k->discard_chan = ch > 0 ? (uint32_t)ch : 0;
			k->txlen = 0;
		}
	}
}

static void
fc_send(struct fc_client *k, const char *p, size_t len)
{
	while (len > 0 && k->fd != -1 && !k->wclosed) {
		ssize_t	n = write(k->fd, p, len);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				/* full: let the server read, then retry */
				fc_run();
				if ((n = write(k->fd, p, len)) <= 0) {
					if (n == -1 && errno != EAGAIN &&
					    errno != EPIPE &&
					    errno != ECONNRESET)
						abort();
					return;	/* it does not read: drop */
				}
			} else if (errno == EPIPE || errno == ECONNRESET)
				return;
			else
				abort();
		}
		if (fc_trace)
			fprintf(stderr, "%" PRIu64 " -> %.*s", k->id, (int)n,
			    p);
		fc_framed(k, p, (size_t)n);
		p += n;
		len -= (size_t)n;
	}
}

static void
fc_open(struct fc_client *k)
{
	int		 sv[2];
	struct conn	*c;

	memset(k, 0, sizeof(*k));
	if ((k->tx = malloc(fc_max_line + 1)) == NULL)
		abort();
	int		 small = 4096;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == -1)
		abort();
	/* small buffers, as check_conn.c's: a client that stops reading
	 * soon reaches the server's own bounds on unread output */
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	if ((c = conn_new(server_conns(fc_srv), sv[0], "fuzz",
	    CONN_UNIX)) == NULL)
		abort();
	k->id = conn_id(c);
	k->fd = sv[1];
	k->opened_ms = kl_clock_fixed_ms;
}

static void
fc_drop(struct fc_client *k)
{
	if (k->fd != -1)
		close(k->fd);
	k->fd = -1;
	for (size_t i = 0; i < k->nchans; i++)
		free(k->chans[i].q);
	free(k->chans);
	free(k->tx);
	k->chans = NULL;
	k->nchans = 0;
	k->tx = NULL;
}

/* TEXT with $N and %x replaced, then sent (and LF when lf). */
static void
fc_send_text(struct fc_client *k, const uint8_t *p, size_t n, bool lf)
{
	char	*buf, *o;

	if ((buf = malloc(n * 80 + 2)) == NULL)
		abort();
	o = buf;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '$' && i + 1 < n && p[i + 1] >= '0' &&
		    p[i + 1] <= '9') {
			size_t	w = (size_t)(p[++i] - '0');

			if (w < fc_nids)
				o += sprintf(o, "%s", fc_ids[w]);
			continue;
		}
		if (p[i] == '%' && i + 1 < n && p[i + 1] >= 'a' &&
		    p[i + 1] < 'a' + FC_CONNS) {
			o += sprintf(o, "%" PRIu64, fc_cl[p[++i] - 'a'].id);
			continue;
		}
		*o++ = (char)p[i];
	}
	if (lf)
		*o++ = '\n';
	fc_send(k, buf, (size_t)(o - buf));
	free(buf);
}

static void
fc_step(const uint8_t *p, size_t n)
{
	uint64_t	ms = 0;
	size_t		i;

	if (n == 0)
		return;
	if (fc_hold && ((p[0] | 0x20) >= 'a' && (p[0] | 0x20) < 'a' +
	    FC_CONNS))
		fc_cl[(p[0] | 0x20) - 'a'].was_stalled = true;
	if (p[0] >= 'a' && p[0] < 'a' + FC_CONNS) {
		fc_send_text(&fc_cl[p[0] - 'a'], p + 1, n - 1, true);
		fc_last = p;
		fc_lastlen = n;
	} else if (p[0] >= 'A' && p[0] < 'A' + FC_CONNS) {
		fc_send_text(&fc_cl[p[0] - 'A'], p + 1, n - 1, false);
		fc_last = p;
		fc_lastlen = n;
	} else if (p[0] == '*') {
		/* a burst of replies the client has yet to read */
		if (fc_last != NULL)
			fc_cl[(fc_last[0] | 0x20) - 'a'].was_stalled = true;
		for (i = 1; i < n && p[i] >= '0' && p[i] <= '9' && ms <= 2000;
		    i++)
			ms = ms * 10 + (uint64_t)(p[i] - '0');
		for (uint64_t r = 0; fc_last != NULL && r < ms && r < 2000;
		    r++)
			fc_send_text(&fc_cl[(fc_last[0] | 0x20) - 'a'],
			    fc_last + 1, fc_lastlen - 1, fc_last[0] >= 'a');
	} else if (p[0] == '[') {
		fc_hold = true;
		return;
	} else if (p[0] == ']') {
		fc_hold = false;
	} else if ((p[0] == 's' || p[0] == 'r') && n > 1 && p[1] >= 'a' &&
	    p[1] < 'a' + FC_CONNS) {
		fc_cl[p[1] - 'a'].stalled = p[0] == 's';
		fc_cl[p[1] - 'a'].was_stalled = true;
	} else if (p[0] == '+') {
		for (i = 1; i < n && p[i] >= '0' && p[i] <= '9' &&
		    ms < FC_MAX_STEP_MS; i++)
			ms = ms * 10 + (uint64_t)(p[i] - '0');
		if (fc_trace)
			fprintf(stderr, "+%" PRIu64 " ms\n", ms);
		fc_advance(ms < FC_MAX_STEP_MS ? ms : FC_MAX_STEP_MS);
		return;
	} else if (p[0] == 'x' && n > 1 && p[1] >= 'a' &&
	    p[1] < 'a' + FC_CONNS) {
		fc_drop(&fc_cl[p[1] - 'a']);
		fc_run();
		fc_open(&fc_cl[p[1] - 'a']);
	} else if (p[0] == 'h' && n > 1 && p[1] >= 'a' &&
	    p[1] < 'a' + FC_CONNS) {
		struct fc_client	*k = &fc_cl[p[1] - 'a'];

		if (!k->wclosed && k->fd != -1)
			shutdown(k->fd, SHUT_WR);
		k->wclosed = true;
	} else
		return;
	if (!fc_hold)
		fc_run();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t	*p = data, *end = data + size;
	struct config	*cfg;
	const struct lt_counters *lc;
	const struct stats *st;

	if (!fc_ready)
		fc_init();
	cfg = &fc_cfg[0];
	if (p < end && *p >= '0' && *p <= '9') {
		cfg = &fc_cfg[(*p - '0') % FC_NCFG];
		p++;
	}
	fc_max_line = (size_t)cfg->max_line;
	kl_clock_fixed_ms = 1000 * 1000 * 1000;
	fc_nids = 0;
	fc_ntimers = 0;
	fc_hold = false;
	fc_last = NULL;
	fc_kills = false;
	fc_said_null = false;
	fc_cur = cfg;
	fc_srv = server_new(cfg);
	commands_set_upgrade(fc_srv->cmds, fc_no_upgrade, NULL);
	for (int i = 0; i < FC_CONNS; i++)
		fc_open(&fc_cl[i]);
	fc_run();
	while (p < end) {
		const uint8_t	*lf = memchr(p, '\n', (size_t)(end - p));
		size_t		 n = lf != NULL ? (size_t)(lf - p) :
				    (size_t)(end - p);

		fc_step(p, n);
		p += n + (lf != NULL);
	}

	for (int i = 0; i < FC_CONNS; i++)
		fc_cl[i].stalled = false;
	/* Every wait runs out (a pipeline of LOCKs, one max-timeout
	 * each): each request of a client still connected has had its
	 * one reply. */
	for (int round = 0; round < 10000; round++) {
		uint64_t	before = fc_nreplies;

		fc_advance(FC_END_MS);
		if (fc_nreplies == before)
			break;
	}
	for (int i = 0; i < FC_CONNS; i++) {
		struct fc_client	*k = &fc_cl[i];

		if (k->fd != -1 && !k->eof && !k->quit && fc_pending(k) != 0)
			fc_fail(k, "", 0, "requests left without a reply");
	}
	/* Every client hangs up, every session's grace passes: nothing
	 * is left (keylockd-protocol(7), Cleanup). */
	for (int i = 0; i < FC_CONNS; i++)
		fc_drop(&fc_cl[i]);
	fc_run();
	fc_advance(FC_END_MS);
	st = server_stats(fc_srv);
	lc = locktable_counters(backend_table(server_backend(fc_srv)));
	assert(st->clients == 0);
	assert(st->channels == 0);
	assert(st->sessions == 0);
	assert(st->sessions_detached == 0);
	assert(lc->keys == 0);
	assert(lc->held == 0);
	assert(lc->waiting == 0);
	assert(locktable_check(backend_table(server_backend(fc_srv))) ==
	    NULL);
	server_free(fc_srv);
	fc_srv = NULL;
	kl_clock_fixed_ms = 0;
	return 0;
}
