/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Sessions across front ends (issue 23; keylockd-protocol(7), SESSIONS,
 * "Across front ends"): with backend etcd a session outlives the front
 * end it was attached to by its grace, and is resumed through any other.
 * A private 3-member cluster and two front ends, A and B, per test:
 *
 * 1. Session clients hold and wait through A (one holds s0; one holds s1
 *    and waits for s0; one holds s2 and waits for s1) while plain clients
 *    of B cycle LOCK and UNLOCK on the same keys. A is SIGKILLed; every
 *    session RESUMEs through B at once and finds each of its grants with
 *    the token it received and its wait; they keep holding past A's own
 *    lease (entries still bound to A would go then), then release in a
 *    chain, each wait's grant arriving on the new connection. The
 *    history checker: 0 overlaps and rising tokens on every key, across
 *    the cluster too; 0 lost grants (RESUME lists each, UNLOCK answers OK
 *    1); 0 GONE; every plain request answered without an error.
 * 2. A session nobody resumes: its lock goes (a waiter of B is granted)
 *    no earlier than its grace after the last request it had answered
 *    (the client's rule), and not much later than that after the kill
 *    (grace, or etcd's least lease TTL if larger, with the lease's
 *    rounding and the reaper's lag); a plain connection of A loses its
 *    lock with A's own lease, before that. RESUME is then ERR GONE.
 * 3. Two RESUMEs of one attached session at once, through A and through
 *    B: exactly one connection ends up with the session (the other got
 *    ERR GONE, or got it and lost it to the second: the session moved,
 *    and that connection is closed without a release), the session's
 *    first connection is closed, and the lock is held throughout with
 *    its token, then released once, by its owner.
 * 4. A RESUME's connection KILLed while the takeover is on its way: the
 *    RESUME is given up, not the session; the next RESUME finds it.
 * 5. A session's channels: held and waiting through A, A SIGKILLed, each
 *    given back by RESUME through B, then through a third front end.
 * 6. A grant's ttl and a waiting LOCK's deadline, asked through A, end
 *    on time through B after A's SIGKILL and a RESUME through B, which
 *    says the ttl's time left; and so does a ttl REFRESHed through A.
 *
 * Until backend etcd serves sessions the program skips (77), saying so,
 * when and only when SESSION through a front end answers ERR BACKEND.
 */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "check_main.h"
#include "etcd.h"
#include "etest.h"

#define SS_TTL		"3"	/* s: the front ends' own lease */
#define SS_TTL_MS	3000
#define SS_TIMEOUT	"900"	/* ms: etcd-timeout, under a third of it */
#define SS_SLACK_MS	2500	/* the lease reaper's lag, a loaded CPU */
#define SS_GRACE_MS	10000	/* the grace of sessions that resume */
#define SS_SHORT_MS	5000	/* of the one left alone: above SS_TTL_MS */
#define SS_KEYS		3
#define SS_PLAIN	6	/* plain clients of B, two a key */
#define SS_SESSIONS	3
#define SS_HOLDS	16
#define SS_ROUNDS	6

static const char *const ss_keys[SS_KEYS] = { "s0", "s1", "s2" };

/* A session's grant (or its waiting LOCK, reply_us 0 until granted). */
struct ss_hold {
	struct et_hold	h;
	int		key;
	int		sess;
};

struct ss_sess {
	int		 n;
	char		 id[80];
	struct kt_conn	*c;
	uint64_t	 last_us;	/* its last answered request, sent */
	int		 wait;		/* its waiting LOCK's hold, or -1 */
};

static struct ss_hold	ss_holds[SS_HOLDS];
static int		ss_nholds;
static struct et_client	ss_plain[SS_PLAIN];
static volatile int	ss_stop;

/* The grace of a session, scaled for a slow machine (at most the
 * default session-grace-max). */
static int64_t
ss_grace(int64_t ms)
{
	int64_t g = kt_ms(ms);

	return g > 60000 ? 60000 : g;
}

static void
ss_open(struct ss_sess *s, int n, struct kt_daemon *d, int64_t grace)
{
	memset(s, 0, sizeof(*s));
	s->n = n;
	s->wait = -1;
	s->c = kt_connect_to(d, KT_TCP);
	kt_req(s->c, "OK", "NAME sess-%d", n);
	s->last_us = kt_now_us();
	kt_send(s->c, "SESSION grace=%" PRId64, grace);
	kt_expect_prefix(s->c, "OK ");
	snprintf(s->id, sizeof(s->id), "%s", s->c->line + 3);
}

static struct ss_hold *
ss_hold_new(struct ss_sess *s, int key)
{
	struct ss_hold *h;

	ck_assert_int_lt(ss_nholds, SS_HOLDS);
	h = &ss_holds[ss_nholds++];
	memset(h, 0, sizeof(*h));
	h->key = key;
	h->sess = s->n;
	return h;
}

/* LOCK key, answered. */
static void
ss_lock(struct ss_sess *s, int key)
{
	struct ss_hold *h = ss_hold_new(s, key);

	h->h.send_us = s->last_us = kt_now_us();
	kt_send(s->c, "LOCK %s timeout=%" PRId64, ss_keys[key], kt_ms(20000));
	h->h.token = kt_expect_token(s->c);
	h->h.reply_us = kt_now_us();
}

/* LOCK key, left waiting. */
static void
ss_wait(struct ss_sess *s, int key)
{
	struct ss_hold *h = ss_hold_new(s, key);

	h->h.send_us = kt_now_us();
	kt_send(s->c, "LOCK %s timeout=%" PRId64, ss_keys[key], kt_ms(60000));
	s->wait = (int)(h - ss_holds);
}

/* The waiting LOCK's grant, on s's connection of now. */
static void
ss_granted(struct ss_sess *s)
{
	struct ss_hold *h = &ss_holds[s->wait];

	kt_recv_within(s->c, kt_ms(20000));
	ck_assert_msg(kt_line_token(s->c, &h->h.token), "session %d: its "
	    "LOCK %s, resumed, answered \"%s\"", s->n, ss_keys[h->key],
	    s->c->line);
	h->h.reply_us = kt_now_us();
	s->wait = -1;
}

/* UNLOCK key: OK 1, or the grant was lost. */
static void
ss_unlock(struct ss_sess *s, int key)
{
	struct ss_hold *h = NULL;

	for (int i = 0; i < ss_nholds; i++)
		if (ss_holds[i].sess == s->n && ss_holds[i].key == key &&
		    ss_holds[i].h.reply_us != 0 && ss_holds[i].h.end_us == 0)
			h = &ss_holds[i];
	ck_assert_ptr_nonnull(h);
	h->h.end_us = kt_now_us();
	kt_send(s->c, "UNLOCK %s", ss_keys[key]);
	kt_recv(s->c);
	ck_assert_msg(kt_line_is(s->c, "OK 1"), "a lost grant: session %d's "
	    "UNLOCK %s (token %" PRIu64 ") answered \"%s\"", s->n,
	    ss_keys[key], h->h.token, s->c->line);
}

/* The first key name of a RESUME entry ({"keys":[...], ...}). */
static const char *
ss_first_key(const json_t *entry)
{
	return json_string_value(json_array_get(json_object_get(entry,
	    "keys"), 0));
}

/*
 * RESUME s through d on a new connection, which becomes s's: OK with
 * every grant of s (same key, same token) and its wait, if any. ERR
 * GONE, or any other reply, fails the test.
 */
static json_t *
ss_resume(struct ss_sess *s, struct kt_daemon *d)
{
	struct kt_conn	*n = kt_connect_to(d, KT_TCP);
	json_t		*r, *held, *e, *w;
	char		 why[160];
	size_t		 i, want = 0;

	kt_send(n, "RESUME %s", s->id);
	kt_recv(n);
	ck_assert_msg(!kt_line_is_err(n, "GONE"), "session %d: RESUME "
	    "through %s %" PRIu64 " ms after its last answered request: %s",
	    s->n, d->addr, (kt_now_us() - s->last_us) / 1000, n->line);
	r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "session %d: RESUME: %s: %s", s->n, why,
	    n->line);
	ck_assert_str_eq(json_string_value(json_object_get(r, "session")),
	    s->id);
	held = json_object_get(r, "held");
	ck_assert(json_is_array(held));
	for (int k = 0; k < ss_nholds; k++) {
		const struct ss_hold *h = &ss_holds[k];
		bool found = false;

		if (h->sess != s->n || h->h.reply_us == 0 || h->h.end_us != 0)
			continue;
		want++;
		json_array_foreach(held, i, e)
			if (strcmp(ss_first_key(e) ? ss_first_key(e) : "",
			    ss_keys[h->key]) == 0) {
				ck_assert_msg((uint64_t)kt_jint(e, "token") ==
				    h->h.token, "session %d: %s resumed with "
				    "token %" PRIu64 ", granted %" PRIu64,
				    s->n, ss_keys[h->key],
				    (uint64_t)kt_jint(e, "token"), h->h.token);
				found = true;
			}
		ck_assert_msg(found, "a lost grant: session %d's %s (token %"
		    PRIu64 ") not in RESUME's %s", s->n, ss_keys[h->key],
		    h->h.token, n->line);
	}
	ck_assert_msg(json_array_size(held) == want, "session %d: RESUME "
	    "lists %zu grants, not %zu: %s", s->n, json_array_size(held),
	    want, n->line);
	w = json_object_get(r, "waiting");
	if (s->wait == -1)
		ck_assert_msg(json_is_null(w), "session %d: RESUME: a wait "
		    "it does not have: %s", s->n, n->line);
	else
		ck_assert_msg(json_is_object(w) && ss_first_key(w) != NULL &&
		    strcmp(ss_first_key(w), ss_keys[ss_holds[s->wait].key]) ==
		    0, "session %d: RESUME: not its wait for %s: %s", s->n,
		    ss_keys[ss_holds[s->wait].key], n->line);
	s->c = n;
	return r;
}

/* Until INFO key on o lists a waiter named name. */
static void
ss_wait_queued(struct kt_conn *o, int key, const char *name)
{
	uint64_t deadline = kt_now_ms() + (uint64_t)kt_ms(10000);

	for (;;) {
		json_t	*info = kt_info(o, ss_keys[key]), *x;
		size_t	 i;
		bool	 seen = false;

		json_array_foreach(json_object_get(info, "waiters"), i, x)
			if (json_is_string(json_object_get(x, "name")) &&
			    strcmp(json_string_value(json_object_get(x,
			    "name")), name) == 0)
				seen = true;
		json_decref(info);
		if (seen)
			return;
		if (kt_now_ms() > deadline)
			kt_fail("%s never waited for %s", name, ss_keys[key]);
		kt_sleep_ms(20);
	}
}

static void
ss_kill(struct kt_daemon *d)
{
	kt_daemon_signal(d, SIGKILL);
	kt_daemon_wait_at(KT_AT, d, false);
	kt_daemon_free(d);
}

START_TEST(sessions_resume_through_another_front_end_after_a_kill)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*oa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct ss_sess		 s[SS_SESSIONS];
	struct et_hold		**v, **v2;
	int64_t			 grace = ss_grace(SS_GRACE_MS);
	uint64_t		 kill_us, resumed_us, plain = 0;
	size_t			 n, total = 0;
	char			 why[320];

	ss_nholds = 0;
	ss_stop = 0;
	for (int i = 0; i < SS_PLAIN; i++) {
		memset(&ss_plain[i], 0, sizeof(ss_plain[i]));
		ss_plain[i].id = i;
		ss_plain[i].d = b;
		snprintf(ss_plain[i].key, sizeof(ss_plain[i].key), "%s",
		    ss_keys[i % SS_KEYS]);
		ss_plain[i].hold_ms = 2;
		ss_plain[i].stop = &ss_stop;
		et_client_start(&ss_plain[i]);
	}
	for (int i = 0; i < SS_SESSIONS; i++)
		ss_open(&s[i], i, a, grace);
	/* sess-0 holds s0; sess-1 holds s1 and waits for s0; sess-2 holds
	 * s2 and waits for s1 */
	for (int i = 0; i < SS_SESSIONS; i++)
		ss_lock(&s[i], i);
	ss_wait(&s[1], 0);
	ss_wait(&s[2], 1);
	ss_wait_queued(oa, 0, "sess-1");
	ss_wait_queued(oa, 1, "sess-2");

	kill_us = kt_now_us();
	ss_kill(a);
	for (int i = 0; i < SS_SESSIONS; i++) {
		json_decref(ss_resume(&s[i], b));
		ck_assert_msg(kt_now_us() - s[i].last_us < (uint64_t)grace *
		    1000, "session %d resumed %" PRIu64 " ms after its last "
		    "answered request, past its grace of %" PRId64 " ms: this "
		    "run proves nothing", i, (kt_now_us() - s[i].last_us) /
		    1000, grace);
	}
	resumed_us = kt_now_us();

	/* held past A's own lease, which ends the entries bound to A */
	kt_sleep_ms((uint64_t)(SS_TTL_MS + kt_ms(SS_SLACK_MS)));
	for (int k = 0; k < SS_KEYS; k++) {
		json_t *info = kt_info(ob, ss_keys[k]);

		ck_assert_msg(kt_jint(info, "holders_total") == 1, "%s: %"
		    "lld holders after A's lease", ss_keys[k],
		    (long long)kt_jint(info, "holders_total"));
		json_decref(info);
	}

	/* the chain: each wait's grant arrives on its new connection */
	ss_unlock(&s[0], 0);
	ss_granted(&s[1]);
	ss_unlock(&s[1], 0);
	ss_unlock(&s[1], 1);
	ss_granted(&s[2]);
	ss_unlock(&s[2], 1);
	ss_unlock(&s[2], 2);
	for (int i = 0; i < SS_SESSIONS; i++)
		kt_req(s[i].c, "OK", "QUIT");
	kt_sleep_ms(200);
	ss_stop = 1;
	for (int i = 0; i < SS_PLAIN; i++) {
		ck_assert_msg(et_client_join(&ss_plain[i], why, sizeof(why)),
		    "%s", why);
		plain += ss_plain[i].nops;
	}

	/* the history, per key and across the cluster */
	for (int k = 0; k < SS_KEYS; k++) {
		v = et_client_holds(ss_plain, SS_PLAIN, ss_keys[k], &n);
		ck_assert_ptr_nonnull(v = realloc(v, (n + SS_HOLDS + 1) *
		    sizeof(*v)));
		for (int j = 0; j < ss_nholds; j++)
			if (ss_holds[j].key == k)
				v[n++] = &ss_holds[j].h;
		et_check_key(v, n, 1, ss_keys[k], NULL);
		total += n;
		free(v);
	}
	ck_assert_ptr_nonnull(v = calloc(total + 1, sizeof(*v)));
	ck_assert_ptr_nonnull(v2 = calloc(total + 1, sizeof(*v2)));
	n = 0;
	for (int k = 0; k < SS_KEYS; k++) {
		size_t		 m;
		struct et_hold	**p = et_client_holds(ss_plain, SS_PLAIN,
				    ss_keys[k], &m);

		for (size_t j = 0; j < m; j++)
			v[n++] = p[j];
		free(p);
	}
	for (int j = 0; j < ss_nholds; j++)
		v[n++] = &ss_holds[j].h;
	memcpy(v2, v, n * sizeof(*v));
	et_check_cluster_tokens(v, v2, n, NULL);
	free(v);
	free(v2);
	fprintf(stderr, "A SIGKILLed: %d sessions resumed through B %" PRIu64
	    " ms after, %d grants with their tokens and 2 waits, 0 GONE; "
	    "held %" PRIu64 " ms past the kill, then released in a chain; %"
	    PRIu64 " plain cycles of B on the same keys; 0 overlaps, 0 lost "
	    "grants in %zu holds\n", SS_SESSIONS, (resumed_us - kill_us) /
	    1000, SS_SESSIONS, (kt_now_us() - kill_us) / 1000, plain, total);
	for (int i = 0; i < SS_PLAIN; i++)
		free(ss_plain[i].ops);
}
END_TEST

