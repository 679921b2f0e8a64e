/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * echo_server: the physical floor for a line protocol on this machine. It
 * answers every line with "OK" and does nothing else: per batch of
 * pipelined lines, one recv() and one send(), on raw libevent events. It
 * never parses, allocates per request, or keeps a line; keylock-bench run
 * against it measures what any line server must at least cost here.
 *
 * usage: echo_server [--bind ADDR] [--port N] [--port-file FILE]
 */
#include <sys/socket.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#define ECHO_READ_SIZE	(256 * 1024)	/* one recv() at most */
#define ECHO_OUT_SIZE	(3 * 21846)	/* "OK\n" repeated */
#define ECHO_OWED_MAX	(1024 * 1024)	/* owed bytes: stop reading */
#define ECHO_ACCEPT_BATCH	64

struct echo_conn {
	struct event_base	*base;
	struct event		*rev;
	struct event		*wev;
	int			 fd;
	uint64_t		 owed;		/* reply bytes not yet sent */
	unsigned		 phase;		/* sent bytes modulo 3 */
	bool			 reading;
	bool			 writing;
};

static char	echo_in[ECHO_READ_SIZE];
static char	echo_out[ECHO_OUT_SIZE];

static void
echo_conn_free(struct echo_conn *c)
{
	event_free(c->rev);
	event_free(c->wev);
	close(c->fd);
	free(c);
}

static void
echo_watch(struct echo_conn *c)
{
	bool	read = c->owed < ECHO_OWED_MAX, write = c->owed > 0;

	if (read != c->reading) {
		if (read)
			event_add(c->rev, NULL);
		else
			event_del(c->rev);
		c->reading = read;
	}
	if (write != c->writing) {
		if (write)
			event_add(c->wev, NULL);
		else
			event_del(c->wev);
		c->writing = write;
	}
}

/* One send() of what is owed; false if the connection is gone. */
static bool
echo_flush(struct echo_conn *c)
{
	size_t	len;
	ssize_t	n;

	if (c->owed > 0) {
		len = sizeof(echo_out) - 3;
		if (c->owed < len)
			len = (size_t)c->owed;
		n = send(c->fd, echo_out + c->phase, len,
		    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK &&
		    errno != EINTR) {
			echo_conn_free(c);
			return false;
		}
		if (n > 0) {
			c->owed -= (uint64_t)n;
			c->phase = (c->phase + (unsigned)n) % 3;
		}
	}
	echo_watch(c);
	return true;
}

static void
echo_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct echo_conn	*c = arg;
	const char		*p, *end;
	ssize_t			 n;

	n = recv(fd, echo_in, sizeof(echo_in), MSG_DONTWAIT);
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		return;
	if (n <= 0) {
		echo_conn_free(c);
		return;
	}
	end = echo_in + n;
	for (p = echo_in; (p = memchr(p, '\n', (size_t)(end - p))) != NULL;
	    p++)
		c->owed += 3;
	echo_flush(c);
}

static void
echo_write_cb(evutil_socket_t fd, short what, void *arg)
{
	echo_flush(arg);
}

static void
echo_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct event_base	*base = arg;
	struct echo_conn	*c;
	int			 fd, on = 1;

	for (int i = 0; i < ECHO_ACCEPT_BATCH; i++) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
		if ((c = calloc(1, sizeof(*c))) == NULL) {
			close(fd);
			continue;
		}
		c->base = base;
		c->fd = fd;
		c->rev = event_new(base, fd, EV_READ | EV_PERSIST,
		    echo_read_cb, c);
		c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST,
		    echo_write_cb, c);
		if (c->rev == NULL || c->wev == NULL) {
			if (c->rev != NULL)
				event_free(c->rev);
			if (c->wev != NULL)
				event_free(c->wev);
			close(fd);
			free(c);
			continue;
		}
		echo_watch(c);
	}
}

static int
echo_listen(const char *bind_addr, int port, int *bound)
{
	struct sockaddr_in	sin;
	socklen_t		sl = sizeof(sin);
	int			fd, on = 1;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, bind_addr, &sin.sin_addr) != 1) {
		fprintf(stderr, "echo_server: bad address %s\n", bind_addr);
		return -1;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on,
	    sizeof(on)) == -1 || bind(fd, (struct sockaddr *)&sin,
	    sizeof(sin)) == -1 || listen(fd, SOMAXCONN) == -1 ||
	    getsockname(fd, (struct sockaddr *)&sin, &sl) == -1) {
		perror("echo_server: listen");
		if (fd != -1)
			close(fd);
		return -1;
	}
	*bound = ntohs(sin.sin_port);
	return fd;
}

/* Written to FILE.tmp and renamed, so a reader never sees half of it. */
static bool
echo_write_port(const char *path, int port)
{
	char	tmp[4096];
	FILE	*f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp) ||
	    (f = fopen(tmp, "w")) == NULL)
		return false;
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) == -1)
		return false;
	return true;
}

static void
echo_signal_cb(evutil_socket_t sig, short what, void *arg)
{
	event_base_loopbreak(arg);
}

static int
echo_usage(void)
{
	fprintf(stderr, "usage: echo_server [--bind ADDR] [--port N] "
	    "[--port-file FILE]\n");
	return 64;
}

/* Returns 0, or the exit status of a usage error. */
static int
echo_options(int argc, char *argv[], const char **bind_addr, int *port,
    const char **port_file)
{
	static const struct option	lo[] = {
		{ "bind", required_argument, NULL, 'b' },
		{ "port", required_argument, NULL, 'p' },
		{ "port-file", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 }
	};
	char	*end;
	long	 v;
	int	 ch;

	while ((ch = getopt_long(argc, argv, "b:p:f:", lo, NULL)) != -1) {
		switch (ch) {
		case 'b':
			*bind_addr = optarg;
			break;
		case 'p':
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || errno != 0 ||
			    v < 0 || v > 65535)
				return echo_usage();
			*port = (int)v;
			break;
		case 'f':
			*port_file = optarg;
			break;
		default:
			return echo_usage();
		}
	}
	return optind < argc ? echo_usage() : 0;
}

int
main(int argc, char *argv[])
{
	struct event_config	*cfg;
	struct event_base	*base;
	struct event		*lev, *sigterm, *sigint;
	const char		*bind_addr = "127.0.0.1", *port_file = NULL;
	int			 port = 0, lfd, status;

	if ((status = echo_options(argc, argv, &bind_addr, &port,
	    &port_file)) != 0)
		return status;
	for (size_t i = 0; i < sizeof(echo_out); i += 3)
		memcpy(echo_out + i, "OK\n", 3);
	if ((lfd = echo_listen(bind_addr, port, &port)) == -1)
		return 1;
	if (port_file != NULL && !echo_write_port(port_file, port)) {
		perror("echo_server: port file");
		return 1;
	}
	if ((cfg = event_config_new()) == NULL)
		return 1;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (base == NULL)
		return 1;
	lev = event_new(base, lfd, EV_READ | EV_PERSIST, echo_accept_cb, base);
	sigterm = evsignal_new(base, SIGTERM, echo_signal_cb, base);
	sigint = evsignal_new(base, SIGINT, echo_signal_cb, base);
	if (lev == NULL || sigterm == NULL || sigint == NULL)
		return 1;
	event_add(lev, NULL);
	evsignal_add(sigterm, NULL);
	evsignal_add(sigint, NULL);
	event_base_dispatch(base);
	event_free(lev);
	event_free(sigterm);
	event_free(sigint);
	event_base_free(base);
	close(lfd);
	return 0;
}
