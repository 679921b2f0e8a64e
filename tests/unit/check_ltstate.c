/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of the live-upgrade state (kstate.h) and of the lock table in
 * it (lt_state.c): a table with every kind of entry (plain, shared,
 * semaphore, multi-key waits with and without ttl, holds in several
 * grants) is written, read into a fresh table with another hash seed, and
 * the two are compared through the table's own views; the rebuilt table
 * then goes on (a release grants the next waiter in order, a ttl runs out
 * when it should). The SESSIONS section (ks_sessions.c) rides along:
 * an attached session, a detached one with kept channels (one waiting)
 * and one in its lock-delay come back field for field, each claiming the
 * table's owner it named. The reader refuses every truncation, a changed
 * version, trailing bytes, forged counts and forged sessions, and never
 * crashes on a flipped byte.
 */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "ks_sessions.h"
#include "kstate.h"
#include "locktable.h"
#include "util.h"

#define NOW		1000000
#define MAXOWN		8

struct side {
	struct locktable	*lt;
	struct lt_owner		*ow[MAXOWN];
	size_t			 now;
	uint64_t		 granted[MAXOWN];	/* last token by hook */
	uint64_t		 tok;		/* the next range's first */
	uint32_t		 index[MAXOWN];	/* by id - 10: in the state */
};

/* Tokens in ranges of 5 from each side's own counter. */
static uint64_t
reserve(void *arg, uint64_t *end)
{
	struct side	*s = arg;
	uint64_t	 first = s->tok;

	*end = s->tok = first + 5;
	return first;
}

static void
granted(void *arg, struct lt_owner *o, uint64_t token, uint64_t waited)
{
	struct side	*s = arg;

	(void)waited;
	s->granted[locktable_owner_id(o) % MAXOWN] = token;
}

static void
side_init(struct side *s, uint64_t seed)
{
	struct lt_hooks	h = { granted, NULL, s, NULL };

	memset(s, 0, sizeof(*s));
	s->tok = 100;
	s->lt = locktable_new(&h, seed);
	ck_assert_ptr_nonnull(s->lt);
	locktable_reserve_tokens(s->lt, reserve);
}

static void
side_free(struct side *s)
{
	for (size_t i = 0; i < s->now; i++)
		locktable_owner_free(s->lt, s->ow[i], NOW);
	locktable_free(s->lt);
}

/* The owner with this id. */
static struct lt_owner *
own(struct side *s, uint64_t id)
{
	for (size_t i = 0; i < s->now; i++)
		if (locktable_owner_id(s->ow[i]) == id)
			return s->ow[i];
	ck_abort_msg("no owner %" PRIu64, id);
	return NULL;
}

static enum kl_err
acq(struct side *s, int o, const char *keys, enum lt_mode mode,
    uint32_t limit, uint64_t ttl, uint64_t now, bool *g)
{
	const char	*p[8];
	size_t		 len[8], n = 0;
	char		 buf[128], *save, *t;
	struct lt_acquire a;
	uint64_t	 tok;
	bool		 gr;

	snprintf(buf, sizeof(buf), "%s", keys);
	for (t = strtok_r(buf, " ", &save); t != NULL;
	    t = strtok_r(NULL, " ", &save)) {
		p[n] = t;
		len[n++] = strlen(t);
	}
	memset(&a, 0, sizeof(a));
	a.keys = p;
	a.keylens = len;
	a.nkeys = n;
	a.mode = mode;
	a.limit = limit;
	a.max_waiters = -1;
	a.ttl_ms = ttl;
	return locktable_acquire(s->lt, s->ow[o], &a, now, g != NULL ? g :
	    &gr, &tok, NULL);
}

