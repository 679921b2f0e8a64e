/*
 * keylock-bench: a load generator for keylockd. SPDX-License-Identifier: MIT
 *
 * main: options, the address, the connections, the event loop, and the
 * report (text, or JSON with --json). Cycles per second, requests per
 * second and latency percentiles per request type come from one run of one
 * workload against keylockd or, with --redis, the equivalent lock cycle on
 * Redis, so that both are measured by the same client in the same way.
 */
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "keylock-bench.h"

#define BENCH_VERSION		"0.1.0"
#define EX_BENCH_USAGE		64	/* sysexits.h EX_USAGE */
#define DEFAULT_SERVER		"127.0.0.1:7711"
#define DEFAULT_REDIS		"127.0.0.1:6379"
#define DEFAULT_ETCD		"127.0.0.1:2379"
#define ETCD_LEASE_SPARE_S	60	/* leases outlive the run by this */
#define DEFAULT_CONNS		50
#define DEFAULT_SEED_CONNS	1000
#define DEFAULT_SECONDS		5.0
#define DEFAULT_KEYSPACE	1000000
#define DEFAULT_FEW_KEYS	1	/* contended, shared, semaphore */
#define DEFAULT_SEED_KEYS	50
#define DEFAULT_HOLD_KEYS	1000000
#define DEFAULT_LIMIT		4
#define DEFAULT_PX_MS		60000
#define DEFAULT_HOLD_PX_MS	3600000	/* outlives any measurement */
#define DEFAULT_HOLD_MS		1
#define DEFAULT_REFRESH_TTL_MS	10000	/* -w refresh's ttl= */
#define KEYS_PER_LOCK_MAX	64	/* keylockd's default max-keys */
#define HELD_PER_CONN		10000	/* keylockd's default max-locks */
#define PROGRESS_S		1
#define CONNECT_SOURCES		16	/* -w connect to 127.x: 127.0.0.1-16 */

static const char *const bench_works[WORK_MAX] = {
	[WORK_LOCK_UNLOCK] = "lock-unlock",
	[WORK_TRYLOCK] = "trylock",
	[WORK_CONTENDED] = "contended",
	[WORK_SHARED] = "shared",
	[WORK_SEMAPHORE] = "semaphore",
	[WORK_HOLD] = "hold",
	[WORK_CONNECT] = "connect",
	[WORK_IDLE] = "idle",
	[WORK_SEED] = "seed",
	[WORK_REFRESH] = "refresh",
};

static const char *const bench_rts[RT_MAX] = {
	[RT_LOCK] = "LOCK",
	[RT_TRYLOCK] = "TRYLOCK",
	[RT_UNLOCK] = "UNLOCK",
	[RT_SET] = "SET",
	[RT_DEL] = "DEL",
	[RT_EVALSHA] = "EVALSHA",
	[RT_CONNECT] = "connect",
	[RT_STATS] = "STATS",
	[RT_PING] = "PING",
	[RT_INFO] = "INFO",
	[RT_SCRIPT] = "SCRIPT",
	[RT_GRANT] = "grant",
	[RT_REVOKE] = "revoke",
	[RT_RANGE] = "range",
	[RT_SESSION] = "SESSION",
	[RT_REFRESH] = "REFRESH",
};

enum {
	OPT_KEYS_PER_LOCK = 256,
	OPT_LIMIT,
	OPT_TTL,
	OPT_REDIS,
	OPT_REDIS_UNLOCK,
	OPT_ETCD,
	OPT_HELD,
	OPT_HELD_CONNS,
	OPT_HOLD_MS,
	OPT_SERVER_PID,
	OPT_JSON,
	OPT_PROGRESS,
	OPT_NO_PROGRESS,
	OPT_SEED,
	OPT_SOURCES,
	OPT_SESSION,
	OPT_CHANNELS
};

