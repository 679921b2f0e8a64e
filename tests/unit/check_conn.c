/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of one connection's life: conn.c (framing, queueing behind a
 * waiting LOCK, output bounds, close), commands.c and the server's end of
 * turn, together and without listeners. As in libevent's regress, every
 * test gets a fresh server (and event_base) over a fresh mkdtemp state
 * directory, and each client is a socketpair: the server end goes to
 * conn_new(), the test writes requests to the other end, runs the loop
 * non-blocking and reads the replies, with a deadline.
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

#include "config.h"
#include "conn.h"
#include "kl.h"
#include "server.h"
#include "util.h"

#define MAX_CLIENTS	8
#define MAX_ARGS	32
#define WAIT_MS		5000	/* for a reply that must come */
#define QUIET_MS	30	/* how long "no reply" is watched */
#define LINE_MAX_TEST	(1024 * 1024)

struct client {
	int		 fd;		/* the test's end, or -1 */
	struct conn	*c;		/* the server's, until closed */
	char		*rx;		/* [roff, rlen) unread */
	size_t		 roff, rlen, rcap;
	bool		 eof;
};

static char		 dir[PATH_MAX];
static struct config	 cfg;
static bool		 cfg_loaded;
static struct server	*srv;
static struct client	 cl[MAX_CLIENTS];
static int		 ncl;
static char		 line[LINE_MAX_TEST];	/* the last line read */
static void		*tmem[32];		/* see talloc() */
static int		 ntmem;

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

static uint64_t
now_ms(void)
{
	return kl_now_ms();
}

/* A server with the fixed test settings plus extra[0..nextra). */
static void
start_server(const char *const *extra, int nextra)
{
	const char	*base[] = { "keylockd", "--config", "/dev/null",
	    "--state-dir", dir, "--unix", "", "--no-tcp" };
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
	rc = config_load(&cfg, argc, argv);
	cfg_loaded = true;
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	ck_assert_msg(rc == 0, "config_load returned %d", rc);
	srv = server_new(&cfg);
	ck_assert_ptr_nonnull(srv);
	ck_assert_ptr_nonnull(srv->base);
}

static void
stop_server(void)
{
	server_free(srv);
	srv = NULL;
	if (cfg_loaded)
		config_cleanup(&cfg);
	cfg_loaded = false;
}

static void
restart_server(const char *first, ...)
{
	const char	*extra[MAX_ARGS];
	va_list		 ap;
	int		 n = 0;

	ck_assert_int_eq(ncl, 0);
	stop_server();
	va_start(ap, first);
	for (const char *a = first; a != NULL; a = va_arg(ap, const char *))
		extra[n++] = a;
	va_end(ap);
	start_server(extra, n);
}

static void
setup(void)
{
	const char	*tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/check_conn.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	memset(cl, 0, sizeof(cl));
	ncl = 0;
	ntmem = 0;
	srv = NULL;
	cfg_loaded = false;
	start_server(NULL, 0);
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
	stop_server();
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Memory for one test, freed by the fixture even when the test fails. */
static void *
talloc(size_t n)
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
static struct client *
client_new_buf(int srv_sndbuf, int cli_rcvbuf, int cli_sndbuf)
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
	k->c = conn_new(srv, fds[0], "test");
	ck_assert_ptr_nonnull(k->c);
	return k;
}

static struct client *
client_new(void)
{
	return client_new_buf(0, 0, 0);
}

/* The test closes its end: the server sees the peer go away. */
static void
client_close(struct client *k)
{
	ck_assert_int_ge(k->fd, 0);
	close(k->fd);
	k->fd = -1;
	k->c = NULL;
}

/* One non-blocking turn of the server's loop. */
static void
pump(void)
{
	ck_assert_int_ge(event_base_loop(srv->base, EVLOOP_NONBLOCK), 0);
}

/* Reads whatever has arrived for k. */
static void
rx_poll(struct client *k)
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
static size_t
count_lines(const struct client *k, size_t max)
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

static size_t
unread_lines(const struct client *k)
{
	return count_lines(k, SIZE_MAX);
}

/* Sleeps up to ms for k's end (or any client's) to become readable. */
static void
nap(struct client *k, int ms)
{
	struct pollfd	pfd = { .fd = k != NULL ? k->fd : -1,
			    .events = POLLIN };

	poll(&pfd, 1, ms);
}

/* Runs the loop until k has n unread lines (or EOF); fails at the
 * deadline. */
static void
wait_lines(struct client *k, size_t n, int timeout_ms)
{
	uint64_t	deadline = now_ms() + (uint64_t)timeout_ms;

	if (count_lines(k, n) >= n)
		return;
	for (;;) {
		pump();
		rx_poll(k);
		if (count_lines(k, n) >= n || k->eof)
			break;
		if (now_ms() > deadline)
			break;
		nap(k, 1);
	}
	ck_assert_msg(count_lines(k, n) >= n, "got %zu of %zu reply lines "
	    "(%s): \"%.*s\"", unread_lines(k), n, k->eof ? "EOF" : "timeout",
	    (int)(k->rlen - k->roff > 300 ? 300 : k->rlen - k->roff),
	    k->rx != NULL ? k->rx + k->roff : "");
}

/* Takes the next line of k (without LF) into line[]. */
static const char *
take_line(struct client *k)
{
	char	*lf;
	size_t	 len;

	wait_lines(k, 1, WAIT_MS);
	lf = memchr(k->rx + k->roff, '\n', k->rlen - k->roff);
	len = (size_t)(lf - (k->rx + k->roff));
	ck_assert_uint_lt(len, sizeof(line));
	memcpy(line, k->rx + k->roff, len);
	line[len] = '\0';
	ck_assert_msg(strlen(line) == len, "reply holds a NUL byte");
	k->roff += len + 1;
	return line;
}

