/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Listeners, accept and the connection cap, signals, the one ttl timer, the
 * end of every event-loop turn, and shutdown. The server owns the lock
 * table and every connection; it never parses a request.
 */
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "commands.h"
#include "config.h"
#include "conn.h"
#include "locktable.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "server.h"
#include "session.h"
#include "stats.h"
#include "token.h"
#include "server_impl.h"
#include "tls.h"
#include "upgrade.h"
#include "util.h"

static void	server_accept_cb(evutil_socket_t, short, void *);
static void	server_open_configured(struct server *);
static void	server_warn_exposed(const struct server *,
		    const struct sockaddr_storage *, const char *, bool);

static void
server_set_keepalive(const struct config *cfg, int fd)
{
	int	on = 1, v;

	if (cfg->keepalive_idle == 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	v = (int)cfg->keepalive_idle;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v));
	v = (int)cfg->keepalive_interval;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, sizeof(v));
	v = (int)cfg->keepalive_count;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &v, sizeof(v));
	/* Keepalive probes only an idle peer; while a reply waits for its
	 * ACK the kernel retransmits instead, for up to 15 minutes. Bound
	 * that by the same budget. */
	v = (int)((cfg->keepalive_idle + cfg->keepalive_interval *
	    cfg->keepalive_count) * 1000);
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, sizeof(v));
}

void
server_peer_name(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char	host[INET6_ADDRSTRLEN] = "?";
	int	port = 0;

	if (ss->ss_family == AF_UNIX) {
		snprintf(buf, len, "unix");
		return;
	}
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)ss;

		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		port = ntohs(s4->sin_port);
		snprintf(buf, len, "%s:%d", host, port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		port = ntohs(s6->sin6_port);
		snprintf(buf, len, "[%s]:%d", host, port);
	} else
		snprintf(buf, len, "?");
}

static void
server_pause_accept_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server	*srv = arg;

	for (int i = 0; i < srv->nlisteners; i++)
		event_add(srv->listeners[i].ev, NULL);
	if (srv->metrics != NULL)
		metrics_pause(srv->metrics, false);
}

/* Out of descriptors: stop accepting for a moment instead of spinning;
 * on every listener, the metrics one too, as they share the descriptors. */
static void
server_pause_accept(struct server *srv)
{
	struct timeval	tv = { 0, ACCEPT_PAUSE_MS * 1000 };
	uint64_t	now = kl_now_ms();

	if (now - srv->accept_log_ms >= KL_WARN_INTERVAL_MS) {
		log_warn("accept (pausing it for %d ms at a time; this is "
		    "logged once per %d s)", ACCEPT_PAUSE_MS,
		    KL_WARN_INTERVAL_MS / 1000);
		srv->accept_log_ms = now;
	}
	for (int i = 0; i < srv->nlisteners; i++)
		event_del(srv->listeners[i].ev);
	if (srv->metrics != NULL)
		metrics_pause(srv->metrics, true);
	evtimer_add(srv->accept_pause, &tv);
}

void
server_accept_failed(struct server *srv, const char *name)
{
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
	    errno == ENOMEM)
		server_pause_accept(srv);
	else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
	    errno != ECONNABORTED)
		log_warn("accept on %s", name);
}

