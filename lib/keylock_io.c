/*
 * libkeylock: the C client of keylockd. SPDX-License-Identifier: MIT
 *
 * The socket under a handle: server addresses and lists, connect with a
 * deadline, sending a request and reading one reply line with poll(2). The
 * socket is non-blocking so that no call can outlive its deadline,
 * close-on-exec so that a child never holds a lock by accident, and
 * written with MSG_NOSIGNAL so that a closed server gives an error, not
 * SIGPIPE. Under TLS the bytes go through keylock_tls.c instead of recv
 * and send.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "keylock.h"
#include "keylock_int.h"

/* A dead server host is noticed within about idle + interval * count
 * seconds, even while the connection is only holding locks. */
#define KEYLOCK_KEEPALIVE_IDLE		30
#define KEYLOCK_KEEPALIVE_INTERVAL	10
#define KEYLOCK_KEEPALIVE_COUNT		3
#define KEYLOCK_RETRY_MS		10	/* unix backlog full: retry */
#define KEYLOCK_HOST_MAX		256
#define KEYLOCK_TLS_PREFIX		"tls://"

struct server_addr {
	int	 is_unix;
	char	 host[KEYLOCK_HOST_MAX];	/* or the socket path */
	char	 port[8];
};

static enum keylock_status	 addr_parse(struct keylock *, const char *,
				    int, struct server_addr *);
static enum keylock_status	 connect_unix(struct keylock *, const char *,
				    const struct server_addr *, int64_t);
static enum keylock_status	 connect_tcp(struct keylock *, const char *,
				    const struct server_addr *, int64_t);
static int			 connect_one(int, const struct sockaddr *,
				    socklen_t, int64_t);
static int			 server_is_tls(const struct keylock *,
				    const char *);
static int			 socket_new(int);
static void			 socket_tune_tcp(int);
static ssize_t			 io_read(struct keylock *, void *, size_t,
				    short *);

int64_t
kli_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
kli_deadline(const struct keylock *kl, int64_t now)
{
	return kl->timeout_ms < 0 ? -1 : now + kl->timeout_ms;
}

int
kli_buf_reserve(struct keylock_buf *b, size_t len)
{
	size_t	 cap = b->cap != 0 ? b->cap : KEYLOCK_BUF_INITIAL;
	char	*p;

	if (len <= b->cap)
		return 0;
	while (cap < len)
		cap *= 2;
	if ((p = realloc(b->data, cap)) == NULL)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

enum keylock_status
kli_buf_add(struct keylock *kl, const char *data, size_t len)
{
	if (kli_buf_reserve(&kl->out, kl->out.len + len) == -1)
		return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory for a "
		    "request of %zu bytes", kl->out.len + len);
	memcpy(kl->out.data + kl->out.len, data, len);
	kl->out.len += len;
	return KEYLOCK_OK;
}

enum keylock_status
kli_status(struct keylock *kl, enum keylock_status st)
{
	kl->last = st;
	return st;
}

enum keylock_status
kli_fail(struct keylock *kl, enum keylock_status st, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(kl->msgbuf, sizeof(kl->msgbuf), fmt, ap);
	va_end(ap);
	kl->message = kl->msgbuf;
	return kli_status(kl, st);
}

const char *
kli_server_list(const char *server)
{
	if (server == NULL || *server == '\0')
		server = getenv("KEYLOCK_SERVER");
	if (server == NULL || *server == '\0')
		server = KEYLOCK_SERVER_DEFAULT;
	return server;
}

int
kli_server_cut(const char **list, char *buf, size_t len)
{
	const char	*s = *list, *comma = strchr(s, ','), *end;

	end = comma != NULL ? comma : s + strlen(s);
	*list = comma != NULL ? comma + 1 : NULL;
	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if ((size_t)(end - s) >= len)
		return -1;
	memcpy(buf, s, (size_t)(end - s));
	buf[end - s] = '\0';
	return 0;
}

