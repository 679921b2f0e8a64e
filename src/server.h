/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The server: listeners (TCP, unix), accept with the connection cap,
 * signals, the ttl timer, the end-of-turn work queue and shutdown. It owns
 * every connection and the lock table.
 */
#ifndef SERVER_H
#define SERVER_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "proto.h"
#include "stats.h"

struct event_base;
struct event;
struct conn;
struct token;
struct locktable;
struct metrics;
struct tls_ctx;

#define KL_LISTENERS_MAX	(KL_BINDS_MAX + 1)
#define KL_SCRATCH_SIZE		(64 * 1024)	/* one read per batch */
#define KL_WARN_INTERVAL_MS	10000	/* one warning per 10 s of a kind */
#define KL_TURN_REQUESTS	256	/* one client's requests per turn */
#define KL_TURN_OUTPUT		(16 * 1024)	/* and reply bytes */

TAILQ_HEAD(conn_list, conn);

struct listener {
	struct server	*srv;
	int		 fd;
	bool		 is_unix;
	bool		 adopted;	/* from systemd: not ours to unlink */
	bool		 tls;
	struct event	*ev;
	char		 name[128];	/* for logs */
};

struct server {
	struct event_base	*base;
	struct config		*cfg;
	struct locktable	*lt;
	struct token		*tokens;
	struct stats		 stats;
	struct listener		 listeners[KL_LISTENERS_MAX];
	int			 nlisteners;
	int			 tcp_port;	/* bound port of the first TCP */
	int			 tls_port;	/* and of the first TLS one */
	struct tls_ctx		*tls;		/* NULL: no TLS listener */
	struct event		*accept_pause;
	struct event		*sig_term, *sig_int, *sig_hup;
	struct event		*status;	/* sd_notify STATUS= refresh */
	struct metrics		*metrics;
	struct event		*expiry;	/* the earliest ttl */
	uint64_t		 expiry_at;	/* UINT64_MAX: not armed */
	struct conn_list	 conns;
	struct conn_list	 runq;		/* work left for this turn */
	struct conn_list	 dead;		/* closed, freed end of turn */
	struct conn_list	 deferred;	/* turn used up: next turn */
	struct event		*resume;	/* runs them after the poll */
	uint64_t		 next_id;
	char			*scratch;	/* KL_SCRATCH_SIZE bytes */
	struct request		 req;		/* the one being handled */
	char			*secret;	/* AUTH secret, or NULL */
	size_t			 secret_len;
	uint64_t		 auth_log_ms;	/* last AUTH failure warning */
	uint64_t		 accept_log_ms;	/* last accept failure warning */
	bool			 stopping;
};

/* What cfg names must exist and be usable: the metrics address, the unix
 * group, the auth secret, the TLS files. -1 with a message otherwise. */
int		 server_check(const struct config *cfg, char *err,
		    size_t errlen);
/* Creates the server from cfg: the state dir, the table, the signals.
 * Exits through fatalx() with a clear message when it cannot. */
struct server	*server_new(struct config *cfg);
/* Opens the listeners systemd passed, or else every configured one; then
 * the metrics listener and the port file; then tells systemd READY=1. */
void		 server_listen(struct server *srv);
int		 server_run(struct server *srv);
void		 server_free(struct server *srv);

/* End of every top-level callback: run queued connections, flush their
 * output, re-arm the ttl timer, free closed connections. */
void		 server_end_turn(struct server *srv);

#endif /* SERVER_H */
