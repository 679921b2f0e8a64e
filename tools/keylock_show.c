/*
 * keylock: the command-line client of keylockd. SPDX-License-Identifier: MIT
 *
 * The one-shot subcommands: stats, info and ping print what the server
 * says, readable or as its raw JSON; top redraws STATS every interval, with
 * rates and wait percentiles over the last interval, until q, Ctrl-C or -n
 * frames. Reading only: nothing here takes a lock.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "keylock.h"
#include "keylock_cli.h"

#define SHOW_TOP_DELAY_MS	1000
#define SHOW_TOP_DELAY_MAX_MS	86400000L	/* a day, well within poll */
#define SHOW_KEY_WIDTH		40	/* columns for a key: 79 in all */
#define SHOW_PCT_MAX		24	/* bytes of "<=60000" and the like */

/* The counters STATS promises (keylockd-protocol(7)), in the order shown. */
static const char *const show_counters[] = {
	"grants", "timeouts", "busy", "deadlocks", "conflicts",
	"releases", "expired", "disconnect_releases"
};
#define SHOW_NCOUNTERS	(sizeof(show_counters) / sizeof(show_counters[0]))

/* Members printed by name; the rest go to an "other" line. */
static const char *const show_known[] = {
	"version", "uptime_ms", "clients", "keys", "held", "waiting",
	"grants", "timeouts", "busy", "deadlocks", "conflicts", "releases",
	"expired", "disconnect_releases", "wait_ms", "hold_ms", "max_waiters",
	"hot_keys", "sessions", "sessions_detached"
};

static volatile sig_atomic_t	show_quit;

static int	show_fail(const struct cli *, struct keylock *,
		    enum keylock_status);
static int	show_json_flag(int, char **, int);
static void	show_summary(json_t *);
static void	show_detached(json_t *);
static void	show_client(json_t *);
static void	show_sessions(json_t *);
static void	show_hist(const char *, json_t *, json_t *);
static void	show_percentile(json_t *, json_t *, double, char *, size_t);
static void	show_hot_keys(json_t *);
static int	show_tty_raw(struct termios *);
static void	show_tty_restore(int, const struct termios *);
static int	show_top_wait(int, long);
static void	show_top_frame(const char *, json_t *, json_t *, int);
static void	show_quit_cb(int);
static long long show_int(json_t *, const char *);
static const char *show_str(json_t *, const char *);
static const char *show_duration(long long, char *, size_t);
static const char *show_server(const struct cli *);

int
show_stats(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	const char		*text;
	json_t			*root;
	int			 raw = show_json_flag(argc, argv, 1);

	kl = cli_connect(cli, 0);
	if (raw) {
		if ((st = keylock_stats(kl, &text)) != KEYLOCK_OK)
			return show_fail(cli, kl, st);
		printf("%s\n", text);
	} else {
		if ((st = keylock_stats_json(kl, &root)) != KEYLOCK_OK)
			return show_fail(cli, kl, st);
		show_summary(root);
		json_decref(root);
	}
	keylock_free(kl);
	return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
}

int
show_info(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	const char		*text;
	json_t			*root, *a, *o;
	size_t			 i;
	int			 raw = show_json_flag(argc, argv, 2);

	if (argc < 2 || argv[1][0] == '-')
		cli_usage_error("usage: keylock info KEY [--json]");
	kl = cli_connect(cli, 0);
	if (raw) {
		if ((st = keylock_info(kl, argv[1], &text)) != KEYLOCK_OK)
			return show_fail(cli, kl, st);
		printf("%s\n", text);
		keylock_free(kl);
		return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
	}
	if ((st = keylock_info_json(kl, argv[1], &root)) != KEYLOCK_OK)
		return show_fail(cli, kl, st);
	printf("key %s, limit %lld\n", show_str(root, "key"),
	    show_int(root, "limit"));
	a = json_object_get(root, "holders");
	printf("holders: %zu\n", json_array_size(a));
	json_array_foreach(a, i, o) {
		const char	*name = json_string_value(json_object_get(o,
				    "name"));

		printf("  client ");
		show_client(o);
		printf(" (%s), token %lld, %s, held %lld ms",
		    name != NULL ? name : "-",
		    show_int(o, "token"), show_str(o, "mode"),
		    show_int(o, "held_ms"));
		if (json_object_get(o, "expires_in_ms") != NULL)
			printf(", expires in %lld ms",
			    show_int(o, "expires_in_ms"));
		show_detached(o);
		printf("\n");
	}
	a = json_object_get(root, "waiters");
	printf("waiters: %zu\n", json_array_size(a));
	json_array_foreach(a, i, o) {
		const char	*name = json_string_value(json_object_get(o,
				    "name"));

		printf("  client ");
		show_client(o);
		printf(" (%s), %s, waited %lld ms",
		    name != NULL ? name : "-",
		    show_str(o, "mode"),
		    show_int(o, "waited_ms"));
		show_detached(o);
		printf("\n");
	}
	if (json_array_size(json_object_get(root, "holders")) > 0)
		printf("(a holder that is stuck: keylock kill CLIENT, as the "
		    "operator, closes its connection and releases its locks)"
		    "\n");
	json_decref(root);
	keylock_free(kl);
	return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
}

