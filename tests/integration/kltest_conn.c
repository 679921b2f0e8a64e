/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The harness's connections, the layer that never asserts (kltest.h): open
 * over TCP or the unix socket with a deadline, send within a deadline
 * while keeping what arrives, read a line with a deadline, and look at
 * the last line (OK with a token, ERR CODE text, OK with JSON). Safe in
 * worker threads, one connection per thread; open connections are kept
 * in a list so that teardown closes what a test left open.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "kltest_impl.h"

#define KT_LINE_CAP	(16 * 1024 * 1024)	/* longer: a server bug */

static pthread_mutex_t kt_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kt_conn *kt_conns;

/* Closes fd keeping errno; returns -1. */
static int
kt_close_keep_errno(int fd)
{
	int	err = errno;

	close(fd);
	errno = err;
	return -1;
}

/* A blocking connect to d's unix socket (SO_SNDTIMEO bounds it), made
 * non-blocking after; the socket, or -1 with errno. */
static int
kt_sock_unix(const struct kt_daemon *d, int64_t timeout_ms)
{
	struct sockaddr_un sun;
	struct timeval	tv = { (time_t)(timeout_ms / 1000),
			    (suseconds_t)(timeout_ms % 1000) * 1000 };
	int		fd;

	if (!d->has_unix || strlen(d->sock) >= sizeof(sun.sun_path)) {
		errno = ENOENT;
		return -1;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, d->sock);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	/* a blocking unix connect honours SO_SNDTIMEO */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1)
		return kt_close_keep_errno(fd);
	tv.tv_sec = 0;
	tv.tv_usec = 0;
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

/* A non-blocking connect to d's host and port, polled until timeout_ms;
 * the socket (TCP_NODELAY), or -1 with errno. */
