/*
 * keylock: the command-line client of keylockd. SPDX-License-Identifier: MIT
 *
 * main: the command line of keylock(1) into a struct cli, then either
 * lock-and-run (keylock_run.c) or a subcommand (keylock_show.c). The rule
 * that tells them apart: the words after the options are keys up to "--"
 * or "-c"; when neither follows, the first word names a subcommand.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keylock.h"
#include "keylock_cli.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION	"unknown"
#endif

#define CLI_SECRET_MAX	(64 + 1 + 256)	/* [user ]secret of AUTH */
#define CLI_HOST_MAX	40	/* of the hostname in the default name */

enum {
	OPT_TTL = 256,
	OPT_NAME,
	OPT_AUTH_FILE,
	OPT_MAX_WAITERS,
	OPT_CONNECT_TIMEOUT,
	OPT_GRACE,
	OPT_SESSION,
	OPT_TLS_CA,
	OPT_TLS_CERT,
	OPT_TLS_KEY
};

static const struct option long_options[] = {
	{ "shared",		no_argument,		NULL, 's' },
	{ "exclusive",		no_argument,		NULL, 'x' },
	{ "nonblock",		no_argument,		NULL, 'n' },
	{ "nb",			no_argument,		NULL, 'n' },
	{ "wait",		required_argument,	NULL, 'w' },
	{ "timeout",		required_argument,	NULL, 'w' },
	{ "conflict-exit-code",	required_argument,	NULL, 'E' },
	{ "limit",		required_argument,	NULL, 'N' },
	{ "ttl",		required_argument,	NULL, OPT_TTL },
	{ "max-waiters",	required_argument,	NULL, OPT_MAX_WAITERS },
	{ "name",		required_argument,	NULL, OPT_NAME },
	{ "server",		required_argument,	NULL, 'S' },
	{ "auth-file",		required_argument,	NULL, OPT_AUTH_FILE },
	{ "tls-ca",		required_argument,	NULL, OPT_TLS_CA },
	{ "tls-cert",		required_argument,	NULL, OPT_TLS_CERT },
	{ "tls-key",		required_argument,	NULL, OPT_TLS_KEY },
	{ "connect-timeout",	required_argument,	NULL,
	    OPT_CONNECT_TIMEOUT },
	{ "grace",		required_argument,	NULL, OPT_GRACE },
	{ "session",		optional_argument,	NULL, OPT_SESSION },
	{ "command",		required_argument,	NULL, 'c' },
	{ "verbose",		no_argument,		NULL, 'v' },
	{ "help",		no_argument,		NULL, 'h' },
	{ "version",		no_argument,		NULL, 'V' },
	{ NULL,			0,			NULL, 0 }
};

static const struct subcommand {
	const char	*name;
	int		(*fn)(const struct cli *, int, char **);
} subcommands[] = {
	{ "clients",	admin_clients },
	{ "info",	show_info },
	{ "kill",	admin_kill },
	{ "ping",	show_ping },
	{ "stats",	show_stats },
	{ "top",	show_top },
	{ "upgrade",	admin_upgrade },
};

static void	parse_options(struct cli *, int, char **);
static int	split_lock_words(struct cli *, int, char **);
static char	*read_secret(const char *);
static void	usage(void);

int
main(int argc, char **argv)
{
	struct cli	cli;
	int		i, rc = -1;

	memset(&cli, 0, sizeof(cli));
	cli.wait_ms = KEYLOCK_WAIT_FOREVER;
	cli.connect_ms = CLI_CONNECT_MS_DEFAULT;
	cli.grace_ms = CLI_GRACE_MS_DEFAULT;
	cli.session_ms = KEYLOCK_SESSION_AUTO;
	cli.conflict_code = CLI_EXIT_NOTACQUIRED;
	if (getenv("KEYLOCK_AUTH_FILE") != NULL &&
	    *getenv("KEYLOCK_AUTH_FILE") != '\0')
		cli.auth_file = getenv("KEYLOCK_AUTH_FILE");
	parse_options(&cli, argc, argv);
	argc -= optind;
	argv += optind;
	if (cli.auth_file != NULL)
		cli.secret = read_secret(cli.auth_file);

	if (split_lock_words(&cli, argc, argv))
		rc = run_locked(&cli);
	else if (argc == 0)
		cli_usage_error("no key and no subcommand given");
	for (i = 0; rc == -1 &&
	    i < (int)(sizeof(subcommands) / sizeof(subcommands[0])); i++)
		if (strcmp(argv[0], subcommands[i].name) == 0)
			rc = subcommands[i].fn(&cli, argc, argv);
	if (rc == -1)
		cli_usage_error("%s: not a subcommand; to lock it, give the "
		    "command after -- or -c", argv[0]);
	free(cli.secret);
	return rc;
}