START_TEST(a_session_left_alone_goes_grace_after_the_kill_not_before)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*pa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*w = kt_connect_to(b, KT_TCP);
	struct kt_conn		*wp = kt_connect_to(b, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct kt_conn		*n;
	struct ss_sess		 s;
	int64_t			 grace = ss_grace(SS_SHORT_MS);
	int64_t			 least = grace > 2000 ? grace : 2000;
	uint64_t		 last, kill_us, plain_us, sess_us, bound;

	ss_nholds = 0;
	ss_open(&s, 0, a, grace);
	ss_lock(&s, 0);
	kt_lock(pa, "LOCK plain");
	last = kt_now_us();
	kt_req(s.c, "OK PONG", "PING");
	kt_send(w, "LOCK %s timeout=%" PRId64, ss_keys[0], kt_ms(60000));
	kt_send(wp, "LOCK plain timeout=%" PRId64, kt_ms(60000));
	json_decref(kt_wait_queue(ob, ss_keys[0], 1, 1));
	json_decref(kt_wait_queue(ob, "plain", 1, 1));

	kill_us = kt_now_us();
	ss_kill(a);
	/* the plain connection's lock goes with A's lease */
	kt_recv_within(wp, SS_TTL_MS + kt_ms(SS_SLACK_MS));
	ck_assert_msg(kt_line_has_prefix(wp, "OK "), "%s", wp->line);
	plain_us = kt_now_us();
	/* the session's with its own: grace (or etcd's least TTL), whole
	 * seconds of half as much again, the reaper's lag */
	bound = (uint64_t)(least * 3 / 2 + 1000 + kt_ms(SS_SLACK_MS));
	kt_recv_within(w, (int64_t)bound + 1000);
	ck_assert_msg(kt_line_has_prefix(w, "OK "), "the session's %s not "
	    "released within %" PRIu64 " ms of the kill: %s", ss_keys[0],
	    bound + 1000, w->line);
	sess_us = kt_now_us();
	ck_assert_msg(sess_us - last >= (uint64_t)grace * 999,
	    "the session's lock went %" PRIu64 " ms after its last answered "
	    "request, under its grace of %" PRId64 " ms", (sess_us - last) /
	    1000, grace);
	ck_assert_msg(sess_us - kill_us <= bound * 1000, "the session's lock "
	    "went %" PRIu64 " ms after the kill, later than %" PRIu64 " ms",
	    (sess_us - kill_us) / 1000, bound);
	n = kt_connect_to(b, KT_TCP);
	kt_req_err(n, "GONE", "RESUME %s", s.id);
	kt_req(w, "OK 1", "UNLOCK %s", ss_keys[0]);
	kt_req(wp, "OK 1", "UNLOCK plain");
	fprintf(stderr, "a session left alone (grace %" PRId64 " ms): its "
	    "lock went %" PRIu64 " ms after its last answered request, %"
	    PRIu64 " ms after A's SIGKILL; a plain connection's %" PRIu64
	    " ms after it; RESUME then ERR GONE\n", grace, (sess_us - last) /
	    1000, (sess_us - kill_us) / 1000, (plain_us - kill_us) / 1000);
}
END_TEST

/* Whether c is closed by the server within ms (nothing else read). */
static bool
ss_closed_within(struct kt_conn *c, int64_t ms)
{
	enum kt_read r = kt_conn_readline(c, ms);

	ck_assert_msg(r != KT_LINE, "a line on a connection that should have "
	    "been silent: %s", c->line);
	return r == KT_EOF || r == KT_ERROR;
}