/* Owner 0 to 5 and a mix of everything the table holds. */
static void
populate(struct side *s)
{
	bool	g;

	for (int i = 0; i < 6; i++)
		s->ow[s->now++] = locktable_owner_new(s->lt, 10 + i, NULL);
	ck_assert_int_eq(acq(s, 0, "a", LT_EXCLUSIVE, 1, 0, NOW, &g), KL_OK);
	ck_assert(g);
	ck_assert_int_eq(acq(s, 0, "b c", LT_EXCLUSIVE, 1, 5000, NOW + 1,
	    &g), KL_OK);
	ck_assert_int_eq(acq(s, 1, "sh", LT_SHARED, 1, 0, NOW + 2, &g),
	    KL_OK);
	ck_assert_int_eq(acq(s, 2, "sh", LT_SHARED, 1, 700, NOW + 3, &g),
	    KL_OK);
	ck_assert_int_eq(acq(s, 1, "sem", LT_EXCLUSIVE, 3, 0, NOW + 4, &g),
	    KL_OK);
	ck_assert_int_eq(acq(s, 3, "sem", LT_EXCLUSIVE, 3, 0, NOW + 5, &g),
	    KL_OK);
	/* waits: 3 for a and b (ttl), 4 for c then a, 5 exclusive on sh */
	ck_assert_int_eq(acq(s, 3, "a b", LT_EXCLUSIVE, 1, 2000, NOW + 6,
	    &g), KL_OK);
	ck_assert(!g);
	ck_assert_int_eq(acq(s, 4, "c a", LT_EXCLUSIVE, 1, 0, NOW + 7, &g),
	    KL_OK);
	ck_assert(!g);
	ck_assert_int_eq(acq(s, 5, "sh", LT_EXCLUSIVE, 1, 0, NOW + 8, &g),
	    KL_OK);
	ck_assert(!g);
	ck_assert_ptr_null(locktable_check(s->lt));
}

/* A text picture of a key through the public views. */
struct pic {
	char	buf[4096];
	size_t	len;
};

static bool
pic_holder(void *arg, const struct lt_holder_view *v)
{
	struct pic	*p = arg;

	p->len += (size_t)snprintf(p->buf + p->len, sizeof(p->buf) - p->len,
	    " H%" PRIu64 ":%" PRIu64 ":%d:%" PRIu64 ":%" PRIu64,
	    locktable_owner_id(v->owner), v->token, (int)v->mode, v->held_ms,
	    v->expires_in_ms);
	return true;
}

static bool
pic_waiter(void *arg, const struct lt_waiter_view *v)
{
	struct pic	*p = arg;

	p->len += (size_t)snprintf(p->buf + p->len, sizeof(p->buf) - p->len,
	    " W%" PRIu64 ":%d:%" PRIu64 ":%zu", locktable_owner_id(v->owner),
	    (int)v->mode, v->waited_ms, v->nkeys);
	return true;
}

static bool
pic_own(void *arg, const struct lt_own_view *v)
{
	struct pic	*p = arg;

	p->len += (size_t)snprintf(p->buf + p->len, sizeof(p->buf) - p->len,
	    " O%.*s:%" PRIu64 ":%" PRIu64, (int)v->keylen, v->key, v->token,
	    v->expires_in_ms);
	return true;
}

static void
picture(struct side *s, struct pic *p, uint64_t now)
{
	static const char *const keys[] = { "a", "b", "c", "sh", "sem",
				    "none" };
	const struct lt_counters *c = locktable_counters(s->lt);
	struct lt_key_view	 v;
	const struct lt_key	*k;

	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		p->len += (size_t)snprintf(p->buf + p->len,
		    sizeof(p->buf) - p->len, "\n%s", keys[i]);
		if ((k = locktable_find(s->lt, keys[i], strlen(keys[i]))) ==
		    NULL)
			continue;
		locktable_key_view(k, &v);
		p->len += (size_t)snprintf(p->buf + p->len,
		    sizeof(p->buf) - p->len, " l%u h%zu w%zu m%" PRIu64
		    " t%" PRIu64, v.limit, v.nholders, v.nwaiters,
		    v.max_waiters, v.wait_ms_total);
		locktable_key_walk(s->lt, k, now, pic_holder, pic_waiter, p);
	}
	/* by id: the rebuilt side adopted them in the table's order */
	for (uint64_t id = 10; id < 10 + MAXOWN; id++)
		for (size_t i = 0; i < s->now; i++) {
			if (locktable_owner_id(s->ow[i]) != id)
				continue;
			p->len += (size_t)snprintf(p->buf + p->len,
			    sizeof(p->buf) - p->len, "\nowner %" PRIu64 " %d",
			    id, locktable_owner_is_waiting(s->ow[i]));
			locktable_owner_hold_walk(s->lt, s->ow[i], now,
			    pic_own, p);
		}
	p->len += (size_t)snprintf(p->buf + p->len, sizeof(p->buf) - p->len,
	    "\nkeys %" PRIu64 " held %" PRIu64 " waiting %" PRIu64
	    " grants %" PRIu64 " max %" PRIu64 " wait %" PRIu64 "/%" PRIu64
	    " next %" PRIu64, c->keys, c->held, c->waiting, c->grants,
	    c->max_waiters, kl_hist_count(&c->wait_ms),
	    kl_hist_count(&c->hold_ms),
	    locktable_next_expiry(s->lt));
}

