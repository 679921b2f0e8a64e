/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The server's own counters and the JSON of STATS and INFO (jansson). The
 * lock table keeps its counters itself; this module adds the server's and
 * turns both into one line. It never touches a socket. Each counter of
 * struct stats has one writer: clients, connections, requests, errors,
 * output_closes and nomem_closes conn.c; auth_failures commands.c;
 * rejected_connections server.c.
 */
#ifndef STATS_H
#define STATS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "locktable.h"

#define KL_HOT_KEYS	10
#define KL_INFO_LIST_MAX 1000	/* holders and waiters INFO lists */
#define KL_CLIENTS_WAIT_KEYS 8	/* keys CLIENTS lists per waiting client */

struct stats {
	uint64_t	start_ms;
	uint64_t	clients;		/* open connections */
	uint64_t	connections;		/* accepted since start */
	uint64_t	rejected_connections;	/* over max-clients */
	uint64_t	requests;
	uint64_t	errors;			/* ERR replies */
	uint64_t	auth_failures;
	uint64_t	output_closes;		/* closed at max-output */
	uint64_t	nomem_closes;		/* closed: out of memory */
	uint64_t	auth_timeouts;		/* closed at auth-timeout */
	uint64_t	write_timeouts;		/* closed at write-timeout */
	uint64_t	idle_timeouts;		/* closed at idle-timeout */
	uint64_t	output_budget_closes;	/* closed at max-output-total */
	struct be_counters be;			/* the backend's */
	/* keylockd-protocol(7), SESSIONS; session.c writes them. */
	uint64_t	sessions;		/* open now, detached or not */
	uint64_t	sessions_detached;	/* detached now */
	uint64_t	sessions_resumed;	/* RESUMEs that took one */
	uint64_t	sessions_expired;	/* grace ran out */
	uint64_t	channels;		/* in use now, besides 0 */
	/* conn.c and session.c write them. */
	uint64_t	channel_bytes;		/* the channels' own memory */
	uint64_t	input_bytes;		/* input buffers, all clients */
	uint64_t	input_budget_waits;	/* not read: max-input-total */
	/* keylockd(8), LIVE UPGRADE; server_upgrade.c writes them. */
	uint64_t	pid;			/* this process */
	uint64_t	upgrades;		/* hand-offs this state went through */
	uint64_t	upgrade_pause_ms;	/* the last one's pause */
	uint64_t	upgrade_failures;	/* attempts that failed */
};

/*
 * The numbers STATS and /metrics both show, one row each, in STATS
 * order: X(name, kind, value, help). STATS has the member name; /metrics
 * the metric keylockd_name, with _total for a counter. A gauge_ms is kept
 * in milliseconds: STATS shows name_ms, /metrics keylockd_name_seconds
 * (Prometheus' base unit). value reads c
 * (the table's struct lt_counters) or st (struct stats). A new row is a
 * new STATS member and a new metric: document it in keylockd-protocol(7)
 * STATS and keylockd(8) MONITORING.
 */
#define KL_COUNTER_LIST(X)						\
	X(clients, gauge, st->clients, "Open connections.")		\
	X(keys, gauge, c->keys, "Entries in the lock table.")		\
	X(held, gauge, c->held, "Grants held, one per key and holder.")	\
	X(waiting, gauge, c->waiting, "Requests waiting.")		\
	X(grants, counter, c->grants, "Requests granted.")		\
	X(timeouts, counter, c->timeouts, "Requests timed out.")	\
	X(cancels, counter, c->cancels, "Waits withdrawn by CANCEL.")	\
	X(busy, counter, c->busy, "Requests refused with BUSY.")	\
	X(deadlocks, counter, c->deadlocks,				\
	    "Requests refused with DEADLOCK.")				\
	X(deadlock_searches_cut, counter, c->deadlock_searches_cut,	\
	    "Deadlock checks that gave up at their step bound; the "	\
	    "request waited.")						\
	X(conflicts, counter, c->conflicts,				\
	    "Requests refused with CONFLICT.")				\
	X(releases, counter, c->releases,				\
	    "Key holds ended by UNLOCK or UNLOCKALL.")			\
	X(expired, counter, c->expired, "Key holds ended by ttl.")	\
	X(disconnect_releases, counter, c->disconnect_releases,		\
	    "Key holds ended by a connection's end.")			\
	X(max_waiters, gauge, c->max_waiters,				\
	    "Most waiters one key has had.")				\
	X(table_bytes, gauge, c->bytes, "Memory the lock table "	\
	    "asked for: entries, holds, queues, buckets.")		\
	X(connections, counter, st->connections, "Connections accepted.") \
	X(rejected_connections, counter, st->rejected_connections,	\
	    "Connections refused over max-clients.")			\
	X(requests, counter, st->requests, "Requests handled.")		\
	X(errors, counter, st->errors, "ERR replies sent.")		\
	X(auth_timeouts, counter, st->auth_timeouts,			\
	    "Connections closed for no AUTH within auth-timeout.")	\
	X(write_timeouts, counter, st->write_timeouts,			\
	    "Connections closed for replies unread for write-timeout.")	\
	X(idle_timeouts, counter, st->idle_timeouts,			\
	    "Idle connections closed at idle-timeout.")			\
	X(auth_failures, counter, st->auth_failures,			\
	    "Failed AUTH attempts.")					\
	X(output_closes, counter, st->output_closes,			\
	    "Clients closed for unread replies over max-output.")	\
	X(output_budget_closes, counter, st->output_budget_closes,	\
	    "Clients closed, the largest unsent replies first, when all "	\
	    "came to max-output-total.")				\
	X(nomem_closes, counter, st->nomem_closes,			\
	    "Clients closed because memory ran out for them.")		\
	X(sessions, gauge, st->sessions,				\
	    "Open sessions, detached or not.")				\
	X(sessions_detached, gauge, st->sessions_detached,		\
	    "Sessions without a connection, within their grace.")	\
	X(sessions_resumed, counter, st->sessions_resumed,		\
	    "RESUMEs that took a session over.")			\
	X(sessions_expired, counter, st->sessions_expired,		\
	    "Detached sessions whose grace ran out.")			\
	X(channels, gauge, st->channels, "Channels in use, besides each "	\
	    "connection's own channel 0, detached sessions' included.")	\
	X(channel_bytes, gauge, st->channel_bytes, "Memory the channels "	\
	    "in use take besides the lock table's; counts against "	\
	    "max-table-bytes.")						\
	X(input_bytes, gauge, st->input_bytes, "Memory of the input "	\
	    "buffers of all clients: unframed and queued lines.")	\
	X(input_budget_waits, counter, st->input_budget_waits,		\
	    "Clients not read until the input of all came down from "	\
	    "max-input-total.")						\
	X(upgrades, counter, st->upgrades,				\
	    "Live upgrades this state has been handed through.")	\
	X(upgrade_pause, gauge_ms, st->upgrade_pause_ms,		\
	    "The last live upgrade's pause.")				\
	X(upgrade_failures, counter, st->upgrade_failures,		\
	    "Live upgrades that failed; the server carried on.")	\
	X(backend_ready, gauge, st->be.ready, "1 while the backend "	\
	    "serves (backend etcd: its table built, its lease renewed "	\
	    "in time), else 0.")					\
	X(etcd_txns, counter, st->be.txns,				\
	    "backend etcd: transactions sent to etcd.")		\
	X(etcd_txn_failures, counter, st->be.txn_failures,		\
	    "backend etcd: transactions etcd did not take.")		\
	X(etcd_rebuilds, counter, st->be.rebuilds,			\
	    "backend etcd: lock table rebuilt after a compaction.")	\
	X(etcd_losses, counter, st->be.losses,				\
	    "backend etcd: lease lost, its clients dropped.")		\
	X(etcd_bad_entries, counter, st->be.bad_entries,		\
	    "backend etcd: entries read back that failed the checks "	\
	    "and were left out of the table.")				\
	X(etcd_reaped, counter, st->be.reaped, "backend etcd: another "	\
	    "front end's holds (one per key) and waits that "		\
	    "outlived their ttl or deadline by the reap margin, deleted "	\
	    "by this front end.")