int
show_ping(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	struct timespec		 t0, t1;

	if (argc != 1)
		cli_usage_error("usage: keylock ping");
	kl = cli_connect(cli, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if ((st = keylock_ping(kl)) != KEYLOCK_OK)
		return show_fail(cli, kl, st);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("PONG from %s in %.3f ms\n", show_server(cli),
	    (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	keylock_free(kl);
	return fflush(stdout) == 0 ? 0 : CLI_EXIT_OSERR;
}

int
show_top(const struct cli *cli, int argc, char **argv)
{
	struct keylock		*kl;
	enum keylock_status	 st;
	struct termios		 saved;
	struct sigaction	 sa;
	json_t			*prev = NULL, *cur;
	long			 count = -1, delay = SHOW_TOP_DELAY_MS;
	int			 tty;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-n") == 0 && i + 1 < argc &&
		    (count = cli_parse_number(argv[i + 1], 1, 1000000000L))
		    > 0)
			i++;
		else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc &&
		    (delay = cli_parse_seconds(argv[i + 1])) > 0 &&
		    delay <= SHOW_TOP_DELAY_MAX_MS)
			i++;
		else
			cli_usage_error("usage: keylock top [-n COUNT] "
			    "[-d SECONDS]");
	}
	kl = cli_connect(cli, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = show_quit_cb;	/* no SA_RESTART: poll returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	tty = show_tty_raw(&saved);

	for (long frame = 0; count < 0 || frame < count; frame++) {
		if (show_quit || (frame > 0 && show_top_wait(tty, delay)))
			break;
		if ((st = keylock_stats_json(kl, &cur)) != KEYLOCK_OK) {
			show_tty_restore(tty, &saved);
			json_decref(prev);
			return show_fail(cli, kl, st);
		}
		show_top_frame(show_server(cli), cur, prev, tty);
		json_decref(prev);
		prev = cur;
	}
	show_tty_restore(tty, &saved);
	json_decref(prev);
	keylock_free(kl);
	return 0;
}

/* Keys without Enter and without echo, for 'q'; 1 if stdin and stdout are
 * a terminal and it worked. */
static int
show_tty_raw(struct termios *saved)
{
	struct termios	raw;

	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) ||
	    tcgetattr(STDIN_FILENO, saved) == -1)
		return 0;
	raw = *saved;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	return tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
}

static void
show_tty_restore(int tty, const struct termios *saved)
{
	if (tty)
		tcsetattr(STDIN_FILENO, TCSANOW, saved);
}

/* Waits for the next frame; 1 if the user quit meanwhile. Another key
 * redraws at once. */
static int
show_top_wait(int tty, long delay)
{
	struct pollfd	pfd = { .fd = tty ? STDIN_FILENO : -1,
			    .events = POLLIN };
	char		ch;

	if (poll(&pfd, 1, (int)delay) > 0 && read(STDIN_FILENO, &ch, 1) == 1 &&
	    (ch == 'q' || ch == 'Q'))
		return 1;
	return show_quit;
}

/* Reports a failed call and frees the connection; the exit code. */
static int
show_fail(const struct cli *cli, struct keylock *kl, enum keylock_status st)
{
	int	code = cli_fail(cli, kl, st);

	keylock_free(kl);
	return code;
}

/* "--json" after the subcommand's own words. */
static int
show_json_flag(int argc, char **argv, int nwords)
{
	if (argc == nwords)
		return 0;
	if (argc == nwords + 1 && strcmp(argv[nwords], "--json") == 0)
		return 1;
	cli_usage_error("usage: keylock %s%s [--json]", argv[0],
	    nwords > 1 ? " KEY" : "");
}