static const struct option bench_long[] = {
	{ "server", required_argument, NULL, 'S' },
	{ "connections", required_argument, NULL, 'c' },
	{ "requests", required_argument, NULL, 'n' },
	{ "time", required_argument, NULL, 't' },
	{ "pipeline", required_argument, NULL, 'P' },
	{ "keyspace", required_argument, NULL, 'r' },
	{ "workload", required_argument, NULL, 'w' },
	{ "keys-per-lock", required_argument, NULL, OPT_KEYS_PER_LOCK },
	{ "limit", required_argument, NULL, OPT_LIMIT },
	{ "ttl", required_argument, NULL, OPT_TTL },
	{ "redis", no_argument, NULL, OPT_REDIS },
	{ "redis-unlock", required_argument, NULL, OPT_REDIS_UNLOCK },
	{ "etcd", no_argument, NULL, OPT_ETCD },
	{ "held", required_argument, NULL, OPT_HELD },
	{ "held-connections", required_argument, NULL, OPT_HELD_CONNS },
	{ "hold-ms", required_argument, NULL, OPT_HOLD_MS },
	{ "server-pid", required_argument, NULL, OPT_SERVER_PID },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "progress", no_argument, NULL, OPT_PROGRESS },
	{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "sources", required_argument, NULL, OPT_SOURCES },
	{ "session", optional_argument, NULL, OPT_SESSION },
	{ "channels", required_argument, NULL, OPT_CHANNELS },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 }
};

uint64_t
bench_now(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Records the first failure, ends the run, and makes the exit status 1. */
void
bench_fail(struct bench *b, const char *fmt, ...)
{
	va_list	ap;

	if (b->status == 0) {
		va_start(ap, fmt);
		vsnprintf(b->failure, sizeof(b->failure), fmt, ap);
		va_end(ap);
		b->status = 1;
	}
	work_finish(b);
}

const char *
bench_rt_name(enum bench_rt t)
{
	return t < RT_MAX ? bench_rts[t] : "?";
}

const char *
bench_work_name(enum bench_work w)
{
	return w < WORK_MAX ? bench_works[w] : "?";
}

static void
usage(FILE *f)
{
	fprintf(f,
"usage: keylock-bench [-S server] [-c connections] [-n requests | -t seconds]\n"
"                     [-P pipeline] [-r keyspace] [-w workload] [options]\n"
"\n"
"  -S, --server HOST:PORT|PATH  keylockd (default " DEFAULT_SERVER "),\n"
"                               Redis (default " DEFAULT_REDIS ")\n"
"                               or etcd (default " DEFAULT_ETCD ");\n"
"                               A,B,...: connections take turns\n"
"  -c, --connections N          connections (default %d; seed: %d)\n"
"      --channels N             the -c clients as channels of N connections,\n"
"                               taking turns (keylockd's @N lines)\n"
"  -n, --requests N             stop after N requests (hold: keys to hold)\n"
"  -t, --time SECONDS           stop after SECONDS (default %.0f)\n"
"  -P, --pipeline N             requests in flight per connection (default 1)\n"
"  -r, --keyspace N             random keys lock:0..N-1 (default %d;\n"
"                               contended, shared, semaphore: %d; seed: %d)\n"
"  -w, --workload NAME          lock-unlock (default), trylock, contended,\n"
"                               shared, semaphore, hold, connect, idle, seed,\n"
"                               refresh\n"
"      --keys-per-lock N        keys per LOCK (default 1)\n"
"      --limit N                semaphore limit= (default %d)\n"
"      --ttl MS                 ttl= on every LOCK; Redis PX (default %d);\n"
"                               refresh: of its locks and REFRESHes (%d)\n"
"      --redis                  drive Redis: SET key token NX PX ttl + DEL\n"
"      --redis-unlock del|script  unlock with DEL or the compare-and-delete\n"
"                               script (EVALSHA)\n"
"      --etcd                   drive etcd's lock API: /v3/lock/lock +\n"
"                               /v3/lock/unlock, a lease per connection\n"
"      --held N                 hold N other keys while the workload runs\n"
"      --held-connections N     connections that hold them (default N/%d)\n"
"      --hold-ms MS             seed: how long each lock is held (default %d)\n"
"      --server-pid PID         read the server's VmRSS for memory figures\n"
"      --sources N              connect from 127.0.0.1..N (default: %d for\n"
"                               -w connect to a 127.x server, else 1)\n"
"      --session[=MS]           SESSION [grace=MS] on every connection before\n"
"                               the workload; QUIT at the end\n"
"      --json                   print the results as one JSON object\n"
"      --progress, --no-progress  the live line (default: on a terminal)\n"
"      --seed N                 random seed\n"
"  -h, --help, -V, --version\n"
"\n"
"See keylock-bench(1).\n", DEFAULT_CONNS, DEFAULT_SEED_CONNS, DEFAULT_SECONDS,
	    DEFAULT_KEYSPACE, DEFAULT_FEW_KEYS, DEFAULT_SEED_KEYS, DEFAULT_LIMIT,
	    DEFAULT_PX_MS, DEFAULT_REFRESH_TTL_MS, HELD_PER_CONN,
	    DEFAULT_HOLD_MS, CONNECT_SOURCES);
}

static void
bench_usage_error(const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "keylock-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'keylock-bench --help'.\n");
	exit(EX_BENCH_USAGE);
}