static bool
adopt(void *arg, struct lt_owner *o)
{
	struct side	*s = arg;

	if (s->now == MAXOWN)
		return false;
	s->ow[s->now++] = o;
	return true;
}

/* ---- sessions ---- */

#define FREEZE		(NOW + 10)
#define NSESS		3

/* What a forged state gets wrong in its sessions. */
enum forge {
	FORGE_NONE = 0,
	FORGE_OWNER_TWICE,	/* two sessions name one owner */
	FORGE_ATTACHED_OWNER,	/* an attached session names an owner */
	FORGE_DELAY_WAITING,	/* a lock-delay session's owner waits */
	FORGE_GRACE_PAST,	/* expires after freeze + grace */
	FORGE_CHAN_ORDER,	/* channels not in increasing order */
	FORGE_SHORT_ID,		/* an ID of 23 bytes */
	FORGE_BAD_OWNER,	/* an owner index past the table's */
	FORGE_COUNT
};

static void
note(void *arg, struct lt_owner *o, uint32_t index)
{
	struct side	*s = arg;

	s->index[(locktable_owner_id(o) - 10) % MAXOWN] = index;
}

/* The sessions every state of these tests carries, over populate()'s
 * owners (ids 10 to 15): 0 attached (its connection holds its owner),
 * 1 detached with owner 11 and channels 1 (owner 12) and 7 (owner 15,
 * waiting), 2 in its lock-delay with owner 10. */
static void
sessions_expected(struct ks_session *ks, struct ks_session_chan *kc)
{
	memset(ks, 0, NSESS * sizeof(*ks));
	memset(kc, 0, 2 * sizeof(*kc));
	memset(ks[0].raw, 1, KS_SESSION_RAW);
	ks[0].client = 100;
	ks[0].state = KS_SESSION_ATTACHED;
	ks[0].transport = 1;
	ks[0].grace_ms = 5000;
	ks[0].since_ms = NOW - 10;
	ks[0].owner = KS_NO_OWNER;
	ks[0].peer = "unix";
	ks[0].user = "alice";
	memset(ks[1].raw, 2, KS_SESSION_RAW);
	ks[1].client = 11;
	ks[1].state = KS_SESSION_DETACHED;
	ks[1].grace_ms = 30000;
	ks[1].since_ms = NOW - 500;
	ks[1].detached_ms = NOW - 100;
	ks[1].expires_ms = NOW - 100 + 30000;
	ks[1].nchans = 2;
	ks[1].peer = "127.0.0.1:4000";
	ks[1].name = "b";
	kc[0].n = 1;
	kc[1].n = 7;
	kc[1].wait_deadline_ms = NOW + 900;
	memset(ks[2].raw, 3, KS_SESSION_RAW);
	ks[2].client = 10;
	ks[2].state = KS_SESSION_DELAY;
	ks[2].transport = 2;
	ks[2].grace_ms = 1000;
	ks[2].since_ms = NOW - 900;
	ks[2].detached_ms = NOW - 800;
	ks[2].expires_ms = NOW + 50;
	ks[2].peer = "x";
}

/* The owner (populate()'s position) each session and channel holds. */
static const int	sess_owner[NSESS] = { -1, 1, 0 };
static const int	chan_owner[2] = { 2, 5 };

