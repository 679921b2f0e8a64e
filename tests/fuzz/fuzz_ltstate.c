/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fuzz harness for the live-upgrade state reader (kstate.c, lt_state.c,
 * ks_sessions.c): the input is a whole state (header and sections) and,
 * from the first byte after a valid header's place, the lock table's
 * section. Whatever the bytes, the reader either refuses them with a
 * reason or builds a table that passes locktable_check(); in a whole
 * state the sessions then claim owners of that table, each at most once;
 * the table serves (a LOCK, the ttls run out) and empties completely when
 * its owners leave. A refused state frees like any table (ASan and LSan
 * check both).
 */
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ks_sessions.h"
#include "kstate.h"
#include "locktable.h"
#include "util.h"

#define FL_OWNERS_MAX	4096

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fl_owners {
	struct lt_owner	*o[FL_OWNERS_MAX];
	size_t		 n;
};

static bool
fl_adopt(void *arg, struct lt_owner *o)
{
	struct fl_owners	*fo = arg;

	if (fo->n == FL_OWNERS_MAX)
		return false;
	fo->o[fo->n++] = o;
	return true;
}

/* A session or a channel: its owner was the table's, and is claimed
 * once. */
static bool
fl_session(void *arg, const struct ks_session *s, struct lt_owner *o)
{
	struct fl_owners	*fo = arg;
	bool			 known = false;

	assert(s->peer != NULL && strlen(s->peer) <= KS_SESSION_PEER_MAX);
	assert((o == NULL) == (s->state == KS_SESSION_ATTACHED));
	for (size_t i = 0; o != NULL && i < fo->n; i++)
		known |= fo->o[i] == o;
	assert(o == NULL || known);
	return true;
}

static bool
fl_chan(void *arg, const struct ks_session *s,
    const struct ks_session_chan *ch, struct lt_owner *o)
{
	assert(s->state != KS_SESSION_ATTACHED && ch->n > 0);
	return fl_session(arg, s, o) && o != NULL;
}

/* The sections after the table, in a whole state. */
static void
fl_sessions(struct ks_reader *whole, struct fl_owners *fo)
{
	static struct lt_owner		*owners[FL_OWNERS_MAX];
	struct ks_sessions_limits	 lim = { 1000000, 64, 2 };
	struct ks_reader		 sect;

	memcpy(owners, fo->o, fo->n * sizeof(*owners));
	if (!ks_section_next(whole, KS_TAG_TOKEN, &sect) ||
	    !ks_section_next(whole, KS_TAG_STATS, &sect) ||
	    !ks_section_next(whole, KS_TAG_LISTENERS, &sect) ||
	    !ks_section_next(whole, KS_TAG_SESSIONS, &sect))
		return;
	if (!ks_sessions_read(&sect, &lim, owners, fo->n, fl_session,
	    fl_chan, fo))
		assert(sect.bad && sect.why[0] != '\0');
}

static void
fl_table(struct ks_reader *r, struct ks_reader *whole)
{
	static struct fl_owners	 fo;
	struct locktable	*lt;
	struct lt_acquire	 a;
	const char		*key = "fuzz:fresh";
	size_t			 len = strlen(key);
	uint64_t		 next = 0, tok;
	bool			 ok, granted;

	fo.n = 0;
	if ((lt = locktable_new(NULL, 7)) == NULL)
		return;
	ok = locktable_state_read(lt, r, 3, fl_adopt, &fo, &next) &&
	    ks_section_done(r);
	if (!ok) {
		assert(r->bad && r->why[0] != '\0');
		locktable_free(lt);
		for (size_t i = 0; i < fo.n; i++)
			locktable_owner_free(NULL, fo.o[i], 0);
		return;
	}
	assert(locktable_check(lt) == NULL);
	if (whole != NULL)
		fl_sessions(whole, &fo);
	if (fo.n > 0 && !locktable_owner_is_waiting(fo.o[0])) {
		memset(&a, 0, sizeof(a));
		a.keys = &key;
		a.keylens = &len;
		a.nkeys = 1;
		a.limit = 1;
		a.max_waiters = -1;
		(void)locktable_acquire(lt, fo.o[0], &a, 5, &granted, &tok,
		    NULL);
		assert(locktable_check(lt) == NULL);
	}
	(void)locktable_expire(lt, UINT64_MAX - 1);
	assert(locktable_check(lt) == NULL);
	for (size_t i = 0; i < fo.n; i++)
		locktable_owner_free(lt, fo.o[i], UINT64_MAX - 1);
	assert(locktable_check(lt) == NULL);
	assert(locktable_counters(lt)->keys == 0);
	locktable_free(lt);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ks_reader	r, sect;

	/* a whole state: the header, then the table where it belongs */
	if (ks_reader_open(&r, data, size) &&
	    ks_section_next(&r, KS_TAG_HANDOFF, &sect) &&
	    ks_section_next(&r, KS_TAG_TABLE, &sect))
		fl_table(&sect, &r);
	/* and the bytes as a table section, past any header */
	memset(&sect, 0, sizeof(sect));
	sect.p = data;
	sect.len = size;
	if (size >= KS_HEADER_LEN && memcmp(data, KS_MAGIC,
	    KS_MAGIC_LEN) == 0)
		return 0;
	fl_table(&sect, NULL);
	return 0;
}