/* A whole decimal number in [min, max], or a usage error naming opt. */
static uint64_t
bench_number(const char *s, uint64_t min, uint64_t max, const char *opt)
{
	unsigned long long	 v;
	char			*end;

	errno = 0;
	if (*s < '0' || *s > '9')
		bench_usage_error("%s: not a number: %s", opt, s);
	v = strtoull(s, &end, 10);
	if (*end != '\0' || errno != 0 || v < min || v > max)
		bench_usage_error("%s: %s is not a number from %" PRIu64
		    " to %" PRIu64, opt, s, min, max);
	return v;
}

static enum bench_work
bench_workload(const char *s)
{
	for (int i = 0; i < WORK_MAX; i++)
		if (strcmp(s, bench_works[i]) == 0)
			return (enum bench_work)i;
	bench_usage_error("-w: unknown workload %s", s);
	return WORK_MAX;
}

static double
bench_seconds(const char *s)
{
	char	*end;
	double	 v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || errno != 0 || !(v > 0) || v > 1e6)
		bench_usage_error("-t: not a duration in seconds: %s", s);
	return v;
}

/* The options that take a number. */
static bool
bench_parse_number(struct bench_opts *o, int ch, const char *arg)
{
	switch (ch) {
	case 'c':
		o->conns = (int)bench_number(arg, 1, 1000000, "-c");
		break;
	case 'n':
		o->requests = bench_number(arg, 1, UINT64_MAX / 2, "-n");
		break;
	case 't':
		o->seconds = bench_seconds(arg);
		break;
	case 'P':
		o->pipeline = (int)bench_number(arg, 1, 100000, "-P");
		break;
	case 'r':
		o->keyspace = bench_number(arg, 1, UINT64_MAX / 2, "-r");
		break;
	case OPT_KEYS_PER_LOCK:
		o->keys_per_lock = (int)bench_number(arg, 1,
		    KEYS_PER_LOCK_MAX, "--keys-per-lock");
		break;
	case OPT_LIMIT:
		o->limit = (int)bench_number(arg, 1, 1000000000, "--limit");
		break;
	case OPT_TTL:
		o->ttl_ms = (int64_t)bench_number(arg, 1, 1000000000000ULL,
		    "--ttl");
		break;
	case OPT_HELD:
		o->held = bench_number(arg, 1, 1000000000, "--held");
		break;
	case OPT_HELD_CONNS:
		o->held_conns = (int)bench_number(arg, 1, 100000,
		    "--held-connections");
		break;
	case OPT_HOLD_MS:
		o->hold_ms = (int)bench_number(arg, 0, 3600000, "--hold-ms");
		break;
	case OPT_SERVER_PID:
		o->server_pid = (long)bench_number(arg, 1, INT32_MAX,
		    "--server-pid");
		break;
	case OPT_SEED:
		o->seed = bench_number(arg, 0, UINT64_MAX, "--seed");
		break;
	case OPT_SOURCES:
		o->sources = (int)bench_number(arg, 1, 65536, "--sources");
		break;
	case OPT_CHANNELS:
		o->channels = (int)bench_number(arg, 1, 1000000, "--channels");
		break;
	case OPT_SESSION:
		o->session = true;
		o->session_grace_ms = arg == NULL ? 0 : (int64_t)bench_number(
		    arg, 1, 1000000000, "--session");
		break;
	default:
		return false;
	}
	return true;
}