static void
put_sessions(struct side *s, struct ks_writer *w, enum forge forge)
{
	struct ks_session	ks[NSESS];
	struct ks_session_chan	kc[2];

	if (s->now < 6) {	/* not populated: no session */
		ks_put_u32(w, 0);
		return;
	}
	sessions_expected(ks, kc);
	ks[1].owner = s->index[sess_owner[1]];
	ks[2].owner = s->index[sess_owner[2]];
	kc[0].owner = s->index[chan_owner[0]];
	kc[1].owner = s->index[chan_owner[1]];
	switch (forge) {
	case FORGE_OWNER_TWICE:
		ks[2].owner = ks[1].owner;
		break;
	case FORGE_ATTACHED_OWNER:
		ks[0].owner = s->index[3];
		break;
	case FORGE_DELAY_WAITING:
		ks[2].owner = s->index[4];	/* 14 waits for c and a */
		break;
	case FORGE_GRACE_PAST:
		ks[1].expires_ms = FREEZE + ks[1].grace_ms + 1;
		break;
	case FORGE_CHAN_ORDER:
		kc[1].n = 1;
		break;
	case FORGE_BAD_OWNER:
		kc[0].owner = (uint32_t)s->now;
		break;
	default:
		break;
	}
	ks_put_u32(w, NSESS);
	for (int i = 0; i < NSESS; i++) {
		if (forge == FORGE_SHORT_ID && i == 1) {
			/* the record by hand, its ID a byte short */
			ks_put_bytes(w, ks[i].raw, KS_SESSION_RAW - 1);
			ks_put_u64(w, ks[i].client);
			ks_put_u8(w, ks[i].state);
			ks_put_u8(w, ks[i].transport);
			for (int j = 0; j < 5; j++)
				ks_put_u64(w, 1);
			ks_put_u32(w, ks[i].owner);
			ks_put_str(w, "p");
			ks_put_str(w, NULL);
			ks_put_str(w, NULL);
			ks_put_u32(w, 0);
			continue;
		}
		ks_session_put(w, &ks[i]);
		for (uint32_t j = 0; j < ks[i].nchans; j++)
			ks_session_put_chan(w, &kc[j]);
	}
}

/* A whole state written from s: its table and the sessions, with the
 * sections between them empty. */
static void
write_state_forged(struct side *s, struct ks_writer *w, enum forge forge)
{
	ks_writer_init(w);
	ks_section_begin(w, KS_TAG_HANDOFF);
	ks_put_u64(w, 42);
	ks_section_begin(w, KS_TAG_TABLE);
	ck_assert(locktable_state_write(s->lt, w, note, s));
	ks_section_begin(w, KS_TAG_TOKEN);
	ks_section_begin(w, KS_TAG_STATS);
	ks_section_begin(w, KS_TAG_LISTENERS);
	ks_section_begin(w, KS_TAG_SESSIONS);
	put_sessions(s, w, forge);
	ck_assert(ks_writer_finish(w));
}

static void
write_state(struct side *s, struct ks_writer *w)
{
	write_state_forged(s, w, FORGE_NONE);
}

/* What the reader handed on. */
struct got {
	struct ks_session	 s[NSESS];
	struct lt_owner		*so[NSESS];
	struct ks_session_chan	 c[4];
	struct lt_owner		*co[4];
	size_t			 ns, nc;
};

static struct got	got;

static bool
got_session(void *arg, const struct ks_session *s, struct lt_owner *o)
{
	struct got	*g = arg;

	if (g->ns == NSESS)
		return false;
	g->so[g->ns] = o;
	g->s[g->ns++] = *s;
	return true;
}

static bool
got_chan(void *arg, const struct ks_session *s,
    const struct ks_session_chan *c, struct lt_owner *o)
{
	struct got	*g = arg;

	(void)s;
	if (g->nc == 4)
		return false;
	g->co[g->nc] = o;
	g->c[g->nc++] = *c;
	return true;
}

static bool
read_sessions(struct side *d, struct ks_reader *r, struct ks_reader *sect)
{
	struct ks_sessions_limits	 lim = { FREEZE, 16, 2 };
	struct lt_owner			*owners[MAXOWN];

	memset(&got, 0, sizeof(got));
	/* adopted in the table's order: ow[i] is owner i of the state */
	memcpy(owners, d->ow, d->now * sizeof(*owners));
	return ks_section_next(r, KS_TAG_TOKEN, sect) &&
	    ks_section_done(sect) &&
	    ks_section_next(r, KS_TAG_STATS, sect) && ks_section_done(sect) &&
	    ks_section_next(r, KS_TAG_LISTENERS, sect) &&
	    ks_section_done(sect) &&
	    ks_section_next(r, KS_TAG_SESSIONS, sect) &&
	    ks_sessions_read(sect, &lim, owners, d->now, got_session,
	    got_chan, &got) && ks_section_done(sect);
}

