/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * One table of settings serves the command line and the config file, so
 * the two can never disagree on a name, a range or a default. Precedence:
 * built-in default < config file < command line. Errors name the file and
 * line and are all reported before giving up; nothing here touches sockets.
 */
#include <sys/stat.h>

#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "kl.h"
#include "users.h"
#include "util.h"

#ifndef KL_SYSCONFDIR
#define KL_SYSCONFDIR	"/etc"
#endif
#ifndef KL_LOCALSTATEDIR
#define KL_LOCALSTATEDIR "/var"
#endif
#ifndef KL_RUNSTATEDIR
#define KL_RUNSTATEDIR	"/run"
#endif

#define CONFIG_DEFAULT_FILE	KL_SYSCONFDIR "/keylockd/keylockd.conf"

enum setting_kind {
	SET_INT,	/* a number in [min, max] */
	SET_INT_NONE,	/* a number or "none" */
	SET_STRING,
	SET_PATH_OR_EMPTY,
	SET_BIND,	/* appended; the first on a layer replaces */
	SET_FLAG,	/* yes/no in the file, no argument on the line */
	SET_MODE,	/* octal file mode */
	SET_LEVEL,
	SET_USER	/* appended on every layer (users.h) */
};

struct setting {
	const char		*name;
	const char		*arg;	/* --help's name of the value */
	enum setting_kind	 kind;
	size_t			 off;
	int64_t			 min, max;
	const char		*help;
	bool			 live;	/* SIGHUP applies it */
};