static void
parse_options(struct cli *cli, int argc, char **argv)
{
	long	n;
	int	ch;

	/* "+": options stop at the first key, as in flock(1); what
	 * follows is split by split_lock_words(). */
	while ((ch = getopt_long(argc, argv, "+sxenw:E:N:S:c:vhV",
	    long_options, NULL)) != -1) {
		switch (ch) {
		case 's':
			cli->lock.flags |= KEYLOCK_SHARED;
			break;
		case 'x':
		case 'e':
			cli->lock.flags &= ~(unsigned)KEYLOCK_SHARED;
			break;
		case 'n':
			cli->nonblock = 1;
			break;
		case 'w':
			if ((cli->wait_ms = cli_parse_seconds(optarg)) < 0)
				cli_usage_error("-w %s: want 0 to %.0f "
				    "seconds, such as 5 or 0.5", optarg,
				    CLI_SECONDS_MAX);
			break;
		case 'E':
			if ((n = cli_parse_number(optarg, 0, 255)) < 0)
				cli_usage_error("-E %s: want an exit code "
				    "from 0 to 255", optarg);
			cli->conflict_code = (int)n;
			break;
		case 'N':
			if ((n = cli_parse_number(optarg, 1,
			    1000000000L)) < 0)
				cli_usage_error("-N %s: want a limit of at "
				    "least 1", optarg);
			cli->lock.limit = (unsigned)n;
			break;
		case OPT_TTL:
			if ((n = cli_parse_seconds(optarg)) < CLI_TTL_MIN_MS)
				cli_usage_error("--ttl %s: want %.1f to %.0f "
				    "seconds", optarg, CLI_TTL_MIN_MS / 1000.0,
				    CLI_SECONDS_MAX);
			cli->lock.ttl_ms = (uint64_t)n;
			break;
		case OPT_MAX_WAITERS:
			if ((n = cli_parse_number(optarg, 0,
			    1000000000L)) < 0)
				cli_usage_error("--max-waiters %s: want a "
				    "number", optarg);
			cli->lock.flags |= KEYLOCK_MAX_WAITERS;
			cli->lock.max_waiters = (unsigned)n;
			break;
		case OPT_NAME:
			cli->name = optarg;
			break;
		case 'S':
			cli->server = optarg;
			break;
		case OPT_AUTH_FILE:
			cli->auth_file = *optarg != '\0' ? optarg : NULL;
			break;
		case OPT_TLS_CA:
			cli->tls.ca_file = optarg;
			cli->tls_set = 1;
			break;
		case OPT_TLS_CERT:
			cli->tls.cert_file = optarg;
			cli->tls_set = 1;
			break;
		case OPT_TLS_KEY:
			cli->tls.key_file = optarg;
			cli->tls_set = 1;
			break;
		case OPT_CONNECT_TIMEOUT:
			if ((cli->connect_ms = cli_parse_seconds(optarg)) <= 0)
				cli_usage_error("--connect-timeout %s: want "
				    "seconds above 0, at most %.0f", optarg,
				    CLI_SECONDS_MAX);
			break;
		case OPT_GRACE:
			if ((cli->grace_ms = cli_parse_seconds(optarg)) < 0)
				cli_usage_error("--grace %s: want 0 to %.0f "
				    "seconds", optarg, CLI_SECONDS_MAX);
			break;
		case OPT_SESSION:
			/* milliseconds, as the protocol's grace= and
			 * $KEYLOCK_SESSION; 0: no session */
			if (optarg == NULL)
				cli->session_ms = KEYLOCK_SESSION_GRACE_DEFAULT;
			else if ((n = cli_parse_number(optarg, 0,
			    CLI_SESSION_MAX_MS)) < 0 ||
			    (n > 0 && n < CLI_SESSION_MIN_MS))
				cli_usage_error("--session=%s: want a grace of "
				    "%d to %ld milliseconds, or 0 for none",
				    optarg, CLI_SESSION_MIN_MS,
				    CLI_SESSION_MAX_MS);
			else
				cli->session_ms = n;
			break;
		case 'c':
			cli->shell_cmd = optarg;
			break;
		case 'v':
			cli->verbose = 1;
			break;
		case 'h':
			usage();
			exit(0);
		case 'V':
			printf("keylock %s\n", PACKAGE_VERSION);
			exit(0);
		default:
			fprintf(stderr, "Try 'keylock --help'.\n");
			exit(CLI_EXIT_USAGE);
		}
	}
	if ((cli->lock.flags & KEYLOCK_SHARED) && cli->lock.limit > 0)
		cli_usage_error("-s and -N exclude each other");
	if (cli->nonblock && cli->wait_ms >= 0)
		cli_usage_error("-n and -w exclude each other");
}