/*
 * With KL_LTSTATE_SEEDS=DIR set, the states the tests write are also
 * saved there as DIR/NAME-whole and DIR/NAME-table (the table section
 * alone): the seeds of tests/fuzz/corpus/ltstate.
 */
static void
save_seed(const struct ks_writer *w, const char *name)
{
	const char	*dir = getenv("KL_LTSTATE_SEEDS");
	char		 path[512];
	size_t		 table = KS_HEADER_LEN + KS_SECTION_HEAD + 8 +
			    KS_SECTION_HEAD, len = 0;
	FILE		*f;

	if (dir == NULL)
		return;
	snprintf(path, sizeof(path), "%s/%s-whole", dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(w->buf, 1, w->len, f), w->len);
	fclose(f);
	/* the table section's length, before its payload */
	for (int i = 0; i < 8; i++)
		len |= (size_t)w->buf[table - 8 + i] << (8 * i);
	snprintf(path, sizeof(path), "%s/%s-table", dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(w->buf + table, 1, len, f), len);
	fclose(f);
}

/* Reads buf into a fresh d; false with why. */
static bool
read_state(struct side *d, const void *buf, size_t len, uint64_t shift,
    char *why, size_t whylen)
{
	struct ks_reader	r, sect;
	uint64_t		next = 0;
	bool			ok;

	side_init(d, 777);
	ok = ks_reader_open(&r, buf, len) &&
	    ks_section_next(&r, KS_TAG_HANDOFF, &sect) &&
	    ks_get_u64(&sect) == 42 && ks_section_done(&sect) &&
	    ks_section_next(&r, KS_TAG_TABLE, &sect) &&
	    locktable_state_read(d->lt, &sect, shift, adopt, d, &next) &&
	    ks_section_done(&sect) && read_sessions(d, &r, &sect) &&
	    ks_reader_done(&r);
	snprintf(why, whylen, "%s", r.bad ? r.why : sect.why);
	if (ok) {
		/* a new process goes on from the state's next token */
		ck_assert_uint_gt(next, 0);
		d->tok = next;
	}
	else {
		/* a refused state: the table first, then its owners */
		locktable_free(d->lt);
		d->lt = NULL;
	}
	return ok;
}

/* The whole table again, and everything in it still works. */
START_TEST(round_trip_is_exact)
{
	struct side		 s, d;
	struct ks_writer	 w;
	struct pic		 a, b;
	char			 why[KS_WHY_MAX];
	size_t			 n;
	bool			 g;

	side_init(&s, 1);
	populate(&s);
	write_state(&s, &w);
	save_seed(&w, "mixed");
	ck_assert_msg(read_state(&d, w.buf, w.len, 0, why, sizeof(why)),
	    "%s", why);
	ck_assert_ptr_null(locktable_check(d.lt));
	picture(&s, &a, NOW + 100);
	picture(&d, &b, NOW + 100);
	ck_assert_msg(strcmp(a.buf, b.buf) == 0, "%s\n----%s", a.buf, b.buf);
	/* it goes on alike: owner 0 leaves, 3 (id 13) gets a and b
	 * together, 4 gets c and waits on for a behind 3 */
	locktable_release_owner(s.lt, own(&s, 10), NOW + 200, LT_WHY_UNLOCK);
	locktable_release_owner(d.lt, own(&d, 10), NOW + 200, LT_WHY_UNLOCK);
	picture(&s, &a, NOW + 300);
	picture(&d, &b, NOW + 300);
	ck_assert_msg(strcmp(a.buf, b.buf) == 0, "%s\n----%s", a.buf, b.buf);
	ck_assert_uint_gt(d.granted[13 % MAXOWN], 0);
	/* a ttl runs out at the same time in both */
	n = locktable_expire(d.lt, NOW + 6 + 1999);
	ck_assert_uint_eq(n, locktable_expire(s.lt, NOW + 6 + 1999));
	ck_assert_uint_eq(locktable_next_expiry(d.lt),
	    locktable_next_expiry(s.lt));
	for (n = 0; locktable_owner_id(d.ow[n]) != 10; n++)
		continue;
	ck_assert_int_eq(acq(&d, (int)n, "fresh", LT_EXCLUSIVE, 1, 0,
	    NOW + 400, &g), KL_OK);
	ck_assert(g);
	ck_assert_ptr_null(locktable_check(d.lt));
	ks_writer_cleanup(&w);
	side_free(&s);
	side_free(&d);
	/* every owner gone: nothing left */
}
END_TEST

