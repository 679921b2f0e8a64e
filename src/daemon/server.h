/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The server: listeners (TCP, TLS, unix, systemd's), accept with the
 * connection cap, signals and reload, and shutdown. It creates and owns
 * the backend, the commands and the set of connections, and wires their
 * hooks together; its struct is its own.
 */
#ifndef SERVER_H
#define SERVER_H

#include <stddef.h>

struct config;
struct server;
struct stats;
struct backend;
struct conns;
struct event_base;

/* What cfg names must exist and be usable: the metrics address, the unix
 * group, the auth secret, the TLS files. -1 with a message otherwise. */
int		 server_check(const struct config *cfg, char *err,
		    size_t errlen);
/* Creates the server from cfg: the state dir, the backend, the signals.
 * Exits through fatalx() with a clear message when it cannot. */
struct server	*server_new(struct config *cfg);
/* Opens the listeners systemd passed, or else every configured one; then
 * the metrics listener and the port file; then tells systemd READY=1.
 * A listener that cannot be opened, or one too many, is fatal. */
void		 server_listen(struct server *srv);
int		 server_run(struct server *srv);
void		 server_free(struct server *srv);

/* For the metrics listener and the tests: read-only views. */
struct event_base *server_base(const struct server *srv);
const struct config *server_config(const struct server *srv);
const struct stats *server_stats(const struct server *srv);
const struct backend *server_backend(const struct server *srv);
struct conns	*server_conns(const struct server *srv);
/* An accept(2) on listener name failed (errno): out of descriptors or
 * memory, every listener pauses for a moment (the warning at most once per
 * 10 s); a retry is nothing; anything else is logged. */
void		 server_accept_failed(struct server *srv, const char *name);
/* The end of a top-level callback of a module that has no conns. */
void		 server_end_turn(struct server *srv);

#endif /* SERVER_H */