static void
server_refuse(struct server *srv, int fd, const char *msg)
{
	srv->stats.rejected_connections++;
	(void)send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

static void
server_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct listener		*l = arg;
	struct server		*srv = l->srv;
	struct conn		*c;
	struct sockaddr_storage	 ss;
	socklen_t		 sl;
	char			 peer[64];
	int			 fd, on = 1;

	for (int i = 0; i < ACCEPT_BATCH; i++) {
		sl = sizeof(ss);
		fd = accept4(lfd, (struct sockaddr *)&ss, &sl,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			server_accept_failed(srv, l->name);
			break;
		}
		/* The unix socket keeps a few slots past max-clients, so an
		 * operator gets in to CLIENTS and KILL when the network has
		 * filled every other (keylockd.conf(5), reserved-slots). A
		 * detached session keeps its connection's slot until it ends
		 * (keylockd-protocol(7), SESSIONS: Limits). */
		if (srv->stats.clients + srv->stats.sessions_detached >=
		    (uint64_t)srv->cfg->max_clients +
		    (l->transport == CONN_UNIX ?
		    (uint64_t)srv->cfg->reserved_slots : 0)) {
			log_debug("refused a connection on %s: max-clients "
			    "%" PRId64 " reached", l->name,
			    srv->cfg->max_clients);
			server_refuse(srv, fd, "ERR LIMIT too many "
			    "connections\n");
			continue;
		}
		server_peer_name(&ss, peer, sizeof(peer));
		/* One address cannot take every slot (security review H1;
		 * keylockd.conf(5), max-clients-per-address). */
		if (l->transport != CONN_UNIX &&
		    srv->cfg->max_clients_per_address > 0 &&
		    conns_clients_from(srv->conns, peer) >=
		    (uint64_t)srv->cfg->max_clients_per_address) {
			log_debug("refused a connection from %s: "
			    "max-clients-per-address %" PRId64 " reached",
			    peer, srv->cfg->max_clients_per_address);
			server_refuse(srv, fd, "ERR LIMIT too many "
			    "connections from this address "
			    "(max-clients-per-address)\n");
			continue;
		}
		if (l->transport != CONN_UNIX) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on,
			    sizeof(on));
			server_set_keepalive(srv->cfg, fd);
		}
		if ((c = conn_new(srv->conns, fd, peer, l->transport)) ==
		    NULL) {
			log_warnx("out of memory for a connection from %s",
			    peer);
			close(fd);
		} else if (l->transport == CONN_TLS &&
		    !conn_start_tls(c, srv->tls))
			conn_close_nomem(c, "TLS");
	}
	server_end_turn(srv);
}

/* One more listener; past KL_LISTENERS_MAX, a startup error. */
struct listener *
server_add_listener(struct server *srv, int fd,
    enum conn_transport transport, const char *name)
{
	struct listener	*l;

	if (srv->nlisteners == KL_LISTENERS_MAX)
		fatalx("%s: more than %d listeners (give fewer bind "
		    "addresses, or names that resolve to fewer addresses)",
		    name, KL_LISTENERS_MAX);
	l = &srv->listeners[srv->nlisteners++];
	l->srv = srv;
	l->fd = fd;
	l->transport = transport;
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->ev = event_new(srv->base, fd, EV_READ | EV_PERSIST,
	    server_accept_cb, l);
	if (l->ev == NULL || event_add(l->ev, NULL) == -1)
		fatalx("cannot watch listener %s", name);
	log_info("listening on %s", name);
	return l;
}

static bool
server_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)ss;

		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)ss;

		return IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
	}
	return true;
}

/* A listener (tls: a TLS one) that others can reach, said at start. */
static void
server_warn_exposed(const struct server *srv,
    const struct sockaddr_storage *ss, const char *addr, bool tls)
{
	if (server_is_loopback(ss))
		return;
	if (!commands_need_auth(srv->cmds))
		log_warnx("%s is not a loopback address and no auth-file is "
		    "set: anyone who can reach it can take and break locks",
		    addr);
	else if (!tls && srv->cfg->tls_cert != NULL)
		/* review L3: a client pointed at the wrong port sends its
		 * secret in clear, and nothing refuses it */
		log_warnx("%s is plain TCP beside the TLS listener and not a "
		    "loopback address: a secret sent there travels in clear "
		    "(set no-tcp, or bind plain TCP to loopback)", addr);
}