START_TEST(two_resumes_at_once_one_wins)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	int			 wins[2] = { 0, 0 }, gone = 0, moved = 0;

	for (int round = 0; round < SS_ROUNDS; round++) {
		struct kt_conn	*c[2], *owner;
		struct ss_sess	 s;
		char		 key[16], why[160];
		json_t		*r[2] = { NULL, NULL }, *info;
		uint64_t	 t;
		int		 first = round % 2, win;

		snprintf(key, sizeof(key), "d%d", round);
		ss_open(&s, round, a, ss_grace(SS_GRACE_MS));
		t = kt_lock(s.c, "LOCK %s", key);
		c[0] = kt_connect_to(a, KT_TCP);
		c[1] = kt_connect_to(b, KT_TCP);
		/* at once, A's or B's first, the second 0, 4 or 8 ms later
		 * (B's takeover waits for a commit; A's is local) */
		kt_send(c[first], "RESUME %s", s.id);
		kt_sleep_us((uint64_t)(round / 2 % 3) * 4000);
		kt_send(c[!first], "RESUME %s", s.id);
		for (int i = 0; i < 2; i++) {
			kt_recv_within(c[i], kt_ms(10000));
			if (kt_line_is_err(c[i], "GONE"))
				continue;
			r[i] = kt_parse_ok_json(c[i]->line, c[i]->linelen, why,
			    sizeof(why));
			ck_assert_msg(r[i] != NULL, "round %d: RESUME through "
			    "%s: %s: %s", round, i ? "B" : "A", why,
			    c[i]->line);
		}
		ck_assert_msg(r[0] != NULL || r[1] != NULL, "round %d: both "
		    "RESUMEs ERR GONE: the session is lost", round);
		/* its first connection is closed, without a release */
		ck_assert_msg(ss_closed_within(s.c, kt_ms(5000)), "round %d: "
		    "the session's first connection still open", round);
		if (r[0] != NULL && r[1] != NULL) {
			/* it moved from one to the other: that one is
			 * closed, the other stays */
			uint64_t deadline = kt_now_ms() + (uint64_t)kt_ms(5000);

			win = -1;
			while (win == -1 && kt_now_ms() < deadline)
				for (int i = 0; i < 2 && win == -1; i++)
					if (ss_closed_within(c[i], 20))
						win = !i;
			ck_assert_msg(win != -1, "round %d: both RESUMEs "
			    "answered OK and both connections stay: two "
			    "owners", round);
			ck_assert_msg(!ss_closed_within(c[win], 300),
			    "round %d: both connections closed", round);
			moved++;
		} else {
			win = r[0] != NULL ? 0 : 1;
			gone++;
			/* the loser is a plain connection, still open */
			kt_req(c[!win], "OK PONG", "PING");
		}
		wins[win]++;
		owner = c[win];
		ck_assert_uint_eq((uint64_t)kt_jint(json_array_get(
		    json_object_get(r[win], "held"), 0), "token"), t);
		/* held throughout, by the session: nobody else gets it */
		info = kt_info(ob, key);
		ck_assert_int_eq(kt_jint(info, "holders_total"), 1);
		json_decref(info);
		kt_req_err(ob, "LOCKED", "TRYLOCK %s", key);
		kt_req(owner, "OK 1", "UNLOCK %s", key);
		kt_req(owner, "OK", "QUIT");
		kt_wait_stat(ob, "keys", 0);
		json_decref(r[0]);
		json_decref(r[1]);
	}
	fprintf(stderr, "two RESUMEs at once, %d rounds: A's won %d, B's %d; "
	    "the other got ERR GONE %d times, the session and lost it "
	    "(moved) %d times; never two owners, never a lost lock\n",
	    SS_ROUNDS, wins[0], wins[1], gone, moved);
}
END_TEST

/* The program's cluster, then whether backend etcd serves sessions: a
 * front end asked SESSION answers OK ID, or ERR BACKEND (not yet built:
 * skipped, saying so). */
static void
ss_init(const char *prog)
{
	char reply[256];

	et_init(prog);
	et_ask("SESSION grace=1000", reply, sizeof(reply));
	if (strncmp(reply, "ERR BACKEND", 11) == 0) {
		fprintf(stderr, "%s: SKIP: SESSION through backend etcd "
		    "answers ERR BACKEND (\"%s\")\n", prog, reply);
		et_done();
		exit(77);
	}
	if (strncmp(reply, "OK ", 3) != 0) {
		fprintf(stderr, "%s: SESSION through backend etcd answered "
		    "\"%s\"\n", prog, reply);
		et_done();
		exit(1);
	}
}

/* RESUME's "held" lists what the answered UNLOCKs left: an UNLOCK is
 * answered once its delete is queued, and a RESUME right after it, on the
 * front end that answered it, waits until the delete is applied, as STATS
 * and INFO do. */
START_TEST(resume_after_an_answered_unlock_lists_what_is_left)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	char			 why[160];

	for (int round = 0; round < 20; round++) {
		struct ss_sess	 s;
		struct kt_conn	*n;
		json_t		*r, *held;

		ss_open(&s, 100 + round, a, ss_grace(SS_GRACE_MS));
		kt_lock(s.c, "LOCK u%d:gone", round);
		kt_lock(s.c, "LOCK u%d:kept", round);
		kt_send(s.c, "UNLOCK u%d:gone", round);
		kt_expect_line(s.c, "OK 1");
		kt_conn_close(s.c);
		n = kt_connect_to(a, KT_TCP);
		kt_send(n, "RESUME %s", s.id);
		kt_recv_within(n, kt_ms(10000));
		r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
		ck_assert_msg(r != NULL, "round %d: RESUME: %s: %s", round, why,
		    n->line);
		held = json_object_get(r, "held");
		ck_assert_msg(json_array_size(held) == 1, "round %d: RESUME "
		    "lists %zu grants after UNLOCK's OK: %s", round,
		    json_array_size(held), n->line);
		json_decref(r);
		kt_req(n, "OK", "QUIT");
		kt_conn_close(n);
	}
}
END_TEST

/* How many times text is in d's log. */
static int
ss_log_count(const struct kt_daemon *d, const char *text)
{
	FILE	*f = fopen(d->log, "r");
	char	 line[2048];
	int	 n = 0;

	ck_assert_msg(f != NULL, "%s", d->log);
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

/* RESUME s through d until it is answered otherwise than ERR BACKEND
 * (a RESUME of it given up there may still be on its way); it must be
 * OK with the one grant of s, token t. */
static void
ss_resume_again(struct ss_sess *s, struct kt_daemon *d, const char *key,
    uint64_t t, int round)
{
	uint64_t	 deadline = kt_now_ms() + (uint64_t)kt_ms(10000);
	char		 why[160];
	json_t		*r, *held;

	for (;;) {
		s->c = kt_connect_to(d, KT_TCP);
		kt_send(s->c, "RESUME %s", s->id);
		kt_recv_within(s->c, kt_ms(10000));
		if (!kt_line_is_err(s->c, "BACKEND") ||
		    kt_now_ms() > deadline)
			break;
		kt_conn_close(s->c);
		kt_sleep_ms(20);
	}
	ck_assert_msg(!kt_line_is_err(s->c, "GONE"), "round %d: the session "
	    "ended with the RESUME whose connection closed: %s", round,
	    s->c->line);
	r = kt_parse_ok_json(s->c->line, s->c->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "round %d: RESUME: %s: %s", round, why,
	    s->c->line);
	held = json_object_get(r, "held");
	ck_assert_msg(json_array_size(held) == 1 && strcmp(ss_first_key(
	    json_array_get(held, 0)), key) == 0 && (uint64_t)kt_jint(
	    json_array_get(held, 0), "token") == t, "round %d: RESUME lost "
	    "%s (token %" PRIu64 "): %s", round, key, t, s->c->line);
	json_decref(r);
}

/* The id CLIENTS (through op) gives the connection named name. */
static json_int_t
ss_client_id(struct kt_conn *op, const char *name)
{
	char		 why[160];
	json_t		*r, *x;
	json_int_t	 id = -1;
	size_t		 i;

	kt_send(op, "CLIENTS");
	kt_recv(op);
	r = kt_parse_ok_json(op->line, op->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "CLIENTS: %s: %s", why, op->line);
	json_array_foreach(json_object_get(r, "clients"), i, x)
		if (json_is_string(json_object_get(x, "name")) &&
		    strcmp(json_string_value(json_object_get(x, "name")),
		    name) == 0)
			id = kt_jint(x, "id");
	json_decref(r);
	ck_assert_msg(id > 0, "CLIENTS does not list %s", name);
	return id;
}

/*
 * A connection that closes while its RESUME's takeover is on its way
 * gives up the RESUME, not the session (keylockd-protocol(7), SESSIONS:
 * the client's rule): the session stays for its grace, and the next
 * RESUME, through either front end, finds its grant with its token.
 * Rounds KILL the resuming connection 0 to 15 ms after its RESUME (a
 * connection's close is seen once its request is answered; KILL closes
 * it at once), through A and B in turn, until a few have closed it during
 * a takeover (the front ends' logs say so).
 */
START_TEST(a_resume_whose_connection_closes_leaves_the_session)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*fe[2] = { a, b };
	struct kt_conn		*op[2], *ob = kt_connect_to(b, KT_TCP), *c;
	const char		*hit = "closed during the takeover";
	struct ss_sess		 s;
	uint64_t		 t;
	int			 round, hits = 0;

	op[0] = kt_connect_to(a, KT_UNIX);
	op[1] = kt_connect_to(b, KT_UNIX);
	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	t = kt_lock(s.c, "LOCK q0");
	for (round = 0; round < 96 && hits < 4; round++) {
		int		 i = round % 2 == 0;
		json_int_t	 id;
		char		 name[32];

		kt_conn_close(s.c);
		c = kt_connect_to(fe[i], KT_TCP);
		snprintf(name, sizeof(name), "resumer-%d", round);
		kt_req(c, "OK", "NAME %s", name);
		id = ss_client_id(op[i], name);
		kt_send(c, "RESUME %s", s.id);
		kt_sleep_us((uint64_t)(round / 2 % 16) * 1000);
		kt_send(op[i], "KILL %lld", (long long)id);
		kt_recv(op[i]);
		ck_assert_msg(kt_line_is(op[i], "OK 1") ||
		    kt_line_is(op[i], "OK 0"), "KILL: %s", op[i]->line);
		kt_conn_close(c);
		ss_resume_again(&s, fe[i], "q0", t, round);
		hits = ss_log_count(a, hit) + ss_log_count(b, hit);
		kt_req_err(ob, "LOCKED", "TRYLOCK q0");
	}
	ck_assert_msg(hits > 0, "in %d rounds no connection closed during "
	    "its RESUME's takeover: this run proves nothing", round);
	kt_req(s.c, "OK 1", "UNLOCK q0");
	kt_req(s.c, "OK", "QUIT");
	kt_wait_stat(ob, "keys", 0);
	fprintf(stderr, "a RESUME's connection KILLed 0 to 15 ms after it, "
	    "%d rounds: %d during the takeover; the session was resumed "
	    "after each with its grant and token, never GONE\n", round, hits);
}
END_TEST

/* "@n OK TOKEN" on c: the token. */
static uint64_t
ss_chan_token(struct kt_conn *c, uint32_t n, const char *what)
{
	char		 want[24];
	unsigned long long t;
	int		 len;

	len = snprintf(want, sizeof(want), "@%" PRIu32 " OK ", n);
	ck_assert_msg(strncmp(c->line, want, (size_t)len) == 0 &&
	    sscanf(c->line + len, "%llu", &t) == 1, "%s: \"%s\"", what,
	    c->line);
	return (uint64_t)t;
}

/* LOCK key on channel n of c, answered: its token. */
static uint64_t
ss_chan_lock(struct kt_conn *c, uint32_t n, const char *key)
{
	kt_send(c, "@%" PRIu32 " LOCK %s timeout=%" PRId64, n, key,
	    kt_ms(20000));
	kt_recv_within(c, kt_ms(20000));
	return ss_chan_token(c, n, key);
}

/* RESUME's entry of channel n (NULL: none). */
static json_t *
ss_chan_entry(json_t *r, uint32_t n)
{
	json_t	*x;
	size_t	 i;

	json_array_foreach(json_object_get(r, "channels"), i, x)
		if (kt_jint(x, "channel") == (json_int_t)n)
			return x;
	return NULL;
}

/* RESUME's channel n (of line, for messages): it holds key with token
 * t (key NULL: nothing), and waits for wait (NULL: nothing). */
