/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One handler per command of keylockd-protocol(7), in a table indexed by
 * enum cmd_id; the AUTH secret; the texts that name who blocks a key. The
 * lock operations go to the backend (backend.h), and a result the backend
 * brings later comes back through commands_done(). Handlers reply through
 * conn_reply_*; they never write a socket.
 */
#ifndef COMMANDS_H
#define COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "proto.h"

struct commands;
struct config;
struct conn;
struct stats;

/* Whether the AUTH secret cfg names can be read; -1 with a message. */
int		 commands_check(const struct config *cfg, char *err,
		    size_t errlen);
/* The commands over be, with cfg's secret. cfg, st and be stay the
 * caller's. NULL with a message in err. */
struct commands	*commands_new(const struct config *cfg, struct stats *st,
		    struct backend *be, char *err, size_t errlen);
void		 commands_free(struct commands *cmds);
/* SIGHUP: the secret next names replaces the running one; false with a
 * message in err, and the running one kept, if it cannot be read. Logs
 * what changed. */
bool		 commands_reload(struct commands *cmds,
		    const struct config *next, char *err, size_t errlen);
/* After commands_reload() and before the next request: every
 * connection of cs gets its user back from the new configuration, or, if
 * its user or secret changed or is gone, must AUTH again. */
struct conns;
void		 commands_reauth(struct commands *cmds, struct conns *cs);
/* The users of the running configuration (users.h). */
struct users;
const struct users *commands_users(const struct commands *cmds);
/* Whether the client secret (auth-file), or the operator's, is set. */
bool		 commands_has_secret(const struct commands *cmds,
		    bool operator);
/* A client secret or a user is configured: AUTH comes first. */
bool		 commands_need_auth(const struct commands *cmds);

/* Runs the shared checks (auth, operator, NOPERM, key count), then the
 * handler. req is a command (conn.c answers an empty line, CMD_NONE,
 * with nothing). */
void		 commands_execute(struct commands *cmds, struct conn *c,
		    const struct request *req);
/* req named more keys than the server reads (proto_parse()'s
 * KL_ERR_LIMIT): answers the first check it fails, in the protocol's
 * order (AUTH, NOPERM of the keys read, then that LIMIT). */
void		 commands_refuse_over(struct commands *cmds, struct conn *c,
		    const struct request *req);
/* The backend completed o's open request: reply, resume its connection. */
void		 commands_done(struct commands *cmds, struct lt_owner *o,
		    const struct be_result *r);
/* c's open LOCK ran out of time, was cancelled (a CANCEL line read
 * ahead), or the server stops: withdraw it and reply TIMEOUT, CANCELLED
 * or SHUTDOWN, now or when the backend completes it. */
void		 commands_deadline(struct commands *cmds, struct conn *c);
void		 commands_cancel(struct commands *cmds, struct conn *c);
void		 commands_shutdown_wait(struct commands *cmds, struct conn *c);

/* UPGRADE (keylockd-protocol(7), Live upgrade) calls fn(arg, c, why):
 * true when an upgrade started, whose verdict answers c; false with the
 * reason of the ERR UPGRADE. */
void		 commands_set_upgrade(struct commands *cmds,
		    bool (*fn)(void *arg, struct conn *c, char *why,
		    size_t whylen), void *arg);
/* The upgrade c asked for failed: ERR UPGRADE why, and c goes on. */
void		 commands_upgrade_failed(struct commands *cmds,
		    struct conn *c, const char *why);

#endif /* COMMANDS_H */