static int
kt_sock_tcp(const struct kt_daemon *d, int64_t timeout_ms)
{
	struct addrinfo	 hints, *res = NULL;
	struct pollfd	 pfd;
	char		 port[16];
	int		 fd, one = 1, err;
	socklen_t	 elen = sizeof(err);

	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%d", d->port);
	if (getaddrinfo(d->host, port, &hints, &res) != 0 || res == NULL) {
		errno = EHOSTUNREACH;
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC |
	    SOCK_NONBLOCK, 0);
	if (fd == -1) {
		freeaddrinfo(res);
		return -1;
	}
	if (connect(fd, res->ai_addr, res->ai_addrlen) == -1 &&
	    errno != EINPROGRESS) {
		err = errno;
		freeaddrinfo(res);
		errno = err;
		return kt_close_keep_errno(fd);
	}
	freeaddrinfo(res);
	pfd.fd = fd;
	pfd.events = POLLOUT;
	if (poll(&pfd, 1, (int)timeout_ms) != 1) {
		close(fd);
		errno = ETIMEDOUT;
		return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == -1 ||
	    err != 0) {
		close(fd);
		errno = err != 0 ? err : EIO;
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

struct kt_conn *
kt_conn_open(const struct kt_daemon *d, enum kt_transport t,
    int64_t timeout_ms)
{
	struct kt_conn	*c;
	int		 fd;

	fd = t == KT_UNIX ? kt_sock_unix(d, timeout_ms) :
	    kt_sock_tcp(d, timeout_ms);
	if (fd == -1)
		return NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return NULL;
	}
	c->fd = fd;
	c->transport = t;
	c->cap = 65536;
	c->buf = malloc(c->cap);
	c->linecap = 4096;
	c->line = malloc(c->linecap);
	if (c->buf == NULL || c->line == NULL) {
		free(c->buf);
		free(c->line);
		free(c);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	c->line[0] = '\0';
	snprintf(c->label, sizeof(c->label), "%s fd %d",
	    t == KT_UNIX ? "unix" : "tcp", fd);
	pthread_mutex_lock(&kt_reg_lock);
	c->next = kt_conns;
	kt_conns = c;
	pthread_mutex_unlock(&kt_reg_lock);
	return c;
}

void
kt_conn_close(struct kt_conn *c)
{
	struct kt_conn **pp;

	if (c == NULL)
		return;
	pthread_mutex_lock(&kt_reg_lock);
	for (pp = &kt_conns; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&kt_reg_lock);
	if (c->fd != -1)
		close(c->fd);
	free(c->buf);
	free(c->line);
	free(c);
}
void
kt_conns_close(void)
{
	struct kt_conn *c;

	pthread_mutex_lock(&kt_reg_lock);
	c = kt_conns;
	pthread_mutex_unlock(&kt_reg_lock);
	while (c != NULL) {
		struct kt_conn *next = c->next;

		kt_conn_close(c);
		c = next;
	}
}

/* Reads what is there now into the buffer. Returns bytes read, 0 if
 * nothing was ready, -1 at EOF or on error. */
static ssize_t
kt_conn_fill(struct kt_conn *c)
{
	ssize_t	n;

	if (c->eof)
		return -1;
	if (c->off > 0 && (c->off == c->len || c->len == c->cap)) {
		memmove(c->buf, c->buf + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (c->len == c->cap) {
		char *nb;

		if (c->cap >= KT_LINE_CAP) {
			c->err = EMSGSIZE;
			return -1;
		}
		if ((nb = realloc(c->buf, c->cap * 2)) == NULL) {
			c->err = ENOMEM;
			return -1;
		}
		c->buf = nb;
		c->cap *= 2;
	}
	n = read(c->fd, c->buf + c->len, c->cap - c->len);
	if (n > 0) {
		c->len += (size_t)n;
		return n;
	}
	if (n == 0) {
		c->eof = true;
		return -1;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	c->err = errno;
	c->eof = errno == ECONNRESET;
	return -1;
}

static void
kt_note_sent(struct kt_conn *c, const char *buf, size_t len)
{
	const char	*lf = memchr(buf, '\n', len);
	size_t		 first = lf != NULL ? (size_t)(lf - buf) : len;
	size_t		 nlines = 0;

	for (size_t i = 0; i < len; i++)
		nlines += buf[i] == '\n';
	if (nlines > 1)
		snprintf(c->lastsent, sizeof(c->lastsent), "%s\\n (+%zu "
		    "more lines)", kt_esc(buf, first > 100 ? 100 : first),
		    nlines - 1);
	else
		snprintf(c->lastsent, sizeof(c->lastsent), "%s",
		    kt_esc(buf, len > 120 ? 120 : len));
}

/* Writes all of buf to fd within timeout_ms. While fd is not writable,
 * what arrives is read into keep, or left unread if keep is NULL. */
static int
kt_write_all(int fd, struct kt_conn *keep, const void *buf, size_t len,
    int64_t timeout_ms)
{
	const char	*p = buf;
	uint64_t	 deadline = kt_now_ms() + (uint64_t)timeout_ms;

	while (len > 0) {
		struct pollfd	pfd = { fd, POLLOUT, 0 };
		int64_t		left;
		ssize_t		n;

		n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK &&
		    errno != EINTR)
			return -1;
		left = (int64_t)deadline - (int64_t)kt_now_ms();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (keep != NULL && !keep->eof)
			pfd.events |= POLLIN;
		if (poll(&pfd, 1, (int)left) > 0 && (pfd.revents & POLLIN))
			kt_conn_fill(keep);	/* keep replies, never block */
	}
	return 0;
}

int
kt_conn_send(struct kt_conn *c, const void *buf, size_t len,
    int64_t timeout_ms)
{
	kt_note_sent(c, buf, len);
	return kt_write_all(c->fd, c, buf, len, timeout_ms);
}

int
kt_fd_write_all(int fd, const void *buf, size_t len, int64_t timeout_ms)
{
	return kt_write_all(fd, NULL, buf, len, timeout_ms);
}

int
kt_conn_sendf(struct kt_conn *c, const char *fmt, ...)
{
	char	 small[1024], *big = NULL, *p = small;
	va_list	 ap;
	int	 n, r;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	if ((size_t)n >= sizeof(small) - 1) {
		if ((big = malloc((size_t)n + 2)) == NULL)
			return -1;
		va_start(ap, fmt);
		vsnprintf(big, (size_t)n + 1, fmt, ap);
		va_end(ap);
		p = big;
	}
	p[n] = '\n';
	r = kt_conn_send(c, p, (size_t)n + 1, kt_ms(KT_REPLY_MS));
	free(big);
	return r;
}

ssize_t
kt_conn_write_some(struct kt_conn *c, const void *buf, size_t len)
{
	return send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

enum kt_read
kt_conn_readline(struct kt_conn *c, int64_t timeout_ms)
{
	uint64_t	deadline = kt_now_ms() + (uint64_t)(timeout_ms > 0 ?
			    timeout_ms : 0);

	for (;;) {
		char	*p = c->buf + c->off;
		char	*lf = memchr(p, '\n', c->len - c->off);
		int64_t	 left;

		if (lf != NULL) {
			size_t n = (size_t)(lf - (c->buf + c->off));

			if (n + 1 > c->linecap) {
				char *nl = realloc(c->line, n + 1);

				if (nl == NULL)
					return KT_ERROR;
				c->line = nl;
				c->linecap = n + 1;
			}
			memcpy(c->line, c->buf + c->off, n);
			c->line[n] = '\0';
			c->linelen = n;
			c->off += n + 1;
			return KT_LINE;
		}
		if (kt_conn_fill(c) > 0)
			continue;
		if (c->eof)
			return KT_EOF;
		if (c->err != 0)
			return KT_ERROR;
		left = (int64_t)deadline - (int64_t)kt_now_ms();
		if (left <= 0)
			return KT_TIMEOUT;
		{
			struct pollfd pfd = { c->fd, POLLIN, 0 };

			if (poll(&pfd, 1, (int)left) == -1 && errno != EINTR)
				return KT_ERROR;
		}
	}
}

bool
kt_line_is(const struct kt_conn *c, const char *s)
{
	return c->linelen == strlen(s) && memcmp(c->line, s, c->linelen) == 0;
}

bool
kt_line_has_prefix(const struct kt_conn *c, const char *p)
{
	size_t	n = strlen(p);

	return c->linelen >= n && memcmp(c->line, p, n) == 0;
}

bool
kt_line_is_err(const struct kt_conn *c, const char *code)
{
	size_t	n = strlen(code);

	/* "ERR " CODE " " text, text not empty */
	return c->linelen > 4 + n + 1 && memcmp(c->line, "ERR ", 4) == 0 &&
	    memcmp(c->line + 4, code, n) == 0 && c->line[4 + n] == ' ' &&
	    memchr(c->line, '\0', c->linelen) == NULL;
}

bool
kt_line_token(const struct kt_conn *c, uint64_t *token)
{
	uint64_t	v = 0;
	size_t		i;

	if (c->linelen < 4 || memcmp(c->line, "OK ", 3) != 0)
		return false;
	if (c->line[3] == '0' && c->linelen > 4)
		return false;		/* no leading zeros */
	for (i = 3; i < c->linelen; i++) {
		unsigned char ch = (unsigned char)c->line[i];

		if (!isdigit(ch) || v > (UINT64_C(1) << 63) / 10)
			return false;
		v = v * 10 + (ch - '0');
	}
	if (v >= (UINT64_C(1) << 63))
		return false;
	*token = v;
	return true;
}

json_t *
kt_parse_ok_json(const char *line, size_t len, char *why, size_t whylen)
{
	json_error_t	 jerr;
	json_t		*o;

	if (len < 4 || memcmp(line, "OK {", 4) != 0) {
		snprintf(why, whylen, "not \"OK {json}\"");
		return NULL;
	}
	o = json_loadb(line + 3, len - 3, JSON_REJECT_DUPLICATES, &jerr);
	if (o == NULL) {
		snprintf(why, whylen, "bad JSON at column %d: %s",
		    jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		snprintf(why, whylen, "JSON is not an object");
		return NULL;
	}
	return o;
}