#define OFF(f)	offsetof(struct config, f)
static const struct setting settings[] = {
	{ "bind", "ADDR", SET_BIND, OFF(binds), 0, 0,
	    "address to listen on (repeatable)", false },
	{ "port", "N", SET_INT, OFF(port), 0, 65535,
	    "TCP port (0: any free port)", false },
	{ "no-tcp", NULL, SET_FLAG, OFF(no_tcp), 0, 0,
	    "do not listen on TCP", false },
	{ "unix", "PATH", SET_PATH_OR_EMPTY, OFF(unix_path), 0, 0,
	    "unix socket path (empty: none)", false },
	{ "unix-mode", "MODE", SET_MODE, OFF(unix_mode), 0, 0777,
	    "unix socket file mode (octal)", false },
	{ "unix-group", "GROUP", SET_STRING, OFF(unix_group), 0, 0,
	    "unix socket group", false },
	{ "state-dir", "DIR", SET_STRING, OFF(state_dir), 0, 0,
	    "directory for the fencing-token mark", false },
	{ "upgrade-timeout", "MS", SET_INT, OFF(upgrade_timeout), 100,
	    (int64_t)KL_MS_MAX, "ms a live upgrade's new process has to "
	    "pass --check-config and to report ready", true },
	{ "port-file", "FILE", SET_STRING, OFF(port_file), 0, 0,
	    "write the bound TCP port here", false },
	{ "max-clients", "N", SET_INT, OFF(max_clients), 1, 10000000,
	    "open connections", true },
	{ "auth-timeout", "MS", SET_INT, OFF(auth_timeout), 0,
	    (int64_t)KL_MS_MAX, "ms a connection has for AUTH, or for a "
	    "first line with no secret (0: no limit)", true },
	{ "max-clients-per-address", "N", SET_INT,
	    OFF(max_clients_per_address), 0, 10000000, "TCP and TLS "
	    "connections from one address (0: no limit)", true },
	{ "reserved-slots", "N", SET_INT, OFF(reserved_slots), 0, 1000,
	    "connections the unix socket may open past max-clients", true },
	{ "max-keys", "N", SET_INT, OFF(max_keys), 1, KL_KEYS_HARD_MAX,
	    "keys per request", true },
	{ "max-locks", "N", SET_INT, OFF(max_locks), 1, 100000000,
	    "keys held per connection (per channel)", true },
	{ "max-channels", "N", SET_INT, OFF(max_channels), 0, 4294967295LL,
	    "channels one connection may have in use besides channel 0", true },
	{ "max-line", "BYTES", SET_INT, OFF(max_line), KL_MAX_LINE_MIN,
	    KL_MAX_LINE_MAX, "request line bytes, CR LF included", true },
	{ "max-input-total", "BYTES|none", SET_INT_NONE,
	    OFF(max_input_total), 65536, (int64_t)1 << 50, "input buffer "
	    "bytes of all clients together; near it a client's partial "
	    "line does not grow", true },
	{ "max-output", "BYTES", SET_INT, OFF(max_output), 4096, 1073741824,
	    "unread reply bytes per client (16384 before AUTH)", true },
	{ "max-output-total", "BYTES|none", SET_INT_NONE,
	    OFF(max_output_total), 65536, (int64_t)1 << 50, "output buffer "
	    "bytes of all clients together; past it the largest is closed",
	    true },
	{ "write-timeout", "MS", SET_INT, OFF(write_timeout), 0,
	    (int64_t)KL_MS_MAX, "ms a client's unsent replies may stay "
	    "unread before it is closed (0: no limit)", true },
	{ "idle-timeout", "MS", SET_INT, OFF(idle_timeout), 0,
	    (int64_t)KL_MS_MAX, "ms a connection that holds, waits for and "
	    "sends nothing may stay (0: no limit)", true },
	{ "default-timeout", "MS|none", SET_INT_NONE, OFF(default_timeout), 0,
	    (int64_t)KL_MS_MAX, "LOCK timeout when none is given (ms)", true },
	{ "max-timeout", "MS|none", SET_INT_NONE, OFF(max_timeout), 0,
	    (int64_t)KL_MS_MAX, "largest timeout= accepted (ms)", true },
	{ "default-max-waiters", "N|none", SET_INT_NONE, OFF(default_max_waiters), 0,
	    KL_LIMIT_MAX, "max_waiters when none is given", true },
	{ "max-waiters", "N|none", SET_INT_NONE, OFF(max_waiters), 0,
	    KL_LIMIT_MAX, "waiters per key, whatever max_waiters= says", true },
	{ "max-table-bytes", "BYTES|none", SET_INT_NONE, OFF(max_table_bytes),
	    65536, (int64_t)1 << 50, "lock table memory at or past which "
	    "every LOCK and TRYLOCK is refused", true },
	{ "tcp-keepalive-idle", "S", SET_INT, OFF(keepalive_idle), 0, 32767,
	    "s before probing an idle peer (0: off)", true },
	{ "tcp-keepalive-interval", "S", SET_INT, OFF(keepalive_interval), 1,
	    32767, "s between probes", true },
	{ "tcp-keepalive-count", "N", SET_INT, OFF(keepalive_count), 1, 127,
	    "unanswered probes before the peer is dead", true },
	{ "session-grace", "MS", SET_INT, OFF(session_grace), 1,
	    (int64_t)KL_MS_MAX, "ms a detached session keeps its locks when "
	    "SESSION gives no grace=", true },
	{ "session-grace-max", "MS", SET_INT, OFF(session_grace_max), 1,
	    (int64_t)KL_MS_MAX, "largest grace= SESSION accepts (ms)", true },
	{ "session-lock-delay", "MS", SET_INT, OFF(session_lock_delay), 0,
	    (int64_t)KL_MS_MAX, "ms an expired session's keys stay "
	    "unavailable (0: none)", true },
	{ "auth-file", "FILE", SET_STRING, OFF(auth_file), 0, 0,
	    "file holding the AUTH secret", true },
	{ "admin-auth-file", "FILE", SET_STRING, OFF(admin_auth_file), 0, 0,
	    "file holding the operator's AUTH secret (CLIENTS, KILL, UPGRADE)", true },
	{ "user", "SPEC", SET_USER, OFF(users), 0, 0, "a user: \"NAME "
	    "secret-file=FILE keys=PATTERN... [operator=yes] [tls-cn=CN]\" "
	    "(repeatable)", true },
	{ "operator-uids", "UID,...", SET_STRING, OFF(operator_uids), 0, 0,
	    "unix peers with operator rights besides root and keylockd's "
	    "own", true },
	{ "metrics", "ADDR:PORT", SET_STRING, OFF(metrics), 0, 0,
	    "ADDR:PORT of the metrics HTTP listener", false },
	{ "metrics-max-connections", "N", SET_INT,
	    OFF(metrics_max_connections), 1, 10000,
	    "open HTTP connections (past it, closed at once)", true },
	{ "metrics-max-connections-per-address", "N", SET_INT,
	    OFF(metrics_max_per_address), 0, 10000, "open HTTP connections "
	    "from one address (0: no limit)", true },
	{ "metrics-hosts", "NAME,...", SET_STRING, OFF(metrics_hosts), 0, 0,
	    "Host names the HTTP listener answers besides addresses and "
	    "localhost (*: any)", true },
	{ "status-names", NULL, SET_FLAG, OFF(status_names), 0, 0,
	    "show holders' and waiters' names in /status.json", true },
	{ "tls-cert", "FILE", SET_STRING, OFF(tls_cert), 0, 0,
	    "TLS certificate chain (PEM): enables the TLS listener", true },
	{ "tls-key", "FILE", SET_STRING, OFF(tls_key), 0, 0,
	    "TLS private key (PEM)", true },
	{ "tls-client-ca", "FILE", SET_STRING, OFF(tls_client_ca), 0, 0,
	    "CA (PEM) that client certificates must chain to", true },
	{ "tls-crl", "FILE", SET_STRING, OFF(tls_crl), 0, 0,
	    "CRLs (PEM) of the client CA: revoked client certificates are "
	    "refused", true },
	{ "tls-port", "N", SET_INT, OFF(tls_port), 0, 65535,
	    "TLS port on every bind address (0: any free port)", false },
	{ "log-level", "LEVEL", SET_LEVEL, OFF(log_level), 0, 0,
	    "error, warn, info or debug", true },
	{ "backend", "NAME", SET_STRING, OFF(backend), 0, 0,
	    "local (the table in this process) or etcd (replicated)", false },
	{ "etcd-endpoints", "URL,...", SET_STRING, OFF(etcd_endpoints), 0, 0,
	    "etcd members' client URLs (backend etcd)", false },
	{ "etcd-prefix", "PREFIX", SET_STRING, OFF(etcd_prefix), 0, 0,
	    "etcd key prefix of this lock service", false },
	{ "etcd-lease-ttl", "S", SET_INT, OFF(etcd_lease_ttl),
	    KL_ETCD_LEASE_TTL_MIN, 3600,
	    "s a dead front end's locks outlive it", false },
	{ "etcd-timeout", "MS", SET_INT, OFF(etcd_timeout), 100, 600000,
	    "ms an etcd request may take (then ERR BACKEND)", false },
	{ "etcd-max-txn-ops", "N", SET_INT, OFF(etcd_max_txn_ops), 1, 100000,
	    "operations per etcd transaction (etcd's --max-txn-ops)", false },
	{ "etcd-connections", "N", SET_INT, OFF(etcd_connections), 1, 64,
	    "HTTP connections to etcd for requests", false },
	{ "etcd-ca", "FILE", SET_STRING, OFF(etcd_ca), 0, 0,
	    "CA of the etcd members' certificates, for https:// endpoints "
	    "(default: the system's)", false },
	{ "etcd-cert", "FILE", SET_STRING, OFF(etcd_cert), 0, 0,
	    "client certificate (PEM) for etcd's --client-cert-auth", false },
	{ "etcd-key", "FILE", SET_STRING, OFF(etcd_key), 0, 0,
	    "its private key (PEM)", false },
	{ "etcd-user", "NAME", SET_STRING, OFF(etcd_user), 0, 0,
	    "etcd user to authenticate as (etcd auth)", false },
	{ "etcd-password-file", "FILE", SET_STRING, OFF(etcd_password_file),
	    0, 0, "file holding etcd-user's password", false },
};
#undef OFF
#define NSETTINGS	(sizeof(settings) / sizeof(settings[0]))

