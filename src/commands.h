/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One handler per command of keylockd-protocol(7), in a table indexed by enum
 * cmd_id; the lock table's hooks; the texts that name who blocks a key.
 * Handlers reply through conn_reply_*; they never write a socket.
 */
#ifndef COMMANDS_H
#define COMMANDS_H

#include "locktable.h"
#include "proto.h"

struct conn;
struct server;

/* The lock table's hooks: deferred grants go to the waiting connection. */
void	commands_hooks(struct server *srv, struct lt_hooks *hooks);

/* Runs the shared checks (auth, key count), then the handler. */
void	commands_execute(struct conn *c, const struct request *req);

/* c's wait ran out: withdraw it and reply ERR TIMEOUT naming the blocker. */
void	commands_timeout(struct conn *c);
/* The server stops: withdraw c's wait and reply ERR SHUTDOWN. */
void	commands_shutdown_wait(struct conn *c);

#endif /* COMMANDS_H */
