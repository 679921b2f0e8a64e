/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The SESSIONS section of the live-upgrade state (ks_sessions.h). The
 * reader checks each record whole before it hands it on: a session that
 * is attached names no owner and keeps no channel (its connection holds
 * them); a detached one names an owner the table has and nobody claimed,
 * and deadlines no further than its grace (or the longest delay) from the
 * freeze; one in its lock-delay waits for nothing.
 *
 * SESSIONS section, state version 2:
 *   u32 sessions, each: bytes raw (24), u64 client, u8 state,
 *     u8 transport, u64 grace, u64 since, u64 detached, u64 expires,
 *     u64 wait deadline, u32 owner, str peer, str name, str user,
 *     u32 channels, each: u32 number, u32 owner, u64 wait deadline.
 */
#include <string.h>

#include "ks_sessions.h"
#include "kstate.h"
#include "locktable.h"

#define KS_SESSION_MIN	98	/* bytes of the smallest record */
#define KS_CHAN_MIN	16

void
ks_session_put(struct ks_writer *w, const struct ks_session *s)
{
	ks_put_bytes(w, s->raw, sizeof(s->raw));
	ks_put_u64(w, s->client);
	ks_put_u8(w, s->state);
	ks_put_u8(w, s->transport);
	ks_put_u64(w, s->grace_ms);
	ks_put_u64(w, s->since_ms);
	ks_put_u64(w, s->detached_ms);
	ks_put_u64(w, s->expires_ms);
	ks_put_u64(w, s->wait_deadline_ms);
	ks_put_u32(w, s->owner);
	ks_put_str(w, s->peer);
	ks_put_str(w, s->name);
	ks_put_str(w, s->user);
	ks_put_u32(w, s->nchans);
}

void
ks_session_put_chan(struct ks_writer *w, const struct ks_session_chan *ch)
{
	ks_put_u32(w, ch->n);
	ks_put_u32(w, ch->owner);
	ks_put_u64(w, ch->wait_deadline_ms);
}

/* A string into buf (size bytes with its NUL); *out is NULL for the
 * writer's NULL when nullable. No NUL inside. */
static bool
ks_session_str(struct ks_reader *r, char *buf, size_t size, bool nullable,
    const char **out)
{
	const void	*p;
	size_t		 n, save = r->off;

	*out = NULL;
	if (ks_get_u32(r) == UINT32_MAX && !r->bad) {
		if (!nullable)
			return ks_fail(r, "a session without a peer");
		return true;
	}
	r->off = save;
	if ((p = ks_get_bytes(r, &n, size - 1)) == NULL)
		return false;
	if (memchr(p, '\0', n) != NULL)
		return ks_fail(r, "a session's string holds a NUL");
	memcpy(buf, p, n);
	buf[n] = '\0';
	*out = buf;
	return true;
}

/* The owner at index i, claimed now. */
static struct lt_owner *
ks_session_owner(struct ks_reader *r, struct lt_owner **owners,
    size_t nowners, uint32_t i, uint64_t client)
{
	struct lt_owner	*o;

	if (r->bad)
		return NULL;
	if (i >= nowners || owners[i] == NULL) {
		ks_fail(r, "session of client %llu: owner %u is not free",
		    (unsigned long long)client, i);
		return NULL;
	}
	o = owners[i];
	owners[i] = NULL;
	return o;
}

/* A deadline no later than limit past the freeze (0 is none). */
static bool
ks_deadline_ok(uint64_t at, uint64_t freeze_ms, uint64_t limit)
{
	return at <= freeze_ms || at - freeze_ms <= limit;
}

static bool
ks_session_get(struct ks_reader *r, const struct ks_sessions_limits *lim,
    struct ks_session *s)
{
	const void	*raw;
	size_t		 n;