/* The pause is added to every ttl, and nothing else moves. */
START_TEST(shift_extends_ttls_only)
{
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX];

	side_init(&s, 1);
	populate(&s);
	write_state(&s, &w);
	ck_assert_msg(read_state(&d, w.buf, w.len, 250, why, sizeof(why)),
	    "%s", why);
	ck_assert_uint_eq(locktable_next_expiry(d.lt),
	    locktable_next_expiry(s.lt) + 250);
	ks_writer_cleanup(&w);
	side_free(&s);
	side_free(&d);
}
END_TEST

/* A rebuilt table that has granted nothing since has no token range of
 * its own: it hands over again all the same (twice in a row). */
START_TEST(rebuilt_table_hands_over_again)
{
	struct side		 s, d, e;
	struct ks_writer	 w, w2;
	struct pic		 a, b;
	char			 why[KS_WHY_MAX];

	side_init(&s, 1);
	populate(&s);
	write_state(&s, &w);
	ck_assert_msg(read_state(&d, w.buf, w.len, 0, why, sizeof(why)),
	    "%s", why);
	write_state(&d, &w2);
	ck_assert_msg(read_state(&e, w2.buf, w2.len, 0, why, sizeof(why)),
	    "%s", why);
	picture(&s, &a, NOW + 100);
	picture(&e, &b, NOW + 100);
	ck_assert_msg(strcmp(a.buf, b.buf) == 0, "%s\n----%s", a.buf, b.buf);
	ck_assert_uint_gt(e.tok, 105);	/* above every token held */
	ks_writer_cleanup(&w);
	ks_writer_cleanup(&w2);
	side_free(&s);
	side_free(&d);
	side_free(&e);
}
END_TEST

START_TEST(empty_table_round_trips)
{
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX];

	side_init(&s, 1);
	write_state(&s, &w);
	save_seed(&w, "empty");
	ck_assert_msg(read_state(&d, w.buf, w.len, 0, why, sizeof(why)),
	    "%s", why);
	ck_assert_uint_eq(locktable_counters(d.lt)->keys, 0);
	ks_writer_cleanup(&w);
	side_free(&s);
	side_free(&d);
}
END_TEST

START_TEST(every_truncation_is_refused)
{
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX];
	unsigned char		*copy;

	side_init(&s, 1);
	populate(&s);
	write_state(&s, &w);
	for (size_t n = 0; n < w.len; n++) {
		/* a truthful total length, so that the sections are what
		 * is short */
		copy = malloc(n > 0 ? n : 1);
		memcpy(copy, w.buf, n);
		if (n >= KS_HEADER_LEN)
			for (int i = 0; i < 8; i++)
				copy[16 + i] = (unsigned char)(n >> (8 * i));
		ck_assert_msg(!read_state(&d, copy, n, 0, why, sizeof(why)),
		    "a state cut at %zu of %zu bytes was taken", n, w.len);
		ck_assert_str_ne(why, "");
		side_free(&d);
		free(copy);
	}
	ks_writer_cleanup(&w);
	side_free(&s);
}
END_TEST

START_TEST(other_versions_are_refused)
{
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX], mine[32];

	side_init(&s, 1);
	write_state(&s, &w);
	w.buf[8] = KS_VERSION + 1;
	ck_assert(!read_state(&d, w.buf, w.len, 0, why, sizeof(why)));
	snprintf(mine, sizeof(mine), "version %d", KS_VERSION);
	ck_assert_msg(strstr(why, mine) != NULL, "%s", why);
	side_free(&d);
	w.buf[8] = 0;
	ck_assert(!read_state(&d, w.buf, w.len, 0, why, sizeof(why)));
	side_free(&d);
	w.buf[8] = KS_VERSION;
	w.buf[0] = 'X';
	ck_assert(!read_state(&d, w.buf, w.len, 0, why, sizeof(why)));
	ck_assert_msg(strstr(why, "magic") != NULL, "%s", why);
	side_free(&d);
	ks_writer_cleanup(&w);
	side_free(&s);
}
END_TEST

