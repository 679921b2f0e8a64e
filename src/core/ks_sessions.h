/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The SESSIONS section of the live-upgrade state (kstate.h; HACKING.md,
 * Live upgrade): every session, attached or detached, as session.c keeps
 * it, with its lock owners named by their index in the TABLE section. The
 * writer puts what it is given; the reader is a parser of untrusted bytes
 * that checks every field against the limits and the table it is given
 * (an owner is claimed once, a waiting owner is not in its lock-delay)
 * before it hands a record on. Pure: no clock, no event, no allocation.
 */
#ifndef KS_SESSIONS_H
#define KS_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl.h"

struct ks_reader;
struct ks_writer;
struct lt_owner;

#define KS_SESSION_RAW		24	/* the ID's random bytes */
#define KS_SESSION_PEER_MAX	63	/* bytes of a peer's text */
#define KS_NO_OWNER		UINT32_MAX

enum ks_session_state {
	KS_SESSION_ATTACHED = 0,	/* its connection holds its owners */
	KS_SESSION_DETACHED,		/* it holds them, for its grace */
	KS_SESSION_DELAY		/* ended, its keys held for lock-delay */
};

/* One session. The strings are NUL-terminated: the writer's point to
 * the session's, the reader's into the record's buffers. */
struct ks_session {
	unsigned char	 raw[KS_SESSION_RAW];
	uint64_t	 client;
	uint64_t	 grace_ms;
	uint64_t	 since_ms;
	uint64_t	 detached_ms;	/* attached: 0 */
	uint64_t	 expires_ms;	/* attached: 0 */
	uint64_t	 wait_deadline_ms; /* channel 0's waiting LOCK; 0 none */
	uint32_t	 owner;		/* attached: KS_NO_OWNER */
	uint32_t	 nchans;	/* kept channels besides 0 */
	uint8_t		 state;		/* enum ks_session_state */
	uint8_t		 transport;	/* its last connection's */
	const char	*peer;
	const char	*name;		/* NULL: none */
	const char	*user;		/* NULL: none */
	char		 peerbuf[KS_SESSION_PEER_MAX + 1];
	char		 namebuf[KL_NAME_MAX + 1];
	char		 userbuf[KL_NAME_MAX + 1];
};

/* A channel a detached session keeps; written in increasing n. */
struct ks_session_chan {
	uint32_t	 n;
	uint32_t	 owner;
	uint64_t	 wait_deadline_ms;	/* 0: none */
};

/* The section: a u32 count, then each session followed by its
 * channels. */
void		 ks_session_put(struct ks_writer *w, const struct ks_session *s);
void		 ks_session_put_chan(struct ks_writer *w,
		    const struct ks_session_chan *ch);

struct ks_sessions_limits {
	uint64_t	 freeze_ms;	/* when the writer froze */
	uint64_t	 max_channels;	/* per session, besides 0 */
	uint8_t		 transport_max;
};

/*
 * Reads the section from r. owners[0..nowners) are the TABLE's; each one
 * a session claims is set to NULL there, so that nothing else can claim
 * it. session(arg, s, owner) takes each record (owner is NULL while
 * attached), then chan(arg, s, ch, owner) each of its channels; either
 * returns false when it runs out of memory. false with the reason in
 * r->why; records handed on before stay the callbacks'.
 */
bool		 ks_sessions_read(struct ks_reader *r,
		    const struct ks_sessions_limits *lim,
		    struct lt_owner **owners, size_t nowners,
		    bool (*session)(void *arg, const struct ks_session *s,
		    struct lt_owner *owner),
		    bool (*chan)(void *arg, const struct ks_session *s,
		    const struct ks_session_chan *ch, struct lt_owner *owner),
		    void *arg);

#endif /* KS_SESSIONS_H */
