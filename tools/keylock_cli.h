/*
 * keylock: the command-line client of keylockd. SPDX-License-Identifier: MIT
 *
 * What the CLI's files share: the parsed command line, the exit codes of
 * keylock(1), and the helpers that connect and report errors. keylock.c
 * parses, keylock_run.c holds a lock around a command, keylock_show.c is
 * the one-shot subcommands (stats, info, ping, top), keylock_admin.c the
 * operator's (clients, kill, upgrade).
 */
#ifndef KEYLOCK_CLI_H
#define KEYLOCK_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "keylock.h"

/* keylock(1), EXIT STATUS. The command's own status passes through. */
#define CLI_EXIT_NOTACQUIRED	1	/* -E default, as flock(1) */
#define CLI_EXIT_USAGE		64	/* EX_USAGE: bad command line */
#define CLI_EXIT_REFUSED	65	/* EX_DATAERR: the server said no */
#define CLI_EXIT_NOINPUT	66	/* EX_NOINPUT: --auth-file, --tls-* */
#define CLI_EXIT_UNAVAILABLE	69	/* EX_UNAVAILABLE: no server */
#define CLI_EXIT_OSERR		71	/* EX_OSERR: fork, pipe, ... */
#define CLI_EXIT_LOST		75	/* EX_TEMPFAIL: lock lost mid-command */
#define CLI_EXIT_PROTOCOL	76	/* EX_PROTOCOL: not keylockd */
#define CLI_EXIT_AUTH		77	/* EX_NOPERM: AUTH or TLS refused */
#define CLI_EXIT_CANNOT_EXEC	126	/* as sh(1) and env(1) */
#define CLI_EXIT_NOT_FOUND	127

#define CLI_GRACE_MS_DEFAULT	5000	/* SIGTERM to SIGKILL, lock lost */
#define CLI_CONNECT_MS_DEFAULT	5000
#define CLI_REPLY_MS_DEFAULT	10000	/* a reply that is not a lock wait */
#define CLI_SECONDS_MAX		1000000000.0	/* about 31 years */
/* A lease refreshed every third of it needs a few round trips of room. */
#define CLI_TTL_MIN_MS		100
/* A session's grace needs a few round trips of room too. */
#define CLI_SESSION_MIN_MS	100
#define CLI_SESSION_MAX_MS	86400000L

struct cli {
	const char	*server;	/* NULL: $KEYLOCK_SERVER or default */
	const char	*auth_file;
	const char	*name;		/* NULL: keylock:HOST:PID */
	char		*secret;
	struct keylock_tls_opts tls;	/* used if tls_set */
	int		 tls_set;	/* a --tls-* option was given */
	long		 wait_ms;	/* -w; KEYLOCK_WAIT_FOREVER if not */
	long		 connect_ms;
	long		 grace_ms;
	long		 session_ms;	/* --session; -1: $KEYLOCK_SESSION */
	int		 nonblock;
	int		 verbose;
	int		 conflict_code;	/* -E */
	struct keylock_lock_opts lock;
	/* lock mode: keys, then the command's argv or a shell command */
	char		**keys;
	size_t		 nkeys;
	char		**argv;
	const char	*shell_cmd;
};

/* Connects, authenticates and names the connection; exits on failure. */
struct keylock	*cli_connect(const struct cli *cli, int name_it);
int		 cli_name(const struct cli *cli, struct keylock *kl);
/* Prints "keylock: ..." for a failed call; returns the exit code. */
int		 cli_fail(const struct cli *cli, struct keylock *kl,
		    enum keylock_status st);
int		 cli_exit_code(const struct cli *cli, enum keylock_status st);
/* SECONDS with an optional fraction, into ms; -1 if malformed. */
long		 cli_parse_seconds(const char *s);
/* Digits only, in [min, max]; -1 if malformed. */
long		 cli_parse_number(const char *s, long min, long max);
void		 cli_warnx(const char *fmt, ...)
		    __attribute__((__format__(__printf__, 1, 2)));
/* Prints the usage error and exits CLI_EXIT_USAGE. */
void		 cli_usage_error(const char *fmt, ...)
		    __attribute__((__format__(__printf__, 1, 2),
		    __noreturn__));

int		 run_locked(struct cli *cli);

int		 show_stats(const struct cli *cli, int argc, char **argv);
int		 show_info(const struct cli *cli, int argc, char **argv);
int		 show_ping(const struct cli *cli, int argc, char **argv);
int		 show_top(const struct cli *cli, int argc, char **argv);

int		 admin_clients(const struct cli *cli, int argc, char **argv);
int		 admin_kill(const struct cli *cli, int argc, char **argv);
int		 admin_upgrade(const struct cli *cli, int argc, char **argv);

#endif /* KEYLOCK_CLI_H */