/* A key written twice is refused, wherever the two are among the keys
 * the reader has read ahead of the hash table (LS_AHEAD in lt_state.c),
 * and every entry is freed (ASan, valgrind). */
START_TEST(a_key_twice_is_refused)
{
	static const size_t	 pairs[][2] = { { 0, 1 }, { 3, 20 },
				    { 0, 39 }, { 38, 39 }, { 5, 30 } };
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX], key[8];
	unsigned char		*p, *at[40];
	bool			 g;

	side_init(&s, 1);
	s.ow[s.now++] = locktable_owner_new(s.lt, 10, NULL);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "k%02d", i);
		ck_assert_int_eq(acq(&s, 0, key, LT_EXCLUSIVE, 1, 0, NOW, &g),
		    KL_OK);
	}
	write_state(&s, &w);
	for (size_t f = 0; f < sizeof(pairs) / sizeof(pairs[0]); f++) {
		/* each key's bytes in the state, by its number */
		for (p = w.buf + 4; p + 3 <= w.buf + w.len; p++)
			if (p[0] == 'k' && p[-4] == 3 && p[1] >= '0' &&
			    p[1] <= '3' && p[2] >= '0' && p[2] <= '9')
				at[(p[1] - '0') * 10 + (p[2] - '0')] = p;
		memcpy(at[pairs[f][1]], at[pairs[f][0]], 3);
		ck_assert(!read_state(&d, w.buf, w.len, 0, why, sizeof(why)));
		ck_assert_msg(strstr(why, "twice") != NULL, "%s", why);
		side_free(&d);
		snprintf(key, sizeof(key), "k%02zu", pairs[f][1]);
		memcpy(at[pairs[f][1]], key, 3);
		ck_assert(read_state(&d, w.buf, w.len, 0, why, sizeof(why)));
		side_free(&d);
	}
	ks_writer_cleanup(&w);
	side_free(&s);
}
END_TEST

START_TEST(trailing_bytes_are_refused)
{
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX];

	side_init(&s, 1);
	populate(&s);
	ks_writer_init(&w);
	ks_section_begin(&w, KS_TAG_HANDOFF);
	ks_put_u64(&w, 42);
	ks_section_begin(&w, KS_TAG_TABLE);
	ck_assert(locktable_state_write(s.lt, &w, note, &s));
	ks_section_begin(&w, KS_TAG_TOKEN);
	ks_section_begin(&w, KS_TAG_STATS);
	ks_section_begin(&w, KS_TAG_LISTENERS);
	ks_section_begin(&w, KS_TAG_SESSIONS);
	put_sessions(&s, &w, FORGE_NONE);
	ks_put_u8(&w, 0);
	ck_assert(ks_writer_finish(&w));
	ck_assert(!read_state(&d, w.buf, w.len, 0, why, sizeof(why)));
	ck_assert_msg(strstr(why, "left over") != NULL, "%s", why);
	side_free(&d);
	ks_writer_cleanup(&w);
	side_free(&s);
}
END_TEST