static void
bench_parse_one(struct bench_opts *o, int ch, const char *arg)
{
	if (bench_parse_number(o, ch, arg))
		return;
	switch (ch) {
	case 'S':
		o->server = arg;
		break;
	case 'w':
		o->work = bench_workload(arg);
		break;
	case OPT_REDIS:
		o->proto = BENCH_REDIS;
		break;
	case OPT_ETCD:
		o->proto = BENCH_ETCD;
		break;
	case OPT_REDIS_UNLOCK:
		if (strcmp(arg, "del") != 0 && strcmp(arg, "script") != 0)
			bench_usage_error("--redis-unlock: del or script");
		o->redis_script = strcmp(arg, "script") == 0;
		break;
	case OPT_JSON:
		o->json = true;
		break;
	case OPT_PROGRESS:
		o->progress = 1;
		break;
	case OPT_NO_PROGRESS:
		o->progress = 0;
		break;
	case 'h':
		usage(stdout);
		exit(0);
	case 'V':
		printf("keylock-bench %s\n", BENCH_VERSION);
		exit(0);
	default:
		usage(stderr);
		exit(EX_BENCH_USAGE);
	}
}

/* Fills in the defaults that depend on the workload, and checks. */
static void
bench_settle_opts(struct bench_opts *o)
{
	bool	redis = o->proto == BENCH_REDIS;
	bool	etcd = o->proto == BENCH_ETCD;

	if (o->server == NULL)
		o->server = redis ? DEFAULT_REDIS : etcd ? DEFAULT_ETCD :
		    DEFAULT_SERVER;
	if (o->conns == 0)
		o->conns = o->work == WORK_SEED ? DEFAULT_SEED_CONNS :
		    DEFAULT_CONNS;
	if (o->keyspace == 0)
		o->keyspace = o->work == WORK_SEED ? DEFAULT_SEED_KEYS :
		    o->work == WORK_CONTENDED || o->work == WORK_SHARED ||
		    o->work == WORK_SEMAPHORE ? DEFAULT_FEW_KEYS :
		    DEFAULT_KEYSPACE;
	if (o->work == WORK_HOLD && o->requests == 0)
		o->requests = DEFAULT_HOLD_KEYS;
	if (o->requests == 0 && o->seconds == 0)
		o->seconds = DEFAULT_SECONDS;
	if (o->requests > 0 && o->seconds > 0)
		bench_usage_error("-n and -t: give one of them");
	o->px_ms = o->ttl_ms > 0 ? o->ttl_ms : DEFAULT_PX_MS;
	o->hold_px_ms = o->ttl_ms > 0 ? o->ttl_ms : DEFAULT_HOLD_PX_MS;
	if (redis && (o->work == WORK_SHARED || o->work == WORK_SEMAPHORE ||
	    o->work == WORK_SEED || o->work == WORK_REFRESH))
		bench_usage_error("--redis: Redis has no equivalent of -w %s",
		    bench_works[o->work]);
	if (redis && o->keys_per_lock > 1)
		bench_usage_error("--redis: one key per lock only");
	if (etcd && o->work != WORK_LOCK_UNLOCK && o->work != WORK_CONTENDED)
		bench_usage_error("--etcd: lock-unlock and contended only, "
		    "not -w %s", bench_works[o->work]);
	if (etcd && (o->keys_per_lock > 1 || o->pipeline > 1 ||
	    o->held > 0 || o->ttl_ms > 0))
		bench_usage_error("--etcd: one key per lock, -P 1, no --held "
		    "or --ttl (the lock call waits; its lease is the ttl)");
	if (etcd && strchr(o->server, '/') != NULL)
		bench_usage_error("--etcd: -S is host:port");
	if (o->work == WORK_REFRESH && o->keys_per_lock > 1)
		bench_usage_error("-w refresh: one key per lock");
	if (o->work == WORK_REFRESH && o->keyspace < (uint64_t)o->conns)
		bench_usage_error("-w refresh: a key each: -r %" PRIu64 " is "
		    "fewer than the %d clients (-c)", o->keyspace, o->conns);
	if ((uint64_t)o->keys_per_lock > o->keyspace)
		bench_usage_error("--keys-per-lock %d is more than the "
		    "keyspace", o->keys_per_lock);
	if (o->held > 0 && o->work == WORK_HOLD)
		bench_usage_error("--held: -w hold holds -n keys itself");
	if (o->session && (redis || etcd))
		bench_usage_error("--session: keylockd only");
	if (o->session && o->work == WORK_CONNECT)
		bench_usage_error("--session: not with -w connect (its "
		    "connections are opened by the workload)");
	if (o->channels > 0 && (redis || etcd))
		bench_usage_error("--channels: keylockd only (%s has no "
		    "channels)", redis ? "Redis" : "etcd");
	if (o->channels > 0 && o->work == WORK_CONNECT)
		bench_usage_error("--channels: not with -w connect (it "
		    "measures opening connections; a channel needs none)");
	if (o->channels > 0 && o->work == WORK_IDLE)
		bench_usage_error("--channels: not with -w idle (it measures "
		    "idle connections; an idle channel is nothing on the "
		    "server)");
	if (o->channels > o->conns)
		bench_usage_error("--channels %d: more connections than the "
		    "%d clients (-c)", o->channels, o->conns);
}