static void
ss_chan_check(json_t *r, uint32_t n, const char *key, uint64_t t,
    const char *wait, const char *line)
{
	json_t *x = ss_chan_entry(r, n), *held, *w;

	ck_assert_msg(x != NULL, "RESUME lost channel %" PRIu32 ": %s", n,
	    line);
	held = json_object_get(x, "held");
	w = json_object_get(x, "waiting");
	if (key == NULL)
		ck_assert_msg(json_array_size(held) == 0, "channel %" PRIu32
		    ": grants it does not have: %s", n, line);
	else
		ck_assert_msg(json_array_size(held) == 1 && strcmp(
		    ss_first_key(json_array_get(held, 0)), key) == 0 &&
		    (uint64_t)kt_jint(json_array_get(held, 0), "token") == t,
		    "channel %" PRIu32 ": not its %s with token %" PRIu64
		    ": %s", n, key, t, line);
	if (wait == NULL)
		ck_assert_msg(json_is_null(w), "channel %" PRIu32 ": a wait "
		    "it does not have: %s", n, line);
	else
		ck_assert_msg(json_is_object(w) && strcmp(ss_first_key(w),
		    wait) == 0, "channel %" PRIu32 ": not its wait for %s: %s",
		    n, wait, line);
}

/* INFO key through o: its one holder's client id and channel. */
static json_int_t
ss_holder(struct kt_conn *o, const char *key, json_int_t *chan)
{
	json_t		*info = kt_info(o, key);
	json_t		*h = json_array_get(json_object_get(info, "holders"),
			    0);
	json_int_t	 id;

	ck_assert_msg(h != NULL, "%s: no holder", key);
	id = kt_jint(h, "client");
	*chan = json_is_integer(json_object_get(h, "channel")) ?
	    json_integer_value(json_object_get(h, "channel")) : 0;
	json_decref(info);
	return id;
}

/* Until INFO key on o lists a waiter on channel chan. */
static void
ss_chan_queued(struct kt_conn *o, const char *key, json_int_t chan)
{
	uint64_t deadline = kt_now_ms() + (uint64_t)kt_ms(10000);

	for (;;) {
		json_t	*info = kt_info(o, key), *x;
		size_t	 i;
		bool	 seen = false;

		json_array_foreach(json_object_get(info, "waiters"), i, x)
			seen |= json_is_integer(json_object_get(x,
			    "channel")) && json_integer_value(
			    json_object_get(x, "channel")) == chan;
		json_decref(info);
		if (seen)
			return;
		if (kt_now_ms() > deadline)
			kt_fail("channel %lld never waited for %s",
			    (long long)chan, key);
		kt_sleep_ms(20);
	}
}

/*
 * A session's channels through backend etcd (keylockd-protocol(7),
 * CHANNELS: a session covers every channel): channels of a session on A
 * hold and wait; A is SIGKILLed; RESUME through B gives back every
 * channel with its grants (their tokens) and its wait, past A's own
 * lease, and the waits' grants arrive on B's connection on their
 * channels. Then a channel taken on B, B's connection dropped, and a
 * RESUME through a third front end C finds all of them again.
 */
START_TEST(a_sessions_channels_resume_through_another_front_end)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*c3;
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP), *n, *oc;
	struct ss_sess		 s;
	uint64_t		 t0, t1, t2, t3 = 0, t4, t5, kill_us, resumed_us;
	json_int_t		 id, chan;
	char			 why[160];
	json_t			*r;
	bool			 got1 = false, got3 = false;

	kt_lock(p, "LOCK ch:3");
	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	t1 = ss_chan_lock(s.c, 1, "ch:1");
	t2 = ss_chan_lock(s.c, 2, "ch:2");
	t0 = kt_lock(s.c, "LOCK ch:0");
	kt_send(s.c, "@3 LOCK ch:1 timeout=%" PRId64, kt_ms(60000));
	kt_send(s.c, "@4 LOCK ch:3 timeout=%" PRId64, kt_ms(60000));
	/* other front ends name a channel as its own does: the session's
	 * client id, and the channel */
	id = ss_holder(ob, "ch:0", &chan);
	ck_assert_int_eq(chan, 0);
	ck_assert_int_eq(ss_holder(ob, "ch:1", &chan), id);
	ck_assert_int_eq(chan, 1);
	ck_assert_int_eq(ss_holder(ob, "ch:2", &chan), id);
	ck_assert_int_eq(chan, 2);
	ss_chan_queued(ob, "ch:1", 3);
	ss_chan_queued(ob, "ch:3", 4);

	kill_us = kt_now_us();
	ss_kill(a);
	n = kt_connect_to(b, KT_TCP);
	kt_send(n, "RESUME %s", s.id);
	kt_recv_within(n, kt_ms(10000));
	r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME through B: %s: %s", why, n->line);
	ck_assert_msg(json_array_size(json_object_get(r, "held")) == 1 &&
	    (uint64_t)kt_jint(json_array_get(json_object_get(r, "held"), 0),
	    "token") == t0, "channel 0: not its ch:0: %s", n->line);
	ck_assert_msg(json_array_size(json_object_get(r, "channels")) == 4,
	    "RESUME gives back %zu channels, not 4: %s",
	    json_array_size(json_object_get(r, "channels")), n->line);
	ss_chan_check(r, 1, "ch:1", t1, NULL, n->line);
	ss_chan_check(r, 2, "ch:2", t2, NULL, n->line);
	ss_chan_check(r, 3, NULL, 0, "ch:1", n->line);
	ss_chan_check(r, 4, NULL, 0, "ch:3", n->line);
	json_decref(r);
	s.c = n;
	resumed_us = kt_now_us();

	/* held past A's own lease, which ends the entries bound to A */
	kt_sleep_ms((uint64_t)(SS_TTL_MS + kt_ms(SS_SLACK_MS)));
	ck_assert_int_eq(ss_holder(ob, "ch:1", &chan), id);
	ck_assert_int_eq(chan, 1);
	ck_assert_int_eq(ss_holder(ob, "ch:2", &chan), id);
	ck_assert_int_eq(chan, 2);
	kt_req_err(ob, "LOCKED", "TRYLOCK ch:0");
	kt_req_err(ob, "LOCKED", "TRYLOCK ch:2");

	/* the waits' grants, on B's connection, on their channels */
	kt_req(p, "OK 1", "UNLOCK ch:3");
	kt_recv_within(n, kt_ms(20000));
	t4 = ss_chan_token(n, 4, "channel 4's wait for ch:3");
	kt_send(n, "@1 UNLOCK ch:1");
	for (int i = 0; i < 2; i++) {
		kt_recv_within(n, kt_ms(20000));
		if (kt_line_is(n, "@1 OK 1"))
			got1 = true;
		else {
			t3 = ss_chan_token(n, 3, "channel 3's wait for ch:1");
			got3 = true;
		}
	}
	ck_assert(got1 && got3);
	ck_assert_uint_gt(t3, t1);
	ck_assert_uint_gt(t4, t0);

	/* a channel taken through B; B's connection drops; C takes all */
	t5 = ss_chan_lock(n, 5, "ch:5");
	kt_conn_close(n);
	c3 = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	oc = kt_connect_to(c3, KT_TCP);
	kt_send(oc, "RESUME %s", s.id);
	kt_recv_within(oc, kt_ms(10000));
	r = kt_parse_ok_json(oc->line, oc->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME through C: %s: %s", why, oc->line);
	ck_assert_msg(json_array_size(json_object_get(r, "channels")) == 4,
	    "RESUME through C gives back %zu channels, not 4 (2 to 5): %s",
	    json_array_size(json_object_get(r, "channels")), oc->line);
	ss_chan_check(r, 2, "ch:2", t2, NULL, oc->line);
	ss_chan_check(r, 3, "ch:1", t3, NULL, oc->line);
	ss_chan_check(r, 4, "ch:3", t4, NULL, oc->line);
	ss_chan_check(r, 5, "ch:5", t5, NULL, oc->line);
	json_decref(r);
	for (uint32_t i = 2; i <= 5; i++) {
		static const char *const k[] = { "ch:2", "ch:1", "ch:3",
		    "ch:5" };

		kt_send(oc, "@%" PRIu32 " UNLOCK %s", i, k[i - 2]);
		kt_recv_within(oc, kt_ms(10000));
		ck_assert_msg(strncmp(oc->line, "@", 1) == 0 &&
		    strstr(oc->line, " OK 1") != NULL, "channel %" PRIu32
		    "'s UNLOCK: %s", i, oc->line);
	}
	kt_req(oc, "OK 1", "UNLOCK ch:0");
	kt_req(oc, "OK", "QUIT");
	kt_wait_stat(ob, "keys", 0);
	fprintf(stderr, "a session's 4 channels (2 holding, 2 waiting) and "
	    "channel 0 through A, A SIGKILLed: RESUME through B %" PRIu64
	    " ms after the kill gave back each with its token and wait, held "
	    "past A's lease, the waits granted on B; a channel taken on B "
	    "and all five found again through C\n", (resumed_us - kill_us) /
	    1000);
}
END_TEST

/* ---- the same answers as backend local (issue 23) ---- */

/* INFO key through o: its one holder (a new reference), once there is
 * one (another front end's grant shows once its replica applies it). */
static json_t *
ss_holder_of(struct kt_conn *o, const char *key, const char *what)
{
	uint64_t deadline = kt_now_ms() + (uint64_t)kt_ms(5000);

	for (;;) {
		json_t	*info = kt_info(o, key);
		json_t	*h = json_array_get(json_object_get(info, "holders"),
			    0);

		if (h != NULL) {
			json_incref(h);
			json_decref(info);
			return h;
		}
		json_decref(info);
		if (kt_now_ms() > deadline)
			kt_fail("%s: %s: no holder: %s", what, key, o->line);
		kt_sleep_ms(20);
	}
}

/* Until INFO key through o shows its holder detached (want) or not; its
 * detached_ms then (-1: not detached). */
static json_int_t
ss_until_detached(struct kt_conn *o, const char *key, bool want,
    int64_t within_ms, const char *what)
{
	uint64_t	deadline = kt_now_ms() + (uint64_t)kt_ms(within_ms);
	json_int_t	ms;

	for (;;) {
		json_t *h = ss_holder_of(o, key, what), *d;

		d = json_object_get(h, "detached_ms");
		ms = json_is_integer(d) ? json_integer_value(d) : -1;
		json_decref(h);
		if ((ms >= 0) == want)
			return ms;
		if (kt_now_ms() > deadline)
			kt_fail("%s: INFO %s still shows its holder %s", what,
			    key, want ? "attached" : "detached");
		kt_sleep_ms(20);
	}
}