/* Binds host (an IPv4 or IPv6 literal or a name) at the configured port. */
static void
server_listen_tcp(struct server *srv, const char *host, int lport, bool tls)
{
	struct addrinfo		 hints, *res, *ai;
	struct sockaddr_storage	 ss;
	socklen_t		 sl = sizeof(ss);
	char			 port[16], name[128], addr[96];
	int			 fd, on = 1, rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%d", lport);
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0)
		fatalx("bind %s: %s", host, gai_strerror(rc));
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, ai->ai_protocol);
		if (fd == -1)
			fatal("socket for %s", host);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on,
			    sizeof(on));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1)
			fatal("bind %s port %s", host, port);
		if (listen(fd, SOMAXCONN) == -1)
			fatal("listen %s port %s", host, port);
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1)
			fatal("getsockname");
		server_peer_name(&ss, addr, sizeof(addr));
		snprintf(name, sizeof(name), "%s %s", tls ? "tls" : "tcp",
		    addr);
		server_warn_exposed(srv, &ss, addr, tls);
		int *first = tls ? &srv->tls_port : &srv->tcp_port;

		if (*first == 0)
			*first = ntohs(ss.ss_family == AF_INET ?
			    ((struct sockaddr_in *)&ss)->sin_port :
			    ((struct sockaddr_in6 *)&ss)->sin6_port);
		server_add_listener(srv, fd, tls ? CONN_TLS : CONN_TCP, name);
		sl = sizeof(ss);
	}
	freeaddrinfo(res);
}

/* A socket file left by a dead daemon is removed; a live one is fatal. */
static void
server_clear_stale_unix(const struct sockaddr_un *sun)
{
	int	fd;

	if (access(sun->sun_path, F_OK) == -1)
		return;
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		fatal("socket");
	if (connect(fd, (const struct sockaddr *)sun, sizeof(*sun)) == 0)
		fatalx("%s: another keylockd is listening there",
		    sun->sun_path);
	close(fd);
	if (unlink(sun->sun_path) == -1)
		fatal("unlink stale socket %s", sun->sun_path);
}

static void
server_listen_unix(struct server *srv, const char *path)
{
	struct sockaddr_un	 sun;
	char			 name[128], dir[sizeof(sun.sun_path)], *slash;
	int			 fd;
	mode_t			 old;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path))
		fatalx("unix socket path too long: %s", path);
	strcpy(sun.sun_path, path);
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) != NULL && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) == -1 && errno != EEXIST)
			fatal("cannot create %s for the unix socket "
			    "(set --unix '' to listen on TCP only)", dir);
	}
	server_clear_stale_unix(&sun);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0)) == -1)
		fatal("socket");
	old = umask(0777 & ~(mode_t)srv->cfg->unix_mode);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1)
		fatal("bind %s", path);
	umask(old);
	if (chmod(path, (mode_t)srv->cfg->unix_mode) == -1)
		fatal("chmod %s", path);
	if (srv->cfg->unix_group != NULL) {
		struct group	*gr = getgrnam(srv->cfg->unix_group);

		if (gr == NULL)
			fatalx("unix-group %s: no such group",
			    srv->cfg->unix_group);
		if (chown(path, (uid_t)-1, gr->gr_gid) == -1)
			fatal("chown %s to group %s", path,
			    srv->cfg->unix_group);
	}
	if (listen(fd, SOMAXCONN) == -1)
		fatal("listen %s", path);
	snprintf(name, sizeof(name), "unix %s", path);
	server_add_listener(srv, fd, CONN_UNIX, name);
}

void
server_write_port_file(const struct server *srv, const char *path)
{
	char	tmp[4096];
	FILE	*f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((f = fopen(tmp, "w")) == NULL)
		fatal("%s", tmp);
	fprintf(f, "%d\n", srv->tcp_port);
	if (srv->metrics != NULL)
		fprintf(f, "metrics %d\n", metrics_port(srv->metrics));
	if (srv->tls_port != 0)
		fprintf(f, "tls %d\n", srv->tls_port);
	if (fclose(f) != 0 || rename(tmp, path) == -1)
		fatal("%s", path);
}

static void
server_stop(struct server *srv, const char *why)
{
	if (srv->stopping)
		return;
	srv->stopping = true;
	log_info("%s: shutting down, %" PRIu64 " clients, %" PRIu64
	    " keys", why, srv->stats.clients,
	    locktable_counters(backend_table(srv->be))->keys);
	notify_send("STOPPING=1");
	for (int i = 0; i < srv->nlisteners; i++)
		event_del(srv->listeners[i].ev);
	conns_close_all(srv->conns, "server shutdown");
	server_end_turn(srv);
	event_base_loopbreak(srv->base);
}