static void
bench_parse_args(struct bench_opts *o, int argc, char *argv[])
{
	int	ch;

	memset(o, 0, sizeof(*o));
	o->pipeline = 1;
	o->keys_per_lock = 1;
	o->limit = DEFAULT_LIMIT;
	o->ttl_ms = -1;
	o->hold_ms = DEFAULT_HOLD_MS;
	o->progress = -1;
	o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	while ((ch = getopt_long(argc, argv, "S:c:n:t:P:r:w:hV", bench_long,
	    NULL)) != -1)
		bench_parse_one(o, ch, optarg);
	if (optind < argc)
		bench_usage_error("unexpected argument %s", argv[optind]);
	bench_settle_opts(o);
}

/* One server of -S: a path (it has a '/') or host:port, [v6]:port, host. */
static bool
bench_resolve_one(struct bench *b, struct bench_server *srv)
{
	const char		*s = srv->name, *colon;
	char			 host[256], port[16] = "7711";
	struct addrinfo		 hints, *res;
	struct sockaddr_un	*un = (struct sockaddr_un *)&srv->addr;
	size_t			 hl;
	int			 e;

	if (strchr(s, '/') != NULL) {
		if (strlen(s) >= sizeof(un->sun_path))
			return false;
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, s, strlen(s) + 1);
		srv->addrlen = sizeof(*un);
		srv->is_unix = true;
		return true;
	}
	if (b->o.proto == BENCH_REDIS)
		snprintf(port, sizeof(port), "6379");
	else if (b->o.proto == BENCH_ETCD)
		snprintf(port, sizeof(port), "2379");
	if (*s == '[' && (colon = strstr(s, "]:")) != NULL) {
		hl = (size_t)(colon - s - 1);
		s++;
		colon++;
	} else if ((colon = strrchr(s, ':')) != NULL)
		hl = (size_t)(colon - s);
	else
		hl = strlen(s);
	if (hl >= sizeof(host) || (colon != NULL &&
	    strlen(colon + 1) >= sizeof(port)))
		return false;
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (colon != NULL)
		snprintf(port, sizeof(port), "%s", colon + 1);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	if ((e = getaddrinfo(host, port, &hints, &res)) != 0) {
		fprintf(stderr, "keylock-bench: %s: %s\n", srv->name,
		    gai_strerror(e));
		return false;
	}
	memcpy(&srv->addr, res->ai_addr, res->ai_addrlen);
	srv->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	return true;
}

/* -S: one server, or a comma-separated list that the connections take
 * in turn (connection i the server i modulo their number). */
static bool
bench_resolve(struct bench *b)
{
	const char	*s = b->o.server, *comma;
	size_t		 len;

	for (;;) {
		struct bench_server *srv = &b->srv[b->nsrv];

		comma = strchr(s, ',');
		len = comma != NULL ? (size_t)(comma - s) : strlen(s);
		if (b->nsrv == BENCH_SERVERS_MAX || len == 0 ||
		    len >= sizeof(srv->name)) {
			fprintf(stderr, "keylock-bench: -S %s: 1 to %d "
			    "servers, each host:port or a path\n", b->o.server,
			    BENCH_SERVERS_MAX);
			return false;
		}
		memcpy(srv->name, s, len);
		srv->name[len] = '\0';
		if (!bench_resolve_one(b, srv))
			return false;
		b->is_unix = b->is_unix || srv->is_unix;
		b->nsrv++;
		if (comma == NULL)
			break;
		s = comma + 1;
	}
	memcpy(&b->addr, &b->srv[0].addr, sizeof(b->addr));
	b->addrlen = b->srv[0].addrlen;
	return true;
}