enum keylock_status
kli_servers_check(struct keylock *kl, const char *list, size_t *count)
{
	struct server_addr	 a;
	enum keylock_status	 st;
	const char		*p = list;
	char			 one[KEYLOCK_SERVER_TEXT_MAX];
	size_t			 n;

	for (n = 1; p != NULL; n++) {
		if (kli_server_cut(&p, one, sizeof(one)) == -1)
			return kli_fail(kl, KEYLOCK_ERR_INVAL, "server list "
			    "\"%.80s\": server %zu is over %d bytes", list, n,
			    KEYLOCK_SERVER_TEXT_MAX - 1);
		if (one[0] == '\0')
			return kli_fail(kl, KEYLOCK_ERR_INVAL, "server list "
			    "\"%.80s\": server %zu is empty", list, n);
		if ((st = addr_parse(kl, one, server_is_tls(kl, one), &a)) !=
		    KEYLOCK_OK)
			return st;
	}
	*count = n - 1;
	return KEYLOCK_OK;
}

enum keylock_status
kli_connect(struct keylock *kl, const char *server, int64_t deadline)
{
	struct server_addr	a;
	enum keylock_status	st;
	int			tls = server_is_tls(kl, server);

	kli_close(kl);
	kl->reply = "";
	kl->message = "";
	if ((st = addr_parse(kl, server, tls, &a)) != KEYLOCK_OK)
		return st;
	if (a.is_unix)
		return connect_unix(kl, server, &a, deadline);
	if ((st = connect_tcp(kl, server, &a, deadline)) != KEYLOCK_OK ||
	    !tls)
		return st;
	return kli_tls_start(kl, server, a.host, deadline);
}

/* TLS for every server after keylock_set_tls(), else for "tls://" ones. */
static int
server_is_tls(const struct keylock *kl, const char *server)
{
	return kl->tls_on || strncmp(server, KEYLOCK_TLS_PREFIX,
	    strlen(KEYLOCK_TLS_PREFIX)) == 0;
}

void
kli_close(struct keylock *kl)
{
	/* The last reply (kl->reply, kl->message) stays readable: the
	 * buffer is only reused by the next request. */
	if (kl->ssl != NULL)
		kli_tls_close(kl);
	if (kl->fd != -1)
		close(kl->fd);
	kl->fd = -1;
	kl->pending = 0;
	kl->cancelling = 0;
	kl->in.off = kl->in.scan = kl->in.len;
}

enum keylock_status
kli_begin(struct keylock *kl)
{
	struct keylock_buf	*b = &kl->in;

	if (kl->fd == -1)
		return kli_fail(kl, KEYLOCK_ERR_CLOSED, "not connected");
	if (kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is still "
		    "waiting for its reply");
	memmove(b->data, b->data + b->off, b->len - b->off);
	b->len -= b->off;
	b->scan -= b->off;
	b->off = 0;
	kl->reply = "";
	kl->message = "";
	return KEYLOCK_OK;
}

enum keylock_status
kli_send(struct keylock *kl, int64_t deadline)
{
	size_t	off = 0;
	ssize_t	n;
	short	events = POLLOUT;
	int	r;

	while (off < kl->out.len) {
		if (kl->ssl != NULL)
			n = kli_tls_write(kl, kl->out.data + off,
			    kl->out.len - off, &events);
		else
			n = send(kl->fd, kl->out.data + off,
			    kl->out.len - off, MSG_NOSIGNAL);
		if (n >= 0) {
			off += (size_t)n;
			continue;
		}
		if (n == -2)
			return kl->last;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return kli_fail_errno(kl, errno, "send");
		if ((r = kli_wait_fd(kl->fd, events, deadline)) == -1)
			return kli_fail_errno(kl, errno, "poll");
		if (r == 0) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "could not "
			    "send the request in time; connection closed");
		}
	}
	return KEYLOCK_OK;
}