/* Until INFO key through o names its holder name. */
static void
ss_until_named(struct kt_conn *o, const char *key, const char *name,
    const char *what)
{
	uint64_t deadline = kt_now_ms() + (uint64_t)kt_ms(5000);

	for (;;) {
		json_t		*h = ss_holder_of(o, key, what);
		const char	*n = json_string_value(json_object_get(h,
				    "name"));
		bool		 ok = n != NULL && strcmp(n, name) == 0;

		if (!ok && kt_now_ms() > deadline)
			kt_fail("%s: INFO %s names its holder %s, not %s",
			    what, key, n != NULL ? n : "null", name);
		json_decref(h);
		if (ok)
			return;
		kt_sleep_ms(20);
	}
}

/*
 * INFO through another front end shows a detached session's holds with
 * "detached_ms" (keylockd-protocol(7), SESSIONS: Seen by operators), as
 * the session's own front end does: once its connection there ends,
 * not while attached, and from its front end's end on when that front
 * end dies with the session attached.
 */
START_TEST(info_through_another_front_end_shows_detached_ms)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*oa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct ss_sess		 s;
	json_int_t		 ms, own;
	uint64_t		 closed_ms, t;
	char			 why[160];
	json_t			*r;

	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	t = kt_lock(s.c, "LOCK d0");
	ck_assert_int_eq(ss_until_detached(ob, "d0", false, 0, "attached"),
	    -1);
	closed_ms = kt_now_ms();
	kt_conn_close(s.c);
	own = ss_until_detached(oa, "d0", true, 5000, "its own front end");
	ms = ss_until_detached(ob, "d0", true, 5000, "another front end");
	ck_assert_msg(ms <= (json_int_t)(kt_now_ms() - closed_ms) + 50,
	    "detached_ms %lld through B, %llu ms after the close",
	    (long long)ms, (unsigned long long)(kt_now_ms() - closed_ms));
	ck_assert_msg(own >= 0, "A: %lld", (long long)own);

	/* attached again (through A): B says so */
	s.c = kt_connect_to(a, KT_TCP);
	kt_send(s.c, "RESUME %s", s.id);
	kt_recv_within(s.c, kt_ms(10000));
	r = kt_parse_ok_json(s.c->line, s.c->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME: %s: %s", why, s.c->line);
	json_decref(r);
	ss_until_detached(ob, "d0", false, 5000, "resumed");

	/* A dies with it attached: detached from A's lease's end on */
	ss_kill(a);
	ss_until_detached(ob, "d0", true, SS_TTL_MS + SS_SLACK_MS + 2000,
	    "its front end killed");
	ss_resume_again(&s, b, "d0", t, 0);
	ss_until_detached(ob, "d0", false, 5000, "resumed through B");
	kt_req(s.c, "OK 1", "UNLOCK d0");
	kt_req(s.c, "OK", "QUIT");
	kt_wait_stat(ob, "keys", 0);
}
END_TEST

/*
 * A session keeps its NAME through another front end (keylockd-
 * protocol(7), SESSIONS: Identity), also one sent after its last LOCK:
 * RESUME through B on a connection that gives none names it as A did,
 * in INFO, CLIENTS and error texts; other front ends' INFO names it so
 * as well. Then the same from B to A, with B SIGKILLed.
 */
START_TEST(resume_through_another_front_end_keeps_the_name)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*oa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct kt_conn		*opb = kt_connect_to(b, KT_UNIX);
	struct kt_conn		*opa = kt_connect_to(a, KT_UNIX);
	struct ss_sess		 s;
	uint64_t		 t;
	json_t			*h;

	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	t = kt_lock(s.c, "LOCK n0");
	kt_req(s.c, "OK", "NAME renamed-1");	/* after its last LOCK */
	ss_until_named(ob, "n0", "renamed-1", "B, attached to A");
	kt_conn_close(s.c);
	ss_until_detached(ob, "n0", true, 5000, "closed");
	ss_resume_again(&s, b, "n0", t, 0);
	h = ss_holder_of(ob, "n0", "resumed through B");
	ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
	    "renamed-1");
	ck_assert_int_eq(ss_client_id(opb, "renamed-1"),
	    kt_jint(h, "client"));
	json_decref(h);
	kt_send(ob, "TRYLOCK n0");
	kt_recv(ob);
	ck_assert_msg(kt_line_is_err(ob, "LOCKED") && strstr(ob->line,
	    "(renamed-1)") != NULL, "TRYLOCK n0 through B: %s", ob->line);
	ss_until_named(oa, "n0", "renamed-1", "A, resumed through B");

	/* and back: a NAME on B, B killed, RESUME through A */
	kt_req(s.c, "OK", "NAME renamed-2");
	ss_until_named(oa, "n0", "renamed-2", "A, attached to B");
	ss_kill(b);
	ss_resume_again(&s, a, "n0", t, 1);
	ss_until_named(oa, "n0", "renamed-2", "A, resumed after B's kill");
	ck_assert_int_gt(ss_client_id(opa, "renamed-2"), 0);
	kt_req(s.c, "OK 1", "UNLOCK n0");
	kt_req(s.c, "OK", "QUIT");
	kt_wait_stat(oa, "keys", 0);
}
END_TEST

/* INFO key through o: its holder's token (fails if none). */
static uint64_t
ss_holder_token(struct kt_conn *o, const char *key)
{
	json_t		*h = ss_holder_of(o, key, "token");
	uint64_t	 t = (uint64_t)kt_jint(h, "token");

	json_decref(h);
	return t;
}

/* RESUME's grant of key (in r, for messages line): its token, or 0. */
static uint64_t
ss_resumed_token(json_t *r, const char *key, const char *line)
{
	json_t	*e;
	size_t	 i;

	json_array_foreach(json_object_get(r, "held"), i, e)
		if (strcmp(ss_first_key(e), key) == 0)
			return (uint64_t)kt_jint(e, "token");
	kt_fail("RESUME lost %s: %s", key, line);
	return 0;
}

/*
 * SESSION covers the locks the connection already holds or waits for
 * (keylockd-protocol(7), SESSIONS), through backend etcd too: after LOCKs
 * (one of two keys), a refused TRYLOCK and a released LOCK, with channel
 * 1 holding and channel 2 waiting, SESSION is OK, and every front end
 * reports each grant with the token its client received, before and
 * after; A is SIGKILLed, RESUME through B gives back every grant, before
 * the SESSION and after it, with its token, and both channels, and they
 * stay held past A's own lease; channel 2's wait is granted on B.
 */
START_TEST(session_after_locks_covers_them)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*oa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP), *c, *n;
	uint64_t		 t0, t12, t3, t5, t9;
	char			 why[160], id[80];
	json_t			*r;

	kt_lock(p, "LOCK m9");
	c = kt_connect_to(a, KT_TCP);
	kt_req(c, "OK", "NAME late-0");
	t0 = kt_lock(c, "LOCK m0");
	kt_req_err(c, "LOCKED", "TRYLOCK m9");
	t12 = kt_lock(c, "LOCK m1 m2");
	kt_lock(c, "LOCK m4");
	kt_req(c, "OK 1", "UNLOCK m4");
	t5 = ss_chan_lock(c, 1, "m5");
	kt_send(c, "@2 LOCK m9 timeout=%" PRId64, kt_ms(60000));
	ss_chan_queued(oa, "m9", 2);
	kt_send(c, "SESSION grace=%" PRId64, ss_grace(SS_GRACE_MS));
	kt_recv(c);
	ck_assert_msg(strncmp(c->line, "OK ", 3) == 0, "SESSION after "
	    "LOCKs: %s", c->line);
	snprintf(id, sizeof(id), "%s", c->line + 3);
	t3 = kt_lock(c, "LOCK m3");
	for (int i = 0; i < 2; i++) {
		struct kt_conn *o = i == 0 ? oa : ob;

		ck_assert_uint_eq(ss_holder_token(o, "m0"), t0);
		ck_assert_uint_eq(ss_holder_token(o, "m1"), t12);
		ck_assert_uint_eq(ss_holder_token(o, "m2"), t12);
		ck_assert_uint_eq(ss_holder_token(o, "m3"), t3);
		ck_assert_uint_eq(ss_holder_token(o, "m5"), t5);
	}

	ss_kill(a);
	n = kt_connect_to(b, KT_TCP);
	kt_send(n, "RESUME %s", id);
	kt_recv_within(n, kt_ms(10000));
	r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME through B: %s: %s", why, n->line);
	ck_assert_msg(json_array_size(json_object_get(r, "held")) == 3,
	    "RESUME lists %zu grants, not 3: %s",
	    json_array_size(json_object_get(r, "held")), n->line);
	ck_assert_uint_eq(ss_resumed_token(r, "m0", n->line), t0);
	ck_assert_uint_eq(ss_resumed_token(r, "m1", n->line), t12);
	ck_assert_uint_eq(ss_resumed_token(r, "m3", n->line), t3);
	ss_chan_check(r, 1, "m5", t5, NULL, n->line);
	ss_chan_check(r, 2, NULL, 0, "m9", n->line);
	json_decref(r);

	/* held past A's own lease, which the entries carried before */
	kt_sleep_ms((uint64_t)(SS_TTL_MS + kt_ms(SS_SLACK_MS)));
	kt_req_err(ob, "LOCKED", "TRYLOCK m0");
	kt_req_err(ob, "LOCKED", "TRYLOCK m2");
	ck_assert_uint_eq(ss_holder_token(ob, "m0"), t0);
	ck_assert_uint_eq(ss_holder_token(ob, "m1"), t12);
	ck_assert_uint_eq(ss_holder_token(ob, "m5"), t5);
	kt_req(p, "OK 1", "UNLOCK m9");
	kt_recv_within(n, kt_ms(20000));
	t9 = ss_chan_token(n, 2, "channel 2's wait for m9");
	ck_assert_uint_gt(t9, t5);
	kt_req(n, "OK 2", "UNLOCK m1 m2");
	kt_req(n, "OK 2", "UNLOCKALL");
	kt_req(n, "@1 OK 1", "@1 UNLOCK m5");
	kt_req(n, "@2 OK 1", "@2 UNLOCK m9");
	kt_req(n, "OK", "QUIT");
	kt_wait_stat(ob, "keys", 0);
}
END_TEST

/*
 * A grant's ttl and a waiting LOCK's deadline follow the session to
 * another front end (keylockd-protocol(7), SESSIONS: Across front ends),
 * also when the one they were asked through is SIGKILLed: through A a
 * session holds s0 with ttl=T and waits for s1 (held by a plain client
 * of B) with timeout=W; A is SIGKILLed and the session RESUMEs through
 * B, whose reply gives s0's ttl_ms, the time left counted from the
 * grant. The wait is answered ERR TIMEOUT at its deadline, not before
 * and not much after, and s0 ends at its own: a waiter of B is granted
 * then, and the session holds nothing.
 */