static bool
bench_is_loopback4(const struct bench *b)
{
	const struct sockaddr_in	*sin = (const void *)&b->addr;

	return b->addr.ss_family == AF_INET &&
	    (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
}

/* Every connection is a descriptor: raise the soft limit as needed. */
static bool
bench_rlimit(int need)
{
	struct rlimit	rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		return false;
	if (rl.rlim_cur >= (rlim_t)need)
		return true;
	rl.rlim_cur = rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < (rlim_t)need ? rl.rlim_max : (rlim_t)need;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur >= (rlim_t)need)
		return true;
	fprintf(stderr, "keylock-bench: %d connections need %d descriptors, "
	    "but the limit is %llu (ulimit -n)\n", need - BENCH_FD_SPARE,
	    need, (unsigned long long)rl.rlim_cur);
	return false;
}

static void
bench_oom(void)
{
	fprintf(stderr, "keylock-bench: out of memory\n");
	exit(1);
}

static struct bsock *
bench_add_sock(struct bench *b, int srv)
{
	struct bsock	*s;

	if ((s = bsock_new(b, b->nall)) == NULL)
		bench_oom();
	s->srv = srv;
	b->all[b->nall++] = s;
	return s;
}

static struct bconn *
bench_add_client(struct bench *b, enum bconn_role role)
{
	struct bconn	*c;

	if ((c = bconn_new(b, b->nclients, role)) == NULL)
		bench_oom();
	b->clients[b->nclients++] = c;
	return c;
}

/* A client on a socket of its own, as channel 0: a connection. */
static struct bconn *
bench_add_conn(struct bench *b, enum bconn_role role, int srv)
{
	struct bconn	*c = bench_add_client(b, role);

	if (!bsock_add(bench_add_sock(b, srv), c, false))
		bench_oom();
	return c;
}

/*
 * --channels N: N sockets, each with its own channel 0 (for SESSION), and
 * the -c clients given to them in turn as channels 1, 2, ...: client i is
 * channel i / N + 1 of socket i % N.
 */
static void
bench_add_channels(struct bench *b, int nclients, enum bconn_role role,
    struct bconn **out)
{
	int		 nsock = b->o.channels, first = b->nall;
	struct bconn	*c;

	for (int i = 0; i < nsock; i++) {
		c = bench_add_client(b, ROLE_CHAN0);
		if (!bsock_add(bench_add_sock(b, i % b->nsrv), c, false))
			bench_oom();
	}
	for (int i = 0; i < nclients; i++) {
		c = bench_add_client(b, role);
		if (!bsock_add(b->all[first + i % nsock], c, true))
			bench_oom();
		out[i] = c;
	}
}

static void
bench_make_conns(struct bench *b)
{
	const struct bench_opts	*o = &b->o;
	int			 nwork, nhold = 0, n = 0;
	uint64_t		 share;
	bool			 ctl;

	nwork = o->work == WORK_HOLD ? 0 : o->conns;
	if (o->work == WORK_HOLD) {
		nhold = o->conns;
		b->held_total = o->requests;
	} else if (o->held > 0) {
		nhold = o->held_conns > 0 ? o->held_conns :
		    (int)((o->held + HELD_PER_CONN - 1) / HELD_PER_CONN);
		b->held_total = o->held;
	}
	if ((uint64_t)nhold > b->held_total)
		nhold = (int)b->held_total;
	ctl = (o->proto == BENCH_REDIS && o->redis_script) || nhold > 0 ||
	    o->work == WORK_IDLE || o->proto == BENCH_ETCD;
	/* sockets: the control one, the holders', the workers' or, with
	 * --channels, N; clients: as many, and the N channels 0 */
	b->all = calloc((size_t)(nwork + nhold + o->channels + 1),
	    sizeof(*b->all));
	b->clients = calloc((size_t)(nwork + nhold + o->channels + 1),
	    sizeof(*b->clients));
	b->work = calloc((size_t)nwork + 1, sizeof(*b->work));
	b->holders = calloc((size_t)nhold + 1, sizeof(*b->holders));
	if (b->all == NULL || b->clients == NULL || b->work == NULL ||
	    b->holders == NULL)
		bench_oom();
	if (ctl) {
		b->ctl = bench_add_conn(b, ROLE_CTL, 0);
		b->ctl->s->is_ctl = true;
	}
	share = nhold > 0 ? (b->held_total + (uint64_t)nhold - 1) /
	    (uint64_t)nhold : 0;
	/* -w hold's holders are the -c clients: channels with --channels;
	 * --held's stay connections of their own */
	if (o->channels > 0 && o->work == WORK_HOLD)
		bench_add_channels(b, nhold, ROLE_HOLD, b->holders);
	for (int i = 0; i < nhold; i++) {
		struct bconn	*c = o->channels > 0 && o->work == WORK_HOLD ?
		    b->holders[i] : bench_add_conn(b, ROLE_HOLD, i % b->nsrv);

		c->hold_next = (uint64_t)i * share;
		c->hold_end = c->hold_next + share < b->held_total ?
		    c->hold_next + share : b->held_total;
		b->holders[b->nholders++] = c;
	}
	if (o->channels > 0 && nwork > 0) {
		bench_add_channels(b, nwork, ROLE_WORK, b->work);
		n = nwork;
	}
	for (; n < nwork; n++)
		b->work[n] = bench_add_conn(b, o->work == WORK_IDLE ?
		    ROLE_IDLE : ROLE_WORK, n % b->nsrv);
	b->nwork = n;
}