enum keylock_status
kli_recv(struct keylock *kl, int64_t deadline)
{
	struct keylock_buf	*b = &kl->in;
	char			*nl;
	ssize_t			 n;
	short			 events;
	int			 r;

	for (;;) {
		nl = memchr(b->data + b->scan, '\n', b->len - b->scan);
		if (nl != NULL) {
			/* keylockd-protocol(7): one line per reply; drop a CR. */
			char	*line = b->data + b->off;
			char	*nul = memchr(line, '\0', (size_t)(nl - line));

			*nl = '\0';
			if (nl > line && nl[-1] == '\r')
				nl[-1] = '\0';
			b->off = b->scan = (size_t)(nl - b->data) + 1;
			kl->reply = line;
			/* keylockd-protocol(7): a reply is text; a NUL would
			 * cut it short of what the server meant */
			if (nul != NULL) {
				char	q[96];

				kli_quote(q, sizeof(q), line, 40);
				kl->reply = "";
				kli_close(kl);
				return kli_fail(kl, KEYLOCK_ERR_PROTO, "a reply "
				    "line with a NUL byte at byte %zu, after "
				    "\"%s\"", (size_t)(nul - line) + 1, q);
			}
			return KEYLOCK_OK;
		}
		b->scan = b->len;
		if (b->len - b->off >= KEYLOCK_REPLY_MAX) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_PROTO, "a reply line "
			    "over %d bytes", KEYLOCK_REPLY_MAX);
		}
		if (b->len == b->cap && b->off > 0) {
			memmove(b->data, b->data + b->off, b->len - b->off);
			b->len -= b->off;
			b->scan -= b->off;
			b->off = 0;
		} else if (b->len == b->cap &&
		    kli_buf_reserve(b, b->cap * 2) == -1) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_NOMEM, "out of memory "
			    "for a reply of %zu bytes", b->len);
		}
		n = io_read(kl, b->data + b->len, b->cap - b->len, &events);
		if (n > 0) {
			b->len += (size_t)n;
			continue;
		}
		if (n == 0) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_CLOSED, "the server "
			    "closed the connection");
		}
		if (n == -2)
			return kl->last;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return kli_fail_errno(kl, errno, "recv");
		if ((r = kli_wait_fd(kl->fd, events, deadline)) == -1)
			return kli_fail_errno(kl, errno, "poll");
		if (r == 0)
			return kli_status(kl, KEYLOCK_PENDING);
	}
}

enum keylock_status
keylock_check(struct keylock *kl)
{
	if (kl->sess_id[0] != '\0')
		return kli_sess_check(kl);
	return kli_check_plain(kl);
}

enum keylock_status
kli_check_plain(struct keylock *kl)
{
	char	buf[256];
	ssize_t	n;
	short	events;

	if (kl->fd == -1)
		return kli_fail(kl, KEYLOCK_ERR_CLOSED, "not connected");
	if (kl->pending)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "a LOCK is in flight: "
		    "use keylock_lock_recv()");
	for (;;) {
		/* Under TLS, reading may only take records that hold no
		 * data (session tickets): that is still "nothing". */
		if (kl->in.off < kl->in.len || kli_tls_pending(kl) > 0 ||
		    (n = io_read(kl, buf, sizeof(buf), &events)) > 0) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_PROTO, "the server "
			    "sent bytes nobody asked for; connection closed");
		}
		if (n == 0) {
			kli_close(kl);
			return kli_fail(kl, KEYLOCK_ERR_CLOSED, "the server "
			    "closed the connection");
		}
		if (n == -2)
			return kl->last;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return kli_status(kl, KEYLOCK_OK);
		return kli_fail_errno(kl, errno, "recv");
	}
}

/* recv(2), or the TLS layer's read: > 0, 0 at EOF, -1 with errno (EAGAIN:
 * poll for *events), -2 after a TLS failure was reported. */
static ssize_t
io_read(struct keylock *kl, void *buf, size_t len, short *events)
{
	if (kl->ssl != NULL)
		return kli_tls_read(kl, buf, len, events);
	*events = POLLIN;
	return recv(kl->fd, buf, len, 0);
}

/*
 * server: an optional "tls://", then a path (has a '/'), "[v6]:port",
 * "[v6]", "host:port", "host", or a bare IPv6 address (two or more ':', no
 * port). TLS has its own default port, and no unix sockets.
 */
static enum keylock_status
addr_parse(struct keylock *kl, const char *server, int tls,
    struct server_addr *a)
{
	struct sockaddr_un	 sun;
	const char		*host, *port = NULL, *end, *colon;
	size_t			 hostlen;
	char			*endp;
	unsigned long		 p;