START_TEST(a_ttl_and_a_deadline_survive_resume_through_another_front_end)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*q = kt_connect_to(b, KT_TCP);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP), *n;
	struct ss_sess		 s;
	int64_t			 ttl = kt_ms(6000), wait = kt_ms(4000);
	int64_t			 late = kt_ms(1500), left;
	uint64_t		 lock_us, locked_us, wait_us, resume_us, now;
	uint64_t		 resumed_us, t0;
	char			 why[160];
	json_t			*r, *e;

	kt_lock(q, "LOCK s1");
	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	lock_us = kt_now_us();
	t0 = kt_lock(s.c, "LOCK s0 ttl=%" PRId64, ttl);
	locked_us = kt_now_us();
	wait_us = kt_now_us();
	kt_send(s.c, "LOCK s1 timeout=%" PRId64, wait);
	ss_wait_queued(q, 1, "sess-0");
	ss_kill(a);

	n = kt_connect_to(b, KT_TCP);
	resume_us = kt_now_us();
	kt_send(n, "RESUME %s", s.id);
	kt_recv_within(n, kt_ms(10000));
	resumed_us = kt_now_us();
	r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME through B: %s: %s", why, n->line);
	ck_assert_msg(json_array_size(json_object_get(r, "held")) == 1,
	    "RESUME: %s", n->line);
	e = json_array_get(json_object_get(r, "held"), 0);
	ck_assert_uint_eq((uint64_t)kt_jint(e, "token"), t0);
	ck_assert_msg(json_is_integer(json_object_get(e, "ttl_ms")),
	    "RESUME through B gives no ttl_ms: %s", n->line);
	left = kt_jint(e, "ttl_ms");
	/* counted from the grant, which B applied between the LOCK's
	 * sending and a little after its reply */
	ck_assert_msg(left <= ttl - (int64_t)(resume_us - locked_us) / 1000 +
	    late && left >= ttl - (int64_t)(resumed_us - lock_us) / 1000,
	    "RESUME through B: ttl_ms %" PRId64 " of %" PRId64 ", %" PRIu64
	    " ms after the grant: %s", left, ttl, (resumed_us - locked_us) /
	    1000, n->line);
	ck_assert_msg(json_is_object(json_object_get(r, "waiting")),
	    "RESUME through B: no wait: %s", n->line);
	json_decref(r);
	kt_send(p, "LOCK s0 timeout=%" PRId64, kt_ms(60000));

	/* the wait's deadline, kept by B */
	kt_recv_within(n, wait + kt_ms(10000));
	now = kt_now_us();
	ck_assert_msg(kt_line_is_err(n, "TIMEOUT"), "the resumed wait for "
	    "s1: %s", n->line);
	ck_assert_msg(now >= wait_us + (uint64_t)wait * 1000 &&
	    now <= wait_us + (uint64_t)(wait + late) * 1000, "the resumed "
	    "wait's ERR TIMEOUT came %" PRIu64 " ms after its LOCK, timeout "
	    "%" PRId64 " ms", (now - wait_us) / 1000, wait);

	/* the grant's ttl, kept by B: the waiter is granted then */
	kt_recv_within(p, ttl + kt_ms(10000));
	now = kt_now_us();
	ck_assert_msg(kt_line_token(p, &(uint64_t){ 0 }), "B's waiter for s0: "
	    "%s", p->line);
	ck_assert_msg(now >= lock_us + (uint64_t)ttl * 1000 &&
	    now <= locked_us + (uint64_t)(ttl + late) * 1000, "s0 (ttl %"
	    PRId64 " ms) ended %" PRIu64 " ms after its grant", ttl,
	    (now - locked_us) / 1000);
	kt_req_err(n, "NOTHELD", "UNLOCK s0");
	kt_req(n, "OK", "QUIT");
	kt_req(p, "OK 1", "UNLOCK s0");
	kt_req(q, "OK 1", "UNLOCK s1");
	kt_wait_stat(q, "keys", 0);
}
END_TEST

/*
 * A session's REFRESH goes with it too: through A a session holds s2 with
 * ttl=T and REFRESHes it T/2 later; once B shows the ttl restarted (its
 * INFO), A is SIGKILLed and the session RESUMEs through B, whose ttl_ms
 * counts from the REFRESH, and s2 ends T after the REFRESH, not after the
 * grant: a waiter of B is granted then.
 */
START_TEST(a_refresh_goes_with_the_session_to_another_front_end)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*q = kt_connect_to(b, KT_TCP);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP), *n;
	struct ss_sess		 s;
	int64_t			 ttl = kt_ms(6000), late = kt_ms(1500), left;
	uint64_t		 r0, r1, deadline, resume_us, resumed_us, now;
	char			 why[160];
	json_t			*r, *e;

	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	kt_lock(s.c, "LOCK s2 ttl=%" PRId64, ttl);
	kt_sleep_ms((uint64_t)ttl / 2);
	r0 = kt_now_us();
	kt_req(s.c, "OK 1", "REFRESH s2 ttl=%" PRId64, ttl);
	r1 = kt_now_us();
	/* B has applied the REFRESH: s2's time left there is more than its
	 * grant could have left (seen within a quarter of the ttl, while
	 * the two still differ by more than a quarter) */
	deadline = kt_now_ms() + (uint64_t)ttl / 4;
	for (;;) {
		json_t	*h = ss_holder_of(q, "s2", "B");
		int64_t	 x = kt_jint(h, "expires_in_ms");

		json_decref(h);
		if (x > ttl - (int64_t)(kt_now_us() - r0) / 1000 - ttl / 4)
			break;
		if (kt_now_ms() > deadline)
			kt_fail("B never saw the REFRESH: s2 expires in %"
			    PRId64 " ms", x);
		kt_sleep_ms(20);
	}
	ss_kill(a);
	n = kt_connect_to(b, KT_TCP);
	resume_us = kt_now_us();
	kt_send(n, "RESUME %s", s.id);
	kt_recv_within(n, kt_ms(10000));
	resumed_us = kt_now_us();
	r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME through B: %s: %s", why, n->line);
	e = json_array_get(json_object_get(r, "held"), 0);
	ck_assert_msg(e != NULL && json_is_integer(json_object_get(e,
	    "ttl_ms")), "RESUME through B: %s", n->line);
	left = kt_jint(e, "ttl_ms");
	ck_assert_msg(left <= ttl - (int64_t)(resume_us - r1) / 1000 + late &&
	    left >= ttl - (int64_t)(resumed_us - r0) / 1000, "RESUME through "
	    "B: ttl_ms %" PRId64 " of %" PRId64 ", %" PRIu64 " ms after the "
	    "REFRESH: %s", left, ttl, (resumed_us - r0) / 1000, n->line);
	json_decref(r);
	kt_send(p, "LOCK s2 timeout=%" PRId64, kt_ms(60000));
	kt_recv_within(p, ttl + kt_ms(10000));
	now = kt_now_us();
	ck_assert_msg(kt_line_token(p, &(uint64_t){ 0 }), "B's waiter for s2: "
	    "%s", p->line);
	ck_assert_msg(now >= r0 + (uint64_t)ttl * 1000 &&
	    now <= r1 + (uint64_t)(ttl + late) * 1000, "s2 (ttl %" PRId64
	    " ms, refreshed) ended %" PRIu64 " ms after its REFRESH", ttl,
	    (now - r0) / 1000);
	kt_req_err(n, "NOTHELD", "UNLOCK s2");
	kt_req(n, "OK", "QUIT");
	kt_req(p, "OK 1", "UNLOCK s2");
	kt_wait_stat(q, "keys", 0);
}
END_TEST

static void
ss_etcd_cb(void *arg, const struct etcd_result *res)
{
	int64_t *rev = arg;

	*rev = res->status == ETCD_OK ? res->revision : -1;
}

/* etcd compacted at its newest revision: a front end started now builds
 * its table from that revision alone, with no history to replay. */
static void
ss_compact(void)
{
	struct event_base	*base = event_base_new();
	struct etcd		*e = etcd_new(base, et_endpoints_from(1),
				    NULL, NULL);
	struct etcd_range	 rg = { .key = "x", .keylen = 1,
	    .count_only = true };
	int64_t			 rev = 0, done = 0;
	char			 buf[24];
	json_t			*b;

	ck_assert_ptr_nonnull(e);
	etcd_range(e, &rg, ETCD_RETRY, ss_etcd_cb, &rev);
	while (rev == 0)
		event_base_loop(base, EVLOOP_ONCE);
	ck_assert_int_gt(rev, 0);
	snprintf(buf, sizeof(buf), "%" PRId64, rev);
	b = json_object();
	json_object_set_new(b, "revision", json_string(buf));
	etcd_post(e, "/v3/kv/compaction", b, ETCD_RETRY, ss_etcd_cb, &done);
	while (done == 0)
		event_base_loop(base, EVLOOP_ONCE);
	ck_assert_int_gt(done, 0);
	etcd_free(e);
	event_base_free(base);
}

/*
 * A front end started after a session's record was written, with etcd
 * compacted (its table built from the newest revision, no history
 * replayed), shows the session as the others do: its view of the
 * sessions comes from a range of their records (detached_ms, the NAME
 * sent after the last LOCK); the hold's token, which it cannot know, as
 * 0 (keylockd(8), BACKEND ETCD).
 */
START_TEST(a_front_end_started_later_shows_the_session)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*c3;
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP), *oc;
	struct ss_sess		 s;
	uint64_t		 t;

	ss_open(&s, 0, a, ss_grace(SS_GRACE_MS));
	t = kt_lock(s.c, "LOCK l0");
	kt_req(s.c, "OK", "NAME later-0");
	kt_conn_close(s.c);
	/* B, running, has seen the record's last write */
	ss_until_detached(ob, "l0", true, 5000, "B");
	ss_until_named(ob, "l0", "later-0", "B");
	ss_compact();
	c3 = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	oc = kt_connect_to(c3, KT_TCP);
	ss_until_detached(oc, "l0", true, 5000, "C, started after");
	ss_until_named(oc, "l0", "later-0", "C, started after");
	/* a table built from a compacted history cannot know the token of
	 * a hold it carries: 0, never one the client did not receive; the
	 * front ends that replayed the grant show the client's */
	ck_assert_uint_eq(ss_holder_token(oc, "l0"), 0);
	ck_assert_uint_eq(ss_holder_token(ob, "l0"), t);
	ss_resume_again(&s, a, "l0", t, 0);
	ss_until_detached(oc, "l0", false, 5000, "C, resumed through A");
	kt_req(s.c, "OK 1", "UNLOCK l0");
	kt_req(s.c, "OK", "QUIT");
	kt_wait_stat(oc, "keys", 0);
}
END_TEST