static void
bench_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bench	*b = arg;
	uint64_t	 now = bench_now();
	double		 dt = (double)(now - b->t_tick) / 1e9;

	switch (b->phase) {
	case PH_CONNECT:
		printf("\rconnecting: %d of %d\033[K", b->next_connect,
		    b->nall);
		break;
	case PH_HOLD:
		printf("\rholding: %" PRIu64 " of %" PRIu64 " keys\033[K",
		    b->held_keys, b->held_total);
		break;
	case PH_RUN:
		printf("\r%s: %.0f s, %.0f cycles/s, %.0f requests/s, "
		    "p50 %.3f ms\033[K", bench_works[b->o.work],
		    bench_secs(b), dt > 0 ? (double)(b->cycles -
		    b->tick_cycles) / dt : 0, dt > 0 ? (double)(b->requests -
		    b->tick_requests) / dt : 0,
		    (double)bhist_percentile(&b->all_hist, 50) / 1e6);
		break;
	default:
		return;
	}
	fflush(stdout);
	b->tick_cycles = b->cycles;
	b->tick_requests = b->requests;
	b->t_tick = now;
}

static void
bench_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bench	*b = arg;

	if (b->phase == PH_DRAIN || b->phase == PH_REVOKE)
		work_finish(b);
	else
		work_stop(b);
}

static void
bench_signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct bench	*b = arg;

	if (b->phase != PH_RUN && b->phase != PH_DRAIN &&
	    b->phase != PH_REVOKE)
		bench_fail(b, "interrupted");
	work_finish(b);
}

static bool
bench_events(struct bench *b)
{
	struct event_config	*cfg;
	struct timeval		 tv = { PROGRESS_S, 0 };

	if ((cfg = event_config_new()) == NULL)
		return false;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
	/* The seed holds locks for about a millisecond: ask for timerfd. */
	if (b->o.work == WORK_SEED)
		event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	b->base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (b->base == NULL)
		return false;
	/* The seed: events take the middle one of three priorities, and the
	 * LOCKs not yet written the lowest (work_seed_burst_cb). */
	if (b->o.work == WORK_SEED &&
	    event_base_priority_init(b->base, BENCH_PRIORITIES) == -1)
		return false;
	b->deadline = evtimer_new(b->base, bench_deadline_cb, b);
	b->sigint = evsignal_new(b->base, SIGINT, bench_signal_cb, b);
	b->sigterm = evsignal_new(b->base, SIGTERM, bench_signal_cb, b);
	if (b->deadline == NULL || b->sigint == NULL || b->sigterm == NULL)
		return false;
	evsignal_add(b->sigint, NULL);
	evsignal_add(b->sigterm, NULL);
	if (b->o.progress == 1 || (b->o.progress == -1 && !b->o.json &&
	    isatty(STDOUT_FILENO))) {
		b->tick = event_new(b->base, -1, EV_PERSIST, bench_tick_cb, b);
		if (b->tick == NULL)
			return false;
		evtimer_add(b->tick, &tv);
	}
	return true;
}

