/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of one connection's life: conn.c (framing, queueing behind a
 * waiting LOCK, output bounds, close), commands.c and the server's end of
 * turn, together and without listeners. As in libevent's regress, every
 * test gets a fresh server (and event_base) over a fresh mkdtemp state
 * directory, and each client is a socketpair: the server end goes to
 * conn_new(), the test writes requests to the other end, runs the loop
 * non-blocking and reads the replies, with a deadline. The tests live in
 * conn_*.c by theme; this file holds the fixture and the helpers they share
 * (cc_ prefix, declared in check_conn.h), the suite and main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* nftw, mkdtemp, SOCK_NONBLOCK */
#endif
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "check_conn.h"
#include "check_main.h"
#include "config.h"
#include "conn.h"
#include "kl.h"
#include "server.h"
#include "stats.h"
#include "clock.h"
#include "util.h"

#define MAX_CLIENTS	8
#define MAX_ARGS	32

char			 cc_dir[PATH_MAX];
struct config		 cc_cfg;
static bool		 cfg_loaded;
struct server		*cc_srv;
static struct client	 cl[MAX_CLIENTS];
static int		 ncl;
char			 cc_line[LINE_MAX_TEST];	/* the last line read */
static void		*tmem[32];		/* see cc_talloc() */
static int		 ntmem;
enum conn_transport	 cc_transport;	/* of the next client */

/* ---- fixture ---- */

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void
reset_getopt(void)
{
	static char	 prog[] = "keylockd";
	static char	*none[] = { prog, NULL };

	optind = 0;
	opterr = 0;
	while (getopt(1, none, "") != -1)
		continue;
	optind = 1;
}

uint64_t
cc_now_ms(void)
{
	return kl_now_ms();
}

/* A server with the fixed test settings plus extra[0..nextra). */
void
cc_start_server(const char *const *extra, int nextra)
{
	const char	*base[] = { "keylockd", "--config", "/dev/null",
	    "--state-dir", cc_dir, "--unix", "", "--no-tcp" };
	char		*argv[MAX_ARGS + 1];
	int		 argc = 0, rc;

	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		argv[argc++] = strdup(base[i]);
	for (int i = 0; i < nextra; i++) {
		ck_assert_int_lt(argc, MAX_ARGS);
		argv[argc++] = strdup(extra[i]);
	}
	argv[argc] = NULL;
	reset_getopt();
	rc = config_load(&cc_cfg, argc, argv);
	cfg_loaded = true;
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	ck_assert_msg(rc == 0, "config_load returned %d", rc);
	cc_srv = server_new(&cc_cfg);
	ck_assert_ptr_nonnull(cc_srv);
	ck_assert_ptr_nonnull(server_base(cc_srv));
}

void
cc_stop_server(void)
{
	server_free(cc_srv);
	cc_srv = NULL;
	if (cfg_loaded)
		config_cleanup(&cc_cfg);
	cfg_loaded = false;
}

void
cc_restart_server(const char *first, ...)
{
	const char	*extra[MAX_ARGS];
	va_list		 ap;
	int		 n = 0;

	ck_assert_int_eq(ncl, 0);
	cc_stop_server();
	va_start(ap, first);
	for (const char *a = first; a != NULL; a = va_arg(ap, const char *))
		extra[n++] = a;
	va_end(ap);
	cc_start_server(extra, n);
}

static void
setup(void)
{
	const char	*tmp = getenv("TMPDIR");

	snprintf(cc_dir, sizeof(cc_dir), "%s/check_conn.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(cc_dir));
	memset(cl, 0, sizeof(cl));
	ncl = 0;
	ntmem = 0;
	cc_transport = CONN_UNIX;
	cc_srv = NULL;
	cfg_loaded = false;
	cc_start_server(NULL, 0);
}

static void
teardown(void)
{
	for (int i = 0; i < ncl; i++) {
		if (cl[i].fd >= 0)
			close(cl[i].fd);
		free(cl[i].rx);
	}
	memset(cl, 0, sizeof(cl));
	ncl = 0;
	for (int i = 0; i < ntmem; i++)
		free(tmem[i]);
	ntmem = 0;
	cc_stop_server();
	nftw(cc_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Memory for one test, freed by the fixture even when the test fails. */
void *
cc_talloc(size_t n)
{
	void	*p;

	ck_assert_int_lt(ntmem, (int)(sizeof(tmem) / sizeof(tmem[0])));
	p = malloc(n);
	ck_assert_ptr_nonnull(p);
	tmem[ntmem++] = p;
	return p;
}

/* ---- clients ---- */

/* A new client; sndbuf/rcvbuf > 0 shrink the socket buffers. */
struct client *
cc_client_new_buf(int srv_sndbuf, int cli_rcvbuf, int cli_sndbuf)
{
	struct client	*k;
	int		 fds[2];

	ck_assert_int_lt(ncl, MAX_CLIENTS);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0, fds), 0);
	if (srv_sndbuf > 0)
		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &srv_sndbuf,
		    sizeof(srv_sndbuf));
	if (cli_rcvbuf > 0)
		setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &cli_rcvbuf,
		    sizeof(cli_rcvbuf));
	if (cli_sndbuf > 0)
		setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &cli_sndbuf,
		    sizeof(cli_sndbuf));
	k = &cl[ncl++];
	memset(k, 0, sizeof(*k));
	k->fd = fds[1];
	k->c = conn_new(server_conns(cc_srv), fds[0], "test", cc_transport);
	ck_assert_ptr_nonnull(k->c);
	return k;
}