	memset(s, 0, offsetof(struct ks_session, peerbuf));
	if ((raw = ks_get_bytes(r, &n, sizeof(s->raw))) == NULL)
		return false;
	if (n != sizeof(s->raw))
		return ks_fail(r, "a session ID of %zu bytes", n);
	memcpy(s->raw, raw, n);
	s->client = ks_get_u64(r);
	s->state = ks_get_u8(r);
	s->transport = ks_get_u8(r);
	s->grace_ms = ks_get_u64(r);
	s->since_ms = ks_get_u64(r);
	s->detached_ms = ks_get_u64(r);
	s->expires_ms = ks_get_u64(r);
	s->wait_deadline_ms = ks_get_u64(r);
	s->owner = ks_get_u32(r);
	if (!ks_session_str(r, s->peerbuf, sizeof(s->peerbuf), false,
	    &s->peer) ||
	    !ks_session_str(r, s->namebuf, sizeof(s->namebuf), true,
	    &s->name) ||
	    !ks_session_str(r, s->userbuf, sizeof(s->userbuf), true,
	    &s->user))
		return false;
	s->nchans = ks_get_count(r, KS_CHAN_MIN);
	if (r->bad)
		return false;
	if (s->client == 0 || s->state > KS_SESSION_DELAY ||
	    s->transport > lim->transport_max)
		return ks_fail(r, "session of client %llu: state %u, "
		    "transport %u", (unsigned long long)s->client, s->state,
		    s->transport);
	if (s->grace_ms == 0 || s->grace_ms > KL_MS_MAX ||
	    s->since_ms > lim->freeze_ms)
		return ks_fail(r, "session of client %llu: a grace of %llu "
		    "ms, or opened after the freeze",
		    (unsigned long long)s->client,
		    (unsigned long long)s->grace_ms);
	if (s->state == KS_SESSION_ATTACHED) {
		if (s->owner != KS_NO_OWNER || s->nchans != 0 ||
		    s->detached_ms != 0 || s->expires_ms != 0 ||
		    s->wait_deadline_ms != 0)
			return ks_fail(r, "session of client %llu: attached, "
			    "and holding what its connection holds",
			    (unsigned long long)s->client);
		return true;
	}
	if (s->detached_ms > lim->freeze_ms || !ks_deadline_ok(s->expires_ms,
	    lim->freeze_ms, s->state == KS_SESSION_DETACHED ? s->grace_ms :
	    KL_MS_MAX) || !ks_deadline_ok(s->wait_deadline_ms, lim->freeze_ms,
	    KL_MS_MAX) || (s->state == KS_SESSION_DELAY &&
	    s->wait_deadline_ms != 0))
		return ks_fail(r, "session of client %llu: deadlines out of "
		    "bounds", (unsigned long long)s->client);
	if (s->nchans > lim->max_channels)
		return ks_fail(r, "session of client %llu: %u channels",
		    (unsigned long long)s->client, s->nchans);
	return true;
}

bool
ks_sessions_read(struct ks_reader *r, const struct ks_sessions_limits *lim,
    struct lt_owner **owners, size_t nowners,
    bool (*session)(void *, const struct ks_session *, struct lt_owner *),
    bool (*chan)(void *, const struct ks_session *,
    const struct ks_session_chan *, struct lt_owner *), void *arg)
{
	struct ks_session	 s;
	struct ks_session_chan	 ch;
	struct lt_owner		*o;
	uint32_t		 n, last;

	n = ks_get_count(r, KS_SESSION_MIN);
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		if (!ks_session_get(r, lim, &s))
			return false;
		o = NULL;
		if (s.state != KS_SESSION_ATTACHED) {
			if ((o = ks_session_owner(r, owners, nowners, s.owner,
			    s.client)) == NULL)
				return false;
			if (s.state == KS_SESSION_DELAY &&
			    locktable_owner_is_waiting(o))
				return ks_fail(r, "session of client %llu: "
				    "waiting in its lock-delay",
				    (unsigned long long)s.client);
		}
		if (!session(arg, &s, o))
			return ks_fail(r, "out of memory");
		last = 0;
		for (uint32_t j = 0; j < s.nchans && !r->bad; j++) {
			ch.n = ks_get_u32(r);
			ch.owner = ks_get_u32(r);
			ch.wait_deadline_ms = ks_get_u64(r);
			if (r->bad)
				return false;
			if (ch.n <= last || !ks_deadline_ok(
			    ch.wait_deadline_ms, lim->freeze_ms, KL_MS_MAX) ||
			    (s.state == KS_SESSION_DELAY &&
			    ch.wait_deadline_ms != 0))
				return ks_fail(r, "session of client %llu: "
				    "channel %u out of place or bounds",
				    (unsigned long long)s.client, ch.n);
			last = ch.n;
			if ((o = ks_session_owner(r, owners, nowners,
			    ch.owner, s.client)) == NULL)
				return false;
			if (s.state == KS_SESSION_DELAY &&
			    locktable_owner_is_waiting(o))
				return ks_fail(r, "session of client %llu: "
				    "channel %u waiting in its lock-delay",
				    (unsigned long long)s.client, ch.n);
			if (!chan(arg, &s, &ch, o))
				return ks_fail(r, "out of memory");
		}
	}
	return !r->bad;
}