/* Every session comes back as written, with the owner it held. */
START_TEST(sessions_round_trip)
{
	struct side		 s, d;
	struct ks_writer	 w;
	struct ks_session	 ks[NSESS];
	struct ks_session_chan	 kc[2];
	char			 why[KS_WHY_MAX];

	side_init(&s, 1);
	populate(&s);
	write_state(&s, &w);
	ck_assert_msg(read_state(&d, w.buf, w.len, 0, why, sizeof(why)),
	    "%s", why);
	sessions_expected(ks, kc);
	ck_assert_uint_eq(got.ns, NSESS);
	ck_assert_uint_eq(got.nc, 2);
	for (int i = 0; i < NSESS; i++) {
		ck_assert_mem_eq(got.s[i].raw, ks[i].raw, KS_SESSION_RAW);
		ck_assert_uint_eq(got.s[i].client, ks[i].client);
		ck_assert_uint_eq(got.s[i].state, ks[i].state);
		ck_assert_uint_eq(got.s[i].transport, ks[i].transport);
		ck_assert_uint_eq(got.s[i].grace_ms, ks[i].grace_ms);
		ck_assert_uint_eq(got.s[i].since_ms, ks[i].since_ms);
		ck_assert_uint_eq(got.s[i].detached_ms, ks[i].detached_ms);
		ck_assert_uint_eq(got.s[i].expires_ms, ks[i].expires_ms);
		ck_assert_uint_eq(got.s[i].wait_deadline_ms,
		    ks[i].wait_deadline_ms);
		ck_assert_uint_eq(got.s[i].nchans, ks[i].nchans);
		ck_assert_str_eq(got.s[i].peerbuf, ks[i].peer);
		if (ks[i].name == NULL)
			ck_assert_ptr_null(got.s[i].name);
		else
			ck_assert_str_eq(got.s[i].namebuf, ks[i].name);
		if (ks[i].user == NULL)
			ck_assert_ptr_null(got.s[i].user);
		else
			ck_assert_str_eq(got.s[i].userbuf, ks[i].user);
		if (sess_owner[i] < 0)
			ck_assert_ptr_null(got.so[i]);
		else
			ck_assert_uint_eq(locktable_owner_id(got.so[i]),
			    10 + (uint64_t)sess_owner[i]);
	}
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(got.c[i].n, kc[i].n);
		ck_assert_uint_eq(got.c[i].wait_deadline_ms,
		    kc[i].wait_deadline_ms);
		ck_assert_uint_eq(locktable_owner_id(got.co[i]),
		    10 + (uint64_t)chan_owner[i]);
	}
	ck_assert(locktable_owner_is_waiting(got.co[1]));
	ks_writer_cleanup(&w);
	side_free(&s);
	side_free(&d);
}
END_TEST

/* Each forgery of the sessions is refused with a reason. */
START_TEST(forged_sessions_are_refused)
{
	static const char *const want[FORGE_COUNT] = {
		NULL, "not free", "attached", "lock-delay", "deadlines",
		"out of place", "ID of 23", "not free"
	};
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX];

	side_init(&s, 1);
	populate(&s);
	for (int f = FORGE_OWNER_TWICE; f < FORGE_COUNT; f++) {
		write_state_forged(&s, &w, (enum forge)f);
		ck_assert_msg(!read_state(&d, w.buf, w.len, 0, why,
		    sizeof(why)), "forgery %d was taken", f);
		ck_assert_msg(strstr(why, want[f]) != NULL,
		    "forgery %d: %s", f, why);
		side_free(&d);
		ks_writer_cleanup(&w);
	}
	side_free(&s);
}
END_TEST

/* Every byte after the header changed in turn: the reader refuses it or
 * builds a table that passes its check; it never crashes (ASan). */
START_TEST(flipped_bytes_never_break_the_table)
{
	struct side		 s, d;
	struct ks_writer	 w;
	char			 why[KS_WHY_MAX];
	static const unsigned char flips[] = { 0x01, 0x80, 0xff };

	side_init(&s, 1);
	populate(&s);
	write_state(&s, &w);
	for (size_t i = KS_HEADER_LEN; i < w.len; i++)
		for (size_t f = 0; f < sizeof(flips); f++) {
			w.buf[i] ^= flips[f];
			if (read_state(&d, w.buf, w.len, 0, why, sizeof(why)))
				ck_assert_ptr_null(locktable_check(d.lt));
			side_free(&d);
			w.buf[i] ^= flips[f];
		}
	ks_writer_cleanup(&w);
	side_free(&s);
}
END_TEST

static Suite *
ltstate_suite(void)
{
	Suite	*s = suite_create("ltstate");
	TCase	*tc;

	tc = tcase_create("round_trip");
	tcase_add_test(tc, round_trip_is_exact);
	tcase_add_test(tc, shift_extends_ttls_only);
	tcase_add_test(tc, rebuilt_table_hands_over_again);
	tcase_add_test(tc, empty_table_round_trips);
	tcase_add_test(tc, sessions_round_trip);
	suite_add_tcase(s, tc);
	tc = tcase_create("refusals");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, every_truncation_is_refused);
	tcase_add_test(tc, other_versions_are_refused);
	tcase_add_test(tc, trailing_bytes_are_refused);
	tcase_add_test(tc, a_key_twice_is_refused);
	tcase_add_test(tc, forged_sessions_are_refused);
	tcase_add_test(tc, flipped_bytes_never_break_the_table);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "check_ltstate",
	.suites = { ltstate_suite, NULL }
};
