/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The server's own struct, shared by server.c and server_upgrade.c (live
 * upgrade) alone, and the few server.c functions the latter calls.
 */
#ifndef SERVER_IMPL_H
#define SERVER_IMPL_H

#include <sys/socket.h>

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "config.h"
#include "conn.h"
#include "stats.h"

#define ACCEPT_BATCH		64	/* accepts per readable listener */
#define ACCEPT_PAUSE_MS		100	/* after EMFILE */
#define STATUS_INTERVAL_S	5	/* sd_notify STATUS= refresh */
#define KL_LISTENERS_MAX	(KL_BINDS_MAX + 1)

struct listener {
	struct server	*srv;
	int		 fd;
	enum conn_transport transport;
	bool		 adopted;	/* from systemd: not ours to unlink */
	struct event	*ev;
	char		 name[128];	/* for logs */
};

struct server {
	struct event_base	*base;
	struct config		*cfg;
	struct backend		*be;
	struct commands		*cmds;
	struct conns		*conns;
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
	uint64_t		 accept_log_ms;	/* last accept failure warning */
	bool			 stopping;
	/* live upgrade (server_upgrade.c) */
	struct event		*sig_usr2;
	struct upgrade_check	*upgrade_check;	/* --check-config running */
	bool			 upgrading;	/* from start to verdict */
	uint64_t		 upgrade_requester; /* UPGRADE's client; 0: signal */
};


void		 server_peer_name(const struct sockaddr_storage *ss, char *buf,
		    size_t len);
struct listener	*server_add_listener(struct server *srv, int fd,
		    enum conn_transport transport, const char *name);
void		 server_write_port_file(const struct server *srv,
		    const char *path);
void		 server_status_cb(evutil_socket_t fd, short what, void *arg);

/* server_upgrade.c */
void		 server_upgrade_signal_cb(evutil_socket_t sig, short what,
		    void *arg);
bool		 server_upgrade_request(void *arg, struct conn *c, char *why,
		    size_t whylen);
/* The new process: takes over what the state in *in says. */
struct upgrade_in;
void		 server_upgrade_adopt(struct server *srv,
		    struct upgrade_in *in);

#endif /* SERVER_IMPL_H */