	memset(a, 0, sizeof(*a));
	if (strncmp(server, KEYLOCK_TLS_PREFIX,
	    strlen(KEYLOCK_TLS_PREFIX)) == 0)
		server += strlen(KEYLOCK_TLS_PREFIX);
	host = server;
	if (strchr(server, '/') != NULL && tls)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "%s: TLS needs a TCP "
		    "server, not a unix socket", server);
	if (strchr(server, '/') != NULL) {
		if (strlen(server) >= sizeof(sun.sun_path) ||
		    strlen(server) >= sizeof(a->host))
			return kli_fail(kl, KEYLOCK_ERR_INVAL, "%s: socket "
			    "path too long", server);
		a->is_unix = 1;
		strcpy(a->host, server);
		return KEYLOCK_OK;
	}
	if (*server == '[') {
		host = server + 1;
		if ((end = strchr(host, ']')) == NULL ||
		    (end[1] != '\0' && end[1] != ':'))
			return kli_fail(kl, KEYLOCK_ERR_INVAL, "%s: want "
			    "[address]:port", server);
		hostlen = (size_t)(end - host);
		if (end[1] == ':')
			port = end + 2;
	} else if ((colon = strchr(server, ':')) != NULL &&
	    strchr(colon + 1, ':') == NULL) {
		hostlen = (size_t)(colon - server);
		port = colon + 1;
	} else
		hostlen = strlen(server);
	if (hostlen == 0 || hostlen >= sizeof(a->host))
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "%s: bad host", server);
	memcpy(a->host, host, hostlen);
	if (port == NULL) {
		snprintf(a->port, sizeof(a->port), "%d", tls ?
		    KEYLOCK_TLS_PORT_DEFAULT : KEYLOCK_PORT_DEFAULT);
		return KEYLOCK_OK;
	}
	errno = 0;
	p = strtoul(port, &endp, 10);
	if (*port < '0' || *port > '9' || *endp != '\0' || errno != 0 ||
	    p == 0 || p > 65535)
		return kli_fail(kl, KEYLOCK_ERR_INVAL, "%s: bad port", server);
	snprintf(a->port, sizeof(a->port), "%lu", p);
	return KEYLOCK_OK;
}

static enum keylock_status
connect_unix(struct keylock *kl, const char *server,
    const struct server_addr *a, int64_t deadline)
{
	struct sockaddr_un	sun;
	int			fd, err;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, a->host);
	if ((fd = socket_new(AF_UNIX)) == -1)
		return kli_fail_errno(kl, errno, "socket");
	for (;;) {
		err = connect_one(fd, (struct sockaddr *)&sun, sizeof(sun),
		    deadline);
		/* A full listen backlog says EAGAIN at once, where TCP
		 * would wait: wait here too, until the deadline. */
		if (err != EAGAIN || (deadline != -1 &&
		    kli_now_ms() >= deadline))
			break;
		poll(NULL, 0, KEYLOCK_RETRY_MS);
	}
	if (err != 0) {
		close(fd);
		if (err == ETIMEDOUT)
			return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "connect %s: "
			    "timed out", server);
		return kli_fail_errno(kl, err, "connect %s", server);
	}
	kl->fd = fd;
	return kli_status(kl, KEYLOCK_OK);
}

static enum keylock_status
connect_tcp(struct keylock *kl, const char *server,
    const struct server_addr *a, int64_t deadline)
{
	struct addrinfo	 hints, *res, *ai;
	int		 fd, err = 0, gai;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((gai = getaddrinfo(a->host, a->port, &hints, &res)) != 0)
		return kli_fail(kl, KEYLOCK_ERR_IO, "%s: %s", server,
		    gai_strerror(gai));
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if ((fd = socket_new(ai->ai_family)) == -1) {
			err = errno;
			continue;
		}
		if ((err = connect_one(fd, ai->ai_addr, ai->ai_addrlen,
		    deadline)) == 0) {
			socket_tune_tcp(fd);
			kl->fd = fd;
			break;
		}
		close(fd);
		if (err == ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	if (kl->fd != -1)
		return kli_status(kl, KEYLOCK_OK);
	if (err == ETIMEDOUT)
		return kli_fail(kl, KEYLOCK_ERR_DEADLINE, "connect %s: timed "
		    "out", server);
	return kli_fail_errno(kl, err, "connect %s", server);
}

/* Returns 0 or an errno value; ETIMEDOUT when the deadline passed. */
static int
connect_one(int fd, const struct sockaddr *sa, socklen_t len,
    int64_t deadline)
{
	socklen_t	elen = sizeof(int);
	int		err = 0, r;

	if (connect(fd, sa, len) == 0)
		return 0;
	if (errno != EINPROGRESS && errno != EINTR)
		return errno;
	if ((r = kli_wait_fd(fd, POLLOUT, deadline)) == -1)
		return errno;
	if (r == 0)
		return ETIMEDOUT;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == -1)
		return errno;
	return err;
}