/* Command-line only options, after the settings in getopt's index space. */
enum {
	OPT_CONFIG = NSETTINGS,
	OPT_CHECK,
	OPT_VERSION,
	OPT_HELP
};

static char *
config_strdup(const char *s)
{
	char	*d;

	if ((d = kl_strndup(s, strlen(s))) == NULL) {
		fprintf(stderr, "keylockd: out of memory\n");
		exit(1);
	}
	return d;
}

static void
config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->binds[0] = config_strdup(KL_BIND_DEFAULT);
	cfg->nbinds = 1;
	cfg->port = KL_PORT_DEFAULT;
	cfg->tls_port = KL_TLS_PORT_DEFAULT;
	cfg->unix_path = config_strdup(KL_RUNSTATEDIR "/keylockd/keylockd.sock");
	cfg->unix_mode = 0660;
	cfg->state_dir = config_strdup(KL_LOCALSTATEDIR "/lib/keylockd");
	cfg->max_clients = KL_MAX_CLIENTS_DEFAULT;
	cfg->reserved_slots = KL_RESERVED_SLOTS_DEFAULT;
	cfg->auth_timeout = KL_AUTH_TIMEOUT_DEFAULT;
	cfg->max_keys = KL_MAX_KEYS_DEFAULT;
	cfg->max_locks = KL_MAX_LOCKS_DEFAULT;
	cfg->max_channels = KL_MAX_CHANNELS_DEFAULT;
	cfg->write_timeout = KL_WRITE_TIMEOUT_DEFAULT;
	cfg->idle_timeout = KL_IDLE_TIMEOUT_DEFAULT;
	cfg->max_waiters = KL_NONE;
	cfg->max_table_bytes = KL_MAX_TABLE_BYTES_DEFAULT;
	cfg->max_line = KL_MAX_LINE_DEFAULT;
	cfg->max_output = KL_MAX_OUTPUT_DEFAULT;
	cfg->max_output_total = KL_MAX_OUTPUT_TOTAL_DEFAULT;
	cfg->max_input_total = KL_MAX_INPUT_TOTAL_DEFAULT;
	cfg->default_timeout = KL_NONE;
	cfg->max_timeout = KL_NONE;
	cfg->default_max_waiters = KL_NONE;
	cfg->session_grace = KL_SESSION_GRACE_DEFAULT;
	cfg->session_grace_max = KL_SESSION_GRACE_MAX_DEFAULT;
	cfg->session_lock_delay = 0;
	cfg->upgrade_timeout = KL_UPGRADE_TIMEOUT_DEFAULT;
	cfg->keepalive_idle = 60;
	cfg->keepalive_interval = 10;
	cfg->keepalive_count = 3;
	cfg->log_level = LOG_LEVEL_INFO;
	cfg->backend = config_strdup("local");
	cfg->etcd_prefix = config_strdup(KL_ETCD_PREFIX_DEFAULT);
	cfg->etcd_lease_ttl = KL_ETCD_LEASE_TTL_DEFAULT;
	cfg->etcd_timeout = KL_ETCD_TIMEOUT_DEFAULT;
	cfg->etcd_max_txn_ops = KL_ETCD_MAX_TXN_OPS_DEFAULT;
	cfg->etcd_connections = KL_ETCD_CONNECTIONS_DEFAULT;
	cfg->metrics_max_connections = KL_METRICS_MAX_CONNECTIONS_DEFAULT;
	cfg->metrics_max_per_address = KL_METRICS_MAX_PER_ADDRESS_DEFAULT;
}