/* Names a lock-table owner (its connection's NAME) or NULL, and says
 * how long its session has been detached (-1: it has a connection); may
 * set the client id to show (the table's owner id unless set), its
 * channel (0 unless set) and its front end (backend etcd; 0 unless set). */
typedef const char *(*stats_name_fn)(const struct lt_owner *o,
    int64_t *detached_ms, uint64_t *client, uint32_t *channel,
    uint64_t *frontend);

/* One line of JSON, malloc'd (free with free()), or NULL on no memory. */
char	*stats_to_json(const struct stats *st, const struct locktable *lt,
	    uint64_t now_ms, const char *version, const char *backend);
/* The same with only the keys keep() accepts in hot_keys (NULL: all). */
typedef bool (*stats_key_fn)(void *arg, const char *key, size_t len);
char	*stats_to_json_keys(const struct stats *st,
	    const struct locktable *lt, uint64_t now_ms, const char *version,
	    const char *backend, stats_key_fn keep, void *arg);
char	*stats_info_json(const struct locktable *lt, const char *key,
	    size_t keylen, uint64_t now_ms, stats_name_fn name, size_t max);

/* RESUME's reply (keylockd-protocol(7), SESSIONS): the session's ID as
 * the client gave it, its grace, every grant o holds, one entry per
 * token, and its waiting LOCK; then the same for each of the nch owners
 * of its other channels, chans. NULL on no memory. */
char	*stats_resume_json(const struct locktable *lt,
	    const struct lt_owner *o, const char *id, size_t idlen,
	    uint64_t grace_ms, uint64_t now_ms,
	    const struct lt_owner *const *chans, size_t nch);

/* One connection in CLIENTS (keylockd-protocol(7), COMMANDS). */
struct stats_client {
	uint64_t		 id;
	const char		*name;		/* NULL: none */
	const char		*user;		/* NULL: none */
	int64_t			 uid, pid;	/* a unix peer's; -1 */
	const char		*transport;	/* "tcp", "unix", "tls" */
	const char		*peer;
	uint64_t		 age_ms;
	int64_t			 detached_ms;	/* a detached session's; -1 */
	uint32_t		 channels;	/* in use besides channel 0 */
	size_t			 held;		/* on every channel */
	const struct lt_owner	*owner;		/* channel 0's wait */
	const struct lt_owner *const *chans;	/* the other channels',
						 * by channel number */
	size_t			 nchans;
};
struct stats_clients;

/* A CLIENTS reply listing at most max connections of all those added,
 * in about budget bytes, whose total it counts exactly. NULL on no
 * memory; every later call takes a NULL list and gives NULL. */
struct stats_clients *stats_clients_new(size_t max, size_t budget);
void	 stats_clients_add(struct stats_clients *l,
	    const struct stats_client *c, uint64_t now_ms);
/* The caller ran out of memory for an entry: the reply is NULL. */
void	 stats_clients_nomem(struct stats_clients *l);
/* The JSON line (free with free()), or NULL on no memory; frees l. */
char	*stats_clients_json(struct stats_clients *l);

#endif /* STATS_H */
