/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * session_storm: N session clients, each holding one lock, lose their
 * connections at once and all come back (issue 20, "mass reconnect"); and
 * the daemon's memory per detached session beside an idle connection's.
 *
 * usage: session_storm -S HOST:PORT -n N [-p PID] [-g GRACE_MS]
 *        session_storm -S HOST:PORT -n N -p PID --idle
 *
 * Two waves of N connections: each connection sends SESSION grace=G and
 * LOCK storm:I, and once all have their lock, all N are closed without
 * QUIT in one loop; STATS is read until sessions_detached counts them.
 * With both waves detached, each wave in turn comes back: N new
 * connections each say PING (not timed), then in one loop each sends
 * RESUME ID, and every reply is read as it comes (epoll). The figures:
 * from the first RESUME sent to the last answered, and from the first
 * answered to the last; every reply must be OK with its storm:I in held,
 * and STATS must count every resume. Then the wave QUITs.
 *
 * Memory, with -p (the server's RssAnon, its heap): per connected session
 * and per detached session of the first wave, from a fresh server; and per
 * detached session of the second wave, the one to trust: glibc keeps the
 * memory that the first wave's closed connections freed, and the second
 * wave's connections reuse it, so only what a detached session keeps is
 * new. --idle: N plain connections that each said PING, from a fresh
 * server, for an idle connection's cost.
 *
 * Prints one JSON object. The descriptor limit must allow N + 16.
 */
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ID_MAX		64		/* a session ID's bytes, at most */
#define REPLY_MAX	1024		/* one reply line, at most */
#define WAIT_S		120		/* most time for a STATS condition */

struct client {
	int	fd;
	char	id[ID_MAX + 1];
	char	buf[REPLY_MAX];
	size_t	len;
	bool	done;
};

struct mem {
	uint64_t	rss;	/* VmRSS, bytes */
	uint64_t	anon;	/* RssAnon, bytes */
};

static struct sockaddr_in	 srv;
static long			 pid;
static int			 n;
static struct client		*cla, *clb;
static int			 ctl = -1;

static void	die(const char *, ...) __attribute__((format(printf, 1, 2),
		    noreturn));

/* Exits with a message, and errno's text when errno is set. */
static void
die(const char *fmt, ...)
{
	va_list	ap;
	int	err = errno;

	fprintf(stderr, "session_storm: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s%s\n", err != 0 ? ": " : "",
	    err != 0 ? strerror(err) : "");
	exit(1);
}

static double
now(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct mem
mem_read(void)
{
	struct mem	 m = { 0, 0 };
	char		 path[64], line[256];
	unsigned long long kb;
	FILE		*f;

	if (pid <= 0)
		return m;
	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		die("%s", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
			m.rss = kb * 1024;
		if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
			m.anon = kb * 1024;
	}
	fclose(f);
	return m;
}

static int
xconnect(void)
{
	int	fd, on = 1;

	errno = 0;
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		die("%s", "socket");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) == -1)
		die("%s", "connect");
	return fd;
}

static void
xsend(int fd, const char *s, size_t len)
{
	ssize_t	w;

	while (len > 0) {
		if ((w = send(fd, s, len, MSG_NOSIGNAL)) == -1) {
			if (errno == EINTR)
				continue;
			die("%s", "send");
		}
		s += w;
		len -= (size_t)w;
	}
}

/* Reads, blocking, until lines lines have come; buf holds them. */
static size_t
xread_lines(int fd, char *buf, size_t cap, int lines)
{
	size_t	len = 0;
	ssize_t	r;

	while (lines > 0) {
		if (len + 1 >= cap)
			die("%s", "reply too long");
		r = recv(fd, buf + len, cap - 1 - len, 0);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			errno = r == 0 ? 0 : errno;
			die("connection lost%s after %zu bytes of its reply",
			    r == 0 ? " (closed by the server)" : "", len);
		}
		for (ssize_t i = 0; i < r; i++)
			if (buf[len + (size_t)i] == '\n')
				lines--;
		len += (size_t)r;
	}
	buf[len] = '\0';
	return len;
}

/* One of STATS's counters, on the control connection. */
static int64_t
stat_of(const char *name)
{
	static char	buf[16384];
	char		key[64];
	const char	*p;

	xsend(ctl, "STATS\n", 6);
	xread_lines(ctl, buf, sizeof(buf), 1);
	snprintf(key, sizeof(key), "\"%s\":", name);
	if (strncmp(buf, "OK ", 3) != 0 || (p = strstr(buf, key)) == NULL) {
		errno = 0;
		die("STATS has no %s", name);
	}
	return strtoll(p + strlen(key), NULL, 10);
}

/* Waits until STATS's name is want; the seconds it took. */
static double
stat_wait(const char *name, int64_t want)
{
	double	t0 = now();
	struct timespec ms = { 0, 1000000 };

	while (stat_of(name) != want) {
		if (now() - t0 > WAIT_S) {
			errno = 0;
			die("%s never reached its value", name);
		}
		nanosleep(&ms, NULL);
	}
	return now() - t0;
}