static void
config_clear_binds(struct config *cfg)
{
	for (int i = 0; i < cfg->nbinds; i++)
		free(cfg->binds[i]);
	cfg->nbinds = 0;
}

/* "bind a b": several addresses on one line, separated by spaces. */
static const char *
config_add_binds(struct config *cfg, const char *val, bool *fresh)
{
	size_t	n;

	val += strspn(val, " \t");
	if (*val == '\0')
		return "empty address";
	if (*fresh) {
		config_clear_binds(cfg);
		*fresh = false;
	}
	for (; *val != '\0'; val += strspn(val, " \t")) {
		n = strcspn(val, " \t");
		if (cfg->nbinds == KL_BINDS_MAX)
			return "too many bind addresses";
		if ((cfg->binds[cfg->nbinds] = kl_strndup(val, n)) == NULL)
			return "out of memory";
		cfg->nbinds++;
		val += n;
	}
	return NULL;
}

/* One more `user`, its syntax checked (the secret file is read by
 * users_load(), at --check-config and start). */
static const char *
config_add_user(struct config *cfg, const char *val)
{
	static char	 msg[256];
	char		**v;

	if (!users_spec_check(val, msg, sizeof(msg)))
		return msg;
	if (cfg->nusers == KL_USERS_MAX)
		return "too many users";
	if ((v = realloc(cfg->users, sizeof(*v) * (size_t)(cfg->nusers +
	    1))) == NULL)
		return "out of memory";
	cfg->users = v;
	v[cfg->nusers++] = config_strdup(val);
	return NULL;
}

static void
config_clear_users(struct config *cfg)
{
	for (int i = 0; i < cfg->nusers; i++)
		free(cfg->users[i]);
	free(cfg->users);
	cfg->users = NULL;
	cfg->nusers = 0;
}

/*
 * metrics' HOST:PORT or [V6]:PORT, checked where it is read, so that a bad
 * one is reported as FILE:LINE as every other setting's: an IPv4 address
 * (a host of digits and dots is one), an IPv6 one in brackets, or a
 * host name; a port from 0 to 65535. Whether it resolves and can be
 * bound is known at the start (metrics_new()). NULL, or a static message.
 */
static const char *
config_check_hostport(const char *val)
{
	static char		 msg[96];
	const char		*colon = strrchr(val, ':'), *h = val;
	char			 host[256];
	size_t			 n;
	uint64_t		 port;
	unsigned char		 a[16];

	if (colon == NULL)
		return "expected HOST:PORT or [V6]:PORT";
	if (!kl_parse_u64(colon + 1, strlen(colon + 1), 0, 65535, &port)) {
		snprintf(msg, sizeof(msg), "port \"%.40s\": expected a number "
		    "from 0 to 65535", colon + 1);
		return msg;
	}
	n = (size_t)(colon - val);
	if (*h == '[') {
		if (n < 2 || val[n - 1] != ']')
			return "expected [V6]:PORT";
		h++;
		n -= 2;
	}
	if (n == 0)
		return "no host before the port";
	if (n >= sizeof(host))
		return "host too long";
	memcpy(host, h, n);
	host[n] = '\0';
	if (h != val)
		return inet_pton(AF_INET6, host, a) == 1 ? NULL :
		    "not an IPv6 address in brackets";
	if (strchr(host, ':') != NULL)
		return "an IPv6 address goes in brackets: [V6]:PORT";
	if (strspn(host, "0123456789.") == n)
		return inet_pton(AF_INET, host, a) == 1 ? NULL :
		    "not an IPv4 address";
	if (strspn(host, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != n || host[0] == '-' ||
	    host[0] == '.')
		return "not a host name or an address";
	return NULL;
}

/* Applies one value; on error returns a static message. *fresh_binds is
 * true until this layer (file or command line) has set a bind. */
static const char *
config_apply(struct config *cfg, const struct setting *s, const char *val,
    bool *fresh_binds)
{
	char		*field = (char *)cfg + s->off;
	uint64_t	 v;
	long		 mode;
	char		*end;
	const char	*err;

	switch (s->kind) {
	case SET_INT_NONE:
		if (strcmp(val, "none") == 0) {
			*(int64_t *)(void *)field = KL_NONE;
			return NULL;
		}
		/* FALLTHROUGH */
	case SET_INT:
		if (!kl_parse_u64(val, strlen(val), (uint64_t)s->min,
		    (uint64_t)s->max, &v))
			return "bad number or out of range";
		if (s->off == offsetof(struct config, port) ||
		    s->off == offsetof(struct config, tls_port))
			*(int *)(void *)field = (int)v;
		else
			*(int64_t *)(void *)field = (int64_t)v;
		return NULL;
	case SET_STRING:
		if (*val == '\0')
			return "empty value";
		if (s->off == offsetof(struct config, metrics) &&
		    (err = config_check_hostport(val)) != NULL)
			return err;
		/* FALLTHROUGH */
	case SET_PATH_OR_EMPTY:
		free(*(char **)(void *)field);
		*(char **)(void *)field = config_strdup(val);
		return NULL;
	case SET_BIND:
		return config_add_binds(cfg, val, fresh_binds);
	case SET_FLAG:
		if (strcmp(val, "yes") == 0 || strcmp(val, "true") == 0)
			*(bool *)(void *)field = true;
		else if (strcmp(val, "no") == 0 || strcmp(val, "false") == 0)
			*(bool *)(void *)field = false;
		else
			return "expected yes or no";
		return NULL;
	case SET_MODE:
		errno = 0;
		mode = strtol(val, &end, 8);
		if (errno != 0 || *val == '\0' || *end != '\0' || mode < 0 ||
		    mode > s->max)
			return "expected an octal mode such as 0660";
		cfg->unix_mode = (int)mode;
		return NULL;
	case SET_LEVEL:
		if (!log_parse_level(val, &cfg->log_level))
			return "expected error, warn, info or debug";
		return NULL;
	case SET_USER:
		return config_add_user(cfg, val);
	}
	return "unknown setting kind";
}

static const struct setting *
config_find(const char *name)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		if (strcmp(settings[i].name, name) == 0)
			return &settings[i];
	return NULL;
}