/* A holder's or waiter's client id, and its channel if INFO names one
 * (keylockd-protocol(7), CHANNELS: "client 14/7", as in error texts). */
static void
show_client(json_t *o)
{
	printf("%lld", show_int(o, "client"));
	if (json_is_integer(json_object_get(o, "channel")))
		printf("/%lld", show_int(o, "channel"));
}

/* A session whose connection dropped: its locks wait for a RESUME. */
static void
show_detached(json_t *o)
{
	if (json_is_integer(json_object_get(o, "detached_ms")))
		printf(", detached %lld ms (session)",
		    show_int(o, "detached_ms"));
}

/* STATS of a server with sessions (protocol 1.2): how many, how many
 * are detached now. */
static void
show_sessions(json_t *root)
{
	if (json_object_get(root, "sessions") == NULL)
		return;
	printf("sessions: %lld, detached %lld\n", show_int(root, "sessions"),
	    show_int(root, "sessions_detached"));
}

static void
show_summary(json_t *root)
{
	char		 up[32];
	const char	*name;
	json_t		*v;
	int		 other = 0;

	printf("keylockd %s, up %s, %lld clients\n",
	    show_str(root, "version"),
	    show_duration(show_int(root, "uptime_ms"), up, sizeof(up)),
	    show_int(root, "clients"));
	printf("now:      keys %lld, held %lld, waiting %lld, most waiters "
	    "on one key %lld\n", show_int(root, "keys"),
	    show_int(root, "held"), show_int(root, "waiting"),
	    show_int(root, "max_waiters"));
	show_sessions(root);
	printf("requests: ");
	for (size_t i = 0; i < SHOW_NCOUNTERS; i++) {
		if (i == 5)
			printf("\nreleases: ");
		printf("%s%s %lld", i == 0 || i == 5 ? "" : ", ",
		    show_counters[i], show_int(root, show_counters[i]));
	}
	printf("\n");
	show_hist("wait_ms", json_object_get(root, "wait_ms"), NULL);
	show_hist("hold_ms", json_object_get(root, "hold_ms"), NULL);
	/* Whatever else this server counts, so nothing is hidden. */
	json_object_foreach(root, name, v) {
		size_t	k;

		for (k = 0; k < sizeof(show_known) / sizeof(show_known[0]);
		    k++)
			if (strcmp(name, show_known[k]) == 0)
				break;
		if (k < sizeof(show_known) / sizeof(show_known[0]) ||
		    !json_is_integer(v))
			continue;
		/* four to a line, to stay within 80 columns */
		printf("%s%s %lld", other == 0 ? "other:    " :
		    other % 4 == 0 ? ",\n          " : ", ", name,
		    (long long)json_integer_value(v));
		other++;
	}
	if (other > 0)
		printf("\n");
	show_hot_keys(json_object_get(root, "hot_keys"));
}

/* One histogram line; with prev, only what happened since prev. */
static void
show_hist(const char *label, json_t *h, json_t *prev)
{
	char		p50[SHOW_PCT_MAX], p90[SHOW_PCT_MAX], p99[SHOW_PCT_MAX];
	long long	n = show_int(h, "count"), sum = show_int(h, "sum_ms");

	if (prev != NULL) {
		n -= show_int(prev, "count");
		sum -= show_int(prev, "sum_ms");
	}
	show_percentile(h, prev, 0.50, p50, sizeof(p50));
	show_percentile(h, prev, 0.90, p90, sizeof(p90));
	show_percentile(h, prev, 0.99, p99, sizeof(p99));
	printf("%-9s count %lld, mean %.1f ms, p50 %s, p90 %s, p99 %s\n",
	    label, n, n > 0 ? (double)sum / (double)n : 0.0, p50, p90, p99);
}

/*
 * The bucket bound below which a fraction q of the samples fall: "<=5" (ms),
 * ">60000" for the last bucket, "-" for no samples. Buckets are [upper_ms or
 * null, count], counts per bucket (keylockd-protocol(7), STATS).
 */