/*
 * keylockd-protocol(7), SESSIONS: Across front ends (issue 23, section
 * 4): a grant's ttl and a wait's deadline end on time, as through
 * backend local, while the front end the session is attached to is dead.
 * Any live front end deletes such a hold or wait once it outlived its
 * ttl or deadline by the reap margin, etcd-timeout + 1 s (SS_REAP_MS),
 * more than a live front end needs to end its own; before, they lasted
 * until the session's lease went, one and a half times its grace.
 */
#define SS_REAP_MS	(900 + 1000)	/* SS_TIMEOUT + EBE_REAP_LAG_MS */
#define SS_LONG_MS	30000		/* a grace far past everything */

/* RESUME of s through d: OK, with no grant and no wait (they ended while
 * the session was without its front end, as through backend local a
 * detached session's do), and nothing follows. */
static void
ss_resume_empty(struct ss_sess *s, struct kt_daemon *d)
{
	struct kt_conn	*n = kt_connect_to(d, KT_TCP);
	char		 why[160];
	json_t		*r;

	kt_send(n, "RESUME %s", s->id);
	kt_recv_within(n, kt_ms(10000));
	r = kt_parse_ok_json(n->line, n->linelen, why, sizeof(why));
	ck_assert_msg(r != NULL, "RESUME through B: %s: %s", why, n->line);
	ck_assert_msg(json_array_size(json_object_get(r, "held")) == 0 &&
	    json_is_null(json_object_get(r, "waiting")), "RESUME through B "
	    "after the ttl or deadline: %s", n->line);
	json_decref(r);
	kt_req(n, "OK PONG", "PING");
	kt_req(n, "OK", "QUIT");
}

/* SS_DEFAULTS=1: the front ends at their default etcd-lease-ttl and
 * etcd-timeout (5000 ms: a reap margin of 6000), a grace of 15000 ms, for
 * the figure at the defaults. */
START_TEST(a_dead_front_ends_session_grant_ends_at_its_ttl)
{
	bool			 dflt = getenv("SS_DEFAULTS") != NULL;
	struct kt_daemon	*a = dflt ? et_fe_start(NULL, NULL, NULL) :
				    et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = dflt ? et_fe_start(NULL, NULL, NULL) :
				    et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*c = dflt ? et_fe_start(NULL, NULL, NULL) :
				    et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct kt_conn		*oc = kt_connect_to(c, KT_TCP);
	struct ss_sess		 s;
	int64_t			 ttl = kt_ms(3000), late = kt_ms(1500);
	json_int_t		 rb, rc;
	int64_t			 reap = dflt ? 5000 + 1000 : SS_REAP_MS;
	int64_t			 grace = ss_grace(dflt ? 15000 : SS_LONG_MS);
	uint64_t		 lock_us, locked_us, kill_us, now;

	ss_open(&s, 0, a, grace);
	lock_us = kt_now_us();
	kt_lock(s.c, "LOCK s0 ttl=%" PRId64, ttl);
	locked_us = kt_now_us();
	kt_send(p, "LOCK s0 timeout=%" PRId64, kt_ms(60000));
	json_decref(kt_wait_queue(ob, "s0", 1, 1));
	kill_us = kt_now_us();
	ss_kill(a);

	/* B's waiter: granted once B has deleted the hold, the reap margin
	 * after its ttl, not when the session's lease goes */
	kt_recv_within(p, ttl + reap + late + kt_ms(5000));
	now = kt_now_us();
	ck_assert_msg(kt_line_token(p, &(uint64_t){ 0 }), "B's waiter for s0: "
	    "%s", p->line);
	ck_assert_msg(now >= lock_us + (uint64_t)(ttl + reap) * 1000,
	    "s0 (ttl %" PRId64 " ms) reaped %" PRIu64 " ms after its LOCK, "
	    "before the margin of %" PRId64 " ms", ttl, (now - lock_us) / 1000,
	    reap);
	ck_assert_msg(now <= locked_us + (uint64_t)(ttl + reap + late) * 1000,
	    "s0 (ttl %" PRId64 " ms) ended %" PRIu64 " ms after its grant, "
	    "with A dead", ttl, (now - locked_us) / 1000);
	/* by B or C: the first whose margin ran out (the other may apply
	 * its delete before its own does) */
	ck_assert_int_ge(ss_log_count(b, "outlived its ttl") +
	    ss_log_count(c, "outlived its ttl"), 1);
	ss_resume_empty(&s, b);
	kt_req(p, "OK 1", "UNLOCK s0");
	kt_wait_stat(ob, "keys", 0);
	/* B and C both asked to delete it, on the condition that it was the
	 * entry they applied: etcd made one delete, and that front end alone
	 * counts it (its STATS etcd_reaped 1, the other's 0) */
	kt_wait_stat(oc, "keys", 0);
	for (uint64_t until = kt_now_ms() + (uint64_t)kt_ms(5000);;) {
		rb = kt_stat(ob, "etcd_reaped");
		rc = kt_stat(oc, "etcd_reaped");
		if (rb + rc != 0 || kt_now_ms() > until)
			break;
		kt_sleep_ms(20);
	}
	kt_sleep_ms((uint64_t)kt_ms(1000));	/* a second count would show */
	rb = kt_stat(ob, "etcd_reaped");
	rc = kt_stat(oc, "etcd_reaped");
	ck_assert_msg((rb == 1 && rc == 0) || (rb == 0 && rc == 1), "one hold "
	    "reaped: STATS etcd_reaped %lld on B, %lld on C, want 1 on one of "
	    "them and 0 on the other", (long long)rb, (long long)rc);
	fprintf(stderr, "A SIGKILLed %" PRIu64 " ms after a session's grant "
	    "with ttl=%" PRId64 " (grace %" PRId64 " ms): B's waiter granted %"
	    PRIu64 " ms after the grant (ttl + reap margin %" PRId64 " ms); "
	    "etcd_reaped %lld on B, %lld on C\n",
	    (kill_us - locked_us) / 1000, ttl, grace, (now - locked_us) / 1000,
	    reap, (long long)rb, (long long)rc);
}
END_TEST

START_TEST(a_dead_front_ends_session_wait_ends_at_its_deadline)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*q = kt_connect_to(b, KT_TCP);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct ss_sess		 s;
	int64_t			 wait = kt_ms(2000), late = kt_ms(1500);
	uint64_t		 wait_us, gone_us, deadline;
	json_t			*info;

	kt_lock(q, "LOCK s1");
	ss_open(&s, 0, a, ss_grace(SS_LONG_MS));
	wait_us = kt_now_us();
	kt_send(s.c, "LOCK s1 timeout=%" PRId64, wait);
	ss_wait_queued(ob, 1, "sess-0");
	kt_send(p, "LOCK s1 timeout=%" PRId64, kt_ms(60000));
	json_decref(kt_wait_queue(ob, "s1", 1, 2));
	ss_kill(a);

	/* the dead front end's wait leaves the queue at its deadline and
	 * the margin: the waiter behind it is next */
	deadline = wait_us / 1000 + (uint64_t)(wait + SS_REAP_MS + late);
	for (;;) {
		json_int_t n;

		info = kt_info(ob, "s1");
		n = kt_jint(info, "waiters_total");
		json_decref(info);
		if (n == 1)
			break;
		if (kt_now_ms() > deadline)
			kt_fail("the session's wait for s1 (timeout %" PRId64
			    " ms) still queued %" PRIu64 " ms after its LOCK, "
			    "with A dead", wait, kt_now_ms() - wait_us / 1000);
		kt_sleep_ms(20);
	}
	gone_us = kt_now_us();
	ck_assert_msg(gone_us >= wait_us + (uint64_t)(wait + SS_REAP_MS) *
	    1000, "the session's wait went %" PRIu64 " ms after its LOCK, "
	    "before its deadline and the margin", (gone_us - wait_us) / 1000);
	ck_assert_int_ge(ss_log_count(b, "outlived its deadline"), 1);
	kt_wait_stat(ob, "etcd_reaped", 1);	/* one wait */
	kt_req(q, "OK 1", "UNLOCK s1");
	kt_recv_within(p, kt_ms(5000));
	ck_assert_msg(kt_line_token(p, &(uint64_t){ 0 }), "the waiter behind "
	    "the session's: %s", p->line);
	/* as backend local's detached session: in neither, nothing
	 * follows */
	ss_resume_empty(&s, b);
	kt_req(p, "OK 1", "UNLOCK s1");
	kt_wait_stat(ob, "keys", 0);
	fprintf(stderr, "A SIGKILLed with a session's wait (timeout=%" PRId64
	    "): it left B's queue %" PRIu64 " ms after its LOCK (deadline + "
	    "reap margin %d ms)\n", wait, (gone_us - wait_us) / 1000,
	    SS_REAP_MS);
}
END_TEST

/*
 * keylockd(8), BACKEND ETCD: a plain connection's hold, like a session's,
 * ends at its ttl (as REFRESHed) plus the reap margin when its front end
 * dies: every REFRESH is written to etcd, so the other front ends count
 * the same ttl (INFO through B shows it) and B deletes the hold then,
 * not when A's lease goes (30 s here: between 20 and 30 s after the
 * kill). Before, such a hold lasted until A's lease ended.
 */