static bool
bench_init(struct bench *b)
{
	const struct bench_opts	*o = &b->o;

	b->rng = o->seed | 1;
	b->etcd_ttl_s = (int64_t)(o->requests > 0 ? 3600 : o->seconds) +
	    ETCD_LEASE_SPARE_S;
	for (int t = 0; t < RT_MAX; t++)
		bhist_init(&b->hist[t]);
	bhist_init(&b->all_hist);
	if (o->work == WORK_SHARED)
		snprintf(b->lock_opts, sizeof(b->lock_opts), " mode=shared");
	else if (o->work == WORK_SEMAPHORE)
		snprintf(b->lock_opts, sizeof(b->lock_opts), " limit=%d",
		    o->limit);
	if (o->ttl_ms > 0)
		snprintf(b->hold_opts, sizeof(b->hold_opts), " ttl=%" PRId64,
		    o->ttl_ms);
	b->hold_opts_len = strlen(b->hold_opts);
	memcpy(b->lock_opts + strlen(b->lock_opts), b->hold_opts,
	    b->hold_opts_len + 1);
	/* -w refresh: its locks and REFRESHes always have a ttl (--held's
	 * keys only one given by --ttl) */
	b->refresh_ttl_ms = o->ttl_ms > 0 ? o->ttl_ms : DEFAULT_REFRESH_TTL_MS;
	if (o->work == WORK_REFRESH)
		snprintf(b->lock_opts, sizeof(b->lock_opts), " ttl=%" PRId64,
		    b->refresh_ttl_ms);
	b->lock_opts_len = strlen(b->lock_opts);
	if ((b->scratch = malloc(BENCH_SCRATCH_SIZE)) == NULL)
		return false;
	if (o->work == WORK_SEED) {
		b->seed_holder = malloc(o->keyspace * sizeof(int));
		b->seed_token = calloc(o->keyspace, sizeof(uint64_t));
		b->seed_released = calloc(o->keyspace, sizeof(uint64_t));
		if (b->seed_holder == NULL || b->seed_token == NULL ||
		    b->seed_released == NULL)
			return false;
		bhist_init(&b->seed_handoff);
		bhist_init(&b->seed_overrun);
		for (uint64_t i = 0; i < o->keyspace; i++)
			b->seed_holder[i] = -1;
	}
	if (!bench_resolve(b))
		return false;
	if (b->o.sources == 0)
		b->o.sources = o->work == WORK_CONNECT &&
		    bench_is_loopback4(b) ? CONNECT_SOURCES : 1;
	bench_make_conns(b);
	return bench_rlimit(b->nall + BENCH_FD_SPARE) && bench_events(b) &&
	    bsock_events(b);
}

static void
bench_cleanup(struct bench *b)
{
	for (int i = 0; i < b->nall; i++)
		bsock_free(b->all[i]);
	for (int i = 0; i < b->nclients; i++)
		bconn_free(b->clients[i]);
	free(b->all);
	free(b->clients);
	free(b->marked);
	if (b->sendall != NULL)
		event_free(b->sendall);
	free(b->work);
	free(b->holders);
	free(b->scratch);
	free(b->ebody);
	free(b->seed_holder);
	free(b->seed_token);
	free(b->seed_released);
	if (b->seed_burst != NULL)
		event_free(b->seed_burst);
	if (b->tick != NULL)
		event_free(b->tick);
	if (b->deadline != NULL)
		event_free(b->deadline);
	if (b->sigint != NULL)
		event_free(b->sigint);
	if (b->sigterm != NULL)
		event_free(b->sigterm);
	if (b->base != NULL)
		event_base_free(b->base);
}

int
main(int argc, char *argv[])
{
	struct bench	b;
	int		status;

	memset(&b, 0, sizeof(b));
	bench_parse_args(&b.o, argc, argv);
	if (!bench_init(&b)) {
		if (b.base == NULL && errno != 0)
			fprintf(stderr, "keylock-bench: setup: %s\n",
			    strerror(errno));
		bench_cleanup(&b);
		return 1;
	}
	if (b.o.work == WORK_IDLE && b.o.server_pid > 0) {
		if (!work_rss(b.o.server_pid, &b.mem.rss_before)) {
			fprintf(stderr, "keylock-bench: cannot read VmRSS of "
			    "process %ld\n", b.o.server_pid);
			bench_cleanup(&b);
			return 1;
		}
		b.mem.have_rss = true;
	}
	work_start(&b);
	if (!b.stopping)
		event_base_dispatch(b.base);
	bconn_quit_all(&b);
	bench_report(&b);
	if (b.status != 0)
		fprintf(stderr, "keylock-bench: %s\n", b.failure);
	status = b.status;
	bench_cleanup(&b);
	return status;
}