/* Splits one file line into name and value; returns false for blank and
 * comment lines. */
static bool
config_split(char *line, char **name, char **val)
{
	char	*p, *e;

	if ((p = strchr(line, '#')) != NULL)
		*p = '\0';
	p = line + strspn(line, " \t\r\n");
	if (*p == '\0')
		return false;
	*name = p;
	p += strcspn(p, " \t\r\n");
	if (*p != '\0')
		*p++ = '\0';
	p += strspn(p, " \t");
	e = p + strlen(p);
	while (e > p && strchr(" \t\r\n", e[-1]) != NULL)
		*--e = '\0';
	*val = p;
	return true;
}

/* Where metrics was set, for the errors the start finds in it. */
static void
config_where(struct config *cfg, const char *path, int lineno)
{
	char	buf[4096 + 32];

	free(cfg->metrics_where);
	if (path != NULL)
		snprintf(buf, sizeof(buf), "%s:%d: metrics", path, lineno);
	else
		snprintf(buf, sizeof(buf), "--metrics");
	cfg->metrics_where = config_strdup(buf);
}

#define CONFIG_LINE_LONG	(-1)
#define CONFIG_LINE_NUL		(-2)
#define CONFIG_PROBLEMS_MAX	50	/* then the rest is not read */

/*
 * One line of f into buf, its LF dropped: 1, or 0 at the end of the file.
 * A line of more than size - 2 bytes is CONFIG_LINE_LONG, one with a NUL
 * byte CONFIG_LINE_NUL: fgets() would stop at the NUL and drop the rest
 * of the line without a word (a zeroed file read as empty, with no
 * auth-file). The rest of such a line is skipped.
 */
static int
config_getline(FILE *f, char *buf, size_t size)
{
	size_t	n = 0;
	int	ch, r = 1;

	while ((ch = getc(f)) != EOF && ch != '\n') {
		if (ch == '\0')
			r = CONFIG_LINE_NUL;
		else if (n + 2 >= size)
			r = r == 1 ? CONFIG_LINE_LONG : r;
		else
			buf[n++] = (char)ch;
	}
	buf[n] = '\0';
	return ch == EOF && n == 0 && r == 1 ? 0 : r;
}

/* Whether st is /dev/null's: the empty configuration tests and CI give. */
static bool
config_is_dev_null(const struct stat *st)
{
	struct stat	null;

	return S_ISCHR(st->st_mode) && stat("/dev/null", &null) == 0 &&
	    S_ISCHR(null.st_mode) && st->st_rdev == null.st_rdev;
}

/*
 * Returns the number of problems, each printed as FILE:LINE: message. The
 * file must be a regular file (or /dev/null): opened without blocking, so
 * a FIFO named by mistake is an error, not a start or a reload that hangs
 * until someone writes into it; and a device (/dev/zero) is not read.
 */