/*
 * Lock mode if the words hold "--" or "-c" (or -c came as an option):
 * keys before it, the command after. Returns 0 for a subcommand line.
 */
static int
split_lock_words(struct cli *cli, int argc, char **argv)
{
	int	i;

	for (i = 0; i < argc; i++)
		if (strcmp(argv[i], "--") == 0 || strcmp(argv[i], "-c") == 0 ||
		    strcmp(argv[i], "--command") == 0)
			break;
	if (i == argc && cli->shell_cmd == NULL)
		return 0;
	if (i == 0)
		cli_usage_error("no key given before %s", i < argc ? argv[i] :
		    "the command");
	for (int k = 0; k < i; k++)
		if (argv[k][0] == '-')
			cli_usage_error("%s: options go before the keys",
			    argv[k]);
	cli->keys = argv;
	cli->nkeys = (size_t)i;
	if (i == argc)
		return 1;			/* -c as an option */
	if (cli->shell_cmd != NULL)
		cli_usage_error("-c and a command after %s exclude each other",
		    argv[i]);
	if (strcmp(argv[i], "--") == 0) {
		if (i + 1 == argc)
			cli_usage_error("no command after --");
		cli->argv = argv + i + 1;
		return 1;
	}
	if (i + 2 != argc)
		cli_usage_error("%s takes one shell command, quoted, and is "
		    "the last option", argv[i]);
	cli->shell_cmd = argv[i + 1];
	return 1;
}

/* The secret is the file's first line: one token, or "user secret"
 * (keylockd-protocol(7), AUTH); libkeylock checks its bytes. */