#define EXPECT_LINE(k, want) do {					\
	const char *got_ = take_line(k);				\
	ck_assert_msg(strcmp(got_, (want)) == 0, "reply \"%s\", want \"%s\"", \
	    got_, (want));						\
} while (0)

#define EXPECT_PREFIX(k, want) do {					\
	const char *got_ = take_line(k);				\
	ck_assert_msg(strncmp(got_, (want), strlen(want)) == 0,	\
	    "reply \"%s\" does not start \"%s\"", got_, (want));	\
} while (0)

/* Takes an "OK N" line and returns N. */
static uint64_t
take_token(struct client *k)
{
	const char	*l = take_line(k);
	uint64_t	 v;

	ck_assert_msg(strncmp(l, "OK ", 3) == 0 && kl_parse_u64(l + 3,
	    strlen(l + 3), 1, (UINT64_C(1) << 63) - 1, &v), "reply \"%s\" is "
	    "not OK TOKEN", l);
	return v;
}

/* Runs the loop for QUIET_MS and checks nothing arrived for k. */
static void
expect_silence(struct client *k)
{
	uint64_t	end = now_ms() + QUIET_MS;

	while (now_ms() < end) {
		pump();
		rx_poll(k);
		nap(k, 1);
	}
	ck_assert_msg(k->rlen == k->roff, "unexpected reply \"%.*s\"",
	    (int)(k->rlen - k->roff), k->rx + k->roff);
	ck_assert_msg(!k->eof, "unexpected EOF");
}

/* Runs the loop until k sees EOF, with nothing unread before it. */
static void
expect_eof(struct client *k)
{
	uint64_t	deadline = now_ms() + WAIT_MS;

	while (!k->eof && now_ms() < deadline) {
		pump();
		rx_poll(k);
		if (!k->eof)
			nap(k, 1);
	}
	ck_assert_msg(k->eof, "no EOF");
	ck_assert_msg(k->rlen == k->roff, "unread bytes before EOF: \"%.*s\"",
	    (int)(k->rlen - k->roff), k->rx + k->roff);
}

/* Sends len bytes, running the loop (and reading k's replies) while the
 * socket is full. */
static void
send_bytes(struct client *k, const char *buf, size_t len)
{
	uint64_t	deadline = now_ms() + WAIT_MS;
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
		ck_assert_msg(now_ms() < deadline, "send stuck at %zu of %zu",
		    off, len);
		pump();
		rx_poll(k);
		nap(NULL, 1);
	}
}

static void
send_str(struct client *k, const char *s)
{
	send_bytes(k, s, strlen(s));
}

/* Sends as much as the peer takes; returns the bytes sent once no more
 * go in after several loop turns. */
static size_t
send_until_blocked(struct client *k, const char *buf, size_t len)
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
		pump();
		rx_poll(k);
		nap(NULL, 1);
		idle++;
	}
	return off;
}

/* Parses an "OK {json}" reply of k. */
static json_t *
take_json(struct client *k)
{
	const char	*l = take_line(k);
	json_error_t	 err;
	json_t		*j;

	ck_assert_msg(strncmp(l, "OK {", 4) == 0, "reply \"%s\" is not OK "
	    "{json}", l);
	j = json_loads(l + 3, 0, &err);
	ck_assert_msg(j != NULL && json_is_object(j), "bad JSON (%s): %s",
	    err.text, l);
	return j;
}

static json_int_t
json_int(json_t *o, const char *name)
{
	json_t	*v = json_object_get(o, name);

	ck_assert_msg(v != NULL && json_is_integer(v), "no integer %s", name);
	return json_integer_value(v);
}

/* The server's STATS as seen by a fresh connection, which then leaves. */
static json_t *
stats_now(void)
{
	struct client	*k = client_new();
	json_t		*j;

	send_str(k, "STATS\n");
	j = take_json(k);
	client_close(k);
	pump();
	return j;
}

static char *
repeat(const char *unit, size_t times, size_t *lenp)
{
	size_t	 ulen = strlen(unit), len = ulen * times;
	char	*p = talloc(len + 1);

	for (size_t i = 0; i < times; i++)
		memcpy(p + i * ulen, unit, ulen);
	p[len] = '\0';
	if (lenp != NULL)
		*lenp = len;
	return p;
}

/* "PING" padded with spaces to total bytes, ending in eol. */
static char *
padded_ping(size_t total, const char *eol)
{
	size_t	 elen = strlen(eol);
	char	*p = talloc(total + 1);

	ck_assert_uint_ge(total, 4 + elen);
	memcpy(p, "PING", 4);
	memset(p + 4, ' ', total - 4 - elen);
	memcpy(p + total - elen, eol, elen);
	p[total] = '\0';
	return p;
}

/* ---- framing ---- */