static int
config_read_file(struct config *cfg, const char *path)
{
	FILE			*f;
	char			 line[4096], *name, *val;
	const struct setting	*s;
	const char		*err;
	struct stat		 st;
	int			 fd, r, lineno = 0, nerr = 0;
	bool			 fresh = true;

	if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) == -1) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 1;
	}
	if (fstat(fd, &st) == -1 || (!S_ISREG(st.st_mode) &&
	    !config_is_dev_null(&st))) {
		fprintf(stderr, "%s: not a regular file\n", path);
		close(fd);
		return 1;
	}
	if ((f = fdopen(fd, "r")) == NULL) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		close(fd);
		return 1;
	}
	while (nerr < CONFIG_PROBLEMS_MAX &&
	    (r = config_getline(f, line, sizeof(line))) != 0) {
		lineno++;
		if (r < 0) {
			if (r == CONFIG_LINE_NUL)
				fprintf(stderr, "%s:%d: a NUL byte: not a text "
				    "file\n", path, lineno);
			else
				fprintf(stderr, "%s:%d: line longer than %zu "
				    "bytes\n", path, lineno, sizeof(line) - 2);
			nerr++;
			continue;
		}
		if (!config_split(line, &name, &val))
			continue;
		if ((s = config_find(name)) == NULL)
			err = "unknown setting";
		else if (*val == '\0' && s->kind != SET_PATH_OR_EMPTY)
			err = "missing value";
		else
			err = config_apply(cfg, s, val, &fresh);
		if (err != NULL) {
			fprintf(stderr, "%s:%d: %s: %s\n", path, lineno, name,
			    err);
			nerr++;
		} else if (s->off == offsetof(struct config, metrics))
			config_where(cfg, path, lineno);
	}
	if (nerr >= CONFIG_PROBLEMS_MAX && !feof(f))
		fprintf(stderr, "%s: %d problems: the rest is not read\n",
		    path, nerr);
	if (ferror(f)) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		nerr++;
	}
	fclose(f);
	return nerr;
}

static void
config_usage(FILE *out)
{
	fprintf(out, "usage: keylockd [options]\n\n"
	    "  --config FILE                  config file (default "
	    CONFIG_DEFAULT_FILE ", if present)\n"
	    "  --check-config                 check the settings and exit\n"
	    "  --version, --help\n");
	for (size_t i = 0; i < NSETTINGS; i++) {
		char	opt[64];

		snprintf(opt, sizeof(opt), "%s%s%s", settings[i].name,
		    settings[i].arg != NULL ? " " : "",
		    settings[i].arg != NULL ? settings[i].arg : "");
		fprintf(out, "  --%-28s %s\n", opt, settings[i].help);
	}
	fprintf(out, "\nSee keylockd(8) and keylockd.conf(5).\n");
}

static void
config_build_longopts(struct option *lo)
{
	size_t	i;

	for (i = 0; i < NSETTINGS; i++) {
		lo[i].name = settings[i].name;
		lo[i].has_arg = settings[i].kind == SET_FLAG ? no_argument :
		    required_argument;
		lo[i].flag = NULL;
		lo[i].val = 256 + (int)i;
	}
	lo[i++] = (struct option){ "config", required_argument, NULL,
	    256 + OPT_CONFIG };
	lo[i++] = (struct option){ "check-config", no_argument, NULL,
	    256 + OPT_CHECK };
	lo[i++] = (struct option){ "version", no_argument, NULL,
	    256 + OPT_VERSION };
	lo[i++] = (struct option){ "help", no_argument, NULL, 256 + OPT_HELP };
	lo[i] = (struct option){ NULL, 0, NULL, 0 };
}

/* getopt_long takes any unambiguous prefix; settings are spelt out, so
 * that --auth cannot quietly mean --auth-file. */
static bool
config_is_full_name(const char *arg, const char *name)
{
	size_t	n = strlen(name);

	return arg != NULL && strncmp(arg, "--", 2) == 0 &&
	    strncmp(arg + 2, name, n) == 0 && (arg[2 + n] == '\0' ||
	    arg[2 + n] == '=');
}

/* First pass over argv: --config, --help, --version, --check-config and
 * unknown options. Returns 0, -1 (exit 0) or an exit status. */
static int
config_scan_argv(struct config *cfg, int argc, char *argv[],
    const struct option *lo, const char **file, bool *explicit)
{
	int	ch, idx = 0;

	optind = 0;	/* glibc: start afresh, also inside "-xy" */
	opterr = 1;
	while ((ch = getopt_long(argc, argv, "", lo, &idx)) != -1) {
		if (ch >= 256 && !config_is_full_name(argv[optind - 1],
		    lo[idx].name) && !config_is_full_name(argv[optind - 2],
		    lo[idx].name)) {
			fprintf(stderr, "keylockd: write options in full: "
			    "--%s\n", lo[idx].name);
			return EX_KL_USAGE;
		}
		if (ch == 256 + OPT_CONFIG) {
			*file = optarg;
			*explicit = true;
		} else if (ch == 256 + OPT_CHECK) {
			cfg->check_config = true;
		} else if (ch == 256 + OPT_VERSION) {
			printf("keylockd %s\n", PACKAGE_VERSION);
			return -1;
		} else if (ch == 256 + OPT_HELP) {
			config_usage(stdout);
			return -1;
		} else if (ch < 256) {
			config_usage(stderr);
			return EX_KL_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "keylockd: unexpected argument %s\n",
		    argv[optind]);
		return EX_KL_USAGE;
	}
	return 0;
}