/* The TLS context of cfg's files (tls-cert, tls-key, tls-client-ca,
 * tls-crl), or NULL with err set. */
static struct tls_ctx *
server_tls_new(const struct config *cfg, char *err, size_t errlen)
{
	return tls_ctx_new(cfg->tls_cert, cfg->tls_key != NULL ?
	    cfg->tls_key : cfg->tls_cert, cfg->tls_client_ca, cfg->tls_crl,
	    err, errlen);
}

/*
 * A reload reads the TLS files again, changed or not (a certificate is
 * renewed in place), into *tls for new connections; open ones keep their
 * session. false with err set if any of them fails: the whole reload is
 * refused. The TLS listener itself opens and closes only at a start.
 */
static bool
server_reload_tls(struct server *srv, const struct config *next,
    struct tls_ctx **tls, char *err, size_t errlen)
{
	*tls = NULL;
	if ((srv->tls == NULL) != (next->tls_cert == NULL)) {
		log_warnx("reload: tls-cert %s: the TLS listener is %s only "
		    "at the next restart", next->tls_cert != NULL ? "set" :
		    "unset", srv->tls == NULL ? "opened" : "closed");
		return true;
	}
	if (srv->tls == NULL)
		return true;
	return (*tls = server_tls_new(next, err, errlen)) != NULL;
}

/*
 * Says so when the process's descriptor limit is under what max-clients
 * and reserved-slots promise: past it, accept() fails and the listener
 * pauses, the unix socket's reserved slots included (keylockd.conf(5),
 * max-clients). 64 descriptors are kept for listeners, the log, the
 * state directory, HTTP and etcd.
 */
static void
server_check_nofile(const struct config *cfg)
{
	struct rlimit	rl;
	uint64_t	want = (uint64_t)cfg->max_clients +
			    (uint64_t)cfg->reserved_slots + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur !=
	    RLIM_INFINITY && (uint64_t)rl.rlim_cur < want)
		log_warnx("the descriptor limit (ulimit -n, LimitNOFILE=) is "
		    "%llu, under max-clients %" PRId64 " + reserved-slots %"
		    PRId64 " + 64: past about %llu connections new ones "
		    "wait, the operator's too", (unsigned long long)
		    rl.rlim_cur, cfg->max_clients, cfg->reserved_slots,
		    (unsigned long long)rl.rlim_cur);
}

/* SIGHUP: a new configuration, or, if it has errors, the old one. Locks
 * and waiters are untouched. */
static void
server_reload(struct server *srv)
{
	struct config	 next;
	struct tls_ctx	*tls = NULL;
	char		 err[512];

	log_info("SIGHUP: reloading %s", srv->cfg->file != NULL ?
	    srv->cfg->file : "the command line");
	notify_send("RELOADING=1");
	if (config_load(&next, srv->cfg->argc, srv->cfg->argv) != 0) {
		log_warnx("reload: the configuration has errors (above); "
		    "keeping the running one");
	} else if (!server_reload_tls(srv, &next, &tls, err, sizeof(err)) ||
	    !commands_reload(srv->cmds, &next, err, sizeof(err))) {
		log_warnx("reload: %s; keeping the running configuration",
		    err);
		tls_ctx_free(tls);
	} else {
		if (tls != NULL) {
			tls_ctx_free(srv->tls);	/* open connections keep it */
			srv->tls = tls;
			log_info("reload: TLS certificate, key, client CA and "
			    "CRL read again: new connections use them");
		}
		config_update(srv->cfg, &next);
		server_check_nofile(srv->cfg);
		log_set_level(srv->cfg->log_level);
		conns_reload(srv->conns);
	}
	config_cleanup(&next);
	notify_send("READY=1");
}

static void
server_signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct server	*srv = arg;

	if (sig == SIGHUP)
		server_reload(srv);
	else
		server_stop(srv, sig == SIGTERM ? "SIGTERM" : "SIGINT");
	server_end_turn(srv);
}