static char *
read_secret(const char *path)
{
	char	 buf[CLI_SECRET_MAX + 3], *nl;
	FILE	*f;

	if ((f = fopen(path, "r")) == NULL) {
		cli_warnx("%s: %s", path, strerror(errno));
		exit(CLI_EXIT_NOINPUT);
	}
	if (fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	fclose(f);
	if ((nl = strchr(buf, '\n')) != NULL)
		*nl = '\0';
	else if (strlen(buf) > CLI_SECRET_MAX) {
		cli_warnx("%s: the secret is over %d bytes", path,
		    CLI_SECRET_MAX);
		exit(CLI_EXIT_NOINPUT);
	}
	if ((nl = strchr(buf, '\r')) != NULL)
		*nl = '\0';
	if (buf[0] == '\0') {
		cli_warnx("%s: no secret on the first line", path);
		exit(CLI_EXIT_NOINPUT);
	}
	return strdup(buf);
}

struct keylock *
cli_connect(const struct cli *cli, int name_it)
{
	struct keylock		*kl;
	enum keylock_status	 st;

	if ((kl = keylock_new()) == NULL) {
		cli_warnx("out of memory");
		exit(CLI_EXIT_OSERR);
	}
	keylock_set_timeout(kl, cli->connect_ms);
	/* Only a lock held around a command needs to outlive a blip; the
	 * one-shot subcommands never open a session. */
	if (!name_it)
		keylock_set_session(kl, 0);
	else if (cli->session_ms != KEYLOCK_SESSION_AUTO)
		keylock_set_session(kl, cli->session_ms);
	if (cli->tls_set && (st = keylock_set_tls(kl, &cli->tls)) !=
	    KEYLOCK_OK) {
		cli_warnx("%s", keylock_message(kl));
		exit(st == KEYLOCK_ERR_NOMEM ? CLI_EXIT_OSERR :
		    st == KEYLOCK_ERR_INVAL ? CLI_EXIT_USAGE :
		    CLI_EXIT_NOINPUT);
	}
	/* A server list is tried in order, to the first that answers; a
	 * malformed one (-S or $KEYLOCK_SERVER), or $KEYLOCK_SESSION, is
	 * the command line's fault. */
	if ((st = keylock_connect(kl, cli->server, cli->secret)) ==
	    KEYLOCK_ERR_INVAL)
		cli_usage_error("%s", keylock_message(kl));
	if (st != KEYLOCK_OK)
		exit(cli_fail(cli, kl, st));
	/* NAME is the first request: a server that does not answer it
	 * within the connect timeout (stopped, with a kernel that still
	 * accepts) is passed over for the next of the list, as one that
	 * cannot be connected to is. */
	while (name_it && !cli_name(cli, kl)) {
		char	why[512];

		snprintf(why, sizeof(why), "%s", keylock_message(kl));
		if (keylock_failover(kl) != KEYLOCK_OK) {
			st = keylock_last_status(kl);
			if (st == KEYLOCK_ERR_INVAL) {	/* no server left */
				cli_warnx("%s", why);
				exit(CLI_EXIT_UNAVAILABLE);
			}
			cli_warnx("%s; %s", why, keylock_message(kl));
			exit(cli_exit_code(cli, st));
		}
		if (cli->verbose)
			cli_warnx("%s; trying the next server", why);
	}
	keylock_set_timeout(kl, CLI_REPLY_MS_DEFAULT);
	return kl;
}

/* NAME on a new connection: -N's, else one that says who holds it.
 * 0: the server did not answer (no reply in time, the connection
 * lost), the connection closed; 1: named. A refusal exits. */
int
cli_name(const struct cli *cli, struct keylock *kl)
{
	enum keylock_status	 st;
	char			 host[CLI_HOST_MAX + 1] = "", name[80];
	const char		*label = cli->name;

	if (label == NULL) {
		/* Who holds it? The default name answers, in INFO and in
		 * the LOCKED text that other clients get. */
		gethostname(host, sizeof(host) - 1);
		host[strcspn(host, ". \t=")] = '\0';
		snprintf(name, sizeof(name), "keylock:%s:%ld", host,
		    (long)getpid());
		label = name;
	}
	if ((st = keylock_name(kl, label)) == KEYLOCK_OK)
		return 1;
	if (!keylock_is_connected(kl) && (st == KEYLOCK_ERR_DEADLINE ||
	    st == KEYLOCK_ERR_IO || st == KEYLOCK_ERR_CLOSED))
		return 0;
	/* -N's name refused is the caller's; the default one's is not
	 * worth failing for while the connection stands */
	if (cli->name != NULL || !keylock_is_connected(kl))
		exit(cli_fail(cli, kl, st));
	return 1;
}

int
cli_fail(const struct cli *cli, struct keylock *kl, enum keylock_status st)
{
	const char	*msg = keylock_message(kl);

	if (*msg == '\0')
		msg = keylock_strstatus(st);
	if (st < KEYLOCK_ERR_IO)
		cli_warnx("%s %s", keylock_status_word(st), msg);
	else
		cli_warnx("%s", msg);
	return cli_exit_code(cli, st);
}

int
cli_exit_code(const struct cli *cli, enum keylock_status st)
{
	switch (st) {
	case KEYLOCK_OK:
		return 0;
	case KEYLOCK_ERR_LOCKED:
	case KEYLOCK_ERR_TIMEOUT:
	case KEYLOCK_ERR_BUSY:
		return cli->conflict_code;
	case KEYLOCK_ERR_AUTH:
	case KEYLOCK_ERR_TLS:
		return CLI_EXIT_AUTH;
	case KEYLOCK_ERR_SHUTDOWN:
	case KEYLOCK_ERR_BACKEND:
	case KEYLOCK_ERR_GONE:
	case KEYLOCK_ERR_IO:
	case KEYLOCK_ERR_CLOSED:
	case KEYLOCK_ERR_DEADLINE:
		return CLI_EXIT_UNAVAILABLE;
	case KEYLOCK_ERR_PROTO:
	case KEYLOCK_ERR_UNKNOWN:
		return CLI_EXIT_PROTOCOL;
	case KEYLOCK_ERR_NOMEM:
		return CLI_EXIT_OSERR;
	case KEYLOCK_ERR_INVAL:
		return CLI_EXIT_USAGE;
	default:
		return CLI_EXIT_REFUSED;
	}
}

long
cli_parse_seconds(const char *s)
{
	const char	*p;
	char		*end;
	double		 d;
	int		 dots = 0;

	/* strtod alone would take "-1", " 1", "inf" and "0x10". */
	for (p = s; *p != '\0'; p++) {
		if (*p == '.')
			dots++;
		else if (*p < '0' || *p > '9')
			return -1;
	}
	if (*s == '\0' || dots > 1 || strcmp(s, ".") == 0)
		return -1;
	errno = 0;
	d = strtod(s, &end);
	if (*end != '\0' || errno != 0 || d > CLI_SECONDS_MAX)
		return -1;
	d *= 1000.0;
	/* a wait of 0.0001 s is a wait, not a "do not wait" */
	if (d > 0 && d < 1)
		return 1;
	return (long)(d + 0.5);
}

long
cli_parse_number(const char *s, long min, long max)
{
	long	n = 0;

	if (*s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || n > (max - (*s - '0')) / 10)
			return -1;
		n = n * 10 + (*s - '0');
	}
	return n < min ? -1 : n;
}