/* N connections, each SESSION grace=G + LOCK storm:I, replies read. */
static void
open_sessions(struct client *cl, int base, int64_t grace)
{
	char	req[128], buf[REPLY_MAX];
	int	len;

	for (int i = 0; i < n; i++) {
		cl[i].fd = xconnect();
		len = snprintf(req, sizeof(req), "SESSION grace=%" PRId64
		    "\nLOCK storm:%d\n", grace, base + i);
		xsend(cl[i].fd, req, (size_t)len);
		xread_lines(cl[i].fd, buf, sizeof(buf), 2);
		if (sscanf(buf, "OK %64[A-Za-z0-9_-]\nOK ", cl[i].id) != 1 ||
		    strstr(buf, "\nOK ") == NULL) {
			errno = 0;
			die("SESSION + LOCK: %s", buf);
		}
	}
}

static void
close_all(struct client *cl)
{
	for (int i = 0; i < n; i++) {
		close(cl[i].fd);
		cl[i].fd = -1;
	}
}

/* N connections that each answered PING. */
static void
open_plain(struct client *cl)
{
	char	buf[64];

	for (int i = 0; i < n; i++) {
		cl[i].fd = xconnect();
		xsend(cl[i].fd, "PING\n", 5);
		xread_lines(cl[i].fd, buf, sizeof(buf), 1);
		cl[i].len = 0;
		cl[i].done = false;
	}
}

struct resume {
	double	send_s;		/* first sent to last sent */
	double	total_s;	/* first sent to last answered */
	double	spread_s;	/* first answered to last answered */
	int	ok;		/* OK with storm:I in held */
};

/* Every connection RESUMEs its session, in one loop; replies read as
 * they come. */
static struct resume
resume_all(struct client *cl, int base)
{
	struct epoll_event	 ev, evs[256];
	struct resume		 res = { 0, 0, 0, 0 };
	char			 req[128], want[64];
	double			 t0, t_first = 0, t_last = 0;
	int			 ep, left = n, len;

	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("%s", "epoll_create1");
	for (int i = 0; i < n; i++) {
		fcntl(cl[i].fd, F_SETFL, fcntl(cl[i].fd, F_GETFL) | O_NONBLOCK);
		ev.events = EPOLLIN;
		ev.data.u32 = (uint32_t)i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cl[i].fd, &ev) == -1)
			die("%s", "epoll_ctl");
	}
	t0 = now();
	for (int i = 0; i < n; i++) {
		len = snprintf(req, sizeof(req), "RESUME %s\n", cl[i].id);
		xsend(cl[i].fd, req, (size_t)len);
	}
	res.send_s = now() - t0;
	while (left > 0) {
		int	k = epoll_wait(ep, evs, 256, WAIT_S * 1000);

		if (k <= 0) {
			if (k == -1 && errno == EINTR)
				continue;
			errno = 0;
			die("%s", "RESUME replies stopped coming");
		}
		for (int e = 0; e < k; e++) {
			struct client	*c = &cl[evs[e].data.u32];
			ssize_t		 r;

			if (c->done)
				continue;
			r = recv(c->fd, c->buf + c->len, sizeof(c->buf) - 1 -
			    c->len, 0);
			if (r <= 0) {
				if (r == -1 && (errno == EAGAIN ||
				    errno == EINTR))
					continue;
				die("%s", "a resumed connection was lost");
			}
			c->len += (size_t)r;
			c->buf[c->len] = '\0';
			if (memchr(c->buf, '\n', c->len) == NULL) {
				if (c->len + 1 >= sizeof(c->buf))
					die("%s", "RESUME reply too long");
				continue;
			}
			t_last = now();
			if (t_first == 0)
				t_first = t_last;
			c->done = true;
			left--;
			snprintf(want, sizeof(want), "\"keys\":[\"storm:%d\"]",
			    base + (int)(c - cl));
			if (strncmp(c->buf, "OK {", 4) == 0 &&
			    strstr(c->buf, "\"held\":[") != NULL &&
			    strstr(c->buf, want) != NULL)
				res.ok++;
			else if (res.ok == 0)
				fprintf(stderr, "session_storm: %.200s", c->buf);
		}
	}
	close(ep);
	res.total_s = t_last - t0;
	res.spread_s = t_last - t_first;
	for (int i = 0; i < n; i++)
		fcntl(cl[i].fd, F_SETFL, fcntl(cl[i].fd, F_GETFL) & ~O_NONBLOCK);
	return res;
}

static void
quit_all(struct client *cl)
{
	char	buf[64];

	for (int i = 0; i < n; i++)
		xsend(cl[i].fd, "QUIT\n", 5);
	for (int i = 0; i < n; i++) {
		xread_lines(cl[i].fd, buf, sizeof(buf), 1);
		close(cl[i].fd);
		cl[i].fd = -1;
	}
}

static void
print_mem(const char *name, struct mem m, bool comma)
{
	printf("    \"%s\": {\"vmrss\": %" PRIu64 ", \"rssanon\": %" PRIu64
	    "}%s\n", name, m.rss, m.anon, comma ? "," : "");
}