void
server_status_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server			*srv = arg;
	const struct lt_counters	*c = locktable_counters(
					    backend_table(srv->be));
	char				 buf[320], cut[96] = "";

	/* what an operator most needs to see first: a front end that
	 * accepts connections but cannot grant (backend_ready 0) */
	if (!srv->stats.be.ready)
		snprintf(cut, sizeof(cut), "cut off from its %s backend, "
		    "LOCK is ERR BACKEND; ", backend_name(srv->be));
	snprintf(buf, sizeof(buf), "STATUS=%s%" PRIu64 " clients, %" PRIu64
	    " keys, %" PRIu64 " held, %" PRIu64 " waiting", cut,
	    srv->stats.clients, c->keys, c->held, c->waiting);
	notify_send(buf);
}

void
server_end_turn(struct server *srv)
{
	conns_end_turn(srv->conns);
}

/* Takes the sockets systemd passed; returns how many. */
static int
server_adopt(struct server *srv)
{
	const char		*names[KL_LISTENERS_MAX];
	struct sockaddr_storage	 ss;
	socklen_t		 sl;
	char			 peer[96], addr[136], name[256];
	int			 n = notify_listen_fds(names, KL_LISTENERS_MAX);

	for (int i = 0; i < n; i++) {
		int	fd = 3 + i;
		bool	is_unix;

		sl = sizeof(ss);
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1)
			fatal("socket %d from systemd", fd);
		is_unix = ss.ss_family == AF_UNIX;
		if (is_unix)
			snprintf(addr, sizeof(addr), "unix %s",
			    ((struct sockaddr_un *)&ss)->sun_path);
		else {
			server_peer_name(&ss, peer, sizeof(peer));
			snprintf(addr, sizeof(addr), "tcp %s", peer);
			server_warn_exposed(srv, &ss, peer, false);
			if (srv->tcp_port == 0)
				srv->tcp_port = ntohs(ss.ss_family == AF_INET ?
				    ((struct sockaddr_in *)&ss)->sin_port :
				    ((struct sockaddr_in6 *)&ss)->sin6_port);
		}
		snprintf(name, sizeof(name), "%s (systemd%s%s)", addr,
		    names[i][0] != '\0' ? " " : "", names[i]);
		server_add_listener(srv, fd, is_unix ? CONN_UNIX : CONN_TCP,
		    name)->adopted = true;
	}
	return n;
}

void
server_listen(struct server *srv)
{
	const struct config	*cfg = srv->cfg;
	char			 err[512];
	struct timeval		 tv = { STATUS_INTERVAL_S, 0 };

	if (server_adopt(srv) > 0)
		log_info("using the sockets systemd passed; bind, port and "
		    "unix settings are ignored");
	else
		server_open_configured(srv);
	if (srv->nlisteners == 0)
		fatalx("nothing to listen on: give --bind or --unix");
	server_check_nofile(cfg);
	/* where it was set: a file's line, as the other settings' errors */
	if (cfg->metrics != NULL && (srv->metrics = metrics_new(srv,
	    cfg->metrics, -1, err, sizeof(err))) == NULL)
		fatalx("%s %s: %s", cfg->metrics_where != NULL ?
		    cfg->metrics_where : "metrics", cfg->metrics, err);
	if (cfg->port_file != NULL)
		server_write_port_file(srv, cfg->port_file);
	if (notify_enabled()) {
		notify_send("READY=1");
		server_status_cb(-1, 0, srv);
		event_add(srv->status, &tv);
	}
}

static void
server_open_configured(struct server *srv)
{
	const struct config	*cfg = srv->cfg;

	if (!cfg->no_tcp)
		for (int i = 0; i < cfg->nbinds; i++)
			server_listen_tcp(srv, cfg->binds[i], cfg->port,
			    false);
	if (srv->tls != NULL)
		for (int i = 0; i < cfg->nbinds; i++)
			server_listen_tcp(srv, cfg->binds[i], cfg->tls_port,
			    true);
	if (cfg->unix_path != NULL && cfg->unix_path[0] != '\0')
		server_listen_unix(srv, cfg->unix_path);
}

/* libevent's default clock is CLOCK_MONOTONIC_COARSE (4 ms steps here):
 * timeouts must be honoured to within a few milliseconds. */