struct client *
cc_client_new(void)
{
	return cc_client_new_buf(0, 0, 0);
}

/* The test closes its end: the server sees the peer go away. */
void
cc_client_close(struct client *k)
{
	ck_assert_int_ge(k->fd, 0);
	close(k->fd);
	k->fd = -1;
	k->c = NULL;
}

/* One non-blocking turn of the server's loop. */
void
cc_pump(void)
{
	ck_assert_int_ge(event_base_loop(server_base(cc_srv), EVLOOP_NONBLOCK), 0);
}

/* Reads whatever has arrived for k. */
void
cc_rx_poll(struct client *k)
{
	ssize_t	n;

	if (k->fd < 0 || k->eof)
		return;
	for (;;) {
		if (k->rcap - k->rlen < 65536) {
			k->rcap = k->rcap == 0 ? 131072 : k->rcap * 2;
			k->rx = realloc(k->rx, k->rcap);
			ck_assert_ptr_nonnull(k->rx);
		}
		n = recv(k->fd, k->rx + k->rlen, k->rcap - k->rlen, 0);
		if (n > 0) {
			k->rlen += (size_t)n;
			continue;
		}
		if (n == 0) {
			k->eof = true;
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (errno == ECONNRESET) {
			k->eof = true;
			return;
		}
		ck_abort_msg("recv: %s", strerror(errno));
	}
}

/* Counts k's unread complete lines, stopping at max. */
size_t
cc_count_lines(const struct client *k, size_t max)
{
	const char	*p = k->rx + k->roff, *end = k->rx + k->rlen, *lf;
	size_t		 n = 0;

	if (k->rx == NULL)
		return 0;
	while (n < max && (lf = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		n++;
		p = lf + 1;
	}
	return n;
}

size_t
cc_unread_lines(const struct client *k)
{
	return cc_count_lines(k, SIZE_MAX);
}

/* Sleeps up to ms for k's end (or any client's) to become readable. */
void
cc_nap(struct client *k, int ms)
{
	struct pollfd	pfd = { .fd = k != NULL ? k->fd : -1,
			    .events = POLLIN };

	poll(&pfd, 1, ms);
}

/* Runs the loop until k has n unread lines (or EOF); fails at the
 * deadline. */
void
cc_wait_lines(struct client *k, size_t n, int timeout_ms)
{
	uint64_t	deadline = cc_now_ms() + (uint64_t)timeout_ms;

	if (cc_count_lines(k, n) >= n)
		return;
	for (;;) {
		cc_pump();
		cc_rx_poll(k);
		if (cc_count_lines(k, n) >= n || k->eof)
			break;
		if (cc_now_ms() > deadline)
			break;
		cc_nap(k, 1);
	}
	ck_assert_msg(cc_count_lines(k, n) >= n, "got %zu of %zu reply lines "
	    "(%s): \"%.*s\"", cc_unread_lines(k), n, k->eof ? "EOF" : "timeout",
	    (int)(k->rlen - k->roff > 300 ? 300 : k->rlen - k->roff),
	    k->rx != NULL ? k->rx + k->roff : "");
}

/* Takes the next line of k (without LF) into line[]. */
const char *
cc_take_line(struct client *k)
{
	char	*lf;
	size_t	 len;

	cc_wait_lines(k, 1, WAIT_MS);
	lf = memchr(k->rx + k->roff, '\n', k->rlen - k->roff);
	len = (size_t)(lf - (k->rx + k->roff));
	ck_assert_uint_lt(len, sizeof(cc_line));
	memcpy(cc_line, k->rx + k->roff, len);
	cc_line[len] = '\0';
	ck_assert_msg(strlen(cc_line) == len, "reply holds a NUL byte");
	k->roff += len + 1;
	return cc_line;
}

/* Takes an "OK N" line and returns N. */
uint64_t
cc_take_token(struct client *k)
{
	const char	*l = cc_take_line(k);
	uint64_t	 v;

	ck_assert_msg(strncmp(l, "OK ", 3) == 0 && kl_parse_u64(l + 3,
	    strlen(l + 3), 1, (UINT64_C(1) << 63) - 1, &v), "reply \"%s\" is "
	    "not OK TOKEN", l);
	return v;
}

/* Runs the loop for QUIET_MS and checks nothing arrived for k. */
void
cc_expect_silence(struct client *k)
{
	uint64_t	end = cc_now_ms() + QUIET_MS;

	while (cc_now_ms() < end) {
		cc_pump();
		cc_rx_poll(k);
		cc_nap(k, 1);
	}
	ck_assert_msg(k->rlen == k->roff, "unexpected reply \"%.*s\"",
	    (int)(k->rlen - k->roff), k->rx + k->roff);
	ck_assert_msg(!k->eof, "unexpected EOF");
}

/* Runs the loop until k sees EOF, with nothing unread before it. */
void
cc_expect_eof(struct client *k)
{
	uint64_t	deadline = cc_now_ms() + WAIT_MS;

	while (!k->eof && cc_now_ms() < deadline) {
		cc_pump();
		cc_rx_poll(k);
		if (!k->eof)
			cc_nap(k, 1);
	}
	ck_assert_msg(k->eof, "no EOF");
	ck_assert_msg(k->rlen == k->roff, "unread bytes before EOF: \"%.*s\"",
	    (int)(k->rlen - k->roff), k->rx + k->roff);
}

/* Sends len bytes, running the loop (and reading k's replies) while the
 * socket is full. */
void
cc_send_bytes(struct client *k, const char *buf, size_t len)
{
	uint64_t	deadline = cc_now_ms() + WAIT_MS;
	size_t		off = 0;

	while (off < len) {
		ssize_t	n;

		n = send(k->fd, buf + off, len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		ck_assert_msg(n == -1 && (errno == EAGAIN ||
		    errno == EWOULDBLOCK || errno == EINTR), "send: %s",
		    strerror(errno));
		ck_assert_msg(cc_now_ms() < deadline,
		    "send stuck at %zu of %zu", off, len);
		cc_pump();
		cc_rx_poll(k);
		cc_nap(NULL, 1);
	}
}

void
cc_send_str(struct client *k, const char *s)
{
	cc_send_bytes(k, s, strlen(s));
}

/* Sends as much as the peer takes; returns the bytes sent once no more
 * go in after several loop turns. */
size_t
cc_send_until_blocked(struct client *k, const char *buf, size_t len)
{
	size_t	off = 0;
	int	idle = 0;

	while (off < len && idle < 50) {
		ssize_t	n;

		n = send(k->fd, buf + off, len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			idle = 0;
			continue;
		}
		ck_assert_msg(n == -1 && (errno == EAGAIN ||
		    errno == EWOULDBLOCK || errno == EINTR), "send: %s",
		    strerror(errno));
		cc_pump();
		cc_rx_poll(k);
		cc_nap(NULL, 1);
		idle++;
	}
	return off;
}

/* Parses an "OK {json}" reply of k. */
json_t *
cc_take_json(struct client *k)
{
	const char	*l = cc_take_line(k);
	json_error_t	 err;
	json_t		*j;

	ck_assert_msg(strncmp(l, "OK {", 4) == 0, "reply \"%s\" is not OK "
	    "{json}", l);
	j = json_loads(l + 3, 0, &err);
	ck_assert_msg(j != NULL && json_is_object(j), "bad JSON (%s): %s",
	    err.text, l);
	return j;
}

json_int_t
cc_json_int(json_t *o, const char *name)
{
	json_t	*v = json_object_get(o, name);

	ck_assert_msg(v != NULL && json_is_integer(v), "no integer %s", name);
	return json_integer_value(v);
}

/* The server's STATS as seen by a fresh connection, which then leaves. */
json_t *
cc_stats_now(void)
{
	struct client	*k = cc_client_new();
	json_t		*j;

	cc_send_str(k, "STATS\n");
	j = cc_take_json(k);
	cc_client_close(k);
	cc_pump();
	return j;
}

char *
cc_repeat(const char *unit, size_t times, size_t *lenp)
{
	size_t	 ulen = strlen(unit), len = ulen * times;
	char	*p = cc_talloc(len + 1);

	for (size_t i = 0; i < times; i++)
		memcpy(p + i * ulen, unit, ulen);
	p[len] = '\0';
	if (lenp != NULL)
		*lenp = len;
	return p;
}

/* "PING" padded with spaces to total bytes, ending in eol. */
char *
cc_padded_ping(size_t total, const char *eol)
{
	size_t	 elen = strlen(eol);
	char	*p = cc_talloc(total + 1);

	ck_assert_uint_ge(total, 4 + elen);
	memcpy(p, "PING", 4);
	memset(p + 4, ' ', total - 4 - elen);
	memcpy(p + total - elen, eol, elen);
	p[total] = '\0';
	return p;
}

TCase *
cc_tcase(Suite *s, const char *name, double timeout)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, timeout);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *
conn_suite(void)
{
	Suite	*s = suite_create("conn");

	cc_add_framing(s);
	cc_add_waiting(s);
	cc_add_commands(s);
	cc_add_cancel(s);
	return s;
}

const struct check_program check_program = {
	.name = "check_conn",
	.suites = { conn_suite, NULL }
};
