/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Settings: built-in defaults, then the config file, then the command line,
 * into one struct config. The file is "name value" per line with the long
 * options' names; every problem is reported as FILE:LINE: message.
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "log.h"

#define KL_BINDS_MAX	16
#define KL_USERS_MAX	1024	/* `user` lines */
#define KL_NONE		(-1)	/* "none": no default timeout, no cap */

#define EX_KL_USAGE	64	/* sysexits.h EX_USAGE */
#define EX_KL_CONFIG	78	/* sysexits.h EX_CONFIG */

/* backend etcd (keylockd.conf(5), BACKEND ETCD) */
#define KL_ETCD_PREFIX_DEFAULT	"keylock/"
#define KL_ETCD_LEASE_TTL_DEFAULT 15	/* s */
#define KL_ETCD_LEASE_TTL_MIN	2	/* etcd's own least, 3 members */
#define KL_ETCD_TIMEOUT_DEFAULT	5000	/* ms */
#define KL_ETCD_MAX_TXN_OPS_DEFAULT 128	/* etcd's --max-txn-ops */
#define KL_ETCD_CONNECTIONS_DEFAULT 4

/* the HTTP listener (keylockd(8), THE HTTP LISTENER) */
#define KL_METRICS_MAX_CONNECTIONS_DEFAULT 32
#define KL_METRICS_MAX_PER_ADDRESS_DEFAULT 8	/* a quarter of the above */

struct config {
	char		*file;		/* the config file read, or NULL */
	char		*binds[KL_BINDS_MAX];
	int		 nbinds;
	int		 port;		/* 0: any free port */
	bool		 no_tcp;
	char		*unix_path;	/* "" disables */
	int		 unix_mode;
	char		*unix_group;	/* NULL: the daemon's group */
	char		*state_dir;
	char		*port_file;	/* NULL: none */
	int64_t		 max_clients;
	int64_t		 reserved_slots;	/* unix, past max_clients */
	int64_t		 auth_timeout;		/* ms; 0: none */
	int64_t		 max_keys;	/* keys per request */
	int64_t		 max_locks;	/* keys held per connection */
	int64_t		 max_channels;	/* in use per connection, besides 0 */
	int64_t		 max_clients_per_address; /* TCP/TLS; 0: no limit */
	int64_t		 write_timeout;	/* ms output may stay stuck; 0: off */
	int64_t		 idle_timeout;	/* ms an idle one may stay; 0: off */
	int64_t		 max_waiters;	/* per key, a ceiling, or KL_NONE */
	int64_t		 max_table_bytes; /* or KL_NONE */
	int64_t		 max_line;
	int64_t		 max_output;
	int64_t		 max_output_total; /* all connections'; or KL_NONE */
	int64_t		 max_input_total; /* all connections'; or KL_NONE */
	int64_t		 default_timeout;	/* ms or KL_NONE */
	int64_t		 session_grace;		/* ms: SESSION's default */
	int64_t		 session_grace_max;	/* ms: SESSION grace= bound */
	int64_t		 session_lock_delay;	/* ms; 0: none */
	int64_t		 upgrade_timeout;	/* ms a new process has */
	int64_t		 max_timeout;		/* ms or KL_NONE */
	int64_t		 default_max_waiters;	/* or KL_NONE */
	int64_t		 keepalive_idle;	/* s; 0 turns keepalive off */
	int64_t		 keepalive_interval;	/* s */
	int64_t		 keepalive_count;
	char		*auth_file;
	char		*admin_auth_file;	/* the operator's secret */
	char		**users;		/* `user` values (users.h) */
	int		 nusers;
	char		*operator_uids;		/* UID,...: unix operators */
	char		*metrics;		/* ADDR:PORT or NULL */
	char		*metrics_where;		/* "FILE:LINE: metrics" or
						 * "--metrics" */
	int64_t		 metrics_max_connections;
	int64_t		 metrics_max_per_address; /* 0: no limit */
	char		*metrics_hosts;		/* NAME,... or NULL */
	bool		 status_names;		/* names in /status.json */
	char		*tls_cert;		/* PEM; NULL: no TLS */
	char		*tls_key;
	char		*tls_client_ca;		/* NULL: no client certs */
	char		*tls_crl;		/* NULL: no CRL check */
	int		 tls_port;
	char		*backend;		/* "local" or "etcd" */
	char		*etcd_endpoints;	/* URL,... */
	char		*etcd_prefix;
	int64_t		 etcd_lease_ttl;	/* s */
	int64_t		 etcd_timeout;		/* ms */
	int64_t		 etcd_max_txn_ops;
	int64_t		 etcd_connections;
	char		*etcd_ca;		/* https: PEM; NULL: the system's */
	char		*etcd_cert;		/* PEM; NULL: no client cert */
	char		*etcd_key;
	char		*etcd_user;		/* NULL: no etcd auth */
	char		*etcd_password_file;
	enum log_level	 log_level;
	bool		 check_config;
	int		 argc;		/* what it was loaded from, for */
	char		**argv;		/* SIGHUP's reload */
};

/*
 * Fills *cfg from argv and the config file it names (or the default one,
 * if present). On a problem, prints every message to stderr and returns
 * the exit status (EX_KL_USAGE or EX_KL_CONFIG); returns -1 when the
 * caller should exit 0 (--help, --version); 0 on success.
 */
int	config_load(struct config *cfg, int argc, char *argv[]);
void	config_cleanup(struct config *cfg);
/* SIGHUP: takes from next the settings that can change live, logs each
 * change, and warns about those that need a restart. */
void	config_update(struct config *cur, const struct config *next);

#endif /* CONFIG_H */