static struct event_base *
server_base_new(void)
{
	struct event_config	*ec;
	struct event_base	*base;

	if ((ec = event_config_new()) == NULL)
		return NULL;
	event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
	base = event_base_new_with_config(ec);
	event_config_free(ec);
	return base;
}

int
server_check(const struct config *cfg, char *err, size_t errlen)
{
	struct tls_ctx	*tls;

	/* metrics' syntax is checked as it is read (config.c) */
	if (cfg->unix_group != NULL && getgrnam(cfg->unix_group) == NULL) {
		snprintf(err, errlen, "unix-group %s: no such group",
		    cfg->unix_group);
		return -1;
	}
	/* at a start (a reload cannot change these); the sockets systemd
	 * passes, or a live upgrade's, stand in for all three */
	if (cfg->no_tcp && cfg->tls_cert == NULL && (cfg->unix_path == NULL ||
	    cfg->unix_path[0] == '\0') && getenv("LISTEN_FDS") == NULL &&
	    getenv(KL_UPGRADE_ENV) == NULL) {
		snprintf(err, errlen, "no-tcp, with no unix socket and no "
		    "tls-cert: nothing to listen on");
		return -1;
	}
	if (commands_check(cfg, err, errlen) == -1)
		return -1;
	if (backend_check(cfg, err, errlen) == -1)
		return -1;
	if (cfg->tls_cert != NULL) {
		if ((tls = server_tls_new(cfg, err, errlen)) == NULL)
			return -1;
		tls_ctx_free(tls);
	}
	return 0;
}

static void
server_be_done(void *arg, struct lt_owner *o, const struct be_result *r)
{
	struct server	*srv = arg;

	commands_done(srv->cmds, o, r);
}

static void
server_be_end_turn(void *arg)
{
	server_end_turn(arg);
}

/* The backend has lost o's locks: its connection goes, and its session
 * ends with it (there is nothing left to RESUME), attached or not. */
static void
server_be_drop(void *arg, struct lt_owner *o, const char *why)
{
	const struct owner_head	*h = locktable_owner_udata(o);
	struct conn		*c = owner_conn(o);

	(void)arg;
	if (c != NULL) {
		if (conn_channel(c) == 0 && conn_session(c) != NULL)
			session_end(conn_session(c), why);
		conn_close(c, why);
	} else if (h != NULL && h->detached != NULL)
		session_end(h->detached, why);
}

/* backend etcd: o's session was resumed through another front end. */
static void
server_be_moved(void *arg, struct lt_owner *o)
{
	const struct owner_head	*h = locktable_owner_udata(o);
	struct conn		*c = owner_conn(o);

	(void)arg;
	if (c != NULL)
		conn_session_moved(c);
	else if (h != NULL && h->detached != NULL)
		session_moved(h->detached);
}

/* backend etcd: o's NAME, for its LOCK's entries. */
static const char *
server_be_name(void *arg, const struct lt_owner *o)
{
	(void)arg;
	return owner_name(o);
}

/* The backend queued o's LOCK: a connection whose input has ended stops
 * waiting for it (conn_lock_queued()). */
static void
server_be_queued(void *arg, struct lt_owner *o)
{
	struct conn *c = owner_conn(o);

	(void)arg;
	if (c != NULL)
		conn_lock_queued(c);
}

/* o let go of holds outside an answer: its channel may be idle now. */
static void
server_be_released(void *arg, struct lt_owner *o)
{
	struct conn *c = owner_conn(o);

	(void)arg;
	if (c != NULL)
		conn_released(c);
}