static void
show_percentile(json_t *h, json_t *prev, double q, char *out, size_t len)
{
	json_t		*b = json_object_get(h, "buckets"), *pb = NULL, *bk;
	long long	 total = 0, seen = 0, c, last = 0;
	size_t		 i;

	if (prev != NULL)
		pb = json_object_get(prev, "buckets");
	json_array_foreach(b, i, bk) {
		c = json_integer_value(json_array_get(bk, 1));
		if (pb != NULL)
			c -= json_integer_value(json_array_get(
			    json_array_get(pb, i), 1));
		total += c;
	}
	snprintf(out, len, "-");
	if (total <= 0)
		return;
	json_array_foreach(b, i, bk) {
		json_t	*up = json_array_get(bk, 0);

		c = json_integer_value(json_array_get(bk, 1));
		if (pb != NULL)
			c -= json_integer_value(json_array_get(
			    json_array_get(pb, i), 1));
		seen += c;
		if (json_is_integer(up))
			last = json_integer_value(up);
		if ((double)seen >= q * (double)total) {
			if (json_is_integer(up))
				snprintf(out, len, "<=%lld", last);
			else
				snprintf(out, len, ">%lld", last);
			return;
		}
	}
}

static void
show_hot_keys(json_t *hot)
{
	json_t	*o;
	size_t	 i;

	if (json_array_size(hot) == 0) {
		printf("hot keys: none\n");
		return;
	}
	printf("%-*s %7s %7s %8s %13s\n", SHOW_KEY_WIDTH, "KEY", "HOLDERS",
	    "WAITERS", "MAX_WAIT", "WAIT_MS_TOTAL");
	json_array_foreach(hot, i, o)
		printf("%-*.*s %7lld %7lld %8lld %13lld\n", SHOW_KEY_WIDTH,
		    SHOW_KEY_WIDTH, show_str(o, "key"), show_int(o, "holders"),
		    show_int(o, "waiters"),
		    show_int(o, "max_waiters"), show_int(o, "wait_ms_total"));
}

static void
show_top_frame(const char *server, json_t *cur, json_t *prev, int tty)
{
	char	up[32];
	double	secs = 1;

	if (tty)
		printf("\033[H\033[2J");	/* home, clear */
	else if (prev != NULL)
		printf("\n");
	printf("keylockd %s at %s, up %s, %lld clients%s\n",
	    show_str(cur, "version"), server,
	    show_duration(show_int(cur, "uptime_ms"), up, sizeof(up)),
	    show_int(cur, "clients"), tty ? "  (q quits)" : "");
	printf("now: keys %lld, held %lld, waiting %lld\n",
	    show_int(cur, "keys"), show_int(cur, "held"),
	    show_int(cur, "waiting"));
	show_sessions(cur);
	if (prev == NULL) {
		printf("per second: (next frame)\n");
		show_hist("wait_ms", json_object_get(cur, "wait_ms"), NULL);
	} else {
		/* the server's clock: exact however long the wait was */
		if (show_int(cur, "uptime_ms") > show_int(prev, "uptime_ms"))
			secs = (double)(show_int(cur, "uptime_ms") -
			    show_int(prev, "uptime_ms")) / 1000.0;
		printf("per second:");
		for (size_t i = 0; i < SHOW_NCOUNTERS; i++)
			printf("%s %s %.1f", i == 0 ? "" : i == 5 ?
			    ",\n           " : ",",
			    show_counters[i], (double)(show_int(cur,
			    show_counters[i]) - show_int(prev,
			    show_counters[i])) / secs);
		printf("\n");
		show_hist("wait_ms", json_object_get(cur, "wait_ms"),
		    json_object_get(prev, "wait_ms"));
	}
	show_hot_keys(json_object_get(cur, "hot_keys"));
	fflush(stdout);
}

static void
show_quit_cb(int sig)
{
	(void)sig;
	show_quit = 1;
}

static long long
show_int(json_t *o, const char *name)
{
	return (long long)json_integer_value(json_object_get(o, name));
}

static const char *
show_str(json_t *o, const char *name)
{
	const char	*s = json_string_value(json_object_get(o, name));

	return s != NULL ? s : "?";
}

static const char *
show_duration(long long ms, char *buf, size_t len)
{
	long long	s = ms / 1000;

	if (s >= 86400)
		snprintf(buf, len, "%lldd%02lldh%02lldm", s / 86400,
		    s % 86400 / 3600, s % 3600 / 60);
	else if (s >= 3600)
		snprintf(buf, len, "%lldh%02lldm%02llds", s / 3600,
		    s % 3600 / 60, s % 60);
	else if (s >= 60)
		snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
	else
		snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
	return buf;
}

static const char *
show_server(const struct cli *cli)
{
	const char	*s = cli->server;

	if (s == NULL || *s == '\0')
		s = getenv("KEYLOCK_SERVER");
	return s != NULL && *s != '\0' ? s : KEYLOCK_SERVER_DEFAULT;
}