/* backend and the etcd settings, together. */
static int
config_check_backend(const struct config *cfg)
{
	if (strcmp(cfg->backend, "local") != 0 &&
	    strcmp(cfg->backend, "etcd") != 0) {
		fprintf(stderr, "keylockd: backend %s: local or etcd\n",
		    cfg->backend);
		return EX_KL_CONFIG;
	}
	if (strcmp(cfg->backend, "etcd") != 0)
		return 0;
	if (cfg->etcd_endpoints == NULL) {
		fprintf(stderr, "keylockd: backend etcd needs etcd-endpoints\n");
		return EX_KL_CONFIG;
	}
	if (cfg->etcd_timeout * 3 > cfg->etcd_lease_ttl * 1000) {
		fprintf(stderr, "keylockd: etcd-timeout %" PRId64 " ms is over "
		    "a third of etcd-lease-ttl %" PRId64 " s: a keepalive "
		    "could not be tried again before the lease is at risk\n",
		    cfg->etcd_timeout, cfg->etcd_lease_ttl);
		return EX_KL_CONFIG;
	}
	if ((cfg->etcd_cert == NULL) != (cfg->etcd_key == NULL)) {
		fprintf(stderr, "keylockd: etcd-cert and etcd-key go "
		    "together\n");
		return EX_KL_CONFIG;
	}
	if ((cfg->etcd_user == NULL) != (cfg->etcd_password_file == NULL)) {
		fprintf(stderr, "keylockd: etcd-user and etcd-password-file "
		    "go together\n");
		return EX_KL_CONFIG;
	}
	if (cfg->max_keys > cfg->etcd_max_txn_ops) {
		fprintf(stderr, "keylockd: max-keys %" PRId64 " is over "
		    "etcd-max-txn-ops %" PRId64 ": a LOCK is one etcd "
		    "transaction\n", cfg->max_keys, cfg->etcd_max_txn_ops);
		return EX_KL_CONFIG;
	}
	return 0;
}

/* Checks that need several settings at once. */
static int
config_check(const struct config *cfg)
{
	if (cfg->default_timeout != KL_NONE && cfg->max_timeout != KL_NONE &&
	    cfg->default_timeout > cfg->max_timeout) {
		fprintf(stderr, "keylockd: default-timeout %" PRId64 " is over "
		    "max-timeout %" PRId64 ": every LOCK without timeout= "
		    "would fail\n", cfg->default_timeout, cfg->max_timeout);
		return EX_KL_CONFIG;
	}
	if (cfg->session_grace > cfg->session_grace_max) {
		fprintf(stderr, "keylockd: session-grace %" PRId64 " is over "
		    "session-grace-max %" PRId64 ": every SESSION without "
		    "grace= would fail\n", cfg->session_grace,
		    cfg->session_grace_max);
		return EX_KL_CONFIG;
	}
	if (cfg->tls_key != NULL && cfg->tls_cert == NULL) {
		fprintf(stderr, "keylockd: tls-key needs tls-cert\n");
		return EX_KL_CONFIG;
	}
	if (cfg->max_output_total != KL_NONE &&
	    cfg->max_output_total < cfg->max_output) {
		fprintf(stderr, "keylockd: max-output-total %" PRId64 " is "
		    "under max-output %" PRId64 ": one reply a client reads "
		    "could close it\n", cfg->max_output_total,
		    cfg->max_output);
		return EX_KL_CONFIG;
	}
	if (cfg->max_input_total != KL_NONE &&
	    cfg->max_input_total < cfg->max_line + KL_READ_BYTES) {
		fprintf(stderr, "keylockd: max-input-total %" PRId64 " is "
		    "under max-line plus one read (%" PRId64 " + %d): one "
		    "client's input alone could not be read in\n",
		    cfg->max_input_total, cfg->max_line, KL_READ_BYTES);
		return EX_KL_CONFIG;
	}
	return config_check_backend(cfg);
}

int
config_load(struct config *cfg, int argc, char *argv[])
{
	struct option	 lo[NSETTINGS + 5];
	const char	*file = CONFIG_DEFAULT_FILE, *err;
	bool		 explicit = false, fresh = true;
	int		 ch, rc;

	config_defaults(cfg);
	cfg->argc = argc;
	cfg->argv = argv;
	config_build_longopts(lo);
	if ((rc = config_scan_argv(cfg, argc, argv, lo, &file, &explicit)))
		return rc;
	if (explicit || access(file, F_OK) == 0) {
		cfg->file = config_strdup(file);
		if (config_read_file(cfg, file) > 0)
			return EX_KL_CONFIG;
	}
	optind = 0;	/* glibc: start afresh, also inside "-xy" */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		const struct setting	*s;

		if (ch < 256 || ch - 256 >= (int)NSETTINGS)
			continue;
		s = &settings[ch - 256];
		err = config_apply(cfg, s, s->kind == SET_FLAG ? "yes" :
		    optarg, &fresh);
		if (err != NULL) {
			fprintf(stderr, "keylockd: --%s %s: %s\n", s->name,
			    optarg, err);
			return EX_KL_USAGE;
		}
		if (s->off == offsetof(struct config, metrics))
			config_where(cfg, NULL, 0);
	}
	return config_check(cfg);
}