struct server *
server_new(struct config *cfg)
{
	struct server	*srv;
	struct be_hooks	 hooks;
	char		 err[512];

	if ((srv = kl_calloc(1, sizeof(*srv))) == NULL)
		fatalx("out of memory");
	srv->cfg = cfg;
	srv->stats.start_ms = kl_now_ms();
	srv->stats.pid = (uint64_t)getpid();
	if (cfg->tls_cert != NULL && (srv->tls = server_tls_new(cfg, err,
	    sizeof(err))) == NULL)
		fatalx("%s", err);
	if ((srv->base = server_base_new()) == NULL)
		fatalx("out of memory");
	hooks.done = server_be_done;
	hooks.end_turn = server_be_end_turn;
	hooks.drop = server_be_drop;
	hooks.counters = &srv->stats.be;
	hooks.arg = srv;
	hooks.queued = server_be_queued;
	hooks.moved = server_be_moved;
	hooks.name = server_be_name;
	hooks.released = server_be_released;
	/* keylockd(8), --state-dir: one server per state directory (backend
	 * local, whose fencing-token mark it holds) */
	if (strcmp(cfg->backend, "local") == 0 &&
	    token_lock_dir(cfg->state_dir, err, sizeof(err)) == -1)
		fatalx("%s", err);
	if ((srv->be = backend_new(cfg, srv->base, &hooks, err,
	    sizeof(err))) == NULL ||
	    (srv->cmds = commands_new(cfg, &srv->stats, srv->be, err,
	    sizeof(err))) == NULL)
		fatalx("%s", err);
	owner_set_backend(srv->be);
	if ((srv->conns = conns_new(srv->base, cfg, &srv->stats, srv->cmds,
	    srv->be)) == NULL)
		fatalx("out of memory");
	commands_set_upgrade(srv->cmds, server_upgrade_request, srv);
	srv->accept_pause = evtimer_new(srv->base, server_pause_accept_cb,
	    srv);
	srv->sig_term = evsignal_new(srv->base, SIGTERM, server_signal_cb,
	    srv);
	srv->sig_int = evsignal_new(srv->base, SIGINT, server_signal_cb, srv);
	srv->sig_hup = evsignal_new(srv->base, SIGHUP, server_signal_cb, srv);
	srv->sig_usr2 = evsignal_new(srv->base, SIGUSR2,
	    server_upgrade_signal_cb, srv);
	srv->status = event_new(srv->base, -1, EV_PERSIST, server_status_cb,
	    srv);
	if (srv->accept_pause == NULL || srv->status == NULL ||
	    srv->sig_term == NULL || srv->sig_int == NULL ||
	    srv->sig_hup == NULL || srv->sig_usr2 == NULL ||
	    evsignal_add(srv->sig_term, NULL) ||
	    evsignal_add(srv->sig_int, NULL) ||
	    evsignal_add(srv->sig_hup, NULL) ||
	    evsignal_add(srv->sig_usr2, NULL))
		fatalx("cannot set up events");
	signal(SIGPIPE, SIG_IGN);
	return srv;
}

int
server_run(struct server *srv)
{
	log_info("keylockd %s ready, backend %s", PACKAGE_VERSION,
	    backend_name(srv->be));
	if (event_base_dispatch(srv->base) == -1) {
		log_warnx("event loop failed");
		return 1;
	}
	return 0;
}

void
server_free(struct server *srv)
{
	if (srv == NULL)
		return;
	upgrade_check_cancel(srv->upgrade_check);
	conns_free(srv->conns);
	for (int i = 0; i < srv->nlisteners; i++) {
		struct listener	*l = &srv->listeners[i];

		event_free(l->ev);
		close(l->fd);
		if (l->transport == CONN_UNIX && !l->adopted)
			unlink(srv->cfg->unix_path);
	}
	metrics_free(srv->metrics);
	tls_ctx_free(srv->tls);
	event_free(srv->status);
	event_free(srv->accept_pause);
	event_free(srv->sig_term);
	event_free(srv->sig_int);
	event_free(srv->sig_hup);
	event_free(srv->sig_usr2);
	commands_free(srv->cmds);
	owner_set_backend(NULL);
	backend_free(srv->be);
	token_lock_release();
	event_base_free(srv->base);
	kl_free(srv);
}

struct event_base *
server_base(const struct server *srv)
{
	return srv->base;
}

const struct config *
server_config(const struct server *srv)
{
	return srv->cfg;
}

const struct stats *
server_stats(const struct server *srv)
{
	return &srv->stats;
}

const struct backend *
server_backend(const struct server *srv)
{
	return srv->be;
}

struct conns *
server_conns(const struct server *srv)
{
	return srv->conns;
}
