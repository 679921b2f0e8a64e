/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What the check_conn program's theme files share: the server the fixture
 * in check_conn.c starts for every test, its state directory and config,
 * the socketpair clients and the helpers that drive the loop and read
 * replies, and one function per theme that adds its TCases to the suite,
 * in the order main() runs them.
 */
#ifndef CHECK_CONN_H
#define CHECK_CONN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <check.h>
#include <jansson.h>

#include "config.h"
#include "conn.h"

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

extern char		 cc_dir[PATH_MAX];
extern struct config	 cc_cfg;
extern struct server	*cc_srv;
extern char		 cc_line[LINE_MAX_TEST];	/* the last line read */
/* The transport the next cc_client_new() claims (CONN_UNIX unless a test
 * sets it: a socketpair is a unix socket either way). */
extern enum conn_transport cc_transport;

/* A TCase with the fixture and timeout seconds, added to s. */
TCase		*cc_tcase(Suite *s, const char *name, double timeout);

uint64_t	 cc_now_ms(void);
/* A server with the fixed test settings plus extra[0..nextra). */
void		 cc_start_server(const char *const *extra, int nextra);
void		 cc_stop_server(void);
/* Stops the server and starts one with the options first, ..., NULL. */
void		 cc_restart_server(const char *first, ...);
/* Memory for one test, freed by the fixture even when the test fails. */
void		*cc_talloc(size_t n);

/* A new client; sndbuf/rcvbuf > 0 shrink the socket buffers. */
struct client	*cc_client_new_buf(int srv_sndbuf, int cli_rcvbuf,
		    int cli_sndbuf);
struct client	*cc_client_new(void);
/* The test closes its end: the server sees the peer go away. */
void		 cc_client_close(struct client *k);
/* One non-blocking turn of the server's loop. */
void		 cc_pump(void);
/* Reads whatever has arrived for k. */
void		 cc_rx_poll(struct client *k);
/* Counts k's unread complete lines, stopping at max. */
size_t		 cc_count_lines(const struct client *k, size_t max);
size_t		 cc_unread_lines(const struct client *k);
/* Sleeps up to ms for k's end (or any client's) to become readable. */
void		 cc_nap(struct client *k, int ms);
/* Runs the loop until k has n unread lines (or EOF); fails at the
 * deadline. */
void		 cc_wait_lines(struct client *k, size_t n, int timeout_ms);
/* Takes the next line of k (without LF) into cc_line[]. */
const char	*cc_take_line(struct client *k);

#define EXPECT_LINE(k, want) do {					\
	const char *got_ = cc_take_line(k);				\
	ck_assert_msg(strcmp(got_, (want)) == 0, "reply \"%s\", want \"%s\"", \
	    got_, (want));						\
} while (0)

#define EXPECT_PREFIX(k, want) do {					\
	const char *got_ = cc_take_line(k);				\
	ck_assert_msg(strncmp(got_, (want), strlen(want)) == 0,	\
	    "reply \"%s\" does not start \"%s\"", got_, (want));	\
} while (0)

/* Takes an "OK N" line and returns N. */
uint64_t	 cc_take_token(struct client *k);
/* Runs the loop for QUIET_MS and checks nothing arrived for k. */
void		 cc_expect_silence(struct client *k);
/* Runs the loop until k sees EOF, with nothing unread before it. */
void		 cc_expect_eof(struct client *k);
/* Sends len bytes, running the loop (and reading k's replies) while the
 * socket is full. */
void		 cc_send_bytes(struct client *k, const char *buf, size_t len);
void		 cc_send_str(struct client *k, const char *s);
/* Sends as much as the peer takes; returns the bytes sent once no more
 * go in after several loop turns. */
size_t		 cc_send_until_blocked(struct client *k, const char *buf,
		    size_t len);
/* Parses an "OK {json}" reply of k. */
json_t		*cc_take_json(struct client *k);
json_int_t	 cc_json_int(json_t *o, const char *name);
/* The server's STATS as seen by a fresh connection, which then leaves. */
json_t		*cc_stats_now(void);
/* unit repeated times, in memory from cc_talloc(); its length in *lenp. */
char		*cc_repeat(const char *unit, size_t times, size_t *lenp);
/* "PING" padded with spaces to total bytes, ending in eol. */
char		*cc_padded_ping(size_t total, const char *eol);

/* framing (conn_framing.c) */
void		 cc_add_framing(Suite *s);
/* waiting, closing (conn_waiting.c) */
void		 cc_add_waiting(Suite *s);
/* commands, bounds (conn_commands.c) */
void		 cc_add_commands(Suite *s);
/* CANCEL, CLIENTS and KILL, out of memory (conn_cancel.c) */
void		 cc_add_cancel(Suite *s);

#endif /* CHECK_CONN_H */