/* The value of one setting as text, as the config file would spell it. */
static void
config_render(const struct config *cfg, const struct setting *s, char *buf,
    size_t len)
{
	const char	*field = (const char *)cfg + s->off;
	int64_t		 v;
	size_t		 off = 0;

	switch (s->kind) {
	case SET_INT:
	case SET_INT_NONE:
		v = s->off == offsetof(struct config, port) ||
		    s->off == offsetof(struct config, tls_port) ?
		    *(const int *)(const void *)field :
		    *(const int64_t *)(const void *)field;
		if (v == KL_NONE && s->kind == SET_INT_NONE)
			snprintf(buf, len, "none");
		else
			snprintf(buf, len, "%" PRId64, v);
		break;
	case SET_STRING:
	case SET_PATH_OR_EMPTY:
		field = *(char *const *)(const void *)field;
		snprintf(buf, len, "%s", field != NULL ? field : "(unset)");
		break;
	case SET_BIND:
		buf[0] = '\0';
		for (int i = 0; i < cfg->nbinds && off < len; i++)
			off += (size_t)snprintf(buf + off, len - off, "%s%s",
			    i > 0 ? " " : "", cfg->binds[i]);
		break;
	case SET_FLAG:
		snprintf(buf, len, "%s", *(const bool *)(const void *)field ?
		    "yes" : "no");
		break;
	case SET_MODE:
		snprintf(buf, len, "%04o", (unsigned)cfg->unix_mode);
		break;
	case SET_LEVEL:
		snprintf(buf, len, "%s", log_level_name(cfg->log_level));
		break;
	case SET_USER:
		buf[0] = '\0';
		for (int i = 0; i < cfg->nusers && off < len; i++)
			off += (size_t)snprintf(buf + off, len - off, "%s%s",
			    i > 0 ? "; " : "", cfg->users[i]);
		if (cfg->nusers == 0)
			snprintf(buf, len, "(none)");
		break;
	}
}

/* The users' secrets were read by commands_reload(); this keeps the
 * values, for the next comparison. */
static void
config_update_users(struct config *cur, const struct config *next)
{
	bool	same = cur->nusers == next->nusers;

	for (int i = 0; same && i < cur->nusers; i++)
		same = strcmp(cur->users[i], next->users[i]) == 0;
	if (same)
		return;
	log_info("reload: the user lines changed: %d now", next->nusers);
	config_clear_users(cur);
	for (int i = 0; i < next->nusers; i++)
		config_add_user(cur, next->users[i]);
}

void
config_update(struct config *cur, const struct config *next)
{
	char	a[1024], b[1024];
	bool	fresh = true;

	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting	*s = &settings[i];

		if (s->kind == SET_USER) {
			config_update_users(cur, next);
			continue;
		}
		config_render(cur, s, a, sizeof(a));
		config_render(next, s, b, sizeof(b));
		if (strcmp(a, b) == 0)
			continue;
		if (!s->live) {
			log_warnx("reload: %s changed from %s to %s; it takes "
			    "effect at the next restart", s->name, a, b);
			continue;
		}
		log_info("reload: %s changed from %s to %s", s->name, a, b);
		if (s->kind == SET_STRING &&
		    *(char *const *)(const void *)((const char *)next +
		    s->off) == NULL) {
			char	**f = (char **)(void *)((char *)cur + s->off);

			free(*f);
			*f = NULL;
		} else
			config_apply(cur, s, b, &fresh);
	}
}

void
config_cleanup(struct config *cfg)
{
	config_clear_binds(cfg);
	free(cfg->file);
	free(cfg->unix_path);
	free(cfg->unix_group);
	free(cfg->state_dir);
	free(cfg->port_file);
	free(cfg->auth_file);
	free(cfg->admin_auth_file);
	config_clear_users(cfg);
	free(cfg->operator_uids);
	free(cfg->metrics);
	free(cfg->metrics_where);
	free(cfg->metrics_hosts);
	free(cfg->tls_cert);
	free(cfg->tls_key);
	free(cfg->tls_client_ca);
	free(cfg->tls_crl);
	free(cfg->backend);
	free(cfg->etcd_endpoints);
	free(cfg->etcd_prefix);
	free(cfg->etcd_ca);
	free(cfg->etcd_cert);
	free(cfg->etcd_key);
	free(cfg->etcd_user);
	free(cfg->etcd_password_file);
	memset(cfg, 0, sizeof(*cfg));
}