START_TEST(ping_gets_pong)
{
	struct client	*a = client_new();

	send_str(a, "PING\n");
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(command_words_are_case_insensitive)
{
	struct client	*a = client_new();

	send_str(a, "ping\nPiNg\n");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(pipelined_1000_pings_get_1000_replies_in_order)
{
	struct client	*a = client_new();
	size_t		 len;
	char		*req = repeat("PING\n", 1000, &len);

	send_bytes(a, req, len);
	wait_lines(a, 1000, WAIT_MS);
	for (int i = 0; i < 1000; i++)
		EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(pipelined_requests_are_answered_in_request_order)
{
	struct client	*a = client_new();
	char		*req = talloc(1000 * 16), want[64];
	size_t		 len = 0;

	for (int i = 0; i < 1000; i++)
		if (i % 2)
			len += (size_t)sprintf(req + len, "INFO k%d\n", i);
		else
			len += (size_t)sprintf(req + len, "PING\n");
	send_bytes(a, req, len);
	wait_lines(a, 1000, WAIT_MS);
	for (int i = 0; i < 1000; i++) {
		if (i % 2 == 0) {
			EXPECT_LINE(a, "OK PONG");
			continue;
		}
		snprintf(want, sizeof(want), "OK {\"key\":\"k%d\",", i);
		EXPECT_PREFIX(a, want);
	}
}
END_TEST

START_TEST(request_split_into_single_bytes_is_answered_once)
{
	struct client	*a = client_new();
	const char	*req = "PING\n";

	for (const char *p = req; *p != '\0'; p++) {
		send_bytes(a, p, 1);
		pump();
		rx_poll(a);
		if (p[1] != '\0')
			ck_assert_msg(a->rlen == 0, "reply before the LF");
	}
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(lock_split_into_single_bytes_is_granted)
{
	struct client	*a = client_new();
	const char	*req = "LOCK s:k timeout=1000\r\nUNLOCK s:k\n";

	for (const char *p = req; *p != '\0'; p++) {
		send_bytes(a, p, 1);
		pump();
	}
	take_token(a);
	EXPECT_LINE(a, "OK 1");
}
END_TEST

START_TEST(crlf_line_is_answered_like_lf)
{
	struct client	*a = client_new();

	send_str(a, "PING\r\nPING\n");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(cr_split_from_its_lf_is_still_dropped)
{
	struct client	*a = client_new();

	send_str(a, "PING\r");
	pump();
	send_str(a, "\n");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(only_the_cr_before_the_lf_is_dropped)
{
	struct client	*a = client_new();

	/* "PING\r" is not a command: CR is not a separator. */
	send_str(a, "PING\r\r\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	send_str(a, "PING\n");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(empty_and_blank_lines_get_no_reply)
{
	struct client	*a = client_new();

	send_str(a, "\n\r\n   \n\t\t\n \t \r\n\n");
	expect_silence(a);
	send_str(a, "\n \nPING\n\n");
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(line_of_exactly_max_line_bytes_is_accepted)
{
	struct client	*a = client_new();
	char		*lf = padded_ping(KL_MAX_LINE_DEFAULT, "\n");
	char		*crlf = padded_ping(KL_MAX_LINE_DEFAULT, "\r\n");

	ck_assert_int_eq(cfg.max_line, KL_MAX_LINE_DEFAULT);
	send_str(a, lf);
	EXPECT_LINE(a, "OK PONG");
	send_str(a, crlf);
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(line_over_max_line_gets_toolong_and_next_line_is_answered)
{
	struct client	*a = client_new();
	char		*lf = padded_ping(KL_MAX_LINE_DEFAULT + 1, "\n");

	send_str(a, lf);
	send_str(a, "PING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	ck_assert_msg(strstr(line, "4096") != NULL, "TOOLONG text \"%s\" does "
	    "not name the limit", line);
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(crlf_line_over_max_line_gets_toolong)
{
	struct client	*a = client_new();
	char		*crlf;

	crlf = padded_ping(KL_MAX_LINE_DEFAULT + 1, "\r\n");
	send_str(a, crlf);
	send_str(a, "PING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(overlong_line_split_across_writes_gets_exactly_one_toolong)
{
	struct client	*a = client_new();
	char		 chunk[100];

	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 200; i++) {		/* 20000 bytes, no LF */
		send_bytes(a, chunk, sizeof(chunk));
		pump();
		rx_poll(a);
	}
	ck_assert_uint_eq(a->rlen, 0);		/* the LF decides */
	send_str(a, "\nPING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(line_just_under_max_split_across_writes_is_accepted)
{
	struct client	*a = client_new();
	char		*l = padded_ping(KL_MAX_LINE_DEFAULT, "\n");

	/* max - 1 bytes first: still a candidate; the LF completes it. */
	send_bytes(a, l, KL_MAX_LINE_DEFAULT - 1);
	pump();
	send_str(a, "\n");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(max_line_bytes_without_lf_already_make_the_line_too_long)
{
	struct client	*a = client_new();
	char		*l = padded_ping(KL_MAX_LINE_DEFAULT + 1, "\n");

	send_bytes(a, l, KL_MAX_LINE_DEFAULT);
	pump();
	send_str(a, "\nPING\n");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(each_overlong_line_in_one_write_gets_its_own_toolong)
{
	struct client	*a = client_new();
	char		*l = padded_ping(KL_MAX_LINE_DEFAULT + 50, "\n");
	size_t		 n = strlen(l);
	char		*all = talloc(3 * n + 16);

	memcpy(all, l, n);
	memcpy(all + n, "PING\n", 5);
	memcpy(all + n + 5, l, n);
	memcpy(all + 2 * n + 5, l, n);
	memcpy(all + 3 * n + 5, "PING\n", 5);
	send_bytes(a, all, 3 * n + 10);
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(configured_max_line_is_the_bound)
{
	struct client	*a;
	char		*ok, *over;

	restart_server("--max-line", "64", NULL);
	a = client_new();
	ok = padded_ping(64, "\n");
	over = padded_ping(65, "\n");
	send_str(a, ok);
	EXPECT_LINE(a, "OK PONG");
	send_str(a, over);
	EXPECT_PREFIX(a, "ERR TOOLONG ");
	ck_assert_ptr_nonnull(strstr(line, "64"));
}
END_TEST

static uint64_t	rng_state;

static uint64_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Replies PROTOCOL.md promises for buf: one per non-blank line. */
static size_t
expected_replies(const unsigned char *buf, size_t len, size_t max)
{
	size_t	n = 0, start = 0;

	for (size_t i = 0; i < len; i++) {
		size_t	l, j;

		if (buf[i] != '\n')
			continue;
		l = i - start;		/* without the LF */
		if (l + 1 > max) {
			n++;
		} else {
			if (l > 0 && buf[start + l - 1] == '\r')
				l--;
			for (j = 0; j < l; j++)
				if (buf[start + j] != ' ' &&
				    buf[start + j] != '\t')
					break;
			if (j < l)
				n++;
		}
		start = i + 1;
	}
	return n;
}

START_TEST(binary_garbage_only_gets_err_replies)
{
	struct client	*a = client_new();
	enum { GARBAGE = 48 * 1024 };
	unsigned char	*buf = talloc(GARBAGE);
	size_t		 want;

	rng_state = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < GARBAGE; i++) {
		uint64_t	r = rng();

		buf[i] = (unsigned char)r;
		if ((r >> 8) % 40 == 0)
			buf[i] = '\n';
		else if ((r >> 8) % 40 == 1)
			buf[i] = (r >> 16) & 1 ? '\0' : 0xff;
	}
	/* one overlong line of garbage without LF in the middle */
	for (size_t i = 20000; i < 20000 + 5000; i++)
		if (buf[i] == '\n')
			buf[i] = 0xfe;
	buf[GARBAGE - 1] = '\n';
	want = expected_replies(buf, GARBAGE, KL_MAX_LINE_DEFAULT);
	ck_assert_uint_gt(want, 500);
	send_bytes(a, (const char *)buf, GARBAGE);
	send_str(a, "PING\n");
	wait_lines(a, want + 1, WAIT_MS);
	for (size_t i = 0; i < want; i++) {
		const char	*l = take_line(a);

		ck_assert_msg(strncmp(l, "ERR ", 4) == 0,
		    "reply %zu to garbage is \"%s\"", i, l);
		for (const char *p = l; *p != '\0'; p++)
			ck_assert_msg((unsigned char)*p >= 0x20 &&
			    (unsigned char)*p != 0x7f, "reply %zu echoes a "
			    "control byte: \"%s\"", i, l);
	}
	EXPECT_LINE(a, "OK PONG");
	expect_silence(a);
}
END_TEST

START_TEST(half_closed_client_gets_replies_to_complete_lines)
{
	struct client	*a = client_new();

	send_str(a, "PING\nPING\nPI");
	ck_assert_int_eq(shutdown(a->fd, SHUT_WR), 0);
	EXPECT_LINE(a, "OK PONG");
	EXPECT_LINE(a, "OK PONG");
	expect_eof(a);		/* the unterminated "PI" is no request */
}
END_TEST

/* ---- waiting, granting, closing ---- */

START_TEST(waiting_lock_holds_back_later_lines_until_granted)
{
	struct client	*a = client_new(), *b = client_new();
	uint64_t	 t1, t2;

	send_str(a, "LOCK k\n");
	t1 = take_token(a);
	send_str(b, "LOCK k\nPING\n");
	expect_silence(b);		/* not even the PING */
	send_str(a, "UNLOCK k\n");
	EXPECT_LINE(a, "OK 1");
	t2 = take_token(b);
	ck_assert_uint_gt(t2, t1);
	EXPECT_LINE(b, "OK PONG");
	expect_silence(b);
}
END_TEST

START_TEST(holder_closing_grants_the_waiter_in_the_same_loop_run)
{
	struct client	*a = client_new(), *b = client_new();
	uint64_t	 t1;

	send_str(a, "LOCK k\n");
	t1 = take_token(a);
	send_str(b, "LOCK k\nPING\n");
	expect_silence(b);
	client_close(a);
	pump();				/* exactly one run */
	rx_poll(b);
	ck_assert_msg(unread_lines(b) == 2, "after one loop run: \"%.*s\"",
	    (int)(b->rlen - b->roff), b->rx + b->roff);
	ck_assert_uint_gt(take_token(b), t1);
	EXPECT_LINE(b, "OK PONG");
}
END_TEST

START_TEST(waiter_closing_withdraws_its_request)
{
	struct client	*a = client_new(), *b = client_new(), *c;
	json_t		*j;

	send_str(a, "LOCK k\n");
	take_token(a);
	send_str(b, "LOCK k\n");
	expect_silence(b);
	client_close(b);
	pump();
	send_str(a, "INFO k\n");
	j = take_json(a);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "waiters")), 0);
	json_decref(j);
	send_str(a, "UNLOCK k\n");
	EXPECT_LINE(a, "OK 1");
	c = client_new();
	send_str(c, "TRYLOCK k\n");
	take_token(c);
}
END_TEST

START_TEST(tokens_rise_across_grants_and_connections)
{
	struct client	*a = client_new(), *b = client_new();
	uint64_t	 last = 0, t;

	for (int i = 0; i < 20; i++) {
		struct client	*k = i % 2 ? a : b;

		send_str(k, "LOCK t\nUNLOCK t\n");
		t = take_token(k);
		EXPECT_LINE(k, "OK 1");
		ck_assert_uint_gt(t, last);
		last = t;
	}
}
END_TEST

START_TEST(timeout_reply_names_the_key_and_the_holder)
{
	struct client	*a = client_new(), *b = client_new();
	uint64_t	 start, elapsed;

	send_str(a, "LOCK tk\n");
	take_token(a);
	start = now_ms();
	send_str(b, "LOCK tk timeout=50\nPING\n");
	/* Run the loop blocking, bounded by a deadline. */
	while (unread_lines(b) < 1 && now_ms() < start + WAIT_MS) {
		struct timeval	tv = { 0, 100 * 1000 };

		event_base_loopexit(srv->base, &tv);
		ck_assert_int_ge(event_base_loop(srv->base, EVLOOP_ONCE), 0);
		rx_poll(b);
	}
	elapsed = now_ms() - start;
	EXPECT_PREFIX(b, "ERR TIMEOUT ");
	ck_assert_msg(strstr(line, "tk") != NULL, "\"%s\" does not name the "
	    "key", line);
	ck_assert_msg(strstr(line, "client 1") != NULL, "\"%s\" does not name "
	    "the holder", line);
	ck_assert_msg(elapsed >= 45 && elapsed < 1000, "TIMEOUT after %" PRIu64
	    " ms", elapsed);
	EXPECT_LINE(b, "OK PONG");
	/* the holder keeps its lock and the wait left nothing behind */
	send_str(a, "INFO tk\n");
	{
		json_t	*j = take_json(a);

		ck_assert_uint_eq(json_array_size(json_object_get(j,
		    "holders")), 1);
		ck_assert_uint_eq(json_array_size(json_object_get(j,
		    "waiters")), 0);
		json_decref(j);
	}
}
END_TEST

START_TEST(trylock_reply_names_the_holders_name)
{
	struct client	*a = client_new(), *b = client_new();

	send_str(a, "NAME backup\nLOCK nk\n");
	EXPECT_LINE(a, "OK");
	take_token(a);
	send_str(b, "TRYLOCK nk\n");
	EXPECT_PREFIX(b, "ERR LOCKED ");
	ck_assert_msg(strstr(line, "nk") != NULL && strstr(line, "client 1") !=
	    NULL && strstr(line, "backup") != NULL, "\"%s\" does not name key, "
	    "client and name", line);
}
END_TEST

START_TEST(unlock_of_a_key_not_held_gets_notheld)
{
	struct client	*a = client_new();

	send_str(a, "UNLOCK nope\n");
	EXPECT_PREFIX(a, "ERR NOTHELD ");
	ck_assert_ptr_nonnull(strstr(line, "nope"));
}
END_TEST

START_TEST(syntax_error_is_answered_and_the_connection_stays)
{
	struct client	*a = client_new();

	send_str(a, "FROB x\nLOCK\nPING\n");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	EXPECT_PREFIX(a, "ERR SYNTAX ");
	EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(quit_replies_ok_then_closes)
{
	struct client	*a = client_new();

	send_str(a, "QUIT\nPING\n");
	EXPECT_LINE(a, "OK");
	expect_eof(a);		/* and the PING is never answered */
}
END_TEST

START_TEST(quit_releases_the_locks_of_the_connection)
{
	struct client	*a = client_new(), *b = client_new();

	send_str(a, "LOCK q1 q2\n");
	take_token(a);
	send_str(b, "LOCK q2\n");
	expect_silence(b);
	send_str(a, "QUIT\n");
	EXPECT_LINE(a, "OK");
	expect_eof(a);
	take_token(b);
}
END_TEST

START_TEST(stats_shows_keys_0_after_all_connections_closed)
{
	struct client	*a = client_new(), *b = client_new();
	struct client	*c = client_new();
	json_t		*j;

	send_str(a, "LOCK s1 s2\n");
	take_token(a);
	send_str(b, "LOCK s1 timeout=60000\n");
	send_str(c, "LOCK s3 mode=shared ttl=60000\nLOCK s2\n");
	take_token(c);
	expect_silence(b);
	expect_silence(c);
	j = stats_now();
	ck_assert_int_eq(json_int(j, "keys"), 3);
	ck_assert_int_eq(json_int(j, "waiting"), 2);
	json_decref(j);
	client_close(a);
	client_close(b);
	client_close(c);
	pump();
	j = stats_now();
	ck_assert_int_eq(json_int(j, "keys"), 0);
	ck_assert_int_eq(json_int(j, "held"), 0);
	ck_assert_int_eq(json_int(j, "waiting"), 0);
	ck_assert_int_eq(json_int(j, "clients"), 1);
	json_decref(j);
	ck_assert_uint_eq(srv->stats.clients, 0);
}
END_TEST

START_TEST(shutdown_gives_a_waiting_client_err_shutdown)
{
	struct client	*a = client_new(), *b = client_new();

	send_str(a, "LOCK sk\n");
	take_token(a);
	send_str(b, "LOCK sk\nPING\n");
	expect_silence(b);
	conn_close_all(srv, "test shutdown");
	server_end_turn(srv);
	EXPECT_PREFIX(b, "ERR SHUTDOWN ");
	expect_eof(b);
	expect_eof(a);
	ck_assert_uint_eq(srv->stats.clients, 0);
}
END_TEST

START_TEST(shutdown_grants_nobody)
{
	struct client	*a = client_new(), *b = client_new();
	struct client	*c = client_new();

	/* b waits for x (held by a) and is queued on y; c waits on y behind
	 * b. Withdrawing b must not hand y to c while the server stops. */
	send_str(a, "LOCK x\n");
	take_token(a);
	send_str(b, "LOCK x y\n");
	expect_silence(b);
	send_str(c, "LOCK y\n");
	expect_silence(c);
	conn_close_all(srv, "test shutdown");
	server_end_turn(srv);
	EXPECT_PREFIX(b, "ERR SHUTDOWN ");
	EXPECT_PREFIX(c, "ERR SHUTDOWN ");
	expect_eof(b);
	expect_eof(c);
	expect_eof(a);
}
END_TEST

START_TEST(server_free_closes_open_connections)
{
	struct client	*a = client_new(), *b = client_new();

	send_str(a, "LOCK f\n");
	take_token(a);
	send_str(b, "LOCK f\n");
	expect_silence(b);
	stop_server();
	start_server(NULL, 0);
	rx_poll(a);
	rx_poll(b);
	ck_assert(a->eof);
	ck_assert(b->eof);
	EXPECT_PREFIX(b, "ERR SHUTDOWN ");
}
END_TEST

START_TEST(tokens_rise_across_a_server_restart)
{
	struct client	*a = client_new();
	uint64_t	 t1, t2;

	send_str(a, "LOCK r\n");
	t1 = take_token(a);
	stop_server();
	start_server(NULL, 0);	/* same state dir */
	client_close(a);
	a = client_new();
	send_str(a, "LOCK r\n");
	t2 = take_token(a);
	ck_assert_uint_gt(t2, t1);
}
END_TEST

/* ---- commands and their limits ---- */

/* Runs the loop until k has a line or the deadline passes. */
static void
wait_blocking(struct client *k, int timeout_ms)
{
	uint64_t	deadline = now_ms() + (uint64_t)timeout_ms;

	rx_poll(k);
	while (count_lines(k, 1) < 1 && !k->eof && now_ms() < deadline) {
		struct timeval	tv = { 0, 20 * 1000 };

		event_base_loopexit(srv->base, &tv);
		ck_assert_int_ge(event_base_loop(srv->base, EVLOOP_ONCE), 0);
		rx_poll(k);
	}
}

START_TEST(default_timeout_applies_to_lock_without_timeout)
{
	struct client	*a, *b;
	uint64_t	 start;

	restart_server("--default-timeout", "40", NULL);
	a = client_new();
	b = client_new();
	send_str(a, "LOCK dt\n");
	take_token(a);
	start = now_ms();
	send_str(b, "LOCK dt\n");
	wait_blocking(b, WAIT_MS);
	EXPECT_PREFIX(b, "ERR TIMEOUT ");
	ck_assert_uint_ge(now_ms() - start, 35);
	/* timeout=0 is a try, whatever the default */
	send_str(b, "LOCK dt timeout=0\n");
	EXPECT_PREFIX(b, "ERR LOCKED ");
}
END_TEST

START_TEST(timeout_over_max_timeout_gets_limit)
{
	struct client	*a;

	restart_server("--max-timeout", "100", NULL);
	a = client_new();
	send_str(a, "LOCK mt timeout=101\nLOCK mt timeout=100\n");
	EXPECT_PREFIX(a, "ERR LIMIT ");
	ck_assert_ptr_nonnull(strstr(line, "100"));
	take_token(a);
}
END_TEST

START_TEST(max_timeout_caps_a_lock_without_timeout)
{
	struct client	*a, *b;

	restart_server("--max-timeout", "40", NULL);
	a = client_new();
	b = client_new();
	send_str(a, "LOCK mc\n");
	take_token(a);
	send_str(b, "LOCK mc\n");
	wait_blocking(b, WAIT_MS);
	EXPECT_PREFIX(b, "ERR TIMEOUT ");
}
END_TEST

START_TEST(keys_at_max_keys_work_and_one_more_gets_limit)
{
	struct client	*a;

	restart_server("--max-keys", "3", NULL);
	a = client_new();
	send_str(a, "LOCK k1 k2 k3\nLOCK k4 k5 k6 k7\nUNLOCK k1 k2 k3 k4\n");
	take_token(a);
	EXPECT_PREFIX(a, "ERR LIMIT ");
	EXPECT_PREFIX(a, "ERR LIMIT ");
}
END_TEST

START_TEST(locks_at_max_locks_work_and_one_more_gets_limit)
{
	struct client	*a;

	restart_server("--max-locks", "2", NULL);
	a = client_new();
	send_str(a, "LOCK l1 l2\nLOCK l3\nUNLOCK l1\nLOCK l3\n");
	take_token(a);
	EXPECT_PREFIX(a, "ERR LIMIT ");
	EXPECT_LINE(a, "OK 1");
	take_token(a);
}
END_TEST

START_TEST(default_max_waiters_0_refuses_instead_of_queueing)
{
	struct client	*a, *b;
	json_t		*j;

	restart_server("--default-max-waiters", "0", NULL);
	a = client_new();
	b = client_new();
	send_str(a, "LOCK mw\n");
	take_token(a);
	send_str(b, "LOCK mw\n");
	EXPECT_PREFIX(b, "ERR BUSY ");
	ck_assert_ptr_nonnull(strstr(line, "client 1"));
	/* an explicit max_waiters= wins over the default */
	send_str(b, "LOCK mw max_waiters=1\n");
	expect_silence(b);
	j = stats_now();
	ck_assert_int_eq(json_int(j, "busy"), 1);
	ck_assert_int_eq(json_int(j, "waiting"), 1);
	json_decref(j);
}
END_TEST

START_TEST(ttl_expiry_grants_the_next_waiter)
{
	struct client	*a = client_new(), *b = client_new();
	uint64_t	 start;

	send_str(a, "LOCK tt ttl=40\n");
	take_token(a);
	start = now_ms();
	send_str(b, "LOCK tt\n");
	wait_blocking(b, WAIT_MS);
	take_token(b);
	ck_assert_uint_ge(now_ms() - start, 30);
	send_str(a, "UNLOCK tt\n");
	EXPECT_PREFIX(a, "ERR NOTHELD ");
}
END_TEST

START_TEST(refresh_restarts_the_ttl)
{
	struct client	*a = client_new();
	uint64_t	 end;

	send_str(a, "LOCK rf ttl=60\n");
	take_token(a);
	for (end = now_ms() + 150; now_ms() < end;) {
		send_str(a, "REFRESH rf ttl=60\n");
		EXPECT_LINE(a, "OK 1");
		pump();
		nap(a, 10);
	}
	send_str(a, "UNLOCK rf\n");
	EXPECT_LINE(a, "OK 1");
}
END_TEST

START_TEST(unlockall_releases_every_hold)
{
	struct client	*a = client_new();
	json_t		*j;

	send_str(a, "LOCK u1 u2\nLOCK u3 mode=shared\nUNLOCKALL\nUNLOCKALL\n");
	take_token(a);
	take_token(a);
	EXPECT_LINE(a, "OK 3");
	EXPECT_LINE(a, "OK 0");
	j = stats_now();
	ck_assert_int_eq(json_int(j, "keys"), 0);
	json_decref(j);
}
END_TEST

START_TEST(info_names_holders_and_waiters_by_client_id)
{
	struct client	*a = client_new(), *b = client_new();
	json_t		*j, *h, *w;

	send_str(a, "NAME holder\nLOCK ik\n");
	EXPECT_LINE(a, "OK");
	take_token(a);
	send_str(b, "LOCK ik\n");
	expect_silence(b);
	send_str(a, "INFO ik\n");
	j = take_json(a);
	h = json_array_get(json_object_get(j, "holders"), 0);
	w = json_array_get(json_object_get(j, "waiters"), 0);
	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(json_int(h, "client"), 1);
	ck_assert_str_eq(json_string_value(json_object_get(h, "name")),
	    "holder");
	ck_assert_int_eq(json_int(w, "client"), 2);
	ck_assert(json_is_null(json_object_get(w, "name")));
	json_decref(j);
}
END_TEST

START_TEST(auth_without_a_configured_secret_is_refused)
{
	struct client	*a = client_new();

	send_str(a, "AUTH anything\nPING\nSTATS\n");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_PREFIX(a, "OK {");
}
END_TEST

/* A server with dir/secret holding "s3cret". */
static void
start_with_secret(void)
{
	char	 path[PATH_MAX + 16];
	FILE	*f;

	snprintf(path, sizeof(path), "%s/secret", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs("s3cret\n", f);
	ck_assert_int_eq(fclose(f), 0);
	restart_server("--auth-file", path, NULL);
}

START_TEST(secret_configured_every_command_but_auth_ping_quit_needs_auth)
{
	struct client	*a;

	start_with_secret();
	a = client_new();
	send_str(a, "STATS\nLOCK x\nINFO x\nPING\nAUTH wrong\nQUIT\n");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_LINE(a, "OK PONG");
	EXPECT_PREFIX(a, "ERR AUTH ");
	EXPECT_LINE(a, "OK");
	expect_eof(a);
}
END_TEST

START_TEST(auth_with_the_configured_secret_is_accepted)
{
	struct client	*a;

	start_with_secret();
	a = client_new();
	send_str(a, "AUTH s3cret\nLOCK x\n");
	EXPECT_LINE(a, "OK");
	take_token(a);
}
END_TEST

/* ---- bounds ---- */

START_TEST(client_that_never_reads_is_closed_past_max_output)
{
	struct client	*a, *b;
	size_t		 len;
	char		*stats = repeat("STATS\n", 200, &len);
	uint64_t	 deadline;
	json_t		*j;

	restart_server("--max-output", "4096", NULL);
	a = client_new_buf(4096, 4096, 0);
	b = client_new();
	deadline = now_ms() + WAIT_MS;
	while (srv->stats.output_closes == 0 && now_ms() < deadline) {
		ssize_t	n = send(a->fd, stats, len, MSG_NOSIGNAL);

		ck_assert_msg(n >= 0 || errno == EAGAIN || errno == EPIPE ||
		    errno == ECONNRESET, "send: %s", strerror(errno));
		pump();
		nap(NULL, 1);
	}
	ck_assert_uint_eq(srv->stats.output_closes, 1);
	ck_assert_uint_eq(srv->stats.clients, 1);
	/* others are still served */
	send_str(b, "PING\n");
	EXPECT_LINE(b, "OK PONG");
	/* a sees whole replies, then the end */
	deadline = now_ms() + WAIT_MS;
	while (!a->eof && now_ms() < deadline) {
		pump();
		rx_poll(a);
	}
	ck_assert(a->eof);
	while (unread_lines(a) > 0)
		EXPECT_PREFIX(a, "OK {\"version\":");
	send_str(b, "STATS\n");
	j = take_json(b);
	ck_assert_int_eq(json_int(j, "output_closes"), 1);
	json_decref(j);
}
END_TEST

START_TEST(slow_reader_under_max_output_is_kept)
{
	struct client	*a;
	size_t		 len;
	char		*pings = repeat("PING\n", 400, &len);

	/* 400 replies of 8 bytes: 3200 bytes, under 4096 */
	restart_server("--max-output", "4096", NULL);
	a = client_new_buf(4096, 4096, 0);
	send_bytes(a, pings, len);
	for (int i = 0; i < 20; i++)
		pump();
	ck_assert_uint_eq(srv->stats.output_closes, 0);
	wait_lines(a, 400, WAIT_MS);
	for (int i = 0; i < 400; i++)
		EXPECT_LINE(a, "OK PONG");
}
END_TEST

START_TEST(input_behind_a_waiting_lock_is_bounded_and_answered_after_grant)
{
	enum { NPING = 40000 };
	struct client	*a = client_new();
	struct client	*b = client_new_buf(0, 0, 16384);
	size_t		 plen, len, sent;
	char		*pings = repeat("PING\n", NPING, &plen), *all;
	uint64_t	 deadline;

	all = talloc(plen + 16);
	len = (size_t)sprintf(all, "LOCK bk\n");
	memcpy(all + len, pings, plen);
	len += plen;

	send_str(a, "LOCK bk\n");
	take_token(a);
	sent = send_until_blocked(b, all, len);
	/* the server stopped reading: max-line + one read at most */
	ck_assert_msg(sent < len, "the server read all %zu bytes of a waiting "
	    "client", len);
	rx_poll(b);
	ck_assert_uint_eq(b->rlen, 0);
	ck_assert_uint_eq(srv->stats.clients, 2);

	send_str(a, "UNLOCK bk\n");
	EXPECT_LINE(a, "OK 1");
	deadline = now_ms() + 4 * WAIT_MS;
	while (sent < len && now_ms() < deadline) {
		ssize_t	n;

		n = send(b->fd, all + sent, len - sent, MSG_NOSIGNAL);
		if (n > 0)
			sent += (size_t)n;
		pump();
		rx_poll(b);
	}
	ck_assert_uint_eq(sent, len);
	wait_lines(b, 1 + NPING, 4 * WAIT_MS);
	take_token(b);
	for (int i = 0; i < NPING; i++)
		EXPECT_LINE(b, "OK PONG");
}
END_TEST

START_TEST(peer_closing_while_its_input_is_full_withdraws_its_wait)
{
	struct client	*a = client_new();
	struct client	*b = client_new_buf(0, 0, 16384);
	size_t		 len;
	char		*pings = repeat("PING\n", 40000, &len);
	json_t		*j;

	send_str(a, "LOCK pk\n");
	take_token(a);
	send_str(b, "LOCK pk\n");
	ck_assert_uint_lt(send_until_blocked(b, pings, len), len);
	client_close(b);
	for (int i = 0; i < 5; i++)
		pump();
	ck_assert_uint_eq(srv->stats.clients, 1);
	send_str(a, "INFO pk\n");
	j = take_json(a);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "waiters")), 0);
	json_decref(j);
}
END_TEST

static Suite *
conn_suite(void)
{
	Suite	*s = suite_create("conn");
	TCase	*tc;

	tc = tcase_create("framing");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, ping_gets_pong);
	tcase_add_test(tc, command_words_are_case_insensitive);
	tcase_add_test(tc, pipelined_1000_pings_get_1000_replies_in_order);
	tcase_add_test(tc, pipelined_requests_are_answered_in_request_order);
	tcase_add_test(tc, request_split_into_single_bytes_is_answered_once);
	tcase_add_test(tc, lock_split_into_single_bytes_is_granted);
	tcase_add_test(tc, crlf_line_is_answered_like_lf);
	tcase_add_test(tc, cr_split_from_its_lf_is_still_dropped);
	tcase_add_test(tc, only_the_cr_before_the_lf_is_dropped);
	tcase_add_test(tc, empty_and_blank_lines_get_no_reply);
	tcase_add_test(tc, line_of_exactly_max_line_bytes_is_accepted);
	tcase_add_test(tc,
	    line_over_max_line_gets_toolong_and_next_line_is_answered);
	tcase_add_test(tc, crlf_line_over_max_line_gets_toolong);
	tcase_add_test(tc,
	    overlong_line_split_across_writes_gets_exactly_one_toolong);
	tcase_add_test(tc, line_just_under_max_split_across_writes_is_accepted);
	tcase_add_test(tc,
	    max_line_bytes_without_lf_already_make_the_line_too_long);
	tcase_add_test(tc,
	    each_overlong_line_in_one_write_gets_its_own_toolong);
	tcase_add_test(tc, configured_max_line_is_the_bound);
	tcase_add_test(tc, binary_garbage_only_gets_err_replies);
	tcase_add_test(tc, half_closed_client_gets_replies_to_complete_lines);
	suite_add_tcase(s, tc);

	tc = tcase_create("waiting");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, waiting_lock_holds_back_later_lines_until_granted);
	tcase_add_test(tc,
	    holder_closing_grants_the_waiter_in_the_same_loop_run);
	tcase_add_test(tc, waiter_closing_withdraws_its_request);
	tcase_add_test(tc, tokens_rise_across_grants_and_connections);
	tcase_add_test(tc, timeout_reply_names_the_key_and_the_holder);
	tcase_add_test(tc, trylock_reply_names_the_holders_name);
	tcase_add_test(tc, unlock_of_a_key_not_held_gets_notheld);
	tcase_add_test(tc, syntax_error_is_answered_and_the_connection_stays);
	suite_add_tcase(s, tc);

	tc = tcase_create("closing");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, quit_replies_ok_then_closes);
	tcase_add_test(tc, quit_releases_the_locks_of_the_connection);
	tcase_add_test(tc, stats_shows_keys_0_after_all_connections_closed);
	tcase_add_test(tc, shutdown_gives_a_waiting_client_err_shutdown);
	tcase_add_test(tc, shutdown_grants_nobody);
	tcase_add_test(tc, server_free_closes_open_connections);
	tcase_add_test(tc, tokens_rise_across_a_server_restart);
	suite_add_tcase(s, tc);

	tc = tcase_create("commands");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, default_timeout_applies_to_lock_without_timeout);
	tcase_add_test(tc, timeout_over_max_timeout_gets_limit);
	tcase_add_test(tc, max_timeout_caps_a_lock_without_timeout);
	tcase_add_test(tc, keys_at_max_keys_work_and_one_more_gets_limit);
	tcase_add_test(tc, locks_at_max_locks_work_and_one_more_gets_limit);
	tcase_add_test(tc, default_max_waiters_0_refuses_instead_of_queueing);
	tcase_add_test(tc, ttl_expiry_grants_the_next_waiter);
	tcase_add_test(tc, refresh_restarts_the_ttl);
	tcase_add_test(tc, unlockall_releases_every_hold);
	tcase_add_test(tc, info_names_holders_and_waiters_by_client_id);
	tcase_add_test(tc, auth_without_a_configured_secret_is_refused);
	tcase_add_test(tc,
	    secret_configured_every_command_but_auth_ping_quit_needs_auth);
	tcase_add_test(tc, auth_with_the_configured_secret_is_accepted);
	suite_add_tcase(s, tc);

	tc = tcase_create("bounds");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, client_that_never_reads_is_closed_past_max_output);
	tcase_add_test(tc, slow_reader_under_max_output_is_kept);
	tcase_add_test(tc,
	    input_behind_a_waiting_lock_is_bounded_and_answered_after_grant);
	tcase_add_test(tc,
	    peer_closing_while_its_input_is_full_withdraws_its_wait);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr = srunner_create(conn_suite());
	int	 nfailed;

	srunner_run_all(sr, CK_NORMAL);
	nfailed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nfailed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