void
cli_warnx(const char *fmt, ...)
{
	char	buf[2048];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* one line, and no control byte of a server's text (an ERR's, a
	 * hostile server's) reaches the terminal */
	for (char *p = buf; *p != '\0'; p++)
		if (((unsigned char)*p < ' ' && *p != '\t') || *p == 0x7f)
			*p = '?';
	fprintf(stderr, "keylock: %s\n", buf);
}

void
cli_usage_error(const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "keylock: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'keylock --help'.\n");
	exit(CLI_EXIT_USAGE);
}

static void
usage(void)
{
	printf(
"usage: keylock [options] KEY... -- COMMAND [ARG...]\n"
"       keylock [options] KEY... -c 'SHELL COMMAND'\n"
"       keylock [options] stats [--json]\n"
"       keylock [options] info KEY [--json]\n"
"       keylock [options] ping\n"
"       keylock [options] top [-n COUNT] [-d SECONDS]\n"
"       keylock [options] clients [--json]      (the operator's)\n"
"       keylock [options] kill ID               (the operator's)\n"
"       keylock [options] upgrade [--json]      (the operator's)\n"
"\n"
"Takes the keys from keylockd, all at once, runs the command, releases.\n"
"\n"
"  -s, --shared             shared (reader) lock\n"
"  -x, -e, --exclusive      exclusive (writer) lock, the default\n"
"  -n, --nonblock           fail at once if a key is not free\n"
"  -w, --wait, --timeout SECONDS\n"
"                           wait at most SECONDS (fractions allowed;\n"
"                           at most 1000000000)\n"
"  -E, --conflict-exit-code CODE\n"
"                           exit code when not acquired (default 1)\n"
"  -N, --limit N            the key is a semaphore of N holders\n"
"      --ttl SECONDS        lease: refreshed while the command runs,\n"
"                           lost if keylock stops refreshing it\n"
"                           (0.1 to 1000000000)\n"
"      --max-waiters N      fail at once if N requests already wait\n"
"      --name LABEL         name shown in INFO (default keylock:HOST:PID)\n"
"  -S, --server SERVER[,SERVER...]\n"
"                           host:port, [v6]:port, a socket path, or\n"
"                           tls://host[:port] (TLS, port 7712); a list\n"
"                           is tried in order, the first that answers\n"
"                           is used (default $KEYLOCK_SERVER, or\n"
"                           127.0.0.1:7711)\n"
"      --auth-file FILE     AUTH with the first line of FILE\n"
"      --tls-ca FILE        trust the CAs in FILE for the server (TLS)\n"
"      --tls-cert FILE      client certificate for mutual TLS\n"
"      --tls-key FILE       its private key (default: in --tls-cert)\n"
"      --connect-timeout SECONDS  (default 5)\n"
"      --grace SECONDS      lock lost: SIGTERM, then SIGKILL after\n"
"                           SECONDS (default 5)\n"
"      --session[=MS]       keep the lock through a dropped connection\n"
"                           for MS milliseconds (default 10000;\n"
"                           $KEYLOCK_SESSION; 0: no session)\n"
"  -c, --command CMD        run CMD with /bin/sh -c\n"
"  -v, --verbose            say when waiting and when granted\n"
"  -h, --help, -V, --version\n"
"\n"
"Exit status: the command's; 1 (or -E) not acquired; 64 usage;\n"
"65 refused by the server; 66 auth or TLS file unusable; 69 server\n"
"unavailable; 71 system error (fork, out of memory); 75 lock lost\n"
"while the command ran; 76 protocol error;\n"
"77 AUTH or TLS refused; 126/127 command not runnable/not found.\n"
"See keylock(1).\n");
}