START_TEST(a_dead_front_ends_plain_hold_ends_at_its_refreshed_ttl)
{
	struct kt_daemon	*a = et_fe_start(NULL, "30", SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, "30", SS_TIMEOUT);
	struct kt_conn		*c = kt_connect_to(a, KT_TCP);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	int64_t			 ttl = kt_ms(2000), ttl2 = kt_ms(3000), x = 0;
	int64_t			 late = kt_ms(1500);
	uint64_t		 r0, r1, kill_us, now, deadline;
	json_t			*h;

	kt_req(c, "OK", "NAME plain");
	kt_lock(c, "LOCK s3 ttl=%" PRId64, ttl);
	kt_sleep_ms((uint64_t)ttl / 2);
	r0 = kt_now_us();
	kt_req(c, "OK 1", "REFRESH s3 ttl=%" PRId64, ttl2);
	r1 = kt_now_us();
	/* B counts the new ttl: more than the grant has left */
	deadline = kt_now_ms() + (uint64_t)kt_ms(5000);
	for (;;) {
		h = ss_holder_of(ob, "s3", "B");
		x = kt_jint(h, "expires_in_ms");
		json_decref(h);
		if (x > ttl)
			break;
		if (kt_now_ms() > deadline)
			kt_fail("B never saw the plain connection's REFRESH to %"
			    PRId64 " ms: s3 expires in %" PRId64 " ms", ttl2, x);
		kt_sleep_ms(20);
	}
	kt_send(p, "LOCK s3 timeout=%" PRId64, kt_ms(60000));
	json_decref(kt_wait_queue(ob, "s3", 1, 1));
	kill_us = kt_now_us();
	ss_kill(a);
	kt_recv_within(p, ttl2 + SS_REAP_MS + late + kt_ms(5000));
	now = kt_now_us();
	ck_assert_msg(kt_line_token(p, &(uint64_t){ 0 }), "B's waiter for s3: "
	    "%s", p->line);
	ck_assert_msg(now >= r0 + (uint64_t)(ttl2 + SS_REAP_MS) * 1000,
	    "s3 (refreshed to %" PRId64 " ms) reaped %" PRIu64 " ms after its "
	    "REFRESH, before the margin of %d ms", ttl2, (now - r0) / 1000,
	    SS_REAP_MS);
	ck_assert_msg(now <= r1 + (uint64_t)(ttl2 + SS_REAP_MS + late) * 1000,
	    "s3 (refreshed to %" PRId64 " ms) ended %" PRIu64 " ms after its "
	    "REFRESH, with A dead", ttl2, (now - r1) / 1000);
	ck_assert_int_ge(ss_log_count(b, "outlived its ttl"), 1);
	kt_wait_stat(ob, "etcd_reaped", 1);
	kt_req(p, "OK 1", "UNLOCK s3");
	kt_wait_stat(ob, "keys", 0);
	fprintf(stderr, "a plain connection's hold REFRESHed to %" PRId64
	    " ms (B's expires_in_ms %" PRId64 "), A SIGKILLed %" PRIu64 " ms "
	    "after: B's waiter granted %" PRIu64 " ms after the REFRESH (ttl + "
	    "reap margin %d ms; A's lease is 30 s)\n", ttl2, x,
	    (kill_us - r1) / 1000, (now - r0) / 1000, SS_REAP_MS);
}
END_TEST

/* Both front ends alive: the owner's front end ends the hold at its ttl,
 * counts it once (expired 1 there, 0 on B), and B deletes nothing. */
START_TEST(a_live_front_end_ends_its_own_ttl)
{
	struct kt_daemon	*a = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, SS_TTL, SS_TIMEOUT);
	struct kt_conn		*p = kt_connect_to(b, KT_TCP);
	struct kt_conn		*oa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct ss_sess		 s;
	int64_t			 ttl = kt_ms(2000);
	uint64_t		 locked_us, now;

	ss_open(&s, 0, a, ss_grace(SS_LONG_MS));
	kt_lock(s.c, "LOCK s2 ttl=%" PRId64, ttl);
	locked_us = kt_now_us();
	kt_send(p, "LOCK s2 timeout=%" PRId64, kt_ms(60000));
	kt_recv_within(p, ttl + kt_ms(5000));
	now = kt_now_us();
	ck_assert_msg(kt_line_token(p, &(uint64_t){ 0 }), "B's waiter for s2: "
	    "%s", p->line);
	/* by A, before B's margin could have run out */
	ck_assert_msg(now < locked_us + (uint64_t)(ttl + SS_REAP_MS) * 1000,
	    "s2 (ttl %" PRId64 " ms) ended %" PRIu64 " ms after its grant: "
	    "not by A", ttl, (now - locked_us) / 1000);
	kt_wait_stat(oa, "expired", 1);
	/* past B's margin: nothing more, on either */
	kt_sleep_ms((uint64_t)SS_REAP_MS + 1000);
	ck_assert_int_eq(kt_stat(oa, "expired"), 1);
	ck_assert_int_eq(kt_stat(ob, "expired"), 0);
	ck_assert_int_eq(ss_log_count(b, "outlived its"), 0);
	ck_assert_int_eq(ss_log_count(a, "outlived its"), 0);
	ck_assert_int_eq(kt_stat(oa, "etcd_reaped"), 0);
	ck_assert_int_eq(kt_stat(ob, "etcd_reaped"), 0);
	kt_req_err(s.c, "NOTHELD", "UNLOCK s2");
	kt_req(s.c, "OK", "QUIT");
	kt_req(p, "OK 1", "UNLOCK s2");
	kt_wait_stat(ob, "keys", 0);
	fprintf(stderr, "both alive: s2 (ttl=%" PRId64 ") ended by A %" PRIu64
	    " ms after its grant; expired 1 on A, 0 on B; B reaped nothing\n",
	    ttl, (now - locked_us) / 1000);
}
END_TEST

/*
 * keylockd-protocol(7), SESSIONS: Across front ends: a session's REFRESH
 * through backend etcd is answered once etcd has it, as a LOCK is. With
 * every member stopped it is ERR BACKEND within etcd-timeout (before, it
 * was OK at once, and the other front ends would have ended the hold at
 * its old ttl), the hold keeps its old ttl, and a PING sent behind it is
 * answered after it, in order; once etcd answers again, a REFRESH is OK
 * and the other front end's INFO shows the new ttl.
 */
START_TEST(a_session_refresh_is_answered_once_etcd_has_it)
{
	/* the default lease TTL, 15 s: the front ends keep their leases
	 * while the members are stopped */
	struct kt_daemon	*a = et_fe_start(NULL, NULL, SS_TIMEOUT);
	struct kt_daemon	*b = et_fe_start(NULL, NULL, SS_TIMEOUT);
	struct kt_conn		*oa = kt_connect_to(a, KT_TCP);
	struct kt_conn		*ob = kt_connect_to(b, KT_TCP);
	struct ss_sess		 s;
	int64_t			 ttl = kt_ms(20000), ttl2 = kt_ms(60000);
	int64_t			 ttl3 = kt_ms(90000), x;
	uint64_t		 sent_us, err_us, deadline;
	json_t			*h;
	char			 line[256];

	ss_open(&s, 0, a, ss_grace(SS_LONG_MS));
	kt_lock(s.c, "LOCK s0 ttl=%" PRId64, ttl);
	json_decref(ss_holder_of(ob, "s0", "B"));
	for (int i = 1; i <= 3; i++)
		et_member("stop", i);
	sent_us = kt_now_us();
	kt_send(s.c, "REFRESH s0 ttl=%" PRId64, ttl2);
	kt_send(s.c, "PING");
	kt_recv_within(s.c, 900 + kt_ms(3000));
	err_us = kt_now_us();
	snprintf(line, sizeof(line), "%s", s.c->line);
	kt_recv_within(s.c, kt_ms(2000));
	for (int i = 1; i <= 3; i++)
		et_member("cont", i);
	ck_assert_msg(strncmp(line, "ERR BACKEND ", 12) == 0, "REFRESH with "
	    "every member stopped: %s, want ERR BACKEND", line);
	ck_assert_msg(strcmp(s.c->line, "OK PONG") == 0, "the PING sent "
	    "behind the REFRESH: %s, want OK PONG after it", s.c->line);
	/* the old ttl on the owner's front end, which ends it; B may show
	 * the new one: a stopped member may carry out the put when it is
	 * back, as etcd may any try given up on it */
	h = ss_holder_of(oa, "s0", "A");
	x = kt_jint(h, "expires_in_ms");
	json_decref(h);
	ck_assert_msg(x <= ttl, "A after the failed REFRESH: s0 expires in %"
	    PRId64 " ms, more than its ttl of %" PRId64, x, ttl);
	/* once etcd answers again: made, and seen through B */
	kt_req(s.c, "OK 1", "REFRESH s0 ttl=%" PRId64, ttl3);
	deadline = kt_now_ms() + (uint64_t)kt_ms(5000);
	for (;;) {
		h = ss_holder_of(ob, "s0", "B");
		x = kt_jint(h, "expires_in_ms");
		json_decref(h);
		if (x > ttl2)
			break;
		if (kt_now_ms() > deadline)
			kt_fail("B never saw the REFRESH to %" PRId64 " ms: s0 "
			    "expires in %" PRId64 " ms", ttl3, x);
		kt_sleep_ms(20);
	}
	h = ss_holder_of(oa, "s0", "A");
	ck_assert_int_gt(kt_jint(h, "expires_in_ms"), ttl2);
	json_decref(h);
	kt_req(s.c, "OK 1", "UNLOCK s0");
	kt_req(s.c, "OK", "QUIT");
	kt_wait_stat(ob, "keys", 0);
	fprintf(stderr, "REFRESH with every member stopped: %s after %" PRIu64
	    " ms (etcd-timeout %s ms), PING after it; once etcd was back, OK "
	    "1 and B's expires_in_ms %" PRId64 " of %" PRId64 "\n", line,
	    (err_us - sent_us) / 1000, SS_TIMEOUT, x, ttl3);
}
END_TEST

static Suite *
sessions_suite(void)
{
	Suite	*s = suite_create("etcd_sessions");
	TCase	*tc = tcase_create("across_front_ends");

	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc,
	    sessions_resume_through_another_front_end_after_a_kill);
	tcase_add_test(tc,
	    a_session_left_alone_goes_grace_after_the_kill_not_before);
	tcase_add_test(tc, two_resumes_at_once_one_wins);
	tcase_add_test(tc, resume_after_an_answered_unlock_lists_what_is_left);
	tcase_add_test(tc, a_resume_whose_connection_closes_leaves_the_session);
	tcase_add_test(tc,
	    a_sessions_channels_resume_through_another_front_end);
	suite_add_tcase(s, tc);
	/* CK_RUN_CASE=as_local: these alone */
	tc = tcase_create("as_local");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, info_through_another_front_end_shows_detached_ms);
	tcase_add_test(tc, resume_through_another_front_end_keeps_the_name);
	tcase_add_test(tc, session_after_locks_covers_them);
	tcase_add_test(tc, a_front_end_started_later_shows_the_session);
	tcase_add_test(tc,
	    a_ttl_and_a_deadline_survive_resume_through_another_front_end);
	tcase_add_test(tc,
	    a_refresh_goes_with_the_session_to_another_front_end);
	suite_add_tcase(s, tc);
	/* CK_RUN_CASE=refresh: this alone */
	tc = tcase_create("refresh");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, a_session_refresh_is_answered_once_etcd_has_it);
	suite_add_tcase(s, tc);
	/* CK_RUN_CASE=reap: these alone */
	tc = tcase_create("reap");
	tcase_add_checked_fixture(tc, et_setup, kt_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, a_dead_front_ends_session_grant_ends_at_its_ttl);
	tcase_add_test(tc, a_dead_front_ends_session_wait_ends_at_its_deadline);
	tcase_add_test(tc,
	    a_dead_front_ends_plain_hold_ends_at_its_refreshed_ttl);
	tcase_add_test(tc, a_live_front_end_ends_its_own_ttl);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "sessions_test",
	.init = ss_init,
	.done = et_done,
	.suites = { sessions_suite, NULL }
};