static int
socket_new(int family)
{
	int	fd;

#if defined(SOCK_CLOEXEC) && defined(SOCK_NONBLOCK)
	fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
#else
	if ((fd = socket(family, SOCK_STREAM, 0)) != -1 &&
	    (fcntl(fd, F_SETFD, FD_CLOEXEC) == -1 ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == -1)) {
		close(fd);
		fd = -1;
	}
#endif
#ifdef SO_NOSIGPIPE
	if (fd != -1)
		setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &(int){ 1 },
		    sizeof(int));
#endif
	return fd;
}

/* Best effort: a request is one small write, and keepalive finds a dead
 * server while locks are held and nothing is said. */
static void
socket_tune_tcp(int fd)
{
	int	on = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
#ifdef TCP_KEEPIDLE
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE,
	    &(int){ KEYLOCK_KEEPALIVE_IDLE }, sizeof(int));
#endif
#ifdef TCP_KEEPINTVL
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL,
	    &(int){ KEYLOCK_KEEPALIVE_INTERVAL }, sizeof(int));
#endif
#ifdef TCP_KEEPCNT
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT,
	    &(int){ KEYLOCK_KEEPALIVE_COUNT }, sizeof(int));
#endif
}

int
kli_wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd	pfd = { .fd = fd, .events = events };
	int64_t		left;
	int		r;

	for (;;) {
		left = -1;
		if (deadline != -1) {
			left = deadline - kli_now_ms();
			if (left < 0)
				left = 0;
			if (left > INT_MAX)
				left = INT_MAX;
		}
		r = poll(&pfd, 1, (int)left);
		if (r > 0)
			return 1;
		if (r == 0 && left != INT_MAX)
			return 0;
		if (r == -1 && errno != EINTR)
			return -1;
	}
}

/* The connection's state is unknown: it is closed. */
enum keylock_status
kli_fail_errno(struct keylock *kl, int err, const char *fmt, ...)
{
	char	what[KEYLOCK_MSG_MAX / 2], ebuf[128];
	va_list	ap;

	kli_close(kl);
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	kli_fail(kl, err == ECONNRESET || err == EPIPE ? KEYLOCK_ERR_CLOSED :
	    KEYLOCK_ERR_IO, "%s: %s", what, kli_errstr(err, ebuf,
	    sizeof(ebuf)));
	errno = err;
	return kl->last;
}

/* strerror_r() is GNU (returns the text) or XSI (fills buf), depending on
 * feature macros the library does not control: take whichever it is. */
static const char *
errstr_gnu(char *r, char *buf)
{
	(void)buf;
	return r;
}

static const char *
errstr_xsi(int r, char *buf)
{
	return r == 0 ? buf : "unknown error";
}

const char *
kli_quote(char *buf, size_t size, const char *s, size_t max)
{
	static const char	 hex[] = "0123456789abcdef";
	size_t			 o = 0, i;

	for (i = 0; s[i] != '\0' && i < max && o + 8 < size; i++) {
		unsigned char	ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f) {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[ch >> 4];
			buf[o++] = hex[ch & 0xf];
		} else
			buf[o++] = (char)ch;
	}
	if (s[i] != '\0' && o + 3 < size) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
	return buf;
}

const char *
kli_errstr(int err, char *buf, size_t len)
{
	return _Generic(strerror_r(err, buf, len),
	    char *: errstr_gnu,
	    default: errstr_xsi)(strerror_r(err, buf, len), buf);
}