static double
per(uint64_t after, uint64_t before)
{
	return ((double)after - (double)before) / (double)n;
}

/* One wave's RESUMEs, checked against STATS, then QUIT. */
static struct resume
resume_wave(struct client *cl, int base, int64_t detached_after)
{
	struct resume	res;
	int64_t		resumed0;

	open_plain(cl);
	resumed0 = stat_of("sessions_resumed");
	res = resume_all(cl, base);
	if (stat_of("sessions_resumed") - resumed0 != n ||
	    stat_of("sessions_detached") != detached_after) {
		errno = 0;
		die("%s", "STATS does not count every RESUME");
	}
	quit_all(cl);
	if (res.ok != n) {
		errno = 0;
		die("%d of %d sessions got their lock back", res.ok, n);
	}
	return res;
}

static void
print_resume(const char *name, struct resume r, bool comma)
{
	printf("  \"%s\": {\"send_s\": %.4f, \"first_sent_to_last_answered_s\":"
	    " %.4f, \"first_answered_to_last_answered_s\": %.4f, "
	    "\"resumed_with_lock\": %d}%s\n", name, r.send_s, r.total_s,
	    r.spread_s, r.ok, comma ? "," : "");
}

static void
run_sessions(int64_t grace)
{
	struct mem	m0, mconn, mdeta, mdetb, mend;
	struct resume	ra, rb;
	double		deta_s, detb_s;

	m0 = mem_read();
	open_sessions(cla, 0, grace);
	stat_wait("sessions", n);
	mconn = mem_read();
	close_all(cla);
	deta_s = stat_wait("sessions_detached", n);
	mdeta = mem_read();
	open_sessions(clb, n, grace);
	close_all(clb);
	detb_s = stat_wait("sessions_detached", 2 * (int64_t)n);
	mdetb = mem_read();
	ra = resume_wave(cla, 0, n);
	rb = resume_wave(clb, n, 0);
	stat_wait("sessions", 0);
	stat_wait("keys", 0);
	mend = mem_read();
	printf("{\n  \"mode\": \"sessions\", \"n\": %d, \"grace_ms\": %" PRId64
	    ",\n  \"detach_seen_s\": [%.4f, %.4f],\n", n, grace, deta_s,
	    detb_s);
	print_resume("resume_a", ra, true);
	print_resume("resume_b", rb, true);
	printf("  \"bytes_per_connected_session_first\": %.0f,\n"
	    "  \"bytes_per_detached_session_first\": %.0f,\n"
	    "  \"bytes_per_detached_session_second\": %.0f,\n"
	    "  \"bytes_per_detached_session_minus_ended\": %.0f,\n"
	    "  \"memory\": {\n", per(mconn.anon, m0.anon),
	    per(mdeta.anon, m0.anon), per(mdetb.anon, mdeta.anon),
	    per(mdetb.anon, mend.anon) / 2);
	print_mem("start", m0, true);
	print_mem("first_connected", mconn, true);
	print_mem("first_detached", mdeta, true);
	print_mem("both_detached", mdetb, true);
	print_mem("all_ended", mend, false);
	printf("  }\n}\n");
}

static void
run_idle(void)
{
	struct mem	m0, m1;

	m0 = mem_read();
	open_plain(cla);
	stat_wait("clients", n + 1);
	m1 = mem_read();
	printf("{\n  \"mode\": \"idle\", \"n\": %d,\n"
	    "  \"bytes_per_idle_connection\": %.0f,\n  \"memory\": {\n", n,
	    per(m1.anon, m0.anon));
	print_mem("start", m0, true);
	print_mem("open", m1, false);
	printf("  }\n}\n");
	close_all(cla);
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "idle", no_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 }
	};
	const char	*server = NULL, *colon;
	int64_t		 grace = 60000;
	int		 ch;
	bool		 idle = false;
	char		 host[64];

	while ((ch = getopt_long(argc, argv, "S:n:p:g:", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'S': server = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 'p': pid = atol(optarg); break;
		case 'g': grace = atoll(optarg); break;
		case 'i': idle = true; break;
		default:
			fprintf(stderr, "usage: session_storm -S HOST:PORT -n N"
			    " [-p PID] [-g GRACE_MS] [--idle]\n");
			return 2;
		}
	}
	errno = 0;
	if (server == NULL || (colon = strrchr(server, ':')) == NULL ||
	    (size_t)(colon - server) >= sizeof(host) || n < 1 ||
	    grace < 1)
		die("%s", "usage: -S HOST:PORT -n N (see the source)");
	memcpy(host, server, (size_t)(colon - server));
	host[colon - server] = '\0';
	srv.sin_family = AF_INET;
	srv.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &srv.sin_addr) != 1)
		die("not an IPv4 address: %s", host);
	if ((cla = calloc((size_t)n, sizeof(*cla))) == NULL ||
	    (clb = calloc((size_t)n, sizeof(*clb))) == NULL)
		die("%s", "calloc");
	ctl = xconnect();
	if (idle)
		run_idle();
	else
		run_sessions(grace);
	close(ctl);
	free(cla);
	free(clb);
	return 0;
}
